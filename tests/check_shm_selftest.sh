#!/bin/sh
# usage: check_shm_selftest.sh CHECK_SHM LABEL
# check_shm.sh must fail on a leftover with its label, and must pass over a
# segment of another job (another label, or none). LABEL is this test's own,
# not the suite's, so the fake segments disturb no other test.
check=$1 label=$2
mine=/dev/shm/ferry-$label.fake-job-0
other=/dev/shm/ferry-x$label.fake-job-0
plain=/dev/shm/ferry-ferry-0-fake$label-0
trap 'rm -f "$mine" "$other" "$plain"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

: >"$other" && : >"$plain" || fail "cannot create files in /dev/shm"
sh "$check" "$label" || fail "another job's segments made the check fail"
: >"$mine" || fail "cannot create $mine"
out=$(sh "$check" "$label" 2>&1) && fail "a leftover with the label passed: $out"
printf '%s\n' "$out" | grep -q "ferry-$label.fake-job-0" || fail "the leftover is not named: $out"
sh "$check" "bad.label" 2>/dev/null && fail "a label with a '.' was accepted"
sh "$check" 2>/dev/null && fail "no label was accepted"
echo "PASS: the check sees its own leftovers and only those"
