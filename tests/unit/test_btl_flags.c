/*
 * Capability flags (FERRY_BTL_FLAG_MAP in btl.h): every bit the table defines
 * has a distinct name and a line of help, no other bit has one, and every
 * module of every transport this build opens here reports only flags of the
 * table, so ferry_info names all of them (check_flag_defs.cmake checks that
 * no flag is defined outside the table).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/btl.h>
#include <ferry/ferry.h>

#include "api/api.h"
#include "btl/ctx.h"
#include "check.h"

static void test_table(void)
{
    const char *names[32] = {NULL};
    int n = 0;

#define COUNT(name, bit, text, help) n++;
    FERRY_BTL_FLAG_MAP(COUNT)
#undef COUNT
    CHECK(n > 0);
    for (unsigned bit = 0; bit < 32; bit++) {
        uint32_t flag = 1u << bit;
        const char *name = ferry_btl_flag_name(flag);
        const char *help = ferry_btl_flag_help(flag);
        if ((FERRY_BTL_FLAGS_KNOWN & flag) == 0) {
            CHECK(name == NULL && help == NULL);
            continue;
        }
        CHECK(name != NULL && name[0] != '\0');
        CHECK(help != NULL && help[0] != '\0');
        for (unsigned prev = 0; prev < bit; prev++)
            CHECK(names[prev] == NULL || strcmp(names[prev], name) != 0);
        names[bit] = name;
        n--;
    }
    CHECK(n == 0); /* as many named bits as entries: no two share a bit */
    /* Not exactly one flag: no name. */
    CHECK(ferry_btl_flag_name(0) == NULL);
    CHECK(ferry_btl_flag_name(FERRY_BTL_FLAG_PUT | FERRY_BTL_FLAG_GET) == NULL);
    CHECK(strcmp(ferry_btl_flag_name(FERRY_BTL_FLAG_NO_KEY_REVOKE), "no_key_revoke") == 0);
    printf("ok  every flag of the table is named\n");
}

static void test_modules(void)
{
    ferry_ctx_t *ctx = NULL;

    CHECK(setenv("FERRY_MODEX", "singleton", 1) == 0);
    /* Every module that loads here, as ferry_info has them. */
    CHECK(api_ctx_create(NULL, API_CTX_OPEN | API_CTX_ALL_MODULES, &ctx) == FERRY_OK);
    CHECK(ctx->n_modules > 0);
    for (int m = 0; m < ctx->n_modules; m++) {
        const ferry_btl_attr_t *a = &ctx->modules[m]->attr;
        printf("    %s: flags 0x%x\n", a->name, (unsigned)a->flags);
        CHECK((a->flags & ~(uint32_t)FERRY_BTL_FLAGS_KNOWN) == 0);
    }
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    printf("ok  every module reports only named flags\n");
}

int main(void)
{
    test_table();
    test_modules();
    return 0;
}
