#!/usr/bin/env bash
# Runs ferry-bench's paired measurement five times in a row over each of sm,
# tcp and ofi (shm provider), and says whether the median paired ratios of
# 8-byte active-message latency and 1 MiB put bandwidth stay within +-15% of
# their five-run median (issue 14's check that ratios are stable).
#
#   bench/run_stability.sh [BUILD_DIR] [-- extra ferry-bench options]
#
# BUILD_DIR defaults to build (the folder `make demo` builds). RUNS and
# TOLERANCE (percent) in the environment change the count and the band;
# TRANSPORTS="sm tcp ofi" the transports; KEEP=DIR keeps every run's CSV
# and output there (DIR/<transport>.<run>.csv and .log: the floors and
# quartiles behind each ratio). Each run is
#   ferryrun -n 2 --bind-to core ferry-bench limits,am-lat,put-bw -m 8:1M
# with FERRY_BTL unset (sm), FERRY_BTL=self,tcp (tcp), and FERRY_BTL=ofi
# FERRY_OFI_PROVIDER=shm (ofi). Exits 0 when every run worked, whatever the
# figures; 1 when a run failed; 2 on a usage error.
set -euo pipefail

build=build
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    build=$1
    shift
fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
extra=("$@")
runs=${RUNS:-5}
tol=${TOLERANCE:-15}
transports=${TRANSPORTS:-sm tcp ofi}
if ! [[ $runs =~ ^[1-9][0-9]*$ ]]; then
    echo "run_stability: RUNS='$runs': expected a positive integer" >&2
    exit 2
fi
if ! [[ $tol =~ ^[0-9]+([.][0-9]+)?$ ]]; then
    echo "run_stability: TOLERANCE='$tol': expected a number of percent" >&2
    exit 2
fi

ferryrun=$build/tools/ferryrun/ferryrun
bench=$build/bench/ferry-bench
for f in "$ferryrun" "$bench"; do
    if [ ! -x "$f" ]; then
        echo "run_stability: $f not found: build first (make demo, or cmake --build $build)" >&2
        exit 2
    fi
done

if [ -n "${KEEP:-}" ]; then
    mkdir -p "$KEEP"
    work=$KEEP
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-stability.XXXXXX")
    trap 'rm -rf "$work"' EXIT
fi

# ratio TEST SIZE < CSV: the ratio column (7th) of that one row. The
# transport field may be quoted (self,tcp holds a comma): it is blanked
# first.
ratio() {
    sed 's/"[^"]*"/q/' | awk -F, -v t="$1" -v s="$2" '
        $1 == t && $3 == s && $7 != "" { r = $7; n++ }
        END { if (n != 1) exit 1; print r }'
}

# The values on stdin, one a line: "median maxdev% verdict".
verdict() {
    sort -g | awk -v tol="$tol" '
        { v[NR] = $1 }
        END {
            m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            dev = 0
            for (i = 1; i <= NR; i++) {
                d = (v[i] - m) / m * 100
                if (d < 0) d = -d
                if (d > dev) dev = d
            }
            printf "%.3f %.1f %s\n", m, dev, dev <= tol ? "within" : "OUTSIDE"
        }'
}

env_of() {
    case $1 in
    sm) echo "FERRY_BTL=self,sm" ;;
    tcp) echo "FERRY_BTL=self,tcp" ;;
    ofi) echo "FERRY_BTL=ofi FERRY_OFI_PROVIDER=shm" ;;
    *) return 1 ;;
    esac
}

for t in $transports; do
    if ! env_of "$t" >/dev/null; then
        echo "run_stability: unknown transport '$t' (sm, tcp or ofi)" >&2
        exit 2
    fi
done

echo "# $runs runs in a row per transport of:"
echo "#   ferryrun -n 2 --bind-to core ferry-bench limits,am-lat,put-bw -m 8:1M ${extra[*]}"
echo "# values: median paired ratio (am-lat 8 B: latency / floor; put-bw 1 MiB: bandwidth / floor)"
printf "%-4s %-14s %s  %s\n" "" "figure" "values, run 1..$runs" "median, largest deviation, +-$tol%"
failed=0
all_within=1
for t in $transports; do
    read -r -a vars <<<"$(env_of "$t")"
    lats=()
    bws=()
    for ((i = 1; i <= runs; i++)); do
        csv=$work/$t.$i.csv
        log=$work/$t.$i.log
        # -x passes the variables on to the ranks whatever the launcher's
        # defaults; FERRY_OFI_PROVIDER is forwarded only where it is set.
        xs=(-x FERRY_BTL)
        [[ " ${vars[*]} " == *" FERRY_OFI_PROVIDER="* ]] && xs+=(-x FERRY_OFI_PROVIDER)
        if ! env "${vars[@]}" "$ferryrun" -n 2 --bind-to core "${xs[@]}" "$bench" \
                limits,am-lat,put-bw -m 8:1M --csv "$csv" "${extra[@]}" >"$log" 2>&1 ||
           ! lat=$(ratio am-lat 8 <"$csv") || ! bw=$(ratio put-bw 1048576 <"$csv"); then
            echo "run_stability: $t run $i failed; the end of its output:" >&2
            tail -n 20 "$log" >&2
            failed=1
            continue 2
        fi
        lats+=("$lat")
        bws+=("$bw")
    done
    for fig in lat bw; do
        if [ "$fig" = lat ]; then
            vals=("${lats[@]}")
            name="am-lat 8 B"
        else
            vals=("${bws[@]}")
            name="put-bw 1 MiB"
        fi
        v=$(printf '%s\n' "${vals[@]}" | verdict)
        [[ $v == *OUTSIDE* ]] && all_within=0
        read -r med dev word <<<"$v"
        printf "%-4s %-14s %s  %s, %s%%, %s\n" "$t" "$name" "${vals[*]}" "$med" "$dev" "$word"
    done
done
if [ "$failed" -ne 0 ]; then
    echo "# some runs failed (above)"
    exit 1
fi
if [ "$all_within" -eq 1 ]; then
    echo "# every figure within +-$tol% of its $runs-run median"
else
    echo "# some figures are OUTSIDE +-$tol% of their $runs-run median"
fi
