#!/bin/sh
# usage: ns_shared_shm.sh FERRYRUN TEST_MSG_SIZES
# sm and tcp in one job, on "hosts" that share /dev/shm and pids: two
# network namespaces with a hostname each (their own UTS namespace) and
# nothing else of their own, two ranks in each. Ranks of one namespace must
# reach each other through sm, ranks of the other through tcp (another
# host's segments in the same /dev/shm are not its peers'), and messages
# of random sizes up to 4 MiB with checksums must go between all four
# (test_msg_sizes). Needs root and ip netns (skipped otherwise); run under
# flock /tmp/ferry-netns.lock.
set -u
ferryrun=$1 prog=$2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/netns_lib.sh"
mh_require_netns
mh_setup 2
set -- $MH_HOSTS
H1=$1 H2=$2
# Holders with only a hostname of their own: /dev/shm and the mount table
# stay the machine's.
for ns in $H1 $H2; do
    ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec sleep 3600' "$ns-shared" &
    echo $! >"$MH_STATE/$ns.shared.pid"
done
for ns in $H1 $H2; do
    mh_wait_holder "$ns" "$(cat "$MH_STATE/$ns.shared.pid")"
done
cat >"$MH_STATE/agent.sh" <<'AGENT'
#!/bin/sh
state=$1 host=$2
shift 2
pid=$(cat "$state/$host.shared.pid") || exit 127
exec ip netns exec "$host" nsenter --target "$pid" --uts -- "$@"
AGENT
out=$MH_STATE/out err=$MH_STATE/err
ip netns exec "$MH_HUB" "$ferryrun" --pmi-addr 10.77.0.1 \
    --launch-agent "sh $MH_STATE/agent.sh $MH_STATE" --host "$H1:2,$H2:2" --timeout 180 \
    -x FERRY_BTL=self,sm,tcp -x FERRY_LOG_LEVEL=debug \
    "$prog" --max 4194304 --count 12 >"$out" 2>"$err"
status=$?
fail() {
    echo "ns_shared_shm: $*"
    echo "--- stdout:"; tail -c 4000 "$out"
    echo "--- stderr:"; grep -v debug "$err" | tail -c 4000
    exit 1
}
[ "$status" -eq 0 ] || fail "the job exited with $status"
cat "$out"
grep "reached through" "$err"
for r in 0 1 2 3; do
    grep -q "^rank $r: 12 rounds x 4 peers, [0-9]* bytes received" "$out" ||
        fail "rank $r did not report its messages"
done
# Ranks 0, 1 on the first host, 2, 3 on the second.
for pair in "0 1 sm" "1 0 sm" "2 3 sm" "3 2 sm" "0 2 tcp" "0 3 tcp" "1 2 tcp" "3 0 tcp" "2 1 tcp"; do
    set -- $pair
    grep -q "^ferry\[$1\] debug: rank $2: reached through $3 " "$err" ||
        fail "rank $1 does not reach rank $2 through $3"
done
echo "ns_shared_shm: ok"
