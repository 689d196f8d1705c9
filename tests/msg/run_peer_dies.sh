#!/bin/sh
# usage: run_peer_dies.sh FERRYRUN TEST_AM_LARGE BTL
# Rank 1 dies (SIGKILL) holding rank 0's large messages untaken; rank 0's
# sends to it must end with FERRY_ERR_UNREACH, not hang. ferryrun goes on
# (--keep-going) and exits with the victim's status, 137.
ferryrun=$1 prog=$2 btl=$3
out=$("$ferryrun" --keep-going -x FERRY_BTL="$btl" -n 2 --timeout 60 "$prog" --peer-dies 2>&1)
status=$?
echo "$out"
fail() { echo "run_peer_dies: $*"; exit 1; }
case $out in *SKIPPED*) exit 77 ;; esac
[ "$status" -eq 137 ] || fail "ferryrun exited with $status, expected 137 (rank 1 killed)"
echo "$out" | grep -q "rank 0: sends to a dead peer: FERRY_ERR_UNREACH (blocking), FERRY_ERR_UNREACH (callback)" ||
    fail "rank 0 did not see both sends end with FERRY_ERR_UNREACH"
echo "$out" | grep -q "left behind" && fail "a segment was left behind"
exit 0
