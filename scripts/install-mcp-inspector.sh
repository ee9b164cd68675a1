#!/usr/bin/env bash
# Installs the MCP Inspector (the reference MCP client's CLI) from the npm registry into
# .tools/mcp-inspector (inside the checkout, ignored by git), pinned, for the bridge test that
# drives the shim with a client we did not write (tests/tests/bridge/inspector.rs,
# the_mcp_inspector_drives_the_shim). Idempotent; prints the installed version.
# The package declares node >= 22.19; its CLI (the part the test uses) runs on the Node 20
# of this machine, so the engine check is advisory here (npm warns, does not refuse).
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX="$PWD/.tools/mcp-inspector"
PINNED="@modelcontextprotocol/inspector@2.12.0"

if ! command -v npm >/dev/null 2>&1; then
  echo "install-mcp-inspector: npm is missing; install Node.js 20+ and npm first" >&2
  exit 1
fi

stamp="$PREFIX/.installed"
if [[ ! -f $stamp || "$(cat "$stamp")" != "$PINNED" ]]; then
  mkdir -p "$PREFIX"
  npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "$PINNED"
  printf '%s\n' "$PINNED" >"$stamp"
fi

printf 'mcp-inspector %s\n' "$(timeout 60 node "$PREFIX/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js" --cli --version 2>&1 | head -n1 || echo 'failed to start')"
