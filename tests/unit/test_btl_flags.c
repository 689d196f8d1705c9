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
#include "btl/base.h"
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

/* The atomic table: distinct names, and every value Open MPI 4.1's
 * opal/mca/btl/btl.h gives its counterpart, so an Open MPI component maps
 * them by a cast. */
static void test_atomic_table(void)
{
    int n = 0;
#define COUNT(name, value, text, op) n++;
    FERRY_BTL_ATOMIC_SUPPORTS_MAP(COUNT)
#undef COUNT
    for (unsigned bit = 0; bit < 32; bit++) {
        uint32_t b = 1u << bit;
        const char *name = ferry_btl_atomic_supports_name(b);
        CHECK((name != NULL) == ((FERRY_BTL_ATOMIC_SUPPORTS_KNOWN & b) != 0));
        if (name == NULL)
            continue;
        for (unsigned prev = 0; prev < bit; prev++) {
            const char *other = ferry_btl_atomic_supports_name(1u << prev);
            CHECK(other == NULL || strcmp(other, name) != 0);
        }
        n--;
    }
    CHECK(n == 0);
    CHECK(ferry_btl_atomic_supports_name(0) == NULL);
    /* MCA_BTL_ATOMIC_SUPPORTS_* */
    CHECK(FERRY_BTL_ATOMIC_SUPPORTS_ADD == 0x1 && FERRY_BTL_ATOMIC_SUPPORTS_AND == 0x200 &&
          FERRY_BTL_ATOMIC_SUPPORTS_OR == 0x400 && FERRY_BTL_ATOMIC_SUPPORTS_XOR == 0x800 &&
          FERRY_BTL_ATOMIC_SUPPORTS_LAND == 0x1000 && FERRY_BTL_ATOMIC_SUPPORTS_LOR == 0x2000 &&
          FERRY_BTL_ATOMIC_SUPPORTS_LXOR == 0x4000 && FERRY_BTL_ATOMIC_SUPPORTS_SWAP == 0x10000 &&
          FERRY_BTL_ATOMIC_SUPPORTS_MIN == 0x100000 && FERRY_BTL_ATOMIC_SUPPORTS_MAX == 0x200000 &&
          FERRY_BTL_ATOMIC_SUPPORTS_32BIT == 0x1000000 &&
          FERRY_BTL_ATOMIC_SUPPORTS_CSWAP == 0x10000000 &&
          FERRY_BTL_ATOMIC_SUPPORTS_GLOB == 0x20000000);
    /* mca_btl_base_atomic_op_t and MCA_BTL_ATOMIC_FLAG_32BIT */
    CHECK(FERRY_BTL_ATOMIC_ADD == 0x1 && FERRY_BTL_ATOMIC_AND == 0x11 &&
          FERRY_BTL_ATOMIC_OR == 0x12 && FERRY_BTL_ATOMIC_XOR == 0x14 &&
          FERRY_BTL_ATOMIC_LAND == 0x15 && FERRY_BTL_ATOMIC_LOR == 0x16 &&
          FERRY_BTL_ATOMIC_LXOR == 0x17 && FERRY_BTL_ATOMIC_SWAP == 0x1a &&
          FERRY_BTL_ATOMIC_MIN == 0x20 && FERRY_BTL_ATOMIC_MAX == 0x21);
    CHECK(FERRY_BTL_ATOMIC_FLAG_32BIT == 0x1);
    /* Each operation's bit, and none for what is no operation. */
    CHECK(ferry_btl_atomic_supports_bit(FERRY_BTL_ATOMIC_MAX) == FERRY_BTL_ATOMIC_SUPPORTS_MAX);
    CHECK(ferry_btl_atomic_supports_bit(FERRY_BTL_ATOMIC_ADD) == FERRY_BTL_ATOMIC_SUPPORTS_ADD);
    CHECK(ferry_btl_atomic_supports_bit(0) == 0 && ferry_btl_atomic_supports_bit(0x13) == 0 &&
          ferry_btl_atomic_supports_bit(0x22) == 0);
    printf("ok  atomic operations and flags have Open MPI's values and names\n");
}

/* btl_base_module_init refuses a module whose atomic flags and ops
 * disagree: each way of getting it wrong, made from a real module. */
static void test_atomic_consistency(void)
{
    ferry_ctx_t *ctx = NULL;
    CHECK(setenv("FERRY_MODEX", "singleton", 1) == 0);
    CHECK(api_ctx_create(NULL, API_CTX_OPEN | API_CTX_ALL_MODULES, &ctx) == FERRY_OK);
    for (int m = 0; m < ctx->n_modules; m++) {
        const ferry_btl_module_t *btl = ctx->modules[m];
        const ferry_btl_attr_t *a = &btl->attr;
        CHECK(btl_base_atomic_consistency(a, btl->ops) == NULL);
        bool ops = (a->flags & FERRY_BTL_FLAG_ATOMIC_OPS) != 0;
        printf("    %s: atomics 0x%x\n", a->name, (unsigned)a->atomic_flags);
        if (!ops) {
            CHECK(a->atomic_flags == 0);
            continue;
        }
        ferry_btl_attr_t bad = *a;
        bad.flags &= ~(uint32_t)FERRY_BTL_FLAG_ATOMIC_OPS;
        CHECK(btl_base_atomic_consistency(&bad, btl->ops) != NULL);
        bad = *a;
        bad.atomic_flags = 0;
        CHECK(btl_base_atomic_consistency(&bad, btl->ops) != NULL);
        bad = *a;
        bad.atomic_flags |= 0x40000000u; /* no bit of the table */
        CHECK(btl_base_atomic_consistency(&bad, btl->ops) != NULL);
        bad = *a;
        bad.atomic_flags &= ~(uint32_t)FERRY_BTL_ATOMIC_SUPPORTS_CSWAP;
        CHECK(btl_base_atomic_consistency(&bad, btl->ops) != NULL);
        ferry_btl_ops_t o = *btl->ops;
        o.atomic_fop = btl_base_unsupported_atomic_fop;
        CHECK(btl_base_atomic_consistency(a, &o) != NULL);
        o = *btl->ops;
        o.atomic_cswap = btl_base_unsupported_atomic_cswap;
        CHECK(btl_base_atomic_consistency(a, &o) != NULL);
        o = *btl->ops;
        o.atomic_op = btl_base_unsupported_atomic_op;
        CHECK(btl_base_atomic_consistency(a, &o) != NULL);
        /* And btl_base_module_init says no to it. */
        ferry_btl_module_t scratch;
        CHECK(btl_base_module_init(&scratch, btl->component, ctx, a, &o) == FERRY_ERR_INVALID);
        /* No ops and no flags at all is consistent. */
        o.atomic_fop = btl_base_unsupported_atomic_fop;
        o.atomic_cswap = btl_base_unsupported_atomic_cswap;
        bad = *a;
        bad.flags &= ~(uint32_t)(FERRY_BTL_FLAG_ATOMIC_OPS | FERRY_BTL_FLAG_ATOMIC_FOPS);
        bad.atomic_flags = 0;
        CHECK(btl_base_atomic_consistency(&bad, &o) == NULL);
    }
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    printf("ok  module init refuses atomic flags that disagree with the ops\n");
}

int main(void)
{
    test_table();
    test_modules();
    test_atomic_table();
    test_atomic_consistency();
    return 0;
}
