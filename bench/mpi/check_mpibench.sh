#!/bin/sh
# Runs ferry-mpibench once at tiny sizes under one configuration and checks
# its output, or checks a given output file.
#
#   check_mpibench.sh run KIND LAUNCHER BINARY OUT   KIND openmpi, mpich or
#                                                    ferry (LAUNCHER ferryrun)
#   check_mpibench.sh check FILE
#   check_mpibench.sh compare SCRIPT BUILD OUTDIR
#
# compare runs the side-by-side script for two rounds of two Open MPI
# configurations, ferry's component and ferry's tagged layer at tiny sizes
# and checks that it wrote medians, paired ratios (finite, positive) and,
# with gnuplot, a chart per metric, and that it named the reason for
# skipping what it skipped.
#
# The output must hold the header line "metric,size,value,unit" after its
# comment lines, then exactly one row per metric and size of `all -m 1:4`
# (fop-lat at 8 bytes only), each with a positive finite figure and the
# metric's unit. No timing is judged. A launcher or binary given as "none"
# (or "none:reason") makes the run skip with exit status 77.
set -u

rejected() {
    echo "rejected: $*"
    exit 1
}

check() {
    file=$1
    [ -r "$file" ] || rejected "cannot read $file"
    awk '
        function fail(why) { print "rejected: " why; bad = 1; exit 1 }
        BEGIN {
            split("lat bw bibw rate put-lat get-lat put-bw get-bw", ms, " ")
            unit["lat"] = "us"; unit["put-lat"] = "us"; unit["get-lat"] = "us"
            unit["fop-lat"] = "us"; unit["rate"] = "Mmsg/s"
            unit["bw"] = "MB/s"; unit["bibw"] = "MB/s"; unit["put-bw"] = "MB/s"
            unit["get-bw"] = "MB/s"
            for (i in ms) for (s = 1; s <= 4; s *= 2) want[ms[i] "," s] = 1
            want["fop-lat,8"] = 1
        }
        /^#/ { next }
        !header {
            if ($0 != "metric,size,value,unit") fail("no header line \"metric,size,value,unit\" before \"" $0 "\"")
            header = 1
            next
        }
        {
            n = split($0, f, ",")
            if (n != 4) fail(n " fields in \"" $0 "\"")
            key = f[1] "," f[2]
            if (!(key in want)) fail("unexpected row \"" $0 "\"")
            if (key in seen) fail(key " twice")
            seen[key] = 1
            if (f[3] !~ /^[0-9]+(\.[0-9]+)?$/ || f[3] !~ /[1-9]/)
                fail("\"" f[3] "\" is not a positive finite figure in \"" $0 "\"")
            if (f[4] != unit[f[1]]) fail("unit \"" f[4] "\" for " f[1])
        }
        END {
            if (bad) exit 1
            if (!header) { print "rejected: no header line \"metric,size,value,unit\""; exit 1 }
            for (k in want) if (!(k in seen)) { print "rejected: no row for " k; exit 1 }
            print "output as expected: " length(seen) " rows"
        }' "$file"
}

case ${1:-} in
check)
    [ $# -eq 2 ] || { echo "usage: $0 check FILE" >&2; exit 2; }
    check "$2"
    ;;
run)
    [ $# -eq 5 ] || { echo "usage: $0 run KIND LAUNCHER BINARY OUT" >&2; exit 2; }
    kind=$2 launcher=$3 bin=$4 out=$5
    case $bin in
    none*) echo "SKIPPED: ${bin#none:}"; exit 77 ;;
    esac
    if [ "$launcher" = none ] || ! command -v "$launcher" >/dev/null 2>&1; then
        echo "SKIPPED: no launcher for $kind (mpirun.openmpi or mpiexec.hydra) found"
        exit 77
    fi
    rm -f "$out"
    args="all -m 1:4 -T 0.2 -r 1 -o $out"
    if [ "$kind" = openmpi ]; then
        if [ "$(id -u)" -eq 0 ]; then
            export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        fi
        # vader with osc/sm: osc/rdma over vader crashes in fetch_and_op on
        # Open MPI 4.1.4 (issue 11).
        # shellcheck disable=SC2086
        "$launcher" -n 2 --bind-to core --mca pml ob1 --mca btl self,vader \
            --mca osc sm "$bin" $args || rejected "the job exited with $?"
    elif [ "$kind" = ferry ]; then
        # shellcheck disable=SC2086
        "$launcher" -n 2 --bind-to core "$bin" $args || rejected "the job exited with $?"
    else
        # shellcheck disable=SC2086
        "$launcher" -n 2 -bind-to core "$bin" $args || rejected "the job exited with $?"
    fi
    check "$out"
    ;;
compare)
    [ $# -eq 4 ] || { echo "usage: $0 compare SCRIPT BUILD OUTDIR" >&2; exit 2; }
    script=$2 build=$3 dir=$4
    if [ ! -x "$build/bench/mpi/ferry-mpibench-openmpi" ]; then
        echo "SKIPPED: ferry-mpibench-openmpi was not built (see the configure output)"
        exit 77
    fi
    if ! command -v mpirun >/dev/null 2>&1; then
        echo "SKIPPED: Open MPI's mpirun is not installed"
        exit 77
    fi
    rm -rf "$dir"
    log=$dir.log
    bash "$script" -b "$build" -o "$dir" -r 2 -m 1:2 -T 0.2 -t lat,put-lat \
        --only vader-cma,vader-copy,ferry-sm,ferrymsg-sm >"$log" 2>&1 || {
        cat "$log"
        rejected "the script exited with $?"
    }
    cat "$log"
    if [ -f "$build/src/ompi/mca_btl_ferry.so" ]; then
        # The component is built: ferry-sm must run, its point-to-point
        # and its one-sided (osc/rdma over ferry) measured and paired.
        for m in lat put-lat; do
            grep -q "^## $m: paired ratio ferry-sm" "$log" ||
                rejected "mca_btl_ferry.so is built but ferry-sm's $m was not measured"
            [ "$(grep -c "^$m,[12],ferry-sm," "$dir/medians.csv")" -eq 2 ] ||
                rejected "medians.csv lacks the $m rows of ferry-sm"
        done
        grep -q "one-sided window from MPI_Win_create" "$dir"/raw/ferry-sm.*.put-lat.csv ||
            rejected "ferry-sm's put-lat did not run on a window from MPI_Win_create"
    else
        grep -q "^# skipped ferry-sm: ." "$log" ||
            rejected "ferry-sm is not built but was not skipped with a reason"
    fi
    # ferry's tagged layer without MPI: point-to-point and one-sided, paired.
    grep -q "^## put-lat: paired ratio ferrymsg-sm" "$log" ||
        rejected "ferrymsg-sm was not measured and paired"
    [ "$(grep -c '^\(lat\|put-lat\),[12],ferrymsg-sm,' "$dir/medians.csv")" -eq 4 ] ||
        rejected "medians.csv lacks the lat and put-lat rows of ferrymsg-sm"
    [ "$(grep -c '^lat,[12],vader-c' "$dir/medians.csv")" -ge 4 ] ||
        rejected "medians.csv lacks the lat rows of both configurations"
    awk -F, 'NR > 1 { n++; if ($5 !~ /^[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?$/ || $5 + 0 <= 0 || $8 < 1) bad = $0 }
             END { if (n < 4 || bad != "") { print "rejected: ratios.csv: " (bad != "" ? bad : n " rows"); exit 1 } }' \
        "$dir/ratios.csv" || exit 1
    if command -v gnuplot >/dev/null 2>&1; then
        for m in lat put-lat; do
            [ -s "$dir/$m.png" ] || rejected "no chart $dir/$m.png"
        done
    fi
    echo "compare output as expected"
    ;;
*)
    echo "usage: $0 run KIND LAUNCHER BINARY OUT | check FILE | compare SCRIPT BUILD OUTDIR" >&2
    exit 2
    ;;
esac
