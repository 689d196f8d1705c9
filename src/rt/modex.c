/*
 * The modex front end: picks a backend from the environment, checks every
 * argument of the public calls, and keeps this rank's own values so that a
 * commit sends only what changed and a get of one's own rank needs no
 * launcher.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "rt/modex.h"
#include "rt/modex_impl.h"

static bool modex_char_ok(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == '-';
}

bool rt_modex_key_valid(const char *key)
{
    if (key == NULL) {
        return false;
    }
    size_t n = 0;
    for (; key[n] != '\0'; n++) {
        if (n >= RT_MODEX_KEY_MAX || !modex_char_ok(key[n])) {
            return false;
        }
    }
    return n > 0;
}

void rt_modex_set_job_id(rt_modex_t *mx, const char *text)
{
    size_t n = 0;
    for (; text != NULL && text[n] != '\0' && n < RT_MODEX_JOB_ID_MAX; n++) {
        mx->job_id[n] = modex_char_ok(text[n]) ? text[n] : '_';
    }
    mx->job_id[n] = '\0';
    if (n == 0) {
        strcpy(mx->job_id, "job");
    }
}

bool rt_modex_label_valid(const char *label)
{
    if (label == NULL || label[0] == '\0') {
        return false;
    }
    size_t n = 0;
    for (; label[n] != '\0'; n++) {
        if (n >= RT_MODEX_LABEL_MAX || label[n] == '.' || !modex_char_ok(label[n])) {
            return false;
        }
    }
    return true;
}

void rt_modex_label_job_id(rt_modex_t *mx, const char *label)
{
    if (mx == NULL || label == NULL || label[0] == '\0') {
        return;
    }
    char labelled[RT_MODEX_LABEL_MAX + 1 + RT_MODEX_JOB_ID_MAX + 1];
    snprintf(labelled, sizeof(labelled), "%.*s.%s", RT_MODEX_LABEL_MAX, label, mx->job_id);
    rt_modex_set_job_id(mx, labelled);
}

/* True when a PMIx server left its variables: the rank and namespace, or
 * the address of the server (PMIX_SERVER_URI, PMIX_SERVER_URI2, ...). */
static bool modex_pmix_env(void)
{
    if (getenv("PMIX_RANK") != NULL || getenv("PMIX_NAMESPACE") != NULL) {
        return true;
    }
    for (char **e = environ; *e != NULL; e++) {
        if (strncmp(*e, "PMIX_SERVER_URI", 15) == 0) {
            return true;
        }
    }
    return false;
}

static const rt_modex_backend_t modex_pmi1 = {.name = "pmi1", .init = rt_modex_pmi1_init};
static const rt_modex_backend_t modex_singleton = {.name = "singleton",
                                                   .init = rt_modex_singleton_init};

/* The modex's parameters, as declared. */
typedef struct modex_params {
    const char *forced;      /* FERRY_MODEX */
    const char *module_path; /* FERRY_MODULE_PATH */
    const char *pmi_timeout; /* FERRY_PMI_TIMEOUT, as text */
} modex_params_t;

/* The pmi1 backend's limits for FERRY_PMI_TIMEOUT (modex_pmi1.c). */
#define MODEX_PMI_TIMEOUT_DEFAULT 300
#define MODEX_PMI_TIMEOUT_MAX (7LL * 24 * 3600)

static int modex_register_params(rt_params_t *params, modex_params_t *p)
{
    long long timeout = 0;
    int rc = rt_param_register_string(params, "modex", "",
                                      "Launcher backend: pmi1, pmix or singleton; empty: chosen "
                                      "from the launcher's variables in the environment",
                                      &p->forced);
    if (rc == FERRY_OK) {
        rc = rt_param_register_int(params, "pmi_timeout", MODEX_PMI_TIMEOUT_DEFAULT, 1,
                                   MODEX_PMI_TIMEOUT_MAX,
                                   "Longest wait for any one answer of a PMI-1 launcher, "
                                   "fences included (seconds)",
                                   &timeout);
    }
    if (rc == FERRY_OK) {
        rc = rt_module_register_params(params, &p->module_path);
    }
    if (rc == FERRY_OK) {
        p->pmi_timeout = rt_param_find(params, "pmi_timeout")->value_text;
    }
    return rc;
}

/* Leaves the variables of every backend in a module other than loaded
 * (NULL: none is) to the modules: their parameters are not declared here. */
static int modex_skip_modules(rt_params_t *params, const rt_module_t *loaded)
{
    for (const rt_modex_entry_t *e = rt_modex_backends; e->name != NULL; e++) {
        if (e->builtin != NULL ||
            (loaded != NULL && loaded->info != NULL && strcmp(loaded->info->name, e->name) == 0)) {
            continue;
        }
        int rc = rt_params_skip_prefix(params, e->name);
        if (rc != FERRY_OK) {
            return rc;
        }
    }
    return FERRY_OK;
}

int rt_modex_register_params(rt_params_t *params)
{
    if (params == NULL) {
        return FERRY_ERR_INVALID;
    }
    modex_params_t p;
    int rc = modex_register_params(params, &p);
    return rc == FERRY_OK ? modex_skip_modules(params, NULL) : rc;
}

/* A backend of the generated table: its code, or its module loaded into
 * *mod. FERRY_ERR_NOT_FOUND when this build has none of that name; other
 * errors leave the reason in why. */
static int modex_optional_backend(const modex_params_t *p, const char *name,
                                  rt_module_t *mod, const rt_modex_backend_t **backend_out,
                                  char *why)
{
    for (const rt_modex_entry_t *e = rt_modex_backends; e->name != NULL; e++) {
        if (strcmp(e->name, name) != 0) {
            continue;
        }
        if (e->builtin != NULL) {
            *backend_out = e->builtin;
            return FERRY_OK;
        }
        int rc = rt_module_load(p->module_path, e->module, "modex", name, mod, why);
        if (rc == FERRY_OK) {
            *backend_out = mod->info->entry;
        }
        return rc;
    }
    snprintf(why, RT_MODULE_WHY_MAX,
             "this build has no %s backend (libpmix was not found or FERRY_ENABLE_PMIX is OFF)",
             name);
    return FERRY_ERR_NOT_FOUND;
}

/* Which backend the environment asks for: FERRY_MODEX when set; else pmi1
 * when a PMI-1 launcher passed a descriptor (PMI_FD: ferryrun, hydra, Slurm
 * with pmi2), which only the immediate parent can do; else pmix when a PMIx
 * server left its variables (Open MPI's mpirun, Slurm with pmix); else pmi1
 * when PMI_PORT names a server; else singleton. An empty FERRY_MODEX counts
 * as unset, as an empty variable usually does. A pmix backend that cannot
 * be had is an error, except when PMI_PORT offers pmi1 instead. */
static int modex_pick_backend(const rt_log_t *log, const modex_params_t *p, rt_module_t *mod,
                              const rt_modex_backend_t **backend_out)
{
    char why[RT_MODULE_WHY_MAX];
    const char *forced = p->forced;
    if (forced != NULL && forced[0] != '\0') {
        if (strcmp(forced, "pmi1") == 0) {
            *backend_out = &modex_pmi1;
            return FERRY_OK;
        }
        if (strcmp(forced, "singleton") == 0) {
            *backend_out = &modex_singleton;
            return FERRY_OK;
        }
        if (strcmp(forced, "pmix") == 0) {
            int rc = modex_optional_backend(p, "pmix", mod, backend_out, why);
            if (rc != FERRY_OK) {
                rt_log(log, RT_LOG_ERROR, "modex: FERRY_MODEX=pmix, but the pmix backend "
                       "cannot be used: %s", why);
                return rc == FERRY_ERR_NO_MEMORY ? rc : FERRY_ERR_NOT_SUPPORTED;
            }
            return FERRY_OK;
        }
        rt_log(log, RT_LOG_ERROR,
               "modex: FERRY_MODEX='%.64s' is not a modex backend (expected 'pmi1', 'pmix' or "
               "'singleton')",
               forced);
        return FERRY_ERR_INVALID;
    }
    if (getenv("PMI_FD") != NULL) {
        *backend_out = &modex_pmi1;
    } else if (modex_pmix_env()) {
        int rc = modex_optional_backend(p, "pmix", mod, backend_out, why);
        if (rc == FERRY_ERR_NO_MEMORY) {
            return rc;
        }
        if (rc != FERRY_OK && getenv("PMI_PORT") == NULL) {
            rt_log(log, RT_LOG_ERROR,
                   "modex: started by a PMIx server (PMIX_ variables are set), but the pmix "
                   "backend cannot be used: %s; set FERRY_MODEX=singleton to run alone",
                   why);
            return FERRY_ERR_NOT_SUPPORTED;
        }
        if (rc != FERRY_OK) {
            rt_log(log, RT_LOG_INFO, "modex: PMIX_ variables are set, but the pmix backend "
                   "cannot be used (%s): PMI-1 through PMI_PORT instead", why);
            *backend_out = &modex_pmi1;
        }
    } else if (getenv("PMI_PORT") != NULL) {
        *backend_out = &modex_pmi1;
    } else {
        *backend_out = &modex_singleton;
    }
    return FERRY_OK;
}

/* Takes the job's secret out of the environment: decodes it into mx and
 * overwrites the variable's value where it lies before removing it, so
 * that neither programs this one starts nor /proc/PID/environ (which shows
 * the original block, whatever unsetenv does) still hold it. A malformed
 * secret is an error: the launcher and this rank disagree on the format. */
static int modex_take_secret(rt_modex_t *mx)
{
    char *text = getenv(RT_AUTH_SECRET_ENV);
    if (text == NULL) {
        return FERRY_OK;
    }
    int rc = rt_auth_hex_decode(text, mx->secret, sizeof(mx->secret));
    rt_auth_wipe(text, strlen(text));
    unsetenv(RT_AUTH_SECRET_ENV);
    if (rc != FERRY_OK) {
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: %s is not a secret of %d hex digits; the launcher and this rank "
               "disagree",
               RT_AUTH_SECRET_ENV, RT_AUTH_HEX_LEN);
        return FERRY_ERR_LAUNCHER;
    }
    mx->have_secret = true;
    return FERRY_OK;
}

int rt_modex_open(rt_params_t *params, rt_modex_t **mx_out)
{
    if (params == NULL || mx_out == NULL) {
        return FERRY_ERR_INVALID;
    }
    const rt_log_t *log = params->log;
    modex_params_t p;
    int rc = modex_register_params(params, &p);
    if (rc != FERRY_OK) {
        return rc;
    }
    rt_module_t mod = {0};
    const rt_modex_backend_t *backend = NULL;
    rc = modex_pick_backend(log, &p, &mod, &backend);
    if (rc == FERRY_OK) {
        rc = modex_skip_modules(params, &mod);
    }
    if (rc != FERRY_OK) {
        rt_module_unload(&mod);
        return rc;
    }
    rt_modex_t *mx = calloc(1, sizeof(*mx));
    if (mx == NULL) {
        rt_module_unload(&mod);
        return FERRY_ERR_NO_MEMORY;
    }
    mx->log = log;
    mx->rank = -1;
    mx->module = mod;
    mx->pmi_timeout = p.pmi_timeout;
    rc = modex_take_secret(mx);
    if (rc == FERRY_OK) {
        rc = backend->init(mx);
    }
    mx->pmi_timeout = NULL;
    if (rc != FERRY_OK) {
        rt_modex_fini(mx);
        return rc;
    }
    rt_log(log, RT_LOG_DEBUG, "modex: backend %s, rank %d of %d, job %s%s%s", mx->ops->name,
           mx->rank, mx->size, mx->job_id, mx->module.path != NULL ? ", from " : "",
           mx->module.path != NULL ? mx->module.path : "");
    *mx_out = mx;
    return FERRY_OK;
}

int rt_modex_open_host(const rt_log_t *log, const struct ferry_host *host, rt_modex_t **mx_out)
{
    if (mx_out == NULL)
        return FERRY_ERR_INVALID;
    int rc = rt_modex_host_valid(log, host);
    if (rc != FERRY_OK)
        return rc;
    rt_modex_t *mx = calloc(1, sizeof(*mx));
    if (mx == NULL)
        return FERRY_ERR_NO_MEMORY;
    mx->log = log;
    mx->rank = -1;
    rc = rt_modex_host_init(mx, host);
    if (rc != FERRY_OK) {
        rt_modex_fini(mx);
        return rc;
    }
    rt_log(log, RT_LOG_DEBUG, "modex: backend host, rank %d of %d, job %s", mx->rank, mx->size,
           mx->job_id);
    *mx_out = mx;
    return FERRY_OK;
}

int rt_modex_init(const rt_log_t *log, rt_modex_t **mx_out)
{
    if (mx_out == NULL) {
        return FERRY_ERR_INVALID;
    }
    rt_params_t params;
    rt_params_init(&params, log);
    int rc = rt_modex_open(&params, mx_out);
    rt_params_fini(&params);
    return rc;
}

void rt_modex_fini(rt_modex_t *mx)
{
    if (mx == NULL) {
        return;
    }
    if (mx->ops != NULL) {
        mx->ops->fini(mx);
    }
    rt_module_unload(&mx->module);
    rt_modex_kv_t *kv = mx->local;
    while (kv != NULL) {
        rt_modex_kv_t *next = kv->next;
        free(kv->val);
        free(kv);
        kv = next;
    }
    rt_auth_wipe(mx->secret, sizeof(mx->secret));
    free(mx);
}

int rt_modex_rank(const rt_modex_t *mx)
{
    return mx != NULL ? mx->rank : -1;
}

int rt_modex_size(const rt_modex_t *mx)
{
    return mx != NULL ? mx->size : 0;
}

const char *rt_modex_backend(const rt_modex_t *mx)
{
    return mx != NULL && mx->ops != NULL ? mx->ops->name : "none";
}

const char *rt_modex_job_id(const rt_modex_t *mx)
{
    return mx != NULL ? mx->job_id : "";
}

int rt_modex_job_secret(const rt_modex_t *mx, uint8_t *secret_out)
{
    if (mx == NULL || secret_out == NULL) {
        return FERRY_ERR_INVALID;
    }
    if (!mx->have_secret) {
        return FERRY_ERR_NOT_FOUND;
    }
    memcpy(secret_out, mx->secret, sizeof(mx->secret));
    return FERRY_OK;
}

static rt_modex_kv_t *modex_find_local(const rt_modex_t *mx, const char *key)
{
    for (rt_modex_kv_t *kv = mx->local; kv != NULL; kv = kv->next) {
        if (strcmp(kv->key, key) == 0) {
            return kv;
        }
    }
    return NULL;
}

int rt_modex_put(rt_modex_t *mx, const char *key, const void *val, size_t len)
{
    if (mx == NULL || !rt_modex_key_valid(key) || (val == NULL && len > 0)) {
        rt_log(mx != NULL ? mx->log : NULL, RT_LOG_ERROR,
               "modex: put needs a key of 1..%d characters of [A-Za-z0-9_.-] and a value",
               RT_MODEX_KEY_MAX);
        return FERRY_ERR_INVALID;
    }
    if (len > RT_MODEX_VAL_MAX) {
        rt_log(mx->log, RT_LOG_ERROR, "modex: value of key %s is %zu bytes, more than %zu",
               key, len, RT_MODEX_VAL_MAX);
        return FERRY_ERR_INVALID;
    }
    unsigned char *copy = NULL;
    if (len > 0) {
        copy = malloc(len);
        if (copy == NULL) {
            return FERRY_ERR_NO_MEMORY;
        }
        memcpy(copy, val, len);
    }
    rt_modex_kv_t *kv = modex_find_local(mx, key);
    if (kv == NULL) {
        kv = calloc(1, sizeof(*kv));
        if (kv == NULL) {
            free(copy);
            return FERRY_ERR_NO_MEMORY;
        }
        strcpy(kv->key, key);
        kv->next = mx->local;
        mx->local = kv;
    }
    free(kv->val);
    kv->val = copy;
    kv->len = len;
    kv->dirty = true;
    return FERRY_OK;
}

int rt_modex_commit(rt_modex_t *mx)
{
    if (mx == NULL) {
        return FERRY_ERR_INVALID;
    }
    for (rt_modex_kv_t *kv = mx->local; kv != NULL; kv = kv->next) {
        if (!kv->dirty) {
            continue;
        }
        int rc = mx->ops->publish(mx, kv);
        if (rc != FERRY_OK) {
            return rc;
        }
        kv->dirty = false;
        kv->published++;
    }
    return FERRY_OK;
}

int rt_modex_fence(rt_modex_t *mx)
{
    if (mx == NULL) {
        return FERRY_ERR_INVALID;
    }
    return mx->ops->fence(mx);
}

int rt_modex_get(rt_modex_t *mx, int rank, const char *key, void **val_out, size_t *len_out)
{
    if (mx == NULL || val_out == NULL || len_out == NULL) {
        return FERRY_ERR_INVALID;
    }
    if (rank < 0 || rank >= mx->size) {
        rt_log(mx->log, RT_LOG_ERROR, "modex: get from rank %d, outside the job of %d", rank,
               mx->size);
        return FERRY_ERR_INVALID;
    }
    if (!rt_modex_key_valid(key)) {
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: get needs a key of 1..%d characters of [A-Za-z0-9_.-]",
               RT_MODEX_KEY_MAX);
        return FERRY_ERR_INVALID;
    }
    if (rank != mx->rank) {
        return mx->ops->get(mx, rank, key, val_out, len_out);
    }
    /* One's own values are read from the local copy, committed or not: the
     * launcher holds nothing newer. */
    const rt_modex_kv_t *kv = modex_find_local(mx, key);
    if (kv == NULL) {
        return FERRY_ERR_NOT_FOUND;
    }
    /* A zero-length value still gets a buffer, so that a caller can always
     * free what it received and tell it from "not found". */
    void *copy = malloc(kv->len > 0 ? kv->len : 1);
    if (copy == NULL) {
        return FERRY_ERR_NO_MEMORY;
    }
    if (kv->len > 0) {
        memcpy(copy, kv->val, kv->len);
    }
    *val_out = copy;
    *len_out = kv->len;
    return FERRY_OK;
}

int rt_modex_register_cleanup(rt_modex_t *mx, const char *path)
{
    if (mx == NULL || path == NULL || path[0] != '/')
        return FERRY_ERR_INVALID;
    return mx->ops->cleanup != NULL ? mx->ops->cleanup(mx, path) : FERRY_OK;
}

int rt_modex_register_shm(rt_modex_t *mx, const char *shm_name)
{
    if (mx == NULL || shm_name == NULL || shm_name[0] != '/' || strchr(shm_name + 1, '/'))
        return FERRY_ERR_INVALID;
    char path[sizeof("/dev/shm") + 256];
    int n = snprintf(path, sizeof(path), "/dev/shm%s", shm_name);
    if (n < 0 || (size_t)n >= sizeof(path))
        return FERRY_ERR_INVALID;
    return rt_modex_register_cleanup(mx, path);
}

int rt_modex_abort(rt_modex_t *mx, int code, const char *msg)
{
    if (mx == NULL) {
        return FERRY_ERR_INVALID;
    }
    rt_log(mx->log, RT_LOG_ERROR, "modex: rank %d aborts the job with code %d: %s", mx->rank,
           code, msg != NULL ? msg : "(no message)");
    return mx->ops->abort(mx, code);
}
