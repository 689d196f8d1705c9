/*
 * mca_btl_ferry: ferry's transports as Open MPI 4.1 BTL modules (interface
 * MCA_BTL_BASE_VERSION_3_1_0).
 *
 * The component is a host of ferry (include/ferry/host.h): at init it opens
 * ferry's transports with ferry_host_open, giving Open MPI's job (the vpid
 * as rank, PMIx's job size, the jobid as job id), Open MPI's modex
 * (OPAL_MODEX_SEND_STRING / OPAL_MODEX_RECV_STRING, keys "ferry:KEY"), its
 * output (opal_output), its MCA variables as ferry's parameter values
 * (btl_ferry_<name>) and PMIx's cleanup of files when a process ends. Each
 * ferry module (self, sm, tcp, ofi: whatever FERRY_BTL / btl_ferry_btl
 * opens) becomes one Open MPI module carrying the ferry module's real
 * attributes, so that the BML chooses and stripes by its own rules.
 *
 * Files:
 *   btl_ferry_component.c  MCA registration, init, progress, the host
 *   btl_ferry_module.c     a module: procs, descriptors, sends, receives,
 *                          errors, finalize
 *   btl_ferry_rdma.c       the one adapter between Open MPI's descriptor-free
 *                          RDMA (put, get, atomics, registrations, flush) and
 *                          the ferry contract
 *
 * Threads: ferry contexts are used by one thread at a time, so the component
 * declines to run under MPI_THREAD_MULTIPLE (it says so, and Open MPI's
 * other BTLs take over).
 *
 * State: Open MPI finds a component through one exported global; all the
 * component's state hangs off mca_btl_ferry (btl_ferry_component.c).
 */
#ifndef OMPI_BTL_FERRY_H
#define OMPI_BTL_FERRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "opal_config.h"

#include "opal/class/opal_free_list.h"
#include "opal/mca/btl/btl.h"

#include <ferry/btl.h>
#include <ferry/ferry.h>
#include <ferry/host.h>

/* Open MPI tags at or above this cannot travel over ferry (its transports
 * keep FERRY_BTL_TAG_BTL_MIN .. 255 for themselves); Open MPI 4.1 uses
 * none of them (its frameworks' tags are 0x20 .. 0x9f). */
#define MCA_BTL_FERRY_TAG_LIMIT FERRY_BTL_TAG_BTL_MIN

/* A registration handle as Open MPI holds it: the ferry key first (the
 * btl_registration_handle_size bytes Open MPI copies to peers), then what
 * only this process needs. */
struct mca_btl_base_registration_handle_t {
    uint8_t key[FERRY_BTL_KEY_MAX];
    ferry_btl_reg_t *reg;
    /* On the module's list of its live registrations (btl_ferry_rdma.c:
     * the process's own memory is found there by key). */
    struct mca_btl_base_registration_handle_t *prev, *next;
    /* The registration cache (btl_ferry_rdma.c): what it was made for,
     * how many register_mem calls hold it, and, once nobody does, its
     * place among the module's idle ones (least recent first). */
    ferry_btl_endpoint_t *ep;
    uint32_t flags; /* Open MPI's MCA_BTL_REG_FLAG_* */
    uint32_t refs;
    bool cached; /* found again by register_mem, kept when idle */
    bool stale;  /* its memory was released: never handed out again */
    bool idle;   /* on the module's idle list */
    struct mca_btl_base_registration_handle_t *hnext; /* in its hash bucket */
    struct mca_btl_base_registration_handle_t *idle_prev, *idle_next;
};

/* Hash buckets of a module's cached registrations, by base address. */
#define MCA_BTL_FERRY_REG_BUCKETS 256

typedef struct mca_btl_ferry_module mca_btl_ferry_module_t;

/* A descriptor of ours: Open MPI's descriptor over a ferry send descriptor. */
typedef struct mca_btl_ferry_frag {
    mca_btl_base_descriptor_t base; /* first: what Open MPI sees */
    mca_btl_base_segment_t seg[2]; /* the header room (fdes), then the caller's data in place */
    mca_btl_ferry_module_t *mod;
    ferry_btl_endpoint_t *ep;
    ferry_btl_desc_t *fdes;   /* the ferry descriptor holding the data */
    size_t capacity;          /* bytes fdes->src[0] can hold */
    struct mca_btl_ferry_frag *next_done; /* on the component's list of due callbacks */
    struct mca_btl_ferry_frag *next_wait; /* in its endpoint's queue of sends waiting */
    uint8_t tag;              /* of a send waiting */
    bool in_flight;           /* accepted by send, callback not yet run */
} mca_btl_ferry_frag_t;

/* One endpoint's sends waiting for the transport, in order: each with its
 * data still in place, and every later send to the endpoint behind them. */
typedef struct mca_btl_ferry_waitq {
    ferry_btl_endpoint_t *ep;
    mca_btl_ferry_frag_t *head, *tail;
} mca_btl_ferry_waitq_t;

/* What the component counts per module (printed at finalize with
 * btl_base_verbose at 40 or more): which paths and protocols were used. */
typedef struct mca_btl_ferry_stats {
    uint64_t sendi;       /* inline sends (btl_sendi) */
    uint64_t send_inline; /* btl_send completed inside the call */
    uint64_t send_queued; /* btl_send completed by a callback */
    uint64_t send_inplace; /* btl_send of data in place: copied from the caller's memory straight
                              into the transport */
    uint64_t send_waited;  /* btl_send that waited in its endpoint's queue for the transport */
    uint64_t put, get;    /* RDMA operations started */
    uint64_t put_bytes, get_bytes;
    uint64_t atomics;
    uint64_t waited;      /* puts and gets that waited for the transport (btl_ferry_rdma.c) */
    uint64_t own;         /* puts, gets, atomics on this process's own memory (no endpoint) */
    uint64_t regs;        /* register_mem calls */
    uint64_t reg_hits;    /* of which served by the registration cache */
    uint64_t recv;        /* fragments handed to Open MPI */
    uint64_t rdma_failed; /* puts, gets and atomics refused or completed with an error */
} mca_btl_ferry_stats_t;

struct mca_btl_ferry_module {
    mca_btl_base_module_t super; /* first: what Open MPI sees */
    ferry_btl_module_t *fbtl;    /* the ferry module */
    int index;                   /* among the component's modules */
    mca_btl_base_module_error_cb_fn_t error_cb;
    opal_free_list_t frags;      /* mca_btl_ferry_frag_t */
    opal_free_list_t rdma_ops;   /* mca_btl_ferry_rdma_op_t */
    /* Per rank of the job: the endpoint add_procs made and its process,
     * NULL where none (never added, or deleted by del_procs). */
    ferry_btl_endpoint_t **eps;
    struct opal_proc_t **procs;
    bool active;    /* best ferry path to some peer: polled on every progress */
    bool finalized; /* btl_finalize ran */
    mca_btl_ferry_stats_t stats;
    /* The endpoints with sends waiting for the transport, each with its
     * queue (btl_ferry_module.c); an emptied queue stays until progress. */
    struct mca_btl_ferry_waitq *waitq;
    unsigned n_waitq, cap_waitq;
    /* The descriptor a received fragment is handed to Open MPI in (only
     * its segments change), and whether it is in use (a handler that
     * receives again on this module gets one of its own). */
    mca_btl_base_descriptor_t rdes;
    bool rdes_busy;
    mca_btl_base_registration_handle_t *regs; /* live registrations, newest first */
    /* The registration cache: cached registrations by base address, and
     * those nobody holds (kept up to MCA_BTL_FERRY_REG_IDLE_MAX). */
    mca_btl_base_registration_handle_t *buckets[MCA_BTL_FERRY_REG_BUCKETS];
    mca_btl_base_registration_handle_t *idle_head, *idle_tail;
    unsigned n_idle;
};

/* The component's state. */
typedef struct mca_btl_ferry_state {
    ferry_ctx_t *ctx;                 /* NULL until init succeeds */
    mca_btl_ferry_module_t **modules; /* one per ferry module */
    int n_modules;
    int rank, size;
    uint32_t jobid;
    char job_id[32];
    /* Ferry modules by rank that reach it (bit per module index), from
     * add_procs: which module is each peer's best path. */
    uint64_t *reach;
    bool progressing;                 /* inside ferry_progress: no recursion */
    bool closing;                     /* finalizing: no more callbacks to Open MPI */
    /* Registrations are cached (btl_ferry_rdma.c): Open MPI's memory hooks
     * report released memory and mpi_leave_pinned is not 0. */
    bool reg_cache;
    unsigned idle_calls;              /* progress calls since inactive modules were polled */
    /* The ferry modules of the active Open MPI modules not finalized, in
     * order: what every progress call polls (mca_btl_ferry_update_active). */
    ferry_btl_module_t *polled[64];
    int n_polled;
    mca_btl_ferry_frag_t *done_head, *done_tail; /* callbacks due from progress */
    /* Sends in the modules' queues (the transport could not take them at
     * once; btl_ferry_module.c): progress sends them while any wait. */
    unsigned n_send_waiting;
    /* RDMA operations complete whose callbacks are due from progress
     * (btl_ferry_rdma.c). */
    struct mca_btl_ferry_rdma_op *rdma_done_head, *rdma_done_tail;
    /* Puts and gets the transport refused for now (out of credits or of
     * its in-flight budget), started again from progress in order
     * (btl_ferry_rdma.c). */
    struct mca_btl_ferry_rdma_op *rdma_wait_head, *rdma_wait_tail;
    /* The Open MPI side of the BTL attributes (btl_ferry_flags, ...). */
    struct {
        int flags;
        size_t eager_limit, rndv_eager_limit, max_send_size;
        size_t rdma_pipeline_send_length, rdma_pipeline_frag_size, min_rdma_pipeline_size;
        unsigned exclusivity, latency, bandwidth;
    } knob;
} mca_btl_ferry_state_t;

extern mca_btl_ferry_state_t mca_btl_ferry;

/* OMPI_MODULE_DECLSPEC: the one symbol the loader looks for. */
OPAL_MODULE_DECLSPEC extern mca_btl_base_component_t mca_btl_ferry_component;

/* btl_ferry_mpool.c: ferry's pool for MPI_Alloc_mem lets go of what it
 * still holds, before ferry closes. */
void mca_btl_ferry_mpool_fini(void);

/* A ferry status as Open MPI's. */
int mca_btl_ferry_status(int ferry_status);

/* Builds the Open MPI module over ferry module fbtl (btl_ferry_module.c);
 * NULL on failure, logged. */
mca_btl_ferry_module_t *mca_btl_ferry_module_create(ferry_btl_module_t *fbtl, int index);

/* Runs the callbacks due (sends completed inside btl_send that asked for
 * one); returns how many. */
int mca_btl_ferry_run_done(void);

/* Sends what waits in the modules' queues while the transports take it;
 * with closing, drops it instead. Returns how many completed. */
int mca_btl_ferry_send_run_waiting(bool closing);

/* A send of ours ended: Open MPI's callback (not while closing), then the
 * descriptor back when the BTL owns it. */
void mca_btl_ferry_frag_sent(mca_btl_ferry_frag_t *frag, int opal_status);

/* Queues a frag whose callback is due from the next progress. */
void mca_btl_ferry_defer_done(mca_btl_ferry_frag_t *frag);

/* Recomputes which modules are some peer's best ferry path (active), and
 * the list of those progress polls every call; after a module finalizes
 * too. */
void mca_btl_ferry_update_active(void);

/* The RDMA side of a module (btl_ferry_rdma.c): fills super's put, get,
 * atomics, register_mem, deregister_mem and flush, the matching flags and
 * limits, and the op pool. */
int mca_btl_ferry_rdma_init(mca_btl_ferry_module_t *mod);
void mca_btl_ferry_rdma_fini(mca_btl_ferry_module_t *mod);
/* Starts the registration cache where Open MPI's memory hooks allow it
 * (component init), and stops it (before the modules go). */
void mca_btl_ferry_reg_cache_start(void);
void mca_btl_ferry_reg_cache_stop(void);
/* Runs the callbacks of RDMA operations due from progress; returns how
 * many. */
int mca_btl_ferry_rdma_run_done(void);
/* Starts the waiting puts and gets the transport takes now (returns how
 * many started or failed); with closing, ends every one with an error. */
int mca_btl_ferry_rdma_run_waiting(bool closing);
/* The btl flags the adapter gives for a ferry module's capabilities. */
uint32_t mca_btl_ferry_rdma_flags(const ferry_btl_attr_t *attr);

#endif /* OMPI_BTL_FERRY_H */
