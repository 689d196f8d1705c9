/*
 * The part of MPI that ferry-mpibench uses, on ferry's own calls, so that
 * the same benchmark source measures ferry's tagged layer (ferry/msg.h) and
 * one-sided calls beside Open MPI's and MPICH's transports: the binary
 * built from mpi_bench.c with this folder on the include path is
 * ferry-mpibench-ferry, run under ferryrun.
 *
 * Each MPI call maps onto one ferry call, as an MPI over ferry would make
 * it, with nothing added around it:
 *   MPI_Send, MPI_Recv, MPI_Isend, MPI_Irecv, MPI_Waitall
 *                         ferry_msg_send, _recv, _isend, _irecv, _wait
 *                         (context id 0, the MPI tag as ferry's tag)
 *   MPI_Barrier           ferry_barrier
 *   MPI_Bcast             root's ferry_msg_send to every other rank
 *   MPI_Win_allocate      ferry_mem_alloc (with sm, a shared heap peers copy
 *                         into), its key exchanged with every rank
 *   MPI_Win_create        ferry_mem_register of the caller's memory, the same
 *                         (every key unpacked once: ferry_rkey_unpack)
 *   MPI_Put, MPI_Get      ferry_put_nb, ferry_get_nb through those handles
 *   MPI_Fetch_and_op      ferry_atomic_fetch (MPI_SUM as FERRY_ATOMIC_ADD)
 *   MPI_Win_flush         ferry_flush(target)
 *
 * Only what mpi_bench.c needs is here: MPI_COMM_WORLD, byte-sized and
 * integer datatypes, one window at a time, the return codes MPI_SUCCESS or
 * MPI_ERR_OTHER (after a message on stderr). It is not an MPI.
 */
#ifndef FERRY_MPI_SHIM_H
#define FERRY_MPI_SHIM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ferry/ferry.h>
#include <ferry/msg.h>

#define MPI_SUCCESS 0
#define MPI_ERR_OTHER 15
#define MPI_MAX_LIBRARY_VERSION_STRING 256

typedef int MPI_Comm;
typedef int MPI_Datatype; /* its size in bytes */
typedef int MPI_Op;
typedef int MPI_Info;
typedef intptr_t MPI_Aint;
typedef ferry_msg_req_t *MPI_Request;
typedef struct ferry_mpi_status {
    int MPI_SOURCE, MPI_TAG, MPI_ERROR;
} MPI_Status;
typedef struct ferry_mpi_win *MPI_Win;

#define MPI_COMM_WORLD 0
#define MPI_CHAR 1
#define MPI_INT ((int)sizeof(int))
#define MPI_LONG ((int)sizeof(long))
#define MPI_UINT64_T 8
#define MPI_SUM 1
#define MPI_INFO_NULL 0
#define MPI_STATUS_IGNORE ((MPI_Status *)NULL)
#define MPI_STATUSES_IGNORE ((MPI_Status *)NULL)

/* MPI_Bcast's messages: a tag that the benchmark's own (1 to 4) never meet. */
#define FERRY_MPI_TAG_BCAST ((uint64_t)1 << 40)

struct ferry_mpi_win {
    void *base;
    bool created; /* MPI_Win_create: base is the caller's, registered */
    ferry_mem_t *mem;
    ferry_rkey_h **rh;    /* [size]: every other rank's key, unpacked */
    uint64_t *addrs;      /* [size]: every rank's window address */
};

static struct ferry_mpi_state {
    ferry_ctx_t *ctx;
    ferry_msg_t *msg;
    int rank, size;
} ferry_mpi;

/* An error of the layer below: said once here, then MPI_ERR_OTHER. */
static inline int ferry_mpi_fail(const char *call, int rc)
{
    if (rc >= 0)
        return MPI_SUCCESS;
    fprintf(stderr, "ferry-mpibench (ferry): %s: %s\n", call, ferry_strerror(rc));
    return MPI_ERR_OTHER;
}

static inline int MPI_Init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    int rc = ferry_init(NULL, &ferry_mpi.ctx);
    if (rc == FERRY_OK && (rc = ferry_msg_init(ferry_mpi.ctx, &ferry_mpi.msg)) != FERRY_OK)
        ferry_finalize(&ferry_mpi.ctx);
    if (rc != FERRY_OK) {
        /* As an MPI whose start fails: the job cannot go on. */
        fprintf(stderr, "ferry-mpibench (ferry): ferry_init: %s\n", ferry_strerror(rc));
        exit(1);
    }
    ferry_mpi.rank = ferry_rank(ferry_mpi.ctx);
    ferry_mpi.size = ferry_size(ferry_mpi.ctx);
    /* Every rank's tagged layer is up before anyone sends to it. */
    return ferry_mpi_fail("ferry_barrier", ferry_barrier(ferry_mpi.ctx));
}

static inline int MPI_Finalize(void)
{
    int rc = ferry_msg_fini(&ferry_mpi.msg);
    int rc2 = ferry_finalize(&ferry_mpi.ctx);
    return ferry_mpi_fail("ferry_finalize", rc != FERRY_OK ? rc : rc2);
}

static inline int MPI_Abort(MPI_Comm comm, int code)
{
    (void)comm;
    /* ferryrun ends the job when a rank exits with a failure. */
    exit(code != 0 ? code : 1);
}

static inline int MPI_Comm_rank(MPI_Comm comm, int *rank)
{
    (void)comm;
    *rank = ferry_mpi.rank;
    return MPI_SUCCESS;
}

static inline int MPI_Comm_size(MPI_Comm comm, int *size)
{
    (void)comm;
    *size = ferry_mpi.size;
    return MPI_SUCCESS;
}

static inline int MPI_Get_library_version(char *version, int *len)
{
    const char *btl = getenv("FERRY_BTL");
    int n = snprintf(version, MPI_MAX_LIBRARY_VERSION_STRING,
                     "ferry %d.%d, tagged messaging (ferry/msg.h) and one-sided calls, over %s",
                     FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR,
                     btl != NULL ? btl : "its default transports");
    *len = n < MPI_MAX_LIBRARY_VERSION_STRING ? n : MPI_MAX_LIBRARY_VERSION_STRING - 1;
    return MPI_SUCCESS;
}

static inline double MPI_Wtime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int MPI_Send(const void *buf, int count, MPI_Datatype type, int dst, int tag,
                           MPI_Comm comm)
{
    (void)comm;
    return ferry_mpi_fail("ferry_msg_send",
                          ferry_msg_send(ferry_mpi.msg, dst, 0, (uint64_t)tag, buf,
                                         (size_t)count * (size_t)type));
}

static inline int MPI_Recv(void *buf, int count, MPI_Datatype type, int src, int tag,
                           MPI_Comm comm, MPI_Status *status)
{
    (void)comm;
    ferry_msg_status_t st;
    int rc = ferry_msg_recv(ferry_mpi.msg, src, 0, (uint64_t)tag, FERRY_MSG_TAG_EXACT, buf,
                            (size_t)count * (size_t)type, &st);
    if (status != NULL)
        *status = (MPI_Status){st.source, (int)st.tag, rc};
    return ferry_mpi_fail("ferry_msg_recv", rc);
}

static inline int MPI_Isend(const void *buf, int count, MPI_Datatype type, int dst, int tag,
                            MPI_Comm comm, MPI_Request *req)
{
    (void)comm;
    return ferry_mpi_fail("ferry_msg_isend",
                          ferry_msg_isend(ferry_mpi.msg, dst, 0, (uint64_t)tag, buf,
                                          (size_t)count * (size_t)type, req));
}

static inline int MPI_Irecv(void *buf, int count, MPI_Datatype type, int src, int tag,
                            MPI_Comm comm, MPI_Request *req)
{
    (void)comm;
    return ferry_mpi_fail("ferry_msg_irecv",
                          ferry_msg_irecv(ferry_mpi.msg, src, 0, (uint64_t)tag,
                                          FERRY_MSG_TAG_EXACT, buf,
                                          (size_t)count * (size_t)type, req));
}

static inline int MPI_Waitall(int n, MPI_Request *reqs, MPI_Status *statuses)
{
    int first = FERRY_OK;
    for (int i = 0; i < n; i++) {
        ferry_msg_status_t st;
        int rc = ferry_msg_wait(ferry_mpi.msg, &reqs[i], &st);
        if (statuses != NULL)
            statuses[i] = (MPI_Status){st.source, (int)st.tag, rc};
        if (first == FERRY_OK)
            first = rc;
    }
    return ferry_mpi_fail("ferry_msg_wait", first);
}

static inline int MPI_Barrier(MPI_Comm comm)
{
    (void)comm;
    return ferry_mpi_fail("ferry_barrier", ferry_barrier(ferry_mpi.ctx));
}

static inline int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm)
{
    (void)comm;
    size_t len = (size_t)count * (size_t)type;
    if (ferry_mpi.rank != root) {
        ferry_msg_status_t st;
        int rc = ferry_msg_recv(ferry_mpi.msg, root, 0, FERRY_MPI_TAG_BCAST, FERRY_MSG_TAG_EXACT,
                                buf, len, &st);
        if (rc == FERRY_OK && st.received != len)
            rc = FERRY_ERR_PROTO;
        return ferry_mpi_fail("ferry_msg_recv", rc);
    }
    for (int r = 0; r < ferry_mpi.size; r++) {
        if (r == root)
            continue;
        int rc = ferry_msg_send(ferry_mpi.msg, r, 0, FERRY_MPI_TAG_BCAST, buf, len);
        if (rc != FERRY_OK)
            return ferry_mpi_fail("ferry_msg_send", rc);
    }
    return MPI_SUCCESS;
}

/* ---- one-sided ---- */

/* Every rank sends its key and address to every other, then receives
 * theirs (the messages are small: eager, so no rank waits on another's
 * receive to finish its sends). */
static inline int ferry_mpi_exchange_keys(struct ferry_mpi_win *w)
{
    struct {
        uint64_t addr;
        ferry_rkey_t key;
    } mine, theirs;
    mine.addr = (uint64_t)(uintptr_t)w->base;
    int rc = ferry_mem_rkey(w->mem, &mine.key);
    for (int r = 0; rc == FERRY_OK && r < ferry_mpi.size; r++)
        if (r != ferry_mpi.rank)
            rc = ferry_msg_send(ferry_mpi.msg, r, 0, FERRY_MPI_TAG_BCAST + 1, &mine,
                                sizeof(mine));
    w->addrs[ferry_mpi.rank] = mine.addr;
    for (int r = 0; rc == FERRY_OK && r < ferry_mpi.size; r++) {
        if (r == ferry_mpi.rank)
            continue;
        ferry_msg_status_t st;
        rc = ferry_msg_recv(ferry_mpi.msg, r, 0, FERRY_MPI_TAG_BCAST + 1, FERRY_MSG_TAG_EXACT,
                            &theirs, sizeof(theirs), &st);
        if (rc == FERRY_OK && st.received != sizeof(theirs))
            rc = FERRY_ERR_PROTO;
        if (rc == FERRY_OK)
            rc = ferry_rkey_unpack(ferry_mpi.ctx, r, &theirs.key, &w->rh[r]);
        w->addrs[r] = theirs.addr;
    }
    return rc;
}

static inline void ferry_mpi_win_release(struct ferry_mpi_win *w)
{
    for (int r = 0; w->rh != NULL && r < ferry_mpi.size; r++)
        ferry_rkey_release(ferry_mpi.ctx, w->rh[r]);
    if (w->created)
        ferry_mem_deregister(ferry_mpi.ctx, w->mem);
    else
        ferry_mem_free(ferry_mpi.ctx, w->mem);
    free(w->rh);
    free(w->addrs);
    free(w);
}

/* A window over base (MPI_Win_create: the caller's memory, registered) or
 * over memory of ferry_mem_alloc (MPI_Win_allocate: base NULL). */
static inline int ferry_mpi_win_open(const char *call, void *base, MPI_Aint size,
                                     int disp_unit, MPI_Win *win)
{
    if (disp_unit != 1 || size <= 0) {
        fprintf(stderr, "ferry-mpibench (ferry): %s: only disp_unit 1 and a positive size are "
                        "mapped\n",
                call);
        return MPI_ERR_OTHER;
    }
    struct ferry_mpi_win *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return ferry_mpi_fail(call, FERRY_ERR_NO_MEMORY);
    w->rh = calloc((size_t)ferry_mpi.size, sizeof(*w->rh));
    w->addrs = calloc((size_t)ferry_mpi.size, sizeof(*w->addrs));
    int rc = w->rh == NULL || w->addrs == NULL ? FERRY_ERR_NO_MEMORY : FERRY_OK;
    const unsigned access =
        FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_ATOMIC;
    w->created = base != NULL;
    w->base = base;
    if (rc == FERRY_OK)
        rc = w->created ? ferry_mem_register(ferry_mpi.ctx, base, (size_t)size, access, &w->mem)
                        : ferry_mem_alloc(ferry_mpi.ctx, (size_t)size, access, &w->base, &w->mem);
    if (rc == FERRY_OK)
        rc = ferry_mpi_exchange_keys(w);
    if (rc != FERRY_OK) {
        ferry_mpi_win_release(w);
        return ferry_mpi_fail(call, rc);
    }
    *win = w;
    return MPI_SUCCESS;
}

/* Info objects hold nothing here; MPI_Alloc_mem is page-aligned memory of
 * the program's (its hints name pools of Open MPI's). */
static inline int MPI_Info_create(MPI_Info *info)
{
    *info = 0;
    return MPI_SUCCESS;
}

static inline int MPI_Info_set(MPI_Info info, const char *key, const char *value)
{
    (void)info, (void)key, (void)value;
    return MPI_SUCCESS;
}

static inline int MPI_Info_free(MPI_Info *info)
{
    *info = MPI_INFO_NULL;
    return MPI_SUCCESS;
}

static inline int MPI_Alloc_mem(MPI_Aint size, MPI_Info info, void *baseptr)
{
    (void)info;
    void *p = NULL;
    if (size <= 0 || posix_memalign(&p, 4096, (size_t)size) != 0)
        return ferry_mpi_fail("MPI_Alloc_mem", FERRY_ERR_NO_MEMORY);
    memcpy(baseptr, &p, sizeof(p));
    return MPI_SUCCESS;
}

static inline int MPI_Free_mem(void *base)
{
    free(base);
    return MPI_SUCCESS;
}

static inline int MPI_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                                   void *baseptr, MPI_Win *win)
{
    (void)info;
    (void)comm;
    int rc = ferry_mpi_win_open("MPI_Win_allocate", NULL, size, disp_unit, win);
    if (rc == MPI_SUCCESS)
        memcpy(baseptr, &(*win)->base, sizeof((*win)->base));
    return rc;
}

static inline int MPI_Win_create(void *base, MPI_Aint size, int disp_unit, MPI_Info info,
                                 MPI_Comm comm, MPI_Win *win)
{
    (void)info;
    (void)comm;
    if (base == NULL)
        return ferry_mpi_fail("MPI_Win_create", FERRY_ERR_INVALID);
    return ferry_mpi_win_open("MPI_Win_create", base, size, disp_unit, win);
}

static inline int MPI_Win_free(MPI_Win *win)
{
    struct ferry_mpi_win *w = *win;
    /* No rank frees its memory while another may still reach it. */
    int rc = ferry_barrier(ferry_mpi.ctx);
    ferry_mpi_win_release(w);
    *win = NULL;
    return ferry_mpi_fail("MPI_Win_free", rc);
}

/* Passive target needs nothing more from ferry: its memory is reachable
 * from the moment its key is known. */
static inline int MPI_Win_lock_all(int assert_, MPI_Win win)
{
    (void)assert_;
    (void)win;
    return MPI_SUCCESS;
}

static inline int MPI_Win_unlock_all(MPI_Win win)
{
    (void)win;
    return ferry_mpi_fail("ferry_flush", ferry_flush(ferry_mpi.ctx, -1));
}

/* An operation the transport has no room for now starts again after
 * progress, as an MPI would retry it. */
static inline int MPI_Put(const void *origin, int ocount, MPI_Datatype otype, int target,
                          MPI_Aint disp, int tcount, MPI_Datatype ttype, MPI_Win win)
{
    (void)tcount;
    (void)ttype;
    int rc;
    while ((rc = ferry_put_nb(ferry_mpi.ctx, win->rh[target], win->addrs[target] + (uint64_t)disp,
                              origin, (size_t)ocount * (size_t)otype, NULL)) ==
           FERRY_ERR_NO_RESOURCE)
        ferry_progress(ferry_mpi.ctx);
    return ferry_mpi_fail("ferry_put_nb", rc);
}

static inline int MPI_Get(void *origin, int ocount, MPI_Datatype otype, int target,
                          MPI_Aint disp, int tcount, MPI_Datatype ttype, MPI_Win win)
{
    (void)tcount;
    (void)ttype;
    int rc;
    while ((rc = ferry_get_nb(ferry_mpi.ctx, win->rh[target], win->addrs[target] + (uint64_t)disp,
                              origin, (size_t)ocount * (size_t)otype, NULL)) ==
           FERRY_ERR_NO_RESOURCE)
        ferry_progress(ferry_mpi.ctx);
    return ferry_mpi_fail("ferry_get_nb", rc);
}

static inline int MPI_Win_flush(int target, MPI_Win win)
{
    (void)win;
    return ferry_mpi_fail("ferry_flush", ferry_flush(ferry_mpi.ctx, target));
}

static inline int MPI_Fetch_and_op(const void *origin, void *result, MPI_Datatype type,
                                   int target, MPI_Aint disp, MPI_Op op, MPI_Win win)
{
    if (op != MPI_SUM || (type != 4 && type != 8)) {
        fprintf(stderr, "ferry-mpibench (ferry): MPI_Fetch_and_op: only MPI_SUM on 4- and "
                        "8-byte integers is mapped\n");
        return MPI_ERR_OTHER;
    }
    uint64_t operand = 0;
    memcpy(&operand, origin, (size_t)type);
    int rc;
    while ((rc = ferry_atomic_fetch(ferry_mpi.ctx, win->rh[target],
                                    win->addrs[target] + (uint64_t)disp, FERRY_ATOMIC_ADD,
                                    (size_t)type, operand, result, NULL)) ==
           FERRY_ERR_NO_RESOURCE)
        ferry_progress(ferry_mpi.ctx);
    return ferry_mpi_fail("ferry_atomic_fetch", rc);
}

#endif /* FERRY_MPI_SHIM_H */
