/*
 * Descriptor cases: pool accounting and refused frees, prepare_src with a
 * reserve (truncation, pipelining, iovec data), and invalid arguments.
 */
#include "contract.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *xmalloc(size_t n)
{
    void *p = malloc(n != 0 ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    return p;
}

/* A raw alloc with the suite's accounting; NULL (reported unless the pool is
 * simply exhausted) on failure. */
static ferry_btl_desc_t *da_alloc(ct_suite_t *s, ferry_btl_endpoint_t *ep, size_t size,
                                  uint32_t flags, bool *exhausted)
{
    ferry_btl_desc_t *des = NULL;
    int rc;

    s->in_call++;
    rc = s->btl->ops->alloc(s->btl, ep, size, flags, &des);
    s->in_call--;
    if (exhausted != NULL)
        *exhausted = rc == FERRY_ERR_NO_RESOURCE;
    if (rc == FERRY_ERR_NO_RESOURCE && exhausted != NULL)
        return NULL;
    if (!CT_CHECK(s, rc == FERRY_OK, "alloc of %zu bytes returned %d (%s)", size, rc,
                  ferry_strerror(rc)))
        return NULL;
    s->des_alloc++;
    if (!CT_CHECK(s, des != NULL && des->src != NULL && des->src_cnt >= 1 &&
                         des->src[0].len == size,
                  "alloc of %zu bytes: descriptor %p, %u segments of %zu bytes", size,
                  (void *)des, des != NULL ? des->src_cnt : 0,
                  des != NULL && des->src != NULL ? des->src[0].len : 0)) {
        if (des != NULL)
            ct_free_des(s, des);
        return NULL;
    }
    return des;
}

/* free must refuse des (already freed, or in flight) with FERRY_ERR_INVALID. */
static void da_free_refused(ct_suite_t *s, ferry_btl_desc_t *des, const char *what)
{
    int rc;

    s->in_call++;
    rc = s->btl->ops->free(s->btl, des);
    s->in_call--;
    CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, what);
}

/* ---- desc_accounting ---------------------------------------------------------- */

#define DA_EAGER_BATCH 256
#define DA_MAX_BATCH 16
#define DA_ROUNDS 10

/* Allocates a batch from both pools, checks the descriptors and their
 * buffers are distinct and hold what was written, then frees them. */
static void da_batch(ct_suite_t *s, ferry_btl_endpoint_t *ep, int round)
{
    size_t eager = s->attr->eager_limit, max = s->attr->max_send_size;
    ferry_btl_desc_t *held[DA_EAGER_BATCH + DA_MAX_BATCH];
    size_t n = 0;

    for (size_t i = 0; i < DA_EAGER_BATCH; i++) {
        size_t size = (i * 61 + (size_t)round * 7) % (eager + 1);
        bool exhausted;
        ferry_btl_desc_t *des = da_alloc(s, ep, size, 0, &exhausted);
        if (des == NULL)
            break;
        if (size != 0)
            memset(ferry_btl_seg_ptr(&des->src[0]), (int)(n & 0xff), size);
        held[n++] = des;
    }
    for (size_t i = 0; i < DA_MAX_BATCH && max > eager; i++) {
        size_t size = eager + 1 + ((max - eager - 1) * i) / (DA_MAX_BATCH - 1);
        bool exhausted;
        ferry_btl_desc_t *des = da_alloc(s, ep, size, 0, &exhausted);
        if (des == NULL)
            break;
        memset(ferry_btl_seg_ptr(&des->src[0]), (int)(n & 0xff), size);
        held[n++] = des;
    }
    CT_CHECK(s, n > 0, "round %d: not one descriptor could be allocated", round);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = ferry_btl_seg_ptr(&held[i]->src[0]);
        size_t len = held[i]->src[0].len;
        for (size_t j = i + 1; j < n; j++) {
            const uint8_t *q = ferry_btl_seg_ptr(&held[j]->src[0]);
            size_t qlen = held[j]->src[0].len;
            if (!CT_CHECK(s, held[i] != held[j], "descriptor %p handed out twice", (void *)held[i]))
                break;
            if (len != 0 && qlen != 0)
                CT_CHECK(s, p + len <= q || q + qlen <= p,
                         "buffers of two live descriptors overlap: %p+%zu and %p+%zu", (void *)p,
                         len, (void *)q, qlen);
        }
        for (size_t b = 0; b < len; b++) {
            if (!CT_CHECK(s, p[b] == (uint8_t)(i & 0xff),
                          "descriptor %zu of %zu bytes: byte %zu changed to 0x%02x while held", i,
                          len, b, p[b]))
                break;
        }
    }
    for (size_t i = 0; i < n; i++)
        ct_free_des(s, held[i]);
}

static void da_double_free(ct_suite_t *s, ferry_btl_endpoint_t *ep, size_t size)
{
    ferry_btl_desc_t *a, *b, *c;

    a = da_alloc(s, ep, size, 0, NULL);
    if (a == NULL)
        return;
    if (!ct_free_des(s, a))
        return;
    da_free_refused(s, a, "free of a descriptor already freed");
    /* A double free that slipped onto the free list would now be handed
     * out twice. */
    b = da_alloc(s, ep, size, 0, NULL);
    c = da_alloc(s, ep, size, 0, NULL);
    CT_CHECK(s, b == NULL || c == NULL || b != c,
             "after a double free the pool handed out descriptor %p twice", (void *)b);
    if (b != NULL)
        ct_free_des(s, b);
    if (c != NULL && c != b)
        ct_free_des(s, c);
}

/* A sequenced message to peer that free must refuse while it is in flight. */
static void da_inflight(ct_suite_t *s, int peer, uint64_t *seq)
{
    ferry_btl_endpoint_t *ep = s->peer[peer].ep;
    uint8_t msg[64];
    ferry_btl_desc_t *des;
    ct_op_t *op;
    int rc;

    des = da_alloc(s, ep, sizeof(msg), 0, NULL);
    if (des == NULL)
        return;
    ct_seq_build(s, msg, (*seq)++, sizeof(msg));
    memcpy(ferry_btl_seg_ptr(&des->src[0]), msg, sizeof(msg));
    op = ct_op_new(s, peer, false, true);
    op->des = des;
    des->flags = 0;
    des->cbfunc = ct_comp_cb;
    des->cbdata = op;
    s->in_call++;
    rc = s->btl->ops->send(s->btl, ep, des, CT_DATA_TAG);
    s->in_call--;
    if (!CT_CHECK_RC(s, rc, FERRY_OK, "send")) {
        ct_free_des(s, des);
        return;
    }
    op->started = true;
    s->ops_started++;
    s->peer[peer].tx_count++;
    /* No progress yet, so the completion callback cannot have run: the
     * descriptor is in flight. */
    CT_CHECK(s, (des->flags & FERRY_BTL_DES_INFLIGHT) != 0,
             "descriptor accepted by send lacks FERRY_BTL_DES_INFLIGHT (flags 0x%x)", des->flags);
    da_free_refused(s, des, "free of a descriptor in flight");
    /* The completion hands it back to the suite, which then frees it. */
    ct_wait_op(s, op, "the completion of a send");
}

/* A send whose descriptor the transport owns and with no callback: the suite
 * never sees it again. */
static void da_owned_nocb(ct_suite_t *s, int peer, uint64_t *seq)
{
    ferry_btl_endpoint_t *ep = s->peer[peer].ep;
    uint8_t msg[48];
    ferry_btl_desc_t *des;
    int rc;

    des = da_alloc(s, ep, sizeof(msg), FERRY_BTL_DES_OWNERSHIP, NULL);
    if (des == NULL)
        return;
    ct_seq_build(s, msg, (*seq)++, sizeof(msg));
    memcpy(ferry_btl_seg_ptr(&des->src[0]), msg, sizeof(msg));
    des->flags = FERRY_BTL_DES_OWNERSHIP;
    des->cbfunc = NULL;
    des->cbdata = NULL;
    s->in_call++;
    rc = s->btl->ops->send(s->btl, ep, des, CT_DATA_TAG);
    s->in_call--;
    if (!CT_CHECK_RC(s, rc, FERRY_OK, "send with ownership and no callback")) {
        ct_free_des(s, des);
        return;
    }
    s->des_released++;
    s->peer[peer].tx_count++;
}

/* Descriptors from prepare_src (packed and in place) and prepare_dst go back
 * with free once, and only once. */
static void da_prepared(ct_suite_t *s, ferry_btl_endpoint_t *ep)
{
    size_t max = s->attr->max_send_size;
    size_t big = 2 * max + 1;
    uint8_t *buf = xmalloc(big);
    ferry_convertor_t conv;
    ferry_btl_desc_t *des = NULL;
    size_t sz;
    int rc;

    memset(buf, 0x3c, big);
    ferry_convertor_init_contig(&conv, buf, 100);
    sz = 100;
    s->in_call++;
    rc = s->btl->ops->prepare_src(s->btl, ep, NULL, &conv, 8, &sz, 0, &des);
    s->in_call--;
    if (CT_CHECK_RC(s, rc, FERRY_OK, "prepare_src of 100 bytes, reserve 8")) {
        s->des_alloc++;
        if (ct_free_des(s, des))
            da_free_refused(s, des, "second free of a prepare_src descriptor");
    }

    /* Contiguous, no reserve, more than max_send_size: the user's memory in
     * place (or packed; either way it frees the same). */
    ferry_convertor_init_contig(&conv, buf, big);
    sz = big;
    des = NULL;
    s->in_call++;
    rc = s->btl->ops->prepare_src(s->btl, ep, NULL, &conv, 0, &sz, 0, &des);
    s->in_call--;
    if (CT_CHECK_RC(s, rc, FERRY_OK, "prepare_src of 2*max_send_size+1 bytes, reserve 0")) {
        s->des_alloc++;
        if (ct_free_des(s, des))
            da_free_refused(s, des, "second free of an in-place prepare_src descriptor");
    }

    if (ct_has(s, FERRY_BTL_FLAG_PUT) || ct_has(s, FERRY_BTL_FLAG_GET)) {
        ferry_convertor_init_contig(&conv, buf, 4096);
        sz = 4096;
        des = NULL;
        s->in_call++;
        rc = s->btl->ops->prepare_dst(s->btl, ep, NULL, &conv, 0, &sz, FERRY_BTL_PREP_RDMA, &des);
        s->in_call--;
        if (CT_CHECK_RC(s, rc, FERRY_OK, "prepare_dst(RDMA) of 4096 bytes")) {
            s->des_alloc++;
            if (ct_free_des(s, des))
                da_free_refused(s, des, "second free of a prepare_dst descriptor");
        }
    }
    free(buf);
}

ct_result_t ct_case_desc_accounting(ct_suite_t *s)
{
    ferry_btl_endpoint_t *ep0 = s->peer[s->reach[0]].ep;
    uint64_t *seq = calloc((size_t)s->size, sizeof(*seq));
    uint8_t msg[80];

    if (seq == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    ct_case_begin(s, ct_seq_rx, NULL);
    for (int round = 0; round < DA_ROUNDS; round++)
        da_batch(s, ep0, round);
    da_double_free(s, ep0, 8);
    da_double_free(s, ep0, s->attr->max_send_size);
    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        da_inflight(s, r, &seq[r]);
        da_owned_nocb(s, r, &seq[r]);
        /* Ownership with a callback: counted as released when it runs. */
        ct_seq_build(s, msg, seq[r]++, sizeof(msg));
        ct_send(s, r, CT_DATA_TAG, CT_PATH_ALLOC, msg, sizeof(msg), true, true);
    }
    da_prepared(s, ep0);
    ct_case_finish(s);
    CT_CHECK(s, s->des_alloc == s->des_freed + s->des_released,
             "descriptors so far: %llu obtained, %llu freed by the suite, %llu released by the "
             "transport",
             (unsigned long long)s->des_alloc, (unsigned long long)s->des_freed,
             (unsigned long long)s->des_released);
    free(seq);
    return CT_RESULT_RUN;
}

/* ---- prepare_src_reserve ------------------------------------------------------ */

enum ps_kind {
    PS_SINGLE = 0, /* one prepare_src of len bytes */
    PS_PIPE = 1,   /* repeated prepare_src until the data is all sent */
    PS_IOV = 2     /* PS_PIPE over an iovec convertor */
};

typedef struct ps_stream {
    enum ps_kind kind;
    size_t reserve;
    size_t len;
    bool cap_request; /* ask for at most max_send_size - reserve per call */
} ps_stream_t;

#define PS_MAX_STREAMS 64
#define PS_IOV_BLOCKS 40
#define PS_IOV_GAP 3

typedef struct ps_state {
    ps_stream_t streams[PS_MAX_STREAMS];
    size_t n;
} ps_state_t;

static uint64_t ps_data_seed(int sender, size_t stream)
{
    return ct_seed((uint64_t)sender, stream, 0x57, 0);
}

static uint64_t ps_hdr_seed(int sender, size_t stream, uint64_t off)
{
    return ct_seed((uint64_t)sender, stream, off, 0xee);
}

static void ps_add(ps_state_t *st, enum ps_kind kind, size_t reserve, size_t len, bool cap)
{
    if (st->n < PS_MAX_STREAMS) {
        ps_stream_t *p = &st->streams[st->n++];
        p->kind = kind;
        p->reserve = reserve;
        p->len = len;
        p->cap_request = cap;
    }
}

static void ps_build(const ct_suite_t *s, ps_state_t *st)
{
    static const size_t reserves[] = {0, 1, 8, 64};
    size_t eager = s->attr->eager_limit, max = s->attr->max_send_size;

    st->n = 0;
    for (size_t i = 0; i < sizeof(reserves) / sizeof(reserves[0]); i++) {
        size_t r = reserves[i];
        if (r >= max)
            continue;
        /* Around the eager limit (counting the reserve), around the max send
         * size, and well above it. */
        if (eager > r + 1)
            ps_add(st, PS_SINGLE, r, eager - r - 1, false);
        if (eager > r)
            ps_add(st, PS_SINGLE, r, eager - r, false);
        if (eager + 1 > r)
            ps_add(st, PS_SINGLE, r, eager + 1 - r, false);
        ps_add(st, PS_SINGLE, r, eager, false);
        ps_add(st, PS_SINGLE, r, eager + 1, false);
        ps_add(st, PS_SINGLE, r, max - r - 1, false);
        ps_add(st, PS_SINGLE, r, max - r, false);
        ps_add(st, PS_SINGLE, r, max - r + 1, false);
        ps_add(st, PS_SINGLE, r, max, false);
        ps_add(st, PS_SINGLE, r, max + 1, false);
        ps_add(st, PS_SINGLE, r, 2 * max + 7, false);
    }
    ps_add(st, PS_PIPE, 8, 3 * max + 12345, false);
    ps_add(st, PS_PIPE, 0, 3 * max + 12345, true);
    ps_add(st, PS_IOV, 8, 0, false);
    ps_add(st, PS_IOV, 0, 0, false);
}

static void ps_rx(ct_suite_t *s, int peer, uint8_t tag, uint8_t slot_tag, const uint8_t *data,
                  size_t len)
{
    const ps_state_t *st = s->case_state;
    ct_peer_t *p = &s->peer[peer];
    uint64_t stream, off, sz, reserve;
    size_t bad;

    CT_CHECK(s, tag == CT_DATA_TAG, "fragment on tag %u", tag);
    if (!CT_CHECK(s, p->desc_pending, "fragment of %zu bytes from rank %d without its DESC", len,
                  peer))
        return;
    p->desc_pending = false;
    stream = p->desc.idx;
    off = p->desc.addr;
    sz = p->desc.len;
    reserve = p->desc.aux;
    if (!CT_CHECK(s, stream < st->n && stream < CT_MAX_STREAMS, "stream %llu",
                  (unsigned long long)stream))
        return;
    if (!CT_CHECK(s, len == reserve + sz,
                  "stream %llu from rank %d at %llu: %zu bytes arrived, reserve %llu + %llu sent",
                  (unsigned long long)stream, peer, (unsigned long long)off, len,
                  (unsigned long long)reserve, (unsigned long long)sz))
        return;
    bad = ct_verify(data, reserve, ps_hdr_seed(peer, stream, off), 0);
    CT_CHECK(s, bad == SIZE_MAX,
             "stream %llu from rank %d at %llu: header byte %zu of %llu is 0x%02x, expected 0x%02x",
             (unsigned long long)stream, peer, (unsigned long long)off, bad,
             (unsigned long long)reserve, bad != SIZE_MAX ? data[bad] : 0,
             bad != SIZE_MAX ? ct_pattern_byte(ps_hdr_seed(peer, stream, off), bad) : 0);
    CT_CHECK(s, p->stream_next[stream] == off,
             "stream %llu from rank %d: fragment at %llu, expected %llu",
             (unsigned long long)stream, peer, (unsigned long long)off,
             (unsigned long long)p->stream_next[stream]);
    bad = ct_verify(data + reserve, sz, ps_data_seed(peer, stream), off);
    CT_CHECK(s, bad == SIZE_MAX,
             "stream %llu from rank %d: data byte %llu (fragment at %llu, reserve %llu) is "
             "0x%02x, expected 0x%02x",
             (unsigned long long)stream, peer, (unsigned long long)(off + bad),
             (unsigned long long)off, (unsigned long long)reserve,
             bad != SIZE_MAX ? data[reserve + bad] : 0,
             bad != SIZE_MAX ? ct_pattern_byte(ps_data_seed(peer, stream), off + bad) : 0);
    p->stream_next[stream] = off + sz;
}

/*
 * One prepare_src of up to req bytes of stream from conv with reserve R,
 * checked, then sent (DESC first). *sent_out is the bytes sent: 0 when the
 * transport chose to describe the user's memory in place (allowed for
 * contiguous data, no reserve and more than max_send_size), which is not
 * sent. Returns false when the stream cannot go on.
 */
static bool ps_piece(ct_suite_t *s, int peer, size_t stream, ferry_convertor_t *conv,
                     size_t reserve, size_t req, size_t *sent_out)
{
    size_t max = s->attr->max_send_size;
    size_t before = conv->pos;
    size_t expect = req < max - reserve ? req : max - reserve;
    bool contig = !ferry_convertor_need_buffers(conv);
    const uint8_t *user = contig ? ferry_convertor_contig_ptr(conv) : NULL;
    ct_deadline_t d = ct_deadline();
    ferry_btl_desc_t *des = NULL;
    uint8_t *frag;
    size_t sz;
    ct_ctrl_t c;
    size_t bad;
    int rc;

    *sent_out = 0;
    for (;;) {
        sz = req;
        s->in_call++;
        rc = s->btl->ops->prepare_src(s->btl, s->peer[peer].ep, NULL, conv, reserve, &sz, 0,
                                      &des);
        s->in_call--;
        if (rc != FERRY_ERR_NO_RESOURCE)
            break;
        if (!ct_step(s, &d, "prepare_src to find a fragment"))
            return false;
    }
    if (!CT_CHECK(s, rc == FERRY_OK,
                  "prepare_src(reserve %zu, %zu of %zu bytes at %zu) returned %d (%s)", reserve,
                  req, conv->total, before, rc, ferry_strerror(rc)))
        return false;
    s->des_alloc++;
    if (!CT_CHECK(s, des != NULL && des->src != NULL && des->src_cnt >= 1,
                  "prepare_src gave no source segment")) {
        if (des != NULL)
            ct_free_des(s, des);
        return false;
    }
    CT_CHECK(s, conv->pos == before + sz,
             "prepare_src packed %zu bytes but the convertor moved from %zu to %zu", sz, before,
             conv->pos);
    if (reserve == 0 && contig && req > max && ferry_btl_seg_ptr(&des->src[0]) == user) {
        /* In place: for RDMA, not for send. */
        CT_CHECK(s, sz > 0 && sz <= req && des->src[0].len == sz,
                 "in-place prepare_src of %zu bytes: *size %zu, segment %zu bytes", req, sz,
                 des->src[0].len);
        ct_free_des(s, des);
        return true;
    }
    if (!CT_CHECK(s, sz == expect,
                  "prepare_src(reserve %zu) of %zu bytes (max_send_size %zu) packed %zu, "
                  "expected %zu",
                  reserve, req, max, sz, expect) ||
        !CT_CHECK(s, des->src[0].len == reserve + sz && reserve + sz <= max,
                  "prepare_src(reserve %zu) packed %zu: segment of %zu bytes (max_send_size %zu)",
                  reserve, sz, des->src[0].len, max) ||
        !CT_CHECK(s, sz > 0 || req == 0, "prepare_src packed nothing of %zu bytes", req)) {
        ct_free_des(s, des);
        return false;
    }
    frag = ferry_btl_seg_ptr(&des->src[0]);
    bad = ct_verify(frag + reserve, sz, ps_data_seed(s->rank, stream), before);
    CT_CHECK(s, bad == SIZE_MAX, "prepare_src packed wrong data: byte %zu of stream %zu (at %zu)",
             before + bad, stream, before);
    ct_fill(frag, reserve, ps_hdr_seed(s->rank, stream, before), 0);

    memset(&c, 0, sizeof(c));
    c.kind = CT_CTRL_DESC;
    c.idx = (uint32_t)stream;
    c.addr = before;
    c.len = sz;
    c.aux = reserve;
    if (ct_send_ctrl(s, peer, &c) != FERRY_OK) {
        ct_free_des(s, des);
        return false;
    }
    if (ct_send_des(s, peer, des, CT_DATA_TAG, (stream & 1) != 0, NULL, true) != FERRY_OK)
        return false;
    *sent_out = sz;
    return true;
}

/* Source data of a stream, described by conv; *mem_out is what to free
 * (after the case: in-place sends may read it until they complete). */
static void ps_source(ct_suite_t *s, const ps_stream_t *p, size_t stream, ferry_convertor_t *conv,
                      ferry_iov_t *iov, void **mem_out)
{
    size_t max = s->attr->max_send_size;

    if (p->kind != PS_IOV) {
        uint8_t *buf = xmalloc(p->len);
        ct_fill(buf, p->len, ps_data_seed(s->rank, stream), 0);
        ferry_convertor_init_contig(conv, buf, p->len);
        *mem_out = buf;
        return;
    }
    /* Blocks of uneven sizes (one empty) with gaps between them, so data
     * from a gap or a wrong block shows up in the stream. */
    size_t lens[PS_IOV_BLOCKS];
    size_t total = 0, span = 0, packed = 0;
    uint8_t *mem, *at;
    for (size_t i = 0; i < PS_IOV_BLOCKS; i++) {
        lens[i] = i == 5 ? 0 : max / 16 + (i * 97) % 513 + 1;
        total += lens[i];
        span += lens[i] + PS_IOV_GAP;
    }
    mem = xmalloc(span);
    memset(mem, 0xcc, span);
    at = mem;
    for (size_t i = 0; i < PS_IOV_BLOCKS; i++) {
        iov[i].base = at;
        iov[i].len = lens[i];
        ct_fill(at, lens[i], ps_data_seed(s->rank, stream), packed);
        packed += lens[i];
        at += lens[i] + PS_IOV_GAP;
    }
    if (!CT_CHECK(s, ferry_convertor_init_iov(conv, iov, PS_IOV_BLOCKS) == FERRY_OK,
                  "ferry_convertor_init_iov failed"))
        ferry_convertor_init_contig(conv, NULL, 0);
    CT_CHECK(s, conv->total == total, "iovec convertor describes %zu bytes, expected %zu",
             conv->total, total);
    *mem_out = mem;
}

ct_result_t ct_case_prepare_src_reserve(ct_suite_t *s)
{
    size_t max = s->attr->max_send_size;
    ps_state_t *st = calloc(1, sizeof(*st));
    void **mems;
    size_t nmem = 0;

    if (st == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    ps_build(s, st);
    mems = calloc(st->n * (size_t)s->nreach, sizeof(*mems));
    if (mems == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    ct_case_begin(s, ps_rx, st);
    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        for (size_t k = 0; k < st->n; k++) {
            const ps_stream_t *p = &st->streams[k];
            ferry_iov_t iov[PS_IOV_BLOCKS];
            ferry_convertor_t conv;
            size_t total_sent = 0;
            ct_ctrl_t c;
            bool ok = true;

            ps_source(s, p, k, &conv, iov, &mems[nmem++]);
            if (p->kind == PS_SINGLE) {
                ok = ps_piece(s, r, k, &conv, p->reserve, p->len, &total_sent);
            } else {
                while (ok && ferry_convertor_remaining(&conv) > 0) {
                    size_t req = ferry_convertor_remaining(&conv);
                    size_t sent;
                    if (p->cap_request && req > max - p->reserve)
                        req = max - p->reserve;
                    ok = ps_piece(s, r, k, &conv, p->reserve, req, &sent);
                    CT_CHECK(s, !ok || sent > 0, "pipelined prepare_src sent nothing");
                    ok = ok && sent > 0;
                    total_sent += sent;
                }
                if (ok)
                    CT_CHECK(s, total_sent == conv.total,
                             "pipeline of stream %zu sent %zu of %zu bytes", k, total_sent,
                             conv.total);
            }
            memset(&c, 0, sizeof(c));
            c.kind = CT_CTRL_END;
            c.idx = (uint32_t)k;
            c.len = total_sent;
            ct_send_ctrl(s, r, &c);
            if (!ok)
                break;
        }
    }
    if (ct_case_finish(s)) {
        for (int i = 0; i < s->nreach; i++) {
            for (size_t k = 0; k < st->n; k++)
                CT_CHECK(s, s->peer[s->reach[i]].stream_ended[k],
                         "stream %zu from rank %d never ended", k, s->reach[i]);
        }
    }
    for (size_t i = 0; i < nmem; i++)
        free(mems[i]);
    free(mems);
    free(st);
    return CT_RESULT_RUN;
}

/* ---- invalid_args ----------------------------------------------------------- */

/* A put or get started with deliberately bad arguments must be refused with
 * FERRY_ERR_INVALID, returned or passed to the completion callback. */
static void ia_rdma_mismatch(ct_suite_t *s, int peer, bool is_put, void *local,
                             const ct_rkey_t *rk)
{
    ct_op_t *op = NULL;
    int rc = FERRY_OK;
    int status;
    bool started;

    if (is_put)
        started = ct_put_start(s, peer, NULL, local, 64, rk->addr, 32, rk->key, false, false, &rc,
                               &op);
    else
        started = ct_get_start(s, peer, NULL, local, 64, rk->addr, 32, rk->key, false, false, &rc,
                               &op);
    if (!started)
        return;
    status = rc;
    if (op != NULL && ct_wait_op(s, op, "the completion of a refused operation"))
        status = op->status;
    CT_CHECK(s, status == FERRY_ERR_INVALID,
             "%s with a 64-byte local and a 32-byte remote segment to rank %d: status %d (%s), "
             "expected FERRY_ERR_INVALID",
             is_put ? "put" : "get", peer, status, ferry_strerror(status));
}

/* put/get with a NULL descriptor or endpoint. */
static void ia_rdma_null(ct_suite_t *s, int peer, bool is_put, void *local, const ct_rkey_t *rk)
{
    ferry_btl_endpoint_t *ep = s->peer[peer].ep;
    ferry_btl_desc_t *des = NULL;
    ferry_convertor_t conv;
    ferry_btl_segment_t remote;
    size_t sz = 64;
    int rc;

    s->in_call++;
    rc = is_put ? s->btl->ops->put(s->btl, ep, NULL) : s->btl->ops->get(s->btl, ep, NULL);
    s->in_call--;
    CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, is_put ? "put of a NULL descriptor" : "get of a NULL descriptor");

    ferry_convertor_init_contig(&conv, local, 64);
    s->in_call++;
    if (is_put)
        rc = s->btl->ops->prepare_src(s->btl, ep, NULL, &conv, 0, &sz, FERRY_BTL_PREP_RDMA, &des);
    else
        rc = s->btl->ops->prepare_dst(s->btl, ep, NULL, &conv, 0, &sz, FERRY_BTL_PREP_RDMA, &des);
    s->in_call--;
    if (!CT_CHECK_RC(s, rc, FERRY_OK, is_put ? "prepare_src(RDMA)" : "prepare_dst(RDMA)"))
        return;
    s->des_alloc++;
    remote.addr = rk->addr;
    remote.len = 64;
    memcpy(remote.key, rk->key, sizeof(remote.key));
    if (is_put) {
        des->dst = &remote;
        des->dst_cnt = 1;
    } else {
        des->src = &remote;
        des->src_cnt = 1;
    }
    des->flags = 0;
    des->cbfunc = NULL;
    des->cbdata = NULL;
    s->in_call++;
    rc = is_put ? s->btl->ops->put(s->btl, NULL, des) : s->btl->ops->get(s->btl, NULL, des);
    s->in_call--;
    CT_CHECK_RC(s, rc, FERRY_ERR_INVALID,
                is_put ? "put with a NULL endpoint" : "get with a NULL endpoint");
    /* Accepted anyway: let it finish before the descriptor and the stack
     * segment go away. */
    if (rc == FERRY_OK)
        s->btl->ops->flush(s->btl, NULL);
    ct_free_des(s, des);
}

/* Registered on reserved tags, which must be refused: it never runs. */
static void ia_never_am(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, void *cbdata)
{
    ct_suite_t *s = cbdata;
    CT_CHECK(s, false, "a handler registered on reserved tag %u ran", rd->tag);
}

ct_result_t ct_case_invalid_args(ct_suite_t *s)
{
    int peer0 = s->reach[0];
    ferry_btl_endpoint_t *ep = s->peer[peer0].ep;
    size_t max = s->attr->max_send_size;
    bool rdma = ct_has(s, FERRY_BTL_FLAG_PUT) || ct_has(s, FERRY_BTL_FLAG_GET);
    ferry_btl_desc_t *des = NULL;
    ferry_btl_reg_t *wreg = NULL;
    uint8_t *win = NULL, *local = NULL;
    uint8_t hdr[8] = {0};
    int rc;

    ct_case_begin(s, ct_seq_rx, NULL);

    /* Sizes beyond the limit. */
    s->in_call++;
    rc = s->btl->ops->alloc(s->btl, ep, max + 1, 0, &des);
    s->in_call--;
    if (!CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, "alloc of max_send_size + 1") && rc == FERRY_OK) {
        s->des_alloc++;
        ct_free_des(s, des);
    }
    des = NULL;
    s->in_call++;
    rc = s->btl->ops->alloc(s->btl, ep, SIZE_MAX, 0, &des);
    s->in_call--;
    if (!CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, "alloc of SIZE_MAX") && rc == FERRY_OK) {
        s->des_alloc++;
        ct_free_des(s, des);
    }

    s->in_call++;
    rc = s->btl->ops->free(s->btl, NULL);
    s->in_call--;
    CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, "free(NULL)");

    /* Sends with a NULL descriptor or endpoint, or on a reserved tag, are
     * refused and leave the descriptor with the caller. */
    des = da_alloc(s, ep, 16, 0, NULL);
    if (des != NULL) {
        ct_op_t *op = ct_op_new(s, peer0, false, true);
        bool accepted = false;
        op->des = des;
        op->expect_ok = false;
        des->flags = 0;
        des->cbfunc = ct_comp_cb;
        des->cbdata = op;
        memset(ferry_btl_seg_ptr(&des->src[0]), 0, 16);
        s->in_call++;
        rc = s->btl->ops->send(s->btl, ep, NULL, CT_DATA_TAG);
        s->in_call--;
        CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, "send of a NULL descriptor");
        s->in_call++;
        rc = s->btl->ops->send(s->btl, NULL, des, CT_DATA_TAG);
        s->in_call--;
        CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, "send to a NULL endpoint");
        accepted = rc == FERRY_OK;
        for (unsigned t = FERRY_BTL_TAG_BTL_MIN; t < FERRY_BTL_TAG_COUNT && !accepted; t++) {
            char what[64];
            snprintf(what, sizeof(what), "send on reserved tag %u", t);
            s->in_call++;
            rc = s->btl->ops->send(s->btl, ep, des, (uint8_t)t);
            s->in_call--;
            CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, what);
            accepted = rc == FERRY_OK;
        }
        if (accepted) {
            /* The transport took it: it completes through the callback. */
            op->started = true;
            s->ops_started++;
        } else {
            ct_free_des(s, des);
        }
    }

    for (unsigned t = FERRY_BTL_TAG_BTL_MIN; t < FERRY_BTL_TAG_COUNT; t++) {
        char what[64];
        snprintf(what, sizeof(what), "register_am on reserved tag %u", t);
        rc = s->btl->ops->register_am(s->btl, (uint8_t)t, ia_never_am, s);
        CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, what);
        snprintf(what, sizeof(what), "register_am(NULL) on reserved tag %u", t);
        rc = s->btl->ops->register_am(s->btl, (uint8_t)t, NULL, NULL);
        CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, what);
    }

    if (ct_has(s, FERRY_BTL_FLAG_SENDI)) {
        s->in_call++;
        rc = s->btl->ops->sendi(s->btl, ep, hdr, sizeof(hdr), NULL, 0, FERRY_BTL_TAG_BTL_MIN);
        s->in_call--;
        CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, "sendi on a reserved tag");
        s->in_call++;
        rc = s->btl->ops->sendi(s->btl, NULL, hdr, sizeof(hdr), NULL, 0, CT_DATA_TAG);
        s->in_call--;
        CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, "sendi to a NULL endpoint");
        /* Lengths without their bytes, and lengths whose sum wraps to a
         * small one: nothing may be read or sent. */
        static const struct {
            bool hdr_null, payload_null;
            size_t hlen, plen;
            const char *what;
        } bad[] = {
            {true, false, 8, 0, "sendi of a NULL header with a length"},
            {false, true, 8, 8, "sendi of a NULL payload with a length"},
            {false, false, 0, 0, "sendi of a header longer than max_send_size"},
            {false, false, 8, 0, "sendi of a payload that makes it longer than max_send_size"},
            {false, false, 8, 0, "sendi whose lengths add up past SIZE_MAX"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            size_t hlen = bad[i].hlen, plen = bad[i].plen;
            if (i == 2)
                hlen = max + 1;
            else if (i == 3)
                plen = max - hlen + 1;
            else if (i == 4)
                plen = SIZE_MAX - hlen + 2;
            s->in_call++;
            rc = s->btl->ops->sendi(s->btl, ep, bad[i].hdr_null ? NULL : hdr, hlen,
                                    bad[i].payload_null ? NULL : hdr, plen, CT_DATA_TAG);
            s->in_call--;
            CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, bad[i].what);
        }
    }

    if (rdma) {
        ferry_btl_reg_t *reg = NULL;
        win = xmalloc(4096);
        local = xmalloc(4096);
        ct_fill(win, 4096, ct_seed((uint64_t)s->rank, 0x1a, 0, 0), 0);
        ct_fill(local, 4096, ct_seed((uint64_t)s->rank, 0x1b, 0, 0), 0);
        rc = s->btl->ops->register_mem(s->btl, NULL, win, 0,
                                       FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE, &reg);
        if (!CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, "register_mem of 0 bytes") && rc == FERRY_OK)
            s->btl->ops->deregister_mem(s->btl, reg);
        reg = NULL;
        rc = s->btl->ops->register_mem(s->btl, NULL, NULL, 4096,
                                       FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE, &reg);
        if (!CT_CHECK_RC(s, rc, FERRY_ERR_INVALID, "register_mem of a NULL base") && rc == FERRY_OK)
            s->btl->ops->deregister_mem(s->btl, reg);

        rc = s->btl->ops->register_mem(s->btl, NULL, win, 4096,
                                       FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE, &wreg);
        if (CT_CHECK_RC(s, rc, FERRY_OK, "register_mem of 4096 bytes") &&
            ct_exchange_rkey(s, 0, wreg)) {
            for (int i = 0; i < s->nreach; i++) {
                int r = s->reach[i];
                const ct_rkey_t *rk = &s->peer[r].rkey[0];
                if (ct_has(s, FERRY_BTL_FLAG_PUT)) {
                    ia_rdma_mismatch(s, r, true, local, rk);
                    ia_rdma_null(s, r, true, local, rk);
                }
                if (ct_has(s, FERRY_BTL_FLAG_GET)) {
                    ia_rdma_mismatch(s, r, false, local, rk);
                    ia_rdma_null(s, r, false, local, rk);
                }
            }
        }
    }
    ct_case_finish(s);
    if (win != NULL) {
        /* Nothing refused may have touched the target. */
        size_t bad = ct_verify(win, 4096, ct_seed((uint64_t)s->rank, 0x1a, 0, 0), 0);
        CT_CHECK(s, bad == SIZE_MAX, "refused operations changed the target at byte %zu", bad);
    }
    if (wreg != NULL)
        CT_CHECK_RC(s, s->btl->ops->deregister_mem(s->btl, wreg), FERRY_OK, "deregister_mem");
    free(local);
    free(win);
    return CT_RESULT_RUN;
}
