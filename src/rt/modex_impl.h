/*
 * Inside the modex: the object every backend shares and the table of a
 * backend's operations. modex.c checks the arguments of the public calls and
 * keeps this rank's own values; a backend only moves committed values to and
 * from its launcher.
 */
#ifndef RT_MODEX_IMPL_H
#define RT_MODEX_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include <stdint.h>

#include "rt/auth.h"
#include "rt/log.h"
#include "rt/modex.h"

/* Longest key accepted by rt_modex_put (modex.h). */
#define RT_MODEX_KEY_MAX 63
/* Longest job id, without the terminating NUL (modex.h). */
#define RT_MODEX_JOB_ID_MAX 255
/* Largest value: address blobs are small, and a launcher's key-value store is
 * not meant for bulk data, so a bigger one is refused rather than sent. */
#define RT_MODEX_VAL_MAX ((size_t)16 << 20)

/* One of this rank's values. */
typedef struct rt_modex_kv {
    char key[RT_MODEX_KEY_MAX + 1];
    unsigned char *val; /* malloc'd, NULL when len is 0 */
    size_t len;
    bool dirty; /* put since the last commit */
    unsigned long published; /* commits of this key so far: the next one's revision */
    struct rt_modex_kv *next;
} rt_modex_kv_t;

typedef struct rt_modex_ops {
    const char *name;
    /* Sends one of this rank's values to the launcher, as its revision
     * kv->published (modex.c counts the commits). */
    int (*publish)(rt_modex_t *mx, const rt_modex_kv_t *kv);
    /* Barrier over all ranks. */
    int (*fence)(rt_modex_t *mx);
    /* Reads another rank's committed value (rank != mx->rank, in range, key
     * valid). FERRY_ERR_NOT_FOUND when there is none. */
    int (*get)(rt_modex_t *mx, int rank, const char *key, void **val_out, size_t *len_out);
    /* Asks the launcher to end the job; msg is already logged. */
    int (*abort)(rt_modex_t *mx, int code);
    /* Leaves the job and frees mx->backend; safe when the backend's init
     * failed half way. */
    void (*fini)(rt_modex_t *mx);
} rt_modex_ops_t;

struct rt_modex {
    const rt_modex_ops_t *ops;
    const rt_log_t *log;
    int rank;
    int size;
    char job_id[RT_MODEX_JOB_ID_MAX + 1];
    rt_modex_kv_t *local; /* this rank's values, newest first */
    void *backend;        /* the backend's own state */
    /* The job's secret, when the launcher gave one (FERRY_JOB_SECRET; read
     * and wiped from the environment before the backend starts). */
    bool have_secret;
    uint8_t secret[RT_AUTH_KEY_LEN];
};

/* Each fills mx->ops, rank, size, job_id and backend, or returns an error
 * leaving whatever it allocated for ops->fini to free. mx->ops is set first,
 * so that rt_modex_fini can always call it. */
int rt_modex_singleton_init(rt_modex_t *mx);
int rt_modex_pmi1_init(rt_modex_t *mx);

/* Copies text into job_id (of RT_MODEX_JOB_ID_MAX + 1 bytes), replacing each
 * character outside [A-Za-z0-9_.-] by '_' and cutting it at the maximum
 * length; an empty text becomes "job". */
void rt_modex_set_job_id(rt_modex_t *mx, const char *text);

/* True for 1..RT_MODEX_KEY_MAX characters of [A-Za-z0-9_.-]. */
bool rt_modex_key_valid(const char *key);

#endif /* RT_MODEX_IMPL_H */
