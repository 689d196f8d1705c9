/*
 * ferry-mpibench: OSU-style MPI micro-benchmarks between two ranks, written
 * against MPI-3 alone so that the same source builds against Open MPI and
 * MPICH (one binary each) and runs under any of their transports; the
 * side-by-side script (run_mpi_compare.sh) runs it under each configuration
 * in turn.
 *
 *   mpirun -n 2 --bind-to core ferry-mpibench [metrics] [-m MIN:MAX] [-T MS]
 *                                             [-r REPS] [-w FLAVOR] [-o FILE]
 *
 * Metrics, as OSU measures them:
 *   lat      ping-pong with MPI_Send/MPI_Recv; half the round trip (us)
 *   bw       rank 0 posts windows of 64 MPI_Isend, rank 1 64 MPI_Irecv and
 *            answers each window with a 4-byte message (MB/s)
 *   bibw     both post 64 MPI_Irecv and 64 MPI_Isend per window (MB/s, both
 *            directions counted)
 *   rate     as bw, counted in messages (millions a second)
 *   put-lat, get-lat  one MPI_Put or MPI_Get and its MPI_Win_flush (us)
 *   put-bw, get-bw    windows of 64 operations, one MPI_Win_flush (MB/s)
 *   fop-lat  one 8-byte MPI_Fetch_and_op (MPI_SUM) and its MPI_Win_flush
 *            (us); size 8 only
 * One-sided metrics use a window from MPI_Win_allocate (which Open MPI's
 * osc/sm needs), or with -w create one from MPI_Win_create over memory of
 * the program's own (on one host Open MPI's osc/rdma maps an allocated
 * window's memory and uses neither the BTL's RDMA nor its atomics; a created
 * window's traffic is the BTL's); passive target (MPI_Win_lock_all), rank 0
 * the origin; rank 1 waits in a barrier, which progresses whatever the
 * target must do.
 *
 * Each figure: rank 0 times a warm-up, picks an iteration count that takes
 * about -T ms and broadcasts it; then -r timed repetitions, whose median is
 * printed. Output: comment lines starting with '#', then CSV
 * "metric,size,value,unit", one row per metric and size, from rank 0 on
 * standard output (or into -o FILE).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#define WINDOW 64
#define MAX_REPS 101
/* Largest message accepted with -m: a window of them is allocated twice. */
#define SIZE_LIMIT ((size_t)4 << 20)
/* Most iterations one timed run takes, whatever the calibration says. */
#define ITERS_MAX 10000000L

enum metric {
    M_LAT,
    M_BW,
    M_BIBW,
    M_RATE,
    M_PUT_LAT,
    M_GET_LAT,
    M_PUT_BW,
    M_GET_BW,
    M_FOP_LAT,
    M_COUNT
};

static const char *const metric_names[M_COUNT] = {
    [M_LAT] = "lat",       [M_BW] = "bw",           [M_BIBW] = "bibw",
    [M_RATE] = "rate",     [M_PUT_LAT] = "put-lat", [M_GET_LAT] = "get-lat",
    [M_PUT_BW] = "put-bw", [M_GET_BW] = "get-bw",   [M_FOP_LAT] = "fop-lat",
};

static const char *const metric_units[M_COUNT] = {
    [M_LAT] = "us",       [M_BW] = "MB/s",      [M_BIBW] = "MB/s",
    [M_RATE] = "Mmsg/s",  [M_PUT_LAT] = "us",   [M_GET_LAT] = "us",
    [M_PUT_BW] = "MB/s",  [M_GET_BW] = "MB/s",  [M_FOP_LAT] = "us",
};

typedef struct opts {
    unsigned metrics; /* bit m: run metric m (in enum order) */
    size_t min_size, max_size;
    double time_ms;
    int reps;
    /* -w: MPI_Win_allocate (WIN_ALLOCATE), MPI_Win_create over the program's
     * memory (WIN_CREATE) or over MPI_Alloc_mem's (WIN_ALLOC_MEM) */
    enum { WIN_ALLOCATE, WIN_CREATE, WIN_ALLOC_MEM } win;
    const char *out_path;
} opts_t;

typedef struct bench {
    opts_t o;
    int rank, peer;
    char *sbuf, *rbuf; /* WINDOW * max_size each: a window of messages */
    char *wbase;       /* the one-sided window's memory on this rank */
    char *wmem;        /* that memory when the program allocated it (-w create) */
    char *wpool;       /* or MPI_Alloc_mem gave it (-w alloc_mem) */
    MPI_Win win;
    bool win_open;
    FILE *out; /* rank 0 */
} bench_t;

static const char usage_text[] =
    "usage: mpirun -n 2 [--bind-to core] ferry-mpibench [metrics] [options]\n"
    "metrics: lat bw bibw rate put-lat get-lat put-bw get-bw fop-lat, all (the default),\n"
    "         or a comma list of them, which run in the order above\n"
    "  -m MIN:MAX  message sizes, powers of two from MIN to MAX (K and M suffixes;\n"
    "              default 1:1M); fop-lat is 8 bytes only\n"
    "  -T MS       time one timed repetition takes, milliseconds (20)\n"
    "  -r REPS     timed repetitions per figure; the median is printed (3)\n"
    "  -w FLAVOR   one-sided window: allocate (MPI_Win_allocate, the default),\n"
    "              create (MPI_Win_create over the program's own memory) or\n"
    "              alloc_mem (MPI_Win_create over MPI_Alloc_mem memory, info\n"
    "              mpool_hints ferry)\n"
    "  -o FILE     write the output into FILE rather than standard output\n"
    "  -h          this text\n"
    "output: '#' comment lines, then CSV rows metric,size,value,unit\n";

/* ---- options ---- */

static bool parse_size(const char *s, size_t *out)
{
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return false;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    if (shift > 0)
        end++;
    if (*end != '\0' || v > (SIZE_LIMIT >> shift))
        return false;
    *out = (size_t)(v << shift);
    return true;
}

static bool parse_range(const char *s, opts_t *o)
{
    const char *colon = strchr(s, ':');
    char lo[32];
    if (colon == NULL || (size_t)(colon - s) >= sizeof(lo))
        return false;
    memcpy(lo, s, (size_t)(colon - s));
    lo[colon - s] = '\0';
    size_t min, max;
    if (!parse_size(lo, &min) || !parse_size(colon + 1, &max) || min < 1 || min > max)
        return false;
    o->min_size = min;
    o->max_size = max;
    return true;
}

static bool parse_metrics(const char *arg, opts_t *o, char *err, size_t errlen)
{
    char list[256];
    if (strlen(arg) >= sizeof(list)) {
        snprintf(err, errlen, "metric list too long");
        return false;
    }
    strcpy(list, arg);
    o->metrics = 0;
    char *save = NULL;
    for (char *m = strtok_r(list, ",", &save); m != NULL; m = strtok_r(NULL, ",", &save)) {
        unsigned bit = strcmp(m, "all") == 0 ? (1u << M_COUNT) - 1 : 0;
        for (int i = 0; i < M_COUNT; i++)
            if (strcmp(m, metric_names[i]) == 0)
                bit = 1u << i;
        if (bit == 0) {
            snprintf(err, errlen, "unknown metric '%s'", m);
            return false;
        }
        o->metrics |= bit;
    }
    if (o->metrics == 0) {
        snprintf(err, errlen, "empty metric list '%s'", arg);
        return false;
    }
    return true;
}

/* Returns 0 to go on, 1 after -h, 2 on a usage error (message in err). */
static int parse_args(int argc, char **argv, opts_t *o, char *err, size_t errlen)
{
    *o = (opts_t){.metrics = (1u << M_COUNT) - 1, .min_size = 1, .max_size = (size_t)1 << 20,
                  .time_ms = 20.0, .reps = 3};
    bool have_metrics = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
            return 1;
        if (a[0] != '-') {
            if (have_metrics) {
                snprintf(err, errlen, "one metric argument at most (a comma list runs several)");
                return 2;
            }
            have_metrics = true;
            if (!parse_metrics(a, o, err, errlen))
                return 2;
            continue;
        }
        if (strcmp(a, "-m") != 0 && strcmp(a, "-T") != 0 && strcmp(a, "-r") != 0 &&
            strcmp(a, "-w") != 0 && strcmp(a, "-o") != 0) {
            snprintf(err, errlen, "unknown option '%s'", a);
            return 2;
        }
        if (val == NULL) {
            snprintf(err, errlen, "option %s needs a value", a);
            return 2;
        }
        i++;
        char *end;
        errno = 0;
        if (strcmp(a, "-m") == 0) {
            if (!parse_range(val, o)) {
                snprintf(err, errlen, "-m '%s': expected MIN:MAX, 1 <= MIN <= MAX <= 4M", val);
                return 2;
            }
        } else if (strcmp(a, "-T") == 0) {
            double v = strtod(val, &end);
            if (errno != 0 || *end != '\0' || !(v >= 0.01 && v <= 60000.0)) {
                snprintf(err, errlen, "-T '%s': expected milliseconds from 0.01 to 60000", val);
                return 2;
            }
            o->time_ms = v;
        } else if (strcmp(a, "-r") == 0) {
            long v = strtol(val, &end, 10);
            if (errno != 0 || *end != '\0' || v < 1 || v > MAX_REPS) {
                snprintf(err, errlen, "-r '%s': expected an integer from 1 to %d", val, MAX_REPS);
                return 2;
            }
            o->reps = (int)v;
        } else if (strcmp(a, "-w") == 0) {
            if (strcmp(val, "allocate") == 0) {
                o->win = WIN_ALLOCATE;
            } else if (strcmp(val, "create") == 0) {
                o->win = WIN_CREATE;
            } else if (strcmp(val, "alloc_mem") == 0) {
                o->win = WIN_ALLOC_MEM;
            } else {
                snprintf(err, errlen, "-w '%s': expected allocate, create or alloc_mem", val);
                return 2;
            }
        } else {
            if (val[0] == '\0') {
                snprintf(err, errlen, "-o: empty file name");
                return 2;
            }
            o->out_path = val;
        }
    }
    return 0;
}

/* ---- the measurements ---- */

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++) {
        double x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

static bool one_sided(enum metric m)
{
    return m >= M_PUT_LAT;
}

/* n iterations of metric m at size; both ranks call it, rank 0 gets the
 * elapsed seconds. */
static double run_iters(bench_t *b, enum metric m, size_t size, long n)
{
    MPI_Request req[2 * WINDOW];
    /* Statuses are not read; an array (not MPI_STATUSES_IGNORE) keeps
     * compilers that size-check the argument of MPICH's prototype quiet. */
    MPI_Status st[2 * WINDOW];
    char ack[4] = {0};
    double t0 = MPI_Wtime();
    switch (m) {
    case M_LAT:
        for (long i = 0; i < n; i++) {
            if (b->rank == 0) {
                MPI_Send(b->sbuf, (int)size, MPI_CHAR, b->peer, 1, MPI_COMM_WORLD);
                MPI_Recv(b->rbuf, (int)size, MPI_CHAR, b->peer, 1, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(b->rbuf, (int)size, MPI_CHAR, b->peer, 1, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                MPI_Send(b->sbuf, (int)size, MPI_CHAR, b->peer, 1, MPI_COMM_WORLD);
            }
        }
        break;
    case M_BW:
    case M_RATE:
        for (long i = 0; i < n; i++) {
            if (b->rank == 0) {
                for (int k = 0; k < WINDOW; k++)
                    MPI_Isend(b->sbuf + (size_t)k * size, (int)size, MPI_CHAR, b->peer, 2,
                              MPI_COMM_WORLD, &req[k]);
                MPI_Waitall(WINDOW, req, st);
                MPI_Recv(ack, 4, MPI_CHAR, b->peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                for (int k = 0; k < WINDOW; k++)
                    MPI_Irecv(b->rbuf + (size_t)k * size, (int)size, MPI_CHAR, b->peer, 2,
                              MPI_COMM_WORLD, &req[k]);
                MPI_Waitall(WINDOW, req, st);
                MPI_Send(ack, 4, MPI_CHAR, b->peer, 3, MPI_COMM_WORLD);
            }
        }
        break;
    case M_BIBW:
        for (long i = 0; i < n; i++) {
            for (int k = 0; k < WINDOW; k++)
                MPI_Irecv(b->rbuf + (size_t)k * size, (int)size, MPI_CHAR, b->peer, 4,
                          MPI_COMM_WORLD, &req[k]);
            for (int k = 0; k < WINDOW; k++)
                MPI_Isend(b->sbuf + (size_t)k * size, (int)size, MPI_CHAR, b->peer, 4,
                          MPI_COMM_WORLD, &req[WINDOW + k]);
            MPI_Waitall(2 * WINDOW, req, st);
        }
        break;
    case M_PUT_LAT:
    case M_GET_LAT:
    case M_PUT_BW:
    case M_GET_BW: {
        if (b->rank != 0)
            break;
        int per = m == M_PUT_LAT || m == M_GET_LAT ? 1 : WINDOW;
        bool put = m == M_PUT_LAT || m == M_PUT_BW;
        for (long i = 0; i < n; i++) {
            for (int k = 0; k < per; k++) {
                if (put)
                    MPI_Put(b->sbuf, (int)size, MPI_CHAR, b->peer, 0, (int)size, MPI_CHAR,
                            b->win);
                else
                    MPI_Get(b->rbuf, (int)size, MPI_CHAR, b->peer, 0, (int)size, MPI_CHAR,
                            b->win);
            }
            MPI_Win_flush(b->peer, b->win);
        }
        break;
    }
    case M_FOP_LAT:
        if (b->rank != 0)
            break;
        for (long i = 0; i < n; i++) {
            uint64_t one = 1, old;
            MPI_Fetch_and_op(&one, &old, MPI_UINT64_T, b->peer, 0, MPI_SUM, b->win);
            MPI_Win_flush(b->peer, b->win);
        }
        break;
    default:
        break;
    }
    return MPI_Wtime() - t0;
}

/* The figure of n iterations that took sec seconds. */
static double figure(enum metric m, size_t size, long n, double sec)
{
    double us = sec * 1e6;
    if (us <= 0)
        us = 1e-3;
    switch (m) {
    case M_LAT:
        return us / (2.0 * (double)n);
    case M_BW:
    case M_PUT_BW:
    case M_GET_BW:
        return (double)size * WINDOW * (double)n / us;
    case M_BIBW:
        return 2.0 * (double)size * WINDOW * (double)n / us;
    case M_RATE:
        return WINDOW * (double)n / us;
    default: /* put-lat, get-lat, fop-lat */
        return us / (double)n;
    }
}

/* A one-sided run ends when rank 0 is done; rank 1 waits in the barrier. */
static double run_synced(bench_t *b, enum metric m, size_t size, long n)
{
    double sec = run_iters(b, m, size, n);
    if (one_sided(m))
        MPI_Barrier(MPI_COMM_WORLD);
    return sec;
}

/* Measures one figure; rank 0 gets it. */
static double measure(bench_t *b, enum metric m, size_t size)
{
    /* A warm-up of a few iterations sets the count; the count is rank 0's
     * and both ranks use it. */
    long warm = size >= 65536 ? 2 : m == M_LAT || one_sided(m) ? 100 : 10;
    double sec = run_synced(b, m, size, warm);
    long n = 1;
    if (b->rank == 0) {
        double per = sec / (double)warm;
        double want = b->o.time_ms * 1e-3 / (per > 0 ? per : 1e-9);
        n = want < 1 ? 1 : want > ITERS_MAX ? ITERS_MAX : (long)want;
    }
    MPI_Bcast(&n, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    double v[MAX_REPS];
    for (int r = 0; r < b->o.reps; r++)
        v[r] = figure(m, size, n, run_synced(b, m, size, n));
    return median(v, b->o.reps);
}

static int setup(bench_t *b)
{
    size_t len = b->o.max_size * WINDOW;
    b->sbuf = malloc(len);
    b->rbuf = malloc(len);
    if (b->sbuf == NULL || b->rbuf == NULL) {
        fprintf(stderr, "ferry-mpibench: rank %d: cannot allocate 2 buffers of %zu bytes\n",
                b->rank, len);
        return 1;
    }
    memset(b->sbuf, 'a', len);
    memset(b->rbuf, 0, len);
    bool need_win = (b->o.metrics & ~((1u << M_PUT_LAT) - 1)) != 0;
    if (!need_win)
        return 0;
    size_t wlen = b->o.max_size > 8 ? b->o.max_size : 8;
    if (b->o.win == WIN_ALLOC_MEM) {
        /* The hint names ferry's pool (Open MPI with btl ferry: sm's heap,
         * which the peers map); other pools and MPIs ignore it. */
        MPI_Info info;
        MPI_Info_create(&info);
        MPI_Info_set(info, "mpool_hints", "ferry");
        int rc = MPI_Alloc_mem((MPI_Aint)wlen, info, &b->wpool);
        MPI_Info_free(&info);
        if (rc != MPI_SUCCESS)
            return 1;
        b->wbase = b->wpool;
        if (MPI_Win_create(b->wbase, (MPI_Aint)wlen, 1, MPI_INFO_NULL, MPI_COMM_WORLD,
                           &b->win) != MPI_SUCCESS)
            return 1;
    } else if (b->o.win == WIN_CREATE) {
        /* Page aligned, as an application's buffer of this size would be. */
        if (posix_memalign((void **)&b->wmem, 4096, wlen) != 0) {
            fprintf(stderr, "ferry-mpibench: rank %d: cannot allocate a window of %zu bytes\n",
                    b->rank, wlen);
            return 1;
        }
        b->wbase = b->wmem;
        if (MPI_Win_create(b->wbase, (MPI_Aint)wlen, 1, MPI_INFO_NULL, MPI_COMM_WORLD,
                           &b->win) != MPI_SUCCESS)
            return 1;
    } else if (MPI_Win_allocate((MPI_Aint)wlen, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &b->wbase,
                                &b->win) != MPI_SUCCESS) {
        return 1;
    }
    memset(b->wbase, 0, wlen);
    b->win_open = true;
    MPI_Win_lock_all(0, b->win);
    return 0;
}

static void print_header(bench_t *b)
{
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    /* The first line of the version string is enough to tell them apart. */
    char *nl = strchr(lib, '\n');
    if (nl != NULL)
        *nl = '\0';
    fprintf(b->out, "# ferry-mpibench: %s\n", lib);
    fprintf(b->out, "# each value: median of %d repetitions of about %g ms; windows of %d\n",
            b->o.reps, b->o.time_ms, WINDOW);
    if (b->win_open)
        fprintf(b->out, "# one-sided window from %s\n",
                b->o.win == WIN_ALLOC_MEM ? "MPI_Win_create over MPI_Alloc_mem (mpool_hints ferry)"
                : b->o.win == WIN_CREATE  ? "MPI_Win_create"
                                          : "MPI_Win_allocate");
    fprintf(b->out, "metric,size,value,unit\n");
    fflush(b->out);
}

static int run(bench_t *b)
{
    /* The peer would wait for this rank forever: end the job. */
    if (setup(b) != 0)
        MPI_Abort(MPI_COMM_WORLD, 1);
    if (b->rank == 0)
        print_header(b);
    for (int m = 0; m < M_COUNT; m++) {
        if ((b->o.metrics & (1u << m)) == 0)
            continue;
        for (size_t size = b->o.min_size; size <= b->o.max_size; size *= 2) {
            size_t s = m == M_FOP_LAT ? 8 : size;
            MPI_Barrier(MPI_COMM_WORLD);
            double v = measure(b, (enum metric)m, s);
            if (b->rank == 0) {
                fprintf(b->out, "%s,%zu,%.4f,%s\n", metric_names[m], s, v, metric_units[m]);
                fflush(b->out);
            }
            if (m == M_FOP_LAT)
                break;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    bench_t b;
    memset(&b, 0, sizeof(b));
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char err[256] = "";
    int prc = parse_args(argc, argv, &b.o, err, sizeof(err));
    if (prc != 0) {
        if (b.rank == 0) {
            if (prc == 2)
                fprintf(stderr, "ferry-mpibench: %s\n%s", err, usage_text);
            else
                fputs(usage_text, stdout);
        }
        MPI_Finalize();
        return prc == 1 ? 0 : 2;
    }
    if (size != 2) {
        if (b.rank == 0)
            fprintf(stderr, "ferry-mpibench: needs exactly 2 ranks, the job has %d\n", size);
        MPI_Finalize();
        return 2;
    }
    b.peer = 1 - b.rank;
    b.out = stdout;
    int ok = 1;
    if (b.rank == 0 && b.o.out_path != NULL && (b.out = fopen(b.o.out_path, "w")) == NULL) {
        fprintf(stderr, "ferry-mpibench: -o %s: %s\n", b.o.out_path, strerror(errno));
        ok = 0;
    }
    /* Both ranks leave together when rank 0 cannot write. */
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int rc = ok ? run(&b) : 1;
    if (b.win_open) {
        MPI_Win_unlock_all(b.win);
        MPI_Win_free(&b.win);
    }
    if (b.rank == 0 && b.out != stdout && b.out != NULL && fclose(b.out) != 0) {
        fprintf(stderr, "ferry-mpibench: -o %s: %s\n", b.o.out_path, strerror(errno));
        rc = 1;
    }
    free(b.sbuf);
    free(b.rbuf);
    free(b.wmem);
    if (b.wpool != NULL)
        MPI_Free_mem(b.wpool);
    MPI_Finalize();
    return rc;
}
