/*
 * Unit test of ofi's receive side (ofi_wire.c) without a fabric: each
 * check a message must pass, tried with a message that should fail it,
 * and the good paths (in order, held then freed, credits).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/btl.h>

#include "btl/ofi/ofi_wire.h"

#include "../../../../tests/unit/check.h"

#define NRANKS 3
#define WINDOW 8

typedef struct rx {
    ofi_wire_peer_t peers[NRANKS];
    bool failed[NRANKS];
    int delivered[NRANKS];
    uint32_t last_seq[NRANKS];
    int controls, heard;
    char text[64]; /* the last payload delivered */
    bool fail_on_delivery;
} rx_t;

static ofi_wire_peer_t *t_peer(void *arg, int rank)
{
    rx_t *rx = arg;
    return rx->failed[rank] ? NULL : &rx->peers[rank];
}

static void t_heard(void *arg, int rank, const ofi_hdr_t *h)
{
    ((rx_t *)arg)->heard++;
}

static void t_deliver(void *arg, int rank, const ofi_hdr_t *h, const unsigned char *payload,
                      size_t len)
{
    rx_t *rx = arg;
    rx->delivered[rank]++;
    rx->last_seq[rank] = h->seq;
    snprintf(rx->text, sizeof(rx->text), "%.*s", (int)len, (const char *)payload);
    if (rx->fail_on_delivery) {
        rx->failed[rank] = true;
        ofi_wire_peer_clear(&rx->peers[rank]);
    }
}

static void t_control(void *arg, int rank, const ofi_hdr_t *h)
{
    ((rx_t *)arg)->controls++;
}

static const ofi_wire_ops_t ops = {
    .peer = t_peer, .heard = t_heard, .deliver = t_deliver, .control = t_control};

/* A message as a sender builds it: header then text. */
static size_t build(unsigned char *buf, uint32_t src, uint8_t type, uint8_t tag, uint32_t seq,
                    uint32_t ack, const char *text)
{
    ofi_hdr_t h = {.src = src, .seq = seq, .tag = tag, .type = type, .magic = OFI_HDR_MAGIC,
                   .ack = ack};
    memcpy(buf, &h, sizeof(h));
    size_t n = text != NULL ? strlen(text) : 0;
    if (n > 0)
        memcpy(buf + sizeof(h), text, n);
    return sizeof(h) + n;
}

static ofi_wire_verdict_t recv_msg(rx_t *rx, int fabric, uint32_t src, uint8_t type, uint8_t tag,
                                   uint32_t seq, uint32_t ack, const char *text)
{
    unsigned char buf[256];
    ofi_hdr_t out;
    size_t n = build(buf, src, type, tag, seq, ack, text);
    return ofi_wire_receive(buf, n, fabric, NRANKS, WINDOW, &ops, rx, &out);
}

static void reset(rx_t *rx)
{
    for (int r = 0; r < NRANKS; r++)
        ofi_wire_peer_clear(&rx->peers[r]);
    memset(rx, 0, sizeof(*rx));
    for (int r = 0; r < NRANKS; r++)
        ofi_wire_peer_init(&rx->peers[r]);
}

static void test_parse(void)
{
    unsigned char buf[64];
    ofi_hdr_t h;
    size_t n = build(buf, 1, OFI_T_DATA, 3, 0, 0, "x");
    CHECK(ofi_wire_parse(buf, n, NRANKS, &h) == OFI_WIRE_OK && h.src == 1 && h.tag == 3);
    CHECK(ofi_wire_parse(buf, sizeof(ofi_hdr_t) - 1, NRANKS, &h) == OFI_WIRE_SHORT);
    CHECK(ofi_wire_parse(buf, 0, NRANKS, &h) == OFI_WIRE_SHORT);
    buf[10] ^= 1;
    CHECK(ofi_wire_parse(buf, n, NRANKS, &h) == OFI_WIRE_BAD_MAGIC);
    n = build(buf, 1, 0, 0, 0, 0, NULL);
    CHECK(ofi_wire_parse(buf, n, NRANKS, &h) == OFI_WIRE_BAD_TYPE);
    n = build(buf, 1, OFI_T_MAX + 1, 0, 0, 0, NULL);
    CHECK(ofi_wire_parse(buf, n, NRANKS, &h) == OFI_WIRE_BAD_TYPE);
    n = build(buf, 1, OFI_T_DATA, FERRY_BTL_TAG_BTL_MIN, 0, 0, NULL);
    CHECK(ofi_wire_parse(buf, n, NRANKS, &h) == OFI_WIRE_BAD_TAG);
    n = build(buf, 1, OFI_T_PROBE, 1, 0, 0, NULL);
    CHECK(ofi_wire_parse(buf, n, NRANKS, &h) == OFI_WIRE_BAD_TAG);
    n = build(buf, 1, OFI_T_ACK, 0, 0, 0, "payload");
    CHECK(ofi_wire_parse(buf, n, NRANKS, &h) == OFI_WIRE_BAD_LENGTH);
    n = build(buf, NRANKS, OFI_T_DATA, 1, 0, 0, NULL);
    CHECK(ofi_wire_parse(buf, n, NRANKS, &h) == OFI_WIRE_BAD_RANK);
    n = build(buf, UINT32_MAX, OFI_T_DATA, 1, 0, 0, NULL);
    CHECK(ofi_wire_parse(buf, n, NRANKS, &h) == OFI_WIRE_BAD_RANK);
}

/* Who sent it is the fabric's word. */
static void test_identity(void)
{
    rx_t rx = {0};
    reset(&rx);
    /* A stranger (an address that is no rank) claiming rank 0. */
    CHECK(recv_msg(&rx, -1, 0, OFI_T_DATA, 1, 0, 0, "forged") == OFI_WIRE_UNKNOWN);
    CHECK(recv_msg(&rx, NRANKS, 0, OFI_T_DATA, 1, 0, 0, "forged") == OFI_WIRE_UNKNOWN);
    /* Rank 2 claiming rank 0, in order for rank 0 and for itself. */
    CHECK(recv_msg(&rx, 2, 0, OFI_T_DATA, 1, 0, 0, "forged") == OFI_WIRE_SPOOFED);
    CHECK(recv_msg(&rx, 2, 0, OFI_T_PROBE, 0, 0, 0, NULL) == OFI_WIRE_SPOOFED);
    CHECK(rx.delivered[0] == 0 && rx.delivered[2] == 0 && rx.heard == 0 && rx.controls == 0);
    /* Rank 0's first message is still its first: nothing was taken. */
    CHECK(recv_msg(&rx, 0, 0, OFI_T_DATA, 1, 0, 0, "genuine") == OFI_WIRE_OK);
    CHECK(rx.delivered[0] == 1 && strcmp(rx.text, "genuine") == 0);
    /* A failed rank's messages are refused. */
    rx.failed[1] = true;
    CHECK(recv_msg(&rx, 1, 1, OFI_T_DATA, 1, 0, 0, "late") == OFI_WIRE_NOT_PEER);
    CHECK(rx.delivered[1] == 0);
    CHECK(ofi_wire_verdict_fails_peer(OFI_WIRE_SPOOFED) &&
          !ofi_wire_verdict_fails_peer(OFI_WIRE_UNKNOWN) &&
          !ofi_wire_verdict_fails_peer(OFI_WIRE_NOT_PEER) &&
          !ofi_wire_verdict_fails_peer(OFI_WIRE_HELD));
    reset(&rx);
}

static void test_order_and_window(void)
{
    rx_t rx = {0};
    reset(&rx);
    /* 2 and 1 come before 0: held, then all three in order. */
    CHECK(recv_msg(&rx, 1, 1, OFI_T_DATA, 1, 2, 0, "c") == OFI_WIRE_HELD);
    CHECK(recv_msg(&rx, 1, 1, OFI_T_DATA, 1, 1, 0, "b") == OFI_WIRE_HELD);
    CHECK(rx.peers[1].nheld == 2 && rx.peers[1].rx_known == 3);
    CHECK(recv_msg(&rx, 1, 1, OFI_T_DATA, 1, 1, 0, "b") == OFI_WIRE_DUPLICATE);
    CHECK(recv_msg(&rx, 1, 1, OFI_T_DATA, 1, 0, 0, "a") == OFI_WIRE_OK);
    CHECK(rx.delivered[1] == 3 && rx.last_seq[1] == 2 && strcmp(rx.text, "c") == 0);
    CHECK(rx.peers[1].nheld == 0 && rx.peers[1].held_bytes == 0 && rx.peers[1].rx_next == 3);
    /* A repeat of a delivered one, and one past the window. */
    CHECK(recv_msg(&rx, 1, 1, OFI_T_DATA, 1, 1, 0, "b") == OFI_WIRE_DUPLICATE);
    CHECK(recv_msg(&rx, 1, 1, OFI_T_DATA, 1, 3 + WINDOW, 0, "far") == OFI_WIRE_PAST_WINDOW);
    CHECK(recv_msg(&rx, 1, 1, OFI_T_DATA, 1, 3 + WINDOW - 1, 0, "edge") == OFI_WIRE_HELD);
    CHECK(recv_msg(&rx, 1, 1, OFI_T_DATA, 1, UINT32_MAX, 0, "wrap") == OFI_WIRE_DUPLICATE);
    /* A probe says what was sent: not less than delivered, not past the
     * window. */
    CHECK(recv_msg(&rx, 1, 1, OFI_T_PROBE, 0, 2, 0, NULL) == OFI_WIRE_PAST_WINDOW);
    CHECK(recv_msg(&rx, 1, 1, OFI_T_PROBE, 0, 3 + WINDOW + 1, 0, NULL) == OFI_WIRE_PAST_WINDOW);
    CHECK(recv_msg(&rx, 1, 1, OFI_T_PROBE, 0, 3 + WINDOW, 0, NULL) == OFI_WIRE_OK);
    CHECK(rx.controls == 1 && rx.peers[1].rx_known == 3 + WINDOW);
    reset(&rx);
}

static void test_credits(void)
{
    rx_t rx = {0};
    reset(&rx);
    ofi_wire_peer_t *p = &rx.peers[2];
    ofi_hdr_t h;
    for (int i = 0; i < WINDOW; i++) {
        CHECK(ofi_wire_can_send(p, WINDOW));
        ofi_wire_fill(p, &h, 0, OFI_T_DATA, 1, 0);
        CHECK(h.seq == (uint32_t)i);
        ofi_wire_sent(p, &h);
    }
    CHECK(!ofi_wire_can_send(p, WINDOW));
    /* Control messages take no seq. */
    ofi_wire_fill(p, &h, 0, OFI_T_PROBE, 0, p->tx_next);
    ofi_wire_sent(p, &h);
    CHECK(p->tx_next == WINDOW);
    /* An ack beyond what was sent is a lie; a stale one is ignored. */
    CHECK(recv_msg(&rx, 2, 2, OFI_T_ACK, 0, 0, WINDOW + 1, NULL) == OFI_WIRE_BAD_ACK);
    CHECK(p->tx_acked == 0);
    CHECK(recv_msg(&rx, 2, 2, OFI_T_ACK, 0, 0, 5, NULL) == OFI_WIRE_OK);
    CHECK(p->tx_acked == 5 && ofi_wire_can_send(p, WINDOW));
    CHECK(recv_msg(&rx, 2, 2, OFI_T_ACK, 0, 0, 3, NULL) == OFI_WIRE_OK);
    CHECK(p->tx_acked == 5);
    /* What we deliver is told back in our next header. */
    CHECK(recv_msg(&rx, 2, 2, OFI_T_DATA, 1, 0, 5, "x") == OFI_WIRE_OK);
    CHECK(ofi_wire_unacked_rx(p) == 1);
    ofi_wire_fill(p, &h, 0, OFI_T_ACK, 0, 0);
    CHECK(h.ack == 1);
    ofi_wire_sent(p, &h);
    CHECK(ofi_wire_unacked_rx(p) == 0);
    reset(&rx);
}

/* The handler fails its sender while messages wait behind the one it
 * delivers: the rest stays undelivered, and nothing is used after free. */
static void test_fail_in_delivery(void)
{
    rx_t rx = {0};
    reset(&rx);
    CHECK(recv_msg(&rx, 0, 0, OFI_T_DATA, 1, 1, 0, "b") == OFI_WIRE_HELD);
    CHECK(recv_msg(&rx, 0, 0, OFI_T_DATA, 1, 2, 0, "c") == OFI_WIRE_HELD);
    rx.fail_on_delivery = true;
    CHECK(recv_msg(&rx, 0, 0, OFI_T_DATA, 1, 0, 0, "a") == OFI_WIRE_OK);
    CHECK(rx.delivered[0] == 1 && strcmp(rx.text, "a") == 0);
    CHECK(rx.peers[0].nheld == 0 && util_list_empty(&rx.peers[0].held));
    CHECK(recv_msg(&rx, 0, 0, OFI_T_DATA, 1, 3, 0, "d") == OFI_WIRE_NOT_PEER);
    reset(&rx);
}

/* ---- puts with notification ---- */

#define PN_BASE 0x10000u /* where the target's one region of 64 bytes starts */

typedef struct pn_target {
    unsigned char region[64];
    uint8_t key[FERRY_BTL_KEY_MAX];
    int writes, notes;
    ofi_putn_answer_t answers[80];
    int nanswers;
    bool written_before_note; /* the data was in when the handler ran */
    bool owe;                 /* the answer cannot leave: owed */
    ofi_putn_peer_t *peer;
    uint64_t now;
    uint8_t order[64]; /* split ones' payload bytes, as their handlers ran */
} pn_target_t;

static int pn_write(void *arg, int rank, const uint8_t *key, uint64_t raddr, const void *data,
                    size_t n)
{
    pn_target_t *t = arg;
    (void)rank;
    if (memcmp(key, t->key, sizeof(t->key)) != 0 || raddr < PN_BASE ||
        raddr - PN_BASE > sizeof(t->region) || n > sizeof(t->region) - (raddr - PN_BASE))
        return FERRY_ERR_ACCESS;
    if (data == NULL)
        return FERRY_OK; /* a split put's check */
    memcpy(t->region + (raddr - PN_BASE), data, n);
    t->writes++;
    return FERRY_OK;
}

static bool pn_answer(void *arg, int rank, const ofi_putn_answer_t *a)
{
    pn_target_t *t = arg;
    (void)rank;
    if (t->owe)
        return ofi_putn_owe(t->peer, a, WINDOW) == FERRY_OK;
    CHECK(t->nanswers < 80);
    t->answers[t->nanswers++] = *a;
    return true;
}

static void pn_notify(void *arg, int rank, uint8_t tag, const unsigned char *payload, size_t plen)
{
    pn_target_t *t = arg;
    (void)rank;
    CHECK(tag < FERRY_BTL_TAG_BTL_MIN);
    t->written_before_note = t->writes > t->notes;
    /* Split ones carry one byte: their number, in the order they run. */
    if (plen == 1 && t->notes < 64)
        t->order[t->notes] = payload[0];
    t->notes++;
}

static uint64_t pn_now(void *arg)
{
    return ((pn_target_t *)arg)->now;
}

static const ofi_putn_ops_t pn_ops = {
    .write = pn_write, .now_ns = pn_now, .answer = pn_answer, .notify = pn_notify};

/* A PUTN's body, payload and data in buf; returns the length after the
 * header. */
static size_t pn_build(unsigned char *buf, const uint8_t *key, uint64_t raddr, uint64_t cookie,
                       const char *note, const char *data)
{
    ofi_putn_body_t b = {.raddr = raddr,
                         .cookie = cookie,
                         .size = (uint32_t)strlen(data),
                         .plen = (uint32_t)strlen(note),
                         .flags = cookie != 0 ? OFI_PUTN_TRACKED : 0};
    memcpy(b.key, key, sizeof(b.key));
    memcpy(buf, &b, sizeof(b));
    memcpy(buf + sizeof(b), note, b.plen);
    memcpy(buf + sizeof(b) + b.plen, data, b.size);
    return sizeof(b) + b.plen + b.size;
}

/* The body's checks, each tried with a body that should fail it; then the
 * target's order: data, answer, handler, refused or not. */
static void test_putn_target(void)
{
    pn_target_t t;
    ofi_putn_peer_t peer;
    unsigned char buf[256];
    ofi_putn_body_t b;
    const unsigned char *pl, *data;
    ofi_hdr_t h;
    /* The header: a PUTN carries a tag below the transport's, its answer
     * none. */
    CHECK(ofi_wire_parse(buf, build(buf, 1, OFI_T_PUTN, 3, 0, 0, "x"), NRANKS, &h) ==
              OFI_WIRE_OK &&
          h.tag == 3 && ofi_wire_ordered(h.type));
    CHECK(ofi_wire_parse(buf, build(buf, 1, OFI_T_PUTN, FERRY_BTL_TAG_BTL_MIN, 0, 0, "x"),
                         NRANKS, &h) == OFI_WIRE_BAD_TAG);
    CHECK(ofi_wire_parse(buf, build(buf, 1, OFI_T_PUTN_ANSWER, 1, 0, 0, "x"), NRANKS, &h) ==
          OFI_WIRE_BAD_TAG);
    CHECK(ofi_wire_parse(buf, build(buf, 1, OFI_T_PUTN_ANSWER, 0, 0, 0, "x"), NRANKS, &h) ==
              OFI_WIRE_OK &&
          ofi_wire_ordered(h.type));
    memset(&t, 0, sizeof(t));
    memset(t.key, 0xa5, sizeof(t.key));
    ofi_putn_peer_init(&peer);
    t.peer = &peer;

    size_t n = pn_build(buf, t.key, PN_BASE + 8, 7, "note", "data!");
    CHECK(ofi_putn_parse(buf, n, &b, &pl, &data) == NULL && b.plen == 4 && b.size == 5 &&
          pl == buf + sizeof(b) && data == pl + 4 && memcmp(data, "data!", 5) == 0);
    CHECK(ofi_putn_parse(buf, sizeof(b) - 1, &b, &pl, &data) != NULL);
    CHECK(ofi_putn_parse(buf, n - 1, &b, &pl, &data) != NULL);
    CHECK(ofi_putn_parse(buf, n + 1, &b, &pl, &data) != NULL);
    ofi_putn_body_t bad;
    memcpy(&bad, buf, sizeof(bad));
    bad.plen = UINT32_MAX; /* plen + size wraps in 32 bits to 4 */
    bad.size = 5;
    memcpy(buf, &bad, sizeof(bad));
    CHECK(ofi_putn_parse(buf, sizeof(bad) + 4, &b, &pl, &data) != NULL);
    n = pn_build(buf, t.key, PN_BASE, 7, "note", "data!");
    memcpy(&bad, buf, sizeof(bad));
    bad.flags |= 4;
    memcpy(buf, &bad, sizeof(bad));
    CHECK(strcmp(ofi_putn_parse(buf, n, &b, &pl, &data), "unknown flags") == 0);
    bad.flags = OFI_PUTN_TRACKED;
    bad.split = 1;
    memcpy(buf, &bad, sizeof(bad));
    CHECK(strcmp(ofi_putn_parse(buf, n, &b, &pl, &data), "a reserved field set") == 0);
    bad.split = 0;
    bad.cookie = 0;
    memcpy(buf, &bad, sizeof(bad));
    CHECK(ofi_putn_parse(buf, n, &b, &pl, &data) != NULL);
    bad.flags = 0;
    bad.cookie = 9;
    memcpy(buf, &bad, sizeof(bad));
    CHECK(ofi_putn_parse(buf, n, &b, &pl, &data) != NULL);
    /* Malformed: nothing done at all. */
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) != NULL);
    CHECK(t.writes == 0 && t.notes == 0 && t.nanswers == 0);
    n = pn_build(buf, t.key, PN_BASE, 0, "", "");
    CHECK(ofi_putn_target(&peer, 1, FERRY_BTL_TAG_BTL_MIN, buf, n, &pn_ops, &t) != NULL);
    CHECK(t.notes == 0);

    /* Tracked, landing: written, answered OK, then the handler. */
    n = pn_build(buf, t.key, PN_BASE + 8, 7, "note", "data!");
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    CHECK(t.writes == 1 && t.notes == 1 && t.written_before_note && t.nanswers == 1 &&
          t.answers[0].cookie == 7 && t.answers[0].status == FERRY_OK &&
          memcmp(t.region + 8, "data!", 5) == 0);
    /* Tracked, across the region's end: refused, answered so, handler run. */
    n = pn_build(buf, t.key, PN_BASE + 62, 8, "n", "xyz");
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    CHECK(t.writes == 1 && t.notes == 2 && t.nanswers == 2 && t.answers[1].cookie == 8 &&
          t.answers[1].status == FERRY_ERR_ACCESS);
    /* Untracked, landing: no answer. Untracked, a wrong key: a refusal. */
    n = pn_build(buf, t.key, PN_BASE, 0, "", "abc");
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    CHECK(t.writes == 2 && t.notes == 3 && t.nanswers == 2);
    uint8_t other[FERRY_BTL_KEY_MAX];
    memset(other, 0x5a, sizeof(other));
    n = pn_build(buf, other, PN_BASE, 0, "", "abc");
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    CHECK(t.notes == 4 && t.nanswers == 3 && t.answers[2].cookie == 0 &&
          t.answers[2].status == FERRY_ERR_ACCESS);
    /* A put of no bytes needs no key. */
    n = pn_build(buf, other, 0, 9, "z", "");
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    CHECK(t.nanswers == 4 && t.answers[3].status == FERRY_OK && t.notes == 5);

    /* Owed: answers kept in order, one refusal at a time, and no more
     * than a window of tracked ones and that refusal. */
    t.owe = true;
    n = pn_build(buf, other, PN_BASE, 0, "", "abc");
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    CHECK(peer.nowed == 1 && peer.refusal_owed);
    for (uint64_t c = 1; c <= WINDOW; c++) {
        n = pn_build(buf, t.key, PN_BASE, c, "", "q");
        CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    }
    CHECK(peer.nowed == WINDOW + 1);
    int notes = t.notes;
    n = pn_build(buf, t.key, PN_BASE, WINDOW + 1, "", "q");
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    CHECK(t.notes == notes); /* the budget broken: no handler */
    CHECK(ofi_putn_owed_first(&peer)->cookie == 0);
    ofi_putn_owed_pop(&peer);
    CHECK(!peer.refusal_owed && ofi_putn_owed_first(&peer)->cookie == 1);
    util_list_t done;
    util_list_init(&done);
    ofi_putn_peer_fail(&peer, FERRY_ERR_UNREACH, &done, true);
    CHECK(peer.nowed == 0 && peer.owed == NULL && util_list_empty(&done));
}

/* A split put's notification: tracked, numbered split, one payload byte
 * (its number), size bytes announced and none attached. */
static size_t pn_split(unsigned char *buf, const uint8_t *key, uint64_t raddr, uint64_t cookie,
                       uint32_t split, uint32_t size)
{
    ofi_putn_body_t b = {.raddr = raddr,
                         .cookie = cookie,
                         .size = size,
                         .plen = 1,
                         .flags = OFI_PUTN_TRACKED | OFI_PUTN_SPLIT,
                         .split = split};
    memcpy(b.key, key, sizeof(b.key));
    memcpy(buf, &b, sizeof(b));
    buf[sizeof(b)] = (uint8_t)split;
    return sizeof(b) + 1;
}

/* The target's side of split puts: a notification waits for its write
 * and runs once it lands, in the order sent, answers in that order; a
 * write before its notification lets it run at once; a refused key runs
 * at once, or in its turn, and its late write is dropped; what a peer
 * may not do (out of order, beyond the window, numbered twice, a tracked
 * put overtaking a held one, malformed bodies) is refused; held ones give
 * up after their time, answered refused. */
static void test_putn_split(void)
{
    pn_target_t t;
    ofi_putn_peer_t peer;
    unsigned char buf[256];
    ofi_putn_body_t b;
    const unsigned char *pl, *data;
    memset(&t, 0, sizeof(t));
    memset(t.key, 0xa5, sizeof(t.key));
    ofi_putn_peer_init(&peer);
    t.peer = &peer;
    uint8_t other[FERRY_BTL_KEY_MAX];
    memset(other, 0x5a, sizeof(other));

    /* The body's rules. */
    size_t n = pn_split(buf, t.key, PN_BASE, 1, 0, 32);
    CHECK(ofi_putn_parse(buf, n, &b, &pl, &data) == NULL && data == NULL && b.size == 32 &&
          b.plen == 1 && pl == buf + sizeof(b));
    CHECK(ofi_putn_parse(buf, n + 4, &b, &pl, &data) != NULL); /* data attached */
    ofi_putn_body_t bad;
    memcpy(&bad, buf, sizeof(bad));
    bad.flags = OFI_PUTN_SPLIT; /* untracked */
    bad.cookie = 0;
    memcpy(buf, &bad, sizeof(bad));
    CHECK(ofi_putn_parse(buf, n, &b, &pl, &data) != NULL);
    n = pn_split(buf, t.key, PN_BASE, 1, 0, 0); /* no bytes */
    CHECK(ofi_putn_parse(buf, n, &b, &pl, &data) != NULL);
    memcpy(&bad, buf, sizeof(bad));
    bad.size = 32;
    bad.plen = OFI_PUTN_SPLIT_PAYLOAD + 1;
    memcpy(buf, &bad, sizeof(bad));
    CHECK(ofi_putn_parse(buf, sizeof(bad) + OFI_PUTN_SPLIT_PAYLOAD + 1, &b, &pl, &data) != NULL);

    /* Notification first: held, nothing answered, until its write lands. */
    n = pn_split(buf, t.key, PN_BASE, 1, 0, 32);
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    CHECK(t.notes == 0 && t.nanswers == 0 && peer.nheld == 1);
    /* Another behind it, and a tracked one in one message may not pass. */
    n = pn_split(buf, t.key, PN_BASE, 2, 1, 32);
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    n = pn_build(buf, t.key, PN_BASE, 3, "x", "y");
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) != NULL);
    /* An untracked one may: nothing of its answers is ordered. */
    n = pn_build(buf, t.key, PN_BASE, 0, "u", "v");
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    CHECK(t.notes == 1 && t.nanswers == 0);
    /* The second one's write lands first: still nothing (order). */
    CHECK(ofi_putn_landed(&peer, 1, 1, &pn_ops, &t) == NULL);
    CHECK(t.notes == 1 && t.nanswers == 0 && peer.nheld == 2);
    CHECK(ofi_putn_landed(&peer, 1, 1, &pn_ops, &t) != NULL); /* twice */
    /* The first's: both run, in order, answered in order, the count of
     * those run in each answer. */
    CHECK(ofi_putn_landed(&peer, 1, 0, &pn_ops, &t) == NULL);
    CHECK(t.notes == 3 && t.order[1] == 0 && t.order[2] == 1 && t.nanswers == 2);
    CHECK(t.answers[0].cookie == 1 && t.answers[0].status == FERRY_OK &&
          t.answers[0].splits == 1);
    CHECK(t.answers[1].cookie == 2 && t.answers[1].status == FERRY_OK &&
          t.answers[1].splits == 2);
    CHECK(peer.nheld == 0 && peer.split_base == 2 && peer.landed == 0);

    /* Write first: the notification runs on arrival. */
    CHECK(ofi_putn_landed(&peer, 1, 2, &pn_ops, &t) == NULL && t.notes == 3);
    n = pn_split(buf, t.key, PN_BASE, 4, 2, 32);
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    CHECK(t.notes == 4 && t.nanswers == 3 && t.answers[2].status == FERRY_OK &&
          peer.split_base == 3);
    /* Out of order: refused. */
    n = pn_split(buf, t.key, PN_BASE, 5, 4, 32);
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) != NULL);
    CHECK(t.notes == 4 && peer.nheld == 0);

    /* A refused key, nothing held: answered refused and run at once; its
     * write, should the provider still take it, is dropped. */
    n = pn_split(buf, other, PN_BASE, 5, 3, 32);
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    CHECK(t.notes == 5 && t.nanswers == 4 && t.answers[3].status == FERRY_ERR_ACCESS &&
          peer.split_base == 4);
    CHECK(ofi_putn_landed(&peer, 1, 3, &pn_ops, &t) == NULL && peer.landed == 0);
    /* A refused key behind a held one: runs in its turn, refused, and
     * its write may land meanwhile without harm. */
    n = pn_split(buf, t.key, PN_BASE, 6, 4, 32);
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    n = pn_split(buf, other, PN_BASE, 7, 5, 32);
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    CHECK(t.notes == 5 && peer.nheld == 2);
    CHECK(ofi_putn_landed(&peer, 1, 5, &pn_ops, &t) == NULL && t.notes == 5);
    CHECK(ofi_putn_landed(&peer, 1, 4, &pn_ops, &t) == NULL);
    CHECK(t.notes == 7 && t.nanswers == 6 && t.answers[4].cookie == 6 &&
          t.answers[4].status == FERRY_OK && t.answers[5].cookie == 7 &&
          t.answers[5].status == FERRY_ERR_ACCESS && peer.split_base == 6);

    /* The window: writes numbered past it are refused; held ones at most
     * a window, the next refused. */
    CHECK(ofi_putn_landed(&peer, 1, 6 + OFI_PUTN_SPLIT_MAX, &pn_ops, &t) != NULL);
    CHECK(ofi_putn_landed(&peer, 1, 6 + OFI_PUTN_SPLIT_MAX - 1, &pn_ops, &t) == NULL);
    int notes = t.notes;
    for (uint32_t i = 0; i < OFI_PUTN_SPLIT_MAX; i++) {
        n = pn_split(buf, t.key, PN_BASE, 8 + i, 6 + i, 32);
        t.now = 1000 + i;
        CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) == NULL);
    }
    CHECK(peer.nheld == OFI_PUTN_SPLIT_MAX && t.notes == notes);
    n = pn_split(buf, t.key, PN_BASE, 8 + OFI_PUTN_SPLIT_MAX, 6 + OFI_PUTN_SPLIT_MAX, 32);
    CHECK(ofi_putn_target(&peer, 1, 3, buf, n, &pn_ops, &t) != NULL);
    /* Held past their time: the oldest two give up (answered refused,
     * run without data), the third stays; the one whose write came, last
     * of the window, waits its turn. */
    int answers = t.nanswers;
    CHECK(ofi_putn_held_expire(&peer, 1, 1002, &pn_ops, &t) == 2);
    CHECK(t.notes == notes + 2 && t.nanswers == answers + 2 &&
          t.answers[answers].status == FERRY_ERR_ACCESS &&
          t.answers[answers].splits == 7 && peer.nheld == OFI_PUTN_SPLIT_MAX - 2);
    /* Their writes, late, are dropped. */
    CHECK(ofi_putn_landed(&peer, 1, 6, &pn_ops, &t) == NULL && t.notes == notes + 2);
    /* The rest give up in turn; the last, its write in, runs OK. */
    CHECK(ofi_putn_held_expire(&peer, 1, UINT64_MAX, &pn_ops, &t) ==
          OFI_PUTN_SPLIT_MAX - 3);
    CHECK(peer.nheld == 0 && t.answers[t.nanswers - 1].status == FERRY_OK &&
          t.answers[t.nanswers - 2].status == FERRY_ERR_ACCESS);

    /* Numbers wrap: a peer's next split number after 2^32 - 1 is 0. */
    ofi_putn_peer_t w;
    ofi_putn_peer_init(&w);
    w.split_base = UINT32_MAX;
    t.peer = &w;
    t.nanswers = 0;
    n = pn_split(buf, t.key, PN_BASE, 1, UINT32_MAX, 32);
    CHECK(ofi_putn_target(&w, 1, 3, buf, n, &pn_ops, &t) == NULL);
    n = pn_split(buf, t.key, PN_BASE, 2, 0, 32);
    CHECK(ofi_putn_target(&w, 1, 3, buf, n, &pn_ops, &t) == NULL);
    CHECK(ofi_putn_landed(&w, 1, 0, &pn_ops, &t) == NULL && t.nanswers == 0);
    CHECK(ofi_putn_landed(&w, 1, UINT32_MAX, &pn_ops, &t) == NULL);
    CHECK(t.nanswers == 2 && w.split_base == 1 && t.answers[1].splits == 1);

    /* A failed peer's held ones go with it. */
    n = pn_split(buf, t.key, PN_BASE, 3, 1, 32);
    CHECK(ofi_putn_target(&w, 1, 3, buf, n, &pn_ops, &t) == NULL && w.nheld == 1);
    util_list_t done;
    util_list_init(&done);
    ofi_putn_peer_fail(&w, FERRY_ERR_UNREACH, &done, true);
    CHECK(w.nheld == 0 && w.held == NULL);
    ofi_putn_peer_fail(&peer, FERRY_ERR_UNREACH, &done, true);
}

/* The initiator's count of split puts run: answers may only move it on,
 * never past what was sent. */
static void test_putn_split_answers(void)
{
    ofi_putn_peer_t p;
    ofi_putn_req_t r1 = {0}, r2 = {0}, *req;
    bool refused;
    ofi_putn_peer_init(&p);
    ofi_putn_sent_tracked(&p, &r1);
    ofi_putn_sent_tracked(&p, &r2);
    p.split_sent = 2;
    ofi_putn_answer_t a = {.cookie = 1, .status = FERRY_OK, .splits = 3};
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) != NULL);
    a.splits = 1;
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) == NULL &&
          req == &r1 && p.split_run == 1);
    a.cookie = 2;
    a.splits = 0; /* backwards */
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) != NULL);
    a.splits = 2;
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) == NULL &&
          req == &r2 && p.split_run == 2);
}

static void cb_none(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                    ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status)
{
}

/* The initiator: answers name the oldest tracked one, refusals never
 * outnumber the untracked ones sent, and malformed answers change nothing. */
static void test_putn_answers(void)
{
    ofi_putn_peer_t p;
    ofi_putn_req_t r1 = {0}, r2 = {0}, *req;
    bool refused;
    ofi_putn_answer_t a = {.cookie = 1, .status = FERRY_OK};
    ofi_putn_peer_init(&p);
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) != NULL);
    ofi_putn_sent_tracked(&p, &r1);
    ofi_putn_sent_tracked(&p, &r2);
    CHECK(r1.cookie == 1 && r2.cookie == 2 && p.ninflight == 2);
    a.cookie = 2;
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) != NULL);
    a.cookie = 1;
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a) - 1, &req, &refused) != NULL);
    a.splits = 1; /* no split put was sent */
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) != NULL);
    a.splits = 0;
    a.status = FERRY_ERR_UNREACH;
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) != NULL);
    CHECK(p.ninflight == 2);
    a.status = FERRY_ERR_ACCESS;
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) == NULL);
    CHECK(req == &r1 && !refused && r1.status == FERRY_ERR_ACCESS && p.ninflight == 1);
    /* Refusals: none before an untracked one was sent; then at most one
     * per untracked one; a refusal that says OK is malformed. */
    a.cookie = 0;
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) != NULL);
    ofi_putn_sent_untracked(&p, cb_none, NULL);
    a.status = FERRY_OK;
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) != NULL);
    a.status = FERRY_ERR_ACCESS;
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) == NULL);
    CHECK(refused && req == NULL);
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) != NULL);
    /* del_procs: r2 completes without its answer, which may still come,
     * before the answer of one sent later; anything else then is wrong. */
    util_list_t done;
    util_list_init(&done);
    ofi_putn_peer_fail(&p, FERRY_ERR_UNREACH, &done, false);
    CHECK(util_list_len(&done) == 1 && r2.status == FERRY_ERR_UNREACH && p.ninflight == 0);
    ofi_putn_req_t r3 = {0};
    ofi_putn_sent_tracked(&p, &r3);
    CHECK(r3.cookie == 3);
    a.cookie = 3;
    a.status = FERRY_OK;
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) != NULL);
    a.cookie = 2;
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) == NULL);
    CHECK(req == NULL && !refused && p.forgot_next == 0 && p.ninflight == 1);
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) != NULL);
    a.cookie = 3;
    CHECK(ofi_putn_answer(&p, (const void *)&a, sizeof(a), &req, &refused) == NULL);
    CHECK(req == &r3 && r3.status == FERRY_OK && p.ninflight == 0);
}

int main(void)
{
    test_parse();
    test_identity();
    test_order_and_window();
    test_credits();
    test_fail_in_delivery();
    test_putn_target();
    test_putn_answers();
    test_putn_split();
    test_putn_split_answers();
    for (int v = 0; v < OFI_WIRE_VERDICTS; v++)
        CHECK(strcmp(ofi_wire_verdict_str((ofi_wire_verdict_t)v), "?") != 0);
    CHECK(strcmp(ofi_wire_verdict_str(OFI_WIRE_VERDICTS), "?") == 0);
    printf("ofi wire: all checks passed\n");
    return 0;
}
