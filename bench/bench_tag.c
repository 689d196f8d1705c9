/*
 * Tagged messaging (include/ferry/msg.h) and whole active messages of any
 * size, as OSU measures MPI, each beside the same floor as the am- modes:
 *  tag-lat      ping-pong of ferry_msg_send / ferry_msg_recv;
 *  tag-bw       rank 0 posts a window of BENCH_WINDOW isends, rank 1 as
 *               many irecvs, then a zero-byte acknowledgement;
 *  tag-bibw     both at once;
 *  tag-rate     as tag-bw, counted in messages;
 *  am-lat-rndv  ping-pong of whole active messages: each message is one
 *               ferry_am_send, by rendezvous above the eager size (the
 *               am- modes cut those into chunks instead);
 *  am-bw-rndv   windows of ferry_am_send_nb, taken by a data handler
 *               straight into the receive buffer above the eager size.
 */
#include <stdlib.h>
#include <string.h>

#include <ferry/msg.h>

#include "bench.h"

enum { TAG_DATA = 1, TAG_ACK = 2 };

/* Whole active messages: counted into b->rx.units when they have arrived. */
static void whole_cb(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    bench_t *b = arg;
    (void)ctx, (void)src, (void)tag;
    if (b->opts.check && len > 0 && memcmp(data, b->pattern, len) != 0)
        b->rx.bad_chunks++;
    b->rx.units += bench_units(len);
}

typedef struct whole_rx {
    bench_t *b;
    size_t len;
} whole_rx_t;

static void whole_arrived(void *arg, int status)
{
    whole_rx_t *w = arg;
    bench_t *b = w->b;
    if (status != FERRY_OK)
        snprintf(b->rx.proto_error, sizeof(b->rx.proto_error),
                 "a %zu-byte message did not arrive: %s", w->len, ferry_strerror(status));
    else if (b->opts.check && memcmp(b->scratch, b->pattern, w->len) != 0)
        b->rx.bad_chunks++;
    b->rx.units += bench_units(w->len);
    free(w);
}

static void whole_data_cb(ferry_ctx_t *ctx, int src, int tag, ferry_am_data_t *data, size_t len,
                          void *arg)
{
    bench_t *b = arg;
    (void)src, (void)tag;
    whole_rx_t *w = malloc(sizeof(*w));
    if (w == NULL || len > b->buf_len) {
        free(w);
        snprintf(b->rx.proto_error, sizeof(b->rx.proto_error), "cannot take a %zu-byte message",
                 len);
        ferry_am_data_drop(ctx, data);
        return;
    }
    w->b = b;
    w->len = len;
    if (ferry_am_recv_data(ctx, data, b->scratch, len, whole_arrived, w) != FERRY_OK) {
        free(w);
        ferry_am_data_drop(ctx, data);
    }
}

typedef struct tag_run {
    bench_mode_t mode;
    size_t size;
    ferry_msg_t *msg;
    uint64_t units; /* whole modes: units expected so far */
    uint64_t sends_done;
    uint64_t sends;
    int error;
} tag_run_t;

static void whole_sent(void *arg, int status)
{
    tag_run_t *r = arg;
    if (status != FERRY_OK && r->error == FERRY_OK)
        r->error = status;
    r->sends_done++;
}

static int whole_send(bench_t *b, tag_run_t *r, bool nb)
{
    int rc;
    for (;;) {
        rc = nb ? ferry_am_send_nb(b->ctx, b->peer, BENCH_TAG_WHOLE, b->pattern, r->size,
                                   whole_sent, r)
                : ferry_am_send(b->ctx, b->peer, BENCH_TAG_WHOLE, b->pattern, r->size);
        if (rc != FERRY_ERR_NO_RESOURCE)
            break;
        ferry_progress(b->ctx);
    }
    if (rc != FERRY_OK)
        bench_error(b, "ferry_am_send%s of %zu bytes: %s", nb ? "_nb" : "", r->size,
                    ferry_strerror(rc));
    else if (nb)
        r->sends++;
    return rc;
}

static int check_tag_status(bench_t *b, int rc, const ferry_msg_status_t *st, size_t size)
{
    if (rc != FERRY_OK || st->received != size) {
        bench_error(b, "tagged receive of %zu bytes: %s, %zu bytes", size, ferry_strerror(rc),
                    st->received);
        return rc != FERRY_OK ? rc : FERRY_ERR_PROTO;
    }
    if (b->opts.check && size > 0 && memcmp(b->scratch, b->pattern, size) != 0) {
        bench_error(b, "tagged receive of %zu bytes: wrong bytes", size);
        return FERRY_ERR_PROTO;
    }
    return FERRY_OK;
}

static int tag_lat(bench_t *b, tag_run_t *r, long n)
{
    ferry_msg_status_t st;
    int rc;
    for (long i = 0; i < n; i++) {
        if (b->rank == 0) {
            if ((rc = ferry_msg_send(r->msg, b->peer, 0, TAG_DATA, b->pattern, r->size)) !=
                FERRY_OK)
                return rc;
        }
        rc = ferry_msg_recv(r->msg, b->peer, 0, TAG_DATA, FERRY_MSG_TAG_EXACT, b->scratch, r->size,
                            &st);
        if ((rc = check_tag_status(b, rc, &st, r->size)) != FERRY_OK)
            return rc;
        if (b->rank == 1 &&
            (rc = ferry_msg_send(r->msg, b->peer, 0, TAG_DATA, b->pattern, r->size)) != FERRY_OK)
            return rc;
    }
    return FERRY_OK;
}

/* One window: isends (send) and/or irecvs (recv), all waited for. */
static int tag_window(bench_t *b, tag_run_t *r, bool send, bool recv)
{
    ferry_msg_req_t *reqs[2 * BENCH_WINDOW];
    int n = 0, rc;
    for (int i = 0; recv && i < BENCH_WINDOW; i++)
        if ((rc = ferry_msg_irecv(r->msg, b->peer, 0, TAG_DATA, FERRY_MSG_TAG_EXACT, b->scratch,
                                  r->size, &reqs[n++])) != FERRY_OK)
            return rc;
    for (int i = 0; send && i < BENCH_WINDOW; i++)
        if ((rc = ferry_msg_isend(r->msg, b->peer, 0, TAG_DATA, b->pattern, r->size, &reqs[n++])) !=
            FERRY_OK)
            return rc;
    for (int i = 0; i < n; i++) {
        ferry_msg_status_t st;
        rc = ferry_msg_wait(r->msg, &reqs[i], &st);
        if (recv && i < BENCH_WINDOW) {
            if ((rc = check_tag_status(b, rc, &st, r->size)) != FERRY_OK)
                return rc;
        } else if (rc != FERRY_OK) {
            return rc;
        }
    }
    return FERRY_OK;
}

static int tag_ack(bench_t *b, tag_run_t *r, bool send)
{
    ferry_msg_status_t st;
    if (send)
        return ferry_msg_send(r->msg, b->peer, 0, TAG_ACK, NULL, 0);
    return ferry_msg_recv(r->msg, b->peer, 0, TAG_ACK, FERRY_MSG_TAG_EXACT, NULL, 0, &st);
}

static int tag_bw(bench_t *b, tag_run_t *r, long n)
{
    int rc;
    for (long i = 0; i < n; i++) {
        if ((rc = tag_window(b, r, b->rank == 0, b->rank == 1)) != FERRY_OK ||
            (rc = tag_ack(b, r, b->rank == 1)) != FERRY_OK)
            return rc;
    }
    return FERRY_OK;
}

static int tag_bibw(bench_t *b, tag_run_t *r, long n)
{
    int rc;
    for (long i = 0; i < n; i++)
        if ((rc = tag_window(b, r, true, true)) != FERRY_OK)
            return rc;
    return tag_ack(b, r, b->rank == 1);
}

static int whole_lat(bench_t *b, tag_run_t *r, long n)
{
    int rc;
    uint64_t u = bench_units(r->size);
    for (long i = 0; i < n; i++) {
        r->units += u;
        if (b->rank == 0) {
            if ((rc = whole_send(b, r, false)) != FERRY_OK ||
                (rc = bench_wait_units(b, r->units, "waiting for a pong")) != FERRY_OK)
                return rc;
        } else {
            if ((rc = bench_wait_units(b, r->units, "waiting for a ping")) != FERRY_OK ||
                (rc = whole_send(b, r, false)) != FERRY_OK)
                return rc;
        }
    }
    return FERRY_OK;
}

static int whole_bw(bench_t *b, tag_run_t *r, long n)
{
    int rc;
    for (long i = 0; i < n; i++) {
        if (b->rank == 0) {
            for (int k = 0; k < BENCH_WINDOW; k++)
                if ((rc = whole_send(b, r, true)) != FERRY_OK)
                    return rc;
            bench_deadline_t d;
            bench_deadline_init(b, &d);
            while (r->sends_done < r->sends) {
                if (ferry_progress(b->ctx) < 0 || bench_deadline_passed(&d)) {
                    bench_error(b, "am-bw-rndv: sends of a window never completed");
                    return FERRY_ERR_TIMEOUT;
                }
            }
            if (r->error != FERRY_OK)
                return r->error;
            r->units++; /* the acknowledgement, counted as one unit */
            if ((rc = bench_wait_units(b, r->units,
                                       "waiting for a window's "
                                       "acknowledgement")) != FERRY_OK)
                return rc;
        } else {
            r->units += bench_units(r->size) * BENCH_WINDOW;
            if ((rc = bench_wait_units(b, r->units, "receiving a window")) != FERRY_OK)
                return rc;
            for (;;) {
                rc = ferry_am_send(b->ctx, b->peer, BENCH_TAG_WHOLE, b->pattern, 0);
                if (rc != FERRY_ERR_NO_RESOURCE)
                    break;
                ferry_progress(b->ctx);
            }
            if (rc != FERRY_OK)
                return rc;
        }
    }
    return FERRY_OK;
}

static int tag_block(bench_t *b, const bench_block_t *blk, long n, uint64_t *ns_out)
{
    tag_run_t *r = blk->arg;
    uint64_t t0 = bench_now_ns();
    int rc;
    switch (r->mode) {
    case BENCH_TAG_LAT:
        rc = tag_lat(b, r, n);
        break;
    case BENCH_TAG_BIBW:
        rc = tag_bibw(b, r, n);
        break;
    case BENCH_AM_LAT_RNDV:
        rc = whole_lat(b, r, n);
        break;
    case BENCH_AM_BW_RNDV:
        rc = whole_bw(b, r, n);
        break;
    default:
        rc = tag_bw(b, r, n);
        break;
    }
    if (rc == FERRY_OK && b->rx.proto_error[0] != '\0') {
        bench_error(b, "%s", b->rx.proto_error);
        rc = FERRY_ERR_PROTO;
    }
    if (rc == FERRY_OK)
        *ns_out = bench_now_ns() - t0;
    return rc;
}

static int one_size(bench_t *b, tag_run_t *r, bench_row_t *row)
{
    bench_mode_t mode = r->mode;
    size_t size = r->size;
    bench_block_t fig = {.run = tag_block, .arg = r, .size = size}, floor;
    bool lat = mode == BENCH_TAG_LAT || mode == BENCH_AM_LAT_RNDV;
    if (lat) {
        fig.per_time = true;
        fig.unit = 2.0;
    } else if (mode == BENCH_TAG_RATE) {
        fig.unit = BENCH_WINDOW;
    } else {
        fig.unit = (mode == BENCH_TAG_BIBW ? 2.0 : 1.0) * (double)size * BENCH_WINDOW;
    }
    bool have_floor = false;
    int rc = FERRY_OK;
    if (lat)
        rc = bench_floor_lat_block(b, &floor, &have_floor);
    else if (mode != BENCH_TAG_RATE)
        rc = bench_floor_bw_block(b, size, false, &floor, &have_floor);
    if (rc != FERRY_OK)
        return rc;
    bench_rx_reset(b, size);
    r->units = 0;
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
    if ((rc = bench_barrier(b)) != FERRY_OK)
        return rc;
    if (b->rx.bad_chunks > 0) {
        bench_error(b, "%s size %zu: %llu messages arrived with wrong bytes", bench_mode_name(mode),
                    size, (unsigned long long)b->rx.bad_chunks);
        return FERRY_ERR_PROTO;
    }
    bool whole = mode == BENCH_AM_LAT_RNDV || mode == BENCH_AM_BW_RNDV;
    if (whole && b->rx.units != r->units) {
        bench_error(b, "%s size %zu: received %llu data units, expected %llu",
                    bench_mode_name(mode), size, (unsigned long long)b->rx.units,
                    (unsigned long long)r->units);
        return FERRY_ERR_PROTO;
    }
    return FERRY_OK;
}

int bench_run_tag(bench_t *b, bench_mode_t mode)
{
    size_t sizes[BENCH_SIZES_MAX];
    int n = bench_sizes(b, mode, sizes);
    tag_run_t r = {.mode = mode};
    int rc;
    bool whole = mode == BENCH_AM_LAT_RNDV || mode == BENCH_AM_BW_RNDV;
    if (whole) {
        if ((rc = ferry_am_register(b->ctx, BENCH_TAG_WHOLE, whole_cb, b)) != FERRY_OK ||
            (rc = ferry_am_register_data(b->ctx, BENCH_TAG_WHOLE, whole_data_cb, b)) != FERRY_OK) {
            bench_error(b, "ferry_am_register: %s", ferry_strerror(rc));
            return rc;
        }
    } else if ((rc = ferry_msg_init(b->ctx, &r.msg)) != FERRY_OK) {
        bench_error(b, "ferry_msg_init: %s", ferry_strerror(rc));
        return rc;
    }
    const char *floor_what, *value_col, *floor_col, *unit;
    if (mode == BENCH_TAG_LAT || mode == BENCH_AM_LAT_RNDV) {
        floor_what = "cache-line ping-pong half round trip (ratio = latency / floor)";
        value_col = "Latency (us)";
        floor_col = "Floor (us)";
        unit = "us";
    } else if (mode == BENCH_TAG_RATE) {
        floor_what = "none for message rate";
        value_col = "Rate (Mmsg/s)";
        floor_col = "Floor";
        unit = "Mmsg/s";
    } else {
        floor_what = mode == BENCH_TAG_BIBW
                         ? "one-way process_vm_writev at the same size (ratio = bandwidth / "
                           "floor; both directions may exceed 1)"
                         : "process_vm_writev at the same size (ratio = bandwidth / floor)";
        value_col = "Bandwidth (MB/s)";
        floor_col = "Floor (MB/s)";
        unit = "MB/s";
    }
    if (b->rank == 0 && whole) {
        ferry_am_sizes_t sz;
        if (ferry_am_sizes(b->ctx, b->peer, &sz) == FERRY_OK)
            printf("# whole active messages: one fragment up to %zu bytes, rendezvous by %s "
                   "from %zu\n",
                   sz.eager_max,
                   sz.rndv == FERRY_AM_RNDV_GET    ? "get"
                   : sz.rndv == FERRY_AM_RNDV_PUT  ? "put"
                   : sz.rndv == FERRY_AM_RNDV_PIPE ? "pipe (streamed through the transport)"
                                                   : "?",
                   sz.rndv_min);
    }
    bench_table_begin(b, mode, floor_what, value_col, floor_col);
    for (int i = 0; i < n; i++) {
        bench_row_t row = {.size = sizes[i], .floor = -1.0};
        r.size = sizes[i];
        if ((rc = one_size(b, &r, &row)) != FERRY_OK)
            break;
        bench_table_row(b, mode, &row, unit);
    }
    if (whole) {
        ferry_am_register_data(b->ctx, BENCH_TAG_WHOLE, NULL, NULL);
        ferry_am_register(b->ctx, BENCH_TAG_WHOLE, NULL, NULL);
    } else {
        /* Both ranks are done with the mode: nothing is in flight. */
        int frc = ferry_msg_fini(&r.msg);
        if (rc == FERRY_OK && frc != FERRY_OK) {
            bench_error(b, "ferry_msg_fini: %s", ferry_strerror(frc));
            rc = frc;
        }
    }
    return rc;
}
