/*
 * Code every transport shares: module set-up and checks, the handler table,
 * error reporting, and the named "unsupported" stubs that optional ops point
 * to (so no hot path tests an op for NULL).
 */
#ifndef BTL_BASE_H
#define BTL_BASE_H

#include <ferry/btl.h>

#include "btl/ctx.h"
#include "rt/progress.h"
#include "util/bitmap.h"

/* Fills the common part of a module and checks that the mandatory ops exist
 * (every op except the optional ones listed below); FERRY_ERR_INVALID with a
 * logged reason otherwise. */
int btl_base_module_init(ferry_btl_module_t *btl, const ferry_btl_component_t *component,
                         ferry_ctx_t *ctx, const ferry_btl_attr_t *attr,
                         const ferry_btl_ops_t *ops);

/* Default register_am and register_error: fill the module's tables. */
int btl_base_register_am(ferry_btl_module_t *btl, uint8_t tag, ferry_btl_am_cb_t cb,
                         void *cbdata);
int btl_base_register_error(ferry_btl_module_t *btl, ferry_btl_error_cb_t cb, void *cbdata);

/* Random bits for registration keys, drawn from the kernel in batches (one
 * getrandom call per 16 keys rather than per key). */
typedef struct btl_nonces {
    uint64_t v[16];
    unsigned left;
} btl_nonces_t;

/* The next 64 random bits; what is handed out does not stay behind in the
 * pool. An error is logged with who ("sm") and returned. */
int btl_base_nonce(ferry_btl_module_t *btl, btl_nonces_t *pool, const char *who, uint64_t *out);

/* The part of btl_base_deliver for a tag with no handler. */
int btl_base_deliver_unhandled(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd);

/* Hands a received fragment to its tag's handler. A fragment for a tag with
 * no handler is dropped with a warning (the peer broke the protocol or
 * registered late) and FERRY_ERR_NOT_FOUND is returned. */
static inline int btl_base_deliver(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd)
{
    ferry_btl_am_cb_t cb = btl->am[rd->tag].cb;
    if (cb == NULL)
        return btl_base_deliver_unhandled(btl, rd);
    cb(btl, rd, btl->am[rd->tag].cbdata);
    return FERRY_OK;
}

/* Reports a peer failure or fatal error through the registered callback
 * (logged at error level when none is registered). The report waits in the
 * module until btl_base_deliver_reports, so that it never runs inside the
 * call that found the failure (a send, a put, a connect): the contract lets
 * callbacks run only from progress, flush, del_procs and finalize. */
void btl_base_report_error(ferry_btl_module_t *btl, int status, int peer, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Delivers the reports queued so far, oldest first; returns how many. Every
 * transport that reports errors calls it from its progress (so flush, which
 * progresses, delivers them too). Reports queued by the callbacks it runs
 * wait for the next call. */
int btl_base_deliver_reports(ferry_btl_module_t *btl);

/* The same, costing one test when nothing is queued: for progress loops. */
static inline int btl_base_progress_reports(ferry_btl_module_t *btl)
{
    return btl->reports != NULL ? btl_base_deliver_reports(btl) : 0;
}

/* Frees reports still queued (a transport's finalize calls it): they are
 * logged at info level, the module being gone. Safe on NULL. */
void btl_base_reports_fini(ferry_btl_module_t *btl);

struct btl_frag_params;

/* How a transport's module is built (btl_base_module_create). */
typedef struct btl_base_open_args {
    const ferry_btl_component_t *component;
    size_t module_size; /* the transport's module, a ferry_btl_module_t first */
    const ferry_btl_attr_t *attr;
    const ferry_btl_ops_t *ops;
    /* The shared fragment pools (btl/frag.h): where the module keeps its
     * btl_frags_t (offsetof) and their parameters; NULL frag_params for a
     * transport without them. */
    size_t frags_offset;
    const struct btl_frag_params *frag_params;
    /* The transport's own steps, each optional, with arg: init before the
     * pools exist (plain state: lists, tables), start once they do
     * (resources, the address published in the modex). What either leaves
     * half done, ops->finalize undoes. */
    int (*init)(ferry_btl_module_t *btl, void *arg);
    int (*start)(ferry_btl_module_t *btl, void *arg);
    void *arg;
} btl_base_open_args_t;

/* Builds one module, the skeleton of every open: allocates module_size
 * zeroed bytes, fills the common part and checks the ops
 * (btl_base_module_init), runs init, creates the pools, runs start. On a
 * failure the module is finalized through its ops (safe on a half-built
 * one) and the error returned; *btl_out is set only on success. */
int btl_base_module_create(ferry_ctx_t *ctx, const btl_base_open_args_t *args,
                           ferry_btl_module_t **btl_out);

/* A component's whole open for a transport with one module:
 * btl_base_module_create, and the module handed back as a list of one. */
int btl_base_open(ferry_ctx_t *ctx, const btl_base_open_args_t *args,
                  ferry_btl_module_t ***modules_out, int *count_out);

/* For flush: progresses the module until *inflight (an endpoint's count of
 * puts and gets not yet completed) reaches zero, giving the core away while
 * idle. Returns FERRY_OK, or the negative status progress failed with. */
int btl_base_wait_inflight(ferry_btl_module_t *btl, const size_t *inflight);

/* The checks every register_mem makes of its arguments: a module, memory
 * that is there and does not wrap, known FERRY_ACCESS_* bits, somewhere to
 * put the result. FERRY_OK or FERRY_ERR_INVALID. */
int btl_base_check_register(const ferry_btl_module_t *btl, const void *base, size_t len,
                            uint32_t access, ferry_btl_reg_t **reg_out);

/* Optional ops: these stubs return FERRY_ERR_NOT_SUPPORTED. */
int btl_base_unsupported_sendi(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                               const void *header, size_t header_len, const void *payload,
                               size_t payload_len, uint8_t tag);
int btl_base_unsupported_rdma(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                              ferry_btl_desc_t *des);
int btl_base_unsupported_prepare_dst(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                     ferry_btl_reg_t *reg, ferry_convertor_t *conv,
                                     size_t reserve, size_t *size, uint32_t flags,
                                     ferry_btl_desc_t **des_out);
int btl_base_unsupported_register_mem(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                      void *base, size_t len, uint32_t access,
                                      ferry_btl_reg_t **reg_out);
int btl_base_unsupported_deregister_mem(ferry_btl_module_t *btl, ferry_btl_reg_t *reg);
int btl_base_unsupported_mem_alloc(ferry_btl_module_t *btl, size_t len, uint32_t access,
                                   void **addr_out, ferry_btl_reg_t **reg_out);
int btl_base_unsupported_mem_free(ferry_btl_module_t *btl, ferry_btl_reg_t *reg);
void btl_base_dump_nothing(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, int verbose);
int btl_base_unsupported_atomic_op(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                   uint64_t raddr, const uint8_t *rkey, ferry_btl_atomic_op_t op,
                                   uint64_t operand, uint32_t flags, ferry_btl_rdma_cb_t cb,
                                   void *cbctx, void *cbdata);
int btl_base_unsupported_atomic_fop(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                    void *local, uint64_t raddr, ferry_btl_reg_t *lreg,
                                    const uint8_t *rkey, ferry_btl_atomic_op_t op,
                                    uint64_t operand, uint32_t flags, ferry_btl_rdma_cb_t cb,
                                    void *cbctx, void *cbdata);
int btl_base_unsupported_atomic_cswap(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                      void *local, uint64_t raddr, ferry_btl_reg_t *lreg,
                                      const uint8_t *rkey, uint64_t compare, uint64_t value,
                                      uint32_t flags, ferry_btl_rdma_cb_t cb, void *cbctx,
                                      void *cbdata);

/* Why a module's atomic flags and ops disagree (FERRY_BTL_FLAG_ATOMIC_OPS
 * set exactly when atomic_op and atomic_cswap are not the stubs, ATOMIC_FOPS
 * likewise for atomic_fop, attr.atomic_flags only known bits, with an
 * operation and cswap when ATOMIC_OPS is set and empty otherwise), or NULL
 * when they agree. btl_base_module_init refuses a module it names. */
const char *btl_base_atomic_consistency(const ferry_btl_attr_t *attr,
                                        const ferry_btl_ops_t *ops);

/* The checks every atomic makes of its arguments before anything else:
 * flags known (else FERRY_ERR_INVALID), op an operation (INVALID) that
 * attr.atomic_flags has (NOT_SUPPORTED; cswap: CSWAP is there), the width
 * supported (NOT_SUPPORTED) and raddr naturally aligned for it (INVALID). */
static inline int btl_base_atomic_check(const ferry_btl_module_t *btl, uint32_t op, bool cswap,
                                        uint64_t raddr, uint32_t flags)
{
    if ((flags & ~(uint32_t)FERRY_BTL_ATOMIC_FLAG_32BIT) != 0)
        return FERRY_ERR_INVALID;
    uint32_t af = btl->attr.atomic_flags;
    if (!cswap) {
        /* Add first: the operation nearly every caller uses. */
        uint32_t bit = op == FERRY_BTL_ATOMIC_ADD ? (uint32_t)FERRY_BTL_ATOMIC_SUPPORTS_ADD
                                                  : ferry_btl_atomic_supports_bit(op);
        if (bit == 0)
            return FERRY_ERR_INVALID;
        if ((af & bit) == 0)
            return FERRY_ERR_NOT_SUPPORTED;
    } else if ((af & FERRY_BTL_ATOMIC_SUPPORTS_CSWAP) == 0) {
        return FERRY_ERR_NOT_SUPPORTED;
    }
    bool w32 = (flags & FERRY_BTL_ATOMIC_FLAG_32BIT) != 0;
    if (w32 && (af & FERRY_BTL_ATOMIC_SUPPORTS_32BIT) == 0)
        return FERRY_ERR_NOT_SUPPORTED;
    if ((raddr & (w32 ? 3u : 7u)) != 0)
        return FERRY_ERR_INVALID;
    return FERRY_OK;
}

/* The access check every transport makes before touching memory for a peer:
 * [addr, addr + len) inside [reg->base, reg->base + reg->len) with every
 * bit of need in reg->access. FERRY_OK or FERRY_ERR_ACCESS. Overflow-safe. */
static inline int btl_base_check_access(const ferry_btl_reg_t *reg, uint64_t addr, size_t len,
                                        uint32_t need)
{
    uint64_t base = (uint64_t)(uintptr_t)reg->base;
    if ((reg->access & need) != need)
        return FERRY_ERR_ACCESS;
    /* Written so that no sum can overflow: addr - base is computed only once
     * addr >= base is known. */
    if (addr < base || addr - base > reg->len || len > reg->len - (addr - base))
        return FERRY_ERR_ACCESS;
    return FERRY_OK;
}

#endif /* BTL_BASE_H */
