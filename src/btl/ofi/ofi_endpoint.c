/*
 * ofi endpoints: lazy insertion into the address vector, the queue of work
 * waiting for transmit slots or for the provider, and failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "btl/ofi/ofi.h"
#include "rt/modex.h"

/* Reads a peer's address from the modex; false when it has none for this
 * module, or it is malformed or from another provider (logged at debug). */
static bool read_peer_addr(ofi_module_t *mod, int rank, ofi_addr_t *addr_out)
{
    void *val = NULL;
    size_t len = 0;
    bool ok = false;
    if (rt_modex_get(mod->super.ctx->modex, rank, mod->modex_key, &val, &len) != FERRY_OK)
        return false;
    if (len == sizeof(ofi_addr_t)) {
        memcpy(addr_out, val, sizeof(*addr_out));
        addr_out->prov[OFI_PROV_NAME_MAX - 1] = '\0';
        ok = addr_out->version == OFI_ADDR_VERSION && addr_out->addrlen > 0 &&
             addr_out->addrlen <= OFI_ADDR_MAX && addr_out->addrlen == mod->my_addr.addrlen &&
             strcmp(addr_out->prov, mod->my_addr.prov) == 0;
    }
    if (!ok)
        rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
               "ofi: rank %d published no usable %s address (%zu bytes); not reachable", rank,
               mod->modex_key, len);
    free(val);
    return ok;
}

int ofi_ep_get(ofi_module_t *mod, int rank, bool create, ferry_btl_endpoint_t **ep_out)
{
    *ep_out = NULL;
    if (rank < 0 || rank >= mod->nranks)
        return FERRY_OK;
    if (mod->eps[rank] == NULL && create) {
        ofi_addr_t addr;
        if (!read_peer_addr(mod, rank, &addr))
            return FERRY_OK;
        ferry_btl_endpoint_t *ep = calloc(1, sizeof(*ep));
        if (ep == NULL)
            return FERRY_ERR_NO_MEMORY;
        ep->mod = mod;
        ep->rank = rank;
        ep->state = OFI_EP_NEW;
        ep->addr = addr;
        ep->fi_addr = FI_ADDR_UNSPEC;
        util_list_init(&ep->queue);
        util_list_init(&ep->held);
        mod->eps[rank] = ep;
    }
    *ep_out = mod->eps[rank];
    return FERRY_OK;
}

uint64_t ofi_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ofi_complete(ofi_module_t *mod, btl_frag_t *frag, int status)
{
    frag->status = status;
    util_list_append(&mod->completed, &frag->link);
}

void ofi_mark_sending(ofi_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (!ep->sending) {
        ep->sending = true;
        util_list_append(&mod->sending, &ep->sending_link);
    }
}

int ofi_ep_ready(ofi_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (ep == NULL || ep->mod != mod)
        return FERRY_ERR_INVALID;
    if (ep->deleted || ep->state == OFI_EP_FAILED || ep->state == OFI_EP_CLOSED)
        return FERRY_ERR_UNREACH;
    if (ep->state == OFI_EP_READY)
        return FERRY_OK;
    /* First use: the peer's address goes into the address vector now. */
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    int rc = fi_av_insert(mod->av, ep->addr.addr, 1, &fa, 0, NULL);
    if (rc != 1 || fa == FI_ADDR_NOTAVAIL) {
        char why[96];
        snprintf(why, sizeof(why), "fi_av_insert of its address failed (%d: %s)", rc,
                 fi_strerror(rc < 0 ? -rc : FI_EINVAL));
        ofi_ep_fail(mod, ep, FERRY_ERR_UNREACH, why);
        return FERRY_ERR_UNREACH;
    }
    ep->fi_addr = fa;
    ep->state = OFI_EP_READY;
    return FERRY_OK;
}

void ofi_ep_fail_pending(ofi_module_t *mod, ferry_btl_endpoint_t *ep, int status)
{
    util_list_item_t *it;
    while ((it = util_list_pop_front(&ep->queue)) != NULL)
        ofi_complete(mod, UTIL_CONTAINER_OF(it, btl_frag_t, link), status);
    ep->stalled_since_ns = 0;
    btl_amo_ep_fail(&mod->amo, &ep->amo, status);
}

void ofi_ep_fail(ofi_module_t *mod, ferry_btl_endpoint_t *ep, int status, const char *why)
{
    if (ep->state == OFI_EP_FAILED || ep->state == OFI_EP_CLOSED) {
        ofi_ep_fail_pending(mod, ep, FERRY_ERR_UNREACH);
        return;
    }
    ep->state = OFI_EP_FAILED;
    ofi_ep_fail_pending(mod, ep, FERRY_ERR_UNREACH);
    /* What the provider holds for a dead peer it may never return (shm
     * waits for the target to copy a large write): completed now, so no
     * flush waits on the dead. */
    ofi_rdma_abandon(mod, ep, FERRY_ERR_UNREACH);
    if (!mod->closing)
        btl_base_report_error(&mod->super, status, ep->rank, "ofi (%s): rank %d: %s",
                              mod->my_addr.prov, ep->rank, why);
}

int ofi_drain_queue(ofi_module_t *mod, ferry_btl_endpoint_t *ep, uint64_t now_ns)
{
    int n = 0;
    util_list_item_t *it;
    while ((it = util_list_first(&ep->queue)) != NULL) {
        btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
        int rc;
        if (frag->op == OFI_OP_SEND)
            rc = ofi_post_send(mod, ep, NULL, 0, ferry_btl_seg_ptr(&frag->base.src[0]),
                               frag->base.src[0].len, frag->tag, OFI_T_DATA);
        else
            rc = ofi_rdma_post(mod, ep, frag);
        if (rc == FERRY_ERR_NO_RESOURCE) {
            /* The peer takes nothing: after the timeout it is failed, so
             * that nobody waits on it forever. Running out of our own
             * transmit slots is no sign of that, but a slot frees only
             * with a completion, so the same bound holds. */
            if (ep->stalled_since_ns == 0) {
                ep->stalled_since_ns = now_ns;
            } else if (now_ns - ep->stalled_since_ns >
                       (uint64_t)mod->p.send_timeout_ms * 1000000ull) {
                char why[96];
                snprintf(why, sizeof(why), "no send accepted for %lld ms",
                         mod->p.send_timeout_ms);
                ofi_ep_fail(mod, ep, FERRY_ERR_UNREACH, why);
                n++;
            }
            break;
        }
        util_list_remove(&ep->queue, it);
        ep->stalled_since_ns = 0;
        n++;
        if (frag->op == OFI_OP_SEND)
            ofi_complete(mod, frag, rc);
        else if (rc != FERRY_OK)
            ofi_complete(mod, frag, rc);
        if (rc == FERRY_ERR_UNREACH && ep->state == OFI_EP_FAILED)
            break;
    }
    return n;
}
