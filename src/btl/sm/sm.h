/*
 * The sm transport: shared memory between processes of one host.
 *
 * Each process creates one segment (/dev/shm/ferry-JOBID-RANK, mode 0600).
 * It holds a header, a registration table that peers read to check remote
 * accesses, and one channel per possible sender. A channel is a
 * single-producer single-consumer ring: the sender copies a message into the
 * ring and writes its 8-byte header last, with release ordering; the
 * receiver polls the header of its next slot with acquire ordering (the
 * seed's eager RDMA, done for shared memory). Headers carry the lap of the
 * ring they were written in, and where the next header will go lies a
 * payload word of an earlier lap, the sender zeroes it before it publishes
 * a header, so a stale word is never taken for a header.
 *
 * Flow control is the seed's tokens and credits in byte form: the sender
 * owns the write position and may use the ring up to the receiver's tail,
 * which the receiver publishes in batches (every ring/8 bytes, the seed's
 * sr_win). A sender out of credits queues its fragments on the endpoint;
 * progress drains them in order.
 *
 * Memory per local peer: one ring (FERRY_SM_RING_SIZE, default 256 KiB) in
 * each direction, touched only once the pair talks; ferry_info shows it.
 */
#ifndef BTL_SM_H
#define BTL_SM_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "btl/base.h"
#include "btl/base_atomic.h"
#include "btl/frag.h"
#include "mem/itree.h"
#include "mem/monitor.h"
#include "util/list.h"
#include "util/pool.h"

#define SM_MAGIC 0x316d737972726566ull /* "ferrysm1" */
#define SM_VERSION 6
#define SM_LINE 64
/* Messages start on this boundary in the ring. */
#define SM_ALIGN 16
#define SM_HDR_SIZE 8
/* Longest segment name, with its leading '/' and its NUL. */
#define SM_NAME_MAX 320

/* Message types in a ring header. */
enum {
    SM_T_DATA = 1,     /* an active message: tag, payload */
    SM_T_SKIP = 2,     /* the rest of the lap is empty: go to the ring's start */
    SM_T_PUT = 3,      /* put through the ring: sm_put_hdr_t, then data */
    SM_T_GET_REQ = 4,  /* get through the ring: sm_get_req_t */
    SM_T_GET_RESP = 5, /* data answering a get: sm_get_resp_t, then data */
    SM_T_AMO_REQ = 6,  /* an atomic for the target to execute: sm_amo_req_t */
    SM_T_AMO_ANSWER = 7, /* its answer: sm_amo_answer_t */
    SM_T_PUTN = 8,       /* a put, then an active message on the header's tag:
                            sm_putn_hdr_t, the message's payload, the data */
    SM_T_ASSIST = 9      /* a large cross-memory put or get the receiver may help
                            copy: sm_assist_req_t */
};

/* A cross-memory put or get of FERRY_SM_CMA_ASSIST bytes or more is copied
 * by both ends at once, in chunks of this many bytes that each end claims
 * in turn (sm_rdma.c). */
#define SM_ASSIST_CHUNK (64u * 1024u)
/* Chunks one request may have: bounds the receiver's work per message. */
#define SM_ASSIST_CHUNKS_MAX (1u << 16)

/* Shared layout. Fields written once before the segment is published need
 * no atomics; the rest are marked. Every process of the user can write
 * anywhere in it, so neither its owner nor a peer trusts what it holds:
 * each reads a field once into its own memory, checks it there and uses
 * only the copy. */
typedef struct sm_seg_hdr {
    uint64_t magic;
    uint32_t version;
    int32_t rank;
    int32_t pid;
    uint32_t nchan;       /* channels: one per rank of the job */
    uint64_t ring_size;   /* bytes of each ring */
    uint64_t chan_off;    /* offset of channel 0 */
    uint64_t chan_stride; /* bytes from one channel to the next */
    uint64_t reg_off;     /* offset of the registration table */
    uint32_t reg_slots;
    /* Ring gets each peer may have outstanding here (FERRY_SM_GET_SLOTS of
     * the owner): what a peer sends beyond it waits in its ring. */
    uint32_t get_slots;
    uint64_t seg_size;
    /* The segment's name (without the leading '/') and the length of its
     * job part ("ferry-JOBID"), for the sweep of crashed jobs' leftovers. */
    uint32_t job_len;
    char name[SM_NAME_MAX];
    /* Bumped by a sender after it marks its channel connected, so the owner
     * finds new senders by reading one line. */
    _Alignas(SM_LINE) _Atomic uint64_t connect_seq;
    /* Set by the owner when it finalizes: its exit is then no failure. */
    _Atomic uint32_t closing;
} sm_seg_hdr_t;

/* One registration of the owner's memory, read by peers. gen is odd while
 * the owner rewrites the entry (a sequence lock); 0 means never used. */
typedef struct sm_reg_entry {
    _Atomic uint32_t gen;
    uint32_t access;
    uint64_t base;
    uint64_t len;
    /* Memory from sm's allocator lives in a shared heap object a peer can map
     * and copy into directly: its id (0: ordinary memory), the entry's offset
     * in it and its size. */
    uint32_t heap_id;
    uint32_t reserved;
    uint64_t heap_off;
    uint64_t heap_len;
} sm_reg_entry_t;

/* A consistent copy of an entry, read under its sequence lock. */
typedef struct sm_reg_view {
    ferry_btl_reg_t reg;
    uint32_t heap_id;
    uint64_t heap_off;
    uint64_t heap_len;
} sm_reg_view_t;

/* A shared heap object of ours (ferry_mem_alloc). */
typedef struct sm_heap {
    uint32_t id;
    unsigned char *base;
    size_t len;
    ferry_btl_reg_t *reg;
} sm_heap_t;

/* A peer's heap object mapped here. */
typedef struct sm_heap_map {
    uint32_t id;
    unsigned char *base;
    size_t len;
} sm_heap_map_t;

#define SM_HEAP_MAPS 16
/* Heap objects start on a page of at least this size, so an entry's offset
 * in its heap and its address agree below it (sm_check_peer_key). */
#define SM_HEAP_PAGE 4096u

/* How a peer's heap objects are mapped here (sm_rdma.c): map gives len bytes
 * of the object id of ep's peer (NULL when it cannot: no such object, or a
 * shorter one), unmap lets a mapping go. shm_open and mmap; the initiator's
 * fuzz harness (tests/fuzz/fuzz_sm_init.c) puts plain buffers in their
 * place, and nothing else changes it. */
typedef struct sm_heap_mapper {
    unsigned char *(*map)(const ferry_btl_endpoint_t *ep, uint32_t id, size_t len);
    void (*unmap)(unsigned char *base, size_t len);
} sm_heap_mapper_t;
extern sm_heap_mapper_t sm_heap_mapper;

/* The channel from one sender, in the receiver's segment. */
typedef struct sm_chan {
    _Alignas(SM_LINE) _Atomic uint64_t tail; /* bytes consumed: written by the receiver */
    /* Untracked puts with notification the receiver refused (written by
     * it, before it handles the next message): the sender's flush learns
     * of them. */
    _Atomic uint64_t putn_refused;
    /* The copy the sender asked the receiver to help with (SM_T_ASSIST):
     * claim is the job's number << 32 | the next chunk to take, done the
     * job's number << 32 | the chunks the receiver finished, failed the
     * number of a job one of whose chunks the receiver could not copy.
     * Written by both. */
    _Alignas(SM_LINE) _Atomic uint64_t assist_claim;
    _Atomic uint64_t assist_done;
    _Atomic uint32_t assist_failed;
    _Alignas(SM_LINE) _Atomic uint32_t connected; /* written by the sender */
    int32_t sender_pid;
    _Atomic uint32_t closed; /* the sender finalized: its exit is no failure */
    _Alignas(SM_LINE) unsigned char ring[];
} sm_chan_t;

/* What a process publishes in the modex under "btl.sm". */
typedef struct sm_addr {
    char name[SM_NAME_MAX];
    uint64_t seg_size;
    int32_t pid;
    uint32_t version;
} sm_addr_t;

/* A peer's "btl.sm" value (len bytes from the modex) into *addr:
 * FERRY_ERR_PROTO unless it is one sm_addr_t of this version naming a ferry
 * segment ("/ferry-...", NUL-terminated, no other '/'), a live-looking pid
 * and a size that holds a segment header. */
int sm_addr_decode(const void *val, size_t len, sm_addr_t *addr);

/* Key of a registration as peers see it. slot and gen name the table entry
 * (gen changes with every registration of the slot); nonce is drawn from
 * the kernel's random source for each registration and lives only in the
 * owner's private memory and in the keys it hands out, so a key cannot be
 * made up from the table or from an earlier key. */
typedef struct sm_key {
    uint32_t slot;
    uint32_t gen;
    uint64_t nonce;
} sm_key_t;

/* A chunk of a put through the ring. Chunks of one put follow each other
 * among puts (other messages may come between); the last has SM_PUT_LAST,
 * and the target writes the put's outcome into its status before its tail
 * passes it, which is where the initiator reads it on completion. */
#define SM_PUT_LAST 1u
typedef struct sm_put_hdr {
    uint64_t raddr;
    sm_key_t key;
    uint32_t flags;
    int32_t status; /* written by the target on the last chunk: 0 or FERRY_ERR_ACCESS */
} sm_put_hdr_t;

/* The header of a put with notification (put_notify_inline): the put's
 * target and key, the notification's length (its tag is the ring
 * header's), and the status the target writes as for a ring put. */
typedef struct sm_putn_hdr {
    uint64_t raddr;
    sm_key_t key;
    uint16_t plen;
    uint16_t flags; /* SM_PUTN_TELL */
    int32_t status;
} sm_putn_hdr_t;

/* An untracked one: a refusal is counted in the channel's putn_refused. */
#define SM_PUTN_TELL 0x1u

/* A put sm_put_inline wrote into the ring whole, without a descriptor:
 * on its endpoint's iputs until the tail passes end_pos, then on the
 * module's iputs_done until progress runs its callback; then back to the
 * module's pool. A get
 * from sm_get_inline: on igets until its data has come. */
typedef struct sm_iput {
    util_list_item_t link;
    uint64_t end_pos;    /* put: the head after it */
    uint64_t status_off; /* put: its header's status word in the ring */
    uint64_t cookie;     /* get: its request's */
    size_t size, done;   /* get: bytes asked for, arrived */
    int status;
    /* Out of its endpoint's count of operations in flight already (failed
     * with it: the endpoint may be freed before the callback runs). */
    bool uncounted;
    ferry_btl_endpoint_t *ep;
    void *local; /* a put's source (not written), a get's destination */
    ferry_btl_rdma_cb_t cb;
    void *cbctx, *cbdata;
} sm_iput_t;

typedef struct sm_get_req {
    uint64_t raddr;
    uint64_t len;
    sm_key_t key;
    uint64_t cookie; /* names the get at the initiator */
} sm_get_req_t;

/* SM_T_ASSIST: the sender copies [addr, addr + len) of its memory
 * (laddr) and the receiver's (raddr, under key) by cross-memory attach;
 * the receiver may take chunks of it too, claimed through its channel's
 * assist_claim while that word names the job. */
typedef struct sm_assist_req {
    uint64_t raddr;
    uint64_t laddr;
    uint64_t len;
    uint32_t job;   /* not 0 */
    uint32_t chunk; /* bytes of each chunk (the last may be shorter) */
    sm_key_t key;
    uint32_t put;   /* 1: from the sender's memory into the receiver's; 0: a get */
    uint32_t reserved; /* 0 */
} sm_assist_req_t;

typedef struct sm_get_resp {
    uint64_t cookie;
    uint64_t offset;
    int32_t status;
    uint32_t reserved;
} sm_get_resp_t;

/* The generic atomic path's messages (btl_amo_msg_t, src/btl/base_atomic.h)
 * as the ring carries them: only what each kind needs and sm's own key, so
 * that a request fills 64 bytes of the ring with its header and an answer
 * 32 (the full message takes 96 each way). The receiver turns them back
 * into btl_amo_msg_t, whose checks all still apply. */
typedef struct sm_amo_req {
    uint16_t op;
    uint16_t flags; /* btl_amo_msg_t's, all below bit 16 */
    uint32_t reserved; /* 0 */
    uint64_t cookie;
    uint64_t raddr;
    uint64_t operand;
    uint64_t compare;
    sm_key_t key;
} sm_amo_req_t;

typedef struct sm_amo_answer {
    int32_t status;
    uint32_t reserved; /* 0 */
    uint64_t cookie;
    uint64_t operand;
} sm_amo_answer_t;

/* Operation codes in btl_frag_t.op. */
enum { SM_OP_SEND, SM_OP_PUT, SM_OP_GET };

typedef struct sm_module sm_module_t;
typedef struct sm_reg sm_reg_t;

/* CLOSED: the peer finalized and exited; like FAILED, nothing more goes to
 * it, but nobody is told of a failure. */
typedef enum { SM_EP_NEW, SM_EP_CONNECTED, SM_EP_FAILED, SM_EP_CLOSED } sm_ep_state_t;

/* A get answered through the ring, on the target: one of the
 * FERRY_SM_GET_SLOTS an endpoint holds, never allocated per request. */
typedef struct sm_get_job {
    sm_get_req_t req;
    uint64_t sent;
    bool refused; /* the next answer says FERRY_ERR_ACCESS and ends the job */
} sm_get_job_t;

struct ferry_btl_endpoint {
    sm_module_t *mod;
    int rank;
    sm_ep_state_t state;
    /* Sending: the peer's segment and our channel in it. */
    unsigned char *peer_base;
    size_t peer_size;
    sm_seg_hdr_t *peer_hdr;
    sm_chan_t *out;
    /* What we use of the peer's header, copied once and checked at connect
     * (the header itself may change under us). */
    uint64_t peer_reg_off;
    uint32_t peer_reg_slots;
    uint32_t peer_get_slots;
    char peer_name[SM_NAME_MAX];
    uint64_t head;        /* bytes written into out */
    uint64_t cached_tail; /* last tail read from out */
    bool prefetch_write;  /* the module's, beside the head it goes with */
    /* Inline sends since a message from the peer last came in: past one,
     * the sender is streaming and asks for the ring's lines ahead. */
    uint32_t sends_unanswered;
    /* One bit per slot of out: set where the word in memory is a header (of
     * any lap, or zero), clear where it is payload. Only a payload word can
     * pass for a header of the current lap, so only such a place is zeroed
     * before a header is published after it. */
    uint64_t *hdr_bits;
    util_list_t queue;    /* fragments waiting for credits, in order */
    util_list_t ring_puts; /* puts written, waiting for the peer to consume them */
    util_list_t iputs;     /* sm_iput_t: the same, from sm_put_inline */
    util_list_t igets;     /* sm_iput_t: gets from sm_get_inline waiting for data */
    util_list_t gets;      /* ring gets waiting for their data */
    uint32_t gets_out;     /* how many: at most peer_get_slots */
    /* Gets this process answers for the peer, oldest first, in a ring of
     * FERRY_SM_GET_SLOTS (allocated with the first request). */
    sm_get_job_t *jobs;
    uint32_t job_head, njobs;
    /* Receiving: the peer's channel in our segment. */
    sm_chan_t *in;
    uint64_t rpos;
    uint64_t published_tail;
    /* The lap headers at rpos carry, for positions from rlap_start to the
     * end of that lap (so that polling computes it once a lap). */
    uint64_t rlap_start;
    uint16_t rlap;
    bool put_refused; /* a chunk of the put being received was refused */
    bool polled; /* in the module's poll list */
    bool sending; /* in the module's sending list */
    bool deleted; /* del_procs ran: refuse new work until added again */
    util_list_item_t sending_link;
    /* The put or get whose copy the peer is helping with (sm_rdma.c), its
     * job's number and the chunks the peer took; frag NULL: none. */
    struct {
        btl_frag_t *frag;
        uint32_t job;
        uint32_t theirs;
        int status; /* of our own pieces */
        bool put;
    } assist;
    uint32_t assist_jobs; /* jobs numbered so far */
    bool cma_worked;      /* a plain cross-memory copy to the peer succeeded */
    bool assist_refused;  /* our cross-memory copy into the peer failed: help no more */
    /* Failure detection. */
    pid_t pid;
    int pidfd;
    size_t rdma_inflight;
    /* Untracked puts with notification sent (put_notify_inline): whom a
     * refusal is told to (NULL: none sent yet), and out->putn_refused as
     * last seen. */
    ferry_btl_rdma_cb_t putn_cb;
    void *putn_cbctx;
    uint64_t putn_seen;
    /* The peer's heaps we mapped, most recent last. */
    sm_heap_map_t heaps[SM_HEAP_MAPS];
    int nheaps;
    /* Atomics on the peer's ordinary memory, executed by it (and its
     * atomics we execute): the generic path's state. */
    btl_amo_ep_t amo;
    /* The registration of the peer's that a direct put or get or an atomic
     * resolved last (sm_rdma.c, heap_resolve): its key, what the table said
     * of it and where it lies in our mapping, or that it is no heap (there
     * NULL: the peer does the work). Valid while the table entry keeps the
     * key's generation (one load) and the mapping stays (heap_map and
     * sm_ep_unmap_heaps clear it). */
    struct {
        sm_key_t key;
        uint64_t base, len;
        uint32_t access;
        bool valid;
        unsigned char *there; /* our address of base; NULL: not a heap */
    } hcache;
    /* del_procs forgot the gets in flight, cookies up to this one: their
     * late answers are dropped (0: none forgotten). Cold: at the end, out
     * of the lines the message paths use. */
    uint64_t forgot_cookie;
};

/* A registration of ours. What peers may do with it is decided from this
 * private copy only, never from the shared table. */
/* The slot of a registration with local rights only: peers never reach
 * it, so it takes no entry of the shared table (a peer's key for it would
 * name no slot). */
#define SM_SLOT_LOCAL UINT32_MAX

struct sm_reg {
    ferry_btl_reg_t base;
    uint32_t magic;
    uint32_t slot; /* SM_SLOT_LOCAL: local rights only, on local_regs */
    util_list_item_t local_link;
    uint32_t gen;
    uint64_t nonce;
    /* Watched by the unmap monitor (watch is not NULL): node is in the
     * module's tree of watched ranges, and revoked is set (by the monitor
     * thread, under the monitor lock) once the memory is unmapped or
     * moved. Atomic: a target resolving a key for a copy it makes itself
     * reads it without the lock. */
    mem_monitor_watch_t *watch;
    atomic_bool revoked;
    mem_itree_node_t node;
};

/* FERRY_SM_RNDV_PIPE_MAX's default: the pipe rendezvous measured slower
 * than get at every size (docs/msg.md). */
#define SM_RNDV_PIPE_MAX_DEFAULT 0
/* FERRY_SM_MSG_EAGER_MAX's default: tagged messages larger than this go by
 * rendezvous (a get by cross-memory attach), measured faster from there on
 * than a copy through the ring and one out of it (docs/msg.md). */
#define SM_MSG_EAGER_MAX_DEFAULT (12u * 1024u)
/* FERRY_SM_CMA_ASSIST's default (docs/msg.md). */
#define SM_CMA_ASSIST_DEFAULT (128u * 1024u)

typedef struct sm_params {
    size_t ring_size;
    size_t eager_limit;
    size_t max_send_size;
    size_t cma_threshold;
    size_t cma_lone;
    size_t cma_assist;
    size_t rndv_pipe_max;
    size_t msg_eager_max;
    bool cma;
    long long fail_timeout_ms;
    size_t reg_slots;
    size_t free_list_num, free_list_max, free_list_inc;
    long long max_eager_rdma_peers;
    size_t get_slots;
    bool copy_checked;
    bool prefetch_write;
    size_t atomic_slots;
} sm_params_t;

struct sm_module {
    ferry_btl_module_t super;
    sm_params_t p;
    /* Our segment, and our own layout kept apart from the copy in its
     * header (which peers can overwrite). */
    char seg_name[SM_NAME_MAX];
    unsigned char *seg;
    size_t seg_size;
    sm_seg_hdr_t *hdr;
    uint64_t chan_off, chan_stride;
    int seg_fd; /* kept open: its lock says we are alive (sm_sweep.c) */
    sm_reg_entry_t *reg_table;
    sm_reg_t **regs;       /* local objects by slot */
    util_list_t local_regs; /* sm_reg_t with local rights only (no slot) */
    uint64_t seen_connect_seq;
    /* Peers. */
    int nranks;
    ferry_btl_endpoint_t **eps; /* by rank */
    ferry_btl_endpoint_t **poll; /* endpoints we receive from, hottest first */
    int npoll;
    util_list_t sending;   /* endpoints with queued work */
    util_list_t completed; /* fragments whose completion is due */
    util_list_t iputs_done; /* sm_iput_t whose callback is due */
    util_pool_t iops;        /* the sm_iput_t records */
    btl_frags_t frags;
    btl_amo_module_t amo; /* atomics the target executes (ordinary memory) */
    bool cma_ok;
    /* Pieces of cross-memory copies (SM_T_ASSIST): taken here for peers
     * that asked, and taken by peers for ours (logged at finalize). */
    uint64_t assist_given, assist_received;
    uint64_t next_cookie;
    sm_heap_t *heaps; /* ours, from mem_alloc */
    int nheaps;
    uint32_t next_heap_id;
    /* Target-side copies for peers (sm_reg.c). */
    int mon_state; /* 0: not tried, 1: attached to the unmap monitor, -1: unavailable */
    mem_monitor_client_t mon_client;
    mem_itree_t watched; /* registrations the monitor watches; under the monitor lock */
    bool self_cma; /* process_vm_readv/writev on ourselves works */
    /* The sender asks for the ring's next line ahead of writing it
     * (FERRY_SM_PREFETCH_WRITE, and the CPU has the instruction). */
    bool prefetch_write;
    pid_t self_pid;
    btl_nonces_t nonces; /* random bits for keys, drawn in batches */
    /* Progress calls (the periodic failure checks count them), and how many
     * peers each polls (sm_max_eager_rdma_peers; the rest every eighth). */
    uint32_t progress_calls;
    int hot_peers;
    uint64_t next_check_ns;
};

static inline uint64_t sm_align(uint64_t n)
{
    return (n + SM_ALIGN - 1) & ~(uint64_t)(SM_ALIGN - 1);
}

/* The ring bytes a message of len payload bytes takes at ring offset off:
 * its header and payload in SM_ALIGN slots, and, when that is more than
 * half a cache line, up to the next line's start, so that in a stream of
 * such messages (a 40-byte put with notification, an atomic's request) each
 * lies in as few lines as it can and the reader waits for one line where it
 * would wait for two. Both ends compute it, from the position and the
 * length in the header. */
static inline uint64_t sm_span(uint64_t off, uint64_t len)
{
    uint64_t size = sm_align(SM_HDR_SIZE + len);
    if (size <= SM_LINE / 2)
        return size;
    return ((off + size + SM_LINE - 1) & ~(uint64_t)(SM_LINE - 1)) - off;
}

static inline uint64_t sm_hdr_pack(uint32_t len, uint8_t tag, uint8_t type, uint16_t lap)
{
    return (uint64_t)len | (uint64_t)tag << 32 | (uint64_t)type << 40 | (uint64_t)lap << 48;
}

/* The lap number written into headers at ring position pos: never 0, so a
 * zeroed ring holds no message. */
static inline uint16_t sm_lap(uint64_t pos, uint64_t ring_size)
{
    /* ring_size is a power of two (checked when the parameters are read):
     * a shift, where a division would cost tens of cycles per message. */
    return (uint16_t)((pos >> __builtin_ctzll(ring_size)) % 65535u + 1u);
}

/* The channel from rank in our own segment, from our private layout. */
static inline sm_chan_t *sm_chan_of(const sm_module_t *mod, int rank)
{
    return (sm_chan_t *)(mod->seg + mod->chan_off + (uint64_t)rank * mod->chan_stride);
}

/* sm_endpoint.c */
int sm_ep_connect(sm_module_t *mod, ferry_btl_endpoint_t *ep);
void sm_ep_fail(sm_module_t *mod, ferry_btl_endpoint_t *ep, const char *why);
void sm_ep_release(sm_module_t *mod, ferry_btl_endpoint_t *ep);
void sm_announce_close(sm_module_t *mod);
int sm_check_peers(sm_module_t *mod);
void sm_poll_add(sm_module_t *mod, ferry_btl_endpoint_t *ep);
int sm_scan_new_senders(sm_module_t *mod);

/* sm_ring.c */
static inline _Atomic uint64_t *sm_ring_hdr_at(unsigned char *ring, uint64_t off)
{
    return (_Atomic uint64_t *)(void *)(ring + off);
}

/* Whether ring slot slot holds a header (of this lap or an earlier one), as
 * far as this sender's bitmap knows: then it can never pass for a header of
 * the lap being written. */
static inline bool sm_ring_slot_is_hdr(const uint64_t *bits, uint64_t slot)
{
    return (bits[slot / 64] >> (slot % 64)) & 1;
}

/* The cases sm_ring_reserve does not take inline: the end of a lap (a skip
 * to the ring's start) and credits to be read again. */
bool sm_ring_reserve_slow(ferry_btl_endpoint_t *ep, size_t len, unsigned char **slot_out,
                          uint64_t *pos_out);

/* Whether size ring bytes at the head's offset off fit before the lap's
 * end within the credits cached: one more slot than the message, because
 * the commit zeroes the next header's place. */
static inline bool sm_ring_room(const ferry_btl_endpoint_t *ep, uint64_t ring, uint64_t off,
                                uint64_t size)
{
    return off + size <= ring && ep->head + size + SM_ALIGN - ep->cached_tail <= ring;
}

/* A hint that this core is about to write the cache line at p: the line
 * is fetched for ownership now (x86's PREFETCHW), not when the store
 * reaches it. No effect on what memory holds. */
static inline void sm_prefetch_write(const void *p)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("prefetchw (%0)" : : "r"(p));
#else
    __builtin_prefetch(p, 1, 3);
#endif
}

/* Takes size ring bytes at the head's offset off (sm_ring_room said yes),
 * for an inline send. In a stream (a second send with nothing from the
 * peer in between), a message that enters a new cache line has the line
 * after it fetched for ownership: the reader pulled it to its own core a
 * lap ago, and without the hint the sender's stores into it would wait for
 * that transfer one line at a time. Not in a ping-pong, where the fetch
 * would compete with the line the reader waits for (src/btl/sm/README.md). */
static inline void sm_ring_take(ferry_btl_endpoint_t *ep, uint64_t ring, uint64_t off,
                                uint64_t size)
{
    uint64_t last = off + size - 1;
    ep->head += size;
    if (ep->prefetch_write && ++ep->sends_unanswered > 1 &&
        ((off & (SM_LINE - 1)) == 0 || (off ^ last) >= SM_LINE))
        sm_prefetch_write(ep->out->ring + (((last | (SM_LINE - 1)) + 1) & (ring - 1)));
}

/* Reserves a slot for len payload bytes after the header; false when out of
 * credits. *slot_out points at the payload. Publish with sm_ring_commit. */
static inline bool sm_ring_reserve(ferry_btl_endpoint_t *ep, size_t len, unsigned char **slot_out,
                                   uint64_t *pos_out)
{
    const uint64_t ring = ep->mod->p.ring_size;
    uint64_t off = ep->head & (ring - 1);
    const uint64_t size = sm_span(off, len);
    if (sm_ring_room(ep, ring, off, size)) {
        *slot_out = ep->out->ring + off + SM_HDR_SIZE;
        *pos_out = ep->head;
        ep->head += size;
        return true;
    }
    return sm_ring_reserve_slow(ep, len, slot_out, pos_out);
}

/* Clears the header bits of slots [from, to), a word at a time. */
static inline void sm_ring_bits_clear(uint64_t *bits, uint64_t from, uint64_t to)
{
    while (from < to) {
        uint64_t bit = from % 64, n = to - from < 64 - bit ? to - from : 64 - bit;
        uint64_t mask = n == 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1) << bit;
        bits[from / 64] &= ~mask;
        from += n;
    }
}

/* Publishes hdr, the header of the message of size ring bytes at ring
 * offset off (off and size as reserved): written last with release, it
 * makes the payload visible to the reader. The sender's own record of
 * where headers lie is brought up to date after the header is out, so the
 * reader waits for none of it. */
static inline void sm_ring_publish(ferry_btl_endpoint_t *ep, uint64_t ring, uint64_t off,
                                   uint64_t size, uint64_t hdr)
{
    unsigned char *base = ep->out->ring;
    uint64_t first = off / SM_ALIGN, end = first + size / SM_ALIGN;
    uint64_t *bits = ep->hdr_bits;

    /* A payload word of an earlier lap where the next header goes could pass
     * for a header by chance; zero it first, ordered before this header by
     * the release below. A header of an earlier lap never matches. (The
     * next slot is none of this message's: a message never fills the
     * ring, sm_ring_room.) */
    uint64_t next = end & (ring / SM_ALIGN - 1); /* the ring is a power of two */
    bool zero_next = !sm_ring_slot_is_hdr(bits, next);
    if (zero_next)
        atomic_store_explicit(sm_ring_hdr_at(base, next * SM_ALIGN), 0, memory_order_relaxed);
    atomic_store_explicit(sm_ring_hdr_at(base, off), hdr, memory_order_release);
    /* The payload now fills the slots after the header. */
    sm_ring_bits_clear(bits, first + 1, end);
    bits[first / 64] |= (uint64_t)1 << (first % 64);
    if (zero_next)
        bits[next / 64] |= (uint64_t)1 << (next % 64);
}

/* Publishes the message reserved at pos. */
static inline void sm_ring_commit(ferry_btl_endpoint_t *ep, uint64_t pos, uint32_t len,
                                  uint8_t tag, uint8_t type)
{
    const uint64_t ring = ep->mod->p.ring_size;
    uint64_t off = pos & (ring - 1);
    sm_ring_publish(ep, ring, off, sm_span(off, len),
                    sm_hdr_pack(len, tag, type, sm_lap(pos, ring)));
}

/* Whether sm_poll_channel has anything to do on ep: a header of the
 * current lap at the read position, or a new lap to start. One load of a
 * word the sender writes, so that an idle poll costs no call. */
/* Whether a put or get of len bytes to ep goes by cross-memory attach
 * rather than through the ring: from FERRY_SM_CMA_THRESHOLD up (the
 * bandwidth of many in flight), and from FERRY_SM_CMA_LONE up when nothing
 * else to ep is in flight or queued (the latency of one: a system call
 * inside the call, where the ring waits for the target to copy and answer).
 * Both cross-overs are measured (bench/sm_crossover.sh). */
static inline bool sm_cma_for(const sm_module_t *mod, const ferry_btl_endpoint_t *ep,
                              size_t len)
{
    if (!mod->cma_ok)
        return false;
    if (len >= mod->p.cma_threshold)
        return true;
    return mod->p.cma_lone > 0 && len >= mod->p.cma_lone && ep->rdma_inflight == 0 &&
           util_list_empty(&ep->queue);
}

static inline bool sm_channel_ready(const sm_module_t *mod, const ferry_btl_endpoint_t *ep)
{
    const uint64_t ring = mod->p.ring_size;
    if (!ep->polled)
        return false;
    if (ep->rpos - ep->rlap_start >= ring)
        return true;
    uint64_t h = atomic_load_explicit(sm_ring_hdr_at(ep->in->ring, ep->rpos & (ring - 1)),
                                      memory_order_acquire);
    return (uint16_t)(h >> 48) == ep->rlap;
}

/* Reads the peer's tail of our channel, checks it (failing the endpoint when
 * corrupt) and completes the ring puts it passed, before any of their space
 * can be written again. Returns the puts completed, or -1 when it failed. */
int sm_ring_refresh_tail(ferry_btl_endpoint_t *ep);
int sm_poll_channel(sm_module_t *mod, ferry_btl_endpoint_t *ep);
int sm_drain_queue(sm_module_t *mod, ferry_btl_endpoint_t *ep);
void sm_complete(sm_module_t *mod, btl_frag_t *frag, int status);
void sm_mark_sending(sm_module_t *mod, ferry_btl_endpoint_t *ep);

/* sm_reg.c */
int sm_register_mem(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *base, size_t len,
                    uint32_t access, ferry_btl_reg_t **reg_out);
int sm_deregister_mem(ferry_btl_module_t *btl, ferry_btl_reg_t *reg);
/* The generic atomics' resolve hook (base_atomic.h): a peer's key checked
 * against our own registration state as sm_target_copy does, with need for
 * the rights, and the memory found still mapped. */
int sm_target_resolve(ferry_btl_module_t *btl, const uint8_t *key, uint64_t addr, size_t len,
                      uint32_t need, void **ptr_out);

/* memcpy, inline for 8 to 32 bytes (a word's put or get, a message's
 * header, a small payload): a word at once, else two copies of fixed size
 * that overlap in the middle, writing those bytes twice with the same
 * value. */
static inline void sm_copy(void *to, const void *src, size_t n)
{
    unsigned char *dst = to;
    const unsigned char *s = src;
    if (n == 8) {
        memcpy(dst, s, 8);
    } else if (n > 8 && n <= 16) {
        memcpy(dst, s, 8);
        memcpy(dst + n - 8, s + n - 8, 8);
    } else if (n > 16 && n <= 32) {
        memcpy(dst, s, 16);
        memcpy(dst + n - 16, s + n - 16, 16);
    } else {
        memcpy(dst, s, n);
    }
}

/* Checks a peer's key against our own registration state (never the shared
 * table) and copies len bytes between our memory at addr and buf: into our
 * memory for a put (to_mem), out of it for a get. Every chunk of a ring
 * put or get goes through here at the moment of its copy. FERRY_OK, or
 * FERRY_ERR_ACCESS with nothing (or, for memory that vanished during the
 * copy, part) copied. */
/* The registration a peer's key names, if it is still the one the key was
 * made for and covers [addr, addr + len) with the rights needed. */
static inline const sm_reg_t *sm_target_reg_need(const sm_module_t *mod, const sm_key_t *key,
                                                 uint64_t addr, size_t len, uint32_t need)
{
    if (key->slot >= mod->p.reg_slots)
        return NULL;
    const sm_reg_t *reg = mod->regs[key->slot];
    if (reg == NULL || reg->gen != key->gen || reg->nonce != key->nonce ||
        btl_base_check_access(&reg->base, addr, len, need) != FERRY_OK)
        return NULL;
    return reg;
}

/* sm_target_copy's cases off its hot path: watched memory while the
 * monitor handles events, memory no monitor watches, nothing to copy. */
int sm_target_copy_slow(sm_module_t *mod, const sm_reg_t *reg, uint64_t addr, void *buf,
                        size_t len, bool to_mem);

static inline int sm_target_copy(sm_module_t *mod, const sm_key_t *key, uint64_t addr, void *buf,
                                 size_t len, bool to_mem)
{
    const sm_reg_t *reg = sm_target_reg_need(
        mod, key, addr, len, to_mem ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ);
    if (reg == NULL)
        return FERRY_ERR_ACCESS;
    /* Watched memory with the monitor settled: anything unmapped before
     * now is marked by the time of the load below (sm_target_copy_slow
     * takes the monitor's lock otherwise). */
    if (reg->watch == NULL || len == 0 || mod->p.copy_checked || !mem_monitor_settled())
        return sm_target_copy_slow(mod, reg, addr, buf, len, to_mem);
    if (atomic_load_explicit(&reg->revoked, memory_order_acquire))
        return FERRY_ERR_ACCESS;
    void *mem = (void *)(uintptr_t)addr;
    if (to_mem)
        sm_copy(mem, buf, len);
    else
        sm_copy(buf, mem, len);
    return FERRY_OK;
}
/* ferry_btl_ops.target_write: sm_target_copy into our memory. */
int sm_target_write(ferry_btl_module_t *btl, const uint8_t *key, uint64_t addr, const void *data,
                    size_t len);
/* The key, bounds and rights part of sm_target_copy alone (for sizing an
 * answer before the copy, which checks again). */
int sm_target_check(const sm_module_t *mod, const sm_key_t *key, uint64_t addr, size_t len,
                    bool to_mem);
/* Checks [addr, addr + len) against the entry a key names in a peer's
 * table of nslots, and copies the entry to *view (a sequence-locked read:
 * a consistent copy or a refusal). The nonce is not in the table: only the
 * owner checks it. */
int sm_check_peer_key(const sm_reg_entry_t *table, uint32_t nslots, const uint8_t *keybytes,
                      uint64_t addr, size_t len, uint32_t need, sm_reg_view_t *view);
/* Is the entry the key names still the one the key was made for? */
static inline bool sm_peer_key_live(const sm_reg_entry_t *table, uint32_t nslots,
                                    const uint8_t *keybytes)
{
    sm_key_t key;
    memcpy(&key, keybytes, sizeof(key));
    return key.slot < nslots &&
           atomic_load_explicit(&table[key.slot].gen, memory_order_acquire) == key.gen;
}
/* Detaches from the unmap monitor and frees every registration. */
void sm_regs_release(sm_module_t *mod);

/* sm_rdma.c */
int sm_put(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des);
int sm_put_notify_inline(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *local,
                         size_t size, uint64_t raddr, const uint8_t *rkey, uint8_t tag,
                         const void *payload, size_t plen, uint32_t flags,
                         ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata);
/* Refusals of ep's untracked puts with notification counted since the last
 * look: each reported to their callback. */
void sm_putn_refusals(ferry_btl_endpoint_t *ep);
/* A put with notification arrived (type SM_T_PUTN, tag from its ring
 * header): the data in if its key allows, the status for the initiator,
 * then tag's handler. false when the message is malformed (ep failed). */
bool sm_putn_handle(sm_module_t *mod, ferry_btl_endpoint_t *ep, uint8_t tag, unsigned char *msg,
                    uint32_t len);
int sm_put_inline(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *local,
                  size_t size, uint64_t raddr, const uint8_t *rkey, ferry_btl_rdma_cb_t cb,
                  void *cbctx, void *cbdata);
/* Runs the callbacks of the inline puts completed (sm_iput_t); returns how
 * many. */
int sm_iputs_run(sm_module_t *mod);
int sm_get_inline(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local, size_t size,
                  uint64_t raddr, const uint8_t *rkey, ferry_btl_rdma_cb_t cb, void *cbctx,
                  void *cbdata);
/* Frees the records (finalize, once every one has completed). */
void sm_iputs_fini(sm_module_t *mod);
int sm_get(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des);
int sm_mem_alloc(ferry_btl_module_t *btl, size_t len, uint32_t access, void **addr_out,
                 ferry_btl_reg_t **reg_out);
int sm_mem_free(ferry_btl_module_t *btl, ferry_btl_reg_t *reg);
void sm_heaps_release(sm_module_t *mod);
void sm_ep_unmap_heaps(ferry_btl_endpoint_t *ep);
/* Writes as much of a queued ring put or get request as credits allow;
 * returns true when the fragment has left the queue's head. */
bool sm_rdma_push(sm_module_t *mod, ferry_btl_endpoint_t *ep, btl_frag_t *frag);
/* A ring-path message arrived from ep; msg and len are the peer's (msg is
 * writable: a put's status goes back there). Returns false when the message
 * must wait in the ring (the peer is past its get budget): the channel is
 * not read further until a job slot frees. */
bool sm_rdma_handle(sm_module_t *mod, ferry_btl_endpoint_t *ep, uint8_t type, unsigned char *msg,
                    uint32_t len);
/* Completes the ring puts the peer's tail has passed, each with the status
 * the target left in its last chunk. */
int sm_rdma_puts_done(sm_module_t *mod, ferry_btl_endpoint_t *ep, uint64_t tail);
int sm_rdma_progress(sm_module_t *mod, ferry_btl_endpoint_t *ep);
bool sm_rdma_busy(const ferry_btl_endpoint_t *ep);
void sm_rdma_fail(sm_module_t *mod, ferry_btl_endpoint_t *ep, int status);
/* Frees what an endpoint holds for the ring path (its job slots). */
void sm_rdma_ep_fini(ferry_btl_endpoint_t *ep);
/* The atomics (sm_rdma.c): CPU atomics in the peer's mapping of heap memory
 * (and on our own memory), the target's through the ring otherwise. */
extern const btl_amo_hooks_t sm_amo_hooks;
int sm_atomic_op(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, uint64_t raddr,
                 const uint8_t *rkey, ferry_btl_atomic_op_t op, uint64_t operand, uint32_t flags,
                 ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata);
int sm_atomic_fop(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local, uint64_t raddr,
                  ferry_btl_reg_t *lreg, const uint8_t *rkey, ferry_btl_atomic_op_t op,
                  uint64_t operand, uint32_t flags, ferry_btl_rdma_cb_t cb, void *cbctx,
                  void *cbdata);
int sm_rdma_direct(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, bool put, void *local,
                   uint64_t raddr, const uint8_t *rkey, size_t size);
int sm_atomic_cswap(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                    uint64_t raddr, ferry_btl_reg_t *lreg, const uint8_t *rkey, uint64_t compare,
                    uint64_t value, uint32_t flags, ferry_btl_rdma_cb_t cb, void *cbctx,
                    void *cbdata);
int sm_atomic_direct(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *result,
                     uint64_t raddr, const uint8_t *rkey, ferry_btl_atomic_op_t op,
                     uint64_t operand, uint64_t compare, uint32_t flags);

/* sm_sweep.c */
/* Creates our segment file under name (O_EXCL), locked for our lifetime;
 * a file of that name left by a dead ferry process is removed first, a
 * live one's is never touched (FERRY_ERR_BUSY). Returns the descriptor. */
int sm_seg_create_file(const char *name, int *fd_out);
/* Removes the segments (and their heaps) of jobs whose processes are all
 * gone, as far as this user can tell; returns how many files went. */
int sm_sweep(rt_log_t *log);

#endif /* BTL_SM_H */
