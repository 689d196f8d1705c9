/*
 * The ofi transport: libfabric reliable-datagram endpoints (FI_EP_RDM) with
 * FI_MSG and FI_RMA.
 *
 * A module owns one libfabric domain: a fabric, a domain, one endpoint, one
 * completion queue for sends, receives and RMA, and an address vector. Its
 * fi_getname address, with what identifies its process on its host, is
 * published in the modex under "btl.ofi" (module 0) or "btl.ofi.N";
 * add_procs reads every peer's, checks the peer uses the same provider, and
 * inserts them all into the address vector at once, so that every message
 * of a rank of the job arrives with that rank's fi_addr (FI_SOURCE) and a
 * message from any other address is a stranger's.
 *
 * Active messages are one libfabric message each: a 16-byte ofi_hdr_t
 * (ofi_wire.h), then the payload. Small ones leave through fi_inject (no
 * completion, the buffer is ours at once); the rest are copied into a
 * registered transmit slot and sent with fi_send, the slot coming back with
 * the completion. Receives land in pre-posted registered buffers: a few
 * large FI_MULTI_RECV buffers where the provider offers it, else one buffer
 * per message. The sender's identity is the rank the fabric names; the
 * header's rank must agree (ofi_wire.c).
 *
 * Flow control: transmit slots are the seed's send tokens, and each peer
 * has a window of ordered messages not yet acknowledged (credits come back
 * in every message's header, or in an ACK). Out of slots, out of window, or
 * when the provider says -FI_EAGAIN, a fragment waits on its endpoint's
 * queue and progress posts it later, in order.
 *
 * Liveness (ofi_live.c): a peer on this host is watched through a pidfd of
 * its process; any peer that something waits on (queued work, a put or get
 * in flight, messages not yet acknowledged) and that has said nothing for
 * FERRY_OFI_PROBE_INTERVAL gets a probe, and one silent for
 * FERRY_OFI_SEND_TIMEOUT is failed, unless its process on this host is
 * alive. Every put and get has a deadline (FERRY_OFI_REQUEST_TIMEOUT).
 *
 * A put with notification small enough for one message is one ordered
 * message of ofi's own (OFI_T_PUTN, ofi_wire.h) that the target checks,
 * writes, answers (OFI_T_PUTN_ANSWER: always for a tracked one, only a
 * refusal for an untracked one) and hands to the tag's handler; answers
 * owed go ahead of everything sent to that peer later (ofi_ep_clear).
 *
 * put/get are fi_writemsg/fi_readmsg; a put completes only once delivered
 * (FI_DELIVERY_COMPLETE). A registration's key (ofi_key_t, 32 bytes)
 * carries its base, length and rights, so the initiator refuses an access
 * outside them before any byte moves; what only the target can know (a key
 * released since) a native provider refuses with an error completion, mapped
 * to FERRY_ERR_ACCESS; software providers do not (the module then reports
 * FERRY_BTL_FLAG_NO_KEY_REVOKE, see ofi_module.c).
 */
#ifndef BTL_OFI_H
#define BTL_OFI_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "btl/base.h"
#include "btl/base_atomic.h"
#include "btl/frag.h"
#include "btl/ofi/ofi_wire.h"
#include "rt/log.h"
#include "util/list.h"
#include "util/pool.h"

#define OFI_FI_VERSION FI_VERSION(1, 5)
#define OFI_ADDR_VERSION 2
#define OFI_ADDR_MAX 256
#define OFI_PROV_NAME_MAX 64
#define OFI_SLOT_ALIGN 64
/* How many times a failed peer that may live is told so (OFI_T_FAIL): at
 * once and at each of the next checks. */
#define OFI_FAIL_NOTICES 10
/* How long posting to a peer pauses after a refused key broke the
 * provider's connection to it (ferry_btl_endpoint.settle_until_ns). */
#define OFI_SETTLE_NS 100000000ull

/* The memory-registration modes ferry can honour. */
#define OFI_MR_SUPPORTED \
    (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)

/* Who a process is on its host: the kernel's boot, the pid namespace, the
 * pid and its start time. Two processes with the same boot and namespace
 * are on one host and see each other's pids; the start time tells a pid
 * reused by another process from the one that published it. Zero where
 * /proc does not say. */
typedef struct ofi_proc_id {
    uint8_t boot_id[16];
    uint64_t pidns;
    uint64_t start_time; /* clock ticks after boot, /proc/PID/stat field 22 */
    int32_t pid;
    uint32_t reserved;
} ofi_proc_id_t;

/* What a process publishes in the modex for one module. */
typedef struct ofi_addr {
    uint32_t version;
    uint32_t addrlen;
    char prov[OFI_PROV_NAME_MAX];
    unsigned char addr[OFI_ADDR_MAX];
    ofi_proc_id_t proc;
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

/* Operation codes in btl_frag_t.op. A put or get keeps its deadline (in
 * rt_now_coarse_ns time) in btl_frag_t.cookie. */
enum { OFI_OP_SEND, OFI_OP_PUT, OFI_OP_GET };

/* An operation given to libfabric: its context (fi_context2 first, as the
 * FI_CONTEXT/FI_CONTEXT2 modes demand) and what it belongs to. */
typedef enum { OFI_CTX_TX, OFI_CTX_RX, OFI_CTX_RMA } ofi_ctx_kind_t;

typedef struct ofi_opctx {
    struct fi_context2 fctx;
    ofi_ctx_kind_t kind;
    ferry_btl_endpoint_t *ep;
    btl_frag_t *frag;      /* RMA: the descriptor; TX: NULL (completed at post); RMA
                            * completed early (the peer failed, or the deadline
                            * passed): NULL, the context waiting for the provider
                            * to give it back */
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
    util_list_t queue;   /* fragments waiting for a slot, the window or the provider */
    bool sending;        /* in the module's sending list */
    bool deleted;        /* del_procs ran: refuse new work until added again */
    util_list_item_t sending_link;
    size_t rdma_inflight; /* put/get accepted and not yet completed */
    ofi_wire_peer_t wire; /* sequence numbers, window, held messages */
    /* Liveness (ofi_live.c). */
    bool used;           /* something went to it or came from it: it is told at close */
    bool heard;          /* it sent something since the last check */
    bool suspect;        /* a request to it ran out of time: probed until heard */
    bool ack_due;        /* on the module's list of credits to return */
    bool tell_failed;    /* owes it an OFI_T_FAIL notice (tries left in fail_tries) */
    uint8_t fail_tries;
    int fail_status;     /* what it was failed with, told in OFI_T_FAIL's seq */
    util_list_item_t ack_link;
    uint64_t quiet_since_ns; /* heard last, while something waited on it */
    uint64_t probe_sent_ns;
    uint64_t gap_since_ns;   /* its messages have had a hole since (0: none) */
    uint32_t gap_rx_next;    /* wire.rx_next when the hole was first seen */
    bool local;              /* on this host: its process is watched */
    int pidfd;               /* -1 when not watched that way */
    /* A refused key broke the provider's connection to it (ofi_msg.c):
     * nothing is posted to it before then, so that nothing goes down the
     * connection that is being torn down. 0: none. */
    uint64_t settle_until_ns;
    /* Puts and gets whose key the target refused as its connection broke
     * (ofi_msg.c): a dying target can answer so too, so their verdict
     * waits on its liveness (ofi_live.c). held_heard: it spoke since. */
    util_list_t held;
    uint64_t held_since_ns;
    bool held_heard;
    btl_amo_ep_t amo;        /* atomics, executed by the target (ofi_atomic.c) */
    ofi_putn_peer_t putn;    /* puts with notification, both ways (ofi_rdma.c) */
    /* A split put's notification (ofi_wire.h) whose write was posted but
     * which found no room: it leaves first (ofi_drain_queue). */
    bool notice_due;
    uint8_t notice_tag;
    uint32_t notice_len;
    unsigned char notice[sizeof(ofi_putn_body_t) + OFI_PUTN_SPLIT_PAYLOAD];
};

/* May a message to ep be posted now, ahead of nothing? Nothing waits in
 * its queue, and no answer to a put with notification is owed to it
 * (those leave first, ahead of the queue: ofi_drain_queue). */
static inline bool ofi_ep_clear(const ferry_btl_endpoint_t *ep)
{
    return util_list_empty(&ep->queue) && ep->putn.nowed == 0 && !ep->notice_due;
}

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
    long long probe_interval_ms;
    long long request_timeout_ms;
    size_t window;
    bool watch_local;
    bool putn_split;
    const char *mr_mode;
    long long exclusivity;
    size_t free_list_num, free_list_max, free_list_inc;
    size_t atomic_slots;
    long long wedge_timeout_ms;
} ofi_params_t;

/* How a process ends that a dead peer wedged inside libfabric
 * (ofi_wedge.c): EX_SOFTWARE. */
#define OFI_WEDGE_EXIT 70

typedef struct ofi_wedge_peer {
    int rank;
    pid_t pid;
    int pidfd; /* the watchdog's own; -1: kill(pid, 0) */
} ofi_wedge_peer_t;

/* The watchdog of ofi_wedge.c. calls is written by the module's thread
 * only and read by the watchdog's; the rest is under lock. */
typedef struct ofi_wedge {
    _Atomic uint64_t calls; /* odd: inside a libfabric call */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    ofi_wedge_peer_t *peers;
    int n, cap;
    bool running, stop;
    pthread_t thread;
} ofi_wedge_t;

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
    size_t mr_key_size;        /* bytes of a requested key the provider takes */
    size_t inject_size;
    uint64_t put_flags;        /* fi_writemsg's: FI_COMPLETION, FI_DELIVERY_COMPLETE (ofi_rdma.c) */
    bool putn_split;           /* large puts with notification split (ofi_wire.h) */
    uint64_t putn_split_sent, putn_split_landed; /* counts, for tests and ferry_info */
    bool source_err;           /* FI_SOURCE_ERR: strangers' messages arrive as errors */
    ofi_addr_t my_addr;
    /* Peers. */
    int nranks;
    ferry_btl_endpoint_t **eps; /* by rank */
    int *rank_of;               /* by fi_addr (an index: FI_AV_TABLE); -1: none */
    size_t rank_of_len;
    bool reserve_addr0;         /* fi_addr 0 belongs to nobody (shm, ofi_module.c) */
    struct fid_ep *addr0_ep;    /* ... but this endpoint of ours, which never sends */
    struct fid_cq *addr0_cq;
    struct fid_av *addr0_av;
    uint32_t window;            /* ordered messages in flight per peer */
    util_list_t sending;        /* endpoints with a queue */
    util_list_t acking;         /* endpoints owing credits (ack_due) */
    util_list_t completed;      /* fragments whose completion is due */
    btl_frags_t frags;
    btl_amo_module_t amo;       /* atomics (ofi_atomic.c) */
    util_pool_t putn_reqs;      /* ofi_putn_req_t: tracked puts with notification */
    bool putn_reqs_ready;
    util_list_t putn_done;      /* ofi_putn_req_t failed, callbacks not yet run */
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
    /* Liveness. */
    uint64_t next_check_ns;     /* progress looks at peers again from then */
    struct pollfd *pfds;        /* pidfds of the watched peers */
    int *pfd_rank;
    int npfds;
    /* Complaints about what peers and strangers send, rate-limited. */
    rt_ratelimit_t rl_stranger;
    rt_ratelimit_t rl_peer;
    unsigned long refused;      /* messages refused, for dump */
    bool closing;
    ofi_wedge_t wedge;
};

/* FERRY_OFI_REQUEST_TIMEOUT in nanoseconds: what a put, get, tracked put
 * with notification or atomic may take, and a split put's notification be
 * held. */
static inline uint64_t ofi_timeout_ns(const ofi_module_t *mod)
{
    return (uint64_t)mod->p.request_timeout_ms * 1000000ull;
}

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
/* This process as ofi_proc_id_t describes it. */
void ofi_proc_id_self(ofi_proc_id_t *id);
/* The start time of process pid (/proc/PID/stat), 0 when it cannot be read
 * (no such process). */
uint64_t ofi_proc_start_time(pid_t pid);
/* Makes the endpoints of the ranks in procs that published a usable
 * address and inserts those addresses into the address vector, all at
 * once. FERRY_ERR_NO_MEMORY, or FERRY_OK (a rank that cannot be reached
 * has no endpoint). */
int ofi_ep_add(ofi_module_t *mod, size_t n, const ferry_btl_proc_t *procs);
/* The rank the fabric names for a message's source, or -1. */
static inline int ofi_rank_of(const ofi_module_t *mod, fi_addr_t src)
{
    return src < mod->rank_of_len ? mod->rank_of[src] : -1;
}
int ofi_ep_ready(ofi_module_t *mod, ferry_btl_endpoint_t *ep);
/* Has the pause after a refused key (settle_until_ns) passed? Clears it
 * once it has. */
bool ofi_ep_settled(ferry_btl_endpoint_t *ep);
/* Fails ep: everything pending to it completes with FERRY_ERR_UNREACH and
 * the error callback is told status and why. tell: the peer may be alive
 * and is sent an OFI_T_FAIL notice, so that it fails us too. */
void ofi_ep_fail(ofi_module_t *mod, ferry_btl_endpoint_t *ep, int status, bool tell,
                 const char *why);
/* Completes what is queued and in flight to ep with status. */
void ofi_ep_fail_pending(ofi_module_t *mod, ferry_btl_endpoint_t *ep, int status);
void ofi_ep_free(ferry_btl_endpoint_t *ep);
void ofi_mark_sending(ofi_module_t *mod, ferry_btl_endpoint_t *ep);
int ofi_drain_queue(ofi_module_t *mod, ferry_btl_endpoint_t *ep);
void ofi_complete(ofi_module_t *mod, btl_frag_t *frag, int status);

/* ofi_msg.c */
/* Tries to hand a message of type to libfabric: FERRY_OK (gone),
 * FERRY_ERR_NO_RESOURCE (no slot, no window, or the provider said
 * -FI_EAGAIN), or a failure (the peer is then failed). seq: PROBE and PONG
 * only. */
int ofi_post_send(ofi_module_t *mod, ferry_btl_endpoint_t *ep, const void *header,
                  size_t header_len, const void *payload, size_t payload_len, uint8_t tag,
                  uint8_t type, uint32_t seq);
/* The same with the bytes after the header in nparts pieces (at most 3). */
int ofi_post_sendv(ofi_module_t *mod, ferry_btl_endpoint_t *ep, const struct iovec *parts,
                   int nparts, uint8_t tag, uint8_t type);
/* A control message (no payload), for the liveness and credit code: as
 * ofi_post_send, but a failure to post it fails nobody. */
int ofi_post_ctrl(ofi_module_t *mod, ferry_btl_endpoint_t *ep, uint8_t type, uint32_t seq);
/* Sends the credits owed (the acking list). */
int ofi_send_acks(ofi_module_t *mod);
int ofi_rx_post_all(ofi_module_t *mod);
int ofi_poll_cq(ofi_module_t *mod);
int ofi_tx_init(ofi_module_t *mod);
void ofi_tx_fini(ofi_module_t *mod);
int ofi_rx_init(ofi_module_t *mod);
void ofi_rx_fini(ofi_module_t *mod);

/* ofi_rdma.c */
int ofi_put(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des);
int ofi_get(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des);
/* ferry_btl_ops.target_resolve, and the atomics' resolve hook: a peer's key
 * against our own registrations. */
int ofi_target_resolve(ferry_btl_module_t *btl, const uint8_t *keybytes, uint64_t addr,
                       size_t len, uint32_t need, void **ptr_out);
/* Posts a queued or new put/get: FERRY_OK, FERRY_ERR_NO_RESOURCE (try
 * later) or a failure (the fragment is then completed with it). */
int ofi_rdma_post(ofi_module_t *mod, ferry_btl_endpoint_t *ep, btl_frag_t *frag);
void ofi_rdma_done(ofi_module_t *mod, ofi_opctx_t *oc, int status);
/* Completes the put/get posted to ep with status without waiting for the
 * provider, which may never answer for a dead peer (shm); their contexts
 * stay posted until the provider returns them or the endpoint closes. */
void ofi_rdma_abandon(ofi_module_t *mod, ferry_btl_endpoint_t *ep, int status);
void ofi_rdma_hold(ofi_module_t *mod, ofi_opctx_t *oc);
int ofi_rdma_release_held(ofi_module_t *mod, ferry_btl_endpoint_t *ep, uint64_t now);
int ofi_put_notify_inline(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *local,
                          size_t size, uint64_t raddr, const uint8_t *rkey, uint8_t tag,
                          const void *payload, size_t plen, uint32_t flags,
                          ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata);
/* A put with notification, or its answer, arrived in order from ep (body:
 * the message after its header). A malformed one fails ep. */
void ofi_putn_deliver(ofi_module_t *mod, ferry_btl_endpoint_t *ep, const ofi_hdr_t *h,
                      const unsigned char *body, size_t len);
/* Sends the answers owed to ep while the provider takes them: FERRY_OK
 * when none is left, FERRY_ERR_NO_RESOURCE, or the failure that failed
 * ep. */
int ofi_putn_send_owed(ofi_module_t *mod, ferry_btl_endpoint_t *ep);
/* Completes the tracked ones to ep with status (callbacks from the next
 * progress) and, unless ep is only deleted (still READY, the module not
 * closing), drops the answers owed to it. */
void ofi_putn_fail(ofi_module_t *mod, ferry_btl_endpoint_t *ep, int status);
/* A split put's write from src landed here (its completion data). */
void ofi_putn_landed_from(ofi_module_t *mod, fi_addr_t src, uint64_t data);
/* Runs the callbacks of those failed so far; returns how many. */
int ofi_putn_progress(ofi_module_t *mod);
/* Completes with FERRY_ERR_TIMEOUT the puts and gets, queued or posted,
 * whose deadline is before now; their peers become suspects. Returns how
 * many. */
int ofi_rdma_expire(ofi_module_t *mod, uint64_t now);

/* ofi_live.c */
/* Opens the pidfd of a peer on this host (add_procs). */
void ofi_live_watch(ofi_module_t *mod, ferry_btl_endpoint_t *ep);
void ofi_live_unwatch(ofi_module_t *mod, ferry_btl_endpoint_t *ep);
/* From progress, at most every FERRY_OFI_PROBE_INTERVAL: dead processes,
 * deadlines, probes, holes in what peers sent. Returns events handled. */
int ofi_live_check(ofi_module_t *mod, uint64_t now);

/* ofi_wedge.c: around every libfabric call that may spin on a lock in
 * shared memory. A plain load and store: one thread calls the module. */
static inline void ofi_call_enter(ofi_module_t *mod)
{
    uint64_t c = atomic_load_explicit(&mod->wedge.calls, memory_order_relaxed);
    atomic_store_explicit(&mod->wedge.calls, c + 1, memory_order_relaxed);
}

static inline void ofi_call_leave(ofi_module_t *mod)
{
    uint64_t c = atomic_load_explicit(&mod->wedge.calls, memory_order_relaxed);
    atomic_store_explicit(&mod->wedge.calls, c + 1, memory_order_relaxed);
}

void ofi_wedge_init(ofi_module_t *mod);
/* Watches a peer on this host for as long as the module lives, and starts
 * the watchdog with the first. */
void ofi_wedge_watch(ofi_module_t *mod, const ferry_btl_endpoint_t *ep);
void ofi_wedge_fini(ofi_module_t *mod);

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
