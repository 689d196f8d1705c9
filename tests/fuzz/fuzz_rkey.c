/*
 * Fuzz harness: remote-key parsing (api_rkey_resolve, src/api/rdma.c), the
 * packed ferry_rkey_t a peer sends for its memory and the application
 * passes to ferry_put and ferry_get. The context is a stand-in with what the
 * parser looks at: this process's rank, the job size, and four modules (sm,
 * and three of tcp, so that instances and runs of them count).
 *
 * Input:
 *   byte 0     bits 0-1: the module (0 sm, 1 tcp #0, 2 tcp #1, 3 tcp #2);
 *              bits 2-3: the rank the key is used for (0-3); bit 4: repair
 *              the header (the right magic, version and owner), so that
 *              mutations get past the first checks; bit 5: raddr counts
 *              from the header's base
 *   bytes 1-8  raddr (little-endian)
 *   bytes 9-16 len (little-endian)
 *   byte 17    the rights needed (FERRY_ACCESS_* bits, low three)
 *   the rest   the key's bytes, cut or zero-padded to FERRY_RKEY_SIZE
 * Besides not crashing or reading past the key, the parser's answer must be
 * the one a model of rkey.h's rules gives, written here apart from it: a
 * key is accepted exactly when it is well formed (every entry inside it,
 * no run of 0 instances or past 255, a zero pad, no instance of a
 * transport claimed twice: duplicate and overlapping runs are refused),
 * is the dst's, has an entry whose run covers the module, and covers the
 * range with the rights; and what it hands out is that entry's key bytes,
 * zero after them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "api/rkey.h"
#include "btl/ctx.h"
#include "fuzz.h"

#define HDR_IN 18
#define NMODULES 4

static const ferry_btl_component_t comp_sm = {.name = "sm"};
static const ferry_btl_component_t comp_tcp = {.name = "tcp"};
static ferry_btl_module_t modules[NMODULES];
static ferry_btl_module_t *module_list[NMODULES];
static ferry_ctx_t ctx;
#define NRANKS 4
/* Endpoints: tcp's modules reach every rank, and name the peer's module
 * they pair with by a rule of their own (as tcp's per-interface modules
 * pair by subnet), which the parser must ask for; sm's has no such op. */
static char fake_eps[NRANKS][NMODULES];
static ferry_btl_endpoint_t *eps_of[NRANKS][NMODULES];
static btl_peer_t peers[NRANKS];

/* The peer's number for the module m of ours that reaches rank dst: its
 * own for sm, a crossed one for tcp (none known for rank 3's third). */
static int partner(int m, int dst)
{
    if (m == 0)
        return 0;
    int inst = m - 1;
    if (dst == 3 && inst == 2)
        return -1;
    return (inst + dst) % 3;
}

static int fake_peer_instance(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep)
{
    (void)btl;
    ptrdiff_t at = (char *)ep - &fake_eps[0][0];
    return partner((int)(at % NMODULES), (int)(at / NMODULES));
}

static const ferry_btl_ops_t ops_sm = {0};
static const ferry_btl_ops_t ops_tcp = {.peer_instance = fake_peer_instance};

static void setup(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    rt_log_init(&ctx.log);
    ctx.magic = BTL_CTX_MAGIC;
    ctx.rank = 1;
    ctx.size = 4;
    const ferry_btl_component_t *comps[NMODULES] = {&comp_sm, &comp_tcp, &comp_tcp,
                                                    &comp_tcp};
    for (int m = 0; m < NMODULES; m++) {
        modules[m].attr.name = comps[m]->name;
        modules[m].attr.reg_handle_size = m == 0 ? 16 : 24;
        modules[m].component = comps[m];
        modules[m].ctx = &ctx;
        modules[m].ops = m == 0 ? &ops_sm : &ops_tcp;
        module_list[m] = &modules[m];
    }
    ctx.modules = module_list;
    ctx.n_modules = NMODULES;
    for (int r = 0; r < NRANKS; r++) {
        for (int m = 0; m < NMODULES; m++)
            eps_of[r][m] = (ferry_btl_endpoint_t *)(void *)&fake_eps[r][m];
        peers[r].eps = eps_of[r];
    }
    ctx.peers = peers;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* The model: what api_rkey_resolve must answer for rkey used for module m
 * of rank dst over [raddr, raddr + len) with rights need, and on success
 * the key it must hand out. Arithmetic is exact (128 bits). */
static int model(const ferry_rkey_t *rkey, int m, int dst, uint64_t raddr, size_t len,
                 uint32_t need, uint8_t *key_out)
{
    api_rkey_header_t hdr;
    memcpy(&hdr, rkey->bytes, sizeof(hdr));
    if (hdr.magic != API_RKEY_MAGIC || hdr.version != API_RKEY_VERSION || hdr.owner != dst)
        return FERRY_ERR_INVALID;
    /* Every entry: inside the key, sane, and no instance claimed twice. */
    unsigned char claimed[2][256]; /* by transport (sm, tcp): claims of each instance */
    memset(claimed, 0, sizeof(claimed));
    uint32_t hash = api_rkey_name_hash(modules[m].attr.name);
    /* The key of the peer's module ours pairs with, by the peer's number
     * for it where the transport says (else our own). */
    int pi = dst >= 0 && dst < NRANKS ? partner(m, dst) : -1;
    unsigned inst = pi >= 0 ? (unsigned)pi : (unsigned)btl_ctx_module_instance(&ctx, m);
    int found = -1;
    size_t off = sizeof(hdr);
    for (unsigned i = 0; i < hdr.n_entries; i++) {
        api_rkey_entry_t e;
        if (off + sizeof(e) > FERRY_RKEY_SIZE)
            return FERRY_ERR_INVALID;
        memcpy(&e, rkey->bytes + off, sizeof(e));
        if (e.key_len > FERRY_BTL_KEY_MAX || off + sizeof(e) + e.key_len > FERRY_RKEY_SIZE ||
            e.count == 0 || e.first + e.count > 256 || e.zero != 0)
            return FERRY_ERR_INVALID;
        int t = e.name_hash == api_rkey_name_hash("sm")    ? 0
                : e.name_hash == api_rkey_name_hash("tcp") ? 1
                                                            : -1;
        for (unsigned k = e.first; t >= 0 && k < (unsigned)e.first + e.count; k++)
            if (claimed[t][k]++ > 0)
                return FERRY_ERR_INVALID;
        if (e.name_hash == hash && inst >= e.first && inst < (unsigned)e.first + e.count)
            found = (int)off;
        off += sizeof(e) + e.key_len;
    }
    /* (Overlaps between entries of other transports are refused too; the
     * model counts sm's and tcp's, and the stand-in has no others.) */
    if (found < 0)
        return FERRY_ERR_INVALID;
    unsigned __int128 lo = raddr, hi = (unsigned __int128)raddr + len;
    if ((hdr.access & need) != need || lo < hdr.base ||
        hi > (unsigned __int128)hdr.base + hdr.len)
        return FERRY_ERR_ACCESS;
    api_rkey_entry_t e;
    memcpy(&e, rkey->bytes + found, sizeof(e));
    memset(key_out, 0, FERRY_BTL_KEY_MAX);
    memcpy(key_out, rkey->bytes + found + sizeof(e), e.key_len);
    return FERRY_OK;
}

/* Whether two entries of transports other than sm and tcp claim one
 * instance: the parser refuses such a key, which the model does not
 * count. */
static int other_overlap(const ferry_rkey_t *rkey)
{
    api_rkey_header_t hdr;
    memcpy(&hdr, rkey->bytes, sizeof(hdr));
    api_rkey_entry_t seen[API_RKEY_MAX_ENTRIES];
    size_t off = sizeof(hdr);
    for (unsigned i = 0; i < hdr.n_entries && i < API_RKEY_MAX_ENTRIES; i++) {
        api_rkey_entry_t e;
        if (off + sizeof(e) > FERRY_RKEY_SIZE)
            return 0;
        memcpy(&e, rkey->bytes + off, sizeof(e));
        if (e.key_len > FERRY_BTL_KEY_MAX || off + sizeof(e) + e.key_len > FERRY_RKEY_SIZE)
            return 0;
        if (e.name_hash != api_rkey_name_hash("sm") && e.name_hash != api_rkey_name_hash("tcp"))
            for (unsigned j = 0; j < i; j++)
                if (seen[j].name_hash == e.name_hash &&
                    e.first < seen[j].first + seen[j].count &&
                    seen[j].first < e.first + e.count)
                    return 1;
        seen[i] = e;
        off += sizeof(e) + e.key_len;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < HDR_IN)
        return 0;
    unsigned flags = data[0];
    int m = (int)(flags & 3u) > NMODULES - 1 ? NMODULES - 1 : (int)(flags & 3u);
    int dst = (int)((flags >> 2) & 3u);
    uint64_t raddr = le64(data + 1);
    uint64_t len64 = le64(data + 9);
    size_t len = (size_t)len64;
    uint32_t need = data[17] & 7u;

    /* Exactly FERRY_RKEY_SIZE bytes on the heap: a read past the key is a
     * sanitizer report, not a silent read of the next field. */
    ferry_rkey_t *rkey = calloc(1, sizeof(*rkey));
    CHECK_FUZZ(rkey != NULL);
    size_t n = size - HDR_IN < FERRY_RKEY_SIZE ? size - HDR_IN : FERRY_RKEY_SIZE;
    memcpy(rkey->bytes, data + HDR_IN, n);
    api_rkey_header_t hdr;
    memcpy(&hdr, rkey->bytes, sizeof(hdr));
    if (flags & 0x10u) {
        hdr.magic = API_RKEY_MAGIC;
        hdr.version = API_RKEY_VERSION;
        hdr.owner = dst;
        memcpy(rkey->bytes, &hdr, sizeof(hdr));
    }
    if (flags & 0x20u)
        raddr += hdr.base;

    uint8_t key[FERRY_BTL_KEY_MAX];
    memset(key, 0xee, sizeof(key));
    int rc = api_rkey_resolve(&ctx, m, dst, rkey, raddr, len, need, key);
    CHECK_FUZZ(rc == FERRY_OK || rc == FERRY_ERR_INVALID || rc == FERRY_ERR_ACCESS);
    uint8_t want[FERRY_BTL_KEY_MAX];
    int expect = model(rkey, m, dst, raddr, len, need, want);
    if (expect != FERRY_ERR_INVALID && other_overlap(rkey))
        expect = FERRY_ERR_INVALID;
    CHECK_FUZZ(rc == expect);
    if (rc == FERRY_OK) {
        CHECK_FUZZ(memcmp(key, want, sizeof(key)) == 0);
    } else {
        /* Nothing is handed out on a refusal. */
        for (size_t j = 0; j < sizeof(key); j++)
            CHECK_FUZZ(key[j] == 0xee);
    }
    free(rkey);
    return 0;
}
