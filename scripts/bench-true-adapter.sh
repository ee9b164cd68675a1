# Sourced by the benchmark scripts: a dispatcher state root in "$1/sr" with one workflow `w`
# and one chat `c`, and an adapter `true` in "$1/profiles" whose CLI is /bin/true, so that a
# launch measures the dispatcher and the sandbox, not a CLI. Needs $D (the dispatcher).
# Sets SR.
bench_true_adapter() {
  local work=$1
  mkdir -p "$work/profiles/clis"
  cat >"$work/profiles/clis/true.toml" <<'TOML'
version = 1
name = "true"
display_name = "/bin/true (benchmark)"
binary = "/bin/true"
install = "the OS"
checked_version = "any"
modes = ["full", "bridge-only"]
prompt_note_how = "not passed"
bridge_only_how = "benchmark only"
[config_home]
env = "TRUE_HOME"
[args]
full = []
bridge_only = []
TOML
  SR="$work/sr"
  "$D" init --state-root "$SR" >/dev/null
  "$D" --state-root "$SR" workflow add w >/dev/null
  "$D" --state-root "$SR" chat add c >/dev/null
}
