/*
 * Operations whose target does not answer in time (src/btl/ofi/ofi_rdma.c:
 * ofi_putn_expire, btl_amo_expire): rank 1 registers a region, hands its
 * key to rank 0, says it is going away, and then makes no call into ferry
 * for WAIT_MS. Rank 0's put with notification (with a callback: tracked)
 * and fetch-and-add (executed by the target over ofi) must each complete
 * with FERRY_ERR_TIMEOUT after FERRY_OFI_REQUEST_TIMEOUT, long before rank
 * 1 is back, and the fetch-and-add's result buffer must stay untouched,
 * then and after its late answer. Without the deadlines both complete with
 * FERRY_OK once rank 1 answers, WAIT_MS later, and a target that never
 * answers holds them, and every flush, for ever. When rank 1 is back it
 * handles both (the data lands and its handler runs; the add is applied)
 * and answers late: rank 0 drops the answers, fails nobody, reports the
 * timeouts once at the next flush, and a second put with notification and
 * fetch-and-add complete with FERRY_OK (the fetch sees the late add).
 *
 *   ferryrun -n 2 -x FERRY_BTL=self,ofi -x FERRY_OFI_PROVIDER=shm
 *            -x FERRY_OFI_REQUEST_TIMEOUT=500 ofi_late [WAIT_MS]
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "btl/ctx.h"

#include "../../../../tests/unit/check.h"

#define TAG_KEY 1
#define TAG_NOTE 2
#define TAG_BACK 3
#define TAG_AWAY 4

typedef struct key_msg {
    ferry_rkey_t rkey;
    uint64_t base;
} key_msg_t;

static key_msg_t g_key;
static bool g_have_key, g_back, g_away;
static int g_notes, g_errors;
static uint64_t g_region[8]; /* [0], [1]: the puts' data; [4]: the counter */

static void on_msg(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)arg;
    if (tag == TAG_KEY) {
        CHECK(len == sizeof(g_key));
        memcpy(&g_key, data, sizeof(g_key));
        g_have_key = true;
    } else if (tag == TAG_NOTE) {
        /* Rank 1: the data is there before the handler runs. */
        CHECK(len == 4 && memcmp(data, "late", 4) == 0);
        CHECK(g_region[g_notes] == 0x1234567800ull + (uint64_t)g_notes);
        g_notes++;
    } else if (tag == TAG_BACK) {
        g_back = true;
    } else if (tag == TAG_AWAY) {
        g_away = true;
    }
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    (void)ctx, (void)arg;
    printf("rank %d: peer %d failed: %s (%s)\n", ferry_rank(ctx), peer, msg,
           ferry_strerror(status));
    g_errors++;
}

static void on_done(void *arg, int status)
{
    *(int *)arg = status;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

int main(int argc, char **argv)
{
    int wait_ms = argc > 1 ? atoi(argv[1]) : 5000;
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    int me = ferry_rank(ctx);
    CHECK(ferry_size(ctx) == 2);
    if (ctx->peers[1 - me].module_idx < 0 ||
        strcmp(ctx->modules[ctx->peers[1 - me].module_idx]->attr.name, "ofi") != 0) {
        if (me == 0)
            printf("SKIPPED: the ranks are not joined by ofi\n");
        ferry_finalize(&ctx);
        return 77;
    }
    CHECK(ferry_set_error_cb(ctx, on_error, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_KEY, on_msg, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_NOTE, on_msg, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_BACK, on_msg, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_AWAY, on_msg, NULL) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (me == 1) {
        ferry_mem_t *mem;
        CHECK(ferry_mem_register(ctx, g_region, sizeof(g_region),
                                 FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_ATOMIC,
                                 &mem) == FERRY_OK);
        key_msg_t k = {.base = (uint64_t)(uintptr_t)g_region};
        CHECK(ferry_mem_rkey(mem, &k.rkey) == FERRY_OK);
        CHECK(ferry_am_send(ctx, 0, TAG_KEY, &k, sizeof(k)) == FERRY_OK);
        CHECK(ferry_flush(ctx, 0) == FERRY_OK); /* rank 0 has the key */
        /* Away: no call into ferry after this one. */
        CHECK(ferry_am_send(ctx, 0, TAG_AWAY, NULL, 0) == FERRY_OK);
        usleep((useconds_t)wait_ms * 1000);
        while (g_notes < 1)
            CHECK(ferry_progress(ctx) >= 0);
        printf("rank 1: back after %d ms; the late put landed and its handler ran\n", wait_ms);
        CHECK(ferry_am_send(ctx, 0, TAG_BACK, NULL, 0) == FERRY_OK);
        while (g_notes < 2)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(ferry_barrier(ctx) == FERRY_OK);
        CHECK(g_region[4] == 2); /* the late add and the second one */
        CHECK(ferry_mem_deregister(ctx, mem) == FERRY_OK);
    } else {
        while (!g_have_key || !g_away)
            CHECK(ferry_progress(ctx) >= 0);
        ferry_rkey_h *rh;
        CHECK(ferry_rkey_unpack(ctx, 1, &g_key.rkey, &rh) == FERRY_OK);
        int st = 1, ast = 1;
        uint64_t v = 0x1234567800ull, fetched = 0xdeadbeefull;
        ferry_op_params_t p = {.cb = on_done, .arg = &st};
        ferry_op_params_t ap = {.cb = on_done, .arg = &ast};
        double t0 = now_ms();
        CHECK(ferry_put_notify(ctx, rh, g_key.base, &v, sizeof(v), TAG_NOTE, "late", 4, &p) ==
              FERRY_OK);
        CHECK(ferry_atomic_fetch(ctx, rh, g_key.base + 32, FERRY_ATOMIC_ADD, 8, 1, &fetched,
                                 &ap) == FERRY_OK);
        while ((st == 1 || ast == 1) && !g_back)
            CHECK(ferry_progress(ctx) >= 0);
        double took = now_ms() - t0;
        printf("rank 0: the put with notification ended with %s, the fetch-and-add with %s, "
               "after %.0f ms (rank 1 away for %d)\n",
               st == 1 ? "nothing yet" : ferry_status_name(st),
               ast == 1 ? "nothing yet" : ferry_status_name(ast), took, wait_ms);
        CHECK(st == FERRY_ERR_TIMEOUT && ast == FERRY_ERR_TIMEOUT);
        CHECK(fetched == 0xdeadbeefull);
        /* Rank 1 back: its late answers are dropped, nobody fails. */
        while (!g_back)
            CHECK(ferry_progress(ctx) >= 0);
        st = 1;
        v = 0x1234567801ull;
        CHECK(ferry_put_notify(ctx, rh, g_key.base + 8, &v, sizeof(v), TAG_NOTE, "late", 4,
                               &p) == FERRY_OK);
        while (st == 1)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(st == FERRY_OK);
        ast = 1;
        uint64_t second = 0;
        CHECK(ferry_atomic_fetch(ctx, rh, g_key.base + 32, FERRY_ATOMIC_ADD, 8, 1, &second,
                                 &ap) == FERRY_OK);
        while (ast == 1)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(ast == FERRY_OK && second == 1); /* the first add was applied, late */
        CHECK(fetched == 0xdeadbeefull);       /* and its answer wrote nothing */
        /* The flush reports the first error since the last one (the
         * timeout), once. */
        int frc = ferry_flush(ctx, 1);
        printf("rank 0: the flush after it: %s\n", ferry_status_name(frc));
        CHECK(frc == FERRY_ERR_TIMEOUT);
        CHECK(ferry_flush(ctx, 1) == FERRY_OK);
        printf("rank 0: the late answers dropped; the next put with notification and "
               "fetch-and-add ended with FERRY_OK (the fetch saw the late add)\n");
        CHECK(ferry_rkey_release(ctx, rh) == FERRY_OK);
        CHECK(ferry_barrier(ctx) == FERRY_OK);
    }
    CHECK(g_errors == 0);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    printf("ofi_late: ok rank %d\n", me);
    return 0;
}
