/*
 * A small put with notification travels in one message with its
 * notification (API_TAG_PUTN, src/api/onesided.c) when nothing waits for
 * its own completion. Two ranks: rank 1 is the target, rank 0 puts and
 * then attacks the message as a peer that does not follow the protocol
 * would:
 *   - a put into a registration, then one into a registration the target
 *     has released: the data is there in the first, not in the second,
 *     the handler runs for both (after the data, as for a refused ring
 *     put), and rank 0's ferry_flush reports FERRY_ERR_ACCESS for the
 *     second only;
 *   - crafted messages on the wire: too short, an unknown kind, a key or
 *     payload longer than allowed, lengths that do not add up, a tag
 *     beyond the application's, a nonzero reserved field: dropped, no
 *     handler, no byte written; a module that is not the target's, a key
 *     that is no key, a read-only registration, a range outside the
 *     registration: refused, nothing written, the handler runs, and the
 *     refusal comes back before the flush's answer.
 *
 *   test_putn        (under ferryrun -n 2, any FERRY_BTL whose path to the
 *                    peer has target_resolve; else exit 77 with the reason)
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "api/api.h"
#include "api/rkey.h"
#include "btl/ctx.h"
#include "../unit/check.h"

#define TAG_KEYS 3
#define TAG_NOTE 5
#define REGION 4096

typedef struct target {
    int notes;           /* handlers run */
    uint64_t seen;       /* the first 8 bytes of the region when the last ran */
    char payload[16];    /* the last notification's payload */
    unsigned char *live; /* the region the notes look at */
} target_t;

typedef struct keys {
    ferry_rkey_t rw, gone, ro;
    uint64_t rw_base, gone_base, ro_base;
} keys_t;

static keys_t g_keys;
static int g_have_keys;

static void on_keys(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    CHECK(len == sizeof(g_keys));
    memcpy(&g_keys, data, sizeof(g_keys));
    g_have_keys = 1;
}

static void on_note(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag;
    target_t *t = arg;
    t->notes++;
    memcpy(&t->seen, t->live, sizeof(t->seen));
    memset(t->payload, 0, sizeof(t->payload));
    memcpy(t->payload, data, len < sizeof(t->payload) ? len : sizeof(t->payload));
}

/* Sends len bytes on ferry's tag as they are, through the peer's path. */
static void raw_send(ferry_ctx_t *ctx, int dst, const void *msg, size_t len)
{
    int rc;
    while ((rc = btl_ctx_send_small(ctx, dst, API_TAG_PUTN, msg, len)) == FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    CHECK(rc == FERRY_OK);
    api_am_sent(ctx, dst); /* as ferry's own sends: the next flush sends a marker */
}

/* A crafted message: hdr, then key, payload and data as given. */
static void send_crafted(ferry_ctx_t *ctx, const api_putn_hdr_t *h, const uint8_t *key,
                         size_t key_len, const void *payload, size_t plen, const void *data,
                         size_t len)
{
    unsigned char msg[sizeof(*h) + 256 + 128 + 64];
    CHECK(key_len <= 256 && plen <= 128 && len <= 64);
    size_t off = 0;
    memcpy(msg, h, sizeof(*h));
    off += sizeof(*h);
    memcpy(msg + off, key, key_len);
    off += key_len;
    memcpy(msg + off, payload, plen);
    off += plen;
    memcpy(msg + off, data, len);
    off += len;
    raw_send(ctx, 1, msg, off);
}

/* The end of a phase: rank 1 checks between the two barriers, while
 * nothing more of rank 0's can arrive. */
static void phase_end(ferry_ctx_t *ctx)
{
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
}

static void attacker(ferry_ctx_t *ctx, target_t *t)
{
    (void)t;
    ferry_rkey_h *rw, *gone;
    CHECK(ferry_rkey_unpack(ctx, 1, &g_keys.rw, &rw) == FERRY_OK);
    CHECK(ferry_rkey_unpack(ctx, 1, &g_keys.gone, &gone) == FERRY_OK);
    uint64_t v = 0x1122334455667788ull;
    /* A put that lands, then one the target refuses. */
    CHECK(ferry_put_notify(ctx, rw, g_keys.rw_base, &v, sizeof(v), TAG_NOTE, "ok", 3, NULL) ==
          FERRY_OK);
    CHECK(ferry_flush(ctx, 1) == FERRY_OK);
    phase_end(ctx); /* rank 1 checks the first */
    /* sm reads the target's registration table itself and may refuse at
     * once (nothing sent); otherwise the target refuses and the flush says
     * so. */
    int rc = ferry_put_notify(ctx, gone, g_keys.gone_base, &v, sizeof(v), TAG_NOTE, "gone", 5,
                              NULL);
    CHECK(rc == FERRY_OK || rc == FERRY_ERR_ACCESS);
    CHECK(ferry_flush(ctx, 1) == (rc == FERRY_OK ? FERRY_ERR_ACCESS : FERRY_OK));
    CHECK(ferry_flush(ctx, 1) == FERRY_OK); /* reported once */
    phase_end(ctx);

    /* Crafted messages. The module and key of the read-write region, as
     * the transport names them. */
    int m = ctx->peers[1].module_idx;
    ferry_btl_module_t *btl = ctx->modules[m];
    size_t klen = btl->attr.reg_handle_size;
    uint8_t key[FERRY_BTL_KEY_MAX], rokey[FERRY_BTL_KEY_MAX], junk[256];
    CHECK(api_rkey_resolve(ctx, m, 1, &g_keys.rw, g_keys.rw_base, 8, 0, key) == FERRY_OK);
    CHECK(api_rkey_resolve(ctx, m, 1, &g_keys.ro, g_keys.ro_base, 8, 0, rokey) == FERRY_OK);
    memset(junk, 0x41, sizeof(junk));
    const api_putn_hdr_t good = {.kind = API_PUTN_DATA,
                                 .tag = TAG_NOTE,
                                 .key_len = (uint8_t)klen,
                                 .plen = 4,
                                 .raddr = g_keys.rw_base,
                                 .len = 8};
    uint64_t evil = 0xeeeeeeeeeeeeeeeeull;
    api_putn_hdr_t h;

    /* Dropped: no handler, nothing written. */
    raw_send(ctx, 1, &good, 10);                                   /* shorter than its header */
    h = good, h.kind = 7;
    send_crafted(ctx, &h, key, klen, "bad", 4, &evil, 8);           /* unknown kind */
    h = good, h.key_len = FERRY_BTL_KEY_MAX + 1;
    send_crafted(ctx, &h, junk, FERRY_BTL_KEY_MAX + 1, "bad", 4, &evil, 8); /* key too long */
    h = good, h.plen = FERRY_PUT_NOTIFY_MAX + 1;
    send_crafted(ctx, &h, key, klen, junk, FERRY_PUT_NOTIFY_MAX + 1, &evil, 8); /* payload */
    h = good, h.len = 100;
    send_crafted(ctx, &h, key, klen, "bad", 4, &evil, 8); /* says 100 bytes, carries 8 */
    h = good, h.len = UINT32_MAX;
    send_crafted(ctx, &h, key, klen, "bad", 4, &evil, 8); /* a length that wraps */
    h = good, h.plen = 200;
    send_crafted(ctx, &h, key, klen, "bad", 4, &evil, 8); /* payload past the message */
    h = good, h.tag = FERRY_AM_TAG_MAX + 1;
    send_crafted(ctx, &h, key, klen, "bad", 4, &evil, 8); /* ferry's own tag */
    h = good, h.plen = FERRY_PUT_NOTIFY_MAX;
    send_crafted(ctx, &h, key, klen, "bad", 4, &evil, 8); /* a payload the message lacks */

    /* Refused: nothing written, the handler runs, a refusal comes back. */
    h = good;
    send_crafted(ctx, &h, rokey, klen, "ref", 4, &evil, 8); /* another registration's key */
    h = good;
    send_crafted(ctx, &h, junk, klen, "ref", 4, &evil, 8); /* a key that is no key */
    h = good, h.raddr = g_keys.ro_base;
    send_crafted(ctx, &h, rokey, klen, "ref", 4, &evil, 8); /* read only */
    h = good, h.raddr = g_keys.rw_base + REGION - 4;
    send_crafted(ctx, &h, key, klen, "ref", 4, &evil, 8); /* past its end */
    h = good, h.key_len = (uint8_t)(klen > 0 ? klen - 1 : 1);
    send_crafted(ctx, &h, key, h.key_len, "ref", 4, &evil, 8); /* a key cut short */

    /* The flush's marker follows them: the refusals are in by its answer. */
    rc = ferry_flush(ctx, 1);
    if (rc != FERRY_ERR_ACCESS)
        fprintf(stderr, "flush after the crafted messages: %s\n", ferry_strerror(rc));
    CHECK(rc == FERRY_ERR_ACCESS);
    phase_end(ctx);

    /* And a good one still lands after all that. */
    uint64_t w = 0x0102030405060708ull;
    CHECK(ferry_put_notify(ctx, rw, g_keys.rw_base, &w, sizeof(w), TAG_NOTE, "end", 4, NULL) ==
          FERRY_OK);
    CHECK(ferry_flush(ctx, 1) == FERRY_OK);
    phase_end(ctx);
    CHECK(ferry_rkey_release(ctx, rw) == FERRY_OK);
    CHECK(ferry_rkey_release(ctx, gone) == FERRY_OK);
}

static void target(ferry_ctx_t *ctx, target_t *t)
{
    unsigned char *rw = calloc(1, REGION), *gone = calloc(1, REGION), *ro = calloc(1, REGION);
    CHECK(rw != NULL && gone != NULL && ro != NULL);
    ferry_mem_t *mrw, *mgone, *mro;
    CHECK(ferry_mem_register(ctx, rw, REGION, FERRY_ACCESS_REMOTE_WRITE, &mrw) == FERRY_OK);
    CHECK(ferry_mem_register(ctx, gone, REGION, FERRY_ACCESS_REMOTE_WRITE, &mgone) == FERRY_OK);
    CHECK(ferry_mem_register(ctx, ro, REGION, FERRY_ACCESS_REMOTE_READ, &mro) == FERRY_OK);
    keys_t k = {.rw_base = (uint64_t)(uintptr_t)rw,
                .gone_base = (uint64_t)(uintptr_t)gone,
                .ro_base = (uint64_t)(uintptr_t)ro};
    CHECK(ferry_mem_rkey(mrw, &k.rw) == FERRY_OK);
    CHECK(ferry_mem_rkey(mgone, &k.gone) == FERRY_OK);
    CHECK(ferry_mem_rkey(mro, &k.ro) == FERRY_OK);
    /* The released registration's key is sent first and released before
     * it is used: its memory stays ours, to check that nothing lands. */
    CHECK(ferry_mem_deregister(ctx, mgone) == FERRY_OK);
    while (ferry_am_send(ctx, 0, TAG_KEYS, &k, sizeof(k)) == FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    t->live = rw;

    CHECK(ferry_barrier(ctx) == FERRY_OK); /* the first put */
    CHECK(t->notes == 1);
    CHECK(t->seen == 0x1122334455667788ull);
    CHECK(strcmp(t->payload, "ok") == 0);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK); /* the released one */
    /* Refused at the initiator (sm), or here: then the handler ran. */
    CHECK(t->notes == 1 || (t->notes == 2 && strcmp(t->payload, "gone") == 0));
    for (size_t i = 0; i < REGION; i++)
        CHECK(gone[i] == 0);
    int base = t->notes;
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    CHECK(ferry_barrier(ctx) == FERRY_OK); /* the crafted ones */
    CHECK(t->notes == base + 5);
    CHECK(strcmp(t->payload, "ref") == 0);
    uint64_t first;
    memcpy(&first, rw, sizeof(first));
    CHECK(first == 0x1122334455667788ull);
    for (size_t i = 8; i < REGION; i++)
        CHECK(rw[i] == 0);
    for (size_t i = 0; i < REGION; i++)
        CHECK(ro[i] == 0);
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    CHECK(ferry_barrier(ctx) == FERRY_OK); /* the last good one */
    CHECK(t->notes == base + 5 + 1);
    CHECK(t->seen == 0x0102030405060708ull);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(ferry_mem_deregister(ctx, mrw) == FERRY_OK);
    CHECK(ferry_mem_deregister(ctx, mro) == FERRY_OK);
    free(rw);
    free(gone);
    free(ro);
}

int main(void)
{
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    if (ferry_size(ctx) != 2) {
        printf("SKIPPED: test_putn needs 2 ranks (run under ferryrun -n 2)\n");
        ferry_finalize(&ctx);
        return 77;
    }
    int me = ferry_rank(ctx);
    btl_peer_t *peer = &ctx->peers[1 - me];
    if (peer->module_idx < 0 || ctx->modules[peer->module_idx]->ops->target_resolve == NULL) {
        printf("SKIPPED: the path to rank %d has no target_resolve (%s)\n", 1 - me,
               peer->module_idx < 0 ? "no transport reaches it"
                                    : ctx->modules[peer->module_idx]->attr.name);
        ferry_finalize(&ctx);
        return 77;
    }
    target_t t = {0};
    CHECK(ferry_am_register(ctx, TAG_KEYS, on_keys, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_NOTE, on_note, &t) == FERRY_OK);
    if (me == 0) {
        while (!g_have_keys)
            CHECK(ferry_progress(ctx) >= 0);
        attacker(ctx, &t);
    } else {
        target(ctx, &t);
    }
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    printf("rank %d: put with notification in one message, attacked: ok\n", me);
    return 0;
}
