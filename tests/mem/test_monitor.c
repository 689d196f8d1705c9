/*
 * The unmap monitor's kept watches (mem/monitor.h): a range whose watch
 * ended stays registered with the kernel, so that watching it again costs
 * no system call, and never vouches for memory mapped there later.
 * - reuse: the same range watched again, and a part of a live watch, need
 *   no registration;
 * - the attack on it: a kept range unmapped, new memory mapped at the same
 *   address and watched; the new memory's unmapping must still be seen
 *   (a kept watch taken for it would leave it unwatched, silently);
 * - more ranges unmapped at once than the monitor notes one by one, the
 *   same way; a range unmapped in part; a range moved by mremap;
 * - a discarded range (madvise DONTNEED) stays registered and is reused;
 * - the bound: no more than `keep` ranges kept, the oldest released first
 *   and no longer watched (its unmapping reports nothing), keep 0 none.
 * Skipped (77) when userfaultfd is unavailable here.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "../unit/check.h"
#include "mem/monitor.h"

static long page;

/* What the monitor thread reported, for the ranges the test asks about. */
static struct {
    _Atomic unsigned unmaps, discards, moves;
    uintptr_t lo, hi; /* the range counted; set with the monitor lock held */
} seen;

static void on_event(mem_monitor_client_t *client, mem_monitor_event_t event, uintptr_t start,
                     uintptr_t end)
{
    (void)client;
    if (start >= seen.hi || end <= seen.lo)
        return;
    if (event == MEM_MONITOR_UNMAP)
        atomic_fetch_add(&seen.unmaps, 1);
    else if (event == MEM_MONITOR_DISCARD)
        atomic_fetch_add(&seen.discards, 1);
    else
        atomic_fetch_add(&seen.moves, 1);
}

static void count_events_in(const void *lo, size_t len)
{
    mem_monitor_lock();
    seen.lo = (uintptr_t)lo;
    seen.hi = (uintptr_t)lo + len;
    atomic_store(&seen.unmaps, 0);
    atomic_store(&seen.discards, 0);
    atomic_store(&seen.moves, 0);
    mem_monitor_unlock();
}

/* The count of one kind, read under the monitor lock: the kernel lets the
 * unmapping thread go once the event is read, and the monitor thread
 * reports it before it lets go of the lock (as caches rely on). */
static unsigned events(_Atomic unsigned *counter)
{
    mem_monitor_lock();
    unsigned n = atomic_load(counter);
    mem_monitor_unlock();
    return n;
}

static mem_monitor_watch_stats_t stats(void)
{
    mem_monitor_watch_stats_t s;
    mem_monitor_get_watch_stats(&s);
    return s;
}

static void *map_pages(void *at, size_t n)
{
    void *p = mmap(at, (size_t)page * n, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (at != NULL ? MAP_FIXED_NOREPLACE : 0), -1, 0);
    CHECK(p != MAP_FAILED);
    CHECK(at == NULL || p == at);
    memset(p, 1, (size_t)page * n);
    return p;
}

static mem_monitor_watch_t *watch(void *p, size_t len)
{
    mem_monitor_watch_t *w = NULL;
    CHECK(mem_monitor_watch((uintptr_t)p, (uintptr_t)p + len, &w) == FERRY_OK);
    CHECK(w != NULL);
    return w;
}

static void test_reuse(void)
{
    mem_monitor_keep(4);
    size_t len = (size_t)page * 4;
    char *p = map_pages(NULL, 4);
    mem_monitor_watch_stats_t s0 = stats();
    mem_monitor_unwatch(watch(p, len));
    CHECK(stats().registered == s0.registered + 1);
    CHECK(stats().kept == s0.kept + 1);
    /* The same buffer again, and a part of it: nothing to register. */
    mem_monitor_watch_t *w = watch(p, len);
    mem_monitor_watch_t *part = watch(p + page, (size_t)page);
    CHECK(stats().registered == s0.registered + 1);
    CHECK(stats().reused == s0.reused + 2);
    /* A part let go while its whole is watched is not kept apart. */
    mem_monitor_unwatch(part);
    CHECK(stats().kept == s0.kept + 1);
    mem_monitor_unwatch(w);
    CHECK(stats().kept == s0.kept + 1);
    /* Still watched though no one holds it: its unmapping is reported. */
    count_events_in(p, len);
    CHECK(munmap(p, len) == 0);
    CHECK(events(&seen.unmaps) >= 1);
    printf("reuse: one registration for three watches of one range\n");
}

/* A kept range goes, new memory comes at its address: the new memory must
 * be registered again, or its own unmapping would go unseen. */
static void test_gone_then_new(void)
{
    mem_monitor_keep(4);
    size_t len = (size_t)page * 2;
    char *p = map_pages(NULL, 2);
    mem_monitor_unwatch(watch(p, len));
    CHECK(munmap(p, len) == 0);
    map_pages(p, 2);
    mem_monitor_watch_stats_t s0 = stats();
    mem_monitor_watch_t *w = watch(p, len);
    CHECK(stats().registered == s0.registered + 1);
    CHECK(stats().reused == s0.reused);
    count_events_in(p, len);
    CHECK(munmap(p, len) == 0);
    CHECK(events(&seen.unmaps) >= 1);
    mem_monitor_unwatch(w);
    printf("gone then new: the new memory at the old address is watched itself\n");
}

/* More unmappings between two watch calls than the monitor notes one by
 * one: every watch stops vouching. */
static void test_many_gone(void)
{
    enum { N = 40 };
    mem_monitor_keep(N);
    char *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = map_pages(NULL, 1);
        mem_monitor_unwatch(watch(p[i], (size_t)page));
    }
    CHECK(stats().kept >= N);
    for (int i = 0; i < N; i++)
        CHECK(munmap(p[i], (size_t)page) == 0);
    for (int i = 0; i < N; i++)
        map_pages(p[i], 1);
    mem_monitor_watch_stats_t s0 = stats();
    mem_monitor_watch_t *w[N];
    for (int i = 0; i < N; i++)
        w[i] = watch(p[i], (size_t)page);
    CHECK(stats().registered == s0.registered + N);
    CHECK(stats().reused == s0.reused);
    for (int i = 0; i < N; i++) {
        count_events_in(p[i], (size_t)page);
        CHECK(munmap(p[i], (size_t)page) == 0);
        CHECK(events(&seen.unmaps) >= 1);
        mem_monitor_unwatch(w[i]);
    }
    printf("many gone: %d ranges unmapped at once, each new one watched\n", N);
}

/* A kept range unmapped in part, or moved away: what remains is not taken
 * as registered, and memory mapped where it was is watched. */
static void test_part_and_move(void)
{
    mem_monitor_keep(4);
    char *p = map_pages(NULL, 3);
    mem_monitor_unwatch(watch(p, (size_t)page * 3));
    CHECK(munmap(p + page, (size_t)page) == 0);
    map_pages(p + page, 1);
    mem_monitor_watch_stats_t s0 = stats();
    mem_monitor_watch_t *w = watch(p, (size_t)page * 3);
    CHECK(stats().registered == s0.registered + 1);
    count_events_in(p + page, (size_t)page);
    CHECK(munmap(p + page, (size_t)page) == 0);
    CHECK(events(&seen.unmaps) >= 1);
    mem_monitor_unwatch(w);
    CHECK(munmap(p, (size_t)page) == 0);
    CHECK(munmap(p + 2 * page, (size_t)page) == 0);

    /* mremap moves the pages, and the kernel's registration with them. */
    char *q = map_pages(NULL, 2);
    mem_monitor_unwatch(watch(q, (size_t)page * 2));
    char *dst = map_pages(NULL, 2);
    count_events_in(q, (size_t)page * 2);
    void *moved = mremap(q, (size_t)page * 2, (size_t)page * 2, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
    CHECK(moved == dst);
    CHECK(events(&seen.moves) >= 1);
    map_pages(q, 2);
    s0 = stats();
    w = watch(q, (size_t)page * 2);
    CHECK(stats().registered == s0.registered + 1);
    count_events_in(q, (size_t)page * 2);
    CHECK(munmap(q, (size_t)page * 2) == 0);
    CHECK(events(&seen.unmaps) >= 1);
    mem_monitor_unwatch(w);
    CHECK(munmap(dst, (size_t)page * 2) == 0);
    printf("part and move: the rest of a range and a moved range are registered again\n");
}

/* Discarded pages stay mapped and registered: the kept range serves. */
static void test_discard(void)
{
    mem_monitor_keep(4);
    char *p = map_pages(NULL, 2);
    mem_monitor_unwatch(watch(p, (size_t)page * 2));
    count_events_in(p, (size_t)page * 2);
    CHECK(madvise(p, (size_t)page * 2, MADV_DONTNEED) == 0);
    CHECK(events(&seen.discards) >= 1);
    mem_monitor_watch_stats_t s0 = stats();
    mem_monitor_watch_t *w = watch(p, (size_t)page * 2);
    CHECK(stats().reused == s0.reused + 1);
    count_events_in(p, (size_t)page * 2);
    CHECK(munmap(p, (size_t)page * 2) == 0);
    CHECK(events(&seen.unmaps) >= 1);
    mem_monitor_unwatch(w);
    printf("discard: a discarded range stays registered\n");
}

/* The bound, and what a released range is: no longer watched. */
static void test_bound(void)
{
    mem_monitor_keep(0);
    CHECK(stats().kept == 0);
    mem_monitor_keep(3);
    char *p[5];
    for (int i = 0; i < 5; i++) {
        p[i] = map_pages(NULL, 1);
        mem_monitor_unwatch(watch(p[i], (size_t)page));
        CHECK(stats().kept == (size_t)(i < 3 ? i + 1 : 3));
    }
    /* The two oldest went: their unmapping is not reported, the others' is. */
    for (int i = 0; i < 5; i++) {
        count_events_in(p[i], (size_t)page);
        CHECK(munmap(p[i], (size_t)page) == 0);
        CHECK(events(&seen.unmaps) == (i < 2 ? 0u : 1u));
    }
    /* keep 0: a watch ends with its registration. */
    mem_monitor_keep(0);
    CHECK(stats().kept == 0);
    char *q = map_pages(NULL, 1);
    mem_monitor_unwatch(watch(q, (size_t)page));
    CHECK(stats().kept == 0);
    count_events_in(q, (size_t)page);
    CHECK(munmap(q, (size_t)page) == 0);
    CHECK(events(&seen.unmaps) == 0);
    printf("bound: at most keep ranges, the oldest released and unwatched\n");
}

int main(void)
{
    page = sysconf(_SC_PAGESIZE);
    mem_monitor_client_t client = {.invalidate = on_event};
    char why[160] = "";
    if (mem_monitor_attach(&client, why, sizeof(why)) != FERRY_OK) {
        printf("SKIP: the unmap monitor cannot start here: %s\n", why);
        return 77;
    }
    test_reuse();
    test_gone_then_new();
    test_many_gone();
    test_part_and_move();
    test_discard();
    test_bound();
    mem_monitor_detach(&client);
    /* Detached, the descriptor closed: nothing kept, nothing reused. */
    CHECK(stats().kept == 0);
    printf("PASS\n");
    return 0;
}
