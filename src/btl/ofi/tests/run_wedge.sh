#!/bin/sh
# usage: run_wedge.sh FERRYRUN OFI_WEDGE NP
# ofi_wedge.c over libfabric's shm provider, three runs:
#   die, the watchdog at 2 s: the victim dies holding a lock of the
#       provider's; the job must end by itself, every survivor reporting the
#       victim and finalizing with FERRY_ERR_UNREACH, or ended by the
#       watchdog with its error naming the victim and status 70, and at
#       least one of them so (else no lock was held and nothing was tried);
#   die, no watchdog (FERRY_OFI_WEDGE_TIMEOUT=0): the same job must hang
#       until ferryrun's --timeout, which shows that the wedge is real and
#       that it is the watchdog that ends it;
#   stall, the watchdog at 1 s: the victim holds a lock for 3 s and lets
#       go; the watchdog must warn and nobody exit: the job ends well.
# Removes the shm provider files the killed rank leaves (as run_kill_shm.sh).
ferryrun=$1 prog=$2 np=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
before=$(ls /dev/shm 2>/dev/null | sort)
cleanup() {
    for f in $(ls /dev/shm 2>/dev/null | grep -E '^[0-9]+:[0-9]+:[0-9]+$'); do
        printf '%s\n' "$before" | grep -qxF "$f" && continue
        kill -0 "${f%%:*}" 2>/dev/null || rm -f "/dev/shm/$f"
    done
}
fail() { sed 's/^/    /' "$out"; echo "run_wedge: FAILED: $*"; cleanup; exit 1; }
export FERRY_BTL=self,ofi FERRY_OFI_PROVIDER=shm
victim=$((np - 1))

# 1. die, watched.
FERRY_OFI_WEDGE_TIMEOUT=2000 "$ferryrun" --keep-going -n "$np" --timeout 60 -x FERRY_OFI_WEDGE_TIMEOUT \
    "$prog" die >"$out" 2>&1
status=$?
[ "$status" -eq 77 ] && { cat "$out"; cleanup; exit 77; }
grep -q '^SKIPPED' "$out" && { cat "$out"; cleanup; exit 77; }
[ "$status" -eq 124 ] && fail "die: the job hung with the watchdog on"
[ "$status" -eq 137 ] || fail "die: ferryrun exited with $status, expected 137 (the victim's SIGKILL)"
grep -q '^ofi_wedge: victim: dies holding a lock' "$out" || fail "die: the victim never took a lock in /dev/shm"
vpid=$(sed -n "s/^ferryrun: rank $victim (pid \([0-9]*\)) killed by signal SIGKILL.*/\1/p" "$out")
[ -n "$vpid" ] || fail "die: ferryrun did not report the victim's SIGKILL"
wedged=0 r=0
while [ $r -lt "$victim" ]; do
    if grep -q "^ferry\[$r\] error: ofi (shm): stuck for [0-9]* ms inside one libfabric call, and processes on this host have died: .*rank $victim (pid $vpid)[,;]" "$out"; then
        grep -q "^ferryrun: rank $r (pid [0-9]*) exited with status 70" "$out" ||
            fail "die: rank $r's watchdog spoke but it did not exit with 70"
        wedged=$((wedged + 1))
    else
        grep -q "^ofi_wedge: rank $r: .*finalized: FERRY_ERR_UNREACH" "$out" ||
            fail "die: rank $r neither finalized with FERRY_ERR_UNREACH nor was ended by the watchdog"
    fi
    r=$((r + 1))
done
[ $wedged -gt 0 ] || fail "die: no survivor was wedged: the lock the victim held stopped nobody"
echo "run_wedge: die: $wedged of $victim survivors wedged and ended by the watchdog, the others finalized"
cleanup

# 2. die, unwatched: it hangs.
FERRY_OFI_WEDGE_TIMEOUT=0 "$ferryrun" --keep-going -n "$np" --timeout 8 -x FERRY_OFI_WEDGE_TIMEOUT \
    "$prog" die >"$out" 2>&1
status=$?
grep -q '^ofi_wedge: victim: dies holding a lock' "$out" || fail "die unwatched: the victim never took a lock in /dev/shm"
if grep -q "stuck for [0-9]* ms inside one libfabric call" "$out"; then
    fail "die unwatched: a watchdog spoke with FERRY_OFI_WEDGE_TIMEOUT=0"
fi
[ "$status" -eq 124 ] || fail "die unwatched: ferryrun exited with $status, expected 124 (the hang, ended by --timeout)"
echo "run_wedge: die without the watchdog: the job hung until ferryrun's --timeout, as expected"
cleanup

# 3. stall: a live holder is waited for.
FERRY_OFI_WEDGE_TIMEOUT=1000 "$ferryrun" -n "$np" --timeout 60 -x FERRY_OFI_WEDGE_TIMEOUT \
    "$prog" stall >"$out" 2>&1
status=$?
[ "$status" -eq 0 ] || fail "stall: ferryrun exited with $status, expected 0"
grep -q '^ofi_wedge: victim: holds a lock' "$out" || fail "stall: the victim never held a lock"
grep -q "every peer process on this host is alive, so it waits on" "$out" ||
    fail "stall: no watchdog saw the 3 s wait"
n=$(grep -c "^ofi_wedge: rank [0-9]*: .*barrier FERRY_OK, finalized: FERRY_OK" "$out")
[ "$n" -eq "$np" ] || fail "stall: $n of $np ranks finished well"
echo "run_wedge: stall: the watchdog warned, waited, and all $np ranks finished"
cleanup
