#!/usr/bin/env bash
# The test command (README, .ci/run): set up the machine, then tests, lints and formatting.
# Live sandbox tests run against this kernel, as root and as the unprivileged user `sbx-test`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-test-env.sh
bash scripts/install-clis.sh          # the real CLIs, pinned, into .tools/clis
bash scripts/install-mcp-inspector.sh # a real MCP client for the bridge tests
bash scripts/install-apparmor-parser.sh # checks the AppArmor profile's syntax (never loaded)
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
bash scripts/check-macos-build.sh     # the Mac build still type-checks (no Mac runs here)
cargo nextest run --workspace --locked --profile ci
