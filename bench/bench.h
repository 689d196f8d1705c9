/*
 * ferry-bench: OSU-style micro-benchmarks of ferry's public API between two
 * ranks, each figure printed next to the machine's own floor measured in the
 * same run (cache-line ping-pong, memcpy, process_vm_writev).
 *
 * The tool uses only include/ferry/ferry.h, include/ferry/msg.h and POSIX. Its parts:
 *   bench_main.c   options, the run, tables and CSV
 *   bench_comm.c   active-message plumbing: data counting, control messages,
 *                  chunked sends, bounded waits, timing
 *   bench_floor.c  the floors and the `limits` mode
 *   bench_pair.c   paired measurement: floor and figure in alternating blocks
 *   bench_am.c     am-lat, am-bw, am-bibw, am-rate
 *   bench_rdma.c   put-lat, get-lat, put-bw, get-bw
 *   bench_amo.c    amo-fadd-lat, amo-cswap-lat (remote atomics beside a CPU
 *                  atomic ping-pong), put-notify-lat (beside ferry's AM)
 *   bench_tag.c    tag-lat, tag-bw, tag-bibw, tag-rate (include/ferry/msg.h),
 *                  am-lat-rndv, am-bw-rndv (whole messages of any size)
 * Everything hangs off one bench_t that main() owns; there is no global
 * mutable state.
 */
#ifndef FERRY_BENCH_H
#define FERRY_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <ferry/ferry.h>

/* Operations in flight per window of the bandwidth and rate tests (OSU's). */
#define BENCH_WINDOW 64
/* Most sizes one sweep can hold: powers of two fit a 64-bit size. */
#define BENCH_SIZES_MAX 66
/* Largest message size accepted with -m, so buffers stay allocatable. */
#define BENCH_SIZE_LIMIT ((size_t)1 << 30)
/* Sizes up to this run the full iteration count; larger ones scale it down
 * in proportion, as OSU's separate "large message" counts do. */
#define BENCH_LARGE_FROM 8192
/* Longest control message payload (a remote key and an address fit). */
#define BENCH_CTRL_MAX 512
/* Control messages held before the benchmark reads them. The protocol never
 * has more than a few outstanding; more is a peer's error. */
#define BENCH_CTRL_SLOTS 16
/* Most pairs of blocks one figure may take (--pairs). */
#define BENCH_PAIRS_MAX 1001
/* Most iterations in one chunk, whatever the calibration says. */
#define BENCH_BLOCK_ITERS_MAX 100000000L
/* Most timed chunks in one block; the block's value is their median. */
#define BENCH_BLOCK_CHUNKS 16

/* Active-message tags the benchmark uses. */
enum {
    BENCH_TAG_DATA = 1, /* payload of the measured messages, counted */
    BENCH_TAG_ACK = 2,  /* end of a window, counted */
    BENCH_TAG_CTRL = 3, /* setup and phase messages, queued (bench_ctrl_*) */
    BENCH_TAG_WHOLE = 4, /* am-lat-rndv, am-bw-rndv: whole messages of any size */
    BENCH_TAG_NOTE = 5,  /* put-notify-lat: notifications and the AM ping-pong, counted */
    BENCH_TAG_NOTE_BW = 6 /* put-notify-bw: notifications, counted (and checked) */
};

/* Kinds of control message. */
enum {
    BENCH_CTRL_HELLO = 1,   /* pid, cpu, AM max size */
    BENCH_CTRL_RKEY = 2,    /* buffer address and remote key */
    BENCH_CTRL_SHM = 3,     /* name of the cache-line ping-pong mapping */
    BENCH_CTRL_SHM_OK = 4,  /* the mapping is open (or an errno) */
    BENCH_CTRL_PVW = 5,     /* pid and buffer for process_vm_writev */
    BENCH_CTRL_DONE = 6,    /* the initiator finished a phase */
    BENCH_CTRL_PAIR = 9,    /* iterations per floor and figure block */
    BENCH_CTRL_TALLY = 10   /* amo-rate, put-notify-bw: operations rank 0 made, and the verdict */
};

typedef enum bench_mode {
    BENCH_LIMITS = 0,
    BENCH_AM_LAT,
    BENCH_AM_BW,
    BENCH_AM_BIBW,
    BENCH_AM_RATE,
    BENCH_PUT_LAT,
    BENCH_GET_LAT,
    BENCH_PUT_BW,
    BENCH_GET_BW,
    /* bench_tag.c: whole active messages beyond the eager size, and the
     * tagged layer. */
    BENCH_AM_LAT_RNDV,
    BENCH_AM_BW_RNDV,
    BENCH_TAG_LAT,
    BENCH_TAG_BW,
    BENCH_TAG_BIBW,
    BENCH_TAG_RATE,
    /* bench_amo.c */
    BENCH_AMO_FADD_LAT,
    BENCH_AMO_CSWAP_LAT,
    BENCH_AMO_FADD_AM,
    BENCH_PUT_NOTIFY_LAT,
    BENCH_AMO_RATE,
    BENCH_PUT_NOTIFY_BW,
    BENCH_MODE_COUNT
} bench_mode_t;

typedef struct bench_opts {
    unsigned modes;      /* bit m set: run mode m (they run in enum order) */
    bool have_range;     /* -m given; otherwise each mode has its own range */
    size_t min_size;
    size_t max_size;
    const char *csv_path;  /* NULL: no CSV */
    const char *blocks_path; /* NULL: no dump of the paired blocks */
    long iters;          /* -1: each mode's default */
    long warmup;         /* -1: each mode's default */
    int reps;            /* repetitions whose median is reported */
    int timeout_s;       /* longest single wait for the peer */
    bool check;          /* verify the bytes that arrive */
    bool alloc;          /* put/get target memory from ferry_mem_alloc */
    int pairs;           /* floor/figure block pairs per figure that has a floor */
    double block_ms;     /* length of one block */
    bool drop_mixed;     /* leave pairs whose floor changed mode out of the ratio */
    double mode_ratio;   /* two floor blocks further apart than this are different modes */
    bool help;
} bench_opts_t;

/* What the active-message callbacks have seen. Filled from ferry_progress. */
typedef struct bench_rx {
    /* Data units since the last bench_rx_reset: bytes, and one for each
     * empty message, so zero-byte messages are counted too. */
    uint64_t units;
    uint64_t acks;
    /* --check: the size of the measured messages, and what went wrong. */
    size_t check_size;
    uint64_t bad_chunks;
    size_t bad_offset; /* of the first wrong byte in its message */
    /* Control messages, in arrival order. */
    struct {
        uint32_t kind;
        uint32_t len;
        int src;
        uint8_t body[BENCH_CTRL_MAX];
    } ctrl[BENCH_CTRL_SLOTS];
    unsigned ctrl_head;
    unsigned ctrl_count;
    /* Set when a peer sent something malformed; reported by the waits. */
    char proto_error[128];
} bench_rx_t;

/* The floors measured so far in this run (rank 0 holds the values). */
typedef struct bench_floors {
    bool cacheline_done;
    double cacheline_us; /* half round trip; < 0 when unavailable */
    bool pvw_setup_done;
    bool pvw_ok;       /* known to both ranks */
    char pvw_error[96];
    pid_t peer_pid;
    uint64_t peer_addr;
    int n_pvw;
    size_t pvw_size[BENCH_SIZES_MAX];
    double pvw_mbs[BENCH_SIZES_MAX];
    /* The cache-line mapping, kept open for the paired blocks; NULL when
     * unavailable. cl_seq is the last sequence number both ranks used. */
    bool cl_open_done;
    struct cl_flags *cl;
    unsigned cl_seq;
    /* >>> tcp floors (bench_floor_tcp.c) */
    double cacheline_shm_us; /* the cache-line figure when cacheline_us holds tcp's */
    bool tcp_setup_done;
    bool tcp_ok;
    bool tcp_lat_done;
    int tcp_fd;
    uint8_t *tcp_rxbuf; /* rank 1's receive buffer of the stream */
    double tcp_lat_us; /* busy-poll ping-pong half round trip; < 0 unavailable */
    int n_tcp;
    size_t tcp_size[BENCH_SIZES_MAX];
    double tcp_mbs[BENCH_SIZES_MAX];
    /* <<< tcp floors */
    /* >>> ofi floors (bench_floor_ofi.c) */
    bool ofi_setup_done;
    bool ofi_ok;
    bool ofi_lat_done;
    char ofi_error[160];
    char ofi_prov[160];    /* provider and domain measured */
    struct bench_ofi *ofi; /* this rank's libfabric objects; NULL before setup */
    double ofi_lat_us;     /* fi_inject/fi_recv ping-pong half round trip; < 0 unavailable */
    int n_ofi;
    size_t ofi_size[BENCH_SIZES_MAX];
    double ofi_mbs[BENCH_SIZES_MAX];
    /* <<< ofi floors */
} bench_floors_t;

/* Errors FERRY_BENCH_FAULT makes on purpose, so that the tests can show
 * that the final checks of amo-rate and put-notify-bw catch them. */
typedef enum bench_fault {
    BENCH_FAULT_NONE = 0,
    BENCH_FAULT_AMO_SUM,      /* "amo-sum": one fetch-add per size not counted */
    BENCH_FAULT_NOTIFY_COUNT, /* "notify-count": one put with notification not counted */
    BENCH_FAULT_NOTIFY_DATA   /* "notify-data": payloads name the other window's bytes */
} bench_fault_t;

typedef struct bench {
    ferry_ctx_t *ctx;
    int rank;
    int peer;
    bench_opts_t opts;
    const char *transport;
    int cpu;           /* where this rank runs (-1 unknown) */
    int peer_cpu;
    pid_t peer_pid;
    long am_max;       /* ferry_am_max_size to the peer */
    size_t buf_len;    /* length of every buffer below */
    uint8_t *pattern;  /* the bytes sent: pattern[i] = bench_pattern_byte(i) */
    uint8_t *buf;      /* registered for put/get and the target of floors */
    uint8_t *scratch;  /* receive side of the rdma checks, memcpy target */
    ferry_mem_t *mem;
    bool rdma_ready;
    uint64_t peer_raddr;
    ferry_rkey_t peer_rkey;
    ferry_rkey_h *peer_rh; /* peer_rkey unpacked: what put and get go through */
    bench_rx_t rx;
    bench_floors_t floors;
    FILE *csv;
    FILE *blocks;      /* rank 0: --blocks, every pair's blocks */
    bool spin_yield;   /* the ranks may share a cpu: busy waits yield now and then */
    /* bench_amo.c: the atomics' and notifications' own registration (with
     * FERRY_ACCESS_REMOTE_ATOMIC) and the peer's, unpacked. */
    bool amo_ready;
    ferry_mem_t *amo_mem;
    void *amo_plain;   /* its memory when not from ferry_mem_alloc */
    uint8_t *amo_buf;
    ferry_rkey_h *amo_rh;
    uint64_t amo_raddr;
    uint64_t notes;    /* notifications and AM pings received */
    uint64_t note_seq; /* ping-pong exchanges this rank has finished */
    /* put-notify-bw, at the target: notifications received, and with --check
     * the size of the puts, the notifications that saw wrong data and the
     * first wrong byte (or a malformed payload: offset SIZE_MAX). */
    uint64_t notes_bw;
    size_t note_check_size;
    uint64_t notes_bad;
    size_t notes_bad_offset;
    /* FERRY_BENCH_FAULT: a deliberate error the final checks must catch. */
    bench_fault_t fault;
} bench_t;

/* One result row. A paired row carries the statistics of its pairs; an
 * unpaired one (no floor) prints "n/a" with an empty ratio. */
typedef struct bench_row {
    size_t size;
    double value;    /* median of the figure's blocks (or repetitions) */
    double floor;    /* median of the floor's blocks */
    bool paired;     /* measured in pairs: the fields below are set */
    double ratio;    /* median of the paired ratios; < 0: none (every pair dropped) */
    double ratio_q1; /* first and third quartiles of the paired ratios */
    double ratio_q3;
    int pairs;       /* pairs the ratio statistics are over */
    int mixed;       /* pairs whose two halves saw different floor modes */
} bench_row_t;

struct bench_block;
/* Runs n iterations of a block; rank 0 gets the elapsed time in *ns_out. */
typedef int (*bench_block_fn)(bench_t *b, const struct bench_block *blk, long n,
                              uint64_t *ns_out);

/* One thing measured in blocks: a floor or a figure. */
typedef struct bench_block {
    bench_block_fn run;
    void *arg;       /* the run function's own state */
    size_t size;     /* message size */
    bool rank0_only; /* only rank 0 runs it; rank 1 waits for its end */
    bool per_time;   /* value = us / (unit * n), a latency; else unit * n / us */
    double unit;     /* per iteration: the divisor of a latency, or bytes moved */
} bench_block_t;

/* The value of n iterations that took ns, in the block's unit. */
double bench_block_value(const bench_block_t *blk, long n, uint64_t ns);

/* ---- bench_comm.c ---- */

uint64_t bench_now_ns(void);
uint8_t bench_pattern_byte(size_t i);
double bench_median(double *v, int n);

/* Registers the callbacks of the three tags. */
int bench_comm_init(bench_t *b);
/* Clears the data and ack counters and sets the size --check expects.
 * Called before the barrier that starts a size, so no peer data is lost. */
void bench_rx_reset(bench_t *b, size_t check_size);

/* Sends len bytes as data messages no larger than the AM max size (one empty
 * message when len is 0), progressing and retrying under back pressure. */
int bench_send_data(bench_t *b, const void *buf, size_t len);
int bench_send_ack(bench_t *b);
int bench_ctrl_send(bench_t *b, uint32_t kind, const void *body, size_t len);
/* Waits for the next control message, which must be of this kind and at
 * most cap bytes; *len_out gets its length. */
int bench_ctrl_recv(bench_t *b, uint32_t kind, void *body, size_t cap, size_t *len_out);
/* Sends the peer the address, length and key of this rank's registered
 * [addr, addr + len) and takes the peer's, which must cover at least len
 * bytes too (both ranks size their buffers from the same command line). */
int bench_exchange_rkey(bench_t *b, const ferry_mem_t *mem, const void *addr, size_t len,
                        uint64_t *peer_addr_out, ferry_rkey_t *peer_rkey_out);

/* Units one message of `size` bytes adds to bench_rx_t.units. */
static inline uint64_t bench_units(size_t size)
{
    return size > 0 ? size : 1;
}

/* Progresses until rx.units >= units (or rx.acks >= acks), or fails with
 * FERRY_ERR_TIMEOUT after the -t limit, saying what it waited for. */
int bench_wait_units(bench_t *b, uint64_t units, const char *what);
int bench_wait_acks(bench_t *b, uint64_t acks, const char *what);

/* A bounded busy wait: bench_deadline_init, then bench_deadline_check in
 * the loop (cheap: it reads the clock once every 1024 calls). The limit is
 * -t seconds. */
typedef struct bench_deadline {
    uint64_t limit_ns;
    uint64_t end_ns; /* 0 until the clock is first read */
    unsigned tick;
} bench_deadline_t;
void bench_deadline_init(const bench_t *b, bench_deadline_t *d);
bool bench_deadline_passed(bench_deadline_t *d);

int bench_barrier(bench_t *b);
/* Reports an error once, from the rank that saw it. */
void bench_error(const bench_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- bench_main.c ---- */

/* Iterations and warm-up for one size of a mode (defaults or -i/-w, scaled
 * down above BENCH_LARGE_FROM). */
long bench_iters(const bench_t *b, bench_mode_t mode, size_t size);
long bench_warmup(const bench_t *b, bench_mode_t mode, size_t size);
/* The sizes a mode sweeps; returns how many. */
int bench_sizes(const bench_t *b, bench_mode_t mode, size_t sizes_out[BENCH_SIZES_MAX]);
const char *bench_mode_name(bench_mode_t mode);

/* Rank 0 prints a table header, rows and CSV rows; other ranks do nothing. */
void bench_table_begin(bench_t *b, bench_mode_t mode, const char *floor_what,
                       const char *value_col, const char *floor_col);
void bench_table_row(bench_t *b, bench_mode_t mode, const bench_row_t *row, const char *unit);
/* A row of the limits table or CSV with no floor (test named freely). */
void bench_csv_row(bench_t *b, const char *test, size_t size, double value, const char *unit);

/* ---- bench_pair.c ---- */

/* Collective: measures fig against floor in alternating blocks (floor,
 * figure, floor, ..., floor: --pairs figure blocks, each bracketed by two
 * floor blocks) of about --block ms each, and fills *row on rank 0. Both
 * ranks run the same blocks with the same counts, which rank 0 calibrates
 * and sends. */
int bench_pair_run(bench_t *b, const char *test, const bench_block_t *floor,
                   const bench_block_t *fig, long warmup, bench_row_t *row);
/* Collective: fig alone (no floor): warmup iterations, then -r repetitions
 * of iters; rank 0 gets their median. */
int bench_reps_run(bench_t *b, const bench_block_t *fig, long warmup, long iters,
                   double *value_out);
/* Quartile q (0.25, 0.5, 0.75) of n values, which it sorts. */
double bench_quantile(double *v, int n, double q);

/* ---- bench_floor.c ---- */

/* Collective: the latency floor of the run as a block (cache-line ping-pong,
 * or TCP's or libfabric's with those transports), set up on first use.
 * *ok_out (the same on both ranks) says whether it is available. */
int bench_floor_lat_block(bench_t *b, bench_block_t *blk_out, bool *ok_out);
/* Collective: the bandwidth floor at size as a block (process_vm_writev, the
 * TCP stream or the fi_write stream; memcpy when use_memcpy). */
int bench_floor_bw_block(bench_t *b, size_t size, bool use_memcpy, bench_block_t *blk_out,
                         bool *ok_out);
/* Unmaps and closes what the floors hold; safe on a zeroed bench. */
void bench_floor_fini(bench_t *b);

/* The limits mode: every floor alone, -r repetitions each, as a table. */
int bench_run_limits(bench_t *b);

/* >>> tcp floors (bench_floor_tcp.c) */
enum { BENCH_CTRL_TCP = 7 }; /* loopback TCP floor: port, then readiness */
/* FERRY_BTL selects tcp and not sm: the tables' floors are TCP's. */
bool bench_floor_tcp_selected(const bench_t *b);
/* Collective: sets up the loopback connection and the ping-pong floor once,
 * and measures the stream at every size not yet measured. */
int bench_floor_tcp(bench_t *b, const size_t *sizes, int n);
/* Collective: the connection alone; f->tcp_ok tells whether it works. */
int bench_floor_tcp_setup(bench_t *b);
/* Blocks: n ping-pongs (value: half round trip), n windows of the stream. */
int bench_floor_tcp_pingpong_block(bench_t *b, const bench_block_t *blk, long n,
                                   uint64_t *ns_out);
int bench_floor_tcp_stream_block(bench_t *b, const bench_block_t *blk, long n,
                                 uint64_t *ns_out);
double bench_floor_tcp_stream_at(const bench_t *b, size_t size);
void bench_floor_tcp_fini(bench_t *b);
/* <<< tcp floors */

/* >>> ofi floors (bench_floor_ofi.c) */
enum { BENCH_CTRL_OFI = 8 }; /* libfabric floor: address, target buffer and key */
/* FERRY_BTL selects ofi and neither sm nor tcp: the tables' floors are raw
 * libfabric's on the provider the transport uses. */
bool bench_floor_ofi_selected(const bench_t *b);
/* Collective: opens the endpoints and measures the ping-pong once, and the
 * fi_write stream at every size not yet measured. */
int bench_floor_ofi(bench_t *b, const size_t *sizes, int n);
/* Collective: the endpoints alone; f->ofi_ok tells whether they work. */
int bench_floor_ofi_setup(bench_t *b);
/* Blocks: n ping-pongs, n windows of fi_write. */
int bench_floor_ofi_pingpong_block(bench_t *b, const bench_block_t *blk, long n,
                                   uint64_t *ns_out);
int bench_floor_ofi_stream_block(bench_t *b, const bench_block_t *blk, long n,
                                 uint64_t *ns_out);
double bench_floor_ofi_stream_at(const bench_t *b, size_t size);
void bench_floor_ofi_fini(bench_t *b);
/* <<< ofi floors */

/* ---- bench_am.c ---- */

int bench_run_am(bench_t *b, bench_mode_t mode);

/* ---- bench_tag.c ---- */

/* tag-lat, tag-bw, tag-bibw, tag-rate, am-lat-rndv and am-bw-rndv. */
int bench_run_tag(bench_t *b, bench_mode_t mode);

/* ---- bench_rdma.c ---- */

int bench_run_rdma(bench_t *b, bench_mode_t mode);
/* Deregisters the buffer; safe on a zeroed bench. */
void bench_rdma_fini(bench_t *b);

/* ---- bench_amo.c ---- */

int bench_run_amo(bench_t *b, bench_mode_t mode);
void bench_amo_fini(bench_t *b);

/* bench_floor.c: the atomics' floor, a ping-pong of CPU fetch-adds on a
 * cache line the two ranks share (half round trips); *ok_out false when
 * the mapping is unavailable. */
int bench_floor_atomic_block(bench_t *b, bench_block_t *blk_out, bool *ok_out);
/* The amo-rate floor: rank 0 alone, n windows of BENCH_WINDOW CPU
 * fetch-adds of size (4 or 8) bytes on a counter in the same shared
 * mapping, on a cache line of its own that rank 1 does not touch
 * meanwhile (the one-sided rate). */
int bench_floor_atomic_rate_block(bench_t *b, size_t size, bench_block_t *blk_out, bool *ok_out);

/* ---- bench_reg.c ---- */

/* ferry-bench reg [-m MIN:MAX] [-i ITERS]: register+deregister against a
 * registration-cache hit, per size, in every RDMA transport; returns the
 * exit status. */
int bench_run_reg(int argc, char **argv);

#endif /* FERRY_BENCH_H */
