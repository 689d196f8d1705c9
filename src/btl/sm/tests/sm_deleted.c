/*
 * Answers from a peer this rank has deleted (del_procs) while it owed them:
 * rank 0 starts a get through the ring and a fetch-and-add the target
 * executes, to rank 1, which makes no call into ferry for a while; rank 0
 * then deletes rank 1's endpoint, so both complete with FERRY_ERR_UNREACH
 * at once. Rank 1 comes back and answers both. Those answers must be
 * dropped: nothing written into rank 0's buffers, and rank 1 not taken
 * for a peer that breaks the protocol (an answer to nothing asked for).
 * Rank 0 reads rank 1's ring for a while after, and must have read them:
 * its read position in the channel moves past them. Rank 1, whose path to
 * rank 0 was taken away on rank 0's side only, leaves without finalize
 * 5 s after it answered, when rank 0 has looked (its finalize would wait
 * for rank 0's goodbye, which cannot come; rank 0's sees it exit).
 *
 * usage (under ferryrun -n 2, FERRY_BTL=self,sm): sm_deleted
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "unit/check.h"
#include "sm_pair.h"
#include "btl/ctx.h"
#include "btl/sm/sm.h"

#define TAG_KEY 11
#define REGION 4096
#define GET_LEN 256

typedef struct key_msg {
    ferry_rkey_t rkey;
    uint64_t base;
} key_msg_t;

static key_msg_t g_key;
static int g_have_key, g_errors;

static void on_msg(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    CHECK(len == sizeof(g_key));
    memcpy(&g_key, data, sizeof(g_key));
    g_have_key = 1;
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    (void)arg;
    printf("rank %d: peer %d failed: %s (%s)\n", ferry_rank(ctx), peer, msg,
           ferry_strerror(status));
    g_errors++;
}

static void on_done(void *arg, int status)
{
    *(int *)arg = status;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void)
{
    ferry_ctx_t *ctx;
    ferry_btl_module_t *btl = sm_pair_init(&ctx);
    int me = ferry_rank(ctx);
    CHECK(ferry_set_error_cb(ctx, on_error, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_KEY, on_msg, NULL) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (me == 1) {
        unsigned char *region = aligned_alloc(4096, REGION);
        CHECK(region != NULL);
        memset(region, 0x5a, REGION);
        ferry_mem_t *mem;
        CHECK(ferry_mem_register(ctx, region, REGION,
                                 FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE |
                                     FERRY_ACCESS_REMOTE_ATOMIC,
                                 &mem) == FERRY_OK);
        key_msg_t k = {.base = (uint64_t)(uintptr_t)region};
        CHECK(ferry_mem_rkey(mem, &k.rkey) == FERRY_OK);
        CHECK(ferry_am_send(ctx, 0, TAG_KEY, &k, sizeof(k)) == FERRY_OK);
        /* Away while rank 0 asks and deletes us (no flush: its marker's
         * answer would be lost with the path). */
        usleep(2 * 1000 * 1000);
        double t0 = now_s();
        while (now_s() - t0 < 1.0)
            CHECK(ferry_progress(ctx) >= 0);
        uint64_t counter;
        memcpy(&counter, region + 1024, sizeof(counter));
        printf("rank 1: back; answered rank 0's get and fetch-and-add (the counter is %#llx)\n",
               (unsigned long long)counter);
        CHECK(counter == 0x5a5a5a5a5a5a5a5bull);
        /* Rank 0 took us off its paths: it will not say goodbye, and our
         * finalize would wait for that. We leave once it has looked. */
        usleep(5 * 1000 * 1000);
        printf("sm_deleted: ok rank 1\n");
        fflush(stdout);
        _exit(0);
    } else {
        while (!g_have_key)
            CHECK(ferry_progress(ctx) >= 0);
        ferry_btl_endpoint_t *ep = ctx->peers[1].ep;
        ferry_rkey_h *rh;
        CHECK(ferry_rkey_unpack(ctx, 1, &g_key.rkey, &rh) == FERRY_OK);
        static unsigned char buf[GET_LEN];
        memset(buf, 0x11, sizeof(buf));
        uint64_t fetched = 0x22;
        int gst = 1, ast = 1;
        ferry_op_params_t gp = {.cb = on_done, .arg = &gst};
        ferry_op_params_t ap = {.cb = on_done, .arg = &ast};
        CHECK(ferry_get_nb(ctx, rh, g_key.base, buf, GET_LEN, &gp) == FERRY_OK);
        CHECK(ferry_atomic_fetch(ctx, rh, g_key.base + 1024, FERRY_ATOMIC_ADD, 8, 1, &fetched,
                                 &ap) == FERRY_OK);
        for (int i = 0; i < 1000; i++)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(gst == 1 && ast == 1); /* rank 1 is away */
        uint64_t read_before = ep->rpos;
        CHECK(btl->ops->del_procs(btl, 1, &ep) == FERRY_OK);
        while (gst == 1 || ast == 1)
            CHECK(ferry_progress(ctx) >= 0);
        printf("rank 0: deleted rank 1: its get ended %s, its fetch-and-add %s\n",
               ferry_status_name(gst), ferry_status_name(ast));
        CHECK(gst == FERRY_ERR_UNREACH && ast == FERRY_ERR_UNREACH);
        /* Rank 1's answers arrive meanwhile; read and dropped. */
        double t0 = now_s();
        while (now_s() - t0 < 4.0)
            CHECK(ferry_progress(ctx) >= 0);
        uint64_t read_after = ep->rpos;
        printf("rank 0: read %llu bytes of rank 1's ring since; %d failures\n",
               (unsigned long long)(read_after - read_before), g_errors);
        CHECK(read_after > read_before);
        for (size_t i = 0; i < GET_LEN; i++)
            CHECK(buf[i] == 0x11);
        CHECK(fetched == 0x22);
        CHECK(g_errors == 0);
        CHECK(ferry_rkey_release(ctx, rh) == FERRY_OK);
    }
    /* No barrier: rank 0 took rank 1 off its paths. */
    int frc = ferry_finalize(&ctx);
    printf("rank %d: finalize: %s\n", me, ferry_status_name(frc));
    printf("sm_deleted: ok rank %d\n", me);
    return 0;
}
