#!/usr/bin/env bash
# Installs the real coding CLIs from the npm registry into .tools/clis (inside the checkout,
# ignored by git), pinned, so tests and the contract run against known versions without
# touching the machine's global npm prefix. Prints each CLI's version.
# Cursor's agent and Antigravity (agy) are not on the npm registry: their adapters are
# covered by snapshot tests only (docs/clis.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX="$PWD/.tools/clis"

PINNED=(
  "@anthropic-ai/claude-code@2.1.332"
  "@openai/codex@0.171.0"
  "@google/gemini-cli@0.61.0"
  "@mariozechner/pi-coding-agent@0.73.1"
  "opencode-ai@1.18.33"
)

if ! command -v npm >/dev/null 2>&1; then
  echo "install-clis: npm is missing; install Node.js 20+ and npm first" >&2
  exit 1
fi

stamp="$PREFIX/.installed"
want="$(printf '%s\n' "${PINNED[@]}")"
mkdir -p "$PREFIX"
# The CLIs write their state folders at any start (--version included) and opencode's install
# script does too: all of it happens in a home of their own, removed afterwards, never the
# person's. npm keeps the person's config (a registry mirror, a token) and cache.
probe_home=$(mktemp -d "$PREFIX/probe-home.XXXXXX") # beside the CLIs: codex makes no helpers under /tmp
trap 'rm -rf "$probe_home"' EXIT
in_probe_home() {
  env -u XDG_CONFIG_HOME -u XDG_DATA_HOME -u XDG_STATE_HOME -u XDG_CACHE_HOME \
    -u CODEX_HOME -u CLAUDE_CONFIG_DIR -u GEMINI_CLI_HOME HOME="$probe_home" "$@"
}
if [[ ! -f $stamp || "$(cat "$stamp")" != "$want" ]]; then
  in_probe_home npm_config_userconfig="$HOME/.npmrc" npm_config_cache="$HOME/.npm" \
    npm install --global --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "${PINNED[@]}"
  printf '%s\n' "$want" >"$stamp"
fi

export PATH="$PREFIX/bin:$PATH"
for bin in claude codex gemini pi opencode; do
  # codex warns first when the checkout is under /tmp (its helpers are not made there).
  version=$(in_probe_home timeout 60 "$bin" --version 2>&1 | grep -v '^WARNING: ' | head -n1 ||
    echo 'failed to start')
  printf '%-10s %s\n' "$bin" "$version"
done
