#!/bin/sh
# usage: run_modules.sh CASE HELLO=... INFO_TOOL=... LIB=... MODDIR=... FAKES=...
#                       HAVE_OFI=0|1 HAVE_PMIX=0|1 BUILD=... SRC=... LIBDIR=...
#                       MANDIR=... CMAKE=... CC=... CFLAGS=...
# One case of the module loader's tests (CMakeLists.txt). LIB is the built
# libferry.so; a copy of it in a folder of this test's own has no modules
# beside it, and LD_LIBRARY_PATH makes the programs load that copy. FAKES
# holds the refused stand-ins (fake_abi/, fake_kind/, fake_missing/). Exits 0
# on success, 1 on failure, 77 (skipped) when the build has no such module.
set -u

case=$1
shift
for a in "$@"; do
    case $a in
        *=*) eval "${a%%=*}=\${a#*=}" ;;
    esac
done

fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIPPED: $*"; exit 77; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-modules.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/lib"
cp "$LIB" "$tmp/lib/libferry.so.0"

OUT=$tmp/out
ERR=$tmp/err
# run [VAR=VALUE...] PROGRAM [ARG...]: STATUS, $OUT and $ERR.
run() {
    echo "+ $*"
    env "$@" >"$OUT" 2>"$ERR"
    STATUS=$?
    sed 's/^/  out: /' "$OUT"
    sed 's/^/  err: /' "$ERR"
}
# Every line ferry logs at error level: "ferry error: ..." or "ferry[R] error: ...".
errors() { grep -c '^ferry\(\[[0-9]*\]\)\? error: ' "$ERR"; }
expect_one_error() {
    [ "$STATUS" -ne 0 ] || fail "exited 0"
    n=$(errors)
    [ "$n" -eq 1 ] || fail "$n lines at error level, expected one"
    grep -q -- "$1" "$ERR" || fail "no line says '$1'"
}
need_ofi() { [ "$HAVE_OFI" = 1 ] || skip "this build has no ofi module (no libfabric)"; }
need_pmix() { [ "$HAVE_PMIX" = 1 ] || skip "this build has no pmix module (no libpmix)"; }
alone="LD_LIBRARY_PATH=$tmp/lib"

case $case in
not_found)
    need_ofi
    run "$alone" FERRY_BTL=ofi "$HELLO"
    expect_one_error "transport ofi, named in FERRY_BTL, cannot be used: ferry_btl_ofi.so is in none of the folders searched ($tmp/lib/ferry)"
    ;;
default_quiet)
    # Nothing asks for ofi and no fabric device is here: nothing is loaded
    # and nothing said.
    need_ofi
    run "$alone" FERRY_LOG_LEVEL=info "$HELLO"
    [ "$STATUS" -eq 0 ] || fail "exited $STATUS"
    if grep -q "ofi" "$ERR" && ! ls /sys/class/infiniband/* /sys/class/cxi/* /dev/hfi1_* \
            >/dev/null 2>&1; then
        fail "ofi was looked for although nothing asked for it"
    fi
    ;;
module_path)
    need_ofi
    run "$alone" "FERRY_MODULE_PATH=/nonexistent::$MODDIR" FERRY_BTL=self,ofi \
        FERRY_OFI_PROVIDER=shm FERRY_LOG_LEVEL=debug "$HELLO"
    [ "$STATUS" -eq 0 ] || fail "exited $STATUS"
    grep -q "transport ofi: loaded $MODDIR/ferry_btl_ofi.so" "$ERR" ||
        fail "ofi was not loaded from FERRY_MODULE_PATH"
    ;;
missing_library)
    need_ofi
    run "FERRY_MODULE_PATH=$FAKES/fake_missing" FERRY_BTL=ofi "$HELLO"
    expect_one_error "libferry_test_absent.so: cannot open shared object file"
    ;;
wrong_abi)
    need_ofi
    run "FERRY_MODULE_PATH=$FAKES/fake_abi" FERRY_BTL=ofi "$HELLO"
    expect_one_error "is the btl module 'ofi' of ferry 0.0.0 (module ABI 999), not the btl module 'ofi' of this ferry"
    ;;
wrong_kind)
    need_ofi
    run "FERRY_MODULE_PATH=$FAKES/fake_kind" FERRY_BTL=ofi "$HELLO"
    expect_one_error "is the modex module 'ofi' of ferry .*, not the btl module 'ofi'"
    ;;
modex_not_found)
    need_pmix
    run "$alone" FERRY_MODEX=pmix "$HELLO"
    expect_one_error "modex: FERRY_MODEX=pmix, but the pmix backend cannot be used: ferry_modex_pmix.so is in none of the folders searched"
    ;;
modex_auto)
    # A PMIx server's variables without the backend: one line, and the
    # way out; with PMI_PORT, PMI-1 instead (which then finds no server).
    need_pmix
    run "$alone" PMIX_RANK=0 "$HELLO"
    expect_one_error "started by a PMIx server (PMIX_ variables are set), but the pmix backend cannot be used: ferry_modex_pmix.so is in none"
    run "$alone" PMIX_RANK=0 PMI_PORT=127.0.0.1:1 PMI_ID=0 FERRY_LOG_LEVEL=info "$HELLO"
    grep -q "PMI-1 through PMI_PORT instead" "$ERR" || fail "no fallback to PMI_PORT"
    ;;
unloaded_vars)
    # A module's variables are its parameters: while it is not loaded they
    # are left alone (ofi not found, or not asked for); once it is, a
    # misspelt one is warned about like any other. Names that only look
    # like them are still looked at.
    need_ofi
    run "$alone" FERRY_OFI_PROVIDER=shm FERRY_OFI_TX_SLOTS=8 FERRY_OFIX_A=1 "$HELLO"
    [ "$STATUS" -eq 0 ] || fail "exited $STATUS"
    grep -q "FERRY_OFI_" "$ERR" && fail "a variable of the ofi module, not loaded, was warned about"
    grep -q "FERRY_OFIX_A is set but is not a ferry parameter" "$ERR" ||
        fail "FERRY_OFIX_A was not warned about"
    run FERRY_BTL=self,sm FERRY_OFI_PROVIDER=shm "$HELLO"
    [ "$STATUS" -eq 0 ] || fail "exited $STATUS"
    grep -q "not a ferry parameter" "$ERR" && fail "FERRY_OFI_PROVIDER was warned about"
    run FERRY_BTL=self,ofi FERRY_OFI_PROVIDER=shm FERRY_OFI_PROVIDR=shm "$HELLO"
    [ "$STATUS" -eq 0 ] || fail "exited $STATUS"
    grep -q "FERRY_OFI_PROVIDR is set but is not a ferry parameter; did you mean FERRY_OFI_PROVIDER?" \
        "$ERR" || fail "a misspelt variable of the loaded ofi module was not warned about"
    grep -q "FERRY_OFI_PROVIDER is set" "$ERR" && fail "FERRY_OFI_PROVIDER was warned about"
    if [ "$HAVE_PMIX" = 1 ]; then
        run "$alone" FERRY_PMIX_ANYTHING=1 "$HELLO"
        grep -q "not a ferry parameter" "$ERR" &&
            fail "a variable of the pmix module, not loaded, was warned about"
    fi
    ;;
info_missing)
    need_ofi
    run "$alone" "$INFO_TOOL"
    [ "$STATUS" -eq 0 ] || fail "exited $STATUS"
    grep -q "^  ofi    transport      not loaded: ferry_btl_ofi.so is in none" "$OUT" ||
        fail "ferry_info does not say why ofi is missing"
    grep -q "^ofi: $" "$OUT" || fail "ferry_info does not list the ofi transport"
    if [ "$HAVE_PMIX" = 1 ]; then
        grep -q "^  pmix   modex backend  not loaded: ferry_modex_pmix.so is in none" "$OUT" ||
            fail "ferry_info does not say why pmix is missing"
    fi
    ;;
core_needs)
    # The library links libc and the threads library only (and the
    # sanitizer's runtime in such a build; libsodium for the wire's
    # authentication): no foreign library of a transport or backend.
    needed=$(readelf -d "$LIB" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    echo "libferry needs: $needed"
    for n in $needed; do
        case $n in
            libc.so.*|libpthread.so.*|libdl.so.*|libsodium.so.*) ;;
            libasan.so.*|libubsan.so.*|libtsan.so.*|libgcc_s.so.*) ;;
            *) fail "libferry.so needs $n" ;;
        esac
    done
    run ldd "$HELLO"
    if grep -E "fabric|pmix|psm|infinipath|rdmacm|ibverbs" "$OUT"; then
        fail "a program linked with libferry.so loads a fabric or PMIx library"
    fi
    ;;
installed)
    # Installed elsewhere than configured: the library finds its modules
    # beside itself, wherever it is.
    need_ofi
    prefix=$tmp/prefix
    run "$CMAKE" --install "$BUILD" --prefix "$prefix"
    [ "$STATUS" -eq 0 ] || fail "cmake --install failed"
    for f in "$LIBDIR/ferry/ferry_btl_ofi.so" "$MANDIR/man7/ferry-self.7" \
             "$MANDIR/man7/ferry-sm.7" "$MANDIR/man7/ferry-tcp.7" "$MANDIR/man7/ferry-ofi.7"; do
        [ -e "$prefix/$f" ] || fail "$f was not installed"
    done
    if [ "$HAVE_PMIX" = 1 ] && [ ! -e "$prefix/$LIBDIR/ferry/ferry_modex_pmix.so" ]; then
        fail "the pmix module was not installed"
    fi
    # shellcheck disable=SC2086
    "$CC" $CFLAGS "$SRC/examples/hello.c" -I"$prefix/include" -L"$prefix/$LIBDIR" -lferry \
        -o "$tmp/hello" || fail "building hello against the installed library failed"
    run "LD_LIBRARY_PATH=$prefix/$LIBDIR" FERRY_BTL=self,ofi FERRY_OFI_PROVIDER=shm \
        FERRY_LOG_LEVEL=debug "$tmp/hello"
    [ "$STATUS" -eq 0 ] || fail "the installed hello exited $STATUS"
    grep -q "transport ofi: loaded $prefix/$LIBDIR/ferry/ferry_btl_ofi.so" "$ERR" ||
        fail "ofi was not loaded from beside the installed library"
    ;;
info_found)
    need_ofi
    run "$INFO_TOOL"
    [ "$STATUS" -eq 0 ] || fail "exited $STATUS"
    grep -q "^  ofi    transport      $MODDIR/ferry_btl_ofi.so" "$OUT" ||
        fail "ferry_info does not list the ofi module"
    if [ "$HAVE_PMIX" = 1 ]; then
        grep -q "^  pmix   modex backend  $MODDIR/ferry_modex_pmix.so" "$OUT" ||
            fail "ferry_info does not list the pmix module"
    fi
    ;;
*)
    echo "run_modules.sh: unknown case '$case'" >&2
    exit 2
    ;;
esac
echo "PASS"
