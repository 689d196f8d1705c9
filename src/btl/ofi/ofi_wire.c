/*
 * ofi's message format and the receive side of one message (ofi_wire.h).
 * No libfabric here: the module and the fuzz harness share this code.
 */
#include <stdlib.h>
#include <string.h>

#include <ferry/btl.h>

#include "btl/ofi/ofi_wire.h"

static const char *const verdict_names[OFI_WIRE_VERDICTS] = {
    [OFI_WIRE_OK] = "accepted",
    [OFI_WIRE_HELD] = "held",
    [OFI_WIRE_SHORT] = "shorter than its header",
    [OFI_WIRE_BAD_MAGIC] = "bad magic",
    [OFI_WIRE_BAD_TYPE] = "unknown type",
    [OFI_WIRE_BAD_TAG] = "bad tag",
    [OFI_WIRE_BAD_LENGTH] = "control message with a payload",
    [OFI_WIRE_BAD_RANK] = "claims a rank outside the job",
    [OFI_WIRE_UNKNOWN] = "from an address that is no rank of the job",
    [OFI_WIRE_SPOOFED] = "claims to be another rank than the one it comes from",
    [OFI_WIRE_NOT_PEER] = "from a rank no longer talked to",
    [OFI_WIRE_DUPLICATE] = "repeats a message already delivered",
    [OFI_WIRE_PAST_WINDOW] = "beyond the sender's window",
    [OFI_WIRE_BAD_ACK] = "acknowledges messages never sent",
    [OFI_WIRE_NO_MEMORY] = "out of memory holding it",
};

const char *ofi_wire_verdict_str(ofi_wire_verdict_t v)
{
    if ((unsigned)v >= OFI_WIRE_VERDICTS)
        return "?";
    return verdict_names[v];
}

bool ofi_wire_verdict_fails_peer(ofi_wire_verdict_t v)
{
    switch (v) {
    case OFI_WIRE_OK:
    case OFI_WIRE_HELD:
    case OFI_WIRE_UNKNOWN:  /* a stranger: no peer to fail */
    case OFI_WIRE_NOT_PEER: /* already failed or gone */
        return false;
    default:
        return true;
    }
}

void ofi_wire_peer_init(ofi_wire_peer_t *p)
{
    memset(p, 0, sizeof(*p));
    util_list_init(&p->held);
}

void ofi_wire_peer_clear(ofi_wire_peer_t *p)
{
    util_list_item_t *it;
    while ((it = util_list_pop_front(&p->held)) != NULL)
        free(UTIL_CONTAINER_OF(it, ofi_held_t, link));
    p->nheld = 0;
    p->held_bytes = 0;
}

ofi_wire_verdict_t ofi_wire_parse(const unsigned char *buf, size_t len, uint32_t nranks,
                                  ofi_hdr_t *h_out)
{
    ofi_hdr_t h;
    if (len < sizeof(h))
        return OFI_WIRE_SHORT;
    memcpy(&h, buf, sizeof(h));
    if (h.magic != OFI_HDR_MAGIC)
        return OFI_WIRE_BAD_MAGIC;
    if (h.type < OFI_T_DATA || h.type > OFI_T_MAX)
        return OFI_WIRE_BAD_TYPE;
    if (h.type == OFI_T_DATA) {
        if (h.tag >= FERRY_BTL_TAG_BTL_MIN)
            return OFI_WIRE_BAD_TAG;
    } else {
        if (h.tag != 0)
            return OFI_WIRE_BAD_TAG;
        if (!ofi_wire_has_payload(h.type) && len != sizeof(h))
            return OFI_WIRE_BAD_LENGTH;
    }
    if (h.src >= nranks)
        return OFI_WIRE_BAD_RANK;
    *h_out = h;
    return OFI_WIRE_OK;
}

/* Takes the ack a message carries: a newer one opens the window, an older
 * one (a message that completed late) is stale, one beyond what was sent is
 * a lie. */
static ofi_wire_verdict_t take_ack(ofi_wire_peer_t *p, uint32_t ack)
{
    uint32_t ahead = ack - p->tx_acked;
    if ((int32_t)ahead <= 0)
        return OFI_WIRE_OK;
    if (ahead > (uint32_t)(p->tx_next - p->tx_acked))
        return OFI_WIRE_BAD_ACK;
    p->tx_acked = ack;
    return OFI_WIRE_OK;
}

static void note_known(ofi_wire_peer_t *p, uint32_t upto)
{
    if ((int32_t)(upto - p->rx_known) > 0)
        p->rx_known = upto;
}

/* Copies a message that overtook its predecessors into the held list, in
 * seq order. The caller has checked that seq is ahead of rx_next and within
 * the window, so it is not held already unless repeated. */
static ofi_wire_verdict_t hold(ofi_wire_peer_t *p, const ofi_hdr_t *h, const unsigned char *buf,
                               size_t len)
{
    util_list_item_t *it = util_list_first(&p->held);
    while (it != NULL) {
        ofi_held_t *o = UTIL_CONTAINER_OF(it, ofi_held_t, link);
        if (o->seq == h->seq)
            return OFI_WIRE_DUPLICATE;
        if ((int32_t)(o->seq - h->seq) > 0)
            break;
        it = util_list_next(&p->held, it);
    }
    ofi_held_t *m = malloc(sizeof(*m) + len);
    if (m == NULL)
        return OFI_WIRE_NO_MEMORY;
    m->seq = h->seq;
    m->len = len;
    memcpy(m->data, buf, len);
    if (it == NULL)
        util_list_append(&p->held, &m->link);
    else
        util_list_insert_after(&p->held, it->prev, &m->link);
    p->nheld++;
    p->held_bytes += len;
    note_known(p, h->seq + 1);
    return OFI_WIRE_HELD;
}

/* Delivers the held messages that are next in order. Each leaves the list
 * before its delivery, so that a delivery that fails the peer (and clears
 * the list) leaves nothing dangling. */
static void deliver_held(int rank, const ofi_wire_ops_t *ops, void *arg)
{
    for (;;) {
        ofi_wire_peer_t *p = ops->peer(arg, rank);
        if (p == NULL)
            return;
        util_list_item_t *it = util_list_first(&p->held);
        if (it == NULL)
            return;
        ofi_held_t *m = UTIL_CONTAINER_OF(it, ofi_held_t, link);
        if (m->seq != p->rx_next)
            return;
        util_list_remove(&p->held, it);
        p->nheld--;
        p->held_bytes -= m->len;
        p->rx_next++;
        ofi_hdr_t mh;
        memcpy(&mh, m->data, sizeof(mh));
        ops->deliver(arg, rank, &mh, m->data + sizeof(mh), m->len - sizeof(mh));
        free(m);
    }
}

ofi_wire_verdict_t ofi_wire_receive(const unsigned char *buf, size_t len, int fabric_rank,
                                    uint32_t nranks, uint32_t window, const ofi_wire_ops_t *ops,
                                    void *arg, ofi_hdr_t *h_out)
{
    ofi_hdr_t h;
    memset(h_out, 0, sizeof(*h_out));
    ofi_wire_verdict_t v = ofi_wire_parse(buf, len, nranks, &h);
    if (v != OFI_WIRE_OK)
        return v;
    *h_out = h;
    /* Who sent it is the fabric's word; the header may only agree. */
    if (fabric_rank < 0 || (uint32_t)fabric_rank >= nranks)
        return OFI_WIRE_UNKNOWN;
    if (h.src != (uint32_t)fabric_rank)
        return OFI_WIRE_SPOOFED;
    ofi_wire_peer_t *p = ops->peer(arg, fabric_rank);
    if (p == NULL)
        return OFI_WIRE_NOT_PEER;
    bool ordered = ofi_wire_ordered(h.type);
    if (ordered) {
        uint32_t ahead = h.seq - p->rx_next;
        if ((int32_t)ahead < 0)
            return OFI_WIRE_DUPLICATE;
        if (ahead >= window)
            return OFI_WIRE_PAST_WINDOW;
    } else if (h.type == OFI_T_PROBE) {
        /* What it has sent: not less than what we delivered, and within
         * its window. */
        uint32_t ahead = h.seq - p->rx_next;
        if ((int32_t)ahead < 0 || ahead > window)
            return OFI_WIRE_PAST_WINDOW;
    }
    if ((v = take_ack(p, h.ack)) != OFI_WIRE_OK)
        return v;
    if (h.type == OFI_T_PROBE)
        note_known(p, h.seq);
    ops->heard(arg, fabric_rank, &h);
    if (!ordered) {
        ops->control(arg, fabric_rank, &h);
        return OFI_WIRE_OK;
    }
    if (ops->peer(arg, fabric_rank) != p)
        return OFI_WIRE_NOT_PEER;
    if (h.seq != p->rx_next)
        return hold(p, &h, buf, len);
    p->rx_next++;
    note_known(p, p->rx_next);
    ops->deliver(arg, fabric_rank, &h, buf + sizeof(h), len - sizeof(h));
    deliver_held(fabric_rank, ops, arg);
    return OFI_WIRE_OK;
}
