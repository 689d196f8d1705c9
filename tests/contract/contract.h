/*
 * The transport contract suite: one program, written once against
 * include/ferry/btl.h, run against every transport (the transport's name is
 * argv[1]). Every rank tests against every peer its module reaches, itself
 * included where reachable.
 *
 * The suite's state lives in one ct_suite_t passed to every function and
 * handed to the transport as callback data; nothing is global.
 *
 * Messages between ranks:
 * - data messages, whose layout each case defines, on CT_DATA_TAG (or on every
 *   user tag in am_all_tags);
 * - control messages (ct_ctrl_t, recognised by CT_CTRL_MAGIC) on CT_CTRL_TAG:
 *   FIN closes a case and carries the number of data messages sent, RKEY
 *   carries a registration, DESC describes the next data message and END
 *   closes a stream.
 * Fragments from one module to one endpoint arrive in the order sent (the
 * contract), so a FIN arrives after every data message it counts and a DESC
 * just before the message it describes.
 */
#ifndef FERRY_TESTS_CONTRACT_H
#define FERRY_TESTS_CONTRACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/btl.h>
#include <ferry/dt.h>
#include <ferry/ferry.h>

#include "btl/ctx.h"
#include "util/bitmap.h"

#define CT_DATA_TAG 0
#define CT_CTRL_TAG FERRY_BTL_TAG_USER_MAX
#define CT_CTRL_MAGIC 0x4354524cu /* "CTRL" */
#define CT_WAIT_SECONDS 60        /* bound of every wait for a peer or a completion */
#define CT_MAX_FAIL_LINES 12      /* failure lines printed per case before going quiet */
#define CT_MAX_RKEYS 4
#define CT_MAX_STREAMS 128

/* Exit status CTest reads as "skipped" (SKIP_RETURN_CODE). */
#define CT_EXIT_SKIP 77

enum ct_ctrl_kind {
    CT_CTRL_FIN = 1,  /* a = data messages sent to the receiver in this case */
    CT_CTRL_RKEY = 2, /* idx, addr, len, key: a registration of the sender */
    CT_CTRL_DESC = 3, /* idx = stream, addr = offset, len = packed bytes, aux = reserve */
    CT_CTRL_END = 4   /* idx = stream, len = bytes of the stream sent */
};

typedef struct ct_ctrl {
    uint32_t magic;
    uint32_t kind;
    uint32_t case_id;
    uint32_t sender;
    uint32_t idx;
    uint32_t pad;
    uint64_t a;
    uint64_t addr;
    uint64_t len;
    uint64_t aux;
    uint8_t key[FERRY_BTL_KEY_MAX];
} ct_ctrl_t;

/* A registration of a peer, as received in an RKEY message. */
typedef struct ct_rkey {
    bool valid;
    uint64_t addr;
    uint64_t len;
    uint8_t key[FERRY_BTL_KEY_MAX];
} ct_rkey_t;

/* What this rank knows of one rank of the job within the current case. */
typedef struct ct_peer {
    bool reachable;
    ferry_btl_endpoint_t *ep;
    uint64_t tx_count;  /* data messages sent to it */
    uint64_t rx_count;  /* data messages received from it */
    bool fin_seen;
    uint64_t fin_count; /* what its FIN announced */
    ct_rkey_t rkey[CT_MAX_RKEYS];
    bool desc_pending; /* prepare_src_reserve: a DESC waits for its data message */
    ct_ctrl_t desc;
    uint64_t stream_next[CT_MAX_STREAMS]; /* next expected offset of each stream */
    bool stream_ended[CT_MAX_STREAMS];
    uint32_t tag_hits[FERRY_BTL_TAG_USER_MAX + 1];
} ct_peer_t;

typedef struct ct_suite ct_suite_t;

/* A case's handler of data messages: the payload, linearised. */
typedef void (*ct_rx_fn_t)(ct_suite_t *s, int peer, uint8_t tag, uint8_t slot_tag,
                           const uint8_t *data, size_t len);

/* What the transport gets as cbdata for each tag's handler. */
typedef struct ct_tag_slot {
    ct_suite_t *s;
    uint8_t tag;
} ct_tag_slot_t;

/* One operation started by the suite (send, put or get), handed to the
 * transport as the descriptor's cbdata. */
typedef struct ct_op {
    ct_suite_t *s;
    struct ct_op *next; /* on the suite's list */
    bool started;       /* the transport accepted it: a completion is due */
    ferry_btl_desc_t *des;
    ferry_btl_endpoint_t *ep;
    int peer;
    bool ownership;   /* FERRY_BTL_DES_OWNERSHIP was set: the transport frees */
    bool autofree;    /* the completion releases the op itself (fire and forget) */
    bool expect_ok;   /* a failed completion is a test failure */
    bool done;
    int status;
    int completions;  /* times the callback ran (must end at 1) */
    void *buf;        /* freed with the op when not NULL */
    ferry_btl_segment_t remote; /* storage for the remote segment when the
                                   descriptor offers none */
} ct_op_t;

typedef struct ct_deadline {
    double end;
} ct_deadline_t;

struct ct_suite {
    ferry_ctx_t *ctx;
    ferry_btl_module_t *btl;
    const ferry_btl_attr_t *attr;
    const char *transport;
    int rank;
    int size;
    int module_idx;
    ct_peer_t *peer;  /* [size] */
    int *reach;       /* the reachable ranks ... */
    int nreach;       /* ... and how many */
    ferry_btl_endpoint_t **eps; /* [size], from add_procs */
    util_bitmap_t reachable;
    ct_tag_slot_t slots[FERRY_BTL_TAG_USER_MAX + 1];

    /* The case running. */
    const char *case_name;
    uint32_t case_id;
    int case_failures;
    ct_rx_fn_t rx;
    void *case_state;

    /* Totals over the run. */
    int passed;
    int failed;
    int skipped;

    /* Call depth of initiating operations: a callback seen while it is
     * non-zero ran from inside the call that started the work. */
    int in_call;
    unsigned idle_polls; /* consecutive progress calls that did nothing */

    /* Descriptor accounting. */
    uint64_t des_alloc;    /* alloc/prepare_src/prepare_dst successes */
    uint64_t des_freed;    /* successful frees by the suite */
    uint64_t des_released; /* completions of descriptors the transport owned */
    uint64_t ops_started;
    uint64_t ops_done;
    ct_op_t *ops; /* every operation of the case */
    int errors_reported; /* error callbacks seen */

    /* Descriptors whose completion ran and which the suite still has to free;
     * freed after the progress call returns. */
    ferry_btl_desc_t **to_free;
    size_t to_free_len;
    size_t to_free_cap;

    uint8_t *rxbuf; /* linearised incoming payload, max_send_size bytes */
    size_t rxbuf_len;
};

/* ---- reporting ---------------------------------------------------------- */

/* Records a failed check of the current case (printing it with file:line)
 * and returns ok, so callers can branch on it. */
bool ct_check(ct_suite_t *s, bool ok, const char *file, int line, const char *expr,
              const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#define CT_CHECK(s, cond, ...) ct_check((s), (cond), __FILE__, __LINE__, #cond, __VA_ARGS__)

/* A status check: rc must equal want. */
#define CT_CHECK_RC(s, rc, want, what)                                                    \
    ct_check_rc((s), (rc), (want), (what), __FILE__, __LINE__)
bool ct_check_rc(ct_suite_t *s, int rc, int want, const char *what, const char *file, int line);

void ct_note(ct_suite_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- data patterns -------------------------------------------------------- */

/* A seed mixed from up to four values. */
uint64_t ct_seed(uint64_t a, uint64_t b, uint64_t c, uint64_t d);

/* Fills buf with the bytes [off, off + len) of the stream named by seed. */
void ct_fill(void *buf, size_t len, uint64_t seed, uint64_t off);

/* Index of the first byte of buf differing from the stream at off, or
 * SIZE_MAX when all match. */
size_t ct_verify(const void *buf, size_t len, uint64_t seed, uint64_t off);

/* The byte the stream has at off. */
uint8_t ct_pattern_byte(uint64_t seed, uint64_t off);

/* ---- progress and waiting ---------------------------------------------------- */

ct_deadline_t ct_deadline(void);

/* Progresses once (module and runtime) and frees completed descriptors.
 * Returns false, after reporting what was awaited, once the deadline has
 * passed. */
bool ct_step(ct_suite_t *s, ct_deadline_t *d, const char *what);

/* Progresses until every started operation has completed. */
bool ct_wait_ops(ct_suite_t *s, const char *what);

/* Progresses until op completes. */
bool ct_wait_op(ct_suite_t *s, ct_op_t *op, const char *what);

/* ---- operations -------------------------------------------------------------- */

/* A new operation, kept on the suite's list until the case finishes (so a
 * second completion of the same descriptor is caught rather than touching
 * freed memory). autofree: buf is freed when the operation completes. */
ct_op_t *ct_op_new(ct_suite_t *s, int peer, bool ownership, bool autofree);

/* Progresses once: the module, then the runtime, then frees the descriptors
 * whose completion ran. */
void ct_progress(ct_suite_t *s);

/* The completion callback every suite descriptor carries. */
void ct_comp_cb(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                int status);

/* Frees a descriptor the suite owns, checking the transport accepts it. */
bool ct_free_des(ct_suite_t *s, ferry_btl_desc_t *des);

enum ct_path {
    CT_PATH_ALLOC = 0, /* alloc, copy, send */
    CT_PATH_PREP = 1,  /* prepare_src of a contiguous convertor, reserve 0, send */
    CT_PATH_SENDI = 2  /* sendi: the first bytes as header, the rest as payload */
};

/* Sends len bytes of data to peer under tag through path, retrying (with
 * progress) while the transport says NO_RESOURCE. Failures are reported.
 * Counts a data message in tx_count when count is true. */
int ct_send(ct_suite_t *s, int peer, uint8_t tag, enum ct_path path, const void *data,
            size_t len, bool ownership, bool count);

/* Registers the suite's handler on every user tag (each tag with its own
 * slot as cbdata), and clears them all. */
void ct_register_handlers(ct_suite_t *s);
void ct_unregister_handlers(ct_suite_t *s);

/* Sends a descriptor the suite holds (src[0] filled) to peer under tag with
 * the suite's completion callback; buf is freed when it completes. On a
 * refusal the descriptor is freed and the status returned (and reported). */
int ct_send_des(ct_suite_t *s, int peer, ferry_btl_desc_t *des, uint8_t tag, bool ownership,
                void *buf, bool count);

/* Sends a control message (fills magic, case id and sender). */
int ct_send_ctrl(ct_suite_t *s, int peer, ct_ctrl_t *c);

/* Sends FIN to every reachable peer, then waits for theirs, for every data
 * message they announced and for every operation of this rank. */
bool ct_case_finish(ct_suite_t *s);

/* Sends an RKEY (slot idx) describing reg to every reachable peer (copied
 * directly for this rank), then waits until every reachable peer's RKEY of
 * that slot has arrived. */
bool ct_exchange_rkey(ct_suite_t *s, uint32_t idx, const ferry_btl_reg_t *reg);

/* Like ct_exchange_rkey with an explicit address, length and key. */
bool ct_exchange_rkey_raw(ct_suite_t *s, uint32_t idx, uint64_t addr, uint64_t len,
                          const uint8_t *key);

/* ---- RDMA helpers ----------------------------------------------------------- */

/* Starts a put of [local, local + len) to remote (addr, key) on peer: prepare_src
 * with FERRY_BTL_PREP_RDMA, the remote segment filled in, then put. On success
 * *op_out is the operation to wait for; on a refused start, *rc_out is the
 * status and *op_out NULL. Returns false when the start misbehaved (reported). */
bool ct_put_start(ct_suite_t *s, int peer, ferry_btl_reg_t *lreg, void *local, size_t len,
                  uint64_t raddr, size_t rlen, const uint8_t *key, bool ownership,
                  bool expect_ok, int *rc_out, ct_op_t **op_out);

/* As ct_put_start for a get of remote (addr, key) into local, through
 * prepare_dst. */
bool ct_get_start(ct_suite_t *s, int peer, ferry_btl_reg_t *lreg, void *local, size_t len,
                  uint64_t raddr, size_t rlen, const uint8_t *key, bool ownership,
                  bool expect_ok, int *rc_out, ct_op_t **op_out);

/* A put or get of any length, split into max_rdma_size pieces, waited for;
 * every piece must succeed. */
bool ct_put_all(ct_suite_t *s, int peer, ferry_btl_reg_t *lreg, void *local, size_t len,
                uint64_t raddr, const uint8_t *key);
bool ct_get_all(ct_suite_t *s, int peer, ferry_btl_reg_t *lreg, void *local, size_t len,
                uint64_t raddr, const uint8_t *key);

/* ---- sequenced messages ------------------------------------------------------ */

/* A message of size (>= 16) bytes: sequence number, sender, size, then a
 * pattern of (sender, seq). */
void ct_seq_build(ct_suite_t *s, uint8_t *buf, uint64_t seq, size_t size);

/* Receives them: each peer's sequence numbers must run 0, 1, 2, ... */
void ct_seq_rx(ct_suite_t *s, int peer, uint8_t tag, uint8_t slot_tag, const uint8_t *data,
               size_t len);

/* ---- the cases ------------------------------------------------------------- */

typedef enum ct_result {
    CT_RESULT_RUN = 0, /* ran; the failure count says how it went */
    CT_RESULT_SKIP = 1 /* the transport lacks what the case needs (reason printed) */
} ct_result_t;

ct_result_t ct_case_am_sizes(ct_suite_t *s);
ct_result_t ct_case_am_all_tags(ct_suite_t *s);
ct_result_t ct_case_am_order(ct_suite_t *s);
ct_result_t ct_case_back_pressure(ct_suite_t *s);
ct_result_t ct_case_desc_accounting(ct_suite_t *s);
ct_result_t ct_case_prepare_src_reserve(ct_suite_t *s);
ct_result_t ct_case_put_get(ct_suite_t *s);
ct_result_t ct_case_rdma_bounds(ct_suite_t *s);
ct_result_t ct_case_rdma_revoked(ct_suite_t *s);
ct_result_t ct_case_rdma_revoke_inflight(ct_suite_t *s);
ct_result_t ct_case_rdma_guess(ct_suite_t *s);
ct_result_t ct_case_rdma_direct(ct_suite_t *s);
ct_result_t ct_case_put_inline(ct_suite_t *s);
ct_result_t ct_case_get_inline(ct_suite_t *s);
ct_result_t ct_case_put_ordered(ct_suite_t *s);
ct_result_t ct_case_put_notify_inline(ct_suite_t *s);
ct_result_t ct_case_rdma_prepared(ct_suite_t *s);
ct_result_t ct_case_invalid_args(ct_suite_t *s);
ct_result_t ct_case_flush(ct_suite_t *s);
ct_result_t ct_case_atomic_counter(ct_suite_t *s);
ct_result_t ct_case_atomic_lock(ct_suite_t *s);
ct_result_t ct_case_atomic_by_owner(ct_suite_t *s);
ct_result_t ct_case_atomic_ops(ct_suite_t *s);
ct_result_t ct_case_atomic_refusals(ct_suite_t *s);
ct_result_t ct_case_atomic_revoke(ct_suite_t *s);

/* Starts a case's exchange: resets the per-peer state and sets the data
 * handler, then waits at a barrier (the reset comes first so that a fast
 * peer's first message finds it ready). Every case that calls it ends with
 * ct_case_finish, whatever failed in between. */
void ct_case_begin(ct_suite_t *s, ct_rx_fn_t rx, void *state);

bool ct_has(const ct_suite_t *s, uint32_t flag);

#endif /* FERRY_TESTS_CONTRACT_H */
