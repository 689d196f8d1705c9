/*
 * A rank killed with SIGKILL in the middle of transfers: the others must be
 * told through the error callback, naming it, within a bounded time; what
 * was pending to it must complete (with FERRY_ERR_UNREACH or, if it had
 * already landed, FERRY_OK); new operations to it must be refused with
 * FERRY_ERR_UNREACH; and traffic among the survivors must go on intact.
 *
 * Run under `ferryrun --keep-going -n N`; the last rank is the victim, so
 * ferryrun exits with 137 (128 + SIGKILL) when the survivors succeed.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ferry/ferry.h>

#include "../unit/check.h"

#define TAG_DATA 30
#define TAG_ZONE 31
#define TAG_FIN 32
#define MAX_RANKS 64
#define ZONE ((size_t)1 << 20)

typedef struct zone {
    uint64_t addr;
    ferry_rkey_t rkey;
} zone_t;

typedef struct state {
    int me, size, victim;
    int failed_peer;      /* reported by the error callback, else -1 */
    int failed_status;
    int failures;
    uint64_t expect[MAX_RANKS];
    zone_t zone[MAX_RANKS];
    bool have_zone[MAX_RANKS];
    bool fin[MAX_RANKS];
    int puts_done, puts_unreach;
} state_t;

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    state_t *st = arg;
    st->failures++;
    st->failed_peer = peer;
    st->failed_status = status;
    printf("rank %d: peer %d failed: %s (%s)\n", st->me, peer, msg, ferry_strerror(status));
    fflush(stdout);
}

static void on_data(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    uint64_t seq;
    CHECK(len >= sizeof(seq));
    memcpy(&seq, data, sizeof(seq));
    CHECK(seq == st->expect[src]);
    st->expect[src]++;
    const unsigned char *p = data;
    for (size_t i = sizeof(seq); i < len; i++)
        CHECK(p[i] == (unsigned char)(seq + i));
}

static void on_zone(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    CHECK(len == sizeof(zone_t));
    memcpy(&st->zone[src], data, sizeof(zone_t));
    st->have_zone[src] = true;
}

static void on_fin(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                   void *arg)
{
    ((state_t *)arg)->fin[src] = true;
}

static void on_put(void *arg, int status)
{
    state_t *st = arg;
    if (status == FERRY_OK)
        st->puts_done++;
    else if (status == FERRY_ERR_UNREACH)
        st->puts_unreach++;
    else
        CHECK(!"put completed with an unexpected status");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
    ferry_ctx_t *ctx;
    state_t st = {.failed_peer = -1};
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    st.me = ferry_rank(ctx);
    st.size = ferry_size(ctx);
    st.victim = st.size - 1;
    CHECK(st.size >= 3 && st.size <= MAX_RANKS);
    for (int r = 0; r < st.size; r++) {
        if (ferry_am_max_size(ctx, r) < 0) {
            if (st.me == 0)
                printf("SKIPPED: rank %d cannot be reached (no transport joins them)\n", r);
            return 77;
        }
    }
    CHECK(ferry_set_error_cb(ctx, on_error, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_DATA, on_data, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_ZONE, on_zone, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_FIN, on_fin, &st) == FERRY_OK);
    unsigned char *zone = calloc((size_t)st.size, ZONE);
    unsigned char *src = malloc(ZONE);
    CHECK(zone != NULL && src != NULL);
    memset(src, 0x3c, ZONE);
    ferry_mem_t *zmem;
    CHECK(ferry_mem_register(ctx, zone, (size_t)st.size * ZONE, FERRY_ACCESS_REMOTE_WRITE,
                             &zmem) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    for (int r = 0; r < st.size; r++) {
        zone_t z = {.addr = (uint64_t)(uintptr_t)(zone + (size_t)r * ZONE)};
        CHECK(ferry_mem_rkey(zmem, &z.rkey) == FERRY_OK);
        int rc;
        while ((rc = ferry_am_send(ctx, r, TAG_ZONE, &z, sizeof(z))) == FERRY_ERR_NO_RESOURCE)
            ferry_progress(ctx);
        CHECK(rc == FERRY_OK);
    }
    for (int r = 0; r < st.size; r++)
        while (!st.have_zone[r])
            CHECK(ferry_progress(ctx) >= 0);

    /* Everyone streams to everyone; the victim dies part way through. */
    unsigned char msg[2048];
    uint64_t seq[MAX_RANKS] = {0};
    double start = now_s(), died_by = 0;
    long step = 0;
    for (;;) {
        if (st.me == st.victim && step == 3000)
            raise(SIGKILL);
        for (int r = 0; r < st.size; r++) {
            if (r == st.me)
                continue;
            size_t len = sizeof(uint64_t) + (size_t)(step * 37 % 1900);
            memcpy(msg, &seq[r], sizeof(uint64_t));
            for (size_t i = sizeof(uint64_t); i < len; i++)
                msg[i] = (unsigned char)(seq[r] + i);
            int rc = ferry_am_send(ctx, r, TAG_DATA, msg, len);
            if (rc == FERRY_OK)
                seq[r]++;
            else if (r == st.victim && st.failures > 0)
                CHECK(rc == FERRY_ERR_UNREACH);
            else
                CHECK(rc == FERRY_ERR_NO_RESOURCE);
            if (step % 50 == 0) {
                rc = ferry_put(ctx, r, src, ZONE / 2, NULL, st.zone[r].addr, &st.zone[r].rkey,
                               on_put, &st);
                CHECK(rc == FERRY_OK || (r == st.victim && rc == FERRY_ERR_UNREACH));
            }
        }
        CHECK(ferry_progress(ctx) >= 0);
        step++;
        if (st.failures > 0 && died_by == 0)
            died_by = now_s();
        /* Go on a while after the failure, to show the survivors carry on. */
        if (died_by > 0 && step > 6000 && now_s() > died_by + 0.2)
            break;
        CHECK(now_s() < start + 30); /* the failure must be noticed */
    }
    CHECK(st.failures == 1);
    CHECK(st.failed_peer == st.victim);
    CHECK(st.failed_status == FERRY_ERR_UNREACH);
    CHECK(ferry_am_send(ctx, st.victim, TAG_DATA, msg, 16) == FERRY_ERR_UNREACH);
    CHECK(ferry_put(ctx, st.victim, src, 8, NULL, st.zone[st.victim].addr,
                    &st.zone[st.victim].rkey, on_put, &st) == FERRY_ERR_UNREACH);
    /* Everything pending completes; nothing waits on the dead. */
    ferry_flush(ctx, -1);

    /* Survivors finish with one another: every message sent arrives. */
    for (int r = 0; r < st.size; r++) {
        if (r == st.me || r == st.victim)
            continue;
        int rc;
        while ((rc = ferry_am_send(ctx, r, TAG_FIN, msg, 1)) == FERRY_ERR_NO_RESOURCE)
            ferry_progress(ctx);
        CHECK(rc == FERRY_OK);
    }
    for (int r = 0; r < st.size; r++) {
        if (r == st.me || r == st.victim)
            continue;
        while (!st.fin[r])
            CHECK(ferry_progress(ctx) >= 0);
    }
    /* The barrier cannot include the dead rank. */
    CHECK(ferry_barrier(ctx) == FERRY_ERR_UNREACH);
    printf("rank %d: saw rank %d fail after %.0f ms; %d puts done, %d unreachable\n", st.me,
           st.victim, (died_by - start) * 1000, st.puts_done, st.puts_unreach);
    CHECK(ferry_mem_deregister(ctx, zmem) == FERRY_OK);
    ferry_finalize(&ctx);
    free(zone);
    free(src);
    return 0;
}
