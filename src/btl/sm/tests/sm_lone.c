/*
 * A lone put or get (nothing else in flight to that peer) of
 * FERRY_SM_CMA_LONE bytes or more goes by cross-memory attach, which needs
 * nothing of the target. Rank 1 registers a region, hands rank 0 its key,
 * then stops calling into ferry and only reads its own memory; rank 0 gets
 * 1 KiB, 4 KiB and 16 KiB from the region (checking every byte) and then
 * puts 2 KiB into it, ending with a word rank 1 waits for. Through the
 * ring each would wait for rank 1's progress, which does not come until
 * that word is seen: rank 1 gives up after WAIT seconds and fails. The
 * run with FERRY_SM_CMA_LONE=0 is expected to fail that way (the check can
 * fail).
 *
 * usage (under ferryrun -n 2, FERRY_BTL=self,sm): sm_lone [WAIT_S]
 * Skipped (77) when sm does not join the ranks or the kernel refuses
 * cross-memory attach between them.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "unit/check.h"
#include "sm_pair.h"
#include "btl/ctx.h"

#define TAG_KEY 11
#define TAG_GO 12
#define REGION (64 * 1024)
#define PUT_AT (32 * 1024)
#define PUT_LEN 2048
#define MAGIC 0x4c4f4e45u /* "LONE" */

typedef struct key_msg {
    ferry_rkey_t rkey;
    uint64_t base;
    int32_t pid;
} key_msg_t;

static key_msg_t g_key;
static int g_have_key, g_go = -1;

static void on_msg(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)arg;
    if (tag == TAG_KEY && len == sizeof(g_key)) {
        memcpy(&g_key, data, sizeof(g_key));
        g_have_key = 1;
    } else if (tag == TAG_GO && len == sizeof(int)) {
        memcpy(&g_go, data, sizeof(int));
    }
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void on_done(void *arg, int status)
{
    *(int *)arg = status == FERRY_OK ? 1 : -1;
}

static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 7 + 3);
}

/* One operation from rank 0, alone, to completion (rank 1 does not
 * progress, so it must complete without it). */
static void lone_op(ferry_ctx_t *ctx, bool put, void *buf, size_t len, uint64_t raddr,
                    double wait_s)
{
    int done = 0;
    int rc = put ? ferry_put(ctx, 1, buf, len, NULL, raddr, &g_key.rkey, on_done, &done)
                 : ferry_get(ctx, 1, buf, len, NULL, raddr, &g_key.rkey, on_done, &done);
    CHECK(rc == FERRY_OK);
    double t0 = now_s();
    while (done == 0 && now_s() - t0 < wait_s + 5)
        CHECK(ferry_progress(ctx) >= 0);
    if (done == 0)
        printf("rank 0: a %zu-byte %s did not complete without rank 1\n", len,
               put ? "put" : "get");
    CHECK(done == 1);
}

int main(int argc, char **argv)
{
    double wait_s = argc > 1 ? atof(argv[1]) : 20.0;
    ferry_ctx_t *ctx;
    (void)sm_pair_init(&ctx);
    int me = ferry_rank(ctx);
    CHECK(ferry_am_register(ctx, TAG_KEY, on_msg, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_GO, on_msg, NULL) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    int ok = 0;
    if (me == 1) {
        unsigned char *region = aligned_alloc(4096, REGION);
        CHECK(region != NULL);
        for (size_t i = 0; i < REGION; i++)
            region[i] = pattern(i);
        ferry_mem_t *mem;
        CHECK(ferry_mem_register(ctx, region, REGION,
                                 FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE,
                                 &mem) == FERRY_OK);
        key_msg_t k = {.base = (uint64_t)(uintptr_t)region, .pid = (int32_t)getpid()};
        CHECK(ferry_mem_rkey(mem, &k.rkey) == FERRY_OK);
        CHECK(ferry_am_send(ctx, 0, TAG_KEY, &k, sizeof(k)) == FERRY_OK);
        while (g_go < 0)
            CHECK(ferry_progress(ctx) >= 0);
        if (g_go == 1) {
            /* No call into ferry from here until the word is seen. */
            _Atomic uint32_t *word = (_Atomic uint32_t *)(void *)(region + PUT_AT + PUT_LEN - 4);
            double t0 = now_s();
            while (atomic_load_explicit(word, memory_order_acquire) != MAGIC &&
                   now_s() - t0 < wait_s)
                ;
            if (atomic_load_explicit(word, memory_order_acquire) != MAGIC) {
                printf("rank 1: rank 0's lone operations did not land in %.0f s without my "
                       "progress\n",
                       wait_s);
                return 1;
            }
            for (size_t i = 0; i < PUT_LEN - 4; i++)
                CHECK(region[PUT_AT + i] == (unsigned char)~pattern(i));
            printf("rank 1: rank 0's gets and put completed while I made no call into ferry\n");
            ok = 1;
        } else {
            ok = 2;
        }
        CHECK(ferry_barrier(ctx) == FERRY_OK);
        CHECK(ferry_mem_deregister(ctx, mem) == FERRY_OK);
        free(region);
    } else {
        while (!g_have_key)
            CHECK(ferry_progress(ctx) >= 0);
        /* Cross-memory attach between the two, or a skip. */
        unsigned char probe;
        struct iovec l = {.iov_base = &probe, .iov_len = 1};
        struct iovec r = {.iov_base = (void *)(uintptr_t)g_key.base, .iov_len = 1};
        int go = process_vm_readv((pid_t)g_key.pid, &l, 1, &r, 1, 0) == 1 ? 1 : 0;
        if (!go)
            printf("SKIPPED: cross-memory attach to rank 1 refused (%s)\n", strerror(errno));
        CHECK(ferry_am_send(ctx, 1, TAG_GO, &go, sizeof(go)) == FERRY_OK);
        if (go) {
            static unsigned char buf[16384];
            size_t sizes[] = {1024, 4096, 16384};
            for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
                size_t off = 100 * (s + 1);
                memset(buf, 0, sizeof(buf));
                lone_op(ctx, false, buf, sizes[s], g_key.base + off, wait_s);
                for (size_t i = 0; i < sizes[s]; i++)
                    CHECK(buf[i] == pattern(off + i));
            }
            static unsigned char out[PUT_LEN];
            for (size_t i = 0; i < PUT_LEN - 4; i++)
                out[i] = (unsigned char)~pattern(i);
            uint32_t magic = MAGIC;
            memcpy(out + PUT_LEN - 4, &magic, 4);
            lone_op(ctx, true, out, PUT_LEN, g_key.base + PUT_AT, wait_s);
            printf("rank 0: gets of 1, 4 and 16 KiB and a 2 KiB put completed without rank "
                   "1's progress\n");
        }
        ok = go ? 1 : 2;
        CHECK(ferry_barrier(ctx) == FERRY_OK);
    }
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    return ok == 2 ? 77 : 0;
}
