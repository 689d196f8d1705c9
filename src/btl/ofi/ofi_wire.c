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
    if (ofi_wire_tagged(h.type)) {
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

/* ---- puts with notification ---- */

void ofi_putn_peer_init(ofi_putn_peer_t *p)
{
    memset(p, 0, sizeof(*p));
    util_list_init(&p->inflight);
}

void ofi_putn_peer_fail(ofi_putn_peer_t *p, int status, util_list_t *done, bool drop_owed)
{
    util_list_item_t *it;
    if ((it = util_list_first(&p->inflight)) != NULL) {
        if (p->forgot_next == 0)
            p->forgot_next = UTIL_CONTAINER_OF(it, ofi_putn_req_t, link)->cookie;
        p->forgot_last = p->last_cookie;
    }
    while ((it = util_list_pop_front(&p->inflight)) != NULL) {
        UTIL_CONTAINER_OF(it, ofi_putn_req_t, link)->status = status;
        util_list_append(done, it);
    }
    p->ninflight = 0;
    if (!drop_owed)
        return;
    free(p->owed);
    p->owed = NULL;
    p->owed_head = p->nowed = p->owed_cap = 0;
    p->refusal_owed = false;
    free(p->held);
    p->held = NULL;
    p->nheld = p->held_head = 0;
    p->landed = p->refused = 0;
}

size_t ofi_putn_expire(ofi_putn_peer_t *p, uint64_t now, util_list_t *done)
{
    size_t n = 0;
    util_list_item_t *it;
    while (p->ninflight > 0 && (it = util_list_first(&p->inflight)) != NULL) {
        ofi_putn_req_t *req = UTIL_CONTAINER_OF(it, ofi_putn_req_t, link);
        if (req->deadline_ns > now)
            break;
        /* Cookies are consecutive: the oldest in flight follows the last
         * forgotten one, so those forgotten stay one range. */
        if (p->forgot_next == 0)
            p->forgot_next = req->cookie;
        p->forgot_last = req->cookie;
        util_list_remove(&p->inflight, it);
        p->ninflight--;
        req->status = FERRY_ERR_TIMEOUT;
        util_list_append(done, it);
        n++;
    }
    return n;
}

const char *ofi_putn_parse(const unsigned char *body, size_t len, ofi_putn_body_t *b_out,
                           const unsigned char **payload_out, const unsigned char **data_out)
{
    ofi_putn_body_t b;
    if (len < sizeof(b))
        return "shorter than its body";
    memcpy(&b, body, sizeof(b));
    if ((b.flags & ~(uint32_t)(OFI_PUTN_TRACKED | OFI_PUTN_SPLIT)) != 0)
        return "unknown flags";
    bool split = (b.flags & OFI_PUTN_SPLIT) != 0;
    if (!split && b.split != 0)
        return "a reserved field set";
    if (((b.flags & OFI_PUTN_TRACKED) != 0) != (b.cookie != 0))
        return "a cookie that disagrees with its flags";
    if (split) {
        /* The data comes by the write: the message is the notification. */
        if (!(b.flags & OFI_PUTN_TRACKED) || b.size == 0)
            return "a split put untracked or of no bytes";
        if (b.plen > OFI_PUTN_SPLIT_PAYLOAD || b.plen != len - sizeof(b))
            return "a split put's notification of the wrong length";
        *b_out = b;
        *payload_out = body + sizeof(b);
        *data_out = NULL;
        return NULL;
    }
    /* In 64 bits, so that no sum of two 32-bit lengths wraps. */
    if ((uint64_t)b.plen + b.size != (uint64_t)(len - sizeof(b)))
        return "lengths that do not add up to the message";
    *b_out = b;
    *payload_out = body + sizeof(b);
    *data_out = body + sizeof(b) + b.plen;
    return NULL;
}

const char *ofi_putn_answer_parse(const unsigned char *body, size_t len, ofi_putn_answer_t *a_out)
{
    ofi_putn_answer_t a;
    if (len != sizeof(a))
        return "an answer of the wrong length";
    memcpy(&a, body, sizeof(a));
    if (a.status != FERRY_OK && a.status != FERRY_ERR_ACCESS)
        return "an answer with an unknown status";
    if (a.cookie == 0 && a.status != FERRY_ERR_ACCESS)
        return "a refusal that refuses nothing";
    *a_out = a;
    return NULL;
}

/* A tracked one's answer, then its handler, unless answering failed rank:
 * whatever the handler sends follows the answer. */
static bool putn_finish(const ofi_putn_peer_t *p, int rank, uint64_t cookie, int status,
                        uint8_t tag, const unsigned char *payload, size_t plen,
                        const ofi_putn_ops_t *ops, void *arg)
{
    const ofi_putn_answer_t a = {.cookie = cookie, .status = status, .splits = p->split_base};
    if (!ops->answer(arg, rank, &a))
        return false;
    ops->notify(arg, rank, tag, payload, plen);
    return true;
}

/* The oldest split put not run is done with: the marks move on to the
 * next. Returns its status: FERRY_OK when its write landed and the key was
 * good. */
static int split_next(ofi_putn_peer_t *p)
{
    int st = (p->landed & 1u) && !(p->refused & 1u) ? FERRY_OK : FERRY_ERR_ACCESS;
    p->landed >>= 1;
    p->refused >>= 1;
    p->split_base++;
    return st;
}

/* Runs the held split puts from the oldest while each has its write, or
 * was refused (by its key, or given up on). */
static void held_release(ofi_putn_peer_t *p, int rank, const ofi_putn_ops_t *ops, void *arg)
{
    while (p->nheld > 0 && ((p->landed | p->refused) & 1u)) {
        ofi_putn_held_t h = p->held[p->held_head];
        p->held_head = (p->held_head + 1) % OFI_PUTN_SPLIT_MAX;
        p->nheld--;
        int st = split_next(p);
        if (!putn_finish(p, rank, h.cookie, st, h.tag, h.payload, h.plen, ops, arg))
            return; /* rank was failed: what it held went with it */
    }
}

static const char *split_target(ofi_putn_peer_t *p, int rank, uint8_t tag,
                                const ofi_putn_body_t *b, const unsigned char *payload,
                                const ofi_putn_ops_t *ops, void *arg)
{
    /* Sent in order, taken in order: the next one is the next number. */
    if (b->split != p->split_base + p->nheld)
        return "a split put out of its order";
    if (p->nheld >= OFI_PUTN_SPLIT_MAX)
        return "more split puts held than its window";
    int st = ops->write(arg, rank, b->key, b->raddr, NULL, b->size) == FERRY_OK ? FERRY_OK
                                                                               : FERRY_ERR_ACCESS;
    if (p->nheld == 0 && ((p->landed & 1u) || st != FERRY_OK)) {
        /* Its write is here, or it is refused (a write that comes later is
         * dropped): answered and run now. */
        if (st != FERRY_OK)
            p->refused |= 1u;
        st = split_next(p);
        putn_finish(p, rank, b->cookie, st, tag, payload, b->plen, ops, arg);
        return NULL;
    }
    if (p->held == NULL && (p->held = calloc(OFI_PUTN_SPLIT_MAX, sizeof(*p->held))) == NULL)
        return "a split put that cannot be held (out of memory)";
    ofi_putn_held_t *h = &p->held[(p->held_head + p->nheld) % OFI_PUTN_SPLIT_MAX];
    *h = (ofi_putn_held_t){.cookie = b->cookie, .since_ns = ops->now_ns(arg), .tag = tag,
                           .plen = b->plen};
    memcpy(h->payload, payload, b->plen);
    p->nheld++;
    /* A refused one behind others waits only for its turn; its write may
     * still land (a provider that cannot revoke keys), and counts then. */
    if (st != FERRY_OK)
        p->refused |= 1ull << (p->nheld - 1);
    return NULL;
}

const char *ofi_putn_target(ofi_putn_peer_t *p, int rank, uint8_t tag,
                            const unsigned char *body, size_t len, const ofi_putn_ops_t *ops,
                            void *arg)
{
    ofi_putn_body_t b;
    const unsigned char *payload, *data;
    const char *why = ofi_putn_parse(body, len, &b, &payload, &data);
    if (why != NULL)
        return why;
    if (tag >= FERRY_BTL_TAG_BTL_MIN)
        return "a tag reserved for the transport";
    if (b.flags & OFI_PUTN_SPLIT)
        return split_target(p, rank, tag, &b, payload, ops, arg);
    /* A tracked one's answer would overtake those held. */
    if ((b.flags & OFI_PUTN_TRACKED) && p->nheld > 0)
        return "a tracked put with notification behind a held split one";
    int st = b.size > 0 ? ops->write(arg, rank, b.key, b.raddr, data, b.size) : FERRY_OK;
    if (st != FERRY_OK)
        st = FERRY_ERR_ACCESS;
    if (b.flags & OFI_PUTN_TRACKED) {
        putn_finish(p, rank, b.cookie, st, tag, payload, b.plen, ops, arg);
        return NULL;
    }
    bool alive = true;
    if (st != FERRY_OK && !p->refusal_owed) {
        const ofi_putn_answer_t a = {.cookie = 0, .status = FERRY_ERR_ACCESS,
                                     .splits = p->split_base};
        alive = ops->answer(arg, rank, &a);
    }
    if (alive)
        ops->notify(arg, rank, tag, payload, b.plen);
    return NULL;
}

const char *ofi_putn_landed(ofi_putn_peer_t *p, int rank, uint32_t split,
                            const ofi_putn_ops_t *ops, void *arg)
{
    uint32_t d = split - p->split_base;
    if (d >= 0x80000000u)
        return NULL; /* one given up on: dropped */
    if (d >= OFI_PUTN_SPLIT_MAX)
        return "a write numbered beyond its window of split puts";
    if (p->landed & (1ull << d))
        return "a write numbered twice";
    p->landed |= 1ull << d;
    held_release(p, rank, ops, arg);
    return NULL;
}

size_t ofi_putn_held_expire(ofi_putn_peer_t *p, int rank, uint64_t since_ns,
                            const ofi_putn_ops_t *ops, void *arg)
{
    size_t n = 0;
    while (p->nheld > 0 && !((p->landed | p->refused) & 1u) &&
           p->held[p->held_head].since_ns < since_ns) {
        /* Given up on: refused, and run with those behind it that can. */
        p->refused |= 1u;
        n++;
        held_release(p, rank, ops, arg);
    }
    return n;
}

int ofi_putn_owe(ofi_putn_peer_t *p, const ofi_putn_answer_t *a, uint32_t window)
{
    if (a->cookie == 0 && p->refusal_owed)
        return FERRY_OK;
    if (p->owed == NULL) {
        /* Room for a window of tracked answers and one refusal. */
        p->owed = calloc((size_t)window + 1, sizeof(*p->owed));
        if (p->owed == NULL)
            return FERRY_ERR_NO_MEMORY;
        p->owed_cap = window + 1;
        p->owed_head = 0;
    }
    /* At most a window of tracked answers: the initiator's budget. */
    if (a->cookie != 0 && p->nowed - (p->refusal_owed ? 1u : 0u) >= window)
        return FERRY_ERR_PROTO;
    p->owed[(p->owed_head + p->nowed) % p->owed_cap] = *a;
    p->nowed++;
    if (a->cookie == 0)
        p->refusal_owed = true;
    return FERRY_OK;
}

void ofi_putn_owed_pop(ofi_putn_peer_t *p)
{
    if (p->nowed == 0)
        return;
    if (p->owed[p->owed_head].cookie == 0)
        p->refusal_owed = false;
    p->owed_head = (p->owed_head + 1) % p->owed_cap;
    p->nowed--;
}

void ofi_putn_sent_tracked(ofi_putn_peer_t *p, ofi_putn_req_t *req)
{
    /* Cookies stay consecutive past a wrap (0 is never one), so that those
     * forgotten are one range. */
    req->cookie = ofi_putn_next_cookie(p);
    p->last_cookie = req->cookie;
    util_list_append(&p->inflight, &req->link);
    p->ninflight++;
}

void ofi_putn_sent_untracked(ofi_putn_peer_t *p, ferry_btl_rdma_cb_t cb, void *cbctx)
{
    p->untracked_sent++;
    p->refused_cb = cb;
    p->refused_cbctx = cbctx;
}

/* Answers come in the order the tracked ones were sent: those completed
 * without their answer first, then those in flight. */
const char *ofi_putn_answer(ofi_putn_peer_t *p, const unsigned char *body, size_t len,
                            ofi_putn_req_t **req_out, bool *refused_out)
{
    ofi_putn_answer_t a;
    *req_out = NULL;
    *refused_out = false;
    const char *why = ofi_putn_answer_parse(body, len, &a);
    if (why != NULL)
        return why;
    /* The target's count of split puts run only moves on, and not past
     * those sent. */
    if (a.splits - p->split_run > p->split_sent - p->split_run)
        return "an answer counting split puts that were not sent";
    if (a.cookie == 0) {
        if (p->refusals_heard >= p->untracked_sent || p->refused_cb == NULL)
            return "a refusal of more puts than were sent untracked";
        p->refusals_heard++;
        p->split_run = a.splits;
        *refused_out = true;
        return NULL;
    }
    if (p->forgot_next != 0) {
        /* Answers to those completed without them come first. */
        if (a.cookie != p->forgot_next)
            return "an answer to another put than the oldest in flight";
        p->forgot_next = a.cookie == p->forgot_last ? 0 : a.cookie + 1 != 0 ? a.cookie + 1 : 1;
        p->split_run = a.splits;
        return NULL;
    }
    util_list_item_t *it = util_list_first(&p->inflight);
    if (it == NULL)
        return "an answer to no put in flight";
    ofi_putn_req_t *req = UTIL_CONTAINER_OF(it, ofi_putn_req_t, link);
    if (req->cookie != a.cookie)
        return "an answer to another put than the oldest in flight";
    util_list_remove(&p->inflight, it);
    p->ninflight--;
    p->split_run = a.splits;
    req->status = a.status;
    *req_out = req;
    return NULL;
}
