#!/usr/bin/env bash
# Load benchmark of `dispatcher serve` (docs/performance.md, "server"): CHATS chats launched
# concurrently through the API (bridge-only, a fake CLI adapter that waits), then CALLS bridge
# calls (read_file of the chat's own file, straight on the chats' bridge sockets) spread over
# them on THREADS client threads. Checks that every reply is its request's (no crossed
# replies) and that every call is in its chat's event log (no lost events); prints launch
# throughput and the bridge round trip's p50/p99.
#
# It is the test `load_concurrent_launches_and_bridge_calls` of tests/tests/server/load.rs
# at full size, in a release build (the test suite runs it test-sized).
set -euo pipefail
cd "$(dirname "$0")/.."

CHATS=${CHATS:-50}
CALLS=${CALLS:-10000}
THREADS=${THREADS:-2}

echo "bench-server: $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $CHATS chats, $CALLS bridge calls on $THREADS threads"
# The test drives the binaries beside it; the launches run under `sandboxer exec`, found
# beside the dispatcher binary.
cargo build --release --quiet -p sandboxer -p dispatcher --bins
BENCH_CHATS=$CHATS BENCH_CALLS=$CALLS BENCH_THREADS=$THREADS \
  cargo test --release -p agentworks-e2e --test server -- \
  --exact load::load_concurrent_launches_and_bridge_calls --nocapture --test-threads=1
