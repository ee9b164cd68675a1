#!/usr/bin/env bash
# Type-checks the whole workspace (every target: libraries, binaries, tests, examples) for
# macOS, so that Linux-only code (splice, namespaces, nix) cannot break the Mac build unseen:
# no Mac runs in CI. It installs the Rust standard library for x86_64-apple-darwin if needed.
# No C code is compiled for a check except pest's stack guard (psm), whose assembly needs a
# Mac's compiler: its build script is given /bin/true, which is harmless because nothing is
# linked by `cargo check`.
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-apple-darwin
if ! rustup target list --installed | grep -qx "$target"; then
  rustup target add "$target"
fi
CC_x86_64_apple_darwin=/bin/true AR_x86_64_apple_darwin=/bin/true \
  cargo check --workspace --all-targets --locked --target "$target"
