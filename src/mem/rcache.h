/*
 * Registration cache: one per transport, in front of its register and
 * deregister operations (the seed's "rdma" mpool with its rcache).
 *
 * - A lookup reuses any registration that covers the requested range with
 *   at least the requested access, and counts a reference on it.
 * - Leave-pinned: a registration whose last user is done stays registered
 *   for the next user, in least-recently-used order, and is released when
 *   the cache holds more than its size limit (0: no limit) or more unused
 *   ones than its idle_max (0: no limit), when the
 *   transport runs out of registrations, or when its memory goes away.
 *   Without leave-pinned it is released at once.
 * - Invalidation: with the memory monitor (mem/monitor.h), a registration
 *   whose memory is unmapped or discarded is dropped before that address
 *   range can be looked up again. A registration that cannot be watched is
 *   never kept unused.
 * - When the transport runs out of registrations, the cache releases every
 *   unused one and tries once more; then it fails with
 *   FERRY_ERR_NO_RESOURCE and a message naming the limit to raise.
 *
 * Threads: a cache is used by one thread at a time (its context's rule);
 * the monitor thread only marks registrations dropped, under the monitor
 * lock, and the owner releases them with the transport at its next call.
 */
#ifndef MEM_RCACHE_H
#define MEM_RCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mem/itree.h"
#include "mem/monitor.h"
#include "rt/log.h"
#include "rt/params.h"
#include "util/list.h"

/* The transport's side: register [base, base + len) with FERRY_ACCESS_*
 * rights, and release what register made. */
typedef int (*mem_register_fn_t)(void *arg, void *base, size_t len, uint32_t access,
                                 void **handle_out);
typedef int (*mem_deregister_fn_t)(void *arg, void *handle);

/* The parameters every cache reads (FERRY_MEM_*). */
typedef struct mem_params {
    size_t size_limit; /* mem_rcache_size_limit */
    int leave_pinned;  /* mem_leave_pinned: -1 auto (on when memory is monitored), 0, 1 */
    bool monitor;      /* mem_monitor is "uffd" (else "none") */
    size_t watch_keep; /* mem_watch_keep: let-go ranges the monitor keeps watched */
} mem_params_t;

/* Registers the FERRY_MEM_* parameters (again is harmless) and reads them. */
int mem_params_register(rt_params_t *params, mem_params_t *out);

typedef struct mem_rcache_params {
    const char *name;       /* for messages, e.g. "sm" */
    const char *limit_hint; /* what to raise when the transport runs out, e.g.
                               "FERRY_SM_REG_SLOTS"; may be NULL */
    mem_params_t mem;
    mem_register_fn_t reg;
    mem_deregister_fn_t dereg;
    void *arg;
    const rt_log_t *log; /* may be NULL */
    /* At most this many registrations kept unused beside those in use (0:
     * no bound but the size limit): for a cache whose registrations take
     * a resource the transport has few of. */
    size_t idle_max;
} mem_rcache_params_t;

typedef struct mem_rcache_stats {
    uint64_t hits;
    uint64_t misses;
    uint64_t evictions;     /* unused registrations released for the limit or a retry */
    uint64_t invalidations; /* registrations dropped because their memory went */
    uint64_t retries;       /* registrations retried after running out */
    size_t entries;         /* registrations held (in use or not) */
    size_t bytes;           /* bytes they cover */
    size_t idle_bytes;      /* of which unused */
} mem_rcache_stats_t;

/* A registration the cache hands out. handle is the transport's. */
typedef struct mem_reg {
    mem_itree_node_t node; /* [base, base + len) while findable */
    void *base;
    size_t len;
    uint32_t access;
    void *handle;
    size_t refs;
    bool in_tree;   /* findable; false once dropped */
    bool keep;      /* may stay registered unused (watched, or unwatched by choice) */
    bool on_list;   /* on the idle (LRU) or dead list */
    util_list_item_t link;
    struct mem_monitor_watch *watch; /* its pages watched for unmapping, or NULL */
} mem_reg_t;

typedef struct mem_rcache {
    mem_rcache_params_t p;
    bool leave_pinned;
    bool monitored;
    mem_monitor_client_t client;
    mem_itree_t tree;
    util_list_t idle; /* unused registrations in the tree, least recent first */
    util_list_t dead; /* unused registrations whose memory went, to release */
    mem_rcache_stats_t stats;
} mem_rcache_t;

/* Creates a cache. FERRY_ERR_NO_MEMORY, or FERRY_OK (a monitor that cannot
 * start is logged and leaves leave-pinned off unless forced). */
int mem_rcache_create(const mem_rcache_params_t *params, mem_rcache_t **cache_out);

/* Releases every registration and frees the cache. FERRY_ERR_BUSY (logged)
 * when some were still in use; they are released all the same. Safe on
 * NULL. */
int mem_rcache_destroy(mem_rcache_t *cache);

/* A registration covering [addr, addr + len) with at least access, and a
 * reference on it. len 0 or a range that wraps is FERRY_ERR_INVALID;
 * otherwise the transport's error (FERRY_ERR_NO_RESOURCE after the evicting
 * retry, logged with the limit to raise). */
int mem_rcache_get(mem_rcache_t *cache, void *addr, size_t len, uint32_t access,
                   mem_reg_t **reg_out);

/* Drops the reference get gave. */
void mem_rcache_put(mem_rcache_t *cache, mem_reg_t *reg);

/* Releases registrations dropped by invalidation and returns how many. */
size_t mem_rcache_purge(mem_rcache_t *cache);

/* Releases every unused registration. */
void mem_rcache_flush(mem_rcache_t *cache);

void mem_rcache_get_stats(const mem_rcache_t *cache, mem_rcache_stats_t *stats_out);

#endif /* MEM_RCACHE_H */
