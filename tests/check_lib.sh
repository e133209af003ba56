# shellcheck shell=bash
# Sourced by the shell tests: check DESCRIPTION COMMAND... counts a check and passes when the
# command succeeds; check_summary prints the tally and fails when any check failed.
fails=0
checks=0

check() {
  local what=$1; shift
  checks=$((checks + 1))
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=$((fails + 1)); fi
}

check_summary() {
  echo "$((checks - fails)) of $checks checks passed"
  [ "$fails" -eq 0 ]
}
