#!/bin/sh
# usage: run_spoof.sh FERRYRUN OFI_SPOOF PROVIDER
# Runs ofi_spoof (three ranks over ofi on PROVIDER) and checks, beyond its
# own verdict, that the forged messages did reach rank 1 and were refused
# there, each kind with its reason in the log: a stranger's as from no rank
# of the job, rank 2's as claiming another rank.
ferryrun=$1 prog=$2 prov=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$ferryrun" -x FERRY_BTL=self,ofi -x "FERRY_OFI_PROVIDER=$prov" -n 3 --timeout 100 \
    "$prog" >"$out" 2>&1
status=$?
cat "$out"
[ "$status" -eq 77 ] && exit 77
fail() { echo "run_spoof: $*" >&2; exit 1; }
[ "$status" -eq 0 ] || fail "the job exited with $status"
grep -q '^ferry\[1\] warn: .*refused a .*message from an address that is no rank of the job' "$out" ||
    fail "rank 1 logged no refusal of the stranger's messages"
grep -q '^ferry\[1\] warn: .*refused a .*message from rank 2: claims to be another rank' "$out" ||
    fail "rank 1 logged no refusal of rank 2's messages"
grep -q 'stranger: 64 forged messages' "$out" || fail "the stranger did not send its messages"
# Rate-limited: 64 + 64 refusals make a few lines and a count, not 128.
n=$(grep -c 'refused a' "$out")
[ "$n" -le 12 ] || fail "$n lines of refusals: the complaints are not rate-limited"
echo "run_spoof: forged messages refused over $prov"
