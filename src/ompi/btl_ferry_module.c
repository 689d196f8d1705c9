/*
 * One Open MPI module over one ferry module: its attributes, the processes
 * it reaches (add_procs, del_procs), descriptors (alloc, free, prepare_src),
 * sends (send, sendi), receives (ferry's active messages handed to Open
 * MPI's active-message trigger table), errors and finalize.
 */
#include "btl_ferry.h"

#include <stdlib.h>
#include <string.h>

#include "opal/class/opal_bitmap.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/mca/btl/base/base.h"
#include "opal/mca/hwloc/base/base.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

static mca_btl_ferry_module_t *mod_of(struct mca_btl_base_module_t *btl)
{
    return (mca_btl_ferry_module_t *)btl;
}

static ferry_btl_endpoint_t *fep_of(struct mca_btl_base_endpoint_t *ep)
{
    return (ferry_btl_endpoint_t *)ep;
}

/* The rank of an Open MPI process in ferry's job, or -1 for one of another
 * job (a spawned one) or out of range. */
static int rank_of(const struct opal_proc_t *proc)
{
    if (proc == NULL || proc->proc_name.jobid != mca_btl_ferry.jobid ||
        proc->proc_name.vpid >= (opal_vpid_t)mca_btl_ferry.size)
        return -1;
    return (int)proc->proc_name.vpid;
}

static void wait_fail_ep(mca_btl_ferry_module_t *mod, const ferry_btl_endpoint_t *ep);

/* ---- processes ---- */

static int mod_add_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                           struct opal_proc_t **procs, struct mca_btl_base_endpoint_t **peers,
                           struct opal_bitmap_t *reachable)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    if (nprocs == 0)
        return OPAL_SUCCESS;
    ferry_btl_proc_t *fprocs = calloc(nprocs, sizeof(*fprocs));
    ferry_btl_endpoint_t **eps = calloc(nprocs, sizeof(*eps));
    size_t *from = calloc(nprocs, sizeof(*from)); /* fprocs[k] is procs[from[k]] */
    struct ferry_bitmap *reach = NULL;
    int rc = OPAL_ERR_OUT_OF_RESOURCE;
    if (fprocs == NULL || eps == NULL || from == NULL ||
        ferry_bitmap_create(nprocs, &reach) != FERRY_OK)
        goto out;
    size_t n = 0;
    for (size_t i = 0; i < nprocs; i++) {
        int r = rank_of(procs[i]);
        if (peers != NULL)
            peers[i] = NULL;
        if (r < 0)
            continue; /* another job: not ferry's to reach */
        fprocs[n].rank = r;
        fprocs[n].same_host = r == st->rank || OPAL_PROC_ON_LOCAL_NODE(procs[i]->proc_flags);
        from[n++] = i;
    }
    rc = mca_btl_ferry_status(mod->fbtl->ops->add_procs(mod->fbtl, n, fprocs, eps, reach));
    if (rc != OPAL_SUCCESS) {
        opal_output(0, "btl ferry: %s: add_procs of %zu processes failed", mod->fbtl->attr.name,
                    n);
        goto out;
    }
    for (size_t k = 0; k < n; k++) {
        if (!ferry_bitmap_test(reach, k) || eps[k] == NULL)
            continue;
        size_t i = from[k];
        int r = fprocs[k].rank;
        mod->eps[r] = eps[k];
        mod->procs[r] = procs[i];
        st->reach[r] |= 1ull << mod->index;
        if (peers != NULL)
            peers[i] = (struct mca_btl_base_endpoint_t *)eps[k];
        if (reachable != NULL)
            opal_bitmap_set_bit(reachable, (int)i);
    }
    mca_btl_ferry_update_active();
out:
    ferry_bitmap_destroy(reach);
    free(from);
    free(eps);
    free(fprocs);
    return rc;
}

/* Open MPI calls this once per list of the BML that holds the module (the
 * send list and the RDMA list), so the second call for a process finds it
 * gone and does nothing. */
static int mod_del_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                           struct opal_proc_t **procs, struct mca_btl_base_endpoint_t **peers)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    for (size_t i = 0; i < nprocs; i++) {
        int r = rank_of(procs != NULL ? procs[i] : NULL);
        if (r < 0 || mod->eps[r] == NULL ||
            (peers != NULL && peers[i] != NULL && fep_of(peers[i]) != mod->eps[r]))
            continue;
        ferry_btl_endpoint_t *ep = mod->eps[r];
        wait_fail_ep(mod, ep);
        mod->eps[r] = NULL;
        mod->procs[r] = NULL;
        mca_btl_ferry.reach[r] &= ~(1ull << mod->index);
        mod->fbtl->ops->del_procs(mod->fbtl, 1, &ep);
    }
    mca_btl_ferry_update_active();
    return OPAL_SUCCESS;
}

static void mod_error(ferry_btl_module_t *fbtl, int status, int peer, const char *msg,
                      void *cbdata);

/* ---- receives ---- */

/* A fragment from a peer, handed to the handler Open MPI registered for its
 * tag in the active-message trigger table, as a descriptor of base
 * segments valid for the call. ferry's transports deliver one or two
 * segments; more than SEGS are gathered into one, so that no byte is left
 * out. */
static void mod_recv(ferry_btl_module_t *fbtl, const ferry_btl_recv_desc_t *rd, void *cbdata)
{
    mca_btl_ferry_module_t *mod = cbdata;
    const mca_btl_active_message_callback_t *reg = &mca_btl_base_active_message_trigger[rd->tag];
    if (reg->cbfunc == NULL) {
        opal_output(0, "btl ferry: %s: a fragment of tag %u from rank %d, for which Open MPI "
                       "registered no handler, was dropped",
                    fbtl->attr.name, (unsigned)rd->tag, rd->peer);
        return;
    }
    enum { SEGS = 4 };
    mca_btl_base_segment_t segs[SEGS];
    unsigned n = rd->seg_cnt;
    unsigned char *gathered = NULL;
    if (n > SEGS) {
        size_t total = 0;
        for (unsigned i = 0; i < n; i++)
            total += rd->segs[i].len;
        gathered = malloc(total > 0 ? total : 1);
        if (gathered == NULL) {
            mod_error(fbtl, FERRY_ERR_NO_MEMORY, rd->peer,
                      "no memory to gather a fragment of many segments", mod);
            return;
        }
        size_t off = 0;
        for (unsigned i = 0; i < n; i++) {
            memcpy(gathered + off, ferry_btl_seg_ptr(&rd->segs[i]), rd->segs[i].len);
            off += rd->segs[i].len;
        }
        segs[0].seg_addr.pval = gathered;
        segs[0].seg_len = total;
        n = 1;
    } else {
        for (unsigned i = 0; i < n; i++) {
            segs[i].seg_addr.pval = ferry_btl_seg_ptr(&rd->segs[i]);
            segs[i].seg_len = rd->segs[i].len;
        }
    }
    mca_btl_base_descriptor_t nested;
    mca_btl_base_descriptor_t *des = &mod->rdes;
    if (mod->rdes_busy) {
        memset(&nested, 0, sizeof(nested));
        des = &nested;
    }
    mod->rdes_busy = true;
    des->des_segments = segs;
    des->des_segment_count = n;
    mod->stats.recv++;
    reg->cbfunc(&mod->super, rd->tag, des, reg->cbdata);
    des->des_segments = NULL;
    des->des_segment_count = 0;
    mod->rdes_busy = des != &mod->rdes;
    free(gathered);
}

static int mod_register(struct mca_btl_base_module_t *btl, mca_btl_base_tag_t tag,
                          mca_btl_base_module_recv_cb_fn_t cbfunc, void *cbdata)
{
    /* Open MPI puts its handlers in the trigger table, which mod_recv
     * reads; a tag ferry cannot carry is refused here, not dropped later. */
    return tag < MCA_BTL_FERRY_TAG_LIMIT ? OPAL_SUCCESS : OPAL_ERR_BAD_PARAM;
}

/* ---- errors ---- */

static void mod_error(ferry_btl_module_t *fbtl, int status, int peer, const char *msg,
                        void *cbdata)
{
    mca_btl_ferry_module_t *mod = cbdata;
    struct opal_proc_t *proc =
        peer >= 0 && peer < mca_btl_ferry.size ? mod->procs[peer] : NULL;
    char *info = NULL;
    if (asprintf(&info, "btl ferry (%s): %s %d: %s (%s)", fbtl->attr.name,
                 peer >= 0 ? "lost rank" : "transport failed, rank", peer >= 0 ? peer : -1, msg,
                 ferry_strerror(status)) < 0)
        info = NULL;
    if (mod->error_cb != NULL && !mca_btl_ferry.closing && (peer < 0 || proc != NULL)) {
        /* Said before the call: ob1's callback ends the process. */
        opal_output_verbose(10, opal_btl_base_framework.framework_output,
                            "btl ferry: rank %d module %s: calling Open MPI's error callback "
                            "(fatal) for rank %d",
                            mca_btl_ferry.rank, fbtl->attr.name, peer);
        mod->error_cb(&mod->super, MCA_BTL_ERROR_FLAGS_FATAL, proc,
                      info != NULL ? info : (char *)"btl ferry: peer failed");
    } else if (info != NULL)
        opal_output(0, "%s", info);
    free(info);
}

static int mod_register_error(struct mca_btl_base_module_t *btl,
                                mca_btl_base_module_error_cb_fn_t cbfunc)
{
    mod_of(btl)->error_cb = cbfunc;
    return OPAL_SUCCESS;
}

/* ---- descriptors ---- */

static mca_btl_ferry_frag_t *frag_get(mca_btl_ferry_module_t *mod, ferry_btl_endpoint_t *ep,
                                      ferry_btl_desc_t *fdes, size_t len, uint32_t flags)
{
    mca_btl_ferry_frag_t *frag = (mca_btl_ferry_frag_t *)opal_free_list_get(&mod->frags);
    if (frag == NULL)
        return NULL;
    frag->mod = mod;
    frag->ep = ep;
    frag->fdes = fdes;
    frag->capacity = fdes->src[0].len;
    frag->next_done = NULL;
    frag->in_flight = false;
    frag->seg[0].seg_addr.pval = ferry_btl_seg_ptr(&fdes->src[0]);
    frag->seg[0].seg_len = len;
    frag->seg[1].seg_addr.pval = NULL;
    frag->seg[1].seg_len = 0;
    frag->base.des_segments = frag->seg;
    frag->base.des_segment_count = 1;
    frag->base.des_cbfunc = NULL;
    frag->base.des_cbdata = NULL;
    frag->base.des_context = NULL;
    frag->base.des_flags = flags;
    frag->base.order = MCA_BTL_NO_ORDER;
    return frag;
}

static mca_btl_base_descriptor_t *mod_alloc(struct mca_btl_base_module_t *btl,
                                              struct mca_btl_base_endpoint_t *ep, uint8_t order,
                                              size_t size, uint32_t flags)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    ferry_btl_desc_t *fdes;
    if (size > btl->btl_max_send_size ||
        mod->fbtl->ops->alloc(mod->fbtl, fep_of(ep), size, 0, &fdes) != FERRY_OK)
        return NULL;
    mca_btl_ferry_frag_t *frag = frag_get(mod, fep_of(ep), fdes, size, flags);
    if (frag == NULL) {
        mod->fbtl->ops->free(mod->fbtl, fdes);
        return NULL;
    }
    return &frag->base;
}

static int mod_free(struct mca_btl_base_module_t *btl, mca_btl_base_descriptor_t *des)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    mca_btl_ferry_frag_t *frag = (mca_btl_ferry_frag_t *)des;
    if (frag == NULL || frag->mod != mod)
        return OPAL_ERR_BAD_PARAM;
    if (frag->in_flight)
        return OPAL_ERR_RESOURCE_BUSY; /* its callback has not run */
    if (frag->fdes != NULL)
        mod->fbtl->ops->free(mod->fbtl, frag->fdes);
    frag->fdes = NULL;
    opal_free_list_return(&mod->frags, &frag->base.super);
    return OPAL_SUCCESS;
}

/* A fragment of reserve + up to *size bytes (cut to the largest send),
 * the header room first. Contiguous data of a module with inline sends is
 * left in place, as a second segment over the caller's memory: btl_send
 * copies it from there straight into the transport, one copy fewer than
 * packing it here first (ob1 keeps the memory until the fragment's
 * callback). The descriptor still has room for all of it, where btl_send
 * packs it when the transport cannot take it at once. Other data is packed
 * now. */
static mca_btl_base_descriptor_t *mod_prepare_src(struct mca_btl_base_module_t *btl,
                                                    struct mca_btl_base_endpoint_t *ep,
                                                    struct opal_convertor_t *convertor,
                                                    uint8_t order, size_t reserve, size_t *size,
                                                    uint32_t flags)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    size_t max = btl->btl_max_send_size;
    if (reserve > max)
        return NULL;
    size_t want = *size < max - reserve ? *size : max - reserve;
    mca_btl_base_descriptor_t *des = mod_alloc(btl, ep, order, reserve + want, flags);
    if (des == NULL)
        return NULL;
    bool inplace = want > 0 && (mod->fbtl->attr.flags & FERRY_BTL_FLAG_SENDI) &&
                   !opal_convertor_need_buffers(convertor);
    struct iovec iov = {.iov_base = inplace ? NULL : (char *)des->des_segments[0].seg_addr.pval +
                                                        reserve,
                        .iov_len = want};
    uint32_t iov_count = 1;
    size_t packed = want;
    /* A contiguous convertor given no buffer points it at the data. */
    if (want > 0 && opal_convertor_pack(convertor, &iov, &iov_count, &packed) < 0) {
        mod_free(btl, des);
        return NULL;
    }
    if (want == 0)
        packed = 0;
    if (inplace && packed > 0) {
        des->des_segments[0].seg_len = reserve;
        des->des_segments[1].seg_addr.pval = iov.iov_base;
        des->des_segments[1].seg_len = packed;
        des->des_segment_count = 2;
    } else
        des->des_segments[0].seg_len = reserve + packed;
    *size = packed;
    return des;
}

/* ---- sends ---- */

/* A ferry send descriptor completed. */
static void send_done(ferry_btl_module_t *fbtl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *fdes,
                      int status)
{
    (void)fbtl;
    (void)ep;
    mca_btl_ferry_frag_sent(fdes->cbdata, mca_btl_ferry_status(status));
}

void mca_btl_ferry_frag_sent(mca_btl_ferry_frag_t *frag, int opal_status)
{
    mca_btl_base_descriptor_t *des = &frag->base;
    bool owned = (des->des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) != 0;
    frag->in_flight = false;
    if (des->des_cbfunc != NULL && !mca_btl_ferry.closing)
        des->des_cbfunc(&frag->mod->super, (struct mca_btl_base_endpoint_t *)frag->ep, des,
                        opal_status);
    if (owned)
        mod_free(&frag->mod->super, des);
}

/* The queue of sends waiting for ep, NULL when it has none (the endpoints
 * with sends waiting are few: a short search). */
static mca_btl_ferry_waitq_t *waitq_of(mca_btl_ferry_module_t *mod, const ferry_btl_endpoint_t *ep)
{
    for (unsigned i = 0; i < mod->n_waitq; i++)
        if (mod->waitq[i].ep == ep)
            return mod->waitq[i].head != NULL ? &mod->waitq[i] : NULL;
    return NULL;
}

/* Whether sends of this module to ep wait behind others. */
static bool ep_waits(mca_btl_ferry_module_t *mod, const ferry_btl_endpoint_t *ep)
{
    return mod->n_waitq > 0 && waitq_of(mod, ep) != NULL;
}

/* Puts the fragment at the end of its endpoint's queue; false when no
 * memory for a queue. */
static bool wait_append(mca_btl_ferry_frag_t *frag)
{
    mca_btl_ferry_module_t *mod = frag->mod;
    mca_btl_ferry_waitq_t *q = NULL;
    for (unsigned i = 0; i < mod->n_waitq && q == NULL; i++)
        if (mod->waitq[i].ep == frag->ep)
            q = &mod->waitq[i];
    if (q == NULL) {
        if (mod->n_waitq == mod->cap_waitq) {
            unsigned cap = mod->cap_waitq > 0 ? 2 * mod->cap_waitq : 4;
            mca_btl_ferry_waitq_t *grown = realloc(mod->waitq, cap * sizeof(*grown));
            if (grown == NULL)
                return false;
            mod->waitq = grown;
            mod->cap_waitq = cap;
        }
        q = &mod->waitq[mod->n_waitq++];
        *q = (mca_btl_ferry_waitq_t){.ep = frag->ep};
    }
    frag->next_wait = NULL;
    frag->in_flight = true;
    if (q->tail != NULL)
        q->tail->next_wait = frag;
    else
        q->head = frag;
    q->tail = frag;
    mca_btl_ferry.n_send_waiting++;
    mod->stats.send_waited++;
    return true;
}

/* Takes the first fragment off queue i of mod. */
static mca_btl_ferry_frag_t *wait_pop(mca_btl_ferry_module_t *mod, unsigned i)
{
    mca_btl_ferry_waitq_t *q = &mod->waitq[i];
    mca_btl_ferry_frag_t *frag = q->head;
    q->head = frag->next_wait;
    if (q->head == NULL)
        q->tail = NULL;
    mca_btl_ferry.n_send_waiting--;
    return frag;
}

/* The fragment's header, and its data where it stayed in place, as one
 * inline ferry send. */
static int frag_sendi(mca_btl_ferry_frag_t *frag)
{
    const mca_btl_base_segment_t *seg = frag->base.des_segments;
    size_t plen = frag->base.des_segment_count == 2 ? seg[1].seg_len : 0;
    return frag->mod->fbtl->ops->sendi(frag->mod->fbtl, frag->ep, seg[0].seg_addr.pval,
                                       seg[0].seg_len, plen > 0 ? seg[1].seg_addr.pval : NULL,
                                       plen, frag->tag);
}

/* Hands the fragment to ferry's send, which queues it in order and calls
 * send_done; data in place is packed behind the header first. */
static int frag_send_queued(mca_btl_ferry_frag_t *frag)
{
    mca_btl_base_descriptor_t *des = &frag->base;
    size_t len = des->des_segments[0].seg_len;
    if (des->des_segment_count == 2) {
        unsigned char *data = des->des_segments[0].seg_addr.pval;
        memcpy(data + len, des->des_segments[1].seg_addr.pval, des->des_segments[1].seg_len);
        len += des->des_segments[1].seg_len;
        des->des_segments[0].seg_len = len;
        des->des_segments[1].seg_len = 0;
        des->des_segment_count = 1;
    }
    frag->fdes->src[0].len = len;
    frag->fdes->cbfunc = send_done;
    frag->fdes->cbdata = frag;
    frag->in_flight = true;
    int rc = frag->mod->fbtl->ops->send(frag->mod->fbtl, frag->ep, frag->fdes, frag->tag);
    if (rc != FERRY_OK) {
        frag->in_flight = false;
        return mca_btl_ferry_status(rc);
    }
    frag->mod->stats.send_queued++;
    return OPAL_SUCCESS;
}

/* Sends each endpoint's queue from its head until the transport refuses
 * one; with closing, drops them. An emptied queue goes. Each fragment is
 * off its queue before Open MPI hears of it: its callback may send again,
 * behind what still waits (and may grow the array, so queues are named by
 * index). */
static int waitq_run(mca_btl_ferry_module_t *mod, bool closing)
{
    int n = 0;
    for (unsigned i = 0; i < mod->n_waitq;) {
        mca_btl_ferry_frag_t *frag = mod->waitq[i].head;
        if (frag == NULL) {
            mod->waitq[i] = mod->waitq[--mod->n_waitq];
            continue;
        }
        int rc = closing ? FERRY_ERR_CANCELED : frag_sendi(frag);
        if (rc == FERRY_ERR_NO_RESOURCE) {
            i++;
            continue;
        }
        wait_pop(mod, i);
        if (rc == FERRY_OK) {
            mod->stats.send_inplace += frag->base.des_segment_count == 2;
            mca_btl_ferry_frag_sent(frag, OPAL_SUCCESS);
        } else if (rc == FERRY_ERR_NOT_SUPPORTED) {
            int orc = frag_send_queued(frag);
            if (orc != OPAL_SUCCESS)
                mca_btl_ferry_frag_sent(frag, orc);
        } else
            mca_btl_ferry_frag_sent(frag, mca_btl_ferry_status(rc));
        n++;
    }
    return n;
}

int mca_btl_ferry_send_run_waiting(bool closing)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    int n = 0;
    for (int m = 0; m < st->n_modules && st->n_send_waiting > 0; m++)
        n += waitq_run(st->modules[m], closing);
    return n;
}

/* Fails what waits to go to ep (del_procs: the endpoint may go). */
static void wait_fail_ep(mca_btl_ferry_module_t *mod, const ferry_btl_endpoint_t *ep)
{
    for (unsigned i = 0; i < mod->n_waitq; i++) {
        if (mod->waitq[i].ep != ep)
            continue;
        /* By index again after each callback, which may grow the array. */
        while (mod->waitq[i].head != NULL)
            mca_btl_ferry_frag_sent(wait_pop(mod, i), OPAL_ERR_UNREACH);
        mod->waitq[i] = mod->waitq[--mod->n_waitq];
        return;
    }
}

/*
 * Open MPI's send contract: 1 when the fragment left inside the call (its
 * callback then runs only with MCA_BTL_DES_SEND_ALWAYS_CALLBACK, from the
 * next progress, and the call returns 0 so that Open MPI waits for it);
 * OPAL_SUCCESS when the callback will say. A fragment with its data in
 * place, or one that fits the eager limit, goes as ferry's inline send
 * (copied now). One with data in place that the transport cannot take now
 * waits on the component's list, the data still in place, and leaves from
 * progress; so does anything sent to an endpoint while something waits
 * for it. Anything else goes as a ferry send and completes from progress.
 */
static int mod_send(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *endpoint,
                      mca_btl_base_descriptor_t *des, mca_btl_base_tag_t tag)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    mca_btl_ferry_frag_t *frag = (mca_btl_ferry_frag_t *)des;
    ferry_btl_endpoint_t *ep = fep_of(endpoint);
    unsigned nseg = des->des_segment_count;
    size_t len = des->des_segments[0].seg_len;
    size_t plen = nseg == 2 ? des->des_segments[1].seg_len : 0;
    if (tag >= MCA_BTL_FERRY_TAG_LIMIT || frag->fdes == NULL || frag->in_flight || nseg < 1 ||
        nseg > 2 || des->des_segments != frag->seg || len > frag->capacity ||
        plen > frag->capacity - len || (plen > 0 && des->des_segments[1].seg_addr.pval == NULL))
        return OPAL_ERR_BAD_PARAM;
    frag->ep = ep;
    frag->tag = (uint8_t)tag;
    if (ep_waits(mod, ep))
        return wait_append(frag) ? OPAL_SUCCESS : OPAL_ERR_OUT_OF_RESOURCE;
    if (plen > 0 || len <= btl->btl_eager_limit) {
        int rc = frag_sendi(frag);
        if (rc == FERRY_OK) {
            if (plen > 0)
                mod->stats.send_inplace++;
            else
                mod->stats.send_inline++;
            if (des->des_flags & MCA_BTL_DES_SEND_ALWAYS_CALLBACK) {
                frag->in_flight = true;
                mca_btl_ferry_defer_done(frag);
                return OPAL_SUCCESS;
            }
            if (des->des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP)
                mod_free(btl, des);
            return 1;
        }
        if (rc == FERRY_ERR_NO_RESOURCE && plen > 0)
            return wait_append(frag) ? OPAL_SUCCESS : OPAL_ERR_OUT_OF_RESOURCE;
        if (rc != FERRY_ERR_NO_RESOURCE && rc != FERRY_ERR_NOT_SUPPORTED)
            return mca_btl_ferry_status(rc);
    }
    return frag_send_queued(frag);
}

/* Header and payload as one inline ferry send, copied before return. When
 * that cannot be (a payload that is not contiguous, a transport out of
 * room or with sends queued), they are packed into a descriptor that goes
 * as a ferry send, queued in order if need be: ob1 takes anything but
 * success from sendi as "out of resources" and tries the same again
 * later, so only a descriptor that cannot be had is reported. */
static int mod_sendi(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                     struct opal_convertor_t *convertor, void *header, size_t header_size,
                     size_t payload_size, uint8_t order, uint32_t flags, mca_btl_base_tag_t tag,
                     mca_btl_base_descriptor_t **descriptor)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    if (descriptor != NULL)
        *descriptor = NULL;
    if (tag >= MCA_BTL_FERRY_TAG_LIMIT || (payload_size > 0 && convertor == NULL) ||
        header_size > btl->btl_max_send_size ||
        payload_size > btl->btl_max_send_size - header_size)
        return OPAL_ERR_BAD_PARAM;
    if ((payload_size == 0 || !opal_convertor_need_buffers(convertor)) &&
        !ep_waits(mod, fep_of(ep))) {
        void *payload = NULL;
        if (payload_size > 0)
            opal_convertor_get_current_pointer(convertor, &payload);
        int rc = mod->fbtl->ops->sendi(mod->fbtl, fep_of(ep), header, header_size, payload,
                                       payload_size, tag);
        if (rc == FERRY_OK) {
            mod->stats.sendi++;
            return OPAL_SUCCESS;
        }
        if (rc != FERRY_ERR_NO_RESOURCE && rc != FERRY_ERR_NOT_SUPPORTED &&
            rc != FERRY_ERR_INVALID)
            return mca_btl_ferry_status(rc);
    }
    mca_btl_base_descriptor_t *des =
        mod_alloc(btl, ep, order, header_size + payload_size,
                  (flags | MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) & ~MCA_BTL_DES_SEND_ALWAYS_CALLBACK);
    if (des == NULL)
        return OPAL_ERR_OUT_OF_RESOURCE;
    unsigned char *data = des->des_segments[0].seg_addr.pval;
    memcpy(data, header, header_size);
    if (payload_size > 0) {
        struct iovec iov = {.iov_base = data + header_size, .iov_len = payload_size};
        uint32_t iov_count = 1;
        size_t packed = payload_size;
        if (opal_convertor_pack(convertor, &iov, &iov_count, &packed) < 0 ||
            packed != payload_size) {
            mod_free(btl, des);
            return OPAL_ERROR;
        }
    }
    int rc = mod_send(btl, ep, des, tag);
    if (rc < 0) {
        mod_free(btl, des);
        return rc;
    }
    return OPAL_SUCCESS; /* sent (1) or queued with nobody to call back */
}

/* ---- diagnostics and finalize ---- */

static void mod_dump(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                       int verbose)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    mod->fbtl->ops->dump(mod->fbtl, fep_of(ep), verbose);
}

static void print_stats(const mca_btl_ferry_module_t *mod)
{
    const mca_btl_ferry_stats_t *s = &mod->stats;
    opal_output_verbose(40, opal_btl_base_framework.framework_output,
                        "btl ferry: rank %d module %s: sendi %llu, send inline %llu, send "
                        "queued %llu, send inplace %llu, send waited %llu, put %llu (%llu bytes), get %llu (%llu bytes), atomics "
                        "%llu, waited %llu, own %llu, registrations %llu (cached %llu), "
                        "received %llu, failed %llu",
                        mca_btl_ferry.rank, mod->fbtl->attr.name, (unsigned long long)s->sendi,
                        (unsigned long long)s->send_inline, (unsigned long long)s->send_queued,
                        (unsigned long long)s->send_inplace, (unsigned long long)s->send_waited,
                        (unsigned long long)s->put, (unsigned long long)s->put_bytes,
                        (unsigned long long)s->get, (unsigned long long)s->get_bytes,
                        (unsigned long long)s->atomics, (unsigned long long)s->waited,
                        (unsigned long long)s->own, (unsigned long long)s->regs,
                        (unsigned long long)s->reg_hits, (unsigned long long)s->recv,
                        (unsigned long long)s->rdma_failed);
}

/* The last module to finalize closes ferry: every transport finalized,
 * their files removed, the modex left. Until then ferry's modules are
 * alive, so a module Open MPI finalized early costs nothing but its
 * polling, which stops. */
static int mod_finalize(struct mca_btl_base_module_t *btl)
{
    mca_btl_ferry_module_t *mod = mod_of(btl);
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    if (mod->finalized)
        return OPAL_SUCCESS;
    mod->finalized = true;
    mca_btl_ferry_update_active(); /* no longer polled */
    print_stats(mod);
    for (int i = 0; i < st->n_modules; i++)
        if (!st->modules[i]->finalized)
            return OPAL_SUCCESS;
    st->closing = true;
    int rc = OPAL_SUCCESS;
    if (st->ctx != NULL) {
        mca_btl_ferry_send_run_waiting(true);
        mca_btl_ferry_run_done();
        mca_btl_ferry_rdma_run_waiting(true);
        mca_btl_ferry_rdma_run_done();
        mca_btl_ferry_reg_cache_stop();
        mca_btl_ferry_mpool_fini();
        rc = mca_btl_ferry_status(ferry_finalize(&st->ctx));
    }
    for (int i = 0; i < st->n_modules; i++) {
        mca_btl_ferry_module_t *m = st->modules[i];
        mca_btl_ferry_rdma_fini(m);
        OBJ_DESTRUCT(&m->frags);
        free(m->waitq);
        free(m->eps);
        free(m->procs);
        free(m);
    }
    free(st->modules);
    free(st->reach);
    st->modules = NULL;
    st->reach = NULL;
    st->n_modules = 0;
    st->closing = false;
    return rc;
}

/* ---- the module ---- */

static size_t knob(size_t mine, size_t own)
{
    return mine != 0 ? mine : own;
}

/* Keeps an Open MPI attribute within what the ferry module can do, saying
 * so when a btl_ferry_* variable asked for more. */
static size_t within(const char *what, size_t value, size_t limit, const char *mname)
{
    if (value <= limit)
        return value;
    opal_output(0, "btl ferry: btl_ferry_%s=%zu is more than the %s module can do (%zu): %zu "
                   "used",
                what, value, mname, limit, limit);
    return limit;
}

mca_btl_ferry_module_t *mca_btl_ferry_module_create(ferry_btl_module_t *fbtl, int index)
{
    const mca_btl_ferry_state_t *st = &mca_btl_ferry;
    const ferry_btl_attr_t *a = &fbtl->attr;
    if (!(a->flags & FERRY_BTL_FLAG_SEND) || index >= 64)
        return NULL;
    mca_btl_ferry_module_t *mod = calloc(1, sizeof(*mod));
    if (mod == NULL)
        return NULL;
    mod->fbtl = fbtl;
    mod->index = index;
    mod->eps = calloc((size_t)st->size, sizeof(*mod->eps));
    mod->procs = calloc((size_t)st->size, sizeof(*mod->procs));
    OBJ_CONSTRUCT(&mod->frags, opal_free_list_t);
    if (mod->eps == NULL || mod->procs == NULL ||
        opal_free_list_init(&mod->frags, sizeof(mca_btl_ferry_frag_t), opal_cache_line_size,
                            OBJ_CLASS(mca_btl_base_descriptor_t), 0, opal_cache_line_size, 16,
                            -1, 64, NULL, 0, NULL, NULL, NULL) != OPAL_SUCCESS)
        goto err;

    mca_btl_base_module_t *b = &mod->super;
    b->btl_component = &mca_btl_ferry_component;
    b->btl_max_send_size = within("max_send_size", knob(st->knob.max_send_size, a->max_send_size),
                                  a->max_send_size, a->name);
    b->btl_eager_limit =
        within("eager_limit", knob(st->knob.eager_limit, a->eager_limit), b->btl_max_send_size,
               a->name);
    b->btl_rndv_eager_limit = within("rndv_eager_limit",
                                     knob(st->knob.rndv_eager_limit, a->eager_limit),
                                     b->btl_max_send_size, a->name);
    b->btl_rdma_pipeline_send_length =
        knob(st->knob.rdma_pipeline_send_length, a->eager_limit);
    b->btl_rdma_pipeline_frag_size =
        within("rdma_pipeline_frag_size",
               knob(st->knob.rdma_pipeline_frag_size, a->rdma_pipeline_frag_size),
               a->max_rdma_size, a->name);
    /* With both put and get, one get of the whole message (ob1's RGET)
     * whatever its size: single copy on sm, one request on tcp. */
    b->btl_min_rdma_pipeline_size = knob(st->knob.min_rdma_pipeline_size, (size_t)INT32_MAX);
    b->btl_exclusivity = st->knob.exclusivity != 0 ? st->knob.exclusivity : a->exclusivity;
    b->btl_latency = st->knob.latency != 0 ? st->knob.latency : a->latency;
    b->btl_bandwidth = st->knob.bandwidth != 0 ? st->knob.bandwidth : a->bandwidth;
    b->btl_add_procs = mod_add_procs;
    b->btl_del_procs = mod_del_procs;
    b->btl_register = mod_register;
    b->btl_finalize = mod_finalize;
    b->btl_alloc = mod_alloc;
    b->btl_free = mod_free;
    b->btl_prepare_src = mod_prepare_src;
    b->btl_send = mod_send;
    b->btl_sendi = (a->flags & FERRY_BTL_FLAG_SENDI) ? mod_sendi : NULL;
    b->btl_dump = mod_dump;
    b->btl_register_error = mod_register_error;
    b->btl_flags = MCA_BTL_FLAGS_SEND;
    if (mca_btl_ferry_rdma_init(mod) != OPAL_SUCCESS)
        goto err;
    b->btl_flags &= (uint32_t)st->knob.flags | MCA_BTL_FLAGS_SEND;

    opal_output_verbose(40, opal_btl_base_framework.framework_output,
                        "btl ferry: rank %d module %s: eager limit %zu, max send %zu, rdma "
                        "pipeline %zu, exclusivity %u, latency %u, bandwidth %u, flags 0x%x, "
                        "atomic flags 0x%x, key %zu bytes",
                        st->rank, a->name, b->btl_eager_limit, b->btl_max_send_size,
                        b->btl_rdma_pipeline_frag_size, b->btl_exclusivity, b->btl_latency,
                        b->btl_bandwidth, b->btl_flags, b->btl_atomic_flags,
                        b->btl_registration_handle_size);
    for (unsigned tag = 0; tag < MCA_BTL_FERRY_TAG_LIMIT; tag++)
        fbtl->ops->register_am(fbtl, (uint8_t)tag, mod_recv, mod);
    fbtl->ops->register_error(fbtl, mod_error, mod);
    return mod;

err:
    opal_output(0, "btl ferry: the %s module cannot be set up: out of memory", a->name);
    OBJ_DESTRUCT(&mod->frags);
    free(mod->eps);
    free(mod->procs);
    free(mod);
    return NULL;
}
