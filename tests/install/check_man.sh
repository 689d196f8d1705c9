#!/bin/sh
# Checks of the manual pages in docs/man, so that they render cleanly and
# stay true to the code:
#   check_man.sh render PAGE...
#       groff renders each page with the man macros and every warning on
#       (-ww) without a word; exits 77 when groff is not installed.
#   check_man.sh options PAGE COMMAND [ARG...]
#       every option COMMAND's --help names is in PAGE, and every long option
#       PAGE's OPTIONS section names is in the --help.
#   check_man.sh api PAGE HEADER...
#       every function the headers declare, and every status code of
#       FERRY_STATUS_MAP, is named in PAGE.
# Exits 0 when the check passes, 1 (saying what is wrong) when not.
set -u
mode=${1:-}
fail=0
bad() { echo "check_man: $*"; fail=1; }

# The page's text without its comments, roff's "\-" read as "-".
page_text() { sed '/^\.\\"/d; s/\\-/-/g' "$1"; }
# Does the text name the option as a word of its own ("-a" is not in "--all")?
names_option() { printf '%s\n' "$1" | grep -qE -- "(^|[^a-zA-Z0-9-])$2([^a-zA-Z0-9-]|\$)"; }

case $mode in
render)
    shift
    command -v groff >/dev/null 2>&1 ||
        { echo "SKIPPED: groff is not installed (Debian: groff-base)"; exit 77; }
    for page; do
        out=$(groff -man -ww -z "$page" 2>&1)
        rc=$?
        if [ $rc -ne 0 ] || [ -n "$out" ]; then
            bad "$page does not render cleanly (groff -man -ww -z, status $rc):"
            printf '%s\n' "$out"
        fi
    done
    ;;
options)
    page=$2
    shift 2
    help=$("$@" --help 2>&1) || { bad "'$* --help' failed: $help"; exit 1; }
    text=$(page_text "$page")
    for opt in $(printf '%s\n' "$help" | grep -oE '(^|[ [,])--[a-z][a-z-]*' |
                 sed 's/^[^-]*//' | sort -u) \
               $(printf '%s\n' "$help" | grep -oE '^ +-[a-zA-Z]([ ,]|$)' |
                 sed 's/^ *//; s/[ ,]$//' | sort -u); do
        names_option "$text" "$opt" ||
            bad "$page does not document $opt, which '$* --help' lists"
    done
    section=$(printf '%s\n' "$text" | sed -n '/^\.SH OPTIONS/,/^\.SH /p')
    for opt in $(printf '%s\n' "$section" | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
        names_option "$help" "$opt" ||
            bad "$page documents $opt, which '$* --help' does not know"
    done
    ;;
api)
    page=$2
    shift 2
    text=$(page_text "$page")
    names=$(cat "$@" | grep -oE '^[a-z][a-z_ ]*[ *]ferry_[a-z_]+\(' |
            grep -oE 'ferry_[a-z_]+' | sort -u)
    codes=$(cat "$@" | grep -oE '^ *X\((OK|ERR[A-Z_]*),' | sed 's/^ *X(//; s/,$//; s/^/FERRY_/')
    # A header without the status table (ferry/msg.h) has only functions.
    [ -n "$names" ] || { bad "no declarations found in $*"; exit 1; }
    for name in $names $codes; do
        printf '%s\n' "$text" | grep -qw -- "$name" || bad "$page does not name $name"
    done
    ;;
*)
    echo "usage: $0 render PAGE... | options PAGE COMMAND [ARG...] | api PAGE HEADER..." >&2
    exit 2
    ;;
esac
[ $fail -eq 0 ] && echo "check_man: $mode: ok"
exit $fail
