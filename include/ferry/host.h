/*
 * ferry inside a host: a program that already knows its job (an MPI
 * library, a task runtime, a launcher of its own) and brings what ferry
 * would otherwise get from ferryrun or a PMI server:
 * - the job: this process's rank, the job's size and an id unique to the
 *   job on every host it runs on;
 * - the address exchange (modex): put a value under a key, and after the
 *   host's own exchange read any rank's value;
 * - optionally: which ranks share this host, where ferry's log goes, the
 *   values of ferry's parameters, and the removal of ferry's shared-memory
 *   files when the process ends, however it ends.
 * The host drives progress (ferry_progress) and owns the threads: a
 * context is used by one thread at a time, as ferry.h says.
 *
 * Two ways in, one per kind of host:
 * - ferry_host_init: a whole context, as ferry_init makes, for a runtime
 *   that uses ferry.h (active messages, put/get, barrier);
 * - ferry_host_open: the transports only, for a host with a messaging
 *   layer of its own (an MPI's point-to-point and one-sided engines), which
 *   drives each transport's module through the contract of
 *   include/ferry/btl.h itself: add_procs, register_am, send, put, ...
 * docs/embedding.md shows both, with a complete host.
 */
#ifndef FERRY_HOST_H
#define FERRY_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/ferry.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Of the transport contract (include/ferry/btl.h), which a host of
 * ferry_host_open includes for the modules' operations. */
struct ferry_btl_module;
struct ferry_bitmap;

/* The version of ferry_host_t this header describes. */
#define FERRY_HOST_VERSION 1

/* Levels of the lines the host's log function receives. */
enum {
    FERRY_LOG_ERROR = 0,
    FERRY_LOG_WARN = 1,
    FERRY_LOG_INFO = 2,
    FERRY_LOG_DEBUG = 3,
    FERRY_LOG_TRACE = 4
};

/*
 * What the host gives. Fill it with designated initializers (fields added
 * later will then be zero); ferry copies it, but arg and everything the
 * functions reach must outlive the context. Every function gets arg first
 * and returns a ferry status (FERRY_OK or a negative FERRY_ERR_* code).
 * Functions marked optional may be NULL.
 */
typedef struct ferry_host {
    uint32_t version;   /* FERRY_HOST_VERSION */
    int rank;           /* this process, in [0, size) */
    int size;           /* processes in the job, >= 1 */
    /* The job's id: the same in every process of the job, different from
     * every other job that may run on the same hosts at the same time. It
     * names the job's shared-memory files; characters outside
     * [A-Za-z0-9_.-] are replaced by '_' and it is cut at 255. */
    const char *job_id;
    void *arg;

    /* Stores len bytes (len may be 0) under key for this rank. Keys are 1
     * to 63 characters of [A-Za-z0-9_.-] and are ferry's own: a host whose
     * store is shared with others should put a prefix of its own in front.
     * A value put before the exchange (below) must be readable by every
     * other rank after it. */
    int (*modex_put)(void *arg, const char *key, const void *val, size_t len);

    /* The exchange: a barrier over the job after which every value put
     * before it is readable. Needed by ferry_host_init, which calls it once
     * after the transports have put their addresses. Optional for
     * ferry_host_open, which never calls it: the host runs its own exchange
     * before it calls any module's add_procs. */
    int (*modex_fence)(void *arg);

    /* Reads rank's value of key into memory the host allocates with
     * malloc (ferry frees it with free) of *len_out bytes.
     * FERRY_ERR_NOT_FOUND when rank put no such key. Never called for this
     * process's own rank. */
    int (*modex_get)(void *arg, int rank, const char *key, void **val_out, size_t *len_out);

    /* Optional: 1 when rank shares this host (its memory and kernel), 0 when
     * not, a negative status when the host does not know (ferry then
     * compares host names through the exchange). Used by ferry_host_init
     * when it creates the endpoints; a host of ferry_host_open tells each
     * module in ferry_btl_proc_t.same_host itself. */
    int (*same_host)(void *arg, int rank);

    /* Optional: where ferry's log lines go (level FERRY_LOG_*, the line
     * without a newline); NULL: stderr. Only lines at or above the
     * threshold (the log_level parameter) are given. */
    void (*log)(void *arg, int level, const char *line);

    /* Optional: the host's value of one of ferry's parameters, by name
     * ("sm_eager_limit", as ferry_host_params lists them), or NULL to leave
     * it to FERRY_<NAME> in the environment, then to the default. It wins
     * over the environment. *origin_out may name where the value came from
     * for ferry's messages about a bad one ("btl_ferry_sm_eager_limit"); it
     * must stay valid as long as the context. */
    const char *(*param)(void *arg, const char *name, const char **origin_out);

    /* Optional: remove the file at path when this process ends, however it
     * ends (a SIGKILL included). ferry calls it for each shared-memory file
     * it creates, right after creating it; a normal finalize removes them
     * itself. Without it, files of a process that was killed stay behind. */
    int (*cleanup)(void *arg, const char *path);

    /* Optional: end the job with exit status code (the reason is logged
     * before). */
    int (*abort)(void *arg, int code);
} ferry_host_t;

/*
 * A whole context, as ferry_init makes one, with the job and the exchange
 * from the host instead of a launcher: the parameters (the host's, then
 * FERRY_*), the transports opened and their addresses put, the host's
 * modex_fence, then the endpoints of every rank. Everything of ferry.h
 * works on it; ferry_finalize ends it (collective, as for ferry_init).
 * params may be NULL (FERRY_THREAD_SINGLE, the transports of FERRY_BTL).
 * A host that is NULL, of another version (FERRY_ERR_NOT_SUPPORTED), with
 * a rank outside [0, size), no job id, or no modex_put, modex_get or
 * modex_fence is refused with FERRY_ERR_INVALID and a message.
 */
int ferry_host_init(const ferry_host_t *host, const ferry_init_params_t *params,
                    ferry_ctx_t **ctx_out);

/*
 * The transports only: the parameters, and every transport chosen opened
 * with its address put through modex_put, but no exchange and no endpoint.
 * The host then runs its exchange, takes the modules (ferry_host_modules)
 * and drives them through include/ferry/btl.h: add_procs with the ranks it
 * wants, register_am and register_error, sends, put and get, del_procs.
 * ferry_progress polls every module once; it must not be called from
 * inside a module's callback. ferry_finalize finalizes the modules (what is
 * pending completes with an error) and is not collective: the host has
 * quiesced its traffic before. The same checks of host as ferry_host_init,
 * without the need for modex_fence.
 */
int ferry_host_open(const ferry_host_t *host, const ferry_init_params_t *params,
                    ferry_ctx_t **ctx_out);

/*
 * The open modules of a context, in the order ferry opened them (the
 * transports' order, self first), *count_out of them. The array belongs to
 * the context. A module that reaches a peer better than another is told by
 * its attributes (exclusivity, then latency), never by its name.
 */
int ferry_host_modules(ferry_ctx_t *ctx, struct ferry_btl_module *const **modules_out,
                       int *count_out);

/*
 * The reachable set ferry_btl_ops_t.add_procs fills: nbits bits, all
 * clear. ferry_bitmap_test is false for a bit outside the set.
 */
int ferry_bitmap_create(size_t nbits, struct ferry_bitmap **bm_out);
bool ferry_bitmap_test(const struct ferry_bitmap *bm, size_t bit);
void ferry_bitmap_clear_all(struct ferry_bitmap *bm);
void ferry_bitmap_destroy(struct ferry_bitmap *bm);

/* One of ferry's parameters, as ferry_host_params reports it. The strings
 * live until the callback returns. */
typedef struct ferry_param_info {
    const char *name;  /* "sm_eager_limit" */
    const char *env;   /* "FERRY_SM_EAGER_LIMIT" */
    const char *help;  /* one line */
    const char *type;  /* "integer", "size", "boolean" or "string" */
    const char *def;   /* the default, as text */
    const char *value; /* the value in effect, as text */
    bool set;          /* value came from the host or the environment */
} ferry_param_info_t;

/* Called once per parameter; a non-zero return stops the listing, and
 * ferry_host_params returns it. */
typedef int (*ferry_param_cb_t)(const ferry_param_info_t *param, void *arg);

/*
 * Lists the parameters a context made with params and host would declare,
 * in the order it declares them, without joining a job or opening a
 * transport: those of the runtime, of each transport the transports list
 * (or FERRY_BTL) chooses whose module is loaded, and of the registration
 * cache. The launcher's own (FERRY_MODEX, FERRY_PMI_TIMEOUT) are left out:
 * a host is the launcher. host may be NULL; of a host, only version, log
 * and param are used. A bad value is FERRY_ERR_INVALID, logged naming it.
 * For a host that shows ferry's parameters among its own (an MPI's
 * btl_ferry_* variables).
 */
int ferry_host_params(const ferry_host_t *host, const ferry_init_params_t *params,
                      ferry_param_cb_t cb, void *arg);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_HOST_H */
