/*
 * The application API's state: active-message handlers, one-sided operations
 * in flight, and the barrier.
 */
#ifndef API_API_H
#define API_API_H

#include <ferry/ferry.h>

#include "api/rkey.h"
#include "bml/bml.h"
#include "btl/ctx.h"
#include "rt/progress.h"
#include "util/list.h"
#include "util/pool.h"

/* ferry's own active-message tags (between the application's and the
 * transports'). */
enum {
    API_TAG_BARRIER = FERRY_BTL_TAG_FERRY_MIN,
    /* Flush markers and their answers (onesided.c); FERRY_BTL_TAG_FERRY_MIN
     * + 1 .. + 5 and + 8 are am_large's. */
    API_TAG_FLUSH = FERRY_BTL_TAG_FERRY_MIN + 6,
    /* A small put with notification in one message, and a refusal of one
     * (onesided.c) */
    API_TAG_PUTN = FERRY_BTL_TAG_FERRY_MIN + 7,
    /* An atomic to a peer of several rails, and its answer (onesided.c) */
    API_TAG_AMO = FERRY_BTL_TAG_FERRY_MIN + 9
};

/* The message of API_TAG_AMO (onesided.c). An atomic to a peer with several
 * rails travels as ferry's own active message, which the bml keeps and
 * replays exactly once whichever rail carries it (bml.h), and the target's
 * API applies it with the CPU atomic every ferry atomic is; the answer
 * comes back the same way. A request is this header and key_len key bytes,
 * the key of the module named by name_hash and instance (as in a packed
 * key); an answer is the header alone, seq naming its request. */
enum { API_AMO_REQ = 1, API_AMO_ANSWER = 2 };

typedef struct api_amo_msg {
    uint8_t kind;     /* API_AMO_REQ or API_AMO_ANSWER */
    uint8_t amo;      /* REQ: 0 no fetch, 1 fetch, 2 compare-and-swap */
    uint8_t op;       /* REQ: the ferry_btl_atomic_op_t (0 for compare-and-swap) */
    uint8_t size;     /* REQ: 4 or 8 */
    uint8_t instance; /* REQ: which of the transport's modules the key is of */
    uint8_t key_len;  /* REQ: at most FERRY_BTL_KEY_MAX */
    uint8_t zero[2];
    int32_t status;    /* ANSWER: FERRY_OK or the refusal */
    uint32_t name_hash; /* REQ: api_rkey_name_hash of the transport's name */
    uint64_t seq;
    uint64_t raddr;    /* REQ */
    uint64_t operand;  /* REQ; ANSWER: the value before */
    uint64_t compare;  /* REQ */
} api_amo_msg_t;

/* An atomic's request from src, or the answer to one of ours (the
 * dispatcher, or am_large releasing what it held). */
void api_amo_recv(ferry_ctx_t *ctx, int src, const void *data, size_t len);

/* The largest put with notification that travels inside its message. */
#define API_PUTN_INLINE_MAX 4096

/* The message of API_TAG_PUTN (onesided.c): this header, then key_len key
 * bytes, plen payload bytes and len data bytes (PUTN_DATA); the header
 * alone sent back (PUTN_REFUSED). The key is of the module that carries the
 * traffic between the two (the initiator sends this way only to a peer on
 * one path), so the target resolves it with the module of its own path to
 * the sender. 16 bytes: with sm's ring header, an 8-byte put's key and
 * data, 48 bytes, which fit a cache line in half the ring positions. */
enum { API_PUTN_DATA = 1, API_PUTN_REFUSED = 2 };

typedef struct api_putn_hdr {
    uint8_t kind;    /* API_PUTN_DATA or API_PUTN_REFUSED */
    uint8_t tag;     /* the notification's, an application tag */
    uint8_t key_len; /* at most FERRY_BTL_KEY_MAX */
    uint8_t plen;    /* the notification's payload, at most FERRY_PUT_NOTIFY_MAX */
    uint32_t len;    /* the data's, at most API_PUTN_INLINE_MAX */
    uint64_t raddr;
} api_putn_hdr_t;

/* The most dissemination rounds a barrier needs: log2 of the largest job. */
#define API_BARRIER_ROUNDS 32

/* A put or get as the application started it; the transport may see it as
 * several pieces. */
typedef struct api_rdma_op {
    util_list_item_t link; /* in issue_queue while pieces remain to start, then done */
    bool is_put;
    int peer;
    int m; /* the module it goes through (without mp) */
    char *buf;
    size_t len;
    size_t issued;      /* bytes handed to the transport so far */
    size_t outstanding; /* pieces started and not completed */
    uint64_t raddr;
    uint8_t rkey[FERRY_BTL_KEY_MAX];
    ferry_btl_reg_t *lreg; /* the caller's registration with that transport, or NULL */
    int status;            /* first error, else FERRY_OK */
    ferry_comp_cb_t cb;
    void *arg;
    struct ferry_req *req; /* the request completed instead of cb, or NULL */
    bool issuing;          /* op_issue is at work on it: completions only count */
    /* To a peer with several rails (src/bml): what striping and failover
     * need (rdma.c), else NULL. */
    struct api_rdma_multi *mp;
} api_rdma_op_t;

/* Objects handed to the application (requests, key handles) whose memory
 * is kept when they are released and reused only after API_RECYCLE_DELAY
 * later releases, so that a stale pointer finds a cleared magic and is
 * refused instead of reading freed memory. */
#define API_RECYCLE_DELAY 64

typedef struct api_recycler {
    util_list_t released; /* oldest first */
    util_list_t all;      /* every object made, freed at teardown */
    size_t size;          /* of one object, its two links first */
} api_recycler_t;

/* What a transport callback with no record of ferry's (an atomic, a put or
 * get without a descriptor) needs to find its peer. */
typedef struct api_peer_slot {
    ferry_ctx_t *ctx;
    int rank;
} api_peer_slot_t;

struct api_state {
    struct {
        ferry_am_cb_t cb;
        void *arg;
    } am[FERRY_AM_TAG_MAX + 1];

    util_pool_t ops;
    bool ops_ready;
    util_list_t issue_queue; /* ops with pieces not yet started, in order */
    util_list_t done;        /* ops whose callback is due */
    util_list_t mems;        /* live registrations (ferry_mem_t), released at finalize */
    size_t *outstanding;     /* ops in flight per peer */
    int *first_error;        /* per peer, since the last flush */
    /* Per module: what names its entry in a remote key (api_rkey_name_hash
     * of its name, btl_ctx_module_instance), worked out once. */
    struct api_rkey_id {
        uint32_t name_hash;
        uint8_t instance;
    } *rkey_id;
    /* The raw remote key ferry_put/ferry_get resolved last (rdma.c): a key
     * whose header and entries (used bytes) are these again, for the same
     * module and rank, parses to the same header and key. */
    struct api_rkey_memo {
        size_t used; /* 0: empty */
        int m, dst;
        api_rkey_header_t hdr;
        uint8_t key[FERRY_BTL_KEY_MAX];
        uint8_t bytes[FERRY_RKEY_SIZE];
    } rkey_memo;

    /* Requests and key handles (onesided.c). */
    api_recycler_t reqs;
    api_recycler_t rkeys;
    util_list_t req_due;     /* requests whose callback is due */
    util_list_t flushes;     /* ferry_flush_nb not yet complete */
    util_list_t notify_q;    /* put-notify notifications waiting for resources */
    api_peer_slot_t *slots;  /* [size] */
    /* Quiet for active messages, per peer: an application message went to
     * it since the last marker; the last marker sent and the highest one it
     * answered; the marker this rank owes an answer to, when the transport
     * could not take the answer at once (0: none). */
    bool *am_dirty;
    uint64_t *flush_sent;
    uint64_t *flush_acked;
    uint64_t *flush_sent_ns; /* when the last marker to each peer left */
    uint64_t flush_timeout_ns; /* FERRY_FLUSH_TIMEOUT; 0: wait for ever */
    uint64_t *ack_owed;
    bool n_owed_hint; /* some ack_owed entry may be set */

    /* Sends from callbacks that met a full transport (onesided.c): active
     * messages per peer in order, and atomics, waiting for progress;
     * together at most cbq_max bytes (FERRY_CB_QUEUE_MAX). */
    util_list_t *cbq;   /* [size] of api_cbq_msg_t */
    util_list_t amo_q;  /* api_amo_wait_t, oldest first */
    /* Atomics to peers of several rails sent as API_TAG_AMO messages,
     * waiting for their answers (api_amo_sent_t), and the next one's
     * number. */
    util_list_t amo_sent;
    uint64_t amo_seq;
    int amo_failed_seen; /* ctx->n_failed when amo_sent was last looked through */
    size_t cbq_bytes;
    size_t cbq_count;   /* messages in all of cbq */
    size_t cbq_max;

    /* Active messages above the max send size (am_large.c), made on first
     * use. */
    struct api_am_large *large;

    /* Dissemination barrier: messages counted by epoch parity and round. */
    uint32_t barrier_epoch;
    uint32_t barrier_count[2][API_BARRIER_ROUNDS];
};

/* api_ctx_create flags. */
enum {
    API_CTX_OPEN = 1u << 0,        /* join the job and open the transports */
    API_CTX_ALL_MODULES = 1u << 1, /* load every module (ferry_info) */
    API_CTX_NO_FENCE = 1u << 2,    /* with OPEN: put the addresses, no fence (a host's) */
    API_CTX_NO_LAUNCHER = 1u << 3  /* without OPEN: the launcher's parameters left out */
};

/*
 * Builds a context: its parameters, the transports chosen and their
 * parameters; with API_CTX_OPEN also the launcher and the open transports,
 * their addresses exchanged, but no endpoints (ferry_init adds those). Used
 * by ferry_init, and by tools that only inspect (ferry_info).
 */
int api_ctx_create(const ferry_init_params_t *params, unsigned flags, ferry_ctx_t **ctx_out);

/* api_ctx_create with the job, exchange, log and parameters of a host
 * (include/ferry/host.h), checked by the caller (rt_modex_host_valid); host
 * NULL is api_ctx_create. */
int api_ctx_create_hosted(const ferry_init_params_t *params, unsigned flags,
                          const ferry_host_t *host, ferry_ctx_t **ctx_out);

/* Tears down whatever of ctx exists (safe on a half-built one: with peers,
 * a flush and a barrier first), clears its magic and frees it. */
int api_ctx_destroy(ferry_ctx_t *ctx);

int api_state_init(ferry_ctx_t *ctx);
/* Cancels what is queued and frees the state; safe when never initialised. */
void api_state_fini(ferry_ctx_t *ctx);

/* Starts queued pieces and runs due completions; returns events handled. */
int api_rdma_progress(ferry_ctx_t *ctx);

/* Whether api_rdma_progress has anything to do: checked inline by
 * ferry_progress, so that an idle one costs no call. */
static inline bool api_rdma_pending(const struct api_state *api)
{
    return !util_list_empty(&api->issue_queue) || !util_list_empty(&api->done);
}

/* Whether a put or get of len bytes asks btl's rdma_direct first (done
 * inside the call where the transport can: a peer's heap on sm); not once
 * it has declined the key (*direct_no, a key handle's). */
static inline bool api_direct_may(const ferry_btl_module_t *btl, size_t len,
                                  const bool *direct_no)
{
    return btl->ops->rdma_direct != NULL && (direct_no == NULL || !*direct_no) && len > 0 &&
           len <= btl->attr.max_rdma_size;
}

/*
 * Starts a put or get of [buf, buf + len) to raddr of rank dst through
 * module m with the transport key key (already resolved and checked): the
 * common part of ferry_put/ferry_get and their handle forms. local as in
 * ferry_put; on completion req is completed when not NULL, else cb runs.
 * FERRY_OK (started or queued), FERRY_BTL_DONE when cb is NULL and the
 * transport completed it inside the call (rdma_direct: nothing recorded,
 * req untouched: the caller completes it), or an error with nothing
 * started. raw is the remote key key came from, when the caller has it:
 * to a peer with several rails, the operation is then striped across them
 * (large ones) and moves to another when its rail is lost. With accepted_out, on FERRY_OK it
 * says whether the transport took every piece in the call (none is waiting in ferry's queue).
 * With direct_no (a key handle's), the transport's rdma_direct is not asked when *direct_no,
 * and *direct_no is set once it declines the key (taken as final, btl.h).
 */
int api_rdma_start_key(ferry_ctx_t *ctx, bool is_put, int dst, int m, const uint8_t *key,
                       const ferry_rkey_t *raw, void *buf, size_t len, ferry_mem_t *local,
                       uint64_t raddr, ferry_comp_cb_t cb, void *arg, struct ferry_req *req,
                       bool *accepted_out, bool *direct_no);

/* The refusal of an untracked put with notification (put_notify_inline,
 * cbctx the peer's slot): kept for the next flush to it, which it reaches
 * first. */
void api_putn_refused(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                      ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status);
/* A tracked one, req completed once the put is complete at both ends;
 * returns as api_putn_inline_start. */
int api_putn_tracked_start(ferry_ctx_t *ctx, int dst, int m, const uint8_t *key, const void *buf,
                           size_t len, uint64_t raddr, uint8_t tag, const void *payload,
                           size_t plen, struct ferry_req *req);

/* A put with notification in one message of module m's own (its
 * put_notify_inline, btl.h) to dst, through key: FERRY_OK, started (req,
 * when not NULL, completed once the put is complete at both ends; without
 * it a refusal is kept for the next flush); FERRY_ERR_NOT_SUPPORTED when
 * not this way (nothing started); or the transport's error, nothing
 * started. Behind puts and gets waiting to be issued, and to a peer of
 * several rails, it is never taken. */
static inline int api_putn_inline_start(ferry_ctx_t *ctx, int dst, int m, const uint8_t *key,
                                        const void *buf, size_t len, uint64_t raddr, uint8_t tag,
                                        const void *payload, size_t plen, struct ferry_req *req)
{
    ferry_btl_module_t *btl = ctx->modules[m];
    if (btl->ops->put_notify_inline == NULL || !util_list_empty(&ctx->api->issue_queue) ||
        bml_multi(ctx, dst))
        return FERRY_ERR_NOT_SUPPORTED;
    if (req != NULL)
        return api_putn_tracked_start(ctx, dst, m, key, buf, len, raddr, tag, payload, plen, req);
    int rc = btl->ops->put_notify_inline(btl, ctx->peers[dst].ep, buf, len, raddr, key, tag,
                                         payload, plen, FERRY_BTL_PUTN_UNTRACKED, api_putn_refused,
                                         &ctx->api->slots[dst], NULL);
    /* Larger than a message: where the transport still takes it as one
     * operation (ofi's split puts), tracked, its record counted for flush. */
    if (rc == FERRY_ERR_NOT_SUPPORTED && len > ctx->peers[dst].max_send)
        rc = api_putn_tracked_start(ctx, dst, m, key, buf, len, raddr, tag, payload, plen, NULL);
    return rc;
}

/* ferry_mem_register for a rendezvous to dst: registered only with the
 * rails to dst (all modules where the BML has none), so that its key names
 * just the modules dst's own paths back reach. Deregistered as any. */
int api_mem_register_for(ferry_ctx_t *ctx, void *addr, size_t len, unsigned access, int dst,
                         ferry_mem_t **mem_out);

/* ferry_mem_register with module m alone (a rendezvous kept in m's cache). */
int api_mem_register_on(ferry_ctx_t *ctx, void *addr, size_t len, unsigned access, int m,
                        ferry_mem_t **mem_out);

/* Is [buf, buf + len) inside local (a registration of ctx)? */
bool api_mem_covers(const ferry_ctx_t *ctx, const ferry_mem_t *local, const void *buf,
                    size_t len);

/* The registration of local with module m, or NULL. */
ferry_btl_reg_t *api_mem_reg(const ferry_mem_t *local, int m);

/* Completes req with status (onesided.c): its callback is due from the next
 * progress, and it is freed once nobody needs it. */
void api_req_complete(ferry_ctx_t *ctx, struct ferry_req *req, int status);

/* onesided.c's part of progress: due request callbacks, notifications and
 * flush answers waiting for resources, non-blocking flushes. */
int api_onesided_progress(ferry_ctx_t *ctx);

/* Whether api_onesided_progress has anything to do (as api_rdma_pending). */
static inline bool api_onesided_pending(const struct api_state *api)
{
    return api->cbq_count > 0 || api->n_owed_hint || !util_list_empty(&api->amo_q) ||
           !util_list_empty(&api->amo_sent) ||
           !util_list_empty(&api->notify_q) || !util_list_empty(&api->flushes) ||
           !util_list_empty(&api->req_due);
}

/* A flush marker or answer from src (the dispatcher, or am_large releasing
 * what it held behind a large message). */
void api_flush_recv(ferry_ctx_t *ctx, int src, const void *data, size_t len);

/* A put with notification that came in one message, or a peer's refusal of
 * one we sent (the dispatcher, or am_large releasing what it held). */
void api_putn_recv(ferry_ctx_t *ctx, int src, const void *data, size_t len);

/* Declares FERRY_CB_QUEUE_MAX (at context creation, so that ferry_info
 * lists it); *max_out gets its value when not NULL. */
int api_onesided_register_params(ferry_ctx_t *ctx, size_t *max_out, uint64_t *flush_ns_out);

/* Inside a callback, an active message the transport had no room for (or
 * that must wait behind ones queued before it): copied (conv: packed from
 * its cursor; else data) into dst's queue, to leave in order with
 * progress. FERRY_OK, or FERRY_ERR_NO_RESOURCE past FERRY_CB_QUEUE_MAX
 * (nothing queued). */
int api_cbq_push(ferry_ctx_t *ctx, int dst, int tag, const void *data, ferry_convertor_t *conv,
                 size_t len);

/* api_cbq_push of one message made of hlen bytes at hdr, then the len
 * bytes of data (or of conv, from its cursor): ferry's own messages with a
 * header (a large message's announcement, a tagged fragment). */
int api_cbq_push_hdr(ferry_ctx_t *ctx, int dst, int tag, const void *hdr, size_t hlen,
                     const void *data, ferry_convertor_t *conv, size_t len);

/* One operation to slot's peer that nothing else records is over: out of
 * what a flush to it waits for, its error kept for that flush. */
static inline void api_peer_done(api_peer_slot_t *slot, int status)
{
    struct api_state *api = slot->ctx->api;
    api->outstanding[slot->rank]--;
    if (status != FERRY_OK && api->first_error[slot->rank] == FERRY_OK)
        api->first_error[slot->rank] = status;
}

/* Messages to dst wait in ferry's queue: a later send must go behind them. */
static inline bool api_cbq_waiting(const ferry_ctx_t *ctx, int dst)
{
    return ctx->api->cbq_count > 0 && !util_list_empty(&ctx->api->cbq[dst]);
}

/* An application active message went to dst: the next flush to it sends a
 * marker. */
static inline void api_am_sent(ferry_ctx_t *ctx, int dst)
{
    ctx->api->am_dirty[dst] = true;
}

/* Waits, progressing, until nothing is in flight to ranks lo .. hi - 1 and
 * (with ams) every active message sent to them has run its handler. Does
 * not consume the errors ferry_flush reports. */
int api_flush_wait(ferry_ctx_t *ctx, int lo, int hi, bool ams);

int api_onesided_init(ferry_ctx_t *ctx);
void api_onesided_fini(ferry_ctx_t *ctx);

/* The active-message dispatcher registered on every module for every tag
 * below FERRY_BTL_TAG_BTL_MIN. */
void api_am_dispatch(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, void *cbdata);

/* Refuses a handle that is not a live context: logs for a stale one (NULL
 * needs no message) and returns false. */
bool api_ctx_refuse(const ferry_ctx_t *ctx);

/* The check every public call makes of its context handle: not NULL, and
 * not yet finalized as far as its magic says (see ferry_finalize in
 * ferry.h for what this catches and what it cannot). */
static inline bool api_ctx_live(const ferry_ctx_t *ctx)
{
    if (ctx != NULL && ctx->magic == BTL_CTX_MAGIC)
        return true;
    return api_ctx_refuse(ctx);
}

/* An application tag: 0 .. FERRY_AM_TAG_MAX. Checked before any narrowing to
 * the transports' 8-bit tags. */
static inline bool api_tag_valid(int tag)
{
    return tag >= 0 && tag <= FERRY_AM_TAG_MAX;
}

/* Sends des, prepared through module m for rank dst (its current module),
 * on tag with the transport owning it, kept for the replay to a peer with
 * several rails (src/bml); frees des when the send fails. */
int api_send_des(ferry_ctx_t *ctx, int dst, int m, ferry_btl_desc_t *des, uint8_t tag);

/* btl_ctx_send_small for the API's own messages (barrier, flush markers,
 * notifications, callback queues): kept for the replay to a peer with
 * several rails (src/bml). */
/* api_send_two to a peer whose messages are kept for the replay. */
int api_send_two_kept(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *hdr, size_t hlen,
                      const void *payload, size_t plen);
/* As api_send_small, of a header and a payload sent as one message. A peer
 * of one rail keeps nothing for a replay (and never starts to: keeping is
 * decided at start-up): straight to its transport. */
static inline int api_send_two(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *hdr,
                               size_t hlen, const void *payload, size_t plen)
{
    if (ctx->peers == NULL || dst < 0 || dst >= ctx->size || ctx->peers[dst].module_idx < 0)
        return FERRY_ERR_UNREACH;
    if (!bml_keeping(ctx, dst))
        return btl_ctx_send(ctx, dst, tag, hdr, hlen, payload, plen);
    return api_send_two_kept(ctx, dst, tag, hdr, hlen, payload, plen);
}
static inline int api_send_small(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *data,
                                 size_t len)
{
    return api_send_two(ctx, dst, tag, data, len, NULL, 0);
}

/* Validates dst and returns its peer, or NULL with *status_out set. */
static inline btl_peer_t *api_peer(ferry_ctx_t *ctx, int dst, int *status_out)
{
    if (!api_ctx_live(ctx) || ctx->api == NULL || dst < 0 || dst >= ctx->size) {
        *status_out = FERRY_ERR_INVALID;
        return NULL;
    }
    btl_peer_t *peer = &ctx->peers[dst];
    if (peer->module_idx < 0 || peer->failed) {
        *status_out = FERRY_ERR_UNREACH;
        return NULL;
    }
    return peer;
}

#endif /* API_API_H */
