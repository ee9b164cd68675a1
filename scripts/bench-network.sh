#!/usr/bin/env bash
# The sandbox's network against direct, on this machine (docs/network.md, "Cost"): a test
# server on 127.0.0.1 stands in for the outside, named in a `public` policy's `loopback`, as in
# tests/tests/network_live.rs. Two workloads, each timed by hyperfine outside any sandbox
# (direct) and inside one `sandboxer exec` of that policy (hyperfine runs inside, so the
# launch is left out: scripts/bench-exec.sh times that), in rounds that alternate the two:
#   1. a 100 MB download (curl, one request)
#   2. 1 000 small requests in sequence, a new connection each (one curl, a list of URLs; the
#      server closes every connection)
# Inside, three ways through the egress proxy (the real one, served as a launch serves it,
# every connection a chat event), which accepts on the listeners the sandbox's PID 1 handed it:
#   proxy    plain HTTP to the proxy the HTTP_PROXY variables name
#   connect  an HTTP CONNECT tunnel through it (how HTTPS goes)
#   port     the named loopback port itself, decided as a CONNECT to it
# Target (docs/performance.md): each <= 1.1x direct.
#
# Usage: scripts/bench-network.sh   (ROUNDS, RUNS, SMALL_RUNS, BIG_MB, SMALL change the sizes)
# Needs hyperfine, curl, python3 (scripts/setup-test-env.sh installs them). Runs as the current
# user; everything it creates lives in a temp dir that is removed at the end. It builds the
# release binaries first.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-6}
RUNS=${RUNS:-5}
SMALL_RUNS=${SMALL_RUNS:-2}
BIG_MB=${BIG_MB:-100}
SMALL=${SMALL:-1000}

for tool in hyperfine curl python3 cargo; do
  command -v "$tool" >/dev/null || { echo "bench-network: $tool is missing (scripts/setup-test-env.sh)" >&2; exit 2; }
done

cargo build --release --quiet -p sandboxer --bin sandboxer -p dispatcher --bin dispatcher \
  --example egress_proxy
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
SBX="$target_dir/release/sandboxer"
D="$target_dir/release/dispatcher"
PROXY="$target_dir/release/examples/egress_proxy"

WORK=$(mktemp -d /tmp/aw-bench-net.XXXXXX)
server_pid= proxy_pid=
cleanup() {
  exec 3>&- 2>/dev/null || true
  [[ -n $proxy_pid ]] && wait "$proxy_pid" 2>/dev/null
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
export HOME="$WORK/home"
mkdir -p "$HOME"
# Direct means direct: no proxy of the caller's.
unset HTTPS_PROXY HTTP_PROXY ALL_PROXY https_proxy http_proxy all_proxy NO_PROXY no_proxy

# The server: one connection at a time (the clients are sequential), each closed after its
# answer. /big is sent from a file with sendfile(2), /small is 13 bytes, /count says how many
# connections it has accepted.
head -c $((BIG_MB * 1024 * 1024)) /dev/zero >"$WORK/big"
cat >"$WORK/serve.py" <<'EOF'
import os, socket, sys
big_path, port_file = sys.argv[1], sys.argv[2]
big = os.open(big_path, os.O_RDONLY)
size = os.fstat(big).st_size
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 0))
listener.listen(64)
with open(port_file + ".tmp", "w") as f:
    f.write(str(listener.getsockname()[1]))
os.rename(port_file + ".tmp", port_file)
head = lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % n
accepted = 0
while True:
    conn, _ = listener.accept()
    accepted += 1
    request = b""
    while b"\r\n\r\n" not in request:
        chunk = conn.recv(65536)
        if not chunk:
            break
        request += chunk
    path = request.split(b" ", 2)[1] if request.count(b" ") >= 2 else b""
    try:
        if path.endswith(b"/big"):
            conn.sendall(head(size))
            offset = 0
            while offset < size:
                offset += os.sendfile(conn.fileno(), big, offset, size - offset)
        elif path.endswith(b"/count"):
            body = b"%d" % accepted
            conn.sendall(head(len(body)) + body)
        else:
            conn.sendall(head(13) + b"hello, world\n")
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    conn.close()
EOF
python3 "$WORK/serve.py" "$WORK/big" "$WORK/port" &
server_pid=$!
for _ in $(seq 100); do [[ -s $WORK/port ]] && break; sleep 0.05; done
PORT=$(cat "$WORK/port")
URL="http://127.0.0.1:$PORT"

# The policy a `public` launch gets, with the server's port named as a launch names a model
# endpoint on loopback; the proxy served for a chat of a state root, as a launch serves it.
SR="$WORK/sr"
"$D" init --state-root "$SR" >/dev/null
"$D" --state-root "$SR" chat add bench >/dev/null
EVENTS="$SR/state/events/bench.jsonl"
cat >"$WORK/net.toml" <<EOF
version = 1
base = "open"
[network]
mode = "public"
loopback = [$PORT]
proxy = "$WORK/egress.sock"
EOF
mkfifo "$WORK/proxy.in"
"$PROXY" --state-root "$SR" --chat bench --policy "$WORK/net.toml" <"$WORK/proxy.in" >"$WORK/proxy.out" 2>&1 &
proxy_pid=$!
exec 3>"$WORK/proxy.in"
for _ in $(seq 100); do grep -q ready "$WORK/proxy.out" 2>/dev/null && break; sleep 0.05; done
grep -q ready "$WORK/proxy.out" || { echo "bench-network: the proxy did not start:" >&2; cat "$WORK/proxy.out" >&2; exit 1; }

for ((i = 0; i < SMALL; i++)); do printf 'url = "%s/small"\noutput = "/dev/null"\n' "$URL"; done >"$WORK/small.cfg"
CURL="curl -sS --fail"
DIRECT_BIG="$CURL -o /dev/null $URL/big"
DIRECT_SMALL="$CURL -K $WORK/small.cfg"
INSIDE_BIG=("$CURL -o /dev/null $URL/big" "$CURL -p -o /dev/null $URL/big"
  "$CURL --noproxy * -o /dev/null $URL/big")
INSIDE_SMALL=("$CURL -K $WORK/small.cfg" "$CURL -p -K $WORK/small.cfg"
  "$CURL --noproxy * -K $WORK/small.cfg")
INSIDE="$SBX exec --policy $WORK/net.toml --"

# Each way checked once first: the bytes arrive whole, every small request on a connection of
# its own, and inside, through the proxy (its events).
count() { curl -s "$URL/count"; }
check() { # where command expected-connections
  local where=$1 cmd=$2 want=$3 before after events_before events_after out
  before=$(count)
  events_before=$(wc -l <"$EVENTS" 2>/dev/null || echo 0)
  if [[ $where == inside ]]; then
    out=$($INSIDE /bin/sh -c "$cmd -w '%{size_download}\n' | tail -1")
  else
    out=$(/bin/sh -c "$cmd -w '%{size_download}\n' | tail -1")
  fi
  after=$(count)
  events_after=$(wc -l <"$EVENTS" 2>/dev/null || echo 0)
  if ((after - before - 1 != want)); then
    echo "bench-network: $where \`$cmd\` made $((after - before - 1)) connections, not $want" >&2
    exit 1
  fi
  if [[ $want == 1 && $out != $((BIG_MB * 1024 * 1024)) ]]; then
    echo "bench-network: $where \`$cmd\` got $out bytes" >&2
    exit 1
  fi
  if [[ $where == inside ]] && ((events_after - events_before != want)); then
    echo "bench-network: $where \`$cmd\`: $((events_after - events_before)) proxy events, not $want" >&2
    exit 1
  fi
}
check direct "$DIRECT_BIG" 1
check direct "$DIRECT_SMALL" "$SMALL"
for c in "${INSIDE_BIG[@]}"; do check inside "${c/\*/\'*\'}" 1; done
for c in "${INSIDE_SMALL[@]}"; do check inside "${c/\*/\'*\'}" "$SMALL"; done

echo "bench-network: $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg);" \
  "$ROUNDS rounds of $RUNS runs ($SMALL_RUNS for the small requests) per command"
# Rounds alternate outside and inside, and which goes first, so that load from other programs
# does not land on one side only; medians are over every sample of every round.
hf() { # json runs command...
  local json=$1 runs=$2
  shift 2
  hyperfine -N --style none --warmup 1 --runs "$runs" --export-json "$json" "$@" >/dev/null 2>&1
}
for ((round = 0; round < ROUNDS; round++)); do
  outside() {
    hf "$WORK/big-direct-$round.json" "$RUNS" "$DIRECT_BIG"
    hf "$WORK/small-direct-$round.json" "$SMALL_RUNS" "$DIRECT_SMALL"
  }
  inside() {
    $INSIDE hyperfine -N --style none --warmup 1 --runs "$RUNS" \
      --export-json "$WORK/big-inside-$round.json" "${INSIDE_BIG[@]}" >/dev/null 2>&1
    $INSIDE hyperfine -N --style none --warmup 1 --runs "$SMALL_RUNS" \
      --export-json "$WORK/small-inside-$round.json" "${INSIDE_SMALL[@]}" >/dev/null 2>&1
  }
  if ((round % 2)); then inside; outside; else outside; inside; fi
done
echo "bench-network: load at the end $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$WORK" "$BIG_MB" "$SMALL" <<'EOF'
import glob, json, os, statistics, sys
work, big_mb, small = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def medians(name):
    """Median per command over all rounds, in the order of the first round."""
    times, order = {}, []
    for path in sorted(glob.glob(os.path.join(work, f"{name}-*.json"))):
        for res in json.load(open(path))["results"]:
            if res["command"] not in times:
                order.append(res["command"])
            times.setdefault(res["command"], []).extend(res["times"])
    return [statistics.median(times[c]) * 1000 for c in order]
print(f"{'':44} {'median':>10} {'x direct':>9}  target")
for load, what in (("big", f"{big_mb} MB download"), ("small", f"{small} small requests")):
    (direct,) = medians(f"{load}-direct")
    print(f"{what + ', direct':44} {direct:8.1f}ms")
    for way, ms in zip(("proxy", "connect", "port"), medians(f"{load}-inside")):
        ratio = ms / direct
        verdict = f"<= 1.1 {'ok' if ratio <= 1.1 else 'MISSED'}"
        print(f"{what + ', inside, ' + way:44} {ms:8.1f}ms {ratio:9.2f}  {verdict}")
EOF
