/*
 * Tagged messaging (include/ferry/msg.h) over ferry's active messages of
 * any size (src/api/am_large.c).
 *
 * A message is one fragment (the header below, then the data) when it fits
 * the path's max send size, else a rendezvous whose announcement carries
 * the header: the match happens when the header arrives, which is in the
 * order sent for one sender, so matching never lets one message of a
 * sender overtake another, whatever their protocols. A large message
 * matched (at once or later from the unexpected queue) is taken straight
 * into the receive buffer by ferry_am_recv_data_conv.
 *
 * Everything a peer writes is checked: the header's length against the
 * fragment and the announcement; nothing is written past a receive's
 * buffer (what does not fit is reported as FERRY_ERR_TRUNCATE). What one
 * peer may leave waiting unmatched here is bounded (FERRY_MSG_UNEXPECTED_
 * BYTES and _COUNT): a peer past a bound is taken as failed, said once, its
 * unmatched messages released, as a transport fails a peer that breaks its
 * protocol; so no peer can make this process hold memory without end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/msg.h>

#include "api/am_large.h"
#include "btl/ctx.h"
#include "rt/log.h"
#include "rt/progress.h"
#include "util/list.h"

/* What goes before a message's data: 16 bytes, so that an 8-byte message
 * with sm's ring header fills half a cache line and never straddles two.
 * The length is not in it: an eager message's is its fragment's, less the
 * header; a rendezvous's is the announcement's. */
typedef struct msg_wire {
    uint64_t tag;
    uint32_t ctx_id;
    uint32_t flags; /* 0: no flag is defined yet */
} msg_wire_t;

/* What a receive matches and reports of a message: its tag and context
 * (its flags, all 0, are checked on arrival) and the data's length. */
typedef struct msg_hdr {
    uint64_t tag;
    uint32_t ctx_id;
    uint64_t len;
} msg_hdr_t;

static msg_hdr_t hdr_of(const msg_wire_t *w, uint64_t len)
{
    return (msg_hdr_t){.tag = w->tag, .ctx_id = w->ctx_id, .len = len};
}

enum { REQ_SEND, REQ_RECV };
enum {
    REQ_QUEUED, /* send: waiting in this process for resources */
    REQ_POSTED, /* receive: waiting for a match */
    REQ_ACTIVE, /* matched or sent; data moving */
    REQ_DONE
};

struct ferry_msg_req {
    util_list_item_t link; /* in posted, or a peer's queue */
    ferry_msg_t *msg;
    int kind;
    int state;
    int peer; /* send: dst; receive: src or FERRY_MSG_ANY_SOURCE */
    uint32_t ctx_id;
    uint64_t tag;
    uint64_t mask;
    msg_wire_t hdr;         /* send: what goes first */
    ferry_convertor_t conv; /* the data, or the space for it */
    ferry_msg_status_t status;
};

/* A message that arrived before its receive. */
typedef struct msg_unexp {
    util_list_item_t link;
    int src;
    msg_hdr_t hdr;
    ferry_am_data_t *data; /* large: still at the sender */
    char bytes[];          /* eager: its copy */
} msg_unexp_t;

/* What one source has waiting in the unexpected queue. */
typedef struct msg_unexp_use {
    size_t bytes;   /* eager copies and records, in bytes of this process's memory */
    size_t count;   /* messages, eager and large */
} msg_unexp_use_t;

struct ferry_msg {
    ferry_ctx_t *ctx;
    util_list_t posted;     /* receives, in the order posted */
    util_list_t unexpected; /* messages, in the order arrived */
    msg_unexp_use_t *use;   /* [size] */
    size_t max_bytes, max_count; /* FERRY_MSG_UNEXPECTED_BYTES, _COUNT, per source */
    bool some_unreachable;       /* a rank that no transport reached from the start */
    util_list_t *queued;    /* [size] sends waiting for resources, per peer */
    size_t n_queued;
    size_t live; /* requests not yet freed */
    int size;
    /* Freed requests kept for reuse (at most MSG_SPARE_MAX): a send or
     * receive then costs no malloc. */
    util_list_t spare;
};

#define MSG_SPARE_MAX 256

static void conv_copy(ferry_convertor_t *dst, const ferry_convertor_t *src)
{
    *dst = *src;
    if (src->kind == FERRY_CONV_CONTIG)
        dst->iov = &dst->single;
}

static bool matches(const ferry_msg_req_t *r, int src, const msg_hdr_t *h)
{
    return r->ctx_id == h->ctx_id && (r->peer == FERRY_MSG_ANY_SOURCE || r->peer == src) &&
           ((r->tag ^ h->tag) & r->mask) == 0;
}

static void req_status(ferry_msg_req_t *r, int src, const msg_hdr_t *h)
{
    size_t space = ferry_convertor_remaining(&r->conv);
    r->status.source = src;
    r->status.tag = h->tag;
    r->status.context = h->ctx_id;
    r->status.len = (size_t)h->len;
    r->status.received = space < h->len ? space : (size_t)h->len;
}

static void recv_done(void *arg, int status)
{
    ferry_msg_req_t *r = arg;
    r->status.error = status;
    r->state = REQ_DONE;
}

/* Hands a matched message to receive r. */
static void deliver_eager(ferry_msg_req_t *r, int src, const msg_hdr_t *h, const void *data)
{
    req_status(r, src, h);
    if (r->conv.kind == FERRY_CONV_CONTIG && r->conv.pos == 0) {
        /* The common case, a plain buffer not yet written: one copy (the
         * request is done, so its cursor is not read again). */
        if (r->status.received > 0)
            memcpy(r->conv.single.base, data, r->status.received);
    } else {
        ferry_convertor_unpack(&r->conv, data, r->status.received);
    }
    r->status.error = r->status.received < r->status.len ? FERRY_ERR_TRUNCATE : FERRY_OK;
    r->state = REQ_DONE;
}

static void deliver_large(ferry_msg_t *m, ferry_msg_req_t *r, int src, const msg_hdr_t *h,
                          ferry_am_data_t *data)
{
    req_status(r, src, h);
    r->state = REQ_ACTIVE;
    int rc = ferry_am_recv_data_conv(m->ctx, data, &r->conv, recv_done, r);
    if (rc != FERRY_OK) {
        ferry_am_data_drop(m->ctx, data);
        r->status.error = rc;
        r->state = REQ_DONE;
    }
}

static ferry_msg_req_t *match_posted(ferry_msg_t *m, int src, const msg_hdr_t *h)
{
    for (util_list_item_t *it = util_list_first(&m->posted); it != NULL;
         it = util_list_next(&m->posted, it)) {
        ferry_msg_req_t *r = UTIL_CONTAINER_OF(it, ferry_msg_req_t, link);
        if (matches(r, src, h)) {
            util_list_remove(&m->posted, it);
            return r;
        }
    }
    return NULL;
}

static size_t unexp_cost(const msg_unexp_t *u)
{
    return sizeof(*u) + (u->data == NULL ? (size_t)u->hdr.len : 0);
}

static void unexp_remove(ferry_msg_t *m, msg_unexp_t *u)
{
    util_list_remove(&m->unexpected, &u->link);
    m->use[u->src].bytes -= unexp_cost(u);
    m->use[u->src].count--;
}

/* Every unmatched message of src goes: the senders of large ones complete
 * with FERRY_ERR_CANCELED. */
static void unexp_release_source(ferry_msg_t *m, int src)
{
    util_list_item_t *it = util_list_first(&m->unexpected);
    while (it != NULL) {
        util_list_item_t *next = util_list_next(&m->unexpected, it);
        msg_unexp_t *u = UTIL_CONTAINER_OF(it, msg_unexp_t, link);
        if (u->src == src) {
            unexp_remove(m, u);
            if (u->data != NULL)
                ferry_am_data_drop(m->ctx, u->data);
            free(u);
        }
        it = next;
    }
}

/* Whether src may leave one more message of cost bytes unmatched here;
 * if not, src is failed (once) and its unmatched messages released. */
static bool unexp_admit(ferry_msg_t *m, int src, size_t cost)
{
    msg_unexp_use_t *use = &m->use[src];
    bool bytes_ok = use->bytes <= m->max_bytes && cost <= m->max_bytes - use->bytes;
    if (bytes_ok && use->count < m->max_count)
        return true;
    char why[200];
    snprintf(why, sizeof(why),
             "rank %d would have %zu messages (%zu bytes) waiting unmatched here, over "
             "FERRY_MSG_UNEXPECTED_%s (%zu); taken as failed",
             src, use->count + 1, use->bytes + cost, bytes_ok ? "COUNT" : "BYTES",
             bytes_ok ? m->max_count : m->max_bytes);
    unexp_release_source(m, src);
    btl_ctx_fail_peer(m->ctx, src, FERRY_ERR_NO_MEMORY, "tagged messaging", why);
    return false;
}

static void unexp_append(ferry_msg_t *m, msg_unexp_t *u)
{
    util_list_append(&m->unexpected, &u->link);
    m->use[u->src].bytes += unexp_cost(u);
    m->use[u->src].count++;
}

/* A source that failed (its transport, another rank's word, or a bound
 * here) sends nothing more that is taken. */
static bool source_failed(const ferry_msg_t *m, int src)
{
    return m->ctx->peers[src].failed;
}

static void on_frag(ferry_ctx_t *ctx, int src, const void *data, size_t len, void *arg)
{
    ferry_msg_t *m = arg;
    msg_wire_t w;
    if (len < sizeof(w)) {
        rt_log(&ctx->log, RT_LOG_WARN,
               "tagged messaging: a %zu-byte fragment from rank %d is shorter than its "
               "header; dropped",
               len, src);
        return;
    }
    memcpy(&w, data, sizeof(w));
    const char *body = (const char *)data + sizeof(w);
    if (w.flags != 0) {
        rt_log(&ctx->log, RT_LOG_WARN,
               "tagged messaging: fragment from rank %d has flags 0x%x, none defined; dropped",
               src, (unsigned)w.flags);
        return;
    }
    msg_hdr_t h = hdr_of(&w, len - sizeof(w));
    if (source_failed(m, src))
        return;
    ferry_msg_req_t *r = match_posted(m, src, &h);
    if (r != NULL) {
        deliver_eager(r, src, &h, body);
        return;
    }
    if (!unexp_admit(m, src, sizeof(msg_unexp_t) + (size_t)h.len))
        return;
    msg_unexp_t *u = malloc(sizeof(*u) + (size_t)h.len);
    if (u == NULL) {
        rt_log(&ctx->log, RT_LOG_WARN,
               "tagged messaging: out of memory keeping a %llu-byte message from rank %d; "
               "dropped",
               (unsigned long long)h.len, src);
        return;
    }
    u->src = src;
    u->hdr = h;
    u->data = NULL;
    memcpy(u->bytes, body, (size_t)h.len);
    unexp_append(m, u);
}

static void on_data(ferry_ctx_t *ctx, int src, const void *hdr, size_t hlen, ferry_am_data_t *data,
                    size_t len, void *arg)
{
    ferry_msg_t *m = arg;
    msg_wire_t w;
    if (hlen != sizeof(w)) {
        rt_log(&ctx->log, RT_LOG_WARN,
               "tagged messaging: announcement from rank %d with a %zu-byte header; "
               "dropped",
               src, hlen);
        ferry_am_data_drop(ctx, data);
        return;
    }
    memcpy(&w, hdr, sizeof(w));
    if (w.flags != 0) {
        rt_log(&ctx->log, RT_LOG_WARN,
               "tagged messaging: announcement from rank %d has flags 0x%x, none defined; "
               "dropped",
               src, (unsigned)w.flags);
        ferry_am_data_drop(ctx, data);
        return;
    }
    msg_hdr_t h = hdr_of(&w, len);
    if (source_failed(m, src)) {
        ferry_am_data_drop(ctx, data);
        return;
    }
    ferry_msg_req_t *r = match_posted(m, src, &h);
    if (r != NULL) {
        deliver_large(m, r, src, &h, data);
        return;
    }
    if (!unexp_admit(m, src, sizeof(msg_unexp_t))) {
        ferry_am_data_drop(ctx, data);
        return;
    }
    msg_unexp_t *u = malloc(sizeof(*u));
    if (u == NULL) {
        ferry_am_data_drop(ctx, data);
        return;
    }
    u->src = src;
    u->hdr = h;
    u->data = data;
    unexp_append(m, u);
}

int ferry_msg_init(ferry_ctx_t *ctx, ferry_msg_t **msg_out)
{
    if (msg_out == NULL)
        return FERRY_ERR_INVALID;
    int size = ferry_size(ctx);
    if (size < 0)
        return size;
    ferry_msg_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return FERRY_ERR_NO_MEMORY;
    m->queued = calloc((size_t)size, sizeof(*m->queued));
    m->use = calloc((size_t)size, sizeof(*m->use));
    int rc = m->queued == NULL || m->use == NULL ? FERRY_ERR_NO_MEMORY : FERRY_OK;
    /* Declared at ferry_init with the others (api_am_large_register_params);
     * here their values are read. */
    if (rc == FERRY_OK)
        rc = rt_param_register_size(&ctx->params, "msg_unexpected_bytes",
                                    API_MSG_UNEXPECTED_BYTES_DEFAULT, 0, SIZE_MAX / 2, "",
                                    &m->max_bytes);
    if (rc == FERRY_OK)
        rc = rt_param_register_size(&ctx->params, "msg_unexpected_count",
                                    API_MSG_UNEXPECTED_COUNT_DEFAULT, 0, SIZE_MAX / 2, "",
                                    &m->max_count);
    if (rc != FERRY_OK) {
        free(m->use);
        free(m->queued);
        free(m);
        return rc;
    }
    m->ctx = ctx;
    m->size = size;
    for (int r = 0; r < size; r++)
        m->some_unreachable = m->some_unreachable || ctx->peers[r].module_idx < 0;
    util_list_init(&m->posted);
    util_list_init(&m->unexpected);
    util_list_init(&m->spare);
    for (int r = 0; r < size; r++)
        util_list_init(&m->queued[r]);
    rc = api_am_register_internal(ctx, on_frag, on_data, m);
    if (rc != FERRY_OK) {
        free(m->use);
        free(m->queued);
        free(m);
        return rc;
    }
    *msg_out = m;
    return FERRY_OK;
}

int ferry_msg_fini(ferry_msg_t **msg_p)
{
    if (msg_p == NULL || *msg_p == NULL)
        return FERRY_OK;
    ferry_msg_t *m = *msg_p;
    if (m->live > 0)
        return FERRY_ERR_BUSY;
    util_list_item_t *it;
    while ((it = util_list_pop_front(&m->unexpected)) != NULL) {
        msg_unexp_t *u = UTIL_CONTAINER_OF(it, msg_unexp_t, link);
        if (u->data != NULL)
            ferry_am_data_drop(m->ctx, u->data);
        free(u);
    }
    api_am_register_internal(m->ctx, NULL, NULL, NULL);
    while ((it = util_list_pop_front(&m->spare)) != NULL)
        free(UTIL_CONTAINER_OF(it, ferry_msg_req_t, link));
    free(m->use);
    free(m->queued);
    free(m);
    *msg_p = NULL;
    return FERRY_OK;
}

static ferry_msg_req_t *req_new(ferry_msg_t *m, int kind, int peer, uint32_t ctx_id, uint64_t tag,
                                uint64_t mask, const ferry_convertor_t *conv)
{
    util_list_item_t *it = util_list_pop_front(&m->spare);
    ferry_msg_req_t *r = it != NULL ? UTIL_CONTAINER_OF(it, ferry_msg_req_t, link)
                                    : malloc(sizeof(*r));
    if (r == NULL)
        return NULL;
    /* Field by field: the record is large (a convertor), and its link and
     * a send's header are written where they are used. */
    r->msg = m;
    r->kind = kind;
    r->state = REQ_QUEUED;
    r->peer = peer;
    r->ctx_id = ctx_id;
    r->tag = tag;
    r->mask = mask;
    if (conv != NULL)
        conv_copy(&r->conv, conv); /* NULL: a send done at once, whose data is never read */
    r->status = (ferry_msg_status_t){.source = kind == REQ_SEND ? m->ctx->rank : peer,
                                     .tag = tag,
                                     .context = ctx_id};
    m->live++;
    return r;
}

static void req_free(ferry_msg_t *m, ferry_msg_req_t *r)
{
    m->live--;
    if (util_list_len(&m->spare) < MSG_SPARE_MAX)
        util_list_prepend(&m->spare, &r->link);
    else
        free(r);
}

static void send_done(void *arg, int status)
{
    ferry_msg_req_t *r = arg;
    r->status.error = status;
    r->state = REQ_DONE;
}

/* One try of a send. FERRY_ERR_NO_RESOURCE: try again later. */
static int send_try(ferry_msg_t *m, ferry_msg_req_t *r)
{
    bool done = false;
    int rc = api_am_send_internal(m->ctx, r->peer, &r->hdr, sizeof(r->hdr), &r->conv, send_done, r,
                                  &done);
    if (rc != FERRY_OK)
        return rc;
    r->state = done ? REQ_DONE : REQ_ACTIVE;
    return FERRY_OK;
}

/* The sends waiting for resources to peer p go on, in order, while they
 * can. */
static int drain_peer(ferry_msg_t *m, int p)
{
    int events = 0;
    util_list_item_t *it;
    while ((it = util_list_first(&m->queued[p])) != NULL) {
        ferry_msg_req_t *r = UTIL_CONTAINER_OF(it, ferry_msg_req_t, link);
        int rc = send_try(m, r);
        if (rc == FERRY_ERR_NO_RESOURCE)
            break;
        util_list_remove(&m->queued[p], it);
        m->n_queued--;
        if (rc != FERRY_OK) {
            r->status.error = rc;
            r->state = REQ_DONE;
        }
        events++;
    }
    return events;
}

/* Sends waiting for resources go on, in order per peer. */
static int drain_queued(ferry_msg_t *m)
{
    int events = 0;
    for (int p = 0; p < m->size && m->n_queued > 0; p++)
        events += drain_peer(m, p);
    return events;
}

int ferry_msg_progress(ferry_msg_t *m)
{
    if (m == NULL)
        return FERRY_ERR_INVALID;
    int rc = ferry_progress(m->ctx);
    if (rc < 0)
        return rc;
    if (m->n_queued > 0)
        rc += drain_queued(m);
    return rc;
}

int ferry_msg_isend_conv(ferry_msg_t *m, int dst, uint32_t ctx_id, uint64_t tag,
                         ferry_convertor_t *conv, ferry_msg_req_t **req_out)
{
    if (m == NULL || conv == NULL || req_out == NULL || dst < 0 || dst >= m->size)
        return FERRY_ERR_INVALID;
    /* An unreachable dst: the first try says so (FERRY_ERR_UNREACH) and the
     * request goes; behind a queued send, the try from the queue does. */
    ferry_msg_req_t *r = req_new(m, REQ_SEND, dst, ctx_id, tag, FERRY_MSG_TAG_EXACT, conv);
    if (r == NULL)
        return FERRY_ERR_NO_MEMORY;
    r->hdr = (msg_wire_t){.tag = tag, .ctx_id = ctx_id};
    r->status.len = r->status.received = ferry_convertor_remaining(conv);
    /* Inside a callback a send the transport has no room for is held in
     * ferry's callback queue (eager: copied; large: its announcement),
     * which leaves with ferry_progress and is bounded by
     * FERRY_CB_QUEUE_MAX; the sends already waiting here for dst go there
     * first, so that order holds. Past the bound the send is refused, as
     * the API's own sends are there. */
    bool in_callback = m->ctx->in_callback > 0;
    if (in_callback && !util_list_empty(&m->queued[dst]))
        drain_peer(m, dst);
    int rc = util_list_empty(&m->queued[dst]) ? send_try(m, r) : FERRY_ERR_NO_RESOURCE;
    if (rc == FERRY_ERR_NO_RESOURCE && in_callback) {
        req_free(m, r);
        return rc;
    }
    if (rc == FERRY_ERR_NO_RESOURCE) {
        r->state = REQ_QUEUED;
        util_list_append(&m->queued[dst], &r->link);
        m->n_queued++;
    } else if (rc != FERRY_OK) {
        req_free(m, r);
        return rc;
    }
    /* The caller's convertor has been read from (or will be, from ours). */
    ferry_convertor_set_position(conv, conv->total);
    *req_out = r;
    return FERRY_OK;
}

/* One try of an eager send of contiguous data straight from buf, with no
 * convertor and no request: FERRY_OK when it left, 1 when it must take
 * the general path (too large for one fragment, sends queued before it,
 * or no resources now), else the error. */
static int send_flat(ferry_msg_t *m, int dst, uint32_t ctx_id, uint64_t tag, const void *buf,
                     size_t len)
{
    if (!util_list_empty(&m->queued[dst]))
        return 1; /* nothing overtakes what waits */
    msg_wire_t h = {.tag = tag, .ctx_id = ctx_id};
    int rc = api_am_send_flat_internal(m->ctx, dst, &h, sizeof(h), buf, len);
    return rc == FERRY_ERR_NO_RESOURCE ? 1 : rc;
}

int ferry_msg_isend(ferry_msg_t *m, int dst, uint32_t ctx_id, uint64_t tag, const void *buf,
                    size_t len, ferry_msg_req_t **req_out)
{
    if (buf == NULL && len > 0)
        return FERRY_ERR_INVALID;
    if (m != NULL && req_out != NULL && dst >= 0 && dst < m->size) {
        /* The request is made first: once the data has left, the call
         * cannot fail. */
        ferry_msg_req_t *r = req_new(m, REQ_SEND, dst, ctx_id, tag, FERRY_MSG_TAG_EXACT, NULL);
        if (r == NULL)
            return FERRY_ERR_NO_MEMORY;
        int rc = send_flat(m, dst, ctx_id, tag, buf, len);
        if (rc == FERRY_OK) {
            r->status.len = r->status.received = len;
            r->state = REQ_DONE;
            *req_out = r;
            return FERRY_OK;
        }
        req_free(m, r);
        if (rc != 1)
            return rc;
    }
    ferry_convertor_t conv;
    ferry_convertor_init_contig(&conv, buf, len);
    return ferry_msg_isend_conv(m, dst, ctx_id, tag, &conv, req_out);
}

int ferry_msg_send(ferry_msg_t *m, int dst, uint32_t ctx_id, uint64_t tag, const void *buf,
                   size_t len)
{
    if (m != NULL && m->ctx->in_callback > 0)
        return FERRY_ERR_BUSY; /* it could not wait there */
    if (m != NULL && dst >= 0 && dst < m->size && (buf != NULL || len == 0)) {
        int rc = send_flat(m, dst, ctx_id, tag, buf, len);
        if (rc != 1)
            return rc;
    }
    ferry_msg_req_t *r;
    int rc = ferry_msg_isend(m, dst, ctx_id, tag, buf, len, &r);
    if (rc != FERRY_OK)
        return rc;
    return ferry_msg_wait(m, &r, NULL);
}

static msg_unexp_t *find_unexpected(ferry_msg_t *m, int src, uint32_t ctx_id, uint64_t tag,
                                    uint64_t mask)
{
    ferry_msg_req_t probe = {.peer = src, .ctx_id = ctx_id, .tag = tag, .mask = mask};
    for (util_list_item_t *it = util_list_first(&m->unexpected); it != NULL;
         it = util_list_next(&m->unexpected, it)) {
        msg_unexp_t *u = UTIL_CONTAINER_OF(it, msg_unexp_t, link);
        if (matches(&probe, u->src, &u->hdr))
            return u;
    }
    return NULL;
}

/* A receive into r, whose convertor is set: matched now against the
 * unexpected queue, else posted. */
static void recv_start(ferry_msg_t *m, ferry_msg_req_t *r, int src, uint32_t ctx_id,
                       uint64_t tag, uint64_t mask, ferry_msg_req_t **req_out)
{
    msg_unexp_t *u = find_unexpected(m, src, ctx_id, tag, mask);
    if (u != NULL) {
        unexp_remove(m, u);
        if (u->data != NULL)
            deliver_large(m, r, u->src, &u->hdr, u->data);
        else
            deliver_eager(r, u->src, &u->hdr, u->bytes);
        free(u);
    } else {
        r->state = REQ_POSTED;
        util_list_append(&m->posted, &r->link);
    }
    *req_out = r;
}

static bool recv_args_ok(const ferry_msg_t *m, int src, ferry_msg_req_t *const *req_out)
{
    return m != NULL && req_out != NULL &&
           (src == FERRY_MSG_ANY_SOURCE || (src >= 0 && src < m->size));
}

int ferry_msg_irecv_conv(ferry_msg_t *m, int src, uint32_t ctx_id, uint64_t tag, uint64_t mask,
                         ferry_convertor_t *conv, ferry_msg_req_t **req_out)
{
    if (conv == NULL || !recv_args_ok(m, src, req_out))
        return FERRY_ERR_INVALID;
    ferry_msg_req_t *r = req_new(m, REQ_RECV, src, ctx_id, tag, mask, conv);
    if (r == NULL)
        return FERRY_ERR_NO_MEMORY;
    recv_start(m, r, src, ctx_id, tag, mask, req_out);
    return FERRY_OK;
}

int ferry_msg_irecv(ferry_msg_t *m, int src, uint32_t ctx_id, uint64_t tag, uint64_t mask,
                    void *buf, size_t len, ferry_msg_req_t **req_out)
{
    if ((buf == NULL && len > 0) || !recv_args_ok(m, src, req_out))
        return FERRY_ERR_INVALID;
    /* The convertor is made in the request, not copied into it. */
    ferry_msg_req_t *r = req_new(m, REQ_RECV, src, ctx_id, tag, mask, NULL);
    if (r == NULL)
        return FERRY_ERR_NO_MEMORY;
    ferry_convertor_init_contig(&r->conv, buf, len);
    recv_start(m, r, src, ctx_id, tag, mask, req_out);
    return FERRY_OK;
}

int ferry_msg_recv(ferry_msg_t *m, int src, uint32_t ctx_id, uint64_t tag, uint64_t mask, void *buf,
                   size_t len, ferry_msg_status_t *status)
{
    if (m != NULL && m->ctx->in_callback > 0)
        return FERRY_ERR_BUSY; /* it could not wait there */
    ferry_msg_req_t *r;
    int rc = ferry_msg_irecv(m, src, ctx_id, tag, mask, buf, len, &r);
    if (rc != FERRY_OK)
        return rc;
    return ferry_msg_wait(m, &r, status);
}

/* A posted receive from one rank that has failed can never match. */
static void check_failed_source(ferry_msg_t *m, ferry_msg_req_t *r)
{
    if (r->kind == REQ_RECV && r->state == REQ_POSTED && r->peer != FERRY_MSG_ANY_SOURCE &&
        r->peer != ferry_rank(m->ctx) && ferry_am_max_size(m->ctx, r->peer) == FERRY_ERR_UNREACH) {
        util_list_remove(&m->posted, &r->link);
        r->status.error = FERRY_ERR_UNREACH;
        r->state = REQ_DONE;
    }
}

static int req_finish(ferry_msg_t *m, ferry_msg_req_t **req, ferry_msg_status_t *status)
{
    ferry_msg_req_t *r = *req;
    int outcome = r->status.error;
    if (status != NULL)
        *status = r->status;
    req_free(m, r);
    *req = NULL;
    return outcome;
}

int ferry_msg_test(ferry_msg_t *m, ferry_msg_req_t **req, int *done, ferry_msg_status_t *status)
{
    if (m == NULL || req == NULL || done == NULL)
        return FERRY_ERR_INVALID;
    if (*req == NULL) {
        *done = 1;
        return FERRY_OK;
    }
    if ((*req)->msg != m)
        return FERRY_ERR_INVALID;
    if ((*req)->state != REQ_DONE) {
        int rc = ferry_msg_progress(m);
        if (rc < 0)
            return rc;
        check_failed_source(m, *req);
    }
    if ((*req)->state != REQ_DONE) {
        *done = 0;
        return FERRY_OK;
    }
    *done = 1;
    return req_finish(m, req, status);
}

int ferry_msg_wait(ferry_msg_t *m, ferry_msg_req_t **req, ferry_msg_status_t *status)
{
    int index;
    if (req == NULL)
        return FERRY_ERR_INVALID;
    /* Done already (an eager send, a receive matched on posting): no
     * progress. */
    if (m != NULL && *req != NULL && (*req)->msg == m && (*req)->state == REQ_DONE)
        return req_finish(m, req, status);
    return ferry_msg_waitany(m, 1, req, &index, status);
}

int ferry_msg_waitany(ferry_msg_t *m, size_t n, ferry_msg_req_t **reqs, int *index,
                      ferry_msg_status_t *status)
{
    if (m == NULL || (reqs == NULL && n > 0) || index == NULL || n > INT32_MAX)
        return FERRY_ERR_INVALID;
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if (reqs[i] != NULL && reqs[i]->msg != m)
            return FERRY_ERR_INVALID;
        any = any || reqs[i] != NULL;
    }
    *index = -1;
    if (!any)
        return FERRY_OK;
    unsigned idle = 0;
    for (;;) {
        for (size_t i = 0; i < n; i++) {
            if (reqs[i] != NULL && reqs[i]->state == REQ_DONE) {
                *index = (int)i;
                return req_finish(m, &reqs[i], status);
            }
        }
        /* Inside a ferry callback progress does nothing: waiting would
         * never end. */
        if (m->ctx->in_callback > 0)
            return FERRY_ERR_BUSY;
        int rc = ferry_msg_progress(m);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            rt_idle(&idle);
            /* Only a rank that failed, or that nothing reaches, leaves a
             * receive waiting for a source that will not send. */
            for (size_t i = 0; i < n && (m->ctx->n_failed > 0 || m->some_unreachable); i++)
                if (reqs[i] != NULL)
                    check_failed_source(m, reqs[i]);
        } else {
            idle = 0;
        }
    }
}

int ferry_msg_iprobe(ferry_msg_t *m, int src, uint32_t ctx_id, uint64_t tag, uint64_t mask,
                     int *found, ferry_msg_status_t *status)
{
    if (m == NULL || found == NULL || (src != FERRY_MSG_ANY_SOURCE && (src < 0 || src >= m->size)))
        return FERRY_ERR_INVALID;
    int rc = ferry_msg_progress(m);
    if (rc < 0)
        return rc;
    msg_unexp_t *u = find_unexpected(m, src, ctx_id, tag, mask);
    *found = u != NULL;
    if (u != NULL && status != NULL)
        *status = (ferry_msg_status_t){.source = u->src,
                                       .tag = u->hdr.tag,
                                       .context = u->hdr.ctx_id,
                                       .len = (size_t)u->hdr.len,
                                       .received = 0,
                                       .error = FERRY_OK};
    return FERRY_OK;
}

int ferry_msg_probe(ferry_msg_t *m, int src, uint32_t ctx_id, uint64_t tag, uint64_t mask,
                    ferry_msg_status_t *status)
{
    unsigned idle = 0;
    for (;;) {
        int found = 0;
        int rc = ferry_msg_iprobe(m, src, ctx_id, tag, mask, &found, status);
        if (rc != FERRY_OK || found)
            return rc;
        if (m->ctx->in_callback > 0)
            return FERRY_ERR_BUSY; /* as ferry_msg_waitany */
        if (src != FERRY_MSG_ANY_SOURCE && src != ferry_rank(m->ctx) &&
            ferry_am_max_size(m->ctx, src) == FERRY_ERR_UNREACH)
            return FERRY_ERR_UNREACH;
        rt_idle(&idle);
    }
}

int ferry_msg_cancel(ferry_msg_t *m, ferry_msg_req_t *r)
{
    if (m == NULL || r == NULL || r->msg != m)
        return FERRY_ERR_INVALID;
    if (r->state == REQ_POSTED) {
        util_list_remove(&m->posted, &r->link);
    } else if (r->state == REQ_QUEUED) {
        util_list_remove(&m->queued[r->peer], &r->link);
        m->n_queued--;
    } else {
        return FERRY_ERR_BUSY;
    }
    r->status.error = FERRY_ERR_CANCELED;
    r->status.received = 0;
    r->state = REQ_DONE;
    return FERRY_OK;
}
