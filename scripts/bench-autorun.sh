#!/usr/bin/env bash
# What the autorun guard costs a launch, in the benchmark fixture home (scripts/bench-home.sh:
# 10 000 files, 50 git repositories): `sandboxer exec -- /bin/true` with the guard on and off
# (the same policy but `[autorun] guard = false`), and `dispatcher launch` of /bin/true through
# an adapter; all measured in the same run. Target (docs/performance.md): the guard adds at
# most 1 ms to each.
#
# Each round runs every command with `hyperfine -N`, the commands' order rotated each round,
# so that load from other programs does not land on one command only; the medians are over
# every sample of every round.
#
# Usage: scripts/bench-autorun.sh   (RUNS, WARMUP, ROUNDS change the sample sizes;
# BASELINE_SANDBOXER and BASELINE_DISPATCHER, binaries of another build, add their launches
# as more rows: a build from before the guard gives the before/after figures; BENCH_HOME=DIR
# keeps the fixture home in DIR between runs)
# Needs hyperfine, git and python3 (scripts/setup-test-env.sh installs them). Everything else
# lives in a temp dir removed at the end. It builds the release binaries first.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-15}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-15}

for tool in hyperfine git python3 cargo; do
  command -v "$tool" >/dev/null || { echo "bench-autorun: $tool is missing (scripts/setup-test-env.sh)" >&2; exit 2; }
done

cargo build --release --quiet -p sandboxer -p dispatcher
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
S="$target_dir/release/sandboxer"
D="$target_dir/release/dispatcher"
TRUE=$(type -P true)
work=$(mktemp -d /tmp/aw-bench-autorun.XXXXXX)
trap 'rm -rf "$work"' EXIT
export HOME=${BENCH_HOME:-$work/home}
scripts/bench-home.sh "$HOME" >/dev/null

cat >"$work/on.toml" <<'EOF'
version = 1
base = "open"
[[protected]]
path = "~/.local/share/agentworks"
EOF
{ cat "$work/on.toml"; printf '[autorun]\nguard = false\n'; } >"$work/off.toml"

# A dispatcher state root outside the home (the product's would be inside it), and an adapter
# that runs /bin/true.
# shellcheck source=scripts/bench-true-adapter.sh
source scripts/bench-true-adapter.sh
bench_true_adapter "$work"
launch() { # dispatcher sandboxer
  echo "env SANDBOXER_BIN=$2 $1 --state-root $SR --profiles-dir $work/profiles launch --cli true --chat c --workflow w --mode full"
}
$(launch "$D" "$S") >/dev/null 2>&1 || { echo "bench-autorun: the dispatcher's launch fails here" >&2; exit 2; }

cmds=("$S exec --policy $work/off.toml -- $TRUE" "$S exec --policy $work/on.toml -- $TRUE"
  "$(launch "$D" "$S")")
names=("sandboxer exec, guard off" "sandboxer exec, guard on" "dispatcher launch")
if [[ -n ${BASELINE_SANDBOXER:-} ]]; then
  cmds+=("$BASELINE_SANDBOXER exec --policy $work/on.toml -- $TRUE")
  names+=("sandboxer exec, baseline build")
fi
if [[ -n ${BASELINE_DISPATCHER:-} ]]; then
  cmds+=("$(launch "$BASELINE_DISPATCHER" "${BASELINE_SANDBOXER:-$S}")")
  names+=("dispatcher launch, baseline build")
fi

echo "bench-autorun: $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg);" \
  "$ROUNDS rounds of $RUNS runs per command; home $HOME"
for ((round = 0; round < ROUNDS; round++)); do
  hyperfine -N --style none --warmup "$WARMUP" --runs "$RUNS" \
    --export-json "$work/r-$round.json" "${cmds[@]}" >/dev/null 2>&1
  cmds=("${cmds[@]:1}" "${cmds[0]}")
done
echo "bench-autorun: load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
"$S" exec --policy "$work/on.toml" --print-plan -- "$TRUE" >"$work/plan.json"

python3 - "$work" "${#cmds[@]}" "${names[@]}" <<'EOF'
import collections, glob, json, os, statistics, sys
work, n, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
times, order = {}, []
for r in range(len(glob.glob(os.path.join(work, "r-*.json")))):
    for res in json.load(open(os.path.join(work, f"r-{r}.json")))["results"]:
        if res["command"] not in times:
            order.append(res["command"])
        times.setdefault(res["command"], []).extend(res["times"])
med = [statistics.median(times[c]) * 1000 for c in order]
by = dict(zip(names, med))
off, on = by["sandboxer exec, guard off"], by["sandboxer exec, guard on"]
plan = json.load(open(os.path.join(work, "plan.json")))
kinds = collections.Counter(m["kind"] for m in plan["mounts"])
print(f"plan with the guard: {dict(kinds)} mount steps")
print(f"{'':40} {'median':>10}")
for name, ms in zip(names, med):
    print(f"{name:40} {ms:8.2f}ms")
added = on - off
print(f"the guard adds to sandboxer exec: {added:+.2f} ms ({on / off:.2f}x); target <= 1 ms:",
      "ok" if added <= 1 else "MISSED")
base = by.get("dispatcher launch, baseline build")
if base is not None:
    added = by["dispatcher launch"] - base
    print(f"dispatcher launch vs the baseline build: {added:+.2f} ms; target <= 1 ms:",
          "ok" if added <= 1 else "MISSED")
EOF
