#!/bin/sh
# Writes the seed corpora of the tcp fuzz harnesses (fuzz/hello/seed,
# fuzz/frames/seed and fuzz/pair/seed, beside this script): a few good
# sessions and a few broken ones in the input formats fuzz_hello.c,
# fuzz_frames.c and fuzz_pair.c describe. The seeds are committed; run this
# again after changing a format.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
fuzz=$here/fuzz
seed() { # seed HARNESS NAME PRINTF-FORMAT...
    dir=$fuzz/$1/seed name=$2
    shift 2
    mkdir -p "$dir"
    # shellcheck disable=SC2059
    printf "$@" >"$dir/$name"
}
n32='\001\002\003\004\005\006\007\010\011\012\013\014\015\016\017\020\021\022\023\024\025\026\027\030\031\032\033\034\035\036\037\040'
m32='\377\376\375\374\373\372\371\370\367\366\365\364\363\362\361\360\357\356\355\354\353\352\351\350\347\346\345\344\343\342\341\340'
ok='\013\000' # spoil nothing, right MAC (make_msg: spoil byte, how byte)

# ---- hello. Mode 0: a message checked against an expectation (byte 1
# the step, byte 2 bit 0: any sender). The magic is "ferrytc1" read as a
# little-endian number.
magic='\157\162\162\171\164\143\160\061'
hdr() { # STEP STATUS: magic, version 2, step, status, zero, from 1, to 0, size 2, zero2
    # (escapes as text, for seed's printf to turn into bytes)
    printf '%s\\002\\000\\000\\000\\%03o\\%03o\\000\\000' "$magic" "$1" "$2"
    printf '\\001\\000\\000\\000\\000\\000\\000\\000\\002\\000\\000\\000\\000\\000\\000\\000'
}
job='\216\122\022\061\200\210\044\317' # tcp_job_hash("fuzz-job"), the fixture's job
seed hello check_open "\000\001\001$(hdr 1 0)$job$n32"
seed hello check_verdict "\000\004\000$(hdr 4 1)$job"
seed hello check_otherjob "\000\001\001$(hdr 1 0)\000\000\000\000\000\000\000\000$n32"
seed hello check_garbage '\000\002\001garbage, not a hello at all, garbage, not a hello at all....'
# Mode 1: a session and a message whose MAC is computed; bytes 2-3 from the
# end pick what changes.
seed hello mac_prove "\001\001\000\000\000\000\000\000\000$n32$m32\000\240\017\177\000\000\001fuzz-job\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\002\000\000\000\000\000\003\007"
seed hello mac_verdict "\001\000\000\000\000\001\000\000\000$n32$m32\001\240\017\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\001other-job\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\004\000\000\000\002\002\011\001"
# Mode 2, the listener: the endpoint's state, an OPEN, an ANSWER.
seed hello listen_kept "\002\000$ok$n32$ok"
seed hello listen_dup "\002\001$ok$n32$ok"
seed hello listen_refused "\002\006$ok$n32$ok"
seed hello listen_nomac "\002\000$ok$n32\013\020$m32"
seed hello listen_wrongjob "\002\000\007\000$n32$ok"
seed hello listen_otherrank "\002\003\005\002$n32$ok"
# Mode 3, the connector: its nonce, a PROVE, a VERDICT.
seed hello connect_ok "\003$n32$ok$m32$ok"
seed hello connect_dup "\003$n32$ok$m32\013\001"
seed hello connect_refused "\003$n32$ok$m32\013\002"
seed hello connect_badprove "\003$n32\013\020$m32$n32$ok"
seed hello connect_badverdict "\003$n32$ok$m32\013\020$n32"

# ---- frames. Byte 0: bit 0 structured, bits 1-3 how reads are cut.
# Records: kind, flags, a (2 bytes), b (2 bytes), then a payload of a bytes
# for DATA, PUT, raw and a wrongly long GET_RESP.
seed frames data "\001\000\000\005\000\000\000hello\000\000\000\000\000\000"
seed frames data_cut "\003\000\000\005\000\000\000hello\000\000\000\000\000\000\001\002\003\004\005\006\007\000"
seed frames put_get "\001\001\000\020\000\100\000ABCDEFGHIJKLMNOP\002\000\020\000\100\000"
seed frames put_ro "\001\001\001\010\000\100\000ABCDEFGH\002\001\010\000\100\000"
seed frames bad_keys "\001\002\002\010\000\100\000\002\003\010\000\100\000\001\003\004\000\100\000WXYZ"
seed frames edges "\001\002\000\001\000\077\000\002\000\001\000\100\020\002\000\000\000\100\020\001\000\001\000\077\020Z"
seed frames answers "\001\003\000\000\000\000\000\004\001\000\000\000\000\003\002\000\000\000\000\004\013\000\000\023\000"
seed frames answer_wrong "\004\004\021\007\000\000\000abcdefg\003\000\000\000\007\000"
seed frames flood "\005\002\000\000\020\100\000\002\000\000\020\100\000\002\000\000\020\100\000\002\000\000\020\100\000\002\000\000\020\100\000\002\000\000\020\100\000\002\000\000\020\100\000\002\000\020\000\100\000\002\000\020\000\100\000\002\000\020\000\100\000\002\000\020\000\100\000\001\000\004\000\100\000PPPP\001\003\005\007\011\013\015\017"
seed frames dereg "\001\002\000\240\017\100\000\002\000\001\000\100\000\010\000\000\000\000\000\002\000\001\000\100\000\001\000\001\000\100\000Q"
seed frames fin "\001\000\000\002\000\000\000hi\005\000\000\000\000\000\000\000\002\000\000\000yo"
seed frames header_only "\001\007\004\050\000\000\000\007\377\377\377\377\377"
seed frames flipped "\001\001\200\010\000\003\000ABCDEFGH\000\200\004\000\002\000wxyz"
seed frames raw_data "\000\005\000\000\000\001\007\000\000\000\000\000\000\000\000\000\000hello"

# ---- pair. Byte 0: bit 0 one host, bit 1 structured. A structured record
# is side | count << 1, then count entries of 20 bytes; a raw one is the
# side, a length of 2 bytes and a modex value.
v4() { # A B C D PREFIX: an IPv4 entry at port 4000
    printf '\\004\\%03o\\240\\017\\%03o\\%03o\\%03o\\%03o' "$5" "$1" "$2" "$3" "$4"
    printf '\\000%.0s' 1 2 3 4 5 6 7 8 9 10 11 12
}
v6lo() { # ::1/128 at port 4000
    printf '\\006\\200\\240\\017'
    printf '\\000%.0s' 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15
    printf '\\001'
}
a78=$(v4 10 78 0 1 24) a79=$(v4 10 79 0 1 24) b78=$(v4 10 78 0 2 24) b79=$(v4 10 79 0 2 24)
lo4=$(v4 127 0 0 1 8)
seed pair opposite "\002\002$a78\002$a78\002$a79\002$a79\003$b79\003$b79\003$b78\003$b78"
seed pair links_differ "\002\002$a78\002$a78\002$a79\002$a79\003$b79\003$b78"
seed pair one_host "\003\002$lo4\002$(v6lo)\002$a78\003$(v6lo)\003$lo4\003$b78"
seed pair two_hosts "\002\002$lo4\002$a78\003$lo4\003$b78"
seed pair prefixes "\002\002$(v4 10 1 2 5 24)\002$(v4 10 1 3 5 24)\003$(v4 10 1 9 9 16)"
seed pair two_addresses "\002\002$a78\002$a79\005$b79$b78\001"
seed pair undialable "\002\002$a78\002$a78\003\004\030\000\000\012\116\000\002\000\000\000\000\000\000\000\000\000\000\000\000\003\004\041\240\017\012\116\000\002\000\000\000\000\000\000\000\000\000\000\000\000"
blob='\157\162\162\171\002\000\001\000' # magic, version 2, one address
seed pair raw "\000\000\034\000$blob$a78\001\034\000$blob$b78\001\004\000garb"
seed pair raw_badcount "\000\000\034\000\157\162\162\171\002\000\002\000$a78\001\034\000$blob$b78"
