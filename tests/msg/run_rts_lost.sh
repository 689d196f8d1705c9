#!/bin/sh
# usage: run_rts_lost.sh FERRYRUN TEST_AM_RNDV_BOUND BTL
# Rank 0's handler answers rank 1 with a large message while the path is
# full, so that its announcement waits in ferry's callback queue; then rank
# 0 kills rank 1 (SIGKILL). The send must end with FERRY_ERR_UNREACH, not
# hang. ferryrun goes on (--keep-going) and exits with the victim's status.
ferryrun=$1 prog=$2 btl=$3
out=$("$ferryrun" --keep-going -x FERRY_BTL="$btl" -x FERRY_SM_RING_SIZE=16384 \
      -x FERRY_SM_MAX_SEND_SIZE=4096 -n 2 --timeout 60 "$prog" --rts-lost-dies 2>&1)
status=$?
echo "$out"
fail() { echo "run_rts_lost: $*"; exit 1; }
case $out in *SKIPPED*) exit 77 ;; esac
[ "$status" -eq 137 ] || fail "ferryrun exited with $status, expected 137 (rank 1 killed)"
echo "$out" | grep -q "rank 0: a large send queued from a handler ended with FERRY_ERR_UNREACH" ||
    fail "rank 0's send did not end with FERRY_ERR_UNREACH"
echo "$out" | grep -q "test_am_rndv_bound: rank 0 --rts-lost-dies ok" || fail "rank 0 did not finish"
exit 0
