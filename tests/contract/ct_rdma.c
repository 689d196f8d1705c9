/*
 * RDMA cases: put and get of many sizes and offsets, accesses outside a
 * registration, and flush.
 *
 * Each rank exposes a window: one slot per writer rank (so peers never write
 * over each other) and a read-only-by-convention region that gets read from.
 * Slots start as a canary byte; after the case the target itself checks what
 * the last put left there and that nothing outside was touched.
 */
#include "contract.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CANARY 0xa5

static void *xmalloc(size_t n)
{
    void *p = malloc(n != 0 ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    return p;
}

static bool rdma_skip(ct_suite_t *s)
{
    if (ct_has(s, FERRY_BTL_FLAG_PUT) || ct_has(s, FERRY_BTL_FLAG_GET))
        return false;
    printf("skip %s: attr.flags have neither PUT nor GET\n", s->case_name);
    fflush(stdout);
    return true;
}

/* Registers [base, base + len) and checks what comes back. */
static ferry_btl_reg_t *reg_mem(ct_suite_t *s, void *base, size_t len, uint32_t access)
{
    ferry_btl_reg_t *reg = NULL;
    int rc = s->btl->ops->register_mem(s->btl, NULL, base, len, access, &reg);

    if (!CT_CHECK(s, rc == FERRY_OK && reg != NULL,
                  "register_mem(%zu bytes, access 0x%x) returned %d (%s)", len, access, rc,
                  ferry_strerror(rc)))
        return NULL;
    CT_CHECK(s, reg->base == base && reg->len == len && (reg->access & access) == access,
             "registration of %p+%zu (0x%x) describes %p+%zu (0x%x)", base, len, access,
             reg->base, reg->len, reg->access);
    return reg;
}

static void dereg_mem(ct_suite_t *s, ferry_btl_reg_t *reg)
{
    if (reg != NULL)
        CT_CHECK_RC(s, s->btl->ops->deregister_mem(s->btl, reg), FERRY_OK, "deregister_mem");
}

/* Checks bytes [from, to) of buf are all the canary. */
static void check_canary(ct_suite_t *s, const uint8_t *buf, size_t from, size_t to,
                         const char *what, int writer)
{
    for (size_t i = from; i < to; i++) {
        if (!CT_CHECK(s, buf[i] == CANARY,
                      "%s of writer rank %d: byte %zu is 0x%02x, outside every put (canary 0x%02x)",
                      what, writer, i, buf[i], CANARY))
            return;
    }
}

/* ---- put_get ------------------------------------------------------------------------ */

#define PG_NSIZES 8
static const size_t pg_sizes[PG_NSIZES] = {1, 2, 7, 8, 4096, 65536, (size_t)1 << 20,
                                           ((size_t)4 << 20) + 3};
static const size_t pg_offsets[PG_NSIZES] = {1, 3, 8, 4093, 64, 1, 7, 5};
#define PG_TAIL 64

static uint64_t pg_seed(int writer, int target, size_t size, size_t off)
{
    return ct_seed((uint64_t)writer, (uint64_t)target, size, off);
}

static uint64_t pg_read_seed(int owner)
{
    return ct_seed((uint64_t)owner, 0x52, 0, 0);
}

ct_result_t ct_case_put_get(ct_suite_t *s)
{
    bool put = ct_has(s, FERRY_BTL_FLAG_PUT), get = ct_has(s, FERRY_BTL_FLAG_GET);
    size_t extent = 0, slot, winlen, biggest = 0;
    uint8_t *win, *src, *dst;
    ferry_btl_reg_t *wreg, *lsrc, *ldst;

    if (rdma_skip(s))
        return CT_RESULT_SKIP;
    for (size_t k = 0; k < PG_NSIZES; k++) {
        if (pg_offsets[k] + pg_sizes[k] > extent)
            extent = pg_offsets[k] + pg_sizes[k];
        if (pg_sizes[k] > biggest)
            biggest = pg_sizes[k];
    }
    slot = extent + PG_TAIL;
    winlen = slot * ((size_t)s->size + 1);
    win = xmalloc(winlen);
    src = xmalloc(biggest);
    dst = xmalloc(biggest);
    memset(win, CANARY, slot * (size_t)s->size);
    ct_fill(win + slot * (size_t)s->size, slot, pg_read_seed(s->rank), 0);
    wreg = reg_mem(s, win, winlen, FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
    /* Local registrations for half the operations; the others let the
     * transport register on the fly. */
    lsrc = reg_mem(s, src, biggest, FERRY_ACCESS_LOCAL);
    ldst = reg_mem(s, dst, biggest, FERRY_ACCESS_LOCAL);

    ct_case_begin(s, ct_seq_rx, NULL);
    if (wreg == NULL || !ct_exchange_rkey(s, 0, wreg))
        goto finish;
    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        const ct_rkey_t *rk = &s->peer[r].rkey[0];
        uint64_t myslot = rk->addr + (uint64_t)s->rank * slot;
        uint64_t rread = rk->addr + (uint64_t)s->size * slot;

        for (size_t k = 0; k < PG_NSIZES && put; k++) {
            size_t size = pg_sizes[k], off = pg_offsets[k];
            uint64_t seed = pg_seed(s->rank, r, size, off);
            ct_fill(src, size, seed, 0);
            if (!ct_put_all(s, r, (k & 1) ? lsrc : NULL, src, size, myslot + off, rk->key)) {
                CT_CHECK(s, false, "put of %zu bytes at offset %zu to rank %d failed", size, off,
                         r);
                goto finish;
            }
            if (!get)
                continue;
            /* Read it back. */
            memset(dst, 0, size);
            if (!ct_get_all(s, r, (k & 1) ? NULL : ldst, dst, size, myslot + off, rk->key)) {
                CT_CHECK(s, false, "get of %zu bytes at offset %zu from rank %d failed", size,
                         off, r);
                goto finish;
            }
            size_t bad = ct_verify(dst, size, seed, 0);
            CT_CHECK(s, bad == SIZE_MAX,
                     "put then get of %zu bytes at offset %zu on rank %d: byte %zu reads 0x%02x, "
                     "put 0x%02x",
                     size, off, r, bad, bad != SIZE_MAX ? dst[bad] : 0,
                     bad != SIZE_MAX ? ct_pattern_byte(seed, bad) : 0);
        }
        for (size_t k = 0; k < PG_NSIZES && get; k++) {
            size_t size = pg_sizes[k], off = pg_offsets[PG_NSIZES - 1 - k];
            memset(dst, 0, size);
            if (!ct_get_all(s, r, (k & 1) ? ldst : NULL, dst, size, rread + off, rk->key)) {
                CT_CHECK(s, false, "get of %zu bytes at offset %zu from rank %d failed", size,
                         off, r);
                goto finish;
            }
            size_t bad = ct_verify(dst, size, pg_read_seed(r), off);
            CT_CHECK(s, bad == SIZE_MAX,
                     "get of %zu bytes at offset %zu from rank %d: byte %zu is 0x%02x, expected "
                     "0x%02x",
                     size, off, r, bad, bad != SIZE_MAX ? dst[bad] : 0,
                     bad != SIZE_MAX ? ct_pattern_byte(pg_read_seed(r), off + bad) : 0);
        }
    }
finish:
    ct_case_finish(s);
    /* The target's own view: every writer's last put is in its slot, the
     * bytes around the puts kept the canary, the read region is intact. */
    for (int w = 0; w < s->size && wreg != NULL; w++) {
        const uint8_t *sl = win + (size_t)w * slot;
        if (put && s->peer[w].reachable) {
            size_t size = pg_sizes[PG_NSIZES - 1], off = pg_offsets[PG_NSIZES - 1];
            size_t bad = ct_verify(sl + off, size, pg_seed(w, s->rank, size, off), 0);
            CT_CHECK(s, bad == SIZE_MAX,
                     "target: the last put of rank %d (%zu bytes at %zu) differs at byte %zu", w,
                     size, off, bad);
            check_canary(s, sl, 0, 1, "slot head", w);
            check_canary(s, sl, extent, slot, "slot tail", w);
        } else {
            check_canary(s, sl, 0, slot, "slot", w);
        }
    }
    {
        size_t bad = ct_verify(win + slot * (size_t)s->size, slot, pg_read_seed(s->rank), 0);
        CT_CHECK(s, bad == SIZE_MAX, "target: the region only read from changed at byte %zu", bad);
    }
    dereg_mem(s, ldst);
    dereg_mem(s, lsrc);
    dereg_mem(s, wreg);
    free(dst);
    free(src);
    free(win);
    return CT_RESULT_RUN;
}

/* ---- rdma_bounds ---------------------------------------------------------------------- */

#define RB_PAGE 4096
#define RB_PAGES 7
#define RB_LEN 16

enum { RB_A = 0, RB_B = 1, RB_C = 2 }; /* read-write, read-only, deregistered */

static uint64_t rb_seed(int owner)
{
    return ct_seed((uint64_t)owner, 0xb0, 0, 0);
}

typedef struct rb_attempt {
    const char *what;
    uint64_t addr;
    size_t len;
    const uint8_t *key;
    bool put_only;
} rb_attempt_t;

/* Starts one operation that must be refused and checks that it is. */
static void rb_try(ct_suite_t *s, int peer, bool is_put, ferry_btl_reg_t *lreg, uint8_t *local,
                   const rb_attempt_t *a)
{
    ct_op_t *op = NULL;
    int rc = FERRY_OK;
    int status;
    bool ok;

    if (is_put)
        ok = ct_put_start(s, peer, lreg, local, a->len, a->addr, a->len, a->key, false, false, &rc,
                          &op);
    else
        ok = ct_get_start(s, peer, lreg, local, a->len, a->addr, a->len, a->key, false, false, &rc,
                          &op);
    if (!ok)
        return;
    status = rc;
    if (op != NULL) {
        if (!ct_wait_op(s, op, "the completion of an out-of-bounds operation"))
            return;
        status = op->status;
    }
    CT_CHECK(s, status == FERRY_ERR_ACCESS,
             "%s %s (addr 0x%llx, %zu bytes) on rank %d: status %d (%s), expected "
             "FERRY_ERR_ACCESS",
             is_put ? "put" : "get", a->what, (unsigned long long)a->addr, a->len, peer, status,
             ferry_strerror(status));
}

ct_result_t ct_case_rdma_bounds(ct_suite_t *s)
{
    bool put = ct_has(s, FERRY_BTL_FLAG_PUT), get = ct_has(s, FERRY_BTL_FLAG_GET);
    size_t khs = s->attr->reg_handle_size;
    uint8_t *buf, *local;
    ferry_btl_reg_t *ra, *rb, *rc_reg, *lreg;
    uint8_t ckey[FERRY_BTL_KEY_MAX];

    if (rdma_skip(s))
        return CT_RESULT_SKIP;
    buf = aligned_alloc(RB_PAGE, RB_PAGE * RB_PAGES);
    local = xmalloc(RB_PAGE);
    if (buf == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    ct_fill(buf, RB_PAGE * RB_PAGES, rb_seed(s->rank), 0);
    ct_fill(local, RB_PAGE, ct_seed((uint64_t)s->rank, 0xb1, 0, 0), 0);
    /* Page 1 read-write, page 3 read-only, page 5 registered and released;
     * the pages between are canaries. */
    ra = reg_mem(s, buf + RB_PAGE, RB_PAGE, FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
    rb = reg_mem(s, buf + 3 * RB_PAGE, RB_PAGE, FERRY_ACCESS_REMOTE_READ);
    rc_reg = reg_mem(s, buf + 5 * RB_PAGE, RB_PAGE,
                     FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
    lreg = reg_mem(s, local, RB_PAGE, FERRY_ACCESS_LOCAL);
    memset(ckey, 0, sizeof(ckey));
    if (rc_reg != NULL) {
        memcpy(ckey, rc_reg->key, sizeof(ckey));
        dereg_mem(s, rc_reg);
    }

    ct_case_begin(s, ct_seq_rx, NULL);
    if (ra == NULL || rb == NULL || rc_reg == NULL)
        goto finish;
    if (!ct_exchange_rkey(s, RB_A, ra) || !ct_exchange_rkey(s, RB_B, rb) ||
        !ct_exchange_rkey_raw(s, RB_C, (uint64_t)(uintptr_t)(buf + 5 * RB_PAGE), RB_PAGE, ckey))
        goto finish;
    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        const ct_rkey_t *a = &s->peer[r].rkey[RB_A];
        const ct_rkey_t *b = &s->peer[r].rkey[RB_B];
        const ct_rkey_t *c = &s->peer[r].rkey[RB_C];
        uint8_t wrong[FERRY_BTL_KEY_MAX];
        bool have_wrong = false;
        rb_attempt_t tries[16];
        size_t n = 0;

        /* A key no registration of the target has: A's, changed in every
         * significant byte, and different from B's and C's. */
        if (khs > 0) {
            memcpy(wrong, a->key, sizeof(wrong));
            for (size_t j = 0; j < khs; j++)
                wrong[j] ^= 0x5a;
            have_wrong = memcmp(wrong, b->key, khs) != 0 && memcmp(wrong, c->key, khs) != 0;
        }
        tries[n++] = (rb_attempt_t){"one byte past the end", a->addr + a->len, 1, a->key, false};
        tries[n++] = (rb_attempt_t){"across the end", a->addr + a->len - 1, 2, a->key, false};
        tries[n++] = (rb_attempt_t){"one byte before the start", a->addr - 1, 1, a->key, false};
        tries[n++] = (rb_attempt_t){"across the start", a->addr - 8, RB_LEN, a->key, false};
        tries[n++] = (rb_attempt_t){"wrapping around UINT64_MAX", UINT64_MAX - 7, RB_LEN, a->key,
                                    false};
        tries[n++] = (rb_attempt_t){"at address 0", 0, RB_LEN, a->key, false};
        /* A transport whose fabric does not refuse released keys says so;
         * the access would write into released memory, or fail the peer. */
        if (!ct_has(s, FERRY_BTL_FLAG_NO_KEY_REVOKE))
            tries[n++] = (rb_attempt_t){"with a released registration's key", c->addr, RB_LEN,
                                        c->key, false};
        else if (i == 0)
            ct_note(s, "SKIPPED check \"with a released registration's key\": transport %s "
                       "reports FERRY_BTL_FLAG_NO_KEY_REVOKE (its fabric does not refuse "
                       "accesses through revoked memory keys; the transport logs why at info "
                       "level)",
                    s->attr->name);
        tries[n++] = (rb_attempt_t){"with another registration's key", a->addr, RB_LEN, b->key,
                                    false};
        tries[n++] = (rb_attempt_t){"to read-only memory", b->addr, RB_LEN, b->key, true};
        if (have_wrong)
            tries[n++] = (rb_attempt_t){"with a wrong key", a->addr, RB_LEN, wrong, false};
        for (size_t t = 0; t < n; t++) {
            if (put)
                rb_try(s, r, true, lreg, local, &tries[t]);
            if (get && !tries[t].put_only)
                rb_try(s, r, false, lreg, local, &tries[t]);
        }
        /* The endpoint still works after the refusals. Putting the bytes the
         * target already holds leaves it unchanged. */
        if (put) {
            ct_fill(local, RB_LEN, rb_seed(r), RB_PAGE);
            CT_CHECK(s, ct_put_all(s, r, lreg, local, RB_LEN, a->addr, a->key),
                     "a valid put to rank %d after the refused ones failed", r);
        }
        if (get) {
            memset(local, 0, RB_LEN);
            if (CT_CHECK(s, ct_get_all(s, r, lreg, local, RB_LEN, b->addr, b->key),
                         "a valid get from rank %d after the refused ones failed", r))
                CT_CHECK(s, ct_verify(local, RB_LEN, rb_seed(r), 3 * RB_PAGE) == SIZE_MAX,
                         "a valid get from rank %d's read-only region read wrong data", r);
        }
    }
finish:
    ct_case_finish(s);
    {
        size_t bad = ct_verify(buf, RB_PAGE * RB_PAGES, rb_seed(s->rank), 0);
        CT_CHECK(s, bad == SIZE_MAX,
                 "target memory changed by refused accesses: byte %zu (page %zu, offset %zu) is "
                 "0x%02x, was 0x%02x",
                 bad, bad / RB_PAGE, bad % RB_PAGE, bad != SIZE_MAX ? buf[bad] : 0,
                 bad != SIZE_MAX ? ct_pattern_byte(rb_seed(s->rank), bad) : 0);
    }
    dereg_mem(s, lreg);
    dereg_mem(s, rb);
    dereg_mem(s, ra);
    free(local);
    free(buf);
    return CT_RESULT_RUN;
}

/* ---- flush --------------------------------------------------------------------------- */

#define FL_BURST 200
#define FL_MAXPUT 8192

static size_t fl_size(size_t i)
{
    return (i * 131) % FL_MAXPUT + 1;
}

static size_t fl_burst_bytes(void)
{
    size_t total = 0;
    for (size_t i = 0; i < FL_BURST; i++)
        total += fl_size(i);
    return total;
}

static uint64_t fl_seed(int writer, int target, int burst)
{
    return ct_seed((uint64_t)writer, (uint64_t)target, 0xf1, (uint64_t)burst);
}

/* Starts a burst of puts (or gets) of local to rk's slot region at base,
 * without waiting; ops[] receives them. Returns how many started. */
static size_t fl_burst(ct_suite_t *s, int peer, bool is_put, uint8_t *local, uint64_t base,
                       const uint8_t *key, ct_op_t **ops)
{
    size_t off = 0, n = 0;

    for (size_t i = 0; i < FL_BURST; i++) {
        size_t len = fl_size(i);
        int rc;
        ct_op_t *op = NULL;
        bool ok = is_put ? ct_put_start(s, peer, NULL, local + off, len, base + off, len, key,
                                        (i & 1) != 0, true, &rc, &op)
                         : ct_get_start(s, peer, NULL, local + off, len, base + off, len, key,
                                        (i & 1) != 0, true, &rc, &op);
        if (!ok || !CT_CHECK_RC(s, rc, FERRY_OK, is_put ? "put" : "get"))
            break;
        ops[n++] = op;
        off += len;
    }
    return n;
}

static void fl_check_done(ct_suite_t *s, ct_op_t **ops, size_t n, const char *after, int peer)
{
    size_t pending = 0;

    for (size_t i = 0; i < n; i++) {
        if (!ops[i]->done)
            pending++;
    }
    CT_CHECK(s, pending == 0, "after %s (rank %d), %zu of %zu completion callbacks had not run",
             after, peer, pending, n);
}

ct_result_t ct_case_flush(ct_suite_t *s)
{
    bool put = ct_has(s, FERRY_BTL_FLAG_PUT), get = ct_has(s, FERRY_BTL_FLAG_GET);
    size_t bb = fl_burst_bytes();
    size_t slot = 2 * bb, winlen = slot * ((size_t)s->size + 1);
    uint8_t *win = NULL, **local = NULL;
    ferry_btl_reg_t *wreg = NULL;
    ct_op_t **ops = NULL;
    size_t nops = 0;
    int rc;

    if (!put && !get) {
        /* Nothing one-sided can be pending: flush must still answer. */
        ct_case_begin(s, ct_seq_rx, NULL);
        for (int i = 0; i < s->nreach; i++)
            CT_CHECK_RC(s, s->btl->ops->flush(s->btl, s->peer[s->reach[i]].ep), FERRY_OK,
                        "flush with nothing pending");
        CT_CHECK_RC(s, s->btl->ops->flush(s->btl, NULL), FERRY_OK, "flush(NULL)");
        ct_case_finish(s);
        return CT_RESULT_RUN;
    }
    win = xmalloc(winlen);
    memset(win, CANARY, slot * (size_t)s->size);
    ct_fill(win + slot * (size_t)s->size, slot, ct_seed((uint64_t)s->rank, 0xf2, 0, 0), 0);
    local = calloc((size_t)s->nreach, sizeof(*local));
    ops = calloc((size_t)s->nreach * FL_BURST, sizeof(*ops));
    if (local == NULL || ops == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < s->nreach; i++)
        local[i] = xmalloc(slot);
    wreg = reg_mem(s, win, winlen, FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);

    ct_case_begin(s, ct_seq_rx, NULL);
    if (wreg == NULL || !ct_exchange_rkey(s, 0, wreg))
        goto finish;
    if (put) {
        /* Burst 1: to one peer at a time, flushed by endpoint. */
        for (int i = 0; i < s->nreach; i++) {
            int r = s->reach[i];
            const ct_rkey_t *rk = &s->peer[r].rkey[0];
            ct_fill(local[i], bb, fl_seed(s->rank, r, 1), 0);
            nops = fl_burst(s, r, true, local[i], rk->addr + (uint64_t)s->rank * slot, rk->key, ops);
            rc = s->btl->ops->flush(s->btl, s->peer[r].ep);
            CT_CHECK_RC(s, rc, FERRY_OK, "flush of an endpoint after a burst of puts");
            fl_check_done(s, ops, nops, "flush(ep) of a burst of puts", r);
        }
        /* Burst 2: to every peer at once, flushed all together. */
        nops = 0;
        for (int i = 0; i < s->nreach; i++) {
            int r = s->reach[i];
            const ct_rkey_t *rk = &s->peer[r].rkey[0];
            ct_fill(local[i], bb, fl_seed(s->rank, r, 2), 0);
            nops += fl_burst(s, r, true, local[i], rk->addr + (uint64_t)s->rank * slot + bb,
                             rk->key, ops + nops);
        }
        rc = s->btl->ops->flush(s->btl, NULL);
        CT_CHECK_RC(s, rc, FERRY_OK, "flush(NULL) after bursts of puts to every peer");
        fl_check_done(s, ops, nops, "flush(NULL) of bursts of puts", -1);
    }
    if (get) {
        /* Burst 3: gets from each peer's read region. */
        for (int i = 0; i < s->nreach; i++) {
            int r = s->reach[i];
            const ct_rkey_t *rk = &s->peer[r].rkey[0];
            size_t bad;
            memset(local[i], 0, bb);
            nops = fl_burst(s, r, false, local[i], rk->addr + (uint64_t)s->size * slot, rk->key,
                            ops);
            rc = s->btl->ops->flush(s->btl, s->peer[r].ep);
            CT_CHECK_RC(s, rc, FERRY_OK, "flush of an endpoint after a burst of gets");
            fl_check_done(s, ops, nops, "flush(ep) of a burst of gets", r);
            if (nops == FL_BURST) {
                bad = ct_verify(local[i], bb, ct_seed((uint64_t)r, 0xf2, 0, 0), 0);
                CT_CHECK(s, bad == SIZE_MAX, "burst of gets from rank %d: byte %zu differs", r,
                         bad);
            }
        }
    }
finish:
    ct_case_finish(s);
    for (int w = 0; w < s->size && wreg != NULL; w++) {
        const uint8_t *sl = win + (size_t)w * slot;
        if (put && s->peer[w].reachable) {
            size_t bad1 = ct_verify(sl, bb, fl_seed(w, s->rank, 1), 0);
            size_t bad2 = ct_verify(sl + bb, bb, fl_seed(w, s->rank, 2), 0);
            CT_CHECK(s, bad1 == SIZE_MAX && bad2 == SIZE_MAX,
                     "target: bursts of puts from rank %d differ (first at %zu, second at %zu)", w,
                     bad1, bad2);
        } else {
            check_canary(s, sl, 0, slot, "slot", w);
        }
    }
    dereg_mem(s, wreg);
    for (int i = 0; i < s->nreach; i++)
        free(local[i]);
    free(local);
    free(ops);
    free(win);
    return CT_RESULT_RUN;
}
