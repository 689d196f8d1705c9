/*
 * One-sided operations through unpacked key handles, with requests: remote
 * key handles, ferry_put_nb / ferry_get_nb, the atomics, put with
 * notification, requests (test, wait), and the flushes that also cover
 * active messages (markers on the ordered path, answered by the target).
 *
 * Requests and key handles are objects the application holds pointers to.
 * Their memory is recycled late (api_recycler_t) so that a stale pointer
 * meets a cleared magic and is refused rather than read as freed memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/am_large.h"
#include "api/api.h"
#include "api/rkey.h"
#include "bml/bml.h"
#include "btl/base.h"
#include "btl/base_atomic.h"
#include "util/zalloc.h"

#define API_REQ_MAGIC 0x51455246u  /* "FREQ" */
#define API_RKEY_H_MAGIC 0x484b5246u /* "FRKH" */
#define API_FLUSH_MAGIC 0x48534c46u /* "FLSH" */

enum { FLUSH_MARK = 1, FLUSH_ANSWER = 2 };

/* A flush marker or its answer, as it travels. */
typedef struct api_flush_msg {
    uint32_t magic;
    uint32_t kind;
    uint64_t seq;
} api_flush_msg_t;

/* ---- the recycler ---- */

/* The links every recycled object starts with. */
typedef struct api_obj {
    util_list_item_t all;
    util_list_item_t released;
} api_obj_t;

static void recycler_init(api_recycler_t *rc, size_t size)
{
    util_list_init(&rc->released);
    util_list_init(&rc->all);
    rc->size = size;
}

/* A zeroed object: a new one, or the oldest released once more than
 * API_RECYCLE_DELAY wait. NULL when out of memory. */
static void *recycler_get(api_recycler_t *rc)
{
    api_obj_t *o;
    if (util_list_len(&rc->released) > API_RECYCLE_DELAY) {
        o = UTIL_CONTAINER_OF(util_list_pop_front(&rc->released), api_obj_t, released);
        memset((char *)o + sizeof(*o), 0, rc->size - sizeof(*o));
        return o;
    }
    o = calloc(1, rc->size);
    if (o == NULL)
        return NULL;
    util_list_append(&rc->all, &o->all);
    return o;
}

/* The caller has cleared the object's magic. */
static void recycler_put(api_recycler_t *rc, void *obj)
{
    api_obj_t *o = obj;
    util_list_append(&rc->released, &o->released);
}

static void recycler_fini(api_recycler_t *rc)
{
    util_list_item_t *it;
    if (rc->size == 0)
        return;
    while ((it = util_list_pop_front(&rc->all)) != NULL)
        free(UTIL_CONTAINER_OF(it, api_obj_t, all));
    util_list_init(&rc->released);
}

/* ---- requests ---- */

enum { REQ_OP = 0, REQ_FLUSH = 1 };

struct ferry_req {
    api_obj_t obj;
    uint32_t magic;
    ferry_ctx_t *ctx;
    util_list_item_t link; /* in req_due, or (flush) in flushes */
    int kind;
    int status;
    bool done;
    bool held;       /* the application has it (req_out), not yet tested done */
    bool cb_pending; /* cb due or running */
    ferry_comp_cb_t cb;
    void *arg;
    /* REQ_FLUSH: ranks lo .. hi - 1; marked once nothing was in flight to
     * them, then the marker each waits for the answer to (0: none). */
    int lo, hi;
    bool marked;
    uint64_t *marks;
};

static void req_free(ferry_ctx_t *ctx, ferry_req_t *req)
{
    free(req->marks);
    req->marks = NULL;
    req->magic = 0;
    recycler_put(&ctx->api->reqs, req);
}

/* A request for an operation with callback cb (may be NULL), held by the
 * application when held. NULL when out of memory. */
static ferry_req_t *req_new(ferry_ctx_t *ctx, ferry_comp_cb_t cb, void *arg, bool held)
{
    ferry_req_t *req = recycler_get(&ctx->api->reqs);
    if (req == NULL)
        return NULL;
    req->magic = API_REQ_MAGIC;
    req->ctx = ctx;
    req->status = FERRY_OK;
    req->cb = cb;
    req->arg = cb != NULL ? arg : NULL;
    req->held = held;
    return req;
}

static void req_maybe_free(ferry_ctx_t *ctx, ferry_req_t *req)
{
    if (req->done && !req->held && !req->cb_pending)
        req_free(ctx, req);
}

void api_req_complete(ferry_ctx_t *ctx, ferry_req_t *req, int status)
{
    req->done = true;
    req->status = status;
    if (req->cb != NULL) {
        req->cb_pending = true;
        util_list_append(&ctx->api->req_due, &req->link);
        return;
    }
    req_maybe_free(ctx, req);
}

/* The request an operation needs for p (NULL: none needed, *rc_out
 * FERRY_OK; or out of memory, *rc_out set). */
static inline ferry_req_t *req_for(ferry_ctx_t *ctx, const ferry_op_params_t *p, int *rc_out)
{
    *rc_out = FERRY_OK;
    if (p == NULL || (p->cb == NULL && p->req_out == NULL))
        return NULL;
    ferry_req_t *req = req_new(ctx, p->cb, p->arg, p->req_out != NULL);
    if (req == NULL)
        *rc_out = FERRY_ERR_NO_MEMORY;
    return req;
}

/* An operation was accepted, req its request (or NULL): tells the caller. */
static int req_started(const ferry_op_params_t *p, ferry_req_t *req)
{
    if (p != NULL && p->req_out != NULL)
        *p->req_out = req;
    return FERRY_OK;
}

/* A direct path's answer (rdma_direct, atomic_direct) for an operation
 * nobody is called back for: done inside the call (FERRY_OK, no request),
 * a refusal, or FERRY_ERR_NOT_SUPPORTED, declined, which *no keeps so that
 * the key is not asked again. */
static inline int direct_answer(const ferry_op_params_t *p, int rc, bool *no)
{
    if (rc == FERRY_BTL_DONE)
        return req_started(p, NULL);
    if (rc == FERRY_ERR_NOT_SUPPORTED)
        *no = true;
    return rc;
}

/* The operation completed inside the call with FERRY_OK. */
static int req_done_now(ferry_ctx_t *ctx, const ferry_op_params_t *p, ferry_req_t *req)
{
    if (req != NULL) {
        req->held = false;
        api_req_complete(ctx, req, FERRY_OK);
    }
    if (p != NULL && p->req_out != NULL)
        *p->req_out = NULL;
    return FERRY_OK;
}

/* Nothing started: the request goes back. */
static int req_abandon(ferry_ctx_t *ctx, ferry_req_t *req, int rc)
{
    if (req != NULL)
        req_free(ctx, req);
    return rc;
}

static bool req_valid(const ferry_ctx_t *ctx, const ferry_req_t *req)
{
    if (req == NULL || req->magic != API_REQ_MAGIC || req->ctx != ctx || !req->held) {
        if (req != NULL)
            rt_log(&ctx->log, RT_LOG_ERROR,
                   "a request (%p) that is not a live request of this context was passed: "
                   "used after it was done?",
                   (const void *)req);
        return false;
    }
    return true;
}

int ferry_req_test(ferry_ctx_t *ctx, ferry_req_t *req, int *status_out)
{
    if (!api_ctx_live(ctx) || ctx->api == NULL || !req_valid(ctx, req))
        return FERRY_ERR_INVALID;
    if (!req->done && ctx->in_callback == 0) {
        int rc = ferry_progress(ctx);
        if (rc < 0)
            return rc;
    }
    if (!req->done)
        return 0;
    if (status_out != NULL)
        *status_out = req->status;
    req->held = false;
    req_maybe_free(ctx, req);
    return 1;
}

int ferry_req_wait(ferry_ctx_t *ctx, ferry_req_t *req)
{
    if (!api_ctx_live(ctx) || ctx->api == NULL || !req_valid(ctx, req))
        return FERRY_ERR_INVALID;
    if (ctx->in_callback > 0)
        return FERRY_ERR_BUSY;
    unsigned idle = 0;
    while (!req->done) {
        int rc = ferry_progress(ctx);
        if (rc < 0)
            return rc;
        if (rc == 0)
            rt_idle(&idle);
        else
            idle = 0;
    }
    int status = req->status;
    req->held = false;
    req_maybe_free(ctx, req);
    return status;
}

/* ---- key handles ---- */

struct ferry_rkey_handle {
    api_obj_t obj;
    uint32_t magic;
    ferry_ctx_t *ctx;
    int dst;
    int module;
    uint32_t access;
    uint64_t base;
    uint64_t len;
    uint8_t key[FERRY_BTL_KEY_MAX];
    /* The key as unpacked: another rail's key is found in it when the
     * peer's traffic moves over (src/bml), and multi-rail operations take
     * it along. */
    ferry_rkey_t raw;
    /* The module's rdma_direct declined this key (taken as final, btl.h):
     * puts and gets take the ordinary path without asking again. */
    bool direct_no;
    /* The module's atomic_direct declined this key: atomics take the
     * ordinary path without asking again. */
    bool amo_direct_no;
    /* Data and payload bytes a put with notification through the module
     * carries inside its one message (putn_inline; 0: none): what the
     * module's largest message leaves beside the header and the key. */
    uint32_t putn_room;
};

/* rh's module is settled (unpack, or a move to another rail): what follows
 * from it alone. */
static void rh_module_set(ferry_ctx_t *ctx, ferry_rkey_h *rh, int m)
{
    const ferry_btl_module_t *btl = ctx->modules[m];
    size_t over = sizeof(api_putn_hdr_t) + btl->attr.reg_handle_size;
    size_t room = 0;
    if (btl->ops->target_resolve != NULL && btl->attr.reg_handle_size <= FERRY_BTL_KEY_MAX &&
        btl->attr.max_send_size > over)
        room = btl->attr.max_send_size - over;
    rh->module = m;
    rh->direct_no = false;
    rh->amo_direct_no = btl->ops->atomic_direct == NULL;
    rh->putn_room = (uint32_t)(room < API_PUTN_INLINE_MAX ? room : API_PUTN_INLINE_MAX);
}

int ferry_rkey_unpack(ferry_ctx_t *ctx, int dst, const ferry_rkey_t *rkey, ferry_rkey_h **rh_out)
{
    int rc;
    if (rkey == NULL || rh_out == NULL)
        return FERRY_ERR_INVALID;
    btl_peer_t *peer = api_peer(ctx, dst, &rc);
    if (peer == NULL)
        return rc;
    api_rkey_header_t hdr;
    uint8_t key[FERRY_BTL_KEY_MAX];
    rc = api_rkey_parse(ctx, peer->module_idx, dst, rkey, &hdr, key);
    if (rc != FERRY_OK)
        return rc;
    ferry_rkey_h *rh = recycler_get(&ctx->api->rkeys);
    if (rh == NULL)
        return FERRY_ERR_NO_MEMORY;
    rh->magic = API_RKEY_H_MAGIC;
    rh->ctx = ctx;
    rh->dst = dst;
    rh->access = hdr.access;
    rh->base = hdr.base;
    rh->len = hdr.len;
    memcpy(rh->key, key, sizeof(rh->key));
    rh->raw = *rkey;
    rh_module_set(ctx, rh, peer->module_idx);
    *rh_out = rh;
    return FERRY_OK;
}

/* The check of a handle given to a call: live, and of ctx. */
static bool __attribute__((noinline)) rh_refuse(const ferry_ctx_t *ctx, const ferry_rkey_h *rh)
{
    rt_log(&ctx->log, RT_LOG_ERROR,
           "a remote key handle (%p) that is not a live handle of this context was "
           "passed: used after ferry_rkey_release?",
           (const void *)rh);
    return false;
}

static inline bool rh_valid(const ferry_ctx_t *ctx, const ferry_rkey_h *rh)
{
    if (rh == NULL)
        return false;
    if (rh->magic != API_RKEY_H_MAGIC || rh->ctx != ctx)
        return rh_refuse(ctx, rh);
    return true;
}

int ferry_rkey_release(ferry_ctx_t *ctx, ferry_rkey_h *rh)
{
    if (rh == NULL)
        return api_ctx_live(ctx) ? FERRY_OK : FERRY_ERR_INVALID;
    if (!api_ctx_live(ctx) || ctx->api == NULL || !rh_valid(ctx, rh))
        return FERRY_ERR_INVALID;
    rh->magic = 0;
    recycler_put(&ctx->api->rkeys, rh);
    return FERRY_OK;
}

/* [raddr, raddr + len) inside the handle's range, with the rights need.
 * Overflow-safe. */
static inline bool rh_covers(const ferry_rkey_h *rh, uint64_t raddr, size_t len, uint32_t need)
{
    return (rh->access & need) == need && raddr >= rh->base && raddr - rh->base <= rh->len &&
           len <= rh->len - (raddr - rh->base);
}

/* The peer's traffic moved to another rail: rh takes its key there, from
 * the same remote key (checked again as at unpack). */
static int __attribute__((noinline)) rh_follow(ferry_ctx_t *ctx, ferry_rkey_h *rh,
                                               btl_peer_t *peer)
{
    api_rkey_header_t hdr;
    uint8_t key[FERRY_BTL_KEY_MAX];
    if (api_rkey_parse(ctx, peer->module_idx, rh->dst, &rh->raw, &hdr, key) != FERRY_OK ||
        hdr.access != rh->access || hdr.base != rh->base || hdr.len != rh->len)
        return FERRY_ERR_UNREACH;
    memcpy(rh->key, key, sizeof(rh->key));
    rh_module_set(ctx, rh, peer->module_idx);
    return FERRY_OK;
}

/* The checks every handle operation starts with; on success the peer. */
static inline btl_peer_t *op_peer(ferry_ctx_t *ctx, ferry_rkey_h *rh,
                                  const ferry_op_params_t *p, const void *buf, size_t len,
                                  int *rc_out)
{
    if (!api_ctx_live(ctx) || ctx->api == NULL || !rh_valid(ctx, rh) ||
        (buf == NULL && len > 0) ||
        (p != NULL && p->local != NULL && len > 0 &&
         !api_mem_covers(ctx, p->local, buf, len))) {
        *rc_out = FERRY_ERR_INVALID;
        return NULL;
    }
    btl_peer_t *peer = &ctx->peers[rh->dst];
    if (peer->failed || peer->module_idx < 0) {
        *rc_out = FERRY_ERR_UNREACH;
        return NULL;
    }
    if (peer->module_idx != rh->module && (*rc_out = rh_follow(ctx, rh, peer)) != FERRY_OK)
        return NULL;
    return peer;
}

/* ---- put and get ---- */

static int rdma_nb(ferry_ctx_t *ctx, bool is_put, ferry_rkey_h *rh, uint64_t raddr, void *buf,
                   size_t len, const ferry_op_params_t *p)
{
    int rc;
    if (op_peer(ctx, rh, p, buf, len, &rc) == NULL)
        return rc;
    ferry_btl_module_t *btl = ctx->modules[rh->module];
    if (!(btl->attr.flags & (is_put ? FERRY_BTL_FLAG_PUT : FERRY_BTL_FLAG_GET)))
        return FERRY_ERR_NOT_SUPPORTED;
    if (!rh_covers(rh, raddr, len, is_put ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ))
        return FERRY_ERR_ACCESS;
    if ((p == NULL || p->cb == NULL) && api_direct_may(btl, len, &rh->direct_no)) {
        /* Done inside the call where the transport can (a peer's heap on
         * sm) with nobody to call back: no request, no record, nothing
         * for flush (api_rdma_start_key's first path, without its
         * arguments for the others). */
        rc = direct_answer(p, btl->ops->rdma_direct(btl, ctx->peers[rh->dst].ep, is_put, buf,
                                                    raddr, rh->key, len),
                           &rh->direct_no);
        if (rc != FERRY_ERR_NOT_SUPPORTED)
            return rc;
    }
    ferry_req_t *req = req_for(ctx, p, &rc);
    if (rc != FERRY_OK)
        return rc;
    rc = api_rdma_start_key(ctx, is_put, rh->dst, rh->module, rh->key, &rh->raw, buf, len,
                            p != NULL ? p->local : NULL, raddr, NULL, NULL, req, NULL,
                            &rh->direct_no);
    if (rc == FERRY_BTL_DONE)
        return req_done_now(ctx, p, req);
    if (rc != FERRY_OK)
        return req_abandon(ctx, req, rc);
    return req_started(p, req);
}

int ferry_put_nb(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t raddr, const void *buf, size_t len,
                 const ferry_op_params_t *p)
{
    return rdma_nb(ctx, true, rh, raddr, (void *)buf, len, p);
}

int ferry_get_nb(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t raddr, void *buf, size_t len,
                 const ferry_op_params_t *p)
{
    return rdma_nb(ctx, false, rh, raddr, buf, len, p);
}

/* ---- sends from callbacks ---- */

/* Default of FERRY_CB_QUEUE_MAX. */
#define API_CB_QUEUE_MAX_DEFAULT ((size_t)4 << 20)

int api_onesided_register_params(ferry_ctx_t *ctx, size_t *max_out, uint64_t *flush_ns_out)
{
    size_t max;
    long long flush_ms;
    int rc = rt_param_register_size(&ctx->params, "cb_queue_max", API_CB_QUEUE_MAX_DEFAULT, 0,
                                    SIZE_MAX / 2,
                                    "Bytes of active messages, tagged sends (large ones: "
                                    "their announcements) and atomics started inside "
                                    "callbacks that ferry holds when the transport has no room, "
                                    "to send with progress; past it they return "
                                    "FERRY_ERR_NO_RESOURCE",
                                    &max);
    if (rc == FERRY_OK)
        rc = rt_param_register_int(&ctx->params, "flush_timeout", 60000, 0, 86400000,
                                   "Milliseconds ferry_flush, ferry_flush_nb and ferry_barrier "
                                   "wait for a peer to answer the marker that follows this "
                                   "rank's active messages; then the peer is taken as failed "
                                   "(FERRY_ERR_TIMEOUT). 0 waits for ever",
                                   &flush_ms);
    if (rc == FERRY_OK && max_out != NULL)
        *max_out = max;
    if (rc == FERRY_OK && flush_ns_out != NULL)
        *flush_ns_out = (uint64_t)flush_ms * 1000000u;
    return rc;
}

/* An active message waiting in ferry for the transport. */
typedef struct api_cbq_msg {
    util_list_item_t link;
    uint8_t tag;
    size_t len;
    char data[];
} api_cbq_msg_t;

int api_cbq_push(ferry_ctx_t *ctx, int dst, int tag, const void *data, ferry_convertor_t *conv,
                 size_t len)
{
    return api_cbq_push_hdr(ctx, dst, tag, NULL, 0, data, conv, len);
}

int api_cbq_push_hdr(ferry_ctx_t *ctx, int dst, int tag, const void *hdr, size_t hlen,
                     const void *data, ferry_convertor_t *conv, size_t len)
{
    struct api_state *api = ctx->api;
    if (len > SIZE_MAX / 2 || hlen > SIZE_MAX / 2 - len)
        return FERRY_ERR_NO_RESOURCE;
    size_t cost = sizeof(api_cbq_msg_t) + hlen + len;
    if (api->cbq_bytes > api->cbq_max || cost > api->cbq_max - api->cbq_bytes)
        return FERRY_ERR_NO_RESOURCE;
    api_cbq_msg_t *m = malloc(cost);
    if (m == NULL)
        return FERRY_ERR_NO_MEMORY;
    m->tag = (uint8_t)tag;
    m->len = hlen + len;
    if (hlen > 0)
        memcpy(m->data, hdr, hlen);
    if (conv != NULL)
        ferry_convertor_pack(conv, m->data + hlen, len);
    else if (len > 0)
        memcpy(m->data + hlen, data, len);
    util_list_append(&api->cbq[dst], &m->link);
    api->cbq_bytes += cost;
    api->cbq_count++;
    /* In flight until it has left: a flush waits for it, and its marker
     * goes behind it. */
    api->outstanding[dst]++;
    api_am_sent(ctx, dst);
    return FERRY_OK;
}

/* Sends what waits for each peer, in order, while the transports take it. */
static int cbq_drain(ferry_ctx_t *ctx)
{
    struct api_state *api = ctx->api;
    int events = 0;
    for (int r = 0; r < ctx->size && api->cbq_count > 0; r++) {
        util_list_item_t *it;
        while ((it = util_list_first(&api->cbq[r])) != NULL) {
            api_cbq_msg_t *m = UTIL_CONTAINER_OF(it, api_cbq_msg_t, link);
            int rc = ctx->peers[r].failed
                         ? FERRY_ERR_UNREACH
                         : api_send_small(ctx, r, m->tag, m->data, m->len);
            if (rc == FERRY_ERR_NO_RESOURCE)
                break;
            if (rc != FERRY_OK) {
                rt_log(&ctx->log, RT_LOG_ERROR,
                       "a %zu-byte active message to rank %d queued from a callback was lost: %s",
                       m->len, r, ferry_strerror(rc));
                if (api->first_error[r] == FERRY_OK)
                    api->first_error[r] = rc;
                /* A large message's announcement: its send ends with the
                 * error instead of waiting for an answer. */
                if (m->tag == API_TAG_AM_RTS)
                    api_am_large_rts_lost(ctx, r, m->data, m->len, rc);
            }
            util_list_remove(&api->cbq[r], it);
            api->cbq_bytes -= sizeof(*m) + m->len;
            api->cbq_count--;
            api->outstanding[r]--;
            free(m);
            events++;
        }
    }
    return events;
}

/* ---- atomics ---- */

/* ferry_atomic_op_t onto the transport's operations. */
static const ferry_btl_atomic_op_t amo_ops[] = {
    [FERRY_ATOMIC_ADD] = FERRY_BTL_ATOMIC_ADD,   [FERRY_ATOMIC_AND] = FERRY_BTL_ATOMIC_AND,
    [FERRY_ATOMIC_OR] = FERRY_BTL_ATOMIC_OR,     [FERRY_ATOMIC_XOR] = FERRY_BTL_ATOMIC_XOR,
    [FERRY_ATOMIC_SWAP] = FERRY_BTL_ATOMIC_SWAP, [FERRY_ATOMIC_MIN] = FERRY_BTL_ATOMIC_MIN,
    [FERRY_ATOMIC_MAX] = FERRY_BTL_ATOMIC_MAX,
};

/* The transport's completion of an atomic: cbctx is the peer's slot,
 * cbdata the request or NULL. */
static void amo_done(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                     ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status)
{
    (void)btl;
    (void)ep;
    (void)local;
    (void)lreg;
    api_peer_slot_t *slot = cbctx;
    api_peer_done(slot, status);
    if (cbdata != NULL)
        api_req_complete(slot->ctx, cbdata, status);
}

enum { AMO_OP, AMO_FETCH, AMO_CSWAP };

/* An atomic started inside a callback that the transport had no room for:
 * started again from progress. */
typedef struct api_amo_wait {
    util_list_item_t link;
    int kind;
    int dst;
    int module;
    ferry_atomic_op_t op;
    uint32_t flags;
    uint64_t raddr, operand, compare;
    void *result;
    ferry_btl_reg_t *lreg;
    ferry_req_t *req;
    uint8_t key[FERRY_BTL_KEY_MAX];
} api_amo_wait_t;

static inline int amo_issue(ferry_ctx_t *ctx, int kind, int dst, int m, const uint8_t *key,
                     uint64_t raddr, ferry_atomic_op_t op, uint32_t flags, uint64_t operand,
                     uint64_t compare, void *result, ferry_btl_reg_t *lreg, ferry_req_t *req)
{
    ferry_btl_module_t *btl = ctx->modules[m];
    ferry_btl_endpoint_t *ep = ctx->peers[dst].ep;
    api_peer_slot_t *slot = &ctx->api->slots[dst];
    switch (kind) {
    case AMO_OP:
        return btl->ops->atomic_op(btl, ep, raddr, key, amo_ops[op], operand, flags, amo_done,
                                   slot, req);
    case AMO_FETCH:
        return btl->ops->atomic_fop(btl, ep, result, raddr, lreg, key, amo_ops[op], operand,
                                    flags, amo_done, slot, req);
    default:
        return btl->ops->atomic_cswap(btl, ep, result, raddr, lreg, key, compare, operand, flags,
                                      amo_done, slot, req);
    }
}

/* Starts the atomics waiting, oldest first, while the transports take them. */
static int amo_drain(ferry_ctx_t *ctx)
{
    struct api_state *api = ctx->api;
    int events = 0;
    util_list_item_t *it;
    while ((it = util_list_first(&api->amo_q)) != NULL) {
        api_amo_wait_t *w = UTIL_CONTAINER_OF(it, api_amo_wait_t, link);
        int rc = ctx->peers[w->dst].failed
                     ? FERRY_ERR_UNREACH
                     : amo_issue(ctx, w->kind, w->dst, w->module, w->key, w->raddr, w->op,
                                 w->flags, w->operand, w->compare, w->result, w->lreg, w->req);
        if (rc == FERRY_ERR_NO_RESOURCE)
            break;
        util_list_remove(&api->amo_q, it);
        api->cbq_bytes -= sizeof(*w);
        if (rc != FERRY_OK) {
            /* Done now, or refused: its completion is due either way (the
             * count it held in outstanding goes with it). */
            amo_done(NULL, NULL, NULL, NULL, &api->slots[w->dst], w->req,
                     rc == FERRY_BTL_DONE ? FERRY_OK : rc);
        }
        free(w);
        events++;
    }
    return events;
}

/* A small message of ferry's own sent from a handler (an answer, a
 * refusal): now, or, behind what waits from callbacks or with no room,
 * queued with them (bounded by FERRY_CB_QUEUE_MAX). */
static int reply_small(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *data, size_t len)
{
    int rc = api_cbq_waiting(ctx, dst) ? FERRY_ERR_NO_RESOURCE
                                       : api_send_small(ctx, dst, tag, data, len);
    if (rc == FERRY_ERR_NO_RESOURCE)
        rc = api_cbq_push(ctx, dst, tag, data, NULL, len);
    return rc;
}

/*
 * Atomics to a peer of several rails (API_TAG_AMO, api.h). Given to a
 * transport, an atomic in flight on a rail that breaks has an effect at the
 * target nobody here can know, so it could only fail. As ferry's own active
 * message it is kept and replayed with the others, exactly once whichever
 * rail carries it, and so is its answer: it moves over like everything else.
 */
typedef struct api_amo_sent {
    util_list_item_t link; /* in api->amo_sent */
    uint64_t seq;
    int dst;
    bool w32;
    void *result; /* NULL: no fetch */
    ferry_req_t *req;
} api_amo_sent_t;

static int amo_msg_start(ferry_ctx_t *ctx, int kind, ferry_rkey_h *rh, uint64_t raddr,
                         ferry_atomic_op_t op, size_t size, uint64_t operand, uint64_t compare,
                         void *result, const ferry_op_params_t *p)
{
    struct api_state *api = ctx->api;
    int dst = rh->dst, rc;
    ferry_req_t *req = req_for(ctx, p, &rc);
    if (rc != FERRY_OK)
        return rc;
    api_amo_sent_t *w = util_zalloc(sizeof(*w));
    if (w == NULL)
        return req_abandon(ctx, req, FERRY_ERR_NO_MEMORY);
    size_t key_len = ctx->modules[rh->module]->attr.reg_handle_size;
    api_amo_msg_t m = {.kind = API_AMO_REQ,
                       .amo = (uint8_t)kind,
                       .op = kind == AMO_CSWAP ? 0 : (uint8_t)amo_ops[op],
                       .size = (uint8_t)size,
                       .instance = (uint8_t)api_rkey_peer_instance(ctx, rh->module, dst),
                       .key_len = (uint8_t)key_len,
                       .name_hash = api->rkey_id[rh->module].name_hash,
                       .seq = api->amo_seq,
                       .raddr = raddr,
                       .operand = operand,
                       .compare = compare};
    /* Behind what waits from callbacks, as every message to dst. */
    if (api_cbq_waiting(ctx, dst))
        rc = FERRY_ERR_NO_RESOURCE;
    else
        rc = api_send_two(ctx, dst, API_TAG_AMO, &m, sizeof(m), rh->key, key_len);
    if (rc == FERRY_ERR_NO_RESOURCE && ctx->in_callback > 0)
        rc = api_cbq_push_hdr(ctx, dst, API_TAG_AMO, &m, sizeof(m), rh->key, NULL, key_len);
    if (rc != FERRY_OK) {
        free(w);
        return req_abandon(ctx, req, rc);
    }
    *w = (api_amo_sent_t){.seq = api->amo_seq++, .dst = dst, .w32 = size == 4,
                          .result = kind == AMO_OP ? NULL : result, .req = req};
    util_list_append(&api->amo_sent, &w->link);
    api->outstanding[dst]++;
    return req_started(p, req);
}

static void amo_sent_done(ferry_ctx_t *ctx, api_amo_sent_t *w, int status)
{
    util_list_remove(&ctx->api->amo_sent, &w->link);
    api_peer_done(&ctx->api->slots[w->dst], status);
    if (w->req != NULL)
        api_req_complete(ctx, w->req, status);
    free(w);
}

/* Atomics waiting on a peer that failed end with FERRY_ERR_UNREACH: no
 * answer will come. */
static int amo_sent_fail_dead(ferry_ctx_t *ctx)
{
    int events = 0;
    util_list_item_t *it = util_list_first(&ctx->api->amo_sent), *next;
    for (; it != NULL; it = next) {
        next = it->next != &ctx->api->amo_sent.head ? it->next : NULL;
        api_amo_sent_t *w = UTIL_CONTAINER_OF(it, api_amo_sent_t, link);
        if (ctx->peers[w->dst].failed) {
            amo_sent_done(ctx, w, FERRY_ERR_UNREACH);
            events++;
        }
    }
    return events;
}

/* The target's side of a request whose layout api_amo_recv checked: the
 * operation, width and alignment checked as every atomic's are, the key
 * resolved against our registration of the module it names at this moment,
 * the CPU atomic applied, and the answer sent, in order with what we send
 * to src (behind what waits from callbacks). */
static void amo_msg_target(ferry_ctx_t *ctx, int src, const api_amo_msg_t *m,
                           const unsigned char *key)
{
    int status = FERRY_ERR_ACCESS;
    uint64_t old = 0;
    int mod = -1;
    for (int i = 0; i < ctx->n_modules && mod < 0; i++)
        if (ctx->api->rkey_id[i].name_hash == m->name_hash &&
            ctx->api->rkey_id[i].instance == m->instance)
            mod = i;
    ferry_btl_module_t *btl = mod >= 0 ? ctx->modules[mod] : NULL;
    void *at = NULL;
    bool cswap = m->amo == AMO_CSWAP;
    if (btl != NULL && btl->ops->target_resolve != NULL &&
        m->key_len == btl->attr.reg_handle_size &&
        (status = btl_base_atomic_check(btl, m->op, cswap, m->raddr,
                                        m->size == 4 ? FERRY_BTL_ATOMIC_FLAG_32BIT : 0)) ==
            FERRY_OK &&
        (status = btl->ops->target_resolve(btl, key, m->raddr, m->size,
                                           FERRY_ACCESS_REMOTE_ATOMIC, &at)) == FERRY_OK) {
        old = ferry_btl_atomic_apply(at, m->size == 4, cswap, m->op, m->operand, m->compare);
    } else {
        if (status == FERRY_OK)
            status = FERRY_ERR_ACCESS;
        /* An answer, as a transport's target-executed atomic refuses: a
         * key released meanwhile is no fault of the peer's. */
        rt_log(&ctx->log, RT_LOG_DEBUG, "atomic of %u bytes at 0x%llx from rank %d refused: %s",
               (unsigned)m->size, (unsigned long long)m->raddr, src, ferry_strerror(status));
    }
    api_amo_msg_t a = {.kind = API_AMO_ANSWER, .status = status, .seq = m->seq, .operand = old};
    int rc = reply_small(ctx, src, API_TAG_AMO, &a, sizeof(a));
    if (rc != FERRY_OK)
        rt_log_limited(&ctx->log, &ctx->ctrl_bad, RT_LOG_WARN,
                       "the answer to rank %d's atomic could not be sent (%s): it waits for "
                       "ever",
                       src, ferry_strerror(rc));
}

/* An answer from src: completes the atomic it names (false: none). */
static bool amo_msg_answer(ferry_ctx_t *ctx, int src, const api_amo_msg_t *m)
{
    util_list_item_t *it;
    for (it = util_list_first(&ctx->api->amo_sent); it != NULL;
         it = it->next != &ctx->api->amo_sent.head ? it->next : NULL) {
        api_amo_sent_t *w = UTIL_CONTAINER_OF(it, api_amo_sent_t, link);
        if (w->dst != src || w->seq != m->seq)
            continue;
        /* A refusal keeps its kind when it is one a target gives; anything
         * else a peer claims reads as a refusal of access. */
        int status = m->status == FERRY_OK || m->status == FERRY_ERR_INVALID ||
                             m->status == FERRY_ERR_NOT_SUPPORTED
                         ? m->status
                         : FERRY_ERR_ACCESS;
        if (status == FERRY_OK && w->result != NULL)
            btl_atomic_store_result(w->result, w->w32, m->operand);
        amo_sent_done(ctx, w, status);
        return true;
    }
    return false;
}

void api_amo_recv(ferry_ctx_t *ctx, int src, const void *data, size_t len)
{
    /* The layout here; what the fields ask for (operation, alignment, key)
     * the target decides, and answers. */
    api_amo_msg_t m = {.kind = 0};
    if (len >= sizeof(m)) {
        memcpy(&m, data, sizeof(m));
        if (m.kind == API_AMO_REQ && m.key_len <= FERRY_BTL_KEY_MAX &&
            len == sizeof(m) + m.key_len && (m.size == 4 || m.size == 8) && m.zero[0] == 0 &&
            m.zero[1] == 0 && m.status == 0 &&
            (m.amo == AMO_OP || m.amo == AMO_FETCH || (m.amo == AMO_CSWAP && m.op == 0))) {
            amo_msg_target(ctx, src, &m, (const unsigned char *)data + sizeof(m));
            return;
        }
        if (m.kind == API_AMO_ANSWER && len == sizeof(m) && amo_msg_answer(ctx, src, &m))
            return;
    }
    rt_log_limited(&ctx->log, &ctx->ctrl_bad, RT_LOG_WARN,
                   "atomic message from rank %d is malformed or answers nothing of ours "
                   "(kind %u, %zu bytes); dropped",
                   src, (unsigned)m.kind, len);
}

/* Inline in each of the three calls, where kind is a constant. */
static inline __attribute__((always_inline)) int
amo_start(ferry_ctx_t *ctx, int kind, ferry_rkey_h *rh, uint64_t raddr, ferry_atomic_op_t op,
          size_t size, uint64_t operand, uint64_t compare, void *result,
          const ferry_op_params_t *p)
{
    int rc;
    if ((size != 4 && size != 8) || (raddr & (size - 1)) != 0 ||
        (kind != AMO_CSWAP && (unsigned)op > FERRY_ATOMIC_MAX) ||
        (kind != AMO_OP && result == NULL))
        return FERRY_ERR_INVALID;
    btl_peer_t *peer = op_peer(ctx, rh, p, kind == AMO_OP ? NULL : result,
                               kind == AMO_OP ? 0 : size, &rc);
    if (peer == NULL)
        return rc;
    if (!rh_covers(rh, raddr, size, FERRY_ACCESS_REMOTE_ATOMIC))
        return FERRY_ERR_ACCESS;
    ferry_btl_module_t *btl = ctx->modules[rh->module];
    uint32_t need = kind == AMO_OP ? FERRY_BTL_FLAG_ATOMIC_OPS
                    : kind == AMO_FETCH ? FERRY_BTL_FLAG_ATOMIC_FOPS
                                        : FERRY_BTL_FLAG_ATOMIC_OPS;
    if (!(btl->attr.flags & need))
        return FERRY_ERR_NOT_SUPPORTED;
    if (bml_multi(ctx, rh->dst))
        return amo_msg_start(ctx, kind, rh, raddr, op, size, operand, compare, result, p);
    uint32_t flags = size == 4 ? FERRY_BTL_ATOMIC_FLAG_32BIT : 0;
    if ((p == NULL || p->cb == NULL) && !rh->amo_direct_no) {
        /* Done inside the call where the transport can (a peer's heap on
         * sm) with nobody to call back: no request, no record, nothing
         * for flush. */
        uint32_t dflags = kind == AMO_CSWAP ? flags | FERRY_BTL_ATOMIC_FLAG_CSWAP : flags;
        rc = direct_answer(p, btl->ops->atomic_direct(btl, ctx->peers[rh->dst].ep, result, raddr,
                                                      rh->key, amo_ops[op], operand, compare,
                                                      dflags),
                           &rh->amo_direct_no);
        if (rc != FERRY_ERR_NOT_SUPPORTED)
            return rc;
    }
    ferry_req_t *req = req_for(ctx, p, &rc);
    if (rc != FERRY_OK)
        return rc;
    ferry_btl_reg_t *lreg = api_mem_reg(p != NULL ? p->local : NULL, rh->module);
    struct api_state *api = ctx->api;
    /* Inside a callback, behind atomics already waiting (they are not
     * ordered with each other, but a queue that never empties is unfair). */
    rc = ctx->in_callback > 0 && !util_list_empty(&api->amo_q)
             ? FERRY_ERR_NO_RESOURCE
             : amo_issue(ctx, kind, rh->dst, rh->module, rh->key, raddr, op, flags, operand,
                         compare, result, lreg, req);
    if (rc == FERRY_ERR_NO_RESOURCE && ctx->in_callback > 0 &&
        api->cbq_bytes <= api->cbq_max && sizeof(api_amo_wait_t) <= api->cbq_max - api->cbq_bytes) {
        api_amo_wait_t *w = calloc(1, sizeof(*w));
        if (w == NULL)
            return req_abandon(ctx, req, FERRY_ERR_NO_MEMORY);
        *w = (api_amo_wait_t){.kind = kind, .dst = rh->dst, .module = rh->module, .op = op,
                              .flags = flags, .raddr = raddr, .operand = operand,
                              .compare = compare, .result = result, .lreg = lreg, .req = req};
        memcpy(w->key, rh->key, sizeof(w->key));
        util_list_append(&api->amo_q, &w->link);
        api->cbq_bytes += sizeof(*w);
        api->outstanding[rh->dst]++;
        return req_started(p, req);
    }
    if (rc == FERRY_BTL_DONE)
        return req_done_now(ctx, p, req);
    if (rc != FERRY_OK)
        return req_abandon(ctx, req, rc);
    ctx->api->outstanding[rh->dst]++;
    return req_started(p, req);
}

int ferry_atomic(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t raddr, ferry_atomic_op_t op,
                 size_t size, uint64_t operand, const ferry_op_params_t *p)
{
    return amo_start(ctx, AMO_OP, rh, raddr, op, size, operand, 0, NULL, p);
}

int ferry_atomic_fetch(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t raddr, ferry_atomic_op_t op,
                       size_t size, uint64_t operand, void *result, const ferry_op_params_t *p)
{
    return amo_start(ctx, AMO_FETCH, rh, raddr, op, size, operand, 0, result, p);
}

int ferry_atomic_cswap(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t raddr, size_t size,
                       uint64_t compare, uint64_t value, void *result, const ferry_op_params_t *p)
{
    return amo_start(ctx, AMO_CSWAP, rh, raddr, FERRY_ATOMIC_ADD, size, value, compare, result,
                     p);
}

/* ---- put with notification ---- */

/*
 * A notification. Where the transport reaching the peer orders a put
 * before later messages on its endpoint (FERRY_BTL_FLAG_PUT_ORDERED) and
 * took the whole put in the call, it is sent at once, behind the put; else
 * once the put has completed. The operation is done when both the put has
 * completed and the notification has left (parts counts what remains).
 */
typedef struct api_notify {
    util_list_item_t link; /* in notify_q while the transport has no room */
    ferry_ctx_t *ctx;
    int dst;
    uint8_t tag;
    bool ordered; /* sent behind the put, not after its completion */
    int parts;
    int status;
    size_t plen;
    ferry_req_t *req; /* or NULL */
    uint8_t payload[FERRY_PUT_NOTIFY_MAX];
} api_notify_t;

static void notify_finish(ferry_ctx_t *ctx, api_notify_t *n, int status)
{
    struct api_state *api = ctx->api;
    if (status != FERRY_OK && n->status == FERRY_OK)
        n->status = status;
    if (--n->parts > 0)
        return;
    api->outstanding[n->dst]--;
    if (n->status != FERRY_OK && api->first_error[n->dst] == FERRY_OK)
        api->first_error[n->dst] = n->status;
    if (n->req != NULL)
        api_req_complete(ctx, n->req, n->status);
    free(n);
}

/* Sends n's notification: FERRY_ERR_NO_RESOURCE when it must wait, else n
 * is finished. */
static int notify_send(ferry_ctx_t *ctx, api_notify_t *n)
{
    if (ctx->peers[n->dst].failed) {
        notify_finish(ctx, n, FERRY_ERR_UNREACH);
        return FERRY_OK;
    }
    int rc = api_send_small(ctx, n->dst, n->tag, n->payload, n->plen);
    if (rc == FERRY_ERR_NO_RESOURCE)
        return rc;
    if (rc == FERRY_OK)
        api_am_sent(ctx, n->dst);
    notify_finish(ctx, n, rc);
    return FERRY_OK;
}

/* The put's completion (from api_rdma_progress). */
static void notify_put_done(void *arg, int status)
{
    api_notify_t *n = arg;
    ferry_ctx_t *ctx = n->ctx;
    if (n->ordered || status != FERRY_OK) {
        /* Ordered: the notification left already (or waits in notify_q
         * behind the put); this was the put's part. */
        if (!n->ordered)
            n->parts = 1; /* the notification will never be sent */
        notify_finish(ctx, n, status);
        return;
    }
    n->parts = 1; /* the put's part is done; the notification's remains */
    /* Behind notifications already waiting, so that they leave in order. */
    if (!util_list_empty(&ctx->api->notify_q) || notify_send(ctx, n) == FERRY_ERR_NO_RESOURCE)
        util_list_append(&ctx->api->notify_q, &n->link);
}

/*
 * A small put with notification in one message (API_TAG_PUTN): the header,
 * the key of the module it is for, the notification's payload, the data.
 * The target resolves the key against its own registration
 * (ferry_btl_ops.target_resolve), copies the data, then runs the handler;
 * nothing waits at the initiator for the put's own completion. Taken only
 * where nothing observes that completion (no callback, no request): the
 * marker of a later ferry_flush follows the message and covers it. A
 * refusal comes back as an API_PUTN_REFUSED message, before the flush's answer,
 * so that the flush returns FERRY_ERR_ACCESS as for a refused ring put.
 */

/* FERRY_OK: sent; 1: not this way (take the general path); else an error
 * with nothing sent. */
static int putn_inline(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t raddr, const void *buf,
                       size_t len, int tag, const void *payload, size_t plen)
{
    struct api_state *api = ctx->api;
    int dst = rh->dst;
    /* After a failover the message could reach a rail whose key it does
     * not carry: peers with several rails take the general path. The
     * handle's module is the peer's (op_peer). */
    if (len + plen > rh->putn_room || bml_multi(ctx, dst) || !util_list_empty(&api->notify_q) ||
        api_cbq_waiting(ctx, dst))
        return 1;
    size_t key_len = ctx->modules[rh->module]->attr.reg_handle_size;
    unsigned char hdr[sizeof(api_putn_hdr_t) + FERRY_BTL_KEY_MAX + FERRY_PUT_NOTIFY_MAX];
    size_t hlen = sizeof(api_putn_hdr_t) + key_len + plen;
    api_putn_hdr_t h = {.kind = API_PUTN_DATA,
                        .tag = (uint8_t)tag,
                        .key_len = (uint8_t)key_len,
                        .plen = (uint8_t)plen,
                        .len = (uint32_t)len,
                        .raddr = raddr};
    memcpy(hdr, &h, sizeof(h));
    /* The whole key array, a copy of fixed size: what lies past key_len
     * is the payload's place, or not sent. */
    memcpy(hdr + sizeof(h), rh->key, sizeof(rh->key));
    if (plen > 0)
        memcpy(hdr + sizeof(h) + key_len, payload, plen);
    int rc = api_send_two(ctx, dst, API_TAG_PUTN, hdr, hlen, buf, len);
    if (rc == FERRY_ERR_NO_RESOURCE)
        return 1; /* the general path queues it */
    if (rc == FERRY_OK)
        api_am_sent(ctx, dst); /* the next flush to dst sends a marker behind it */
    return rc;
}

_Static_assert(sizeof(api_putn_hdr_t) == 16, "the header of a put with notification");
_Static_assert(FERRY_PUT_NOTIFY_MAX <= UINT8_MAX && API_PUTN_INLINE_MAX <= UINT32_MAX,
               "the header's fields hold the largest payload and data");

void api_putn_recv(ferry_ctx_t *ctx, int src, const void *data, size_t len)
{
    struct api_state *api = ctx->api;
    api_putn_hdr_t h;
    if (len < sizeof(h)) {
        rt_log_limited(&ctx->log, &ctx->ctrl_bad, RT_LOG_WARN,
                       "put with notification from rank %d: %zu bytes, shorter than its "
                       "header; dropped",
                       src, len);
        return;
    }
    memcpy(&h, data, sizeof(h));
    const unsigned char *p = (const unsigned char *)data + sizeof(h);
    size_t rest = len - sizeof(h);
    if (h.kind == API_PUTN_REFUSED && rest == 0) {
        rt_log_limited(&ctx->log, &ctx->ctrl_bad, RT_LOG_WARN,
                       "rank %d refused a %llu-byte put with notification at 0x%llx: its "
                       "registration does not cover it (any more)",
                       src, (unsigned long long)h.len, (unsigned long long)h.raddr);
        if (api->first_error[src] == FERRY_OK)
            api->first_error[src] = FERRY_ERR_ACCESS;
        return;
    }
    if (h.kind != API_PUTN_DATA || h.key_len > FERRY_BTL_KEY_MAX ||
        h.plen > FERRY_PUT_NOTIFY_MAX || h.tag > FERRY_AM_TAG_MAX ||
        rest < (size_t)h.key_len + h.plen || h.len != rest - h.key_len - h.plen) {
        rt_log_limited(&ctx->log, &ctx->ctrl_bad, RT_LOG_WARN,
                       "put with notification from rank %d is malformed (kind %u, key %u "
                       "bytes, payload %u, data %llu of %zu bytes); dropped",
                       src, (unsigned)h.kind, (unsigned)h.key_len, (unsigned)h.plen,
                       (unsigned long long)h.len, len);
        return;
    }
    const unsigned char *key = p; /* the module reads its own key's bytes, unaligned */
    const unsigned char *payload = p + h.key_len;
    const unsigned char *body = payload + h.plen;
    /* The key is of the module of the path between us (see api.h); a key
     * of any other is refused by this one's registrations. */
    int m = ctx->peers != NULL && src >= 0 && src < ctx->size ? ctx->peers[src].module_idx : -1;
    ferry_btl_module_t *btl = m >= 0 ? ctx->modules[m] : NULL;
    int rc = FERRY_ERR_ACCESS;
    if (btl != NULL && btl->ops->target_resolve != NULL &&
        h.key_len == btl->attr.reg_handle_size) {
        void *there = NULL;
        if (btl->ops->target_write != NULL)
            rc = btl->ops->target_write(btl, key, h.raddr, body, (size_t)h.len);
        else if ((rc = btl->ops->target_resolve(btl, key, h.raddr, (size_t)h.len,
                                                FERRY_ACCESS_REMOTE_WRITE, &there)) == FERRY_OK &&
                 h.len > 0)
            memcpy(there, body, (size_t)h.len);
    }
    if (rc != FERRY_OK) {
        rt_log_limited(&ctx->log, &ctx->ctrl_bad, RT_LOG_WARN,
                       "put with notification from rank %d refused: %llu bytes at 0x%llx are "
                       "not in a registration of ours with remote write",
                       src, (unsigned long long)h.len, (unsigned long long)h.raddr);
        api_putn_hdr_t no = h;
        no.kind = API_PUTN_REFUSED;
        int rs = reply_small(ctx, src, API_TAG_PUTN, &no, sizeof(no));
        if (rs != FERRY_OK)
            rt_log_limited(&ctx->log, &ctx->ctrl_bad, RT_LOG_WARN,
                           "the refusal to rank %d could not be sent (%s): its flush will not "
                           "report it",
                           src, ferry_strerror(rs));
    }
    /* As behind a refused ring put: the handler runs all the same. */
    api_am_deliver(ctx, src, h.tag, payload, h.plen);
}

/* ferry_put_notify for every case (below, the common one). */
static int __attribute__((noinline))
put_notify(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t raddr, const void *buf, size_t len,
           int tag, const void *payload, size_t plen, const ferry_op_params_t *p)
{
    int rc;
    if (!api_tag_valid(tag) || (payload == NULL && plen > 0) || plen > FERRY_PUT_NOTIFY_MAX)
        return FERRY_ERR_INVALID;
    if (op_peer(ctx, rh, p, buf, len, &rc) == NULL)
        return rc;
    ferry_btl_module_t *btl = ctx->modules[rh->module];
    if (!(btl->attr.flags & FERRY_BTL_FLAG_PUT))
        return FERRY_ERR_NOT_SUPPORTED;
    if (!rh_covers(rh, raddr, len, FERRY_ACCESS_REMOTE_WRITE))
        return FERRY_ERR_ACCESS;
    if (plen > ctx->peers[rh->dst].max_send)
        return FERRY_ERR_INVALID;
    /* Where the transport does the put inside the call (a peer's heap on
     * sm), the notification follows it at once and, sent, leaves nothing
     * to record: no allocation, no callback of the put's. */
    /* The request first: once the put is done, nothing may fail for want
     * of memory. */
    ferry_req_t *req = req_for(ctx, p, &rc);
    if (rc != FERRY_OK)
        return rc;
    bool put_done = false;
    rc = FERRY_ERR_NOT_SUPPORTED;
    if (api_direct_may(btl, len, &rh->direct_no) && util_list_empty(&ctx->api->notify_q)) {
        rc = btl->ops->rdma_direct(btl, ctx->peers[rh->dst].ep, true, (void *)buf, raddr, rh->key,
                                   len);
        rh->direct_no = rc == FERRY_ERR_NOT_SUPPORTED;
    }
    if (rc == FERRY_ERR_NOT_SUPPORTED && util_list_empty(&ctx->api->notify_q) &&
        !api_cbq_waiting(ctx, rh->dst)) {
        /* The transport's own message of a put and its notification (sm's
         * ring), completed as a put: one message, callback or not. */
        rc = api_putn_inline_start(ctx, rh->dst, rh->module, rh->key, buf, len, raddr,
                                   (uint8_t)tag, payload, plen, req);
        if (rc == FERRY_OK) {
            api_am_sent(ctx, rh->dst);
            return req_started(p, req);
        }
        if (rc != FERRY_ERR_NOT_SUPPORTED)
            return req_abandon(ctx, req, rc);
    }
    if (rc == FERRY_ERR_NOT_SUPPORTED && req == NULL) {
        /* Nothing observes the put's own completion: one message, where
         * it fits. */
        int sent = putn_inline(ctx, rh, raddr, buf, len, tag, payload, plen);
        if (sent != 1)
            return sent;
    }
    if (rc == FERRY_BTL_DONE) {
        static const uint8_t none;
        rc = api_send_small(ctx, rh->dst, (uint8_t)tag, plen > 0 ? payload : &none, plen);
        if (rc == FERRY_OK) {
            api_am_sent(ctx, rh->dst);
            return req_done_now(ctx, p, req);
        }
        if (rc != FERRY_ERR_NO_RESOURCE)
            return req_abandon(ctx, req, rc);
        put_done = true; /* the notification waits in notify_q */
    } else if (rc != FERRY_ERR_NOT_SUPPORTED) {
        return req_abandon(ctx, req, rc);
    }
    api_notify_t *n = calloc(1, sizeof(*n));
    if (n == NULL) {
        if (put_done) {
            /* Done, and its notification cannot be kept: said so. */
            rt_log(&ctx->log, RT_LOG_ERROR,
                   "ferry_put_notify: the put to rank %d is done but its notification could "
                   "not be queued (out of memory)",
                   rh->dst);
        }
        return req_abandon(ctx, req, FERRY_ERR_NO_MEMORY);
    }
    n->ctx = ctx;
    n->dst = rh->dst;
    n->tag = (uint8_t)tag;
    n->plen = plen;
    n->req = req;
    n->parts = 2;
    if (plen > 0)
        memcpy(n->payload, payload, plen);
    if (put_done) {
        n->parts = 1;
        n->ordered = true;
        ctx->api->outstanding[rh->dst]++;
        util_list_append(&ctx->api->notify_q, &n->link);
        return req_started(p, req);
    }
    /* The put's completion callback comes from progress, after this call:
     * n->ordered is settled before it can run. */
    bool accepted = false;
    rc = api_rdma_start_key(ctx, true, rh->dst, rh->module, rh->key, &rh->raw, (void *)buf,
                            len, p != NULL ? p->local : NULL, raddr, notify_put_done, n, NULL,
                            &accepted, &rh->direct_no);
    if (rc != FERRY_OK) {
        free(n);
        return req_abandon(ctx, req, rc);
    }
    /* The notification is in flight until it has been sent. */
    ctx->api->outstanding[rh->dst]++;
    /* Across several rails the put may be striped, or move to another
     * rail, behind a notification on this one: it waits for the put. */
    if (accepted && (btl->attr.flags & FERRY_BTL_FLAG_PUT_ORDERED) && !bml_multi(ctx, rh->dst)) {
        n->ordered = true;
        if (!util_list_empty(&ctx->api->notify_q) || notify_send(ctx, n) == FERRY_ERR_NO_RESOURCE)
            util_list_append(&ctx->api->notify_q, &n->link);
    }
    return req_started(p, req);
}

/* The common case in one pass: no request or callback, a live handle on
 * the peer's current path that covers the range, a transport that took no
 * direct put for the key, nothing queued ahead of it: the put and its
 * notification as one message of the transport's own
 * (api_putn_inline_start, as put_notify takes it). What that declines
 * (FERRY_ERR_NOT_SUPPORTED, nothing started) and every other case are
 * put_notify's from the start. */
int ferry_put_notify(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t raddr, const void *buf,
                     size_t len, int tag, const void *payload, size_t plen,
                     const ferry_op_params_t *p)
{
    if (__builtin_expect(p == NULL && ctx != NULL && ctx->magic == BTL_CTX_MAGIC &&
                             ctx->api != NULL && rh != NULL && rh->magic == API_RKEY_H_MAGIC &&
                             rh->ctx == ctx && api_tag_valid(tag) &&
                             (payload != NULL || plen == 0) && plen <= FERRY_PUT_NOTIFY_MAX &&
                             (buf != NULL || len == 0),
                         1)) {
        btl_peer_t *peer = &ctx->peers[rh->dst];
        ferry_btl_module_t *btl = ctx->modules[rh->module];
        struct api_state *api = ctx->api;
        if (__builtin_expect(!peer->failed && peer->module_idx == rh->module &&
                                 plen <= peer->max_send &&
                                 rh_covers(rh, raddr, len, FERRY_ACCESS_REMOTE_WRITE) &&
                                 (btl->attr.flags & FERRY_BTL_FLAG_PUT) &&
                                 (rh->direct_no || !api_direct_may(btl, len, NULL)) &&
                                 util_list_empty(&api->notify_q) && api->cbq_count == 0,
                             1)) {
            int rc = api_putn_inline_start(ctx, rh->dst, rh->module, rh->key, buf, len, raddr,
                                           (uint8_t)tag, payload, plen, NULL);
            if (rc == FERRY_OK) {
                api_am_sent(ctx, rh->dst);
                return FERRY_OK;
            }
            if (rc != FERRY_ERR_NOT_SUPPORTED)
                return rc;
        }
    }
    return put_notify(ctx, rh, raddr, buf, len, tag, payload, plen, p);
}

/* ---- flush markers ---- */

static int flush_send(ferry_ctx_t *ctx, int dst, uint32_t kind, uint64_t seq)
{
    api_flush_msg_t msg = {.magic = API_FLUSH_MAGIC, .kind = kind, .seq = seq};
    return api_send_small(ctx, dst, API_TAG_FLUSH, &msg, sizeof(msg));
}

void api_flush_recv(ferry_ctx_t *ctx, int src, const void *data, size_t len)
{
    struct api_state *api = ctx->api;
    api_flush_msg_t msg;
    if (len != sizeof(msg)) {
        rt_log(&ctx->log, RT_LOG_WARN, "malformed flush message of %zu bytes from rank %d dropped",
               len, src);
        return;
    }
    memcpy(&msg, data, sizeof(msg));
    if (msg.magic != API_FLUSH_MAGIC || msg.seq == 0 ||
        (msg.kind == FLUSH_ANSWER && msg.seq > api->flush_sent[src]) ||
        (msg.kind != FLUSH_MARK && msg.kind != FLUSH_ANSWER)) {
        rt_log(&ctx->log, RT_LOG_WARN,
               "flush message from rank %d dropped (kind %u, marker %llu, %llu sent to it)", src,
               msg.kind, (unsigned long long)msg.seq,
               (unsigned long long)api->flush_sent[src]);
        return;
    }
    if (msg.kind == FLUSH_ANSWER) {
        if (msg.seq > api->flush_acked[src])
            api->flush_acked[src] = msg.seq;
        return;
    }
    /* Every message src sent before the marker has been handled: they came
     * first on the same ordered path, and their handlers ran from the
     * dispatcher (or from am_large's release of what it held, which brings
     * the marker here only after them). */
    /* What waits in the callback queue to src (a refusal of a put with
     * notification, say) goes before the answer. */
    if (api->ack_owed[src] != 0 || api_cbq_waiting(ctx, src) ||
        flush_send(ctx, src, FLUSH_ANSWER, msg.seq) != FERRY_OK) {
        if (msg.seq > api->ack_owed[src])
            api->ack_owed[src] = msg.seq;
        api->n_owed_hint = true;
    }
}

/* Marks the ranks of lo .. hi - 1 an application message went to since
 * their last marker: marks[r - lo] is the marker to wait for (0: none). */
static void flush_mark(ferry_ctx_t *ctx, int lo, int hi, uint64_t *marks)
{
    struct api_state *api = ctx->api;
    for (int r = lo; r < hi; r++) {
        marks[r - lo] = 0;
        if (api->am_dirty[r] && !ctx->peers[r].failed) {
            api->am_dirty[r] = false;
            marks[r - lo] = ++api->flush_sent[r];
        }
    }
}

/* Sends the markers of marks not yet sent (a sent one is made negative by
 * setting its top bit); FERRY_ERR_NO_RESOURCE while some must wait. */
#define MARK_SENT (1ull << 63)
static int flush_send_marks(ferry_ctx_t *ctx, int lo, int hi, uint64_t *marks)
{
    int rc = FERRY_OK;
    for (int r = lo; r < hi; r++) {
        uint64_t m = marks[r - lo];
        if (m == 0 || (m & MARK_SENT) != 0)
            continue;
        if (ctx->peers[r].failed) {
            marks[r - lo] = 0;
            continue;
        }
        int src = flush_send(ctx, r, FLUSH_MARK, m);
        if (src == FERRY_OK) {
            marks[r - lo] = m | MARK_SENT;
            ctx->api->flush_sent_ns[r] = rt_now_coarse_ns();
        }
        else if (src == FERRY_ERR_NO_RESOURCE)
            rc = src;
        else
            marks[r - lo] = 0; /* the path is gone: the peer fails */
    }
    return rc;
}

/* A peer that has not answered a marker sent FERRY_FLUSH_TIMEOUT ago (its
 * path swallows what it is sent, or it stopped progressing) is taken as
 * failed: nothing else would end the wait, when no put or get is in flight
 * for the transport's own deadlines to catch. */
static bool flush_overdue(ferry_ctx_t *ctx, int r)
{
    struct api_state *api = ctx->api;
    if (api->flush_timeout_ns == 0 || api->flush_sent_ns[r] == 0 ||
        rt_now_coarse_ns() - api->flush_sent_ns[r] < api->flush_timeout_ns)
        return false;
    char why[160];
    snprintf(why, sizeof(why),
             "rank %d did not answer a flush marker within FERRY_FLUSH_TIMEOUT (%llu ms)", r,
             (unsigned long long)(api->flush_timeout_ns / 1000000u));
    btl_ctx_fail_peer(ctx, r, FERRY_ERR_TIMEOUT, "ferry", why);
    return true;
}

/* Every marker answered (or its peer failed)? FERRY_ERR_UNREACH when one
 * failed, FERRY_ERR_TIMEOUT when one is overdue (its peer is then failed). */
static bool flush_marks_done(ferry_ctx_t *ctx, int lo, int hi, const uint64_t *marks, int *rc)
{
    bool done = true;
    for (int r = lo; r < hi; r++) {
        uint64_t m = marks[r - lo];
        if (m == 0 || ctx->api->flush_acked[r] >= (m & ~MARK_SENT))
            continue;
        if (ctx->peers[r].failed) {
            if (*rc == FERRY_OK)
                *rc = FERRY_ERR_UNREACH;
            continue;
        }
        if ((m & MARK_SENT) != 0 && flush_overdue(ctx, r)) {
            *rc = FERRY_ERR_TIMEOUT;
            continue;
        }
        done = false;
    }
    return done;
}

static bool nothing_in_flight(const ferry_ctx_t *ctx, int lo, int hi)
{
    for (int r = lo; r < hi; r++)
        if (ctx->api->outstanding[r] > 0)
            return false;
    return true;
}

static int wait_step(ferry_ctx_t *ctx, unsigned *idle)
{
    int rc = ferry_progress(ctx);
    if (rc < 0)
        return rc;
    if (rc == 0)
        rt_idle(idle);
    else
        *idle = 0;
    return FERRY_OK;
}

int api_flush_wait(ferry_ctx_t *ctx, int lo, int hi, bool ams)
{
    unsigned idle = 0;
    int rc = FERRY_OK;
    for (int r = lo; r < hi; r++)
        while (ctx->api->outstanding[r] > 0)
            if ((rc = wait_step(ctx, &idle)) != FERRY_OK)
                return rc;
    if (!ams)
        return FERRY_OK;
    bool any = false;
    for (int r = lo; r < hi && !any; r++)
        any = ctx->api->am_dirty[r];
    if (!any)
        return FERRY_OK;
    uint64_t one, *marks = hi - lo == 1 ? &one : malloc((size_t)(hi - lo) * sizeof(*marks));
    if (marks == NULL)
        return FERRY_ERR_NO_MEMORY;
    flush_mark(ctx, lo, hi, marks);
    int status = FERRY_OK;
    while (flush_send_marks(ctx, lo, hi, marks) == FERRY_ERR_NO_RESOURCE ||
           !flush_marks_done(ctx, lo, hi, marks, &status))
        if ((rc = wait_step(ctx, &idle)) != FERRY_OK)
            break;
    if (marks != &one)
        free(marks);
    return rc != FERRY_OK ? rc : status;
}

int ferry_flush_nb(ferry_ctx_t *ctx, int dst, const ferry_op_params_t *p)
{
    if (!api_ctx_live(ctx) || ctx->api == NULL || dst < -1 || dst >= ctx->size)
        return FERRY_ERR_INVALID;
    ferry_req_t *req = req_new(ctx, p != NULL ? p->cb : NULL, p != NULL ? p->arg : NULL,
                               p != NULL && p->req_out != NULL);
    if (req == NULL)
        return FERRY_ERR_NO_MEMORY;
    req->kind = REQ_FLUSH;
    req->lo = dst < 0 ? 0 : dst;
    req->hi = dst < 0 ? ctx->size : dst + 1;
    req->marks = calloc((size_t)(req->hi - req->lo), sizeof(*req->marks));
    if (req->marks == NULL)
        return req_abandon(ctx, req, FERRY_ERR_NO_MEMORY);
    /* Progress completes it, also when there is nothing to wait for, so
     * that its callback never runs in here. */
    util_list_append(&ctx->api->flushes, &req->link);
    return req_started(p, req);
}

/* Advances a non-blocking flush; true when it completed. */
static bool flush_nb_step(ferry_ctx_t *ctx, ferry_req_t *req)
{
    struct api_state *api = ctx->api;
    if (!req->marked) {
        if (!nothing_in_flight(ctx, req->lo, req->hi))
            return false;
        flush_mark(ctx, req->lo, req->hi, req->marks);
        req->marked = true;
    }
    int status = FERRY_OK;
    if (flush_send_marks(ctx, req->lo, req->hi, req->marks) == FERRY_ERR_NO_RESOURCE ||
        !flush_marks_done(ctx, req->lo, req->hi, req->marks, &status))
        return false;
    for (int r = req->lo; r < req->hi; r++) {
        if (api->first_error[r] != FERRY_OK && status == FERRY_OK)
            status = api->first_error[r];
        api->first_error[r] = FERRY_OK;
    }
    util_list_remove(&api->flushes, &req->link);
    api_req_complete(ctx, req, status);
    return true;
}

/* ---- progress, set-up and teardown ---- */

int api_onesided_progress(ferry_ctx_t *ctx)
{
    struct api_state *api = ctx->api;
    int events = 0;
    util_list_item_t *it, *next;

    if (api->cbq_count > 0)
        events += cbq_drain(ctx);
    if (!util_list_empty(&api->amo_q))
        events += amo_drain(ctx);
    if (!util_list_empty(&api->amo_sent) && ctx->n_failed != api->amo_failed_seen) {
        api->amo_failed_seen = ctx->n_failed;
        events += amo_sent_fail_dead(ctx);
    }
    while ((it = util_list_first(&api->notify_q)) != NULL) {
        api_notify_t *n = UTIL_CONTAINER_OF(it, api_notify_t, link);
        util_list_remove(&api->notify_q, it);
        if (notify_send(ctx, n) == FERRY_ERR_NO_RESOURCE) {
            util_list_prepend(&api->notify_q, it);
            break;
        }
        events++;
    }
    if (api->n_owed_hint) {
        api->n_owed_hint = false;
        for (int r = 0; r < ctx->size; r++) {
            if (api->ack_owed[r] == 0)
                continue;
            if (!ctx->peers[r].failed &&
                (api_cbq_waiting(ctx, r) ||
                 flush_send(ctx, r, FLUSH_ANSWER, api->ack_owed[r]) == FERRY_ERR_NO_RESOURCE)) {
                api->n_owed_hint = true;
                continue;
            }
            api->ack_owed[r] = 0;
            events++;
        }
    }
    for (it = util_list_first(&api->flushes); it != NULL; it = next) {
        next = it->next != &api->flushes.head ? it->next : NULL;
        if (flush_nb_step(ctx, UTIL_CONTAINER_OF(it, ferry_req_t, link)))
            events++;
    }
    while ((it = util_list_pop_front(&api->req_due)) != NULL) {
        ferry_req_t *req = UTIL_CONTAINER_OF(it, ferry_req_t, link);
        ctx->in_callback++;
        req->cb(req->arg, req->status);
        ctx->in_callback--;
        req->cb_pending = false;
        req_maybe_free(ctx, req);
        events++;
    }
    return events;
}

int api_onesided_init(ferry_ctx_t *ctx)
{
    struct api_state *api = ctx->api;
    size_t n = (size_t)ctx->size;
    recycler_init(&api->reqs, sizeof(ferry_req_t));
    recycler_init(&api->rkeys, sizeof(ferry_rkey_h));
    util_list_init(&api->req_due);
    util_list_init(&api->flushes);
    util_list_init(&api->notify_q);
    util_list_init(&api->amo_q);
    util_list_init(&api->amo_sent);
    int rc = api_onesided_register_params(ctx, &api->cbq_max, &api->flush_timeout_ns);
    if (rc != FERRY_OK)
        return rc;
    api->cbq = calloc(n, sizeof(*api->cbq));
    if (api->cbq == NULL)
        return FERRY_ERR_NO_MEMORY;
    for (size_t r = 0; r < n; r++)
        util_list_init(&api->cbq[r]);
    api->slots = calloc(n, sizeof(*api->slots));
    api->am_dirty = calloc(n, sizeof(*api->am_dirty));
    api->flush_sent = calloc(n, sizeof(*api->flush_sent));
    api->flush_acked = calloc(n, sizeof(*api->flush_acked));
    api->flush_sent_ns = calloc(n, sizeof(*api->flush_sent_ns));
    api->ack_owed = calloc(n, sizeof(*api->ack_owed));
    if (api->slots == NULL || api->am_dirty == NULL || api->flush_sent == NULL ||
        api->flush_acked == NULL || api->ack_owed == NULL || api->flush_sent_ns == NULL)
        return FERRY_ERR_NO_MEMORY;
    for (int r = 0; r < ctx->size; r++) {
        api->slots[r].ctx = ctx;
        api->slots[r].rank = r;
    }
    return FERRY_OK;
}

void api_onesided_fini(ferry_ctx_t *ctx)
{
    struct api_state *api = ctx->api;
    util_list_item_t *it;
    if (api->cbq != NULL) {
        for (int r = 0; r < ctx->size; r++)
            while ((it = util_list_pop_front(&api->cbq[r])) != NULL)
                free(UTIL_CONTAINER_OF(it, api_cbq_msg_t, link));
        free(api->cbq);
        api->cbq = NULL;
    }
    if (api->slots != NULL) {
        while ((it = util_list_pop_front(&api->amo_q)) != NULL) {
            api_amo_wait_t *w = UTIL_CONTAINER_OF(it, api_amo_wait_t, link);
            amo_done(NULL, NULL, NULL, NULL, &api->slots[w->dst], w->req, FERRY_ERR_CANCELED);
            free(w);
        }
        while ((it = util_list_first(&api->amo_sent)) != NULL)
            amo_sent_done(ctx, UTIL_CONTAINER_OF(it, api_amo_sent_t, link), FERRY_ERR_CANCELED);
        /* What never left is canceled; callbacks due still run. */
        while ((it = util_list_pop_front(&api->notify_q)) != NULL)
            notify_finish(ctx, UTIL_CONTAINER_OF(it, api_notify_t, link), FERRY_ERR_CANCELED);
        while ((it = util_list_pop_front(&api->flushes)) != NULL)
            api_req_complete(ctx, UTIL_CONTAINER_OF(it, ferry_req_t, link), FERRY_ERR_CANCELED);
        while ((it = util_list_pop_front(&api->req_due)) != NULL) {
            ferry_req_t *req = UTIL_CONTAINER_OF(it, ferry_req_t, link);
            ctx->in_callback++;
            req->cb(req->arg, req->status);
            ctx->in_callback--;
        }
        /* The marker arrays of requests still held go with their memory. */
        for (it = util_list_first(&api->reqs.all); it != NULL;
             it = it->next != &api->reqs.all.head ? it->next : NULL) {
            ferry_req_t *req = (ferry_req_t *)UTIL_CONTAINER_OF(it, api_obj_t, all);
            free(req->marks);
        }
    }
    recycler_fini(&api->reqs);
    recycler_fini(&api->rkeys);
    free(api->slots);
    free(api->am_dirty);
    free(api->flush_sent);
    free(api->flush_acked);
    free(api->flush_sent_ns);
    free(api->ack_owed);
    api->slots = NULL;
}
