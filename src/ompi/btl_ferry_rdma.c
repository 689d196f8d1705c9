/*
 * The one adapter between Open MPI's RDMA (BTL 3.x: put, get and atomics
 * on an address and a registration handle, no descriptor; a return of 1
 * for an operation complete inside the call) and ferry's transport
 * contract. Everything that depends on the shape of ferry's RDMA ops lives
 * here, so that the contract's change (issue 10: descriptor-free put/get
 * and atomics shaped like Open MPI's, on another branch) touches this file
 * alone. Today a put is a descriptor made by prepare_src over the local
 * memory in place (FERRY_BTL_PREP_RDMA, which registers it through the
 * transport's cache when Open MPI gave no local handle) with the remote
 * segment filled in, handed to put; a get the same through prepare_dst.
 * They complete from ferry's progress (never inside the call). There are
 * no atomics: the modules announce none, so osc/rdma does not choose them
 * (#10).
 *
 * Registrations (register_mem) are ferry registrations; the handle Open MPI
 * holds is the key first (what it sends to peers), then the registration.
 */
#include "btl_ferry.h"

#include <stdlib.h>
#include <string.h>

#include "opal/util/output.h"

#include <ferry/dt.h>

/* An operation in flight: what Open MPI's completion callback needs. */
typedef struct mca_btl_ferry_rdma_op {
    opal_free_list_item_t super;
    mca_btl_ferry_module_t *mod;
    struct mca_btl_base_endpoint_t *ep;
    void *local;
    mca_btl_base_registration_handle_t *local_handle;
    mca_btl_base_rdma_completion_fn_t cbfunc;
    void *cbcontext;
    void *cbdata;
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
    if (done.cbfunc != NULL && !mca_btl_ferry.closing)
        done.cbfunc(&done.mod->super, done.ep, done.local, done.local_handle, done.cbcontext,
                    done.cbdata, mca_btl_ferry_status(status));
}

static ferry_btl_reg_t *lreg_of(mca_btl_base_registration_handle_t *h)
{
    return h != NULL ? h->reg : NULL;
}

/* ---- put and get over ferry's descriptors ---- */

static void rdma_done(ferry_btl_module_t *fbtl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                      int status)
{
    op_complete(des->cbdata, status);
}

/* The remote side of a descriptor: the peer's address and the key bytes
 * Open MPI carried from its handle. */
static void fill_remote(const mca_btl_ferry_module_t *mod, ferry_btl_segment_t *seg,
                        uint64_t addr, size_t len, const mca_btl_base_registration_handle_t *h)
{
    memset(seg, 0, sizeof(*seg));
    seg->addr = addr;
    seg->len = len;
    memcpy(seg->key, h, mod->fbtl->attr.reg_handle_size);
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
    mca_btl_ferry_rdma_op_t *op = op_get(mod, endpoint, local, local_handle, cbfunc, cbcontext,
                                         cbdata);
    if (op == NULL)
        return OPAL_ERR_OUT_OF_RESOURCE;
    ferry_convertor_t conv;
    ferry_convertor_init_contig(&conv, local, size);
    size_t described = size;
    ferry_btl_desc_t *des = NULL;
    int rc = is_put ? fbtl->ops->prepare_src(fbtl, ep, lreg_of(local_handle), &conv, 0,
                                             &described, FERRY_BTL_PREP_RDMA, &des)
                    : fbtl->ops->prepare_dst(fbtl, ep, lreg_of(local_handle), &conv, 0,
                                             &described, FERRY_BTL_PREP_RDMA, &des);
    if (rc == FERRY_OK && described != size) {
        fbtl->ops->free(fbtl, des); /* contiguous memory is described whole */
        rc = FERRY_ERR_NOT_SUPPORTED;
    }
    if (rc != FERRY_OK) {
        op_put_back(op);
        return mca_btl_ferry_status(rc);
    }
    if (is_put) {
        fill_remote(mod, &des->dst[0], remote, size, remote_handle);
        des->dst_cnt = 1;
    } else {
        fill_remote(mod, &des->src[0], remote, size, remote_handle);
        des->src_cnt = 1;
    }
    des->flags |= FERRY_BTL_DES_OWNERSHIP;
    des->cbfunc = rdma_done;
    des->cbdata = op;
    rc = is_put ? fbtl->ops->put(fbtl, ep, des) : fbtl->ops->get(fbtl, ep, des);
    if (rc != FERRY_OK) {
        fbtl->ops->free(fbtl, des);
        op_put_back(op);
        return mca_btl_ferry_status(rc);
    }
    if (is_put) {
        mod->stats.put++;
        mod->stats.put_bytes += size;
    } else {
        mod->stats.get++;
        mod->stats.get_bytes += size;
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

static void set_atomics(mca_btl_ferry_module_t *mod)
{
    /* Today's contract has no atomics: osc/rdma looks elsewhere. */
    mod->super.btl_atomic_op = NULL;
    mod->super.btl_atomic_fop = NULL;
    mod->super.btl_atomic_cswap = NULL;
    mod->super.btl_atomic_flags = 0;
}

static uint32_t access_atomic(void)
{
    return FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE;
}


/* ---- registrations and flush (the same under both contracts) ---- */

static struct mca_btl_base_registration_handle_t *
rdma_register_mem(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
                   void *base, size_t size, uint32_t flags)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    uint32_t access = FERRY_ACCESS_LOCAL;
    if (flags & MCA_BTL_REG_FLAG_REMOTE_READ)
        access |= FERRY_ACCESS_REMOTE_READ;
    if (flags & MCA_BTL_REG_FLAG_REMOTE_WRITE)
        access |= FERRY_ACCESS_REMOTE_WRITE;
    if (flags & MCA_BTL_REG_FLAG_REMOTE_ATOMIC)
        access |= access_atomic();
    ferry_btl_endpoint_t *ep = endpoint == MCA_BTL_ENDPOINT_ANY ? NULL : fep_of(endpoint);
    mca_btl_base_registration_handle_t *h = malloc(sizeof(*h));
    if (h == NULL)
        return NULL;
    ferry_btl_reg_t *reg = NULL;
    int rc = mod->fbtl->ops->register_mem(mod->fbtl, ep, base, size, access, &reg);
    if (rc != FERRY_OK) {
        free(h);
        return NULL;
    }
    memcpy(h->key, reg->key, sizeof(h->key));
    h->reg = reg;
    mod->stats.regs++;
    return h;
}

static int rdma_deregister_mem(struct mca_btl_base_module_t *btl,
                                struct mca_btl_base_registration_handle_t *h)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    if (h == NULL)
        return OPAL_ERR_BAD_PARAM;
    int rc = mod->fbtl->ops->deregister_mem(mod->fbtl, h->reg);
    free(h);
    return mca_btl_ferry_status(rc);
}

/* Synchronous, as Open MPI's btl_flush is: every put, get and atomic
 * started on ep (all endpoints when NULL) has completed when it returns. */
static int rdma_flush(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
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
    set_atomics(mod);
    return OPAL_SUCCESS;
}

void mca_btl_ferry_rdma_fini(mca_btl_ferry_module_t *mod)
{
    OBJ_DESTRUCT(&mod->rdma_ops);
}
