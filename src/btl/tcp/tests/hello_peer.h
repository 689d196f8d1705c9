/*
 * The connecting side of the tcp hello (src/btl/tcp/tcp_hello.c) over a
 * plain socket, for tests that play a stranger or a rank speaking the wire
 * themselves: connecting to a rank's listener, sending an OPEN, reading
 * messages, and (with the job's key) the whole hello of a genuine rank.
 */
#ifndef TESTS_TCP_HELLO_PEER_H
#define TESTS_TCP_HELLO_PEER_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "unit/check.h"
#include "btl/tcp/tcp.h"
#include "btl/ctx.h"
#include "rt/modex.h"

static inline uint64_t hp_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Rank r's loopback listener as it publishes it. */
static inline tcp_addr_entry_t hp_listener_of(ferry_ctx_t *ctx, int r)
{
    void *val = NULL;
    size_t len = 0;
    CHECK(rt_modex_get(ctx->modex, r, "btl.tcp", &val, &len) == FERRY_OK);
    tcp_addr_blob_t blob;
    memset(&blob, 0, sizeof(blob));
    CHECK(len <= sizeof(blob));
    memcpy(&blob, val, len);
    free(val);
    for (int i = 0; i < blob.count; i++) {
        tcp_addr_entry_t e = blob.entry[i];
        if (e.family == 4 && e.addr[0] == 127) {
            e.prefix = 0;
            return e;
        }
    }
    fprintf(stderr, "rank %d publishes no loopback address\n", r);
    exit(1);
}

/* A plain blocking socket connected to that address. */
static inline int hp_connect(const tcp_addr_entry_t *at)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(at->port)};
    memcpy(&sin.sin_addr, at->addr, 4);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    CHECK(connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    return fd;
}

static inline void hp_write(int fd, const void *buf, size_t len)
{
    CHECK(send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len);
}

/* Reads one whole hello message within timeout_ms; false when the other end
 * closed first (or sent less, or nothing in time). */
static inline bool hp_read(int fd, tcp_hello_t *h, int timeout_ms)
{
    size_t got = 0;
    uint64_t end = hp_now_ms() + (uint64_t)timeout_ms;
    while (got < sizeof(*h)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(end - hp_now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return false;
        ssize_t n = recv(fd, (char *)h + got, sizeof(*h) - got, 0);
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return true;
}

/* Waits until the other end closes; returns the bytes it sent meanwhile,
 * copied into buf (up to cap). Exits when it does not close in time. */
static inline size_t hp_until_closed(int fd, int timeout_ms, unsigned char *buf, size_t cap)
{
    size_t total = 0;
    uint64_t end = hp_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(end - hp_now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0) {
            fprintf(stderr, "the listener did not close the connection\n");
            exit(1);
        }
        unsigned char tmp[256];
        ssize_t n = recv(fd, tmp, sizeof(tmp), 0);
        if (n <= 0)
            return total;
        for (ssize_t i = 0; i < n && buf != NULL && total + (size_t)i < cap; i++)
            buf[total + (size_t)i] = tmp[i];
        total += (size_t)n;
    }
}

/* The job as the tcp module sees it, with its key (this process is a rank
 * of the job and may read it: the tests that use it play an insider). */
typedef struct hp_job {
    const char *id;
    uint64_t hash;
    int size;
    uint8_t key[TCP_KEY_LEN];
} hp_job_t;

static inline hp_job_t hp_job(ferry_ctx_t *ctx)
{
    tcp_module_t *mod = (tcp_module_t *)btl_ctx_find_module(ctx, "tcp");
    CHECK(mod != NULL && tcp_load_jobkey(mod) == FERRY_OK);
    hp_job_t j = {.id = mod->job_id, .hash = mod->job_hash, .size = mod->nranks};
    memcpy(j.key, mod->jobkey, sizeof(j.key));
    return j;
}

/* Sends an OPEN from rank `from` to rank `to` at `at` with a fresh nonce,
 * and starts the session it opens. */
static inline void hp_open(int fd, const hp_job_t *j, int from, int to,
                           const tcp_addr_entry_t *at, tcp_session_t *s)
{
    memset(s, 0, sizeof(*s));
    s->rank_c = from;
    s->rank_l = to;
    s->at = *at;
    s->at.prefix = 0;
    CHECK(getrandom(s->nonce_c, sizeof(s->nonce_c), 0) == (ssize_t)sizeof(s->nonce_c));
    tcp_hello_t h;
    tcp_hello_fill(&h, TCP_HELLO_OPEN, from, to, j->size, j->hash);
    memcpy(h.nonce, s->nonce_c, sizeof(h.nonce));
    hp_write(fd, &h, sizeof(h));
}

/* The whole hello of rank `from` to the listener at `at` (rank `to`), as a
 * genuine rank makes it; exits unless the listener proves itself and keeps
 * the connection. */
static inline void hp_handshake(int fd, const hp_job_t *j, int from, int to,
                                const tcp_addr_entry_t *at)
{
    tcp_session_t s;
    hp_open(fd, j, from, to, at, &s);
    tcp_hello_t h;
    CHECK(hp_read(fd, &h, 10000));
    tcp_hello_want_t want = {.step = TCP_HELLO_PROVE, .from = to, .me = from, .size = j->size,
                             .job = j->hash};
    CHECK(tcp_hello_check(&h, &want) == NULL);
    memcpy(s.nonce_l, h.nonce, sizeof(s.nonce_l));
    CHECK(tcp_hello_proves(j->key, j->id, j->size, &s, &h));
    tcp_hello_t a;
    tcp_hello_fill(&a, TCP_HELLO_ANSWER, from, to, j->size, j->hash);
    CHECK(tcp_hello_mac(j->key, j->id, j->size, &s, TCP_HELLO_ANSWER, 0, a.mac) == FERRY_OK);
    hp_write(fd, &a, sizeof(a));
    CHECK(hp_read(fd, &h, 10000));
    want.step = TCP_HELLO_VERDICT;
    CHECK(tcp_hello_check(&h, &want) == NULL && h.status == TCP_HELLO_OK);
    CHECK(tcp_hello_proves(j->key, j->id, j->size, &s, &h));
}

#endif /* TESTS_TCP_HELLO_PEER_H */
