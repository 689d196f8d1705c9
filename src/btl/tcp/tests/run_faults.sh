#!/bin/sh
# usage: run_faults.sh FERRYRUN TCP_FAULTS MODE [STDERR_PATTERN]
# Runs one tcp_faults mode on two ranks over tcp and checks the job's exit
# status and, when given, that the ranks' stderr shows the pattern (the log
# line with which rank 0 reports a refused connection).
ferryrun=$1 prog=$2 mode=$3 pattern=$4
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
"$ferryrun" -x FERRY_BTL=self,tcp -x FERRY_TCP_CONNECT_TIMEOUT=1000 -n 2 --timeout 60 \
    "$prog" "$mode" >"$out" 2>"$err"
status=$?
cat "$out"
cat "$err" >&2
[ "$status" -eq 77 ] && exit 77
fail() { echo "run_faults $mode: $*" >&2; exit 1; }
[ "$status" -eq 0 ] || fail "the job exited with $status"
grep -q "tcp_faults $mode: ok" "$out" || fail "rank 0 did not report success"
if [ -n "$pattern" ]; then
    cat "$out" "$err" | grep -Eq "$pattern" || fail "no log line matching '$pattern'"
fi
exit 0
