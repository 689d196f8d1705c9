#!/bin/sh
# Striping across rails (src/bml): 4 MiB put bandwidth between two ranks in
# two network namespaces joined by two links of their own, with one tcp
# module per link (FERRY_TCP_MODULES=per-interface), measured with one rail
# (FERRY_TCP_IF_INCLUDE naming rail0 only) and with both, in alternating
# rounds. Prints each round's figure (ferry-bench put-bw, MB/s, beside its
# floor: one plain socket over rail0) and the median of the per-round ratios
# two rails / one.
#
#   sh bench/bml_rails.sh [BUILD_DIR] [ROUNDS] [SIZE]
#
# Defaults: build, 5 rounds, 4M. BML_RAILS_ENV="VAR=value ..." passes more
# variables to both runs (FERRY_BML_STRIPE_FRAG=1M, say). Needs root and ip netns (netns_lib.sh);
# takes /tmp/ferry-netns.lock itself.
set -u
build=${1:-build}
rounds=${2:-5}
size=${3:-4M}
here=$(cd "$(dirname "$0")" && pwd)
MH=$(cd "$here/../tests/multihost" && pwd)
build=$(cd "$build" && pwd)
if [ -z "${BML_RAILS_LOCKED:-}" ]; then
    BML_RAILS_LOCKED=1 exec flock /tmp/ferry-netns.lock sh "$0" "$build" "$rounds" "$size"
fi
. "$MH/netns_lib.sh"
mh_require_netns
mh_setup 2
set -- $MH_HOSTS
H1=$1 H2=$2
mh_link "$H1" "$H2" rail0 78
mh_link "$H1" "$H2" rail1 79
run() { # INCLUDE: prints the put-bw figure and its floor
    extra=""
    for v in ${BML_RAILS_ENV:-}; do extra="$extra -x $v"; done
    # shellcheck disable=SC2086
    ip netns exec "$MH_HUB" "$build/tools/ferryrun/ferryrun" --pmi-addr 10.77.0.1 \
        --launch-agent "sh $MH/ns_agent.sh $MH_STATE" --host "$H1:1,$H2:1" --timeout 300 \
        -x FERRY_BTL=self,tcp -x FERRY_TCP_MODULES=per-interface -x FERRY_TCP_IF_INCLUDE="$1" \
        -x FERRY_BENCH_TCP_FLOOR_ADDR=10.78.0.2 $extra \
        "$build/bench/ferry-bench" put-bw -m "$size:$size" -p 9 2>"$MH_STATE/err" |
        awk '$1 ~ /^[0-9]+$/ { print $2, $3; exit }'
}
ratios=""
r=1
while [ "$r" -le "$rounds" ]; do
    one=$(run 10.78.0.0/24)
    [ -n "$one" ] || { echo "the one-rail run gave no figure:"; tail -20 "$MH_STATE/err"; exit 1; }
    two=$(run 10.78.0.0/24,10.79.0.0/24)
    set -- $one $two
    ratio=$(awk -v a="$1" -v b="$3" 'BEGIN { printf "%.2f", b / a }')
    echo "round $r: one rail $1 MB/s (floor $2), two rails $3 MB/s (floor $4): ${ratio}x"
    ratios="$ratios $ratio"
    r=$((r + 1))
done
echo "$ratios" | tr ' ' '\n' | grep . | sort -n |
    awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
          printf "median of %d rounds: two rails / one rail = %.2fx\n", NR, m }'
