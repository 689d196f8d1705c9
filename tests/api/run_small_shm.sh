#!/bin/sh
# usage: run_small_shm.sh TEST_API
# Runs test_api --heap-beyond-shm where /dev/shm is a 4 MiB tmpfs (in a
# private mount namespace): room for sm's segment, not for an 8 MiB heap.
# Exit 0 passed, 1 failed, 77 skipped (no root or no unshare here).
api=$1
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: needs root for a private mount namespace"; exit 77; }
command -v unshare >/dev/null 2>&1 ||
    { echo "SKIPPED: 'unshare' not found (install util-linux)"; exit 77; }
unshare --mount true 2>/dev/null ||
    { echo "SKIPPED: 'unshare --mount' fails here (no CAP_SYS_ADMIN?)"; exit 77; }
unshare --mount sh -c '
    mount -t tmpfs -o size=4m,mode=1777 ferry-small /dev/shm || exit 99
    exec "$0" --heap-beyond-shm' "$api"
status=$?
[ $status -ne 99 ] || { echo "SKIPPED: cannot mount a small /dev/shm here"; exit 77; }
exit $status
