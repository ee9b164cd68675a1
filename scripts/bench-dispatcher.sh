#!/usr/bin/env bash
# What the dispatcher adds to a launch: `dispatcher launch --dry-run`, and a real launch of
# /bin/true through an adapter, against bare `sandboxer exec` of the same policy, all in one
# hyperfine run (medians). Target: the dispatcher adds at most 5 ms median.
# Uses its own temporary state root; needs hyperfine (scripts/setup-test-env.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p sandboxer -p dispatcher
D="$PWD/target/release/dispatcher"
S="$PWD/target/release/sandboxer"
work="$(mktemp -d /tmp/aw-bench-dispatcher.XXXXXX)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/profiles/clis"
cat >"$work/profiles/clis/true.toml" <<'TOML'
version = 1
name = "true"
display_name = "/bin/true (benchmark)"
binary = "/bin/true"
install = "the OS"
checked_version = "any"
modes = ["full", "bridge-only"]
prompt_note_how = "not passed"
bridge_only_how = "benchmark only"
[config_home]
env = "TRUE_HOME"
[args]
full = []
bridge_only = []
TOML
SR="$work/sr"
"$D" init --state-root "$SR" >/dev/null
"$D" --state-root "$SR" workflow add w >/dev/null
"$D" --state-root "$SR" chat add c >/dev/null
export SANDBOXER_BIN="$S"
L=("$D" --state-root "$SR" --profiles-dir "$work/profiles" launch --cli true --chat c --workflow w --mode full)
"${L[@]}" 2>/dev/null   # writes the runtime's policy once
POLICY="$SR/state/cli-runtimes/v1/c/.agentworks/policy.toml"
hyperfine --warmup 20 --runs 200 -N --export-json "$work/h.json" \
  -n "sandboxer exec (bare)" "$S exec --policy $POLICY --cwd $SR/state/cli-runtimes/v1/c -- /bin/true" \
  -n "dispatcher launch --dry-run" "${L[*]} --dry-run" \
  -n "dispatcher launch (real)" "${L[*]}" >/dev/null
python3 - "$work/h.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
base = r["sandboxer exec (bare)"]["median"] * 1000
print(f"{'command':32} {'median':>10} {'vs bare':>9} {'added':>9}")
for name, x in r.items():
    m = x["median"] * 1000
    print(f"{name:32} {m:8.2f}ms {m/base:8.2f}x {m-base:+8.2f}ms")
added = r["dispatcher launch (real)"]["median"] * 1000 - base
print(f"target: the dispatcher adds at most 5 ms median: {'met' if added <= 5 else 'MISSED'} ({added:+.2f} ms)")
PY
