/*
 * Zeroed memory for records made on a message path. glibc's calloc always
 * goes to the allocator's bins, while malloc takes recently freed chunks
 * from its per-thread cache first: for a record of a few hundred bytes
 * made and freed per message, malloc and memset cost a fifth of calloc's
 * instructions (callgrind: about 80 against 420 for a rendezvous's record).
 */
#ifndef UTIL_ZALLOC_H
#define UTIL_ZALLOC_H

#include <stdlib.h>
#include <string.h>

static inline void *util_zalloc(size_t size)
{
    void *p = malloc(size);
    if (p == NULL)
        return NULL;
    /* Compilers turn malloc then memset back into calloc; this empty
     * statement, which may read and write any memory, stops them. */
    __asm__ volatile("" : : "r"(p) : "memory");
    memset(p, 0, size);
    return p;
}

#endif /* UTIL_ZALLOC_H */
