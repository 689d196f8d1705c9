/*
 * Remote atomics and put with notification (ferry.h, through remote key
 * handles):
 *  amo-fadd-lat, amo-cswap-lat  one ferry_atomic_fetch (ADD) or
 *                    ferry_atomic_cswap of 4 or 8 bytes to rank 1 and the
 *                    ferry_flush that completes it; the floor is a
 *                    ping-pong of CPU fetch-adds on a cache line the two
 *                    ranks share (half a round trip each);
 *  put-notify-lat    a ping-pong of ferry_put_notify: each rank's handler
 *                    sees the notification, then puts back; half a round
 *                    trip, beside ferry's own active-message ping-pong of
 *                    the same size.
 * Rank 0 initiates the atomics while rank 1 progresses (a target-executed
 * atomic needs it). --alloc takes the target memory from ferry_mem_alloc;
 * --check does not apply here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void on_note(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)data, (void)len;
    bench_t *b = arg;
    b->notes++;
}

static int amo_setup(bench_t *b)
{
    if (b->amo_ready)
        return FERRY_OK;
    unsigned rights = FERRY_ACCESS_LOCAL | FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE |
                      FERRY_ACCESS_REMOTE_ATOMIC;
    int rc;
    if (b->opts.alloc) {
        void *addr;
        rc = ferry_mem_alloc(b->ctx, b->buf_len, rights, &addr, &b->amo_mem);
        b->amo_buf = rc == FERRY_OK ? addr : NULL;
    } else {
        b->amo_plain = calloc(1, b->buf_len);
        if (b->amo_plain == NULL)
            return FERRY_ERR_NO_MEMORY;
        b->amo_buf = b->amo_plain;
        rc = ferry_mem_register(b->ctx, b->amo_buf, b->buf_len, rights, &b->amo_mem);
    }
    if (rc != FERRY_OK) {
        bench_error(b, "%s of %zu bytes with the atomic right: %s",
                    b->opts.alloc ? "ferry_mem_alloc" : "ferry_mem_register", b->buf_len,
                    ferry_strerror(rc));
        return rc;
    }
    memset(b->amo_buf, 0, b->buf_len);
    if ((rc = ferry_am_register(b->ctx, BENCH_TAG_NOTE, on_note, b)) != FERRY_OK)
        return rc;
    ferry_rkey_t key;
    if ((rc = bench_exchange_rkey(b, b->amo_mem, b->amo_buf, b->buf_len, &b->amo_raddr, &key)) !=
        FERRY_OK)
        return rc;
    if ((rc = ferry_rkey_unpack(b->ctx, b->peer, &key, &b->amo_rh)) != FERRY_OK) {
        bench_error(b, "ferry_rkey_unpack of rank %d's key: %s", b->peer, ferry_strerror(rc));
        return rc;
    }
    b->amo_ready = true;
    return FERRY_OK;
}

void bench_amo_fini(bench_t *b)
{
    if (b->amo_rh != NULL)
        ferry_rkey_release(b->ctx, b->amo_rh);
    b->amo_rh = NULL;
    if (b->amo_mem != NULL && b->opts.alloc)
        ferry_mem_free(b->ctx, b->amo_mem);
    else if (b->amo_mem != NULL)
        ferry_mem_deregister(b->ctx, b->amo_mem);
    b->amo_mem = NULL;
    free(b->amo_plain);
    b->amo_plain = NULL;
    b->amo_ready = false;
}

/* Rank 0: n atomics, each completed by ferry_flush; blk->arg is the mode. */
static int amo_block(bench_t *b, const bench_block_t *blk, long n, uint64_t *ns_out)
{
    bench_mode_t mode = *(const bench_mode_t *)blk->arg;
    size_t size = blk->size;
    uint64_t old = 0;
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        bench_deadline_t d;
        bench_deadline_init(b, &d);
        int rc;
        for (;;) {
            rc = mode == BENCH_AMO_FADD_LAT
                     ? ferry_atomic_fetch(b->ctx, b->amo_rh, b->amo_raddr, FERRY_ATOMIC_ADD, size,
                                          1, &old, NULL)
                     : ferry_atomic_cswap(b->ctx, b->amo_rh, b->amo_raddr, size, old, old + 1,
                                          &old, NULL);
            if (rc != FERRY_ERR_NO_RESOURCE)
                break;
            if ((rc = ferry_progress(b->ctx)) < 0)
                break;
            if (bench_deadline_passed(&d)) {
                bench_error(b, "timed out waiting for resources to start an atomic");
                return FERRY_ERR_TIMEOUT;
            }
        }
        if (rc == FERRY_OK)
            rc = ferry_flush(b->ctx, b->peer);
        if (rc != FERRY_OK) {
            bench_error(b, "%s of %zu bytes: %s", bench_mode_name(mode), size,
                        ferry_strerror(rc));
            return rc;
        }
    }
    *ns_out = bench_now_ns() - t0;
    return FERRY_OK;
}

/* Progresses until b->notes reaches want. */
static int wait_notes(bench_t *b, uint64_t want)
{
    bench_deadline_t d;
    bench_deadline_init(b, &d);
    while (b->notes < want) {
        int rc = ferry_progress(b->ctx);
        if (rc < 0)
            return rc;
        if (bench_deadline_passed(&d)) {
            bench_error(b, "timed out waiting for rank %d's notification", b->peer);
            return FERRY_ERR_TIMEOUT;
        }
    }
    return FERRY_OK;
}

/* One message to the peer: a put with notification (notify) or ferry's own
 * active message of the same size, retried under back pressure. */
static int ping(bench_t *b, bool notify, size_t size)
{
    bench_deadline_t d;
    bench_deadline_init(b, &d);
    for (;;) {
        int rc = notify ? ferry_put_notify(b->ctx, b->amo_rh, b->amo_raddr, b->buf, size,
                                           BENCH_TAG_NOTE, NULL, 0, NULL)
                        : ferry_am_send(b->ctx, b->peer, BENCH_TAG_NOTE, b->buf, size);
        if (rc != FERRY_ERR_NO_RESOURCE)
            return rc;
        if ((rc = ferry_progress(b->ctx)) < 0)
            return rc;
        if (bench_deadline_passed(&d))
            return FERRY_ERR_TIMEOUT;
    }
}

/* Both ranks: n ping-pongs; blk->arg is true for put-notify. Rank 0 sends
 * first. Each exchange brings each rank one message, so the count of
 * exchanges (not the block) says what to wait for: chunks and blocks are
 * not separated by any synchronisation, and rank 0's next ping may come
 * before rank 1 has started its next chunk. */
static int note_block(bench_t *b, const bench_block_t *blk, long n, uint64_t *ns_out)
{
    bool notify = *(const bool *)blk->arg;
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        int rc;
        uint64_t want = ++b->note_seq;
        if (b->rank == 0) {
            if ((rc = ping(b, notify, blk->size)) != FERRY_OK ||
                (rc = wait_notes(b, want)) != FERRY_OK)
                return rc;
        } else {
            if ((rc = wait_notes(b, want)) != FERRY_OK ||
                (rc = ping(b, notify, blk->size)) != FERRY_OK)
                return rc;
        }
    }
    *ns_out = bench_now_ns() - t0;
    /* The buffer is reused by the next block: what was put is complete. */
    return ferry_flush(b->ctx, b->peer);
}

static int one_size(bench_t *b, bench_mode_t mode, size_t size, bench_row_t *row)
{
    static const bool yes = true, no = false;
    bench_block_t fig, floor;
    bool have_floor = true;
    int rc = FERRY_OK;
    if (mode == BENCH_PUT_NOTIFY_LAT) {
        fig = (bench_block_t){.run = note_block, .arg = (void *)&yes, .size = size,
                              .per_time = true, .unit = 2.0};
        floor = fig;
        floor.arg = (void *)&no;
    } else {
        fig = (bench_block_t){.run = amo_block, .arg = &mode, .size = size, .rank0_only = true,
                              .per_time = true, .unit = 1.0};
        rc = bench_floor_atomic_block(b, &floor, &have_floor);
    }
    if (rc != FERRY_OK || (rc = bench_barrier(b)) != FERRY_OK)
        return rc;
    char test[32];
    snprintf(test, sizeof(test), "%s%s", bench_mode_name(mode), b->opts.alloc ? "-alloc" : "");
    if (have_floor)
        return bench_pair_run(b, test, &floor, &fig, bench_warmup(b, mode, size), row);
    return bench_reps_run(b, &fig, bench_warmup(b, mode, size), bench_iters(b, mode, size),
                          &row->value);
}

int bench_run_amo(bench_t *b, bench_mode_t mode)
{
    size_t sizes[BENCH_SIZES_MAX];
    int n = bench_sizes(b, mode, sizes);
    int rc = amo_setup(b);
    if (rc != FERRY_OK)
        return rc;
    if (mode == BENCH_PUT_NOTIFY_LAT)
        bench_table_begin(b, mode,
                          "ferry's active-message ping-pong of the same size (ratio = latency / "
                          "floor); latency = half a round trip of puts with notification",
                          "Latency (us)", "AM (us)");
    else
        bench_table_begin(b, mode,
                          "a CPU fetch-add ping-pong on a cache line the two ranks share, half "
                          "a round trip (ratio = latency / floor); latency = one atomic and "
                          "its ferry_flush",
                          "Latency (us)", "Floor (us)");
    for (int i = 0; i < n; i++) {
        /* Atomics come in two widths only. */
        if (mode != BENCH_PUT_NOTIFY_LAT && sizes[i] != 4 && sizes[i] != 8)
            continue;
        if (mode == BENCH_PUT_NOTIFY_LAT && sizes[i] > b->buf_len)
            continue;
        bench_row_t row = {.size = sizes[i], .floor = -1.0};
        if ((rc = one_size(b, mode, sizes[i], &row)) != FERRY_OK)
            return rc;
        bench_table_row(b, mode, &row, "us");
    }
    return FERRY_OK;
}
