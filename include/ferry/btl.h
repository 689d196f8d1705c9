/*
 * The ferry transport contract (byte transfer layer).
 *
 * A component (one per transport: self, sm, tcp, ofi) registers its parameters
 * and opens zero or more modules. A module moves bytes to the endpoints it
 * created in add_procs: active messages addressed by an 8-bit tag, and RDMA
 * put/get on registered memory. Its limits and capabilities are data
 * (ferry_btl_attr_t); the layer above chooses from them and never checks a
 * transport's name.
 *
 * Rules every transport keeps:
 * - Nothing blocks. Out of descriptors, alloc/prepare_src/sendi return
 *   FERRY_ERR_NO_RESOURCE; out of credits, send queues the fragment on the
 *   endpoint and progress drains it in order. Nothing accepted is dropped.
 * - Fragments from one module to one endpoint arrive in the order sent.
 * - Callbacks (receive, completion, error) run only from progress, flush,
 *   del_procs or finalize, never from inside the call that started the work.
 * - Bytes from a peer are untrusted; every length, tag, key and bound is
 *   checked before use.
 * - Remote memory is touched only after the remote address range has been
 *   checked against a registration of the target (key, bounds, access).
 */
#ifndef FERRY_BTL_H
#define FERRY_BTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/dt.h>
#include <ferry/ferry.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_btl_module ferry_btl_module_t;
typedef struct ferry_btl_endpoint ferry_btl_endpoint_t; /* defined by each transport */
typedef struct ferry_btl_desc ferry_btl_desc_t;
typedef struct ferry_btl_reg ferry_btl_reg_t;
struct ferry_bitmap;

/* Tags 0 .. FERRY_BTL_TAG_USER_MAX are for the layers above; the rest belong
 * to ferry (FERRY_BTL_TAG_FERRY_MIN .. FERRY_BTL_TAG_BTL_MIN-1 for the runtime,
 * FERRY_BTL_TAG_BTL_MIN .. 255 for transport control such as credits). */
#define FERRY_BTL_TAG_USER_MAX FERRY_AM_TAG_MAX
#define FERRY_BTL_TAG_FERRY_MIN (FERRY_AM_TAG_MAX + 1)
#define FERRY_BTL_TAG_BTL_MIN 240
#define FERRY_BTL_TAG_COUNT 256

/* Largest registration key a transport may put into a segment. */
#define FERRY_BTL_KEY_MAX 32

/*
 * Capability flags: the one table of them. Each X(NAME, bit, "name", "help")
 * defines the flag FERRY_BTL_FLAG_<NAME> as the value 1u << bit, with the
 * name ferry_info prints and a line of help, so a flag cannot be added
 * without a name.
 *
 * PUT_ORDERED: once put has accepted a descriptor (FERRY_OK), a message sent
 * afterwards on the same endpoint reaches its handler at the target only
 * after the put's data is written there (a put the target refuses is not
 * written, and the message is handled all the same). ferry_put_notify
 * sends its notification at once on such a transport, with no wait for the
 * put's completion.
 *
 * PEERS_READ: every peer this module reaches can read this process's memory
 * whatever ferry registers (sm, where the system lets it use cross-memory
 * attach: processes of one user, no ptrace restriction). A registration kept
 * open for such peers after the operation that needed it exposes nothing, so
 * ferry may keep a rendezvous's registration for the next message from the
 * same buffer (FERRY_AM_RNDV_KEEP). The module clears the flag once the
 * system refuses it cross-memory attach.
 *
 * NO_KEY_REVOKE is a limit, not a capability: a put/get through the key of a
 * registration the target has released is NOT refused with FERRY_ERR_ACCESS
 * (the fabric underneath does not check it, or checks it only by failing the
 * connection). Every other key, bound and right is still checked. Transports
 * without the flag refuse such accesses as the contract says.
 */
#define FERRY_BTL_FLAG_MAP(X)                                                              \
    X(SEND, 0, "send", "active messages")                                                 \
    X(SEND_INPLACE, 1, "send_inplace", "prepare_src may send from user memory")           \
    X(PUT, 2, "put", "one-sided put")                                                     \
    X(GET, 3, "get", "one-sided get")                                                     \
    X(ATOMIC_OPS, 4, "atomic_ops", "atomic_op and atomic_cswap (attr.atomic_flags says which)") \
    X(SENDI, 5, "sendi", "sendi can succeed (not the unsupported stub)")                  \
    X(MEM_ALLOC, 6, "mem_alloc", "mem_alloc gives memory peers reach faster")             \
    X(NO_KEY_REVOKE, 7, "no_key_revoke",                                                  \
      "a released registration's key is not refused (a limit)")                           \
    X(ATOMIC_FOPS, 8, "atomic_fops", "atomic_fop, fetching the old value")                \
    X(PUT_ORDERED, 9, "put_ordered",                                                      \
      "a put accepted on an endpoint is in place at the target before a message sent "   \
      "after it there is handled")                                                         \
    X(PEERS_READ, 10, "peers_read",                                                       \
      "peers on this path read this process's memory without a key (cross-memory "       \
      "attach): a registration left open gives them nothing new")

/* A register_mem access bit beside FERRY_ACCESS_*: atomics on the
 * registration are executed by its owner's CPU as it progresses, never
 * applied to the memory by a peer's CPU directly (sm's heap otherwise is).
 * A host whose own accesses to the memory are plain loads and stores made
 * while it does not progress needs it: Open MPI's osc/rdma does its own
 * window's accumulates and compare-and-swaps so, and counts on the others'
 * network atomics being executed by the target. sm honours it; tcp's
 * atomics are always the target's; ofi's are the provider's. */
#define FERRY_BTL_ACCESS_TARGET_ATOMICS (1u << 8)

#define FERRY_BTL_FLAG_ENUM_(name, bit, text, help) FERRY_BTL_FLAG_##name = 1u << (bit),
#define FERRY_BTL_FLAG_BIT_(name, bit, text, help) | (1u << (bit))
enum {
    FERRY_BTL_FLAG_MAP(FERRY_BTL_FLAG_ENUM_)
    /* Every flag the table defines. */
    FERRY_BTL_FLAGS_KNOWN = 0u FERRY_BTL_FLAG_MAP(FERRY_BTL_FLAG_BIT_)
};
#undef FERRY_BTL_FLAG_ENUM_
#undef FERRY_BTL_FLAG_BIT_

/* The name of one flag ("put"), or NULL for a value that is not exactly one
 * flag of the table. */
static inline const char *ferry_btl_flag_name(uint32_t flag)
{
#define FERRY_BTL_FLAG_NAME_(name, bit, text, help)                                        \
    if (flag == (1u << (bit)))                                                             \
        return text;
    FERRY_BTL_FLAG_MAP(FERRY_BTL_FLAG_NAME_)
#undef FERRY_BTL_FLAG_NAME_
    return NULL;
}

/* Its line of help, or NULL as for ferry_btl_flag_name. */
static inline const char *ferry_btl_flag_help(uint32_t flag)
{
#define FERRY_BTL_FLAG_HELP_(name, bit, text, help)                                        \
    if (flag == (1u << (bit)))                                                             \
        return help;
    FERRY_BTL_FLAG_MAP(FERRY_BTL_FLAG_HELP_)
#undef FERRY_BTL_FLAG_HELP_
    return NULL;
}

/*
 * Remote atomics (Open MPI's BTL atomics, value for value: an Open MPI
 * component maps its mca_btl_base_atomic_op_t, MCA_BTL_ATOMIC_FLAG_* and
 * MCA_BTL_ATOMIC_SUPPORTS_* onto these by a cast).
 *
 * An atomic works on a 64-bit integer, or a 32-bit one with
 * FERRY_BTL_ATOMIC_FLAG_32BIT, at a naturally aligned address inside a
 * registration of the target that carries FERRY_ACCESS_REMOTE_ATOMIC.
 * Operands and results are taken and written at that width (a 32-bit result
 * is 4 bytes at local). MIN and MAX compare as signed integers; LAND, LOR and
 * LXOR store 1 or 0. Every module's atomics are CPU atomics on the target's
 * memory (FERRY_BTL_ATOMIC_SUPPORTS_GLOB), so they are atomic with each other
 * across modules and with the target's own CPU atomics on that address.
 * Only completion orders: an atomic may take effect before a put, get or
 * atomic started earlier that has not completed (self and sm apply heap
 * atomics inside the call, while puts may wait in a queue).
 */
typedef enum {
    FERRY_BTL_ATOMIC_ADD = 0x0001,
    FERRY_BTL_ATOMIC_AND = 0x0011,
    FERRY_BTL_ATOMIC_OR = 0x0012,
    FERRY_BTL_ATOMIC_XOR = 0x0014,
    FERRY_BTL_ATOMIC_LAND = 0x0015,
    FERRY_BTL_ATOMIC_LOR = 0x0016,
    FERRY_BTL_ATOMIC_LXOR = 0x0017,
    FERRY_BTL_ATOMIC_SWAP = 0x001a,
    FERRY_BTL_ATOMIC_MIN = 0x0020,
    FERRY_BTL_ATOMIC_MAX = 0x0021
} ferry_btl_atomic_op_t;

/*
 * The CPU operation behind every target-side atomic: what a transport's
 * target (or a host doing atomics on its own memory, as an Open MPI
 * component must) applies to the integer, so that all of ferry's atomics
 * are the same CPU atomics.
 */

/* What an operation of one kind does to old; shared by both widths. */
static inline uint64_t ferry_btl_atomic_value(uint32_t op, uint64_t old, uint64_t operand, bool w32)
{
    switch (op) {
    case FERRY_BTL_ATOMIC_LAND:
        return (w32 ? (uint32_t)old != 0 : old != 0) && (w32 ? (uint32_t)operand != 0 : operand != 0);
    case FERRY_BTL_ATOMIC_LOR:
        return (w32 ? (uint32_t)old != 0 : old != 0) || (w32 ? (uint32_t)operand != 0 : operand != 0);
    case FERRY_BTL_ATOMIC_LXOR:
        return (w32 ? (uint32_t)old != 0 : old != 0) != (w32 ? (uint32_t)operand != 0 : operand != 0);
    case FERRY_BTL_ATOMIC_MIN:
        if (w32)
            return (int32_t)(uint32_t)operand < (int32_t)(uint32_t)old ? operand : old;
        return (int64_t)operand < (int64_t)old ? operand : old;
    default: /* FERRY_BTL_ATOMIC_MAX */
        if (w32)
            return (int32_t)(uint32_t)operand > (int32_t)(uint32_t)old ? operand : old;
        return (int64_t)operand > (int64_t)old ? operand : old;
    }
}

/* Applies op (or, with cswap, compare-and-swap of compare to operand) to the
 * naturally aligned integer at p, of 32 bits with w32, as one CPU atomic
 * (sequentially consistent); returns the value before. op has been checked
 * (one of ferry_btl_atomic_op_t, or 0 with cswap). */
static inline uint64_t ferry_btl_atomic_apply(void *p, bool w32, bool cswap, uint32_t op,
                                        uint64_t operand, uint64_t compare)
{
    if (w32) {
        uint32_t *q = p;
        uint32_t v = (uint32_t)operand;
        if (cswap) {
            uint32_t expect = (uint32_t)compare;
            __atomic_compare_exchange_n(q, &expect, v, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST);
            return expect;
        }
        switch (op) {
        case FERRY_BTL_ATOMIC_ADD:
            return __atomic_fetch_add(q, v, __ATOMIC_SEQ_CST);
        case FERRY_BTL_ATOMIC_AND:
            return __atomic_fetch_and(q, v, __ATOMIC_SEQ_CST);
        case FERRY_BTL_ATOMIC_OR:
            return __atomic_fetch_or(q, v, __ATOMIC_SEQ_CST);
        case FERRY_BTL_ATOMIC_XOR:
            return __atomic_fetch_xor(q, v, __ATOMIC_SEQ_CST);
        case FERRY_BTL_ATOMIC_SWAP:
            return __atomic_exchange_n(q, v, __ATOMIC_SEQ_CST);
        default: {
            /* No single instruction: a compare-and-swap loop. */
            uint32_t old = __atomic_load_n(q, __ATOMIC_RELAXED);
            while (!__atomic_compare_exchange_n(q, &old,
                                                (uint32_t)ferry_btl_atomic_value(op, old, v, true),
                                                true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
                ;
            return old;
        }
        }
    }
    uint64_t *q = p;
    if (cswap) {
        uint64_t expect = compare;
        __atomic_compare_exchange_n(q, &expect, operand, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST);
        return expect;
    }
    switch (op) {
    case FERRY_BTL_ATOMIC_ADD:
        return __atomic_fetch_add(q, operand, __ATOMIC_SEQ_CST);
    case FERRY_BTL_ATOMIC_AND:
        return __atomic_fetch_and(q, operand, __ATOMIC_SEQ_CST);
    case FERRY_BTL_ATOMIC_OR:
        return __atomic_fetch_or(q, operand, __ATOMIC_SEQ_CST);
    case FERRY_BTL_ATOMIC_XOR:
        return __atomic_fetch_xor(q, operand, __ATOMIC_SEQ_CST);
    case FERRY_BTL_ATOMIC_SWAP:
        return __atomic_exchange_n(q, operand, __ATOMIC_SEQ_CST);
    default: {
        uint64_t old = __atomic_load_n(q, __ATOMIC_RELAXED);
        while (!__atomic_compare_exchange_n(q, &old, ferry_btl_atomic_value(op, old, operand, false),
                                            true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
            ;
        return old;
    }
    }
}

/* Flags of put_notify_inline. */
enum {
    FERRY_BTL_PUTN_UNTRACKED = 0x1 /* no completion; cb only for a refusal */
};

/* Flags of one atomic operation. */
enum {
    FERRY_BTL_ATOMIC_FLAG_32BIT = 0x1, /* a 32-bit integer; else 64-bit */
    FERRY_BTL_ATOMIC_FLAG_CSWAP = 0x2  /* atomic_direct only: a compare-and-swap */
};

/*
 * What attr.atomic_flags may hold: the one table of them, as
 * FERRY_BTL_FLAG_MAP. X(NAME, value, "name", op) defines
 * FERRY_BTL_ATOMIC_SUPPORTS_<NAME> = value; op is the operation the bit
 * stands for (0 for the bits that name no single operation).
 */
#define FERRY_BTL_ATOMIC_SUPPORTS_MAP(X)                                                   \
    X(ADD, 0x00000001u, "add", FERRY_BTL_ATOMIC_ADD)                                       \
    X(AND, 0x00000200u, "and", FERRY_BTL_ATOMIC_AND)                                       \
    X(OR, 0x00000400u, "or", FERRY_BTL_ATOMIC_OR)                                          \
    X(XOR, 0x00000800u, "xor", FERRY_BTL_ATOMIC_XOR)                                       \
    X(LAND, 0x00001000u, "land", FERRY_BTL_ATOMIC_LAND)                                    \
    X(LOR, 0x00002000u, "lor", FERRY_BTL_ATOMIC_LOR)                                       \
    X(LXOR, 0x00004000u, "lxor", FERRY_BTL_ATOMIC_LXOR)                                    \
    X(SWAP, 0x00010000u, "swap", FERRY_BTL_ATOMIC_SWAP)                                    \
    X(MIN, 0x00100000u, "min", FERRY_BTL_ATOMIC_MIN)                                       \
    X(MAX, 0x00200000u, "max", FERRY_BTL_ATOMIC_MAX)                                       \
    X(32BIT, 0x01000000u, "32bit", 0)                                                      \
    X(CSWAP, 0x10000000u, "cswap", 0)                                                      \
    X(GLOB, 0x20000000u, "glob", 0)

#define FERRY_BTL_ATOMIC_SUPPORTS_ENUM_(name, value, text, op)                              \
    FERRY_BTL_ATOMIC_SUPPORTS_##name = (value),
#define FERRY_BTL_ATOMIC_SUPPORTS_BIT_(name, value, text, op) | (value)
enum {
    FERRY_BTL_ATOMIC_SUPPORTS_MAP(FERRY_BTL_ATOMIC_SUPPORTS_ENUM_)
    /* Every bit the table defines. */
    FERRY_BTL_ATOMIC_SUPPORTS_KNOWN =
        0u FERRY_BTL_ATOMIC_SUPPORTS_MAP(FERRY_BTL_ATOMIC_SUPPORTS_BIT_)
};
#undef FERRY_BTL_ATOMIC_SUPPORTS_ENUM_
#undef FERRY_BTL_ATOMIC_SUPPORTS_BIT_

/* The name of one bit of attr.atomic_flags ("add"), or NULL for a value that
 * is not exactly one bit of the table. */
static inline const char *ferry_btl_atomic_supports_name(uint32_t bit)
{
#define FERRY_BTL_ATOMIC_SUPPORTS_NAME_(name, value, text, op)                              \
    if (bit == (value))                                                                    \
        return text;
    FERRY_BTL_ATOMIC_SUPPORTS_MAP(FERRY_BTL_ATOMIC_SUPPORTS_NAME_)
#undef FERRY_BTL_ATOMIC_SUPPORTS_NAME_
    return NULL;
}

/* The bit of attr.atomic_flags that says op is supported, or 0 for a value
 * that is no operation of ferry_btl_atomic_op_t. */
static inline uint32_t ferry_btl_atomic_supports_bit(uint32_t op)
{
#define FERRY_BTL_ATOMIC_SUPPORTS_OP_(name, value, text, opv)                               \
    if ((opv) != 0 && op == (uint32_t)(opv))                                               \
        return (value);
    FERRY_BTL_ATOMIC_SUPPORTS_MAP(FERRY_BTL_ATOMIC_SUPPORTS_OP_)
#undef FERRY_BTL_ATOMIC_SUPPORTS_OP_
    return 0;
}

/* Limits and capabilities, as data. */
typedef struct ferry_btl_attr {
    const char *name;               /* transport name, e.g. "self" */
    size_t eager_limit;             /* largest fragment (reserve + payload) sent eagerly */
    size_t max_send_size;           /* largest fragment of one send */
    size_t rdma_pipeline_frag_size; /* size of each piece of a pipelined large transfer */
    size_t min_rdma_size;           /* below this, send is preferred to put/get */
    size_t max_rdma_size;           /* largest single put or get */
    uint32_t exclusivity;           /* higher wins when several reach a peer */
    uint32_t latency;               /* nominal half round trip, ns */
    uint32_t bandwidth;             /* nominal bandwidth, MB/s */
    uint32_t flags;                 /* FERRY_BTL_FLAG_* */
    size_t reg_handle_size;         /* bytes of key a registration needs (<= KEY_MAX) */
    size_t mem_per_peer;            /* bytes of memory each reachable peer costs */
    uint32_t atomic_flags;          /* FERRY_BTL_ATOMIC_SUPPORTS_*; 0 without atomics */
    /* Rendezvous of up to this many bytes is faster as a stream of sends
     * (both ends copying at once) than by put or get: FERRY_AM_RNDV=auto
     * takes the PIPE protocol there. 0: never. */
    size_t rndv_pipe_max;
    /* Tagged messages (ferry/msg.h) of up to this many bytes, header
     * included, go in one send; larger ones by rendezvous. A receive copies
     * an eager message out of the transport, so where a get is one copy
     * (sm's cross-memory attach) a rendezvous is faster well below the max
     * send size. 0: the max send size. */
    size_t msg_eager_max;
} ferry_btl_attr_t;

/* A piece of memory. Local segments hold a pointer (ferry_btl_seg_ptr);
 * remote segments hold the peer's address and the key of its registration. */
typedef struct ferry_btl_segment {
    uint64_t addr;
    size_t len;
    uint8_t key[FERRY_BTL_KEY_MAX];
} ferry_btl_segment_t;

static inline void *ferry_btl_seg_ptr(const ferry_btl_segment_t *seg)
{
    return (void *)(uintptr_t)seg->addr;
}

/* A registration of local memory with one module. key is what a peer puts in
 * a remote segment to address it. Allocated and owned by the transport. */
struct ferry_btl_reg {
    void *base;
    size_t len;
    uint32_t access; /* FERRY_ACCESS_* */
    uint8_t key[FERRY_BTL_KEY_MAX];
};

/* Completion of a send, put or get. status is FERRY_OK, or the error that
 * ended the operation (FERRY_ERR_UNREACH when the peer failed, FERRY_ERR_ACCESS
 * when the target refused the address range). */
typedef void (*ferry_btl_comp_cb_t)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                    ferry_btl_desc_t *des, int status);

/* Completion of an atomic (Open MPI's mca_btl_base_rdma_completion_fn_t):
 * complete at both ends, i.e. the result is at local (fetching atomics) and
 * the new value is visible at the target to later operations from any rank.
 * local and lreg are what the operation was started with (NULL for
 * atomic_op); cbctx and cbdata are the caller's. status as for
 * ferry_btl_comp_cb_t; with an error, local holds nothing to be used. */
typedef void (*ferry_btl_rdma_cb_t)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                    void *local, ferry_btl_reg_t *lreg, void *cbctx,
                                    void *cbdata, int status);

/* Returned by the atomics when the operation completed inside the call: the
 * result is already at local and no callback will run for it. */
#define FERRY_BTL_DONE 1

/* Descriptor flags. */
enum {
    /* The transport returns the descriptor to its pool after completion (after
     * the callback, if any). Without it the owner calls free. */
    FERRY_BTL_DES_OWNERSHIP = 1u << 0,
    /* Set by the transport from the moment it accepts a descriptor until its
     * completion callback has run; free refuses it meanwhile. */
    FERRY_BTL_DES_INFLIGHT = 1u << 1
};

/* A descriptor: the seed's base descriptor. For send and put, src is local
 * memory and dst (put only) the remote segment; for get, src is the remote
 * segment and dst local memory. Transports allocate descriptors; the layer
 * above fills the remote segment, flags, cbfunc and cbdata. A descriptor from
 * prepare_src always has room for one dst segment, and one from prepare_dst
 * room for one src segment: for put/get the caller fills that segment and
 * sets its count to 1. */
struct ferry_btl_desc {
    ferry_btl_segment_t *src;
    unsigned src_cnt;
    ferry_btl_segment_t *dst;
    unsigned dst_cnt;
    uint32_t flags;
    ferry_btl_comp_cb_t cbfunc; /* may be NULL */
    void *cbdata;
};

/* What an active-message handler sees. The segments are valid only until the
 * handler returns. */
typedef struct ferry_btl_recv_desc {
    ferry_btl_endpoint_t *ep; /* the endpoint add_procs gave for peer */
    int peer; /* rank of the sender */
    uint8_t tag;
    const ferry_btl_segment_t *segs;
    unsigned seg_cnt;
} ferry_btl_recv_desc_t;

typedef void (*ferry_btl_am_cb_t)(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd,
                                  void *cbdata);

/* Peer failure (peer >= 0) or fatal module error (peer -1). msg says what
 * happened, for the log. */
typedef void (*ferry_btl_error_cb_t)(ferry_btl_module_t *btl, int status, int peer,
                                     const char *msg, void *cbdata);

/* A process given to add_procs. */
typedef struct ferry_btl_proc {
    int rank;
    bool same_host; /* shares this host's memory and kernel */
} ferry_btl_proc_t;

/* prepare_src / prepare_dst flags. */
enum {
    /* The descriptor is for put/get: describe the user's memory in place
     * (contiguous data only), registering it if reg is NULL. */
    FERRY_BTL_PREP_RDMA = 1u << 8
};

typedef struct ferry_btl_ops {
    /* Creates (lazily connecting) endpoints for n processes; eps_out[i] is set
     * and bit i of reachable set for each one this module can reach, others
     * get NULL. Adding a process twice returns the same endpoint. */
    int (*add_procs)(ferry_btl_module_t *btl, size_t n, const ferry_btl_proc_t *procs,
                     ferry_btl_endpoint_t **eps_out, struct ferry_bitmap *reachable);

    /* Tears the endpoints down. Everything pending on them completes with
     * FERRY_ERR_UNREACH (seed: not done). Entries may be NULL. */
    int (*del_procs)(ferry_btl_module_t *btl, size_t n, ferry_btl_endpoint_t **eps);

    /* Sets the active-message handler of a tag (cb NULL clears it). Tags from
     * FERRY_BTL_TAG_BTL_MIN are refused with FERRY_ERR_INVALID. */
    int (*register_am)(ferry_btl_module_t *btl, uint8_t tag, ferry_btl_am_cb_t cb,
                       void *cbdata);

    /* Sets the error callback (seed: absent). */
    int (*register_error)(ferry_btl_module_t *btl, ferry_btl_error_cb_t cb, void *cbdata);

    /* Completes or cancels outstanding work, releases every resource and frees
     * the module. Safe on a half-built module. */
    int (*finalize)(ferry_btl_module_t *btl);

    /* A send descriptor with one src segment of size bytes, from the eager pool
     * when size <= eager_limit, else the max pool. size > max_send_size is
     * FERRY_ERR_INVALID; an exhausted pool FERRY_ERR_NO_RESOURCE. */
    int (*alloc)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, size_t size,
                 uint32_t flags, ferry_btl_desc_t **des_out);

    /* Returns a descriptor (from alloc, prepare_src or prepare_dst) that is not
     * in flight. Anything else is FERRY_ERR_INVALID. */
    int (*free)(ferry_btl_module_t *btl, ferry_btl_desc_t *des);

    /* Packs up to *size bytes from conv into a fragment after reserve header
     * bytes (src[0] covers reserve + packed bytes; the reserve is the caller's
     * to fill), truncating to what fits in max_send_size, and sets *size to the
     * bytes packed. With FERRY_BTL_PREP_RDMA (or contiguous data, no reserve,
     * and reg given or *size > max_send_size) src[0] describes the user's memory
     * in place instead; memory that reg does not cover is registered (through
     * the registration cache) with FERRY_ACCESS_LOCAL only, so that its key
     * reaches it from this process alone. */
    int (*prepare_src)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_reg_t *reg,
                       ferry_convertor_t *conv, size_t reserve, size_t *size, uint32_t flags,
                       ferry_btl_desc_t **des_out);

    /* A descriptor whose dst[0] describes contiguous receive memory at the
     * convertor's cursor, *size bytes, with its registration key (registering
     * it if reg is NULL, with FERRY_ACCESS_LOCAL only: for this process's own
     * get; memory a peer is to write into is registered with register_mem
     * and REMOTE_WRITE). */
    int (*prepare_dst)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_reg_t *reg,
                       ferry_convertor_t *conv, size_t reserve, size_t *size, uint32_t flags,
                       ferry_btl_desc_t **des_out);

    /* Sends src[0] under tag. Accepted (FERRY_OK): sent or queued on the
     * endpoint; cbfunc runs on completion. Errors leave the descriptor with the
     * caller. Tags from FERRY_BTL_TAG_BTL_MIN are FERRY_ERR_INVALID. */
    int (*send)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                uint8_t tag);

    /* Inline send of header then payload as one message (together at most
     * max_send_size bytes, else FERRY_ERR_INVALID), copied before return, or
     * FERRY_ERR_NO_RESOURCE with nothing sent (also when earlier sends are
     * queued, to keep order). */
    int (*sendi)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *header,
                 size_t header_len, const void *payload, size_t payload_len, uint8_t tag);

    /* Writes src[0] (local) to dst[0] (remote). len must match and be <=
     * max_rdma_size. */
    int (*put)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des);

    /* Reads src[0] (remote) into dst[0] (local). */
    int (*get)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des);

    /* Optional (NULL: none). A put (put true: local to the remote range) or
     * a get of size bytes between local and [raddr, raddr + size) of ep's
     * memory under rkey (the target's key bytes), done inside the call and
     * without a descriptor where the module can: self, its own memory; sm,
     * a peer's mem_alloc heap, which it maps (a module with mem_alloc and
     * this op does its peers' mem_alloc memory so; the contract's
     * rdma_direct case holds it to that). Returns FERRY_BTL_DONE (complete at both ends),
     * FERRY_ERR_NOT_SUPPORTED when it cannot do this one so (nothing done:
     * use put/get; for size > 0 a caller may take it as final for ep and
     * rkey and not ask again for that key: put and get serve it as well),
     * or an error with nothing to complete: FERRY_ERR_ACCESS
     * (the key refuses the range or the right, or was released during the
     * copy, which then does not count), FERRY_ERR_UNREACH, FERRY_ERR_INVALID
     * (size above max_rdma_size). */
    int (*rdma_direct)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, bool put, void *local,
                       uint64_t raddr, const uint8_t *rkey, size_t size);

    /* Optional (NULL: none). A put of size bytes from local to [raddr,
     * raddr + size) of ep's memory under rkey without a descriptor: the
     * module takes the bytes in the call (local may be reused once it
     * returns) and, once the put is complete at both ends, calls cb(btl,
     * ep, local, NULL, cbctx, cbdata, status) from its progress, never
     * inside this call; status is FERRY_OK, or FERRY_ERR_ACCESS where the
     * target refused the key, range or right (nothing written), or
     * FERRY_ERR_UNREACH. Returns FERRY_OK (cb due), FERRY_ERR_NOT_SUPPORTED
     * when it does not take this one so now (size 0, larger than it puts
     * so, work queued ahead of it, no room: use put, which orders it behind
     * that work; nothing started), or another error with nothing started
     * (FERRY_ERR_INVALID, FERRY_ERR_UNREACH, FERRY_ERR_NO_MEMORY). sm: one
     * ring message, below its cross-memory attach threshold. */
    int (*put_inline)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *local,
                      size_t size, uint64_t raddr, const uint8_t *rkey, ferry_btl_rdma_cb_t cb,
                      void *cbctx, void *cbdata);

    /* Optional (NULL: none). The get of the same kind: size bytes of
     * [raddr, raddr + size) under rkey into local, which must stay valid
     * until cb runs (from progress; FERRY_OK with the data in local, or the
     * error that ended it, local's bytes then undefined). Returns as
     * put_inline does. sm: a request message answered with data messages,
     * below its cross-memory attach threshold. */
    int (*get_inline)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                      size_t size, uint64_t raddr, const uint8_t *rkey, ferry_btl_rdma_cb_t cb,
                      void *cbctx, void *cbdata);

    /* Optional (NULL: none). put_inline's put followed, inside the same
     * message, by an active message on tag (below FERRY_BTL_TAG_BTL_MIN)
     * with payload's plen bytes: the target writes the data, then runs
     * tag's handler with the payload; a put it refuses (key, range, right)
     * writes nothing, and the handler runs all the same. size may be 0
     * (local then may be NULL); size + plen is at most what one message of
     * the module carries beside its header. The message is ordered with
     * ep's active messages as a send is.
     * Completion as put_inline's: cb(btl, ep, local, NULL, cbctx, cbdata,
     * status) from progress once the put is complete at both ends, with
     * FERRY_ERR_ACCESS for a refusal. With FERRY_BTL_PUTN_UNTRACKED in
     * flags nothing is kept for it and nothing completes: cb runs only for
     * a refusal, cb(btl, ep, NULL, NULL, cbctx, NULL, FERRY_ERR_ACCESS),
     * from progress, before anything the target sent after handling the
     * message is delivered here (a flush marker's answer, say).
     * Returns FERRY_OK, FERRY_ERR_NOT_SUPPORTED when it does not take this
     * one so now (too large, work queued ahead, no room, the caller's own
     * process where the module does not reach it: nothing started), or
     * another error with nothing started
     * (FERRY_ERR_INVALID for a reserved tag, NULL with a length or no cb;
     * FERRY_ERR_UNREACH; FERRY_ERR_NO_MEMORY). sm: one ring message; its
     * completion the target's tail passing it, an untracked one's refusal a
     * counter in the channel. tcp: one frame; its completion the target's
     * acknowledgment, an untracked one's refusal a frame of its own. ofi:
     * one ordered message (OFI_T_PUTN), answered in order by
     * OFI_T_PUTN_ANSWER (always when tracked, on a refusal when not); a
     * tracked one larger than a message, where the provider does not
     * order a send after a write but carries completion data (shm), as
     * the write numbered by its completion data and at once the message
     * without the data, which the target holds until the write lands
     * (ofi_wire.h): size is then not bounded by a message.
     * self: one fragment of its queue, handled by progress. */
    int (*put_notify_inline)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                             const void *local, size_t size, uint64_t raddr,
                             const uint8_t *rkey, uint8_t tag, const void *payload,
                             size_t plen, uint32_t flags, ferry_btl_rdma_cb_t cb, void *cbctx,
                             void *cbdata);

    /* Optional (NULL: none). The target's side of a put that came inside a
     * message (a put with notification small enough to travel with it):
     * [addr, addr + len) under key, one of this module's own keys as a
     * peer sends it back, resolved against this module's registrations at
     * this moment, with every right of need. FERRY_OK with *ptr_out, the
     * address in this process, valid until the registration is released;
     * FERRY_ERR_ACCESS for a key that is not one of ours (any bytes may
     * come), released, or that does not cover the range or rights. */
    int (*target_resolve)(ferry_btl_module_t *btl, const uint8_t *key, uint64_t addr, size_t len,
                          uint32_t need, void **ptr_out);

    /* Optional (NULL: the caller resolves with target_resolve and copies).
     * The same put's copy made by the module: len bytes of data written at
     * [addr, addr + len) under key with FERRY_ACCESS_REMOTE_WRITE, checked
     * and copied as the module's own puts into its memory are (sm: under
     * its unmap monitor's lock, or through the kernel with
     * FERRY_SM_COPY_CHECKED). FERRY_OK, or FERRY_ERR_ACCESS as for
     * target_resolve with nothing (or, for memory that vanished during the
     * copy, part) written. */
    int (*target_write)(ferry_btl_module_t *btl, const uint8_t *key, uint64_t addr,
                        const void *data, size_t len);

    /* Registers memory for RDMA with FERRY_ACCESS_* rights (and
     * FERRY_BTL_ACCESS_TARGET_ATOMICS). ep may be NULL. */
    int (*register_mem)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *base,
                        size_t len, uint32_t access, ferry_btl_reg_t **reg_out);

    /* Releases a registration; later accesses through its key are refused. */
    int (*deregister_mem)(ferry_btl_module_t *btl, ferry_btl_reg_t *reg);

    /* Allocates len bytes (page aligned) that peers of this module reach
     * faster than ordinary memory (for sm: shared memory they copy into
     * directly), registered with FERRY_ACCESS_* rights. Optional. */
    int (*mem_alloc)(ferry_btl_module_t *btl, size_t len, uint32_t access, void **addr_out,
                     ferry_btl_reg_t **reg_out);

    /* Frees memory from mem_alloc with its registration; later accesses
     * through its key are refused. */
    int (*mem_free)(ferry_btl_module_t *btl, ferry_btl_reg_t *reg);

    /* Atomics (optional: btl_base_unsupported_atomic_* where FERRY_BTL_FLAG_
     * ATOMIC_OPS / ATOMIC_FOPS are not set). raddr is an address of the
     * target, rkey the key bytes of its registration (reg_handle_size of
     * them), op one of attr.atomic_flags' operations and flags
     * FERRY_BTL_ATOMIC_FLAG_*. Returns FERRY_BTL_DONE (complete now; cb not
     * called), FERRY_OK (accepted; cb runs from progress, flush or
     * del_procs, and may be NULL: flush still covers the operation),
     * FERRY_ERR_NO_RESOURCE (nothing started; progress and retry), or
     * another error with nothing started: FERRY_ERR_INVALID for an unknown
     * op or flag or a misaligned raddr, FERRY_ERR_NOT_SUPPORTED for an op or
     * width missing from attr.atomic_flags, FERRY_ERR_ACCESS when the
     * initiator's own check of the key refuses. A refusal found by the
     * target (key released, range or right wrong) completes with
     * FERRY_ERR_ACCESS (FERRY_ERR_INVALID for misalignment). */

    /* (*raddr) = (*raddr) op operand. */
    int (*atomic_op)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, uint64_t raddr,
                     const uint8_t *rkey, ferry_btl_atomic_op_t op, uint64_t operand,
                     uint32_t flags, ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata);

    /* As atomic_op, and the value before it is written to local (4 or 8
     * bytes; lreg is its registration or NULL). */
    int (*atomic_fop)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                      uint64_t raddr, ferry_btl_reg_t *lreg, const uint8_t *rkey,
                      ferry_btl_atomic_op_t op, uint64_t operand, uint32_t flags,
                      ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata);

    /* If (*raddr) == compare then (*raddr) = value; the value before is
     * written to local either way. Needs FERRY_BTL_ATOMIC_SUPPORTS_CSWAP. */
    int (*atomic_cswap)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                        uint64_t raddr, ferry_btl_reg_t *lreg, const uint8_t *rkey,
                        uint64_t compare, uint64_t value, uint32_t flags,
                        ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata);

    /* Optional (NULL: none). The atomic of atomic_op (result NULL),
     * atomic_fop or, with FERRY_BTL_ATOMIC_FLAG_CSWAP in flags,
     * atomic_cswap (op ignored; result required), done inside the call
     * where the module can: the CPU's atomic on memory it maps (sm: a
     * peer's mem_alloc heap, or its own memory; a module with mem_alloc
     * and this op does its peers' mem_alloc memory so, the contract's
     * atomic cases hold it to that). Returns FERRY_BTL_DONE (complete at
     * both ends, the old value in result), FERRY_ERR_NOT_SUPPORTED when
     * it cannot do this one so (nothing done: use the op above; a caller
     * may take it as final for ep and rkey), or what the op above would
     * refuse it with, nothing done. Never calls back. */
    int (*atomic_direct)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *result,
                         uint64_t raddr, const uint8_t *rkey, ferry_btl_atomic_op_t op,
                         uint64_t operand, uint64_t compare, uint32_t flags);

    /* Progresses until every put, get and atomic started on ep (all
     * endpoints when NULL) has completed. */
    int (*flush)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep);

    /* Polls once; returns events handled (>= 0) or a negative status. */
    int (*progress)(ferry_btl_module_t *btl);

    /* Logs the state of ep (all endpoints when NULL) for diagnostics. */
    void (*dump)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, int verbose);

    /* Optional (NULL: the peer's module of the same instance). Which of the
     * peer's modules of this transport ep reaches, as the peer numbers
     * them (its instance), or -1 when not known yet. tcp's per-interface
     * modules pair by subnet, so module k may reach the peer's module j:
     * the BML names a lost rail to the peer by the peer's number. */
    int (*peer_instance)(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep);
} ferry_btl_ops_t;

/* What every module starts with. */
struct ferry_btl_module {
    ferry_btl_attr_t attr;
    const ferry_btl_ops_t *ops;
    ferry_ctx_t *ctx;
    const struct ferry_btl_component *component;
    struct {
        ferry_btl_am_cb_t cb;
        void *cbdata;
    } am[FERRY_BTL_TAG_COUNT];
    ferry_btl_error_cb_t error_cb;
    void *error_cbdata;
    /* Error reports waiting for the module's next progress, oldest first
     * (src/btl/base.c: btl_base_report_error queues, btl_base_deliver_reports
     * calls error_cb), so that no report runs inside the call that found it. */
    struct btl_base_report *reports;
    struct btl_base_report **reports_tail;
    /* The shared descriptor pools (src/btl/frag.h) when the transport uses
     * them, so that their alloc/free/prepare ops can serve it directly. */
    struct btl_frags *frags;
};

/* One per transport: registers its parameters, and opens its modules (none
 * when the transport cannot run here; it then logs why). open publishes the
 * modules' addresses in the modex before returning. */
typedef struct ferry_btl_component {
    const char *name;
    const char *description;
    int (*register_params)(ferry_ctx_t *ctx);
    int (*open)(ferry_ctx_t *ctx, ferry_btl_module_t ***modules_out, int *count_out);
    /* Opened whatever FERRY_BTL names: the path by which a process reaches
     * itself (self). */
    bool always_open;
} ferry_btl_component_t;

#ifdef __cplusplus
}
#endif

#endif /* FERRY_BTL_H */
