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
 *   tag    DATA and PUTN: the active-message tag, below FERRY_BTL_TAG_BTL_MIN
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

#include <ferry/btl.h>

#include "util/list.h"

#define OFI_HDR_MAGIC 0x6f66u /* "of" */

/* Message types in ofi_hdr_t. DATA, CLOSE, the two atomic messages and the
 * two of a put with notification are ordered (they take a seq and count
 * against the window); PROBE to FAIL are control messages, handled as they
 * arrive, with no payload. */
enum {
    OFI_T_DATA = 1,  /* an active message */
    OFI_T_CLOSE = 2, /* the sender finalized: its silence from now on is no failure */
    OFI_T_PROBE = 3, /* are you there? seq: the sender's next seq */
    OFI_T_PONG = 4,  /* the answer to a probe; seq: the probe's */
    OFI_T_ACK = 5,   /* credits only (ack) */
    OFI_T_FAIL = 6,  /* the sender has failed the receiver: nothing more will pass */
    OFI_T_AMO_REQ = 7,    /* an atomic for the target to execute: btl_amo_msg_t */
    OFI_T_AMO_ANSWER = 8, /* its answer: btl_amo_msg_t */
    OFI_T_PUTN = 9,        /* a put with notification: ofi_putn_body_t, payload, data */
    OFI_T_PUTN_ANSWER = 10, /* its answer, or untracked ones refused: ofi_putn_answer_t */
    OFI_T_MAX = OFI_T_PUTN_ANSWER
};

/* Does a message of this type take a seq (and so count against the window)? */
static inline bool ofi_wire_ordered(uint8_t type)
{
    return type == OFI_T_DATA || type == OFI_T_CLOSE || type == OFI_T_AMO_REQ ||
           type == OFI_T_AMO_ANSWER || type == OFI_T_PUTN || type == OFI_T_PUTN_ANSWER;
}

/* May a message of this type carry a payload? */
static inline bool ofi_wire_has_payload(uint8_t type)
{
    return type == OFI_T_DATA || type == OFI_T_AMO_REQ || type == OFI_T_AMO_ANSWER ||
           type == OFI_T_PUTN || type == OFI_T_PUTN_ANSWER;
}

/* Does a message of this type carry an active-message tag (else its tag is
 * 0)? */
static inline bool ofi_wire_tagged(uint8_t type)
{
    return type == OFI_T_DATA || type == OFI_T_PUTN;
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
    OFI_WIRE_BAD_TAG,      /* DATA or PUTN with a tag of ferry's own, another with a tag */
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

/*
 * A put with notification (btl.h, put_notify_inline) in one message of its
 * own: OFI_T_PUTN, ordered like DATA and carrying the notification's tag in
 * its header, then
 *
 *   ofi_putn_body_t   64 bytes: where the data goes, under which key, how
 *                     many bytes of notification and of data follow, and
 *                     for a tracked one the cookie that names it
 *   payload           plen bytes: the notification
 *   data              size bytes: the put's data
 *
 * as one message of at most the module's largest send. The target (which
 * takes it in order, as DATA) writes the data if the key allows, answers,
 * and then runs the tag's handler with the payload, refused or not. The
 * answer, OFI_T_PUTN_ANSWER with an ofi_putn_answer_t, is ordered too and
 * leaves (or is owed, ahead of everything sent later) before the handler
 * runs: a tracked one's always, naming its cookie and status; for untracked
 * ones only a refusal, cookie 0, and only while no refusal is owed to that
 * peer already. So a refusal reaches the initiator before anything the
 * target sends after handling the message, and never more refusals than
 * untracked puts were sent.
 *
 * Tracked ones are answered in the order sent, so the initiator keeps them
 * in that order and an answer must name the oldest. An initiator keeps at
 * most `window` tracked ones in flight to one peer; a target that owes a
 * peer more answers than that (its transmit slots or window full) takes it
 * for a peer that broke that budget.
 */

/*
 * Split puts (OFI_PUTN_SPLIT), where the provider does not order a send
 * after a write but carries completion data with one (shm): the data goes
 * by fi_writedata, its completion data at the target the put's split
 * number (32 bits, consecutive per initiator, from 0, wrapping), and the
 * PUTN message carries the body and payload only (size bytes of data
 * announced, none attached; tracked; plen at most OFI_PUTN_SPLIT_PAYLOAD).
 * The target runs them in the order sent, each once its write has landed
 * (ofi_putn_landed) or at once when its own check of the key refuses it:
 * until then it holds the notification, at most OFI_PUTN_SPLIT_MAX of them,
 * and answers nothing after it (answers stay in the order sent). Every
 * answer says how many split puts the target has run (splits), which
 * bounds what the initiator may have in flight to OFI_PUTN_SPLIT_MAX. A
 * write numbered before the oldest held is one the target gave up on
 * (refused, or held past FERRY_OFI_REQUEST_TIMEOUT, then answered
 * FERRY_ERR_ACCESS): dropped. One beyond the window, or numbered twice,
 * fails the peer.
 */
#define OFI_PUTN_SPLIT_MAX 64u
#define OFI_PUTN_SPLIT_PAYLOAD 64u

/* ofi_putn_body_t.flags. */
enum { OFI_PUTN_TRACKED = 1u, OFI_PUTN_SPLIT = 2u };

typedef struct ofi_putn_body {
    uint64_t raddr;  /* where the data goes, an address of the target */
    uint64_t cookie; /* OFI_PUTN_TRACKED: names the put at the initiator (not 0); else 0 */
    uint32_t size;   /* bytes of data, after the payload (split: by the write) */
    uint32_t plen;   /* bytes of notification, right after this body */
    uint32_t flags;  /* OFI_PUTN_TRACKED, OFI_PUTN_SPLIT, or 0 */
    uint32_t split;  /* OFI_PUTN_SPLIT: its split number; else 0 */
    uint8_t key[FERRY_BTL_KEY_MAX]; /* the target's key (ofi_key_t) */
} ofi_putn_body_t;

_Static_assert(sizeof(ofi_putn_body_t) == 64, "ofi_putn_body_t is 64 bytes on the wire");

typedef struct ofi_putn_answer {
    uint64_t cookie; /* the tracked put answered; 0: untracked ones were refused */
    int32_t status;  /* FERRY_OK or FERRY_ERR_ACCESS; a refusal's FERRY_ERR_ACCESS */
    uint32_t splits; /* split puts from the initiator the target has run (mod 2^32) */
} ofi_putn_answer_t;

_Static_assert(sizeof(ofi_putn_answer_t) == 16, "ofi_putn_answer_t is 16 bytes on the wire");

/* One tracked put with notification in flight, at its initiator. */
typedef struct ofi_putn_req {
    util_list_item_t link;
    ferry_btl_endpoint_t *ep;
    uint64_t cookie;
    ferry_btl_rdma_cb_t cb;
    void *cbctx, *cbdata, *local;
    uint64_t deadline_ns; /* FERRY_OFI_REQUEST_TIMEOUT after it was sent */
    int status; /* once answered or failed */
} ofi_putn_req_t;

/* Both ends' state of puts with notification with one peer; zeroed then
 * ofi_putn_peer_init, freed by ofi_putn_peer_clear. */
typedef struct ofi_putn_peer {
    /* As initiator. */
    util_list_t inflight;   /* ofi_putn_req_t, oldest first */
    size_t ninflight;
    uint64_t last_cookie;   /* of the last tracked one sent */
    /* Tracked ones completed without their answer (del_procs), cookies
     * forgot_next .. forgot_last when forgot_next is not 0: their answers
     * may still come, in order, ahead of any other, and are dropped. */
    uint64_t forgot_next, forgot_last;
    uint64_t untracked_sent; /* untracked ones sent, and refusals heard of */
    uint64_t refusals_heard;
    ferry_btl_rdma_cb_t refused_cb; /* the last untracked one's: told of refusals */
    void *refused_cbctx;
    /* As target: answers owed to the peer that could not leave yet, oldest
     * first, in a ring of window + 1 allocated with the first. */
    ofi_putn_answer_t *owed;
    uint32_t owed_head, nowed, owed_cap;
    bool refusal_owed; /* one of them is a refusal */
    /* Split puts as initiator: sent, and run by the target (its answers). */
    uint32_t split_sent, split_run;
    /* As target: split_base is the number of the oldest not run; held
     * those of its notifications here (from split_base on, in a ring of
     * OFI_PUTN_SPLIT_MAX allocated with the first), landed the writes come
     * (bit i: split_base + i). */
    uint32_t split_base, nheld, held_head;
    uint64_t landed, refused; /* refused: held ones the key check refused */
    struct ofi_putn_held *held;
} ofi_putn_peer_t;

/* A split put's notification the target holds until its write lands. */
typedef struct ofi_putn_held {
    uint64_t cookie;
    uint64_t since_ns;
    uint8_t tag;
    uint32_t plen;
    unsigned char payload[OFI_PUTN_SPLIT_PAYLOAD];
} ofi_putn_held_t;

void ofi_putn_peer_init(ofi_putn_peer_t *p);
/* Moves the requests in flight to done (a list of ofi_putn_req_t) with
 * status, for their callbacks, their answers to be dropped should they
 * come; with drop_owed (the peer is gone) forgets the answers owed to it
 * too, and frees what p holds. */
void ofi_putn_peer_fail(ofi_putn_peer_t *p, int status, util_list_t *done, bool drop_owed);

/* Moves the tracked ones in flight whose deadline is before now (the
 * oldest first: they were sent in order) to done with FERRY_ERR_TIMEOUT;
 * their answers, should they still come, are dropped as those of
 * ofi_putn_peer_fail's, and they count against the window until then.
 * Returns how many. */
size_t ofi_putn_expire(ofi_putn_peer_t *p, uint64_t now, util_list_t *done);

/* A PUTN's body (the message after its header, len bytes) checked: NULL
 * with *b_out filled and *payload_out, *data_out pointing into body when it
 * is well formed, else what is wrong with it, for the log. Lengths must add
 * up to len exactly, flags be known, the reserved word zero, and a cookie
 * present exactly when tracked. */
const char *ofi_putn_parse(const unsigned char *body, size_t len, ofi_putn_body_t *b_out,
                           const unsigned char **payload_out, const unsigned char **data_out);

/* An answer's body checked the same way. */
const char *ofi_putn_answer_parse(const unsigned char *body, size_t len, ofi_putn_answer_t *a_out);

/* What a target does with a PUTN, for ofi_putn_target. */
typedef struct ofi_putn_ops {
    /* Writes n bytes of data at raddr under key (n > 0) if the key, range
     * and FERRY_ACCESS_REMOTE_WRITE allow: FERRY_OK, or FERRY_ERR_ACCESS
     * with nothing written. With data NULL (a split put's, whose data the
     * write brings) only checks. */
    int (*write)(void *arg, int rank, const uint8_t *key, uint64_t raddr, const void *data,
                 size_t n);
    /* The time, for how long a split put's notification is held. */
    uint64_t (*now_ns)(void *arg);
    /* Sends the answer to rank now, or owes it (ofi_putn_owe) ahead of
     * anything sent to rank later. false when rank was failed instead
     * (its handler then does not run). */
    bool (*answer)(void *arg, int rank, const ofi_putn_answer_t *a);
    /* Runs tag's handler with the notification. */
    void (*notify)(void *arg, int rank, uint8_t tag, const unsigned char *payload, size_t plen);
} ofi_putn_ops_t;

/* The target's side of a PUTN that rank sent (delivered in order, tag from
 * its header): the body checked (nothing done and the reason returned when
 * it is malformed), the data written (a put of no bytes needs no key, as a
 * put's), the answer given, then the handler run, refused or not, unless
 * giving the answer failed rank. NULL when well formed. p is rank's state,
 * read for a refusal owed already. */
const char *ofi_putn_target(ofi_putn_peer_t *p, int rank, uint8_t tag,
                            const unsigned char *body, size_t len, const ofi_putn_ops_t *ops,
                            void *arg);

/* A split put's write from rank landed at the target, numbered split (its
 * completion data): the notifications it lets through run, in order. NULL,
 * or what is wrong with the number (the peer is to be failed). */
const char *ofi_putn_landed(ofi_putn_peer_t *p, int rank, uint32_t split,
                            const ofi_putn_ops_t *ops, void *arg);

/* Gives up on the split puts held since before since_ns: each is answered
 * FERRY_ERR_ACCESS and its handler runs without the data, then those
 * behind it that can run. Returns how many it gave up on. */
size_t ofi_putn_held_expire(ofi_putn_peer_t *p, int rank, uint64_t since_ns,
                            const ofi_putn_ops_t *ops, void *arg);

/* Keeps an answer that could not leave: FERRY_OK; FERRY_ERR_PROTO when the
 * ring is full (the peer has more tracked ones in flight than window: it
 * broke the budget); FERRY_ERR_NO_MEMORY. A refusal while one is owed
 * already is dropped (FERRY_OK): one suffices. */
int ofi_putn_owe(ofi_putn_peer_t *p, const ofi_putn_answer_t *a, uint32_t window);

/* The oldest answer owed, or NULL; and taking it off once it left. */
static inline const ofi_putn_answer_t *ofi_putn_owed_first(const ofi_putn_peer_t *p)
{
    return p->nowed > 0 ? &p->owed[p->owed_head] : NULL;
}
void ofi_putn_owed_pop(ofi_putn_peer_t *p);

/* The initiator's records of one sent: a tracked one (req, its cookie
 * set here) or an untracked one (its callback told of refusals). */
void ofi_putn_sent_tracked(ofi_putn_peer_t *p, ofi_putn_req_t *req);
void ofi_putn_sent_untracked(ofi_putn_peer_t *p, ferry_btl_rdma_cb_t cb, void *cbctx);
/* Tracked ones whose answer is still due: in flight, and those completed
 * without it. The target holds the initiator to at most a window of them. */
static inline uint64_t ofi_putn_due(const ofi_putn_peer_t *p)
{
    return p->ninflight + (p->forgot_next != 0 ? p->forgot_last - p->forgot_next + 1 : 0);
}

/* The cookie the next tracked one will carry. */
static inline uint64_t ofi_putn_next_cookie(const ofi_putn_peer_t *p)
{
    return p->last_cookie + 1 != 0 ? p->last_cookie + 1 : 1;
}

/* An answer arrived from the peer (body after the header): NULL and either
 * *req_out, the oldest tracked one, off the list with its status set, or
 * *refused_out true for untracked ones refused, or neither for the answer
 * of one completed without it (dropped); else what is wrong (an
 * answer to nothing in flight or not to the oldest, more refusals than
 * untracked ones were sent, a malformed body), nothing changed. */
const char *ofi_putn_answer(ofi_putn_peer_t *p, const unsigned char *body, size_t len,
                            ofi_putn_req_t **req_out, bool *refused_out);

#endif /* BTL_OFI_WIRE_H */
