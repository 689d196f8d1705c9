/*
 * Remote atomics and put with notification (ferry.h, through remote key
 * handles):
 *  amo-fadd-lat, amo-cswap-lat  one ferry_atomic_fetch (ADD) or
 *                    ferry_atomic_cswap of 4 or 8 bytes to rank 1 and the
 *                    ferry_flush that completes it; the floor is a
 *                    ping-pong of CPU fetch-adds on a cache line the two
 *                    ranks share (half a round trip each);
 *  amo-fadd-am       amo-fadd-lat's fetch-add beside a whole round trip of
 *                    ferry's own active messages of the same size (the
 *                    cost of an atomic the target executes, against the
 *                    messages it is made of);
 *  put-notify-lat    a ping-pong of ferry_put_notify: each rank's handler
 *                    sees the notification, then puts back; half a round
 *                    trip, beside ferry's own active-message ping-pong of
 *                    the same size;
 *  amo-rate          windows of BENCH_WINDOW ferry_atomic_fetch (ADD of 1)
 *                    of 4 or 8 bytes in flight to one counter of rank 1,
 *                    each completed by its callback, in millions a second;
 *                    the floor is rank 0's own CPU fetch-adds on a line of
 *                    the shared mapping, windows of the same size, rank 1
 *                    not touching it (the one-sided rate);
 *  put-notify-bw     windows of BENCH_WINDOW ferry_put_notify of the size,
 *                    each window completed by one ferry_flush (which also
 *                    waits for the handlers), the target counting the
 *                    notifications; beside put-bw's floor at that size.
 * Rank 0 initiates the atomics while rank 1 progresses (a target-executed
 * atomic needs it). --alloc takes the target memory from ferry_mem_alloc.
 * After each size of amo-rate and put-notify-bw rank 0 says how many
 * operations it made, and rank 1 checks the counter's value (exactly that
 * many adds of 1, at the width) or the count of notifications; a
 * difference fails the run. With --check the put-notify-bw handler also
 * compares the bytes it sees with the ones its put carried: windows
 * alternate between the pattern and its complement, and each
 * notification's payload names its window. The other modes ignore --check.
 */
#include <stdint.h>
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

/* put-notify-bw's byte mask of a window: the pattern, or its complement. */
static uint8_t window_mask(uint64_t window)
{
    return (window & 1) != 0 ? 0xff : 0x00;
}

/* put-notify-bw at the target: counts each notification and, with --check
 * (note_check_size set), compares the bytes its put left with the ones the
 * window its payload names carried. */
static void on_note_bw(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                       void *arg)
{
    (void)ctx, (void)tag;
    bench_t *b = arg;
    b->notes_bw++;
    size_t size = b->note_check_size;
    if (size == 0)
        return;
    uint64_t window;
    if (src != b->peer || len != sizeof(window)) {
        if (b->notes_bad++ == 0)
            b->notes_bad_offset = SIZE_MAX;
        return;
    }
    memcpy(&window, data, sizeof(window));
    uint8_t mask = window_mask(window);
    for (size_t i = 0; i < size; i++) {
        if (b->amo_buf[i] != (uint8_t)(b->pattern[i] ^ mask)) {
            if (b->notes_bad++ == 0)
                b->notes_bad_offset = i;
            return;
        }
    }
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
    if ((rc = ferry_am_register(b->ctx, BENCH_TAG_NOTE, on_note, b)) != FERRY_OK ||
        (rc = ferry_am_register(b->ctx, BENCH_TAG_NOTE_BW, on_note_bw, b)) != FERRY_OK)
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
            rc = mode != BENCH_AMO_CSWAP_LAT
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

/* ---- amo-rate ---- */

/* Rank 0's fetch-adds of one size. */
typedef struct amo_rate {
    size_t size;
    uint64_t counted;  /* adds of 1 the counter must hold at the end */
    uint64_t started;  /* fetch-adds started, counted or not */
    uint64_t done;     /* their completions */
    int status;        /* the first error a completion reported */
    uint64_t result[BENCH_WINDOW];
} amo_rate_t;

static void on_fadd_done(void *arg, int status)
{
    amo_rate_t *r = arg;
    r->done++;
    if (status != FERRY_OK && r->status == FERRY_OK)
        r->status = status;
}

/* Starts the fetch-add whose value before goes to r->result[slot],
 * progressing and retrying while the transport has no room. */
static int fadd_start(bench_t *b, amo_rate_t *r, int slot)
{
    ferry_op_params_t p = {.cb = on_fadd_done, .arg = r};
    bench_deadline_t d;
    bench_deadline_init(b, &d);
    for (;;) {
        int rc = ferry_atomic_fetch(b->ctx, b->amo_rh, b->amo_raddr, FERRY_ATOMIC_ADD, r->size,
                                    1, &r->result[slot], &p);
        if (rc == FERRY_OK) {
            r->started++;
            return FERRY_OK;
        }
        if (rc != FERRY_ERR_NO_RESOURCE) {
            bench_error(b, "amo-rate: ferry_atomic_fetch of %zu bytes: %s", r->size,
                        ferry_strerror(rc));
            return rc;
        }
        if ((rc = ferry_progress(b->ctx)) < 0) {
            bench_error(b, "amo-rate: ferry_progress: %s", ferry_strerror(rc));
            return rc;
        }
        if (bench_deadline_passed(&d)) {
            bench_error(b, "amo-rate: timed out after %d s waiting for resources to start a "
                        "fetch-add", b->opts.timeout_s);
            return FERRY_ERR_TIMEOUT;
        }
    }
}

/* Progresses until every fetch-add started has completed. */
static int fadd_wait(bench_t *b, amo_rate_t *r)
{
    bench_deadline_t d;
    bench_deadline_init(b, &d);
    while (r->done < r->started) {
        int rc = ferry_progress(b->ctx);
        if (rc < 0) {
            bench_error(b, "amo-rate: ferry_progress: %s", ferry_strerror(rc));
            return rc;
        }
        if (bench_deadline_passed(&d)) {
            bench_error(b, "amo-rate: timed out after %d s with %llu of %llu fetch-adds of %zu "
                        "bytes complete", b->opts.timeout_s, (unsigned long long)r->done,
                        (unsigned long long)r->started, r->size);
            return FERRY_ERR_TIMEOUT;
        }
    }
    if (r->status != FERRY_OK) {
        bench_error(b, "amo-rate: a fetch-add of %zu bytes completed with %s", r->size,
                    ferry_strerror(r->status));
        return r->status;
    }
    return FERRY_OK;
}

/* Rank 0: n windows of BENCH_WINDOW fetch-adds, the window's completions
 * awaited before the next starts. */
static int amo_rate_block(bench_t *b, const bench_block_t *blk, long n, uint64_t *ns_out)
{
    amo_rate_t *r = blk->arg;
    uint64_t t0 = bench_now_ns();
    for (long w = 0; w < n; w++) {
        int rc;
        for (int k = 0; k < BENCH_WINDOW; k++)
            if ((rc = fadd_start(b, r, k)) != FERRY_OK)
                return rc;
        r->counted += BENCH_WINDOW;
        if ((rc = fadd_wait(b, r)) != FERRY_OK)
            return rc;
    }
    *ns_out = bench_now_ns() - t0;
    return FERRY_OK;
}

/* ---- put-notify-bw ---- */

typedef struct note_bw {
    size_t size;
    uint64_t counted; /* puts with notification the target must have seen */
    uint64_t window;  /* windows sent in this size: the next one's number */
} note_bw_t;

/* One put with notification of r->size bytes from this rank's atomic
 * buffer (registered) to the peer's, its payload the window's number. */
static int note_bw_put(bench_t *b, note_bw_t *r, uint64_t window)
{
    ferry_op_params_t p = {.local = b->amo_mem};
    bench_deadline_t d;
    bench_deadline_init(b, &d);
    for (;;) {
        int rc = ferry_put_notify(b->ctx, b->amo_rh, b->amo_raddr, b->amo_buf, r->size,
                                  BENCH_TAG_NOTE_BW, &window, sizeof(window), &p);
        if (rc == FERRY_OK)
            return FERRY_OK;
        if (rc != FERRY_ERR_NO_RESOURCE) {
            bench_error(b, "put-notify-bw: ferry_put_notify of %zu bytes: %s", r->size,
                        ferry_strerror(rc));
            return rc;
        }
        if ((rc = ferry_progress(b->ctx)) < 0) {
            bench_error(b, "put-notify-bw: ferry_progress: %s", ferry_strerror(rc));
            return rc;
        }
        if (bench_deadline_passed(&d)) {
            bench_error(b, "put-notify-bw: timed out after %d s waiting for resources to "
                        "start a put with notification", b->opts.timeout_s);
            return FERRY_ERR_TIMEOUT;
        }
    }
}

/* This rank's source bytes for window w: the pattern under its mask. */
static void note_bw_fill(bench_t *b, size_t size, uint64_t window)
{
    uint8_t mask = window_mask(window);
    for (size_t i = 0; i < size; i++)
        b->amo_buf[i] = (uint8_t)(b->pattern[i] ^ mask);
}

/* Rank 0: n windows of BENCH_WINDOW puts with notification, each window
 * completed by one ferry_flush, after which its handlers have run at the
 * target. With --check the windows alternate their bytes (the source is
 * rewritten between windows, inside the timing). */
static int note_bw_block(bench_t *b, const bench_block_t *blk, long n, uint64_t *ns_out)
{
    note_bw_t *r = blk->arg;
    uint64_t t0 = bench_now_ns();
    for (long w = 0; w < n; w++) {
        uint64_t window = r->window++;
        if (b->opts.check)
            note_bw_fill(b, r->size, window);
        /* notify-data: the payloads name the other window's bytes. */
        uint64_t named = b->fault == BENCH_FAULT_NOTIFY_DATA ? window + 1 : window;
        int rc;
        for (int k = 0; k < BENCH_WINDOW; k++)
            if ((rc = note_bw_put(b, r, named)) != FERRY_OK)
                return rc;
        r->counted += BENCH_WINDOW;
        if ((rc = ferry_flush(b->ctx, b->peer)) != FERRY_OK) {
            bench_error(b, "put-notify-bw: ferry_flush after puts with notification of %zu "
                        "bytes: %s", r->size, ferry_strerror(rc));
            return rc;
        }
    }
    *ns_out = bench_now_ns() - t0;
    return FERRY_OK;
}

/* ---- the final check of amo-rate and put-notify-bw ---- */

/* What rank 1 finds of `made` operations, and whether that is right: the
 * counter at the width, or the notifications and what their handler saw.
 * Reports a difference itself. */
static bool tally_ok(bench_t *b, bench_mode_t mode, size_t size, uint64_t made)
{
    const char *test = bench_mode_name(mode);
    if (mode == BENCH_AMO_RATE) {
        /* Rank 0's fetch-adds are complete, and this rank has heard so. */
        uint64_t have = size == 4 ? __atomic_load_n((uint32_t *)(void *)b->amo_buf,
                                                    __ATOMIC_ACQUIRE)
                                  : __atomic_load_n((uint64_t *)(void *)b->amo_buf,
                                                    __ATOMIC_ACQUIRE);
        uint64_t want = size == 4 ? made & UINT32_MAX : made;
        if (have == want)
            return true;
        bench_error(b, "%s size %zu: the counter holds %llu after rank %d's %llu fetch-adds "
                    "of 1, expected %llu", test, size, (unsigned long long)have, b->peer,
                    (unsigned long long)made, (unsigned long long)want);
        return false;
    }
    if (b->notes_bw != made) {
        bench_error(b, "%s size %zu: %llu notifications arrived, rank %d made %llu puts with "
                    "notification", test, size, (unsigned long long)b->notes_bw, b->peer,
                    (unsigned long long)made);
        return false;
    }
    if (b->notes_bad == 0)
        return true;
    if (b->notes_bad_offset == SIZE_MAX)
        bench_error(b, "%s size %zu: %llu notifications had a malformed payload", test, size,
                    (unsigned long long)b->notes_bad);
    else
        bench_error(b, "%s size %zu: %llu handlers saw other bytes than their put's (the "
                    "first at byte %zu)", test, size, (unsigned long long)b->notes_bad,
                    b->notes_bad_offset);
    return false;
}

/* Collective, after a size: rank 0 sends how many operations it made;
 * rank 1 checks them and answers with its verdict. A wrong count, on
 * either side, is FERRY_ERR_PROTO. */
static int tally(bench_t *b, bench_mode_t mode, size_t size, uint64_t made)
{
    size_t len;
    int32_t ok = 0;
    int rc;
    if (b->rank == 0) {
        if ((rc = bench_ctrl_send(b, BENCH_CTRL_TALLY, &made, sizeof(made))) != FERRY_OK ||
            (rc = bench_ctrl_recv(b, BENCH_CTRL_TALLY, &ok, sizeof(ok), &len)) != FERRY_OK)
            return rc;
        if (len != sizeof(ok) || (ok != 0 && ok != 1)) {
            bench_error(b, "malformed verdict from rank %d", b->peer);
            return FERRY_ERR_PROTO;
        }
        return ok == 1 ? FERRY_OK : FERRY_ERR_PROTO;
    }
    if ((rc = bench_ctrl_recv(b, BENCH_CTRL_TALLY, &made, sizeof(made), &len)) != FERRY_OK)
        return rc;
    if (len != sizeof(made)) {
        bench_error(b, "malformed operation count from rank %d", b->peer);
        return FERRY_ERR_PROTO;
    }
    ok = tally_ok(b, mode, size, made);
    b->note_check_size = 0;
    if ((rc = bench_ctrl_send(b, BENCH_CTRL_TALLY, &ok, sizeof(ok))) != FERRY_OK)
        return rc;
    return ok == 1 ? FERRY_OK : FERRY_ERR_PROTO;
}

/* Rank 0 before the tally: the operation FERRY_BENCH_FAULT leaves out of
 * the count (amo-sum, notify-count), through the measured path. */
static int fault_extra(bench_t *b, bench_mode_t mode, amo_rate_t *ar, note_bw_t *nr)
{
    int rc;
    if (mode == BENCH_AMO_RATE && b->fault == BENCH_FAULT_AMO_SUM) {
        if ((rc = fadd_start(b, ar, 0)) != FERRY_OK)
            return rc;
        return fadd_wait(b, ar);
    }
    if (mode == BENCH_PUT_NOTIFY_BW && b->fault == BENCH_FAULT_NOTIFY_COUNT) {
        if ((rc = note_bw_put(b, nr, nr->window - 1)) != FERRY_OK)
            return rc;
        return ferry_flush(b->ctx, b->peer);
    }
    return FERRY_OK;
}

/* amo-rate and put-notify-bw at one size: the counter or the notification
 * count zeroed at rank 1 before the barrier, the pairs, and the tally. */
static int one_size_counted(bench_t *b, bench_mode_t mode, size_t size, bench_row_t *row)
{
    amo_rate_t ar = {.size = size};
    note_bw_t nr = {.size = size};
    bench_block_t fig, floor;
    bool have_floor;
    int rc;
    if (mode == BENCH_AMO_RATE) {
        fig = (bench_block_t){.run = amo_rate_block, .arg = &ar, .size = size,
                              .rank0_only = true, .unit = BENCH_WINDOW};
        rc = bench_floor_atomic_rate_block(b, size, &floor, &have_floor);
    } else {
        fig = (bench_block_t){.run = note_bw_block, .arg = &nr, .size = size,
                              .rank0_only = true, .unit = (double)size * BENCH_WINDOW};
        rc = bench_floor_bw_block(b, size, b->opts.alloc, &floor, &have_floor);
    }
    if (rc != FERRY_OK)
        return rc;
    if (b->rank == 1) {
        /* Nothing is in flight to this memory before the barrier. */
        if (mode == BENCH_AMO_RATE)
            __atomic_store_n((uint64_t *)(void *)b->amo_buf, 0, __ATOMIC_RELEASE);
        else
            memset(b->amo_buf, 0, size);
        b->notes_bw = 0;
        b->notes_bad = 0;
        b->notes_bad_offset = 0;
        b->note_check_size = mode == BENCH_PUT_NOTIFY_BW && b->opts.check ? size : 0;
    } else if (mode == BENCH_PUT_NOTIFY_BW) {
        note_bw_fill(b, size, 0);
    }
    if ((rc = bench_barrier(b)) != FERRY_OK)
        return rc;
    char test[32];
    snprintf(test, sizeof(test), "%s%s", bench_mode_name(mode), b->opts.alloc ? "-alloc" : "");
    if (have_floor)
        rc = bench_pair_run(b, test, &floor, &fig, bench_warmup(b, mode, size), row);
    else
        rc = bench_reps_run(b, &fig, bench_warmup(b, mode, size), bench_iters(b, mode, size),
                            &row->value);
    if (rc == FERRY_OK && b->rank == 0)
        rc = fault_extra(b, mode, &ar, &nr);
    if (rc != FERRY_OK)
        return rc;
    return tally(b, mode, size, mode == BENCH_AMO_RATE ? ar.counted : nr.counted);
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
    } else if (mode == BENCH_AMO_FADD_AM) {
        /* Beside a whole round trip of ferry's active messages. */
        fig = (bench_block_t){.run = amo_block, .arg = &mode, .size = size, .rank0_only = true,
                              .per_time = true, .unit = 1.0};
        floor = (bench_block_t){.run = note_block, .arg = (void *)&no, .size = size,
                                .per_time = true, .unit = 1.0};
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
    bool counted = mode == BENCH_AMO_RATE || mode == BENCH_PUT_NOTIFY_BW;
    const char *unit = mode == BENCH_AMO_RATE ? "Mops/s" : mode == BENCH_PUT_NOTIFY_BW ? "MB/s"
                                                                                      : "us";
    if (mode == BENCH_AMO_RATE)
        bench_table_begin(b, mode,
                          "one-sided CPU fetch-adds of the same width by rank 0, windows of 64, "
                          "on a cache line of a mapping the two ranks share that rank 1 does "
                          "not touch meanwhile (no remote atomic stream can pass it; ratio = "
                          "rate / floor); rate = windows of 64 ferry_atomic_fetch in flight, "
                          "each window's callbacks awaited; the counter's sum checked",
                          "Rate (Mops/s)", "CPU (Mops/s)");
    else if (mode == BENCH_PUT_NOTIFY_BW && b->opts.alloc)
        bench_table_begin(b, mode,
                          "memcpy at the same size, one rank, hot cache, windows of 64, as "
                          "put-bw-alloc (ratio = bandwidth / floor); windows of 64 "
                          "ferry_put_notify, one ferry_flush each; target memory from "
                          "ferry_mem_alloc; notifications counted",
                          "Bandwidth (MB/s)", "Floor (MB/s)");
    else if (mode == BENCH_PUT_NOTIFY_BW)
        bench_table_begin(b, mode,
                          "process_vm_writev at the same size, as put-bw (ratio = bandwidth / "
                          "floor); windows of 64 ferry_put_notify, one ferry_flush each; "
                          "notifications counted",
                          "Bandwidth (MB/s)", "Floor (MB/s)");
    else if (mode == BENCH_AMO_FADD_AM)
        bench_table_begin(b, mode,
                          "ferry's active-message ping-pong of the same size, a whole round "
                          "trip (ratio = latency / floor); latency = one fetch-add and its "
                          "ferry_flush, as amo-fadd-lat",
                          "Latency (us)", "AM RTT (us)");
    else if (mode == BENCH_PUT_NOTIFY_LAT)
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
    bool atomic = mode != BENCH_PUT_NOTIFY_LAT && mode != BENCH_PUT_NOTIFY_BW;
    for (int i = 0; i < n; i++) {
        /* Atomics come in two widths only. */
        if (atomic && sizes[i] != 4 && sizes[i] != 8)
            continue;
        if (!atomic && sizes[i] > b->buf_len)
            continue;
        bench_row_t row = {.size = sizes[i], .floor = -1.0};
        rc = counted ? one_size_counted(b, mode, sizes[i], &row)
                     : one_size(b, mode, sizes[i], &row);
        if (rc != FERRY_OK)
            return rc;
        bench_table_row(b, mode, &row, unit);
    }
    return FERRY_OK;
}
