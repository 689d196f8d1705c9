/*
 * The ofi transport: libfabric reliable-datagram endpoints (FI_EP_RDM) with
 * FI_MSG and FI_RMA.
 *
 * A module owns one libfabric domain: a fabric, a domain, one endpoint, one
 * completion queue for sends, receives and RMA, and an address vector. Its
 * fi_getname address is published in the modex under "btl.ofi" (module 0)
 * or "btl.ofi.N"; add_procs reads a peer's address and checks the peer uses
 * the same provider, and the address goes into the address vector on first
 * use.
 *
 * Active messages are one libfabric message each: an 8-byte ofi_hdr_t, then
 * the payload. Small ones leave through fi_inject (no completion, the buffer
 * is ours at once); the rest are copied into a registered transmit slot and
 * sent with fi_send, the slot coming back with the completion. Receives land
 * in pre-posted registered buffers: a few large FI_MULTI_RECV buffers where
 * the provider offers it, else one buffer per message.
 *
 * Flow control: transmit slots are the seed's send tokens. Out of slots, or
 * when the provider says -FI_EAGAIN, a fragment waits on its endpoint's
 * queue and progress posts it later, in order; a queue whose head has made
 * no progress for FERRY_OFI_SEND_TIMEOUT milliseconds fails its endpoint
 * (a peer that stopped receiving is never waited for forever).
 *
 * put/get are fi_write/fi_read. A registration's key (ofi_key_t, 32 bytes)
 * carries its base, length and rights, so the initiator refuses an access
 * outside them before any byte moves; what only the target can know (a key
 * released since) a native provider refuses with an error completion, mapped
 * to FERRY_ERR_ACCESS; software providers do not (the module then reports
 * FERRY_BTL_FLAG_NO_KEY_REVOKE, see ofi_module.c).
 */
#ifndef BTL_OFI_H
#define BTL_OFI_H

#include <stdbool.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "btl/base.h"
#include "btl/base_atomic.h"
#include "btl/frag.h"
#include "util/list.h"
#include "util/pool.h"

#define OFI_FI_VERSION FI_VERSION(1, 5)
#define OFI_ADDR_VERSION 1
#define OFI_HDR_MAGIC 0x6f66u /* "of" */
#define OFI_ADDR_MAX 256
#define OFI_PROV_NAME_MAX 64
#define OFI_SLOT_ALIGN 64

/* The memory-registration modes ferry can honour. */
#define OFI_MR_SUPPORTED \
    (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)

/* Message types in ofi_hdr_t. */
enum {
    OFI_T_DATA = 1,  /* an active message */
    OFI_T_CLOSE = 2, /* the sender finalized: its silence from now on is no failure */
    OFI_T_AMO_REQ = 3,   /* an atomic for the target to execute: btl_amo_msg_t */
    OFI_T_AMO_ANSWER = 4 /* its answer: btl_amo_msg_t */
};

/* Leads every message. src is the sender's rank, checked against the job
 * size before use; seq numbers the messages of one sender to one receiver,
 * because some providers complete receives out of order (ofi_rxm finishes
 * a large rendezvous message after smaller ones sent later) and the
 * contract promises order. */
typedef struct ofi_hdr {
    uint32_t src;
    uint32_t seq;
    uint8_t tag;
    uint8_t type;
    uint16_t magic;
    uint32_t reserved;
} ofi_hdr_t;

/* A message that arrived before its predecessors, held until they come. */
typedef struct ofi_held {
    util_list_item_t link;
    uint32_t seq;
    size_t len;
    unsigned char data[]; /* the whole message, header first */
} ofi_held_t;

/* What a process publishes in the modex for one module. */
typedef struct ofi_addr {
    uint32_t version;
    uint32_t addrlen;
    char prov[OFI_PROV_NAME_MAX];
    unsigned char addr[OFI_ADDR_MAX];
} ofi_addr_t;

/* The key of a registration as peers see it (FERRY_BTL_KEY_MAX bytes). base
 * and len bound what a peer may address; access holds FERRY_ACCESS_*; slot
 * finds the local registration again when the segment is used locally. */
typedef struct ofi_key {
    uint64_t base;
    uint64_t len;
    uint64_t mr_key;
    uint32_t access;
    uint32_t slot;
} ofi_key_t;

_Static_assert(sizeof(ofi_key_t) <= FERRY_BTL_KEY_MAX, "ofi key larger than FERRY_BTL_KEY_MAX");

typedef struct ofi_module ofi_module_t;

/* One registration with the domain. */
typedef struct ofi_reg {
    ferry_btl_reg_t base;
    uint32_t magic;
    uint32_t slot;
    struct fid_mr *mr;
    uint64_t mr_key;
} ofi_reg_t;

/* Operation codes in btl_frag_t.op. */
enum { OFI_OP_SEND, OFI_OP_PUT, OFI_OP_GET };

/* An operation given to libfabric: its context (fi_context2 first, as the
 * FI_CONTEXT/FI_CONTEXT2 modes demand) and what it belongs to. */
typedef enum { OFI_CTX_TX, OFI_CTX_RX, OFI_CTX_RMA } ofi_ctx_kind_t;

typedef struct ofi_opctx {
    struct fi_context2 fctx;
    ofi_ctx_kind_t kind;
    ferry_btl_endpoint_t *ep;
    btl_frag_t *frag;      /* RMA: the descriptor; TX: NULL (completed at post); RMA
                            * abandoned at a peer's failure: NULL, the context waiting
                            * for the provider to give it back */
    ofi_reg_t *tmp_reg;    /* RMA: a registration made for this operation */
    struct mem_reg *tmp_creg; /* RMA: the cache's registration tmp_reg belongs to */
    unsigned char *buf;    /* TX/RX: the registered slot */
    size_t buf_len;
    uint32_t index;        /* TX/RX: slot number */
    bool posted;           /* RX: the buffer is with the provider */
    util_list_item_t link; /* RMA: on the module's list of posted operations */
} ofi_opctx_t;

typedef enum { OFI_EP_NEW, OFI_EP_READY, OFI_EP_FAILED, OFI_EP_CLOSED } ofi_ep_state_t;

struct ferry_btl_endpoint {
    ofi_module_t *mod;
    int rank;
    ofi_ep_state_t state;
    ofi_addr_t addr;     /* the peer's, read from the modex in add_procs */
    fi_addr_t fi_addr;   /* valid once READY */
    util_list_t queue;   /* fragments waiting for a slot or for the provider, in order */
    uint64_t stalled_since_ns; /* when the queue's head last failed to go; 0 when moving */
    bool sending;        /* in the module's sending list */
    bool deleted;        /* del_procs ran: refuse new work until added again */
    util_list_item_t sending_link;
    size_t rdma_inflight; /* put/get accepted and not yet completed */
    uint32_t tx_seq;     /* seq of our next message to the peer */
    uint32_t rx_seq;     /* seq of the peer's next message to deliver */
    util_list_t held;    /* ofi_held_t, by seq */
    btl_amo_ep_t amo;    /* atomics, executed by the target (ofi_atomic.c) */
};

typedef struct ofi_params {
    const char *provider;
    const char *iface;
    long long max_modules;
    size_t eager_limit;
    size_t max_send_size;
    size_t tx_slots;
    size_t rx_slots;
    bool multi_recv;
    size_t multi_recv_size;
    long long send_timeout_ms;
    const char *mr_mode;
    long long exclusivity;
    size_t free_list_num, free_list_max, free_list_inc;
    size_t atomic_slots;
} ofi_params_t;

struct ofi_module {
    ferry_btl_module_t super;
    ofi_params_t p;
    int index;                 /* module number within the component */
    char modex_key[32];
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_av *av;
    uint64_t mr_mode;          /* the provider's demands, from info */
    size_t inject_size;
    ofi_addr_t my_addr;
    /* Peers. */
    int nranks;
    ferry_btl_endpoint_t **eps; /* by rank */
    util_list_t sending;        /* endpoints with a queue */
    util_list_t completed;      /* fragments whose completion is due */
    btl_frags_t frags;
    btl_amo_module_t amo;       /* atomics (ofi_atomic.c) */
    util_pool_t rma_ctxs;       /* ofi_opctx_t for put/get */
    bool rma_ctxs_ready;
    util_list_t rma_posted;     /* RMA contexts given to libfabric */
    unsigned char *inject_buf;  /* [inject_size]: a message built for fi_inject */
    /* Transmit slots: one registered area cut into tx_slots. */
    unsigned char *tx_area;
    size_t tx_slot_size;
    ofi_reg_t *tx_reg;
    ofi_opctx_t *tx_ctx;
    uint32_t *tx_free;          /* stack of free slot numbers */
    size_t tx_nfree;
    /* Receive buffers. */
    unsigned char *rx_area;
    size_t rx_buf_size;
    size_t rx_nbufs;
    ofi_reg_t *rx_reg;
    ofi_opctx_t *rx_ctx;
    bool use_multi_recv;
    size_t rx_posted;
    /* Registrations by slot. */
    ofi_reg_t **regs;
    size_t nregs_cap;
    uint64_t next_req_key;      /* requested keys when the provider does not choose */
    bool closing;
};

static inline ofi_module_t *ofi_of(ferry_btl_module_t *btl)
{
    return (ofi_module_t *)btl;
}

/* ofi_component.c */
/* Logs a failed libfabric call with fi_strerror and returns the status. */
int ofi_log_error(ofi_module_t *mod, const char *what, int fi_rc);
int ofi_status_from_fi(int fi_err);

/* ofi_mr.c: the one place memory meets the domain. */
int ofi_mr_register(ofi_module_t *mod, void *base, size_t len, uint32_t access,
                    ofi_reg_t **reg_out);
/* A registration of local memory for one operation, through the module's
 * registration cache (src/mem) when it has one, so that repeated operations
 * on one buffer register it once; *creg_out is the cache's entry (NULL when
 * registered directly). ofi_mr_release gives it back. */
int ofi_mr_acquire(ofi_module_t *mod, void *base, size_t len, uint32_t access,
                   ofi_reg_t **reg_out, struct mem_reg **creg_out);
void ofi_mr_release(ofi_module_t *mod, ofi_reg_t *reg, struct mem_reg *creg);
int ofi_mr_deregister(ofi_module_t *mod, ofi_reg_t *reg);
void ofi_mr_release_all(ofi_module_t *mod);
/* The local descriptor for [addr, addr+len) described by seg, or NULL with
 * *need_reg set when the provider wants one and seg names no registration
 * of ours covering it. */
void *ofi_mr_local_desc(ofi_module_t *mod, const ferry_btl_segment_t *seg, bool *need_reg);
int ofi_register_mem(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *base, size_t len,
                     uint32_t access, ferry_btl_reg_t **reg_out);
int ofi_deregister_mem(ferry_btl_module_t *btl, ferry_btl_reg_t *reg);

/* ofi_endpoint.c */
/* The endpoint of rank, made (reading the peer's modex address) when
 * create is set and there is none yet. NULL when the rank cannot be reached
 * through this module. FERRY_ERR_NO_MEMORY leaves *ep_out NULL. */
int ofi_ep_get(ofi_module_t *mod, int rank, bool create, ferry_btl_endpoint_t **ep_out);
int ofi_ep_ready(ofi_module_t *mod, ferry_btl_endpoint_t *ep);
void ofi_ep_fail(ofi_module_t *mod, ferry_btl_endpoint_t *ep, int status, const char *why);
void ofi_ep_fail_pending(ofi_module_t *mod, ferry_btl_endpoint_t *ep, int status);
void ofi_mark_sending(ofi_module_t *mod, ferry_btl_endpoint_t *ep);
int ofi_drain_queue(ofi_module_t *mod, ferry_btl_endpoint_t *ep, uint64_t now_ns);
void ofi_complete(ofi_module_t *mod, btl_frag_t *frag, int status);
uint64_t ofi_now_ns(void);

/* ofi_msg.c */
/* Tries to hand a send to libfabric: FERRY_OK (gone), FERRY_ERR_NO_RESOURCE
 * (no slot, or the provider said -FI_EAGAIN), or a failure. */
int ofi_post_send(ofi_module_t *mod, ferry_btl_endpoint_t *ep, const void *header,
                  size_t header_len, const void *payload, size_t payload_len, uint8_t tag,
                  uint8_t type);
int ofi_rx_post_all(ofi_module_t *mod);
int ofi_poll_cq(ofi_module_t *mod);
int ofi_tx_init(ofi_module_t *mod);
void ofi_tx_fini(ofi_module_t *mod);
int ofi_rx_init(ofi_module_t *mod);
void ofi_rx_fini(ofi_module_t *mod);

/* ofi_rdma.c */
int ofi_put(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des);
int ofi_get(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des);
/* Posts a queued or new put/get: FERRY_OK, FERRY_ERR_NO_RESOURCE (try
 * later) or a failure (the fragment is then completed with it). */
int ofi_rdma_post(ofi_module_t *mod, ferry_btl_endpoint_t *ep, btl_frag_t *frag);
void ofi_rdma_done(ofi_module_t *mod, ofi_opctx_t *oc, int status);
/* Completes the put/get posted to ep with status without waiting for the
 * provider, which may never answer for a dead peer (shm); their contexts
 * stay posted until the provider returns them or the endpoint closes. */
void ofi_rdma_abandon(ofi_module_t *mod, ferry_btl_endpoint_t *ep, int status);

/* ofi_atomic.c */
extern const btl_amo_hooks_t ofi_amo_hooks;
/* An atomic request or answer arrived in order from ep (body: the message
 * after its ofi_hdr_t). */
void ofi_amo_deliver(ofi_module_t *mod, ferry_btl_endpoint_t *ep, uint8_t type,
                     const unsigned char *body, size_t len);
/* Sends the answers owed to ep that the provider takes; returns how many. */
int ofi_amo_send_owed(ofi_module_t *mod, ferry_btl_endpoint_t *ep);
int ofi_atomic_op(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, uint64_t raddr,
                  const uint8_t *rkey, ferry_btl_atomic_op_t op, uint64_t operand,
                  uint32_t flags, ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata);
int ofi_atomic_fop(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                   uint64_t raddr, ferry_btl_reg_t *lreg, const uint8_t *rkey,
                   ferry_btl_atomic_op_t op, uint64_t operand, uint32_t flags,
                   ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata);
int ofi_atomic_cswap(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                     uint64_t raddr, ferry_btl_reg_t *lreg, const uint8_t *rkey,
                     uint64_t compare, uint64_t value, uint32_t flags, ferry_btl_rdma_cb_t cb,
                     void *cbctx, void *cbdata);

/* ofi_module.c */
int ofi_module_open(ferry_ctx_t *ctx, const ofi_params_t *p, struct fi_info *info, int index,
                    ferry_btl_module_t **btl_out);

#endif /* BTL_OFI_H */
