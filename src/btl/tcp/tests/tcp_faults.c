/*
 * Trust and fault cases of the tcp transport: `tcp_faults MODE`, two ranks
 * under ferryrun with FERRY_BTL=self,tcp. Rank 0 is the ferry process under
 * test; rank 1 plays the stranger or the broken peer.
 *
 * Refused before any frame (rank 0 must log the refusal, answer nothing,
 * deliver nothing, and still take rank 1's genuine message afterwards):
 *   nokey     a hello with an all-zero key
 *   badkey    a hello with a random key
 *   garbage   random bytes instead of a hello
 *   silent    a connection that never says hello (refused after the timeout)
 * Broken after a good hello (rank 0 must report rank 1 through the error
 * callback, deliver nothing, and go on working):
 *   oversize  an active message longer than the largest send
 *   badtag    an active message on a transport-reserved tag
 *   badanswer a get answer for no request
 *   badtype   an unknown frame type
 * Unreachable peer (rank 0's send must fail within the connect timeout):
 *   refused   rank 1 publishes a port nobody listens on
 *   mute      rank 1 publishes a listener that accepts but never answers
 * A peer with no room for one more connection (rank 0 must connect again
 * and get through, with no error):
 *   evicted   rank 1's listeners close rank 0's first connections (two to
 *             each address and one more) before their hello completes, as
 *             listeners full of strangers do
 *
 * Prints "tcp_faults MODE: ok" from rank 0 on success; exits 1 otherwise.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "unit/check.h"
#include "btl/tcp/tcp.h"
#include "btl/ctx.h"
#include "rt/modex.h"

#define TAG_LEGIT 7

typedef struct state {
    int delivered;
    char last[64];
    int errors;
    int error_peer;
    int error_status;
    char error_msg[256];
} state_t;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void on_msg(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                   void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)tag;
    st->delivered++;
    snprintf(st->last, sizeof(st->last), "%d:%.*s", src, (int)(len < 40 ? len : 40),
             (const char *)data);
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    state_t *st = arg;
    (void)ctx;
    st->errors++;
    st->error_peer = peer;
    st->error_status = status;
    snprintf(st->error_msg, sizeof(st->error_msg), "%s", msg);
    printf("rank %d: error callback: peer %d, %s: %s\n", ferry_rank(ctx), peer,
           ferry_strerror(status), msg);
    fflush(stdout);
}

/* Connects a plain socket to rank 0's loopback address. */
static int connect_rank0(ferry_ctx_t *ctx)
{
    void *val = NULL;
    size_t len = 0;
    CHECK(rt_modex_get(ctx->modex, 0, "btl.tcp", &val, &len) == FERRY_OK);
    tcp_addr_blob_t blob;
    memset(&blob, 0, sizeof(blob));
    CHECK(len <= sizeof(blob));
    memcpy(&blob, val, len);
    free(val);
    for (int i = 0; i < blob.count; i++) {
        const tcp_addr_entry_t *e = &blob.entry[i];
        if (e->family != 4 || e->addr[0] != 127)
            continue;
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(e->port)};
        memcpy(&sin.sin_addr, e->addr, 4);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        CHECK(fd >= 0);
        CHECK(connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
        return fd;
    }
    fprintf(stderr, "tcp_faults: rank 0 publishes no loopback address\n");
    exit(1);
}

static void write_all(int fd, const void *buf, size_t len)
{
    CHECK(send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len);
}

/* Waits until the other end closes; returns the bytes it sent first. */
static size_t read_until_closed(int fd, int timeout_ms)
{
    size_t total = 0;
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(end - now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0) {
            fprintf(stderr, "tcp_faults: rank 0 did not close the connection\n");
            exit(1);
        }
        char buf[256];
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0)
            return total;
        total += (size_t)n;
    }
}

static tcp_hello_t good_hello(ferry_ctx_t *ctx)
{
    tcp_hello_t h = {.magic = TCP_MAGIC, .version = TCP_VERSION, .rank = 1, .size = 2};
    void *key = NULL;
    size_t len = 0;
    CHECK(rt_modex_get(ctx->modex, 0, "btl.tcp.jobkey", &key, &len) == FERRY_OK);
    CHECK(len == TCP_KEY_LEN);
    memcpy(h.key, key, TCP_KEY_LEN);
    free(key);
    return h;
}

static void send_legit(ferry_ctx_t *ctx)
{
    int rc;
    while ((rc = ferry_am_send(ctx, 0, TAG_LEGIT, "legit", 5)) == FERRY_ERR_NO_RESOURCE)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(rc == FERRY_OK);
    CHECK(ferry_flush(ctx, 0) == FERRY_OK);
}

/* Rank 1: the stranger before the hello. */
static void attack_hello(ferry_ctx_t *ctx, const char *mode)
{
    int fd = connect_rank0(ctx);
    if (strcmp(mode, "silent") != 0) {
        tcp_hello_t h = {.magic = TCP_MAGIC, .version = TCP_VERSION, .rank = 1, .size = 2};
        if (strcmp(mode, "badkey") == 0)
            CHECK(getrandom(h.key, sizeof(h.key), 0) == (ssize_t)sizeof(h.key));
        if (strcmp(mode, "garbage") == 0)
            CHECK(getrandom(&h, sizeof(h), 0) == (ssize_t)sizeof(h));
        write_all(fd, &h, sizeof(h));
        /* Frames after a refused hello must go nowhere. */
        tcp_hdr_t d = {.len = 5, .type = TCP_T_DATA, .tag = TAG_LEGIT};
        send(fd, &d, sizeof(d), MSG_NOSIGNAL);
        send(fd, "FORGE", 5, MSG_NOSIGNAL);
    }
    /* No answer at all: an answer would carry the job key. */
    size_t got = read_until_closed(fd, 15000);
    close(fd);
    if (got != 0) {
        fprintf(stderr, "tcp_faults: rank 0 answered a stranger with %zu bytes\n", got);
        exit(1);
    }
    send_legit(ctx);
}

/* Rank 1: a good hello, then a bad frame. */
static void attack_frame(ferry_ctx_t *ctx, const char *mode)
{
    int fd = connect_rank0(ctx);
    tcp_hello_t h = good_hello(ctx);
    write_all(fd, &h, sizeof(h));
    tcp_hello_t reply;
    CHECK(recv(fd, &reply, sizeof(reply), MSG_WAITALL) == (ssize_t)sizeof(reply));
    CHECK(reply.magic == TCP_MAGIC && reply.status == TCP_HELLO_OK && reply.rank == 0);
    tcp_hdr_t d = {.type = TCP_T_DATA, .tag = TAG_LEGIT};
    unsigned char body[64] = "FORGED";
    size_t body_len = 0;
    if (strcmp(mode, "oversize") == 0) {
        d.len = 0xfffffff0u;
        body_len = sizeof(body);
    } else if (strcmp(mode, "badtag") == 0) {
        d.tag = 250;
        d.len = 6;
        body_len = 6;
    } else if (strcmp(mode, "badanswer") == 0) {
        d.type = TCP_T_GET_RESP;
        d.tag = 0;
        d.cookie = 12345;
        d.len = sizeof(tcp_status_body_t);
        memset(body, 0, sizeof(body));
        body_len = sizeof(tcp_status_body_t);
    } else {
        d.type = 99;
        d.tag = 0;
    }
    write_all(fd, &d, sizeof(d));
    if (body_len > 0)
        send(fd, body, body_len, MSG_NOSIGNAL);
    read_until_closed(fd, 15000);
    close(fd);
}

/* Rank 1: closes the first n connections to its own listeners as soon as
 * they come (before their hello is read), then lets ferry take over. */
static void evict_first(ferry_ctx_t *ctx, int n)
{
    const tcp_module_t *mod = (const tcp_module_t *)btl_ctx_find_module(ctx, "tcp");
    struct pollfd p[TCP_MAX_ADDRS];
    for (int i = 0; i < mod->nlisteners; i++)
        p[i] = (struct pollfd){.fd = mod->listeners[i].poll.fd, .events = POLLIN};
    uint64_t end = now_ms() + 15000;
    for (int closed = 0; closed < n;) {
        if (now_ms() > end) {
            fprintf(stderr, "tcp_faults: rank 0 did not connect %d times\n", n);
            exit(1);
        }
        CHECK(poll(p, (nfds_t)mod->nlisteners, 100) >= 0);
        for (int i = 0; i < mod->nlisteners; i++) {
            if (!(p[i].revents & POLLIN))
                continue;
            int fd = accept(p[i].fd, NULL, NULL);
            if (fd >= 0) {
                close(fd);
                closed++;
            }
        }
    }
    printf("rank 1: closed rank 0's first %d connections before their hello\n", n);
    fflush(stdout);
}

/* Rank 1: publishes an address where nothing useful answers. */
static int publish_bogus(ferry_ctx_t *ctx, const char *mode)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sin);
    CHECK(bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&sin, &sl) == 0);
    if (strcmp(mode, "mute") == 0) {
        CHECK(listen(fd, 8) == 0); /* the kernel completes connects; nobody reads */
    } else {
        close(fd); /* the port is free again: connects are refused */
        fd = -1;
    }
    tcp_addr_blob_t blob = {.magic = (uint32_t)TCP_MAGIC, .version = TCP_VERSION, .count = 1};
    blob.entry[0].family = 4;
    blob.entry[0].prefix = 8;
    blob.entry[0].port = ntohs(sin.sin_port);
    memcpy(blob.entry[0].addr, &sin.sin_addr, 4);
    CHECK(rt_modex_put(ctx->modex, "btl.tcp", &blob,
                       offsetof(tcp_addr_blob_t, entry) + sizeof(tcp_addr_entry_t)) == FERRY_OK);
    CHECK(rt_modex_commit(ctx->modex) == FERRY_OK);
    return fd;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: tcp_faults MODE\n");
        return 2;
    }
    const char *mode = argv[1];
    bool hello_mode = strcmp(mode, "nokey") == 0 || strcmp(mode, "badkey") == 0 ||
                      strcmp(mode, "garbage") == 0 || strcmp(mode, "silent") == 0;
    bool frame_mode = strcmp(mode, "oversize") == 0 || strcmp(mode, "badtag") == 0 ||
                      strcmp(mode, "badanswer") == 0 || strcmp(mode, "badtype") == 0;
    bool unreach_mode = strcmp(mode, "refused") == 0 || strcmp(mode, "mute") == 0;
    bool retry_mode = strcmp(mode, "evicted") == 0;
    if (!hello_mode && !frame_mode && !unreach_mode && !retry_mode) {
        fprintf(stderr, "tcp_faults: unknown mode '%s'\n", mode);
        return 2;
    }
    ferry_ctx_t *ctx;
    state_t st = {.error_peer = -1};
    int rc = ferry_init(NULL, &ctx);
    if (rc != FERRY_OK) {
        fprintf(stderr, "tcp_faults: ferry_init: %s\n", ferry_strerror(rc));
        return 1;
    }
    if (ferry_size(ctx) != 2 || btl_ctx_find_module(ctx, "tcp") == NULL) {
        printf("tcp_faults: SKIP: needs 2 ranks and the tcp transport (FERRY_BTL=self,tcp)\n");
        ferry_finalize(&ctx);
        return 77;
    }
    int me = ferry_rank(ctx);
    CHECK(ferry_am_register(ctx, TAG_LEGIT, on_msg, &st) == FERRY_OK);
    CHECK(ferry_set_error_cb(ctx, on_error, &st) == FERRY_OK);
    int bogus_fd = -1;
    if (unreach_mode && me == 1)
        bogus_fd = publish_bogus(ctx, mode);
    /* Handlers everywhere, and the bogus address committed, before anyone
     * acts: through the launcher, which no fault here can disturb. */
    CHECK(rt_modex_fence(ctx->modex) == FERRY_OK);

    bool ok = true;
    if (retry_mode) {
        if (me == 1) {
            /* Every address twice over, and one more: rank 0 has to go
             * round them all again, twice. */
            const tcp_module_t *mod = (const tcp_module_t *)btl_ctx_find_module(ctx, "tcp");
            evict_first(ctx, 2 * mod->nlisteners + 1);
            while (st.delivered == 0)
                CHECK(ferry_progress(ctx) >= 0);
            CHECK(strcmp(st.last, "0:legit") == 0);
            while ((rc = ferry_am_send(ctx, 0, TAG_LEGIT, "legit", 5)) == FERRY_ERR_NO_RESOURCE)
                CHECK(ferry_progress(ctx) >= 0);
            CHECK(rc == FERRY_OK);
            while (ferry_progress(ctx) > 0)
                ;
        } else {
            uint64_t t0 = now_ms();
            while ((rc = ferry_am_send(ctx, 1, TAG_LEGIT, "legit", 5)) == FERRY_ERR_NO_RESOURCE)
                CHECK(ferry_progress(ctx) >= 0);
            while (rc == FERRY_OK && st.delivered == 0 && st.errors == 0 &&
                   now_ms() - t0 < 20000)
                CHECK(ferry_progress(ctx) >= 0);
            const tcp_module_t *mod = (const tcp_module_t *)btl_ctx_find_module(ctx, "tcp");
            printf("rank 0: send %s; after %u retries, %d message(s) back (\"%s\"), %d "
                   "error(s), in %llu ms\n",
                   ferry_strerror(rc), mod->eps[1]->retries, st.delivered, st.last, st.errors,
                   (unsigned long long)(now_ms() - t0));
            ok = rc == FERRY_OK && st.delivered == 1 && strcmp(st.last, "1:legit") == 0 &&
                 st.errors == 0 && mod->eps[1]->retries > 0;
        }
    } else if (me == 1) {
        if (hello_mode)
            attack_hello(ctx, mode);
        else if (frame_mode)
            attack_frame(ctx, mode);
    } else if (unreach_mode) {
        const tcp_module_t *mod = (const tcp_module_t *)btl_ctx_find_module(ctx, "tcp");
        uint64_t limit = (uint64_t)mod->p.connect_timeout_ms;
        uint64_t t0 = now_ms();
        while ((rc = ferry_am_send(ctx, 1, TAG_LEGIT, "x", 1)) == FERRY_ERR_NO_RESOURCE &&
               now_ms() - t0 < 10 * limit + 10000)
            CHECK(ferry_progress(ctx) >= 0);
        while (st.errors == 0 && now_ms() - t0 < 10 * limit + 10000)
            CHECK(ferry_progress(ctx) >= 0);
        uint64_t took = now_ms() - t0;
        printf("rank 0: send to rank 1 returned %s; failure reported after %llu ms (timeout "
               "%llu ms)\n",
               ferry_strerror(rc), (unsigned long long)took, (unsigned long long)limit);
        ok = rc == FERRY_ERR_UNREACH && st.errors == 1 && st.error_peer == 1 &&
             took <= limit + 1000;
        ok = ok && ferry_am_send(ctx, 1, TAG_LEGIT, "x", 1) == FERRY_ERR_UNREACH;
    } else {
        /* Rank 0 progresses until the outcome shows, bounded. */
        uint64_t t0 = now_ms();
        while (now_ms() - t0 < 20000 && (hello_mode ? st.delivered == 0 : st.errors == 0))
            CHECK(ferry_progress(ctx) >= 0);
        /* Whatever else was coming has had its chance. */
        uint64_t t1 = now_ms();
        while (now_ms() - t1 < 200)
            CHECK(ferry_progress(ctx) >= 0);
        if (hello_mode) {
            printf("rank 0: delivered %d message(s), last \"%s\"; %d error(s)\n", st.delivered,
                   st.last, st.errors);
            ok = st.delivered == 1 && strcmp(st.last, "1:legit") == 0 && st.errors == 0;
        } else {
            printf("rank 0: delivered %d message(s); error callback for peer %d (%s)\n",
                   st.delivered, st.error_peer, ferry_strerror(st.error_status));
            ok = st.delivered == 0 && st.errors == 1 && st.error_peer == 1 &&
                 st.error_status == FERRY_ERR_PROTO && strstr(st.error_msg, "rank 1") != NULL;
            /* Still working: a message to itself goes through. */
            CHECK(ferry_am_send(ctx, 0, TAG_LEGIT, "self", 4) == FERRY_OK);
            while (st.delivered == 0)
                CHECK(ferry_progress(ctx) >= 0);
            ok = ok && strcmp(st.last, "0:self") == 0;
        }
    }
    CHECK(rt_modex_fence(ctx->modex) == FERRY_OK);
    if (bogus_fd >= 0)
        close(bogus_fd);
    if (me == 0)
        printf("tcp_faults %s: %s\n", mode, ok ? "ok" : "FAILED");
    fflush(stdout);
    /* The peer relation is broken in the fault modes: finalize may warn. */
    ferry_finalize(&ctx);
    return ok ? 0 : 1;
}
