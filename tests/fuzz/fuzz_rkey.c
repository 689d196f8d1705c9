/*
 * Fuzz harness: remote-key parsing (api_rkey_resolve, src/api/rdma.c), the
 * packed ferry_rkey_t a peer sends for its memory and the application
 * passes to ferry_put and ferry_get. The context is a stand-in with what the
 * parser looks at: this process's rank, the job size, and three modules
 * (sm, and two of tcp, so that instances count).
 *
 * Input:
 *   byte 0     bits 0-1: the module (0 sm, 1 tcp #0, 2 and 3 tcp #1);
 *              bits 2-3: the rank the key is used for (0-3); bit 4: repair
 *              the header (the right magic, version and owner), so that
 *              mutations get past the first checks; bit 5: raddr counts
 *              from the header's base
 *   bytes 1-8  raddr (little-endian)
 *   bytes 9-16 len (little-endian)
 *   byte 17    the rights needed (FERRY_ACCESS_* bits, low three)
 *   the rest   the key's bytes, cut or zero-padded to FERRY_RKEY_SIZE
 * Besides not crashing or reading past the key, a key accepted must really
 * be the dst's, cover the range with the rights, and yield exactly the
 * bytes of an entry for that module, zero after them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "api/rkey.h"
#include "btl/ctx.h"
#include "fuzz.h"

#define HDR_IN 18
#define NMODULES 3

static const ferry_btl_component_t comp_sm = {.name = "sm"};
static const ferry_btl_component_t comp_tcp = {.name = "tcp"};
static ferry_btl_module_t modules[NMODULES];
static ferry_btl_module_t *module_list[NMODULES];
static ferry_ctx_t ctx;

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
    const ferry_btl_component_t *comps[NMODULES] = {&comp_sm, &comp_tcp, &comp_tcp};
    for (int m = 0; m < NMODULES; m++) {
        modules[m].attr.name = comps[m]->name;
        modules[m].attr.reg_handle_size = m == 0 ? 16 : 24;
        modules[m].component = comps[m];
        modules[m].ctx = &ctx;
        module_list[m] = &modules[m];
    }
    ctx.modules = module_list;
    ctx.n_modules = NMODULES;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Is what the parser handed out the key of an entry for module m? */
static int entry_matches(const ferry_rkey_t *rkey, int m, const uint8_t *key)
{
    api_rkey_header_t hdr;
    memcpy(&hdr, rkey->bytes, sizeof(hdr));
    uint32_t hash = api_rkey_name_hash(modules[m].attr.name);
    uint8_t inst = btl_ctx_module_instance(&ctx, m);
    size_t off = sizeof(hdr);
    for (unsigned i = 0; i < hdr.n_entries; i++) {
        api_rkey_entry_t e;
        if (off + sizeof(e) > FERRY_RKEY_SIZE)
            return 0;
        memcpy(&e, rkey->bytes + off, sizeof(e));
        if (e.key_len > FERRY_BTL_KEY_MAX || off + sizeof(e) + e.key_len > FERRY_RKEY_SIZE)
            return 0;
        if (e.name_hash == hash && e.instance == inst) {
            const uint8_t *k = rkey->bytes + off + sizeof(e);
            for (size_t j = 0; j < FERRY_BTL_KEY_MAX; j++)
                if (key[j] != (j < e.key_len ? k[j] : 0))
                    return 0;
            return 1;
        }
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
    if (rc == FERRY_OK) {
        CHECK_FUZZ(hdr.magic == API_RKEY_MAGIC && hdr.version == API_RKEY_VERSION);
        CHECK_FUZZ(hdr.owner == dst);
        CHECK_FUZZ((hdr.access & need) == need);
        /* [raddr, raddr + len) inside [base, base + len), in exact
         * arithmetic. */
        unsigned __int128 lo = raddr, hi = (unsigned __int128)raddr + len;
        CHECK_FUZZ(lo >= hdr.base);
        CHECK_FUZZ(hi <= (unsigned __int128)hdr.base + hdr.len);
        CHECK_FUZZ(entry_matches(rkey, m, key));
    } else {
        /* Nothing is handed out on a refusal. */
        for (size_t j = 0; j < sizeof(key); j++)
            CHECK_FUZZ(key[j] == 0xee);
    }
    free(rkey);
    return 0;
}
