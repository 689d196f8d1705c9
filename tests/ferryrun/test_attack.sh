#!/bin/sh
# Attacks on ferryrun, one case per CTest entry:
#   test_attack.sh CASE VAR=VALUE...
# with FERRYRUN, HELPER (fr_helper), ATTACK (fr_attack), HELLO, STRESS,
# KILL_PEER, INFO_TOOL and AGENT_DIR (tests/multihost, for local_agent.sh)
# naming what a case needs. Each case tries an attack and checks that it
# fails, that the job is not harmed, and that ferryrun says so in a bounded
# number of lines. docs/security.md lists which case shows what.
#   stranger   a process outside the job claims a remote rank's pmiid during
#              launch, without the secret
#   replay     a captured proof replayed, a server proof reflected, proofs
#              bound to another job, pmiid or secret
#   overwrite  a rank puts another rank's keys
#   quota      ranks use up their key-value quotas
#   junk       1 MiB of junk requests from a rank; hundreds of strangers
#              sending junk to the PMI port during launch
#   hold       strangers hold more connections open than ferryrun lets
#              wait; the remote rank still gets in
#   secret     every rank gets the secret, no command line shows it, -x
#              cannot set it
#   ofi_shm    ranks using libfabric's shm provider killed with SIGKILL:
#              none of their region files is left in /dev/shm
# Exit 0 passed, 1 failed, 77 skipped (the reason printed).
set -u
CASE=$1
shift
for a; do export "$a"; done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ferryrun-attack.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
OUT=$TMP/out
ERR=$TMP/err
AGENT="sh $AGENT_DIR/local_agent.sh"

fail() {
    echo "FAIL ($CASE): $*"
    echo "--- stdout:"; head -c 6000 "$OUT" 2>/dev/null
    echo "--- stderr:"; head -c 6000 "$ERR" 2>/dev/null
    exit 1
}
run() {
    echo "+ ferryrun $*"
    "$FERRYRUN" "$@" >"$OUT" 2>"$ERR"
    STATUS=$?
}
expect_status() { [ "$STATUS" -eq "$1" ] || fail "exit status $STATUS, expected $1"; }
expect_out() { grep -q -- "$1" "$OUT" || fail "stdout lacks '$1'"; }
expect_err() { grep -q -- "$1" "$ERR" || fail "stderr lacks '$1'"; }
# At most N lines of ferryrun's own on stderr (the ranks' are not counted).
expect_err_lines_at_most() {
    n=$(grep -c '^ferryrun: ' "$ERR")
    [ "$n" -le "$1" ] || fail "ferryrun printed $n lines, more than $1"
    echo "ferryrun printed $n line(s) about it"
}

# An agent that runs ATTACK_CMD (with the PMI port as $port) before it
# starts rank 1, then starts the rank as local_agent.sh does.
make_agent() {
    cat >"$TMP/agent.sh" <<EOF
#!/bin/sh
shift
port= id=
for w; do
    case \$w in PMI_PORT=*) port=\${w#PMI_PORT=} ;; PMI_ID=*) id=\${w#PMI_ID=} ;; esac
done
if [ "\$id" = 1 ]; then
    $1
fi
exec "\$@"
EOF
}

case $CASE in
stranger)
    # The stranger connects before the real rank 1 does (the agent runs it
    # first), claiming pmiid 1 as hydra's handshake lets anyone do.
    make_agent "\"$ATTACK\" stranger \"\$port\" 1"
    run --host localhost:1,fakeA:1 --launch-agent "sh $TMP/agent.sh" --pmi-addr 127.0.0.1 \
        --timeout 60 "$HELLO"
    expect_status 0
    expect_out "stranger: refused"
    expect_out "rank 0: inbox holds"
    expect_out "rank 1: inbox holds"
    grep -q "stranger: read" "$OUT" && fail "the stranger read the job's values"
    [ "$(grep -c 'refused a PMI connection' "$ERR")" -eq 1 ] ||
        fail "the refusal was not logged exactly once"
    expect_err "auth_required"
    expect_err_lines_at_most 1
    ;;
replay)
    # Rank 1 is the attacker: it holds the secret, as an eavesdropper holds
    # what it captured, and tries proofs that must not work.
    run --host localhost:1,fakeA:1 --launch-agent "$AGENT" --pmi-addr 127.0.0.1 --timeout 60 \
        sh -c 'if [ "$PMI_RANK" = 1 ]; then exec "$0" replay; else exec "$1" exit -1 0; fi' \
        "$ATTACK" "$HELPER"
    expect_status 0
    expect_out "replay: every attack was refused"
    expect_out "the genuine proof was accepted and the server proved itself"
    [ "$(grep -c 'NOT REFUSED' "$OUT")" -eq 0 ] || fail "an attack was not refused"
    expect_err "auth_failed"
    # Seven refusals: five shown, the rest counted.
    expect_err "2 more messages about refused PMI connections not shown"
    expect_err_lines_at_most 6
    ;;
overwrite)
    run -n 2 --timeout 60 "$HELPER" steal
    expect_status 0
    for k in 0.addr shared 0.future; do
        expect_out "rank 1: put of $k refused: key_of_another_rank"
    done
    expect_out "rank 0 steal ok"
    expect_out "rank 1 steal ok"
    expect_err "refused rank 1's put of PMI key '0.addr': key_of_another_rank"
    expect_err_lines_at_most 3
    ;;
quota)
    run -n 2 --timeout 120 "$HELPER" quota
    expect_status 0
    expect_out "rank 1 stored [0-9]* values of 1000 bytes, then: quota_bytes"
    expect_out "rank 0 stored 32768 keys, then: quota_keys"
    expect_out "rank 0 replaced a value 4096 times, then: quota_revisions"
    expect_out "rank 0 quota ok"
    expect_out "rank 1 quota ok"
    expect_err_lines_at_most 4
    ;;
junk)
    # The limiter lets 5 lines through per 10 s: a slow run (a sanitizer, a
    # loaded machine) may span a few intervals, each worth 5 lines and a
    # count; tens of thousands of refusals must still cost a few lines.
    run -n 2 --timeout 120 "$HELPER" junk
    expect_status 0
    expect_out "rank 0 sent [0-9]* junk requests"
    expect_out "rank 1 junk ok"
    expect_err_lines_at_most 18
    expect_err "rank 0 sent a bad PMI request"
    expect_err "more messages about rank 0's PMI requests not shown"
    # Strangers flood the port while the remote rank starts; it still gets
    # in, and the flood costs a few lines.
    make_agent "\"$ATTACK\" flood \"\$port\" 300"
    run --host localhost:1,fakeA:1 --launch-agent "sh $TMP/agent.sh" --pmi-addr 127.0.0.1 \
        --timeout 60 "$HELLO"
    expect_status 0
    expect_out "flood: 300 junk connections"
    expect_out "rank 1: inbox holds"
    expect_err "more messages about refused PMI connections not shown"
    expect_err_lines_at_most 18
    ;;
hold)
    make_agent "\"$ATTACK\" hold \"\$port\" 100 \"$TMP/holder\""
    run --host localhost:1,fakeA:1 --launch-agent "sh $TMP/agent.sh" --pmi-addr 127.0.0.1 \
        --timeout 60 "$HELLO"
    [ -s "$TMP/holder" ] && kill "$(cat "$TMP/holder")" 2>/dev/null
    expect_status 0
    expect_out "hold: 100 silent connections held open"
    expect_out "rank 1: inbox holds"
    expect_err "wait to prove themselves; closing the oldest"
    expect_err_lines_at_most 13
    ;;
secret)
    run -n 2 "$HELPER" secret
    expect_status 0
    s0=$(sed -n 's/^rank 0 secret //p' "$OUT")
    s1=$(sed -n 's/^rank 1 secret //p' "$OUT")
    echo "$s0" | grep -qx '[0-9a-f]\{64\}' || fail "rank 0 got no secret of 64 hex digits"
    [ "$s0" = "$s1" ] || fail "the ranks got different secrets"
    run -n 1 "$HELPER" secret
    [ "$(sed -n 's/^rank 0 secret //p' "$OUT")" != "$s0" ] || fail "two jobs got the same secret"
    # Remote ranks, both ways of passing it: while the job runs, no
    # process's command line holds it.
    for via in env stdin; do
        echo "+ ferryrun --agent-secret $via ... (in the background)"
        # Emptied here, not only by the background job's redirection, which
        # may come after the first look below: that look would find the
        # last iteration's three lines and go on with a file about to be
        # emptied.
        : >"$OUT"
        "$FERRYRUN" --host localhost:1,fakeA:1,fakeB:1 --launch-agent "$AGENT" \
            --agent-secret "$via" --pmi-addr 127.0.0.1 --timeout 60 "$HELPER" secret 3 \
            >"$OUT" 2>"$ERR" &
        job=$!
        i=0
        # Whole lines only: ferryrun forwards a rank's output as it comes,
        # so a line may be seen before its end has arrived.
        while [ "$(grep -c '^rank [0-9] secret [0-9a-f]\{64\}$' "$OUT" 2>/dev/null || true)" != 3 ] &&
            [ $i -lt 300 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        sec=$(sed -n 's/^rank 2 secret //p' "$OUT")
        echo "$sec" | grep -qx '[0-9a-f]\{64\}' || { wait $job; fail "remote rank 2 got no secret ($via)"; }
        [ "$(sed -n 's/^rank 0 secret //p' "$OUT")" = "$sec" ] ||
            { wait $job; fail "local and remote ranks got different secrets ($via)"; }
        # A process of our own that shows it, to prove the scan can see it.
        sh -c 'sleep 5' "$sec" &
        control=$!
        found=""
        for f in /proc/[0-9]*/cmdline; do
            if { tr '\0' ' ' <"$f"; } 2>/dev/null | grep -q "$sec"; then found="$found $f"; fi
        done
        kill $control
        wait $control 2>/dev/null
        case $found in
        *"/proc/$control/cmdline"*) found=$(echo "$found" | sed "s|/proc/$control/cmdline||") ;;
        *) wait $job; fail "the scan of command lines does not work" ;;
        esac
        found=$(echo $found)
        wait $job
        STATUS=$?
        expect_status 0
        [ -z "$found" ] || fail "the secret is on a command line:$found ($via)"
        echo "no command line holds the secret ($via)"
    done
    run -n 1 -x FERRY_JOB_SECRET=0000 "$HELPER" secret
    expect_status 2
    expect_err "draws the job's secret itself"
    ;;
ofi_shm)
    if ! "$INFO_TOOL" | grep -q '^ofi: '; then
        echo "SKIPPED: this ferry has no ofi transport (libfabric not found)"
        exit 77
    fi
    if ! fi_info -p shm >/dev/null 2>&1; then
        echo "SKIPPED: libfabric's shm provider is not available (fi_info -p shm)"
        exit 77
    fi
    uid=$(id -u)
    # pids_of RUNNER: the ranks' pids, once each has its provider file.
    wait_ranks() {
        pids=""
        for _ in $(seq 1 200); do
            pids=$(pgrep -P "$1" | tr '\n' ' ')
            all=yes
            n=0
            for p in $pids; do
                n=$((n + 1))
                ls /dev/shm/"$p:$uid:"* >/dev/null 2>&1 || all=no
            done
            [ "$n" -eq "$2" ] && [ "$all" = yes ] && return 0
            sleep 0.05
        done
        return 1
    }
    left_of() {
        for p in $1; do ls /dev/shm 2>/dev/null | grep -E "^$p:$uid:[0-9]+\$"; done
    }
    # Every rank killed at once in the middle of traffic.
    export FERRY_BTL=self,ofi FERRY_OFI_PROVIDER=shm FERRY_OFI_SEND_TIMEOUT=3000
    echo "+ ferryrun -n 3 stress 30, then kill -9 of every rank"
    "$FERRYRUN" -n 3 --timeout 60 "$STRESS" 30 >"$OUT" 2>"$ERR" &
    runner=$!
    wait_ranks "$runner" 3 || { kill "$runner"; wait "$runner"; fail "the ranks' shm provider files did not appear"; }
    sleep 0.3
    echo "ranks $pids have: $(left_of "$pids" | tr '\n' ' ')"
    for p in $pids; do kill -KILL "$p"; done
    wait "$runner"
    STATUS=$?
    expect_status 137
    left=$(left_of "$pids")
    [ -z "$left" ] || fail "left in /dev/shm: $left"
    echo "every rank killed: none of their shm provider files is left"
    # One rank killed, the others finishing (the kill test's victim).
    echo "+ ferryrun --keep-going -n 3 kill_peer"
    # The victim may kill itself before all three ranks' files were seen
    # together, so every rank seen while the job runs is collected, with
    # whether its files were seen; the check needs the files of at least
    # one rank (the provider made them) and none of any rank left after.
    "$FERRYRUN" --keep-going -n 3 --timeout 60 "$KILL_PEER" >"$OUT" 2>"$ERR" &
    runner=$!
    seen=""
    with_files=0
    while kill -0 "$runner" 2>/dev/null; do
        for p in $(pgrep -P "$runner"); do
            case " $seen " in *" $p "*) continue ;; esac
            if ls /dev/shm/"$p:$uid:"* >/dev/null 2>&1; then
                seen="$seen $p"
                with_files=$((with_files + 1))
            fi
        done
        sleep 0.02
    done
    wait "$runner"
    STATUS=$?
    expect_status 137
    expect_err "rank 2 .*SIGKILL"
    [ "$with_files" -ge 1 ] || fail "no rank's shm provider files were seen"
    left=$(left_of "$seen")
    [ -z "$left" ] || fail "left in /dev/shm: $left"
    echo "the ranks' shm provider files ($with_files of 3 ranks seen with files) are gone"
    ;;
*)
    echo "test_attack.sh: unknown case '$CASE'"
    exit 2
    ;;
esac
echo "ok ($CASE)"
exit 0
