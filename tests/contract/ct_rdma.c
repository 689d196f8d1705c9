/*
 * RDMA cases: put and get of many sizes and offsets, accesses outside a
 * registration, attacks through keys that should open nothing, and flush.
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
#include <sys/mman.h>

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
    if (s->btl->ops->rdma_direct != NULL) {
        /* The same through the direct path: refused, or left to put/get. */
        rc = s->btl->ops->rdma_direct(s->btl, s->peer[peer].ep, is_put, local, a->addr, a->key,
                                      a->len);
        CT_CHECK(s, rc < 0,
                 "direct %s %s (addr 0x%llx, %zu bytes) on rank %d returned %d, expected a "
                 "refusal or FERRY_ERR_NOT_SUPPORTED",
                 is_put ? "put" : "get", a->what, (unsigned long long)a->addr, a->len, peer, rc);
    }
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

/* ---- attacks: revoked, guessed and prepared keys ------------------------------------- */

/*
 * What a job peer might try with keys that should open nothing: a key kept
 * after the registration was released (deregister_mem, or mem_free of
 * memory from mem_alloc), a key made up from other keys (a real key with
 * some of its bits changed, or the next one it would expect the target to
 * hand out), and the key of a registration that prepare_src/prepare_dst
 * made for the target's own operation. Each must be refused with
 * FERRY_ERR_ACCESS (returned or in the completion), and must not move a
 * byte: the target checks its memory after the case, and a refused get must
 * not have written the initiator's buffer.
 */

#define AT_LEN 64
#define AT_PAGE 4096
#define AT_GET_FILL 0x3c

static uint64_t at_seed(int owner, int what)
{
    return ct_seed((uint64_t)owner, 0xa7, (uint64_t)what, 0);
}

/* One put (if the transport puts) and one get (if it gets) that must be
 * refused; a refused get must leave the local buffer alone. */
static void at_refused(ct_suite_t *s, int peer, ferry_btl_reg_t *lreg, uint8_t *local,
                       const char *what, uint64_t addr, const uint8_t *key)
{
    rb_attempt_t a = {what, addr, AT_LEN, key, false};
    if (ct_has(s, FERRY_BTL_FLAG_PUT))
        rb_try(s, peer, true, lreg, local, &a);
    if (ct_has(s, FERRY_BTL_FLAG_GET)) {
        memset(local, AT_GET_FILL, AT_LEN);
        rb_try(s, peer, false, lreg, local, &a);
        for (size_t i = 0; i < AT_LEN; i++) {
            if (!CT_CHECK(s, local[i] == AT_GET_FILL,
                          "a refused get %s from rank %d wrote byte %zu of the local buffer "
                          "(0x%02x)",
                          what, peer, i, local[i]))
                break;
        }
    }
}

/* The target's own check that refused accesses left buf as ct_fill made it. */
static void at_check_intact(ct_suite_t *s, const uint8_t *buf, size_t len, uint64_t seed,
                            const char *what)
{
    size_t bad = ct_verify(buf, len, seed, 0);
    CT_CHECK(s, bad == SIZE_MAX, "target: %s changed by refused accesses at byte %zu (0x%02x)",
             what, bad, bad != SIZE_MAX ? buf[bad] : 0);
}

/* A page-aligned buffer of n pages, filled with the stream of seed. */
static uint8_t *at_pages(size_t n, uint64_t seed)
{
    uint8_t *p = aligned_alloc(AT_PAGE, n * AT_PAGE);
    if (p == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    ct_fill(p, n * AT_PAGE, seed, 0);
    return p;
}

/* Waits until every rank has done what comes before (a case in two acts). */
static bool at_sync(ct_suite_t *s, const char *what)
{
    int rc = ferry_barrier(s->ctx);
    return CT_CHECK(s, rc == FERRY_OK, "ferry_barrier %s returned %d (%s)", what, rc,
                    ferry_strerror(rc));
}

/*
 * rdma_revoked. Each rank registers D (deregistered after its key went out)
 * and, where the transport allocates memory (FERRY_BTL_FLAG_MEM_ALLOC), F
 * from mem_alloc (freed with mem_free after its key went out); then it
 * registers D again and allocates G of F's size, so that a key that was
 * not revoked would find live memory where D and F were (transports reuse
 * slots and addresses). Every peer's put and get through D's and F's keys
 * must be refused, and D's and G's bytes stay as the target wrote them.
 */
ct_result_t ct_case_rdma_revoked(ct_suite_t *s)
{
    uint8_t *d = NULL, *local = NULL, *f = NULL, *g = NULL;
    ferry_btl_reg_t *dreg = NULL, *dreg2 = NULL, *freg = NULL, *greg = NULL, *lreg = NULL;
    bool alloc = ct_has(s, FERRY_BTL_FLAG_MEM_ALLOC);
    bool revokes = !ct_has(s, FERRY_BTL_FLAG_NO_KEY_REVOKE);
    uint8_t dkey[FERRY_BTL_KEY_MAX] = {0}, fkey[FERRY_BTL_KEY_MAX] = {0};
    int rc;

    if (rdma_skip(s))
        return CT_RESULT_SKIP;
    if (!revokes) {
        /* Only the revocation check is skipped, and the case with it. */
        printf("skip %s: transport %s reports FERRY_BTL_FLAG_NO_KEY_REVOKE: its fabric does "
               "not refuse accesses through released keys (the transport logs why at info "
               "level)\n",
               s->case_name, s->attr->name);
        fflush(stdout);
        return CT_RESULT_SKIP;
    }
    d = at_pages(1, at_seed(s->rank, 1));
    local = xmalloc(AT_LEN);
    memset(local, 0, AT_LEN);
    dreg = reg_mem(s, d, AT_PAGE, FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
    lreg = reg_mem(s, local, AT_LEN, FERRY_ACCESS_LOCAL);
    if (dreg != NULL)
        memcpy(dkey, dreg->key, sizeof(dkey));
    if (alloc) {
        void *addr = NULL;
        rc = s->btl->ops->mem_alloc(s->btl, AT_PAGE,
                                    FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE, &addr,
                                    &freg);
        if (CT_CHECK_RC(s, rc, FERRY_OK, "mem_alloc")) {
            f = addr;
            memcpy(fkey, freg->key, sizeof(fkey));
        }
    } else if (s->rank == 0) {
        ct_note(s, "transport %s has no mem_alloc: its keys are revoked by deregister_mem only",
                s->attr->name);
    }

    ct_case_begin(s, ct_seq_rx, NULL);
    if (dreg == NULL || lreg == NULL || (alloc && f == NULL))
        goto finish;
    if (!ct_exchange_rkey(s, 0, dreg) || (alloc && !ct_exchange_rkey(s, 1, freg)))
        goto finish;
    /* Act two: the keys are out; the target revokes them and puts live
     * memory where they pointed. */
    dereg_mem(s, dreg);
    dreg = NULL;
    dreg2 = reg_mem(s, d, AT_PAGE, FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
    if (alloc) {
        void *addr = NULL;
        CT_CHECK_RC(s, s->btl->ops->mem_free(s->btl, freg), FERRY_OK, "mem_free");
        freg = NULL;
        f = NULL;
        rc = s->btl->ops->mem_alloc(s->btl, AT_PAGE,
                                    FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE, &addr,
                                    &greg);
        if (CT_CHECK_RC(s, rc, FERRY_OK, "mem_alloc after mem_free")) {
            g = addr;
            ct_fill(g, AT_PAGE, at_seed(s->rank, 2), 0);
        }
    }
    if (!at_sync(s, "after the revocations"))
        goto finish;
    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        const ct_rkey_t *dk = &s->peer[r].rkey[0];
        at_refused(s, r, lreg, local, "through a deregistered registration's key", dk->addr,
                   dk->key);
        if (alloc) {
            const ct_rkey_t *fk = &s->peer[r].rkey[1];
            at_refused(s, r, lreg, local, "through the key of memory freed with mem_free",
                       fk->addr, fk->key);
        }
    }
finish:
    ct_case_finish(s);
    at_check_intact(s, d, AT_PAGE, at_seed(s->rank, 1), "the memory re-registered after "
                    "deregister_mem");
    if (g != NULL)
        at_check_intact(s, g, AT_PAGE, at_seed(s->rank, 2), "memory from mem_alloc after "
                        "mem_free");
    if (greg != NULL)
        CT_CHECK_RC(s, s->btl->ops->mem_free(s->btl, greg), FERRY_OK, "mem_free");
    if (freg != NULL)
        CT_CHECK_RC(s, s->btl->ops->mem_free(s->btl, freg), FERRY_OK, "mem_free");
    dereg_mem(s, dreg2);
    dereg_mem(s, dreg);
    dereg_mem(s, lreg);
    free(local);
    free(d);
    return CT_RESULT_RUN;
}

/*
 * rdma_revoke_inflight. Revocation while accesses are on their way: every
 * rank starts puts into the window W and gets from the region G of itself
 * and the next two ranks, and at once deregisters its own W and G, while
 * theirs are in flight to it, and unmaps G. Each access then either
 * happened inside the live registration or is refused: a put that
 * completes FERRY_OK must be wholly in W (the target reports which slots
 * hold their writer's bytes), a get that completes FERRY_OK must have read
 * G's bytes, W must hold nothing but the canary and writers' bytes, and the
 * target must not crash reading memory it unmapped. Any other status than
 * FERRY_OK and FERRY_ERR_ACCESS fails.
 */
#define IF_SLOTS 16
#define IF_SLOT 8192
#define IF_TARGETS 3 /* this rank and the next two */

static uint64_t if_seed(int writer, int target, int slot)
{
    return ct_seed((uint64_t)writer, (uint64_t)target, 0x1f, (uint64_t)slot);
}

/* Slot k of W written by the rank at distance d before its target. */
static uint8_t *if_slot(uint8_t *w, int d, int k)
{
    return w + ((size_t)d * IF_SLOTS + (size_t)k) * IF_SLOT;
}

ct_result_t ct_case_rdma_revoke_inflight(ct_suite_t *s)
{
    bool put = ct_has(s, FERRY_BTL_FLAG_PUT), get = ct_has(s, FERRY_BTL_FLAG_GET);
    const size_t wlen = (size_t)IF_TARGETS * IF_SLOTS * IF_SLOT, glen = IF_SLOTS * IF_SLOT;
    const size_t nops = (size_t)IF_TARGETS * IF_SLOTS;
    uint8_t *w, *g, *src, *dst;
    ferry_btl_reg_t *wreg, *greg, *lsrc, *ldst;
    ct_op_t **puts, **gets;
    int targets[IF_TARGETS];
    int ntargets = 0;
    size_t refused_at_start = 0;

    if (rdma_skip(s))
        return CT_RESULT_SKIP;
    if (ct_has(s, FERRY_BTL_FLAG_NO_KEY_REVOKE)) {
        printf("skip %s: transport %s reports FERRY_BTL_FLAG_NO_KEY_REVOKE\n", s->case_name,
               s->attr->name);
        fflush(stdout);
        return CT_RESULT_SKIP;
    }
    w = at_pages(wlen / AT_PAGE, 0);
    memset(w, CANARY, wlen);
    g = mmap(NULL, glen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g == MAP_FAILED) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    ct_fill(g, glen, at_seed(s->rank, 6), 0);
    src = xmalloc(nops * IF_SLOT);
    dst = xmalloc(nops * IF_SLOT);
    puts = calloc(nops, sizeof(*puts));
    gets = calloc(nops, sizeof(*gets));
    if (puts == NULL || gets == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    for (int d = 0; d < IF_TARGETS; d++) {
        int t = (s->rank + d) % s->size;
        bool dup = false;
        for (int j = 0; j < ntargets; j++)
            dup = dup || targets[j] == t;
        if (!dup && s->peer[t].reachable)
            targets[ntargets++] = t;
    }
    for (int j = 0; j < ntargets; j++)
        for (int k = 0; k < IF_SLOTS; k++)
            ct_fill(src + ((size_t)j * IF_SLOTS + (size_t)k) * IF_SLOT, IF_SLOT,
                    if_seed(s->rank, targets[j], k), 0);
    memset(dst, 0, nops * IF_SLOT);
    wreg = reg_mem(s, w, wlen, FERRY_ACCESS_REMOTE_WRITE);
    greg = reg_mem(s, g, glen, FERRY_ACCESS_REMOTE_READ);
    lsrc = reg_mem(s, src, nops * IF_SLOT, FERRY_ACCESS_LOCAL);
    ldst = reg_mem(s, dst, nops * IF_SLOT, FERRY_ACCESS_LOCAL);

    ct_case_begin(s, ct_seq_rx, NULL);
    if (wreg == NULL || greg == NULL || lsrc == NULL || ldst == NULL)
        goto finish;
    if (!ct_exchange_rkey(s, 0, wreg) || !ct_exchange_rkey(s, 1, greg) ||
        !at_sync(s, "before the accesses"))
        goto finish;
    for (int k = 0; k < IF_SLOTS; k++) {
        for (int j = 0; j < ntargets; j++) {
            int t = targets[j], d = (t - s->rank + s->size) % s->size;
            size_t i = (size_t)j * IF_SLOTS + (size_t)k;
            const ct_rkey_t *wk = &s->peer[t].rkey[0];
            const ct_rkey_t *gk = &s->peer[t].rkey[1];
            int rc = FERRY_OK;
            uint64_t waddr = wk->addr + ((uint64_t)d * IF_SLOTS + (uint64_t)k) * IF_SLOT;
            if (put && !ct_put_start(s, t, lsrc, src + i * IF_SLOT, IF_SLOT, waddr, IF_SLOT,
                                     wk->key, false, false, &rc, &puts[i]))
                goto finish;
            CT_CHECK(s, rc == FERRY_OK || rc == FERRY_ERR_ACCESS,
                     "a put to rank %d returned %d (%s)", t, rc, ferry_strerror(rc));
            refused_at_start += put && rc != FERRY_OK;
            if (get && !ct_get_start(s, t, ldst, dst + i * IF_SLOT, IF_SLOT,
                                     gk->addr + (uint64_t)k * IF_SLOT, IF_SLOT, gk->key, false,
                                     false, &rc, &gets[i]))
                goto finish;
            CT_CHECK(s, rc == FERRY_OK || rc == FERRY_ERR_ACCESS,
                     "a get from rank %d returned %d (%s)", t, rc, ferry_strerror(rc));
            refused_at_start += get && rc != FERRY_OK;
        }
        if (k == IF_SLOTS / 4) {
            /* The peers' accesses to this rank are on their way now. */
            dereg_mem(s, wreg);
            dereg_mem(s, greg);
            wreg = greg = NULL;
            munmap(g, glen);
            g = NULL;
        }
    }
    ct_wait_ops(s, "the accesses of a revocation in flight");
    {
        /* How much of the race ran: accesses before and after each revocation. */
        size_t ok[2] = {0, 0}, refused[2] = {0, 0};
        for (size_t i = 0; i < (size_t)ntargets * IF_SLOTS; i++) {
            ct_op_t *ops[2] = {puts[i], gets[i]};
            for (int x = 0; x < 2; x++) {
                if (ops[x] != NULL && ops[x]->status == FERRY_OK)
                    ok[x]++;
                else if (ops[x] != NULL)
                    refused[x]++;
            }
        }
        if (s->rank == 0)
            ct_note(s, "puts: %zu done, %zu refused; gets: %zu done, %zu refused; %zu refused "
                       "when started",
                    ok[0], refused[0], ok[1], refused[1], refused_at_start);
    }
    for (size_t i = 0; i < (size_t)ntargets * IF_SLOTS; i++) {
        int t = targets[i / IF_SLOTS];
        int k = (int)(i % IF_SLOTS);
        if (gets[i] != NULL) {
            int st = gets[i]->status;
            CT_CHECK(s, st == FERRY_OK || st == FERRY_ERR_ACCESS,
                     "a get from rank %d as it revoked completed with %d (%s)", t, st,
                     ferry_strerror(st));
            if (st == FERRY_OK)
                CT_CHECK(s, ct_verify(dst + i * IF_SLOT, IF_SLOT, at_seed(t, 6),
                                      (uint64_t)k * IF_SLOT) == SIZE_MAX,
                         "a get from rank %d that completed FERRY_OK as it revoked read wrong "
                         "data (slot %d)",
                         t, k);
        }
        if (puts[i] != NULL)
            CT_CHECK(s, puts[i]->status == FERRY_OK || puts[i]->status == FERRY_ERR_ACCESS,
                     "a put to rank %d as it revoked completed with %d (%s)", t,
                     puts[i]->status, ferry_strerror(puts[i]->status));
    }
    /* The target's view of W, slot by slot, for each writer: the bits of
     * the slots that hold all of their writer's bytes, which every writer
     * then compares with what its puts were told. */
    if (put) {
        uint64_t landed = 0;
        for (int d = 0; d < IF_TARGETS; d++) {
            int writer = (s->rank - d + s->size) % s->size;
            if (d > 0 && writer == s->rank)
                break;
            for (int k = 0; k < IF_SLOTS; k++) {
                const uint8_t *sl = if_slot(w, d, k);
                uint64_t seed = if_seed(writer, s->rank, k);
                size_t whole = 0;
                for (size_t b = 0; b < IF_SLOT; b++) {
                    uint8_t want = ct_pattern_byte(seed, b);
                    if (sl[b] == want) {
                        whole++;
                    } else if (!CT_CHECK(s, sl[b] == CANARY,
                                         "target: slot %d of writer rank %d holds a byte "
                                         "neither the canary nor the writer's (byte %zu: "
                                         "0x%02x)",
                                         k, writer, b, sl[b])) {
                        break;
                    }
                }
                if (whole == IF_SLOT)
                    landed |= 1ull << (d * IF_SLOTS + k);
            }
        }
        uint8_t nokey[FERRY_BTL_KEY_MAX] = {0};
        if (ct_exchange_rkey_raw(s, 2, landed, 0, nokey)) {
            for (size_t i = 0; i < (size_t)ntargets * IF_SLOTS; i++) {
                int t = targets[i / IF_SLOTS], k = (int)(i % IF_SLOTS);
                int d = (t - s->rank + s->size) % s->size;
                bool there = (s->peer[t].rkey[2].addr >> (d * IF_SLOTS + k)) & 1u;
                if (puts[i] != NULL && puts[i]->status == FERRY_OK)
                    CT_CHECK(s, there,
                             "a put to rank %d (slot %d) completed FERRY_OK as it revoked, "
                             "but its bytes are not all there: lost",
                             t, k);
            }
        }
    }
finish:
    ct_case_finish(s);
    dereg_mem(s, ldst);
    dereg_mem(s, lsrc);
    dereg_mem(s, greg);
    dereg_mem(s, wreg);
    if (g != NULL)
        munmap(g, glen);
    free(gets);
    free(puts);
    free(dst);
    free(src);
    free(w);
    return CT_RESULT_RUN;
}

/* The most keys at_guesses makes of one. */
#define AT_STEPS 8
#define AT_MAX_GUESSES (AT_STEPS * FERRY_BTL_KEY_MAX / 4 + 2 * FERRY_BTL_KEY_MAX)

enum { AT_COUNT = 1u << 0, AT_FLIP = 1u << 1 };

/* Keys a peer would try given key: with AT_COUNT each little-endian 32-bit
 * word of it 1 to AT_STEPS higher (a counter or a generation: what the
 * target hands out next), with AT_FLIP each byte with its low or its high
 * bit flipped (every bit of a key must count). */
static size_t at_guesses(const uint8_t *key, size_t khs, unsigned kinds,
                         uint8_t (*out)[FERRY_BTL_KEY_MAX])
{
    size_t n = 0;
    for (size_t w = 0; (kinds & AT_COUNT) && w + 4 <= khs; w += 4) {
        for (uint32_t step = 1; step <= AT_STEPS; step++) {
            uint32_t v;
            memcpy(out[n], key, FERRY_BTL_KEY_MAX);
            memcpy(&v, key + w, sizeof(v));
            v += step;
            memcpy(out[n] + w, &v, sizeof(v));
            n++;
        }
    }
    for (size_t b = 0; (kinds & AT_FLIP) && b < khs; b++) {
        memcpy(out[n], key, FERRY_BTL_KEY_MAX);
        out[n][b] ^= 0x01;
        n++;
        memcpy(out[n], key, FERRY_BTL_KEY_MAX);
        out[n][b] ^= 0x80;
        n++;
    }
    return n;
}

/* Tries every guess at_guesses makes of key (kinds) at addr on peer. */
static void at_try_guesses(ct_suite_t *s, int peer, ferry_btl_reg_t *lreg, uint8_t *local,
                           uint8_t (*guess)[FERRY_BTL_KEY_MAX], const uint8_t *key,
                           unsigned kinds, uint64_t addr, const char *from)
{
    size_t n = at_guesses(key, s->attr->reg_handle_size, kinds, guess);
    char what[128];
    for (size_t k = 0; k < n; k++) {
        snprintf(what, sizeof(what), "with key guess %zu made from %s", k, from);
        at_refused(s, peer, lreg, local, what, addr, guess[k]);
    }
}

/*
 * rdma_guess. Each rank registers A and R and sends both keys; deregisters
 * R and registers N, then M, over the same memory (what a target does all
 * the time: a slot is reused, a counter moves on), and sends only their
 * address. A peer that knows A's and R's keys tries every key at_guesses
 * makes of them against N and M, and of A against A: none may open
 * anything. A transport whose keys carry random bits drawn per registration
 * passes; one whose keys are a slot and a counter does not.
 */
ct_result_t ct_case_rdma_guess(ct_suite_t *s)
{
    size_t khs = s->attr->reg_handle_size;
    uint8_t *a = NULL, *m = NULL, *local = NULL;
    ferry_btl_reg_t *areg = NULL, *rreg = NULL, *nreg = NULL, *mreg = NULL, *lreg = NULL;
    uint8_t (*guess)[FERRY_BTL_KEY_MAX] = NULL;
    const uint32_t rw = FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE;

    if (rdma_skip(s))
        return CT_RESULT_SKIP;
    if (khs == 0) {
        printf("skip %s: transport %s has keys of 0 bytes\n", s->case_name, s->attr->name);
        fflush(stdout);
        return CT_RESULT_SKIP;
    }
    /* A fabric that does not refuse released keys checks no key ferry made
     * up either: its keys are its own, and the transport's fields in them
     * (range, rights) are the initiator's check only. */
    if (ct_has(s, FERRY_BTL_FLAG_NO_KEY_REVOKE)) {
        printf("skip %s: transport %s reports FERRY_BTL_FLAG_NO_KEY_REVOKE: its fabric checks "
               "keys by its own rules, not ferry's\n",
               s->case_name, s->attr->name);
        fflush(stdout);
        return CT_RESULT_SKIP;
    }
    a = at_pages(1, at_seed(s->rank, 3));
    m = at_pages(1, at_seed(s->rank, 4));
    local = xmalloc(AT_LEN);
    memset(local, 0, AT_LEN);
    guess = calloc(AT_MAX_GUESSES, sizeof(*guess));
    if (guess == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    areg = reg_mem(s, a, AT_PAGE, rw);
    rreg = reg_mem(s, m, AT_PAGE, rw);
    lreg = reg_mem(s, local, AT_LEN, FERRY_ACCESS_LOCAL);

    ct_case_begin(s, ct_seq_rx, NULL);
    if (areg == NULL || rreg == NULL || lreg == NULL)
        goto finish;
    if (!ct_exchange_rkey(s, 0, areg) || !ct_exchange_rkey(s, 1, rreg))
        goto finish;
    dereg_mem(s, rreg);
    rreg = NULL;
    nreg = reg_mem(s, m, AT_PAGE, rw);
    if (nreg != NULL) {
        dereg_mem(s, nreg);
        nreg = NULL;
    }
    mreg = reg_mem(s, m, AT_PAGE, rw);
    nreg = reg_mem(s, m, AT_PAGE, rw);
    if (mreg == NULL || nreg == NULL || !at_sync(s, "after the new registrations"))
        goto finish;
    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        const ct_rkey_t *ak = &s->peer[r].rkey[0];
        const ct_rkey_t *rk = &s->peer[r].rkey[1];
        /* Three targets each (itself, the next two ranks) are plenty to
         * show it, and keep sixteen ranks quick. */
        if ((r - s->rank + s->size) % s->size > 2)
            continue;
        at_try_guesses(s, r, lreg, local, guess, rk->key, AT_COUNT | AT_FLIP, rk->addr,
                       "a released key, at memory registered since");
        at_try_guesses(s, r, lreg, local, guess, ak->key, AT_FLIP, ak->addr,
                       "a live key, at its memory");
        at_try_guesses(s, r, lreg, local, guess, ak->key, AT_COUNT, rk->addr,
                       "a live key, at memory registered since");
        /* The real key still works: the guesses were refused for what they
         * were, not because the endpoint broke. */
        if (ct_has(s, FERRY_BTL_FLAG_GET)) {
            CT_CHECK(s, ct_get_all(s, r, lreg, local, AT_LEN, ak->addr, ak->key),
                     "a get from rank %d with its real key after the guesses failed", r);
            CT_CHECK(s, ct_verify(local, AT_LEN, at_seed(r, 3), 0) == SIZE_MAX,
                     "a get from rank %d with its real key read wrong data", r);
        }
    }
finish:
    ct_case_finish(s);
    at_check_intact(s, a, AT_PAGE, at_seed(s->rank, 3), "a live registration");
    at_check_intact(s, m, AT_PAGE, at_seed(s->rank, 4), "memory registered anew");
    dereg_mem(s, nreg);
    dereg_mem(s, mreg);
    dereg_mem(s, rreg);
    dereg_mem(s, areg);
    dereg_mem(s, lreg);
    free(guess);
    free(local);
    free(m);
    free(a);
    return CT_RESULT_RUN;
}

/*
 * rdma_prepared. Each rank has prepare_src and prepare_dst (RDMA, no
 * registration given) describe buffers P and Q in place, so the transport
 * registers them for its own use, and sends the keys the descriptors carry
 * to every peer: gets and puts through them must be refused while the
 * descriptors live, and again after they are freed, when a registration
 * cache keeps the registrations for the next operation (leave pinned).
 */
ct_result_t ct_case_rdma_prepared(ct_suite_t *s)
{
    uint8_t *pq = NULL, *local = NULL;
    ferry_btl_reg_t *lreg = NULL;
    ferry_btl_desc_t *src = NULL, *dst = NULL;
    ferry_convertor_t conv;
    size_t sz;
    int rc;

    if (rdma_skip(s))
        return CT_RESULT_SKIP;
    pq = at_pages(2, at_seed(s->rank, 5));
    local = xmalloc(AT_LEN);
    memset(local, 0, AT_LEN);
    lreg = reg_mem(s, local, AT_LEN, FERRY_ACCESS_LOCAL);
    sz = AT_PAGE;
    ferry_convertor_init_contig(&conv, pq, AT_PAGE);
    rc = s->btl->ops->prepare_src(s->btl, s->peer[s->reach[0]].ep, NULL, &conv, 0, &sz,
                                  FERRY_BTL_PREP_RDMA, &src);
    if (CT_CHECK_RC(s, rc, FERRY_OK, "prepare_src(RDMA) of user memory"))
        s->des_alloc++;
    else
        src = NULL;
    sz = AT_PAGE;
    ferry_convertor_init_contig(&conv, pq + AT_PAGE, AT_PAGE);
    rc = s->btl->ops->prepare_dst(s->btl, s->peer[s->reach[0]].ep, NULL, &conv, 0, &sz,
                                  FERRY_BTL_PREP_RDMA, &dst);
    if (CT_CHECK_RC(s, rc, FERRY_OK, "prepare_dst(RDMA) of user memory"))
        s->des_alloc++;
    else
        dst = NULL;

    ct_case_begin(s, ct_seq_rx, NULL);
    if (src == NULL || dst == NULL || lreg == NULL)
        goto finish;
    if (!ct_exchange_rkey_raw(s, 0, src->src[0].addr, src->src[0].len, src->src[0].key) ||
        !ct_exchange_rkey_raw(s, 1, dst->dst[0].addr, dst->dst[0].len, dst->dst[0].key))
        goto finish;
    for (int act = 0; act < 2; act++) {
        if (act == 1) {
            /* Freed: the operation is over, its registration may live on. */
            ct_free_des(s, src);
            ct_free_des(s, dst);
            src = dst = NULL;
            if (!at_sync(s, "after freeing the prepared descriptors"))
                break;
        }
        for (int i = 0; i < s->nreach; i++) {
            int r = s->reach[i];
            const ct_rkey_t *pk = &s->peer[r].rkey[0];
            const ct_rkey_t *qk = &s->peer[r].rkey[1];
            at_refused(s, r, lreg, local,
                       act == 0 ? "through the key of a prepare_src descriptor"
                                : "through the key of a freed prepare_src descriptor",
                       pk->addr, pk->key);
            at_refused(s, r, lreg, local,
                       act == 0 ? "through the key of a prepare_dst descriptor"
                                : "through the key of a freed prepare_dst descriptor",
                       qk->addr, qk->key);
        }
    }
finish:
    ct_case_finish(s);
    if (src != NULL)
        ct_free_des(s, src);
    if (dst != NULL)
        ct_free_des(s, dst);
    at_check_intact(s, pq, 2 * AT_PAGE, at_seed(s->rank, 5),
                    "memory prepare_src and prepare_dst described");
    dereg_mem(s, lreg);
    free(local);
    free(pq);
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

/* ---- rdma_direct ------------------------------------------------------------------------ */

/*
 * rdma_direct, for a transport with the optional rdma_direct op. Each rank
 * allocates H (mem_alloc, read-write: one 256-byte slot per writer rank,
 * then a slot to read from, then a canary slot) and R (mem_alloc,
 * read-only), and registers O (ordinary memory, read-write). Through every
 * peer's keys:
 * - puts of 1 to 256 bytes into this rank's slot of H and gets from its
 *   read slot must complete inside the call (FERRY_BTL_DONE: a module that
 *   allocates memory and has the op does its peers' allocations so), with
 *   the data checked at both ends;
 * - a range past H's end or before its start, a put into R, a NULL
 *   buffer, a size above max_rdma_size must be refused (an error; never
 *   DONE) and move nothing: the target checks its canary and R afterwards;
 * - a key with one byte changed may be refused or not (a module may not see
 *   every bit of its keys on memory its peers map: sm's heaps, open to the
 *   user's processes anyway), but must open nothing the target has not
 *   opened to this rank: the puts through such keys write this rank's slot
 *   with what it holds already, and the target's checks above see any
 *   other byte that moved;
 * - O may be done directly or not (FERRY_ERR_NOT_SUPPORTED); done, its
 *   bytes must be there.
 * Keys released before use are tried by rdma_revoked and rdma_guess, whose
 * refused attempts go through rdma_direct too (rb_try).
 */
#define RD_SLOT 256
#define RD_PAGE 4096

static uint64_t rd_seed(int writer, int target, int what)
{
    return ct_seed((uint64_t)writer, (uint64_t)target, 0xd1, (uint64_t)what);
}

/* One direct operation that must be refused (where a module may leave the
 * memory to put/get, may_decline, FERRY_ERR_NOT_SUPPORTED will do). */
static void rd_refused(ct_suite_t *s, int peer, bool may_decline, bool put, void *local,
                       uint64_t addr, const uint8_t *key, size_t len, const char *what)
{
    int rc = s->btl->ops->rdma_direct(s->btl, s->peer[peer].ep, put, local, addr, key, len);
    CT_CHECK(s, rc < 0 && (rc != FERRY_ERR_NOT_SUPPORTED || may_decline),
             "direct %s %s on rank %d: returned %d (%s), expected a refusal", put ? "put" : "get",
             what, peer, rc, ferry_strerror(rc));
}

ct_result_t ct_case_rdma_direct(ct_suite_t *s)
{
    static const size_t sizes[] = {1, 7, 8, 63, 64, 200, RD_SLOT};
    ferry_btl_reg_t *hreg = NULL, *rreg = NULL, *oreg = NULL;
    uint8_t *h = NULL, *r = NULL, *o = NULL, *local = NULL;
    size_t hlen = RD_SLOT * ((size_t)s->size + 2);
    size_t read_off = RD_SLOT * (size_t)s->size, canary_off = read_off + RD_SLOT;
    int rc;

    if (s->btl->ops->rdma_direct == NULL) {
        printf("skip %s: transport %s has no rdma_direct op\n", s->case_name, s->attr->name);
        fflush(stdout);
        return CT_RESULT_SKIP;
    }
    /* Without mem_alloc, H and R are ordinary registered memory, which a
     * module may leave to put/get. */
    bool alloc = ct_has(s, FERRY_BTL_FLAG_MEM_ALLOC);
    if (alloc) {
        void *addr = NULL;
        rc = s->btl->ops->mem_alloc(s->btl, hlen,
                                    FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE, &addr,
                                    &hreg);
        if (CT_CHECK_RC(s, rc, FERRY_OK, "mem_alloc of H"))
            h = addr;
        rc = s->btl->ops->mem_alloc(s->btl, RD_PAGE, FERRY_ACCESS_REMOTE_READ, &addr, &rreg);
        if (CT_CHECK_RC(s, rc, FERRY_OK, "mem_alloc of R"))
            r = addr;
    } else {
        h = at_pages((hlen + RD_PAGE - 1) / RD_PAGE, 0);
        r = at_pages(1, 0);
        hreg = reg_mem(s, h, hlen, FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
        rreg = reg_mem(s, r, RD_PAGE, FERRY_ACCESS_REMOTE_READ);
    }
    o = at_pages(1, rd_seed(s->rank, s->rank, 3));
    oreg = reg_mem(s, o, RD_PAGE, FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
    local = xmalloc(RD_SLOT);
    if (h != NULL) {
        memset(h, CANARY, hlen);
        ct_fill(h + read_off, RD_SLOT, rd_seed(s->rank, s->rank, 1), 0);
    }
    if (r != NULL)
        ct_fill(r, RD_PAGE, rd_seed(s->rank, s->rank, 2), 0);

    ct_case_begin(s, ct_seq_rx, NULL);
    if (h == NULL || r == NULL || hreg == NULL || rreg == NULL || oreg == NULL)
        goto finish;
    if (!ct_exchange_rkey(s, 0, hreg) || !ct_exchange_rkey(s, 1, rreg) ||
        !ct_exchange_rkey(s, 2, oreg))
        goto finish;
    for (int i = 0; i < s->nreach; i++) {
        int p = s->reach[i];
        const ct_rkey_t *hk = &s->peer[p].rkey[0], *rk = &s->peer[p].rkey[1],
                        *ok = &s->peer[p].rkey[2];
        /* A peer's mem_alloc memory must be done here; the rest may not. */
        bool self = p == s->rank || !alloc;
        uint64_t myslot = hk->addr + (uint64_t)s->rank * RD_SLOT;
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            size_t n = sizes[k];
            ct_fill(local, n, rd_seed(s->rank, p, 0), 0);
            rc = s->btl->ops->rdma_direct(s->btl, s->peer[p].ep, true, local, myslot, hk->key, n);
            if (!CT_CHECK(s, rc == FERRY_BTL_DONE || (self && rc == FERRY_ERR_NOT_SUPPORTED),
                          "direct put of %zu bytes into rank %d's mem_alloc memory returned %d "
                          "(%s), expected FERRY_BTL_DONE",
                          n, p, rc, ferry_strerror(rc)))
                break;
            memset(local, 0, RD_SLOT);
            rc = s->btl->ops->rdma_direct(s->btl, s->peer[p].ep, false, local,
                                          hk->addr + read_off, hk->key, n);
            if (!CT_CHECK(s, rc == FERRY_BTL_DONE || (self && rc == FERRY_ERR_NOT_SUPPORTED),
                          "direct get of %zu bytes from rank %d's mem_alloc memory returned %d "
                          "(%s), expected FERRY_BTL_DONE",
                          n, p, rc, ferry_strerror(rc)))
                break;
            if (rc == FERRY_BTL_DONE) {
                size_t bad = ct_verify(local, n, rd_seed(p, p, 1), 0);
                CT_CHECK(s, bad == SIZE_MAX, "direct get of %zu bytes from rank %d: byte %zu "
                         "differs", n, p, bad);
            }
        }
        /* Read-only memory reads, and only reads. */
        rc = s->btl->ops->rdma_direct(s->btl, s->peer[p].ep, false, local, rk->addr + 100,
                                      rk->key, 64);
        if (CT_CHECK(s, rc == FERRY_BTL_DONE || (self && rc == FERRY_ERR_NOT_SUPPORTED),
                     "direct get from rank %d's read-only mem_alloc memory returned %d (%s)", p,
                     rc, ferry_strerror(rc)) &&
            rc == FERRY_BTL_DONE) {
            size_t bad = ct_verify(local, 64, rd_seed(p, p, 2), 100);
            CT_CHECK(s, bad == SIZE_MAX, "direct get from rank %d's R: byte %zu differs", p, bad);
        }
        ct_fill(local, RD_SLOT, rd_seed(s->rank, p, 9), 0);
        rd_refused(s, p, self, true, local, rk->addr, rk->key, 8, "into read-only memory");
        /* H's registration may be longer than asked (whole pages): its
         * end is the one the target sent. Each refusal comes right after a
         * good access through the same key, so that a module that keeps
         * what it resolved last checks the range again, not only once. */
        struct {
            bool put;
            bool null_buf;
            uint64_t addr;
            size_t len;
            const char *what;
        } bad[] = {
            {true, false, hk->addr + hk->len - 4, 8, "across the end"},
            {false, false, hk->addr + hk->len, 1, "just past the end"},
            {false, false, hk->addr + hk->len - 1, 2, "one byte across the end"},
            {true, false, hk->addr - 8, 16, "from before the start"},
            {false, false, hk->addr - 1, 1, "the byte before the start"},
            {true, false, hk->addr + canary_off, (size_t)1 << 62, "of an absurd size"},
            {false, false, hk->addr + canary_off, SIZE_MAX, "of SIZE_MAX bytes"},
            {true, true, myslot, 8, "from a NULL buffer"},
            {true, false, hk->addr, s->attr->max_rdma_size + 1, "above max_rdma_size"},
        };
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            if (bad[k].len == 0) /* max_rdma_size + 1 wrapped: no size is above it */
                continue;
            (void)s->btl->ops->rdma_direct(s->btl, s->peer[p].ep, false, local,
                                           hk->addr + read_off, hk->key, 1);
            rd_refused(s, p, self, bad[k].put, bad[k].null_buf ? NULL : local, bad[k].addr, hk->key,
                       bad[k].len, bad[k].what);
        }
        uint8_t bent[FERRY_BTL_KEY_MAX];
        ct_fill(local, RD_SLOT, rd_seed(s->rank, p, 0), 0);
        for (size_t b = 0; b < s->attr->reg_handle_size && b < sizeof(bent); b++) {
            for (int flip = 0; flip < 2; flip++) {
                memcpy(bent, hk->key, sizeof(bent));
                bent[b] ^= flip ? 0x80 : 0x01;
                rc = s->btl->ops->rdma_direct(s->btl, s->peer[p].ep, true, local, myslot, bent,
                                              RD_SLOT);
                CT_CHECK(s, rc == FERRY_BTL_DONE || rc < 0,
                         "direct put through rank %d's key with byte %zu changed returned %d",
                         p, b, rc);
            }
        }
        /* Ordinary memory: either way, but done means done. */
        ct_fill(local, 64, rd_seed(s->rank, p, 4), 0);
        rc = s->btl->ops->rdma_direct(s->btl, s->peer[p].ep, true, local,
                                      ok->addr + (uint64_t)s->rank * 64, ok->key, 64);
        CT_CHECK(s, rc == FERRY_BTL_DONE || rc == FERRY_ERR_NOT_SUPPORTED,
                 "direct put into rank %d's ordinary memory returned %d (%s)", p, rc,
                 ferry_strerror(rc));
        if (rc == FERRY_BTL_DONE)
            ct_note(s, "transport %s puts into ordinary memory directly", s->attr->name);
    }
finish:
    ct_case_finish(s);
    if (h != NULL && hreg != NULL) {
        /* Every peer is done with this rank (its FIN came after its last
         * operation). Every writer's last put into mem_alloc memory filled
         * its whole slot; nothing else moved. */
        for (int i = 0; i < s->nreach && alloc; i++) {
            int w = s->reach[i];
            if (w == s->rank)
                continue;
            size_t bad = ct_verify(h + (size_t)w * RD_SLOT, RD_SLOT, rd_seed(w, s->rank, 0), 0);
            CT_CHECK(s, bad == SIZE_MAX, "target: rank %d's slot of H differs at byte %zu", w,
                     bad);
        }
        check_canary(s, h, canary_off, hlen, "H after refused direct operations", s->rank);
        at_check_intact(s, h + read_off, RD_SLOT, rd_seed(s->rank, s->rank, 1), "H's read slot");
        if (r != NULL)
            at_check_intact(s, r, RD_PAGE, rd_seed(s->rank, s->rank, 2), "R (read-only)");
    }
    if (alloc && hreg != NULL)
        CT_CHECK_RC(s, s->btl->ops->mem_free(s->btl, hreg), FERRY_OK, "mem_free of H");
    if (alloc && rreg != NULL)
        CT_CHECK_RC(s, s->btl->ops->mem_free(s->btl, rreg), FERRY_OK, "mem_free of R");
    if (!alloc) {
        dereg_mem(s, hreg);
        dereg_mem(s, rreg);
        free(h);
        free(r);
    }
    dereg_mem(s, oreg);
    free(o);
    free(local);
    return CT_RESULT_RUN;
}

/* ---- put_inline ------------------------------------------------------------------------- */

/*
 * put_inline, for a transport with the optional op. Each rank registers O
 * (ordinary memory, read-write: one slot per writer rank, then a canary
 * slot) and R (read-only). Through every peer's keys:
 * - puts of 1 to 256 bytes into this rank's slot of O, the source buffer
 *   overwritten as soon as the call returns (the module took the bytes):
 *   each is FERRY_OK with one callback from progress, never inside the
 *   call, with the cbctx and local given, status FERRY_OK; or, where the
 *   module does not take one so now, FERRY_ERR_NOT_SUPPORTED, and then it
 *   goes by put; at least one per peer must go inline;
 * - size 0 is FERRY_ERR_NOT_SUPPORTED, a NULL buffer FERRY_ERR_INVALID;
 * - a put into R, across O's end, before its start, or through O's key
 *   with a byte changed is refused: an error from the call, or the
 *   callback's FERRY_ERR_ACCESS; a changed key that is taken must write
 *   only what this rank wrote there already;
 * - at the end each target finds every writer's slot as its last put left
 *   it, its canary and R untouched.
 */
#define PI_SLOT 256

static uint64_t pi_seed(int writer, int target, int what)
{
    return ct_seed((uint64_t)writer, (uint64_t)target, 0x91, (uint64_t)what);
}

typedef struct pi_done {
    ct_suite_t *s;
    void *local;
    int calls;
    int status;
} pi_done_t;

static void pi_cb(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                  ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status)
{
    (void)btl;
    (void)ep;
    (void)lreg;
    pi_done_t *d = cbdata;
    ct_suite_t *s = d->s;
    CT_CHECK(s, s->in_call == 0, "an inline put's callback ran inside the call that started it");
    CT_CHECK(s, cbctx == (void *)s, "an inline put's callback got cbctx %p, not %p", cbctx,
             (void *)s);
    CT_CHECK(s, local == d->local, "an inline put's callback got local %p, not %p", local,
             d->local);
    d->calls++;
    CT_CHECK(s, d->calls == 1, "an inline put's callback ran %d times", d->calls);
    d->status = status;
}

/* One inline put, waited for: the call's status, or the callback's. With
 * scribble, the source is overwritten as soon as the call returns. */
static int pi_do(ct_suite_t *s, int peer, uint8_t *local, size_t n, uint64_t raddr,
                 const uint8_t *key, bool scribble, bool *inline_out)
{
    pi_done_t d = {.s = s, .local = local};
    s->in_call++;
    int rc = s->btl->ops->put_inline(s->btl, s->peer[peer].ep, local, n, raddr, key, pi_cb, s,
                                     &d);
    s->in_call--;
    *inline_out = rc == FERRY_OK;
    if (rc != FERRY_OK)
        return rc;
    if (scribble)
        memset(local, 0x5a, n);
    ct_deadline_t dl = ct_deadline();
    while (d.calls == 0)
        if (!ct_step(s, &dl, "an inline put's completion"))
            return FERRY_ERR_TIMEOUT;
    return d.status;
}

/* One inline put or get (put: local's n bytes to raddr), then the module's
 * flush of the endpoint: once it returns, the callback has run. */
static bool pi_flushed(ct_suite_t *s, int peer, bool put, uint8_t *local, size_t n,
                       uint64_t raddr, const uint8_t *key)
{
    pi_done_t d = {.s = s, .local = local};
    ferry_btl_module_t *btl = s->btl;
    s->in_call++;
    int rc = put ? btl->ops->put_inline(btl, s->peer[peer].ep, local, n, raddr, key, pi_cb, s, &d)
                 : btl->ops->get_inline(btl, s->peer[peer].ep, local, n, raddr, key, pi_cb, s, &d);
    s->in_call--;
    if (rc != FERRY_OK)
        return false; /* declined (checked elsewhere) */
    rc = btl->ops->flush(btl, s->peer[peer].ep);
    CT_CHECK(s, rc == FERRY_OK && d.calls == 1 && d.status == FERRY_OK,
             "flush to rank %d returned %d with an inline %s of %zu bytes not complete "
             "(%d callbacks, status %d)",
             peer, rc, put ? "put" : "get", n, d.calls, d.status);
    ct_deadline_t dl = ct_deadline();
    while (d.calls == 0 && ct_step(s, &dl, "an inline operation a flush left behind"))
        ;
    return true;
}

/* A put that must be refused: by the call, or by its completion. */
static void pi_refused(ct_suite_t *s, int peer, uint8_t *local, size_t n, uint64_t raddr,
                       const uint8_t *key, const char *what)
{
    bool taken;
    int rc = pi_do(s, peer, local, n, raddr, key, false, &taken);
    CT_CHECK(s, rc < 0 && rc != FERRY_ERR_TIMEOUT,
             "inline put %s on rank %d: %s %d (%s), expected a refusal", what, peer,
             taken ? "completed with" : "returned", rc, ferry_strerror(rc));
}

ct_result_t ct_case_put_inline(ct_suite_t *s)
{
    static const size_t sizes[] = {1, 7, 8, 63, 64, 200, PI_SLOT};
    size_t olen = PI_SLOT * ((size_t)s->size + 1), canary_off = PI_SLOT * (size_t)s->size;
    ferry_btl_reg_t *oreg = NULL, *rreg = NULL;
    uint8_t *o = NULL, *r = NULL, *local = NULL;

    if (s->btl->ops->put_inline == NULL) {
        printf("skip %s: transport %s has no put_inline op\n", s->case_name, s->attr->name);
        fflush(stdout);
        return CT_RESULT_SKIP;
    }
    if (!ct_has(s, FERRY_BTL_FLAG_PUT)) {
        printf("skip %s: transport %s has put_inline but no put\n", s->case_name,
               s->attr->name);
        fflush(stdout);
        return CT_RESULT_SKIP;
    }
    o = at_pages((olen + RD_PAGE - 1) / RD_PAGE, 0);
    memset(o, CANARY, olen);
    r = at_pages(1, pi_seed(s->rank, s->rank, 2));
    oreg = reg_mem(s, o, olen, FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
    rreg = reg_mem(s, r, RD_PAGE, FERRY_ACCESS_REMOTE_READ);
    local = xmalloc(PI_SLOT);

    ct_case_begin(s, ct_seq_rx, NULL);
    if (oreg == NULL || rreg == NULL)
        goto finish;
    if (!ct_exchange_rkey(s, 0, oreg) || !ct_exchange_rkey(s, 1, rreg))
        goto finish;
    for (int i = 0; i < s->nreach; i++) {
        int p = s->reach[i];
        const ct_rkey_t *ok = &s->peer[p].rkey[0], *rk = &s->peer[p].rkey[1];
        uint64_t myslot = ok->addr + (uint64_t)s->rank * PI_SLOT;
        int went_inline = 0;
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            size_t n = sizes[k];
            ct_fill(local, n, pi_seed(s->rank, p, 0), 0);
            bool taken;
            int rc = pi_do(s, p, local, n, myslot, ok->key, true, &taken);
            if (rc == FERRY_ERR_NOT_SUPPORTED && !taken) {
                /* Not this way now: by put, so that the slot holds it. */
                ct_fill(local, n, pi_seed(s->rank, p, 0), 0);
                CT_CHECK(s, ct_put_all(s, p, NULL, local, n, myslot, ok->key),
                         "put of %zu bytes to rank %d after put_inline declined it", n, p);
                continue;
            }
            went_inline += taken;
            CT_CHECK(s, rc == FERRY_OK,
                     "inline put of %zu bytes to rank %d: %s %d (%s)", n, p,
                     taken ? "completed with" : "returned", rc, ferry_strerror(rc));
        }
        /* flush covers what went inline. */
        if (s->btl->ops->flush != NULL) {
            ct_fill(local, 64, pi_seed(s->rank, p, 0), 0);
            pi_flushed(s, p, true, local, 64, myslot, ok->key);
        }
        /* Our own process may be left to put (sm copies its own memory). */
        CT_CHECK(s, went_inline > 0 || p == s->rank,
                 "put_inline took none of %zu puts to rank %d", sizeof(sizes) / sizeof(sizes[0]),
                 p);
        bool taken;
        int rc = s->btl->ops->put_inline(s->btl, s->peer[p].ep, local, 0, myslot, ok->key, pi_cb,
                                         s, NULL);
        CT_CHECK(s, rc == FERRY_ERR_NOT_SUPPORTED, "inline put of 0 bytes to rank %d returned %d",
                 p, rc);
        rc = s->btl->ops->put_inline(s->btl, s->peer[p].ep, NULL, 8, myslot, ok->key, pi_cb, s,
                                     NULL);
        CT_CHECK(s, rc == FERRY_ERR_INVALID,
                 "inline put from a NULL buffer to rank %d returned %d", p, rc);
        if (p == s->rank)
            continue;
        ct_fill(local, PI_SLOT, pi_seed(s->rank, p, 9), 0);
        pi_refused(s, p, local, 8, rk->addr, rk->key, "into read-only memory");
        pi_refused(s, p, local, 16, ok->addr + ok->len - 8, ok->key, "across the end");
        pi_refused(s, p, local, 16, ok->addr - 8, ok->key, "from before the start");
        pi_refused(s, p, local, 1, ok->addr + ok->len, ok->key, "just past the end");
        /* A changed key opens nothing more: what it may write is what
         * this rank's slot holds already. */
        uint8_t bent[FERRY_BTL_KEY_MAX];
        ct_fill(local, PI_SLOT, pi_seed(s->rank, p, 0), 0);
        for (size_t b = 0; b < s->attr->reg_handle_size && b < sizeof(bent); b++) {
            memcpy(bent, ok->key, sizeof(bent));
            bent[b] ^= 0x01;
            rc = pi_do(s, p, local, PI_SLOT, myslot, bent, false, &taken);
            CT_CHECK(s, rc == FERRY_OK || (rc < 0 && rc != FERRY_ERR_TIMEOUT),
                     "inline put through rank %d's key with byte %zu changed: %d", p, b, rc);
        }
    }
finish:
    ct_case_finish(s);
    if (oreg != NULL) {
        /* Every writer's last good put filled its whole slot. */
        for (int i = 0; i < s->nreach; i++) {
            int w = s->reach[i];
            size_t bad = ct_verify(o + (size_t)w * PI_SLOT, PI_SLOT, pi_seed(w, s->rank, 0), 0);
            CT_CHECK(s, bad == SIZE_MAX, "target: rank %d's slot differs at byte %zu", w, bad);
        }
        check_canary(s, o, canary_off, olen, "O after refused inline puts", s->rank);
    }
    if (rreg != NULL)
        at_check_intact(s, r, RD_PAGE, pi_seed(s->rank, s->rank, 2), "R (read-only)");
    dereg_mem(s, oreg);
    dereg_mem(s, rreg);
    free(o);
    free(r);
    free(local);
    return CT_RESULT_RUN;
}

/* ---- get_inline ------------------------------------------------------------------------- */

/*
 * get_inline, for a transport with the optional op. Each rank registers G
 * (ordinary memory, readable, its pattern) and W (write-only). Through
 * every peer's keys: gets of 1 byte to 8 KiB from G, at odd offsets, each
 * FERRY_OK with one callback from progress (or FERRY_ERR_NOT_SUPPORTED,
 * then by get; at least one per peer inline), the data checked and the
 * guard bytes after it untouched; size 0 is FERRY_ERR_NOT_SUPPORTED, a NULL
 * buffer FERRY_ERR_INVALID; a get from W, across G's end, before its start
 * is refused (the call's error or the callback's); through G's key with a
 * byte changed, refused or, if taken, G's own bytes.
 */
#define GI_LEN 16384
#define GI_GUARD 64

ct_result_t ct_case_get_inline(ct_suite_t *s)
{
    static const size_t sizes[] = {1, 7, 8, 64, 200, 256, 1000, 4096, 8192};
    ferry_btl_reg_t *greg = NULL, *wreg = NULL;
    uint8_t *g = NULL, *w = NULL, *local = NULL;

    if (s->btl->ops->get_inline == NULL || !ct_has(s, FERRY_BTL_FLAG_GET)) {
        printf("skip %s: transport %s has no get_inline op (or no get)\n", s->case_name,
               s->attr->name);
        fflush(stdout);
        return CT_RESULT_SKIP;
    }
    g = at_pages(GI_LEN / RD_PAGE, pi_seed(s->rank, s->rank, 5));
    w = at_pages(1, pi_seed(s->rank, s->rank, 6));
    greg = reg_mem(s, g, GI_LEN, FERRY_ACCESS_REMOTE_READ);
    wreg = reg_mem(s, w, RD_PAGE, FERRY_ACCESS_REMOTE_WRITE);
    local = xmalloc(GI_LEN + GI_GUARD);

    ct_case_begin(s, ct_seq_rx, NULL);
    if (greg == NULL || wreg == NULL)
        goto finish;
    if (!ct_exchange_rkey(s, 0, greg) || !ct_exchange_rkey(s, 1, wreg))
        goto finish;
    for (int i = 0; i < s->nreach; i++) {
        int p = s->reach[i];
        const ct_rkey_t *gk = &s->peer[p].rkey[0], *wk = &s->peer[p].rkey[1];
        int went_inline = 0;
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            size_t n = sizes[k], off = (k * 131) % (GI_LEN - n);
            memset(local, CANARY, n + GI_GUARD);
            pi_done_t d = {.s = s, .local = local};
            s->in_call++;
            int rc = s->btl->ops->get_inline(s->btl, s->peer[p].ep, local, n, gk->addr + off,
                                             gk->key, pi_cb, s, &d);
            s->in_call--;
            if (rc == FERRY_ERR_NOT_SUPPORTED)
                continue;
            if (!CT_CHECK(s, rc == FERRY_OK, "inline get of %zu bytes from rank %d returned %d",
                          n, p, rc))
                continue;
            went_inline++;
            ct_deadline_t dl = ct_deadline();
            while (d.calls == 0)
                if (!ct_step(s, &dl, "an inline get's completion"))
                    break;
            if (!CT_CHECK(s, d.calls == 1 && d.status == FERRY_OK,
                          "inline get of %zu bytes from rank %d: %d", n, p, d.status))
                continue;
            size_t bad = ct_verify(local, n, pi_seed(p, p, 5), off);
            CT_CHECK(s, bad == SIZE_MAX, "inline get of %zu bytes from rank %d: byte %zu differs",
                     n, p, bad);
            check_canary(s, local, n, n + GI_GUARD, "the bytes after an inline get", p);
        }
        CT_CHECK(s, went_inline > 0 || p == s->rank, "get_inline took none of the gets from rank %d",
                 p);
        if (s->btl->ops->flush != NULL) {
            memset(local, CANARY, 64);
            if (pi_flushed(s, p, false, local, 64, gk->addr, gk->key)) {
                size_t at = ct_verify(local, 64, pi_seed(p, p, 5), 0);
                CT_CHECK(s, at == SIZE_MAX,
                         "inline get completed by flush from rank %d: byte %zu", p, at);
            }
        }
        int rc = s->btl->ops->get_inline(s->btl, s->peer[p].ep, local, 0, gk->addr, gk->key,
                                         pi_cb, s, NULL);
        CT_CHECK(s, rc == FERRY_ERR_NOT_SUPPORTED, "inline get of 0 bytes from rank %d: %d", p,
                 rc);
        rc = s->btl->ops->get_inline(s->btl, s->peer[p].ep, NULL, 8, gk->addr, gk->key, pi_cb, s,
                                     NULL);
        CT_CHECK(s, rc == FERRY_ERR_INVALID, "inline get into a NULL buffer from rank %d: %d", p,
                 rc);
        if (p == s->rank)
            continue;
        struct {
            uint64_t addr;
            size_t len;
            const uint8_t *key;
            const char *what;
        } bad[] = {
            {wk->addr, 8, wk->key, "from write-only memory"},
            {gk->addr + gk->len - 8, 16, gk->key, "across the end"},
            {gk->addr - 8, 16, gk->key, "from before the start"},
        };
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            pi_done_t d = {.s = s, .local = local};
            s->in_call++;
            rc = s->btl->ops->get_inline(s->btl, s->peer[p].ep, local, bad[k].len, bad[k].addr,
                                         bad[k].key, pi_cb, s, &d);
            s->in_call--;
            if (rc == FERRY_OK) {
                ct_deadline_t dl = ct_deadline();
                while (d.calls == 0 && ct_step(s, &dl, "a refused inline get"))
                    ;
                rc = d.calls == 1 ? d.status : FERRY_ERR_TIMEOUT;
            }
            CT_CHECK(s, rc < 0 && rc != FERRY_ERR_TIMEOUT,
                     "inline get %s on rank %d: %d (%s), expected a refusal", bad[k].what, p, rc,
                     ferry_strerror(rc));
        }
        uint8_t bent[FERRY_BTL_KEY_MAX];
        for (size_t b = 0; b < s->attr->reg_handle_size && b < sizeof(bent); b++) {
            memcpy(bent, gk->key, sizeof(bent));
            bent[b] ^= 0x01;
            memset(local, CANARY, 64);
            pi_done_t d = {.s = s, .local = local};
            s->in_call++;
            rc = s->btl->ops->get_inline(s->btl, s->peer[p].ep, local, 64, gk->addr, bent, pi_cb,
                                         s, &d);
            s->in_call--;
            if (rc != FERRY_OK)
                continue;
            ct_deadline_t dl = ct_deadline();
            while (d.calls == 0 && ct_step(s, &dl, "an inline get through a changed key"))
                ;
            if (d.calls == 1 && d.status == FERRY_OK) {
                size_t at = ct_verify(local, 64, pi_seed(p, p, 5), 0);
                CT_CHECK(s, at == SIZE_MAX,
                         "inline get through rank %d's key with byte %zu changed read other "
                         "bytes (at %zu)",
                         p, b, at);
            }
        }
    }
finish:
    ct_case_finish(s);
    dereg_mem(s, greg);
    dereg_mem(s, wreg);
    free(g);
    free(w);
    free(local);
    return CT_RESULT_RUN;
}

/* ---- put_ordered ------------------------------------------------------------------------ */

/*
 * FERRY_BTL_FLAG_PUT_ORDERED, for a transport that sets it. Each rank
 * registers O, writable, a region per writer of one place per size (1 byte
 * to 1 MiB, each one put as long as max_rdma_size allows). To every
 * reachable peer, for each size, a rank puts a pattern of its own into its
 * place there and, as soon as put has accepted it and before anything has
 * progressed, sends a data message naming the writer and the size; the
 * peer's handler must find the whole place holding that pattern at that
 * moment. The writer waits for the put's completion before the next, so
 * that nothing else is in flight to the place. Refused puts are not
 * covered here: the message after one is handled all the same.
 */
static const size_t po_sizes[] = {1, 8, 100, 4096, 65536, 1 << 20};
#define PO_NSIZES (sizeof(po_sizes) / sizeof(po_sizes[0]))

typedef struct po_msg {
    uint32_t writer;
    uint32_t idx;
} po_msg_t;

typedef struct po_state {
    uint8_t *o;
    size_t region; /* bytes per writer */
    unsigned checked;
} po_state_t;

static uint64_t po_seed(int writer, int target, size_t idx)
{
    return ct_seed((uint64_t)writer, (uint64_t)target, 0x50, (uint64_t)idx);
}

static size_t po_off(size_t idx)
{
    size_t off = 0;
    for (size_t i = 0; i < idx; i++)
        off += po_sizes[i];
    return off;
}

static void po_rx(ct_suite_t *s, int peer, uint8_t tag, uint8_t slot_tag, const uint8_t *data,
                  size_t len)
{
    (void)tag;
    (void)slot_tag;
    po_state_t *st = s->case_state;
    po_msg_t m;
    if (!CT_CHECK(s, len == sizeof(m), "put_ordered: a %zu-byte message from rank %d", len, peer))
        return;
    memcpy(&m, data, sizeof(m));
    if (!CT_CHECK(s, m.writer == (uint32_t)peer && m.idx < PO_NSIZES,
                  "put_ordered: rank %d's message names writer %u, size index %u", peer,
                  m.writer, m.idx))
        return;
    size_t n = po_sizes[m.idx];
    const uint8_t *place = st->o + (size_t)peer * st->region + po_off(m.idx);
    size_t bad = ct_verify(place, n, po_seed(peer, s->rank, m.idx), 0);
    CT_CHECK(s, bad == SIZE_MAX,
             "the message after rank %d's put of %zu bytes was handled before the put's data "
             "was in place (byte %zu differs)",
             peer, n, bad);
    st->checked++;
}

ct_result_t ct_case_put_ordered(ct_suite_t *s)
{
    if (!ct_has(s, FERRY_BTL_FLAG_PUT_ORDERED)) {
        printf("skip %s: transport %s does not set FERRY_BTL_FLAG_PUT_ORDERED\n", s->case_name,
               s->attr->name);
        fflush(stdout);
        return CT_RESULT_SKIP;
    }
    po_state_t st = {.region = po_off(PO_NSIZES)};
    size_t olen = st.region * (size_t)s->size;
    st.o = at_pages((olen + AT_PAGE - 1) / AT_PAGE, 0);
    memset(st.o, CANARY, olen);
    uint8_t *local = xmalloc(po_sizes[PO_NSIZES - 1]);
    ferry_btl_reg_t *oreg = reg_mem(s, st.o, olen, FERRY_ACCESS_REMOTE_WRITE);
    unsigned sent = 0, want = 0;

    ct_case_begin(s, po_rx, &st);
    if (oreg == NULL || !ct_exchange_rkey(s, 0, oreg))
        goto finish;
    for (int i = 0; i < s->nreach; i++) {
        int p = s->reach[i];
        const ct_rkey_t *rk = &s->peer[p].rkey[0];
        uint64_t mine = rk->addr + (uint64_t)s->rank * st.region;
        for (size_t k = 0; k < PO_NSIZES; k++) {
            size_t n = po_sizes[k];
            if (n > s->attr->max_rdma_size)
                continue;
            ct_fill(local, n, po_seed(s->rank, p, k), 0);
            int rc;
            ct_op_t *op = NULL;
            uint64_t raddr = mine + po_off(k);
            if (!ct_put_start(s, p, NULL, local, n, raddr, n, rk->key, false, true, &rc, &op))
                break;
            if (!CT_CHECK_RC(s, rc, FERRY_OK, "put before a message"))
                break;
            po_msg_t m = {.writer = (uint32_t)s->rank, .idx = (uint32_t)k};
            if (ct_send(s, p, CT_DATA_TAG, (k & 1) ? CT_PATH_SENDI : CT_PATH_ALLOC, &m,
                        sizeof(m), false, true) != FERRY_OK)
                break;
            sent++;
            if (!ct_wait_op(s, op, "a put followed by a message"))
                break;
        }
    }
finish:
    ct_case_finish(s);
    /* Every writer's message was checked, and each place holds its put. */
    for (int i = 0; i < s->nreach && oreg != NULL; i++) {
        int w = s->reach[i];
        for (size_t k = 0; k < PO_NSIZES; k++) {
            if (po_sizes[k] > s->attr->max_rdma_size)
                continue;
            want++;
            size_t bad = ct_verify(st.o + (size_t)w * st.region + po_off(k), po_sizes[k],
                                   po_seed(w, s->rank, k), 0);
            CT_CHECK(s, bad == SIZE_MAX, "rank %d's put of %zu bytes differs at byte %zu", w,
                     po_sizes[k], bad);
        }
    }
    CT_CHECK(s, oreg == NULL || st.checked == want,
             "put_ordered: %u messages after puts were checked, %u expected (%u sent)",
             st.checked, want, sent);
    dereg_mem(s, oreg);
    free(st.o);
    free(local);
    return CT_RESULT_RUN;
}

/* ---- put_notify_inline ------------------------------------------------------------------ */

/*
 * put_notify_inline, for a transport with the optional op. Each rank
 * registers O (a PN_SLOT place per writer, writable) and R (read-only, its
 * pattern). Act 1, to every reachable peer: puts with notification of 0 to
 * PN_SLOT bytes into its place, tracked (the callback's FERRY_OK, from
 * progress, once; the source overwritten as soon as the call returns) and
 * untracked (no callback); the target's handler gets the notification's
 * payload (writer, sequence, size, whether the put should land) and finds
 * the data in place before it. Then refusals: a tracked put into R, across
 * O's end and through a key with a byte changed complete with
 * FERRY_ERR_ACCESS (a changed key that is taken writes only this rank's
 * own place), the handler running all the same; untracked ones into R are
 * reported to their callback, once or more but never more often than
 * sent, before the target's next message (act 2: one message from every
 * peer, sent after it has handled all of act 1). Bad arguments are
 * FERRY_ERR_INVALID; to this rank's own process, or larger than a message,
 * FERRY_ERR_NOT_SUPPORTED or taken. At the end each target finds every
 * writer's place as its last put left it and R untouched.
 */
#define PN_SLOT 256

typedef struct pn_note {
    uint32_t writer;
    uint32_t seq;
    uint32_t size;
    uint32_t lands;
} pn_note_t;

typedef struct pn_state {
    uint8_t *o;
    uint32_t last_seq[256]; /* per writer: the last put that landed, + 1 */
    unsigned notes;
    unsigned refusals; /* untracked refusals reported to this rank */
} pn_state_t;

static uint64_t pn_seed(int writer, int target, uint32_t seq)
{
    return ct_seed((uint64_t)writer, (uint64_t)target, 0x9e, (uint64_t)seq);
}

static void pn_rx(ct_suite_t *s, int peer, uint8_t tag, uint8_t slot_tag, const uint8_t *data,
                  size_t len)
{
    (void)tag;
    (void)slot_tag;
    pn_state_t *st = s->case_state;
    pn_note_t n;
    if (st == NULL)
        return; /* act 2's message */
    if (!CT_CHECK(s, len == sizeof(n), "put_notify_inline: a %zu-byte notification from rank %d",
                  len, peer))
        return;
    memcpy(&n, data, sizeof(n));
    st->notes++;
    if (!CT_CHECK(s, n.writer == (uint32_t)peer && n.size <= PN_SLOT && peer < 256,
                  "put_notify_inline: rank %d's notification names writer %u, size %u", peer,
                  n.writer, n.size))
        return;
    if (!n.lands)
        return;
    size_t bad = ct_verify(st->o + (size_t)peer * PN_SLOT, n.size, pn_seed(peer, s->rank, n.seq),
                           0);
    CT_CHECK(s, bad == SIZE_MAX,
             "rank %d's notification %u ran before its %u bytes were in place (byte %zu)", peer,
             n.seq, n.size, bad);
    st->last_seq[peer] = n.seq + 1;
}

/* An untracked one's refusal: cbctx is the case's state. */
static void pn_refused_cb(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                          ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status)
{
    (void)btl;
    (void)ep;
    (void)lreg;
    pn_state_t *st = cbctx;
    /* Anything but the contract's form counts too many, which fails below. */
    st->refusals += local == NULL && cbdata == NULL && status == FERRY_ERR_ACCESS ? 1 : 1000;
}

/* One put with notification to peer; tracked ones are waited for. Returns
 * the call's status, or the callback's for a tracked one taken. */
static int pn_do(ct_suite_t *s, pn_state_t *st, int peer, uint8_t *local, size_t n,
                 uint64_t raddr, const uint8_t *key, bool tracked, uint32_t seq, bool lands)
{
    pn_note_t note = {.writer = (uint32_t)s->rank, .seq = seq, .size = (uint32_t)n,
                      .lands = lands};
    pi_done_t d = {.s = s, .local = n > 0 ? local : NULL};
    s->in_call++;
    int rc = s->btl->ops->put_notify_inline(
        s->btl, s->peer[peer].ep, n > 0 ? local : NULL, n, raddr, key, CT_DATA_TAG, &note,
        sizeof(note), tracked ? 0 : FERRY_BTL_PUTN_UNTRACKED, tracked ? pi_cb : pn_refused_cb,
        tracked ? (void *)s : (void *)st, tracked ? &d : NULL);
    s->in_call--;
    if (rc != FERRY_OK)
        return rc;
    s->peer[peer].tx_count++; /* its notification is a data message */
    if (n > 0)
        memset(local, 0x5a, n);
    if (!tracked)
        return FERRY_OK;
    ct_deadline_t dl = ct_deadline();
    while (d.calls == 0)
        if (!ct_step(s, &dl, "a put with notification's completion"))
            return FERRY_ERR_TIMEOUT;
    return d.status;
}

ct_result_t ct_case_put_notify_inline(ct_suite_t *s)
{
    if (s->btl->ops->put_notify_inline == NULL) {
        printf("skip %s: transport %s has no put_notify_inline op\n", s->case_name,
               s->attr->name);
        fflush(stdout);
        return CT_RESULT_SKIP;
    }
    static const size_t sizes[] = {0, 1, 8, 40, 63, 200, PN_SLOT};
    pn_state_t *st = calloc(1, sizeof(*st));
    size_t olen = PN_SLOT * ((size_t)s->size + 1), canary_off = PN_SLOT * (size_t)s->size;
    st->o = at_pages((olen + RD_PAGE - 1) / RD_PAGE, 0);
    memset(st->o, CANARY, olen);
    uint8_t *r = at_pages(1, pn_seed(s->rank, s->rank, 7));
    uint8_t *local = xmalloc(PN_SLOT);
    ferry_btl_reg_t *oreg = reg_mem(s, st->o, olen, FERRY_ACCESS_REMOTE_WRITE);
    ferry_btl_reg_t *rreg = reg_mem(s, r, RD_PAGE, FERRY_ACCESS_REMOTE_READ);
    unsigned untracked_refused = 0;
    uint32_t seq = 0;

    ct_case_begin(s, pn_rx, st);
    if (oreg == NULL || rreg == NULL || !ct_exchange_rkey(s, 0, oreg) ||
        !ct_exchange_rkey(s, 1, rreg))
        goto act1_end;
    for (int i = 0; i < s->nreach; i++) {
        int p = s->reach[i];
        const ct_rkey_t *ok = &s->peer[p].rkey[0], *rk = &s->peer[p].rkey[1];
        uint64_t mine = ok->addr + (uint64_t)s->rank * PN_SLOT;
        int taken = 0;
        for (size_t k = 0; k < 2 * sizeof(sizes) / sizeof(sizes[0]); k++) {
            size_t n = sizes[k / 2];
            bool tracked = (k & 1) == 0;
            ct_fill(local, n, pn_seed(s->rank, p, seq), 0);
            int rc = pn_do(s, st, p, local, n, mine, ok->key, tracked, seq, true);
            if (rc == FERRY_ERR_NOT_SUPPORTED)
                continue; /* not this way now (our own process, say) */
            taken++;
            CT_CHECK(s, rc == FERRY_OK, "%s put with notification of %zu bytes to rank %d: %d (%s)",
                     tracked ? "tracked" : "untracked", n, p, rc, ferry_strerror(rc));
            seq++;
        }
        CT_CHECK(s, taken > 0 || p == s->rank,
                 "put_notify_inline took none of the puts to rank %d", p);
        /* Arguments it must refuse. */
        pn_note_t note = {0};
        ferry_btl_endpoint_t *ep = s->peer[p].ep;
        int rc = s->btl->ops->put_notify_inline(s->btl, ep, local, 8, mine, ok->key,
                                                FERRY_BTL_TAG_BTL_MIN, &note, sizeof(note), 0,
                                                pi_cb, s, NULL);
        CT_CHECK(s, rc == FERRY_ERR_INVALID, "put_notify_inline on a reserved tag returned %d", rc);
        rc = s->btl->ops->put_notify_inline(s->btl, ep, local, 8, mine, ok->key, CT_DATA_TAG, NULL,
                                            4, 0, pi_cb, s, NULL);
        CT_CHECK(s, rc == FERRY_ERR_INVALID, "put_notify_inline with a NULL payload returned %d",
                 rc);
        rc = s->btl->ops->put_notify_inline(s->btl, ep, NULL, 8, mine, ok->key, CT_DATA_TAG, &note,
                                            sizeof(note), 0, pi_cb, s, NULL);
        CT_CHECK(s, rc == FERRY_ERR_INVALID, "put_notify_inline from a NULL buffer returned %d",
                 rc);
        rc = s->btl->ops->put_notify_inline(s->btl, ep, local, 8, mine, ok->key, CT_DATA_TAG, &note,
                                            sizeof(note), 0, NULL, s, NULL);
        CT_CHECK(s, rc == FERRY_ERR_INVALID, "put_notify_inline without a callback returned %d",
                 rc);
        rc = s->btl->ops->put_notify_inline(s->btl, ep, local, 8, mine, ok->key, CT_DATA_TAG, &note,
                                            sizeof(note), 0x80, pi_cb, s, NULL);
        CT_CHECK(s, rc == FERRY_ERR_INVALID, "put_notify_inline with unknown flags returned %d",
                 rc);
        rc = s->btl->ops->put_notify_inline(s->btl, ep, local, s->attr->max_send_size, mine,
                                            ok->key, CT_DATA_TAG, &note, sizeof(note), 0, pi_cb,
                                            s, NULL);
        CT_CHECK(s, rc == FERRY_ERR_NOT_SUPPORTED,
                 "put_notify_inline larger than a message returned %d", rc);
        if (p == s->rank)
            continue;
        /* Refusals: the handler runs, nothing lands. */
        ct_fill(local, 16, pn_seed(s->rank, p, 0xffff), 0);
        rc = pn_do(s, st, p, local, 8, rk->addr, rk->key, true, 0, false);
        CT_CHECK(s, rc == FERRY_ERR_ACCESS,
                 "tracked put with notification into read-only memory of rank %d: %d", p, rc);
        rc = pn_do(s, st, p, local, 16, ok->addr + ok->len - 8, ok->key, true, 0, false);
        CT_CHECK(s, rc == FERRY_ERR_ACCESS,
                 "tracked put with notification across the end of rank %d's memory: %d", p, rc);
        for (int u = 0; u < 3; u++) {
            rc = pn_do(s, st, p, local, 8, rk->addr + (uint64_t)u * 8, rk->key, false, 0, false);
            CT_CHECK(s, rc == FERRY_OK || rc == FERRY_ERR_NOT_SUPPORTED,
                     "untracked put with notification into read-only memory of rank %d: %d", p,
                     rc);
            untracked_refused += rc == FERRY_OK;
        }
        /* A changed key opens nothing more than this rank's own place,
         * which holds the last good put already. */
        uint8_t bent[FERRY_BTL_KEY_MAX];
        for (size_t b = 0; b < s->attr->reg_handle_size && b < sizeof(bent); b++) {
            memcpy(bent, ok->key, sizeof(bent));
            bent[b] ^= 0x01;
            uint32_t last = seq - 1;
            ct_fill(local, PN_SLOT, pn_seed(s->rank, p, last), 0);
            rc = pn_do(s, st, p, local, 0, mine, bent, true, last, false);
            CT_CHECK(s, rc == FERRY_OK || (rc < 0 && rc != FERRY_ERR_TIMEOUT),
                     "put with notification through rank %d's key with byte %zu changed: %d", p,
                     b, rc);
        }
    }
act1_end:
    ct_case_finish(s);
    /* Act 2: a message from every peer, sent once it has handled all of
     * act 1, reaches us after the refusals it counted. */
    ct_case_begin(s, pn_rx, NULL);
    for (int i = 0; i < s->nreach; i++) {
        int p = s->reach[i];
        uint32_t word = 0x41435432u;
        ct_send(s, p, CT_DATA_TAG, CT_PATH_SENDI, &word, sizeof(word), false, true);
    }
    ct_case_finish(s);
    CT_CHECK(s, st->refusals <= untracked_refused && (untracked_refused == 0 || st->refusals > 0),
             "untracked refusals: %u sent, %u reported (once or more, never more often)",
             untracked_refused, st->refusals);
    if (oreg != NULL) {
        for (int i = 0; i < s->nreach; i++) {
            int w = s->reach[i];
            if (w >= 256 || st->last_seq[w] == 0)
                continue;
            /* The last put that landed was the largest of its round. */
            size_t bad = ct_verify(st->o + (size_t)w * PN_SLOT, PN_SLOT,
                                   pn_seed(w, s->rank, st->last_seq[w] - 1), 0);
            CT_CHECK(s, bad == SIZE_MAX, "target: rank %d's place differs at byte %zu", w, bad);
        }
        check_canary(s, st->o, canary_off, olen, "O after puts with notification", s->rank);
    }
    if (rreg != NULL)
        at_check_intact(s, r, RD_PAGE, pn_seed(s->rank, s->rank, 7), "R (read-only)");
    dereg_mem(s, oreg);
    dereg_mem(s, rreg);
    free(st->o);
    free(st);
    free(r);
    free(local);
    return CT_RESULT_RUN;
}
