/*
 * Strangers crowding the listeners cannot keep genuine ranks out:
 * `tcp_crowd MODE`, four ranks under ferryrun with FERRY_BTL=self,tcp.
 *
 * Rank 3 plays the stranger: it holds 300 idle connections to each other
 * rank's listener, says nothing on them, and opens them anew every 2
 * seconds (before the connect timeout would close them). In mode "same"
 * they all come from 127.0.0.1, the address the ranks connect from too; in
 * mode "many" each comes from an address of its own (127.1.x.y), as from
 * many hosts.
 *
 * Ranks 0, 1 and 2 meanwhile connect to each other for the first time, pair
 * by pair at staggered moments during the crowd, and keep a ping-pong going
 * with each other for 6 seconds. None may report another failed, and every
 * pair must have exchanged pongs; the ranks' connections get through
 * because a new connection evicts the oldest without a hello (per address
 * and overall), and a rank whose connection is closed before its hello
 * completes connects again.
 *
 * Prints "tcp_crowd RANK: ok" from ranks 0-2; exits 1 on a failed check and
 * 77 (skipped) when not run as four ranks over tcp.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "unit/check.h"
#include "btl/tcp/tcp.h"
#include "btl/ctx.h"
#include "rt/modex.h"

#define TAG_PING 80
#define TAG_PONG 81
#define STRANGER 3
#define GENUINE 3
#define CROWD 300
#define RENEW_MS 2000u
#define RUN_MS 6000u
#define STAGGER_MS 700u

typedef struct state {
    ferry_ctx_t *ctx;
    int me;
    int pings[GENUINE];  /* to answer, by peer */
    int pongs[GENUINE];  /* answers received, by peer */
    bool waiting[GENUINE];
    int errors;
} state_t;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void on_ping(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)tag, (void)data, (void)len;
    CHECK(src >= 0 && src < GENUINE);
    st->pings[src]++;
}

static void on_pong(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)tag, (void)data, (void)len;
    CHECK(src >= 0 && src < GENUINE);
    st->pongs[src]++;
    st->waiting[src] = false;
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    state_t *st = arg;
    printf("rank %d: error callback: peer %d, %s: %s\n", ferry_rank(ctx), peer,
           ferry_strerror(status), msg);
    fflush(stdout);
    st->errors++;
}

/* Sends one message if it can go now; false when it must wait. */
static bool try_send(state_t *st, int dst, uint8_t tag)
{
    int rc = ferry_am_send(st->ctx, dst, tag, "p", 1);
    if (rc == FERRY_ERR_NO_RESOURCE)
        return false;
    if (rc != FERRY_OK) {
        printf("rank %d: send to rank %d: %s\n", st->me, dst, ferry_strerror(rc));
        st->errors++;
        return false;
    }
    return true;
}

static bool genuine(state_t *st)
{
    uint64_t t0 = now_ms();
    while (now_ms() - t0 < RUN_MS && st->errors == 0) {
        CHECK(ferry_progress(st->ctx) >= 0);
        for (int p = 0; p < GENUINE; p++) {
            if (p == st->me)
                continue;
            while (st->pings[p] > 0 && try_send(st, p, TAG_PONG))
                st->pings[p]--;
            /* Each pair meets first at its own moment in the crowd. */
            uint64_t start = (uint64_t)(st->me + p) * STAGGER_MS;
            if (!st->waiting[p] && now_ms() - t0 >= start && try_send(st, p, TAG_PING))
                st->waiting[p] = true;
        }
    }
    tcp_module_t *mod = (tcp_module_t *)btl_ctx_find_module(st->ctx, "tcp");
    bool ok = st->errors == 0;
    for (int p = 0; p < GENUINE; p++) {
        if (p == st->me)
            continue;
        const ferry_btl_endpoint_t *ep = mod->eps[p];
        printf("rank %d: %d pongs from rank %d (connection %s, %u retries)\n", st->me,
               st->pongs[p], p, ep != NULL && ep->state == TCP_EP_CONNECTED ? "up" : "down",
               ep != NULL ? ep->retries : 0);
        ok = ok && st->pongs[p] > 0;
    }
    printf("rank %d: closed %llu connections without a hello to make room\n", st->me,
           (unsigned long long)mod->evicted);
    return ok;
}

/* The address of rank r's loopback listener. */
static struct sockaddr_in listener_of(ferry_ctx_t *ctx, int r)
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
        const tcp_addr_entry_t *e = &blob.entry[i];
        if (e->family == 4 && e->addr[0] == 127) {
            struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(e->port)};
            memcpy(&sin.sin_addr, e->addr, 4);
            return sin;
        }
    }
    fprintf(stderr, "tcp_crowd: rank %d publishes no loopback address\n", r);
    exit(1);
}

static void stranger(ferry_ctx_t *ctx, bool many)
{
    struct sockaddr_in to[GENUINE];
    for (int r = 0; r < GENUINE; r++)
        to[r] = listener_of(ctx, r);
    static int fds[GENUINE][CROWD];
    memset(fds, -1, sizeof(fds));
    uint64_t t0 = now_ms(), opened = 0, failed = 0;
    int rounds = 0;
    while (now_ms() - t0 < RUN_MS + 1000) {
        for (int r = 0; r < GENUINE; r++) {
            for (int i = 0; i < CROWD; i++) {
                if (fds[r][i] >= 0)
                    close(fds[r][i]);
                int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
                CHECK(fd >= 0);
                if (many) {
                    struct sockaddr_in from = {.sin_family = AF_INET};
                    int k = r * CROWD + i;
                    from.sin_addr.s_addr = htonl((127u << 24) | (1u << 16) |
                                                 ((unsigned)(k / 250 + 1) << 8) |
                                                 (unsigned)(k % 250 + 2));
                    CHECK(bind(fd, (struct sockaddr *)&from, sizeof(from)) == 0);
                }
                int rc = connect(fd, (struct sockaddr *)&to[r], sizeof(to[r]));
                if (rc != 0 && errno != EINPROGRESS)
                    failed++;
                fds[r][i] = fd;
                opened++;
            }
        }
        rounds++;
        uint64_t next = t0 + (uint64_t)rounds * RENEW_MS;
        while (now_ms() < next && now_ms() - t0 < RUN_MS + 1000) {
            /* The ranks' own traffic with this rank goes on meanwhile. */
            CHECK(ferry_progress(ctx) >= 0);
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    for (int r = 0; r < GENUINE; r++)
        for (int i = 0; i < CROWD; i++)
            if (fds[r][i] >= 0)
                close(fds[r][i]);
    printf("rank 3: held %d idle connections to each rank from %s, renewed %d times (%llu "
           "opened, %llu refused)\n",
           CROWD, many ? "as many addresses" : "127.0.0.1", rounds, (unsigned long long)opened,
           (unsigned long long)failed);
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "same") != 0 && strcmp(argv[1], "many") != 0)) {
        fprintf(stderr, "usage: tcp_crowd same|many\n");
        return 2;
    }
    bool many = strcmp(argv[1], "many") == 0;
    state_t st;
    memset(&st, 0, sizeof(st));
    CHECK(ferry_init(NULL, &st.ctx) == FERRY_OK);
    if (ferry_size(st.ctx) != 4 || btl_ctx_find_module(st.ctx, "tcp") == NULL) {
        printf("tcp_crowd: SKIP: needs 4 ranks and the tcp transport (FERRY_BTL=self,tcp)\n");
        ferry_finalize(&st.ctx);
        return 77;
    }
    st.me = ferry_rank(st.ctx);
    CHECK(ferry_am_register(st.ctx, TAG_PING, on_ping, &st) == FERRY_OK);
    CHECK(ferry_am_register(st.ctx, TAG_PONG, on_pong, &st) == FERRY_OK);
    CHECK(ferry_set_error_cb(st.ctx, on_error, &st) == FERRY_OK);
    /* Through the launcher: no rank has connected to another yet. */
    CHECK(rt_modex_fence(st.ctx->modex) == FERRY_OK);
    bool ok = true;
    if (st.me == STRANGER) {
        stranger(st.ctx, many);
    } else {
        /* The crowd gathers first. */
        struct timespec ts = {0, 300000000};
        nanosleep(&ts, NULL);
        ok = genuine(&st);
        printf("tcp_crowd %d: %s\n", st.me, ok ? "ok" : "FAILED");
    }
    fflush(stdout);
    CHECK(rt_modex_fence(st.ctx->modex) == FERRY_OK);
    CHECK(ferry_finalize(&st.ctx) == FERRY_OK);
    return ok ? 0 : 1;
}
