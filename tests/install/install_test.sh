#!/bin/sh
# usage: install_test.sh BUILD_DIR SOURCE_DIR LIBDIR MANDIR CC CMAKE [EXTRA_CFLAGS]
# Installs the build into a temporary prefix and checks that it holds what
# ferry ships (headers, libraries, pkg-config file, CMake package, tools and
# manual pages, each where expected) and that an application can be built
# against it the documented ways and run: pkg-config (shared, and
# --static with libferry.a; fully static too where every library it needs
# has a static archive), and CMake's find_package(ferry) with ferry::ferry
# and ferry::ferry_static.
# LIBDIR and MANDIR are the configured CMAKE_INSTALL_LIBDIR ("lib" or, for a
# /usr prefix on Debian, "lib/x86_64-linux-gnu") and CMAKE_INSTALL_MANDIR.
# EXTRA_CFLAGS carries the sanitizer flags of a sanitizer build, which the
# application must share.
# Exits 77 (reported by CTest as skipped) when pkg-config is missing.
set -eu

if [ $# -lt 6 ]; then
    echo "usage: $0 BUILD_DIR SOURCE_DIR LIBDIR MANDIR CC CMAKE [EXTRA_CFLAGS]" >&2
    exit 2
fi
build=$1
src=$2
libdir=$3
mandir=$4
cc=$5
cmake=$6
extra=${7:-}

if ! command -v pkg-config >/dev/null 2>&1; then
    echo "SKIP: pkg-config is not installed"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

step() { echo "== $*"; }

step "install into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || {
    cat "$tmp/install.log"
    exit 1
}
for f in include/ferry/ferry.h include/ferry/btl.h include/ferry/dt.h \
         "$libdir/libferry.a" "$libdir/pkgconfig/ferry.pc" \
         "$libdir/cmake/ferry/ferryConfig.cmake" \
         "$libdir/cmake/ferry/ferryConfigVersion.cmake" bin/ferry_info \
         "$mandir/man7/ferry.7" "$mandir/man3/ferry.3" "$mandir/man1/ferryrun.1" \
         "$mandir/man1/ferry_info.1" "$mandir/man1/ferry-bench.1"; do
    if [ ! -e "$prefix/$f" ]; then
        echo "FAIL: $f was not installed"
        exit 1
    fi
done
if ! ls "$prefix/$libdir"/libferry.so* >/dev/null 2>&1; then
    echo "FAIL: the shared library was not installed"
    exit 1
fi

# The installed shared library is not on the loader's path.
export LD_LIBRARY_PATH="$prefix/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

step "pkg-config"
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
flags=$(pkg-config --cflags --libs ferry)
echo "pkg-config --cflags --libs ferry: $flags"
case $flags in
    *"-I$prefix/include"*) ;;
    *) echo "FAIL: the include folder is not $prefix/include"; exit 1 ;;
esac
# The flags are meant to be split into words, as in the README.
# shellcheck disable=SC2086
"$cc" $extra "$src/examples/hello.c" $flags -o "$tmp/hello_pc"
"$tmp/hello_pc"

step "pkg-config --static"
sflags=$(pkg-config --static --libs ferry)
echo "pkg-config --static --libs ferry: $sflags"
# Every library by -L and -l: a path to a shared object would make a static
# link take it (or fail with -static).
for word in $sflags; do
    case $word in
        -l* | -L* | -Wl,* | -pthread) ;;
        *) echo "FAIL: '$word' in pkg-config --static --libs ferry is not -L/-l"; exit 1 ;;
    esac
done

step "pkg-config --static, linking libferry.a"
# libferry.a itself, the libraries it needs as the system has them.
lflags=$(printf '%s\n' "$sflags" | sed 's/\(^\| \)-lferry\( \|$\)/\1-l:libferry.a\2/')
echo "flags: $(pkg-config --cflags ferry) $lflags"
# shellcheck disable=SC2086
"$cc" $extra "$src/examples/hello.c" $(pkg-config --cflags ferry) $lflags -o "$tmp/hello_static"
if readelf -d "$tmp/hello_static" | grep -q 'NEEDED.*libferry'; then
    echo "FAIL: hello_static needs libferry.so"
    exit 1
fi
"$tmp/hello_static"

step "pkg-config --static, linking fully static (-static)"
# Where a library has no static archive here (Debian ships none for libpmix)
# a fully static program cannot be made; that is said, not failed. The
# archives of the libraries those libraries need count too, through their
# own pkg-config files.
missing=""
have_archive() {
    for d in $(printf '%s\n' "$sflags" | tr ' ' '\n' | sed -n 's/^-L//p'); do
        [ -e "$d/lib$1.a" ] && return 0
    done
    [ "$("$cc" -print-file-name="lib$1.a")" != "lib$1.a" ]
}
todo=$(printf '%s\n' "$sflags" | tr ' ' '\n' | sed -n 's/^-l//p' | grep -vx ferry || true)
seen=" "
while [ -n "$todo" ]; do
    set -- $todo
    lib=$1
    shift
    todo=$*
    case $seen in *" $lib "*) continue ;; esac
    seen="$seen$lib "
    if ! have_archive "$lib"; then
        missing="$missing lib$lib.a"
        continue
    fi
    for mod in "lib$lib" "$lib"; do
        if pkg-config --exists "$mod" 2>/dev/null; then
            todo="$todo $(pkg-config --static --libs-only-l "$mod" | tr ' ' '\n' |
                           sed -n 's/^-l//p' | grep -vx "$lib" | tr '\n' ' ')"
            break
        fi
    done
done
if [ -n "$extra" ]; then
    echo "not tried: a sanitizer build ($extra) cannot link fully static"
elif [ -n "$missing" ]; then
    echo "not tried: no static archive here for:$missing"
else
    # shellcheck disable=SC2086
    "$cc" -static "$src/examples/hello.c" $(pkg-config --static --cflags --libs ferry) \
        -o "$tmp/hello_full_static"
    if readelf -d "$tmp/hello_full_static" | grep -q NEEDED; then
        echo "FAIL: hello_full_static needs shared libraries"
        exit 1
    fi
    "$tmp/hello_full_static"
fi

step "manual pages"
for page in man7/ferry.7 man3/ferry.3 man1/ferryrun.1 man1/ferry_info.1 man1/ferry-bench.1; do
    cmp -s "$prefix/$mandir/$page" "$src/docs/man/$(basename "$page")" ||
        { echo "FAIL: $mandir/$page differs from docs/man"; exit 1; }
done
if command -v groff >/dev/null 2>&1; then
    for page in man7/ferry.7 man3/ferry.3 man1/ferryrun.1 man1/ferry_info.1 man1/ferry-bench.1; do
        out=$(groff -man -ww -z "$prefix/$mandir/$page" 2>&1) && [ -z "$out" ] ||
            { echo "FAIL: $mandir/$page does not render cleanly: $out"; exit 1; }
    done
else
    echo "groff is not installed: the installed pages are not rendered here"
fi
if command -v man >/dev/null 2>&1; then
    MANPATH="$prefix/$mandir" man -w ferryrun >/dev/null &&
        MANPATH="$prefix/$mandir" man -w 3 ferry >/dev/null &&
        MANPATH="$prefix/$mandir" man -w 7 ferry >/dev/null ||
        { echo "FAIL: man does not find the installed pages under $prefix/$mandir"; exit 1; }
else
    echo "man is not installed: the pages are where man(1) looks, not looked up"
fi

step "installed ferry_info"
"$prefix/bin/ferry_info" >"$tmp/info.out"
grep -q '^transports built: ' "$tmp/info.out" || {
    cat "$tmp/info.out"
    echo "FAIL: ferry_info did not list the transports"
    exit 1
}

if [ -x "$prefix/bin/ferryrun" ]; then
    step "installed ferryrun -n 2 hello"
    "$prefix/bin/ferryrun" -n 2 "$tmp/hello_pc"
fi

step "find_package(ferry)"
mkdir -p "$tmp/app"
cp "$src/examples/hello.c" "$tmp/app/hello.c"
cat >"$tmp/app/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(ferry_consumer LANGUAGES C)
find_package(ferry 0.1 REQUIRED)
add_executable(hello hello.c)
target_link_libraries(hello ferry::ferry)
add_executable(hello_static hello.c)
target_link_libraries(hello_static ferry::ferry_static)
CM
"$cmake" -S "$tmp/app" -B "$tmp/app/build" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$extra" >"$tmp/app.log" 2>&1 || {
    cat "$tmp/app.log"
    exit 1
}
"$cmake" --build "$tmp/app/build" >"$tmp/app.log" 2>&1 || {
    cat "$tmp/app.log"
    exit 1
}
"$tmp/app/build/hello"
"$tmp/app/build/hello_static"

echo "PASS"
