# Sourced by the shell tests: a fresh working folder (removed on exit) and `check NAME CONDITION...`,
# which counts passes and failures; `check_summary` prints them and fails when any check failed.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fails=0 passes=0
check() {  # check NAME CONDITION...
  local name=$1; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $name"; fails=$((fails + 1)); fi
}
check_summary() {
  echo "$passes passed, $fails failed"
  [ "$fails" -eq 0 ]
}
