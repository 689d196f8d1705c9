/*
 * Code every transport shares.
 */
#include "btl/base.h"
#include "btl/frag.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

int btl_base_module_init(ferry_btl_module_t *btl, const ferry_btl_component_t *component,
                         ferry_ctx_t *ctx, const ferry_btl_attr_t *attr,
                         const ferry_btl_ops_t *ops)
{
    /* Every op but the optional ones must exist; optional ones point to a
     * named stub instead of NULL, so no caller tests for NULL. */
    const struct {
        const char *name;
        const void *fn;
    } required[] = {
        {"add_procs", (const void *)ops->add_procs},
        {"del_procs", (const void *)ops->del_procs},
        {"register_am", (const void *)ops->register_am},
        {"register_error", (const void *)ops->register_error},
        {"finalize", (const void *)ops->finalize},
        {"alloc", (const void *)ops->alloc},
        {"free", (const void *)ops->free},
        {"prepare_src", (const void *)ops->prepare_src},
        {"prepare_dst", (const void *)ops->prepare_dst},
        {"send", (const void *)ops->send},
        {"sendi", (const void *)ops->sendi},
        {"put", (const void *)ops->put},
        {"get", (const void *)ops->get},
        {"register_mem", (const void *)ops->register_mem},
        {"deregister_mem", (const void *)ops->deregister_mem},
        {"mem_alloc", (const void *)ops->mem_alloc},
        {"mem_free", (const void *)ops->mem_free},
        {"atomic_op", (const void *)ops->atomic_op},
        {"atomic_fop", (const void *)ops->atomic_fop},
        {"atomic_cswap", (const void *)ops->atomic_cswap},
        {"flush", (const void *)ops->flush},
        {"progress", (const void *)ops->progress},
        {"dump", (const void *)ops->dump},
    };
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
        if (required[i].fn == NULL) {
            rt_log(&ctx->log, RT_LOG_ERROR, "transport %s: op %s missing", attr->name,
                   required[i].name);
            return FERRY_ERR_INVALID;
        }
    }
    if (attr->reg_handle_size > FERRY_BTL_KEY_MAX || attr->eager_limit > attr->max_send_size) {
        rt_log(&ctx->log, RT_LOG_ERROR, "transport %s: inconsistent attributes", attr->name);
        return FERRY_ERR_INVALID;
    }
    const char *why = btl_base_atomic_consistency(attr, ops);
    if (why != NULL) {
        rt_log(&ctx->log, RT_LOG_ERROR, "transport %s: %s", attr->name, why);
        return FERRY_ERR_INVALID;
    }
    memset(btl, 0, sizeof(*btl));
    btl->attr = *attr;
    btl->ops = ops;
    btl->ctx = ctx;
    btl->component = component;
    btl->reports_tail = &btl->reports;
    return FERRY_OK;
}

int btl_base_module_create(ferry_ctx_t *ctx, const btl_base_open_args_t *args,
                           ferry_btl_module_t **btl_out)
{
    if (args->module_size < sizeof(ferry_btl_module_t) ||
        (args->frag_params != NULL &&
         args->frags_offset + sizeof(btl_frags_t) > args->module_size)) {
        rt_log(&ctx->log, RT_LOG_ERROR, "transport %s: module of %zu bytes cannot be built",
               args->attr->name, args->module_size);
        return FERRY_ERR_INVALID;
    }
    ferry_btl_module_t *btl = calloc(1, args->module_size);
    if (btl == NULL)
        return FERRY_ERR_NO_MEMORY;
    int rc = btl_base_module_init(btl, args->component, ctx, args->attr, args->ops);
    if (rc != FERRY_OK) {
        free(btl);
        return rc;
    }
    if ((args->init == NULL || (rc = args->init(btl, args->arg)) == FERRY_OK) &&
        (args->frag_params == NULL ||
         (rc = btl_frags_init((btl_frags_t *)((char *)btl + args->frags_offset), btl,
                              args->frag_params)) == FERRY_OK) &&
        (args->start == NULL || (rc = args->start(btl, args->arg)) == FERRY_OK)) {
        *btl_out = btl;
        return FERRY_OK;
    }
    btl->ops->finalize(btl);
    return rc;
}

int btl_base_open(ferry_ctx_t *ctx, const btl_base_open_args_t *args,
                  ferry_btl_module_t ***modules_out, int *count_out)
{
    ferry_btl_module_t **list = calloc(1, sizeof(*list));
    if (list == NULL)
        return FERRY_ERR_NO_MEMORY;
    int rc = btl_base_module_create(ctx, args, &list[0]);
    if (rc != FERRY_OK) {
        free(list);
        return rc;
    }
    *modules_out = list;
    *count_out = 1;
    return FERRY_OK;
}

int btl_base_wait_inflight(ferry_btl_module_t *btl, const size_t *inflight)
{
    unsigned idle = 0;
    while (*inflight > 0) {
        int got = btl->ops->progress(btl);
        if (got < 0)
            return got;
        if (got == 0)
            rt_idle(&idle);
        else
            idle = 0;
    }
    return FERRY_OK;
}

int btl_base_check_register(const ferry_btl_module_t *btl, const void *base, size_t len,
                            uint32_t access, ferry_btl_reg_t **reg_out)
{
    const uint32_t known = FERRY_ACCESS_LOCAL | FERRY_ACCESS_REMOTE_READ |
                           FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_ATOMIC |
                           FERRY_BTL_ACCESS_TARGET_ATOMICS;
    if (btl == NULL || base == NULL || len == 0 || (access & ~known) != 0 || reg_out == NULL ||
        (uintptr_t)base > UINTPTR_MAX - len)
        return FERRY_ERR_INVALID;
    return FERRY_OK;
}

int btl_base_register_am(ferry_btl_module_t *btl, uint8_t tag, ferry_btl_am_cb_t cb,
                         void *cbdata)
{
    if (btl == NULL || tag >= FERRY_BTL_TAG_BTL_MIN)
        return FERRY_ERR_INVALID;
    btl->am[tag].cb = cb;
    btl->am[tag].cbdata = cb != NULL ? cbdata : NULL;
    return FERRY_OK;
}

int btl_base_register_error(ferry_btl_module_t *btl, ferry_btl_error_cb_t cb, void *cbdata)
{
    if (btl == NULL)
        return FERRY_ERR_INVALID;
    btl->error_cb = cb;
    btl->error_cbdata = cbdata;
    return FERRY_OK;
}

int btl_base_nonce(ferry_btl_module_t *btl, btl_nonces_t *pool, const char *who, uint64_t *out)
{
    if (pool->left == 0) {
        size_t got = 0;
        while (got < sizeof(pool->v)) {
            ssize_t n = getrandom((char *)pool->v + got, sizeof(pool->v) - got, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                char what[64];
                snprintf(what, sizeof(what), "%s: drawing random key bits", who);
                return rt_log_errno(&btl->ctx->log, what, n < 0 ? errno : EIO);
            }
            got += (size_t)n;
        }
        pool->left = sizeof(pool->v) / sizeof(pool->v[0]);
    }
    *out = pool->v[--pool->left];
    pool->v[pool->left] = 0;
    return FERRY_OK;
}

int btl_base_deliver_unhandled(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd)
{
    rt_log(&btl->ctx->log, RT_LOG_WARN,
           "%s: message with tag %u from rank %d has no handler; dropped", btl->attr.name,
           (unsigned)rd->tag, rd->peer);
    return FERRY_ERR_NOT_FOUND;
}

/* A report waiting for progress. */
struct btl_base_report {
    struct btl_base_report *next;
    int status;
    int peer;
    char msg[256];
};

void btl_base_report_error(ferry_btl_module_t *btl, int status, int peer, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct btl_base_report *r = malloc(sizeof(*r));
    if (r == NULL) {
        /* Out of memory the report cannot wait: the log is all there is. */
        rt_log(&btl->ctx->log, RT_LOG_ERROR, "%s: peer %d: %s (%s; not reported: out of memory)",
               btl->attr.name, peer, msg, ferry_strerror(status));
        return;
    }
    r->next = NULL;
    r->status = status;
    r->peer = peer;
    memcpy(r->msg, msg, sizeof(msg));
    if (btl->reports_tail == NULL)
        btl->reports_tail = &btl->reports;
    *btl->reports_tail = r;
    btl->reports_tail = &r->next;
}

int btl_base_deliver_reports(ferry_btl_module_t *btl)
{
    /* Only what was queued before this call: a callback that causes a new
     * failure sees it reported at the next progress, not recursively. */
    struct btl_base_report *r = btl->reports;
    btl->reports = NULL;
    btl->reports_tail = &btl->reports;
    int n = 0;
    while (r != NULL) {
        struct btl_base_report *next = r->next;
        if (btl->error_cb != NULL)
            btl->error_cb(btl, r->status, r->peer, r->msg, btl->error_cbdata);
        else
            rt_log(&btl->ctx->log, RT_LOG_ERROR, "%s: peer %d: %s (%s)", btl->attr.name, r->peer,
                   r->msg, ferry_strerror(r->status));
        free(r);
        r = next;
        n++;
    }
    return n;
}

void btl_base_reports_fini(ferry_btl_module_t *btl)
{
    if (btl == NULL)
        return;
    struct btl_base_report *r = btl->reports;
    while (r != NULL) {
        struct btl_base_report *next = r->next;
        rt_log(&btl->ctx->log, RT_LOG_INFO, "%s: peer %d: %s (%s; found while finalizing)",
               btl->attr.name, r->peer, r->msg, ferry_strerror(r->status));
        free(r);
        r = next;
    }
    btl->reports = NULL;
    btl->reports_tail = &btl->reports;
}

const char *btl_base_atomic_consistency(const ferry_btl_attr_t *attr, const ferry_btl_ops_t *ops)
{
    bool has_ops = (attr->flags & FERRY_BTL_FLAG_ATOMIC_OPS) != 0;
    bool has_fops = (attr->flags & FERRY_BTL_FLAG_ATOMIC_FOPS) != 0;
    uint32_t af = attr->atomic_flags;
    const uint32_t op_bits = FERRY_BTL_ATOMIC_SUPPORTS_KNOWN &
                             ~(uint32_t)(FERRY_BTL_ATOMIC_SUPPORTS_32BIT |
                                         FERRY_BTL_ATOMIC_SUPPORTS_CSWAP |
                                         FERRY_BTL_ATOMIC_SUPPORTS_GLOB);
    if ((af & ~(uint32_t)FERRY_BTL_ATOMIC_SUPPORTS_KNOWN) != 0)
        return "unknown bits in atomic_flags";
    if (has_ops != (ops->atomic_op != btl_base_unsupported_atomic_op))
        return "FERRY_BTL_FLAG_ATOMIC_OPS and the atomic_op op disagree";
    if (has_ops != (ops->atomic_cswap != btl_base_unsupported_atomic_cswap))
        return "FERRY_BTL_FLAG_ATOMIC_OPS and the atomic_cswap op disagree";
    if (has_fops != (ops->atomic_fop != btl_base_unsupported_atomic_fop))
        return "FERRY_BTL_FLAG_ATOMIC_FOPS and the atomic_fop op disagree";
    if (has_fops && !has_ops)
        return "FERRY_BTL_FLAG_ATOMIC_FOPS without FERRY_BTL_FLAG_ATOMIC_OPS";
    if (!has_ops && af != 0)
        return "atomic_flags without FERRY_BTL_FLAG_ATOMIC_OPS";
    if (has_ops && ((af & op_bits) == 0 || (af & FERRY_BTL_ATOMIC_SUPPORTS_CSWAP) == 0))
        return "FERRY_BTL_FLAG_ATOMIC_OPS with no operation or no cswap in atomic_flags";
    return NULL;
}

int btl_base_unsupported_atomic_op(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                   uint64_t raddr, const uint8_t *rkey, ferry_btl_atomic_op_t op,
                                   uint64_t operand, uint32_t flags, ferry_btl_rdma_cb_t cb,
                                   void *cbctx, void *cbdata)
{
    return FERRY_ERR_NOT_SUPPORTED;
}

int btl_base_unsupported_atomic_fop(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                    void *local, uint64_t raddr, ferry_btl_reg_t *lreg,
                                    const uint8_t *rkey, ferry_btl_atomic_op_t op,
                                    uint64_t operand, uint32_t flags, ferry_btl_rdma_cb_t cb,
                                    void *cbctx, void *cbdata)
{
    return FERRY_ERR_NOT_SUPPORTED;
}

int btl_base_unsupported_atomic_cswap(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                      void *local, uint64_t raddr, ferry_btl_reg_t *lreg,
                                      const uint8_t *rkey, uint64_t compare, uint64_t value,
                                      uint32_t flags, ferry_btl_rdma_cb_t cb, void *cbctx,
                                      void *cbdata)
{
    return FERRY_ERR_NOT_SUPPORTED;
}

int btl_base_unsupported_sendi(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                               const void *header, size_t header_len, const void *payload,
                               size_t payload_len, uint8_t tag)
{
    return FERRY_ERR_NOT_SUPPORTED;
}

int btl_base_unsupported_rdma(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                              ferry_btl_desc_t *des)
{
    return FERRY_ERR_NOT_SUPPORTED;
}

int btl_base_unsupported_prepare_dst(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                     ferry_btl_reg_t *reg, ferry_convertor_t *conv,
                                     size_t reserve, size_t *size, uint32_t flags,
                                     ferry_btl_desc_t **des_out)
{
    return FERRY_ERR_NOT_SUPPORTED;
}

int btl_base_unsupported_register_mem(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                      void *base, size_t len, uint32_t access,
                                      ferry_btl_reg_t **reg_out)
{
    return FERRY_ERR_NOT_SUPPORTED;
}

int btl_base_unsupported_deregister_mem(ferry_btl_module_t *btl, ferry_btl_reg_t *reg)
{
    return FERRY_ERR_NOT_SUPPORTED;
}

int btl_base_unsupported_mem_alloc(ferry_btl_module_t *btl, size_t len, uint32_t access,
                                   void **addr_out, ferry_btl_reg_t **reg_out)
{
    return FERRY_ERR_NOT_SUPPORTED;
}

int btl_base_unsupported_mem_free(ferry_btl_module_t *btl, ferry_btl_reg_t *reg)
{
    return FERRY_ERR_NOT_SUPPORTED;
}

void btl_base_dump_nothing(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, int verbose)
{
}
