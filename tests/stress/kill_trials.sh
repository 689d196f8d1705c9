#!/bin/sh
# usage: kill_trials.sh FERRYRUN KILL_TRIAL TRIALS [NP]
#        kill_trials.sh --all FERRYRUN KILL_TRIAL TRIALS [NP]
#
# Kill trials: TRIALS jobs of NP ranks (default 4) of kill_trial (random
# traffic, a barrier every round); in each, once every rank is ready, one
# rank chosen at random is sent SIGKILL after a random delay, in the middle
# of its traffic. Every trial must end by itself (no hang: ferryrun's
# --timeout is the hard bound), every survivor must report the dead rank
# (error callback, or FERRY_ERR_UNREACH from ferry_barrier), see
# ferry_finalize return FERRY_ERR_UNREACH and exit. Over ofi, a survivor
# that the victim wedged inside libfabric's shm provider (it died holding a
# lock there) may instead be ended by the ofi watchdog, with its error
# naming the victim and status 70; such trials pass and are counted.
# Prints each failed trial's output, and at the end the detection times:
# from the kill (this script's clock, just before kill) to each survivor's
# first sign of the failure (its CLOCK_REALTIME), median and maximum over
# all survivors of all trials.
#
# The transport comes from the environment, as for any ferry job:
#   FERRY_BTL=self,sm                                   shared memory
#   FERRY_BTL=self,tcp                                  loopback TCP
#   FERRY_BTL=self,ofi FERRY_OFI_PROVIDER=shm           libfabric shm
#   FERRY_BTL=self,ofi FERRY_OFI_PROVIDER='tcp;ofi_rxm' libfabric tcp
# With --all, TRIALS over each of those four in turn, and the four summary
# lines again at the end.
# KILL_TRIALS_TIMEOUT (seconds per trial, default 60) and KILL_TRIALS_SEED
# (the first trial's seed; default from the clock) may be set. Exits 0 when
# every trial passed, 1 otherwise, 77 when the transport cannot run here.
set -u
if [ "${1:-}" = "--all" ]; then
    shift
    lines=$(mktemp)
    trap 'rm -f "$lines"' EXIT
    rc=0
    for cfg in "self,sm|" "self,tcp|" "self,ofi|shm" "self,ofi|tcp;ofi_rxm"; do
        btl=${cfg%%|*} prov=${cfg#*|}
        if [ -n "$prov" ]; then
            FERRY_BTL=$btl FERRY_OFI_PROVIDER=$prov sh "$0" "$@" | tee -a "$lines"
        else
            FERRY_BTL=$btl sh "$0" "$@" | tee -a "$lines"
        fi
        st=$(tail -n 1 "$lines")
        case $st in "kill trials"*" 0 failed"*) ;; SKIPPED*) ;; *) rc=1 ;; esac
    done
    echo
    grep -E '^(kill trials|SKIPPED)' "$lines"
    exit $rc
fi
ferryrun=$1 prog=$2 trials=$3 np=${4:-4}
limit=${KILL_TRIALS_TIMEOUT:-60}
seed0=${KILL_TRIALS_SEED:-$(date +%s)}
label="FERRY_BTL=${FERRY_BTL:-}${FERRY_OFI_PROVIDER:+ FERRY_OFI_PROVIDER=$FERRY_OFI_PROVIDER}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
times=$work/times
: >"$times"
passed=0 hangs=0 failed=0 skipped=0 wedges=0

# Did survivor $1 end on the ofi watchdog (src/btl/ofi/ofi_wedge.c),
# wedged inside libfabric's shm provider by the victim ($2, pid $3), which
# died holding one of the provider's locks in shared memory? Only that
# outcome, named so and with that status, stands in for a report of the
# failure: the provider cannot recover, and the watchdog's exit is the
# error instead of a hang.
wedged() {
    grep -q "^ferry\[$1\] error: ofi (.*): stuck for [0-9]* ms inside one libfabric call, and processes on this host have died: .*rank $2 (pid $3)[,;]" "$err" &&
        grep -q "^ferryrun: rank $1 (pid [0-9]*) exited with status 70" "$err" &&
        ! grep -q "^kill_trial: rank $1 finalized" "$out"
}

# A random number in [0, n) from a seed.
rand_below() { awk -v s="$1" -v n="$2" 'BEGIN { srand(s); print int(rand() * n) }'; }

trial() { # trial INDEX SEED
    out=$work/out.$1 err=$work/err.$1
    : >"$out"
    : >"$err"
    "$ferryrun" --keep-going -n "$np" --timeout "$limit" "$prog" "$2" "$limit" \
        >"$out" 2>"$err" &
    job=$!
    # Every rank ready (its pid printed), or the job over already.
    i=0
    while [ "$(grep -c '^kill_trial: ready rank' "$out")" -lt "$np" ]; do
        if ! kill -0 "$job" 2>/dev/null; then break; fi
        i=$((i + 1))
        if [ $i -gt $((limit * 20)) ]; then break; fi
        sleep 0.05
    done
    if [ "$(grep -c '^kill_trial: ready rank' "$out")" -lt "$np" ]; then
        wait "$job"
        status=$?
        if grep -q '^SKIPPED' "$out"; then
            return 77
        fi
        echo "trial $1 (seed $2): the ranks did not all start (ferryrun status $status)"
        return 1
    fi
    victim=$(rand_below "$2" "$np")
    # 50 to 1500 ms into the traffic.
    delay=$(awk -v s="$2" 'BEGIN { srand(s + 1); printf "%.3f", 0.05 + rand() * 1.45 }')
    pid=$(sed -n "s/^kill_trial: ready rank $victim pid \([0-9]*\)$/\1/p" "$out")
    sleep "$delay"
    tkill=$(date +%s.%N)
    kill -KILL "$pid"
    wait "$job"
    status=$?
    echo "$tkill" >"$work/kill.$1"
    bad=""
    if [ "$status" -eq 124 ]; then
        bad="HANG: ferryrun's --timeout $limit s ended the job"
    elif [ "$status" -ne 137 ]; then
        bad="ferryrun exited with $status, expected 137 (the victim's SIGKILL)"
    elif grep -q '^kill_trial: FAIL' "$out"; then
        bad="a survivor broke a promise"
    fi
    nwedged=0
    if [ -z "$bad" ]; then
        r=0
        while [ $r -lt "$np" ]; do
            if [ $r -ne "$victim" ]; then
                if wedged "$r" "$victim" "$pid"; then
                    nwedged=$((nwedged + 1))
                    r=$((r + 1))
                    continue
                fi
                grep -q "^kill_trial: rank $r detected rank $victim at " "$out" ||
                    bad="${bad}rank $r did not report rank $victim; "
                grep -q "^kill_trial: rank $r finalized: FERRY_ERR_UNREACH" "$out" ||
                    bad="${bad}rank $r did not finalize with FERRY_ERR_UNREACH; "
            fi
            r=$((r + 1))
        done
    fi
    [ "$nwedged" -gt 0 ] && [ -z "$bad" ] && wedges=$((wedges + 1))
    if [ -n "$bad" ]; then
        echo "trial $1 (seed $2, rank $victim killed after ${delay} s): FAILED: $bad"
        sed 's/^/    out: /' "$out" | tail -n 40
        sed 's/^/    err: /' "$err" | tail -n 20
        [ "$status" -eq 124 ] && return 124
        return 1
    fi
    sed -n "s/^kill_trial: rank [0-9]* detected rank $victim at \([0-9.]*\) via .*/\1/p" "$out" |
        awk -v k="$tkill" '{ printf "%.3f\n", ($1 - k) * 1000 }' >>"$times"
    return 0
}

n=0
while [ $n -lt "$trials" ]; do
    trial "$n" $((seed0 + n))
    case $? in
    0) passed=$((passed + 1)) ;;
    77) skipped=$((skipped + 1)) ;;
    124) hangs=$((hangs + 1)); failed=$((failed + 1)) ;;
    *) failed=$((failed + 1)) ;;
    esac
    n=$((n + 1))
done

if [ $skipped -eq "$trials" ]; then
    echo "SKIPPED: $label: $(grep -h '^SKIPPED' "$work"/out.* | head -n 1)"
    exit 77
fi
summary=$(sort -n "$times" | awk '
    { v[NR] = $1 }
    END {
        if (NR == 0) { print "no detection times"; exit }
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "median %.1f ms, max %.1f ms over %d survivors", m, v[NR], NR
    }')
wedge_note=""
[ $wedges -gt 0 ] && wedge_note=", $wedges with survivors ended by the ofi watchdog (a lock the dead rank held in libfabric's shm provider)"
echo "kill trials ($label, $np ranks, seeds $seed0..$((seed0 + trials - 1))): $trials run, $passed passed$wedge_note, $failed failed ($hangs hangs); detection: $summary"
[ $failed -eq 0 ]
