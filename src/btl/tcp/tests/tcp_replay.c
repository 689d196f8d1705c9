/*
 * A captured hello replayed as its rank: `tcp_replay MODE`, three ranks
 * under ferryrun with FERRY_BTL=self,tcp.
 *
 * Rank 1 plays a stranger that holds rank 1's published address (a plain
 * socket of its own there, as one that took over a port, or a stale
 * address): when rank 0 connects to "rank 1", the stranger takes every
 * byte rank 0 sends and replays it to rank 2's listener as rank 0's, relays
 * rank 2's answers back to rank 0, and sends rank 2 a frame of its own
 * behind them, as from rank 0. Rank 2's endpoint for rank 0 is NEW (mode
 * "new": the two never talked) or WAIT (mode "wait": set so before the
 * replay, as after a simultaneous connect that rank 0 won).
 *
 * Checked: rank 2 takes no connection as rank 0's from the stranger and
 * delivers nothing; rank 0 refuses the answer relayed from rank 2 (another
 * rank, at another address) and reports rank 1 failed; the stranger never
 * sees a proof it could use (rank 0 sends nothing after its OPEN).
 *
 * Prints "tcp_replay MODE: ok" from rank 2 on success; exits 1 on a failed
 * check and 77 (skipped) when not run as three ranks over tcp.
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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "unit/check.h"
#include "btl/tcp/tcp.h"
#include "hello_peer.h"
#include "btl/ctx.h"
#include "rt/modex.h"

#define TAG_MSG 90

typedef struct state {
    int delivered;
    char last[64];
    int errors;
    int error_peer;
} state_t;

static void on_msg(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                   void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)tag;
    st->delivered++;
    snprintf(st->last, sizeof(st->last), "%d:%.*s", src, (int)(len < 40 ? len : 40),
             (const char *)data);
    printf("rank %d: delivered \"%s\"\n", ferry_rank(ctx), st->last);
    fflush(stdout);
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    state_t *st = arg;
    st->errors++;
    st->error_peer = peer;
    printf("rank %d: error callback: peer %d, %s: %s\n", ferry_rank(ctx), peer,
           ferry_strerror(status), msg);
    fflush(stdout);
}

/* Rank 1: a plain listener published as rank 1's only address. */
static int publish_trap(ferry_ctx_t *ctx)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sin);
    CHECK(bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&sin, &sl) == 0);
    CHECK(listen(fd, 8) == 0);
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

/* Copies what is there from one socket to the other; the bytes copied, or
 * -1 when from closed. */
static ssize_t pass(int from, int to, size_t *total)
{
    unsigned char buf[4096];
    ssize_t n = recv(from, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
        return -1;
    if (n > 0) {
        (void)send(to, buf, (size_t)n, MSG_NOSIGNAL);
        *total += (size_t)n;
    }
    return n < 0 ? 0 : n;
}

/* Rank 1: the stranger's relay between rank 0 and rank 2. */
static void stranger(ferry_ctx_t *ctx, int trap)
{
    struct pollfd p = {.fd = trap, .events = POLLIN};
    CHECK(poll(&p, 1, 20000) == 1);
    int victim = accept(trap, NULL, NULL);
    CHECK(victim >= 0);
    tcp_addr_entry_t at2 = hp_listener_of(ctx, 2);
    int target = hp_connect(&at2);
    size_t from0 = 0, from2 = 0, after_open = 0;
    bool forged = false, open0 = true, open2 = true;
    uint64_t end = hp_now_ms() + 4000;
    while (hp_now_ms() < end && (open0 || open2)) {
        struct pollfd ps[2] = {{.fd = victim, .events = open0 ? POLLIN : 0},
                               {.fd = target, .events = open2 ? POLLIN : 0}};
        CHECK(poll(ps, 2, 50) >= 0);
        if (open0 && ps[0].revents != 0) {
            size_t before = from0;
            open0 = pass(victim, target, &from0) >= 0;
            if (before >= sizeof(tcp_hello_t))
                after_open += from0 - before;
        }
        if (open2 && ps[1].revents != 0)
            open2 = pass(target, victim, &from2) >= 0;
        /* Rank 0's first message is out: the stranger's own frame, as rank
         * 0's, behind it. */
        if (!forged && from0 > 0) {
            tcp_hdr_t d = {.len = 5, .type = TCP_T_DATA, .tag = TAG_MSG};
            (void)send(target, &d, sizeof(d), MSG_NOSIGNAL);
            (void)send(target, "FORGE", 5, MSG_NOSIGNAL);
            forged = true;
        }
    }
    printf("rank 1: relayed %zu bytes from rank 0 (%zu after its first hello message) and %zu "
           "from rank 2\n",
           from0, after_open, from2);
    fflush(stdout);
    close(victim);
    close(target);
    CHECK(forged);
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "new") != 0 && strcmp(argv[1], "wait") != 0)) {
        fprintf(stderr, "usage: tcp_replay new|wait\n");
        return 2;
    }
    const char *mode = argv[1];
    state_t st = {.error_peer = -1};
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    tcp_module_t *mod = (tcp_module_t *)btl_ctx_find_module(ctx, "tcp");
    if (ferry_size(ctx) != 3 || mod == NULL) {
        printf("tcp_replay: SKIP: needs 3 ranks and the tcp transport (FERRY_BTL=self,tcp)\n");
        ferry_finalize(&ctx);
        return 77;
    }
    int me = ferry_rank(ctx);
    CHECK(ferry_am_register(ctx, TAG_MSG, on_msg, &st) == FERRY_OK);
    CHECK(ferry_set_error_cb(ctx, on_error, &st) == FERRY_OK);
    int trap = me == 1 ? publish_trap(ctx) : -1;
    if (me == 2 && strcmp(mode, "wait") == 0) {
        ferry_btl_endpoint_t *ep = tcp_ep_get(mod, 0);
        CHECK(ep != NULL && ep->state == TCP_EP_NEW);
        ep->state = TCP_EP_WAIT;
    }
    CHECK(rt_modex_fence(ctx->modex) == FERRY_OK);

    bool ok = true;
    if (me == 1) {
        stranger(ctx, trap);
        close(trap);
    } else if (me == 0) {
        int rc;
        uint64_t t0 = hp_now_ms();
        while ((rc = ferry_am_send(ctx, 1, TAG_MSG, "hi", 2)) == FERRY_ERR_NO_RESOURCE &&
               hp_now_ms() - t0 < 20000)
            CHECK(ferry_progress(ctx) >= 0);
        while (st.errors == 0 && hp_now_ms() - t0 < 20000)
            CHECK(ferry_progress(ctx) >= 0);
        ok = st.errors == 1 && st.error_peer == 1;
        printf("rank 0: its connection to \"rank 1\" %s\n",
               ok ? "failed, as it must" : "did not fail");
    }
    CHECK(rt_modex_fence(ctx->modex) == FERRY_OK);
    if (me == 2) {
        /* Whatever was coming has come. */
        uint64_t t0 = hp_now_ms();
        while (hp_now_ms() - t0 < 500)
            CHECK(ferry_progress(ctx) >= 0);
        const ferry_btl_endpoint_t *ep = mod->eps[0];
        bool taken = ep != NULL && ep->state == TCP_EP_CONNECTED;
        printf("rank 2: endpoint of rank 0 %s; %d message(s) delivered\n",
               taken ? "CONNECTED (to the stranger)" : "not connected", st.delivered);
        ok = !taken && st.delivered == 0;
        printf("tcp_replay %s: %s\n", mode, ok ? "ok" : "FAILED");
        if (strcmp(mode, "wait") == 0 && !taken)
            mod->eps[0]->state = TCP_EP_NEW;
    }
    fflush(stdout);
    /* Each rank ends with a peer it cannot reach, so that finalize does not
     * wait at a barrier for it: rank 0 has failed rank 1 already; rank 2
     * tries rank 1's (closed) trap; rank 1 tries rank 0, which refuses it. */
    int peer = me == 2 ? 1 : 0;
    if (me != 0) {
        uint64_t t0 = hp_now_ms();
        int rc;
        while ((rc = ferry_am_send(ctx, peer, TAG_MSG, "end", 3)) == FERRY_ERR_NO_RESOURCE &&
               hp_now_ms() - t0 < 20000)
            CHECK(ferry_progress(ctx) >= 0);
        while (rc == FERRY_OK && st.errors == 0 && hp_now_ms() - t0 < 20000)
            CHECK(ferry_progress(ctx) >= 0);
    }
    CHECK(rt_modex_fence(ctx->modex) == FERRY_OK);
    ferry_finalize(&ctx);
    return ok ? 0 : 1;
}
