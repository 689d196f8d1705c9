#!/bin/sh
# usage: run_pipe_dies.sh FERRYRUN TEST_AM_LARGE BTL recv|send
# A 64 MiB message goes by PIPE (FERRY_AM_RNDV=pipe) from rank 0 to rank 1,
# and one of them dies (SIGKILL) in the middle of the stream: with recv the
# receiver, and the sender's send must end with FERRY_ERR_UNREACH; with send
# the sender, and the receiver's receive must. ferryrun goes on
# (--keep-going) and exits with the victim's status, 137.
ferryrun=$1 prog=$2 btl=$3 who=$4
out=$("$ferryrun" --keep-going -x FERRY_BTL="$btl" -x FERRY_AM_RNDV=pipe -n 2 --timeout 60 \
    "$prog" --pipe-dies-"$who" 2>&1)
status=$?
echo "$out"
fail() { echo "run_pipe_dies: $*"; exit 1; }
case $out in *SKIPPED*) exit 77 ;; esac
[ "$status" -eq 137 ] || fail "ferryrun exited with $status, expected 137 (a rank killed)"
case $who in
recv) want="rank 0: send to a peer dead mid-stream: FERRY_ERR_UNREACH" ;;
send) want="rank 1: receive from a peer dead mid-stream: FERRY_ERR_UNREACH" ;;
*) fail "unknown victim '$who'" ;;
esac
echo "$out" | grep -q "$want" || fail "the survivor did not see its transfer end with FERRY_ERR_UNREACH"
echo "$out" | grep -q "left behind" && fail "a segment was left behind"
exit 0
