#!/bin/sh
# usage: run_kill_shm.sh RUN_KILL FERRYRUN KILL_PEER NP
# stress's kill test (RUN_KILL: tests/stress/run_kill.sh) over ofi's shm
# provider. The provider's
# region file of the SIGKILLed rank ("PID:N:N" in /dev/shm) cannot be
# removed by that rank, and ferryrun knows only ferry's own segments, so
# this wrapper removes the files of dead processes the job created, and
# says so.
run_kill=$1
shift
before=$(ls /dev/shm 2>/dev/null | sort)
sh "$run_kill" "$@"
status=$?
for f in $(ls /dev/shm 2>/dev/null | grep -E '^[0-9]+:[0-9]+:[0-9]+$'); do
    printf '%s\n' "$before" | grep -qxF "$f" && continue
    pid=${f%%:*}
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "run_kill_shm: removing /dev/shm/$f, left by killed process $pid"
        rm -f "/dev/shm/$f"
    fi
done
exit $status
