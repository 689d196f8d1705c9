/*
 * Non-contiguous data at the application API: active messages from an iovec
 * list or a convertor (packed into the transport's fragment by its
 * prepare_src), and put/get whose local side is any convertor layout.
 *
 * put/get take one of two ways:
 * - small or finely cut data is packed into a bounce buffer and moved by
 *   one put (or got into one and unpacked on completion);
 * - otherwise each contiguous block is its own put or get, in place (zero
 *   copy; prepare_src/prepare_dst register it through the transport's
 *   registration cache), and the caller's callback runs when all are done.
 * The remote side is one contiguous range of a registration; both of its
 * ends are checked before any byte moves, so a bad range starts nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "api/am_large.h"
#include "api/api.h"
#include "bml/bml.h"

/* Below this average block size, or this total, packing beats one
 * operation per block. */
#define DT_BOUNCE_BLOCK 4096
#define DT_BOUNCE_TOTAL (64 * 1024)

int ferry_am_send_conv(ferry_ctx_t *ctx, int dst, int tag, ferry_convertor_t *conv)
{
    int rc;
    if (conv == NULL || !api_tag_valid(tag))
        return FERRY_ERR_INVALID;
    btl_peer_t *peer = api_peer(ctx, dst, &rc);
    if (peer == NULL)
        return rc;
    ferry_btl_module_t *btl = ctx->modules[peer->module_idx];
    size_t len = ferry_convertor_remaining(conv);
    if (len > peer->max_send)
        return api_am_send_large_blocking(ctx, dst, tag, conv);
    if (!ferry_convertor_need_buffers(conv))
        return ferry_am_send(ctx, dst, tag, ferry_convertor_contig_ptr(conv), len);
    if (api_cbq_waiting(ctx, dst))
        return ctx->in_callback > 0 ? api_cbq_push(ctx, dst, tag, NULL, conv, len)
                                    : FERRY_ERR_NO_RESOURCE;
    size_t start = conv->pos;
    size_t size = len;
    ferry_btl_desc_t *des;
    int m = peer->module_idx;
    rc = bml_am_gate(ctx, dst);
    if (rc == FERRY_OK)
        rc = btl->ops->prepare_src(btl, peer->ep, NULL, conv, 0, &size, 0, &des);
    if (rc == FERRY_ERR_NO_RESOURCE && ctx->in_callback > 0)
        return api_cbq_push(ctx, dst, tag, NULL, conv, len);
    if (rc != FERRY_OK)
        return rc;
    if (size != len) {
        /* The transport packed less than its own max send size allows. */
        btl->ops->free(btl, des);
        ferry_convertor_set_position(conv, start);
        return FERRY_ERR;
    }
    rc = api_send_des(ctx, dst, m, des, (uint8_t)tag);
    if (rc != FERRY_OK) {
        ferry_convertor_set_position(conv, start);
    } else {
        api_am_sent(ctx, dst);
    }
    if (rc == FERRY_ERR_NO_RESOURCE && ctx->in_callback > 0)
        rc = api_cbq_push(ctx, dst, tag, NULL, conv, len);
    return rc;
}

int ferry_am_sendv(ferry_ctx_t *ctx, int dst, int tag, const ferry_iov_t *iov, size_t n)
{
    ferry_convertor_t conv;
    int rc = ferry_convertor_init_iov(&conv, iov, n);
    if (rc != FERRY_OK)
        return rc;
    return ferry_am_send_conv(ctx, dst, tag, &conv);
}

/* One put or get of a convertor's data, however many pieces it took. */
typedef struct dt_op {
    bool is_put;
    size_t pending; /* pieces started and not completed */
    bool started;   /* every piece has been started */
    int status;
    char *bounce;           /* the packed data, or NULL */
    ferry_convertor_t conv; /* get with a bounce: where to unpack */
    ferry_comp_cb_t cb;
    void *arg;
} dt_op_t;

static void dt_finish(dt_op_t *op)
{
    if (op->status == FERRY_OK && !op->is_put && op->bounce != NULL)
        ferry_convertor_unpack(&op->conv, op->bounce, ferry_convertor_remaining(&op->conv));
    ferry_comp_cb_t cb = op->cb;
    void *arg = op->arg;
    int status = op->status;
    free(op->bounce);
    free(op);
    if (cb != NULL)
        cb(arg, status);
}

static void dt_piece_done(void *arg, int status)
{
    dt_op_t *op = arg;
    if (status != FERRY_OK && op->status == FERRY_OK)
        op->status = status;
    if (--op->pending == 0 && op->started)
        dt_finish(op);
}

static int dt_piece(ferry_ctx_t *ctx, dt_op_t *op, int dst, void *buf, size_t len,
                    uint64_t raddr, const ferry_rkey_t *rkey)
{
    int rc = op->is_put ? ferry_put(ctx, dst, buf, len, NULL, raddr, rkey, dt_piece_done, op)
                        : ferry_get(ctx, dst, buf, len, NULL, raddr, rkey, dt_piece_done, op);
    if (rc == FERRY_OK)
        op->pending++;
    return rc;
}

static int dt_rdma(ferry_ctx_t *ctx, bool is_put, int dst, ferry_convertor_t *conv,
                   uint64_t raddr, const ferry_rkey_t *rkey, ferry_comp_cb_t cb, void *arg)
{
    if (!api_ctx_live(ctx) || conv == NULL || rkey == NULL)
        return FERRY_ERR_INVALID;
    size_t total = ferry_convertor_remaining(conv);
    if (total > UINT64_MAX - raddr)
        return FERRY_ERR_INVALID;
    dt_op_t *op = calloc(1, sizeof(*op));
    if (op == NULL)
        return FERRY_ERR_NO_MEMORY;
    op->is_put = is_put;
    op->cb = cb;
    op->arg = arg;

    /* The far end of the remote range, checked first (an empty operation
     * there), so that a range outside the registration starts nothing. */
    int rc = dt_piece(ctx, op, dst, op, 0, raddr + total, rkey);
    if (rc != FERRY_OK) {
        free(op);
        return rc;
    }
    size_t blocks_hint = conv->kind == FERRY_CONV_VECTOR ? conv->vec.count
                         : conv->kind == FERRY_CONV_IOV  ? conv->iov_cnt
                                                         : 1;
    bool bounce = ferry_convertor_need_buffers(conv) &&
                  (total <= DT_BOUNCE_TOTAL ||
                   (blocks_hint > 0 && total / blocks_hint < DT_BOUNCE_BLOCK));
    if (bounce && total > 0) {
        op->bounce = malloc(total);
        if (op->bounce == NULL) {
            op->status = FERRY_ERR_NO_MEMORY;
        } else {
            op->conv = *conv;
            if (is_put)
                ferry_convertor_pack(conv, op->bounce, total);
            else
                ferry_convertor_set_position(conv, conv->pos + total);
            rc = dt_piece(ctx, op, dst, op->bounce, total, raddr, rkey);
            if (rc != FERRY_OK)
                op->status = rc;
        }
    } else {
        uint64_t off = 0;
        while (ferry_convertor_remaining(conv) > 0) {
            size_t n = ferry_convertor_contig_len(conv);
            void *p = ferry_convertor_contig_ptr(conv);
            rc = dt_piece(ctx, op, dst, p, n, raddr + off, rkey);
            if (rc != FERRY_OK) {
                op->status = rc;
                break;
            }
            ferry_convertor_set_position(conv, conv->pos + n);
            off += n;
        }
    }
    /* The probe is in flight, so completion always comes from progress. */
    op->started = true;
    return FERRY_OK;
}

int ferry_put_conv(ferry_ctx_t *ctx, int dst, ferry_convertor_t *conv, uint64_t raddr,
                   const ferry_rkey_t *rkey, ferry_comp_cb_t cb, void *arg)
{
    return dt_rdma(ctx, true, dst, conv, raddr, rkey, cb, arg);
}

int ferry_get_conv(ferry_ctx_t *ctx, int dst, ferry_convertor_t *conv, uint64_t raddr,
                   const ferry_rkey_t *rkey, ferry_comp_cb_t cb, void *arg)
{
    return dt_rdma(ctx, false, dst, conv, raddr, rkey, cb, arg);
}
