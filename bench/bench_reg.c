/*
 * ferry-bench reg: what the registration cache saves. For each size from
 * 4 KiB to 64 MiB (or -m MIN:MAX), in every open transport that registers
 * memory, the time of a transport register + deregister (what every
 * operation would pay without a cache) against a cache hit (lookup and
 * release of a registration the cache holds), in nanoseconds.
 *
 * Unlike the other modes this one measures an internal layer, so it uses
 * ferry's internal headers (src/). It runs in one process: ferry-bench reg,
 * or under ferryrun, where rank 0 measures and the others wait.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench.h"
#include "mem/rcache.h"
#include "btl/ctx.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int reg_cb(void *arg, void *base, size_t len, uint32_t access, void **handle_out)
{
    ferry_btl_module_t *btl = arg;
    return btl->ops->register_mem(btl, NULL, base, len, access, (ferry_btl_reg_t **)handle_out);
}

static int dereg_cb(void *arg, void *handle)
{
    ferry_btl_module_t *btl = arg;
    return btl->ops->deregister_mem(btl, handle);
}

static int measure(ferry_ctx_t *ctx, ferry_btl_module_t *btl, size_t min, size_t max, long iters)
{
    mem_params_t mp;
    int rc = mem_params_register(&ctx->params, &mp);
    if (rc != FERRY_OK)
        return rc;
    mp.leave_pinned = 1; /* hits are what is measured */
    mem_rcache_params_t p = {.name = btl->attr.name, .mem = mp, .reg = reg_cb,
                             .dereg = dereg_cb, .arg = btl, .log = &ctx->log};
    mem_rcache_t *cache;
    if ((rc = mem_rcache_create(&p, &cache)) != FERRY_OK)
        return rc;
    printf("\n# ferry-bench reg (transport %s, invalidation %s)\n", btl->attr.name,
           cache->monitored ? "userfaultfd" : "off");
    printf("%-12s %20s %16s %10s\n", "# Size", "register+dereg (ns)", "cache hit (ns)",
           "ratio");
    for (size_t size = min; size <= max && size > 0; size *= 2) {
        void *buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED) {
            rc = FERRY_ERR_NO_MEMORY;
            break;
        }
        memset(buf, 1, size);
        const uint32_t acc = FERRY_ACCESS_LOCAL | FERRY_ACCESS_REMOTE_READ;
        uint64_t t0 = now_ns();
        for (long i = 0; i < iters && rc == FERRY_OK; i++) {
            ferry_btl_reg_t *r;
            rc = btl->ops->register_mem(btl, NULL, buf, size, acc, &r);
            if (rc == FERRY_OK)
                rc = btl->ops->deregister_mem(btl, r);
        }
        uint64_t t1 = now_ns();
        mem_reg_t *r;
        if (rc == FERRY_OK && (rc = mem_rcache_get(cache, buf, size, acc, &r)) == FERRY_OK)
            mem_rcache_put(cache, r); /* the miss: now cached */
        uint64_t t2 = now_ns();
        for (long i = 0; i < iters && rc == FERRY_OK; i++) {
            rc = mem_rcache_get(cache, buf, size, acc, &r);
            if (rc == FERRY_OK)
                mem_rcache_put(cache, r);
        }
        uint64_t t3 = now_ns();
        mem_rcache_flush(cache);
        munmap(buf, size);
        if (rc != FERRY_OK)
            break;
        double raw = (double)(t1 - t0) / (double)iters, hit = (double)(t3 - t2) / (double)iters;
        printf("%-12zu %20.1f %16.1f %10.1f\n", size, raw, hit, hit > 0 ? raw / hit : 0.0);
    }
    mem_rcache_destroy(cache);
    return rc;
}

int bench_run_reg(int argc, char **argv)
{
    size_t min = 4096, max = (size_t)64 << 20;
    long iters = 10000;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "-m") == 0 && i + 1 < argc) {
            unsigned long long a, b;
            if (sscanf(argv[++i], "%llu:%llu", &a, &b) != 2 || a == 0 || a > b) {
                fprintf(stderr, "ferry-bench reg: -m '%s': expected MIN:MAX in bytes\n", argv[i]);
                return 2;
            }
            min = (size_t)a;
            max = (size_t)b;
        } else if (strcmp(argv[i], "-i") == 0 && i + 1 < argc) {
            iters = strtol(argv[++i], NULL, 10);
            if (iters <= 0) {
                fprintf(stderr, "ferry-bench reg: -i '%s': expected a positive count\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: ferry-bench reg [-m MIN:MAX] [-i ITERS]\n");
            return 2;
        }
    }
    ferry_ctx_t *ctx;
    int rc = ferry_init(NULL, &ctx);
    if (rc != FERRY_OK) {
        fprintf(stderr, "ferry-bench reg: ferry_init: %s\n", ferry_strerror(rc));
        return 1;
    }
    if (ferry_rank(ctx) == 0) {
        for (int m = 0; m < ctx->n_modules && rc == FERRY_OK; m++) {
            ferry_btl_module_t *btl = ctx->modules[m];
            if (btl->attr.flags & (FERRY_BTL_FLAG_PUT | FERRY_BTL_FLAG_GET))
                rc = measure(ctx, btl, min, max, iters);
        }
        if (rc != FERRY_OK)
            fprintf(stderr, "ferry-bench reg: %s\n", ferry_strerror(rc));
    }
    int frc = ferry_finalize(&ctx);
    return rc == FERRY_OK && frc == FERRY_OK ? 0 : 1;
}
