/*
 * Active messages of any size (src/api/am_large.c): rendezvous above a
 * path's max send size, data handlers that receive into memory of their
 * own choosing, and the hooks the tagged-messaging layer (src/msg) builds
 * its eager and rendezvous protocols on.
 *
 * Wire messages, all on ferry's own tags (between the application's and
 * the transports'), all little-endian host order as the rest of ferry:
 *   RTS      sender -> receiver: a message of len bytes is ready (id, inner
 *            tag, protocol, and for GET the address and remote key of the
 *            sender's registered buffer), followed by up to
 *            API_AM_HDR_MAX bytes of header for an internal handler;
 *   FIN      receiver -> sender (GET): the receiver is done with id;
 *   CTS      receiver -> sender (PUT): put n bytes of id at this address;
 *            (PIPE): send n bytes of id as fragments (no address, no key);
 *   PUT_DONE sender -> receiver (PUT): the put of id is over (status);
 *            (PIPE): the sender gave up streaming id (an error status);
 *   FRAG     sender -> receiver (PIPE): bytes [off, off + n) of id, after
 *            an am_frag_t header; all of a message's fragments go on the
 *            path of its announcement, in order (off is what the receiver
 *            has so far), and the receiver answers the last with FIN;
 *   MSG      one fragment for src/msg: its header, then its data.
 * Every field a peer writes is checked before use: lengths against the
 * message, inner tags against the table, ids against what this process
 * has outstanding with that peer, sizes against FERRY_AM_LARGE_MAX. What a
 * peer may have open at a receiver (its announcements, and the answers to
 * them waiting for room on the path back) is bounded by twice
 * FERRY_AM_LARGE_INFLIGHT, which a sender keeps to; a peer past it is taken
 * as failed.
 */
#ifndef API_AM_LARGE_H
#define API_AM_LARGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/btl.h>
#include <ferry/ferry.h>

enum {
    API_TAG_AM_RTS = FERRY_BTL_TAG_FERRY_MIN + 1,
    API_TAG_AM_FIN = FERRY_BTL_TAG_FERRY_MIN + 2,
    API_TAG_AM_CTS = FERRY_BTL_TAG_FERRY_MIN + 3,
    API_TAG_AM_PUT_DONE = FERRY_BTL_TAG_FERRY_MIN + 4,
    /* The tagged-messaging layer's fragments (an internal handler). */
    API_TAG_MSG = FERRY_BTL_TAG_FERRY_MIN + 5,
    /* A fragment of a PIPE-mode message (+ 6 and + 7 are api.h's). */
    API_TAG_AM_FRAG = FERRY_BTL_TAG_FERRY_MIN + 8
};

/* The wire messages (tests craft them to attack the checks). */
typedef struct am_rts {
    uint64_t id;
    uint64_t len;
    uint64_t raddr; /* GET: the sender's buffer */
    uint8_t tag;    /* application tag, or API_TAG_MSG */
    uint8_t proto;  /* FERRY_AM_RNDV_GET, _PUT or _PIPE */
    uint16_t hdr_len;
    /* With AM_RTS_KEY_LEN in flags, the key's first key_len bytes follow
     * (the rest is zero: a packed key takes some 60 of its 256 bytes, and
     * the whole would be four more cache lines through the transport);
     * without, the whole key. The internal header follows the key. */
    uint16_t key_len;
    uint16_t flags;
    ferry_rkey_t rkey; /* GET: its key */
} am_rts_t;

/* am_rts_t's flags. */
#define AM_RTS_KEY_LEN 1u
/* What precedes the key on the wire. */
#define AM_RTS_FIXED offsetof(am_rts_t, rkey)

typedef struct am_fin {
    uint64_t id;
    int32_t status;
    uint32_t pad;
} am_fin_t;

typedef struct am_cts {
    uint64_t id;
    uint64_t len; /* bytes to put (or send): at most the message */
    uint64_t raddr; /* PUT; PIPE: 0 */
    ferry_rkey_t rkey; /* PUT; PIPE: zeros */
} am_cts_t;

/* The header of a FRAG; the data follows. */
typedef struct am_frag {
    uint64_t id;
    uint64_t off; /* of the data's first byte in the message */
} am_frag_t;

/* Largest header an internal sender puts before its data. */
#define API_AM_HDR_MAX 64

/* Default of FERRY_AM_LARGE_MAX. */
#define API_AM_LARGE_MAX_DEFAULT ((size_t)4 << 30)
/* Default of FERRY_AM_LARGE_INFLIGHT: large messages one process keeps in
 * flight to one peer (a peer with twice as many open at a receiver, with
 * the answers owed to it, is taken as failed there). */
#define API_AM_LARGE_INFLIGHT_DEFAULT ((size_t)1024)
/* FERRY_AM_RNDV_KEEP's default: unused GET registrations a path's cache
 * keeps (each takes one of sm's FERRY_SM_REG_SLOTS). */
#define API_AM_RNDV_KEEP_DEFAULT ((size_t)16)
/* The tagged layer's bounds on what one source may leave unmatched
 * (src/msg; declared with the API's parameters so that ferry_info lists
 * them and ferry_init checks them). */
#define API_MSG_UNEXPECTED_BYTES_DEFAULT ((size_t)256 << 20)
#define API_MSG_UNEXPECTED_COUNT_DEFAULT ((size_t)1 << 20)

/* Declares FERRY_AM_LARGE_MAX, FERRY_AM_LARGE_INFLIGHT and FERRY_AM_RNDV
 * (at context creation, so that ferry_info lists them). */
int api_am_large_register_params(ferry_ctx_t *ctx);

/* Called from ferry_progress: control messages waiting for resources,
 * completions due, peers that failed. Returns events handled. */
int api_am_large_progress(ferry_ctx_t *ctx);

/* At finalize, before the barrier: drops every announced message nobody
 * took (its sender completes with FERRY_ERR_CANCELED), then progresses
 * until this process's own large sends are over (or their peers failed). */
void api_am_large_quiesce(ferry_ctx_t *ctx);

/* Frees what is left; safe when nothing was ever set up. */
void api_am_large_fini(ferry_ctx_t *ctx);

/* A message on one of the tags above, from the dispatcher. */
void api_am_large_recv(ferry_ctx_t *ctx, int src, uint8_t tag, const void *data, size_t len);

/* True while messages from src must wait (a large message before them is
 * still being taken in). */
bool api_am_large_holding(const ferry_ctx_t *ctx, int src);

/* Keeps a copy of an application message from src until the hold ends. */
void api_am_large_hold(ferry_ctx_t *ctx, int src, uint8_t tag, const void *data, size_t len);

/* Sends conv's data (more than the path's max send size) by rendezvous and
 * progresses until the receiver has it: ferry_am_send and its variants. */
int api_am_send_large_blocking(ferry_ctx_t *ctx, int dst, int tag, ferry_convertor_t *conv);

/* A large message's announcement to dst (data, len: as queued from a
 * callback) could not be sent (status): its send ends with status, its
 * callback due from progress. */
void api_am_large_rts_lost(ferry_ctx_t *ctx, int dst, const void *data, size_t len, int status);

/* Runs the application handler of tag (from am.c). */
void api_am_deliver(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len);

/* ---- for internal handlers (src/msg) ---- */

/* An internal handler's fragment: hdr/data as the sender wrote them. */
typedef void (*api_am_frag_cb_t)(ferry_ctx_t *ctx, int src, const void *data, size_t len,
                                 void *arg);
/* An internal handler's large message: its header, and the message to take
 * with ferry_am_recv_data(_conv) or drop. */
typedef void (*api_am_hdr_data_cb_t)(ferry_ctx_t *ctx, int src, const void *hdr, size_t hlen,
                                     ferry_am_data_t *data, size_t len, void *arg);

/* Sets the handlers of internal tag API_TAG_MSG (frag_cb NULL clears
 * them). FERRY_ERR_BUSY when another owner has them. */
int api_am_register_internal(ferry_ctx_t *ctx, api_am_frag_cb_t frag_cb,
                             api_am_hdr_data_cb_t data_cb, void *arg);

/*
 * Sends hlen header bytes and conv's data from its cursor to dst for the
 * internal handler: as one MSG fragment when they fit the path's eager size
 * for tagged messages (msg_eager_max, within the max send size; *done_out set true, nothing more happens: cb is not called), else
 * by rendezvous (*done_out false; cb runs from progress when the data may
 * be reused). FERRY_ERR_NO_RESOURCE: nothing sent, retry after progress.
 */
/*
 * The eager case of api_am_send_internal for contiguous data, without a
 * convertor: hlen header bytes then len bytes at data, as one MSG fragment.
 * FERRY_OK: sent (the buffers may be reused); 1: larger than the path's
 * eager size for tagged messages (its msg_eager_max, within its max send
 * size), nothing sent (use api_am_send_internal); otherwise as
 * api_am_send_internal (FERRY_ERR_NO_RESOURCE: retry after progress).
 */
int api_am_send_flat_internal(ferry_ctx_t *ctx, int dst, const void *hdr, size_t hlen,
                              const void *data, size_t len);

int api_am_send_internal(ferry_ctx_t *ctx, int dst, const void *hdr, size_t hlen,
                         ferry_convertor_t *conv, ferry_comp_cb_t cb, void *arg, bool *done_out);

/* For attack tests: what peer has open here (its announcements not yet
 * over, and the answers to them waiting for the transport), 0s before any
 * large message. */
void api_am_large_open(const ferry_ctx_t *ctx, int peer, size_t *recvs_out,
                       size_t *answers_out);

/* For attack tests: the announced address and remote key of a GET-mode
 * message (FERRY_ERR_NOT_SUPPORTED for PUT mode). */
int api_am_data_peek_key(const ferry_am_data_t *data, uint64_t *raddr_out, ferry_rkey_t *rkey_out);

#endif /* API_AM_LARGE_H */
