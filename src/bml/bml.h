/*
 * The paths to each peer (Open MPI's bml/r2 is the model). Every module
 * whose add_procs reached a peer is a path to it. The paths of the highest
 * exclusivity still alive are the peer's rails: messages and atomics take
 * the rail with the lowest latency (btl_peer_t.module_idx and .ep, which
 * the API reads on every call), and large put and get are striped across
 * the rails that have the operation, by their bandwidth.
 *
 * Failover: when a transport reports a peer's endpoint broken and another
 * rail remains, the peer is not failed: the rail is marked down, the best
 * rail left takes over, and a probe goes to the peer on it at once (a dead
 * peer is seen there too, where it would otherwise go unnoticed until the
 * next message). A path of lower exclusivity is never taken over to: it is
 * another class of transport (tcp beside sm), and losing the best class
 * (sm sees the process itself) means the peer is gone.
 *
 * What moves over: puts and gets (their pieces that ended with
 * FERRY_ERR_UNREACH are issued again on a live rail; a put or get writes
 * the same bytes twice without harm). What does not: active messages and
 * atomics already handed to the broken endpoint, whose effect at the target
 * cannot be known from here (see docs/bml.md).
 */
#ifndef BML_BML_H
#define BML_BML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "btl/ctx.h"

/* The most paths to one peer ferry keeps. */
#define BML_MAX_PATHS 16

typedef struct bml_path {
    int m;                    /* index into ctx->modules */
    ferry_btl_endpoint_t *ep; /* that module's endpoint to the peer */
    bool down;                /* its transport reported it broken */
} bml_path_t;

typedef struct bml_peer {
    bml_path_t path[BML_MAX_PATHS]; /* best first: exclusivity, then latency */
    int n;
    int n_live;
    uint32_t failovers; /* rails lost to this peer while another took over */
} bml_peer_t;

struct bml {
    bml_peer_t *peers;   /* [size], built by bml_init */
    size_t stripe_min;   /* FERRY_BML_STRIPE_MIN */
    size_t stripe_frag;  /* FERRY_BML_STRIPE_FRAG */
    uint64_t failovers;  /* paths lost while another took over */
    uint64_t reissued;   /* bytes of puts and gets issued again after their rail was lost */
    uint64_t *rail_bytes; /* [n_modules]: bytes of multi-rail puts and gets handed to each */
};

/* Declares the BML's parameters (at context creation, so that ferry_info
 * lists them) and makes ctx->bml. */
int bml_register_params(ferry_ctx_t *ctx);

/* Builds every peer's paths from the endpoints btl_ctx_add_procs made,
 * keeps the primary path it chose, polls every rail, and takes over
 * ctx->path_lost. */
int bml_init(ferry_ctx_t *ctx);

void bml_fini(ferry_ctx_t *ctx);

/* Path lost: the failover described above. true when another rail took
 * over (or m was already down), false when none is left. Also called by
 * the API when an operation on module m was refused with FERRY_ERR_UNREACH
 * before the transport's own report came. */
bool bml_path_lost(ferry_ctx_t *ctx, int r, int m, int status, const char *msg);

/* Has rank r more than one live rail? (Only then do operations to it keep
 * what they need to move to another.) */
static inline bool bml_multi(const ferry_ctx_t *ctx, int r)
{
    return ctx->bml != NULL && ctx->bml->peers != NULL && ctx->bml->peers[r].n_live > 1;
}

/* How many times rank r's traffic moved to another rail. */
static inline uint32_t bml_peer_failovers(const ferry_ctx_t *ctx, int r)
{
    return ctx->bml != NULL && ctx->bml->peers != NULL ? ctx->bml->peers[r].failovers : 0;
}

/* The live rails of rank r whose module has every flag of need, best first:
 * their module indexes into ms (at most max). Returns how many. */
int bml_rails(const ferry_ctx_t *ctx, int r, uint32_t need, int *ms, int max);

/* Is module m a live rail of rank r? */
bool bml_rail_live(const ferry_ctx_t *ctx, int r, int m);

/* Bytes of multi-rail puts and gets handed to module m so far. */
uint64_t bml_rail_bytes(const ferry_ctx_t *ctx, int m);

/* ferry's internal test hook: path m to rank r fails as if its transport
 * had reported it (the API's tests cut one rail in the middle of traffic). */
bool bml_test_cut(ferry_ctx_t *ctx, int r, int m);

#endif /* BML_BML_H */
