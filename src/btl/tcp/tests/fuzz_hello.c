/*
 * Fuzz harness: the tcp hello (src/btl/tcp/tcp_hello.c and both sides of it
 * in tcp_endpoint.c), on a module without listeners (fuzz_tcp_fixture.h).
 * Byte 0 picks the mode:
 *   0  check: the input is a hello message, checked against an expectation
 *      from byte 1; whatever passes must have every field as expected
 *   1  MAC: a message and a session from the input, the MAC computed right
 *      over them; it must prove, and no longer prove once any covered byte
 *      (nonce, rank, size, job, address, step, status, MAC) changes
 *   2  listener: an accepted connection (a socketpair) gets an OPEN, then an
 *      ANSWER, from the input, each with its fields and, when the input
 *      says so, the right MAC; the endpoint of the rank it claims starts in
 *      a state from the input. Whatever the listener sends back must be a
 *      well-formed PROVE and VERDICT with the right MACs, and the
 *      connection may be kept only when the ANSWER proved the key
 *   3  connector: an endpoint in the hello gets a PROVE, then a VERDICT,
 *      the same way; it may send its ANSWER only after a PROVE that proved
 *      the key, and be connected only after a VERDICT that did
 * In the structured modes the fields come from the input with the right
 * lengths, so that the fuzzer gets past the first checks to the MAC and
 * the state machine behind it.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "fuzz_tcp_fixture.h"

static int epfd = -1;
static fx_t fx;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    epfd = epoll_create1(EPOLL_CLOEXEC);
    return 0;
}

/* Bytes of the input, as many as asked for, zeros past its end. */
typedef struct src {
    const uint8_t *p;
    size_t n, at;
} src_t;

static void take(src_t *s, void *out, size_t len)
{
    size_t have = s->at < s->n ? s->n - s->at : 0;
    size_t k = have < len ? have : len;
    memcpy(out, s->p + s->at, k);
    memset((uint8_t *)out + k, 0, len - k);
    s->at += len;
}

static uint8_t take8(src_t *s)
{
    uint8_t v;
    take(s, &v, 1);
    return v;
}

static const tcp_addr_entry_t fx_at = {.family = 4, .port = 4000, .addr = {127, 0, 0, 1}};

/* ---- mode 0 ---- */

static void mode_check(src_t *s)
{
    tcp_hello_want_t w = {.step = (uint8_t)(take8(s) % 6), .me = 0, .size = 2,
                          .job = fx.mod->job_hash};
    w.from = (take8(s) & 1) ? -1 : 1;
    tcp_hello_t h;
    take(s, &h, sizeof(h));
    if (tcp_hello_check(&h, &w) != NULL)
        return;
    FX_ABORT_UNLESS(h.magic == TCP_MAGIC && h.version == TCP_VERSION && h.step == w.step);
    FX_ABORT_UNLESS(h.to == 0 && h.size == 2 && h.from == 1 && h.job == w.job);
    FX_ABORT_UNLESS(h.zero == 0 && h.zero2 == 0 && h.status <= TCP_HELLO_REFUSED);
    tcp_session_t sess = {.rank_c = 1, .rank_l = 0, .at = fx_at};
    /* A MAC from the input proves nothing (short of breaking HMAC). */
    (void)tcp_hello_proves(fx.mod->jobkey, fx.mod->job_id, 2, &sess, &h);
}

/* ---- mode 1 ---- */

static void mode_mac(src_t *s)
{
    tcp_session_t sess;
    memset(&sess, 0, sizeof(sess));
    take(s, &sess.rank_c, sizeof(sess.rank_c));
    take(s, &sess.rank_l, sizeof(sess.rank_l));
    take(s, sess.nonce_c, sizeof(sess.nonce_c));
    take(s, sess.nonce_l, sizeof(sess.nonce_l));
    sess.at.family = (take8(s) & 1) ? 6 : 4;
    take(s, &sess.at.port, sizeof(sess.at.port));
    take(s, sess.at.addr, sizeof(sess.at.addr));
    if (sess.at.family == 4)
        memset(sess.at.addr + 4, 0, 12);
    char job[32];
    take(s, job, sizeof(job) - 1);
    job[sizeof(job) - 1] = '\0';
    int32_t size;
    take(s, &size, sizeof(size));
    uint8_t step = (uint8_t)(TCP_HELLO_PROVE + take8(s) % 3);
    uint8_t status = step == TCP_HELLO_VERDICT ? (uint8_t)(take8(s) % 3) : 0;
    tcp_hello_t h;
    tcp_hello_fill(&h, step, sess.rank_l, sess.rank_c, size, tcp_job_hash(job));
    h.status = status;
    const uint8_t *key = fx.mod->jobkey;
    FX_ABORT_UNLESS(tcp_hello_mac(key, job, size, &sess, step, status, h.mac) == FERRY_OK);
    FX_ABORT_UNLESS(tcp_hello_proves(key, job, size, &sess, &h));
    /* Any change to what the MAC covers undoes the proof. */
    uint8_t which = take8(s), pos = take8(s);
    tcp_session_t s2 = sess;
    tcp_hello_t h2 = h;
    char job2[32];
    memcpy(job2, job, sizeof(job));
    int32_t size2 = size;
    switch (which % 10) {
    case 0: s2.nonce_c[pos % TCP_NONCE_LEN] ^= 1; break;
    case 1: s2.nonce_l[pos % TCP_NONCE_LEN] ^= 0x80; break;
    case 2: s2.rank_c ^= 1 << (pos % 31); break;
    case 3: s2.rank_l ^= 1 << (pos % 31); break;
    case 4: size2 ^= 1 << (pos % 31); break;
    case 5: job2[pos % (sizeof(job2) - 1)] ^= 0x20; if (strcmp(job2, job) == 0) return; break;
    case 6: s2.at.port ^= (uint16_t)(1u << (pos % 16)); break;
    case 7: s2.at.addr[pos % (sess.at.family == 4 ? 4 : 16)] ^= 1; break;
    case 8: h2.mac[pos % TCP_MAC_LEN] ^= 4; break;
    default:
        if (step != TCP_HELLO_VERDICT)
            h2.step = step == TCP_HELLO_PROVE ? TCP_HELLO_ANSWER : TCP_HELLO_PROVE;
        else
            h2.status = (uint8_t)((status + 1 + pos % 2) % 3);
        break;
    }
    FX_ABORT_UNLESS(!tcp_hello_proves(key, job2, size2, &s2, &h2));
}

/* ---- modes 2 and 3: the two sides over a socketpair ---- */

/* A message of step from rank `from` to `to`, its fields from the input
 * (one may be made wrong: *spoiled_out), its MAC right when the input says
 * so; *proves_out says whether it is what the other side must take. */
static void make_msg(src_t *s, const tcp_session_t *sess, uint8_t step, int32_t from, int32_t to,
                     tcp_hello_t *h, bool *proves_out, bool *spoiled_out)
{
    uint8_t spoil = take8(s), how = take8(s);
    tcp_hello_fill(h, step, from, to, 2, fx.mod->job_hash);
    if (step == TCP_HELLO_OPEN || step == TCP_HELLO_PROVE)
        take(s, h->nonce, sizeof(h->nonce));
    if (step == TCP_HELLO_VERDICT)
        h->status = (uint8_t)(how % 4);
    tcp_session_t at = *sess;
    if (step == TCP_HELLO_PROVE)
        memcpy(at.nonce_l, h->nonce, sizeof(at.nonce_l));
    bool mac_right = step != TCP_HELLO_OPEN && (how & 0x10) == 0;
    if (mac_right)
        FX_ABORT_UNLESS(tcp_hello_mac(fx.mod->jobkey, fx.mod->job_id, 2, &at, step, h->status,
                                      h->mac) == FERRY_OK);
    else if (step != TCP_HELLO_OPEN)
        take(s, h->mac, sizeof(h->mac));
    /* One field made wrong, or none. */
    tcp_hello_t orig = *h;
    switch (spoil % 12) {
    case 0: h->magic ^= 1; break;
    case 1: h->version++; break;
    case 2: h->step ^= 3; break;
    case 3: h->zero = 1; break;
    case 4: h->from = (int32_t)(how % 4) - 1; break;
    case 5: h->to = (int32_t)(how % 4) - 1; break;
    case 6: h->size = 3; break;
    case 7: h->job ^= 1; break;
    case 8:
        if (step != TCP_HELLO_OPEN && step != TCP_HELLO_PROVE)
            h->nonce[how % TCP_NONCE_LEN] ^= 1; /* must be zero there */
        break;
    default: break;
    }
    *spoiled_out = memcmp(&orig, h, sizeof(orig)) != 0 || h->status > TCP_HELLO_REFUSED;
    *proves_out = (mac_right || step == TCP_HELLO_OPEN) && !*spoiled_out;
}

static bool read_msg(int fd, tcp_hello_t *h)
{
    ssize_t n = recv(fd, h, sizeof(*h), MSG_DONTWAIT);
    return n == (ssize_t)sizeof(*h);
}

static const tcp_ep_state_t states[] = {TCP_EP_NEW,    TCP_EP_CONNECTING, TCP_EP_HELLO,
                                        TCP_EP_WAIT,   TCP_EP_RETRY,      TCP_EP_CONNECTED,
                                        TCP_EP_FAILED, TCP_EP_CLOSED};

static void mode_listener(src_t *s)
{
    int sp[2];
    FX_ABORT_UNLESS(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
    tcp_module_t *mod = fx.mod;
    ferry_btl_endpoint_t *ep = fx.ep;
    uint8_t st = take8(s);
    ep->state = states[st % 8];
    ep->deleted = (st & 0x80) != 0;
    tcp_conn_t *conn = calloc(1, sizeof(*conn));
    FX_ABORT_UNLESS(conn != NULL);
    conn->poll.kind = TCP_POLL_CONN;
    conn->poll.fd = sp[0];
    conn->at = fx_at;
    conn->want = TCP_HELLO_OPEN;
    conn->deadline_ns = UINT64_MAX;
    snprintf(conn->from, sizeof(conn->from), "fuzz");
    util_list_append(&mod->conns, &conn->link);
    bool conn_gone = false;

    tcp_session_t sess = {.rank_c = 1, .rank_l = 0, .at = fx_at};
    tcp_hello_t open, reply;
    bool proves, spoiled;
    make_msg(s, &sess, TCP_HELLO_OPEN, 1, 0, &open, &proves, &spoiled);
    memcpy(sess.nonce_c, open.nonce, sizeof(sess.nonce_c));
    FX_ABORT_UNLESS(send(sp[1], &open, sizeof(open), 0) == (ssize_t)sizeof(open));
    tcp_conn_progress(mod, conn);
    conn_gone = util_list_empty(&mod->conns);
    bool got = read_msg(sp[1], &reply);
    /* A PROVE answers every good OPEN, and nothing answers a bad one. */
    FX_ABORT_UNLESS(got == proves && conn_gone == !proves);
    if (!got)
        goto done;
    /* The listener proves itself first, rightly. */
    tcp_hello_want_t w = {.step = TCP_HELLO_PROVE, .from = 0, .me = 1, .size = 2,
                          .job = mod->job_hash};
    FX_ABORT_UNLESS(tcp_hello_check(&reply, &w) == NULL);
    memcpy(sess.nonce_l, reply.nonce, sizeof(sess.nonce_l));
    FX_ABORT_UNLESS(tcp_hello_proves(mod->jobkey, mod->job_id, 2, &sess, &reply));
    if (conn_gone)
        goto done;
    tcp_hello_t answer;
    make_msg(s, &sess, TCP_HELLO_ANSWER, 1, 0, &answer, &proves, &spoiled);
    FX_ABORT_UNLESS(send(sp[1], &answer, sizeof(answer), 0) == (ssize_t)sizeof(answer));
    tcp_conn_progress(mod, conn);
    conn_gone = util_list_empty(&mod->conns);
    FX_ABORT_UNLESS(conn_gone); /* an ANSWER ends the hello one way or the other */
    bool kept = ep->state == TCP_EP_CONNECTED && ep->poll.fd == sp[0];
    if (read_msg(sp[1], &reply)) {
        FX_ABORT_UNLESS(proves);
        w.step = TCP_HELLO_VERDICT;
        FX_ABORT_UNLESS(tcp_hello_check(&reply, &w) == NULL);
        FX_ABORT_UNLESS(tcp_hello_proves(mod->jobkey, mod->job_id, 2, &sess, &reply));
        FX_ABORT_UNLESS(kept == (reply.status == TCP_HELLO_OK));
    } else {
        FX_ABORT_UNLESS(!kept);
    }
done:
    /* sp[0] went with the connection, or to the endpoint (closed with it at
     * the end). */
    if (!util_list_empty(&mod->conns))
        tcp_conn_close(mod, conn);
    close(sp[1]);
}

static void mode_connector(src_t *s)
{
    int sp[2];
    FX_ABORT_UNLESS(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
    tcp_module_t *mod = fx.mod;
    ferry_btl_endpoint_t *ep = fx.ep;
    ep->poll.fd = sp[0];
    ep->cand[0] = fx_at;
    ep->ncand = 1;
    ep->icand = 0;
    ep->deadline_ns = UINT64_MAX;
    tcp_session_t *sess = &ep->session;
    memset(sess, 0, sizeof(*sess));
    sess->rank_c = 0;
    sess->rank_l = 1;
    sess->at = fx_at;
    take(s, sess->nonce_c, sizeof(sess->nonce_c));
    tcp_hello_fill(&ep->hello_tx, TCP_HELLO_OPEN, 0, 1, 2, mod->job_hash);
    memcpy(ep->hello_tx.nonce, sess->nonce_c, sizeof(sess->nonce_c));
    ep->state = TCP_EP_HELLO;
    ep->hello_want = TCP_HELLO_PROVE;
    ep->hello_sent = ep->hello_got = 0;
    tcp_ep_connect_progress(mod, ep);
    tcp_hello_t msg;
    FX_ABORT_UNLESS(read_msg(sp[1], &msg) &&
                    memcmp(&msg, &ep->hello_tx, sizeof(msg)) == 0); /* the OPEN */
    tcp_session_t mine = *sess;
    tcp_hello_t prove;
    bool proves, spoiled;
    make_msg(s, &mine, TCP_HELLO_PROVE, 1, 0, &prove, &proves, &spoiled);
    memcpy(mine.nonce_l, prove.nonce, sizeof(mine.nonce_l));
    FX_ABORT_UNLESS(send(sp[1], &prove, sizeof(prove), 0) == (ssize_t)sizeof(prove));
    tcp_ep_connect_progress(mod, ep);
    bool answered = read_msg(sp[1], &msg);
    /* Nothing that proves the key leaves before the listener proved it. */
    FX_ABORT_UNLESS(answered == proves);
    if (!answered)
        goto done;
    tcp_hello_want_t w = {.step = TCP_HELLO_ANSWER, .from = 0, .me = 1, .size = 2,
                          .job = mod->job_hash};
    FX_ABORT_UNLESS(tcp_hello_check(&msg, &w) == NULL);
    FX_ABORT_UNLESS(tcp_hello_proves(mod->jobkey, mod->job_id, 2, &mine, &msg));
    tcp_hello_t verdict;
    make_msg(s, &mine, TCP_HELLO_VERDICT, 1, 0, &verdict, &proves, &spoiled);
    FX_ABORT_UNLESS(send(sp[1], &verdict, sizeof(verdict), 0) == (ssize_t)sizeof(verdict));
    tcp_ep_connect_progress(mod, ep);
    FX_ABORT_UNLESS(ep->state != TCP_EP_HELLO);
    if (ep->state == TCP_EP_CONNECTED)
        FX_ABORT_UNLESS(proves && verdict.status == TCP_HELLO_OK);
    if (ep->state == TCP_EP_WAIT)
        FX_ABORT_UNLESS(proves && verdict.status == TCP_HELLO_DUP);
done:
    close(sp[1]);
    /* sp[0] is the endpoint's: closed when it failed, or at the end. */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    src_t s = {.p = data + 1, .n = size - 1};
    fx_init(&fx, epfd);
    switch (data[0] % 4) {
    case 0:
        mode_check(&s);
        break;
    case 1:
        mode_mac(&s);
        break;
    case 2:
        mode_listener(&s);
        break;
    default:
        mode_connector(&s);
        break;
    }
    /* The endpoint is failed and freed however far it got. */
    fx.ep->deleted = false;
    fx_fini(&fx);
    return 0;
}
