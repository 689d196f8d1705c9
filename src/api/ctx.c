/*
 * Context life cycle: the runtime's parameters and launcher, the transports
 * (src/btl/ctx.c), the API's state, progress and the barrier.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/am_large.h"
#include "api/api.h"
#include "bml/bml.h"
#include "btl/base.h"

/* ferry's log lines, to the host's log. */
static void ctx_host_log(void *arg, rt_log_level_t level, const char *line)
{
    const ferry_host_t *host = arg;
    host->log(host->arg, (int)level, line);
}

static int finalize_sync(ferry_ctx_t *ctx);

int api_ctx_create(const ferry_init_params_t *params, unsigned flags, ferry_ctx_t **ctx_out)
{
    return api_ctx_create_hosted(params, flags, NULL, ctx_out);
}

int api_ctx_create_hosted(const ferry_init_params_t *params, unsigned flags,
                          const ferry_host_t *host, ferry_ctx_t **ctx_out)
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
    ctx->magic = BTL_CTX_MAGIC;
    ctx->thread_level = params->thread_level;
    ctx->size = 1;
    rt_log_init(&ctx->log);
    rt_params_init(&ctx->params, &ctx->log);
    if (host != NULL) {
        /* From the first line logged on, the host's log and parameters. */
        ctx->hosted = true;
        ctx->host = *host;
        if (ctx->host.log != NULL) {
            ctx->log.sink = ctx_host_log;
            ctx->log.sink_arg = &ctx->host;
        }
        if (ctx->host.param != NULL) {
            ctx->params.source = ctx->host.param;
            ctx->params.source_arg = ctx->host.arg;
        }
        if ((flags & API_CTX_OPEN) != 0)
            ctx->log.rank = ctx->host.rank;
    }

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
    rc = btl_ctx_select(ctx, params->transports,
                        (flags & API_CTX_ALL_MODULES) != 0 ? BTL_CTX_ALL_MODULES : 0);
    if (rc != FERRY_OK)
        goto err_fini;
    if ((rc = bml_register_params(ctx)) != FERRY_OK ||
        (rc = api_am_large_register_params(ctx)) != FERRY_OK ||
        (rc = api_onesided_register_params(ctx, NULL, NULL)) != FERRY_OK)
        goto err_fini;
    if ((flags & API_CTX_OPEN) == 0) {
        /* No job is joined, but the launcher interface's variables are
         * still ferry's own: declared, so that they are listed and not
         * taken for misspellings; under a host, which is the launcher,
         * they are not ferry's to list. */
        if ((flags & API_CTX_NO_LAUNCHER) == 0) {
            rc = rt_modex_register_params(&ctx->params);
            if (rc != FERRY_OK)
                goto err_fini;
            rt_params_check_env(&ctx->params, environ, RT_LOG_WARN);
        }
        *ctx_out = ctx;
        return FERRY_OK;
    }

    if (host != NULL)
        rc = rt_modex_open_host(&ctx->log, host, &ctx->modex);
    else
        rc = rt_modex_open(&ctx->params, &ctx->modex);
    if (rc != FERRY_OK)
        goto err_fini;
    rt_modex_label_job_id(ctx->modex, label);
    ctx->rank = rt_modex_rank(ctx->modex);
    ctx->size = rt_modex_size(ctx->modex);
    ctx->log.rank = ctx->rank;
    /* Every parameter is registered by now. Rank 0 speaks for the job, so
     * that a misspelt variable is reported once, not by every rank. */
    rt_params_check_env(&ctx->params, environ, ctx->rank == 0 ? RT_LOG_WARN : RT_LOG_DEBUG);
    if ((rc = btl_ctx_open(ctx)) != FERRY_OK || (rc = rt_modex_commit(ctx->modex)) != FERRY_OK)
        goto err_fini;
    if ((flags & API_CTX_NO_FENCE) == 0 && (rc = rt_modex_fence(ctx->modex)) != FERRY_OK)
        goto err_fini;
    *ctx_out = ctx;
    return FERRY_OK;

err_fini:
    ctx->api = NULL;
    api_ctx_destroy(ctx);
    return rc;
}

int ferry_set_error_cb(ferry_ctx_t *ctx, ferry_error_cb_t cb, void *arg)
{
    if (!api_ctx_live(ctx))
        return FERRY_ERR_INVALID;
    ctx->error_cb = cb;
    ctx->error_arg = cb != NULL ? arg : NULL;
    return FERRY_OK;
}

int ferry_init(const ferry_init_params_t *params, ferry_ctx_t **ctx_out)
{
    ferry_ctx_t *ctx;
    if (ctx_out == NULL)
        return FERRY_ERR_INVALID;
    int rc = api_ctx_create(params, API_CTX_OPEN, &ctx);
    if (rc != FERRY_OK)
        return rc;
    if ((rc = api_state_init(ctx)) != FERRY_OK ||
        (rc = btl_ctx_add_procs(ctx, api_am_dispatch)) != FERRY_OK ||
        (rc = bml_init(ctx)) != FERRY_OK) {
        api_ctx_destroy(ctx);
        return rc;
    }
    *ctx_out = ctx;
    return FERRY_OK;
}

int api_ctx_destroy(ferry_ctx_t *ctx)
{
    int src = FERRY_OK;
    if (ctx->api != NULL && ctx->peers != NULL) {
        api_am_large_quiesce(ctx);
        /* Operations in flight end; active messages need no marker here:
         * each peer handles them before the departure that follows them on
         * the same path. */
        api_flush_wait(ctx, 0, ctx->size, false);
        /* Nobody tears down while a peer may still send to it. */
        src = finalize_sync(ctx);
        if (src != FERRY_OK)
            rt_log(&ctx->log, src == FERRY_ERR_UNREACH ? RT_LOG_INFO : RT_LOG_WARN,
                   "finalize: %s", src == FERRY_ERR_UNREACH
                                       ? "a rank of the job failed; the survivors tear down"
                                       : ferry_strerror(src));
    }
    btl_ctx_del_procs(ctx);
    if (ctx->api != NULL)
        api_am_large_fini(ctx);
    api_state_fini(ctx);
    int rc = btl_ctx_close(ctx);
    bml_fini(ctx);
    if (src != FERRY_OK)
        rc = src;
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
    return api_ctx_destroy(ctx);
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

int ferry_progress(ferry_ctx_t *ctx)
{
    if (!api_ctx_live(ctx))
        return FERRY_ERR_INVALID;
    if (ctx->in_callback > 0)
        return 0;
    int events = btl_ctx_progress(ctx);
    if (events < 0)
        return events;
    if (ctx->bml != NULL && ctx->bml->work)
        events += bml_progress(ctx);
    struct api_state *api = ctx->api;
    if (api == NULL)
        return events;
    if (api_rdma_pending(api))
        events += api_rdma_progress(ctx);
    if (api->large != NULL)
        events += api_am_large_progress(ctx);
    if (api_onesided_pending(api))
        events += api_onesided_progress(ctx);
    return events;
}

/* ---- barrier ---- */

/* Dissemination barrier over active messages when every peer is reachable
 * (so it progresses the transports while it waits), else the launcher's. */
static bool all_reachable(const ferry_ctx_t *ctx)
{
    for (int r = 0; r < ctx->size; r++)
        if (ctx->peers[r].module_idx < 0)
            return false;
    return true;
}

/* The launcher's barrier, for jobs whose ranks do not all reach each other.
 * ferryrun fails it once a rank has ended, which is how a rank that no
 * transport of this process reaches is known to have failed. */
static int launcher_barrier(ferry_ctx_t *ctx)
{
    int rc = rt_modex_fence(ctx->modex);
    return rc == FERRY_ERR_LAUNCHER ? FERRY_ERR_UNREACH : rc;
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

/* One step of a wait: progress, give the core away while idle. */
static int wait_step(ferry_ctx_t *ctx, unsigned *idle)
{
    int prc = ferry_progress(ctx);
    if (prc < 0)
        return prc;
    if (prc == 0)
        rt_idle(idle);
    else
        *idle = 0;
    return FERRY_OK;
}

/*
 * Each round sends to rank + dist and waits for rank - dist. Any failure
 * known to this process ends it with FERRY_ERR_UNREACH, not only that of
 * the rank it waits for: the failure notices (src/btl/ctx.h) bring every
 * failure to every rank, so a rank whose partners are waiting, stuck, for a
 * dead one hears of it too and leaves.
 */
int ferry_barrier(ferry_ctx_t *ctx)
{
    if (!api_ctx_live(ctx))
        return FERRY_ERR_INVALID;
    if (ctx->in_callback > 0)
        return FERRY_ERR_BUSY;
    if (ctx->api != NULL && ctx->n_failed > 0)
        return FERRY_ERR_UNREACH; /* it would never complete */
    /* What this rank started before the barrier is complete, and its
     * active messages handled, before it says it entered: so once every
     * rank has entered, everything any rank started before is done. */
    if (ctx->api != NULL && ctx->peers != NULL) {
        int frc = api_flush_wait(ctx, 0, ctx->size, true);
        if (frc != FERRY_OK)
            return frc;
    }
    if (ctx->size == 1)
        return FERRY_OK;
    if (ctx->api == NULL || !all_reachable(ctx))
        return launcher_barrier(ctx);

    struct api_state *api = ctx->api;
    uint32_t epoch = api->barrier_epoch;
    uint32_t round = 0;
    unsigned idle = 0;
    int rc;
    for (int dist = 1; dist < ctx->size; dist *= 2, round++) {
        int to = (ctx->rank + dist) % ctx->size;
        int from = (ctx->rank - dist + ctx->size) % ctx->size;
        barrier_msg_t msg = {.epoch = epoch, .round = round};
        while ((rc = api_send_small(ctx, to, API_TAG_BARRIER, &msg, sizeof(msg))) ==
               FERRY_ERR_NO_RESOURCE) {
            if ((rc = wait_step(ctx, &idle)) != FERRY_OK)
                return rc;
            if (ctx->n_failed > 0)
                return FERRY_ERR_UNREACH;
        }
        if (rc != FERRY_OK)
            return rc;
        while (api->barrier_count[epoch & 1][round] == 0) {
            if (ctx->n_failed > 0)
                return FERRY_ERR_UNREACH;
            /* Its messages come before its departure, on the same path:
             * departed without one, it will never send it. */
            if (ctx->peers[from].departed)
                return FERRY_ERR_UNREACH;
            if ((rc = wait_step(ctx, &idle)) != FERRY_OK)
                return rc;
        }
        api->barrier_count[epoch & 1][round]--;
    }
    /* Every rank entered; one that failed since, and was heard of, makes it
     * fail here all the same, as it does for the ranks still waiting. */
    if (ctx->n_failed > 0)
        return FERRY_ERR_UNREACH;
    api->barrier_epoch++;
    return FERRY_OK;
}

/*
 * The synchronisation of ferry_finalize: this rank announces its departure
 * to every peer and waits until every other rank has announced its own or
 * is known to have failed, so that no rank tears down while a live peer may
 * still send to it, and a failure before or during finalize ends the wait
 * on every survivor. FERRY_ERR_UNREACH when any rank failed.
 */
static int finalize_sync(ferry_ctx_t *ctx)
{
    if (ctx->size == 1)
        return FERRY_OK;
    if (!all_reachable(ctx)) {
        /* Ranks that wait in the launcher's barrier are released (with an
         * error) when this one ends. */
        if (ctx->n_failed > 0)
            return FERRY_ERR_UNREACH;
        return launcher_barrier(ctx);
    }
    int rc = btl_ctx_depart(ctx);
    unsigned idle = 0;
    while (rc == FERRY_OK && !btl_ctx_depart_done(ctx))
        rc = wait_step(ctx, &idle);
    if (rc == FERRY_OK && ctx->n_failed > 0)
        rc = FERRY_ERR_UNREACH;
    return rc;
}
