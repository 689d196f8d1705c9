/*
 * The host backend: the job and the exchange of a program that embeds ferry
 * (include/ferry/host.h). Rank, size and job id are the host's; a commit
 * hands each changed value to the host's put, a fence is the host's fence
 * (when it gave one: a host of ferry_host_open runs its exchange itself), a
 * get is the host's get. The host's answers are checked like any outside
 * input: a status out of ferry's range, a value without bytes or larger
 * than RT_MODEX_VAL_MAX is refused.
 */
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>
#include <ferry/host.h>

#include "rt/modex_impl.h"

/* A status the host returned, as one of ferry's: anything that is not a
 * code (a positive number, a value below the lowest code) is FERRY_ERR. */
static int host_status(int rc)
{
    return rc <= 0 && rc > FERRY_ERR_LAST ? rc : FERRY_ERR;
}

static const ferry_host_t *host_of(const rt_modex_t *mx)
{
    return mx->backend;
}

static int host_publish(rt_modex_t *mx, const rt_modex_kv_t *kv)
{
    const ferry_host_t *h = host_of(mx);
    int rc = host_status(h->modex_put(h->arg, kv->key, kv->val, kv->len));
    if (rc != FERRY_OK)
        rt_log(mx->log, RT_LOG_ERROR, "modex: the host's put of %s failed: %s", kv->key,
               ferry_strerror(rc));
    return rc;
}

static int host_fence(rt_modex_t *mx)
{
    const ferry_host_t *h = host_of(mx);
    if (h->modex_fence == NULL)
        return FERRY_OK; /* the host exchanges the values itself */
    int rc = host_status(h->modex_fence(h->arg));
    if (rc != FERRY_OK)
        rt_log(mx->log, RT_LOG_ERROR, "modex: the host's fence failed: %s", ferry_strerror(rc));
    return rc;
}

static int host_get(rt_modex_t *mx, int rank, const char *key, void **val_out,
                    size_t *len_out)
{
    const ferry_host_t *h = host_of(mx);
    void *val = NULL;
    size_t len = 0;
    int rc = host_status(h->modex_get(h->arg, rank, key, &val, &len));
    if (rc != FERRY_OK) {
        free(val);
        return rc;
    }
    if (len > RT_MODEX_VAL_MAX || (val == NULL && len > 0)) {
        free(val);
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: the host's value of %s for rank %d is malformed (%zu bytes%s)", key, rank,
               len, val == NULL ? ", no buffer" : "");
        return FERRY_ERR_PROTO;
    }
    if (val == NULL) {
        /* An empty value still gets a buffer (modex.h). */
        val = malloc(1);
        if (val == NULL)
            return FERRY_ERR_NO_MEMORY;
    }
    *val_out = val;
    *len_out = len;
    return FERRY_OK;
}

static int host_abort(rt_modex_t *mx, int code)
{
    const ferry_host_t *h = host_of(mx);
    if (h->abort == NULL)
        return FERRY_ERR_NOT_SUPPORTED;
    return host_status(h->abort(h->arg, code));
}

static int host_cleanup(rt_modex_t *mx, const char *path)
{
    const ferry_host_t *h = host_of(mx);
    if (h->cleanup == NULL)
        return FERRY_OK;
    int rc = host_status(h->cleanup(h->arg, path));
    if (rc != FERRY_OK)
        rt_log(mx->log, RT_LOG_WARN,
               "modex: the host cannot remove %s when this process ends (%s); it stays behind "
               "if the process is killed",
               path, ferry_strerror(rc));
    return rc;
}

static void host_fini(rt_modex_t *mx)
{
    free(mx->backend);
    mx->backend = NULL;
}

static const rt_modex_ops_t host_ops = {
    .name = "host",
    .publish = host_publish,
    .fence = host_fence,
    .get = host_get,
    .abort = host_abort,
    .cleanup = host_cleanup,
    .fini = host_fini,
};

int rt_modex_host_valid(const rt_log_t *log, const ferry_host_t *host)
{
    const char *why = NULL;
    if (host == NULL)
        why = "no host was given";
    else if (host->version != FERRY_HOST_VERSION) {
        rt_log(log, RT_LOG_ERROR,
               "host: the host was built for version %u of ferry_host_t, this ferry has "
               "version %u",
               (unsigned)host->version, (unsigned)FERRY_HOST_VERSION);
        return FERRY_ERR_NOT_SUPPORTED;
    } else if (host->size < 1 || host->rank < 0 || host->rank >= host->size)
        why = "its rank is not in [0, size)";
    else if (host->job_id == NULL || host->job_id[0] == '\0')
        why = "it gives no job id";
    else if (host->modex_put == NULL || host->modex_get == NULL)
        why = "it lacks modex_put or modex_get";
    if (why == NULL)
        return FERRY_OK;
    if (host != NULL)
        rt_log(log, RT_LOG_ERROR, "host: refused (rank %d, size %d): %s", host->rank,
               host->size, why);
    else
        rt_log(log, RT_LOG_ERROR, "host: refused: %s", why);
    return FERRY_ERR_INVALID;
}

int rt_modex_host_init(rt_modex_t *mx, const ferry_host_t *host)
{
    mx->ops = &host_ops;
    ferry_host_t *copy = malloc(sizeof(*copy));
    if (copy == NULL)
        return FERRY_ERR_NO_MEMORY;
    *copy = *host;
    mx->backend = copy;
    mx->rank = host->rank;
    mx->size = host->size;
    rt_modex_set_job_id(mx, host->job_id);
    return FERRY_OK;
}
