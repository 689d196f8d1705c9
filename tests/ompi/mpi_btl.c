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
 *   mpi_btl -w MODULE
 *                 the wait queue, 2 ranks, MODULE tcp (FERRY_BTL=tcp,
 *                 FERRY_TCP_RDMA_MAX_INFLIGHT=1) or sm (FERRY_BTL=sm, a pool
 *                 of 4 descriptors, FERRY_SM_CMA=0, the smallest ring,
 *                 FERRY_BTL_ATOMIC_SLOTS=2; run_ompi.sh sets them): every
 *                 rank issues N puts to its peer back to back, then N gets,
 *                 with no progress between; the transport takes the first
 *                 (tcp: one; sm: as many as it has descriptors), the others
 *                 wait in the component (its "waited" count must grow by
 *                 that), the puts complete through btl_flush, the gets
 *                 through progress, all in the order issued, and every byte
 *                 arrives right. Then atomic_fop and atomic_cswap on the
 *                 peer's ordinary memory (executed by the target), back to
 *                 back: those the transport refuses (OPAL_ERR_OUT_OF_RESOURCE:
 *                 the component does not queue atomics) are retried after
 *                 progress, as osc/rdma does; some must be, and all complete
 *                 in order with the values they must fetch.
 *   mpi_btl -m tcp
 *                 gets of mixed sizes to the peer, back to back (2 ranks,
 *                 FERRY_TCP_SENDQ_MAX=131072): tcp refuses a large get by
 *                 its bytes in flight and would take the small ones behind
 *                 it; they must wait behind it, all complete in order.
 *   mpi_btl -d MODULE
 *                 a rank dies with operations waiting (2 ranks or more, the
 *                 same settings, the last rank under kill_wrap.sh, all on
 *                 one host): every other rank issues N gets from the last,
 *                 which then SIGKILLs itself without having progressed;
 *                 every one of them must complete (none left waiting), in
 *                 order, with OPAL_ERR_UNREACH, and the module must report
 *                 the lost peer to the error callback (the test's own, so
 *                 that the job goes on). With 3 ranks or more, the
 *                 survivors then put to and get from each other, past the
 *                 limits again, all of it right. The survivors then leave
 *                 without MPI_Finalize.
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

enum { NOPS = 16, CHUNK = 64 * 1024, NAMO = 24 };

/* The ferry module of the transport named (run with FERRY_BTL set to it). */
static mca_btl_ferry_module_t *module_named(const char *name)
{
    mca_btl_ferry_module_t *mods[16];
    int n = find_modules(mods, 16);
    for (int i = 0; i < n; i++)
        if (strcmp(mods[i]->fbtl->attr.name, name) == 0)
            return mods[i];
    where = name;
    CHECK(0, "no ferry %s module (run with FERRY_BTL=%s)", name, name);
    return NULL;
}

static unsigned char pattern(int who, int i, size_t k, int phase)
{
    return (unsigned char)(who * 37 + i * 11 + phase * 101 + k * 13 + (k >> 9));
}

/* A rank's registration of its region: its address and key bytes. */
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

/* Every rank's registration of its region, as the others hold it. */
static void exchange_all(mca_btl_ferry_module_t *mod, mca_btl_base_registration_handle_t *h,
                         void *base, remote_t *all)
{
    remote_t mine = {.addr = (uint64_t)(uintptr_t)base};
    memcpy(mine.key, h->key, mod->super.btl_registration_handle_size);
    MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all, sizeof(mine), MPI_BYTE, MPI_COMM_WORLD);
}

static void handle_of(const remote_t *r, mca_btl_base_registration_handle_t *rh)
{
    memset(rh, 0, sizeof(*rh));
    memcpy(rh->key, r->key, sizeof(rh->key));
}

/* n completions, in the order issued, each with status want. */
static void check_order_status(const char *what, int n, int want)
{
    CHECK(done.calls == n, "%s: %d of %d completed", what, done.calls, n);
    for (int i = 0; i < n; i++) {
        CHECK(done.status[i] == want, "%s: operation %d completed with %d, expected %d", what,
              (int)done.order[i], done.status[i], want);
        CHECK(done.order[i] == i, "%s: completion %d was of operation %d", what, i,
              (int)done.order[i]);
    }
}

static void check_order(const char *what, int n)
{
    check_order_status(what, n, OPAL_SUCCESS);
}

static void progress_until(int n, const char *what)
{
    double start = MPI_Wtime();
    while (done.calls < n) {
        opal_progress();
        CHECK(MPI_Wtime() - start < 60, "%s: %d of %d completed in 60 s", what, done.calls, n);
    }
}

/*
 * Atomics the transport executes at the target (ordinary memory, not
 * ferry's pool), issued back to back to the peer: NAMO fetch-and-adds on
 * one word, then NAMO compare-and-swaps on another, each cswap's compare the
 * value the one before it swapped in. The component does not queue atomics
 * (puts and gets only): one the transport cannot take now (tcp's in-flight
 * limit; sm's ring full, its queue non-empty or FERRY_BTL_ATOMIC_SLOTS
 * answers outstanding) is refused with OPAL_ERR_OUT_OF_RESOURCE, nothing
 * started and no callback, and the caller tries again after progress, as
 * osc/rdma does. Every one must then complete once, in the order issued,
 * with the value before it; the target's words end at the sums.
 */
static int run_wait_atomics(mca_btl_ferry_module_t *mod, struct mca_btl_base_endpoint_t *ep,
                            int peer)
{
    mca_btl_base_module_t *b = &mod->super;
    CHECK(b->btl_atomic_fop != NULL && b->btl_atomic_cswap != NULL,
          "the %s module has no atomic_fop or atomic_cswap", mod->fbtl->attr.name);
    const uint64_t base_add = 0x1000000000ull * (uint64_t)(rank + 1);
    const uint64_t base_cas = 0x5a5a000000000000ull + (uint64_t)rank;
    /* [0]: the peer's fetch-and-adds; [1]: its compare-and-swaps. */
    uint64_t *words = calloc(2, sizeof(uint64_t));
    CHECK(words != NULL, "out of memory");
    words[0] = base_add;
    words[1] = base_cas;
    mca_btl_base_registration_handle_t *h =
        b->btl_register_mem(b, ep, words, 2 * sizeof(uint64_t),
                            MCA_BTL_REG_FLAG_REMOTE_ATOMIC | MCA_BTL_REG_FLAG_REMOTE_READ |
                                MCA_BTL_REG_FLAG_REMOTE_WRITE);
    CHECK(h != NULL, "register_mem of the atomic words failed");
    mca_btl_base_registration_handle_t rh;
    uint64_t raddr;
    exchange(mod, h, words, peer, &rh, &raddr);
    const uint64_t peer_add = 0x1000000000ull * (uint64_t)(peer + 1);
    const uint64_t peer_cas = 0x5a5a000000000000ull + (uint64_t)peer;
    uint64_t fetched[2][NAMO];
    memset(fetched, 0xEE, sizeof(fetched));
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t waited = mod->stats.waited;
    int refused = 0;
    for (int kind = 0; kind < 2; kind++) {
        done_reset();
        for (int i = 0; i < NAMO; i++) {
            int rc;
            for (;;) {
                int before = done.calls;
                if (kind == 0)
                    rc = b->btl_atomic_fop(b, ep, &fetched[0][i], raddr, NULL, &rh,
                                           MCA_BTL_ATOMIC_ADD, (uint64_t)(i + 1), 0,
                                           MCA_BTL_NO_ORDER, on_done, NULL, (void *)(intptr_t)i);
                else
                    rc = b->btl_atomic_cswap(b, ep, &fetched[1][i], raddr + 8, NULL, &rh,
                                             peer_cas + (uint64_t)i, peer_cas + (uint64_t)i + 1,
                                             0, MCA_BTL_NO_ORDER, on_done, NULL,
                                             (void *)(intptr_t)i);
                if (rc != OPAL_ERR_OUT_OF_RESOURCE)
                    break;
                CHECK(done.calls == before, "atomic %d (%s): refused, yet a callback ran", i,
                      kind == 0 ? "fop" : "cswap");
                refused++;
                opal_progress();
            }
            /* Taken: its callback comes from progress. A 1 (done inside the
             * call) would mean the initiator's CPU did it. */
            CHECK(rc == OPAL_SUCCESS, "atomic %d (%s) returned %d", i, kind == 0 ? "fop" : "cswap",
                  rc);
        }
        progress_until(NAMO, kind == 0 ? "fetch-and-adds" : "compare-and-swaps");
        check_order(kind == 0 ? "fetch-and-adds" : "compare-and-swaps", NAMO);
    }
    uint64_t sum = 0;
    for (int i = 0; i < NAMO; i++) {
        CHECK(fetched[0][i] == peer_add + sum, "fetch-and-add %d fetched 0x%llx, expected 0x%llx",
              i, (unsigned long long)fetched[0][i], (unsigned long long)(peer_add + sum));
        sum += (uint64_t)(i + 1);
        CHECK(fetched[1][i] == peer_cas + (uint64_t)i,
              "compare-and-swap %d fetched 0x%llx, expected 0x%llx (missed)", i,
              (unsigned long long)fetched[1][i], (unsigned long long)(peer_cas + (uint64_t)i));
    }
    /* Atomics never wait in the component: waited is for puts and gets. */
    CHECK(mod->stats.waited == waited, "%llu atomics counted as waited",
          (unsigned long long)(mod->stats.waited - waited));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(words[0] == base_add + sum, "the fetch-and-adds left 0x%llx, expected 0x%llx",
          (unsigned long long)words[0], (unsigned long long)(base_add + sum));
    CHECK(words[1] == base_cas + NAMO, "the compare-and-swaps left 0x%llx, expected 0x%llx",
          (unsigned long long)words[1], (unsigned long long)(base_cas + NAMO));
    CHECK(b->btl_deregister_mem(b, h) == OPAL_SUCCESS, "deregister_mem");
    free(words);
    return refused;
}

/* NOPS puts or gets just issued back to back: those the transport took and
 * those waiting in the component make NOPS. Over tcp the transport takes
 * the first only (FERRY_TCP_RDMA_MAX_INFLIGHT=1). Over sm the component's
 * waiting path is reached only when sm has no descriptor (its pool at
 * FERRY_SM_FREE_LIST_MAX): sm takes every put and get it has a descriptor
 * for, whatever its ring's credits (it queues them itself behind a full
 * ring), so there the first few are taken and at least one must wait. */
static void check_taken(const char *what, bool tcp, uint64_t taken, uint64_t waited)
{
    CHECK(taken + waited == NOPS, "%s: the transport took %llu and %llu waited, not %d in all",
          what, (unsigned long long)taken, (unsigned long long)waited, NOPS);
    if (tcp)
        CHECK(taken == 1, "%s: the transport took %llu, expected 1", what,
              (unsigned long long)taken);
    else
        CHECK(taken >= 1 && waited >= 1,
              "%s: the transport took %llu and %llu waited: expected some of each", what,
              (unsigned long long)taken, (unsigned long long)waited);
}

/*
 * Puts, then gets, NOPS of CHUNK bytes each, back to back to the peer with
 * no progress between: the transport takes the first (check_taken), the
 * others wait in the component (its "waited" count). The puts complete
 * through btl_flush, the gets through progress, in the order issued, and
 * every byte arrives right.
 */
static void run_wait(const char *name)
{
    mca_btl_ferry_module_t *mod = module_named(name);
    mca_btl_base_module_t *b = &mod->super;
    bool tcp = strcmp(name, "tcp") == 0;
    where = "wait";
    CHECK(nranks == 2, "run with 2 ranks");
    CHECK(b->btl_put != NULL && b->btl_get != NULL, "the %s module has no put or get", name);
    int peer = 1 - rank;
    struct mca_btl_base_endpoint_t *ep = (struct mca_btl_base_endpoint_t *)mod->eps[peer];
    CHECK(ep != NULL, "no %s endpoint to rank %d", name, peer);
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
    uint64_t all_waited = 0;

    /* Puts, back to back. */
    uint64_t waited = mod->stats.waited, puts = mod->stats.put;
    done_reset();
    for (int i = 0; i < NOPS; i++) {
        int rc = b->btl_put(b, ep, local + (size_t)i * CHUNK, raddr + (uint64_t)i * CHUNK, NULL,
                            &rh, CHUNK, 0, MCA_BTL_NO_ORDER, on_done, NULL, (void *)(intptr_t)i);
        CHECK(rc == OPAL_SUCCESS, "put %d returned %d", i, rc);
    }
    check_taken("puts", tcp, mod->stats.put - puts, mod->stats.waited - waited);
    all_waited += mod->stats.waited - waited;
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
    check_taken("gets", tcp, mod->stats.get - gets, mod->stats.waited - waited);
    all_waited += mod->stats.waited - waited;
    progress_until(NOPS, "gets");
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

    int refused = run_wait_atomics(mod, ep, peer);
    /* The transport's limit must have refused some, or the retry path was
     * not tried. */
    CHECK(refused > 0, "no atomic was refused: the transport's limit was not reached");
    int all_refused = 0;
    MPI_Reduce(&refused, &all_refused, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("btl: wait queue: all checks passed (%d ranks, module %s, %d puts and %d gets, "
               "%llu of them waited on rank 0; %d fetch-and-adds and %d compare-and-swaps, %d "
               "refusals retried)\n",
               nranks, name, NOPS, NOPS, (unsigned long long)all_waited, NAMO, NAMO,
               all_refused);
}

/*
 * Gets of mixed sizes to one peer, back to back (2 ranks, tcp with
 * FERRY_TCP_SENDQ_MAX=131072 and no in-flight limit): tcp keeps the bytes of
 * the gets in flight to a peer within its send queue's size, so it takes the
 * first 64 KiB get and refuses the 96 KiB one after it, which waits in the
 * component; the 4 KiB ones behind it would fit, yet must wait behind it.
 * All complete in the order issued, every byte right.
 */
enum { NMIXED = 12 };

static size_t mixed_size(int i)
{
    return i == 0 ? CHUNK : i % 2 == 1 ? CHUNK + CHUNK / 2 : 4096;
}

static void run_mixed(const char *name)
{
    mca_btl_ferry_module_t *mod = module_named(name);
    mca_btl_base_module_t *b = &mod->super;
    where = "mixed";
    CHECK(nranks == 2, "run with 2 ranks");
    int peer = 1 - rank;
    struct mca_btl_base_endpoint_t *ep = (struct mca_btl_base_endpoint_t *)mod->eps[peer];
    CHECK(ep != NULL, "no %s endpoint to rank %d", name, peer);
    size_t off[NMIXED + 1];
    off[0] = 0;
    for (int i = 0; i < NMIXED; i++)
        off[i + 1] = off[i] + mixed_size(i);
    size_t total = off[NMIXED];
    unsigned char *target = malloc(total), *local = calloc(1, total);
    CHECK(target != NULL && local != NULL, "out of memory");
    for (int i = 0; i < NMIXED; i++)
        for (size_t k = 0; k < mixed_size(i); k++)
            target[off[i] + k] = pattern(rank, i, k, 5);
    mca_btl_base_registration_handle_t *h =
        b->btl_register_mem(b, ep, target, total, MCA_BTL_REG_FLAG_REMOTE_READ);
    CHECK(h != NULL, "register_mem failed");
    mca_btl_base_registration_handle_t rh;
    uint64_t raddr;
    exchange(mod, h, target, peer, &rh, &raddr);
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t waited = mod->stats.waited;
    done_reset();
    for (int i = 0; i < NMIXED; i++) {
        int rc = b->btl_get(b, ep, local + off[i], raddr + off[i], NULL, &rh, mixed_size(i), 0,
                            MCA_BTL_NO_ORDER, on_done, NULL, (void *)(intptr_t)i);
        CHECK(rc == OPAL_SUCCESS, "get %d returned %d", i, rc);
    }
    uint64_t w = mod->stats.waited - waited;
    CHECK(w == NMIXED - 1, "%llu of %d gets waited, expected %d", (unsigned long long)w, NMIXED,
          NMIXED - 1);
    progress_until(NMIXED, "gets of mixed sizes");
    check_order("gets of mixed sizes", NMIXED);
    for (int i = 0; i < NMIXED; i++)
        for (size_t k = 0; k < mixed_size(i); k++)
            CHECK(local[off[i] + k] == pattern(peer, i, k, 5),
                  "get %d from rank %d: byte %zu is 0x%02x", i, peer, k, local[off[i] + k]);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(b->btl_deregister_mem(b, h) == OPAL_SUCCESS, "deregister_mem");
    free(target);
    free(local);
    if (rank == 0)
        printf("btl: mixed sizes: all checks passed (%d ranks, module %s, %d gets, %llu "
               "waited)\n",
               nranks, name, NMIXED, (unsigned long long)w);
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

/*
 * The last rank (the victim) dies while every other rank (a survivor) has
 * NOPS gets from it outstanding: the transport took the first (over tcp
 * with the in-flight limit 1, one; over sm, as many as its descriptor pool
 * had, FERRY_SM_CMA=0 keeping them on the ring, where the victim never
 * answers them) and the others wait in the component (check_taken). Every
 * get ends, in the order issued, with OPAL_ERR_UNREACH: those the transport
 * took when it fails the peer, the waiting ones when they start and the
 * transport refuses the dead peer. The module reports the lost peer to the
 * error callback. With two survivors or more, each then puts to the next
 * and gets from it (again past the limit, so that they wait as well), the
 * victim gone: all succeed, in order, every byte right. Then the survivors
 * leave without MPI_Finalize.
 */
static void run_dead(const char *name)
{
    mca_btl_ferry_module_t *mod = module_named(name);
    mca_btl_base_module_t *b = &mod->super;
    bool tcp = strcmp(name, "tcp") == 0;
    where = "dead";
    CHECK(nranks >= 2, "run with 2 ranks or more");
    const int victim = nranks - 1, nsurv = nranks - 1;
    size_t total = (size_t)NOPS * CHUNK;
    /* target: read by gets, written by puts; local: where this rank's gets
     * land and what its puts send. */
    unsigned char *target = malloc(total), *local = malloc(total);
    CHECK(target != NULL && local != NULL, "out of memory");
    for (int i = 0; i < NOPS; i++)
        for (size_t k = 0; k < CHUNK; k++)
            target[(size_t)i * CHUNK + k] = pattern(rank, i, k, 2);
    memset(local, 0, total);
    mca_btl_base_registration_handle_t *h =
        b->btl_register_mem(b, MCA_BTL_ENDPOINT_ANY, target, total,
                            MCA_BTL_REG_FLAG_REMOTE_READ | MCA_BTL_REG_FLAG_REMOTE_WRITE);
    CHECK(h != NULL, "register_mem failed");
    remote_t *all = calloc((size_t)nranks, sizeof(*all));
    CHECK(all != NULL, "out of memory");
    exchange_all(mod, h, target, all);
    /* The survivors' own communicator, for their checks after the death. */
    MPI_Comm surv;
    MPI_Comm_split(MPI_COMM_WORLD, rank == victim ? 1 : 0, rank, &surv);
    /* The test's error callback instead of ob1's (which ends the job). */
    CHECK(b->btl_register_error(b, on_error) == OPAL_SUCCESS, "register_error");
    /* The victim dies once every survivor's gets are issued, and never
     * progresses once it has left the barrier: it answers none of them.
     * The survivors start only when it says it has left (a survivor can
     * leave the barrier while the victim still progresses inside it, and
     * would have a get answered there). They talk through files (all ranks
     * on this host), not through MPI, whose progress would answer them. */
    int pid0 = (int)getpid();
    MPI_Bcast(&pid0, 1, MPI_INT, 0, MPI_COMM_WORLD);
    char issued[96], left[96];
    snprintf(left, sizeof(left), "/tmp/mpi_btl_dead.%d.left", pid0);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == victim) {
        FILE *lf = fopen(left, "w");
        CHECK(lf != NULL, "cannot create %s", left);
        fclose(lf);
        for (int r = 0; r < nsurv; r++) {
            snprintf(issued, sizeof(issued), "/tmp/mpi_btl_dead.%d.%d", pid0, r);
            for (int i = 0; access(issued, F_OK) != 0; i++) {
                CHECK(i < 30000, "rank %d did not say in 30 s that its gets were issued", r);
                usleep(1000);
            }
            unlink(issued);
        }
        unlink(left);
        printf("rank %d: killing itself\n", rank);
        fflush(stdout);
        raise(SIGKILL);
    }
    for (double start = MPI_Wtime(); access(left, F_OK) != 0; usleep(100)) {
        opal_progress();
        CHECK(MPI_Wtime() - start < 30, "rank %d did not say in 30 s that it left the barrier",
              victim);
    }
    struct mca_btl_base_endpoint_t *vep = (struct mca_btl_base_endpoint_t *)mod->eps[victim];
    CHECK(vep != NULL, "no %s endpoint to rank %d", name, victim);
    mca_btl_base_registration_handle_t rh;
    handle_of(&all[victim], &rh);
    uint64_t waited = mod->stats.waited, gets = mod->stats.get;
    done_reset();
    for (int i = 0; i < NOPS; i++) {
        int rc = b->btl_get(b, vep, local + (size_t)i * CHUNK,
                            all[victim].addr + (uint64_t)i * CHUNK, NULL, &rh, CHUNK, 0,
                            MCA_BTL_NO_ORDER, on_done, NULL, (void *)(intptr_t)i);
        CHECK(rc == OPAL_SUCCESS, "get %d returned %d", i, rc);
    }
    uint64_t dead_waited = mod->stats.waited - waited;
    check_taken("gets from the victim", tcp, mod->stats.get - gets, dead_waited);
    snprintf(issued, sizeof(issued), "/tmp/mpi_btl_dead.%d.%d", pid0, rank);
    FILE *f = fopen(issued, "w");
    CHECK(f != NULL, "cannot create %s", issued);
    fclose(f);
    progress_until(NOPS, "gets from the dead peer");
    /* In order, and every one with the dead peer's error: it answered none. */
    check_order_status("gets from the dead peer", NOPS, OPAL_ERR_UNREACH);
    CHECK(errs.calls > 0, "the error callback was not called for the dead peer");

    /* Between survivors, the paths still work: puts to the next survivor,
     * then gets from it, past the in-flight limit again. */
    if (nsurv >= 2) {
        int next = (rank + 1) % nsurv, prev = (rank + nsurv - 1) % nsurv;
        struct mca_btl_base_endpoint_t *nep = (struct mca_btl_base_endpoint_t *)mod->eps[next];
        CHECK(nep != NULL, "no %s endpoint to rank %d", name, next);
        handle_of(&all[next], &rh);
        for (int i = 0; i < NOPS; i++)
            for (size_t k = 0; k < CHUNK; k++)
                local[(size_t)i * CHUNK + k] = pattern(rank, i, k, 3);
        MPI_Barrier(surv);
        waited = mod->stats.waited;
        uint64_t puts = mod->stats.put;
        done_reset();
        for (int i = 0; i < NOPS; i++) {
            int rc = b->btl_put(b, nep, local + (size_t)i * CHUNK,
                                all[next].addr + (uint64_t)i * CHUNK, NULL, &rh, CHUNK, 0,
                                MCA_BTL_NO_ORDER, on_done, NULL, (void *)(intptr_t)i);
            CHECK(rc == OPAL_SUCCESS, "put %d to rank %d after the death returned %d", i, next,
                  rc);
        }
        check_taken("puts between survivors", tcp, mod->stats.put - puts,
                    mod->stats.waited - waited);
        int rc = b->btl_flush(b, nep);
        CHECK(rc == OPAL_SUCCESS, "flush to rank %d returned %d", next, rc);
        check_order("puts between survivors", NOPS);
        MPI_Barrier(surv);
        for (int i = 0; i < NOPS; i++)
            for (size_t k = 0; k < CHUNK; k++)
                CHECK(target[(size_t)i * CHUNK + k] == pattern(prev, i, k, 3),
                      "put %d of rank %d after the death: byte %zu is 0x%02x", i, prev, k,
                      target[(size_t)i * CHUNK + k]);
        for (int i = 0; i < NOPS; i++)
            for (size_t k = 0; k < CHUNK; k++)
                target[(size_t)i * CHUNK + k] = pattern(rank, i, k, 4);
        memset(local, 0, total);
        MPI_Barrier(surv);
        waited = mod->stats.waited;
        gets = mod->stats.get;
        done_reset();
        for (int i = 0; i < NOPS; i++) {
            rc = b->btl_get(b, nep, local + (size_t)i * CHUNK,
                            all[next].addr + (uint64_t)i * CHUNK, NULL, &rh, CHUNK, 0,
                            MCA_BTL_NO_ORDER, on_done, NULL, (void *)(intptr_t)i);
            CHECK(rc == OPAL_SUCCESS, "get %d from rank %d after the death returned %d", i,
                  next, rc);
        }
        check_taken("gets between survivors", tcp, mod->stats.get - gets,
                    mod->stats.waited - waited);
        progress_until(NOPS, "gets between survivors");
        check_order("gets between survivors", NOPS);
        for (int i = 0; i < NOPS; i++)
            for (size_t k = 0; k < CHUNK; k++)
                CHECK(local[(size_t)i * CHUNK + k] == pattern(next, i, k, 4),
                      "get %d from rank %d after the death: byte %zu is 0x%02x", i, next, k,
                      local[(size_t)i * CHUNK + k]);
        MPI_Barrier(surv);
    }
    int total_failed = 0, mine = NOPS;
    MPI_Reduce(&mine, &total_failed, 1, MPI_INT, MPI_SUM, 0, surv);
    if (rank == 0)
        printf("btl: dead peer: all checks passed (%d ranks, module %s, %d survivors with %d "
               "gets each, %llu of rank 0's waited, %d failed with OPAL_ERR_UNREACH; error "
               "callback called %d times, flags 0x%x%s)\n",
               nranks, name, nsurv, NOPS, (unsigned long long)dead_waited, total_failed,
               errs.calls, errs.flags,
               nsurv >= 2 ? "; puts and gets between survivors afterwards right" : "");
    fflush(stdout);
    /* The victim is gone: MPI_Finalize would wait for it. */
    _exit(0);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    page = (size_t)sysconf(_SC_PAGESIZE);
    srand(1234 + rank);
    int mode = getopt(argc, argv, "ow:m:d:");
    mca_btl_ferry_module_t *mods[16];
    if (find_modules(mods, 16) == 0) {
        if (rank == 0)
            printf("SKIPPED: no ferry BTL module was initialized (the component did not load)\n");
        MPI_Finalize();
        return 77;
    }
    switch (mode) {
    case 'o': run_own(); break;
    case 'w': run_wait(optarg); break;
    case 'm': run_mixed(optarg); break;
    case 'd': run_dead(optarg); break;
    default:
        fprintf(stderr, "usage: mpi_btl -o | -w MODULE | -m MODULE | -d MODULE\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Finalize();
    return 0;
}
