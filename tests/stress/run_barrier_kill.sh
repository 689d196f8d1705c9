#!/bin/sh
# usage: run_barrier_kill.sh FERRYRUN BARRIER_KILL NP MODE [blind]
# Runs barrier_kill MODE over NP ranks, the last one the victim, and checks
# what the job must show: ferryrun ends with the victim's SIGKILL (137) and
# every survivor printed its "ok" line. With "blind", every rank but the one
# just before the victim (the only one whose messages go to it first) runs
# with FERRY_SM_FAIL_TIMEOUT at its maximum, so that over sm no other rank's
# transport sees the death within the test: they can only be told.
ferryrun=$1 prog=$2 np=$3 mode=$4 blind=${5:-}
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
seer=$((np - 2))
if [ "$blind" = blind ]; then
    "$ferryrun" --keep-going -n "$np" --timeout 60 sh -c \
        'if [ "$PMI_RANK" != "$1" ]; then export FERRY_SM_FAIL_TIMEOUT=600000; fi; shift; exec "$@"' \
        sh "$seer" "$prog" "$mode" >"$out" 2>"$err"
else
    "$ferryrun" --keep-going -n "$np" --timeout 60 "$prog" "$mode" >"$out" 2>"$err"
fi
status=$?
cat "$out"
cat "$err" >&2
fail() { echo "run_barrier_kill: $*" >&2; exit 1; }
[ "$status" -ne 124 ] || fail "HANG: the job ran into ferryrun's --timeout"
[ "$status" -eq 137 ] || fail "ferryrun exited with $status, expected 137"
n=$(grep -c "^barrier_kill: rank [0-9]* ok" "$out")
[ "$n" -eq $((np - 1)) ] || fail "$n of $((np - 1)) survivors finished as they must"
exit 0
