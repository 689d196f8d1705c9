/*
 * Active-message tests, as OSU measures MPI:
 *  am-lat   ping-pong; the latency is half the round trip.
 *  am-bw    rank 0 sends windows of BENCH_WINDOW messages, rank 1
 *           acknowledges each window once all of it has arrived.
 *  am-bibw  both ranks send a window at once and wait for the other's.
 *  am-rate  as am-bw, counted in messages rather than bytes.
 * A message larger than the AM max size goes as several max-size chunks, as
 * an MPI layer over ferry would send it; the receiver counts bytes.
 */
#include <string.h>

#include "bench.h"

/* Rank-local bookkeeping of one size: what this rank expects to receive. */
typedef struct am_run {
    bench_mode_t mode;
    size_t size;
    uint64_t units; /* data units this rank must have received so far */
    uint64_t acks;
} am_run_t;

static int lat_iters(bench_t *b, am_run_t *r, long n)
{
    int rc;
    uint64_t u = bench_units(r->size);
    for (long i = 0; i < n; i++) {
        r->units += u;
        if (b->rank == 0) {
            if ((rc = bench_send_data(b, b->pattern, r->size)) != FERRY_OK ||
                (rc = bench_wait_units(b, r->units, "waiting for a pong")) != FERRY_OK)
                return rc;
        } else {
            if ((rc = bench_wait_units(b, r->units, "waiting for a ping")) != FERRY_OK ||
                (rc = bench_send_data(b, b->pattern, r->size)) != FERRY_OK)
                return rc;
        }
    }
    return FERRY_OK;
}

static int send_window(bench_t *b, size_t size)
{
    for (int i = 0; i < BENCH_WINDOW; i++) {
        int rc = bench_send_data(b, b->pattern, size);
        if (rc != FERRY_OK)
            return rc;
    }
    return FERRY_OK;
}

/* am-bw and am-rate: rank 0 sends, rank 1 acknowledges each window. */
static int bw_iters(bench_t *b, am_run_t *r, long n)
{
    int rc;
    uint64_t u = bench_units(r->size) * BENCH_WINDOW;
    for (long i = 0; i < n; i++) {
        if (b->rank == 0) {
            r->acks++;
            if ((rc = send_window(b, r->size)) != FERRY_OK ||
                (rc = bench_wait_acks(b, r->acks, "waiting for a window's acknowledgement")) !=
                    FERRY_OK)
                return rc;
        } else {
            r->units += u;
            if ((rc = bench_wait_units(b, r->units, "receiving a window")) != FERRY_OK ||
                (rc = bench_send_ack(b)) != FERRY_OK)
                return rc;
        }
    }
    return FERRY_OK;
}

/* am-bibw: both send a window, then wait for the other's. Rank 1
 * acknowledges the last window, so rank 0's clock stops only when its own
 * data has arrived too. */
static int bibw_iters(bench_t *b, am_run_t *r, long n)
{
    int rc;
    uint64_t u = bench_units(r->size) * BENCH_WINDOW;
    for (long i = 0; i < n; i++) {
        r->units += u;
        if ((rc = send_window(b, r->size)) != FERRY_OK ||
            (rc = bench_wait_units(b, r->units, "receiving a window")) != FERRY_OK)
            return rc;
    }
    if (b->rank == 1)
        return bench_send_ack(b);
    r->acks++;
    return bench_wait_acks(b, r->acks, "waiting for the final acknowledgement");
}

/* A block of n iterations (both ranks). */
static int am_block(bench_t *b, const bench_block_t *blk, long n, uint64_t *ns_out)
{
    am_run_t *r = blk->arg;
    uint64_t t0 = bench_now_ns();
    int rc;
    switch (r->mode) {
    case BENCH_AM_LAT:
        rc = lat_iters(b, r, n);
        break;
    case BENCH_AM_BIBW:
        rc = bibw_iters(b, r, n);
        break;
    default:
        rc = bw_iters(b, r, n);
        break;
    }
    if (rc == FERRY_OK)
        *ns_out = bench_now_ns() - t0;
    return rc;
}

/* The figure as a block: latency is half a round trip; bandwidth counts
 * the window's bytes (both directions' in am-bibw); the rate counts
 * messages, in millions a second. */
static bench_block_t am_fig(bench_mode_t mode, size_t size, am_run_t *r)
{
    bench_block_t blk = {.run = am_block, .arg = r, .size = size};
    switch (mode) {
    case BENCH_AM_LAT:
        blk.per_time = true;
        blk.unit = 2.0;
        break;
    case BENCH_AM_BW:
        blk.unit = (double)size * BENCH_WINDOW;
        break;
    case BENCH_AM_BIBW:
        blk.unit = 2.0 * (double)size * BENCH_WINDOW;
        break;
    default:
        blk.unit = BENCH_WINDOW;
        break;
    }
    return blk;
}

/* Measures one size, paired with its floor when there is one; rank 0 gets
 * the row. */
static int one_size(bench_t *b, bench_mode_t mode, size_t size, bench_row_t *row)
{
    am_run_t r = {.mode = mode, .size = size};
    bench_block_t fig = am_fig(mode, size, &r), floor;
    bool have_floor = false;
    int rc;

    if (mode == BENCH_AM_LAT)
        rc = bench_floor_lat_block(b, &floor, &have_floor);
    else if (mode != BENCH_AM_RATE)
        rc = bench_floor_bw_block(b, size, false, &floor, &have_floor);
    else
        rc = FERRY_OK;
    if (rc != FERRY_OK)
        return rc;
    bench_rx_reset(b, size);
    if ((rc = bench_barrier(b)) != FERRY_OK)
        return rc;
    if (have_floor)
        rc = bench_pair_run(b, bench_mode_name(mode), &floor, &fig, bench_warmup(b, mode, size),
                            row);
    else
        rc = bench_reps_run(b, &fig, bench_warmup(b, mode, size), bench_iters(b, mode, size),
                            &row->value);
    if (rc != FERRY_OK)
        return rc;
    /* Every wait above ends at a count; more data than counted would be a
     * duplicate, which the next barrier could hide, so look now. */
    if ((rc = bench_barrier(b)) != FERRY_OK)
        return rc;
    if (b->rx.units != r.units || b->rx.acks != r.acks) {
        bench_error(b, "%s size %zu: received %llu data units and %llu acknowledgements, "
                    "expected %llu and %llu", bench_mode_name(mode), size,
                    (unsigned long long)b->rx.units, (unsigned long long)b->rx.acks,
                    (unsigned long long)r.units, (unsigned long long)r.acks);
        return FERRY_ERR_PROTO;
    }
    if (b->rx.bad_chunks > 0) {
        bench_error(b, "%s size %zu: %llu chunks arrived with wrong bytes (the first at "
                    "byte %zu of its message; beyond the size means a chunk overran it)",
                    bench_mode_name(mode), size, (unsigned long long)b->rx.bad_chunks,
                    b->rx.bad_offset);
        return FERRY_ERR_PROTO;
    }
    return FERRY_OK;
}

int bench_run_am(bench_t *b, bench_mode_t mode)
{
    size_t sizes[BENCH_SIZES_MAX];
    int n = bench_sizes(b, mode, sizes);
    int rc;
    const char *floor_what, *value_col, *floor_col, *unit;

    switch (mode) {
    case BENCH_AM_LAT:
        floor_what = "cache-line ping-pong half round trip (ratio = latency / floor)";
        value_col = "Latency (us)";
        floor_col = "Floor (us)";
        unit = "us";
        break;
    case BENCH_AM_RATE:
        floor_what = "none for message rate";
        value_col = "Rate (Mmsg/s)";
        floor_col = "Floor";
        unit = "Mmsg/s";
        break;
    default:
        floor_what = mode == BENCH_AM_BW
                         ? "process_vm_writev at the same size (ratio = bandwidth / floor)"
                         : "one-way process_vm_writev at the same size (ratio = bandwidth / "
                           "floor; both directions may exceed 1)";
        value_col = "Bandwidth (MB/s)";
        floor_col = "Floor (MB/s)";
        unit = "MB/s";
        break;
    }

    bench_table_begin(b, mode, floor_what, value_col, floor_col);
    for (int i = 0; i < n; i++) {
        bench_row_t row = {.size = sizes[i], .floor = -1.0};
        if ((rc = one_size(b, mode, sizes[i], &row)) != FERRY_OK)
            return rc;
        bench_table_row(b, mode, &row, unit);
    }
    return FERRY_OK;
}
