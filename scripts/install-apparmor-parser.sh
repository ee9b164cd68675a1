#!/usr/bin/env bash
# Installs an AppArmor 4 parser into .tools/apparmor (inside the checkout, ignored by git), so
# the test suite can check the syntax of the profile `sandboxer apparmor` renders
# (`abi <abi/4.0>`, `userns,`) without loading it into a kernel. The machine's own parser is
# used when it is version 4 or newer; otherwise (Debian 12 ships 3.0) the `apparmor` package
# of the next Debian release and the C library it needs are unpacked there, from the same
# Debian mirror this machine already uses, with a private apt state (nothing on the machine
# changes), and run through that C library's own loader.
# Writes .tools/apparmor/apparmor_parser (a wrapper) and .tools/apparmor/base (the profile
# includes). Idempotent. Needs root only for the download (apt); CI is root.
set -euo pipefail
cd "$(dirname "$0")/.."

DEST="$PWD/.tools/apparmor"
SUITE=trixie
WRAPPER="$DEST/apparmor_parser"

major() { "$1" --version 2>/dev/null | sed -n 's/.*version \([0-9]*\)\..*/\1/p' | head -1; }

if [[ -x "$WRAPPER" ]] && [[ "$(major "$WRAPPER")" -ge 4 ]]; then
  exit 0
fi

mkdir -p "$DEST"
if command -v apparmor_parser >/dev/null && [[ "$(major apparmor_parser)" -ge 4 ]]; then
  cat >"$WRAPPER" <<WRAP
#!/bin/sh
exec $(command -v apparmor_parser) --base /etc/apparmor.d "\$@"
WRAP
  chmod +x "$WRAPPER"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "install-apparmor-parser: no AppArmor 4 parser here and not root to fetch one" >&2
  exit 1
fi
uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[[ -n "$uri" ]] || uri=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
if [[ -z "$uri" ]]; then
  echo "install-apparmor-parser: cannot find this machine's Debian mirror in /etc/apt" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/x"
touch "$work/status"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $SUITE main" >"$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "Dir::State::status=$work/status"
  -o APT::Sandbox::User=root)
echo "install-apparmor-parser: fetching the AppArmor 4 parser ($SUITE) into $DEST"
apt-get "${apt_opts[@]}" update -qq
(cd "$work" && apt-get "${apt_opts[@]}" download -qq apparmor libc6 >/dev/null)
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/x"; done

rm -rf "$DEST/root"
mv "$work/x" "$DEST/root"
lib="$DEST/root/usr/lib/x86_64-linux-gnu"
cat >"$WRAPPER" <<WRAP
#!/bin/sh
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$DEST/root/usr/sbin/apparmor_parser" --base "$DEST/root/etc/apparmor.d" "\$@"
WRAP
chmod +x "$WRAPPER"
"$WRAPPER" --version | head -1
