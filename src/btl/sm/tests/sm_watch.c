/*
 * Registrations with remote rights are watched by the unmap monitor, which
 * splits the process's mappings at their pages. Their watches must end with
 * them: after thousands of registrations of distinct ranges come and go, the
 * process has about as many mappings as before, give or take the ranges the
 * monitor keeps watched for their next registration (FERRY_MEM_WATCH_KEEP,
 * two splits each at most). A watch that outlived its registration would
 * leave every split behind, up to the kernel's limit on mappings, after
 * which mmap fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "unit/check.h"
#include "btl/sm/sm.h"
#include "mem/monitor.h"

#define N 3000
#define STEP 8192

static int mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

int main(void)
{
    ferry_init_params_t params = {.thread_level = FERRY_THREAD_SINGLE, .transports = "sm"};
    ferry_ctx_t *ctx;
    CHECK(ferry_init(&params, &ctx) == FERRY_OK);
    ferry_btl_module_t *btl = btl_ctx_find_module(ctx, "sm");
    if (btl == NULL) {
        printf("SKIPPED: the sm transport is not available\n");
        ferry_finalize(&ctx);
        return 77;
    }
    /* One block, registered piece by piece: each piece its own pages, with
     * unregistered pages between them. */
    unsigned char *block = malloc((size_t)N * STEP);
    CHECK(block != NULL);
    memset(block, 1, (size_t)N * STEP);
    static ferry_btl_reg_t *regs[N];
    int before = mappings();
    for (int i = 0; i < N; i++)
        CHECK(btl->ops->register_mem(btl, NULL, block + (size_t)i * STEP, 100,
                                     FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE,
                                     &regs[i]) == FERRY_OK);
    int during = mappings();
    for (int i = 0; i < N; i++)
        CHECK(btl->ops->deregister_mem(btl, regs[i]) == FERRY_OK);
    int after = mappings();
    const sm_module_t *mod = (const sm_module_t *)btl;
    printf("mappings: %d before, %d with %d registrations (%s), %d after\n", before, during, N,
           mod->mon_state == 1 ? "watched" : "not watched: no unmap monitor here", after);
    mem_monitor_watch_stats_t ws;
    mem_monitor_get_watch_stats(&ws);
    printf("watches: %llu registered with the kernel, %zu kept\n",
           (unsigned long long)ws.registered, ws.kept);
    CHECK(ws.kept <= MEM_MONITOR_KEEP_DEFAULT);
    CHECK(after <= before + 16 + 2 * (int)ws.kept);
    free(block);
    ferry_finalize(&ctx);
    return 0;
}
