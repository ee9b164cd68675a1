#!/usr/bin/env bash
# The real CLIs' start, confined against bare: for each of claude, codex, gemini, pi and
# opencode, `CLI --version` and one scripted tool turn (the CLI's own shell tool runs one
# command against the scripted model, docs/scripted-model.md), each run bare and under
# `sandboxer exec` with the very policy, arguments, environment and files `dispatcher launch`
# uses (taken from `dispatcher launch --dry-run --json`). Beside them, `sandboxer exec` of the
# same policy running /bin/true: the launch's own share of the difference. Target
# (docs/performance.md): confined <= 1.05x bare or bare + 5 ms.
#
# Each comparison runs in rounds of `hyperfine -N`, the commands' order rotated each round, so
# that load from other programs does not land on one command only; the medians are over every
# sample of every round.
#
# Usage: scripts/bench-clis.sh [CLI...]   (default: all five; RUNS, ROUNDS, TURN_RUNS,
# TURN_ROUNDS change the sample sizes; BASELINE_SANDBOXER=/path/to/another/sandboxer adds its
# confined runs as one more row, to compare two builds in the same run)
# Needs hyperfine, python3 and the CLIs in .tools/clis/bin (scripts/install-clis.sh). HOME is a
# temporary folder (the CLIs never see the real one), removed at the end with the state root.
# It builds the release binaries first.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-5}
ROUNDS=${ROUNDS:-4}
TURN_RUNS=${TURN_RUNS:-2}
TURN_ROUNDS=${TURN_ROUNDS:-3}
CLIS=("$@")
[[ ${#CLIS[@]} -gt 0 ]] || CLIS=(claude codex gemini pi opencode)

for tool in hyperfine python3 cargo; do
  command -v "$tool" >/dev/null || { echo "bench-clis: $tool is missing (scripts/setup-test-env.sh)" >&2; exit 2; }
done
BIN="$PWD/.tools/clis/bin"
for cli in "${CLIS[@]}"; do
  [[ -x $BIN/$cli ]] || { echo "bench-clis: $BIN/$cli is missing (scripts/install-clis.sh)" >&2; exit 2; }
done

cargo build --release --quiet -p sandboxer -p dispatcher --example egress_proxy
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
D="$target_dir/release/dispatcher"
S="$target_dir/release/sandboxer"
PROXY="$target_dir/release/examples/egress_proxy"
export SANDBOXER_BIN="$S"

work=$(mktemp -d /tmp/aw-bench-clis.XXXXXX)
model_pid=
proxy_pids=()
proxy_fds=()
cleanup() {
  [[ -n $model_pid ]] && kill "$model_pid" 2>/dev/null
  # Each egress proxy serves until its stdin (a fifo held open here) closes.
  for fd in "${proxy_fds[@]}"; do eval "exec $fd>&-"; done
  for pid in "${proxy_pids[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
export HOME="$work/home"
mkdir -p "$HOME"
export PATH="$BIN:$PATH"
SR="$work/sr"
"$D" init --state-root "$SR" >/dev/null
"$D" --state-root "$SR" workflow add w >/dev/null

"$D" scripted-model --record "$work/model.jsonl" >"$work/model.addr" 2>"$work/model.log" &
model_pid=$!
for _ in $(seq 50); do [[ -s $work/model.addr ]] && break; sleep 0.1; done
BASE="http://$(head -1 "$work/model.addr")"

# Per CLI, from the dry run: the launch's files written as the launch writes them, its
# environment (CLI.env, sourced), and the commands (CLI.cmds, one per line, shell-quoted):
# bare and confined `--version`, bare and confined turn, confined /bin/true.
PROMPT=$'A benchmark turn.\nAGENTWORKS-RUN: echo turn-ok > bench-marker.txt\nThat is all.'
for cli in "${CLIS[@]}"; do
  "$D" --state-root "$SR" chat add "$cli" >/dev/null
  "$D" --state-root "$SR" launch --cli "$cli" --chat "$cli" --workflow w --mode full \
    --headless --model-endpoint "$BASE" --dry-run --json -- "$PROMPT" >"$work/$cli.json"
  python3 - "$work" "$cli" "${BASELINE_SANDBOXER:-}" <<'EOF'
import json, os, shlex, sys
work, cli, baseline = sys.argv[1:4]
launch = json.load(open(os.path.join(work, f"{cli}.json")))
for f in launch["files"]:
    if "content" in f:  # a login copied from the home: there is none here
        os.makedirs(os.path.dirname(f["path"]), exist_ok=True)
        with open(f["path"], "w") as out:
            out.write(f["content"])
        os.chmod(f["path"], f["mode"])
argv, cli_argv = launch["argv"], launch["cli_argv"]
sandbox = argv[: len(argv) - len(cli_argv)]
assert sandbox[-1] == "--" and argv[len(sandbox):] == cli_argv, argv
q = lambda words: " ".join(shlex.quote(w) for w in words)
version = [cli_argv[0], "--version"]
with open(os.path.join(work, f"{cli}.env"), "w") as out:
    out.writelines(f"export {k}={shlex.quote(v)}\n" for k, v in launch["env_set"].items())
    out.writelines(f"unset {k}\n" for k in launch["env_removed"])
    out.write(f"cd {shlex.quote(launch['cwd'])}\n")
cmds = [version, sandbox + version, cli_argv, argv, sandbox + ["/bin/true"]]
if baseline:
    cmds += [[baseline] + sandbox[1:] + version, [baseline] + argv[1:]]
with open(os.path.join(work, f"{cli}.cmds"), "w") as out:
    out.writelines(q(c).replace("\n", "\\n") + "\n" for c in cmds)
with open(os.path.join(work, f"{cli}.policy"), "w") as out:
    out.write(sandbox[sandbox.index("--policy") + 1])
EOF
  # The chat's egress proxy, served as the launch serves it (the policy's `[network] proxy`).
  mkfifo "$work/$cli.proxy.in"
  "$PROXY" --state-root "$SR" --chat "$cli" --policy "$(cat "$work/$cli.policy")" \
    <"$work/$cli.proxy.in" >"$work/$cli.proxy.out" 2>&1 &
  proxy_pids+=($!)
  fd=$((10 + ${#proxy_fds[@]}))
  eval "exec $fd>\"\$work/\$cli.proxy.in\""
  proxy_fds+=("$fd")
  for _ in $(seq 100); do grep -q ready "$work/$cli.proxy.out" 2>/dev/null && break; sleep 0.05; done
  grep -q ready "$work/$cli.proxy.out" || { echo "bench-clis: $cli's egress proxy did not start:" >&2; cat "$work/$cli.proxy.out" >&2; exit 1; }
done

# One run of each turn first: the CLI's shell tool must have written the marker, bare and
# confined, or the timings would be of a failure.
cmd() { # CLI N: the Nth command line of CLI.cmds, newlines restored
  sed -n "$2p" "$work/$1.cmds" | sed 's/\\n/\n/g'
}
for cli in "${CLIS[@]}"; do
  for n in 3 4; do
    (
      # shellcheck source=/dev/null
      source "$work/$cli.env"
      rm -f bench-marker.txt
      eval "$(cmd "$cli" "$n")" </dev/null >"$work/$cli-check.log" 2>&1 || true
      [[ $(cat bench-marker.txt 2>/dev/null) == turn-ok ]]
    ) || { echo "bench-clis: $cli's turn ($( ((n == 3)) && echo bare || echo confined)) did not run its tool; $work/$cli-check.log:" >&2; tail -20 "$work/$cli-check.log" >&2; exit 1; }
  done
done

bench() { # name rounds runs command...
  local name=$1 rounds=$2 runs=$3
  shift 3
  local cmds=("$@") round
  for ((round = 0; round < rounds; round++)); do
    hyperfine -N --style none --warmup 1 --runs "$runs" --export-json "$work/$name-$round.json" \
      "${cmds[@]}" >/dev/null 2>&1 || { echo "bench-clis: $name failed" >&2; return 1; }
    cmds=("${cmds[@]:1}" "${cmds[0]}")
  done
}

echo "bench-clis: $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg);" \
  "--version: $ROUNDS rounds of $RUNS runs, turn: $TURN_ROUNDS rounds of $TURN_RUNS runs"
for cli in "${CLIS[@]}"; do
  (
    # shellcheck source=/dev/null
    source "$work/$cli.env"
    version=("$(cmd "$cli" 1)" "$(cmd "$cli" 2)" "$(cmd "$cli" 5)")
    turn=("$(cmd "$cli" 3)" "$(cmd "$cli" 4)")
    if [[ -n ${BASELINE_SANDBOXER:-} ]]; then
      version+=("$(cmd "$cli" 6)")
      turn+=("$(cmd "$cli" 7)")
    fi
    bench "$cli-version" "$ROUNDS" "$RUNS" "${version[@]}"
    bench "$cli-turn" "$TURN_ROUNDS" "$TURN_RUNS" "${turn[@]}"
  )
  echo "bench-clis: $cli done, load $(cut -d' ' -f1-3 /proc/loadavg)"
done

python3 - "$work" "${BASELINE_SANDBOXER:+baseline}" "${CLIS[@]}" <<'EOF'
import glob, json, os, statistics, sys
work, baseline, clis = sys.argv[1], sys.argv[2], sys.argv[3:]
def medians(name):
    """Median per command over all rounds, in the order of the first round."""
    times, order = {}, []
    for r in range(len(glob.glob(os.path.join(work, f"{name}-*.json")))):
        path = os.path.join(work, f"{name}-{r}.json")
        for res in json.load(open(path))["results"]:
            if res["command"] not in times:
                order.append(res["command"])
            times.setdefault(res["command"], []).extend(res["times"])
    return [statistics.median(times[c]) * 1000 for c in order]
print(f"{'':22} {'bare':>10} {'confined':>10} {'delta':>9} {'ratio':>6}  target (<= 1.05x or +5 ms)")
for cli in clis:
    for kind in ("version", "turn"):
        bare, confined, *rest = medians(f"{cli}-{kind}")
        rows = [("", confined)]
        if kind == "version":
            true, *rest = rest
        if rest:
            rows.append((" baseline", rest[0]))
        for label, ms in rows:
            delta, ratio = ms - bare, ms / bare
            ok = "ok" if ratio <= 1.05 or delta <= 5 else "MISSED"
            print(f"{cli + ' ' + kind + label:22} {bare:8.1f}ms {ms:8.1f}ms {delta:+7.1f}ms {ratio:6.3f}  {ok}")
        if kind == "version":
            print(f"{cli + ' /bin/true':22} {'':10} {true:8.1f}ms   (the launch alone, same policy)")
EOF
