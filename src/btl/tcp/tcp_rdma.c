/*
 * Registrations and put/get emulated over messages.
 *
 * A registration is a slot in this process's table; its key is the slot and
 * the slot's generation, which deregistration bumps, so a stale key names
 * nothing. The target checks every request against the table
 * (btl_base_check_access) before a byte moves.
 */
#include <stdlib.h>
#include <string.h>

#include "btl/tcp/tcp.h"

#define TCP_REG_MAGIC 0x54524547u

int tcp_register_mem(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *base, size_t len,
                     uint32_t access, ferry_btl_reg_t **reg_out)
{
    tcp_module_t *mod = (tcp_module_t *)btl;
    (void)ep;
    int rc = btl_base_check_register(btl, base, len, access, reg_out);
    if (rc != FERRY_OK)
        return rc;
    uint32_t slot = 0;
    while (slot < mod->p.reg_slots && mod->regs[slot] != NULL)
        slot++;
    if (slot == mod->p.reg_slots) {
        rt_log(&btl->ctx->log, RT_LOG_ERROR,
               "tcp: all %zu registration slots in use (raise FERRY_TCP_REG_SLOTS)",
               mod->p.reg_slots);
        return FERRY_ERR_NO_RESOURCE;
    }
    tcp_reg_t *reg = calloc(1, sizeof(*reg));
    if (reg == NULL)
        return FERRY_ERR_NO_MEMORY;
    /* Generations are odd while a slot is in use, so 0 never names one. */
    mod->reg_gen[slot] += (mod->reg_gen[slot] & 1) ? 2 : 1;
    reg->magic = TCP_REG_MAGIC;
    reg->slot = slot;
    reg->gen = mod->reg_gen[slot];
    reg->base.base = base;
    reg->base.len = len;
    reg->base.access = access;
    memcpy(reg->base.key, &reg->slot, sizeof(reg->slot));
    memcpy(reg->base.key + sizeof(reg->slot), &reg->gen, sizeof(reg->gen));
    mod->regs[slot] = reg;
    *reg_out = &reg->base;
    return FERRY_OK;
}

/* Get answers still to be written that point into the registration get a
 * copy of their data, and a put being read into it is discarded, so nothing
 * touches the memory once it is deregistered. */
static void detach_slot(tcp_module_t *mod, uint32_t slot)
{
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *ep = mod->eps[r];
        if (ep == NULL)
            continue;
        for (util_list_item_t *it = util_list_first(&ep->queue); it != NULL;
             it = util_list_next(&ep->queue, it)) {
            btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
            if (frag->op != TCP_OP_CTL)
                continue;
            tcp_ctl_t *ctl = UTIL_CONTAINER_OF(frag, tcp_ctl_t, frag);
            if (ctl->slot != slot || ctl->owned != NULL || ctl->data_len == 0)
                continue;
            ctl->owned = malloc(ctl->data_len);
            if (ctl->owned == NULL) {
                tcp_ep_fail(mod, ep, FERRY_ERR_NO_MEMORY,
                            "out of memory keeping a get answer of %zu bytes", ctl->data_len);
                break;
            }
            memcpy(ctl->owned, ctl->data, ctl->data_len);
            ctl->slot = UINT32_MAX;
        }
        if (ep->rx_mode == TCP_RX_DIRECT && ep->rx_type == TCP_T_PUT && ep->rx_slot == slot) {
            ep->rx_mode = TCP_RX_DISCARD;
            ep->rx_status = FERRY_ERR_ACCESS;
        }
    }
}

int tcp_deregister_mem(ferry_btl_module_t *btl, ferry_btl_reg_t *breg)
{
    tcp_module_t *mod = (tcp_module_t *)btl;
    tcp_reg_t *reg = (tcp_reg_t *)breg;
    if (btl == NULL || reg == NULL || reg->magic != TCP_REG_MAGIC ||
        reg->slot >= mod->p.reg_slots || mod->regs[reg->slot] != reg)
        return FERRY_ERR_INVALID;
    detach_slot(mod, reg->slot);
    mod->reg_gen[reg->slot]++; /* even: matches no key */
    mod->regs[reg->slot] = NULL;
    reg->magic = 0;
    free(reg);
    return FERRY_OK;
}

int tcp_reg_lookup(tcp_module_t *mod, uint32_t slot, uint32_t gen, uint64_t addr, size_t len,
                   uint32_t need, tcp_reg_t **reg_out)
{
    if (slot >= mod->p.reg_slots || (gen & 1) == 0 || mod->reg_gen[slot] != gen ||
        mod->regs[slot] == NULL)
        return FERRY_ERR_ACCESS;
    tcp_reg_t *reg = mod->regs[slot];
    int rc = btl_base_check_access(&reg->base, addr, len, need);
    if (rc == FERRY_OK)
        *reg_out = reg;
    return rc;
}

static int rdma_start(tcp_module_t *mod, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                      uint8_t op)
{
    if (mod == NULL || ep == NULL || ep->mod != mod || !btl_frag_valid(des) ||
        (des->flags & FERRY_BTL_DES_INFLIGHT) || des->src == NULL || des->dst == NULL ||
        des->src_cnt != 1 || des->dst_cnt != 1 || des->src[0].len != des->dst[0].len ||
        des->src[0].len > TCP_MAX_RDMA)
        return FERRY_ERR_INVALID;
    const ferry_btl_segment_t *local = op == TCP_OP_PUT ? &des->src[0] : &des->dst[0];
    if (local->len > 0 && local->addr == 0)
        return FERRY_ERR_INVALID;
    if (ep->deleted || ep->state == TCP_EP_CLOSED ||
        (ep->state == TCP_EP_FAILED && !ep->report_pending))
        return FERRY_ERR_UNREACH;
    if (ep->state == TCP_EP_NEW && tcp_ep_connect(mod, ep) != FERRY_OK && !ep->report_pending)
        return FERRY_ERR_UNREACH;
    btl_frag_t *frag = btl_frag_of(des);
    frag->op = op;
    frag->ep = ep;
    frag->cookie = ++mod->next_cookie;
    des->flags |= FERRY_BTL_DES_INFLIGHT;
    ep->rdma_inflight++;
    if (ep->state == TCP_EP_FAILED) {
        /* Failed, not yet reported: the report comes first, then this. */
        tcp_complete(mod, frag, FERRY_ERR_UNREACH);
        return FERRY_OK;
    }
    bool was_empty = util_list_empty(&ep->queue);
    tcp_enqueue(mod, ep, frag, tcp_frag_wire_len(frag));
    if (was_empty && ep->state == TCP_EP_CONNECTED)
        tcp_push(mod, ep);
    return FERRY_OK;
}

int tcp_put(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des)
{
    return rdma_start((tcp_module_t *)btl, ep, des, TCP_OP_PUT);
}

int tcp_get(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des)
{
    return rdma_start((tcp_module_t *)btl, ep, des, TCP_OP_GET);
}
