#!/bin/sh
# usage: install_test.sh BUILD_DIR SOURCE_DIR LIBDIR CC CMAKE [EXTRA_CFLAGS]
# Installs the build into a temporary prefix and checks that an application
# can be built against it the two documented ways (pkg-config, and CMake's
# find_package(ferry) with ferry::ferry and ferry::ferry_static) and run.
# LIBDIR is the configured CMAKE_INSTALL_LIBDIR ("lib" or, for a /usr prefix
# on Debian, "lib/x86_64-linux-gnu"). EXTRA_CFLAGS carries the sanitizer
# flags of a sanitizer build, which the application must share.
# Exits 77 (reported by CTest as skipped) when pkg-config is missing.
set -eu

if [ $# -lt 5 ]; then
    echo "usage: $0 BUILD_DIR SOURCE_DIR LIBDIR CC CMAKE [EXTRA_CFLAGS]" >&2
    exit 2
fi
build=$1
src=$2
libdir=$3
cc=$4
cmake=$5
extra=${6:-}

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
         "$libdir/cmake/ferry/ferryConfigVersion.cmake" bin/ferry_info; do
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

step "pkg-config --static, linking libferry.a"
sflags=$(pkg-config --static --cflags --libs ferry |
         sed 's/\(^\| \)-lferry\( \|$\)/\1-Wl,-Bstatic -lferry -Wl,-Bdynamic\2/')
echo "flags: $sflags"
# shellcheck disable=SC2086
"$cc" $extra "$src/examples/hello.c" $sflags -o "$tmp/hello_static"
"$tmp/hello_static"

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
