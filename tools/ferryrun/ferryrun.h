/*
 * ferryrun's state, shared by its parts: the job (ferryrun.c: options,
 * starting ranks, the event loop, exits and kills), the hosts (fr_hosts.c:
 * the host list, placing ranks, the launch agent's command line), the PMI-1
 * server (fr_pmi.c, with its TCP listener for remote ranks) and output
 * forwarding (fr_output.c).
 *
 * ferryrun is a standalone program: it does not link the ferry library, so
 * it can launch and test the library while the library itself is broken.
 * Everything hangs off one fr_job_t that main() owns; one thread runs one
 * poll() loop, so nothing here is locked.
 */
#ifndef FERRYRUN_H
#define FERRYRUN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

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
/* Most bytes held in the key-value store, against a rank filling memory. */
#define FR_KVS_BYTES_MAX ((size_t)256 << 20)
#define FR_KVS_BUCKETS 1024
/* Longest partial line held per output stream before it is written out as
 * a line of its own, and longest time it is held. */
#define FR_LINE_MAX 65536
#define FR_STALE_MS 200
/* Most TCP connections accepted and not yet identified (by their initack)
 * at a time, and how long one may stay so: anyone who reaches the port can
 * connect, and must not be able to exhaust descriptors or hold them. */
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

/* A TCP connection to the PMI server that has not said which rank it is. */
typedef struct fr_pending {
    int fd; /* -1: free slot */
    char in[FR_PMI_LINE_MAX];
    size_t in_len;
    long long since_ms;
} fr_pending_t;

typedef struct fr_kv {
    char *key;
    char *val;
    struct fr_kv *next;
} fr_kv_t;

typedef struct fr_kvs {
    fr_kv_t *buckets[FR_KVS_BUCKETS];
    size_t bytes;
} fr_kvs_t;

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
} fr_opts_t;

typedef struct fr_job {
    fr_opts_t opt;
    char job_id[64];
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

long long fr_now_ms(void);

/* Decides the job's exit code (if not decided yet) and starts killing it. */
void fr_job_fail(fr_job_t *job, int exit_code);

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
/* Chooses the address remote ranks are told and opens the listener. */
int fr_pmi_listen(fr_job_t *job);

/* ---- fr_pmi.c ---- */
/* The listener is readable: accepts what is waiting. */
void fr_pmi_accept(fr_job_t *job);
/* A pending connection is readable: reads its initack and, when it names a
 * remote rank that has no connection yet, makes it that rank's. */
void fr_pmi_pending_readable(fr_job_t *job, fr_pending_t *pc);
/* Closes pending connections older than FR_PENDING_MS; returns when to look
 * again (0: none pending). */
long long fr_pmi_pending_expire(fr_job_t *job, long long now);
void fr_pmi_pending_close(fr_pending_t *pc);
void fr_pmi_readable(fr_job_t *job, fr_rank_t *r);
void fr_pmi_writable(fr_job_t *job, fr_rank_t *r);
/* Closes a rank's PMI connection (no-op when closed). */
void fr_pmi_close(fr_job_t *job, fr_rank_t *r);
void fr_kvs_fini(fr_kvs_t *kvs);

/* ---- fr_output.c ---- */
void fr_stream_init(fr_stream_t *s, int fd, int out_fd);
/* Reads what the stream has and forwards it; at end of file flushes and
 * closes it. */
void fr_stream_readable(fr_job_t *job, fr_rank_t *r, fr_stream_t *s);
void fr_stream_close(fr_job_t *job, fr_rank_t *r, fr_stream_t *s);
/* Writes out a partial line held for FR_STALE_MS; returns when to look
 * again (0: nothing held). */
long long fr_stream_flush_stale(fr_job_t *job, fr_rank_t *r, fr_stream_t *s, long long now);

#endif /* FERRYRUN_H */
