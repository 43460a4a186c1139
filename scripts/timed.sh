#!/usr/bin/env bash
# scripts/timed.sh PHASE COMMAND...: runs COMMAND and appends "PHASE<TAB>seconds<TAB>status"
# to $PHASES (make test's phase table, printed at its end: where the time goes).
set -u
phases=${PHASES:-target/test-phases.txt}
phase=$1
shift
start=$(date +%s)
"$@"
status=$?
mkdir -p "$(dirname "$phases")"
printf '%s\t%ss\t%s\n' "$phase" "$(($(date +%s) - start))" "$([ $status = 0 ] && echo ok || echo "failed ($status)")" >>"$phases"
exit $status
