/*
 * The memory monitor: tells registration caches, synchronously enough to be
 * correct, that the application unmapped or discarded memory, so that no
 * cached registration outlives the memory it describes.
 *
 * Choice: the kernel's userfaultfd with the UNMAP, REMOVE and REMAP events,
 * read by one thread. Those events cover every way memory leaves an address
 * range (munmap, mremap, madvise DONTNEED/REMOVE/FREE, brk shrinking, and
 * malloc's own unmapping and trimming, which call the kernel through libc's
 * internal aliases that symbol interposition cannot see), in every library
 * of the process, static or dynamic.
 *
 * Why it is synchronous: the kernel makes the thread that unmaps a watched
 * range wait until the event has been read. The monitor thread reads events
 * and drops the registrations they cover while holding the monitor lock, and
 * every cache operation takes the same lock. So once munmap has returned in
 * a thread, a cache lookup in that thread waits for (or follows) the
 * invalidation: a stale registration is never found.
 *
 * Limits (docs/mem.md says the same):
 * - One lock and one thread per process, shared by every context: a range
 *   can be watched by one userfaultfd only. This is ferry's one piece of
 *   process-wide state, kept here and reference-counted.
 * - Only anonymous, shared-memory and hugetlbfs ranges can be watched; a
 *   range that cannot (a mapped regular file, or memory the application
 *   watches with its own userfaultfd) is registered uncached: released as
 *   soon as its last user is done.
 * - Multi-threaded processes: if one thread unmaps a range while another
 *   maps new memory at the same address and passes it to ferry before the
 *   first thread's munmap has returned, the second may see the old
 *   registration. Ordering the reuse after munmap returns is enough.
 * - Needs userfaultfd: root, CAP_SYS_PTRACE, vm.unprivileged_userfaultfd=1,
 *   or access to /dev/userfaultfd. Without it caches release unused
 *   registrations at once (leave-pinned off), which is always correct.
 * - A watched range stays watched until unmapped or unwatched (by its last
 *   watcher); unmapping one costs the unmapping thread a wake-up of the
 *   monitor thread.
 * - Watching the pages of a registration splits the mapping holding them at
 *   those pages, and mremap refuses (EFAULT) a range spanning two parts: an
 *   application that mremaps a whole buffer of which ferry registered only
 *   a part sees mremap fail (glibc's realloc then copies instead). Watching
 *   whole mappings instead would avoid that but can take in a neighbouring
 *   allocator's memory, whose unmapping under its lock could then deadlock
 *   with the monitor thread (seen under ThreadSanitizer).
 */
#ifndef MEM_MONITOR_H
#define MEM_MONITOR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/list.h"

/* How a range lost its memory. */
typedef enum {
    MEM_MONITOR_UNMAP,   /* unmapped (munmap, brk shrinking, a mapping placed over it) */
    MEM_MONITOR_MOVE,    /* moved elsewhere by mremap: nothing is mapped here any more */
    MEM_MONITOR_DISCARD  /* still mapped, but its pages were discarded (madvise
                            DONTNEED/REMOVE/FREE): it reads as zeros or as new pages */
} mem_monitor_event_t;

/* A cache that wants to hear about unmapped ranges. */
typedef struct mem_monitor_client {
    /* Called from the monitor thread with the monitor lock held, for a range
     * [start, end) that no longer holds the memory it held. It must not
     * allocate, free, log or call a transport: any of those may unmap memory
     * and wait for this very thread.
     * Timing: for UNMAP and MOVE the kernel reports after the pages are gone
     * (the unmapping thread then waits until the event is read), for DISCARD
     * before they go. So the lock orders a lookup after the invalidation of
     * anything unmapped before the lookup began, but cannot stop an
     * unmapping that races an access already under way in another thread. */
    void (*invalidate)(struct mem_monitor_client *client, mem_monitor_event_t event,
                       uintptr_t start, uintptr_t end);
    util_list_item_t link;
} mem_monitor_client_t;

/* Starts the monitor (the first client starts the thread) and adds client.
 * FERRY_ERR_NOT_SUPPORTED when userfaultfd cannot be used here, with the
 * reason in why. */
int mem_monitor_attach(mem_monitor_client_t *client, char *why, size_t why_len);

/* Removes client; the last one stops the thread. */
void mem_monitor_detach(mem_monitor_client_t *client);

/* A watched range, for mem_monitor_unwatch. */
typedef struct mem_monitor_watch mem_monitor_watch_t;

/* Watches the pages holding [start, end) for unmapping; *watch_out is set
 * on success. FERRY_OK, FERRY_ERR_NO_MEMORY, or FERRY_ERR_NOT_SUPPORTED
 * when the range cannot be watched (see above). Only while attached. */
int mem_monitor_watch(uintptr_t start, uintptr_t end, mem_monitor_watch_t **watch_out);

/* Ends a watch. Its pages stay watched while the monitor keeps them: the
 * `keep` most recently let-go ranges (mem_monitor_keep) stay registered
 * with the kernel, so that watching the same buffer again (a rendezvous
 * sending from it once more) costs no system call; a watch whose pages
 * some intact watch, live or kept, already holds is made without one.
 * Beyond `keep`, and for a range that was unmapped or moved since it was
 * watched, the pages stop being watched unless another watch covers them
 * (so that watching does not keep splitting the process's mappings for
 * ranges nobody registers any more). A kept range that is unmapped costs
 * the unmapping thread the monitor's wake-up, as a watched one does.
 * Frees watch; safe on NULL and after the monitor stopped. Never with the
 * monitor lock held. */
void mem_monitor_unwatch(mem_monitor_watch_t *watch);

/* How many let-go ranges stay watched (FERRY_MEM_WATCH_KEEP; 0: none,
 * every unwatch unregisters). Process-wide like the monitor: the last call
 * sets it; extra kept ranges are released at once. */
#define MEM_MONITOR_KEEP_DEFAULT 64
void mem_monitor_keep(size_t n);

/* Counts since the process started (tests, ferry_info). */
typedef struct mem_monitor_watch_stats {
    uint64_t registered; /* watches that registered pages with the kernel */
    uint64_t reused;     /* watches whose pages an intact watch held already */
    size_t kept;         /* ranges kept now */
} mem_monitor_watch_stats_t;
void mem_monitor_get_watch_stats(mem_monitor_watch_stats_t *out);

/* The lock the monitor holds while reading and handling events; caches hold
 * it while they look up, insert or drop registrations. Never allocate, free
 * or call out while holding it. */
void mem_monitor_lock(void);
void mem_monitor_unlock(void);

/* Whether the monitor thread is between reads of events: no unmapping it
 * has released (whose munmap may have returned) is still being handled.
 * Then a client's mark of such a range, read with acquire after this, is
 * already set, and a reader that needs only that ordering can do without
 * the lock; when false, take the lock. An unmapping reported after this
 * call is one that races the caller, as under the lock. */
extern _Atomic unsigned mem_monitor_draining;
static inline bool mem_monitor_settled(void)
{
    return atomic_load_explicit(&mem_monitor_draining, memory_order_acquire) == 0;
}

/* Events handled since the process started (tests). */
uint64_t mem_monitor_events(void);

#endif /* MEM_MONITOR_H */
