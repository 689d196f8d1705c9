/*
 * One-sided tests, as OSU measures MPI one-sided communication:
 *  put-lat, get-lat  the time of one operation and the ferry_flush that
 *                    completes it (not a ping-pong);
 *  put-bw, get-bw    windows of BENCH_WINDOW operations, each window
 *                    completed by one ferry_flush.
 * Rank 0 initiates; rank 1 progresses until rank 0 says it is done, since a
 * transport that emulates put and get needs the target's progress.
 * Each rank registers its buffer for remote reading and writing and sends
 * the address and remote key to the other in an active message.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static int rdma_setup(bench_t *b)
{
    if (b->rdma_ready)
        return FERRY_OK;
    /* --alloc: the buffer came registered from ferry_mem_alloc. */
    int rc = b->mem != NULL ? FERRY_OK
                            : ferry_mem_register(b->ctx, b->buf, b->buf_len,
                                                 FERRY_ACCESS_LOCAL | FERRY_ACCESS_REMOTE_READ |
                                                     FERRY_ACCESS_REMOTE_WRITE,
                                                 &b->mem);
    if (rc != FERRY_OK) {
        bench_error(b, "ferry_mem_register of %zu bytes: %s", b->buf_len, ferry_strerror(rc));
        return rc;
    }
    if ((rc = bench_exchange_rkey(b, b->mem, b->buf, b->buf_len, &b->peer_raddr,
                                  &b->peer_rkey)) != FERRY_OK)
        return rc;
    if ((rc = ferry_rkey_unpack(b->ctx, b->peer, &b->peer_rkey, &b->peer_rh)) != FERRY_OK) {
        bench_error(b, "ferry_rkey_unpack of rank %d's key: %s", b->peer, ferry_strerror(rc));
        return rc;
    }
    b->rdma_ready = true;
    return FERRY_OK;
}

void bench_rdma_fini(bench_t *b)
{
    if (b->peer_rh != NULL)
        ferry_rkey_release(b->ctx, b->peer_rh);
    b->peer_rh = NULL;
    if (b->mem != NULL && b->opts.alloc)
        ferry_mem_free(b->ctx, b->mem);
    else if (b->mem != NULL)
        ferry_mem_deregister(b->ctx, b->mem);
    b->mem = NULL;
    b->rdma_ready = false;
}

static bool is_put(bench_mode_t mode)
{
    return mode == BENCH_PUT_LAT || mode == BENCH_PUT_BW;
}

/* Starts one put or get of size bytes at the start of both buffers,
 * progressing and retrying while ferry is out of resources. Through the
 * peer's key unpacked once into a handle, as a runtime keeps it (UCX's
 * rkeys): the raw key's ferry_put checks it again on every call. */
static int start_op(bench_t *b, bool put, size_t size)
{
    bench_deadline_t d;
    bench_deadline_init(b, &d);
    const ferry_op_params_t p = {.local = b->mem};
    for (;;) {
        int rc = put ? ferry_put_nb(b->ctx, b->peer_rh, b->peer_raddr, b->buf, size, &p)
                     : ferry_get_nb(b->ctx, b->peer_rh, b->peer_raddr, b->buf, size, &p);
        if (rc == FERRY_OK)
            return FERRY_OK;
        if (rc != FERRY_ERR_NO_RESOURCE) {
            bench_error(b, "ferry_%s of %zu bytes: %s", put ? "put" : "get", size,
                        ferry_strerror(rc));
            return rc;
        }
        if ((rc = ferry_progress(b->ctx)) < 0) {
            bench_error(b, "ferry_progress: %s", ferry_strerror(rc));
            return rc;
        }
        if (bench_deadline_passed(&d)) {
            bench_error(b, "timed out after %d s waiting for resources to start a %s",
                        b->opts.timeout_s, put ? "put" : "get");
            return FERRY_ERR_TIMEOUT;
        }
    }
}

static int flush(bench_t *b, size_t size)
{
    int rc = ferry_flush(b->ctx, b->peer);
    if (rc != FERRY_OK)
        bench_error(b, "ferry_flush after operations of %zu bytes: %s", size,
                    ferry_strerror(rc));
    return rc;
}

/* Rank 0: a block of n iterations (operations for latency, windows for
 * bandwidth); blk->arg is the mode. */
static int rdma_block(bench_t *b, const bench_block_t *blk, long n, uint64_t *ns_out)
{
    bench_mode_t mode = *(const bench_mode_t *)blk->arg;
    size_t size = blk->size;
    bool put = is_put(mode);
    int per_flush = mode == BENCH_PUT_LAT || mode == BENCH_GET_LAT ? 1 : BENCH_WINDOW;
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        int rc;
        for (int k = 0; k < per_flush; k++)
            if ((rc = start_op(b, put, size)) != FERRY_OK)
                return rc;
        if ((rc = flush(b, size)) != FERRY_OK)
            return rc;
    }
    *ns_out = bench_now_ns() - t0;
    return FERRY_OK;
}

/* --check: the side that receives the bytes starts from zeros, the side
 * that provides them from the pattern. */
static void check_prepare(bench_t *b, bool put, size_t size)
{
    bool source = (b->rank == 0) == put;
    if (source)
        memcpy(b->buf, b->pattern, size);
    else
        memset(b->buf, 0, size);
}

static int check_verify(bench_t *b, bench_mode_t mode, size_t size)
{
    bool put = is_put(mode);
    if ((b->rank == 0) == put)
        return FERRY_OK;
    for (size_t i = 0; i < size; i++) {
        if (b->buf[i] != b->pattern[i]) {
            bench_error(b, "%s size %zu: byte %zu of the %s buffer is 0x%02x, expected 0x%02x",
                        bench_mode_name(mode), size, i, put ? "target" : "destination",
                        b->buf[i], b->pattern[i]);
            return FERRY_ERR_PROTO;
        }
    }
    return FERRY_OK;
}

/* Measures one size, paired with its floor when there is one. Rank 0
 * initiates every operation; rank 1 progresses until each block ends. */
static int one_size(bench_t *b, bench_mode_t mode, size_t size, bench_row_t *row)
{
    bool lat = mode == BENCH_PUT_LAT || mode == BENCH_GET_LAT;
    bench_block_t fig = {.run = rdma_block, .arg = &mode, .size = size, .rank0_only = true,
                         .per_time = lat, .unit = lat ? 1.0 : (double)size * BENCH_WINDOW};
    bench_block_t floor;
    bool have_floor;
    int rc = lat ? bench_floor_lat_block(b, &floor, &have_floor)
                 : bench_floor_bw_block(b, size, b->opts.alloc, &floor, &have_floor);
    if (rc != FERRY_OK)
        return rc;
    if (b->opts.check)
        check_prepare(b, is_put(mode), size);
    if ((rc = bench_barrier(b)) != FERRY_OK)
        return rc;
    char test[32];
    snprintf(test, sizeof(test), "%s%s", bench_mode_name(mode),
             b->opts.alloc ? "-alloc" : "");
    if (have_floor)
        rc = bench_pair_run(b, test, &floor, &fig, bench_warmup(b, mode, size), row);
    else
        rc = bench_reps_run(b, &fig, bench_warmup(b, mode, size), bench_iters(b, mode, size),
                            &row->value);
    if (rc == FERRY_OK && b->opts.check)
        rc = check_verify(b, mode, size);
    return rc;
}

int bench_run_rdma(bench_t *b, bench_mode_t mode)
{
    size_t sizes[BENCH_SIZES_MAX];
    int n = bench_sizes(b, mode, sizes);
    bool lat = mode == BENCH_PUT_LAT || mode == BENCH_GET_LAT;
    int rc = rdma_setup(b);
    if (rc != FERRY_OK)
        return rc;

    if (lat)
        bench_table_begin(b, mode,
                          "cache-line ping-pong half round trip (ratio = latency / floor); "
                          "latency = one operation and its ferry_flush",
                          "Latency (us)", "Floor (us)");
    else if (b->opts.alloc)
        bench_table_begin(b, mode,
                          "memcpy at the same size, one rank, hot cache, windows of 64 (ratio "
                          "= bandwidth / floor); target memory from ferry_mem_alloc",
                          "Bandwidth (MB/s)", "Floor (MB/s)");
    else
        bench_table_begin(b, mode,
                          "process_vm_writev at the same size (ratio = bandwidth / floor)",
                          "Bandwidth (MB/s)", "Floor (MB/s)");
    for (int i = 0; i < n; i++) {
        bench_row_t row = {.size = sizes[i], .floor = -1.0};
        if ((rc = one_size(b, mode, sizes[i], &row)) != FERRY_OK)
            return rc;
        bench_table_row(b, mode, &row, lat ? "us" : "MB/s");
    }
    return FERRY_OK;
}
