/*
 * Registrations and put/get emulated over messages.
 *
 * A registration is a slot in this process's table, which all its tcp
 * modules share: made by the first module that registers a range, held by
 * each that registers it after, freed by the last deregistration. Its key
 * is the slot, the slot's generation (which deregistration bumps, so a
 * stale key names nothing) and 16 random bytes drawn for it, so a peer that
 * holds one key cannot make another from it. The target checks every
 * request against the table (btl_base_check_access), and that the module it
 * came through holds the registration, before a byte moves, and a get
 * answer's data is read from the registration only while it is written
 * (tcp_io.c).
 */
#include <stdlib.h>
#include <string.h>

#include "btl/tcp/tcp.h"

#define TCP_REG_MAGIC 0x54524547u

int tcp_regtab_create(size_t slots, tcp_regtab_t **tab_out)
{
    tcp_regtab_t *tab = calloc(1, sizeof(*tab));
    if (tab == NULL)
        return FERRY_ERR_NO_MEMORY;
    tab->regs = calloc(slots, sizeof(*tab->regs));
    tab->gen = calloc(slots, sizeof(*tab->gen));
    if (tab->regs == NULL || tab->gen == NULL) {
        free(tab->regs);
        free(tab->gen);
        free(tab);
        return FERRY_ERR_NO_MEMORY;
    }
    tab->slots = slots;
    tab->refs = 1;
    *tab_out = tab;
    return FERRY_OK;
}

void tcp_regtab_attach(tcp_regtab_t *tab, tcp_module_t *mod)
{
    tab->refs++;
    tab->mods[mod->index] = mod;
    mod->tab = tab;
}

void tcp_regtab_release(tcp_regtab_t *tab)
{
    if (tab == NULL || --tab->refs > 0)
        return;
    for (size_t i = 0; i < tab->slots; i++)
        if (tab->regs[i] != NULL) {
            rt_auth_wipe(tab->regs[i], sizeof(*tab->regs[i]));
            free(tab->regs[i]);
        }
    rt_auth_wipe(tab->key_pool, sizeof(tab->key_pool));
    free(tab->regs);
    free(tab->gen);
    free(tab);
}

/* Fills secret with random bytes, drawn from the system's source
 * (rt_auth_random) a pool at a time. */
static int draw_secret(tcp_module_t *mod, uint8_t *secret)
{
    tcp_regtab_t *tab = mod->tab;
    if (tab->key_pool_left < TCP_KEY_SECRET) {
        int rc = rt_auth_random(tab->key_pool, sizeof(tab->key_pool));
        if (rc != FERRY_OK) {
            rt_log(&mod->super.ctx->log, RT_LOG_ERROR, "tcp: no random bytes for a key");
            return rc;
        }
        tab->key_pool_left = sizeof(tab->key_pool);
    }
    tab->key_pool_left -= TCP_KEY_SECRET;
    uint8_t *src = tab->key_pool + tab->key_pool_left;
    memcpy(secret, src, TCP_KEY_SECRET);
    /* No byte of a key stays behind once handed out. */
    rt_auth_wipe(src, TCP_KEY_SECRET);
    return FERRY_OK;
}

static bool holds(const tcp_reg_t *reg, int index)
{
    return (reg->holders[index / 64] >> (index % 64)) & 1u;
}

static void hold(tcp_reg_t *reg, int index)
{
    reg->holders[index / 64] |= (uint64_t)1 << (index % 64);
    reg->nholders++;
}

/* The newest registration of exactly this range and these rights that mod
 * does not hold yet: the one another module has just made for the same
 * ferry_mem_register (the API registers with every module in turn), or its
 * registration cache's of the same range. NULL when there is none. */
static tcp_reg_t *find_shared(const tcp_module_t *mod, const void *base, size_t len,
                              uint32_t access)
{
    const tcp_regtab_t *tab = mod->tab;
    tcp_reg_t *best = NULL;
    for (size_t i = 0; i < tab->hi; i++) {
        tcp_reg_t *reg = tab->regs[i];
        if (reg != NULL && reg->base.base == base && reg->base.len == len &&
            reg->base.access == access && !holds(reg, mod->index) &&
            (best == NULL || reg->serial > best->serial))
            best = reg;
    }
    return best;
}

int tcp_register_mem(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *base, size_t len,
                     uint32_t access, ferry_btl_reg_t **reg_out)
{
    tcp_module_t *mod = (tcp_module_t *)btl;
    (void)ep;
    int rc = btl_base_check_register(btl, base, len, access, reg_out);
    if (rc != FERRY_OK)
        return rc;
    tcp_regtab_t *tab = mod->tab;
    tcp_reg_t *shared = tab->live > 0 ? find_shared(mod, base, len, access) : NULL;
    if (shared != NULL) {
        hold(shared, mod->index);
        *reg_out = &shared->base;
        return FERRY_OK;
    }
    uint32_t slot = 0;
    while (slot < tab->slots && tab->regs[slot] != NULL)
        slot++;
    if (slot == tab->slots) {
        rt_log(&btl->ctx->log, RT_LOG_ERROR,
               "tcp: all %zu registration slots in use (raise FERRY_TCP_REG_SLOTS)",
               tab->slots);
        return FERRY_ERR_NO_RESOURCE;
    }
    tcp_reg_t *reg = calloc(1, sizeof(*reg));
    if (reg == NULL)
        return FERRY_ERR_NO_MEMORY;
    rc = draw_secret(mod, reg->key.secret);
    if (rc != FERRY_OK) {
        free(reg);
        return rc;
    }
    /* Generations are odd while a slot is in use, so 0 never names one. */
    tab->gen[slot] += (tab->gen[slot] & 1) ? 2 : 1;
    reg->magic = TCP_REG_MAGIC;
    reg->key.slot = slot;
    reg->key.gen = tab->gen[slot];
    reg->base.base = base;
    reg->base.len = len;
    reg->base.access = access;
    reg->serial = ++tab->made;
    memcpy(reg->base.key, &reg->key, sizeof(reg->key));
    hold(reg, mod->index);
    tab->regs[slot] = reg;
    tab->live++;
    if (slot >= tab->hi)
        tab->hi = (size_t)slot + 1;
    *reg_out = &reg->base;
    return FERRY_OK;
}

/* A put being read into the registration, through any module, is discarded
 * from here on (and answered with FERRY_ERR_ACCESS). Get answers need
 * nothing: they look the registration up again for every byte they
 * write. */
static void detach_slot(tcp_regtab_t *tab, uint32_t slot)
{
    for (int k = 0; k < TCP_MAX_MODULES; k++) {
        tcp_module_t *mod = tab->mods[k];
        if (mod == NULL || mod->eps == NULL)
            continue;
        for (int r = 0; r < mod->nranks; r++) {
            ferry_btl_endpoint_t *ep = mod->eps[r];
            if (ep != NULL && ep->rx_mode == TCP_RX_DIRECT && ep->rx_type == TCP_T_PUT &&
                ep->rx_slot == slot) {
                ep->rx_mode = TCP_RX_DISCARD;
                ep->rx_status = FERRY_ERR_ACCESS;
            }
        }
    }
}

/* Drops module index's hold on reg; the last frees it and its slot. */
static void drop(tcp_regtab_t *tab, tcp_reg_t *reg, int index)
{
    reg->holders[index / 64] &= ~((uint64_t)1 << (index % 64));
    if (--reg->nholders > 0)
        return;
    uint32_t slot = reg->key.slot;
    detach_slot(tab, slot);
    tab->gen[slot]++; /* even: matches no key */
    tab->regs[slot] = NULL;
    tab->live--;
    rt_auth_wipe(reg, sizeof(*reg));
    free(reg);
}

int tcp_deregister_mem(ferry_btl_module_t *btl, ferry_btl_reg_t *breg)
{
    tcp_module_t *mod = (tcp_module_t *)btl;
    tcp_reg_t *reg = (tcp_reg_t *)breg;
    if (btl == NULL || reg == NULL || mod->tab == NULL)
        return FERRY_ERR_INVALID;
    tcp_regtab_t *tab = mod->tab;
    /* A handle this module does not hold (deregistered twice, or only
     * another module's) is refused, and the others' holds stay. */
    if (reg->magic != TCP_REG_MAGIC || reg->key.slot >= tab->slots ||
        tab->regs[reg->key.slot] != reg || !holds(reg, mod->index))
        return FERRY_ERR_INVALID;
    drop(tab, reg, mod->index);
    return FERRY_OK;
}

void tcp_regtab_detach(tcp_regtab_t *tab, tcp_module_t *mod)
{
    if (tab == NULL || tab->mods[mod->index] != mod)
        return;
    /* What this module still holds (registrations nobody deregistered
     * before finalize) is dropped; what others hold stays theirs. */
    for (size_t i = 0; i < tab->hi; i++)
        if (tab->regs[i] != NULL && holds(tab->regs[i], mod->index))
            drop(tab, tab->regs[i], mod->index);
    tab->mods[mod->index] = NULL;
    mod->tab = NULL;
    tcp_regtab_release(tab);
}

int tcp_reg_lookup(tcp_module_t *mod, const tcp_key_t *key, uint64_t addr, size_t len,
                   uint32_t need, tcp_reg_t **reg_out)
{
    if ((key->gen & 1) == 0 || !tcp_reg_alive(mod, key->slot, key->gen))
        return FERRY_ERR_ACCESS;
    tcp_reg_t *reg = mod->tab->regs[key->slot];
    /* In constant time: how long it takes does not tell how much of a
     * guessed secret was right. */
    if (!rt_auth_equal(reg->key.secret, key->secret, TCP_KEY_SECRET))
        return FERRY_ERR_ACCESS;
    /* Only a module that registered the range answers for it: a key
     * reaches no more memory through the process's other modules than it
     * did when each had a table of its own. */
    if (!holds(reg, mod->index))
        return FERRY_ERR_ACCESS;
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
        (ep->state == TCP_EP_FAILED && !tcp_ep_report_pending(mod, ep)))
        return FERRY_ERR_UNREACH;
    /* The budget a target grants each peer (tcp_io.c, owed_over): an
     * initiator that keeps within it is never paused, so two peers getting
     * from each other cannot stop each other. */
    size_t len = des->src[0].len;
    if (ep->rdma_inflight + btl_amo_inflight(&ep->amo) >= mod->p.rdma_max_inflight ||
        (op == TCP_OP_GET && ep->get_inflight_bytes > 0 &&
         (ep->get_inflight_bytes >= mod->p.sendq_max ||
          len > mod->p.sendq_max - ep->get_inflight_bytes)))
        return FERRY_ERR_NO_RESOURCE;
    if (ep->state == TCP_EP_NEW && tcp_ep_connect(mod, ep) != FERRY_OK &&
        !tcp_ep_report_pending(mod, ep))
        return FERRY_ERR_UNREACH;
    btl_frag_t *frag = btl_frag_of(des);
    frag->op = op;
    frag->ep = ep;
    frag->cookie = ++mod->next_cookie;
    des->flags |= FERRY_BTL_DES_INFLIGHT;
    ep->rdma_inflight++;
    if (op == TCP_OP_GET)
        ep->get_inflight_bytes += len;
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

/* ---- atomics, executed by the target ---- */

int tcp_target_resolve(ferry_btl_module_t *btl, const uint8_t *keybytes, uint64_t addr,
                       size_t len, uint32_t need, void **ptr_out)
{
    tcp_key_t key;
    memcpy(&key, keybytes, sizeof(key));
    tcp_reg_t *reg = NULL;
    int rc = tcp_reg_lookup((tcp_module_t *)btl, &key, addr, len, need, &reg);
    if (rc != FERRY_OK)
        return FERRY_ERR_ACCESS;
    *ptr_out = (void *)(uintptr_t)addr;
    return FERRY_OK;
}

static btl_amo_ep_t *amo_ep(ferry_btl_endpoint_t *ep)
{
    return &ep->amo;
}

const btl_amo_hooks_t tcp_amo_hooks = {
    .send = tcp_amo_send,
    .resolve = tcp_target_resolve,
    .ep_state = amo_ep,
};

/* The endpoint checks of rdma_start, then the generic path. */
static int atomic_start(tcp_module_t *mod, ferry_btl_endpoint_t *ep, void *local,
                        ferry_btl_reg_t *lreg, uint64_t raddr, const uint8_t *rkey, uint32_t op,
                        uint64_t operand, uint64_t compare, uint32_t flags, bool cswap,
                        bool fetch, ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    if (mod == NULL || ep == NULL || ep->mod != mod)
        return FERRY_ERR_INVALID;
    int rc = btl_base_atomic_check(&mod->super, op, cswap, raddr, flags);
    if (rc != FERRY_OK)
        return rc;
    if (ep->deleted || ep->state == TCP_EP_CLOSED || ep->state == TCP_EP_FAILED)
        return FERRY_ERR_UNREACH;
    /* Atomics count in the answers a target owes the peer with its puts
     * and gets (tcp_io.c, owed_over): the same budget holds. */
    if (ep->rdma_inflight + btl_amo_inflight(&ep->amo) >= mod->p.rdma_max_inflight)
        return FERRY_ERR_NO_RESOURCE;
    if (ep->state == TCP_EP_NEW && tcp_ep_connect(mod, ep) != FERRY_OK)
        return FERRY_ERR_UNREACH;
    if (ep->state == TCP_EP_FAILED)
        return FERRY_ERR_UNREACH;
    return btl_amo_start(&mod->super, &mod->amo, ep, local, lreg, raddr, rkey, op, operand,
                         compare, flags, cswap, fetch, cb, cbctx, cbdata);
}

int tcp_atomic_op(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, uint64_t raddr,
                  const uint8_t *rkey, ferry_btl_atomic_op_t op, uint64_t operand,
                  uint32_t flags, ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    return atomic_start((tcp_module_t *)btl, ep, NULL, NULL, raddr, rkey, op, operand, 0, flags,
                        false, false, cb, cbctx, cbdata);
}

int tcp_atomic_fop(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                   uint64_t raddr, ferry_btl_reg_t *lreg, const uint8_t *rkey,
                   ferry_btl_atomic_op_t op, uint64_t operand, uint32_t flags,
                   ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    return atomic_start((tcp_module_t *)btl, ep, local, lreg, raddr, rkey, op, operand, 0, flags,
                        false, true, cb, cbctx, cbdata);
}

int tcp_atomic_cswap(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                     uint64_t raddr, ferry_btl_reg_t *lreg, const uint8_t *rkey,
                     uint64_t compare, uint64_t value, uint32_t flags, ferry_btl_rdma_cb_t cb,
                     void *cbctx, void *cbdata)
{
    return atomic_start((tcp_module_t *)btl, ep, local, lreg, raddr, rkey, 0, value, compare,
                        flags, true, true, cb, cbctx, cbdata);
}
