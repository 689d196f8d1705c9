/*
 * The tcp transport: active messages and emulated put/get over TCP streams.
 *
 * Each process opens one or more modules. With FERRY_TCP_MODULES=one (the
 * default) a module listens on every selected interface
 * (FERRY_TCP_IF_INCLUDE / FERRY_TCP_IF_EXCLUDE); with per-interface, one
 * module listens on each selected address. FERRY_TCP_LINKS modules are
 * opened for each of these, each with its own listeners, sockets and
 * attributes, so that a layer above can stripe over them; they share one
 * registration table (tcp_regtab_t), so a registration is made once and its
 * key is the same bytes on every module.
 * Module k publishes its addresses under its own key ("btl.tcp" for module
 * 0, "btl.tcp.<k>" for the others) and reaches a peer through one module of
 * the peer's, its partner: with one module per process (the default mode)
 * the peer's module k; per interface, the module the pairing gives
 * (tcp_pair.c): on each subnet, and for loopback on one host, the i-th
 * module of the lower rank pairs with the i-th of the higher, computed by
 * both from the modex alone, so that the module a connection reaches is the
 * partner of the one that made it. A module answers a key only for a
 * registration it holds, and every module holds what ferry_mem_register
 * registers, so the partner answers whatever key the peer's module found.
 *
 * A peer is connected on first use, with a non-blocking connect whose
 * deadline (FERRY_TCP_CONNECT_TIMEOUT) progress checks. The two sides then prove to
 * each other that they hold the job's key, which never travels
 * (tcp_hello.c): each sends a fresh nonce, the listener proves itself first
 * with a MAC over both nonces, both ranks, the job and the address dialed,
 * then the connector, then the listener says whether it keeps the
 * connection. The key comes from the job secret ferryrun gives every rank,
 * or, under other launchers, from rank 0 through the modex
 * ("btl.tcp.jobkey"). When two ranks connect to each other at once, the
 * connection the lower rank initiated is kept.
 *
 * After the hello, a connection carries frames: a 16-byte header
 * (tcp_hdr_t) and len bytes. Every field is checked before use; a bad frame
 * closes that connection and the peer is reported failed.
 *
 * Flow control is TCP's own: fragments that do not fit in the socket wait on
 * the endpoint's queue, which progress drains with writev, in order. The
 * queue has a byte budget (FERRY_TCP_SENDQ_MAX): past it alloc, prepare_src
 * and sendi say FERRY_ERR_NO_RESOURCE, so a sender cannot queue without end.
 *
 * put/get travel as messages. The target checks key, bounds and access
 * against its registration table before a byte moves, and answers every
 * request in order (PUT_ACK, GET_RESP), so the initiator matches answers with
 * the head of its list of requests in flight. Put data and get answers are
 * read from the socket straight into the destination memory. A key is the
 * registration's slot and generation and 16 random bytes drawn when it was
 * made, so it cannot be guessed from another key.
 *
 * A get answer is read from the registered memory only while it is written
 * to the socket, and the registration is looked up again each time; its
 * status comes last, so memory deregistered while its answer is still going
 * out is never read: the rest of the answer goes out as zeros and the status
 * says FERRY_ERR_ACCESS. Each peer's target-side work is bounded: a peer
 * owed more answers than an initiator may have in flight
 * (FERRY_TCP_RDMA_MAX_INFLIGHT, FERRY_TCP_SENDQ_MAX) is not read from until
 * it has taken them.
 *
 * Sockets have keepalive and TCP_USER_TIMEOUT (FERRY_TCP_USER_TIMEOUT):
 * data the peer leaves unacknowledged that long (a cut link) fails the
 * socket, and with it the endpoint.
 *
 * Deadlines: a frame whose bytes stop arriving half-way
 * (FERRY_TCP_FRAME_TIMEOUT) and a put or get the target does not answer
 * (FERRY_TCP_REQUEST_TIMEOUT) fail the peer, and everything pending to it
 * completes with an error.
 */
#ifndef BTL_TCP_H
#define BTL_TCP_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "btl/base.h"
#include "btl/base_atomic.h"
#include "btl/frag.h"
#include "rt/auth.h"
#include "rt/log.h"
#include "util/list.h"

#define TCP_MAGIC 0x317063747972726full /* "ferrytc1" */
#define TCP_VERSION 2
#define TCP_KEY_LEN RT_AUTH_KEY_LEN
#define TCP_NONCE_LEN RT_AUTH_NONCE_LEN
#define TCP_MAC_LEN RT_AUTH_MAC_LEN
#define TCP_KEY_SECRET 16
#define TCP_MAX_ADDRS 16
#define TCP_MAX_RDMA ((size_t)1 << 30)

/* Active messages at least this long are read to their end with one exact
 * read, into a receive buffer grown to hold them; shorter ones come in bulk
 * reads into a buffer that holds at least two of them. */
#define TCP_BIG_FRAME (16u * 1024u)

/* Bytes read beyond a payload or a large frame: the next frame's header and
 * RDMA body, enough to know where its payload goes before reading it. */
#define TCP_LOOKAHEAD (sizeof(tcp_hdr_t) + sizeof(tcp_rdma_body_t))

/* Checks of deadlines run on progress's tick (every 16th call while some
 * peer is not connected, else every 1024th) and at most every
 * TCP_STALL_TICK_NS, so the data path reads no clock. */
#define TCP_STALL_TICK_NS (10u * 1000u * 1000u)
/* A longer time between checks means this process did not progress: the
 * deadlines start again rather than blame the peers. */
#define TCP_STALL_GAP_NS (1000u * 1000u * 1000u)

/* Frame types. */
enum {
    TCP_T_DATA = 1,     /* active message: tag, len payload bytes */
    TCP_T_PUT = 2,      /* tcp_rdma_body_t (length unused), then the data */
    TCP_T_PUT_ACK = 3,  /* tcp_status_body_t */
    TCP_T_GET_REQ = 4,  /* tcp_rdma_body_t */
    TCP_T_GET_RESP = 5, /* the data (none when refused), then tcp_status_body_t */
    TCP_T_FIN = 6,      /* the sender finalizes: its close is no failure */
    TCP_T_AMO_REQ = 7,  /* an atomic for the target to execute: btl_amo_msg_t */
    TCP_T_AMO_ANSWER = 8, /* its answer: btl_amo_msg_t */
    TCP_T_PUTN = 9,       /* tag: a put, then an active message: tcp_putn_body_t, the
                             notification's payload, the data; cookie 0 (untracked) or
                             a request's, answered by PUT_ACK */
    TCP_T_PUTN_REFUSED = 10 /* no body: untracked PUTNs were refused */
};

typedef struct tcp_hdr {
    uint32_t len; /* bytes after this header */
    uint8_t type;
    uint8_t tag;     /* DATA only, else 0 */
    uint16_t zero;   /* must be 0 */
    uint64_t cookie; /* names an RDMA request; 0 for DATA and FIN */
} tcp_hdr_t;

/* A registration's key, as peers name it (ferry_btl_reg_t.key). */
typedef struct tcp_key {
    uint32_t slot; /* the registration's place in the table */
    uint32_t gen;  /* the slot's generation: odd while in use */
    uint8_t secret[TCP_KEY_SECRET]; /* random, drawn when it was registered */
} tcp_key_t;

typedef struct tcp_rdma_body {
    uint64_t raddr;
    uint64_t length; /* GET_REQ: bytes wanted; PUT: 0 */
    tcp_key_t key;
} tcp_rdma_body_t;

typedef struct tcp_putn_body {
    uint64_t raddr;
    tcp_key_t key;
    uint32_t plen; /* the notification's bytes, after this body */
    uint32_t zero;
} tcp_putn_body_t;

typedef struct tcp_status_body {
    int32_t status;
    uint32_t zero;
} tcp_status_body_t;

/* One published address. */
typedef struct tcp_addr_entry {
    uint8_t family; /* 4 or 6 */
    uint8_t prefix; /* netmask length */
    uint16_t port;  /* host order */
    uint8_t addr[16];
} tcp_addr_entry_t;

typedef struct tcp_addr_blob {
    uint32_t magic;
    uint16_t version;
    uint16_t count;
    tcp_addr_entry_t entry[TCP_MAX_ADDRS];
} tcp_addr_blob_t;

/* A peer's published addresses (len bytes from the modex) into *blob:
 * FERRY_ERR_PROTO unless the magic, version, count and length agree. The
 * entries' fields are checked where they are used. */
int tcp_addr_decode(const void *val, size_t len, tcp_addr_blob_t *blob);

/* The hello: four messages of one shape, in this order. */
enum {
    TCP_HELLO_OPEN = 1,   /* connector: its rank, the rank it wants, its nonce */
    TCP_HELLO_PROVE = 2,  /* listener: its nonce and its MAC (it proves itself first) */
    TCP_HELLO_ANSWER = 3, /* connector: its MAC */
    TCP_HELLO_VERDICT = 4 /* listener: whether it keeps the connection, and a MAC of that */
};
/* VERDICT status: kept; the listener keeps its own connection to us (the
 * lower rank's wins); refused for good (it saw us fail or close before). */
enum { TCP_HELLO_OK = 0, TCP_HELLO_DUP = 1, TCP_HELLO_REFUSED = 2 };
typedef struct tcp_hello {
    uint64_t magic;
    uint32_t version;
    uint8_t step;   /* TCP_HELLO_* */
    uint8_t status; /* VERDICT only, else 0 */
    uint16_t zero;
    int32_t from;   /* the sender's rank */
    int32_t to;     /* the rank it talks to */
    int32_t size;   /* ranks in the job */
    uint32_t zero2;
    uint64_t job;   /* FNV-1a of the job's id, to name a hello from another job */
    uint8_t nonce[TCP_NONCE_LEN]; /* OPEN and PROVE, else zero */
    uint8_t mac[TCP_MAC_LEN];     /* PROVE, ANSWER and VERDICT, else zero */
} tcp_hello_t;

/* What both ends of one hello agree on; every MAC covers all of it. */
typedef struct tcp_session {
    int32_t rank_c, rank_l; /* connector, listener */
    uint8_t nonce_c[TCP_NONCE_LEN], nonce_l[TCP_NONCE_LEN];
    tcp_addr_entry_t at;    /* the listener's address, as the connector dialed it */
} tcp_session_t;

/* What an incoming hello must be. from < 0: any rank of the job but me. */
typedef struct tcp_hello_want {
    uint8_t step;
    int32_t from, me, size;
    uint64_t job;
} tcp_hello_want_t;

/* What an epoll event points to. */
typedef enum { TCP_POLL_LISTENER, TCP_POLL_CONN, TCP_POLL_EP } tcp_poll_kind_t;
typedef struct tcp_pollable {
    tcp_poll_kind_t kind;
    int fd;
} tcp_pollable_t;

typedef struct tcp_module tcp_module_t;

/* An accepted socket before its hello has completed. */
typedef struct tcp_conn {
    tcp_pollable_t poll;
    util_list_item_t link; /* in mod->conns, oldest first */
    uint64_t deadline_ns;
    tcp_addr_entry_t peer; /* family and address (no port): for the per-address limit */
    tcp_addr_entry_t at;   /* the listener's address, which the connector dialed */
    uint8_t want;          /* the step expected next: OPEN, then ANSWER */
    tcp_session_t session;
    tcp_hello_t hello;     /* being read */
    size_t got;
    char from[64]; /* the peer's address, for the log */
} tcp_conn_t;

/* NEW: no socket. CONNECTING: connect in flight. HELLO: the hello under
 * way (hello_want says which message is expected). WAIT: the peer keeps its own connection to us (it has the
 * lower rank); waiting for it. RETRY: the peer closed our connection before
 * the hello completed (it had no room for one more, or evicted it); we
 * connect again at retry_at_ns. CLOSED: the peer finalized. */
typedef enum {
    TCP_EP_NEW,
    TCP_EP_CONNECTING,
    TCP_EP_HELLO,
    TCP_EP_WAIT,
    TCP_EP_RETRY,
    TCP_EP_CONNECTED,
    TCP_EP_FAILED,
    TCP_EP_CLOSED
} tcp_ep_state_t;

/* What the receive side is doing with the bytes after a header. */
typedef enum {
    TCP_RX_FRAMES,  /* parsing frames from the buffer */
    TCP_RX_DIRECT,  /* reading payload straight into rx_dst */
    TCP_RX_DISCARD  /* skipping payload of a refused put */
} tcp_rx_mode_t;

struct ferry_btl_endpoint {
    tcp_pollable_t poll;
    tcp_module_t *mod;
    int rank;
    int peer_module; /* the rank's module this one pairs with (tcp_pair_partner) */
    tcp_ep_state_t state;
    bool deleted;  /* del_procs ran: refuse new work until added again */
    bool in_epoll;
    uint32_t events; /* registered epoll events */
    /* Connecting. */
    tcp_addr_entry_t cand[TCP_MAX_ADDRS]; /* the peer's addresses, best first */
    int ncand;
    int icand;
    uint64_t deadline_ns;
    bool retry_wanted;    /* an address closed our connection during the hello */
    unsigned retries;
    uint64_t retry_at_ns;
    util_list_item_t connecting_link; /* in mod->connecting while a deadline runs */
    bool connecting_listed;
    tcp_session_t session;
    uint8_t hello_want;   /* PROVE, then VERDICT */
    tcp_hello_t hello_rx;
    size_t hello_got;
    tcp_hello_t hello_tx;
    size_t hello_sent;
    /* Sending. */
    util_list_t queue;    /* fragments to write, in order; the head may be partial */
    size_t queued_bytes;  /* wire bytes in queue not yet written */
    util_list_t rdma_wait; /* puts and gets written, waiting for their answer */
    size_t rdma_inflight;  /* puts and gets not yet completed */
    size_t get_inflight_bytes; /* bytes of the gets among them */
    /* Target side: answers queued to this peer and not yet written, and the
     * data bytes of the get answers among them. */
    size_t owed;
    size_t owed_bytes;
    bool rx_paused;        /* the peer is owed too much: its socket is not read */
    bool resume_listed;    /* in mod->resume: parse again once progress runs */
    util_list_item_t resume_link;
    bool sending;          /* in mod->sending */
    util_list_item_t sending_link;
    bool hot;              /* in mod->hot: polled with recv directly */
    int sndbuf;            /* SO_SNDBUF as last read, for sendi_room */
    size_t spilled_bytes;  /* inline-send bytes copied after a partial write */
    /* Receiving. */
    unsigned char *rx;
    size_t rx_cap, rx_len, rx_off;
    tcp_rx_mode_t rx_mode;
    unsigned char *rx_dst;
    size_t rx_left;
    uint8_t rx_type;       /* PUT or GET_RESP being read directly */
    uint64_t rx_cookie;
    int32_t rx_status;
    uint32_t rx_slot;      /* PUT: the registration written to */
    btl_frag_t *rx_frag;   /* GET_RESP: the get being answered */
    bool rx_trailer;       /* GET_RESP: its data is in; its status comes next */
    bool rx_after_direct;  /* the last read ended a payload read directly */
    /* Deadlines, checked every few progress calls (tcp_check_stalls). */
    uint64_t rx_total;     /* bytes received */
    uint64_t tx_total;     /* bytes written from the queue */
    uint64_t answers;      /* answers received to our puts and gets */
    uint64_t rx_seen, tx_seen, answers_seen; /* the counts at the last check */
    uint64_t rx_since_ns;  /* since when no byte of a partial frame came */
    uint64_t req_since_ns; /* since when no request of ours moved */
    /* The failure's report, numbered (mod->report_seq); delivered once the
     * module's reports_done reaches it. */
    uint64_t report_seq;
    /* Atomics, executed by the target (base_atomic.h). */
    btl_amo_ep_t amo;
    /* Untracked puts with notification (put_notify_inline): whom a refusal
     * is told to (NULL: none sent), and, at the target, that a refusal
     * frame waits in the queue already (one says it for all). */
    ferry_btl_rdma_cb_t putn_cb;
    void *putn_cbctx;
    bool putn_refusal_queued;
};

/* A frame of our own (an RDMA answer, FIN, or the rest of a sendi that did
 * not fit), queued like a fragment: frag.op is TCP_OP_CTL. The header and
 * body are in bytes[]. A get answer's data_len bytes follow, read from the
 * registration (slot, gen) at raddr only while they are written, then its
 * status (trailer). */
typedef struct tcp_ctl {
    btl_frag_t frag;
    size_t hlen;
    size_t data_len;
    uint64_t raddr;
    uint32_t slot, gen;
    bool answer;  /* counts in the endpoint's owed answers */
    bool revoked; /* the registration went away: the rest is zeros */
    bool has_trailer;
    bool putn_refusal; /* a TCP_T_PUTN_REFUSED (ep->putn_refusal_queued) */
    tcp_status_body_t trailer;
    unsigned char bytes[];
} tcp_ctl_t;

/* Operation codes in btl_frag_t.op. */
enum { TCP_OP_SEND, TCP_OP_PUT, TCP_OP_GET, TCP_OP_CTL, TCP_OP_PUTN };

/* Modules one process can open: a module per address, FERRY_TCP_LINKS
 * (at most 8) of each. */
#define TCP_MAX_MODULES (TCP_MAX_ADDRS * 8)
/* Room for a module's modex key, "btl.tcp.<index>". */
#define TCP_MODEX_KEY_LEN 24
#define TCP_HOLDER_WORDS ((TCP_MAX_MODULES + 63) / 64)

/* A registration, shared by the tcp modules that registered its range: the
 * first module's register_mem makes it, each other module's takes a
 * reference (a bit in holders), and the last deregistration frees it. Every
 * module hands out the same handle, so its key is the same bytes on all. */
typedef struct tcp_reg {
    ferry_btl_reg_t base;
    uint32_t magic;
    tcp_key_t key;    /* also in base.key */
    uint32_t nholders;
    uint64_t holders[TCP_HOLDER_WORDS]; /* by module index */
    uint64_t serial;  /* the order it was made in, newest highest */
} tcp_reg_t;

/* The registration table of all tcp modules of one process (tcp_open makes
 * it, each module holds a reference). A peer's key names a slot of it,
 * whichever module the request comes through, and that module must hold
 * the registration. Single-threaded as the modules are. */
typedef struct tcp_regtab {
    unsigned refs;            /* modules attached, and tcp_open while it runs */
    size_t slots;             /* FERRY_TCP_REG_SLOTS */
    size_t hi;                /* no slot at or past it has ever been used */
    tcp_reg_t **regs;
    uint32_t *gen;
    tcp_module_t *mods[TCP_MAX_MODULES]; /* attached, by index: to detach puts */
    uint64_t made;            /* registrations made (not references taken) */
    size_t live;              /* registrations alive */
    /* Random bytes for keys, drawn from getrandom a pool at a time. */
    uint8_t key_pool[16 * TCP_KEY_SECRET];
    size_t key_pool_left;
} tcp_regtab_t;

typedef struct tcp_params {
    const char *if_include;
    const char *if_exclude;
    long long connect_timeout_ms;
    size_t pending_max, pending_per_addr;
    long long frame_timeout_ms;   /* 0: none */
    long long request_timeout_ms; /* 0: none */
    size_t rdma_max_inflight;
    size_t eager_limit;
    size_t max_send_size;
    size_t sendq_max;
    size_t rx_buffer;
    size_t sndbuf, rcvbuf; /* SO_SNDBUF / SO_RCVBUF; 0: the kernel's autotuning */
    long long keepalive_time, keepalive_intvl, keepalive_probes;
    long long poll_direct;
    size_t reg_slots;
    size_t free_list_num, free_list_max, free_list_inc;
    size_t atomic_slots;
    const char *modules;       /* FERRY_TCP_MODULES: "one" or "per-interface" */
    bool per_interface;        /* modules == "per-interface" */
    long long links;           /* FERRY_TCP_LINKS: modules per address (or per process) */
    long long user_timeout_ms; /* TCP_USER_TIMEOUT; 0: the kernel's */
} tcp_params_t;

/* One selected local address (tcp_module.c chooses them at open). */
typedef struct tcp_local_addr {
    tcp_addr_entry_t addr;
    char ifname[32];
} tcp_local_addr_t;

typedef struct tcp_listener {
    tcp_pollable_t poll;
    tcp_addr_entry_t addr;
    char ifname[32];
} tcp_listener_t;

typedef struct tcp_pairs tcp_pairs_t;

struct tcp_module {
    ferry_btl_module_t super;
    tcp_params_t p;
    /* This module among the process's tcp modules: its modex key (key) and
     * its instance in remote keys. It reaches a peer through one module of
     * the peer's only, its partner (tcp_pair_partner). */
    int index;
    int link;          /* which of FERRY_TCP_LINKS on its addresses */
    bool eager_reach;  /* add_procs reads each peer's address to tell reach */
    char key[TCP_MODEX_KEY_LEN]; /* "btl.tcp" or "btl.tcp.<index>" */
    tcp_pairs_t *pairs; /* per-interface: the pairing, shared by the modules */
    int epfd;
    tcp_listener_t listeners[TCP_MAX_ADDRS];
    int nlisteners;
    /* Our addresses with their netmasks, for choosing a peer's address. */
    tcp_addr_entry_t local[TCP_MAX_ADDRS];
    int nlocal;
    uint8_t jobkey[TCP_KEY_LEN];
    bool have_jobkey;
    const char *job_id;    /* rt_modex_job_id, which the MACs cover */
    uint64_t job_hash;     /* tcp_job_hash(job_id), in every hello */
    rt_ratelimit_t refuse_rl; /* log lines about refused and evicted connections */
    int nranks;
    ferry_btl_endpoint_t **eps; /* by rank, made on first use */
    bool *same_host;            /* by rank, from add_procs */
    util_list_t conns;      /* accepted sockets waiting for their hello, oldest first */
    uint64_t evicted;       /* of those, closed to make room for newer ones */
    util_list_t evicted_conns; /* closed, to be freed after the epoll batch */
    util_list_t connecting; /* endpoints with a deadline */
    util_list_t sending;    /* endpoints with queued bytes */
    util_list_t completed;  /* fragments whose completion is due */
    /* Failures reported (btl_base_report_error queues them for progress)
     * and those delivered; ep->report_seq names an endpoint's. */
    uint64_t report_seq, reports_done;
    util_list_t resume;     /* endpoints no longer paused, to parse again */
    ferry_btl_endpoint_t **hot; /* connected endpoints, polled directly */
    int nhot;
    btl_frags_t frags;
    btl_amo_module_t amo;
    tcp_regtab_t *tab; /* shared with the process's other tcp modules */
    uint64_t stall_scan_ns; /* when the deadlines were last checked */
    uint64_t next_cookie;
    uint32_t progress_calls;
    bool finalizing;
};


/* tcp_hello.c */
uint64_t tcp_job_hash(const char *job_id);
/* The transport's key from the job secret the launcher gave. */
int tcp_jobkey_derive(const uint8_t secret[TCP_KEY_LEN], uint8_t key_out[TCP_KEY_LEN]);
/* A hello message of that step with every other field zero. */
void tcp_hello_fill(tcp_hello_t *h, uint8_t step, int32_t from, int32_t to, int32_t size,
                    uint64_t job);
/* Checks every field of an incoming hello but its MAC: NULL when it is as
 * w says, else what is wrong with it. */
const char *tcp_hello_check(const tcp_hello_t *h, const tcp_hello_want_t *w);
/* The MAC a message of step (PROVE, ANSWER or VERDICT with status) of the
 * session carries. */
int tcp_hello_mac(const uint8_t key[TCP_KEY_LEN], const char *job_id, int32_t size,
                  const tcp_session_t *s, uint8_t step, uint8_t status,
                  uint8_t mac_out[TCP_MAC_LEN]);
/* Whether h carries the MAC its step and status call for (compared in
 * constant time); an OPEN never does. */
bool tcp_hello_proves(const uint8_t key[TCP_KEY_LEN], const char *job_id, int32_t size,
                      const tcp_session_t *s, const tcp_hello_t *h);

/* tcp_pair.c: addresses, and which of a peer's modules each of ours
 * pairs with. */
/* Whether a peer may be dialed at e: family 4 or 6, a port, and a prefix
 * no longer than the family's addresses. */
bool tcp_addr_usable(const tcp_addr_entry_t *e);
bool tcp_addr_is_loopback(const tcp_addr_entry_t *e);
/* Whether a and b (of one family) agree in their first prefix bits. */
bool tcp_addr_same_subnet(const tcp_addr_entry_t *a, const tcp_addr_entry_t *b,
                          unsigned prefix);
/* Whether a module on a reaches a module on b, per interface: the same
 * family, and both loopback on one host, or neither loopback and on one
 * subnet over the shorter of their two prefixes. Symmetric in a and b. */
bool tcp_addr_reaches(const tcp_addr_entry_t *a, const tcp_addr_entry_t *b, bool same_host);
/* Module index's modex key: "btl.tcp" for 0, else "btl.tcp.<index>". */
void tcp_modex_key(int index, char key_out[TCP_MODEX_KEY_LEN]);

/* One process's modules as the pairing sees them: mods[k] is what module
 * k published (tcp_addr_decode; count 0 when it did not decode). */
typedef struct tcp_pair_side {
    int nmods; /* at most TCP_MAX_MODULES; more are not looked at */
    const tcp_addr_blob_t *mods;
} tcp_pair_side_t;
/* Pairs the modules of the lower rank (lo) with those of the higher (hi):
 * in lo's order, each takes the first of hi's modules not yet taken that
 * it reaches (tcp_addr_reaches, any address of one with any of the
 * other's). On each subnet the i-th module of one pairs with the i-th of
 * the other, and a module left over pairs with none. lo_out[i] is the
 * module of hi paired with lo's module i, hi_out[j] that of lo paired with
 * hi's j; -1 for none (each with room for its side's nmods). Both ranks
 * compute it alike from the same bytes: it depends on nothing else. */
void tcp_pair_match(const tcp_pair_side_t *lo, const tcp_pair_side_t *hi, bool same_host,
                    int16_t *lo_out, int16_t *hi_out);
/* The pairing of a process's per-interface modules with each peer's,
 * computed on first use from the modex and kept (one for all the modules,
 * like the registration table). Single-threaded as the modules are. */
int tcp_pairs_create(int nranks, int nmods, tcp_pairs_t **pairs_out);
void tcp_pairs_attach(tcp_pairs_t *pairs, tcp_module_t *mod);
void tcp_pairs_release(tcp_pairs_t *pairs);
/* The module of rank's process that mod pairs with: mod->index with
 * FERRY_TCP_MODULES=one (whether the peer has it, tcp_ep_load_candidates
 * finds out), the pairing's answer per interface; -1 for none. */
int tcp_pair_partner(tcp_module_t *mod, int rank);

/* tcp_endpoint.c */
/* Sets FERRY_TCP_SNDBUF and FERRY_TCP_RCVBUF on a socket (when not 0). */
void tcp_set_bufs(tcp_module_t *mod, int fd);
ferry_btl_endpoint_t *tcp_ep_get(tcp_module_t *mod, int rank);
/* Reads the address of the peer's module this one pairs with
 * (tcp_pair_partner) into ep's candidates, best first, keeping only those
 * this module may use: FERRY_ERR_UNREACH when no module pairs with this
 * one, none is left or the peer published none, FERRY_ERR_PROTO when its
 * address is malformed. */
int tcp_ep_load_candidates(tcp_module_t *mod, ferry_btl_endpoint_t *ep);
void tcp_ep_free(tcp_module_t *mod, ferry_btl_endpoint_t *ep);
int tcp_ep_connect(tcp_module_t *mod, ferry_btl_endpoint_t *ep);
int tcp_ep_connect_progress(tcp_module_t *mod, ferry_btl_endpoint_t *ep);
void tcp_ep_fail(tcp_module_t *mod, ferry_btl_endpoint_t *ep, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void tcp_ep_peer_closed(tcp_module_t *mod, ferry_btl_endpoint_t *ep);
int tcp_ep_set_events(tcp_module_t *mod, ferry_btl_endpoint_t *ep, uint32_t events);
int tcp_check_deadlines(tcp_module_t *mod);
int tcp_accept(tcp_module_t *mod, tcp_listener_t *l);
int tcp_conn_progress(tcp_module_t *mod, tcp_conn_t *conn);
void tcp_conn_close(tcp_module_t *mod, tcp_conn_t *conn);
/* Frees the connections evicted while an epoll batch was handled. */
void tcp_conn_reap(tcp_module_t *mod);
/* The job's key: from the launcher's secret, else rank 0's in the modex. */
int tcp_load_jobkey(tcp_module_t *mod);
/* At open: rank 0 draws and publishes a key when the launcher gave no
 * secret (hydra, Slurm, mpirun: their channel is trusted as it is). */
int tcp_jobkey_publish(tcp_module_t *mod);
/* Queues FIN to a connected peer and starts writing it. */
void tcp_ep_goodbye(tcp_module_t *mod, ferry_btl_endpoint_t *ep);

/* Whether the endpoint's failure is not yet in the error callback's hands:
 * until it is, new work is taken and fails after it, so that no caller
 * learns of a failure before its error callback does. */
static inline bool tcp_ep_report_pending(const tcp_module_t *mod, const ferry_btl_endpoint_t *ep)
{
    return ep->report_seq > mod->reports_done;
}

/* tcp_io.c */
void tcp_complete(tcp_module_t *mod, btl_frag_t *frag, int status);
void tcp_enqueue(tcp_module_t *mod, ferry_btl_endpoint_t *ep, btl_frag_t *frag, size_t wire);
size_t tcp_frag_wire_len(const btl_frag_t *frag);
int tcp_push(tcp_module_t *mod, ferry_btl_endpoint_t *ep);
int tcp_recv(tcp_module_t *mod, ferry_btl_endpoint_t *ep);
/* Takes bytes as if they had come from the endpoint's socket, through the
 * same receive path as tcp_recv (for the fuzz harness: no socket needed);
 * returns how many it took (fewer once the endpoint failed or paused). */
size_t tcp_rx_feed(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const unsigned char *bytes,
                   size_t len);
int tcp_sendi_now(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const void *header,
                  size_t header_len, const void *payload, size_t payload_len, uint8_t tag);
/* tcp_sendi_now of a frame of any type (h.len filled in here) whose body
 * is up to three parts. */
int tcp_send_frame(tcp_module_t *mod, ferry_btl_endpoint_t *ep, tcp_hdr_t h,
                   const struct iovec *parts, int nparts);
int tcp_queue_ctl(tcp_module_t *mod, ferry_btl_endpoint_t *ep, const tcp_hdr_t *hdr,
                  const void *body, size_t body_len);
/* Fails peers whose half-received frame or unanswered request ran out of
 * time (FERRY_TCP_FRAME_TIMEOUT, FERRY_TCP_REQUEST_TIMEOUT). */
int tcp_check_stalls(tcp_module_t *mod);
/* Starts the deadlines of a newly connected endpoint. */
void tcp_stall_reset(ferry_btl_endpoint_t *ep);
/* Parses what a paused endpoint has buffered once it is owed less. */
int tcp_resume(tcp_module_t *mod);
void tcp_fail_pending(tcp_module_t *mod, ferry_btl_endpoint_t *ep, int status);
void tcp_hot_add(tcp_module_t *mod, ferry_btl_endpoint_t *ep);
void tcp_hot_remove(tcp_module_t *mod, ferry_btl_endpoint_t *ep);

/* tcp_rdma.c */
int tcp_put(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des);
int tcp_get(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des);
/* ferry_btl_ops.target_resolve, and the atomics' resolve hook: a peer's key
 * against our own registrations. */
int tcp_target_resolve(ferry_btl_module_t *btl, const uint8_t *keybytes, uint64_t addr,
                       size_t len, uint32_t need, void **ptr_out);
int tcp_register_mem(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *base, size_t len,
                     uint32_t access, ferry_btl_reg_t **reg_out);
int tcp_deregister_mem(ferry_btl_module_t *btl, ferry_btl_reg_t *reg);
/* Atomics: a request frame the target executes against its registration
 * table and answers in order (base_atomic.h's generic path, carried as
 * TCP_T_AMO_REQ / TCP_T_AMO_ANSWER frames). */
extern const btl_amo_hooks_t tcp_amo_hooks;
int tcp_atomic_op(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, uint64_t raddr,
                  const uint8_t *rkey, ferry_btl_atomic_op_t op, uint64_t operand,
                  uint32_t flags, ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata);
int tcp_atomic_fop(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                   uint64_t raddr, ferry_btl_reg_t *lreg, const uint8_t *rkey,
                   ferry_btl_atomic_op_t op, uint64_t operand, uint32_t flags,
                   ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata);
int tcp_atomic_cswap(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                     uint64_t raddr, ferry_btl_reg_t *lreg, const uint8_t *rkey,
                     uint64_t compare, uint64_t value, uint32_t flags, ferry_btl_rdma_cb_t cb,
                     void *cbctx, void *cbdata);
/* tcp_io.c: the generic path's send hook. */
int tcp_amo_send(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const btl_amo_msg_t *msg);
/* The registration a key names if [addr, addr+len) lies inside it with need
 * rights; FERRY_ERR_ACCESS otherwise. */
int tcp_reg_lookup(tcp_module_t *mod, const tcp_key_t *key, uint64_t addr, size_t len,
                   uint32_t need, tcp_reg_t **reg_out);
/* Whether the registration (slot, gen) still exists. */
static inline bool tcp_reg_alive(const tcp_module_t *mod, uint32_t slot, uint32_t gen)
{
    const tcp_regtab_t *tab = mod->tab;
    return slot < tab->slots && tab->gen[slot] == gen && tab->regs[slot] != NULL;
}
/* The shared table: made with tcp_open's reference, attach and detach per
 * module (detach drops the module's hold on every registration and frees
 * the table with its last reference). */
int tcp_regtab_create(size_t slots, tcp_regtab_t **tab_out);
void tcp_regtab_attach(tcp_regtab_t *tab, tcp_module_t *mod);
void tcp_regtab_detach(tcp_regtab_t *tab, tcp_module_t *mod);
void tcp_regtab_release(tcp_regtab_t *tab);

#endif /* BTL_TCP_H */
