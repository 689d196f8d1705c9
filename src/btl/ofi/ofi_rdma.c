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

    bool need_reg;
    void *desc = ofi_mr_local_desc(mod, local, &need_reg);
    if (need_reg) {
        /* FI_MR_LOCAL and memory we do not know: registered for this
         * operation only. */
        int rc = ofi_mr_acquire(mod, ferry_btl_seg_ptr(local), local->len, FERRY_ACCESS_LOCAL,
                                &oc->tmp_reg, &oc->tmp_creg);
        if (rc != FERRY_OK) {
            util_pool_put(&mod->rma_ctxs, oc);
            return rc;
        }
        desc = fi_mr_desc(oc->tmp_reg->mr);
    }
    uint64_t raddr = (mod->mr_mode & FI_MR_VIRT_ADDR) ? remote->addr : remote->addr - key.base;
    struct iovec iov = {.iov_base = ferry_btl_seg_ptr(local), .iov_len = local->len};
    struct fi_rma_iov rma = {.addr = raddr, .len = local->len, .key = key.mr_key};
    const struct fi_msg_rma msg = {
        .msg_iov = &iov,
        .desc = &desc,
        .iov_count = 1,
        .addr = ep->fi_addr,
        .rma_iov = &rma,
        .rma_iov_count = 1,
        .context = &oc->fctx,
    };
    ssize_t rc;
    ofi_call_enter(mod);
    if (put)
        rc = fi_writemsg(mod->ep, &msg, mod->put_flags);
    else
        rc = fi_readmsg(mod->ep, &msg, FI_COMPLETION);
    ofi_call_leave(mod);
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

int ofi_rdma_expire(ofi_module_t *mod, uint64_t now)
{
    int n = 0;
    if (!mod->rma_ctxs_ready)
        return 0;
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
    frag->cookie = rt_now_coarse_ns() + (uint64_t)mod->p.request_timeout_ms * 1000000ull;
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
