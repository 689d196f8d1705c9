#!/bin/sh
# mpirun's program for the error case of run_ompi.sh:
#   kill_wrap.sh PROGRAM ARGS...
# Every rank but the last execs PROGRAM. The last rank (mpi_kill's victim)
# runs it as a child and, once it is gone, stays for a while: mpirun sees
# its rank end only then, so that the surviving ranks' BTL, not mpirun,
# is the first to notice the dead peer.
rank=${OMPI_COMM_WORLD_RANK:-}
size=${OMPI_COMM_WORLD_SIZE:-}
if [ -z "$rank" ] || [ -z "$size" ]; then
    echo "kill_wrap.sh: not started by Open MPI's mpirun (no OMPI_COMM_WORLD_RANK/SIZE)" >&2
    exit 2
fi
[ "$rank" -eq $((size - 1)) ] || exec "$@"
"$@"
status=$?
sleep "${KILL_WRAP_STAY:-30}"
exit "$status"
