/*
 * What the two-rank sm tests start with: ferry_init, two ranks, and sm's
 * module when it is the path to the other rank. Otherwise rank 0 says why
 * (SKIPPED), the context ends and the process exits 77, which the tests
 * declare their skip.
 */
#ifndef SM_TESTS_SM_PAIR_H
#define SM_TESTS_SM_PAIR_H

#include <stdio.h>
#include <stdlib.h>

#include <ferry/ferry.h>

#include "btl/ctx.h"
#include "unit/check.h"

static inline ferry_btl_module_t *sm_pair_init(ferry_ctx_t **ctx_out)
{
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    int me = ferry_rank(ctx);
    CHECK(ferry_size(ctx) == 2);
    ferry_btl_module_t *btl = btl_ctx_find_module(ctx, "sm");
    if (btl == NULL || ctx->peers[1 - me].module_idx < 0 ||
        ctx->modules[ctx->peers[1 - me].module_idx] != btl) {
        if (me == 0)
            printf("SKIPPED: the ranks are not joined by sm\n");
        ferry_finalize(&ctx);
        exit(77);
    }
    *ctx_out = ctx;
    return btl;
}

#endif /* SM_TESTS_SM_PAIR_H */
