/*
 * Fragments and their pools, shared by the transports.
 */
#include "btl/frag.h"

#include <stdio.h>
#include <string.h>

#include "btl/base.h"
#include "mem/rcache.h"

#define FRAG_MAGIC 0x46524147u /* "FRAG" */

static void frag_elem_init(void *elem, void *arg)
{
    btl_frag_t *frag = elem;
    memset(frag, 0, sizeof(*frag));
    frag->magic = FRAG_MAGIC;
    frag->kind = (btl_frag_kind_t)(uintptr_t)arg;
    frag->payload = frag->kind == BTL_FRAG_USER ? NULL : (char *)(frag + 1);
}

/* The registration cache's view of the module. */
static int cache_register(void *arg, void *base, size_t len, uint32_t access, void **handle_out)
{
    ferry_btl_module_t *btl = arg;
    ferry_btl_reg_t *reg;
    int rc = btl->ops->register_mem(btl, NULL, base, len, access, &reg);
    if (rc == FERRY_OK)
        *handle_out = reg;
    return rc;
}

static int cache_deregister(void *arg, void *handle)
{
    ferry_btl_module_t *btl = arg;
    return btl->ops->deregister_mem(btl, handle);
}

static int frags_cache_create(btl_frags_t *frags, ferry_btl_module_t *btl,
                              const btl_frag_params_t *params)
{
    mem_rcache_params_t rp = {
        .name = btl->attr.name,
        .limit_hint = params->reg_limit_hint,
        .reg = cache_register,
        .dereg = cache_deregister,
        .arg = btl,
        .log = &btl->ctx->log,
    };
    if (btl->ops->register_mem == btl_base_unsupported_register_mem)
        return FERRY_OK;
    int rc = mem_params_register(&btl->ctx->params, &rp.mem);
    if (rc != FERRY_OK)
        return rc;
    return mem_rcache_create(&rp, &frags->rcache);
}

int btl_frags_init(btl_frags_t *frags, ferry_btl_module_t *btl, const btl_frag_params_t *params)
{
    static const char *const kinds[] = {"eager", "max", "user"};
    const size_t payload[] = {params->eager_size, params->max_size, 0};
    memset(frags, 0, sizeof(*frags));
    frags->btl = btl;
    frags->no_local_reg = params->no_local_reg;
    for (int k = 0; k < BTL_FRAG_KINDS; k++) {
        snprintf(frags->names[k], sizeof(frags->names[k]), "%s %s fragments", btl->attr.name,
                 kinds[k]);
        size_t max = k == BTL_FRAG_MAX ? params->max_frags : params->max;
        util_pool_params_t pp = {
            .name = frags->names[k],
            .elem_size = sizeof(btl_frag_t) + payload[k],
            .align = 64,
            .initial = params->num < max ? params->num : max,
            .max = max,
            .increment = params->inc,
            .elem_init = frag_elem_init,
            .elem_init_arg = (void *)(uintptr_t)k,
        };
        int rc = util_pool_init(&frags->pools[k], &pp);
        if (rc != FERRY_OK) {
            btl_frags_fini(frags);
            return rc;
        }
        frags->ready[k] = true;
    }
    int rc = frags_cache_create(frags, btl, params);
    if (rc != FERRY_OK) {
        btl_frags_fini(frags);
        return rc;
    }
    btl->frags = frags;
    return FERRY_OK;
}

int btl_frags_fini(btl_frags_t *frags)
{
    int rc = FERRY_OK;
    if (frags->btl != NULL && frags->btl->frags == frags)
        frags->btl->frags = NULL;
    for (int k = 0; k < BTL_FRAG_KINDS; k++) {
        if (!frags->ready[k])
            continue;
        size_t leaked = util_pool_fini(&frags->pools[k]);
        frags->ready[k] = false;
        if (leaked > 0) {
            rt_log(&frags->btl->ctx->log, RT_LOG_ERROR,
                   "%s: %zu descriptors not returned at finalize", frags->names[k], leaked);
            rc = FERRY_ERR_BUSY;
        }
    }
    /* After the pools: every returned fragment has dropped its reference. */
    int crc = mem_rcache_destroy(frags->rcache);
    frags->rcache = NULL;
    if (crc != FERRY_OK && rc == FERRY_OK)
        rc = crc;
    return rc;
}

btl_frag_t *btl_frag_get(btl_frags_t *frags, btl_frag_kind_t kind)
{
    btl_frag_t *frag = util_pool_get(&frags->pools[kind]);
    if (frag == NULL)
        return NULL;
    frag->base = (ferry_btl_desc_t){0};
    memset(frag->segs, 0, sizeof(frag->segs));
    frag->allocated = true;
    frag->own_reg = NULL;
    frag->cache_reg = NULL;
    frag->ep = NULL;
    frag->done = 0;
    frag->end_pos = 0;
    frag->cookie = 0;
    frag->status = FERRY_OK;
    frag->link.next = frag->link.prev = NULL;
    return frag;
}

void btl_frag_put(btl_frags_t *frags, btl_frag_t *frag)
{
    if (frag->cache_reg != NULL)
        mem_rcache_put(frags->rcache, frag->cache_reg);
    else if (frag->own_reg != NULL)
        frags->btl->ops->deregister_mem(frags->btl, frag->own_reg);
    frag->own_reg = NULL;
    frag->cache_reg = NULL;
    frag->allocated = false;
    util_pool_put(&frags->pools[frag->kind], frag);
}

bool btl_frag_valid(const ferry_btl_desc_t *des)
{
    const btl_frag_t *frag = (const btl_frag_t *)des;
    return frag != NULL && frag->magic == FRAG_MAGIC && frag->allocated;
}

size_t btl_frags_in_use(const btl_frags_t *frags, btl_frag_kind_t kind)
{
    return frags->ready[kind] ? util_pool_in_use(&frags->pools[kind]) : 0;
}

int btl_frags_alloc(btl_frags_t *frags, size_t size, uint32_t flags,
                    ferry_btl_desc_t **des_out)
{
    const ferry_btl_attr_t *attr = &frags->btl->attr;
    if (des_out == NULL || size > attr->max_send_size)
        return FERRY_ERR_INVALID;
    btl_frag_t *frag = btl_frag_get(frags, size <= attr->eager_limit ? BTL_FRAG_EAGER
                                                                      : BTL_FRAG_MAX);
    if (frag == NULL)
        return FERRY_ERR_NO_RESOURCE;
    frag->segs[0].addr = (uint64_t)(uintptr_t)frag->payload;
    frag->segs[0].len = size;
    frag->base.src = &frag->segs[0];
    frag->base.src_cnt = 1;
    frag->base.dst = &frag->segs[1];
    frag->base.flags = flags & FERRY_BTL_DES_OWNERSHIP;
    *des_out = &frag->base;
    return FERRY_OK;
}

int btl_frags_free(btl_frags_t *frags, ferry_btl_desc_t *des)
{
    if (!btl_frag_valid(des) || (des->flags & FERRY_BTL_DES_INFLIGHT))
        return FERRY_ERR_INVALID;
    btl_frag_put(frags, btl_frag_of(des));
    return FERRY_OK;
}

/* Describes up to *size bytes of user memory at the convertor's cursor in
 * seg, as far as it is contiguous, registering it through the cache when
 * the caller gave no registration.
 *
 * Such a registration serves this process's side of a send, put or get, so
 * it gets local rights only: the cache keeps it after the operation
 * (leave pinned), and with remote rights a job peer holding its key could
 * read or write the buffer long after the operation that needed it. With
 * FERRY_ACCESS_LOCAL alone every transport's target-side check refuses a
 * key of it (btl_base_check_access wants the remote right). */
static int frag_in_place(btl_frags_t *frags, btl_frag_t *frag, ferry_btl_reg_t *reg,
                         ferry_convertor_t *conv, size_t *size, ferry_btl_segment_t *seg)
{
    size_t left = ferry_convertor_contig_len(conv);
    size_t len = *size < left ? *size : left;
    void *ptr = ferry_convertor_contig_ptr(conv);
    seg->addr = (uint64_t)(uintptr_t)ptr;
    seg->len = len;
    if (reg == NULL && len > 0 && frags->rcache != NULL && !frags->no_local_reg) {
        mem_reg_t *creg;
        int rc = mem_rcache_get(frags->rcache, ptr, len, FERRY_ACCESS_LOCAL, &creg);
        if (rc != FERRY_OK && rc != FERRY_ERR_NOT_SUPPORTED)
            return rc;
        if (rc == FERRY_OK) {
            frag->cache_reg = creg;
            frag->own_reg = creg->handle;
            reg = frag->own_reg;
        }
    }
    if (reg != NULL)
        memcpy(seg->key, reg->key, sizeof(seg->key));
    ferry_convertor_set_position(conv, conv->pos + len);
    *size = len;
    return FERRY_OK;
}

int btl_frags_prepare_src(btl_frags_t *frags, ferry_btl_endpoint_t *ep, ferry_btl_reg_t *reg,
                          ferry_convertor_t *conv, size_t reserve, size_t *size, uint32_t flags,
                          ferry_btl_desc_t **des_out)
{
    const ferry_btl_attr_t *attr = &frags->btl->attr;
    if (conv == NULL || size == NULL || des_out == NULL || reserve > attr->max_send_size)
        return FERRY_ERR_INVALID;
    size_t left = ferry_convertor_remaining(conv);
    size_t want = *size < left ? *size : left;
    bool contig = !ferry_convertor_need_buffers(conv);
    bool rdma = (flags & FERRY_BTL_PREP_RDMA) != 0;
    btl_frag_t *frag;

    if (rdma || (contig && reserve == 0 && (reg != NULL || want > attr->max_send_size))) {
        /* In place: the seed's user fragment over the application's memory;
         * for put/get on non-contiguous data, one block (or what is left of
         * it) per descriptor. */
        if (reserve != 0)
            return rdma ? FERRY_ERR_NOT_SUPPORTED : FERRY_ERR_INVALID;
        if (!rdma && want > attr->max_send_size)
            want = attr->max_send_size;
        frag = btl_frag_get(frags, BTL_FRAG_USER);
        if (frag == NULL)
            return FERRY_ERR_NO_RESOURCE;
        int rc = frag_in_place(frags, frag, reg, conv, &want, &frag->segs[0]);
        if (rc != FERRY_OK) {
            btl_frag_put(frags, frag);
            return rc;
        }
    } else {
        btl_frag_kind_t kind = reserve + want <= attr->eager_limit ? BTL_FRAG_EAGER
                                                                   : BTL_FRAG_MAX;
        frag = btl_frag_get(frags, kind);
        if (frag == NULL)
            return FERRY_ERR_NO_RESOURCE;
        if (want > attr->max_send_size - reserve)
            want = attr->max_send_size - reserve;
        want = ferry_convertor_pack(conv, frag->payload + reserve, want);
        frag->segs[0].addr = (uint64_t)(uintptr_t)frag->payload;
        frag->segs[0].len = reserve + want;
    }
    frag->base.src = &frag->segs[0];
    frag->base.src_cnt = 1;
    frag->base.dst = &frag->segs[1];
    frag->base.dst_cnt = 0;
    *size = want;
    *des_out = &frag->base;
    return FERRY_OK;
}

int btl_frags_prepare_dst(btl_frags_t *frags, ferry_btl_endpoint_t *ep, ferry_btl_reg_t *reg,
                          ferry_convertor_t *conv, size_t reserve, size_t *size, uint32_t flags,
                          ferry_btl_desc_t **des_out)
{
    if (conv == NULL || size == NULL || des_out == NULL || reserve != 0)
        return FERRY_ERR_INVALID;
    /* Non-contiguous memory is described a block at a time (zero copy);
     * only put/get can use that. */
    if (ferry_convertor_need_buffers(conv) && !(flags & FERRY_BTL_PREP_RDMA))
        return FERRY_ERR_NOT_SUPPORTED;
    btl_frag_t *frag = btl_frag_get(frags, BTL_FRAG_USER);
    if (frag == NULL)
        return FERRY_ERR_NO_RESOURCE;
    int rc = frag_in_place(frags, frag, reg, conv, size, &frag->segs[1]);
    if (rc != FERRY_OK) {
        btl_frag_put(frags, frag);
        return rc;
    }
    frag->base.src = &frag->segs[0];
    frag->base.src_cnt = 0;
    frag->base.dst = &frag->segs[1];
    frag->base.dst_cnt = 1;
    *des_out = &frag->base;
    return FERRY_OK;
}

int btl_frags_run_completions(btl_frags_t *frags, util_list_t *list,
                              void (*on_done)(btl_frag_t *frag))
{
    int n = 0;
    util_list_item_t *it;
    size_t due = util_list_len(list);
    while (due-- > 0 && (it = util_list_pop_front(list)) != NULL) {
        btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
        ferry_btl_desc_t *des = &frag->base;
        /* After the callback the descriptor may be the caller's again (and
         * freed by it): only what was read before is used. */
        uint32_t flags = des->flags;
        if (on_done != NULL)
            on_done(frag);
        des->flags &= ~(uint32_t)FERRY_BTL_DES_INFLIGHT;
        if (des->cbfunc != NULL)
            des->cbfunc(frags->btl, frag->ep, des, frag->status);
        if (flags & FERRY_BTL_DES_OWNERSHIP)
            btl_frag_put(frags, frag);
        n++;
    }
    return n;
}

int btl_frags_op_alloc(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, size_t size,
                       uint32_t flags, ferry_btl_desc_t **des_out)
{
    if (btl == NULL || btl->frags == NULL)
        return FERRY_ERR_INVALID;
    return btl_frags_alloc(btl->frags, size, flags, des_out);
}

int btl_frags_op_free(ferry_btl_module_t *btl, ferry_btl_desc_t *des)
{
    if (btl == NULL || btl->frags == NULL)
        return FERRY_ERR_INVALID;
    return btl_frags_free(btl->frags, des);
}

int btl_frags_op_prepare_src(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                             ferry_btl_reg_t *reg, ferry_convertor_t *conv, size_t reserve,
                             size_t *size, uint32_t flags, ferry_btl_desc_t **des_out)
{
    if (btl == NULL || btl->frags == NULL)
        return FERRY_ERR_INVALID;
    return btl_frags_prepare_src(btl->frags, ep, reg, conv, reserve, size, flags, des_out);
}

int btl_frags_op_prepare_dst(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                             ferry_btl_reg_t *reg, ferry_convertor_t *conv, size_t reserve,
                             size_t *size, uint32_t flags, ferry_btl_desc_t **des_out)
{
    if (btl == NULL || btl->frags == NULL)
        return FERRY_ERR_INVALID;
    return btl_frags_prepare_dst(btl->frags, ep, reg, conv, reserve, size, flags, des_out);
}

int btl_frags_check_send(const ferry_btl_module_t *btl, const ferry_btl_desc_t *des,
                         uint8_t tag)
{
    if (btl == NULL || tag >= FERRY_BTL_TAG_BTL_MIN || !btl_frag_valid(des) ||
        (des->flags & FERRY_BTL_DES_INFLIGHT) || des->src == NULL || des->src_cnt != 1 ||
        des->src[0].len > btl->attr.max_send_size)
        return FERRY_ERR_INVALID;
    return FERRY_OK;
}
