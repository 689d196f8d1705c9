# Network namespaces standing in for hosts; sourced by run_multihost.sh.
#
# mh_setup N makes, for this test run only:
# - a hub namespace with a bridge at 10.77.0.1/24, where ferryrun (or another
#   launcher) runs, so nothing is added to the machine's own network;
# - N host namespaces ${MH_PREFIX}1..N, each with a veth "eth0" on the bridge
#   at 10.77.0.(10+i)/24 and a holder process that has its own UTS, IPC and
#   mount namespaces: hostname = the namespace's name and a private tmpfs on
#   /dev/shm. Ranks enter the holder's namespaces (ns_agent.sh), so the ranks
#   of one "host" share a hostname and /dev/shm (and talk over sm), and ranks
#   of different ones do not (and talk over tcp).
# Names carry the pid and a random number, and interface names live inside
# the namespaces, so parallel runs do not collide. mh_cleanup (run by the
# trap mh_setup sets) kills what runs in the namespaces and deletes them.

mh_skip() {
    echo "SKIPPED: $*"
    exit 77
}

# Exits 77 with the reason when namespaces cannot be made here.
mh_require_netns() {
    [ "$(id -u)" -eq 0 ] || mh_skip "multi-host tests need root (network namespaces)"
    command -v ip >/dev/null 2>&1 || mh_skip "'ip' not found (install iproute2)"
    for tool in unshare nsenter; do
        command -v $tool >/dev/null 2>&1 || mh_skip "'$tool' not found (install util-linux)"
    done
    probe="fmhp$$"
    ip netns add "$probe" 2>/dev/null || mh_skip "'ip netns add' fails here (no CAP_SYS_ADMIN?)"
    ip netns del "$probe"
}

mh_cleanup() {
    for ns in $MH_NAMESPACES; do
        # Only processes inside this run's namespaces: ours.
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            kill -9 "$pid" 2>/dev/null
        done
    done
    for ns in $MH_NAMESPACES; do
        ip netns del "$ns" 2>/dev/null
    done
    MH_NAMESPACES=
    [ -n "${MH_STATE:-}" ] && rm -rf "$MH_STATE"
}

# mh_setup N: see above. Sets MH_HUB, MH_HOSTS (space separated), MH_STATE.
mh_setup() {
    n=$1
    rnd=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
    MH_PREFIX="fmh$$x${rnd}n"
    MH_HUB="${MH_PREFIX}hub"
    MH_STATE=$(mktemp -d "${TMPDIR:-/tmp}/ferry-multihost.XXXXXX") || exit 1
    MH_NAMESPACES=
    MH_HOSTS=
    trap 'mh_cleanup' EXIT
    trap 'exit 1' INT TERM HUP
    ip netns add "$MH_HUB" || exit 1
    MH_NAMESPACES="$MH_HUB"
    ip -n "$MH_HUB" link set lo up
    ip -n "$MH_HUB" link add br0 type bridge
    ip -n "$MH_HUB" addr add 10.77.0.1/24 dev br0
    ip -n "$MH_HUB" link set br0 up
    i=1
    while [ "$i" -le "$n" ]; do
        ns="${MH_PREFIX}$i"
        ip netns add "$ns" || exit 1
        MH_NAMESPACES="$MH_NAMESPACES $ns"
        MH_HOSTS="$MH_HOSTS $ns"
        ip -n "$ns" link set lo up
        ip -n "$MH_HUB" link add "v$i" type veth peer name eth0 netns "$ns"
        ip -n "$MH_HUB" link set "v$i" master br0 up
        ip -n "$ns" addr add "10.77.0.$((10 + i))/24" dev eth0
        ip -n "$ns" link set eth0 up
        # The holder: its own hostname and /dev/shm, kept alive for the
        # ranks to enter. Each step execs, so $! is the holder itself.
        ip netns exec "$ns" unshare --uts --ipc --mount --propagation private \
            sh -c 'hostname "$0" && mount -t tmpfs -o size=512m,mode=1777 ferry-shm /dev/shm &&
                   exec sleep 3600' "$ns" &
        echo $! >"$MH_STATE/$ns.pid"
        i=$((i + 1))
    done
    # Wait until each holder has its hostname and tmpfs (it then sleeps).
    for ns in $MH_HOSTS; do
        mh_wait_holder "$ns" "$(cat "$MH_STATE/$ns.pid")"
    done
    # Each link has carrier before anything uses it.
    for ns in $MH_HOSTS; do
        mh_wait_up "$ns" eth0
    done
}

# mh_wait_up NS IF: waits until IF in NS is up (has carrier); exits 1 after
# 10 s.
mh_wait_up() {
    tries=0
    until ip -n "$1" -o link show "$2" | grep -q "state UP"; do
        tries=$((tries + 1))
        [ "$tries" -lt 100 ] || { echo "$2 of $1 did not come up"; exit 1; }
        sleep 0.1
    done
}

# mh_wait_holder NS PID: waits until the holder PID of NS has set itself up
# (it then sleeps); exits 1 after 10 s.
mh_wait_holder() {
    tries=0
    until [ "$(cat /proc/"$2"/comm 2>/dev/null)" = sleep ]; do
        tries=$((tries + 1))
        [ "$tries" -lt 100 ] || { echo "holder of $1 did not start"; exit 1; }
        sleep 0.1
    done
}

# mh_link NS1 NS2 NAME NET: a link of their own between two host
# namespaces, a veth called NAME at both ends, 10.NET.0.1/24 in NS1 and
# 10.NET.0.2/24 in NS2; returns once both ends are up (exits 1 after 10 s).
mh_link() {
    ip -n "$1" link add "$3" type veth peer name "$3" netns "$2" || exit 1
    ip -n "$1" addr add "10.$4.0.1/24" dev "$3"
    ip -n "$2" addr add "10.$4.0.2/24" dev "$3"
    ip -n "$1" link set "$3" up
    ip -n "$2" link set "$3" up
    mh_wait_up "$1" "$3"
    mh_wait_up "$2" "$3"
}

# mh_wait_ready JOB OUT: waits (60 s at most) until both ranks of the
# background job JOB have written $MH_STATE/ready.0 and ready.1. A job that
# ended with 77 was skipped: its output OUT is shown and the script exits
# 77. Returns 1 with MH_JOB_STATUS set when the job ended or the time ran
# out first.
mh_wait_ready() {
    tries=0
    until [ -e "$MH_STATE/ready.0" ] && [ -e "$MH_STATE/ready.1" ]; do
        tries=$((tries + 1))
        if [ "$tries" -gt 600 ] || ! kill -0 "$1" 2>/dev/null; then
            wait "$1"
            MH_JOB_STATUS=$?
            [ "$MH_JOB_STATUS" -eq 77 ] && { cat "$2"; exit 77; }
            return 1
        fi
        sleep 0.1
    done
}
