/*
 * ofi put and get: fi_writemsg and fi_readmsg on registered memory.
 *
 * A put asks for FI_DELIVERY_COMPLETE: its completion comes once the target
 * has placed the data, not when the bytes left (tcp;ofi_rxm's default), so
 * a put the target refuses or never takes (a connection it dropped) never
 * reports FERRY_OK. Not over shm (libfabric 1.17): there the initiator
 * copies a write into the target through cross-memory attach before its
 * completion (shm's fast path), and the flag would send it through the
 * target's command queue instead, which a released key stops for good
 * (README.md, Limits). Every put and get carries a deadline
 * (FERRY_OFI_REQUEST_TIMEOUT) from when it was accepted; past it, it
 * completes with FERRY_ERR_TIMEOUT and its peer becomes a suspect whose
 * liveness is decided (ofi_live.c). Its context stays with the provider
 * until the provider gives it back or the endpoint closes.
 *
 * Before any byte moves, the initiator checks the remote range against what
 * the target's key says (base, length, rights): the contract's check,
 * without a round trip. What the key cannot tell (the target released the
 * registration since) a native provider refuses with an error completion,
 * which becomes FERRY_ERR_ACCESS; where the provider cannot, the module says
 * so with FERRY_BTL_FLAG_NO_KEY_REVOKE.
 */
#include <stdio.h>
#include <string.h>

#include "btl/ofi/ofi.h"

/* The remote segment's range checked against its key. */
static int check_remote(const ferry_btl_segment_t *remote, size_t len, uint32_t need,
                        ofi_key_t *key_out)
{
    ofi_key_t key;
    memcpy(&key, remote->key, sizeof(key));
    if (key.len > SIZE_MAX)
        return FERRY_ERR_ACCESS;
    const ferry_btl_reg_t view = {
        .base = (void *)(uintptr_t)key.base,
        .len = (size_t)key.len,
        .access = key.access,
    };
    int rc = btl_base_check_access(&view, remote->addr, len, need);
    if (rc == FERRY_OK)
        *key_out = key;
    return rc;
}

/* The descriptor of len bytes at buf for an operation: FI_MR_LOCAL and
 * memory we do not know, registered for it only (oc->tmp_reg). */
static int rma_local_desc(ofi_module_t *mod, ofi_opctx_t *oc, void *buf, size_t len,
                          void **desc_out)
{
    const ferry_btl_segment_t seg = {.addr = (uint64_t)(uintptr_t)buf, .len = len};
    bool need_reg;
    *desc_out = ofi_mr_local_desc(mod, &seg, &need_reg);
    if (!need_reg)
        return FERRY_OK;
    int rc = ofi_mr_acquire(mod, buf, len, FERRY_ACCESS_LOCAL, &oc->tmp_reg, &oc->tmp_creg);
    if (rc == FERRY_OK)
        *desc_out = fi_mr_desc(oc->tmp_reg->mr);
    return rc;
}

/* Hands one write (put) or read of len bytes between buf and raddr under
 * key to the provider, oc its context, data its completion data where
 * flags ask for it: the provider's return. */
static ssize_t rma_issue(ofi_module_t *mod, ferry_btl_endpoint_t *ep, ofi_opctx_t *oc, bool put,
                         void *buf, size_t len, void *desc, uint64_t raddr, const ofi_key_t *key,
                         uint64_t flags, uint64_t data)
{
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct fi_rma_iov rma = {.addr = (mod->mr_mode & FI_MR_VIRT_ADDR) ? raddr : raddr - key->base,
                             .len = len,
                             .key = key->mr_key};
    const struct fi_msg_rma msg = {
        .msg_iov = &iov,
        .desc = &desc,
        .iov_count = 1,
        .addr = ep->fi_addr,
        .rma_iov = &rma,
        .rma_iov_count = 1,
        .context = &oc->fctx,
        .data = data,
    };
    ofi_call_enter(mod);
    ssize_t rc = put ? fi_writemsg(mod->ep, &msg, flags) : fi_readmsg(mod->ep, &msg, flags);
    ofi_call_leave(mod);
    return rc;
}

int ofi_rdma_post(ofi_module_t *mod, ferry_btl_endpoint_t *ep, btl_frag_t *frag)
{
    ferry_btl_desc_t *des = &frag->base;
    bool put = frag->op == OFI_OP_PUT;
    const ferry_btl_segment_t *local = put ? &des->src[0] : &des->dst[0];
    const ferry_btl_segment_t *remote = put ? &des->dst[0] : &des->src[0];
    ofi_key_t key;
    memcpy(&key, remote->key, sizeof(key));

    if (ep->settle_until_ns != 0 && !ofi_ep_settled(ep))
        return FERRY_ERR_NO_RESOURCE;
    ofi_opctx_t *oc = util_pool_get(&mod->rma_ctxs);
    if (oc == NULL)
        return FERRY_ERR_NO_RESOURCE;
    memset(oc, 0, sizeof(*oc));
    oc->kind = OFI_CTX_RMA;
    oc->ep = ep;
    oc->frag = frag;

    void *desc;
    int drc = rma_local_desc(mod, oc, ferry_btl_seg_ptr(local), local->len, &desc);
    if (drc != FERRY_OK) {
        util_pool_put(&mod->rma_ctxs, oc);
        return drc;
    }
    ssize_t rc = rma_issue(mod, ep, oc, put, ferry_btl_seg_ptr(local), local->len, desc,
                           remote->addr, &key, put ? mod->put_flags : FI_COMPLETION, 0);
    if (rc == 0) {
        util_list_append(&mod->rma_posted, &oc->link);
        return FERRY_OK;
    }
    ofi_mr_release(mod, oc->tmp_reg, oc->tmp_creg);
    util_pool_put(&mod->rma_ctxs, oc);
    if (rc == -FI_EAGAIN)
        return FERRY_ERR_NO_RESOURCE;
    int status = ofi_status_from_fi((int)rc);
    rt_log(&mod->super.ctx->log, RT_LOG_DEBUG, "ofi: posting a %s of %zu bytes to rank %d: %s",
           put ? "put" : "get", local->len, ep->rank, fi_strerror((int)-rc));
    if (status == FERRY_ERR_ACCESS || status == FERRY_ERR_INVALID)
        return FERRY_ERR_ACCESS;
    char why[128];
    snprintf(why, sizeof(why), "posting a %s failed: %s", put ? "put" : "get",
             fi_strerror((int)-rc));
    ofi_ep_fail(mod, ep, FERRY_ERR_UNREACH, true, why);
    return FERRY_ERR_UNREACH;
}

/* A context the provider gave back: off the posted list, its temporary
 * registration released, back to the pool. Returns its descriptor. */
static btl_frag_t *rdma_ctx_back(ofi_module_t *mod, ofi_opctx_t *oc)
{
    btl_frag_t *frag = oc->frag;
    util_list_remove(&mod->rma_posted, &oc->link);
    ofi_mr_release(mod, oc->tmp_reg, oc->tmp_creg);
    util_pool_put(&mod->rma_ctxs, oc);
    return frag;
}

void ofi_rdma_done(ofi_module_t *mod, ofi_opctx_t *oc, int status)
{
    btl_frag_t *frag = rdma_ctx_back(mod, oc);
    if (frag != NULL)
        ofi_complete(mod, frag, status);
}

void ofi_rdma_abandon(ofi_module_t *mod, ferry_btl_endpoint_t *ep, int status)
{
    if (!mod->rma_ctxs_ready)
        return;
    for (util_list_item_t *it = util_list_first(&mod->rma_posted); it != NULL;
         it = util_list_next(&mod->rma_posted, it)) {
        ofi_opctx_t *oc = UTIL_CONTAINER_OF(it, ofi_opctx_t, link);
        if (oc->ep == ep && oc->frag != NULL) {
            ofi_complete(mod, oc->frag, status);
            oc->frag = NULL;
        }
    }
}

void ofi_rdma_hold(ofi_module_t *mod, ofi_opctx_t *oc)
{
    ferry_btl_endpoint_t *ep = oc->ep;
    btl_frag_t *frag = rdma_ctx_back(mod, oc);
    ep->held_since_ns = rt_now_coarse_ns();
    ep->held_heard = false;
    util_list_append(&ep->held, &frag->link);
}

int ofi_rdma_release_held(ofi_module_t *mod, ferry_btl_endpoint_t *ep, uint64_t now)
{
    /* Failing the peer completes them with FERRY_ERR_UNREACH
     * (ofi_ep_fail_pending). It is alive when, a probe interval after the
     * last refusal, its process still runs (a peer on this host: the
     * check ran just before) or it has spoken since (any other). */
    if (util_list_empty(&ep->held) || ep->state != OFI_EP_READY ||
        now - ep->held_since_ns < (uint64_t)mod->p.probe_interval_ms * 1000000ull ||
        !(ep->local || ep->held_heard))
        return 0;
    int n = 0;
    util_list_item_t *it;
    while ((it = util_list_pop_front(&ep->held)) != NULL) {
        ofi_complete(mod, UTIL_CONTAINER_OF(it, btl_frag_t, link), FERRY_ERR_ACCESS);
        n++;
    }
    rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
           "ofi: rank %d is alive: %d put(s) or get(s) it refused fail with FERRY_ERR_ACCESS",
           ep->rank, n);
    return n;
}

/* n operations of what to ep went past their deadline without an answer:
 * said, and ep becomes a suspect. Returns n. */
static int unanswered(ofi_module_t *mod, ferry_btl_endpoint_t *ep, size_t n, const char *what)
{
    if (n == 0)
        return 0;
    rt_log(&mod->super.ctx->log, RT_LOG_WARN,
           "ofi (%s): %zu %s to rank %d not answered in %lld ms: FERRY_ERR_TIMEOUT",
           mod->my_addr.prov, n, what, ep->rank, mod->p.request_timeout_ms);
    ep->suspect = true;
    return (int)n;
}

static const ofi_putn_ops_t putn_ops;

int ofi_rdma_expire(ofi_module_t *mod, uint64_t now)
{
    int n = 0;
    /* Tracked puts with notification and atomics whose answer has not
     * come: a target that never answers (stopped, or hostile) must not hold
     * them, and the flushes waiting on them, for ever. */
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *ep = mod->eps[r];
        if (ep == NULL)
            continue;
        n += unanswered(mod, ep, ofi_putn_expire(&ep->putn, now, &mod->putn_done),
                        "put(s) with notification");
        if (ep->putn.nheld > 0 && ep->state == OFI_EP_READY) {
            /* Notifications whose write never landed: answered refused,
             * handlers run without the data. */
            uint64_t timeout = ofi_timeout_ns(mod);
            size_t gave_up = now > timeout ? ofi_putn_held_expire(&ep->putn, r, now - timeout,
                                                                  &putn_ops, mod)
                                           : 0;
            if (gave_up > 0)
                rt_log(&mod->super.ctx->log, RT_LOG_WARN,
                       "ofi (%s): %zu put(s) with notification from rank %d held %lld ms "
                       "without their data: refused",
                       mod->my_addr.prov, gave_up, r, mod->p.request_timeout_ms);
        }
        n += unanswered(mod, ep, btl_amo_expire(&mod->amo, &ep->amo, now), "atomic(s)");
    }
    if (!mod->rma_ctxs_ready)
        return n;
    for (util_list_item_t *it = util_list_first(&mod->rma_posted); it != NULL;
         it = util_list_next(&mod->rma_posted, it)) {
        ofi_opctx_t *oc = UTIL_CONTAINER_OF(it, ofi_opctx_t, link);
        if (oc->frag == NULL || oc->frag->cookie > now)
            continue;
        rt_log(&mod->super.ctx->log, RT_LOG_WARN,
               "ofi (%s): a %s of %zu bytes to rank %d has not completed in %lld ms; it fails "
               "with FERRY_ERR_TIMEOUT",
               mod->my_addr.prov, oc->frag->op == OFI_OP_PUT ? "put" : "get",
               oc->frag->base.src[0].len, oc->ep->rank, mod->p.request_timeout_ms);
        ofi_complete(mod, oc->frag, FERRY_ERR_TIMEOUT);
        oc->frag = NULL;
        oc->ep->suspect = true;
        n++;
    }
    /* Queued ones wait for room with the provider or behind sends; they
     * expire from the same moment. */
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *ep = mod->eps[r];
        if (ep == NULL || util_list_empty(&ep->queue))
            continue;
        util_list_item_t *it = util_list_first(&ep->queue);
        while (it != NULL) {
            btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
            it = util_list_next(&ep->queue, it);
            if (frag->op == OFI_OP_SEND || frag->cookie > now)
                continue;
            util_list_remove(&ep->queue, &frag->link);
            ofi_complete(mod, frag, FERRY_ERR_TIMEOUT);
            ep->suspect = true;
            n++;
        }
    }
    return n;
}

static int rdma_start(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                      bool put)
{
    ofi_module_t *mod = ofi_of(btl);
    if (btl == NULL || !btl_frag_valid(des) || (des->flags & FERRY_BTL_DES_INFLIGHT) ||
        des->src == NULL || des->dst == NULL || des->src_cnt != 1 || des->dst_cnt != 1 ||
        des->src[0].len != des->dst[0].len || des->src[0].len > btl->attr.max_rdma_size)
        return FERRY_ERR_INVALID;
    const ferry_btl_segment_t *local = put ? &des->src[0] : &des->dst[0];
    const ferry_btl_segment_t *remote = put ? &des->dst[0] : &des->src[0];
    if (local->len > 0 && ferry_btl_seg_ptr(local) == NULL)
        return FERRY_ERR_INVALID;
    int rc = ofi_ep_ready(mod, ep);
    if (rc != FERRY_OK)
        return rc;
    ofi_key_t key;
    rc = check_remote(remote, remote->len,
                      put ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ, &key);
    if (rc != FERRY_OK)
        return rc;
    btl_frag_t *frag = btl_frag_of(des);
    frag->op = put ? OFI_OP_PUT : OFI_OP_GET;
    frag->ep = ep;
    frag->cookie = rt_now_coarse_ns() + ofi_timeout_ns(mod);
    des->flags |= FERRY_BTL_DES_INFLIGHT;
    ep->rdma_inflight++;
    if (local->len == 0) {
        ofi_complete(mod, frag, FERRY_OK);
        return FERRY_OK;
    }
    if (util_list_empty(&ep->queue)) {
        rc = ofi_rdma_post(mod, ep, frag);
        if (rc == FERRY_OK)
            return FERRY_OK;
        if (rc != FERRY_ERR_NO_RESOURCE) {
            ep->rdma_inflight--;
            des->flags &= ~(uint32_t)FERRY_BTL_DES_INFLIGHT;
            return rc;
        }
    }
    util_list_append(&ep->queue, &frag->link);
    ofi_mark_sending(mod, ep);
    return FERRY_OK;
}

int ofi_put(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des)
{
    return rdma_start(btl, ep, des, true);
}

int ofi_get(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des)
{
    return rdma_start(btl, ep, des, false);
}

/* ---- puts with notification ---- */

/* A record for a tracked put with notification, within the budget the
 * target holds us to (ofi_putn_owe): NULL with *rc_out
 * FERRY_ERR_NOT_SUPPORTED (budget spent) or FERRY_ERR_NO_MEMORY. */
static ofi_putn_req_t *putn_req_take(ofi_module_t *mod, ferry_btl_endpoint_t *ep,
                                     const void *local, ferry_btl_rdma_cb_t cb, void *cbctx,
                                     void *cbdata, int *rc_out)
{
    ofi_putn_req_t *req = NULL;
    if (ofi_putn_due(&ep->putn) >= mod->window)
        *rc_out = FERRY_ERR_NOT_SUPPORTED;
    else if ((req = util_pool_get(&mod->putn_reqs)) == NULL)
        *rc_out = FERRY_ERR_NO_MEMORY;
    else
        *req = (ofi_putn_req_t){.ep = ep,
                                .cb = cb,
                                .cbctx = cbctx,
                                .cbdata = cbdata,
                                .local = (void *)local,
                                .deadline_ns = rt_now_coarse_ns() + ofi_timeout_ns(mod)};
    return req;
}

/* A tracked put with notification split (ofi_wire.h): the data by
 * fi_writemsg with its split number as completion data, then the
 * notification as an ordered message (or, with no room for it, first
 * thing from progress). Nothing started unless FERRY_OK. */
static int putn_split(ofi_module_t *mod, ferry_btl_endpoint_t *ep, const void *local,
                      size_t size, uint64_t raddr, const uint8_t *rkey, uint8_t tag,
                      const void *payload, size_t plen, ferry_btl_rdma_cb_t cb, void *cbctx,
                      void *cbdata)
{
    ofi_putn_peer_t *pn = &ep->putn;
    /* Within the split window, after any pause for a refused key, and
     * inside what the key says: else the layer above puts and notifies. */
    if (pn->split_sent - pn->split_run >= OFI_PUTN_SPLIT_MAX || size > UINT32_MAX ||
        (ep->settle_until_ns != 0 && !ofi_ep_settled(ep)))
        return FERRY_ERR_NOT_SUPPORTED;
    ofi_key_t key;
    ferry_btl_segment_t remote = {.addr = raddr, .len = size};
    memcpy(remote.key, rkey, sizeof(remote.key));
    if (check_remote(&remote, size, FERRY_ACCESS_REMOTE_WRITE, &key) != FERRY_OK)
        return FERRY_ERR_NOT_SUPPORTED;
    int rc;
    ofi_putn_req_t *req = putn_req_take(mod, ep, local, cb, cbctx, cbdata, &rc);
    if (req == NULL)
        return rc;
    ofi_opctx_t *oc = util_pool_get(&mod->rma_ctxs);
    if (oc == NULL) {
        util_pool_put(&mod->putn_reqs, req);
        return FERRY_ERR_NOT_SUPPORTED;
    }
    /* The write's own completion only gives the context back: the put
     * completes on the target's answer, which follows the data. */
    memset(oc, 0, sizeof(*oc));
    oc->kind = OFI_CTX_RMA;
    oc->ep = ep;
    void *desc;
    rc = rma_local_desc(mod, oc, (void *)local, size, &desc);
    if (rc == FERRY_OK) {
        ssize_t wrc = rma_issue(mod, ep, oc, true, (void *)local, size, desc, raddr, &key,
                                mod->put_flags | FI_REMOTE_CQ_DATA, pn->split_sent);
        if (wrc != 0) {
            rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
                   "ofi: posting a split put of %zu bytes to rank %d: %s", size, ep->rank,
                   fi_strerror((int)-wrc));
            rc = FERRY_ERR_NOT_SUPPORTED; /* the layer above puts and notifies */
        }
    }
    if (rc != FERRY_OK) {
        ofi_mr_release(mod, oc->tmp_reg, oc->tmp_creg);
        util_pool_put(&mod->rma_ctxs, oc);
        util_pool_put(&mod->putn_reqs, req);
        return rc == FERRY_ERR_NO_MEMORY ? rc : FERRY_ERR_NOT_SUPPORTED;
    }
    util_list_append(&mod->rma_posted, &oc->link);
    ofi_putn_body_t b = {
        .raddr = raddr,
        .cookie = ofi_putn_next_cookie(pn),
        .size = (uint32_t)size,
        .plen = (uint32_t)plen,
        .flags = OFI_PUTN_TRACKED | OFI_PUTN_SPLIT,
        .split = pn->split_sent,
    };
    memcpy(b.key, rkey, sizeof(ofi_key_t));
    pn->split_sent++;
    mod->putn_split_sent++;
    ofi_putn_sent_tracked(pn, req);
    const struct iovec parts[2] = {{&b, sizeof(b)}, {(void *)payload, plen}};
    rc = ofi_post_sendv(mod, ep, parts, 2, tag, OFI_T_PUTN);
    if (rc == FERRY_ERR_NO_RESOURCE) {
        /* The write is on its way: its notification must follow. */
        memcpy(ep->notice, &b, sizeof(b));
        if (plen > 0)
            memcpy(ep->notice + sizeof(b), payload, plen);
        ep->notice_len = (uint32_t)(sizeof(b) + plen);
        ep->notice_tag = tag;
        ep->notice_due = true;
        ofi_mark_sending(mod, ep);
    }
    /* Posting failed the peer otherwise, which completed req. */
    return FERRY_OK;
}

/*
 * A put with notification small enough for one message (ofi_wire.h says
 * the format): the initiator sends OFI_T_PUTN on the ordered channel, the
 * target checks the key against its own registrations (ofi_target_resolve,
 * as for an atomic: a released key is refused here even where puts cannot
 * tell), copies, answers and runs the handler. A tracked one completes on
 * its answer; an untracked one leaves nothing behind but a count, and a
 * refusal's answer reaches its callback before anything the target sent
 * later, the answer being ordered ahead of those messages. Larger ones, and
 * any that cannot leave at once, are FERRY_ERR_NOT_SUPPORTED: the layer
 * above then puts and notifies in two operations.
 */
int ofi_put_notify_inline(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *local,
                          size_t size, uint64_t raddr, const uint8_t *rkey, uint8_t tag,
                          const void *payload, size_t plen, uint32_t flags,
                          ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    ofi_module_t *mod = ofi_of(btl);
    if (mod == NULL || ep == NULL || ep->mod != mod || rkey == NULL || cb == NULL ||
        tag >= FERRY_BTL_TAG_BTL_MIN || (payload == NULL && plen > 0) ||
        (local == NULL && size > 0) || (flags & ~(uint32_t)FERRY_BTL_PUTN_UNTRACKED) != 0)
        return FERRY_ERR_INVALID;
    int rc = ofi_ep_ready(mod, ep);
    if (rc != FERRY_OK)
        return rc;
    /* One message no larger than the largest send, behind nothing. The
     * key is not checked here: a put the target refuses still carries its
     * notification, which the target's handler gets all the same. */
    size_t max = btl->attr.max_send_size - sizeof(ofi_putn_body_t);
    bool tracked = !(flags & FERRY_BTL_PUTN_UNTRACKED);
    if (!ofi_ep_clear(ep))
        return FERRY_ERR_NOT_SUPPORTED;
    /* Behind a split one in flight, a tracked one is split too: its answer
     * must not overtake the held one's. */
    if (tracked && (size > max || ep->putn.split_sent != ep->putn.split_run)) {
        if (!mod->putn_split || size == 0 || plen > OFI_PUTN_SPLIT_PAYLOAD)
            return FERRY_ERR_NOT_SUPPORTED;
        return putn_split(mod, ep, local, size, raddr, rkey, tag, payload, plen, cb, cbctx,
                          cbdata);
    }
    if (size > max || plen > max - size)
        return FERRY_ERR_NOT_SUPPORTED;
    ofi_putn_req_t *req = NULL;
    if (tracked && (req = putn_req_take(mod, ep, local, cb, cbctx, cbdata, &rc)) == NULL)
        return rc;
    ofi_putn_body_t b = {
        .raddr = raddr,
        .cookie = tracked ? ofi_putn_next_cookie(&ep->putn) : 0,
        .size = (uint32_t)size,
        .plen = (uint32_t)plen,
        .flags = tracked ? OFI_PUTN_TRACKED : 0,
    };
    memcpy(b.key, rkey, sizeof(ofi_key_t));
    const struct iovec parts[3] = {
        {&b, sizeof(b)}, {(void *)payload, plen}, {(void *)local, size}};
    rc = ofi_post_sendv(mod, ep, parts, 3, tag, OFI_T_PUTN);
    if (rc != FERRY_OK) {
        if (req != NULL)
            util_pool_put(&mod->putn_reqs, req);
        return rc == FERRY_ERR_NO_RESOURCE ? FERRY_ERR_NOT_SUPPORTED : rc;
    }
    if (tracked)
        ofi_putn_sent_tracked(&ep->putn, req);
    else
        ofi_putn_sent_untracked(&ep->putn, cb, cbctx);
    return FERRY_OK;
}

/* The target's hooks for ofi_putn_target. */
static int putn_write(void *arg, int rank, const uint8_t *key, uint64_t raddr, const void *data,
                      size_t n)
{
    ofi_module_t *mod = arg;
    void *dst;
    int rc = ofi_target_resolve(&mod->super, key, raddr, n, FERRY_ACCESS_REMOTE_WRITE, &dst);
    if (rc != FERRY_OK) {
        rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
               "ofi: put of %zu bytes with notification from rank %d refused: outside a "
               "writable registration",
               n, rank);
        return FERRY_ERR_ACCESS;
    }
    if (data != NULL)
        memcpy(dst, data, n);
    return FERRY_OK;
}

static uint64_t putn_now(void *arg)
{
    (void)arg;
    return rt_now_coarse_ns();
}

/* The answer leaves now when nothing waits ahead of it and the provider
 * takes it; else it is owed, and everything sent to the peer from now on
 * waits behind it (ofi_ep_clear). */
static bool putn_answer(void *arg, int rank, const ofi_putn_answer_t *a)
{
    ofi_module_t *mod = arg;
    ferry_btl_endpoint_t *ep = mod->eps[rank];
    int rc = FERRY_ERR_NO_RESOURCE;
    if (ofi_ep_clear(ep))
        rc = ofi_post_send(mod, ep, NULL, 0, a, sizeof(*a), 0, OFI_T_PUTN_ANSWER, 0);
    if (rc == FERRY_OK)
        return true;
    if (rc != FERRY_ERR_NO_RESOURCE)
        return false; /* posting failed the peer, which was told */
    rc = ofi_putn_owe(&ep->putn, a, mod->window);
    if (rc == FERRY_ERR_PROTO) {
        rt_log_limited(&mod->super.ctx->log, &mod->rl_peer, RT_LOG_WARN,
                       "ofi (%s): rank %d has more tracked puts with notification awaiting "
                       "an answer than its window of %u",
                       mod->my_addr.prov, rank, mod->window);
        ofi_ep_fail(mod, ep, FERRY_ERR_PROTO, true,
                    "it has more puts with notification in flight than its budget");
        return false;
    }
    if (rc != FERRY_OK) {
        ofi_ep_fail(mod, ep, rc, true, "an answer to its put with notification could not be kept "
                                       "(out of memory)");
        return false;
    }
    ofi_mark_sending(mod, ep);
    return true;
}

static void putn_notify(void *arg, int rank, uint8_t tag, const unsigned char *payload,
                        size_t plen)
{
    ofi_module_t *mod = arg;
    ferry_btl_segment_t seg = {.addr = (uint64_t)(uintptr_t)payload, .len = plen};
    ferry_btl_recv_desc_t rd = {
        .ep = mod->eps[rank],
        .peer = rank,
        .tag = tag,
        .segs = &seg,
        .seg_cnt = 1,
    };
    btl_base_deliver(&mod->super, &rd);
}

static const ofi_putn_ops_t putn_ops = {
    .write = putn_write,
    .now_ns = putn_now,
    .answer = putn_answer,
    .notify = putn_notify,
};

void ofi_putn_landed_from(ofi_module_t *mod, fi_addr_t src, uint64_t data)
{
    int rank = ofi_rank_of(mod, src);
    ferry_btl_endpoint_t *ep = rank >= 0 ? mod->eps[rank] : NULL;
    if (ep == NULL || ep->state != OFI_EP_READY) {
        /* A write from no peer of ours, or one failed: nothing waits. */
        rt_log_limited(&mod->super.ctx->log, &mod->rl_peer, RT_LOG_DEBUG,
                       "ofi (%s): a write with completion data %#llx from %s dropped",
                       mod->my_addr.prov, (unsigned long long)data,
                       rank >= 0 ? "a failed peer" : "an unknown address");
        return;
    }
    ep->heard = true;
    mod->putn_split_landed++;
    const char *why = data > UINT32_MAX ? "completion data wider than a split number"
                                        : ofi_putn_landed(&ep->putn, rank, (uint32_t)data,
                                                          &putn_ops, mod);
    if (why == NULL)
        return;
    mod->refused++;
    rt_log_limited(&mod->super.ctx->log, &mod->rl_peer, RT_LOG_WARN,
                   "ofi (%s): rank %d wrote with completion data %#llx: %s", mod->my_addr.prov,
                   rank, (unsigned long long)data, why);
    char text[160];
    snprintf(text, sizeof(text), "its write with completion data: %s", why);
    ofi_ep_fail(mod, ep, FERRY_ERR_PROTO, true, text);
}

/* A peer that sent a malformed put with notification or answer: said
 * once in the log (rate-limited), then failed and told. */
static void putn_refuse(ofi_module_t *mod, ferry_btl_endpoint_t *ep, const ofi_hdr_t *h,
                        size_t len, const char *why)
{
    mod->refused++;
    rt_log_limited(&mod->super.ctx->log, &mod->rl_peer, RT_LOG_WARN,
                   "ofi (%s): refused a %zu-byte %s from rank %d: %s (seq %u)",
                   mod->my_addr.prov, len,
                   h->type == OFI_T_PUTN ? "put with notification" : "answer to a put with "
                                                                     "notification",
                   ep->rank, why, h->seq);
    char text[160];
    snprintf(text, sizeof(text), "sent a malformed %s: %s",
             h->type == OFI_T_PUTN ? "put with notification" : "answer to a put with notification",
             why);
    ofi_ep_fail(mod, ep, FERRY_ERR_PROTO, true, text);
}

void ofi_putn_deliver(ofi_module_t *mod, ferry_btl_endpoint_t *ep, const ofi_hdr_t *h,
                      const unsigned char *body, size_t len)
{
    const char *why;
    if (h->type == OFI_T_PUTN) {
        why = ofi_putn_target(&ep->putn, ep->rank, h->tag, body, len, &putn_ops, mod);
        if (why != NULL)
            putn_refuse(mod, ep, h, len, why);
        return;
    }
    ofi_putn_req_t *req;
    bool refused;
    why = ofi_putn_answer(&ep->putn, body, len, &req, &refused);
    if (why != NULL) {
        putn_refuse(mod, ep, h, len, why);
        return;
    }
    /* From progress, in the order the target answered. */
    if (refused) {
        ep->putn.refused_cb(&mod->super, ep, NULL, NULL, ep->putn.refused_cbctx, NULL,
                            FERRY_ERR_ACCESS);
        return;
    }
    if (req == NULL)
        return; /* completed at del_procs already */
    ofi_putn_req_t r = *req;
    util_pool_put(&mod->putn_reqs, req);
    r.cb(&mod->super, ep, r.local, NULL, r.cbctx, r.cbdata, r.status);
}

int ofi_putn_send_owed(ofi_module_t *mod, ferry_btl_endpoint_t *ep)
{
    const ofi_putn_answer_t *a;
    while ((a = ofi_putn_owed_first(&ep->putn)) != NULL) {
        int rc = ofi_post_send(mod, ep, NULL, 0, a, sizeof(*a), 0, OFI_T_PUTN_ANSWER, 0);
        if (rc != FERRY_OK)
            return rc;
        ofi_putn_owed_pop(&ep->putn);
    }
    return FERRY_OK;
}

void ofi_putn_fail(ofi_module_t *mod, ferry_btl_endpoint_t *ep, int status)
{
    /* Answers owed to a peer that is only deleted (del_procs) still go:
     * its own puts' completion waits on them. */
    ofi_putn_peer_fail(&ep->putn, status, &mod->putn_done,
                       ep->state != OFI_EP_READY || mod->closing);
}

int ofi_putn_progress(ofi_module_t *mod)
{
    int n = 0;
    util_list_item_t *it;
    /* Only those failed before this call: a callback that starts one that
     * fails at once leaves it for the next. */
    size_t due = util_list_len(&mod->putn_done);
    while (due-- > 0 && (it = util_list_pop_front(&mod->putn_done)) != NULL) {
        ofi_putn_req_t r = *UTIL_CONTAINER_OF(it, ofi_putn_req_t, link);
        util_pool_put(&mod->putn_reqs, UTIL_CONTAINER_OF(it, ofi_putn_req_t, link));
        r.cb(&mod->super, r.ep, r.local, NULL, r.cbctx, r.cbdata, r.status);
        n++;
    }
    return n;
}
