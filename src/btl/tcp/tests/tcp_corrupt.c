/*
 * A genuine peer whose socket writes break mid-stream: `tcp_corrupt SEED`,
 * two ranks under ferryrun with FERRY_BTL=self,tcp.
 *
 * Both ranks exchange puts, gets and active messages in rounds, each round
 * ending with ferry_flush. Once connected, rank 0 routes its writes to rank 1
 * through a shim (this file's send and sendmsg, which the ferry code linked
 * into this program calls) that follows the frames of the stream and, at a
 * frame chosen from SEED, does one of:
 *   cut      lets part of the frame through and drops the rest of the stream
 *            while reporting it written (rank 1 sees a frame stop half-way)
 *   block    lets part of the frame through, then every write would block
 *   biglen   flips a high bit of the frame's length
 *   badtype  gives the frame an unknown type
 *   nonzero  sets the header's reserved field
 *   edge     drops the stream from the frame's first byte on, while
 *            reporting it written (no frame is left half-way: only the
 *            requests' deadline can tell)
 *   edgeblock from the frame's first byte on, every write would block
 * Whatever happens, both ranks must finish, each having seen an error (the
 * error callback naming the other rank, or a flush or put/get failing), well
 * within ferryrun's timeout: the deadlines (FERRY_FLUSH_TIMEOUT, FERRY_TCP_FRAME_TIMEOUT,
 * FERRY_TCP_REQUEST_TIMEOUT) and the checks of every frame see to it. Data
 * that arrives intact is checked too.
 *
 * Prints "tcp_corrupt RANK: ok (...)" from each rank that saw an error, and
 * "tcp_corrupt RANK: FAILED ..." otherwise; exits 1 on failure and 77
 * (skipped) when not run as two ranks over tcp.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "unit/check.h"
#include "btl/tcp/tcp.h"
#include "btl/ctx.h"

#define TAG_ZONE 50
#define TAG_DATA 51
#define ZONE ((size_t)1 << 20)
#define MAX_RDMA ((size_t)256 << 10)
#define ROUNDS 40
#define GIVE_UP_MS 25000u

/* ---- the shim ---- */

enum { F_CUT, F_BLOCK, F_BIGLEN, F_BADTYPE, F_NONZERO, F_EDGE, F_EDGEBLOCK, F_KINDS };
static const char *const kind_names[F_KINDS] = {"cut",     "block", "biglen",   "badtype",
                                                "nonzero", "edge",  "edgeblock"};

typedef struct shim {
    int fd;          /* the socket to rank 1, once armed; -1 before */
    int kind;
    int frame;       /* which frame the fault hits */
    uint32_t rnd;    /* chooses the place of the cut and the bit flipped */
    uint64_t pos;    /* bytes of the stream passed so far */
    uint64_t next;   /* where the next header starts */
    uint64_t start;  /* where the header being read started */
    unsigned char hdr[sizeof(tcp_hdr_t)];
    size_t got;      /* bytes of it read */
    int index;       /* the frame whose header is being read */
    uint64_t cut_at; /* UINT64_MAX until known */
    bool cut;        /* past the cut */
} shim_t;

static shim_t shim = {.fd = -1, .cut_at = UINT64_MAX};

/* Follows the stream over n bytes at buf, changing them as the fault says;
 * returns how many come before the cut. */
static size_t shim_scan(shim_t *s, unsigned char *buf, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s->pos >= s->cut_at) {
            s->cut = true;
            return i;
        }
        if (s->pos < s->next) {
            uint64_t skip = s->next - s->pos;
            if (s->cut_at < s->next)
                skip = s->cut_at - s->pos;
            if (skip > n - i)
                skip = n - i;
            i += skip;
            s->pos += skip;
            continue;
        }
        if (s->got == 0) {
            s->start = s->pos;
            if (s->index == s->frame && (s->kind == F_EDGE || s->kind == F_EDGEBLOCK)) {
                s->cut_at = s->start;
                continue;
            }
            if (s->index == s->frame && (s->kind == F_CUT || s->kind == F_BLOCK) &&
                (s->rnd & 3) == 0)
                s->cut_at = s->start + 1 + (s->rnd >> 2) % (sizeof(tcp_hdr_t) - 1);
        }
        s->hdr[s->got] = buf[i];
        if (s->index == s->frame) {
            size_t b = s->got;
            if (s->kind == F_BIGLEN && b == 2 + ((s->rnd >> 3) & 1))
                buf[i] ^= (unsigned char)(1u << (s->rnd & 7));
            else if (s->kind == F_BADTYPE && b == offsetof(tcp_hdr_t, type))
                buf[i] = 0x7f;
            else if (s->kind == F_NONZERO && b == offsetof(tcp_hdr_t, zero))
                buf[i] = 1;
        }
        s->got++;
        s->pos++;
        i++;
        if (s->got == sizeof(tcp_hdr_t)) {
            tcp_hdr_t h;
            memcpy(&h, s->hdr, sizeof(h));
            s->next = s->start + sizeof(h) + h.len;
            if (s->index == s->frame && (s->kind == F_CUT || s->kind == F_BLOCK) &&
                s->cut_at == UINT64_MAX)
                s->cut_at = h.len > 0 ? s->start + sizeof(h) + (s->rnd >> 2) % h.len
                                      : s->start + sizeof(h) - 1;
            s->got = 0;
            s->index++;
        }
    }
    if (s->pos >= s->cut_at)
        s->cut = true;
    return i;
}

static ssize_t shim_write(int fd, const struct iovec *iov, size_t cnt, int flags)
{
    size_t total = 0;
    for (size_t k = 0; k < cnt; k++)
        total += iov[k].iov_len;
    if (shim.cut) {
        if (shim.kind == F_BLOCK || shim.kind == F_EDGEBLOCK) {
            errno = EAGAIN;
            return -1;
        }
        shim.pos += total; /* dropped, and said to be written */
        return (ssize_t)total;
    }
    unsigned char *buf = malloc(total > 0 ? total : 1);
    unsigned char *orig = malloc(total > 0 ? total : 1);
    CHECK(buf != NULL && orig != NULL);
    size_t off = 0;
    for (size_t k = 0; k < cnt; k++) {
        memcpy(orig + off, iov[k].iov_base, iov[k].iov_len);
        off += iov[k].iov_len;
    }
    memcpy(buf, orig, total);
    shim_t trial = shim;
    size_t sendable = shim_scan(&trial, buf, total);
    ssize_t k = 0;
    if (sendable > 0)
        k = syscall(SYS_sendto, fd, buf, sendable, flags, NULL, 0);
    ssize_t ret;
    if (k < 0) {
        ret = -1;
    } else if ((size_t)k == sendable && sendable < total) {
        /* The cut: the bytes before it went, the rest never will. */
        shim_scan(&shim, orig, total);
        if (shim.kind == F_BLOCK || shim.kind == F_EDGEBLOCK) {
            ret = k > 0 ? k : -1;
            if (k == 0)
                errno = EAGAIN;
        } else {
            shim.pos += total - (size_t)k;
            ret = (ssize_t)total;
        }
    } else {
        shim_scan(&shim, orig, (size_t)k);
        ret = k;
    }
    int err = errno;
    free(buf);
    free(orig);
    errno = err;
    return ret;
}

ssize_t send(int fd, const void *buf, size_t len, int flags)
{
    if (fd != shim.fd || fd < 0)
        return syscall(SYS_sendto, fd, buf, len, flags, NULL, 0);
    struct iovec iov = {(void *)buf, len};
    return shim_write(fd, &iov, 1, flags);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    if (fd != shim.fd || fd < 0)
        return syscall(SYS_sendmsg, fd, msg, flags);
    return shim_write(fd, msg->msg_iov, msg->msg_iovlen, flags);
}

/* ---- the ranks ---- */

typedef struct zone_msg {
    uint64_t addr;
    ferry_rkey_t rkey;
} zone_msg_t;

typedef struct state {
    ferry_ctx_t *ctx;
    int me, peer;
    unsigned char *zone;
    bool have_zone;
    zone_msg_t peer_zone;
    int errors;         /* error callbacks */
    int first_error;    /* first failure seen in any form */
    char what[256];
    uint64_t msgs;
    uint64_t bad_msgs;  /* arrived with the wrong bytes */
    uint64_t t0;
} state_t;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint32_t rnd_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return (uint32_t)(*x >> 11);
}

/* Keeps the first failure seen: what failed, its status, the message. */
static void saw(state_t *st, int status, const char *what, const char *detail)
{
    if (st->first_error != FERRY_OK)
        return;
    st->first_error = status;
    snprintf(st->what, sizeof(st->what), "%s: %s%s%s", what, ferry_strerror(status),
             detail[0] != '\0' ? ": " : "", detail);
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    state_t *st = arg;
    (void)ctx;
    CHECK(peer == st->peer);
    st->errors++;
    saw(st, status, "error callback", msg);
}

static void on_zone(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)src, (void)tag;
    CHECK(len == sizeof(zone_msg_t));
    memcpy(&st->peer_zone, data, sizeof(zone_msg_t));
    st->have_zone = true;
}

/* Messages carry their length and a byte pattern from it. */
static void on_data(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    const unsigned char *p = data;
    (void)ctx, (void)src, (void)tag;
    st->msgs++;
    bool good = len >= 4;
    uint32_t n = 0;
    if (good) {
        memcpy(&n, p, 4);
        good = n == len;
    }
    for (size_t i = 4; good && i < len; i++)
        good = p[i] == (unsigned char)(n + i);
    if (!good)
        st->bad_msgs++;
}

static void on_comp(void *arg, int status)
{
    state_t *st = arg;
    if (status != FERRY_OK)
        saw(st, status, "a put or get failed", "");
}

static bool gave_up(const state_t *st)
{
    return now_ms() - st->t0 > GIVE_UP_MS;
}

/* Sends one message; false once the peer is failed (or time is up). */
static bool send_msg(state_t *st, uint8_t tag, const void *data, size_t len)
{
    for (;;) {
        int rc = ferry_am_send(st->ctx, st->peer, tag, data, len);
        if (rc == FERRY_OK)
            return true;
        if (rc != FERRY_ERR_NO_RESOURCE) {
            saw(st, rc, "a send failed", "");
            return false;
        }
        if (ferry_progress(st->ctx) < 0 || st->first_error != FERRY_OK || gave_up(st))
            return false;
    }
}

/* One round: puts, gets and messages, then a flush. */
static bool round_trip(state_t *st, uint64_t *rng, unsigned char *buf)
{
    for (int i = 0; i < 4; i++) {
        size_t len = 1 + rnd_next(rng) % MAX_RDMA;
        size_t off = rnd_next(rng) % (ZONE - len);
        int rc = (i & 1) ? ferry_get(st->ctx, st->peer, buf + i * MAX_RDMA, len, NULL,
                                     st->peer_zone.addr + off, &st->peer_zone.rkey, on_comp, st)
                         : ferry_put(st->ctx, st->peer, buf + i * MAX_RDMA, len, NULL,
                                     st->peer_zone.addr + off, &st->peer_zone.rkey, on_comp, st);
        if (rc != FERRY_OK) {
            saw(st, rc, "a put or get was refused", "");
            return false;
        }
        unsigned char msg[2048];
        uint32_t n = 4 + rnd_next(rng) % (sizeof(msg) - 4);
        memcpy(msg, &n, 4);
        for (size_t k = 4; k < n; k++)
            msg[k] = (unsigned char)(n + k);
        if (!send_msg(st, TAG_DATA, msg, n))
            return false;
    }
    int rc = ferry_flush(st->ctx, st->peer);
    if (rc != FERRY_OK)
        saw(st, rc, "ferry_flush", "");
    return rc == FERRY_OK && st->first_error == FERRY_OK;
}

/* Arms the shim on the socket to the peer once nothing is queued on it, so
 * that the next byte written starts a frame. */
static void arm(state_t *st, uint64_t seed)
{
    tcp_module_t *mod = (tcp_module_t *)btl_ctx_find_module(st->ctx, "tcp");
    ferry_btl_endpoint_t *ep = mod->eps[st->peer];
    CHECK(ep != NULL);
    while (ep->state == TCP_EP_CONNECTED && !util_list_empty(&ep->queue))
        CHECK(ferry_progress(st->ctx) >= 0);
    CHECK(ep->state == TCP_EP_CONNECTED);
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    shim.kind = (int)(rnd_next(&x) % F_KINDS);
    shim.frame = (int)(rnd_next(&x) % 200);
    shim.rnd = rnd_next(&x);
    shim.fd = ep->poll.fd;
    printf("tcp_corrupt 0: seed %llu: %s at frame %d (rnd %u)\n", (unsigned long long)seed,
           kind_names[shim.kind], shim.frame, shim.rnd);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    state_t st;
    memset(&st, 0, sizeof(st));
    CHECK(ferry_init(NULL, &st.ctx) == FERRY_OK);
    if (ferry_size(st.ctx) != 2 || btl_ctx_find_module(st.ctx, "tcp") == NULL) {
        printf("tcp_corrupt: SKIP: needs 2 ranks and the tcp transport (FERRY_BTL=self,tcp)\n");
        ferry_finalize(&st.ctx);
        return 77;
    }
    st.me = ferry_rank(st.ctx);
    st.peer = 1 - st.me;
    st.zone = calloc(1, ZONE);
    unsigned char *buf = calloc(4, MAX_RDMA);
    CHECK(st.zone != NULL && buf != NULL);
    ferry_mem_t *mem;
    CHECK(ferry_mem_register(st.ctx, st.zone, ZONE,
                             FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE,
                             &mem) == FERRY_OK);
    CHECK(ferry_am_register(st.ctx, TAG_ZONE, on_zone, &st) == FERRY_OK);
    CHECK(ferry_am_register(st.ctx, TAG_DATA, on_data, &st) == FERRY_OK);
    CHECK(ferry_set_error_cb(st.ctx, on_error, &st) == FERRY_OK);
    CHECK(ferry_barrier(st.ctx) == FERRY_OK);
    zone_msg_t z = {.addr = (uint64_t)(uintptr_t)st.zone};
    CHECK(ferry_mem_rkey(mem, &z.rkey) == FERRY_OK);
    st.t0 = now_ms();
    CHECK(send_msg(&st, TAG_ZONE, &z, sizeof(z)));
    while (!st.have_zone)
        CHECK(ferry_progress(st.ctx) >= 0);
    /* Both have the other's zone and are connected: the fault may come,
     * even before rank 1 has left this barrier. */
    int rc = ferry_barrier(st.ctx);
    if (rc != FERRY_OK)
        saw(&st, rc, "ferry_barrier", "");
    if (st.me == 0 && rc == FERRY_OK)
        arm(&st, seed);
    uint64_t rng = seed * 2654435761u + (uint64_t)st.me + 7;
    st.t0 = now_ms();
    int rounds = 0;
    while (st.first_error == FERRY_OK && rounds < ROUNDS && !gave_up(&st) &&
           round_trip(&st, &rng, buf))
        rounds++;
    /* The fault must show on both sides: wait for it, bounded. */
    while (st.first_error == FERRY_OK && !gave_up(&st))
        CHECK(ferry_progress(st.ctx) >= 0);
    uint64_t took = now_ms() - st.t0;
    bool ok = st.first_error != FERRY_OK;
    printf("tcp_corrupt %d: %s after %d rounds and %llu ms (%llu messages, %llu with wrong "
           "bytes): %s\n",
           st.me, ok ? "ok" : "FAILED: no error", rounds, (unsigned long long)took,
           (unsigned long long)st.msgs, (unsigned long long)st.bad_msgs,
           ok ? st.what : "the fault went unnoticed");
    fflush(stdout);
    /* Whatever is still in flight fails with the peer. */
    (void)ferry_flush(st.ctx, st.peer);
    CHECK(ferry_mem_deregister(st.ctx, mem) == FERRY_OK);
    ferry_finalize(&st.ctx);
    free(st.zone);
    free(buf);
    return ok ? 0 : 1;
}
