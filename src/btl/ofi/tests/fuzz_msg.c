/*
 * Fuzz harness: ofi's receive side (ofi_wire.c), what ofi_msg.c runs on
 * every message found in a posted buffer: the header's parse (length,
 * magic, type, tag, claimed rank), the check of the claimed rank against
 * the one the fabric names, sequence numbers, the window, the holding of
 * messages that came early, credits, and control messages. No fabric: the
 * input plays the messages and the fabric's word on who sent each.
 *
 * Puts with notification (OFI_T_PUTN and OFI_T_PUTN_ANSWER, ofi_wire.h)
 * go on from their delivery: a PUTN to the target's side (ofi_putn_target,
 * over a region of 256 bytes at PN_BASE under one key), an answer to the
 * initiator's (ofi_putn_answer, against the puts this process sent).
 *
 * Input: one byte of set-up, then records, each a length byte and that many
 * bytes.
 *   set-up   ranks = 2 + (b & 3), window = 4 << ((b >> 2) & 3)
 *   record   byte 0 picks what happens:
 *            0x40 set: this process acts towards rank (byte 0 & 0x3f) %
 *                 ranks, as byte 1 says (0 or none: it sends an ordered
 *                 message, so that acknowledgements have something to
 *                 acknowledge; 1: a tracked put with notification, 2: an
 *                 untracked one, both ordered messages too; 3: the oldest
 *                 answer it owes the rank leaves; 4: from now on answers
 *                 cannot leave and are owed, or again can, in turn; 5:
 *                 del_procs, which completes the tracked ones in flight
 *                 without their answers; 6: the clock moves on by byte 2
 *                 and the tracked ones past their deadline expire, which
 *                 a tracked one sets to the clock plus its byte 2; 7: a
 *                 split put's write from the rank lands here, numbered
 *                 (byte 2 % 72) - 4 from the oldest not run: late, in the
 *                 window or past it; 8: the clock moves on by byte 2 and
 *                 held split puts older than 100 give up);
 *            0x80 set: the rest of the record is a message, as raw bytes,
 *                 from fabric rank (byte 0 & 0x3f) % (ranks + 1) - 1 (-1:
 *                 an address that is no rank);
 *            neither: a message built from the record's fields, so that the
 *                 fuzzer gets past the magic and lands near the window:
 *                 byte 1 type, 2 tag, 3 seq relative to what the receiver
 *                 expects (signed), 4 claimed rank (< 0x80: the fabric's,
 *                 else (b & 0x7f), 5 ack behind what we sent, 6 flags (1:
 *                 wrong magic; 2: the body of a PUTN or an answer built
 *                 from the bytes after, below), then the payload. A
 *                 payload starting 0xfa makes the handler fail its sender
 *                 from inside the delivery, as a handler's send to a dead
 *                 peer does.
 *            Built bodies: a PUTN's from byte 7 (1: tracked, 2: a wrong
 *                 key, 4: a reserved field set, 8: an unknown flag, 16: a
 *                 cookie that disagrees; 32: split instead, its size 9 + 1,
 *                 numbered as the target expects, or one past with 64,
 *                 untracked with 128), 8 where (PN_BASE - 16 + b), 9
 *                 the notification's bytes, 10 the cookie, then the
 *                 notification and the data; an answer's from byte 7 (0: a
 *                 refusal, else the cookie of the oldest put due an answer
 *                 + b - 1),
 *                 8 the status (0 FERRY_OK, 1 FERRY_ERR_ACCESS, else
 *                 (int8_t)b), 9 the count of split puts run.
 * Checks, after every record: deliveries of each rank come in sequence
 * from 0 and only from a rank that claims to be itself; nothing is
 * delivered from a failed rank; a rank holds fewer messages than the
 * window, in order, within it, and held_bytes adds up; acknowledgements
 * never pass what was sent. For puts with notification: a malformed one
 * does nothing; a good one writes only inside the region and the data it
 * carries, is answered (tracked: always, with its cookie and the write's
 * status; untracked: only refused, and only while no refusal is owed)
 * before its handler runs, and the handler runs once, after the write,
 * with the payload inside the message (a split one's runs then, or is
 * held, and held ones answer with their cookie and the count run so far,
 * and are never more than OFI_PUTN_SPLIT_MAX); answers owed stay within a window
 * and one refusal; an answer completes only the oldest tracked put in
 * flight, and refusals never outnumber the untracked ones sent.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/btl.h>

#include "btl/ofi/ofi_wire.h"
#include "fuzz.h"

#define MAX_RANKS 5
#define PN_BASE 0x10000u
#define PN_REGION 256

/* The PUTN being handled: what its hooks may and must do. */
typedef struct pn_current {
    const unsigned char *body; /* the message after its header */
    size_t len;
    ofi_putn_body_t b;
    int writes, answers, notes;
    int write_status;  /* the write's, FERRY_OK when none was asked for */
    bool refusal_owed; /* one was owed to the sender before this put */
} pn_current_t;

typedef struct harness {
    uint32_t nranks, window;
    ofi_wire_peer_t peers[MAX_RANKS];
    bool failed[MAX_RANKS];
    uint32_t delivered[MAX_RANKS]; /* the next seq each rank's delivery must carry */
    ofi_putn_peer_t putn[MAX_RANKS];
    uint64_t refused_told[MAX_RANKS]; /* refusals the callback was told of */
    bool owe;                         /* answers cannot leave */
    bool releasing; /* held split puts run from a landed write or expiry */
    uint64_t now;                     /* the clock deadlines are set and expire by */
    unsigned char region[PN_REGION];
    uint8_t key[FERRY_BTL_KEY_MAX];
    pn_current_t cur;
} harness_t;

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_ofi_msg: %s\n", what);
        abort();
    }
}

static ofi_wire_peer_t *h_peer(void *arg, int rank)
{
    harness_t *h = arg;
    check(rank >= 0 && (uint32_t)rank < h->nranks, "asked for a rank outside the job");
    return h->failed[rank] ? NULL : &h->peers[rank];
}

static void h_heard(void *arg, int rank, const ofi_hdr_t *hdr)
{
    harness_t *h = arg;
    check(!h->failed[rank], "heard a failed rank");
    check(hdr->src == (uint32_t)rank, "heard a message that claims another rank");
}

static void free_done(util_list_t *done)
{
    util_list_item_t *it;
    while ((it = util_list_pop_front(done)) != NULL)
        free(UTIL_CONTAINER_OF(it, ofi_putn_req_t, link));
}

static void fail_rank(harness_t *h, int rank)
{
    util_list_t done;
    util_list_init(&done);
    h->failed[rank] = true;
    ofi_wire_peer_clear(&h->peers[rank]);
    ofi_putn_peer_fail(&h->putn[rank], -1, &done, true);
    free_done(&done);
}

/* ---- the target's hooks for a PUTN ---- */

static int pn_write(void *arg, int rank, const uint8_t *key, uint64_t raddr, const void *data,
                    size_t n)
{
    harness_t *h = arg;
    pn_current_t *c = &h->cur;
    check(!h->failed[rank], "a failed rank's put written");
    check(!h->releasing, "a write asked for as held ones ran");
    check(c->writes == 0 && c->answers == 0 && c->notes == 0, "a put written late or twice");
    check(n == c->b.size && n > 0, "a write of another length than the put's");
    /* A split put's is a check only: its data comes by its own write. */
    check((data == NULL) == ((c->b.flags & OFI_PUTN_SPLIT) != 0),
          "a check without data for a whole put, or data for a split one");
    check(data == NULL || ((const unsigned char *)data >= c->body &&
                           (const unsigned char *)data + n == c->body + c->len),
          "a put's data not at the message's end");
    c->writes++;
    c->write_status = FERRY_ERR_ACCESS;
    if (memcmp(key, h->key, sizeof(h->key)) != 0 || raddr < PN_BASE ||
        raddr - PN_BASE > PN_REGION || n > PN_REGION - (raddr - PN_BASE))
        return FERRY_ERR_ACCESS;
    if (data != NULL)
        memcpy(h->region + (raddr - PN_BASE), data, n);
    c->write_status = FERRY_OK;
    return FERRY_OK;
}

static bool pn_answer(void *arg, int rank, const ofi_putn_answer_t *a)
{
    harness_t *h = arg;
    pn_current_t *c = &h->cur;
    ofi_putn_peer_t *p = &h->putn[rank];
    check(!h->failed[rank], "a failed rank answered");
    if (h->releasing) {
        /* A held split put's: tracked, ordered by the ring as any. */
        check(a->cookie != 0 && (a->status == FERRY_OK || a->status == FERRY_ERR_ACCESS) &&
                  a->splits == p->split_base,
              "a held split put answered without its cookie or count");
    } else {
        check(c->answers == 0 && c->notes == 0, "answered twice, or after the handler");
        c->answers++;
        if (c->b.flags & OFI_PUTN_TRACKED)
            check(a->cookie == c->b.cookie && a->status == c->write_status,
                  "a tracked put answered with another cookie or status");
        else
            check(a->cookie == 0 && a->status == FERRY_ERR_ACCESS &&
                      c->write_status == FERRY_ERR_ACCESS && !p->refusal_owed,
                  "an untracked put answered though not refused, or twice owed");
    }
    if (!h->owe)
        return true;
    int rc = ofi_putn_owe(p, a, h->window);
    check(rc == FERRY_OK || rc == FERRY_ERR_PROTO, "owing an answer failed otherwise");
    if (rc != FERRY_OK) {
        check(a->cookie != 0 && p->nowed - (p->refusal_owed ? 1u : 0u) == h->window,
              "the owed ring refused a tracked answer within the budget");
        fail_rank(h, rank);
        return false;
    }
    return true;
}

static void pn_notify(void *arg, int rank, uint8_t tag, const unsigned char *payload,
                      size_t plen)
{
    harness_t *h = arg;
    pn_current_t *c = &h->cur;
    check(!h->failed[rank], "a failed rank's notification delivered");
    if (h->releasing) {
        check(tag < FERRY_BTL_TAG_BTL_MIN && plen <= OFI_PUTN_SPLIT_PAYLOAD,
              "a held notification on a reserved tag or too long");
        unsigned sum = 0;
        for (size_t i = 0; i < plen; i++)
            sum += payload[i];
        (void)sum;
        return;
    }
    check(c->notes == 0, "a notification delivered twice");
    check(tag < FERRY_BTL_TAG_BTL_MIN, "a notification on a reserved tag");
    check(c->writes == (c->b.size > 0), "a notification before its data was written");
    bool answered = (c->b.flags & OFI_PUTN_TRACKED) ||
                    (c->write_status != FERRY_OK && !c->refusal_owed);
    check(c->answers == (answered ? 1 : 0), "a notification before its answer, or none due");
    check(plen == c->b.plen && payload == c->body + sizeof(ofi_putn_body_t) &&
              plen <= c->len - sizeof(ofi_putn_body_t),
          "a notification outside its message");
    c->notes++;
    unsigned sum = 0;
    for (size_t i = 0; i < plen; i++)
        sum += payload[i];
    (void)sum;
}

static uint64_t pn_now(void *arg)
{
    return ((harness_t *)arg)->now;
}

static const ofi_putn_ops_t pn_ops = {
    .write = pn_write,
    .now_ns = pn_now,
    .answer = pn_answer,
    .notify = pn_notify,
};

static void pn_refused_cb(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                          ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status)
{
    (void)btl, (void)ep, (void)local, (void)lreg, (void)cbctx, (void)cbdata, (void)status;
}

static void putn_deliver(harness_t *h, int rank, const ofi_hdr_t *hdr, const unsigned char *body,
                         size_t len)
{
    ofi_putn_peer_t *p = &h->putn[rank];
    if (hdr->type == OFI_T_PUTN) {
        memset(&h->cur, 0, sizeof(h->cur));
        h->cur.body = body;
        h->cur.len = len;
        h->cur.refusal_owed = p->refusal_owed;
        const unsigned char *pl, *data;
        bool well_formed = ofi_putn_parse(body, len, &h->cur.b, &pl, &data) == NULL;
        uint32_t held = p->nheld, expect = p->split_base + p->nheld;
        const char *why = ofi_putn_target(p, rank, hdr->tag, body, len, &pn_ops, h);
        /* Well formed, the target still refuses a split one out of its
         * order or past the window, and a tracked one behind held ones. */
        bool order = (h->cur.b.flags & OFI_PUTN_SPLIT)
                         ? h->cur.b.split == expect && held < OFI_PUTN_SPLIT_MAX
                         : !((h->cur.b.flags & OFI_PUTN_TRACKED) && held > 0);
        check((why == NULL) == (well_formed && order), "the target and the parser disagree");
        if (why != NULL) {
            check(h->cur.writes == 0 && h->cur.answers == 0 && h->cur.notes == 0,
                  "a malformed put did something");
            fail_rank(h, rank);
        } else if (!h->failed[rank]) {
            check(h->cur.notes == 1 || ((h->cur.b.flags & OFI_PUTN_SPLIT) && h->cur.notes == 0 &&
                                        p->nheld > 0),
                  "a put's notification neither delivered nor held");
        }
        return;
    }
    uint64_t oldest = 0;
    if (!util_list_empty(&p->inflight))
        oldest = UTIL_CONTAINER_OF(util_list_first(&p->inflight), ofi_putn_req_t, link)->cookie;
    size_t before = p->ninflight;
    uint64_t heard = p->refusals_heard, forgot = p->forgot_next;
    ofi_putn_req_t *req;
    bool refused;
    const char *why = ofi_putn_answer(p, body, len, &req, &refused);
    if (why != NULL) {
        check(p->ninflight == before && p->refusals_heard == heard,
              "a malformed answer changed something");
        fail_rank(h, rank);
        return;
    }
    if (refused) {
        check(req == NULL && p->refusals_heard == heard + 1 &&
                  p->refusals_heard <= p->untracked_sent,
              "a refusal of more than was sent");
        h->refused_told[rank]++;
        return;
    }
    if (req == NULL) {
        check(before == p->ninflight && forgot != 0 &&
                  (p->forgot_next == 0 || p->forgot_next == forgot + 1),
              "an answer dropped that answered no forgotten put");
        return;
    }
    check(forgot == 0, "an answer completed a put while forgotten ones were due");
    check(req->cookie == oldest && p->ninflight == before - 1 &&
              (req->status == FERRY_OK || req->status == FERRY_ERR_ACCESS),
          "an answer completed another put than the oldest");
    free(req);
}

static void h_deliver(void *arg, int rank, const ofi_hdr_t *hdr, const unsigned char *payload,
                      size_t len)
{
    harness_t *h = arg;
    check(!h->failed[rank], "delivered a message of a failed rank");
    check(ofi_wire_ordered(hdr->type), "delivered a control message");
    check(hdr->src == (uint32_t)rank, "delivered a message that claims another rank");
    check(hdr->seq == h->delivered[rank], "delivered out of order");
    check(hdr->type != OFI_T_DATA || hdr->tag < FERRY_BTL_TAG_BTL_MIN, "delivered a bad tag");
    check(hdr->type != OFI_T_CLOSE || len == 0, "delivered a CLOSE with a payload");
    check(hdr->type == OFI_T_DATA || hdr->type == OFI_T_PUTN || hdr->tag == 0,
          "delivered a tag on an untagged type");
    h->delivered[rank]++;
    if (hdr->type == OFI_T_PUTN || hdr->type == OFI_T_PUTN_ANSWER) {
        putn_deliver(h, rank, hdr, payload, len);
        return;
    }
    /* Touch every byte, so that a length past the buffer shows. */
    unsigned sum = 0;
    for (size_t i = 0; i < len; i++)
        sum += payload[i];
    (void)sum;
    if (len > 0 && payload[0] == 0xfa)
        fail_rank(h, rank);
}

static void h_control(void *arg, int rank, const ofi_hdr_t *hdr)
{
    harness_t *h = arg;
    check(!h->failed[rank], "control message of a failed rank");
    check(hdr->type >= OFI_T_PROBE && hdr->type <= OFI_T_FAIL, "control with an ordered type");
    if (hdr->type == OFI_T_FAIL)
        fail_rank(h, rank);
}

static const ofi_wire_ops_t ops = {
    .peer = h_peer,
    .heard = h_heard,
    .deliver = h_deliver,
    .control = h_control,
};

static void check_peer(const harness_t *h, int r)
{
    const ofi_wire_peer_t *p = &h->peers[r];
    if (h->failed[r]) {
        check(p->nheld == 0 && p->held_bytes == 0 && util_list_empty(&p->held),
              "a failed rank still holds messages");
        return;
    }
    check(p->nheld < h->window, "holds a window's worth");
    check(p->nheld == util_list_len(&p->held), "nheld disagrees with the list");
    check(p->rx_next == h->delivered[r], "rx_next disagrees with what was delivered");
    check((int32_t)(p->tx_next - p->tx_acked) >= 0, "acknowledged more than was sent");
    size_t bytes = 0;
    uint32_t last = p->rx_next;
    bool first = true;
    for (util_list_item_t *it = util_list_first(&p->held); it != NULL;
         it = util_list_next(&p->held, it)) {
        const ofi_held_t *m = UTIL_CONTAINER_OF(it, ofi_held_t, link);
        uint32_t ahead = m->seq - p->rx_next;
        check(ahead > 0 && ahead < h->window, "holds a message outside the window");
        check(first || (int32_t)(m->seq - last) > 0, "held messages out of order");
        check(m->len >= sizeof(ofi_hdr_t), "holds a message shorter than its header");
        last = m->seq;
        first = false;
        bytes += m->len;
    }
    check(bytes == p->held_bytes, "held_bytes disagrees with the list");

    const ofi_putn_peer_t *q = &h->putn[r];
    check(q->ninflight == util_list_len(&q->inflight) && ofi_putn_due(q) <= h->window,
          "tracked puts in flight miscounted, or more due answers than the window");
    uint64_t prev = 0;
    for (util_list_item_t *it = util_list_first(&q->inflight); it != NULL;
         it = util_list_next(&q->inflight, it)) {
        uint64_t c = UTIL_CONTAINER_OF(it, ofi_putn_req_t, link)->cookie;
        check(c > prev, "tracked puts in flight out of order");
        prev = c;
    }
    check(q->forgot_next == 0 || (q->forgot_next <= q->forgot_last &&
                                   q->forgot_last <= q->last_cookie),
          "answers due to forgotten puts out of their range");
    check(q->refusals_heard <= q->untracked_sent && h->refused_told[r] == q->refusals_heard,
          "refusals heard of past what was sent");
    check(q->nowed <= q->owed_cap && q->nowed <= h->window + 1u, "answers owed past the ring");
    check(q->nheld <= OFI_PUTN_SPLIT_MAX && (q->nheld == 0 || q->held != NULL),
          "split puts held past their window");
    unsigned refusals = 0;
    for (uint32_t i = 0; i < q->nowed; i++)
        refusals += q->owed[(q->owed_head + i) % q->owed_cap].cookie == 0;
    check(refusals == (q->refusal_owed ? 1u : 0u), "more than one refusal owed, or miscounted");
}

/* The body of a PUTN or an answer built from a record's fields (the
 * comment at the top says which); returns its length. */
static size_t build_body(harness_t *h, int rank, uint8_t type, const uint8_t *f, size_t n,
                         unsigned char *out)
{
    if (type == OFI_T_PUTN_ANSWER) {
        const ofi_putn_peer_t *p = &h->putn[rank >= 0 ? rank : 0];
        uint64_t oldest = p->forgot_next != 0 ? p->forgot_next : p->last_cookie - p->ninflight + 1;
        ofi_putn_answer_t a = {
            .cookie = n > 0 && f[0] != 0 ? oldest + f[0] - 1 : 0,
            .status = n < 2 || f[1] == 0 ? FERRY_OK
                      : f[1] == 1        ? FERRY_ERR_ACCESS
                                         : (int8_t)f[1],
            .splits = n > 2 ? f[2] : 0,
        };
        memcpy(out, &a, sizeof(a));
        return sizeof(a);
    }
    uint8_t kind = n > 0 ? f[0] : 0;
    size_t rest = n > 4 ? n - 4 : 0;
    size_t plen = n > 2 && f[2] < rest ? f[2] : rest;
    if (kind & 32) {
        /* A split one: its notification only, numbered as the target
         * expects it (or one past, with 64). */
        const ofi_putn_peer_t *q = &h->putn[rank >= 0 ? rank : 0];
        if (plen > OFI_PUTN_SPLIT_PAYLOAD)
            plen = OFI_PUTN_SPLIT_PAYLOAD;
        ofi_putn_body_t b = {
            .raddr = PN_BASE - 16 + (n > 1 ? f[1] : 16),
            .cookie = 1 + (n > 3 ? f[3] : 0),
            .size = 1 + (n > 2 ? f[2] : 0),
            .plen = (uint32_t)plen,
            .flags = OFI_PUTN_TRACKED | OFI_PUTN_SPLIT,
            .split = q->split_base + q->nheld + ((kind & 64) ? 1 : 0),
        };
        memcpy(b.key, h->key, sizeof(b.key));
        if (kind & 2)
            b.key[kind % sizeof(b.key)] ^= 1;
        if (kind & 128)
            b.cookie = 0;
        memcpy(out, &b, sizeof(b));
        if (plen > 0)
            memcpy(out + sizeof(b), f + 4, plen);
        return sizeof(b) + plen;
    }
    ofi_putn_body_t b = {
        .raddr = PN_BASE - 16 + (n > 1 ? f[1] : 16),
        .cookie = (kind & 1) ? 1 + (n > 3 ? f[3] : 0) : 0,
        .size = (uint32_t)(rest - plen),
        .plen = (uint32_t)plen,
        .flags = (kind & 1) ? OFI_PUTN_TRACKED : 0,
        .split = (kind & 4) ? 1 : 0,
    };
    memcpy(b.key, h->key, sizeof(b.key));
    if (kind & 2)
        b.key[kind % sizeof(b.key)] ^= 1;
    if (kind & 8)
        b.flags |= 0x80;
    if (kind & 16)
        b.cookie = b.cookie != 0 ? 0 : 5;
    memcpy(out, &b, sizeof(b));
    if (rest > 0)
        memcpy(out + sizeof(b), f + 4, rest);
    return sizeof(b) + rest;
}

static void structured(harness_t *h, int rank, const uint8_t *rec, size_t len)
{
    unsigned char msg[512];
    ofi_hdr_t hdr;
    if (len < 7)
        return;
    const ofi_wire_peer_t *p = rank >= 0 ? &h->peers[rank] : &h->peers[0];
    hdr.type = rec[1];
    hdr.tag = rec[2];
    hdr.seq = p->rx_next + (uint32_t)(int32_t)(int8_t)rec[3];
    hdr.src = rec[4] < 0x80 ? (uint32_t)(rank >= 0 ? rank : 0) : (uint32_t)(rec[4] & 0x7f);
    /* The sender acknowledges what we sent it, or a little less. */
    hdr.ack = p->tx_next - rec[5];
    hdr.magic = (rec[6] & 1) ? 0x1234 : OFI_HDR_MAGIC;
    memcpy(msg, &hdr, sizeof(hdr));
    size_t n;
    if ((rec[6] & 2) && (rec[1] == OFI_T_PUTN || rec[1] == OFI_T_PUTN_ANSWER)) {
        n = build_body(h, rank, rec[1], rec + 7, len - 7, msg + sizeof(hdr));
    } else {
        n = len - 7 < sizeof(msg) - sizeof(hdr) ? len - 7 : sizeof(msg) - sizeof(hdr);
        memcpy(msg + sizeof(hdr), rec + 7, n);
    }
    ofi_hdr_t out;
    ofi_wire_receive(msg, sizeof(hdr) + n, rank, h->nranks, h->window, &ops, h, &out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    harness_t h;
    memset(&h, 0, sizeof(h));
    h.nranks = 2 + (data[0] & 3);
    h.window = 4u << ((data[0] >> 2) & 3);
    memset(h.key, 0x6b, sizeof(h.key));
    for (uint32_t r = 0; r < h.nranks; r++) {
        ofi_wire_peer_init(&h.peers[r]);
        ofi_putn_peer_init(&h.putn[r]);
    }
    size_t off = 1;
    while (off < size) {
        size_t len = data[off++];
        if (len > size - off)
            len = size - off;
        const uint8_t *rec = data + off;
        off += len;
        if (len == 0)
            continue;
        if (rec[0] & 0x40) {
            /* Ours: an ordered message leaves for a rank, if the window
             * lets it (a put with notification too, tracked ones within
             * their budget); or an answer owed leaves; or answers can no
             * longer leave, or can again. */
            int r = (int)((rec[0] & 0x3f) % h.nranks);
            uint8_t act = len > 1 ? rec[1] % 9 : 0;
            ofi_putn_peer_t *q = &h.putn[r];
            ofi_hdr_t hdr;
            if (act == 5) {
                util_list_t done;
                util_list_init(&done);
                ofi_putn_peer_fail(q, -1, &done, false);
                free_done(&done);
            } else if (act == 6) {
                /* Expired ones complete but stay due: their answers may
                 * come, and are dropped. */
                h.now += len > 2 ? rec[2] : 1;
                util_list_t done;
                util_list_init(&done);
                uint64_t due = ofi_putn_due(q);
                size_t before = q->ninflight;
                size_t n = ofi_putn_expire(q, h.now, &done);
                check(n == before - q->ninflight && util_list_len(&done) == n,
                      "expiry counted other puts than it completed");
                check(ofi_putn_due(q) == due, "expired puts no longer due");
                for (util_list_item_t *it = util_list_first(&done); it != NULL;
                     it = util_list_next(&done, it)) {
                    const ofi_putn_req_t *d = UTIL_CONTAINER_OF(it, ofi_putn_req_t, link);
                    check(d->status == FERRY_ERR_TIMEOUT && d->deadline_ns <= h.now,
                          "a put expired before its deadline, or without a timeout");
                }
                util_list_item_t *first = util_list_first(&q->inflight);
                check(first == NULL ||
                          UTIL_CONTAINER_OF(first, ofi_putn_req_t, link)->deadline_ns > h.now,
                      "the oldest put left in flight is past its deadline");
                free_done(&done);
            } else if (act == 7 && !h.failed[r]) {
                /* A split put's write from r landed here, numbered near
                 * what r's notifications are at (late, in the window, or
                 * past it). */
                uint32_t split = q->split_base + (uint32_t)(len > 2 ? rec[2] % 72 : 0) - 4u;
                h.releasing = true;
                const char *why = ofi_putn_landed(q, r, split, &pn_ops, &h);
                h.releasing = false;
                if (why != NULL)
                    fail_rank(&h, r);
            } else if (act == 8 && !h.failed[r]) {
                /* The clock moves on; held ones past their time give up. */
                h.now += len > 2 ? rec[2] : 1;
                uint32_t before = q->nheld;
                h.releasing = true;
                size_t n = ofi_putn_held_expire(q, r, h.now > 100 ? h.now - 100 : 0, &pn_ops, &h);
                h.releasing = false;
                check(h.failed[r] || n <= before - q->nheld, "expiry counted more than ran");
            } else if (act == 3) {
                ofi_putn_owed_pop(q);
            } else if (act == 4) {
                h.owe = !h.owe;
            } else if (!h.failed[r] && ofi_wire_can_send(&h.peers[r], h.window) &&
                       (act != 1 || ofi_putn_due(q) < h.window)) {
                ofi_wire_fill(&h.peers[r], &hdr, 0, act == 0 ? OFI_T_DATA : OFI_T_PUTN, 1, 0);
                ofi_wire_sent(&h.peers[r], &hdr);
                check(hdr.seq + 1 == h.peers[r].tx_next, "a send did not take its seq");
                if (act == 1) {
                    ofi_putn_req_t *req = calloc(1, sizeof(*req));
                    check(req != NULL, "out of memory");
                    req->deadline_ns = h.now + (len > 2 ? rec[2] : 0);
                    ofi_putn_sent_tracked(q, req);
                } else if (act == 2) {
                    ofi_putn_sent_untracked(q, pn_refused_cb, NULL);
                }
            }
        } else {
            int rank = (int)((rec[0] & 0x3f) % (h.nranks + 1)) - 1;
            if (rec[0] & 0x80) {
                ofi_hdr_t out;
                ofi_wire_receive(rec + 1, len - 1, rank, h.nranks, h.window, &ops, &h, &out);
            } else {
                structured(&h, rank, rec, len);
            }
        }
        for (uint32_t r = 0; r < h.nranks; r++)
            check_peer(&h, (int)r);
    }
    for (uint32_t r = 0; r < h.nranks; r++) {
        util_list_t done;
        util_list_init(&done);
        ofi_wire_peer_clear(&h.peers[r]);
        ofi_putn_peer_fail(&h.putn[r], -1, &done, true);
        free_done(&done);
    }
    return 0;
}
