/*
 * The replay's count is asked for as it falls due, not when the most a
 * sender may keep is reached (src/bml): two ranks with several rails (two
 * tcp links), rank 0 sends 64 KiB messages without calling ferry_progress
 * until the transport first refuses one. By then it has kept megabytes for
 * the replay; the count for them must already be asked for, right behind
 * the message that made it due (every BML_ASK_EVERY messages or
 * BML_ASK_BYTES kept). A sender that asked only from progress would have
 * asked for none: then a stream stalls whenever it reaches the cap, until
 * the peer has handled everything kept (twice the time at 64 MiB in
 * ferry-bench am-bw over two links, and fresh pages for each copy).
 * Then every message must arrive, once, in order. Exits 77 with fewer than
 * two rails.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <ferry/ferry.h>

#include "bml/bml.h"
#include "btl/ctx.h"

#include "../unit/check.h"

#define TAG_DATA 1
#define TAG_DONE 2
#define LEN ((size_t)64 << 10)
#define MAX_MSGS 4000

static uint32_t g_next;  /* rank 1: the number of the next message expected */
static bool g_bad;
static bool g_done;
static uint32_t g_total; /* rank 1: what rank 0 says it sent */

static void on_data(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    uint32_t n;
    memcpy(&n, data, sizeof(n));
    const unsigned char *b = data;
    if (len != LEN || n != g_next || b[len - 1] != (unsigned char)n)
        g_bad = true;
    g_next++;
}

static void on_done(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    CHECK(len == sizeof(g_total));
    memcpy(&g_total, data, sizeof(g_total));
    g_done = true;
}

int main(void)
{
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    int rank = ferry_rank(ctx);
    if (ferry_size(ctx) != 2) {
        printf("SKIP: two ranks wanted\n");
        ferry_finalize(&ctx);
        return 77;
    }
    int peer = 1 - rank;
    if (ctx->bml == NULL || !bml_keeping(ctx, peer)) {
        printf("SKIP: rank %d has one rail to rank %d (nothing kept for a replay)\n", rank, peer);
        ferry_finalize(&ctx);
        return 77;
    }
    CHECK(ferry_am_register(ctx, TAG_DATA, on_data, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_DONE, on_done, NULL) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (rank == 0) {
        static unsigned char buf[LEN];
        const bml_peer_t *bp = &ctx->bml->peers[peer];
        uint32_t n = 0;
        int rc = FERRY_OK;
        /* No progress until the first refusal. */
        while (n < MAX_MSGS) {
            memcpy(buf, &n, sizeof(n));
            buf[LEN - 1] = (unsigned char)n;
            if ((rc = ferry_am_send(ctx, peer, TAG_DATA, buf, LEN)) != FERRY_OK)
                break;
            n++;
        }
        CHECK(rc == FERRY_OK || rc == FERRY_ERR_NO_RESOURCE);
        uint64_t sent = bp->tx_seq, asked = bp->asked_at;
        uint64_t deferred = ctx->bml->asks_deferred;
        printf("rank 0: %u messages of 64 KiB before the first refusal; %llu kept, count "
               "last asked at %llu (%llu asks left to progress)\n",
               n, (unsigned long long)(sent - bp->tx_base), (unsigned long long)asked,
               (unsigned long long)deferred);
        /* At least one count fell due (else the check means nothing). */
        CHECK(n >= BML_ASK_BYTES / LEN);
        /* Asked right behind its message, unless the transport refused the
         * ask itself (then progress asks); never left unasked. */
        CHECK(asked > 0 || deferred > 0);
        if (deferred == 0)
            CHECK(sent - asked < BML_ASK_EVERY && (sent - asked) * LEN < BML_ASK_BYTES);
        /* The rest, with progress, then the total. */
        while (n < MAX_MSGS) {
            memcpy(buf, &n, sizeof(n));
            buf[LEN - 1] = (unsigned char)n;
            rc = ferry_am_send(ctx, peer, TAG_DATA, buf, LEN);
            if (rc == FERRY_ERR_NO_RESOURCE) {
                CHECK(ferry_progress(ctx) >= 0);
                continue;
            }
            CHECK(rc == FERRY_OK);
            n++;
        }
        while ((rc = ferry_am_send(ctx, peer, TAG_DONE, &n, sizeof(n))) == FERRY_ERR_NO_RESOURCE)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(rc == FERRY_OK);
    } else {
        while (!g_done)
            CHECK(ferry_progress(ctx) >= 0);
        printf("rank 1: %u of %u messages, in order: %s\n", g_next, g_total,
               g_bad ? "no" : "yes");
        CHECK(!g_bad && g_next == g_total && g_total == MAX_MSGS);
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    printf("test_bml_ask: ok rank %d\n", rank);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    return 0;
}
