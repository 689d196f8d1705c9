/*
 * One kill trial (tests/stress/kill_trials.sh): the ranks exchange random
 * traffic (active messages of random sizes to random peers, puts and gets
 * into each other's windows, fetch-and-adds on a counter there) with a
 * ferry_barrier after every round, until
 * the harness SIGKILLs one of them at a random moment. Every survivor must
 * then learn of it, through the error callback or FERRY_ERR_UNREACH from
 * ferry_barrier, stop, see a second barrier fail at once and ferry_finalize
 * tear down with FERRY_ERR_UNREACH, and exit 0.
 *
 *   kill_trial SEED [MAX_SECONDS]
 *
 * Lines for the harness, on stdout:
 *   kill_trial: ready rank R pid P
 *   kill_trial: rank R detected rank V at T via callback|barrier
 *   kill_trial: rank R finalized: STATUS after MS ms
 * T is CLOCK_REALTIME in seconds, comparable with the harness's `date
 * +%s.%N` at the kill. Any broken promise prints "kill_trial: FAIL ..."
 * and exits 1. A rank that sees no failure within MAX_SECONDS (default 60)
 * fails too: the harness kills one long before.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#define TAG_DATA 40
#define TAG_ZONE 41
#define MAX_RANKS 64
#define ZONE ((size_t)256 * 1024)
#define MAX_MSG 16384

#define FAIL(...)                                                                          \
    do {                                                                                   \
        printf("kill_trial: FAIL rank %d: ", g_rank);                                      \
        printf(__VA_ARGS__);                                                               \
        printf(" (%s:%d)\n", __FILE__, __LINE__);                                          \
        fflush(stdout);                                                                    \
        exit(1);                                                                           \
    } while (0)

static int g_rank = -1;

typedef struct zone {
    uint64_t addr;
    ferry_rkey_t rkey;
} zone_t;

typedef struct state {
    int me, size;
    int failures;     /* error callbacks */
    int failed_peer;  /* the first one named */
    double detected;  /* CLOCK_REALTIME of the first sign of the failure; 0: none */
    const char *via;
    uint64_t expect[MAX_RANKS]; /* next sequence number from each sender */
    zone_t zone[MAX_RANKS];
    bool have_zone[MAX_RANKS];
    int rdma_pending;
} state_t;

static double realtime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* xorshift64*: the traffic is random but repeatable from the seed. */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

static void detected(state_t *st, const char *via)
{
    if (st->detected == 0) {
        st->detected = realtime();
        st->via = via;
    }
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    state_t *st = arg;
    if (peer < 0)
        FAIL("a transport failed as a whole: %s (%s)", msg, ferry_strerror(status));
    if (status != FERRY_ERR_UNREACH)
        FAIL("peer %d failed with %s, expected FERRY_ERR_UNREACH", peer, ferry_strerror(status));
    if (st->failures++ == 0)
        st->failed_peer = peer;
    detected(st, "callback");
    printf("kill_trial: rank %d: error callback: peer %d: %s\n", st->me, peer, msg);
    fflush(stdout);
}

static void on_data(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    uint64_t seq;
    if (len < sizeof(seq))
        FAIL("a message of %zu bytes from rank %d", len, src);
    memcpy(&seq, data, sizeof(seq));
    if (seq != st->expect[src])
        FAIL("message %" PRIu64 " from rank %d, expected %" PRIu64, seq, src, st->expect[src]);
    st->expect[src]++;
    const unsigned char *p = data;
    for (size_t i = sizeof(seq); i < len; i++)
        if (p[i] != (unsigned char)(seq * 7 + i))
            FAIL("message %" PRIu64 " from rank %d: byte %zu differs", seq, src, i);
}

static void on_zone(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    if (len != sizeof(zone_t))
        FAIL("a zone message of %zu bytes from rank %d", len, src);
    memcpy(&st->zone[src], data, sizeof(zone_t));
    st->have_zone[src] = true;
}

static void on_rdma(void *arg, int status)
{
    state_t *st = arg;
    st->rdma_pending--;
    /* Done, or ended by the failure (CANCELED: still queued at finalize). */
    if (status != FERRY_OK && status != FERRY_ERR_UNREACH && status != FERRY_ERR_CANCELED)
        FAIL("a put, get or atomic completed with %s", ferry_strerror(status));
}

/* Sends, progressing while the transport pushes back; false once a failure
 * is known (the send may then be refused). */
static bool send_msg(ferry_ctx_t *ctx, state_t *st, int dst, uint64_t *seq, size_t len)
{
    static unsigned char buf[MAX_MSG];
    memcpy(buf, seq, sizeof(*seq));
    for (size_t i = sizeof(*seq); i < len; i++)
        buf[i] = (unsigned char)(*seq * 7 + i);
    for (;;) {
        int rc = ferry_am_send(ctx, dst, TAG_DATA, buf, len);
        if (rc == FERRY_OK) {
            (*seq)++;
            return true;
        }
        if (rc == FERRY_ERR_UNREACH && st->failures > 0)
            return false;
        if (rc != FERRY_ERR_NO_RESOURCE)
            FAIL("ferry_am_send to rank %d: %s", dst, ferry_strerror(rc));
        if (ferry_progress(ctx) < 0)
            FAIL("ferry_progress failed");
        if (st->failures > 0)
            return false;
    }
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: kill_trial SEED [MAX_SECONDS]\n");
        return 2;
    }
    uint64_t seed = strtoull(argv[1], NULL, 0);
    double max_s = argc > 2 ? atof(argv[2]) : 60;
    state_t st = {.failed_peer = -1};
    ferry_ctx_t *ctx;
    if (ferry_init(NULL, &ctx) != FERRY_OK)
        FAIL("ferry_init");
    st.me = g_rank = ferry_rank(ctx);
    st.size = ferry_size(ctx);
    if (st.size < 2 || st.size > MAX_RANKS)
        FAIL("job of %d ranks (2 to %d)", st.size, MAX_RANKS);
    for (int r = 0; r < st.size; r++) {
        if (ferry_am_max_size(ctx, r) < 0) {
            printf("SKIPPED: rank %d cannot be reached (no transport joins them)\n", r);
            return 77;
        }
    }
    if (ferry_set_error_cb(ctx, on_error, &st) != FERRY_OK ||
        ferry_am_register(ctx, TAG_DATA, on_data, &st) != FERRY_OK ||
        ferry_am_register(ctx, TAG_ZONE, on_zone, &st) != FERRY_OK)
        FAIL("setting the handlers");
    /* Each peer's slot of ZONE bytes, then one counter per rank for the
     * fetch-and-adds. */
    size_t zone_len = (size_t)st.size * ZONE + (size_t)st.size * sizeof(uint64_t);
    unsigned char *zone = calloc(1, zone_len);
    unsigned char *local = malloc(2 * ZONE); /* puts' sources, then gets' sinks */
    if (zone == NULL || local == NULL)
        FAIL("out of memory");
    memset(local, 0x5c, 2 * ZONE);
    ferry_mem_t *zmem;
    if (ferry_mem_register(ctx, zone, zone_len,
                           FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE |
                               FERRY_ACCESS_REMOTE_ATOMIC,
                           &zmem) != FERRY_OK)
        FAIL("ferry_mem_register");
    if (ferry_barrier(ctx) != FERRY_OK)
        FAIL("the first barrier");
    for (int r = 0; r < st.size; r++) {
        zone_t z = {.addr = (uint64_t)(uintptr_t)(zone + (size_t)r * ZONE)};
        if (ferry_mem_rkey(zmem, &z.rkey) != FERRY_OK)
            FAIL("ferry_mem_rkey");
        int rc;
        while ((rc = ferry_am_send(ctx, r, TAG_ZONE, &z, sizeof(z))) == FERRY_ERR_NO_RESOURCE)
            ferry_progress(ctx);
        if (rc != FERRY_OK)
            FAIL("sending the zone to rank %d: %s", r, ferry_strerror(rc));
    }
    for (int r = 0; r < st.size; r++)
        while (!st.have_zone[r])
            if (ferry_progress(ctx) < 0)
                FAIL("ferry_progress failed");
    static ferry_rkey_h *rh[MAX_RANKS];
    for (int r = 0; r < st.size; r++)
        if (r != st.me && ferry_rkey_unpack(ctx, r, &st.zone[r].rkey, &rh[r]) != FERRY_OK)
            FAIL("unpacking rank %d's key", r);
    if (ferry_barrier(ctx) != FERRY_OK)
        FAIL("the barrier after the set-up");
    printf("kill_trial: ready rank %d pid %ld\n", st.me, (long)getpid());
    fflush(stdout);

    /* Rounds of random traffic, each ended by a barrier, until a failure. */
    uint64_t rs = seed * 0x9e3779b97f4a7c15ull + (uint64_t)st.me * 0xbf58476d1ce4e5b9ull + 1;
    uint64_t seq[MAX_RANKS] = {0};
    long max_msg = ferry_am_max_size(ctx, (st.me + 1) % st.size);
    if (max_msg > MAX_MSG)
        max_msg = MAX_MSG;
    double start = monotonic();
    long rounds = 0;
    while (st.failures == 0) {
        unsigned n = (unsigned)(rnd(&rs) % 64);
        for (unsigned i = 0; i < n && st.failures == 0; i++) {
            int dst = (int)(rnd(&rs) % (uint64_t)st.size);
            uint64_t kind = rnd(&rs) % 16;
            if (kind == 12 && dst != st.me) {
                /* A fetch-and-add on this rank's counter at the peer (to a
                 * peer of several rails, ferry's own message). */
                static uint64_t results[64];
                uint64_t counter = st.zone[dst].addr - (uint64_t)st.me * ZONE +
                                   (uint64_t)st.size * ZONE + (uint64_t)st.me * sizeof(uint64_t);
                ferry_op_params_t p = {.cb = on_rdma, .arg = &st};
                int rc = ferry_atomic_fetch(ctx, rh[dst], counter, FERRY_ATOMIC_ADD, 8, 1,
                                            &results[i % 64], &p);
                if (rc == FERRY_OK)
                    st.rdma_pending++;
                else if (!((rc == FERRY_ERR_UNREACH && st.failures > 0) ||
                           rc == FERRY_ERR_NO_RESOURCE))
                    FAIL("ferry_atomic_fetch to rank %d: %s", dst, ferry_strerror(rc));
                continue;
            }
            if (kind < 13 || dst == st.me) {
                size_t len = sizeof(uint64_t) + (size_t)(rnd(&rs) % (uint64_t)(max_msg - 8));
                send_msg(ctx, &st, dst, &seq[dst], len);
                continue;
            }
            /* Into this rank's slot of the peer's zone (put), or back out
             * of it (get). */
            size_t len = 1 + (size_t)(rnd(&rs) % ZONE);
            uint64_t raddr = st.zone[dst].addr;
            int rc = kind < 15 ? ferry_put(ctx, dst, local, len, NULL, raddr,
                                           &st.zone[dst].rkey, on_rdma, &st)
                               : ferry_get(ctx, dst, local + ZONE, len, NULL, raddr,
                                           &st.zone[dst].rkey, on_rdma, &st);
            if (rc == FERRY_OK)
                st.rdma_pending++;
            else if (!(rc == FERRY_ERR_UNREACH && st.failures > 0))
                FAIL("ferry_%s to rank %d: %s", kind < 15 ? "put" : "get", dst,
                     ferry_strerror(rc));
        }
        if (st.failures > 0)
            break;
        int rc = ferry_barrier(ctx);
        if (rc == FERRY_ERR_UNREACH) {
            detected(&st, "barrier");
            break;
        }
        if (rc != FERRY_OK)
            FAIL("ferry_barrier: %s", ferry_strerror(rc));
        rounds++;
        if (monotonic() > start + max_s)
            FAIL("no failure seen in %.0f s (%ld rounds)", max_s, rounds);
    }
    /* The callback names the rank; a barrier that failed first is followed
     * by it (the failure notices reach every rank). */
    double wait_from = monotonic();
    while (st.failures == 0) {
        if (ferry_progress(ctx) < 0)
            FAIL("ferry_progress failed");
        if (monotonic() > wait_from + 10)
            FAIL("the barrier failed but no error callback named a rank within 10 s");
    }
    printf("kill_trial: rank %d detected rank %d at %.6f via %s after %ld rounds\n", st.me,
           st.failed_peer, st.detected, st.via, rounds);
    fflush(stdout);

    /* A flush to the dead rank ends at once: what was in flight to it
     * (puts, gets, atomics, whichever way they travel) completes with the
     * failure, which it returns (FERRY_OK when nothing was left). */
    double f0 = monotonic();
    int frc = ferry_flush(ctx, st.failed_peer);
    if (frc != FERRY_ERR_UNREACH && frc != FERRY_OK)
        FAIL("ferry_flush to the failed rank %d returned %s", st.failed_peer,
             ferry_strerror(frc));
    if (monotonic() - f0 > 5)
        FAIL("a flush to the failed rank took %.0f ms", (monotonic() - f0) * 1000);

    /* Later barriers fail without waiting on anyone. The bound only tells
     * a barrier that waited (for the dead rank, or for a timeout) from one
     * that did not, on however loaded a machine; the time is printed. */
    double t0 = monotonic();
    int rc = ferry_barrier(ctx);
    if (rc != FERRY_ERR_UNREACH)
        FAIL("a barrier after the failure returned %s", ferry_strerror(rc));
    printf("kill_trial: rank %d: a barrier after the failure returned after %.1f ms\n", st.me,
           (monotonic() - t0) * 1000);
    if (monotonic() - t0 > 5)
        FAIL("a barrier after the failure took %.0f ms", (monotonic() - t0) * 1000);
    /* zmem stays registered: the other survivors' puts may still be on
     * their way. ferry_finalize releases it once they have all left. */
    t0 = monotonic();
    rc = ferry_finalize(&ctx);
    printf("kill_trial: rank %d finalized: %s after %.0f ms\n", st.me, ferry_status_name(rc),
           (monotonic() - t0) * 1000);
    fflush(stdout);
    if (rc != FERRY_ERR_UNREACH)
        FAIL("ferry_finalize returned %s, expected FERRY_ERR_UNREACH", ferry_status_name(rc));
    if (st.rdma_pending != 0)
        FAIL("%d puts, gets and atomics never completed", st.rdma_pending);
    free(zone);
    free(local);
    return 0;
}
