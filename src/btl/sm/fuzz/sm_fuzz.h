/*
 * What sm's fuzz harnesses share: one process whose sm endpoint to itself
 * is the peer (its channel to itself is a ring like any other, in its own
 * segment), a small ring, a writer that puts headers and messages where a
 * sender would (or, when asked, where it would not), and a reader for what
 * sm writes back. Header-only: each harness is one program of one file.
 *
 * The fuzzer's bytes are read with fuzz.h's fuzz_in_t. smf_get makes the
 * process and its endpoint once (aborting if sm cannot open). smf_reset
 * empties the ring and starts both ends at a position (any lap);
 * smf_settle fails what is pending and runs the completions. smf_write puts
 * a message where a sender would (a SKIP first when it does not fit before
 * the lap's end, the next header's place zeroed), with hdr_len as the
 * header's length and lap_off added to its lap, and returns its payload in
 * the ring (NULL when the ring has no room). smf_hand_over makes sm's own
 * writes go after the writer's; smf_read reads what sm wrote after *rpos.
 */
#ifndef SM_FUZZ_H
#define SM_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "btl/sm/sm.h"
#include "fuzz.h"
#include "btl/ctx.h"

/* The ring the harnesses use (FERRY_SM_RING_SIZE) and the largest message. */
#define SMF_RING 16384u
#define SMF_MAX_SEND 4096u

typedef struct smf {
    ferry_ctx_t *ctx;
    sm_module_t *mod;
    ferry_btl_endpoint_t *ep;
    uint64_t wpos; /* where the writer puts the next message */
} smf_t;

static inline void smf_on_am(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd,
                             void *cbdata)
{
    /* Touch every byte, as a handler would. */
    volatile unsigned char sum = 0;
    const unsigned char *p = ferry_btl_seg_ptr(&rd->segs[0]);
    for (size_t i = 0; i < rd->segs[0].len; i++)
        sum ^= p[i];
    (void)sum;
}

static inline void smf_on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg,
                                void *arg)
{
}

/* One per harness program. */
static smf_t smf_the;

/* The segment goes with the process (a crash leaves it to the next ferry
 * process's sweep). */
static inline void smf_finish(void)
{
    if (smf_the.ctx != NULL) {
        sm_rdma_fail(smf_the.mod, smf_the.ep, FERRY_ERR_CANCELED);
        ferry_finalize(&smf_the.ctx);
        smf_the.ctx = NULL;
    }
}

static inline void smf_reset(smf_t *f, uint64_t start)
{
    ferry_btl_endpoint_t *ep = f->ep;
    memset(ep->out->ring, 0, SMF_RING);
    memset(ep->hdr_bits, 0xff, (SMF_RING / SM_ALIGN + 63) / 64 * sizeof(uint64_t));
    start &= ~(uint64_t)(SM_ALIGN - 1);
    atomic_store(&ep->out->tail, start);
    ep->head = ep->cached_tail = ep->rpos = ep->published_tail = start;
    ep->put_refused = false;
    ep->state = SM_EP_CONNECTED;
    if (!ep->polled)
        sm_poll_add(f->mod, ep);
    f->wpos = start;
}

static inline void smf_settle(smf_t *f)
{
    sm_rdma_fail(f->mod, f->ep, FERRY_ERR_CANCELED);
    smf_reset(f, 0);
    f->mod->super.ops->progress(&f->mod->super);
}

static inline smf_t *smf_get(void)
{
    smf_t *f = &smf_the;
    if (f->ctx != NULL)
        return f;
    char ring[32], send[32];
    snprintf(ring, sizeof(ring), "%u", SMF_RING);
    snprintf(send, sizeof(send), "%u", SMF_MAX_SEND);
    setenv("FERRY_SM_RING_SIZE", ring, 1);
    setenv("FERRY_SM_MAX_SEND_SIZE", send, 1);
    setenv("FERRY_SM_EAGER_LIMIT", send, 1);
    setenv("FERRY_SM_GET_SLOTS", "4", 1);
    setenv("FERRY_LOG_LEVEL", "error", 0);
    ferry_init_params_t params = {.thread_level = FERRY_THREAD_SINGLE, .transports = "sm"};
    if (ferry_init(&params, &f->ctx) != FERRY_OK) {
        fprintf(stderr, "sm fuzz: ferry_init failed\n");
        abort();
    }
    ferry_btl_module_t *btl = btl_ctx_find_module(f->ctx, "sm");
    if (btl == NULL) {
        fprintf(stderr, "sm fuzz: no sm module\n");
        abort();
    }
    f->mod = (sm_module_t *)btl;
    f->ep = f->mod->eps[0];
    if (f->ep == NULL || sm_ep_connect(f->mod, f->ep) != FERRY_OK) {
        fprintf(stderr, "sm fuzz: no sm endpoint to ourselves\n");
        abort();
    }
    ferry_set_error_cb(f->ctx, smf_on_error, NULL);
    for (int tag = 0; tag < FERRY_BTL_TAG_BTL_MIN; tag++)
        btl->ops->register_am(btl, (uint8_t)tag, smf_on_am, NULL);
    smf_reset(f, 0);
    atexit(smf_finish);
    return f;
}

static inline void smf_set_bit(uint64_t *bits, uint64_t slot, bool on)
{
    if (on)
        bits[slot / 64] |= (uint64_t)1 << (slot % 64);
    else
        bits[slot / 64] &= ~((uint64_t)1 << (slot % 64));
}

static inline unsigned char *smf_write(smf_t *f, uint8_t type, uint8_t tag, const void *payload,
                                       uint32_t len, uint32_t hdr_len, uint16_t lap_off)
{
    ferry_btl_endpoint_t *ep = f->ep;
    unsigned char *ring = ep->out->ring;
    uint64_t off = f->wpos & (SMF_RING - 1);
    uint64_t size = sm_span(off, len);
    uint64_t skip = off + size > SMF_RING ? SMF_RING - off : 0;
    if (skip > 0)
        size = sm_span(0, len);
    if (size > SMF_RING / 2 || f->wpos + skip + size + SM_ALIGN - ep->rpos > SMF_RING)
        return NULL;
    if (skip > 0) {
        atomic_store((_Atomic uint64_t *)(void *)(ring + off),
                     sm_hdr_pack((uint32_t)(skip - SM_HDR_SIZE), 0, SM_T_SKIP,
                                 sm_lap(f->wpos, SMF_RING)));
        smf_set_bit(ep->hdr_bits, off / SM_ALIGN, true);
        f->wpos += skip;
        off = 0;
    }
    memcpy(ring + off + SM_HDR_SIZE, payload, len);
    uint64_t first = off / SM_ALIGN, end = first + size / SM_ALIGN;
    for (uint64_t s = first + 1; s < end; s++)
        smf_set_bit(ep->hdr_bits, s, false);
    smf_set_bit(ep->hdr_bits, first, true);
    uint64_t next = end % (SMF_RING / SM_ALIGN);
    atomic_store((_Atomic uint64_t *)(void *)(ring + next * SM_ALIGN), 0);
    smf_set_bit(ep->hdr_bits, next, true);
    atomic_store((_Atomic uint64_t *)(void *)(ring + off),
                 sm_hdr_pack(hdr_len, tag, type, (uint16_t)(sm_lap(f->wpos, SMF_RING) + lap_off)));
    f->wpos += size;
    return ring + off + SM_HDR_SIZE;
}

static inline void smf_hand_over(smf_t *f)
{
    if (f->ep->head < f->wpos)
        f->ep->head = f->wpos;
}

static inline bool smf_read(smf_t *f, uint64_t *rpos, uint8_t *type, const unsigned char **msg,
                            uint32_t *len)
{
    ferry_btl_endpoint_t *ep = f->ep;
    for (;;) {
        if (*rpos >= ep->head)
            return false;
        uint64_t off = *rpos & (SMF_RING - 1);
        uint64_t h = atomic_load((_Atomic uint64_t *)(void *)(ep->out->ring + off));
        if ((uint16_t)(h >> 48) != sm_lap(*rpos, SMF_RING))
            return false;
        uint8_t t = (uint8_t)(h >> 40);
        uint32_t n = (uint32_t)h;
        if (t == SM_T_SKIP) {
            *rpos += SMF_RING - off;
            continue;
        }
        if (n > SMF_RING - off - SM_HDR_SIZE)
            return false;
        *type = t;
        *msg = ep->out->ring + off + SM_HDR_SIZE;
        *len = n;
        *rpos += sm_span(off, n);
        return true;
    }
}

#endif /* SM_FUZZ_H */
