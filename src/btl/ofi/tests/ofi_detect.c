/*
 * A rank SIGKILLed while nothing is in flight to it, and that some ranks
 * never talked to: every survivor must be told, through the error callback,
 * within a bound, and ferry_finalize must return on every survivor.
 *
 *   ferryrun --keep-going -n N ofi_detect [busy]
 *
 * The last rank is the victim. Ranks 0 .. N-2 exchange a few messages in a
 * ring among themselves (rank 0 never sends to the victim, nor the victim
 * to anyone); with "busy" every survivor also streams to the victim until
 * it dies. Then the victim writes the time (CLOCK_REALTIME, microseconds) to
 * stdout and kills itself; each survivor prints the time its error callback
 * named the victim, and "detected after N us", which run_detect.sh reads to
 * give the median and the longest.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "../../../../tests/unit/check.h"

#define TAG_RING 50
#define TAG_DIE 51
#define BOUND_S 20.0

typedef struct state {
    int me, size, victim;
    int ring;
    bool die;
    int failures, failed_peer, failed_status;
    int64_t told_us; /* realtime of the callback */
} state_t;

static int64_t real_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    state_t *st = arg;
    if (st->failures++ == 0)
        st->told_us = real_us();
    st->failed_peer = peer;
    st->failed_status = status;
    printf("rank %d: peer %d failed: %s (%s)\n", st->me, peer, msg, ferry_status_name(status));
    fflush(stdout);
}

static void on_am(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    state_t *st = arg;
    if (tag == TAG_RING)
        st->ring++;
    else if (tag == TAG_DIE)
        st->die = true;
}

static void send_retry(ferry_ctx_t *ctx, int dst, int tag, const void *data, size_t len)
{
    int rc;
    double end = mono_s() + BOUND_S;
    while ((rc = ferry_am_send(ctx, dst, tag, data, len)) == FERRY_ERR_NO_RESOURCE &&
           mono_s() < end)
        ferry_progress(ctx);
    CHECK(rc == FERRY_OK);
}

int main(int argc, char **argv)
{
    bool busy = argc > 1 && strcmp(argv[1], "busy") == 0;
    state_t st = {.failed_peer = -1};
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    st.me = ferry_rank(ctx);
    st.size = ferry_size(ctx);
    st.victim = st.size - 1;
    CHECK(st.size >= 3);
    for (int r = 0; r < st.size; r++)
        if (ferry_am_max_size(ctx, r) < 0) {
            printf("SKIPPED: rank %d cannot be reached\n", r);
            return 77;
        }
    CHECK(ferry_set_error_cb(ctx, on_error, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_RING, on_am, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_DIE, on_am, &st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    if (st.me == st.victim) {
        /* Told when to die by rank 1 (rank 0 never talks to it). */
        double end = mono_s() + BOUND_S;
        while (!st.die && mono_s() < end)
            ferry_progress(ctx);
        CHECK(st.die);
        /* A moment of nothing in flight, then death. */
        usleep(50000);
        printf("victim: killed at %lld us\n", (long long)real_us());
        fflush(stdout);
        raise(SIGKILL);
    }

    /* The survivors' ring, among themselves. */
    int n = st.size - 1;
    for (int i = 0; i < 10; i++)
        send_retry(ctx, (st.me + 1) % n, TAG_RING, &i, sizeof(i));
    double end = mono_s() + BOUND_S;
    while (st.ring < 10 && mono_s() < end)
        ferry_progress(ctx);
    CHECK(st.ring == 10);
    if (st.me == 1)
        send_retry(ctx, st.victim, TAG_DIE, "", 0);
    unsigned char blob[1024];
    memset(blob, 7, sizeof(blob));
    double start = mono_s();
    while (st.failures == 0 && mono_s() < start + BOUND_S) {
        if (busy && st.me != 0) {
            int rc = ferry_am_send(ctx, st.victim, TAG_RING, blob, sizeof(blob));
            CHECK(rc == FERRY_OK || rc == FERRY_ERR_NO_RESOURCE || rc == FERRY_ERR_UNREACH);
        }
        ferry_progress(ctx);
    }
    int result = 0;
    if (st.failures != 1 || st.failed_peer != st.victim || st.failed_status != FERRY_ERR_UNREACH) {
        printf("rank %d: FAILED: the victim's death was not reported once (%d reports, last "
               "peer %d)\n",
               st.me, st.failures, st.failed_peer);
        result = 1;
    } else {
        printf("rank %d: told at %lld us\n", st.me, (long long)st.told_us);
    }
    fflush(stdout);
    /* Must return, on ranks that never talked to the victim too. */
    double fin = mono_s();
    ferry_finalize(&ctx);
    printf("rank %d: finalized in %.0f ms\n", st.me, (mono_s() - fin) * 1000);
    return result;
}
