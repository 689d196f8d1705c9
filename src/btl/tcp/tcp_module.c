/*
 * The tcp module's operations and its component: parameters, interface
 * selection, listeners, the modex address and job key, progress and
 * finalize.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "btl/tcp/tcp.h"
#include "rt/modex.h"

static tcp_module_t *tcp_of(ferry_btl_module_t *btl)
{
    return (tcp_module_t *)btl;
}

/* ---- endpoints ---- */

static int tcp_add_procs(ferry_btl_module_t *btl, size_t n, const ferry_btl_proc_t *procs,
                         ferry_btl_endpoint_t **eps_out, struct ferry_bitmap *reachable)
{
    tcp_module_t *mod = tcp_of(btl);
    if (btl == NULL || (n > 0 && (procs == NULL || eps_out == NULL)))
        return FERRY_ERR_INVALID;
    for (size_t i = 0; i < n; i++) {
        int r = procs[i].rank;
        eps_out[i] = NULL;
        /* A rank reaches itself through self; a socket to oneself would
         * meet itself in the hello. */
        if (r < 0 || r >= mod->nranks || r == btl->ctx->rank)
            continue;
        ferry_btl_endpoint_t *ep = tcp_ep_get(mod, r);
        if (ep == NULL)
            return FERRY_ERR_NO_MEMORY;
        mod->same_host[r] = procs[i].same_host;
        /* With several modules, the peer's module of the same index must
         * have published an address this one can use (tcp_ep_load_candidates):
         * else this module does not reach it. */
        if (mod->eager_reach && ep->state == TCP_EP_NEW &&
            tcp_ep_load_candidates(mod, ep) != FERRY_OK)
            continue;
        ep->deleted = false;
        eps_out[i] = ep;
        if (reachable != NULL)
            util_bitmap_set(reachable, i);
    }
    return FERRY_OK;
}

/* Unsent work fails; what is partly on the wire or waits for an answer
 * finishes as it would, so the stream stays framed. Endpoints live as long as
 * the module. */
static int tcp_del_procs(ferry_btl_module_t *btl, size_t n, ferry_btl_endpoint_t **eps)
{
    tcp_module_t *mod = tcp_of(btl);
    if (btl == NULL || (n > 0 && eps == NULL))
        return FERRY_ERR_INVALID;
    for (size_t i = 0; i < n; i++) {
        ferry_btl_endpoint_t *ep = eps[i];
        if (ep == NULL || ep->mod != mod)
            continue;
        util_list_item_t *it = util_list_first(&ep->queue);
        while (it != NULL) {
            btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
            it = util_list_next(&ep->queue, it);
            if (frag->op == TCP_OP_CTL || frag->done > 0)
                continue;
            util_list_remove(&ep->queue, &frag->link);
            ep->queued_bytes -= tcp_frag_wire_len(frag);
            tcp_complete(mod, frag, FERRY_ERR_UNREACH);
        }
        ep->deleted = true;
    }
    return FERRY_OK;
}

/* ---- descriptors ---- */

static bool over_budget(tcp_module_t *mod, const ferry_btl_endpoint_t *ep)
{
    return ep != NULL && ep->mod == mod && ep->queued_bytes >= mod->p.sendq_max;
}

static int tcp_alloc(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, size_t size,
                     uint32_t flags, ferry_btl_desc_t **des_out)
{
    if (btl == NULL)
        return FERRY_ERR_INVALID;
    if (over_budget(tcp_of(btl), ep) && size <= btl->attr.max_send_size && des_out != NULL)
        return FERRY_ERR_NO_RESOURCE;
    return btl_frags_alloc(&tcp_of(btl)->frags, size, flags, des_out);
}

static int tcp_prepare_src(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                           ferry_btl_reg_t *reg, ferry_convertor_t *conv, size_t reserve,
                           size_t *size, uint32_t flags, ferry_btl_desc_t **des_out)
{
    if (btl == NULL)
        return FERRY_ERR_INVALID;
    if (over_budget(tcp_of(btl), ep) && !(flags & FERRY_BTL_PREP_RDMA) && conv != NULL &&
        size != NULL && des_out != NULL)
        return FERRY_ERR_NO_RESOURCE;
    return btl_frags_prepare_src(&tcp_of(btl)->frags, ep, reg, conv, reserve, size, flags,
                                 des_out);
}

/* ---- sending ---- */

/* Checks an endpoint before new work goes to it, starting its connect. */
static int ep_ready(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (ep == NULL || ep->mod != mod)
        return FERRY_ERR_INVALID;
    if (ep->deleted || ep->state == TCP_EP_CLOSED)
        return FERRY_ERR_UNREACH;
    /* A failure not yet reported (it is, from the next progress) is not
     * told to the caller first: the work is taken and fails with it. */
    if (ep->state == TCP_EP_FAILED)
        return tcp_ep_report_pending(mod, ep) ? FERRY_OK : FERRY_ERR_UNREACH;
    if (ep->state == TCP_EP_NEW) {
        int rc = tcp_ep_connect(mod, ep);
        return rc != FERRY_OK && tcp_ep_report_pending(mod, ep) ? FERRY_OK : rc;
    }
    return FERRY_OK;
}

static int tcp_send(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                    uint8_t tag)
{
    tcp_module_t *mod = tcp_of(btl);
    int rc = btl_frags_check_send(btl, des, tag);
    if (rc != FERRY_OK)
        return rc;
    rc = ep_ready(mod, ep);
    if (rc != FERRY_OK)
        return rc;
    btl_frag_t *frag = btl_frag_of(des);
    frag->op = TCP_OP_SEND;
    frag->tag = tag;
    frag->ep = ep;
    des->flags |= FERRY_BTL_DES_INFLIGHT;
    if (ep->state == TCP_EP_FAILED) {
        tcp_complete(mod, frag, FERRY_ERR_UNREACH);
        return FERRY_OK;
    }
    bool was_empty = util_list_empty(&ep->queue);
    tcp_enqueue(mod, ep, frag, tcp_frag_wire_len(frag));
    if (was_empty && ep->state == TCP_EP_CONNECTED)
        tcp_push(mod, ep);
    return FERRY_OK;
}

/* What sendi and put_notify_inline need of ep before they write: connected
 * (else busy: connecting, or failed and not yet reported), not deleted,
 * nothing queued that they would overtake (busy). */
static int write_ready(tcp_module_t *mod, ferry_btl_endpoint_t *ep, int busy)
{
    if (ep->state != TCP_EP_CONNECTED) {
        int rc = ep_ready(mod, ep);
        if (rc != FERRY_OK)
            return rc;
        if (ep->state != TCP_EP_CONNECTED)
            return busy;
    }
    if (ep->deleted)
        return FERRY_ERR_UNREACH;
    return util_list_empty(&ep->queue) ? FERRY_OK : busy;
}

static int tcp_sendi(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *header,
                     size_t header_len, const void *payload, size_t payload_len, uint8_t tag)
{
    tcp_module_t *mod = tcp_of(btl);
    if (btl == NULL || tag >= FERRY_BTL_TAG_BTL_MIN || (header == NULL && header_len > 0) ||
        (payload == NULL && payload_len > 0) || header_len > btl->attr.max_send_size ||
        payload_len > btl->attr.max_send_size - header_len || ep == NULL || ep->mod != mod)
        return FERRY_ERR_INVALID;
    /* Busy: progress, then retry. */
    int rc = write_ready(mod, ep, FERRY_ERR_NO_RESOURCE);
    if (rc != FERRY_OK)
        return rc;
    return tcp_sendi_now(mod, ep, header, header_len, payload, payload_len, tag);
}

/* ---- puts with notification ---- */

/* What a tracked put with notification's completion calls (btl.h,
 * put_notify_inline), kept beside its fragment. */
typedef struct tcp_putn_cb {
    ferry_btl_rdma_cb_t cb;
    void *cbctx, *cbdata;
    void *local;
} tcp_putn_cb_t;

static void putn_done(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                      int status)
{
    tcp_putn_cb_t c = *(tcp_putn_cb_t *)des->cbdata;
    free(des->cbdata);
    c.cb(btl, ep, c.local, NULL, c.cbctx, c.cbdata, status);
}

static int tcp_put_notify_inline(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                 const void *local, size_t size, uint64_t raddr,
                                 const uint8_t *rkey, uint8_t tag, const void *payload,
                                 size_t plen, uint32_t flags, ferry_btl_rdma_cb_t cb,
                                 void *cbctx, void *cbdata)
{
    tcp_module_t *mod = tcp_of(btl);
    if (btl == NULL || ep == NULL || ep->mod != mod || rkey == NULL || cb == NULL ||
        tag >= FERRY_BTL_TAG_BTL_MIN || (payload == NULL && plen > 0) ||
        (local == NULL && size > 0) || (flags & ~(uint32_t)FERRY_BTL_PUTN_UNTRACKED) != 0)
        return FERRY_ERR_INVALID;
    int rc = write_ready(mod, ep, FERRY_ERR_NOT_SUPPORTED);
    if (rc != FERRY_OK)
        return rc;
    /* One frame no larger than the largest send. */
    size_t max = btl->attr.max_send_size - sizeof(tcp_putn_body_t);
    if (size > max || plen > max - size)
        return FERRY_ERR_NOT_SUPPORTED;
    tcp_putn_body_t b = {.raddr = raddr, .plen = (uint32_t)plen};
    memcpy(&b.key, rkey, sizeof(b.key));
    if (flags & FERRY_BTL_PUTN_UNTRACKED) {
        const struct iovec parts[3] = {
            {&b, sizeof(b)}, {(void *)payload, plen}, {(void *)local, size}};
        rc = tcp_send_frame(mod, ep, (tcp_hdr_t){.type = TCP_T_PUTN, .tag = tag}, parts, 3);
        if (rc == FERRY_ERR_NO_RESOURCE)
            return FERRY_ERR_NOT_SUPPORTED;
        if (rc == FERRY_OK) {
            ep->putn_cb = cb;
            ep->putn_cbctx = cbctx;
        }
        return rc;
    }
    /* Tracked: a request the target answers (PUT_ACK), within the budget
     * of requests in flight that puts and gets keep. */
    if (ep->rdma_inflight + btl_amo_inflight(&ep->amo) >= mod->p.rdma_max_inflight)
        return FERRY_ERR_NOT_SUPPORTED;
    tcp_putn_cb_t *c = malloc(sizeof(*c));
    if (c == NULL)
        return FERRY_ERR_NO_MEMORY;
    *c = (tcp_putn_cb_t){.cb = cb, .cbctx = cbctx, .cbdata = cbdata, .local = (void *)local};
    ferry_btl_desc_t *des;
    if (btl_frags_alloc(&mod->frags, sizeof(b) + plen + size, FERRY_BTL_DES_OWNERSHIP, &des) !=
        FERRY_OK) {
        free(c);
        return FERRY_ERR_NOT_SUPPORTED;
    }
    unsigned char *p = ferry_btl_seg_ptr(&des->src[0]);
    memcpy(p, &b, sizeof(b));
    if (plen > 0)
        memcpy(p + sizeof(b), payload, plen);
    if (size > 0)
        memcpy(p + sizeof(b) + plen, local, size);
    btl_frag_t *frag = btl_frag_of(des);
    frag->op = TCP_OP_PUTN;
    frag->tag = tag;
    frag->ep = ep;
    frag->cookie = ++mod->next_cookie;
    des->cbfunc = putn_done;
    des->cbdata = c;
    des->flags |= FERRY_BTL_DES_INFLIGHT;
    ep->rdma_inflight++;
    bool was_empty = util_list_empty(&ep->queue);
    tcp_enqueue(mod, ep, frag, tcp_frag_wire_len(frag));
    if (was_empty)
        tcp_push(mod, ep);
    return FERRY_OK;
}

/* ---- progress ---- */

/* A put or get leaves the endpoint's count of operations in flight. */
static void tcp_completion_done(btl_frag_t *frag)
{
    ferry_btl_endpoint_t *ep = frag->ep;
    if (frag->op == TCP_OP_SEND || ep == NULL)
        return;
    ep->rdma_inflight--;
    if (frag->op == TCP_OP_GET) {
        size_t len = frag->base.dst[0].len;
        ep->get_inflight_bytes -= len < ep->get_inflight_bytes ? len : ep->get_inflight_bytes;
    }
}

static int run_completions(tcp_module_t *mod)
{
    return btl_frags_run_completions(&mod->frags, &mod->completed, tcp_completion_done);
}

static int poll_events(tcp_module_t *mod, bool direct)
{
    struct epoll_event evs[32];
    int got = epoll_wait(mod->epfd, evs, 32, 0);
    int n = 0;
    for (int i = 0; i < got; i++) {
        tcp_pollable_t *p = evs[i].data.ptr;
        switch (p->kind) {
        case TCP_POLL_LISTENER:
            n += tcp_accept(mod, UTIL_CONTAINER_OF(p, tcp_listener_t, poll));
            break;
        case TCP_POLL_CONN:
            /* Evicted earlier in this batch: nothing more to do. */
            if (p->fd >= 0)
                n += tcp_conn_progress(mod, UTIL_CONTAINER_OF(p, tcp_conn_t, poll));
            break;
        case TCP_POLL_EP: {
            ferry_btl_endpoint_t *ep = UTIL_CONTAINER_OF(p, ferry_btl_endpoint_t, poll);
            if (ep->state == TCP_EP_CONNECTING || ep->state == TCP_EP_HELLO)
                n += tcp_ep_connect_progress(mod, ep);
            else if (ep->state == TCP_EP_CONNECTED && !ep->rx_paused && !(direct && ep->hot))
                n += tcp_recv(mod, ep);
            break;
        }
        }
    }
    tcp_conn_reap(mod);
    return n;
}

static int tcp_progress(ferry_btl_module_t *btl)
{
    tcp_module_t *mod = tcp_of(btl);
    int n = 0;
    uint32_t calls = ++mod->progress_calls;

    /* A few connected peers are polled with recv directly: one system call
     * each, and no wait for epoll to tell what recv would. */
    bool direct = mod->nhot > 0 && mod->nhot <= mod->p.poll_direct;
    if (direct) {
        for (int i = 0; i < mod->nhot; i++) {
            ferry_btl_endpoint_t *ep = mod->hot[i];
            n += tcp_recv(mod, ep);
            if (i < mod->nhot && mod->hot[i] != ep)
                i--; /* it failed and left the list */
        }
    }
    /* New connections, and peers beyond the direct few: through epoll,
     * every call while something waits on it. Otherwise epoll has only the
     * listeners to tell about: every sixteenth call while some peer may
     * still connect to us, and once every peer is connected (only
     * strangers or refused reconnects are left to accept) every 1024th,
     * so the latency path makes no epoll_wait call. */
    uint32_t every = mod->nhot >= mod->nranks - 1 ? 1023u : 15u;
    bool tick = (calls & every) == 0;
    if (!direct || !util_list_empty(&mod->connecting) || !util_list_empty(&mod->conns) || tick)
        n += poll_events(mod, direct);

    util_list_item_t *it = util_list_first(&mod->sending);
    while (it != NULL) {
        ferry_btl_endpoint_t *ep = UTIL_CONTAINER_OF(it, ferry_btl_endpoint_t, sending_link);
        it = util_list_next(&mod->sending, it);
        if (ep->state == TCP_EP_CONNECTED)
            n += tcp_push(mod, ep);
    }
    n += tcp_check_deadlines(mod);
    if (!util_list_empty(&mod->resume))
        n += tcp_resume(mod);
    /* The deadlines (tcp_io.c) are checked on the same tick, so the clock
     * is read every 16th or 1024th call, never on the latency path. */
    if (tick)
        n += tcp_check_stalls(mod);
    if (!util_list_empty(&mod->completed))
        n += run_completions(mod);
    n += btl_amo_progress(btl, &mod->amo);
    /* Failures reported so far (tcp_ep_fail) reach the error callback; a
     * failure reported by a callback waits for the next call. */
    uint64_t reported = mod->report_seq;
    n += btl_base_progress_reports(&mod->super);
    mod->reports_done = reported;
    return n;
}

static int tcp_flush(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep)
{
    tcp_module_t *mod = tcp_of(btl);
    if (btl == NULL || (ep != NULL && ep->mod != mod))
        return FERRY_ERR_INVALID;
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *e = mod->eps[r];
        if (e == NULL || (ep != NULL && e != ep))
            continue;
        /* Every put and get ends: answered, or failed with its peer (the
         * connect deadline and keepalive bound the wait). */
        int rc = btl_base_wait_inflight(btl, &e->rdma_inflight);
        if (rc == FERRY_OK)
            rc = btl_base_wait_inflight(btl, &e->amo.ninflight);
        if (rc != FERRY_OK)
            return rc;
    }
    return FERRY_OK;
}

static const char *const state_names[] = {"new",   "connecting", "hello",  "wait",
                                          "retry", "connected",  "failed", "closed"};

/* The peer's module ep pairs with (tcp_pair.c): with per-interface
 * modules its number may differ from ours. */
static int tcp_peer_instance(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep)
{
    tcp_module_t *mod = tcp_of(btl);
    if (mod == NULL || ep == NULL || ep->mod != mod)
        return -1;
    return ep->peer_module >= 0 ? ep->peer_module : tcp_pair_partner(mod, ep->rank);
}

static void tcp_dump(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, int verbose)
{
    tcp_module_t *mod = tcp_of(btl);
    (void)verbose;
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *e = mod->eps[r];
        if (e == NULL || (ep != NULL && e != ep))
            continue;
        rt_log(&btl->ctx->log, RT_LOG_ERROR,
               "tcp: module %d rank %d (its module %d) state %s fd %d queued %zu frags (%zu "
               "bytes) awaiting answers %zu rdma %zu rx %zu/%zu mode %d copied after partial "
               "inline sends %zu bytes",
               mod->index, r, e->peer_module, state_names[e->state], e->poll.fd,
               util_list_len(&e->queue), e->queued_bytes,
               util_list_len(&e->rdma_wait), e->rdma_inflight, e->rx_off, e->rx_len,
               (int)e->rx_mode, e->spilled_bytes);
    }
}

/* Sends FIN to every connected peer and waits, bounded, until each has our
 * bytes and has closed its side, so no unread byte turns our close into a
 * reset that could destroy data the peer has not read yet. */
static void say_goodbye(tcp_module_t *mod)
{
    if (mod->eps == NULL)
        return;
    bool any = false;
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *ep = mod->eps[r];
        if (ep != NULL && ep->state == TCP_EP_CONNECTED) {
            tcp_ep_goodbye(mod, ep);
            any = true;
        }
    }
    if (!any)
        return;
    long long ms = mod->p.connect_timeout_ms < 2000 ? mod->p.connect_timeout_ms : 2000;
    uint64_t deadline = rt_now_ns() + (uint64_t)ms * 1000000u;
    unsigned idle = 0;
    bool *shut = calloc((size_t)mod->nranks, sizeof(*shut));
    if (shut == NULL)
        return;
    for (;;) {
        bool open = false;
        for (int r = 0; r < mod->nranks; r++) {
            ferry_btl_endpoint_t *ep = mod->eps[r];
            if (ep == NULL || ep->state != TCP_EP_CONNECTED)
                continue;
            tcp_push(mod, ep);
            if (ep->state != TCP_EP_CONNECTED)
                continue;
            if (util_list_empty(&ep->queue) && !shut[r]) {
                shutdown(ep->poll.fd, SHUT_WR);
                shut[r] = true;
            }
            char sink[4096];
            ssize_t n;
            while ((n = recv(ep->poll.fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0)
                ;
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                tcp_ep_peer_closed(mod, ep);
            else
                open = true;
        }
        if (!open || rt_now_ns() > deadline)
            break;
        rt_idle(&idle);
    }
    free(shut);
}

static int tcp_finalize(ferry_btl_module_t *btl)
{
    tcp_module_t *mod = tcp_of(btl);
    if (mod == NULL)
        return FERRY_OK;
    mod->finalizing = true;
    say_goodbye(mod);
    /* The count of what the rate limiter held back, once. */
    unsigned long held = rt_ratelimit_take(&mod->refuse_rl);
    if (held > 0)
        rt_log(&btl->ctx->log, RT_LOG_WARN,
               "tcp: %lu more messages about refused or evicted connections were not printed",
               held);
    if (mod->eps != NULL) {
        for (int r = 0; r < mod->nranks; r++) {
            ferry_btl_endpoint_t *ep = mod->eps[r];
            if (ep == NULL)
                continue;
            if (ep->spilled_bytes > 0)
                rt_log(&btl->ctx->log, RT_LOG_DEBUG,
                       "tcp: %zu bytes of inline sends to rank %d were copied after partial "
                       "writes",
                       ep->spilled_bytes, r);
            tcp_ep_fail(mod, ep, FERRY_ERR_UNREACH, "finalized");
        }
    }
    /* Callbacks for what was failed above. */
    run_completions(mod);
    if (mod->eps != NULL)
        for (int r = 0; r < mod->nranks; r++)
            if (mod->eps[r] != NULL)
                btl_amo_ep_fail(&mod->amo, &mod->eps[r]->amo, FERRY_ERR_UNREACH);
    btl_amo_module_fini(btl, &mod->amo);
    if (mod->eps != NULL)
        for (int r = 0; r < mod->nranks; r++)
            if (mod->eps[r] != NULL) {
                tcp_ep_free(mod, mod->eps[r]);
                /* Deregistrations from the pools' teardown look here. */
                mod->eps[r] = NULL;
            }
    while (!util_list_empty(&mod->conns))
        tcp_conn_close(mod, UTIL_CONTAINER_OF(util_list_first(&mod->conns), tcp_conn_t, link));
    tcp_conn_reap(mod);
    for (int i = 0; i < mod->nlisteners; i++)
        close(mod->listeners[i].poll.fd);
    if (mod->epfd >= 0)
        close(mod->epfd);
    int rc = btl_frags_fini(&mod->frags);
    /* After the pools, whose registration cache deregisters what it
     * holds: the rest of this module's holds go, and registrations the
     * other modules hold stay theirs. */
    tcp_regtab_detach(mod->tab, mod);
    tcp_pairs_release(mod->pairs);
    free(mod->eps);
    free(mod->hot);
    free(mod->same_host);
    btl_base_reports_fini(&mod->super);
    free(mod);
    return rc;
}

static const ferry_btl_ops_t tcp_ops = {
    .add_procs = tcp_add_procs,
    .del_procs = tcp_del_procs,
    .register_am = btl_base_register_am,
    .register_error = btl_base_register_error,
    .finalize = tcp_finalize,
    .alloc = tcp_alloc,
    .put_notify_inline = tcp_put_notify_inline,
    .peer_instance = tcp_peer_instance,
    .free = btl_frags_op_free,
    .prepare_src = tcp_prepare_src,
    .prepare_dst = btl_frags_op_prepare_dst,
    .send = tcp_send,
    .sendi = tcp_sendi,
    .put = tcp_put,
    .get = tcp_get,
    .target_resolve = tcp_target_resolve,
    .register_mem = tcp_register_mem,
    .deregister_mem = tcp_deregister_mem,
    .mem_alloc = btl_base_unsupported_mem_alloc,
    .mem_free = btl_base_unsupported_mem_free,
    .atomic_op = tcp_atomic_op,
    .atomic_fop = tcp_atomic_fop,
    .atomic_cswap = tcp_atomic_cswap,
    .flush = tcp_flush,
    .progress = tcp_progress,
    .dump = tcp_dump,
};

/* ---- component ---- */

static int tcp_read_params(ferry_ctx_t *ctx, tcp_params_t *p)
{
    rt_params_t *r = &ctx->params;
    int rc;
    if ((rc = rt_param_register_string(r, "tcp_if_include", "",
                                       "Interfaces tcp listens on and publishes: names (eth0) "
                                       "or CIDR blocks (10.0.0.0/8), comma separated; empty: "
                                       "every interface that is up",
                                       &p->if_include)) != FERRY_OK ||
        (rc = rt_param_register_string(r, "tcp_if_exclude", "",
                                       "Interfaces tcp leaves out: names or CIDR blocks, comma "
                                       "separated (not with FERRY_TCP_IF_INCLUDE)",
                                       &p->if_exclude)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "tcp_connect_timeout", 5000, 10, 3600000,
                                    "Milliseconds a tcp connection (connect and hello) may "
                                    "take before the peer is reported unreachable",
                                    &p->connect_timeout_ms)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "tcp_pending_max", 256, 1, 65536,
                                     "Accepted tcp connections that may wait for their hello "
                                     "at once; one more closes the oldest of them",
                                     &p->pending_max)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "tcp_pending_per_addr", 32, 1, 65536,
                                     "Of those, how many may come from one address; one more "
                                     "closes that address's oldest",
                                     &p->pending_per_addr)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "tcp_frame_timeout", 30000, 0, 86400000,
                                    "Milliseconds a tcp peer may leave a frame half sent "
                                    "before it is reported failed (0: no limit)",
                                    &p->frame_timeout_ms)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "tcp_request_timeout", 60000, 0, 86400000,
                                    "Milliseconds a tcp peer may leave every put and get sent "
                                    "to it unanswered before it is reported failed (0: no "
                                    "limit)",
                                    &p->request_timeout_ms)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "tcp_rdma_max_inflight", 1024, 1, 1u << 20,
                                     "Puts and gets in flight to one tcp peer; a target does "
                                     "not read a peer it owes more answers (same on all ranks)",
                                     &p->rdma_max_inflight)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "tcp_eager_limit", 4096, 64, 1u << 20,
                                     "Largest tcp fragment taken from the eager pool (bytes)",
                                     &p->eager_limit)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "tcp_max_send_size", 1024 * 1024, 1024, 64u << 20,
                                     "Largest single tcp send (bytes; a receiver's buffer "
                                     "grows to the largest frame its peer sends)",
                                     &p->max_send_size)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "tcp_sendq_max", 4u << 20, 4096, (size_t)1 << 40,
                                     "Bytes queued per tcp peer beyond which alloc, "
                                     "prepare_src and sendi push back; also the get data "
                                     "in flight to (and owed to) one peer (same on all ranks)",
                                     &p->sendq_max)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "tcp_rx_buffer", 512 * 1024, 4096, 1u << 30,
                                     "Receive buffer per connected tcp peer (bytes; at least "
                                     "two of the largest frames)",
                                     &p->rx_buffer)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "tcp_sndbuf", 0, 0, 1u << 30,
                                     "SO_SNDBUF of tcp sockets (bytes; 0: the kernel's "
                                     "autotuning)",
                                     &p->sndbuf)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "tcp_rcvbuf", 0, 0, 1u << 30,
                                     "SO_RCVBUF of tcp sockets (bytes; 0: the kernel's "
                                     "autotuning)",
                                     &p->rcvbuf)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "tcp_keepalive_time", 10, 1, 86400,
                                    "Seconds of silence before tcp keepalive probes a peer",
                                    &p->keepalive_time)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "tcp_keepalive_intvl", 2, 1, 3600,
                                    "Seconds between tcp keepalive probes",
                                    &p->keepalive_intvl)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "tcp_keepalive_probes", 3, 1, 100,
                                    "Unanswered keepalive probes after which a peer is dead",
                                    &p->keepalive_probes)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "tcp_poll_direct", 8, 0, 1 << 20,
                                    "Connected peers up to which progress polls each socket "
                                    "with recv instead of asking epoll",
                                    &p->poll_direct)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "tcp_reg_slots", 4096, 16, 1u << 20,
                                     "Memory registrations each process can hold for tcp",
                                     &p->reg_slots)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "tcp_free_list_num", 16, 1, 1u << 20,
                                     "Descriptors each tcp pool allocates at start",
                                     &p->free_list_num)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "tcp_free_list_max", 1024, 1, 1u << 20,
                                     "Most descriptors in each tcp pool (back pressure beyond)",
                                     &p->free_list_max)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "tcp_free_list_inc", 64, 1, 1u << 20,
                                     "Descriptors added when a tcp pool runs dry",
                                     &p->free_list_inc)) != FERRY_OK ||
        (rc = rt_param_register_string(r, "tcp_modules", "one",
                                       "How tcp divides into modules: one (one module "
                                       "listens on every selected interface) or per-interface "
                                       "(a module for each selected address, which reaches "
                                       "peers on its subnet only)",
                                       &p->modules)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "tcp_links", 1, 1, 8,
                                    "tcp modules per selected interface (or per process with "
                                    "FERRY_TCP_MODULES=one), each with its own socket to a "
                                    "peer, for striping (same on all ranks)",
                                    &p->links)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "tcp_user_timeout", 10000, 0, 3600000,
                                    "Milliseconds a tcp peer may leave our data "
                                    "unacknowledged (a cut link) before the connection fails "
                                    "(TCP_USER_TIMEOUT; 0: the kernel's default)",
                                    &p->user_timeout_ms)) != FERRY_OK ||
        (rc = btl_amo_register_params(ctx, &p->atomic_slots)) != FERRY_OK)
        return rc;
    const char *bad = NULL;
    p->per_interface = strcmp(p->modules, "per-interface") == 0;
    if (!p->per_interface && strcmp(p->modules, "one") != 0) {
        rt_log(&ctx->log, RT_LOG_ERROR,
               "FERRY_TCP_MODULES='%s': expected one or per-interface", p->modules);
        return FERRY_ERR_INVALID;
    }
    if (p->eager_limit > p->max_send_size)
        bad = "FERRY_TCP_EAGER_LIMIT must not exceed FERRY_TCP_MAX_SEND_SIZE";
    else if (p->free_list_num > p->free_list_max)
        bad = "FERRY_TCP_FREE_LIST_NUM must not exceed FERRY_TCP_FREE_LIST_MAX";
    else if (p->if_include[0] != '\0' && p->if_exclude[0] != '\0')
        bad = "FERRY_TCP_IF_INCLUDE and FERRY_TCP_IF_EXCLUDE cannot both be set";
    if (bad != NULL) {
        rt_log(&ctx->log, RT_LOG_ERROR, "%s", bad);
        return FERRY_ERR_INVALID;
    }
    return FERRY_OK;
}

static int tcp_register_params(ferry_ctx_t *ctx)
{
    tcp_params_t p;
    return tcp_read_params(ctx, &p);
}

/* One item of an interface list: a name, or an address block. */
typedef struct if_item {
    char name[IF_NAMESIZE];
    tcp_addr_entry_t net; /* family 0 for a name */
} if_item_t;

#define TCP_IF_ITEMS 32

/* Parses "eth0,10.0.0.0/8,fd00::/8,192.168.1.5"; FERRY_ERR_INVALID naming
 * the variable and the item that does not parse. */
static int parse_if_list(ferry_ctx_t *ctx, const char *var, const char *list, if_item_t *items,
                         int *n_out)
{
    int n = 0;
    for (const char *p = list; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        while (len > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        char tok[64];
        const char *why = NULL;
        if (len == 0 || len >= sizeof(tok))
            why = len == 0 ? "an empty item" : "an item too long";
        else if (n == TCP_IF_ITEMS)
            why = "more items than ferry accepts (32)";
        if (why == NULL) {
            memcpy(tok, p, len);
            tok[len] = '\0';
            if_item_t *it = &items[n];
            memset(it, 0, sizeof(*it));
            char *slash = strchr(tok, '/');
            if (slash != NULL)
                *slash = '\0';
            uint8_t addr[16];
            if (inet_pton(AF_INET, tok, addr) == 1) {
                it->net.family = 4;
                memcpy(it->net.addr, addr, 4);
            } else if (inet_pton(AF_INET6, tok, addr) == 1) {
                it->net.family = 6;
                memcpy(it->net.addr, addr, 16);
            }
            unsigned maxp = it->net.family == 4 ? 32 : 128;
            if (it->net.family != 0) {
                it->net.prefix = (uint8_t)maxp;
                if (slash != NULL) {
                    char *e;
                    unsigned long v = strtoul(slash + 1, &e, 10);
                    if (slash[1] == '\0' || *e != '\0' || v > maxp)
                        why = "a bad prefix length";
                    else
                        it->net.prefix = (uint8_t)v;
                }
            } else if (slash != NULL) {
                why = "an address block that does not parse";
            } else if (len >= IF_NAMESIZE) {
                why = "an interface name too long";
            } else {
                memcpy(it->name, tok, len + 1);
            }
        }
        if (why != NULL) {
            rt_log(&ctx->log, RT_LOG_ERROR,
                   "%s='%s': %s (expected interface names or CIDR blocks such as "
                   "10.0.0.0/24, comma separated)",
                   var, list, why);
            return FERRY_ERR_INVALID;
        }
        n++;
        if (end == NULL)
            break;
        p = end + 1;
    }
    *n_out = n;
    return FERRY_OK;
}

static bool prefix_match(const tcp_addr_entry_t *net, const tcp_addr_entry_t *a)
{
    if (net->family != a->family)
        return false;
    unsigned full = net->prefix / 8u, rest = net->prefix % 8u;
    if (memcmp(net->addr, a->addr, full) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xffu << (8 - rest));
    return (net->addr[full] & mask) == (a->addr[full] & mask);
}

static bool if_match(const if_item_t *items, int n, const char *ifname,
                     const tcp_addr_entry_t *a)
{
    for (int i = 0; i < n; i++) {
        if (items[i].net.family == 0 ? strcmp(items[i].name, ifname) == 0
                                     : prefix_match(&items[i].net, a))
            return true;
    }
    return false;
}

static unsigned mask_len(const uint8_t *m, size_t bytes)
{
    unsigned n = 0;
    for (size_t i = 0; i < bytes; i++)
        for (int b = 7; b >= 0 && (m[i] >> b & 1); b--)
            n++;
    return n;
}

static int open_listener(tcp_module_t *mod, const tcp_addr_entry_t *a, const char *ifname)
{
    const rt_log_t *log = &mod->super.ctx->log;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t sl;
    if (a->family == 4) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
        sin->sin_family = AF_INET;
        memcpy(&sin->sin_addr, a->addr, 4);
        sl = sizeof(*sin);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
        sin6->sin6_family = AF_INET6;
        memcpy(&sin6->sin6_addr, a->addr, 16);
        sl = sizeof(*sin6);
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return rt_log_errno(log, "tcp: socket", errno);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* Accepted sockets inherit the sizes, and the receive window's scale is
     * fixed at the handshake, before accept returns. */
    tcp_set_bufs(mod, fd);
    if (a->family == 6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        char ip[INET6_ADDRSTRLEN] = "?";
        inet_ntop(a->family == 4 ? AF_INET : AF_INET6, a->addr, ip, sizeof(ip));
        rt_log(log, RT_LOG_DEBUG, "tcp: cannot listen on %s (%s): %s", ip, ifname,
               strerror(errno));
        close(fd);
        return FERRY_ERR_IO;
    }
    tcp_listener_t *l = &mod->listeners[mod->nlisteners];
    l->poll.kind = TCP_POLL_LISTENER;
    l->poll.fd = fd;
    l->addr = *a;
    l->addr.port = ntohs(a->family == 4 ? ((struct sockaddr_in *)&ss)->sin_port
                                        : ((struct sockaddr_in6 *)&ss)->sin6_port);
    snprintf(l->ifname, sizeof(l->ifname), "%s", ifname);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &l->poll};
    if (epoll_ctl(mod->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        return rt_log_errno(log, "tcp: epoll_ctl", errno);
    }
    mod->nlisteners++;
    return FERRY_OK;
}

/* a with its host bits cleared (its own prefix) into net. */
static void addr_network(const tcp_addr_entry_t *a, uint8_t net[16])
{
    unsigned len = a->family == 4 ? 4 : 16;
    unsigned prefix = a->prefix < len * 8 ? a->prefix : len * 8;
    memset(net, 0, 16);
    memcpy(net, a->addr, prefix / 8);
    if (prefix % 8 != 0)
        net[prefix / 8] = (uint8_t)(a->addr[prefix / 8] & (0xffu << (8 - prefix % 8)));
}

/* Whether a comes before b in the order per-interface modules are numbered
 * in among addresses of one FERRY_TCP_IF_INCLUDE item: IPv4 first,
 * loopback first, then by subnet, prefix and address. It depends on the
 * addresses only, not on the interfaces' names or the kernel's order, so
 * that hosts on the same subnets number their modules alike and module k
 * pairs with the peer's module k (tcp_pair.c pairs them either way; the
 * layers above name a module by its index, in remote keys and in the
 * BML's word that a rail was lost, and are right when the two agree). */
static bool addr_before(const tcp_addr_entry_t *a, const tcp_addr_entry_t *b)
{
    if (a->family != b->family)
        return a->family < b->family;
    bool la = tcp_addr_is_loopback(a), lb = tcp_addr_is_loopback(b);
    if (la != lb)
        return la;
    uint8_t na[16], nb[16];
    addr_network(a, na);
    addr_network(b, nb);
    size_t len = a->family == 4 ? 4 : 16;
    int c = memcmp(na, nb, len);
    if (c != 0)
        return c < 0;
    if (a->prefix != b->prefix)
        return a->prefix < b->prefix;
    return memcmp(a->addr, b->addr, len) < 0;
}

/* The selected addresses, in the order of the first FERRY_TCP_IF_INCLUDE
 * item each matches, so that every host can be given the same order of
 * subnets and its modules the same indices; among those of one item (or
 * with no list), per interface in addr_before's order, else in the
 * kernel's. */
static int select_addrs(ferry_ctx_t *ctx, const tcp_params_t *p, tcp_local_addr_t *sel,
                        int *n_out)
{
    if_item_t inc[TCP_IF_ITEMS], exc[TCP_IF_ITEMS];
    int ninc = 0, nexc = 0;
    int rc;
    if ((rc = parse_if_list(ctx, "FERRY_TCP_IF_INCLUDE", p->if_include, inc, &ninc)) !=
            FERRY_OK ||
        (rc = parse_if_list(ctx, "FERRY_TCP_IF_EXCLUDE", p->if_exclude, exc, &nexc)) != FERRY_OK)
        return rc;
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0)
        return rt_log_errno(&ctx->log, "tcp: getifaddrs", errno);
    int n = 0;
    int order[TCP_MAX_ADDRS];
    for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
        if (i->ifa_addr == NULL || !(i->ifa_flags & IFF_UP) ||
            (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
            continue;
        tcp_addr_entry_t a = {0};
        if (i->ifa_addr->sa_family == AF_INET) {
            a.family = 4;
            memcpy(a.addr, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
            if (i->ifa_netmask != NULL)
                a.prefix = (uint8_t)mask_len(
                    (const uint8_t *)&((struct sockaddr_in *)i->ifa_netmask)->sin_addr, 4);
        } else {
            a.family = 6;
            memcpy(a.addr, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
            /* Link-local addresses need a scope a peer cannot name. */
            if (a.addr[0] == 0xfe && (a.addr[1] & 0xc0) == 0x80)
                continue;
            if (i->ifa_netmask != NULL)
                a.prefix = (uint8_t)mask_len(
                    (const uint8_t *)&((struct sockaddr_in6 *)i->ifa_netmask)->sin6_addr, 16);
        }
        int at = 0;
        if (ninc > 0) {
            while (at < ninc && !if_match(&inc[at], 1, i->ifa_name, &a))
                at++;
            if (at == ninc)
                continue;
        }
        if (nexc > 0 && if_match(exc, nexc, i->ifa_name, &a))
            continue;
        if (n == TCP_MAX_ADDRS) {
            rt_log(&ctx->log, RT_LOG_WARN,
                   "tcp: more than %d addresses selected; %s and later ones unused "
                   "(narrow FERRY_TCP_IF_INCLUDE)",
                   TCP_MAX_ADDRS, i->ifa_name);
            break;
        }
        /* Insertion by include item (then, per interface, by address)
         * keeps the kernel's order among equals. */
        int j = n++;
        while (j > 0 && (order[j - 1] > at ||
                         (order[j - 1] == at && p->per_interface &&
                          addr_before(&a, &sel[j - 1].addr)))) {
            order[j] = order[j - 1];
            sel[j] = sel[j - 1];
            j--;
        }
        order[j] = at;
        memset(&sel[j], 0, sizeof(sel[j]));
        sel[j].addr = a;
        snprintf(sel[j].ifname, sizeof(sel[j].ifname), "%s", i->ifa_name);
    }
    freeifaddrs(ifs);
    *n_out = n;
    if (n == 0) {
        rt_log(&ctx->log, ninc > 0 ? RT_LOG_WARN : RT_LOG_INFO,
               "tcp: no usable interface%s%s%s", ninc > 0 ? " matches FERRY_TCP_IF_INCLUDE='" : "",
               ninc > 0 ? p->if_include : "", ninc > 0 ? "'" : "");
        return FERRY_ERR_UNREACH;
    }
    return FERRY_OK;
}

/* What one module of an open is: its addresses, its index and link. */
typedef struct tcp_plan {
    const tcp_params_t *p;
    const tcp_local_addr_t *addrs;
    int naddrs;
    int index, link;
    tcp_regtab_t *tab; /* the registrations all the modules share */
} tcp_plan_t;

/* Opens a listener on each of the module's addresses. */
static int open_listeners(tcp_module_t *mod, const tcp_plan_t *plan)
{
    for (int i = 0; i < plan->naddrs; i++)
        if (open_listener(mod, &plan->addrs[i].addr, plan->addrs[i].ifname) == FERRY_OK)
            mod->local[mod->nlocal++] = mod->listeners[mod->nlisteners - 1].addr;
    return mod->nlisteners > 0 ? FERRY_OK : FERRY_ERR_UNREACH;
}

static int publish(tcp_module_t *mod)
{
    ferry_ctx_t *ctx = mod->super.ctx;
    tcp_addr_blob_t blob;
    memset(&blob, 0, sizeof(blob));
    blob.magic = (uint32_t)TCP_MAGIC;
    blob.version = TCP_VERSION;
    blob.count = (uint16_t)mod->nlisteners;
    for (int i = 0; i < mod->nlisteners; i++)
        blob.entry[i] = mod->listeners[i].addr;
    return rt_modex_put(ctx->modex, mod->key, &blob,
                        offsetof(tcp_addr_blob_t, entry) +
                            (size_t)blob.count * sizeof(tcp_addr_entry_t));
}

extern const ferry_btl_component_t btl_tcp_component;

/* Max-size descriptors are as large as the largest send: at most 256 of
 * them, and no more than 32 MiB worth (but at least 4). */
static size_t max_frags(const tcp_params_t *p)
{
    size_t n = p->free_list_max < 256 ? p->free_list_max : 256;
    size_t by_bytes = ((size_t)32 << 20) / p->max_send_size;
    if (by_bytes < 4)
        by_bytes = 4;
    return n < by_bytes ? n : by_bytes;
}

static int tcp_init(ferry_btl_module_t *btl, void *arg)
{
    tcp_module_t *mod = tcp_of(btl);
    const tcp_plan_t *plan = arg;
    const tcp_params_t *p = plan->p;
    mod->p = *p;
    mod->index = plan->index;
    mod->link = plan->link;
    /* The default (one module) keeps reading a peer's address only when it
     * connects; with several, add_procs tells which reach the peer. */
    mod->eager_reach = p->per_interface || p->links > 1;
    tcp_modex_key(plan->index, mod->key);
    mod->epfd = -1;
    mod->nranks = btl->ctx->size;
    util_list_init(&mod->conns);
    util_list_init(&mod->connecting);
    util_list_init(&mod->sending);
    util_list_init(&mod->completed);
    btl_amo_module_init(&mod->amo, &tcp_amo_hooks, p->atomic_slots);
    util_list_init(&mod->resume);
    util_list_init(&mod->evicted_conns);
    mod->eps = calloc((size_t)mod->nranks, sizeof(*mod->eps));
    mod->hot = calloc((size_t)mod->nranks, sizeof(*mod->hot));
    mod->same_host = calloc((size_t)mod->nranks, sizeof(*mod->same_host));
    tcp_regtab_attach(plan->tab, mod);
    if (mod->eps == NULL || mod->hot == NULL || mod->same_host == NULL)
        return FERRY_ERR_NO_MEMORY;
    mod->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (mod->epfd < 0)
        return rt_log_errno(&btl->ctx->log, "tcp: epoll_create1", errno);
    return FERRY_OK;
}

static int tcp_start(ferry_btl_module_t *btl, void *arg)
{
    return open_listeners(tcp_of(btl), arg);
}

/* The speed Linux reports for the interface (/sys/class/net/X/speed, in
 * Mb/s) in MB/s; 0 when it reports none (loopback, virtual devices, a link
 * that is down) or the name cannot be one. */
static uint32_t iface_bandwidth(const char *ifname)
{
    char name[IF_NAMESIZE];
    size_t len = strcspn(ifname, ":"); /* an alias ("eth0:1") is its device's */
    if (len == 0 || len >= sizeof(name) || ifname[0] == '.' || memchr(ifname, '/', len) != NULL)
        return 0;
    memcpy(name, ifname, len);
    name[len] = '\0';
    char path[64];
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", name);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    long speed = -1;
    if (fscanf(f, "%ld", &speed) != 1)
        speed = -1;
    fclose(f);
    if (speed <= 0)
        return 0;
    if (speed / 8 > (long)UINT32_MAX)
        return UINT32_MAX;
    return speed < 8 ? 1 : (uint32_t)(speed / 8);
}

/* The bandwidth of a module on these addresses: the interface's when they
 * are all on one that Linux knows the speed of, else the default. */
static uint32_t plan_bandwidth(const tcp_plan_t *plan, uint32_t def)
{
    for (int i = 1; i < plan->naddrs; i++)
        if (strcmp(plan->addrs[i].ifname, plan->addrs[0].ifname) != 0)
            return def;
    uint32_t bw = plan->naddrs > 0 ? iface_bandwidth(plan->addrs[0].ifname) : 0;
    return bw > 0 ? bw : def;
}

/* One line at info level per module: where it listens. */
static void log_module(tcp_module_t *mod)
{
    char where[512];
    size_t off = 0;
    where[0] = '\0';
    for (int i = 0; i < mod->nlisteners && off < sizeof(where); i++) {
        const tcp_listener_t *l = &mod->listeners[i];
        char ip[INET6_ADDRSTRLEN] = "?";
        inet_ntop(l->addr.family == 4 ? AF_INET : AF_INET6, l->addr.addr, ip, sizeof(ip));
        int w = snprintf(where + off, sizeof(where) - off, "%s%s %s:%u", i > 0 ? ", " : "",
                         l->ifname, ip, (unsigned)l->addr.port);
        if (w < 0)
            break;
        off += (size_t)w;
    }
    rt_log(&mod->super.ctx->log, RT_LOG_INFO,
           "tcp: module %d (link %d of %lld) on %s; bandwidth %u MB/s, modex key %s",
           mod->index, mod->link, mod->p.links, where, mod->super.attr.bandwidth, mod->key);
}

static void close_modules(ferry_btl_module_t **mods, int n)
{
    for (int k = 0; k < n; k++)
        mods[k]->ops->finalize(mods[k]);
    free(mods);
}

/* Publishes every module's address, and the job's key once (all modules
 * share it). */
static int publish_all(ferry_btl_module_t **mods, int n)
{
    int rc = FERRY_OK;
    for (int k = 0; k < n && rc == FERRY_OK; k++)
        rc = publish(tcp_of(mods[k]));
    if (rc != FERRY_OK)
        return rc;
    tcp_module_t *first = tcp_of(mods[0]);
    rc = tcp_jobkey_publish(first);
    if (rc != FERRY_OK || !first->have_jobkey)
        return rc;
    for (int k = 1; k < n; k++) {
        tcp_module_t *mod = tcp_of(mods[k]);
        memcpy(mod->jobkey, first->jobkey, sizeof(mod->jobkey));
        mod->job_id = first->job_id;
        mod->job_hash = first->job_hash;
        mod->have_jobkey = true;
    }
    return FERRY_OK;
}

static int tcp_open(ferry_ctx_t *ctx, ferry_btl_module_t ***modules_out, int *count_out)
{
    tcp_params_t p;
    int rc = tcp_read_params(ctx, &p);
    if (rc != FERRY_OK)
        return rc;
    tcp_local_addr_t sel[TCP_MAX_ADDRS];
    int nsel = 0;
    rc = select_addrs(ctx, &p, sel, &nsel);
    if (rc != FERRY_OK)
        return rc;
    ferry_btl_attr_t attr = {
        .name = "tcp",
        .eager_limit = p.eager_limit,
        .max_send_size = p.max_send_size,
        .rdma_pipeline_frag_size = 4u << 20,
        .min_rdma_size = 0,
        .max_rdma_size = TCP_MAX_RDMA,
        .exclusivity = 1024,
        .latency = 10000,
        .bandwidth = 3000,
        .flags = FERRY_BTL_FLAG_SEND | FERRY_BTL_FLAG_SEND_INPLACE | FERRY_BTL_FLAG_PUT |
                 FERRY_BTL_FLAG_GET | FERRY_BTL_FLAG_SENDI | FERRY_BTL_FLAG_ATOMIC_OPS |
                 FERRY_BTL_FLAG_ATOMIC_FOPS |
                 /* A put's frame goes on ep->queue with the sends, in
                  * order on one socket, and the target reads its data into
                  * place before it parses the next frame. */
                 FERRY_BTL_FLAG_PUT_ORDERED,
        .reg_handle_size = sizeof(tcp_key_t),
        .atomic_flags = BTL_ATOMIC_SUPPORTS_CPU,
        .mem_per_peer = p.rx_buffer,
    };
    const uint32_t def_bandwidth = attr.bandwidth;
    const btl_frag_params_t fp = {
        .eager_size = p.eager_limit,
        .max_size = p.max_send_size,
        .num = p.free_list_num,
        .max = p.free_list_max,
        .inc = p.free_list_inc,
        .max_frags = max_frags(&p),
    };
    btl_base_open_args_t args = {
        .component = &btl_tcp_component,
        .module_size = sizeof(tcp_module_t),
        .attr = &attr,
        .ops = &tcp_ops,
        .frags_offset = offsetof(tcp_module_t, frags),
        .frag_params = &fp,
        .init = tcp_init,
        .start = tcp_start,
    };
    /* one: each link listens on every address; per-interface: each link
     * of each address is a module of its own. */
    int nplaces = p.per_interface ? nsel : 1;
    int want = nplaces * (int)p.links;
    ferry_btl_module_t **mods = calloc((size_t)want, sizeof(*mods));
    if (mods == NULL)
        return FERRY_ERR_NO_MEMORY;
    /* One registration table for all the modules: a registration is made
     * once and its key is the same bytes on every module, so a remote key
     * holds it once (README.md, "Modules and links"). Each module takes a
     * reference; this one is dropped once they are made. */
    tcp_regtab_t *tab = NULL;
    rc = tcp_regtab_create(p.reg_slots, &tab);
    if (rc != FERRY_OK) {
        free(mods);
        return rc;
    }
    int n = 0;
    for (int place = 0; place < nplaces; place++) {
        for (int link = 0; link < (int)p.links; link++) {
            tcp_plan_t plan = {
                .p = &p,
                .addrs = p.per_interface ? &sel[place] : sel,
                .naddrs = p.per_interface ? 1 : nsel,
                .index = n,
                .link = link,
                .tab = tab,
            };
            attr.bandwidth = plan_bandwidth(&plan, def_bandwidth);
            args.arg = &plan;
            rc = btl_base_module_create(ctx, &args, &mods[n]);
            if (rc == FERRY_ERR_INVALID || rc == FERRY_ERR_NO_MEMORY) {
                close_modules(mods, n);
                tcp_regtab_release(tab);
                return rc;
            }
            if (rc != FERRY_OK) {
                char ip[INET6_ADDRSTRLEN] = "?";
                inet_ntop(plan.addrs[0].addr.family == 4 ? AF_INET : AF_INET6,
                          plan.addrs[0].addr.addr, ip, sizeof(ip));
                rt_log(&ctx->log, RT_LOG_INFO, "tcp: no module for link %d on %s%s%s: %s", link,
                       p.per_interface ? ip : "the selected addresses",
                       p.per_interface ? " of " : "", p.per_interface ? plan.addrs[0].ifname : "",
                       ferry_strerror(rc));
                continue;
            }
            n++;
        }
    }
    tcp_regtab_release(tab);
    if (n == 0) {
        free(mods);
        return rc != FERRY_OK ? rc : FERRY_ERR_UNREACH;
    }
    /* Per interface, which module pairs with which of a peer's is worked
     * out once per peer for all the modules (tcp_pair.c). */
    if (p.per_interface) {
        tcp_pairs_t *pairs = NULL;
        rc = tcp_pairs_create(ctx->size, n, &pairs);
        if (rc != FERRY_OK) {
            close_modules(mods, n);
            return rc;
        }
        for (int k = 0; k < n; k++)
            tcp_pairs_attach(pairs, tcp_of(mods[k]));
        tcp_pairs_release(pairs);
    }
    rc = publish_all(mods, n);
    if (rc != FERRY_OK) {
        close_modules(mods, n);
        return rc;
    }
    for (int k = 0; k < n; k++)
        log_module(tcp_of(mods[k]));
    *modules_out = mods;
    *count_out = n;
    return FERRY_OK;
}

const ferry_btl_component_t btl_tcp_component = {
    .name = "tcp",
    .description = "TCP sockets between processes on any hosts",
    .register_params = tcp_register_params,
    .open = tcp_open,
};
