#!/bin/sh
# MPI programs over ferry under Open MPI's mpirun, with only ob1 and
# "self,ferry" as BTLs:
#   run_ompi.sh CASE [ARGS...] VAR=VALUE...
# Cases:
#   info                          ompi_info lists "MCA btl: ferry" and ferry's
#                                 parameters as btl_ferry_* with their help
#   params                        btl_ferry_* reach ferry, win over FERRY_*, and a
#                                 bad one is refused naming the variable
#   installed                     cmake --install into a fresh prefix: the
#                                 component in PREFIX/lib/ferry/openmpi finds
#                                 its libferry, Open MPI lists it from there
#                                 and runs mpi_p2p over it
#   p2p TRANSPORT PROTOCOL NP     mpi_p2p; PROTOCOL: default, eager, pipeline,
#                                 put or get (forced through btl_ferry_flags or
#                                 sizes, and checked in the module's counts);
#                                 its digest must be that of the same run over
#                                 Open MPI's vader
#   coll TRANSPORT NP             mpi_coll, its digest checked against vader's
#   osc TRANSPORT NP [ROUNDS]     mpi_osc under --mca osc rdma (its stress of
#                                 ROUNDS rounds, default 1000): every window
#                                 made by osc/rdma, atomics, puts and gets
#                                 carried by the transport's ferry module
#   own TRANSPORT NP [off]        mpi_btl -o: the modules' put, get and atomics
#                                 called directly on the process's own memory
#                                 (no endpoint), every hostile handle and
#                                 range refused, memory and guards checked;
#                                 "off" runs with mpi_leave_pinned 0 (no
#                                 registration cache), else the cache must be on
#   wait TRANSPORT                mpi_btl -w on 2 ranks, tcp or sm. tcp with
#                                 its in-flight RDMA limit at 1
#                                 (FERRY_TCP_RDMA_MAX_INFLIGHT): puts and gets
#                                 wait in the component and all arrive right,
#                                 the modules' "waited" counts say so too; sm
#                                 with a pool of 4 descriptors, its smallest
#                                 ring, no cross-memory attach and 2 atomics
#                                 in flight: those past the pool wait; on
#                                 both, target-executed fetch-and-adds and
#                                 compare-and-swaps refused past the limit,
#                                 retried, all fetching the right values
#   dead TRANSPORT [NP]           mpi_btl -d on NP ranks (default 2), the
#                                 same settings, the last rank under
#                                 kill_wrap.sh killing itself: the others'
#                                 gets to it (waiting in the component over
#                                 tcp, in sm over sm) all end, in order, with
#                                 OPAL_ERR_UNREACH; with 3 ranks or more the
#                                 survivors' puts and gets to each other
#                                 still work afterwards
#   mixed tcp                     mpi_btl -m tcp on 2 ranks, tcp's send queue
#                                 at 128 KiB: gets of mixed sizes to a peer,
#                                 the large ones refused by their bytes in
#                                 flight, the small ones behind them waiting
#                                 too; all complete in the order issued
#   kill TRANSPORT NP             a rank SIGKILLed mid-traffic: the job ends with
#                                 an error within 120 s (mpirun's report of the
#                                 signal, or ferry's report of the lost rank
#                                 through register_error) and leaves no ferry
#                                 file
#   error TRANSPORT NP            as kill, but mpirun learns of the killed rank
#                                 only later (kill_wrap.sh): the others' ferry
#                                 modules must call the error callback ob1
#                                 registered (their log says so), and ob1
#                                 ends the job with ferry's message
#   netns NP                      mpi_p2p, mpi_coll and mpi_osc (osc/rdma) across
#                                 network namespaces
#                                 (tests/multihost), two hosts, sm within and tcp
#                                 across; run it under the netns lock
# TRANSPORT: sm (ferry's default choice: sm reaches the local peers), tcp
# (FERRY_BTL=tcp), ofi-shm, ofi-tcp (FERRY_BTL=ofi, FERRY_OFI_PROVIDER shm or
# tcp;ofi_rxm). Every run also checks, through btl_base_verbose, that ferry
# initialized, carried the traffic, and that vader and tcp did not load.
# VARs: MPIRUN OMPI_INFO COMPONENT (mca_btl_ferry.so's folder) P2P COLL OSC
# CMAKE BUILD_DIR (for installed)
# KILL BTL (the programs) INFO_TOOL (ferry_info) MH_DIR (tests/multihost).
# Exit 0 passed, 1 failed, 77 skipped (the reason printed).
set -u
CASE=$1
shift
ARGS=""
for a; do
    case $a in
    *=*) export "$a" ;;
    *) ARGS="$ARGS $a" ;;
    esac
done
# shellcheck disable=SC2086
set -- $ARGS
HERE=$(cd "$(dirname "$0")" && pwd)

skip() {
    echo "SKIPPED: $*"
    exit 77
}
OUT=$(mktemp) ERR=$(mktemp)
files="$OUT $ERR"
trap 'rm -f $files' EXIT
fail() {
    echo "FAIL ($CASE $ARGS): $*"
    echo "--- stdout:"; tail -c 5000 "$OUT"
    echo "--- stderr:"; tail -c 8000 "$ERR"
    [ -n "${provider_before+set}" ] && clean_provider_files "$provider_before"
    exit 1
}

[ -n "${COMPONENT:-}" ] || skip "mca_btl_ferry.so is not built (see the configure output)"
[ -n "${MPIRUN:-}" ] && [ -x "$MPIRUN" ] || skip "Open MPI's mpirun not found (install openmpi-bin)"
[ -n "${OMPI_INFO:-}" ] && [ -x "$OMPI_INFO" ] || skip "ompi_info not found (install openmpi-bin)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
SYS=$("$OMPI_INFO" --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
[ -n "$SYS" ] || fail "ompi_info does not tell its component folder (pkglibdir)"
CPATH_MCA="$COMPONENT:$SYS"

# The MPI options of every run: ob1, Open MPI's self and ferry, nothing else.
MPI_OPTS="--oversubscribe --mca pml ob1 --mca btl self,ferry --mca mca_base_component_path $CPATH_MCA --mca btl_base_verbose 100"

# transport_env T: ferry's variables for the transport, exported (mpirun's
# local ranks inherit them) and as -x options (for remote ones).
XOPTS=""
transport_env() {
    unset FERRY_BTL FERRY_OFI_PROVIDER
    case $1 in
    sm) MODULE=sm ;;
    tcp) export FERRY_BTL=tcp; MODULE=tcp ;;
    ofi-shm) export FERRY_BTL=ofi FERRY_OFI_PROVIDER=shm; MODULE=ofi ;;
    ofi-tcp) export FERRY_BTL=ofi "FERRY_OFI_PROVIDER=tcp;ofi_rxm"; MODULE=ofi ;;
    *) echo "run_ompi.sh: unknown transport '$1'"; exit 2 ;;
    esac
    XOPTS="-x FERRY_JOB_LABEL"
    [ -n "${FERRY_BTL:-}" ] && XOPTS="$XOPTS -x FERRY_BTL"
    [ -n "${FERRY_OFI_PROVIDER:-}" ] && XOPTS="$XOPTS -x FERRY_OFI_PROVIDER"
    if [ "$MODULE" = ofi ]; then
        # ferry's ofi transport is a module: without libfabric's provider
        # it does not open, which is a skip, not a failure.
        env FERRY_LOG_LEVEL=info "$INFO_TOOL" >"$OUT" 2>"$ERR"
        grep -q "^ofi:" "$OUT" || skip "ferry's ofi transport is not built"
    fi
}

# run ARGS...: runs a command with a time bound; STATUS, $OUT and $ERR.
# libfabric's shm provider names its region files in /dev/shm after the
# process ("PID:UID:N"); a rank that Open MPI kills or aborts cannot remove
# its own, and a later process given the same pid then fails to open its
# endpoint (EBUSY). The kill and error cases remove those the job's dead
# processes left, and say so. $1: the listing taken before the job.
shm_provider_files() {
    ls /dev/shm 2>/dev/null | grep -E '^[0-9]+:[0-9]+:[0-9]+$' | sort
}
clean_provider_files() {
    # The job's processes may still be going down when mpirun has returned.
    tries=0
    while [ "$tries" -lt 25 ]; do
        alive=0
        for f in $(shm_provider_files); do
            printf '%s\n' "$1" | grep -qxF "$f" && continue
            kill -0 "${f%%:*}" 2>/dev/null && alive=1
        done
        [ "$alive" -eq 0 ] && break
        tries=$((tries + 1))
        sleep 0.2
    done
    for f in $(shm_provider_files); do
        printf '%s\n' "$1" | grep -qxF "$f" && continue
        if ! kill -0 "${f%%:*}" 2>/dev/null; then
            echo "removing /dev/shm/$f, left by the job's dead process ${f%%:*} (libfabric's shm provider)"
            rm -f "/dev/shm/$f"
        fi
    done
}

run() {
    echo "+ $*"
    # Below ctest's 600 s, so that a hung job is reported with its output.
    timeout 240 "$@" >"$OUT" 2>"$ERR"
    STATUS=$?
}

# Checks every MPI run makes: ferry initialized and carried traffic to a
# peer; vader and Open MPI's tcp never loaded.
check_btls() {
    grep -q "select: init of component ferry returned success" "$ERR" ||
        fail "the ferry BTL did not initialize"
    grep -q "Using ferry btl for send to" "$ERR" || fail "the BML chose ferry for no peer"
    if grep -E "component (vader|tcp)( |$)" "$ERR" >/dev/null; then
        fail "a BTL other than self and ferry was loaded: $(grep -E 'component (vader|tcp)' "$ERR" | head -1)"
    fi
}

# sum FIELD MODULE: the sum over ranks of a counter of the module's
# statistics line (btl_base_verbose 40 and above, printed at finalize).
sum() {
    awk -v f="$1" -v m="$2" '
        /btl ferry: rank [0-9]+ module / && $0 ~ (" module " m ":") {
            line = $0; sub(/.*: sendi/, "sendi", line)
            n = split(line, parts, ", ")
            for (i = 1; i <= n; i++) {
                split(parts[i], kv, " ")
                key = kv[1]; val = kv[2]
                if (kv[1] == "send") { key = kv[1] "_" kv[2]; val = kv[3] }
                if (key == f) total += val
            }
            seen = 1
        }
        END { if (!seen) print -1; else print total + 0 }' "$ERR"
}

# same_as_vader NAME NP PROGRAM ARGS...: the digest line of the ferry run
# just made ($OUT) is that of the same program over self,vader.
same_as_vader() {
    name=$1 n=$2
    shift 2
    want=$(grep "^$name: digest " "$OUT") || fail "$name printed no digest"
    run "$MPIRUN" -n "$n" --oversubscribe --mca pml ob1 --mca btl self,vader "$@"
    [ "$STATUS" -eq 0 ] || fail "the same program over vader exited $STATUS"
    got=$(grep "^$name: digest " "$OUT") || fail "$name printed no digest over vader"
    [ "$want" = "$got" ] || fail "ferry's run gave '$want', vader's '$got'"
    echo "same as over vader: $want"
}

# mpi_btl's skip (no ferry module initialized), passed on.
program_skipped() {
    if grep -q "^SKIPPED: " "$OUT"; then
        skip "$(grep "^SKIPPED: " "$OUT" | head -1 | sed 's/^SKIPPED: //')"
    fi
}

expect_counts() {
    # $1 protocol; MODULE set
    puts=$(sum put "$MODULE") gets=$(sum get "$MODULE") queued=$(sum send_queued "$MODULE")
    inplace=$(sum send_inplace "$MODULE") waited=$(sum send_waited "$MODULE")
    recvd=$(sum received "$MODULE") failed=$(sum failed "$MODULE")
    [ "$recvd" -gt 0 ] || fail "module $MODULE received nothing (counts: put $puts get $gets)"
    # ob1 falls back to another protocol when a put or get fails, so the
    # data alone would not tell.
    [ "$failed" -eq 0 ] || fail "module $MODULE: $failed puts, gets or atomics failed"
    echo "module $MODULE: put $puts, get $gets, send queued $queued, send inplace $inplace, send waited $waited, received $recvd"
    case $1 in
    eager) [ "$puts" -eq 0 ] && [ "$gets" -eq 0 ] || fail "eager sizes used RDMA (put $puts, get $gets)" ;;
    pipeline) [ "$puts" -eq 0 ] && [ "$gets" -eq 0 ] && [ $((queued + inplace)) -gt 0 ] ||
        fail "the send pipeline was not used alone (put $puts, get $gets, queued sends $queued, in place $inplace)"
        # Every ferry transport has inline sends: ob1's contiguous
        # fragments leave from the caller's memory.
        [ "$inplace" -gt 0 ] || fail "no fragment of the send pipeline was sent from its data in place" ;;
    put) [ "$puts" -gt 0 ] && [ "$gets" -eq 0 ] || fail "RDMA put was not used alone (put $puts, get $gets)" ;;
    get) [ "$gets" -gt 0 ] && [ "$puts" -eq 0 ] || fail "RDMA get was not used alone (put $puts, get $gets)" ;;
    esac
}

case $CASE in
info)
    run env OMPI_MCA_mca_base_component_path="$CPATH_MCA" "$OMPI_INFO"
    [ "$STATUS" -eq 0 ] || fail "ompi_info exited $STATUS"
    grep -q "MCA btl: ferry (MCA v2.1.0, API v3.1.0" "$OUT" || fail "ompi_info does not list MCA btl: ferry"
    run env OMPI_MCA_mca_base_component_path="$CPATH_MCA" "$OMPI_INFO" --param btl ferry --level 9
    [ "$STATUS" -eq 0 ] || fail "ompi_info --param exited $STATUS"
    for v in btl_ferry_flags btl_ferry_eager_limit btl_ferry_btl btl_ferry_log_level \
             btl_ferry_sm_eager_limit btl_ferry_tcp_if_include btl_ferry_mem_rcache_size_limit; do
        grep -q "parameter \"$v\"" "$OUT" || fail "ompi_info --param btl ferry --level 9 lacks $v"
    done
    grep -q "ferry's FERRY_SM_EAGER_LIMIT, a size" "$OUT" || fail "btl_ferry_sm_eager_limit has no help naming FERRY_SM_EAGER_LIMIT"
    # Without the component path, Open MPI does not see ferry.
    run "$OMPI_INFO"
    grep -q "MCA btl: ferry" "$OUT" && skip "mca_btl_ferry is installed where Open MPI looks by itself"
    ;;
params)
    transport_env sm
    # sm alone: btl_ferry_exclusivity below gives every ferry module the
    # same exclusivity, and Open MPI would stripe over sm and tcp.
    export FERRY_BTL=sm
    XOPTS="$XOPTS -x FERRY_BTL"
    # The MCA variable wins over FERRY_*; FERRY_* applies without it.
    export FERRY_SM_MAX_SEND_SIZE=8k
    # shellcheck disable=SC2086
    run "$MPIRUN" -n 2 $MPI_OPTS $XOPTS -x FERRY_SM_MAX_SEND_SIZE --mca btl_ferry_sm_max_send_size 16k "$P2P" -m 65536
    [ "$STATUS" -eq 0 ] || fail "exit status $STATUS"
    grep -q "module sm: eager limit 4096, max send 16384" "$ERR" || fail "btl_ferry_sm_max_send_size=16k did not reach the sm module"
    # shellcheck disable=SC2086
    run "$MPIRUN" -n 2 $MPI_OPTS $XOPTS -x FERRY_SM_MAX_SEND_SIZE "$P2P" -m 65536
    [ "$STATUS" -eq 0 ] || fail "exit status $STATUS"
    grep -q "module sm: eager limit 4096, max send 8192" "$ERR" || fail "FERRY_SM_MAX_SEND_SIZE=8k did not reach the sm module"
    unset FERRY_SM_MAX_SEND_SIZE
    # Open MPI's side of the attributes: each module keeps what it can do.
    # shellcheck disable=SC2086
    run "$MPIRUN" -n 2 $MPI_OPTS $XOPTS --mca btl_ferry_eager_limit 1000000 --mca btl_ferry_exclusivity 5000 "$P2P" -m 65536
    [ "$STATUS" -eq 0 ] || fail "exit status $STATUS"
    grep -q "btl_ferry_eager_limit=1000000 is more than the sm module can do (32768): 32768 used" "$ERR" ||
        fail "an eager limit beyond the module's was not cut with a message"
    grep -q "module sm: eager limit 32768, max send 32768, rdma pipeline [0-9]*, exclusivity 5000" "$ERR" ||
        fail "btl_ferry_eager_limit/exclusivity did not reach the module"
    # A bad value: ferry refuses it naming the MCA variable, and the job
    # cannot run on ferry.
    # shellcheck disable=SC2086
    run "$MPIRUN" -n 2 $MPI_OPTS $XOPTS --mca btl_ferry_sm_eager_limit lots "$P2P" -m 1024
    [ "$STATUS" -ne 0 ] || fail "a job with btl_ferry_sm_eager_limit=lots ran"
    grep -q "btl_ferry_sm_eager_limit='lots' is not a size" "$ERR" "$OUT" ||
        fail "the bad value was not named as btl_ferry_sm_eager_limit"
    grep -q "btl ferry: not used: ferry's transports do not open" "$ERR" "$OUT" ||
        fail "the component did not say why it is not used"
    ;;
installed)
    prefix=$(mktemp -d)
    trap 'rm -rf "$prefix"; rm -f $files' EXIT
    run "$CMAKE" --install "$BUILD_DIR" --prefix "$prefix"
    [ "$STATUS" -eq 0 ] || fail "cmake --install exited $STATUS"
    so=$(find "$prefix" -path "*/ferry/openmpi/mca_btl_ferry.so" | head -1)
    [ -n "$so" ] || fail "no lib*/ferry/openmpi/mca_btl_ferry.so under the install prefix"
    dir=$(dirname "$so")
    run ldd "$so"
    grep "libferry" "$OUT" | grep -q "$prefix" || fail "the installed component does not find the installed libferry: $(grep libferry "$OUT")"
    CPATH_MCA="$dir:$SYS"
    run env OMPI_MCA_mca_base_component_path="$CPATH_MCA" "$OMPI_INFO"
    grep -q "MCA btl: ferry" "$OUT" || fail "ompi_info does not list the installed component"
    transport_env sm
    # shellcheck disable=SC2086
    run "$MPIRUN" -n 2 --oversubscribe --mca pml ob1 --mca btl self,ferry \
        --mca mca_base_component_path "$CPATH_MCA" --mca btl_base_verbose 100 $XOPTS "$P2P" -m 65536
    [ "$STATUS" -eq 0 ] || fail "exit status $STATUS"
    grep -q "p2p: all checks passed (2 ranks" "$OUT" || fail "mpi_p2p did not pass"
    check_btls
    ;;
p2p)
    transport_env "$1"
    proto=$2 np=$3
    case $proto in
    default) extra="" max=$((64 << 20)) ;;
    eager) extra="" max=2048 ;;
    pipeline) extra="--mca btl_ferry_flags send" max=$((16 << 20)) ;;
    put) extra="--mca btl_ferry_flags send,put" max=$((16 << 20)) ;;
    get) extra="--mca btl_ferry_flags send,get" max=$((16 << 20)) ;;
    *) echo "run_ompi.sh: unknown protocol '$proto'"; exit 2 ;;
    esac
    # shellcheck disable=SC2086
    run "$MPIRUN" -n "$np" $MPI_OPTS $XOPTS $extra "$P2P" -m "$max"
    [ "$STATUS" -eq 0 ] || fail "exit status $STATUS"
    grep -q "p2p: all checks passed ($np ranks" "$OUT" || fail "mpi_p2p did not pass"
    check_btls
    expect_counts "$proto"
    same_as_vader p2p "$np" "$P2P" -m "$max"
    ;;
coll)
    transport_env "$1"
    np=$2
    # shellcheck disable=SC2086
    run "$MPIRUN" -n "$np" $MPI_OPTS $XOPTS "$COLL"
    [ "$STATUS" -eq 0 ] || fail "exit status $STATUS"
    grep -q "coll: all checks passed ($np ranks)" "$OUT" || fail "mpi_coll did not pass"
    check_btls
    expect_counts default
    same_as_vader coll "$np" "$COLL"
    ;;
osc)
    transport_env "$1"
    np=$2
    rounds=${3:-1000}
    # Only osc/rdma may serve the windows (--mca osc rdma: without a BTL it
    # can use, window creation fails and so does the job); each window's
    # name says which component made it.
    # shellcheck disable=SC2086
    run "$MPIRUN" -n "$np" $MPI_OPTS $XOPTS --mca osc rdma --mca osc_base_verbose 100 "$OSC" -k "$rounds"
    [ "$STATUS" -eq 0 ] || fail "exit status $STATUS"
    grep -q "osc: all checks passed ($np ranks)" "$OUT" || fail "mpi_osc did not pass"
    check_btls
    # MPI_Alloc_mem with mpool_hints "ferry": over sm, ferry's pool serves
    # it from sm's heap (a mapping of /dev/shm); elsewhere Open MPI's
    # default pool does.
    if [ "$MODULE" = sm ]; then
        grep -q "^osc: alloc_mem memory in /dev/shm on every rank: yes" "$OUT" ||
            fail "MPI_Alloc_mem with mpool_hints ferry did not come from ferry's sm heap"
    fi
    for w in allocated created "created single-accumulate" alloc_mem; do
        grep -q "^osc: $w window is 'rdma window [0-9]*'" "$OUT" ||
            fail "the $w window was not made by osc/rdma: $(grep "^osc: $w window is" "$OUT")"
        grep -q "^osc: $w window: stress of $rounds rounds per rank passed" "$OUT" ||
            fail "the stress on the $w window did not pass"
    done
    grep -q "rdma component destroying window" "$ERR" || fail "osc/rdma's verbose output is missing"
    # The windows over the program's memory are reached through the BTL:
    # the atomics, puts and gets must have been ferry's.
    atomics=$(sum atomics "$MODULE") puts=$(sum put "$MODULE") gets=$(sum get "$MODULE")
    echo "module $MODULE: atomics $atomics, put $puts, get $gets"
    [ "$atomics" -gt 0 ] || fail "osc/rdma did no atomic over ferry's $MODULE module"
    [ "$puts" -gt 0 ] && [ "$gets" -gt 0 ] || fail "osc/rdma did no put or get over ferry's $MODULE module"
    ;;
own)
    transport_env "$1"
    np=$2
    cache=${3:-on}
    extra=""
    [ "$cache" = off ] && extra="--mca mpi_leave_pinned 0"
    # shellcheck disable=SC2086
    run "$MPIRUN" -n "$np" $MPI_OPTS $XOPTS $extra "$BTL" -o
    program_skipped
    [ "$STATUS" -eq 0 ] || fail "exit status $STATUS"
    grep -q "^btl: own memory: all checks passed ($np ranks" "$OUT" ||
        fail "mpi_btl -o did not pass"
    grep -q "^btl: module $MODULE: [0-9]* own operations done" "$OUT" ||
        fail "the $MODULE module was not tested"
    grep -q "^btl: module $MODULE: registration cache $cache" "$OUT" ||
        fail "module $MODULE's registration cache was not $cache: $(grep "cache" "$OUT")"
    grep -q "select: init of component ferry returned success" "$ERR" ||
        fail "the ferry BTL did not initialize"
    echo "own: $(grep -c "own operations done" "$OUT") modules," \
        "$(sum own "$MODULE") own operations on module $MODULE"
    ;;
wait | dead)
    transport_env "$1"
    np=${2:-2}
    case $MODULE in
    tcp)
        # One put, get or atomic in flight to a peer: the second waits in
        # the component (puts and gets) or is refused (atomics).
        export FERRY_TCP_RDMA_MAX_INFLIGHT=1
        XOPTS="$XOPTS -x FERRY_TCP_RDMA_MAX_INFLIGHT"
        ;;
    sm)
        # sm alone, its puts and gets through the ring (no cross-memory
        # attach, which would complete a get from the victim inside the
        # call), the smallest ring and 2 target-executed atomics in flight
        # to a peer: the ring fills and atomics are refused. sm queues puts
        # and gets behind a full ring itself; what makes them wait in the
        # component is sm's pool of 4 descriptors. The first 2 gets to a
        # peer go without a descriptor (its budget of gets it answers,
        # FERRY_SM_GET_SLOTS), the rest need one.
        export FERRY_BTL=sm FERRY_SM_CMA=0 FERRY_SM_RING_SIZE=16384 FERRY_SM_MAX_SEND_SIZE=4096 \
            FERRY_BTL_ATOMIC_SLOTS=2 FERRY_SM_FREE_LIST_NUM=4 FERRY_SM_FREE_LIST_MAX=4 \
            FERRY_SM_GET_SLOTS=2
        for v in FERRY_BTL FERRY_SM_CMA FERRY_SM_RING_SIZE FERRY_SM_MAX_SEND_SIZE \
                 FERRY_BTL_ATOMIC_SLOTS FERRY_SM_FREE_LIST_NUM FERRY_SM_FREE_LIST_MAX \
                 FERRY_SM_GET_SLOTS; do
            XOPTS="$XOPTS -x $v"
        done
        ;;
    *) echo "run_ompi.sh: $CASE needs tcp or sm"; exit 2 ;;
    esac
    if [ "$CASE" = wait ]; then
        # shellcheck disable=SC2086
        run "$MPIRUN" -n 2 $MPI_OPTS $XOPTS "$BTL" -w "$MODULE"
        program_skipped
        [ "$STATUS" -eq 0 ] || fail "exit status $STATUS"
        grep -q "^btl: wait queue: all checks passed (2 ranks, module $MODULE" "$OUT" ||
            fail "mpi_btl -w $MODULE did not pass"
        check_btls
        waited=$(sum waited "$MODULE") failed=$(sum failed "$MODULE") atomics=$(sum atomics "$MODULE")
        # tcp: 15 puts and 15 gets of each rank; sm: at least one of each.
        want=4
        [ "$MODULE" = tcp ] && want=60
        [ "$waited" -ge "$want" ] ||
            fail "the $MODULE modules' statistics count $waited waited puts and gets, not $want or more"
        # 24 fetch-and-adds and 24 compare-and-swaps from each rank.
        [ "$atomics" -ge 96 ] || fail "module $MODULE: $atomics atomics counted, not 96 or more"
        [ "$failed" -eq 0 ] || fail "module $MODULE: $failed puts, gets or atomics failed"
        grep "^btl: wait queue:" "$OUT"
        echo "module $MODULE: waited $waited, put $(sum put "$MODULE"), get $(sum get "$MODULE"), atomics $atomics"
    else
        export FERRY_JOB_LABEL="${FERRY_JOB_LABEL:-ompi}d$$" KILL_WRAP_STAY=60
        start=$(date +%s)
        # shellcheck disable=SC2086
        run "$MPIRUN" -n "$np" $MPI_OPTS $XOPTS -x KILL_WRAP_STAY sh "$HERE/kill_wrap.sh" "$BTL" -d "$MODULE"
        took=$(($(date +%s) - start))
        program_skipped
        grep -q "killing itself" "$OUT" || fail "rank $((np - 1)) did not get to kill itself"
        # The survivors leave without MPI_Finalize (their peer is gone):
        # mpirun's status is not 0, and the job ends before kill_wrap.sh's
        # 60 s.
        grep -q "^btl: dead peer: all checks passed ($np ranks, module $MODULE" "$OUT" ||
            fail "mpi_btl -d $MODULE did not pass"
        [ "$took" -lt 50 ] || fail "the job took $took s to end"
        echo "$(grep "^btl: dead peer:" "$OUT"), job ended in $took s"
    fi
    ;;
mixed)
    transport_env "$1"
    [ "$MODULE" = tcp ] || { echo "run_ompi.sh: $CASE needs tcp"; exit 2; }
    # The bytes of gets in flight to a peer within 128 KiB: a 64 KiB get
    # is taken, a 96 KiB one after it refused, the 4 KiB ones behind it
    # would fit.
    export FERRY_TCP_SENDQ_MAX=131072
    XOPTS="$XOPTS -x FERRY_TCP_SENDQ_MAX"
    # shellcheck disable=SC2086
    run "$MPIRUN" -n 2 $MPI_OPTS $XOPTS "$BTL" -m tcp
    program_skipped
    [ "$STATUS" -eq 0 ] || fail "exit status $STATUS"
    grep -q "^btl: mixed sizes: all checks passed (2 ranks, module tcp" "$OUT" ||
        fail "mpi_btl -m tcp did not pass"
    check_btls
    grep "^btl: mixed sizes:" "$OUT"
    ;;
kill)
    transport_env "$1"
    np=$2
    # A label of this run alone, so that its files are told from those of
    # other jobs running at the same time.
    export FERRY_JOB_LABEL="${FERRY_JOB_LABEL:-ompi}k$$"
    provider_before=$(shm_provider_files)
    start=$(date +%s)
    # shellcheck disable=SC2086
    run "$MPIRUN" -n "$np" $MPI_OPTS $XOPTS "$KILL"
    [ "$STATUS" -ne 0 ] && [ "$STATUS" -ne 124 ] || fail "the job did not end with an error (status $STATUS)"
    [ $(($(date +%s) - start)) -lt 120 ] || fail "the job took more than 120 s to end"
    grep -q "killing itself" "$OUT" || fail "the rank did not get to kill itself"
    # Whoever notices first ends the job: mpirun (the rank's exit) or a
    # peer's ferry transport (register_error: ob1 aborts the job).
    if grep -q "exited on signal 9 (Killed)" "$ERR" "$OUT"; then
        echo "mpirun reported the killed rank"
    elif grep -q "btl ferry ($MODULE): lost rank $((np - 1))" "$ERR" "$OUT"; then
        echo "ferry reported the lost rank: $(grep -h "btl ferry ($MODULE): lost rank" "$ERR" "$OUT" | head -1)"
    else
        fail "neither mpirun nor ferry reported the killed rank"
    fi
    tries=0
    while ls /dev/shm 2>/dev/null | grep -q "^ferry-$FERRY_JOB_LABEL\\."; do
        tries=$((tries + 1))
        [ "$tries" -lt 50 ] || fail "ferry files left in /dev/shm: $(ls /dev/shm | grep "^ferry-$FERRY_JOB_LABEL\\.")"
        sleep 0.2
    done
    echo "no /dev/shm/ferry-$FERRY_JOB_LABEL.* left"
    clean_provider_files "$provider_before"
    ;;
error)
    transport_env "$1"
    np=$2
    victim=$((np - 1))
    export FERRY_JOB_LABEL="${FERRY_JOB_LABEL:-ompi}e$$"
    # The victim's rank stays (kill_wrap.sh) for STAY seconds after its
    # process is killed, so mpirun cannot end the job first: the others'
    # ferry modules must notice the dead peer, tell ob1 through the error
    # callback it registered, and ob1 ends the job with the BTL's message.
    export KILL_WRAP_STAY=60
    provider_before=$(shm_provider_files)
    start=$(date +%s)
    # shellcheck disable=SC2086
    run "$MPIRUN" -n "$np" $MPI_OPTS $XOPTS -x KILL_WRAP_STAY sh "$HERE/kill_wrap.sh" "$KILL"
    took=$(($(date +%s) - start))
    [ "$STATUS" -ne 0 ] && [ "$STATUS" -ne 124 ] || fail "the job did not end with an error (status $STATUS)"
    grep -q "killing itself" "$OUT" || fail "the rank did not get to kill itself"
    [ "$took" -lt 40 ] || fail "the job took $took s to end: ob1 did not end it on ferry's report"
    grep -q "btl ferry: rank [0-9]* module $MODULE: calling Open MPI's error callback (fatal) for rank $victim" "$ERR" ||
        fail "no ferry module called Open MPI's error callback for rank $victim"
    grep -q "btl ferry ($MODULE): lost rank $victim: " "$ERR" "$OUT" ||
        fail "ob1 did not end the job with ferry's report of the lost rank"
    echo "error callback: $(grep -h "calling Open MPI's error callback" "$ERR" | head -1)"
    echo "ob1's message: $(grep -h "btl ferry ($MODULE): lost rank" "$ERR" "$OUT" | head -1)"
    echo "job ended in $took s with status $STATUS"
    tries=0
    while ls /dev/shm 2>/dev/null | grep -q "^ferry-$FERRY_JOB_LABEL\\."; do
        tries=$((tries + 1))
        [ "$tries" -lt 50 ] || fail "ferry files left in /dev/shm: $(ls /dev/shm | grep "^ferry-$FERRY_JOB_LABEL\\.")"
        sleep 0.2
    done
    echo "no /dev/shm/ferry-$FERRY_JOB_LABEL.* left"
    clean_provider_files "$provider_before"
    ;;
netns)
    np=$1
    [ -n "${MH_DIR:-}" ] || fail "MH_DIR is not set"
    . "$MH_DIR/netns_lib.sh"
    mh_require_netns
    mh_setup 2
    trap 'mh_cleanup; rm -f $files' EXIT
    set -- $MH_HOSTS
    H1=$1 H2=$2
    per=$((np / 2))
    transport_env sm
    export FERRY_TCP_IF_INCLUDE=eth0
    # mpirun in the hub; its daemons started in the "hosts" through the
    # namespaces' launch agent, its out-of-band traffic on the bridge.
    agent="sh $HERE/ns_rsh.sh $MH_DIR/ns_agent.sh $MH_STATE"
    for prog in "$P2P -m 16777216" "$COLL" "$OSC -k 300"; do
        osc=""
        [ "$prog" = "$OSC -k 300" ] && osc="--mca osc rdma"
        # shellcheck disable=SC2086
        run ip netns exec "$MH_HUB" "$MPIRUN" -n "$np" --host "$H1:$per,$H2:$per" \
            --mca plm_rsh_agent "$agent" --mca oob_tcp_if_include 10.77.0.0/24 \
            $MPI_OPTS $XOPTS -x FERRY_TCP_IF_INCLUDE $osc $prog
        [ "$STATUS" -eq 0 ] || fail "exit status $STATUS"
        grep -q "all checks passed ($np ranks" "$OUT" || fail "$prog did not pass"
        check_btls
        MODULE=sm expect_counts default
        MODULE=tcp expect_counts default
        if [ -n "$osc" ]; then
            # osc/rdma does the local ranks' atomics with the CPU on its
            # shared segment, the other host's through ferry's tcp.
            grep -c "^osc: .* window is 'rdma window" "$OUT" | grep -qx 4 ||
                fail "not every window was made by osc/rdma"
            [ "$(sum atomics tcp)" -gt 0 ] || fail "osc/rdma did no atomic over ferry's tcp"
            echo "module tcp: atomics $(sum atomics tcp)"
        fi
    done
    ;;
*)
    echo "run_ompi.sh: unknown case '$CASE'"
    exit 2
    ;;
esac
echo "PASS ($CASE $ARGS)"
exit 0
