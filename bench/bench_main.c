/*
 * ferry-bench: options, the run, and the OSU-format tables and CSV rows.
 *
 *   ferryrun -n 2 --bind-to core ferry-bench [mode] [-m MIN:MAX] [--csv FILE]
 *                                            [-i ITERS] [-w WARMUP] [-r REPS]
 *                                            [-p PAIRS] [-b MS] [--drop-mixed]
 *                                            [-t SECONDS] [--check]
 *
 * Both ranks parse the same command line and walk the same sequence of
 * phases, so no option needs to be sent between them.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static const char *const mode_names[BENCH_MODE_COUNT] = {
    [BENCH_LIMITS] = "limits",   [BENCH_AM_LAT] = "am-lat",   [BENCH_AM_BW] = "am-bw",
    [BENCH_AM_BIBW] = "am-bibw", [BENCH_AM_RATE] = "am-rate", [BENCH_PUT_LAT] = "put-lat",
    [BENCH_GET_LAT] = "get-lat", [BENCH_PUT_BW] = "put-bw",   [BENCH_GET_BW] = "get-bw",
    [BENCH_AM_LAT_RNDV] = "am-lat-rndv", [BENCH_AM_BW_RNDV] = "am-bw-rndv",
    [BENCH_TAG_LAT] = "tag-lat", [BENCH_TAG_BW] = "tag-bw", [BENCH_TAG_BIBW] = "tag-bibw",
    [BENCH_TAG_RATE] = "tag-rate", [BENCH_AMO_FADD_LAT] = "amo-fadd-lat",
    [BENCH_AMO_CSWAP_LAT] = "amo-cswap-lat", [BENCH_AMO_FADD_AM] = "amo-fadd-am",
    [BENCH_PUT_NOTIFY_LAT] = "put-notify-lat",
    [BENCH_AMO_RATE] = "amo-rate", [BENCH_PUT_NOTIFY_BW] = "put-notify-bw",
};

const char *bench_mode_name(bench_mode_t mode)
{
    return mode < BENCH_MODE_COUNT ? mode_names[mode] : "?";
}

static const char usage_text[] =
    "usage: ferryrun -n 2 [--bind-to core] ferry-bench [mode] [options]\n"
    "modes: limits am-lat am-bw am-bibw am-rate put-lat get-lat put-bw get-bw am-lat-rndv\n"
    "       am-bw-rndv tag-lat tag-bw tag-bibw tag-rate amo-fadd-lat amo-cswap-lat\n"
    "       amo-fadd-am put-notify-lat amo-rate put-notify-bw, all (the default), or a\n"
    "       comma list of them, which run in the order above. am-*-rndv send each\n"
    "       message whole (rendezvous above the eager size; am-* cut it into chunks);\n"
    "       tag-* use the tagged layer (ferry/msg.h); amo-*-lat time one remote atomic\n"
    "       (sizes 4 and 8) to completion beside a CPU fetch-add ping-pong on a shared\n"
    "       cache line; amo-fadd-am times the same fetch-add beside ferry's own\n"
    "       active-message round trip;\n"
    "       put-notify-lat is a ping-pong of puts with notification beside ferry's\n"
    "       own active-message ping-pong; amo-rate keeps windows of 64 fetch-adds in\n"
    "       flight to one counter (sizes 4 and 8; its sum is checked) beside rank 0's\n"
    "       own CPU fetch-adds on a shared line that rank 1 leaves alone; put-notify-bw\n"
    "       sends windows of 64 puts with notification (counted at the target) beside\n"
    "       put-bw's floor\n"
    "  -m, --message-size MIN:MAX  sizes swept in powers of two (MIN:, :MAX and MAX also;\n"
    "                              K, M, G suffixes); default 0 or 1 to 1M, am-rate 8\n"
    "  -i, --iterations N   timed iterations (windows for bandwidth and rate) per\n"
    "                       repetition up to 8 KiB; larger sizes scale down by 8K/size\n"
    "  -w, --warmup N       untimed iterations before them, scaled the same way\n"
    "  -r, --repetitions R  repetitions of the timed loop of a figure without a floor, and\n"
    "                       of the limits table's floors; the median is reported (5)\n"
    "  -p, --pairs N        a figure with a floor is measured in N pairs of blocks, floor\n"
    "                       then figure, with one more floor block at the end (21)\n"
    "  -b, --block MS       length of one block, milliseconds (2; at least one iteration)\n"
    "      --drop-mixed     leave out of the ratio the pairs whose floor changed mode\n"
    "      --mode-ratio X   two consecutive floor blocks more than X times apart are in\n"
    "                       different modes; the pair between them is mixed (1.5)\n"
    "      --blocks FILE    also write every pair: test,size,pair,floor,figure,next_floor,\n"
    "                       ratio,mixed (block values: medians of their chunks)\n"
    "  -t, --timeout S      longest wait for the peer before failing, seconds (60)\n"
    "      --csv FILE       also write rows test,transport,size,value,unit,floor,ratio,\n"
    "                       ratio_q1,ratio_q3,pairs,mixed_pairs,mixed_dropped\n"
    "  -c, --check          verify every byte received, put or got (put-notify-bw: the\n"
    "                       bytes each notification's handler sees)\n"
    "      --alloc          put/get, atomic and notification target memory comes from\n"
    "                       ferry_mem_alloc (with sm, a shared heap peers copy into and\n"
    "                       apply CPU atomics to); put-bw, get-bw and put-notify-bw floors\n"
    "                       are memcpy\n"
    "  -h, --help           this text\n"
    "environment: FERRY_BTL transports (also printed), FERRY_BENCH_BIND=0 leaves the\n"
    "ranks unpinned (default: rank r pins itself to the r-th allowed cpu, modulo),\n"
    "FERRY_BENCH_TCP_FLOOR_ADDR the IPv4 address of rank 1 the tcp floors listen on\n"
    "(default 127.0.0.1; on two hosts, rank 1's address on the link measured),\n"
    "FERRY_BENCH_FAULT (tests only) amo-sum, notify-count or notify-data makes an error\n"
    "on purpose that the final checks of amo-rate and put-notify-bw must report.\n";

/* ---- option parsing ---- */

/* Parses a size with an optional K, M or G (binary) suffix. */
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
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift > 0)
        end++;
    if (*end != '\0' || v > (BENCH_SIZE_LIMIT >> shift))
        return false;
    *out = (size_t)(v << shift);
    return true;
}

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    if (*s == '\0')
        return false;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* A finite number in [lo, hi], nothing after it. */
static bool parse_double(const char *s, double lo, double hi, double *out)
{
    if (*s == '\0')
        return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    /* NaN fails both comparisons, so it is refused too. */
    if (errno != 0 || *end != '\0' || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

/* "MIN:MAX", "MIN:", ":MAX" or "MAX". */
static bool parse_range(const char *s, bench_opts_t *o)
{
    char lo[32], hi[32];
    const char *colon = strchr(s, ':');
    size_t min = 0, max = (size_t)1 << 20;
    if (colon == NULL) {
        if (!parse_size(s, &max))
            return false;
    } else {
        size_t nlo = (size_t)(colon - s);
        if (nlo >= sizeof(lo) || strlen(colon + 1) >= sizeof(hi))
            return false;
        memcpy(lo, s, nlo);
        lo[nlo] = '\0';
        strcpy(hi, colon + 1);
        if (lo[0] == '\0' && hi[0] == '\0')
            return false;
        if (lo[0] != '\0' && !parse_size(lo, &min))
            return false;
        if (hi[0] != '\0' && !parse_size(hi, &max))
            return false;
    }
    if (min > max)
        return false;
    o->have_range = true;
    o->min_size = min;
    o->max_size = max;
    return true;
}

/* A mode, "all", or a comma list of them ("am-lat,put-lat"). */
static bool parse_modes(const char *arg, bench_opts_t *o, char *err, size_t errlen)
{
    char list[256];
    if (strlen(arg) >= sizeof(list)) {
        snprintf(err, errlen, "mode list too long");
        return false;
    }
    strcpy(list, arg);
    o->modes = 0;
    char *save = NULL;
    for (char *m = strtok_r(list, ",", &save); m != NULL; m = strtok_r(NULL, ",", &save)) {
        unsigned bit = 0;
        if (strcmp(m, "all") == 0)
            bit = (1u << BENCH_MODE_COUNT) - 1;
        for (int i = 0; i < BENCH_MODE_COUNT; i++)
            if (strcmp(m, mode_names[i]) == 0)
                bit = 1u << i;
        if (bit == 0) {
            snprintf(err, errlen, "unknown mode '%s'", m);
            return false;
        }
        o->modes |= bit;
    }
    if (o->modes == 0) {
        snprintf(err, errlen, "empty mode list '%s'", arg);
        return false;
    }
    return true;
}

/* Fills *o from argv; on a usage error writes a message into err. */
static bool parse_args(int argc, char **argv, bench_opts_t *o, char *err, size_t errlen)
{
    enum { OPT_CSV = 256, OPT_ALLOC, OPT_DROP_MIXED, OPT_MODE_RATIO, OPT_BLOCKS };
    static const struct option longopts[] = {
        {"message-size", required_argument, NULL, 'm'},
        {"iterations", required_argument, NULL, 'i'},
        {"warmup", required_argument, NULL, 'w'},
        {"repetitions", required_argument, NULL, 'r'},
        {"pairs", required_argument, NULL, 'p'},
        {"block", required_argument, NULL, 'b'},
        {"drop-mixed", no_argument, NULL, OPT_DROP_MIXED},
        {"mode-ratio", required_argument, NULL, OPT_MODE_RATIO},
        {"blocks", required_argument, NULL, OPT_BLOCKS},
        {"timeout", required_argument, NULL, 't'},
        {"csv", required_argument, NULL, OPT_CSV},
        {"check", no_argument, NULL, 'c'},
        {"alloc", no_argument, NULL, OPT_ALLOC},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof(*o));
    o->modes = (1u << BENCH_MODE_COUNT) - 1;
    o->iters = -1;
    o->warmup = -1;
    o->reps = 5;
    o->pairs = 21;
    o->block_ms = 2.0;
    o->mode_ratio = 1.5;
    o->timeout_s = 60;

    opterr = 0;
    int c;
    long v;
    while ((c = getopt_long(argc, argv, ":m:i:w:r:p:b:t:ch", longopts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (!parse_range(optarg, o)) {
                snprintf(err, errlen, "-m '%s': expected MIN:MAX, sizes up to 1G with MIN <= "
                         "MAX", optarg);
                return false;
            }
            break;
        case 'i':
            if (!parse_long(optarg, 1, 1000000000L, &o->iters)) {
                snprintf(err, errlen, "-i '%s': expected an integer from 1 to 1000000000",
                         optarg);
                return false;
            }
            break;
        case 'w':
            if (!parse_long(optarg, 0, 1000000000L, &o->warmup)) {
                snprintf(err, errlen, "-w '%s': expected an integer from 0 to 1000000000",
                         optarg);
                return false;
            }
            break;
        case 'r':
            if (!parse_long(optarg, 1, 101, &v)) {
                snprintf(err, errlen, "-r '%s': expected an integer from 1 to 101", optarg);
                return false;
            }
            o->reps = (int)v;
            break;
        case 'p':
            if (!parse_long(optarg, 1, BENCH_PAIRS_MAX, &v)) {
                snprintf(err, errlen, "-p '%s': expected an integer from 1 to %d", optarg,
                         BENCH_PAIRS_MAX);
                return false;
            }
            o->pairs = (int)v;
            break;
        case 'b':
            if (!parse_double(optarg, 0.001, 10000.0, &o->block_ms)) {
                snprintf(err, errlen, "-b '%s': expected milliseconds from 0.001 to 10000",
                         optarg);
                return false;
            }
            break;
        case OPT_DROP_MIXED:
            o->drop_mixed = true;
            break;
        case OPT_MODE_RATIO:
            if (!parse_double(optarg, 1.01, 100.0, &o->mode_ratio)) {
                snprintf(err, errlen, "--mode-ratio '%s': expected a number from 1.01 to 100",
                         optarg);
                return false;
            }
            break;
        case 't':
            if (!parse_long(optarg, 1, 86400, &v)) {
                snprintf(err, errlen, "-t '%s': expected seconds from 1 to 86400", optarg);
                return false;
            }
            o->timeout_s = (int)v;
            break;
        case OPT_CSV:
            if (optarg[0] == '\0') {
                snprintf(err, errlen, "--csv: empty file name");
                return false;
            }
            o->csv_path = optarg;
            break;
        case OPT_BLOCKS:
            if (optarg[0] == '\0') {
                snprintf(err, errlen, "--blocks: empty file name");
                return false;
            }
            o->blocks_path = optarg;
            break;
        case OPT_ALLOC:
            o->alloc = true;
            break;
        case 'c':
            o->check = true;
            break;
        case 'h':
            o->help = true;
            break;
        case ':':
            snprintf(err, errlen, "option %s needs a value", argv[optind - 1]);
            return false;
        default:
            if (optopt != 0)
                snprintf(err, errlen, "unknown option '-%c'", optopt);
            else
                snprintf(err, errlen, "unknown option '%s'", argv[optind - 1]);
            return false;
        }
    }
    if (optind < argc) {
        if (argc - optind > 1) {
            snprintf(err, errlen, "one mode argument at most (a comma list runs several), got '%s' and '%s'", argv[optind],
                     argv[optind + 1]);
            return false;
        }
        if (!parse_modes(argv[optind], o, err, errlen))
            return false;
    }
    return true;
}

/* ---- iterations and sizes ---- */

typedef enum { KIND_LAT, KIND_BW, KIND_RATE, KIND_LIMITS } mode_kind_t;

static mode_kind_t mode_kind(bench_mode_t mode)
{
    switch (mode) {
    case BENCH_AM_LAT:
    case BENCH_PUT_LAT:
    case BENCH_GET_LAT:
    case BENCH_AM_LAT_RNDV:
    case BENCH_TAG_LAT:
    case BENCH_AMO_FADD_LAT:
    case BENCH_AMO_CSWAP_LAT:
    case BENCH_AMO_FADD_AM:
    case BENCH_PUT_NOTIFY_LAT:
        return KIND_LAT;
    case BENCH_AM_RATE:
    case BENCH_TAG_RATE:
    case BENCH_AMO_RATE:
        return KIND_RATE;
    case BENCH_LIMITS:
        return KIND_LIMITS;
    default:
        return KIND_BW;
    }
}

/* Scales a count down above BENCH_LARGE_FROM in proportion to the size, so
 * every size moves about the same number of bytes, keeping at least floor_n
 * (or n itself when smaller). */
static long scale_count(long n, size_t size, long floor_n)
{
    if (size <= BENCH_LARGE_FROM)
        return n;
    long v = (long)((double)n * BENCH_LARGE_FROM / (double)size);
    long lo = n < floor_n ? n : floor_n;
    return v < lo ? lo : v;
}

long bench_iters(const bench_t *b, bench_mode_t mode, size_t size)
{
    static const long defaults[] = {[KIND_LAT] = 10000, [KIND_BW] = 100, [KIND_RATE] = 1000,
                                    [KIND_LIMITS] = 100};
    static const long floors[] = {[KIND_LAT] = 20, [KIND_BW] = 5, [KIND_RATE] = 5,
                                  [KIND_LIMITS] = 5};
    mode_kind_t k = mode_kind(mode);
    long n = b->opts.iters > 0 ? b->opts.iters : defaults[k];
    return scale_count(n, size, floors[k]);
}

long bench_warmup(const bench_t *b, bench_mode_t mode, size_t size)
{
    static const long defaults[] = {[KIND_LAT] = 1000, [KIND_BW] = 10, [KIND_RATE] = 100,
                                    [KIND_LIMITS] = 10};
    mode_kind_t k = mode_kind(mode);
    long n = b->opts.warmup >= 0 ? b->opts.warmup : defaults[k];
    return scale_count(n, size, 1);
}

int bench_sizes(const bench_t *b, bench_mode_t mode, size_t sizes_out[BENCH_SIZES_MAX])
{
    size_t lo, hi = (size_t)1 << 20;
    mode_kind_t k = mode_kind(mode);
    if (b->opts.have_range) {
        lo = b->opts.min_size;
        hi = b->opts.max_size;
    } else if (mode == BENCH_AM_RATE || mode == BENCH_TAG_RATE) {
        lo = hi = 8;
    } else {
        lo = mode == BENCH_AM_LAT || mode == BENCH_TAG_LAT || mode == BENCH_AM_LAT_RNDV ? 0 : 1;
    }
    /* A bandwidth of nothing is meaningless; latency and rate of empty
     * messages are not. Put and get of nothing are left out as OSU does. */
    if (lo == 0 && (k == KIND_BW || k == KIND_LIMITS || mode == BENCH_PUT_LAT ||
                    mode == BENCH_GET_LAT))
        lo = 1;
    int n = 0;
    if (lo == 0)
        sizes_out[n++] = 0;
    for (size_t s = lo > 0 ? lo : 1; s <= hi && n < BENCH_SIZES_MAX; s *= 2) {
        sizes_out[n++] = s;
        if (s > SIZE_MAX / 2)
            break;
    }
    return n;
}

/* ---- output ---- */

static int value_decimals(const char *unit)
{
    return strcmp(unit, "MB/s") == 0 ? 2 : 3;
}

/* Decimals for v in the CSV: at least min, and enough for three
 * significant digits, so that a small positive figure (a bandwidth on a
 * starved machine, a tiny ratio) is never written as zero. */
static int csv_decimals(double v, int min)
{
    int d = min;
    double x = v;
    for (int i = 0; i < min; i++)
        x *= 10.0;
    while (x > 0 && x < 100.0 && d < 15) {
        x *= 10.0;
        d++;
    }
    return d;
}

/* Writes s as a CSV field, quoted when it holds a comma, quote or newline. */
static void csv_field(FILE *f, const char *s)
{
    if (strpbrk(s, ",\"\r\n") == NULL) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s != '\0'; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* Is this an RDMA test on memory from ferry_mem_alloc (--alloc)? */
static bool rdma_alloc(const bench_t *b, bench_mode_t mode)
{
    return b->opts.alloc && (mode == BENCH_PUT_LAT || mode == BENCH_GET_LAT ||
                             mode == BENCH_AMO_FADD_LAT || mode == BENCH_AMO_CSWAP_LAT ||
                             mode == BENCH_AMO_FADD_AM ||
                             mode == BENCH_PUT_NOTIFY_LAT || mode == BENCH_AMO_RATE ||
                             mode == BENCH_PUT_NOTIFY_BW ||
                             mode == BENCH_PUT_BW || mode == BENCH_GET_BW);
}

/* Is the mode measured in pairs against a floor? Rates are not, but for
 * amo-rate's. */
static bool mode_paired(bench_mode_t mode)
{
    return mode_kind(mode) != KIND_RATE || mode == BENCH_AMO_RATE;
}

/* Is the mode's floor the one of the transport (tcp's or libfabric's with
 * those)? The atomics' and put-notify-lat's are their own everywhere. */
static bool floor_of_transport(const bench_t *b, bench_mode_t mode)
{
    switch (mode) {
    case BENCH_AMO_FADD_LAT:
    case BENCH_AMO_CSWAP_LAT:
    case BENCH_AMO_FADD_AM:
    case BENCH_PUT_NOTIFY_LAT:
    case BENCH_AMO_RATE:
        return false;
    default:
        return mode_kind(mode) != KIND_RATE && !rdma_alloc(b, mode);
    }
}

void bench_table_begin(bench_t *b, bench_mode_t mode, const char *floor_what,
                       const char *value_col, const char *floor_col)
{
    if (b->rank != 0)
        return;
    char iters[128];
    if (mode_kind(mode) == KIND_LAT)
        snprintf(iters, sizeof(iters), "%ld iterations (%ld warm-up)", bench_iters(b, mode, 1),
                 bench_warmup(b, mode, 1));
    else
        snprintf(iters, sizeof(iters), "%ld windows of %d (%ld warm-up)",
                 bench_iters(b, mode, 1), BENCH_WINDOW, bench_warmup(b, mode, 1));
    printf("\n# ferry-bench %s%s (transport %s)\n", bench_mode_name(mode),
           rdma_alloc(b, mode) ? "-alloc" : "", b->transport);
    if (!mode_paired(mode)) {
        printf("# each value: median of %d repetitions of %s up to %d bytes, scaled down by "
               "%d/size above\n", b->opts.reps, iters, BENCH_LARGE_FROM, BENCH_LARGE_FROM);
    } else {
        printf("# paired: per size, %d pairs of blocks of about %g ms, floor then figure, and "
               "a last floor block; value and floor: medians of their blocks; ratio: median "
               "of the %d paired ratios, Q1 and Q3 its quartiles (a floor of n/a: median of "
               "-r repetitions)\n", b->opts.pairs,
               b->opts.block_ms, b->opts.pairs);
        printf("# mixed: pairs whose floor moved more than %gx to the next floor block (a "
               "change of mode); %s\n", b->opts.mode_ratio,
               b->opts.drop_mixed ? "left out of the ratio (--drop-mixed), Pairs counts the "
                                    "rest"
                                  : "kept in the ratio (--drop-mixed leaves them out)");
    }
    /* >>> tcp floors: the tables' floors are TCP's when tcp carries the run. */
    if (bench_floor_tcp_selected(b) && floor_of_transport(b, mode) &&
        mode_kind(mode) == KIND_LAT)
        floor_what = "loopback TCP busy-poll ping-pong half round trip (ratio = latency / floor)";
    else if (bench_floor_tcp_selected(b) && floor_of_transport(b, mode))
        floor_what = "loopback TCP stream, one socket, writes of the same size (ratio = "
                     "bandwidth / floor)";
    /* <<< tcp floors */
    /* >>> ofi floors: the tables' floors are raw libfabric's when ofi carries the run. */
    if (bench_floor_ofi_selected(b) && floor_of_transport(b, mode) &&
        mode_kind(mode) == KIND_LAT)
        floor_what = "raw libfabric 8-byte fi_inject/fi_recv ping-pong half round trip, same "
                     "provider (ratio = latency / floor)";
    else if (bench_floor_ofi_selected(b) && floor_of_transport(b, mode))
        floor_what = "raw libfabric fi_write stream, 64 in flight, same size and provider "
                     "(ratio = bandwidth / floor)";
    /* <<< ofi floors */
    printf("# floor: %s\n", floor_what);
    if (!mode_paired(mode))
        printf("# %-8s%18s%14s%10s\n", "Size", value_col, floor_col, "Ratio");
    else
        printf("# %-8s%18s%14s%10s%9s%9s%7s%7s\n", "Size", value_col, floor_col, "Ratio", "Q1",
               "Q3", "Pairs", "Mixed");
    fflush(stdout);
}

/* The columns appended to the original seven, for rows without pairs. */
#define CSV_NO_PAIRS ",,,,,"

void bench_table_row(bench_t *b, bench_mode_t mode, const bench_row_t *row, const char *unit)
{
    if (b->rank != 0)
        return;
    int dec = value_decimals(unit);
    /* A figure with a floor is always paired; one without (am-rate, or a
     * floor that is unavailable) has neither ratio nor pairs. */
    bool paired = row->paired && row->floor > 0;
    bool have_ratio = paired && row->ratio > 0;
    if (!paired)
        printf("%-10zu%18.*f%14s%10s\n", row->size, dec, row->value, "n/a", "");
    else if (have_ratio)
        printf("%-10zu%18.*f%14.*f%10.2f%9.2f%9.2f%7d%7d\n", row->size, dec, row->value, dec,
               row->floor, row->ratio, row->ratio_q1, row->ratio_q3, row->pairs, row->mixed);
    else /* --drop-mixed left no pair */
        printf("%-10zu%18.*f%14.*f%10s%9s%9s%7d%7d\n", row->size, dec, row->value, dec,
               row->floor, "n/a", "", "", row->pairs, row->mixed);
    fflush(stdout);
    if (b->csv == NULL)
        return;
    fprintf(b->csv, "%s%s,", bench_mode_name(mode), rdma_alloc(b, mode) ? "-alloc" : "");
    csv_field(b->csv, b->transport);
    fprintf(b->csv, ",%zu,%.*f,%s,", row->size, csv_decimals(row->value, dec), row->value,
            unit);
    if (!paired)
        fprintf(b->csv, "n/a," CSV_NO_PAIRS "\n");
    else if (have_ratio)
        fprintf(b->csv, "%.*f,%.*f,%.*f,%.*f,%d,%d,%d\n", csv_decimals(row->floor, dec),
                row->floor, csv_decimals(row->ratio, 4), row->ratio,
                csv_decimals(row->ratio_q1, 4), row->ratio_q1, csv_decimals(row->ratio_q3, 4),
                row->ratio_q3, row->pairs, row->mixed, b->opts.drop_mixed);
    else
        fprintf(b->csv, "%.*f,,,,%d,%d,%d\n", csv_decimals(row->floor, dec), row->floor,
                row->pairs, row->mixed, b->opts.drop_mixed);
}

void bench_csv_row(bench_t *b, const char *test, size_t size, double value, const char *unit)
{
    if (b->rank != 0 || b->csv == NULL)
        return;
    fprintf(b->csv, "%s,", test);
    csv_field(b->csv, b->transport);
    if (value < 0)
        fprintf(b->csv, ",%zu,n/a,%s,," CSV_NO_PAIRS "\n", size, unit);
    else
        fprintf(b->csv, ",%zu,%.*f,%s,," CSV_NO_PAIRS "\n", size, csv_decimals(value, 4), value,
                unit);
}

/* ---- setup ---- */

/* Pins this rank to the (rank mod n)-th cpu it is allowed on, unless
 * FERRY_BENCH_BIND is "0". A launcher that already bound the rank to one
 * core leaves one allowed cpu, which is then kept. */
static int bind_self(bench_t *b)
{
    const char *env = getenv("FERRY_BENCH_BIND");
    if (env != NULL && strcmp(env, "0") == 0)
        return FERRY_OK;
    if (env != NULL && env[0] != '\0' && strcmp(env, "1") != 0) {
        bench_error(b, "FERRY_BENCH_BIND='%s': expected 0 (do not pin) or 1 (pin, the default)",
                    env);
        return FERRY_ERR_INVALID;
    }
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
        bench_error(b, "sched_getaffinity: %s", strerror(errno));
        return FERRY_ERR_IO;
    }
    int n = CPU_COUNT(&allowed);
    if (n <= 0)
        return FERRY_OK;
    int want = b->rank % n;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed))
            continue;
        if (want-- > 0)
            continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof(one), &one) != 0) {
            bench_error(b, "sched_setaffinity(cpu %d): %s", cpu, strerror(errno));
            return FERRY_ERR_IO;
        }
        break;
    }
    return FERRY_OK;
}

/* FERRY_BENCH_FAULT: unset or empty for none; the tests name an error the
 * final checks must catch. */
static int parse_fault(bench_t *b)
{
    static const struct {
        const char *name;
        bench_fault_t fault;
    } faults[] = {{"amo-sum", BENCH_FAULT_AMO_SUM},
                  {"notify-count", BENCH_FAULT_NOTIFY_COUNT},
                  {"notify-data", BENCH_FAULT_NOTIFY_DATA}};
    const char *env = getenv("FERRY_BENCH_FAULT");
    b->fault = BENCH_FAULT_NONE;
    if (env == NULL || env[0] == '\0')
        return FERRY_OK;
    for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++) {
        if (strcmp(env, faults[i].name) == 0) {
            b->fault = faults[i].fault;
            return FERRY_OK;
        }
    }
    bench_error(b, "FERRY_BENCH_FAULT='%s': expected amo-sum, notify-count or notify-data",
                env);
    return FERRY_ERR_INVALID;
}

typedef struct hello {
    int32_t pid;
    int32_t cpu;
    int32_t csv_ok; /* rank 0: its CSV file opened (or none asked for) */
    int32_t pinned; /* the rank may run on one cpu only */
} hello_t;

static bool pinned_to_one_cpu(void)
{
    cpu_set_t allowed;
    return sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_COUNT(&allowed) == 1;
}

/* Exchanges pids and cpus; rank 0 also says whether it can go on. */
static int say_hello(bench_t *b, bool ok)
{
    hello_t mine = {.pid = (int32_t)getpid(), .cpu = b->cpu, .csv_ok = ok,
                    .pinned = pinned_to_one_cpu()},
            theirs;
    size_t len;
    int rc = bench_ctrl_send(b, BENCH_CTRL_HELLO, &mine, sizeof(mine));
    if (rc == FERRY_OK)
        rc = bench_ctrl_recv(b, BENCH_CTRL_HELLO, &theirs, sizeof(theirs), &len);
    if (rc != FERRY_OK)
        return rc;
    if (len != sizeof(theirs) || theirs.pid <= 0) {
        bench_error(b, "malformed hello from rank %d", b->peer);
        return FERRY_ERR_PROTO;
    }
    b->peer_pid = theirs.pid;
    b->peer_cpu = theirs.cpu;
    /* Both pinned, to different cpus: busy waits need not yield. */
    b->spin_yield = !(mine.pinned && theirs.pinned && b->cpu >= 0 && b->cpu != b->peer_cpu);
    if (!ok || !theirs.csv_ok)
        return FERRY_ERR;
    return FERRY_OK;
}

static size_t max_size_of_run(const bench_t *b)
{
    size_t sizes[BENCH_SIZES_MAX], max = 64;
    for (int m = 0; m < BENCH_MODE_COUNT; m++) {
        if ((b->opts.modes & (1u << m)) == 0)
            continue;
        int n = bench_sizes(b, (bench_mode_t)m, sizes);
        if (n > 0 && sizes[n - 1] > max)
            max = sizes[n - 1];
    }
    return max;
}

static int alloc_buffers(bench_t *b)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t align = page > 0 ? (size_t)page : 4096;
    size_t len = (max_size_of_run(b) + align - 1) / align * align;
    b->pattern = aligned_alloc(align, len);
    if (b->opts.alloc) {
        void *p = NULL;
        int rc = ferry_mem_alloc(b->ctx, len,
                                 FERRY_ACCESS_LOCAL | FERRY_ACCESS_REMOTE_READ |
                                     FERRY_ACCESS_REMOTE_WRITE,
                                 &p, &b->mem);
        if (rc != FERRY_OK) {
            bench_error(b, "ferry_mem_alloc of %zu bytes: %s", len, ferry_strerror(rc));
            return rc;
        }
        b->buf = p;
    } else {
        b->buf = aligned_alloc(align, len);
    }
    b->scratch = aligned_alloc(align, len);
    if (b->pattern == NULL || b->buf == NULL || b->scratch == NULL) {
        bench_error(b, "cannot allocate 3 buffers of %zu bytes", len);
        return FERRY_ERR_NO_MEMORY;
    }
    b->buf_len = len;
    for (size_t i = 0; i < len; i++)
        b->pattern[i] = bench_pattern_byte(i);
    memcpy(b->buf, b->pattern, len);
    memset(b->scratch, 0, len);
    return FERRY_OK;
}

static int run_mode(bench_t *b, bench_mode_t mode)
{
    switch (mode) {
    case BENCH_LIMITS:
        return bench_run_limits(b);
    case BENCH_AM_LAT:
    case BENCH_AM_BW:
    case BENCH_AM_BIBW:
    case BENCH_AM_RATE:
        return bench_run_am(b, mode);
    case BENCH_AM_LAT_RNDV:
    case BENCH_AM_BW_RNDV:
    case BENCH_TAG_LAT:
    case BENCH_TAG_BW:
    case BENCH_TAG_BIBW:
    case BENCH_TAG_RATE:
        return bench_run_tag(b, mode);
    case BENCH_AMO_FADD_LAT:
    case BENCH_AMO_CSWAP_LAT:
    case BENCH_AMO_FADD_AM:
    case BENCH_PUT_NOTIFY_LAT:
    case BENCH_AMO_RATE:
    case BENCH_PUT_NOTIFY_BW:
        return bench_run_amo(b, mode);
    default:
        return bench_run_rdma(b, mode);
    }
}

static int run(bench_t *b)
{
    int rc;
    if ((rc = parse_fault(b)) != FERRY_OK || (rc = bind_self(b)) != FERRY_OK)
        return rc;
    b->cpu = sched_getcpu();
    if ((rc = bench_comm_init(b)) != FERRY_OK)
        return rc;
    b->am_max = ferry_am_max_size(b->ctx, b->peer);
    if (b->am_max <= 0) {
        bench_error(b, "ferry_am_max_size(rank %d): %s (transports: %s)", b->peer,
                    b->am_max < 0 ? ferry_strerror((int)b->am_max) : "zero", b->transport);
        return b->am_max < 0 ? (int)b->am_max : FERRY_ERR;
    }

    bool ok = true;
    if (b->rank == 0 && b->opts.csv_path != NULL) {
        b->csv = fopen(b->opts.csv_path, "w");
        if (b->csv == NULL) {
            bench_error(b, "--csv %s: %s", b->opts.csv_path, strerror(errno));
            ok = false;
        } else {
            fputs("test,transport,size,value,unit,floor,ratio,ratio_q1,ratio_q3,pairs,"
                  "mixed_pairs,mixed_dropped\n", b->csv);
        }
    }
    if (b->rank == 0 && ok && b->opts.blocks_path != NULL) {
        b->blocks = fopen(b->opts.blocks_path, "w");
        if (b->blocks == NULL) {
            bench_error(b, "--blocks %s: %s", b->opts.blocks_path, strerror(errno));
            ok = false;
        } else {
            fputs("test,size,pair,floor,figure,next_floor,ratio,mixed\n", b->blocks);
        }
    }
    if ((rc = say_hello(b, ok)) != FERRY_OK)
        return rc;
    if ((rc = alloc_buffers(b)) != FERRY_OK)
        return rc;

    if (b->rank == 0) {
        printf("# ferry-bench %d.%d: transport %s, rank 0 on cpu %d, rank 1 on cpu %d, "
               "AM max size %ld bytes\n", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR,
               b->transport, b->cpu, b->peer_cpu, b->am_max);
        if (b->cpu >= 0 && b->cpu == b->peer_cpu)
            printf("# warning: both ranks share cpu %d; latencies will be poor\n", b->cpu);
        fflush(stdout);
    }
    for (int m = 0; m < BENCH_MODE_COUNT; m++) {
        if ((b->opts.modes & (1u << m)) == 0)
            continue;
        if ((rc = run_mode(b, (bench_mode_t)m)) != FERRY_OK)
            return rc;
    }
    if (b->csv != NULL) {
        FILE *f = b->csv;
        b->csv = NULL;
        if (fclose(f) != 0) {
            bench_error(b, "--csv %s: %s", b->opts.csv_path, strerror(errno));
            return FERRY_ERR_IO;
        }
    }
    if (b->blocks != NULL) {
        FILE *f = b->blocks;
        b->blocks = NULL;
        if (fclose(f) != 0) {
            bench_error(b, "--blocks %s: %s", b->opts.blocks_path, strerror(errno));
            return FERRY_ERR_IO;
        }
    }
    return bench_barrier(b);
}

int main(int argc, char **argv)
{
    /* ---- reg mode (bench_reg.c): its own options and run ---- */
    if (argc > 1 && strcmp(argv[1], "reg") == 0)
        return bench_run_reg(argc, argv);
    /* ---- end of reg mode ---- */
    bench_t b;
    memset(&b, 0, sizeof(b));
    b.cpu = -1;
    b.peer_cpu = -1;
    char usage_err[256] = "";
    bool args_ok = parse_args(argc, argv, &b.opts, usage_err, sizeof(usage_err));
    const char *btl = getenv("FERRY_BTL");
    b.transport = btl != NULL && btl[0] != '\0' ? btl : "sm";

    int rc = ferry_init(NULL, &b.ctx);
    if (rc != FERRY_OK) {
        fprintf(stderr, "ferry-bench: ferry_init: %s\n", ferry_strerror(rc));
        if (!args_ok)
            fprintf(stderr, "ferry-bench: %s\n", usage_err);
        return 1;
    }
    b.rank = ferry_rank(b.ctx);
    b.peer = b.rank == 0 ? 1 : 0;
    /* Only rank 0 speaks about the command line, so a job prints it once. */
    if (!args_ok || b.opts.help) {
        if (b.rank == 0) {
            if (!args_ok)
                fprintf(stderr, "ferry-bench: %s\n%s", usage_err, usage_text);
            else
                fputs(usage_text, stdout);
        }
        ferry_finalize(&b.ctx);
        return args_ok ? 0 : 2;
    }
    if (ferry_size(b.ctx) != 2) {
        if (b.rank == 0)
            fprintf(stderr, "ferry-bench: needs exactly 2 ranks, the job has %d (run it as "
                    "ferryrun -n 2 ferry-bench)\n", ferry_size(b.ctx));
        ferry_finalize(&b.ctx);
        return 2;
    }

    rc = run(&b);
    if (rc != FERRY_OK) {
        /* The peer may be waiting for this rank anywhere; leaving without
         * the collective finalize lets the launcher end the job at once
         * instead of after the peer's own timeout. */
        if (b.csv != NULL)
            fclose(b.csv);
        if (b.blocks != NULL)
            fclose(b.blocks);
        fflush(stdout);
        exit(1);
    }
    bench_amo_fini(&b);
    bench_rdma_fini(&b);
    bench_floor_fini(&b);
    rc = ferry_finalize(&b.ctx);
    free(b.pattern);
    if (!b.opts.alloc)
        free(b.buf);
    free(b.scratch);
    if (rc != FERRY_OK) {
        fprintf(stderr, "ferry-bench: rank %d: ferry_finalize: %s\n", b.rank,
                ferry_strerror(rc));
        return 1;
    }
    return 0;
}
