#!/bin/sh
# usage: run_pairing.sh FERRYRUN TCP_LINKS
# Per-interface modules pair by subnet, whatever order each host lists its
# interfaces in. Two ranks in two network namespaces (tests/multihost/
# netns_lib.sh) are joined by two links of their own, 10.78.0.0/24 and
# 10.79.0.0/24, made so that the two hosts see them the other way round:
#   host 1: ra (ifindex 20) on 10.78, rb (ifindex 21) on 10.79
#   host 2: ra (ifindex 20) on 10.79, rb (ifindex 21) on 10.78
# so the kernel lists the subnets in opposite orders on the two hosts, and
# the interfaces' names name opposite subnets. The hub's link (eth0) carries
# only the launcher's PMI. tcp_links (FERRY_TCP_MODULES=per-interface, two
# links each: four modules a rank) then sends a message, a put and a get
# through every module to the other rank, and checks that every module
# reaches it, that each message arrives on the module on the sender's
# module's subnet with the same link, exactly once per module, and that
# every put and get lands. Two runs:
#   order  FERRY_TCP_IF_INCLUDE=10.78.0.0/15, one item: the modules are
#          numbered by subnet on both hosts (not in the kernel's order), so
#          module k pairs with module k;
#   names  FERRY_TCP_IF_INCLUDE=ra,rb: numbered by the include list, that
#          is 10.78 first on host 1 and 10.79 first on host 2, so module 0
#          of one pairs with module 2 of the other, 1 with 3, and back.
# Before this pairing (module k with module k) both runs fail: module 0 of
# host 1 (10.78) finds no address of host 2's module 0 (10.79) on its
# subnet. Needs root and ip netns with `ip link add ... index` (skipped
# otherwise); run under flock /tmp/ferry-netns.lock with the other
# namespace tests.
set -u
ferryrun=$1 prog=$2
HERE=$(cd "$(dirname "$0")" && pwd)
MH=$(cd "$HERE/../../../../tests/multihost" && pwd)
. "$MH/netns_lib.sh"
mh_require_netns
mh_setup 2
set -- $MH_HOSTS
H1=$1 H2=$2

# link NAME1 INDEX1 NAME2 INDEX2 NET: a veth between the hosts, NAME1 with
# ifindex INDEX1 in H1 at 10.NET.0.1/24, NAME2 with INDEX2 in H2 at
# 10.NET.0.2/24.
link() {
    ip -n "$H1" link add "$1" index "$2" type veth peer name "$3" netns "$H2" index "$4" ||
        mh_skip "'ip link add ... index' fails here (iproute2 or kernel too old?)"
    ip -n "$H1" addr add "10.$5.0.1/24" dev "$1" || exit 1
    ip -n "$H2" addr add "10.$5.0.2/24" dev "$3" || exit 1
    ip -n "$H1" link set "$1" up
    ip -n "$H2" link set "$3" up
    mh_wait_up "$H1" "$1"
    mh_wait_up "$H2" "$3"
}
link ra 20 rb 21 78
link rb 21 ra 20 79

out=$MH_STATE/out err=$MH_STATE/err
fail() {
    echo "run_pairing: $*"
    echo "--- stdout:"; tail -c 8000 "$out"
    echo "--- stderr:"; tail -c 6000 "$err"
    exit 1
}
# The subnets of the two links in the order the kernel lists them.
order() {
    ip -n "$1" -o -4 addr show | awk '$4 ~ /^10\.7[89]\./ { split($4, a, "."); printf "%s ", a[2] }'
}
[ "$(order "$H1")" = "78 79 " ] || fail "host 1 lists its subnets as '$(order "$H1")', not 78 79"
[ "$(order "$H2")" = "79 78 " ] || fail "host 2 lists its subnets as '$(order "$H2")', not 79 78"
echo "run_pairing: host 1 lists 10.78 then 10.79, host 2 10.79 then 10.78"

# run CASE INCLUDE: tcp_links across the two hosts.
run() {
    echo "+ [$1] FERRY_TCP_IF_INCLUDE=$2 tcp_links 4"
    ip netns exec "$MH_HUB" "$ferryrun" --pmi-addr 10.77.0.1 \
        --launch-agent "sh $MH/ns_agent.sh $MH_STATE" --host "$H1:1,$H2:1" --timeout 90 \
        -x FERRY_BTL=self,tcp -x FERRY_TCP_MODULES=per-interface -x FERRY_TCP_LINKS=2 \
        -x FERRY_TCP_IF_INCLUDE="$2" -x FERRY_TCP_CONNECT_TIMEOUT=3000 -x FERRY_LOG_LEVEL=info \
        "$prog" 4 >"$out" 2>"$err"
    status=$?
    [ "$status" -ne 77 ] || { cat "$out"; exit 77; }
    [ "$status" -eq 0 ] || fail "[$1] the job exited with $status"
    [ "$(grep -c "^tcp_links: ok" "$out")" -eq 2 ] || fail "[$1] not both ranks ended well"
    for r in 0 1; do
        [ "$(grep -c "tcp_links: rank $r: rank $((1 - r))'s module" "$out")" -eq 4 ] ||
            fail "[$1] rank $r did not get a message on each of its four modules"
    done
    grep "arrived on" "$out"
}
# expect CASE RANK FROM_MODULE FROM_ADDR LINK TO_MODULE: that message arrived
# on that module.
expect() {
    grep -q "tcp_links: rank $2: rank $((1 - $2))'s module $3 ($4 link $5) arrived on module $6 " \
        "$out" || fail "[$1] rank $2 did not get module $3's message ($4 link $5) on its module $6"
}
# expect_module CASE NS INDEX LINK IF ADDR: that module's log line.
expect_module() {
    grep -q "module $3 (link $4 of 2) on $5 $6:" "$err" ||
        fail "[$1] no module $3 (link $4) on $5 $6 in $2's log"
}

run order 10.78.0.0/15
expect_module order host1 0 0 ra 10.78.0.1
expect_module order host1 2 0 rb 10.79.0.1
expect_module order host2 0 0 rb 10.78.0.2
expect_module order host2 2 0 ra 10.79.0.2
for r in 0 1; do
    expect order $r 0 "10.78.0.$((2 - r))" 0 0
    expect order $r 1 "10.78.0.$((2 - r))" 1 1
    expect order $r 2 "10.79.0.$((2 - r))" 0 2
    expect order $r 3 "10.79.0.$((2 - r))" 1 3
done

run names ra,rb
expect_module names host1 0 0 ra 10.78.0.1
expect_module names host1 2 0 rb 10.79.0.1
expect_module names host2 0 0 ra 10.79.0.2
expect_module names host2 2 0 rb 10.78.0.2
for r in 0 1; do
    # Rank 0 runs on host 1, whose module 0 is on 10.78; rank 1's module 0
    # is on 10.79.
    if [ "$r" -eq 0 ]; then a=10.79.0.2 b=10.78.0.2; else a=10.78.0.1 b=10.79.0.1; fi
    expect names $r 0 "$a" 0 2
    expect names $r 1 "$a" 1 3
    expect names $r 2 "$b" 0 0
    expect names $r 3 "$b" 1 1
done
echo "run_pairing: ok"
