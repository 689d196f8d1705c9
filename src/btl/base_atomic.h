/*
 * Remote atomics every transport shares: the CPU operation itself, and a
 * generic implementation executed by the target over a transport's own
 * messages, for memory the initiator cannot reach with its CPU.
 *
 * The rule (include/ferry/ferry.h, FERRY_ACCESS_REMOTE_ATOMIC): every ferry
 * atomic is a CPU atomic on the target's memory. Where the initiator maps
 * that memory (self; sm on ferry_mem_alloc memory) its own CPU applies it
 * with ferry_btl_atomic_apply; everywhere else the target's CPU applies it, with
 * the same function, on the initiator's behalf. Both are __atomic builtins
 * on one address, so they never mix non-atomically.
 *
 * The generic path (base_atomic.c): the initiator sends a request
 * (btl_amo_msg_t) as one transport control message; the target resolves the
 * key against its own registrations at that moment (through the transport's
 * resolve hook: key, range, FERRY_ACCESS_REMOTE_ATOMIC, a released key
 * refused), checks the alignment, applies the operation and answers with the
 * value before it and a status. The transport only carries the two message
 * kinds, in order, and calls in here: btl_amo_target for a request,
 * btl_amo_answer for an answer, btl_amo_progress from its progress.
 *
 * Budgets (issue 9): an initiator has at most FERRY_BTL_ATOMIC_SLOTS
 * atomics in flight to one peer (more is FERRY_ERR_NO_RESOURCE); a target
 * keeps at most as many answers to one peer that its transport could not
 * send yet, and tells the transport to hold back that peer's next request
 * while it has them (btl_amo_target returns 0), so a peer flooding requests
 * slows only itself.
 */
#ifndef BTL_BASE_ATOMIC_H
#define BTL_BASE_ATOMIC_H

#include <stdbool.h>
#include <stdint.h>

#include "btl/base.h"
#include "util/list.h"
#include "util/pool.h"

/* ---- the CPU operation: ferry_ferry_btl_atomic_apply (include/ferry/btl.h) ---- */

/* Writes a result of the width to local (4 bytes for 32 bits). */
static inline void btl_atomic_store_result(void *local, bool w32, uint64_t v)
{
    if (w32) {
        uint32_t r = (uint32_t)v;
        __builtin_memcpy(local, &r, sizeof(r));
    } else {
        __builtin_memcpy(local, &v, sizeof(v));
    }
}

/* The atomic_flags of a module whose atomics are all CPU atomics: every
 * operation, both widths, cswap, coherent with CPU atomics. */
#define BTL_ATOMIC_SUPPORTS_CPU                                                             \
    (FERRY_BTL_ATOMIC_SUPPORTS_ADD | FERRY_BTL_ATOMIC_SUPPORTS_AND |                        \
     FERRY_BTL_ATOMIC_SUPPORTS_OR | FERRY_BTL_ATOMIC_SUPPORTS_XOR |                         \
     FERRY_BTL_ATOMIC_SUPPORTS_LAND | FERRY_BTL_ATOMIC_SUPPORTS_LOR |                       \
     FERRY_BTL_ATOMIC_SUPPORTS_LXOR | FERRY_BTL_ATOMIC_SUPPORTS_SWAP |                      \
     FERRY_BTL_ATOMIC_SUPPORTS_MIN | FERRY_BTL_ATOMIC_SUPPORTS_MAX |                        \
     FERRY_BTL_ATOMIC_SUPPORTS_32BIT | FERRY_BTL_ATOMIC_SUPPORTS_CSWAP |                    \
     FERRY_BTL_ATOMIC_SUPPORTS_GLOB)

/* ---- the target-executed path ---- */

/* Message kinds. */
enum { BTL_AMO_REQ = 1, BTL_AMO_ANSWER = 2 };
/* Request flags (beside FERRY_BTL_ATOMIC_FLAG_32BIT in the low bits). */
enum { BTL_AMO_CSWAP = 1u << 8, BTL_AMO_FETCH = 1u << 9 };

/* A request or an answer, as it travels (the same layout both ways; every
 * field is checked by the side that receives it). */
typedef struct btl_amo_msg {
    uint32_t magic;
    uint16_t kind;
    uint16_t op;     /* REQ: the operation (0 with BTL_AMO_CSWAP) */
    uint32_t flags;  /* REQ: FERRY_BTL_ATOMIC_FLAG_32BIT | BTL_AMO_*; ANSWER: 0 */
    int32_t status;  /* ANSWER: FERRY_OK or the refusal; REQ: 0 */
    uint64_t cookie; /* names the request at the initiator */
    uint64_t raddr;
    uint64_t operand; /* ANSWER: the value before */
    uint64_t compare;
    uint8_t key[FERRY_BTL_KEY_MAX];
} btl_amo_msg_t;

#define BTL_AMO_MAGIC 0x4f4d4142u /* "BAMO" */

typedef struct btl_amo_op btl_amo_op_t;

/* A transport's per-peer state of the generic path; zeroed means empty
 * (btl_amo_ep_fini frees what it holds). */
typedef struct btl_amo_ep {
    util_list_t inflight; /* our requests waiting for their answer, oldest first */
    size_t ninflight;     /* how many are waited for (flush waits for them) */
    size_t nexpired;      /* completed at their deadline, their answer still due: in
                             inflight too, and holding a slot each, but not waited for */
    bool listed;          /* inflight initialised */
    /* Answers to the peer the transport could not send yet, oldest first, in
     * a ring of FERRY_BTL_ATOMIC_SLOTS allocated with the first one. */
    btl_amo_msg_t *owed;
    uint32_t owed_head, nowed;
} btl_amo_ep_t;

/* What a transport gives the generic path. */
typedef struct btl_amo_hooks {
    /* Sends msg to ep as one control message of the transport, ordered with
     * the others; FERRY_ERR_NO_RESOURCE when it cannot now (nothing sent),
     * another error when the peer is gone. */
    int (*send)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const btl_amo_msg_t *msg);
    /* Resolves a peer's key (FERRY_BTL_KEY_MAX bytes, of which the
     * transport's reg_handle_size count) against this process's live
     * registrations: [addr, addr + len) inside one with every right of need,
     * and its memory still there. FERRY_OK with *ptr_out, or
     * FERRY_ERR_ACCESS. */
    int (*resolve)(ferry_btl_module_t *btl, const uint8_t *key, uint64_t addr, size_t len,
                   uint32_t need, void **ptr_out);
    /* The generic state of ep. */
    btl_amo_ep_t *(*ep_state)(ferry_btl_endpoint_t *ep);
} btl_amo_hooks_t;

/* A module's part: atomics whose completion is due, and the budget. */
typedef struct btl_amo_module {
    const btl_amo_hooks_t *hooks;
    util_list_t completed; /* ops failed, callbacks not yet run */
    util_pool_t ops;       /* the records of ops in flight */
    size_t slots;          /* FERRY_BTL_ATOMIC_SLOTS */
    uint64_t next_cookie;
    uint64_t timeout_ns;   /* the transport's deadline for an answer; 0: none */
} btl_amo_module_t;

/* Declares FERRY_BTL_ATOMIC_SLOTS (any transport using the generic path
 * calls it from register_params and open; the parameter is shared). */
int btl_amo_register_params(ferry_ctx_t *ctx, size_t *slots_out);

void btl_amo_module_init(btl_amo_module_t *am, const btl_amo_hooks_t *hooks, size_t slots);

/* Starts an atomic on the generic path: checks the arguments
 * (btl_base_atomic_check), then sends the request. FERRY_OK (cb from
 * progress), FERRY_ERR_NO_RESOURCE (the peer's budget is full or the
 * transport could not send: nothing started), or an error. local may be NULL
 * for a non-fetching one. */
int btl_amo_start(ferry_btl_module_t *btl, btl_amo_module_t *am, ferry_btl_endpoint_t *ep,
                  void *local, ferry_btl_reg_t *lreg, uint64_t raddr, const uint8_t *rkey,
                  uint32_t op, uint64_t operand, uint64_t compare, uint32_t flags, bool cswap,
                  bool fetch, ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata);

/* A request from ep arrived (len bytes at msg). Returns 1 when it was taken
 * (executed and answered, or its answer owed), 0 when it must wait (the
 * peer is owed its whole budget: hold it and call again after progress),
 * FERRY_ERR_PROTO for a malformed request (the transport fails the peer),
 * or the error the transport's send gave. */
int btl_amo_target(ferry_btl_module_t *btl, btl_amo_module_t *am, ferry_btl_endpoint_t *ep,
                   const void *msg, size_t len);

/* An answer from ep arrived: completes the request it names, whose callback
 * runs here (the transport calls this from its progress). 1 (taken, as for
 * btl_amo_target), or FERRY_ERR_PROTO for one that is malformed or answers
 * nothing in flight. */
int btl_amo_answer(ferry_btl_module_t *btl, btl_amo_module_t *am, ferry_btl_endpoint_t *ep,
                   const void *msg, size_t len);

/* Sends answers owed to ep while the transport takes them; returns how many
 * left, or a negative status from the transport's send. */
int btl_amo_send_owed(ferry_btl_module_t *btl, btl_amo_module_t *am, ferry_btl_endpoint_t *ep);

/* Runs the callbacks of the atomics failed so far; returns how many. */
int btl_amo_progress(ferry_btl_module_t *btl, btl_amo_module_t *am);

/* Completes with FERRY_ERR_TIMEOUT (callbacks from the next
 * btl_amo_progress) the atomics to aep whose answer has not come within
 * am->timeout_ns (which the transport sets; 0: never). Each keeps its slot
 * until its answer comes, which is then dropped: nothing is written into
 * the caller's memory after the timeout was reported. Returns how many
 * expired now. */
size_t btl_amo_expire(btl_amo_module_t *am, btl_amo_ep_t *aep, uint64_t now);

/* Completes every atomic in flight to ep with status (callbacks from the
 * next btl_amo_progress) and drops the answers owed to it. Those expired
 * stay until freed with the module: an answer is never taken for one of
 * them again. */
void btl_amo_ep_fail(btl_amo_module_t *am, btl_amo_ep_t *aep, int status);

/* del_procs of a peer that may still answer: every atomic in flight to it
 * completes with status (callbacks from the next btl_amo_progress) but,
 * as an expired one, keeps its slot until its answer comes, which is then
 * dropped (nothing written): a late answer is no protocol error. */
void btl_amo_ep_forget(btl_amo_module_t *am, btl_amo_ep_t *aep, int status);

/* ep_fail with FERRY_ERR_CANCELED, then frees what aep holds. */
void btl_amo_ep_fini(btl_amo_module_t *am, btl_amo_ep_t *aep);

/* Atomics of ep in flight, or answers owed to it: flush waits for the first
 * (not for those already completed at their deadline). */
static inline size_t btl_amo_inflight(const btl_amo_ep_t *aep)
{
    return aep->ninflight;
}

static inline bool btl_amo_owes(const btl_amo_ep_t *aep)
{
    return aep->nowed > 0;
}

/* Cancels everything and runs the callbacks (finalize). */
void btl_amo_module_fini(ferry_btl_module_t *btl, btl_amo_module_t *am);

#endif /* BTL_BASE_ATOMIC_H */
