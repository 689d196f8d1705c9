/*
 * Memory registration, remote keys and one-sided put/get at the application
 * API. A registration holds one transport registration per module that can
 * do RDMA; a remote key carries each of their keys (once for a run of one
 * transport's modules whose keys are the same bytes), found again on the
 * initiator by the transport's name and instance.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "api/api.h"
#include "api/rkey.h"
#include "bml/bml.h"

struct ferry_mem {
    util_list_item_t link; /* in the context's list of live registrations */
    bool listed;
    ferry_ctx_t *ctx;
    void *addr;
    size_t len;
    unsigned access;
    int n_modules;
    ferry_btl_reg_t **regs; /* per module; NULL where the module has no RDMA */
    /* ferry_mem_alloc: the module whose mem_alloc made it (-1: plain pages
     * from mmap), else not allocated. */
    bool allocated;
    int alloc_module;
};

static bool module_does_rdma(const ferry_btl_module_t *btl)
{
    return (btl->attr.flags & (FERRY_BTL_FLAG_PUT | FERRY_BTL_FLAG_GET)) != 0;
}

static int mem_release(ferry_ctx_t *ctx, ferry_mem_t *mem);

/* Registers mem's range with every RDMA module but skip (-1: none). */
/* Registers mem with every module that does RDMA but skip, or, when only
 * is not NULL, with those of only[0..n_only). */
static int mem_register_some(ferry_ctx_t *ctx, ferry_mem_t *mem, int skip, const int *only,
                             int n_only)
{
    for (int i = 0; i < (only != NULL ? n_only : ctx->n_modules); i++) {
        int m = only != NULL ? only[i] : i;
        ferry_btl_module_t *btl = ctx->modules[m];
        if (m == skip || !module_does_rdma(btl))
            continue;
        int rc = btl->ops->register_mem(btl, NULL, mem->addr, mem->len,
                                        mem->access | FERRY_ACCESS_LOCAL, &mem->regs[m]);
        if (rc != FERRY_OK) {
            rt_log(&ctx->log, RT_LOG_ERROR, "%s: registering %zu bytes failed: %s",
                   btl->attr.name, mem->len, ferry_strerror(rc));
            mem->regs[m] = NULL;
            return rc;
        }
    }
    return FERRY_OK;
}

static int mem_register_all(ferry_ctx_t *ctx, ferry_mem_t *mem, int skip)
{
    return mem_register_some(ctx, mem, skip, NULL, 0);
}

static ferry_mem_t *mem_new(ferry_ctx_t *ctx)
{
    ferry_mem_t *mem = calloc(1, sizeof(*mem));
    if (mem == NULL)
        return NULL;
    mem->regs = calloc((size_t)ctx->n_modules + 1, sizeof(*mem->regs));
    if (mem->regs == NULL) {
        free(mem);
        return NULL;
    }
    mem->ctx = ctx;
    mem->n_modules = ctx->n_modules;
    mem->alloc_module = -1;
    if (ctx->api != NULL) {
        util_list_append(&ctx->api->mems, &mem->link);
        mem->listed = true;
    }
    return mem;
}

/* Memory this host has (RAM and swap): more can never be backed, whatever
 * the kernel's overcommit policy lets mmap promise. 0 when unknown. */
static unsigned long long host_memory(void)
{
    struct sysinfo si;
    if (sysinfo(&si) != 0)
        return 0;
    unsigned long long unit = si.mem_unit != 0 ? si.mem_unit : 1;
    return ((unsigned long long)si.totalram + si.totalswap) * unit;
}

int ferry_mem_alloc(ferry_ctx_t *ctx, size_t len, unsigned access, void **addr_out,
                    ferry_mem_t **mem_out)
{
    const unsigned known = FERRY_ACCESS_LOCAL | FERRY_ACCESS_REMOTE_READ |
                           FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_ATOMIC;
    if (!api_ctx_live(ctx) || len == 0 || (access & ~known) != 0 || addr_out == NULL ||
        mem_out == NULL || len > SIZE_MAX / 2)
        return FERRY_ERR_INVALID;
    unsigned long long have = host_memory();
    if (have != 0 && len > have) {
        rt_log(&ctx->log, RT_LOG_ERROR,
               "ferry_mem_alloc: %zu bytes is more than this host's memory (%llu bytes of RAM "
               "and swap)",
               len, have);
        return FERRY_ERR_NO_MEMORY;
    }
    ferry_mem_t *mem = mem_new(ctx);
    if (mem == NULL)
        return FERRY_ERR_NO_MEMORY;
    mem->allocated = true;
    mem->access = access;
    /* The module with the fastest memory for its peers provides it. */
    for (int m = 0; m < ctx->n_modules; m++) {
        ferry_btl_module_t *btl = ctx->modules[m];
        if (!(btl->attr.flags & FERRY_BTL_FLAG_MEM_ALLOC))
            continue;
        if (btl->ops->mem_alloc(btl, len, access | FERRY_ACCESS_LOCAL, &mem->addr,
                                &mem->regs[m]) == FERRY_OK) {
            mem->alloc_module = m;
            mem->len = mem->regs[m]->len;
            break;
        }
        mem->regs[m] = NULL;
    }
    if (mem->alloc_module < 0) {
        size_t size = (len + 4095) & ~(size_t)4095;
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            if (mem->listed)
                util_list_remove(&ctx->api->mems, &mem->link);
            free(mem->regs);
            free(mem);
            rt_log(&ctx->log, RT_LOG_ERROR, "ferry_mem_alloc: mapping %zu bytes: %s", size,
                   strerror(err));
            return FERRY_ERR_NO_MEMORY;
        }
        mem->addr = p;
        mem->len = size;
    }
    int rc = mem_register_all(ctx, mem, mem->alloc_module);
    if (rc != FERRY_OK) {
        mem_release(ctx, mem);
        return rc;
    }
    *addr_out = mem->addr;
    *mem_out = mem;
    return FERRY_OK;
}

int ferry_mem_free(ferry_ctx_t *ctx, ferry_mem_t *mem)
{
    if (mem == NULL)
        return FERRY_OK;
    if (!api_ctx_live(ctx) || mem->ctx != ctx || !mem->allocated)
        return FERRY_ERR_INVALID;
    return mem_release(ctx, mem);
}

/* Is [addr, addr + len) all mapped in this process? msync answers ENOMEM
 * for a range that is not, in one system call however large the range, and
 * with MS_ASYNC writes nothing back. */
static bool range_mapped(const void *addr, size_t len)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)addr & ~(page - 1);
    uintptr_t end = (uintptr_t)addr + len;
    return msync((void *)start, end - start, MS_ASYNC) == 0;
}

static int mem_register(ferry_ctx_t *ctx, void *addr, size_t len, unsigned access,
                        const int *only, int n_only, ferry_mem_t **mem_out);

int ferry_mem_register(ferry_ctx_t *ctx, void *addr, size_t len, unsigned access,
                       ferry_mem_t **mem_out)
{
    return mem_register(ctx, addr, len, access, NULL, 0, mem_out);
}

int api_mem_register_for(ferry_ctx_t *ctx, void *addr, size_t len, unsigned access, int dst,
                         ferry_mem_t **mem_out)
{
    if (!api_ctx_live(ctx) || dst < 0 || dst >= ctx->size)
        return FERRY_ERR_INVALID;
    int rails[BML_MAX_PATHS];
    int n = bml_rails(ctx, dst, 0, rails, BML_MAX_PATHS);
    return mem_register(ctx, addr, len, access, n > 0 ? rails : NULL, n, mem_out);
}

int api_mem_register_on(ferry_ctx_t *ctx, void *addr, size_t len, unsigned access, int m,
                        ferry_mem_t **mem_out)
{
    if (!api_ctx_live(ctx) || m < 0 || m >= ctx->n_modules)
        return FERRY_ERR_INVALID;
    return mem_register(ctx, addr, len, access, &m, 1, mem_out);
}

/* ferry_mem_register; with only != NULL only with those n_only modules (a
 * rendezvous's rails: no other module's registration). */
static int mem_register(ferry_ctx_t *ctx, void *addr, size_t len, unsigned access,
                        const int *only, int n_only, ferry_mem_t **mem_out)
{
    const unsigned known = FERRY_ACCESS_LOCAL | FERRY_ACCESS_REMOTE_READ |
                           FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_ATOMIC;
    if (!api_ctx_live(ctx) || addr == NULL || len == 0 || (access & ~known) != 0 ||
        mem_out == NULL)
        return FERRY_ERR_INVALID;
    /* A range that wraps around the address space, or covers memory this
     * process does not have (ferry_mem_register(buf, SIZE_MAX / 2)), is no
     * registration any transport could honour. */
    if ((uintptr_t)addr > UINTPTR_MAX - len) {
        rt_log(&ctx->log, RT_LOG_ERROR,
               "ferry_mem_register: %p + %zu bytes wraps around the address space", addr, len);
        return FERRY_ERR_INVALID;
    }
    if (!range_mapped(addr, len)) {
        rt_log(&ctx->log, RT_LOG_ERROR,
               "ferry_mem_register: [%p, %p) (%zu bytes) is not all mapped memory of this "
               "process",
               addr, (void *)((uintptr_t)addr + len), len);
        return FERRY_ERR_INVALID;
    }
    ferry_mem_t *mem = mem_new(ctx);
    if (mem == NULL)
        return FERRY_ERR_NO_MEMORY;
    mem->addr = addr;
    mem->len = len;
    mem->access = access;
    int rc = mem_register_some(ctx, mem, -1, only, n_only);
    if (rc != FERRY_OK) {
        mem_release(ctx, mem);
        return rc;
    }
    *mem_out = mem;
    return FERRY_OK;
}

/* Deregisters from every module, frees allocated memory, frees mem. Returns
 * the first error. */
static int mem_release(ferry_ctx_t *ctx, ferry_mem_t *mem)
{
    int rc = FERRY_OK;
    for (int m = 0; m < mem->n_modules; m++) {
        if (mem->regs[m] == NULL || m == mem->alloc_module)
            continue;
        int mrc = ctx->modules[m]->ops->deregister_mem(ctx->modules[m], mem->regs[m]);
        if (mrc != FERRY_OK && rc == FERRY_OK)
            rc = mrc;
    }
    if (mem->allocated) {
        int mrc = FERRY_OK;
        if (mem->alloc_module >= 0) {
            ferry_btl_module_t *btl = ctx->modules[mem->alloc_module];
            mrc = btl->ops->mem_free(btl, mem->regs[mem->alloc_module]);
        } else if (mem->addr != NULL && munmap(mem->addr, mem->len) != 0) {
            mrc = rt_status_from_errno(errno);
        }
        if (mrc != FERRY_OK && rc == FERRY_OK)
            rc = mrc;
    }
    if (mem->listed)
        util_list_remove(&ctx->api->mems, &mem->link);
    free(mem->regs);
    free(mem);
    return rc;
}

int ferry_mem_deregister(ferry_ctx_t *ctx, ferry_mem_t *mem)
{
    if (mem == NULL)
        return FERRY_OK;
    if (!api_ctx_live(ctx) || mem->ctx != ctx || mem->allocated)
        return FERRY_ERR_INVALID;
    return mem_release(ctx, mem);
}

int ferry_mem_rkey(const ferry_mem_t *mem, ferry_rkey_t *rkey_out)
{
    return api_mem_rkey(mem, rkey_out, NULL);
}

int api_mem_rkey(const ferry_mem_t *mem, ferry_rkey_t *rkey_out, size_t *len_out)
{
    if (mem == NULL || rkey_out == NULL)
        return FERRY_ERR_INVALID;
    const ferry_ctx_t *ctx = mem->ctx;
    ferry_rkey_t rkey;
    memset(&rkey, 0, sizeof(rkey));
    api_rkey_header_t hdr = {
        .magic = API_RKEY_MAGIC,
        .version = API_RKEY_VERSION,
        .owner = ctx->rank,
        .access = mem->access,
        .base = (uint64_t)(uintptr_t)mem->addr,
        .len = mem->len,
    };
    size_t off = sizeof(hdr);
    size_t last = 0; /* where the last entry written is; 0: none yet */
    for (int m = 0; m < mem->n_modules; m++) {
        if (mem->regs[m] == NULL)
            continue;
        const ferry_btl_module_t *btl = ctx->modules[m];
        /* Zeroed whole, padding included: the bytes go to peers. */
        api_rkey_entry_t e;
        memset(&e, 0, sizeof(e));
        e.name_hash = api_rkey_name_hash(btl->attr.name);
        e.first = btl_ctx_module_instance(ctx, m);
        e.count = 1;
        e.key_len = (uint8_t)btl->attr.reg_handle_size;
        /* The next module of the transport with the same key bytes (tcp's
         * modules share their registrations) joins the last entry. A
         * transport's modules are next to each other in the context. */
        if (last > 0) {
            api_rkey_entry_t prev;
            memcpy(&prev, rkey.bytes + last, sizeof(prev));
            if (prev.name_hash == e.name_hash && prev.key_len == e.key_len &&
                (unsigned)prev.first + prev.count == e.first && prev.count < UINT8_MAX &&
                memcmp(rkey.bytes + last + sizeof(prev), mem->regs[m]->key, e.key_len) == 0) {
                prev.count++;
                memcpy(rkey.bytes + last, &prev, sizeof(prev));
                continue;
            }
        }
        if (off + sizeof(e) + e.key_len > sizeof(rkey.bytes))
            return FERRY_ERR_TRUNCATE;
        memcpy(rkey.bytes + off, &e, sizeof(e));
        memcpy(rkey.bytes + off + sizeof(e), mem->regs[m]->key, e.key_len);
        last = off;
        off += sizeof(e) + e.key_len;
        hdr.n_entries++;
    }
    memcpy(rkey.bytes, &hdr, sizeof(hdr));
    *rkey_out = rkey;
    if (len_out != NULL)
        *len_out = off;
    return FERRY_OK;
}

static int rkey_parse(const ferry_ctx_t *ctx, int m, int dst, const ferry_rkey_t *rkey,
                      api_rkey_header_t *hdr_out, uint8_t *key_out, size_t *used_out);

int api_rkey_resolve(const ferry_ctx_t *ctx, int m, int dst, const ferry_rkey_t *rkey,
                     uint64_t raddr, size_t len, uint32_t need, uint8_t *key_out)
{
    struct api_rkey_memo *mo = ctx->api != NULL ? &ctx->api->rkey_memo : NULL;
    const api_rkey_header_t *hdr;
    const uint8_t *key;
    api_rkey_header_t parsed;
    uint8_t parsed_key[FERRY_BTL_KEY_MAX];
    if (mo != NULL && mo->used > 0 && mo->m == m && mo->dst == dst &&
        memcmp(rkey->bytes, mo->bytes, mo->used) == 0) {
        hdr = &mo->hdr;
        key = mo->key;
    } else {
        size_t used;
        int rc = rkey_parse(ctx, m, dst, rkey, &parsed, parsed_key, &used);
        if (rc != FERRY_OK)
            return rc;
        if (mo != NULL) {
            mo->used = used;
            mo->m = m;
            mo->dst = dst;
            mo->hdr = parsed;
            memcpy(mo->key, parsed_key, sizeof(mo->key));
            memcpy(mo->bytes, rkey->bytes, used);
        }
        hdr = &parsed;
        key = parsed_key;
    }
    /* The target checks again; refusing here saves a round trip. */
    if ((hdr->access & need) != need || raddr < hdr->base || raddr - hdr->base > hdr->len ||
        len > hdr->len - (raddr - hdr->base))
        return FERRY_ERR_ACCESS;
    memcpy(key_out, key, FERRY_BTL_KEY_MAX);
    return FERRY_OK;
}

int api_rkey_parse(const ferry_ctx_t *ctx, int m, int dst, const ferry_rkey_t *rkey,
                   api_rkey_header_t *hdr_out, uint8_t *key_out)
{
    size_t used;
    return rkey_parse(ctx, m, dst, rkey, hdr_out, key_out, &used);
}

int api_rkey_peer_instance(const ferry_ctx_t *ctx, int m, int dst)
{
    const ferry_btl_module_t *btl = ctx->modules[m];
    if (btl->ops->peer_instance != NULL && ctx->peers != NULL && ctx->peers[dst].eps != NULL &&
        ctx->peers[dst].eps[m] != NULL) {
        int theirs = btl->ops->peer_instance(ctx->modules[m], ctx->peers[dst].eps[m]);
        if (theirs >= 0 && theirs <= UINT8_MAX)
            return theirs;
    }
    return ctx->api != NULL ? ctx->api->rkey_id[m].instance : btl_ctx_module_instance(ctx, m);
}

/* Whether the key's entries are all well formed (rkey.h): each inside the
 * key, with a short enough key, a run of 1 to 256 - first instances and a
 * zero pad, and no two of one transport claiming one instance. On success
 * *end_out is where the last entry ends; else *why_out says what is wrong. */
static bool rkey_entries_valid(const ferry_rkey_t *rkey, unsigned n_entries, size_t *end_out,
                               const char **why_out)
{
    api_rkey_entry_t seen[API_RKEY_MAX_ENTRIES];
    size_t off = sizeof(api_rkey_header_t);
    if (n_entries > API_RKEY_MAX_ENTRIES) {
        *why_out = "more entries than a key holds";
        return false;
    }
    for (unsigned i = 0; i < n_entries; i++) {
        api_rkey_entry_t e;
        if (off + sizeof(e) > sizeof(rkey->bytes)) {
            *why_out = "an entry past its end";
            return false;
        }
        memcpy(&e, rkey->bytes + off, sizeof(e));
        if (e.key_len > FERRY_BTL_KEY_MAX || off + sizeof(e) + e.key_len > sizeof(rkey->bytes)) {
            *why_out = "a key longer than a transport's or past its end";
            return false;
        }
        if (e.count == 0 || (unsigned)e.first + e.count > 256u) {
            *why_out = "an entry for no module, or past module 255";
            return false;
        }
        if (e.zero != 0) {
            *why_out = "an entry's pad byte is not zero";
            return false;
        }
        for (unsigned j = 0; j < i; j++)
            if (seen[j].name_hash == e.name_hash && e.first < seen[j].first + seen[j].count &&
                seen[j].first < e.first + e.count) {
                *why_out = "two keys for one module";
                return false;
            }
        seen[i] = e;
        off += sizeof(e) + e.key_len;
    }
    *end_out = off;
    return true;
}

/* api_rkey_parse, and how many of the key's bytes it read (the header and
 * every entry): the same bytes parse the same way. */
static int rkey_parse(const ferry_ctx_t *ctx, int m, int dst, const ferry_rkey_t *rkey,
                      api_rkey_header_t *hdr_out, uint8_t *key_out, size_t *used_out)
{
    api_rkey_header_t hdr;
    memcpy(&hdr, rkey->bytes, sizeof(hdr));
    if (hdr.magic != API_RKEY_MAGIC || hdr.version != API_RKEY_VERSION) {
        rt_log(&ctx->log, RT_LOG_ERROR, "remote key is not a ferry key (or of another version)");
        return FERRY_ERR_INVALID;
    }
    if (hdr.owner != dst) {
        rt_log(&ctx->log, RT_LOG_ERROR, "remote key of rank %d used for rank %d", hdr.owner, dst);
        return FERRY_ERR_INVALID;
    }
    size_t end = 0;
    const char *why = NULL;
    if (!rkey_entries_valid(rkey, hdr.n_entries, &end, &why)) {
        rt_log(&ctx->log, RT_LOG_ERROR, "remote key of rank %d is malformed: %s", dst, why);
        return FERRY_ERR_INVALID;
    }
    const ferry_btl_module_t *btl = ctx->modules[m];
    /* Worked out once per module, but for a bare context (no API state). */
    uint32_t want_hash = ctx->api != NULL ? ctx->api->rkey_id[m].name_hash
                                          : api_rkey_name_hash(btl->attr.name);
    int want_inst = api_rkey_peer_instance(ctx, m, dst);
    size_t off = sizeof(hdr);
    for (unsigned i = 0; i < hdr.n_entries; i++) {
        api_rkey_entry_t e;
        memcpy(&e, rkey->bytes + off, sizeof(e));
        /* At most one entry claims the instance (checked above). */
        if (e.name_hash == want_hash && want_inst >= e.first && want_inst - e.first < e.count) {
            if (key_out != NULL) {
                memset(key_out, 0, FERRY_BTL_KEY_MAX);
                memcpy(key_out, rkey->bytes + off + sizeof(e), e.key_len);
            }
            *hdr_out = hdr;
            *used_out = end;
            return FERRY_OK;
        }
        off += sizeof(e) + e.key_len;
    }
    rt_log(&ctx->log, RT_LOG_ERROR, "remote key of rank %d has no key for transport %s", dst,
           btl->attr.name);
    return FERRY_ERR_INVALID;
}

/* ---- operations ---- */

/* A put or get to a peer with several rails: its remote key as given, to
 * find each rail's key; its bytes per rail, to stripe by bandwidth; and
 * the ranges whose pieces ended with the loss of their rail, to issue
 * again on another. */
#define API_RANGES_MAX 32
#define API_RETRIES_MAX (4 * BML_MAX_PATHS)

typedef struct api_rdma_multi {
    ferry_rkey_t rkey;
    ferry_mem_t *local;
    uint32_t need; /* the remote right the operation needs */
    int n_keys;
    struct {
        int m;
        int status; /* FERRY_OK: key resolved; an error: refused for this operation */
        uint64_t sent;
        uint8_t key[FERRY_BTL_KEY_MAX];
    } keys[BML_MAX_PATHS];
    size_t n_redo;
    struct {
        size_t off, len;
    } redo[API_RANGES_MAX];
    unsigned retries;
} api_rdma_multi_t;

static void op_finish(ferry_ctx_t *ctx, api_rdma_op_t *op)
{
    util_list_append(&ctx->api->done, &op->link);
}

/* Once nothing of op is in flight and op_issue is not at work on it: done,
 * or back to the queue when ranges wait to go again. */
static void op_settle(ferry_ctx_t *ctx, api_rdma_op_t *op)
{
    if (op->outstanding > 0 || op->issuing || op->link.next != NULL)
        return;
    if (op->status == FERRY_OK && op->mp != NULL && op->mp->n_redo > 0)
        util_list_append(&ctx->api->issue_queue, &op->link);
    else if (op->issued == op->len || op->status != FERRY_OK)
        op_finish(ctx, op);
}

/* A piece of a multi-rail operation ended with its rail lost: its range is
 * kept to go again on another rail. false when it cannot (no rail left,
 * no room, too many tries): the operation fails. */
static bool piece_retry(ferry_ctx_t *ctx, api_rdma_op_t *op, ferry_btl_module_t *btl,
                        ferry_btl_desc_t *des)
{
    api_rdma_multi_t *mp = op->mp;
    const ferry_btl_segment_t *remote = op->is_put ? des->dst : des->src;
    if (ctx->peers[op->peer].failed || mp->retries >= API_RETRIES_MAX ||
        mp->n_redo == API_RANGES_MAX || remote == NULL || remote->addr < op->raddr ||
        remote->addr - op->raddr > op->len || remote->len > op->len - (remote->addr - op->raddr))
        return false;
    int m = btl_ctx_module_index(ctx, btl);
    if (m < 0 || !bml_path_lost(ctx, op->peer, m, FERRY_ERR_UNREACH,
                                op->is_put ? "a put on it failed" : "a get on it failed"))
        return false;
    mp->retries++;
    ctx->bml->reissued += remote->len;
    mp->redo[mp->n_redo].off = (size_t)(remote->addr - op->raddr);
    mp->redo[mp->n_redo].len = remote->len;
    mp->n_redo++;
    return true;
}

static void piece_done(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                       int status)
{
    api_rdma_op_t *op = des->cbdata;
    ferry_ctx_t *ctx = btl->ctx;
    (void)ep;
    if (status == FERRY_ERR_UNREACH && op->mp != NULL && op->status == FERRY_OK &&
        piece_retry(ctx, op, btl, des))
        status = FERRY_OK;
    if (status != FERRY_OK && op->status == FERRY_OK)
        op->status = status;
    op->outstanding--;
    op_settle(ctx, op);
}

/* The largest piece module btl takes in one put or get. */
static size_t piece_max_of(const ferry_btl_module_t *btl)
{
    size_t piece_max = btl->attr.max_rdma_size;
    if (btl->attr.rdma_pipeline_frag_size > 0 && btl->attr.rdma_pipeline_frag_size < piece_max)
        piece_max = btl->attr.rdma_pipeline_frag_size;
    return piece_max;
}

/* Hands [op->buf + off, + size) to module btl's endpoint ep with key.
 * *size_out: what the transport took. */
static int piece_start(ferry_ctx_t *ctx, api_rdma_op_t *op, ferry_btl_module_t *btl,
                       ferry_btl_endpoint_t *ep, ferry_btl_reg_t *lreg, const uint8_t *key,
                       size_t off, size_t *size_io)
{
    (void)ctx;
    size_t size = *size_io;
    ferry_convertor_t conv;
    ferry_convertor_init_contig(&conv, op->buf + off, size);
    ferry_btl_desc_t *des;
    int rc = op->is_put ? btl->ops->prepare_src(btl, ep, lreg, &conv, 0, &size,
                                                FERRY_BTL_PREP_RDMA, &des)
                        : btl->ops->prepare_dst(btl, ep, lreg, &conv, 0, &size,
                                                FERRY_BTL_PREP_RDMA, &des);
    if (rc != FERRY_OK)
        return rc;
    ferry_btl_segment_t *remote = op->is_put ? des->dst : des->src;
    remote->addr = op->raddr + off;
    remote->len = size;
    memcpy(remote->key, key, sizeof(remote->key));
    if (op->is_put)
        des->dst_cnt = 1;
    else
        des->src_cnt = 1;
    des->flags |= FERRY_BTL_DES_OWNERSHIP;
    des->cbfunc = piece_done;
    des->cbdata = op;
    op->outstanding++;
    rc = op->is_put ? btl->ops->put(btl, ep, des) : btl->ops->get(btl, ep, des);
    if (rc != FERRY_OK) {
        op->outstanding--;
        btl->ops->free(btl, des);
        return rc;
    }
    *size_io = size;
    return FERRY_OK;
}

/* The key slot of module m in mp, resolved on first use. */
static int multi_key(ferry_ctx_t *ctx, api_rdma_op_t *op, int m)
{
    api_rdma_multi_t *mp = op->mp;
    for (int i = 0; i < mp->n_keys; i++)
        if (mp->keys[i].m == m)
            return i;
    if (mp->n_keys == BML_MAX_PATHS)
        return -1;
    int i = mp->n_keys++;
    mp->keys[i].m = m;
    mp->keys[i].sent = 0;
    mp->keys[i].status = api_rkey_resolve(ctx, m, op->peer, &mp->rkey, op->raddr, op->len,
                                          mp->need, mp->keys[i].key);
    return i;
}

/* Chooses the rail for the next piece among ms[0..n): the first (the
 * primary) unless striping, else the one that has carried the fewest bytes
 * for its bandwidth. Rails whose key this operation cannot use are passed
 * over; -1 when none is left (*refused_out: why). */
static int multi_pick(ferry_ctx_t *ctx, api_rdma_op_t *op, const int *ms, int n, bool stripe,
                      int *refused_out)
{
    int best = -1;
    double best_load = 0;
    for (int i = 0; i < n; i++) {
        int k = multi_key(ctx, op, ms[i]);
        if (k < 0)
            continue;
        if (op->mp->keys[k].status != FERRY_OK) {
            *refused_out = op->mp->keys[k].status;
            continue;
        }
        if (!stripe)
            return k;
        uint32_t bw = ctx->modules[ms[i]]->attr.bandwidth;
        double load = (double)op->mp->keys[k].sent / (double)(bw > 0 ? bw : 1);
        if (best < 0 || load < best_load) {
            best = k;
            best_load = load;
        }
    }
    return best;
}

/* op_issue for an operation with op->mp: ranges to go again first, then
 * the rest, each piece on a live rail. */
static int op_issue_multi(ferry_ctx_t *ctx, api_rdma_op_t *op)
{
    api_rdma_multi_t *mp = op->mp;
    btl_peer_t *peer = &ctx->peers[op->peer];
    uint32_t flag = op->is_put ? FERRY_BTL_FLAG_PUT : FERRY_BTL_FLAG_GET;
    for (;;) {
        if (peer->failed)
            return FERRY_ERR_UNREACH;
        size_t off, avail;
        bool redo = mp->n_redo > 0;
        if (redo) {
            off = mp->redo[mp->n_redo - 1].off;
            avail = mp->redo[mp->n_redo - 1].len;
        } else if (op->issued < op->len) {
            off = op->issued;
            avail = op->len - op->issued;
        } else {
            return FERRY_OK;
        }
        int ms[BML_MAX_PATHS];
        int n = bml_rails(ctx, op->peer, flag, ms, BML_MAX_PATHS);
        bool stripe = n > 1 && op->len >= ctx->bml->stripe_min;
        int refused = FERRY_ERR_UNREACH;
        int k = multi_pick(ctx, op, ms, n, stripe, &refused);
        if (k < 0)
            return refused;
        int m = mp->keys[k].m;
        ferry_btl_module_t *btl = ctx->modules[m];
        size_t size = avail;
        size_t max = piece_max_of(btl);
        if (stripe && ctx->bml->stripe_frag < max)
            max = ctx->bml->stripe_frag;
        if (size > max)
            size = max;
        int rc = piece_start(ctx, op, btl, peer->eps[m], api_mem_reg(mp->local, m),
                             mp->keys[k].key, off, &size);
        if (rc == FERRY_ERR_UNREACH && mp->retries < API_RETRIES_MAX &&
            bml_path_lost(ctx, op->peer, m, rc, "it refused a put or get")) {
            mp->retries++;
            continue;
        }
        if (rc != FERRY_OK)
            return rc;
        mp->keys[k].sent += size;
        ctx->bml->rail_bytes[m] += size;
        if (redo) {
            mp->redo[mp->n_redo - 1].off += size;
            mp->redo[mp->n_redo - 1].len -= size;
            if (mp->redo[mp->n_redo - 1].len == 0)
                mp->n_redo--;
        } else {
            op->issued += size;
        }
    }
}

/* Starts as many pieces of op as the transport takes. Returns FERRY_OK when
 * every piece is started, FERRY_ERR_NO_RESOURCE when some must wait, or the
 * error that ended the operation. */
static int op_issue(ferry_ctx_t *ctx, api_rdma_op_t *op)
{
    btl_peer_t *peer = &ctx->peers[op->peer];
    int rc = FERRY_OK;
    op->issuing = true;
    if (op->mp != NULL) {
        rc = op_issue_multi(ctx, op);
        op->issuing = false;
        return rc;
    }
    ferry_btl_module_t *btl = ctx->modules[op->m];
    ferry_btl_endpoint_t *ep = peer->eps[op->m];
    size_t piece_max = piece_max_of(btl);
    while (op->issued < op->len) {
        if (peer->failed || ep == NULL) {
            rc = FERRY_ERR_UNREACH;
            break;
        }
        size_t size = op->len - op->issued;
        if (size > piece_max)
            size = piece_max;
        rc = piece_start(ctx, op, btl, ep, op->lreg, op->rkey, op->issued, &size);
        if (rc != FERRY_OK)
            break;
        op->issued += size;
    }
    op->issuing = false;
    return rc;
}

bool api_mem_covers(const ferry_ctx_t *ctx, const ferry_mem_t *local, const void *buf,
                    size_t len)
{
    const char *b = buf, *base = local->addr;
    return local->ctx == ctx && b >= base && (size_t)(b - base) <= local->len &&
           len <= local->len - (size_t)(b - base);
}

ferry_btl_reg_t *api_mem_reg(const ferry_mem_t *local, int m)
{
    return local != NULL && m < local->n_modules ? local->regs[m] : NULL;
}

/* The record of an operation done without a descriptor, kept only when a
 * callback or request names it: what its completion needs. */
static void light_op_init(api_rdma_op_t *op, int dst, ferry_comp_cb_t cb, void *arg,
                          struct ferry_req *req)
{
    op->link.next = op->link.prev = NULL;
    op->mp = NULL;
    op->peer = dst;
    op->status = FERRY_OK;
    op->cb = cb;
    op->arg = arg;
    op->req = req;
}

/* The transport's completion of a put or get without a descriptor: cbctx
 * is the peer's slot, cbdata the operation's record or NULL (no callback,
 * no request: only the count a flush waits for). */
static void inline_done(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                        ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status)
{
    (void)btl;
    (void)ep;
    (void)local;
    (void)lreg;
    api_peer_slot_t *slot = cbctx;
    if (cbdata != NULL) {
        api_rdma_op_t *op = cbdata;
        op->status = status;
        op_finish(slot->ctx, op);
        return;
    }
    api_peer_done(slot, status);
}

void api_putn_refused(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                      ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status)
{
    (void)btl;
    (void)ep;
    (void)local;
    (void)lreg;
    (void)cbdata;
    api_peer_slot_t *slot = cbctx;
    struct api_state *api = slot->ctx->api;
    rt_log_limited(&slot->ctx->log, &slot->ctx->ctrl_bad, RT_LOG_WARN,
                   "rank %d refused a put with notification: its registration does not cover "
                   "it (any more)",
                   slot->rank);
    if (api->first_error[slot->rank] == FERRY_OK)
        api->first_error[slot->rank] = status;
}

int api_putn_tracked_start(ferry_ctx_t *ctx, int dst, int m, const uint8_t *key, const void *buf,
                           size_t len, uint64_t raddr, uint8_t tag, const void *payload,
                           size_t plen, struct ferry_req *req)
{
    ferry_btl_module_t *btl = ctx->modules[m];
    api_rdma_op_t *op = util_pool_get(&ctx->api->ops);
    if (op == NULL)
        return FERRY_ERR_NOT_SUPPORTED;
    light_op_init(op, dst, NULL, NULL, req);
    int rc = btl->ops->put_notify_inline(btl, ctx->peers[dst].ep, buf, len, raddr, key, tag,
                                         payload, plen, 0, inline_done, &ctx->api->slots[dst],
                                         op);
    if (rc == FERRY_OK) {
        ctx->api->outstanding[dst]++;
        return FERRY_OK;
    }
    util_pool_put(&ctx->api->ops, op);
    return rc;
}

int api_rdma_start_key(ferry_ctx_t *ctx, bool is_put, int dst, int m, const uint8_t *key,
                       const ferry_rkey_t *raw, void *buf, size_t len, ferry_mem_t *local,
                       uint64_t raddr,
                       ferry_comp_cb_t cb, void *arg, struct ferry_req *req,
                       bool *accepted_out, bool *direct_no)
{
    ferry_btl_module_t *btl = ctx->modules[m];
    if (api_direct_may(btl, len, direct_no)) {
        /* Done inside the call where the transport can (a peer's heap on
         * sm): no descriptor, nothing queued, nothing left for flush. A
         * callback's record is taken first: once done, the operation must
         * not fail for want of it. */
        api_rdma_op_t *op = NULL;
        if (cb != NULL && (op = util_pool_get(&ctx->api->ops)) == NULL)
            return FERRY_ERR_NO_RESOURCE;
        int rc = btl->ops->rdma_direct(btl, ctx->peers[dst].ep, is_put, buf, raddr, key, len);
        if (rc == FERRY_BTL_DONE) {
            if (accepted_out != NULL)
                *accepted_out = true;
            if (op == NULL)
                return FERRY_BTL_DONE;
            /* The callback runs from progress, as always. */
            light_op_init(op, dst, cb, arg, req);
            ctx->api->outstanding[dst]++;
            op_finish(ctx, op);
            return FERRY_OK;
        }
        if (op != NULL)
            util_pool_put(&ctx->api->ops, op);
        if (rc != FERRY_ERR_NOT_SUPPORTED)
            return rc;
        if (direct_no != NULL)
            *direct_no = true;
    }
    if ((is_put ? btl->ops->put_inline != NULL && len <= btl->attr.max_send_size
                : btl->ops->get_inline != NULL) &&
        len > 0 && util_list_empty(&ctx->api->issue_queue) && !bml_multi(ctx, dst)) {
        /* Without a descriptor where the transport can (sm: one ring
         * message for a put, a request for a get): no record at all
         * unless a callback or request names the operation. Behind
         * operations waiting to be issued it waits too. */
        api_rdma_op_t *op = NULL;
        if ((cb != NULL || req != NULL) && (op = util_pool_get(&ctx->api->ops)) == NULL)
            return FERRY_ERR_NO_RESOURCE;
        if (op != NULL)
            light_op_init(op, dst, cb, arg, req);
        int rc = is_put ? btl->ops->put_inline(btl, ctx->peers[dst].ep, buf, len, raddr, key,
                                               inline_done, &ctx->api->slots[dst], op)
                        : btl->ops->get_inline(btl, ctx->peers[dst].ep, buf, len, raddr, key,
                                               inline_done, &ctx->api->slots[dst], op);
        if (rc == FERRY_OK) {
            ctx->api->outstanding[dst]++;
            if (accepted_out != NULL)
                *accepted_out = true;
            return FERRY_OK;
        }
        if (op != NULL)
            util_pool_put(&ctx->api->ops, op);
        if (rc != FERRY_ERR_NOT_SUPPORTED)
            return rc;
    }
    api_rdma_op_t *op = util_pool_get(&ctx->api->ops);
    if (op == NULL)
        return FERRY_ERR_NO_RESOURCE;
    memset(op, 0, sizeof(*op));
    memcpy(op->rkey, key, sizeof(op->rkey));
    op->is_put = is_put;
    op->peer = dst;
    op->m = m;
    op->buf = buf;
    op->len = len;
    op->raddr = raddr;
    op->lreg = api_mem_reg(local, m);
    op->cb = cb;
    op->arg = arg;
    op->req = req;
    if (raw != NULL && len > 0 && bml_multi(ctx, dst)) {
        /* Several rails: what moving over or striping needs. */
        api_rdma_multi_t *mp = malloc(sizeof(*mp));
        if (mp == NULL) {
            util_pool_put(&ctx->api->ops, op);
            return FERRY_ERR_NO_MEMORY;
        }
        mp->rkey = *raw;
        mp->local = local;
        mp->need = is_put ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ;
        mp->n_keys = 1;
        mp->keys[0].m = m;
        mp->keys[0].status = FERRY_OK;
        mp->keys[0].sent = 0;
        memcpy(mp->keys[0].key, key, sizeof(mp->keys[0].key));
        mp->n_redo = 0;
        mp->retries = 0;
        op->mp = mp;
    }
    ctx->api->outstanding[dst]++;

    int rc = op_issue(ctx, op);
    if (rc != FERRY_OK && rc != FERRY_ERR_NO_RESOURCE && op->issued == 0 &&
        op->outstanding == 0) {
        /* Nothing started: the caller hears of it now, not from a callback. */
        ctx->api->outstanding[dst]--;
        free(op->mp);
        util_pool_put(&ctx->api->ops, op);
        return rc;
    }
    if (accepted_out != NULL)
        *accepted_out = rc == FERRY_OK;
    if (rc == FERRY_ERR_NO_RESOURCE) {
        util_list_append(&ctx->api->issue_queue, &op->link);
    } else {
        if (rc != FERRY_OK)
            op->status = rc;
        op_settle(ctx, op);
    }
    return FERRY_OK;
}

static int rdma_start(ferry_ctx_t *ctx, bool is_put, int dst, void *buf, size_t len,
                      ferry_mem_t *local, uint64_t raddr, const ferry_rkey_t *rkey,
                      ferry_comp_cb_t cb, void *arg)
{
    int rc;
    if ((buf == NULL && len > 0) || rkey == NULL)
        return FERRY_ERR_INVALID;
    btl_peer_t *peer = api_peer(ctx, dst, &rc);
    if (peer == NULL)
        return rc;
    int m = peer->module_idx;
    ferry_btl_module_t *btl = ctx->modules[m];
    if (!(btl->attr.flags & (is_put ? FERRY_BTL_FLAG_PUT : FERRY_BTL_FLAG_GET)))
        return FERRY_ERR_NOT_SUPPORTED;
    if (local != NULL && !api_mem_covers(ctx, local, buf, len))
        return FERRY_ERR_INVALID;
    uint8_t key[FERRY_BTL_KEY_MAX];
    rc = api_rkey_resolve(ctx, m, dst, rkey, raddr, len,
                          is_put ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ, key);
    if (rc != FERRY_OK)
        return rc;
    rc = api_rdma_start_key(ctx, is_put, dst, m, key, rkey, buf, len, local, raddr, cb, arg,
                            NULL, NULL, NULL);
    return rc == FERRY_BTL_DONE ? FERRY_OK : rc;
}

int ferry_put(ferry_ctx_t *ctx, int dst, const void *buf, size_t len, ferry_mem_t *local,
              uint64_t raddr, const ferry_rkey_t *rkey, ferry_comp_cb_t cb, void *arg)
{
    return rdma_start(ctx, true, dst, (void *)buf, len, local, raddr, rkey, cb, arg);
}

int ferry_get(ferry_ctx_t *ctx, int dst, void *buf, size_t len, ferry_mem_t *local,
              uint64_t raddr, const ferry_rkey_t *rkey, ferry_comp_cb_t cb, void *arg)
{
    return rdma_start(ctx, false, dst, buf, len, local, raddr, rkey, cb, arg);
}

int api_rdma_progress(ferry_ctx_t *ctx)
{
    struct api_state *api = ctx->api;
    int events = 0;

    /* Operations waiting for resources go on in order. */
    util_list_item_t *it;
    while ((it = util_list_first(&api->issue_queue)) != NULL) {
        api_rdma_op_t *op = UTIL_CONTAINER_OF(it, api_rdma_op_t, link);
        int rc = op_issue(ctx, op);
        if (rc == FERRY_ERR_NO_RESOURCE)
            break;
        util_list_remove(&api->issue_queue, it);
        if (rc != FERRY_OK && op->status == FERRY_OK)
            op->status = rc;
        op_settle(ctx, op);
        events++;
    }

    while ((it = util_list_pop_front(&api->done)) != NULL) {
        api_rdma_op_t *op = UTIL_CONTAINER_OF(it, api_rdma_op_t, link);
        api->outstanding[op->peer]--;
        if (op->status != FERRY_OK && api->first_error[op->peer] == FERRY_OK)
            api->first_error[op->peer] = op->status;
        ferry_comp_cb_t cb = op->cb;
        void *arg = op->arg;
        int status = op->status;
        struct ferry_req *req = op->req;
        free(op->mp);
        util_pool_put(&api->ops, op);
        if (req != NULL)
            api_req_complete(ctx, req, status);
        else if (cb != NULL) {
            ctx->in_callback++;
            cb(arg, status);
            ctx->in_callback--;
        }
        events++;
    }
    return events;
}

/* ferry_flush's wait, out of line: the call that finds nothing to wait
 * for saves no registers for it. */
static int __attribute__((noinline)) flush_wait(ferry_ctx_t *ctx, int dst)
{
    struct api_state *api = ctx->api;
    int lo = dst < 0 ? 0 : dst, hi = dst < 0 ? ctx->size : dst + 1;
    int rc = api_flush_wait(ctx, lo, hi, true);
    int first = FERRY_OK;
    for (int r = lo; r < hi; r++) {
        if (api->first_error[r] != FERRY_OK && first == FERRY_OK)
            first = api->first_error[r];
        api->first_error[r] = FERRY_OK;
    }
    return first != FERRY_OK ? first : rc;
}

int ferry_flush(ferry_ctx_t *ctx, int dst)
{
    if (!api_ctx_live(ctx) || ctx->api == NULL || dst < -1 || dst >= ctx->size)
        return FERRY_ERR_INVALID;
    if (ctx->in_callback > 0)
        return FERRY_ERR_BUSY;
    const struct api_state *api = ctx->api;
    /* Nothing in flight to dst and nothing sent since its last flush (what
     * an operation done inside its call leaves): done, as the wait would
     * find at once. */
    if (dst >= 0 && api->outstanding[dst] == 0 && !api->am_dirty[dst] &&
        api->first_error[dst] == FERRY_OK)
        return FERRY_OK;
    return flush_wait(ctx, dst);
}

int api_state_init(ferry_ctx_t *ctx)
{
    struct api_state *api = calloc(1, sizeof(*api));
    if (api == NULL)
        return FERRY_ERR_NO_MEMORY;
    ctx->api = api;
    util_list_init(&api->issue_queue);
    util_list_init(&api->done);
    util_list_init(&api->mems);
    api->outstanding = calloc((size_t)ctx->size, sizeof(*api->outstanding));
    api->first_error = calloc((size_t)ctx->size, sizeof(*api->first_error));
    api->rkey_id = calloc(ctx->n_modules > 0 ? (size_t)ctx->n_modules : 1, sizeof(*api->rkey_id));
    if (api->outstanding == NULL || api->first_error == NULL || api->rkey_id == NULL)
        return FERRY_ERR_NO_MEMORY;
    for (int m = 0; m < ctx->n_modules; m++) {
        api->rkey_id[m].name_hash = api_rkey_name_hash(ctx->modules[m]->attr.name);
        api->rkey_id[m].instance = btl_ctx_module_instance(ctx, m);
    }
    util_pool_params_t pp = {
        .name = "ferry rdma operations",
        .elem_size = sizeof(api_rdma_op_t),
        .initial = 64,
        .max = 0,
        .increment = 64,
    };
    int rc = util_pool_init(&api->ops, &pp);
    if (rc != FERRY_OK)
        return rc;
    api->ops_ready = true;
    return api_onesided_init(ctx);
}

void api_state_fini(ferry_ctx_t *ctx)
{
    struct api_state *api = ctx->api;
    if (api == NULL)
        return;
    util_list_item_t *it;
    /* Operations never started are canceled; their callbacks still run. */
    while ((it = util_list_pop_front(&api->issue_queue)) != NULL) {
        api_rdma_op_t *op = UTIL_CONTAINER_OF(it, api_rdma_op_t, link);
        if (op->status == FERRY_OK)
            op->status = FERRY_ERR_CANCELED;
        if (op->outstanding == 0)
            op_finish(ctx, op);
    }
    if (api->outstanding != NULL && api->first_error != NULL) {
        api_rdma_progress(ctx);
        if (api->slots != NULL)
            api_onesided_progress(ctx);
    }
    /* Registrations the application did not release: released now, while
     * the transports that hold them are still open. */
    size_t live = util_list_len(&api->mems);
    if (live > 0)
        rt_log(&ctx->log, RT_LOG_WARN,
               "ferry_finalize: %zu memory registration(s) (ferry_mem_register or "
               "ferry_mem_alloc) still live; released, their handles are invalid now",
               live);
    while ((it = util_list_first(&api->mems)) != NULL)
        mem_release(ctx, UTIL_CONTAINER_OF(it, ferry_mem_t, link));
    api_onesided_fini(ctx);
    if (api->ops_ready)
        util_pool_fini(&api->ops);
    free(api->outstanding);
    free(api->first_error);
    free(api->rkey_id);
    free(api);
    ctx->api = NULL;
}
