/*
 * The tagged layer's matching, table-driven. Every case runs on a ring
 * (each rank sends to the next and receives from the previous) twice: with
 * the receives posted before the messages leave, and with the messages
 * waiting in the unexpected queue first. Each message's bytes name it, so
 * every receive checks which message it got, its status (source, tag,
 * context, length, bytes received, error) and that nothing past its space
 * was written. Sizes "BIG" go by rendezvous (twice the path's eager size).
 * Then: many senders to one any-source receiver (per-sender order), cancel
 * racing the match, non-contiguous layouts at both ends, and the API's
 * refusals.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>
#include <ferry/msg.h>

#include "../unit/check.h"

#define BIG ((size_t)-1) /* resolved to a rendezvous size */
#define MAXOPS 6
#define MARK_CTX 0xfffffff0u
#define GUARD 64

enum { OP_RECV = 1, OP_PROBE, OP_CANCEL };

typedef struct smsg {
    uint32_t ctx;
    uint64_t tag;
    size_t len;
} smsg_t;

typedef struct rop {
    int op;
    uint32_t ctx;
    uint64_t tag;
    uint64_t mask;
    size_t cap;
    int want;     /* index of the message expected; -1 for none (canceled) */
    int want_err; /* FERRY_OK, FERRY_ERR_TRUNCATE, FERRY_ERR_CANCELED */
    bool any_src;
} rop_t;

typedef struct mcase {
    const char *name;
    smsg_t sends[MAXOPS];
    rop_t ops[MAXOPS];
} mcase_t;

#define EXACT FERRY_MSG_TAG_EXACT
#define ANYT FERRY_MSG_ANY_TAG

static const mcase_t cases[] = {
    {"exact", {{0, 5, 10}}, {{OP_RECV, 0, 5, EXACT, 10, 0, FERRY_OK, false}}},
    {"any tag, in order",
     {{0, 1, 10}, {0, 2, 20}},
     {{OP_RECV, 0, 0, ANYT, 64, 0, FERRY_OK, false},
      {OP_RECV, 0, 0, ANYT, 64, 1, FERRY_OK, false}}},
    {"any source", {{0, 3, 8}}, {{OP_RECV, 0, 3, EXACT, 8, 0, FERRY_OK, true}}},
    {"tag masks",
     {{0, 0x12, 4}, {0, 0x22, 5}, {0, 0x13, 6}},
     {{OP_RECV, 0, 0x03, 0x0f, 64, 2, FERRY_OK, false},
      {OP_RECV, 0, 0x02, 0x0f, 64, 0, FERRY_OK, false},
      {OP_RECV, 0, 0, ANYT, 64, 1, FERRY_OK, false}}},
    {"no overtaking, mixed protocols",
     {{0, 7, 10}, {0, 7, BIG}, {0, 7, 0}, {0, 7, BIG}, {0, 7, 3}},
     {{OP_RECV, 0, 7, EXACT, BIG, 0, FERRY_OK, false},
      {OP_RECV, 0, 7, EXACT, BIG, 1, FERRY_OK, false},
      {OP_RECV, 0, 7, EXACT, BIG, 2, FERRY_OK, false},
      {OP_RECV, 0, 7, EXACT, BIG, 3, FERRY_OK, false},
      {OP_RECV, 0, 7, EXACT, BIG, 4, FERRY_OK, false}}},
    {"different tags may be taken in any order",
     {{0, 1, 10}, {0, 2, BIG}},
     {{OP_RECV, 0, 2, EXACT, BIG, 1, FERRY_OK, false},
      {OP_RECV, 0, 1, EXACT, 10, 0, FERRY_OK, false}}},
    {"contexts keep traffic apart",
     {{1, 5, 10}, {0, 5, 11}, {2, 5, BIG}},
     {{OP_RECV, 0, 5, EXACT, 64, 1, FERRY_OK, false},
      {OP_RECV, 2, 0, ANYT, BIG, 2, FERRY_OK, false},
      {OP_RECV, 1, 5, EXACT, 64, 0, FERRY_OK, false}}},
    {"truncation, eager",
     {{0, 4, 100}},
     {{OP_RECV, 0, 4, EXACT, 40, 0, FERRY_ERR_TRUNCATE, false}}},
    {"truncation, rendezvous",
     {{0, 4, BIG}},
     {{OP_RECV, 0, 4, EXACT, 1000, 0, FERRY_ERR_TRUNCATE, false}}},
    {"truncation to nothing",
     {{0, 4, 9}},
     {{OP_RECV, 0, 4, EXACT, 0, 0, FERRY_ERR_TRUNCATE, false}}},
    {"probe then receive",
     {{0, 3, 33}, {0, 9, BIG}},
     {{OP_PROBE, 0, 0, ANYT, 0, 0, FERRY_OK, true},
      {OP_RECV, 0, 3, EXACT, 64, 0, FERRY_OK, false},
      {OP_PROBE, 0, 9, EXACT, 0, 1, FERRY_OK, false},
      {OP_RECV, 0, 9, EXACT, BIG, 1, FERRY_OK, false}}},
    {"canceled receive takes nothing",
     {{0, 6, 12}},
     {{OP_CANCEL, 0, 6, EXACT, 64, -1, FERRY_ERR_CANCELED, false},
      {OP_RECV, 0, 6, EXACT, 64, 0, FERRY_OK, false}}},
    {"zero length", {{0, 8, 0}}, {{OP_RECV, 0, 8, EXACT, 16, 0, FERRY_OK, false}}},
    {"large tags and contexts",
     {{0x7fffffff, UINT64_MAX, 5}, {0x7fffffff, UINT64_MAX - 1, 6}},
     {{OP_RECV, 0x7fffffff, UINT64_MAX - 1, EXACT, 64, 1, FERRY_OK, false},
      {OP_RECV, 0x7fffffff, UINT64_MAX, EXACT, 64, 0, FERRY_OK, false}}},
};

static uint8_t pat(int sender, int idx, size_t i)
{
    return (uint8_t)(sender * 13 + idx * 71 + i * 3 + (i >> 8));
}

typedef struct world {
    ferry_ctx_t *ctx;
    ferry_msg_t *msg;
    int me, size, next, prev;
    size_t big;
} world_t;

static size_t rlen(const world_t *w, size_t len)
{
    return len == BIG ? w->big : len;
}

static void check_recv(const world_t *w, const mcase_t *c, const rop_t *op, int rc,
                       const ferry_msg_status_t *st, const uint8_t *buf, size_t cap)
{
    if (rc != op->want_err)
        fprintf(stderr, "rank %d case '%s': outcome %s, expected %s\n", w->me, c->name,
                ferry_status_name(rc), ferry_status_name(op->want_err));
    CHECK(rc == op->want_err);
    CHECK(st->error == op->want_err);
    if (op->want < 0) {
        CHECK(st->received == 0);
        return;
    }
    const smsg_t *m = &c->sends[op->want];
    size_t len = rlen(w, m->len);
    CHECK(st->source == w->prev);
    CHECK(st->tag == m->tag);
    CHECK(st->context == m->ctx);
    CHECK(st->len == len);
    CHECK(st->received == (len < cap ? len : cap));
    for (size_t i = 0; i < st->received; i++)
        if (buf[i] != pat(w->prev, op->want, i)) {
            fprintf(stderr, "rank %d case '%s': byte %zu of message %d is wrong\n", w->me, c->name,
                    i, op->want);
            CHECK(0);
        }
    for (size_t i = st->received; i < cap + GUARD; i++)
        CHECK(buf[i] == 0xa5);
}

static void run_case(world_t *w, const mcase_t *c, bool post_first)
{
    int ns = 0, no = 0;
    while (ns < MAXOPS && (c->sends[ns].ctx != 0 || c->sends[ns].tag != 0 || c->sends[ns].len != 0))
        ns++;
    while (no < MAXOPS && c->ops[no].op != 0)
        no++;
    uint8_t *sbuf[MAXOPS] = {0}, *rbuf[MAXOPS] = {0};
    ferry_msg_req_t *sreq[MAXOPS] = {0}, *rreq[MAXOPS] = {0};
    size_t cap[MAXOPS];
    for (int i = 0; i < ns; i++) {
        size_t len = rlen(w, c->sends[i].len);
        sbuf[i] = malloc(len + 1);
        CHECK(sbuf[i] != NULL);
        for (size_t k = 0; k < len; k++)
            sbuf[i][k] = pat(w->me, i, k);
    }
    for (int i = 0; i < no; i++) {
        cap[i] = rlen(w, c->ops[i].cap);
        rbuf[i] = malloc(cap[i] + GUARD);
        CHECK(rbuf[i] != NULL);
        memset(rbuf[i], 0xa5, cap[i] + GUARD);
    }
    int src_of[MAXOPS];
    for (int i = 0; i < no; i++)
        src_of[i] = c->ops[i].any_src ? FERRY_MSG_ANY_SOURCE : w->prev;

    if (post_first) {
        for (int i = 0; i < no; i++) {
            const rop_t *op = &c->ops[i];
            if (op->op == OP_PROBE)
                continue;
            CHECK(ferry_msg_irecv(w->msg, src_of[i], op->ctx, op->tag, op->mask, rbuf[i], cap[i],
                                  &rreq[i]) == FERRY_OK);
            if (op->op == OP_CANCEL)
                CHECK(ferry_msg_cancel(w->msg, rreq[i]) == FERRY_OK);
        }
        CHECK(ferry_barrier(w->ctx) == FERRY_OK);
    }
    for (int i = 0; i < ns; i++)
        CHECK(ferry_msg_isend(w->msg, w->next, c->sends[i].ctx, c->sends[i].tag, sbuf[i],
                              rlen(w, c->sends[i].len), &sreq[i]) == FERRY_OK);
    ferry_msg_req_t *mreq;
    CHECK(ferry_msg_isend(w->msg, w->next, MARK_CTX, 0, NULL, 0, &mreq) == FERRY_OK);
    if (!post_first) {
        /* Everything the previous rank sent before its marker is here. */
        ferry_msg_status_t st;
        CHECK(ferry_msg_probe(w->msg, w->prev, MARK_CTX, 0, EXACT, &st) == FERRY_OK);
        for (int i = 0; i < no; i++) {
            const rop_t *op = &c->ops[i];
            if (op->op == OP_PROBE) {
                int found = 0;
                CHECK(ferry_msg_iprobe(w->msg, src_of[i], op->ctx, op->tag, op->mask, &found,
                                       &st) == FERRY_OK);
                CHECK(found == 1);
                CHECK(st.source == w->prev && st.tag == c->sends[op->want].tag &&
                      st.len == rlen(w, c->sends[op->want].len) && st.received == 0);
                continue;
            }
            CHECK(ferry_msg_irecv(w->msg, src_of[i], op->ctx, op->tag, op->mask, rbuf[i], cap[i],
                                  &rreq[i]) == FERRY_OK);
            if (op->op == OP_CANCEL) {
                /* The message that matches is already here, so the receive
                 * was matched at once: too late to cancel, and it has what
                 * the case's next receive wants. */
                CHECK(ferry_msg_cancel(w->msg, rreq[i]) == FERRY_ERR_BUSY);
                ferry_msg_status_t s2;
                int rc = ferry_msg_wait(w->msg, &rreq[i], &s2);
                CHECK(i + 1 < no && cap[i] == cap[i + 1]);
                check_recv(w, c, &c->ops[i + 1], rc, &s2, rbuf[i], cap[i]);
                i++;
                continue;
            }
            ferry_msg_status_t rs;
            int rc = ferry_msg_wait(w->msg, &rreq[i], &rs);
            check_recv(w, c, op, rc, &rs, rbuf[i], cap[i]);
            CHECK(rreq[i] == NULL);
        }
        ferry_msg_status_t ms;
        CHECK(ferry_msg_recv(w->msg, w->prev, MARK_CTX, 0, EXACT, NULL, 0, &ms) == FERRY_OK);
    } else {
        for (int i = 0; i < no; i++) {
            const rop_t *op = &c->ops[i];
            if (op->op == OP_PROBE)
                continue;
            ferry_msg_status_t rs;
            int rc = ferry_msg_wait(w->msg, &rreq[i], &rs);
            check_recv(w, c, op, rc, &rs, rbuf[i], cap[i]);
        }
        ferry_msg_status_t ms;
        CHECK(ferry_msg_recv(w->msg, w->prev, MARK_CTX, 0, EXACT, NULL, 0, &ms) == FERRY_OK);
    }
    for (int i = 0; i < ns; i++) {
        ferry_msg_status_t ss;
        CHECK(ferry_msg_wait(w->msg, &sreq[i], &ss) == FERRY_OK);
        CHECK(ss.len == rlen(w, c->sends[i].len));
    }
    CHECK(ferry_msg_wait(w->msg, &mreq, NULL) == FERRY_OK);
    CHECK(ferry_barrier(w->ctx) == FERRY_OK);
    for (int i = 0; i < MAXOPS; i++) {
        free(sbuf[i]);
        free(rbuf[i]);
    }
}

/* Every rank sends three messages to rank 0 (tag = its rank); rank 0
 * takes them with any source and any tag: each sender's in order. */
static void many_to_one(world_t *w)
{
    enum { PER = 3 };
    ferry_msg_req_t *r[PER];
    uint32_t vals[PER];
    for (int k = 0; k < PER; k++) {
        vals[k] = (uint32_t)(w->me * 100 + k);
        CHECK(ferry_msg_isend(w->msg, 0, 9, (uint64_t)w->me, &vals[k], sizeof(vals[k]), &r[k]) ==
              FERRY_OK);
    }
    if (w->me == 0) {
        int *seen = calloc((size_t)w->size, sizeof(int));
        CHECK(seen != NULL);
        for (int n = 0; n < w->size * PER; n++) {
            uint32_t v;
            ferry_msg_status_t st;
            CHECK(ferry_msg_recv(w->msg, FERRY_MSG_ANY_SOURCE, 9, 0, ANYT, &v, sizeof(v), &st) ==
                  FERRY_OK);
            CHECK(st.tag == (uint64_t)st.source);
            CHECK(v == (uint32_t)(st.source * 100 + seen[st.source]));
            seen[st.source]++;
        }
        for (int s = 0; s < w->size; s++)
            CHECK(seen[s] == PER);
        free(seen);
    }
    for (int k = 0; k < PER; k++)
        CHECK(ferry_msg_wait(w->msg, &r[k], NULL) == FERRY_OK);
    CHECK(ferry_barrier(w->ctx) == FERRY_OK);
}

/* A receive canceled after a random amount of progress, while its message
 * may be arriving: either the cancel wins (the receive completes
 * CANCELED, having written nothing, and the message is still there for the
 * next receive) or the match did (FERRY_ERR_BUSY, and the receive has the
 * message). Never both, never neither. */
static void cancel_race(world_t *w)
{
    enum { ROUNDS = 60 };
    int won = 0, lost = 0;
    srand(1234u + (unsigned)w->me);
    size_t cap = w->big;
    uint8_t *buf = malloc(cap), *sbuf = malloc(cap);
    CHECK(buf != NULL && sbuf != NULL);
    for (int i = 0; i < ROUNDS; i++) {
        size_t len = i % 3 == 0 ? w->big : (size_t)(i * 37 % 500);
        for (size_t k = 0; k < len; k++)
            sbuf[k] = pat(w->me, i, k);
        ferry_msg_req_t *s, *r;
        memset(buf, 0xa5, cap);
        CHECK(ferry_msg_irecv(w->msg, w->prev, 3, (uint64_t)i, EXACT, buf, cap, &r) == FERRY_OK);
        CHECK(ferry_msg_isend(w->msg, w->next, 3, (uint64_t)i, sbuf, len, &s) == FERRY_OK);
        int spins = rand() % 40;
        for (int k = 0; k < spins; k++)
            CHECK(ferry_msg_progress(w->msg) >= 0);
        int crc = ferry_msg_cancel(w->msg, r);
        CHECK(crc == FERRY_OK || crc == FERRY_ERR_BUSY);
        ferry_msg_status_t st;
        int rc = ferry_msg_wait(w->msg, &r, &st);
        if (crc == FERRY_OK) {
            won++;
            CHECK(rc == FERRY_ERR_CANCELED && st.received == 0);
            CHECK(buf[0] == 0xa5);
            rc = ferry_msg_recv(w->msg, w->prev, 3, (uint64_t)i, EXACT, buf, cap, &st);
        } else {
            lost++;
        }
        CHECK(rc == FERRY_OK);
        size_t want = i % 3 == 0 ? w->big : (size_t)(i * 37 % 500);
        CHECK(st.len == want && st.received == want);
        for (size_t k = 0; k < want; k++)
            CHECK(buf[k] == pat(w->prev, i, k));
        CHECK(ferry_msg_wait(w->msg, &s, NULL) == FERRY_OK);
    }
    /* Nothing left over: a probe for any of the round's tags finds none. */
    int found = 1;
    CHECK(ferry_barrier(w->ctx) == FERRY_OK);
    CHECK(ferry_msg_iprobe(w->msg, FERRY_MSG_ANY_SOURCE, 3, 0, ANYT, &found, NULL) == FERRY_OK);
    CHECK(found == 0);
    if (w->me == 0)
        printf("cancel race: %d canceled before the match, %d matched first\n", won, lost);
    free(buf);
    free(sbuf);
    CHECK(ferry_barrier(w->ctx) == FERRY_OK);
}

/* A strided vector sent, received into an iovec list, at eager and
 * rendezvous sizes. */
static void layouts(world_t *w)
{
    size_t sizes[2] = {1200, w->big / 100 * 100 + 100};
    for (int k = 0; k < 2; k++) {
        size_t total = sizes[k], blocks = total / 100;
        uint8_t *src = malloc(blocks * 160), *dst = malloc(total + 64);
        CHECK(src != NULL && dst != NULL);
        for (size_t i = 0; i < blocks * 160; i++)
            src[i] = (uint8_t)(i * 5 + (size_t)w->me);
        ferry_vector_t vec = {.base = src, .count = blocks, .block_len = 100, .stride = 160};
        ferry_convertor_t sconv, rconv;
        CHECK(ferry_convertor_init_vector(&sconv, &vec) == FERRY_OK);
        memset(dst, 0xa5, total + 64);
        ferry_iov_t iov[3] = {{dst, 7}, {dst + 7, total / 2}, {dst + 7 + total / 2, 0}};
        iov[2].len = total - 7 - total / 2 + 13; /* 13 bytes of room to spare */
        CHECK(ferry_convertor_init_iov(&rconv, iov, 3) == FERRY_OK);
        ferry_msg_req_t *s, *r;
        CHECK(ferry_msg_irecv_conv(w->msg, w->prev, 4, 1, EXACT, &rconv, &r) == FERRY_OK);
        CHECK(ferry_msg_isend_conv(w->msg, w->next, 4, 1, &sconv, &s) == FERRY_OK);
        ferry_msg_status_t st;
        CHECK(ferry_msg_wait(w->msg, &r, &st) == FERRY_OK);
        CHECK(st.len == total && st.received == total);
        for (size_t b = 0; b < blocks; b++)
            for (size_t i = 0; i < 100; i++)
                CHECK(dst[b * 100 + i] == (uint8_t)((b * 160 + i) * 5 + (size_t)w->prev));
        for (size_t i = total; i < total + 64; i++)
            CHECK(dst[i] == 0xa5);
        CHECK(ferry_msg_wait(w->msg, &s, NULL) == FERRY_OK);
        CHECK(ferry_barrier(w->ctx) == FERRY_OK);
        free(src);
        free(dst);
    }
}

/* Inside a ferry callback the calls that would wait are refused; the
 * non-blocking ones work. */
static void in_handler(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    world_t *w = arg;
    (void)ctx, (void)src, (void)tag, (void)data, (void)len;
    char b[4];
    ferry_msg_status_t st;
    CHECK(ferry_msg_recv(w->msg, FERRY_MSG_ANY_SOURCE, 55, 0, 0, b, 4, &st) == FERRY_ERR_BUSY);
    CHECK(ferry_msg_send(w->msg, w->me, 55, 0, b, 4) == FERRY_ERR_BUSY);
    CHECK(ferry_msg_probe(w->msg, FERRY_MSG_ANY_SOURCE, 55, 0, 0, &st) == FERRY_ERR_BUSY);
    ferry_msg_req_t *r;
    CHECK(ferry_msg_irecv(w->msg, FERRY_MSG_ANY_SOURCE, 55, 0, 0, b, 4, &r) == FERRY_OK);
    CHECK(ferry_msg_wait(w->msg, &r, &st) == FERRY_ERR_BUSY && r != NULL);
    CHECK(ferry_msg_cancel(w->msg, r) == FERRY_OK);
    CHECK(ferry_msg_wait(w->msg, &r, &st) == FERRY_ERR_CANCELED && r == NULL);
    w->size = -w->size; /* seen */
}

static void refusals(world_t *w)
{
    CHECK(ferry_am_register(w->ctx, 5, in_handler, w) == FERRY_OK);
    int rc;
    while ((rc = ferry_am_send(w->ctx, w->me, 5, "x", 1)) == FERRY_ERR_NO_RESOURCE)
        ferry_progress(w->ctx);
    CHECK(rc == FERRY_OK);
    while (w->size > 0)
        CHECK(ferry_progress(w->ctx) >= 0);
    w->size = -w->size;

    ferry_msg_req_t *r = NULL;
    ferry_msg_t *again;
    char b[4];
    CHECK(ferry_msg_init(w->ctx, &again) == FERRY_ERR_BUSY);
    CHECK(ferry_msg_isend(w->msg, w->size, 0, 0, b, 4, &r) == FERRY_ERR_INVALID);
    CHECK(ferry_msg_isend(w->msg, -1, 0, 0, b, 4, &r) == FERRY_ERR_INVALID);
    CHECK(ferry_msg_isend(w->msg, 0, 0, 0, NULL, 4, &r) == FERRY_ERR_INVALID);
    CHECK(ferry_msg_irecv(w->msg, w->size, 0, 0, 0, b, 4, &r) == FERRY_ERR_INVALID);
    CHECK(ferry_msg_irecv(w->msg, -2, 0, 0, 0, b, 4, &r) == FERRY_ERR_INVALID);
    CHECK(ferry_msg_irecv(w->msg, 0, 0, 0, 0, NULL, 4, &r) == FERRY_ERR_INVALID);
    CHECK(ferry_msg_isend(NULL, 0, 0, 0, b, 4, &r) == FERRY_ERR_INVALID);
    CHECK(r == NULL);
    int idx = 5;
    ferry_msg_req_t *none[2] = {NULL, NULL};
    CHECK(ferry_msg_waitany(w->msg, 2, none, &idx, NULL) == FERRY_OK && idx == -1);
    int done = 0;
    CHECK(ferry_msg_test(w->msg, &none[0], &done, NULL) == FERRY_OK && done == 1);
    /* A live request keeps the layer from stopping. */
    CHECK(ferry_msg_irecv(w->msg, FERRY_MSG_ANY_SOURCE, 77, 0, 0, b, 4, &r) == FERRY_OK);
    ferry_msg_t *m = w->msg;
    CHECK(ferry_msg_fini(&m) == FERRY_ERR_BUSY && m == w->msg);
    CHECK(ferry_msg_test(w->msg, &r, &done, NULL) == FERRY_OK && done == 0);
    CHECK(ferry_msg_cancel(w->msg, r) == FERRY_OK);
    CHECK(ferry_msg_test(w->msg, &r, &done, NULL) == FERRY_ERR_CANCELED && done == 1);
    CHECK(r == NULL);
}

int main(void)
{
    world_t w = {0};
    CHECK(ferry_init(NULL, &w.ctx) == FERRY_OK);
    w.me = ferry_rank(w.ctx);
    w.size = ferry_size(w.ctx);
    w.next = (w.me + 1) % w.size;
    w.prev = (w.me + w.size - 1) % w.size;
    for (int r = 0; r < w.size; r++) {
        long m = ferry_am_max_size(w.ctx, r);
        if (m < 0) {
            printf("SKIPPED: rank %d cannot reach rank %d over FERRY_BTL='%s' (%s)\n", w.me, r,
                   getenv("FERRY_BTL") ? getenv("FERRY_BTL") : "", ferry_strerror((int)m));
            ferry_finalize(&w.ctx);
            return 77;
        }
    }
    long a = ferry_am_max_size(w.ctx, w.next), b = ferry_am_max_size(w.ctx, w.prev);
    w.big = 2 * (size_t)(a > b ? a : b) + 5;
    CHECK(ferry_msg_init(w.ctx, &w.msg) == FERRY_OK);
    CHECK(ferry_barrier(w.ctx) == FERRY_OK);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        for (int mode = 0; mode < 2; mode++) {
            if (w.me == 0)
                printf("case '%s' (%s)\n", cases[c].name, mode ? "posted first" : "unexpected");
            run_case(&w, &cases[c], mode == 1);
        }
    }
    many_to_one(&w);
    cancel_race(&w);
    layouts(&w);
    refusals(&w);
    CHECK(ferry_barrier(w.ctx) == FERRY_OK);
    CHECK(ferry_msg_fini(&w.msg) == FERRY_OK && w.msg == NULL);
    CHECK(ferry_finalize(&w.ctx) == FERRY_OK);
    if (w.me == 0)
        printf("msg match: ok\n");
    return 0;
}
