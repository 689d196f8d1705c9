/*
 * ferry inside a host (include/ferry/host.h): a whole context or the
 * transports only, with the host's job, exchange, log and parameters; the
 * modules for a host that drives them; the reachable sets of add_procs; the
 * listing of ferry's parameters.
 */
#include <stdlib.h>

#include <ferry/btl.h>
#include <ferry/host.h>

#include "api/api.h"
#include "bml/bml.h"
#include "mem/rcache.h"
#include "rt/modex.h"
#include "util/bitmap.h"

/* The host's log, for the messages about the host itself (before there is
 * a context to log through). */
static void host_log_line(void *arg, rt_log_level_t level, const char *line)
{
    const ferry_host_t *host = arg;
    host->log(host->arg, (int)level, line);
}

static void host_logger(const ferry_host_t *host, rt_log_t *log)
{
    rt_log_init(log);
    if (host != NULL && host->version == FERRY_HOST_VERSION && host->log != NULL) {
        log->sink = host_log_line;
        log->sink_arg = (void *)host;
    }
}

int ferry_host_init(const ferry_host_t *host, const ferry_init_params_t *params,
                    ferry_ctx_t **ctx_out)
{
    rt_log_t log;
    host_logger(host, &log);
    if (ctx_out == NULL)
        return FERRY_ERR_INVALID;
    int rc = rt_modex_host_valid(&log, host);
    if (rc != FERRY_OK)
        return rc;
    if (host->modex_fence == NULL) {
        rt_log(&log, RT_LOG_ERROR,
               "host: ferry_host_init needs modex_fence (a host without one uses "
               "ferry_host_open)");
        return FERRY_ERR_INVALID;
    }
    ferry_ctx_t *ctx;
    rc = api_ctx_create_hosted(params, API_CTX_OPEN, host, &ctx);
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

int ferry_host_open(const ferry_host_t *host, const ferry_init_params_t *params,
                    ferry_ctx_t **ctx_out)
{
    rt_log_t log;
    host_logger(host, &log);
    if (ctx_out == NULL)
        return FERRY_ERR_INVALID;
    int rc = rt_modex_host_valid(&log, host);
    if (rc != FERRY_OK)
        return rc;
    return api_ctx_create_hosted(params, API_CTX_OPEN | API_CTX_NO_FENCE, host, ctx_out);
}

int ferry_host_modules(ferry_ctx_t *ctx, ferry_btl_module_t *const **modules_out,
                       int *count_out)
{
    if (!api_ctx_live(ctx) || modules_out == NULL || count_out == NULL)
        return FERRY_ERR_INVALID;
    *modules_out = ctx->modules;
    *count_out = ctx->n_modules;
    return FERRY_OK;
}

int ferry_bitmap_create(size_t nbits, struct ferry_bitmap **bm_out)
{
    if (bm_out == NULL)
        return FERRY_ERR_INVALID;
    util_bitmap_t *bm = malloc(sizeof(*bm));
    if (bm == NULL)
        return FERRY_ERR_NO_MEMORY;
    int rc = util_bitmap_init(bm, nbits);
    if (rc != FERRY_OK) {
        free(bm);
        return rc;
    }
    *bm_out = bm;
    return FERRY_OK;
}

bool ferry_bitmap_test(const struct ferry_bitmap *bm, size_t bit)
{
    return bm != NULL && util_bitmap_test(bm, bit);
}

void ferry_bitmap_clear_all(struct ferry_bitmap *bm)
{
    if (bm != NULL)
        util_bitmap_clear_all(bm);
}

void ferry_bitmap_destroy(struct ferry_bitmap *bm)
{
    if (bm == NULL)
        return;
    util_bitmap_fini(bm);
    free(bm);
}

static const char *param_type_name(rt_param_type_t type)
{
    switch (type) {
    case RT_PARAM_INT:
        return "integer";
    case RT_PARAM_SIZE:
        return "size";
    case RT_PARAM_BOOL:
        return "boolean";
    case RT_PARAM_STRING:
        return "string";
    }
    return "string";
}

int ferry_host_params(const ferry_host_t *host, const ferry_init_params_t *params,
                      ferry_param_cb_t cb, void *arg)
{
    rt_log_t log;
    host_logger(host, &log);
    if (cb == NULL)
        return FERRY_ERR_INVALID;
    if (host != NULL && host->version != FERRY_HOST_VERSION) {
        rt_log(&log, RT_LOG_ERROR,
               "host: the host was built for version %u of ferry_host_t, this ferry has "
               "version %u",
               (unsigned)host->version, (unsigned)FERRY_HOST_VERSION);
        return FERRY_ERR_NOT_SUPPORTED;
    }
    ferry_ctx_t *ctx;
    int rc = api_ctx_create_hosted(params, API_CTX_NO_LAUNCHER, host, &ctx);
    if (rc != FERRY_OK)
        return rc;
    /* The registration cache declares its parameters when a transport
     * opens, which a listing does not do. */
    mem_params_t mem;
    rc = mem_params_register(&ctx->params, &mem);
    for (const rt_param_t *p = ctx->params.head; rc == FERRY_OK && p != NULL; p = p->next) {
        const ferry_param_info_t info = {
            .name = p->name,
            .env = p->env,
            .help = p->help,
            .type = param_type_name(p->type),
            .def = p->def_text,
            .value = p->value_text,
            .set = p->from_env,
        };
        rc = cb(&info, arg);
    }
    api_ctx_destroy(ctx);
    return rc;
}
