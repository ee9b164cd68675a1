#!/usr/bin/env bash
# Benchmarks `sandboxer exec` (release build) against baselines measured in the same run, and
# prints medians and ratios:
#   1. masks shape running /bin/true   vs  bwrap doing the same masks (and its own /dev, IPC
#      namespace, read-only /sys)  vs  bare /bin/true
#      (and the enforcer alone on the same plan, through the tests' exec-plan helper)
#   1b. the same masks with a network of the sandbox's own: `public` (a network namespace with
#      only lo, its listeners handed to the egress proxy) and `none` (the namespace
#      alone)  vs  bwrap doing the same masks with --unshare-net
#   2. landlock-only running /bin/true vs  bare /bin/true
#      (and the floor for any wrapper here: `sandboxer --version` alone, and, when a C compiler
#      is around, a minimal glibc program that only executes /bin/true)
#   3. a file-heavy workload (single-threaded rg over 20 000 generated files), confined vs bare;
#      and beside it rg's own time inside one masks sandbox against outside (hyperfine run in
#      it), which leaves the launch out and shows what confinement costs per file
# Targets (docs/performance.md): masks <= bwrap; masks with the network <= bwrap --unshare-net;
# landlock-only <= 1.5x bare; workload <= 1.05x.
#
# Usage: scripts/bench-exec.sh   (RUNS, WARMUP, ROUNDS, WORKLOAD_RUNS, WORKLOAD_ROUNDS change
# the sample sizes)
# Needs hyperfine, bwrap, rg, python3 (scripts/setup-test-env.sh installs them). Runs as the
# current user; everything it creates lives in a temp dir that is removed at the end. It
# builds the release binaries first.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-15}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-20}
WORKLOAD_RUNS=${WORKLOAD_RUNS:-3}
WORKLOAD_ROUNDS=${WORKLOAD_ROUNDS:-40}
INSIDE_ROUNDS=${INSIDE_ROUNDS:-8}

for tool in hyperfine bwrap rg python3 cargo; do
  command -v "$tool" >/dev/null || { echo "bench-exec: $tool is missing (scripts/setup-test-env.sh)" >&2; exit 2; }
done

cargo build --release --quiet -p sandboxer --bin sandboxer --example exec-plan \
  -p dispatcher --bin dispatcher --example egress_proxy
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
SBX="$target_dir/release/sandboxer"
# The test helper that runs a ready plan: the enforcer's share of `sandboxer exec`, without
# loading the policy or planning.
EXEC_PLAN="$target_dir/release/examples/exec-plan"
TRUE=$(type -P true)

WORK=$(mktemp -d /tmp/sbx-bench.XXXXXX)
proxy_pid=
cleanup() {
  exec 3>&- 2>/dev/null || true
  [[ -n $proxy_pid ]] && wait "$proxy_pid" 2>/dev/null
  [[ -n ${KEEP:-} ]] || rm -rf "$WORK"
}
trap cleanup EXIT
export HOME="$WORK/home"
STATE="$HOME/.local/share/agentworks"
RUNTIME="$STATE/state/cli-runtimes/v1/chat-1"
WF="$STATE/workspace-docs/wf1"
TREE="$HOME/tree"

# The live tests' layout: a protected state root, a granted runtime and workflow, a refused
# folder and a refused file missing at launch. The autorun guard is off: bubblewrap has no
# counterpart of its placeholders, and docs/performance.md ("The autorun guard") times it.
mkdir -p "$RUNTIME" "$STATE/state/cli-runtimes/v1/chat-2" "$WF/planning"
echo '{"token": "secret"}' > "$STATE/config.json"
cat > "$WORK/policy.toml" <<EOF
version = 1
base = "open"
[autorun]
guard = false
[[protected]]
path = "$STATE"
[[grant]]
path = "$RUNTIME"
access = "rw"
[[grant]]
path = "$WF"
access = "rw"
[[refuse]]
path = "$WF/planning"
[[refuse]]
path = "$WF/workflow.db"
EOF
# Nothing protected: the one policy the Landlock-only shape can enforce on a kernel without
# ABI 9 (pathname sockets), so its cost can be measured at all.
cat > "$WORK/open.toml" <<EOF
version = 1
base = "open"
[autorun]
guard = false
[linux]
ways_out = false
EOF

# The same policy with a network: `public` hands its listeners to the egress proxy, served
# for a chat of a state root of its own as a launch serves it (`--example egress_proxy`);
# `none` has none.
{ cat "$WORK/policy.toml"; printf '[network]\nmode = "public"\nproxy = "%s"\n' "$WORK/egress.sock"; } \
  >"$WORK/public.toml"
"$target_dir/release/dispatcher" init --state-root "$WORK/sr" >/dev/null
"$target_dir/release/dispatcher" --state-root "$WORK/sr" chat add bench >/dev/null
mkfifo "$WORK/proxy.in"
"$target_dir/release/examples/egress_proxy" --state-root "$WORK/sr" --chat bench \
  --policy "$WORK/public.toml" <"$WORK/proxy.in" >"$WORK/proxy.out" 2>&1 &
proxy_pid=$!
exec 3>"$WORK/proxy.in"
for _ in $(seq 100); do grep -q ready "$WORK/proxy.out" 2>/dev/null && break; sleep 0.05; done
grep -q ready "$WORK/proxy.out" || { echo "bench-exec: the egress proxy did not start:" >&2; cat "$WORK/proxy.out" >&2; exit 1; }
{ cat "$WORK/policy.toml"; printf '[network]\nmode = "none"\n'; } >"$WORK/none.toml"

# 20 000 files of ~2 KiB in 200 folders, one in fifty holding the needle.
python3 - "$TREE" <<'EOF'
import os, sys
root = sys.argv[1]
line = "lorem ipsum dolor sit amet consectetur adipiscing elit " * 4 + "\n"
for d in range(200):
    folder = os.path.join(root, f"d{d:03}")
    os.makedirs(folder)
    for f in range(100):
        n = d * 100 + f
        with open(os.path.join(folder, f"f{f:03}.txt"), "w") as out:
            out.write(line * 9)
            if n % 50 == 0:
                out.write("needle\n")
EOF

# bwrap doing what the masks plan does, step for step, generated from that very plan.
"$SBX" exec --policy "$WORK/policy.toml" --enforce masks --print-plan -- "$TRUE" > "$WORK/plan.json"
mapfile -t BWRAP < <(python3 - "$WORK/plan.json" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
# What every masks sandbox does besides the plan's steps, in bwrap's words: its own IPC
# namespace and /dev, /sys read-only (--proc makes /proc's knobs read-only by itself).
args = ["bwrap", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--dev-bind", "/", "/",
        "--dev", "/dev", "--ro-bind", "/sys", "/sys"]
covers = []
for step in plan["mounts"]:
    kind, path = step["kind"], step["path"]
    if kind == "pin":
        args += ["--bind", path, path]
    elif kind in ("cover", "refuse") and step["is_dir"]:
        args += ["--perms", "0111" if kind == "cover" else "0000", "--tmpfs", path]
        if kind == "cover":
            covers.append(path)
        else:
            args += ["--remount-ro", path]
    elif kind in ("cover", "refuse"):
        args += ["--ro-bind", "/dev/null", path]
    else:
        args += ["--bind" if step["access"] == "rw" else "--ro-bind", path, path]
for path in covers:
    args += ["--remount-ro", path]
args += ["--proc", "/proc", "--new-session", "--die-with-parent", "--"]
print("\n".join(args))
EOF
)
"${BWRAP[@]}" "$TRUE" || { echo "bench-exec: the bwrap baseline does not run here" >&2; exit 2; }
# bwrap's network namespace: its own, with lo brought up, as the sandbox's.
BWRAP_NET=("${BWRAP[0]}" --unshare-net "${BWRAP[@]:1}")
"${BWRAP_NET[@]}" "$TRUE" || { echo "bench-exec: bwrap --unshare-net does not run here" >&2; exit 2; }

# The floor for any wrapper that is a glibc program: its own start, then /bin/true's. On a VM
# where glibc's start-up is slow (CPUID traps), this alone is well above 1.5x /bin/true.
FLOOR=()
if command -v cc >/dev/null; then
  printf '#include <unistd.h>\nint main(int c, char **v) { (void)c; execv(v[1], v + 1); return 127; }\n' \
    > "$WORK/wrap.c"
  if cc -O2 -o "$WORK/wrap" "$WORK/wrap.c" 2>/dev/null; then
    FLOOR=("$WORK/wrap $TRUE")
  fi
fi

quote() { printf '%q ' "$@"; }
BW=$(quote "${BWRAP[@]}")
BW_NET=$(quote "${BWRAP_NET[@]}")
MASKS="$SBX exec --policy $WORK/policy.toml --enforce masks --"
PUBLIC="$SBX exec --policy $WORK/public.toml --enforce masks --"
NONE="$SBX exec --policy $WORK/none.toml --enforce masks --"
LLONLY="$SBX exec --policy $WORK/open.toml --enforce landlock-only --"
WORKLOAD="rg -j1 -c needle $TREE"

# Each comparison runs in many short rounds, the commands' order rotated each round, so that
# load from other programs (and the workload's own drift: page cache, CPU frequency) does not
# land on one command only; the medians are over every sample of every round (rounds x runs
# per command).
bench() { # name rounds runs warmup command...
  local name=$1 rounds=$2 runs=$3 warmup=$4
  shift 4
  local cmds=("$@") round
  for ((round = 0; round < rounds; round++)); do
    hyperfine -N --style none --warmup "$warmup" --runs "$runs" \
      --export-json "$WORK/$name-$round.json" "${cmds[@]}" >/dev/null 2>"$WORK/$name.err" || { cat "$WORK/$name.err" >&2; exit 1; }
    cmds=("${cmds[@]:1}" "${cmds[0]}")
  done
}

echo "bench-exec: $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg);" \
  "$ROUNDS rounds of $RUNS runs per command ($WORKLOAD_ROUNDS of $WORKLOAD_RUNS for the workload)"
bench masks "$ROUNDS" "$RUNS" "$WARMUP" \
  "$TRUE" "${BW}$TRUE" "$MASKS $TRUE" "$EXEC_PLAN $WORK/plan.json -- $TRUE"
bench network "$ROUNDS" "$RUNS" "$WARMUP" \
  "$TRUE" "${BW_NET}$TRUE" "$PUBLIC $TRUE" "$NONE $TRUE"
bench landlock "$ROUNDS" "$RUNS" "$WARMUP" "$TRUE" "$LLONLY $TRUE" "$SBX --version" "${FLOOR[@]}"
bench workload "$WORKLOAD_ROUNDS" "$WORKLOAD_RUNS" 1 "$WORKLOAD" "$MASKS $WORKLOAD" "$LLONLY $WORKLOAD"
# rg's own time, inside one masks sandbox and outside, alternating (hyperfine runs inside).
for ((round = 0; round < INSIDE_ROUNDS; round++)); do
  hyperfine -N --style none --warmup 1 --runs 5 --export-json "$WORK/outside-$round.json" \
    "$WORKLOAD" >/dev/null 2>&1
  $MASKS hyperfine -N --style none --warmup 1 --runs 5 \
    --export-json "$WORK/inside-$round.json" "$WORKLOAD" >/dev/null 2>&1
done
echo "bench-exec: load at the end $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$WORK" <<'EOF'
import glob, json, os, statistics, sys
work = sys.argv[1]
def medians(name):
    """Median per command over all rounds, in the order of the first round."""
    times, order = {}, []
    rounds = len(glob.glob(os.path.join(work, f"{name}-*.json")))
    for r in range(rounds):
        for res in json.load(open(os.path.join(work, f"{name}-{r}.json")))["results"]:
            if res["command"] not in times:
                order.append(res["command"])
            times.setdefault(res["command"], []).extend(res["times"])
    return [statistics.median(times[c]) * 1000 for c in order]
rows = []
true, bwrap, masks, enforcer = medians("masks")
rows.append(("masks: /bin/true bare", true, None, None))
rows.append(("masks: bwrap (same masks)", bwrap, true, None))
rows.append(("masks: sandboxer exec", masks, true, ("vs bwrap", masks / bwrap, 1.0)))
rows.append(("masks: enforcer alone (same plan)", enforcer, true, ("vs bwrap", enforcer / bwrap, 1.0)))
true1, bwrap_net, public, none = medians("network")
rows.append(("network: /bin/true bare", true1, None, None))
rows.append(("network: bwrap --unshare-net (same masks)", bwrap_net, true1, None))
rows.append(("network: sandboxer exec, public (handoff)", public, true1, ("vs bwrap", public / bwrap_net, 1.0)))
rows.append(("network: sandboxer exec, none", none, true1, ("vs bwrap", none / bwrap_net, 1.0)))
true2, ll, version, *floor = medians("landlock")
rows.append(("landlock-only: /bin/true bare", true2, None, None))
rows.append(("landlock-only: sandboxer exec", ll, true2, ("vs bare", ll / true2, 1.5)))
rows.append(("landlock-only: sandboxer --version (start)", version, true2, None))
if floor:
    rows.append(("landlock-only: C wrapper exec'ing true (floor)", floor[0], true2, None))
bare, wm, wl = medians("workload")
rows.append(("workload: rg over 20 000 files, bare", bare, None, None))
rows.append(("workload: sandboxer exec (masks)", wm, bare, ("vs bare", wm / bare, 1.05)))
rows.append(("workload: sandboxer exec (landlock-only)", wl, bare, ("vs bare", wl / bare, 1.05)))
(outside,), (inside,) = medians("outside"), medians("inside")
rows.append(("workload: rg alone, outside", outside, None, None))
rows.append(("workload: rg alone, inside a masks sandbox", inside, outside, None))
print(f"{'':48} {'median':>10} {'x bare':>8}  target")
for name, ms, base, target in rows:
    ratio = f"{ms / base:8.2f}" if base else " " * 8
    verdict = ""
    if target:
        what, value, limit = target
        verdict = f"{what} {value:.2f} (<= {limit}) {'ok' if value <= limit else 'MISSED'}"
    print(f"{name:48} {ms:8.2f}ms {ratio}  {verdict}")
EOF
