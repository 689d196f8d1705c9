/*
 * Address exchange (modex): each process puts key/value blobs, commits them,
 * and after a fence (a barrier across the job) reads any process's blobs.
 *
 * Backends, chosen by rt_modex_open from the environment:
 * - pmi1: the PMI-1 wire protocol, over the descriptor in PMI_FD (as set by
 *   ferryrun and MPICH's mpiexec.hydra, with PMI_RANK and PMI_SIZE) or a
 *   TCP address in PMI_PORT ("host:port", with PMI_ID as the rank);
 * - pmix: a PMIx server (Open MPI's mpirun, Slurm's srun --mpi=pmix), when
 *   PMIX_* variables are set; built when libpmix is found, as a module
 *   (ferry_modex_pmix.so, rt/module.h) loaded only then, so that no other
 *   job maps libpmix;
 * - singleton: no launcher; size 1, rank 0, gets read back local puts;
 * - host: a program that embeds ferry (an MPI library) and has its own
 *   exchange, through the functions it gives (include/ferry/host.h);
 *   opened by rt_modex_open_host only, never from the environment.
 * FERRY_MODEX=pmi1|pmix|singleton forces one. FERRY_MODEX and
 * FERRY_PMI_TIMEOUT are declared parameters (ferry_info -a lists them).
 *
 * Values are binary; the pmi1 backend encodes them to fit the server's value
 * length and splits long ones over several keys.
 */
#ifndef RT_MODEX_H
#define RT_MODEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rt/log.h"
#include "rt/params.h"

typedef struct rt_modex rt_modex_t;

/* Joins the job, declaring the modex's parameters in params (its log is
 * the modex's). FERRY_ERR_LAUNCHER when a launcher is named in the
 * environment but does not answer, closes the connection or refuses a
 * request; FERRY_ERR_PROTO when its answers are malformed; FERRY_ERR_INVALID
 * for a bad parameter; FERRY_ERR_NOT_SUPPORTED when the backend the job
 * needs is not built or its module cannot be loaded (the reason is logged,
 * in one line). */
int rt_modex_open(rt_params_t *params, rt_modex_t **mx_out);

/* Declares the modex's parameters in params, as rt_modex_open does, without
 * joining a job (for a context that only inspects, as ferry_info's). The
 * variables of the backends in modules (none of which is loaded) are left
 * unchecked (rt_params_skip_prefix). */
int rt_modex_register_params(rt_params_t *params);

struct ferry_host;

/* Joins the job a host describes (its rank, size and id) and exchanges
 * values through its functions. The host must outlive the modex. Declares
 * no parameter: the host's launcher is not ferry's to choose. A host that
 * fails a check of rt_modex_host_valid is FERRY_ERR_INVALID. */
int rt_modex_open_host(const rt_log_t *log, const struct ferry_host *host, rt_modex_t **mx_out);

/* FERRY_OK for a host ferry can use: version, rank in [0, size), a job id,
 * put and get; the problem is logged otherwise (FERRY_ERR_INVALID, or
 * FERRY_ERR_NOT_SUPPORTED for another version of the interface). */
int rt_modex_host_valid(const rt_log_t *log, const struct ferry_host *host);

/* rt_modex_open with a registry of its own, for programs without a context. */
int rt_modex_init(const rt_log_t *log, rt_modex_t **mx_out);

/* Leaves the job (PMI finalize) and frees everything. mx may be NULL. */
void rt_modex_fini(rt_modex_t *mx);

int rt_modex_rank(const rt_modex_t *mx);
int rt_modex_size(const rt_modex_t *mx);

/* "pmi1", "pmix", "singleton" or "host". */
const char *rt_modex_backend(const rt_modex_t *mx);

/* The job's identity (the PMI kvs name, or "singleton-PID"); stable across the
 * job, different between jobs, at most 255 characters of [A-Za-z0-9_.-]. */
const char *rt_modex_job_id(const rt_modex_t *mx);

/* Puts label and a '.' in front of the job id, whatever backend made it, so
 * that the job's resources named after it (sm's segments) carry the label.
 * label must be rt_modex_label_valid; empty or NULL leaves the id alone. */
void rt_modex_label_job_id(rt_modex_t *mx, const char *label);

/* Labels are 1 to RT_MODEX_LABEL_MAX letters, digits, '_' or '-' (no '.',
 * which ends the label in a name). */
#define RT_MODEX_LABEL_MAX 32
bool rt_modex_label_valid(const char *label);

/* The job's secret (RT_AUTH_KEY_LEN bytes) into secret_out, when the
 * launcher gave one: ferryrun does, in FERRY_JOB_SECRET, which rt_modex_init
 * reads and wipes from the environment. FERRY_ERR_NOT_FOUND under launchers
 * that give none (hydra, Slurm, mpirun, a singleton). */
int rt_modex_job_secret(const rt_modex_t *mx, uint8_t *secret_out);

/* Stores a value under key for this rank. key: 1..63 characters of
 * [A-Za-z0-9_.-]; val may be empty. Overwrites an earlier put of the key;
 * other ranks see the new value after the next commit and fence (each commit
 * is stored as a new revision, because launchers such as hydra cache values). */
int rt_modex_put(rt_modex_t *mx, const char *key, const void *val, size_t len);

/* Sends puts made since the last commit to the server. */
int rt_modex_commit(rt_modex_t *mx);

/* Barrier over all ranks; afterwards every value committed before it is
 * readable by every rank. */
int rt_modex_fence(rt_modex_t *mx);

/* Reads rank's value of key into a malloc'd buffer (*val_out, to free) of
 * *len_out bytes. FERRY_ERR_NOT_FOUND when that rank did not commit the key;
 * FERRY_ERR_INVALID for a rank outside [0, size); FERRY_ERR_PROTO when the
 * stored value is malformed. This rank's own values are read from its puts,
 * committed or not. */
int rt_modex_get(rt_modex_t *mx, int rank, const char *key, void **val_out, size_t *len_out);

/* Asks the launcher to remove the file at path (a shared-memory object under
 * /dev/shm) when this process ends, however it ends: the launchers that can
 * (a host with a cleanup function) do; with the others it does nothing, as
 * ferryrun removes the job's objects by their names. */
int rt_modex_register_cleanup(rt_modex_t *mx, const char *path);

/* rt_modex_register_cleanup for a POSIX shared-memory object of shm_open's
 * name ("/ferry-JOB-0"), which Linux keeps as /dev/shm/NAME. */
int rt_modex_register_shm(rt_modex_t *mx, const char *shm_name);

/* Asks the launcher to kill the job with exit code code, after printing msg.
 * Returns only if the launcher could not be told. */
int rt_modex_abort(rt_modex_t *mx, int code, const char *msg);

#endif /* RT_MODEX_H */
