/*
 * The ferry BTL's modules driven directly, through the function pointers
 * Open MPI would call, after MPI_Init loaded them: the modules are found on
 * Open MPI's list of initialized BTL modules (component "ferry"), and their
 * state (statistics, endpoints) is read through src/ompi/btl_ferry.h.
 *
 *   mpi_btl -o    the process's own memory (endpoint NULL, as osc/rdma
 *                 gives for its own window): on every ferry module with
 *                 RDMA, the valid puts, gets and atomics are done and change
 *                 exactly the bytes they should; every hostile remote handle
 *                 or range is refused (OPAL_ERR_BAD_PARAM, OPAL_ERR_PERM,
 *                 OPAL_ERR_NOT_AVAILABLE for a misaligned atomic) with no
 *                 callback and no byte touched; guard bytes around every
 *                 region stay as they were; the module's "own" count grows
 *                 by the valid operations alone. Any rank count. It prints
 *                 "registration cache on" or "off" (a deregistered key
 *                 stays usable while the cache keeps it: with the cache the
 *                 region is unmapped instead, which must end it).
 *   mpi_btl -w    the wait queue (run with FERRY_BTL=tcp and
 *                 FERRY_TCP_RDMA_MAX_INFLIGHT=1, 2 ranks): every rank
 *                 issues N puts to its peer back to back, then N gets, with
 *                 no progress between; the transport takes the first only,
 *                 so N - 1 wait in the component (its "waited" count must
 *                 grow by exactly that), the puts complete through
 *                 btl_flush, the gets through progress, all in the order
 *                 issued, and every byte arrives right.
 *   mpi_btl -d    a peer dies with operations waiting (2 ranks, tcp, in-flight
 *                 limit 1, the last rank under kill_wrap.sh, both on one
 *                 host): rank 0 issues N gets from rank 1, which then
 *                 SIGKILLs itself without having progressed; every one of
 *                 them must complete (none left waiting), in order, with an
 *                 error, and the module must report the lost
 *                 peer to the error callback (the test's own, so that the
 *                 job goes on). Rank 0 then leaves without MPI_Finalize.
 *
 * Each mode prints "btl: ... passed" on rank 0 when everything is right; any
 * failed check is printed and aborts the job. Without any ferry module the
 * program prints "SKIPPED: ..." and exits 77.
 */
#include <mpi.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "btl_ferry.h"

#include "opal/mca/btl/base/base.h"
#include "opal/runtime/opal_progress.h"

static int rank, nranks;
static const char *where = "";

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "rank %d: %s: check failed at line %d: %s: ", rank, where,       \
                    __LINE__, #cond);                                                        \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fprintf(stderr, "\n");                                                           \
            MPI_Abort(MPI_COMM_WORLD, 3);                                                    \
        }                                                                                    \
    } while (0)

static int find_modules(mca_btl_ferry_module_t **out, int max)
{
    int n = 0;
    mca_btl_base_selected_module_t *sm;
    OPAL_LIST_FOREACH (sm, &mca_btl_base_modules_initialized, mca_btl_base_selected_module_t) {
        if (strcmp(sm->btl_component->btl_version.mca_component_name, "ferry") == 0 && n < max)
            out[n++] = (mca_btl_ferry_module_t *)sm->btl_module;
    }
    return n;
}

/* ---- completions ---- */

enum { MAXOPS = 64 };
static struct {
    int calls;
    int status[MAXOPS];
    intptr_t order[MAXOPS]; /* the cbdata of each completion, in completion order */
} done;

static void on_done(struct mca_btl_base_module_t *btl, struct mca_btl_base_endpoint_t *ep,
                    void *local, struct mca_btl_base_registration_handle_t *lh, void *ctx,
                    void *cbdata, int status)
{
    if (done.calls < MAXOPS) {
        done.status[done.calls] = status;
        done.order[done.calls] = (intptr_t)cbdata;
    }
    done.calls++;
}

static void done_reset(void)
{
    memset(&done, 0, sizeof(done));
}

/* ---- regions with guards ----
 *
 * A region of LEN bytes with GUARD bytes either side, all in one page-sized
 * mapping of three parts: the guards are the end of the first page and the
 * start of the last, the region a page of its own (so that it can be
 * unmapped alone). shadow is what the region must hold. */
enum { GUARD = 64, LEN = 4096 };
typedef struct region {
    const char *name;
    unsigned char *map; /* 3 pages */
    unsigned char *mem; /* the middle page */
    unsigned char shadow[LEN];
    bool unmapped;
    mca_btl_base_registration_handle_t *h;
} region_t;

static size_t page;

static void region_init(region_t *r, const char *name, unsigned seed)
{
    r->name = name;
    r->map = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(r->map != MAP_FAILED, "mmap of region %s", name);
    r->mem = r->map + page;
    memset(r->map + page - GUARD, 0xA5, GUARD);
    memset(r->map + 2 * page, 0x5A, GUARD);
    for (size_t i = 0; i < LEN; i++)
        r->shadow[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 8));
    memcpy(r->mem, r->shadow, LEN);
    r->unmapped = false;
    r->h = NULL;
}

static void region_check(const region_t *r, const char *after)
{
    for (size_t i = 0; i < GUARD; i++) {
        CHECK(r->map[page - GUARD + i] == 0xA5, "%s: guard byte %zu before region %s changed",
              after, GUARD - i, r->name);
        CHECK(r->map[2 * page + i] == 0x5A, "%s: guard byte %zu after region %s changed", after,
              i, r->name);
    }
    if (r->unmapped)
        return;
    for (size_t i = 0; i < LEN; i++)
        CHECK(r->mem[i] == r->shadow[i], "%s: byte %zu of region %s is 0x%02x, expected 0x%02x",
              after, i, r->name, r->mem[i], r->shadow[i]);
}

/* ---- the process's own memory ---- */

enum { R_RW, R_RO, R_WO, R_NOAMO, R_GONE, R_LOCAL, R_COUNT };
static region_t regs[R_COUNT];
static mca_btl_ferry_module_t *cur;

static void check_all(const char *after)
{
    for (int i = 0; i < R_COUNT; i++)
        region_check(&regs[i], after);
}

static uint64_t at(const region_t *r, size_t off)
{
    return (uint64_t)(uintptr_t)(r->mem + off);
}

/* A put or get with endpoint NULL that must be refused with want. */
static void own_refused(const char *what, bool is_put, uint64_t remote, size_t size,
                        mca_btl_base_registration_handle_t *rh, int want)
{
    mca_btl_base_module_t *b = &cur->super;
    uint64_t own = cur->stats.own;
    done_reset();
    int rc = is_put ? b->btl_put(b, NULL, regs[R_LOCAL].mem, remote, NULL, rh, size, 0,
                                 MCA_BTL_NO_ORDER, on_done, NULL, NULL)
                    : b->btl_get(b, NULL, regs[R_LOCAL].mem, remote, NULL, rh, size, 0,
                                 MCA_BTL_NO_ORDER, on_done, NULL, NULL);
    opal_progress();
    CHECK(rc == want, "%s %s: returned %d, expected %d", is_put ? "put" : "get", what, rc, want);
    CHECK(done.calls == 0, "%s %s: refused, yet its callback ran", is_put ? "put" : "get", what);
    CHECK(cur->stats.own == own, "%s %s: refused, yet counted as own", is_put ? "put" : "get",
          what);
    check_all(what);
}

/* A valid put or get with endpoint NULL: done, the callback run once with
 * success, and the shadows say what changed. */
static void own_done(const char *what, bool is_put, region_t *r, size_t off, size_t size,
                     size_t loff)
{
    mca_btl_base_module_t *b = &cur->super;
    region_t *l = &regs[R_LOCAL];
    uint64_t own = cur->stats.own;
    done_reset();
    int rc = is_put ? b->btl_put(b, NULL, l->mem + loff, at(r, off), NULL, r->h, size, 0,
                                 MCA_BTL_NO_ORDER, on_done, NULL, (void *)7)
                    : b->btl_get(b, NULL, l->mem + loff, at(r, off), NULL, r->h, size, 0,
                                 MCA_BTL_NO_ORDER, on_done, NULL, (void *)7);
    CHECK(rc == OPAL_SUCCESS || rc == 1, "%s %s: returned %d", is_put ? "put" : "get", what, rc);
    for (int i = 0; i < 1000 && rc == OPAL_SUCCESS && done.calls == 0; i++)
        opal_progress();
    CHECK(done.calls == (rc == 1 ? 0 : 1), "%s %s: %d callbacks after return %d",
          is_put ? "put" : "get", what, done.calls, rc);
    CHECK(done.calls == 0 || (done.status[0] == OPAL_SUCCESS && done.order[0] == 7),
          "%s %s: callback with status %d", is_put ? "put" : "get", what, done.status[0]);
    CHECK(cur->stats.own == own + 1, "%s %s: own count went from %llu to %llu",
          is_put ? "put" : "get", what, (unsigned long long)own,
          (unsigned long long)cur->stats.own);
    if (is_put)
        memcpy(r->shadow + off, l->shadow + loff, size);
    else
        memcpy(l->shadow + loff, r->shadow + off, size);
    check_all(what);
}

/* An atomic with endpoint NULL: kind 0 atomic_op, 1 atomic_fop, 2 cswap.
 * want: the return expected (1 or OPAL_SUCCESS for a valid one, which
 * the shadow then follows; an error for a refused one). */
enum { K_OP, K_FOP, K_CSWAP };
static void own_amo(const char *what, int kind, uint64_t remote,
                    mca_btl_base_registration_handle_t *rh, mca_btl_base_atomic_op_t op,
                    uint64_t operand, uint64_t compare, bool w32, int want, region_t *r,
                    size_t off)
{
    mca_btl_base_module_t *b = &cur->super;
    region_t *l = &regs[R_LOCAL];
    int flags = w32 ? MCA_BTL_ATOMIC_FLAG_32BIT : 0;
    uint64_t own = cur->stats.own;
    size_t w = w32 ? 4 : 8;
    done_reset();
    int rc;
    if (kind == K_OP)
        rc = b->btl_atomic_op(b, NULL, remote, rh, op, operand, flags, MCA_BTL_NO_ORDER, on_done,
                              NULL, NULL);
    else if (kind == K_FOP)
        rc = b->btl_atomic_fop(b, NULL, l->mem, remote, NULL, rh, op, operand, flags,
                               MCA_BTL_NO_ORDER, on_done, NULL, NULL);
    else
        rc = b->btl_atomic_cswap(b, NULL, l->mem, remote, NULL, rh, compare, operand, flags,
                                 MCA_BTL_NO_ORDER, on_done, NULL, NULL);
    bool ok = rc == 1 || rc == OPAL_SUCCESS;
    bool want_ok = want == 1 || want == OPAL_SUCCESS;
    CHECK(ok == want_ok && (!want_ok || rc == want), "atomic %s: returned %d, expected %d", what,
          rc, want);
    for (int i = 0; i < 1000 && rc == OPAL_SUCCESS && done.calls == 0; i++)
        opal_progress();
    CHECK(done.calls == (rc == OPAL_SUCCESS ? 1 : 0), "atomic %s: %d callbacks after return %d",
          what, done.calls, rc);
    CHECK(done.calls == 0 || done.status[0] == OPAL_SUCCESS, "atomic %s: callback status %d",
          what, done.status[0]);
    CHECK(cur->stats.own == own + (want_ok ? 1 : 0), "atomic %s: own count went from %llu to %llu",
          what, (unsigned long long)own, (unsigned long long)cur->stats.own);
    if (want_ok) {
        uint64_t old = 0, now;
        memcpy(&old, r->shadow + off, w);
        switch (kind == K_CSWAP ? (mca_btl_base_atomic_op_t)-1 : op) {
        case MCA_BTL_ATOMIC_ADD: now = old + operand; break;
        case MCA_BTL_ATOMIC_SWAP: now = operand; break;
        case MCA_BTL_ATOMIC_XOR: now = old ^ operand; break;
        default: now = (w32 ? (uint32_t)old == (uint32_t)compare : old == compare) ? operand : old;
        }
        memcpy(r->shadow + off, &now, w);
        if (kind != K_OP)
            memcpy(l->shadow, &old, w); /* the value before, at its own width */
    }
    check_all(what);
}

static mca_btl_base_registration_handle_t *reg(region_t *r, uint32_t flags)
{
    mca_btl_base_module_t *b = &cur->super;
    r->h = b->btl_register_mem(b, MCA_BTL_ENDPOINT_ANY, r->mem, LEN, flags);
    CHECK(r->h != NULL, "register_mem of region %s with flags 0x%x failed", r->name, flags);
    return r->h;
}

/* A handle holding only key bytes (what a peer holds of a registration). */
static void key_copy(mca_btl_base_registration_handle_t *to,
                     const mca_btl_base_registration_handle_t *from)
{
    memset(to, 0, sizeof(*to));
    memcpy(to->key, from->key, cur->super.btl_registration_handle_size);
}

/* Random key bytes, unlike those of any live registration of the module. */
static void key_random(mca_btl_base_registration_handle_t *to)
{
    size_t klen = cur->super.btl_registration_handle_size;
    for (;;) {
        memset(to, 0, sizeof(*to));
        for (size_t i = 0; i < klen; i++)
            to->key[i] = (uint8_t)(rand() >> 7);
        bool clash = false;
        for (const mca_btl_base_registration_handle_t *h = cur->regs; h != NULL; h = h->next)
            clash |= memcmp(h->key, to->key, klen) == 0;
        if (!clash)
            return;
    }
}

static void own_module(mca_btl_ferry_module_t *mod)
{
    mca_btl_base_module_t *b = &mod->super;
    cur = mod;
    where = mod->fbtl->attr.name;
    const uint32_t rd = MCA_BTL_REG_FLAG_REMOTE_READ, wr = MCA_BTL_REG_FLAG_REMOTE_WRITE,
                   amo = MCA_BTL_REG_FLAG_REMOTE_ATOMIC;
    static const char *names[R_COUNT] = {"rw", "ro", "wo", "noamo", "gone", "local"};
    for (int i = 0; i < R_COUNT; i++)
        region_init(&regs[i], names[i], (unsigned)(i + 1 + 10 * rank));
    uint64_t own0 = mod->stats.own;
    reg(&regs[R_RW], rd | wr | amo);
    reg(&regs[R_RO], rd);
    reg(&regs[R_WO], wr);
    reg(&regs[R_NOAMO], rd | wr);
    region_t *rw = &regs[R_RW];

    /* Whether the registration cache keeps what is deregistered: a second
     * registration of the same memory is then a hit. */
    reg(&regs[R_GONE], rd | wr | amo);
    mca_btl_base_registration_handle_t gone;
    key_copy(&gone, regs[R_GONE].h);
    CHECK(b->btl_deregister_mem(b, regs[R_GONE].h) == OPAL_SUCCESS, "deregister_mem failed");
    uint64_t hits = mod->stats.reg_hits;
    reg(&regs[R_GONE], rd | wr | amo);
    bool cache = mod->stats.reg_hits == hits + 1;
    CHECK(b->btl_deregister_mem(b, regs[R_GONE].h) == OPAL_SUCCESS, "deregister_mem failed");
    regs[R_GONE].h = NULL;
    if (rank == 0)
        printf("btl: module %s: registration cache %s\n", where, cache ? "on" : "off");

    bool has_put = b->btl_put != NULL, has_get = b->btl_get != NULL;
    int valid = 0;
    for (int p = 0; p < 2; p++) {
        bool is_put = p == 0;
        if (is_put ? !has_put : !has_get)
            continue;
        /* The valid ones: inside, at the very end, the whole region. */
        own_done("inside", is_put, rw, 128, 256, 64);
        own_done("last byte", is_put, rw, LEN - 1, 1, 5);
        own_done("whole region", is_put, rw, 0, LEN, 0);
        own_done("read-write without atomics", is_put, &regs[R_NOAMO], 8, 100, 300);
        own_done(is_put ? "write-only region" : "read-only region", is_put,
                 &regs[is_put ? R_WO : R_RO], 1000, 3000, 17);
        valid += 5;
        /* Hostile handles and ranges. */
        mca_btl_base_registration_handle_t fake;
        own_refused("no remote handle", is_put, at(rw, 0), 8, NULL, OPAL_ERR_BAD_PARAM);
        own_refused("size 0", is_put, at(rw, 0), 0, rw->h, OPAL_ERR_BAD_PARAM);
        key_random(&fake);
        own_refused("made-up handle", is_put, at(rw, 0), 8, &fake, OPAL_ERR_BAD_PARAM);
        own_refused("range past the end", is_put, at(rw, LEN - 8), 16, rw->h, OPAL_ERR_BAD_PARAM);
        own_refused("range just past the end", is_put, at(rw, LEN), 1, rw->h, OPAL_ERR_BAD_PARAM);
        own_refused("range before the start", is_put, at(rw, 0) - 8, 16, rw->h,
                    OPAL_ERR_BAD_PARAM);
        own_refused("range before the start (end inside)", is_put, at(rw, 0) - 1, LEN, rw->h,
                    OPAL_ERR_BAD_PARAM);
        own_refused("address wrapping", is_put, UINT64_MAX - 7, 16, rw->h, OPAL_ERR_BAD_PARAM);
        own_refused("address + size wrapping", is_put, at(rw, 16), (size_t)0 - 16, rw->h,
                    OPAL_ERR_BAD_PARAM);
        own_refused("size larger than the region", is_put, at(rw, 0), LEN + 1, rw->h,
                    OPAL_ERR_BAD_PARAM);
        own_refused(is_put ? "read-only region" : "write-only region", is_put,
                    at(&regs[is_put ? R_RO : R_WO], 0), 8, regs[is_put ? R_RO : R_WO].h,
                    OPAL_ERR_PERM);
        /* Another registration's range with this one's key. */
        own_refused("another region's range", is_put, at(&regs[R_NOAMO], 0), 8, rw->h,
                    OPAL_ERR_BAD_PARAM);
        if (!cache)
            own_refused("deregistered handle", is_put, at(&regs[R_GONE], 0), 8, &gone,
                        OPAL_ERR_BAD_PARAM);
    }

    bool has_amo = b->btl_atomic_op != NULL;
    bool has_fop = b->btl_atomic_fop != NULL, has_cswap = b->btl_atomic_cswap != NULL;
    bool w32ok = (b->btl_atomic_flags & MCA_BTL_ATOMIC_SUPPORTS_32BIT) != 0;
    if (has_amo) {
        CHECK(b->btl_atomic_flags & MCA_BTL_ATOMIC_SUPPORTS_ADD, "atomics without ADD");
        own_amo("op add", K_OP, at(rw, 64), rw->h, MCA_BTL_ATOMIC_ADD, 5, 0, false, 1, rw, 64);
        valid++;
        if (w32ok) {
            own_amo("op add 32", K_OP, at(rw, 76), rw->h, MCA_BTL_ATOMIC_ADD, 9, 0, true, 1, rw,
                    76);
            valid++;
        }
        mca_btl_base_registration_handle_t fake;
        key_random(&fake);
        for (int k = K_OP; k <= K_CSWAP; k++) {
            if ((k == K_FOP && !has_fop) || (k == K_CSWAP && !has_cswap))
                continue;
            const char *kn = k == K_OP ? "op" : k == K_FOP ? "fop" : "cswap";
            char what[96];
#define REFUSED(name, addr, h, want)                                                         \
    (snprintf(what, sizeof(what), "%s %s", kn, name),                                         \
     own_amo(what, k, addr, h, MCA_BTL_ATOMIC_ADD, 1, 0, false, want, NULL, 0))
            REFUSED("read-only region", at(&regs[R_RO], 0), regs[R_RO].h, OPAL_ERR_PERM);
            REFUSED("write-only region", at(&regs[R_WO], 0), regs[R_WO].h, OPAL_ERR_PERM);
            REFUSED("region without the atomic right", at(&regs[R_NOAMO], 0), regs[R_NOAMO].h,
                    OPAL_ERR_PERM);
            REFUSED("misaligned", at(rw, 4), rw->h, OPAL_ERR_NOT_AVAILABLE);
            REFUSED("misaligned by one", at(rw, 9), rw->h, OPAL_ERR_NOT_AVAILABLE);
            REFUSED("past the end", at(rw, LEN), rw->h, OPAL_ERR_BAD_PARAM);
            REFUSED("before the start", at(rw, 0) - 8, rw->h, OPAL_ERR_BAD_PARAM);
            REFUSED("address wrapping", UINT64_MAX - 7, rw->h, OPAL_ERR_BAD_PARAM);
            REFUSED("made-up handle", at(rw, 0), &fake, OPAL_ERR_BAD_PARAM);
            REFUSED("no remote handle", at(rw, 0), NULL, OPAL_ERR_BAD_PARAM);
            if (!cache)
                REFUSED("deregistered handle", at(&regs[R_GONE], 0), &gone, OPAL_ERR_BAD_PARAM);
#undef REFUSED
        }
        if (has_fop) {
            own_amo("fop add", K_FOP, at(rw, 64), rw->h, MCA_BTL_ATOMIC_ADD, 11, 0, false, 1, rw,
                    64);
            own_amo("fop swap", K_FOP, at(rw, 200), rw->h, MCA_BTL_ATOMIC_SWAP,
                    0x1122334455667788ull, 0, false, 1, rw, 200);
            valid += 2;
            if (w32ok) {
                /* Its callback comes from progress (btl_ferry_rdma.c: the
                 * result's own width), and the 4 bytes after the result
                 * stay as they were. */
                own_amo("fop add 32", K_FOP, at(rw, 76), rw->h, MCA_BTL_ATOMIC_ADD, 3, 0, true,
                        OPAL_SUCCESS, rw, 76);
                valid++;
            }
        }
        if (has_cswap) {
            uint64_t cur64;
            memcpy(&cur64, rw->shadow + 64, 8);
            own_amo("cswap hit", K_CSWAP, at(rw, 64), rw->h, 0, 42, cur64, false, 1, rw, 64);
            own_amo("cswap miss", K_CSWAP, at(rw, 64), rw->h, 0, 43, 41, false, 1, rw, 64);
            valid += 2;
        }
    }

    if (cache) {
        /* The cache keeps a deregistered region's key: it works until the
         * memory is released. */
        if (has_put) {
            regs[R_GONE].h = &gone; /* its key only, as a peer holds it */
            own_done("deregistered but cached", true, &regs[R_GONE], 0, 8, 0);
            regs[R_GONE].h = NULL;
            valid++;
        }
        /* Released, its key must be refused, the memory not touched. */
        CHECK(munmap(regs[R_GONE].mem, page) == 0, "munmap");
        regs[R_GONE].unmapped = true;
        if (has_put)
            own_refused("released region", true, at(&regs[R_GONE], 0), 8, &gone,
                        OPAL_ERR_BAD_PARAM);
        if (has_get)
            own_refused("released region", false, at(&regs[R_GONE], 0), 8, &gone,
                        OPAL_ERR_BAD_PARAM);
        if (has_amo) {
            own_amo("op on a released region", K_OP, at(&regs[R_GONE], 0), &gone,
                    MCA_BTL_ATOMIC_ADD, 1, 0, false, OPAL_ERR_BAD_PARAM, NULL, 0);
        }
    }

    CHECK(mod->stats.own == own0 + (uint64_t)valid, "own count %llu, expected %llu",
          (unsigned long long)(mod->stats.own - own0), (unsigned long long)valid);
    for (int i = 0; i < R_COUNT; i++) {
        if (regs[i].h != NULL)
            CHECK(b->btl_deregister_mem(b, regs[i].h) == OPAL_SUCCESS,
                  "deregister_mem of region %s", regs[i].name);
        munmap(regs[i].map, page);
        if (!regs[i].unmapped)
            munmap(regs[i].mem, page);
        munmap(regs[i].map + 2 * page, page);
    }
    if (rank == 0)
        printf("btl: module %s: %d own operations done, every refusal held%s\n", where, valid,
               has_amo ? "" : " (no atomics)");
}

static void run_own(void)
{
    mca_btl_ferry_module_t *mods[16];
    int n = find_modules(mods, 16);
    int tested = 0;
    for (int i = 0; i < n; i++) {
        if (mods[i]->super.btl_put == NULL && mods[i]->super.btl_get == NULL) {
            if (rank == 0)
                printf("btl: module %s has no RDMA\n", mods[i]->fbtl->attr.name);
            continue;
        }
        own_module(mods[i]);
        tested++;
    }
    where = "own";
    CHECK(tested > 0, "no ferry module with RDMA");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("btl: own memory: all checks passed (%d ranks, %d modules)\n", nranks, tested);
}

/* ---- the wait queue ---- */

enum { NOPS = 16, CHUNK = 64 * 1024 };

static mca_btl_ferry_module_t *tcp_module(void)
{
    mca_btl_ferry_module_t *mods[16];
    int n = find_modules(mods, 16);
    for (int i = 0; i < n; i++)
        if (strcmp(mods[i]->fbtl->attr.name, "tcp") == 0)
            return mods[i];
    where = "tcp";
    CHECK(0, "no ferry tcp module (run with FERRY_BTL=tcp)");
    return NULL;
}

static unsigned char pattern(int who, int i, size_t k, int phase)
{
    return (unsigned char)(who * 37 + i * 11 + phase * 101 + k * 13 + (k >> 9));
}

/* The peer's registration of its region: its address and key bytes. */
typedef struct {
    uint64_t addr;
    uint8_t key[FERRY_BTL_KEY_MAX];
} remote_t;

static void exchange(mca_btl_ferry_module_t *mod, mca_btl_base_registration_handle_t *h,
                     void *base, int peer, mca_btl_base_registration_handle_t *rh,
                     uint64_t *raddr)
{
    remote_t mine = {.addr = (uint64_t)(uintptr_t)base}, theirs;
    memcpy(mine.key, h->key, mod->super.btl_registration_handle_size);
    MPI_Sendrecv(&mine, sizeof(mine), MPI_BYTE, peer, 9, &theirs, sizeof(theirs), MPI_BYTE, peer,
                 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    memset(rh, 0, sizeof(*rh));
    memcpy(rh->key, theirs.key, sizeof(rh->key));
    *raddr = theirs.addr;
}

static void check_order(const char *what, int n)
{
    CHECK(done.calls == n, "%s: %d of %d completed", what, done.calls, n);
    for (int i = 0; i < n; i++) {
        CHECK(done.status[i] == OPAL_SUCCESS, "%s: operation %d completed with %d", what,
              (int)done.order[i], done.status[i]);
        CHECK(done.order[i] == i, "%s: completion %d was of operation %d", what, i,
              (int)done.order[i]);
    }
}

static void run_wait(void)
{
    mca_btl_ferry_module_t *mod = tcp_module();
    mca_btl_base_module_t *b = &mod->super;
    where = "wait";
    CHECK(nranks == 2, "run with 2 ranks");
    CHECK(b->btl_put != NULL && b->btl_get != NULL, "the tcp module has no put or get");
    int peer = 1 - rank;
    struct mca_btl_base_endpoint_t *ep = (struct mca_btl_base_endpoint_t *)mod->eps[peer];
    CHECK(ep != NULL, "no tcp endpoint to rank %d", peer);
    size_t total = (size_t)NOPS * CHUNK;
    /* target: the peer's puts land here, its gets read from here; local:
     * what this rank puts and where its gets land. Guards after each. */
    unsigned char *target = malloc(total + GUARD), *local = malloc(total + GUARD);
    CHECK(target != NULL && local != NULL, "out of memory");
    memset(target, 0, total + GUARD);
    memset(target + total, 0xA5, GUARD);
    for (int i = 0; i < NOPS; i++)
        for (size_t k = 0; k < CHUNK; k++)
            local[(size_t)i * CHUNK + k] = pattern(rank, i, k, 0);
    memset(local + total, 0x5A, GUARD);
    mca_btl_base_registration_handle_t *h =
        b->btl_register_mem(b, ep, target, total,
                            MCA_BTL_REG_FLAG_REMOTE_READ | MCA_BTL_REG_FLAG_REMOTE_WRITE);
    CHECK(h != NULL, "register_mem failed");
    mca_btl_base_registration_handle_t rh;
    uint64_t raddr;
    exchange(mod, h, target, peer, &rh, &raddr);
    MPI_Barrier(MPI_COMM_WORLD);

    /* Puts, back to back: the first is the transport's, the others wait. */
    uint64_t waited = mod->stats.waited, puts = mod->stats.put;
    done_reset();
    for (int i = 0; i < NOPS; i++) {
        int rc = b->btl_put(b, ep, local + (size_t)i * CHUNK, raddr + (uint64_t)i * CHUNK, NULL,
                            &rh, CHUNK, 0, MCA_BTL_NO_ORDER, on_done, NULL, (void *)(intptr_t)i);
        CHECK(rc == OPAL_SUCCESS, "put %d returned %d", i, rc);
    }
    CHECK(mod->stats.waited - waited == NOPS - 1, "%llu of %d puts waited, expected %d",
          (unsigned long long)(mod->stats.waited - waited), NOPS, NOPS - 1);
    CHECK(mod->stats.put - puts == 1, "the transport took %llu puts, expected 1",
          (unsigned long long)(mod->stats.put - puts));
    CHECK(done.calls == 0, "%d puts completed with no progress", done.calls);
    int rc = b->btl_flush(b, ep);
    CHECK(rc == OPAL_SUCCESS, "flush returned %d", rc);
    check_order("puts completed by flush", NOPS);
    CHECK(mod->stats.put - puts == NOPS, "%llu puts counted",
          (unsigned long long)(mod->stats.put - puts));
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < NOPS; i++)
        for (size_t k = 0; k < CHUNK; k++)
            CHECK(target[(size_t)i * CHUNK + k] == pattern(peer, i, k, 0),
                  "put %d of rank %d: byte %zu is 0x%02x", i, peer, k,
                  target[(size_t)i * CHUNK + k]);
    for (size_t k = 0; k < GUARD; k++)
        CHECK(target[total + k] == 0xA5, "a put wrote past the region (guard byte %zu)", k);

    /* Gets, back to back, completed by progress alone. */
    for (int i = 0; i < NOPS; i++)
        for (size_t k = 0; k < CHUNK; k++)
            target[(size_t)i * CHUNK + k] = pattern(rank, i, k, 1);
    memset(local, 0, total);
    MPI_Barrier(MPI_COMM_WORLD);
    waited = mod->stats.waited;
    uint64_t gets = mod->stats.get;
    done_reset();
    for (int i = 0; i < NOPS; i++) {
        rc = b->btl_get(b, ep, local + (size_t)i * CHUNK, raddr + (uint64_t)i * CHUNK, NULL, &rh,
                        CHUNK, 0, MCA_BTL_NO_ORDER, on_done, NULL, (void *)(intptr_t)i);
        CHECK(rc == OPAL_SUCCESS, "get %d returned %d", i, rc);
    }
    CHECK(mod->stats.waited - waited == NOPS - 1, "%llu of %d gets waited, expected %d",
          (unsigned long long)(mod->stats.waited - waited), NOPS, NOPS - 1);
    CHECK(mod->stats.get - gets == 1, "the transport took %llu gets, expected 1",
          (unsigned long long)(mod->stats.get - gets));
    double start = MPI_Wtime();
    while (done.calls < NOPS) {
        opal_progress();
        CHECK(MPI_Wtime() - start < 60, "gets: %d of %d completed in 60 s", done.calls, NOPS);
    }
    check_order("gets completed by progress", NOPS);
    for (int i = 0; i < NOPS; i++)
        for (size_t k = 0; k < CHUNK; k++)
            CHECK(local[(size_t)i * CHUNK + k] == pattern(peer, i, k, 1),
                  "get %d from rank %d: byte %zu is 0x%02x", i, peer, k,
                  local[(size_t)i * CHUNK + k]);
    for (size_t k = 0; k < GUARD; k++)
        CHECK(local[total + k] == 0x5A, "a get wrote past its buffer (guard byte %zu)", k);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(b->btl_deregister_mem(b, h) == OPAL_SUCCESS, "deregister_mem");
    free(target);
    free(local);
    if (rank == 0)
        printf("btl: wait queue: all checks passed (%d ranks, %d puts and %d gets, %d of each "
               "waited)\n",
               nranks, NOPS, NOPS, NOPS - 1);
}

/* ---- a peer that dies with operations waiting ---- */

static struct {
    int calls;
    int flags;
} errs;

static void on_error(struct mca_btl_base_module_t *btl, int32_t flags, struct opal_proc_t *proc,
                     char *info)
{
    errs.calls++;
    errs.flags = flags;
    fprintf(stderr, "rank %d: error callback: %s\n", rank, info != NULL ? info : "(no info)");
}

static void run_dead(void)
{
    mca_btl_ferry_module_t *mod = tcp_module();
    mca_btl_base_module_t *b = &mod->super;
    where = "dead";
    CHECK(nranks == 2, "run with 2 ranks");
    int peer = 1 - rank;
    struct mca_btl_base_endpoint_t *ep = (struct mca_btl_base_endpoint_t *)mod->eps[peer];
    CHECK(ep != NULL, "no tcp endpoint to rank %d", peer);
    size_t total = (size_t)NOPS * CHUNK;
    unsigned char *mem = calloc(1, total);
    CHECK(mem != NULL, "out of memory");
    mca_btl_base_registration_handle_t *h =
        b->btl_register_mem(b, ep, mem, total, MCA_BTL_REG_FLAG_REMOTE_READ);
    CHECK(h != NULL, "register_mem failed");
    mca_btl_base_registration_handle_t rh;
    uint64_t raddr;
    exchange(mod, h, mem, peer, &rh, &raddr);
    /* The test's error callback instead of ob1's (which ends the job). */
    CHECK(b->btl_register_error(b, on_error) == OPAL_SUCCESS, "register_error");
    /* Rank 1 dies once rank 0's gets are issued, and never progresses
     * after the barrier: it answers none of them. It learns that they are
     * issued through a file (both ranks on this host), not through MPI,
     * whose progress would answer them. */
    int pid0 = (int)getpid();
    MPI_Bcast(&pid0, 1, MPI_INT, 0, MPI_COMM_WORLD);
    char issued[64];
    snprintf(issued, sizeof(issued), "/tmp/mpi_btl_dead.%d", pid0);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        for (int i = 0; access(issued, F_OK) != 0; i++) {
            CHECK(i < 30000, "rank 0 did not say in 30 s that its gets were issued");
            usleep(1000);
        }
        unlink(issued);
        printf("rank %d: killing itself\n", rank);
        fflush(stdout);
        raise(SIGKILL);
    }
    uint64_t waited = mod->stats.waited;
    done_reset();
    for (int i = 0; i < NOPS; i++) {
        int rc = b->btl_get(b, ep, mem + (size_t)i * CHUNK, raddr + (uint64_t)i * CHUNK, NULL, &rh,
                            CHUNK, 0, MCA_BTL_NO_ORDER, on_done, NULL, (void *)(intptr_t)i);
        CHECK(rc == OPAL_SUCCESS, "get %d returned %d", i, rc);
    }
    FILE *f = fopen(issued, "w");
    CHECK(f != NULL, "cannot create %s", issued);
    fclose(f);
    CHECK(mod->stats.waited - waited == NOPS - 1, "%llu of %d gets waited, expected %d",
          (unsigned long long)(mod->stats.waited - waited), NOPS, NOPS - 1);
    double start = MPI_Wtime();
    while (done.calls < NOPS) {
        opal_progress();
        CHECK(MPI_Wtime() - start < 60, "%d of %d gets completed in 60 s after the peer's death",
              done.calls, NOPS);
    }
    /* In order, and every one with an error: the peer answered none. */
    int failed = 0;
    for (int i = 0; i < NOPS; i++) {
        CHECK(done.order[i] == i, "completion %d was of get %d", i, (int)done.order[i]);
        CHECK(done.status[i] != OPAL_SUCCESS, "get %d from the dead peer succeeded", i);
        failed++;
    }
    CHECK(errs.calls > 0, "the error callback was not called for the dead peer");
    printf("btl: dead peer: all checks passed (%d gets, %d waited, %d failed with %d, error "
           "callback called %d times, flags 0x%x)\n",
           NOPS, NOPS - 1, failed, done.status[NOPS - 1], errs.calls, errs.flags);
    fflush(stdout);
    /* The peer is gone: MPI_Finalize would wait for it. */
    _exit(0);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    page = (size_t)sysconf(_SC_PAGESIZE);
    srand(1234 + rank);
    int mode = getopt(argc, argv, "owd");
    mca_btl_ferry_module_t *mods[16];
    if (find_modules(mods, 16) == 0) {
        if (rank == 0)
            printf("SKIPPED: no ferry BTL module was initialized (the component did not load)\n");
        MPI_Finalize();
        return 77;
    }
    switch (mode) {
    case 'o': run_own(); break;
    case 'w': run_wait(); break;
    case 'd': run_dead(); break;
    default:
        fprintf(stderr, "usage: mpi_btl -o | -w | -d\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Finalize();
    return 0;
}
