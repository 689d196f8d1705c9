/*
 * The loopback TCP floors, measured between the two ranks of the run:
 * - ping-pong: 8 bytes each way over one connection, TCP_NODELAY, both ends
 *   non-blocking and busy-polling recv; the half round trip.
 * - stream: rank 0 writes size bytes at a time (windows of BENCH_WINDOW
 *   writes) into a blocking socket, rank 1 reads each message into the
 *   same buffer (as a put lands in the same target buffer; up to
 *   TCP_RX_CHUNK, then wrapping) and answers one byte at the end; MB/s. The reads block:
 *   busy-polling them halves loopback TCP's bandwidth on this kind of VM
 *   (the spinning reader fights the sender's softirq for the socket).
 * Rank 1 listens on 127.0.0.1, or on the IPv4 address in
 * FERRY_BENCH_TCP_FLOOR_ADDR (its own, when the ranks are on two hosts:
 * then the floor is one socket over that link), and sends address and port
 * in a control message; it waits at most 10 s for rank 0 to connect. They
 * stand for the tcp transport's floors when FERRY_BTL selects tcp without
 * sm (bench_floor_tcp_selected).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench.h"

#define TCP_PP_ITERS 10000
#define TCP_PP_WARMUP 1000
/* The stream floor's reads: at most this many bytes into one buffer, the
 * default of ferry tcp's own receive buffer (tcp_rx_buffer). Reads into a
 * larger buffer leave cache and make the floor both slower than ferry and
 * twice as noisy from block to block. */
#define TCP_RX_CHUNK (512u << 10)

bool bench_floor_tcp_selected(const bench_t *b)
{
    const char *t = b->transport;
    return strstr(t, "tcp") != NULL && strstr(t, "sm") == NULL;
}

static int tcp_setup(bench_t *b)
{
    bench_floors_t *f = &b->floors;
    f->tcp_setup_done = true;
    f->tcp_fd = -1;
    int one = 1;
    size_t len;
    int rc;
    if (b->rank == 1) {
        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sin = {.sin_family = AF_INET,
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        const char *at = getenv("FERRY_BENCH_TCP_FLOOR_ADDR");
        if (at != NULL && at[0] != '\0' && inet_pton(AF_INET, at, &sin.sin_addr) != 1) {
            bench_error(b, "FERRY_BENCH_TCP_FLOOR_ADDR='%s' is not an IPv4 address", at);
            sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        }
        socklen_t sl = sizeof(sin);
        struct {
            uint16_t port;
            uint16_t zero;
            uint32_t addr; /* network order */
        } where = {0, 0, sin.sin_addr.s_addr};
        if (lfd >= 0 && bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) == 0 &&
            listen(lfd, 1) == 0 && getsockname(lfd, (struct sockaddr *)&sin, &sl) == 0)
            where.port = ntohs(sin.sin_port);
        if ((rc = bench_ctrl_send(b, BENCH_CTRL_TCP, &where, sizeof(where))) != FERRY_OK) {
            if (lfd >= 0)
                close(lfd);
            return rc;
        }
        struct pollfd pfd = {.fd = lfd, .events = POLLIN};
        if (where.port != 0 && poll(&pfd, 1, 10000) == 1)
            f->tcp_fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (lfd >= 0)
            close(lfd);
        /* The stream's receive buffer, kept for every block. */
        if (f->tcp_fd >= 0 && (f->tcp_rxbuf = malloc(TCP_RX_CHUNK)) == NULL) {
            close(f->tcp_fd);
            f->tcp_fd = -1;
        }
    } else {
        struct {
            uint16_t port;
            uint16_t zero;
            uint32_t addr;
        } where = {0, 0, 0};
        if ((rc = bench_ctrl_recv(b, BENCH_CTRL_TCP, &where, sizeof(where), &len)) != FERRY_OK)
            return rc;
        if (len != sizeof(where) || where.zero != 0) {
            bench_error(b, "malformed TCP address from rank %d", b->peer);
            return FERRY_ERR_PROTO;
        }
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(where.port),
                                  .sin_addr.s_addr = where.addr};
        int fd = where.port != 0 ? socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
            close(fd);
            fd = -1;
        }
        f->tcp_fd = fd;
    }
    if (f->tcp_fd >= 0)
        setsockopt(f->tcp_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* Both ends must know whether the other has a socket. */
    int32_t mine = f->tcp_fd >= 0, theirs = 0;
    if (b->rank == 0) {
        if ((rc = bench_ctrl_send(b, BENCH_CTRL_TCP, &mine, sizeof(mine))) != FERRY_OK ||
            (rc = bench_ctrl_recv(b, BENCH_CTRL_TCP, &theirs, sizeof(theirs), &len)) != FERRY_OK)
            return rc;
    } else {
        if ((rc = bench_ctrl_recv(b, BENCH_CTRL_TCP, &theirs, sizeof(theirs), &len)) !=
                FERRY_OK ||
            (rc = bench_ctrl_send(b, BENCH_CTRL_TCP, &mine, sizeof(mine))) != FERRY_OK)
            return rc;
    }
    if (len != sizeof(theirs)) {
        bench_error(b, "malformed TCP readiness from rank %d", b->peer);
        return FERRY_ERR_PROTO;
    }
    f->tcp_ok = mine && theirs;
    return FERRY_OK;
}

int bench_floor_tcp_setup(bench_t *b)
{
    return b->floors.tcp_setup_done ? FERRY_OK : tcp_setup(b);
}

/* Busy-polls a non-blocking recv until len bytes have come. */
static int recv_spin(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(fd, (char *)buf + got, len - got, MSG_DONTWAIT);
        if (n > 0)
            got += (size_t)n;
        else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return FERRY_ERR_IO;
    }
    return FERRY_OK;
}

static int send_all(int fd, const void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = send(fd, (const char *)buf + done, len - done, MSG_NOSIGNAL);
        if (n > 0)
            done += (size_t)n;
        else if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
            return FERRY_ERR_IO;
    }
    return FERRY_OK;
}

static int pingpong(bench_t *b, long n, uint64_t *ns_out)
{
    int fd = b->floors.tcp_fd;
    uint64_t msg = 0;
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        int rc;
        if (b->rank == 0) {
            if ((rc = send_all(fd, &msg, sizeof(msg))) != FERRY_OK ||
                (rc = recv_spin(fd, &msg, sizeof(msg))) != FERRY_OK)
                return rc;
        } else {
            if ((rc = recv_spin(fd, &msg, sizeof(msg))) != FERRY_OK ||
                (rc = send_all(fd, &msg, sizeof(msg))) != FERRY_OK)
                return rc;
        }
    }
    *ns_out = bench_now_ns() - t0;
    return FERRY_OK;
}

/* One timed stream of total bytes in writes of size; rank 0 times it. */
static int stream(bench_t *b, size_t size, uint64_t total, uint8_t *rxbuf, uint64_t *ns_out)
{
    int fd = b->floors.tcp_fd;
    uint8_t ack = 1;
    uint64_t t0 = bench_now_ns();
    int rc;
    if (b->rank == 0) {
        for (uint64_t sent = 0; sent < total; sent += size)
            if ((rc = send_all(fd, b->pattern, size)) != FERRY_OK)
                return rc;
        if ((rc = recv_spin(fd, &ack, 1)) != FERRY_OK)
            return rc;
    } else {
        size_t span = size < TCP_RX_CHUNK ? size : TCP_RX_CHUNK;
        uint64_t got = 0;
        while (got < total) {
            size_t off = (size_t)(got % size) % span;
            size_t want = span - off;
            if (total - got < want)
                want = (size_t)(total - got);
            ssize_t n = recv(fd, rxbuf + off, want, 0);
            if (n > 0)
                got += (uint64_t)n;
            else if (n == 0 || errno != EINTR)
                return FERRY_ERR_IO;
        }
        if ((rc = send_all(fd, &ack, 1)) != FERRY_OK)
            return rc;
    }
    *ns_out = bench_now_ns() - t0;
    return FERRY_OK;
}

int bench_floor_tcp_pingpong_block(bench_t *b, const bench_block_t *blk, long n,
                                   uint64_t *ns_out)
{
    int rc = pingpong(b, n, ns_out);
    if (rc != FERRY_OK)
        bench_error(b, "TCP ping-pong floor: %s", ferry_strerror(rc));
    return rc;
}

int bench_floor_tcp_stream_block(bench_t *b, const bench_block_t *blk, long n,
                                 uint64_t *ns_out)
{
    uint64_t total = (uint64_t)blk->size * BENCH_WINDOW * (uint64_t)n;
    int rc = stream(b, blk->size, total, b->floors.tcp_rxbuf, ns_out);
    if (rc != FERRY_OK)
        bench_error(b, "TCP stream floor at %zu bytes: %s", blk->size, ferry_strerror(rc));
    return rc;
}

int bench_floor_tcp(bench_t *b, const size_t *sizes, int n)
{
    bench_floors_t *f = &b->floors;
    int rc;
    if ((rc = bench_floor_tcp_setup(b)) != FERRY_OK)
        return rc;
    if (!f->tcp_lat_done) {
        f->tcp_lat_done = true;
        f->tcp_lat_us = -1.0;
        if (f->tcp_ok) {
            double us[101];
            uint64_t ns;
            rc = pingpong(b, TCP_PP_WARMUP, &ns);
            for (int r = 0; rc == FERRY_OK && r < b->opts.reps; r++) {
                rc = pingpong(b, TCP_PP_ITERS, &ns);
                us[r] = (double)ns / 1e3 / (2.0 * TCP_PP_ITERS);
            }
            if (rc != FERRY_OK) {
                bench_error(b, "TCP ping-pong floor: %s", ferry_strerror(rc));
                return rc;
            }
            f->tcp_lat_us = bench_median(us, b->opts.reps);
        }
    }
    rc = FERRY_OK;
    for (int k = 0; rc == FERRY_OK && k < n; k++) {
        size_t size = sizes[k];
        bool known = false;
        for (int i = 0; i < f->n_tcp; i++)
            known = known || f->tcp_size[i] == size;
        if (known || size == 0 || f->n_tcp == BENCH_SIZES_MAX)
            continue;
        double mbs = -1.0;
        if (f->tcp_ok) {
            uint64_t total = (uint64_t)size * BENCH_WINDOW * (uint64_t)bench_iters(b, BENCH_LIMITS, size);
            uint64_t warm = (uint64_t)size * BENCH_WINDOW *
                            (uint64_t)(bench_warmup(b, BENCH_LIMITS, size) + 1);
            double v[101];
            uint64_t ns;
            rc = stream(b, size, warm, f->tcp_rxbuf, &ns);
            for (int r = 0; rc == FERRY_OK && r < b->opts.reps; r++) {
                rc = stream(b, size, total, f->tcp_rxbuf, &ns);
                v[r] = (double)total / ((double)ns / 1e3);
            }
            if (rc == FERRY_OK)
                mbs = bench_median(v, b->opts.reps);
            else
                bench_error(b, "TCP stream floor at %zu bytes: %s", size, ferry_strerror(rc));
        }
        f->tcp_size[f->n_tcp] = size;
        f->tcp_mbs[f->n_tcp] = mbs;
        f->n_tcp++;
    }
    return rc;
}

double bench_floor_tcp_stream_at(const bench_t *b, size_t size)
{
    for (int i = 0; i < b->floors.n_tcp; i++)
        if (b->floors.tcp_size[i] == size)
            return b->floors.tcp_mbs[i];
    return -1.0;
}

void bench_floor_tcp_fini(bench_t *b)
{
    if (b->floors.tcp_setup_done && b->floors.tcp_fd >= 0)
        close(b->floors.tcp_fd);
    b->floors.tcp_fd = -1;
    free(b->floors.tcp_rxbuf);
    b->floors.tcp_rxbuf = NULL;
}
