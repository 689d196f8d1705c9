/*
 * The registration a rendezvous makes (api_mem_register_for): only with
 * the rails to its peer, so that its key names just those modules. Two
 * ranks with self, sm and tcp open: rank 0's registration for rank 1 holds
 * sm's key alone (tcp reaches rank 1 too, but sm is its rail), for itself
 * self's alone, and ferry_mem_register's holds tcp's beside them; rank 1
 * then gets through the narrowed key, every byte right.
 *
 *   ferryrun -n 2 -x FERRY_BTL=self,sm,tcp test_reg_for
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <ferry/ferry.h>

#include "api/api.h"
#include "api/rkey.h"
#include "btl/ctx.h"

#include "../unit/check.h"

#define TAG_KEY 1
#define LEN 65536

typedef struct key_msg {
    ferry_rkey_t rkey;
    uint64_t base;
} key_msg_t;

static key_msg_t g_key;
static bool g_have_key;

static void on_key(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    CHECK(len == sizeof(g_key));
    memcpy(&g_key, data, sizeof(g_key));
    g_have_key = true;
}

/* Which transports a key has entries for: bit 0 self, 1 sm, 2 tcp, 3 other. */
static unsigned key_transports(const ferry_rkey_t *rkey)
{
    api_rkey_header_t h;
    memcpy(&h, rkey->bytes, sizeof(h));
    unsigned bits = 0;
    size_t off = sizeof(h);
    for (unsigned i = 0; i < h.n_entries; i++) {
        api_rkey_entry_t e;
        memcpy(&e, rkey->bytes + off, sizeof(e));
        bits |= e.name_hash == api_rkey_name_hash("self")  ? 1u
                : e.name_hash == api_rkey_name_hash("sm")  ? 2u
                : e.name_hash == api_rkey_name_hash("tcp") ? 4u
                                                            : 8u;
        off += sizeof(e) + e.key_len;
    }
    return bits;
}

static unsigned keyed(ferry_ctx_t *ctx, void *buf, int dst)
{
    ferry_mem_t *mem;
    CHECK((dst >= 0 ? api_mem_register_for(ctx, buf, LEN, FERRY_ACCESS_REMOTE_READ, dst, &mem)
                    : ferry_mem_register(ctx, buf, LEN, FERRY_ACCESS_REMOTE_READ, &mem)) ==
          FERRY_OK);
    ferry_rkey_t k;
    CHECK(ferry_mem_rkey(mem, &k) == FERRY_OK);
    CHECK(ferry_mem_deregister(ctx, mem) == FERRY_OK);
    return key_transports(&k);
}

static void on_done(void *arg, int status)
{
    *(int *)arg = status;
}

int main(void)
{
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    int me = ferry_rank(ctx);
    CHECK(ferry_size(ctx) == 2);
    int peer = 1 - me;
    if (btl_ctx_find_module(ctx, "sm") == NULL || btl_ctx_find_module(ctx, "tcp") == NULL ||
        ctx->peers[peer].module_idx < 0 ||
        strcmp(ctx->modules[ctx->peers[peer].module_idx]->attr.name, "sm") != 0) {
        if (me == 0)
            printf("SKIPPED: sm and tcp must both open, sm joining the ranks\n");
        ferry_finalize(&ctx);
        return 77;
    }
    CHECK(ferry_am_register(ctx, TAG_KEY, on_key, NULL) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    static unsigned char buf[LEN];
    for (size_t i = 0; i < LEN; i++)
        buf[i] = (unsigned char)(i * 13 + 5);
    if (me == 0) {
        unsigned to_peer = keyed(ctx, buf, 1), to_self = keyed(ctx, buf, 0),
                 any = keyed(ctx, buf, -1);
        printf("rank 0: key for rank 1 %#x, for itself %#x, ferry_mem_register's %#x\n", to_peer,
               to_self, any);
        CHECK(to_peer == 2u && to_self == 1u && (any & 7u) == 7u);
        CHECK(api_mem_register_for(ctx, buf, LEN, FERRY_ACCESS_REMOTE_READ, 2, NULL) ==
              FERRY_ERR_INVALID);
        ferry_mem_t *mem;
        CHECK(api_mem_register_for(ctx, buf, LEN, FERRY_ACCESS_REMOTE_READ, 1, &mem) == FERRY_OK);
        key_msg_t k = {.base = (uint64_t)(uintptr_t)buf};
        CHECK(ferry_mem_rkey(mem, &k.rkey) == FERRY_OK);
        CHECK(ferry_am_send(ctx, 1, TAG_KEY, &k, sizeof(k)) == FERRY_OK);
        CHECK(ferry_barrier(ctx) == FERRY_OK); /* rank 1 got it all */
        CHECK(ferry_mem_deregister(ctx, mem) == FERRY_OK);
    } else {
        while (!g_have_key)
            CHECK(ferry_progress(ctx) >= 0);
        static unsigned char got[LEN];
        int st = 1;
        CHECK(ferry_get(ctx, 0, got, LEN, NULL, g_key.base, &g_key.rkey, on_done, &st) ==
              FERRY_OK);
        while (st == 1)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(st == FERRY_OK && memcmp(got, buf, LEN) == 0);
        printf("rank 1: got 64 KiB through rank 0's key for its rails, every byte right\n");
        CHECK(ferry_barrier(ctx) == FERRY_OK);
    }
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    printf("test_reg_for: ok rank %d\n", me);
    return 0;
}
