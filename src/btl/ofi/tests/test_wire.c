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

int main(void)
{
    test_parse();
    test_identity();
    test_order_and_window();
    test_credits();
    test_fail_in_delivery();
    for (int v = 0; v < OFI_WIRE_VERDICTS; v++)
        CHECK(strcmp(ofi_wire_verdict_str((ofi_wire_verdict_t)v), "?") != 0);
    CHECK(strcmp(ofi_wire_verdict_str(OFI_WIRE_VERDICTS), "?") == 0);
    printf("ofi wire: all checks passed\n");
    return 0;
}
