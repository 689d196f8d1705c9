/*
 * How failures travel between ranks (src/btl/ctx.h, "Failures"), and what
 * the failure notices accept.
 *
 *   test_failure path      4+ ranks: rank 1's path to rank 2 breaks (its
 *                          transport's error callback is called as a
 *                          transport would), though rank 2 lives. Ranks 0
 *                          and 3 learn from rank 1's notice; rank 2, which
 *                          rank 1 no longer reaches, learns from the others
 *                          that it was counted out, and takes rank 1 as
 *                          failed. Then every rank's barrier and finalize
 *                          fail promptly with FERRY_ERR_UNREACH.
 *   test_failure garbage   2 ranks: rank 1 sends rank 0 malformed control
 *                          messages of every kind (and many of one): rank 0
 *                          drops them (warning a few times, not once each)
 *                          and counts no rank failed; a barrier and
 *                          finalize then succeed.
 * Each rank prints "test_failure: rank R ok" at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ferry/ferry.h>

#include "btl/ctx.h"
#include "../unit/check.h"

#define TAG_DONE 7
#define TAG_READY 8
#define BOUND_S 10.0

typedef struct state {
    int me;
    int failures;
    int failed[8];
    bool done;
    int ready;
} state_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    state_t *st = arg;
    printf("test_failure: rank %d: error callback: peer %d: %s\n", st->me, peer, msg);
    fflush(stdout);
    CHECK(status == FERRY_ERR_UNREACH);
    if (st->failures < 8)
        st->failed[st->failures] = peer;
    st->failures++;
}

static void on_done(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    ((state_t *)arg)->done = true;
}

static void on_ready(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                     void *arg)
{
    ((state_t *)arg)->ready++;
}

/* Progresses until the error callback has named peer, within the bound. */
static void wait_failure_of(ferry_ctx_t *ctx, state_t *st, int peer)
{
    double end = now_s() + BOUND_S;
    for (;;) {
        for (int i = 0; i < st->failures && i < 8; i++)
            if (st->failed[i] == peer)
                return;
        CHECK(ferry_progress(ctx) >= 0);
        CHECK(now_s() < end);
    }
}

static void mode_path(ferry_ctx_t *ctx, state_t *st)
{
    int size = ferry_size(ctx);
    CHECK(size >= 4);
    /* Rank 1 breaks the path once every rank is out of the barrier before
     * (a rank still in it would rightly see it fail). */
    if (st->me != 1) {
        int rc;
        while ((rc = ferry_am_send(ctx, 1, TAG_READY, "r", 1)) == FERRY_ERR_NO_RESOURCE)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(rc == FERRY_OK);
    } else {
        double end = now_s() + BOUND_S;
        while (st->ready < size - 1) {
            CHECK(ferry_progress(ctx) >= 0);
            CHECK(now_s() < end);
        }
    }
    if (st->me == 1) {
        /* What a transport does when its endpoint to rank 2 breaks. */
        btl_peer_t *p = &ctx->peers[2];
        ferry_btl_module_t *btl = ctx->modules[p->module_idx];
        btl->error_cb(btl, FERRY_ERR_UNREACH, 2, "test: the path to rank 2 broke",
                      btl->error_cbdata);
    }
    /* Rank 2 learns that rank 1 counts it out; the others that rank 2
     * failed. */
    wait_failure_of(ctx, st, st->me == 2 ? 1 : 2);
    CHECK(st->failures == 1);
    if (st->me != 2)
        CHECK(ferry_am_send(ctx, 2, TAG_DONE, "x", 1) == FERRY_ERR_UNREACH);
    else
        CHECK(ferry_am_send(ctx, 1, TAG_DONE, "x", 1) == FERRY_ERR_UNREACH);
    double t0 = now_s();
    CHECK(ferry_barrier(ctx) == FERRY_ERR_UNREACH);
    CHECK(now_s() - t0 < 0.1);
}

static void send_ctrl(ferry_ctx_t *ctx, const void *msg, size_t len)
{
    int rc;
    while ((rc = btl_ctx_send_small(ctx, 0, BTL_CTX_TAG_CTRL, msg, len)) ==
           FERRY_ERR_NO_RESOURCE)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(rc == FERRY_OK);
}

static void mode_garbage(ferry_ctx_t *ctx, state_t *st)
{
    int size = ferry_size(ctx);
    if (st->me == 1) {
        const btl_ctrl_msg_t good = {
            .magic = BTL_CTX_CTRL_MAGIC, .kind = BTL_CTX_CTRL_FAILED, .rank = 0, .origin = 1};
        uint8_t big[sizeof(good) + 8];
        memset(big, 0, sizeof(big));
        memcpy(big, &good, sizeof(good));
        /* A probe (sent after a failover) must name no rank; a good one
         * does nothing. */
        btl_ctrl_msg_t probe = {.magic = BTL_CTX_CTRL_MAGIC, .kind = BTL_CTX_CTRL_PROBE,
                                .rank = -1, .origin = -1};
        send_ctrl(ctx, &probe, sizeof(probe));
        probe.rank = 0;
        probe.origin = 1;
        send_ctrl(ctx, &probe, sizeof(probe));
        send_ctrl(ctx, &good, 3);         /* short */
        send_ctrl(ctx, big, sizeof(big)); /* long */
        btl_ctrl_msg_t bad[9];
        for (int i = 0; i < 9; i++)
            bad[i] = good;
        bad[0].magic ^= 1;                  /* not a control message */
        bad[1].zero = 1;                    /* the reserved field set */
        bad[2].kind = 9;                    /* an unknown kind */
        bad[3].rank = -1;                   /* no such rank */
        bad[4].rank = size;
        bad[5].origin = size + 5;
        bad[6].origin = 0;                  /* rank 0 seeing itself fail */
        bad[7].kind = BTL_CTX_CTRL_DEPART;  /* a departure naming ranks */
        bad[8].magic = 0;
        for (int i = 0; i < 8; i++)
            send_ctrl(ctx, &bad[i], sizeof(bad[i]));
        for (int i = 0; i < 200; i++)       /* many: warned about a few times */
            send_ctrl(ctx, &bad[8], sizeof(bad[8]));
        int rc;
        while ((rc = ferry_am_send(ctx, 0, TAG_DONE, "x", 1)) == FERRY_ERR_NO_RESOURCE)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(rc == FERRY_OK);
    } else if (st->me == 0) {
        double end = now_s() + BOUND_S;
        while (!st->done) {
            CHECK(ferry_progress(ctx) >= 0);
            CHECK(now_s() < end);
        }
    }
    CHECK(st->failures == 0);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    ferry_ctx_t *ctx;
    state_t st = {0};
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    st.me = ferry_rank(ctx);
    for (int r = 0; r < ferry_size(ctx); r++) {
        if (ferry_am_max_size(ctx, r) < 0) {
            printf("SKIPPED: rank %d cannot be reached (no transport joins them)\n", r);
            return 77;
        }
    }
    CHECK(ferry_set_error_cb(ctx, on_error, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_DONE, on_done, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_READY, on_ready, &st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    bool path = strcmp(argv[1], "path") == 0;
    if (path)
        mode_path(ctx, &st);
    else if (strcmp(argv[1], "garbage") == 0)
        mode_garbage(ctx, &st);
    else
        CHECK(!"unknown mode");
    double t0 = now_s();
    int rc = ferry_finalize(&ctx);
    CHECK(rc == (path ? FERRY_ERR_UNREACH : FERRY_OK));
    CHECK(now_s() - t0 < BOUND_S);
    printf("test_failure: rank %d ok\n", st.me);
    return 0;
}
