/*
 * Endpoints: choosing a peer's address, the non-blocking connect and its
 * deadline, the hello exchange on both sides, simultaneous connects, and
 * failure or clean close of a peer.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "btl/tcp/tcp.h"
#include "rt/modex.h"

static const rt_log_t *logger(tcp_module_t *mod)
{
    return &mod->super.ctx->log;
}

ferry_btl_endpoint_t *tcp_ep_get(tcp_module_t *mod, int rank)
{
    if (rank < 0 || rank >= mod->nranks)
        return NULL;
    if (mod->eps[rank] != NULL)
        return mod->eps[rank];
    ferry_btl_endpoint_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return NULL;
    ep->poll.kind = TCP_POLL_EP;
    ep->poll.fd = -1;
    ep->mod = mod;
    ep->rank = rank;
    ep->peer_module = -1; /* known once its address is read, or it connects */
    ep->state = TCP_EP_NEW;
    util_list_init(&ep->queue);
    util_list_init(&ep->rdma_wait);
    mod->eps[rank] = ep;
    return ep;
}

static void ep_close_socket(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (ep->poll.fd >= 0) {
        if (ep->in_epoll)
            epoll_ctl(mod->epfd, EPOLL_CTL_DEL, ep->poll.fd, NULL);
        close(ep->poll.fd);
    }
    ep->poll.fd = -1;
    ep->in_epoll = false;
    ep->events = 0;
}

static void connecting_remove(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (ep->connecting_listed) {
        util_list_remove(&mod->connecting, &ep->connecting_link);
        ep->connecting_listed = false;
    }
}

void tcp_ep_free(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    ep_close_socket(mod, ep);
    connecting_remove(mod, ep);
    btl_amo_ep_fini(&mod->amo, &ep->amo);
    free(ep->rx);
    free(ep);
}

int tcp_ep_set_events(tcp_module_t *mod, ferry_btl_endpoint_t *ep, uint32_t events)
{
    if (ep->in_epoll && ep->events == events)
        return FERRY_OK;
    struct epoll_event ev = {.events = events, .data.ptr = &ep->poll};
    if (epoll_ctl(mod->epfd, ep->in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, ep->poll.fd, &ev) != 0)
        return rt_log_errno(logger(mod), "tcp: epoll_ctl", errno);
    ep->in_epoll = true;
    ep->events = events;
    return FERRY_OK;
}

void tcp_ep_fail(tcp_module_t *mod, ferry_btl_endpoint_t *ep, int status, const char *fmt, ...)
{
    if (ep->state == TCP_EP_FAILED || ep->state == TCP_EP_CLOSED)
        return;
    ep_close_socket(mod, ep);
    connecting_remove(mod, ep);
    tcp_hot_remove(mod, ep);
    ep->state = TCP_EP_FAILED;
    tcp_fail_pending(mod, ep, FERRY_ERR_UNREACH);
    if (mod->finalizing)
        return;
    char msg[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    rt_log(logger(mod), RT_LOG_DEBUG, "tcp: rank %d failed: %s", ep->rank, msg);
    /* The report waits in the module (btl/base.c) for the next progress:
     * never from inside the call that saw the failure. Until then the
     * endpoint takes work, which fails with it (tcp_ep_report_pending). */
    btl_base_report_error(&mod->super, status, ep->rank, "rank %d: %s", ep->rank, msg);
    ep->report_seq = ++mod->report_seq;
}

void tcp_ep_peer_closed(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    rt_log(logger(mod), RT_LOG_DEBUG, "tcp: rank %d finalized and closed its connection",
           ep->rank);
    ep_close_socket(mod, ep);
    connecting_remove(mod, ep);
    tcp_hot_remove(mod, ep);
    ep->state = TCP_EP_CLOSED;
    tcp_fail_pending(mod, ep, FERRY_ERR_UNREACH);
}

/* The job and its key. With a secret from the launcher (ferryrun) the key
 * is made from it and never published; otherwise rank 0's key comes
 * through the launcher's key-value store, whose channel the launcher
 * (hydra, Slurm, mpirun) keeps to the job. */
int tcp_load_jobkey(tcp_module_t *mod)
{
    if (mod->have_jobkey)
        return FERRY_OK;
    rt_modex_t *mx = mod->super.ctx->modex;
    mod->job_id = rt_modex_job_id(mx);
    mod->job_hash = tcp_job_hash(mod->job_id);
    uint8_t secret[TCP_KEY_LEN];
    int rc = rt_modex_job_secret(mx, secret);
    if (rc == FERRY_OK) {
        rc = tcp_jobkey_derive(secret, mod->jobkey);
        rt_auth_wipe(secret, sizeof(secret));
        if (rc != FERRY_OK) {
            rt_log(logger(mod), RT_LOG_ERROR, "tcp: cannot make the job key: %s",
                   ferry_strerror(rc));
            return rc;
        }
        mod->have_jobkey = true;
        return FERRY_OK;
    }
    void *val = NULL;
    size_t len = 0;
    rc = rt_modex_get(mx, 0, "btl.tcp.jobkey", &val, &len);
    if (rc != FERRY_OK) {
        rt_log(logger(mod), RT_LOG_ERROR, "tcp: the job key of rank 0 is unavailable: %s",
               ferry_strerror(rc));
        return FERRY_ERR_UNREACH;
    }
    if (len != TCP_KEY_LEN) {
        rt_auth_wipe(val, len);
        free(val);
        rt_log(logger(mod), RT_LOG_ERROR, "tcp: rank 0 published a job key of %zu bytes", len);
        return FERRY_ERR_PROTO;
    }
    memcpy(mod->jobkey, val, TCP_KEY_LEN);
    rt_auth_wipe(val, len);
    free(val);
    mod->have_jobkey = true;
    return FERRY_OK;
}

int tcp_jobkey_publish(tcp_module_t *mod)
{
    ferry_ctx_t *ctx = mod->super.ctx;
    uint8_t secret[TCP_KEY_LEN];
    if (rt_modex_job_secret(ctx->modex, secret) == FERRY_OK) {
        rt_auth_wipe(secret, sizeof(secret));
        return FERRY_OK; /* every rank makes the key from the secret */
    }
    if (ctx->rank != 0)
        return FERRY_OK;
    int rc = rt_auth_random(mod->jobkey, TCP_KEY_LEN);
    if (rc != FERRY_OK) {
        rt_log(logger(mod), RT_LOG_ERROR, "tcp: no random bytes for the job key");
        return rc;
    }
    mod->job_id = rt_modex_job_id(ctx->modex);
    mod->job_hash = tcp_job_hash(mod->job_id);
    mod->have_jobkey = true;
    return rt_modex_put(ctx->modex, "btl.tcp.jobkey", mod->jobkey, TCP_KEY_LEN);
}

/* Refusals and evictions are caused from outside: a flood of strangers
 * must not flood the log (rt_log_limited counts what it holds back). */
static void log_refusal(tcp_module_t *mod, bool evicted, const char *from, const char *why)
{
    if (mod->refuse_rl.burst == 0)
        rt_ratelimit_init(&mod->refuse_rl, RT_RATELIMIT_BURST, RT_RATELIMIT_INTERVAL_MS);
    if (evicted)
        rt_log_limited(logger(mod), &mod->refuse_rl, RT_LOG_WARN,
                       "tcp: closed the connection from %s, the oldest without a hello: %s",
                       from, why);
    else
        rt_log_limited(logger(mod), &mod->refuse_rl, RT_LOG_WARN,
                       "tcp: refused a connection from %s: %s", from, why);
}

void tcp_set_bufs(tcp_module_t *mod, int fd)
{
    /* Setting either size turns the kernel's autotuning of it off, and the
     * kernel caps it at net.core.wmem_max / rmem_max; 0 keeps autotuning. */
    if (mod->p.sndbuf > 0) {
        int v = (int)mod->p.sndbuf;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    }
    if (mod->p.rcvbuf > 0) {
        int v = (int)mod->p.rcvbuf;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    }
}

static void set_sockopts(tcp_module_t *mod, int fd)
{
    int one = 1;
    tcp_set_bufs(mod, fd);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    int idle = (int)mod->p.keepalive_time, intvl = (int)mod->p.keepalive_intvl,
        cnt = (int)mod->p.keepalive_probes;
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    /* Data the peer leaves unacknowledged this long (a cut link, a host
     * gone) fails the socket; the kernel would retransmit for many minutes.
     * With keepalive on, it also bounds how long the probes may go
     * unanswered. 0 keeps the kernel's behaviour. */
    if (mod->p.user_timeout_ms > 0) {
        unsigned int ut = (unsigned int)mod->p.user_timeout_ms;
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
    }
}

/* How good a peer's address is from here; < 0: never use it. A module of
 * one address (FERRY_TCP_MODULES=per-interface) uses only the peer's
 * addresses on its subnet, or loopback to loopback on one host
 * (tcp_addr_reaches, the rule the pairing is made by). */
static int addr_score(tcp_module_t *mod, const tcp_addr_entry_t *e, bool same_host)
{
    if (mod->p.per_interface) {
        if (mod->nlocal < 1 || !tcp_addr_reaches(&mod->local[0], e, same_host))
            return -1;
        return tcp_addr_is_loopback(e) ? 400 : 300;
    }
    if (tcp_addr_is_loopback(e))
        return same_host ? 400 : -1;
    int score = 100;
    for (int i = 0; i < mod->nlocal; i++) {
        const tcp_addr_entry_t *l = &mod->local[i];
        if (l->family != e->family || tcp_addr_is_loopback(l))
            continue;
        if (score < 200)
            score = 200;
        if (tcp_addr_same_subnet(l, e, l->prefix < e->prefix ? l->prefix : e->prefix))
            score = 300;
    }
    return score + (e->family == 4 ? 10 : 0);
}

int tcp_addr_decode(const void *val, size_t len, tcp_addr_blob_t *blob)
{
    size_t head = offsetof(tcp_addr_blob_t, entry);
    if (val == NULL || len < head || len > sizeof(*blob))
        return FERRY_ERR_PROTO;
    memset(blob, 0, sizeof(*blob));
    memcpy(blob, val, len);
    if (blob->magic != (uint32_t)TCP_MAGIC || blob->version != TCP_VERSION ||
        blob->count > TCP_MAX_ADDRS || len != head + blob->count * sizeof(tcp_addr_entry_t))
        return FERRY_ERR_PROTO;
    return FERRY_OK;
}

int tcp_ep_load_candidates(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    ep->ncand = 0;
    int peer_module = tcp_pair_partner(mod, ep->rank);
    if (peer_module < 0)
        return FERRY_ERR_UNREACH;
    ep->peer_module = peer_module;
    char key[TCP_MODEX_KEY_LEN];
    tcp_modex_key(peer_module, key);
    void *val = NULL;
    size_t len = 0;
    int rc = rt_modex_get(mod->super.ctx->modex, ep->rank, key, &val, &len);
    if (rc != FERRY_OK)
        return FERRY_ERR_UNREACH;
    tcp_addr_blob_t blob;
    rc = tcp_addr_decode(val, len, &blob);
    free(val);
    if (rc != FERRY_OK) {
        rt_log(logger(mod), RT_LOG_ERROR, "tcp: rank %d published a malformed address (%s)",
               ep->rank, key);
        return rc;
    }
    bool same_host = mod->same_host != NULL && mod->same_host[ep->rank];
    int score[TCP_MAX_ADDRS];
    ep->ncand = 0;
    for (int i = 0; i < blob.count; i++) {
        const tcp_addr_entry_t *e = &blob.entry[i];
        if (!tcp_addr_usable(e))
            continue;
        int s = addr_score(mod, e, same_host);
        if (s < 0)
            continue;
        /* Insertion in score order keeps the peer's order among equals. */
        int j = ep->ncand;
        while (j > 0 && score[j - 1] < s) {
            score[j] = score[j - 1];
            ep->cand[j] = ep->cand[j - 1];
            j--;
        }
        score[j] = s;
        ep->cand[j] = *e;
        ep->ncand++;
    }
    return ep->ncand > 0 ? FERRY_OK : FERRY_ERR_UNREACH;
}

static void addr_text(const tcp_addr_entry_t *e, char *buf, size_t size)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    inet_ntop(e->family == 4 ? AF_INET : AF_INET6, e->addr, ip, sizeof(ip));
    snprintf(buf, size, e->family == 4 ? "%s:%u" : "[%s]:%u", ip, (unsigned)e->port);
}

static socklen_t to_sockaddr(const tcp_addr_entry_t *e, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (e->family == 4) {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;
        sin->sin_family = AF_INET;
        sin->sin_port = htons(e->port);
        memcpy(&sin->sin_addr, e->addr, 4);
        return sizeof(*sin);
    }
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(e->port);
    memcpy(&sin6->sin6_addr, e->addr, 16);
    return sizeof(*sin6);
}

/* How long to wait before connecting again: 10 ms, doubling with each
 * retry up to 640 ms, and up to half as much again at random, so that
 * ranks turned away together do not come back together. */
static uint64_t retry_delay_ns(const ferry_btl_endpoint_t *ep, uint64_t now)
{
    unsigned shift = ep->retries < 6 ? ep->retries : 6;
    uint64_t delay = (10u * 1000u * 1000u) << shift;
    return delay + (now ^ (uint64_t)ep->rank * 0x9e3779b97f4a7c15ull) % (delay / 2 + 1);
}

/* Every address has been tried. An address that closed our connection
 * before the hello completed belongs to a peer that had no room for it
 * (strangers may hold its slots): the addresses are tried again after a
 * while, until the deadline. Returns whether a retry was scheduled. */
static bool schedule_retry(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (!ep->retry_wanted)
        return false;
    uint64_t now = rt_now_ns();
    uint64_t delay = retry_delay_ns(ep, now);
    if (now + delay >= ep->deadline_ns)
        return false;
    ep->retry_wanted = false;
    ep->retries++;
    ep->state = TCP_EP_RETRY;
    ep->retry_at_ns = now + delay;
    rt_log(logger(mod), RT_LOG_DEBUG,
           "tcp: rank %d closed our connection before the hello completed; connecting again in "
           "%llu ms (retry %u)",
           ep->rank, (unsigned long long)(delay / 1000000u), ep->retries);
    return true;
}

/* Starts a connect to the next candidate address; when none is left, waits
 * to try them all again (schedule_retry) or fails the endpoint. */
static int try_next(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const char *why)
{
    ep_close_socket(mod, ep);
    while (ep->icand < ep->ncand) {
        const tcp_addr_entry_t *e = &ep->cand[ep->icand];
        char text[80];
        addr_text(e, text, sizeof(text));
        struct sockaddr_storage ss;
        socklen_t sl = to_sockaddr(e, &ss);
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            int err = errno;
            tcp_ep_fail(mod, ep, FERRY_ERR_UNREACH, "socket: %s", strerror(err));
            return rt_status_from_errno(err);
        }
        set_sockopts(mod, fd);
        ep->poll.fd = fd;
        if (connect(fd, (struct sockaddr *)&ss, sl) == 0 || errno == EINPROGRESS) {
            rt_log(logger(mod), RT_LOG_DEBUG,
                   "tcp: module %d connecting to rank %d at %s (its module %d)", mod->index,
                   ep->rank, text, ep->peer_module);
            ep->state = TCP_EP_CONNECTING;
            ep->hello_sent = ep->hello_got = 0;
            return tcp_ep_set_events(mod, ep, EPOLLOUT);
        }
        rt_log(logger(mod), RT_LOG_DEBUG, "tcp: connect to rank %d at %s: %s", ep->rank, text,
               strerror(errno));
        why = strerror(errno);
        ep_close_socket(mod, ep);
        ep->icand++;
    }
    if (schedule_retry(mod, ep))
        return FERRY_OK;
    tcp_ep_fail(mod, ep, FERRY_ERR_UNREACH, "no address of rank %d answered (last: %s)",
                ep->rank, why != NULL ? why : "none");
    return FERRY_ERR_UNREACH;
}

/* A connection the peer closed or reset during the hello. */
static bool closed_by_peer(ssize_t n, int err)
{
    return n == 0 || err == ECONNRESET || err == EPIPE;
}

int tcp_ep_connect(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (ep->state != TCP_EP_NEW)
        return ep->state == TCP_EP_FAILED || ep->state == TCP_EP_CLOSED ? FERRY_ERR_UNREACH
                                                                         : FERRY_OK;
    int rc = tcp_load_jobkey(mod);
    if (rc == FERRY_OK)
        rc = tcp_ep_load_candidates(mod, ep);
    if (rc != FERRY_OK) {
        tcp_ep_fail(mod, ep, FERRY_ERR_UNREACH, "rank %d has no usable tcp address",
                    ep->rank);
        return FERRY_ERR_UNREACH;
    }
    ep->icand = 0;
    ep->retries = 0;
    ep->retry_wanted = false;
    ep->deadline_ns = rt_now_ns() + (uint64_t)mod->p.connect_timeout_ms * 1000000u;
    if (!ep->connecting_listed) {
        util_list_append(&mod->connecting, &ep->connecting_link);
        ep->connecting_listed = true;
    }
    rc = try_next(mod, ep, NULL);
    return rc == FERRY_OK ? FERRY_OK : FERRY_ERR_UNREACH;
}

/* The endpoint has a working, authenticated socket. */
static int ep_established(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (ep->rx == NULL) {
        /* Two small frames at least; a large one grows the buffer when it
         * comes (tcp_io.c, frames_want). */
        size_t small = 2 * (sizeof(tcp_hdr_t) + TCP_BIG_FRAME) + TCP_LOOKAHEAD;
        ep->rx_cap = mod->p.rx_buffer > small ? mod->p.rx_buffer : small;
        ep->rx = malloc(ep->rx_cap);
        if (ep->rx == NULL) {
            tcp_ep_fail(mod, ep, FERRY_ERR_NO_MEMORY, "out of memory for the receive buffer");
            return FERRY_ERR_NO_MEMORY;
        }
    }
    ep->rx_len = ep->rx_off = 0;
    ep->rx_mode = TCP_RX_FRAMES;
    ep->state = TCP_EP_CONNECTED;
    tcp_stall_reset(ep);
    connecting_remove(mod, ep);
    int rc = tcp_ep_set_events(mod, ep, EPOLLIN);
    if (rc != FERRY_OK) {
        tcp_ep_fail(mod, ep, rc, "cannot poll the connection");
        return rc;
    }
    tcp_hot_add(mod, ep);
    rt_log(logger(mod), RT_LOG_DEBUG, "tcp: connected to rank %d", ep->rank);
    tcp_push(mod, ep);
    return FERRY_OK;
}

/* ---- the connecting side ---- */

/* The hello from our side: OPEN out, PROVE in and checked, ANSWER out,
 * VERDICT in. Nothing of ours that proves the key leaves before the
 * listener has proven it. */
static void hello_start(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    int me = mod->super.ctx->rank;
    tcp_session_t *s = &ep->session;
    memset(s, 0, sizeof(*s));
    s->rank_c = me;
    s->rank_l = ep->rank;
    s->at.family = ep->cand[ep->icand].family;
    s->at.port = ep->cand[ep->icand].port;
    memcpy(s->at.addr, ep->cand[ep->icand].addr, sizeof(s->at.addr));
    rt_auth_random(s->nonce_c, sizeof(s->nonce_c));
    tcp_hello_fill(&ep->hello_tx, TCP_HELLO_OPEN, me, ep->rank, mod->nranks, mod->job_hash);
    memcpy(ep->hello_tx.nonce, s->nonce_c, sizeof(s->nonce_c));
    ep->state = TCP_EP_HELLO;
    ep->hello_want = TCP_HELLO_PROVE;
    ep->hello_sent = ep->hello_got = 0;
}

/* This address failed us: the next one, or a retry, or the end. */
static void hello_next(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const char *why,
                       bool closed)
{
    ep->retry_wanted |= closed;
    ep->icand++;
    try_next(mod, ep, why);
}

/* A whole message from the listener is in hello_rx. */
static void hello_answered(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    const tcp_hello_t *h = &ep->hello_rx;
    tcp_hello_want_t want = {.step = ep->hello_want,
                             .from = ep->rank,
                             .me = mod->super.ctx->rank,
                             .size = mod->nranks,
                             .job = mod->job_hash};
    const char *bad = tcp_hello_check(h, &want);
    if (bad == NULL && h->step == TCP_HELLO_PROVE)
        memcpy(ep->session.nonce_l, h->nonce, sizeof(h->nonce));
    if (bad == NULL &&
        !tcp_hello_proves(mod->jobkey, mod->job_id, mod->nranks, &ep->session, h))
        bad = "no proof of the job's key";
    if (bad != NULL) {
        char text[80];
        addr_text(&ep->cand[ep->icand], text, sizeof(text));
        rt_log(logger(mod), RT_LOG_WARN, "tcp: the listener at %s, rank %d's address, sent %s",
               text, ep->rank, bad);
        hello_next(mod, ep, bad, false);
        return;
    }
    ep->hello_got = 0;
    if (h->step == TCP_HELLO_PROVE) {
        int me = mod->super.ctx->rank;
        tcp_hello_fill(&ep->hello_tx, TCP_HELLO_ANSWER, me, ep->rank, mod->nranks,
                       mod->job_hash);
        if (tcp_hello_mac(mod->jobkey, mod->job_id, mod->nranks, &ep->session,
                          TCP_HELLO_ANSWER, 0, ep->hello_tx.mac) != FERRY_OK) {
            tcp_ep_fail(mod, ep, FERRY_ERR_UNREACH, "cannot compute the hello's MAC");
            return;
        }
        ep->hello_sent = 0;
        ep->hello_want = TCP_HELLO_VERDICT;
        return;
    }
    switch (h->status) {
    case TCP_HELLO_OK:
        ep_established(mod, ep);
        break;
    case TCP_HELLO_DUP:
        /* The peer keeps the connection it opened to us; it will arrive
         * before the deadline or the peer is reported. */
        ep_close_socket(mod, ep);
        ep->state = TCP_EP_WAIT;
        break;
    default:
        tcp_ep_fail(mod, ep, FERRY_ERR_UNREACH,
                    "rank %d refused the connection: it saw this rank fail or close before, "
                    "or its module %d pairs with none of ours",
                    ep->rank, ep->peer_module);
        break;
    }
}

int tcp_ep_connect_progress(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (ep->state == TCP_EP_CONNECTING) {
        int err = 0;
        socklen_t sl = sizeof(err);
        if (getsockopt(ep->poll.fd, SOL_SOCKET, SO_ERROR, &err, &sl) != 0)
            err = errno;
        if (err == EINPROGRESS || err == EALREADY)
            return 0;
        if (err != 0) {
            hello_next(mod, ep, strerror(err), false);
            return 1;
        }
        hello_start(mod, ep);
    }
    int n = 0;
    while (ep->state == TCP_EP_HELLO) {
        if (ep->hello_sent < sizeof(ep->hello_tx)) {
            ssize_t w = send(ep->poll.fd, (char *)&ep->hello_tx + ep->hello_sent,
                             sizeof(ep->hello_tx) - ep->hello_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                int err = errno;
                hello_next(mod, ep, strerror(err), closed_by_peer(w, err));
                return 1;
            }
            if (w > 0)
                ep->hello_sent += (size_t)w;
            if (ep->hello_sent < sizeof(ep->hello_tx)) {
                tcp_ep_set_events(mod, ep, EPOLLOUT);
                return n;
            }
            tcp_ep_set_events(mod, ep, EPOLLIN);
        }
        ssize_t r = recv(ep->poll.fd, (char *)&ep->hello_rx + ep->hello_got,
                         sizeof(ep->hello_rx) - ep->hello_got, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            int err = r < 0 ? errno : 0;
            hello_next(mod, ep, r == 0 ? "closed during the hello" : strerror(err),
                       closed_by_peer(r, err));
            return 1;
        }
        if (r < 0)
            return n;
        ep->hello_got += (size_t)r;
        if (ep->hello_got < sizeof(ep->hello_rx))
            return n;
        hello_answered(mod, ep);
        n++;
    }
    return n;
}

int tcp_check_deadlines(tcp_module_t *mod)
{
    if (util_list_empty(&mod->connecting) && util_list_empty(&mod->conns))
        return 0;
    uint64_t now = rt_now_ns();
    int n = 0;
    util_list_item_t *it = util_list_first(&mod->connecting);
    while (it != NULL) {
        ferry_btl_endpoint_t *ep = UTIL_CONTAINER_OF(it, ferry_btl_endpoint_t, connecting_link);
        it = util_list_next(&mod->connecting, it);
        if (ep->state == TCP_EP_RETRY && now >= ep->retry_at_ns) {
            ep->icand = 0;
            try_next(mod, ep, NULL);
            n++;
        } else if (ep->state == TCP_EP_CONNECTING || ep->state == TCP_EP_HELLO) {
            n += tcp_ep_connect_progress(mod, ep);
        }
        if (ep->connecting_listed && now > ep->deadline_ns) {
            tcp_ep_fail(mod, ep, FERRY_ERR_UNREACH,
                        "no connection to rank %d within %lld ms (FERRY_TCP_CONNECT_TIMEOUT)",
                        ep->rank, mod->p.connect_timeout_ms);
            n++;
        }
    }
    it = util_list_first(&mod->conns);
    while (it != NULL) {
        tcp_conn_t *conn = UTIL_CONTAINER_OF(it, tcp_conn_t, link);
        it = util_list_next(&mod->conns, it);
        if (now > conn->deadline_ns) {
            char why[96];
            snprintf(why, sizeof(why), "no hello within %lld ms (FERRY_TCP_CONNECT_TIMEOUT)",
                     mod->p.connect_timeout_ms);
            log_refusal(mod, false, conn->from, why);
            tcp_conn_close(mod, conn);
            n++;
        }
    }
    return n;
}

/* ---- the accepting side ---- */

void tcp_conn_close(tcp_module_t *mod, tcp_conn_t *conn)
{
    if (conn->poll.fd >= 0) {
        epoll_ctl(mod->epfd, EPOLL_CTL_DEL, conn->poll.fd, NULL);
        close(conn->poll.fd);
    }
    util_list_remove(&mod->conns, &conn->link);
    free(conn);
}

/* Closes a connection other than the one whose event is being handled: an
 * event for it may still wait in the batch epoll returned, so it is freed
 * only once the batch is done (tcp_conn_reap); until then its fd is -1. */
static void conn_evict(tcp_module_t *mod, tcp_conn_t *conn)
{
    epoll_ctl(mod->epfd, EPOLL_CTL_DEL, conn->poll.fd, NULL);
    close(conn->poll.fd);
    conn->poll.fd = -1;
    util_list_remove(&mod->conns, &conn->link);
    util_list_append(&mod->evicted_conns, &conn->link);
}

void tcp_conn_reap(tcp_module_t *mod)
{
    util_list_item_t *it;
    while ((it = util_list_pop_front(&mod->evicted_conns)) != NULL)
        free(UTIL_CONTAINER_OF(it, tcp_conn_t, link));
}

static bool same_addr(const tcp_addr_entry_t *a, const tcp_addr_entry_t *b)
{
    return a->family == b->family && memcmp(a->addr, b->addr, a->family == 4 ? 4 : 16) == 0;
}

/* Makes room for one more connection from peer: when that address already
 * has FERRY_TCP_PENDING_PER_ADDR connections waiting for their hello, its
 * oldest is closed; when all have FERRY_TCP_PENDING_MAX, the oldest of
 * all. The newest stays, so a stranger holding slots cannot keep a genuine
 * rank out: the rank's connection is the newest when it comes (and a rank
 * whose connection is closed before its hello completes tries again). */
static void make_room(tcp_module_t *mod, const tcp_addr_entry_t *peer)
{
    tcp_conn_t *oldest_here = NULL;
    size_t here = 0;
    for (util_list_item_t *it = util_list_first(&mod->conns); it != NULL;
         it = util_list_next(&mod->conns, it)) {
        tcp_conn_t *c = UTIL_CONTAINER_OF(it, tcp_conn_t, link);
        if (same_addr(&c->peer, peer) && here++ == 0)
            oldest_here = c;
    }
    tcp_conn_t *victim = NULL;
    const char *why = NULL;
    if (here >= mod->p.pending_per_addr) {
        victim = oldest_here;
        why = "its address has the most connections waiting for a hello "
              "(FERRY_TCP_PENDING_PER_ADDR)";
    } else if (util_list_len(&mod->conns) >= mod->p.pending_max) {
        victim = UTIL_CONTAINER_OF(util_list_first(&mod->conns), tcp_conn_t, link);
        why = "the most connections wait for a hello (FERRY_TCP_PENDING_MAX)";
    }
    if (victim == NULL)
        return;
    mod->evicted++;
    log_refusal(mod, true, victim->from, why);
    conn_evict(mod, victim);
}

int tcp_accept(tcp_module_t *mod, tcp_listener_t *l)
{
    int n = 0;
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(l->poll.fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                errno != ECONNABORTED)
                rt_log(logger(mod), RT_LOG_WARN, "tcp: accept: %s", strerror(errno));
            return n;
        }
        tcp_addr_entry_t peer = {0};
        unsigned port = 0;
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
            peer.family = 4;
            memcpy(peer.addr, &sin->sin_addr, 4);
            port = ntohs(sin->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
            peer.family = 6;
            memcpy(peer.addr, &sin6->sin6_addr, 16);
            port = ntohs(sin6->sin6_port);
        }
        make_room(mod, &peer);
        tcp_conn_t *conn = calloc(1, sizeof(*conn));
        if (conn == NULL) {
            close(fd);
            return n;
        }
        conn->poll.kind = TCP_POLL_CONN;
        conn->poll.fd = fd;
        conn->peer = peer;
        conn->at = l->addr;
        conn->at.prefix = 0;
        conn->want = TCP_HELLO_OPEN;
        peer.port = (uint16_t)port;
        addr_text(&peer, conn->from, sizeof(conn->from));
        conn->deadline_ns = rt_now_ns() + (uint64_t)mod->p.connect_timeout_ms * 1000000u;
        set_sockopts(mod, fd);
        util_list_append(&mod->conns, &conn->link);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &conn->poll};
        if (epoll_ctl(mod->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            rt_log_errno(logger(mod), "tcp: epoll_ctl", errno);
            tcp_conn_close(mod, conn);
            continue;
        }
        n++;
    }
}

static void conn_refuse(tcp_module_t *mod, tcp_conn_t *conn, const char *why)
{
    log_refusal(mod, false, conn->from, why);
    tcp_conn_close(mod, conn);
}

/* Whether we keep a connection from rank c that has proven itself: not
 * from a rank we saw fail or close; while our own connection to it is
 * under way, the one the lower rank opened; not a second one. */
static uint8_t verdict_for(tcp_module_t *mod, const ferry_btl_endpoint_t *ep)
{
    if (ep->deleted || ep->state == TCP_EP_FAILED || ep->state == TCP_EP_CLOSED)
        return TCP_HELLO_REFUSED;
    switch (ep->state) {
    case TCP_EP_NEW:
    case TCP_EP_WAIT:
    case TCP_EP_RETRY:
        return TCP_HELLO_OK;
    case TCP_EP_CONNECTING:
    case TCP_EP_HELLO:
        return ep->rank < mod->super.ctx->rank ? TCP_HELLO_OK : TCP_HELLO_DUP;
    default:
        return TCP_HELLO_DUP;
    }
}

/* Sends one whole hello message on a fresh socket (it always has room). */
static bool conn_reply(tcp_conn_t *conn, const tcp_hello_t *h)
{
    return send(conn->poll.fd, h, sizeof(*h), MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(*h);
}

/* OPEN came: prove the key over both nonces, first. */
static int conn_open(tcp_module_t *mod, tcp_conn_t *conn)
{
    const tcp_hello_t *h = &conn->hello;
    int me = mod->super.ctx->rank;
    tcp_session_t *s = &conn->session;
    s->rank_c = h->from;
    s->rank_l = me;
    memcpy(s->nonce_c, h->nonce, sizeof(s->nonce_c));
    s->at = conn->at;
    tcp_hello_t reply;
    tcp_hello_fill(&reply, TCP_HELLO_PROVE, me, h->from, mod->nranks, mod->job_hash);
    if (rt_auth_random(s->nonce_l, sizeof(s->nonce_l)) != FERRY_OK ||
        tcp_hello_mac(mod->jobkey, mod->job_id, mod->nranks, s, TCP_HELLO_PROVE, 0, reply.mac) !=
            FERRY_OK) {
        conn_refuse(mod, conn, "no MAC could be computed");
        return 1;
    }
    memcpy(reply.nonce, s->nonce_l, sizeof(reply.nonce));
    if (!conn_reply(conn, &reply)) {
        conn_refuse(mod, conn, "it could not be answered");
        return 1;
    }
    conn->want = TCP_HELLO_ANSWER;
    return 1;
}

/* ANSWER came and proves the key: the verdict, and the socket moves to
 * the rank's endpoint when it is kept. */
static int conn_answer(tcp_module_t *mod, tcp_conn_t *conn)
{
    int from = conn->session.rank_c;
    ferry_btl_endpoint_t *ep = tcp_ep_get(mod, from);
    if (ep == NULL) {
        conn_refuse(mod, conn, "out of memory");
        return 1;
    }
    uint8_t verdict = verdict_for(mod, ep);
    /* A genuine peer connects to this module only from the module it pairs
     * with, since both sides compute the pairing alike (tcp_pair.c), so
     * the connection needs no word of which module made it. A rank none of
     * whose modules pairs with this one computed another pairing (it runs
     * with another FERRY_TCP_MODULES, say) and would leave a socket here
     * this module has no use for: refused. */
    int partner = tcp_pair_partner(mod, from);
    bool unpaired = partner < 0;
    if (unpaired)
        verdict = TCP_HELLO_REFUSED;
    tcp_hello_t reply;
    tcp_hello_fill(&reply, TCP_HELLO_VERDICT, mod->super.ctx->rank, from, mod->nranks,
                   mod->job_hash);
    reply.status = verdict;
    bool sent = tcp_hello_mac(mod->jobkey, mod->job_id, mod->nranks, &conn->session,
                              TCP_HELLO_VERDICT, verdict, reply.mac) == FERRY_OK &&
                conn_reply(conn, &reply);
    if (unpaired)
        rt_log(logger(mod), RT_LOG_WARN,
               "tcp: refused a connection from rank %d (%s) to module %d: none of its modules "
               "pairs with this one (is FERRY_TCP_MODULES the same on every rank?)",
               from, conn->from, mod->index);
    else if (verdict == TCP_HELLO_REFUSED)
        rt_log(logger(mod), RT_LOG_WARN,
               "tcp: refused a connection from rank %d (%s): it failed or closed before", from,
               conn->from);
    if (verdict != TCP_HELLO_OK || !sent) {
        if (verdict == TCP_HELLO_OK)
            rt_log(logger(mod), RT_LOG_WARN, "tcp: could not answer rank %d's hello", from);
        tcp_conn_close(mod, conn);
        return 1;
    }
    /* The socket moves from the connection to the endpoint; a connect of
     * our own to the rank, if one is under way, gives way. */
    ep_close_socket(mod, ep);
    int fd = conn->poll.fd;
    epoll_ctl(mod->epfd, EPOLL_CTL_DEL, fd, NULL);
    conn->poll.fd = -1;
    tcp_conn_close(mod, conn);
    ep->poll.fd = fd;
    ep->peer_module = partner;
    ep_established(mod, ep);
    return 1;
}

/* The hello of an accepted socket: OPEN in, PROVE out, ANSWER in and
 * checked, VERDICT out. No endpoint is touched before the ANSWER proves
 * the key, so a stranger cannot disturb a rank's own connects. */
int tcp_conn_progress(tcp_module_t *mod, tcp_conn_t *conn)
{
    ssize_t n = recv(conn->poll.fd, (char *)&conn->hello + conn->got,
                     sizeof(conn->hello) - conn->got, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        rt_log(logger(mod), RT_LOG_DEBUG, "tcp: connection from %s closed during its hello",
               conn->from);
        tcp_conn_close(mod, conn);
        return 1;
    }
    if (n < 0)
        return 0;
    conn->got += (size_t)n;
    if (conn->got < sizeof(conn->hello))
        return 0;
    conn->got = 0;
    if (tcp_load_jobkey(mod) != FERRY_OK) {
        conn_refuse(mod, conn, "this process does not know the job key");
        return 1;
    }
    const tcp_hello_t *h = &conn->hello;
    tcp_hello_want_t want = {.step = conn->want,
                             .from = conn->want == TCP_HELLO_ANSWER ? conn->session.rank_c : -1,
                             .me = mod->super.ctx->rank,
                             .size = mod->nranks,
                             .job = mod->job_hash};
    const char *bad = tcp_hello_check(h, &want);
    if (bad == NULL && h->step == TCP_HELLO_ANSWER &&
        !tcp_hello_proves(mod->jobkey, mod->job_id, mod->nranks, &conn->session, h))
        bad = "no proof of the job's key";
    if (bad != NULL) {
        char why[96];
        snprintf(why, sizeof(why), "it sent %s", bad);
        conn_refuse(mod, conn, why);
        return 1;
    }
    return h->step == TCP_HELLO_OPEN ? conn_open(mod, conn) : conn_answer(mod, conn);
}

/* ---- finalize ---- */

void tcp_ep_goodbye(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (ep->state != TCP_EP_CONNECTED)
        return;
    tcp_hdr_t h = {.type = TCP_T_FIN};
    if (tcp_queue_ctl(mod, ep, &h, NULL, 0) != FERRY_OK)
        return;
    tcp_push(mod, ep);
}
