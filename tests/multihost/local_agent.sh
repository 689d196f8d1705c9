#!/bin/sh
# A launch agent for tests on one host: "local_agent.sh HOST CMD ARGS..."
# runs CMD here, the way `ssh HOST CMD ARGS...` would run it on HOST. It
# execs, so killing the agent kills the rank, as with `ip netns exec`.
shift
exec "$@"
