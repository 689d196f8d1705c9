/*
 * Pool of fixed-size elements kept on a singly linked free list.
 *
 * Each element occupies one stride: the caller's elem_size bytes, then the
 * free-list link, then padding up to the alignment. The link sits after the
 * caller's bytes rather than over them because elem_init runs only once per
 * element: whatever it set up must survive every put and get, as the fields
 * of the seed's free-list items survive their return to the list.
 *
 * Elements are carved from chunks obtained with aligned_alloc; each chunk
 * starts with a small header, padded to the alignment, that chains the chunks
 * together for fini.
 */
#include "util/pool.h"

#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#define POOL_DEFAULT_ALIGN 16u
#define POOL_MAX_ALIGN 4096u

struct pool_chunk {
    struct pool_chunk *next;
    size_t count;
};

static const char *pool_name(const util_pool_params_t *p)
{
    return p->name != NULL ? p->name : "(unnamed)";
}

/* Rounds x up to a multiple of a power of two; false on overflow. */
static bool round_up(size_t x, size_t a, size_t *out)
{
    if (x > SIZE_MAX - (a - 1))
        return false;
    *out = (x + a - 1) & ~(a - 1);
    return true;
}

/* Offset of the free-list link inside an element: just past the caller's
 * bytes, rounded up so the pointer is aligned. */
static size_t link_offset(const util_pool_t *pool)
{
    return (pool->params.elem_size + alignof(void *) - 1) & ~(alignof(void *) - 1);
}

static void **elem_link(const util_pool_t *pool, void *elem)
{
    return (void **)((char *)elem + link_offset(pool));
}

static size_t chunk_header_size(const util_pool_t *pool)
{
    /* The header is small and the alignment at least 16 in practice, but round
     * it up generically so the first element stays aligned. */
    size_t a = pool->params.align;
    return (sizeof(struct pool_chunk) + a - 1) & ~(a - 1);
}

/* Allocates count more elements, runs elem_init on each and pushes them on
 * the free list. */
static int pool_grow(util_pool_t *pool, size_t count)
{
    size_t hdr = chunk_header_size(pool);
    size_t bytes;
    struct pool_chunk *chunk;
    char *first;

    if (count == 0)
        return FERRY_OK;
    if (count > (SIZE_MAX - hdr) / pool->stride)
        return FERRY_ERR_NO_MEMORY;
    bytes = hdr + count * pool->stride; /* a multiple of align, as aligned_alloc wants */
    chunk = aligned_alloc(pool->params.align, bytes);
    if (chunk == NULL)
        return FERRY_ERR_NO_MEMORY;
    chunk->count = count;
    chunk->next = pool->chunks;
    pool->chunks = chunk;

    first = (char *)chunk + hdr;
    /* Push in reverse so that gets hand out elements in address order, which
     * is kinder to caches and makes the pool easier to debug. */
    for (size_t i = count; i-- > 0;) {
        void *elem = first + i * pool->stride;
        if (pool->params.elem_init != NULL)
            pool->params.elem_init(elem, pool->params.elem_init_arg);
        *elem_link(pool, elem) = pool->free_head;
        pool->free_head = elem;
    }
    pool->allocated += count;
    return FERRY_OK;
}

static int pool_invalid(const util_pool_params_t *p, const char *why)
{
    fprintf(stderr, "ferry: pool '%s': %s\n", pool_name(p), why);
    return FERRY_ERR_INVALID;
}

int util_pool_init(util_pool_t *pool, const util_pool_params_t *params)
{
    size_t align;
    size_t body;
    size_t stride;
    int rc;

    if (pool == NULL || params == NULL) {
        fprintf(stderr, "ferry: pool: NULL pool or parameters\n");
        return FERRY_ERR_INVALID;
    }
    memset(pool, 0, sizeof(*pool));

    align = params->align == 0 ? POOL_DEFAULT_ALIGN : params->align;
    if ((align & (align - 1)) != 0 || align > POOL_MAX_ALIGN)
        return pool_invalid(params, "alignment must be 0 or a power of two up to 4096");
    /* The link is a pointer, so every element must at least be aligned for one. */
    if (align < alignof(void *))
        align = alignof(void *);
    if (params->elem_size == 0)
        return pool_invalid(params, "element size must be greater than 0");
    if (params->increment == 0)
        return pool_invalid(params, "increment must be greater than 0");
    if (params->max != 0 && params->initial > params->max)
        return pool_invalid(params, "initial count exceeds the maximum");
    if (!round_up(params->elem_size, alignof(void *), &body) ||
        body > SIZE_MAX - sizeof(void *) || !round_up(body + sizeof(void *), align, &stride) ||
        stride > SIZE_MAX / 2)
        return pool_invalid(params, "element size too large");

    pool->params = *params;
    pool->params.align = align;
    pool->stride = stride;

    rc = pool_grow(pool, params->initial);
    if (rc != FERRY_OK) {
        fprintf(stderr, "ferry: pool '%s': cannot allocate %zu elements of %zu bytes\n",
                pool_name(params), params->initial, stride);
        util_pool_fini(pool);
        return rc;
    }
    return FERRY_OK;
}

void *util_pool_get(util_pool_t *pool)
{
    void *elem = pool->free_head;

    if (elem == NULL) {
        size_t n = pool->params.increment;
        if (pool->params.max != 0) {
            size_t room = pool->params.max - pool->allocated;
            if (n > room)
                n = room;
        }
        if (n == 0 || pool_grow(pool, n) != FERRY_OK)
            return NULL;
        elem = pool->free_head;
    }
    pool->free_head = *elem_link(pool, elem);
    pool->in_use++;
    return elem;
}

void util_pool_put(util_pool_t *pool, void *elem)
{
    if (elem == NULL)
        return;
    *elem_link(pool, elem) = pool->free_head;
    pool->free_head = elem;
    pool->in_use--;
}

size_t util_pool_fini(util_pool_t *pool)
{
    size_t leaked = pool->in_use;
    struct pool_chunk *chunk = pool->chunks;

#ifndef NDEBUG
    if (leaked != 0)
        fprintf(stderr, "ferry: pool '%s': %zu of %zu elements not returned\n",
                pool_name(&pool->params), leaked, pool->allocated);
#endif
    while (chunk != NULL) {
        struct pool_chunk *next = chunk->next;
        free(chunk);
        chunk = next;
    }
    memset(pool, 0, sizeof(*pool));
    return leaked;
}
