/*
 * A peer's bytes are untrusted: rank 1 writes malformed headers straight
 * into its ring in rank 0's segment (a length past the ring's end, an
 * unknown type, a reserved tag, a put with notification whose lengths do
 * not add up, a request to help with a cross-memory copy that is too short,
 * has no job or has too many pieces, a corrupt credit word). Rank 0 must
 * report rank 1 as failed, naming it and saying why (so that the garbage,
 * not rank 1's exit right after it, is what it caught), drop what it sent,
 * survive, and go on exchanging messages with rank 2.
 *
 * usage (under ferryrun -n 3 --keep-going): sm_garbage CASE
 *   CASE: length | type | tag | putn | putn_flags | putn_status |
 *         assist_length | assist_job | assist_chunks
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "unit/check.h"
#include "btl/sm/sm.h"

#define TAG 40

typedef struct state {
    int got[3];
    int failed_peer;
    int failures;
    char msg[256];
} state_t;

static void on_msg(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                   void *arg)
{
    state_t *st = arg;
    CHECK(src >= 0 && src < 3);
    st->got[src]++;
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    state_t *st = arg;
    st->failures++;
    st->failed_peer = peer;
    snprintf(st->msg, sizeof(st->msg), "%s", msg);
    printf("rank %d: peer %d failed: %s\n", ferry_rank(ctx), peer, msg);
}

/* What rank 0 must give as the reason of the failure, for each case. */
static const char *expected_reason(const char *what)
{
    static const struct {
        const char *what, *reason;
    } reasons[] = {
        {"length", "longer than the ring"},
        {"type", "unknown type"},
        {"tag", "reserved tag"},
        {"putn", "lengths do not add up"},
        {"putn_flags", "unknown flags or a status"},
        {"putn_status", "unknown flags or a status"},
        {"putn_tag", "truncated put with notification, or one on a reserved tag"},
        {"putn_short", "truncated put with notification, or one on a reserved tag"},
        {"assist_length", "malformed copy request"},
        {"assist_job", "malformed copy request"},
        {"assist_chunks", "malformed copy request"},
    };
    for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
        if (strcmp(what, reasons[i].what) == 0)
            return reasons[i].reason;
    fprintf(stderr, "sm_garbage: no case %s\n", what);
    exit(2);
}

/* A request to help with a get that would be well formed but for what the
 * case breaks: it is written whole, whatever length its header gives. Its
 * key was never issued, so a receiver that took it would only ignore it
 * (and then report rank 1's exit, not the request). */
static uint32_t assist_garbage(const char *what, unsigned char *slot)
{
    sm_assist_req_t r = {.raddr = 1u << 20,
                         .laddr = 1u << 20,
                         .len = 16 * SM_ASSIST_CHUNK,
                         .job = 1,
                         .chunk = SM_ASSIST_CHUNK,
                         .put = 0,
                         .reserved = 0};
    uint32_t len = sizeof(r);
    if (strcmp(what, "assist_length") == 0)
        len = sizeof(r) - 8; /* put and reserved cut off, zero all the same */
    else if (strcmp(what, "assist_job") == 0)
        r.job = 0;
    else {
        /* One-byte pieces, one more of them than a request may have. */
        r.chunk = 1;
        r.len = (uint64_t)SM_ASSIST_CHUNKS_MAX + 1;
    }
    memcpy(slot, &r, sizeof(r));
    return len;
}

static void send_retry(ferry_ctx_t *ctx, int dst, const void *data, size_t len)
{
    int rc;
    while ((rc = ferry_am_send(ctx, dst, TAG, data, len)) == FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    CHECK(rc == FERRY_OK);
}

/* Publishes a header the receiver must refuse at rank 1's next ring slot. */
static void write_garbage(ferry_ctx_t *ctx, const char *what)
{
    ferry_btl_module_t *btl = btl_ctx_find_module(ctx, "sm");
    CHECK(btl != NULL);
    ferry_btl_endpoint_t *ep = ctx->peers[0].ep;
    CHECK(ep != NULL && ep->state == SM_EP_CONNECTED);
    uint64_t ring = ep->mod->p.ring_size;
    uint64_t off = ep->head & (ring - 1);
    uint64_t h;
    if (strcmp(what, "length") == 0)
        h = sm_hdr_pack(0x7fffffff, TAG, SM_T_DATA, sm_lap(ep->head, ring));
    else if (strcmp(what, "type") == 0)
        h = sm_hdr_pack(8, TAG, 0x77, sm_lap(ep->head, ring));
    else if (strcmp(what, "putn") == 0) {
        /* A notification longer than the message: nothing may be read
         * past it, and no handler runs. */
        sm_putn_hdr_t p = {.raddr = 0, .plen = 60000, .flags = SM_PUTN_TELL};
        memcpy(ep->out->ring + off + SM_HDR_SIZE, &p, sizeof(p));
        memset(ep->out->ring + off + SM_HDR_SIZE + sizeof(p), 0, 8);
        h = sm_hdr_pack(sizeof(p) + 8, TAG, SM_T_PUTN, sm_lap(ep->head, ring));
    } else if (strcmp(what, "putn_flags") == 0 || strcmp(what, "putn_status") == 0) {
        /* Well formed but for a flag nobody defined, or a status its
         * sender must leave at 0. */
        bool flag = strcmp(what, "putn_flags") == 0;
        sm_putn_hdr_t p = {.raddr = 0, .plen = 0, .flags = flag ? 0x8000 : 0,
                           .status = flag ? 0 : FERRY_ERR_ACCESS};
        memcpy(ep->out->ring + off + SM_HDR_SIZE, &p, sizeof(p));
        memset(ep->out->ring + off + SM_HDR_SIZE + sizeof(p), 0, 8);
        h = sm_hdr_pack(sizeof(p) + 8, TAG, SM_T_PUTN, sm_lap(ep->head, ring));
    } else if (strcmp(what, "putn_tag") == 0 || strcmp(what, "putn_short") == 0) {
        /* Taken in the poll loop beside ordinary messages: a reserved tag,
         * or a message shorter than its own header, is refused before any
         * byte of it is used. */
        bool tag = strcmp(what, "putn_tag") == 0;
        sm_putn_hdr_t p = {.raddr = 0, .plen = 0, .flags = SM_PUTN_TELL};
        memcpy(ep->out->ring + off + SM_HDR_SIZE, &p, sizeof(p));
        h = sm_hdr_pack(tag ? sizeof(p) : sizeof(p) - 1, tag ? FERRY_BTL_TAG_BTL_MIN : TAG,
                        SM_T_PUTN, sm_lap(ep->head, ring));
    } else if (strncmp(what, "assist_", 7) == 0) {
        uint32_t len = assist_garbage(what, ep->out->ring + off + SM_HDR_SIZE);
        h = sm_hdr_pack(len, 0, SM_T_ASSIST, sm_lap(ep->head, ring));
    } else
        h = sm_hdr_pack(8, 250, SM_T_DATA, sm_lap(ep->head, ring));
    atomic_store_explicit((_Atomic uint64_t *)(void *)(ep->out->ring + off), h,
                          memory_order_release);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    (void)expected_reason(argv[1]);
    ferry_ctx_t *ctx;
    state_t st = {.failed_peer = -1};
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    int me = ferry_rank(ctx);
    CHECK(ferry_size(ctx) == 3);
    if (btl_ctx_find_module(ctx, "sm") == NULL) {
        if (me == 0)
            printf("SKIPPED: the sm transport is not available\n");
        return 77;
    }
    CHECK(ferry_set_error_cb(ctx, on_error, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG, on_msg, &st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    char buf[64] = "hello";
    /* Ranks 0 and 2 say when they have left the barrier (ranks leave it at
     * different times, and rank 0 tells rank 2 of rank 1's failure at
     * once), so the garbage cannot break the barrier itself. */
    if (me == 0 || me == 2)
        send_retry(ctx, 1, buf, 8);
    if (me == 1) {
        while (st.got[0] == 0 || st.got[2] == 0)
            CHECK(ferry_progress(ctx) >= 0);
        /* One good message connects the channel; then the garbage. */
        send_retry(ctx, 0, buf, 8);
        write_garbage(ctx, argv[1]);
        /* Rank 0 will stop listening to us; we leave without finalize. */
        printf("rank 1: garbage written\n");
        return 0;
    }
    if (me == 0) {
        while (st.failures == 0)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(st.failed_peer == 1);
        CHECK(st.got[1] == 1); /* the good message, and nothing after it */
        CHECK(strstr(st.msg, "rank 1") != NULL);
        CHECK(strstr(st.msg, expected_reason(argv[1])) != NULL);
        CHECK(ferry_am_send(ctx, 1, TAG, buf, 8) == FERRY_ERR_UNREACH);
    }
    /* Ranks 0 and 2 carry on with each other. */
    int other = me == 0 ? 2 : 0;
    for (int i = 0; i < 1000; i++)
        send_retry(ctx, other, buf, (size_t)(i % 64));
    while (st.got[other] < 1000)
        CHECK(ferry_progress(ctx) >= 0);
    printf("rank %d: 1000 messages from rank %d after the garbage\n", me, other);
    ferry_finalize(&ctx);
    return 0;
}
