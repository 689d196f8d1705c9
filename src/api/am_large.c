/*
 * Active messages of any size: the rendezvous protocols above a path's max
 * send size (see am_large.h for the wire messages, ferry.h for the
 * contract).
 *
 * GET: the sender registers its buffer (REMOTE_READ, for the duration, with
 * the rails to the receiver only: api_mem_register_for) and announces it;
 * the receiver gets the data into memory of its choosing and sends FIN;
 * the sender then deregisters, so the key is dead once the send is
 * complete. Except on a path whose peers read this process's memory without
 * keys anyway (FERRY_BTL_FLAG_PEERS_READ: sm with cross-memory attach),
 * where the registration costs more than a small message's whole trip:
 * there it comes from a registration cache of that path's (send_register),
 * kept after the send for the next one from the same buffer, at most
 * FERRY_AM_RNDV_KEEP unused, dropped when its memory is unmapped. PUT: the
 * announcement carries no key; the receiver registers
 * its destination (REMOTE_WRITE, for the duration, with the rails to the
 * sender only) and answers
 * CTS; the sender puts and, once the put is complete at both ends, says
 * PUT_DONE; the receiver deregisters. PIPE: the announcement carries no
 * key and nothing is registered; the receiver, once it knows where the data
 * goes, answers CTS without a key; the sender then streams the data as
 * FRAG messages of the path's max send size (copied from the caller's
 * buffer, or packed from its layout, straight into the transport), on the
 * path of the announcement and so in order; the receiver copies each into
 * the destination (or unpacks it there) while the sender fills the next,
 * and answers the last with FIN, as GET does. A sender that cannot go on
 * says so with PUT_DONE and an error.
 *
 * Order: a receiver that takes a large message into a buffer of ferry's
 * own (no data handler) holds every later message from that sender until
 * the large one has been handed over, so handlers still run in the order
 * sent. A data handler runs when the announcement arrives, which already is
 * in order, so nothing is held for it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/am_large.h"
#include "api/api.h"
#include "api/rkey.h"
#include "bml/bml.h"
#include "mem/rcache.h"
#include "util/zalloc.h"

/* FERRY_AM_RNDV values. */
enum {
    RNDV_AUTO = 0,
    RNDV_GET = FERRY_AM_RNDV_GET,
    RNDV_PUT = FERRY_AM_RNDV_PUT,
    RNDV_PIPE = FERRY_AM_RNDV_PIPE
};

/* A large send in flight. */
typedef struct am_send {
    util_list_item_t link; /* in large->sends */
    uint64_t id;
    int dst;
    uint8_t proto;
    const char *buf; /* the data (the caller's, or bounce) */
    size_t len;
    char *bounce;     /* packed copy of a non-contiguous layout, or NULL */
    ferry_mem_t *mem; /* GET: the buffer's registration, for the duration */
    mem_reg_t *kept;  /* GET: or the kept one it came from, of path keep_m */
    int keep_m;
    bool putting;     /* PUT: the put has been started */
    /* PIPE: the layout packed fragment by fragment (packing), with a copy
     * of its blocks; the bytes the receiver asked for (after its CTS:
     * streaming) and those the path has taken. */
    bool packing;
    ferry_convertor_t conv;
    ferry_iov_t *iov;
    bool streaming;
    size_t todo;
    size_t off;
    bool blocking;    /* the caller waits on done and frees the record */
    bool done;
    int status;
    ferry_comp_cb_t cb;
    void *arg;
} am_send_t;

/* States of an announced message at the receiver. */
enum { DATA_ANNOUNCED, DATA_MOVING, DATA_WAIT_REG, DATA_WAIT_PUT, DATA_PIPE };

struct ferry_am_data {
    util_list_item_t link; /* in large->recvs */
    int src;
    uint8_t tag;
    uint8_t proto;
    int state;
    uint64_t id;
    size_t len;
    uint64_t raddr;
    ferry_rkey_t rkey;
    /* Where the data goes. */
    size_t n;               /* bytes taken: min(space, len) */
    ferry_convertor_t conv; /* the destination, when bounce is used */
    char *bounce;           /* data taken here, then unpacked into conv */
    ferry_mem_t *mem;       /* PUT: the destination's registration */
    void *dst;              /* PUT: the memory registered; PIPE: the contiguous
                             * destination, or NULL to unpack into conv */
    size_t got;             /* PIPE: bytes arrived, all in order */
    /* Delivered to the application handler afterwards (no data handler). */
    char *own;
    ferry_comp_cb_t cb;
    void *arg;
};

/* A callback due from progress (ferry_am_send_nb of a small message). */
typedef struct am_due {
    util_list_item_t link;
    ferry_comp_cb_t cb;
    void *arg;
    int status;
} am_due_t;

/* A message waiting: control messages out of resources, or messages held
 * behind a large one. */
typedef struct am_queued {
    util_list_item_t link;
    int peer;
    uint8_t tag;
    size_t len;
    char data[];
} am_queued_t;

/*
 * What this rank has open with one peer. The counts bound what a peer can
 * make this rank hold: a sender keeps at most FERRY_AM_LARGE_INFLIGHT of
 * its sends to a peer open (with the PUT_DONEs it still has to say), and
 * each of them holds at most a record and one answer at the receiver; so a
 * peer that keeps to the protocol never has 2 * FERRY_AM_LARGE_INFLIGHT
 * records and answers open here when its next announcement arrives, and
 * one that does is taken as failed (rts_admit).
 */
typedef struct am_peer {
    unsigned count;   /* large messages from the peer being taken in */
    util_list_t q;    /* what arrived behind them, in order */
    util_list_t ctl;  /* am_queued_t control messages to it, in order */
    size_t n_answers; /* in ctl: FIN and CTS, answers to its announcements */
    size_t n_done;    /* in ctl: PUT_DONE, of this rank's sends */
    size_t n_recvs;   /* its announcements here, in recvs */
    size_t n_sends;   /* this rank's sends to it, in sends */
} am_peer_t;

struct api_am_large {
    uint64_t next_id;
    size_t large_max;
    long long rndv_mode;
    long long finalize_ms; /* FERRY_AM_FINALIZE_TIMEOUT */
    util_list_t sends; /* am_send_t */
    util_list_t recvs; /* ferry_am_data_t */
    util_list_t due;   /* am_due_t */
    am_peer_t *peer;   /* [size] */
    size_t n_ctl;      /* control messages waiting, all peers */
    size_t inflight;   /* FERRY_AM_LARGE_INFLIGHT */
    rt_ratelimit_t over_rl; /* announcements from peers counted out */
    struct {
        ferry_am_data_cb_t cb;
        void *arg;
    } data[FERRY_AM_TAG_MAX + 1];
    bool closing; /* at teardown: no more control messages */
    size_t n_waiting; /* recvs in DATA_WAIT_REG or DATA_WAIT_PUT: progress looks at them */
    /* PIPE: receives under way (progress looks at them only once a peer
     * has failed), and sends with fragments the path has not taken yet. */
    size_t n_pipe;
    size_t n_pushing;
    ferry_am_data_t *frag_last; /* the PIPE receive the last fragment was for, or NULL */
    rt_ratelimit_t frag_rl;     /* complaints about bad fragments */
    api_am_frag_cb_t int_frag;
    api_am_hdr_data_cb_t int_data;
    void *int_arg;
    /* GET's sender registrations kept, per module: made on first use. */
    size_t keep;     /* FERRY_AM_RNDV_KEEP */
    struct am_keep *keeps; /* [ctx->n_modules] */
};

/* A module's cache of GET sender registrations (send_register). */
typedef struct am_keep {
    ferry_ctx_t *ctx;
    int m;
    mem_rcache_t *cache; /* NULL until first used, or when it cannot be had */
    bool tried;
} am_keep_t;

/* What the cache holds for a registration: it, and its key packed once. */
typedef struct am_kept {
    ferry_mem_t *mem;
    ferry_rkey_t rkey;
    size_t key_len; /* of rkey's bytes, what the packed key takes */
} am_kept_t;

static const char *const rndv_names = "auto, get, put or pipe";

static int parse_rndv(ferry_ctx_t *ctx, long long *mode_out)
{
    const char *mode;
    int rc = rt_param_register_string(&ctx->params, "am_rndv", "auto", "", &mode);
    if (rc != FERRY_OK)
        return rc;
    if (strcmp(mode, "auto") == 0)
        *mode_out = RNDV_AUTO;
    else if (strcmp(mode, "get") == 0)
        *mode_out = RNDV_GET;
    else if (strcmp(mode, "put") == 0)
        *mode_out = RNDV_PUT;
    else if (strcmp(mode, "pipe") == 0)
        *mode_out = RNDV_PIPE;
    else {
        rt_log(&ctx->log, RT_LOG_ERROR, "FERRY_AM_RNDV='%.32s' is not one of %s", mode, rndv_names);
        return FERRY_ERR_INVALID;
    }
    return FERRY_OK;
}

static int register_keep(ferry_ctx_t *ctx, size_t *out)
{
    size_t keep;
    return rt_param_register_size(&ctx->params, "am_rndv_keep", API_AM_RNDV_KEEP_DEFAULT, 0,
                                  1u << 20,
                                  "Registrations of large messages' buffers (rendezvous by "
                                  "get) kept unused per path for the next message from the "
                                  "same buffer, on paths whose peers read this process's "
                                  "memory without keys anyway (sm with cross-memory attach); "
                                  "0: every message registers and releases its own",
                                  out != NULL ? out : &keep);
}

int api_am_large_register_params(ferry_ctx_t *ctx)
{
    size_t max;
    int rc = rt_param_register_size(&ctx->params, "am_large_max", API_AM_LARGE_MAX_DEFAULT, 1,
                                    SIZE_MAX / 2,
                                    "Largest active message a peer may announce to a tag "
                                    "without a data handler (ferry then allocates it); more is "
                                    "refused at both ends",
                                    &max);
    if (rc != FERRY_OK)
        return rc;
    const char *mode;
    rc = rt_param_register_string(&ctx->params, "am_rndv", "auto",
                                  "How rendezvous moves active messages above the max send "
                                  "size: auto (pipe up to the size the path reports, then get "
                                  "where the path has GET, else put), get, put or pipe (the "
                                  "data streamed as ordinary messages after a clear-to-send)",
                                  &mode);
    if (rc != FERRY_OK)
        return rc;
    long long ms;
    rc = rt_param_register_int(&ctx->params, "am_finalize_timeout", 10000, 0, 86400000,
                               "Milliseconds ferry_finalize waits for peers to take this "
                               "process's large messages still in flight; then they fail with "
                               "FERRY_ERR_TIMEOUT and their buffers are released",
                               &ms);
    if (rc != FERRY_OK)
        return rc;
    size_t inflight;
    rc = rt_param_register_size(&ctx->params, "am_large_inflight", API_AM_LARGE_INFLIGHT_DEFAULT,
                                1, SIZE_MAX / 4,
                                "Large active messages (rendezvous) this process keeps in "
                                "flight to one peer; a send past it returns "
                                "FERRY_ERR_NO_RESOURCE (retry after progress; the tagged "
                                "layer waits itself). A peer that has twice as many open here, "
                                "with the answers owed to it, is taken as failed",
                                &inflight);
    if (rc != FERRY_OK)
        return rc;
    size_t bound;
    rc = rt_param_register_size(&ctx->params, "msg_unexpected_bytes",
                                API_MSG_UNEXPECTED_BYTES_DEFAULT, 0, SIZE_MAX / 2,
                                "Bytes of tagged messages (ferry/msg.h) one source may leave "
                                "waiting unmatched here, their records counted; a source past "
                                "it is taken as failed",
                                &bound);
    if (rc == FERRY_OK)
        rc = rt_param_register_size(&ctx->params, "msg_unexpected_count",
                                    API_MSG_UNEXPECTED_COUNT_DEFAULT, 0, SIZE_MAX / 2,
                                    "Tagged messages (eager or large) one source may leave "
                                    "waiting unmatched here; a source past it is taken as "
                                    "failed",
                                    &bound);
    if (rc != FERRY_OK)
        return rc;
    /* A bad value fails ferry_init, naming the variable. */
    long long parsed;
    rc = parse_rndv(ctx, &parsed);
    if (rc == FERRY_OK)
        rc = register_keep(ctx, NULL);
    return rc;
}

/* The context's large-message state, made on first use. */
static struct api_am_large *large_get(ferry_ctx_t *ctx, int *status_out)
{
    struct api_state *api = ctx->api;
    if (api->large != NULL)
        return api->large;
    struct api_am_large *lg = calloc(1, sizeof(*lg));
    if (lg == NULL) {
        *status_out = FERRY_ERR_NO_MEMORY;
        return NULL;
    }
    lg->peer = calloc((size_t)ctx->size, sizeof(*lg->peer));
    int rc = lg->peer == NULL ? FERRY_ERR_NO_MEMORY : FERRY_OK;
    if (rc == FERRY_OK)
        rc = rt_param_register_size(&ctx->params, "am_large_max", API_AM_LARGE_MAX_DEFAULT, 1,
                                    SIZE_MAX / 2, "", &lg->large_max);
    if (rc == FERRY_OK)
        rc = rt_param_register_size(&ctx->params, "am_large_inflight",
                                    API_AM_LARGE_INFLIGHT_DEFAULT, 1, SIZE_MAX / 4, "",
                                    &lg->inflight);
    if (rc == FERRY_OK)
        rc = parse_rndv(ctx, &lg->rndv_mode);
    if (rc == FERRY_OK)
        rc = rt_param_register_int(&ctx->params, "am_finalize_timeout", 10000, 0, 86400000, "",
                                   &lg->finalize_ms);
    if (rc == FERRY_OK)
        rc = register_keep(ctx, &lg->keep);
    if (rc == FERRY_OK && lg->keep > 0) {
        lg->keeps = calloc((size_t)ctx->n_modules, sizeof(*lg->keeps));
        if (lg->keeps == NULL)
            rc = FERRY_ERR_NO_MEMORY;
    }
    if (rc != FERRY_OK) {
        free(lg->keeps);
        free(lg->peer);
        free(lg);
        *status_out = rc;
        return NULL;
    }
    lg->next_id = 1;
    rt_ratelimit_init(&lg->frag_rl, RT_RATELIMIT_BURST, RT_RATELIMIT_INTERVAL_MS);
    rt_ratelimit_init(&lg->over_rl, RT_RATELIMIT_BURST, RT_RATELIMIT_INTERVAL_MS);
    util_list_init(&lg->sends);
    util_list_init(&lg->recvs);
    util_list_init(&lg->due);
    for (int r = 0; r < ctx->size; r++) {
        util_list_init(&lg->peer[r].q);
        util_list_init(&lg->peer[r].ctl);
    }
    api->large = lg;
    return lg;
}

static int due_add(ferry_ctx_t *ctx, ferry_comp_cb_t cb, void *arg, int status);

static void run_cb(ferry_ctx_t *ctx, ferry_comp_cb_t cb, void *arg, int status)
{
    if (cb == NULL)
        return;
    ctx->in_callback++;
    cb(arg, status);
    ctx->in_callback--;
}

/* ---- sending ferry's own small messages ---- */

/* One try of a message of header + payload on tag. */
static int send_once(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *hdr, size_t hlen,
                     const void *payload, size_t plen)
{
    btl_peer_t *peer = &ctx->peers[dst];
    if (peer->module_idx < 0 || peer->failed)
        return FERRY_ERR_UNREACH;
    int m = peer->module_idx;
    if (hlen + plen > peer->max_send)
        return FERRY_ERR_INVALID;
    /* Kept for the replay to a peer with several rails (bml.h). */
    int rc = bml_am_gate(ctx, dst);
    if (rc == FERRY_OK)
        rc = bml_am_keep(ctx, dst, tag, hdr, hlen, payload, plen);
    if (rc != FERRY_OK)
        return rc;
    return bml_am_sent(ctx, dst, m, btl_ctx_send(ctx, dst, tag, hdr, hlen, payload, plen));
}

/* Counts a control message to p into (by 1) or out of (by -1) its queue. */
static void ctl_count(struct api_am_large *lg, am_peer_t *p, uint8_t tag, int by)
{
    if (tag == API_TAG_AM_PUT_DONE)
        p->n_done += (size_t)by;
    else
        p->n_answers += (size_t)by;
    lg->n_ctl += (size_t)by;
}

/* A control message (FIN, CTS, PUT_DONE): sent now, or queued and sent by
 * progress in order, so that none is lost for lack of resources. Each peer
 * has its own queue, so that one whose path stays full holds up no other.
 * The queue is bounded by what the peer has open here (see am_peer_t): an
 * answer is for an announcement rts_admit let in, a PUT_DONE for one of
 * this rank's sends. */
static void ctl_send(ferry_ctx_t *ctx, struct api_am_large *lg, int dst, uint8_t tag,
                     const void *msg, size_t len)
{
    if (lg->closing)
        return;
    am_peer_t *p = &lg->peer[dst];
    int rc = util_list_empty(&p->ctl) ? send_once(ctx, dst, tag, msg, len, NULL, 0)
                                      : FERRY_ERR_NO_RESOURCE;
    if (rc == FERRY_OK)
        return;
    if (rc != FERRY_ERR_NO_RESOURCE) {
        rt_log(&ctx->log, RT_LOG_DEBUG, "control message %u to rank %d not sent: %s", (unsigned)tag,
               dst, ferry_strerror(rc));
        return;
    }
    am_queued_t *q = malloc(sizeof(*q) + len);
    if (q == NULL) {
        rt_log(&ctx->log, RT_LOG_ERROR, "out of memory queueing a control message to rank %d", dst);
        return;
    }
    q->peer = dst;
    q->tag = tag;
    q->len = len;
    memcpy(q->data, msg, len);
    util_list_append(&p->ctl, &q->link);
    ctl_count(lg, p, tag, 1);
}

/* Frees what waits in p's control queue. */
static void ctl_drop(struct api_am_large *lg, am_peer_t *p)
{
    util_list_item_t *it;
    while ((it = util_list_pop_front(&p->ctl)) != NULL) {
        am_queued_t *q = UTIL_CONTAINER_OF(it, am_queued_t, link);
        ctl_count(lg, p, q->tag, -1);
        free(q);
    }
}

static void send_fin(ferry_ctx_t *ctx, struct api_am_large *lg, int dst, uint64_t id, int status)
{
    am_fin_t fin = {.id = id, .status = status};
    ctl_send(ctx, lg, dst, API_TAG_AM_FIN, &fin, sizeof(fin));
}

/* ---- the sender ---- */

/* Ends s: its registration and bounce buffer go, its status is set. A
 * blocking send's record stays for its waiter to free. */
/* ---- GET's sender registrations kept (FERRY_AM_RNDV_KEEP) ---- */

static int kept_register(void *arg, void *base, size_t len, uint32_t access, void **handle_out)
{
    am_keep_t *k = arg;
    am_kept_t *kept = malloc(sizeof(*kept));
    if (kept == NULL)
        return FERRY_ERR_NO_MEMORY;
    int rc = api_mem_register_on(k->ctx, base, len, access, k->m, &kept->mem);
    if (rc == FERRY_OK && (rc = api_mem_rkey(kept->mem, &kept->rkey, &kept->key_len)) != FERRY_OK)
        ferry_mem_deregister(k->ctx, kept->mem);
    if (rc != FERRY_OK) {
        free(kept);
        return rc;
    }
    *handle_out = kept;
    return FERRY_OK;
}

static int kept_deregister(void *arg, void *handle)
{
    am_keep_t *k = arg;
    am_kept_t *kept = handle;
    int rc = ferry_mem_deregister(k->ctx, kept->mem);
    free(kept);
    return rc;
}

/* The cache of module m, made on first use; NULL where there is none. */
static mem_rcache_t *keep_cache(ferry_ctx_t *ctx, struct api_am_large *lg, int m)
{
    am_keep_t *k = &lg->keeps[m];
    if (k->cache != NULL || k->tried)
        return k->cache;
    k->tried = true;
    k->ctx = ctx;
    k->m = m;
    mem_rcache_params_t rp = {
        .name = "rendezvous",
        .limit_hint = NULL,
        .reg = kept_register,
        .dereg = kept_deregister,
        .arg = k,
        .log = &ctx->log,
        .idle_max = lg->keep,
    };
    if (mem_params_register(&ctx->params, &rp.mem) != FERRY_OK ||
        mem_rcache_create(&rp, &k->cache) != FERRY_OK)
        k->cache = NULL;
    return k->cache;
}

/* The module whose cache a GET send to dst may take its registration from:
 * dst's one rail, when its peers read our memory without keys anyway; -1
 * otherwise (several rails, or a path where a key guards our memory). */
static int keep_path(ferry_ctx_t *ctx, const struct api_am_large *lg, int dst)
{
    /* The flag of dst's first path first: no rails to look up elsewhere. */
    if (lg->keeps == NULL ||
        !(ctx->modules[ctx->peers[dst].module_idx]->attr.flags & FERRY_BTL_FLAG_PEERS_READ))
        return -1;
    int rails[BML_MAX_PATHS];
    if (bml_rails(ctx, dst, 0, rails, BML_MAX_PATHS) != 1 ||
        !(ctx->modules[rails[0]]->attr.flags & FERRY_BTL_FLAG_PEERS_READ))
        return -1;
    return rails[0];
}

/* GET: registers s's buffer for dst (from the path's cache where keep_path
 * says so) and gives its key, and the bytes of it the packed key takes. */
static int send_register(ferry_ctx_t *ctx, struct api_am_large *lg, am_send_t *s,
                         ferry_rkey_t *rkey_out, size_t *key_len_out)
{
    int m = keep_path(ctx, lg, s->dst);
    mem_rcache_t *c = m >= 0 ? keep_cache(ctx, lg, m) : NULL;
    if (c != NULL) {
        mem_reg_t *r;
        int rc = mem_rcache_get(c, (void *)s->buf, s->len, FERRY_ACCESS_REMOTE_READ, &r);
        if (rc != FERRY_OK)
            return rc;
        am_kept_t *kept = r->handle;
        s->kept = r;
        s->keep_m = m;
        *rkey_out = kept->rkey;
        *key_len_out = kept->key_len;
        return FERRY_OK;
    }
    int rc = api_mem_register_for(ctx, (void *)s->buf, s->len, FERRY_ACCESS_REMOTE_READ, s->dst,
                                  &s->mem);
    if (rc == FERRY_OK)
        rc = api_mem_rkey(s->mem, rkey_out, key_len_out);
    return rc;
}

/* Ends s's registration: released, or back into its cache, which lets all
 * its unused ones go once the path's peers no longer read our memory
 * anyway (sm found cross-memory attach refused). */
static void send_unregister(ferry_ctx_t *ctx, struct api_am_large *lg, am_send_t *s)
{
    if (s->mem != NULL) {
        ferry_mem_deregister(ctx, s->mem);
        s->mem = NULL;
    }
    if (s->kept != NULL) {
        mem_rcache_t *c = lg->keeps[s->keep_m].cache;
        mem_rcache_put(c, s->kept);
        s->kept = NULL;
        if (!(ctx->modules[s->keep_m]->attr.flags & FERRY_BTL_FLAG_PEERS_READ))
            mem_rcache_flush(c);
    }
}

static void send_finish(ferry_ctx_t *ctx, struct api_am_large *lg, am_send_t *s, int status)
{
    util_list_remove(&lg->sends, &s->link);
    lg->peer[s->dst].n_sends--;
    if (s->streaming && s->off < s->todo)
        lg->n_pushing--;
    s->streaming = false;
    send_unregister(ctx, lg, s);
    free(s->bounce);
    s->bounce = NULL;
    free(s->iov);
    s->iov = NULL;
    s->status = status;
    s->done = true;
}

static void send_complete(ferry_ctx_t *ctx, struct api_am_large *lg, am_send_t *s, int status)
{
    send_finish(ctx, lg, s, status);
    if (!s->blocking) {
        ferry_comp_cb_t cb = s->cb;
        void *arg = s->arg;
        free(s);
        run_cb(ctx, cb, arg, status);
    }
}

static am_send_t *find_send(struct api_am_large *lg, int peer, uint64_t id)
{
    for (util_list_item_t *it = util_list_first(&lg->sends); it != NULL;
         it = util_list_next(&lg->sends, it)) {
        am_send_t *s = UTIL_CONTAINER_OF(it, am_send_t, link);
        if (s->id == id && s->dst == peer)
            return s;
    }
    return NULL;
}

void api_am_large_rts_lost(ferry_ctx_t *ctx, int dst, const void *data, size_t len, int status)
{
    struct api_am_large *lg = ctx->api->large;
    am_rts_t rts;
    if (lg == NULL || len < AM_RTS_FIXED)
        return;
    memcpy(&rts, data, AM_RTS_FIXED);
    am_send_t *s = find_send(lg, dst, rts.id);
    if (s == NULL)
        return;
    /* Its callback is due from progress: this runs inside the drain of the
     * queue it was in. */
    send_finish(ctx, lg, s, status);
    if (!s->blocking) {
        if (due_add(ctx, s->cb, s->arg, status) != FERRY_OK)
            rt_log(&ctx->log, RT_LOG_ERROR, "out of memory: a send's completion is lost");
        free(s);
    }
}

/* The protocol of a len-byte message through btl: the one asked for, else
 * PIPE up to the path's rndv_pipe_max, then GET where it has GET, else PUT. */
static uint8_t proto_for(const struct api_am_large *lg, const ferry_btl_module_t *btl,
                         size_t len)
{
    if (lg->rndv_mode != RNDV_AUTO)
        return (uint8_t)lg->rndv_mode;
    if (len <= btl->attr.rndv_pipe_max)
        return RNDV_PIPE;
    return (btl->attr.flags & FERRY_BTL_FLAG_GET) ? RNDV_GET : RNDV_PUT;
}

/*
 * Sends a large message's announcement (rts, then hlen header bytes). It
 * goes behind what waits in ferry's callback queue for dst, so that it
 * overtakes no message sent before it. Inside a callback, when it cannot go
 * now, it waits in that queue itself and leaves with progress, in order with
 * what the callback sends afterwards; FERRY_ERR_NO_RESOURCE only past
 * FERRY_CB_QUEUE_MAX (or, outside a callback, whenever it cannot go now).
 * (large_start has refused the send before, in a callback too, when
 * FERRY_AM_LARGE_INFLIGHT sends to dst are open.)
 */
static int rts_send(ferry_ctx_t *ctx, int dst, const am_rts_t *rts, const void *hdr,
                    size_t hlen)
{
    /* The fixed part and the key's key_len bytes (large_start packs it
     * so), then the header. */
    size_t n = AM_RTS_FIXED + rts->key_len;
    if (n + hlen > ctx->peers[dst].max_send)
        return FERRY_ERR_INVALID;
    int rc = api_cbq_waiting(ctx, dst)
                 ? FERRY_ERR_NO_RESOURCE
                 : send_once(ctx, dst, API_TAG_AM_RTS, rts, n, hdr, hlen);
    if (rc == FERRY_ERR_NO_RESOURCE && ctx->in_callback > 0)
        rc = api_cbq_push_hdr(ctx, dst, API_TAG_AM_RTS, rts, n, hdr, NULL, hlen);
    return rc;
}

/*
 * Starts a large send of conv's data (header hdr of hlen bytes for an
 * internal tag). On FERRY_OK *s_out is in lg->sends; anything else leaves
 * nothing behind.
 */
static int large_start(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *hdr, size_t hlen,
                       ferry_convertor_t *conv, ferry_comp_cb_t cb, void *arg, bool blocking,
                       am_send_t **s_out)
{
    int rc;
    struct api_am_large *lg = large_get(ctx, &rc);
    if (lg == NULL)
        return rc;
    rc = FERRY_OK;
    btl_peer_t *peer = &ctx->peers[dst];
    ferry_btl_module_t *btl = ctx->modules[peer->module_idx];
    size_t len = ferry_convertor_remaining(conv);
    uint8_t proto = proto_for(lg, btl, len);
    /* So many in flight to dst already: this one waits for their answers
     * (see am_peer_t), as a send waits for room in the transport. */
    am_peer_t *p = &lg->peer[dst];
    if (p->n_sends + p->n_done >= lg->inflight)
        return FERRY_ERR_NO_RESOURCE;
    /* PIPE needs sends only, and room for a fragment's header. */
    if (proto == RNDV_PIPE ? peer->max_send <= sizeof(am_frag_t)
                           : !(btl->attr.flags &
                               (proto == RNDV_GET ? FERRY_BTL_FLAG_GET : FERRY_BTL_FLAG_PUT))) {
        rt_log(&ctx->log, RT_LOG_ERROR,
               "a %zu-byte active message to rank %d needs %s, which %s does not have",
               len, dst,
               proto == RNDV_GET ? "get" : proto == RNDV_PUT ? "put" : "a larger max send size",
               btl->attr.name);
        return FERRY_ERR_NOT_SUPPORTED;
    }
    am_send_t *s = util_zalloc(sizeof(*s));
    if (s == NULL)
        return FERRY_ERR_NO_MEMORY;
    size_t start = conv->pos;
    if (proto == RNDV_PIPE && ferry_convertor_need_buffers(conv)) {
        /* Packed fragment by fragment into the transport, never whole: a
         * copy of the convertor (and of its blocks, which the caller may
         * reuse once the call returns) keeps the cursor. */
        s->conv = *conv;
        if (conv->iov != NULL && conv->iov_cnt > 0) {
            s->iov = malloc(conv->iov_cnt * sizeof(*s->iov));
            if (s->iov == NULL) {
                free(s);
                return FERRY_ERR_NO_MEMORY;
            }
            memcpy(s->iov, conv->iov, conv->iov_cnt * sizeof(*s->iov));
            s->conv.iov = s->iov;
        }
        s->packing = true;
    } else if (ferry_convertor_need_buffers(conv)) {
        s->bounce = malloc(len);
        if (s->bounce == NULL) {
            free(s);
            return FERRY_ERR_NO_MEMORY;
        }
        ferry_convertor_pack(conv, s->bounce, len);
        s->buf = s->bounce;
    } else {
        s->buf = ferry_convertor_contig_ptr(conv);
    }
    s->len = len;
    s->dst = dst;
    s->proto = proto;
    s->id = lg->next_id;
    s->blocking = blocking;
    s->cb = cb;
    s->arg = arg;

    am_rts_t rts;
    memset(&rts, 0, sizeof(rts));
    rts.id = s->id;
    rts.len = len;
    rts.tag = tag;
    rts.proto = proto;
    rts.hdr_len = (uint16_t)hlen;
    rts.flags = AM_RTS_KEY_LEN;
    if (proto == RNDV_GET) {
        size_t key_len = 0;
        rc = send_register(ctx, lg, s, &rts.rkey, &key_len);
        rts.raddr = (uint64_t)(uintptr_t)s->buf;
        rts.key_len = (uint16_t)key_len;
    }
    if (rc == FERRY_OK)
        rc = rts_send(ctx, dst, &rts, hdr, hlen);
    if (rc != FERRY_OK) {
        send_unregister(ctx, lg, s);
        free(s->bounce);
        free(s->iov);
        free(s);
        ferry_convertor_set_position(conv, start);
        return rc;
    }
    lg->next_id++;
    util_list_append(&lg->sends, &s->link);
    p->n_sends++;
    api_am_sent(ctx, dst);
    *s_out = s;
    return FERRY_OK;
}

/* Progresses until s is done; returns its status and frees it. */
static int large_wait(ferry_ctx_t *ctx, am_send_t *s)
{
    unsigned idle = 0;
    while (!s->done) {
        int rc = ferry_progress(ctx);
        if (rc < 0 && !s->done) {
            /* A fatal transport error: nothing will complete it. */
            send_finish(ctx, ctx->api->large, s, rc);
            break;
        }
        if (rc == 0)
            rt_idle(&idle);
        else
            idle = 0;
    }
    int status = s->status;
    free(s);
    return status;
}

static int check_send_args(ferry_ctx_t *ctx, int dst, int tag, ferry_convertor_t *conv)
{
    int rc;
    if (conv == NULL || !api_tag_valid(tag))
        return FERRY_ERR_INVALID;
    if (api_peer(ctx, dst, &rc) == NULL)
        return rc;
    return FERRY_OK;
}

int api_am_send_large_blocking(ferry_ctx_t *ctx, int dst, int tag, ferry_convertor_t *conv)
{
    int rc = check_send_args(ctx, dst, tag, conv);
    if (rc != FERRY_OK)
        return rc;
    if (ctx->in_callback > 0)
        return FERRY_ERR_BUSY;
    am_send_t *s;
    unsigned idle = 0;
    for (;;) {
        rc = large_start(ctx, dst, (uint8_t)tag, NULL, 0, conv, NULL, NULL, true, &s);
        if (rc != FERRY_ERR_NO_RESOURCE)
            break;
        int prc = ferry_progress(ctx);
        if (prc < 0)
            return prc;
        if (prc == 0)
            rt_idle(&idle);
    }
    if (rc != FERRY_OK)
        return rc;
    return large_wait(ctx, s);
}

/* A callback due from progress. */
static int due_add(ferry_ctx_t *ctx, ferry_comp_cb_t cb, void *arg, int status)
{
    int rc;
    struct api_am_large *lg = large_get(ctx, &rc);
    if (lg == NULL)
        return rc;
    am_due_t *d = malloc(sizeof(*d));
    if (d == NULL)
        return FERRY_ERR_NO_MEMORY;
    d->cb = cb;
    d->arg = arg;
    d->status = status;
    util_list_append(&lg->due, &d->link);
    return FERRY_OK;
}

int ferry_am_send_conv_nb(ferry_ctx_t *ctx, int dst, int tag, ferry_convertor_t *conv,
                          ferry_comp_cb_t cb, void *arg)
{
    int rc = check_send_args(ctx, dst, tag, conv);
    if (rc != FERRY_OK)
        return rc;
    long max = ferry_am_max_size(ctx, dst);
    if (max < 0)
        return (int)max;
    if (ferry_convertor_remaining(conv) <= (size_t)max) {
        if (cb != NULL) {
            /* Room for the completion first, so that a message sent is
             * never left without its callback. */
            struct api_am_large *lg = large_get(ctx, &rc);
            if (lg == NULL)
                return rc;
            am_due_t *d = malloc(sizeof(*d));
            if (d == NULL)
                return FERRY_ERR_NO_MEMORY;
            rc = ferry_am_send_conv(ctx, dst, tag, conv);
            if (rc != FERRY_OK) {
                free(d);
                return rc;
            }
            d->cb = cb;
            d->arg = arg;
            d->status = FERRY_OK;
            util_list_append(&lg->due, &d->link);
            return FERRY_OK;
        }
        return ferry_am_send_conv(ctx, dst, tag, conv);
    }
    am_send_t *s;
    return large_start(ctx, dst, (uint8_t)tag, NULL, 0, conv, cb, arg, false, &s);
}

int ferry_am_send_nb(ferry_ctx_t *ctx, int dst, int tag, const void *data, size_t len,
                     ferry_comp_cb_t cb, void *arg)
{
    if (data == NULL && len > 0)
        return FERRY_ERR_INVALID;
    ferry_convertor_t conv;
    ferry_convertor_init_contig(&conv, data, len);
    return ferry_am_send_conv_nb(ctx, dst, tag, &conv, cb, arg);
}

/* ---- internal senders (src/msg) ---- */

/* The path's cut for tagged messages to peer (ferry_am_sizes'
 * msg_eager_max): its msg_eager_max, within the max send size. */
static size_t msg_cut(const ferry_ctx_t *ctx, const btl_peer_t *peer)
{
    size_t cut = ctx->modules[peer->module_idx]->attr.msg_eager_max;
    return cut > 0 && cut < peer->max_send ? cut : peer->max_send;
}

/* The most bytes (header and data) a tagged message to dst carries in one
 * fragment: msg_cut, but the max send size while a rendezvous of ours to
 * dst is open. A lone message is faster by one get than by a copy into the
 * transport and one out of it; in a stream the two ends copy at once, where
 * gets would follow one another (tag-bw at 8 KiB: 12 GB/s eager, 4-5 by
 * get). */
static size_t msg_eager(const ferry_ctx_t *ctx, const btl_peer_t *peer, int dst)
{
    const struct api_am_large *lg = ctx->api->large;
    return lg != NULL && lg->peer[dst].n_sends > 0 ? peer->max_send : msg_cut(ctx, peer);
}

int api_am_send_flat_internal(ferry_ctx_t *ctx, int dst, const void *hdr, size_t hlen,
                              const void *data, size_t len)
{
    int rc;
    if (hlen > API_AM_HDR_MAX || (data == NULL && len > 0))
        return FERRY_ERR_INVALID;
    btl_peer_t *peer = api_peer(ctx, dst, &rc);
    if (peer == NULL)
        return rc;
    size_t eager = msg_eager(ctx, peer, dst);
    if (len > eager || hlen > eager - len)
        return 1;
    rc = api_cbq_waiting(ctx, dst) ? FERRY_ERR_NO_RESOURCE
                                   : send_once(ctx, dst, API_TAG_MSG, hdr, hlen, data, len);
    if (rc == FERRY_ERR_NO_RESOURCE && ctx->in_callback > 0)
        rc = api_cbq_push_hdr(ctx, dst, API_TAG_MSG, hdr, hlen, data, NULL, len);
    if (rc == FERRY_OK)
        api_am_sent(ctx, dst); /* a flush to dst covers it */
    return rc;
}

int api_am_send_internal(ferry_ctx_t *ctx, int dst, const void *hdr, size_t hlen,
                         ferry_convertor_t *conv, ferry_comp_cb_t cb, void *arg, bool *done_out)
{
    int rc;
    if (hlen > API_AM_HDR_MAX || conv == NULL || done_out == NULL)
        return FERRY_ERR_INVALID;
    btl_peer_t *peer = api_peer(ctx, dst, &rc);
    if (peer == NULL)
        return rc;
    ferry_btl_module_t *btl = ctx->modules[peer->module_idx];
    size_t len = ferry_convertor_remaining(conv);
    size_t eager = msg_eager(ctx, peer, dst);
    if (len <= eager && hlen <= eager - len) {
        bool contig = !ferry_convertor_need_buffers(conv);
        if (api_cbq_waiting(ctx, dst)) {
            rc = FERRY_ERR_NO_RESOURCE; /* behind what a callback queued */
        } else if (contig) {
            rc = send_once(ctx, dst, API_TAG_MSG, hdr, hlen, ferry_convertor_contig_ptr(conv), len);
        } else {
            size_t start = conv->pos, size = len;
            ferry_btl_desc_t *des;
            int m = peer->module_idx;
            rc = bml_am_gate(ctx, dst);
            if (rc == FERRY_OK)
                rc = btl->ops->prepare_src(btl, peer->ep, NULL, conv, hlen, &size, 0, &des);
            if (rc == FERRY_OK && size != len) {
                btl->ops->free(btl, des);
                rc = FERRY_ERR;
            } else if (rc == FERRY_OK) {
                memcpy(ferry_btl_seg_ptr(&des->src[0]), hdr, hlen);
                rc = api_send_des(ctx, dst, m, des, API_TAG_MSG);
            }
            if (rc != FERRY_OK)
                ferry_convertor_set_position(conv, start);
        }
        /* Inside a callback, a fragment the transport has no room for is
         * copied into ferry's callback queue, as an application message
         * would be. */
        if (rc == FERRY_ERR_NO_RESOURCE && ctx->in_callback > 0)
            rc = api_cbq_push_hdr(ctx, dst, API_TAG_MSG, hdr, hlen,
                                  contig ? ferry_convertor_contig_ptr(conv) : NULL,
                                  contig ? NULL : conv, len);
        if (rc == FERRY_OK) {
            *done_out = true;
            api_am_sent(ctx, dst);
        }
        return rc;
    }
    am_send_t *s;
    rc = large_start(ctx, dst, API_TAG_MSG, hdr, hlen, conv, cb, arg, false, &s);
    if (rc == FERRY_OK)
        *done_out = false;
    return rc;
}

int api_am_register_internal(ferry_ctx_t *ctx, api_am_frag_cb_t frag_cb,
                             api_am_hdr_data_cb_t data_cb, void *arg)
{
    int rc;
    if (!api_ctx_live(ctx) || ctx->api == NULL)
        return FERRY_ERR_INVALID;
    struct api_am_large *lg = large_get(ctx, &rc);
    if (lg == NULL)
        return rc;
    if (frag_cb != NULL && lg->int_frag != NULL)
        return FERRY_ERR_BUSY;
    lg->int_frag = frag_cb;
    lg->int_data = frag_cb != NULL ? data_cb : NULL;
    lg->int_arg = frag_cb != NULL ? arg : NULL;
    return FERRY_OK;
}

int ferry_am_register_data(ferry_ctx_t *ctx, int tag, ferry_am_data_cb_t cb, void *arg)
{
    int rc;
    if (!api_ctx_live(ctx) || ctx->api == NULL || !api_tag_valid(tag))
        return FERRY_ERR_INVALID;
    struct api_am_large *lg = large_get(ctx, &rc);
    if (lg == NULL)
        return rc;
    lg->data[tag].cb = cb;
    lg->data[tag].arg = cb != NULL ? arg : NULL;
    return FERRY_OK;
}

int ferry_am_sizes(ferry_ctx_t *ctx, int dst, ferry_am_sizes_t *out)
{
    int rc;
    if (out == NULL)
        return FERRY_ERR_INVALID;
    btl_peer_t *peer = api_peer(ctx, dst, &rc);
    if (peer == NULL)
        return rc;
    struct api_am_large *lg = large_get(ctx, &rc);
    if (lg == NULL)
        return rc;
    ferry_btl_module_t *btl = ctx->modules[peer->module_idx];
    out->eager_max = peer->max_send;
    out->rndv_min = peer->max_send + 1;
    out->large_max = lg->large_max;
    out->rndv = (ferry_am_rndv_t)proto_for(lg, btl, out->rndv_min);
    out->pipe_max = lg->rndv_mode == RNDV_AUTO ? btl->attr.rndv_pipe_max : 0;
    out->msg_eager_max = msg_cut(ctx, peer);
    int m = out->rndv == FERRY_AM_RNDV_GET ? keep_path(ctx, lg, dst) : -1;
    mem_rcache_t *c = m >= 0 ? keep_cache(ctx, lg, m) : NULL;
    out->keeps_keys = c != NULL && c->leave_pinned;
    return FERRY_OK;
}

/* ---- the receiver ---- */

static void data_free(struct api_am_large *lg, ferry_am_data_t *d)
{
    if (d->state == DATA_WAIT_REG || d->state == DATA_WAIT_PUT)
        lg->n_waiting--;
    else if (d->state == DATA_PIPE)
        lg->n_pipe--;
    if (lg->frag_last == d)
        lg->frag_last = NULL;
    util_list_remove(&lg->recvs, &d->link);
    lg->peer[d->src].n_recvs--;
    free(d->bounce);
    free(d->own);
    free(d);
}

static void release_held(ferry_ctx_t *ctx, struct api_am_large *lg, int src);

/* The transfer of d is over with status (the sender has been told, or is
 * told here for GET): the destination's owner hears of it. */
static void data_finish(ferry_ctx_t *ctx, struct api_am_large *lg, ferry_am_data_t *d, int status)
{
    if (d->mem != NULL) {
        ferry_mem_deregister(ctx, d->mem);
        d->mem = NULL;
    }
    if (status == FERRY_OK && d->bounce != NULL)
        ferry_convertor_unpack(&d->conv, d->bounce, d->n);
    if (status == FERRY_OK && d->n < d->len)
        status = FERRY_ERR_TRUNCATE;
    if (d->own != NULL) {
        /* Ferry's own buffer: the application's ordinary handler gets it,
         * and what was held behind it follows. */
        int src = d->src;
        if (status == FERRY_OK)
            api_am_deliver(ctx, src, d->tag, d->own, d->len);
        else
            rt_log(&ctx->log, RT_LOG_ERROR,
                   "a %zu-byte active message with tag %u from rank %d was lost: %s", d->len,
                   (unsigned)d->tag, src, ferry_strerror(status));
        data_free(lg, d);
        lg->peer[src].count--;
        release_held(ctx, lg, src);
        return;
    }
    ferry_comp_cb_t cb = d->cb;
    void *arg = d->arg;
    data_free(lg, d);
    run_cb(ctx, cb, arg, status);
}

/* A transfer that could not start: the sender is told, and the
 * destination's owner hears of it from progress (never inside the call that
 * tried). */
static void data_fail_now(ferry_ctx_t *ctx, struct api_am_large *lg, ferry_am_data_t *d, int status)
{
    send_fin(ctx, lg, d->src, d->id, status);
    if (d->own != NULL) {
        /* Only the announcement's handler starts these: in progress. */
        data_finish(ctx, lg, d, status);
        return;
    }
    if (d->mem != NULL) {
        ferry_mem_deregister(ctx, d->mem);
        d->mem = NULL;
    }
    if (due_add(ctx, d->cb, d->arg, status) != FERRY_OK)
        rt_log(&ctx->log, RT_LOG_ERROR, "out of memory: a receive's completion is lost");
    data_free(lg, d);
}

/* A get's callback finds the context through this pair. */
typedef struct get_arg {
    ferry_ctx_t *ctx;
    ferry_am_data_t *d;
} get_arg_t;

static void get_complete(void *arg, int status)
{
    get_arg_t *ga = arg;
    ferry_ctx_t *ctx = ga->ctx;
    ferry_am_data_t *d = ga->d;
    free(ga);
    struct api_am_large *lg = ctx->api->large;
    send_fin(ctx, lg, d->src, d->id, status);
    data_finish(ctx, lg, d, status);
}

/* PUT: the destination is registered for the duration and offered with a
 * clear-to-send. A transport out of registrations leaves the message
 * waiting (DATA_WAIT_REG), to be offered again from progress: nothing
 * accepted is dropped for lack of resources. Returns true while it waits
 * so (false: offered, or ended; d may be freed). */
static bool offer_put(ferry_ctx_t *ctx, struct api_am_large *lg, ferry_am_data_t *d)
{
    am_cts_t cts;
    memset(&cts, 0, sizeof(cts));
    int rc = api_mem_register_for(ctx, d->dst, d->n, FERRY_ACCESS_REMOTE_WRITE, d->src, &d->mem);
    if (rc == FERRY_ERR_NO_RESOURCE) {
        d->mem = NULL;
        if (d->state != DATA_WAIT_REG)
            lg->n_waiting++;
        d->state = DATA_WAIT_REG;
        return true;
    }
    if (rc == FERRY_OK)
        rc = ferry_mem_rkey(d->mem, &cts.rkey);
    if (rc != FERRY_OK) {
        data_fail_now(ctx, lg, d, rc);
        return false;
    }
    cts.id = d->id;
    cts.len = d->n;
    cts.raddr = (uint64_t)(uintptr_t)d->dst;
    if (d->state != DATA_WAIT_REG)
        lg->n_waiting++;
    d->state = DATA_WAIT_PUT;
    ctl_send(ctx, lg, d->src, API_TAG_AM_CTS, &cts, sizeof(cts));
    return false;
}

/* Takes d into conv (from its cursor): min(space, len) bytes. */
static int data_take(ferry_ctx_t *ctx, ferry_am_data_t *d, ferry_convertor_t *conv,
                     ferry_comp_cb_t cb, void *arg)
{
    struct api_am_large *lg = ctx->api->large;
    size_t space = ferry_convertor_remaining(conv);
    d->n = space < d->len ? space : d->len;
    d->cb = cb;
    d->arg = arg;
    d->state = DATA_MOVING;
    if (d->n == 0) {
        /* Nothing to move: the sender is done, the receiver hears from
         * progress. */
        send_fin(ctx, lg, d->src, d->id, FERRY_OK);
        int rc = due_add(ctx, cb, arg, d->len > 0 ? FERRY_ERR_TRUNCATE : FERRY_OK);
        data_free(lg, d);
        return rc;
    }
    void *dst = NULL;
    bool contig = !ferry_convertor_need_buffers(conv);
    if (d->proto == RNDV_PIPE) {
        /* The fragments go straight into place (a copy of conv unpacks
         * them in order); the sender starts on the clear-to-send. */
        if (contig) {
            d->dst = ferry_convertor_contig_ptr(conv);
        } else {
            d->conv = *conv;
            if (conv->iov == &conv->single)
                d->conv.iov = &d->conv.single;
        }
        d->got = 0;
        d->state = DATA_PIPE;
        lg->n_pipe++;
        am_cts_t cts;
        memset(&cts, 0, sizeof(cts));
        cts.id = d->id;
        cts.len = d->n;
        ctl_send(ctx, lg, d->src, API_TAG_AM_CTS, &cts, sizeof(cts));
        return FERRY_OK;
    }
    if (contig) {
        dst = ferry_convertor_contig_ptr(conv);
    } else if (space > d->len || d->proto == RNDV_PUT) {
        /* A layout longer than the message (a get would read past its
         * end), or one a put cannot address in one key: taken whole into
         * a buffer, then unpacked. */
        d->bounce = malloc(d->n);
        if (d->bounce == NULL) {
            data_fail_now(ctx, lg, d, FERRY_ERR_NO_MEMORY);
            return FERRY_OK;
        }
        d->conv = *conv;
        dst = d->bounce;
    }
    if (d->proto == RNDV_GET) {
        get_arg_t *ga = malloc(sizeof(*ga));
        if (ga == NULL) {
            data_fail_now(ctx, lg, d, FERRY_ERR_NO_MEMORY);
            return FERRY_OK;
        }
        ga->ctx = ctx;
        ga->d = d;
        int rc = dst != NULL
                     ? ferry_get(ctx, d->src, dst, d->n, NULL, d->raddr, &d->rkey, get_complete, ga)
                     : ferry_get_conv(ctx, d->src, conv, d->raddr, &d->rkey, get_complete, ga);
        if (rc != FERRY_OK) {
            free(ga);
            rt_log(&ctx->log, RT_LOG_WARN,
                   "taking a %zu-byte message from rank %d: get refused: %s", d->len, d->src,
                   ferry_strerror(rc));
            data_fail_now(ctx, lg, d, rc);
        }
        return FERRY_OK;
    }
    d->dst = dst;
    offer_put(ctx, lg, d);
    return FERRY_OK;
}

/* The checks every public call on an announced message makes. */
static bool data_live(ferry_ctx_t *ctx, const ferry_am_data_t *d)
{
    if (!api_ctx_live(ctx) || ctx->api == NULL || ctx->api->large == NULL || d == NULL)
        return false;
    for (util_list_item_t *it = util_list_first(&ctx->api->large->recvs); it != NULL;
         it = util_list_next(&ctx->api->large->recvs, it))
        if (UTIL_CONTAINER_OF(it, ferry_am_data_t, link) == d)
            return d->state == DATA_ANNOUNCED && d->own == NULL;
    return false;
}

int ferry_am_recv_data_conv(ferry_ctx_t *ctx, ferry_am_data_t *data, ferry_convertor_t *conv,
                            ferry_comp_cb_t cb, void *arg)
{
    if (conv == NULL || !data_live(ctx, data))
        return FERRY_ERR_INVALID;
    return data_take(ctx, data, conv, cb, arg);
}

int ferry_am_recv_data(ferry_ctx_t *ctx, ferry_am_data_t *data, void *buf, size_t len,
                       ferry_comp_cb_t cb, void *arg)
{
    if (buf == NULL && len > 0)
        return FERRY_ERR_INVALID;
    ferry_convertor_t conv;
    ferry_convertor_init_contig(&conv, buf, len);
    return ferry_am_recv_data_conv(ctx, data, &conv, cb, arg);
}

int ferry_am_data_drop(ferry_ctx_t *ctx, ferry_am_data_t *data)
{
    if (!data_live(ctx, data))
        return FERRY_ERR_INVALID;
    send_fin(ctx, ctx->api->large, data->src, data->id, FERRY_ERR_CANCELED);
    data_free(ctx->api->large, data);
    return FERRY_OK;
}

void api_am_large_open(const ferry_ctx_t *ctx, int peer, size_t *recvs_out,
                       size_t *answers_out)
{
    const struct api_am_large *lg = ctx->api != NULL ? ctx->api->large : NULL;
    *recvs_out = lg != NULL ? lg->peer[peer].n_recvs : 0;
    *answers_out = lg != NULL ? lg->peer[peer].n_answers : 0;
}

int api_am_data_peek_key(const ferry_am_data_t *data, uint64_t *raddr_out, ferry_rkey_t *rkey_out)
{
    if (data == NULL || raddr_out == NULL || rkey_out == NULL)
        return FERRY_ERR_INVALID;
    if (data->proto != RNDV_GET)
        return FERRY_ERR_NOT_SUPPORTED;
    *raddr_out = data->raddr;
    *rkey_out = data->rkey;
    return FERRY_OK;
}

/*
 * Whether an announcement from src may be taken in: not while src has
 * 2 * FERRY_AM_LARGE_INFLIGHT records and answers open here, which a peer
 * that keeps to the bound never has (see am_peer_t). A peer that does
 * floods this rank with announcements and leaves the answers untaken;
 * refusing each would only queue another answer on the path it keeps full
 * (or drop it, and a refused send would wait for ever). So it is taken as
 * failed, as the tagged layer takes a peer past FERRY_MSG_UNEXPECTED_COUNT:
 * said once, its answers dropped, its open messages ended by progress,
 * and what it announces afterwards dropped.
 */
static bool rts_admit(ferry_ctx_t *ctx, struct api_am_large *lg, int src)
{
    am_peer_t *p = &lg->peer[src];
    if (ctx->peers[src].failed) {
        rt_log_limited(&ctx->log, &lg->over_rl, RT_LOG_WARN,
                       "announcement from rank %d, taken as failed, dropped", src);
        return false;
    }
    size_t open = p->n_recvs + p->n_answers;
    if (open < 2 * lg->inflight)
        return true;
    char why[200];
    snprintf(why, sizeof(why),
             "rank %d announced a large message with %zu large messages and answers open "
             "here, twice FERRY_AM_LARGE_INFLIGHT (%zu); taken as failed",
             src, open, lg->inflight);
    rt_log_limited(&ctx->log, &lg->over_rl, RT_LOG_WARN, "%s", why);
    ctl_drop(lg, p);
    btl_ctx_fail_peer(ctx, src, FERRY_ERR_NO_MEMORY, "active messages", why);
    return false;
}

/* An announcement from src (not held). */
static void rts_recv(ferry_ctx_t *ctx, struct api_am_large *lg, int src, const void *msg,
                     size_t len)
{
    if (!rts_admit(ctx, lg, src))
        return;
    am_rts_t rts;
    if (len < AM_RTS_FIXED) {
        rt_log(&ctx->log, RT_LOG_WARN, "malformed announcement of %zu bytes from rank %d dropped",
               len, src);
        return;
    }
    memcpy(&rts, msg, AM_RTS_FIXED);
    /* The key's bytes that follow, then the header. */
    size_t klen = (rts.flags & AM_RTS_KEY_LEN) ? rts.key_len : sizeof(rts.rkey);
    const char *key = (const char *)msg + AM_RTS_FIXED;
    bool key_ok = (rts.flags & ~AM_RTS_KEY_LEN) == 0 && klen <= sizeof(rts.rkey) &&
                  klen <= len - AM_RTS_FIXED;
    const char *hdr = key + (key_ok ? klen : 0);
    size_t hlen = len - AM_RTS_FIXED - (key_ok ? klen : 0);
    bool internal = rts.tag == API_TAG_MSG;
    if (!key_ok || rts.hdr_len != hlen || hlen > API_AM_HDR_MAX || (hlen > 0 && !internal) ||
        (!internal && rts.tag > FERRY_AM_TAG_MAX) ||
        (rts.proto != RNDV_GET && rts.proto != RNDV_PUT && rts.proto != RNDV_PIPE)) {
        rt_log(&ctx->log, RT_LOG_WARN,
               "malformed announcement from rank %d (tag %u, protocol %u, flags %u, key %zu "
               "bytes, header %u of %zu bytes) refused",
               src, (unsigned)rts.tag, (unsigned)rts.proto, (unsigned)rts.flags, klen,
               (unsigned)rts.hdr_len, hlen);
        send_fin(ctx, lg, src, rts.id, FERRY_ERR_PROTO);
        return;
    }
    if (rts.len > SIZE_MAX / 2) {
        rt_log(&ctx->log, RT_LOG_ERROR,
               "rank %d announced a %llu-byte active message (tag %u): more than any process "
               "can address; refused",
               src, (unsigned long long)rts.len, (unsigned)rts.tag);
        send_fin(ctx, lg, src, rts.id, FERRY_ERR_TRUNCATE);
        return;
    }
    ferry_am_data_t *d = util_zalloc(sizeof(*d));
    if (d == NULL) {
        send_fin(ctx, lg, src, rts.id, FERRY_ERR_NO_MEMORY);
        return;
    }
    d->src = src;
    d->tag = rts.tag;
    d->proto = rts.proto;
    d->state = DATA_ANNOUNCED;
    d->id = rts.id;
    d->len = (size_t)rts.len;
    d->raddr = rts.raddr;
    memcpy(d->rkey.bytes, key, klen); /* the rest zero, as d */
    util_list_append(&lg->recvs, &d->link);
    lg->peer[src].n_recvs++;

    if (internal) {
        if (lg->int_data == NULL) {
            rt_log(&ctx->log, RT_LOG_WARN,
                   "tagged message of %zu bytes from rank %d, but no tagged layer here; dropped",
                   d->len, src);
            send_fin(ctx, lg, src, d->id, FERRY_ERR_CANCELED);
            data_free(lg, d);
            return;
        }
        ctx->in_callback++;
        lg->int_data(ctx, src, hdr, hlen, d, d->len, lg->int_arg);
        ctx->in_callback--;
        return;
    }
    if (lg->data[d->tag].cb != NULL) {
        ctx->in_callback++;
        lg->data[d->tag].cb(ctx, src, d->tag, d, d->len, lg->data[d->tag].arg);
        ctx->in_callback--;
        return;
    }
    if (ctx->api->am[d->tag].cb == NULL) {
        rt_log(&ctx->log, RT_LOG_WARN,
               "message of %zu bytes with tag %u from rank %d has no handler; dropped", d->len,
               (unsigned)d->tag, src);
        send_fin(ctx, lg, src, d->id, FERRY_ERR_CANCELED);
        data_free(lg, d);
        return;
    }
    /* Into ferry's own buffer, within FERRY_AM_LARGE_MAX, before anything
     * is allocated. */
    if (d->len > lg->large_max) {
        rt_log(&ctx->log, RT_LOG_ERROR,
               "rank %d announced a %zu-byte active message with tag %u, more than "
               "FERRY_AM_LARGE_MAX (%zu); refused",
               src, d->len, (unsigned)d->tag, lg->large_max);
        send_fin(ctx, lg, src, d->id, FERRY_ERR_TRUNCATE);
        data_free(lg, d);
        return;
    }
    d->own = malloc(d->len);
    if (d->own == NULL) {
        rt_log(&ctx->log, RT_LOG_ERROR,
               "out of memory for a %zu-byte active message from rank %d; refused", d->len, src);
        send_fin(ctx, lg, src, d->id, FERRY_ERR_NO_MEMORY);
        data_free(lg, d);
        return;
    }
    lg->peer[src].count++;
    ferry_convertor_t conv;
    ferry_convertor_init_contig(&conv, d->own, d->len);
    data_take(ctx, d, &conv, NULL, NULL);
}

static void fin_recv(ferry_ctx_t *ctx, struct api_am_large *lg, int src, const void *msg,
                     size_t len)
{
    am_fin_t fin;
    if (len != sizeof(fin)) {
        rt_log(&ctx->log, RT_LOG_WARN, "malformed completion of %zu bytes from rank %d dropped",
               len, src);
        return;
    }
    memcpy(&fin, msg, sizeof(fin));
    am_send_t *s = find_send(lg, src, fin.id);
    if (s == NULL || (s->proto == RNDV_PUT && s->putting)) {
        rt_log(&ctx->log, RT_LOG_WARN, "completion from rank %d for no send of its (id %llu)", src,
               (unsigned long long)fin.id);
        return;
    }
    int status = fin.status <= 0 && fin.status > FERRY_ERR_LAST ? fin.status : FERRY_ERR_PROTO;
    if (status == FERRY_OK && s->proto == RNDV_PIPE && (!s->streaming || s->off < s->todo)) {
        /* Done before it had all the data: not a receiver keeping to the
         * protocol. */
        rt_log(&ctx->log, RT_LOG_WARN,
               "rank %d completed message %llu before it was sent (%zu of %zu bytes)", src,
               (unsigned long long)fin.id, s->off, s->todo);
        status = FERRY_ERR_PROTO;
    }
    send_complete(ctx, lg, s, status);
}

/* A put-mode send is over: the receiver is told how it went (PUT_DONE),
 * then the send completes with the same status. */
static void put_finish(ferry_ctx_t *ctx, struct api_am_large *lg, am_send_t *s, int status)
{
    am_fin_t done = {.id = s->id, .status = status};
    ctl_send(ctx, lg, s->dst, API_TAG_AM_PUT_DONE, &done, sizeof(done));
    send_complete(ctx, lg, s, status);
}

/* Progress callback of the sender's put. */
typedef struct put_arg {
    ferry_ctx_t *ctx;
    am_send_t *s;
} put_arg_t;

static void put_complete(void *arg, int status)
{
    put_arg_t *pa = arg;
    ferry_ctx_t *ctx = pa->ctx;
    am_send_t *s = pa->s;
    free(pa);
    put_finish(ctx, ctx->api->large, s, status);
}

/* PIPE: one fragment of s from its cursor, as much as the path takes in
 * one message; s->off moves on when it is taken. Contiguous data goes
 * straight from the caller's buffer into the transport (after the
 * header), any other layout is packed there by the transport. */
static int frag_send(ferry_ctx_t *ctx, am_send_t *s)
{
    btl_peer_t *peer = &ctx->peers[s->dst];
    if (peer->module_idx < 0 || peer->failed)
        return FERRY_ERR_UNREACH;
    int m = peer->module_idx;
    ferry_btl_module_t *btl = ctx->modules[m];
    if (peer->max_send <= sizeof(am_frag_t))
        return FERRY_ERR_NOT_SUPPORTED;
    am_frag_t h = {.id = s->id, .off = s->off};
    size_t n = s->todo - s->off, room = peer->max_send - sizeof(h);
    if (n > room)
        n = room;
    if (!s->packing) {
        int rc = send_once(ctx, s->dst, API_TAG_AM_FRAG, &h, sizeof(h), s->buf + s->off, n);
        if (rc == FERRY_OK)
            s->off += n;
        return rc;
    }
    size_t start = s->conv.pos, size = n;
    ferry_btl_desc_t *des;
    int rc = bml_am_gate(ctx, s->dst);
    if (rc == FERRY_OK)
        rc = btl->ops->prepare_src(btl, peer->ep, NULL, &s->conv, sizeof(h), &size, 0, &des);
    if (rc == FERRY_OK && (size == 0 || size > n)) {
        btl->ops->free(btl, des);
        rc = FERRY_ERR;
    } else if (rc == FERRY_OK) {
        memcpy(ferry_btl_seg_ptr(&des->src[0]), &h, sizeof(h));
        rc = api_send_des(ctx, s->dst, m, des, API_TAG_AM_FRAG);
    }
    if (rc == FERRY_OK)
        s->off += size;
    else
        ferry_convertor_set_position(&s->conv, start);
    return rc;
}

static void put_finish(ferry_ctx_t *ctx, struct api_am_large *lg, am_send_t *s, int status);

/* PIPE: sends s's fragments while the path takes them; the rest waits for
 * progress. Once all are out s waits for the receiver's FIN. A path that
 * fails ends s, and the receiver hears of it as of a failed put. Returns
 * true when s has ended (it may be freed). */
static bool pipe_push(ferry_ctx_t *ctx, struct api_am_large *lg, am_send_t *s)
{
    while (s->off < s->todo) {
        int rc = frag_send(ctx, s);
        if (rc == FERRY_OK && s->off == s->todo)
            lg->n_pushing--;
        if (rc == FERRY_ERR_NO_RESOURCE)
            return false;
        if (rc != FERRY_OK) {
            rt_log(&ctx->log, RT_LOG_WARN,
                   "a %zu-byte message to rank %d failed after %zu bytes: %s", s->len, s->dst,
                   s->off, ferry_strerror(rc));
            put_finish(ctx, lg, s, rc);
            return true;
        }
    }
    return false;
}

static void cts_recv(ferry_ctx_t *ctx, struct api_am_large *lg, int src, const void *msg,
                     size_t len)
{
    am_cts_t cts;
    if (len != sizeof(cts)) {
        rt_log(&ctx->log, RT_LOG_WARN, "malformed clear-to-send of %zu bytes from rank %d", len,
               src);
        return;
    }
    memcpy(&cts, msg, sizeof(cts));
    am_send_t *s = find_send(lg, src, cts.id);
    if (s != NULL && s->proto == RNDV_PIPE && !s->streaming && cts.len > 0 &&
        cts.len <= s->len) {
        s->streaming = true;
        s->todo = (size_t)cts.len;
        lg->n_pushing++;
        pipe_push(ctx, lg, s);
        return;
    }
    if (s == NULL || s->proto != RNDV_PUT || s->putting || cts.len > s->len) {
        rt_log(&ctx->log, RT_LOG_WARN,
               "clear-to-send from rank %d for no send of its (id %llu, %llu bytes) ignored", src,
               (unsigned long long)cts.id, (unsigned long long)cts.len);
        return;
    }
    s->putting = true;
    put_arg_t *pa = malloc(sizeof(*pa));
    int rc = FERRY_ERR_NO_MEMORY;
    if (pa != NULL) {
        pa->ctx = ctx;
        pa->s = s;
        rc = ferry_put(ctx, src, s->buf, (size_t)cts.len, NULL, cts.raddr, &cts.rkey, put_complete,
                       pa);
    }
    if (rc != FERRY_OK) {
        free(pa);
        put_finish(ctx, lg, s, rc);
    }
}

static void put_done_recv(ferry_ctx_t *ctx, struct api_am_large *lg, int src, const void *msg,
                          size_t len)
{
    am_fin_t done;
    if (len != sizeof(done)) {
        rt_log(&ctx->log, RT_LOG_WARN, "malformed put completion of %zu bytes from rank %d", len,
               src);
        return;
    }
    memcpy(&done, msg, sizeof(done));
    for (util_list_item_t *it = util_list_first(&lg->recvs); it != NULL;
         it = util_list_next(&lg->recvs, it)) {
        ferry_am_data_t *d = UTIL_CONTAINER_OF(it, ferry_am_data_t, link);
        if (d->src == src && d->id == done.id &&
            (d->state == DATA_WAIT_PUT || d->state == DATA_PIPE)) {
            int status =
                done.status <= 0 && done.status > FERRY_ERR_LAST ? done.status : FERRY_ERR_PROTO;
            /* A PIPE sender says this only when it gives up. */
            if (d->state == DATA_PIPE && status == FERRY_OK)
                status = FERRY_ERR_PROTO;
            data_finish(ctx, lg, d, status);
            return;
        }
    }
    rt_log(&ctx->log, RT_LOG_WARN, "put completion from rank %d for no message of its (id %llu)",
           src, (unsigned long long)done.id);
}

/* A fragment of a PIPE message from src: checked against what was
 * announced and taken so far, then copied into place; the last one
 * finishes the message as a get's completion does. One that breaks the
 * order (its path is FIFO) or the bounds ends its message with
 * FERRY_ERR_PROTO at both ends; one for no message is dropped. */
static void frag_recv(ferry_ctx_t *ctx, struct api_am_large *lg, int src, const void *msg,
                      size_t len)
{
    am_frag_t h;
    if (len < sizeof(h)) {
        rt_log_limited(&ctx->log, &lg->frag_rl, RT_LOG_WARN,
                       "malformed fragment of %zu bytes from rank %d dropped", len, src);
        return;
    }
    memcpy(&h, msg, sizeof(h));
    const char *data = (const char *)msg + sizeof(h);
    size_t n = len - sizeof(h);
    ferry_am_data_t *d = lg->frag_last;
    if (d == NULL || d->src != src || d->id != h.id) {
        d = NULL;
        for (util_list_item_t *it = util_list_first(&lg->recvs); it != NULL;
             it = util_list_next(&lg->recvs, it)) {
            ferry_am_data_t *e = UTIL_CONTAINER_OF(it, ferry_am_data_t, link);
            if (e->src == src && e->id == h.id && e->state == DATA_PIPE) {
                d = e;
                break;
            }
        }
    }
    if (d == NULL || d->state != DATA_PIPE) {
        rt_log_limited(&ctx->log, &lg->frag_rl, RT_LOG_WARN,
                       "fragment from rank %d for no message of its (id %llu) dropped", src,
                       (unsigned long long)h.id);
        return;
    }
    if (h.off != d->got || n == 0 || n > d->n - d->got) {
        rt_log_limited(&ctx->log, &lg->frag_rl, RT_LOG_WARN,
                       "fragment from rank %d of %zu bytes at %llu for message %llu (%zu of %zu "
                       "bytes arrived) breaks its order or bounds; the message fails",
                       src, n, (unsigned long long)h.off, (unsigned long long)h.id, d->got, d->n);
        send_fin(ctx, lg, src, d->id, FERRY_ERR_PROTO);
        data_finish(ctx, lg, d, FERRY_ERR_PROTO);
        return;
    }
    if (d->dst != NULL)
        memcpy((char *)d->dst + d->got, data, n);
    else if (ferry_convertor_unpack(&d->conv, data, n) != n) {
        /* d->n is at most the layout's space: cannot happen. */
        send_fin(ctx, lg, src, d->id, FERRY_ERR);
        data_finish(ctx, lg, d, FERRY_ERR);
        return;
    }
    d->got += n;
    if (d->got < d->n) {
        lg->frag_last = d;
        return;
    }
    send_fin(ctx, lg, src, d->id, FERRY_OK);
    data_finish(ctx, lg, d, FERRY_OK);
}

/* A message in sender order from src: delivered, or held behind a large
 * one. */
static void ordered_recv(ferry_ctx_t *ctx, struct api_am_large *lg, int src, uint8_t tag,
                         const void *data, size_t len)
{
    if (tag == API_TAG_AM_RTS) {
        rts_recv(ctx, lg, src, data, len);
    } else if (tag == API_TAG_MSG) {
        if (lg->int_frag == NULL) {
            rt_log(&ctx->log, RT_LOG_WARN,
                   "tagged message from rank %d, but no tagged layer here; dropped", src);
            return;
        }
        ctx->in_callback++;
        lg->int_frag(ctx, src, data, len, lg->int_arg);
        ctx->in_callback--;
    } else {
        api_am_deliver(ctx, src, tag, data, len);
    }
}

static void release_held(ferry_ctx_t *ctx, struct api_am_large *lg, int src)
{
    am_peer_t *h = &lg->peer[src];
    util_list_item_t *it;
    while (h->count == 0 && (it = util_list_pop_front(&h->q)) != NULL) {
        am_queued_t *q = UTIL_CONTAINER_OF(it, am_queued_t, link);
        ordered_recv(ctx, lg, src, q->tag, q->data, q->len);
        free(q);
    }
}

bool api_am_large_holding(const ferry_ctx_t *ctx, int src)
{
    const struct api_am_large *lg = ctx->api->large;
    return lg != NULL && lg->peer[src].count > 0;
}

void api_am_large_hold(ferry_ctx_t *ctx, int src, uint8_t tag, const void *data, size_t len)
{
    struct api_am_large *lg = ctx->api->large;
    am_queued_t *q = malloc(sizeof(*q) + len);
    if (q == NULL) {
        rt_log(&ctx->log, RT_LOG_ERROR,
               "out of memory holding a %zu-byte message from rank %d; dropped", len, src);
        return;
    }
    q->peer = src;
    q->tag = tag;
    q->len = len;
    if (len > 0)
        memcpy(q->data, data, len);
    util_list_append(&lg->peer[src].q, &q->link);
}

void api_am_large_recv(ferry_ctx_t *ctx, int src, uint8_t tag, const void *data, size_t len)
{
    int rc;
    struct api_am_large *lg = large_get(ctx, &rc);
    if (lg == NULL) {
        rt_log(&ctx->log, RT_LOG_ERROR, "message with tag %u from rank %d dropped: %s",
               (unsigned)tag, src, ferry_strerror(rc));
        return;
    }
    switch (tag) {
    case API_TAG_AM_FIN:
        fin_recv(ctx, lg, src, data, len);
        return;
    case API_TAG_AM_CTS:
        cts_recv(ctx, lg, src, data, len);
        return;
    case API_TAG_AM_PUT_DONE:
        put_done_recv(ctx, lg, src, data, len);
        return;
    case API_TAG_AM_FRAG:
        /* For a message already taken in: never held behind it. */
        frag_recv(ctx, lg, src, data, len);
        return;
    case API_TAG_AM_RTS:
    case API_TAG_MSG:
        if (lg->peer[src].count > 0)
            api_am_large_hold(ctx, src, tag, data, len);
        else
            ordered_recv(ctx, lg, src, tag, data, len);
        return;
    default:
        rt_log(&ctx->log, RT_LOG_WARN, "message with ferry's tag %u from rank %d dropped",
               (unsigned)tag, src);
    }
}

/* ---- progress and teardown ---- */

/* The work of api_am_large_progress, kept out of line so that the common
 * case (nothing to do) pays for no saved registers. */
static int __attribute__((noinline)) large_progress(ferry_ctx_t *ctx, struct api_am_large *lg)
{
    int events = 0;
    util_list_item_t *it;
    for (int r = 0; r < ctx->size && lg->n_ctl > 0; r++) {
        am_peer_t *p = &lg->peer[r];
        if (!util_list_empty(&p->ctl) && ctx->peers[r].failed) {
            ctl_drop(lg, p); /* nothing reaches it any more */
            events++;
            continue;
        }
        while ((it = util_list_first(&p->ctl)) != NULL) {
            am_queued_t *q = UTIL_CONTAINER_OF(it, am_queued_t, link);
            int rc = send_once(ctx, r, q->tag, q->data, q->len, NULL, 0);
            if (rc == FERRY_ERR_NO_RESOURCE)
                break;
            if (rc != FERRY_OK)
                rt_log(&ctx->log, RT_LOG_WARN, "control message %u to rank %d not sent: %s",
                       (unsigned)q->tag, r, ferry_strerror(rc));
            util_list_remove(&p->ctl, it);
            ctl_count(lg, p, q->tag, -1);
            free(q);
            events++;
        }
    }
    /* Sends and announced messages of failed peers end now: no answer will
     * come. (A get or put in flight ends through its own callback.) Each
     * end runs callbacks that may change the lists, so the walk starts
     * again after one. */
    /* PIPE sends go on with the fragments the path had no room for. */
    bool again = ctx->n_failed > 0 || lg->n_pushing > 0;
    while (again) {
        again = false;
        for (it = util_list_first(&lg->sends); it != NULL; it = util_list_next(&lg->sends, it)) {
            am_send_t *s = UTIL_CONTAINER_OF(it, am_send_t, link);
            if (ctx->peers[s->dst].failed && !s->putting) {
                send_complete(ctx, lg, s, FERRY_ERR_UNREACH);
            } else if (s->streaming && s->off < s->todo) {
                size_t before = s->off;
                if (!pipe_push(ctx, lg, s)) {
                    if (s->off != before)
                        events++;
                    continue;
                }
            } else {
                continue;
            }
            events++;
            again = true;
            break;
        }
    }
    /* Only messages waiting for a registration or a put need looking at;
     * the others end through their own callbacks or when taken. */
    again = lg->n_waiting > 0 || (lg->n_pipe > 0 && ctx->n_failed > 0);
    while (again) {
        again = false;
        for (it = util_list_first(&lg->recvs); it != NULL; it = util_list_next(&lg->recvs, it)) {
            ferry_am_data_t *d = UTIL_CONTAINER_OF(it, ferry_am_data_t, link);
            bool waiting = d->state == DATA_WAIT_PUT || d->state == DATA_WAIT_REG ||
                           d->state == DATA_PIPE;
            if (ctx->peers[d->src].failed && waiting) {
                data_finish(ctx, lg, d, FERRY_ERR_UNREACH);
            } else if (d->state == DATA_WAIT_REG) {
                if (offer_put(ctx, lg, d))
                    continue; /* still out of registrations */
            } else {
                continue;
            }
            events++;
            again = true;
            break;
        }
    }
    while ((it = util_list_pop_front(&lg->due)) != NULL) {
        am_due_t *d = UTIL_CONTAINER_OF(it, am_due_t, link);
        ferry_comp_cb_t cb = d->cb;
        void *arg = d->arg;
        int status = d->status;
        free(d);
        run_cb(ctx, cb, arg, status);
        events++;
    }
    return events;
}

int api_am_large_progress(ferry_ctx_t *ctx)
{
    struct api_am_large *lg = ctx->api->large;
    /* The common case, on every progress once the state exists: nothing
     * to do. */
    if (lg == NULL || (lg->n_ctl == 0 && lg->n_waiting == 0 && lg->n_pushing == 0 &&
                       util_list_empty(&lg->due) &&
                       (ctx->n_failed == 0 || (util_list_empty(&lg->sends) && lg->n_pipe == 0))))
        return 0;
    return large_progress(ctx, lg);
}

void api_am_large_quiesce(ferry_ctx_t *ctx)
{
    struct api_am_large *lg = ctx->api != NULL ? ctx->api->large : NULL;
    if (lg == NULL)
        return;
    util_list_item_t *it, *next;
    for (it = util_list_first(&lg->recvs); it != NULL; it = next) {
        next = util_list_next(&lg->recvs, it);
        ferry_am_data_t *d = UTIL_CONTAINER_OF(it, ferry_am_data_t, link);
        if (d->state == DATA_ANNOUNCED && d->own == NULL) {
            rt_log(&ctx->log, RT_LOG_WARN,
                   "ferry_finalize: a %zu-byte message from rank %d was never taken; dropped",
                   d->len, d->src);
            send_fin(ctx, lg, d->src, d->id, FERRY_ERR_CANCELED);
            data_free(lg, d);
        }
    }
    /* A peer that never takes a message (or never answers its
     * rendezvous) must not hold this process here: past the deadline what
     * is left fails and its buffers are released. */
    uint64_t deadline = rt_now_ns() + (uint64_t)lg->finalize_ms * 1000000u;
    unsigned idle = 0;
    while (!util_list_empty(&lg->sends) || lg->n_ctl > 0 ||
           !util_list_empty(&lg->due)) {
        int rc = ferry_progress(ctx);
        if (rc < 0)
            break;
        if (rc == 0)
            rt_idle(&idle);
        else
            idle = 0;
        if (rt_now_ns() < deadline)
            continue;
        size_t n = 0;
        while ((it = util_list_first(&lg->sends)) != NULL) {
            send_complete(ctx, lg, UTIL_CONTAINER_OF(it, am_send_t, link), FERRY_ERR_TIMEOUT);
            n++;
        }
        for (int r = 0; r < ctx->size; r++)
            ctl_drop(lg, &lg->peer[r]);
        if (n > 0)
            rt_log(&ctx->log, RT_LOG_WARN,
                   "ferry_finalize: %zu large message(s) not taken within "
                   "FERRY_AM_FINALIZE_TIMEOUT (%lld ms); failed with FERRY_ERR_TIMEOUT",
                   n, lg->finalize_ms);
        /* What is due now runs once, and nothing waits again. */
        ferry_progress(ctx);
        break;
    }
}

void api_am_large_fini(ferry_ctx_t *ctx)
{
    struct api_am_large *lg = ctx->api != NULL ? ctx->api->large : NULL;
    if (lg == NULL)
        return;
    /* Gets and puts that del_procs ended still hold records of ours: their
     * callbacks run first, with nothing more sent. */
    lg->closing = true;
    api_rdma_progress(ctx);
    util_list_item_t *it;
    while ((it = util_list_first(&lg->sends)) != NULL)
        send_complete(ctx, lg, UTIL_CONTAINER_OF(it, am_send_t, link), FERRY_ERR_CANCELED);
    while ((it = util_list_first(&lg->recvs)) != NULL) {
        ferry_am_data_t *d = UTIL_CONTAINER_OF(it, ferry_am_data_t, link);
        if (d->mem != NULL)
            ferry_mem_deregister(ctx, d->mem);
        data_free(lg, d);
    }
    for (int r = 0; r < ctx->size; r++)
        ctl_drop(lg, &lg->peer[r]);
    while ((it = util_list_pop_front(&lg->due)) != NULL)
        free(UTIL_CONTAINER_OF(it, am_due_t, link));
    for (int r = 0; r < ctx->size; r++)
        while ((it = util_list_pop_front(&lg->peer[r].q)) != NULL)
            free(UTIL_CONTAINER_OF(it, am_queued_t, link));
    for (int m = 0; lg->keeps != NULL && m < ctx->n_modules; m++)
        mem_rcache_destroy(lg->keeps[m].cache);
    free(lg->keeps);
    free(lg->peer);
    free(lg);
    ctx->api->large = NULL;
}
