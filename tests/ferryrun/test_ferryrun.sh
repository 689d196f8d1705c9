#!/bin/sh
# Runs one ferryrun test case: test_ferryrun.sh FERRYRUN HELPER CASE.
# Each case checks ferryrun's exit status and what it prints; a failed check
# prints what went wrong, with ferryrun's output, and exits 1.
set -u
FERRYRUN=$1
HELPER=$2
CASE=$3

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ferryrun-test.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
OUT=$TMP/out
ERR=$TMP/err

fail() {
    echo "FAIL ($CASE): $*"
    echo "--- stdout:"; head -c 4000 "$OUT" 2>/dev/null
    echo "--- stderr:"; head -c 4000 "$ERR" 2>/dev/null
    exit 1
}

# run ARGS...: runs ferryrun, setting $STATUS and $ELAPSED (seconds).
run() {
    start=$(date +%s)
    "$FERRYRUN" "$@" >"$OUT" 2>"$ERR"
    STATUS=$?
    ELAPSED=$(( $(date +%s) - start ))
}

expect_status() {
    [ "$STATUS" -eq "$1" ] || fail "exit status $STATUS, expected $1"
}

expect_err() {
    grep -q -- "$1" "$ERR" || fail "stderr lacks '$1'"
}

expect_out() {
    grep -q -- "$1" "$OUT" || fail "stdout lacks '$1'"
}

expect_fast() {
    [ "$ELAPSED" -le "$1" ] || fail "took $ELAPSED s, more than $1 s"
}

# No rank of the job may outlive ferryrun: every "pid R PID" line names a
# process that must be gone.
expect_ranks_gone() {
    for pid in $(awk '$1 == "pid" { print $3 }' "$OUT"); do
        if kill -0 "$pid" 2>/dev/null; then
            fail "rank process $pid is still alive"
        fi
    done
}

case $CASE in
exit_status)
    run -n 4 "$HELPER" exit 2 5
    expect_status 5
    expect_err "rank 2 (pid [0-9]*) exited with status 5"
    expect_fast 20
    expect_ranks_gone
    [ "$(grep -c '^pid ' "$OUT")" -eq 4 ] || fail "not every rank started"
    run -n 3 "$HELPER" exit -1 0
    expect_status 0
    [ ! -s "$ERR" ] || fail "a successful job printed to stderr"
    run -n 1 "$HELPER" exit 0 42
    expect_status 42
    expect_err "rank 0"
    ;;
signal)
    run -n 3 "$HELPER" signal 1
    expect_status 137
    expect_err "rank 1 (pid [0-9]*) killed by signal SIGKILL"
    expect_fast 20
    expect_ranks_gone
    ;;
timeout)
    run -n 2 --timeout 1 "$HELPER" sleep 60
    expect_status 124
    expect_err "timeout"
    expect_fast 8
    expect_ranks_gone
    # Ranks that ignore SIGTERM get SIGKILL after the grace period.
    run -n 2 --timeout 0.5 "$HELPER" stubborn 60
    expect_status 124
    expect_fast 10
    expect_ranks_gone
    ;;
usage)
    for args in "" "-n" "-n 0 true" "-n -3 true" "-n abc true" "-n 2x true" "-n 2" \
                "--bogus -n 2 true" "-q -n 2 true" "-n 2 --bind-to socket true" \
                "-n 2 --bind-to" "-n 2 -x 1BAD=x true" "-n 2 -x =x true" \
                "-n 2 --timeout -1 true" "-n 2 --timeout soon true" "-n 99999 true"; do
        # Word splitting of $args is intended.
        # shellcheck disable=SC2086
        run $args
        [ "$STATUS" -eq 2 ] || fail "'ferryrun $args' exited $STATUS, expected 2"
        grep -q usage "$ERR" || fail "'ferryrun $args' printed no usage"
    done
    run --help
    expect_status 0
    expect_out "usage"
    run -n 2 "$TMP/no-such-program" arg
    expect_status 127
    expect_err "no-such-program"
    run -n 2 no-such-program-on-the-path
    expect_status 127
    expect_err "no-such-program-on-the-path"
    run -n 1 "$TMP"
    expect_status 127
    # Options after the program are the program's own.
    run -n 1 "$HELPER" env -n
    expect_status 0
    expect_out "rank 0: -n unset"
    ;;
tag_output)
    run -n 3 --tag-output "$HELPER" print
    expect_status 0
    for r in 0 1 2; do
        expect_out "^\[$r\] line1 from $r\$"
        expect_out "^\[$r\] partial $r\$"
        expect_err "^\[$r\] err from $r\$"
    done
    if grep -v '^\[[0-2]\] ' "$OUT" | grep -q .; then
        fail "an untagged line on stdout"
    fi
    # Untagged, lines pass unchanged; an unfinished last line stays
    # unfinished, so only what follows a newline is sure to start a line.
    run -n 2 "$HELPER" print
    expect_status 0
    expect_out "line1 from 1\$"
    expect_out "partial 1"
    expect_err "^err from 0\$"
    ;;
env)
    FR_TEST_PASS=passed-on
    export FR_TEST_PASS
    run -n 2 -x FR_TEST_SET=hello -x FR_TEST_PASS -x FR_TEST_EQ=a=b -x FR_TEST_UNSET \
        "$HELPER" env FR_TEST_SET FR_TEST_PASS FR_TEST_EQ FR_TEST_UNSET PMI_SIZE FERRY_JOB_ID
    expect_status 0
    for r in 0 1; do
        expect_out "rank $r: FR_TEST_SET=hello"
        expect_out "rank $r: FR_TEST_PASS=passed-on"
        expect_out "rank $r: FR_TEST_EQ=a=b"
        expect_out "rank $r: FR_TEST_UNSET unset"
        expect_out "rank $r: PMI_SIZE=2"
        expect_out "rank $r: FERRY_JOB_ID=ferry-"
    done
    expect_err "FR_TEST_UNSET"
    [ "$(grep FERRY_JOB_ID "$OUT" | sed 's/.*=//' | sort -u | wc -l)" -eq 1 ] ||
        fail "ranks got different job ids"
    ;;
bigout)
    lines=50000
    for tag in "" "--tag-output"; do
        # shellcheck disable=SC2086
        run -n 4 $tag "$HELPER" bigout $lines
        expect_status 0
        for r in 0 1 2 3; do
            # Each rank's lines arrive complete and in order.
            awk -v r="$r" -v n="$lines" '
                { if ($1 ~ /^\[/) { $1 = ""; $0 = substr($0, 2) } }
                $1 == "out" && $2 == r { if ($3 != seen) bad = 1; seen++ }
                END { exit (bad || seen != n) }' "$OUT" ||
                fail "rank $r's output is incomplete or out of order ($tag)"
        done
        [ "$(wc -l <"$OUT")" -eq $((4 * lines)) ] || fail "wrong number of lines ($tag)"
    done
    ;;
abort)
    run -n 3 "$HELPER" abort 7
    expect_status 7
    expect_err "rank 0 called PMI abort with exit code 7"
    expect_fast 20
    expect_ranks_gone
    ;;
nofinalize)
    run -n 3 "$HELPER" nofinalize
    expect_status 1
    expect_err "rank 0 exited while [12] rank(s) wait at a PMI barrier"
    expect_fast 20
    expect_ranks_gone
    ;;
nofinalize_keepgoing)
    run --keep-going -n 3 "$HELPER" nofinalize
    expect_status 0
    expect_err "rank 0 exited while [12] rank(s) wait at a PMI barrier it never entered; the barrier fails"
    expect_out "rank 1 barrier: cmd=barrier_out rc=-1 msg=rank_left"
    expect_out "rank 2 barrier: cmd=barrier_out rc=-1 msg=rank_left"
    expect_fast 20
    ;;
pmi)
    run -n 4 "$HELPER" pmi
    expect_status 0
    for r in 0 1 2 3; do expect_out "rank $r pmi ok"; done
    expect_err "bad PMI request"
    ;;
longline)
    run -n 2 "$HELPER" longline
    expect_status 0
    expect_err "rank 0 sent a PMI request longer than"
    expect_out "rank 0 saw its PMI connection closed"
    ;;
bind)
    run -n 2 --bind-to core "$HELPER" bind
    expect_status 0
    expect_out "rank 0 cpus 1\$"
    expect_out "rank 1 cpus 1\$"
    ;;
forward_signal)
    "$FERRYRUN" -n 2 "$HELPER" sleep 60 >"$OUT" 2>"$ERR" &
    pid=$!
    # Wait for both ranks to start. The background job opens $OUT itself,
    # so the first looks may find no file yet: that counts as no rank.
    i=0
    while [ "$(grep -c '^pid ' "$OUT" 2>/dev/null || true)" != 2 ] && [ $i -lt 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    kill -TERM "$pid"
    wait "$pid"
    STATUS=$?
    expect_status 143
    expect_err "SIGTERM"
    expect_ranks_gone
    ;;
provider_shm)
    # libfabric's shm provider names its region files PID:UID:N; ferryrun
    # removes the ones a rank left, and only those: a file of the same name
    # older than the rank is an earlier process's (pids come round again).
    u=$(id -u)
    run -n 1 sh -c "touch -d '2 hours ago' /dev/shm/\$\$:$u:0; : > /dev/shm/\$\$:$u:1; echo pid \$\$"
    pid=$(sed -n 's/^pid //p' "$OUT")
    [ -n "$pid" ] || fail "the rank did not say its pid"
    stale=/dev/shm/$pid:$u:0
    kept=no
    [ -e "$stale" ] && kept=yes
    rm -f "$stale" "/dev/shm/$pid:$u:1"
    expect_status 0
    expect_err "removed 1 libfabric shm file(s) rank 0 (pid $pid) left behind"
    [ "$kept" = yes ] || fail "the stale file $stale, older than the rank, was removed"
    ;;
*)
    echo "unknown case $CASE"
    exit 1
    ;;
esac
echo "ok ($CASE)"
exit 0
