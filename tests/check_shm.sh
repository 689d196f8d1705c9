#!/bin/sh
# usage: check_shm.sh LABEL
# Runs after every other test (the cleanup of CTest's "shm" fixture): none of
# this test suite's ferry shared-memory objects may be left in /dev/shm
# (ferryrun removes a crashed job's, and a clean exit leaves none). The
# suite's jobs carry LABEL (FERRY_JOB_LABEL, set for every test by
# ferry_require_shm_check()), so their segments are /dev/shm/ferry-LABEL.*;
# segments of other ferry jobs on the machine are counted but not judged.
if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 LABEL" >&2
    exit 2
fi
label=$1
case $label in
    *[!A-Za-z0-9_-]*) echo "check_shm: '$label' is not a label" >&2; exit 2 ;;
esac
all=$(ls /dev/shm 2>/dev/null | grep '^ferry-' || true)
left=$(printf '%s\n' "$all" | grep -F -- "ferry-$label." || true)
others=$(printf '%s\n' "$all" | grep -v -F -- "ferry-$label." | grep -c . || true)
if [ -n "$left" ]; then
    echo "shared-memory objects of this test suite (label $label) left behind:" >&2
    echo "$left" >&2
    exit 1
fi
echo "no ferry shared-memory object of this test suite (label $label) left in /dev/shm" \
     "($others of other ferry jobs not looked at)"
