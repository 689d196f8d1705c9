/*
 * One-sided operations through key handles (ferry.h): atomics summing
 * exactly under contention, a compare-and-swap lock guarding a plain
 * counter, 32- and 64-bit atomics side by side in one registration, put
 * with notification whose handler always sees the data, requests tested
 * from a loop without callbacks, flush and barrier as a quiet for active
 * messages, and every argument check attacked. Runs alone or under
 * ferryrun over whatever FERRY_BTL names.
 *
 *   test_onesided [--need-peers] [--alloc] [--iters[=]N] [--quiet-only]
 *
 * --need-peers: a rank no transport reaches makes the run exit 77 (skipped,
 * with the reason) rather than pass without having tried. --alloc: the
 * target memory comes from ferry_mem_alloc (sm: its shared heap). --iters:
 * operations per rank (default 500). --quiet-only: only the case,
 * every rank but 0 sending 1000 increments to rank 0 before a barrier.
 * --replies: only replies from handlers under back pressure (run with tiny
 * rings); --replies-refused: the same with FERRY_CB_QUEUE_MAX=0, where a
 * reply may be refused.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>

#include <ferry/ferry.h>

#include "../unit/capture.h"
#include "../unit/check.h"

#define TAG_RKEY 3
#define TAG_INC 4
#define TAG_NOTE 5
#define TAG_PROBE 6
#define TAG_PING 9
#define TAG_PONG 10
#define TAG_COUNT 11

#define MAX_RANKS 64
#define NOTE_ROUNDS 40
#define NOTE_SLOT 4096
#define NOTE_BURST 2000 /* into the same slots, NOTE_ROUNDS * NOTE_SLOT / 2000 bytes each */

/* The target region of rank 0 (and of every rank, for put-notify):
 * counters first, then the lock's plain counter, then the notify slots. */
enum {
    OFF_CTR64 = 0,    /* fetch-add 64-bit */
    OFF_CTR32A = 8,   /* fetch-add 32-bit */
    OFF_CTR32B = 12,  /* add 32-bit, beside it */
    OFF_LOCK = 16,    /* cswap lock word (64-bit) */
    OFF_PLAIN = 24,   /* guarded by the lock, plain put/get */
    OFF_BITS = 32,    /* and/or/xor/min/max */
    OFF_MIN = 40,
    OFF_MAX = 48,
    OFF_NOTES = 4096
};

typedef struct rkeys {
    ferry_rkey_t key[MAX_RANKS];
    ferry_rkey_t noatomic[MAX_RANKS];
    uint64_t base[MAX_RANKS];
    uint64_t nabase[MAX_RANKS];
    int got;
} rkeys_t;

typedef struct rkey_msg {
    ferry_rkey_t key;
    ferry_rkey_t noatomic;
    uint64_t base;
    uint64_t nabase;
} rkey_msg_t;

static rkeys_t g_keys;
static long g_increments;
static char *g_region;
static size_t g_region_len; /* a multiple of the page size: the registration's length */
static int g_note_ok, g_note_bad;

static void on_rkey(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    (void)ctx, (void)tag, (void)arg;
    CHECK(len == sizeof(rkey_msg_t) && src >= 0 && src < MAX_RANKS);
    rkey_msg_t m;
    memcpy(&m, data, sizeof(m));
    g_keys.key[src] = m.key;
    g_keys.noatomic[src] = m.noatomic;
    g_keys.base[src] = m.base;
    g_keys.nabase[src] = m.nabase;
    g_keys.got++;
}

static void on_inc(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)data, (void)len, (void)arg;
    g_increments++;
}

/* A notification: offset, length and checksum of the data put before it. */
typedef struct note {
    uint64_t off;
    uint64_t len;
    uint64_t sum;
} note_t;

static uint64_t checksum(const unsigned char *p, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void on_note(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    note_t n;
    if (len != sizeof(n)) {
        g_note_bad++;
        return;
    }
    memcpy(&n, data, sizeof(n));
    if (n.off + n.len > OFF_NOTES + (size_t)MAX_RANKS * NOTE_ROUNDS * NOTE_SLOT ||
        checksum((unsigned char *)g_region + n.off, n.len) != n.sum)
        g_note_bad++;
    else
        g_note_ok++;
}

static int g_probe_rc[4];
static int g_probe_ran;
static ferry_req_t *g_probe_req;

/* Inside a handler: blocking calls refuse, starting calls work. */
static void on_probe(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)src, (void)tag, (void)data, (void)len, (void)arg;
    g_probe_rc[0] = ferry_flush(ctx, -1);
    g_probe_rc[1] = ferry_barrier(ctx);
    g_probe_rc[2] = g_probe_req != NULL ? ferry_req_wait(ctx, g_probe_req) : FERRY_ERR_BUSY;
    ferry_ctx_t *h = ctx;
    g_probe_rc[3] = ferry_finalize(&h);
    g_probe_ran++;
}

static void spin_progress(ferry_ctx_t *ctx, const int *counter, int target)
{
    for (long spins = 0; *counter < target; spins++) {
        CHECK(ferry_progress(ctx) >= 0);
        CHECK(spins < 200000000L);
    }
}

static int send_retry(ferry_ctx_t *ctx, int dst, int tag, const void *buf, size_t len)
{
    int rc;
    while ((rc = ferry_am_send(ctx, dst, tag, buf, len)) == FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    return rc;
}

/* Retries what the transport had no room for, and checks it went. */
#define RETRY_OK(call)                                                                    \
    do {                                                                                  \
        int rc_;                                                                          \
        while ((rc_ = (call)) == FERRY_ERR_NO_RESOURCE)                                   \
            ferry_progress(ctx);                                                          \
        CHECK(rc_ == FERRY_OK);                                                           \
    } while (0)

static uint64_t load64(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t addr)
{
    uint64_t v = 0;
    ferry_req_t *req = NULL;
    ferry_op_params_t p = {.req_out = &req};
    RETRY_OK(ferry_get_nb(ctx, rh, addr, &v, sizeof(v), &p));
    if (req != NULL)
        CHECK(ferry_req_wait(ctx, req) == FERRY_OK);
    return v;
}

/* N ranks x M fetch-adds (64 and 32 bits), adds, bit operations, all to
 * rank 0. */
static void test_counter(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t base, int iters)
{
    int me = ferry_rank(ctx), size = ferry_size(ctx);
    uint64_t last64 = 0;
    uint32_t last32 = 0;
    for (int i = 0; i < iters; i++) {
        uint64_t old64 = UINT64_MAX;
        uint32_t old32 = UINT32_MAX;
        ferry_req_t *req = NULL;
        ferry_op_params_t p = {.req_out = &req};
        RETRY_OK(ferry_atomic_fetch(ctx, rh, base + OFF_CTR64, FERRY_ATOMIC_ADD, 8, 1, &old64,
                                       &p));
        if (req != NULL)
            CHECK(ferry_req_wait(ctx, req) == FERRY_OK);
        /* Every rank's fetched values grow: the adds are one order. */
        CHECK(i == 0 || old64 > last64);
        last64 = old64;
        RETRY_OK(ferry_atomic_fetch(ctx, rh, base + OFF_CTR32A, FERRY_ATOMIC_ADD, 4,
                                       0x100000001ull, &old32, NULL));
        CHECK(ferry_flush(ctx, 0) == FERRY_OK);
        CHECK(i == 0 || old32 > last32);
        last32 = old32;
        RETRY_OK(ferry_atomic(ctx, rh, base + OFF_CTR32B, FERRY_ATOMIC_ADD, 4, 2, NULL));
    }
    RETRY_OK(ferry_atomic(ctx, rh, base + OFF_BITS, FERRY_ATOMIC_OR, 8, 1ull << (me % 64),
                             NULL));
    RETRY_OK(ferry_atomic(ctx, rh, base + OFF_MIN, FERRY_ATOMIC_MIN, 8,
                             (uint64_t)(int64_t)(-me), NULL));
    RETRY_OK(ferry_atomic(ctx, rh, base + OFF_MAX, FERRY_ATOMIC_MAX, 8, (uint64_t)me, NULL));
    CHECK(ferry_flush(ctx, 0) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    /* Everything is complete at rank 0 and visible to every rank. */
    uint64_t total = (uint64_t)size * (uint64_t)iters;
    CHECK(load64(ctx, rh, base + OFF_CTR64) == total);
    uint64_t both = load64(ctx, rh, base + OFF_CTR32A);
    CHECK((uint32_t)both == (uint32_t)total);               /* the 32-bit fetch-adds */
    CHECK((uint32_t)(both >> 32) == (uint32_t)(2 * total)); /* its neighbour, untouched */
    uint64_t bits = 0;
    for (int r = 0; r < size; r++)
        bits |= 1ull << (r % 64);
    CHECK(load64(ctx, rh, base + OFF_BITS) == bits);
    CHECK((int64_t)load64(ctx, rh, base + OFF_MIN) == -(int64_t)(size - 1));
    CHECK(load64(ctx, rh, base + OFF_MAX) == (uint64_t)(size - 1));
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    /* and, xor, swap: one rank, values known. */
    if (me == 0) {
        uint64_t old = 0;
        RETRY_OK(ferry_atomic_fetch(ctx, rh, base + OFF_BITS, FERRY_ATOMIC_AND, 8, 3, &old,
                                       NULL));
        CHECK(ferry_flush(ctx, 0) == FERRY_OK && old == bits);
        RETRY_OK(ferry_atomic_fetch(ctx, rh, base + OFF_BITS, FERRY_ATOMIC_XOR, 8, 5, &old,
                                       NULL));
        CHECK(ferry_flush(ctx, 0) == FERRY_OK && old == (bits & 3));
        RETRY_OK(ferry_atomic_fetch(ctx, rh, base + OFF_BITS, FERRY_ATOMIC_SWAP, 8, 42, &old,
                                       NULL));
        CHECK(ferry_flush(ctx, 0) == FERRY_OK && old == ((bits & 3) ^ 5));
        CHECK(load64(ctx, rh, base + OFF_BITS) == 42);
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    printf("ok  %d ranks x %d fetch-adds (64 and 32 bits) summed exactly\n", size, iters);
}

/* A spin lock by compare-and-swap guards a plain counter that is read by
 * get and written by put. */
static void test_lock(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t base, int iters)
{
    int me = ferry_rank(ctx), size = ferry_size(ctx);
    for (int i = 0; i < iters; i++) {
        uint64_t old;
        for (;;) {
            old = UINT64_MAX;
            ferry_req_t *req = NULL;
            ferry_op_params_t p = {.req_out = &req};
            RETRY_OK(ferry_atomic_cswap(ctx, rh, base + OFF_LOCK, 8, 0, (uint64_t)me + 1,
                                           &old, &p));
            if (req != NULL) {
                /* A loop without callbacks: test until done. */
                int st = -1, done;
                while ((done = ferry_req_test(ctx, req, &st)) == 0)
                    ;
                CHECK(done == 1 && st == FERRY_OK);
            }
            if (old == 0)
                break;
            CHECK(old >= 1 && old <= (uint64_t)size && old != (uint64_t)me + 1);
            /* Rank 0's own attempts complete inside the call (CPU
             * atomics): it must still progress, or the holder's release,
             * executed by rank 0, never happens. More ranks than cores
             * here: let the holder run. */
            CHECK(ferry_progress(ctx) >= 0);
            sched_yield();
        }
        uint64_t v = load64(ctx, rh, base + OFF_PLAIN) + 1;
        RETRY_OK(ferry_put_nb(ctx, rh, base + OFF_PLAIN, &v, sizeof(v), NULL));
        CHECK(ferry_flush(ctx, 0) == FERRY_OK); /* the put is complete before the release */
        RETRY_OK(ferry_atomic_fetch(ctx, rh, base + OFF_LOCK, FERRY_ATOMIC_SWAP, 8, 0, &old,
                                       NULL));
        CHECK(ferry_flush(ctx, 0) == FERRY_OK);
        CHECK(old == (uint64_t)me + 1);
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(load64(ctx, rh, base + OFF_PLAIN) == (uint64_t)size * (uint64_t)iters);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    printf("ok  a compare-and-swap lock kept %d x %d plain increments exact\n", size, iters);
}

static int g_comp_calls, g_comp_status;
static void on_comp(void *arg, int status)
{
    (void)arg;
    g_comp_calls++;
    g_comp_status = status;
}

/* Put with notification to the next rank: the handler checks the data. */
static void test_notify(ferry_ctx_t *ctx, ferry_rkey_h **rhs)
{
    int me = ferry_rank(ctx), size = ferry_size(ctx);
    int next = (me + 1) % size;
    unsigned char *buf = malloc(NOTE_SLOT);
    CHECK(buf != NULL);
    int want_comp = 0;
    for (int round = 0; round < NOTE_ROUNDS; round++) {
        size_t len = 1 + ((size_t)round * 997 + (size_t)me * 131) % NOTE_SLOT;
        for (size_t i = 0; i < len; i++)
            buf[i] = (unsigned char)(i * 7 + (size_t)round * 13 + (size_t)me);
        note_t n = {.off = OFF_NOTES + ((uint64_t)me * NOTE_ROUNDS + (uint64_t)round) * NOTE_SLOT,
                    .len = len,
                    .sum = checksum(buf, len)};
        ferry_req_t *req = NULL;
        ferry_op_params_t p = {.cb = on_comp, .req_out = &req};
        uint64_t base = g_keys.base[next];
        RETRY_OK(ferry_put_notify(ctx, rhs[next], base + n.off, buf, len, TAG_NOTE, &n,
                                     sizeof(n), round % 2 == 0 ? &p : NULL));
        if (round % 2 == 0) {
            want_comp++;
            /* The callback never ran inside the call. */
            CHECK(g_comp_calls == want_comp - 1);
            /* NULL: done inside the call (sm into a peer's ferry_mem_alloc
             * memory); its callback comes from progress all the same. */
            if (req != NULL)
                CHECK(ferry_req_wait(ctx, req) == FERRY_OK);
            spin_progress(ctx, &g_comp_calls, want_comp);
            CHECK(g_comp_status == FERRY_OK);
        } else {
            /* The buffer may be reused only at completion. */
            CHECK(ferry_flush(ctx, next) == FERRY_OK);
        }
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(g_note_bad == 0);
    CHECK(g_note_ok == NOTE_ROUNDS);
    free(buf);
    printf("ok  %d puts with notification, each handler saw its data\n", NOTE_ROUNDS);
    /* Every rank has counted before any burst arrives. */
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    /* A burst with nothing waited for between: more notifications than a
     * small ring holds, so that some wait in ferry behind puts already
     * done (or queued); each still finds its own data. */
    size_t piece = (size_t)NOTE_ROUNDS * NOTE_SLOT / NOTE_BURST;
    unsigned char *bufs = malloc((size_t)NOTE_ROUNDS * NOTE_SLOT);
    CHECK(bufs != NULL);
    for (int k = 0; k < NOTE_BURST; k++) {
        size_t len = 1 + ((size_t)k * 37 + (size_t)me) % piece;
        unsigned char *b = bufs + (size_t)k * piece;
        for (size_t i = 0; i < len; i++)
            b[i] = (unsigned char)(i * 5 + (size_t)k * 11 + (size_t)me);
        note_t n = {.off = OFF_NOTES + (uint64_t)me * NOTE_ROUNDS * NOTE_SLOT + (uint64_t)k * piece,
                    .len = len,
                    .sum = checksum(b, len)};
        RETRY_OK(ferry_put_notify(ctx, rhs[next], g_keys.base[next] + n.off, b, len, TAG_NOTE,
                                     &n, sizeof(n), NULL));
    }
    CHECK(ferry_flush(ctx, next) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(g_note_bad == 0);
    CHECK(g_note_ok == NOTE_ROUNDS + NOTE_BURST);
    free(bufs);
    printf("ok  a burst of %d puts with notification, each handler saw its data\n", NOTE_BURST);
}

/* Requests: a get waited on by test alone, a flush request, callbacks
 * from progress only. */
static void test_requests(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t base)
{
    uint64_t v = 0;
    ferry_req_t *req = NULL;
    ferry_op_params_t p = {.req_out = &req};
    req = (ferry_req_t *)&p; /* anything but NULL: the call must set it */
    RETRY_OK(ferry_get_nb(ctx, rh, base + OFF_CTR64, &v, sizeof(v), &p));
    int st = -1, done;
    capture_t cap;
    if (req != NULL) {
        long spins = 0;
        while ((done = ferry_req_test(ctx, req, &st)) == 0)
            CHECK(++spins < 100000000L);
        CHECK(done == 1 && st == FERRY_OK);
        /* A request already done is refused, not read. */
        capture_begin(&cap);
        CHECK(ferry_req_test(ctx, req, &st) == FERRY_ERR_INVALID);
        CHECK(ferry_req_wait(ctx, req) == FERRY_ERR_INVALID);
        CHECK(strstr(capture_end(&cap), "not a live request") != NULL);
    }
    /* Else done inside the call (sm into a peer's ferry_mem_alloc memory). */
    CHECK(v == load64(ctx, rh, base + OFF_CTR64));

    /* A non-blocking flush; with a callback as well. */
    int calls = g_comp_calls;
    ferry_op_params_t fp = {.cb = on_comp, .req_out = &req};
    CHECK(ferry_flush_nb(ctx, -1, &fp) == FERRY_OK);
    CHECK(g_comp_calls == calls);
    CHECK(req != NULL);
    CHECK(ferry_req_wait(ctx, req) == FERRY_OK);
    spin_progress(ctx, &g_comp_calls, calls + 1);
    /* Waited for and its callback run, it is gone: refused, not read. */
    capture_begin(&cap);
    CHECK(ferry_req_test(ctx, req, &st) == FERRY_ERR_INVALID);
    CHECK(strstr(capture_end(&cap), "not a live request") != NULL);
    /* An atomic's callback, whether it completed inside the call or not. */
    uint64_t old;
    calls = g_comp_calls;
    ferry_op_params_t cp = {.cb = on_comp};
    RETRY_OK(ferry_atomic_fetch(ctx, rh, base + OFF_MAX, FERRY_ATOMIC_MAX, 8, 0, &old, &cp));
    CHECK(g_comp_calls == calls);
    spin_progress(ctx, &g_comp_calls, calls + 1);
    CHECK(g_comp_status == FERRY_OK);
    printf("ok  requests: tested from a loop, flush_nb, callbacks from progress only\n");
}

/* Every argument check, attacked. */
static void test_refusals(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t base)
{
    int me = ferry_rank(ctx), size = ferry_size(ctx);
    uint64_t r64 = 0;
    capture_t cap;
    capture_begin(&cap);
    /* Sizes, alignment, operations, result. */
    CHECK(ferry_atomic(ctx, rh, base + OFF_CTR64, FERRY_ATOMIC_ADD, 0, 1, NULL) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_atomic(ctx, rh, base + OFF_CTR64, FERRY_ATOMIC_ADD, 2, 1, NULL) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_atomic(ctx, rh, base + OFF_CTR64, FERRY_ATOMIC_ADD, 16, 1, NULL) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_atomic(ctx, rh, base + OFF_CTR64 + 4, FERRY_ATOMIC_ADD, 8, 1, NULL) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_atomic_fetch(ctx, rh, base + OFF_CTR32A + 2, FERRY_ATOMIC_ADD, 4, 1, &r64,
                             NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_atomic_cswap(ctx, rh, base + OFF_LOCK + 1, 8, 0, 1, &r64, NULL) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_atomic(ctx, rh, base, (ferry_atomic_op_t)7, 8, 1, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_atomic(ctx, rh, base, (ferry_atomic_op_t)-1, 8, 1, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_atomic_fetch(ctx, rh, base, FERRY_ATOMIC_ADD, 8, 1, NULL, NULL) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_atomic_cswap(ctx, rh, base, 8, 0, 1, NULL, NULL) == FERRY_ERR_INVALID);
    /* Out of range: below, past the end, straddling the end. */
    CHECK(ferry_atomic(ctx, rh, base - 8, FERRY_ATOMIC_ADD, 8, 1, NULL) == FERRY_ERR_ACCESS);
    CHECK(ferry_atomic(ctx, rh, base + g_region_len, FERRY_ATOMIC_ADD, 8, 1, NULL) ==
          FERRY_ERR_ACCESS);
    CHECK(ferry_atomic(ctx, rh, UINT64_MAX - 7, FERRY_ATOMIC_ADD, 8, 1, NULL) ==
          FERRY_ERR_ACCESS);
    CHECK(ferry_put_nb(ctx, rh, base + g_region_len - 4, &r64, 8, NULL) == FERRY_ERR_ACCESS);
    CHECK(ferry_get_nb(ctx, rh, UINT64_MAX, &r64, 8, NULL) == FERRY_ERR_ACCESS);
    /* NULL everything. */
    CHECK(ferry_atomic(NULL, rh, base, FERRY_ATOMIC_ADD, 8, 1, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_atomic(ctx, NULL, base, FERRY_ATOMIC_ADD, 8, 1, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_put_nb(ctx, rh, base, NULL, 8, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_get_nb(ctx, NULL, base, &r64, 8, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_req_test(ctx, NULL, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_req_wait(NULL, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_flush_nb(ctx, -2, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_flush_nb(ctx, size, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_flush_nb(NULL, 0, NULL) == FERRY_ERR_INVALID);
    /* A local registration that does not cover the buffer. */
    uint64_t local_buf[4];
    ferry_mem_t *lm;
    CHECK(ferry_mem_register(ctx, local_buf, sizeof(local_buf), FERRY_ACCESS_LOCAL, &lm) ==
          FERRY_OK);
    ferry_op_params_t lp = {.local = lm};
    CHECK(ferry_put_nb(ctx, rh, base + OFF_PLAIN, &r64, 8, &lp) == FERRY_ERR_INVALID);
    CHECK(ferry_atomic_fetch(ctx, rh, base, FERRY_ATOMIC_ADD, 8, 0, &local_buf[3] + 1, &lp) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_atomic_fetch(ctx, rh, base + OFF_MAX, FERRY_ATOMIC_MAX, 8, 0, &local_buf[1],
                             &lp) == FERRY_OK);
    /* A non-fetching atomic has no local buffer: a registration given is
     * not held against it. */
    RETRY_OK(ferry_atomic(ctx, rh, base + OFF_CTR32B, FERRY_ATOMIC_ADD, 4, 0, &lp));
    CHECK(ferry_flush(ctx, 0) == FERRY_OK);
    CHECK(ferry_mem_deregister(ctx, lm) == FERRY_OK);
    /* Put with notification: tag, payload. */
    char pl[FERRY_PUT_NOTIFY_MAX + 1] = {0};
    CHECK(ferry_put_notify(ctx, rh, base + OFF_PLAIN, &r64, 0, -1, pl, 1, NULL) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_put_notify(ctx, rh, base + OFF_PLAIN, &r64, 0, FERRY_AM_TAG_MAX + 1, pl, 1,
                           NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_put_notify(ctx, rh, base + OFF_PLAIN, &r64, 0, TAG_NOTE, NULL, 1, NULL) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_put_notify(ctx, rh, base + OFF_PLAIN, &r64, 0, TAG_NOTE, pl, sizeof(pl), NULL) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_put_notify(ctx, rh, base + g_region_len, &r64, 8, TAG_NOTE, pl, 1, NULL) ==
          FERRY_ERR_ACCESS);
    CHECK(ferry_put_notify(ctx, rh, base - 8, &r64, 8, TAG_NOTE, pl, 1, NULL) ==
          FERRY_ERR_ACCESS);
    CHECK(ferry_put_notify(ctx, rh, base + OFF_PLAIN, NULL, 8, TAG_NOTE, pl, 1, NULL) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_put_notify(NULL, rh, base + OFF_PLAIN, &r64, 8, TAG_NOTE, pl, 1, NULL) ==
          FERRY_ERR_INVALID);

    /* Keys: wrong rank, garbage, NULL, out of range. */
    ferry_rkey_h *bad = (ferry_rkey_h *)0x1;
    CHECK(ferry_rkey_unpack(ctx, -1, &g_keys.key[0], &bad) == FERRY_ERR_INVALID);
    CHECK(ferry_rkey_unpack(ctx, size, &g_keys.key[0], &bad) == FERRY_ERR_INVALID);
    CHECK(ferry_rkey_unpack(ctx, 0, NULL, &bad) == FERRY_ERR_INVALID);
    CHECK(ferry_rkey_unpack(ctx, 0, &g_keys.key[0], NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_rkey_unpack(NULL, 0, &g_keys.key[0], &bad) == FERRY_ERR_INVALID);
    if (size > 1)
        CHECK(ferry_rkey_unpack(ctx, 1, &g_keys.key[0], &bad) == FERRY_ERR_INVALID);
    ferry_rkey_t garbage;
    memset(&garbage, 0xa5, sizeof(garbage));
    CHECK(ferry_rkey_unpack(ctx, 0, &garbage, &bad) == FERRY_ERR_INVALID);
    CHECK(bad == (ferry_rkey_h *)0x1);
    /* No ATOMIC right: refused at the initiator. */
    ferry_rkey_h *na;
    CHECK(ferry_rkey_unpack(ctx, 0, &g_keys.noatomic[0], &na) == FERRY_OK);
    uint64_t nabase = g_keys.nabase[0];
    CHECK(ferry_atomic(ctx, na, nabase, FERRY_ATOMIC_ADD, 8, 1, NULL) == FERRY_ERR_ACCESS);
    CHECK(ferry_atomic_fetch(ctx, na, nabase, FERRY_ATOMIC_ADD, 4, 1, &r64, NULL) ==
          FERRY_ERR_ACCESS);
    CHECK(ferry_atomic_cswap(ctx, na, nabase, 8, 0, 1, &r64, NULL) == FERRY_ERR_ACCESS);
    /* It has read and write: put and get go through. */
    RETRY_OK(ferry_get_nb(ctx, na, nabase, &r64, 8, NULL));
    CHECK(ferry_flush(ctx, 0) == FERRY_OK);
    /* Released handle: refused, twice released refused. */
    CHECK(ferry_rkey_release(ctx, na) == FERRY_OK);
    CHECK(ferry_atomic(ctx, na, nabase, FERRY_ATOMIC_ADD, 8, 1, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_get_nb(ctx, na, nabase, &r64, 8, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_put_notify(ctx, na, nabase, &r64, 8, TAG_NOTE, NULL, 0, NULL) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_rkey_release(ctx, na) == FERRY_ERR_INVALID);
    CHECK(ferry_rkey_release(ctx, NULL) == FERRY_OK);
    CHECK(ferry_rkey_release(NULL, rh) == FERRY_ERR_INVALID);
    /* A handle that is no handle (a buffer of zeros) is refused. */
    uint64_t fake[32] = {0};
    CHECK(ferry_atomic(ctx, (ferry_rkey_h *)fake, base, FERRY_ATOMIC_ADD, 8, 1, NULL) ==
          FERRY_ERR_INVALID);
    const char *log = capture_end(&cap);
    CHECK(strstr(log, "not a live handle") != NULL);

    /* Inside a handler: blocking calls are refused, nothing breaks. */
    ferry_req_t *req = NULL;
    ferry_op_params_t p = {.req_out = &req};
    RETRY_OK(ferry_get_nb(ctx, rh, base, &r64, 8, &p));
    g_probe_req = req;
    CHECK(send_retry(ctx, me, TAG_PROBE, "p", 1) == FERRY_OK);
    int ran = g_probe_ran;
    spin_progress(ctx, &g_probe_ran, ran + 1);
    CHECK(g_probe_rc[0] == FERRY_ERR_BUSY && g_probe_rc[1] == FERRY_ERR_BUSY &&
          g_probe_rc[2] == FERRY_ERR_BUSY && g_probe_rc[3] == FERRY_ERR_BUSY);
    if (req != NULL)
        CHECK(ferry_req_wait(ctx, req) == FERRY_OK);
    g_probe_req = NULL;
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    printf("ok  argument checks: size, alignment, op, range, right, handles, requests\n");
}

/* The case: every rank but 0 sends 1000 fire-and-forget
 * increments to rank 0, then a barrier: rank 0 has them all right after.
 * Then again with ferry_flush(0) alone: a sender that saw its flush
 * return tells rank 0 so by an atomic, and rank 0 has its messages. */
static void test_quiet(ferry_ctx_t *ctx, ferry_rkey_h *rh0, uint64_t base)
{
    int me = ferry_rank(ctx), size = ferry_size(ctx);
    const int n = 1000;
    g_increments = 0;
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (me != 0)
        for (int i = 0; i < n; i++)
            CHECK(send_retry(ctx, 0, TAG_INC, &i, sizeof(i)) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (me == 0) {
        printf("rank 0 saw %ld of %d increments right after the barrier\n", g_increments,
               n * (size - 1));
        CHECK(g_increments == (long)n * (size - 1));
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    if (rh0 == NULL)
        return;
    g_increments = 0;
    volatile uint64_t *flushed = (volatile uint64_t *)(g_region + OFF_CTR32B + 20);
    if (me == 0)
        *flushed = 0;
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (me != 0) {
        for (int i = 0; i < n; i++)
            CHECK(send_retry(ctx, 0, TAG_INC, &i, sizeof(i)) == FERRY_OK);
        CHECK(ferry_flush(ctx, 0) == FERRY_OK);
        RETRY_OK(ferry_atomic(ctx, rh0, base + OFF_CTR32B + 20, FERRY_ATOMIC_ADD, 4, 1,
                                 NULL));
        CHECK(ferry_flush(ctx, 0) == FERRY_OK);
    } else {
        for (long spins = 0; __atomic_load_n((const uint32_t *)flushed, __ATOMIC_ACQUIRE) !=
                             (uint32_t)(size - 1);
             spins++) {
            CHECK(ferry_progress(ctx) >= 0);
            CHECK(spins < 200000000L);
        }
        /* Every sender's flush returned: their messages were all handled. */
        CHECK(g_increments == (long)n * (size - 1));
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    printf("ok  flush and barrier are a quiet for active messages\n");
}

/* Replies from handlers under back pressure: every rank but 0 sends a burst
 * of pings; rank 0's handler answers each with a 1 KiB pong and never
 * retries. Run with tiny rings or send queues, the replies meet a full
 * transport and ferry holds them: every pong arrives, in order. With
 * FERRY_CB_QUEUE_MAX=0 (expect_refusals) a reply may be refused with
 * FERRY_ERR_NO_RESOURCE instead, never anything else, and exactly the
 * replies accepted arrive, in order. */
typedef struct pong_state {
    long answered, refused, bad_rc;
    long got, out_of_order, told;
    uint64_t next;
    long expect;
} pong_state_t;

static pong_state_t g_pong;

static void on_ping(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)tag, (void)arg;
    char reply[1024];
    memset(reply, 0x5a, sizeof(reply));
    CHECK(len == sizeof(uint64_t));
    memcpy(reply, data, sizeof(uint64_t));
    int rc = ferry_am_send(ctx, src, TAG_PONG, reply, sizeof(reply));
    if (rc == FERRY_OK)
        g_pong.answered++;
    else if (rc == FERRY_ERR_NO_RESOURCE)
        g_pong.refused++;
    else
        g_pong.bad_rc++;
}

static void on_pong(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    uint64_t seq;
    CHECK(len == 1024);
    memcpy(&seq, data, sizeof(seq));
    if (seq < g_pong.next)
        g_pong.out_of_order++;
    g_pong.next = seq + 1;
    g_pong.got++;
}

static void on_count(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    CHECK(len == sizeof(long));
    memcpy(&g_pong.expect, data, sizeof(long));
    g_pong.told++;
}

static void test_replies(ferry_ctx_t *ctx, bool expect_refusals)
{
    int me = ferry_rank(ctx), size = ferry_size(ctx);
    const int n = 1000;
    CHECK(ferry_am_register(ctx, TAG_PING, on_ping, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_PONG, on_pong, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_COUNT, on_count, NULL) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (me != 0)
        for (uint64_t i = 0; i < (uint64_t)n; i++)
            CHECK(send_retry(ctx, 0, TAG_PING, &i, sizeof(i)) == FERRY_OK);
    /* The pings are handled at rank 0 and its replies at their senders
     * once this is over: rank 0's own flush waits for what it holds. */
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (me == 0) {
        printf("rank 0: %ld replies accepted, %ld refused, %ld failed otherwise\n",
               g_pong.answered, g_pong.refused, g_pong.bad_rc);
        CHECK(g_pong.bad_rc == 0);
        CHECK(g_pong.answered + g_pong.refused == (long)n * (size - 1));
        if (!expect_refusals)
            CHECK(g_pong.refused == 0);
        /* Per sender, as there is one counter: tell each what to expect
         * only when nothing was refused or one sender alone. */
        long each = size == 2 || g_pong.refused == 0 ? g_pong.answered / (size - 1) : -1;
        for (int r = 1; r < size; r++)
            CHECK(send_retry(ctx, r, TAG_COUNT, &each, sizeof(each)) == FERRY_OK);
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (me != 0) {
        CHECK(g_pong.told == 1);
        CHECK(g_pong.out_of_order == 0);
        if (g_pong.expect >= 0)
            CHECK(g_pong.got == g_pong.expect);
        if (!expect_refusals)
            CHECK(g_pong.got == n);
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    printf("ok  replies from handlers under back pressure: none lost, in order\n");
}

/* Two contexts in one process (no launcher: singletons): a handle of one
 * is refused by the other. */
static void test_foreign_handle(void)
{
    ferry_ctx_t *a = NULL, *b = NULL;
    CHECK(ferry_init(NULL, &a) == FERRY_OK);
    CHECK(ferry_init(NULL, &b) == FERRY_OK);
    uint64_t mem[4] = {0};
    ferry_mem_t *m;
    CHECK(ferry_mem_register(a, mem, sizeof(mem), FERRY_ACCESS_REMOTE_ATOMIC, &m) == FERRY_OK);
    ferry_rkey_t key;
    CHECK(ferry_mem_rkey(m, &key) == FERRY_OK);
    ferry_rkey_h *rh;
    CHECK(ferry_rkey_unpack(a, 0, &key, &rh) == FERRY_OK);
    capture_t cap;
    capture_begin(&cap);
    CHECK(ferry_atomic(b, rh, (uint64_t)(uintptr_t)mem, FERRY_ATOMIC_ADD, 8, 1, NULL) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_rkey_release(b, rh) == FERRY_ERR_INVALID);
    ferry_req_t *req = NULL;
    uint64_t old;
    ferry_op_params_t p = {.req_out = &req};
    CHECK(ferry_atomic_fetch(a, rh, (uint64_t)(uintptr_t)mem, FERRY_ATOMIC_ADD, 8, 5, &old, &p) ==
          FERRY_OK);
    if (req != NULL)
        CHECK(ferry_req_test(b, req, NULL) == FERRY_ERR_INVALID);
    capture_end(&cap);
    if (req != NULL)
        CHECK(ferry_req_wait(a, req) == FERRY_OK);
    CHECK(ferry_flush(a, 0) == FERRY_OK);
    CHECK(old == 0 && mem[0] == 5);
    CHECK(ferry_rkey_release(a, rh) == FERRY_OK);
    CHECK(ferry_mem_deregister(a, m) == FERRY_OK);
    CHECK(ferry_finalize(&b) == FERRY_OK);
    CHECK(ferry_finalize(&a) == FERRY_OK);
    printf("ok  a handle or request of another context is refused\n");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    bool need_peers = false, alloc = false, quiet_only = false, replies = false;
    bool refusals = false;
    int iters = 500;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--need-peers") == 0) {
            need_peers = true;
        } else if (strcmp(argv[i], "--alloc") == 0) {
            alloc = true;
        } else if (strcmp(argv[i], "--quiet-only") == 0) {
            quiet_only = true;
        } else if (strcmp(argv[i], "--replies") == 0) {
            replies = true;
        } else if (strcmp(argv[i], "--replies-refused") == 0) {
            replies = refusals = true;
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = atoi(argv[++i]);
        } else if (strncmp(argv[i], "--iters=", 8) == 0) {
            iters = atoi(argv[i] + 8);
        } else {
            fprintf(stderr,
                    "usage: %s [--need-peers] [--alloc] [--iters N] [--quiet-only | --replies | "
                    "--replies-refused]\n",
                    argv[0]);
            return 2;
        }
    }
    if (getenv("PMI_FD") == NULL && getenv("PMI_PORT") == NULL)
        test_foreign_handle();

    ferry_ctx_t *ctx = NULL;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    int me = ferry_rank(ctx), size = ferry_size(ctx);
    CHECK(size <= MAX_RANKS);
    for (int r = 0; r < size; r++) {
        long max = ferry_am_max_size(ctx, r);
        if (need_peers && max < 0) {
            const char *btl = getenv("FERRY_BTL");
            printf("SKIPPED: rank %d cannot reach rank %d over FERRY_BTL='%s' (%s): a transport "
                   "did not open here; FERRY_LOG_LEVEL=info says why\n",
                   me, r, btl != NULL ? btl : "", ferry_strerror((int)max));
            CHECK(ferry_finalize(&ctx) == FERRY_OK);
            return 77;
        }
        CHECK(max >= (long)sizeof(rkey_msg_t));
    }
    CHECK(ferry_am_register(ctx, TAG_RKEY, on_rkey, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_INC, on_inc, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_NOTE, on_note, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_PROBE, on_probe, NULL) == FERRY_OK);

    size_t region_len = OFF_NOTES + (size_t)MAX_RANKS * NOTE_ROUNDS * NOTE_SLOT;
    g_region_len = region_len;
    unsigned rights = FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE |
                      FERRY_ACCESS_REMOTE_ATOMIC;
    ferry_mem_t *mem, *nomem;
    void *plain = NULL;
    if (alloc) {
        void *addr;
        CHECK(ferry_mem_alloc(ctx, region_len, rights, &addr, &mem) == FERRY_OK);
        g_region = addr;
        memset(g_region, 0, region_len);
    } else {
        plain = calloc(1, region_len);
        CHECK(plain != NULL);
        g_region = plain;
        CHECK(ferry_mem_register(ctx, g_region, region_len, rights, &mem) == FERRY_OK);
    }
    static uint64_t noatomic_area[64];
    CHECK(ferry_mem_register(ctx, noatomic_area, sizeof(noatomic_area),
                             FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE,
                             &nomem) == FERRY_OK);
    rkey_msg_t km;
    CHECK(ferry_mem_rkey(mem, &km.key) == FERRY_OK);
    CHECK(ferry_mem_rkey(nomem, &km.noatomic) == FERRY_OK);
    km.base = (uint64_t)(uintptr_t)g_region;
    km.nabase = (uint64_t)(uintptr_t)noatomic_area;
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    for (int r = 0; r < size; r++)
        CHECK(send_retry(ctx, r, TAG_RKEY, &km, sizeof(km)) == FERRY_OK);
    /* The barrier orders the messages before it: every key is here. */
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(g_keys.got == size);

    ferry_rkey_h *rhs[MAX_RANKS];
    for (int r = 0; r < size; r++)
        CHECK(ferry_rkey_unpack(ctx, r, &g_keys.key[r], &rhs[r]) == FERRY_OK);
    uint64_t base0 = g_keys.base[0];

    if (replies) {
        test_replies(ctx, refusals);
    } else if (!quiet_only) {
        test_counter(ctx, rhs[0], base0, iters);
        test_lock(ctx, rhs[0], base0, iters / 5 + 1);
        test_notify(ctx, rhs);
        test_requests(ctx, rhs[0], base0);
        test_refusals(ctx, rhs[0], base0);
    }
    if (!replies)
        test_quiet(ctx, rhs[0], base0);

    for (int r = 0; r < size; r++)
        CHECK(ferry_rkey_release(ctx, rhs[r]) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(ferry_mem_deregister(ctx, nomem) == FERRY_OK);
    if (alloc)
        CHECK(ferry_mem_free(ctx, mem) == FERRY_OK);
    else
        CHECK(ferry_mem_deregister(ctx, mem) == FERRY_OK);
    free(plain);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    printf("ok  rank %d of %d done\n", me, size);
    return 0;
}
