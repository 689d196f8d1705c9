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

# putn RANK ACT: this process acts towards RANK (1: a tracked put with
# notification, 2: an untracked one, 3: the oldest answer owed leaves, 4:
# answers are owed from now on, or no longer, 5: del_procs; 6, 7 and 8 take
# a byte more, as rec 64+RANK ACT BYTE).
putn() {
    rec $((64 + $1)) "$2"
}
# putn_msg RANK KIND WHERE PLEN COOKIE BYTES...: a PUTN from RANK with its
# body built (fuzz_msg.c: KIND 1 tracked, 2 wrong key, 4 reserved set, 8
# unknown flag, 16 cookie that disagrees, 32 split; WHERE from PN_BASE - 16).
putn_msg() {
    r=$1
    shift
    msg "$r" $PUTN 3 0 0 0 2 "$@"
}
# answer RANK WHICH STATUS [ZERO]: an answer from RANK with its body built
# (WHICH 0: a refusal, else the oldest cookie + WHICH - 1; STATUS 0 OK,
# 1 ACCESS).
answer() {
    r=$1
    shift
    msg "$r" $PUTN_ANSWER 0 0 0 0 2 "$@"
}

DATA=1 CLOSE=2 PROBE=3 PONG=4 ACK=5 FAIL=6 PUTN=9 PUTN_ANSWER=10
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
# Puts with notification, as a target: tracked and landing, tracked below
# the region, untracked and landing, untracked through a wrong key
# (a refusal), no data at all; then as an initiator: two tracked ones and
# an untracked one, answered in order, and the refusal.
seed putn_target 5 "$(putn_msg 1 1 24 2 7 110 111 100 97)$(putn_msg 1 1 0 1 8 110 100 100)$(putn_msg 1 0 16 0 0 1 2 3 4)$(putn_msg 1 2 16 1 0 110 9)$(putn_msg 1 1 0 1 9 110)"
seed putn_answers 5 "$(putn 1 1)$(putn 1 1)$(putn 1 2)$(answer 1 1 0)$(answer 1 1 1)$(answer 1 0 1)$(msg 1 $DATA 4 0 0 0 0 33)"
# Split puts, as a target: a notification held until its write lands (act
# 7, numbered from the oldest not run + byte - 4), a write before its
# notification, one held past its time (act 8: the clock moves on), then a
# write numbered past the window (failed).
seed putn_split 5 "$(putn_msg 1 33 16 1 0 110)$(rec 65 7 4)$(rec 65 7 4)$(putn_msg 1 33 16 1 1 110)$(putn_msg 1 33 16 1 2 110)$(rec 65 8 200)$(rec 65 7 71)"
# del_procs completes two tracked ones; their answers still come, then the
# answer of one sent after.
seed putn_forgotten 5 "$(putn 1 1)$(putn 1 1)$(putn 1 5)$(putn 1 1)$(answer 1 1 0)$(answer 1 1 0)$(answer 1 1 1)"
# Answers owed: refusals coalesced, tracked ones kept in order and sent,
# then more tracked ones than a window of 8 awaiting answers (failed).
seed putn_owed 5 "$(putn 0 4)$(putn_msg 1 2 16 1 0 110 9)$(putn_msg 1 2 16 1 0 110 9)$(putn_msg 1 1 16 1 3 110 9)$(putn 1 3)$(putn 1 3)$(putn_msg 1 1 16 0 1 1)$(putn_msg 1 1 16 0 2 1)$(putn_msg 1 1 16 0 3 1)$(putn_msg 1 1 16 0 4 1)$(putn_msg 1 1 16 0 5 1)$(putn_msg 1 1 16 0 6 1)$(putn_msg 1 1 16 0 7 1)$(putn_msg 1 1 16 0 8 1)$(putn_msg 1 1 16 0 9 1)$(putn_msg 1 1 16 0 10 1)"
# Malformed bodies, one rank each: a reserved field, an unknown flag, a
# cookie without the flag; an answer to nothing in flight; a refusal of
# nothing sent; a reserved tag; a body shorter than its header says.
seed putn_malformed 9 "$(putn_msg 0 4 16 0 0 1)$(putn_msg 1 8 16 0 0 1)$(putn_msg 2 16 16 0 0 1)"
seed putn_bad_answers 5 "$(answer 0 1 0)$(putn 1 1)$(answer 1 2 0)$(putn 2 1)$(answer 2 0 1)"
seed putn_bad_answers2 5 "$(putn 0 1)$(answer 0 1 7)$(putn 1 1)$(answer 1 1 0 1)$(putn 2 2)$(answer 2 0 0)"
seed putn_bad_tag 5 "$(msg 1 $PUTN 240 0 0 0 2 0 16 0 0 1)$(msg 2 $PUTN_ANSWER 1 0 0 0 2 0 1)"
# Raw: a well-formed untracked PUTN of 2 bytes at PN_BASE (header: rank 0,
# seq 0, tag 3; body: raddr 0x10000, size 2, plen 1, the harness's key
# 0x6b...), then the same with plen claiming one byte more.
K="107 107 107 107 107 107 107 107 107 107 107 107 107 107 107 107"
K="$K $K"
# shellcheck disable=SC2086
seed putn_raw 5 "$(raw 0 0 0 0 0 0 0 0 0 3 9 102 111 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0 2 0 0 0 1 0 0 0 0 0 0 0 0 0 0 0 $K 110 1 2)$(raw 0 0 0 0 0 1 0 0 0 3 9 102 111 0 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0 0 0 0 0 2 0 0 0 2 0 0 0 0 0 0 0 0 0 0 0 $K 110 1 2)"
echo "fuzz_ofi_msg seeds written to $out"
