#!/usr/bin/env bash
# The P0 run, once per CLI, then a summary line per CLI.
#
#   contract  every contract layer this machine has (`dispatcher contract --all --cli X`):
#             Linux: the chat and step contracts live inside the CLI's real launch (namespaces,
#             masks, Landlock), the real CLI started inside it (--version), its own sandbox
#             off; the macOS verdicts by the SBPL evaluator against the exact profiles.
#             macOS: the same, live under sandbox-exec.
#   p0        the seed's P0 scenario (`dispatcher test cli-p0 --provider X`, docs/contract.md
#             "The P0 scenario"): the real CLI, driven by the scripted model on loopback, uses
#             its own shell and write tools in a tmux chat and a structured chat of a fresh
#             server: writes its workflow folder, reads a home file; cannot read or write
#             another workflow, write planning/plan.json, or get a launcher (xdg-open here,
#             open/osascript on a Mac) to run anything outside. Each denial has its control.
#             Only for the CLIs with a [model_endpoint] (claude, codex, gemini, pi, opencode);
#             the others speak private protocols and say so.
# On a Mac, scripts/mac-selftest.sh (launchers live, and the same P0 section) runs last.
#
# Usage: bash scripts/run-coding-cli-p0.sh [CLI...]   (default: every adapter)
# Exit 0 when every CLI passed, 1 otherwise. Reports go to target/contract/ (JSON per CLI and
# part).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --quiet --workspace
D="$PWD/target/debug/dispatcher"
[[ -d "$PWD/.tools/clis/bin" ]] && export PATH="$PWD/.tools/clis/bin:$PATH"
out="$PWD/target/contract"
mkdir -p "$out"

if [[ $# -gt 0 ]]; then
  clis=("$@")
else
  mapfile -t clis < <("$D" clis --json | python3 -c 'import json,sys; print("\n".join(c["name"] for c in json.load(sys.stdin)))')
fi

declare -A result
failed=0
secs_since() { python3 -c "print(f'{$(date +%s.%N) - $1:.1f}')"; }

for cli in "${clis[@]}"; do
  echo "== $cli: contract"
  start=$(date +%s.%N)
  if "$D" contract --all --cli "$cli" --json >"$out/$cli.json"; then
    contract="PASS"
  else
    contract="FAIL"
    failed=1
  fi
  python3 - "$out/$cli.json" "$(secs_since "$start")" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
for c in r["columns"]:
    bad = [p for p in c["results"] if not p["pass"]]
    state = "ok" if c["error"] is None and not bad else "FAIL"
    print(f'   {c["launch"]:<14} {c["platform"]:<6} {c["mode"]:<12} {c["how"]:<10} {len(c["results"]):>3} probes  {state}')
    if c["error"]:
        print(f'      launch failed: {c["error"]}')
    for p in bad:
        print(f'      {p["probe"]}: expected {p["expected"]}, got {p["got"]}: {p["evidence"]}')
for k in r["checks"]:
    print(f'   check {k["check"]:<16} {k["platform"]:<6} {k["status"]:<8} {k["detail"][:100]}')
for e in r["errors"]:
    print(f'   error: {e}')
print(f'   {sys.argv[2]} s')
EOF

  echo "== $cli: P0 scenario"
  start=$(date +%s.%N)
  set +e
  "$D" test cli-p0 --provider "$cli" --json >"$out/$cli-p0.json" 2>"$out/$cli-p0.err"
  code=$?
  set -e
  case $code in
    0) p0="PASS" ;;
    1) p0="FAIL"; failed=1 ;;
    *)
      # Exit 2: bad input or setup. A CLI without a model endpoint cannot be driven offline.
      if grep -q "no \[model_endpoint\]" "$out/$cli-p0.err"; then
        p0="n/a (no [model_endpoint]: a private protocol, docs/clis.md)"
      else
        p0="ERROR"; failed=1
      fi
      echo "   $(tail -c 400 "$out/$cli-p0.err")"
      ;;
  esac
  if [[ $code -le 1 ]]; then
    python3 - "$out/$cli-p0.json" "$(secs_since "$start")" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
for l in [r["control"]] + r["launches"]:
    bad = [s for s in l["steps"] if not s["pass"]]
    state = "ok" if l["status"] == "ran" and not bad else "FAIL"
    print(f'   {l["launch"]:<11} {len(l["steps"]):>2} steps  {l["elapsed_ms"] / 1000:5.1f} s  {state}')
    for a in l["attempts"]:
        print(f'      attempt: {a[:300]}')
    for s in bad:
        print(f'      {s["step"]}: expected {s["expected"]}, got {s["got"]}: {s["detail"][:200]}')
for e in r["errors"]:
    print(f'   error: {e}')
print(f'   {sys.argv[2]} s')
EOF
  fi
  result[$cli]="contract $contract; P0 $p0"
done

if [[ "$(uname -s)" == "Darwin" ]]; then
  echo "== macOS live launchers and P0 (scripts/mac-selftest.sh)"
  if bash scripts/mac-selftest.sh; then result[mac-selftest]="PASS"; else result[mac-selftest]="FAIL"; failed=1; fi
else
  echo "== macOS live layer: not on a Mac; the macOS columns above are evaluated (scripts/mac-selftest.sh runs them live on a Mac)"
fi

echo "== summary"
for k in "${!result[@]}"; do printf '   %-14s %s\n' "$k" "${result[$k]}"; done | sort
exit $failed
