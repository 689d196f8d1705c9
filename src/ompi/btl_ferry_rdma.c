/*
 * The one adapter between Open MPI's RDMA (BTL 3.x: put, get and atomics
 * on an address and a registration handle, no descriptor; a return of 1
 * for an operation complete inside the call) and ferry's transport
 * contract. Everything that depends on the shape of ferry's RDMA ops lives
 * here, so that the contract's move to descriptor-free put and get (#10)
 * touches this file alone. Today a put is a descriptor made by prepare_src over the local
 * memory in place (FERRY_BTL_PREP_RDMA, which registers it through the
 * transport's cache when Open MPI gave no local handle) with the remote
 * segment filled in, handed to put; a get the same through prepare_dst.
 * They complete from ferry's progress (never inside the call).
 *
 * Atomics (atomic_op, atomic_fop, atomic_cswap) are ferry's own, shaped as
 * Open MPI's: the operation, the 32-bit flag and the support bits are the
 * same values (checked at compile time below), the remote handle's first
 * bytes are the ferry key, and ferry's completion callback carries back
 * what Open MPI's needs. An atomic ferry completes inside the call (self,
 * sm on its shared heap) returns 1 with no callback, as Open MPI expects,
 * but for a fetching 32-bit one (see amo_started). Operations on the
 * process's own memory, for which osc/rdma gives no endpoint, are done here
 * (see "the process's own memory").
 *
 * Registrations (register_mem) are ferry registrations; the handle Open MPI
 * holds is the key first (what it sends to peers), then the registration.
 */
#include "btl_ferry.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "opal/mca/btl/base/base.h"
#include "opal/mca/memory/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/memoryhooks/memory_internal.h"
#include "opal/runtime/opal_params.h"
#include "opal/util/output.h"

#include <ferry/dt.h>

/* An operation in flight: what Open MPI's completion callback needs. */
typedef struct mca_btl_ferry_rdma_op {
    opal_free_list_item_t super;
    struct mca_btl_ferry_rdma_op *next_done; /* on the component's list of due callbacks */
    mca_btl_ferry_module_t *mod;
    struct mca_btl_base_endpoint_t *ep;
    void *local;
    mca_btl_base_registration_handle_t *local_handle;
    mca_btl_base_rdma_completion_fn_t cbfunc;
    void *cbcontext;
    void *cbdata;
    /* While it waits for the transport (on the component's wait list). */
    struct mca_btl_ferry_rdma_op *next_wait;
    ferry_btl_desc_t *des; /* NULL until prepared (see rdma_start) */
    bool is_put;
    /* The remote side, kept for a descriptor prepared later: Open MPI's
     * remote handle need not outlive the call. */
    uint64_t remote;
    size_t size;
    uint8_t key[FERRY_BTL_KEY_MAX];
} mca_btl_ferry_rdma_op_t;

static mca_btl_ferry_module_t *mod_of(struct mca_btl_base_module_t *btl)
{
    return (mca_btl_ferry_module_t *)btl;
}

static ferry_btl_endpoint_t *fep_of(struct mca_btl_base_endpoint_t *ep)
{
    return (ferry_btl_endpoint_t *)ep;
}

static mca_btl_ferry_rdma_op_t *op_get(mca_btl_ferry_module_t *mod,
                                       struct mca_btl_base_endpoint_t *ep, void *local,
                                       mca_btl_base_registration_handle_t *local_handle,
                                       mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                                       void *cbdata)
{
    mca_btl_ferry_rdma_op_t *op = (mca_btl_ferry_rdma_op_t *)opal_free_list_get(&mod->rdma_ops);
    if (op == NULL)
        return NULL;
    op->mod = mod;
    op->ep = ep;
    op->local = local;
    op->local_handle = local_handle;
    op->cbfunc = cbfunc;
    op->cbcontext = cbcontext;
    op->cbdata = cbdata;
    return op;
}

static void op_put_back(mca_btl_ferry_rdma_op_t *op)
{
    opal_free_list_return(&op->mod->rdma_ops, &op->super);
}

/* The operation is complete at both ends: Open MPI's callback (the op
 * returns to its pool first, so that the callback may start another). */
static void op_complete(mca_btl_ferry_rdma_op_t *op, int status)
{
    mca_btl_ferry_rdma_op_t done = *op;
    op_put_back(op);
    if (status != FERRY_OK)
        done.mod->stats.rdma_failed++;
    if (done.cbfunc != NULL && !mca_btl_ferry.closing)
        done.cbfunc(&done.mod->super, done.ep, done.local, done.local_handle, done.cbcontext,
                    done.cbdata, mca_btl_ferry_status(status));
}

/* The operation is complete, its callback due from the next progress. */
static void op_defer(mca_btl_ferry_rdma_op_t *op)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    op->next_done = NULL;
    if (st->rdma_done_tail != NULL)
        st->rdma_done_tail->next_done = op;
    else
        st->rdma_done_head = op;
    st->rdma_done_tail = op;
}

int mca_btl_ferry_rdma_run_done(void)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    /* Only those due now: a callback that starts another queues it for
     * the next call. */
    mca_btl_ferry_rdma_op_t *op = st->rdma_done_head;
    st->rdma_done_head = st->rdma_done_tail = NULL;
    int n = 0;
    while (op != NULL) {
        mca_btl_ferry_rdma_op_t *next = op->next_done;
        op_complete(op, FERRY_OK);
        op = next;
        n++;
    }
    return n;
}

static ferry_btl_reg_t *lreg_of(mca_btl_base_registration_handle_t *h)
{
    return h != NULL ? h->reg : NULL;
}

/* ---- the process's own memory ----
 *
 * osc/rdma gives no endpoint (NULL) for an operation on the memory of its
 * own process: it counts a BTL whose atomics are the CPU's (SUPPORTS_GLOB)
 * as reaching its own process, yet across hosts it still sends its own
 * window's puts, gets and atomics through the BTL, with the endpoint it
 * found for itself, none. Ferry's modules do not reach their own process
 * (self does), so these are done here, on this process's memory: the
 * remote handle must be the key of one of the module's live registrations
 * and the range inside it, with the right the operation needs, its memory
 * not released (the cache's stale mark); anything else is refused
 * (OPAL_ERR_BAD_PARAM, OPAL_ERR_PERM), never touched. */

/* Guards the modules' lists of live registrations and the cache's marks
 * against Open MPI's memory hooks, which run in whatever thread releases
 * memory. Held only around list and flag changes: no allocation, no call
 * into ferry, so that a release inside cannot happen. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static void reg_list_add(mca_btl_ferry_module_t *mod, mca_btl_base_registration_handle_t *h)
{
    h->prev = NULL;
    h->next = mod->regs;
    if (mod->regs != NULL)
        mod->regs->prev = h;
    mod->regs = h;
}

static void reg_list_remove(mca_btl_ferry_module_t *mod, mca_btl_base_registration_handle_t *h)
{
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        mod->regs = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    h->prev = h->next = NULL;
}

/* Where [addr, addr + size) of this process is, if the key bytes of rh are
 * those of a live registration of the module covering it with the right. */
static int own_target(const mca_btl_ferry_module_t *mod,
                      const mca_btl_base_registration_handle_t *rh, uint64_t addr, size_t size,
                      uint32_t right, void **out)
{
    if (rh == NULL)
        return OPAL_ERR_BAD_PARAM;
    size_t klen = mod->fbtl->attr.reg_handle_size;
    int rc = OPAL_ERR_BAD_PARAM;
    /* The list and the stale marks change under reg_lock, from whatever
     * thread releases memory. */
    pthread_mutex_lock(&reg_lock);
    for (const mca_btl_base_registration_handle_t *h = mod->regs; h != NULL; h = h->next) {
        if (memcmp(h->key, rh->key, klen) != 0)
            continue;
        /* A cached registration whose memory was released stays on the
         * list until it is trimmed: its key no longer stands for memory. */
        uint64_t base = (uint64_t)(uintptr_t)h->reg->base;
        if (h->stale || addr < base || size > h->reg->len || addr - base > h->reg->len - size)
            rc = OPAL_ERR_BAD_PARAM;
        else if ((h->reg->access & right) != right)
            rc = OPAL_ERR_PERM;
        else
            rc = OPAL_SUCCESS;
        break;
    }
    pthread_mutex_unlock(&reg_lock);
    if (rc == OPAL_SUCCESS)
        *out = (void *)(uintptr_t)addr;
    return rc;
}

/* A put or get on this process's memory: copied now, and Open MPI's
 * callback run before the return, as Open MPI's shared-memory BTL does for
 * its single-copy put and get. */
static int own_rdma(mca_btl_ferry_module_t *mod, bool is_put, void *local, uint64_t remote,
                    mca_btl_base_registration_handle_t *local_handle,
                    mca_btl_base_registration_handle_t *remote_handle, size_t size,
                    mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata)
{
    void *there;
    int rc = own_target(mod, remote_handle, remote, size,
                        is_put ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ, &there);
    if (rc != OPAL_SUCCESS)
        return rc;
    if (is_put)
        memmove(there, local, size);
    else
        memmove(local, there, size);
    mod->stats.own++;
    if (cbfunc != NULL)
        cbfunc(&mod->super, NULL, local, local_handle, cbcontext, cbdata, OPAL_SUCCESS);
    return OPAL_SUCCESS;
}

/* op (or, with cswap, compare-and-swap of compare to operand) on the
 * naturally aligned integer at p, 32 bits with w32: ferry's own CPU
 * operation, the one its transports' targets apply (Open MPI's operation
 * values are ferry's, checked below); the value before. op is one amo_check
 * let through. */
static uint64_t own_apply(void *p, bool w32, bool cswap, uint32_t op, uint64_t operand,
                          uint64_t compare)
{
    return ferry_btl_atomic_apply(p, w32, cswap, op, operand, compare);
}

/* An atomic on this process's memory: done now (1, no callback). */
static int own_atomic(mca_btl_ferry_module_t *mod, void *local, uint64_t remote,
                      const mca_btl_base_registration_handle_t *remote_handle, bool cswap,
                      uint32_t op, uint64_t operand, uint64_t compare, int flags)
{
    bool w32 = ((uint32_t)flags & MCA_BTL_ATOMIC_FLAG_32BIT) != 0;
    void *there;
    int rc = own_target(mod, remote_handle, remote, w32 ? 4 : 8, FERRY_ACCESS_REMOTE_ATOMIC,
                        &there);
    if (rc != OPAL_SUCCESS)
        return rc;
    uint64_t old = own_apply(there, w32, cswap, op, operand, compare);
    if (local != NULL) {
        if (w32) {
            uint32_t r = (uint32_t)old;
            memcpy(local, &r, sizeof(r));
        } else {
            memcpy(local, &old, sizeof(old));
        }
    }
    mod->stats.atomics++;
    mod->stats.own++;
    return 1;
}

/* ---- put and get over ferry's descriptors ---- */

static void rdma_done(ferry_btl_module_t *fbtl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                      int status)
{
    op_complete(des->cbdata, status);
}

/* The completion of one that went without a descriptor. */
static void inline_done(ferry_btl_module_t *fbtl, ferry_btl_endpoint_t *ep, void *local,
                        ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status)
{
    (void)fbtl;
    (void)ep;
    (void)local;
    (void)lreg;
    (void)cbctx;
    op_complete(cbdata, status);
}

/* The remote side of a descriptor: the peer's address and the key bytes
 * Open MPI carried from its handle. */
static void fill_remote(const mca_btl_ferry_module_t *mod, ferry_btl_segment_t *seg,
                        uint64_t addr, size_t len, const uint8_t *key)
{
    memset(seg, 0, sizeof(*seg));
    seg->addr = addr;
    seg->len = len;
    memcpy(seg->key, key, mod->fbtl->attr.reg_handle_size);
}

/* The descriptor of a put or get: prepare_src or prepare_dst over the
 * local memory in place, the remote segment filled in. FERRY_ERR_NO_RESOURCE
 * when the transport has no descriptor now (sm: FERRY_SM_FREE_LIST_MAX). */
static int op_prepare(mca_btl_ferry_rdma_op_t *op)
{
    mca_btl_ferry_module_t *mod = op->mod;
    ferry_btl_module_t *fbtl = mod->fbtl;
    ferry_btl_endpoint_t *ep = fep_of(op->ep);
    ferry_convertor_t conv;
    ferry_convertor_init_contig(&conv, op->local, op->size);
    size_t described = op->size;
    ferry_btl_desc_t *des = NULL;
    int rc = op->is_put ? fbtl->ops->prepare_src(fbtl, ep, lreg_of(op->local_handle), &conv, 0,
                                                 &described, FERRY_BTL_PREP_RDMA, &des)
                        : fbtl->ops->prepare_dst(fbtl, ep, lreg_of(op->local_handle), &conv, 0,
                                                 &described, FERRY_BTL_PREP_RDMA, &des);
    if (rc == FERRY_OK && described != op->size) {
        fbtl->ops->free(fbtl, des); /* contiguous memory is described whole */
        rc = FERRY_ERR_NOT_SUPPORTED;
    }
    if (rc != FERRY_OK)
        return rc;
    if (op->is_put) {
        fill_remote(mod, &des->dst[0], op->remote, op->size, op->key);
        des->dst_cnt = 1;
    } else {
        fill_remote(mod, &des->src[0], op->remote, op->size, op->key);
        des->src_cnt = 1;
    }
    des->flags |= FERRY_BTL_DES_OWNERSHIP;
    des->cbfunc = rdma_done;
    des->cbdata = op;
    op->des = des;
    return FERRY_OK;
}

/* Hands a put or get to the transport, prepared first if it is not yet;
 * counted when the transport takes it. */
static int op_issue(mca_btl_ferry_rdma_op_t *op, bool waited)
{
    mca_btl_ferry_module_t *mod = op->mod;
    ferry_btl_module_t *fbtl = mod->fbtl;
    ferry_btl_endpoint_t *ep = fep_of(op->ep);
    size_t size = op->size;
    int rc = FERRY_ERR_NOT_SUPPORTED;
    /* Without a descriptor where the transport takes it so (sm: a put in
     * one ring message, a get's request), else prepared now. One that
     * waited takes a descriptor: it completes, or fails with its peer,
     * behind those the transport took before it. */
    if (!waited && op->des == NULL) {
        if (op->is_put && fbtl->ops->put_inline != NULL)
            rc = fbtl->ops->put_inline(fbtl, ep, op->local, size, op->remote, op->key,
                                       inline_done, NULL, op);
        else if (!op->is_put && fbtl->ops->get_inline != NULL)
            rc = fbtl->ops->get_inline(fbtl, ep, op->local, size, op->remote, op->key,
                                       inline_done, NULL, op);
        if (rc != FERRY_OK && rc != FERRY_ERR_NOT_SUPPORTED) {
            mod->stats.rdma_failed++; /* refused, as a descriptor's would be counted */
            return rc;
        }
    }
    if (rc == FERRY_ERR_NOT_SUPPORTED) {
        rc = op->des != NULL ? FERRY_OK : op_prepare(op);
        if (rc != FERRY_OK)
            return rc;
        rc = op->is_put ? fbtl->ops->put(fbtl, ep, op->des) : fbtl->ops->get(fbtl, ep, op->des);
    }
    if (rc != FERRY_OK)
        return rc;
    if (op->is_put) {
        mod->stats.put++;
        mod->stats.put_bytes += size;
    } else {
        mod->stats.get++;
        mod->stats.get_bytes += size;
    }
    return FERRY_OK;
}

static void op_wait(mca_btl_ferry_rdma_op_t *op)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    op->mod->stats.waited++;
    op->next_wait = NULL;
    if (st->rdma_wait_tail != NULL)
        st->rdma_wait_tail->next_wait = op;
    else
        st->rdma_wait_head = op;
    st->rdma_wait_tail = op;
}

/* Whether an operation ahead of op on the wait list (all of them refused
 * in this pass) goes to the same endpoint of the same module. */
static bool op_blocked(const mca_btl_ferry_rdma_op_t *op)
{
    for (const mca_btl_ferry_rdma_op_t *o = mca_btl_ferry.rdma_wait_head; o != op;
         o = o->next_wait)
        if (o->mod == op->mod && o->ep == op->ep)
            return true;
    return false;
}

int mca_btl_ferry_rdma_run_waiting(bool closing)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    int n = 0;
    mca_btl_ferry_rdma_op_t **p = &st->rdma_wait_head, *prev = NULL;
    while (*p != NULL) {
        mca_btl_ferry_rdma_op_t *op = *p;
        /* Never ahead of one refused before it on its endpoint: tcp refuses
         * a get by its size (the bytes of gets in flight within its send
         * queue's), and would take a smaller one behind it. */
        int rc = closing ? FERRY_ERR_UNREACH
                         : op_blocked(op) ? FERRY_ERR_NO_RESOURCE : op_issue(op, true);
        if (rc == FERRY_ERR_NO_RESOURCE) {
            /* Still refused: those behind it on other endpoints may go. */
            prev = op;
            p = &op->next_wait;
            continue;
        }
        *p = op->next_wait;
        if (st->rdma_wait_tail == op)
            st->rdma_wait_tail = prev;
        n++;
        if (rc != FERRY_OK) {
            if (op->des != NULL)
                op->mod->fbtl->ops->free(op->mod->fbtl, op->des);
            op_complete(op, rc);
        }
    }
    return n;
}

/* Whether a put or get of mod to ep (any endpoint: NULL) still waits. */
static bool op_waiting(const mca_btl_ferry_module_t *mod, const struct mca_btl_base_endpoint_t *ep)
{
    for (const mca_btl_ferry_rdma_op_t *op = mca_btl_ferry.rdma_wait_head; op != NULL;
         op = op->next_wait)
        if (op->mod == mod && (ep == NULL || op->ep == ep))
            return true;
    return false;
}

/* put (is_put) or get of size bytes between local and remote. */
static int rdma_start(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
                      bool is_put, void *local, uint64_t remote,
                      mca_btl_base_registration_handle_t *local_handle,
                      mca_btl_base_registration_handle_t *remote_handle, size_t size,
                      mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    ferry_btl_module_t *fbtl = mod->fbtl;
    ferry_btl_endpoint_t *ep = fep_of(endpoint);
    if (remote_handle == NULL || local == NULL || size == 0 ||
        size > (is_put ? btl->btl_put_limit : btl->btl_get_limit))
        return OPAL_ERR_BAD_PARAM;
    if (endpoint == NULL)
        return own_rdma(mod, is_put, local, remote, local_handle, remote_handle, size, cbfunc,
                        cbcontext, cbdata);
    /* Done inside the call where the transport can (sm: a peer's heap, as
     * from ferry's pool): no descriptor, and the callback at once, as for
     * the process's own memory. Not ahead of operations still waiting. */
    if (fbtl->ops->rdma_direct != NULL && mca_btl_ferry.rdma_wait_head == NULL) {
        int rc = fbtl->ops->rdma_direct(fbtl, ep, is_put, local, remote, remote_handle->key, size);
        if (rc == FERRY_BTL_DONE) {
            if (is_put) {
                mod->stats.put++;
                mod->stats.put_bytes += size;
            } else {
                mod->stats.get++;
                mod->stats.get_bytes += size;
            }
            if (cbfunc != NULL)
                cbfunc(btl, endpoint, local, local_handle, cbcontext, cbdata, OPAL_SUCCESS);
            return OPAL_SUCCESS;
        }
        if (rc != FERRY_ERR_NOT_SUPPORTED) {
            mod->stats.rdma_failed++;
            return mca_btl_ferry_status(rc);
        }
    }
    mca_btl_ferry_rdma_op_t *op = op_get(mod, endpoint, local, local_handle, cbfunc, cbcontext,
                                         cbdata);
    if (op == NULL)
        return OPAL_ERR_OUT_OF_RESOURCE;
    op->des = NULL;
    op->is_put = is_put;
    op->remote = remote;
    op->size = size;
    memcpy(op->key, remote_handle->key, fbtl->attr.reg_handle_size);
    /* Behind others waiting, it waits too: they started first. Its
     * descriptor is prepared when its turn comes, so that those waiting
     * never hold the descriptors the first of them needs. */
    int rc = mca_btl_ferry.rdma_wait_head == NULL ? op_issue(op, false) : FERRY_ERR_NO_RESOURCE;
    if (rc != FERRY_OK && rc != FERRY_ERR_NO_RESOURCE && op->des == NULL) {
        /* Refused before it had a descriptor (or without one). */
        op_put_back(op);
        return mca_btl_ferry_status(rc);
    }
    if (rc == FERRY_ERR_NO_RESOURCE) {
        /* ob1 takes OPAL_ERR_OUT_OF_RESOURCE for a get as a cue to retry a
         * few times only, then sends the message through its send pipeline
         * instead; so the operation waits here for the transport, whether
         * it has no descriptor (sm's pool at FERRY_SM_FREE_LIST_MAX) or
         * refuses the operation (tcp's in-flight limit). */
        op_wait(op);
        return OPAL_SUCCESS;
    }
    if (rc != FERRY_OK) {
        fbtl->ops->free(fbtl, op->des);
        op_put_back(op);
        mod->stats.rdma_failed++; /* refused: not to be tried again as it is */
        return mca_btl_ferry_status(rc);
    }
    return OPAL_SUCCESS;
}

static int rdma_put(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                     void *local, uint64_t remote,
                     struct mca_btl_base_registration_handle_t *local_handle,
                     struct mca_btl_base_registration_handle_t *remote_handle, size_t size,
                     int flags, int order, mca_btl_base_rdma_completion_fn_t cbfunc,
                     void *cbcontext, void *cbdata)
{
    return rdma_start(btl, ep, true, local, remote, local_handle, remote_handle, size, cbfunc,
                      cbcontext, cbdata);
}

static int rdma_get(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                     void *local, uint64_t remote,
                     struct mca_btl_base_registration_handle_t *local_handle,
                     struct mca_btl_base_registration_handle_t *remote_handle, size_t size,
                     int flags, int order, mca_btl_base_rdma_completion_fn_t cbfunc,
                     void *cbcontext, void *cbdata)
{
    return rdma_start(btl, ep, false, local, remote, local_handle, remote_handle, size, cbfunc,
                      cbcontext, cbdata);
}

/* ---- atomics ---- */

/* Open MPI's atomic operations, flags and support bits are ferry's, value
 * for value (include/ferry/btl.h says so); checked here, so that the casts
 * below stay right. */
#define SAME(a, b) _Static_assert((uint32_t)(a) == (uint32_t)(b), #a " is not " #b)
SAME(MCA_BTL_ATOMIC_ADD, FERRY_BTL_ATOMIC_ADD);
SAME(MCA_BTL_ATOMIC_AND, FERRY_BTL_ATOMIC_AND);
SAME(MCA_BTL_ATOMIC_OR, FERRY_BTL_ATOMIC_OR);
SAME(MCA_BTL_ATOMIC_XOR, FERRY_BTL_ATOMIC_XOR);
SAME(MCA_BTL_ATOMIC_LAND, FERRY_BTL_ATOMIC_LAND);
SAME(MCA_BTL_ATOMIC_LOR, FERRY_BTL_ATOMIC_LOR);
SAME(MCA_BTL_ATOMIC_LXOR, FERRY_BTL_ATOMIC_LXOR);
SAME(MCA_BTL_ATOMIC_SWAP, FERRY_BTL_ATOMIC_SWAP);
SAME(MCA_BTL_ATOMIC_MIN, FERRY_BTL_ATOMIC_MIN);
SAME(MCA_BTL_ATOMIC_MAX, FERRY_BTL_ATOMIC_MAX);
SAME(MCA_BTL_ATOMIC_FLAG_32BIT, FERRY_BTL_ATOMIC_FLAG_32BIT);
SAME(MCA_BTL_ATOMIC_SUPPORTS_ADD, FERRY_BTL_ATOMIC_SUPPORTS_ADD);
SAME(MCA_BTL_ATOMIC_SUPPORTS_AND, FERRY_BTL_ATOMIC_SUPPORTS_AND);
SAME(MCA_BTL_ATOMIC_SUPPORTS_OR, FERRY_BTL_ATOMIC_SUPPORTS_OR);
SAME(MCA_BTL_ATOMIC_SUPPORTS_XOR, FERRY_BTL_ATOMIC_SUPPORTS_XOR);
SAME(MCA_BTL_ATOMIC_SUPPORTS_LAND, FERRY_BTL_ATOMIC_SUPPORTS_LAND);
SAME(MCA_BTL_ATOMIC_SUPPORTS_LOR, FERRY_BTL_ATOMIC_SUPPORTS_LOR);
SAME(MCA_BTL_ATOMIC_SUPPORTS_LXOR, FERRY_BTL_ATOMIC_SUPPORTS_LXOR);
SAME(MCA_BTL_ATOMIC_SUPPORTS_SWAP, FERRY_BTL_ATOMIC_SUPPORTS_SWAP);
SAME(MCA_BTL_ATOMIC_SUPPORTS_MIN, FERRY_BTL_ATOMIC_SUPPORTS_MIN);
SAME(MCA_BTL_ATOMIC_SUPPORTS_MAX, FERRY_BTL_ATOMIC_SUPPORTS_MAX);
SAME(MCA_BTL_ATOMIC_SUPPORTS_32BIT, FERRY_BTL_ATOMIC_SUPPORTS_32BIT);
SAME(MCA_BTL_ATOMIC_SUPPORTS_CSWAP, FERRY_BTL_ATOMIC_SUPPORTS_CSWAP);
SAME(MCA_BTL_ATOMIC_SUPPORTS_GLOB, FERRY_BTL_ATOMIC_SUPPORTS_GLOB);
#undef SAME

/* The support bits Open MPI 4.1 knows and ferry can have (ferry has no
 * floating-point atomics: MCA_BTL_ATOMIC_SUPPORTS_FLOAT is never given). */
#define ATOMIC_SUPPORTS_BOTH                                                                \
    (MCA_BTL_ATOMIC_SUPPORTS_ADD | MCA_BTL_ATOMIC_SUPPORTS_AND | MCA_BTL_ATOMIC_SUPPORTS_OR | \
     MCA_BTL_ATOMIC_SUPPORTS_XOR | MCA_BTL_ATOMIC_SUPPORTS_LAND |                            \
     MCA_BTL_ATOMIC_SUPPORTS_LOR | MCA_BTL_ATOMIC_SUPPORTS_LXOR |                            \
     MCA_BTL_ATOMIC_SUPPORTS_SWAP | MCA_BTL_ATOMIC_SUPPORTS_MIN |                            \
     MCA_BTL_ATOMIC_SUPPORTS_MAX | MCA_BTL_ATOMIC_SUPPORTS_32BIT |                           \
     MCA_BTL_ATOMIC_SUPPORTS_CSWAP | MCA_BTL_ATOMIC_SUPPORTS_GLOB)

/* An atomic ferry completed from progress: Open MPI's callback with its
 * own arguments (its endpoint, local address and handle, context, data). */
static void amo_done(ferry_btl_module_t *fbtl, ferry_btl_endpoint_t *ep, void *local,
                     ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status)
{
    op_complete(cbctx, status);
}

/* What Open MPI asks of an atomic that the module cannot do: an operation or
 * a width outside the module's atomic flags, floating point, or an address
 * that is not naturally aligned. Open MPI's answer for all of them is
 * OPAL_ERR_NOT_AVAILABLE (osc/rdma then takes another way); OPAL_SUCCESS
 * when ferry can be asked. */
static int amo_check(const mca_btl_base_module_t *b, bool cswap, uint32_t op, uint64_t raddr,
                     int flags, const mca_btl_base_registration_handle_t *remote_handle)
{
    if (remote_handle == NULL)
        return OPAL_ERR_BAD_PARAM;
    if ((uint32_t)flags & ~(uint32_t)MCA_BTL_ATOMIC_FLAG_32BIT)
        return OPAL_ERR_NOT_AVAILABLE; /* MCA_BTL_ATOMIC_FLAG_FLOAT, or unknown */
    bool w32 = ((uint32_t)flags & MCA_BTL_ATOMIC_FLAG_32BIT) != 0;
    uint32_t need = cswap ? MCA_BTL_ATOMIC_SUPPORTS_CSWAP : ferry_btl_atomic_supports_bit(op);
    if (need == 0 || !(b->btl_atomic_flags & need) ||
        (w32 && !(b->btl_atomic_flags & MCA_BTL_ATOMIC_SUPPORTS_32BIT)))
        return OPAL_ERR_NOT_AVAILABLE;
    if (raddr % (w32 ? 4u : 8u) != 0)
        return OPAL_ERR_NOT_AVAILABLE;
    return OPAL_SUCCESS;
}

static bool fetch32(int flags)
{
    return ((uint32_t)flags & MCA_BTL_ATOMIC_FLAG_32BIT) != 0;
}

/* Ferry's answer to an atomic as Open MPI's: FERRY_BTL_DONE (complete
 * inside the call, no callback) is 1, FERRY_OK (the callback will say) is
 * OPAL_SUCCESS, and an error leaves nothing started, so the op goes back.
 *
 * Except for a fetching 32-bit atomic (late32) done inside the call: its
 * callback is run from the next progress and the call returns OPAL_SUCCESS.
 * osc/rdma (Open MPI 4.1.4) stores the result of an atomic that returned 1
 * as 64 bits into the caller's 4-byte buffer, overwriting the 4 bytes after
 * it; through the callback it copies the result's own width. */
static int amo_started(mca_btl_ferry_module_t *mod, mca_btl_ferry_rdma_op_t *op, int rc,
                       bool late32)
{
    if (rc == FERRY_BTL_DONE || rc == FERRY_OK) {
        mod->stats.atomics++;
        if (rc == FERRY_OK)
            return OPAL_SUCCESS;
        if (late32) {
            op_defer(op);
            return OPAL_SUCCESS;
        }
        op_put_back(op);
        return 1;
    }
    op_put_back(op);
    if (rc == FERRY_ERR_NOT_SUPPORTED)
        return OPAL_ERR_NOT_AVAILABLE;
    if (rc != FERRY_ERR_NO_RESOURCE)
        mod->stats.rdma_failed++;
    return mca_btl_ferry_status(rc);
}

/* As amo_started, for an atomic own_atomic did (1, or an Open MPI error). */
static int own_started(mca_btl_ferry_rdma_op_t *op, int rc, bool late32)
{
    if (rc == 1 && late32) {
        op_defer(op);
        return OPAL_SUCCESS;
    }
    op_put_back(op);
    return rc;
}

static int rdma_atomic_op(struct mca_btl_base_module_t *btl,
                          struct mca_btl_base_endpoint_t *endpoint, uint64_t remote_address,
                          struct mca_btl_base_registration_handle_t *remote_handle,
                          mca_btl_base_atomic_op_t op, uint64_t operand, int flags, int order,
                          mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                          void *cbdata)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    int rc = amo_check(btl, false, (uint32_t)op, remote_address, flags, remote_handle);
    if (rc != OPAL_SUCCESS)
        return rc;
    if (endpoint == NULL)
        return own_atomic(mod, NULL, remote_address, remote_handle, false, (uint32_t)op,
                          operand, 0, flags);
    mca_btl_ferry_rdma_op_t *o = op_get(mod, endpoint, NULL, NULL, cbfunc, cbcontext, cbdata);
    if (o == NULL)
        return OPAL_ERR_OUT_OF_RESOURCE;
    rc = mod->fbtl->ops->atomic_op(mod->fbtl, fep_of(endpoint), remote_address,
                                   remote_handle->key, (ferry_btl_atomic_op_t)op, operand,
                                   (uint32_t)flags, amo_done, o, NULL);
    return amo_started(mod, o, rc, false);
}

static int rdma_atomic_fop(struct mca_btl_base_module_t *btl,
                           struct mca_btl_base_endpoint_t *endpoint, void *local_address,
                           uint64_t remote_address,
                           struct mca_btl_base_registration_handle_t *local_handle,
                           struct mca_btl_base_registration_handle_t *remote_handle,
                           mca_btl_base_atomic_op_t op, uint64_t operand, int flags, int order,
                           mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                           void *cbdata)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    if (local_address == NULL)
        return OPAL_ERR_BAD_PARAM;
    int rc = amo_check(btl, false, (uint32_t)op, remote_address, flags, remote_handle);
    if (rc != OPAL_SUCCESS)
        return rc;
    mca_btl_ferry_rdma_op_t *o =
        op_get(mod, endpoint, local_address, local_handle, cbfunc, cbcontext, cbdata);
    if (o == NULL)
        return OPAL_ERR_OUT_OF_RESOURCE;
    if (endpoint == NULL)
        return own_started(o, own_atomic(mod, local_address, remote_address, remote_handle,
                                         false, (uint32_t)op, operand, 0, flags),
                           fetch32(flags));
    rc = mod->fbtl->ops->atomic_fop(mod->fbtl, fep_of(endpoint), local_address, remote_address,
                                    lreg_of(local_handle), remote_handle->key,
                                    (ferry_btl_atomic_op_t)op, operand, (uint32_t)flags,
                                    amo_done, o, NULL);
    return amo_started(mod, o, rc, fetch32(flags));
}

static int rdma_atomic_cswap(struct mca_btl_base_module_t *btl,
                             struct mca_btl_base_endpoint_t *endpoint, void *local_address,
                             uint64_t remote_address,
                             struct mca_btl_base_registration_handle_t *local_handle,
                             struct mca_btl_base_registration_handle_t *remote_handle,
                             uint64_t compare, uint64_t value, int flags, int order,
                             mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                             void *cbdata)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    if (local_address == NULL)
        return OPAL_ERR_BAD_PARAM;
    int rc = amo_check(btl, true, 0, remote_address, flags, remote_handle);
    if (rc != OPAL_SUCCESS)
        return rc;
    mca_btl_ferry_rdma_op_t *o =
        op_get(mod, endpoint, local_address, local_handle, cbfunc, cbcontext, cbdata);
    if (o == NULL)
        return OPAL_ERR_OUT_OF_RESOURCE;
    if (endpoint == NULL)
        return own_started(o, own_atomic(mod, local_address, remote_address, remote_handle,
                                         true, 0, value, compare, flags),
                           fetch32(flags));
    rc = mod->fbtl->ops->atomic_cswap(mod->fbtl, fep_of(endpoint), local_address,
                                      remote_address, lreg_of(local_handle), remote_handle->key,
                                      compare, value, (uint32_t)flags, amo_done, o, NULL);
    return amo_started(mod, o, rc, fetch32(flags));
}

/* The atomics a module announces: those of its transport, as far as
 * btl_ferry_flags lets them through (without "atomics" the module has none,
 * so that Open MPI never calls them).
 *
 * The module of the path by which a process reaches itself (ferry's self,
 * its component always open) announces none: osc/rdma counts a BTL whose
 * atomics are coherent with the CPU's (SUPPORTS_GLOB) as reaching the
 * window's own process besides the ranks it reaches, so such a module
 * would pass for one that reaches both ranks of a 2-rank window, be chosen
 * for its latency, and leave the window unable to reach the peer. osc/rdma
 * does its own process's atomics with the CPU anyway. */
static void set_atomics(mca_btl_ferry_module_t *mod, uint32_t flags)
{
    mca_btl_base_module_t *b = &mod->super;
    const ferry_btl_attr_t *a = &mod->fbtl->attr;
    uint32_t allowed = (uint32_t)mca_btl_ferry.knob.flags;
    if (mod->fbtl->component != NULL && mod->fbtl->component->always_open)
        allowed &= ~(uint32_t)(MCA_BTL_FLAGS_ATOMIC_OPS | MCA_BTL_FLAGS_ATOMIC_FOPS);
    bool ops = (flags & MCA_BTL_FLAGS_ATOMIC_OPS) && (allowed & MCA_BTL_FLAGS_ATOMIC_OPS);
    bool fops = ops && (flags & MCA_BTL_FLAGS_ATOMIC_FOPS) &&
                (allowed & MCA_BTL_FLAGS_ATOMIC_FOPS);
    b->btl_atomic_op = ops ? rdma_atomic_op : NULL;
    b->btl_atomic_fop = fops ? rdma_atomic_fop : NULL;
    b->btl_atomic_cswap = fops && (a->atomic_flags & FERRY_BTL_ATOMIC_SUPPORTS_CSWAP)
                              ? rdma_atomic_cswap
                              : NULL;
    b->btl_atomic_flags = ops ? a->atomic_flags & ATOMIC_SUPPORTS_BOTH : 0;
    if (!ops)
        b->btl_flags &= ~(uint32_t)(MCA_BTL_FLAGS_ATOMIC_OPS | MCA_BTL_FLAGS_ATOMIC_FOPS);
    else if (!fops)
        b->btl_flags &= ~(uint32_t)MCA_BTL_FLAGS_ATOMIC_FOPS;
}

/* ---- registrations and flush (the same under both contracts) ---- */

/* ---- the registration cache ----
 *
 * ob1 registers the buffer of every RDMA message and deregisters it when
 * the message is done; a ferry registration with remote rights costs a
 * table entry, a key and, on sm, the unmap monitor's watch of its pages
 * (two system calls). As Open MPI's own BTLs do with their rcache, a
 * registration nobody holds stays registered (up to
 * MCA_BTL_FERRY_REG_IDLE_MAX per module, least recently used first out)
 * and serves the next register_mem of the same start, endpoint and rights
 * that it covers. Released memory must never be served from it: Open
 * MPI's memory hooks (the patcher) report every munmap, mremap, madvise
 * and shmdt before it happens, and the hook marks every registration that
 * overlaps the range stale; a stale one is never found again and is
 * deregistered as soon as nobody holds it. Without hooks that report
 * releases, or with mpi_leave_pinned=0, nothing is cached. */

#define MCA_BTL_FERRY_REG_IDLE_MAX 128u

static size_t bucket_of(const void *base)
{
    uintptr_t a = (uintptr_t)base;
    return (size_t)((a >> 6) ^ (a >> 14) ^ (a >> 22)) % MCA_BTL_FERRY_REG_BUCKETS;
}

static void bucket_add(mca_btl_ferry_module_t *mod, mca_btl_base_registration_handle_t *h)
{
    size_t b = bucket_of(h->reg->base);
    h->hnext = mod->buckets[b];
    mod->buckets[b] = h;
}

static void bucket_remove(mca_btl_ferry_module_t *mod, mca_btl_base_registration_handle_t *h)
{
    for (mca_btl_base_registration_handle_t **p = &mod->buckets[bucket_of(h->reg->base)];
         *p != NULL; p = &(*p)->hnext)
        if (*p == h) {
            *p = h->hnext;
            break;
        }
    h->hnext = NULL;
}

static void idle_add(mca_btl_ferry_module_t *mod, mca_btl_base_registration_handle_t *h)
{
    h->idle_next = NULL;
    h->idle_prev = mod->idle_tail;
    if (mod->idle_tail != NULL)
        mod->idle_tail->idle_next = h;
    else
        mod->idle_head = h;
    mod->idle_tail = h;
    h->idle = true;
    mod->n_idle++;
}

static void idle_remove(mca_btl_ferry_module_t *mod, mca_btl_base_registration_handle_t *h)
{
    if (h->idle_prev != NULL)
        h->idle_prev->idle_next = h->idle_next;
    else
        mod->idle_head = h->idle_next;
    if (h->idle_next != NULL)
        h->idle_next->idle_prev = h->idle_prev;
    else
        mod->idle_tail = h->idle_prev;
    h->idle_prev = h->idle_next = NULL;
    h->idle = false;
    mod->n_idle--;
}

/* Takes h off every list (reg_lock held); the caller then releases it. */
static void handle_unlink(mca_btl_ferry_module_t *mod, mca_btl_base_registration_handle_t *h)
{
    reg_list_remove(mod, h);
    if (h->cached)
        bucket_remove(mod, h);
    if (h->idle)
        idle_remove(mod, h);
}

static int handle_release(mca_btl_ferry_module_t *mod, mca_btl_base_registration_handle_t *h)
{
    int rc = mod->fbtl->ops->deregister_mem(mod->fbtl, h->reg);
    free(h);
    return rc;
}

/* Deregisters idle registrations: the stale ones, the least recent beyond
 * keep, or all of them (keep 0, flush true). */
static void idle_trim(mca_btl_ferry_module_t *mod, unsigned keep, bool flush)
{
    for (;;) {
        pthread_mutex_lock(&reg_lock);
        mca_btl_base_registration_handle_t *h = mod->idle_head;
        if (!flush && mod->n_idle <= keep)
            while (h != NULL && !h->stale)
                h = h->idle_next;
        if (h != NULL)
            handle_unlink(mod, h);
        pthread_mutex_unlock(&reg_lock);
        if (h == NULL)
            return;
        (void)handle_release(mod, h);
    }
}

/* Open MPI's memory hook: [buf, buf + length) is about to be released. Any
 * thread; marks only. */
static void reg_released(void *buf, size_t length, void *cbdata, bool from_alloc)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    uintptr_t lo = (uintptr_t)buf, hi = lo + length;
    pthread_mutex_lock(&reg_lock);
    if (st->reg_cache)
        for (int m = 0; m < st->n_modules; m++)
            for (mca_btl_base_registration_handle_t *h = st->modules[m]->regs; h != NULL;
                 h = h->next) {
                uintptr_t b = (uintptr_t)h->reg->base;
                if (h->cached && b < hi && lo < b + h->reg->len)
                    h->stale = true;
            }
    pthread_mutex_unlock(&reg_lock);
}

/* The memory framework, opened by the cache (Open MPI opens it only for
 * components that ask, which install its hooks by opening it). */
static bool memory_opened;

void mca_btl_ferry_reg_cache_start(void)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    const int need = OPAL_MEMORY_FREE_SUPPORT | OPAL_MEMORY_MUNMAP_SUPPORT;
    st->reg_cache = false;
    const char *why = NULL;
    if (opal_leave_pinned == 0)
        why = "mpi_leave_pinned is 0";
    else if (mca_base_framework_open(&opal_memory_base_framework, 0) != OPAL_SUCCESS)
        why = "Open MPI's memory framework does not open";
    else if (memory_opened = true, (opal_mem_hooks_support_level() & need) != need)
        why = "Open MPI's memory hooks do not report released memory";
    else if (opal_mem_hooks_register_release(reg_released, NULL) != OPAL_SUCCESS)
        why = "Open MPI's memory hooks take no callback";
    if (why != NULL) {
        opal_output_verbose(10, opal_btl_base_framework.framework_output,
                            "btl ferry: registrations are not cached (%s)", why);
        return;
    }
    pthread_mutex_lock(&reg_lock);
    st->reg_cache = true;
    pthread_mutex_unlock(&reg_lock);
}

void mca_btl_ferry_reg_cache_stop(void)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    if (st->reg_cache) {
        pthread_mutex_lock(&reg_lock);
        st->reg_cache = false;
        pthread_mutex_unlock(&reg_lock);
        (void)opal_mem_hooks_unregister_release(reg_released);
        for (int m = 0; m < st->n_modules; m++)
            idle_trim(st->modules[m], 0, true);
    }
    if (memory_opened)
        (void)mca_base_framework_close(&opal_memory_base_framework);
    memory_opened = false;
}

/* A cached registration of ep covering [base, base + size) with the rights
 * of flags, held once more; NULL when there is none. */
static mca_btl_base_registration_handle_t *cache_find(mca_btl_ferry_module_t *mod,
                                                      ferry_btl_endpoint_t *ep, void *base,
                                                      size_t size, uint32_t flags)
{
    pthread_mutex_lock(&reg_lock);
    mca_btl_base_registration_handle_t *h = mod->buckets[bucket_of(base)];
    for (; h != NULL; h = h->hnext)
        if (h->reg->base == base && h->ep == ep && !h->stale && size <= h->reg->len &&
            (h->flags & flags) == flags)
            break;
    if (h != NULL && h->refs++ == 0 && h->idle)
        idle_remove(mod, h);
    pthread_mutex_unlock(&reg_lock);
    return h;
}

static struct mca_btl_base_registration_handle_t *
rdma_register_mem(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
                   void *base, size_t size, uint32_t flags)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    bool cache = mca_btl_ferry.reg_cache;
    uint32_t access = FERRY_ACCESS_LOCAL;
    if (flags & MCA_BTL_REG_FLAG_REMOTE_READ)
        access |= FERRY_ACCESS_REMOTE_READ;
    if (flags & MCA_BTL_REG_FLAG_REMOTE_WRITE)
        access |= FERRY_ACCESS_REMOTE_WRITE;
    /* osc/rdma does its own window's accumulates and compare-and-swaps
     * with plain loads and stores, and relies on the others' atomics being
     * executed by the target (so, between its own accesses): never by a
     * peer's CPU on memory it maps (sm's heap, from ferry's mpool). */
    if (flags & MCA_BTL_REG_FLAG_REMOTE_ATOMIC)
        access |= FERRY_ACCESS_REMOTE_ATOMIC | FERRY_BTL_ACCESS_TARGET_ATOMICS;
    ferry_btl_endpoint_t *ep = endpoint == MCA_BTL_ENDPOINT_ANY ? NULL : fep_of(endpoint);
    mod->stats.regs++;
    if (cache) {
        mca_btl_base_registration_handle_t *h = cache_find(mod, ep, base, size, flags);
        if (h != NULL) {
            mod->stats.reg_hits++;
            return h;
        }
        idle_trim(mod, MCA_BTL_FERRY_REG_IDLE_MAX, false); /* the stale ones go */
    }
    mca_btl_base_registration_handle_t *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return NULL;
    ferry_btl_reg_t *reg = NULL;
    int rc = mod->fbtl->ops->register_mem(mod->fbtl, ep, base, size, access, &reg);
    if (rc == FERRY_ERR_NO_RESOURCE && cache && mod->idle_head != NULL) {
        /* Out of registrations: the idle ones make room. */
        idle_trim(mod, 0, true);
        rc = mod->fbtl->ops->register_mem(mod->fbtl, ep, base, size, access, &reg);
    }
    if (rc != FERRY_OK) {
        free(h);
        return NULL;
    }
    memcpy(h->key, reg->key, sizeof(h->key));
    h->reg = reg;
    h->ep = ep;
    h->flags = flags;
    h->refs = 1;
    h->cached = cache;
    pthread_mutex_lock(&reg_lock);
    reg_list_add(mod, h);
    if (cache)
        bucket_add(mod, h);
    pthread_mutex_unlock(&reg_lock);
    return h;
}

static int rdma_deregister_mem(struct mca_btl_base_module_t *btl,
                                struct mca_btl_base_registration_handle_t *h)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    if (h == NULL || h->refs == 0)
        return OPAL_ERR_BAD_PARAM;
    pthread_mutex_lock(&reg_lock);
    bool keep = --h->refs > 0;
    if (!keep && h->cached && !h->stale && mca_btl_ferry.reg_cache) {
        idle_add(mod, h);
        keep = true;
    }
    if (!keep)
        handle_unlink(mod, h);
    pthread_mutex_unlock(&reg_lock);
    if (keep) {
        if (mod->n_idle > MCA_BTL_FERRY_REG_IDLE_MAX)
            idle_trim(mod, MCA_BTL_FERRY_REG_IDLE_MAX, false);
        return OPAL_SUCCESS;
    }
    return mca_btl_ferry_status(handle_release(mod, h));
}

/* Synchronous, as Open MPI's btl_flush is: every put, get and atomic
 * started on ep (all endpoints when NULL) has completed when it returns. */
static int rdma_flush(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    /* Those still waiting start first: the transport's flush covers only
     * what it took. */
    while (mca_btl_ferry.rdma_wait_head != NULL && op_waiting(mod, ep)) {
        int rc = mod->fbtl->ops->progress(mod->fbtl);
        if (rc < 0)
            return mca_btl_ferry_status(rc);
        mca_btl_ferry_rdma_run_waiting(false);
    }
    return mca_btl_ferry_status(mod->fbtl->ops->flush(mod->fbtl, ep != NULL ? fep_of(ep) : NULL));
}

uint32_t mca_btl_ferry_rdma_flags(const ferry_btl_attr_t *a)
{
    uint32_t flags = 0;
    if (a->flags & FERRY_BTL_FLAG_PUT)
        flags |= MCA_BTL_FLAGS_PUT;
    if (a->flags & FERRY_BTL_FLAG_GET)
        flags |= MCA_BTL_FLAGS_GET;
    if (flags != 0)
        flags |= MCA_BTL_FLAGS_RDMA_FLUSH;
    /* Atomics complete through flush as put and get do: they need it. */
    if ((a->flags & FERRY_BTL_FLAG_ATOMIC_OPS) && a->atomic_flags != 0) {
        flags |= MCA_BTL_FLAGS_ATOMIC_OPS | MCA_BTL_FLAGS_RDMA_FLUSH;
        if (a->flags & FERRY_BTL_FLAG_ATOMIC_FOPS)
            flags |= MCA_BTL_FLAGS_ATOMIC_FOPS;
    }
    return flags;
}

int mca_btl_ferry_rdma_init(mca_btl_ferry_module_t *mod)
{
    mca_btl_base_module_t *b = &mod->super;
    const ferry_btl_attr_t *a = &mod->fbtl->attr;
    OBJ_CONSTRUCT(&mod->rdma_ops, opal_free_list_t);
    if (opal_free_list_init(&mod->rdma_ops, sizeof(mca_btl_ferry_rdma_op_t),
                            opal_cache_line_size, OBJ_CLASS(opal_free_list_item_t), 0,
                            opal_cache_line_size, 16, -1, 64, NULL, 0, NULL, NULL,
                            NULL) != OPAL_SUCCESS) {
        OBJ_DESTRUCT(&mod->rdma_ops);
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    uint32_t rdma = mca_btl_ferry_rdma_flags(a);
    b->btl_flags |= rdma;
    b->btl_put = (rdma & MCA_BTL_FLAGS_PUT) ? rdma_put : NULL;
    b->btl_get = (rdma & MCA_BTL_FLAGS_GET) ? rdma_get : NULL;
    b->btl_flush = rdma != 0 ? rdma_flush : NULL;
    b->btl_register_mem = rdma != 0 ? rdma_register_mem : NULL;
    b->btl_deregister_mem = rdma != 0 ? rdma_deregister_mem : NULL;
    b->btl_registration_handle_size = a->reg_handle_size;
    b->btl_put_limit = a->max_rdma_size;
    b->btl_get_limit = a->max_rdma_size;
    b->btl_put_alignment = 0;
    b->btl_get_alignment = 0;
    /* The local side never needs a handle: ferry registers local memory
     * itself, through the transport's cache, where the transport needs it. */
    b->btl_put_local_registration_threshold = SIZE_MAX;
    b->btl_get_local_registration_threshold = SIZE_MAX;
    set_atomics(mod, rdma);
    return OPAL_SUCCESS;
}

void mca_btl_ferry_rdma_fini(mca_btl_ferry_module_t *mod)
{
    OBJ_DESTRUCT(&mod->rdma_ops);
}
