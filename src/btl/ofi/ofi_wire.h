/*
 * ofi's message format and what a receiver makes of a message, without
 * libfabric: the header, its parser, the per-peer sequence and window
 * state, and the holding of messages that overtook their predecessors. The
 * module (ofi_msg.c) feeds it what arrives in a posted buffer together with
 * the sender's rank as the fabric names it (FI_SOURCE through the address
 * vector); the fuzz harness (tests/fuzz_msg.c) feeds it bytes.
 *
 * Every message starts with a 16-byte ofi_hdr_t:
 *
 *   src    the sender's rank, as it says; only a cross-check of the rank the
 *          fabric gives, never taken for the sender's identity
 *   seq    DATA and CLOSE: numbers the sender's ordered messages to this
 *          receiver (from 0); PROBE: the sender's next seq (what it has sent
 *          is below it); PONG: the seq of the probe answered; FAIL: the
 *          ferry status the receiver was failed with, negated; else 0
 *   tag    DATA: the active-message tag, below FERRY_BTL_TAG_BTL_MIN
 *   type   OFI_T_*
 *   magic  OFI_HDR_MAGIC
 *   ack    the receiver's credit return: the sender has delivered every
 *          ordered message of the receiver's below ack
 *
 * Why a sequence at all: some providers complete receives out of the order
 * sent although they place them in order (ofi_rxm completes a message that
 * took its rendezvous path after smaller ones sent later), and the contract
 * promises order per endpoint. Why a window: a message that overtook its
 * predecessors is copied and held until they arrive, and a sender may have
 * at most `window` ordered messages not yet acknowledged, so a receiver
 * holds at most window - 1 messages per peer; a message beyond the window
 * is a protocol violation, as is an acknowledgement of messages never sent.
 */
#ifndef BTL_OFI_WIRE_H
#define BTL_OFI_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/list.h"

#define OFI_HDR_MAGIC 0x6f66u /* "of" */

/* Message types in ofi_hdr_t. DATA, CLOSE and the two atomic messages are
 * ordered (they take a seq and count against the window); PROBE to FAIL are
 * control messages, handled as they arrive, with no payload. */
enum {
    OFI_T_DATA = 1,  /* an active message */
    OFI_T_CLOSE = 2, /* the sender finalized: its silence from now on is no failure */
    OFI_T_PROBE = 3, /* are you there? seq: the sender's next seq */
    OFI_T_PONG = 4,  /* the answer to a probe; seq: the probe's */
    OFI_T_ACK = 5,   /* credits only (ack) */
    OFI_T_FAIL = 6,  /* the sender has failed the receiver: nothing more will pass */
    OFI_T_AMO_REQ = 7,    /* an atomic for the target to execute: btl_amo_msg_t */
    OFI_T_AMO_ANSWER = 8, /* its answer: btl_amo_msg_t */
    OFI_T_MAX = OFI_T_AMO_ANSWER
};

/* Does a message of this type take a seq (and so count against the window)? */
static inline bool ofi_wire_ordered(uint8_t type)
{
    return type == OFI_T_DATA || type == OFI_T_CLOSE || type == OFI_T_AMO_REQ ||
           type == OFI_T_AMO_ANSWER;
}

/* May a message of this type carry a payload? */
static inline bool ofi_wire_has_payload(uint8_t type)
{
    return type == OFI_T_DATA || type == OFI_T_AMO_REQ || type == OFI_T_AMO_ANSWER;
}

typedef struct ofi_hdr {
    uint32_t src;
    uint32_t seq;
    uint8_t tag;
    uint8_t type;
    uint16_t magic;
    uint32_t ack;
} ofi_hdr_t;

_Static_assert(sizeof(ofi_hdr_t) == 16, "ofi_hdr_t is 16 bytes on the wire");

/* What became of a message. OK and HELD are the only good ones. */
typedef enum {
    OFI_WIRE_OK = 0,       /* delivered or handled (with any held ones it freed) */
    OFI_WIRE_HELD,         /* overtook a predecessor: copied and held */
    OFI_WIRE_SHORT,        /* shorter than the header */
    OFI_WIRE_BAD_MAGIC,
    OFI_WIRE_BAD_TYPE,
    OFI_WIRE_BAD_TAG,      /* DATA with a tag of ferry's own, or control with a tag */
    OFI_WIRE_BAD_LENGTH,   /* a control message with a payload */
    OFI_WIRE_BAD_RANK,     /* claims a rank outside the job */
    OFI_WIRE_UNKNOWN,      /* from an address that is no rank of the job */
    OFI_WIRE_SPOOFED,      /* the fabric's rank and the claimed one differ */
    OFI_WIRE_NOT_PEER,     /* from a rank we no longer talk to (failed, closed) */
    OFI_WIRE_DUPLICATE,    /* a seq already delivered */
    OFI_WIRE_PAST_WINDOW,  /* a seq the window does not allow */
    OFI_WIRE_BAD_ACK,      /* acknowledges messages never sent */
    OFI_WIRE_NO_MEMORY,    /* could not hold it */
    OFI_WIRE_VERDICTS
} ofi_wire_verdict_t;

/* "bad magic", ...: for the log. */
const char *ofi_wire_verdict_str(ofi_wire_verdict_t v);

/* A verdict that means the sender itself (a rank the fabric vouches for)
 * broke the protocol, so that it is failed; the others are about strangers
 * or about nothing (OK, HELD). */
bool ofi_wire_verdict_fails_peer(ofi_wire_verdict_t v);

/* A message that arrived before its predecessors, held until they come. */
typedef struct ofi_held {
    util_list_item_t link;
    uint32_t seq;
    size_t len;
    unsigned char data[]; /* the whole message, header first */
} ofi_held_t;

/* The sequence and window state of one peer, both directions. */
typedef struct ofi_wire_peer {
    uint32_t rx_next;  /* seq of its next ordered message to deliver */
    uint32_t rx_known; /* it has sent every ordered message below this (held ones, probes) */
    uint32_t rx_acked; /* the ack we last sent it */
    uint32_t tx_next;  /* seq of our next ordered message to it */
    uint32_t tx_acked; /* it has delivered ours below this */
    uint32_t nheld;
    size_t held_bytes;
    util_list_t held; /* ofi_held_t, by seq */
} ofi_wire_peer_t;

void ofi_wire_peer_init(ofi_wire_peer_t *p);
/* Frees what it holds. */
void ofi_wire_peer_clear(ofi_wire_peer_t *p);

/* May another ordered message go to the peer (the window has room)? */
static inline bool ofi_wire_can_send(const ofi_wire_peer_t *p, uint32_t window)
{
    return (uint32_t)(p->tx_next - p->tx_acked) < window;
}

/* Fills the header of the next message to the peer: for an ordered type
 * the next seq, for PROBE and PONG seq, and the ack of what we delivered.
 * Nothing changes until ofi_wire_sent says it left. */
static inline void ofi_wire_fill(const ofi_wire_peer_t *p, ofi_hdr_t *h, uint32_t me,
                                 uint8_t type, uint8_t tag, uint32_t seq)
{
    h->src = me;
    h->seq = ofi_wire_ordered(type) ? p->tx_next : seq;
    h->tag = tag;
    h->type = type;
    h->magic = OFI_HDR_MAGIC;
    h->ack = p->rx_next;
}

/* The message h describes left: its seq is taken, its ack told. */
static inline void ofi_wire_sent(ofi_wire_peer_t *p, const ofi_hdr_t *h)
{
    if (ofi_wire_ordered(h->type))
        p->tx_next++;
    p->rx_acked = h->ack;
}

/* Credits owed: messages delivered since the last ack told. */
static inline uint32_t ofi_wire_unacked_rx(const ofi_wire_peer_t *p)
{
    return p->rx_next - p->rx_acked;
}

/* Checks a message's bytes by themselves: length, magic, type, tag,
 * claimed rank within nranks. OFI_WIRE_OK fills *h_out. */
ofi_wire_verdict_t ofi_wire_parse(const unsigned char *buf, size_t len, uint32_t nranks,
                                  ofi_hdr_t *h_out);

/* What a receiver does with the messages ofi_wire_receive lets through. */
typedef struct ofi_wire_ops {
    /* The state of rank (one the fabric vouches for), or NULL when it is no
     * longer a peer (failed, or deleted): its messages are then refused. */
    ofi_wire_peer_t *(*peer)(void *arg, int rank);
    /* Every accepted message of rank, in arrival order, before it is
     * delivered or held: it has been heard from, and h->ack was taken. */
    void (*heard)(void *arg, int rank, const ofi_hdr_t *h);
    /* An ordered message (DATA or CLOSE), in order; payload is what follows
     * the header. The peer may be failed from inside: the rest of what
     * waited then stays held until it is cleared. */
    void (*deliver)(void *arg, int rank, const ofi_hdr_t *h, const unsigned char *payload,
                    size_t len);
    /* A control message (PROBE, PONG, ACK, FAIL). */
    void (*control)(void *arg, int rank, const ofi_hdr_t *h);
} ofi_wire_ops_t;

/* The receive side of one message: buf/len as it arrived, fabric_rank the
 * sender as the fabric names it (-1: an address that is no rank of ours).
 * Parses, checks the claimed rank against the fabric's, then for an ordered
 * message delivers it and what it freed, holds it, or refuses it; for a
 * control message calls ops->control. window bounds what is held. *h_out
 * gets the header whenever it parsed (for the log), zeroes otherwise. */
ofi_wire_verdict_t ofi_wire_receive(const unsigned char *buf, size_t len, int fabric_rank,
                                    uint32_t nranks, uint32_t window, const ofi_wire_ops_t *ops,
                                    void *arg, ofi_hdr_t *h_out);

#endif /* BTL_OFI_WIRE_H */
