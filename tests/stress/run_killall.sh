#!/bin/sh
# usage: run_killall.sh FERRYRUN STRESS
# Every rank of a job is killed with SIGKILL in the middle of traffic:
# ferryrun must still remove the job's shared-memory objects.
ferryrun=$1 prog=$2
err=$(mktemp)
trap 'rm -f "$err"' EXIT
"$ferryrun" -n 4 --timeout 60 "$prog" 30 >/dev/null 2>"$err" &
runner=$!
# The job id, from a rank's environment; then wait for its segments
# (ferry-[LABEL.]ID-RANK: the test suite labels its jobs).
id=""
for _ in $(seq 1 100); do
    child=$(pgrep -P "$runner" | head -n 1)
    if [ -n "$child" ]; then
        id=$(tr '\0' '\n' < "/proc/$child/environ" 2>/dev/null | sed -n 's/^FERRY_JOB_ID=//p')
        [ -n "$id" ] && ls /dev/shm | grep -qF -- "$id-3" && break
    fi
    sleep 0.1
done
[ -n "$id" ] && ls /dev/shm | grep -qF -- "$id-3" ||
    { echo "run_killall: the job's segments did not appear" >&2; kill "$runner"; exit 1; }
sleep 0.5
pkill -KILL -P "$runner"
wait "$runner"
status=$?
cat "$err" >&2
[ "$status" -eq 137 ] || { echo "run_killall: ferryrun exited with $status, expected 137" >&2; exit 1; }
left=$(ls /dev/shm | grep -F -- "$id" || true)
[ -z "$left" ] || { echo "run_killall: left behind: $left" >&2; exit 1; }
echo "all ranks killed; ferryrun removed the job's shared memory ($id)"
