/*
 * The ofi module: the libfabric objects of one domain and the module's
 * operations.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "btl/ofi/ofi.h"
#include "rt/modex.h"

/* ---- endpoints ---- */

static int ofi_add_procs(ferry_btl_module_t *btl, size_t n, const ferry_btl_proc_t *procs,
                         ferry_btl_endpoint_t **eps_out, struct ferry_bitmap *reachable)
{
    ofi_module_t *mod = ofi_of(btl);
    if (btl == NULL || (n > 0 && (procs == NULL || eps_out == NULL)))
        return FERRY_ERR_INVALID;
    /* Every address into the vector now, so that FI_SOURCE names every
     * rank of the job from its first message (ofi_endpoint.c). */
    int rc = ofi_ep_add(mod, n, procs);
    if (rc != FERRY_OK)
        return rc;
    for (size_t i = 0; i < n; i++) {
        int r = procs[i].rank;
        eps_out[i] = NULL;
        if (r < 0 || r >= mod->nranks)
            continue;
        ferry_btl_endpoint_t *ep = mod->eps[r];
        if (ep == NULL || ep->state == OFI_EP_NEW)
            continue;
        ep->deleted = false;
        eps_out[i] = ep;
        if (reachable != NULL)
            util_bitmap_set(reachable, i);
    }
    return FERRY_OK;
}

/* Endpoints live as long as the module (the address vector keeps their
 * addresses); del_procs completes what is pending, queued or with the
 * provider, and refuses new work. */
static int ofi_del_procs(ferry_btl_module_t *btl, size_t n, ferry_btl_endpoint_t **eps)
{
    ofi_module_t *mod = ofi_of(btl);
    if (btl == NULL || (n > 0 && eps == NULL))
        return FERRY_ERR_INVALID;
    for (size_t i = 0; i < n; i++) {
        ferry_btl_endpoint_t *ep = eps[i];
        if (ep == NULL || ep->mod != mod)
            continue;
        /* The peer may still answer its atomics: dropped when they come. */
        btl_amo_ep_forget(&mod->amo, &ep->amo, FERRY_ERR_UNREACH);
        ofi_ep_fail_pending(mod, ep, FERRY_ERR_UNREACH);
        ep->deleted = true;
    }
    return FERRY_OK;
}

/* ---- descriptors ---- */

/* ---- sending ---- */

static int ofi_send(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                    uint8_t tag)
{
    ofi_module_t *mod = ofi_of(btl);
    int rc = btl_frags_check_send(btl, des, tag);
    if (rc != FERRY_OK)
        return rc;
    rc = ofi_ep_ready(mod, ep);
    if (rc != FERRY_OK)
        return rc;
    btl_frag_t *frag = btl_frag_of(des);
    frag->op = OFI_OP_SEND;
    frag->tag = tag;
    frag->ep = ep;
    des->flags |= FERRY_BTL_DES_INFLIGHT;
    if (ofi_ep_clear(ep)) {
        rc = ofi_post_send(mod, ep, NULL, 0, ferry_btl_seg_ptr(&des->src[0]), des->src[0].len,
                           tag, OFI_T_DATA, 0);
        if (rc == FERRY_OK) {
            /* The bytes were copied: the descriptor is the caller's again
             * once its callback has run, from progress. */
            ofi_complete(mod, frag, FERRY_OK);
            return FERRY_OK;
        }
        if (rc != FERRY_ERR_NO_RESOURCE) {
            des->flags &= ~(uint32_t)FERRY_BTL_DES_INFLIGHT;
            return rc;
        }
    }
    util_list_append(&ep->queue, &frag->link);
    ofi_mark_sending(mod, ep);
    return FERRY_OK;
}

static int ofi_sendi(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *header,
                     size_t header_len, const void *payload, size_t payload_len, uint8_t tag)
{
    ofi_module_t *mod = ofi_of(btl);
    if (btl == NULL || tag >= FERRY_BTL_TAG_BTL_MIN || (header == NULL && header_len > 0) ||
        (payload == NULL && payload_len > 0) || header_len > btl->attr.max_send_size ||
        payload_len > btl->attr.max_send_size - header_len)
        return FERRY_ERR_INVALID;
    int rc = ofi_ep_ready(mod, ep);
    if (rc != FERRY_OK)
        return rc;
    /* Nothing may overtake what is queued, or an answer owed. */
    if (!ofi_ep_clear(ep))
        return FERRY_ERR_NO_RESOURCE;
    return ofi_post_send(mod, ep, header, header_len, payload, payload_len, tag, OFI_T_DATA, 0);
}

/* ---- progress ---- */

/* A put or get leaves the endpoint's count of operations in flight. */
static void ofi_completion_done(btl_frag_t *frag)
{
    if (frag->op != OFI_OP_SEND && frag->ep != NULL)
        frag->ep->rdma_inflight--;
}

static int run_completions(ofi_module_t *mod)
{
    return btl_frags_run_completions(&mod->frags, &mod->completed, ofi_completion_done);
}

static int ofi_progress(ferry_btl_module_t *btl)
{
    ofi_module_t *mod = ofi_of(btl);
    int n = ofi_poll_cq(mod);
    if (n < 0)
        return n;
    if (!util_list_empty(&mod->acking))
        n += ofi_send_acks(mod);
    if (!util_list_empty(&mod->sending)) {
        util_list_item_t *it = util_list_first(&mod->sending);
        while (it != NULL) {
            ferry_btl_endpoint_t *ep =
                UTIL_CONTAINER_OF(it, ferry_btl_endpoint_t, sending_link);
            it = util_list_next(&mod->sending, it);
            n += ofi_drain_queue(mod, ep);
            if (ofi_ep_clear(ep))
                n += ofi_amo_send_owed(mod, ep);
            if (ofi_ep_clear(ep) && !btl_amo_owes(&ep->amo)) {
                util_list_remove(&mod->sending, &ep->sending_link);
                ep->sending = false;
            }
        }
    }
    n += ofi_live_check(mod, rt_now_coarse_ns());
    if (!util_list_empty(&mod->completed))
        n += run_completions(mod);
    n += btl_amo_progress(btl, &mod->amo);
    if (!util_list_empty(&mod->putn_done))
        n += ofi_putn_progress(mod);
    n += btl_base_progress_reports(&mod->super);
    return n;
}

static int ofi_flush(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep)
{
    ofi_module_t *mod = ofi_of(btl);
    if (btl == NULL || (ep != NULL && ep->mod != mod))
        return FERRY_ERR_INVALID;
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *e = mod->eps[r];
        if (e == NULL || (ep != NULL && e != ep))
            continue;
        /* Bounded: every put, get, tracked put with notification and
         * atomic completes by its deadline (FERRY_OFI_REQUEST_TIMEOUT),
         * earlier when its peer fails. */
        int rc = btl_base_wait_inflight(btl, &e->rdma_inflight);
        if (rc == FERRY_OK)
            rc = btl_base_wait_inflight(btl, &e->amo.ninflight);
        if (rc == FERRY_OK)
            rc = btl_base_wait_inflight(btl, &e->putn.ninflight);
        if (rc != FERRY_OK)
            return rc;
    }
    return FERRY_OK;
}

static void ofi_dump(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, int verbose)
{
    ofi_module_t *mod = ofi_of(btl);
    rt_log(&btl->ctx->log, RT_LOG_ERROR,
           "ofi: provider %s domain %s: tx slots free %zu of %zu, rx buffers posted %zu, "
           "messages refused %lu",
           mod->my_addr.prov, mod->info != NULL ? mod->info->domain_attr->name : "?",
           mod->tx_nfree, mod->p.tx_slots, mod->rx_posted, mod->refused);
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *e = mod->eps[r];
        if (e == NULL || (ep != NULL && e != ep))
            continue;
        rt_log(&btl->ctx->log, RT_LOG_ERROR,
               "ofi: rank %d state %d queued %zu rdma %zu; sent %u acked %u, delivered %u "
               "held %u (%zu bytes)%s",
               r, (int)e->state, util_list_len(&e->queue), e->rdma_inflight, e->wire.tx_next,
               e->wire.tx_acked, e->wire.rx_next, e->wire.nheld, e->wire.held_bytes,
               e->local ? (e->pidfd >= 0 ? ", watched by pidfd" : ", watched by pid") : "");
    }
}

/* Tells every peer we talked to, and every peer on this host (which
 * watches our process), that we are leaving, so that its later sends
 * failing, or our exit, is no surprise; best effort and bounded in time,
 * as a peer may be gone or slow. */
static void announce_close(ofi_module_t *mod)
{
    if (mod->ep == NULL || mod->eps == NULL || mod->tx_ctx == NULL)
        return;
    uint64_t end = rt_now_coarse_ns() + 1000000000ull;
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *ep = mod->eps[r];
        if (ep == NULL || ep->state != OFI_EP_READY || r == mod->super.ctx->rank ||
            !(ep->used || ep->local))
            continue;
        /* Progress in between frees slots and window; never a wait past
         * the bound. */
        for (;;) {
            int rc = ofi_post_send(mod, ep, NULL, 0, NULL, 0, 0, OFI_T_CLOSE, 0);
            if (rc != FERRY_ERR_NO_RESOURCE || rt_now_coarse_ns() > end)
                break;
            ofi_poll_cq(mod);
        }
    }
    /* Let reliable providers that progress in software push the messages
     * out before the endpoint closes. */
    while (mod->tx_nfree < mod->p.tx_slots && rt_now_coarse_ns() <= end)
        ofi_poll_cq(mod);
    for (int i = 0; i < 64; i++)
        ofi_poll_cq(mod);
}

static void close_fid(ofi_module_t *mod, struct fid *fid, const char *what)
{
    if (fid == NULL)
        return;
    ofi_call_enter(mod);
    int rc = fi_close(fid);
    ofi_call_leave(mod);
    if (rc != 0)
        ofi_log_error(mod, what, rc);
}

static int ofi_finalize(ferry_btl_module_t *btl)
{
    ofi_module_t *mod = ofi_of(btl);
    if (mod == NULL)
        return FERRY_OK;
    mod->closing = true;
    announce_close(mod);
    if (mod->eps != NULL) {
        for (int r = 0; r < mod->nranks; r++) {
            if (mod->eps[r] != NULL)
                ofi_ep_fail_pending(mod, mod->eps[r], FERRY_ERR_CANCELED);
        }
    }
    /* Callbacks for what was failed above. */
    run_completions(mod);
    if (mod->putn_reqs_ready)
        ofi_putn_progress(mod);
    /* The endpoint goes first: it holds the receive buffers and any
     * registration bound to it. */
    close_fid(mod, mod->ep != NULL ? &mod->ep->fid : NULL, "closing the endpoint");
    mod->ep = NULL;
    /* What the closed endpoint will never complete. */
    while (mod->rma_ctxs_ready && !util_list_empty(&mod->rma_posted))
        ofi_rdma_done(mod, UTIL_CONTAINER_OF(util_list_first(&mod->rma_posted), ofi_opctx_t, link),
                      FERRY_ERR_CANCELED);
    run_completions(mod);
    btl_amo_module_fini(btl, &mod->amo);
    /* The pools first: their registration cache deregisters through us. */
    int rc = btl_frags_fini(&mod->frags);
    ofi_rx_fini(mod);
    ofi_tx_fini(mod);
    ofi_mr_release_all(mod);
    close_fid(mod, mod->av != NULL ? &mod->av->fid : NULL, "closing the address vector");
    /* After the vector that names it (reserve_addr0). */
    close_fid(mod, mod->addr0_ep != NULL ? &mod->addr0_ep->fid : NULL,
              "closing the endpoint of fi_addr 0");
    close_fid(mod, mod->addr0_av != NULL ? &mod->addr0_av->fid : NULL,
              "closing the address vector of fi_addr 0's endpoint");
    close_fid(mod, mod->addr0_cq != NULL ? &mod->addr0_cq->fid : NULL,
              "closing the completion queue of fi_addr 0's endpoint");
    close_fid(mod, mod->cq != NULL ? &mod->cq->fid : NULL, "closing the completion queue");
    close_fid(mod, mod->domain != NULL ? &mod->domain->fid : NULL, "closing the domain");
    close_fid(mod, mod->fabric != NULL ? &mod->fabric->fid : NULL, "closing the fabric");
    if (mod->rma_ctxs_ready && util_pool_fini(&mod->rma_ctxs) > 0 && rc == FERRY_OK)
        rc = FERRY_ERR_BUSY;
    if (mod->putn_reqs_ready && util_pool_fini(&mod->putn_reqs) > 0 && rc == FERRY_OK)
        rc = FERRY_ERR_BUSY;
    if (mod->eps != NULL)
        for (int r = 0; r < mod->nranks; r++) {
            if (mod->eps[r] != NULL)
                btl_amo_ep_fini(&mod->amo, &mod->eps[r]->amo);
            ofi_ep_free(mod->eps[r]);
        }
    free(mod->eps);
    free(mod->rank_of);
    free(mod->pfds);
    free(mod->pfd_rank);
    unsigned long held = rt_ratelimit_take(&mod->rl_stranger) + rt_ratelimit_take(&mod->rl_peer);
    if (held > 0)
        rt_log(&btl->ctx->log, RT_LOG_WARN,
               "ofi: %lu more complaints about refused messages were not printed", held);
    free(mod->regs);
    ofi_wedge_fini(mod);
    if (mod->info != NULL)
        fi_freeinfo(mod->info);
    btl_base_reports_fini(&mod->super);
    free(mod);
    return rc;
}

static const ferry_btl_ops_t ofi_ops = {
    .add_procs = ofi_add_procs,
    .del_procs = ofi_del_procs,
    .register_am = btl_base_register_am,
    .register_error = btl_base_register_error,
    .finalize = ofi_finalize,
    .alloc = btl_frags_op_alloc,
    .free = btl_frags_op_free,
    .prepare_src = btl_frags_op_prepare_src,
    .prepare_dst = btl_frags_op_prepare_dst,
    .send = ofi_send,
    .sendi = ofi_sendi,
    .put = ofi_put,
    .get = ofi_get,
    .target_resolve = ofi_target_resolve,
    .register_mem = ofi_register_mem,
    .deregister_mem = ofi_deregister_mem,
    .mem_alloc = btl_base_unsupported_mem_alloc,
    .mem_free = btl_base_unsupported_mem_free,
    .atomic_op = ofi_atomic_op,
    .atomic_fop = ofi_atomic_fop,
    .atomic_cswap = ofi_atomic_cswap,
    .put_notify_inline = ofi_put_notify_inline,
    .flush = ofi_flush,
    .progress = ofi_progress,
    .dump = ofi_dump,
};

/* ---- opening ---- */

/* Does the provider refuse an access through a released registration's key
 * with an error completion, and nothing worse? The rule (README.md,
 * Limits): software providers do not. shm (1.17) checks no key on its
 * cross-memory-attach path and writes into the released memory; tcp (and
 * ofi_rxm over it) checks the key but answers a bad one by closing the
 * connection, which loses what else was in flight to that peer and fails
 * it; sockets, udp, net and ofi_rxd are taken to be alike. Native providers
 * check keys in hardware and report a bad one as an error completion, which
 * becomes FERRY_ERR_ACCESS with the peer kept. NULL when the provider
 * refuses revoked keys; otherwise why not, for the log. */
static const char *revoked_key_gap(const char *prov)
{
    if (strcmp(prov, "shm") == 0)
        return "its cross-memory-attach path checks no key, so the access writes or reads "
               "the released memory";
    if (strstr(prov, "tcp") != NULL)
        return "it answers an unknown key by closing the connection, which fails the peer";
    static const char *const soft[] = {"sockets", "udp", "net", "ofi_rxd"};
    for (size_t i = 0; i < sizeof(soft) / sizeof(soft[0]); i++)
        if (strstr(prov, soft[i]) != NULL)
            return "a software provider, not known to refuse released keys without failing "
                   "the peer";
    return NULL;
}

/* Software providers (tcp, shm, sockets, udp) lose to ferry's own sm and
 * tcp transports where those reach; native fabrics win over tcp. */
static uint32_t default_exclusivity(const char *prov)
{
    static const char *const soft[] = {"tcp", "shm", "sockets", "udp", "net"};
    for (size_t i = 0; i < sizeof(soft) / sizeof(soft[0]); i++)
        if (strstr(prov, soft[i]) != NULL)
            return 512;
    return 16384;
}

/* shm (libfabric 1.17) reports a message from an address that is not in
 * the vector with fi_addr 0, not FI_ADDR_NOTAVAIL (its map entries made by a
 * stranger's connection request never get an fi_addr): whichever rank held
 * fi_addr 0 would be named the sender of every stranger's message. So
 * fi_addr 0 goes to an address nobody else can hold: that of a second
 * endpoint of ours, on small queues, opened for the purpose and kept open
 * until finalize (shm takes the region of an endpoint of the same process
 * straight from that endpoint, so it must outlive the address vector:
 * closed first, it leaves the vector pointing at freed memory). It never
 * sends, and what is sent to it is never read. */
static int reserve_addr0(ofi_module_t *mod)
{
    struct fi_info *info = fi_dupinfo(mod->info);
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT, .size = 16};
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = 1};
    unsigned char name[OFI_ADDR_MAX];
    size_t len = sizeof(name);
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    int rc;
    if (info == NULL)
        return FERRY_ERR_NO_MEMORY;
    info->tx_attr->size = 16;
    info->rx_attr->size = 16;
    if ((rc = fi_cq_open(mod->domain, &cq_attr, &mod->addr0_cq, NULL)) != 0 ||
        (rc = fi_av_open(mod->domain, &av_attr, &mod->addr0_av, NULL)) != 0 ||
        (rc = fi_endpoint(mod->domain, info, &mod->addr0_ep, NULL)) != 0 ||
        (rc = fi_ep_bind(mod->addr0_ep, &mod->addr0_cq->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
        (rc = fi_ep_bind(mod->addr0_ep, &mod->addr0_av->fid, 0)) != 0 ||
        (rc = fi_enable(mod->addr0_ep)) != 0 ||
        (rc = fi_getname(&mod->addr0_ep->fid, name, &len)) != 0) {
        rc = ofi_log_error(mod, "opening the endpoint that holds fi_addr 0", rc);
    } else if (fi_av_insert(mod->av, name, 1, &fa, 0, NULL) != 1 || fa != 0) {
        rt_log(&mod->super.ctx->log, RT_LOG_ERROR,
               "ofi (%s): fi_addr 0 could not be reserved (got %llu); strangers could not be "
               "told from the rank at fi_addr 0, so the transport is not used",
               mod->my_addr.prov, (unsigned long long)fa);
        rc = FERRY_ERR_NOT_SUPPORTED;
    } else {
        rc = FERRY_OK;
    }
    fi_freeinfo(info);
    return rc;
}

static int open_fabric(ofi_module_t *mod)
{
    struct fi_info *info = mod->info;
    int rc;
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_NONE};
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    size_t len = sizeof(mod->my_addr.addr);

    if ((rc = fi_fabric(info->fabric_attr, &mod->fabric, NULL)) != 0)
        return ofi_log_error(mod, "fi_fabric", rc);
    if ((rc = fi_domain(mod->fabric, info, &mod->domain, NULL)) != 0)
        return ofi_log_error(mod, "fi_domain", rc);
    cq_attr.size = mod->p.tx_slots + mod->p.rx_slots + 256;
    if ((rc = fi_cq_open(mod->domain, &cq_attr, &mod->cq, NULL)) != 0)
        return ofi_log_error(mod, "fi_cq_open", rc);
    av_attr.count = mod->rank_of_len;
    if ((rc = fi_av_open(mod->domain, &av_attr, &mod->av, NULL)) != 0)
        return ofi_log_error(mod, "fi_av_open", rc);
    if (mod->reserve_addr0 && (rc = reserve_addr0(mod)) != FERRY_OK)
        return rc;
    if ((rc = fi_endpoint(mod->domain, info, &mod->ep, NULL)) != 0)
        return ofi_log_error(mod, "fi_endpoint", rc);
    if ((rc = fi_ep_bind(mod->ep, &mod->cq->fid, FI_TRANSMIT | FI_RECV)) != 0)
        return ofi_log_error(mod, "fi_ep_bind (completion queue)", rc);
    if ((rc = fi_ep_bind(mod->ep, &mod->av->fid, 0)) != 0)
        return ofi_log_error(mod, "fi_ep_bind (address vector)", rc);
    if ((rc = fi_enable(mod->ep)) != 0)
        return ofi_log_error(mod, "fi_enable", rc);
    /* After fi_enable: shm (1.17) keeps the option in its receive context,
     * which exists only once the endpoint is enabled. */
    if (mod->use_multi_recv) {
        size_t min = mod->p.max_send_size + sizeof(ofi_hdr_t);
        if ((rc = fi_setopt(&mod->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min,
                            sizeof(min))) != 0)
            return ofi_log_error(mod, "setting FI_OPT_MIN_MULTI_RECV", rc);
    }
    if ((rc = fi_getname(&mod->ep->fid, mod->my_addr.addr, &len)) != 0)
        return ofi_log_error(mod, "fi_getname", rc);
    mod->my_addr.addrlen = (uint32_t)len;
    return FERRY_OK;
}

extern const ferry_btl_component_t btl_ofi_component;

/* What ofi_module_open hands to the skeleton's steps. */
typedef struct ofi_open_arg {
    const ofi_params_t *p;
    struct fi_info *info;
    int index;
    const char *key_gap;
} ofi_open_arg_t;

static int ofi_init(ferry_btl_module_t *btl, void *argp)
{
    ofi_module_t *mod = ofi_of(btl);
    const ofi_open_arg_t *arg = argp;
    const ofi_params_t *p = arg->p;
    ferry_ctx_t *ctx = btl->ctx;
    const char *prov = arg->info->fabric_attr->prov_name;
    mod->p = *p;
    ofi_wedge_init(mod);
    mod->index = arg->index;
    mod->nranks = ctx->size;
    mod->window = (uint32_t)p->window;
    util_list_init(&mod->sending);
    util_list_init(&mod->acking);
    util_list_init(&mod->completed);
    util_list_init(&mod->putn_done);
    btl_amo_module_init(&mod->amo, &ofi_amo_hooks, mod->p.atomic_slots);
    mod->amo.timeout_ns = ofi_timeout_ns(mod);
    util_list_init(&mod->rma_posted);
    rt_ratelimit_init(&mod->rl_stranger, RT_RATELIMIT_BURST, RT_RATELIMIT_INTERVAL_MS);
    rt_ratelimit_init(&mod->rl_peer, RT_RATELIMIT_BURST, RT_RATELIMIT_INTERVAL_MS);
    if (arg->index == 0)
        snprintf(mod->modex_key, sizeof(mod->modex_key), "btl.ofi");
    else
        snprintf(mod->modex_key, sizeof(mod->modex_key), "btl.ofi.%d", arg->index);
    mod->info = fi_dupinfo(arg->info);
    mod->eps = calloc((size_t)ctx->size, sizeof(*mod->eps));
    /* FI_AV_TABLE hands out fi_addr 0, 1, ... in insertion order; over shm
     * the first is no rank's (reserve_addr0). */
    mod->reserve_addr0 = strcmp(prov, "shm") == 0;
    mod->rank_of_len = (size_t)ctx->size + (mod->reserve_addr0 ? 1 : 0);
    mod->rank_of = malloc(mod->rank_of_len * sizeof(*mod->rank_of));
    if (mod->info == NULL || mod->eps == NULL || mod->rank_of == NULL)
        return FERRY_ERR_NO_MEMORY;
    for (size_t i = 0; i < mod->rank_of_len; i++)
        mod->rank_of[i] = -1;
    mod->mr_mode = (uint64_t)mod->info->domain_attr->mr_mode;
    mod->mr_key_size = mod->info->domain_attr->mr_key_size;
    mod->source_err = (mod->info->caps & FI_SOURCE_ERR) != 0;
    /* FI_MR_LOCAL named in FERRY_OFI_MR_MODE is honoured even where the
     * provider does not demand it, so that path can be tested anywhere. */
    const rt_param_t *mrp = rt_param_find(&ctx->params, "ofi_mr_mode");
    if (mrp != NULL && mrp->from_env && strstr(p->mr_mode, "local") != NULL)
        mod->mr_mode |= FI_MR_LOCAL;
    mod->inject_size = mod->info->tx_attr->inject_size;
    /* Puts ask for FI_DELIVERY_COMPLETE (ofi_rdma.c), but over shm, whose
     * writes are placed before they complete. */
    mod->put_flags = FI_COMPLETION | (strcmp(prov, "shm") == 0 ? 0 : FI_DELIVERY_COMPLETE);
    /* A send not ordered after a write, and 32 bits of completion data to
     * number the write: large puts with notification split (ofi_wire.h). */
    mod->putn_split = p->putn_split && !(btl->attr.flags & FERRY_BTL_FLAG_PUT_ORDERED) &&
                      mod->info->domain_attr->cq_data_size >= 4;
    /* ofi_rxm (1.17) hands a multi-receive buffer back before a large
     * (rendezvous) message placed in it has completed, so a reposted
     * buffer could be overwritten under it: one buffer per message there. */
    mod->use_multi_recv = p->multi_recv && (mod->info->caps & FI_MULTI_RECV) != 0 &&
                          strstr(prov, "ofi_rxm") == NULL;
    mod->my_addr.version = OFI_ADDR_VERSION;
    snprintf(mod->my_addr.prov, sizeof(mod->my_addr.prov), "%s", prov);
    ofi_proc_id_self(&mod->my_addr.proc);
    return FERRY_OK;
}

static int ofi_start(ferry_btl_module_t *btl, void *argp)
{
    ofi_module_t *mod = ofi_of(btl);
    const ofi_open_arg_t *arg = argp;
    ferry_ctx_t *ctx = btl->ctx;
    const char *prov = arg->info->fabric_attr->prov_name;
    const util_pool_params_t cp = {
        .name = "ofi rma contexts",
        .elem_size = sizeof(ofi_opctx_t),
        .align = 64,
        .initial = 16,
        .max = 0,
        .increment = 64,
    };
    const util_pool_params_t pp = {
        .name = "ofi puts with notification",
        .elem_size = sizeof(ofi_putn_req_t),
        .initial = 16,
        .max = 0,
        .increment = 64,
    };
    int rc = util_pool_init(&mod->rma_ctxs, &cp);
    if (rc != FERRY_OK)
        return rc;
    mod->rma_ctxs_ready = true;
    if ((rc = util_pool_init(&mod->putn_reqs, &pp)) != FERRY_OK)
        return rc;
    mod->putn_reqs_ready = true;
    if ((rc = open_fabric(mod)) != FERRY_OK || (rc = ofi_tx_init(mod)) != FERRY_OK ||
        (rc = ofi_rx_init(mod)) != FERRY_OK || (rc = ofi_rx_post_all(mod)) != FERRY_OK)
        return rc;
    rc = rt_modex_put(ctx->modex, mod->modex_key, &mod->my_addr, sizeof(mod->my_addr));
    if (rc != FERRY_OK)
        return rc;
    rt_log(&ctx->log, RT_LOG_DEBUG,
           "ofi: module %d: provider %s, domain %s, mr_mode 0x%llx (keys of %zu bytes), "
           "inject %zu, %s receives, senders named by FI_SOURCE%s, sends %s writes",
           arg->index, prov, mod->info->domain_attr->name, (unsigned long long)mod->mr_mode,
           mod->mr_key_size, mod->inject_size, mod->use_multi_recv ? "multi" : "single",
           mod->source_err ? " and FI_SOURCE_ERR" : "",
           (mod->super.attr.flags & FERRY_BTL_FLAG_PUT_ORDERED) ? "ordered after"
                                                                : "not ordered with");
    if (arg->key_gap != NULL)
        rt_log(&ctx->log, RT_LOG_INFO,
               "ofi: provider %s does not enforce revoked memory keys (%s); "
               "FERRY_BTL_FLAG_NO_KEY_REVOKE set", prov, arg->key_gap);
    return FERRY_OK;
}

int ofi_module_open(ferry_ctx_t *ctx, const ofi_params_t *p, struct fi_info *info, int index,
                    ferry_btl_module_t **btl_out)
{
    const char *prov = info->fabric_attr->prov_name;
    size_t max_msg = info->ep_attr->max_msg_size;
    size_t max_rdma = max_msg < ((size_t)1 << 30) ? max_msg : ((size_t)1 << 30);
    bool native = default_exclusivity(prov) > 512;
    const char *key_gap = revoked_key_gap(prov);
    /* The provider performs a send after the writes posted before it on the
     * endpoint (FI_ORDER_SAW both ways; tcp;ofi_rxm does, shm does not):
     * ep->queue keeps ferry's own order of puts and sends, so a message
     * sent after an accepted put is handled after its data is in place. */
    bool put_ordered = (info->tx_attr->msg_order & FI_ORDER_SAW) &&
                       (info->rx_attr->msg_order & FI_ORDER_SAW);
    const ferry_btl_attr_t attr = {
        .name = "ofi",
        .eager_limit = p->eager_limit,
        .max_send_size = p->max_send_size,
        .rdma_pipeline_frag_size = 1u << 20,
        .min_rdma_size = 0,
        .max_rdma_size = max_rdma,
        .exclusivity = p->exclusivity >= 0 ? (uint32_t)p->exclusivity
                                           : default_exclusivity(prov),
        .latency = native ? 2000 : 20000,
        .bandwidth = native ? 10000 : 1000,
        .flags = FERRY_BTL_FLAG_SEND | FERRY_BTL_FLAG_SEND_INPLACE | FERRY_BTL_FLAG_PUT |
                 FERRY_BTL_FLAG_GET | FERRY_BTL_FLAG_SENDI |
                 (key_gap != NULL ? FERRY_BTL_FLAG_NO_KEY_REVOKE : 0u) |
                 FERRY_BTL_FLAG_ATOMIC_OPS | FERRY_BTL_FLAG_ATOMIC_FOPS |
                 (put_ordered ? FERRY_BTL_FLAG_PUT_ORDERED : 0u),
        .reg_handle_size = sizeof(ofi_key_t),
        .atomic_flags = BTL_ATOMIC_SUPPORTS_CPU,
        .mem_per_peer = 64, /* an address vector entry and an endpoint */
    };
    const btl_frag_params_t fp = {
        .eager_size = p->eager_limit,
        .max_size = p->max_send_size,
        .num = p->free_list_num,
        .max = p->free_list_max,
        .inc = p->free_list_inc,
        .max_frags = p->free_list_max < 256 ? p->free_list_max : 256,
    };
    ofi_open_arg_t arg = {.p = p, .info = info, .index = index, .key_gap = key_gap};
    const btl_base_open_args_t args = {
        .component = &btl_ofi_component,
        .module_size = sizeof(ofi_module_t),
        .attr = &attr,
        .ops = &ofi_ops,
        .frags_offset = offsetof(ofi_module_t, frags),
        .frag_params = &fp,
        .init = ofi_init,
        .start = ofi_start,
        .arg = &arg,
    };
    return btl_base_module_create(ctx, &args, btl_out);
}
