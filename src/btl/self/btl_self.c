/*
 * The self transport: loopback within one process, with every operation of
 * the contract, put and get included.
 *
 * Memory that prepare_src/prepare_dst describe in place is registered through
 * the registration cache the shared fragment code keeps (src/mem); the
 * registrations the application makes itself (ferry_mem_register) are
 * exact and uncached, since deregistering them must revoke their keys.
 *
 * Nothing is delivered from inside the call that starts it: sends and RDMA
 * operations join one pending queue that progress drains in order, so self
 * behaves as a real transport would (callbacks from progress only, back
 * pressure when the fragment pools run dry) and a handler that sends cannot
 * recurse without bound.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "btl/base.h"
#include "btl/base_atomic.h"
#include "btl/frag.h"
#include "mem/rcache.h"
#include "util/list.h"

#define SELF_REG_MAGIC 0x53524547u

typedef enum { SELF_OP_SEND, SELF_OP_PUT, SELF_OP_GET, SELF_OP_PUTN } self_op_t;

typedef struct self_module self_module_t;

typedef struct self_reg {
    ferry_btl_reg_t base; /* key holds a self_key_t */
    uint32_t magic;
    uint32_t slot;
    uint32_t gen;
    uint64_t nonce;
} self_reg_t;

/* The key a self registration hands out: where to find it (slot), which of
 * the slot's registrations it is (generation), and 64 random bits drawn for
 * it, so that knowing keys of other registrations says nothing of this
 * one's: a key is not guessed, only given. */
typedef struct self_key {
    uint32_t slot;
    uint32_t gen;
    uint64_t nonce;
} self_key_t;

struct ferry_btl_endpoint {
    self_module_t *mod;
    int rank;
};

struct self_module {
    ferry_btl_module_t super;
    btl_frags_t frags;
    util_list_t pending; /* frags to deliver or execute, in order */
    size_t rdma_pending;
    ferry_btl_endpoint_t *ep; /* the only endpoint: this process */
    self_reg_t **regs;        /* by slot; NULL where free */
    uint32_t *reg_gen;        /* generation per slot, to refuse stale keys */
    uint32_t nregs;
    btl_nonces_t nonces; /* random bits for keys, drawn in batches */
};

static self_module_t *self_of(ferry_btl_module_t *btl)
{
    return (self_module_t *)btl;
}

/* ---- registration ---- */

static int self_register_mem(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *base,
                             size_t len, uint32_t access, ferry_btl_reg_t **reg_out)
{
    self_module_t *mod = self_of(btl);
    int rc = btl_base_check_register(btl, base, len, access, reg_out);
    if (rc != FERRY_OK)
        return rc;

    uint32_t slot = 0;
    while (slot < mod->nregs && mod->regs[slot] != NULL)
        slot++;
    if (slot == mod->nregs) {
        uint32_t n = mod->nregs == 0 ? 16 : mod->nregs * 2;
        self_reg_t **regs = realloc(mod->regs, n * sizeof(*regs));
        if (regs == NULL)
            return FERRY_ERR_NO_MEMORY;
        mod->regs = regs;
        uint32_t *gen = realloc(mod->reg_gen, n * sizeof(*gen));
        if (gen == NULL)
            return FERRY_ERR_NO_MEMORY;
        mod->reg_gen = gen;
        for (uint32_t i = mod->nregs; i < n; i++) {
            mod->regs[i] = NULL;
            mod->reg_gen[i] = 0;
        }
        mod->nregs = n;
    }
    self_reg_t *reg = calloc(1, sizeof(*reg));
    if (reg == NULL)
        return FERRY_ERR_NO_MEMORY;
    if ((rc = btl_base_nonce(btl, &mod->nonces, "self", &reg->nonce)) != FERRY_OK) {
        free(reg);
        return rc;
    }
    reg->magic = SELF_REG_MAGIC;
    reg->slot = slot;
    reg->gen = ++mod->reg_gen[slot];
    reg->base.base = base;
    reg->base.len = len;
    reg->base.access = access;
    self_key_t key = {.slot = slot, .gen = reg->gen, .nonce = reg->nonce};
    memcpy(reg->base.key, &key, sizeof(key));
    mod->regs[slot] = reg;
    *reg_out = &reg->base;
    return FERRY_OK;
}

static int self_deregister_mem(ferry_btl_module_t *btl, ferry_btl_reg_t *breg)
{
    self_module_t *mod = self_of(btl);
    self_reg_t *reg = (self_reg_t *)breg;
    if (btl == NULL || reg == NULL || reg->magic != SELF_REG_MAGIC || reg->slot >= mod->nregs ||
        mod->regs[reg->slot] != reg)
        return FERRY_ERR_INVALID;
    mod->regs[reg->slot] = NULL;
    reg->magic = 0;
    free(reg);
    return FERRY_OK;
}

/* The registration a remote segment's key names, if it still exists. */
static const ferry_btl_reg_t *reg_lookup(const self_module_t *mod, const uint8_t *keybytes)
{
    self_key_t key;
    memcpy(&key, keybytes, sizeof(key));
    if (key.slot >= mod->nregs || mod->regs[key.slot] == NULL ||
        mod->regs[key.slot]->gen != key.gen || mod->regs[key.slot]->nonce != key.nonce)
        return NULL;
    return &mod->regs[key.slot]->base;
}

/* ---- endpoints ---- */

static int self_add_procs(ferry_btl_module_t *btl, size_t n, const ferry_btl_proc_t *procs,
                          ferry_btl_endpoint_t **eps_out, struct ferry_bitmap *reachable)
{
    self_module_t *mod = self_of(btl);
    if (btl == NULL || (n > 0 && (procs == NULL || eps_out == NULL)))
        return FERRY_ERR_INVALID;
    for (size_t i = 0; i < n; i++) {
        eps_out[i] = NULL;
        if (procs[i].rank != btl->ctx->rank)
            continue;
        if (mod->ep == NULL) {
            mod->ep = calloc(1, sizeof(*mod->ep));
            if (mod->ep == NULL)
                return FERRY_ERR_NO_MEMORY;
            mod->ep->mod = mod;
            mod->ep->rank = procs[i].rank;
        }
        eps_out[i] = mod->ep;
        if (reachable != NULL)
            util_bitmap_set(reachable, i);
    }
    return FERRY_OK;
}

static void putn_complete(self_module_t *mod, btl_frag_t *frag, int status);

/* Completes one frag taken off the pending queue with status. */
static void frag_complete(self_module_t *mod, btl_frag_t *frag, int status)
{
    ferry_btl_desc_t *des = &frag->base;
    uint32_t flags = des->flags;
    if (frag->op == SELF_OP_PUTN) {
        putn_complete(mod, frag, status);
        return;
    }
    if (frag->op != SELF_OP_SEND)
        mod->rdma_pending--;
    des->flags &= ~(uint32_t)FERRY_BTL_DES_INFLIGHT;
    /* After the callback the descriptor may belong to the caller again (and
     * be freed by it), so only what was read before is used. */
    if (des->cbfunc != NULL)
        des->cbfunc(&mod->super, frag->ep, des, status);
    if (flags & FERRY_BTL_DES_OWNERSHIP)
        btl_frag_put(&mod->frags, frag);
}

/* Completes everything queued for ep (every endpoint when NULL). */
static void fail_pending(self_module_t *mod, int status)
{
    util_list_item_t *it;
    while ((it = util_list_pop_front(&mod->pending)) != NULL)
        frag_complete(mod, UTIL_CONTAINER_OF(it, btl_frag_t, link), status);
}

static int self_del_procs(ferry_btl_module_t *btl, size_t n, ferry_btl_endpoint_t **eps)
{
    self_module_t *mod = self_of(btl);
    if (btl == NULL || (n > 0 && eps == NULL))
        return FERRY_ERR_INVALID;
    for (size_t i = 0; i < n; i++) {
        if (eps[i] == NULL || eps[i] != mod->ep)
            continue;
        fail_pending(mod, FERRY_ERR_UNREACH);
        free(mod->ep);
        mod->ep = NULL;
    }
    return FERRY_OK;
}

/* ---- descriptors ---- */

/* ---- data movement ---- */

/* Checks what every operation needs and queues it. */
static int frag_start(self_module_t *mod, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                      self_op_t op)
{
    btl_frag_t *frag = btl_frag_of(des);
    if (ep == NULL || ep != mod->ep || !btl_frag_valid(des) ||
        (des->flags & FERRY_BTL_DES_INFLIGHT))
        return FERRY_ERR_INVALID;
    if (op == SELF_OP_SEND) {
        if (des->src == NULL || des->src_cnt != 1 || des->src[0].len > mod->super.attr.max_send_size)
            return FERRY_ERR_INVALID;
    } else {
        if (des->src == NULL || des->dst == NULL || des->src_cnt != 1 || des->dst_cnt != 1 ||
            des->src[0].len != des->dst[0].len || des->src[0].len > mod->super.attr.max_rdma_size)
            return FERRY_ERR_INVALID;
        mod->rdma_pending++;
    }
    frag->op = op;
    frag->ep = ep;
    des->flags |= FERRY_BTL_DES_INFLIGHT;
    util_list_append(&mod->pending, &frag->link);
    return FERRY_OK;
}

static int self_send(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                     uint8_t tag)
{
    if (btl == NULL || des == NULL || tag >= FERRY_BTL_TAG_BTL_MIN)
        return FERRY_ERR_INVALID;
    int rc = frag_start(self_of(btl), ep, des, SELF_OP_SEND);
    if (rc == FERRY_OK)
        btl_frag_of(des)->tag = tag;
    return rc;
}

static int self_sendi(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *header,
                      size_t header_len, const void *payload, size_t payload_len, uint8_t tag)
{
    if (btl == NULL || ep == NULL || tag >= FERRY_BTL_TAG_BTL_MIN ||
        (header == NULL && header_len > 0) || (payload == NULL && payload_len > 0) ||
        header_len > btl->attr.max_send_size ||
        payload_len > btl->attr.max_send_size - header_len)
        return FERRY_ERR_INVALID;
    ferry_btl_desc_t *des;
    int rc = btl_frags_op_alloc(btl, ep, header_len + payload_len, FERRY_BTL_DES_OWNERSHIP,
                                &des);
    if (rc != FERRY_OK)
        return rc;
    char *p = ferry_btl_seg_ptr(&des->src[0]);
    if (header_len > 0)
        memcpy(p, header, header_len);
    if (payload_len > 0)
        memcpy(p + header_len, payload, payload_len);
    rc = self_send(btl, ep, des, tag);
    if (rc != FERRY_OK)
        btl_frags_op_free(btl, des);
    return rc;
}

static int self_put(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des)
{
    if (btl == NULL || des == NULL)
        return FERRY_ERR_INVALID;
    return frag_start(self_of(btl), ep, des, SELF_OP_PUT);
}

static int self_get(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des)
{
    if (btl == NULL || des == NULL)
        return FERRY_ERR_INVALID;
    return frag_start(self_of(btl), ep, des, SELF_OP_GET);
}

/* Carries out a put or get as the target would: the remote range is checked
 * against the registration its key names before a byte moves. */
static int rdma_execute(self_module_t *mod, btl_frag_t *frag)
{
    ferry_btl_desc_t *des = &frag->base;
    bool put = frag->op == SELF_OP_PUT;
    const ferry_btl_segment_t *remote = put ? &des->dst[0] : &des->src[0];
    const ferry_btl_segment_t *local = put ? &des->src[0] : &des->dst[0];
    const ferry_btl_reg_t *reg = reg_lookup(mod, remote->key);
    if (remote->len == 0)
        return FERRY_OK;
    if (reg == NULL)
        return FERRY_ERR_ACCESS;
    int rc = btl_base_check_access(reg, remote->addr, remote->len,
                                   put ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ);
    if (rc != FERRY_OK)
        return rc;
    if (put)
        memmove(ferry_btl_seg_ptr(remote), ferry_btl_seg_ptr(local), remote->len);
    else
        memmove(ferry_btl_seg_ptr(local), ferry_btl_seg_ptr(remote), remote->len);
    return FERRY_OK;
}

/* The direct path: the same checks and copy as rdma_execute, here and now. */
static int self_rdma_direct(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, bool put,
                            void *local, uint64_t raddr, const uint8_t *rkey, size_t size)
{
    self_module_t *mod = self_of(btl);
    if (btl == NULL || ep == NULL || ep != mod->ep || rkey == NULL ||
        (local == NULL && size > 0) || size > btl->attr.max_rdma_size)
        return FERRY_ERR_INVALID;
    if (size == 0)
        return FERRY_ERR_NOT_SUPPORTED;
    const ferry_btl_reg_t *reg = reg_lookup(mod, rkey);
    if (reg == NULL || btl_base_check_access(reg, raddr, size,
                                             put ? FERRY_ACCESS_REMOTE_WRITE
                                                 : FERRY_ACCESS_REMOTE_READ) != FERRY_OK)
        return FERRY_ERR_ACCESS;
    if (put)
        memmove((void *)(uintptr_t)raddr, local, size);
    else
        memmove(local, (const void *)(uintptr_t)raddr, size);
    return FERRY_BTL_DONE;
}

/* ---- puts with notification ---- */

/*
 * A put with notification (btl.h, put_notify_inline) is one fragment on the
 * pending queue, like a send: so it keeps its place among the sends and
 * puts started before and after it, and nothing of it happens inside the
 * call. Its fragment holds a self_putn_t, then the notification's payload,
 * then the put's data; progress checks the key as rdma_execute does, copies,
 * reports the outcome and then runs the tag's handler, refused or not.
 */
typedef struct self_putn {
    ferry_btl_rdma_cb_t cb;
    void *cbctx;
    void *cbdata;
    void *local; /* as the caller gave it, for a tracked one's callback */
    uint64_t raddr;
    size_t size; /* the put's bytes */
    size_t plen; /* the notification's bytes */
    uint32_t flags;
    uint8_t key[sizeof(self_key_t)];
} self_putn_t;

static self_putn_t putn_of(const btl_frag_t *frag)
{
    self_putn_t pn;
    memcpy(&pn, frag->payload, sizeof(pn));
    return pn;
}

static int self_put_notify_inline(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                  const void *local, size_t size, uint64_t raddr,
                                  const uint8_t *rkey, uint8_t tag, const void *payload,
                                  size_t plen, uint32_t flags, ferry_btl_rdma_cb_t cb, void *cbctx,
                                  void *cbdata)
{
    self_module_t *mod = self_of(btl);
    if (btl == NULL || ep == NULL || ep != mod->ep || rkey == NULL || cb == NULL ||
        tag >= FERRY_BTL_TAG_BTL_MIN || (payload == NULL && plen > 0) ||
        (local == NULL && size > 0) || (flags & ~(uint32_t)FERRY_BTL_PUTN_UNTRACKED) != 0)
        return FERRY_ERR_INVALID;
    /* One fragment no larger than the largest send, its record included;
     * an exhausted pool is "not now": the caller takes the two-part path. */
    size_t max = btl->attr.max_send_size - sizeof(self_putn_t);
    if (size > max || plen > max - size)
        return FERRY_ERR_NOT_SUPPORTED;
    ferry_btl_desc_t *des;
    if (btl_frags_op_alloc(btl, ep, sizeof(self_putn_t) + plen + size, FERRY_BTL_DES_OWNERSHIP,
                           &des) != FERRY_OK)
        return FERRY_ERR_NOT_SUPPORTED;
    self_putn_t pn = {
        .cb = cb,
        .cbctx = cbctx,
        .cbdata = cbdata,
        .local = (void *)local,
        .raddr = raddr,
        .size = size,
        .plen = plen,
        .flags = flags,
    };
    memcpy(pn.key, rkey, sizeof(pn.key));
    unsigned char *p = ferry_btl_seg_ptr(&des->src[0]);
    memcpy(p, &pn, sizeof(pn));
    if (plen > 0)
        memcpy(p + sizeof(pn), payload, plen);
    if (size > 0)
        memcpy(p + sizeof(pn) + plen, local, size);
    btl_frag_t *frag = btl_frag_of(des);
    frag->op = SELF_OP_PUTN;
    frag->tag = tag;
    frag->ep = ep;
    des->flags |= FERRY_BTL_DES_INFLIGHT;
    /* Counted with the puts, tracked or not, so that flush runs it (and
     * reports an untracked one's refusal) before it returns. */
    mod->rdma_pending++;
    util_list_append(&mod->pending, &frag->link);
    return FERRY_OK;
}

/* The target's half: the key, range and right checked against the
 * registration the key names now, exactly as rdma_execute checks a put,
 * then the copy. A put of no bytes needs no key, as there. */
static int putn_write(self_module_t *mod, const self_putn_t *pn, const unsigned char *data)
{
    if (pn->size == 0)
        return FERRY_OK;
    const ferry_btl_reg_t *reg = reg_lookup(mod, pn->key);
    if (reg == NULL ||
        btl_base_check_access(reg, pn->raddr, pn->size, FERRY_ACCESS_REMOTE_WRITE) != FERRY_OK)
        return FERRY_ERR_ACCESS;
    memmove((void *)(uintptr_t)pn->raddr, data, pn->size);
    return FERRY_OK;
}

/* The initiator's half of the outcome: a tracked one completes with
 * status (the put's, or the error that ended it before it ran); an
 * untracked one is told only of a refusal. */
static void putn_report(self_module_t *mod, const self_putn_t *pn, int status)
{
    mod->rdma_pending--;
    if (!(pn->flags & FERRY_BTL_PUTN_UNTRACKED))
        pn->cb(&mod->super, mod->ep, pn->local, NULL, pn->cbctx, pn->cbdata, status);
    else if (status == FERRY_ERR_ACCESS)
        pn->cb(&mod->super, mod->ep, NULL, NULL, pn->cbctx, NULL, FERRY_ERR_ACCESS);
}

static void putn_release(self_module_t *mod, btl_frag_t *frag)
{
    frag->base.flags &= ~(uint32_t)FERRY_BTL_DES_INFLIGHT;
    btl_frag_put(&mod->frags, frag);
}

/* One taken off the queue without running (del_procs, finalize). */
static void putn_complete(self_module_t *mod, btl_frag_t *frag, int status)
{
    self_putn_t pn = putn_of(frag);
    putn_release(mod, frag);
    putn_report(mod, &pn, status);
}

/* Carries out one put with notification from progress: the data in if the
 * key allows, its outcome reported, then the tag's handler with the
 * payload, refused or not. The outcome comes first, as a remote target's
 * answer leaves before its handler runs: whatever the handler sends (or
 * delivers, should it progress) comes after the refusal, so an untracked
 * one's refusal is always known before anything sent after it. */
static void putn_execute(self_module_t *mod, btl_frag_t *frag)
{
    self_putn_t pn = putn_of(frag);
    const unsigned char *payload = (const unsigned char *)frag->payload + sizeof(pn);
    int status = putn_write(mod, &pn, payload + pn.plen);
    putn_report(mod, &pn, status);
    ferry_btl_segment_t seg = {.addr = (uint64_t)(uintptr_t)payload, .len = pn.plen};
    ferry_btl_recv_desc_t rd = {
        .ep = frag->ep,
        .peer = frag->ep->rank,
        .tag = frag->tag,
        .segs = &seg,
        .seg_cnt = 1,
    };
    btl_base_deliver(&mod->super, &rd);
    putn_release(mod, frag);
}

/* ferry_btl_ops.target_resolve: the checks of rdma_execute. */
static int self_target_resolve(ferry_btl_module_t *btl, const uint8_t *key, uint64_t addr,
                               size_t len, uint32_t need, void **ptr_out)
{
    const ferry_btl_reg_t *reg = reg_lookup(self_of(btl), key);
    if (reg == NULL || btl_base_check_access(reg, addr, len, need) != FERRY_OK)
        return FERRY_ERR_ACCESS;
    *ptr_out = (void *)(uintptr_t)addr;
    return FERRY_OK;
}

/* Atomics: the CPU's own, on our memory, after the same checks a target
 * makes (key live, range inside, FERRY_ACCESS_REMOTE_ATOMIC); complete at
 * once. */
static int self_atomic(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                       uint64_t raddr, const uint8_t *rkey, uint32_t op, uint64_t operand,
                       uint64_t compare, uint32_t flags, bool cswap)
{
    self_module_t *mod = self_of(btl);
    if (btl == NULL || ep == NULL || ep != mod->ep || rkey == NULL)
        return FERRY_ERR_INVALID;
    int rc = btl_base_atomic_check(btl, op, cswap, raddr, flags);
    if (rc != FERRY_OK)
        return rc;
    bool w32 = (flags & FERRY_BTL_ATOMIC_FLAG_32BIT) != 0;
    const ferry_btl_reg_t *reg = reg_lookup(mod, rkey);
    if (reg == NULL ||
        btl_base_check_access(reg, raddr, w32 ? 4 : 8, FERRY_ACCESS_REMOTE_ATOMIC) != FERRY_OK)
        return FERRY_ERR_ACCESS;
    uint64_t old = ferry_btl_atomic_apply((void *)(uintptr_t)raddr, w32, cswap, op, operand, compare);
    if (local != NULL)
        btl_atomic_store_result(local, w32, old);
    return FERRY_BTL_DONE;
}

static int self_atomic_op(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, uint64_t raddr,
                          const uint8_t *rkey, ferry_btl_atomic_op_t op, uint64_t operand,
                          uint32_t flags, ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    return self_atomic(btl, ep, NULL, raddr, rkey, op, operand, 0, flags, false);
}

static int self_atomic_fop(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                           uint64_t raddr, ferry_btl_reg_t *lreg, const uint8_t *rkey,
                           ferry_btl_atomic_op_t op, uint64_t operand, uint32_t flags,
                           ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    if (local == NULL)
        return FERRY_ERR_INVALID;
    return self_atomic(btl, ep, local, raddr, rkey, op, operand, 0, flags, false);
}

static int self_atomic_cswap(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                             uint64_t raddr, ferry_btl_reg_t *lreg, const uint8_t *rkey,
                             uint64_t compare, uint64_t value, uint32_t flags,
                             ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    if (local == NULL)
        return FERRY_ERR_INVALID;
    return self_atomic(btl, ep, local, raddr, rkey, 0, value, compare, flags, true);
}

static int self_progress(ferry_btl_module_t *btl)
{
    self_module_t *mod = self_of(btl);
    /* Only what was queued before this call: work queued by the callbacks
     * below waits for the next call, so one call always returns. */
    size_t n = util_list_len(&mod->pending);
    int handled = 0;
    for (size_t i = 0; i < n; i++) {
        util_list_item_t *it = util_list_pop_front(&mod->pending);
        if (it == NULL)
            break;
        btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
        int status = FERRY_OK;
        if (frag->op == SELF_OP_PUTN) {
            putn_execute(mod, frag);
            handled++;
            continue;
        }
        if (frag->op == SELF_OP_SEND) {
            ferry_btl_recv_desc_t rd = {
                .ep = frag->ep,
                .peer = frag->ep->rank,
                .tag = frag->tag,
                .segs = &frag->base.src[0],
                .seg_cnt = 1,
            };
            btl_base_deliver(btl, &rd);
        } else {
            status = rdma_execute(mod, frag);
        }
        frag_complete(mod, frag, status);
        handled++;
    }
    return handled;
}

static int self_flush(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep)
{
    self_module_t *mod = self_of(btl);
    if (btl == NULL || (ep != NULL && ep != mod->ep))
        return FERRY_ERR_INVALID;
    while (mod->rdma_pending > 0)
        self_progress(btl);
    return FERRY_OK;
}

static void self_dump(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, int verbose)
{
    self_module_t *mod = self_of(btl);
    rt_log(&btl->ctx->log, RT_LOG_ERROR,
           "self: %zu queued (%zu rdma); descriptors in use: eager %zu, max %zu, user %zu",
           util_list_len(&mod->pending), mod->rdma_pending,
           btl_frags_in_use(&mod->frags, BTL_FRAG_EAGER),
           btl_frags_in_use(&mod->frags, BTL_FRAG_MAX),
           btl_frags_in_use(&mod->frags, BTL_FRAG_USER));
}

static int self_finalize(ferry_btl_module_t *btl)
{
    self_module_t *mod = self_of(btl);
    if (mod == NULL)
        return FERRY_OK;
    fail_pending(mod, FERRY_ERR_CANCELED);
    int rc = btl_frags_fini(&mod->frags);
    for (uint32_t i = 0; i < mod->nregs; i++)
        free(mod->regs[i]);
    free(mod->regs);
    free(mod->reg_gen);
    free(mod->ep);
    free(mod);
    return rc;
}

static const ferry_btl_ops_t self_ops = {
    .add_procs = self_add_procs,
    .del_procs = self_del_procs,
    .register_am = btl_base_register_am,
    .register_error = btl_base_register_error,
    .finalize = self_finalize,
    .alloc = btl_frags_op_alloc,
    .free = btl_frags_op_free,
    .prepare_src = btl_frags_op_prepare_src,
    .prepare_dst = btl_frags_op_prepare_dst,
    .send = self_send,
    .sendi = self_sendi,
    .put = self_put,
    .get = self_get,
    .register_mem = self_register_mem,
    .deregister_mem = self_deregister_mem,
    .mem_alloc = btl_base_unsupported_mem_alloc,
    .mem_free = btl_base_unsupported_mem_free,
    .atomic_op = self_atomic_op,
    .atomic_fop = self_atomic_fop,
    .atomic_cswap = self_atomic_cswap,
    .rdma_direct = self_rdma_direct,
    .put_notify_inline = self_put_notify_inline,
    .target_resolve = self_target_resolve,
    .flush = self_flush,
    .progress = self_progress,
    .dump = self_dump,
};

/* ---- component ---- */

typedef struct self_params {
    size_t eager_limit, max_send_size, num, max, inc;
} self_params_t;

static int self_read_params(ferry_ctx_t *ctx, self_params_t *p)
{
    rt_params_t *r = &ctx->params;
    int rc;
    if ((rc = rt_param_register_size(r, "self_eager_limit", 4096, 64, 1u << 20,
                                     "Largest self fragment taken from the eager pool (bytes)",
                                     &p->eager_limit)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "self_max_send_size", 256 * 1024, 64, 64u << 20,
                                     "Largest single self send (bytes)",
                                     &p->max_send_size)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "self_free_list_num", 8, 1, 1u << 20,
                                     "Descriptors each self pool allocates at start",
                                     &p->num)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "self_free_list_max", 256, 1, 1u << 20,
                                     "Most descriptors in each self pool (back pressure beyond)",
                                     &p->max)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "self_free_list_inc", 32, 1, 1u << 20,
                                     "Descriptors added when a self pool runs dry",
                                     &p->inc)) != FERRY_OK)
        return rc;
    if (p->eager_limit > p->max_send_size) {
        rt_log(&ctx->log, RT_LOG_ERROR,
               "FERRY_SELF_EAGER_LIMIT (%zu) must not exceed FERRY_SELF_MAX_SEND_SIZE (%zu)",
               p->eager_limit, p->max_send_size);
        return FERRY_ERR_INVALID;
    }
    if (p->num > p->max) {
        rt_log(&ctx->log, RT_LOG_ERROR,
               "FERRY_SELF_FREE_LIST_NUM (%zu) must not exceed FERRY_SELF_FREE_LIST_MAX (%zu)",
               p->num, p->max);
        return FERRY_ERR_INVALID;
    }
    return FERRY_OK;
}

static int self_register_params(ferry_ctx_t *ctx)
{
    self_params_t p;
    mem_params_t mp;
    int rc = self_read_params(ctx, &p);
    /* The registration cache's parameters belong to no transport; self is
     * always built, so registering them here lists them in ferry_info -a
     * (and checks their values) even before any cache exists. */
    if (rc == FERRY_OK)
        rc = mem_params_register(&ctx->params, &mp);
    return rc;
}

extern const ferry_btl_component_t btl_self_component;

static int self_init(ferry_btl_module_t *btl, void *arg)
{
    util_list_init(&self_of(btl)->pending);
    return FERRY_OK;
}

static int self_open(ferry_ctx_t *ctx, ferry_btl_module_t ***modules_out, int *count_out)
{
    self_params_t p;
    int rc = self_read_params(ctx, &p);
    if (rc != FERRY_OK)
        return rc;
    const ferry_btl_attr_t attr = {
        .name = "self",
        .eager_limit = p.eager_limit,
        .max_send_size = p.max_send_size,
        .rdma_pipeline_frag_size = 4u << 20,
        .min_rdma_size = 0,
        .max_rdma_size = SIZE_MAX,
        .exclusivity = 65535, /* nothing is better for reaching oneself */
        .latency = 0,
        .bandwidth = 100000,
        .flags = FERRY_BTL_FLAG_SEND | FERRY_BTL_FLAG_SEND_INPLACE | FERRY_BTL_FLAG_PUT |
                 FERRY_BTL_FLAG_GET | FERRY_BTL_FLAG_SENDI | FERRY_BTL_FLAG_ATOMIC_OPS |
                 FERRY_BTL_FLAG_ATOMIC_FOPS,
        .reg_handle_size = sizeof(self_key_t),
        .atomic_flags = BTL_ATOMIC_SUPPORTS_CPU,
    };
    const btl_frag_params_t fp = {
        .eager_size = p.eager_limit,
        .max_size = p.max_send_size,
        .num = p.num,
        .max = p.max,
        .inc = p.inc,
        .max_frags = p.max < 64 ? p.max : 64, /* max fragments are large */
        .no_local_reg = true, /* puts and gets are copies by address */
    };
    const btl_base_open_args_t args = {
        .component = &btl_self_component,
        .module_size = sizeof(self_module_t),
        .attr = &attr,
        .ops = &self_ops,
        .frags_offset = offsetof(self_module_t, frags),
        .frag_params = &fp,
        .init = self_init,
    };
    return btl_base_open(ctx, &args, modules_out, count_out);
}

const ferry_btl_component_t btl_self_component = {
    .name = "self",
    .description = "loopback within one process",
    .register_params = self_register_params,
    .open = self_open,
    .always_open = true,
};
