/*
 * Registration cache. Every change to the tree, the lists and the counters
 * happens under the monitor lock, because the monitor thread drops
 * registrations too; allocation, freeing and the transport's callbacks
 * happen outside it (see mem/monitor.h for why).
 */
#include "mem/rcache.h"

#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

int mem_params_register(rt_params_t *params, mem_params_t *out)
{
    long long lp;
    const char *monitor;
    int rc;
    if ((rc = rt_param_register_size(
             params, "mem_rcache_size_limit", 0, 0, 0,
             "Most bytes each transport's registration cache keeps registered; beyond it the "
             "least recently used unused registrations are released (0: no limit)",
             &out->size_limit)) != FERRY_OK ||
        (rc = rt_param_register_int(
             params, "mem_leave_pinned", -1, -1, 1,
             "Keep memory registered after an operation for the next one: 1 yes, 0 no, -1 "
             "when unmapping can be watched (FERRY_MEM_MONITOR)",
             &lp)) != FERRY_OK ||
        (rc = rt_param_register_string(
             params, "mem_monitor", "uffd",
             "How registration caches learn that memory was unmapped: uffd (userfaultfd "
             "events) or none",
             &monitor)) != FERRY_OK ||
        (rc = rt_param_register_size(
             params, "mem_watch_keep", MEM_MONITOR_KEEP_DEFAULT, 0, 1 << 20,
             "How many memory ranges whose registration ended stay watched for unmapping, "
             "so that registering them again needs no system call (0: none; process-wide)",
             &out->watch_keep)) != FERRY_OK)
        return rc;
    if (strcmp(monitor, "uffd") != 0 && strcmp(monitor, "none") != 0) {
        rt_log(params->log, RT_LOG_ERROR,
               "FERRY_MEM_MONITOR='%s': expected 'uffd' or 'none'", monitor);
        return FERRY_ERR_INVALID;
    }
    out->leave_pinned = (int)lp;
    out->monitor = strcmp(monitor, "uffd") == 0;
    return FERRY_OK;
}


/* Takes reg out of the tree and off its list. Lock held. */
static void unlink_reg(mem_rcache_t *c, mem_reg_t *r)
{
    if (r->in_tree) {
        mem_itree_remove(&c->tree, &r->node);
        r->in_tree = false;
    }
    if (r->on_list) {
        util_list_remove(r->refs == 0 && !r->in_tree ? &c->dead : &c->idle, &r->link);
        r->on_list = false;
    }
}

struct drop_arg {
    mem_reg_t *found;
};

static bool first_overlap(mem_itree_node_t *n, void *arg)
{
    ((struct drop_arg *)arg)->found = UTIL_CONTAINER_OF(n, mem_reg_t, node);
    return false;
}

/* Monitor thread, lock held: drop every registration overlapping the range
 * (whatever happened to it: a discarded range holds other pages now, which
 * a transport with hardware translation would not see). Unused ones go to
 * the dead list for the owner to release. */
static void rcache_invalidate(mem_monitor_client_t *client, mem_monitor_event_t event,
                              uintptr_t start, uintptr_t end)
{
    (void)event;
    mem_rcache_t *c = UTIL_CONTAINER_OF(client, mem_rcache_t, client);
    for (;;) {
        struct drop_arg a = {NULL};
        mem_itree_overlaps(&c->tree, start, end, first_overlap, &a);
        if (a.found == NULL)
            break;
        mem_reg_t *r = a.found;
        if (r->on_list) {
            util_list_remove(&c->idle, &r->link);
            r->on_list = false;
        }
        mem_itree_remove(&c->tree, &r->node);
        r->in_tree = false;
        c->stats.invalidations++;
        if (r->refs == 0) {
            util_list_append(&c->dead, &r->link);
            r->on_list = true;
        }
    }
}

int mem_rcache_create(const mem_rcache_params_t *params, mem_rcache_t **cache_out)
{
    if (params == NULL || params->reg == NULL || params->dereg == NULL || cache_out == NULL)
        return FERRY_ERR_INVALID;
    mem_rcache_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return FERRY_ERR_NO_MEMORY;
    c->p = *params;
    mem_itree_init(&c->tree);
    util_list_init(&c->idle);
    util_list_init(&c->dead);
    c->client.invalidate = rcache_invalidate;
    if (c->p.mem.monitor) {
        char why[160] = "";
        if (mem_monitor_attach(&c->client, why, sizeof(why)) == FERRY_OK) {
            c->monitored = true;
            mem_monitor_keep(c->p.mem.watch_keep);
        } else if (c->p.log != NULL)
            rt_log(c->p.log, c->p.mem.leave_pinned == 1 ? RT_LOG_WARN : RT_LOG_INFO,
                   "%s registration cache: unmapped memory cannot be watched (%s); unused "
                   "registrations are released at once unless FERRY_MEM_LEAVE_PINNED=1",
                   c->p.name, why);
    }
    c->leave_pinned = c->p.mem.leave_pinned == 1 || (c->p.mem.leave_pinned < 0 && c->monitored);
    if (c->leave_pinned && !c->monitored && c->p.log != NULL)
        rt_log(c->p.log, RT_LOG_WARN,
               "%s registration cache: FERRY_MEM_LEAVE_PINNED=1 without watching unmapped "
               "memory: memory must stay mapped while ferry keeps it registered",
               c->p.name);
    *cache_out = c;
    return FERRY_OK;
}

/* Releases a list of registrations taken out of the cache. No lock held. */
static void release_list(mem_rcache_t *c, util_list_t *list)
{
    util_list_item_t *it;
    while ((it = util_list_pop_front(list)) != NULL) {
        mem_reg_t *r = UTIL_CONTAINER_OF(it, mem_reg_t, link);
        c->p.dereg(c->p.arg, r->handle);
        mem_monitor_unwatch(r->watch);
        free(r);
    }
}

/* Moves what the dead list holds to out and updates the counters. Lock held. */
static void take_dead(mem_rcache_t *c, util_list_t *out)
{
    util_list_item_t *it;
    while ((it = util_list_pop_front(&c->dead)) != NULL) {
        mem_reg_t *r = UTIL_CONTAINER_OF(it, mem_reg_t, link);
        r->on_list = false;
        c->stats.entries--;
        c->stats.bytes -= r->len;
        util_list_append(out, it);
    }
}

/* Whether the cache holds more than its limits allow: bytes over the size
 * limit, or unused registrations over idle_max. Lock held. */
static bool over_limits(const mem_rcache_t *c)
{
    return (c->p.mem.size_limit > 0 && c->stats.bytes > c->p.mem.size_limit) ||
           (c->p.idle_max > 0 && util_list_len(&c->idle) > c->p.idle_max);
}

/* Moves unused registrations, least recent first, to out while the cache is
 * over its limits (every one when all is true). Lock held. */
static void take_idle(mem_rcache_t *c, bool all, util_list_t *out)
{
    util_list_item_t *it;
    while ((all || over_limits(c)) && (it = util_list_first(&c->idle)) != NULL) {
        mem_reg_t *r = UTIL_CONTAINER_OF(it, mem_reg_t, link);
        util_list_remove(&c->idle, it);
        r->on_list = false;
        mem_itree_remove(&c->tree, &r->node);
        r->in_tree = false;
        c->stats.entries--;
        c->stats.bytes -= r->len;
        c->stats.idle_bytes -= r->len;
        c->stats.evictions++;
        util_list_append(out, it);
    }
}

size_t mem_rcache_purge(mem_rcache_t *c)
{
    util_list_t out;
    util_list_init(&out);
    mem_monitor_lock();
    take_dead(c, &out);
    mem_monitor_unlock();
    size_t n = util_list_len(&out);
    release_list(c, &out);
    return n;
}

void mem_rcache_flush(mem_rcache_t *c)
{
    util_list_t out;
    util_list_init(&out);
    mem_monitor_lock();
    take_dead(c, &out);
    take_idle(c, true, &out);
    mem_monitor_unlock();
    release_list(c, &out);
}

struct find_arg {
    uint32_t access;
    mem_reg_t *found;
};

static bool find_access(mem_itree_node_t *n, void *arg)
{
    struct find_arg *a = arg;
    mem_reg_t *r = UTIL_CONTAINER_OF(n, mem_reg_t, node);
    if ((r->access & a->access) != a->access)
        return true;
    a->found = r;
    return false;
}

int mem_rcache_get(mem_rcache_t *c, void *addr, size_t len, uint32_t access, mem_reg_t **reg_out)
{
    uintptr_t start = (uintptr_t)addr;
    if (c == NULL || addr == NULL || len == 0 || start > UINTPTR_MAX - len || reg_out == NULL)
        return FERRY_ERR_INVALID;
    util_list_t out;
    util_list_init(&out);

    mem_monitor_lock();
    take_dead(c, &out);
    struct find_arg a = {.access = access, .found = NULL};
    mem_itree_containing(&c->tree, start, start + len, find_access, &a);
    if (a.found != NULL) {
        mem_reg_t *r = a.found;
        if (r->refs++ == 0 && r->on_list) {
            util_list_remove(&c->idle, &r->link);
            r->on_list = false;
            c->stats.idle_bytes -= r->len;
        }
        c->stats.hits++;
        mem_monitor_unlock();
        release_list(c, &out);
        *reg_out = r;
        return FERRY_OK;
    }
    c->stats.misses++;
    mem_monitor_unlock();
    release_list(c, &out);

    mem_reg_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return FERRY_ERR_NO_MEMORY;
    int rc = c->p.reg(c->p.arg, addr, len, access, &r->handle);
    if (rc == FERRY_ERR_NO_RESOURCE) {
        /* Out of registrations: give back every unused one, then once more. */
        mem_monitor_lock();
        take_dead(c, &out);
        take_idle(c, true, &out);
        c->stats.retries++;
        size_t held = c->stats.entries, bytes = c->stats.bytes;
        mem_monitor_unlock();
        release_list(c, &out);
        rc = c->p.reg(c->p.arg, addr, len, access, &r->handle);
        if (rc == FERRY_ERR_NO_RESOURCE && c->p.log != NULL)
            rt_log(c->p.log, RT_LOG_ERROR,
                   "%s: out of registration resources registering %zu bytes, with %zu "
                   "registrations (%zu bytes) in use; raise %s%s",
                   c->p.name, len, held, bytes,
                   c->p.limit_hint != NULL ? c->p.limit_hint : "the transport's limit",
                   c->p.mem.size_limit > 0 ? " or lower FERRY_MEM_RCACHE_SIZE_LIMIT" : "");
    }
    if (rc != FERRY_OK) {
        free(r);
        return rc;
    }
    r->base = addr;
    r->len = len;
    r->access = access;
    r->refs = 1;
    r->node.start = start;
    r->node.end = start + len;
    /* Kept unused only if its memory is watched, or unwatched by choice. */
    r->keep = c->leave_pinned &&
              (!c->monitored || mem_monitor_watch(start, start + len, &r->watch) == FERRY_OK);

    mem_monitor_lock();
    mem_itree_insert(&c->tree, &r->node);
    r->in_tree = true;
    c->stats.entries++;
    c->stats.bytes += len;
    take_idle(c, false, &out);
    mem_monitor_unlock();
    release_list(c, &out);
    *reg_out = r;
    return FERRY_OK;
}

void mem_rcache_put(mem_rcache_t *c, mem_reg_t *r)
{
    util_list_t out;
    util_list_init(&out);
    mem_monitor_lock();
    if (--r->refs == 0) {
        if (r->in_tree && r->keep) {
            util_list_append(&c->idle, &r->link);
            r->on_list = true;
            c->stats.idle_bytes += r->len;
            take_idle(c, false, &out);
        } else {
            unlink_reg(c, r);
            c->stats.entries--;
            c->stats.bytes -= r->len;
            util_list_append(&out, &r->link);
        }
    }
    take_dead(c, &out);
    mem_monitor_unlock();
    release_list(c, &out);
}

void mem_rcache_get_stats(const mem_rcache_t *c, mem_rcache_stats_t *stats_out)
{
    mem_monitor_lock();
    *stats_out = c->stats;
    mem_monitor_unlock();
}

int mem_rcache_destroy(mem_rcache_t *c)
{
    if (c == NULL)
        return FERRY_OK;
    /* No more invalidations once detached: the tree is ours alone. */
    if (c->monitored)
        mem_monitor_detach(&c->client);
    mem_rcache_flush(c);
    int rc = FERRY_OK;
    size_t busy = c->stats.entries;
    while (c->tree.root != NULL) {
        mem_reg_t *r = UTIL_CONTAINER_OF(c->tree.root, mem_reg_t, node);
        mem_itree_remove(&c->tree, &r->node);
        c->p.dereg(c->p.arg, r->handle);
        mem_monitor_unwatch(r->watch);
        free(r);
    }
    if (busy > 0) {
        if (c->p.log != NULL)
            rt_log(c->p.log, RT_LOG_ERROR,
                   "%s registration cache: %zu registrations still in use at finalize",
                   c->p.name, busy);
        rc = FERRY_ERR_BUSY;
    }
    free(c);
    return rc;
}
