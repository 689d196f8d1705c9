/*
 * Helper of run_sweep.sh: a ferry process that crashes, lives, or only
 * starts (and so sweeps /dev/shm) and finalizes.
 *
 * usage: sm_sweep crash | live | start
 *   crash  prints its segment's and heap's names, then kills itself (SIGKILL)
 *   live   prints its segment's name, waits until its standard input ends,
 *          then finalizes
 *   start  initializes (sweeping the leftovers of dead processes) and
 *          finalizes
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "unit/check.h"
#include "btl/sm/sm.h"

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    ferry_btl_module_t *btl = btl_ctx_find_module(ctx, "sm");
    if (btl == NULL) {
        printf("SKIPPED: the sm transport is not available\n");
        ferry_finalize(&ctx);
        return 77;
    }
    const sm_module_t *mod = (const sm_module_t *)btl;
    if (strcmp(argv[1], "crash") == 0) {
        void *addr;
        ferry_mem_t *mem;
        CHECK(ferry_mem_alloc(ctx, 1 << 16, FERRY_ACCESS_REMOTE_WRITE, &addr, &mem) == FERRY_OK);
        CHECK(mod->nheaps == 1);
        printf("segment %s\nheap %s-h%u\n", mod->seg_name + 1, mod->seg_name + 1,
               mod->heaps[0].id);
        fflush(stdout);
        raise(SIGKILL);
    }
    if (strcmp(argv[1], "live") == 0) {
        printf("segment %s\n", mod->seg_name + 1);
        fflush(stdout);
        char c;
        while (read(0, &c, 1) > 0)
            ;
    } else {
        CHECK(strcmp(argv[1], "start") == 0);
    }
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    return 0;
}
