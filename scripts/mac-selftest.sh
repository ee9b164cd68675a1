#!/usr/bin/env bash
# The sandbox contract live on a Mac: what Linux CI can only evaluate.
#
#  1. `dispatcher contract --all` on this Mac: the harness runs under `sandbox-exec -f` with
#     each CLI's real profile (file operations, Unix sockets, programs, signals), decided from
#     evidence, next to the evaluator's verdicts for the same profiles.
#  2. The launchers, live, each with its own evidence: a profile written by
#     `dispatcher profile` for a fresh chat, then under `sandbox-exec -f` that profile:
#     /usr/bin/open, a copied open, osascript, a copied osascript sending an Apple Event to
#     Terminal, osacompile, automator, shortcuts. An escape is proven by a file appearing in
#     a folder inside the protected state root, which only a process outside the sandbox can
#     write (Terminal running a .command file or a `do script`).
#  3. The autorun guard under the same profile: ~/.zshrc and ~/.ZSHRC, a LaunchAgent (two
#     spellings) cannot be written, ~/.zshrc can be read, an ordinary home file can be
#     written; inside the chat's runtime (a read-write grant) `git init`, a hook and a commit
#     work; in a repository under the home outside the grants, hooks and config cannot be
#     written while the rest of its git folder can.
#  4. `sysctl hw.cachelinesize` and a user lookup work (sysctls, the Mach allowlist); Docker
#     Desktop's socket under ~/Library/Containers is refused.
#
# Written on Linux and NOT run there: there is no Mac in the environment this was written in.
# On anything but macOS it says so and exits 77 (skipped). Terminal windows may open while
# it runs if (and only if) the sandbox lets a launcher through — which is then a failure.
#
# Usage: bash scripts/mac-selftest.sh [--release]   (exit 0 pass, 1 fail, 77 not a Mac)
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "$(uname -s)" != "Darwin" ]]; then
  echo "mac-selftest: this self-test runs on macOS only; not run here ($(uname -s))" >&2
  exit 77
fi
if [[ ! -x /usr/bin/sandbox-exec ]]; then
  echo "mac-selftest: /usr/bin/sandbox-exec is missing: no Seatbelt here, nothing to test" >&2
  exit 1
fi

profile=debug
if [[ "${1:-}" == "--release" ]]; then profile=release; fi
cargo build --quiet --workspace $([[ $profile == release ]] && echo --release)
D="$PWD/target/$profile/dispatcher"
[[ -d "$PWD/.tools/clis/bin" ]] && export PATH="$PWD/.tools/clis/bin:$PATH"

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok:   $*"; }

echo "== 1. dispatcher contract --all (live under sandbox-exec, and evaluated)"
if "$D" contract --all; then
  pass "contract"
else
  fail "contract (see the tables above)"
fi

echo "== 2. launchers, live"
work="$(mktemp -d "${TMPDIR:-/tmp}/aw-mac-selftest.XXXXXX")"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
state="$work/state"
"$D" init --state-root "$state" >/dev/null
"$D" --state-root "$state" workflow add wf >/dev/null
"$D" --state-root "$state" chat add chat >/dev/null
P="$work/chat.sb"
"$D" --state-root "$state" profile --cli claude --chat chat --workflow wf --target-os macos \
  --home "$HOME" --out "$P" >/dev/null
rt="$state/state/cli-runtimes/v1/chat"
evidence="$state/selftest-evidence"   # inside the protected state root
mkdir -p "$evidence"
token="AWTOKEN-mac-$$-$RANDOM"

SBX=(/usr/bin/sandbox-exec -f "$P")
if "${SBX[@]}" /usr/bin/true; then
  pass "the profile loads (sandbox-exec ran /usr/bin/true)"
else
  fail "sandbox-exec refuses the profile: nothing below means anything"
fi

# A .command file Terminal would run, outside any sandbox, if LaunchServices opened it.
cmdfile="$work/escape.command"
printf '#!/bin/sh\nprintf %%s %q > %q\n' "$token-open" "$evidence/open" >"$cmdfile"
chmod 755 "$cmdfile"

settle() { sleep 8; }   # Terminal takes a moment to start and run a script

"${SBX[@]}" /usr/bin/open "$cmdfile" 2>/dev/null || true
cp /usr/bin/open "$rt/open-copy"
"${SBX[@]}" "$rt/open-copy" "$cmdfile" 2>/dev/null || true
settle
if [[ -e "$evidence/open" ]]; then
  fail "open or a copied open ran a .command file outside the sandbox (evidence: $evidence/open)"
else
  pass "open and a copied open did not get LaunchServices to run anything"
fi

# osascript itself: `do shell script` would write into the runtime (writable inside).
"${SBX[@]}" /usr/bin/osascript -e "do shell script \"printf $token > '$rt/osascript.out'\"" 2>/dev/null || true
if [[ -s "$rt/osascript.out" ]]; then
  fail "osascript ran inside the sandbox (evidence: $rt/osascript.out)"
else
  pass "osascript is not executable inside the sandbox"
fi

# A copied osascript is executable, but its Apple Event to Terminal must not go out.
cp /usr/bin/osascript "$rt/osascript-copy"
"${SBX[@]}" "$rt/osascript-copy" -e \
  "tell application \"Terminal\" to do script \"printf $token-ae > '$evidence/appleevent'\"" 2>/dev/null || true
settle
if [[ -e "$evidence/appleevent" ]]; then
  fail "an Apple Event made Terminal run a command outside the sandbox (evidence: $evidence/appleevent)"
else
  pass "Apple Events from a copied osascript did not reach Terminal"
fi

# osacompile would write the compiled script into the runtime.
"${SBX[@]}" /usr/bin/osacompile -o "$rt/compiled.scpt" -e 'return 1' 2>/dev/null || true
if [[ -e "$rt/compiled.scpt" ]]; then
  fail "osacompile ran inside the sandbox (evidence: $rt/compiled.scpt)"
else
  pass "osacompile is not executable inside the sandbox"
fi

# automator and shortcuts have no harmless run that leaves a file; their exec must be refused
# by the sandbox itself (sandbox-exec reports it; exit 126 or "Operation not permitted").
for bin in /usr/bin/automator /usr/bin/shortcuts; do
  [[ -e $bin ]] || { echo "skip: $bin does not exist on this macOS"; continue; }
  set +e
  out="$("${SBX[@]}" "$bin" --help 2>&1)"
  code=$?
  set -e
  if [[ $code -eq 126 || $out == *"Operation not permitted"* ]]; then
    pass "$bin refused at exec ($code)"
  else
    fail "$bin ran inside the sandbox (exit $code)"
  fi
done

echo "== 3. the autorun guard, live"
# Every probe opens for writing without writing (`: >>`), so a guard that failed changes no
# content; a file it let be created is removed again and reported.
probe_write() {   # probe_write PATH: 0 when the sandbox let PATH be opened for writing
  "${SBX[@]}" /bin/sh -c ': >> "$1"' sh "$1" 2>/dev/null
}
refused_write() {   # refused_write WHAT PATH
  local existed=0
  [[ -e "$2" ]] && existed=1
  if probe_write "$2"; then
    fail "$1: $2 could be written inside the sandbox"
    [[ $existed -eq 0 ]] && rm -f "$2"
  else
    pass "$1: writing $2 refused"
  fi
}
refused_write "shell start-up file" "$HOME/.zshrc"
refused_write "shell start-up file, another case" "$HOME/.ZSHRC"
refused_write "LaunchAgent" "$HOME/Library/LaunchAgents/sbx-selftest-$token.plist"
refused_write "LaunchAgent, another case" "$HOME/library/launchagents/sbx-selftest-$token.plist"
if [[ -e "$HOME/.zshrc" ]]; then
  if "${SBX[@]}" /bin/cat "$HOME/.zshrc" >/dev/null; then
    pass "reading ~/.zshrc works"
  else
    fail "reading ~/.zshrc was refused"
  fi
else
  echo "skip: there is no ~/.zshrc to read"
fi
# Control: an ordinary file in the home is writable.
ordinary="$HOME/.sbx-selftest-$token"
if probe_write "$ordinary" && [[ -e "$ordinary" ]]; then
  pass "an ordinary file in the home is writable"
else
  fail "an ordinary file in the home could not be written: the guard is too wide"
fi
rm -f "$ordinary"

# Inside a read-write grant (the chat's runtime), a repository works as usual.
if "${SBX[@]}" /bin/sh -c 'cd "$1" && git init -q repo && printf "#!/bin/sh\n" > repo/.git/hooks/pre-commit && git -C repo -c user.name=t -c user.email=t@t commit -q --allow-empty -m t' sh "$rt" 2>/dev/null; then
  pass "git init, a hook and a commit inside a granted folder"
else
  fail "git init, a hook or a commit inside a granted folder was refused"
fi
# Outside the grants, a repository's hooks and config are read-only (made unconfined first:
# the control that the same writes work outside the sandbox).
outside="$(mktemp -d "$HOME/.sbx-selftest-repo.XXXXXX")"
git init -q "$outside"
if : >> "$outside/.git/hooks/pre-commit" && : >> "$outside/.git/config"; then
  pass "control: the outside repository's hooks and config are writable unconfined"
else
  fail "control: cannot write the outside repository's hooks unconfined"
fi
rm -f "$outside/.git/hooks/pre-commit"
refused_write "a hook outside the grants" "$outside/.git/hooks/pre-commit"
refused_write "a hook outside the grants, another case" "$outside/.GIT/HOOKS/post-checkout"
refused_write "git config outside the grants" "$outside/.git/config"
if probe_write "$outside/.git/sbx-selftest" && [[ -e "$outside/.git/sbx-selftest" ]]; then
  pass "the rest of an outside git folder stays writable"
else
  fail "the rest of an outside git folder was refused"
fi
rm -rf "$outside"

echo "== 4. services, sysctls and ways out, live"
# sysctl: every name but kern.procargs* is readable (mysqld reads hw.cachelinesize).
if "${SBX[@]}" /usr/sbin/sysctl -n hw.cachelinesize >/dev/null 2>&1; then
  pass "sysctl hw.cachelinesize readable"
else
  fail "sysctl hw.cachelinesize refused"
fi
# Mach allowlist: user lookup (opendirectoryd) and a DNS-free Keychain listing work.
if "${SBX[@]}" /usr/bin/id -un >/dev/null 2>&1; then
  pass "user lookup (opendirectoryd libinfo) works"
else
  fail "user lookup refused: the Mach allowlist misses a service"
fi
# Docker Desktop's real socket (the /var/run link resolves under ~/Library/Containers).
docker_sock="$HOME/Library/Containers/com.docker.docker/Data/docker.raw.sock"
if [[ -S $docker_sock ]]; then
  if "${SBX[@]}" /usr/bin/nc -U -z "$docker_sock" 2>/dev/null; then
    fail "Docker Desktop's socket $docker_sock reachable inside the sandbox"
  else
    pass "Docker Desktop's socket refused"
  fi
else
  echo "skip: no Docker Desktop socket at $docker_sock"
fi

if [[ $failures -gt 0 ]]; then
  echo "mac-selftest: $failures failure(s)"
  exit 1
fi
echo "mac-selftest: PASS"
