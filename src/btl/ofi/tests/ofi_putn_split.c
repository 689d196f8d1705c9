/*
 * Large puts with notification over a provider that does not order a send
 * after a write (shm): split (ofi_wire.h), the data by fi_writedata and
 * the notification at once, the target holding the notification until the
 * write lands. Rank 1's handler checks every byte of each put's data
 * against the pattern its payload names, and that notifications come in
 * the order sent:
 *   one at a time, 40 KiB to 4 MiB, with a callback;
 *   48 in flight at once, with callbacks, each waited on only at the end;
 *   48 without callback or request, then a flush;
 *   small ones (one message each) between large ones in flight;
 *   one through a key rank 1 has released: FERRY_ERR_ACCESS, handler run
 *   (whole, the provider may take it: README, Limits).
 * With "split" the module's counts must show the puts went split (rank 0
 * sent them so, rank 1 saw their writes land); with "whole"
 * (FERRY_OFI_PUTN_SPLIT=0) they must show none did: the same checks of
 * the data pass either way, so the counts tell the paths apart.
 *
 *   ferryrun -n 2 -x FERRY_BTL=self,ofi -x FERRY_OFI_PROVIDER=shm
 *            ofi_putn_split split|whole
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "btl/ctx.h"
#include "btl/ofi/ofi.h"

#include "../../../../tests/unit/check.h"

#define TAG_KEY 1
#define TAG_NOTE 2
#define TAG_GONE 3

#define REGION (8u << 20)
#define WINDOW 48
/* 40 KiB to 4 MiB doubling, a window with callbacks, one without, 16
 * pairs of a large and a small one. */
#define N_ONE 7
#define N_LARGE (N_ONE + 2 * WINDOW + 16)
#define N_PUTS (N_LARGE + 16)

typedef struct key_msg {
    ferry_rkey_t rkey;
    uint64_t base;
} key_msg_t;

/* A notification's payload: which put, where, and the pattern's seed. */
typedef struct note {
    uint32_t seq;
    uint32_t len;
    uint64_t off;
    uint64_t seed;
} note_t;

static key_msg_t g_key[2];
static int g_keys;
static bool g_gone, g_split;
static unsigned char *g_region;
static uint32_t g_next_seq; /* rank 1: the seq the next notification must carry */
static int g_notes, g_refused_notes, g_errors;

static unsigned char pattern(uint64_t seed, size_t i)
{
    uint64_t x = seed ^ (i * 0x9e3779b97f4a7c15ull);
    x ^= x >> 29;
    return (unsigned char)(x * 0xbf58476d1ce4e5b9ull >> 56);
}

static void fill(unsigned char *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = pattern(seed, i);
}

static void on_msg(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)arg;
    if (tag == TAG_KEY) {
        CHECK(len == sizeof(key_msg_t) && g_keys < 2);
        memcpy(&g_key[g_keys++], data, sizeof(key_msg_t));
    } else if (tag == TAG_GONE) {
        g_gone = true;
    } else if (tag == TAG_NOTE) {
        note_t n;
        CHECK(len == sizeof(n));
        memcpy(&n, data, sizeof(n));
        if (n.seed == 0) {
            /* Through the released key: no data to check. */
            g_refused_notes++;
            return;
        }
        /* Held ones run in the order sent, and the small ones, one
         * message each, wait behind none: only order among the large. */
        if (g_split && n.len > 32 * 1024) {
            CHECK(n.seq >= g_next_seq);
            g_next_seq = n.seq + 1;
        }
        CHECK(n.off <= REGION && n.len <= REGION - n.off);
        for (size_t i = 0; i < n.len; i++)
            if (g_region[n.off + i] != pattern(n.seed, i)) {
                printf("rank 1: put %u (%u bytes at %llu): byte %zu is %u, not %u\n", n.seq,
                       n.len, (unsigned long long)n.off, i, g_region[n.off + i],
                       pattern(n.seed, i));
                CHECK(!"the data was there when the handler ran");
            }
        g_notes++;
    }
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

static ofi_module_t *ofi_mod(ferry_ctx_t *ctx, int peer)
{
    int m = ctx->peers[peer].module_idx;
    if (m < 0 || strcmp(ctx->modules[m]->attr.name, "ofi") != 0)
        return NULL;
    return (ofi_module_t *)ctx->modules[m];
}

static void wait_for(ferry_ctx_t *ctx, const int *st)
{
    while (*st == 1)
        CHECK(ferry_progress(ctx) >= 0);
}

static uint32_t g_seq;

/* One put with notification of len bytes at off, its data a pattern. */
static void putn(ferry_ctx_t *ctx, ferry_rkey_h *rh, unsigned char *src, size_t len, uint64_t off,
                 const ferry_op_params_t *p)
{
    uint32_t seq = g_seq++;
    note_t n = {.seq = seq, .len = (uint32_t)len, .off = off, .seed = 0x5eed0001ull + seq};
    fill(src, len, n.seed);
    int rc;
    while ((rc = ferry_put_notify(ctx, rh, g_key[0].base + off, src, len, TAG_NOTE, &n,
                                  sizeof(n), p)) == FERRY_ERR_NO_RESOURCE)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(rc == FERRY_OK);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2 && (strcmp(argv[1], "split") == 0 || strcmp(argv[1], "whole") == 0));
    bool split = strcmp(argv[1], "split") == 0;
    g_split = split;
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    int me = ferry_rank(ctx);
    CHECK(ferry_size(ctx) == 2);
    ofi_module_t *mod = ofi_mod(ctx, 1 - me);
    if (mod == NULL) {
        if (me == 0)
            printf("SKIPPED: the ranks are not joined by ofi\n");
        ferry_finalize(&ctx);
        return 77;
    }
    if (split && !mod->putn_split) {
        if (me == 0)
            printf("SKIPPED: ofi over %s does not split puts with notification (its sends "
                   "are ordered after writes, or it carries no completion data)\n",
                   mod->my_addr.prov);
        ferry_finalize(&ctx);
        return 77;
    }
    CHECK(ferry_set_error_cb(ctx, on_error, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_KEY, on_msg, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_NOTE, on_msg, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_GONE, on_msg, NULL) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    int expected = 0;
    if (me == 1) {
        g_region = calloc(1, REGION);
        unsigned char *other = calloc(1, 1 << 20);
        CHECK(g_region != NULL && other != NULL);
        ferry_mem_t *mem, *gone;
        CHECK(ferry_mem_register(ctx, g_region, REGION, FERRY_ACCESS_REMOTE_WRITE, &mem) ==
              FERRY_OK);
        CHECK(ferry_mem_register(ctx, other, 1 << 20, FERRY_ACCESS_REMOTE_WRITE, &gone) ==
              FERRY_OK);
        key_msg_t k = {.base = (uint64_t)(uintptr_t)g_region};
        CHECK(ferry_mem_rkey(mem, &k.rkey) == FERRY_OK);
        CHECK(ferry_am_send(ctx, 0, TAG_KEY, &k, sizeof(k)) == FERRY_OK);
        k.base = (uint64_t)(uintptr_t)other;
        CHECK(ferry_mem_rkey(gone, &k.rkey) == FERRY_OK);
        CHECK(ferry_am_send(ctx, 0, TAG_KEY, &k, sizeof(k)) == FERRY_OK);
        CHECK(ferry_flush(ctx, 0) == FERRY_OK);
        CHECK(ferry_mem_deregister(ctx, gone) == FERRY_OK);
        CHECK(ferry_am_send(ctx, 0, TAG_GONE, NULL, 0) == FERRY_OK);
        CHECK(ferry_barrier(ctx) == FERRY_OK); /* rank 0 is done */
        printf("rank 1: %d notifications, each after its data; %d through the released key; "
               "%llu writes landed split\n",
               g_notes, g_refused_notes, (unsigned long long)mod->putn_split_landed);
        /* Whole, over shm (which cannot revoke a key: README, Limits) the
         * put may land and notify, or be refused and send nothing. */
        CHECK(g_notes == N_PUTS && (split ? g_refused_notes == 1 : g_refused_notes <= 1));
        CHECK(split ? mod->putn_split_landed >= N_LARGE : mod->putn_split_landed == 0);
        CHECK(ferry_mem_deregister(ctx, mem) == FERRY_OK);
        free(other);
        free(g_region);
    } else {
        while (g_keys < 2 || !g_gone)
            CHECK(ferry_progress(ctx) >= 0);
        ferry_rkey_h *rh, *rgone;
        CHECK(ferry_rkey_unpack(ctx, 1, &g_key[0].rkey, &rh) == FERRY_OK);
        CHECK(ferry_rkey_unpack(ctx, 1, &g_key[1].rkey, &rgone) == FERRY_OK);
        unsigned char *src = malloc(REGION);
        CHECK(src != NULL);
        /* One at a time, callbacks. A put's completion need not wait for
         * its handler (the notification handed over is enough where it is
         * not split): each its own place, and a flush, which does wait for
         * the handlers, before places are used again. */
        uint64_t at = 0;
        for (size_t len = 40 * 1024; len <= 4u << 20; len *= 2) {
            int st = 1;
            ferry_op_params_t p = {.cb = on_done, .arg = &st};
            putn(ctx, rh, src + at, len, at, &p);
            wait_for(ctx, &st);
            CHECK(st == FERRY_OK);
            at += len;
            expected++;
        }
        CHECK(ferry_flush(ctx, 1) == FERRY_OK);
        /* A window in flight, callbacks waited on at the end. */
        int sts[WINDOW];
        for (int i = 0; i < WINDOW; i++) {
            sts[i] = 1;
            ferry_op_params_t p = {.cb = on_done, .arg = &sts[i]};
            size_t len = 64 * 1024 + (size_t)i * 1000;
            putn(ctx, rh, src + (size_t)i * 160 * 1024, len, (uint64_t)i * 160 * 1024, &p);
            expected++;
        }
        for (int i = 0; i < WINDOW; i++) {
            wait_for(ctx, &sts[i]);
            CHECK(sts[i] == FERRY_OK);
        }
        CHECK(ferry_flush(ctx, 1) == FERRY_OK);
        /* Without callback or request: a flush covers them. */
        for (int i = 0; i < WINDOW; i++) {
            size_t len = 48 * 1024 + (size_t)i * 512;
            putn(ctx, rh, src + (size_t)i * 160 * 1024, len, (uint64_t)i * 160 * 1024, NULL);
            /* Rank 0's buffer is its own again only once the flush
             * returns: each put has its own slice of it. */
            expected++;
        }
        CHECK(ferry_flush(ctx, 1) == FERRY_OK);
        /* Small ones between large ones in flight. */
        for (int i = 0; i < 16; i++) {
            int st[2] = {1, 1};
            ferry_op_params_t p0 = {.cb = on_done, .arg = &st[0]};
            ferry_op_params_t p1 = {.cb = on_done, .arg = &st[1]};
            putn(ctx, rh, src, 256 * 1024, 0, &p0);
            putn(ctx, rh, src + (1u << 20), 100, 1u << 20, &p1);
            expected += 2;
            wait_for(ctx, &st[0]);
            wait_for(ctx, &st[1]);
            CHECK(st[0] == FERRY_OK && st[1] == FERRY_OK);
            CHECK(ferry_flush(ctx, 1) == FERRY_OK);
        }
        /* Through the released key: refused, the handler run all the
         * same. */
        note_t n = {.seq = g_seq++, .len = 256 * 1024, .seed = 0};
        int st = 1;
        ferry_op_params_t p = {.cb = on_done, .arg = &st};
        CHECK(ferry_put_notify(ctx, rgone, g_key[1].base, src, 256 * 1024, TAG_NOTE, &n,
                               sizeof(n), &p) == FERRY_OK);
        wait_for(ctx, &st);
        printf("rank 0: the put through the released key ended with %s\n",
               ferry_status_name(st));
        /* Split, the target's own check refuses it. */
        CHECK(split ? st == FERRY_ERR_ACCESS : st == FERRY_ERR_ACCESS || st == FERRY_OK);
        (void)ferry_flush(ctx, 1); /* reports that refusal */
        CHECK(ferry_flush(ctx, 1) == FERRY_OK);
        printf("rank 0: %d puts with notification checked; %llu sent split\n", expected,
               (unsigned long long)mod->putn_split_sent);
        CHECK(expected == N_PUTS);
        CHECK(split ? mod->putn_split_sent >= N_LARGE + 1 : mod->putn_split_sent == 0);
        CHECK(ferry_rkey_release(ctx, rh) == FERRY_OK);
        CHECK(ferry_rkey_release(ctx, rgone) == FERRY_OK);
        free(src);
        CHECK(ferry_barrier(ctx) == FERRY_OK);
    }
    CHECK(g_errors == 0);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    printf("ofi_putn_split: ok rank %d\n", me);
    return 0;
}
