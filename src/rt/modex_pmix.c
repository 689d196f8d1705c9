/*
 * The pmix backend: a client of a PMIx server, which is what Open MPI's
 * mpirun (through its runtime, PRRTE or ORTE) and Slurm's `srun --mpi=pmix`
 * provide to the processes they start. It is chosen when the environment
 * carries the variables such a server sets (PMIX_RANK, PMIX_NAMESPACE,
 * PMIX_SERVER_URI*), or by FERRY_MODEX=pmix. It is built into the module
 * ferry_modex_pmix.so, which links libpmix, so that only the jobs that use
 * it load that library (and into the static library itself).
 *
 * The mapping is direct: rank and namespace from PMIx_Init, the job size
 * from PMIX_JOB_SIZE, the job id from the namespace; a commit is one
 * PMIx_Put (PMIX_GLOBAL) per value followed by PMIx_Commit; a fence is
 * PMIx_Fence over the namespace with PMIX_COLLECT_DATA, so that afterwards
 * every value is held locally and a get asks PMIX_OPTIONAL: a key that is
 * not there is reported at once instead of being waited for. Values are byte
 * objects; PMIx stores them whole, so nothing is encoded or split.
 *
 * Keys are stored as "ferry:KEY", so that a process that also uses MPI
 * through the same server cannot read an MPI library's value as ferry's.
 * What the server returns is checked like any outside input: its type must
 * be a byte object and its size within RT_MODEX_VAL_MAX.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pmix.h>

#include <ferry/ferry.h>

#include "rt/modex_impl.h"
#include "rt/modex_pmix_value.h"

#define PMIX_KEY_PREFIX "ferry:"
/* How long an acknowledged abort waits for the server to end this process. */
#define PMIX_ABORT_WAIT_S 30

typedef struct mx_pmix {
    pmix_proc_t me;
    bool joined; /* PMIx_Init succeeded, so PMIx_Finalize is owed */
} mx_pmix_t;

/* Translates a PMIx status, logging the call that failed. */
static int pmix_fail(rt_modex_t *mx, const char *call, pmix_status_t st)
{
    rt_log(mx->log, RT_LOG_ERROR, "modex: %s failed: %s (%d)", call, PMIx_Error_string(st),
           (int)st);
    return FERRY_ERR_LAUNCHER;
}

static void pmix_key(const char *key, char out[PMIX_MAX_KEYLEN + 1])
{
    snprintf(out, PMIX_MAX_KEYLEN + 1, "%s%s", PMIX_KEY_PREFIX, key);
}

static int pmix_publish(rt_modex_t *mx, const rt_modex_kv_t *kv)
{
    char key[PMIX_MAX_KEYLEN + 1];
    pmix_key(kv->key, key);
    pmix_value_t val;
    memset(&val, 0, sizeof(val));
    val.type = PMIX_BYTE_OBJECT;
    /* PMIx_Put copies the bytes; the cast only drops const for the
     * struct's field. */
    val.data.bo.bytes = (char *)kv->val;
    val.data.bo.size = kv->len;
    pmix_status_t st = PMIx_Put(PMIX_GLOBAL, key, &val);
    if (st != PMIX_SUCCESS) {
        return pmix_fail(mx, "PMIx_Put", st);
    }
    /* Each value is committed as it is put: rt_modex_commit publishes the
     * changed values one by one and has no "done" step of its own. */
    st = PMIx_Commit();
    if (st != PMIX_SUCCESS) {
        return pmix_fail(mx, "PMIx_Commit", st);
    }
    return FERRY_OK;
}

static int pmix_fence(rt_modex_t *mx)
{
    pmix_info_t info;
    bool collect = true;
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    /* No procs: every process of this namespace. */
    pmix_status_t st = PMIx_Fence(NULL, 0, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (st != PMIX_SUCCESS) {
        return pmix_fail(mx, "PMIx_Fence", st);
    }
    return FERRY_OK;
}

static int pmix_get(rt_modex_t *mx, int rank, const char *key, void **val_out, size_t *len_out)
{
    mx_pmix_t *p = mx->backend;
    pmix_proc_t proc;
    PMIX_PROC_CONSTRUCT(&proc);
    PMIX_LOAD_PROCID(&proc, p->me.nspace, (pmix_rank_t)rank);
    char pkey[PMIX_MAX_KEYLEN + 1];
    pmix_key(key, pkey);
    pmix_info_t info;
    bool optional = true;
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &optional, PMIX_BOOL);
    pmix_value_t *val = NULL;
    pmix_status_t st = PMIx_Get(&proc, pkey, &info, 1, &val);
    PMIX_INFO_DESTRUCT(&info);
    if (st == PMIX_ERR_NOT_FOUND) {
        return FERRY_ERR_NOT_FOUND;
    }
    if (st != PMIX_SUCCESS) {
        return pmix_fail(mx, "PMIx_Get", st);
    }
    int rc = modex_pmix_value_take(mx->log, rank, key, val, val_out, len_out);
    if (val != NULL) {
        PMIX_VALUE_RELEASE(val);
    }
    return rc;
}

static int pmix_abort(rt_modex_t *mx, int code)
{
    /* No procs: the whole namespace, this process included. */
    pmix_status_t st = PMIx_Abort(code, "ferry: rt_modex_abort", NULL, 0);
    if (st != PMIX_SUCCESS) {
        return pmix_fail(mx, "PMIx_Abort", st);
    }
    /* Servers may acknowledge the abort before they kill the job (Open
     * MPI's mpirun does): wait a while for that, so that this rank does not
     * run on as if nothing happened. */
    for (int i = 0; i < PMIX_ABORT_WAIT_S * 10; i++) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    rt_log(mx->log, RT_LOG_ERROR, "modex: the PMIx server did not end the job after abort");
    return FERRY_ERR_LAUNCHER;
}

static void pmix_fini(rt_modex_t *mx)
{
    mx_pmix_t *p = mx->backend;
    if (p == NULL) {
        return;
    }
    if (p->joined) {
        pmix_status_t st = PMIx_Finalize(NULL, 0);
        if (st != PMIX_SUCCESS) {
            rt_log(mx->log, RT_LOG_WARN, "modex: PMIx_Finalize failed: %s",
                   PMIx_Error_string(st));
        }
    }
    free(p);
    mx->backend = NULL;
}

static const rt_modex_ops_t pmix_ops = {
    .name = "pmix",
    .publish = pmix_publish,
    .fence = pmix_fence,
    .get = pmix_get,
    .abort = pmix_abort,
    .fini = pmix_fini,
};

/* Reads the job size, which the server holds for the namespace as a
 * whole (the wildcard rank). */
static int pmix_job_size(rt_modex_t *mx, uint32_t *size_out)
{
    mx_pmix_t *p = mx->backend;
    pmix_proc_t wild;
    PMIX_PROC_CONSTRUCT(&wild);
    PMIX_LOAD_PROCID(&wild, p->me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *val = NULL;
    pmix_status_t st = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val);
    if (st != PMIX_SUCCESS) {
        return pmix_fail(mx, "PMIx_Get(PMIX_JOB_SIZE)", st);
    }
    int rc = FERRY_OK;
    if (val == NULL || val->type != PMIX_UINT32) {
        rt_log(mx->log, RT_LOG_ERROR, "modex: the PMIx server's job size is not a uint32");
        rc = FERRY_ERR_PROTO;
    } else {
        *size_out = val->data.uint32;
    }
    if (val != NULL) {
        PMIX_VALUE_RELEASE(val);
    }
    return rc;
}

static int pmix_init(rt_modex_t *mx)
{
    mx->ops = &pmix_ops;
    mx_pmix_t *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return FERRY_ERR_NO_MEMORY;
    }
    mx->backend = p;
    pmix_status_t st = PMIx_Init(&p->me, NULL, 0);
    if (st != PMIX_SUCCESS) {
        return pmix_fail(mx, "PMIx_Init (is a PMIx server running this job?)", st);
    }
    p->joined = true;
    uint32_t size = 0;
    int rc = pmix_job_size(mx, &size);
    if (rc != FERRY_OK) {
        return rc;
    }
    if (size < 1 || size > INT32_MAX || p->me.rank >= size) {
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: the PMIx server gave rank %" PRIu32 " of a job of %" PRIu32
               ", not a valid pair",
               (uint32_t)p->me.rank, size);
        return FERRY_ERR_PROTO;
    }
    mx->rank = (int)p->me.rank;
    mx->size = (int)size;
    /* The namespace is bounded (PMIX_MAX_NSLEN) and may hold characters a
     * job id may not; rt_modex_set_job_id replaces those. */
    char nspace[PMIX_MAX_NSLEN + 1];
    memcpy(nspace, p->me.nspace, PMIX_MAX_NSLEN);
    nspace[PMIX_MAX_NSLEN] = '\0';
    rt_modex_set_job_id(mx, nspace);
    return FERRY_OK;
}

/* Listed in the backend table of a static library, or exported through the
 * module's ferry_module (cmake/module.c.in). */
const rt_modex_backend_t rt_modex_pmix_backend = {.name = "pmix", .init = pmix_init};
