/*
 * The component: its MCA variables (ferry's parameters as btl_ferry_<name>,
 * and the Open MPI side of the BTL attributes), init (ferry opened as a
 * host of Open MPI's job, one Open MPI module per ferry module), progress
 * and close.
 */
#include "btl_ferry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/mca/btl/base/base.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

mca_btl_ferry_state_t mca_btl_ferry;

/* Modules that are nobody's best path are polled on every this many
 * progress calls only: they may still receive (a peer that Open MPI has
 * not added yet may connect), but an idle tcp module costs a system call
 * per poll, which the shared-memory latency cannot pay. */
#define FERRY_IDLE_POLL_EVERY 64u

/* ---- ferry's parameters as MCA variables ---- */

/* One of ferry's parameters, registered as btl_ferry_<name>. */
typedef struct ferry_var {
    char *name;   /* ferry's name: "sm_eager_limit" */
    char *origin; /* "btl_ferry_sm_eager_limit", for ferry's messages */
    char *value;  /* the variable's storage (Open MPI owns the string) */
    int index;    /* Open MPI's index of the variable */
} ferry_var_t;

/* Each variable in memory of its own: Open MPI keeps the address of its
 * value (the storage), which must not move when the table grows. */
static struct {
    ferry_var_t **vars;
    int n, cap;
    bool registered;
} ferry_vars;

static ferry_var_t *var_find(const char *name)
{
    for (int i = 0; i < ferry_vars.n; i++)
        if (strcmp(ferry_vars.vars[i]->name, name) == 0)
            return ferry_vars.vars[i];
    return NULL;
}

/* ferry's parameter source: an MCA variable given anywhere Open MPI reads
 * them (command line, environment, files) wins over FERRY_<NAME>; at its
 * default, ferry reads the environment. */
static const char *host_param(void *arg, const char *name, const char **origin_out)
{
    ferry_var_t *v = var_find(name);
    if (v == NULL)
        return NULL;
    const char **value = NULL;
    mca_base_var_source_t source = MCA_BASE_VAR_SOURCE_DEFAULT;
    if (mca_base_var_get_value(v->index, &value, &source, NULL) != OPAL_SUCCESS ||
        source == MCA_BASE_VAR_SOURCE_DEFAULT || value == NULL || *value == NULL)
        return NULL;
    *origin_out = v->origin;
    return *value;
}

static int register_one(const ferry_param_info_t *p, void *arg)
{
    if (var_find(p->name) != NULL)
        return 0;
    if (ferry_vars.n == ferry_vars.cap) {
        int cap = ferry_vars.cap > 0 ? 2 * ferry_vars.cap : 64;
        ferry_var_t **vars = realloc(ferry_vars.vars, (size_t)cap * sizeof(*vars));
        if (vars == NULL)
            return OPAL_ERR_OUT_OF_RESOURCE;
        ferry_vars.vars = vars;
        ferry_vars.cap = cap;
    }
    ferry_var_t *v = calloc(1, sizeof(*v));
    if (v == NULL)
        return OPAL_ERR_OUT_OF_RESOURCE;
    char *help = NULL;
    v->name = strdup(p->name);
    v->value = strdup(p->def);
    if (v->name == NULL || v->value == NULL ||
        asprintf(&v->origin, "btl_ferry_%s", p->name) < 0 ||
        asprintf(&help, "%s (ferry's %s, %s %s; given here it wins over %s in the environment)",
                 p->help, p->env, p->type[0] == 'i' ? "an" : "a", p->type, p->env) < 0) {
        free(v->name);
        free(v->value);
        free(v->origin);
        free(v);
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    /* Registered as text: ferry parses and checks every value itself, with
     * its own units (8k) and ranges, and names the variable when one is
     * wrong. */
    v->index = mca_base_component_var_register(&mca_btl_ferry_component.btl_version, p->name,
                                               help, MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0,
                                               OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY,
                                               &v->value);
    free(help);
    if (v->index < 0) {
        int rc = v->index;
        free(v->name);
        free(v->origin);
        free(v);
        return rc;
    }
    ferry_vars.vars[ferry_vars.n++] = v;
    return 0;
}

/* For messages while the parameters are read, before any context. */
static void host_log(void *arg, int level, const char *line)
{
    opal_output(0, "%s", line);
}

static int register_ferry_params(void)
{
    const ferry_host_t lister = {
        .version = FERRY_HOST_VERSION, .log = host_log, .param = host_param};
    /* Which transports' parameters exist depends on which transports are
     * chosen (a module not loaded has none): first as FERRY_BTL says, then
     * again if btl_ferry_btl says otherwise. */
    int rc = ferry_host_params(&lister, NULL, register_one, NULL);
    if (rc != FERRY_OK) {
        opal_output(0, "btl ferry: ferry's parameters cannot be listed: %s%s",
                    rc < 0 ? ferry_strerror(rc) : "",
                    rc < 0 ? "" : "out of memory registering them");
        return OPAL_ERROR;
    }
    const char *origin = NULL;
    const char *btl = host_param(NULL, "btl", &origin);
    if (btl != NULL) {
        ferry_init_params_t ip = {.thread_level = FERRY_THREAD_SERIALIZED, .transports = btl};
        rc = ferry_host_params(&lister, &ip, register_one, NULL);
        if (rc != FERRY_OK)
            return OPAL_ERROR;
    }
    return OPAL_SUCCESS;
}

/* ---- the Open MPI side of the attributes ---- */

static void register_knob_size(const char *name, const char *what, size_t *storage)
{
    char *help = NULL;
    if (asprintf(&help, "%s, for every ferry module (0: each module's own, from its ferry "
                        "transport)", what) < 0)
        return;
    *storage = 0;
    (void)mca_base_component_var_register(&mca_btl_ferry_component.btl_version, name, help,
                                          MCA_BASE_VAR_TYPE_SIZE_T, NULL, 0, 0,
                                          OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY, storage);
    free(help);
}

static void register_knob_uint(const char *name, const char *what, unsigned *storage)
{
    char *help = NULL;
    if (asprintf(&help, "%s, for every ferry module (0: each module's own, from its ferry "
                        "transport)", what) < 0)
        return;
    *storage = 0;
    (void)mca_base_component_var_register(&mca_btl_ferry_component.btl_version, name, help,
                                          MCA_BASE_VAR_TYPE_UNSIGNED_INT, NULL, 0, 0,
                                          OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY, storage);
    free(help);
}

static void register_knobs(void)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    /* Every flag ferry can give; each module keeps those its transport
     * has (mca_btl_ferry_rdma_flags). */
    st->knob.flags = (int)(MCA_BTL_FLAGS_SEND | MCA_BTL_FLAGS_PUT | MCA_BTL_FLAGS_GET |
                           MCA_BTL_FLAGS_RDMA_FLUSH | MCA_BTL_FLAGS_ATOMIC_OPS |
                           MCA_BTL_FLAGS_ATOMIC_FOPS);
    (void)mca_base_component_var_register(
        &mca_btl_ferry_component.btl_version, "flags",
        "BTL flags the ferry modules may announce (send, put, get, rdma-flush, atomics, "
        "fetching-atomics); each module keeps only those its transport can do. Leaving out "
        "get (or put) makes ob1 use the other RDMA protocol, leaving out both its send "
        "pipeline",
        MCA_BASE_VAR_TYPE_UNSIGNED_INT,
        mca_btl_base_flag_enum != NULL ? &mca_btl_base_flag_enum->super : NULL, 0, 0,
        OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY, &st->knob.flags);
    register_knob_size("eager_limit", "Largest first fragment sent eagerly (bytes)",
                       &st->knob.eager_limit);
    register_knob_size("rndv_eager_limit", "Data in the first fragment of a rendezvous (bytes)",
                       &st->knob.rndv_eager_limit);
    register_knob_size("max_send_size", "Largest fragment of one send (bytes)",
                       &st->knob.max_send_size);
    register_knob_size("rdma_pipeline_send_length",
                       "Bytes ob1 sends through the send pipeline before RDMA takes over",
                       &st->knob.rdma_pipeline_send_length);
    register_knob_size("rdma_pipeline_frag_size", "Size of each RDMA fragment ob1 pipelines",
                       &st->knob.rdma_pipeline_frag_size);
    register_knob_size("min_rdma_pipeline_size",
                       "Messages larger than this use ob1's pipelined RDMA put instead of one "
                       "RDMA get where the module can do both",
                       &st->knob.min_rdma_pipeline_size);
    register_knob_uint("exclusivity", "Exclusivity (higher wins when several BTLs reach a peer)",
                       &st->knob.exclusivity);
    register_knob_uint("latency", "Nominal latency (relative; lower is preferred)",
                       &st->knob.latency);
    register_knob_uint("bandwidth", "Nominal bandwidth (MB/s; weighs the striping)",
                       &st->knob.bandwidth);
}

static int component_register(void)
{
    if (ferry_vars.registered)
        return OPAL_SUCCESS;
    ferry_vars.registered = true;
    register_knobs();
    return register_ferry_params();
}

static int component_open(void)
{
    return OPAL_SUCCESS;
}

/* ---- the host: Open MPI's job as ferry sees it ---- */

/* PMIx keys of ferry's values (the same prefix as ferry's own pmix backend
 * uses), apart from Open MPI's. */
static int modex_key(const char *key, char *out, size_t size)
{
    int n = snprintf(out, size, "ferry:%s", key);
    return n < 0 || (size_t)n >= size ? FERRY_ERR_INVALID : FERRY_OK;
}

static int host_put(void *arg, const char *key, const void *val, size_t len)
{
    char k[128];
    if (modex_key(key, k, sizeof(k)) != FERRY_OK)
        return FERRY_ERR_INVALID;
    int rc;
    OPAL_MODEX_SEND_STRING(rc, OPAL_PMIX_GLOBAL, k, (void *)val, len);
    return rc == OPAL_SUCCESS ? FERRY_OK : FERRY_ERR_LAUNCHER;
}

static int host_get(void *arg, int rank, const char *key, void **val_out, size_t *len_out)
{
    char k[128];
    if (modex_key(key, k, sizeof(k)) != FERRY_OK)
        return FERRY_ERR_INVALID;
    opal_process_name_t name = {.jobid = mca_btl_ferry.jobid, .vpid = (opal_vpid_t)rank};
    uint8_t *data = NULL;
    size_t size = 0;
    int rc;
    OPAL_MODEX_RECV_STRING(rc, k, &name, &data, &size);
    if (rc != OPAL_SUCCESS) {
        free(data);
        return FERRY_ERR_NOT_FOUND;
    }
    *val_out = data;
    *len_out = size;
    return FERRY_OK;
}

/* The PMIx server (mpirun's, or the daemon's) removes the file when this
 * process ends, as Open MPI's own shared-memory BTL has its segment
 * removed. */
static int host_cleanup(void *arg, const char *path)
{
    if (opal_pmix.register_cleanup == NULL)
        return FERRY_ERR_NOT_SUPPORTED;
    int rc = opal_pmix.register_cleanup((char *)path, false, false, false);
    return rc == OPAL_SUCCESS ? FERRY_OK : FERRY_ERR_LAUNCHER;
}

/* The job's size, from PMIx. */
static int job_size(uint32_t *size_out)
{
    opal_process_name_t wild = {.jobid = OPAL_PROC_MY_NAME.jobid, .vpid = OPAL_VPID_WILDCARD};
    uint32_t *size = size_out;
    int rc;
    OPAL_MODEX_RECV_VALUE(rc, OPAL_PMIX_JOB_SIZE, &wild, &size, OPAL_UINT32);
    return rc;
}

/* ---- init ---- */

static mca_btl_base_module_t **component_init(int *num_btls, bool enable_progress_threads,
                                              bool enable_mpi_threads)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    *num_btls = 0;
    if (enable_mpi_threads) {
        opal_output(0, "btl ferry: not used under MPI_THREAD_MULTIPLE (a ferry context is used "
                       "by one thread at a time)");
        return NULL;
    }
    uint32_t size = 0;
    if (job_size(&size) != OPAL_SUCCESS || size == 0 || size > (uint32_t)INT32_MAX ||
        OPAL_PROC_MY_NAME.vpid >= size) {
        opal_output(0, "btl ferry: not used: the job's size is unknown (PMIx gives no %s)",
                    OPAL_PMIX_JOB_SIZE);
        return NULL;
    }
    st->rank = (int)OPAL_PROC_MY_NAME.vpid;
    st->size = (int)size;
    st->jobid = OPAL_PROC_MY_NAME.jobid;
    snprintf(st->job_id, sizeof(st->job_id), "ompi-%08x", (unsigned)st->jobid);
    const ferry_host_t host = {
        .version = FERRY_HOST_VERSION,
        .rank = st->rank,
        .size = st->size,
        .job_id = st->job_id,
        .modex_put = host_put,
        .modex_get = host_get,
        .log = host_log,
        .param = host_param,
        .cleanup = host_cleanup,
    };
    const ferry_init_params_t ip = {.thread_level = FERRY_THREAD_SERIALIZED};
    int rc = ferry_host_open(&host, &ip, &st->ctx);
    if (rc != FERRY_OK) {
        opal_output(0, "btl ferry: not used: ferry's transports do not open: %s%s",
                    ferry_strerror(rc),
                    rc == FERRY_ERR_INVALID ? " (a btl_ferry_* variable or FERRY_* setting is "
                                              "wrong: see above)"
                                            : "");
        st->ctx = NULL;
        return NULL;
    }
    ferry_btl_module_t *const *fmods;
    int n = 0;
    ferry_host_modules(st->ctx, &fmods, &n);
    /* A reachable set of one 64-bit word per rank holds every module. */
    if (n > 64)
        n = 64;
    st->reach = calloc((size_t)st->size, sizeof(*st->reach));
    st->modules = calloc((size_t)n + 1, sizeof(*st->modules));
    mca_btl_base_module_t **out = calloc((size_t)n + 1, sizeof(*out));
    if (st->reach == NULL || st->modules == NULL || out == NULL)
        goto err;
    for (int i = 0; i < n; i++) {
        mca_btl_ferry_module_t *mod = mca_btl_ferry_module_create(fmods[i], st->n_modules);
        if (mod == NULL)
            continue;
        st->modules[st->n_modules++] = mod;
        out[(*num_btls)++] = &mod->super;
    }
    if (*num_btls == 0)
        goto err;
    mca_btl_ferry_reg_cache_start();
    return out;

err:
    free(out);
    /* The last module's finalize closes ferry; with none made, ferry is
     * closed here (its files removed), and nothing is left for Open MPI. */
    if (st->n_modules > 0) {
        for (int i = 0, n_made = st->n_modules; i < n_made; i++)
            st->modules[i]->super.btl_finalize(&st->modules[i]->super);
    } else {
        opal_output(0, "btl ferry: not used: no ferry module could be set up");
        ferry_finalize(&st->ctx);
        free(st->modules);
        free(st->reach);
        st->modules = NULL;
        st->reach = NULL;
    }
    *num_btls = 0;
    return NULL;
}

/* ---- progress ---- */

void mca_btl_ferry_defer_done(mca_btl_ferry_frag_t *frag)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    frag->next_done = NULL;
    if (st->done_tail != NULL)
        st->done_tail->next_done = frag;
    else
        st->done_head = frag;
    st->done_tail = frag;
}

int mca_btl_ferry_run_done(void)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    /* Only those due now: a callback that sends again queues for the next
     * call. */
    mca_btl_ferry_frag_t *frag = st->done_head;
    st->done_head = st->done_tail = NULL;
    int n = 0;
    while (frag != NULL) {
        mca_btl_ferry_frag_t *next = frag->next_done;
        mca_btl_ferry_frag_sent(frag, OPAL_SUCCESS);
        frag = next;
        n++;
    }
    return n;
}

void mca_btl_ferry_update_active(void)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    uint64_t best_of_some = 0;
    for (int r = 0; r < st->size; r++) {
        uint64_t reach = st->reach[r];
        uint32_t top = 0;
        uint64_t best = 0;
        for (int m = 0; m < st->n_modules; m++) {
            if (!(reach & (1ull << m)))
                continue;
            uint32_t x = st->modules[m]->super.btl_exclusivity;
            if (best == 0 || x > top) {
                top = x;
                best = 1ull << m;
            } else if (x == top) {
                best |= 1ull << m; /* Open MPI stripes over equals */
            }
        }
        best_of_some |= best;
    }
    st->n_polled = 0;
    for (int m = 0; m < st->n_modules; m++) {
        mca_btl_ferry_module_t *mod = st->modules[m];
        mod->active = (best_of_some & (1ull << m)) != 0;
        if (mod->active && !mod->finalized)
            st->polled[st->n_polled++] = mod->fbtl;
    }
}

static int component_progress(void)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    if (st->ctx == NULL || st->progressing)
        return 0;
    st->progressing = true;
    int events = 0;
    for (int i = 0; i < st->n_polled; i++) {
        ferry_btl_module_t *fbtl = st->polled[i];
        int rc = fbtl->ops->progress(fbtl);
        if (rc > 0)
            events += rc;
    }
    if (++st->idle_calls >= FERRY_IDLE_POLL_EVERY) {
        st->idle_calls = 0;
        for (int m = 0; m < st->n_modules; m++) {
            mca_btl_ferry_module_t *mod = st->modules[m];
            if (mod->finalized || mod->active)
                continue;
            int rc = mod->fbtl->ops->progress(mod->fbtl);
            if (rc > 0)
                events += rc;
        }
    }
    if (st->n_send_waiting > 0)
        events += mca_btl_ferry_send_run_waiting(false);
    if (st->done_head != NULL)
        events += mca_btl_ferry_run_done();
    if (st->rdma_wait_head != NULL)
        events += mca_btl_ferry_rdma_run_waiting(false);
    if (st->rdma_done_head != NULL)
        events += mca_btl_ferry_rdma_run_done();
    st->progressing = false;
    return events;
}

/* ---- close ---- */

static int component_close(void)
{
    mca_btl_ferry_state_t *st = &mca_btl_ferry;
    for (int i = 0; i < st->n_modules; i++)
        if (!st->modules[i]->finalized)
            st->modules[i]->super.btl_finalize(&st->modules[i]->super);
    /* The variables stay: Open MPI deregisters them after this, when the
     * framework closes, and frees each value through the storage address
     * it was given, which must still hold it then. */
    return OPAL_SUCCESS;
}

int mca_btl_ferry_status(int rc)
{
    switch (rc) {
    case FERRY_OK:
        return OPAL_SUCCESS;
    case FERRY_ERR_NO_RESOURCE:
    case FERRY_ERR_NO_MEMORY:
        return OPAL_ERR_OUT_OF_RESOURCE;
    case FERRY_ERR_INVALID:
        return OPAL_ERR_BAD_PARAM;
    case FERRY_ERR_NOT_SUPPORTED:
        return OPAL_ERR_NOT_AVAILABLE;
    case FERRY_ERR_UNREACH:
        return OPAL_ERR_UNREACH;
    case FERRY_ERR_ACCESS:
        return OPAL_ERR_PERM;
    case FERRY_ERR_TIMEOUT:
        return OPAL_ERR_TIMEOUT;
    case FERRY_ERR_NOT_FOUND:
        return OPAL_ERR_NOT_FOUND;
    case FERRY_ERR_BUSY:
        return OPAL_ERR_RESOURCE_BUSY;
    default:
        return OPAL_ERROR;
    }
}

mca_btl_base_component_t mca_btl_ferry_component = {
    .btl_version =
        {
            MCA_BTL_DEFAULT_VERSION("ferry"),
            .mca_open_component = component_open,
            .mca_close_component = component_close,
            .mca_register_component_params = component_register,
        },
    .btl_data = {.param_field = MCA_BASE_METADATA_PARAM_NONE},
    .btl_init = component_init,
    .btl_progress = component_progress,
};
