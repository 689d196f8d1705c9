/*
 * ferry: active messages and RDMA put/get between processes.
 *
 * Threading: a context is used by one thread at a time. FERRY_THREAD_SINGLE,
 * FERRY_THREAD_FUNNELED and FERRY_THREAD_SERIALIZED are supported;
 * FERRY_THREAD_MULTIPLE is refused by ferry_init with FERRY_ERR_NOT_SUPPORTED.
 *
 * Progress is explicit: nothing moves and no callback runs unless the
 * application calls ferry_progress() (or a call documented to progress, such
 * as ferry_flush or ferry_finalize). Callbacks are never invoked from inside
 * the call that started an operation.
 *
 * Inside a callback (an active-message handler, a completion callback or
 * the error callback):
 * - allowed: ferry_am_send and its variants up to ferry_am_max_size,
 *   ferry_am_send_nb at any size, ferry_put, ferry_get, ferry_put_nb,
 *   ferry_get_nb, ferry_put_notify, the atomics, ferry_flush_nb,
 *   ferry_req_test (it does not progress there), ferry_rkey_unpack and
 *   ferry_rkey_release, ferry_rank, ferry_size; ferry_progress returns 0;
 * - refused with FERRY_ERR_BUSY, doing nothing: ferry_flush, ferry_barrier,
 *   ferry_finalize, ferry_req_wait, and ferry_am_send above
 *   ferry_am_max_size (it would have to wait).
 * Sends from callbacks do not fail for lack of resources: an active message
 * or atomic the transport has no room for is held by ferry (the message
 * copied) and leaves with progress, in order with what the callback sends
 * to that peer afterwards (later sends to the peer from outside a callback
 * return FERRY_ERR_NO_RESOURCE until it has left). The same holds for
 * ferry_am_send_nb above ferry_am_max_size (ferry holds the announcement of
 * the rendezvous, not the data, which stays in the caller's buffer until
 * the callback) and for the tagged layer's non-blocking sends (ferry/msg.h).
 * What ferry holds is bounded by FERRY_CB_QUEUE_MAX bytes (default 4 MiB,
 * counting each message's length, or a large one's announcement, and a
 * small header): past it such a send returns FERRY_ERR_NO_RESOURCE as it
 * would outside a callback, and nothing of it was sent. A large send is
 * also refused so, there as anywhere, while FERRY_AM_LARGE_INFLIGHT (1024)
 * large sends of this process to that peer are open (see "Active messages
 * of any size"). Puts and gets never return FERRY_ERR_NO_RESOURCE: ferry
 * queues them anywhere, and so it does the answers a rendezvous needs
 * (ferry_am_recv_data from a handler), per peer, as many as that peer may
 * have large messages open here.
 * Outside callbacks it is the tagged layer (ferry/msg.h), not ferry, that
 * holds a non-blocking tagged send the transport has no room for (or one
 * past FERRY_AM_LARGE_INFLIGHT): it waits in that layer's own list for its
 * peer, in order, and leaves with progress. That list has no bound of
 * ferry's: each entry is a request the application made and holds until
 * it completes (as an MPI_Isend is), so the application bounds it by the
 * requests it keeps open.
 *
 * Every function returns a ferry status: FERRY_OK (0) or a negative
 * FERRY_ERR_* code; ferry_strerror() names it.
 */
#ifndef FERRY_FERRY_H
#define FERRY_FERRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_VERSION_MAJOR 0
#define FERRY_VERSION_MINOR 1

/*
 * Status codes: the one table of them. Each entry gives the code's name
 * (FERRY_ followed by the first argument), its value and the message
 * ferry_strerror returns; the enum below, ferry_strerror and
 * ferry_status_name are all generated from it, so a code cannot be added
 * without its message. Success is zero, errors are negative, and a code's
 * value never changes once released. X(name, value, message) is the
 * caller's macro, as in libuv's UV_ERRNO_MAP.
 */
#define FERRY_STATUS_MAP(X)                                                              \
    X(OK, 0, "success")                                                                  \
    /* unspecified failure (see the log) */                                              \
    X(ERR, -1, "unspecified error")                                                      \
    /* temporarily out of resources: progress and retry */                               \
    X(ERR_NO_RESOURCE, -2, "temporarily out of resources")                               \
    /* an argument or parameter value is invalid */                                      \
    X(ERR_INVALID, -3, "invalid argument or parameter")                                  \
    /* the operation or mode is not supported */                                         \
    X(ERR_NOT_SUPPORTED, -4, "operation not supported")                                  \
    /* the peer cannot be reached or has failed */                                       \
    X(ERR_UNREACH, -5, "peer unreachable or failed")                                     \
    /* memory allocation failed */                                                       \
    X(ERR_NO_MEMORY, -6, "out of memory")                                                \
    /* remote memory access outside a registration or its rights */                      \
    X(ERR_ACCESS, -7, "remote access denied")                                            \
    /* data larger than the space offered */                                             \
    X(ERR_TRUNCATE, -8, "data truncated")                                                \
    /* a bounded wait ran out */                                                         \
    X(ERR_TIMEOUT, -9, "timed out")                                                      \
    /* a peer or launcher sent malformed data */                                         \
    X(ERR_PROTO, -10, "protocol error: malformed data")                                  \
    /* an operating-system call failed */                                                \
    X(ERR_IO, -11, "operating-system call failed")                                       \
    /* the object is in use */                                                           \
    X(ERR_BUSY, -12, "object in use")                                                    \
    /* no such key, tag, peer or parameter */                                            \
    X(ERR_NOT_FOUND, -13, "not found")                                                   \
    /* the operation was canceled by teardown */                                         \
    X(ERR_CANCELED, -14, "canceled")                                                     \
    /* the launcher (PMI) failed or is absent */                                         \
    X(ERR_LAUNCHER, -15, "launcher (PMI) failed or absent")

#define FERRY_STATUS_ENUM_(name, value, message) FERRY_##name = (value),
#define FERRY_STATUS_COUNT_(name, value, message) +1
enum {
    FERRY_STATUS_MAP(FERRY_STATUS_ENUM_)
    /* One below the lowest code: the codes are FERRY_ERR_LAST + 1 .. 0. */
    FERRY_ERR_LAST = -(0 FERRY_STATUS_MAP(FERRY_STATUS_COUNT_))
};
#undef FERRY_STATUS_ENUM_
#undef FERRY_STATUS_COUNT_

/* Returns a static, human-readable message for a status ("invalid argument
 * or parameter"); "unknown status" for a value that is not a code. Never
 * NULL. */
const char *ferry_strerror(int status);

/* Returns the status code's name as a static string ("FERRY_ERR_INVALID");
 * "FERRY_UNKNOWN" for a value that is not a code. Never NULL. */
const char *ferry_status_name(int status);

/* Threading levels, as in MPI. */
typedef enum {
    FERRY_THREAD_SINGLE = 0,     /* only one thread exists */
    FERRY_THREAD_FUNNELED = 1,   /* only the thread that called ferry_init calls ferry */
    FERRY_THREAD_SERIALIZED = 2, /* any thread, never two at once */
    FERRY_THREAD_MULTIPLE = 3    /* concurrent calls: not supported, refused at init */
} ferry_thread_level_t;

typedef struct ferry_ctx ferry_ctx_t;

typedef struct ferry_init_params {
    ferry_thread_level_t thread_level; /* required level; MULTIPLE is refused */
    const char *transports; /* comma list ("self,sm"); NULL: FERRY_BTL, else all built */
} ferry_init_params_t;

/*
 * Creates a context: reads FERRY_* parameters (a bad value fails with
 * FERRY_ERR_INVALID and a message naming the variable), joins the job through
 * the launcher found in the environment (ferryrun or another PMI-1 server;
 * without one, a singleton of size 1), opens the transports and exchanges
 * their addresses. params may be NULL for the defaults (SINGLE, all
 * transports). On success *ctx_out is set; on failure it is untouched.
 * Collective: every rank of the job must call it.
 */
int ferry_init(const ferry_init_params_t *params, ferry_ctx_t **ctx_out);

/*
 * Completes or cancels everything outstanding (callbacks run with
 * FERRY_ERR_CANCELED for what was canceled), waits for the other ranks,
 * releases memory registrations still live (with a warning), closes the
 * transports, frees the context and sets *ctx_p to NULL. Collective.
 *
 * The wait: this rank tells every other that it is finalizing, and waits
 * until each has said so too or is known to have failed, so that no rank
 * tears down while a live one may still send to it. A rank that failed
 * (before ferry_finalize or during it) ends the wait as soon as this rank
 * learns of it (see ferry_error_cb_t: every survivor does), and the rest
 * still happens: the survivors tear down cleanly and ferry_finalize returns
 * FERRY_ERR_UNREACH, as it does whenever a rank of the job failed earlier.
 * Where some ranks reach each other through no transport, the wait is the
 * launcher's barrier instead, which ferryrun --keep-going fails once a rank
 * has ended (without --keep-going ferryrun ends the job).
 *
 * After it the handle is invalid; ferry_finalize takes its address so that
 * the caller's copy cannot be used by mistake:
 * - a second ferry_finalize(&ctx) finds NULL and returns FERRY_OK (so does
 *   ctx_p NULL), and any other call given the NULL handle returns
 *   FERRY_ERR_INVALID (ferry_rank and ferry_size too);
 * - ferry_mem_t handles of the context are invalid too (ferry_mem_rkey on
 *   one reads freed memory);
 * - another copy of the handle, kept from before, points to freed memory:
 *   using it is undefined behaviour, which ferry can only sometimes catch.
 *   Every call checks a magic number in the context that finalize clears
 *   before freeing it, which costs one comparison: as long as the freed
 *   memory has not been given out again, a stale copy is refused with
 *   FERRY_ERR_INVALID and a logged error instead of crashing. Builds with
 *   AddressSanitizer or ThreadSanitizer report the use after free
 *   themselves.
 * Called from inside a ferry callback it returns FERRY_ERR_BUSY and does
 * nothing (*ctx_p is left as it was).
 */
int ferry_finalize(ferry_ctx_t **ctx_p);

/* This process's rank in [0, size) and the job size. */
int ferry_rank(const ferry_ctx_t *ctx);
int ferry_size(const ferry_ctx_t *ctx);

/*
 * Polls every transport once. Returns the number of events handled (>= 0),
 * or a negative status on a fatal error. Called from inside a ferry callback
 * it returns 0 without progressing (no recursion).
 */
int ferry_progress(ferry_ctx_t *ctx);

/*
 * Blocks, progressing, until every rank has entered the barrier.
 *
 * What it orders: before it says it entered, each rank flushes everything
 * (ferry_flush(ctx, -1): its puts, gets, atomics and puts with
 * notification complete, and every active message it sent has had its
 * handler run at its destination). So when ferry_barrier returns on any
 * rank, everything every rank started before entering it is complete at
 * its target, and every such active message has been handled. A flush
 * sends markers only to ranks that got active messages since their last
 * flush. Errors of operations are not consumed by the barrier: ferry_flush
 * still reports them.
 *
 * When a rank fails, every survivor's barrier returns FERRY_ERR_UNREACH as
 * soon as the survivor learns of the failure, whichever rank it waits for:
 * - a rank that died before the barrier, or that this rank already knows to
 *   have failed, fails it on every survivor (at once, for a failure known
 *   on entry: after one, every later barrier fails at once);
 * - a rank that dies during it fails it on every survivor still waiting;
 *   a survivor whose barrier completed first, or completes with everything
 *   it needed already sent by the dead rank (it did enter), returns
 *   FERRY_OK, unless it had heard of the death by then, and its next
 *   barrier fails.
 * No survivor waits for a dead rank longer than it takes some live rank's
 * transport to notice the death (sm: FERRY_SM_FAIL_TIMEOUT; tcp: the
 * connection breaking) and a message to come from it. Where some ranks
 * reach each other through no transport, the barrier is the launcher's,
 * which ferryrun --keep-going fails (FERRY_ERR_UNREACH) once a rank has
 * ended (without --keep-going ferryrun ends the job).
 */
int ferry_barrier(ferry_ctx_t *ctx);

/*
 * Called from progress when a peer fails (peer >= 0: it died or broke the
 * protocol; everything pending to it completes with FERRY_ERR_UNREACH and
 * later operations to it return FERRY_ERR_UNREACH) or when a transport fails
 * as a whole (peer -1). msg says what happened. Without a callback, ferry
 * logs the failure and carries on with the other peers.
 *
 * Failures are told across the job: a rank whose transport sees a peer fail
 * tells every other rank, and each tells the rest in turn, so the callback
 * runs on every survivor, also on ranks that never talked to the failed one
 * or whose own transport cannot see it (msg then names the rank that saw
 * it). Each failed peer is reported once. A rank counted as failed by a
 * peer whose path to it broke learns of that, and reports that peer failed
 * in turn.
 * Operations pending to a rank known failed only from another rank's word
 * complete when this rank's transport sees the failure too, at the latest
 * with FERRY_ERR_UNREACH in ferry_finalize.
 */
typedef void (*ferry_error_cb_t)(ferry_ctx_t *ctx, int peer, int status, const char *msg,
                                 void *arg);

/* Sets (or with cb NULL, clears) the error callback. */
int ferry_set_error_cb(ferry_ctx_t *ctx, ferry_error_cb_t cb, void *arg);

/* ---- Memory registration ---------------------------------------------- */

enum {
    FERRY_ACCESS_LOCAL = 1u << 0,        /* local source or sink of put/get */
    FERRY_ACCESS_REMOTE_READ = 1u << 1,  /* peers may get from it */
    FERRY_ACCESS_REMOTE_WRITE = 1u << 2, /* peers may put into it */
    /* Peers may apply atomic operations to it (transport atomics, see
     * include/ferry/btl.h). Every ferry atomic is a CPU atomic on the
     * target's memory: done by the initiator's CPU where it maps that memory
     * (self; sm on ferry_mem_alloc memory), else by the target's own CPU on
     * the initiator's behalf. So ferry atomics to one address are atomic
     * with each other, whatever ranks and transports issue them, and with
     * the target's own __atomic / <stdatomic.h> operations on it. Against
     * plain puts and the target's plain stores to the same bytes there is
     * no promise beyond the hardware's: such a mix is a data race and its
     * outcome is undefined. */
    FERRY_ACCESS_REMOTE_ATOMIC = 1u << 3
};

typedef struct ferry_mem ferry_mem_t;

/* Largest packed remote key; a ferry_rkey_t can be sent as plain bytes. */
#define FERRY_RKEY_SIZE 256

/* A remote key: what a peer needs to address registered memory. Opaque bytes,
 * valid until the owner deregisters the memory. */
typedef struct ferry_rkey {
    uint8_t bytes[FERRY_RKEY_SIZE];
} ferry_rkey_t;

/*
 * Registers [addr, addr + len) with every transport able to do RDMA, with the
 * given FERRY_ACCESS_* rights. len 0, addr NULL, a range that wraps around
 * the address space, or one that is not all mapped memory of this process
 * (ferry_mem_register(buf, SIZE_MAX / 2)) is FERRY_ERR_INVALID, with a
 * message.
 */
int ferry_mem_register(ferry_ctx_t *ctx, void *addr, size_t len, unsigned access,
                       ferry_mem_t **mem_out);

/* Releases a registration. Operations still in flight on it must have
 * completed. mem may be NULL; memory from ferry_mem_alloc is refused with
 * FERRY_ERR_INVALID (use ferry_mem_free). */
int ferry_mem_deregister(ferry_ctx_t *ctx, ferry_mem_t *mem);

/*
 * Allocates len bytes (page aligned) registered with access, from memory the
 * transports can reach fastest: with sm, a shared heap that peers on this
 * host map and copy into directly, so a put or get on it is one memcpy. On a
 * transport without such memory it is ordinary memory, registered. Free it
 * with ferry_mem_free (ferry_mem_deregister refuses it). More than this
 * host's RAM and swap is FERRY_ERR_NO_MEMORY, with a message; sm makes no
 * shared heap larger than /dev/shm's free space (the memory is then
 * ordinary), so that none faults when first touched.
 */
int ferry_mem_alloc(ferry_ctx_t *ctx, size_t len, unsigned access, void **addr_out,
                    ferry_mem_t **mem_out);

/* Frees memory from ferry_mem_alloc. mem may be NULL. */
int ferry_mem_free(ferry_ctx_t *ctx, ferry_mem_t *mem);

/* Writes the remote key of a registration, for sending to peers. */
int ferry_mem_rkey(const ferry_mem_t *mem, ferry_rkey_t *rkey_out);

/* ---- Active messages ---------------------------------------------------- */

/* Application tags are 0 .. FERRY_AM_TAG_MAX; tags above are ferry's own. A
 * tag is an int so that a wrong one is refused rather than truncated: any
 * call given a tag outside 0 .. FERRY_AM_TAG_MAX returns FERRY_ERR_INVALID
 * (300 is not taken as 44). Ranks (src, dst) are ints in [0, size). */
#define FERRY_AM_TAG_MAX 191

/*
 * Called from ferry_progress for each message with the registered tag (tag is
 * in 0 .. FERRY_AM_TAG_MAX, src the sender's rank). data is valid only until
 * the callback returns. The callback may send; its call to ferry_progress
 * does nothing.
 */
typedef void (*ferry_am_cb_t)(ferry_ctx_t *ctx, int src, int tag, const void *data,
                              size_t len, void *arg);

/* Sets (or with cb NULL, clears) the handler of an application tag. Register
 * handlers before peers may send (for example before a ferry_barrier): a
 * message for a tag without a handler is dropped with a warning. A tag
 * outside 0 .. FERRY_AM_TAG_MAX is FERRY_ERR_INVALID. */
int ferry_am_register(ferry_ctx_t *ctx, int tag, ferry_am_cb_t cb, void *arg);

/* Largest active message that goes to dst in one fragment (the transport's
 * max send size, or to a peer with several rails the smallest of theirs, so
 * that any of them can carry it again after a failover; active messages
 * carry no ferry header), or a negative status. Larger messages are
 * accepted too: they go by rendezvous (ferry_am_sizes below). */
long ferry_am_max_size(ferry_ctx_t *ctx, int dst);

/*
 * Sends len bytes to dst under tag. When the call returns the data has been
 * copied or delivered, so the buffer may be reused at once:
 * - up to ferry_am_max_size(dst) bytes the message is copied into the
 *   transport (one fragment) and the call returns at once. Out of buffers
 *   or credits it returns FERRY_ERR_NO_RESOURCE: call ferry_progress and
 *   retry; nothing was sent. Inside a callback ferry holds the message
 *   instead (see the top of this file, FERRY_CB_QUEUE_MAX).
 * - above that the message goes by rendezvous (see "Active messages of any
 *   size" below) and the call blocks, progressing, until the receiver has
 *   the data; its handlers and callbacks run meanwhile. Called from inside
 *   a ferry callback, where it could not progress, a message that large is
 *   FERRY_ERR_BUSY: use ferry_am_send_nb there.
 * Handlers at the receiver run in the order the messages were sent, for
 * messages from one sender to one receiver. A tag outside
 * 0 .. FERRY_AM_TAG_MAX or dst outside [0, size) is FERRY_ERR_INVALID.
 */
int ferry_am_send(ferry_ctx_t *ctx, int dst, int tag, const void *data, size_t len);

/* ---- One-sided put and get --------------------------------------------- */
/*
 * Completion, the one meaning every one-sided call of ferry has: a put,
 * get, atomic or put with notification is complete when its callback runs,
 * its request says done (ferry_req_test, ferry_req_wait), or a flush that
 * covers it (ferry_flush, ferry_flush_nb, ferry_barrier) returns. Complete
 * means complete at both ends:
 * - at the initiator, the local buffer may be reused (put), or holds the
 *   data (get) or the value before the operation (fetching atomics);
 * - at the target, the data or the new value is visible to every later
 *   operation from any rank (a put, get or atomic another rank starts
 *   after hearing of the completion sees it), and to the target's own
 *   loads once it has heard of it too.
 * Each transport keeps it in its own way (docs/sm.md, docs/tcp.md,
 * docs/ofi.md say how). Before completion nothing is promised: operations
 * started one after the other may take effect in any order.
 *
 * Active messages are covered by flush too: when ferry_flush(ctx, dst)
 * returns, every active message this rank sent to dst before the call has
 * had its handler run at dst (ferry_am_send and its variants, and
 * put-notify notifications).
 */

/* Completion of a put or get: status is FERRY_OK or the error that ended it.
 * Runs from ferry_progress, ferry_flush or ferry_finalize. */
typedef void (*ferry_comp_cb_t)(void *arg, int status);

/*
 * Copies len bytes from local buf to remote address raddr in the memory that
 * rkey describes on rank dst. local may be NULL (ferry registers buf for the
 * duration) or a registration covering buf. The buffer must stay untouched
 * until the completion callback (cb may be NULL; ferry_flush then tells when
 * it is done). An address range outside the remote registration, or without
 * REMOTE_WRITE access, is refused with FERRY_ERR_ACCESS, either returned here
 * or passed to the callback. Any length is accepted; ferry splits large ones.
 */
int ferry_put(ferry_ctx_t *ctx, int dst, const void *buf, size_t len, ferry_mem_t *local,
              uint64_t raddr, const ferry_rkey_t *rkey, ferry_comp_cb_t cb, void *arg);

/* As ferry_put, in the other direction: remote [raddr, raddr+len) into buf.
 * Needs REMOTE_READ access. */
int ferry_get(ferry_ctx_t *ctx, int dst, void *buf, size_t len, ferry_mem_t *local,
              uint64_t raddr, const ferry_rkey_t *rkey, ferry_comp_cb_t cb, void *arg);

/*
 * Progresses until every put, get, atomic and put with notification this
 * rank started to dst (or to all peers when dst is -1) has completed, and
 * every active message it sent there before the call has had its handler
 * run at dst: a flush marker follows the messages on their ordered path and
 * dst answers it once the handlers before it have run. When no active
 * message went to dst since the last flush that covered it, no marker is
 * sent (no round trip). Returns the first error seen among the operations
 * since the last flush, FERRY_ERR_UNREACH when dst failed before it
 * answered, FERRY_ERR_TIMEOUT when it did not answer the marker within
 * FERRY_FLUSH_TIMEOUT milliseconds (60000; dst is then taken as failed and
 * the error callback says so), or FERRY_OK. Called from inside a ferry
 * callback it returns FERRY_ERR_BUSY and does nothing.
 */
int ferry_flush(ferry_ctx_t *ctx, int dst);

/* ---- Remote key handles and operations with requests -------------------- */

/*
 * A remote key unpacked for one peer: its bytes are parsed and checked once,
 * here (owner, format, the key of the transport that reaches dst), so that
 * an operation through the handle does no parsing and no lookup, only the
 * comparisons of its address range and rights. The handle belongs to ctx
 * and to dst: an operation gives it with another context is refused.
 */
typedef struct ferry_rkey_handle ferry_rkey_h;

/*
 * Unpacks rkey (from ferry_mem_rkey at rank dst) into *rh_out.
 * FERRY_ERR_INVALID for a NULL argument, dst outside [0, size), or a key
 * that is not well formed, is of another rank than dst, or has no key for
 * the transport reaching dst (logged); FERRY_ERR_UNREACH when no transport
 * reaches dst. *rh_out is set only on success.
 */
int ferry_rkey_unpack(ferry_ctx_t *ctx, int dst, const ferry_rkey_t *rkey, ferry_rkey_h **rh_out);

/*
 * Releases a handle (operations started through it go on). A handle
 * already released, or of another context, is FERRY_ERR_INVALID: ferry
 * keeps the memory of released handles and gives it to a new handle only
 * after 64 later releases of handles, so a stale copy is
 * caught until then, as the context's magic catches a stale context. rh
 * NULL is FERRY_OK. Handles still live at ferry_finalize are freed.
 */
int ferry_rkey_release(ferry_ctx_t *ctx, ferry_rkey_h *rh);

/* A request: one operation in flight, to test or wait for. */
typedef struct ferry_req ferry_req_t;

/*
 * Options of one operation. The whole struct may be NULL (no options).
 * - local: the registration covering the local buffer (the put's source,
 *   the get's sink, the fetching atomic's result), or NULL. Given, it must
 *   be of ctx and cover the buffer (else FERRY_ERR_INVALID).
 * - cb, arg: completion callback, run from progress (never inside the call
 *   that started the operation, also when it completed there), or NULL.
 * - req_out: when not NULL, set on FERRY_OK to a request to pass to
 *   ferry_req_test or ferry_req_wait, or to NULL when the operation
 *   completed inside the call (its status was then FERRY_OK).
 * With neither cb nor req_out an operation that the transport takes at
 * once allocates nothing in ferry; ferry_flush tells when it is done and
 * reports its error.
 */
typedef struct ferry_op_params {
    ferry_mem_t *local;
    ferry_comp_cb_t cb;
    void *arg;
    ferry_req_t **req_out;
} ferry_op_params_t;

/*
 * As ferry_put and ferry_get, through a handle: [raddr, raddr + len) must be
 * inside the registration the handle names, with REMOTE_WRITE (put) or
 * REMOTE_READ (get) rights (else FERRY_ERR_ACCESS, nothing started). Any
 * length; the buffer stays the caller's, untouched, until completion.
 * FERRY_ERR_INVALID for a NULL ctx or handle, a released handle or one of
 * another context, buf NULL with len > 0, or a bad p->local;
 * FERRY_ERR_UNREACH when the peer has failed.
 */
int ferry_put_nb(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t raddr, const void *buf, size_t len,
                 const ferry_op_params_t *p);
int ferry_get_nb(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t raddr, void *buf, size_t len,
                 const ferry_op_params_t *p);

/* Remote atomic operations. MIN and MAX compare as signed integers; SWAP
 * stores the operand. */
typedef enum {
    FERRY_ATOMIC_ADD = 0,
    FERRY_ATOMIC_AND = 1,
    FERRY_ATOMIC_OR = 2,
    FERRY_ATOMIC_XOR = 3,
    FERRY_ATOMIC_SWAP = 4,
    FERRY_ATOMIC_MIN = 5,
    FERRY_ATOMIC_MAX = 6
} ferry_atomic_op_t;

/*
 * Remote atomics on the integer of size bytes (4 or 8) at raddr of the
 * registration the handle names, which must carry FERRY_ACCESS_REMOTE_ATOMIC
 * (what they mean against each other, plain puts and the target's own
 * stores: see FERRY_ACCESS_REMOTE_ATOMIC). operand, compare and value are
 * taken at that width (the high 32 bits ignored for size 4).
 * - ferry_atomic: (*raddr) = (*raddr) op operand.
 * - ferry_atomic_fetch: the same, and the value before is written to
 *   result (size bytes, no alignment needed) by completion.
 * - ferry_atomic_cswap: if (*raddr) == compare then (*raddr) = value; the
 *   value before is written to result either way.
 * Refusals, nothing started: FERRY_ERR_INVALID for a size other than 4 or
 * 8, raddr not a multiple of size, an unknown op, result NULL, a NULL,
 * released or foreign handle or a bad p->local; FERRY_ERR_ACCESS for an
 * address outside the registration or one without the ATOMIC right;
 * FERRY_ERR_NOT_SUPPORTED when the transport reaching the peer lacks the
 * operation or width (its attr.atomic_flags); FERRY_ERR_UNREACH when the
 * peer failed; FERRY_ERR_NO_RESOURCE when the transport has no room now
 * (nothing started: progress and retry). The target's own refusal (a key
 * released meanwhile) is the operation's status at completion. To a peer
 * with several rails an atomic travels as one of ferry's own active
 * messages, which move to another rail with the rest when one breaks: it
 * is applied once and completes (docs/bml.md).
 */
int ferry_atomic(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t raddr, ferry_atomic_op_t op,
                 size_t size, uint64_t operand, const ferry_op_params_t *p);
int ferry_atomic_fetch(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t raddr, ferry_atomic_op_t op,
                       size_t size, uint64_t operand, void *result, const ferry_op_params_t *p);
int ferry_atomic_cswap(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t raddr, size_t size,
                       uint64_t compare, uint64_t value, void *result, const ferry_op_params_t *p);

/* The largest payload of a put with notification. */
#define FERRY_PUT_NOTIFY_MAX 64

/*
 * Puts [buf, buf + len) to raddr as ferry_put_nb does, then runs the active
 * message handler of tag at the target with data = payload (plen bytes, at
 * most FERRY_PUT_NOTIFY_MAX), after the put's data is visible there: the
 * handler may read the data. The operation completes (cb, request, flush)
 * once the put has completed and the notification has been handed to the
 * transport; ferry_flush also waits for its handler to have run.
 * Where the transport reaching the peer orders a put before the messages
 * sent after it (FERRY_BTL_FLAG_PUT_ORDERED: sm, tcp, and ofi where the
 * provider orders a send after a write, as tcp;ofi_rxm does) and takes the
 * whole put at once, the notification is sent right behind it, with no extra
 * round trip; a put the target refuses there (its registration withdrawn
 * meanwhile) completes with FERRY_ERR_ACCESS, and the handler runs all the
 * same without the data. Over ofi with a provider without that order whose
 * writes carry completion data (shm), a put larger than one message and its
 * notification leave at once, the write numbered, and the target runs the
 * handler once that write has landed (a key it refuses: at once, without the
 * data, the put completing with FERRY_ERR_ACCESS); such a handler may run
 * after those of messages sent after it. Elsewhere (self, or a put that had
 * to wait for resources) the notification leaves once the put has completed:
 * one round trip more, and a refused put sends no notification. To a peer
 * on one path over sm (a put below its cross-memory attach threshold,
 * ordinary memory) or tcp (up to
 * its largest send), the put and its notification are one message (a ring
 * message, a frame), with a callback or request or without: the target
 * checks the key, copies the data, then runs the handler; with a callback
 * or request the operation completes once the target has the data (sm: it
 * consumed the message, nothing comes back; tcp: its acknowledgment), a
 * refused put with FERRY_ERR_ACCESS; without, nothing is kept, and a
 * refusal makes the next ferry_flush to the peer return FERRY_ERR_ACCESS.
 * Elsewhere a put of at most 4096 bytes with neither callback nor request
 * (p NULL, or only p->local), to a peer on one path whose transport checks
 * its own keys for a message (self, ofi), travels inside one message with its
 * notification: the target checks the key, copies the data, then runs the
 * handler, and nothing comes back; a put it refuses there runs the handler
 * all the same, without the data, and the next ferry_flush to the peer
 * returns FERRY_ERR_ACCESS. A
 * notification is no more ordered with the other active messages to the peer
 * than a send made when it leaves. Refusals as ferry_put_nb,
 * and FERRY_ERR_INVALID for a tag outside 0 .. FERRY_AM_TAG_MAX, payload
 * NULL with plen > 0 or plen above FERRY_PUT_NOTIFY_MAX.
 */
int ferry_put_notify(ferry_ctx_t *ctx, ferry_rkey_h *rh, uint64_t raddr, const void *buf,
                     size_t len, int tag, const void *payload, size_t plen,
                     const ferry_op_params_t *p);

/*
 * ferry_flush without blocking: completes (cb, request) once everything
 * ferry_flush(ctx, dst) would wait for has happened. It can only complete
 * at a moment when nothing is in flight to dst: operations started later
 * may delay it. p->local is ignored. FERRY_ERR_INVALID for dst outside -1
 * .. size - 1; the completion's status is the first error among the
 * operations it covered (as ferry_flush returns).
 */
int ferry_flush_nb(ferry_ctx_t *ctx, int dst, const ferry_op_params_t *p);

/*
 * Returns 1 when req is done, with its status in *status_out (status_out
 * may be NULL) and the request freed; 0 when it is not done yet (this call
 * progressed once, unless inside a callback). FERRY_ERR_INVALID for a NULL
 * ctx or request, a request already freed (caught as for
 * ferry_rkey_release) or of another context.
 */
int ferry_req_test(ferry_ctx_t *ctx, ferry_req_t *req, int *status_out);

/* Progresses until req is done, frees it and returns its status.
 * FERRY_ERR_INVALID as ferry_req_test; inside a callback FERRY_ERR_BUSY (the
 * request is left as it was: test it later). */
int ferry_req_wait(ferry_ctx_t *ctx, ferry_req_t *req);


/* ---- Non-contiguous data (iovec lists, strided vectors) ----------------- */
/* Layouts are described by a convertor (include/ferry/dt.h):
 * ferry_convertor_init_iov for an iovec list, ferry_convertor_init_vector for
 * count blocks of block_len bytes stride bytes apart. Each call takes the
 * data from the convertor's cursor to its end. */

#include <ferry/dt.h>

/*
 * As ferry_am_send, with the message gathered from an iovec list (n blocks)
 * or from a convertor. The receiver sees one contiguous message. Returns
 * FERRY_ERR_NO_RESOURCE (progress and retry; nothing was sent) like
 * ferry_am_send; more bytes than ferry_am_max_size go by rendezvous, packed
 * into a buffer of ferry's first, and the call blocks as ferry_am_send does.
 */
int ferry_am_sendv(ferry_ctx_t *ctx, int dst, int tag, const ferry_iov_t *iov, size_t n);
int ferry_am_send_conv(ferry_ctx_t *ctx, int dst, int tag, ferry_convertor_t *conv);

/*
 * As ferry_put and ferry_get, with the local side any convertor layout and
 * the remote side the contiguous range [raddr, raddr + bytes) of the memory
 * rkey describes. Small or finely cut data is packed (one transfer); larger
 * blocks move in place, each registered through the transport's
 * registration cache. The memory the convertor describes, and its iovec
 * array, must stay untouched until cb (which may be NULL; ferry_flush then
 * tells when it is done). A remote range outside the registration is
 * FERRY_ERR_ACCESS with nothing started; an error after the first piece
 * started is passed to cb.
 */
int ferry_put_conv(ferry_ctx_t *ctx, int dst, ferry_convertor_t *conv, uint64_t raddr,
                   const ferry_rkey_t *rkey, ferry_comp_cb_t cb, void *arg);
int ferry_get_conv(ferry_ctx_t *ctx, int dst, ferry_convertor_t *conv, uint64_t raddr,
                   const ferry_rkey_t *rkey, ferry_comp_cb_t cb, void *arg);

/* ---- end of non-contiguous data ----------------------------------------- */

/* ---- Active messages of any size ---------------------------------------- */
/*
 * Above ferry_am_max_size(dst) an active message goes by rendezvous: the
 * sender registers its buffer for the duration (zero copy for contiguous
 * data; other layouts are packed first) and sends a small announcement;
 * the receiver pulls the data with get where the path has GET, otherwise
 * it registers the destination and the sender puts into it after a
 * clear-to-send (FERRY_AM_RNDV chooses: auto, get, put or pipe). When the
 * transfer is over the receiver says so, the sender releases the
 * registration, and its key is dead: a get through it is refused. (Except
 * on a path whose peers read the sender's memory without keys anyway, sm
 * with cross-memory attach: there the registration is kept for the next
 * message from the same buffer, FERRY_AM_RNDV_KEEP of them unused at most,
 * and dropped when the memory is unmapped; ferry_am_sizes says which.) With
 * pipe nothing is registered: after the clear-to-send the sender streams
 * the data as ordinary messages (packed fragment by fragment from any
 * layout) and the receiver copies each into place; auto takes pipe up to
 * the size the path reports as faster that way (its rndv_pipe_max: sm's
 * FERRY_SM_RNDV_PIPE_MAX, 0 by default, measured slower than get; 0 on the
 * other transports), get or put above it.
 *
 * At the receiver a large message reaches, in the order sent:
 * - the tag's data handler (ferry_am_register_data), when it has one, at
 *   once, with a ferry_am_data_t that names the message but holds no data
 *   yet: the handler (or later code) takes the message into memory of its
 *   own choosing with ferry_am_recv_data, and hears when it has arrived;
 * - otherwise the tag's ordinary handler, once ferry has taken the message
 *   into a buffer of its own; later messages from that sender wait meanwhile
 *   so that handlers still run in the order sent.
 * A peer announcing more than FERRY_AM_LARGE_MAX bytes (default 4 GiB) to a
 * tag without a data handler is refused with an error at both ends, before
 * anything is allocated.
 *
 * A process keeps at most FERRY_AM_LARGE_INFLIGHT (default 1024) large
 * sends to one peer open, from announcement to the peer's answer: past it a
 * large send returns FERRY_ERR_NO_RESOURCE (nothing sent; progress and
 * retry; the blocking send and the tagged layer wait themselves), inside a
 * callback too. Each open send holds at most its record and one answer
 * (clear-to-send or completion) at the receiver, which queues the answers
 * the path back has no room for; so a receiver holds for a peer that keeps
 * to the bound less than twice FERRY_AM_LARGE_INFLIGHT records and answers.
 * A peer that announces a message with that many open (it floods
 * announcements and leaves the answers untaken) is taken as failed, as for
 * a transport that sees a peer break its protocol: the error callback hears
 * it once (FERRY_ERR_NO_MEMORY, the message naming the parameter), the
 * answers queued for it are dropped, its messages under way end, and what
 * it announces afterwards is dropped. Processes must agree on the value.
 */

/* A large message announced and not yet received. */
typedef struct ferry_am_data ferry_am_data_t;

/*
 * Called from ferry_progress when a message above ferry_am_max_size
 * arrives for a tag with a data handler. len is the sender's length. The
 * handler, or any later code, must hand data to exactly one of
 * ferry_am_recv_data, ferry_am_recv_data_conv or ferry_am_data_drop; until
 * then the sender's send is not complete. data is valid until then.
 */
typedef void (*ferry_am_data_cb_t)(ferry_ctx_t *ctx, int src, int tag, ferry_am_data_t *data,
                                   size_t len, void *arg);

/* Sets (or with cb NULL, clears) the data handler of an application tag.
 * Messages up to ferry_am_max_size still go to the ordinary handler. */
int ferry_am_register_data(ferry_ctx_t *ctx, int tag, ferry_am_data_cb_t cb, void *arg);

/*
 * Receives the message into [buf, buf + len) (or the layout of conv, from
 * its cursor): min(len, message length) bytes. cb(arg, status) runs from
 * progress when they have arrived: FERRY_OK, FERRY_ERR_TRUNCATE when the
 * message was longer than the space (only the space was written), or the
 * error that ended the transfer. The memory must stay untouched until cb.
 * Returns FERRY_OK (data is then consumed, even when cb reports an error)
 * or FERRY_ERR_INVALID for bad arguments (data is then still the caller's).
 */
int ferry_am_recv_data(ferry_ctx_t *ctx, ferry_am_data_t *data, void *buf, size_t len,
                       ferry_comp_cb_t cb, void *arg);
int ferry_am_recv_data_conv(ferry_ctx_t *ctx, ferry_am_data_t *data, ferry_convertor_t *conv,
                            ferry_comp_cb_t cb, void *arg);

/* Discards the message; the sender's send completes with
 * FERRY_ERR_CANCELED. */
int ferry_am_data_drop(ferry_ctx_t *ctx, ferry_am_data_t *data);

/*
 * As ferry_am_send, without blocking at any size: FERRY_OK means accepted,
 * and cb(arg, status) then runs from progress once the buffer may be reused
 * (always from progress, even when the message went at once). status is
 * FERRY_OK, or the error that ended it (FERRY_ERR_UNREACH when the peer
 * failed, FERRY_ERR_TRUNCATE or FERRY_ERR_CANCELED when the receiver
 * refused or dropped it). FERRY_ERR_NO_RESOURCE: nothing was sent, progress
 * and retry. cb may be NULL. Handler order as for ferry_am_send, in the
 * order the calls were accepted. Inside a callback, at any size, a message
 * the transport has no room for is held by ferry and FERRY_OK returned;
 * FERRY_ERR_NO_RESOURCE there means FERRY_CB_QUEUE_MAX is reached (see the
 * top of this file) or, above ferry_am_max_size, that
 * FERRY_AM_LARGE_INFLIGHT large sends to dst are open.
 */
int ferry_am_send_nb(ferry_ctx_t *ctx, int dst, int tag, const void *data, size_t len,
                     ferry_comp_cb_t cb, void *arg);
int ferry_am_send_conv_nb(ferry_ctx_t *ctx, int dst, int tag, ferry_convertor_t *conv,
                          ferry_comp_cb_t cb, void *arg);

/* How rendezvous moves the data to a peer. */
typedef enum {
    FERRY_AM_RNDV_GET = 1, /* the receiver gets from the sender's registered buffer */
    FERRY_AM_RNDV_PUT = 2, /* the sender puts after the receiver's clear-to-send */
    /* After the receiver's clear-to-send the sender copies the data into
     * ordinary messages of the path's max send size while the receiver
     * copies the earlier ones out: two copies, by both processes at once. */
    FERRY_AM_RNDV_PIPE = 3
} ferry_am_rndv_t;

/* The sizes at which the active-message protocols change, for one peer. */
typedef struct ferry_am_sizes {
    size_t eager_max; /* up to this (ferry_am_max_size): one fragment, copied */
    size_t rndv_min;  /* from this (eager_max + 1) on: rendezvous */
    size_t large_max; /* the most a receiver without a data handler takes */
    ferry_am_rndv_t rndv; /* how rendezvous moves rndv_min bytes */
    /* With FERRY_AM_RNDV=auto, rendezvous messages up to this go by
     * FERRY_AM_RNDV_PIPE and larger ones as rndv says for GET or PUT (0: no
     * message goes by PIPE unless asked for; with a protocol asked for,
     * every message uses it and this is 0). */
    size_t pipe_max;
    /* Tagged messages (ferry/msg.h) of up to this many bytes with their
     * 16-byte header go in one fragment, larger ones by rendezvous; but up
     * to eager_max while a rendezvous of the sender's to dst is open (a
     * stream, where both ends copying through the path beat one get after
     * another). Below eager_max where a get is one copy (sm with
     * cross-memory attach: FERRY_SM_MSG_EAGER_MAX). */
    size_t msg_eager_max;
    /* 1: a get rendezvous's registration of the sender's buffer outlives
     * the message, kept for the next one from the same buffer
     * (FERRY_AM_RNDV_KEEP), so its key still reads: the path's peers read
     * the sender's memory without keys anyway (sm with cross-memory
     * attach). 0: released with the message, its key dead. */
    int keeps_keys;
} ferry_am_sizes_t;

/* Fills *out for dst; FERRY_ERR_INVALID or FERRY_ERR_UNREACH as
 * ferry_am_max_size. */
int ferry_am_sizes(ferry_ctx_t *ctx, int dst, ferry_am_sizes_t *out);

/* ---- end of active messages of any size --------------------------------- */

#ifdef __cplusplus
}
#endif

#endif /* FERRY_FERRY_H */
