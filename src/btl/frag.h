/*
 * Fragments (descriptors) and their pools, shared by the transports: the
 * seed's eager, max and user free lists, with alloc, free, prepare_src and
 * prepare_dst written once. A transport embeds nothing: its fragments are
 * btl_frag_t, and it keeps per-operation state in the fields at the end.
 *
 * prepare_src and prepare_dst take the data through the convertor (packing
 * non-contiguous data into fragments, any size from any position), and
 * register user memory they describe in place through the transport's
 * registration cache (src/mem/rcache.h), which btl_frags_init creates over
 * the module's register_mem and deregister_mem. Those registrations have
 * FERRY_ACCESS_LOCAL only: they serve this process's side of an operation,
 * and no peer can reach them through their keys, during the operation or
 * while the cache keeps them after it.
 */
#ifndef BTL_FRAG_H
#define BTL_FRAG_H

#include <ferry/btl.h>

#include "util/list.h"
#include "util/pool.h"

struct mem_rcache;
struct mem_reg;

typedef enum { BTL_FRAG_EAGER, BTL_FRAG_MAX, BTL_FRAG_USER, BTL_FRAG_KINDS } btl_frag_kind_t;

typedef struct btl_frag {
    ferry_btl_desc_t base;
    ferry_btl_segment_t segs[2];
    util_list_item_t link;
    uint32_t magic;
    btl_frag_kind_t kind;
    bool allocated; /* taken from its pool and not yet freed */
    uint8_t op;     /* the transport's operation code */
    uint8_t tag;
    ferry_btl_endpoint_t *ep;
    ferry_btl_reg_t *own_reg; /* made by prepare_src/dst, released when freed */
    struct mem_reg *cache_reg; /* the cache's registration own_reg belongs to */
    char *payload;            /* eager and max fragments: the data area */
    /* The transport's state for the operation in flight. */
    size_t done;
    uint64_t end_pos;
    uint64_t cookie;
    int status;
} btl_frag_t;

typedef struct btl_frag_params {
    size_t eager_size;   /* payload bytes of an eager fragment */
    size_t max_size;     /* payload bytes of a max fragment */
    size_t num, max, inc; /* free_list_num/max/inc for eager and user pools */
    size_t max_frags;    /* most max fragments (they are large) */
    /* The parameter to raise when the transport runs out of registrations,
     * named in the cache's error (e.g. "FERRY_SM_REG_SLOTS"); may be NULL. */
    const char *reg_limit_hint;
    /* The transport moves the local side of a put or get by its address
     * (the CPU or the kernel copies it): descriptors over the caller's
     * memory get no registration from the cache when the caller gave none. */
    bool no_local_reg;
} btl_frag_params_t;

typedef struct btl_frags {
    ferry_btl_module_t *btl;
    util_pool_t pools[BTL_FRAG_KINDS];
    bool ready[BTL_FRAG_KINDS];
    char names[BTL_FRAG_KINDS][48];
    struct mem_rcache *rcache; /* NULL when the module cannot register memory */
    bool no_local_reg;         /* btl_frag_params_t's */
} btl_frags_t;

/* Creates the three pools, named after the transport, and the registration
 * cache (reading the FERRY_MEM_* parameters). */
int btl_frags_init(btl_frags_t *frags, ferry_btl_module_t *btl, const btl_frag_params_t *params);

/* Frees the pools. Returns FERRY_OK, or FERRY_ERR_BUSY (logged, naming the
 * pool) when descriptors were not returned. Safe on a zeroed object. */
int btl_frags_fini(btl_frags_t *frags);

/* A fragment, or NULL when its pool is at its maximum. */
btl_frag_t *btl_frag_get(btl_frags_t *frags, btl_frag_kind_t kind);

/* Returns a fragment, releasing the registration it made. */
void btl_frag_put(btl_frags_t *frags, btl_frag_t *frag);

/* Is des one of ours, taken and not freed? */
bool btl_frag_valid(const ferry_btl_desc_t *des);

static inline btl_frag_t *btl_frag_of(ferry_btl_desc_t *des)
{
    return (btl_frag_t *)des;
}

/* The contract's alloc, free, prepare_src and prepare_dst (include/ferry/btl.h),
 * for a transport whose fragments are plain memory. prepare_* register user
 * memory through the module's register_mem when given no registration. */
int btl_frags_alloc(btl_frags_t *frags, size_t size, uint32_t flags,
                    ferry_btl_desc_t **des_out);
int btl_frags_free(btl_frags_t *frags, ferry_btl_desc_t *des);
int btl_frags_prepare_src(btl_frags_t *frags, ferry_btl_endpoint_t *ep, ferry_btl_reg_t *reg,
                          ferry_convertor_t *conv, size_t reserve, size_t *size, uint32_t flags,
                          ferry_btl_desc_t **des_out);
int btl_frags_prepare_dst(btl_frags_t *frags, ferry_btl_endpoint_t *ep, ferry_btl_reg_t *reg,
                          ferry_convertor_t *conv, size_t reserve, size_t *size, uint32_t flags,
                          ferry_btl_desc_t **des_out);

/* The module's registration cache, or NULL (tests and ferry-bench). */
static inline struct mem_rcache *btl_frags_rcache(const btl_frags_t *frags)
{
    return frags->rcache;
}

/* The checks every send op makes of its arguments: a tag below the
 * transports' own, one of our descriptors and not in flight, one source
 * segment of at most max_send_size. FERRY_OK or FERRY_ERR_INVALID. */
int btl_frags_check_send(const ferry_btl_module_t *btl, const ferry_btl_desc_t *des,
                         uint8_t tag);

/* The same four as ready-made ops, for a transport with nothing to add:
 * they find the pools through btl->frags (set by btl_frags_init). */
int btl_frags_op_alloc(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, size_t size,
                       uint32_t flags, ferry_btl_desc_t **des_out);
int btl_frags_op_free(ferry_btl_module_t *btl, ferry_btl_desc_t *des);
int btl_frags_op_prepare_src(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                             ferry_btl_reg_t *reg, ferry_convertor_t *conv, size_t reserve,
                             size_t *size, uint32_t flags, ferry_btl_desc_t **des_out);
int btl_frags_op_prepare_dst(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                             ferry_btl_reg_t *reg, ferry_convertor_t *conv, size_t reserve,
                             size_t *size, uint32_t flags, ferry_btl_desc_t **des_out);

/* Runs the completions queued on list (fragments linked by their link
 * field) that were due when called, so that work a callback starts and that
 * completes at once waits for the next call. For each: on_done(frag) first
 * (the transport's own accounting; may be NULL), then the descriptor leaves
 * flight, its callback runs with frag->status and, with
 * FERRY_BTL_DES_OWNERSHIP, it returns to its pool. Returns how many ran. */
int btl_frags_run_completions(btl_frags_t *frags, util_list_t *list,
                              void (*on_done)(btl_frag_t *frag));

/* Descriptors in use, by pool, for dump. */
size_t btl_frags_in_use(const btl_frags_t *frags, btl_frag_kind_t kind);

#endif /* BTL_FRAG_H */
