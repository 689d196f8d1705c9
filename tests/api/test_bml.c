/*
 * Several rails to a peer (src/bml), two ranks: large puts and gets striped
 * across every rail, each carrying a share; then one rail cut in the
 * middle of a stream of puts and gets, where every operation must still
 * complete without error, every byte must arrive, active messages and key
 * handles must go on over the rail left, and neither rank may take the
 * other as failed. Run under ferryrun with a FERRY_BTL that gives two
 * rails of one class (two tcp links, or tcp and ofi at one exclusivity);
 * with fewer the run exits 77 with the reason.
 *
 *   test_bml [--cut=primary|other|link=DIR] [--expect-reissue]
 *
 * --cut=link=DIR: nothing is cut from inside; a link is cut from outside
 * (tests/api/run_bml_netns.sh) while rank 0 streams puts and numbered
 * messages: each rank writes DIR/ready.<rank> once traffic flows, the
 * script cuts the primary's link and writes DIR/cut, and rank 0 goes on
 * until its transport has reported the loss and traffic has moved.
 * --cut: the rail cut is the primary (default: messages move too) or
 * another one (striped pieces in flight on it move). --expect-reissue: the
 * cut rail's transport fails what is in flight on it (ofi does; tcp lets
 * what it has started finish), so some bytes must have been issued again.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "bml/bml.h"
#include "btl/ctx.h"
#include "rt/progress.h"

#include "../unit/check.h"

#define TAG_KEY 1
#define TAG_SUM 2
#define TAG_SUM_OK 3
#define TAG_PING 4
#define TAG_PONG 5
#define TAG_DONE 6
#define TAG_CUT 7
#define TAG_SEQ 8
#define TAG_COUNT 9
#define SEQ_BYTES 200 /* a numbered message: its number, then filler */
/* Every SEQ_BIG_EVERY-th numbered message is larger than ofi's largest
 * send and smaller than tcp's: to a peer with both as rails it must go by
 * rendezvous, so that what is kept for a replay fits either rail. */
#define SEQ_BIG 40000
#define SEQ_BIG_EVERY 50
#define SEQ_BIG_SLOTS 2

#define REGION ((size_t)64 << 20)
#define STRIPE_LEN ((size_t)8 << 20)
#define PIECE ((size_t)1 << 20)
#define STREAM 48 /* pieces of the stream the cut falls into */

static ferry_rkey_t g_peer_key;
static uint64_t g_peer_base;
static bool g_have_key;
static int g_sums_ok, g_sums_bad, g_pongs, g_done, g_errors, g_cut = -1;
static char *g_region;
static bool g_cut_other, g_expect_reissue;
static const char *g_link_dir; /* --cut=link=DIR */
/* Numbered messages each way: the next number expected, and any that came
 * out of order, twice, or with bad filler. */
static uint32_t g_seq_next, g_seq_sent, g_seq_big_got;
static unsigned char g_big_buf[SEQ_BIG_SLOTS][SEQ_BIG];
static bool g_big_busy[SEQ_BIG_SLOTS];
static int g_big_failed;
static int g_seq_bad;

typedef struct key_msg {
    ferry_rkey_t key;
    uint64_t base;
} key_msg_t;

typedef struct sum_msg {
    uint64_t off, len, sum;
} sum_msg_t;

static uint64_t sum_of(const unsigned char *p, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void fill(char *p, size_t len, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < len; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (char)(x >> 24);
    }
}

static void on_key(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    CHECK(len == sizeof(key_msg_t));
    key_msg_t m;
    memcpy(&m, data, sizeof(m));
    g_peer_key = m.key;
    g_peer_base = m.base;
    g_have_key = true;
}

/* The target checks the bytes it holds against the initiator's sum. */
static void on_sum(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)tag, (void)arg;
    CHECK(len == sizeof(sum_msg_t));
    sum_msg_t m;
    memcpy(&m, data, sizeof(m));
    CHECK(m.off <= REGION && m.len <= REGION - m.off);
    uint8_t ok = sum_of((unsigned char *)g_region + m.off, m.len) == m.sum;
    CHECK(ferry_am_send(ctx, src, TAG_SUM_OK, &ok, 1) == FERRY_OK);
}

static void on_sum_ok(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                      void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    CHECK(len == 1);
    if (*(const uint8_t *)data)
        g_sums_ok++;
    else
        g_sums_bad++;
}

static void on_ping(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)tag, (void)arg;
    CHECK(ferry_am_send(ctx, src, TAG_PONG, data, len) == FERRY_OK);
}

static void on_pong(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)data, (void)len, (void)arg;
    g_pongs++;
}

static void on_done(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)data, (void)len, (void)arg;
    g_done++;
}

/* The initiator cut its end of a rail: the target cuts its own, as both
 * ends of a broken link see it break (here the initiator's end is gone and
 * the target's would otherwise only learn of it when its reconnection
 * times out). Done from the main loop, not inside the handler. */
static void on_cut(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    CHECK(len == sizeof(int));
    memcpy(&g_cut, data, sizeof(int));
}

static size_t seq_len(uint32_t n)
{
    return n % SEQ_BIG_EVERY == SEQ_BIG_EVERY - 1 ? SEQ_BIG : SEQ_BYTES;
}

static void on_seq(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    uint32_t n;
    if (len < sizeof(n)) {
        g_seq_bad++;
        return;
    }
    memcpy(&n, data, sizeof(n));
    if (len != seq_len(n)) {
        fprintf(stderr, "rank %d: message %u has %zu bytes, not %zu\n", ferry_rank(ctx), n, len,
                seq_len(n));
        g_seq_bad++;
        return;
    }
    if (len == SEQ_BIG)
        g_seq_big_got++;
    const unsigned char *p = data;
    for (size_t i = sizeof(n); i < len; i++)
        if (p[i] != (unsigned char)(n + i))
            g_seq_bad++;
    if (n != g_seq_next) {
        fprintf(stderr, "rank %d: message %u came when %u was due\n", ferry_rank(ctx), n,
                g_seq_next);
        g_seq_bad++;
    }
    g_seq_next = n + 1;
}

static void on_big_sent(void *arg, int status)
{
    if (status != FERRY_OK) {
        fprintf(stderr, "a large numbered message ended with %s\n", ferry_strerror(status));
        g_big_failed++;
    }
    *(bool *)arg = false;
}

/* Sends the next numbered message, if the transport takes it now. */
static void seq_send(ferry_ctx_t *ctx, int dst)
{
    static unsigned char small[SEQ_BYTES];
    size_t len = seq_len(g_seq_sent);
    unsigned char *m = small;
    int slot = 0;
    if (len == SEQ_BIG) {
        /* Without blocking, so that puts and gets stay in flight beside
         * them: each in a buffer of its own until its completion. */
        while (slot < SEQ_BIG_SLOTS && g_big_busy[slot])
            slot++;
        if (slot == SEQ_BIG_SLOTS)
            return;
        m = g_big_buf[slot];
    }
    memcpy(m, &g_seq_sent, sizeof(g_seq_sent));
    for (size_t i = sizeof(g_seq_sent); i < len; i++)
        m[i] = (unsigned char)(g_seq_sent + i);
    int rc = m == small
                 ? ferry_am_send(ctx, dst, TAG_SEQ, m, len)
                 : ferry_am_send_nb(ctx, dst, TAG_SEQ, m, len, on_big_sent, &g_big_busy[slot]);
    if (rc == FERRY_OK) {
        if (m != small)
            g_big_busy[slot] = true; /* its callback comes from progress, later */
        g_seq_sent++;
        return;
    }
    if (rc != FERRY_ERR_NO_RESOURCE)
        fprintf(stderr, "rank %d: numbered message %u (%zu bytes): %s\n", ctx->rank, g_seq_sent,
                len, ferry_strerror(rc));
    CHECK(rc == FERRY_ERR_NO_RESOURCE);
}

static bool g_count_got;
static void on_count(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                     void *arg)
{
    (void)ctx, (void)src, (void)tag;
    CHECK(len == sizeof(uint32_t));
    memcpy(arg, data, sizeof(uint32_t));
    g_count_got = true;
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    (void)ctx, (void)arg;
    fprintf(stderr, "error callback: rank %d: %s (%s)\n", peer, msg, ferry_strerror(status));
    g_errors++;
}

typedef struct comp {
    int done, bad;
} comp_t;

/* Fetch-and-adds of 1 to one counter across the cut: each completes once,
 * without error, and the values before them are 0 .. n - 1, each once. */
#define FADDS_PER_STEP 16
#define FADDS_MAX 16384
static uint64_t g_fetched[FADDS_MAX];
static int g_fadds, g_fadds_done, g_fadds_bad;

static void on_fadd(void *arg, int status)
{
    (void)arg;
    g_fadds_done++;
    if (status != FERRY_OK) {
        fprintf(stderr, "fetch-and-add ended with %s\n", ferry_strerror(status));
        g_fadds_bad++;
    }
}

static void fadd_send(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t counter)
{
    CHECK(g_fadds < FADDS_MAX);
    ferry_op_params_t p = {.cb = on_fadd};
    int rc;
    while ((rc = ferry_atomic_fetch(ctx, rh, counter, FERRY_ATOMIC_ADD, 8, 1,
                                    &g_fetched[g_fadds], &p)) == FERRY_ERR_NO_RESOURCE)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(rc == FERRY_OK);
    g_fadds++;
}

/* Checks every fetch-and-add (all done), and that the counter holds their
 * sum: none applied twice. */
static void fadds_check(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t counter)
{
    static bool seen[FADDS_MAX];
    memset(seen, 0, sizeof(seen));
    CHECK(g_fadds_bad == 0 && g_fadds_done == g_fadds);
    for (int i = 0; i < g_fadds; i++) {
        CHECK(g_fetched[i] < (uint64_t)g_fadds);
        CHECK(!seen[g_fetched[i]]);
        seen[g_fetched[i]] = true;
    }
    uint64_t sum = UINT64_MAX;
    ferry_req_t *freq = NULL;
    ferry_op_params_t fp = {.req_out = &freq};
    CHECK(ferry_atomic_fetch(ctx, rh, counter, FERRY_ATOMIC_ADD, 8, 0, &sum, &fp) ==
          FERRY_OK);
    if (freq != NULL)
        CHECK(ferry_req_wait(ctx, freq) == FERRY_OK);
    CHECK(sum == (uint64_t)g_fadds);
    printf("ok  %d fetch-and-adds across the cut, each applied once\n", g_fadds);
}

static void on_comp(void *arg, int status)
{
    comp_t *c = arg;
    c->done++;
    if (status != FERRY_OK) {
        fprintf(stderr, "operation ended with %s\n", ferry_strerror(status));
        c->bad++;
    }
}

/* ferry_am_send outside handlers: waits, progressing, while the transport
 * has no room yet (a connection still being made). */
static void send_now(ferry_ctx_t *ctx, int dst, int tag, const void *data, size_t len)
{
    int rc;
    while ((rc = ferry_am_send(ctx, dst, tag, data, len)) == FERRY_ERR_NO_RESOURCE)
        CHECK(ferry_progress(ctx) >= 0);
    if (rc != FERRY_OK)
        fprintf(stderr, "ferry_am_send to rank %d: %s\n", dst, ferry_strerror(rc));
    CHECK(rc == FERRY_OK);
}

static void wait_for(ferry_ctx_t *ctx, const int *counter, int want)
{
    while (*counter < want)
        CHECK(ferry_progress(ctx) >= 0);
}

/* Asks the target for the sum of [off, off + len) of its region and waits
 * for its verdict. */
static void check_at_target(ferry_ctx_t *ctx, int dst, const char *src, uint64_t off,
                            size_t len)
{
    sum_msg_t m = {.off = off, .len = len, .sum = sum_of((const unsigned char *)src, len)};
    int want = g_sums_ok + g_sums_bad + 1;
    send_now(ctx, dst, TAG_SUM, &m, sizeof(m));
    while (g_sums_ok + g_sums_bad < want)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(g_sums_bad == 0);
}

static void mark(const char *name, int rank)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s.%d", g_link_dir, name, rank);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fclose(f);
}

static bool link_cut(void)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/cut", g_link_dir);
    return access(path, F_OK) == 0;
}

/* Rank 0's stream while a link is cut from outside: 1 MiB puts into 24
 * slots, at most 8 in flight (a slot's source is not rewritten before its
 * put completed), numbered messages beside them, until the loss has been
 * reported and 32 more puts have gone. Then every slot must hold what was
 * put there last. */
static void stream_until_cut(ferry_ctx_t *ctx, ferry_mem_t *mem, int dst, char *src)
{
    comp_t s = {0};
    int started = 0, after = 0;
    /* Fetch-and-adds beside them, some always in flight. */
    ferry_rkey_h *rh = NULL;
    CHECK(ferry_rkey_unpack(ctx, dst, &g_peer_key, &rh) == FERRY_OK);
    const uint64_t counter = g_peer_base + REGION - 8;
    mark("ready", ctx->rank);
    double t0 = (double)rt_now_coarse_ns() / 1e9;
    for (int i = 0; after < 32; i++) {
        size_t off = (size_t)(i % 24) * PIECE;
        while (started - s.done >= 8) {
            seq_send(ctx, dst);
            CHECK(ferry_progress(ctx) >= 0);
        }
        fill(src + off, PIECE, (unsigned)i + 100);
        CHECK(ferry_put(ctx, dst, src + off, PIECE, mem, g_peer_base + off, &g_peer_key,
                        on_comp, &s) == FERRY_OK);
        started++;
        for (int j = 0; j < 20; j++)
            seq_send(ctx, dst);
        for (int j = 0; j < 4 && g_fadds < FADDS_MAX - 1; j++)
            fadd_send(ctx, rh, counter);
        if (ctx->bml->failovers > 0)
            after++;
        CHECK((double)rt_now_coarse_ns() / 1e9 - t0 < 60);
    }
    wait_for(ctx, &s.done, started);
    CHECK(s.bad == 0);
    wait_for(ctx, &g_fadds_done, g_fadds);
    CHECK(ferry_flush(ctx, dst) == FERRY_OK);
    fadds_check(ctx, rh, counter);
    CHECK(ferry_rkey_release(ctx, rh) == FERRY_OK);
    CHECK(link_cut());
    check_at_target(ctx, dst, src, 0, 24 * PIECE);
    printf("ok  %d puts across the cut link, all complete (%llu bytes issued again)\n", started,
           (unsigned long long)ctx->bml->reissued);
}

static int initiator(ferry_ctx_t *ctx, ferry_mem_t *mem, int dst)
{
    int ms[BML_MAX_PATHS];
    int n = bml_rails(ctx, dst, FERRY_BTL_FLAG_PUT | FERRY_BTL_FLAG_GET, ms, BML_MAX_PATHS);
    printf("rank %d: %d rails to rank %d\n", ctx->rank, n, dst);
    CHECK(n >= 2);
    /* One message is no larger than the smallest rail takes. */
    long max = ferry_am_max_size(ctx, dst);
    for (int i = 0; i < n; i++)
        CHECK(max > 0 && (size_t)max <= ctx->modules[ms[i]]->attr.max_send_size);
    /* Nor larger than what is worth a copy for the replay
     * (FERRY_BML_KEEP_MAX_MESSAGE): larger ones go by rendezvous. */
    CHECK((size_t)max <= ctx->bml->keep_max);
    const char *want_max = getenv("TEST_EXPECT_AM_MAX");
    if (want_max != NULL)
        CHECK(max == atol(want_max));
    printf("rank %d: active messages up to %ld bytes to rank %d in one\n", ctx->rank, max, dst);
    char *src = g_region + REGION / 2;
    char *back = malloc(STRIPE_LEN);
    CHECK(back != NULL);

    /* Striped: one large put, then a get of it back. */
    uint64_t before[BML_MAX_PATHS];
    for (int i = 0; i < n; i++)
        before[i] = bml_rail_bytes(ctx, ms[i]);
    fill(src, STRIPE_LEN, 1);
    comp_t c = {0};
    CHECK(ferry_put(ctx, dst, src, STRIPE_LEN, mem, g_peer_base, &g_peer_key, on_comp, &c) ==
          FERRY_OK);
    wait_for(ctx, &c.done, 1);
    CHECK(c.bad == 0);
    CHECK(ferry_flush(ctx, dst) == FERRY_OK);
    check_at_target(ctx, dst, src, 0, STRIPE_LEN);
    CHECK(ferry_get(ctx, dst, back, STRIPE_LEN, NULL, g_peer_base, &g_peer_key, on_comp, &c) ==
          FERRY_OK);
    wait_for(ctx, &c.done, 2);
    CHECK(c.bad == 0);
    CHECK(memcmp(back, src, STRIPE_LEN) == 0);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        uint64_t got = bml_rail_bytes(ctx, ms[i]) - before[i];
        printf("rank %d: rail %d (%s, bandwidth %u) carried %llu of 2 x %zu bytes\n", ctx->rank,
               ms[i], ctx->modules[ms[i]]->attr.name, ctx->modules[ms[i]]->attr.bandwidth,
               (unsigned long long)got, STRIPE_LEN);
        CHECK(got > 0);
        total += got;
    }
    /* Besides, the large numbered messages the peer sent meanwhile, each
     * got whole over one rail. */
    CHECK(total >= 2 * STRIPE_LEN && (total - 2 * STRIPE_LEN) % SEQ_BIG == 0);
    printf("ok  striped put and get of %zu bytes over %d rails\n", STRIPE_LEN, n);

    if (g_link_dir != NULL) {
        stream_until_cut(ctx, mem, dst, src);
        free(back);
        return 0;
    }

    /* A stream of puts and gets, with the primary rail cut half-way. */
    ferry_rkey_h *rh = NULL;
    CHECK(ferry_rkey_unpack(ctx, dst, &g_peer_key, &rh) == FERRY_OK);
    int primary = ctx->peers[dst].module_idx;
    int victim = primary;
    if (g_cut_other)
        victim = ms[0] == primary ? ms[1] : ms[0];
    fill(src, STREAM * PIECE / 2, 2);
    memset(back, 0, STRIPE_LEN);
    comp_t s = {0};
    int started = 0;
    const uint64_t counter = g_peer_base + REGION - 8; /* past what the puts write */
    for (int i = 0; i < STREAM; i++) {
        for (int j = 0; j < FADDS_PER_STEP; j++)
            fadd_send(ctx, rh, counter);
        size_t off = (size_t)(i % (STREAM / 2)) * PIECE;
        if (i < STREAM / 2) {
            CHECK(ferry_put(ctx, dst, src + off, PIECE, mem, g_peer_base + off, &g_peer_key,
                            on_comp, &s) == FERRY_OK);
        } else {
            /* Gets of what the puts wrote, each into its own part of back. */
            size_t boff = (size_t)(i - STREAM / 2) * (PIECE / 4);
            CHECK(ferry_get(ctx, dst, back + boff, PIECE / 4, NULL, g_peer_base + off,
                            &g_peer_key, on_comp, &s) == FERRY_OK);
        }
        started++;
        for (int j = 0; j < 40; j++)
            seq_send(ctx, dst);
        if (i == STREAM / 4) {
            CHECK(bml_test_cut(ctx, dst, victim));
            printf("rank %d: rail %d (%s) cut with %d operations started, %d done\n",
                   ctx->rank, victim, victim == primary ? "the primary" : "not the primary",
                   started, s.done);
            send_now(ctx, dst, TAG_CUT, &victim, sizeof(victim));
        }
        if (i == STREAM / 2 - 1) {
            /* The gets read what every put wrote. */
            while (s.done < started) {
                seq_send(ctx, dst);
                CHECK(ferry_progress(ctx) >= 0);
            }
            CHECK(ferry_flush(ctx, dst) == FERRY_OK);
        }
    }
    wait_for(ctx, &s.done, started);
    CHECK(s.bad == 0);
    wait_for(ctx, &g_fadds_done, g_fadds);
    CHECK(ferry_flush(ctx, dst) == FERRY_OK);
    fadds_check(ctx, rh, counter);
    CHECK((ctx->peers[dst].module_idx != primary) == (victim == primary));
    CHECK(!bml_rail_live(ctx, dst, victim));
    check_at_target(ctx, dst, src, 0, STREAM / 2 * PIECE);
    for (int i = STREAM / 2; i < STREAM; i++) {
        size_t off = (size_t)(i % (STREAM / 2)) * PIECE;
        size_t boff = (size_t)(i - STREAM / 2) * (PIECE / 4);
        CHECK(memcmp(back + boff, src + off, PIECE / 4) == 0);
    }
    printf("ok  %d puts and gets all complete after rail %d was cut (%llu bytes issued again)\n",
           STREAM, victim, (unsigned long long)ctx->bml->reissued);
    if (g_expect_reissue)
        CHECK(ctx->bml->reissued > 0);

    /* The handle follows the traffic to the rail left. */
    fill(src, PIECE, 3);
    ferry_req_t *req = NULL;
    ferry_op_params_t p = {.local = mem, .req_out = &req};
    CHECK(ferry_put_nb(ctx, rh, g_peer_base + 3 * PIECE, src, PIECE, &p) == FERRY_OK);
    if (req != NULL)
        CHECK(ferry_req_wait(ctx, req) == FERRY_OK);
    CHECK(ferry_flush(ctx, dst) == FERRY_OK);
    check_at_target(ctx, dst, src, 3 * PIECE, PIECE);
    CHECK(ferry_rkey_release(ctx, rh) == FERRY_OK);
    printf("ok  a key handle unpacked before the cut works after it\n");

    /* Active messages go on. */
    for (int i = 0; i < 100; i++) {
        uint32_t v = (uint32_t)i;
        send_now(ctx, dst, TAG_PING, &v, sizeof(v));
    }
    wait_for(ctx, &g_pongs, 100);
    printf("ok  active messages after the cut\n");
    free(back);
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--cut=other") == 0)
            g_cut_other = true;
        else if (strncmp(argv[i], "--cut=link=", 11) == 0)
            g_link_dir = argv[i] + 11;
        else if (strcmp(argv[i], "--expect-reissue") == 0)
            g_expect_reissue = true;
        else if (strcmp(argv[i], "--cut=primary") != 0) {
            fprintf(stderr, "usage: test_bml [--cut=primary|other] [--expect-reissue]\n");
            return 2;
        }
    }
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    CHECK(ferry_set_error_cb(ctx, on_error, NULL) == FERRY_OK);
    int rank = ferry_rank(ctx), size = ferry_size(ctx);
    if (size != 2) {
        fprintf(stderr, "test_bml runs on 2 ranks\n");
        ferry_finalize(&ctx);
        return 1;
    }
    int peer = 1 - rank;
    int ms[BML_MAX_PATHS];
    int n = bml_rails(ctx, peer, FERRY_BTL_FLAG_PUT | FERRY_BTL_FLAG_GET, ms, BML_MAX_PATHS);
    if (n < 2) {
        printf("SKIP: %d rail(s) with put and get to rank %d: this FERRY_BTL gives no two "
               "paths of one class\n",
               n, peer);
        ferry_finalize(&ctx);
        return 77;
    }
    CHECK(ferry_am_register(ctx, TAG_KEY, on_key, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_SUM, on_sum, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_SUM_OK, on_sum_ok, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_PING, on_ping, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_PONG, on_pong, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_DONE, on_done, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_CUT, on_cut, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_SEQ, on_seq, NULL) == FERRY_OK);
    /* Registered before any barrier: the peer's count may come while this
     * rank is still inside one. */
    static uint32_t peer_sent;
    CHECK(ferry_am_register(ctx, TAG_COUNT, on_count, &peer_sent) == FERRY_OK);
    g_region = malloc(REGION);
    CHECK(g_region != NULL);
    memset(g_region, 0, REGION);
    ferry_mem_t *mem;
    CHECK(ferry_mem_register(ctx, g_region, REGION,
                             FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE |
                                 FERRY_ACCESS_REMOTE_ATOMIC,
                             &mem) == FERRY_OK);
    key_msg_t km = {.base = (uint64_t)(uintptr_t)g_region};
    CHECK(ferry_mem_rkey(mem, &km.key) == FERRY_OK);
    send_now(ctx, peer, TAG_KEY, &km, sizeof(km));
    while (!g_have_key)
        CHECK(ferry_progress(ctx) >= 0);

    if (rank == 0) {
        initiator(ctx, mem, peer);
        send_now(ctx, peer, TAG_DONE, NULL, 0);
    } else {
        bool marked = false;
        while (g_done < 1) {
            CHECK(ferry_progress(ctx) >= 0);
            if (g_link_dir != NULL && !marked && g_seq_next > 0) {
                mark("ready", rank);
                marked = true;
            }
            if (g_seq_sent < 20000)
                seq_send(ctx, peer);
            if (g_cut >= 0) {
                CHECK(g_cut < ctx->n_modules);
                /* Gone already when its transport saw the other end go. */
                if (bml_rail_live(ctx, peer, g_cut))
                    CHECK(bml_test_cut(ctx, peer, g_cut));
                CHECK(!bml_rail_live(ctx, peer, g_cut));
                g_cut = -1;
            }
        }
    }
    /* Every numbered message each way arrived once and in order: a flush
     * covers them, then the counts are compared over the barrier's
     * quiet. */
    for (int i = 0; i < SEQ_BIG_SLOTS; i++)
        while (g_big_busy[i])
            CHECK(ferry_progress(ctx) >= 0);
    CHECK(g_big_failed == 0);
    CHECK(ferry_flush(ctx, peer) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    uint32_t sent = g_seq_sent;
    send_now(ctx, peer, TAG_COUNT, &sent, sizeof(sent));
    while (!g_count_got)
        CHECK(ferry_progress(ctx) >= 0);
    printf("rank %d: sent %u numbered messages, got %u of the %u sent to it (%u of %d bytes), "
           "%d bad\n",
           rank, sent, g_seq_next, peer_sent, g_seq_big_got, SEQ_BIG, g_seq_bad);
    CHECK(g_seq_bad == 0);
    CHECK(g_seq_big_got > 0);
    CHECK(g_seq_next == peer_sent);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(g_errors == 0);
    printf("ok  rank %d: no peer failed (%llu failover(s) here, %llu message(s) sent again)\n",
           rank, (unsigned long long)ctx->bml->failovers,
           (unsigned long long)ctx->bml->replayed);
    CHECK(ferry_mem_deregister(ctx, mem) == FERRY_OK);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    free(g_region);
    return 0;
}
