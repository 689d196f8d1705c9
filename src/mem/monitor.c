/*
 * userfaultfd memory monitor. See monitor.h for the design and its limits.
 */
#include "mem/monitor.h"
#include "mem/itree.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ferry/ferry.h>

/* The events that mean "this range no longer holds what it held". */
#define MON_EVENTS (UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP)
/* Wanted when the kernel has them, so that write-protect mode (which never
 * faults unless pages are protected, and we protect none) works on
 * anonymous and shared memory alike. */
#define MON_OPTIONAL (UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_WP_HUGETLBFS_SHMEM)

/*
 * Process-wide by necessity (a range can be watched by one userfaultfd
 * only): the one exception to "no global mutable state". `lock` guards the
 * client list and every cache's tree; `setup` guards starting and stopping.
 */
static struct {
    pthread_mutex_t setup;
    pthread_mutex_t lock;
    int users;
    int uffd;
    int wake[2];
    pthread_t thread;
    util_list_t clients;
    bool clients_ready;
    _Atomic uint64_t events;
    /* Every watch, live or kept, by its pages, so that a page is
     * unregistered only when no watch covers it; `watch_lock` guards the
     * tree, the kept list and the counts, and orders the register and
     * unregister calls (the monitor thread never takes it). */
    pthread_mutex_t watch_lock;
    mem_itree_t watches;
    bool watches_ready;
    util_list_t kept; /* watches whose owner let go, least recently used first */
    size_t n_kept, keep;
    mem_monitor_watch_stats_t stats;
    /* Ranges unmapped or moved away since the watch side last looked
     * (under `lock`: the monitor thread writes them, watch calls take
     * them). More than fit break every watch. */
    struct {
        uintptr_t start, end;
    } gone[32];
    unsigned n_gone;
    bool gone_overflow;
} mon = {
    .setup = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .watch_lock = PTHREAD_MUTEX_INITIALIZER,
    .uffd = -1,
    .wake = {-1, -1},
    .keep = MEM_MONITOR_KEEP_DEFAULT,
};

void mem_monitor_lock(void)
{
    pthread_mutex_lock(&mon.lock);
}

void mem_monitor_unlock(void)
{
    pthread_mutex_unlock(&mon.lock);
}

/* 1 from before the monitor thread reads events until it has handled them
 * all (mem_monitor_settled, inline in monitor.h). */
_Atomic unsigned mem_monitor_draining;

uint64_t mem_monitor_events(void)
{
    return atomic_load(&mon.events);
}

/* A userfaultfd, trying the system call (also in user-mode-only form, which
 * unprivileged processes may get since Linux 5.11) and then /dev/userfaultfd. */
static int uffd_open(int *err_out)
{
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
#ifdef UFFD_USER_MODE_ONLY
    if (fd < 0 && errno == EPERM)
        fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
#endif
#ifdef USERFAULTFD_IOC_NEW
    if (fd < 0) {
        int saved = errno;
        int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
        if (dev >= 0) {
            fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
            close(dev);
        }
        if (fd < 0)
            errno = saved;
    }
#endif
    if (fd < 0)
        *err_out = errno;
    return fd;
}

static void dispatch(mem_monitor_event_t event, uintptr_t start, uintptr_t end)
{
    for (util_list_item_t *it = util_list_first(&mon.clients); it != NULL;
         it = util_list_next(&mon.clients, it)) {
        mem_monitor_client_t *c = UTIL_CONTAINER_OF(it, mem_monitor_client_t, link);
        c->invalidate(c, event, start, end);
    }
}

/* A range whose pages left the address space: the kernel dropped their
 * registration with them, so a watch over them covers nothing any more.
 * Noted for the watch side (lock held). */
static void note_gone(uintptr_t start, uintptr_t end)
{
    if (mon.n_gone < sizeof(mon.gone) / sizeof(mon.gone[0])) {
        mon.gone[mon.n_gone].start = start;
        mon.gone[mon.n_gone].end = end;
        mon.n_gone++;
    } else {
        mon.gone_overflow = true;
    }
}

/* Reads and handles every queued event. Called with mon.lock held. */
static void drain(void)
{
    struct uffd_msg msgs[16];
    for (;;) {
        ssize_t n = read(mon.uffd, msgs, sizeof(msgs));
        if (n < (ssize_t)sizeof(msgs[0]))
            return; /* EAGAIN: nothing more queued */
        for (size_t i = 0; i < (size_t)n / sizeof(msgs[0]); i++) {
            const struct uffd_msg *m = &msgs[i];
            switch (m->event) {
            case UFFD_EVENT_UNMAP:
                note_gone((uintptr_t)m->arg.remove.start, (uintptr_t)m->arg.remove.end);
                dispatch(MEM_MONITOR_UNMAP, (uintptr_t)m->arg.remove.start,
                         (uintptr_t)m->arg.remove.end);
                break;
            case UFFD_EVENT_REMOVE:
                dispatch(MEM_MONITOR_DISCARD, (uintptr_t)m->arg.remove.start,
                         (uintptr_t)m->arg.remove.end);
                break;
            case UFFD_EVENT_REMAP:
                note_gone((uintptr_t)m->arg.remap.from,
                          (uintptr_t)(m->arg.remap.from + m->arg.remap.len));
                dispatch(MEM_MONITOR_MOVE, (uintptr_t)m->arg.remap.from,
                         (uintptr_t)(m->arg.remap.from + m->arg.remap.len));
                break;
            case UFFD_EVENT_PAGEFAULT: {
                /* We protect no page, so this should not happen; should it,
                 * lift the protection so the faulting thread goes on. */
                long page = sysconf(_SC_PAGESIZE);
                struct uffdio_writeprotect wp = {
                    .range = {.start = m->arg.pagefault.address & ~(uint64_t)(page - 1),
                              .len = (uint64_t)page},
                    .mode = 0,
                };
                if (ioctl(mon.uffd, UFFDIO_WRITEPROTECT, &wp) != 0) {
                    struct uffdio_range r = wp.range;
                    ioctl(mon.uffd, UFFDIO_WAKE, &r);
                }
                break;
            }
            default:
                break;
            }
            atomic_fetch_add(&mon.events, 1);
        }
    }
}

static void *monitor_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = mon.uffd, .events = POLLIN},
                              {.fd = mon.wake[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents != 0)
            break;
        /* The read that releases the unmapping thread and the invalidation
         * happen under one hold of the lock: see monitor.h. */
        pthread_mutex_lock(&mon.lock);
        atomic_store_explicit(&mem_monitor_draining, 1, memory_order_seq_cst);
        drain();
        atomic_store_explicit(&mem_monitor_draining, 0, memory_order_release);
        pthread_mutex_unlock(&mon.lock);
    }
    return NULL;
}

static void monitor_close(void)
{
    if (mon.uffd >= 0)
        close(mon.uffd);
    if (mon.wake[0] >= 0)
        close(mon.wake[0]);
    if (mon.wake[1] >= 0)
        close(mon.wake[1]);
    mon.uffd = mon.wake[0] = mon.wake[1] = -1;
}

/* Opens the userfaultfd with the features we need and starts the thread. */
static int monitor_start(char *why, size_t why_len)
{
    int err = 0;
    int probe = uffd_open(&err);
    if (probe < 0) {
        snprintf(why, why_len, "userfaultfd: %s (see vm.unprivileged_userfaultfd)",
                 strerror(err));
        return FERRY_ERR_NOT_SUPPORTED;
    }
    /* The features a kernel offers are learnt on a first descriptor; a
     * descriptor's features are fixed by its one UFFDIO_API call. */
    struct uffdio_api api = {.api = UFFD_API, .features = 0};
    if (ioctl(probe, UFFDIO_API, &api) != 0) {
        snprintf(why, why_len, "userfaultfd API handshake: %s", strerror(errno));
        close(probe);
        return FERRY_ERR_NOT_SUPPORTED;
    }
    close(probe);
    uint64_t avail = api.features;
    if ((avail & MON_EVENTS) != MON_EVENTS) {
        snprintf(why, why_len, "the kernel's userfaultfd lacks unmap/remove/remap events");
        return FERRY_ERR_NOT_SUPPORTED;
    }
    mon.uffd = uffd_open(&err);
    if (mon.uffd < 0) {
        snprintf(why, why_len, "userfaultfd: %s", strerror(err));
        return FERRY_ERR_NOT_SUPPORTED;
    }
    api = (struct uffdio_api){.api = UFFD_API,
                              .features = MON_EVENTS | (avail & MON_OPTIONAL)};
    if (ioctl(mon.uffd, UFFDIO_API, &api) != 0) {
        snprintf(why, why_len, "userfaultfd features: %s", strerror(errno));
        monitor_close();
        return FERRY_ERR_NOT_SUPPORTED;
    }
    if (pipe2(mon.wake, O_CLOEXEC) != 0) {
        snprintf(why, why_len, "pipe: %s", strerror(errno));
        monitor_close();
        return FERRY_ERR_NOT_SUPPORTED;
    }
    int rc = pthread_create(&mon.thread, NULL, monitor_main, NULL);
    if (rc != 0) {
        snprintf(why, why_len, "starting the monitor thread: %s", strerror(rc));
        monitor_close();
        return FERRY_ERR_NOT_SUPPORTED;
    }
    return FERRY_OK;
}

int mem_monitor_attach(mem_monitor_client_t *client, char *why, size_t why_len)
{
    int rc = FERRY_OK;
    pthread_mutex_lock(&mon.setup);
    if (mon.users == 0)
        rc = monitor_start(why, why_len);
    if (rc == FERRY_OK) {
        mon.users++;
        pthread_mutex_lock(&mon.lock);
        if (!mon.clients_ready) {
            util_list_init(&mon.clients);
            mon.clients_ready = true;
        }
        util_list_append(&mon.clients, &client->link);
        pthread_mutex_unlock(&mon.lock);
    }
    pthread_mutex_unlock(&mon.setup);
    return rc;
}

static void watches_closed(util_list_t *out);
static void free_watches(util_list_t *list);

void mem_monitor_detach(mem_monitor_client_t *client)
{
    pthread_mutex_lock(&mon.setup);
    pthread_mutex_lock(&mon.lock);
    util_list_remove(&mon.clients, &client->link);
    pthread_mutex_unlock(&mon.lock);
    if (--mon.users == 0) {
        char c = 1;
        while (write(mon.wake[1], &c, 1) < 0 && errno == EINTR)
            ;
        pthread_join(mon.thread, NULL);
        /* Closing the descriptor unwatches every range: kept watches go,
         * and watches still held cover nothing (they are then only freed). */
        util_list_t out;
        util_list_init(&out);
        pthread_mutex_lock(&mon.watch_lock);
        monitor_close();
        watches_closed(&out);
        pthread_mutex_unlock(&mon.watch_lock);
        free_watches(&out);
    }
    pthread_mutex_unlock(&mon.setup);
}

struct mem_monitor_watch {
    mem_itree_node_t node; /* the pages watched */
    /* An unmap or move reached its pages since they were registered: the
     * kernel's registration of some of them went with the memory, so this
     * watch vouches for none of them. */
    bool broken;
    bool kept;              /* let go by its owner, kept registered for the next */
    util_list_item_t link;  /* on mon.kept while kept; on a free list after */
};

/* Unregisters the pages of [cur, hi) that no remaining watch covers,
 * visiting the watches that overlap it in start order. */
typedef struct uncover {
    uintptr_t cur, hi;
} uncover_t;

static void unregister_pages(uintptr_t lo, uintptr_t hi)
{
    if (hi <= lo || mon.uffd < 0)
        return;
    struct uffdio_range r = {.start = lo, .len = hi - lo};
    /* Fails harmlessly where the range is no longer mapped. */
    (void)ioctl(mon.uffd, UFFDIO_UNREGISTER, &r);
}

static bool uncover_visit(mem_itree_node_t *n, void *arg)
{
    uncover_t *u = arg;
    if (n->start > u->cur)
        unregister_pages(u->cur, n->start < u->hi ? n->start : u->hi);
    if (n->end > u->cur)
        u->cur = n->end;
    return u->cur < u->hi;
}

/* Takes w out of the tree and unregisters its pages that no other watch
 * covers. watch_lock held; the caller frees w. */
static void drop_watch(mem_monitor_watch_t *w)
{
    mem_itree_remove(&mon.watches, &w->node);
    uncover_t u = {.cur = w->node.start, .hi = w->node.end};
    mem_itree_overlaps(&mon.watches, u.cur, u.hi, uncover_visit, &u);
    if (u.cur < u.hi)
        unregister_pages(u.cur, u.hi);
}

static void free_watches(util_list_t *list)
{
    util_list_item_t *it;
    while ((it = util_list_pop_front(list)) != NULL)
        free(UTIL_CONTAINER_OF(it, mem_monitor_watch_t, link));
}

/* Drops the least recently used kept watches beyond `keep` (watch_lock held). */
static void evict_kept(size_t keep, util_list_t *out)
{
    while (mon.n_kept > keep) {
        mem_monitor_watch_t *w =
            UTIL_CONTAINER_OF(util_list_pop_front(&mon.kept), mem_monitor_watch_t, link);
        mon.n_kept--;
        drop_watch(w);
        util_list_append(out, &w->link);
    }
}

static bool break_visit(mem_itree_node_t *n, void *arg)
{
    (void)arg;
    UTIL_CONTAINER_OF(n, mem_monitor_watch_t, node)->broken = true;
    return true;
}

/* Applies what the monitor thread saw go since the last call: the watches
 * over it are broken, and broken kept ones dropped. watch_lock held; takes
 * the monitor lock briefly (the monitor thread takes only that one). */
static void take_gone(util_list_t *out)
{
    unsigned n;
    bool overflow;
    uintptr_t gone[sizeof(mon.gone) / sizeof(mon.gone[0])][2];
    pthread_mutex_lock(&mon.lock);
    n = mon.n_gone;
    overflow = mon.gone_overflow;
    for (unsigned i = 0; i < n; i++) {
        gone[i][0] = mon.gone[i].start;
        gone[i][1] = mon.gone[i].end;
    }
    mon.n_gone = 0;
    mon.gone_overflow = false;
    pthread_mutex_unlock(&mon.lock);
    if (n == 0 && !overflow)
        return;
    if (overflow)
        mem_itree_overlaps(&mon.watches, 0, UINTPTR_MAX, break_visit, NULL);
    else
        for (unsigned i = 0; i < n; i++)
            mem_itree_overlaps(&mon.watches, gone[i][0], gone[i][1], break_visit, NULL);
    util_list_item_t *it = util_list_first(&mon.kept);
    while (it != NULL) {
        mem_monitor_watch_t *w = UTIL_CONTAINER_OF(it, mem_monitor_watch_t, link);
        it = util_list_next(&mon.kept, it);
        if (w->broken) {
            util_list_remove(&mon.kept, &w->link);
            mon.n_kept--;
            drop_watch(w);
            util_list_append(out, &w->link);
        }
    }
}

/* The descriptor closed (watch_lock held): every registration went with it. */
static void watches_closed(util_list_t *out)
{
    if (!mon.watches_ready)
        return;
    evict_kept(0, out);
    mem_itree_overlaps(&mon.watches, 0, UINTPTR_MAX, break_visit, NULL);
    pthread_mutex_lock(&mon.lock);
    mon.n_gone = 0;
    mon.gone_overflow = false;
    pthread_mutex_unlock(&mon.lock);
}

static bool intact_visit(mem_itree_node_t *n, void *arg)
{
    mem_monitor_watch_t *w = UTIL_CONTAINER_OF(n, mem_monitor_watch_t, node);
    if (w->broken)
        return true;
    *(mem_monitor_watch_t **)arg = w;
    return false;
}

/* An intact watch holding every page of [lo, hi), or NULL (watch_lock held). */
static mem_monitor_watch_t *intact_cover(uintptr_t lo, uintptr_t hi)
{
    mem_monitor_watch_t *by = NULL;
    mem_itree_containing(&mon.watches, lo, hi, intact_visit, &by);
    return by;
}

static void watches_init(void)
{
    if (!mon.watches_ready) {
        mem_itree_init(&mon.watches);
        util_list_init(&mon.kept);
        mon.watches_ready = true;
    }
}

int mem_monitor_watch(uintptr_t start, uintptr_t end, mem_monitor_watch_t **watch_out)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = start & ~(page - 1);
    uintptr_t hi = end > UINTPTR_MAX - (page - 1) ? 0 : (end + page - 1) & ~(page - 1);
    if (hi <= lo)
        return FERRY_ERR_NOT_SUPPORTED;
    mem_monitor_watch_t *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return FERRY_ERR_NO_MEMORY;
    w->node.start = lo;
    w->node.end = hi;
    /* Exactly the pages of the range, never a neighbour's: a mapping next
     * to it may belong to an allocator (a sanitizer's, or the monitor
     * thread's own trace buffers) that unmaps it while holding a lock the
     * monitor thread needs, and a watched range's unmapper waits for the
     * monitor. The price is the mremap limit in monitor.h. */
    /* Write-protect mode: events without faults, since we protect nothing. */
    struct uffdio_register reg = {
        .range = {.start = lo, .len = hi - lo},
        .mode = UFFDIO_REGISTER_MODE_WP,
    };
    util_list_t out;
    util_list_init(&out);
    pthread_mutex_lock(&mon.watch_lock);
    watches_init();
    take_gone(&out);
    int rc = FERRY_ERR_NOT_SUPPORTED;
    mem_monitor_watch_t *by = mon.uffd >= 0 ? intact_cover(lo, hi) : NULL;
    if (by != NULL) {
        /* Pages registered already, and nothing has unmapped them since. */
        rc = FERRY_OK;
        mon.stats.reused++;
        if (by->kept) {
            util_list_remove(&mon.kept, &by->link);
            util_list_append(&mon.kept, &by->link);
        }
    } else if (mon.uffd >= 0 && ioctl(mon.uffd, UFFDIO_REGISTER, &reg) == 0) {
        rc = FERRY_OK;
        mon.stats.registered++;
    }
    if (rc == FERRY_OK)
        mem_itree_insert(&mon.watches, &w->node);
    pthread_mutex_unlock(&mon.watch_lock);
    free_watches(&out);
    if (rc != FERRY_OK) {
        free(w);
        return rc;
    }
    *watch_out = w;
    return FERRY_OK;
}

void mem_monitor_unwatch(mem_monitor_watch_t *w)
{
    if (w == NULL)
        return;
    util_list_t out;
    util_list_init(&out);
    pthread_mutex_lock(&mon.watch_lock);
    take_gone(&out);
    if (mon.keep == 0 || mon.uffd < 0 || w->broken) {
        drop_watch(w);
        util_list_append(&out, &w->link);
    } else {
        mem_itree_remove(&mon.watches, &w->node);
        if (intact_cover(w->node.start, w->node.end) != NULL) {
            /* Its pages stay registered for the watch that covers them. */
            util_list_append(&out, &w->link);
        } else {
            /* Kept registered: the next watch of these pages (the same
             * buffer sent again) costs no system call. */
            w->kept = true;
            mem_itree_insert(&mon.watches, &w->node);
            util_list_append(&mon.kept, &w->link);
            mon.n_kept++;
            evict_kept(mon.keep, &out);
        }
    }
    pthread_mutex_unlock(&mon.watch_lock);
    free_watches(&out);
}

void mem_monitor_keep(size_t n)
{
    util_list_t out;
    util_list_init(&out);
    pthread_mutex_lock(&mon.watch_lock);
    watches_init();
    mon.keep = n;
    evict_kept(n, &out);
    pthread_mutex_unlock(&mon.watch_lock);
    free_watches(&out);
}

void mem_monitor_get_watch_stats(mem_monitor_watch_stats_t *out)
{
    pthread_mutex_lock(&mon.watch_lock);
    *out = mon.stats;
    out->kept = mon.n_kept;
    pthread_mutex_unlock(&mon.watch_lock);
}
