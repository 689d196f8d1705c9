/*
 * Active-message cases: sizes through every send path, every user tag,
 * ordering, and back pressure.
 */
#include "contract.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEQ_HDR 16 /* seq (8), sender (4), size (4) */

static void *xmalloc(size_t n)
{
    void *p = malloc(n != 0 ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    return p;
}

/* Reports the first differing byte of a payload against its pattern. */
static void check_pattern(ct_suite_t *s, const uint8_t *data, size_t len, uint64_t seed,
                          uint64_t off, const char *what, int peer, uint64_t seq)
{
    size_t bad = ct_verify(data, len, seed, off);

    CT_CHECK(s, bad == SIZE_MAX,
             "%s from rank %d (message %llu, %zu bytes): byte %zu is 0x%02x, expected 0x%02x",
             what, peer, (unsigned long long)seq, len, bad, bad != SIZE_MAX ? data[bad] : 0,
             bad != SIZE_MAX ? ct_pattern_byte(seed, off + bad) : 0);
}

/* ---- sequenced messages (am_order, back_pressure, desc_accounting) --------- */

void ct_seq_build(ct_suite_t *s, uint8_t *buf, uint64_t seq, size_t size)
{
    uint32_t sender = (uint32_t)s->rank;
    uint32_t sz32 = (uint32_t)size;

    memcpy(buf, &seq, 8);
    memcpy(buf + 8, &sender, 4);
    memcpy(buf + 12, &sz32, 4);
    ct_fill(buf + SEQ_HDR, size - SEQ_HDR, ct_seed(sender, seq, 0x0d, 0), SEQ_HDR);
}

/* The sizes am_order uses, known to sender and receiver alike. */
typedef struct order_state {
    bool fixed_sizes;
    size_t big_every;
} order_state_t;

static size_t order_size(const ct_suite_t *s, const order_state_t *st, uint64_t i)
{
    size_t max = s->attr->max_send_size;
    size_t size;

    if (i % st->big_every == st->big_every - 1)
        size = max;
    else if (i % 3 == 0)
        size = s->attr->eager_limit;
    else
        size = SEQ_HDR + (size_t)((i * 37) % 200);
    if (size < SEQ_HDR)
        size = SEQ_HDR;
    return size <= max ? size : max;
}

void ct_seq_rx(ct_suite_t *s, int peer, uint8_t tag, uint8_t slot_tag, const uint8_t *data,
               size_t len)
{
    const order_state_t *st = s->case_state;
    uint64_t want = s->peer[peer].rx_count - 1;
    uint64_t seq;
    uint32_t sender, size;

    CT_CHECK(s, tag == CT_DATA_TAG, "sequenced message on tag %u", tag);
    if (!CT_CHECK(s, len >= SEQ_HDR, "message %llu from rank %d of %zu bytes, less than its header",
                  (unsigned long long)want, peer, len))
        return;
    memcpy(&seq, data, 8);
    memcpy(&sender, data + 8, 4);
    memcpy(&size, data + 12, 4);
    CT_CHECK(s, sender == (uint32_t)peer, "message from rank %d carries sender %u", peer, sender);
    CT_CHECK(s, seq == want, "out of order: from rank %d got sequence %llu, expected %llu", peer,
             (unsigned long long)seq, (unsigned long long)want);
    if (!CT_CHECK(s, size == len, "message %llu from rank %d: %zu bytes arrived, %u were sent",
                  (unsigned long long)seq, peer, len, size))
        return;
    if (st != NULL && st->fixed_sizes)
        CT_CHECK(s, len == order_size(s, st, seq), "message %llu from rank %d: %zu bytes, expected %zu",
                 (unsigned long long)seq, peer, len, order_size(s, st, seq));
    check_pattern(s, data + SEQ_HDR, len - SEQ_HDR, ct_seed(sender, seq, 0x0d, 0), SEQ_HDR,
                  "payload", peer, seq);
}

/* ---- am_sizes ------------------------------------------------------------------ */

typedef struct sizes_state {
    size_t n;
    size_t *size;
    uint8_t *path;
} sizes_state_t;

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static void add_size(size_t *out, size_t *n, size_t cap, size_t v, size_t limit)
{
    if (v <= limit && *n < cap)
        out[(*n)++] = v;
}

/* 0..3, 7, 8, every power of two with its neighbours, the limits with
 * theirs, and a few odd sizes; sorted, no duplicates. */
static size_t build_sizes(const ferry_btl_attr_t *a, size_t *out, size_t cap)
{
    size_t max = a->max_send_size, eager = a->eager_limit;
    size_t n = 0, u = 0;
    static const size_t fixed[] = {0, 1, 2, 3, 7, 8, 100, 1000, 1500, 4000, 9000, 12345};

    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        add_size(out, &n, cap, fixed[i], max);
    for (size_t p = 4; p <= max; p *= 2) {
        add_size(out, &n, cap, p - 1, max);
        add_size(out, &n, cap, p, max);
        add_size(out, &n, cap, p + 1, max);
        if (p > max / 2)
            break;
    }
    add_size(out, &n, cap, eager - 1, max);
    add_size(out, &n, cap, eager, max);
    add_size(out, &n, cap, eager + 1, max);
    add_size(out, &n, cap, max - 1, max);
    add_size(out, &n, cap, max, max);
    qsort(out, n, sizeof(*out), cmp_size);
    for (size_t i = 0; i < n; i++) {
        if (u == 0 || out[u - 1] != out[i])
            out[u++] = out[i];
    }
    return u;
}

static uint64_t sizes_seed(int sender, uint64_t k, size_t size)
{
    return ct_seed((uint64_t)sender, k, size, 0x51);
}

static void sizes_rx(ct_suite_t *s, int peer, uint8_t tag, uint8_t slot_tag, const uint8_t *data,
                     size_t len)
{
    const sizes_state_t *st = s->case_state;
    uint64_t k = s->peer[peer].rx_count - 1;
    static const char *const paths[] = {"alloc+send", "prepare_src+send", "sendi"};

    CT_CHECK(s, tag == CT_DATA_TAG, "message on tag %u", tag);
    if (!CT_CHECK(s, k < st->n, "message %llu from rank %d: only %zu were sent",
                  (unsigned long long)k, peer, st->n))
        return;
    if (!CT_CHECK(s, len == st->size[k],
                  "message %llu from rank %d (%s): %zu bytes arrived, %zu were sent",
                  (unsigned long long)k, peer, paths[st->path[k]], len, st->size[k]))
        return;
    check_pattern(s, data, len, sizes_seed(peer, k, len), 0, paths[st->path[k]], peer, k);
}

ct_result_t ct_case_am_sizes(ct_suite_t *s)
{
    size_t sizes[512];
    size_t nsizes = build_sizes(s->attr, sizes, sizeof(sizes) / sizeof(sizes[0]));
    bool sendi = ct_has(s, FERRY_BTL_FLAG_SENDI);
    sizes_state_t st;
    uint8_t *buf;

    st.size = xmalloc(3 * nsizes * sizeof(*st.size));
    st.path = xmalloc(3 * nsizes);
    st.n = 0;
    for (size_t i = 0; i < nsizes; i++) {
        st.size[st.n] = sizes[i];
        st.path[st.n++] = CT_PATH_ALLOC;
    }
    for (size_t i = 0; i < nsizes; i++) {
        st.size[st.n] = sizes[i];
        st.path[st.n++] = CT_PATH_PREP;
    }
    for (size_t i = 0; i < nsizes && sendi; i++) {
        if (sizes[i] > s->attr->eager_limit)
            break;
        st.size[st.n] = sizes[i];
        st.path[st.n++] = CT_PATH_SENDI;
    }
    if (!sendi)
        ct_note(s, "attr.flags lack SENDI: sendi not exercised");
    buf = xmalloc(s->attr->max_send_size);

    ct_case_begin(s, sizes_rx, &st);
    for (size_t k = 0; k < st.n; k++) {
        for (int i = 0; i < s->nreach; i++) {
            int r = s->reach[i];
            ct_fill(buf, st.size[k], sizes_seed(s->rank, k, st.size[k]), 0);
            if (ct_send(s, r, CT_DATA_TAG, (enum ct_path)st.path[k], buf, st.size[k],
                        (k & 1) != 0, true) != FERRY_OK)
                goto finish;
        }
        if ((k & 15) == 15)
            ct_progress(s);
    }
finish:
    ct_case_finish(s);
    free(buf);
    free(st.path);
    free(st.size);
    return CT_RESULT_RUN;
}

/* ---- am_all_tags ------------------------------------------------------------------ */

#define TAGS_MAGIC 0x54414753u /* "TAGS" */

static size_t tags_len(const ct_suite_t *s, unsigned tag)
{
    size_t len = 16 + (tag * 7u) % 300u;
    return len <= s->attr->max_send_size ? len : s->attr->max_send_size;
}

static void tags_rx(ct_suite_t *s, int peer, uint8_t tag, uint8_t slot_tag, const uint8_t *data,
                    size_t len)
{
    uint32_t magic, htag, sender;

    CT_CHECK(s, tag == slot_tag, "tag %u delivered to the handler of tag %u", tag, slot_tag);
    if (!CT_CHECK(s, len == tags_len(s, slot_tag), "tag %u message from rank %d: %zu bytes, sent %zu",
                  slot_tag, peer, len, tags_len(s, slot_tag)))
        return;
    memcpy(&magic, data, 4);
    memcpy(&htag, data + 4, 4);
    memcpy(&sender, data + 8, 4);
    if (!CT_CHECK(s, magic == TAGS_MAGIC, "tag %u: message from rank %d is not a tag probe",
                  slot_tag, peer))
        return;
    CT_CHECK(s, htag == slot_tag, "message sent on tag %u reached the handler of tag %u", htag,
             slot_tag);
    CT_CHECK(s, sender == (uint32_t)peer, "message from rank %u arrived with rd->peer %d", sender,
             peer);
    check_pattern(s, data + 16, len - 16, ct_seed(sender, htag, 0x7a6, 0), 16, "tag probe", peer,
                  htag);
    if (htag <= FERRY_BTL_TAG_USER_MAX)
        s->peer[peer].tag_hits[htag]++;
}

ct_result_t ct_case_am_all_tags(ct_suite_t *s)
{
    uint8_t buf[16 + 300];
    bool sendi = ct_has(s, FERRY_BTL_FLAG_SENDI);

    ct_case_begin(s, tags_rx, NULL);
    for (unsigned t = 0; t <= FERRY_BTL_TAG_USER_MAX; t++) {
        for (int i = 0; i < s->nreach; i++) {
            int r = s->reach[i];
            uint32_t magic = TAGS_MAGIC, tag32 = t, sender = (uint32_t)s->rank, zero = 0;
            size_t len = tags_len(s, t);
            enum ct_path path = (enum ct_path)(t % 3);
            if (path == CT_PATH_SENDI && (!sendi || len > s->attr->eager_limit))
                path = CT_PATH_ALLOC;
            memcpy(buf, &magic, 4);
            memcpy(buf + 4, &tag32, 4);
            memcpy(buf + 8, &sender, 4);
            memcpy(buf + 12, &zero, 4);
            ct_fill(buf + 16, len - 16, ct_seed(sender, t, 0x7a6, 0), 16);
            if (ct_send(s, r, (uint8_t)t, path, buf, len, (t & 1) != 0, true) != FERRY_OK)
                goto finish;
        }
    }
finish:
    if (ct_case_finish(s)) {
        for (int i = 0; i < s->nreach; i++) {
            int r = s->reach[i];
            for (unsigned t = 0; t <= FERRY_BTL_TAG_USER_MAX; t++)
                CT_CHECK(s, s->peer[r].tag_hits[t] == 1,
                         "tag %u from rank %d: handler ran %u times, expected once", t, r,
                         s->peer[r].tag_hits[t]);
        }
    }
    return CT_RESULT_RUN;
}

/* ---- am_order ---------------------------------------------------------------------- */

#define ORDER_COUNT 3000
#define ORDER_BIG_BYTES ((size_t)64 << 20) /* bytes of max-size messages per peer */

ct_result_t ct_case_am_order(ct_suite_t *s)
{
    order_state_t st = {true, 10};
    bool sendi = ct_has(s, FERRY_BTL_FLAG_SENDI);
    uint8_t *buf;

    if (s->attr->max_send_size < SEQ_HDR) {
        printf("skip %s: max_send_size %zu below the suite's %d-byte header\n", s->case_name,
               s->attr->max_send_size, SEQ_HDR);
        return CT_RESULT_SKIP;
    }
    /* Bound the bytes of max-size messages, for transports with big ones. */
    while ((ORDER_COUNT / st.big_every) * s->attr->max_send_size > ORDER_BIG_BYTES)
        st.big_every *= 2;
    buf = xmalloc(s->attr->max_send_size);

    ct_case_begin(s, ct_seq_rx, &st);
    for (uint64_t i = 0; i < ORDER_COUNT; i++) {
        size_t size = order_size(s, &st, i);
        enum ct_path path = CT_PATH_ALLOC;
        /* Mix the paths on one endpoint: sendi must not overtake queued sends. */
        if (i % 4 == 2)
            path = CT_PATH_PREP;
        else if (i % 4 == 3 && sendi && size <= s->attr->eager_limit)
            path = CT_PATH_SENDI;
        ct_seq_build(s, buf, i, size);
        for (int k = 0; k < s->nreach; k++) {
            if (ct_send(s, s->reach[k], CT_DATA_TAG, path, buf, size, (i & 1) != 0, true) !=
                FERRY_OK)
                goto finish;
        }
        /* Progress now and then, so fragments queue and drain while the
         * stream runs rather than only when resources run out. */
        if (i % 64 == 63)
            ct_progress(s);
    }
finish:
    ct_case_finish(s);
    free(buf);
    return CT_RESULT_RUN;
}

/* ---- back_pressure ---------------------------------------------------------------- */

#define BP_MAX_ATTEMPTS 1000000u
#define BP_MEM_BUDGET ((size_t)1 << 30) /* fragment bytes a transport may hold without pushing back */

/*
 * Sends size-byte messages to peer through alloc+send without progressing
 * until alloc or send says NO_RESOURCE. Returns the number sent, or -1 when
 * the transport never pushed back or failed otherwise.
 */
static long bp_flood(ct_suite_t *s, int peer, size_t size, size_t frag_size, uint64_t *seq,
                     uint8_t *buf)
{
    ferry_btl_endpoint_t *ep = s->peer[peer].ep;
    size_t bound = BP_MEM_BUDGET / (frag_size != 0 ? frag_size : 1) + 1;
    long sent = 0;

    if (bound > BP_MAX_ATTEMPTS)
        bound = BP_MAX_ATTEMPTS;
    for (size_t attempt = 0; attempt < bound; attempt++) {
        ferry_btl_desc_t *des = NULL;
        bool own = (attempt & 1) != 0;
        ct_op_t *op;
        int rc;

        s->in_call++;
        rc = s->btl->ops->alloc(s->btl, ep, size, own ? FERRY_BTL_DES_OWNERSHIP : 0, &des);
        s->in_call--;
        if (rc == FERRY_ERR_NO_RESOURCE)
            return sent;
        if (!CT_CHECK_RC(s, rc, FERRY_OK, "alloc while flooding"))
            return -1;
        s->des_alloc++;
        if (!CT_CHECK(s, des->src_cnt >= 1 && des->src[0].len == size,
                      "alloc of %zu bytes gave a segment of %zu", size,
                      des->src_cnt >= 1 ? des->src[0].len : 0)) {
            ct_free_des(s, des);
            return -1;
        }
        ct_seq_build(s, buf, *seq, size);
        memcpy(ferry_btl_seg_ptr(&des->src[0]), buf, size);
        op = ct_op_new(s, peer, own, true);
        op->des = des;
        des->flags = own ? FERRY_BTL_DES_OWNERSHIP : 0;
        des->cbfunc = ct_comp_cb;
        des->cbdata = op;
        s->in_call++;
        rc = s->btl->ops->send(s->btl, ep, des, CT_DATA_TAG);
        s->in_call--;
        if (rc == FERRY_ERR_NO_RESOURCE) {
            ct_free_des(s, des);
            return sent;
        }
        if (!CT_CHECK_RC(s, rc, FERRY_OK, "send while flooding")) {
            ct_free_des(s, des);
            return -1;
        }
        op->started = true;
        s->ops_started++;
        s->peer[peer].tx_count++;
        (*seq)++;
        sent++;
    }
    CT_CHECK(s, false,
             "transport never pushed back: %zu sends of %zu bytes to rank %d accepted without "
             "progress (about %zu MiB of fragments)",
             bound, size, peer, bound * frag_size >> 20);
    return -1;
}

ct_result_t ct_case_back_pressure(ct_suite_t *s)
{
    size_t max = s->attr->max_send_size, eager = s->attr->eager_limit;
    size_t small = eager >= 64 ? 64 : (eager >= SEQ_HDR ? eager : SEQ_HDR);
    uint64_t *seq;
    uint8_t *buf;

    if (max < SEQ_HDR) {
        printf("skip %s: max_send_size %zu below the suite's %d-byte header\n", s->case_name, max,
               SEQ_HDR);
        return CT_RESULT_SKIP;
    }
    seq = calloc((size_t)s->size, sizeof(*seq));
    buf = xmalloc(max);
    if (seq == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    ct_case_begin(s, ct_seq_rx, NULL);
    /* Round 0 exhausts the eager pool, round 1 the max pool. */
    for (int round = 0; round < 2; round++) {
        size_t size = round == 0 ? small : max;
        size_t frag = round == 0 ? eager : max;
        for (int i = 0; i < s->nreach; i++) {
            int r = s->reach[i];
            long n = bp_flood(s, r, size, frag, &seq[r], buf);
            if (n < 0)
                goto finish;
            CT_CHECK(s, n > 0, "round %d: the first alloc to rank %d already said NO_RESOURCE",
                     round, r);
            /* Drain: everything accepted completes and nothing is lost. */
            if (!ct_wait_ops(s, "the flooded sends to complete"))
                goto finish;
            /* Sending works again once the transport has drained. */
            ct_seq_build(s, buf, seq[r], size);
            if (ct_send(s, r, CT_DATA_TAG, CT_PATH_ALLOC, buf, size, false, true) != FERRY_OK)
                goto finish;
            seq[r]++;
            if (!ct_wait_ops(s, "a send after the flood"))
                goto finish;
        }
    }
finish:
    ct_case_finish(s);
    free(buf);
    free(seq);
    return CT_RESULT_RUN;
}
