#!/bin/sh
# usage: run_params.sh FERRY_INFO
# Each bad value of the tcp parameters that choose modules, links and the
# user timeout is refused by ferry_info -a (which declares every parameter
# as ferry_init does) with exit status 1 and a message naming the variable;
# the good values are listed.
info=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=0
# refuse VAR VALUE PATTERN: VAR=VALUE must fail with a message matching PATTERN.
refuse() {
    env "$1=$2" "$info" -a >"$out" 2>&1
    status=$?
    if [ "$status" -ne 1 ] || ! grep -Eq "$3" "$out"; then
        echo "FAIL: $1='$2': status $status, expected 1 and a line matching '$3':"
        cat "$out"
        failed=1
    else
        echo "ok: $1='$2' refused: $(grep -E "$3" "$out" | head -1)"
    fi
}
# accept VAR VALUE: VAR=VALUE is taken and listed as the value.
accept() {
    env "$1=$2" "$info" -a >"$out" 2>&1
    status=$?
    if [ "$status" -ne 0 ] || ! grep -q "^ *$1 = \"*$2\"* " "$out"; then
        echo "FAIL: $1='$2': status $status, or not listed as the value:"
        grep "$1" "$out"
        failed=1
    else
        echo "ok: $1='$2' taken"
    fi
}
refuse FERRY_TCP_MODULES two "FERRY_TCP_MODULES='two': expected one or per-interface"
refuse FERRY_TCP_MODULES "" "FERRY_TCP_MODULES='': expected one or per-interface"
refuse FERRY_TCP_MODULES One "FERRY_TCP_MODULES='One': expected one or per-interface"
refuse FERRY_TCP_MODULES "per-interface " "FERRY_TCP_MODULES='per-interface ': expected"
refuse FERRY_TCP_LINKS 0 "FERRY_TCP_LINKS='0' is out of range \[1, 8\]"
refuse FERRY_TCP_LINKS 9 "FERRY_TCP_LINKS='9' is out of range \[1, 8\]"
refuse FERRY_TCP_LINKS -1 "FERRY_TCP_LINKS='-1' is out of range"
refuse FERRY_TCP_LINKS two "FERRY_TCP_LINKS='two'"
refuse FERRY_TCP_USER_TIMEOUT -1 "FERRY_TCP_USER_TIMEOUT='-1' is out of range \[0, 3600000\]"
refuse FERRY_TCP_USER_TIMEOUT 3600001 "FERRY_TCP_USER_TIMEOUT='3600001' is out of range"
refuse FERRY_TCP_USER_TIMEOUT 10s "FERRY_TCP_USER_TIMEOUT='10s'"
accept FERRY_TCP_MODULES per-interface
accept FERRY_TCP_MODULES one
accept FERRY_TCP_LINKS 8
accept FERRY_TCP_USER_TIMEOUT 0
[ "$failed" -eq 0 ] && echo "run_params: ok"
exit "$failed"
