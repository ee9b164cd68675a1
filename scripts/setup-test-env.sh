#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine, idempotently:
#  - Debian packages: tmux (ways-out tests), bubblewrap + hyperfine (benchmarks), ripgrep,
#    util-linux (script, setpriv, unshare), python3 (socket/ptrace probes), curl (network
#    probes through the egress proxy);
#  - an unprivileged user `sbx-test`, so live sandbox tests run as root AND as a normal user;
#  - cargo-nextest when missing.
# Run as root (CI is root). As a normal user it only checks and says what is missing.
set -euo pipefail

TEST_USER=sbx-test
PACKAGES=(tmux bubblewrap hyperfine ripgrep util-linux python3 procps curl)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [[ $(id -u) -ne 0 ]]; then
  [[ ${#missing[@]} -eq 0 ]] || echo "setup-test-env: not root; missing packages: ${missing[*]} (run this script with sudo)" >&2
  id "$TEST_USER" >/dev/null 2>&1 || echo "setup-test-env: not root; user $TEST_USER missing: the unprivileged live tests will be skipped" >&2
  exit 0
fi

if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup-test-env: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! id "$TEST_USER" >/dev/null 2>&1; then
  echo "setup-test-env: creating user $TEST_USER"
  useradd --create-home --shell /bin/bash "$TEST_USER"
fi

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "setup-test-env: installing cargo-nextest"
  cargo install --locked cargo-nextest
fi
