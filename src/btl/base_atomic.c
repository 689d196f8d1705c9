/*
 * Remote atomics executed by the target (base_atomic.h says how).
 */
#include "btl/base_atomic.h"

#include <stdlib.h>
#include <string.h>

#include "rt/progress.h"

/* One atomic of ours in flight on the generic path. */
struct btl_amo_op {
    util_list_item_t link; /* in its endpoint's inflight, then the module's completed */
    uint64_t cookie;
    ferry_btl_endpoint_t *ep;
    void *local; /* where the value before goes (fetching ones), or NULL */
    ferry_btl_reg_t *lreg;
    bool w32;
    bool expired; /* completed at its deadline: its answer is dropped */
    int status;
    uint64_t deadline_ns;
    ferry_btl_rdma_cb_t cb;
    void *cbctx, *cbdata;
};

int btl_amo_register_params(ferry_ctx_t *ctx, size_t *slots_out)
{
    return rt_param_register_size(&ctx->params, "btl_atomic_slots", 64, 1, 1u << 16,
                                  "Atomics executed by the target that one rank may have in "
                                  "flight to one peer (and answers a target keeps for it)",
                                  slots_out);
}

void btl_amo_module_init(btl_amo_module_t *am, const btl_amo_hooks_t *hooks, size_t slots)
{
    am->hooks = hooks;
    util_list_init(&am->completed);
    /* Nothing allocated before the first atomic, and fixed parameters:
     * this cannot fail. */
    util_pool_params_t pp = {.name = "atomics executed by the target",
                             .elem_size = sizeof(btl_amo_op_t),
                             .increment = 16};
    (void)util_pool_init(&am->ops, &pp);
    am->slots = slots;
    am->next_cookie = 0;
}

static void ep_lists(btl_amo_ep_t *aep)
{
    if (!aep->listed) {
        util_list_init(&aep->inflight);
        aep->listed = true;
    }
}

int btl_amo_start(ferry_btl_module_t *btl, btl_amo_module_t *am, ferry_btl_endpoint_t *ep,
                  void *local, ferry_btl_reg_t *lreg, uint64_t raddr, const uint8_t *rkey,
                  uint32_t op, uint64_t operand, uint64_t compare, uint32_t flags, bool cswap,
                  bool fetch, ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    if (btl == NULL || ep == NULL || rkey == NULL || (fetch && local == NULL))
        return FERRY_ERR_INVALID;
    int rc = btl_base_atomic_check(btl, op, cswap, raddr, flags);
    if (rc != FERRY_OK)
        return rc;
    btl_amo_ep_t *aep = am->hooks->ep_state(ep);
    ep_lists(aep);
    if (aep->ninflight + aep->nexpired >= am->slots)
        return FERRY_ERR_NO_RESOURCE;
    btl_amo_op_t *o = util_pool_get(&am->ops);
    if (o == NULL)
        return FERRY_ERR_NO_MEMORY;
    bool w32 = (flags & FERRY_BTL_ATOMIC_FLAG_32BIT) != 0;
    *o = (btl_amo_op_t){.cookie = ++am->next_cookie,
                        .ep = ep,
                        .local = fetch ? local : NULL,
                        .lreg = lreg,
                        .w32 = w32,
                        .cb = cb,
                        .cbctx = cbctx,
                        .cbdata = cbdata,
                        .deadline_ns = am->timeout_ns > 0 ? rt_now_coarse_ns() + am->timeout_ns
                                                          : UINT64_MAX};
    btl_amo_msg_t m = {.magic = BTL_AMO_MAGIC,
                       .kind = BTL_AMO_REQ,
                       .op = (uint16_t)(cswap ? 0 : op),
                       .flags = (w32 ? FERRY_BTL_ATOMIC_FLAG_32BIT : 0) |
                                (cswap ? BTL_AMO_CSWAP : 0) | (fetch ? BTL_AMO_FETCH : 0),
                       .cookie = o->cookie,
                       .raddr = raddr,
                       .operand = w32 ? (uint32_t)operand : operand,
                       .compare = w32 ? (uint32_t)compare : compare};
    size_t klen = btl->attr.reg_handle_size;
    if (klen == 16) /* sm's and tcp's keys: a copy of two words, not a call */
        memcpy(m.key, rkey, 16);
    else
        memcpy(m.key, rkey, klen <= sizeof(m.key) ? klen : sizeof(m.key));
    rc = am->hooks->send(btl, ep, &m);
    if (rc != FERRY_OK) {
        util_pool_put(&am->ops, o);
        return rc;
    }
    util_list_append(&aep->inflight, &o->link);
    aep->ninflight++;
    return FERRY_OK;
}

/* Executes a checked request against our memory; the answer's status and
 * value. */
static void execute(ferry_btl_module_t *btl, btl_amo_module_t *am, const btl_amo_msg_t *req,
                    btl_amo_msg_t *ans)
{
    bool w32 = (req->flags & FERRY_BTL_ATOMIC_FLAG_32BIT) != 0;
    bool cswap = (req->flags & BTL_AMO_CSWAP) != 0;
    /* Our own module's flags say what we execute: what we do not offer is
     * refused as the initiator's check would have. */
    int st = btl_base_atomic_check(btl, req->op, cswap, req->raddr,
                                   req->flags & FERRY_BTL_ATOMIC_FLAG_32BIT);
    void *p = NULL;
    if (st == FERRY_OK)
        st = am->hooks->resolve(btl, req->key, req->raddr, w32 ? 4 : 8,
                                FERRY_ACCESS_REMOTE_ATOMIC, &p);
    ans->status = st;
    if (st != FERRY_OK) {
        rt_log(&btl->ctx->log, RT_LOG_DEBUG, "%s: atomic at 0x%llx refused: %s",
               btl->attr.name, (unsigned long long)req->raddr, ferry_strerror(st));
        return;
    }
    ans->operand = ferry_btl_atomic_apply(p, w32, cswap, req->op, req->operand, req->compare);
}

static bool owed_full(const btl_amo_module_t *am, const btl_amo_ep_t *aep)
{
    return aep->nowed >= am->slots;
}

int btl_amo_target(ferry_btl_module_t *btl, btl_amo_module_t *am, ferry_btl_endpoint_t *ep,
                   const void *msg, size_t len)
{
    btl_amo_msg_t req;
    if (len != sizeof(req))
        return FERRY_ERR_PROTO;
    memcpy(&req, msg, sizeof(req));
    const uint32_t known = FERRY_BTL_ATOMIC_FLAG_32BIT | BTL_AMO_CSWAP | BTL_AMO_FETCH;
    if (req.magic != BTL_AMO_MAGIC || req.kind != BTL_AMO_REQ || req.status != 0 ||
        (req.flags & ~known) != 0 || ((req.flags & BTL_AMO_CSWAP) && req.op != 0))
        return FERRY_ERR_PROTO;
    btl_amo_ep_t *aep = am->hooks->ep_state(ep);
    ep_lists(aep);
    if (owed_full(am, aep))
        return 0; /* past its budget: back pressure */
    if (aep->nowed > 0) {
        /* Answers go out in order: behind those still owed. */
        int rc = btl_amo_send_owed(btl, am, ep);
        if (rc < 0)
            return rc;
    }
    btl_amo_msg_t ans = {.magic = BTL_AMO_MAGIC, .kind = BTL_AMO_ANSWER, .cookie = req.cookie};
    execute(btl, am, &req, &ans);
    int rc = aep->nowed == 0 ? am->hooks->send(btl, ep, &ans) : FERRY_ERR_NO_RESOURCE;
    if (rc == FERRY_ERR_NO_RESOURCE) {
        if (aep->owed == NULL) {
            /* Once per peer, never per request. */
            aep->owed = calloc(am->slots, sizeof(*aep->owed));
            if (aep->owed == NULL)
                return FERRY_ERR_NO_MEMORY;
        }
        aep->owed[(aep->owed_head + aep->nowed) % am->slots] = ans;
        aep->nowed++;
        return 1;
    }
    return rc == FERRY_OK ? 1 : rc;
}

int btl_amo_send_owed(ferry_btl_module_t *btl, btl_amo_module_t *am, ferry_btl_endpoint_t *ep)
{
    btl_amo_ep_t *aep = am->hooks->ep_state(ep);
    int n = 0;
    while (aep->nowed > 0) {
        int rc = am->hooks->send(btl, ep, &aep->owed[aep->owed_head]);
        if (rc == FERRY_ERR_NO_RESOURCE)
            break;
        if (rc != FERRY_OK)
            return rc;
        aep->owed_head = (aep->owed_head + 1) % (uint32_t)am->slots;
        aep->nowed--;
        n++;
    }
    return n;
}

int btl_amo_answer(ferry_btl_module_t *btl, btl_amo_module_t *am, ferry_btl_endpoint_t *ep,
                   const void *msg, size_t len)
{
    btl_amo_msg_t ans;
    if (len != sizeof(ans))
        return FERRY_ERR_PROTO;
    memcpy(&ans, msg, sizeof(ans));
    if (ans.magic != BTL_AMO_MAGIC || ans.kind != BTL_AMO_ANSWER || ans.flags != 0 ||
        ans.op != 0 || ans.status > 0 || ans.status <= FERRY_ERR_LAST)
        return FERRY_ERR_PROTO;
    btl_amo_ep_t *aep = am->hooks->ep_state(ep);
    ep_lists(aep);
    /* Answers come in the order of the requests over an ordered channel;
     * the search only guards against a peer that breaks that. */
    btl_amo_op_t *o = NULL;
    for (util_list_item_t *it = util_list_first(&aep->inflight); it != NULL;
         it = util_list_next(&aep->inflight, it)) {
        btl_amo_op_t *x = UTIL_CONTAINER_OF(it, btl_amo_op_t, link);
        if (x->cookie == ans.cookie) {
            o = x;
            break;
        }
    }
    if (o == NULL)
        return FERRY_ERR_PROTO;
    if (ans.status == FERRY_OK && o->w32 && ans.operand > UINT32_MAX)
        return FERRY_ERR_PROTO;
    util_list_remove(&aep->inflight, &o->link);
    if (o->expired) {
        /* Reported as timed out already: the late answer only frees the slot. */
        aep->nexpired--;
        util_pool_put(&am->ops, o);
        return 1;
    }
    aep->ninflight--;
    if (ans.status == FERRY_OK && o->local != NULL)
        btl_atomic_store_result(o->local, o->w32, ans.operand);
    /* Done with o before its callback, which may start others. */
    btl_amo_op_t done = *o;
    util_pool_put(&am->ops, o);
    if (done.cb != NULL)
        done.cb(btl, done.ep, done.local, done.lreg, done.cbctx, done.cbdata, ans.status);
    return 1;
}

int btl_amo_progress(ferry_btl_module_t *btl, btl_amo_module_t *am)
{
    if (am->hooks == NULL || util_list_empty(&am->completed))
        return 0;
    /* Only what completed before this call: callbacks that start atomics
     * that complete at once see them run at the next call. */
    util_list_t batch;
    util_list_init(&batch);
    util_list_item_t *it;
    while ((it = util_list_pop_front(&am->completed)) != NULL)
        util_list_append(&batch, it);
    int n = 0;
    while ((it = util_list_pop_front(&batch)) != NULL) {
        btl_amo_op_t *o = UTIL_CONTAINER_OF(it, btl_amo_op_t, link);
        if (o->cb != NULL)
            o->cb(btl, o->ep, o->local, o->lreg, o->cbctx, o->cbdata, o->status);
        util_pool_put(&am->ops, o);
        n++;
    }
    return n;
}

/* o completes with status now, in a record of its own; o stays for the
 * answer, which must find it (and may not write into local). false when no
 * record is left. */
static bool expire_one(btl_amo_module_t *am, btl_amo_ep_t *aep, btl_amo_op_t *o, int status)
{
    btl_amo_op_t *c = util_pool_get(&am->ops);
    if (c == NULL)
        return false;
    *c = *o;
    c->status = status;
    util_list_append(&am->completed, &c->link);
    o->expired = true;
    o->local = NULL;
    o->cb = NULL;
    aep->ninflight--;
    aep->nexpired++;
    return true;
}

size_t btl_amo_expire(btl_amo_module_t *am, btl_amo_ep_t *aep, uint64_t now)
{
    if (!aep->listed || aep->ninflight == 0)
        return 0;
    size_t n = 0;
    for (util_list_item_t *it = util_list_first(&aep->inflight); it != NULL;
         it = util_list_next(&aep->inflight, it)) {
        btl_amo_op_t *o = UTIL_CONTAINER_OF(it, btl_amo_op_t, link);
        if (o->expired)
            continue;
        if (o->deadline_ns > now)
            break; /* sent in order, with one timeout: the rest are later */
        if (!expire_one(am, aep, o, FERRY_ERR_TIMEOUT))
            break; /* tried again at the next call */
        n++;
    }
    return n;
}

/* Completes every atomic in flight to aep with status. keep: each stays,
 * expired, for its answer (when a record for its completion is left). */
static void end_inflight(btl_amo_module_t *am, btl_amo_ep_t *aep, int status, bool keep)
{
    util_list_item_t *it = util_list_first(&aep->inflight);
    while (it != NULL) {
        btl_amo_op_t *o = UTIL_CONTAINER_OF(it, btl_amo_op_t, link);
        it = util_list_next(&aep->inflight, it);
        /* Expired ones completed already and are kept for their answers. */
        if (o->expired || (keep && expire_one(am, aep, o, status)))
            continue;
        util_list_remove(&aep->inflight, &o->link);
        o->status = status;
        util_list_append(&am->completed, &o->link);
        aep->ninflight--;
    }
}

void btl_amo_ep_forget(btl_amo_module_t *am, btl_amo_ep_t *aep, int status)
{
    /* Without a record for its completion, one goes itself, and its
     * answer, should it come, is taken for a protocol error. */
    if (aep->listed)
        end_inflight(am, aep, status, true);
}

void btl_amo_ep_fail(btl_amo_module_t *am, btl_amo_ep_t *aep, int status)
{
    if (!aep->listed)
        return;
    end_inflight(am, aep, status, false);
    aep->nowed = 0;
    aep->owed_head = 0;
}

void btl_amo_ep_fini(btl_amo_module_t *am, btl_amo_ep_t *aep)
{
    btl_amo_ep_fail(am, aep, FERRY_ERR_CANCELED);
    util_list_item_t *it;
    while (aep->listed && (it = util_list_pop_front(&aep->inflight)) != NULL)
        util_pool_put(&am->ops, UTIL_CONTAINER_OF(it, btl_amo_op_t, link));
    aep->nexpired = 0;
    free(aep->owed);
    aep->owed = NULL;
}

void btl_amo_module_fini(ferry_btl_module_t *btl, btl_amo_module_t *am)
{
    if (am->hooks == NULL)
        return;
    btl_amo_progress(btl, am);
    util_pool_fini(&am->ops);
}
