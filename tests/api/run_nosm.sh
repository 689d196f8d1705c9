#!/bin/sh
# usage: run_nosm.sh FERRYRUN TEST_API
# The other side of test_api --need-peers: with sm unable to open (a
# read-only /dev/shm, in a private mount namespace), a run that is about
# talking to the other ranks over sm must be reported skipped (exit 77, the
# reason printed), never passed. This script passes when it is.
# Exit 0 passed, 1 failed, 77 skipped (no root or no unshare here).
ferryrun=$1 api=$2
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: needs root for a private mount namespace"; exit 77; }
command -v unshare >/dev/null 2>&1 ||
    { echo "SKIPPED: 'unshare' not found (install util-linux)"; exit 77; }
unshare --mount true 2>/dev/null ||
    { echo "SKIPPED: 'unshare --mount' fails here (no CAP_SYS_ADMIN?)"; exit 77; }
out=$(unshare --mount sh -c '
    mount -t tmpfs -o ro,size=1m ferry-ro /dev/shm || exit 99
    exec "$0" -x FERRY_BTL=self,sm -n 2 --timeout 60 "$1" --need-peers' \
    "$ferryrun" "$api" 2>&1)
status=$?
printf '%s\n' "$out"
[ $status -ne 99 ] || { echo "SKIPPED: cannot mount a read-only /dev/shm here"; exit 77; }
[ $status -eq 77 ] || { echo "FAIL: exited with $status, expected 77 (skipped)"; exit 1; }
printf '%s\n' "$out" | grep -q "SKIPPED: rank [01] cannot reach rank [01] over FERRY_BTL='self,sm'" ||
    { echo "FAIL: the skip does not say why"; exit 1; }
echo "PASS: without sm the run was skipped, with the reason"
