/*
 * The machine's floors, measured between the same two ranks in the same run
 * as the figures they are compared with:
 *  - cache-line ping-pong: two flags in a shared mapping, each on its own
 *    cache line, bounced between the ranks; the half round trip is the least
 *    any message between two cores can take. Successive round trips use
 *    CL_SLOTS different pairs of lines: on a machine whose cache-line
 *    transfer time depends on the line's address (its home in the last-level
 *    cache), one pair measures the luck of one address, differently in each
 *    run, while a message touches many lines.
 *  - memcpy: one rank copying a hot buffer; the most one core can move.
 *  - process_vm_writev: rank 0 writing into rank 1's buffer in windows of
 *    BENCH_WINDOW calls; what a single-copy transport can reach.
 *  - the atomics': a ping-pong of CPU fetch-adds on the ping-pong's lines
 *    (latency), and rank 0's own fetch-adds, one after the other, on a line
 *    of the same mapping that rank 1 leaves alone (rate).
 * The ranks take the same path through every function here (the floors
 * measured so far are known to both), so they stay in step.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bench.h"

/* Ping-pongs per repetition of the cache-line floor, and before the first:
 * enough for a stable median, and a few milliseconds each. */
#define CACHELINE_ITERS 100000
#define CACHELINE_WARMUP 10000
/* The flags are two cache lines apart so that adjacent-line prefetching
 * does not pair them. */
#define FLAG_SPACING 128

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the ping-pong needs lock-free atomics");

/* Pairs of flags the ping-pong goes round. With one pair, the floor on the
 * development VM came out at 66 to 97 ns from run to run (the same build,
 * a new mapping each run) while ferry's latency stayed put; with 64 it read
 * 80 ns in every run. */
#define CL_SLOTS 64

struct cl_flags {
    struct {
        _Alignas(FLAG_SPACING) atomic_uint ping; /* written by rank 0 */
        _Alignas(FLAG_SPACING) atomic_uint pong; /* written by rank 1 */
    } slot[CL_SLOTS];
    /* The amo-rate floor's counters, each on a line of its own: only rank
     * 0 adds to them. */
    _Alignas(FLAG_SPACING) _Atomic uint64_t add64;
    _Alignas(FLAG_SPACING) _Atomic uint32_t add32;
};
typedef struct cl_flags cl_flags_t;

/* Spins until *flag holds want. Where the ranks may share a cpu it yields
 * now and then, so both still make progress. Ranks pinned to separate cpus
 * never yield: on a busy machine a yield hands the cpu to another program
 * for a time slice, which ferry's own waits (which do not yield) would not
 * suffer, and the floor would read slower than the figures above it. */
static int spin_until(bench_t *b, atomic_uint *flag, unsigned want)
{
    bench_deadline_t d;
    bench_deadline_init(b, &d);
    unsigned spins = 0;
    while (atomic_load_explicit(flag, memory_order_acquire) != want) {
        if (b->spin_yield && (++spins & 4095u) == 0)
            sched_yield();
        if (bench_deadline_passed(&d)) {
            bench_error(b, "timed out after %d s in the cache-line ping-pong (rank %d stopped)",
                        b->opts.timeout_s, b->peer);
            return FERRY_ERR_TIMEOUT;
        }
    }
    return FERRY_OK;
}

/* Runs n ping-pongs from sequence number *seq on; returns the elapsed time
 * on rank 0 through *ns_out. */
static int pingpong(bench_t *b, cl_flags_t *fl, long n, unsigned *seq, uint64_t *ns_out)
{
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        unsigned s = ++*seq;
        int rc;
        if (b->rank == 0) {
            atomic_store_explicit(&fl->slot[s % CL_SLOTS].ping, s, memory_order_release);
            rc = spin_until(b, &fl->slot[s % CL_SLOTS].pong, s);
        } else {
            rc = spin_until(b, &fl->slot[s % CL_SLOTS].ping, s);
            atomic_store_explicit(&fl->slot[s % CL_SLOTS].pong, s, memory_order_release);
        }
        if (rc != FERRY_OK)
            return rc;
    }
    *ns_out = bench_now_ns() - t0;
    return FERRY_OK;
}

static size_t cacheline_map_len(void)
{
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 && (size_t)page > sizeof(cl_flags_t) ? (size_t)page : sizeof(cl_flags_t);
}

/* Rank 0 creates the mapping and sends its name; rank 1 opens it and says
 * whether it could (an errno, 0 on success). The name is removed as soon as
 * both hold the mapping, so a crash later leaves nothing behind. On return
 * *fl_out is the mapping, or NULL when either side failed (the reason is
 * printed and the floor is reported as unavailable). */
static int cacheline_map(bench_t *b, cl_flags_t **fl_out)
{
    size_t map_len = cacheline_map_len();
    char name[64] = "";
    size_t len;
    int32_t err = 0;
    void *p = MAP_FAILED;
    int rc;

    if (b->rank == 0) {
        snprintf(name, sizeof(name), "/ferry-bench-%ld", (long)getpid());
        int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 && errno == EEXIST) {
            /* A leftover of an earlier process that had this pid. */
            shm_unlink(name);
            fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        }
        if (fd < 0) {
            bench_error(b, "shm_open(%s): %s", name, strerror(errno));
            name[0] = '\0';
        } else {
            if (ftruncate(fd, (off_t)map_len) != 0 ||
                (p = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
                    MAP_FAILED) {
                bench_error(b, "shared mapping %s: %s", name, strerror(errno));
                p = MAP_FAILED;
            }
            close(fd);
            if (p == MAP_FAILED) {
                shm_unlink(name);
                name[0] = '\0';
            }
        }
        if ((rc = bench_ctrl_send(b, BENCH_CTRL_SHM, name, strlen(name) + 1)) != FERRY_OK)
            goto err_unmap;
        if (name[0] == '\0') {
            *fl_out = NULL;
            return FERRY_OK;
        }
        rc = bench_ctrl_recv(b, BENCH_CTRL_SHM_OK, &err, sizeof(err), &len);
        shm_unlink(name);
        if (rc != FERRY_OK)
            goto err_unmap;
        if (len != sizeof(err)) {
            bench_error(b, "malformed mapping reply from rank %d", b->peer);
            rc = FERRY_ERR_PROTO;
            goto err_unmap;
        }
        if (err != 0) {
            printf("# cache-line ping-pong unavailable: rank 1 cannot open %s: %s\n", name,
                   strerror(err));
            munmap(p, map_len);
            *fl_out = NULL;
            return FERRY_OK;
        }
    } else {
        if ((rc = bench_ctrl_recv(b, BENCH_CTRL_SHM, name, sizeof(name), &len)) != FERRY_OK)
            return rc;
        /* The name must be one NUL-terminated POSIX shm name. */
        if (len == 0 || name[len - 1] != '\0' || strlen(name) + 1 != len ||
            (name[0] != '\0' && (name[0] != '/' || strchr(name + 1, '/') != NULL))) {
            bench_error(b, "malformed mapping name from rank %d", b->peer);
            return FERRY_ERR_PROTO;
        }
        if (name[0] == '\0') {
            *fl_out = NULL;
            return FERRY_OK;
        }
        int fd = shm_open(name, O_RDWR, 0);
        if (fd < 0) {
            err = errno;
        } else {
            struct stat st;
            if (fstat(fd, &st) != 0)
                err = errno;
            else if ((size_t)st.st_size < sizeof(cl_flags_t))
                err = EINVAL;
            else if ((p = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
                     MAP_FAILED)
                err = errno;
            close(fd);
        }
        if ((rc = bench_ctrl_send(b, BENCH_CTRL_SHM_OK, &err, sizeof(err))) != FERRY_OK)
            goto err_unmap;
        if (err != 0) {
            *fl_out = NULL;
            return FERRY_OK;
        }
    }
    *fl_out = p;
    return FERRY_OK;

err_unmap:
    if (p != MAP_FAILED)
        munmap(p, map_len);
    return rc;
}

static int cacheline_measure(bench_t *b);

/* Measures the latency floor for the limits table, once per run. */
static int floor_cacheline(bench_t *b)
{
    int rc = cacheline_measure(b);
    /* >>> tcp floors: over tcp, the latency floor is TCP's ping-pong. */
    b->floors.cacheline_shm_us = b->floors.cacheline_us;
    if (rc == FERRY_OK && bench_floor_tcp_selected(b)) {
        rc = bench_floor_tcp(b, NULL, 0);
        b->floors.cacheline_us = b->floors.tcp_lat_us;
    }
    /* <<< tcp floors */
    /* >>> ofi floors: over ofi, the latency floor is raw libfabric's ping-pong. */
    if (rc == FERRY_OK && bench_floor_ofi_selected(b)) {
        rc = bench_floor_ofi(b, NULL, 0);
        b->floors.cacheline_us = b->floors.ofi_lat_us;
    }
    /* <<< ofi floors */
    return rc;
}

/* Collective: maps the flags once; b->floors.cl stays NULL when either rank
 * could not. */
static int cacheline_open(bench_t *b)
{
    if (b->floors.cl_open_done)
        return FERRY_OK;
    int rc = cacheline_map(b, &b->floors.cl);
    if (rc == FERRY_OK)
        b->floors.cl_open_done = true;
    return rc;
}

static int cacheline_block(bench_t *b, const bench_block_t *blk, long n, uint64_t *ns_out)
{
    return pingpong(b, b->floors.cl, n, &b->floors.cl_seq, ns_out);
}

static int cacheline_measure(bench_t *b)
{
    if (b->floors.cacheline_done)
        return FERRY_OK;
    int rc = cacheline_open(b);
    if (rc != FERRY_OK)
        return rc;
    b->floors.cacheline_done = true;
    b->floors.cacheline_us = -1.0;
    cl_flags_t *fl = b->floors.cl;
    if (fl == NULL)
        return FERRY_OK;

    double us[101];
    uint64_t ns;
    if ((rc = bench_barrier(b)) != FERRY_OK ||
        (rc = pingpong(b, fl, CACHELINE_WARMUP, &b->floors.cl_seq, &ns)) != FERRY_OK)
        return rc;
    for (int r = 0; r < b->opts.reps; r++) {
        if ((rc = pingpong(b, fl, CACHELINE_ITERS, &b->floors.cl_seq, &ns)) != FERRY_OK)
            return rc;
        us[r] = (double)ns / 1e3 / (2.0 * CACHELINE_ITERS);
    }
    b->floors.cacheline_us = bench_median(us, b->opts.reps);
    return FERRY_OK;
}

/* ---- process_vm_writev ---- */

typedef struct pvw_hello {
    int64_t pid;
    uint64_t addr;
    uint64_t len;
} pvw_hello_t;

/* Rank 0 learns rank 1's pid and buffer; rank 1 first allows rank 0 to
 * write into it where a Yama policy would refuse a sibling process. Rank 0
 * then tells rank 1 whether a first write worked, so both know whether the
 * floor exists. */
static int pvw_setup(bench_t *b)
{
    pvw_hello_t h = {.pid = getpid(), .addr = (uint64_t)(uintptr_t)b->buf, .len = b->buf_len};
    int32_t ok = 0;
    size_t len;
    int rc;
    b->floors.pvw_setup_done = true;
    if (b->rank == 1) {
        /* Without Yama this fails with EINVAL, which changes nothing. */
        (void)prctl(PR_SET_PTRACER, (unsigned long)b->peer_pid, 0, 0, 0);
        if ((rc = bench_ctrl_send(b, BENCH_CTRL_PVW, &h, sizeof(h))) != FERRY_OK ||
            (rc = bench_ctrl_recv(b, BENCH_CTRL_PVW, &ok, sizeof(ok), &len)) != FERRY_OK)
            return rc;
        if (len != sizeof(ok) || (ok != 0 && ok != 1)) {
            bench_error(b, "malformed process_vm_writev result from rank %d", b->peer);
            return FERRY_ERR_PROTO;
        }
        b->floors.pvw_ok = ok == 1;
        return FERRY_OK;
    }
    if ((rc = bench_ctrl_recv(b, BENCH_CTRL_PVW, &h, sizeof(h), &len)) != FERRY_OK)
        return rc;
    if (len != sizeof(h) || h.pid <= 0 || h.pid != b->peer_pid || h.len < b->buf_len) {
        bench_error(b, "malformed buffer description from rank %d", b->peer);
        return FERRY_ERR_PROTO;
    }
    b->floors.peer_pid = (pid_t)h.pid;
    b->floors.peer_addr = h.addr;
    struct iovec l = {.iov_base = b->pattern, .iov_len = 1};
    struct iovec r = {.iov_base = (void *)(uintptr_t)h.addr, .iov_len = 1};
    if (process_vm_writev(b->floors.peer_pid, &l, 1, &r, 1, 0) != 1)
        snprintf(b->floors.pvw_error, sizeof(b->floors.pvw_error), "%s", strerror(errno));
    else
        ok = 1;
    b->floors.pvw_ok = ok == 1;
    return bench_ctrl_send(b, BENCH_CTRL_PVW, &ok, sizeof(ok));
}

/* Rank 0: one timed run of n windows at size; *ns_out the elapsed time. */
static int pvw_windows(bench_t *b, size_t size, long n, uint64_t *ns_out)
{
    struct iovec l = {.iov_base = b->pattern, .iov_len = size};
    struct iovec r = {.iov_base = (void *)(uintptr_t)b->floors.peer_addr, .iov_len = size};
    uint64_t t0 = bench_now_ns();
    for (long w = 0; w < n; w++) {
        for (int i = 0; i < BENCH_WINDOW; i++) {
            ssize_t done = process_vm_writev(b->floors.peer_pid, &l, 1, &r, 1, 0);
            if (done != (ssize_t)size) {
                snprintf(b->floors.pvw_error, sizeof(b->floors.pvw_error),
                         "wrote %zd of %zu bytes: %s", done, size,
                         done < 0 ? strerror(errno) : "short write");
                return FERRY_ERR_IO;
            }
        }
    }
    *ns_out = bench_now_ns() - t0;
    return FERRY_OK;
}

static double pvw_raw_at(const bench_t *b, size_t size)
{
    for (int i = 0; i < b->floors.n_pvw; i++)
        if (b->floors.pvw_size[i] == size)
            return b->floors.pvw_mbs[i];
    return -1.0;
}

/* Measures process_vm_writev for the limits table at every size not yet
 * measured (and TCP's or libfabric's stream where they carry the run). */
static int floor_pvw(bench_t *b, const size_t *sizes, int n)
{
    int rc;
    if (!b->floors.pvw_setup_done && (rc = pvw_setup(b)) != FERRY_OK)
        return rc;
    for (int k = 0; k < n; k++) {
        size_t size = sizes[k];
        bool known = false;
        for (int i = 0; i < b->floors.n_pvw; i++)
            known = known || b->floors.pvw_size[i] == size;
        if (known || size == 0 || b->floors.n_pvw == BENCH_SIZES_MAX)
            continue;
        double mbs = -1.0;
        if (b->rank == 0 && b->floors.pvw_ok) {
            long iters = bench_iters(b, BENCH_LIMITS, size);
            double v[101];
            uint64_t ns;
            rc = pvw_windows(b, size, bench_warmup(b, BENCH_LIMITS, size), &ns);
            for (int r = 0; rc == FERRY_OK && r < b->opts.reps; r++) {
                rc = pvw_windows(b, size, iters, &ns);
                v[r] = (double)size * BENCH_WINDOW * (double)iters / ((double)ns / 1e3);
            }
            if (rc == FERRY_OK)
                mbs = bench_median(v, b->opts.reps);
            else
                b->floors.pvw_ok = false;
        }
        b->floors.pvw_size[b->floors.n_pvw] = size;
        b->floors.pvw_mbs[b->floors.n_pvw] = mbs;
        b->floors.n_pvw++;
        /* Rank 1 waits for each size on its own, so its wait stays short,
         * learns whether the floor still works (the paired blocks of both
         * ranks depend on it), and answers, so that rank 0 never runs
         * sizes ahead of it and overflows its queue of control messages. */
        int32_t ok = b->floors.pvw_ok;
        size_t len;
        if (b->rank == 0) {
            if ((rc = bench_ctrl_send(b, BENCH_CTRL_PVW, &ok, sizeof(ok))) == FERRY_OK)
                rc = bench_ctrl_recv(b, BENCH_CTRL_DONE, NULL, 0, &len);
        } else {
            rc = bench_ctrl_recv(b, BENCH_CTRL_PVW, &ok, sizeof(ok), &len);
            if (rc == FERRY_OK && (len != sizeof(ok) || (ok != 0 && ok != 1))) {
                bench_error(b, "malformed process_vm_writev result from rank %d", b->peer);
                rc = FERRY_ERR_PROTO;
            }
            b->floors.pvw_ok = ok == 1;
            if (rc == FERRY_OK)
                rc = bench_ctrl_send(b, BENCH_CTRL_DONE, NULL, 0);
        }
        if (rc != FERRY_OK)
            return rc;
    }
    /* >>> tcp floors */
    if (bench_floor_tcp_selected(b))
        return bench_floor_tcp(b, sizes, n);
    /* <<< tcp floors */
    /* >>> ofi floors */
    if (bench_floor_ofi_selected(b))
        return bench_floor_ofi(b, sizes, n);
    /* <<< ofi floors */
    return FERRY_OK;
}

/* ---- the floors as blocks (bench_pair.c) ---- */

static int pvw_block(bench_t *b, const bench_block_t *blk, long n, uint64_t *ns_out)
{
    int rc = pvw_windows(b, blk->size, n, ns_out);
    if (rc != FERRY_OK)
        bench_error(b, "process_vm_writev floor at %zu bytes: %s", blk->size,
                    b->floors.pvw_error);
    return rc;
}

/* Rank 0: n windows of BENCH_WINDOW copies of size from a hot buffer. */
static int memcpy_block(bench_t *b, const bench_block_t *blk, long n, uint64_t *ns_out)
{
    uint64_t t0 = bench_now_ns();
    for (long w = 0; w < n; w++) {
        for (int i = 0; i < BENCH_WINDOW; i++) {
            memcpy(b->scratch, b->pattern, blk->size);
            /* Keeps the compiler from merging the identical copies. */
            __asm__ __volatile__("" : : "r"(b->scratch) : "memory");
        }
    }
    *ns_out = bench_now_ns() - t0;
    return FERRY_OK;
}

/* n fetch-add ping-pongs: each rank's fetch-add takes the line from the
 * other's cache, as a remote CPU atomic on memory the peer just touched
 * does. Every sequence number is written to its slot in turn (here and by
 * pingpong), so a slot holds s - CL_SLOTS (0 at first) when s comes round,
 * and adding the difference leaves s there. */
static int atomic_pingpong(bench_t *b, const bench_block_t *blk, long n, uint64_t *ns_out)
{
    (void)blk;
    cl_flags_t *fl = b->floors.cl;
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        unsigned s = ++b->floors.cl_seq;
        unsigned step = s > CL_SLOTS ? CL_SLOTS : s;
        int rc;
        if (b->rank == 0) {
            atomic_fetch_add_explicit(&fl->slot[s % CL_SLOTS].ping, step, memory_order_acq_rel);
            rc = spin_until(b, &fl->slot[s % CL_SLOTS].pong, s);
        } else {
            rc = spin_until(b, &fl->slot[s % CL_SLOTS].ping, s);
            atomic_fetch_add_explicit(&fl->slot[s % CL_SLOTS].pong, step, memory_order_acq_rel);
        }
        if (rc != FERRY_OK)
            return rc;
    }
    *ns_out = bench_now_ns() - t0;
    return FERRY_OK;
}

int bench_floor_atomic_block(bench_t *b, bench_block_t *blk_out, bool *ok_out)
{
    int rc = cacheline_open(b);
    if (rc != FERRY_OK)
        return rc;
    bench_block_t blk = {.run = atomic_pingpong, .per_time = true, .unit = 2.0, .size = 8};
    *blk_out = blk;
    *ok_out = b->floors.cl != NULL;
    return FERRY_OK;
}

/* Rank 0: n windows of BENCH_WINDOW fetch-adds of blk->size bytes, one
 * after the other, on a counter of the shared mapping. Rank 1 waits for the
 * end of the block without touching it: the one-sided rate, which no
 * remote atomic stream (whose target does not add meanwhile) can pass. */
static int atomic_rate_block(bench_t *b, const bench_block_t *blk, long n, uint64_t *ns_out)
{
    cl_flags_t *fl = b->floors.cl;
    uint64_t sink = 0;
    uint64_t t0 = bench_now_ns();
    if (blk->size == 4) {
        for (long w = 0; w < n; w++)
            for (int i = 0; i < BENCH_WINDOW; i++)
                sink += atomic_fetch_add_explicit(&fl->add32, 1, memory_order_acq_rel);
    } else {
        for (long w = 0; w < n; w++)
            for (int i = 0; i < BENCH_WINDOW; i++)
                sink += atomic_fetch_add_explicit(&fl->add64, 1, memory_order_acq_rel);
    }
    *ns_out = bench_now_ns() - t0;
    /* The fetched values are used, as the remote fetch-adds' are. */
    __asm__ __volatile__("" : : "r"(sink) : "memory");
    return FERRY_OK;
}

int bench_floor_atomic_rate_block(bench_t *b, size_t size, bench_block_t *blk_out, bool *ok_out)
{
    int rc = cacheline_open(b);
    if (rc != FERRY_OK)
        return rc;
    bench_block_t blk = {.run = atomic_rate_block, .size = size, .rank0_only = true,
                         .unit = BENCH_WINDOW};
    *blk_out = blk;
    *ok_out = b->floors.cl != NULL;
    return FERRY_OK;
}

int bench_floor_lat_block(bench_t *b, bench_block_t *blk_out, bool *ok_out)
{
    int rc;
    bench_block_t blk = {.per_time = true, .unit = 2.0, .size = 8}; /* half round trips */
    bool ok;
    if (bench_floor_tcp_selected(b)) { /* tcp floors */
        if ((rc = bench_floor_tcp_setup(b)) != FERRY_OK)
            return rc;
        blk.run = bench_floor_tcp_pingpong_block;
        ok = b->floors.tcp_ok;
    } else if (bench_floor_ofi_selected(b)) { /* ofi floors */
        if ((rc = bench_floor_ofi_setup(b)) != FERRY_OK)
            return rc;
        blk.run = bench_floor_ofi_pingpong_block;
        ok = b->floors.ofi_ok;
    } else {
        if ((rc = cacheline_open(b)) != FERRY_OK)
            return rc;
        blk.run = cacheline_block;
        blk.size = 64;
        ok = b->floors.cl != NULL;
    }
    *blk_out = blk;
    *ok_out = ok;
    return FERRY_OK;
}

int bench_floor_bw_block(bench_t *b, size_t size, bool use_memcpy, bench_block_t *blk_out,
                         bool *ok_out)
{
    int rc;
    bench_block_t blk = {.size = size, .unit = (double)size * BENCH_WINDOW};
    bool ok = size > 0;
    if (use_memcpy) {
        blk.run = memcpy_block;
        blk.rank0_only = true;
    } else if (bench_floor_tcp_selected(b)) { /* tcp floors */
        if ((rc = bench_floor_tcp_setup(b)) != FERRY_OK)
            return rc;
        blk.run = bench_floor_tcp_stream_block;
        ok = ok && b->floors.tcp_ok;
    } else if (bench_floor_ofi_selected(b)) { /* ofi floors */
        if ((rc = bench_floor_ofi_setup(b)) != FERRY_OK)
            return rc;
        blk.run = bench_floor_ofi_stream_block;
        ok = ok && b->floors.ofi_ok && size <= b->buf_len;
    } else {
        if (!b->floors.pvw_setup_done && (rc = pvw_setup(b)) != FERRY_OK)
            return rc;
        blk.run = pvw_block;
        blk.rank0_only = true;
        ok = ok && b->floors.pvw_ok;
    }
    *blk_out = blk;
    *ok_out = ok;
    return FERRY_OK;
}

void bench_floor_fini(bench_t *b)
{
    if (b->floors.cl != NULL)
        munmap(b->floors.cl, cacheline_map_len());
    b->floors.cl = NULL;
    bench_floor_tcp_fini(b); /* tcp floors */
    bench_floor_ofi_fini(b); /* ofi floors */
}

/* ---- memcpy ---- */

/* Rank 0: median memcpy bandwidth at size, buffers hot in cache. */
static double floor_memcpy(bench_t *b, size_t size)
{
    /* About 64 MiB per repetition, within sensible bounds on the count. */
    long iters = (long)(((size_t)64 << 20) / size);
    if (iters < 16)
        iters = 16;
    if (iters > (1L << 20))
        iters = 1L << 20;
    double v[101];
    for (int r = -1; r < b->opts.reps; r++) {
        long n = r < 0 ? iters / 10 + 1 : iters;
        uint64_t t0 = bench_now_ns();
        for (long i = 0; i < n; i++) {
            memcpy(b->scratch, b->pattern, size);
            /* Keeps the compiler from merging the identical copies. */
            __asm__ __volatile__("" : : "r"(b->scratch) : "memory");
        }
        uint64_t ns = bench_now_ns() - t0;
        if (r >= 0)
            v[r] = (double)size * (double)n / ((double)ns / 1e3);
    }
    return bench_median(v, b->opts.reps);
}

int bench_run_limits(bench_t *b)
{
    size_t sizes[BENCH_SIZES_MAX];
    int n = bench_sizes(b, BENCH_LIMITS, sizes);
    int rc;
    if ((rc = floor_cacheline(b)) != FERRY_OK || (rc = floor_pvw(b, sizes, n)) !=
                                                           FERRY_OK)
        return rc;
    /* >>> tcp floors: measured in every limits run */
    if ((rc = bench_floor_tcp(b, sizes, n)) != FERRY_OK)
        return rc;
    /* <<< tcp floors */
    if (b->rank == 0) {
        double cl = b->floors.cacheline_shm_us;
        printf("\n# ferry-bench limits (transport %s)\n", b->transport);
        printf("# each value: median of %d repetitions; same two ranks and cpus as the other "
               "tests\n", b->opts.reps);
        if (cl > 0)
            printf("# cache-line ping-pong over %d line pairs, half round trip: %.3f us "
                   "(%.1f ns), %d iterations\n", CL_SLOTS, cl, cl * 1e3, CACHELINE_ITERS);
        else
            printf("# cache-line ping-pong: n/a\n");
        if (!b->floors.pvw_ok && b->floors.pvw_error[0] != '\0')
            printf("# process_vm_writev unavailable: %s\n", b->floors.pvw_error);
        printf("# memcpy: one rank, hot cache; process_vm_writev: rank 0 into rank 1, windows "
               "of %d\n", BENCH_WINDOW);
        printf("# %-8s%18s%26s\n", "Size", "memcpy (MB/s)", "process_vm_writev (MB/s)");
        fflush(stdout);
        bench_csv_row(b, "cacheline-pingpong", 64, cl, "us");
    }
    for (int i = 0; i < n; i++) {
        if (b->rank != 0)
            continue;
        double mc = floor_memcpy(b, sizes[i]);
        double pvw = pvw_raw_at(b, sizes[i]);
        if (pvw > 0)
            printf("%-10zu%18.2f%26.2f\n", sizes[i], mc, pvw);
        else
            printf("%-10zu%18.2f%26s\n", sizes[i], mc, "n/a");
        fflush(stdout);
        bench_csv_row(b, "memcpy", sizes[i], mc, "MB/s");
        bench_csv_row(b, "process_vm_writev", sizes[i], pvw, "MB/s");
    }
    /* >>> tcp floors */
    if (b->rank == 0) {
        bool csv = bench_floor_tcp_selected(b);
        if (b->floors.tcp_lat_us > 0)
            printf("# loopback TCP busy-poll ping-pong (TCP_NODELAY, 8 bytes), half round "
                   "trip: %.3f us\n", b->floors.tcp_lat_us);
        else
            printf("# loopback TCP ping-pong: n/a\n");
        printf("# loopback TCP stream, one socket, writes of the size, windows of %d\n",
               BENCH_WINDOW);
        printf("# %-8s%18s\n", "Size", "TCP stream (MB/s)");
        if (csv)
            bench_csv_row(b, "tcp-pingpong", 8, b->floors.tcp_lat_us, "us");
        for (int i = 0; i < n; i++) {
            double mbs = bench_floor_tcp_stream_at(b, sizes[i]);
            printf("%-10zu%18.2f\n", sizes[i], mbs);
            if (csv)
                bench_csv_row(b, "tcp-stream", sizes[i], mbs, "MB/s");
        }
        fflush(stdout);
    }
    /* <<< tcp floors */
    /* >>> ofi floors: measured in limits runs that select ofi */
    if (bench_floor_ofi_selected(b)) {
        if ((rc = bench_floor_ofi(b, sizes, n)) != FERRY_OK)
            return rc;
        if (b->rank == 0) {
            bench_floors_t *f = &b->floors;
            if (f->ofi_ok)
                printf("# libfabric (%s) fi_inject/fi_recv ping-pong, 8 bytes, half round "
                       "trip: %.3f us\n", f->ofi_prov, f->ofi_lat_us);
            else
                printf("# libfabric floors: n/a (%s)\n", f->ofi_error);
            printf("# libfabric fi_write stream, %d in flight per window\n", BENCH_WINDOW);
            printf("# %-8s%18s\n", "Size", "fi_write (MB/s)");
            bench_csv_row(b, "ofi-pingpong", 8, f->ofi_lat_us, "us");
            for (int i = 0; i < n; i++) {
                double mbs = bench_floor_ofi_stream_at(b, sizes[i]);
                printf("%-10zu%18.2f\n", sizes[i], mbs);
                bench_csv_row(b, "ofi-write-stream", sizes[i], mbs, "MB/s");
            }
            fflush(stdout);
        }
    }
    /* <<< ofi floors */
    /* Rank 1 waits here while rank 0 copies. */
    return bench_barrier(b);
}
