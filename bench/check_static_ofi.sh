#!/bin/sh
# ferry-bench links the static library, which has ofi's code built in. With
# FERRY_BTL empty on a host without a fabric device, ofi must not be opened
# (no libfabric endpoint), as the shared library would not load its module;
# named in FERRY_BTL, it must be.
# Usage: check_static_ofi.sh FERRYRUN BENCH PATTERN... (ofi's HARDWARE globs)
run=$1 bench=$2
shift 2
for pat in "$@"; do
    for dev in $pat; do
        [ -e "$dev" ] || continue
        echo "SKIPPED: this host has a fabric device ($dev): ofi is opened here by rule"
        exit 77
    done
done
out=$(FERRY_BTL= FERRY_LOG_LEVEL=debug "$run" -n 2 -x FERRY_BTL -x FERRY_LOG_LEVEL \
      "$bench" am-lat -m 8:8 -i 20 -w 2 -r 1 -p 1 -b 0.01 2>&1) || {
    echo "$out"; echo "rejected: the default run failed"; exit 1; }
echo "$out" | grep -q "transport ofi built in, not opened: no device" || {
    echo "$out"; echo "rejected: no line saying ofi was not opened"; exit 1; }
if echo "$out" | grep -q "ofi: module [0-9]"; then
    echo "$out"; echo "rejected: ofi opened a module with FERRY_BTL empty and no device"; exit 1
fi
out=$(FERRY_BTL=self,sm,ofi FERRY_OFI_PROVIDER=shm FERRY_LOG_LEVEL=debug "$run" -n 2 \
      -x FERRY_BTL -x FERRY_OFI_PROVIDER -x FERRY_LOG_LEVEL \
      "$bench" am-lat -m 8:8 -i 20 -w 2 -r 1 -p 1 -b 0.01 2>&1) || {
    echo "$out"; echo "rejected: the run naming ofi failed"; exit 1; }
echo "$out" | grep -q "ofi: module [0-9]" || {
    echo "$out"; echo "rejected: FERRY_BTL named ofi but no ofi module was opened"; exit 1; }
echo "static ofi opened by rule"
