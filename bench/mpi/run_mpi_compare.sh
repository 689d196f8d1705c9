#!/usr/bin/env bash
# The side-by-side MPI benchmark: runs ferry-mpibench under a list of MPI
# configurations in interleaved short rounds (in each round, per metric, one
# job of every configuration, the order rotated each round, so that a
# reference and its peer measure a metric seconds apart), then prints per metric and size the median
# of each configuration over the rounds and the median of the PAIRED ratios
# reference / peer (each round's reference figure divided by the same
# round's peer figure), and draws one PNG chart per metric with gnuplot.
#
#   bench/mpi/run_mpi_compare.sh [options]
#     -b DIR      build folder holding bench/mpi/ferry-mpibench-* (build)
#     -o DIR      output folder (DIR/mpi-compare under the build folder)
#     -r N        rounds (5)
#     -m MIN:MAX  message sizes (1:1M)
#     -t LIST     metrics, comma separated (all: lat,bw,bibw,rate,put-lat,
#                 get-lat,put-bw,get-bw,fop-lat)
#     -T MS       time of one timed repetition inside a job (10)
#     --only LIST configurations to run (default: every one available)
#     --ref LIST  reference configurations (default: those of ferry-sm,
#                 ferry-tcp, ferrymsg-sm and ferrymsg-tcp that run, else the
#                 first configuration)
#     --ferry-component DIR  folder holding mca_btl_ferry.so (default
#                 $FERRY_OMPI_COMPONENT_DIR, then the build's src/ompi)
#     --ferry-window FLAVOR  window of ferry's one-sided jobs: create (the
#                 default), alloc_mem (created over MPI_Alloc_mem memory from
#                 ferry's pool: sm's heap) or allocate (ferry-mpibench -w)
#     --list      print the configurations and whether each can run, then exit
#
# Configurations (Open MPI's mpirun or MPICH's mpiexec.hydra, 2 ranks,
# --bind-to core):
#   ferry-sm    --mca pml ob1 --mca btl self,ferry, FERRY_BTL=sm, osc rdma
#   ferry-tcp   --mca pml ob1 --mca btl self,ferry, FERRY_BTL=tcp, osc rdma
#   vader-cma   --mca pml ob1 --mca btl self,vader, single copy cma
#   vader-copy  --mca pml ob1 --mca btl self,vader, single copy none
#   ob1-tcp     --mca pml ob1 --mca btl self,tcp
#   ucx         --mca pml ucx (+ opal_common_ucx_tls/devices any), osc ucx
#   ucx-tcp     the same with UCX_TLS=self,tcp: UCX's tcp transport alone
#               (on one host UCX would otherwise take shared memory), the
#               peer of ferry-tcp and ferrymsg-tcp
#   mpich       mpiexec.hydra, MPICH's default device
#   ferrymsg-sm   no MPI: the same benchmark over ferry's tagged layer,
#   ferrymsg-tcp  ferry_put_nb/get_nb and ferry_atomic_fetch
#                 (ferry-mpibench-ferry, bench/mpi/ferry_mpi), under
#                 ferryrun, FERRY_BTL=self,sm or self,tcp
# The three ob1 peers run one-sided through --mca osc sm: on Open MPI 4.1.4
# osc/rdma over vader crashes in fetch_and_op and compare_and_swap (issue
# 11), and over tcp it has no RDMA path at all; so their one-sided figures
# are osc/sm's (shared memory), tcp's included. ferry's configurations run
# one-sided through --mca osc rdma over ferry's RDMA and atomics, on a
# window from MPI_Win_create (--ferry-window): on one host osc/rdma maps an
# MPI_Win_allocate window's memory and does its puts, gets and atomics with
# the CPU itself, so those figures would be osc/rdma's, not ferry's.
# ferry's configurations are skipped, with the reason printed, while the
# component is not found.
# Exits 0 when every job that ran worked, 1 when one failed, 2 on a usage
# error.
set -euo pipefail

build=build
out=""
rounds=5
sizes=1:1M
metrics=all
time_ms=10
only=""
refs=""
ferry_dir=${FERRY_OMPI_COMPONENT_DIR:-}
ferry_window=create
list_only=0

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit "${1:-2}"
}

while [ $# -gt 0 ]; do
    case $1 in
    -b) build=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    -m) sizes=$2; shift 2 ;;
    -t) metrics=$2; shift 2 ;;
    -T) time_ms=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --ref) refs=$2; shift 2 ;;
    --ferry-component) ferry_dir=$2; shift 2 ;;
    --ferry-window) ferry_window=$2; shift 2 ;;
    --list) list_only=1; shift ;;
    -h | --help) usage 0 ;;
    *) echo "run_mpi_compare: unknown argument '$1'" >&2; usage 2 ;;
    esac
done
if [ "$ferry_window" != create ] && [ "$ferry_window" != allocate ] &&
    [ "$ferry_window" != alloc_mem ]; then
    echo "run_mpi_compare: --ferry-window '$ferry_window': expected create, allocate or alloc_mem" >&2
    exit 2
fi
if ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
    echo "run_mpi_compare: -r '$rounds': expected a positive integer" >&2
    exit 2
fi
out=${out:-$build/mpi-compare}
bin_ompi=$build/bench/mpi/ferry-mpibench-openmpi
bin_mpich=$build/bench/mpi/ferry-mpibench-mpich
bin_ferry=$build/bench/mpi/ferry-mpibench-ferry
ferryrun=$build/tools/ferryrun/ferryrun

if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
mpirun=$(command -v mpirun.openmpi || command -v mpirun || true)
hydra=$(command -v mpiexec.hydra || command -v mpiexec.mpich || true)

# ---- the configurations ----
names=(ferry-sm ferry-tcp vader-cma vader-copy ob1-tcp ucx ucx-tcp mpich ferrymsg-sm ferrymsg-tcp)
declare -A label args why
label[ferry-sm]="ob1 + btl ferry (FERRY_BTL=sm); osc rdma"
label[ferry-tcp]="ob1 + btl ferry (FERRY_BTL=tcp); osc rdma"
label[vader-cma]="ob1 + vader, single copy cma; osc sm"
label[vader-copy]="ob1 + vader, no single copy; osc sm"
label[ob1-tcp]="ob1 + tcp; osc sm (one-sided over shared memory)"
label[ucx]="pml ucx; osc ucx"
label[ucx-tcp]="pml ucx, UCX_TLS=self,tcp; osc ucx"
label[mpich]="MPICH, mpiexec.hydra, default device"
label[ferrymsg-sm]="no MPI: ferry/msg.h + one-sided API, sm"
label[ferrymsg-tcp]="no MPI: ferry/msg.h + one-sided API, tcp"
ucx_any="--mca opal_common_ucx_tls any --mca opal_common_ucx_devices any"
args[ferry-sm]="--mca pml ob1 --mca btl self,ferry -x FERRY_BTL=sm --mca osc rdma"
args[ferry-tcp]="--mca pml ob1 --mca btl self,ferry -x FERRY_BTL=tcp --mca osc rdma"
args[vader-cma]="--mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma --mca osc sm"
args[vader-copy]="--mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism none --mca osc sm"
args[ob1-tcp]="--mca pml ob1 --mca btl self,tcp --mca osc sm"
args[ucx]="--mca pml ucx $ucx_any --mca osc ucx"
args[ucx-tcp]="--mca pml ucx $ucx_any -x UCX_TLS=self,tcp --mca osc ucx"
args[mpich]=""
args[ferrymsg-sm]="self,sm"
args[ferrymsg-tcp]="self,tcp"

# Where Open MPI finds ferry's component: a folder of ours prepended to
# the system's component folder (the parameter replaces the default path).
# find_ferry sets ferry_path (empty when Open MPI finds the component by
# itself) or ferry_why.
ferry_path=""
ferry_why=""
find_ferry() {
    local sys cand
    if [ -z "$mpirun" ] || ! command -v ompi_info >/dev/null 2>&1; then
        ferry_why="Open MPI's mpirun and ompi_info are not installed"
        return
    fi
    if ompi_info 2>/dev/null | grep -q "MCA btl: ferry"; then
        return # installed where Open MPI looks by itself
    fi
    sys=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
    for cand in "$ferry_dir" "$build/src/ompi"; do
        [ -n "$cand" ] && [ -f "$cand/mca_btl_ferry.so" ] || continue
        if OMPI_MCA_mca_base_component_path="$cand:$sys" ompi_info 2>/dev/null |
            grep -q "MCA btl: ferry"; then
            ferry_path="$cand:$sys"
            return
        fi
        ferry_why="ompi_info does not list $cand/mca_btl_ferry.so as 'MCA btl: ferry'"
        return
    done
    ferry_why="no mca_btl_ferry.so (not built: see the configure output; give its folder with --ferry-component)"
}

for n in "${names[@]}"; do
    why[$n]=""
done
find_ferry
why[ferry-sm]=$ferry_why
why[ferry-tcp]=$ferry_why
for n in ferry-sm ferry-tcp vader-cma vader-copy ob1-tcp ucx ucx-tcp; do
    if [ -z "${why[$n]}" ] && [ ! -x "$bin_ompi" ]; then
        why[$n]="$bin_ompi not built (needs libopenmpi-dev)"
    elif [ -z "${why[$n]}" ] && [ -z "$mpirun" ]; then
        why[$n]="Open MPI's mpirun not found"
    fi
done
for n in ucx ucx-tcp; do
    if [ -z "${why[$n]}" ] && ! ompi_info 2>/dev/null | grep -q "MCA pml: ucx"; then
        why[$n]="this Open MPI has no pml ucx"
    fi
done
for n in ferrymsg-sm ferrymsg-tcp; do
    if [ ! -x "$bin_ferry" ]; then
        why[$n]="$bin_ferry not built"
    elif [ ! -x "$ferryrun" ]; then
        why[$n]="$ferryrun not built"
    fi
done
if [ ! -x "$bin_mpich" ]; then
    why[mpich]="$bin_mpich not built (needs libmpich-dev)"
elif [ -z "$hydra" ]; then
    why[mpich]="mpiexec.hydra not found"
fi

chosen=()
for n in "${names[@]}"; do
    if [ -n "$only" ] && [[ ",$only," != *",$n,"* ]]; then
        continue
    fi
    if [ -n "${why[$n]}" ]; then
        echo "# skipped $n: ${why[$n]}"
    else
        chosen+=("$n")
    fi
done
if [ -n "$only" ]; then
    for n in ${only//,/ }; do
        [ -n "${label[$n]:-}" ] || { echo "run_mpi_compare: unknown configuration '$n'" >&2; exit 2; }
    done
fi
if [ "$list_only" -eq 1 ]; then
    for n in "${names[@]}"; do
        printf "%-12s %-52s %s\n" "$n" "${label[$n]}" "${why[$n]:-available}"
    done
    exit 0
fi
if [ ${#chosen[@]} -eq 0 ]; then
    echo "run_mpi_compare: no configuration can run" >&2
    exit 1
fi
if [ -z "$refs" ]; then
    for n in ferry-sm ferry-tcp ferrymsg-sm ferrymsg-tcp; do
        [[ " ${chosen[*]} " == *" $n "* ]] && refs=${refs:+$refs,}$n
    done
    [ -n "$refs" ] || refs=${chosen[0]}
fi
for r in ${refs//,/ }; do
    if [[ " ${chosen[*]} " != *" $r "* ]]; then
        echo "run_mpi_compare: reference '$r' is not among the configurations run (${chosen[*]})" >&2
        exit 2
    fi
done

mkdir -p "$out/raw"
rm -f "$out"/raw/*.csv "$out"/*.png "$out"/*.dat
bench_args=(-m "$sizes" -T "$time_ms" -r 5)

# run_one NAME ROUND METRIC: one job; its CSV rows go to
# raw/NAME.ROUND.METRIC.csv.
failed=0
run_one() {
    local n=$1 r=$2 m=$3 file=$out/raw/$1.$2.$3.csv log=$out/raw/$1.$2.$3.log
    local -a cmd extra=()
    if [[ $n == ferry-* && $m =~ ^(put|get|fop)- ]]; then
        extra=(-w "$ferry_window")
    fi
    if [ "$n" = mpich ]; then
        cmd=("$hydra" -n 2 -bind-to core "$bin_mpich")
    elif [[ $n == ferrymsg-* ]]; then
        cmd=(env FERRY_BTL="${args[$n]}" "$ferryrun" -n 2 --bind-to core "$bin_ferry")
    else
        # shellcheck disable=SC2206
        cmd=("$mpirun" -n 2 --bind-to core ${args[$n]})
        if [ -n "$ferry_path" ] && [[ $n == ferry-* ]]; then
            cmd+=(--mca mca_base_component_path "$ferry_path")
        fi
        cmd+=("$bin_ompi")
    fi
    if ! timeout 900 "${cmd[@]}" "$m" "${bench_args[@]}" "${extra[@]}" -o "$file" >"$log" 2>&1; then
        echo "# $n, round $r, $m: the job failed; the end of its output ($log):"
        tail -n 5 "$log" | sed 's/^/#   /'
        rm -f "$file"
        failed=1
    fi
}

if [ "$metrics" = all ]; then
    metrics=lat,bw,bibw,rate,put-lat,get-lat,put-bw,get-bw,fop-lat
fi
echo "# $rounds rounds; in each, per metric, one job of each of: ${chosen[*]}"
echo "# (the order rotated each round); each job: ferry-mpibench METRIC ${bench_args[*]}"
k=${#chosen[@]}
for ((r = 1; r <= rounds; r++)); do
    for m in ${metrics//,/ }; do
        for ((i = 0; i < k; i++)); do
            n=${chosen[$(((i + r - 1) % k))]}
            run_one "$n" "$r" "$m"
        done
    done
    echo "# round $r of $rounds done"
done

# ---- the figures ----
# all.csv: config,round,metric,size,value,unit
all=$out/all.csv
: >"$all"
for f in "$out"/raw/*.csv; do
    [ -e "$f" ] || continue
    base=$(basename "$f" .csv)   # NAME.ROUND.METRIC
    name=${base%%.*}
    round=${base#*.}
    round=${round%%.*}
    awk -F, -v c="$name" -v r="$round" '!/^#/ && $1 != "metric" && NF == 4 {
        print c "," r "," $0 }' "$f" >>"$all"
done
if [ ! -s "$all" ]; then
    echo "run_mpi_compare: no job gave figures" >&2
    exit 1
fi

# medians.csv: metric,size,config,median,unit,rounds
# ratios.csv:  metric,size,ref,peer,ratio,q1,q3,rounds (ratio: ref / peer)
awk -F, -v refs="$refs" -v order="${chosen[*]}" -v outdir="$out" '
    function q(a, n, p,    i, j, t, pos, lo) {
        for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
        pos = p * (n - 1) + 1; lo = int(pos)
        return lo >= n ? a[n] : a[lo] + (a[lo + 1] - a[lo]) * (pos - lo)
    }
    {
        key = $3 "," $4; v[key "," $1 "," $2] = $5; unit[$3] = $6
        if (!(key in seenkey)) { seenkey[key] = 1; keys[++nk] = key }
        if (!(($1 "," $2) in seenrun)) { seenrun[$1 "," $2] = 1 }
        if ($2 > maxr) maxr = $2
    }
    END {
        nc = split(order, cs, " "); nr = split(refs, rs, ",")
        med = outdir "/medians.csv"; rat = outdir "/ratios.csv"
        print "metric,size,config,median,unit,rounds" > med
        print "metric,size,ref,peer,ratio,q1,q3,rounds" > rat
        for (i = 1; i <= nk; i++) {
            split(keys[i], ks, ",")
            for (c = 1; c <= nc; c++) {
                n = 0; delete a
                for (r = 1; r <= maxr; r++) if ((keys[i] "," cs[c] "," r) in v) a[++n] = v[keys[i] "," cs[c] "," r]
                if (n > 0) printf "%s,%s,%s,%.6g,%s,%d\n", ks[1], ks[2], cs[c], q(a, n, 0.5), unit[ks[1]], n > med
            }
            for (x = 1; x <= nr; x++) for (c = 1; c <= nc; c++) {
                if (cs[c] == rs[x]) continue
                n = 0; delete a
                for (r = 1; r <= maxr; r++) {
                    kr = keys[i] "," rs[x] "," r; kp = keys[i] "," cs[c] "," r
                    if ((kr in v) && (kp in v) && v[kp] > 0) a[++n] = v[kr] / v[kp]
                }
                if (n == 0) continue
                m = q(a, n, 0.5); lo = q(a, n, 0.25); hi = q(a, n, 0.75)
                printf "%s,%s,%s,%s,%.6g,%.6g,%.6g,%d\n", ks[1], ks[2], rs[x], cs[c], m, lo, hi, n > rat
            }
        }
    }' "$all"

# The tables, one per metric: medians, then each reference's paired ratios.
metric_list=$(cut -d, -f1 "$out/medians.csv" | sed 1d | awk '!s[$0]++')
for m in $metric_list; do
    unit=$(awk -F, -v m="$m" '$1 == m { print $5; exit }' "$out/medians.csv")
    echo
    echo "## $m ($unit): median over the rounds"
    awk -F, -v m="$m" -v order="${chosen[*]}" '
        NR > 1 && $1 == m { v[$2 "," $3] = $4; if (!($2 in s)) { s[$2] = 1; sz[++n] = $2 } }
        END {
            nc = split(order, cs, " ")
            printf "%-9s", "size"; for (c = 1; c <= nc; c++) printf " %12s", cs[c]; print ""
            for (i = 1; i <= n; i++) {
                printf "%-9s", sz[i]
                for (c = 1; c <= nc; c++) { k = sz[i] "," cs[c]; if (k in v) printf " %12.4g", v[k]; else printf " %12s", "-" }
                print ""
            }
        }' "$out/medians.csv"
    for ref in ${refs//,/ }; do
        echo "## $m: paired ratio $ref / peer, median [Q1 Q3] over the rounds"
        awk -F, -v m="$m" -v ref="$ref" -v order="${chosen[*]}" '
            NR > 1 && $1 == m && $3 == ref { v[$2 "," $4] = sprintf("%.3g [%.3g %.3g]", $5, $6, $7)
                if (!($2 in s)) { s[$2] = 1; sz[++n] = $2 } }
            END {
                nc = split(order, cs, " ")
                printf "%-9s", "size"; for (c = 1; c <= nc; c++) if (cs[c] != ref) printf " %20s", cs[c]; print ""
                for (i = 1; i <= n; i++) {
                    printf "%-9s", sz[i]
                    for (c = 1; c <= nc; c++) {
                        if (cs[c] == ref) continue
                        k = sz[i] "," cs[c]; printf " %20s", (k in v) ? v[k] : "-"
                    }
                    print ""
                }
            }' "$out/ratios.csv"
    done
done

# ---- the charts ----
echo
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "# no charts: gnuplot is not installed (apt-get install gnuplot-nox)"
else
    for m in $metric_list; do
        dat=$out/$m.dat
        png=$out/$m.png
        unit=$(awk -F, -v m="$m" '$1 == m { print $5; exit }' "$out/medians.csv")
        awk -F, -v m="$m" -v order="${chosen[*]}" '
            NR > 1 && $1 == m { v[$2 "," $3] = $4; if (!($2 in s)) { s[$2] = 1; sz[++n] = $2 } }
            END {
                nc = split(order, cs, " ")
                printf "size"; for (c = 1; c <= nc; c++) printf " %s", cs[c]; print ""
                for (i = 1; i <= n; i++) {
                    printf "%s", sz[i]
                    for (c = 1; c <= nc; c++) { k = sz[i] "," cs[c]; printf " %s", (k in v) ? v[k] : "NaN" }
                    print ""
                }
            }' "$out/medians.csv" >"$dat"
        ncol=$((${#chosen[@]} + 1))
        if gnuplot <<EOF 2>"$out/$m.gnuplot.log"; then
set terminal pngcairo size 900,560 noenhanced
set output "$png"
set title "ferry-mpibench $m: median of $rounds rounds, 2 ranks bound to cores"
set xlabel "message size (bytes)"
set ylabel "$m ($unit)"
set logscale x 2
set logscale y
set grid
set key outside right top
set datafile missing "NaN"
plot for [i=2:$ncol] "$dat" using 1:i with linespoints lw 2 title columnheader(i)
EOF
            echo "# chart: $png"
        else
            echo "# chart for $m failed: $(tail -n 1 "$out/$m.gnuplot.log")"
        fi
    done
fi
echo "# figures: $out/medians.csv, paired ratios: $out/ratios.csv, every job: $out/all.csv"
exit "$failed"
