#!/bin/sh
# make demo's run: the two-process benchmark over shared memory, then a
# one-screen summary of the headline figures beside their floors (with the
# paired ratios) and a PNG chart of latency and bandwidth against the
# floors, both from the run's CSV.
#
#   bench/demo.sh BUILD_DIR
#
# The full tables go to BUILD_DIR/demo-bench.txt, the CSV to
# BUILD_DIR/demo.csv (and demo-alloc.csv), the chart to BUILD_DIR/demo.png.
set -eu

build=${1:?usage: bench/demo.sh BUILD_DIR}
ferryrun=$build/tools/ferryrun/ferryrun
bench=$build/bench/ferry-bench
txt=$build/demo-bench.txt
csv=$build/demo.csv
csv_alloc=$build/demo-alloc.csv
png=$build/demo.png
for f in "$ferryrun" "$bench"; do
    if [ ! -x "$f" ]; then
        echo "demo: $f is missing: the build did not finish" >&2
        exit 1
    fi
done

run() {
    if ! "$ferryrun" -n 2 --bind-to core -x FERRY_BTL=self,sm "$bench" "$@" >>"$txt" 2>&1; then
        echo "demo: ferry-bench $* failed; the end of its output ($txt):" >&2
        tail -n 15 "$txt" >&2
        exit 1
    fi
}

: >"$txt"
echo "demo: ferry-bench over shared memory, 2 ranks bound to cores: limits, am-lat,"
echo "demo: am-rate, am-bw, put-lat, put-bw, get-bw from 8 B to 1 MiB, then put-bw --alloc"
run limits,am-lat,am-rate,am-bw,put-lat,put-bw,get-bw -m 8:1M --csv "$csv"
run put-bw --alloc -m 1M:1M --csv "$csv_alloc"

# row TEST SIZE FILE: the row's fields 4 (value), 6 (floor), 7 (ratio),
# 8 and 9 (quartiles) and 10 (pairs), space separated. The transport is
# quoted (self,sm): it is blanked first.
row() {
    sed 's/"[^"]*"/q/' "$3" | awk -F, -v t="$1" -v s="$2" '$1 == t && $3 == s {
        print $4, ($6 == "" ? "-" : $6), ($7 == "" ? "-" : $7), ($8 == "" ? "-" : $8),
              ($9 == "" ? "-" : $9), ($10 == "" ? "-" : $10); exit }'
}

cpus=$(sed -n 's/.*rank 0 on cpu \([0-9-]*\), rank 1 on cpu \([0-9-]*\).*/\1 and \2/p' "$txt" | head -n 1)
echo
echo "ferry over shared memory (sm): 2 ranks on cpus ${cpus:-?}; each figure beside the"
echo "machine's own floor, measured in alternating blocks in the same run"
echo
printf '%-36s %14s %14s  %-22s %s\n' "figure" "ferry" "floor" "floor is" "ratio [Q1 Q3]"
line() {
    # line LABEL UNIT FLOOR_NAME TEST SIZE FILE [SCALE]
    label=$1 unit=$2 what=$3 scale=${7:-1}
    set -- $(row "$4" "$5" "$6")
    if [ $# -lt 6 ]; then
        printf '%-36s %14s\n' "$label" "n/a"
        return
    fi
    awk -v l="$label" -v u="$unit" -v w="$what" -v v="$1" -v f="$2" -v r="$3" -v q1="$4" \
        -v q3="$5" -v k="$scale" 'BEGIN {
        vs = sprintf("%.3f %s", v * k, u)
        fs = f == "-" || f == "n/a" ? "" : sprintf("%.3f %s", f * k, u)
        rs = r == "-" ? "" : sprintf("%.2f [%.2f %.2f]", r, q1, q3)
        printf "%-36s %14s %14s  %-22s %s\n", l, vs, fs, (fs == "" ? "" : w), rs }'
}
line "8-byte active message, one way" us "cache-line ping-pong" am-lat 8 "$csv"
line "8-byte put + flush" us "cache-line ping-pong" put-lat 8 "$csv"
line "8-byte active-message rate" "M/s" "" am-rate 8 "$csv"
line "1 MiB active-message bandwidth" "GB/s" "process_vm_writev" am-bw 1048576 "$csv" 0.001
line "1 MiB put bandwidth" "GB/s" "process_vm_writev" put-bw 1048576 "$csv" 0.001
line "1 MiB get bandwidth" "GB/s" "process_vm_writev" get-bw 1048576 "$csv" 0.001
line "1 MiB put, ferry_mem_alloc memory" "GB/s" "memcpy" put-bw-alloc 1048576 "$csv_alloc" 0.001
echo
echo "ratio: figure / floor, the median over the pairs of blocks (latency: lower is"
echo "better, 1 = the floor; bandwidth: higher is better, 1 = the floor); Q1 and Q3 its"
echo "quartiles. docs/bench.md tells how to read them."

# The chart: latency beside the cache-line floor, bandwidth beside the
# process_vm_writev floor, per size.
if ! command -v gnuplot >/dev/null 2>&1; then
    echo
    echo "demo: no chart: gnuplot is not installed (make deps installs gnuplot-nox)"
else
    dat=$build/demo-chart
    for t in am-lat put-lat am-bw put-bw; do
        sed 's/"[^"]*"/q/' "$csv" | awk -F, -v t="$t" '$1 == t && $6 != "" && $6 != "n/a" {
            print $3, $4, $6 }' >"$dat.$t.dat"
    done
    if gnuplot >"$dat.log" 2>&1 <<EOF; then
set terminal pngcairo size 1100,460 noenhanced
set output "$png"
set multiplot layout 1,2 title "ferry over shared memory, 2 ranks bound to cores: figures and floors measured in alternating blocks"
set logscale x 2
set logscale y
set grid
set key top left
set xtics ("8" 8, "64" 64, "512" 512, "4K" 4096, "32K" 32768, "256K" 262144, "1M" 1048576)
set xlabel "message size (bytes)"
set ylabel "latency (us)"
set title "latency (one way)"
plot "$dat.am-lat.dat" using 1:2 with linespoints lw 2 title "active message", \
     "$dat.put-lat.dat" using 1:2 with linespoints lw 2 title "put + flush", \
     "$dat.am-lat.dat" using 1:3 with lines lw 2 dt 2 title "floor: cache-line ping-pong"
set ylabel "bandwidth (MB/s)"
set title "bandwidth"
set key bottom right
plot "$dat.am-bw.dat" using 1:2 with linespoints lw 2 title "active messages", \
     "$dat.put-bw.dat" using 1:2 with linespoints lw 2 title "put", \
     "$dat.put-bw.dat" using 1:3 with lines lw 2 dt 2 title "floor: process_vm_writev"
unset multiplot
EOF
        echo
        echo "chart:       $png"
    else
        echo
        echo "demo: the chart failed: $(tail -n 1 "$dat.log")"
    fi
fi
echo "full tables: $txt"
echo "CSV:         $csv, $csv_alloc"
echo "transports, limits and parameters of this build: $build/tools/ferry_info/ferry_info [-a]"
