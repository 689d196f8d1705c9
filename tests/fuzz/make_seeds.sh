#!/bin/sh
# Writes the seed corpora of the launcher's fuzz harnesses (tests/fuzz/<name>/seed/),
# each a few well-formed sessions and a few broken ones for the fuzzer to
# start from. The seeds are committed; run this again after changing the
# formats (fuzz_*.c describe them). \036 ends a record (FUZZ_RECORD_END).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
seed() { # seed HARNESS NAME PRINTF-FORMAT
    mkdir -p "$here/$1/seed"
    # shellcheck disable=SC2059
    printf "$3" >"$here/$1/seed/$2"
}

# ---- params: the first byte picks the parser (and the range), the rest is
# the value.
seed params int_plain '\000042'
seed params int_hex_min '\000-0x8000000000000000'
seed params int_overflow '\00099999999999999999999'
seed params int_sign '\000+12'
seed params size_k '\00164k'
seed params size_mib '\00116MiB'
seed params size_max '\00118446744073709551615'
seed params size_bad_suffix '\0014kx'
seed params bool_yes '\002yes'
seed params bool_bad '\0022'
seed params level_name '\003debug'
seed params level_digit '\0034'
seed params reg_int '\00417'
seed params reg_int_range '\014-6'
seed params reg_size '\0051k'
seed params reg_size_range '\0158192'
seed params reg_bool '\006on'
seed params reg_string '\007any text at all'

# ---- pmi_server: records "<target><bytes>\036"; targets 0-3 ranks, 4-7
# pending connections, 8-11 a valid handshake step on pending t-8.
J=@K
init='cmd=init pmi_version=1 pmi_subversion=1\n'
seed pmi_server job \
"\000${init}\036\001${init}\036\
\010\002\036\010\002${init}\036\011\003\036\011\003${init}\036\
\000cmd=get_maxes\n\036\000cmd=get_my_kvsname\n\036\001cmd=get_appnum\n\036\
\000cmd=put kvsname=$J key=0.h0.k value=1.3.k\n\036\
\001cmd=put kvsname=$J key=1.c0.0.k value=eHl6\n\036\
\002cmd=put kvsname=$J key=shared value=first\n\036\
\000cmd=barrier_in\n\036\001cmd=barrier_in\n\036\002cmd=barrier_in\n\036\003cmd=barrier_in\n\036\
\003cmd=get kvsname=$J key=0.h0.k\n\036\001cmd=get kvsname=$J key=nothing\n\036\
\000cmd=finalize\n\036\001cmd=finalize\n\036\002cmd=finalize\n\036\003cmd=finalize\n\036"
seed pmi_server steal \
"\000cmd=put kvsname=$J key=0.a value=x\n\036\001cmd=put kvsname=$J key=0.a value=y\n\036\
\001cmd=put kvsname=$J key=0.b value=y\n\036\000cmd=put kvsname=$J key=0.a value=z\n\036\
\001cmd=put kvsname=$J key=9.x value=y\n\036\001cmd=put kvsname=wrong key=1.x value=y\n\036"
seed pmi_server junk \
"\000junk\n=value\ncmd=bogus\nno equals\ncmd=put\ncmd=get kvsname=$J\n\036\
\001cmd=abort exitcode=300 msg=bye\n\036\000cmd=barrier_in\ncmd=barrier_in\n\036"
seed pmi_server handshakes \
"\004cmd=initack pmiid=2\n\036\
\005cmd=initack pmiid=3 auth=md5 nonce=00\n\036\
\006cmd=initack pmiid=1 auth=hmac-sha256 nonce=0000000000000000000000000000000000000000000000000000000000000000\n\036\
\006cmd=auth_response proof=0000000000000000000000000000000000000000000000000000000000000000\n\036\
\007cmd=get kvsname=x key=y\n\036"
seed pmi_server handshake_local \
"\010\001\036\010\001\036\011\007\036\011\007\036\012\002\036\013\002\036\012\002\036\013\002\036"
seed pmi_server partial_lines \
"\000cmd=in\036\000it pmi_version=1\n\036\004cmd=init\036\004ack pmiid=2 auth=hmac-sha256\n\036"

# ---- pmi_client: a mode byte (0 PMI_FD, 1 PMI_PORT with the secret, 2
# PMI_PORT without), then one answer per request, each ended by ; @N and
# @S become the server's nonce and proof.
hello='cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\ncmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\ncmd=my_kvsname kvsname=kvs_1\n'
ok='cmd=put_result rc=0\n'
puts="$ok$ok$ok$ok$ok$ok$ok"
fence='cmd=barrier_out\n'
none='cmd=get_result rc=-1 msg=not_found\n'
# get a (header, newer revision?, chunk), get big.value (in two chunks),
# get a again (newer revision?, chunk).
gets="cmd=get_result rc=0 value=1.3.a\n${none}cmd=get_result rc=0 value=eHl6\n\
cmd=get_result rc=0 value=2.4.big.value\n${none}\
cmd=get_result rc=0 value=AAAA\ncmd=get_result rc=0 value=AA\n\
${none}cmd=get_result rc=0 value=eHl6\n"
bye='cmd=finalize_ack\n'
sets='cmd=set size=2\ncmd=set rank=1\ncmd=set debug=0\n'
seed pmi_client fd_session "\000$hello$puts$fence$gets$bye"
seed pmi_client port_auth_session \
"\001cmd=auth_challenge rc=0 nonce=@N\ncmd=initack rc=0 proof=@S\n$sets$hello$puts$fence$gets$bye"
seed pmi_client port_plain_session "\002cmd=initack rc=0\n$sets$hello$puts$fence$gets$bye"
# No seed answers "busy": each retry pauses (50 ms and more), which would slow
# the fuzzer to a crawl; test_modex_badpmi covers the retry.
seed pmi_client port_bad_proof \
"\001cmd=auth_challenge rc=0 nonce=@N\ncmd=initack rc=0 proof=0000000000000000000000000000000000000000000000000000000000000000\n$sets"
seed pmi_client port_refused "\002cmd=initack rc=-1 msg=auth_required\n"
seed pmi_client fd_bad_answers \
"\000cmd=response_to_init pmi_version=2 rc=0\n"
seed pmi_client fd_bad_header \
"\000$hello$puts${fence}cmd=get_result rc=0 value=99.7.a\n$none"

# ---- rkey: a byte of flags (module, rank, repair the header, raddr from
# the base), raddr and len (8 bytes each), the rights needed, then the
# packed key (src/api/rkey.h): header, entries, key bytes. Numbers are
# little-endian; the stand-in context is rank 1 of 4 with modules sm, tcp,
# tcp and tcp.
oct() { printf '\\%03o' "$1"; }
le() { # le BYTES VALUE: VALUE (decimal or 0x..) as BYTES little-endian bytes
    n=$1 v=$(($2)) out=""
    while [ "$n" -gt 0 ]; do
        out="$out$(oct $((v & 255)))"
        v=$((v >> 8))
        n=$((n - 1))
    done
    printf '%s' "$out"
}
fnv() { # FNV-1a of a name, as api_rkey_name_hash
    h=2166136261 s=$1
    while [ -n "$s" ]; do
        c=$(printf '%d' "'${s%"${s#?}"}")
        h=$(( ((h ^ c) * 16777619) & 0xffffffff ))
        s=${s#?}
    done
    echo "$h"
}
zeros() { i=0; out=""; while [ $i -lt "$1" ]; do out="$out\\000"; i=$((i + 1)); done; printf '%s' "$out"; }
keybytes() { # keybytes N SEED: N bytes counting up from SEED
    i=0 out=""
    while [ $i -lt "$1" ]; do out="$out$(oct $((($2 + i) & 255)))"; i=$((i + 1)); done
    printf '%s' "$out"
}
rk_hdr() { # rk_hdr N_ENTRIES OWNER ACCESS BASE LEN
    printf '%s' "$(le 4 0x59454b52)$(le 2 2)$(le 2 "$1")$(le 4 "$2")$(le 4 "$3")$(le 8 "$4")$(le 8 "$5")"
}
rk_run() { # rk_run NAME FIRST COUNT KEY_LEN KEY_SEED [PAD]: the key of instances FIRST..FIRST+COUNT-1
    printf '%s' "$(le 4 "$(fnv "$1")")$(oct "$2")$(oct "$3")$(oct "$4")$(oct "${6:-0}")$(keybytes "$4" "$5")"
}
rk_entry() { # rk_entry NAME INSTANCE KEY_LEN KEY_SEED: the key of one instance
    rk_run "$1" "$2" 1 "$3" "$4"
}
rk_in() { # rk_in FLAGS RADDR LEN NEED
    printf '%s' "$(oct "$1")$(le 8 "$2")$(le 8 "$3")$(oct "$4")"
}
BASE=0x7f0000001000
SM=$(rk_entry sm 0 16 1)
TCP0=$(rk_entry tcp 0 24 40)
TCP1=$(rk_entry tcp 1 24 80)
# rank 1 (flags bits 2-3 = 01), module sm, put 64 bytes at base + 16.
seed rkey sm_put "$(rk_in 0x24 16 64 4)$(rk_hdr 3 1 6 $BASE 4096)$SM$TCP0$TCP1"
seed rkey tcp0_get "$(rk_in 0x25 0 4096 2)$(rk_hdr 3 1 6 $BASE 4096)$SM$TCP0$TCP1"
seed rkey tcp1_get "$(rk_in 0x26 4000 96 2)$(rk_hdr 3 1 2 $BASE 4096)$SM$TCP0$TCP1"
seed rkey missing_module "$(rk_in 0x26 0 8 2)$(rk_hdr 2 1 6 $BASE 4096)$SM$TCP0"
seed rkey past_end "$(rk_in 0x24 4090 16 4)$(rk_hdr 3 1 6 $BASE 4096)$SM$TCP0$TCP1"
seed rkey before_base "$(rk_in 0x04 $((BASE - 1)) 2 2)$(rk_hdr 3 1 6 $BASE 4096)$SM$TCP0$TCP1"
seed rkey read_only "$(rk_in 0x24 0 8 4)$(rk_hdr 3 1 2 $BASE 4096)$SM$TCP0$TCP1"
seed rkey other_owner "$(rk_in 0x08 $BASE 8 2)$(rk_hdr 3 1 6 $BASE 4096)$SM$TCP0$TCP1"
seed rkey wrap "$(rk_in 0x20 0xfff0 64 2)$(rk_hdr 1 1 6 0x7fffffffffff0000 0xffff)$SM"
seed rkey key_too_long "$(rk_in 0x24 0 8 2)$(rk_hdr 2 1 6 $BASE 4096)$(rk_entry tcp 0 200 7)$SM"
seed rkey many_entries "$(rk_in 0x24 0 8 2)$(rk_hdr 65535 1 6 $BASE 4096)$SM$SM$SM$SM$SM$SM$SM$SM"
seed rkey bad_magic "$(rk_in 0x04 $BASE 8 2)$(zeros 32)$SM"
# Runs of instances: one entry for all three tcp modules (as ferry_mem_rkey
# writes them, their registrations being shared), tcp #2 through it; a run
# of two and a single; then the claims a key may not make: one instance
# twice, runs that overlap, a run of none, a run past instance 255, a pad
# byte set, and two runs of another transport that overlap.
TCPALL=$(rk_run tcp 0 3 24 120)
seed rkey tcp_run_put "$(rk_in 0x27 64 64 4)$(rk_hdr 2 1 6 $BASE 4096)$SM$TCPALL"
seed rkey tcp_run_get "$(rk_in 0x25 0 4096 2)$(rk_hdr 2 1 6 $BASE 4096)$SM$TCPALL"
seed rkey tcp_run_split "$(rk_in 0x27 8 8 2)$(rk_hdr 3 1 6 $BASE 4096)$(rk_run tcp 0 2 24 40)$SM$(rk_entry tcp 2 24 90)"
seed rkey dup_instance "$(rk_in 0x26 0 8 2)$(rk_hdr 3 1 6 $BASE 4096)$SM$TCP1$(rk_entry tcp 1 24 7)"
seed rkey dup_elsewhere "$(rk_in 0x24 0 8 2)$(rk_hdr 3 1 6 $BASE 4096)$SM$TCP0$TCP0"
seed rkey overlap_runs "$(rk_in 0x27 0 8 2)$(rk_hdr 3 1 6 $BASE 4096)$SM$(rk_run tcp 0 2 24 40)$(rk_run tcp 1 2 24 80)"
seed rkey run_of_none "$(rk_in 0x25 0 8 2)$(rk_hdr 3 1 6 $BASE 4096)$SM$(rk_run tcp 2 0 24 40)$TCPALL"
seed rkey run_past_255 "$(rk_in 0x25 0 8 2)$(rk_hdr 3 1 6 $BASE 4096)$SM$TCPALL$(rk_run tcp 250 10 24 40)"
seed rkey pad_set "$(rk_in 0x25 0 8 2)$(rk_hdr 2 1 6 $BASE 4096)$SM$(rk_run tcp 0 3 24 40 1)"
seed rkey other_overlap "$(rk_in 0x25 0 8 2)$(rk_hdr 4 1 6 $BASE 4096)$SM$TCPALL$(rk_run ofi 0 4 8 1)$(rk_run ofi 3 1 8 9)"

# ---- modex_values: the first byte picks the reader. 0: a PMIx value (two
# bytes of type, little-endian: 27 is PMIX_BYTE_OBJECT, 3 PMIX_STRING; a
# flags byte, 1 claiming a size past the limit; the bytes). 1: tcp's
# addresses (magic "orry", version 2, count, then 20-byte entries: family,
# prefix, port, 16 address bytes). 2: sm's address (a 320-byte name, the
# segment size, pid and version, little-endian).
seed modex_values pmix_bytes '\000\033\000\000some published bytes'
seed modex_values pmix_empty '\000\033\000\000'
seed modex_values pmix_string '\000\003\000\000a string, not bytes'
seed modex_values pmix_oversize '\000\033\000\001short'
seed modex_values tcp_one '\001orry\002\000\001\000\004\030\220\037\177\000\000\001\000\000\000\000\000\000\000\000\000\000\000\000'
seed modex_values tcp_two '\001orry\002\000\002\000\004\030\220\037\177\000\000\001\000\000\000\000\000\000\000\000\000\000\000\000\006\100\221\037\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\001'
seed modex_values tcp_count_lies '\001orry\002\000\011\000\004\030\220\037\177\000\000\001\000\000\000\000\000\000\000\000\000\000\000\000'
seed modex_values tcp_old_version '\001orry\001\000\000\000'
# sm_addr NAME SIZE-BYTES PID-BYTES VERSION-BYTES: the name padded with NULs to
# 320 bytes.
sm_addr() {
    mkdir -p "$here/modex_values/seed"
    {
        printf '\002%s' "$2"
        head -c $((320 - ${#2})) /dev/zero
        # shellcheck disable=SC2059
        printf "$3$4$5"
    } >"$here/modex_values/seed/$1"
}
sm_addr sm_ok /ferry-job-1 '\000\000\020\000\000\000\000\000' '\071\060\000\000' '\002\000\000\000'
sm_addr sm_foreign /some-database '\000\000\020\000\000\000\000\000' '\071\060\000\000' '\002\000\000\000'
sm_addr sm_subdir /ferry-x/../y '\000\000\020\000\000\000\000\000' '\071\060\000\000' '\002\000\000\000'
sm_addr sm_tiny /ferry-job-1 '\010\000\000\000\000\000\000\000' '\071\060\000\000' '\002\000\000\000'
sm_addr sm_no_pid /ferry-job-1 '\000\000\020\000\000\000\000\000' '\000\000\000\000' '\002\000\000\000'

# ---- bml: byte 0 the messages kept to each peer; then records of
# <sender><flags><a bml_msg_t of 40 bytes>\036 (fuzz_bml.c). bml_msg KIND
# INSTANCE LAST EPOCH COUNT NAME prints one message (little-endian fields).
oct() { # the byte of value $1
    # shellcheck disable=SC2059
    printf "\\$(printf '%03o' "$1")"
}
bml_msg() {
    printf 'BMLP'; oct "$1"; printf '\000'; oct "$2"; oct "$3"
    oct "$4"; printf '\000\000\000\000\000\000\000'
    oct "$5"; printf '\000\000\000\000\000\000\000'
    printf '%s' "$6"
    head -c $((16 - ${#6})) /dev/zero
}
bml_seed() { # NAME then the bytes on stdin
    mkdir -p "$here/bml/seed"
    cat >"$here/bml/seed/$1"
}
{ printf '\010'; printf '\000\002'; bml_msg 1 0 0 0 0 ''; printf '\036'
  printf '\000\002'; bml_msg 2 0 0 0 5 ''; printf '\036'; } | bml_seed ask_count
{ printf '\010'; printf '\002\006'; bml_msg 3 0 1 1 0 tcp; printf '\036'
  printf '\002\002'; bml_msg 4 0 0 1 3 ''; printf '\036'
  printf '\002\002'; bml_msg 2 0 0 0 7 ''; printf '\036'; } | bml_seed lost_recount
{ printf '\004'; printf '\003\002'; bml_msg 3 1 1 1 0 tcp; printf '\036'
  printf '\003\002'; bml_msg 3 0 1 2 0 low; printf '\036'; } | bml_seed peer_lost
{ printf '\004'; printf '\000\000'; bml_msg 2 0 0 0 200 ''; printf '\036'; } | bml_seed count_lies
{ printf '\004'; printf '\000\000'; bml_msg 3 0 1 1 0 nope; printf '\036'
  printf '\000\000'; bml_msg 9 0 0 0 0 ''; printf '\036'
  printf '\000\000BMLP\036'; } | bml_seed malformed

# ---- sm_init: bytes 0-4 the peer's table slots, get slots and heap object
# sizes (in 32-byte units); then records <kind><fields>\036 (fuzz_sm_init.c).
# T0/T1 put an entry of heap object 1 in slot 0 and one of ordinary memory
# (no heap) in slot 1; K0/K1 are keys of slots 0 and 1 as the table reads.
Z8='\000\000\000\000\000\000\000\000'
T0='\000\000\000\001\007\020\000\200\000\000\000\036'
T1='\000\001\000\000\007\020\000\200\000\000\000\036'
K0="\\000$Z8"
K1="\\001$Z8"
A8='\010\010\000' # 8 bytes into the entry's range
hdr='\002\001\010\010\010'
seed sm_init heap_direct \
"$hdr$T0\001$K0$A8\001\020\000ABCDEFGHIJKLMNOP\036\001$K0$A8\000\020\000\036\
\001$K0\010\170\000\001\020\000ABCDEFGHIJKLMNOP\036\001$K0$A8\000\000\002\036"
seed sm_init heap_atomics \
"$hdr$T0\002$K0$A8\002\005\000\000\000\000\000\000\000$Z8\036\
\002$K0$A8\007\001\000\000\000\000\000\000\000\001\000\000\000\000\000\000\000\036\
\002$K0$A8\005\003\377\000\000\000\000\000\000\000$Z8\036\002$K0$A8\000\011\000\000\000\000\000\000\000$Z8\036"
seed sm_init ring_get_put \
"$hdr$T1\003$K1$A8\000\077\000\036\005\000\100\000abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-\036\
\003$K1$A8\001\077\000\036\011\036\003$K1$A8\001\037\000\036\007\000\036\011\036\010\036"
seed sm_init ring_atomics \
"$hdr$T1\002$K1$A8\002\005\000\000\000\000\000\000\000$Z8\036\006\000\007\000\000\000\036\
\002$K1$A8\007\001\000\000\000\000\000\000\000\002\000\000\000\000\000\000\000\036\006\010\363\377\377\377\000\000\000\000\036\
\002$K1$A8\000\001\000\000\000\000\000\000\000$Z8\036\006\040\007\000\000\000\000\000\002\000\000\000\036"
seed sm_init tails \
"$hdr$T1\003$K1$A8\001\100\000\036\004\001\000\000\036\004\003\000\036\004\001\001\000\036\004\002\005\036\001$K0$A8\000\020\000\036\012\036"
seed sm_init stale_and_moved \
"$hdr$T0\001$K0$A8\000\020\000\036\000\000\000\001\007\020\000\200\000\000\000\036\001\100\376$Z8$A8\000\020\000\036\
\000\000\000\002\007\020\000\200\000\000\000\036\001$K0$A8\003\020\000\000\002ABCDEFGHIJKLMNOP\036\000\000\002\001\007\020\000\200\000\000\000\036\001$K0$A8\000\020\000\036"
seed sm_init bad_answers \
"$hdr$T1\003$K1$A8\000\100\000\036\005\010\001\000\000\000\000\000\000\000\010\000\036\012\036\
$T1\003$K1$A8\000\100\000\036\005\004\001\000\000\000\000\000\000\000\010\000\036\012\036\
$T1\003$K1$A8\000\100\000\036\005\040\000\000\004\036\012\036\
$T1\002$K1$A8\002\005\000\000\000\000\000\000\000$Z8\036\006\100\005\000\000\000\003\036"
seed sm_init raw_tables \
"$hdr\000\000\001\002\000\000\000\007\000\000\000\000\000\020\000\000\000\000\000\100\000\000\000\000\000\000\000\001\000\000\000\377\377\377\377\377\377\377\377\000\001\000\000\000\000\000\000\036\
\001$K0\007\000\000\000\000\000\000\000\000\001\010\000\036\000\000\000\001\007\364\000\200\000\000\000\036\001$K0$A8\001\020\000ABCDEFGHIJKLMNOP\036"

# ---- amo: records of <how><api_amo_msg_t of 48 bytes>[key bytes] (fuzz_amo.c);
# how 037 patches in our module's name, the atomic buffer's key, an address
# at the record's offset into the buffer, the kind request and a valid
# operation; 077 the key of the buffer without the right.
amo_rec() { # HOW KIND AMO OP SIZE OFFSET OPERAND COMPARE (octal bytes): escapes
    z='\000'
    z7="$z$z$z$z$z$z$z"
    printf '%s' "\\$1\\$2\\$3\\$4\\$5$z$z$z$z$z$z$z$z$z$z$z$z\\001$z7\\$6$z7\\$7$z7\\$8$z7"
}
amo_seed() { # NAME RECORDS...
    name=$1
    shift
    mkdir -p "$here/amo/seed"
    : >"$here/amo/seed/$name"
    for r in "$@"; do
        # shellcheck disable=SC2059,SC2086
        printf "$(amo_rec $r)" >>"$here/amo/seed/$name"
    done
}
amo_seed fetch_add '037 001 001 000 010 010 005 000' '037 001 000 000 004 014 003 000'
amo_seed cswap '037 001 002 000 004 014 007 000' '037 001 002 000 010 020 011 000'
amo_seed every_op '037 001 001 001 010 000 377 000' '037 001 001 002 010 000 001 000' \
    '037 001 001 007 010 000 011 000' '037 001 001 011 004 004 200 000'
amo_seed refused '037 001 001 000 010 004 001 000' '037 001 001 000 010 070 001 000' \
    '077 001 001 000 010 000 001 000' '017 001 001 000 003 010 001 000' \
    '007 001 001 002 010 010 001 000'
amo_seed answers '000 002 000 000 000 000 000 000' '037 002 001 000 010 010 001 000'
