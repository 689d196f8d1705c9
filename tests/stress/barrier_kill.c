/*
 * A rank dies before, during or after a ferry_barrier, or during
 * ferry_finalize: every survivor's barrier and finalize must return
 * FERRY_ERR_UNREACH within a bound, not only the dead rank's partners in the
 * barrier's pattern, and every survivor's error callback must name it.
 *
 *   barrier_kill MODE [VICTIM]
 *
 * MODE:
 *   before    the victim dies before the barrier, having sent nothing
 *   during    the victim dies inside the barrier, after its first message
 *             (the others enter late, so it waits there when it dies): a
 *             survivor that needs its second one fails, the others may
 *             complete (every rank entered) and fail the next
 *   after     the victim completes a barrier and dies at once, every one of
 *             its messages sent: that barrier may succeed or fail, the next
 *             must fail
 *   finalize  the victim dies while the others are in ferry_finalize
 * VICTIM defaults to the last rank. With FERRY_BTL=self the ranks reach each
 * other through no transport, and the barriers are ferryrun's (--keep-going
 * fails them once the victim has ended). Run under ferryrun --keep-going; each
 * survivor prints "barrier_kill: rank R ok ..." (run_barrier_kill.sh counts
 * them), and the victim's SIGKILL is the job's status.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "../unit/check.h"

/* How long a survivor may take to learn of the failure. */
#define BOUND_S 10.0

typedef struct state {
    int me;
    int failures;
    int failed_peer;
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
    if (st->failures++ == 0)
        st->failed_peer = peer;
    printf("barrier_kill: rank %d: error callback: peer %d: %s\n", st->me, peer, msg);
    fflush(stdout);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* SIGKILL to this process ms from now, whatever it is doing then. */
static void kill_me_in(long ms)
{
    struct sigevent sev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGKILL};
    timer_t t;
    CHECK(timer_create(CLOCK_MONOTONIC, &sev, &t) == 0);
    struct itimerspec its = {.it_value = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L}};
    CHECK(timer_settime(t, 0, &its, NULL) == 0);
}

/* A barrier that must fail with FERRY_ERR_UNREACH within the bound. */
static double failing_barrier(ferry_ctx_t *ctx, const char *what)
{
    double t0 = now_s();
    int rc = ferry_barrier(ctx);
    double dt = now_s() - t0;
    if (rc != FERRY_ERR_UNREACH)
        printf("barrier_kill: %s returned %s\n", what, ferry_status_name(rc));
    CHECK(rc == FERRY_ERR_UNREACH);
    CHECK(dt < BOUND_S);
    return dt;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2 || argc == 3);
    const char *mode = argv[1];
    ferry_ctx_t *ctx;
    state_t st = {.failed_peer = -1};
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    st.me = ferry_rank(ctx);
    int size = ferry_size(ctx);
    int victim = argc == 3 ? atoi(argv[2]) : size - 1;
    CHECK(size >= 2 && victim >= 0 && victim < size);
    CHECK(ferry_set_error_cb(ctx, on_error, &st) == FERRY_OK);
    bool me_victim = st.me == victim;
    /* With no transport between the ranks (FERRY_BTL=self), barriers are the
     * launcher's, and only ferryrun knows of the death: no callback. */
    bool joined = true;
    for (int r = 0; r < size; r++)
        joined = joined && ferry_am_max_size(ctx, r) >= 0;
    double first = 0, second = 0;

    if (strcmp(mode, "before") == 0) {
        if (me_victim)
            raise(SIGKILL);
        first = failing_barrier(ctx, "the barrier after the death");
    } else if (strcmp(mode, "during") == 0) {
        if (me_victim) {
            kill_me_in(200);
            ferry_barrier(ctx);
            CHECK(!"the victim's barrier completed before it died");
        }
        sleep_ms(400);
        /* The victim sent its first message only: the rank whose second
         * round waits for it cannot complete. The others may, before they
         * hear of the death: every rank did enter. */
        if (st.me == (victim + 2) % size) {
            first = failing_barrier(ctx, "the barrier the victim died in");
        } else {
            double t0 = now_s();
            int rc = ferry_barrier(ctx);
            first = now_s() - t0;
            CHECK(rc == FERRY_OK || rc == FERRY_ERR_UNREACH);
            CHECK(first < BOUND_S);
        }
    } else if (strcmp(mode, "after") == 0) {
        int rc = ferry_barrier(ctx);
        if (me_victim)
            raise(SIGKILL);
        CHECK(rc == FERRY_OK || rc == FERRY_ERR_UNREACH);
        printf("barrier_kill: rank %d: the victim's last barrier: %s\n", st.me,
               ferry_status_name(rc));
        first = failing_barrier(ctx, "the barrier after the victim's last");
    } else if (strcmp(mode, "finalize") == 0) {
        CHECK(ferry_barrier(ctx) == FERRY_OK);
        if (me_victim) {
            sleep_ms(300);
            raise(SIGKILL);
        }
    } else {
        fprintf(stderr, "barrier_kill: unknown mode %s\n", mode);
        return 2;
    }
    if (strcmp(mode, "finalize") != 0) {
        /* Every later barrier fails at once. */
        second = failing_barrier(ctx, "a later barrier");
        CHECK(second < 0.1);
    }
    double t0 = now_s();
    int rc = ferry_finalize(&ctx);
    double fin = now_s() - t0;
    CHECK(rc == FERRY_ERR_UNREACH);
    CHECK(fin < BOUND_S);
    CHECK(!joined || (st.failures >= 1 && st.failed_peer == victim));
    printf("barrier_kill: rank %d ok: barrier failed after %.0f ms, the next after %.1f ms, "
           "ferry_finalize returned FERRY_ERR_UNREACH after %.0f ms\n",
           st.me, first * 1000, second * 1000, fin * 1000);
    return 0;
}
