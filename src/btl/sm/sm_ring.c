/*
 * The rings: writing messages into a peer's channel, reading our own
 * channels, and the queue of fragments waiting for credits.
 */
#include <string.h>

#include "btl/sm/sm.h"

/* Out of cached credits: reads the tail (completing the ring puts it
 * passed) and tries again. Kept out of line, and entered only by a tail
 * call, so that the common case pays nothing for what it does. */
static bool __attribute__((noinline)) reserve_slow(ferry_btl_endpoint_t *ep, size_t len,
                                                   unsigned char **slot_out, uint64_t *pos_out)
{
    const uint64_t ring = ep->mod->p.ring_size;
    uint64_t off = ep->head & (ring - 1);
    uint64_t size = sm_span(off, len);
    uint64_t need = off + size > ring ? ring - off + sm_span(0, len) + SM_ALIGN : size + SM_ALIGN;
    if (sm_ring_refresh_tail(ep) < 0 || ep->head + need - ep->cached_tail > ring)
        return false;
    return sm_ring_reserve_slow(ep, len, slot_out, pos_out);
}

bool sm_ring_reserve_slow(ferry_btl_endpoint_t *ep, size_t len, unsigned char **slot_out,
                          uint64_t *pos_out)
{
    const uint64_t ring = ep->mod->p.ring_size;
    uint64_t off = ep->head & (ring - 1);
    uint64_t size = sm_span(off, len);
    uint64_t skip = off + size > ring ? ring - off : 0;
    if (skip > 0)
        size = sm_span(0, len);
    /* One more slot than the message: the next header's place must be free,
     * because sm_ring_commit zeroes it. */
    uint64_t need = skip + size + SM_ALIGN;

    if (ep->head + need - ep->cached_tail > ring)
        return reserve_slow(ep, len, slot_out, pos_out);
    if (skip > 0) {
        /* The message goes to the ring's start; see sm_ring_commit. */
        if (!sm_ring_slot_is_hdr(ep->hdr_bits, 0)) {
            atomic_store_explicit(sm_ring_hdr_at(ep->out->ring, 0), 0, memory_order_relaxed);
            ep->hdr_bits[0] |= 1;
        }
        ep->hdr_bits[off / SM_ALIGN / 64] |= (uint64_t)1 << (off / SM_ALIGN % 64);
        atomic_store_explicit(sm_ring_hdr_at(ep->out->ring, off),
                              sm_hdr_pack((uint32_t)(skip - SM_HDR_SIZE), 0, SM_T_SKIP,
                                          sm_lap(ep->head, ring)),
                              memory_order_release);
        ep->head += skip;
        off = 0;
    }
    *slot_out = ep->out->ring + off + SM_HDR_SIZE;
    *pos_out = ep->head;
    ep->head += size;
    return true;
}

int sm_ring_refresh_tail(ferry_btl_endpoint_t *ep)
{
    uint64_t tail = atomic_load_explicit(&ep->out->tail, memory_order_acquire);
    /* The tail is the peer's word: it may never pass what we wrote, nor go
     * back. */
    if (tail > ep->head || tail < ep->cached_tail) {
        sm_ep_fail(ep->mod, ep, "its channel's tail is corrupt");
        return -1;
    }
    ep->cached_tail = tail;
    /* Ring puts it passed are read back now: their status words are in
     * space we may reuse as soon as we return. */
    return util_list_empty(&ep->ring_puts) && util_list_empty(&ep->iputs)
               ? 0
               : sm_rdma_puts_done(ep->mod, ep, tail);
}

static void publish_tail(ferry_btl_endpoint_t *ep)
{
    atomic_store_explicit(&ep->in->tail, ep->rpos, memory_order_release);
    ep->published_tail = ep->rpos;
}

/* What poll_other tells the loop in sm_poll_channel to do next. */
enum { POLL_NEXT, POLL_SKIPPED, POLL_STOP, POLL_FAILED };

/* Every message but an ordinary one and a put with notification (SM_T_DATA
 * and SM_T_PUTN, handled in the loop): out of line, so that the loop keeps
 * to the registers it needs. */
static int __attribute__((noinline)) poll_other(sm_module_t *mod, ferry_btl_endpoint_t *ep,
                                                uint8_t type, uint8_t tag, unsigned char *msg,
                                                uint32_t len, bool *publish_now)
{
    switch (type) {
    case SM_T_SKIP:
        return POLL_SKIPPED;
    case SM_T_PUT:
    case SM_T_GET_REQ:
    case SM_T_GET_RESP:
    case SM_T_AMO_REQ:
    case SM_T_AMO_ANSWER:
    case SM_T_ASSIST:
        if (!sm_rdma_handle(mod, ep, type, msg, len))
            return POLL_STOP; /* a get or atomic past the peer's budget waits where it is */
        /* A ring put completes at its initiator when our tail passes it. */
        *publish_now = *publish_now || type == SM_T_PUT;
        return POLL_NEXT;
    default:
        sm_ep_fail(mod, ep, "it sent a message of unknown type");
        return POLL_FAILED;
    }
}

/* Reads what has arrived from ep, at most a batch, handing each message to
 * its handler while it still sits in the ring. */
int sm_poll_channel(sm_module_t *mod, ferry_btl_endpoint_t *ep)
{
    const uint64_t ring = mod->p.ring_size;
    unsigned char *base = ep->in->ring;
    bool publish_now = false;
    int n = 0;

    while (n < 64 && ep->polled) {
        uint64_t off = ep->rpos & (ring - 1);
        if (ep->rpos - ep->rlap_start >= ring) {
            /* A new lap (or a position set from outside): once a lap. */
            ep->rlap_start = ep->rpos - off;
            ep->rlap = sm_lap(ep->rpos, ring);
        }
        uint64_t h = atomic_load_explicit(sm_ring_hdr_at(base, off), memory_order_acquire);
        if ((uint16_t)(h >> 48) != ep->rlap)
            break;
        /* Refusals of our untracked puts with notification, which the peer
         * counted before it wrote this: reported before this is handled. */
        if (ep->putn_cb != NULL)
            sm_putn_refusals(ep);
        uint32_t len = (uint32_t)h;
        uint8_t tag = (uint8_t)(h >> 32);
        uint8_t type = (uint8_t)(h >> 40);
        /* A peer's header is untrusted: the message must lie inside this lap. */
        if (len > ring - off - SM_HDR_SIZE) {
            sm_ep_fail(mod, ep, "it sent a message longer than the ring");
            return n;
        }
        unsigned char *msg = base + off + SM_HDR_SIZE;
        if (__builtin_expect(type == SM_T_DATA, 1)) {
            if (tag >= FERRY_BTL_TAG_BTL_MIN) {
                sm_ep_fail(mod, ep, "it sent a message on a reserved tag");
                return n;
            }
            ferry_btl_segment_t seg = {.addr = (uint64_t)(uintptr_t)msg, .len = len};
            ferry_btl_recv_desc_t rd = {
                .ep = ep, .peer = ep->rank, .tag = tag, .segs = &seg, .seg_cnt = 1};
            btl_base_deliver(&mod->super, &rd);
        } else if (type == SM_T_PUTN) {
            /* A put with notification: the other message a ping-pong waits
             * for, so not through poll_other's switch. */
            bool tracked = len >= sizeof(sm_putn_hdr_t) &&
                           !(((const sm_putn_hdr_t *)(const void *)msg)->flags & SM_PUTN_TELL);
            if (!sm_putn_handle(mod, ep, tag, msg, len))
                return n;
            /* A tracked one completes at its initiator when our tail passes
             * it. */
            publish_now = publish_now || tracked;
        } else {
            int next = poll_other(mod, ep, type, tag, msg, len, &publish_now);
            if (next == POLL_SKIPPED) {
                ep->rpos += ring - off;
                continue;
            }
            if (next == POLL_STOP)
                break;
            if (next == POLL_FAILED)
                return n;
        }
        if (!ep->polled)
            return n; /* a handler failed the endpoint */
        ep->rpos += sm_span(off, len);
        n++;
    }
    if (n > 0)
        ep->sends_unanswered = 0; /* not a stream: the peer answers */
    /* Credits go back in batches (the seed's sr_win), or at once when an
     * initiator waits on them. */
    if (ep->rpos - ep->published_tail >= ring / 8 || (publish_now && ep->rpos != ep->published_tail))
        publish_tail(ep);
    return n;
}

/* Completion of a fragment: callbacks run from progress only, so a
 * fragment with a callback waits in the completed list. */
void sm_complete(sm_module_t *mod, btl_frag_t *frag, int status)
{
    ferry_btl_desc_t *des = &frag->base;
    frag->status = status;
    if (des->cbfunc == NULL && frag->op == SM_OP_SEND) {
        des->flags &= ~(uint32_t)FERRY_BTL_DES_INFLIGHT;
        if (des->flags & FERRY_BTL_DES_OWNERSHIP)
            btl_frag_put(&mod->frags, frag);
        return;
    }
    util_list_append(&mod->completed, &frag->link);
}

void sm_mark_sending(sm_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (!ep->sending) {
        ep->sending = true;
        util_list_append(&mod->sending, &ep->sending_link);
    }
}

/* Writes queued fragments while credits last. Returns how many left. */
int sm_drain_queue(sm_module_t *mod, ferry_btl_endpoint_t *ep)
{
    int n = 0;
    util_list_item_t *it;
    while (ep->state == SM_EP_CONNECTED && (it = util_list_first(&ep->queue)) != NULL) {
        btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
        if (frag->op == SM_OP_SEND) {
            size_t len = frag->base.src[0].len;
            unsigned char *slot;
            uint64_t pos;
            if (!sm_ring_reserve(ep, len, &slot, &pos))
                break;
            memcpy(slot, ferry_btl_seg_ptr(&frag->base.src[0]), len);
            sm_ring_commit(ep, pos, (uint32_t)len, frag->tag, SM_T_DATA);
            util_list_remove(&ep->queue, it);
            sm_complete(mod, frag, FERRY_OK);
        } else if (!sm_rdma_push(mod, ep, frag)) {
            break;
        }
        n++;
    }
    return n;
}
