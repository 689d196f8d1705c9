/*
 * A job peer floods the target with get requests and never reads the
 * answers, while another peer's traffic must keep flowing: `tcp_flood`,
 * three ranks under ferryrun with FERRY_BTL=self,tcp.
 *
 * Rank 0 is the target: it registers a zone and gives both peers its key.
 * Rank 1 connects like any rank, then takes its socket to rank 0 away from
 * ferry and writes get requests through it as fast as rank 0 takes them
 * (16-byte ones, and one of 1 MiB in 256), reading nothing. Rank 2
 * meanwhile ping-pongs active messages with rank 0 and puts and gets into
 * its zone, and tells rank 1 (over a plain socket) when it is done, which
 * ends the flood; rank 1 then reads every answer, so that the stream is
 * framed as its ferry knows it again, and all finish normally.
 *
 * Checked: rank 2 finishes all of its work, every byte right, with no
 * error, while the flood still runs; rank 0's resident memory grows by less
 * than 64 MiB during the flood (the answers it owes rank 1 are bounded:
 * rank 1's socket is not read while it is owed too much); every answer to
 * rank 1 is complete and in order; no rank reports an error.
 *
 * Prints "tcp_flood: ok" from rank 0 on success; exits 1 on a failed check
 * and 77 (skipped) when not run as three ranks over tcp.
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
#include "rkey_layout.h"
#include "btl/tcp/tcp.h"
#include "btl/ctx.h"
#include "rt/modex.h"

#define TAG_ZONE 60
#define TAG_PING 61
#define TAG_PONG 62
#define TAG_DONE 63
#define ZONE ((size_t)8 << 20)
#define BIG ((size_t)1 << 20)
#define PINGS 2048
#define RDMAS 32
#define FLOOD_MAX_MS 60000u
#define RSS_LIMIT_KB (64u * 1024u)

typedef struct zone_msg {
    uint64_t addr;
    ferry_rkey_t rkey;
} zone_msg_t;

typedef struct state {
    ferry_ctx_t *ctx;
    int me;
    bool have_zone;
    zone_msg_t zone;
    int pongs;
    int done;           /* rank 0: ranks 1 and 2 finished */
    int pings;          /* rank 0: pings to answer */
    int errors_rank2;   /* error callbacks */
    int comp_errors;
    int comps;
} state_t;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static void on_zone(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)src, (void)tag;
    CHECK(len == sizeof(zone_msg_t));
    memcpy(&st->zone, data, sizeof(zone_msg_t));
    st->have_zone = true;
}

static void send_msg(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *data, size_t len)
{
    int rc;
    while ((rc = ferry_am_send(ctx, dst, tag, data, len)) == FERRY_ERR_NO_RESOURCE)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(rc == FERRY_OK);
}

static void on_ping(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)tag, (void)data;
    CHECK(src == 2 && len == 8);
    st->pings++; /* answered from the loop: a handler may not progress */
}

static void on_pong(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)tag, (void)data;
    CHECK(src == 0 && len == 8);
    st->pongs++;
}

static void on_done(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)tag, (void)data, (void)len;
    CHECK(src == 1 || src == 2);
    st->done++;
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    state_t *st = arg;
    printf("rank %d: error callback: peer %d, %s: %s\n", ferry_rank(ctx), peer,
           ferry_strerror(status), msg);
    st->errors_rank2++; /* counts every peer: none may fail */
}

static void on_comp(void *arg, int status)
{
    state_t *st = arg;
    st->comps++;
    if (status != FERRY_OK)
        st->comp_errors++;
}

/* The tcp key in a packed remote key. */
static tcp_key_t tcp_key_of(const ferry_rkey_t *rk)
{
    size_t len;
    size_t off = rkey_tcp_offset(rk, &len);
    CHECK(len == sizeof(tcp_key_t));
    tcp_key_t k;
    memcpy(&k, rk->bytes + off, sizeof(k));
    return k;
}

/* ---- rank 1: the flood ---- */

#define FLOOD_CAP 1000000u /* requests at most, so a target that reads them all
                            * (and keeps an answer for each) still fits */
#define BIG_EVERY 256u     /* one 1 MiB get in so many; the rest want 16 bytes */

/* Reads the answers to rank 1's requests as they come, checking that each
 * is whole, in order and good. */
typedef struct answers {
    unsigned char hdr[sizeof(tcp_hdr_t)];
    size_t hgot;
    size_t left;      /* bytes of the current answer's body still to come */
    unsigned char trailer[sizeof(tcp_status_body_t)];
    uint64_t next;    /* cookie of the next answer */
    uint64_t count, bytes;
    unsigned char *sink;
} answers_t;

static void answers_take(answers_t *a, int fd)
{
    ssize_t n;
    do {
        size_t room = a->hgot < sizeof(a->hdr) ? sizeof(a->hdr) - a->hgot
                                                : (a->left < BIG ? a->left : BIG);
        unsigned char *dst = a->hgot < sizeof(a->hdr) ? a->hdr + a->hgot : a->sink;
        n = recv(fd, dst, room, MSG_DONTWAIT);
        CHECK(n != 0 && (n > 0 || errno == EAGAIN || errno == EINTR));
        if (n <= 0)
            return;
        a->bytes += (size_t)n;
        if (a->hgot < sizeof(a->hdr)) {
            a->hgot += (size_t)n;
            if (a->hgot == sizeof(a->hdr)) {
                tcp_hdr_t h;
                memcpy(&h, a->hdr, sizeof(h));
                CHECK(h.type == TCP_T_GET_RESP && h.cookie == a->next && h.len >= 8 &&
                      h.len <= BIG + 8);
                a->left = h.len;
            }
        } else {
            /* The status is the last 8 bytes of the body. */
            for (ssize_t i = 0; i < n; i++) {
                size_t at = a->left - 1 - (size_t)i;
                if (at < sizeof(a->trailer))
                    a->trailer[sizeof(a->trailer) - 1 - at] = a->sink[i];
            }
            a->left -= (size_t)n;
        }
        if (a->hgot == sizeof(a->hdr) && a->left == 0) {
            tcp_status_body_t sb;
            memcpy(&sb, a->trailer, sizeof(sb));
            CHECK(sb.status == FERRY_OK && sb.zero == 0);
            a->hgot = 0;
            a->next++;
            a->count++;
        }
    } while (n > 0);
}

static void flood(state_t *st, int ctl_listener)
{
    tcp_module_t *mod = (tcp_module_t *)btl_ctx_find_module(st->ctx, "tcp");
    ferry_btl_endpoint_t *ep = mod->eps[0];
    CHECK(ep != NULL && ep->state == TCP_EP_CONNECTED);
    while (!util_list_empty(&ep->queue))
        CHECK(ferry_progress(st->ctx) >= 0);
    /* ferry holds no byte of the stream from rank 0 and is not progressed
     * until the stream is framed again. */
    CHECK(ep->rx_mode == TCP_RX_FRAMES && ep->rx_off == ep->rx_len && !ep->rx_trailer);
    int fd = ep->poll.fd;
    tcp_key_t key = tcp_key_of(&st->zone.rkey);
    int ctl = accept(ctl_listener, NULL, NULL);
    CHECK(ctl >= 0);
    const size_t frame = sizeof(tcp_hdr_t) + sizeof(tcp_rdma_body_t);
    unsigned char frames[64 * (sizeof(tcp_hdr_t) + sizeof(tcp_rdma_body_t))];
    size_t flen = 0, foff = 0;
    const uint64_t first = 1ull << 40;
    answers_t ans = {.next = first, .sink = malloc(BIG)};
    CHECK(ans.sink != NULL);
    uint64_t cookie = first, t0 = now_ms(), flood_ms = 0;
    bool stop = false, capped = false;
    for (;;) {
        if (stop && foff % frame == 0) {
            /* Stopped between frames: what was not written is dropped. */
            cookie -= (flen - foff) / frame;
            flen = foff = 0;
        }
        if (foff == flen) {
            if (stop)
                break;
            if (cookie - first >= FLOOD_CAP) {
                capped = stop = true;
                continue;
            }
            flen = foff = 0;
            for (int i = 0; i < 64; i++, cookie++) {
                tcp_hdr_t h = {.len = sizeof(tcp_rdma_body_t), .type = TCP_T_GET_REQ,
                               .cookie = cookie};
                tcp_rdma_body_t b = {.length = cookie % BIG_EVERY == 0 ? BIG : 16, .key = key};
                b.raddr = st->zone.addr + (cookie * 4096) % (ZONE - BIG);
                memcpy(frames + flen, &h, sizeof(h));
                memcpy(frames + flen + sizeof(h), &b, sizeof(b));
                flen += frame;
            }
        }
        /* Once told to stop, answers are read while the frame half written
         * is finished: rank 0 may be waiting for that before it reads on. */
        struct pollfd p[2] = {{.fd = fd, .events = POLLOUT | (stop ? POLLIN : 0)},
                              {.fd = ctl, .events = POLLIN}};
        CHECK(poll(p, 2, 100) >= 0);
        if (!stop && (p[1].revents != 0 || now_ms() - t0 > FLOOD_MAX_MS)) {
            stop = true;
            flood_ms = now_ms() - t0;
        }
        CHECK(!(p[0].revents & (POLLERR | POLLHUP)));
        if (p[0].revents & POLLIN)
            answers_take(&ans, fd);
        if (!(p[0].revents & POLLOUT))
            continue;
        size_t upto = stop ? (foff / frame + 1) * frame : flen;
        ssize_t n = send(fd, frames + foff, upto - foff, MSG_NOSIGNAL | MSG_DONTWAIT);
        CHECK(n >= 0 || errno == EAGAIN || errno == EINTR);
        if (n > 0)
            foff += (size_t)n;
    }
    uint64_t sent = cookie - first;
    printf("rank 1: flooded rank 0 with %llu get requests for %llu ms, reading none of the "
           "answers%s\n",
           (unsigned long long)sent, (unsigned long long)flood_ms,
           capped ? "; stopped at its cap before rank 2 was done" : "");
    fflush(stdout);
    close(ctl);
    uint64_t deadline = now_ms() + 120000u;
    while (ans.count < sent) {
        CHECK(now_ms() < deadline);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        CHECK(poll(&p, 1, 100) >= 0);
        if (p.revents != 0)
            answers_take(&ans, fd);
    }
    printf("rank 1: then read the %llu answers (%llu bytes), all whole and in order\n",
           (unsigned long long)ans.count, (unsigned long long)ans.bytes);
    free(ans.sink);
    send_msg(st->ctx, 0, TAG_DONE, "", 0);
}

/* ---- rank 2: the peer whose traffic must flow ---- */

static void bystander(state_t *st, int ctl_port)
{
    unsigned char *buf = malloc(BIG);
    CHECK(buf != NULL);
    /* Rank 1 floods from the moment this connects until the byte below. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)ctl_port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    sleep_ms(200); /* let the flood build up first */
    uint64_t t0 = now_ms();
    for (int i = 0; i < PINGS; i++) {
        int before = st->pongs;
        uint64_t seq = (uint64_t)i;
        send_msg(st->ctx, 0, TAG_PING, &seq, sizeof(seq));
        while (st->pongs == before)
            CHECK(ferry_progress(st->ctx) >= 0);
        if (i % (PINGS / RDMAS) == 0) {
            int k = i / (PINGS / RDMAS);
            size_t off = (size_t)k * 4096 % (ZONE - BIG);
            CHECK(ferry_get(st->ctx, 0, buf, BIG, NULL, st->zone.addr + off, &st->zone.rkey,
                            on_comp, st) == FERRY_OK);
            CHECK(ferry_flush(st->ctx, 0) == FERRY_OK);
            for (size_t j = 0; j < BIG; j += 4093)
                CHECK(buf[j] == (unsigned char)(off + j));
            memset(buf, 0xab, 65536);
            CHECK(ferry_put(st->ctx, 0, buf, 65536, NULL, st->zone.addr + ZONE - 65536,
                            &st->zone.rkey, on_comp, st) == FERRY_OK);
            CHECK(ferry_flush(st->ctx, 0) == FERRY_OK);
        }
    }
    uint64_t took = now_ms() - t0;
    CHECK(st->comps == 2 * RDMAS && st->comp_errors == 0);
    printf("rank 2: %d ping-pongs, %d gets of 1 MiB and %d puts with rank 0 in %llu ms during "
           "the flood\n",
           PINGS, RDMAS, RDMAS, (unsigned long long)took);
    fflush(stdout);
    /* Ends the flood, which ran all along (rank 1 reports if it ran out). */
    CHECK(send(fd, "x", 1, MSG_NOSIGNAL) == 1);
    close(fd);
    send_msg(st->ctx, 0, TAG_DONE, "", 0);
    free(buf);
}

/* ---- rank 0: the target ---- */

static bool target(state_t *st, unsigned char *zone)
{
    long rss0 = rss_kb(), rss_max = rss0;
    size_t owed_max = 0, owed_bytes_max = 0;
    bool paused = false;
    tcp_module_t *mod = (tcp_module_t *)btl_ctx_find_module(st->ctx, "tcp");
    uint64_t t0 = now_ms(), last = 0;
    while (st->done < 2 && now_ms() - t0 < FLOOD_MAX_MS + 120000u) {
        CHECK(ferry_progress(st->ctx) >= 0);
        for (; st->pings > 0; st->pings--) {
            uint64_t pong = 0;
            send_msg(st->ctx, 2, TAG_PONG, &pong, sizeof(pong));
        }
        ferry_btl_endpoint_t *ep = mod->eps[1];
        if (ep != NULL) {
            if (ep->owed > owed_max)
                owed_max = ep->owed;
            if (ep->owed_bytes > owed_bytes_max)
                owed_bytes_max = ep->owed_bytes;
            paused = paused || ep->rx_paused;
        }
        if (now_ms() - last >= 50) {
            last = now_ms();
            long r = rss_kb();
            if (r > rss_max)
                rss_max = r;
        }
    }
    long grew = rss_max - rss0;
    printf("rank 0: resident memory %ld kB before the flood, at most %ld kB during it (+%ld "
           "kB); owed rank 1 at most %zu answers, %zu bytes of data; rank 1 %s paused\n",
           rss0, rss_max, grew, owed_max, owed_bytes_max, paused ? "was" : "was never");
    bool ok = st->done == 2 && grew < (long)RSS_LIMIT_KB && st->errors_rank2 == 0;
    /* rank 2's put landed */
    ok = ok && zone[ZONE - 1] == 0xab;
    return ok;
}

int main(void)
{
    state_t st;
    memset(&st, 0, sizeof(st));
    CHECK(ferry_init(NULL, &st.ctx) == FERRY_OK);
    if (ferry_size(st.ctx) != 3 || btl_ctx_find_module(st.ctx, "tcp") == NULL) {
        printf("tcp_flood: SKIP: needs 3 ranks and the tcp transport (FERRY_BTL=self,tcp)\n");
        ferry_finalize(&st.ctx);
        return 77;
    }
    st.me = ferry_rank(st.ctx);
    CHECK(ferry_am_register(st.ctx, TAG_ZONE, on_zone, &st) == FERRY_OK);
    CHECK(ferry_am_register(st.ctx, TAG_PING, on_ping, &st) == FERRY_OK);
    CHECK(ferry_am_register(st.ctx, TAG_PONG, on_pong, &st) == FERRY_OK);
    CHECK(ferry_am_register(st.ctx, TAG_DONE, on_done, &st) == FERRY_OK);
    CHECK(ferry_set_error_cb(st.ctx, on_error, &st) == FERRY_OK);
    /* Rank 1's side channel, for rank 2 to end the flood. */
    int ctl_listener = -1;
    if (st.me == 1) {
        ctl_listener = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sin = {.sin_family = AF_INET,
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t sl = sizeof(sin);
        CHECK(ctl_listener >= 0 && bind(ctl_listener, (struct sockaddr *)&sin, sizeof(sin)) == 0);
        CHECK(listen(ctl_listener, 4) == 0);
        CHECK(getsockname(ctl_listener, (struct sockaddr *)&sin, &sl) == 0);
        int port = ntohs(sin.sin_port);
        CHECK(rt_modex_put(st.ctx->modex, "test.flood.ctl", &port, sizeof(port)) == FERRY_OK);
    }
    CHECK(rt_modex_commit(st.ctx->modex) == FERRY_OK);
    CHECK(ferry_barrier(st.ctx) == FERRY_OK);

    unsigned char *zone = NULL;
    ferry_mem_t *mem = NULL;
    if (st.me == 0) {
        zone = malloc(ZONE);
        CHECK(zone != NULL);
        for (size_t i = 0; i < ZONE; i++)
            zone[i] = (unsigned char)i;
        CHECK(ferry_mem_register(st.ctx, zone, ZONE,
                                 FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE,
                                 &mem) == FERRY_OK);
        zone_msg_t z = {.addr = (uint64_t)(uintptr_t)zone};
        CHECK(ferry_mem_rkey(mem, &z.rkey) == FERRY_OK);
        send_msg(st.ctx, 1, TAG_ZONE, &z, sizeof(z));
        send_msg(st.ctx, 2, TAG_ZONE, &z, sizeof(z));
    } else {
        while (!st.have_zone)
            CHECK(ferry_progress(st.ctx) >= 0);
    }
    /* Every pair connected, every zone known. */
    CHECK(ferry_barrier(st.ctx) == FERRY_OK);

    bool ok = true;
    if (st.me == 0) {
        ok = target(&st, zone);
        printf("tcp_flood: %s\n", ok ? "ok" : "FAILED");
    } else if (st.me == 1) {
        flood(&st, ctl_listener);
        close(ctl_listener);
    } else {
        void *val = NULL;
        size_t len = 0;
        CHECK(rt_modex_get(st.ctx->modex, 1, "test.flood.ctl", &val, &len) == FERRY_OK);
        CHECK(len == sizeof(int));
        int port;
        memcpy(&port, val, sizeof(port));
        free(val);
        bystander(&st, port);
    }
    fflush(stdout);
    /* Rank 0 answered everything before it got here; deregistering does
     * not wait for anything. */
    if (mem != NULL)
        CHECK(ferry_mem_deregister(st.ctx, mem) == FERRY_OK);
    free(zone);
    CHECK(rt_modex_fence(st.ctx->modex) == FERRY_OK);
    CHECK(ferry_finalize(&st.ctx) == FERRY_OK);
    return ok ? 0 : 1;
}
