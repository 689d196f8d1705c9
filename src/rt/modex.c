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
#ifdef FERRY_HAVE_PMIX
#include "rt/modex_pmix.h"
#endif

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

/* Which backend the environment asks for: FERRY_MODEX when set; else pmi1
 * when a PMI-1 launcher passed a descriptor (PMI_FD: ferryrun, hydra, Slurm
 * with pmi2), which only the immediate parent can do; else pmix when a PMIx
 * server left its variables (Open MPI's mpirun, Slurm with pmix); else pmi1
 * when PMI_PORT names a server; else singleton. An empty FERRY_MODEX counts
 * as unset, as an empty variable usually does. */
static int modex_pick_backend(const rt_log_t *log, int (**init_out)(rt_modex_t *))
{
    const char *forced = getenv("FERRY_MODEX");
    if (forced != NULL && forced[0] != '\0') {
        if (strcmp(forced, "pmi1") == 0) {
            *init_out = rt_modex_pmi1_init;
            return FERRY_OK;
        }
        if (strcmp(forced, "singleton") == 0) {
            *init_out = rt_modex_singleton_init;
            return FERRY_OK;
        }
        if (strcmp(forced, "pmix") == 0) {
#ifdef FERRY_HAVE_PMIX
            *init_out = rt_modex_pmix_init;
            return FERRY_OK;
#else
            rt_log(log, RT_LOG_ERROR,
                   "modex: FERRY_MODEX=pmix, but this build has no pmix backend (libpmix was "
                   "not found or FERRY_ENABLE_PMIX is OFF)");
            return FERRY_ERR_NOT_SUPPORTED;
#endif
        }
        rt_log(log, RT_LOG_ERROR,
               "modex: FERRY_MODEX='%.64s' is not a modex backend (expected 'pmi1', 'pmix' or "
               "'singleton')",
               forced);
        return FERRY_ERR_INVALID;
    }
    if (getenv("PMI_FD") != NULL) {
        *init_out = rt_modex_pmi1_init;
    } else if (modex_pmix_env()) {
#ifdef FERRY_HAVE_PMIX
        *init_out = rt_modex_pmix_init;
#else
        if (getenv("PMI_PORT") == NULL) {
            rt_log(log, RT_LOG_ERROR,
                   "modex: started by a PMIx server (PMIX_ variables are set), but this build "
                   "has no pmix backend; rebuild with libpmix-dev installed, or set "
                   "FERRY_MODEX=singleton to run alone");
            return FERRY_ERR_NOT_SUPPORTED;
        }
        *init_out = rt_modex_pmi1_init;
#endif
    } else if (getenv("PMI_PORT") != NULL) {
        *init_out = rt_modex_pmi1_init;
    } else {
        *init_out = rt_modex_singleton_init;
    }
    return FERRY_OK;
}

int rt_modex_init(const rt_log_t *log, rt_modex_t **mx_out)
{
    if (mx_out == NULL) {
        return FERRY_ERR_INVALID;
    }
    int (*backend_init)(rt_modex_t *) = NULL;
    int rc = modex_pick_backend(log, &backend_init);
    if (rc != FERRY_OK) {
        return rc;
    }
    rt_modex_t *mx = calloc(1, sizeof(*mx));
    if (mx == NULL) {
        return FERRY_ERR_NO_MEMORY;
    }
    mx->log = log;
    mx->rank = -1;
    rc = backend_init(mx);
    if (rc != FERRY_OK) {
        rt_modex_fini(mx);
        return rc;
    }
    rt_log(log, RT_LOG_DEBUG, "modex: backend %s, rank %d of %d, job %s", mx->ops->name,
           mx->rank, mx->size, mx->job_id);
    *mx_out = mx;
    return FERRY_OK;
}

void rt_modex_fini(rt_modex_t *mx)
{
    if (mx == NULL) {
        return;
    }
    if (mx->ops != NULL) {
        mx->ops->fini(mx);
    }
    rt_modex_kv_t *kv = mx->local;
    while (kv != NULL) {
        rt_modex_kv_t *next = kv->next;
        free(kv->val);
        free(kv);
        kv = next;
    }
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

int rt_modex_abort(rt_modex_t *mx, int code, const char *msg)
{
    if (mx == NULL) {
        return FERRY_ERR_INVALID;
    }
    rt_log(mx->log, RT_LOG_ERROR, "modex: rank %d aborts the job with code %d: %s", mx->rank,
           code, msg != NULL ? msg : "(no message)");
    return mx->ops->abort(mx, code);
}
