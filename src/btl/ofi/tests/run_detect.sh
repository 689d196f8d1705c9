#!/bin/sh
# usage: run_detect.sh FERRYRUN OFI_DETECT NP TRIALS [busy]
# Runs ofi_detect TRIALS times (NP ranks, the last SIGKILLed) and checks
# each: ferryrun reports the SIGKILL (status 137), every survivor was told
# and finalized. Prints each survivor's detection time (from the victim's
# last word to its error callback, both CLOCK_REALTIME on this host), then
# the median and the longest over all trials.
ferryrun=$1 prog=$2 np=$3 trials=$4 mode=${5:-}
out=$(mktemp) times=$(mktemp)
trap 'rm -f "$out" "$times"' EXIT
fail() { cat "$out"; echo "run_detect: trial $t: $*" >&2; exit 1; }
t=0
while [ "$t" -lt "$trials" ]; do
    t=$((t + 1))
    "$ferryrun" --keep-going -n "$np" --timeout 60 "$prog" $mode >"$out" 2>&1
    status=$?
    [ "$status" -eq 77 ] && { cat "$out"; exit 77; }
    [ "$status" -eq 137 ] || fail "ferryrun exited with $status, expected 137"
    killed=$(sed -n 's/^victim: killed at \([0-9]*\) us$/\1/p' "$out")
    [ -n "$killed" ] || fail "the victim did not say when it died"
    told=$(sed -n 's/^rank [0-9]*: told at \([0-9]*\) us$/\1/p' "$out")
    n=$(printf '%s\n' "$told" | grep -c .)
    [ "$n" -eq $((np - 1)) ] || fail "$n of $((np - 1)) survivors were told"
    fin=$(grep -c 'finalized in' "$out")
    [ "$fin" -eq $((np - 1)) ] || fail "$fin of $((np - 1)) survivors finalized"
    for x in $told; do echo $((x - killed)) >>"$times"; done
done
sort -n "$times" | awk -v trials="$trials" '
    { v[NR] = $1 }
    END {
        med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "run_detect: %d trials, %d survivors told; detection median %.1f ms, max %.1f ms\n",
               trials, NR, med / 1000, v[NR] / 1000
    }'
