/*
 * Active messages at the application API: tags map one to one onto transport
 * tags, and the sender's rank comes from the transport, so a message carries
 * no ferry header at all.
 */
#include <stdlib.h>
#include <string.h>

#include "api/am_large.h"
#include "api/api.h"
#include "bml/bml.h"

void api_barrier_recv(ferry_ctx_t *ctx, const void *data, size_t len);

int ferry_am_register(ferry_ctx_t *ctx, int tag, ferry_am_cb_t cb, void *arg)
{
    if (!api_ctx_live(ctx) || ctx->api == NULL || !api_tag_valid(tag))
        return FERRY_ERR_INVALID;
    ctx->api->am[tag].cb = cb;
    ctx->api->am[tag].arg = cb != NULL ? arg : NULL;
    return FERRY_OK;
}

long ferry_am_max_size(ferry_ctx_t *ctx, int dst)
{
    int rc;
    btl_peer_t *peer = api_peer(ctx, dst, &rc);
    if (peer == NULL)
        return rc;
    return (long)peer->max_send;
}

/* ferry_am_send for every case (below, the common one). */
static int __attribute__((noinline))
am_send(ferry_ctx_t *ctx, int dst, int tag, const void *data, size_t len)
{
    int rc;
    if (!api_tag_valid(tag) || (data == NULL && len > 0))
        return FERRY_ERR_INVALID;
    btl_peer_t *peer = api_peer(ctx, dst, &rc);
    if (peer == NULL)
        return rc;
    ferry_btl_module_t *btl = ctx->modules[peer->module_idx];
    if (len > peer->max_send) {
        ferry_convertor_t large;
        ferry_convertor_init_contig(&large, data, len);
        return api_am_send_large_blocking(ctx, dst, tag, &large);
    }
    /* Messages queued from callbacks go first. */
    if (api_cbq_waiting(ctx, dst))
        return ctx->in_callback > 0 ? api_cbq_push(ctx, dst, tag, data, NULL, len)
                                    : FERRY_ERR_NO_RESOURCE;
    /* To a peer with several rails a copy is kept for the replay (bml.h);
     * nothing may overtake a replay under way. */
    int m = peer->module_idx;
    bool keeping = bml_keeping(ctx, dst);
    if (keeping && (rc = bml_am_gate(ctx, dst)) != FERRY_OK)
        return rc == FERRY_ERR_NO_RESOURCE && ctx->in_callback > 0
                   ? api_cbq_push(ctx, dst, tag, data, NULL, len)
                   : rc;
    /* An inline send copies straight from the caller's buffer to the
     * transport; a descriptor would add a copy. */
    if (btl->attr.flags & FERRY_BTL_FLAG_SENDI) {
        if (keeping && (rc = bml_am_keep(ctx, dst, (uint8_t)tag, NULL, 0, data, len)) != FERRY_OK)
            return rc;
        rc = btl->ops->sendi(btl, peer->ep, NULL, 0, data, len, (uint8_t)tag);
        if (keeping)
            rc = bml_am_sent(ctx, dst, m, rc);
        if (rc == FERRY_OK)
            api_am_sent(ctx, dst);
        else if (rc == FERRY_ERR_NO_RESOURCE && ctx->in_callback > 0)
            rc = api_cbq_push(ctx, dst, tag, data, NULL, len);
        return rc;
    }
    ferry_convertor_t conv;
    ferry_convertor_init_contig(&conv, data, len);
    size_t size = len;
    ferry_btl_desc_t *des;
    rc = btl->ops->prepare_src(btl, peer->ep, NULL, &conv, 0, &size, 0, &des);
    if (rc == FERRY_ERR_NO_RESOURCE && ctx->in_callback > 0)
        return api_cbq_push(ctx, dst, tag, data, NULL, len);
    if (rc != FERRY_OK)
        return rc;
    if (size != len) {
        /* The transport packed less than its own max send size allows. */
        btl->ops->free(btl, des);
        return FERRY_ERR;
    }
    rc = api_send_des(ctx, dst, m, des, (uint8_t)tag);
    if (rc == FERRY_OK)
        api_am_sent(ctx, dst);
    if (rc == FERRY_ERR_NO_RESOURCE && ctx->in_callback > 0)
        rc = api_cbq_push(ctx, dst, tag, data, NULL, len);
    return rc;
}

/* ferry_am_send's common case inside a callback (a handler's reply): what
 * the transport has no room for is queued, to leave with progress. */
static int __attribute__((noinline))
am_send_in_callback(ferry_ctx_t *ctx, ferry_btl_module_t *btl, btl_peer_t *peer, int dst, int tag,
                    const void *data, size_t len)
{
    int rc = btl->ops->sendi(btl, peer->ep, NULL, 0, data, len, (uint8_t)tag);
    if (rc == FERRY_ERR_NO_RESOURCE)
        rc = api_cbq_push(ctx, dst, tag, data, NULL, len);
    return rc;
}

/* The common case with nothing to call but the transport: a message that
 * fits one send to a reachable peer of one rail, with nothing queued from
 * callbacks, through a transport with sendi. Outside callbacks its answer
 * is the call's (as in am_send), so that the send is the call's last step;
 * inside one, am_send_in_callback queues what it refuses. Anything else is
 * am_send's to decide from the start. */
int ferry_am_send(ferry_ctx_t *ctx, int dst, int tag, const void *data, size_t len)
{
    if (__builtin_expect(ctx != NULL && ctx->magic == BTL_CTX_MAGIC && ctx->api != NULL &&
                             (unsigned)dst < (unsigned)ctx->size && api_tag_valid(tag) &&
                             (data != NULL || len == 0),
                         1)) {
        btl_peer_t *peer = &ctx->peers[dst];
        if (__builtin_expect(peer->module_idx >= 0 && !peer->failed && len <= peer->max_send &&
                                 ctx->api->cbq_count == 0 && !bml_keeping(ctx, dst),
                             1)) {
            ferry_btl_module_t *btl = ctx->modules[peer->module_idx];
            if (btl->attr.flags & FERRY_BTL_FLAG_SENDI) {
                /* Marked before the send: a send refused leaves one flush
                 * marker more to go, never one too few. */
                api_am_sent(ctx, dst);
                if (__builtin_expect(ctx->in_callback == 0, 1))
                    return btl->ops->sendi(btl, peer->ep, NULL, 0, data, len, (uint8_t)tag);
                return am_send_in_callback(ctx, btl, peer, dst, tag, data, len);
            }
        }
    }
    return am_send(ctx, dst, tag, data, len);
}

int api_send_des(ferry_ctx_t *ctx, int dst, int m, ferry_btl_desc_t *des, uint8_t tag)
{
    ferry_btl_module_t *btl = ctx->modules[m];
    des->flags |= FERRY_BTL_DES_OWNERSHIP;
    des->cbfunc = NULL;
    int rc = bml_am_keep_des(ctx, dst, tag, des);
    if (rc != FERRY_OK) {
        btl->ops->free(btl, des);
        return rc;
    }
    rc = btl->ops->send(btl, ctx->peers[dst].eps[m], des, tag);
    if (rc != FERRY_OK)
        btl->ops->free(btl, des);
    return bml_am_sent(ctx, dst, m, rc);
}

int api_send_two_kept(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *hdr, size_t hlen,
                      const void *payload, size_t plen)
{
    int m = ctx->peers[dst].module_idx;
    int rc = bml_am_gate(ctx, dst);
    if (rc == FERRY_OK)
        rc = bml_am_keep(ctx, dst, tag, hdr, hlen, payload, plen);
    if (rc != FERRY_OK)
        return rc;
    return bml_am_sent(ctx, dst, m, btl_ctx_send(ctx, dst, tag, hdr, hlen, payload, plen));
}

/* api_am_dispatch for every case but the common one. */
static void __attribute__((noinline))
am_dispatch(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, ferry_ctx_t *ctx)
{
    const void *data = NULL;
    size_t len = 0;
    char *joined = NULL;

    /* Counted for the replay, or dropped: it came on a rail its sender
     * lost, and the sender sends it again (bml.h). */
    if (!bml_am_rx(ctx, btl, rd->peer))
        return;

    if (rd->seg_cnt == 1) {
        data = ferry_btl_seg_ptr(&rd->segs[0]);
        len = rd->segs[0].len;
    } else if (rd->seg_cnt > 1) {
        for (unsigned i = 0; i < rd->seg_cnt; i++)
            len += rd->segs[i].len;
        joined = malloc(len > 0 ? len : 1);
        if (joined == NULL) {
            rt_log(&ctx->log, RT_LOG_ERROR, "out of memory joining a %zu-byte message", len);
            return;
        }
        size_t off = 0;
        for (unsigned i = 0; i < rd->seg_cnt; i++) {
            memcpy(joined + off, ferry_btl_seg_ptr(&rd->segs[i]), rd->segs[i].len);
            off += rd->segs[i].len;
        }
        data = joined;
    }

    if (rd->tag <= FERRY_AM_TAG_MAX || rd->tag == API_TAG_FLUSH || rd->tag == API_TAG_PUTN ||
        rd->tag == API_TAG_AMO) {
        /* The application's messages, and ferry's that are ordered with
         * them (a flush marker is answered after what it follows, a
         * notification runs in its place): behind a large message they
         * wait for it. */
        if (ctx->api->large != NULL && api_am_large_holding(ctx, rd->peer))
            api_am_large_hold(ctx, rd->peer, rd->tag, data, len);
        else
            api_am_deliver(ctx, rd->peer, rd->tag, data, len);
    } else if (rd->tag == API_TAG_BARRIER) {
        api_barrier_recv(ctx, data, len);
    } else {
        api_am_large_recv(ctx, rd->peer, rd->tag, data, len);
    }
    free(joined);
}

void api_am_dispatch(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, void *cbdata)
{
    ferry_ctx_t *ctx = cbdata;
    /* The common case straight to its handler: an application message in
     * one segment, no large message under way. Anything else, or a message
     * bml_am_rx does not simply count, is am_dispatch's from the start. */
    if (__builtin_expect(rd->seg_cnt == 1 && rd->tag <= FERRY_AM_TAG_MAX &&
                             ctx->api->large == NULL && ctx->api->am[rd->tag].cb != NULL &&
                             bml_am_rx_simple(ctx, rd->peer),
                         1)) {
        ferry_am_cb_t cb = ctx->api->am[rd->tag].cb;
        ctx->in_callback++;
        cb(ctx, rd->peer, rd->tag, ferry_btl_seg_ptr(&rd->segs[0]), rd->segs[0].len,
           ctx->api->am[rd->tag].arg);
        ctx->in_callback--;
        return;
    }
    am_dispatch(btl, rd, ctx);
}

void api_am_deliver(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len)
{
    if (tag > FERRY_AM_TAG_MAX) {
        if (tag == API_TAG_FLUSH)
            api_flush_recv(ctx, src, data, len);
        else if (tag == API_TAG_PUTN)
            api_putn_recv(ctx, src, data, len);
        else if (tag == API_TAG_AMO)
            api_amo_recv(ctx, src, data, len);
        return;
    }
    if (ctx->api->am[tag].cb != NULL) {
        ctx->in_callback++;
        ctx->api->am[tag].cb(ctx, src, tag, data, len, ctx->api->am[tag].arg);
        ctx->in_callback--;
    } else {
        rt_log(&ctx->log, RT_LOG_WARN, "message with tag %u from rank %d has no handler; dropped",
               (unsigned)tag, src);
    }
}
