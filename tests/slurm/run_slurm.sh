#!/bin/sh
# Runs ferry programs under Slurm's srun on this host:
#   run_slurm.sh VAR=VALUE...
# with HELLO and API naming examples/hello and tests/api/test_api.
#
# It starts a private one-node cluster (slurmctld and slurmd in the
# foreground, with their own slurm.conf, ports, state, spool and logs in a
# temporary directory, and munged with its own key and socket there when
# this Slurm has no auth/none plugin), then runs two ranks with
# `srun --mpi=pmix` (ferry's pmix modex backend) and `srun --mpi=pmi2`
# (Slurm's pmi2 plugin also answers PMI-1 wire commands, which is what
# ferry's pmi1 backend sends over PMI_FD). A plugin missing from
# `srun --mpi=list` makes its case print SKIPPED with the reason; the
# daemons are always stopped and the directory removed, failure or not.
# Needs root (slurmd runs jobs as their user) and slurmctld, slurmd, srun.
# Exit 0 passed, 1 failed, 77 skipped (the reason printed).
set -u
for a; do export "$a"; done

HERE=$(cd "$(dirname "$0")" && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
# srun passes the environment on to the ranks: in sanitizer builds, libpmix's
# own leftovers are not reported as ferry's leaks.
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$HERE/lsan_pmix.supp"

[ "$(id -u)" -eq 0 ] || skip "needs root to run slurmd"
for p in slurmctld slurmd srun sinfo; do
    command -v $p >/dev/null 2>&1 ||
        skip "$p not found (Debian: apt-get install slurm-wlm)"
done
if [ ! -x "${HELLO:-}" ] || [ ! -x "${API:-}" ]; then
    echo "FAIL: HELLO or API does not name a program"
    exit 1
fi

DIR=$(mktemp -d /tmp/ferry-slurm.XXXXXX) || exit 1
PIDS=""
cleanup() {
    # Cancel what a timeout left running (SLURM_CONF names our cluster
    # only), let the steps' slurmstepd finish before slurmd goes (up to
    # 10 s), then stop our daemons only, by the ids we started them with.
    jobs=$(squeue -h -o %A 2>/dev/null)
    [ -z "$jobs" ] || scancel $jobs 2>/dev/null
    i=0
    while [ -n "$(squeue -h 2>/dev/null)" ] && [ $i -lt 20 ]; do
        sleep 0.5; i=$((i + 1))
    done
    for pid in $PIDS; do kill "$pid" 2>/dev/null; done
    for pid in $PIDS; do
        i=0
        while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        kill -9 "$pid" 2>/dev/null
    done
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

OUT=$DIR/out ERR=$DIR/err
fail() {
    echo "FAIL: $*"
    echo "--- stdout:"; tail -c 4000 "$OUT" 2>/dev/null
    echo "--- stderr:"; tail -c 4000 "$ERR" 2>/dev/null
    for f in slurmctld.log slurmd.log; do
        echo "--- $f:"; tail -n 30 "$DIR/$f" 2>/dev/null
    done
    exit 1
}
run() {
    echo "+ $*"
    "$@" >"$OUT" 2>"$ERR"
    STATUS=$?
}

NODE=$(hostname -s)
CPUS=2
# Ports away from Slurm's defaults (6817/6818), so that a real cluster on
# this machine is not disturbed; the process id spreads concurrent runs, and
# a pair that something listens on already is passed over.
BASE=$((20000 + $$ % 20000))
if command -v ss >/dev/null 2>&1; then
    n=0
    while ss -Htln "( sport = :$BASE or sport = :$((BASE + 1)) )" 2>/dev/null | grep -q . &&
          [ $n -lt 20 ]; do
        BASE=$((BASE + 2)); n=$((n + 1))
    done
fi
# Job ids name ferry's shared-memory segments (through the modex job id), so
# two of these clusters at once, each counting from 1, would collide there.
FIRST_JOB=$(( ($$ % 4000000) * 10 + 1 ))
PLUGINDIR=""
for d in /usr/lib/x86_64-linux-gnu/slurm-wlm /usr/lib64/slurm /usr/lib/slurm \
         /usr/lib/slurm-wlm /usr/local/lib/slurm; do
    if [ -e "$d/mpi_none.so" ]; then PLUGINDIR=$d; break; fi
done

# auth/none (with cred/none for job credentials) is simplest, but newer
# Slurm releases dropped them: then munge, private.
if [ -n "$PLUGINDIR" ] && [ -e "$PLUGINDIR/auth_none.so" ] &&
   [ -e "$PLUGINDIR/cred_none.so" ]; then
    AUTH="AuthType=auth/none
CredType=cred/none"
else
    command -v munged >/dev/null 2>&1 ||
        skip "this Slurm has no auth/none and munged is not found (apt-get install munge)"
    mkdir -p "$DIR/munge" && chmod 700 "$DIR/munge"
    dd if=/dev/urandom of="$DIR/munge/key" bs=1024 count=1 2>/dev/null
    chmod 400 "$DIR/munge/key"
    munged --foreground --force --key-file="$DIR/munge/key" \
        --socket="$DIR/munge/sock" --pid-file="$DIR/munge/pid" \
        --log-file="$DIR/munge/log" --seed-file="$DIR/munge/seed" \
        >"$DIR/munge/out" 2>&1 &
    PIDS="$PIDS $!"
    AUTH="AuthType=auth/munge
AuthInfo=socket=$DIR/munge/sock"
    i=0
    while [ ! -S "$DIR/munge/sock" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    [ -S "$DIR/munge/sock" ] || { cat "$DIR/munge/out" "$DIR/munge/log"; fail "munged did not start"; }
fi

mkdir -p "$DIR/state" "$DIR/spool"
cat >"$DIR/slurm.conf" <<EOF
ClusterName=ferrytest
FirstJobId=$FIRST_JOB
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$BASE
SlurmdPort=$((BASE + 1))
SlurmUser=root
SlurmdUser=root
$AUTH
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
PropagateResourceLimits=NONE
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=10 State=UP OverSubscribe=YES
EOF
export SLURM_CONF="$DIR/slurm.conf"

slurmctld -D -i -f "$SLURM_CONF" >"$DIR/slurmctld.out" 2>&1 &
PIDS="$PIDS $!"
slurmd -D -N "$NODE" -f "$SLURM_CONF" >"$DIR/slurmd.out" 2>&1 &
PIDS="$PIDS $!"

# Wait up to 20 s for the node to be idle.
i=0
state=""
while [ $i -lt 40 ]; do
    state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null)
    case "$state" in idle*) break ;; esac
    sleep 0.5
    i=$((i + 1))
done
case "$state" in
idle*) echo "node $NODE is $state after $((i / 2)) s" ;;
*) cat "$DIR/slurmctld.out" "$DIR/slurmd.out" >"$ERR"; : >"$OUT"
   fail "node $NODE did not become idle within 20 s (state '$state')" ;;
esac

run srun --mpi=list
[ "$STATUS" -eq 0 ] || fail "srun --mpi=list exit status $STATUS"
MPI_LIST=$(cat "$OUT" "$ERR")
echo "$MPI_LIST" | sed 's/^/  /'

passed=0 skipped=0
# slurm_case PLUGIN BACKEND: hello and the API test, two ranks each, under
# srun --mpi=PLUGIN, the ranks using ferry's modex backend BACKEND. The
# timeouts keep both cases, start-up and cleanup within CTest's 180 s.
slurm_case() {
    plugin=$1 backend=$2
    if ! echo "$MPI_LIST" | grep -qw "$plugin"; then
        echo "SKIPPED (--mpi=$plugin): srun --mpi=list does not offer $plugin"
        skipped=$((skipped + 1))
        return
    fi
    # The debug log names the modex backend each rank picked.
    run timeout 25 srun --mpi="$plugin" -N 1 -n 2 --time=2 \
        --export=ALL,FERRY_LOG_LEVEL=debug "$HELLO"
    [ "$STATUS" -eq 0 ] || fail "--mpi=$plugin hello: exit status $STATUS"
    for r in 0 1; do
        grep -q "modex: backend $backend, rank $r of 2," "$ERR" ||
            fail "--mpi=$plugin hello: rank $r did not use the $backend modex backend of 2 ranks"
    done
    grep -h "modex: backend" "$ERR" | sed 's/^/  /'
    grep -q 'rank 0: inbox holds "hello from rank 1"' "$OUT" ||
        fail "--mpi=$plugin hello: rank 0 did not get rank 1's message"
    grep -q 'rank 1: inbox holds "hello from rank 0"' "$OUT" ||
        fail "--mpi=$plugin hello: rank 1 did not get rank 0's message"
    run timeout 40 srun --mpi="$plugin" -N 1 -n 2 --time=2 "$API"
    [ "$STATUS" -eq 0 ] || fail "--mpi=$plugin test_api: exit status $STATUS"
    [ "$(grep -c 'passed, 0 failed' "$OUT")" -eq 2 ] ||
        fail "--mpi=$plugin test_api: not both ranks passed"
    # Both ranks share this host, so sm reaches the peer: a skipped rdma
    # check would mean the modex lost its address.
    grep 'ok  rdma to peer' "$OUT" | grep -qv skipped ||
        fail "--mpi=$plugin test_api: rdma to the peer did not run"
    grep 'rdma to peer' "$OUT" | head -1 | sed 's/^/  /'
    echo "ok  srun --mpi=$plugin: hello and test_api on 2 ranks"
    passed=$((passed + 1))
}
slurm_case pmix pmix
slurm_case pmi2 pmi1

if [ $passed -eq 0 ]; then
    skip "neither pmix nor pmi2 is offered by srun --mpi=list"
fi
echo "$passed case(s) passed, $skipped skipped"
exit 0
