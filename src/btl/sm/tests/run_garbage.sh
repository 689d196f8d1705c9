#!/bin/sh
# usage: run_garbage.sh FERRYRUN PROG CASE
# Rank 1 corrupts its ring; ranks 0 and 2 must survive and finish. ferryrun
# exits 0 when all three exit 0 (rank 1 leaves right after the garbage).
ferryrun=$1 prog=$2 case=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$ferryrun" --keep-going -n 3 --timeout 60 "$prog" "$case" >"$out" 2>&1
status=$?
cat "$out"
[ "$status" -eq 77 ] && exit 77
fail() { echo "run_garbage: $*" >&2; exit 1; }
[ "$status" -eq 0 ] || fail "ferryrun exited with $status"
grep -q "rank 0: peer 1 failed: rank 1" "$out" || fail "rank 0 did not report rank 1"
grep -q "rank 0: 1000 messages from rank 2" "$out" || fail "rank 0 did not carry on"
grep -q "rank 2: 1000 messages from rank 0" "$out" || fail "rank 2 did not carry on"
exit 0
