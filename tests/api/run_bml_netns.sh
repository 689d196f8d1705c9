#!/bin/sh
# usage: run_bml_netns.sh FERRYRUN TEST_BML [crossed]
# Failover over real links: two ranks in two network namespaces
# (tests/multihost/netns_lib.sh) joined by two links of their own, rail0
# (10.78.0.0/24) and rail1 (10.79.0.0/24), with a tcp module on each
# (FERRY_TCP_MODULES=per-interface); the hub's link carries only the
# launcher's PMI. Once traffic flows, rail0 (the primary's) is set down at
# one end. tcp must report it within FERRY_TCP_USER_TIMEOUT (2000 ms), the
# BML must move everything to rail1, and test_bml (--cut=link) checks that
# every put completed and landed, every numbered message arrived once and
# in order both ways, and neither rank took the other as failed. Needs root
# and ip netns (skipped otherwise); run under flock /tmp/ferry-netns.lock.
# With crossed, the two links get opposite interface names and kernel
# order on the two hosts (ra is 10.78 on the first, 10.79 on the second)
# and FERRY_TCP_IF_INCLUDE names them: each host's module 0 pairs with the
# other's module 1, and the BML must name the lost rail by the peer's
# number for it.
# With unequal, ra is 10.78 and rb 10.79 on both hosts, and the first host
# has two more interfaces, dm and dn (10.80.0.1/24 and 10.81.0.1/24, the
# two ends of a veth it holds), which FERRY_TCP_IF_INCLUDE=dm,dn,ra,rb
# numbers first: that host has four tcp modules and the other two, and its
# modules 2 and 3 pair with the other's 0 and 1. Its puts, gets and
# atomics must name the peer's module by the peer's number for it: by its
# own, 2 and 3, they name none of the peer's.
set -u
ferryrun=$1 prog=$2 variant=${3:-}
HERE=$(cd "$(dirname "$0")" && pwd)
MH=$(cd "$HERE/../multihost" && pwd)
. "$MH/netns_lib.sh"
mh_require_netns
mh_setup 2
set -- $MH_HOSTS
H1=$1 H2=$2
if [ "$variant" = unequal ]; then
    mh_link "$H1" "$H2" ra 78
    mh_link "$H1" "$H2" rb 79
    ip -n "$H1" link add dm type veth peer name dn && ip -n "$H1" addr add 10.80.0.1/24 dev dm &&
        ip -n "$H1" addr add 10.81.0.1/24 dev dn && ip -n "$H1" link set dn up &&
        ip -n "$H1" link set dm up && mh_wait_up "$H1" dm && mh_wait_up "$H1" dn ||
        { echo "run_bml_netns: cannot add the first host's two more interfaces"; exit 1; }
    include=dm,dn,ra,rb cut_dev=ra
elif [ "$variant" = crossed ]; then
    ip -n "$H1" link add ra index 20 type veth peer name rb netns "$H2" index 21 &&
        ip -n "$H1" link add rb index 21 type veth peer name ra netns "$H2" index 20 &&
        ip -n "$H1" addr add 10.78.0.1/24 dev ra && ip -n "$H2" addr add 10.78.0.2/24 dev rb &&
        ip -n "$H1" addr add 10.79.0.1/24 dev rb && ip -n "$H2" addr add 10.79.0.2/24 dev ra ||
        { echo "run_bml_netns: cannot build the crossed links"; exit 1; }
    for d in ra rb; do
        ip -n "$H1" link set "$d" up && ip -n "$H2" link set "$d" up || exit 1
    done
    for d in ra rb; do
        mh_wait_up "$H1" "$d" && mh_wait_up "$H2" "$d" || exit 1
    done
    include=ra,rb cut_dev=rb
else
    mh_link "$H1" "$H2" rail0 78
    mh_link "$H1" "$H2" rail1 79
    include=10.78.0.0/24,10.79.0.0/24 cut_dev=rail0
fi
out=$MH_STATE/out err=$MH_STATE/err
ip netns exec "$MH_HUB" "$ferryrun" --pmi-addr 10.77.0.1 \
    --launch-agent "sh $MH/ns_agent.sh $MH_STATE" --host "$H1:1,$H2:1" --timeout 120 \
    -x FERRY_BTL=self,tcp -x FERRY_TCP_MODULES=per-interface \
    -x FERRY_TCP_IF_INCLUDE=$include -x FERRY_TCP_USER_TIMEOUT=2000 \
    -x FERRY_LOG_LEVEL=info "$prog" --cut=link="$MH_STATE" >"$out" 2>"$err" &
job=$!
fail() {
    echo "run_bml_netns: $*"
    echo "--- stdout:"; tail -c 6000 "$out"
    echo "--- stderr:"; tail -c 6000 "$err"
    exit 1
}
mh_wait_ready "$job" "$out" ||
    fail "the ranks did not get traffic going (job status $MH_JOB_STATUS)"
echo "+ ip -n $H2 link set $cut_dev down (10.78.0.0/24)"
ip -n "$H2" link set "$cut_dev" down || fail "cannot set the link down"
touch "$MH_STATE/cut"
wait "$job"
status=$?
cat "$out"
grep -E "lost|replay" "$err"
[ "$status" -eq 0 ] || fail "the job exited with $status"
grep -q "ok  rank 0: no peer failed" "$out" || fail "rank 0 did not end well"
grep -q "ok  rank 1: no peer failed" "$out" || fail "rank 1 did not end well"
grep -q "puts across the cut link, all complete" "$out" || fail "no stream across the cut"
if [ "$variant" = crossed ]; then
    grep -q "pairs with rank 1's module 1 (the hosts number" "$err" ||
        fail "the modules did not pair across numbers"
    grep -q "path tcp (module [12]) lost" "$err" || fail "the loss of 10.78 was not reported"
elif [ "$variant" = unequal ]; then
    grep -q "tcp: module 2 pairs with rank 1's module 0 (the hosts number" "$err" ||
        fail "the first host's module for 10.78 did not pair with the other's first"
    grep -q "path tcp (module [0-9]) lost" "$err" || fail "the loss of 10.78 was not reported"
else
    grep -q "path tcp (module 1) lost" "$err" || fail "rail0's loss was not reported"
fi
echo "run_bml_netns: ok"
