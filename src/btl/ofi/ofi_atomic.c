/*
 * Atomics over ofi: executed by the target (base_atomic.h's generic path),
 * the request and its answer each one message of their own type on the
 * ordered message channel.
 *
 * libfabric's own atomics (fi_atomic, fi_fetch_atomic, fi_compare_atomic)
 * are not used: ferry's rule is that every atomic is a CPU atomic on the
 * target's memory, so that atomics from sm (CPU atomics into a heap), tcp
 * and ofi to one address never mix, and libfabric promises no coherence of
 * a provider's atomics with the target's CPU atomics (the software
 * providers here, shm and tcp;ofi_rxm, execute them in the target's
 * progress like this path; a NIC would not). A module using them would have
 * to drop FERRY_BTL_ATOMIC_SUPPORTS_GLOB.
 */
#include <string.h>

#include "btl/ofi/ofi.h"

/* The generic path's send hook: behind queued messages, never ahead. */
static int amo_send(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const btl_amo_msg_t *msg)
{
    ofi_module_t *mod = ofi_of(btl);
    int rc = ofi_ep_ready(mod, ep);
    if (rc != FERRY_OK)
        return rc;
    if (!ofi_ep_clear(ep))
        return FERRY_ERR_NO_RESOURCE;
    rc = ofi_post_send(mod, ep, NULL, 0, msg, sizeof(*msg), 0,
                       msg->kind == BTL_AMO_REQ ? OFI_T_AMO_REQ : OFI_T_AMO_ANSWER, 0);
    if (rc == FERRY_ERR_NO_RESOURCE && msg->kind == BTL_AMO_ANSWER)
        ofi_mark_sending(mod, ep); /* progress sends what is owed */
    return rc;
}

/* A peer's key against our own table: the slot's registration still the
 * one the key was made for (its provider key), the range and rights inside
 * it. */
int ofi_target_resolve(ferry_btl_module_t *btl, const uint8_t *keybytes, uint64_t addr,
                       size_t len, uint32_t need, void **ptr_out)
{
    ofi_module_t *mod = ofi_of(btl);
    ofi_key_t key;
    memcpy(&key, keybytes, sizeof(key));
    if (key.slot >= mod->nregs_cap || mod->regs[key.slot] == NULL)
        return FERRY_ERR_ACCESS;
    const ofi_reg_t *reg = mod->regs[key.slot];
    if (reg->mr_key != key.mr_key || (uint64_t)(uintptr_t)reg->base.base != key.base ||
        reg->base.len != key.len ||
        btl_base_check_access(&reg->base, addr, len, need) != FERRY_OK)
        return FERRY_ERR_ACCESS;
    *ptr_out = (void *)(uintptr_t)addr;
    return FERRY_OK;
}

static btl_amo_ep_t *amo_ep(ferry_btl_endpoint_t *ep)
{
    return &ep->amo;
}

const btl_amo_hooks_t ofi_amo_hooks = {
    .send = amo_send,
    .resolve = ofi_target_resolve,
    .ep_state = amo_ep,
};

void ofi_amo_deliver(ofi_module_t *mod, ferry_btl_endpoint_t *ep, uint8_t type,
                     const unsigned char *body, size_t len)
{
    int rc = type == OFI_T_AMO_REQ ? btl_amo_target(&mod->super, &mod->amo, ep, body, len)
                                   : btl_amo_answer(&mod->super, &mod->amo, ep, body, len);
    if (rc == 0) {
        /* Past its budget of answers owed: a peer that ignores the budget
         * every initiator keeps. This channel cannot hold the request back,
         * so the peer is failed. */
        ofi_ep_fail(mod, ep, FERRY_ERR_PROTO, true, "it has more atomics in flight than its budget");
    } else if (rc == FERRY_ERR_PROTO) {
        ofi_ep_fail(mod, ep, FERRY_ERR_PROTO, true,
                    type == OFI_T_AMO_REQ ? "it sent a malformed atomic"
                                          : "it answered an atomic nobody asked for");
    } else if (rc < 0 && rc != FERRY_ERR_UNREACH) {
        ofi_ep_fail(mod, ep, rc, true, "an atomic's answer could not be sent");
    } else if (btl_amo_owes(&ep->amo)) {
        ofi_mark_sending(mod, ep);
    }
}

int ofi_amo_send_owed(ofi_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (!btl_amo_owes(&ep->amo))
        return 0;
    int n = btl_amo_send_owed(&mod->super, &mod->amo, ep);
    if (n < 0 && n != FERRY_ERR_UNREACH)
        ofi_ep_fail(mod, ep, n, true, "an atomic's answer could not be sent");
    return n > 0 ? n : 0;
}

/* The endpoint checks, then the generic path. */
static int atomic_start(ofi_module_t *mod, ferry_btl_endpoint_t *ep, void *local,
                        ferry_btl_reg_t *lreg, uint64_t raddr, const uint8_t *rkey, uint32_t op,
                        uint64_t operand, uint64_t compare, uint32_t flags, bool cswap,
                        bool fetch, ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    if (mod == NULL || ep == NULL || ep->mod != mod)
        return FERRY_ERR_INVALID;
    int rc = btl_base_atomic_check(&mod->super, op, cswap, raddr, flags);
    if (rc != FERRY_OK)
        return rc;
    /* The initiator's own check of the key: what it carries bounds the
     * range and the rights (the target checks again). */
    ofi_key_t key;
    memcpy(&key, rkey, sizeof(key));
    ferry_btl_reg_t view = {.base = (void *)(uintptr_t)key.base, .len = key.len,
                            .access = key.access};
    if (btl_base_check_access(&view, raddr, (flags & FERRY_BTL_ATOMIC_FLAG_32BIT) ? 4 : 8,
                              FERRY_ACCESS_REMOTE_ATOMIC) != FERRY_OK)
        return FERRY_ERR_ACCESS;
    return btl_amo_start(&mod->super, &mod->amo, ep, local, lreg, raddr, rkey, op, operand,
                         compare, flags, cswap, fetch, cb, cbctx, cbdata);
}

int ofi_atomic_op(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, uint64_t raddr,
                  const uint8_t *rkey, ferry_btl_atomic_op_t op, uint64_t operand,
                  uint32_t flags, ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    if (rkey == NULL)
        return FERRY_ERR_INVALID;
    return atomic_start(ofi_of(btl), ep, NULL, NULL, raddr, rkey, op, operand, 0, flags, false,
                        false, cb, cbctx, cbdata);
}

int ofi_atomic_fop(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                   uint64_t raddr, ferry_btl_reg_t *lreg, const uint8_t *rkey,
                   ferry_btl_atomic_op_t op, uint64_t operand, uint32_t flags,
                   ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    if (rkey == NULL || local == NULL)
        return FERRY_ERR_INVALID;
    return atomic_start(ofi_of(btl), ep, local, lreg, raddr, rkey, op, operand, 0, flags, false,
                        true, cb, cbctx, cbdata);
}

int ofi_atomic_cswap(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                     uint64_t raddr, ferry_btl_reg_t *lreg, const uint8_t *rkey,
                     uint64_t compare, uint64_t value, uint32_t flags, ferry_btl_rdma_cb_t cb,
                     void *cbctx, void *cbdata)
{
    if (rkey == NULL || local == NULL)
        return FERRY_ERR_INVALID;
    return atomic_start(ofi_of(btl), ep, local, lreg, raddr, rkey, 0, value, compare, flags,
                        true, true, cb, cbctx, cbdata);
}
