#!/bin/sh
# The full random-size run of the tagged layer, outside the CTest suite
# (tens of minutes on two cores): messages of 0 to 64 MiB, all to all on 16
# ranks, over sm and over tcp, each byte checked.
#
# usage: tests/msg/run_full.sh BUILD_DIR [ROUNDS]
# Exits 0 when every run passes, 77 when a transport cannot run here (with
# the reason), 1 otherwise.
set -u
build=${1:?usage: run_full.sh BUILD_DIR [ROUNDS]}
rounds=${2:-6}
ferryrun=$build/tools/ferryrun/ferryrun
prog=$build/tests/msg/test_msg_sizes
for f in "$ferryrun" "$prog"; do
    [ -x "$f" ] || { echo "run_full: $f is missing: build $build first"; exit 1; }
done
status=0
for btl in self,sm self,tcp; do
    echo "== $btl: 16 ranks, $rounds rounds, 0 to 64 MiB"
    "$ferryrun" -x FERRY_BTL=$btl -n 16 --timeout 3000 "$prog" --max 67108864 --count "$rounds"
    rc=$?
    case $rc in
    0) echo "== $btl: passed" ;;
    77) echo "== $btl: skipped (see the reason above)"; [ $status -eq 0 ] && status=77 ;;
    *) echo "== $btl: FAILED (exit $rc)"; status=1 ;;
    esac
done
exit $status
