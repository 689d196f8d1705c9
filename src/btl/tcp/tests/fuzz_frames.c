/*
 * Fuzz harness: the tcp frame parser (src/btl/tcp/tcp_io.c), driven from
 * bytes through tcp_rx_feed on a module without listeners
 * (fuzz_tcp_fixture.h), and the answers it queues, written through a
 * socketpair and read back.
 *
 * Input: byte 0 picks raw (even) or structured (odd) input and how the
 * stream is cut into reads (bits 1-3). Raw: the rest is the stream as is.
 * Structured, so that the fuzzer gets past the length and type checks: the
 * rest is records of [kind][flags][a: u16][b: u16] and, for some, a bytes of
 * payload, each made into a frame with the right length:
 *   0 DATA    tag by flags (the handled one, an unhandled one, a reserved one)
 *   1 PUT     a bytes at offset b-64 of the read-write zone, through the
 *             key flags picks (read-write, read-only, wrong secret, stale)
 *   2 GET_REQ a bytes at offset b-64, key as for PUT
 *   3 PUT_ACK to request 1+flags%8, status -(b%20)
 *   4 GET_RESP to request 1+flags%8: data and status, status only, or a
 *             bytes (a wrong length), by flags
 *   5 FIN
 *   6 raw a bytes
 *   7 a header only: type flags, length a|b<<16
 *   8 deregister the read-write zone (its answers still queued must go out
 *     as zeros and an access error)
 *   9 AMO_REQ an atomic at offset b-64 (aligned to its width by flags bit
 *     6), key as for PUT, width by flags bit 4, fetch or compare-and-swap
 *     by bits 5, an operation of ferry's list by a, or (flags bit 3) any
 *     value of a
 *  10 AMO_ANSWER for no atomic in flight (the endpoint must fail, nothing
 *     more)
 *  11 PUTN    a put with notification: the first (flags >> 4) % 8 bytes of
 *             a bytes the notification, the rest put at offset b-64, key as
 *             for PUT; a request (answered by PUT_ACK) by flags bit 2, else
 *             untracked (a refusal answered by PUTN_REFUSED); the handled
 *             tag, or by flags bit 6 a reserved one
 * and flags bit 7 flips one byte of the frame.
 *
 * Checked besides no crash: memory outside the zones, and the read-only
 * zone, never written; completions have known statuses, at most one each;
 * the answers read back are framed, and when the input had no flipped,
 * raw or header-only record, each is the answer to the next request sent,
 * its data the zone's bytes (or zeros with an access error after the
 * deregistration) unless an atomic changed the zone meanwhile; each atomic's
 * answer names a request, and refuses what its key, range or width do not
 * allow, and takes what they do.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "fuzz_tcp_fixture.h"

#define STREAM_MAX (64u * 1024u)
#define REQS_MAX 1024
#define AMOS_MAX 256
#define ANS_MAX (2u * 65536u + 64u) /* two of the largest answers */

typedef struct req {
    bool get;
    bool good;     /* within a registration it may use */
    int zone;
    size_t off, len;
    uint64_t cookie;
} req_t;

/* An atomic request and what its answer must say. */
typedef struct amo {
    uint64_t cookie;
    int want; /* 1: taken (FERRY_OK), -1: refused, 0: no expectation */
} amo_t;

typedef struct run {
    fx_t fx;
    bool zone_changed; /* an atomic may have written the read-write zone */
    size_t namo;
    amo_t amos[AMOS_MAX];
    int sp[2];     /* [0] is the endpoint's socket, [1] the peer's */
    size_t len;
    size_t nreq;
    bool exact;    /* every frame built as meant: answers can be checked */
    bool dereg;
    size_t dereg_at; /* requests sent before the deregistration */
    tcp_key_t keys[2]; /* of the zones, kept past a deregistration */
    /* reading the answers back */
    size_t ans_len;
    size_t answered;
    /* Not cleared between inputs (each is written before it is read): */
    req_t reqs[REQS_MAX];
    unsigned char stream[STREAM_MAX];
    unsigned char ans[ANS_MAX];
} run_t;

static int epfd = -1;
static run_t run;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    epfd = epoll_create1(EPOLL_CLOEXEC);
    return 0;
}

static uint16_t u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static void put_bytes(run_t *r, const void *p, size_t n)
{
    if (n > STREAM_MAX - r->len)
        n = STREAM_MAX - r->len;
    memcpy(r->stream + r->len, p, n);
    r->len += n;
}

static tcp_key_t key_for(run_t *r, unsigned pick)
{
    tcp_key_t k = r->keys[(pick & 3) == 1 ? 1 : 0];
    if ((pick & 3) == 2)
        k.secret[pick % TCP_KEY_SECRET] ^= 0x40;
    else if ((pick & 3) == 3)
        k.gen += 2;
    return k;
}

/* Turns the structured input into a stream; deregistration records act
 * at their place, so the stream is fed in parts. */
static void feed(run_t *r, const uint8_t *cut, size_t ncut, bool drain);

static void build(run_t *r, const uint8_t *data, size_t size, const uint8_t *cut, size_t ncut)
{
    size_t off = 0;
    uint64_t cookie = 1000;
    while (off + 6 <= size && r->len < STREAM_MAX) {
        const uint8_t *rec = data + off;
        unsigned kind = rec[0] % 12, flags = rec[1];
        uint16_t a = u16(rec + 2), b = u16(rec + 4);
        off += 6;
        size_t plen = 0;
        if (kind == 0 || kind == 1 || kind == 6 || kind == 11 ||
            (kind == 4 && ((flags >> 3) & 3) == 2))
            plen = a < size - off ? a : size - off;
        const uint8_t *payload = data + off;
        off += plen;
        size_t start = r->len;
        tcp_hdr_t h = {0};
        tcp_rdma_body_t body = {0};
        tcp_status_body_t sb = {0};
        switch (kind) {
        case 0: {
            static const uint8_t tags[4] = {FX_TAG, 8, 250, FX_TAG};
            h = (tcp_hdr_t){.len = (uint32_t)plen, .type = TCP_T_DATA, .tag = tags[flags & 3]};
            put_bytes(r, &h, sizeof(h));
            put_bytes(r, payload, plen);
            break;
        }
        case 1:
        case 2: {
            bool get = kind == 2;
            size_t roff = (size_t)b;
            int z = (flags & 3) == 1 ? 1 : 0; /* where the key points */
            body.raddr = (uint64_t)(uintptr_t)fx_zone(&r->fx, z) + roff - 64;
            body.length = get ? a : 0;
            body.key = key_for(r, flags);
            h = (tcp_hdr_t){.len = (uint32_t)(sizeof(body) + (get ? 0 : plen)),
                            .type = get ? TCP_T_GET_REQ : TCP_T_PUT,
                            .cookie = ++cookie};
            put_bytes(r, &h, sizeof(h));
            put_bytes(r, &body, sizeof(body));
            if (!get)
                put_bytes(r, payload, plen);
            size_t len = get ? a : plen;
            bool in = roff >= 64 && roff - 64 <= FX_ZONE && len <= FX_ZONE - (roff - 64) &&
                      (flags & 3) != 2 && (flags & 3) != 3 && (get || z == 0) &&
                      !(z == 0 && r->dereg);
            if (r->nreq < REQS_MAX)
                r->reqs[r->nreq++] = (req_t){.get = get,
                                             .good = in,
                                             .zone = z,
                                             .off = roff - 64,
                                             .len = len,
                                             .cookie = cookie};
            break;
        }
        case 11: {
            size_t roff = (size_t)b;
            int z = (flags & 3) == 1 ? 1 : 0;
            size_t nlen = ((size_t)flags >> 4) % 8;
            if (nlen > plen)
                nlen = plen;
            tcp_putn_body_t pb = {.raddr = (uint64_t)(uintptr_t)fx_zone(&r->fx, z) + roff - 64,
                                  .key = key_for(r, flags),
                                  .plen = (uint32_t)nlen};
            bool tracked = flags & 4;
            h = (tcp_hdr_t){.len = (uint32_t)(sizeof(pb) + plen),
                            .type = TCP_T_PUTN,
                            .tag = (flags & 0x40) ? 250 : FX_TAG,
                            .cookie = tracked ? ++cookie : 0};
            put_bytes(r, &h, sizeof(h));
            put_bytes(r, &pb, sizeof(pb));
            put_bytes(r, payload, plen);
            size_t len = plen - nlen;
            bool in = roff >= 64 && roff - 64 <= FX_ZONE && len <= FX_ZONE - (roff - 64) &&
                      (flags & 3) != 2 && (flags & 3) != 3 && z == 0 && !r->dereg;
            if (tracked && !(flags & 0x40) && r->nreq < REQS_MAX)
                r->reqs[r->nreq++] = (req_t){
                    .get = false, .good = in, .zone = z, .off = roff - 64, .len = len,
                    .cookie = cookie};
            else if (flags & 0x40)
                r->exact = false; /* the endpoint fails: no more answers */
            break;
        }
        case 3:
            h = (tcp_hdr_t){.len = sizeof(sb), .type = TCP_T_PUT_ACK, .cookie = 1 + (flags & 7)};
            sb.status = -(int32_t)(b % 20);
            put_bytes(r, &h, sizeof(h));
            put_bytes(r, &sb, sizeof(sb));
            break;
        case 4: {
            unsigned how = (flags >> 3) & 3;
            h = (tcp_hdr_t){.type = TCP_T_GET_RESP, .cookie = 1 + (flags & 7)};
            sb.status = -(int32_t)(b % 20);
            if (how == 0) {
                h.len = FX_GET_LEN + sizeof(sb);
                put_bytes(r, &h, sizeof(h));
                for (size_t i = 0; i < FX_GET_LEN; i++)
                    put_bytes(r, &b, 1);
            } else if (how == 2) {
                h.len = (uint32_t)(plen + sizeof(sb));
                put_bytes(r, &h, sizeof(h));
                put_bytes(r, payload, plen);
            } else {
                h.len = sizeof(sb);
                put_bytes(r, &h, sizeof(h));
            }
            put_bytes(r, &sb, sizeof(sb));
            break;
        }
        case 5:
            h = (tcp_hdr_t){.type = TCP_T_FIN};
            put_bytes(r, &h, sizeof(h));
            break;
        case 6:
            put_bytes(r, payload, plen);
            r->exact = false;
            break;
        case 7:
            h = (tcp_hdr_t){.len = (uint32_t)a | (uint32_t)b << 16, .type = (uint8_t)flags,
                            .tag = (uint8_t)(b >> 8), .cookie = b};
            put_bytes(r, &h, sizeof(h));
            r->exact = false;
            break;
        case 9: {
            static const uint16_t ops[] = {
                FERRY_BTL_ATOMIC_ADD,  FERRY_BTL_ATOMIC_AND, FERRY_BTL_ATOMIC_OR,
                FERRY_BTL_ATOMIC_XOR,  FERRY_BTL_ATOMIC_LAND, FERRY_BTL_ATOMIC_LOR,
                FERRY_BTL_ATOMIC_LXOR, FERRY_BTL_ATOMIC_SWAP, FERRY_BTL_ATOMIC_MIN,
                FERRY_BTL_ATOMIC_MAX};
            bool narrow = flags & 0x10, cswap = (flags & 0x20) && (a & 1);
            size_t width = narrow ? 4 : 8;
            size_t roff = (size_t)b;
            if (flags & 0x40)
                roff -= roff % width;
            int z = (flags & 3) == 1 ? 1 : 0;
            bool any_op = flags & 0x08;
            btl_amo_msg_t m = {
                .magic = BTL_AMO_MAGIC,
                .kind = BTL_AMO_REQ,
                .op = cswap ? 0 : any_op ? a : ops[a % (sizeof(ops) / sizeof(ops[0]))],
                .flags = (narrow ? FERRY_BTL_ATOMIC_FLAG_32BIT : 0) |
                         (cswap ? BTL_AMO_CSWAP : (flags & 0x20) ? BTL_AMO_FETCH : 0),
                .cookie = ++cookie,
                .raddr = (uint64_t)(uintptr_t)fx_zone(&r->fx, z) + roff - 64,
                .operand = (uint64_t)a * 0x100010001ull,
                .compare = b};
            tcp_key_t k = key_for(r, flags);
            memcpy(m.key, &k, sizeof(k));
            h = (tcp_hdr_t){.len = sizeof(m), .type = TCP_T_AMO_REQ};
            put_bytes(r, &h, sizeof(h));
            put_bytes(r, &m, sizeof(m));
            bool in = roff >= 64 && roff - 64 <= FX_ZONE - width;
            bool aligned = ((uintptr_t)m.raddr % width) == 0;
            int want = 0;
            if (!in || (flags & 3) != 0 || r->dereg)
                want = -1; /* outside, read-only, wrong secret, stale or gone: refused */
            else if (aligned && !any_op)
                want = 1;
            if (want >= 0)
                r->zone_changed = true;
            if (r->namo < AMOS_MAX)
                r->amos[r->namo++] = (amo_t){.cookie = cookie, .want = want};
            break;
        }
        case 10: {
            btl_amo_msg_t m = {.magic = BTL_AMO_MAGIC, .kind = BTL_AMO_ANSWER,
                               .cookie = (uint64_t)a << 16 | b};
            h = (tcp_hdr_t){.len = sizeof(m), .type = TCP_T_AMO_ANSWER};
            put_bytes(r, &h, sizeof(h));
            put_bytes(r, &m, sizeof(m));
            break;
        }
        default:
            /* What was built so far arrives first, and its answers stay
             * queued: the deregistration comes while they wait. */
            feed(r, cut, ncut, false);
            if (!r->dereg) {
                FX_ABORT_UNLESS(tcp_deregister_mem(&r->fx.mod->super, r->fx.rw) == FERRY_OK);
                r->dereg = true;
                r->dereg_at = r->nreq;
                /* An atomic not parsed yet meets the deregistration: it may
                 * go either way. */
                for (size_t i = 0; i < r->namo; i++)
                    if (r->amos[i].want > 0)
                        r->amos[i].want = 0;
            }
            break;
        }
        if ((flags & 0x80) && r->len > start) {
            r->stream[start + (size_t)b % (r->len - start)] ^= (uint8_t)(a | 1);
            r->exact = false;
        }
    }
}

/* Reads back what the endpoint wrote, and checks it. */
static void read_answers(run_t *r)
{
    for (;;) {
        if (r->ans_len == sizeof(r->ans))
            r->ans_len = 0; /* more than ever checked: keep reading */
        ssize_t n = recv(r->sp[1], r->ans + r->ans_len, sizeof(r->ans) - r->ans_len,
                         MSG_DONTWAIT);
        if (n <= 0)
            break;
        r->ans_len += (size_t)n;
    }
    size_t at = 0;
    while (r->ans_len - at >= sizeof(tcp_hdr_t)) {
        tcp_hdr_t h;
        memcpy(&h, r->ans + at, sizeof(h));
        FX_ABORT_UNLESS(h.zero == 0 && h.tag == 0);
        if (h.type == TCP_T_AMO_ANSWER) {
            /* Answers to atomics name their request themselves. */
            FX_ABORT_UNLESS(h.len == sizeof(btl_amo_msg_t) && h.cookie == 0);
            if (r->ans_len - at < sizeof(h) + h.len)
                break;
            btl_amo_msg_t m;
            memcpy(&m, r->ans + at + sizeof(h), sizeof(m));
            FX_ABORT_UNLESS(m.magic == BTL_AMO_MAGIC && m.kind == BTL_AMO_ANSWER);
            FX_ABORT_UNLESS(m.status <= 0 && m.status > FERRY_ERR_LAST);
            for (size_t i = 0; r->exact && i < r->namo; i++) {
                if (r->amos[i].cookie != m.cookie)
                    continue;
                if (r->amos[i].want > 0)
                    FX_ABORT_UNLESS(m.status == FERRY_OK);
                if (r->amos[i].want < 0)
                    FX_ABORT_UNLESS(m.status != FERRY_OK);
            }
            at += sizeof(h) + h.len;
            continue;
        }
        if (h.type == TCP_T_PUTN_REFUSED) {
            /* Untracked puts with notification were refused. */
            FX_ABORT_UNLESS(h.len == 0 && h.cookie == 0);
            at += sizeof(h);
            continue;
        }
        FX_ABORT_UNLESS(h.type == TCP_T_PUT_ACK || h.type == TCP_T_GET_RESP);
        FX_ABORT_UNLESS(h.len >= sizeof(tcp_status_body_t) && h.len <= 65535 + 8);
        if (r->ans_len - at < sizeof(h) + h.len)
            break;
        const unsigned char *body = r->ans + at + sizeof(h);
        tcp_status_body_t sb;
        memcpy(&sb, body + h.len - sizeof(sb), sizeof(sb));
        FX_ABORT_UNLESS(sb.zero == 0 && sb.status <= 0 && sb.status > FERRY_ERR_LAST);
        if (r->exact && r->answered < r->nreq) {
            const req_t *q = &r->reqs[r->answered];
            FX_ABORT_UNLESS(h.cookie == q->cookie && (h.type == TCP_T_GET_RESP) == q->get);
            bool revoked = r->dereg && q->zone == 0 && r->answered < r->dereg_at;
            if (q->good && !revoked)
                FX_ABORT_UNLESS(sb.status == FERRY_OK);
            if (!q->good)
                FX_ABORT_UNLESS(sb.status == FERRY_ERR_ACCESS);
            size_t dlen = h.len - sizeof(sb);
            if (q->get && sb.status == FERRY_OK) {
                FX_ABORT_UNLESS(dlen == q->len);
                FX_ABORT_UNLESS(r->zone_changed ||
                                memcmp(body, fx_zone(&r->fx, q->zone) + q->off, dlen) == 0);
            } else if (q->get && dlen > 0) {
                /* Deregistered under its answer: what did not go out before
                 * went as zeros. */
                FX_ABORT_UNLESS(revoked && dlen == q->len);
                const unsigned char *z = fx_zone(&r->fx, q->zone) + q->off;
                for (size_t i = 0; i < dlen; i++)
                    FX_ABORT_UNLESS(body[i] == z[i] || body[i] == 0);
                FX_ABORT_UNLESS(body[dlen - 1] == 0 || dlen == 0);
            }
        }
        r->answered++;
        at += sizeof(h) + h.len;
    }
    memmove(r->ans, r->ans + at, r->ans_len - at);
    r->ans_len -= at;
}

/* Feeds the stream built so far; with drain, the peer reads every answer
 * as it comes (else they stay queued). */
static void feed(run_t *r, const uint8_t *cut, size_t ncut, bool drain)
{
    static const size_t sizes[8] = {1, 7, 16, 40, 56, 1000, 4099, STREAM_MAX};
    size_t off = 0, k = 0;
    tcp_module_t *mod = r->fx.mod;
    ferry_btl_endpoint_t *ep = r->fx.ep;
    int idle = 0;
    while (off < r->len && ep->state == TCP_EP_CONNECTED && idle < 4) {
        size_t chunk = ncut > 0 ? sizes[cut[k++ % ncut] & 7] : STREAM_MAX;
        if (chunk > r->len - off)
            chunk = r->len - off;
        size_t took = tcp_rx_feed(mod, ep, r->stream + off, chunk);
        off += took;
        if (!drain) {
            if (took == 0)
                break; /* paused: the rest waits for the answers */
            continue;
        }
        /* The peer reads every answer before it sends more (so an answer's
         * data is what the zone holds when it is read back), and a peer
         * paused for what it is owed is read again. */
        for (int i = 0; i < 64 && ep->state == TCP_EP_CONNECTED && !util_list_empty(&ep->queue);
             i++) {
            tcp_push(mod, ep);
            read_answers(r);
        }
        tcp_resume(mod);
        idle = took == 0 ? idle + 1 : 0;
    }
    for (int i = 0; drain && i < 64 && ep->state == TCP_EP_CONNECTED &&
                    !util_list_empty(&ep->queue);
         i++) {
        tcp_push(mod, ep);
        read_answers(r);
    }
    /* The next part of the stream starts after this one. */
    memmove(r->stream, r->stream + off, r->len - off);
    r->len -= off;
    fx_check_memory(&r->fx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    run_t *r = &run;
    memset(r, 0, offsetof(run_t, reqs));
    fx_init(&r->fx, epfd);
    fx_connect(&r->fx);
    FX_ABORT_UNLESS(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, r->sp) == 0);
    r->fx.ep->poll.fd = r->sp[0];
    memcpy(&r->keys[0], r->fx.rw->key, sizeof(r->keys[0]));
    memcpy(&r->keys[1], r->fx.ro->key, sizeof(r->keys[1]));
    /* How the stream is cut into reads: the last 8 bytes' low bits. */
    const uint8_t *cut = size > 9 ? data + size - 8 : NULL;
    size_t ncut = (data[0] >> 1) & 7 ? (cut != NULL ? 8 : 0) : 0;
    r->exact = true;
    if (data[0] & 1) {
        build(r, data + 1, size - 1, cut, ncut);
    } else {
        put_bytes(r, data + 1, size - 1);
        r->exact = false;
    }
    feed(r, cut, ncut, true);
    /* The fixture deregisters both zones at the end: the one deregistered
     * here is registered again for it. */
    if (r->dereg)
        FX_ABORT_UNLESS(tcp_register_mem(&r->fx.mod->super, NULL, fx_zone(&r->fx, 0), FX_ZONE,
                                         FERRY_ACCESS_REMOTE_READ, &r->fx.rw) == FERRY_OK);
    fx_fini(&r->fx);
    close(r->sp[1]);
    return 0;
}
