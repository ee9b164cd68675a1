#!/usr/bin/env bash
# What the dispatcher adds to a launch: `dispatcher launch --dry-run`, and a real launch of
# /bin/true through an adapter, against bare `sandboxer exec` of the same policy (the one the
# launch writes), all measured in the same run. Target (issue #4): the dispatcher adds at most
# 5 ms median to bare `sandboxer exec`.
#
# Each round runs every command with `hyperfine -N`, the commands' order rotated each round,
# so that load from other programs does not land on one command only; the medians are over
# every sample of every round.
#
# Usage: scripts/bench-dispatcher.sh   (RUNS, WARMUP, ROUNDS change the sample sizes;
# BASELINE_DISPATCHER=/path/to/another/dispatcher adds its real launch as one more row, to
# compare two builds in the same run)
# Needs hyperfine and python3 (scripts/setup-test-env.sh installs them). Uses its own
# temporary state root, removed at the end. It builds the release binaries first.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-20}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-15}

for tool in hyperfine python3 cargo; do
  command -v "$tool" >/dev/null || { echo "bench-dispatcher: $tool is missing (scripts/setup-test-env.sh)" >&2; exit 2; }
done

cargo build --release --quiet -p sandboxer -p dispatcher
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
D="$target_dir/release/dispatcher"
S="$target_dir/release/sandboxer"
work="$(mktemp -d /tmp/aw-bench-dispatcher.XXXXXX)"
trap 'rm -rf "$work"' EXIT
# shellcheck source=scripts/bench-true-adapter.sh
source scripts/bench-true-adapter.sh
bench_true_adapter "$work"
export SANDBOXER_BIN="$S"
launch() { # dispatcher-binary: the benchmark's launch command line
  echo "$1 --state-root $SR --profiles-dir $work/profiles launch --cli true --chat c --workflow w --mode full"
}
$(launch "$D") 2>/dev/null # writes the runtime's policy once
RUNTIME="$SR/state/cli-runtimes/v1/c"
POLICY="$RUNTIME/.agentworks/policy.toml"

cmds=(
  "$S exec --policy $POLICY --cwd $RUNTIME -- /bin/true"
  "$(launch "$D") --dry-run"
  "$(launch "$D")"
)
names=("sandboxer exec (bare)" "dispatcher launch --dry-run" "dispatcher launch (real)")
if [[ -n ${BASELINE_DISPATCHER:-} ]]; then
  cmds+=("$(launch "$BASELINE_DISPATCHER")")
  names+=("baseline dispatcher launch (real)")
fi

echo "bench-dispatcher: $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg);" \
  "$ROUNDS rounds of $RUNS runs per command, order rotated each round"
order=("${!cmds[@]}")
for ((round = 0; round < ROUNDS; round++)); do
  args=()
  for i in "${order[@]}"; do args+=(-n "$i" "${cmds[$i]}"); done
  hyperfine -N --style none --warmup "$WARMUP" --runs "$RUNS" \
    --export-json "$work/round-$round.json" "${args[@]}" >/dev/null 2>&1
  order=("${order[@]:1}" "${order[0]}")
done
echo "bench-dispatcher: load at the end $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$work" "${names[@]}" <<'PY'
import glob, json, os, statistics, sys
work, names = sys.argv[1], sys.argv[2:]
times = {}
for f in glob.glob(os.path.join(work, "round-*.json")):
    for r in json.load(open(f))["results"]:
        times.setdefault(int(r["command"]), []).extend(r["times"])
med = {i: statistics.median(t) * 1000 for i, t in times.items()}
base = med[0]
print(f"{'command':36} {'median':>9} {'x bare':>7} {'added':>9}")
for i, name in enumerate(names):
    print(f"{name:36} {med[i]:7.2f}ms {med[i] / base:7.2f} {med[i] - base:+8.2f}ms")
added = med[2] - base
print(f"target: the dispatcher adds at most 5 ms median to bare sandboxer exec: "
      f"{'ok' if added <= 5 else 'MISSED'} ({added:+.2f} ms)")
PY
