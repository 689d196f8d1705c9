#!/bin/sh
# Runs every libFuzzer harness of a FERRY_FUZZ=ON build for SECONDS each:
#   run_fuzzers.sh BUILD_DIR SECONDS [NAME...]
# (all harnesses listed in BUILD_DIR/fuzzers.txt, or only those named).
# Each starts from its seed corpus and regressions (tests/fuzz/<name>/seed,
# regress), with its dictionary (tests/fuzz/<name>/dict) if any, and a working corpus in BUILD_DIR/fuzz-corpus/<name>, which
# grows from run to run and never touches the source tree. Prints, per
# harness, the inputs executed and the edge coverage reached (libFuzzer's
# stat::number_of_executed_units and cov:), and the total. A crash, a leak,
# a timeout or a sanitizer report fails the run: the input that caused it
# is in BUILD_DIR/fuzz-artifacts/<name>/, and belongs in regress/ once
# fixed.
set -u
build=$1
seconds=$2
shift 2
list=$build/fuzzers.txt
if [ ! -f "$list" ]; then
    echo "run_fuzzers: $list not found: configure $build with -DFERRY_FUZZ=ON (make fuzz)" >&2
    exit 2
fi
case $seconds in
'' | *[!0-9]*) echo "run_fuzzers: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;;
esac

failed=0
total=0
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
while read -r name bin corpus; do
    [ -n "$name" ] || continue
    if [ $# -gt 0 ]; then
        wanted=no
        for n; do [ "$n" = "$name" ] && wanted=yes; done
        [ "$wanted" = yes ] || continue
    fi
    work=$build/fuzz-corpus/$name
    art=$build/fuzz-artifacts/$name
    log=$build/fuzz-logs/$name.log
    mkdir -p "$work" "$art" "$(dirname "$log")"
    dirs="$work $corpus/seed"
    [ -d "$corpus/regress" ] && dirs="$dirs $corpus/regress"
    # A dictionary of the format's words, when the harness has one.
    dict=""
    [ -f "$corpus/dict" ] && dict="-dict=$corpus/dict"
    echo "== fuzz_$name for ${seconds}s (log: $log)"
    # -close_fd_mask=3: the harness's own stdout and stderr (the parsers'
    # error messages) are dropped; libFuzzer's reports still show.
    # shellcheck disable=SC2086
    "$bin" -max_total_time="$seconds" -print_final_stats=1 -close_fd_mask=3 -timeout=10 \
        -rss_limit_mb=2048 -max_len=16384 -artifact_prefix="$art/" $dict $dirs >"$log" 2>&1
    status=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | sed 's/cov: //')
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n 1 | sed 's/ft: //')
    corp=$(grep -o 'corp: [0-9]*' "$log" | tail -n 1 | sed 's/corp: //')
    result=ok
    if [ "$status" -ne 0 ]; then
        result="FAILED (status $status; input in $art/)"
        failed=1
        grep -E "ERROR:|SUMMARY:|==[0-9]+==|runtime error" "$log" | head -n 20
    fi
    total=$((total + ${execs:-0}))
    printf '%-12s %12s executions  cov %6s  ft %7s  corpus %6s  %s\n' "$name" \
        "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result" >>"$summary"
done <"$list"

echo
echo "== fuzzing summary (${seconds}s each)"
cat "$summary"
echo "total executions: $total"
exit $failed
