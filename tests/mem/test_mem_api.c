/*
 * Invalidation at the API: rank 0 puts from (and gets into) a buffer that
 * ferry registered through its cache, unmaps it, maps new memory at the
 * same address, and moves data again: the target must receive the new
 * bytes, never the old ones. Over sm between two ranks (with and without
 * cross-memory attach), and over self in a singleton. Where the transport
 * is sm and memory can be watched, the cache must also have counted the
 * invalidation.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "../unit/check.h"
#include "btl/ctx.h"
#include "btl/frag.h"
#include "mem/rcache.h"

#define LEN (64 * 1024)

struct key_msg {
    uint64_t addr;
    ferry_rkey_t rkey;
};

static struct key_msg peer_key;
static int have_key;

static void on_key(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                   void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    CHECK(len == sizeof(peer_key));
    memcpy(&peer_key, data, len);
    have_key = 1;
}

static unsigned char *map_fill(void *at, int fill)
{
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | (at != NULL ? MAP_FIXED_NOREPLACE : 0);
    unsigned char *p = mmap(at, LEN, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED || (at != NULL && p != at)) {
        if (p != MAP_FAILED)
            munmap(p, LEN);
        return NULL;
    }
    memset(p, fill, LEN);
    return p;
}

static bool all(const unsigned char *p, size_t n, int v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return false;
    return true;
}

/* The invalidations counted by the cache of the transport reaching target,
 * when that is sm (self's module is private to its file). */
/* Invalidations in the registration cache of the transport that reaches
 * target, where that transport registers the local side of puts and gets
 * through it (ofi; sm moves them by address and registers nothing). */
static uint64_t cache_invalidations(ferry_ctx_t *ctx, int target, bool *monitored)
{
    *monitored = false;
    int m = ctx->peers[target].module_idx;
    ferry_btl_module_t *btl = m >= 0 ? ctx->modules[m] : NULL;
    if (btl == NULL || btl->frags == NULL || btl->frags->no_local_reg)
        return 0;
    mem_rcache_t *c = btl_frags_rcache(btl->frags);
    if (c == NULL)
        return 0;
    *monitored = c->monitored;
    mem_rcache_stats_t s;
    mem_rcache_get_stats(c, &s);
    return s.invalidations;
}

int main(void)
{
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    int rank = ferry_rank(ctx), size = ferry_size(ctx);
    int target = size > 1 ? 1 : 0;
    int origin = 0;
    /* Ranks 0 and 1 talk to each other (a singleton to itself). */
    int peer = size > 1 && rank <= 1 ? 1 - rank : rank;
    if (ferry_am_max_size(ctx, peer) < 0) {
        printf("SKIPPED: rank %d cannot reach its peer (FERRY_BTL='%s'): a transport did "
               "not open here; FERRY_LOG_LEVEL=info says why\n",
               rank, getenv("FERRY_BTL") != NULL ? getenv("FERRY_BTL") : "");
        CHECK(ferry_finalize(&ctx) == FERRY_OK);
        return 77;
    }
    CHECK(ferry_am_register(ctx, 1, on_key, NULL) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    unsigned char *inbox = NULL;
    ferry_mem_t *mem = NULL;
    if (rank == target) {
        inbox = map_fill(NULL, 0);
        CHECK(inbox != NULL);
        CHECK(ferry_mem_register(ctx, inbox, LEN,
                                 FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ,
                                 &mem) == FERRY_OK);
        struct key_msg k = {.addr = (uint64_t)(uintptr_t)inbox};
        CHECK(ferry_mem_rkey(mem, &k.rkey) == FERRY_OK);
        int rc;
        while ((rc = ferry_am_send(ctx, origin, 1, &k, sizeof(k))) == FERRY_ERR_NO_RESOURCE)
            ferry_progress(ctx);
        CHECK(rc == FERRY_OK);
    }
    if (rank == origin)
        while (!have_key)
            CHECK(ferry_progress(ctx) >= 0);
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    int reused = 1;
    if (rank == origin) {
        bool monitored;
        uint64_t inval0 = cache_invalidations(ctx, target, &monitored);
        unsigned char *p = map_fill(NULL, 'A');
        CHECK(p != NULL);
        CHECK(ferry_put(ctx, target, p, LEN, NULL, peer_key.addr, &peer_key.rkey, NULL, NULL) ==
              FERRY_OK);
        CHECK(ferry_flush(ctx, target) == FERRY_OK);
        CHECK(munmap(p, LEN) == 0);
        unsigned char *q = map_fill(p, 'B');
        if (q == NULL) {
            reused = 0;
            q = map_fill(NULL, 'B');
            CHECK(q != NULL);
        }
        CHECK(ferry_put(ctx, target, q, LEN, NULL, peer_key.addr, &peer_key.rkey, NULL, NULL) ==
              FERRY_OK);
        CHECK(ferry_flush(ctx, target) == FERRY_OK);
        if (monitored && reused) {
            uint64_t inval = cache_invalidations(ctx, target, &monitored);
            CHECK(inval > inval0);
            printf("test_mem_api: the unmapped buffer's registration was invalidated (%llu)\n",
                   (unsigned long long)(inval - inval0));
        }
        /* Gets into a cached registration, then into new memory there. */
        CHECK(ferry_get(ctx, target, q, LEN, NULL, peer_key.addr, &peer_key.rkey, NULL, NULL) ==
              FERRY_OK);
        CHECK(ferry_flush(ctx, target) == FERRY_OK);
        CHECK(all(q, LEN, 'B'));
        CHECK(munmap(q, LEN) == 0);
        unsigned char *g = map_fill(q, 'x');
        if (g == NULL)
            g = map_fill(NULL, 'x');
        CHECK(g != NULL);
        CHECK(ferry_get(ctx, target, g, LEN, NULL, peer_key.addr, &peer_key.rkey, NULL, NULL) ==
              FERRY_OK);
        CHECK(ferry_flush(ctx, target) == FERRY_OK);
        CHECK(all(g, LEN, 'B'));
        munmap(g, LEN);
        printf("rank %d: put/get after unmapping and mapping again at %s: new bytes moved%s\n",
               rank, reused ? "the same address" : "another address (taken)",
               monitored ? ", invalidation counted" : "");
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (rank == target) {
        CHECK(all(inbox, LEN, 'B'));
        CHECK(ferry_mem_deregister(ctx, mem) == FERRY_OK);
        munmap(inbox, LEN);
    }
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    return 0;
}
