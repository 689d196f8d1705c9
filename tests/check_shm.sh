#!/bin/sh
# Runs after every other test: no ferry shared-memory object may be left in
# /dev/shm (ferryrun removes a crashed job's, but a clean exit leaves none).
left=$(ls /dev/shm 2>/dev/null | grep '^ferry-' || true)
if [ -n "$left" ]; then
    echo "shared-memory objects left behind:" >&2
    echo "$left" >&2
    exit 1
fi
echo "no ferry shared-memory object left in /dev/shm"
