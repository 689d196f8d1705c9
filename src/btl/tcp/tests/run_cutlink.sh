#!/bin/sh
# usage: run_cutlink.sh FERRYRUN TCP_CUT MODE [USER_TIMEOUT_MS]
# A job of two ranks in two network namespaces (tests/multihost/netns_lib.sh)
# talks over tcp on a link of its own between them (the hub's link carries
# the launcher's PMI); once both ranks have traffic flowing, the link is cut:
#   down   one end of the veth set down (the other loses carrier);
#   loss   netem drops every packet on both ends, the links stay up.
# Each rank must report the other failed within FERRY_TCP_USER_TIMEOUT
# (2000 ms here) and a margin, and end (tcp_cut.c). Needs root and ip netns
# (skipped otherwise); run under flock /tmp/ferry-netns.lock with the other
# namespace tests.
set -u
ferryrun=$1 prog=$2 mode=$3
HERE=$(cd "$(dirname "$0")" && pwd)
MH=$(cd "$HERE/../../../../tests/multihost" && pwd)
. "$MH/netns_lib.sh"
# The bound holds for 2000 ms; a fourth argument sets another value (0: the
# kernel's), to see the test fail without the user timeout.
USER_TIMEOUT=${4:-2000}
BOUND=5000
case $mode in
down) ;;
loss)
    command -v tc >/dev/null 2>&1 || mh_skip "'tc' not found (install iproute2)"
    ;;
*) echo "run_cutlink: unknown mode '$mode'"; exit 2 ;;
esac
mh_require_netns
mh_setup 2
set -- $MH_HOSTS
H1=$1 H2=$2
mh_link "$H1" "$H2" cut0 78
if [ "$mode" = loss ]; then
    # netem may be missing from the kernel: probe it on the link first.
    if ! ip netns exec "$H1" tc qdisc add dev cut0 root netem loss 0% 2>/dev/null; then
        mh_skip "netem is not available here (tc qdisc add ... netem fails)"
    fi
    ip netns exec "$H1" tc qdisc del dev cut0 root || exit 1
fi
out=$MH_STATE/out err=$MH_STATE/err
ip netns exec "$MH_HUB" "$ferryrun" --pmi-addr 10.77.0.1 \
    --launch-agent "sh $MH/ns_agent.sh $MH_STATE" --host "$H1:1,$H2:1" --timeout 120 \
    -x FERRY_BTL=self,tcp -x FERRY_TCP_IF_INCLUDE=10.78.0.0/24 \
    -x FERRY_TCP_USER_TIMEOUT=$USER_TIMEOUT -x FERRY_LOG_LEVEL=info \
    "$prog" "$MH_STATE" "$BOUND" >"$out" 2>"$err" &
job=$!
fail() {
    echo "run_cutlink $mode: $*"
    echo "--- stdout:"; tail -c 6000 "$out"
    echo "--- stderr:"; tail -c 6000 "$err"
    exit 1
}
mh_wait_ready "$job" "$out" ||
    fail "the ranks did not get traffic going (job status $MH_JOB_STATUS)"
if [ "$mode" = down ]; then
    echo "+ ip -n $H2 link set cut0 down"
    ip -n "$H2" link set cut0 down || fail "cannot set the link down"
else
    echo "+ tc qdisc add dev cut0 root netem loss 100% (both ends)"
    ip netns exec "$H1" tc qdisc add dev cut0 root netem loss 100% || fail "netem"
    ip netns exec "$H2" tc qdisc add dev cut0 root netem loss 100% || fail "netem"
fi
touch "$MH_STATE/cut"
wait "$job"
status=$?
cat "$out"
[ "$status" -eq 0 ] || fail "the job exited with $status"
for r in 0 1; do
    grep -q "tcp_cut: rank $r: ok" "$out" || fail "rank $r did not end well"
done
grep -q "module 0 (link 0 of 1) on cut0 10.78.0" "$err" || fail "no log line for the module on cut0"
echo "run_cutlink $mode: ok"
