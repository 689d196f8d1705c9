#!/bin/sh
# usage: run_expect.sh EXIT_CODE REGEX COMMAND [ARG...]
# Runs COMMAND and passes when it exits with EXIT_CODE and its output
# (stdout and stderr together) matches the extended regular expression REGEX
# (an empty REGEX matches anything). CTest's own PASS_REGULAR_EXPRESSION
# ignores the exit code, which is why this wrapper exists.
if [ $# -lt 3 ]; then
    echo "usage: $0 EXIT_CODE REGEX COMMAND [ARG...]" >&2
    exit 2
fi
want=$1
regex=$2
shift 2
out=$("$@" 2>&1)
got=$?
printf '%s\n' "$out"
if [ "$got" -ne "$want" ]; then
    echo "run_expect: '$*' exited with $got, expected $want" >&2
    exit 1
fi
if [ -n "$regex" ] && ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
    echo "run_expect: the output of '$*' does not match /$regex/" >&2
    exit 1
fi
exit 0
