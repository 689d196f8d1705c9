/*
 * Fuzz harness: what the initiator of sm's one-sided operations reads from
 * its peer's shared memory (src/btl/sm/sm_rdma.c, sm_reg.c, sm_ring.c): the
 * peer's registration table (generations, bounds, rights, heap ids, offsets
 * and lengths) through heap_resolve, sm_check_peer_key and
 * sm_peer_key_live; the tail it publishes (sm_ring_refresh_tail) and the
 * status words it leaves in ring puts; and the GET_RESP chunks and
 * AMO_ANSWER messages it sends back (sm_rdma_handle).
 *
 * The module is a real sm module of a one-process job (no cross-memory
 * attach, so every byte goes through the code fuzzed here); the peer is a
 * stand-in endpoint of rank 1 whose segment (header, table, our channel) is
 * one plain buffer, and whose heap objects are plain buffers handed to sm
 * through sm_heap_mapper. The peer rewrites its table at any record, and
 * in the middle of an operation (when sm maps a heap).
 *
 * Input: byte 0 the table's slots (1-8), byte 1 the peer's get slots,
 * bytes 2-4 the sizes of heap objects 1-3 (in 32-byte units); then records
 * (FUZZ_RECORD_END-terminated), byte 0 the kind (its value mod 11), the
 * rest its fields:
 *   TABLE     rewrite an entry: slot, how, then the fields (raw, or a
 *             plausible entry of a heap object)
 *   DIRECT    sm_rdma_direct put or get: key, address, size, data
 *   ATOMIC    fetch-add, any other operation or cswap, 32 or 64 bits,
 *             through atomic_op/fop/cswap or atomic_direct
 *   RDMA      sm_put or sm_get with a descriptor (heap path, or the ring)
 *   TAIL      the peer's tail of our channel: raw, or near head or tail
 *   GET_RESP  an answer to a ring get: cookie, offset, status, data, cut
 *   AMO_ANS   an answer to a ring atomic: cookie, status, value, cut
 *   PUT_STAT  the status word the peer leaves in the first ring put
 *   PROGRESS  the module's progress (callbacks run here)
 *   CONSUME   the peer takes all we wrote (its tail at our head)
 *   RESTART   a new endpoint to a new peer, the old one failed
 * A key is one of the table's (slot and generation as it reads now), or
 * raw. Each operation is checked after it returns: no access outside the
 * buffers (the sanitizers see it); a direct result is FERRY_BTL_DONE or a
 * refusal (FERRY_ERR_ACCESS, _INVALID, _NOT_SUPPORTED, _UNREACH once the
 * peer failed), and a refused operation changed no heap memory unless the
 * table changed during it; memory that changed lies inside a range some
 * state of the table gave the key, with the right needed, in a heap that
 * state named, at the place it named; a success wrote (or read) exactly
 * there and the key was still live after; what every state of the table
 * under the key allows, on a heap object there is to map, succeeds; an
 * atomic's address is aligned;
 * a corrupt tail fails the endpoint and a sound one is taken; completions
 * carry what the peer said (data, status, fetched value).
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "btl/ctx.h"
#include "btl/sm/sm.h"
#include "fuzz.h"

#define RING 16384u
#define MAX_SEND 4096u
#define MAX_SLOTS 8
#define NOBJ 3
#define MAX_MAPS 64
#define MAX_CLAIMS 256
#define MAX_OPS 8
#define MAX_SIZE 512 /* bytes of one direct operation */

#define FINDING(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, "fuzz_sm_init: " __VA_ARGS__);                                             \
        fprintf(stderr, "\n");                                                                     \
        abort();                                                                                   \
    } while (0)

/* What the table said of a (slot, generation) at some moment: the peer may
 * say different things under one generation, and sm may have believed any
 * of them. */
typedef struct claim {
    uint32_t slot, gen;
    sm_reg_entry_t e;
} claim_t;

/* A heap object of the peer's, and the mappings sm holds of them. */
typedef struct map {
    unsigned char *base, *shadow;
    size_t len;
    uint32_t id;
} map_t;

/* A ring operation in flight (sm_put, sm_get with a descriptor, or an
 * atomic on the generic path). */
typedef struct op {
    bool used, done, atomic, put, fetch;
    ferry_btl_desc_t *des;
    unsigned char *local, *expect; /* the local buffer; what a get must leave in it */
    size_t len, got;               /* bytes; bytes the peer answered so far */
    int status, want_status;       /* as completed; as the peer said (1: not said yet) */
    uint64_t cookie;
    bool w32;
} op_t;

typedef struct world {
    ferry_ctx_t *ctx;
    sm_module_t *mod;
    ferry_btl_endpoint_t *ep;
    unsigned char *seg;
    size_t seg_size;
    sm_reg_entry_t *table;
    uint32_t nslots, get_slots;
    size_t obj_size[NOBJ + 1];
    map_t maps[MAX_MAPS];
    int nmaps;
    claim_t claims[MAX_CLAIMS];
    int nclaims;
    bool claims_full;
    op_t ops[MAX_OPS];
    /* A rewrite of the table the peer makes while sm maps a heap. */
    bool rewrite_pending, rewrote;
    uint32_t rewrite_slot;
    sm_reg_entry_t rewrite_entry;
    uint32_t rewrite_gen;
} world_t;

static world_t w;

static void object_fill(unsigned char *p, size_t len, uint32_t id)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(i * 7 + id * 61 + 3);
}

/* ---- the heap mapper: plain buffers of exactly the mapped length ---- */

static unsigned char *fz_map(const ferry_btl_endpoint_t *ep, uint32_t id, size_t len)
{
    if (ep != w.ep)
        FINDING("a heap mapped for another endpoint");
    if (w.rewrite_pending) {
        /* The peer changes its table while we look. */
        atomic_store(&w.table[w.rewrite_slot].gen, w.rewrite_gen);
        w.table[w.rewrite_slot].access = w.rewrite_entry.access;
        w.table[w.rewrite_slot].base = w.rewrite_entry.base;
        w.table[w.rewrite_slot].len = w.rewrite_entry.len;
        w.table[w.rewrite_slot].heap_id = w.rewrite_entry.heap_id;
        w.table[w.rewrite_slot].heap_off = w.rewrite_entry.heap_off;
        w.table[w.rewrite_slot].heap_len = w.rewrite_entry.heap_len;
        w.rewrite_pending = false;
        w.rewrote = true;
        if (w.nclaims < MAX_CLAIMS)
            w.claims[w.nclaims++] =
                (claim_t){.slot = w.rewrite_slot, .gen = w.rewrite_gen, .e = w.rewrite_entry};
        else
            w.claims_full = true;
    }
    if (id == 0 || id > NOBJ || len == 0 || len > w.obj_size[id] || w.nmaps == MAX_MAPS)
        return NULL;
    map_t *m = &w.maps[w.nmaps];
    m->base = malloc(len);
    m->shadow = malloc(len);
    if (m->base == NULL || m->shadow == NULL)
        abort();
    object_fill(m->base, len, id);
    memcpy(m->shadow, m->base, len);
    m->len = len;
    m->id = id;
    w.nmaps++;
    return m->base;
}

static void fz_unmap(unsigned char *base, size_t len)
{
    for (int i = 0; i < w.nmaps; i++) {
        if (w.maps[i].base != base)
            continue;
        if (w.maps[i].len != len)
            FINDING("a heap mapping of %zu bytes let go as %zu", w.maps[i].len, len);
        free(w.maps[i].base);
        free(w.maps[i].shadow);
        w.maps[i] = w.maps[--w.nmaps];
        return;
    }
    FINDING("a heap mapping let go that was never made");
}

/* ---- the oracle ---- */

static void claim_add(uint32_t slot, const sm_reg_entry_t *e)
{
    uint32_t gen = atomic_load(&e->gen);
    if (w.nclaims == MAX_CLAIMS) {
        w.claims_full = true;
        return;
    }
    claim_t *c = &w.claims[w.nclaims++];
    c->slot = slot;
    c->gen = gen;
    c->e.access = e->access;
    c->e.base = e->base;
    c->e.len = e->len;
    c->e.heap_id = e->heap_id;
    c->e.heap_off = e->heap_off;
    c->e.heap_len = e->heap_len;
}

/* Does claim c let [addr, addr + size) be reached with need in mapping m,
 * and where (*off)? */
static bool claim_covers(const claim_t *c, const map_t *m, uint64_t addr, size_t size,
                         uint32_t need, size_t *off)
{
    const sm_reg_entry_t *e = &c->e;
    if ((e->access & need) != need || e->heap_id == 0 || e->heap_id != m->id ||
        e->heap_len != m->len || e->heap_off > e->heap_len ||
        e->len > e->heap_len - e->heap_off || ((e->heap_off ^ e->base) & (SM_HEAP_PAGE - 1)) != 0)
        return false;
    if (addr < e->base || addr - e->base > e->len || size > e->len - (addr - e->base))
        return false;
    *off = (size_t)(e->heap_off + (addr - e->base));
    return true;
}

/* The key as sm reads it. */
typedef struct key {
    uint8_t bytes[FERRY_BTL_KEY_MAX];
    sm_key_t k;
} fkey_t;

/* The one mapping whose bytes differ from its shadow ([*lo, *hi)), or -1;
 * more than one is a finding. */
static int changed_map(size_t *lo, size_t *hi)
{
    int which = -1;
    for (int i = 0; i < w.nmaps; i++) {
        const map_t *m = &w.maps[i];
        size_t a = 0, b = m->len;
        while (a < m->len && m->base[a] == m->shadow[a])
            a++;
        if (a == m->len)
            continue;
        while (b > a && m->base[b - 1] == m->shadow[b - 1])
            b--;
        if (which >= 0)
            FINDING("one operation changed two heap mappings");
        which = i;
        *lo = a;
        *hi = b;
    }
    return which;
}

static void shadows_sync(void)
{
    for (int i = 0; i < w.nmaps; i++)
        memcpy(w.maps[i].shadow, w.maps[i].base, w.maps[i].len);
}

/* After a direct operation (or a heap-path put or get) of size bytes at
 * addr under key, which returned rc (done: it says it completed). data is
 * what a put wrote; local what a get read (or an atomic's fetched value,
 * checked by the caller). Returns the claim and mapping that explain a
 * success, for the caller's further checks. */
static bool explain(const fkey_t *key, uint64_t addr, size_t size, uint32_t need, bool done,
                    bool put, const unsigned char *data, const unsigned char *local,
                    const map_t **m_out, size_t *off_out)
{
    size_t lo = 0, hi = 0;
    int ch = changed_map(&lo, &hi);
    if (ch >= 0 && !put)
        FINDING("a get or a refused operation changed heap memory");
    if (ch >= 0 && !done && !w.rewrote)
        FINDING("a refused operation changed heap memory, the table unchanged");
    bool explained = ch < 0 && !done;
    for (int c = 0; c < w.nclaims && !explained; c++) {
        const claim_t *cl = &w.claims[c];
        if (cl->slot != key->k.slot || cl->gen != key->k.gen || (cl->gen & 1) || cl->gen == 0 ||
            cl->slot >= w.nslots)
            continue;
        for (int i = 0; i < w.nmaps; i++) {
            size_t off;
            if (!claim_covers(cl, &w.maps[i], addr, size, need, &off))
                continue;
            if (ch >= 0 && (ch != i || lo < off || hi > off + size))
                continue;
            if (done && put && data != NULL && memcmp(w.maps[i].base + off, data, size) != 0)
                continue;
            if (done && !put && local != NULL &&
                memcmp(w.maps[i].shadow + off, local, size) != 0)
                continue;
            explained = true;
            if (m_out != NULL) {
                *m_out = &w.maps[i];
                *off_out = off;
            }
            break;
        }
    }
    if (!explained && !w.claims_full)
        FINDING("%s of %zu bytes at 0x%llx (slot %u gen %u) %s no state of the table allows",
                put ? "a write" : "a read", size, (unsigned long long)addr, key->k.slot,
                key->k.gen, done ? "succeeded where" : "changed memory");
    if (done && (key->k.slot >= w.nslots || atomic_load(&w.table[key->k.slot].gen) != key->k.gen))
        FINDING("an operation succeeded on a key the table no longer holds");
    return explained;
}

/* Would every state of the table that gave this key let it through, with
 * a heap object to map? Then a refusal is a finding. */
static bool must_succeed(const fkey_t *key, uint64_t addr, size_t size, uint32_t need)
{
    if (w.rewrite_pending || w.rewrote || w.claims_full || key->k.slot >= w.nslots ||
        atomic_load(&w.table[key->k.slot].gen) != key->k.gen || (key->k.gen & 1) ||
        key->k.gen == 0)
        return false;
    int n = 0;
    for (int c = 0; c < w.nclaims; c++) {
        const claim_t *cl = &w.claims[c];
        if (cl->slot != key->k.slot || cl->gen != key->k.gen)
            continue;
        const sm_reg_entry_t *e = &cl->e;
        map_t fake = {.len = (size_t)e->heap_len, .id = e->heap_id};
        size_t off;
        if (e->heap_id == 0 || e->heap_id > NOBJ || e->heap_len > w.obj_size[e->heap_id] ||
            e->heap_len == 0 || !claim_covers(cl, &fake, addr, size, need, &off))
            return false;
        n++;
    }
    return n > 0;
}

/* ---- the peer ---- */

static void reap(void);

static void peer_free(void)
{
    ferry_btl_endpoint_t *ep = w.ep;
    if (ep == NULL)
        return;
    ferry_btl_module_t *btl = &w.mod->super;
    sm_ep_fail(w.mod, ep, "the fuzz input moved on");
    for (int i = 0; i < 4; i++)
        btl->ops->progress(btl);
    reap();
    for (int i = 0; i < MAX_OPS; i++)
        if (w.ops[i].used)
            FINDING("an operation never completed after its peer failed");
    if (ep->sending)
        FINDING("a failed endpoint stayed on the sending list");
    sm_ep_unmap_heaps(ep);
    sm_rdma_ep_fini(ep);
    if (w.nmaps != 0)
        FINDING("%d heap mappings left after the endpoint let go of them", w.nmaps);
    for (int i = 0; i < MAX_OPS; i++) {
        free(w.ops[i].local);
        free(w.ops[i].expect);
    }
    memset(w.ops, 0, sizeof(w.ops));
    free(ep->hdr_bits);
    free(ep);
    free(w.seg);
    w.ep = NULL;
    w.seg = NULL;
}

static void peer_new(void)
{
    size_t reg_off = (sizeof(sm_seg_hdr_t) + SM_LINE - 1) / SM_LINE * SM_LINE;
    size_t chan_off =
        (reg_off + w.nslots * sizeof(sm_reg_entry_t) + SM_LINE - 1) / SM_LINE * SM_LINE;
    w.seg_size = chan_off + sizeof(sm_chan_t) + RING;
    w.seg = aligned_alloc(SM_LINE, w.seg_size);
    ferry_btl_endpoint_t *ep = calloc(1, sizeof(*ep));
    size_t words = (RING / SM_ALIGN + 63) / 64;
    if (w.seg == NULL || ep == NULL || (ep->hdr_bits = malloc(words * 8)) == NULL)
        abort();
    memset(w.seg, 0, w.seg_size);
    memset(ep->hdr_bits, 0xff, words * 8);
    w.table = (sm_reg_entry_t *)(void *)(w.seg + reg_off);
    ep->mod = w.mod;
    ep->rank = 1;
    ep->state = SM_EP_CONNECTED;
    ep->pidfd = -1;
    ep->peer_base = w.seg;
    ep->peer_size = w.seg_size;
    ep->peer_hdr = (sm_seg_hdr_t *)(void *)w.seg;
    ep->peer_reg_off = reg_off;
    ep->peer_reg_slots = w.nslots;
    ep->peer_get_slots = w.get_slots;
    snprintf(ep->peer_name, sizeof(ep->peer_name), "/ferry-fuzz-peer");
    ep->out = (sm_chan_t *)(void *)(w.seg + chan_off);
    util_list_init(&ep->queue);
    util_list_init(&ep->ring_puts);
    util_list_init(&ep->iputs);
    util_list_init(&ep->igets);
    util_list_init(&ep->gets);
    w.ep = ep;
    w.rewrite_pending = false;
    w.nclaims = 0;
    w.claims_full = false;
    for (uint32_t s = 0; s < w.nslots; s++)
        claim_add(s, &w.table[s]);
}

/* ---- records ---- */

static void pick_key(fuzz_in_t *in, fkey_t *key)
{
    uint8_t how = fuzz_u8(in);
    memset(key, 0, sizeof(*key));
    if (how & 0x80) {
        for (size_t i = 0; i < sizeof(sm_key_t); i++)
            key->bytes[i] = fuzz_u8(in);
    } else {
        sm_key_t k = {.slot = how % (w.nslots + 1u)};
        k.gen = k.slot < w.nslots ? atomic_load(&w.table[k.slot].gen) : 2;
        if (how & 0x40)
            k.gen += fuzz_u8(in);
        k.nonce = fuzz_u64(in);
        memcpy(key->bytes, &k, sizeof(k));
    }
    memcpy(&key->k, key->bytes, sizeof(key->k));
}

/* An address: relative to the entry the key names, or raw. */
static uint64_t pick_addr(fuzz_in_t *in, const fkey_t *key)
{
    uint8_t how = fuzz_u8(in);
    if (how % 8 == 7 || key->k.slot >= w.nslots)
        return fuzz_u64(in);
    int32_t off = (int16_t)fuzz_u16(in);
    if (how & 8)
        off &= ~7;
    return w.table[key->k.slot].base + (uint64_t)(int64_t)off;
}

static void schedule_rewrite(fuzz_in_t *in);

static void rec_table(fuzz_in_t *in)
{
    uint32_t slot = fuzz_u8(in) % w.nslots;
    uint8_t how = fuzz_u8(in);
    sm_reg_entry_t *e = &w.table[slot];
    sm_reg_entry_t n = {0};
    uint32_t gen;
    if (how & 1) {
        gen = fuzz_u32(in);
        n.access = fuzz_u32(in);
        n.base = fuzz_u64(in);
        n.len = fuzz_u64(in);
        n.heap_id = fuzz_u32(in);
        n.heap_off = fuzz_u64(in);
        n.heap_len = fuzz_u64(in);
    } else {
        /* Plausible: an entry of a heap object (or none), every right. */
        uint32_t old = atomic_load(&e->gen);
        gen = how & 2 ? old : (old | 1) + 1; /* the same generation, or the next */
        n.access = (how & 4) ? fuzz_u8(in) : FERRY_ACCESS_LOCAL | FERRY_ACCESS_REMOTE_READ |
                                            FERRY_ACCESS_REMOTE_WRITE |
                                            FERRY_ACCESS_REMOTE_ATOMIC;
        n.heap_id = fuzz_u8(in) % (NOBJ + 1);
        n.heap_len = (uint64_t)(fuzz_u8(in) + 1) * 32;
        n.heap_off = fuzz_u16(in) % (n.heap_len + 8);
        n.len = fuzz_u16(in) % (n.heap_len + 8);
        /* At the heap's offset within a page, as the owner's would be, or
         * a few bytes off. */
        n.base = 0x7f0000100000ull + (uint64_t)fuzz_u8(in) * SM_HEAP_PAGE + n.heap_off +
                 (how & 8 ? 1 + fuzz_u8(in) % 15 : 0);
    }
    atomic_store(&e->gen, gen);
    e->access = n.access;
    e->base = n.base;
    e->len = n.len;
    e->heap_id = n.heap_id;
    e->reserved = 0;
    e->heap_off = n.heap_off;
    e->heap_len = n.heap_len;
    claim_add(slot, e);
    if (how & 0x10)
        schedule_rewrite(in);
}

/* The peer will rewrite an entry when sm next maps a heap. */
static void schedule_rewrite(fuzz_in_t *in)
{
    w.rewrite_slot = fuzz_u8(in) % w.nslots;
    uint8_t how = fuzz_u8(in);
    sm_reg_entry_t *e = &w.table[w.rewrite_slot];
    w.rewrite_entry = (sm_reg_entry_t){.access = how & 1 ? 0 : e->access,
                                       .base = e->base + (how & 2 ? 64 : 0),
                                       .len = e->len + (how & 4 ? 64 : 0),
                                       .heap_id = e->heap_id,
                                       .heap_off = e->heap_off + (how & 8 ? 16 : 0),
                                       .heap_len = e->heap_len};
    w.rewrite_gen = atomic_load(&e->gen) + (how & 0x10 ? 0 : (how & 0x20 ? 1 : 2));
    w.rewrite_pending = true;
}

static void check_refusal(int rc, const char *what)
{
    if (rc != FERRY_ERR_ACCESS && rc != FERRY_ERR_INVALID && rc != FERRY_ERR_NOT_SUPPORTED &&
        !(rc == FERRY_ERR_UNREACH && w.ep->state != SM_EP_CONNECTED))
        FINDING("%s returned %d", what, rc);
}

static void rec_direct(fuzz_in_t *in)
{
    fkey_t key;
    pick_key(in, &key);
    uint64_t addr = pick_addr(in, &key);
    uint8_t how = fuzz_u8(in);
    bool put = how & 1;
    size_t size = fuzz_u16(in) % (MAX_SIZE + 1);
    if (how & 2)
        schedule_rewrite(in);
    unsigned char *local = malloc(size + 1), *data = malloc(size + 1);
    if (local == NULL || data == NULL)
        abort();
    for (size_t i = 0; i < size; i++)
        local[i] = data[i] = (unsigned char)(fuzz_u8(in) ^ 0x5a ^ i);
    uint32_t need = put ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ;
    bool must = !(how & 2) && size > 0 && w.ep->state == SM_EP_CONNECTED &&
                must_succeed(&key, addr, size, need);
    w.rewrote = false;
    int rc = sm_rdma_direct(&w.mod->super, w.ep, put, local, addr, key.bytes, size);
    w.rewrite_pending = false;
    if (rc != FERRY_BTL_DONE)
        check_refusal(rc, "rdma_direct");
    if (must && rc != FERRY_BTL_DONE)
        FINDING("rdma_direct refused (%d) what the table allows", rc);
    if (size == 0 && rc == FERRY_BTL_DONE)
        FINDING("rdma_direct of no bytes did something");
    explain(&key, addr, size, need, rc == FERRY_BTL_DONE, put, data, local, NULL, NULL);
    if (put && memcmp(local, data, size) != 0)
        FINDING("a direct put changed its source");
    shadows_sync();
    free(local);
    free(data);
}

static const uint32_t amo_ops[] = {
    FERRY_BTL_ATOMIC_ADD, FERRY_BTL_ATOMIC_AND,  FERRY_BTL_ATOMIC_OR,   FERRY_BTL_ATOMIC_XOR,
    FERRY_BTL_ATOMIC_LAND, FERRY_BTL_ATOMIC_LOR, FERRY_BTL_ATOMIC_LXOR, FERRY_BTL_ATOMIC_SWAP,
    FERRY_BTL_ATOMIC_MIN, FERRY_BTL_ATOMIC_MAX};

static op_t *op_slot(void)
{
    for (int i = 0; i < MAX_OPS; i++)
        if (!w.ops[i].used)
            return &w.ops[i];
    return NULL;
}

static void on_amo(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                   ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status)
{
    op_t *o = cbdata;
    if (!o->used || o->done || !o->atomic || ep != w.ep)
        FINDING("an atomic's completion for no atomic in flight");
    o->done = true;
    o->status = status;
}

static void rec_atomic(fuzz_in_t *in)
{
    fkey_t key;
    pick_key(in, &key);
    uint64_t addr = pick_addr(in, &key);
    uint8_t how = fuzz_u8(in);
    bool w32 = how & 1, cswap = (how & 6) == 6, fetch = cswap || (how & 2);
    bool direct = how & 0x10; /* through sm_atomic_direct */
    uint32_t op = (how & 6) == 4 ? amo_ops[fuzz_u8(in) % 10] : FERRY_BTL_ATOMIC_ADD;
    if (how & 0x80)
        op = fuzz_u8(in);
    uint64_t operand = fuzz_u64(in), compare = fuzz_u64(in);
    uint32_t flags = w32 ? FERRY_BTL_ATOMIC_FLAG_32BIT : 0;
    size_t size = w32 ? 4 : 8;
    if (how & 8)
        schedule_rewrite(in);
    op_t *o = op_slot();
    if (o == NULL)
        return;
    *o = (op_t){.used = true, .atomic = true, .fetch = fetch, .w32 = w32, .len = size,
                .want_status = 1};
    o->local = malloc(8);
    if (o->local == NULL)
        abort();
    memset(o->local, 0xee, 8);
    bool must = !(how & 8) && (addr % size) == 0 && !(how & 0x80) &&
                w.ep->state == SM_EP_CONNECTED &&
                must_succeed(&key, addr, size, FERRY_ACCESS_REMOTE_ATOMIC);
    w.rewrote = false;
    uint64_t cookie = w.mod->amo.next_cookie;
    ferry_btl_module_t *btl = &w.mod->super;
    int rc;
    if (direct) {
        rc = sm_atomic_direct(btl, w.ep, fetch ? o->local : NULL, addr, key.bytes, op, operand,
                              compare, cswap ? flags | FERRY_BTL_ATOMIC_FLAG_CSWAP : flags);
        /* Done, or declined or refused with nothing started. */
        if (rc == FERRY_OK || w.mod->amo.next_cookie != cookie)
            FINDING("atomic_direct left work behind (%d)", rc);
    } else if (cswap)
        rc = sm_atomic_cswap(btl, w.ep, o->local, addr, NULL, key.bytes, compare, operand, flags,
                             on_amo, NULL, o);
    else if (fetch)
        rc = sm_atomic_fop(btl, w.ep, o->local, addr, NULL, key.bytes, op, operand, flags, on_amo,
                           NULL, o);
    else
        rc = sm_atomic_op(btl, w.ep, addr, key.bytes, op, operand, flags, on_amo, NULL, o);
    w.rewrite_pending = false;
    if (must && rc != FERRY_BTL_DONE)
        FINDING("an atomic refused (%d) what the table allows", rc);
    if (rc == FERRY_OK) {
        /* Gone to the peer (not a heap of its): it answers. */
        if (w.mod->amo.next_cookie != cookie + 1)
            FINDING("an atomic on the generic path took no cookie");
        o->cookie = w.mod->amo.next_cookie;
        if (changed_map(&(size_t){0}, &(size_t){0}) >= 0)
            FINDING("an atomic sent to the peer changed heap memory");
        return;
    }
    if (rc != FERRY_BTL_DONE) {
        if (rc != FERRY_ERR_NO_RESOURCE)
            check_refusal(rc, "an atomic");
        explain(&key, addr, size, FERRY_ACCESS_REMOTE_ATOMIC, false, true, NULL, NULL, NULL,
                NULL);
    } else {
        explain(&key, addr, size, FERRY_ACCESS_REMOTE_ATOMIC, true, true, NULL, NULL, NULL,
                NULL);
        /* Some state of the table and mapping must explain the memory after
         * it and the value fetched: the operation applied to the shadow. */
        bool ok = w.claims_full;
        for (int c = 0; c < w.nclaims && !ok; c++) {
            const claim_t *cl = &w.claims[c];
            if (cl->slot != key.k.slot || cl->gen != key.k.gen)
                continue;
            for (int i = 0; i < w.nmaps && !ok; i++) {
                const map_t *m = &w.maps[i];
                size_t off;
                if (!claim_covers(cl, m, addr, size, FERRY_ACCESS_REMOTE_ATOMIC, &off))
                    continue;
                _Alignas(8) unsigned char cell[8];
                memcpy(cell, m->shadow + off, size);
                uint64_t old = ferry_btl_atomic_apply(cell, w32, cswap, cswap ? 0 : op, operand,
                                                      compare);
                unsigned char want[8];
                btl_atomic_store_result(want, w32, old);
                if (memcmp(cell, m->base + off, size) != 0 ||
                    (fetch && memcmp(want, o->local, size) != 0))
                    continue;
                if ((uintptr_t)(m->base + off) % size != 0)
                    FINDING("an atomic on a misaligned address (%zu bytes into a heap mapping)",
                            off);
                ok = true;
            }
        }
        if (!ok)
            FINDING("an atomic's memory or fetched value matches no state of the table");
    }
    shadows_sync();
    free(o->local);
    *o = (op_t){0};
}

static void on_rdma(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                    int status)
{
    op_t *o = des->cbdata;
    if (o < w.ops || o >= w.ops + MAX_OPS || !o->used || o->done || o->atomic || o->des != des)
        FINDING("a completion for no operation in flight");
    o->done = true;
    o->status = status;
    o->des = NULL;
}

static void rec_rdma(fuzz_in_t *in)
{
    fkey_t key;
    pick_key(in, &key);
    uint64_t addr = pick_addr(in, &key);
    uint8_t how = fuzz_u8(in);
    bool put = how & 1;
    size_t size = 1 + fuzz_u16(in) % (2 * MAX_SEND);
    if (how & 2)
        schedule_rewrite(in);
    op_t *o = op_slot();
    if (o == NULL)
        return;
    *o = (op_t){.used = true, .put = put, .len = size, .want_status = 1};
    o->local = malloc(size);
    o->expect = malloc(size);
    if (o->local == NULL || o->expect == NULL)
        abort();
    for (size_t i = 0; i < size; i++)
        o->local[i] = o->expect[i] = (unsigned char)(i * 13 + 5);
    ferry_btl_module_t *btl = &w.mod->super;
    ferry_convertor_t conv;
    ferry_convertor_init_contig(&conv, o->local, size);
    size_t sz = size;
    ferry_btl_desc_t *des = NULL;
    int rc = put ? btl->ops->prepare_src(btl, w.ep, NULL, &conv, 0, &sz, FERRY_BTL_PREP_RDMA, &des)
                 : btl->ops->prepare_dst(btl, w.ep, NULL, &conv, 0, &sz, FERRY_BTL_PREP_RDMA,
                                         &des);
    if (rc != FERRY_OK || sz != size) {
        if (des != NULL)
            btl->ops->free(btl, des);
        free(o->local);
        free(o->expect);
        *o = (op_t){0};
        return;
    }
    ferry_btl_segment_t *remote = put ? &des->dst[0] : &des->src[0];
    if (put)
        des->dst_cnt = 1;
    else
        des->src_cnt = 1;
    remote->addr = addr;
    remote->len = size;
    memcpy(remote->key, key.bytes, FERRY_BTL_KEY_MAX);
    des->flags = FERRY_BTL_DES_OWNERSHIP;
    des->cbfunc = on_rdma;
    des->cbdata = o;
    o->des = des;
    w.rewrote = false;
    uint32_t need = put ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ;
    rc = put ? btl->ops->put(btl, w.ep, des) : btl->ops->get(btl, w.ep, des);
    w.rewrite_pending = false;
    if (rc != FERRY_OK) {
        check_refusal(rc, put ? "put" : "get");
        explain(&key, addr, size, need, false, put, NULL, NULL, NULL, NULL);
        btl->ops->free(btl, des);
        free(o->local);
        free(o->expect);
        *o = (op_t){0};
        return;
    }
    /* The heap path completed it already (its callback comes at progress);
     * the ring path left it queued or in the ring. */
    btl_frag_t *frag = btl_frag_of(des);
    bool ringed = false;
    for (util_list_item_t *it = util_list_first(put ? &w.ep->ring_puts : &w.ep->gets);
         it != NULL && !ringed; it = util_list_next(put ? &w.ep->ring_puts : &w.ep->gets, it))
        ringed = it == &frag->link;
    for (util_list_item_t *it = util_list_first(&w.ep->queue); it != NULL && !ringed;
         it = util_list_next(&w.ep->queue, it))
        ringed = it == &frag->link;
    if (ringed) {
        if (changed_map(&(size_t){0}, &(size_t){0}) >= 0)
            FINDING("a put or get through the ring changed heap memory");
        return;
    }
    /* Completed on the heap path: with its status now, callback later. */
    int st = frag->status;
    if (st == FERRY_OK) {
        const map_t *m = NULL;
        size_t off = 0;
        explain(&key, addr, size, need, true, put, o->local, o->local, &m, &off);
        if (!put)
            memcpy(o->expect, o->local, size);
    } else {
        check_refusal(st, "a heap put or get");
        explain(&key, addr, size, need, false, put, NULL, NULL, NULL, NULL);
        memcpy(o->expect, o->local, size);
    }
    o->want_status = st;
    shadows_sync();
}

static op_t *op_of_frag(const btl_frag_t *frag);

/* The ring puts a tail at tail passes complete with what the peer left in
 * their status words: 0 is success, anything else a refusal. */
static void puts_passed(uint64_t tail)
{
    for (util_list_item_t *it = util_list_first(&w.ep->ring_puts); it != NULL;
         it = util_list_next(&w.ep->ring_puts, it)) {
        btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
        op_t *o = op_of_frag(frag);
        if (o == NULL || frag->end_pos > tail)
            continue;
        int32_t status;
        memcpy(&status, w.ep->out->ring + frag->cookie, sizeof(status));
        o->want_status = status == FERRY_OK ? FERRY_OK : FERRY_ERR_ACCESS;
    }
}

static void rec_tail(fuzz_in_t *in)
{
    ferry_btl_endpoint_t *ep = w.ep;
    uint8_t how = fuzz_u8(in);
    uint64_t tail;
    switch (how % 4) {
    case 0:
        tail = fuzz_u64(in);
        break;
    case 1:
        tail = ep->head - fuzz_u16(in) % 64 * SM_ALIGN;
        break;
    case 2:
        tail = ep->head + fuzz_u8(in);
        break;
    default:
        tail = ep->cached_tail - fuzz_u8(in);
        break;
    }
    bool was_connected = ep->state == SM_EP_CONNECTED;
    uint64_t head = ep->head, cached = ep->cached_tail;
    bool corrupt = tail > head || tail < cached;
    if (!corrupt && was_connected)
        puts_passed(tail);
    atomic_store(&ep->out->tail, tail);
    int rc = sm_ring_refresh_tail(ep);
    if (corrupt) {
        if (rc != -1 || ep->state == SM_EP_CONNECTED)
            FINDING("a corrupt tail %llu (head %llu, last %llu) was taken",
                    (unsigned long long)tail, (unsigned long long)head,
                    (unsigned long long)cached);
    } else if (was_connected) {
        if (rc < 0 || ep->cached_tail != tail)
            FINDING("a sound tail was refused");
        for (util_list_item_t *it = util_list_first(&ep->ring_puts); it != NULL;
             it = util_list_next(&ep->ring_puts, it))
            if (UTIL_CONTAINER_OF(it, btl_frag_t, link)->end_pos <= tail)
                FINDING("a ring put the tail passed stayed in flight");
    }
}

static op_t *op_of_frag(const btl_frag_t *frag)
{
    for (int i = 0; i < MAX_OPS; i++)
        if (w.ops[i].used && !w.ops[i].done && w.ops[i].des == &frag->base)
            return &w.ops[i];
    return NULL;
}

static void rec_put_status(fuzz_in_t *in)
{
    util_list_item_t *it = util_list_first(&w.ep->ring_puts);
    if (it == NULL)
        return;
    btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
    int32_t status = fuzz_u8(in) & 1 ? (int32_t)fuzz_u32(in) : FERRY_ERR_ACCESS;
    if (frag->cookie > RING - sizeof(status))
        FINDING("a ring put's status word lies outside the ring");
    memcpy(w.ep->out->ring + frag->cookie, &status, sizeof(status));
}

static void rec_consume(void)
{
    ferry_btl_endpoint_t *ep = w.ep;
    if (ep->state == SM_EP_CONNECTED)
        puts_passed(ep->head);
    atomic_store(&ep->out->tail, ep->head);
    if (ep->state == SM_EP_CONNECTED) {
        if (sm_ring_refresh_tail(ep) < 0)
            FINDING("the tail at our head was refused");
        sm_drain_queue(w.mod, ep);
    }
}

static void rec_get_resp(fuzz_in_t *in)
{
    ferry_btl_endpoint_t *ep = w.ep;
    uint8_t how = fuzz_u8(in);
    op_t *o = NULL;
    btl_frag_t *frag = NULL;
    util_list_item_t *it = util_list_first(&ep->gets);
    for (int skip = how % 4; it != NULL && skip > 0; skip--)
        it = util_list_next(&ep->gets, it);
    if (it != NULL) {
        frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
        o = op_of_frag(frag);
    }
    sm_get_resp_t resp = {.cookie = frag != NULL && !(how & 4) ? frag->cookie : fuzz_u64(in)};
    resp.offset = frag != NULL && !(how & 8) ? frag->done : fuzz_u64(in);
    resp.status = how & 0x10 ? (int32_t)fuzz_u32(in) : FERRY_OK;
    size_t n = fuzz_u16(in) % (MAX_SEND - sizeof(resp) + 1);
    unsigned char msg[MAX_SEND];
    memcpy(msg, &resp, sizeof(resp));
    for (size_t i = 0; i < n; i++)
        msg[sizeof(resp) + i] = fuzz_u8(in);
    uint32_t len = (uint32_t)(sizeof(resp) + n);
    if (how & 0x20)
        len = fuzz_u8(in) % (sizeof(resp) + 1);
    bool connected = ep->state == SM_EP_CONNECTED;
    size_t done_before = frag != NULL ? frag->done : 0;
    bool taken = sm_rdma_handle(w.mod, ep, SM_T_GET_RESP, msg, len);
    if (!taken)
        FINDING("a get response was left in the ring");
    if (!connected)
        return;
    /* What a sound answer is: to a get in flight, a status, or data in place. */
    bool ours = frag != NULL && resp.cookie == frag->cookie;
    bool sound = len >= sizeof(resp) && ours &&
                 (resp.status != FERRY_OK || (resp.offset == done_before &&
                                              n <= frag->base.dst[0].len - done_before));
    if (!ours && len >= sizeof(resp)) {
        bool any = false;
        for (it = util_list_first(&ep->gets); it != NULL; it = util_list_next(&ep->gets, it))
            any = any || UTIL_CONTAINER_OF(it, btl_frag_t, link)->cookie == resp.cookie;
        if (any)
            return; /* a raw cookie that named another get: not modelled */
    }
    if (!sound) {
        if (ep->state != SM_EP_FAILED)
            FINDING("an unsound get response did not fail the peer");
        return;
    }
    if (ep->state != SM_EP_CONNECTED)
        FINDING("a sound get response failed the peer");
    if (o == NULL)
        return;
    if (resp.status == FERRY_OK) {
        memcpy(o->expect + done_before, msg + sizeof(resp), n);
        o->got = done_before + n;
        if (o->got == o->len)
            o->want_status = FERRY_OK;
    } else {
        o->want_status = resp.status < 0 && resp.status > FERRY_ERR_LAST ? resp.status
                                                                         : FERRY_ERR_PROTO;
    }
}

static void rec_amo_answer(fuzz_in_t *in)
{
    ferry_btl_endpoint_t *ep = w.ep;
    uint8_t how = fuzz_u8(in);
    op_t *o = NULL;
    for (int i = 0, skip = how % 4; i < MAX_OPS; i++)
        if (w.ops[i].used && w.ops[i].atomic && !w.ops[i].done && w.ops[i].want_status == 1 &&
            w.ops[i].cookie != 0 && skip-- == 0) {
            o = &w.ops[i];
            break;
        }
    sm_amo_answer_t m = {0};
    m.cookie = o != NULL && !(how & 4) ? o->cookie : fuzz_u64(in);
    m.status = how & 8 ? (int32_t)fuzz_u32(in) : FERRY_OK;
    m.operand = how & 0x10 ? fuzz_u64(in) : fuzz_u32(in);
    if (how & 0x20)
        m.reserved = fuzz_u32(in);
    uint32_t len = how & 0x40 ? fuzz_u8(in) % (sizeof(m) + 1) : sizeof(m);
    bool connected = ep->state == SM_EP_CONNECTED;
    /* Which atomic it names, before its callback (run by the answer) marks
     * it done. */
    bool known = false;
    op_t *named = NULL;
    for (int i = 0; i < MAX_OPS; i++)
        if (w.ops[i].used && w.ops[i].atomic && !w.ops[i].done && w.ops[i].want_status == 1 &&
            w.ops[i].cookie == m.cookie && m.cookie != 0) {
            known = true;
            named = &w.ops[i];
        }
    if (!sm_rdma_handle(w.mod, ep, SM_T_AMO_ANSWER, (unsigned char *)&m, len))
        FINDING("an atomic's answer was left in the ring");
    if (!connected)
        return;
    bool sound = len == sizeof(m) && m.reserved == 0 && m.status <= 0 &&
                 m.status > FERRY_ERR_LAST &&
                 known && !(m.status == FERRY_OK && named->w32 && m.operand > UINT32_MAX);
    if (sound != (ep->state == SM_EP_CONNECTED))
        FINDING("an atomic's answer was %s, the peer %s", sound ? "sound" : "unsound",
                ep->state == SM_EP_CONNECTED ? "kept" : "failed");
    if (sound) {
        named->want_status = m.status;
        if (m.status == FERRY_OK) {
            named->expect = malloc(8);
            if (named->expect == NULL)
                abort();
            memset(named->expect, 0xee, 8);
            btl_atomic_store_result(named->expect, named->w32, m.operand);
        }
    }
}

/* Callbacks ran: each completion must carry what the peer said. */
static void reap(void)
{
    for (int i = 0; i < MAX_OPS; i++) {
        op_t *o = &w.ops[i];
        if (!o->used || !o->done)
            continue;
        bool failed = w.ep->state != SM_EP_CONNECTED;
        if (o->want_status != 1 && o->status != o->want_status &&
            !(failed && o->status == FERRY_ERR_UNREACH))
            FINDING("an operation completed with %d, its peer said %d", o->status,
                    o->want_status);
        if (o->want_status == 1 && !failed)
            FINDING("an operation completed (%d) before its peer answered", o->status);
        if (o->status == FERRY_OK && o->want_status == FERRY_OK && o->expect != NULL &&
            !o->put && (!o->atomic || o->fetch) && memcmp(o->local, o->expect, o->atomic ? (o->w32 ? 4 : 8) : o->len) != 0)
            FINDING("a get or atomic completed with other bytes than its peer sent");
        free(o->local);
        free(o->expect);
        *o = (op_t){0};
    }
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    (void)ctx, (void)peer, (void)status, (void)msg, (void)arg;
}

static void finish(void)
{
    if (w.ctx != NULL)
        ferry_finalize(&w.ctx);
}

static void setup(void)
{
    char ring[32], send[32];
    snprintf(ring, sizeof(ring), "%u", RING);
    snprintf(send, sizeof(send), "%u", MAX_SEND);
    setenv("FERRY_SM_RING_SIZE", ring, 1);
    setenv("FERRY_SM_MAX_SEND_SIZE", send, 1);
    setenv("FERRY_SM_EAGER_LIMIT", send, 1);
    /* No cross-memory attach: every byte goes through the paths fuzzed here
     * (a stand-in peer has no process to attach to). */
    setenv("FERRY_SM_CMA", "0", 1);
    setenv("FERRY_LOG_LEVEL", "error", 0);
    ferry_init_params_t params = {.thread_level = FERRY_THREAD_SINGLE, .transports = "sm"};
    if (ferry_init(&params, &w.ctx) != FERRY_OK) {
        fprintf(stderr, "fuzz_sm_init: ferry_init failed\n");
        abort();
    }
    ferry_btl_module_t *btl = btl_ctx_find_module(w.ctx, "sm");
    if (btl == NULL) {
        fprintf(stderr, "fuzz_sm_init: no sm module\n");
        abort();
    }
    w.mod = (sm_module_t *)btl;
    if (w.mod->cma_ok)
        FINDING("cross-memory attach on although FERRY_SM_CMA=0");
    ferry_set_error_cb(w.ctx, on_error, NULL);
    sm_heap_mapper = (sm_heap_mapper_t){.map = fz_map, .unmap = fz_unmap};
    atexit(finish);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (w.mod == NULL)
        setup();
    if (size < 5)
        return 0;
    w.nslots = 1 + data[0] % MAX_SLOTS;
    w.get_slots = 1 + data[1] % 4;
    for (int i = 1; i <= NOBJ; i++)
        w.obj_size[i] = (size_t)data[1 + i] * 32;
    peer_new();
    size_t off = 5;
    const uint8_t *rec;
    size_t len;
    for (int n = 0; n < 256 && fuzz_next_record(data, size, &off, &rec, &len); n++) {
        if (len == 0)
            continue;
        fuzz_in_t in = {.data = rec + 1, .size = len - 1};
        switch (rec[0] % 11) {
        case 0:
            rec_table(&in);
            break;
        case 1:
            rec_direct(&in);
            break;
        case 2:
            rec_atomic(&in);
            break;
        case 3:
            rec_rdma(&in);
            break;
        case 4:
            rec_tail(&in);
            break;
        case 5:
            rec_get_resp(&in);
            break;
        case 6:
            rec_amo_answer(&in);
            break;
        case 7:
            rec_put_status(&in);
            break;
        case 8:
            w.mod->super.ops->progress(&w.mod->super);
            break;
        case 9:
            rec_consume();
            break;
        default:
            peer_free();
            peer_new();
            break;
        }
        w.mod->super.ops->progress(&w.mod->super);
        reap();
    }
    peer_free();
    return 0;
}
