/*
 * The transports of a context: which to open (and which modules to load for
 * them), opening them, the path to each peer, progress and teardown.
 */
#include "btl/ctx.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/bitmap.h"

#define HOST_KEY "ferry.host"

/* Is the name, len bytes long, in the comma-separated list? */
static bool list_has(const char *list, const char *name, size_t n)
{
    for (const char *p = list; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p += len + (end != NULL ? 1 : 0);
    }
    return false;
}

static const btl_component_entry_t *find_entry(const char *name, size_t len)
{
    for (const btl_component_entry_t *e = btl_component_table; e->name != NULL; e++)
        if (strlen(e->name) == len && strncmp(name, e->name, len) == 0)
            return e;
    return NULL;
}

/* Every name in the list must be a transport of the table. source names
 * where the list came from (the variable or the init parameter), for the
 * message. */
static int check_list(ferry_ctx_t *ctx, const char *list, const char *source)
{
    for (const char *p = list; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (find_entry(p, len) == NULL) {
            char built[256] = "";
            for (const btl_component_entry_t *e = btl_component_table; e->name != NULL; e++) {
                if (e != btl_component_table)
                    strncat(built, ",", sizeof(built) - strlen(built) - 1);
                strncat(built, e->name, sizeof(built) - strlen(built) - 1);
            }
            /* The value may be anything; at most 64 characters of it are shown. */
            const char *more = strlen(list) > 64 ? "..." : "";
            if (len == 0)
                rt_log(&ctx->log, RT_LOG_ERROR,
                       "%s='%.64s%s': an empty transport name (expected a comma list of: %s)",
                       source, list, more, built);
            else
                rt_log(&ctx->log, RT_LOG_ERROR,
                       "%s='%.64s%s': transport '%.*s%s' is not built (built: %s)", source,
                       list, more, (int)(len < 64 ? len : 64), p, len > 64 ? "..." : "", built);
            return FERRY_ERR_INVALID;
        }
        p += len + (end != NULL ? 1 : 0);
    }
    return FERRY_OK;
}

/* Does any device the module is for exist here? */
static bool hardware_present(const btl_component_entry_t *e)
{
    for (const char *const *pat = e->hardware; pat != NULL && *pat != NULL; pat++) {
        glob_t g;
        int rc = glob(*pat, GLOB_NOSORT, NULL, &g);
        size_t n = rc == 0 ? g.gl_pathc : 0;
        if (rc == 0 || rc == GLOB_NOMATCH)
            globfree(&g);
        if (n > 0)
            return true;
    }
    return false;
}

static int load_module(ferry_ctx_t *ctx, btl_slot_t *slot, const char *named_in)
{
    char why[RT_MODULE_WHY_MAX];
    const btl_component_entry_t *e = slot->entry;
    int rc = rt_module_load(ctx->param_module_path, e->module, "btl", e->name, &slot->module,
                            why);
    if (rc == FERRY_OK) {
        slot->comp = slot->module.info->entry;
        rt_log(&ctx->log, RT_LOG_DEBUG, "transport %s: loaded %s", e->name, slot->module.path);
        return FERRY_OK;
    }
    slot->load_status = rc;
    slot->why_not = strdup(why);
    if (named_in != NULL)
        rt_log(&ctx->log, RT_LOG_ERROR, "transport %s, named in %s, cannot be used: %s",
               e->name, named_in, why);
    else
        rt_log(&ctx->log, RT_LOG_INFO, "transport %s not used: %s", e->name, why);
    return rc;
}

int btl_ctx_select(ferry_ctx_t *ctx, const char *list, unsigned flags)
{
    int rc = rt_param_register_string(&ctx->params, "btl", "",
                                      "Transports to use, comma separated (self is always "
                                      "used); empty: those built into the library, and each "
                                      "module whose hardware is present",
                                      &ctx->param_btl);
    if (rc == FERRY_OK)
        rc = rt_module_register_params(&ctx->params, &ctx->param_module_path);
    if (rc != FERRY_OK)
        return rc;
    const char *source = list != NULL ? "ferry_init_params_t.transports" : "FERRY_BTL";
    if (list == NULL)
        list = ctx->param_btl;
    if ((rc = check_list(ctx, list, source)) != FERRY_OK)
        return rc;

    int n = 0;
    while (btl_component_table[n].name != NULL)
        n++;
    ctx->slots = calloc((size_t)n + 1, sizeof(*ctx->slots));
    if (ctx->slots == NULL)
        return FERRY_ERR_NO_MEMORY;
    ctx->n_slots = n;
    for (int i = 0; i < n; i++) {
        btl_slot_t *slot = &ctx->slots[i];
        const btl_component_entry_t *e = &btl_component_table[i];
        bool named = list_has(list, e->name, strlen(e->name));
        slot->entry = e;
        slot->comp = e->builtin;
        /* A transport that comes as a module (its code built into the
         * static library, or a module file for the shared one) is taken
         * only when named, or with FERRY_BTL empty when a device it is for
         * is here: no program opens a fabric it has no device for. */
        if ((e->builtin == NULL || e->hardware != NULL) && !named &&
            (flags & BTL_CTX_ALL_MODULES) == 0 &&
            !(list[0] == '\0' && hardware_present(e))) {
            slot->comp = NULL;
            slot->load_status = FERRY_ERR_NOT_FOUND;
            const char *why = e->builtin != NULL
                                  ? (list[0] == '\0'
                                         ? "built in, not opened: no device it is for was found "
                                           "here (FERRY_BTL naming it opens it)"
                                         : "built in, not opened: FERRY_BTL does not name it")
                                  : (list[0] == '\0'
                                         ? "not loaded: no device it is for was found here "
                                           "(FERRY_BTL naming it loads it)"
                                         : "not loaded: FERRY_BTL does not name it");
            slot->why_not = strdup(why);
            rt_log(&ctx->log, RT_LOG_DEBUG, "transport %s %s", e->name, why);
            continue;
        }
        if (e->builtin == NULL) {
            rc = load_module(ctx, slot, named ? source : NULL);
            if (rc == FERRY_ERR_NO_MEMORY || (rc != FERRY_OK && named))
                return rc == FERRY_ERR_NO_MEMORY ? rc : FERRY_ERR_NOT_SUPPORTED;
            if (rc != FERRY_OK)
                continue;
        }
        slot->wanted = list[0] == '\0' || named || slot->comp->always_open;
    }
    /* Every transport's parameters are declared and checked, used or not,
     * so that ferry_info -a lists them and a bad value is never ignored. A
     * module not loaded declares none here: its variables (FERRY_OFI_* for
     * ofi) are left alone by the check for misspelt ones, so that a user's
     * setting for it is not reported as unknown. */
    for (int i = 0; i < n; i++) {
        const ferry_btl_component_t *comp = ctx->slots[i].comp;
        if (comp != NULL)
            rc = comp->register_params(ctx);
        else
            rc = rt_params_skip_prefix(&ctx->params, ctx->slots[i].entry->name);
        if (rc != FERRY_OK)
            return rc;
    }
    return FERRY_OK;
}

int btl_ctx_open(ferry_ctx_t *ctx)
{
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    int rc = rt_modex_put(ctx->modex, HOST_KEY, host, strlen(host));
    if (rc != FERRY_OK)
        return rc;
    for (int i = 0; i < ctx->n_slots; i++) {
        const ferry_btl_component_t *comp = ctx->slots[i].comp;
        if (comp == NULL || !ctx->slots[i].wanted)
            continue;
        ferry_btl_module_t **mods = NULL;
        int n = 0;
        rc = comp->open(ctx, &mods, &n);
        if (rc == FERRY_ERR_INVALID)
            return rc; /* a bad parameter: the user must hear of it */
        if (rc != FERRY_OK) {
            rt_log(&ctx->log, RT_LOG_INFO, "transport %s not used: %s", comp->name,
                   ferry_strerror(rc));
            continue;
        }
        if (n > 0) {
            ferry_btl_module_t **all =
                realloc(ctx->modules, (size_t)(ctx->n_modules + n) * sizeof(*all));
            if (all == NULL) {
                for (int k = 0; k < n; k++)
                    mods[k]->ops->finalize(mods[k]);
                free(mods);
                return FERRY_ERR_NO_MEMORY;
            }
            ctx->modules = all;
            memcpy(ctx->modules + ctx->n_modules, mods, (size_t)n * sizeof(*mods));
            ctx->n_modules += n;
        }
        free(mods);
    }
    return FERRY_OK;
}

/* ---- failures and control messages ---- */

struct btl_ctrl_item {
    int dst;
    btl_ctrl_msg_t msg;
};

int btl_ctx_send_des(ferry_ctx_t *ctx, btl_peer_t *peer, uint8_t tag, const void *hdr,
                     size_t hlen, const void *payload, size_t plen)
{
    ferry_btl_module_t *btl = ctx->modules[peer->module_idx];
    ferry_btl_desc_t *des;
    int rc = btl->ops->alloc(btl, peer->ep, hlen + plen, FERRY_BTL_DES_OWNERSHIP, &des);
    if (rc != FERRY_OK)
        return rc;
    char *p = ferry_btl_seg_ptr(&des->src[0]);
    if (hlen > 0)
        memcpy(p, hdr, hlen);
    if (plen > 0)
        memcpy(p + hlen, payload, plen);
    des->cbfunc = NULL;
    rc = btl->ops->send(btl, peer->ep, des, tag);
    if (rc != FERRY_OK)
        btl->ops->free(btl, des);
    return rc;
}

static int ctrl_queue(ferry_ctx_t *ctx, int dst, const btl_ctrl_msg_t *msg)
{
    if (ctx->ctrl_len == ctx->ctrl_cap) {
        size_t cap = ctx->ctrl_cap != 0 ? ctx->ctrl_cap * 2 : 16;
        struct btl_ctrl_item *q = realloc(ctx->ctrl_q, cap * sizeof(*q));
        if (q == NULL)
            return FERRY_ERR_NO_MEMORY;
        ctx->ctrl_q = q;
        ctx->ctrl_cap = cap;
    }
    ctx->ctrl_q[ctx->ctrl_len].dst = dst;
    ctx->ctrl_q[ctx->ctrl_len].msg = *msg;
    ctx->ctrl_len++;
    return FERRY_OK;
}

/* Queues msg to every rank but this one whose path from here still works. */
static void ctrl_tell_all(ferry_ctx_t *ctx, const btl_ctrl_msg_t *msg)
{
    for (int r = 0; r < ctx->size; r++) {
        if (r == ctx->rank || ctx->peers[r].module_idx < 0 || ctx->peers[r].path_down)
            continue;
        if (ctrl_queue(ctx, r, msg) != FERRY_OK) {
            rt_log(&ctx->log, RT_LOG_ERROR,
                   "out of memory queueing a control message to rank %d: it may not learn "
                   "of a failure from this rank",
                   r);
            return;
        }
    }
}

/* Hands queued control messages to the transports, in order per
 * destination; those a transport cannot take yet stay queued. Messages to a
 * rank whose path broke are dropped. Returns how many went. */
static int __attribute__((noinline)) ctrl_drain(ferry_ctx_t *ctx)
{
    if (ctx->ctrl_blocked == NULL)
        return 0;
    memset(ctx->ctrl_blocked, 0, (size_t)ctx->size);
    size_t keep = 0;
    int sent = 0;
    for (size_t i = 0; i < ctx->ctrl_len; i++) {
        struct btl_ctrl_item *it = &ctx->ctrl_q[i];
        if (ctx->peers[it->dst].path_down)
            continue;
        int rc = FERRY_ERR_NO_RESOURCE;
        if (!ctx->ctrl_blocked[it->dst])
            rc = btl_ctx_send_small(ctx, it->dst, BTL_CTX_TAG_CTRL, &it->msg, sizeof(it->msg));
        if (rc == FERRY_OK) {
            sent++;
            continue;
        }
        if (rc != FERRY_ERR_NO_RESOURCE) {
            /* The transport reports the failure of the path itself. */
            rt_log(&ctx->log, RT_LOG_DEBUG, "control message to rank %d not sent: %s", it->dst,
                   ferry_strerror(rc));
            continue;
        }
        ctx->ctrl_blocked[it->dst] = 1;
        ctx->ctrl_q[keep++] = *it;
    }
    ctx->ctrl_len = keep;
    return sent;
}

/* Marks rank r failed (once), reports it and, when tell is set, tells the
 * other ranks. origin is the rank whose transport saw the failure. */
static void peer_failed(ferry_ctx_t *ctx, int r, int status, int origin, bool tell,
                        const char *transport, const char *msg)
{
    btl_peer_t *peer = &ctx->peers[r];
    if (peer->failed || ctx->closing)
        return;
    peer->failed = true;
    ctx->n_failed++;
    if (tell) {
        btl_ctrl_msg_t m = {
            .magic = BTL_CTX_CTRL_MAGIC, .kind = BTL_CTX_CTRL_FAILED, .rank = r, .origin = origin};
        ctrl_tell_all(ctx, &m);
    }
    if (ctx->error_cb != NULL) {
        ctx->in_callback++;
        ctx->error_cb(ctx, r, status, msg, ctx->error_arg);
        ctx->in_callback--;
    } else {
        rt_log(&ctx->log, RT_LOG_ERROR, "%s: peer failed: %s (%s)", transport, msg,
               ferry_strerror(status));
    }
}

void btl_ctx_fail_peer(ferry_ctx_t *ctx, int r, int status, const char *layer, const char *msg)
{
    if (r < 0 || r >= ctx->size || r == ctx->rank)
        return;
    peer_failed(ctx, r, status, ctx->rank, true, layer, msg);
}

static void on_transport_error(ferry_btl_module_t *btl, int status, int peer, const char *msg,
                               void *cbdata)
{
    ferry_ctx_t *ctx = cbdata;
    if (peer < 0 || peer >= ctx->size) {
        if (ctx->error_cb != NULL) {
            ctx->in_callback++;
            ctx->error_cb(ctx, -1, status, msg, ctx->error_arg);
            ctx->in_callback--;
        } else {
            rt_log(&ctx->log, RT_LOG_ERROR, "%s: transport failed: %s (%s)", btl->attr.name,
                   msg, ferry_strerror(status));
        }
        return;
    }
    btl_peer_t *p = &ctx->peers[peer];
    if (p->departed && !p->failed) {
        p->path_down = true;
        rt_log(&ctx->log, RT_LOG_DEBUG, "%s: rank %d, which finalized, closed: %s",
               btl->attr.name, peer, msg);
        return;
    }
    /* Another path of the same class may take the peer's traffic over
     * (src/bml); without one the peer is gone for this job. */
    int m = btl_ctx_module_index(ctx, btl);
    if (!p->failed && !ctx->closing && m >= 0 && ctx->path_lost != NULL &&
        ctx->path_lost(ctx, peer, m, status, msg))
        return;
    p->path_down = true;
    peer_failed(ctx, peer, status, ctx->rank, true, btl->attr.name, msg);
}

static void ctrl_refuse(ferry_ctx_t *ctx, int src, const char *why)
{
    rt_log_limited(&ctx->log, &ctx->ctrl_bad, RT_LOG_WARN,
                   "control message from rank %d dropped: %s", src, why);
}

/* A control message from rank rd->peer (the transport's word for who sent
 * it, never a field of the message). */
static void on_ctrl(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, void *cbdata)
{
    ferry_ctx_t *ctx = cbdata;
    int src = rd->peer;
    if (src < 0 || src >= ctx->size || ctx->peers == NULL)
        return;
    btl_ctrl_msg_t m;
    size_t len = 0;
    for (unsigned i = 0; i < rd->seg_cnt && len <= sizeof(m); i++)
        len += rd->segs[i].len < sizeof(m) + 1 ? rd->segs[i].len : sizeof(m) + 1;
    if (len != sizeof(m)) {
        ctrl_refuse(ctx, src, "wrong length");
        return;
    }
    size_t off = 0;
    for (unsigned i = 0; i < rd->seg_cnt; i++) {
        memcpy((char *)&m + off, ferry_btl_seg_ptr(&rd->segs[i]), rd->segs[i].len);
        off += rd->segs[i].len;
    }
    if (m.magic != BTL_CTX_CTRL_MAGIC || m.zero != 0) {
        ctrl_refuse(ctx, src, "not a ferry control message");
        return;
    }
    char text[160];
    switch (m.kind) {
    case BTL_CTX_CTRL_DEPART:
        if (m.rank != -1 || m.origin != -1) {
            ctrl_refuse(ctx, src, "malformed departure");
            return;
        }
        ctx->peers[src].departed = true;
        return;
    case BTL_CTX_CTRL_PROBE:
        if (m.rank != -1 || m.origin != -1)
            ctrl_refuse(ctx, src, "malformed probe");
        return;
    case BTL_CTX_CTRL_FAILED:
        if (m.rank < 0 || m.rank >= ctx->size || m.origin < 0 || m.origin >= ctx->size ||
            m.rank == m.origin) {
            ctrl_refuse(ctx, src, "failure notice names no valid pair of ranks");
            return;
        }
        /* Even of a rank that told this one it is finalizing: the sender
         * heard no such word before its path to it broke (the departure
         * comes before the teardown on every path). */
        if (m.rank != ctx->rank) {
            snprintf(text, sizeof(text), "rank %d failed (seen by rank %d, told by rank %d)",
                     (int)m.rank, (int)m.origin, src);
            peer_failed(ctx, m.rank, FERRY_ERR_UNREACH, m.origin, true, "ferry", text);
        } else if (m.origin != ctx->rank) {
            /* The origin's path to this process broke: it counts this rank
             * out and will not answer it any more. */
            snprintf(text, sizeof(text),
                     "rank %d lost its path to this rank and counts it failed (told by rank "
                     "%d)",
                     (int)m.origin, src);
            peer_failed(ctx, m.origin, FERRY_ERR_UNREACH, ctx->rank, false, "ferry", text);
        }
        return;
    default:
        ctrl_refuse(ctx, src, "unknown kind");
        return;
    }
}

int btl_ctx_depart(ferry_ctx_t *ctx)
{
    if (ctx->peers == NULL)
        return FERRY_OK;
    btl_ctrl_msg_t m = {.magic = BTL_CTX_CTRL_MAGIC, .kind = BTL_CTX_CTRL_DEPART, .rank = -1, .origin = -1};
    ctrl_tell_all(ctx, &m);
    return FERRY_OK;
}

bool btl_ctx_depart_done(const ferry_ctx_t *ctx)
{
    for (int r = 0; r < ctx->size; r++)
        if (r != ctx->rank && !ctx->peers[r].departed && !ctx->peers[r].failed)
            return false;
    /* A rank another told us failed may be alive and waiting for our
     * departure (it was failed by a third rank, or it failed that rank):
     * what is queued for any rank whose path still works is handed over
     * before we go; ctrl_drain drops what is queued for broken paths. */
    for (size_t i = 0; i < ctx->ctrl_len; i++)
        if (!ctx->peers[ctx->ctrl_q[i].dst].path_down)
            return false;
    return true;
}

int btl_ctx_add_procs(ferry_ctx_t *ctx, ferry_btl_am_cb_t am_cb)
{
    size_t n = (size_t)ctx->size;
    ferry_btl_proc_t *procs = calloc(n, sizeof(*procs));
    ctx->peers = calloc(n, sizeof(*ctx->peers));
    if (procs == NULL || ctx->peers == NULL) {
        free(procs);
        return FERRY_ERR_NO_MEMORY;
    }
    ctx->ctrl_blocked = calloc(n, 1);
    if (ctx->ctrl_blocked == NULL) {
        free(procs);
        return FERRY_ERR_NO_MEMORY;
    }
    rt_ratelimit_init(&ctx->ctrl_bad, RT_RATELIMIT_BURST, RT_RATELIMIT_INTERVAL_MS);
    char myhost[256] = "";
    gethostname(myhost, sizeof(myhost) - 1);
    for (size_t r = 0; r < n; r++) {
        void *val = NULL;
        size_t len = 0;
        procs[r].rank = (int)r;
        int local = r == (size_t)ctx->rank ? 1 : -1;
        if (local < 0 && ctx->hosted && ctx->host.same_host != NULL)
            local = ctx->host.same_host(ctx->host.arg, (int)r);
        if (local >= 0) {
            procs[r].same_host = local > 0;
        } else if (rt_modex_get(ctx->modex, (int)r, HOST_KEY, &val, &len) == FERRY_OK) {
            procs[r].same_host = len == strlen(myhost) && memcmp(val, myhost, len) == 0;
            free(val);
        }
        ctx->peers[r].module_idx = -1;
        ctx->peers[r].same_host = procs[r].same_host;
        ctx->peers[r].eps = calloc((size_t)ctx->n_modules + 1, sizeof(ferry_btl_endpoint_t *));
        if (ctx->peers[r].eps == NULL) {
            free(procs);
            return FERRY_ERR_NO_MEMORY;
        }
    }

    int rc = FERRY_OK;
    ferry_btl_endpoint_t **eps = calloc(n, sizeof(*eps));
    util_bitmap_t reach = {0};
    if (eps == NULL || util_bitmap_init(&reach, n) != FERRY_OK) {
        rc = FERRY_ERR_NO_MEMORY;
        goto out;
    }
    for (int m = 0; m < ctx->n_modules; m++) {
        ferry_btl_module_t *btl = ctx->modules[m];
        util_bitmap_clear_all(&reach);
        rc = btl->ops->add_procs(btl, n, procs, eps, &reach);
        if (rc != FERRY_OK) {
            rt_log(&ctx->log, RT_LOG_ERROR, "%s: add_procs failed: %s", btl->attr.name,
                   ferry_strerror(rc));
            goto out;
        }
        btl->ops->register_error(btl, on_transport_error, ctx);
        for (unsigned tag = 0; tag < FERRY_BTL_TAG_BTL_MIN; tag++)
            btl->ops->register_am(btl, (uint8_t)tag, tag == BTL_CTX_TAG_CTRL ? on_ctrl : am_cb,
                                  ctx);
        for (size_t r = 0; r < n; r++) {
            if (!util_bitmap_test(&reach, r) || eps[r] == NULL)
                continue;
            btl_peer_t *peer = &ctx->peers[r];
            peer->eps[m] = eps[r];
            const ferry_btl_attr_t *best =
                peer->module_idx >= 0 ? &ctx->modules[peer->module_idx]->attr : NULL;
            if (best == NULL || btl->attr.exclusivity > best->exclusivity ||
                (btl->attr.exclusivity == best->exclusivity && btl->attr.latency < best->latency)) {
                peer->module_idx = m;
                peer->ep = eps[r];
                peer->max_send = btl->attr.max_send_size;
            }
        }
    }
    for (size_t r = 0; r < n; r++)
        if (ctx->peers[r].module_idx < 0)
            rt_log(&ctx->log, RT_LOG_INFO, "no transport reaches rank %zu", r);
    ctx->polled = calloc((size_t)ctx->n_modules + 1, sizeof(*ctx->polled));
    if (ctx->polled == NULL) {
        rc = FERRY_ERR_NO_MEMORY;
        goto out;
    }
    for (int m = 0; m < ctx->n_modules; m++) {
        bool used = false;
        for (size_t r = 0; r < n && !used; r++)
            used = ctx->peers[r].module_idx == m;
        if (used)
            ctx->polled[ctx->n_polled++] = ctx->modules[m];
        else
            rt_log(&ctx->log, RT_LOG_DEBUG, "%s reaches no peer first: not polled",
                   ctx->modules[m]->attr.name);
    }
out:
    util_bitmap_fini(&reach);
    free(eps);
    free(procs);
    return rc;
}

void btl_ctx_del_procs(ferry_ctx_t *ctx)
{
    /* From here on an endpoint that breaks is this process's own doing. */
    ctx->closing = true;
    if (ctx->peers == NULL)
        return;
    for (int m = 0; m < ctx->n_modules; m++) {
        ferry_btl_module_t *btl = ctx->modules[m];
        for (int r = 0; r < ctx->size; r++)
            if (ctx->peers[r].eps != NULL && ctx->peers[r].eps[m] != NULL)
                btl->ops->del_procs(btl, 1, &ctx->peers[r].eps[m]);
    }
}

int btl_ctx_close(ferry_ctx_t *ctx)
{
    int rc = FERRY_OK;
    for (int m = 0; m < ctx->n_modules; m++) {
        int mrc = ctx->modules[m]->ops->finalize(ctx->modules[m]);
        if (mrc != FERRY_OK && rc == FERRY_OK)
            rc = mrc;
    }
    free(ctx->modules);
    free(ctx->polled);
    if (ctx->peers != NULL)
        for (int r = 0; r < ctx->size; r++)
            free(ctx->peers[r].eps);
    free(ctx->peers);
    free(ctx->ctrl_q);
    free(ctx->ctrl_blocked);
    ctx->ctrl_q = NULL;
    ctx->ctrl_blocked = NULL;
    ctx->ctrl_len = ctx->ctrl_cap = 0;
    ctx->modules = NULL;
    ctx->polled = NULL;
    ctx->peers = NULL;
    ctx->n_modules = 0;
    ctx->n_polled = 0;
    for (int i = 0; i < ctx->n_slots; i++) {
        rt_module_unload(&ctx->slots[i].module);
        free(ctx->slots[i].why_not);
    }
    free(ctx->slots);
    ctx->slots = NULL;
    ctx->n_slots = 0;
    return rc;
}

uint8_t btl_ctx_module_instance(const ferry_ctx_t *ctx, int m)
{
    uint8_t n = 0;
    for (int i = 0; i < m; i++)
        if (ctx->modules[i]->component == ctx->modules[m]->component)
            n++;
    return n;
}

int btl_ctx_module_named(const ferry_ctx_t *ctx, const char *name, uint8_t instance)
{
    for (int m = 0; m < ctx->n_modules; m++)
        if (strcmp(ctx->modules[m]->attr.name, name) == 0 &&
            btl_ctx_module_instance(ctx, m) == instance)
            return m;
    return -1;
}

int btl_ctx_module_index(const ferry_ctx_t *ctx, const ferry_btl_module_t *btl)
{
    for (int m = 0; m < ctx->n_modules; m++)
        if (ctx->modules[m] == btl)
            return m;
    return -1;
}

int btl_ctx_poll_module(ferry_ctx_t *ctx, int m)
{
    if (ctx->polled == NULL || m < 0 || m >= ctx->n_modules)
        return FERRY_ERR_INVALID;
    for (int i = 0; i < ctx->n_polled; i++)
        if (ctx->polled[i] == ctx->modules[m])
            return FERRY_OK;
    /* polled has room for every module. */
    ctx->polled[ctx->n_polled++] = ctx->modules[m];
    rt_log(&ctx->log, RT_LOG_DEBUG, "%s (module %d) polled from now on",
           ctx->modules[m]->attr.name, m);
    return FERRY_OK;
}

int btl_ctx_probe(ferry_ctx_t *ctx, int r)
{
    if (r < 0 || r >= ctx->size || r == ctx->rank)
        return FERRY_ERR_INVALID;
    btl_ctrl_msg_t m = {
        .magic = BTL_CTX_CTRL_MAGIC, .kind = BTL_CTX_CTRL_PROBE, .rank = -1, .origin = -1};
    return ctrl_queue(ctx, r, &m);
}

ferry_btl_module_t *btl_ctx_find_module(ferry_ctx_t *ctx, const char *name)
{
    if (ctx == NULL || name == NULL)
        return NULL;
    for (int m = 0; m < ctx->n_modules; m++)
        if (strcmp(ctx->modules[m]->attr.name, name) == 0)
            return ctx->modules[m];
    return NULL;
}

int btl_ctx_progress(ferry_ctx_t *ctx)
{
    int events = 0;
    ferry_btl_module_t **mods = ctx->polled != NULL ? ctx->polled : ctx->modules;
    int n = ctx->polled != NULL ? ctx->n_polled : ctx->n_modules;
    for (int m = 0; m < n; m++) {
        int rc = mods[m]->ops->progress(mods[m]);
        if (rc < 0)
            return rc;
        events += rc;
    }
    /* Out of line: an empty queue costs one test. */
    return ctx->ctrl_len == 0 ? events : events + ctrl_drain(ctx);
}
