/*
 * Paired measurement. A floor measured once and divided into a figure taken
 * seconds later is only as good as the machine's steadiness between the
 * two: on a VM whose cache-line round trip jumps between modes (2-4x apart)
 * from one second to the next, such a ratio moves several times over from
 * run to run. Here the floor and the figure take turns in short blocks
 *
 *     F0 X0 F1 X1 F2 ... X(P-1) FP
 *
 * and pair p is (Fp, Xp): its ratio Xp / Fp compares two blocks a few
 * milliseconds apart, which almost always saw the same machine. A block is
 * itself up to BENCH_BLOCK_CHUNKS timed chunks, and its value is their
 * median: a rank descheduled for a time slice (a shared machine) spoils a
 * chunk or two, not the block. The floor
 * block after the figure, F(p+1), tells whether the machine changed in
 * between: when Fp and F(p+1) are further apart than --mode-ratio, the pair
 * is "mixed" (its two halves may have run in different modes); mixed pairs
 * are counted, and left out of the ratio with --drop-mixed. The row reports
 * the median of the pairs' ratios with its quartiles, and the medians of
 * the figure's and the floor's blocks.
 *
 * Lock-step: both ranks run every block with the same iteration count. The
 * two-sided blocks (ping-pongs, windows with acknowledgements, streams)
 * keep the ranks together by themselves; after a block that only rank 0
 * runs (process_vm_writev, memcpy, put and get) rank 0 sends a DONE control
 * message, which rank 1 waits for while progressing ferry (emulated put and
 * get need the target's progress) and answers. Rank 0 calibrates the
 * counts from the warm-up and sends them to rank 1 before the first pair.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* The shape of the blocks: chunks of iters iterations. */
typedef struct block_shape {
    int64_t iters;  /* per chunk */
    int64_t chunks; /* per block */
} block_shape_t;

typedef struct pair_counts {
    block_shape_t floor;
    block_shape_t fig;
} pair_counts_t;

double bench_block_value(const bench_block_t *blk, long n, uint64_t ns)
{
    double us = (double)ns / 1e3;
    if (us <= 0)
        us = 1e-3; /* a clock that did not move: one nanosecond */
    if (blk->per_time)
        return us / (blk->unit * (double)n);
    return blk->unit * (double)n / us;
}

/* The inverse of bench_block_value: the time n iterations of that value
 * took, in nanoseconds. */
static uint64_t block_ns(const bench_block_t *blk, long n, double value)
{
    double us = blk->per_time ? value * blk->unit * (double)n : blk->unit * (double)n / value;
    return us > 0 ? (uint64_t)(us * 1e3) : 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_quantile(double *v, int n, double q)
{
    if (n <= 0)
        return 0.0;
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    /* Linear interpolation between the order statistics around q (n-1). */
    double pos = q * (double)(n - 1);
    int lo = (int)pos; /* pos >= 0: truncation is floor */
    int hi = lo + 1 < n ? lo + 1 : lo;
    double frac = pos - (double)lo;
    return v[lo] + (v[hi] - v[lo]) * frac;
}

/* Runs one block on both ranks. After a block that only rank 0 runs, rank
 * 0 says it is done and waits for rank 1's answer, progressing; rank 1
 * waits for that, progressing too, and answers. The answer keeps rank 0
 * from running blocks ahead of a rank 1 that lost its cpu, whose queue of
 * control messages would overflow. Rank 0 gets the median of the chunks'
 * values through *value_out. */
static int run_block(bench_t *b, const bench_block_t *blk, const block_shape_t *shape,
                     double *value_out)
{
    double v[BENCH_BLOCK_CHUNKS];
    uint64_t ns;
    int rc;
    size_t len;
    *value_out = 0.0;
    if (blk->rank0_only && b->rank != 0) {
        if ((rc = bench_ctrl_recv(b, BENCH_CTRL_DONE, NULL, 0, &len)) != FERRY_OK)
            return rc;
        return bench_ctrl_send(b, BENCH_CTRL_DONE, NULL, 0);
    }
    for (int64_t c = 0; c < shape->chunks; c++) {
        if ((rc = blk->run(b, blk, (long)shape->iters, &ns)) != FERRY_OK)
            return rc;
        v[c] = bench_block_value(blk, (long)shape->iters, ns);
    }
    if (b->rank == 0)
        *value_out = bench_quantile(v, (int)shape->chunks, 0.5);
    if (!blk->rank0_only)
        return FERRY_OK;
    if ((rc = bench_ctrl_send(b, BENCH_CTRL_DONE, NULL, 0)) != FERRY_OK)
        return rc;
    return bench_ctrl_recv(b, BENCH_CTRL_DONE, NULL, 0, &len);
}

/* The chunks that make a block of about --block ms, from a timed run of n
 * iterations that took ns. */
static block_shape_t block_shape(const bench_t *b, long n, uint64_t ns)
{
    double per = ns > 0 ? (double)ns / (double)n : 1.0;
    double want = b->opts.block_ms * 1e6 / per;
    long iters = want < 1.0 ? 1 : want > (double)BENCH_BLOCK_ITERS_MAX ? BENCH_BLOCK_ITERS_MAX
                                                                       : (long)want;
    long chunk = (iters + BENCH_BLOCK_CHUNKS - 1) / BENCH_BLOCK_CHUNKS;
    block_shape_t s = {.iters = chunk, .chunks = (iters + chunk - 1) / chunk};
    return s;
}

static bool shape_ok(const block_shape_t *s)
{
    return s->iters >= 1 && s->iters <= BENCH_BLOCK_ITERS_MAX && s->chunks >= 1 &&
           s->chunks <= BENCH_BLOCK_CHUNKS;
}

/* Rank 0 decides the counts; rank 1 takes them, after checking them. */
static int agree_counts(bench_t *b, pair_counts_t *c)
{
    if (b->rank == 0)
        return bench_ctrl_send(b, BENCH_CTRL_PAIR, c, sizeof(*c));
    size_t len;
    int rc = bench_ctrl_recv(b, BENCH_CTRL_PAIR, c, sizeof(*c), &len);
    if (rc != FERRY_OK)
        return rc;
    if (len != sizeof(*c) || !shape_ok(&c->floor) || !shape_ok(&c->fig)) {
        bench_error(b, "malformed block counts from rank %d", b->peer);
        return FERRY_ERR_PROTO;
    }
    return FERRY_OK;
}

/* Rank 0: the statistics of the pairs into *row. f has pairs + 1 floor
 * values, x has pairs figure values. */
static int pair_stats(bench_t *b, const char *test, const double *f, const double *x,
                      int pairs, bench_row_t *row)
{
    double *r = malloc(sizeof(double) * (size_t)pairs);
    double *sorted = malloc(sizeof(double) * (size_t)(pairs + 1));
    if (r == NULL || sorted == NULL) {
        free(r);
        free(sorted);
        bench_error(b, "cannot allocate the statistics of %d pairs", pairs);
        return FERRY_ERR_NO_MEMORY;
    }
    int kept = 0, mixed = 0;
    for (int p = 0; p < pairs; p++) {
        double step = f[p + 1] / f[p];
        bool is_mixed = step > b->opts.mode_ratio || step < 1.0 / b->opts.mode_ratio;
        mixed += is_mixed;
        if (b->blocks != NULL)
            fprintf(b->blocks, "%s,%zu,%d,%.6g,%.6g,%.6g,%.6g,%d\n", test, row->size, p, f[p],
                    x[p], f[p + 1], x[p] / f[p], is_mixed);
        if (is_mixed && b->opts.drop_mixed)
            continue;
        r[kept++] = x[p] / f[p];
    }
    row->paired = true;
    row->pairs = kept;
    row->mixed = mixed;
    if (kept > 0) {
        row->ratio_q1 = bench_quantile(r, kept, 0.25);
        row->ratio = bench_quantile(r, kept, 0.5);
        row->ratio_q3 = bench_quantile(r, kept, 0.75);
    } else {
        row->ratio = row->ratio_q1 = row->ratio_q3 = -1.0;
    }
    memcpy(sorted, x, sizeof(double) * (size_t)pairs);
    row->value = bench_quantile(sorted, pairs, 0.5);
    memcpy(sorted, f, sizeof(double) * (size_t)(pairs + 1));
    row->floor = bench_quantile(sorted, pairs + 1, 0.5);
    free(r);
    free(sorted);
    return FERRY_OK;
}

int bench_pair_run(bench_t *b, const char *test, const bench_block_t *floor,
                   const bench_block_t *fig, long warmup, bench_row_t *row)
{
    int pairs = b->opts.pairs;
    long w = warmup > 0 ? warmup : 1;
    block_shape_t warm = {.iters = w, .chunks = 1};
    double v_floor, v_fig;
    int rc;

    /* The warm-up of each, timed: it sets the shape of the blocks. */
    if ((rc = run_block(b, floor, &warm, &v_floor)) != FERRY_OK ||
        (rc = run_block(b, fig, &warm, &v_fig)) != FERRY_OK)
        return rc;
    pair_counts_t c;
    if (b->rank == 0) {
        /* Back from the value to the time per iteration. */
        c.floor = block_shape(b, w, block_ns(floor, w, v_floor));
        c.fig = block_shape(b, w, block_ns(fig, w, v_fig));
    }
    if ((rc = agree_counts(b, &c)) != FERRY_OK)
        return rc;

    double *f = calloc((size_t)pairs + 1, sizeof(double));
    double *x = calloc((size_t)pairs, sizeof(double));
    if (f == NULL || x == NULL) {
        bench_error(b, "cannot allocate the blocks of %d pairs", pairs);
        rc = FERRY_ERR_NO_MEMORY;
        goto out_free;
    }
    for (int p = 0; p <= pairs; p++) {
        if ((rc = run_block(b, floor, &c.floor, &f[p])) != FERRY_OK)
            goto out_free;
        if (p == pairs)
            break;
        if ((rc = run_block(b, fig, &c.fig, &x[p])) != FERRY_OK)
            goto out_free;
    }
    rc = b->rank == 0 ? pair_stats(b, test, f, x, pairs, row) : FERRY_OK;
out_free:
    free(f);
    free(x);
    return rc;
}

int bench_reps_run(bench_t *b, const bench_block_t *fig, long warmup, long iters,
                   double *value_out)
{
    double v[101];
    block_shape_t warm = {.iters = warmup, .chunks = 1}, rep = {.iters = iters, .chunks = 1};
    int rc;
    if (warmup > 0 && (rc = run_block(b, fig, &warm, &v[0])) != FERRY_OK)
        return rc;
    for (int r = 0; r < b->opts.reps; r++)
        if ((rc = run_block(b, fig, &rep, &v[r])) != FERRY_OK)
            return rc;
    *value_out = bench_median(v, b->opts.reps);
    return FERRY_OK;
}
