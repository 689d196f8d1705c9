/*
 * Pool (free list) of fixed-size elements, the seed's ompi_free_list:
 * created with an initial count, grown by an increment up to a maximum, never
 * shrunk until fini. Single-threaded: the owner serializes access.
 */
#ifndef UTIL_POOL_H
#define UTIL_POOL_H

#include <stddef.h>

typedef struct util_pool_params {
    const char *name;  /* for leak reports and diagnostics */
    size_t elem_size;  /* bytes per element (> 0) */
    size_t align;      /* alignment of each element: 0 (= 16) or a power of two <= 4096 */
    size_t initial;    /* elements allocated by init (the seed's free_list_num) */
    size_t max;        /* most elements ever allocated; 0 = unlimited (free_list_max) */
    size_t increment;  /* elements added when the free list runs dry (free_list_inc), > 0 */
    /* Called once for each element when it is first allocated; may be NULL. */
    void (*elem_init)(void *elem, void *arg);
    void *elem_init_arg;
} util_pool_params_t;

typedef struct util_pool {
    /* Hot: touched on every get and put. */
    void *free_head;
    size_t in_use;
    /* Cold: growth and teardown. */
    util_pool_params_t params;
    size_t allocated;  /* elements created so far */
    size_t stride;     /* element size rounded up to the alignment */
    void *chunks;      /* list of allocated chunks */
} util_pool_t;

/* Validates params (FERRY_ERR_INVALID with a logged reason) and allocates the
 * initial elements (FERRY_ERR_NO_MEMORY). The name is copied by pointer: it
 * must outlive the pool. */
int util_pool_init(util_pool_t *pool, const util_pool_params_t *params);

/* An element, or NULL when the pool is at its maximum (or memory ran out). */
void *util_pool_get(util_pool_t *pool);

/* Returns an element taken from this pool. */
void util_pool_put(util_pool_t *pool, void *elem);

/* Frees all memory. Returns the number of elements not returned; in debug
 * builds (NDEBUG undefined) a leak is also reported on stderr with the pool's
 * name. Safe on a zeroed pool. */
size_t util_pool_fini(util_pool_t *pool);

static inline size_t util_pool_in_use(const util_pool_t *pool)
{
    return pool->in_use;
}

#endif /* UTIL_POOL_H */
