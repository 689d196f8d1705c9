/*
 * The tcp transport's framing at its edges: `tcp_stream`, two ranks under
 * ferryrun with FERRY_BTL=self,tcp.
 *
 * Rank 0 sends rank 1 a scripted stream of active messages whose sizes
 * straddle the thresholds of the receive and send paths (a frame header, the
 * lookahead read after a payload, the 16 KiB limit above which a message is
 * read to its end with one exact read, the 32 KiB limit above which an inline
 * send waits for room in the socket, the receive buffer's size, the largest
 * send), interleaved with puts into rank 1's memory and gets from it, so the
 * start of every kind of frame follows the end of every other. Rank 1 stops
 * progressing for a while every few messages, so the socket fills and rank
 * 0's sends meet back pressure (FERRY_ERR_NO_RESOURCE, progress, retry).
 *
 * Rank 1 checks every message's length, order and bytes, and the bytes of
 * every put once rank 0 says it has completed; rank 0 checks every get's
 * bytes. Run it with a small FERRY_TCP_RX_BUFFER too, so the receive buffer
 * grows for large messages and compacts partial frames.
 *
 * Prints "tcp_stream: ok" from rank 1 on success; exits 1 on a failed check
 * and 77 (skipped) when not run as two ranks.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ferry/ferry.h>

#include "unit/check.h"

#define TAG_DATA 30
#define TAG_ZONE 31
#define TAG_PUTDONE 32
#define TAG_DONE 33
#define ROUNDS 3
#define ZONE_HALF ((size_t)1 << 20)
#define PAUSE_EVERY 7
#define PAUSE_MS 30

typedef struct zone_msg {
    uint64_t addr;
    ferry_rkey_t rkey;
} zone_msg_t;

typedef struct putdone_msg {
    uint64_t seq;
    uint64_t len;
} putdone_msg_t;

typedef struct state {
    ferry_ctx_t *ctx;
    int me;
    /* rank 1 */
    unsigned char *zone;
    uint64_t next_seq;
    size_t nsizes;
    const size_t *sizes;
    uint64_t puts_checked;
    bool done;
    uint64_t done_count;
    bool pause;
    /* rank 0 */
    bool have_zone;
    zone_msg_t peer_zone;
    int comp_status;
    bool comp_done;
} state_t;

static unsigned char byte_of(uint64_t seq, size_t i)
{
    return (unsigned char)(seq * 131u + i * 7u + (i >> 8) + 1u);
}

static void fill(unsigned char *buf, size_t len, uint64_t seq)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = byte_of(seq, i);
}

static bool same(const unsigned char *buf, size_t len, uint64_t seq)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != byte_of(seq, i))
            return false;
    return true;
}

static void on_data(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    (void)ctx;
    (void)tag;
    CHECK(src == 0);
    uint64_t seq = st->next_seq++;
    size_t want = st->sizes[seq % st->nsizes];
    if (len != want || !same(data, len, seq)) {
        fprintf(stderr, "tcp_stream: message %llu: %zu bytes (want %zu), %s\n",
                (unsigned long long)seq, len, want,
                len == want ? "wrong bytes" : "wrong length");
        exit(1);
    }
    if (seq % PAUSE_EVERY == 0)
        st->pause = true;
}

static void on_zone(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    (void)ctx;
    (void)tag;
    CHECK(src == 1 && len == sizeof(zone_msg_t));
    memcpy(&st->peer_zone, data, sizeof(zone_msg_t));
    st->have_zone = true;
}

static void on_putdone(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                       void *arg)
{
    state_t *st = arg;
    (void)ctx;
    (void)tag;
    putdone_msg_t m;
    CHECK(src == 0 && len == sizeof(m));
    memcpy(&m, data, sizeof(m));
    CHECK(m.len <= ZONE_HALF);
    if (!same(st->zone, (size_t)m.len, m.seq)) {
        fprintf(stderr, "tcp_stream: put %llu of %llu bytes: wrong bytes in place\n",
                (unsigned long long)m.seq, (unsigned long long)m.len);
        exit(1);
    }
    st->puts_checked++;
}

static void on_done(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    (void)ctx;
    (void)tag;
    CHECK(src == 0 && len == sizeof(uint64_t));
    memcpy(&st->done_count, data, sizeof(uint64_t));
    st->done = true;
}

static void on_comp(void *arg, int status)
{
    state_t *st = arg;
    st->comp_status = status;
    st->comp_done = true;
}

static void send_am(state_t *st, int tag, const void *data, size_t len)
{
    for (;;) {
        int rc = ferry_am_send(st->ctx, 1 - st->me, tag, data, len);
        if (rc == FERRY_OK)
            return;
        CHECK(rc == FERRY_ERR_NO_RESOURCE);
        CHECK(ferry_progress(st->ctx) >= 0);
    }
}

static void wait_comp(state_t *st)
{
    while (!st->comp_done)
        CHECK(ferry_progress(st->ctx) >= 0);
    CHECK(st->comp_status == FERRY_OK);
    st->comp_done = false;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Message sizes in script order, each threshold from just below to just
 * above, the largest send last. */
static size_t make_sizes(size_t max, size_t *out)
{
    const size_t hdr = 16, look = 56;
    const size_t cand[] = {0,
                           1,
                           8,
                           look - hdr - 1,
                           look - hdr,
                           look,
                           255,
                           4096,
                           16384 - 1,
                           16384,
                           16384 + 1,
                           32768 - hdr - 1,
                           32768 - hdr,
                           32768,
                           100003,
                           256 * 1024,
                           512 * 1024 - hdr,
                           512 * 1024 + 3,
                           max - 1,
                           max,
                           3,
                           max};
    size_t n = 0;
    for (size_t i = 0; i < sizeof(cand) / sizeof(cand[0]); i++)
        if (cand[i] <= max)
            out[n++] = cand[i];
    return n;
}

static void run_sender(state_t *st, size_t nsizes, const size_t *sizes, size_t max)
{
    static const size_t put_sizes[] = {1, 40, 4095, 65537, ZONE_HALF};
    static const size_t get_sizes[] = {ZONE_HALF, 24, 16, 100000, 7};
    unsigned char *msg = malloc(max > 0 ? max : 1);
    unsigned char *local = malloc(ZONE_HALF);
    CHECK(msg != NULL && local != NULL);
    while (!st->have_zone)
        CHECK(ferry_progress(st->ctx) >= 0);
    uint64_t seq = 0, nput = 0, nget = 0;
    for (int round = 0; round < ROUNDS; round++) {
        for (size_t i = 0; i < nsizes; i++, seq++) {
            fill(msg, sizes[i], seq);
            send_am(st, TAG_DATA, msg, sizes[i]);
            if (seq % 3 == 1) {
                /* A put right behind a message, and its check behind it. */
                size_t len = put_sizes[nput % 5];
                uint64_t pseq = 1000000 + nput++;
                fill(local, len, pseq);
                CHECK(ferry_put(st->ctx, 1, local, len, NULL, st->peer_zone.addr,
                                &st->peer_zone.rkey, on_comp, st) == FERRY_OK);
                wait_comp(st);
                putdone_msg_t m = {.seq = pseq, .len = len};
                send_am(st, TAG_PUTDONE, &m, sizeof(m));
            } else if (seq % 3 == 2) {
                size_t len = get_sizes[nget++ % 5];
                memset(local, 0, len);
                CHECK(ferry_get(st->ctx, 1, local, len, NULL, st->peer_zone.addr + ZONE_HALF,
                                &st->peer_zone.rkey, on_comp, st) == FERRY_OK);
                wait_comp(st);
                if (!same(local, len, 7)) {
                    fprintf(stderr, "tcp_stream: get %llu of %zu bytes: wrong bytes\n",
                            (unsigned long long)nget, len);
                    exit(1);
                }
            }
        }
    }
    send_am(st, TAG_DONE, &seq, sizeof(seq));
    free(msg);
    free(local);
}

static void run_receiver(state_t *st)
{
    ferry_mem_t *mem = NULL;
    st->zone = calloc(1, 2 * ZONE_HALF);
    CHECK(st->zone != NULL);
    fill(st->zone + ZONE_HALF, ZONE_HALF, 7);
    CHECK(ferry_mem_register(st->ctx, st->zone, 2 * ZONE_HALF,
                             FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ,
                             &mem) == FERRY_OK);
    zone_msg_t z = {.addr = (uint64_t)(uintptr_t)st->zone};
    CHECK(ferry_mem_rkey(mem, &z.rkey) == FERRY_OK);
    send_am(st, TAG_ZONE, &z, sizeof(z));
    while (!st->done) {
        CHECK(ferry_progress(st->ctx) >= 0);
        if (st->pause) {
            /* Not reading lets the socket fill behind us. */
            st->pause = false;
            sleep_ms(PAUSE_MS);
        }
    }
    CHECK(st->done_count == st->next_seq);
    CHECK(st->puts_checked > 0);
    CHECK(ferry_mem_deregister(st->ctx, mem) == FERRY_OK);
    free(st->zone);
    printf("tcp_stream: ok (%llu messages, %llu puts checked)\n",
           (unsigned long long)st->next_seq, (unsigned long long)st->puts_checked);
}

int main(void)
{
    state_t st;
    memset(&st, 0, sizeof(st));
    CHECK(ferry_init(NULL, &st.ctx) == FERRY_OK);
    if (ferry_size(st.ctx) != 2) {
        printf("tcp_stream: SKIP: needs exactly 2 ranks, got %d\n", ferry_size(st.ctx));
        ferry_finalize(&st.ctx);
        return 77;
    }
    st.me = ferry_rank(st.ctx);
    long max = ferry_am_max_size(st.ctx, 1 - st.me);
    CHECK(max > 0);
    size_t sizes[32];
    size_t nsizes = make_sizes((size_t)max, sizes);
    st.sizes = sizes;
    st.nsizes = nsizes;
    CHECK(ferry_am_register(st.ctx, TAG_DATA, on_data, &st) == FERRY_OK);
    CHECK(ferry_am_register(st.ctx, TAG_ZONE, on_zone, &st) == FERRY_OK);
    CHECK(ferry_am_register(st.ctx, TAG_PUTDONE, on_putdone, &st) == FERRY_OK);
    CHECK(ferry_am_register(st.ctx, TAG_DONE, on_done, &st) == FERRY_OK);
    CHECK(ferry_barrier(st.ctx) == FERRY_OK);
    if (st.me == 0)
        run_sender(&st, nsizes, sizes, (size_t)max);
    else
        run_receiver(&st);
    CHECK(ferry_barrier(st.ctx) == FERRY_OK);
    CHECK(ferry_finalize(&st.ctx) == FERRY_OK);
    return 0;
}
