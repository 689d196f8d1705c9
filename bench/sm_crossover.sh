#!/usr/bin/env bash
# Where sm's puts and gets on ordinary memory should change from the ring
# (two copies through shared memory) to cross-memory attach (one
# process_vm_writev/readv): measures ferry-bench put-bw, get-bw, put-lat
# and get-lat with every size through the ring (FERRY_SM_CMA_THRESHOLD
# above the largest size, FERRY_SM_CMA_LONE=0) and with every size through
# cross-memory attach (threshold 0), the two alternating run by run for R
# rounds, then prints per size the median of each, their ratio (how much
# faster cross-memory attach is), and the smallest size from which
# cross-memory attach is at least as fast at that size and every larger
# one: for the bandwidths (many in flight) the threshold this machine wants
# (FERRY_SM_CMA_THRESHOLD), for the latencies (one alone) FERRY_SM_CMA_LONE.
#
#   bench/sm_crossover.sh [BUILD_DIR] [-r ROUNDS] [-m MIN:MAX] [-o DIR]
#
# BUILD_DIR defaults to build (the folder `make demo` builds); ROUNDS 5;
# sizes 256:4M; DIR keeps every run's CSV (default BUILD_DIR/sm-crossover).
# Each run: ferryrun -n 2 --bind-to core ferry-bench
# put-bw,get-bw,put-lat,get-lat -m MIN:MAX over FERRY_BTL=self,sm. Take the
# figures on a quiet machine. Exits 0 when
# every run worked, 1 when one failed or cross-memory attach is not
# available here, 2 on a usage error.
set -euo pipefail

build=build
rounds=5
sizes=256:4M
out=""
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    build=$1
    shift
fi
while [ $# -gt 0 ]; do
    case $1 in
    -r) rounds=${2:?-r needs a value}; shift 2 ;;
    -m) sizes=${2:?-m needs a value}; shift 2 ;;
    -o) out=${2:?-o needs a value}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sm_crossover: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
if ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
    echo "sm_crossover: -r '$rounds': expected a positive integer" >&2
    exit 2
fi
out=${out:-$build/sm-crossover}
ferryrun=$build/tools/ferryrun/ferryrun
bench=$build/bench/ferry-bench
for f in "$ferryrun" "$bench"; do
    [ -x "$f" ] || { echo "sm_crossover: $f not built (make demo builds it)" >&2; exit 1; }
done
mkdir -p "$out"
rm -f "$out"/*.csv "$out"/*.log

# The modes: ring for every size, cross-memory attach for every size.
declare -A thr=([ring]=1099511627776 [cma]=0)
declare -A lone=([ring]=0 [cma]=0)
for ((r = 1; r <= rounds; r++)); do
    # Alternate which goes first, so neither always follows the other.
    order="ring cma"
    [ $((r % 2)) -eq 0 ] && order="cma ring"
    for mode in $order; do
        log=$out/$mode.$r.log
        if ! env FERRY_BTL=self,sm FERRY_SM_CMA_THRESHOLD="${thr[$mode]}" \
            FERRY_SM_CMA_LONE="${lone[$mode]}" "$ferryrun" -n 2 --bind-to core "$bench" \
            put-bw,get-bw,put-lat,get-lat -m "$sizes" --csv "$out/$mode.$r.csv" \
            >"$log" 2>&1; then
            echo "sm_crossover: the $mode run of round $r failed ($log):" >&2
            tail -n 5 "$log" >&2
            exit 1
        fi
    done
done
if grep -qi "cross-memory attach.*\(off\|unavailable\|not\)" "$out"/cma.1.log; then
    echo "sm_crossover: cross-memory attach is not available here ($out/cma.1.log)" >&2
    exit 1
fi

# test,transport,size,value,... rows of every run: per test and size the
# median of each mode, their ratio and the cross-over.
for f in "$out"/*.csv; do
    mode=$(basename "$f" .csv)
    # The transport column is a quoted list ("self,sm"): one field once unquoted.
    awk -v m="${mode%%.*}" '{ gsub(/"[^"]*"/, "sm"); split($0, c, ",") }
        c[1] ~ /^(put|get)-(bw|lat)$/ { print m "," c[1] "," c[3] "," c[4] }' "$f"
done | awk -F, '
    function med(list,    a, n, i, j, t) {
        n = split(list, a, " ")
        for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { v[$2 "," $3 "," $1] = v[$2 "," $3 "," $1] " " $4; if (!(($2 "," $3) in seen)) { seen[$2 "," $3] = 1; keys[++nk] = $2 "," $3 } }
    END {
        split("put-bw get-bw put-lat get-lat", tests, " ")
        for (t = 1; t <= 4; t++) {
            test = tests[t]; lat = test ~ /lat$/
            var = lat ? "FERRY_SM_CMA_LONE" : "FERRY_SM_CMA_THRESHOLD"
            printf "## %s, %s: median over the rounds\n%-10s %12s %12s %10s\n", test, lat ? "us" : "MB/s", "size", "ring", "cma", "speed-up"
            n = 0
            for (i = 1; i <= nk; i++) {
                split(keys[i], k, ","); if (k[1] != test) continue
                r = med(v[keys[i] ",ring"]); c = med(v[keys[i] ",cma"])
                sz[++n] = k[2] + 0
                ratio[n] = lat ? (c > 0 ? r / c : 0) : (r > 0 ? c / r : 0)
                printf "%-10s %12.3f %12.3f %10.2f\n", k[2], r, c, ratio[n]
            }
            # sizes ascend in the CSV; the cross-over: the smallest size from
            # which cross-memory attach is never slower.
            cross = ""
            for (i = n; i >= 1 && ratio[i] >= 1.0; i--) cross = sz[i]
            if (cross == "") print "# " test ": cross-memory attach is slower at the largest size measured: keep the ring"
            else printf "# %s: cross-memory attach from %s bytes (%s=%s)\n", test, cross, var, cross
        }
    }'
echo "# every run: $out"
