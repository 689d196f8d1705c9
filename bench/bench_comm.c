/*
 * The benchmark's active-message plumbing. Callbacks only count and queue:
 * every reply is sent from the main loop, because a callback cannot progress
 * and so could not retry a send that meets back pressure.
 */
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "bench.h"

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Not a multiple of 256's divisors, so a shifted or truncated copy shows. */
uint8_t bench_pattern_byte(size_t i)
{
    return (uint8_t)(i * 131u + 7u + (i >> 8));
}

double bench_median(double *v, int n)
{
    /* Few values: insertion sort is enough. */
    for (int i = 1; i < n; i++) {
        double x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
    if (n <= 0)
        return 0.0;
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* The line is written in one piece, so it survives the launcher killing
 * the job right after, and does not mix with the other rank's. */
void bench_error(const bench_t *b, const char *fmt, ...)
{
    char line[512];
    int n = snprintf(line, sizeof(line), "ferry-bench: rank %d: ", b->rank);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    fputs(line, stderr);
    fflush(stderr);
}

static void proto_error(bench_t *b, const char *what, int src, size_t len)
{
    if (b->rx.proto_error[0] != '\0')
        return;
    snprintf(b->rx.proto_error, sizeof(b->rx.proto_error), "%s (from rank %d, %zu bytes)", what,
             src, len);
}

static void data_cb(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    bench_t *b = arg;
    if (src != b->peer) {
        proto_error(b, "data message from a rank outside the benchmark", src, len);
        return;
    }
    size_t size = b->rx.check_size;
    if (b->opts.check && size > 0) {
        /* Chunks of one message arrive in order and never straddle two
         * messages, so the byte count gives the offset in the message. */
        size_t off = (size_t)(b->rx.units % size);
        if (len > size - off) {
            if (b->rx.bad_chunks++ == 0)
                b->rx.bad_offset = off + size;
        } else if (memcmp(data, b->pattern + off, len) != 0) {
            const uint8_t *p = data;
            size_t i = 0;
            while (p[i] == b->pattern[off + i])
                i++;
            if (b->rx.bad_chunks++ == 0)
                b->rx.bad_offset = off + i;
        }
    }
    b->rx.units += bench_units(len);
}

static void ack_cb(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                   void *arg)
{
    bench_t *b = arg;
    if (src != b->peer || len != 0) {
        proto_error(b, "malformed acknowledgement", src, len);
        return;
    }
    b->rx.acks++;
}

static void ctrl_cb(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    bench_t *b = arg;
    uint32_t kind;
    if (src != b->peer || len < sizeof(kind) || len - sizeof(kind) > BENCH_CTRL_MAX) {
        proto_error(b, "malformed control message", src, len);
        return;
    }
    if (b->rx.ctrl_count == BENCH_CTRL_SLOTS) {
        proto_error(b, "too many control messages queued", src, len);
        return;
    }
    memcpy(&kind, data, sizeof(kind));
    unsigned slot = (b->rx.ctrl_head + b->rx.ctrl_count) % BENCH_CTRL_SLOTS;
    b->rx.ctrl[slot].kind = kind;
    b->rx.ctrl[slot].len = (uint32_t)(len - sizeof(kind));
    b->rx.ctrl[slot].src = src;
    memcpy(b->rx.ctrl[slot].body, (const uint8_t *)data + sizeof(kind), len - sizeof(kind));
    b->rx.ctrl_count++;
}

int bench_comm_init(bench_t *b)
{
    int rc;
    if ((rc = ferry_am_register(b->ctx, BENCH_TAG_DATA, data_cb, b)) != FERRY_OK ||
        (rc = ferry_am_register(b->ctx, BENCH_TAG_ACK, ack_cb, b)) != FERRY_OK ||
        (rc = ferry_am_register(b->ctx, BENCH_TAG_CTRL, ctrl_cb, b)) != FERRY_OK) {
        bench_error(b, "ferry_am_register: %s", ferry_strerror(rc));
        return rc;
    }
    return FERRY_OK;
}

void bench_rx_reset(bench_t *b, size_t check_size)
{
    b->rx.units = 0;
    b->rx.acks = 0;
    b->rx.check_size = check_size;
    b->rx.bad_chunks = 0;
    b->rx.bad_offset = 0;
}

/* The clock is first read after 1024 polls, not at the start, so a wait
 * that ends quickly (every wait of a latency loop) costs no clock read. */
void bench_deadline_init(const bench_t *b, bench_deadline_t *d)
{
    d->limit_ns = (uint64_t)b->opts.timeout_s * 1000000000u;
    d->end_ns = 0;
    d->tick = 0;
}

bool bench_deadline_passed(bench_deadline_t *d)
{
    if ((++d->tick & 1023u) != 0)
        return false;
    uint64_t now = bench_now_ns();
    if (d->end_ns == 0) {
        d->end_ns = now + d->limit_ns;
        return false;
    }
    return now > d->end_ns;
}

/* One step of a wait: progress once, then report a fatal progress error, a
 * peer's malformed message or the end of the wait. */
static int wait_step(bench_t *b, bench_deadline_t *d, const char *what)
{
    int rc = ferry_progress(b->ctx);
    if (rc < 0) {
        bench_error(b, "ferry_progress failed while %s: %s", what, ferry_strerror(rc));
        return rc;
    }
    if (b->rx.proto_error[0] != '\0') {
        bench_error(b, "while %s: %s", what, b->rx.proto_error);
        return FERRY_ERR_PROTO;
    }
    if (bench_deadline_passed(d)) {
        bench_error(b, "timed out after %d s while %s (rank %d silent or stuck; -t changes the "
                    "limit)", b->opts.timeout_s, what, b->peer);
        return FERRY_ERR_TIMEOUT;
    }
    return FERRY_OK;
}

static int send_retry(bench_t *b, int tag, const void *data, size_t len, const char *what)
{
    bench_deadline_t d;
    bench_deadline_init(b, &d);
    for (;;) {
        int rc = ferry_am_send(b->ctx, b->peer, tag, data, len);
        if (rc != FERRY_ERR_NO_RESOURCE) {
            if (rc != FERRY_OK)
                bench_error(b, "ferry_am_send of %zu bytes while %s: %s", len, what,
                            ferry_strerror(rc));
            return rc;
        }
        if ((rc = wait_step(b, &d, what)) != FERRY_OK)
            return rc;
    }
}

int bench_send_data(bench_t *b, const void *buf, size_t len)
{
    size_t chunk = (size_t)b->am_max;
    size_t off = 0;
    do {
        size_t n = len - off < chunk ? len - off : chunk;
        int rc = send_retry(b, BENCH_TAG_DATA, (const uint8_t *)buf + off, n,
                            "sending data");
        if (rc != FERRY_OK)
            return rc;
        off += n;
    } while (off < len);
    return FERRY_OK;
}

int bench_send_ack(bench_t *b)
{
    return send_retry(b, BENCH_TAG_ACK, NULL, 0, "sending an acknowledgement");
}

int bench_ctrl_send(bench_t *b, uint32_t kind, const void *body, size_t len)
{
    uint8_t msg[sizeof(kind) + BENCH_CTRL_MAX];
    if (len > BENCH_CTRL_MAX || (size_t)b->am_max < sizeof(kind) + len) {
        bench_error(b, "a %zu-byte control message does not fit the AM max size of %ld bytes",
                    sizeof(kind) + len, b->am_max);
        return FERRY_ERR_INVALID;
    }
    memcpy(msg, &kind, sizeof(kind));
    if (len > 0)
        memcpy(msg + sizeof(kind), body, len);
    return send_retry(b, BENCH_TAG_CTRL, msg, sizeof(kind) + len, "sending a control message");
}

int bench_ctrl_recv(bench_t *b, uint32_t kind, void *body, size_t cap, size_t *len_out)
{
    bench_deadline_t d;
    bench_deadline_init(b, &d);
    char what[64];
    snprintf(what, sizeof(what), "waiting for control message %u", (unsigned)kind);
    while (b->rx.ctrl_count == 0) {
        int rc = wait_step(b, &d, what);
        if (rc != FERRY_OK)
            return rc;
    }
    unsigned slot = b->rx.ctrl_head;
    b->rx.ctrl_head = (slot + 1) % BENCH_CTRL_SLOTS;
    b->rx.ctrl_count--;
    if (b->rx.ctrl[slot].kind != kind) {
        bench_error(b, "rank %d sent control message %u where %u was expected (are both ranks "
                    "running the same command?)", b->peer, (unsigned)b->rx.ctrl[slot].kind,
                    (unsigned)kind);
        return FERRY_ERR_PROTO;
    }
    if (b->rx.ctrl[slot].len > cap) {
        bench_error(b, "control message %u from rank %d has %u bytes, at most %zu expected",
                    (unsigned)kind, b->peer, (unsigned)b->rx.ctrl[slot].len, cap);
        return FERRY_ERR_PROTO;
    }
    if (b->rx.ctrl[slot].len > 0)
        memcpy(body, b->rx.ctrl[slot].body, b->rx.ctrl[slot].len);
    *len_out = b->rx.ctrl[slot].len;
    return FERRY_OK;
}

int bench_exchange_rkey(bench_t *b, const ferry_mem_t *mem, const void *addr, size_t len,
                        uint64_t *peer_addr_out, ferry_rkey_t *peer_rkey_out)
{
    struct {
        uint64_t addr;
        uint64_t len;
        ferry_rkey_t rkey;
    } m = {.addr = (uint64_t)(uintptr_t)addr, .len = len};
    int rc = ferry_mem_rkey(mem, &m.rkey);
    if (rc != FERRY_OK) {
        bench_error(b, "ferry_mem_rkey: %s", ferry_strerror(rc));
        return rc;
    }
    size_t got;
    if ((rc = bench_ctrl_send(b, BENCH_CTRL_RKEY, &m, sizeof(m))) != FERRY_OK ||
        (rc = bench_ctrl_recv(b, BENCH_CTRL_RKEY, &m, sizeof(m), &got)) != FERRY_OK)
        return rc;
    if (got != sizeof(m) || m.len < len) {
        bench_error(b, "malformed remote key message from rank %d", b->peer);
        return FERRY_ERR_PROTO;
    }
    *peer_addr_out = m.addr;
    *peer_rkey_out = m.rkey;
    return FERRY_OK;
}

int bench_wait_units(bench_t *b, uint64_t units, const char *what)
{
    bench_deadline_t d;
    bench_deadline_init(b, &d);
    while (b->rx.units < units) {
        int rc = wait_step(b, &d, what);
        if (rc != FERRY_OK)
            return rc;
    }
    return FERRY_OK;
}

int bench_wait_acks(bench_t *b, uint64_t acks, const char *what)
{
    bench_deadline_t d;
    bench_deadline_init(b, &d);
    while (b->rx.acks < acks) {
        int rc = wait_step(b, &d, what);
        if (rc != FERRY_OK)
            return rc;
    }
    return FERRY_OK;
}

int bench_barrier(bench_t *b)
{
    int rc = ferry_barrier(b->ctx);
    if (rc != FERRY_OK)
        bench_error(b, "ferry_barrier: %s", ferry_strerror(rc));
    return rc;
}
