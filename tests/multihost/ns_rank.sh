#!/bin/sh
# Per-rank wrapper for a plain `ip netns exec` launch agent:
#   ferryrun --launch-agent "ip netns exec" --host ns1,ns2 sh ns_rank.sh PROG ARGS...
# gives the rank its own UTS, IPC and mount namespaces: hostname
# "<namespace>-r<rank>" and a private tmpfs on /dev/shm, so that every rank
# is a host of its own (no two ranks share memory). Every step execs, so
# killing the agent kills the rank.
ns=$(ip netns identify) || exit 1
exec unshare --uts --ipc --mount --propagation private sh -c '
    hostname "$0" && mount -t tmpfs -o size=256m,mode=1777 ferry-shm /dev/shm || exit 1
    exec "$@"' "${ns:-nons}-r${PMI_ID:-0}" "$@"
