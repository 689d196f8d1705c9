/*
 * Fuzz harness: ofi's receive side (ofi_wire.c), what ofi_msg.c runs on
 * every message found in a posted buffer: the header's parse (length,
 * magic, type, tag, claimed rank), the check of the claimed rank against
 * the one the fabric names, sequence numbers, the window, the holding of
 * messages that came early, credits, and control messages. No fabric: the
 * input plays the messages and the fabric's word on who sent each.
 *
 * Input: one byte of set-up, then records, each a length byte and that many
 * bytes.
 *   set-up   ranks = 2 + (b & 3), window = 4 << ((b >> 2) & 3)
 *   record   byte 0 picks what happens:
 *            0x40 set: this process sends an ordered message to rank
 *                 (byte 0 & 0x3f) % ranks (so that acknowledgements have
 *                 something to acknowledge);
 *            0x80 set: the rest of the record is a message, as raw bytes,
 *                 from fabric rank (byte 0 & 0x3f) % (ranks + 1) - 1 (-1:
 *                 an address that is no rank);
 *            neither: a message built from the record's fields, so that the
 *                 fuzzer gets past the magic and lands near the window:
 *                 byte 1 type, 2 tag, 3 seq relative to what the receiver
 *                 expects (signed), 4 claimed rank (< 0x80: the fabric's,
 *                 else (b & 0x7f), 5 ack behind what we sent, 6 flags (1:
 *                 wrong magic), then the payload. A payload starting 0xfa
 *                 makes the handler fail its sender from inside the
 *                 delivery, as a handler's send to a dead peer does.
 * Checks, after every record: deliveries of each rank come in sequence
 * from 0 and only from a rank that claims to be itself; nothing is
 * delivered from a failed rank; a rank holds fewer messages than the
 * window, in order, within it, and held_bytes adds up; acknowledgements
 * never pass what was sent.
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

typedef struct harness {
    uint32_t nranks, window;
    ofi_wire_peer_t peers[MAX_RANKS];
    bool failed[MAX_RANKS];
    uint32_t delivered[MAX_RANKS]; /* the next seq each rank's delivery must carry */
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

static void fail_rank(harness_t *h, int rank)
{
    h->failed[rank] = true;
    ofi_wire_peer_clear(&h->peers[rank]);
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
    h->delivered[rank]++;
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
}

static void structured(harness_t *h, int rank, const uint8_t *rec, size_t len)
{
    unsigned char msg[512];
    ofi_hdr_t hdr;
    if (len < 7)
        return;
    size_t payload = len - 7 < sizeof(msg) - sizeof(hdr) ? len - 7 : sizeof(msg) - sizeof(hdr);
    const ofi_wire_peer_t *p = rank >= 0 ? &h->peers[rank] : &h->peers[0];
    hdr.type = rec[1];
    hdr.tag = rec[2];
    hdr.seq = p->rx_next + (uint32_t)(int32_t)(int8_t)rec[3];
    hdr.src = rec[4] < 0x80 ? (uint32_t)(rank >= 0 ? rank : 0) : (uint32_t)(rec[4] & 0x7f);
    /* The sender acknowledges what we sent it, or a little less. */
    hdr.ack = p->tx_next - rec[5];
    hdr.magic = (rec[6] & 1) ? 0x1234 : OFI_HDR_MAGIC;
    memcpy(msg, &hdr, sizeof(hdr));
    memcpy(msg + sizeof(hdr), rec + 7, payload);
    ofi_hdr_t out;
    ofi_wire_receive(msg, sizeof(hdr) + payload, rank, h->nranks, h->window, &ops, h, &out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    harness_t h;
    memset(&h, 0, sizeof(h));
    h.nranks = 2 + (data[0] & 3);
    h.window = 4u << ((data[0] >> 2) & 3);
    for (uint32_t r = 0; r < h.nranks; r++)
        ofi_wire_peer_init(&h.peers[r]);
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
            /* Ours: an ordered message leaves for a rank, if the window lets it. */
            int r = (int)((rec[0] & 0x3f) % h.nranks);
            ofi_hdr_t hdr;
            if (!h.failed[r] && ofi_wire_can_send(&h.peers[r], h.window)) {
                ofi_wire_fill(&h.peers[r], &hdr, 0, OFI_T_DATA, 1, 0);
                ofi_wire_sent(&h.peers[r], &hdr);
                check(hdr.seq + 1 == h.peers[r].tx_next, "a send did not take its seq");
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
    for (uint32_t r = 0; r < h.nranks; r++)
        ofi_wire_peer_clear(&h.peers[r]);
    return 0;
}
