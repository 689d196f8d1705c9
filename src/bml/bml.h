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
 * the same bytes twice without harm), and active messages: to a peer with
 * several rails each one the API sends is kept (a copy, in order) until the
 * peer says it has handled it. When the rail they go on is lost, the sender
 * asks the peer, on the rail that took over, how many it has handled, the
 * peer stops taking anything from the lost rail and answers, and the
 * sender sends the rest again on the new rail before anything new: each
 * message is handled once, in order (the replay, below). Atomics to such a
 * peer travel as ferry's own messages (API_TAG_AMO, src/api/onesided.c),
 * so they move over with the others and are applied once (docs/bml.md).
 */
#ifndef BML_BML_H
#define BML_BML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "btl/ctx.h"
#include "rt/log.h"

/* The most paths to one peer ferry keeps. */
#define BML_MAX_PATHS 16

typedef struct bml_path {
    int m;                    /* index into ctx->modules */
    ferry_btl_endpoint_t *ep; /* that module's endpoint to the peer */
    bool down;                /* its transport reported it broken */
} bml_path_t;

/* A message kept for the replay: its tag and bytes as the API sent them. */
typedef struct bml_kept {
    struct bml_kept *next_spare; /* on the spare list while unused */
    uint8_t tag;
    bool full;  /* room for keep_max bytes: goes back to the spare list */
    size_t len;
    unsigned char data[];
} bml_kept_t;

/* Unused full-size copies kept for the next messages: a stream of large
 * messages reuses memory it has touched instead of taking fresh pages from
 * malloc for each (whose page faults and zeroing cost more than the copy).
 * At most as many bytes as one peer may have kept (a stream to a peer keeps
 * up to that much while the transport's queue and the sockets hold it), and
 * no more than BML_SPARE_IDLE once a peer has nothing kept. */
#define BML_SPARE_BYTES BML_KEEP_BYTES
#define BML_SPARE_IDLE ((size_t)8 << 20)

/* The replay's sender side, toward one peer. */
enum { BML_TX_STEADY, BML_TX_ASK, BML_TX_WAIT, BML_TX_REPLAY };

typedef struct bml_peer {
    bml_path_t path[BML_MAX_PATHS]; /* best first: exclusivity, then latency */
    int n;
    int n_live;

    /* Sender: messages kept (kept[(tx_base + i) % BML_KEEP_MAX] is number
     * tx_base + i), from the oldest the peer has not said it handled to
     * the last sent. */
    bool keeping;
    int tx_state;
    bml_kept_t **kept; /* [BML_KEEP_MAX] */
    uint64_t tx_base, tx_seq;
    size_t kept_bytes;
    uint64_t asked_at;   /* tx_seq when the last count was asked for */
    size_t kept_since_ask; /* bytes kept since then */
    bool ask_count;      /* a count is to be asked for (BML_MSG_ASK) */
    uint32_t epoch;      /* of the last replay asked for */
    uint64_t replay_next;
    int lost_told;       /* LOST messages of this round sent so far */
    uint64_t wait_since_ns; /* WAIT: when the last LOST went */

    /* Receiver: messages of the API handled from this peer, the rails it
     * has said it lost (nothing more is taken from them), and answers
     * owed to it. */
    uint64_t rx_count;
    uint64_t rx_drop; /* bit per module index */
    bool owe_count;
    bool owe_replay;
    uint32_t owe_epoch;
} bml_peer_t;

/* The most messages and bytes kept per peer; the sender asks for a count
 * every BML_ASK_EVERY messages. */
#define BML_KEEP_MAX 1024
#define BML_KEEP_BYTES ((size_t)64 << 20)
#define BML_ASK_EVERY 256
/* ... or every this many bytes kept, so that a stream of large messages
 * keeps about as many bytes as the sockets hold, not 256 messages' worth. */
#define BML_ASK_BYTES ((size_t)4 << 20)

/* The BML's own messages, between the BMLs of two ranks on the tag just
 * below the context's control tag. Every field is checked on arrival. */
#define BML_TAG (FERRY_BTL_TAG_BTL_MIN - 2)
#define BML_MSG_MAGIC 0x504c4d42u /* "BMLP" */

enum {
    BML_MSG_ASK = 1,    /* sender: how many have you handled? */
    BML_MSG_COUNT = 2,  /* receiver: this many (count) */
    BML_MSG_LOST = 3,   /* sender: I lost rail (name, instance); stop taking from it, then count */
    BML_MSG_RECOUNT = 4 /* receiver: after LOST of epoch, this many */
};

typedef struct bml_msg {
    uint32_t magic;
    uint16_t kind;
    uint8_t instance; /* LOST */
    uint8_t last;     /* LOST: 1 on the last of a round (answer it), else 0 */
    uint32_t epoch;   /* LOST, RECOUNT */
    uint32_t zero2;
    uint64_t count;   /* COUNT, RECOUNT; ASK: messages sent so far */
    char name[16];    /* LOST: the transport's name, NUL-terminated and padded */
} bml_msg_t;

/* Checks len bytes from a peer as a bml_msg_t: NULL and *out filled, or
 * why not. */
const char *bml_msg_parse(const void *data, size_t len, bml_msg_t *out);

/* What the BML does with len bytes on BML_TAG from rank src (the
 * transport's word for the sender). Malformed ones are dropped with a
 * warning; well-formed ones that break the protocol (a count beyond what
 * was sent) fail src. */
void bml_recv(ferry_ctx_t *ctx, int src, const void *data, size_t len);

struct bml {
    bml_peer_t *peers;   /* [size], built by bml_init */
    bool work;           /* some peer may have replay work for progress */
    rt_ratelimit_t bad_rl; /* complaints about malformed messages */
    uint64_t replayed;   /* messages sent again after their rail was lost */
    size_t stripe_min;   /* FERRY_BML_STRIPE_MIN */
    size_t stripe_frag;  /* FERRY_BML_STRIPE_FRAG */
    size_t keep_max;     /* FERRY_BML_KEEP_MAX_MESSAGE */
    uint64_t replay_timeout_ns; /* FERRY_BML_REPLAY_TIMEOUT */
    uint64_t failovers;  /* paths lost while another took over */
    uint64_t reissued;   /* bytes of puts and gets issued again after their rail was lost */
    uint64_t *rail_bytes; /* [n_modules]: bytes of multi-rail puts and gets handed to each */
    uint64_t asks_deferred; /* counts due that the transport could not take at once */
    bml_kept_t *spare;    /* unused full-size copies (BML_SPARE_BYTES at most) */
    size_t n_spare;
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

/* ---- the replay, at every send and receipt of the API's messages ---- */

/* Are messages to dst kept for the replay (it has several rails)? */
static inline bool bml_keeping(const ferry_ctx_t *ctx, int dst)
{
    return ctx->bml != NULL && ctx->bml->peers != NULL && ctx->bml->peers[dst].keeping;
}

/* Before a send to dst: FERRY_ERR_NO_RESOURCE while a replay is under way
 * or too much is kept (nothing may overtake it), else FERRY_OK. */
int bml_am_gate_slow(ferry_ctx_t *ctx, int dst);
static inline int bml_am_gate(ferry_ctx_t *ctx, int dst)
{
    return bml_keeping(ctx, dst) ? bml_am_gate_slow(ctx, dst) : FERRY_OK;
}

/* Keeps a copy of a message about to be sent to dst on tag: the bytes of
 * a then b (either may be empty), or of des's source segments. A send that
 * then fails is taken back with bml_am_sent. FERRY_ERR_NO_MEMORY when the
 * copy cannot be made (send nothing). */
int bml_am_keep_slow(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *a, size_t alen,
                     const void *b, size_t blen);
int bml_am_keep_des_slow(ferry_ctx_t *ctx, int dst, uint8_t tag, const ferry_btl_desc_t *des);
static inline int bml_am_keep(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *a,
                              size_t alen, const void *b, size_t blen)
{
    return bml_keeping(ctx, dst) ? bml_am_keep_slow(ctx, dst, tag, a, alen, b, blen) : FERRY_OK;
}
static inline int bml_am_keep_des(ferry_ctx_t *ctx, int dst, uint8_t tag,
                                  const ferry_btl_desc_t *des)
{
    return bml_keeping(ctx, dst) ? bml_am_keep_des_slow(ctx, dst, tag, des) : FERRY_OK;
}

/* After the send of a kept message through module m: rc is the
 * transport's answer. FERRY_OK stays kept; FERRY_ERR_UNREACH from a rail
 * that another takes over from is accepted (the replay sends it; the
 * result is FERRY_OK); any other error takes the copy back and is
 * returned. */
int bml_am_sent_slow(ferry_ctx_t *ctx, int dst, int m, int rc);
static inline int bml_am_sent(ferry_ctx_t *ctx, int dst, int m, int rc)
{
    return bml_keeping(ctx, dst) ? bml_am_sent_slow(ctx, dst, m, rc) : rc;
}

bool bml_am_rx_slow(ferry_ctx_t *ctx, const ferry_btl_module_t *btl, bml_peer_t *bp);

/* bml_am_rx when it would only count the message (true: counted), else
 * false with nothing done, for the caller to take the whole way. */
static inline bool bml_am_rx_simple(ferry_ctx_t *ctx, int src)
{
    if (ctx->bml == NULL || ctx->bml->peers == NULL)
        return true;
    bml_peer_t *bp = &ctx->bml->peers[src];
    if (bp->rx_drop != 0)
        return false;
    bp->rx_count++;
    return true;
}

/* At the receipt of one of the API's messages from src through btl: false
 * when it came on a rail src said it lost (drop it: src sends it again),
 * else counted and true. */
static inline bool bml_am_rx(ferry_ctx_t *ctx, const ferry_btl_module_t *btl, int src)
{
    return bml_am_rx_simple(ctx, src) || bml_am_rx_slow(ctx, btl, &ctx->bml->peers[src]);
}

/* Sends what the replay owes: counts asked for, losses told, messages sent
 * again. Returns events handled. */
int bml_progress(ferry_ctx_t *ctx);

/* Has rank r more than one live rail? (Only then do operations to it keep
 * what they need to move to another.) */
static inline bool bml_multi(const ferry_ctx_t *ctx, int r)
{
    return ctx->bml != NULL && ctx->bml->peers != NULL && ctx->bml->peers[r].n_live > 1;
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
