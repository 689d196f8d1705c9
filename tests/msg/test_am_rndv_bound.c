/*
 * What the rendezvous of large active messages may make a receiver hold
 * (FERRY_AM_LARGE_INFLIGHT, src/api/am_large.c), and a large send queued
 * from a handler that cannot leave. 2 ranks, under ferryrun, with tiny
 * rings (CMakeLists), so that a path fills with a few messages.
 *
 *   --attack    rank 1 floods rank 0 with crafted announcements and never
 *               takes what rank 0 answers, so that the path back stays
 *               full and the answers (rank 0's data handler drops each
 *               message: a FIN) wait in rank 0. They stop at the bound:
 *               rank 0 never has more than 2 * FERRY_AM_LARGE_INFLIGHT
 *               announcements and answers of rank 1's open, and takes rank
 *               1 as failed (its error callback, FERRY_ERR_NO_MEMORY, the
 *               parameter named); then nothing of rank 1's is held.
 *   --legit     rank 1 sends many more large messages than the bound, each
 *               started as soon as ferry takes it (FERRY_ERR_NO_RESOURCE:
 *               progress and retry); rank 0 takes them only once the bound's
 *               worth have been announced. All complete, every byte
 *               checked, and nobody is taken as failed.
 *   --legit-msg the same through the tagged layer: rank 1 starts every
 *               send at once (the tagged layer keeps those past the bound
 *               waiting itself), rank 0 posts its receives afterwards.
 *   --rts-lost  rank 0's handler answers rank 1 with a large message while
 *               the path to rank 1 is full: its announcement waits in
 *               ferry's callback queue. Then that queue's send of it fails
 *               for good (the test makes the path's max send size too
 *               small for it, as a rail with a smaller one would), with
 *               rank 1 alive and silent: the send must end with that error
 *               (FERRY_ERR_INVALID) instead of waiting for an answer.
 *               This is what api_am_large_rts_lost is there for: without
 *               it the send waits for ever.
 *   --rts-lost-dies  the same, but rank 1 is killed while the announcement
 *               waits: the send ends with FERRY_ERR_UNREACH
 *               (run_rts_lost.sh, which expects rank 1's SIGKILL). Progress
 *               ends the sends to a failed peer before the callback queue
 *               drops their announcements, so this one holds without
 *               api_am_large_rts_lost too.
 * Each rank prints "test_am_rndv_bound: rank R MODE ok" at the end.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>
#include <ferry/msg.h>

#include "../unit/check.h"
#include "api/am_large.h"
#include "api/api.h"
#include "btl/ctx.h"

enum { TAG_FLOOD = 1, TAG_DATA = 2, TAG_PING = 3, TAG_BIG = 4, TAG_FILL = 5 };

#define BOUND_S 30.0
#define NMSG 48 /* --legit: messages sent, many more than the bound */

typedef struct state {
    ferry_ctx_t *ctx;
    int me;
    size_t inflight; /* FERRY_AM_LARGE_INFLIGHT */
    /* The error callback. */
    int failures;
    int failed_peer;
    int failed_status;
    char failed_msg[512];
    /* --attack */
    size_t dropped;
    size_t most; /* the most rank 1 had open, seen from the handler */
    /* --legit: announcements waiting to be taken, and those taken. */
    ferry_am_data_t *held[NMSG];
    size_t held_len[NMSG];
    int n_held;
    int n_taken;
    int n_done;
    int n_sent;
    /* --rts-lost */
    pid_t peer_pid;
    bool pinged;
    size_t n_fill;
    bool queued;
    bool big_done;
    int big_status;
} state_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t pat(int seq, size_t i)
{
    return (uint8_t)(seq * 41 + (int)(i * 13u) + (int)(i >> 9));
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    (void)ctx;
    state_t *st = arg;
    if (st->failures++ == 0) {
        st->failed_peer = peer;
        st->failed_status = status;
        snprintf(st->failed_msg, sizeof(st->failed_msg), "%s", msg);
    }
}

/* ---- --attack ---- */

/* What rank 1 has open at rank 0, checked against the bound. */
static size_t open_of(state_t *st, int peer)
{
    size_t recvs, answers;
    api_am_large_open(st->ctx, peer, &recvs, &answers);
    size_t open = recvs + answers;
    CHECK(open <= 2 * st->inflight);
    return open;
}

static void on_flood(ferry_ctx_t *ctx, int src, int tag, ferry_am_data_t *data, size_t len,
                     void *arg)
{
    state_t *st = arg;
    /* Dropping answers with a FIN, which waits while the path is full. */
    CHECK(ferry_am_data_drop(ctx, data) == FERRY_OK);
    st->dropped++;
    size_t open = open_of(st, src);
    if (open > st->most)
        st->most = open;
}

static void mode_attack(state_t *st)
{
    ferry_ctx_t *ctx = st->ctx;
    CHECK(ferry_am_register_data(ctx, TAG_FLOOD, on_flood, st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (st->me == 1) {
        /* Announcements as a peer that ignores the protocol sends them,
         * straight to the transport; nothing rank 0 sends is taken until
         * the flood is over. Many more than its path back holds plus the
         * bound. */
        size_t sent = 0;
        double end = now_s() + BOUND_S;
        for (uint64_t i = 0; i < 20000; i++) {
            am_rts_t rts;
            memset(&rts, 0, sizeof(rts));
            rts.id = 0x5eed0000 + i;
            rts.len = 1 << 20;
            rts.raddr = 4096;
            rts.tag = TAG_FLOOD;
            rts.proto = FERRY_AM_RNDV_GET;
            int rc;
            while ((rc = btl_ctx_send_small(ctx, 0, API_TAG_AM_RTS, &rts, sizeof(rts))) ==
                       FERRY_ERR_NO_RESOURCE &&
                   now_s() < end)
                usleep(100);
            if (rc != FERRY_OK)
                break; /* counted out: the path is gone, or no room for ever */
            sent++;
        }
        printf("test_am_rndv_bound: rank 1 announced %zu messages\n", sent);
        fflush(stdout);
        CHECK(sent > 4 * st->inflight);
        /* Now it listens, and hears that it was counted out. */
        end = now_s() + BOUND_S;
        while (st->failures == 0) {
            CHECK(now_s() < end);
            ferry_progress(ctx);
        }
        CHECK(st->failed_peer == 0);
        return;
    }
    double end = now_s() + BOUND_S;
    while (st->failures == 0) {
        CHECK(now_s() < end);
        CHECK(ferry_progress(ctx) >= 0);
        open_of(st, 1);
    }
    size_t most = st->most;
    printf("test_am_rndv_bound: rank 0 dropped %zu announcements, held at most %zu open "
           "(bound %zu), then: %s\n",
           st->dropped, most, 2 * st->inflight, st->failed_msg);
    fflush(stdout);
    CHECK(st->failed_peer == 1);
    CHECK(st->failed_status == FERRY_ERR_NO_MEMORY);
    CHECK(strstr(st->failed_msg, "FERRY_AM_LARGE_INFLIGHT") != NULL);
    /* The answers waited up to the bound: the path back was full. */
    CHECK(most == 2 * st->inflight);
    /* Nothing of rank 1's is held any more, whatever it still sends. */
    size_t dropped = st->dropped;
    for (int i = 0; i < 1000; i++) {
        CHECK(ferry_progress(ctx) >= 0);
        CHECK(open_of(st, 1) == 0);
    }
    CHECK(st->dropped == dropped);
}

/* ---- --legit ---- */

static size_t legit_len(size_t max, int i)
{
    return 2 * max + 1 + (size_t)i * 977;
}

static void on_data(ferry_ctx_t *ctx, int src, int tag, ferry_am_data_t *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    CHECK(src == 1 && st->n_held < NMSG);
    st->held[st->n_held] = data;
    st->held_len[st->n_held] = len;
    st->n_held++;
}

typedef struct take {
    state_t *st;
    int seq;
    uint8_t *buf;
    size_t len;
} take_t;

static void on_taken(void *arg, int status)
{
    take_t *t = arg;
    CHECK(status == FERRY_OK);
    for (size_t i = 0; i < t->len; i++)
        CHECK(t->buf[i] == pat(t->seq, i));
    t->st->n_done++;
    free(t->buf);
    free(t);
}

static void on_sent(void *arg, int status)
{
    state_t *st = arg;
    CHECK(status == FERRY_OK);
    st->n_done++;
}

static void mode_legit(state_t *st)
{
    ferry_ctx_t *ctx = st->ctx;
    CHECK(ferry_am_register_data(ctx, TAG_DATA, on_data, st) == FERRY_OK);
    size_t max = (size_t)ferry_am_max_size(ctx, 1 - st->me);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    double end = now_s() + BOUND_S * 4;
    if (st->me == 1) {
        uint8_t *bufs[NMSG];
        size_t refused = 0;
        for (int i = 0; i < NMSG; i++) {
            size_t len = legit_len(max, i);
            bufs[i] = malloc(len);
            CHECK(bufs[i] != NULL);
            for (size_t k = 0; k < len; k++)
                bufs[i][k] = pat(i, k);
            int rc;
            while ((rc = ferry_am_send_nb(ctx, 0, TAG_DATA, bufs[i], len, on_sent, st)) ==
                   FERRY_ERR_NO_RESOURCE) {
                refused++;
                CHECK(now_s() < end);
                CHECK(ferry_progress(ctx) >= 0);
            }
            CHECK(rc == FERRY_OK);
        }
        while (st->n_done < NMSG) {
            CHECK(now_s() < end);
            CHECK(ferry_progress(ctx) >= 0);
        }
        printf("test_am_rndv_bound: rank 1 sent %d large messages, %zu tries waited for the "
               "bound\n",
               NMSG, refused);
        CHECK(refused > 0);
        for (int i = 0; i < NMSG; i++)
            free(bufs[i]);
    } else {
        /* Announcements pile up to the bound's worth before any is
         * taken: the sender must hold the rest back. */
        while (st->n_done < NMSG) {
            CHECK(now_s() < end);
            CHECK(ferry_progress(ctx) >= 0);
            size_t recvs, answers;
            api_am_large_open(ctx, 1, &recvs, &answers);
            CHECK(recvs + answers < 2 * st->inflight);
            int want = NMSG - st->n_taken < (int)st->inflight ? NMSG - st->n_taken
                                                              : (int)st->inflight;
            if (st->n_held - st->n_taken < want)
                continue;
            while (st->n_taken < st->n_held) {
                int i = st->n_taken++;
                take_t *t = malloc(sizeof(*t));
                CHECK(t != NULL);
                t->st = st;
                t->seq = i;
                t->len = st->held_len[i];
                CHECK(t->len == legit_len(max, i));
                t->buf = malloc(t->len);
                CHECK(t->buf != NULL);
                CHECK(ferry_am_recv_data(ctx, st->held[i], t->buf, t->len, on_taken, t) ==
                      FERRY_OK);
            }
        }
    }
    CHECK(st->failures == 0);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
}

static void mode_legit_msg(state_t *st)
{
    ferry_ctx_t *ctx = st->ctx;
    ferry_msg_t *msg;
    CHECK(ferry_msg_init(ctx, &msg) == FERRY_OK);
    size_t max = (size_t)ferry_am_max_size(ctx, 1 - st->me);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    uint8_t *bufs[NMSG];
    ferry_msg_req_t *reqs[NMSG];
    for (int i = 0; i < NMSG; i++) {
        size_t len = legit_len(max, i);
        bufs[i] = malloc(len);
        CHECK(bufs[i] != NULL);
        if (st->me == 1) {
            for (size_t k = 0; k < len; k++)
                bufs[i][k] = pat(i, k);
            /* Every one at once: none is refused for the bound. */
            CHECK(ferry_msg_isend(msg, 0, 0, (uint64_t)i, bufs[i], len, &reqs[i]) == FERRY_OK);
        }
    }
    if (st->me == 0) {
        /* The receives come late, once the bound's worth of announcements
         * has had time to arrive. */
        size_t recvs = 0, answers;
        double end = now_s() + BOUND_S;
        while (recvs < st->inflight) {
            CHECK(now_s() < end);
            CHECK(ferry_msg_progress(msg) >= 0);
            api_am_large_open(ctx, 1, &recvs, &answers);
        }
        for (int i = NMSG - 1; i >= 0; i--)
            CHECK(ferry_msg_irecv(msg, 1, 0, (uint64_t)i, FERRY_MSG_TAG_EXACT, bufs[i],
                                  legit_len(max, i), &reqs[i]) == FERRY_OK);
    }
    for (int i = 0; i < NMSG; i++) {
        ferry_msg_status_t ms;
        CHECK(ferry_msg_wait(msg, &reqs[i], &ms) == FERRY_OK);
        if (st->me == 0) {
            CHECK(ms.received == legit_len(max, i));
            for (size_t k = 0; k < ms.received; k++)
                CHECK(bufs[i][k] == pat(i, k));
        }
        free(bufs[i]);
    }
    CHECK(st->failures == 0);
    CHECK(ferry_msg_fini(&msg) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
}

/* ---- --rts-lost ---- */

static uint8_t *big_buf;
static size_t big_len;

static void on_big_done(void *arg, int status)
{
    state_t *st = arg;
    st->big_done = true;
    st->big_status = status;
}

/* Rank 0: a ping from rank 1, answered inside the handler with a large
 * message while the path to rank 1 is full. */
static void on_ping(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    state_t *st = arg;
    CHECK(len == sizeof(pid_t));
    memcpy(&st->peer_pid, data, sizeof(pid_t));
    st->pinged = true;
    /* Filling the path to rank 1 (which takes nothing more) until a message
     * has to wait in the callback queue; the large one goes behind it.
     * The fill is longer than an announcement, so that it fails as the
     * announcement does in --rts-lost. */
    char fill[sizeof(am_rts_t) + 8] = {0};
    size_t before = ctx->api->cbq_count;
    while (ctx->api->cbq_count == before) {
        CHECK(ferry_am_send(ctx, src, TAG_FILL, fill, sizeof(fill)) == FERRY_OK);
        st->n_fill++;
    }
    before = ctx->api->cbq_count;
    CHECK(ferry_am_send_nb(ctx, src, TAG_BIG, big_buf, big_len, on_big_done, st) == FERRY_OK);
    /* It could not go: its announcement waits in the callback queue. */
    st->queued = ctx->api->cbq_count == before + 1;
}

static void on_any(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
}

/* The file by which rank 0 tells rank 1 that it may go on (rank 1 must
 * not progress before: that would empty the path). Both are children of
 * the same ferryrun. */
static void done_path(char *buf, size_t size)
{
    snprintf(buf, size, "rts_lost.%ld.done", (long)getppid());
}

static void mode_rts_lost(state_t *st, bool dies)
{
    ferry_ctx_t *ctx = st->ctx;
    CHECK(ferry_am_register(ctx, TAG_PING, on_ping, st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_BIG, on_any, st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_FILL, on_any, st) == FERRY_OK);
    big_len = 4 * (size_t)ferry_am_max_size(ctx, 1 - st->me);
    big_buf = calloc(1, big_len);
    CHECK(big_buf != NULL);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (st->me == 1) {
        /* The ping, then silence: rank 1 takes nothing more, so rank 0's
         * path to it fills and stays full. */
        pid_t pid = getpid();
        int rc;
        while ((rc = ferry_am_send(ctx, 0, TAG_PING, &pid, sizeof(pid))) ==
               FERRY_ERR_NO_RESOURCE)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(rc == FERRY_OK);
        if (dies) {
            /* Until rank 0 kills it. */
            double end = now_s() + BOUND_S * 2;
            while (now_s() < end)
                usleep(10000);
            CHECK(!"rank 0 did not kill rank 1");
        }
        /* Until rank 0 says, out of band, that it is done. */
        char path[64];
        done_path(path, sizeof(path));
        double end = now_s() + BOUND_S * 2;
        while (access(path, F_OK) != 0) {
            CHECK(now_s() < end);
            usleep(10000);
        }
        unlink(path);
        free(big_buf);
        return;
    }
    double end = now_s() + BOUND_S;
    while (!st->pinged) {
        CHECK(now_s() < end);
        CHECK(ferry_progress(ctx) >= 0);
    }
    CHECK(st->queued);
    CHECK(!st->big_done);
    if (dies) {
        CHECK(kill(st->peer_pid, SIGKILL) == 0);
    } else {
        /* The path's max send size drops below the announcement's length
         * for one progress: the callback queue's send of it fails for good
         * (FERRY_ERR_INVALID), though rank 1 lives. */
        ferry_btl_module_t *btl = ctx->modules[ctx->peers[1].module_idx];
        size_t keep = btl->attr.max_send_size;
        btl->attr.max_send_size = AM_RTS_FIXED;
        CHECK(ferry_progress(ctx) >= 0);
        btl->attr.max_send_size = keep;
        CHECK(ctx->api->cbq_count == 0); /* the fill and the announcement: lost */
    }
    while (!st->big_done) {
        CHECK(now_s() < end);
        CHECK(ferry_progress(ctx) >= 0);
    }
    printf("test_am_rndv_bound: rank 0: a large send queued from a handler ended with %s\n",
           ferry_status_name(st->big_status));
    fflush(stdout);
    CHECK(st->big_status == (dies ? FERRY_ERR_UNREACH : FERRY_ERR_INVALID));
    if (!dies) {
        char path[64];
        done_path(path, sizeof(path));
        FILE *f = fopen(path, "w");
        CHECK(f != NULL);
        fclose(f);
    }
    free(big_buf);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    state_t st = {.ctx = ctx, .failed_peer = -1};
    st.me = ferry_rank(ctx);
    if (ferry_size(ctx) != 2) {
        fprintf(stderr, "test_am_rndv_bound: needs 2 ranks\n");
        return 2;
    }
    for (int r = 0; r < 2; r++) {
        long m = ferry_am_max_size(ctx, r);
        if (m < 0) {
            printf("SKIPPED: rank %d cannot reach rank %d (%s)\n", st.me, r,
                   ferry_strerror((int)m));
            ferry_finalize(&ctx);
            return 77;
        }
    }
    const char *v = getenv("FERRY_AM_LARGE_INFLIGHT");
    st.inflight = v != NULL ? (size_t)strtoull(v, NULL, 10) : API_AM_LARGE_INFLIGHT_DEFAULT;
    CHECK(st.inflight > 0);
    CHECK(ferry_set_error_cb(ctx, on_error, &st) == FERRY_OK);
    bool counted_out = false;
    if (strcmp(mode, "--attack") == 0) {
        mode_attack(&st);
        counted_out = true;
    } else if (strcmp(mode, "--legit") == 0) {
        mode_legit(&st);
    } else if (strcmp(mode, "--legit-msg") == 0) {
        mode_legit_msg(&st);
    } else if (strcmp(mode, "--rts-lost") == 0) {
        mode_rts_lost(&st, false);
        counted_out = true; /* rank 1 never took what rank 0 sent */
    } else if (strcmp(mode, "--rts-lost-dies") == 0) {
        mode_rts_lost(&st, true);
        counted_out = true;
    } else {
        fprintf(stderr, "test_am_rndv_bound: unknown mode '%s'\n", mode);
        return 2;
    }
    int rc = ferry_finalize(&ctx);
    CHECK(rc == FERRY_OK || (counted_out && rc != FERRY_OK));
    printf("test_am_rndv_bound: rank %d %s ok\n", st.me, mode);
    return 0;
}
