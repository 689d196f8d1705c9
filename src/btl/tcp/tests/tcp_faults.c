/*
 * Trust and fault cases of the tcp transport: `tcp_faults MODE`, two ranks
 * under ferryrun with FERRY_BTL=self,tcp. Rank 0 is the ferry process under
 * test; rank 1 plays the stranger or the broken peer.
 *
 * Refused before any frame (rank 0 must log the refusal, answer nothing but
 * its own proof, which holds nothing usable, deliver nothing, and still take
 * rank 1's genuine message afterwards):
 *   nokey     a hello whose ANSWER carries no MAC
 *   badkey    a hello whose ANSWER carries a random MAC
 *   garbage   random bytes instead of a hello
 *   silent    a connection that never says hello (refused after the timeout)
 *   reflect   the listener's own proofs sent back to it: its PROVE's MAC as
 *             the ANSWER, and the MAC it made over a second connection whose
 *             nonce was its own challenge
 *   otherrank an OPEN for rank 1 sent to rank 0, and a hello whose ANSWER
 *             MAC (made with the key) is for another listening rank
 *   wrongjob  an OPEN naming another job, and a hello whose ANSWER MAC (made
 *             with the key) covers another job's id
 * Broken after a good hello (rank 0 must report rank 1 through the error
 * callback, deliver nothing, and go on working):
 *   oversize  an active message longer than the largest send
 *   badtag    an active message on a transport-reserved tag
 *   badanswer a get answer for no request
 *   badtype   an unknown frame type
 * Unreachable peer (rank 0's send must fail within the connect timeout):
 *   refused   rank 1 publishes a port nobody listens on
 *   mute      rank 1 publishes a listener that accepts but never answers
 * The job's key (rank 0 must find it in no value of the launcher's store,
 * ferryrun having given every rank the job secret it is made from):
 *   nokeyinstore
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
#include "hello_peer.h"
#include "rt/auth.h"
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

static void send_legit(ferry_ctx_t *ctx)
{
    int rc;
    while ((rc = ferry_am_send(ctx, 0, TAG_LEGIT, "legit", 5)) == FERRY_ERR_NO_RESOURCE)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(rc == FERRY_OK);
    CHECK(ferry_flush(ctx, 0) == FERRY_OK);
}

/* Frames after a refused hello must go nowhere. */
static void forge_frame(int fd)
{
    tcp_hdr_t d = {.len = 5, .type = TCP_T_DATA, .tag = TAG_LEGIT};
    send(fd, &d, sizeof(d), MSG_NOSIGNAL);
    send(fd, "FORGE", 5, MSG_NOSIGNAL);
}

/* What a stranger knows of the job: its id and size, not its key. */
static hp_job_t stranger_job(ferry_ctx_t *ctx)
{
    hp_job_t j = {.id = rt_modex_job_id(ctx->modex), .size = ferry_size(ctx)};
    j.hash = tcp_job_hash(j.id);
    return j;
}

/* An ANSWER of the session from rank 1 to rank 0 with the given MAC. */
static void send_answer(int fd, const hp_job_t *j, const uint8_t mac[TCP_MAC_LEN])
{
    tcp_hello_t a;
    tcp_hello_fill(&a, TCP_HELLO_ANSWER, 1, 0, j->size, j->hash);
    memcpy(a.mac, mac, TCP_MAC_LEN);
    hp_write(fd, &a, sizeof(a));
}

/* Rank 0 must have closed fd, having sent nothing (more); exits otherwise. */
static void expect_closed(int fd, const char *what)
{
    size_t got = hp_until_closed(fd, 15000, NULL, 0);
    close(fd);
    if (got != 0) {
        fprintf(stderr, "tcp_faults: rank 0 answered %s with %zu bytes\n", what, got);
        exit(1);
    }
}

/* Rank 1: the stranger (or, with the key, an insider lying about whom it
 * talks to) before the hello is through. */
static void attack_hello(ferry_ctx_t *ctx, const char *mode)
{
    tcp_addr_entry_t at = hp_listener_of(ctx, 0);
    hp_job_t j = stranger_job(ctx);
    hp_job_t insider = hp_job(ctx);
    int fd = hp_connect(&at);
    tcp_session_t sess;
    tcp_hello_t prove;
    if (strcmp(mode, "garbage") == 0) {
        unsigned char junk[sizeof(tcp_hello_t)];
        CHECK(getrandom(junk, sizeof(junk), 0) == (ssize_t)sizeof(junk));
        hp_write(fd, junk, sizeof(junk));
    } else if (strcmp(mode, "otherrank") == 0 || strcmp(mode, "wrongjob") == 0) {
        /* Refused at the OPEN: no proof is given for it. */
        hp_job_t other = j;
        if (strcmp(mode, "wrongjob") == 0)
            other.hash = tcp_job_hash("another-job");
        hp_open(fd, &other, 1, strcmp(mode, "otherrank") == 0 ? 1 : 0, &at, &sess);
        forge_frame(fd);
        expect_closed(fd, "an OPEN it should refuse");
        /* An insider's hello whose MAC is for another listener or job. */
        fd = hp_connect(&at);
        hp_open(fd, &insider, 1, 0, &at, &sess);
        CHECK(hp_read(fd, &prove, 10000));
        memcpy(sess.nonce_l, prove.nonce, sizeof(sess.nonce_l));
        tcp_session_t lie = sess;
        const char *job = insider.id;
        if (strcmp(mode, "otherrank") == 0)
            lie.rank_l = 1;
        else
            job = "another-job";
        uint8_t mac[TCP_MAC_LEN];
        CHECK(tcp_hello_mac(insider.key, job, insider.size, &lie, TCP_HELLO_ANSWER, 0, mac) ==
              FERRY_OK);
        send_answer(fd, &insider, mac);
    } else if (strcmp(mode, "reflect") == 0) {
        hp_open(fd, &j, 1, 0, &at, &sess);
        CHECK(hp_read(fd, &prove, 10000));
        /* A second connection whose nonce is the first one's challenge:
         * rank 0's MAC over it, sent back on the first. */
        int fd2 = hp_connect(&at);
        tcp_hello_t h2;
        tcp_hello_fill(&h2, TCP_HELLO_OPEN, 1, 0, j.size, j.hash);
        memcpy(h2.nonce, prove.nonce, sizeof(h2.nonce));
        hp_write(fd2, &h2, sizeof(h2));
        tcp_hello_t prove2;
        CHECK(hp_read(fd2, &prove2, 10000));
        send_answer(fd, &j, prove2.mac);
        forge_frame(fd);
        expect_closed(fd, "its own proof sent back");
        /* And on the second, its own PROVE's MAC as the ANSWER. */
        send_answer(fd2, &j, prove2.mac);
        fd = fd2;
    } else if (strcmp(mode, "silent") != 0) {
        hp_open(fd, &j, 1, 0, &at, &sess);
        CHECK(hp_read(fd, &prove, 10000));
        /* The proof holds nothing usable: not the key. */
        const unsigned char *pb = (const unsigned char *)&prove;
        for (size_t i = 0; i + TCP_KEY_LEN <= sizeof(prove); i++)
            CHECK(memcmp(pb + i, insider.key, TCP_KEY_LEN) != 0);
        uint8_t mac[TCP_MAC_LEN] = {0};
        if (strcmp(mode, "badkey") == 0)
            CHECK(getrandom(mac, sizeof(mac), 0) == (ssize_t)sizeof(mac));
        send_answer(fd, &j, mac);
    }
    if (strcmp(mode, "silent") != 0)
        forge_frame(fd);
    expect_closed(fd, "a stranger");
    send_legit(ctx);
}

/* Rank 1: a good hello, then a bad frame. */
static void attack_frame(ferry_ctx_t *ctx, const char *mode)
{
    tcp_addr_entry_t at = hp_listener_of(ctx, 0);
    hp_job_t j = hp_job(ctx);
    int fd = hp_connect(&at);
    hp_handshake(fd, &j, 1, 0, &at);
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
    hp_write(fd, &d, sizeof(d));
    if (body_len > 0)
        send(fd, body, body_len, MSG_NOSIGNAL);
    hp_until_closed(fd, 15000, NULL, 0);
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
                      strcmp(mode, "garbage") == 0 || strcmp(mode, "silent") == 0 ||
                      strcmp(mode, "reflect") == 0 || strcmp(mode, "otherrank") == 0 ||
                      strcmp(mode, "wrongjob") == 0;
    bool frame_mode = strcmp(mode, "oversize") == 0 || strcmp(mode, "badtag") == 0 ||
                      strcmp(mode, "badanswer") == 0 || strcmp(mode, "badtype") == 0;
    bool unreach_mode = strcmp(mode, "refused") == 0 || strcmp(mode, "mute") == 0;
    bool retry_mode = strcmp(mode, "evicted") == 0;
    bool key_mode = strcmp(mode, "nokeyinstore") == 0;
    if (!hello_mode && !frame_mode && !unreach_mode && !retry_mode && !key_mode) {
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
    if (key_mode) {
        /* Under ferryrun every rank makes the key from the job secret: it
         * is in no value of the launcher's store, which every rank (and, on
         * hydra's port, any process) can read. */
        uint8_t secret[RT_AUTH_KEY_LEN];
        bool have_secret = rt_modex_job_secret(ctx->modex, secret) == FERRY_OK;
        rt_auth_wipe(secret, sizeof(secret));
        void *val = NULL;
        size_t len = 0;
        int grc = rt_modex_get(ctx->modex, 0, "btl.tcp.jobkey", &val, &len);
        free(val);
        if (me == 0)
            printf("rank 0: job secret from the launcher: %s; btl.tcp.jobkey in the store: %s\n",
                   have_secret ? "yes" : "no", grc == FERRY_OK ? "yes" : "no");
        ok = have_secret && grc != FERRY_OK;
        /* And the ranks still connect. */
        int rc2;
        while ((rc2 = ferry_am_send(ctx, 1 - me, TAG_LEGIT, "legit", 5)) == FERRY_ERR_NO_RESOURCE)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(rc2 == FERRY_OK);
        while (st.delivered == 0)
            CHECK(ferry_progress(ctx) >= 0);
        ok = ok && st.errors == 0;
    } else if (retry_mode) {
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
