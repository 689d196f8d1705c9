/*
 * The contract suite's machinery: reporting, data patterns, progress and
 * bounded waits, sending, control messages and RDMA helpers. The cases use
 * these so that each reads as the contract it checks.
 */
#include "contract.h"

#include <stdarg.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- reporting ------------------------------------------------------------- */

static const char *ct_basename(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

static void ct_print_fail(ct_suite_t *s, const char *file, int line, const char *expr,
                          const char *msg)
{
    s->case_failures++;
    if (s->case_failures > CT_MAX_FAIL_LINES + 1)
        return;
    if (s->case_failures == CT_MAX_FAIL_LINES + 1) {
        printf("FAIL %s [rank %d]: further failures of this case not shown\n",
               s->case_name != NULL ? s->case_name : "setup", s->rank);
    } else {
        printf("FAIL %s [rank %d]: %s:%d: %s: %s\n", s->case_name != NULL ? s->case_name : "setup",
               s->rank, ct_basename(file), line, expr, msg);
    }
    fflush(stdout);
}

bool ct_check(ct_suite_t *s, bool ok, const char *file, int line, const char *expr,
              const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    if (ok)
        return true;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ct_print_fail(s, file, line, expr, msg);
    return false;
}

bool ct_check_rc(ct_suite_t *s, int rc, int want, const char *what, const char *file, int line)
{
    char msg[256];

    if (rc == want)
        return true;
    snprintf(msg, sizeof(msg), "returned %d (%s), expected %d (%s)", rc, ferry_strerror(rc), want,
             ferry_strerror(want));
    ct_print_fail(s, file, line, what, msg);
    return false;
}

void ct_note(ct_suite_t *s, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    printf("note %s [rank %d]: %s\n", s->case_name != NULL ? s->case_name : "setup", s->rank,
           msg);
    fflush(stdout);
}

bool ct_has(const ct_suite_t *s, uint32_t flag)
{
    return (s->attr->flags & flag) == flag;
}

/* ---- data patterns ------------------------------------------------------------ */

/* splitmix64's finaliser: every input bit affects every output bit, so
 * streams of different seeds or positions share no runs of bytes. */
static uint64_t ct_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t ct_seed(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return ct_mix(ct_mix(ct_mix(ct_mix(a + 0x9e3779b97f4a7c15ull) ^ b) ^ c) ^ d);
}

static uint64_t ct_word(uint64_t seed, uint64_t word_idx)
{
    return ct_mix(seed ^ (word_idx * 0x9e3779b97f4a7c15ull));
}

uint8_t ct_pattern_byte(uint64_t seed, uint64_t off)
{
    return (uint8_t)(ct_word(seed, off >> 3) >> ((off & 7u) * 8u));
}

void ct_fill(void *buf, size_t len, uint64_t seed, uint64_t off)
{
    uint8_t *p = buf;
    uint64_t w = 0;

    for (size_t i = 0; i < len; i++) {
        uint64_t o = off + i;
        if (i == 0 || (o & 7u) == 0)
            w = ct_word(seed, o >> 3);
        p[i] = (uint8_t)(w >> ((o & 7u) * 8u));
    }
}

size_t ct_verify(const void *buf, size_t len, uint64_t seed, uint64_t off)
{
    const uint8_t *p = buf;
    uint64_t w = 0;

    for (size_t i = 0; i < len; i++) {
        uint64_t o = off + i;
        if (i == 0 || (o & 7u) == 0)
            w = ct_word(seed, o >> 3);
        if (p[i] != (uint8_t)(w >> ((o & 7u) * 8u)))
            return i;
    }
    return SIZE_MAX;
}

/* ---- progress and waiting --------------------------------------------------- */

static double ct_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

ct_deadline_t ct_deadline(void)
{
    ct_deadline_t d = {ct_now() + CT_WAIT_SECONDS};
    return d;
}

bool ct_free_des(ct_suite_t *s, ferry_btl_desc_t *des)
{
    int rc;

    s->in_call++;
    rc = s->btl->ops->free(s->btl, des);
    s->in_call--;
    if (!CT_CHECK_RC(s, rc, FERRY_OK, "free of a completed descriptor"))
        return false;
    s->des_freed++;
    return true;
}

static void ct_drain_frees(ct_suite_t *s)
{
    /* Frees may not run callbacks, so the list cannot grow while it drains;
     * take it anyway, in case a transport breaks that rule. */
    while (s->to_free_len > 0) {
        ferry_btl_desc_t *des = s->to_free[--s->to_free_len];
        ct_free_des(s, des);
    }
}

void ct_progress(ct_suite_t *s)
{
    int rc = s->btl->ops->progress(s->btl);
    CT_CHECK(s, rc >= 0, "btl progress returned %d (%s)", rc, ferry_strerror(rc));
    int events = rc > 0 ? rc : 0;
    rc = ferry_progress(s->ctx);
    CT_CHECK(s, rc >= 0, "ferry_progress returned %d (%s)", rc, ferry_strerror(rc));
    events += rc > 0 ? rc : 0;
    ct_drain_frees(s);
    /* With more ranks than cores, a rank that spins idle holds the core its
     * peer needs; give it away after a run of idle polls. */
    if (events == 0) {
        if (++s->idle_polls >= 64) {
            sched_yield();
            s->idle_polls = 0;
        }
    } else {
        s->idle_polls = 0;
    }
}

bool ct_step(ct_suite_t *s, ct_deadline_t *d, const char *what)
{
    ct_progress(s);
    if (ct_now() > d->end) {
        CT_CHECK(s, false, "timed out after %d s waiting for %s", CT_WAIT_SECONDS, what);
        return false;
    }
    return true;
}

bool ct_wait_ops(ct_suite_t *s, const char *what)
{
    ct_deadline_t d = ct_deadline();

    while (s->ops_done < s->ops_started) {
        if (!ct_step(s, &d, what)) {
            ct_note(s, "%llu of %llu operations completed",
                    (unsigned long long)s->ops_done, (unsigned long long)s->ops_started);
            return false;
        }
    }
    return true;
}

bool ct_wait_op(ct_suite_t *s, ct_op_t *op, const char *what)
{
    ct_deadline_t d = ct_deadline();

    while (!op->done) {
        if (!ct_step(s, &d, what))
            return false;
    }
    return true;
}

/* ---- operations --------------------------------------------------------------- */

ct_op_t *ct_op_new(ct_suite_t *s, int peer, bool ownership, bool autofree)
{
    ct_op_t *op = calloc(1, sizeof(*op));

    if (op == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    op->s = s;
    op->peer = peer;
    op->ep = s->peer[peer].ep;
    op->ownership = ownership;
    op->autofree = autofree;
    op->expect_ok = true;
    op->next = s->ops;
    s->ops = op;
    return op;
}

/* Marks op accepted by the transport: from now a completion is due. */
static void ct_op_started(ct_suite_t *s, ct_op_t *op)
{
    op->started = true;
    s->ops_started++;
}

/* Frees the case's operations. One that never completed stays allocated: the
 * transport may still call back with it (a failure was reported already). */
static void ct_ops_release(ct_suite_t *s)
{
    ct_op_t **link = &s->ops;

    while (*link != NULL) {
        ct_op_t *op = *link;
        if (op->started && !op->done) {
            link = &op->next;
            continue;
        }
        *link = op->next;
        free(op->buf);
        free(op);
    }
}

static void ct_to_free_push(ct_suite_t *s, ferry_btl_desc_t *des)
{
    if (s->to_free_len == s->to_free_cap) {
        size_t cap = s->to_free_cap != 0 ? s->to_free_cap * 2 : 256;
        ferry_btl_desc_t **n = realloc(s->to_free, cap * sizeof(*n));
        if (n == NULL) {
            fprintf(stderr, "contract: out of memory\n");
            exit(1);
        }
        s->to_free = n;
        s->to_free_cap = cap;
    }
    s->to_free[s->to_free_len++] = des;
}

void ct_comp_cb(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                int status)
{
    ct_op_t *op = des != NULL ? des->cbdata : NULL;
    ct_suite_t *s;

    if (op == NULL) {
        /* Nothing to report through: the suite never sends without cbdata. */
        printf("FAIL completion callback with descriptor %p and no suite data\n", (void *)des);
        fflush(stdout);
        return;
    }
    s = op->s;
    CT_CHECK(s, s->in_call == 0,
             "completion callback ran inside the call that started an operation (depth %d)",
             s->in_call);
    CT_CHECK(s, btl == s->btl, "completion callback got module %p, expected %p", (void *)btl,
             (void *)s->btl);
    CT_CHECK(s, op->des == des, "completion callback got descriptor %p, the operation's is %p",
             (void *)des, (void *)op->des);
    CT_CHECK(s, ep == op->ep,
             "completion callback got endpoint %p, the operation went to rank %d's endpoint %p",
             (void *)ep, op->peer, (void *)op->ep);
    CT_CHECK(s, op->started, "completion callback of an operation the transport refused");
    op->completions++;
    if (!CT_CHECK(s, op->completions == 1,
                  "completion callback ran %d times for one operation (to rank %d)",
                  op->completions, op->peer))
        return;
    op->done = true;
    op->status = status;
    s->ops_done++;
    if (op->expect_ok)
        CT_CHECK(s, status == FERRY_OK,
                 "operation to rank %d completed with status %d (%s), expected FERRY_OK",
                 op->peer, status, ferry_strerror(status));
    if (op->ownership)
        s->des_released++;
    else
        ct_to_free_push(s, des);
    if (op->autofree) {
        free(op->buf);
        op->buf = NULL;
    }
}

/* Gets a send descriptor for path, retrying while the transport is out of
 * resources. On success *des_out holds len bytes of data. */
static int ct_get_send_des(ct_suite_t *s, ferry_btl_endpoint_t *ep, enum ct_path path,
                           const void *data, size_t len, bool ownership, void **copy_out,
                           ferry_btl_desc_t **des_out)
{
    ct_deadline_t d = ct_deadline();
    ferry_btl_desc_t *des = NULL;
    void *copy = NULL;
    size_t sz = len;
    int rc;

    if (path == CT_PATH_PREP) {
        /* The transport may send from this memory in place (SEND_INPLACE), so
         * it lives until the completion. */
        copy = malloc(len != 0 ? len : 1);
        if (copy == NULL) {
            fprintf(stderr, "contract: out of memory\n");
            exit(1);
        }
        if (len != 0)
            memcpy(copy, data, len);
    }
    for (;;) {
        s->in_call++;
        if (path == CT_PATH_ALLOC) {
            rc = s->btl->ops->alloc(s->btl, ep, len, ownership ? FERRY_BTL_DES_OWNERSHIP : 0,
                                    &des);
        } else {
            ferry_convertor_t conv;
            ferry_convertor_init_contig(&conv, len != 0 ? copy : NULL, len);
            sz = len;
            rc = s->btl->ops->prepare_src(s->btl, ep, NULL, &conv, 0, &sz, 0, &des);
        }
        s->in_call--;
        if (rc != FERRY_ERR_NO_RESOURCE)
            break;
        if (!ct_step(s, &d, "a send descriptor (alloc/prepare_src said NO_RESOURCE)")) {
            free(copy);
            return FERRY_ERR_TIMEOUT;
        }
    }
    if (!CT_CHECK_RC(s, rc, FERRY_OK, path == CT_PATH_ALLOC ? "alloc" : "prepare_src")) {
        free(copy);
        return rc;
    }
    s->des_alloc++;
    if (!CT_CHECK(s, des != NULL && des->src != NULL && des->src_cnt >= 1,
                  "descriptor %p without a source segment", (void *)des) ||
        !CT_CHECK(s, des->src[0].len == len, "%s of %zu bytes gave a segment of %zu bytes",
                  path == CT_PATH_ALLOC ? "alloc" : "prepare_src", len, des->src[0].len) ||
        !CT_CHECK(s, path == CT_PATH_ALLOC || sz == len,
                  "prepare_src of %zu contiguous bytes (max_send_size %zu) packed %zu", len,
                  s->attr->max_send_size, sz) ||
        !CT_CHECK(s, len == 0 || ferry_btl_seg_ptr(&des->src[0]) != NULL,
                  "segment of %zu bytes at NULL", len)) {
        if (des != NULL)
            ct_free_des(s, des);
        free(copy);
        return FERRY_ERR;
    }
    if (path == CT_PATH_ALLOC && len != 0)
        memcpy(ferry_btl_seg_ptr(&des->src[0]), data, len);
    if (path == CT_PATH_PREP && len != 0)
        CT_CHECK(s, memcmp(ferry_btl_seg_ptr(&des->src[0]), data, len) == 0,
                 "prepare_src of %zu bytes: the fragment differs from the source", len);
    *copy_out = copy;
    *des_out = des;
    return FERRY_OK;
}

int ct_send(ct_suite_t *s, int peer, uint8_t tag, enum ct_path path, const void *data,
            size_t len, bool ownership, bool count)
{
    ferry_btl_endpoint_t *ep = s->peer[peer].ep;
    ferry_btl_desc_t *des = NULL;
    ct_deadline_t d = ct_deadline();
    void *copy = NULL;
    int rc;

    if (path == CT_PATH_SENDI) {
        size_t hl = len < 16 ? len : 16;
        const uint8_t *bytes = data;
        for (;;) {
            s->in_call++;
            rc = s->btl->ops->sendi(s->btl, ep, hl != 0 ? bytes : NULL, hl,
                                    len > hl ? bytes + hl : NULL, len - hl, tag);
            s->in_call--;
            if (rc != FERRY_ERR_NO_RESOURCE)
                break;
            if (!ct_step(s, &d, "sendi to accept a message"))
                return FERRY_ERR_TIMEOUT;
        }
        if (!CT_CHECK_RC(s, rc, FERRY_OK, "sendi"))
            return rc;
        if (count)
            s->peer[peer].tx_count++;
        return FERRY_OK;
    }

    rc = ct_get_send_des(s, ep, path, data, len, ownership, &copy, &des);
    if (rc != FERRY_OK)
        return rc;
    return ct_send_des(s, peer, des, tag, ownership, copy, count);
}

int ct_send_des(ct_suite_t *s, int peer, ferry_btl_desc_t *des, uint8_t tag, bool ownership,
                void *buf, bool count)
{
    ferry_btl_endpoint_t *ep = s->peer[peer].ep;
    ct_deadline_t d = ct_deadline();
    ct_op_t *op = ct_op_new(s, peer, ownership, true);
    int rc;

    op->des = des;
    op->buf = buf;
    des->flags = ownership ? FERRY_BTL_DES_OWNERSHIP : 0;
    des->cbfunc = ct_comp_cb;
    des->cbdata = op;
    for (;;) {
        s->in_call++;
        rc = s->btl->ops->send(s->btl, ep, des, tag);
        s->in_call--;
        /* The contract queues on the endpoint rather than refusing, but a
         * NO_RESOURCE leaves the descriptor with the caller: retry. */
        if (rc != FERRY_ERR_NO_RESOURCE)
            break;
        if (!ct_step(s, &d, "send to accept a message"))
            break;
    }
    if (!CT_CHECK_RC(s, rc, FERRY_OK, "send")) {
        ct_free_des(s, des);
        return rc;
    }
    ct_op_started(s, op);
    if (count)
        s->peer[peer].tx_count++;
    return FERRY_OK;
}

int ct_send_ctrl(ct_suite_t *s, int peer, ct_ctrl_t *c)
{
    c->magic = CT_CTRL_MAGIC;
    c->case_id = s->case_id;
    c->sender = (uint32_t)s->rank;
    /* Control messages let the transport own their descriptors, so both
     * ownership modes run in every case. */
    return ct_send(s, peer, CT_CTRL_TAG, CT_PATH_ALLOC, c, sizeof(*c), true, false);
}

/* ---- receiving ------------------------------------------------------------------ */

static void ct_on_ctrl(ct_suite_t *s, int peer, const ct_ctrl_t *c)
{
    ct_peer_t *p = &s->peer[peer];

    CT_CHECK(s, c->sender == (uint32_t)peer,
             "control message from rank %d claims sender %u", peer, c->sender);
    if (!CT_CHECK(s, c->case_id == s->case_id,
                  "control message (kind %u) from rank %d of case %u arrived in case %u",
                  c->kind, peer, c->case_id, s->case_id))
        return;
    switch (c->kind) {
    case CT_CTRL_FIN:
        CT_CHECK(s, !p->fin_seen, "two FIN messages from rank %d", peer);
        p->fin_seen = true;
        p->fin_count = c->a;
        break;
    case CT_CTRL_RKEY:
        if (!CT_CHECK(s, c->idx < CT_MAX_RKEYS, "RKEY slot %u", c->idx))
            return;
        p->rkey[c->idx].valid = true;
        p->rkey[c->idx].addr = c->addr;
        p->rkey[c->idx].len = c->len;
        memcpy(p->rkey[c->idx].key, c->key, sizeof(c->key));
        break;
    case CT_CTRL_DESC:
        CT_CHECK(s, !p->desc_pending,
                 "DESC from rank %d while the previous one still waits for its data", peer);
        p->desc_pending = true;
        p->desc = *c;
        break;
    case CT_CTRL_END:
        if (!CT_CHECK(s, c->idx < CT_MAX_STREAMS, "END of stream %u", c->idx))
            return;
        CT_CHECK(s, !p->stream_ended[c->idx], "stream %u from rank %d ended twice", c->idx,
                 peer);
        CT_CHECK(s, p->stream_next[c->idx] == c->len,
                 "stream %u from rank %d: %llu bytes received in order, sender sent %llu",
                 c->idx, peer, (unsigned long long)p->stream_next[c->idx],
                 (unsigned long long)c->len);
        p->stream_ended[c->idx] = true;
        break;
    default:
        CT_CHECK(s, false, "control message of unknown kind %u from rank %d", c->kind, peer);
    }
}

/* The handler of every user tag; cbdata is the tag's slot, so a message
 * delivered to the wrong tag's handler shows up as a slot/tag mismatch. */
static void ct_am_cb(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, void *cbdata)
{
    ct_tag_slot_t *slot = cbdata;
    ct_suite_t *s = slot->s;
    size_t total = 0;

    CT_CHECK(s, s->in_call == 0,
             "active-message handler ran inside an initiating call (depth %d)", s->in_call);
    CT_CHECK(s, btl == s->btl, "handler got module %p, expected %p", (void *)btl,
             (void *)s->btl);
    CT_CHECK(s, rd->tag == slot->tag, "handler of tag %u called with rd->tag %u", slot->tag,
             rd->tag);
    if (!CT_CHECK(s, rd->peer >= 0 && rd->peer < s->size && s->peer[rd->peer].reachable,
                  "message from rank %d (job size %d), not a reachable peer", rd->peer,
                  s->size))
        return;
    CT_CHECK(s, rd->ep == s->peer[rd->peer].ep,
             "message from rank %d names endpoint %p, add_procs gave %p", rd->peer,
             (void *)rd->ep, (void *)s->peer[rd->peer].ep);
    if (!CT_CHECK(s, rd->seg_cnt == 0 || rd->segs != NULL, "%u segments at NULL", rd->seg_cnt))
        return;
    for (unsigned i = 0; i < rd->seg_cnt; i++) {
        size_t l = rd->segs[i].len;
        if (!CT_CHECK(s, l <= s->rxbuf_len - total,
                      "message from rank %d longer than max_send_size %zu", rd->peer,
                      s->attr->max_send_size))
            return;
        if (l != 0) {
            if (!CT_CHECK(s, ferry_btl_seg_ptr(&rd->segs[i]) != NULL,
                          "segment %u of %zu bytes at NULL", i, l))
                return;
            memcpy(s->rxbuf + total, ferry_btl_seg_ptr(&rd->segs[i]), l);
        }
        total += l;
    }
    if (slot->tag == CT_CTRL_TAG && total == sizeof(ct_ctrl_t)) {
        ct_ctrl_t c;
        memcpy(&c, s->rxbuf, sizeof(c));
        if (c.magic == CT_CTRL_MAGIC) {
            ct_on_ctrl(s, rd->peer, &c);
            return;
        }
    }
    if (!CT_CHECK(s, s->rx != NULL, "data message (tag %u, %zu bytes) from rank %d outside a case",
                  rd->tag, total, rd->peer))
        return;
    s->peer[rd->peer].rx_count++;
    s->rx(s, rd->peer, rd->tag, slot->tag, s->rxbuf, total);
}

void ct_register_handlers(ct_suite_t *s)
{
    for (unsigned t = 0; t <= FERRY_BTL_TAG_USER_MAX; t++) {
        int rc;
        s->slots[t].s = s;
        s->slots[t].tag = (uint8_t)t;
        rc = s->btl->ops->register_am(s->btl, (uint8_t)t, ct_am_cb, &s->slots[t]);
        CT_CHECK(s, rc == FERRY_OK, "register_am(tag %u) returned %d (%s)", t, rc,
                 ferry_strerror(rc));
    }
}

void ct_unregister_handlers(ct_suite_t *s)
{
    for (unsigned t = 0; t <= FERRY_BTL_TAG_USER_MAX; t++) {
        int rc = s->btl->ops->register_am(s->btl, (uint8_t)t, NULL, NULL);
        CT_CHECK(s, rc == FERRY_OK, "register_am(tag %u, NULL) returned %d (%s)", t, rc,
                 ferry_strerror(rc));
    }
}

/* ---- case framing -------------------------------------------------------------- */

void ct_case_begin(ct_suite_t *s, ct_rx_fn_t rx, void *state)
{
    int rc;

    for (int r = 0; r < s->size; r++) {
        ct_peer_t *p = &s->peer[r];
        bool reachable = p->reachable;
        ferry_btl_endpoint_t *ep = p->ep;
        memset(p, 0, sizeof(*p));
        p->reachable = reachable;
        p->ep = ep;
    }
    s->rx = rx;
    s->case_state = state;
    rc = ferry_barrier(s->ctx);
    CT_CHECK_RC(s, rc, FERRY_OK, "ferry_barrier before the case");
}

bool ct_case_finish(ct_suite_t *s)
{
    ct_deadline_t d;
    bool ok = true;

    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        ct_ctrl_t c;
        memset(&c, 0, sizeof(c));
        c.kind = CT_CTRL_FIN;
        c.a = s->peer[r].tx_count;
        if (ct_send_ctrl(s, r, &c) != FERRY_OK)
            ok = false;
    }
    d = ct_deadline();
    for (;;) {
        bool all = s->ops_done >= s->ops_started;
        for (int i = 0; i < s->nreach && all; i++)
            all = s->peer[s->reach[i]].fin_seen;
        if (all)
            break;
        if (!ct_step(s, &d, "the end of the case (FIN from every peer, every completion)")) {
            for (int i = 0; i < s->nreach; i++) {
                ct_peer_t *p = &s->peer[s->reach[i]];
                ct_note(s, "rank %d: FIN %s, %llu data messages received",
                        s->reach[i], p->fin_seen ? "seen" : "missing",
                        (unsigned long long)p->rx_count);
            }
            ct_note(s, "%llu of %llu operations completed", (unsigned long long)s->ops_done,
                    (unsigned long long)s->ops_started);
            ok = false;
            break;
        }
    }
    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        ct_peer_t *p = &s->peer[r];
        if (!p->fin_seen)
            continue;
        if (!CT_CHECK(s, p->rx_count == p->fin_count,
                      "rank %d sent %llu data messages, %llu arrived", r,
                      (unsigned long long)p->fin_count, (unsigned long long)p->rx_count))
            ok = false;
        if (!CT_CHECK(s, !p->desc_pending, "a DESC from rank %d was never followed by data", r))
            ok = false;
    }
    ct_drain_frees(s);
    ct_ops_release(s);
    s->rx = NULL;
    s->case_state = NULL;
    return ok;
}

bool ct_exchange_rkey_raw(ct_suite_t *s, uint32_t idx, uint64_t addr, uint64_t len,
                          const uint8_t *key)
{
    ct_deadline_t d;

    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        if (r == s->rank) {
            ct_rkey_t *k = &s->peer[r].rkey[idx];
            k->valid = true;
            k->addr = addr;
            k->len = len;
            memcpy(k->key, key, FERRY_BTL_KEY_MAX);
        } else {
            ct_ctrl_t c;
            memset(&c, 0, sizeof(c));
            c.kind = CT_CTRL_RKEY;
            c.idx = idx;
            c.addr = addr;
            c.len = len;
            memcpy(c.key, key, FERRY_BTL_KEY_MAX);
            if (ct_send_ctrl(s, r, &c) != FERRY_OK)
                return false;
        }
    }
    d = ct_deadline();
    for (;;) {
        bool all = true;
        for (int i = 0; i < s->nreach && all; i++)
            all = s->peer[s->reach[i]].rkey[idx].valid;
        if (all)
            return true;
        if (!ct_step(s, &d, "every peer's registration key"))
            return false;
    }
}

bool ct_exchange_rkey(ct_suite_t *s, uint32_t idx, const ferry_btl_reg_t *reg)
{
    return ct_exchange_rkey_raw(s, idx, (uint64_t)(uintptr_t)reg->base, reg->len, reg->key);
}

/* ---- RDMA ------------------------------------------------------------------------- */

static bool ct_rdma_start(ct_suite_t *s, bool is_put, int peer, ferry_btl_reg_t *lreg,
                          void *local, size_t len, uint64_t raddr, size_t rlen,
                          const uint8_t *key, bool ownership, bool expect_ok, int *rc_out,
                          ct_op_t **op_out)
{
    const char *what = is_put ? "prepare_src(RDMA)" : "prepare_dst(RDMA)";
    ferry_btl_endpoint_t *ep = s->peer[peer].ep;
    ct_deadline_t d = ct_deadline();
    ferry_btl_desc_t *des = NULL;
    ferry_convertor_t conv;
    ferry_btl_segment_t *lseg, *rseg;
    size_t sz = len;
    ct_op_t *op;
    int rc;

    *op_out = NULL;
    *rc_out = FERRY_ERR;
    for (;;) {
        ferry_convertor_init_contig(&conv, local, len);
        sz = len;
        s->in_call++;
        if (is_put)
            rc = s->btl->ops->prepare_src(s->btl, ep, lreg, &conv, 0, &sz, FERRY_BTL_PREP_RDMA,
                                          &des);
        else
            rc = s->btl->ops->prepare_dst(s->btl, ep, lreg, &conv, 0, &sz, FERRY_BTL_PREP_RDMA,
                                          &des);
        s->in_call--;
        if (rc != FERRY_ERR_NO_RESOURCE)
            break;
        if (!ct_step(s, &d, what))
            return false;
    }
    if (!CT_CHECK_RC(s, rc, FERRY_OK, what))
        return false;
    s->des_alloc++;
    lseg = is_put ? (des->src_cnt >= 1 ? des->src : NULL) : (des->dst_cnt >= 1 ? des->dst : NULL);
    if (!CT_CHECK(s, lseg != NULL, "%s gave no local segment", what) ||
        !CT_CHECK(s, sz == len, "%s of %zu bytes (max_rdma_size %zu) covered %zu", what, len,
                  s->attr->max_rdma_size, sz) ||
        !CT_CHECK(s, ferry_btl_seg_ptr(lseg) == local && lseg->len == len,
                  "%s of %zu bytes at %p: local segment is %zu bytes at %p", what, len, local,
                  lseg->len, ferry_btl_seg_ptr(lseg))) {
        ct_free_des(s, des);
        return false;
    }
    op = ct_op_new(s, peer, ownership, false);
    op->des = des;
    op->expect_ok = expect_ok;
    /* The remote segment goes where the descriptor keeps one; a transport
     * that offers none gets the operation's own storage, which lives until
     * the case ends. */
    if (is_put) {
        if (des->dst == NULL || des->dst_cnt < 1) {
            des->dst = &op->remote;
            des->dst_cnt = 1;
        }
        rseg = &des->dst[0];
    } else {
        if (des->src == NULL || des->src_cnt < 1) {
            des->src = &op->remote;
            des->src_cnt = 1;
        }
        rseg = &des->src[0];
    }
    rseg->addr = raddr;
    rseg->len = rlen;
    memcpy(rseg->key, key, FERRY_BTL_KEY_MAX);
    des->flags = ownership ? FERRY_BTL_DES_OWNERSHIP : 0;
    des->cbfunc = ct_comp_cb;
    des->cbdata = op;
    for (;;) {
        s->in_call++;
        rc = is_put ? s->btl->ops->put(s->btl, ep, des) : s->btl->ops->get(s->btl, ep, des);
        s->in_call--;
        if (rc != FERRY_ERR_NO_RESOURCE)
            break;
        if (!ct_step(s, &d, is_put ? "put to accept" : "get to accept"))
            break;
    }
    *rc_out = rc;
    if (rc != FERRY_OK) {
        /* Refused: the descriptor stays with the caller. */
        ct_free_des(s, des);
        return true;
    }
    ct_op_started(s, op);
    *op_out = op;
    return true;
}

bool ct_put_start(ct_suite_t *s, int peer, ferry_btl_reg_t *lreg, void *local, size_t len,
                  uint64_t raddr, size_t rlen, const uint8_t *key, bool ownership,
                  bool expect_ok, int *rc_out, ct_op_t **op_out)
{
    return ct_rdma_start(s, true, peer, lreg, local, len, raddr, rlen, key, ownership,
                         expect_ok, rc_out, op_out);
}

bool ct_get_start(ct_suite_t *s, int peer, ferry_btl_reg_t *lreg, void *local, size_t len,
                  uint64_t raddr, size_t rlen, const uint8_t *key, bool ownership,
                  bool expect_ok, int *rc_out, ct_op_t **op_out)
{
    return ct_rdma_start(s, false, peer, lreg, local, len, raddr, rlen, key, ownership,
                         expect_ok, rc_out, op_out);
}

static bool ct_rdma_all(ct_suite_t *s, bool is_put, int peer, ferry_btl_reg_t *lreg,
                        void *local, size_t len, uint64_t raddr, const uint8_t *key)
{
    size_t piece = s->attr->max_rdma_size;
    size_t npieces = len / piece + 1;
    ct_op_t **ops = calloc(npieces, sizeof(*ops));
    size_t started = 0;
    ct_deadline_t d;
    bool ok = true;

    if (ops == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    for (size_t pos = 0; pos < len && started < npieces; pos += piece) {
        size_t n = len - pos < piece ? len - pos : piece;
        int rc;
        if (!ct_rdma_start(s, is_put, peer, lreg, (uint8_t *)local + pos, n, raddr + pos, n, key,
                           (started & 1) != 0, true, &rc, &ops[started])) {
            ok = false;
            break;
        }
        if (!CT_CHECK_RC(s, rc, FERRY_OK, is_put ? "put" : "get")) {
            ok = false;
            break;
        }
        started++;
    }
    /* Wait for this transfer's own pieces: other operations may be pending. */
    d = ct_deadline();
    for (size_t i = 0; i < started; i++) {
        while (!ops[i]->done) {
            if (!ct_step(s, &d, is_put ? "put completions" : "get completions")) {
                free(ops);
                return false;
            }
        }
        if (ops[i]->status != FERRY_OK)
            ok = false;
    }
    free(ops);
    return ok;
}

bool ct_put_all(ct_suite_t *s, int peer, ferry_btl_reg_t *lreg, void *local, size_t len,
                uint64_t raddr, const uint8_t *key)
{
    return ct_rdma_all(s, true, peer, lreg, local, len, raddr, key);
}

bool ct_get_all(ct_suite_t *s, int peer, ferry_btl_reg_t *lreg, void *local, size_t len,
                uint64_t raddr, const uint8_t *key)
{
    return ct_rdma_all(s, false, peer, lreg, local, len, raddr, key);
}
