/*
 * ferryrun's state, shared by its parts: the job (ferryrun.c: options,
 * starting ranks, the event loop, exits; fr_job.c: ending the job, rate-
 * limited complaints), the hosts (fr_hosts.c: the host list, placing ranks,
 * the launch agent's command line, the TCP listener), the PMI-1 server
 * (fr_pmi.c: requests; fr_accept.c: remote ranks' connections and their
 * authentication; fr_kvs.c: the key-value store, its owners and quotas)
 * and output forwarding (fr_output.c).
 *
 * ferryrun is a standalone program: it does not link the ferry library, so
 * it can launch and test the library while the library itself is broken.
 * It compiles three small self-contained files of it (src/rt/auth.c for
 * libsodium, log.c and status.c for the rate limiter) and links libsodium.
 * Everything hangs off one fr_job_t that main() owns; one thread runs one
 * poll() loop, so nothing here is locked.
 */
#ifndef FERRYRUN_H
#define FERRYRUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rt/auth.h"
#include "rt/log.h"

/* Most ranks one ferryrun starts: each costs three descriptors here. */
#define FR_NP_MAX 4096
/* Longest PMI request line accepted from a rank. Clients keep theirs within
 * 1024 bytes; the margin tolerates slightly different ones. */
#define FR_PMI_LINE_MAX 4096
/* Limits announced to clients, as hydra announces them (NUL included). */
#define FR_PMI_KVSNAME_MAX 256
#define FR_PMI_KEYLEN_MAX 64
#define FR_PMI_VALLEN_MAX 1024
/* Most answer bytes queued for a rank that does not read them: beyond it
 * the rank is misbehaving and its PMI connection is closed. */
#define FR_PMI_OUTQ_MAX ((size_t)1 << 20)
/* The key-value store's quotas, per rank, so that no rank fills it at the
 * others' cost: bytes (key, value and FR_KV_OVERHEAD per key), keys, and
 * revisions (puts that replace a value the rank stored before). A rank's
 * byte quota is its share of FR_KVS_BYTES_MAX, kept between the _MIN and
 * _MAX below; one 16 MiB ferry value (the modex's largest) fits in the
 * largest share. */
#define FR_KVS_BYTES_MAX ((size_t)1 << 30)
#define FR_KVS_RANK_BYTES_MAX ((size_t)32 << 20)
#define FR_KVS_RANK_BYTES_MIN ((size_t)1 << 20)
#define FR_KVS_RANK_KEYS_MAX 32768
#define FR_KVS_RANK_REVISIONS_MAX 4096
#define FR_KV_OVERHEAD 64
#define FR_KVS_BUCKETS_MIN 1024
/* Longest partial line held per output stream before it is written out as
 * a line of its own, and longest time it is held. */
#define FR_LINE_MAX 65536
#define FR_STALE_MS 200
/* Most TCP connections accepted and not yet authenticated at a time, and
 * how long one may stay so: anyone who reaches the port can connect, and
 * must not be able to exhaust descriptors or hold them. When all are taken
 * the oldest is closed for the newcomer: a genuine rank proves itself
 * within a round trip, so a stranger holding slots cannot keep it out (the
 * client tries again if it is cut short anyway). */
#define FR_PENDING_MAX 64
#define FR_PENDING_MS 10000
/* Longest host name in a host list. */
#define FR_HOST_MAX 255

/* One entry of --host or --hostfile. */
typedef struct fr_host {
    char name[FR_HOST_MAX + 1];
    int slots;
    bool local; /* this host: its ranks are forked here */
} fr_host_t;

/* Where a pending connection is in the handshake (rt/auth.h). */
typedef enum {
    FR_PENDING_INITACK, /* waiting for cmd=initack */
    FR_PENDING_PROOF,   /* challenge sent, waiting for cmd=auth_response */
} fr_pending_state_t;

/* A TCP connection to the PMI server that has not proved which rank it is. */
typedef struct fr_pending {
    int fd; /* -1: free slot */
    char in[FR_PMI_LINE_MAX];
    size_t in_len;
    long long since_ms;
    char peer[64]; /* the address it came from, for messages */
    fr_pending_state_t state;
    long pmiid; /* what the initack claimed */
    uint8_t cnonce[RT_AUTH_NONCE_LEN];
    uint8_t snonce[RT_AUTH_NONCE_LEN];
} fr_pending_t;

typedef struct fr_kv {
    char *key;
    char *val;
    int owner; /* the rank that put it first */
    struct fr_kv *next;
} fr_kv_t;

/* What one rank has stored, against its quotas. */
typedef struct fr_kvs_usage {
    size_t bytes;
    size_t keys;
    size_t revisions;
} fr_kvs_usage_t;

typedef struct fr_kvs {
    fr_kv_t **buckets;
    size_t n_buckets; /* a power of two; doubles as keys are added */
    size_t n_keys;
    size_t bytes;
    int np;
    /* Each rank's quotas, from the FR_KVS_RANK_* limits (fr_kvs_init). */
    size_t rank_bytes_max;
    size_t rank_keys_max;
    size_t rank_revisions_max;
    fr_kvs_usage_t *usage; /* per rank */
} fr_kvs_t;

/* A PMI request split into key=value tokens, pointing into its line. */
#define FR_TOKENS_MAX 16
typedef struct fr_req {
    int n;
    const char *key[FR_TOKENS_MAX];
    const char *val[FR_TOKENS_MAX];
} fr_req_t;

/* How remote ranks get the job's secret: in the launch agent's environment
 * (agents that pass it on, such as `ip netns exec`), or as the first line
 * of the agent's standard input (ssh and rsh, which pass no environment). */
typedef enum { FR_SECRET_AUTO, FR_SECRET_ENV, FR_SECRET_STDIN } fr_secret_via_t;

/* ferryrun's standard input forwarded to a remote rank 0 whose agent's
 * standard input also carried the secret. */
typedef struct fr_stdin {
    int out_fd; /* write end of the agent's standard input; -1: none or done */
    bool in_eof; /* ferryrun's standard input ended */
    char buf[4096];
    size_t len, off;
} fr_stdin_t;

/* One of a rank's output streams, forwarded to ferryrun's own. */
typedef struct fr_stream {
    int fd;     /* read end of the rank's pipe; -1 after end of file */
    int out_fd; /* STDOUT_FILENO or STDERR_FILENO */
    char *partial; /* the unfinished last line */
    size_t partial_len;
    long long partial_ms; /* when the held partial line began to wait */
} fr_stream_t;

typedef struct fr_rank {
    int rank;
    pid_t pid; /* 0 until started */
    time_t started; /* wall-clock second the rank was forked */
    bool reaped;
    int wstatus;
    int cpu; /* --bind-to core: the CPU to bind to, else -1 */
    int host; /* index into job->hosts, or -1 when no host list was given */
    bool remote; /* started through the launch agent; pid is the agent's */
    fr_stream_t out;
    fr_stream_t err;

    /* PMI connection */
    int pmi_fd; /* -1 when closed */
    char in[FR_PMI_LINE_MAX];
    size_t in_len;
    char *outq; /* answers not yet written */
    size_t outq_len;
    size_t outq_cap;
    bool in_barrier;
    bool finalized;
    long long pmi_closed_ms; /* when the connection closed without finalize, else 0 */
    rt_ratelimit_t complaints; /* messages about this rank's bad requests */
} fr_rank_t;

typedef struct fr_opts {
    int np;
    bool bind_core;
    bool tag_output;
    bool keep_going; /* a failed rank does not end the job */
    double timeout_s; /* 0: none */
    char **xvars; /* -x arguments, as given */
    int n_xvars;
    char **argv;  /* the program and its arguments */
    const char *host_list;    /* --host, as given */
    const char *hostfile;     /* --hostfile */
    const char *launch_agent; /* --launch-agent; "ssh" by default */
    const char *pmi_addr;     /* --pmi-addr or FERRYRUN_PMI_ADDR */
    fr_secret_via_t agent_secret; /* --agent-secret */
} fr_opts_t;

typedef struct fr_job {
    fr_opts_t opt;
    char job_id[64];
    /* The job's secret: every rank gets it (never on a command line), and a
     * remote rank must prove it to connect. */
    uint8_t secret[RT_AUTH_KEY_LEN];
    char secret_hex[RT_AUTH_HEX_LEN + 1];
    fr_rank_t *ranks;
    int n_barrier; /* ranks waiting in the current barrier */
    fr_kvs_t kvs;
    fr_host_t *hosts; /* the host list; NULL without one */
    int n_hosts;
    int n_remote; /* ranks started through the launch agent */

    /* Remote ranks reach the PMI server over TCP: the listener, the address
     * they are told (PMI_PORT) and connections not yet identified. */
    int listen_fd; /* -1 when there are no remote ranks */
    char pmi_port[FR_HOST_MAX + 16];
    fr_pending_t pending[FR_PENDING_MAX];
    rt_ratelimit_t refusals; /* messages about refused connections */
    fr_stdin_t stdin_fwd;
    bool stdout_broken; /* our stdout or stderr refused writes: output is dropped */
    bool stderr_broken;

    /* Ending the job: once a failure decides the exit code, the ranks are
     * sent SIGTERM and, after a grace period, SIGKILL. */
    bool ending;
    int exit_code;
    int first_failure; /* --keep-going: the status of the first failed rank, else 0 */
    long long term_ms; /* when SIGTERM went out */
    bool killed;       /* SIGKILL went out */
} fr_job_t;

/* ---- fr_job.c ---- */
long long fr_now_ms(void);

/* Sends sig to every rank started and not yet reaped. */
void fr_signal_ranks(fr_job_t *job, int sig);

/* Decides the job's exit code (if not decided yet) and starts killing it. */
void fr_job_fail(fr_job_t *job, int exit_code);

/* Prints "ferryrun: MESSAGE" through a limiter: the first few of a burst,
 * then only a count (rt/log.h). */
void fr_complain(rt_ratelimit_t *rl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints how many messages rl held back, if any, as "ferryrun: N more
 * WHAT not shown". */
void fr_complain_flush(rt_ratelimit_t *rl, const char *what);

/* ---- fr_hosts.c ---- */
/* Reads --host or --hostfile into job->hosts. Returns 0, or prints why and
 * returns the status to exit with. */
int fr_hosts_load(fr_job_t *job);
/* Places ranks on the hosts in order, each host taking up to its slots;
 * -n 0 (not given) means every slot. Prints why and returns the exit status
 * when the ranks do not fit, else 0. */
int fr_hosts_place(fr_job_t *job);
/* The launch agent's command line for a remote rank, NULL-terminated and
 * malloc'd (one block; free it whole), or NULL when out of memory. */
char **fr_agent_argv(const fr_job_t *job, const fr_rank_t *r);
/* Whether remote ranks get the secret on the agent's standard input (the
 * --agent-secret choice, or by default for agents whose remote side is a
 * shell: ssh, rsh). */
bool fr_agent_secret_stdin(const fr_job_t *job);
/* Chooses the address remote ranks are told and opens the listener. */
int fr_pmi_listen(fr_job_t *job);

/* ---- fr_accept.c ---- */
/* The listener is readable: accepts what is waiting. */
void fr_pmi_accept(fr_job_t *job);
/* A pending connection is readable: reads and serves its handshake. */
void fr_pmi_pending_readable(fr_job_t *job, fr_pending_t *pc);
/* Serves len bytes received on a pending connection: the initack, the
 * answer to the challenge, and once the rank is proven, its first requests.
 * What fr_pmi_pending_readable does after reading (and a fuzzer's entry). */
void fr_pmi_pending_input(fr_job_t *job, fr_pending_t *pc, const char *data, size_t len);
/* Closes pending connections older than FR_PENDING_MS; returns when to look
 * again (0: none pending). */
long long fr_pmi_pending_expire(fr_job_t *job, long long now);
void fr_pmi_pending_close(fr_pending_t *pc);

/* ---- fr_pmi.c ---- */
void fr_pmi_readable(fr_job_t *job, fr_rank_t *r);
/* Serves len bytes received on a rank's PMI connection (complete lines are
 * answered, a partial one kept): what fr_pmi_readable does after reading,
 * and a fuzzer's entry. */
void fr_pmi_input(fr_job_t *job, fr_rank_t *r, const char *data, size_t len);
/* Serves the complete request lines already in r->in. */
void fr_pmi_consume(fr_job_t *job, fr_rank_t *r);
void fr_pmi_writable(fr_job_t *job, fr_rank_t *r);
/* Queues one answer line and tries to send it at once. */
void fr_pmi_answer(fr_job_t *job, fr_rank_t *r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Closes a rank's PMI connection (no-op when closed). */
void fr_pmi_close(fr_job_t *job, fr_rank_t *r);
/* Splits a request line into key=value tokens, in place; NULL or a reason. */
const char *fr_req_parse(char *line, fr_req_t *req);
/* The value of a request's field (after cmd), or NULL. */
const char *fr_req_field(const fr_req_t *req, const char *key);
/* Copies at most 60 characters of untrusted text, '?' for unprintable. */
void fr_excerpt(const char *text, char out[64]);

/* ---- fr_kvs.c ---- */
/* An empty store for np ranks; 0, or -1 when out of memory. */
int fr_kvs_init(fr_kvs_t *kvs, int np);
void fr_kvs_fini(fr_kvs_t *kvs);
const char *fr_kvs_get(const fr_kvs_t *kvs, const char *key);
/* Stores or replaces rank's value of key. NULL, or the reason it is
 * refused (a single word, for the msg= of the answer): the key belongs to
 * another rank, a quota is used up, or memory is. */
const char *fr_kvs_put(fr_kvs_t *kvs, int rank, const char *key, const char *val);
/* The rank a key's name reserves ("R.anything" belongs to rank R), or -1
 * when it reserves none. */
long fr_kvs_key_rank(const char *key);

/* ---- fr_output.c ---- */
void fr_stream_init(fr_stream_t *s, int fd, int out_fd);
/* Reads what the stream has and forwards it; at end of file flushes and
 * closes it. */
void fr_stream_readable(fr_job_t *job, fr_rank_t *r, fr_stream_t *s);
void fr_stream_close(fr_job_t *job, fr_rank_t *r, fr_stream_t *s);
/* Writes out a partial line held for FR_STALE_MS; returns when to look
 * again (0: nothing held). */
long long fr_stream_flush_stale(fr_job_t *job, fr_rank_t *r, fr_stream_t *s, long long now);
/* Forwarding ferryrun's standard input to out_fd (fr_stdin_t): reading when
 * the buffer is empty, writing when it is not; closes out_fd at the end. */
void fr_stdin_readable(fr_stdin_t *in);
void fr_stdin_writable(fr_stdin_t *in);
void fr_stdin_close(fr_stdin_t *in);

#endif /* FERRYRUN_H */
