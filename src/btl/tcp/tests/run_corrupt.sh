#!/bin/sh
# usage: run_corrupt.sh FERRYRUN TCP_CORRUPT FIRST_SEED TRIALS
# Runs tcp_corrupt TRIALS times (seeds FIRST_SEED on) with short deadlines;
# every trial must end with both ranks reporting an error, none may hang
# (ferryrun's --timeout ends a hung trial, which counts as a failure).
ferryrun=$1 prog=$2 first=$3 trials=$4
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=0 hung=0 seed=$first last=$((first + trials))
while [ "$seed" -lt "$last" ]; do
    "$ferryrun" -x FERRY_BTL=self,tcp -x FERRY_TCP_FRAME_TIMEOUT=1000 \
        -x FERRY_TCP_REQUEST_TIMEOUT=2000 -x FERRY_TCP_CONNECT_TIMEOUT=2000 \
        -x FERRY_FLUSH_TIMEOUT=2000 \
        -n 2 --timeout 50 "$prog" "$seed" >"$out" 2>&1
    status=$?
    [ "$status" -eq 77 ] && { cat "$out"; exit 77; }
    oks=$(grep -c "^tcp_corrupt [01]: ok" "$out")
    if [ "$status" -ne 0 ] || [ "$oks" -ne 2 ]; then
        failed=$((failed + 1))
        grep -q "timed out\|timeout" "$out" && hung=$((hung + 1))
        echo "trial $seed FAILED (exit $status):"
        cat "$out"
    else
        grep "^tcp_corrupt" "$out" | sed "s/^/trial $seed: /"
    fi
    seed=$((seed + 1))
done
echo "run_corrupt: $trials trials, $failed failed ($hung by timeout)"
[ "$failed" -eq 0 ]
