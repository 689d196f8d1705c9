/*
 * pingpong: a small OSU-style measurement of ferry's two ways to move bytes.
 *
 * Ranks 0 and 1 pair up when a transport joins them; otherwise (a job of one
 * rank, or only the self transport built) rank 0 measures against itself and
 * the other ranks wait. For each size it prints
 *   - the active-message latency: half the round trip of a ping answered by
 *     a pong from the receiver's handler;
 *   - put and get bandwidth: a window of operations into (out of) the peer's
 *     registered buffer, then a flush.
 * After each size the data is read back and checked, so a wrong transfer
 * fails the run instead of producing a fast number.
 *
 * usage: pingpong [-q] [-m MAX_BYTES]
 *   -q  quick: few iterations (for tests)
 *   -m  largest size measured (default 4 MiB)
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ferry/ferry.h>

enum { TAG_PING = 1, TAG_PONG = 2, TAG_KEY = 3, TAG_DONE = 4 };

#define WINDOW 16

typedef struct peer_key {
    uint64_t addr;
    ferry_rkey_t rkey;
} peer_key_t;

typedef struct bench {
    ferry_ctx_t *ctx;
    int rank;
    int peer;      /* the rank we measure against (may be ourselves) */
    bool active;   /* this rank takes part */
    bool leader;   /* this rank drives the measurement and prints */
    int pongs;     /* pongs received by the leader */
    int pending_pong; /* pings whose pong could not be sent from the handler */
    int pong_to;
    size_t pong_len;
    bool have_key;
    bool done;
    peer_key_t key; /* the peer's window */
    char *pongbuf;  /* payload of the pongs */
    int comp_errors;
} bench_t;

typedef struct opts {
    bool quick;
    size_t max_bytes;
} opts_t;

static void die(const char *what, int rc)
{
    fprintf(stderr, "pingpong: %s: %s\n", what, ferry_strerror(rc));
    exit(1);
}

static void check(int rc, const char *what)
{
    if (rc < 0) {
        die(what, rc);
    }
}

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void on_ping(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    bench_t *b = arg;

    /* Answer at once when the transport has room; a pong that cannot go now
     * is sent by the main loop, which may progress. */
    if (b->pending_pong == 0 &&
        ferry_am_send(ctx, src, TAG_PONG, b->pongbuf, len) == FERRY_OK) {
        return;
    }
    b->pending_pong++;
    b->pong_to = src;
    b->pong_len = len;
}

static void on_pong(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    bench_t *b = arg;

    b->pongs++;
}

static void on_key(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                   void *arg)
{
    bench_t *b = arg;

    if (len == sizeof b->key) {
        memcpy(&b->key, data, len);
        b->have_key = true;
    }
}

static void on_done(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    bench_t *b = arg;

    b->done = true;
}

static void on_comp(void *arg, int status)
{
    bench_t *b = arg;

    if (status != FERRY_OK) {
        b->comp_errors++;
    }
}

/* One pass of the progress engine, plus any pong the handler had to defer. */
static void progress(bench_t *b)
{
    check(ferry_progress(b->ctx), "ferry_progress");
    while (b->pending_pong > 0) {
        int rc = ferry_am_send(b->ctx, b->pong_to, TAG_PONG, b->pongbuf, b->pong_len);

        if (rc == FERRY_ERR_NO_RESOURCE) {
            break;
        }
        check(rc, "ferry_am_send (pong)");
        b->pending_pong--;
    }
}

static void send_am(bench_t *b, int dst, int tag, const void *data, size_t len)
{
    int rc;

    while ((rc = ferry_am_send(b->ctx, dst, tag, data, len)) == FERRY_ERR_NO_RESOURCE) {
        progress(b);
    }
    check(rc, "ferry_am_send");
}

static int iterations(const opts_t *o, size_t size)
{
    if (o->quick) {
        return 10;
    }
    return size <= 8192 ? 10000 : size <= 262144 ? 1000 : 100;
}

static double am_latency(bench_t *b, const opts_t *o, const char *buf, size_t size)
{
    int iters = iterations(o, size);
    int warmup = iters / 10;
    double start = 0;

    b->pongs = 0;
    for (int i = 0; i < warmup + iters; i++) {
        if (i == warmup) {
            start = now_us();
        }
        send_am(b, b->peer, TAG_PING, buf, size);
        while (b->pongs <= i) {
            progress(b);
        }
    }
    return (now_us() - start) / iters / 2;
}

/* Bandwidth of put (is_put) or get, in MB/s (10^6 bytes per second, as OSU). */
static double rdma_bw(bench_t *b, const opts_t *o, char *local, ferry_mem_t *mem, size_t size,
                      bool is_put)
{
    int iters = iterations(o, size) / WINDOW + 1;
    double start = now_us();

    for (int i = 0; i < iters; i++) {
        for (int w = 0; w < WINDOW; w++) {
            int rc;

            for (;;) {
                rc = is_put ? ferry_put(b->ctx, b->peer, local, size, mem, b->key.addr,
                                        &b->key.rkey, on_comp, b)
                            : ferry_get(b->ctx, b->peer, local, size, mem, b->key.addr,
                                        &b->key.rkey, on_comp, b);
                if (rc != FERRY_ERR_NO_RESOURCE) {
                    break;
                }
                progress(b);
            }
            check(rc, is_put ? "ferry_put" : "ferry_get");
        }
        check(ferry_flush(b->ctx, b->peer), "ferry_flush");
    }
    double elapsed = now_us() - start;

    if (b->comp_errors != 0) {
        fprintf(stderr, "pingpong: %d put/get completed with an error\n", b->comp_errors);
        exit(1);
    }
    return (double)size * WINDOW * iters / elapsed;
}

/* Puts a pattern for this size into the peer, gets it back into a zeroed
 * buffer and compares. */
static void verify(bench_t *b, char *local, ferry_mem_t *mem, char *back, size_t size)
{
    for (size_t i = 0; i < size; i++) {
        local[i] = (char)(i * 7 + size);
    }
    memset(back, 0, size);
    check(ferry_put(b->ctx, b->peer, local, size, mem, b->key.addr, &b->key.rkey, NULL, NULL),
          "ferry_put");
    check(ferry_flush(b->ctx, b->peer), "ferry_flush");
    check(ferry_get(b->ctx, b->peer, back, size, NULL, b->key.addr, &b->key.rkey, NULL, NULL),
          "ferry_get");
    check(ferry_flush(b->ctx, b->peer), "ferry_flush");
    if (memcmp(local, back, size) != 0) {
        fprintf(stderr, "pingpong: %zu bytes read back differ from those written\n", size);
        exit(1);
    }
}

static void parse_args(int argc, char **argv, opts_t *opts_out)
{
    opts_t o = {.quick = false, .max_bytes = (size_t)4 << 20};
    int c;

    while ((c = getopt(argc, argv, "qm:h")) != -1) {
        switch (c) {
        case 'q':
            o.quick = true;
            break;
        case 'm': {
            char *end;
            unsigned long long v;

            errno = 0;
            v = strtoull(optarg, &end, 10);
            if (errno != 0 || end == optarg || *end != '\0' || v == 0 || v > (1ull << 30)) {
                fprintf(stderr, "pingpong: -m wants a size in bytes, 1 to 1073741824, not '%s'\n",
                        optarg);
                exit(2);
            }
            o.max_bytes = (size_t)v;
            break;
        }
        case 'h':
            printf("usage: %s [-q] [-m MAX_BYTES]\n", argv[0]);
            exit(0);
        default:
            fprintf(stderr, "usage: %s [-q] [-m MAX_BYTES]\n", argv[0]);
            exit(2);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "usage: %s [-q] [-m MAX_BYTES]\n", argv[0]);
        exit(2);
    }
    *opts_out = o;
}

static void run_leader(bench_t *b, const opts_t *o, char *local, ferry_mem_t *lmem, char *back)
{
    long am_max = ferry_am_max_size(b->ctx, b->peer);

    check((int)(am_max < 0 ? am_max : 0), "ferry_am_max_size");
    if (b->peer == b->rank) {
        printf("# ferry pingpong: rank %d with itself (no transport reaches another rank)\n",
               b->rank);
    } else {
        printf("# ferry pingpong: rank %d <-> rank %d\n", b->rank, b->peer);
    }
    printf("# AM latency is half a round trip; bandwidth in MB/s (10^6 B/s), window %d\n",
           WINDOW);
    printf("%-10s %14s %14s %14s\n", "# Size", "AM lat (us)", "Put (MB/s)", "Get (MB/s)");
    for (size_t size = 1; size <= o->max_bytes; size *= 2) {
        char lat[32] = "-";

        if ((long)size <= am_max) {
            snprintf(lat, sizeof lat, "%.2f", am_latency(b, o, local, size));
        }
        double put = rdma_bw(b, o, local, lmem, size, true);
        double get = rdma_bw(b, o, local, lmem, size, false);

        verify(b, local, lmem, back, size);
        printf("%-10zu %14s %14.2f %14.2f\n", size, lat, put, get);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    opts_t o;
    bench_t b = {0};
    ferry_mem_t *lmem = NULL;
    ferry_mem_t *wmem = NULL;
    char *local;
    char *back;
    char *window;

    parse_args(argc, argv, &o);
    check(ferry_init(NULL, &b.ctx), "ferry_init");
    b.rank = ferry_rank(b.ctx);
    int size = ferry_size(b.ctx);

    /* Every rank decides the same way: the pair (0, 1) when a transport joins
     * them, otherwise rank 0 alone. */
    if (size >= 2 && b.rank <= 1 && ferry_am_max_size(b.ctx, 1 - b.rank) >= 0) {
        b.peer = 1 - b.rank;
        b.active = true;
        b.leader = b.rank == 0;
    } else {
        b.peer = b.rank;
        b.active = b.rank == 0 &&
                   (size == 1 || ferry_am_max_size(b.ctx, 1) < 0);
        b.leader = b.active;
    }

    local = calloc(1, o.max_bytes);
    back = calloc(1, o.max_bytes);
    window = calloc(1, o.max_bytes);
    b.pongbuf = calloc(1, o.max_bytes);
    if (local == NULL || back == NULL || window == NULL || b.pongbuf == NULL) {
        die("allocating the buffers", FERRY_ERR_NO_MEMORY);
    }

    check(ferry_am_register(b.ctx, TAG_PING, on_ping, &b), "ferry_am_register");
    check(ferry_am_register(b.ctx, TAG_PONG, on_pong, &b), "ferry_am_register");
    check(ferry_am_register(b.ctx, TAG_KEY, on_key, &b), "ferry_am_register");
    check(ferry_am_register(b.ctx, TAG_DONE, on_done, &b), "ferry_am_register");
    check(ferry_barrier(b.ctx), "ferry_barrier");

    if (b.active) {
        peer_key_t mine;

        check(ferry_mem_register(b.ctx, local, o.max_bytes, FERRY_ACCESS_LOCAL, &lmem),
              "ferry_mem_register");
        check(ferry_mem_register(b.ctx, window, o.max_bytes,
                                 FERRY_ACCESS_LOCAL | FERRY_ACCESS_REMOTE_READ |
                                     FERRY_ACCESS_REMOTE_WRITE,
                                 &wmem),
              "ferry_mem_register");
        mine.addr = (uint64_t)(uintptr_t)window;
        check(ferry_mem_rkey(wmem, &mine.rkey), "ferry_mem_rkey");
        send_am(&b, b.peer, TAG_KEY, &mine, sizeof mine);
        while (!b.have_key) {
            progress(&b);
        }
        if (b.leader) {
            run_leader(&b, &o, local, lmem, back);
            if (b.peer != b.rank) {
                send_am(&b, b.peer, TAG_DONE, "", 1);
            }
            b.done = true;
        }
        /* The follower answers pings until told the run is over. */
        while (!b.done) {
            progress(&b);
        }
    }

    check(ferry_barrier(b.ctx), "ferry_barrier");
    check(ferry_mem_deregister(b.ctx, lmem), "ferry_mem_deregister");
    check(ferry_mem_deregister(b.ctx, wmem), "ferry_mem_deregister");
    check(ferry_finalize(&b.ctx), "ferry_finalize");
    free(local);
    free(back);
    free(window);
    free(b.pongbuf);
    return 0;
}
