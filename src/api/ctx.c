/*
 * Context life cycle: parameters, launcher, transports, peers, progress and
 * the barrier.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>

#include "api/api.h"
#include "btl/base.h"
#include "util/bitmap.h"

#define HOST_KEY "ferry.host"


/* Is name in the comma-separated list? */
static bool list_has(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p += len + (end != NULL ? 1 : 0);
    }
    return false;
}

/* Every name in the list must be a built transport. source names where the
 * list came from (the variable or the init parameter), for the message. */
static int check_transport_list(ferry_ctx_t *ctx, const char *list, const char *source)
{
    for (const char *p = list; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        bool found = false;
        for (int i = 0; btl_components[i] != NULL; i++) {
            const char *name = btl_components[i]->name;
            if (strlen(name) == len && strncmp(p, name, len) == 0)
                found = true;
        }
        if (!found) {
            char built[256] = "";
            for (int i = 0; btl_components[i] != NULL; i++) {
                if (i > 0)
                    strncat(built, ",", sizeof(built) - strlen(built) - 1);
                strncat(built, btl_components[i]->name, sizeof(built) - strlen(built) - 1);
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

static int open_transports(ferry_ctx_t *ctx, const char *list)
{
    for (int i = 0; btl_components[i] != NULL; i++) {
        const ferry_btl_component_t *comp = btl_components[i];
        /* self is always open: it is how a rank reaches itself. */
        if (list[0] != '\0' && !list_has(list, comp->name) && strcmp(comp->name, "self") != 0)
            continue;
        ferry_btl_module_t **mods = NULL;
        int n = 0;
        int rc = comp->open(ctx, &mods, &n);
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

static int ctx_destroy(ferry_ctx_t *ctx);

int rt_ctx_create(const ferry_init_params_t *params, bool open, ferry_ctx_t **ctx_out)
{
    ferry_init_params_t defaults = {.thread_level = FERRY_THREAD_SINGLE, .transports = NULL};
    if (ctx_out == NULL)
        return FERRY_ERR_INVALID;
    if (params == NULL)
        params = &defaults;
    if ((unsigned)params->thread_level > FERRY_THREAD_MULTIPLE) {
        rt_log(NULL, RT_LOG_ERROR, "unknown thread level %d", (int)params->thread_level);
        return FERRY_ERR_INVALID;
    }
    if (params->thread_level == FERRY_THREAD_MULTIPLE) {
        rt_log(NULL, RT_LOG_ERROR,
               "FERRY_THREAD_MULTIPLE is not supported: use one thread at a time "
               "(FERRY_THREAD_SERIALIZED)");
        return FERRY_ERR_NOT_SUPPORTED;
    }

    ferry_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return FERRY_ERR_NO_MEMORY;
    ctx->magic = RT_CTX_MAGIC;
    ctx->thread_level = params->thread_level;
    ctx->size = 1;
    rt_log_init(&ctx->log);
    rt_params_init(&ctx->params, &ctx->log);

    int rc = rt_param_register_string(&ctx->params, "log_level", "warn",
                                      "Logging threshold: error, warn, info, debug or trace",
                                      &ctx->param_log_level);
    if (rc != FERRY_OK)
        goto err_fini;
    if (rt_log_parse_level(ctx->param_log_level, &ctx->log.level) != FERRY_OK) {
        rt_log(&ctx->log, RT_LOG_ERROR,
               "FERRY_LOG_LEVEL='%s' is not a level (expected error, warn, info, debug, "
               "trace or 0-4)",
               ctx->param_log_level);
        rc = FERRY_ERR_INVALID;
        goto err_fini;
    }
    rc = rt_param_register_string(&ctx->params, "btl", "",
                                  "Transports to use, comma separated (self is always used); "
                                  "empty: every transport built",
                                  &ctx->param_btl);
    if (rc != FERRY_OK)
        goto err_fini;
    const char *label = NULL;
    rc = rt_param_register_string(&ctx->params, "job_label", "",
                                  "A label put before the job id in the names of the job's "
                                  "shared-memory segments (/dev/shm/ferry-LABEL.JOBID-...), so "
                                  "that a test suite finds its own: up to 32 letters, digits, "
                                  "'_' or '-'; empty: none",
                                  &label);
    if (rc != FERRY_OK)
        goto err_fini;
    if (label[0] != '\0' && !rt_modex_label_valid(label)) {
        rt_log(&ctx->log, RT_LOG_ERROR,
               "FERRY_JOB_LABEL='%.64s%s' is not a label (expected 1 to %d letters, digits, "
               "'_' or '-')",
               label, strlen(label) > 64 ? "..." : "", RT_MODEX_LABEL_MAX);
        rc = FERRY_ERR_INVALID;
        goto err_fini;
    }
    for (int i = 0; btl_components[i] != NULL; i++) {
        rc = btl_components[i]->register_params(ctx);
        if (rc != FERRY_OK)
            goto err_fini;
    }
    if (!open) {
        rt_params_check_env(&ctx->params, environ, RT_LOG_WARN);
        *ctx_out = ctx;
        return FERRY_OK;
    }

    const char *list = params->transports != NULL ? params->transports : ctx->param_btl;
    rc = check_transport_list(ctx, list,
                              params->transports != NULL ? "ferry_init_params_t.transports"
                                                         : "FERRY_BTL");
    if (rc != FERRY_OK)
        goto err_fini;

    rc = rt_modex_init(&ctx->log, &ctx->modex);
    if (rc != FERRY_OK)
        goto err_fini;
    rt_modex_label_job_id(ctx->modex, label);
    ctx->rank = rt_modex_rank(ctx->modex);
    ctx->size = rt_modex_size(ctx->modex);
    ctx->log.rank = ctx->rank;
    /* Every parameter is registered by now. Rank 0 speaks for the job, so
     * that a misspelt variable is reported once, not by every rank. */
    rt_params_check_env(&ctx->params, environ, ctx->rank == 0 ? RT_LOG_WARN : RT_LOG_DEBUG);

    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    rc = rt_modex_put(ctx->modex, HOST_KEY, host, strlen(host));
    if (rc != FERRY_OK)
        goto err_fini;
    rc = open_transports(ctx, list);
    if (rc != FERRY_OK)
        goto err_fini;
    if ((rc = rt_modex_commit(ctx->modex)) != FERRY_OK ||
        (rc = rt_modex_fence(ctx->modex)) != FERRY_OK)
        goto err_fini;
    *ctx_out = ctx;
    return FERRY_OK;

err_fini:
    ctx->api = NULL;
    ctx_destroy(ctx);
    return rc;
}

static void on_transport_error(ferry_btl_module_t *btl, int status, int peer, const char *msg,
                               void *cbdata)
{
    ferry_ctx_t *ctx = cbdata;
    if (peer >= 0 && peer < ctx->size) {
        /* Another transport may still reach it, but ferry keeps one path per
         * peer: the peer is gone for this job. */
        if (ctx->peers[peer].failed)
            return;
        ctx->peers[peer].failed = true;
    }
    if (ctx->error_cb != NULL) {
        ctx->in_callback++;
        ctx->error_cb(ctx, peer, status, msg, ctx->error_arg);
        ctx->in_callback--;
    } else {
        rt_log(&ctx->log, RT_LOG_ERROR, "%s: %s: %s (%s)", btl->attr.name,
               peer >= 0 ? "peer failed" : "transport failed", msg, ferry_strerror(status));
    }
}

int ferry_set_error_cb(ferry_ctx_t *ctx, ferry_error_cb_t cb, void *arg)
{
    if (!api_ctx_live(ctx))
        return FERRY_ERR_INVALID;
    ctx->error_cb = cb;
    ctx->error_arg = cb != NULL ? arg : NULL;
    return FERRY_OK;
}

/* Creates the endpoints and picks, for each peer, the reachable module with
 * the highest exclusivity (ties: lowest latency). */
static int add_procs(ferry_ctx_t *ctx)
{
    size_t n = (size_t)ctx->size;
    ferry_btl_proc_t *procs = calloc(n, sizeof(*procs));
    ctx->peers = calloc(n, sizeof(*ctx->peers));
    if (procs == NULL || ctx->peers == NULL) {
        free(procs);
        return FERRY_ERR_NO_MEMORY;
    }
    char myhost[256] = "";
    gethostname(myhost, sizeof(myhost) - 1);
    for (size_t r = 0; r < n; r++) {
        void *val = NULL;
        size_t len = 0;
        procs[r].rank = (int)r;
        if (rt_modex_get(ctx->modex, (int)r, HOST_KEY, &val, &len) == FERRY_OK) {
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
            btl->ops->register_am(btl, (uint8_t)tag, api_am_dispatch, ctx);
        for (size_t r = 0; r < n; r++) {
            if (!util_bitmap_test(&reach, r) || eps[r] == NULL)
                continue;
            rt_peer_t *peer = &ctx->peers[r];
            peer->eps[m] = eps[r];
            const ferry_btl_attr_t *best =
                peer->module_idx >= 0 ? &ctx->modules[peer->module_idx]->attr : NULL;
            if (best == NULL || btl->attr.exclusivity > best->exclusivity ||
                (btl->attr.exclusivity == best->exclusivity && btl->attr.latency < best->latency)) {
                peer->module_idx = m;
                peer->ep = eps[r];
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

int ferry_init(const ferry_init_params_t *params, ferry_ctx_t **ctx_out)
{
    ferry_ctx_t *ctx;
    if (ctx_out == NULL)
        return FERRY_ERR_INVALID;
    int rc = rt_ctx_create(params, true, &ctx);
    if (rc != FERRY_OK)
        return rc;
    if ((rc = api_state_init(ctx)) != FERRY_OK || (rc = add_procs(ctx)) != FERRY_OK) {
        ctx_destroy(ctx);
        return rc;
    }
    *ctx_out = ctx;
    return FERRY_OK;
}

/* Tears down whatever of ctx exists (safe on a half-built one), clears its
 * magic and frees it. */
static int ctx_destroy(ferry_ctx_t *ctx)
{
    int rc = FERRY_OK;
    if (ctx->api != NULL && ctx->peers != NULL) {
        ferry_flush(ctx, -1);
        /* Nobody tears down while a peer may still send to it. */
        int brc = ferry_barrier(ctx);
        if (brc != FERRY_OK)
            rt_log(&ctx->log, RT_LOG_WARN, "barrier at finalize failed: %s", ferry_strerror(brc));
    }
    for (int m = 0; m < ctx->n_modules; m++) {
        ferry_btl_module_t *btl = ctx->modules[m];
        if (ctx->peers != NULL) {
            for (int r = 0; r < ctx->size; r++)
                if (ctx->peers[r].eps != NULL && ctx->peers[r].eps[m] != NULL)
                    btl->ops->del_procs(btl, 1, &ctx->peers[r].eps[m]);
        }
    }
    api_state_fini(ctx);
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
    rt_modex_fini(ctx->modex);
    rt_params_fini(&ctx->params);
    /* A volatile store, so that the compiler keeps it although the memory
     * is freed next: a stale copy of the handle then fails the check. */
    *(volatile uint64_t *)&ctx->magic = 0;
    free(ctx);
    return rc;
}

int ferry_finalize(ferry_ctx_t **ctx_p)
{
    if (ctx_p == NULL || *ctx_p == NULL)
        return FERRY_OK;
    ferry_ctx_t *ctx = *ctx_p;
    if (!api_ctx_live(ctx))
        return FERRY_ERR_INVALID;
    if (ctx->in_callback > 0)
        return FERRY_ERR_BUSY;
    /* The caller's handle goes first: whatever happens below, it can no
     * longer reach the memory freed. */
    *ctx_p = NULL;
    return ctx_destroy(ctx);
}

bool api_ctx_refuse(const ferry_ctx_t *ctx)
{
    if (ctx != NULL)
        rt_log(NULL, RT_LOG_ERROR,
               "a ferry context handle (%p) that is not a live context was passed: used after "
               "ferry_finalize?",
               (const void *)ctx);
    return false;
}



int ferry_rank(const ferry_ctx_t *ctx)
{
    return api_ctx_live(ctx) ? ctx->rank : FERRY_ERR_INVALID;
}

int ferry_size(const ferry_ctx_t *ctx)
{
    return api_ctx_live(ctx) ? ctx->size : FERRY_ERR_INVALID;
}

ferry_btl_module_t *rt_ctx_find_module(ferry_ctx_t *ctx, const char *name)
{
    if (ctx == NULL || name == NULL)
        return NULL;
    for (int m = 0; m < ctx->n_modules; m++)
        if (strcmp(ctx->modules[m]->attr.name, name) == 0)
            return ctx->modules[m];
    return NULL;
}

int rt_ctx_progress_transports(ferry_ctx_t *ctx)
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
    return events;
}

int ferry_progress(ferry_ctx_t *ctx)
{
    if (!api_ctx_live(ctx))
        return FERRY_ERR_INVALID;
    if (ctx->in_callback > 0)
        return 0;
    int events = rt_ctx_progress_transports(ctx);
    if (events < 0)
        return events;
    if (ctx->api != NULL)
        events += api_rdma_progress(ctx);
    return events;
}

void rt_idle(unsigned *idle)
{
    /* A short spin keeps latency when the peer answers at once. */
    if (++*idle >= 64) {
        sched_yield();
        *idle = 0;
    }
}

/* ---- barrier ---- */

/* Dissemination barrier over active messages when every peer is reachable
 * (so it progresses the transports while it waits), else the launcher's. */
static bool all_reachable(const ferry_ctx_t *ctx)
{
    for (int r = 0; r < ctx->size; r++)
        if (ctx->peers[r].module_idx < 0 || ctx->peers[r].failed)
            return false;
    return true;
}

typedef struct barrier_msg {
    uint32_t epoch;
    uint32_t round;
} barrier_msg_t;

void api_barrier_recv(ferry_ctx_t *ctx, const void *data, size_t len);

void api_barrier_recv(ferry_ctx_t *ctx, const void *data, size_t len)
{
    barrier_msg_t msg;
    if (len != sizeof(msg)) {
        rt_log(&ctx->log, RT_LOG_WARN, "malformed barrier message of %zu bytes dropped", len);
        return;
    }
    memcpy(&msg, data, sizeof(msg));
    /* A peer is at most one barrier ahead of us. */
    if (msg.round >= API_BARRIER_ROUNDS ||
        (msg.epoch != ctx->api->barrier_epoch && msg.epoch != ctx->api->barrier_epoch + 1)) {
        rt_log(&ctx->log, RT_LOG_WARN, "barrier message for epoch %u round %u dropped",
               msg.epoch, msg.round);
        return;
    }
    ctx->api->barrier_count[msg.epoch & 1][msg.round]++;
}

int ferry_barrier(ferry_ctx_t *ctx)
{
    if (!api_ctx_live(ctx))
        return FERRY_ERR_INVALID;
    if (ctx->in_callback > 0)
        return FERRY_ERR_BUSY;
    if (ctx->size == 1)
        return FERRY_OK;
    if (ctx->api != NULL) {
        for (int r = 0; r < ctx->size; r++)
            if (ctx->peers[r].failed)
                return FERRY_ERR_UNREACH; /* it would never arrive */
    }
    if (ctx->api == NULL || !all_reachable(ctx))
        return rt_modex_fence(ctx->modex);

    struct api_state *api = ctx->api;
    uint32_t epoch = api->barrier_epoch;
    uint32_t round = 0;
    unsigned idle = 0;
    for (int dist = 1; dist < ctx->size; dist *= 2, round++) {
        int to = (ctx->rank + dist) % ctx->size;
        barrier_msg_t msg = {.epoch = epoch, .round = round};
        rt_peer_t *peer = &ctx->peers[to];
        ferry_btl_module_t *btl = ctx->modules[peer->module_idx];
        int rc;
        for (;;) {
            rc = btl->ops->sendi(btl, peer->ep, &msg, sizeof(msg), NULL, 0, API_TAG_BARRIER);
            if (rc == FERRY_ERR_NOT_SUPPORTED) {
                ferry_btl_desc_t *des;
                rc = btl->ops->alloc(btl, peer->ep, sizeof(msg), FERRY_BTL_DES_OWNERSHIP, &des);
                if (rc == FERRY_OK) {
                    memcpy(ferry_btl_seg_ptr(&des->src[0]), &msg, sizeof(msg));
                    rc = btl->ops->send(btl, peer->ep, des, API_TAG_BARRIER);
                    if (rc != FERRY_OK)
                        btl->ops->free(btl, des);
                }
            }
            if (rc != FERRY_ERR_NO_RESOURCE)
                break;
            if (ferry_progress(ctx) == 0)
                rt_idle(&idle);
        }
        if (rc != FERRY_OK)
            return rc;
        while (api->barrier_count[epoch & 1][round] == 0) {
            int prc = ferry_progress(ctx);
            if (prc < 0)
                return prc;
            if (prc == 0)
                rt_idle(&idle);
            else
                idle = 0;
            if (ctx->peers[(ctx->rank - dist + ctx->size) % ctx->size].failed)
                return FERRY_ERR_UNREACH;
        }
        api->barrier_count[epoch & 1][round]--;
    }
    api->barrier_epoch++;
    return FERRY_OK;
}
