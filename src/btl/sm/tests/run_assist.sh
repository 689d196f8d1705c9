#!/bin/sh
# usage: run_assist.sh FERRYRUN PROG CASE [FERRYRUN OPTIONS...]
# Runs sm_assist's data case (CASE data or data_noassist) with
# FERRY_LOG_LEVEL=info and reads, in the line sm logs at finalize, how many
# pieces of rank 0's copies rank 1 took: some for data, none (no such line,
# or zeros) for data_noassist, which runs with FERRY_SM_CMA_ASSIST=0 among
# the options.
ferryrun=$1 prog=$2 case=$3
shift 3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$ferryrun" -n 2 --timeout 120 -x FERRY_LOG_LEVEL=info "$@" "$prog" "$case" >"$out" 2>&1
status=$?
cat "$out"
[ "$status" -eq 77 ] && exit 77
fail() { echo "run_assist: $*" >&2; exit 1; }
[ "$status" -eq 0 ] || fail "ferryrun exited with $status"
counts="sm: pieces of cross-memory copies:"
given=$(sed -n "s/^ferry\[1\] info: $counts \([0-9]*\) taken for peers.*/\1/p" "$out")
case $case in
data)
    [ -n "$given" ] && [ "$given" -gt 0 ] ||
        fail "rank 1 logged no piece of rank 0's copies taken for it"
    echo "run_assist: rank 1 took $given pieces of rank 0's copies"
    ;;
data_noassist)
    if grep "$counts" "$out" | grep -qv ": 0 taken for peers, 0 taken by peers"; then
        fail "pieces were taken with FERRY_SM_CMA_ASSIST=0"
    fi
    echo "run_assist: no piece taken by either rank"
    ;;
*)
    fail "no case $case"
    ;;
esac
exit 0
