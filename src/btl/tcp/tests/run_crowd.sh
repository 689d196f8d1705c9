#!/bin/sh
# usage: run_crowd.sh FERRYRUN TCP_CROWD MODE
# Runs tcp_crowd MODE on four ranks and checks, besides the ranks' own
# verdicts, that the thousands of connections the stranger makes were not
# logged one line each: a few lines per rank, and the count of the rest.
ferryrun=$1 prog=$2 mode=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$ferryrun" -x FERRY_BTL=self,tcp -x FERRY_TCP_CONNECT_TIMEOUT=3000 -n 4 --timeout 100 \
    "$prog" "$mode" >"$out" 2>&1
status=$?
cat "$out"
[ "$status" -eq 77 ] && exit 77
fail() { echo "run_crowd $mode: $*"; exit 1; }
[ "$status" -eq 0 ] || fail "the job exited with $status"
[ "$(grep -c "^tcp_crowd [012]: ok" "$out")" -eq 3 ] || fail "not every rank got through"
lines=$(grep -c "tcp: closed the connection from\|tcp: refused a connection from" "$out")
# Five lines per rank and 10 s; the run lasts about 7 s.
[ "$lines" -le 30 ] || fail "$lines log lines about strangers' connections"
grep -q "more messages about refused or evicted connections were not printed" "$out" ||
    fail "no count of the lines held back"
echo "run_crowd $mode: ok ($lines lines about the strangers' connections)"
