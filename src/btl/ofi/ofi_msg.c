/*
 * ofi messages: transmit slots, pre-posted receive buffers, and the
 * completion queue that progress reads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "btl/ofi/ofi.h"

static size_t align_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

static void *area_alloc(size_t len)
{
    void *p = NULL;
    /* Page aligned and touched: FI_MR_ALLOCATED wants backed memory. */
    if (posix_memalign(&p, 4096, align_up(len, 4096)) != 0)
        return NULL;
    memset(p, 0, len);
    return p;
}

/* ---- transmit ---- */

int ofi_tx_init(ofi_module_t *mod)
{
    size_t n = mod->p.tx_slots;
    mod->tx_slot_size = align_up(sizeof(ofi_hdr_t) + mod->p.max_send_size, OFI_SLOT_ALIGN);
    mod->tx_area = area_alloc(n * mod->tx_slot_size);
    mod->tx_ctx = calloc(n, sizeof(*mod->tx_ctx));
    mod->tx_free = calloc(n, sizeof(*mod->tx_free));
    mod->inject_buf = malloc(mod->inject_size > 0 ? mod->inject_size : 1);
    if (mod->tx_area == NULL || mod->tx_ctx == NULL || mod->tx_free == NULL ||
        mod->inject_buf == NULL)
        return FERRY_ERR_NO_MEMORY;
    int rc = ofi_mr_register(mod, mod->tx_area, n * mod->tx_slot_size, FERRY_ACCESS_LOCAL,
                             &mod->tx_reg);
    if (rc != FERRY_OK)
        return rc;
    for (size_t i = 0; i < n; i++) {
        mod->tx_ctx[i].kind = OFI_CTX_TX;
        mod->tx_ctx[i].index = (uint32_t)i;
        mod->tx_ctx[i].buf = mod->tx_area + i * mod->tx_slot_size;
        mod->tx_free[i] = (uint32_t)(n - 1 - i);
    }
    mod->tx_nfree = n;
    return FERRY_OK;
}

void ofi_tx_fini(ofi_module_t *mod)
{
    if (mod->tx_reg != NULL)
        ofi_mr_deregister(mod, mod->tx_reg);
    mod->tx_reg = NULL;
    free(mod->tx_area);
    free(mod->tx_ctx);
    free(mod->tx_free);
    free(mod->inject_buf);
    mod->tx_area = NULL;
    mod->tx_ctx = NULL;
    mod->tx_free = NULL;
    mod->inject_buf = NULL;
    mod->tx_nfree = 0;
}

/* Builds a message in out: header (as ofi_wire_fill makes it), then the
 * caller's parts. */
static size_t build_msg(unsigned char *out, const ofi_hdr_t *h, const struct iovec *parts,
                        int nparts)
{
    size_t off = sizeof(*h);
    memcpy(out, h, sizeof(*h));
    for (int i = 0; i < nparts; i++) {
        if (parts[i].iov_len > 0)
            memcpy(out + off, parts[i].iov_base, parts[i].iov_len);
        off += parts[i].iov_len;
    }
    return off;
}

/* post_msg's answer when the window or the transmit slots are full. */
#define POST_NO_ROOM 1

/* Hands one message to libfabric: 0, the provider's negative code
 * (-FI_EAGAIN for "later"), or POST_NO_ROOM. */
static ssize_t post_msg(ofi_module_t *mod, ferry_btl_endpoint_t *ep, const struct iovec *parts,
                        int nparts, uint8_t tag, uint8_t type, uint32_t seq)
{
    size_t total = sizeof(ofi_hdr_t);
    for (int i = 0; i < nparts; i++)
        total += parts[i].iov_len;
    bool ordered = ofi_wire_ordered(type);
    ofi_hdr_t h;
    ssize_t rc;

    if (ordered && !ofi_wire_can_send(&ep->wire, mod->window))
        return POST_NO_ROOM;
    if (ep->settle_until_ns != 0 && !ofi_ep_settled(ep))
        return POST_NO_ROOM;
    ofi_wire_fill(&ep->wire, &h, (uint32_t)mod->super.ctx->rank, type, tag, seq);
    if (total <= mod->inject_size) {
        /* Inline: the provider copies it before returning, and no
         * completion comes back. */
        build_msg(mod->inject_buf, &h, parts, nparts);
        ofi_call_enter(mod);
        rc = fi_inject(mod->ep, mod->inject_buf, total, ep->fi_addr);
        ofi_call_leave(mod);
    } else {
        if (mod->tx_nfree == 0)
            return POST_NO_ROOM;
        ofi_opctx_t *oc = &mod->tx_ctx[mod->tx_free[mod->tx_nfree - 1]];
        build_msg(oc->buf, &h, parts, nparts);
        oc->ep = ep;
        ofi_call_enter(mod);
        rc = fi_send(mod->ep, oc->buf, total, fi_mr_desc(mod->tx_reg->mr), ep->fi_addr,
                     &oc->fctx);
        ofi_call_leave(mod);
        if (rc == 0)
            mod->tx_nfree--;
    }
    if (rc == 0)
        ofi_wire_sent(&ep->wire, &h);
    return rc;
}

/* A post's outcome as ferry says it; a failure fails the peer. */
static int post_status(ofi_module_t *mod, ferry_btl_endpoint_t *ep, ssize_t rc)
{
    if (rc == 0)
        return FERRY_OK;
    if (rc == -FI_EAGAIN || rc == POST_NO_ROOM)
        return FERRY_ERR_NO_RESOURCE;
    char why[128];
    snprintf(why, sizeof(why), "posting a send failed: %s", fi_strerror((int)-rc));
    ofi_ep_fail(mod, ep, FERRY_ERR_UNREACH, true, why);
    return FERRY_ERR_UNREACH;
}

int ofi_post_send(ofi_module_t *mod, ferry_btl_endpoint_t *ep, const void *header,
                  size_t header_len, const void *payload, size_t payload_len, uint8_t tag,
                  uint8_t type, uint32_t seq)
{
    const struct iovec parts[2] = {{(void *)header, header_len}, {(void *)payload, payload_len}};
    return post_status(mod, ep, post_msg(mod, ep, parts, 2, tag, type, seq));
}

int ofi_post_sendv(ofi_module_t *mod, ferry_btl_endpoint_t *ep, const struct iovec *parts,
                   int nparts, uint8_t tag, uint8_t type)
{
    return post_status(mod, ep, post_msg(mod, ep, parts, nparts, tag, type, 0));
}

int ofi_post_ctrl(ofi_module_t *mod, ferry_btl_endpoint_t *ep, uint8_t type, uint32_t seq)
{
    ssize_t rc = post_msg(mod, ep, NULL, 0, 0, type, seq);
    if (rc == 0)
        return FERRY_OK;
    if (rc != -FI_EAGAIN && rc != POST_NO_ROOM)
        rt_log(&mod->super.ctx->log, RT_LOG_DEBUG, "ofi: control message %u to rank %d: %s",
               (unsigned)type, ep->rank, fi_strerror((int)-rc));
    return rc == -FI_EAGAIN || rc == POST_NO_ROOM ? FERRY_ERR_NO_RESOURCE : FERRY_ERR_UNREACH;
}

/* Returns credits now, or owes them (the acking list) when the provider
 * has no room. */
static void send_ack(ofi_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (ep->ack_due)
        return;
    if (ofi_post_ctrl(mod, ep, OFI_T_ACK, 0) == FERRY_ERR_NO_RESOURCE) {
        ep->ack_due = true;
        util_list_append(&mod->acking, &ep->ack_link);
    }
}

int ofi_send_acks(ofi_module_t *mod)
{
    int n = 0;
    util_list_item_t *it;
    while ((it = util_list_first(&mod->acking)) != NULL) {
        ferry_btl_endpoint_t *ep = UTIL_CONTAINER_OF(it, ferry_btl_endpoint_t, ack_link);
        if (ep->state == OFI_EP_READY && ofi_wire_unacked_rx(&ep->wire) > 0 &&
            ofi_post_ctrl(mod, ep, OFI_T_ACK, 0) == FERRY_ERR_NO_RESOURCE)
            break;
        util_list_remove(&mod->acking, it);
        ep->ack_due = false;
        n++;
    }
    return n;
}

/* ---- receive ---- */

int ofi_rx_init(ofi_module_t *mod)
{
    if (mod->use_multi_recv) {
        mod->rx_nbufs = 4;
        mod->rx_buf_size = align_up(mod->p.multi_recv_size, OFI_SLOT_ALIGN);
    } else {
        mod->rx_nbufs = mod->p.rx_slots;
        mod->rx_buf_size = align_up(sizeof(ofi_hdr_t) + mod->p.max_send_size, OFI_SLOT_ALIGN);
    }
    mod->rx_area = area_alloc(mod->rx_nbufs * mod->rx_buf_size);
    mod->rx_ctx = calloc(mod->rx_nbufs, sizeof(*mod->rx_ctx));
    if (mod->rx_area == NULL || mod->rx_ctx == NULL)
        return FERRY_ERR_NO_MEMORY;
    int rc = ofi_mr_register(mod, mod->rx_area, mod->rx_nbufs * mod->rx_buf_size,
                             FERRY_ACCESS_LOCAL, &mod->rx_reg);
    if (rc != FERRY_OK)
        return rc;
    for (size_t i = 0; i < mod->rx_nbufs; i++) {
        mod->rx_ctx[i].kind = OFI_CTX_RX;
        mod->rx_ctx[i].index = (uint32_t)i;
        mod->rx_ctx[i].buf = mod->rx_area + i * mod->rx_buf_size;
        mod->rx_ctx[i].buf_len = mod->rx_buf_size;
    }
    return FERRY_OK;
}

void ofi_rx_fini(ofi_module_t *mod)
{
    /* The endpoint is closed by now: no buffer is with the provider. */
    if (mod->rx_reg != NULL)
        ofi_mr_deregister(mod, mod->rx_reg);
    mod->rx_reg = NULL;
    free(mod->rx_area);
    free(mod->rx_ctx);
    mod->rx_area = NULL;
    mod->rx_ctx = NULL;
    mod->rx_posted = 0;
}

static int rx_post(ofi_module_t *mod, ofi_opctx_t *oc)
{
    ssize_t rc;
    void *desc = fi_mr_desc(mod->rx_reg->mr);
    if (mod->use_multi_recv) {
        struct iovec iov = {.iov_base = oc->buf, .iov_len = oc->buf_len};
        struct fi_msg msg = {
            .msg_iov = &iov,
            .desc = &desc,
            .iov_count = 1,
            .addr = FI_ADDR_UNSPEC,
            .context = &oc->fctx,
        };
        ofi_call_enter(mod);
        rc = fi_recvmsg(mod->ep, &msg, FI_MULTI_RECV);
        ofi_call_leave(mod);
    } else {
        ofi_call_enter(mod);
        rc = fi_recv(mod->ep, oc->buf, oc->buf_len, desc, FI_ADDR_UNSPEC, &oc->fctx);
        ofi_call_leave(mod);
    }
    if (rc == 0) {
        oc->posted = true;
        mod->rx_posted++;
        return FERRY_OK;
    }
    /* shm (1.17) says -FI_ENOMEM while its receive entries are held by
     * work a dead peer left unfinished: a shortage like -FI_EAGAIN, so the
     * buffer is posted again at the next progress call. */
    if (rc == -FI_EAGAIN || rc == -FI_ENOMEM)
        return FERRY_ERR_NO_RESOURCE;
    return ofi_log_error(mod, "posting a receive buffer", (int)rc);
}

/* Posts every buffer that is not with the provider. -FI_EAGAIN leaves the
 * rest for the next progress call. */
int ofi_rx_post_all(ofi_module_t *mod)
{
    if (mod->rx_posted == mod->rx_nbufs)
        return FERRY_OK;
    for (size_t i = 0; i < mod->rx_nbufs; i++) {
        if (mod->rx_ctx[i].posted)
            continue;
        int rc = rx_post(mod, &mod->rx_ctx[i]);
        if (rc == FERRY_ERR_NO_RESOURCE)
            return FERRY_OK;
        if (rc != FERRY_OK)
            return rc;
    }
    return FERRY_OK;
}

/* ---- what arrives ---- */

/* The ofi_wire_ops_t of the module: the receive side's decisions are
 * ofi_wire.c's, what they do to endpoints is here. */
static ofi_wire_peer_t *wire_peer(void *arg, int rank)
{
    ofi_module_t *mod = arg;
    ferry_btl_endpoint_t *ep = mod->eps[rank];
    return ep != NULL && ep->state == OFI_EP_READY ? &ep->wire : NULL;
}

static void wire_heard(void *arg, int rank, const ofi_hdr_t *h)
{
    ofi_module_t *mod = arg;
    ferry_btl_endpoint_t *ep = mod->eps[rank];
    ep->heard = true;
    ep->held_heard = true;
    ep->used = true;
}

static void wire_deliver(void *arg, int rank, const ofi_hdr_t *h, const unsigned char *payload,
                         size_t len)
{
    ofi_module_t *mod = arg;
    ferry_btl_endpoint_t *ep = mod->eps[rank];
    if (h->type == OFI_T_CLOSE) {
        /* The peer finalized: from now on nothing goes to it, and its exit
         * is expected. Work still waiting for it will never be taken: that
         * is a failure (as sm says it), else nobody is told. */
        if (!util_list_empty(&ep->queue) || ep->rdma_inflight > 0 || ep->putn.ninflight > 0) {
            ofi_ep_fail(mod, ep, FERRY_ERR_UNREACH, false,
                        "it finalized with work pending to it");
            return;
        }
        ep->state = OFI_EP_CLOSED;
        ofi_live_unwatch(mod, ep);
        ofi_ep_fail_pending(mod, ep, FERRY_ERR_UNREACH);
        return;
    }
    if (h->type == OFI_T_AMO_REQ || h->type == OFI_T_AMO_ANSWER) {
        ofi_amo_deliver(mod, ep, h->type, payload, len);
        return;
    }
    if (h->type == OFI_T_PUTN || h->type == OFI_T_PUTN_ANSWER) {
        ofi_putn_deliver(mod, ep, h, payload, len);
    } else {
        ferry_btl_segment_t seg = {.addr = (uint64_t)(uintptr_t)payload, .len = len};
        ferry_btl_recv_desc_t rd = {
            .ep = ep,
            .peer = rank,
            .tag = h->tag,
            .segs = &seg,
            .seg_cnt = 1,
        };
        btl_base_deliver(&mod->super, &rd);
    }
    /* Credits go back with our next message to it, or alone once half a
     * window is owed. */
    if (ep->state == OFI_EP_READY && ofi_wire_unacked_rx(&ep->wire) >= mod->window / 2)
        send_ack(mod, ep);
}

static void wire_control(void *arg, int rank, const ofi_hdr_t *h)
{
    ofi_module_t *mod = arg;
    ferry_btl_endpoint_t *ep = mod->eps[rank];
    switch (h->type) {
    case OFI_T_PROBE:
        /* Best effort: a lost answer means another probe. */
        (void)ofi_post_ctrl(mod, ep, OFI_T_PONG, h->seq);
        break;
    case OFI_T_FAIL:
        /* seq: the status it failed us with. */
        ofi_ep_fail(mod, ep, FERRY_ERR_UNREACH, false,
                    h->seq == (uint32_t)-FERRY_ERR_PROTO
                        ? "it refused a message of this process as breaking the protocol, and "
                          "no longer talks to it"
                        : "it failed this process (a broken connection, a lost message or a "
                          "silence on its side) and no longer talks to it");
        break;
    default:
        /* PONG and ACK: heard, and their credits taken. */
        break;
    }
}

static const ofi_wire_ops_t wire_ops = {
    .peer = wire_peer,
    .heard = wire_heard,
    .deliver = wire_deliver,
    .control = wire_control,
};

/* A refused message: a stranger's is logged (rate-limited); one from a rank
 * of the job that broke the protocol fails that rank, which is told. */
static void refuse(ofi_module_t *mod, int rank, ofi_wire_verdict_t v, const ofi_hdr_t *h,
                   size_t len)
{
    mod->refused++;
    if (rank < 0) {
        rt_log_limited(&mod->super.ctx->log, &mod->rl_stranger, RT_LOG_WARN,
                       "ofi (%s): refused a %zu-byte message from an address that is no rank "
                       "of the job%s%s (it claims rank %u, type %u, tag %u)",
                       mod->my_addr.prov, len, v == OFI_WIRE_UNKNOWN ? "" : "; it is ",
                       v == OFI_WIRE_UNKNOWN ? "" : ofi_wire_verdict_str(v), h->src, h->type,
                       h->tag);
        return;
    }
    ferry_btl_endpoint_t *ep = mod->eps[rank];
    if (v == OFI_WIRE_NOT_PEER) {
        /* A late message of a peer we failed: it is told again (from the
         * next check), in case it missed the first notice. */
        rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
               "ofi: message of type %u from rank %d, which is no longer a peer; dropped",
               h->type, rank);
        if (ep != NULL && ep->state == OFI_EP_FAILED && !ep->tell_failed &&
            h->type != OFI_T_FAIL) {
            ep->tell_failed = true;
            ep->fail_tries = 1;
        }
        return;
    }
    rt_log_limited(&mod->super.ctx->log, &mod->rl_peer, RT_LOG_WARN,
                   "ofi (%s): refused a %zu-byte message from rank %d: %s (it claims rank %u, "
                   "type %u, tag %u, seq %u)",
                   mod->my_addr.prov, len, rank, ofi_wire_verdict_str(v), h->src, h->type, h->tag,
                   h->seq);
    if (ep != NULL) {
        char why[160];
        snprintf(why, sizeof(why), "sent a message that %s",
                 v == OFI_WIRE_NO_MEMORY ? "could not be held (out of memory)"
                                         : "breaks the protocol; see the warning before");
        ofi_ep_fail(mod, ep, v == OFI_WIRE_NO_MEMORY ? FERRY_ERR_NO_MEMORY : FERRY_ERR_PROTO, true,
                    why);
    }
}

/* One message from the fabric: src is its sender's address, the only word
 * on who sent it that counts; the bytes are untrusted until checked. */
static void handle_msg(ofi_module_t *mod, fi_addr_t src, const unsigned char *buf, size_t len)
{
    int rank = ofi_rank_of(mod, src);
    ofi_hdr_t h;
    ofi_wire_verdict_t v = ofi_wire_receive(buf, len, rank, (uint32_t)mod->nranks, mod->window,
                                            &wire_ops, mod, &h);
    if (v == OFI_WIRE_HELD)
        rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
               "ofi: message %u from rank %d (%zu bytes) came before %u; held (%u held)", h.seq,
               rank, len, mod->eps[rank]->wire.rx_next, mod->eps[rank]->wire.nheld);
    else if (v != OFI_WIRE_OK)
        refuse(mod, rank, v, &h, len);
}

/* ---- completion queue ---- */

static void rx_buffer_back(ofi_module_t *mod, ofi_opctx_t *oc, uint64_t flags)
{
    if ((flags & FI_MULTI_RECV) || !mod->use_multi_recv) {
        if (oc->posted)
            mod->rx_posted--;
        oc->posted = false;
    }
}

static void handle_error(ofi_module_t *mod)
{
    struct fi_cq_err_entry err;
    char text[256];
    memset(&err, 0, sizeof(err));
    ofi_call_enter(mod);
    ssize_t rc = fi_cq_readerr(mod->cq, &err, 0);
    ofi_call_leave(mod);
    if (rc < 0) {
        if (rc != -FI_EAGAIN)
            ofi_log_error(mod, "fi_cq_readerr", (int)rc);
        return;
    }
    const char *ptext = fi_cq_strerror(mod->cq, err.prov_errno, err.err_data, text,
                                       sizeof(text));
    if (ptext == NULL)
        ptext = fi_strerror(err.err);
    ofi_opctx_t *oc = err.op_context;
    if (oc == NULL) {
        /* No operation named: the provider failed work a peer started here
         * (shm copies a peer's large write on the target's side, and that
         * copy fails once the peer has died), or one of ours whose context
         * it lost (shm reports a failed cross-memory copy of its fast path
         * so). A peer's work is told to the peer by its own completion; one
         * of ours fails by its deadline (FERRY_OFI_REQUEST_TIMEOUT). Nobody
         * is failed, since the provider does not say which peer it was. */
        rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
               "ofi (%s): error completion that names no operation: %s", mod->my_addr.prov,
               ptext);
        return;
    }
    switch (oc->kind) {
    case OFI_CTX_RX:
        if (err.err == FI_EADDRNOTAVAIL && mod->source_err) {
            /* FI_SOURCE_ERR: a message from an address not in the vector,
             * that is from no rank of the job (all are inserted). */
            ofi_hdr_t h;
            memset(&h, 0, sizeof(h));
            const unsigned char *buf = mod->use_multi_recv ? err.buf : oc->buf;
            if (buf != NULL && err.len >= sizeof(h))
                memcpy(&h, buf, sizeof(h));
            refuse(mod, -1, OFI_WIRE_UNKNOWN, &h, err.len);
        } else if (err.err != FI_ECANCELED && !mod->closing) {
            /* A receive buffer came back unused (canceled at close, or the
             * provider gave up on it): it goes back unless we are closing. */
            rt_log(&mod->super.ctx->log, RT_LOG_WARN, "ofi: receive failed: %s", ptext);
        }
        rx_buffer_back(mod, oc, err.flags);
        break;
    case OFI_CTX_TX: {
        mod->tx_free[mod->tx_nfree++] = oc->index;
        ferry_btl_endpoint_t *ep = oc->ep;
        /* ferry cancels nothing itself before closing: a canceled send
         * before that is the provider giving up on the peer (ofi_rxm
         * cancels what was in flight on a connection that died). A
         * connection that broke lost what was on it, so both ends must
         * know: the peer is told (OFI_T_FAIL). */
        if (ep != NULL && !mod->closing) {
            char why[320];
            snprintf(why, sizeof(why), "send failed: %s", ptext);
            ofi_ep_fail(mod, ep, FERRY_ERR_UNREACH, true, why);
        }
        break;
    }
    case OFI_CTX_RMA: {
        int status = ofi_status_from_fi(err.err);
        ferry_btl_endpoint_t *ep = oc->ep;
        /* The target refused the key or the range: that operation fails,
         * the peer is fine. Anything else but the case below means the
         * connection or the peer is gone. */
        const char *what = oc->frag == NULL              ? "put/get (completed before)"
                           : oc->frag->op == OFI_OP_PUT ? "put"
                                                        : "get";
        /* ofi_rxm over tcp (1.17) has no error answer for a key the
         * target no longer knows: the target's tcp provider drops the
         * connection, and the initiator's operation comes back canceled,
         * with the target's "no such key" (ENOENT) as the provider's code
         * when that answer got through (usually: a get, a small put), with
         * a connection error when it did not (a large put whose data still
         * flowed; now and then a small one under load). Either way this
         * operation failed, but the peer may well be alive: ofi_rxm
         * connects again for the next message, which waits
         * (settle_until_ns) until the broken connection is gone, and the
         * peer becomes a suspect that the liveness check probes (a peer on
         * this host: its process decides). A message lost with the
         * connection shows as a hole in its sequence and fails the peer
         * (ofi_live.c), so nothing is lost unreported. A target being
         * killed can answer "no such key" too, as its registrations go
         * before its process: that operation's verdict waits on the
         * peer's liveness. */
        bool broken = err.err == FI_ECANCELED && !mod->closing && oc->frag != NULL;
        bool key_refused = broken && err.prov_errno == FI_ENOENT;
        if (broken) {
            ep->settle_until_ns = rt_now_coarse_ns() + OFI_SETTLE_NS;
            if (!ep->local)
                ep->suspect = true;
        }
        if (key_refused) {
            /* A target that is being killed closes its sockets before its
             * process is gone, and can send that answer on the way: the
             * operation's verdict, ACCESS or UNREACH, waits on the peer's
             * liveness (ofi_rdma_release_held). */
            rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
                   "ofi: %s to rank %d refused as its connection broke (%s): held until its "
                   "liveness is known",
                   what, ep->rank, ptext);
            ofi_rdma_hold(mod, oc);
        } else if (status == FERRY_ERR_ACCESS || status == FERRY_ERR_INVALID || broken) {
            rt_log(&mod->super.ctx->log, RT_LOG_DEBUG, "ofi: %s to rank %d %s: %s", what,
                   ep->rank, !broken ? "refused" : "lost its connection", ptext);
            ofi_rdma_done(mod, oc, broken ? FERRY_ERR_UNREACH : FERRY_ERR_ACCESS);
        } else {
            char why[320];
            snprintf(why, sizeof(why), "%s failed: %s", what, ptext);
            /* Canceled while not closing: as for sends, the provider gave
             * up on the peer. */
            ofi_rdma_done(mod, oc, mod->closing ? FERRY_ERR_CANCELED : FERRY_ERR_UNREACH);
            if (!mod->closing)
                ofi_ep_fail(mod, ep, FERRY_ERR_UNREACH, true, why);
        }
        break;
    }
    }
}

int ofi_poll_cq(ofi_module_t *mod)
{
    struct fi_cq_data_entry ent[16];
    fi_addr_t src[16];
    int n = 0;
    if (mod->cq == NULL)
        return 0;
    for (int round = 0; round < 4; round++) {
        ofi_call_enter(mod);
        ssize_t got = fi_cq_readfrom(mod->cq, ent, 16, src);
        ofi_call_leave(mod);
        if (got == -FI_EAGAIN)
            break;
        if (got == -FI_EAVAIL) {
            handle_error(mod);
            n++;
            continue;
        }
        if (got < 0)
            return ofi_log_error(mod, "fi_cq_read", (int)got);
        for (ssize_t i = 0; i < got; i++) {
            ofi_opctx_t *oc = ent[i].op_context;
            if ((ent[i].flags & (FI_REMOTE_CQ_DATA | FI_RECV)) == FI_REMOTE_CQ_DATA) {
                /* A split put's write landed (ofi_wire.h). */
                ofi_putn_landed_from(mod, src[i], ent[i].data);
                n++;
                continue;
            }
            if (oc == NULL)
                continue;
            switch (oc->kind) {
            case OFI_CTX_TX:
                mod->tx_free[mod->tx_nfree++] = oc->index;
                break;
            case OFI_CTX_RMA:
                /* A completion is a sign of life, and a put's says it was
                 * delivered. */
                if (oc->ep != NULL)
                    oc->ep->heard = true;
                ofi_rdma_done(mod, oc, FERRY_OK);
                break;
            case OFI_CTX_RX:
                if ((ent[i].flags & FI_RECV) && (ent[i].len > 0 || !mod->use_multi_recv)) {
                    const unsigned char *buf = mod->use_multi_recv ? ent[i].buf : oc->buf;
                    if (buf != NULL)
                        handle_msg(mod, src[i], buf, ent[i].len);
                }
                /* The buffer is ours again once released; every message in
                 * it has been handled above. */
                rx_buffer_back(mod, oc, ent[i].flags);
                break;
            }
            n++;
        }
        if (got < 16)
            break;
    }
    if (mod->rx_posted < mod->rx_nbufs && !mod->closing) {
        int rc = ofi_rx_post_all(mod);
        if (rc != FERRY_OK)
            return rc;
    }
    return n;
}
