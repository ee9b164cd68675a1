#!/usr/bin/env bash
# The P0 contract run, once per CLI: every contract layer this machine has, then a summary.
#
#   Linux: the chat and step contracts live inside each CLI's real launch (namespaces, masks,
#          Landlock), the real CLI started inside the launch (--version), its own sandbox off;
#          the macOS verdicts by the SBPL evaluator against the exact profiles.
#   macOS: the same, live under sandbox-exec; then scripts/mac-selftest.sh (launchers live).
#
# Usage: bash scripts/run-coding-cli-p0.sh [CLI...]   (default: every adapter)
# Exit 0 when every CLI passed, 1 otherwise. Reports go to target/contract/ (JSON per CLI).
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
for cli in "${clis[@]}"; do
  echo "== $cli"
  start=$(date +%s.%N)
  if "$D" contract --all --cli "$cli" --json >"$out/$cli.json"; then
    result[$cli]="PASS"
  else
    result[$cli]="FAIL"
    failed=1
  fi
  secs=$(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')")
  python3 - "$out/$cli.json" "$secs" <<'EOF'
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
done

if [[ "$(uname -s)" == "Darwin" ]]; then
  echo "== macOS live launchers (scripts/mac-selftest.sh)"
  if bash scripts/mac-selftest.sh; then result[mac-selftest]="PASS"; else result[mac-selftest]="FAIL"; failed=1; fi
else
  echo "== macOS live layer: not on a Mac; the macOS columns above are evaluated (scripts/mac-selftest.sh runs them live on a Mac)"
fi

echo "== summary"
for k in "${!result[@]}"; do printf '   %-14s %s\n' "$k" "${result[$k]}"; done | sort
exit $failed
