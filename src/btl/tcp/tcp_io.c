/*
 * Framed I/O on a connected endpoint: the send queue written with one
 * sendmsg (a writev that does not raise SIGPIPE) over as many fragments as
 * fit, and the receive side, which reads as much as the buffer takes, parses
 * every whole frame in it, and reads the payload of put and get answers
 * straight into their destination.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "btl/tcp/tcp.h"

/* Fragments gathered into one sendmsg. */
#define TCP_BATCH 16

uint64_t tcp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static tcp_ctl_t *ctl_of(btl_frag_t *frag)
{
    return UTIL_CONTAINER_OF(frag, tcp_ctl_t, frag);
}

static void ctl_free(tcp_ctl_t *ctl)
{
    free(ctl->owned);
    free(ctl);
}

void tcp_complete(tcp_module_t *mod, btl_frag_t *frag, int status)
{
    frag->status = status;
    util_list_append(&mod->completed, &frag->link);
}

size_t tcp_frag_wire_len(const btl_frag_t *frag)
{
    switch (frag->op) {
    case TCP_OP_SEND:
        return sizeof(tcp_hdr_t) + frag->base.src[0].len;
    case TCP_OP_PUT:
        return sizeof(tcp_hdr_t) + sizeof(tcp_rdma_body_t) + frag->base.src[0].len;
    case TCP_OP_GET:
        return sizeof(tcp_hdr_t) + sizeof(tcp_rdma_body_t);
    default: {
        const tcp_ctl_t *ctl = UTIL_CONTAINER_OF(frag, const tcp_ctl_t, frag);
        return ctl->hlen + ctl->data_len;
    }
    }
}

void tcp_hot_add(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (ep->hot)
        return;
    mod->hot[mod->nhot++] = ep;
    ep->hot = true;
}

void tcp_hot_remove(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (!ep->hot)
        return;
    for (int i = 0; i < mod->nhot; i++) {
        if (mod->hot[i] == ep) {
            mod->hot[i] = mod->hot[--mod->nhot];
            break;
        }
    }
    ep->hot = false;
}

static void mark_sending(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (!ep->sending) {
        util_list_append(&mod->sending, &ep->sending_link);
        ep->sending = true;
    }
}

void tcp_enqueue(tcp_module_t *mod, ferry_btl_endpoint_t *ep, btl_frag_t *frag, size_t wire)
{
    frag->done = 0;
    util_list_append(&ep->queue, &frag->link);
    ep->queued_bytes += wire;
    mark_sending(mod, ep);
}

int tcp_queue_ctl(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const tcp_hdr_t *hdr,
                  const void *body, size_t body_len, const unsigned char *data, size_t data_len,
                  uint32_t slot)
{
    tcp_ctl_t *ctl = malloc(sizeof(*ctl) + sizeof(*hdr) + body_len);
    if (ctl == NULL)
        return FERRY_ERR_NO_MEMORY;
    memset(&ctl->frag, 0, sizeof(ctl->frag));
    ctl->frag.op = TCP_OP_CTL;
    ctl->frag.ep = ep;
    ctl->hlen = sizeof(*hdr) + body_len;
    memcpy(ctl->bytes, hdr, sizeof(*hdr));
    if (body_len > 0)
        memcpy(ctl->bytes + sizeof(*hdr), body, body_len);
    ctl->data = data;
    ctl->data_len = data_len;
    ctl->slot = slot;
    ctl->owned = NULL;
    tcp_enqueue(mod, ep, &ctl->frag, ctl->hlen + ctl->data_len);
    return FERRY_OK;
}

/* The iovecs of a whole fragment; hdr is scratch for its header. */
static int frag_iov(btl_frag_t *frag, unsigned char hdr[64], struct iovec *iov)
{
    tcp_hdr_t h = {0};
    ferry_btl_desc_t *des = &frag->base;
    switch (frag->op) {
    case TCP_OP_SEND:
        h.len = (uint32_t)des->src[0].len;
        h.type = TCP_T_DATA;
        h.tag = frag->tag;
        memcpy(hdr, &h, sizeof(h));
        iov[0] = (struct iovec){hdr, sizeof(h)};
        iov[1] = (struct iovec){ferry_btl_seg_ptr(&des->src[0]), des->src[0].len};
        return 2;
    case TCP_OP_PUT:
    case TCP_OP_GET: {
        bool put = frag->op == TCP_OP_PUT;
        const ferry_btl_segment_t *remote = put ? &des->dst[0] : &des->src[0];
        tcp_rdma_body_t body = {.raddr = remote->addr, .length = put ? 0 : remote->len};
        memcpy(&body.slot, remote->key, sizeof(body.slot));
        memcpy(&body.gen, remote->key + sizeof(body.slot), sizeof(body.gen));
        h.len = (uint32_t)(sizeof(body) + (put ? des->src[0].len : 0));
        h.type = put ? TCP_T_PUT : TCP_T_GET_REQ;
        h.cookie = frag->cookie;
        memcpy(hdr, &h, sizeof(h));
        memcpy(hdr + sizeof(h), &body, sizeof(body));
        iov[0] = (struct iovec){hdr, sizeof(h) + sizeof(body)};
        if (!put)
            return 1;
        iov[1] = (struct iovec){ferry_btl_seg_ptr(&des->src[0]), des->src[0].len};
        return 2;
    }
    default: {
        tcp_ctl_t *ctl = ctl_of(frag);
        iov[0] = (struct iovec){ctl->bytes, ctl->hlen};
        if (ctl->data_len == 0)
            return 1;
        iov[1] = (struct iovec){(void *)(ctl->owned != NULL ? ctl->owned : ctl->data),
                                ctl->data_len};
        return 2;
    }
    }
}

/* A fragment left the queue: its bytes are all in the socket. */
static void frag_written(tcp_module_t *mod, ferry_btl_endpoint_t *ep, btl_frag_t *frag)
{
    switch (frag->op) {
    case TCP_OP_SEND:
        tcp_complete(mod, frag, FERRY_OK);
        break;
    case TCP_OP_PUT:
    case TCP_OP_GET:
        util_list_append(&ep->rdma_wait, &frag->link);
        break;
    default:
        ctl_free(ctl_of(frag));
        break;
    }
}

int tcp_push(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    int events = 0;
    while (ep->state == TCP_EP_CONNECTED && !util_list_empty(&ep->queue)) {
        struct iovec iov[2 * TCP_BATCH];
        unsigned char hdrs[TCP_BATCH][64];
        int cnt = 0, nfrag = 0;
        for (util_list_item_t *it = util_list_first(&ep->queue); it != NULL && nfrag < TCP_BATCH;
             it = util_list_next(&ep->queue, it), nfrag++) {
            btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
            int n = frag_iov(frag, hdrs[nfrag], &iov[cnt]);
            if (nfrag == 0 && frag->done > 0) {
                /* Skip what an earlier write took. */
                size_t skip = frag->done;
                int k = 0;
                while (skip >= iov[cnt + k].iov_len) {
                    skip -= iov[cnt + k].iov_len;
                    k++;
                }
                memmove(&iov[cnt], &iov[cnt + k], (size_t)(n - k) * sizeof(iov[0]));
                n -= k;
                iov[cnt].iov_base = (char *)iov[cnt].iov_base + skip;
                iov[cnt].iov_len -= skip;
            }
            cnt += n;
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t wrote = sendmsg(ep->poll.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (wrote < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            tcp_ep_fail(mod, ep, FERRY_ERR_UNREACH, "send failed: %s", strerror(errno));
            return events;
        }
        size_t offered = 0;
        for (int i = 0; i < cnt; i++)
            offered += iov[i].iov_len;
        size_t left = (size_t)wrote;
        ep->queued_bytes -= left;
        while (left > 0) {
            util_list_item_t *it = util_list_first(&ep->queue);
            btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
            size_t rest = tcp_frag_wire_len(frag) - frag->done;
            if (left < rest) {
                frag->done += left;
                break;
            }
            left -= rest;
            util_list_pop_front(&ep->queue);
            frag_written(mod, ep, frag);
            events++;
        }
        if ((size_t)wrote < offered)
            break; /* the socket is full */
    }
    if (util_list_empty(&ep->queue) && ep->sending) {
        util_list_remove(&mod->sending, &ep->sending_link);
        ep->sending = false;
    }
    return events;
}

int tcp_sendi_now(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const void *header,
                  size_t header_len, const void *payload, size_t payload_len, uint8_t tag)
{
    tcp_hdr_t h = {.len = (uint32_t)(header_len + payload_len), .type = TCP_T_DATA, .tag = tag};
    struct iovec iov[3];
    int cnt = 0;
    iov[cnt++] = (struct iovec){&h, sizeof(h)};
    if (header_len > 0)
        iov[cnt++] = (struct iovec){(void *)header, header_len};
    if (payload_len > 0)
        iov[cnt++] = (struct iovec){(void *)payload, payload_len};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
    size_t total = sizeof(h) + header_len + payload_len;
    ssize_t wrote;
    do {
        wrote = sendmsg(ep->poll.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (wrote < 0 && errno == EINTR);
    if (wrote < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return FERRY_ERR_NO_RESOURCE;
        /* Nothing was sent. The failure is reported by the next progress;
         * until then the caller is told to progress, so it never learns of
         * the failure before its error callback does. */
        tcp_ep_fail(mod, ep, FERRY_ERR_UNREACH, "send failed: %s", strerror(errno));
        return FERRY_ERR_NO_RESOURCE;
    }
    if ((size_t)wrote == total)
        return FERRY_OK;
    /* Part of the message is in the socket: the rest must follow, so it is
     * copied into a frame of our own that progress writes. */
    size_t rest = total - (size_t)wrote;
    tcp_ctl_t *ctl = malloc(sizeof(*ctl) + rest);
    if (ctl == NULL) {
        tcp_ep_fail(mod, ep, FERRY_ERR_NO_MEMORY, "out of memory queueing %zu bytes", rest);
        return FERRY_ERR_UNREACH;
    }
    memset(&ctl->frag, 0, sizeof(ctl->frag));
    ctl->frag.op = TCP_OP_CTL;
    ctl->frag.ep = ep;
    ctl->hlen = rest;
    ctl->data = NULL;
    ctl->data_len = 0;
    ctl->slot = UINT32_MAX;
    ctl->owned = NULL;
    size_t skip = (size_t)wrote, off = 0;
    for (int i = 0; i < cnt; i++) {
        size_t len = iov[i].iov_len;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        memcpy(ctl->bytes + off, (const char *)iov[i].iov_base + skip, len - skip);
        off += len - skip;
        skip = 0;
    }
    tcp_enqueue(mod, ep, &ctl->frag, rest);
    return FERRY_OK;
}

void tcp_fail_pending(tcp_module_t *mod, ferry_btl_endpoint_t *ep, int status)
{
    util_list_item_t *it;
    while ((it = util_list_pop_front(&ep->queue)) != NULL) {
        btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
        if (frag->op == TCP_OP_CTL)
            ctl_free(ctl_of(frag));
        else
            tcp_complete(mod, frag, status);
    }
    ep->queued_bytes = 0;
    while ((it = util_list_pop_front(&ep->rdma_wait)) != NULL)
        tcp_complete(mod, UTIL_CONTAINER_OF(it, btl_frag_t, link), status);
    if (ep->rx_frag != NULL) {
        tcp_complete(mod, ep->rx_frag, status);
        ep->rx_frag = NULL;
    }
    ep->rx_mode = TCP_RX_FRAMES;
    ep->rx_len = ep->rx_off = 0;
    if (ep->sending) {
        util_list_remove(&mod->sending, &ep->sending_link);
        ep->sending = false;
    }
}

/* ---- receiving ---- */

static int proto_error(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const tcp_hdr_t *h,
                       const char *what)
{
    tcp_ep_fail(mod, ep, FERRY_ERR_PROTO,
                "malformed frame (type %u, tag %u, length %u): %s; connection closed",
                (unsigned)h->type, (unsigned)h->tag, (unsigned)h->len, what);
    return FERRY_ERR_PROTO;
}

static void put_ack(tcp_module_t *mod, ferry_btl_endpoint_t *ep, uint64_t cookie, int status)
{
    tcp_hdr_t h = {.len = sizeof(tcp_status_body_t), .type = TCP_T_PUT_ACK, .cookie = cookie};
    tcp_status_body_t body = {.status = status};
    if (tcp_queue_ctl(mod, ep, &h, &body, sizeof(body), NULL, 0, UINT32_MAX) != FERRY_OK)
        tcp_ep_fail(mod, ep, FERRY_ERR_NO_MEMORY, "out of memory answering a put");
}

/* The payload after a header goes to dst (or nowhere when dst is NULL):
 * what the buffer holds is copied now, the rest is read straight there. */
static void start_direct(tcp_module_t *mod, ferry_btl_endpoint_t *ep, unsigned char *dst,
                         size_t len);

static void finish_direct(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    ep->rx_mode = TCP_RX_FRAMES;
    if (ep->rx_type == TCP_T_PUT) {
        put_ack(mod, ep, ep->rx_cookie, ep->rx_status);
    } else {
        btl_frag_t *frag = ep->rx_frag;
        ep->rx_frag = NULL;
        if (frag != NULL)
            tcp_complete(mod, frag, ep->rx_status);
    }
}

static void start_direct(tcp_module_t *mod, ferry_btl_endpoint_t *ep, unsigned char *dst,
                         size_t len)
{
    size_t avail = ep->rx_len - ep->rx_off;
    size_t take = avail < len ? avail : len;
    if (dst != NULL && take > 0)
        memcpy(dst, ep->rx + ep->rx_off, take);
    ep->rx_off += take;
    if (take == len) {
        finish_direct(mod, ep);
        return;
    }
    ep->rx_dst = dst != NULL ? dst + take : NULL;
    ep->rx_left = len - take;
    ep->rx_mode = dst != NULL ? TCP_RX_DIRECT : TCP_RX_DISCARD;
}

/* Handles the frame at rx_off if it is whole enough; returns 1 when one was
 * consumed, 0 when more bytes are needed, < 0 when the connection ended. */
static int parse_one(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    size_t avail = ep->rx_len - ep->rx_off;
    if (avail < sizeof(tcp_hdr_t))
        return 0;
    tcp_hdr_t h;
    memcpy(&h, ep->rx + ep->rx_off, sizeof(h));
    const unsigned char *body = ep->rx + ep->rx_off + sizeof(h);
    size_t bavail = avail - sizeof(h);
    if (h.zero != 0)
        return proto_error(mod, ep, &h, "reserved field not zero");
    if (h.type != TCP_T_DATA && h.tag != 0)
        return proto_error(mod, ep, &h, "tag on a frame that is not an active message");

    switch (h.type) {
    case TCP_T_DATA: {
        if (h.tag >= FERRY_BTL_TAG_BTL_MIN)
            return proto_error(mod, ep, &h, "tag reserved for the transport");
        if (h.len > mod->super.attr.max_send_size)
            return proto_error(mod, ep, &h, "longer than the largest send");
        if (h.cookie != 0)
            return proto_error(mod, ep, &h, "cookie on an active message");
        if (bavail < h.len)
            return 0;
        ep->rx_off += sizeof(h) + h.len;
        if (ep->deleted)
            return 1; /* torn down here: nobody listens any more */
        ferry_btl_segment_t seg = {.addr = (uint64_t)(uintptr_t)body, .len = h.len};
        ferry_btl_recv_desc_t rd = {
            .ep = ep, .peer = ep->rank, .tag = h.tag, .segs = &seg, .seg_cnt = 1};
        btl_base_deliver(&mod->super, &rd);
        return 1;
    }
    case TCP_T_PUT: {
        if (h.len < sizeof(tcp_rdma_body_t) || h.len - sizeof(tcp_rdma_body_t) > TCP_MAX_RDMA)
            return proto_error(mod, ep, &h, "put length out of range");
        if (bavail < sizeof(tcp_rdma_body_t))
            return 0;
        tcp_rdma_body_t b;
        memcpy(&b, body, sizeof(b));
        if (b.length != 0)
            return proto_error(mod, ep, &h, "put with a get length");
        size_t len = h.len - sizeof(b);
        tcp_reg_t *reg = NULL;
        int st = tcp_reg_lookup(mod, b.slot, b.gen, b.raddr, len, FERRY_ACCESS_REMOTE_WRITE, &reg);
        if (st != FERRY_OK)
            rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
                   "tcp: put of %zu bytes from rank %d refused: outside a writable registration",
                   len, ep->rank);
        ep->rx_off += sizeof(h) + sizeof(b);
        ep->rx_type = TCP_T_PUT;
        ep->rx_cookie = h.cookie;
        ep->rx_status = st;
        ep->rx_slot = b.slot;
        start_direct(mod, ep, st == FERRY_OK ? (unsigned char *)(uintptr_t)b.raddr : NULL, len);
        return 1;
    }
    case TCP_T_GET_REQ: {
        if (h.len != sizeof(tcp_rdma_body_t))
            return proto_error(mod, ep, &h, "get request of the wrong length");
        if (bavail < sizeof(tcp_rdma_body_t))
            return 0;
        tcp_rdma_body_t b;
        memcpy(&b, body, sizeof(b));
        if (b.length > TCP_MAX_RDMA)
            return proto_error(mod, ep, &h, "get length out of range");
        ep->rx_off += sizeof(h) + sizeof(b);
        tcp_reg_t *reg = NULL;
        int st = tcp_reg_lookup(mod, b.slot, b.gen, b.raddr, (size_t)b.length,
                                FERRY_ACCESS_REMOTE_READ, &reg);
        tcp_hdr_t rh = {.type = TCP_T_GET_RESP, .cookie = h.cookie};
        tcp_status_body_t sb = {.status = st};
        size_t dlen = st == FERRY_OK ? (size_t)b.length : 0;
        rh.len = (uint32_t)(sizeof(sb) + dlen);
        if (tcp_queue_ctl(mod, ep, &rh, &sb, sizeof(sb),
                          st == FERRY_OK ? (const unsigned char *)(uintptr_t)b.raddr : NULL, dlen,
                          st == FERRY_OK ? b.slot : UINT32_MAX) != FERRY_OK) {
            tcp_ep_fail(mod, ep, FERRY_ERR_NO_MEMORY, "out of memory answering a get");
            return FERRY_ERR_NO_MEMORY;
        }
        return 1;
    }
    case TCP_T_PUT_ACK:
    case TCP_T_GET_RESP: {
        bool get = h.type == TCP_T_GET_RESP;
        if (h.len < sizeof(tcp_status_body_t) || (!get && h.len != sizeof(tcp_status_body_t)))
            return proto_error(mod, ep, &h, "answer of the wrong length");
        util_list_item_t *it = util_list_first(&ep->rdma_wait);
        btl_frag_t *frag = it != NULL ? UTIL_CONTAINER_OF(it, btl_frag_t, link) : NULL;
        if (frag == NULL || frag->cookie != h.cookie ||
            frag->op != (get ? TCP_OP_GET : TCP_OP_PUT))
            return proto_error(mod, ep, &h, "answers no request in flight");
        if (bavail < sizeof(tcp_status_body_t))
            return 0;
        tcp_status_body_t sb;
        memcpy(&sb, body, sizeof(sb));
        if (sb.zero != 0 || sb.status > 0 || sb.status <= FERRY_ERR_LAST)
            return proto_error(mod, ep, &h, "bad status");
        size_t dlen = h.len - sizeof(sb);
        if (get && dlen != (sb.status == FERRY_OK ? frag->base.dst[0].len : 0))
            return proto_error(mod, ep, &h, "get answer of the wrong length");
        util_list_pop_front(&ep->rdma_wait);
        ep->rx_off += sizeof(h) + sizeof(sb);
        if (!get) {
            tcp_complete(mod, frag, sb.status);
            return 1;
        }
        ep->rx_type = TCP_T_GET_RESP;
        ep->rx_status = sb.status;
        ep->rx_frag = frag;
        start_direct(mod, ep, ferry_btl_seg_ptr(&frag->base.dst[0]), dlen);
        return 1;
    }
    case TCP_T_FIN:
        if (h.len != 0 || h.cookie != 0)
            return proto_error(mod, ep, &h, "FIN with a body");
        ep->rx_off += sizeof(h);
        tcp_ep_peer_closed(mod, ep);
        return FERRY_ERR_UNREACH;
    default:
        return proto_error(mod, ep, &h, "unknown type");
    }
}

static int parse(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    int events = 0;
    while (ep->state == TCP_EP_CONNECTED && ep->rx_mode == TCP_RX_FRAMES) {
        int rc = parse_one(mod, ep);
        if (rc <= 0)
            break;
        events++;
    }
    if (ep->rx == NULL)
        return events;
    if (ep->rx_off == ep->rx_len) {
        ep->rx_off = ep->rx_len = 0;
    } else if (ep->rx_mode == TCP_RX_FRAMES && ep->rx_off > 0 &&
               ep->rx_cap - ep->rx_off < ep->rx_cap / 2) {
        /* Room for a whole frame of the largest size after the partial one:
         * the buffer holds at least two of them. */
        memmove(ep->rx, ep->rx + ep->rx_off, ep->rx_len - ep->rx_off);
        ep->rx_len -= ep->rx_off;
        ep->rx_off = 0;
    }
    return events;
}

/* EOF or an error on a connected socket. */
static void rx_closed(tcp_module_t *mod, ferry_btl_endpoint_t *ep, ssize_t n, int err)
{
    if (n == 0)
        tcp_ep_fail(mod, ep, FERRY_ERR_UNREACH, "connection closed by the peer without FIN");
    else
        tcp_ep_fail(mod, ep, FERRY_ERR_UNREACH, "receive failed: %s", strerror(err));
}

int tcp_recv(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    int events = 0;
    for (int round = 0; round < 8 && ep->state == TCP_EP_CONNECTED; round++) {
        ssize_t n;
        if (ep->rx_mode == TCP_RX_DIRECT) {
            n = recv(ep->poll.fd, ep->rx_dst, ep->rx_left, MSG_DONTWAIT);
            if (n > 0) {
                ep->rx_dst += n;
                ep->rx_left -= (size_t)n;
                if (ep->rx_left == 0) {
                    finish_direct(mod, ep);
                    events++;
                }
                continue;
            }
        } else if (ep->rx_mode == TCP_RX_DISCARD) {
            size_t want = ep->rx_left < ep->rx_cap ? ep->rx_left : ep->rx_cap;
            n = recv(ep->poll.fd, ep->rx, want, MSG_DONTWAIT);
            if (n > 0) {
                ep->rx_left -= (size_t)n;
                if (ep->rx_left == 0) {
                    finish_direct(mod, ep);
                    events++;
                }
                continue;
            }
        } else {
            n = recv(ep->poll.fd, ep->rx + ep->rx_len, ep->rx_cap - ep->rx_len, MSG_DONTWAIT);
            if (n > 0) {
                ep->rx_len += (size_t)n;
                events += parse(mod, ep);
                continue;
            }
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        rx_closed(mod, ep, n, errno);
        break;
    }
    return events;
}
