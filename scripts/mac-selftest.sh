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
#     work; in a repository under the home outside the grants, nothing in its git folder can
#     be written (hooks, config, commondir, HEAD) while its working tree can.
#     Also `open -a`, a copied `shortcuts`, `launchctl bootstrap` and an NSUserUnixTask
#     (Foundation's UserScriptService), each leaving evidence only from outside the sandbox.
#     Under the guard: protected reads in other cases and /System/Volumes/Data spellings,
#     `mkdir wf/Planning` (a refused name in another spelling), `ln` out of the protected root.
#  4. `sysctl hw.cachelinesize` and a user lookup work (sysctls, the Mach allowlist); Docker
#     Desktop's socket under ~/Library/Containers is refused. Also Node's os.cpus(),
#     the CLI's own Keychain item, `bun --version` in the runtime (Bun opens every folder
#     above its working folder; the profile gives their names), another tab's tty, TIOCSTI from
#     a foreground launch into its own terminal, SysV shared memory (LMDB), and the chat's
#     tag on the denials in the unified log. Each with its control where one applies.
#  5. The network under the chat's profile (mode public): curl through the proxy's port
#     works, `curl --noproxy '*'` does not, another loopback port's listener is out of reach,
#     `nc -l` cannot bind, and `dscacheutil -q host` resolves nothing (no direct DNS).
#  6. The P0 scenario (`dispatcher test cli-p0`) for each of the five CLIs that speak a public
#     wire API: their own shell and write tools, driven by the scripted model, in a tmux and a
#     structured chat; the launchers there are `open` and `osascript`. One row per step.
#
# Every check is also a row of a table printed at the end (and on any early exit), which a
# person pastes back: its format is in docs/seatbelt.md, "The self-test's table".
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
section=0
rows=()
row() { rows+=("| $((${#rows[@]} + 1)) | $section | ${2//|//} | $1 |"); }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); row FAIL "$*"; }
pass() { echo "ok:   $*"; row ok "$*"; }
skip() { echo "skip: $*"; row skip "$*"; }
work=""
# The table (docs/seatbelt.md, "The self-test's table"), printed however the script ends.
finish() {
  [[ -n $work ]] && rm -rf "$work"
  echo
  echo "mac-selftest table: macOS $(sw_vers -productVersion) ($(sw_vers -buildVersion)), $(uname -m), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $profile build"
  echo "| # | section | check | result |"
  echo "|---|---|---|---|"
  local r
  for r in "${rows[@]}"; do echo "${r//$'\n'/ }"; done
}
trap finish EXIT

section=1
echo "== 1. dispatcher contract --all (live under sandbox-exec, and evaluated)"
if "$D" contract --all; then
  pass "contract"
else
  fail "contract (see the tables above)"
fi

section=2
echo "== 2. launchers, live"
work="$(mktemp -d "${TMPDIR:-/tmp}/aw-mac-selftest.XXXXXX")"
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
  pass "the profile loads on macOS $(sw_vers -productVersion) (sandbox-exec ran /usr/bin/true)"
else
  fail "sandbox-exec refuses the profile on macOS $(sw_vers -productVersion): nothing below means anything"
fi

# A .command file Terminal would run, outside any sandbox, if LaunchServices opened it.
cmdfile="$work/escape.command"
printf '#!/bin/sh\nprintf %%s %q > %q\n' "$token-open" "$evidence/open" >"$cmdfile"
chmod 755 "$cmdfile"

settle() { sleep 8; }   # Terminal takes a moment to start and run a script

"${SBX[@]}" /usr/bin/open "$cmdfile" 2>/dev/null || true
cp /usr/bin/open "$rt/open-copy"
"${SBX[@]}" "$rt/open-copy" "$cmdfile" 2>/dev/null || true
"${SBX[@]}" /usr/bin/open -a Terminal "$cmdfile" 2>/dev/null || true
"${SBX[@]}" "$rt/open-copy" -a Terminal "$cmdfile" 2>/dev/null || true
settle
if [[ -e "$evidence/open" ]]; then
  fail "open, open -a or a copied open ran a .command file outside the sandbox (evidence: $evidence/open)"
else
  pass "open, open -a and a copied open did not get LaunchServices to run anything"
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
  [[ -e $bin ]] || { skip "$bin does not exist on this macOS"; continue; }
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

# A copied shortcuts is executable; the Shortcuts daemon behind it must be out of reach.
if [[ -e /usr/bin/shortcuts ]]; then
  cp /usr/bin/shortcuts "$rt/shortcuts-copy"
  if "${SBX[@]}" "$rt/shortcuts-copy" list >/dev/null 2>&1; then
    fail "a copied shortcuts reached the Shortcuts daemon (shortcuts list worked)"
  else
    pass "a copied shortcuts cannot reach the Shortcuts daemon"
  fi
else
  skip "/usr/bin/shortcuts does not exist on this macOS"
fi

# launchctl bootstrap: a LaunchAgent loaded from inside would run outside the sandbox.
agent="$work/com.agentworks.selftest.$$.plist"
cat >"$agent" <<PLIST
<?xml version="1.0" encoding="UTF-8"?>
<plist version="1.0"><dict>
<key>Label</key><string>com.agentworks.selftest.$$</string>
<key>ProgramArguments</key><array><string>/bin/sh</string><string>-c</string>
<string>printf %s $token-launchd &gt; '$evidence/launchd'</string></array>
<key>RunAtLoad</key><true/>
</dict></plist>
PLIST
"${SBX[@]}" /bin/launchctl bootstrap "gui/$(id -u)" "$agent" 2>/dev/null || true
settle
if [[ -e "$evidence/launchd" ]]; then
  fail "launchctl bootstrap ran a job outside the sandbox (evidence: $evidence/launchd)"
else
  pass "launchctl bootstrap did not start a job"
fi
/bin/launchctl bootout "gui/$(id -u)/com.agentworks.selftest.$$" 2>/dev/null || true

# NSUserUnixTask: Foundation's UserScriptService runs a script outside the caller's sandbox.
# JavaScript for Automation through a copied osascript (the real one is refused at exec).
task="$work/task.sh"
printf '#!/bin/sh\nprintf %%s %q > %q\n' "$token-task" "$evidence/usertask" >"$task"
chmod 755 "$task"
"${SBX[@]}" "$rt/osascript-copy" -l JavaScript -e "
ObjC.import('Foundation');
var t = \$.NSUserUnixTask.alloc.initWithURLError(\$.NSURL.fileURLWithPath('$task'), null);
if (t) { t.executeWithArgumentsCompletionHandler(\$(), null); delay(3); }" >/dev/null 2>&1 || true
settle
if [[ -e "$evidence/usertask" ]]; then
  fail "an NSUserUnixTask ran a script outside the sandbox (evidence: $evidence/usertask)"
else
  pass "an NSUserUnixTask did not run its script"
fi

section=3
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
  skip "there is no ~/.zshrc to read"
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
refused_write "a commondir outside the grants (git would read config and hooks elsewhere)" "$outside/.git/commondir"
refused_write "the rest of an outside git folder (HEAD)" "$outside/.git/HEAD"
if probe_write "$outside/tracked.txt" && [[ -e "$outside/tracked.txt" ]]; then
  pass "the working tree of an outside repository stays writable"
else
  fail "the working tree of an outside repository was refused"
fi
rm -rf "$outside"

# The protected state root read in other spellings: APFS opens them, Seatbelt must refuse.
config="$state/config.json"
if [[ -r $config ]]; then
  upper="$(printf %s "$state" | tr '[:lower:]' '[:upper:]')/CONFIG.JSON"
  for spelled in "$config" "$upper" "/System/Volumes/Data$config" "/System/Volumes/Data$upper"; do
    if [[ ! -r $spelled ]]; then
      skip "control: $spelled is not readable unconfined"
    elif "${SBX[@]}" /bin/cat "$spelled" >/dev/null 2>&1; then
      fail "the protected $spelled was read inside the sandbox"
    else
      pass "reading the protected $spelled refused"
    fi
  done
else
  skip "no $config to read"
fi

# A refused name that does not exist yet, in another spelling (APFS would take it for the
# real one): refused; a name beside it: allowed (the control).
wfdir="$state/workspace-docs/wf"
taken=""
[[ -e "$wfdir/planning" ]] || taken=Planning
[[ -n $taken || -e "$wfdir/workflow.db" ]] || taken=Workflow.db
if [[ -z $taken ]]; then
  skip "planning and workflow.db both exist in $wfdir: another spelling cannot be told apart"
elif "${SBX[@]}" /bin/mkdir "$wfdir/$taken" 2>/dev/null; then
  fail "mkdir $wfdir/$taken worked inside the sandbox (a refused name in another spelling)"
  rmdir "$wfdir/$taken"
else
  pass "mkdir $wfdir/$taken refused (a refused name in another spelling)"
fi
if "${SBX[@]}" /bin/mkdir "$wfdir/planning2" 2>/dev/null; then
  pass "control: mkdir $wfdir/planning2 works"
  rmdir "$wfdir/planning2"
else
  fail "control: mkdir $wfdir/planning2 refused"
fi

# A hard link from the runtime to a protected secret would be a second name for it.
if [[ -e $config ]]; then
  if ln "$config" "$work/link-control" 2>/dev/null; then
    pass "control: config.json can be linked unconfined"
    rm -f "$work/link-control"
  else
    skip "control: config.json cannot be linked unconfined (another volume?)"
  fi
  if "${SBX[@]}" /bin/ln "$config" "$rt/config-link" 2>/dev/null; then
    fail "ln out of the protected root worked: $rt/config-link"
    rm -f "$rt/config-link"
  else
    pass "ln of config.json into the runtime refused"
  fi
fi

section=4
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
# Refused on purpose (profiles/macos/mach-services.toml [[refused]]): the clipboard, with
# the unconfined run as control; the LaunchServices map pbcopy also reads is allowed.
if printf 'x' | /usr/bin/pbcopy 2>/dev/null; then
  if "${SBX[@]}" /usr/bin/pbpaste >/dev/null 2>&1; then
    fail "pbpaste read the clipboard inside the sandbox"
  else
    pass "pbpaste refused (the pasteboard service), works unconfined"
  fi
else
  skip "pbcopy fails unconfined (no window session): the clipboard row is not run"
fi
# Live log streaming (diagnosticd) refused; `log show` of the person's own is not the point.
if ! /usr/bin/log stream --timeout 1 >/dev/null 2>&1; then
  skip "log stream fails unconfined: the diagnosticd row is not run"
elif "${SBX[@]}" /usr/bin/log stream --timeout 1 >/dev/null 2>&1; then
  fail "log stream ran inside the sandbox (com.apple.diagnosticd reachable)"
else
  pass "log stream refused (com.apple.diagnosticd), works unconfined"
fi
# Node: os.cpus() (host_processor_info), against its unconfined run. (DNS is section 5's.)
node_probe='const os=require("os");if(!os.cpus().length)process.exit(2)'
if command -v node >/dev/null && node -e "$node_probe" 2>/dev/null; then
  if "${SBX[@]}" "$(command -v node)" -e "$node_probe" 2>/dev/null; then
    pass "Node's os.cpus() works"
  else
    fail "Node's os.cpus() failed inside the sandbox (exit $?)"
  fi
else
  skip "no node here, or os.cpus() fails unconfined too"
fi
# The CLI's own Keychain item: Claude's login copied at launch (docs/clis.md, "The keychain").
if security find-generic-password -a "$USER" -s "Claude Code-credentials" >/dev/null 2>&1; then
  if "$D" --state-root "$state" launch --cli claude --chat chat --workflow wf --dry-run 2>/dev/null \
    | grep -q "Claude Code-credentials"; then
    pass "Claude's Keychain item is planned into the chat's config home (.credentials.json)"
  else
    fail "Claude's Keychain item is not planned into the chat (dispatcher launch --dry-run)"
  fi
  if "${SBX[@]}" /usr/bin/security find-generic-password -s "Claude Code-credentials" >/dev/null 2>&1; then
    pass "the Keychain (securityd) answers inside the sandbox"
  else
    fail "the Keychain (securityd) is out of reach inside the sandbox"
  fi
else
  skip "no Claude Code item in the Keychain (log in to Claude Code to check this)"
fi
# Bun in the runtime: it opens every folder above its working folder, and the ones inside the
# state root are not listed (docs/seatbelt.md, "Bun and the folders above a grant").
if command -v bun >/dev/null; then
  if "${SBX[@]}" /bin/sh -c 'cd "$1" && "$2" --version' sh "$rt" "$(command -v bun)" >/dev/null 2>&1; then
    pass "bun --version works with the runtime as its working folder"
  else
    fail "bun --version fails in the runtime (CouldntReadCurrentDirectory: this Bun needs its cwd's ancestors listed)"
  fi
else
  skip "no bun here"
fi
# Another tab's tty: refused; this script's own terminal (/dev/tty): the control.
own="$(tty 2>/dev/null || true)"
other=""
for t in /dev/ttys[0-9]*; do
  [[ $t != "$own" && -O $t && -w $t ]] && { other=$t; break; }
done
if [[ -z $other ]]; then
  skip "no other terminal of $USER is open (open a second tab to check this)"
elif "${SBX[@]}" /bin/sh -c ': >> "$1"' sh "$other" 2>/dev/null; then
  fail "another terminal $other could be opened for writing inside the sandbox"
else
  pass "another terminal $other refused"
fi
if [[ -n $own ]]; then
  if "${SBX[@]}" /bin/sh -c ': >> /dev/tty' 2>/dev/null; then
    pass "control: the own terminal (/dev/tty) opens"
  else
    fail "control: /dev/tty refused inside the sandbox"
  fi
fi
# The inherited terminal: write and ioctl on descriptors opened before the sandbox.
if [[ -t 0 && -t 1 ]]; then
  if "${SBX[@]}" /bin/sh -c 'stty size >/dev/null && printf "\r"'; then
    pass "the inherited terminal takes an ioctl (stty size) and a write"
  else
    fail "the inherited terminal refused an ioctl or a write inside the sandbox"
  fi
else
  skip "not run from a terminal: the inherited terminal is not checked"
fi
# TIOCSTI: a confined launch cannot type into the terminal it runs in, where the person's
# shell would run the input once the launch ends. The dispatcher gives the terminal up before
# sandbox-exec (docs/seatbelt.md, "Devices"); script(1) gives both runs a terminal of their
# own, the probe unconfined is the control.
sti_probe='import errno, fcntl, termios
def attempt(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
print("tty=" + attempt(lambda: open("/dev/tty", "rb", buffering=0).close()), "sti=" + attempt(lambda: fcntl.ioctl(0, termios.TIOCSTI, b"#")))'
mkdir -p "$work/profiles-sh"
cp -R profiles/. "$work/profiles-sh/"
cat >"$work/profiles-sh/clis/sh.toml" <<'TOML'
version = 1
name = "sh"
display_name = "POSIX shell (self-test)"
binary = "/bin/sh"
install = "the OS"
checked_version = "any"
modes = ["full", "bridge-only"]
prompt_note_how = "not passed"
bridge_only_how = "self-test only"
[config_home]
env = "SH_TEST_HOME"
[args]
full = []
bridge_only = []
TOML
sti_result() { tr -d '\r' | grep -o 'tty=[A-Za-z]* sti=[A-Za-z]*' | head -1 || true; }
sti_control=$(script -q /dev/null python3 -c "$sti_probe" </dev/null 2>&1 | sti_result)
sti_launch=$(script -q /dev/null "$D" --state-root "$state" --profiles-dir "$work/profiles-sh" \
  launch --cli sh --chat chat --workflow wf --mode full -- -c 'exec python3 -c "$0"' "$sti_probe" \
  </dev/null 2>&1 | sti_result)
if [[ $sti_control != "tty=ok sti=ok" ]]; then
  skip "TIOCSTI is not available unconfined here ($sti_control): the launch's check means nothing"
elif [[ $sti_launch == "tty=ENXIO sti=EACCES" ]]; then
  pass "a foreground launch cannot push input into its terminal ($sti_launch; control: $sti_control)"
else
  fail "a foreground launch's terminal: got '${sti_launch:-no result}', want tty=ENXIO sti=EACCES (control: $sti_control)"
fi
# SysV shared memory (LMDB's locks, PostgreSQL's initdb): create and remove a segment.
shm_probe='import ctypes,sys
libc=ctypes.CDLL(None)
i=libc.shmget(0,4096,0o1600)
sys.exit(1 if i<0 or libc.shmctl(i,0,None)!=0 else 0)'
if python3 -c 'import lmdb' 2>/dev/null; then
  lmdb_probe='import lmdb,sys; lmdb.open(sys.argv[1]).close()'
  if "${SBX[@]}" python3 -c "$lmdb_probe" "$rt/lmdb-probe" 2>/dev/null; then
    pass "an LMDB environment opens in the runtime"
  else
    fail "an LMDB environment cannot be opened in the runtime"
  fi
elif python3 -c "$shm_probe" 2>/dev/null; then
  if "${SBX[@]}" python3 -c "$shm_probe" 2>/dev/null; then
    pass "SysV shared memory (shmget/shmctl) works"
  else
    fail "SysV shared memory refused inside the sandbox"
  fi
else
  skip "python3 (with lmdb or ctypes) is not usable here"
fi
# Denials carry the chat's tag into the unified log, which `dispatcher chats events` reads.
"${SBX[@]}" /bin/cat "$state/config.json" >/dev/null 2>&1 || true
sleep 2
if /usr/bin/log show --last 1m --style compact \
  --predicate 'eventMessage ENDSWITH "[agentworks:chat]"' 2>/dev/null | grep -q "deny"; then
  pass "a denial in the unified log ends with the chat's tag [agentworks:chat]"
else
  fail "no denial tagged [agentworks:chat] in the unified log (docs/seatbelt.md, Denials as chat events)"
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
  skip "no Docker Desktop socket at $docker_sock"
fi

section=5
echo "== 5. the network (the chat's profile: mode public, its proxy's port on loopback)"
# The profile's own proxy port, as `dispatcher profile` planned it; a stand-in CONNECT proxy
# listens there (the dispatcher's proxy is tested on Linux; this checks what Seatbelt lets
# through to it and around it).
pport="$(grep -oE 'remote ip "localhost:[0-9]+"' "$P" | head -1 | grep -oE '[0-9]+$' || true)"
url=https://example.com
if [[ -z $pport ]]; then
  fail "the chat's profile names no proxy port (remote ip \"localhost:PORT\"): the network is not confined"
elif ! command -v python3 >/dev/null; then
  skip "no python3 for the stand-in proxy: the network rows are not run"
elif ! curl -s -o /dev/null --max-time 10 "$url"; then
  skip "control: $url is not reachable unconfined (no internet here): the network rows are not run"
else
  proxy_py='import socket,sys,threading
def pipe(a,b):
    try:
        while (d:=a.recv(65536)): b.sendall(d)
    except OSError: pass
    finally:
        for s in (a,b):
            try: s.shutdown(socket.SHUT_RDWR)
            except OSError: pass
def serve(c):
    head=b""
    while b"\r\n\r\n" not in head: head+=c.recv(4096)
    host,port=head.split()[1].decode().rsplit(":",1)
    u=socket.create_connection((host,int(port)))
    c.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
    threading.Thread(target=pipe,args=(u,c),daemon=True).start(); pipe(c,u)
l=socket.socket(); l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)
l.bind(("127.0.0.1",int(sys.argv[1]))); l.listen()
while True: threading.Thread(target=serve,args=(l.accept()[0],),daemon=True).start()'
  python3 -c "$proxy_py" "$pport" & proxy_pid=$!
  sleep 1
  if "${SBX[@]}" /usr/bin/curl -s -o /dev/null --max-time 20 -x "http://127.0.0.1:$pport" "$url"; then
    pass "curl through the proxy's port 127.0.0.1:$pport reaches $url"
  else
    fail "curl through the proxy's port 127.0.0.1:$pport cannot reach $url inside the sandbox"
  fi
  if "${SBX[@]}" /usr/bin/curl -s -o /dev/null --max-time 10 --noproxy '*' "$url"; then
    fail "curl --noproxy '*' reached $url directly inside the sandbox"
  else
    pass "curl --noproxy '*' $url refused (the control is the row above)"
  fi
  kill "$proxy_pid" 2>/dev/null || true
  # Another loopback port (a local service of the person's): reachable unconfined only.
  lport=$((pport == 65535 ? pport - 1 : pport + 1))
  /usr/bin/nc -l 127.0.0.1 "$lport" >/dev/null 2>&1 & listener_pid=$!
  sleep 1
  if /usr/bin/nc -z 127.0.0.1 "$lport" 2>/dev/null; then
    /usr/bin/nc -l 127.0.0.1 "$lport" >/dev/null 2>&1 & listener_pid2=$!
    sleep 1
    if "${SBX[@]}" /usr/bin/nc -z -w 3 127.0.0.1 "$lport" 2>/dev/null; then
      fail "a listener on 127.0.0.1:$lport (not the proxy's port) reachable inside the sandbox"
    else
      pass "a listener on 127.0.0.1:$lport refused inside, reached unconfined"
    fi
    kill "$listener_pid2" 2>/dev/null || true
  else
    skip "control: nc could not reach its own listener on 127.0.0.1:$lport unconfined"
  fi
  kill "$listener_pid" 2>/dev/null || true
  # Binding a port (the squatting attack): nc -l exits at once when bind is refused.
  "${SBX[@]}" /usr/bin/nc -l 127.0.0.1 "$lport" >/dev/null 2>&1 & bind_pid=$!
  sleep 2
  if kill -0 "$bind_pid" 2>/dev/null; then
    kill "$bind_pid" 2>/dev/null || true
    fail "nc -l 127.0.0.1 $lport bound a port inside the sandbox"
  else
    pass "nc -l 127.0.0.1 $lport cannot bind inside the sandbox (unconfined it did, above)"
  fi
  # No direct DNS: neither the resolver's socket nor its services (nor opendirectoryd's
  # host lookups) answer; unconfined the same lookup answers.
  if dscacheutil -q host -a name example.com | grep -q address; then
    if "${SBX[@]}" /usr/bin/dscacheutil -q host -a name example.com 2>/dev/null | grep -q address; then
      fail "dscacheutil -q host resolved example.com inside the sandbox (a DNS channel out)"
    else
      pass "dscacheutil -q host example.com gets no address inside, one unconfined"
    fi
  else
    skip "control: dscacheutil -q host example.com answers nothing unconfined"
  fi
fi

section=6
echo "== 6. the P0 scenario: the real CLIs' own tools, driven by the scripted model"
# `dispatcher test cli-p0` (docs/contract.md, "The P0 scenario"): each CLI, pointed at the
# scripted model on loopback, writes its workflow folder and reads a home file with its own
# tools, and fails to read or write another workflow, to write planning/plan.json, and to get
# `open` or `osascript` (Terminal's `do script`) to run anything outside — in a tmux chat
# (tmux must be installed) and a structured one; each step's control is run unconfined first.
# One row per step and launch.
for cli in claude codex gemini pi opencode; do
  if ! command -v "$cli" >/dev/null 2>&1; then
    skip "P0 $cli: not installed (scripts/install-clis.sh)"
    continue
  fi
  p0_json="$(mktemp "${TMPDIR:-/tmp}/aw-p0-$cli.XXXXXX")"
  set +e
  "$D" test cli-p0 --provider "$cli" --json >"$p0_json" 2>"$p0_json.err"
  code=$?
  set -e
  if [[ $code -eq 2 || ! -s $p0_json ]]; then
    fail "P0 $cli: could not run: $(tail -c 300 "$p0_json.err" | tr '\n' ' ')"
  else
    while IFS=$'\t' read -r verdict what; do
      if [[ $verdict == ok ]]; then pass "$what"; else fail "$what"; fi
    done < <(python3 - "$p0_json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for l in [r["control"]] + r["launches"]:
    for a in l["attempts"]:
        print(f'{"ok" if l["status"] == "ran" else "FAIL"}\tP0 {r["provider"]} {l["launch"]}: attempt: {a[:200]}')
    if l["status"] != "ran":
        print(f'FAIL\tP0 {r["provider"]} {l["launch"]}: the CLI did not get through the steps')
    for s in l["steps"]:
        print(f'{"ok" if s["pass"] else "FAIL"}\tP0 {r["provider"]} {l["launch"]} {s["step"]}: expected {s["expected"]}, got {s["got"]} ({s["detail"][:160]})')
PY
    )
  fi
  rm -f "$p0_json" "$p0_json.err"
done

if [[ $failures -gt 0 ]]; then
  echo "mac-selftest: $failures failure(s)"
  exit 1
fi
echo "mac-selftest: PASS"
