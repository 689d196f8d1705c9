/*
 * The application API's state: active-message handlers, one-sided operations
 * in flight, and the barrier.
 */
#ifndef API_API_H
#define API_API_H

#include <ferry/ferry.h>

#include "btl/ctx.h"
#include "rt/progress.h"
#include "util/list.h"
#include "util/pool.h"

/* ferry's own active-message tags (between the application's and the
 * transports'). */
enum {
    API_TAG_BARRIER = FERRY_BTL_TAG_FERRY_MIN
};

/* The most dissemination rounds a barrier needs: log2 of the largest job. */
#define API_BARRIER_ROUNDS 32

/* A put or get as the application started it; the transport may see it as
 * several pieces. */
typedef struct api_rdma_op {
    util_list_item_t link; /* in issue_queue while pieces remain to start, then done */
    bool is_put;
    int peer;
    char *buf;
    size_t len;
    size_t issued;      /* bytes handed to the transport so far */
    size_t outstanding; /* pieces started and not completed */
    uint64_t raddr;
    uint8_t rkey[FERRY_BTL_KEY_MAX];
    ferry_btl_reg_t *lreg; /* the caller's registration with that transport, or NULL */
    int status;            /* first error, else FERRY_OK */
    ferry_comp_cb_t cb;
    void *arg;
} api_rdma_op_t;

struct api_state {
    struct {
        ferry_am_cb_t cb;
        void *arg;
    } am[FERRY_AM_TAG_MAX + 1];

    util_pool_t ops;
    bool ops_ready;
    util_list_t issue_queue; /* ops with pieces not yet started, in order */
    util_list_t done;        /* ops whose callback is due */
    util_list_t mems;        /* live registrations (ferry_mem_t), released at finalize */
    size_t *outstanding;     /* ops in flight per peer */
    int *first_error;        /* per peer, since the last flush */

    /* Active messages above the max send size (am_large.c), made on first
     * use. */
    struct api_am_large *large;

    /* Dissemination barrier: messages counted by epoch parity and round. */
    uint32_t barrier_epoch;
    uint32_t barrier_count[2][API_BARRIER_ROUNDS];
};

/* api_ctx_create flags. */
enum {
    API_CTX_OPEN = 1u << 0,        /* join the job and open the transports */
    API_CTX_ALL_MODULES = 1u << 1, /* load every module (ferry_info) */
    API_CTX_NO_FENCE = 1u << 2,    /* with OPEN: put the addresses, no fence (a host's) */
    API_CTX_NO_LAUNCHER = 1u << 3  /* without OPEN: the launcher's parameters left out */
};

/*
 * Builds a context: its parameters, the transports chosen and their
 * parameters; with API_CTX_OPEN also the launcher and the open transports,
 * their addresses exchanged, but no endpoints (ferry_init adds those). Used
 * by ferry_init, and by tools that only inspect (ferry_info).
 */
int api_ctx_create(const ferry_init_params_t *params, unsigned flags, ferry_ctx_t **ctx_out);

/* api_ctx_create with the job, exchange, log and parameters of a host
 * (include/ferry/host.h), checked by the caller (rt_modex_host_valid); host
 * NULL is api_ctx_create. */
int api_ctx_create_hosted(const ferry_init_params_t *params, unsigned flags,
                          const ferry_host_t *host, ferry_ctx_t **ctx_out);

/* Tears down whatever of ctx exists (safe on a half-built one: with peers,
 * a flush and a barrier first), clears its magic and frees it. */
int api_ctx_destroy(ferry_ctx_t *ctx);

int api_state_init(ferry_ctx_t *ctx);
/* Cancels what is queued and frees the state; safe when never initialised. */
void api_state_fini(ferry_ctx_t *ctx);

/* Starts queued pieces and runs due completions; returns events handled. */
int api_rdma_progress(ferry_ctx_t *ctx);

/* The active-message dispatcher registered on every module for every tag
 * below FERRY_BTL_TAG_BTL_MIN. */
void api_am_dispatch(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, void *cbdata);

/* Refuses a handle that is not a live context: logs for a stale one (NULL
 * needs no message) and returns false. */
bool api_ctx_refuse(const ferry_ctx_t *ctx);

/* The check every public call makes of its context handle: not NULL, and
 * not yet finalized as far as its magic says (see ferry_finalize in
 * ferry.h for what this catches and what it cannot). */
static inline bool api_ctx_live(const ferry_ctx_t *ctx)
{
    if (ctx != NULL && ctx->magic == BTL_CTX_MAGIC)
        return true;
    return api_ctx_refuse(ctx);
}

/* An application tag: 0 .. FERRY_AM_TAG_MAX. Checked before any narrowing to
 * the transports' 8-bit tags. */
bool api_tag_valid(int tag);

/* Validates dst and returns its peer, or NULL with *status_out set. */
btl_peer_t *api_peer(ferry_ctx_t *ctx, int dst, int *status_out);

#endif /* API_API_H */
