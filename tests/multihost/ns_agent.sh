#!/bin/sh
# Launch agent for a namespace "host" made by netns_lib.sh:
#   ns_agent.sh STATE_DIR HOST CMD ARGS...
# runs CMD in HOST's network namespace and in its holder's UTS, IPC and
# mount namespaces (its hostname and /dev/shm). Every step execs, so the
# agent's pid is the rank's and killing the agent kills the rank.
state=$1
host=$2
shift 2
pid=$(cat "$state/$host.pid") || exit 127
exec ip netns exec "$host" nsenter --target "$pid" --uts --ipc --mount -- "$@"
