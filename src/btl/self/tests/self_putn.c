/*
 * self's put with notification (put_notify_inline) where the contract
 * suite does not look: the suite checks refusals only towards another
 * process, and self reaches none. One process:
 *   - order: a send, a put with notification and another send are
 *     handled in that order, the data in place when its handler runs, the
 *     callback never inside the call;
 *   - tracked refusals (read-only memory, across a registration's end, a
 *     changed key, a registration released between the call and progress)
 *     complete with FERRY_ERR_ACCESS, write nothing, and run the handler;
 *   - an untracked refusal reaches its callback before a message sent
 *     after it is handled, and before flush returns; an untracked put
 *     that lands calls nothing;
 *   - del_procs completes a queued tracked one with FERRY_ERR_UNREACH and
 *     an untracked one silently;
 *   - bad arguments are FERRY_ERR_INVALID, too large FERRY_ERR_NOT_SUPPORTED.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/btl.h>
#include <ferry/ferry.h>

#include "btl/ctx.h"
#include "unit/check.h"

#define TAG 0
#define SLOT 64

/* What happened, in order: 'm' + text for a message handled, 'c' for a
 * callback with its status. */
typedef struct event {
    char kind;
    char text[15];
    int status;
    uint8_t first; /* a message: the first byte of O when it was handled */
} event_t;

typedef struct state {
    ferry_btl_module_t *btl;
    ferry_btl_endpoint_t *ep;
    unsigned char *o;
    event_t ev[64];
    int nev;
    bool in_call;
} state_t;

static state_t g;

static void on_msg(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, void *cbdata)
{
    (void)btl, (void)cbdata;
    CHECK(g.nev < 64 && rd->seg_cnt == 1 && rd->segs[0].len < sizeof(g.ev[0].text));
    event_t *e = &g.ev[g.nev++];
    e->kind = 'm';
    memcpy(e->text, ferry_btl_seg_ptr(&rd->segs[0]), rd->segs[0].len);
    e->text[rd->segs[0].len] = '\0';
    e->first = g.o[0];
}

static void on_done(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                    ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status)
{
    (void)btl, (void)lreg;
    CHECK(!g.in_call && ep == g.ep && cbctx == &g && g.nev < 64);
    event_t *e = &g.ev[g.nev++];
    e->kind = 'c';
    e->status = status;
    snprintf(e->text, sizeof(e->text), "%s", cbdata != NULL ? (const char *)cbdata : "");
    /* An untracked one's refusal says nothing of its buffer or data. */
    if (cbdata == NULL)
        CHECK(local == NULL && status == FERRY_ERR_ACCESS);
}

static int putn(const void *local, size_t size, uint64_t raddr, const uint8_t *key,
                const char *note, bool tracked, const char *name)
{
    g.in_call = true;
    int rc = g.btl->ops->put_notify_inline(g.btl, g.ep, local, size, raddr, key, TAG, note,
                                           strlen(note), tracked ? 0 : FERRY_BTL_PUTN_UNTRACKED,
                                           on_done, &g, tracked ? (void *)name : NULL);
    g.in_call = false;
    return rc;
}

static void send_text(const char *text)
{
    CHECK(g.btl->ops->sendi(g.btl, g.ep, NULL, 0, text, strlen(text), TAG) == FERRY_OK);
}

/* Progress until n events are in. */
static void wait_events(int n)
{
    for (int i = 0; i < 1000000 && g.nev < n; i++)
        g.btl->ops->progress(g.btl);
    CHECK(g.nev == n);
}

static bool is_msg(int i, const char *text)
{
    return g.ev[i].kind == 'm' && strcmp(g.ev[i].text, text) == 0;
}

static bool is_cb(int i, const char *name, int status)
{
    return g.ev[i].kind == 'c' && strcmp(g.ev[i].text, name) == 0 && g.ev[i].status == status;
}

int main(void)
{
    ferry_init_params_t params = {FERRY_THREAD_SINGLE, "self"};
    ferry_ctx_t *ctx;
    CHECK(ferry_init(&params, &ctx) == FERRY_OK);
    g.btl = btl_ctx_find_module(ctx, "self");
    CHECK(g.btl != NULL && g.btl->ops->put_notify_inline != NULL);
    ferry_btl_proc_t me = {.rank = ferry_rank(ctx), .same_host = true};
    CHECK(g.btl->ops->add_procs(g.btl, 1, &me, &g.ep, NULL) == FERRY_OK && g.ep != NULL);
    CHECK(g.btl->ops->register_am(g.btl, TAG, on_msg, NULL) == FERRY_OK);

    static unsigned char o[SLOT], r[SLOT], o2[SLOT];
    g.o = o;
    memset(r, 0x77, sizeof(r));
    ferry_btl_reg_t *oreg, *rreg, *o2reg;
    CHECK(g.btl->ops->register_mem(g.btl, NULL, o, sizeof(o), FERRY_ACCESS_REMOTE_WRITE,
                                   &oreg) == FERRY_OK);
    CHECK(g.btl->ops->register_mem(g.btl, NULL, r, sizeof(r), FERRY_ACCESS_REMOTE_READ,
                                   &rreg) == FERRY_OK);
    CHECK(g.btl->ops->register_mem(g.btl, NULL, o2, sizeof(o2), FERRY_ACCESS_REMOTE_WRITE,
                                   &o2reg) == FERRY_OK);
    uint64_t obase = (uint64_t)(uintptr_t)o, rbase = (uint64_t)(uintptr_t)r;
    unsigned char data[16];
    memset(data, 0x42, sizeof(data));

    /* Order: nothing runs inside the calls; the put's data is in place
     * when its handler runs, between the two sends. */
    send_text("A");
    CHECK(putn(data, 8, obase, oreg->key, "B", true, "b") == FERRY_OK);
    memset(data, 0, sizeof(data)); /* the bytes were taken in the call */
    send_text("C");
    CHECK(g.nev == 0 && o[0] == 0);
    wait_events(4);
    CHECK(is_msg(0, "A") && g.ev[0].first == 0);
    CHECK(is_cb(1, "b", FERRY_OK) && is_msg(2, "B") && g.ev[2].first == 0x42);
    CHECK(is_msg(3, "C"));
    g.nev = 0;

    /* Tracked refusals: the handler runs all the same, nothing written. */
    memset(data, 0x24, sizeof(data));
    CHECK(putn(data, 8, rbase, rreg->key, "R", true, "r") == FERRY_OK);
    CHECK(putn(data, 16, obase + SLOT - 8, oreg->key, "E", true, "e") == FERRY_OK);
    uint8_t bent[FERRY_BTL_KEY_MAX];
    memcpy(bent, oreg->key, sizeof(bent));
    bent[9] ^= 1; /* inside the random part */
    CHECK(putn(data, 8, obase + 16, bent, "K", true, "k") == FERRY_OK);
    /* Released between the call and its turn: refused then. */
    CHECK(putn(data, 8, (uint64_t)(uintptr_t)o2, o2reg->key, "G", true, "g") == FERRY_OK);
    CHECK(g.btl->ops->deregister_mem(g.btl, o2reg) == FERRY_OK);
    wait_events(8);
    CHECK(is_cb(0, "r", FERRY_ERR_ACCESS) && is_msg(1, "R"));
    CHECK(is_cb(2, "e", FERRY_ERR_ACCESS) && is_msg(3, "E"));
    CHECK(is_cb(4, "k", FERRY_ERR_ACCESS) && is_msg(5, "K"));
    CHECK(is_cb(6, "g", FERRY_ERR_ACCESS) && is_msg(7, "G"));
    for (size_t i = 0; i < SLOT; i++)
        CHECK(r[i] == 0x77 && o2[i] == 0 && (i < 8 || o[i] == 0));
    g.nev = 0;

    /* Untracked: one that lands calls nothing; a refusal is told before
     * the message sent after it is handled. */
    CHECK(putn(data, 4, obase + 32, oreg->key, "U", false, NULL) == FERRY_OK);
    CHECK(putn(data, 4, rbase, rreg->key, "V", false, NULL) == FERRY_OK);
    send_text("W");
    wait_events(4);
    CHECK(is_msg(0, "U") && o[32] == 0x24);
    CHECK(g.ev[1].kind == 'c' && g.ev[1].status == FERRY_ERR_ACCESS && is_msg(2, "V"));
    CHECK(is_msg(3, "W"));
    g.nev = 0;
    /* ... and before flush returns, which runs it. */
    CHECK(putn(data, 4, rbase, rreg->key, "X", false, NULL) == FERRY_OK);
    CHECK(g.btl->ops->flush(g.btl, g.ep) == FERRY_OK);
    CHECK(g.nev == 2 && g.ev[0].kind == 'c' && g.ev[0].status == FERRY_ERR_ACCESS &&
          is_msg(1, "X"));
    g.nev = 0;

    /* Arguments. */
    CHECK(g.btl->ops->put_notify_inline(g.btl, g.ep, data, 8, obase, oreg->key,
                                        FERRY_BTL_TAG_BTL_MIN, "n", 1, 0, on_done, &g,
                                        NULL) == FERRY_ERR_INVALID);
    CHECK(g.btl->ops->put_notify_inline(g.btl, g.ep, data, 8, obase, oreg->key, TAG, NULL, 1,
                                        0, on_done, &g, NULL) == FERRY_ERR_INVALID);
    CHECK(g.btl->ops->put_notify_inline(g.btl, g.ep, NULL, 8, obase, oreg->key, TAG, "n", 1,
                                        0, on_done, &g, NULL) == FERRY_ERR_INVALID);
    CHECK(g.btl->ops->put_notify_inline(g.btl, g.ep, data, 8, obase, oreg->key, TAG, "n", 1,
                                        0, NULL, &g, NULL) == FERRY_ERR_INVALID);
    CHECK(g.btl->ops->put_notify_inline(g.btl, g.ep, data, 8, obase, oreg->key, TAG, "n", 1,
                                        0x80, on_done, &g, NULL) == FERRY_ERR_INVALID);
    CHECK(g.btl->ops->put_notify_inline(g.btl, NULL, data, 8, obase, oreg->key, TAG, "n", 1, 0,
                                        on_done, &g, NULL) == FERRY_ERR_INVALID);
    unsigned char *big = calloc(1, g.btl->attr.max_send_size);
    CHECK(big != NULL);
    CHECK(g.btl->ops->put_notify_inline(g.btl, g.ep, big, g.btl->attr.max_send_size, obase,
                                        oreg->key, TAG, "n", 1, 0, on_done, &g,
                                        NULL) == FERRY_ERR_NOT_SUPPORTED);
    free(big);
    CHECK(g.nev == 0);

    /* del_procs: a queued tracked one completes with FERRY_ERR_UNREACH,
     * an untracked one (even one that would be refused) silently, and no
     * handler runs. */
    CHECK(putn(data, 8, obase, oreg->key, "Y", true, "y") == FERRY_OK);
    CHECK(putn(data, 8, rbase, rreg->key, "Z", false, NULL) == FERRY_OK);
    ferry_btl_endpoint_t *ep = g.ep;
    CHECK(g.btl->ops->del_procs(g.btl, 1, &ep) == FERRY_OK);
    CHECK(g.nev == 1 && g.ev[0].kind == 'c' && g.ev[0].status == FERRY_ERR_UNREACH);
    for (int i = 0; i < 100; i++)
        g.btl->ops->progress(g.btl);
    CHECK(g.nev == 1);

    CHECK(g.btl->ops->deregister_mem(g.btl, oreg) == FERRY_OK);
    CHECK(g.btl->ops->deregister_mem(g.btl, rreg) == FERRY_OK);
    CHECK(g.btl->ops->register_am(g.btl, TAG, NULL, NULL) == FERRY_OK);
    /* The runtime's endpoint to this process was the one deleted: a new
     * one takes its place, so that finalize finds a live one. */
    ferry_btl_endpoint_t *fresh;
    CHECK(g.btl->ops->add_procs(g.btl, 1, &me, &fresh, NULL) == FERRY_OK && fresh != NULL);
    btl_peer_t *peer = &ctx->peers[me.rank];
    for (int m = 0; m < ctx->n_modules; m++)
        if (peer->eps != NULL && peer->eps[m] == ep)
            peer->eps[m] = fresh;
    if (peer->ep == ep)
        peer->ep = fresh;
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    printf("self put with notification: all checks passed\n");
    return 0;
}
