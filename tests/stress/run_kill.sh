#!/bin/sh
# usage: run_kill.sh FERRYRUN KILL_PEER NP
# Runs the kill test and checks what the job as a whole must show: ferryrun
# names the killed rank and exits with its status, every survivor reports the
# failure, and no shared-memory file is left behind.
ferryrun=$1 prog=$2 np=$3
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
"$ferryrun" --keep-going -n "$np" --timeout 60 "$prog" >"$out" 2>"$err"
status=$?
cat "$out"
cat "$err" >&2
victim=$((np - 1))
fail() { echo "run_kill: $*" >&2; exit 1; }
[ "$status" -eq 137 ] || fail "ferryrun exited with $status, expected 137"
grep -q "rank $victim .*SIGKILL" "$err" || fail "ferryrun did not name rank $victim and SIGKILL"
n=$(grep -c "saw rank $victim fail" "$out")
[ "$n" -eq $((np - 1)) ] || fail "$n of $((np - 1)) survivors reported the failure"
grep -q "left behind" "$err" && fail "a segment was left behind"
exit 0
