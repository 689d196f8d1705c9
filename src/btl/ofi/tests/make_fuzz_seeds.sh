#!/bin/sh
# Writes the seed corpus of fuzz_ofi_msg (fuzz/msg/seed/): a few sessions of
# well-formed traffic and a few of each refusal, in the record format
# fuzz_msg.c describes. The seeds are committed; run this again after
# changing the format.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=$here/fuzz/msg/seed
mkdir -p "$out"

# bytes N...: the bytes, written as octal escapes for printf.
bytes() {
    for b; do printf '\\%03o' "$b"; done
}
# rec N...: one record, its length first.
rec() {
    bytes $# "$@"
}
# msg RANK TYPE TAG SEQDELTA CLAIM ACKBEHIND FLAGS [PAYLOAD...]: a structured
# message from fabric rank RANK (-1: no rank); SEQDELTA is signed (255: -1).
msg() {
    r=$1
    shift
    rec $((r + 1)) "$@"
}
# send RANK: this process sends an ordered message to RANK.
send() {
    rec $((64 + $1))
}
# raw RANK BYTE...: a message given as raw bytes.
raw() {
    r=$1
    shift
    rec $((128 + r + 1)) "$@"
}
seed() { # seed NAME SETUP RECORDS
    # shellcheck disable=SC2059
    printf "$(bytes "$2")$3" >"$out/$1"
}

DATA=1 CLOSE=2 PROBE=3 PONG=4 ACK=5 FAIL=6
# Set-up 5: three ranks, a window of 8. 9: three ranks, a window of 16.

seed in_order 5 "$(msg 0 $DATA 7 0 0 0 0 104 105)$(msg 0 $DATA 7 0 0 0 0 33)$(msg 1 $DATA 9 0 0 0 0)$(msg 0 $CLOSE 0 0 0 0 0)"
# Three early ones, then the one they wait for; then a repeat.
seed held_then_filled 9 "$(msg 2 $DATA 1 2 0 0 0 98)$(msg 2 $DATA 1 1 0 0 0 97)$(msg 2 $DATA 1 3 0 0 0 99)$(msg 2 $DATA 1 0 0 0 0 122)$(msg 2 $DATA 1 255 0 0 0 120)"
seed past_window 5 "$(msg 1 $DATA 1 8 0 0 0)$(msg 1 $DATA 1 7 0 0 0)$(msg 1 $DATA 1 0 0 0 0)"
# A rank of the job claiming to be another, and a stranger claiming rank 0.
seed spoofed 5 "$(msg 2 $DATA 5 0 128 0 0 102)$(msg -1 $DATA 5 0 0 0 0 102)$(msg 0 $DATA 5 0 0 0 0 103)"
# Credits: we send three, it acknowledges two, then lies about a fourth.
seed acks 5 "$(send 1)$(send 1)$(send 1)$(msg 1 $ACK 0 0 0 1 0)$(msg 1 $DATA 4 0 0 0 0)$(msg 1 $PONG 0 0 0 253 0)"
seed probe 9 "$(send 0)$(msg 0 $PROBE 0 3 0 0 0)$(msg 0 $PROBE 0 17 0 0 0)$(msg 0 $PONG 0 0 0 0 0)"
seed fail_notice 5 "$(msg 0 $DATA 2 1 0 0 0 1)$(msg 0 $FAIL 0 0 0 0 0)$(msg 0 $DATA 2 0 0 0 0 2)"
# The handler fails its sender from inside a delivery, with messages held.
seed fail_in_handler 9 "$(msg 1 $DATA 3 1 0 0 0 1)$(msg 1 $DATA 3 2 0 0 0 2)$(msg 1 $DATA 3 0 0 0 0 250)$(msg 1 $DATA 3 3 0 0 0 3)"
seed bad_fields 5 "$(msg 0 $DATA 240 0 0 0 0)$(msg 0 7 0 0 0 0 0)$(msg 0 $DATA 1 0 0 0 1)$(msg 0 $PROBE 1 0 0 0 0)$(msg 0 $ACK 0 0 0 0 0 9)$(msg 0 $DATA 1 0 0 0 0 5)"
# Raw bytes: too short, a bare valid header (rank 0, seq 0, DATA, tag 3),
# a claimed rank past the job.
seed raw 5 "$(raw 0 1 2 3)$(raw 0 0 0 0 0 0 0 0 0 3 1 102 111 0 0 0 0)$(raw 1 9 0 0 0 0 0 0 0 3 1 102 111 0 0 0 0)"
echo "fuzz_ofi_msg seeds written to $out"
