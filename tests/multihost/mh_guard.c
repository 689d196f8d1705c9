/*
 * The rank program of the foreign-connection test: every rank but 0 sends
 * rank 0 a known stream of active messages, in two rounds; between them,
 * while rank 0 keeps progressing, the test script lets a process that is not
 * part of the job (mh_foreign) connect to rank 0's tcp listener and send a
 * hello with a wrong key, garbage and half-open connections. Rank 0 must
 * receive exactly the job's messages, in order, and nothing else; no rank of
 * the job may be reported failed; and the second round must still work.
 *
 *   mh_guard DONE_FILE
 * Rank 0 prints "guard: ready" once the first round has arrived, then
 * progresses until DONE_FILE exists (at most 60 s).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "../unit/check.h"

#define TAG_DATA 40
#define PER_ROUND 200
#define MAX_RANKS 64

typedef struct guard {
    int me;
    uint64_t got[MAX_RANKS]; /* messages from each rank, in order */
    int failures;
} guard_t;

static void on_data(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    guard_t *g = arg;
    uint64_t seq;
    CHECK(src > 0 && src < MAX_RANKS);
    CHECK(len == 64);
    memcpy(&seq, data, sizeof(seq));
    CHECK(seq == g->got[src]);
    const unsigned char *p = data;
    for (size_t i = sizeof(seq); i < len; i++)
        CHECK(p[i] == (unsigned char)(seq * 7 + i + (size_t)src));
    g->got[src]++;
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    guard_t *g = arg;
    printf("guard: rank %d: error reported for peer %d: %s (%s)\n", g->me, peer, msg,
           ferry_strerror(status));
    fflush(stdout);
    if (peer >= 0)
        g->failures++;
}

static void send_round(ferry_ctx_t *ctx, int me, int round)
{
    unsigned char buf[64];
    for (uint64_t s = (uint64_t)round * PER_ROUND; s < (uint64_t)(round + 1) * PER_ROUND; s++) {
        memcpy(buf, &s, sizeof(s));
        for (size_t i = sizeof(s); i < sizeof(buf); i++)
            buf[i] = (unsigned char)(s * 7 + i + (size_t)me);
        int rc;
        while ((rc = ferry_am_send(ctx, 0, TAG_DATA, buf, sizeof(buf))) == FERRY_ERR_NO_RESOURCE)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(rc == FERRY_OK);
    }
    CHECK(ferry_flush(ctx, 0) == FERRY_OK);
}

static void wait_all(ferry_ctx_t *ctx, guard_t *g, int size, uint64_t want)
{
    for (bool done = false; !done;) {
        CHECK(ferry_progress(ctx) >= 0);
        done = true;
        for (int r = 1; r < size; r++)
            done = done && g->got[r] >= want;
    }
}

int main(int argc, char **argv)
{
    ferry_ctx_t *ctx;
    guard_t g = {0};
    CHECK(argc == 2);
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    g.me = ferry_rank(ctx);
    int size = ferry_size(ctx);
    CHECK(size >= 2 && size <= MAX_RANKS);
    CHECK(ferry_set_error_cb(ctx, on_error, &g) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_DATA, on_data, &g) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    if (g.me != 0)
        send_round(ctx, g.me, 0);
    if (g.me == 0) {
        wait_all(ctx, &g, size, PER_ROUND);
        printf("guard: ready\n");
        fflush(stdout);
        time_t end = time(NULL) + 60;
        while (access(argv[1], F_OK) != 0 && time(NULL) < end)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(access(argv[1], F_OK) == 0);
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (g.me != 0)
        send_round(ctx, g.me, 1);
    if (g.me == 0) {
        wait_all(ctx, &g, size, 2 * PER_ROUND);
        for (int r = 1; r < size; r++)
            CHECK(g.got[r] == 2 * PER_ROUND);
        printf("guard: rank 0 received %d messages, all from the job, in order\n",
               2 * PER_ROUND * (size - 1));
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(g.failures == 0);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    return 0;
}
