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

static size_t build_msg(unsigned char *out, uint32_t src, uint32_t seq, uint8_t tag,
                        uint8_t type, const void *header, size_t header_len,
                        const void *payload, size_t payload_len)
{
    const ofi_hdr_t h = {
        .src = src, .seq = seq, .tag = tag, .type = type, .magic = OFI_HDR_MAGIC};
    memcpy(out, &h, sizeof(h));
    if (header_len > 0)
        memcpy(out + sizeof(h), header, header_len);
    if (payload_len > 0)
        memcpy(out + sizeof(h) + header_len, payload, payload_len);
    return sizeof(h) + header_len + payload_len;
}

int ofi_post_send(ofi_module_t *mod, ferry_btl_endpoint_t *ep, const void *header,
                  size_t header_len, const void *payload, size_t payload_len, uint8_t tag,
                  uint8_t type)
{
    uint32_t me = (uint32_t)mod->super.ctx->rank;
    size_t total = sizeof(ofi_hdr_t) + header_len + payload_len;
    ssize_t rc;

    if (total <= mod->inject_size) {
        /* Inline: the provider copies it before returning, and no
         * completion comes back. */
        build_msg(mod->inject_buf, me, ep->tx_seq, tag, type, header, header_len, payload, payload_len);
        rc = fi_inject(mod->ep, mod->inject_buf, total, ep->fi_addr);
        if (rc == 0) {
            ep->tx_seq++;
            return FERRY_OK;
        }
    } else {
        if (mod->tx_nfree == 0)
            return FERRY_ERR_NO_RESOURCE;
        ofi_opctx_t *oc = &mod->tx_ctx[mod->tx_free[mod->tx_nfree - 1]];
        build_msg(oc->buf, me, ep->tx_seq, tag, type, header, header_len, payload, payload_len);
        oc->ep = ep;
        rc = fi_send(mod->ep, oc->buf, total, fi_mr_desc(mod->tx_reg->mr), ep->fi_addr,
                     &oc->fctx);
        if (rc == 0) {
            mod->tx_nfree--;
            ep->tx_seq++;
            return FERRY_OK;
        }
    }
    if (rc == -FI_EAGAIN)
        return FERRY_ERR_NO_RESOURCE;
    char why[128];
    snprintf(why, sizeof(why), "posting a send failed: %s", fi_strerror((int)-rc));
    ofi_ep_fail(mod, ep, FERRY_ERR_UNREACH, why);
    return FERRY_ERR_UNREACH;
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
        rc = fi_recvmsg(mod->ep, &msg, FI_MULTI_RECV);
    } else {
        rc = fi_recv(mod->ep, oc->buf, oc->buf_len, desc, FI_ADDR_UNSPEC, &oc->fctx);
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

/* Hands one in-order message to its handler. */
static void deliver(ofi_module_t *mod, ferry_btl_endpoint_t *ep, const ofi_hdr_t *h,
                    const unsigned char *buf, size_t len)
{
    ep->rx_seq++;
    if (h->type == OFI_T_CLOSE) {
        /* The peer finalized: from now on nothing goes to it, and nobody is
         * told of a failure. */
        if (ep->state != OFI_EP_FAILED)
            ep->state = OFI_EP_CLOSED;
        ofi_ep_fail_pending(mod, ep, FERRY_ERR_UNREACH);
        return;
    }
    if (h->type == OFI_T_AMO_REQ || h->type == OFI_T_AMO_ANSWER) {
        ofi_amo_deliver(mod, ep, h->type, buf + sizeof(*h), len - sizeof(*h));
        return;
    }
    ferry_btl_segment_t seg = {
        .addr = (uint64_t)(uintptr_t)(buf + sizeof(*h)),
        .len = len - sizeof(*h),
    };
    ferry_btl_recv_desc_t rd = {
        .ep = ep,
        .peer = (int)h->src,
        .tag = h->tag,
        .segs = &seg,
        .seg_cnt = 1,
    };
    btl_base_deliver(&mod->super, &rd);
}

/* Holds a message that overtook its predecessors: a copy, sorted by seq. */
static void hold(ofi_module_t *mod, ferry_btl_endpoint_t *ep, const ofi_hdr_t *h,
                 const unsigned char *buf, size_t len)
{
    ofi_held_t *m = malloc(sizeof(*m) + len);
    if (m == NULL) {
        ofi_ep_fail(mod, ep, FERRY_ERR_NO_MEMORY,
                    "out of memory holding a message that arrived out of order");
        return;
    }
    m->seq = h->seq;
    m->len = len;
    memcpy(m->data, buf, len);
    util_list_item_t *it = util_list_first(&ep->held);
    while (it != NULL) {
        ofi_held_t *o = UTIL_CONTAINER_OF(it, ofi_held_t, link);
        if ((int32_t)(o->seq - m->seq) > 0)
            break;
        it = util_list_next(&ep->held, it);
    }
    if (it == NULL)
        util_list_append(&ep->held, &m->link);
    else if (it == util_list_first(&ep->held))
        util_list_prepend(&ep->held, &m->link);
    else
        util_list_insert_after(&ep->held, it->prev, &m->link);
}

/* One message from a peer: its bytes are untrusted until checked. */
static void handle_msg(ofi_module_t *mod, const unsigned char *buf, size_t len)
{
    ofi_hdr_t h;
    if (len < sizeof(h)) {
        rt_log(&mod->super.ctx->log, RT_LOG_WARN, "ofi: a %zu-byte message is shorter than "
               "its header; dropped", len);
        return;
    }
    memcpy(&h, buf, sizeof(h));
    if (h.magic != OFI_HDR_MAGIC || h.src >= (uint32_t)mod->nranks ||
        (h.type != OFI_T_DATA && h.type != OFI_T_CLOSE && h.type != OFI_T_AMO_REQ &&
         h.type != OFI_T_AMO_ANSWER) ||
        (h.type == OFI_T_DATA && h.tag >= FERRY_BTL_TAG_BTL_MIN)) {
        rt_log(&mod->super.ctx->log, RT_LOG_WARN,
               "ofi: malformed message (magic 0x%x, source %u, type %u, tag %u, %zu bytes); "
               "dropped",
               h.magic, h.src, h.type, h.tag, len);
        return;
    }
    ferry_btl_endpoint_t *ep;
    if (ofi_ep_get(mod, (int)h.src, true, &ep) != FERRY_OK || ep == NULL) {
        rt_log(&mod->super.ctx->log, RT_LOG_WARN,
               "ofi: message from rank %u, which published no address for this module; "
               "dropped", h.src);
        return;
    }
    if (h.seq != ep->rx_seq) {
        if ((int32_t)(h.seq - ep->rx_seq) < 0) {
            rt_log(&mod->super.ctx->log, RT_LOG_WARN,
                   "ofi: message %u from rank %u repeats one already delivered; dropped", h.seq,
                   h.src);
            return;
        }
        hold(mod, ep, &h, buf, len);
        return;
    }
    deliver(mod, ep, &h, buf, len);
    /* Those that were waiting for it. */
    util_list_item_t *it;
    while ((it = util_list_first(&ep->held)) != NULL) {
        ofi_held_t *m = UTIL_CONTAINER_OF(it, ofi_held_t, link);
        if (m->seq != ep->rx_seq)
            break;
        util_list_remove(&ep->held, it);
        ofi_hdr_t mh;
        memcpy(&mh, m->data, sizeof(mh));
        deliver(mod, ep, &mh, m->data, m->len);
        free(m);
    }
}

/* ---- completion queue ---- */

static void handle_error(ofi_module_t *mod)
{
    struct fi_cq_err_entry err;
    char text[256];
    memset(&err, 0, sizeof(err));
    ssize_t rc = fi_cq_readerr(mod->cq, &err, 0);
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
        /* No operation of ours: the provider failed work a peer started
         * here (shm copies a peer's large write on the target's side, and
         * that copy fails once the peer has died). The peer that started it
         * is told by its own completion; here nothing is lost and nobody is
         * failed, since the provider does not say which peer it was. */
        rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
               "ofi (%s): error completion for a peer's operation: %s", mod->my_addr.prov,
               ptext);
        return;
    }
    switch (oc->kind) {
    case OFI_CTX_RX:
        /* A receive buffer came back unused (canceled at close, or the
         * provider gave up on it): it goes back unless we are closing. */
        if ((err.flags & FI_MULTI_RECV) || !mod->use_multi_recv) {
            if (oc->posted)
                mod->rx_posted--;
            oc->posted = false;
        }
        if (err.err != FI_ECANCELED && !mod->closing)
            rt_log(&mod->super.ctx->log, RT_LOG_WARN, "ofi: receive failed: %s", ptext);
        break;
    case OFI_CTX_TX: {
        mod->tx_free[mod->tx_nfree++] = oc->index;
        ferry_btl_endpoint_t *ep = oc->ep;
        /* ferry cancels nothing itself before closing: a canceled send
         * before that is the provider giving up on the peer (ofi_rxm
         * cancels what was in flight on a connection that died). */
        if (ep != NULL && !mod->closing) {
            char why[320];
            snprintf(why, sizeof(why), "send failed: %s", ptext);
            ofi_ep_fail(mod, ep, FERRY_ERR_UNREACH, why);
        }
        break;
    }
    case OFI_CTX_RMA: {
        int status = ofi_status_from_fi(err.err);
        ferry_btl_endpoint_t *ep = oc->ep;
        /* The target refused the key or the range: that operation fails,
         * the peer is fine. Anything else means the peer is gone. */
        const char *what = oc->frag == NULL              ? "put/get (abandoned)"
                           : oc->frag->op == OFI_OP_PUT ? "put"
                                                        : "get";
        if (status == FERRY_ERR_ACCESS || status == FERRY_ERR_INVALID) {
            rt_log(&mod->super.ctx->log, RT_LOG_DEBUG, "ofi: %s to rank %d refused: %s", what,
                   ep->rank, ptext);
            ofi_rdma_done(mod, oc, FERRY_ERR_ACCESS);
        } else {
            char why[320];
            snprintf(why, sizeof(why), "%s failed: %s", what, ptext);
            /* Canceled while not closing: as for sends, the provider gave
             * up on the peer. */
            ofi_rdma_done(mod, oc, mod->closing ? FERRY_ERR_CANCELED : FERRY_ERR_UNREACH);
            if (!mod->closing)
                ofi_ep_fail(mod, ep, FERRY_ERR_UNREACH, why);
        }
        break;
    }
    }
}

int ofi_poll_cq(ofi_module_t *mod)
{
    struct fi_cq_data_entry ent[16];
    int n = 0;
    if (mod->cq == NULL)
        return 0;
    for (int round = 0; round < 4; round++) {
        ssize_t got = fi_cq_read(mod->cq, ent, 16);
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
            if (oc == NULL)
                continue;
            switch (oc->kind) {
            case OFI_CTX_TX:
                mod->tx_free[mod->tx_nfree++] = oc->index;
                break;
            case OFI_CTX_RMA:
                ofi_rdma_done(mod, oc, FERRY_OK);
                break;
            case OFI_CTX_RX:
                if ((ent[i].flags & FI_RECV) && (ent[i].len > 0 || !mod->use_multi_recv)) {
                    const unsigned char *buf = mod->use_multi_recv ? ent[i].buf : oc->buf;
                    if (buf != NULL)
                        handle_msg(mod, buf, ent[i].len);
                }
                if (!mod->use_multi_recv || (ent[i].flags & FI_MULTI_RECV)) {
                    /* The buffer is ours again; every message in it has
                     * been handled above. */
                    if (oc->posted)
                        mod->rx_posted--;
                    oc->posted = false;
                }
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
