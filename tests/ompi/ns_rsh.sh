#!/bin/sh
# Open MPI's rsh launch agent for the namespace "hosts" of
# tests/multihost/netns_lib.sh:
#   ns_rsh.sh NS_AGENT STATE_DIR HOST COMMAND...
# mpirun hands the daemon's command line over as words to be run by a
# shell, as ssh would; ns_agent.sh runs a program with its arguments, so
# the words are joined and given to sh -c inside the host's namespaces.
agent=$1
state=$2
host=$3
shift 3
exec sh "$agent" "$state" "$host" sh -c "$*"
