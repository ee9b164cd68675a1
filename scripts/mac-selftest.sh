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

if [[ $failures -gt 0 ]]; then
  echo "mac-selftest: $failures failure(s)"
  exit 1
fi
echo "mac-selftest: PASS"
