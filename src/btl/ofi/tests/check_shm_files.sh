#!/bin/sh
# Runs a job over ofi's shm provider and checks that it leaves nothing in
# /dev/shm: libfabric's shm provider creates its region files there (named
# after the endpoint, usually with the process id), and a clean exit must
# remove them. ferry's own segments (ferry-*) are left to shm.no_leftovers,
# which knows job ids; other jobs on the machine may create them meanwhile.
# Usage: check_shm_files.sh FERRYRUN CONTRACT_SUITE
ferryrun=$1
suite=$2
before=$(ls /dev/shm 2>/dev/null | grep -v '^ferry-' | sort)
out=$("$ferryrun" -x FERRY_OFI_PROVIDER=shm -n 2 "$suite" ofi am_order,put_get 2>&1)
rc=$?
echo "$out"
if [ $rc -eq 77 ]; then
    exit 77
fi
if [ $rc -ne 0 ]; then
    echo "the job failed with status $rc" >&2
    exit 1
fi
after=$(ls /dev/shm 2>/dev/null | grep -v '^ferry-' | sort)
new=$(printf '%s\n' "$after" | grep -vxF -e "$before" | grep -v '^$' || true)
if [ -z "$before" ]; then
    new=$after
fi
if [ -n "$new" ]; then
    echo "files left in /dev/shm after a clean exit:" >&2
    echo "$new" >&2
    exit 1
fi
echo "no libfabric shared-memory file left in /dev/shm"
