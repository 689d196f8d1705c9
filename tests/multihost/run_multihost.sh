#!/bin/sh
# Runs one multi-host test case:
#   run_multihost.sh CASE VAR=VALUE...
# with FERRYRUN, CONTRACT, HELLO, STRESS, KILL_PEER, GUARD, FOREIGN, MPIRUN,
# HYDRA naming the programs a case needs. Cases:
#   agent_local  ferryrun's launch-agent path on this host: a stand-in agent
#                (local_agent.sh), PMI over TCP, host lists, errors. No root.
#   ns_contract  the contract suite over tcp across namespaces, and a mixed
#                job (sm within a namespace, tcp across).
#   ns_ofi       the contract suite over the ofi transport (libfabric
#                tcp;ofi_rxm on each namespace's veth) across namespaces.
#   ns_kill      a rank SIGKILLed in one namespace is reported by the others
#                (plain `ip netns exec` agent, one host per rank).
#   ns_foreign   a process outside the job connects to a rank without the
#                job's key: nothing is delivered.
#   mpirun       ferry under Open MPI's mpirun (PMIx), on this host.
#   hydra        ferry under MPICH's mpiexec.hydra (PMI-1), on this host.
# Exit 0 passed, 1 failed, 77 skipped (the reason printed).
set -u
CASE=$1
shift
for a; do export "$a"; done
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/netns_lib.sh"

OUT=$(mktemp) ERR=$(mktemp)
mh_files="$OUT $ERR"
trap 'rm -f $mh_files' EXIT
fail() {
    echo "FAIL ($CASE): $*"
    echo "--- stdout:"; tail -c 6000 "$OUT"
    echo "--- stderr:"; tail -c 6000 "$ERR"
    exit 1
}
# run ARGS...: runs a command, setting STATUS; output in $OUT and $ERR.
run() {
    echo "+ $*"
    "$@" >"$OUT" 2>"$ERR"
    STATUS=$?
}
expect_status() { [ "$STATUS" -eq "$1" ] || fail "exit status $STATUS, expected $1"; }
expect_out() { grep -q -- "$1" "$OUT" || fail "stdout lacks '$1'"; }
expect_err() { grep -q -- "$1" "$ERR" || fail "stderr lacks '$1'"; }
# The contract suite says SKIPPED when its transport is not built.
skip_if_skipped() {
    if [ "$STATUS" -eq 77 ]; then
        grep SKIPPED "$OUT" | head -1
        exit 77
    fi
}

# Sets up namespaces, with the cleanup trap also removing our files.
setup_ns() {
    mh_require_netns
    mh_setup "$1"
    trap 'mh_cleanup; rm -f $mh_files' EXIT
    set -- $MH_HOSTS
    H1=$1 H2=$2 H3=${3:-}
}
# Runs ferryrun in the hub namespace, ranks started through ns_agent.sh.
ferryrun_ns() {
    run ip netns exec "$MH_HUB" "$FERRYRUN" --pmi-addr 10.77.0.1 \
        --launch-agent "sh $HERE/ns_agent.sh $MH_STATE" "$@"
}

case $CASE in
agent_local)
    AGENT="sh $HERE/local_agent.sh"
    # Remote ranks (hosts that are not this one) and a local one, in order.
    run "$FERRYRUN" --host fakeA:2,localhost:1 --launch-agent "$AGENT" --pmi-addr 127.0.0.1 \
        --timeout 60 "$HELLO"
    expect_status 0
    for r in 0 1 2; do expect_out "rank $r: inbox holds"; done
    # The same from a hostfile, its three forms and comments; -n takes fewer.
    hf=$(mktemp); mh_files="$mh_files $hf"
    printf '# hosts\nfakeA slots=2\n\nfakeB:1   # one\nfakeC\n' >"$hf"
    run "$FERRYRUN" --hostfile "$hf" -n 3 --launch-agent "$AGENT" --pmi-addr 127.0.0.1 \
        --tag-output --timeout 60 "$HELLO"
    expect_status 0
    expect_out "^\[2\] rank 2: inbox holds"
    # The contract suite over PMI_PORT (sm: every "host" is this one).
    run "$FERRYRUN" --host fakeA:2,fakeB:1 --launch-agent "$AGENT" --pmi-addr 127.0.0.1 \
        --timeout 240 "$CONTRACT" sm
    skip_if_skipped
    expect_status 0
    # A remote rank's exit status comes back through its agent.
    run "$FERRYRUN" --host fakeA:2 --launch-agent "$AGENT" --pmi-addr 127.0.0.1 \
        --timeout 60 sh -c 'exit 3'
    expect_status 3
    expect_err "rank [01] (on fakeA, agent pid [0-9]*) exited with status 3"
    # Killing the job kills remote ranks through their agents.
    start=$(date +%s)
    run "$FERRYRUN" --host fakeA:2 --launch-agent "$AGENT" --pmi-addr 127.0.0.1 \
        --timeout 1 sleep 60
    expect_status 124
    [ $(( $(date +%s) - start )) -le 10 ] || fail "the timeout did not end remote ranks"
    # A remote rank killed by a signal, the others going on. Rank 0 is local,
    # so ferryrun cleans this host's /dev/shm of the job's files, the
    # victim's included (it runs here too, in truth).
    run "$FERRYRUN" --host localhost:1,fakeA:2 --launch-agent "$AGENT" --pmi-addr 127.0.0.1 \
        --keep-going --timeout 60 "$KILL_PEER"
    expect_status 137
    expect_err "rank 2 (on fakeA, agent pid [0-9]*) killed by signal SIGKILL"
    [ "$(grep -c 'saw rank 2 fail' "$OUT")" -eq 2 ] || fail "not every survivor saw rank 2 fail"
    # Mistakes in host lists are usage errors.
    for args in "--host a:0" "--host a:x" "--host a:2,,b" "--host bad!host" "--host a:2 -n 3" \
                "--host a --hostfile $hf" "--hostfile /nonexistent" "--launch-agent ''"; do
        # shellcheck disable=SC2086
        eval "run \"\$FERRYRUN\" $args true"
        [ "$STATUS" -eq 2 ] || fail "'ferryrun $args true' exited $STATUS, expected 2"
    done
    # An unresolvable host and no --pmi-addr: a clear error.
    run env -u FERRYRUN_PMI_ADDR "$FERRYRUN" --host no-such-host.invalid:1 \
        --launch-agent "$AGENT" true
    expect_status 1
    expect_err "give it with --pmi-addr"
    # An agent that cannot be executed.
    run "$FERRYRUN" --host fakeA:1 --launch-agent /nonexistent/agent --pmi-addr 127.0.0.1 true
    expect_status 127
    expect_err "cannot execute the launch agent"
    ;;
ns_contract)
    setup_ns 2
    # One rank per namespace: the contract suite over tcp across "hosts".
    ferryrun_ns --host "$H1:1,$H2:1" --timeout 280 -x FERRY_TCP_IF_INCLUDE=eth0 "$CONTRACT" tcp
    skip_if_skipped
    expect_status 0
    expect_out "passed, 0 failed"
    # Two per namespace: four ranks, hostnames telling sm (within) from tcp
    # (across); the ranks report which transport reaches each peer.
    ferryrun_ns --host "$H1:2,$H2:2" --timeout 280 -x FERRY_TCP_IF_INCLUDE=eth0 \
        "$CONTRACT" tcp
    skip_if_skipped
    expect_status 0
    ferryrun_ns --host "$H1:2,$H2:2" --timeout 200 -x FERRY_TCP_IF_INCLUDE=eth0 \
        -x FERRY_BTL=self,sm,tcp "$STRESS" 2
    expect_status 0
    ;;
ns_ofi)
    setup_ns 2
    # One rank per namespace: the contract suite over ofi (tcp;ofi_rxm) on
    # the namespace's veth, eth0; SKIPPED without the ofi transport.
    ferryrun_ns --host "$H1:1,$H2:1" --timeout 280 -x "FERRY_OFI_PROVIDER=tcp;ofi_rxm" \
        -x FERRY_OFI_IFACE=eth0 -x FERRY_BTL=self,ofi -x FERRY_LOG_LEVEL=info "$CONTRACT" ofi
    skip_if_skipped
    expect_status 0
    expect_out "passed, 0 failed"
    ;;
ns_kill)
    setup_ns 3
    # run_kill.sh's checks, with ferryrun in the hub and a plain
    # `ip netns exec` agent; ns_rank.sh makes each rank a host of its own.
    wrap=$MH_STATE/ferryrun.sh
    prog=$MH_STATE/kill_peer.sh
    printf '#!/bin/sh\nexec ip netns exec %s %s --host %s:2,%s:1,%s:1 --pmi-addr 10.77.0.1 --launch-agent "ip netns exec" -x FERRY_TCP_IF_INCLUDE=eth0 "$@"\n' \
        "$MH_HUB" "$FERRYRUN" "$H1" "$H2" "$H3" >"$wrap"
    printf '#!/bin/sh\nexec sh %s/ns_rank.sh %s "$@"\n' "$HERE" "$KILL_PEER" >"$prog"
    chmod +x "$wrap" "$prog"
    run sh "$HERE/../stress/run_kill.sh" "$wrap" "$prog" 4
    expect_status 0
    ;;
ns_foreign)
    setup_ns 3
    done_file=$MH_STATE/done
    ip netns exec "$MH_HUB" "$FERRYRUN" --pmi-addr 10.77.0.1 \
        --launch-agent "sh $HERE/ns_agent.sh $MH_STATE" --host "$H1:1,$H2:1" --timeout 120 \
        -x FERRY_TCP_IF_INCLUDE=eth0 -x FERRY_BTL=self,tcp "$GUARD" "$done_file" \
        >"$OUT" 2>"$ERR" &
    job=$!
    tries=0
    until grep -q "guard: ready" "$OUT"; do
        tries=$((tries + 1))
        if [ "$tries" -gt 600 ] || ! kill -0 "$job" 2>/dev/null; then
            touch "$done_file"; wait "$job"; STATUS=$?
            grep -q "SKIPPED\|not built\|no transport" "$OUT" "$ERR" && exit 77
            fail "the job did not get ready (status $STATUS)"
        fi
        sleep 0.1
    done
    # Rank 0 runs in $H1 at 10.77.0.11: its tcp listeners there.
    ports=$(ip netns exec "$H1" ss -ltnH 2>/dev/null | awk '$4 ~ /^10\.77\.0\.11:/ { sub(/.*:/, "", $4); print $4 }')
    [ -n "$ports" ] || { touch "$done_file"; wait "$job"; fail "no tcp listener of rank 0 found"; }
    fstatus=0
    for port in $ports; do
        echo "+ ip netns exec $H3 $FOREIGN 10.77.0.11 $port"
        ip netns exec "$H3" "$FOREIGN" 10.77.0.11 "$port" || fstatus=1
    done
    touch "$done_file"
    wait "$job"
    STATUS=$?
    [ "$fstatus" -eq 0 ] || fail "the foreign process got something from rank 0"
    expect_status 0
    expect_out "all from the job, in order"
    ;;
mpirun)
    [ -n "${MPIRUN:-}" ] || mh_skip "Open MPI's mpirun not found (install openmpi-bin)"
    opts="--oversubscribe -x LSAN_OPTIONS=suppressions=$HERE/lsan_pmix.supp"
    [ "$(id -u)" -eq 0 ] && opts="$opts --allow-run-as-root"
    # shellcheck disable=SC2086
    run "$MPIRUN" $opts -n 2 -x FERRY_MODEX=pmix -x FERRY_LOG_LEVEL=debug "$HELLO"
    grep -q "pmix backend\|no pmix backend" "$ERR" && mh_skip "this ferry has no pmix backend"
    expect_status 0
    expect_err "modex: backend pmix, rank 1 of 2"
    # shellcheck disable=SC2086
    run timeout 280 "$MPIRUN" $opts -n 2 -x FERRY_BTL=self,tcp "$CONTRACT" tcp
    skip_if_skipped
    expect_status 0
    expect_out "passed, 0 failed"
    ;;
hydra)
    [ -n "${HYDRA:-}" ] || mh_skip "mpiexec.hydra not found (install mpich)"
    run timeout 280 "$HYDRA" -n 2 -genv FERRY_BTL self,tcp -genv FERRY_LOG_LEVEL debug \
        "$CONTRACT" tcp
    skip_if_skipped
    expect_status 0
    expect_err "modex: backend pmi1"
    expect_out "passed, 0 failed"
    ;;
*)
    echo "run_multihost.sh: unknown case '$CASE'"
    exit 2
    ;;
esac
echo "PASS ($CASE)"
exit 0
