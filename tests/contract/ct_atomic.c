/*
 * Atomic cases: atomic_op, atomic_fop and atomic_cswap (btl.h).
 *
 * Each case runs on ordinary registered memory and, where the module has
 * mem_alloc, on memory from it too (sm's two paths: CPU atomics into a
 * peer's heap, and atomics the target executes). Every rank targets every
 * peer it reaches, itself included where reachable.
 * - atomic_counter: N ranks x M fetch-and-adds (many in flight, past the
 *   per-peer budget) to one 64-bit and one 32-bit counter of each target,
 *   while the target adds to them with its own CPU atomics: the sums are
 *   exact and no two fetched values of one initiator repeat.
 * - atomic_lock: a compare-and-swap spin lock on each target protects a
 *   plain counter read and written with get and put: no update is lost.
 * - atomic_ops: every operation, fetching and not, at both widths, against
 *   a model, with 32- and 64-bit words side by side in one registration
 *   (neighbours untouched, a 32-bit result is 4 bytes).
 * - atomic_refusals: misaligned, out-of-range (and across the end),
 *   missing-right, released and wrong keys, unknown operations and flags:
 *   refused with a clear status, the target's memory unchanged, the
 *   endpoint still working.
 * - atomic_revoke: a key that worked (and may be cached) is refused once
 *   its registration is released, and writes nothing.
 * - atomic_by_owner (modules with mem_alloc): memory from mem_alloc also
 *   registered with FERRY_BTL_ACCESS_TARGET_ATOMICS; every peer's
 *   fetch-and-adds to a counter in it are executed by its owner, so the
 *   owner's own plain (not atomic) increments between its progress calls
 *   lose none of them: the sum is exact, and no peer's atomic was done
 *   inside the call (FERRY_BTL_DONE).
 * Where the module has atomic_direct, every other atomic of these cases
 * goes through it (and through the op where it declines; on a peer's
 * mem_alloc memory it must not), and each refusal is tried both ways.
 * A module without atomics skips them saying so; an operation a module does
 * not list in attr.atomic_flags is skipped by name.
 */
#include "contract.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AT_CANARY 0x5c

/* The exhaustive cases (ops, refusals) against a few peers only in large
 * jobs: this rank and its neighbours, so that their cost does not grow with
 * the square of the job. */
static bool at_few(const ct_suite_t *s, int r)
{
    if (s->nreach <= 4)
        return true;
    return r == s->rank || r == (s->rank + 1) % s->size ||
           r == (s->rank + s->size - 1) % s->size;
}

static bool at_skip(ct_suite_t *s)
{
    if (ct_has(s, FERRY_BTL_FLAG_ATOMIC_OPS) && ct_has(s, FERRY_BTL_FLAG_ATOMIC_FOPS))
        return false;
    printf("skip %s: transport %s has no %s in attr.flags (atomic_flags 0x%x)\n", s->case_name,
           s->attr->name, ct_has(s, FERRY_BTL_FLAG_ATOMIC_OPS) ? "ATOMIC_FOPS" : "ATOMIC_OPS",
           (unsigned)s->attr->atomic_flags);
    fflush(stdout);
    return true;
}

static bool at_supports(const ct_suite_t *s, uint32_t bits)
{
    return (s->attr->atomic_flags & bits) == bits;
}

/* A window of len bytes: ordinary memory registered, or the module's own
 * (mem_alloc). */
typedef struct at_win {
    uint8_t *base;
    size_t len;
    ferry_btl_reg_t *reg;
    bool heap;
} at_win_t;

static bool at_win_open(ct_suite_t *s, at_win_t *w, size_t len, uint32_t access, bool heap)
{
    memset(w, 0, sizeof(*w));
    w->len = len;
    w->heap = heap;
    int rc;
    if (heap) {
        void *addr = NULL;
        rc = s->btl->ops->mem_alloc(s->btl, len, access, &addr, &w->reg);
        w->base = addr;
    } else {
        w->base = aligned_alloc(64, (len + 63) & ~(size_t)63);
        if (w->base == NULL) {
            fprintf(stderr, "contract: out of memory\n");
            exit(1);
        }
        rc = s->btl->ops->register_mem(s->btl, NULL, w->base, len, access, &w->reg);
    }
    if (!CT_CHECK(s, rc == FERRY_OK && w->reg != NULL, "%s of %zu bytes (access 0x%x): %d (%s)",
                  heap ? "mem_alloc" : "register_mem", len, access, rc, ferry_strerror(rc))) {
        if (!heap)
            free(w->base);
        w->base = NULL;
        w->reg = NULL;
        return false;
    }
    return true;
}

static void at_win_close(ct_suite_t *s, at_win_t *w)
{
    if (w->reg == NULL)
        return;
    if (w->heap) {
        CT_CHECK_RC(s, s->btl->ops->mem_free(s->btl, w->reg), FERRY_OK, "mem_free");
    } else {
        CT_CHECK_RC(s, s->btl->ops->deregister_mem(s->btl, w->reg), FERRY_OK, "deregister_mem");
        free(w->base);
    }
    w->reg = NULL;
}

/* ---- issuing ---------------------------------------------------------------------------- */

/* One atomic's completion, handed to the transport as cbdata. */
typedef struct at_done {
    ct_suite_t *s;
    int *pending; /* decremented when it completes */
    int status;
    int calls;
    void *local;  /* what the operation was started with */
} at_done_t;

static void at_cb(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                  ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status)
{
    at_done_t *d = cbdata;
    ct_suite_t *s = d->s;
    CT_CHECK(s, s->in_call == 0, "an atomic's callback ran inside the call that started it");
    CT_CHECK(s, cbctx == (void *)s, "an atomic's callback got cbctx %p, not %p", cbctx, (void *)s);
    CT_CHECK(s, local == d->local, "an atomic's callback got local %p, not %p", local, d->local);
    d->calls++;
    CT_CHECK(s, d->calls == 1, "an atomic's callback ran %d times", d->calls);
    d->status = status;
    if (d->pending != NULL)
        (*d->pending)--;
}

enum at_kind { AT_OP, AT_FOP, AT_CSWAP };

typedef struct at_req {
    enum at_kind kind;
    uint32_t op;
    uint64_t operand, compare;
    uint32_t flags;
    uint64_t raddr;
    const uint8_t *key;
    void *local;
    bool heap; /* the target's mem_alloc memory: atomic_direct must do it */
} at_req_t;

/* Every other atomic goes through the module's atomic_direct, where it has
 * one, and through the op only where that declines. */
static unsigned at_calls;

/* Starts one: the transport's answer (FERRY_BTL_DONE, FERRY_OK with the
 * callback due, or a refusal). */
static int at_start(ct_suite_t *s, int peer, const at_req_t *q, at_done_t *d)
{
    ferry_btl_module_t *btl = s->btl;
    ferry_btl_endpoint_t *ep = s->peer[peer].ep;
    int rc;
    d->local = q->kind == AT_OP ? NULL : q->local;
    s->in_call++;
    /* A fetch without a result has no direct form (NULL there means no
     * fetch): it goes to atomic_fop, which must refuse it. */
    if (btl->ops->atomic_direct != NULL && (at_calls++ & 1) != 0 &&
        (q->kind == AT_OP || q->local != NULL || q->kind == AT_CSWAP)) {
        uint32_t flags = q->flags | (q->kind == AT_CSWAP ? FERRY_BTL_ATOMIC_FLAG_CSWAP : 0);
        rc = btl->ops->atomic_direct(btl, ep, q->kind == AT_OP ? NULL : q->local, q->raddr,
                                     q->key, (ferry_btl_atomic_op_t)q->op, q->operand,
                                     q->compare, flags);
        CT_CHECK(s, rc == FERRY_BTL_DONE || rc <= 0, "atomic_direct returned %d, not a status",
                 rc);
        CT_CHECK(s, !q->heap || rc != FERRY_ERR_NOT_SUPPORTED,
                 "atomic_direct declined an atomic on rank %d's mem_alloc memory", peer);
        if (rc != FERRY_ERR_NOT_SUPPORTED) {
            s->in_call--;
            return rc;
        }
    }
    switch (q->kind) {
    case AT_OP:
        rc = btl->ops->atomic_op(btl, ep, q->raddr, q->key, (ferry_btl_atomic_op_t)q->op,
                                 q->operand, q->flags, at_cb, s, d);
        break;
    case AT_FOP:
        rc = btl->ops->atomic_fop(btl, ep, q->local, q->raddr, NULL, q->key,
                                  (ferry_btl_atomic_op_t)q->op, q->operand, q->flags, at_cb, s, d);
        break;
    default:
        rc = btl->ops->atomic_cswap(btl, ep, q->local, q->raddr, NULL, q->key, q->compare,
                                    q->operand, q->flags, at_cb, s, d);
        break;
    }
    s->in_call--;
    CT_CHECK(s, rc == FERRY_BTL_DONE || rc <= 0, "an atomic returned %d, not a status", rc);
    return rc;
}

/* Starts one, retrying with progress while the transport says NO_RESOURCE;
 * waits for it; returns its final status. */
static int at_do(ct_suite_t *s, int peer, const at_req_t *q)
{
    ct_deadline_t dl = ct_deadline();
    int pending = 1;
    at_done_t d = {.s = s, .pending = &pending};
    int rc;
    while ((rc = at_start(s, peer, q, &d)) == FERRY_ERR_NO_RESOURCE)
        if (!ct_step(s, &dl, "room for an atomic"))
            return FERRY_ERR_TIMEOUT;
    if (rc == FERRY_BTL_DONE) {
        /* No callback may follow. */
        ct_progress(s);
        CT_CHECK(s, d.calls == 0, "an atomic returned FERRY_BTL_DONE and its callback ran too");
        return FERRY_OK;
    }
    if (rc != FERRY_OK)
        return rc;
    while (pending > 0)
        if (!ct_step(s, &dl, "an atomic's completion"))
            return FERRY_ERR_TIMEOUT;
    return d.status;
}

static uint64_t at_fetch(ct_suite_t *s, int peer, uint32_t op, uint64_t operand, bool w32,
                         uint64_t raddr, const uint8_t *key, int *rc_out)
{
    uint64_t v = 0;
    at_req_t q = {.kind = AT_FOP, .op = op, .operand = operand, .raddr = raddr, .key = key,
                  .flags = w32 ? FERRY_BTL_ATOMIC_FLAG_32BIT : 0, .local = &v};
    *rc_out = at_do(s, peer, &q);
    return w32 ? (uint32_t)v : v;
}

/* ---- atomic_counter ------------------------------------------------------------------- */

#define AC_ADDS 400     /* fetch-and-adds of each rank to each target, per width */
#define AC_WINDOW 200   /* in flight at once: past the default budget */
#define AC_LOCAL 300    /* the target's own CPU atomics on each counter */

static void ac_run(ct_suite_t *s, bool heap)
{
    at_win_t w;
    const uint32_t acc = FERRY_ACCESS_REMOTE_ATOMIC;
    if (!at_win_open(s, &w, 4096, acc, heap))
        return;
    memset(w.base, 0, w.len);
    uint64_t *c64 = (uint64_t *)w.base;
    uint32_t *c32 = (uint32_t *)(w.base + 8);
    uint64_t *fetched = calloc(2 * AC_ADDS, sizeof(*fetched));
    at_done_t *done = calloc(2 * AC_ADDS, sizeof(*done));
    if (fetched == NULL || done == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    ct_case_begin(s, ct_seq_rx, NULL);
    if (!ct_exchange_rkey(s, 0, w.reg))
        goto finish;
    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        const ct_rkey_t *rk = &s->peer[r].rkey[0];
        int pending = 0, local_done = 0;
        size_t next = 0;
        ct_deadline_t dl = ct_deadline();
        memset(done, 0, 2 * AC_ADDS * sizeof(*done));
        for (size_t k = 0; k < 2 * AC_ADDS; k++)
            fetched[k] = UINT64_MAX;
        bool no_resource_seen = false;
        while (next < 2 * AC_ADDS || pending > 0) {
            while (next < 2 * AC_ADDS && pending < AC_WINDOW) {
                bool w32 = (next & 1) != 0;
                at_req_t q = {.kind = AT_FOP, .op = FERRY_BTL_ATOMIC_ADD, .operand = 1,
                              .raddr = rk->addr + (w32 ? 8 : 0), .key = rk->key,
                              .flags = w32 ? FERRY_BTL_ATOMIC_FLAG_32BIT : 0,
                              .local = &fetched[next], .heap = heap};
                if (w32)
                    fetched[next] = 0xffffffff00000000ull; /* the upper half must stay */
                done[next] = (at_done_t){.s = s, .pending = &pending};
                int rc = at_start(s, r, &q, &done[next]);
                if (rc == FERRY_ERR_NO_RESOURCE) {
                    no_resource_seen = true;
                    break;
                }
                if (rc == FERRY_OK) {
                    pending++;
                } else if (!CT_CHECK(s, rc == FERRY_BTL_DONE,
                                     "fetch-and-add %zu to rank %d: %d (%s)", next, r, rc,
                                     ferry_strerror(rc))) {
                    goto finish;
                }
                next++;
            }
            /* The target's own CPU atomics, interleaved with everyone's. */
            if (local_done < AC_LOCAL && i == 0) {
                __atomic_fetch_add(c64, 1, __ATOMIC_SEQ_CST);
                __atomic_fetch_add(c32, 1, __ATOMIC_SEQ_CST);
                local_done++;
            }
            if (!ct_step(s, &dl, "fetch-and-adds"))
                goto finish;
        }
        while (i == 0 && local_done < AC_LOCAL) {
            __atomic_fetch_add(c64, 1, __ATOMIC_SEQ_CST);
            __atomic_fetch_add(c32, 1, __ATOMIC_SEQ_CST);
            local_done++;
        }
        (void)no_resource_seen;
        /* Every completion OK; the values this rank fetched from one counter
         * are all different (each add saw another value). */
        for (int width = 0; width < 2; width++) {
            uint64_t *vals = malloc(AC_ADDS * sizeof(*vals));
            size_t nv = 0;
            for (size_t k = (size_t)width; k < 2 * AC_ADDS; k += 2) {
                if (!CT_CHECK(s, done[k].status == FERRY_OK,
                              "fetch-and-add %zu to rank %d completed with %d (%s)", k, r,
                              done[k].status, ferry_strerror(done[k].status)))
                    continue;
                if (width == 1)
                    CT_CHECK(s, (fetched[k] >> 32) == 0xffffffffu,
                             "a 32-bit fetch-and-add wrote more than 4 bytes of its result "
                             "(0x%016llx)",
                             (unsigned long long)fetched[k]);
                vals[nv++] = width == 1 ? (uint32_t)fetched[k] : fetched[k];
            }
            for (size_t a = 0; a < nv; a++)
                for (size_t b = a + 1; b < nv; b++)
                    if (!CT_CHECK(s, vals[a] != vals[b],
                                  "two %s fetch-and-adds to rank %d both fetched %llu",
                                  width ? "32-bit" : "64-bit", r, (unsigned long long)vals[a])) {
                        a = nv;
                        break;
                    }
            free(vals);
        }
    }
finish:
    ct_case_finish(s);
    if (s->case_failures == 0) {
        /* Every reachable rank (reach is symmetric here) added AC_ADDS to
         * each of our counters; we added AC_LOCAL once we had a peer. */
        uint64_t want = (uint64_t)s->nreach * AC_ADDS + (s->nreach > 0 ? AC_LOCAL : 0);
        CT_CHECK(s, *c64 == want, "%s memory: the 64-bit counter is %llu, not %llu",
                 heap ? "mem_alloc" : "ordinary", (unsigned long long)*c64,
                 (unsigned long long)want);
        CT_CHECK(s, *c32 == (uint32_t)want, "%s memory: the 32-bit counter is %u, not %llu",
                 heap ? "mem_alloc" : "ordinary", (unsigned)*c32, (unsigned long long)want);
        for (size_t b = 12; b < w.len; b++)
            if (!CT_CHECK(s, w.base[b] == 0, "byte %zu beside the counters is 0x%02x", b,
                          w.base[b]))
                break;
    }
    free(fetched);
    free(done);
    at_win_close(s, &w);
}

ct_result_t ct_case_atomic_counter(ct_suite_t *s)
{
    if (at_skip(s))
        return CT_RESULT_SKIP;
    if (!at_supports(s, FERRY_BTL_ATOMIC_SUPPORTS_ADD | FERRY_BTL_ATOMIC_SUPPORTS_32BIT)) {
        printf("skip %s: atomic_flags 0x%x lack add or 32bit\n", s->case_name,
               (unsigned)s->attr->atomic_flags);
        return CT_RESULT_SKIP;
    }
    ac_run(s, false);
    if (ct_has(s, FERRY_BTL_FLAG_MEM_ALLOC))
        ac_run(s, true);
    return CT_RESULT_RUN;
}

/* ---- atomic_lock ------------------------------------------------------------------------ */

#define AL_ROUNDS 40

static void al_run(ct_suite_t *s, bool heap)
{
    at_win_t w;
    const uint32_t acc =
        FERRY_ACCESS_REMOTE_ATOMIC | FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE;
    if (!at_win_open(s, &w, 4096, acc, heap))
        return;
    memset(w.base, 0, w.len);
    uint64_t *counter = (uint64_t *)(w.base + 64); /* plain: only put and get touch it */
    ct_case_begin(s, ct_seq_rx, NULL);
    if (!ct_exchange_rkey(s, 0, w.reg))
        goto finish;
    uint64_t me = (uint64_t)s->rank + 1;
    int rounds = s->nreach > 4 ? AL_ROUNDS / 4 : AL_ROUNDS;
    for (int round = 0; round < rounds; round++) {
        for (int i = 0; i < s->nreach; i++) {
            int r = s->reach[i];
            const ct_rkey_t *rk = &s->peer[r].rkey[0];
            ct_deadline_t dl = ct_deadline();
            int rc;
            /* Acquire: 0 -> me. */
            for (;;) {
                uint64_t old = 0;
                at_req_t q = {.kind = AT_CSWAP, .compare = 0, .operand = me, .raddr = rk->addr,
                              .key = rk->key, .local = &old};
                rc = at_do(s, r, &q);
                if (!CT_CHECK_RC(s, rc, FERRY_OK, "lock compare-and-swap"))
                    goto finish;
                if (old == 0)
                    break;
                CT_CHECK(s, old != me, "rank %d's lock was held by this rank already", r);
                if (old == me || !ct_step(s, &dl, "the lock"))
                    goto finish;
            }
            uint64_t v = 0;
            if (!CT_CHECK(s, ct_get_all(s, r, NULL, &v, sizeof(v), rk->addr + 64, rk->key),
                          "get of rank %d's counter under the lock", r))
                goto finish;
            v++;
            if (!CT_CHECK(s, ct_put_all(s, r, NULL, &v, sizeof(v), rk->addr + 64, rk->key),
                          "put of rank %d's counter under the lock", r))
                goto finish;
            /* Release: me -> 0; nobody else may have taken it meanwhile. */
            uint64_t old = 0;
            at_req_t q = {.kind = AT_CSWAP, .compare = me, .operand = 0, .raddr = rk->addr,
                          .key = rk->key, .local = &old};
            rc = at_do(s, r, &q);
            if (!CT_CHECK_RC(s, rc, FERRY_OK, "unlock compare-and-swap") ||
                !CT_CHECK(s, old == me, "rank %d's lock held %llu while this rank (%llu) held it",
                          r, (unsigned long long)old, (unsigned long long)me))
                goto finish;
        }
    }
finish:
    ct_case_finish(s);
    if (s->case_failures == 0) {
        uint64_t want = (uint64_t)s->nreach * (uint64_t)(s->nreach > 4 ? AL_ROUNDS / 4 : AL_ROUNDS);
        CT_CHECK(s, *counter == want,
                 "%s memory: the counter under the lock is %llu, not %llu (updates lost)",
                 heap ? "mem_alloc" : "ordinary", (unsigned long long)*counter,
                 (unsigned long long)want);
        CT_CHECK(s, *(uint64_t *)w.base == 0, "the lock is still held (%llu)",
                 (unsigned long long)*(uint64_t *)w.base);
    }
    at_win_close(s, &w);
}

ct_result_t ct_case_atomic_lock(ct_suite_t *s)
{
    if (at_skip(s))
        return CT_RESULT_SKIP;
    if (!ct_has(s, FERRY_BTL_FLAG_PUT) || !ct_has(s, FERRY_BTL_FLAG_GET)) {
        printf("skip %s: the plain counter needs PUT and GET\n", s->case_name);
        return CT_RESULT_SKIP;
    }
    al_run(s, false);
    if (ct_has(s, FERRY_BTL_FLAG_MEM_ALLOC))
        al_run(s, true);
    return CT_RESULT_RUN;
}

/* ---- atomic_ops ------------------------------------------------------------------------- */

typedef struct ao_case {
    const char *name;
    enum at_kind kind;
    uint32_t op;
    uint32_t bit; /* what attr.atomic_flags must have */
} ao_case_t;

static const ao_case_t ao_cases[] = {
    {"add", AT_FOP, FERRY_BTL_ATOMIC_ADD, FERRY_BTL_ATOMIC_SUPPORTS_ADD},
    {"and", AT_FOP, FERRY_BTL_ATOMIC_AND, FERRY_BTL_ATOMIC_SUPPORTS_AND},
    {"or", AT_FOP, FERRY_BTL_ATOMIC_OR, FERRY_BTL_ATOMIC_SUPPORTS_OR},
    {"xor", AT_FOP, FERRY_BTL_ATOMIC_XOR, FERRY_BTL_ATOMIC_SUPPORTS_XOR},
    {"land", AT_FOP, FERRY_BTL_ATOMIC_LAND, FERRY_BTL_ATOMIC_SUPPORTS_LAND},
    {"lor", AT_FOP, FERRY_BTL_ATOMIC_LOR, FERRY_BTL_ATOMIC_SUPPORTS_LOR},
    {"lxor", AT_FOP, FERRY_BTL_ATOMIC_LXOR, FERRY_BTL_ATOMIC_SUPPORTS_LXOR},
    {"swap", AT_FOP, FERRY_BTL_ATOMIC_SWAP, FERRY_BTL_ATOMIC_SUPPORTS_SWAP},
    {"min", AT_FOP, FERRY_BTL_ATOMIC_MIN, FERRY_BTL_ATOMIC_SUPPORTS_MIN},
    {"max", AT_FOP, FERRY_BTL_ATOMIC_MAX, FERRY_BTL_ATOMIC_SUPPORTS_MAX},
    {"cswap", AT_CSWAP, 0, FERRY_BTL_ATOMIC_SUPPORTS_CSWAP},
};
#define AO_NCASES (sizeof(ao_cases) / sizeof(ao_cases[0]))

/* Values that probe signs, the 32-bit boundary and logical truth. */
static const uint64_t ao_values[] = {0,
                                     1,
                                     5,
                                     0xffffffffffffffffull,
                                     0x8000000000000000ull,
                                     0x7fffffff80000000ull,
                                     0x00000000ffffffffull,
                                     0x0000000080000000ull,
                                     0x123456789abcdef0ull,
                                     0xfffffffe7fffffffull};
#define AO_NVALUES (sizeof(ao_values) / sizeof(ao_values[0]))

/* The model: what op leaves given old and operand, at a width. */
static uint64_t ao_model(uint32_t op, uint64_t old, uint64_t x, bool w32)
{
    uint64_t m = w32 ? 0xffffffffull : ~0ull;
    old &= m;
    x &= m;
    int64_t so = w32 ? (int64_t)(int32_t)(uint32_t)old : (int64_t)old;
    int64_t sx = w32 ? (int64_t)(int32_t)(uint32_t)x : (int64_t)x;
    switch (op) {
    case FERRY_BTL_ATOMIC_ADD:
        return (old + x) & m;
    case FERRY_BTL_ATOMIC_AND:
        return old & x;
    case FERRY_BTL_ATOMIC_OR:
        return old | x;
    case FERRY_BTL_ATOMIC_XOR:
        return old ^ x;
    case FERRY_BTL_ATOMIC_LAND:
        return (old != 0) && (x != 0);
    case FERRY_BTL_ATOMIC_LOR:
        return (old != 0) || (x != 0);
    case FERRY_BTL_ATOMIC_LXOR:
        return (old != 0) != (x != 0);
    case FERRY_BTL_ATOMIC_SWAP:
        return x;
    case FERRY_BTL_ATOMIC_MIN:
        return (sx < so ? x : old) & m;
    default:
        return (sx > so ? x : old) & m;
    }
}

/* Each rank's slot in a target's window: a 64-bit word, then two 32-bit
 * words; the test works on one word while the others are its canaries. */
#define AO_SLOT 16

static void ao_run(ct_suite_t *s, bool heap)
{
    at_win_t w;
    if (!at_win_open(s, &w, AO_SLOT * (size_t)s->size, FERRY_ACCESS_REMOTE_ATOMIC, heap))
        return;
    memset(w.base, 0, w.len);
    ct_case_begin(s, ct_seq_rx, NULL);
    if (!ct_exchange_rkey(s, 0, w.reg))
        goto finish;
    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        if (!at_few(s, r))
            continue;
        const ct_rkey_t *rk = &s->peer[r].rkey[0];
        uint64_t slot = rk->addr + (uint64_t)s->rank * AO_SLOT;
        /* The model of our slot at r: word 0 (64-bit), words 2 and 3 (32-bit). */
        uint64_t m64 = 0, m32[2] = {0, 0};
        for (size_t c = 0; c < AO_NCASES; c++) {
            const ao_case_t *oc = &ao_cases[c];
            if (!at_supports(s, oc->bit)) {
                if (i == 0)
                    ct_note(s, "SKIPPED %s: not in %s's atomic_flags (0x%x)", oc->name,
                            s->attr->name, (unsigned)s->attr->atomic_flags);
                continue;
            }
            for (int width = 0; width < 3; width++) {
                bool w32 = width > 0;
                if (w32 && !at_supports(s, FERRY_BTL_ATOMIC_SUPPORTS_32BIT))
                    continue;
                uint64_t raddr = slot + (width == 0 ? 0 : (uint64_t)(4 + 4 * width));
                uint64_t *model = width == 0 ? &m64 : &m32[width - 1];
                for (size_t a = 0; a < AO_NVALUES; a++) {
                    uint64_t x = ao_values[a];
                    uint64_t cmp = (a & 1) ? *model : ao_values[(a + 3) % AO_NVALUES];
                    /* The fetching form (or cswap), into an 8-byte canary. */
                    uint8_t res[8];
                    memset(res, AT_CANARY, sizeof(res));
                    at_req_t q = {.kind = oc->kind, .op = oc->op, .operand = x, .compare = cmp,
                                  .raddr = raddr, .key = rk->key,
                                  .flags = w32 ? FERRY_BTL_ATOMIC_FLAG_32BIT : 0, .local = res};
                    int rc = at_do(s, r, &q);
                    if (!CT_CHECK(s, rc == FERRY_OK, "%s (%s, %d-bit) at rank %d: %d (%s)",
                                  oc->name, oc->kind == AT_CSWAP ? "cswap" : "fop",
                                  w32 ? 32 : 64, r, rc, ferry_strerror(rc)))
                        goto finish;
                    uint64_t got = 0;
                    memcpy(&got, res, w32 ? 4 : 8);
                    CT_CHECK(s, got == *model,
                             "%s %d-bit at rank %d fetched 0x%llx, the model has 0x%llx",
                             oc->name, w32 ? 32 : 64, r, (unsigned long long)got,
                             (unsigned long long)*model);
                    if (w32)
                        CT_CHECK(s, res[4] == AT_CANARY && res[7] == AT_CANARY,
                                 "a 32-bit %s wrote more than 4 bytes of result", oc->name);
                    if (oc->kind == AT_CSWAP) {
                        uint64_t mask = w32 ? 0xffffffffull : ~0ull;
                        if ((cmp & mask) == *model)
                            *model = x & mask;
                    } else {
                        *model = ao_model(oc->op, *model, x, w32);
                    }
                    /* The non-fetching form, for the operations. */
                    if (oc->kind == AT_FOP) {
                        uint64_t y = ao_values[(a + 5) % AO_NVALUES];
                        at_req_t q2 = {.kind = AT_OP, .op = oc->op, .operand = y, .raddr = raddr,
                                       .key = rk->key,
                                       .flags = w32 ? FERRY_BTL_ATOMIC_FLAG_32BIT : 0};
                        rc = at_do(s, r, &q2);
                        if (!CT_CHECK(s, rc == FERRY_OK, "%s (op, %d-bit) at rank %d: %d (%s)",
                                      oc->name, w32 ? 32 : 64, r, rc, ferry_strerror(rc)))
                            goto finish;
                        *model = ao_model(oc->op, *model, y, w32);
                    }
                    /* Each fetch checked the word against the model; after the
                     * last value all three words are read back (add 0 changes
                     * nothing), so a write to a neighbour shows. */
                    if (a + 1 < AO_NVALUES)
                        continue;
                    uint64_t v64 = at_fetch(s, r, FERRY_BTL_ATOMIC_ADD, 0, false, slot, rk->key,
                                            &rc);
                    uint64_t v2 = at_fetch(s, r, FERRY_BTL_ATOMIC_ADD, 0, true, slot + 8,
                                           rk->key, &rc);
                    uint64_t v3 = at_fetch(s, r, FERRY_BTL_ATOMIC_ADD, 0, true, slot + 12,
                                           rk->key, &rc);
                    if (!CT_CHECK(s, v64 == m64 && v2 == m32[0] && v3 == m32[1],
                                  "after %s %d-bit with 0x%llx at rank %d: words 0x%llx 0x%llx "
                                  "0x%llx, the model has 0x%llx 0x%llx 0x%llx",
                                  oc->name, w32 ? 32 : 64, (unsigned long long)x, r,
                                  (unsigned long long)v64, (unsigned long long)v2,
                                  (unsigned long long)v3, (unsigned long long)m64,
                                  (unsigned long long)m32[0], (unsigned long long)m32[1]))
                        goto finish;
                }
            }
        }
    }
finish:
    ct_case_finish(s);
    at_win_close(s, &w);
}

ct_result_t ct_case_atomic_ops(ct_suite_t *s)
{
    if (at_skip(s))
        return CT_RESULT_SKIP;
    ao_run(s, false);
    if (ct_has(s, FERRY_BTL_FLAG_MEM_ALLOC))
        ao_run(s, true);
    return CT_RESULT_RUN;
}

/* ---- atomic_refusals -------------------------------------------------------------------- */

enum { AR_A, AR_RW, AR_GONE, AR_SHORT };
#define AR_LEN 64

typedef struct ar_try {
    const char *what;
    enum at_kind kind;
    uint32_t op;
    uint32_t flags;
    uint64_t raddr;
    const uint8_t *key;
    bool null_local;
    int want; /* FERRY_ERR_ACCESS or FERRY_ERR_INVALID */
} ar_try_t;

static void ar_check(ct_suite_t *s, int r, const ar_try_t *t)
{
    /* Twice: through the op and, where the module has it, atomic_direct. */
    for (int pass = 0; pass < 2; pass++) {
        uint8_t res[8];
        memset(res, AT_CANARY, sizeof(res));
        at_req_t q = {.kind = t->kind, .op = t->op, .operand = 0x1111111111111111ull,
                      .compare = 0, .raddr = t->raddr, .key = t->key, .flags = t->flags,
                      .local = t->null_local ? NULL : res};
        int rc = at_do(s, r, &q);
        if (!CT_CHECK(s, rc == t->want, "an atomic %s at rank %d: status %d (%s), want %d (%s)",
                      t->what, r, rc, ferry_strerror(rc), t->want, ferry_strerror(t->want)))
            return;
        CT_CHECK(s, res[0] == AT_CANARY && res[7] == AT_CANARY,
                 "a refused atomic %s wrote a result", t->what);
    }
}

static void ar_run(ct_suite_t *s, bool heap)
{
    at_win_t a, rw, gone, shrt;
    uint8_t gone_key[FERRY_BTL_KEY_MAX];
    uint64_t gone_addr = 0;
    bool ok = at_win_open(s, &a, AR_LEN, FERRY_ACCESS_REMOTE_ATOMIC, heap);
    ok = at_win_open(s, &rw, AR_LEN, FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE, heap) &&
         ok;
    ok = at_win_open(s, &gone, AR_LEN, FERRY_ACCESS_REMOTE_ATOMIC, heap) && ok;
    /* 12 bytes: an aligned 64-bit word at +8 runs across its end. */
    ok = at_win_open(s, &shrt, 12, FERRY_ACCESS_REMOTE_ATOMIC, false) && ok;
    if (gone.reg != NULL) {
        memcpy(gone_key, gone.reg->key, sizeof(gone_key));
        gone_addr = (uint64_t)(uintptr_t)gone.base;
        /* Released: its key must be refused. Ordinary memory stays
         * allocated (a heap goes), so a transport that wrote would show. */
        if (gone.heap) {
            at_win_close(s, &gone);
        } else {
            CT_CHECK_RC(s, s->btl->ops->deregister_mem(s->btl, gone.reg), FERRY_OK,
                        "deregister_mem");
            gone.reg = NULL;
        }
    }
    if (a.base != NULL)
        memset(a.base, AT_CANARY, AR_LEN);
    if (rw.base != NULL)
        memset(rw.base, AT_CANARY, AR_LEN);
    if (shrt.base != NULL)
        memset(shrt.base, AT_CANARY, 12);
    if (!gone.heap && gone.base != NULL)
        memset(gone.base, AT_CANARY, AR_LEN);
    ct_case_begin(s, ct_seq_rx, NULL);
    if (!ok || !ct_exchange_rkey(s, AR_A, a.reg) || !ct_exchange_rkey(s, AR_RW, rw.reg) ||
        !ct_exchange_rkey_raw(s, AR_GONE, gone_addr, AR_LEN, gone_key) ||
        !ct_exchange_rkey(s, AR_SHORT, shrt.reg))
        goto finish;
    size_t khs = s->attr->reg_handle_size;
    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        if (!at_few(s, r))
            continue;
        const ct_rkey_t *ka = &s->peer[r].rkey[AR_A];
        const ct_rkey_t *krw = &s->peer[r].rkey[AR_RW];
        const ct_rkey_t *kg = &s->peer[r].rkey[AR_GONE];
        const ct_rkey_t *ks = &s->peer[r].rkey[AR_SHORT];
        uint8_t wrong[FERRY_BTL_KEY_MAX];
        memcpy(wrong, ka->key, sizeof(wrong));
        for (size_t j = 0; j < khs; j++)
            wrong[j] ^= 0x5a;
        const uint32_t F32 = FERRY_BTL_ATOMIC_FLAG_32BIT;
        const ar_try_t tries[] = {
            {"misaligned by 1 (64-bit)", AT_FOP, FERRY_BTL_ATOMIC_ADD, 0, ka->addr + 1, ka->key,
             false, FERRY_ERR_INVALID},
            {"misaligned by 4 (64-bit)", AT_OP, FERRY_BTL_ATOMIC_ADD, 0, ka->addr + 4, ka->key,
             false, FERRY_ERR_INVALID},
            {"misaligned by 2 (32-bit)", AT_CSWAP, 0, F32, ka->addr + 2, ka->key, false,
             FERRY_ERR_INVALID},
            {"with an unknown operation", AT_FOP, 0x13, 0, ka->addr, ka->key, false,
             FERRY_ERR_INVALID},
            {"with operation 0", AT_OP, 0, 0, ka->addr, ka->key, false, FERRY_ERR_INVALID},
            {"with an unknown flag", AT_FOP, FERRY_BTL_ATOMIC_ADD, 0x4, ka->addr, ka->key, false,
             FERRY_ERR_INVALID},
            {"fetching into NULL", AT_FOP, FERRY_BTL_ATOMIC_ADD, 0, ka->addr, ka->key, true,
             FERRY_ERR_INVALID},
            {"just past the end", AT_FOP, FERRY_BTL_ATOMIC_ADD, 0, ka->addr + ka->len, ka->key,
             false, FERRY_ERR_ACCESS},
            {"8 bytes before the start", AT_FOP, FERRY_BTL_ATOMIC_SWAP, 0, ka->addr - 8, ka->key,
             false, FERRY_ERR_ACCESS},
            {"across the end (aligned)", AT_FOP, FERRY_BTL_ATOMIC_ADD, 0, ks->addr + 8, ks->key,
             false, FERRY_ERR_ACCESS},
            {"at address 0", AT_OP, FERRY_BTL_ATOMIC_ADD, 0, 0, ka->key, false,
             FERRY_ERR_ACCESS},
            {"near UINT64_MAX", AT_FOP, FERRY_BTL_ATOMIC_ADD, 0, UINT64_MAX - 7, ka->key, false,
             FERRY_ERR_ACCESS},
            {"without FERRY_ACCESS_REMOTE_ATOMIC", AT_FOP, FERRY_BTL_ATOMIC_ADD, 0, krw->addr,
             krw->key, false, FERRY_ERR_ACCESS},
            {"without the right, as cswap", AT_CSWAP, 0, 0, krw->addr + 8, krw->key, false,
             FERRY_ERR_ACCESS},
            {"without the right, 32-bit op", AT_OP, FERRY_BTL_ATOMIC_SWAP, F32, krw->addr + 4,
             krw->key, false, FERRY_ERR_ACCESS},
            {"on another registration's memory with this key", AT_FOP, FERRY_BTL_ATOMIC_ADD, 0,
             krw->addr, ka->key, false, FERRY_ERR_ACCESS},
            {"with a released registration's key", AT_FOP, FERRY_BTL_ATOMIC_ADD, 0, kg->addr,
             kg->key, false, FERRY_ERR_ACCESS},
            {"with a released key, non-fetching", AT_OP, FERRY_BTL_ATOMIC_XOR, 0, kg->addr + 8,
             kg->key, false, FERRY_ERR_ACCESS},
            {"with a wrong key", AT_FOP, FERRY_BTL_ATOMIC_ADD, 0, ka->addr, wrong, false,
             FERRY_ERR_ACCESS},
        };
        for (size_t t = 0; t < sizeof(tries) / sizeof(tries[0]); t++)
            ar_check(s, r, &tries[t]);
        /* The endpoint still works, and the refused ones changed nothing
         * of A: a valid add of 0 fetches the canary. */
        int rc;
        uint64_t v = at_fetch(s, r, FERRY_BTL_ATOMIC_ADD, 0, false, ka->addr, ka->key, &rc);
        if (CT_CHECK(s, rc == FERRY_OK, "a valid atomic at rank %d after the refusals: %d (%s)",
                     r, rc, ferry_strerror(rc)))
            CT_CHECK(s, v == 0x5c5c5c5c5c5c5c5cull,
                     "rank %d's registration changed under refused atomics (0x%llx)", r,
                     (unsigned long long)v);
    }
finish:
    ct_case_finish(s);
    if (s->case_failures == 0) {
        const at_win_t *wins[] = {&a, &rw, &shrt, &gone};
        const size_t lens[] = {AR_LEN, AR_LEN, 12, AR_LEN};
        for (size_t k = 0; k < 4; k++) {
            if (wins[k]->base == NULL || (wins[k]->heap && wins[k]->reg == NULL))
                continue;
            for (size_t b = 0; b < lens[k]; b++)
                if (!CT_CHECK(s, wins[k]->base[b] == AT_CANARY,
                              "refused atomics changed byte %zu of window %zu (0x%02x)", b, k,
                              wins[k]->base[b]))
                    break;
        }
    }
    at_win_close(s, &a);
    at_win_close(s, &rw);
    at_win_close(s, &shrt);
    if (!gone.heap && gone.base != NULL)
        free(gone.base);
}

ct_result_t ct_case_atomic_refusals(ct_suite_t *s)
{
    if (at_skip(s))
        return CT_RESULT_SKIP;
    ar_run(s, false);
    if (ct_has(s, FERRY_BTL_FLAG_MEM_ALLOC))
        ar_run(s, true);
    return CT_RESULT_RUN;
}

/* ---- atomic_revoke ---------------------------------------------------------------------- */

/* A key that worked (and that a transport may have cached: sm keeps the last
 * heap key per peer) is refused once its owner releases the registration,
 * and nothing is written through it. */
static void rv_run(ct_suite_t *s, bool heap)
{
    at_win_t w;
    if (!at_win_open(s, &w, 4096, FERRY_ACCESS_REMOTE_ATOMIC, heap))
        return;
    memset(w.base, 0, w.len);
    uint8_t *keep = w.base; /* ordinary memory stays ours after the release */
    uint64_t before = 0;
    bool released = false;
    ct_case_begin(s, ct_seq_rx, NULL);
    if (!ct_exchange_rkey(s, 0, w.reg))
        goto finish;
    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        const ct_rkey_t *rk = &s->peer[r].rkey[0];
        int rc;
        for (int k = 0; k < 3; k++) {
            at_fetch(s, r, FERRY_BTL_ATOMIC_ADD, 1, false, rk->addr, rk->key, &rc);
            CT_CHECK_RC(s, rc, FERRY_OK, "an atomic before the release");
        }
    }
    CT_CHECK_RC(s, ferry_barrier(s->ctx), FERRY_OK, "ferry_barrier before the release");
    before = *(uint64_t *)w.base;
    released = true;
    if (heap) {
        at_win_close(s, &w);
        keep = NULL;
    } else {
        CT_CHECK_RC(s, s->btl->ops->deregister_mem(s->btl, w.reg), FERRY_OK, "deregister_mem");
        w.reg = NULL;
    }
    CT_CHECK_RC(s, ferry_barrier(s->ctx), FERRY_OK, "ferry_barrier after the release");
    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        const ct_rkey_t *rk = &s->peer[r].rkey[0];
        int rc;
        at_fetch(s, r, FERRY_BTL_ATOMIC_ADD, 1000, false, rk->addr, rk->key, &rc);
        CT_CHECK(s, rc == FERRY_ERR_ACCESS,
                 "a fetch-and-add through rank %d's released %s key: %d (%s), not "
                 "FERRY_ERR_ACCESS",
                 r, heap ? "mem_alloc" : "ordinary", rc, ferry_strerror(rc));
        at_req_t q = {.kind = AT_OP, .op = FERRY_BTL_ATOMIC_ADD, .operand = 1000,
                      .raddr = rk->addr + 8, .key = rk->key};
        rc = at_do(s, r, &q);
        CT_CHECK(s, rc == FERRY_ERR_ACCESS,
                 "an add through rank %d's released key: %d (%s), not FERRY_ERR_ACCESS", r, rc,
                 ferry_strerror(rc));
    }
finish:
    ct_case_finish(s);
    if (!released)
        at_win_close(s, &w);
    else if (keep != NULL)
        CT_CHECK(s, *(uint64_t *)keep == before && *(uint64_t *)(keep + 8) == 0,
                 "atomics through a released key changed the memory (%llu, was %llu)",
                 (unsigned long long)*(uint64_t *)keep, (unsigned long long)before);
    if (released && keep != NULL)
        free(keep);
}

ct_result_t ct_case_atomic_revoke(ct_suite_t *s)
{
    if (at_skip(s))
        return CT_RESULT_SKIP;
    rv_run(s, false);
    if (ct_has(s, FERRY_BTL_FLAG_MEM_ALLOC))
        rv_run(s, true);
    return CT_RESULT_RUN;
}

/* ---- atomic_by_owner -------------------------------------------------------------------- */

#define AB_ADDS 300  /* fetch-and-adds of each rank to each target */
#define AB_LOCAL 300 /* the owner's plain increments */

static void ab_run(ct_suite_t *s)
{
    at_win_t w;
    if (!at_win_open(s, &w, 4096, FERRY_ACCESS_REMOTE_ATOMIC, true))
        return;
    memset(w.base, 0, w.len);
    ferry_btl_reg_t *reg = NULL;
    int rc = s->btl->ops->register_mem(
        s->btl, NULL, w.base, 64, FERRY_ACCESS_REMOTE_ATOMIC | FERRY_BTL_ACCESS_TARGET_ATOMICS,
        &reg);
    if (!CT_CHECK(s, rc == FERRY_OK, "register_mem of mem_alloc memory with "
                                     "FERRY_BTL_ACCESS_TARGET_ATOMICS: %d (%s)",
                  rc, ferry_strerror(rc))) {
        at_win_close(s, &w);
        return;
    }
    volatile uint64_t *counter = (volatile uint64_t *)w.base;
    uint64_t *fetched = calloc(AB_ADDS, sizeof(*fetched));
    at_done_t *done = calloc(AB_ADDS, sizeof(*done));
    if (fetched == NULL || done == NULL) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    int local_done = 0;
    ct_case_begin(s, ct_seq_rx, NULL);
    if (!ct_exchange_rkey(s, 0, reg))
        goto finish;
    for (int i = 0; i < s->nreach; i++) {
        int r = s->reach[i];
        const ct_rkey_t *rk = &s->peer[r].rkey[0];
        int pending = 0;
        size_t next = 0;
        ct_deadline_t dl = ct_deadline();
        memset(done, 0, AB_ADDS * sizeof(*done));
        while (next < AB_ADDS || pending > 0) {
            while (next < AB_ADDS && pending < 16) {
                at_req_t q = {.kind = AT_FOP, .op = FERRY_BTL_ATOMIC_ADD, .operand = 1,
                              .raddr = rk->addr, .key = rk->key, .local = &fetched[next]};
                done[next] = (at_done_t){.s = s, .pending = &pending};
                rc = at_start(s, r, &q, &done[next]);
                if (rc == FERRY_ERR_NO_RESOURCE)
                    break;
                if (rc == FERRY_OK) {
                    pending++;
                } else if (!CT_CHECK(s, rc == FERRY_BTL_DONE && r == s->rank,
                                     "fetch-and-add %zu to rank %d: %d (%s)%s", next, r, rc,
                                     ferry_strerror(rc),
                                     rc == FERRY_BTL_DONE ? ": done by this CPU on the "
                                                            "owner's memory"
                                                          : "")) {
                    goto finish;
                }
                next++;
            }
            /* A plain read and write, between two progress calls, with a
             * pause between them: a peer's atomic applied directly to the
             * memory meanwhile would be lost. */
            if (local_done < AB_LOCAL) {
                uint64_t v = *counter;
                for (volatile int spin = 0; spin < 2000; spin++)
                    ;
                *counter = v + 1;
                local_done++;
            }
            if (!ct_step(s, &dl, "fetch-and-adds"))
                goto finish;
        }
        for (size_t k = 0; k < AB_ADDS; k++)
            if (!CT_CHECK(s, done[k].status == FERRY_OK,
                          "fetch-and-add %zu to rank %d completed with %d (%s)", k, r,
                          done[k].status, ferry_strerror(done[k].status)))
                break;
    }
    while (local_done < AB_LOCAL) {
        *counter = *counter + 1;
        local_done++;
    }
finish:
    ct_case_finish(s);
    if (s->case_failures == 0) {
        uint64_t want = (uint64_t)s->nreach * AB_ADDS + AB_LOCAL;
        CT_CHECK(s, *counter == want,
                 "the owner-executed counter is %llu, not %llu: a peer's atomic was applied "
                 "beside the owner's plain increments",
                 (unsigned long long)*counter, (unsigned long long)want);
    }
    CT_CHECK_RC(s, s->btl->ops->deregister_mem(s->btl, reg), FERRY_OK, "deregister_mem");
    free(fetched);
    free(done);
    at_win_close(s, &w);
}

ct_result_t ct_case_atomic_by_owner(ct_suite_t *s)
{
    if (at_skip(s))
        return CT_RESULT_SKIP;
    if (!ct_has(s, FERRY_BTL_FLAG_MEM_ALLOC) ||
        !at_supports(s, FERRY_BTL_ATOMIC_SUPPORTS_ADD)) {
        printf("skip %s: no mem_alloc memory, or no add\n", s->case_name);
        return CT_RESULT_SKIP;
    }
    ab_run(s);
    return CT_RESULT_RUN;
}
