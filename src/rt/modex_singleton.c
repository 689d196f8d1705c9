/*
 * The singleton backend: a process started without a launcher is a job of
 * one. Its values live only in the modex's local copy (modex.c reads them
 * back), so publishing and fencing have nothing to do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "rt/modex_impl.h"

static int singleton_publish(rt_modex_t *mx, const rt_modex_kv_t *kv)
{
    return FERRY_OK;
}

static int singleton_fence(rt_modex_t *mx)
{
    return FERRY_OK;
}

/* Never called: modex.c answers rank 0 itself and refuses every other rank. */
static int singleton_get(rt_modex_t *mx, int rank, const char *key, void **val_out,
                         size_t *len_out)
{
    return FERRY_ERR_NOT_FOUND;
}

/* With no launcher, this process is the whole job, so ending the job means
 * ending the process, as an MPI singleton's abort does. */
static int singleton_abort(rt_modex_t *mx, int code)
{
    fflush(NULL);
    _exit(code);
}

static void singleton_fini(rt_modex_t *mx)
{
}

static const rt_modex_ops_t singleton_ops = {
    .name = "singleton",
    .publish = singleton_publish,
    .fence = singleton_fence,
    .get = singleton_get,
    .abort = singleton_abort,
    .fini = singleton_fini,
};

int rt_modex_singleton_init(rt_modex_t *mx)
{
    mx->ops = &singleton_ops;
    mx->rank = 0;
    mx->size = 1;
    char id[64];
    snprintf(id, sizeof(id), "singleton-%ld", (long)getpid());
    rt_modex_set_job_id(mx, id);
    return FERRY_OK;
}
