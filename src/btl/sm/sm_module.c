/*
 * The sm module's operations and its component: parameters, the segment,
 * and the modex address.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "btl/sm/sm.h"
#include "rt/modex.h"

static sm_module_t *sm_of(ferry_btl_module_t *btl)
{
    return (sm_module_t *)btl;
}

/* ---- endpoints ---- */

static ferry_btl_endpoint_t *ep_new(sm_module_t *mod, int rank)
{
    ferry_btl_endpoint_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return NULL;
    ep->mod = mod;
    ep->rank = rank;
    ep->state = SM_EP_NEW;
    ep->pidfd = -1;
    ep->prefetch_write = mod->prefetch_write;
    /* A new ring is all zeros: every slot reads as "no header". */
    size_t words = (mod->p.ring_size / SM_ALIGN + 63) / 64;
    ep->hdr_bits = malloc(words * sizeof(uint64_t));
    if (ep->hdr_bits == NULL) {
        free(ep);
        return NULL;
    }
    memset(ep->hdr_bits, 0xff, words * sizeof(uint64_t));
    util_list_init(&ep->queue);
    util_list_init(&ep->ring_puts);
    util_list_init(&ep->iputs);
    util_list_init(&ep->igets);
    util_list_init(&ep->gets);
    return ep;
}

static int sm_add_procs(ferry_btl_module_t *btl, size_t n, const ferry_btl_proc_t *procs,
                        ferry_btl_endpoint_t **eps_out, struct ferry_bitmap *reachable)
{
    sm_module_t *mod = sm_of(btl);
    if (btl == NULL || (n > 0 && (procs == NULL || eps_out == NULL)))
        return FERRY_ERR_INVALID;
    for (size_t i = 0; i < n; i++) {
        int r = procs[i].rank;
        eps_out[i] = NULL;
        if (r < 0 || r >= mod->nranks || !(procs[i].same_host || r == btl->ctx->rank))
            continue;
        if (mod->eps[r] == NULL) {
            mod->eps[r] = ep_new(mod, r);
            if (mod->eps[r] == NULL)
                return FERRY_ERR_NO_MEMORY;
        }
        mod->eps[r]->deleted = false;
        eps_out[i] = mod->eps[r];
        if (reachable != NULL)
            util_bitmap_set(reachable, i);
    }
    return FERRY_OK;
}

/* Endpoints live as long as the module (their ring positions must survive a
 * later add_procs); del_procs fails what is pending and refuses new work. */
static int sm_del_procs(ferry_btl_module_t *btl, size_t n, ferry_btl_endpoint_t **eps)
{
    sm_module_t *mod = sm_of(btl);
    if (btl == NULL || (n > 0 && eps == NULL))
        return FERRY_ERR_INVALID;
    for (size_t i = 0; i < n; i++) {
        ferry_btl_endpoint_t *ep = eps[i];
        if (ep == NULL || ep->mod != mod)
            continue;
        util_list_item_t *it;
        while ((it = util_list_pop_front(&ep->queue)) != NULL)
            sm_complete(mod, UTIL_CONTAINER_OF(it, btl_frag_t, link), FERRY_ERR_UNREACH);
        /* The peer may still answer its gets and atomics: dropped when
         * they come. */
        ep->forgot_cookie = mod->next_cookie;
        btl_amo_ep_forget(&mod->amo, &ep->amo, FERRY_ERR_UNREACH);
        sm_rdma_fail(mod, ep, FERRY_ERR_UNREACH);
        ep->deleted = true;
    }
    return FERRY_OK;
}

/* ---- descriptors ---- */

/* ---- sending ---- */

/* Checks an endpoint before new work goes to it, connecting it lazily. */
static int ep_ready(sm_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (ep == NULL || ep->mod != mod)
        return FERRY_ERR_INVALID;
    if (ep->deleted || ep->state == SM_EP_FAILED || ep->state == SM_EP_CLOSED)
        return FERRY_ERR_UNREACH;
    return ep->state == SM_EP_CONNECTED ? FERRY_OK : sm_ep_connect(mod, ep);
}

static int sm_send(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                   uint8_t tag)
{
    sm_module_t *mod = sm_of(btl);
    int rc = btl_frags_check_send(btl, des, tag);
    if (rc != FERRY_OK)
        return rc;
    rc = ep_ready(mod, ep);
    if (rc != FERRY_OK)
        return rc;
    btl_frag_t *frag = btl_frag_of(des);
    frag->op = SM_OP_SEND;
    frag->tag = tag;
    frag->ep = ep;
    des->flags |= FERRY_BTL_DES_INFLIGHT;
    if (util_list_empty(&ep->queue)) {
        size_t len = des->src[0].len;
        unsigned char *slot;
        uint64_t pos;
        if (sm_ring_reserve(ep, len, &slot, &pos)) {
            memcpy(slot, ferry_btl_seg_ptr(&des->src[0]), len);
            sm_ring_commit(ep, pos, (uint32_t)len, tag, SM_T_DATA);
            sm_complete(mod, frag, FERRY_OK);
            return FERRY_OK;
        }
        if (ep->state == SM_EP_FAILED) {
            des->flags &= ~(uint32_t)FERRY_BTL_DES_INFLIGHT;
            return FERRY_ERR_UNREACH;
        }
    }
    /* Out of credits: the fragment waits its turn on the endpoint. */
    util_list_append(&ep->queue, &frag->link);
    sm_mark_sending(mod, ep);
    return FERRY_OK;
}

/* sendi with every check, and every case: an endpoint to connect, a
 * message that waits, a lap's end, credits to read again. */
static int __attribute__((noinline))
sendi_checked(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *header,
              size_t header_len, const void *payload, size_t payload_len, uint8_t tag)
{
    sm_module_t *mod = sm_of(btl);
    if (btl == NULL || tag >= FERRY_BTL_TAG_BTL_MIN || (header == NULL && header_len > 0) ||
        (payload == NULL && payload_len > 0) || header_len > btl->attr.max_send_size ||
        payload_len > btl->attr.max_send_size - header_len)
        return FERRY_ERR_INVALID;
    if (ep == NULL || ep->mod != mod)
        return FERRY_ERR_INVALID;
    if (ep->state != SM_EP_CONNECTED) {
        int rc = ep_ready(mod, ep);
        if (rc != FERRY_OK)
            return rc;
    }
    if (ep->deleted)
        return FERRY_ERR_UNREACH;
    /* Nothing may overtake what is queued. */
    if (!util_list_empty(&ep->queue))
        return FERRY_ERR_NO_RESOURCE;
    size_t len = header_len + payload_len;
    unsigned char *slot;
    uint64_t pos;
    if (!sm_ring_reserve(ep, len, &slot, &pos))
        return ep->state == SM_EP_FAILED ? FERRY_ERR_UNREACH : FERRY_ERR_NO_RESOURCE;
    if (header_len > 0)
        sm_copy(slot, header, header_len);
    if (payload_len > 0)
        sm_copy(slot + header_len, payload, payload_len);
    sm_ring_commit(ep, pos, (uint32_t)len, tag, SM_T_DATA);
    return FERRY_OK;
}

/* The common case in one pass, with nothing to call: valid arguments to a
 * connected endpoint with nothing queued, and room before the lap's end
 * within the credits cached. Anything else goes to sendi_checked, which
 * decides it from the start. */
static int sm_sendi(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *header,
                    size_t header_len, const void *payload, size_t payload_len, uint8_t tag)
{
    sm_module_t *mod = sm_of(btl);
    if (__builtin_expect(btl != NULL && ep != NULL && ep->mod == mod &&
                             ep->state == SM_EP_CONNECTED && !ep->deleted &&
                             tag < FERRY_BTL_TAG_BTL_MIN && (header != NULL || header_len == 0) &&
                             (payload != NULL || payload_len == 0) &&
                             header_len <= btl->attr.max_send_size &&
                             payload_len <= btl->attr.max_send_size - header_len &&
                             util_list_empty(&ep->queue),
                         1)) {
        const uint64_t ring = mod->p.ring_size;
        const size_t len = header_len + payload_len;
        const uint64_t pos = ep->head, off = pos & (ring - 1), size = sm_span(off, len);
        if (__builtin_expect(sm_ring_room(ep, ring, off, size), 1)) {
            unsigned char *slot = ep->out->ring + off + SM_HDR_SIZE;
            sm_ring_take(ep, ring, off, size);
            if (header_len > 0)
                sm_copy(slot, header, header_len);
            if (payload_len > 0)
                sm_copy(slot + header_len, payload, payload_len);
            sm_ring_publish(ep, ring, off, size,
                            sm_hdr_pack((uint32_t)len, tag, SM_T_DATA, sm_lap(pos, ring)));
            return FERRY_OK;
        }
    }
    return sendi_checked(btl, ep, header, header_len, payload, payload_len, tag);
}

/* ---- progress ---- */

/* A put or get leaves the endpoint's count of operations in flight. */
static void sm_completion_done(btl_frag_t *frag)
{
    if (frag->op != SM_OP_SEND && frag->ep != NULL)
        frag->ep->rdma_inflight--;
}

static int run_completions(sm_module_t *mod)
{
    return btl_frags_run_completions(&mod->frags, &mod->completed, sm_completion_done);
}

/* What progress does besides reading the channels: queued sends and
 * rdma, completions, the periodic look at peers' liveness and reports.
 * Out of line, so that a poll that finds these idle pays for none of it. */
static int __attribute__((noinline)) progress_rest(sm_module_t *mod, uint32_t calls)
{
    int n = 0;
    util_list_item_t *it = util_list_first(&mod->sending);
    while (it != NULL) {
        ferry_btl_endpoint_t *ep = UTIL_CONTAINER_OF(it, ferry_btl_endpoint_t, sending_link);
        it = util_list_next(&mod->sending, it);
        if (ep->state == SM_EP_CONNECTED) {
            n += sm_drain_queue(mod, ep);
            n += sm_rdma_progress(mod, ep);
        } else if (ep->njobs > 0 && ep->state == SM_EP_NEW) {
            n += sm_rdma_progress(mod, ep);
        }
        if (!sm_rdma_busy(ep)) {
            util_list_remove(&mod->sending, &ep->sending_link);
            ep->sending = false;
        }
    }
    /* The inline ones first. Each kind keeps its own order; between the two
     * there is none to keep (when a peer fails, the descriptors' puts and
     * gets still queued were started after any inline one). */
    if (!util_list_empty(&mod->iputs_done))
        n += sm_iputs_run(mod);
    if (!util_list_empty(&mod->completed))
        n += run_completions(mod);
    if (!util_list_empty(&mod->amo.completed))
        n += btl_amo_progress(&mod->super, &mod->amo);
    if ((calls & 15) == 0)
        n += sm_check_peers(mod);
    n += btl_base_progress_reports(&mod->super);
    return n;
}

static int sm_progress(ferry_btl_module_t *btl)
{
    sm_module_t *mod = sm_of(btl);
    int n = 0;

    /* A sender that connected since the last look: one shared word read. */
    if (atomic_load_explicit(&mod->hdr->connect_seq, memory_order_acquire) !=
        mod->seen_connect_seq)
        sm_scan_new_senders(mod);
    /* The hottest peers are polled every call, the rest every eighth. */
    uint32_t calls = ++mod->progress_calls;
    int hot = mod->hot_peers, npoll = mod->npoll;
    int upto = npoll <= hot || (calls & 7) == 0 ? npoll : hot;
    for (int i = 0; i < upto; i++) {
        ferry_btl_endpoint_t *ep = mod->poll[i];
        if (!sm_channel_ready(mod, ep))
            continue;
        int got = sm_poll_channel(mod, ep);
        if (got > 0 && i >= hot && i > 0 && mod->poll[i] == ep) {
            /* Busy peers move up, one place at a time. */
            mod->poll[i] = mod->poll[i - 1];
            mod->poll[i - 1] = ep;
        }
        n += got;
    }
    if (__builtin_expect(util_list_empty(&mod->sending) && util_list_empty(&mod->iputs_done) &&
                             util_list_empty(&mod->completed) &&
                             util_list_empty(&mod->amo.completed) && (calls & 15) != 0 &&
                             mod->super.reports == NULL,
                         1))
        return n;
    return n + progress_rest(mod, calls);
}

static int sm_flush(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep)
{
    sm_module_t *mod = sm_of(btl);
    if (btl == NULL || (ep != NULL && ep->mod != mod))
        return FERRY_ERR_INVALID;
    /* What a put or get done inside its call leaves behind: nothing. */
    if (ep != NULL && ep->rdma_inflight == 0 && ep->amo.ninflight == 0)
        return FERRY_OK;
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *e = mod->eps[r];
        if (e == NULL || (ep != NULL && e != ep))
            continue;
        int rc = btl_base_wait_inflight(btl, &e->rdma_inflight);
        if (rc == FERRY_OK)
            rc = btl_base_wait_inflight(btl, &e->amo.ninflight);
        if (rc != FERRY_OK)
            return rc;
    }
    return FERRY_OK;
}

static void sm_dump(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, int verbose)
{
    sm_module_t *mod = sm_of(btl);
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *e = mod->eps[r];
        if (e == NULL || (ep != NULL && e != ep))
            continue;
        rt_log(&btl->ctx->log, RT_LOG_ERROR,
               "sm: rank %d state %d head %llu tail %llu rpos %llu queued %zu puts %zu (inline %zu) "
               "gets %zu jobs %u rdma %zu",
               r, (int)e->state, (unsigned long long)e->head,
               (unsigned long long)e->cached_tail, (unsigned long long)e->rpos,
               util_list_len(&e->queue), util_list_len(&e->ring_puts), util_list_len(&e->iputs),
               util_list_len(&e->gets), e->njobs, e->rdma_inflight);
    }
}

static int sm_finalize(ferry_btl_module_t *btl)
{
    sm_module_t *mod = sm_of(btl);
    if (mod == NULL)
        return FERRY_OK;
    sm_announce_close(mod);
    if (mod->assist_given > 0 || mod->assist_received > 0)
        rt_log(&btl->ctx->log, RT_LOG_INFO,
               "sm: pieces of cross-memory copies: %llu taken for peers, %llu taken by peers",
               (unsigned long long)mod->assist_given, (unsigned long long)mod->assist_received);
    if (mod->eps != NULL) {
        for (int r = 0; r < mod->nranks; r++)
            if (mod->eps[r] != NULL)
                sm_ep_release(mod, mod->eps[r]);
    }
    /* Callbacks for what was failed above. */
    run_completions(mod);
    sm_iputs_run(mod);
    sm_iputs_fini(mod);
    btl_amo_module_fini(btl, &mod->amo);
    sm_heaps_release(mod);
    int rc = btl_frags_fini(&mod->frags);
    sm_regs_release(mod);
    free(mod->eps);
    free(mod->poll);
    if (mod->seg != NULL) {
        munmap(mod->seg, mod->seg_size);
        shm_unlink(mod->seg_name);
    }
    /* (A module whose init never ran has nranks 0 and no descriptor.) */
    if (mod->nranks > 0 && mod->seg_fd >= 0)
        close(mod->seg_fd);
    btl_base_reports_fini(&mod->super);
    free(mod);
    return rc;
}

static const ferry_btl_ops_t sm_ops = {
    .add_procs = sm_add_procs,
    .del_procs = sm_del_procs,
    .register_am = btl_base_register_am,
    .register_error = btl_base_register_error,
    .finalize = sm_finalize,
    .alloc = btl_frags_op_alloc,
    .free = btl_frags_op_free,
    .prepare_src = btl_frags_op_prepare_src,
    .prepare_dst = btl_frags_op_prepare_dst,
    .send = sm_send,
    .sendi = sm_sendi,
    .put = sm_put,
    .get = sm_get,
    .register_mem = sm_register_mem,
    .deregister_mem = sm_deregister_mem,
    .mem_alloc = sm_mem_alloc,
    .mem_free = sm_mem_free,
    .atomic_op = sm_atomic_op,
    .atomic_fop = sm_atomic_fop,
    .atomic_cswap = sm_atomic_cswap,
    .atomic_direct = sm_atomic_direct,
    .rdma_direct = sm_rdma_direct,
    .put_inline = sm_put_inline,
    .put_notify_inline = sm_put_notify_inline,
    .get_inline = sm_get_inline,
    .target_resolve = sm_target_resolve,
    .target_write = sm_target_write,
    .flush = sm_flush,
    .progress = sm_progress,
    .dump = sm_dump,
};

/* ---- component ---- */

static int sm_read_params(ferry_ctx_t *ctx, sm_params_t *p)
{
    rt_params_t *r = &ctx->params;
    int rc;
    if ((rc = rt_param_register_size(r, "sm_ring_size", 256 * 1024, 16 * 1024, 1u << 30,
                                     "Bytes of the ring each sender has in each local peer's "
                                     "segment (a power of two)",
                                     &p->ring_size)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "sm_eager_limit", 4096, 64, 1u << 20,
                                     "Largest sm fragment taken from the eager pool (bytes)",
                                     &p->eager_limit)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "sm_max_send_size", 32 * 1024, 256, 256u << 20,
                                     "Largest single sm send (bytes); at most a quarter of "
                                     "FERRY_SM_RING_SIZE",
                                     &p->max_send_size)) != FERRY_OK ||
        (rc = rt_param_register_bool(r, "sm_cma", true,
                                     "Use cross-memory attach (process_vm_readv/writev) for "
                                     "single-copy put and get",
                                     &p->cma)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "sm_cma_threshold", 16 * 1024, 0, 0,
                                     "Put/get of this many bytes or more use cross-memory "
                                     "attach; smaller ones go through the ring (but see "
                                     "FERRY_SM_CMA_LONE)",
                                     &p->cma_threshold)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "sm_cma_lone", 1024, 0, 0,
                                     "A put/get of this many bytes or more to a peer with "
                                     "nothing else in flight uses cross-memory attach, which "
                                     "completes it inside the call (0: only "
                                     "FERRY_SM_CMA_THRESHOLD decides)",
                                     &p->cma_lone)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "sm_cma_assist", SM_CMA_ASSIST_DEFAULT, 0, 0,
                                     "Cross-memory puts and gets of this many bytes or more "
                                     "are copied by both processes at once, in chunks each "
                                     "takes in turn (the target helps while it progresses); "
                                     "0: never",
                                     &p->cma_assist)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "sm_rndv_pipe_max", SM_RNDV_PIPE_MAX_DEFAULT, 0, 0,
                                     "Large messages of up to this many bytes go by the pipe "
                                     "rendezvous (streamed through the ring, a copy at each "
                                     "end) rather than by get (cross-memory attach); 0: never",
                                     &p->rndv_pipe_max)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "sm_msg_eager_max", SM_MSG_EAGER_MAX_DEFAULT, 0, 0,
                                     "Tagged messages of up to this many bytes (with their "
                                     "header) go through the ring, larger ones by rendezvous "
                                     "(a get by cross-memory attach); 0, or without "
                                     "cross-memory attach: the max send size",
                                     &p->msg_eager_max)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "sm_fail_timeout", 500, 10, 600000,
                                    "Milliseconds within which a dead local peer is noticed",
                                    &p->fail_timeout_ms)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "sm_reg_slots", 4096, 16, 1u << 20,
                                     "Memory registrations each process can hold for sm",
                                     &p->reg_slots)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "sm_max_eager_rdma_peers", 8, 1, 1 << 20,
                                    "Peers whose rings are polled on every progress call "
                                    "(the others every eighth)",
                                    &p->max_eager_rdma_peers)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "sm_free_list_num", 16, 1, 1u << 20,
                                     "Descriptors each sm pool allocates at start",
                                     &p->free_list_num)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "sm_free_list_max", 1024, 1, 1u << 20,
                                     "Most descriptors in each sm pool (back pressure beyond)",
                                     &p->free_list_max)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "sm_free_list_inc", 64, 1, 1u << 20,
                                     "Descriptors added when an sm pool runs dry",
                                     &p->free_list_inc)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "sm_get_slots", 16, 1, 4096,
                                     "Gets through the ring each local peer may have "
                                     "outstanding at this process; more wait in its ring",
                                     &p->get_slots)) != FERRY_OK ||
        (rc = rt_param_register_bool(r, "sm_copy_checked", false,
                                     "Make the copies of peers' ring puts and gets on this "
                                     "process's memory with process_vm_readv/writev on itself, "
                                     "so that memory another thread unmaps meanwhile cannot "
                                     "crash it (slower)",
                                     &p->copy_checked)) != FERRY_OK ||
        (rc = rt_param_register_bool(r, "sm_prefetch_write", true,
                                     "Have the ring's next cache line fetched for ownership "
                                     "before the sender writes it (PREFETCHW, where the CPU "
                                     "has it): more small messages a second",
                                     &p->prefetch_write)) != FERRY_OK ||
        (rc = btl_amo_register_params(ctx, &p->atomic_slots)) != FERRY_OK)
        return rc;
    const char *bad = NULL;
    if ((p->ring_size & (p->ring_size - 1)) != 0)
        bad = "FERRY_SM_RING_SIZE must be a power of two";
    else if (p->max_send_size > p->ring_size / 4)
        bad = "FERRY_SM_MAX_SEND_SIZE must be at most a quarter of FERRY_SM_RING_SIZE";
    else if (p->eager_limit > p->max_send_size)
        bad = "FERRY_SM_EAGER_LIMIT must not exceed FERRY_SM_MAX_SEND_SIZE";
    else if (p->free_list_num > p->free_list_max)
        bad = "FERRY_SM_FREE_LIST_NUM must not exceed FERRY_SM_FREE_LIST_MAX";
    if (bad != NULL) {
        rt_log(&ctx->log, RT_LOG_ERROR, "%s (ring %zu, max send %zu, eager %zu)", bad,
               p->ring_size, p->max_send_size, p->eager_limit);
        return FERRY_ERR_INVALID;
    }
    return FERRY_OK;
}

static int sm_register_params(ferry_ctx_t *ctx)
{
    sm_params_t p;
    return sm_read_params(ctx, &p);
}

static size_t page_align(size_t n)
{
    return (n + 4095) & ~(size_t)4095;
}

/* Creates and publishes our segment. */
static int segment_create(sm_module_t *mod)
{
    ferry_ctx_t *ctx = mod->super.ctx;
    size_t nranks = (size_t)mod->nranks;
    size_t chan_stride = page_align(sizeof(sm_chan_t) + mod->p.ring_size);
    size_t reg_off = page_align(sizeof(sm_seg_hdr_t));
    size_t chan_off = reg_off + page_align(mod->p.reg_slots * sizeof(sm_reg_entry_t));
    if (nranks > (SIZE_MAX - chan_off) / chan_stride)
        return FERRY_ERR_NO_MEMORY;
    size_t size = chan_off + nranks * chan_stride;

    mod->self_pid = getpid();
    mod->self_cma = true; /* until the kernel says otherwise */
    /* Leftovers of crashed jobs go before we add ours. */
    sm_sweep(&ctx->log);
    int n = snprintf(mod->seg_name, sizeof(mod->seg_name), "/ferry-%s-%d",
                     rt_modex_job_id(ctx->modex), ctx->rank);
    size_t job_len = strlen("ferry-") + strlen(rt_modex_job_id(ctx->modex));
    int fd = -1;
    int rc = n > 0 && (size_t)n < sizeof(mod->seg_name) ? sm_seg_create_file(mod->seg_name, &fd)
                                                         : FERRY_ERR_INVALID;
    /* The name is taken by a live process (another context of ours, or a
     * job that reuses an id): take the next free one; peers learn it from
     * the modex. */
    for (int alt = 1; rc == FERRY_ERR_BUSY && alt < 64; alt++) {
        n = snprintf(mod->seg_name, sizeof(mod->seg_name), "/ferry-%s-%d.%d",
                     rt_modex_job_id(ctx->modex), ctx->rank, alt);
        rc = n > 0 && (size_t)n < sizeof(mod->seg_name) ? sm_seg_create_file(mod->seg_name, &fd)
                                                        : FERRY_ERR_INVALID;
    }
    if (rc != FERRY_OK) {
        mod->seg_name[0] = '\0';
        rt_log(&ctx->log, RT_LOG_ERROR, "sm: creating the shared segment for job %s: %s",
               rt_modex_job_id(ctx->modex), ferry_strerror(rc));
        return rc;
    }
    mod->seg_fd = fd;
    rt_modex_register_shm(ctx->modex, mod->seg_name); /* gone even if we are killed */
    if (ftruncate(fd, (off_t)size) != 0) {
        int err = errno;
        shm_unlink(mod->seg_name);
        return rt_log_errno(&ctx->log, "sm: sizing the shared segment", err);
    }
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        int err = errno;
        shm_unlink(mod->seg_name);
        return rt_log_errno(&ctx->log, "sm: mapping the shared segment", err);
    }
    mod->seg = base;
    mod->seg_size = size;
    mod->chan_off = chan_off;
    mod->chan_stride = chan_stride;
    mod->hdr = base;
    mod->hdr->rank = ctx->rank;
    mod->hdr->pid = (int32_t)getpid();
    mod->hdr->nchan = (uint32_t)nranks;
    mod->hdr->ring_size = mod->p.ring_size;
    mod->hdr->chan_off = chan_off;
    mod->hdr->chan_stride = chan_stride;
    mod->hdr->reg_off = reg_off;
    mod->hdr->reg_slots = (uint32_t)mod->p.reg_slots;
    mod->hdr->get_slots = (uint32_t)mod->p.get_slots;
    mod->hdr->seg_size = size;
    mod->hdr->job_len = (uint32_t)job_len;
    snprintf(mod->hdr->name, sizeof(mod->hdr->name), "%s", mod->seg_name + 1);
    mod->hdr->version = SM_VERSION;
    /* The magic last: a sweep takes only a finished header for ferry's. */
    atomic_thread_fence(memory_order_release);
    mod->hdr->magic = SM_MAGIC;
    mod->reg_table = (sm_reg_entry_t *)(mod->seg + reg_off);

    sm_addr_t addr = {.seg_size = size, .pid = (int32_t)getpid(), .version = SM_VERSION};
    snprintf(addr.name, sizeof(addr.name), "%s", mod->seg_name);
    return rt_modex_put(ctx->modex, "btl.sm", &addr, sizeof(addr));
}

extern const ferry_btl_component_t btl_sm_component;

/* Whether this CPU has a prefetch for writing. On x86 it is PREFETCHW,
 * which CPUID reports (leaf 0x80000001, ECX bit 8); elsewhere the
 * compiler's write prefetch, or nothing. */
static bool cpu_prefetch_write(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    return __get_cpuid(0x80000001u, &a, &b, &c, &d) && (c & (1u << 8)) != 0;
#else
    return true;
#endif
}

static int sm_init(ferry_btl_module_t *btl, void *arg)
{
    sm_module_t *mod = sm_of(btl);
    const sm_params_t *p = arg;
    mod->seg_fd = -1;
    mod->p = *p;
    mod->hot_peers = (int)p->max_eager_rdma_peers;
    mod->prefetch_write = p->prefetch_write && cpu_prefetch_write();
    mod->cma_ok = p->cma;
    mod->nranks = btl->ctx->size;
    util_list_init(&mod->sending);
    util_list_init(&mod->completed);
    util_list_init(&mod->iputs_done);
    util_pool_params_t pp = {.name = "sm puts and gets without a descriptor",
                             .elem_size = sizeof(sm_iput_t),
                             .increment = 16};
    int rc = util_pool_init(&mod->iops, &pp);
    if (rc != FERRY_OK)
        return rc;
    btl_amo_module_init(&mod->amo, &sm_amo_hooks, p->atomic_slots);
    mod->eps = calloc((size_t)mod->nranks, sizeof(*mod->eps));
    mod->poll = calloc((size_t)mod->nranks, sizeof(*mod->poll));
    mod->regs = calloc(p->reg_slots, sizeof(*mod->regs));
    util_list_init(&mod->local_regs);
    if (mod->eps == NULL || mod->poll == NULL || mod->regs == NULL)
        return FERRY_ERR_NO_MEMORY;
    return FERRY_OK;
}

static int sm_start(ferry_btl_module_t *btl, void *arg)
{
    return segment_create(sm_of(btl));
}

static int sm_open(ferry_ctx_t *ctx, ferry_btl_module_t ***modules_out, int *count_out)
{
    sm_params_t p;
    int rc = sm_read_params(ctx, &p);
    if (rc != FERRY_OK)
        return rc;
    const ferry_btl_attr_t attr = {
        .name = "sm",
        .eager_limit = p.eager_limit,
        .max_send_size = p.max_send_size,
        .rdma_pipeline_frag_size = 4u << 20,
        .min_rdma_size = 0,
        .max_rdma_size = SIZE_MAX,
        .exclusivity = 32768,
        .latency = 200,
        .bandwidth = 10000,
        .flags = FERRY_BTL_FLAG_SEND | FERRY_BTL_FLAG_SEND_INPLACE | FERRY_BTL_FLAG_PUT |
                 FERRY_BTL_FLAG_GET | FERRY_BTL_FLAG_SENDI | FERRY_BTL_FLAG_MEM_ALLOC |
                 FERRY_BTL_FLAG_ATOMIC_OPS | FERRY_BTL_FLAG_ATOMIC_FOPS |
                 /* A put is done inside the call (heap, cross-memory
                  * attach, our own memory) or goes on ep->queue and the
                  * ring ahead of any later send, and the target copies
                  * its chunks out before it handles what follows. */
                 FERRY_BTL_FLAG_PUT_ORDERED |
                 /* Until the system refuses it (sm_cma_refused). */
                 (p.cma ? FERRY_BTL_FLAG_PEERS_READ : 0),
        .reg_handle_size = sizeof(sm_key_t),
        .atomic_flags = BTL_ATOMIC_SUPPORTS_CPU,
        .mem_per_peer = 2 * p.ring_size, /* a ring each way */
        .rndv_pipe_max = p.rndv_pipe_max,
        .msg_eager_max = p.cma ? p.msg_eager_max : 0,
    };
    const btl_frag_params_t fp = {
        .eager_size = p.eager_limit,
        .max_size = p.max_send_size,
        .num = p.free_list_num,
        .max = p.free_list_max,
        .inc = p.free_list_inc,
        .max_frags = p.free_list_max < 256 ? p.free_list_max : 256,
        .reg_limit_hint = "FERRY_SM_REG_SLOTS",
        /* Cross-memory attach and the ring copy from and to addresses. */
        .no_local_reg = true,
    };
    const btl_base_open_args_t args = {
        .component = &btl_sm_component,
        .module_size = sizeof(sm_module_t),
        .attr = &attr,
        .ops = &sm_ops,
        .frags_offset = offsetof(sm_module_t, frags),
        .frag_params = &fp,
        .init = sm_init,
        .start = sm_start,
        .arg = &p,
    };
    return btl_base_open(ctx, &args, modules_out, count_out);
}

const ferry_btl_component_t btl_sm_component = {
    .name = "sm",
    .description = "shared memory between processes of one host",
    .register_params = sm_register_params,
    .open = sm_open,
};
