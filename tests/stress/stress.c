/*
 * All-to-all stress: every rank sends every other rank (and itself) a stream
 * of messages of random sizes from 0 to 4 MiB for a fixed time. Small ones go
 * as active messages; large ones by rendezvous, alternately pulled by the
 * receiver with get and pushed by the sender with put. Every payload is
 * generated from (source, destination, sequence) and checked byte for byte
 * on arrival, and sequence numbers must arrive complete and in order: a
 * message lost, duplicated, reordered or corrupted fails the test.
 *
 * usage: stress [SECONDS]   (default 5)
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ferry/ferry.h>

#include "../unit/check.h"

#define TAG_SMALL 20 /* payload: msg_hdr_t then data */
#define TAG_RTS 21   /* rts_t: "get this from me" */
#define TAG_PUTDONE 22 /* rts_t: "I put this into your landing zone" */
#define TAG_ACK 23   /* ack_t: the large transfer is done, its buffer is free */
#define TAG_ZONE 24  /* zone_t: where to put */
#define TAG_DONE 25  /* done_t: no more from this sender */
#define MAX_LARGE ((size_t)4 << 20)
#define MAX_RANKS 64

typedef struct msg_hdr {
    uint64_t seq;
} msg_hdr_t;

typedef struct rts {
    uint64_t seq;
    uint64_t len;
    uint64_t addr;
    ferry_rkey_t rkey;
} rts_t;

typedef struct zone {
    uint64_t addr;
    ferry_rkey_t rkey;
} zone_t;

typedef struct done {
    uint64_t sent;
} done_t;

typedef struct pair {
    /* As sender to this peer. */
    uint64_t next_seq;
    bool large_busy;     /* a rendezvous to it is in flight */
    bool use_put;        /* the next large one is pushed, else pulled */
    uint64_t large_seq;
    size_t large_len;
    bool put_done;
    int put_status;
    zone_t zone;         /* its landing zone for us */
    bool have_zone;
    /* As receiver from this peer. */
    uint64_t expect_seq;
    bool done;
    uint64_t done_count;
    bool get_busy;
    rts_t get_rts;
    bool get_done;
    int get_status;
} pair_t;

typedef struct state {
    ferry_ctx_t *ctx;
    int me, size;
    pair_t pair[MAX_RANKS];
    unsigned char *send_buf; /* source of large transfers, one per peer */
    ferry_mem_t *send_mem;
    unsigned char *zone;     /* landing zones, one per peer */
    ferry_mem_t *zone_mem;
    unsigned char *get_buf;  /* where gets land, one per peer */
    uint64_t checked_bytes, checked_msgs;
} state_t;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static void fill(unsigned char *p, size_t len, int src, int dst, uint64_t seq)
{
    uint64_t s = mix(((uint64_t)src << 48) ^ ((uint64_t)dst << 32) ^ seq);
    for (size_t i = 0; i < len; i++) {
        if ((i & 7) == 0)
            s = mix(s + i);
        p[i] = (unsigned char)(s >> ((i & 7) * 8));
    }
}

static void verify(state_t *st, const unsigned char *p, size_t len, int src, uint64_t seq)
{
    static unsigned char *want;
    static size_t want_len;
    if (want == NULL || want_len < len) {
        free(want);
        want = malloc(len > 0 ? len : 1);
        CHECK(want != NULL);
        want_len = len;
    }
    fill(want, len, src, st->me, seq);
    if (memcmp(want, p, len) != 0) {
        size_t i = 0;
        while (want[i] == p[i])
            i++;
        fprintf(stderr, "rank %d: message %llu from %d (%zu bytes) corrupt at byte %zu\n",
                st->me, (unsigned long long)seq, src, len, i);
        exit(1);
    }
    st->checked_bytes += len;
    st->checked_msgs++;
}

/* Sequence numbers are shared by small and large messages of a pair and
 * must arrive in order: a large one is announced in order, like a small one. */
static void take_seq(state_t *st, int src, uint64_t seq)
{
    pair_t *p = &st->pair[src];
    if (seq != p->expect_seq) {
        fprintf(stderr, "rank %d: from %d expected message %llu, got %llu\n", st->me, src,
                (unsigned long long)p->expect_seq, (unsigned long long)seq);
        exit(1);
    }
    p->expect_seq++;
}

static void on_small(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                     void *arg)
{
    state_t *st = arg;
    msg_hdr_t h;
    CHECK(len >= sizeof(h));
    memcpy(&h, data, sizeof(h));
    take_seq(st, src, h.seq);
    verify(st, (const unsigned char *)data + sizeof(h), len - sizeof(h), src, h.seq);
}

static void on_get_done(void *arg, int status)
{
    pair_t *p = arg;
    p->get_done = true;
    p->get_status = status;
}

static void on_rts(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                   void *arg)
{
    state_t *st = arg;
    rts_t r;
    CHECK(len == sizeof(r));
    memcpy(&r, data, sizeof(r));
    take_seq(st, src, r.seq);
    pair_t *p = &st->pair[src];
    if (tag == TAG_PUTDONE) {
        verify(st, st->zone + (size_t)src * MAX_LARGE, (size_t)r.len, src, r.seq);
        /* The ack goes from the main loop, where back pressure can be
         * waited out; r.addr 0 says there is nothing to pull. */
        p->get_rts = r;
        p->get_busy = true;
        p->get_done = true;
        p->get_status = FERRY_OK;
        return;
    }
    CHECK(!p->get_busy);
    CHECK(r.len <= MAX_LARGE);
    p->get_rts = r;
    p->get_busy = true;
    p->get_done = false;
    int rc = ferry_get(ctx, src, st->get_buf + (size_t)src * MAX_LARGE, (size_t)r.len, NULL,
                       r.addr, &r.rkey, on_get_done, p);
    CHECK(rc == FERRY_OK);
}

static void on_ack(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                   void *arg)
{
    state_t *st = arg;
    uint64_t seq;
    CHECK(len == sizeof(seq));
    memcpy(&seq, data, sizeof(seq));
    CHECK(st->pair[src].large_busy && seq == st->pair[src].large_seq);
    st->pair[src].large_busy = false;
}

static void on_zone(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    CHECK(len == sizeof(zone_t));
    memcpy(&st->pair[src].zone, data, sizeof(zone_t));
    st->pair[src].have_zone = true;
}

static void on_done(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    done_t d;
    CHECK(len == sizeof(d));
    memcpy(&d, data, sizeof(d));
    st->pair[src].done = true;
    st->pair[src].done_count = d.sent;
}

static void on_put_done(void *arg, int status)
{
    pair_t *p = arg;
    p->put_done = true;
    p->put_status = status;
}

static int send_am(state_t *st, int dst, int tag, const void *data, size_t len)
{
    int rc;
    while ((rc = ferry_am_send(st->ctx, dst, tag, data, len)) == FERRY_ERR_NO_RESOURCE)
        CHECK(ferry_progress(st->ctx) >= 0);
    return rc;
}

/* Finishes receiver-side work the callbacks could only start. */
static void service(state_t *st)
{
    for (int src = 0; src < st->size; src++) {
        pair_t *p = &st->pair[src];
        if (!p->get_busy || !p->get_done)
            continue;
        CHECK(p->get_status == FERRY_OK);
        rts_t r = p->get_rts;
        if (p->get_rts.addr != 0)
            verify(st, st->get_buf + (size_t)src * MAX_LARGE, (size_t)r.len, src, r.seq);
        p->get_busy = false;
        CHECK(send_am(st, src, TAG_ACK, &r.seq, sizeof(r.seq)) == FERRY_OK);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 5.0;
    state_t *st = calloc(1, sizeof(*st));
    CHECK(st != NULL);
    CHECK(ferry_init(NULL, &st->ctx) == FERRY_OK);
    ferry_ctx_t *ctx = st->ctx;
    st->me = ferry_rank(ctx);
    st->size = ferry_size(ctx);
    CHECK(st->size <= MAX_RANKS);
    for (int r = 0; r < st->size; r++) {
        if (ferry_am_max_size(ctx, r) < 0) {
            if (st->me == 0)
                printf("SKIPPED: rank %d cannot be reached (no transport joins them)\n", r);
            ferry_finalize(&ctx);
            return 77;
        }
    }
    size_t n = (size_t)st->size;
    st->send_buf = malloc(n * MAX_LARGE);
    st->zone = calloc(n, MAX_LARGE);
    st->get_buf = malloc(n * MAX_LARGE);
    size_t small_max = 0;
    for (int r = 0; r < st->size; r++)
        if ((size_t)ferry_am_max_size(ctx, r) > small_max)
            small_max = (size_t)ferry_am_max_size(ctx, r);
    unsigned char *small = malloc(small_max);
    CHECK(st->send_buf != NULL && st->zone != NULL && st->get_buf != NULL && small != NULL);
    CHECK(ferry_mem_register(ctx, st->send_buf, n * MAX_LARGE, FERRY_ACCESS_REMOTE_READ,
                             &st->send_mem) == FERRY_OK);
    CHECK(ferry_mem_register(ctx, st->zone, n * MAX_LARGE, FERRY_ACCESS_REMOTE_WRITE,
                             &st->zone_mem) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_SMALL, on_small, st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_RTS, on_rts, st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_PUTDONE, on_rts, st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_ACK, on_ack, st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_ZONE, on_zone, st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_DONE, on_done, st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    /* Each peer learns where to put for us. */
    for (int r = 0; r < st->size; r++) {
        zone_t z = {.addr = (uint64_t)(uintptr_t)(st->zone + (size_t)r * MAX_LARGE)};
        CHECK(ferry_mem_rkey(st->zone_mem, &z.rkey) == FERRY_OK);
        CHECK(send_am(st, r, TAG_ZONE, &z, sizeof(z)) == FERRY_OK);
    }
    for (int r = 0; r < st->size; r++)
        while (!st->pair[r].have_zone)
            CHECK(ferry_progress(ctx) >= 0);

    srand((unsigned)(st->me * 7919 + 17));
    ferry_rkey_t send_key;
    CHECK(ferry_mem_rkey(st->send_mem, &send_key) == FERRY_OK);
    double end = now_s() + seconds;
    while (now_s() < end) {
        int dst = rand() % st->size;
        pair_t *p = &st->pair[dst];
        /* Sizes spread over every order of magnitude up to 4 MiB. */
        size_t len = (size_t)rand() % ((size_t)1 << (rand() % 23));
        long max = ferry_am_max_size(ctx, dst);
        CHECK(max > (long)sizeof(msg_hdr_t));
        if (len + sizeof(msg_hdr_t) <= (size_t)max) {
            msg_hdr_t h = {.seq = p->next_seq++};
            memcpy(small, &h, sizeof(h));
            fill(small + sizeof(h), len, st->me, dst, h.seq);
            CHECK(send_am(st, dst, TAG_SMALL, small, sizeof(h) + len) == FERRY_OK);
        } else if (!p->large_busy) {
            unsigned char *buf = st->send_buf + (size_t)dst * MAX_LARGE;
            uint64_t seq = p->next_seq++;
            fill(buf, len, st->me, dst, seq);
            rts_t r = {.seq = seq, .len = len, .addr = (uint64_t)(uintptr_t)buf,
                       .rkey = send_key};
            p->large_busy = true;
            p->large_seq = seq;
            if (p->use_put) {
                p->put_done = false;
                CHECK(ferry_put(ctx, dst, buf, len, st->send_mem, p->zone.addr, &p->zone.rkey,
                                on_put_done, p) == FERRY_OK);
                while (!p->put_done) {
                    CHECK(ferry_progress(ctx) >= 0);
                    service(st);
                }
                CHECK(p->put_status == FERRY_OK);
                r.addr = 0; /* nothing to pull */
                CHECK(send_am(st, dst, TAG_PUTDONE, &r, sizeof(r)) == FERRY_OK);
            } else {
                CHECK(send_am(st, dst, TAG_RTS, &r, sizeof(r)) == FERRY_OK);
            }
            p->use_put = !p->use_put;
        }
        /* A peer with a rendezvous in flight is skipped this time round. */
        CHECK(ferry_progress(ctx) >= 0);
        service(st);
    }
    /* Drain: our large transfers complete, then everyone says how much. */
    for (int r = 0; r < st->size; r++) {
        while (st->pair[r].large_busy) {
            CHECK(ferry_progress(ctx) >= 0);
            service(st);
        }
    }
    for (int r = 0; r < st->size; r++) {
        done_t d = {.sent = st->pair[r].next_seq};
        CHECK(send_am(st, r, TAG_DONE, &d, sizeof(d)) == FERRY_OK);
    }
    for (int r = 0; r < st->size; r++) {
        pair_t *p = &st->pair[r];
        while (!p->done || p->expect_seq < p->done_count || p->get_busy) {
            CHECK(ferry_progress(ctx) >= 0);
            service(st);
        }
        CHECK(p->expect_seq == p->done_count);
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    printf("rank %d: %llu messages (%llu MiB) checked, nothing lost, duplicated or corrupted\n",
           st->me, (unsigned long long)st->checked_msgs,
           (unsigned long long)(st->checked_bytes >> 20));
    CHECK(ferry_mem_deregister(ctx, st->send_mem) == FERRY_OK);
    CHECK(ferry_mem_deregister(ctx, st->zone_mem) == FERRY_OK);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    free(st->send_buf);
    free(st->zone);
    free(st->get_buf);
    free(small);
    free(st);
    return 0;
}
