/*
 * Framed I/O on a connected endpoint: the send queue written with one
 * sendmsg (a writev that does not raise SIGPIPE) over as many fragments as
 * fit; inline sends written whole or not at all when large; and the receive
 * side, which reads as much as the buffer takes, parses every whole frame in
 * it, reads a large active message to its end with one exact read, and reads
 * the payload of puts and get answers straight into their destination.
 */
#include <errno.h>
#include <linux/sockios.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "btl/tcp/tcp.h"

/* Fragments gathered into one sendmsg. */
#define TCP_BATCH 16

/* Inline sends at least this long go only when the socket has room for all
 * of them (see sendi_room); shorter ones are cheap to copy when they do not
 * fit. */
#define TCP_ROOM_CHECK (32u * 1024u)

/* Inline sends up to this long (header included) are gathered into one
 * buffer and written with send. */
#define TCP_SENDI_FLAT 256u

static tcp_ctl_t *ctl_of(btl_frag_t *frag)
{
    return UTIL_CONTAINER_OF(frag, tcp_ctl_t, frag);
}

static void ctl_free(tcp_ctl_t *ctl)
{
    free(ctl);
}

/* What a get answer's data is replaced with once its registration is gone. */
static const unsigned char tcp_zeros[64 * 1024];

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
    case TCP_OP_PUTN:
        return sizeof(tcp_hdr_t) + frag->base.src[0].len;
    default: {
        const tcp_ctl_t *ctl = UTIL_CONTAINER_OF(frag, const tcp_ctl_t, frag);
        return ctl->hlen + ctl->data_len + (ctl->has_trailer ? sizeof(ctl->trailer) : 0);
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

/* A frame of our own holding extra bytes after its fixed part, not queued. */
static tcp_ctl_t *ctl_new(ferry_btl_endpoint_t *ep, size_t extra)
{
    tcp_ctl_t *ctl = malloc(sizeof(*ctl) + extra);
    if (ctl == NULL)
        return NULL;
    memset(ctl, 0, sizeof(*ctl));
    ctl->frag.op = TCP_OP_CTL;
    ctl->frag.ep = ep;
    return ctl;
}

static tcp_ctl_t *ctl_fill(ferry_btl_endpoint_t *ep, const tcp_hdr_t *hdr, const void *body,
                           size_t body_len)
{
    tcp_ctl_t *ctl = ctl_new(ep, sizeof(*hdr) + body_len);
    if (ctl == NULL)
        return NULL;
    ctl->hlen = sizeof(*hdr) + body_len;
    memcpy(ctl->bytes, hdr, sizeof(*hdr));
    if (body_len > 0)
        memcpy(ctl->bytes + sizeof(*hdr), body, body_len);
    return ctl;
}

int tcp_queue_ctl(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const tcp_hdr_t *hdr,
                  const void *body, size_t body_len)
{
    tcp_ctl_t *ctl = ctl_fill(ep, hdr, body, body_len);
    if (ctl == NULL)
        return FERRY_ERR_NO_MEMORY;
    tcp_enqueue(mod, ep, &ctl->frag, tcp_frag_wire_len(&ctl->frag));
    return FERRY_OK;
}

/* Queues an answer to one of the peer's requests; it counts in what the
 * peer is owed until it is written. */
static void queue_answer(tcp_module_t *mod, ferry_btl_endpoint_t *ep, tcp_ctl_t *ctl)
{
    ctl->answer = true;
    ep->owed++;
    ep->owed_bytes += ctl->data_len;
    tcp_enqueue(mod, ep, &ctl->frag, tcp_frag_wire_len(&ctl->frag));
}

/* Whether the peer is owed so much that a request of len more answer bytes
 * must wait: more answers than an initiator may have in flight, or more
 * bytes than it may get at once beyond the first (tcp_rdma.c, rdma_start,
 * keeps every initiator within this, so only a peer that breaks it waits). */
static bool owed_over(const tcp_module_t *mod, const ferry_btl_endpoint_t *ep, size_t len)
{
    size_t max = mod->p.sendq_max;
    return ep->owed >= mod->p.rdma_max_inflight ||
           (ep->owed_bytes > 0 && (ep->owed_bytes > max || len > max - ep->owed_bytes));
}

/* An answer left the queue. A peer paused for what it was owed is read
 * again (from progress, tcp_resume) once it is owed less. */
static void answer_written(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const tcp_ctl_t *ctl)
{
    ep->owed--;
    ep->owed_bytes -= ctl->data_len;
    if (ep->rx_paused && !owed_over(mod, ep, 0)) {
        ep->rx_paused = false;
        if (!ep->resume_listed) {
            util_list_append(&mod->resume, &ep->resume_link);
            ep->resume_listed = true;
        }
    }
}

/* Drops the first skip bytes of iov[0..n); returns the iovecs left. */
static int iov_skip(struct iovec *iov, int n, size_t skip)
{
    int k = 0;
    while (k < n && skip >= iov[k].iov_len) {
        skip -= iov[k].iov_len;
        k++;
    }
    if (k > 0)
        memmove(iov, iov + k, (size_t)(n - k) * sizeof(iov[0]));
    n -= k;
    if (n > 0) {
        iov[0].iov_base = (char *)iov[0].iov_base + skip;
        iov[0].iov_len -= skip;
    }
    return n;
}

/* The iovecs of a frame of our own from byte skip on. A get answer's data
 * comes from its registration only if the registration is still there, now
 * that the kernel is about to copy it; once it is gone, the rest of the
 * data goes out as zeros (a zero buffer at a time: *whole_out false) and the
 * status after it says FERRY_ERR_ACCESS. */
static int ctl_iov(tcp_module_t *mod, tcp_ctl_t *ctl, size_t skip, struct iovec *iov,
                   bool *whole_out)
{
    int n = 0;
    if (skip < ctl->hlen) {
        iov[n++] = (struct iovec){ctl->bytes + skip, ctl->hlen - skip};
        skip = 0;
    } else {
        skip -= ctl->hlen;
    }
    if (skip < ctl->data_len) {
        size_t len = ctl->data_len - skip;
        if (!ctl->revoked && !tcp_reg_alive(mod, ctl->slot, ctl->gen)) {
            ctl->revoked = true;
            rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
                   "tcp: memory deregistered while its get answer to rank %d went out: the "
                   "last %zu of %zu bytes go as zeros, the get fails with an access error",
                   ctl->frag.ep->rank, len, ctl->data_len);
        }
        if (!ctl->revoked) {
            iov[n++] = (struct iovec){(void *)(uintptr_t)(ctl->raddr + skip), len};
        } else {
            if (len > sizeof(tcp_zeros)) {
                len = sizeof(tcp_zeros);
                *whole_out = false;
            }
            iov[n++] = (struct iovec){(void *)tcp_zeros, len};
            if (!*whole_out)
                return n;
        }
        skip = 0;
    } else {
        skip -= ctl->data_len;
    }
    if (ctl->has_trailer) {
        /* Every data byte is out (or in these iovecs) by now. */
        ctl->trailer.status = ctl->revoked ? FERRY_ERR_ACCESS : FERRY_OK;
        iov[n++] = (struct iovec){(unsigned char *)&ctl->trailer + skip,
                                  sizeof(ctl->trailer) - skip};
    }
    return n;
}

/* The iovecs of a fragment from byte skip on (at most 3); hdr is scratch
 * for its header. *whole_out says whether they reach the fragment's end. */
static int frag_iov(tcp_module_t *mod, btl_frag_t *frag, unsigned char hdr[64], size_t skip,
                    struct iovec *iov, bool *whole_out)
{
    tcp_hdr_t h = {0};
    ferry_btl_desc_t *des = &frag->base;
    *whole_out = true;
    switch (frag->op) {
    case TCP_OP_SEND:
        h.len = (uint32_t)des->src[0].len;
        h.type = TCP_T_DATA;
        h.tag = frag->tag;
        memcpy(hdr, &h, sizeof(h));
        iov[0] = (struct iovec){hdr, sizeof(h)};
        iov[1] = (struct iovec){ferry_btl_seg_ptr(&des->src[0]), des->src[0].len};
        return iov_skip(iov, 2, skip);
    case TCP_OP_PUT:
    case TCP_OP_GET: {
        bool put = frag->op == TCP_OP_PUT;
        const ferry_btl_segment_t *remote = put ? &des->dst[0] : &des->src[0];
        tcp_rdma_body_t body = {.raddr = remote->addr, .length = put ? 0 : remote->len};
        memcpy(&body.key, remote->key, sizeof(body.key));
        h.len = (uint32_t)(sizeof(body) + (put ? des->src[0].len : 0));
        h.type = put ? TCP_T_PUT : TCP_T_GET_REQ;
        h.cookie = frag->cookie;
        memcpy(hdr, &h, sizeof(h));
        memcpy(hdr + sizeof(h), &body, sizeof(body));
        iov[0] = (struct iovec){hdr, sizeof(h) + sizeof(body)};
        if (!put)
            return iov_skip(iov, 1, skip);
        iov[1] = (struct iovec){ferry_btl_seg_ptr(&des->src[0]), des->src[0].len};
        return iov_skip(iov, 2, skip);
    }
    case TCP_OP_PUTN:
        /* Body, notification and data were copied into the fragment. */
        h.len = (uint32_t)des->src[0].len;
        h.type = TCP_T_PUTN;
        h.tag = frag->tag;
        h.cookie = frag->cookie;
        memcpy(hdr, &h, sizeof(h));
        iov[0] = (struct iovec){hdr, sizeof(h)};
        iov[1] = (struct iovec){ferry_btl_seg_ptr(&des->src[0]), des->src[0].len};
        return iov_skip(iov, 2, skip);
    default:
        return ctl_iov(mod, ctl_of(frag), skip, iov, whole_out);
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
    case TCP_OP_PUTN:
        util_list_append(&ep->rdma_wait, &frag->link);
        break;
    default: {
        tcp_ctl_t *ctl = ctl_of(frag);
        if (ctl->answer)
            answer_written(mod, ep, ctl);
        if (ctl->putn_refusal)
            ep->putn_refusal_queued = false;
        ctl_free(ctl);
        break;
    }
    }
}

int tcp_push(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    int events = 0;
    while (ep->state == TCP_EP_CONNECTED && !util_list_empty(&ep->queue)) {
        struct iovec iov[3 * TCP_BATCH];
        unsigned char hdrs[TCP_BATCH][64];
        int cnt = 0, nfrag = 0;
        for (util_list_item_t *it = util_list_first(&ep->queue); it != NULL && nfrag < TCP_BATCH;
             it = util_list_next(&ep->queue, it)) {
            btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
            bool whole;
            /* The head may be partly written already. */
            cnt += frag_iov(mod, frag, hdrs[nfrag], nfrag == 0 ? frag->done : 0, &iov[cnt],
                            &whole);
            nfrag++;
            if (!whole)
                break; /* nothing may follow bytes that do not reach its end */
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
        ep->tx_total += left;
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

/* Whether the socket takes len more bytes whole. A large inline send that
 * the socket takes only in part leaves the rest to be copied (the caller
 * owns its buffer again when sendi returns), which costs as much as the
 * write; refusing it (NO_RESOURCE) until the peer has read enough keeps the
 * one copy the kernel makes. The kernel accepts writes while the bytes it
 * holds, counted with their buffers' overhead, stay under SO_SNDBUF; the
 * bytes not yet acknowledged (SIOCOUTQ) plus a margin stand for that. */
static bool sendi_room(ferry_btl_endpoint_t *ep, size_t len)
{
    int outq = 0;
    if (ioctl(ep->poll.fd, SIOCOUTQ, &outq) != 0 || outq <= 0)
        return true; /* nothing in flight, or no answer: write */
    size_t need = len + len / 16 + 4096;
    for (int pass = 0; pass < 2; pass++) {
        if (ep->sndbuf > outq && (size_t)(ep->sndbuf - outq) >= need)
            return true;
        /* The kernel grows (and may shrink) the buffer as it goes. */
        int val = 0;
        socklen_t sl = sizeof(val);
        if (pass > 0 || getsockopt(ep->poll.fd, SOL_SOCKET, SO_SNDBUF, &val, &sl) != 0)
            break;
        ep->sndbuf = val;
    }
    /* A buffer too small ever to hold it takes the message in parts. */
    return ep->sndbuf <= 0 || (size_t)ep->sndbuf < 2 * need;
}

int tcp_sendi_now(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const void *header,
                  size_t header_len, const void *payload, size_t payload_len, uint8_t tag)
{
    const struct iovec parts[2] = {{(void *)header, header_len}, {(void *)payload, payload_len}};
    return tcp_send_frame(mod, ep, (tcp_hdr_t){.type = TCP_T_DATA, .tag = tag}, parts, 2);
}

int tcp_send_frame(tcp_module_t *mod, ferry_btl_endpoint_t *ep, tcp_hdr_t h,
                   const struct iovec *parts, int nparts)
{
    struct iovec iov[4];
    int cnt = 0;
    size_t body = 0;
    iov[cnt++] = (struct iovec){&h, sizeof(h)};
    for (int i = 0; i < nparts && i < 3; i++) {
        if (parts[i].iov_len > 0)
            iov[cnt++] = parts[i];
        body += parts[i].iov_len;
    }
    h.len = (uint32_t)body;
    size_t total = sizeof(h) + body;
    if (total >= TCP_ROOM_CHECK && !sendi_room(ep, total))
        return FERRY_ERR_NO_RESOURCE;
    /* A small message is gathered here and goes with send: copying a few
     * bytes costs less than the kernel's import of a message header and
     * its iovec array, on the latency path. */
    unsigned char flat[TCP_SENDI_FLAT];
    if (total <= sizeof(flat)) {
        size_t off = 0;
        for (int i = 0; i < cnt; i++) {
            memcpy(flat + off, iov[i].iov_base, iov[i].iov_len);
            off += iov[i].iov_len;
        }
        iov[0] = (struct iovec){flat, total};
        cnt = 1;
    }
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
    ssize_t wrote;
    do {
        wrote = cnt == 1 ? send(ep->poll.fd, iov[0].iov_base, total, MSG_NOSIGNAL | MSG_DONTWAIT)
                         : sendmsg(ep->poll.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
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
    memset(ctl, 0, sizeof(*ctl));
    ctl->frag.op = TCP_OP_CTL;
    ctl->frag.ep = ep;
    ctl->hlen = rest;
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
    ep->spilled_bytes += rest;
    tcp_enqueue(mod, ep, &ctl->frag, rest);
    return FERRY_OK;
}

void tcp_fail_pending(tcp_module_t *mod, ferry_btl_endpoint_t *ep, int status)
{
    util_list_item_t *it;
    ep->putn_refusal_queued = false;
    while ((it = util_list_pop_front(&ep->queue)) != NULL) {
        btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
        if (frag->op == TCP_OP_CTL)
            ctl_free(ctl_of(frag));
        else
            tcp_complete(mod, frag, status);
    }
    ep->queued_bytes = 0;
    ep->owed = ep->owed_bytes = 0;
    ep->rx_paused = false;
    if (ep->resume_listed) {
        util_list_remove(&mod->resume, &ep->resume_link);
        ep->resume_listed = false;
    }
    while ((it = util_list_pop_front(&ep->rdma_wait)) != NULL)
        tcp_complete(mod, UTIL_CONTAINER_OF(it, btl_frag_t, link), status);
    btl_amo_ep_fail(&mod->amo, &ep->amo, status);
    if (ep->rx_frag != NULL) {
        tcp_complete(mod, ep->rx_frag, status);
        ep->rx_frag = NULL;
    }
    ep->rx_trailer = false;
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
    tcp_ctl_t *ctl = ctl_fill(ep, &h, &body, sizeof(body));
    if (ctl == NULL) {
        tcp_ep_fail(mod, ep, FERRY_ERR_NO_MEMORY, "out of memory answering a put");
        return;
    }
    queue_answer(mod, ep, ctl);
}

/* The payload after a header goes to dst (or nowhere when dst is NULL):
 * what the buffer holds is copied now, the rest is read straight there. */
static void start_direct(tcp_module_t *mod, ferry_btl_endpoint_t *ep, unsigned char *dst,
                         size_t len);

static void finish_direct(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    ep->rx_mode = TCP_RX_FRAMES;
    if (ep->rx_type == TCP_T_PUT)
        put_ack(mod, ep, ep->rx_cookie, ep->rx_status);
    else if (ep->rx_frag != NULL)
        ep->rx_trailer = true; /* the get's status follows its data */
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

/* The peer is owed too much to take another request from it: its socket is
 * not read (it is slowed, the other peers are not) until answers to it
 * have been written (answer_written). */
static int pause_rx(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    ep->rx_paused = true;
    /* Out of the directly polled set, so that the latency path does not
     * test for this; tcp_resume puts it back. */
    tcp_hot_remove(mod, ep);
    rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
           "tcp: rank %d is owed %zu answers (%zu bytes of data): not read until it takes them",
           ep->rank, ep->owed, ep->owed_bytes);
    return 0;
}

/* The parsers below each take one frame whose header h is at rx_off, body
 * (bavail bytes of it buffered) behind it. They return 1 when the frame was
 * consumed, 0 when more bytes are needed (or the peer is paused), < 0 when
 * the connection ended. */

static int parse_data(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const tcp_hdr_t *h,
                      const unsigned char *body, size_t bavail)
{
    if (h->tag >= FERRY_BTL_TAG_BTL_MIN)
        return proto_error(mod, ep, h, "tag reserved for the transport");
    if (h->len > mod->super.attr.max_send_size)
        return proto_error(mod, ep, h, "longer than the largest send");
    if (h->cookie != 0)
        return proto_error(mod, ep, h, "cookie on an active message");
    if (bavail < h->len)
        return 0;
    ep->rx_off += sizeof(*h) + h->len;
    if (ep->deleted)
        return 1; /* torn down here: nobody listens any more */
    ferry_btl_segment_t seg = {.addr = (uint64_t)(uintptr_t)body, .len = h->len};
    ferry_btl_recv_desc_t rd = {
        .ep = ep, .peer = ep->rank, .tag = h->tag, .segs = &seg, .seg_cnt = 1};
    btl_base_deliver(&mod->super, &rd);
    return 1;
}

static int parse_put(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const tcp_hdr_t *h,
                     const unsigned char *body, size_t bavail)
{
    tcp_rdma_body_t b;
    if (h->len < sizeof(b) || h->len - sizeof(b) > TCP_MAX_RDMA)
        return proto_error(mod, ep, h, "put length out of range");
    if (bavail < sizeof(b))
        return 0;
    memcpy(&b, body, sizeof(b));
    if (b.length != 0)
        return proto_error(mod, ep, h, "put with a get length");
    if (owed_over(mod, ep, 0))
        return pause_rx(mod, ep);
    size_t len = h->len - sizeof(b);
    tcp_reg_t *reg = NULL;
    int st = tcp_reg_lookup(mod, &b.key, b.raddr, len, FERRY_ACCESS_REMOTE_WRITE, &reg);
    if (st != FERRY_OK)
        rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
               "tcp: put of %zu bytes from rank %d refused: outside a writable registration",
               len, ep->rank);
    ep->rx_off += sizeof(*h) + sizeof(b);
    ep->rx_type = TCP_T_PUT;
    ep->rx_cookie = h->cookie;
    ep->rx_status = st;
    ep->rx_slot = b.key.slot;
    start_direct(mod, ep, st == FERRY_OK ? (unsigned char *)(uintptr_t)b.raddr : NULL, len);
    return 1;
}

/* A put with notification, whole in the buffer: the data in if its key
 * allows, then the answer (a request's PUT_ACK; for an untracked one a
 * refusal frame, one queued at a time), then the tag's handler, refused or
 * not. */
static int parse_putn(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const tcp_hdr_t *h,
                      const unsigned char *body, size_t bavail)
{
    tcp_putn_body_t b;
    if (h->tag >= FERRY_BTL_TAG_BTL_MIN)
        return proto_error(mod, ep, h, "tag reserved for the transport");
    if (h->len < sizeof(b) || h->len > mod->super.attr.max_send_size)
        return proto_error(mod, ep, h, "put with notification length out of range");
    if (bavail < sizeof(b))
        return 0;
    memcpy(&b, body, sizeof(b));
    if (b.zero != 0 || b.plen > h->len - sizeof(b))
        return proto_error(mod, ep, h, "put with notification whose lengths do not add up");
    if (bavail < h->len)
        return 0;
    if (h->cookie != 0 && owed_over(mod, ep, 0))
        return pause_rx(mod, ep);
    const unsigned char *payload = body + sizeof(b), *data = payload + b.plen;
    size_t n = h->len - sizeof(b) - b.plen;
    tcp_reg_t *reg = NULL;
    int st = tcp_reg_lookup(mod, &b.key, b.raddr, n, FERRY_ACCESS_REMOTE_WRITE, &reg);
    if (st == FERRY_OK && n > 0)
        memcpy((void *)(uintptr_t)b.raddr, data, n);
    if (st != FERRY_OK)
        rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
               "tcp: put of %zu bytes with notification from rank %d refused: outside a "
               "writable registration",
               n, ep->rank);
    ep->rx_off += sizeof(*h) + h->len;
    if (h->cookie != 0) {
        put_ack(mod, ep, h->cookie, st);
    } else if (st != FERRY_OK && !ep->putn_refusal_queued) {
        tcp_hdr_t rh = {.type = TCP_T_PUTN_REFUSED};
        tcp_ctl_t *ctl = ctl_fill(ep, &rh, NULL, 0);
        if (ctl == NULL) {
            tcp_ep_fail(mod, ep, FERRY_ERR_NO_MEMORY, "out of memory refusing a put");
            return FERRY_ERR_NO_MEMORY;
        }
        ctl->putn_refusal = true;
        ep->putn_refusal_queued = true;
        tcp_enqueue(mod, ep, &ctl->frag, tcp_frag_wire_len(&ctl->frag));
    }
    if (ep->deleted)
        return 1;
    ferry_btl_segment_t seg = {.addr = (uint64_t)(uintptr_t)payload, .len = b.plen};
    ferry_btl_recv_desc_t rd = {
        .ep = ep, .peer = ep->rank, .tag = h->tag, .segs = &seg, .seg_cnt = 1};
    btl_base_deliver(&mod->super, &rd);
    return 1;
}

static int parse_get_req(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const tcp_hdr_t *h,
                         const unsigned char *body, size_t bavail)
{
    tcp_rdma_body_t b;
    if (h->len != sizeof(b))
        return proto_error(mod, ep, h, "get request of the wrong length");
    if (bavail < sizeof(b))
        return 0;
    memcpy(&b, body, sizeof(b));
    if (b.length > TCP_MAX_RDMA)
        return proto_error(mod, ep, h, "get length out of range");
    if (owed_over(mod, ep, (size_t)b.length))
        return pause_rx(mod, ep);
    ep->rx_off += sizeof(*h) + sizeof(b);
    tcp_reg_t *reg = NULL;
    int st = tcp_reg_lookup(mod, &b.key, b.raddr, (size_t)b.length, FERRY_ACCESS_REMOTE_READ,
                            &reg);
    tcp_hdr_t rh = {.type = TCP_T_GET_RESP, .cookie = h->cookie};
    tcp_status_body_t sb = {.status = st};
    tcp_ctl_t *ctl;
    if (st == FERRY_OK) {
        /* The data is read from the registration as it is written. */
        rh.len = (uint32_t)(b.length + sizeof(sb));
        ctl = ctl_fill(ep, &rh, NULL, 0);
        if (ctl != NULL) {
            ctl->data_len = (size_t)b.length;
            ctl->raddr = b.raddr;
            ctl->slot = reg->key.slot;
            ctl->gen = reg->key.gen;
            ctl->has_trailer = true;
        }
    } else {
        rh.len = sizeof(sb);
        ctl = ctl_fill(ep, &rh, &sb, sizeof(sb));
    }
    if (ctl == NULL) {
        tcp_ep_fail(mod, ep, FERRY_ERR_NO_MEMORY, "out of memory answering a get");
        return FERRY_ERR_NO_MEMORY;
    }
    queue_answer(mod, ep, ctl);
    return 1;
}

static bool status_ok(const tcp_status_body_t *sb)
{
    return sb->zero == 0 && sb->status <= 0 && sb->status > FERRY_ERR_LAST;
}

/* PUT_ACK, or the start of a GET_RESP: the answer to the oldest request. */
static int parse_answer(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const tcp_hdr_t *h,
                        const unsigned char *body, size_t bavail)
{
    bool get = h->type == TCP_T_GET_RESP;
    tcp_status_body_t sb;
    if (h->len < sizeof(sb) || (!get && h->len != sizeof(sb)))
        return proto_error(mod, ep, h, "answer of the wrong length");
    util_list_item_t *it = util_list_first(&ep->rdma_wait);
    btl_frag_t *frag = it != NULL ? UTIL_CONTAINER_OF(it, btl_frag_t, link) : NULL;
    if (frag == NULL || frag->cookie != h->cookie ||
        (get ? frag->op != TCP_OP_GET : frag->op != TCP_OP_PUT && frag->op != TCP_OP_PUTN))
        return proto_error(mod, ep, h, "answers no request in flight");
    size_t want = get ? frag->base.dst[0].len : 0;
    if (h->len == sizeof(sb)) {
        /* A put's answer, or a get's status alone: refused, or no data. */
        if (bavail < sizeof(sb))
            return 0;
        memcpy(&sb, body, sizeof(sb));
        if (!status_ok(&sb))
            return proto_error(mod, ep, h, "bad status");
        if (sb.status == FERRY_OK && want != 0)
            return proto_error(mod, ep, h, "get answer without its data");
        util_list_pop_front(&ep->rdma_wait);
        ep->rx_off += sizeof(*h) + sizeof(sb);
        ep->answers++;
        tcp_complete(mod, frag, sb.status);
        return 1;
    }
    if (h->len - sizeof(sb) != want)
        return proto_error(mod, ep, h, "get answer of the wrong length");
    util_list_pop_front(&ep->rdma_wait);
    ep->rx_off += sizeof(*h);
    ep->answers++;
    ep->rx_type = TCP_T_GET_RESP;
    ep->rx_frag = frag;
    start_direct(mod, ep, ferry_btl_seg_ptr(&frag->base.dst[0]), want);
    return 1;
}

/* The status after a get answer's data, which says whether the data is
 * good: the target's memory may have been deregistered while it went out. */
static int parse_trailer(tcp_module_t *mod, ferry_btl_endpoint_t *ep, size_t avail)
{
    tcp_status_body_t sb;
    if (avail < sizeof(sb))
        return 0;
    memcpy(&sb, ep->rx + ep->rx_off, sizeof(sb));
    if (!status_ok(&sb)) {
        tcp_ep_fail(mod, ep, FERRY_ERR_PROTO,
                    "malformed frame (status %d after a get answer's data); connection closed",
                    (int)sb.status);
        return FERRY_ERR_PROTO;
    }
    btl_frag_t *frag = ep->rx_frag;
    ep->rx_frag = NULL;
    ep->rx_trailer = false;
    ep->rx_off += sizeof(sb);
    tcp_complete(mod, frag, sb.status);
    return 1;
}

int tcp_amo_send(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const btl_amo_msg_t *msg)
{
    tcp_module_t *mod = (tcp_module_t *)btl;
    bool answer = msg->kind == BTL_AMO_ANSWER;
    tcp_hdr_t h = {.len = sizeof(*msg), .type = answer ? TCP_T_AMO_ANSWER : TCP_T_AMO_REQ};
    tcp_ctl_t *ctl = ctl_fill(ep, &h, msg, sizeof(*msg));
    if (ctl == NULL)
        return FERRY_ERR_NO_MEMORY;
    bool was_empty = util_list_empty(&ep->queue);
    if (answer)
        queue_answer(mod, ep, ctl); /* counts in what the peer is owed */
    else
        tcp_enqueue(mod, ep, &ctl->frag, tcp_frag_wire_len(&ctl->frag));
    if (was_empty && ep->state == TCP_EP_CONNECTED)
        tcp_push(mod, ep);
    return FERRY_OK;
}

/* An atomic for us to execute, or the answer to one of ours. */
static int parse_amo(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const tcp_hdr_t *h,
                     const unsigned char *body, size_t bavail)
{
    if (h->len != sizeof(btl_amo_msg_t) || h->cookie != 0)
        return proto_error(mod, ep, h, "atomic of the wrong length");
    if (bavail < h->len)
        return 0;
    bool req = h->type == TCP_T_AMO_REQ;
    if (req && owed_over(mod, ep, 0))
        return pause_rx(mod, ep);
    int rc = req ? btl_amo_target(&mod->super, &mod->amo, ep, body, h->len)
                 : btl_amo_answer(&mod->super, &mod->amo, ep, body, h->len);
    if (rc == FERRY_ERR_PROTO)
        return proto_error(mod, ep, h, req ? "malformed atomic" : "answers no atomic in flight");
    if (rc == 0)
        return pause_rx(mod, ep);
    if (rc < 0) {
        tcp_ep_fail(mod, ep, rc, "cannot answer an atomic");
        return rc;
    }
    ep->rx_off += sizeof(*h) + h->len;
    if (!req)
        ep->answers++;
    return 1;
}

/* Handles the frame at rx_off if it is whole enough; returns 1 when one was
 * consumed, 0 when more bytes are needed, < 0 when the connection ended. */
static int parse_one(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    size_t avail = ep->rx_len - ep->rx_off;
    if (ep->rx_trailer)
        return parse_trailer(mod, ep, avail);
    if (avail < sizeof(tcp_hdr_t))
        return 0;
    tcp_hdr_t h;
    memcpy(&h, ep->rx + ep->rx_off, sizeof(h));
    const unsigned char *body = ep->rx + ep->rx_off + sizeof(h);
    size_t bavail = avail - sizeof(h);
    if (h.zero != 0)
        return proto_error(mod, ep, &h, "reserved field not zero");
    if (h.type != TCP_T_DATA && h.type != TCP_T_PUTN && h.tag != 0)
        return proto_error(mod, ep, &h, "tag on a frame that is not an active message");
    switch (h.type) {
    case TCP_T_DATA:
        return parse_data(mod, ep, &h, body, bavail);
    case TCP_T_PUTN:
        return parse_putn(mod, ep, &h, body, bavail);
    case TCP_T_PUTN_REFUSED:
        if (h.len != 0 || h.cookie != 0 || ep->putn_cb == NULL)
            return proto_error(mod, ep, &h, "a refusal of puts nobody sent");
        ep->rx_off += sizeof(h);
        ep->putn_cb(&mod->super, ep, NULL, NULL, ep->putn_cbctx, NULL, FERRY_ERR_ACCESS);
        return 1;
    case TCP_T_PUT:
        return parse_put(mod, ep, &h, body, bavail);
    case TCP_T_GET_REQ:
        return parse_get_req(mod, ep, &h, body, bavail);
    case TCP_T_PUT_ACK:
    case TCP_T_GET_RESP:
        return parse_answer(mod, ep, &h, body, bavail);
    case TCP_T_AMO_REQ:
    case TCP_T_AMO_ANSWER:
        return parse_amo(mod, ep, &h, body, bavail);
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
        /* Room for a whole small frame after the partial one: the buffer
         * holds at least two of them (frames_want makes room for large
         * ones). */
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

/* How many bytes the next read of frames asks for, at rx + rx_len (0 when
 * the endpoint failed). When the header of a large active message has
 * arrived, the read stops at the end of that frame plus a lookahead: the
 * message is then whole in the buffer and delivered from there, and no byte
 * of the frame after it is read ahead (which, for a put or another large
 * message, would have to be copied again). The partial frame moves to the
 * front first when it would not fit, and the buffer grows (once, to the
 * largest frame this peer sends) when the frame is longer than it. Otherwise
 * the read takes all the room there is, so a burst of small frames costs one
 * system call. */
static inline __attribute__((always_inline)) size_t frames_want(tcp_module_t *mod,
                                                                ferry_btl_endpoint_t *ep)
{
    size_t avail = ep->rx_len - ep->rx_off;
    size_t want = 0;
    if (avail >= sizeof(tcp_hdr_t)) {
        tcp_hdr_t h;
        memcpy(&h, ep->rx + ep->rx_off, sizeof(h));
        /* parse_one has checked the header: a DATA frame left in the buffer
         * is within the largest send and not yet whole. */
        if ((h.type == TCP_T_DATA || h.type == TCP_T_PUTN) && h.len >= TCP_BIG_FRAME &&
            h.len <= mod->super.attr.max_send_size && sizeof(h) + h.len > avail)
            want = sizeof(h) + h.len - avail + TCP_LOOKAHEAD;
    }
    size_t need = want > 0 ? want : TCP_LOOKAHEAD;
    if (ep->rx_off > 0 && ep->rx_cap - ep->rx_len < need) {
        memmove(ep->rx, ep->rx + ep->rx_off, avail);
        ep->rx_len = avail;
        ep->rx_off = 0;
    }
    if (ep->rx_cap - ep->rx_len < need) {
        size_t cap = ep->rx_len + need;
        unsigned char *rx = realloc(ep->rx, cap);
        if (rx == NULL) {
            tcp_ep_fail(mod, ep, FERRY_ERR_NO_MEMORY,
                        "out of memory for a receive buffer of %zu bytes", cap);
            return 0;
        }
        ep->rx = rx;
        ep->rx_cap = cap;
    }
    if (want > 0)
        return want;
    /* Right after a payload read straight to its destination, what follows
     * is often another large transfer (a stream of put data or get
     * answers with gaps between): only its start is read into the buffer,
     * so that its payload is not read ahead and copied. */
    return ep->rx_after_direct ? TCP_LOOKAHEAD : ep->rx_cap - ep->rx_len;
}

/* Reads up to want bytes: into the buffer at rx_len, or, while a payload
 * goes straight to its destination, the payload first (*got_direct_out says
 * how much of it came) and the start of the next frame into the buffer. */
static ssize_t recv_once(ferry_btl_endpoint_t *ep, size_t want, size_t *got_direct_out)
{
    *got_direct_out = 0;
    if (ep->rx_mode != TCP_RX_DIRECT)
        return recv(ep->poll.fd, ep->rx + ep->rx_len, want, MSG_DONTWAIT);
    /* The payload goes straight to its destination, and the start of the
     * next frame into the (empty) buffer behind it. */
    struct iovec iov[2] = {{ep->rx_dst, ep->rx_left},
                           {ep->rx + ep->rx_len, want - ep->rx_left}};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = iov[1].iov_len > 0 ? 2 : 1};
    ssize_t n = recvmsg(ep->poll.fd, &msg, MSG_DONTWAIT);
    if (n > 0)
        *got_direct_out = (size_t)n < ep->rx_left ? (size_t)n : ep->rx_left;
    return n;
}

/* How many bytes the next read may take (0: none now). Inlined into both
 * callers, as frames_want is: this is the latency path. */
static inline __attribute__((always_inline)) size_t rx_want(tcp_module_t *mod,
                                                            ferry_btl_endpoint_t *ep)
{
    if (ep->rx_mode == TCP_RX_FRAMES)
        return frames_want(mod, ep);
    size_t room = ep->rx_cap - ep->rx_len;
    if (ep->rx_mode == TCP_RX_DIRECT)
        /* The buffer is empty while a payload is read directly. */
        return ep->rx_left + (room < TCP_LOOKAHEAD ? room : TCP_LOOKAHEAD);
    /* Discarding: the buffer (empty here too) is the scratch the bytes go to. */
    return ep->rx_left < room ? ep->rx_left : room;
}

/* n bytes arrived where rx_want and recv_once put them (direct of them at
 * rx_dst); returns the events they completed. */
static int rx_arrived(tcp_module_t *mod, ferry_btl_endpoint_t *ep, size_t n, size_t direct)
{
    int events = 0;
    ep->rx_total += n;
    size_t extra = n - direct;
    if (ep->rx_mode == TCP_RX_DIRECT) {
        ep->rx_dst += direct;
        ep->rx_left -= direct;
        ep->rx_len += extra;
        if (ep->rx_left == 0) {
            ep->rx_after_direct = true;
            finish_direct(mod, ep);
            events++;
        }
    } else if (ep->rx_mode == TCP_RX_DISCARD) {
        ep->rx_left -= n;
        if (ep->rx_left == 0) {
            finish_direct(mod, ep);
            events++;
        }
        extra = 0;
    } else {
        ep->rx_len += extra;
        ep->rx_after_direct = false;
    }
    if (extra > 0)
        events += parse(mod, ep);
    return events;
}

int tcp_recv(tcp_module_t *mod, ferry_btl_endpoint_t *ep)
{
    int events = 0;
    for (int round = 0; round < 8 && ep->state == TCP_EP_CONNECTED; round++) {
        size_t want = rx_want(mod, ep);
        if (want == 0)
            return events;
        size_t direct;
        ssize_t n = recv_once(ep, want, &direct);
        if (n > 0) {
            events += rx_arrived(mod, ep, (size_t)n, direct);
            if (ep->rx_paused)
                break;
            /* A short read emptied the socket: asking again would only
             * cost a system call that says so. */
            if ((size_t)n < want)
                break;
            continue;
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

size_t tcp_rx_feed(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const unsigned char *bytes,
                   size_t len)
{
    size_t used = 0;
    while (used < len && ep->state == TCP_EP_CONNECTED && !ep->rx_paused) {
        size_t want = rx_want(mod, ep);
        if (want == 0)
            break;
        size_t n = len - used < want ? len - used : want;
        /* Where recv_once would have put them. */
        size_t direct = 0;
        if (ep->rx_mode == TCP_RX_DIRECT) {
            direct = n < ep->rx_left ? n : ep->rx_left;
            memcpy(ep->rx_dst, bytes + used, direct);
        }
        memcpy(ep->rx + ep->rx_len, bytes + used + direct, n - direct);
        used += n;
        rx_arrived(mod, ep, n, direct);
    }
    return used;
}

/* ---- deadlines and pauses ---- */

/* One endpoint's deadlines at time now: a frame begun and not continued
 * (nothing read while bytes of it are missing, and the socket is not
 * paused by us), and puts and gets of ours with no answer and, while none
 * of them is written yet, no byte of the queue before them written either.
 * Returns whether the endpoint failed. */
static bool check_stall(tcp_module_t *mod, ferry_btl_endpoint_t *ep, uint64_t now)
{
    bool partial = ep->rx_mode != TCP_RX_FRAMES || ep->rx_trailer || ep->rx_off < ep->rx_len;
    if (!partial || ep->rx_paused || ep->rx_total != ep->rx_seen)
        ep->rx_since_ns = now;
    ep->rx_seen = ep->rx_total;
    uint64_t frame_ns = (uint64_t)mod->p.frame_timeout_ms * 1000000u;
    if (frame_ns > 0 && now - ep->rx_since_ns > frame_ns) {
        tcp_ep_fail(mod, ep, FERRY_ERR_TIMEOUT,
                    "sent part of a frame and nothing more for %lld ms "
                    "(FERRY_TCP_FRAME_TIMEOUT); connection closed",
                    mod->p.frame_timeout_ms);
        return true;
    }
    bool moved = ep->answers != ep->answers_seen ||
                 (util_list_empty(&ep->rdma_wait) && ep->tx_total != ep->tx_seen);
    ep->answers_seen = ep->answers;
    ep->tx_seen = ep->tx_total;
    /* Atomics the target executes wait on its answers as puts and gets do
     * (their answers count in ep->answers too). */
    size_t waiting = ep->rdma_inflight + btl_amo_inflight(&ep->amo);
    if (waiting == 0 || moved)
        ep->req_since_ns = now;
    uint64_t req_ns = (uint64_t)mod->p.request_timeout_ms * 1000000u;
    if (req_ns > 0 && now - ep->req_since_ns > req_ns) {
        tcp_ep_fail(mod, ep, FERRY_ERR_TIMEOUT,
                    "answered none of %zu puts, gets and atomics for %lld ms "
                    "(FERRY_TCP_REQUEST_TIMEOUT); connection closed",
                    waiting, mod->p.request_timeout_ms);
        return true;
    }
    return false;
}

int tcp_check_stalls(tcp_module_t *mod)
{
    if (mod->p.frame_timeout_ms == 0 && mod->p.request_timeout_ms == 0)
        return 0;
    uint64_t now = rt_now_ns();
    uint64_t since = now - mod->stall_scan_ns;
    if (since < TCP_STALL_TICK_NS)
        return 0;
    mod->stall_scan_ns = now;
    /* After a long time without progress nothing tells whether a peer was
     * silent or this process did not look: the clocks start again. */
    bool gap = since > TCP_STALL_GAP_NS;
    int n = 0;
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *ep = mod->eps[r];
        if (ep == NULL || ep->state != TCP_EP_CONNECTED)
            continue;
        if (gap)
            ep->rx_since_ns = ep->req_since_ns = now;
        else if (check_stall(mod, ep, now))
            n++;
    }
    return n;
}

void tcp_stall_reset(ferry_btl_endpoint_t *ep)
{
    ep->rx_seen = ep->rx_total;
    ep->tx_seen = ep->tx_total;
    ep->answers_seen = ep->answers;
    ep->rx_since_ns = ep->req_since_ns = rt_now_ns();
}

int tcp_resume(tcp_module_t *mod)
{
    int n = 0;
    util_list_item_t *it;
    while ((it = util_list_pop_front(&mod->resume)) != NULL) {
        ferry_btl_endpoint_t *ep = UTIL_CONTAINER_OF(it, ferry_btl_endpoint_t, resume_link);
        ep->resume_listed = false;
        if (ep->state != TCP_EP_CONNECTED || ep->rx_paused)
            continue;
        tcp_hot_add(mod, ep);
        if (ep->rx_mode == TCP_RX_FRAMES)
            n += parse(mod, ep);
    }
    return n;
}
