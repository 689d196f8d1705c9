/*
 * The registration cache over a fake transport whose registration records
 * the bytes it saw (as a pinning transport would keep the pages it pinned):
 * - hits, misses, access upgrades, sharing, leave-pinned off;
 * - LRU eviction under the size limit, in least-recently-used order;
 * - running out of registrations: evict and retry once, then a clear error;
 * - invalidation through the userfaultfd monitor: munmap, madvise
 *   DONTNEED, mremap, brk shrinking and free of a large block, each followed
 *   by new memory at the same address; the registration used afterwards
 *   must see the new bytes, never the old;
 * - with the monitor off, the same sequence does find the stale
 *   registration: the check above can fail.
 * Skipped (77) when userfaultfd is unavailable here, after the parts that
 * do not need it.
 */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "../unit/check.h"
#include "mem/rcache.h"

#define SNAP 16

typedef struct fake_reg {
    void *base;
    size_t len;
    uint32_t access;
    unsigned char snap[SNAP]; /* the bytes as they were when registered */
} fake_reg_t;

typedef struct fake {
    size_t live;     /* registrations held */
    size_t max_live; /* more is FERRY_ERR_NO_RESOURCE (0: no limit) */
    size_t regs, deregs;
    void *last_dereg;
} fake_t;

static int fake_register(void *arg, void *base, size_t len, uint32_t access, void **handle_out)
{
    fake_t *f = arg;
    if (f->max_live > 0 && f->live >= f->max_live)
        return FERRY_ERR_NO_RESOURCE;
    fake_reg_t *r = malloc(sizeof(*r));
    CHECK(r != NULL);
    r->base = base;
    r->len = len;
    r->access = access;
    memcpy(r->snap, base, len < SNAP ? len : SNAP);
    f->live++;
    f->regs++;
    *handle_out = r;
    return FERRY_OK;
}

static int fake_deregister(void *arg, void *handle)
{
    fake_t *f = arg;
    fake_reg_t *r = handle;
    f->live--;
    f->deregs++;
    f->last_dereg = r->base;
    free(r);
    return FERRY_OK;
}

static long page;

static mem_rcache_t *cache_new(fake_t *f, size_t limit, int leave_pinned, bool monitor)
{
    mem_rcache_params_t p = {
        .name = "fake",
        .limit_hint = "FERRY_FAKE_SLOTS",
        /* The monitor keeps let-go ranges watched, as by default: every
         * invalidation below follows a registration released before it. */
        .mem = {.size_limit = limit,
                .leave_pinned = leave_pinned,
                .monitor = monitor,
                .watch_keep = MEM_MONITOR_KEEP_DEFAULT},
        .reg = fake_register,
        .dereg = fake_deregister,
        .arg = f,
    };
    mem_rcache_t *c;
    CHECK(mem_rcache_create(&p, &c) == FERRY_OK);
    return c;
}

static mem_rcache_stats_t stats(mem_rcache_t *c)
{
    mem_rcache_stats_t s;
    mem_rcache_get_stats(c, &s);
    return s;
}

static unsigned char *map_pages(size_t n, int fill)
{
    unsigned char *p = mmap(NULL, n * (size_t)page, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    memset(p, fill, n * (size_t)page);
    return p;
}

/* New memory at exactly addr (after the old was unmapped), or NULL when
 * something else took the address meanwhile. */
static unsigned char *map_at(void *addr, size_t n, int fill)
{
    unsigned char *p = mmap(addr, n * (size_t)page, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (p != addr) { /* an old kernel that takes the flag as a hint */
        munmap(p, n * (size_t)page);
        return NULL;
    }
    memset(p, fill, n * (size_t)page);
    return p;
}

static void test_hits(void)
{
    fake_t f = {0};
    mem_rcache_t *c = cache_new(&f, 0, 1, false);
    unsigned char *buf = map_pages(4, 'a');
    mem_reg_t *r1, *r2, *r3, *r4;

    CHECK(mem_rcache_get(c, buf, 0, FERRY_ACCESS_LOCAL, &r1) == FERRY_ERR_INVALID);
    CHECK(mem_rcache_get(c, NULL, 8, FERRY_ACCESS_LOCAL, &r1) == FERRY_ERR_INVALID);
    CHECK(mem_rcache_get(c, (void *)(UINTPTR_MAX - 4), 8, FERRY_ACCESS_LOCAL, &r1) ==
          FERRY_ERR_INVALID);

    CHECK(mem_rcache_get(c, buf, 2 * (size_t)page, FERRY_ACCESS_REMOTE_READ, &r1) == FERRY_OK);
    CHECK(stats(c).misses == 1 && f.regs == 1);
    /* A sub-range with the same or fewer rights is a hit, shared. */
    CHECK(mem_rcache_get(c, buf + 100, 500, FERRY_ACCESS_REMOTE_READ, &r2) == FERRY_OK);
    CHECK(r2 == r1 && r1->refs == 2 && stats(c).hits == 1 && f.regs == 1);
    /* More rights, or a range not covered, is a miss. */
    CHECK(mem_rcache_get(c, buf, 100, FERRY_ACCESS_REMOTE_WRITE, &r3) == FERRY_OK);
    CHECK(r3 != r1 && f.regs == 2);
    CHECK(mem_rcache_get(c, buf + page, 2 * (size_t)page, FERRY_ACCESS_REMOTE_READ, &r4) ==
          FERRY_OK);
    CHECK(r4 != r1 && f.regs == 3 && stats(c).misses == 3);
    mem_rcache_put(c, r1);
    mem_rcache_put(c, r2);
    mem_rcache_put(c, r3);
    mem_rcache_put(c, r4);
    /* Leave-pinned: all kept, nothing deregistered, and found again. */
    CHECK(f.deregs == 0 && stats(c).entries == 3 && stats(c).idle_bytes == stats(c).bytes);
    CHECK(mem_rcache_get(c, buf, 10, FERRY_ACCESS_REMOTE_READ, &r1) == FERRY_OK);
    CHECK(stats(c).hits == 2 && f.regs == 3);
    mem_rcache_put(c, r1);
    CHECK(mem_rcache_destroy(c) == FERRY_OK);
    CHECK(f.live == 0 && f.deregs == 3);

    /* Leave-pinned off: released as the last user goes, shared meanwhile. */
    memset(&f, 0, sizeof(f));
    c = cache_new(&f, 0, 0, false);
    CHECK(mem_rcache_get(c, buf, 64, FERRY_ACCESS_LOCAL, &r1) == FERRY_OK);
    CHECK(mem_rcache_get(c, buf, 64, FERRY_ACCESS_LOCAL, &r2) == FERRY_OK && r2 == r1);
    mem_rcache_put(c, r1);
    CHECK(f.deregs == 0);
    mem_rcache_put(c, r2);
    CHECK(f.deregs == 1 && f.live == 0 && stats(c).entries == 0);
    /* Destroy with a registration still in use: reported, released anyway. */
    CHECK(mem_rcache_get(c, buf, 64, FERRY_ACCESS_LOCAL, &r1) == FERRY_OK);
    CHECK(mem_rcache_destroy(c) == FERRY_ERR_BUSY);
    CHECK(f.live == 0);
    munmap(buf, 4 * (size_t)page);
    printf("hits: hit, miss, rights, sharing and leave-pinned accounting right\n");
}

static void test_lru(void)
{
    fake_t f = {0};
    /* Room for three one-page registrations. */
    mem_rcache_t *c = cache_new(&f, 3 * (size_t)page, 1, false);
    unsigned char *buf = map_pages(8, 'b');
    mem_reg_t *r;
    for (int i = 0; i < 3; i++) {
        CHECK(mem_rcache_get(c, buf + i * page, (size_t)page, FERRY_ACCESS_LOCAL, &r) == FERRY_OK);
        mem_rcache_put(c, r);
    }
    CHECK(stats(c).evictions == 0 && f.live == 3);
    /* Page 0 used again: page 1 is now the least recent. */
    CHECK(mem_rcache_get(c, buf, (size_t)page, FERRY_ACCESS_LOCAL, &r) == FERRY_OK);
    mem_rcache_put(c, r);
    CHECK(mem_rcache_get(c, buf + 3 * page, (size_t)page, FERRY_ACCESS_LOCAL, &r) == FERRY_OK);
    CHECK(stats(c).evictions == 1 && f.last_dereg == buf + page && f.live == 3);
    /* In use, over the limit: nothing in use is evicted; unused ones go. */
    mem_reg_t *big;
    CHECK(mem_rcache_get(c, buf + 4 * page, 4 * (size_t)page, FERRY_ACCESS_LOCAL, &big) ==
          FERRY_OK);
    CHECK(f.live == 2 && stats(c).bytes == 5 * (size_t)page);
    mem_rcache_put(c, r);
    mem_rcache_put(c, big);
    CHECK(stats(c).bytes <= 3 * (size_t)page);
    CHECK(mem_rcache_destroy(c) == FERRY_OK && f.live == 0);
    munmap(buf, 8 * (size_t)page);
    printf("lru: evictions in least-recently-used order under the size limit\n");
}

/* idle_max bounds the unused registrations kept, whatever their bytes; the
 * ones in use never count against it and are never released for it. */
static void test_idle_max(void)
{
    fake_t f = {0};
    mem_rcache_params_t p = {
        .name = "fake",
        .mem = {.leave_pinned = 1, .watch_keep = MEM_MONITOR_KEEP_DEFAULT},
        .reg = fake_register,
        .dereg = fake_deregister,
        .arg = &f,
        .idle_max = 2,
    };
    mem_rcache_t *c;
    CHECK(mem_rcache_create(&p, &c) == FERRY_OK);
    unsigned char *buf = map_pages(8, 'i');
    mem_reg_t *r[5];
    for (int i = 0; i < 5; i++)
        CHECK(mem_rcache_get(c, buf + i * page, 16, FERRY_ACCESS_REMOTE_READ, &r[i]) == FERRY_OK);
    CHECK(f.live == 5 && stats(c).evictions == 0);
    for (int i = 0; i < 5; i++)
        mem_rcache_put(c, r[i]);
    /* The two used last stay; the three before them went, oldest first. */
    CHECK(f.live == 2 && stats(c).entries == 2 && stats(c).evictions == 3);
    CHECK(f.last_dereg == buf + 2 * page);
    CHECK(mem_rcache_get(c, buf + 4 * page, 16, FERRY_ACCESS_REMOTE_READ, &r[0]) == FERRY_OK);
    CHECK(mem_rcache_get(c, buf + 3 * page, 16, FERRY_ACCESS_REMOTE_READ, &r[1]) == FERRY_OK);
    CHECK(stats(c).hits == 2 && f.regs == 5);
    mem_rcache_put(c, r[0]);
    mem_rcache_put(c, r[1]);
    CHECK(mem_rcache_destroy(c) == FERRY_OK && f.live == 0);
    munmap(buf, 8 * (size_t)page);
    printf("idle_max: at most 2 unused registrations kept, least recent released first\n");
}

static void test_no_resource(void)
{
    fake_t f = {.max_live = 2};
    mem_rcache_t *c = cache_new(&f, 0, 1, false);
    unsigned char *buf = map_pages(4, 'c');
    mem_reg_t *r[3];
    for (int i = 0; i < 2; i++) {
        CHECK(mem_rcache_get(c, buf + i * page, 64, FERRY_ACCESS_LOCAL, &r[i]) == FERRY_OK);
        mem_rcache_put(c, r[i]);
    }
    /* Full of unused registrations: evicted, then the retry succeeds. */
    CHECK(mem_rcache_get(c, buf + 2 * page, 64, FERRY_ACCESS_LOCAL, &r[2]) == FERRY_OK);
    CHECK(stats(c).retries == 1 && stats(c).evictions == 2 && f.live == 1);
    CHECK(mem_rcache_get(c, buf, 64, FERRY_ACCESS_LOCAL, &r[0]) == FERRY_OK);
    /* Full of registrations in use: the retry fails too. */
    CHECK(mem_rcache_get(c, buf + page, 64, FERRY_ACCESS_LOCAL, &r[1]) == FERRY_ERR_NO_RESOURCE);
    CHECK(stats(c).retries == 2);
    mem_rcache_put(c, r[0]);
    mem_rcache_put(c, r[2]);
    CHECK(mem_rcache_destroy(c) == FERRY_OK && f.live == 0);
    munmap(buf, 4 * (size_t)page);
    printf("no_resource: evict-and-retry once, then FERRY_ERR_NO_RESOURCE\n");
}

/* Registers [p, p + len) and releases it (leave-pinned keeps it); returns
 * the first byte the registration saw. */
static unsigned char use(mem_rcache_t *c, void *p, size_t len)
{
    mem_reg_t *r;
    CHECK(mem_rcache_get(c, p, len, FERRY_ACCESS_LOCAL | FERRY_ACCESS_REMOTE_READ, &r) ==
          FERRY_OK);
    unsigned char b = ((fake_reg_t *)r->handle)->snap[0];
    mem_rcache_put(c, r);
    return b;
}

/* munmap, then new memory at the same address. Returns what the
 * registration found afterwards saw, or 0 if the address was taken. */
static unsigned char unmap_and_reuse(mem_rcache_t *c)
{
    unsigned char *p = map_pages(4, 'A');
    CHECK(use(c, p, 3 * (size_t)page) == 'A');
    CHECK(munmap(p, 4 * (size_t)page) == 0);
    unsigned char *q = map_at(p, 4, 'B');
    if (q == NULL)
        return 0;
    unsigned char seen = use(c, q, 3 * (size_t)page);
    munmap(q, 4 * (size_t)page);
    return seen;
}

static void test_stale_without_monitor(void)
{
    fake_t f = {0};
    mem_rcache_t *c = cache_new(&f, 0, 1, false);
    unsigned char seen = unmap_and_reuse(c);
    /* Without invalidation the old registration is found: the bug class
     * the monitor exists for. */
    CHECK(seen == 0 || seen == 'A');
    mem_rcache_destroy(c);
    printf("stale: without the monitor the old registration is found (%s)\n",
           seen == 'A' ? "old bytes seen, as expected" : "address was taken; not checked");
}

static void test_invalidation(mem_rcache_t *c, fake_t *f)
{
    uint64_t inval = stats(c).invalidations;
    unsigned char seen;

    /* munmap */
    seen = unmap_and_reuse(c);
    CHECK(seen == 0 || seen == 'B');
    CHECK(stats(c).invalidations > inval);
    printf("invalidate: munmap then a new mapping at the same address: %s\n",
           seen == 'B' ? "new bytes seen" : "address was taken; invalidation counted");

    /* madvise(MADV_DONTNEED): the pages read back as zeros. */
    unsigned char *p = map_pages(2, 'C');
    CHECK(use(c, p, (size_t)page) == 'C');
    inval = stats(c).invalidations;
    CHECK(madvise(p, 2 * (size_t)page, MADV_DONTNEED) == 0);
    CHECK(stats(c).invalidations == inval + 1);
    CHECK(use(c, p, (size_t)page) == 0);
    munmap(p, 2 * (size_t)page);

    /* mremap: moved away; the old address now holds other memory. */
    /* (The whole mapping is registered: mremap refuses a range spanning a
     * watched and an unwatched part; see mem/monitor.h.) */
    p = map_pages(2, 'D');
    CHECK(use(c, p, 2 * (size_t)page) == 'D');
    inval = stats(c).invalidations;
    unsigned char *dest = map_pages(2, 0);
    unsigned char *moved =
        mremap(p, 2 * (size_t)page, 2 * (size_t)page, MREMAP_MAYMOVE | MREMAP_FIXED, dest);
    if (moved == MAP_FAILED)
        fprintf(stderr, "mremap: %s\n", strerror(errno));
    CHECK(moved != MAP_FAILED);
    CHECK(stats(c).invalidations == inval + 1);
    unsigned char *again = map_at(p, 2, 'E');
    if (again != NULL) {
        CHECK(use(c, again, (size_t)page) == 'E');
        munmap(again, 2 * (size_t)page);
    }
    munmap(moved, 2 * (size_t)page);
    printf("invalidate: madvise(DONTNEED) and mremap drop registrations\n");

    /* free of a large block (glibc unmaps it from inside free, through an
     * internal alias no symbol interposition sees). */
    size_t big = 4u << 20;
    unsigned char *m = malloc(big);
    CHECK(m != NULL);
    memset(m, 'F', big);
    CHECK(use(c, m + 4096, 8192) == 'F');
    inval = stats(c).invalidations;
    free(m);
    unsigned char *m2 = malloc(big);
    CHECK(m2 != NULL);
    memset(m2, 'G', big);
    if (m2 == m) {
        CHECK(use(c, m2 + 4096, 8192) == 'G');
        CHECK(stats(c).invalidations > inval);
    }
    printf("invalidate: free of a large block %s\n",
           m2 == m ? "dropped it; the new block's bytes seen"
                   : "(the allocator kept it or gave another address; not checked)");
    free(m2);

    /* brk shrinking: the heap's top given back, then grown again. */
    void *top = sbrk(0);
    if (top != (void *)-1 && sbrk(4 * page) == top) {
        unsigned char *h = top;
        memset(h, 'H', 4 * (size_t)page);
        CHECK(use(c, h, 2 * (size_t)page) == 'H');
        inval = stats(c).invalidations;
        CHECK(sbrk(-4 * page) != (void *)-1);
        CHECK(stats(c).invalidations > inval);
        if (sbrk(4 * page) == top) {
            CHECK(use(c, h, 2 * (size_t)page) == 0); /* fresh pages */
            sbrk(-4 * page);
        }
        printf("invalidate: brk shrinking drops registrations\n");
    } else {
        printf("invalidate: brk not movable here; not checked\n");
    }

    /* In use while unmapped: dropped from lookup at once, released by the
     * last put. */
    p = map_pages(1, 'I');
    mem_reg_t *r;
    CHECK(mem_rcache_get(c, p, 64, FERRY_ACCESS_LOCAL, &r) == FERRY_OK);
    size_t live = f->live;
    munmap(p, (size_t)page);
    unsigned char *q = map_at(p, 1, 'J');
    if (q != NULL) {
        mem_reg_t *r2;
        CHECK(mem_rcache_get(c, q, 64, FERRY_ACCESS_LOCAL, &r2) == FERRY_OK);
        CHECK(r2 != r && ((fake_reg_t *)r2->handle)->snap[0] == 'J');
        mem_rcache_put(c, r2);
        munmap(q, (size_t)page);
    }
    mem_rcache_put(c, r);
    CHECK(f->live < live + 1);
    printf("invalidate: a registration in use is never found again after unmapping\n");
}

int main(void)
{
    page = sysconf(_SC_PAGESIZE);
    /* A fixed threshold: large blocks are always mapped and unmapped, so a
     * freed one's address comes back for the next. */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    test_hits();
    test_lru();
    test_idle_max();
    test_no_resource();
    test_stale_without_monitor();

    fake_t f = {0};
    mem_rcache_t *c = cache_new(&f, 0, -1, true);
    if (!c->monitored) {
        mem_rcache_destroy(c);
        printf("SKIP: userfaultfd is not available here (needs root, CAP_SYS_PTRACE or "
               "vm.unprivileged_userfaultfd=1); invalidation not tested\n");
        return 77;
    }
    CHECK(c->leave_pinned); /* auto: on when memory is monitored */
    test_invalidation(c, &f);
    mem_rcache_flush(c);
    CHECK(mem_rcache_destroy(c) == FERRY_OK);
    CHECK(f.live == 0);
    return 0;
}
