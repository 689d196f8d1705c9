/*
 * One-sided MPI, every result checked, on four windows in turn: one from
 * MPI_Win_allocate, one from MPI_Win_create over memory of the program's
 * own, a second MPI_Win_create window whose info promises accumulates of
 * one element only ("ompi_single_accumulate": osc/rdma then does every
 * fetch_and_op and accumulate as one BTL atomic), and one created over
 * memory from MPI_Alloc_mem with the info key mpool_hints "ferry" (ferry's
 * pool, btl_ferry_mpool.c: on one host, sm's heap, which the peers map;
 * the program says whether the memory lies in a mapping of /dev/shm). On
 * one host osc/rdma maps an allocated window's memory directly and uses
 * the CPU's atomics on it; a created window's data are reached through the
 * BTL's put, get and atomics, so the program exercises both.
 *
 * On each window: put and get under fences, accumulate, fetch_and_op (a
 * shared counter whose fetched values must all differ), compare_and_swap
 * (exactly one winner), read-modify-write under exclusive locks, and puts
 * completed by MPI_Win_flush under lock_all. Then a stress on one target:
 * every rank does -k rounds of fetch_and_op (64 and 32 bits), a
 * compare_and_swap increment loop and fetching MAX, BOR and REPLACE on
 * rank 0's window, each completed by MPI_Win_flush, and every total and
 * fetched value is checked (Open MPI's vader crashed under this traffic).
 *
 *   mpi_osc [-k ROUNDS]    (any rank count >= 2; run it with --mca osc rdma)
 *
 * Rank 0 prints "osc: all checks passed" when everything is right.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, nranks;
static const char *flavor = "";

static void fail(const char *what, long at, long long got, long long want)
{
    fprintf(stderr, "rank %d: %s window: %s: element %ld is %lld, expected %lld\n", rank,
            flavor, what, at, got, want);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

enum { N = 4096, ROUNDS = 50 };

/* Slots after the N data words. */
enum {
    COUNTER = N,  /* fetch_and_op counter */
    LOCKW,        /* compare_and_swap winner */
    TOTAL,        /* exclusive-lock read-modify-write */
    S_FOP,        /* stress: fetch_and_op SUM, 64 bits */
    S_CAS,        /* stress: compare_and_swap increments */
    S_MAX,        /* stress: fetching MAX */
    S_BOR,        /* stress: fetching BOR */
    S_SWAP,       /* stress: REPLACE */
    S_FOP32,      /* stress: two 32-bit counters in one word */
    WORDS
};

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (p == NULL) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

/* Every value of all ranks' fetched[0 .. rounds) (gathered on rank 0) is
 * in [0, nranks * rounds) and appears once. */
static void check_unique(const char *what, const int64_t *fetched, int rounds)
{
    int64_t *all = rank == 0 ? xcalloc((size_t)nranks * rounds, sizeof(int64_t)) : NULL;
    MPI_Gather(fetched, rounds, MPI_INT64_T, all, rounds, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        char *seen = xcalloc((size_t)nranks * rounds, 1);
        for (int i = 0; i < nranks * rounds; i++) {
            if (all[i] < 0 || all[i] >= (int64_t)nranks * rounds || seen[all[i]])
                fail(what, i, all[i], -1);
            seen[all[i]] = 1;
        }
        free(seen);
    }
    free(all);
}

static void basic(int64_t *base, MPI_Win win)
{
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    int64_t *buf = xcalloc(N, sizeof(int64_t));

    /* Put into the right neighbour, under fences; small and whole. */
    MPI_Win_fence(0, win);
    for (int i = 0; i < N; i++)
        buf[i] = rank * 100000 + i;
    MPI_Put(buf, 1, MPI_INT64_T, right, 0, 1, MPI_INT64_T, win);
    MPI_Put(buf + 1, N - 1, MPI_INT64_T, right, 1, N - 1, MPI_INT64_T, win);
    MPI_Win_fence(0, win);
    for (int i = 0; i < N; i++)
        if (base[i] != left * 100000 + i)
            fail("put", i, base[i], left * 100000 + i);

    /* Get it back from the left neighbour's window: what we put there. */
    memset(buf, 0, sizeof(int64_t) * N);
    MPI_Get(buf, N, MPI_INT64_T, left, 0, N, MPI_INT64_T, win);
    MPI_Win_fence(0, win);
    for (int i = 0; i < N; i++) {
        int64_t want = ((left + nranks - 1) % nranks) * 100000 + i;
        if (buf[i] != want)
            fail("get", i, buf[i], want);
    }

    /* Accumulate: everyone adds into rank 0's data. */
    for (int i = 0; i < N; i++)
        buf[i] = rank + i;
    MPI_Accumulate(buf, N, MPI_INT64_T, 0, 0, N, MPI_INT64_T, MPI_SUM, win);
    MPI_Win_fence(0, win);
    if (rank == 0)
        for (int i = 0; i < N; i++) {
            int64_t want = (nranks - 1) * 100000 + i + /* the put above */
                           (int64_t)nranks * (nranks - 1) / 2 + (int64_t)nranks * i;
            if (base[i] != want)
                fail("accumulate", i, base[i], want);
        }
    MPI_Win_fence(0, win);

    /* fetch_and_op on rank 0's counter: every value fetched once. */
    int64_t fetched[ROUNDS];
    MPI_Win_lock_all(0, win);
    for (int k = 0; k < ROUNDS; k++) {
        int64_t one = 1;
        MPI_Fetch_and_op(&one, &fetched[k], MPI_INT64_T, 0, COUNTER, MPI_SUM, win);
        MPI_Win_flush(0, win);
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && base[COUNTER] != (int64_t)nranks * ROUNDS)
        fail("fetch_and_op total", COUNTER, base[COUNTER], (int64_t)nranks * ROUNDS);
    check_unique("fetch_and_op values", fetched, ROUNDS);

    /* compare_and_swap: everyone tries 0 -> rank + 1; one wins. */
    int64_t want0 = 0, mine = rank + 1, old = -1;
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    MPI_Compare_and_swap(&mine, &want0, &old, MPI_INT64_T, 0, LOCKW, win);
    MPI_Win_unlock(0, win);
    int64_t won = old == 0, winners = 0;
    MPI_Allreduce(&won, &winners, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (winners != 1)
        fail("compare_and_swap winners", LOCKW, winners, 1);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && (base[LOCKW] < 1 || base[LOCKW] > nranks))
        fail("compare_and_swap value", LOCKW, base[LOCKW], 1);

    /* Read-modify-write under an exclusive lock: no update lost. */
    for (int k = 0; k < 10; k++) {
        int64_t v = -1;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        MPI_Get(&v, 1, MPI_INT64_T, 0, TOTAL, 1, MPI_INT64_T, win);
        MPI_Win_flush(0, win);
        v++;
        MPI_Put(&v, 1, MPI_INT64_T, 0, TOTAL, 1, MPI_INT64_T, win);
        MPI_Win_unlock(0, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && base[TOTAL] != (int64_t)nranks * 10)
        fail("exclusive lock", TOTAL, base[TOTAL], (int64_t)nranks * 10);

    /* Puts to every peer under lock_all, completed by flush, seen after a
     * barrier. */
    MPI_Win_fence(0, win);
    MPI_Win_lock_all(0, win);
    int64_t stamp = 7000 + rank;
    for (int p = 0; p < nranks; p++) {
        MPI_Put(&stamp, 1, MPI_INT64_T, p, rank, 1, MPI_INT64_T, win);
        MPI_Win_flush(p, win);
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win); /* to read our own window */
    for (int p = 0; p < nranks; p++)
        if (base[p] != 7000 + p)
            fail("flush", p, base[p], 7000 + p);
    MPI_Win_unlock(rank, win);
    free(buf);
}

/* Every rank at once on rank 0's window, each operation flushed. */
static void stress(int64_t *base, MPI_Win win, int rounds)
{
    int64_t *fops = xcalloc((size_t)rounds, sizeof(int64_t));
    int64_t *cas = xcalloc((size_t)rounds, sizeof(int64_t));
    int64_t *f32 = xcalloc((size_t)rounds, sizeof(int64_t));
    int64_t max_seen = -1, swap_zeros = 0, retries = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, win);
    for (int k = 0; k < rounds; k++) {
        int64_t one = 1, got = -1;
        MPI_Fetch_and_op(&one, &got, MPI_INT64_T, 0, S_FOP, MPI_SUM, win);
        MPI_Win_flush(0, win);
        fops[k] = got;

        /* An increment by compare_and_swap: read, then swap until ours
         * wins; the value it replaced is ours alone. */
        int64_t cur = -1, none = 0;
        MPI_Fetch_and_op(&none, &cur, MPI_INT64_T, 0, S_CAS, MPI_NO_OP, win);
        MPI_Win_flush(0, win);
        for (;;) {
            int64_t next = cur + 1, was = -1;
            MPI_Compare_and_swap(&next, &cur, &was, MPI_INT64_T, 0, S_CAS, win);
            MPI_Win_flush(0, win);
            if (was == cur)
                break;
            cur = was;
            retries++;
        }
        cas[k] = cur;

        /* Two 32-bit counters in one word: the high one must not move. */
        int32_t one32 = 1, got32[2] = {-1, 0x5a5a5a5a};
        MPI_Fetch_and_op(&one32, &got32[0], MPI_INT32_T, 0, S_FOP32, MPI_SUM, win);
        MPI_Win_flush(0, win);
        f32[k] = got32[0];
        /* The 32-bit result is 4 bytes: the next 4 are not touched. */
        if (got32[1] != 0x5a5a5a5a)
            fail("stress 32-bit fetch_and_op wrote past its result", S_FOP32, got32[1],
                 0x5a5a5a5a);

        int64_t v = (int64_t)k * nranks + rank, prev = -1;
        MPI_Fetch_and_op(&v, &prev, MPI_INT64_T, 0, S_MAX, MPI_MAX, win);
        int64_t bit = (int64_t)1 << (k % 62), prev_bits = -1;
        MPI_Fetch_and_op(&bit, &prev_bits, MPI_INT64_T, 0, S_BOR, MPI_BOR, win);
        int64_t me = rank + 1, prev_swap = -1;
        MPI_Fetch_and_op(&me, &prev_swap, MPI_INT64_T, 0, S_SWAP, MPI_REPLACE, win);
        MPI_Win_flush(0, win);
        if (prev < max_seen)
            fail("stress MAX went down", S_MAX, prev, max_seen);
        max_seen = prev > v ? prev : v;
        if (prev_swap < 0 || prev_swap > nranks)
            fail("stress REPLACE fetched", S_SWAP, prev_swap, 0);
        swap_zeros += prev_swap == 0; /* only the very first REPLACE finds 0 */
        (void)prev_bits;
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    int64_t total = (int64_t)nranks * rounds;
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        if (base[S_FOP] != total)
            fail("stress fetch_and_op total", S_FOP, base[S_FOP], total);
        if (base[S_CAS] != total)
            fail("stress compare_and_swap total", S_CAS, base[S_CAS], total);
        if (base[S_MAX] != (int64_t)(rounds - 1) * nranks + nranks - 1)
            fail("stress MAX", S_MAX, base[S_MAX], (int64_t)(rounds - 1) * nranks + nranks - 1);
        int64_t bits = rounds >= 62 ? ((int64_t)1 << 62) - 1 : ((int64_t)1 << rounds) - 1;
        if (base[S_BOR] != bits)
            fail("stress BOR", S_BOR, base[S_BOR], bits);
        if (base[S_SWAP] < 1 || base[S_SWAP] > nranks)
            fail("stress REPLACE", S_SWAP, base[S_SWAP], 1);
        int32_t halves[2];
        memcpy(halves, &base[S_FOP32], sizeof(halves));
        if (halves[0] != total || halves[1] != 0)
            fail("stress 32-bit fetch_and_op", S_FOP32, (long long)halves[0] | (long long)halves[1] << 32,
                 total);
        MPI_Win_unlock(0, win);
    }
    check_unique("stress fetch_and_op values", fops, rounds);
    check_unique("stress compare_and_swap values", cas, rounds);
    check_unique("stress 32-bit fetch_and_op values", f32, rounds);
    int64_t all_retries = 0, all_zeros = 0;
    MPI_Reduce(&retries, &all_retries, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&swap_zeros, &all_zeros, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0 && all_zeros != 1)
        fail("stress REPLACE fetched the initial 0", S_SWAP, all_zeros, 1);
    if (rank == 0)
        printf("osc: %s window: stress of %d rounds per rank passed (%lld compare_and_swap "
               "retries)\n",
               flavor, rounds, (long long)all_retries);
    free(fops);
    free(cas);
    free(f32);
}

/* The window's name, which the one-sided component gives it ("rdma window
 * 3" for osc/rdma): run_ompi.sh checks that osc/rdma made every window. */
/* Does p lie in a mapping of a file in /dev/shm? */
static int in_shm(const void *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (unsigned long)p >= lo &&
            (unsigned long)p < hi)
            found = strstr(line, " /dev/shm/") != NULL;
    }
    if (f != NULL)
        fclose(f);
    return found;
}

static void say_name(MPI_Win win)
{
    char name[MPI_MAX_OBJECT_NAME] = "";
    int len = 0;
    MPI_Win_get_name(win, name, &len);
    if (rank == 0)
        printf("osc: %s window is '%s'\n", flavor, name);
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    int rounds = 1000;
    for (int c; (c = getopt(argc, argv, "k:")) != -1;) {
        if (c == 'k' && atoi(optarg) > 0) {
            rounds = atoi(optarg);
        } else {
            if (rank == 0)
                fprintf(stderr, "usage: mpi_osc [-k ROUNDS]\n");
            MPI_Finalize();
            return 2;
        }
    }
    if (nranks < 2 || nranks > N) {
        if (rank == 0)
            fprintf(stderr, "mpi_osc: needs 2 to %d ranks\n", N);
        MPI_Finalize();
        return 2;
    }
    const size_t bytes = WORDS * sizeof(int64_t);

    /* The window of MPI_Win_allocate. */
    flavor = "allocated";
    int64_t *base;
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)bytes, sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &base,
                     &win);
    memset(base, 0, bytes);
    say_name(win);
    basic(base, win);
    stress(base, win, rounds);
    MPI_Win_free(&win);

    /* Windows over the program's own memory, the second one promised
     * single-element accumulates only. */
    for (int single = 0; single < 2; single++) {
        flavor = single ? "created single-accumulate" : "created";
        int64_t *mem = xcalloc(WORDS, sizeof(int64_t));
        MPI_Info info = MPI_INFO_NULL;
        if (single) {
            MPI_Info_create(&info);
            MPI_Info_set(info, "ompi_single_accumulate", "true");
        }
        MPI_Win_create(mem, (MPI_Aint)bytes, sizeof(int64_t), info, MPI_COMM_WORLD, &win);
        if (info != MPI_INFO_NULL)
            MPI_Info_free(&info);
        say_name(win);
        if (!single)
            basic(mem, win);
        stress(mem, win, rounds);
        MPI_Win_free(&win);
        free(mem);
    }

    /* A window over MPI_Alloc_mem memory asked of ferry's pool. */
    flavor = "alloc_mem";
    MPI_Info hints;
    MPI_Info_create(&hints);
    MPI_Info_set(hints, "mpool_hints", "ferry");
    int64_t *pooled;
    if (MPI_Alloc_mem((MPI_Aint)bytes, hints, &pooled) != MPI_SUCCESS) {
        fprintf(stderr, "rank %d: MPI_Alloc_mem failed\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Info_free(&hints);
    memset(pooled, 0, bytes);
    int shared = in_shm(pooled), all_shared = 0;
    MPI_Allreduce(&shared, &all_shared, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0)
        printf("osc: alloc_mem memory in /dev/shm on every rank: %s\n", all_shared ? "yes" : "no");
    MPI_Win_create(pooled, (MPI_Aint)bytes, sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    say_name(win);
    basic(pooled, win);
    stress(pooled, win, rounds);
    MPI_Win_free(&win);
    MPI_Free_mem(pooled);

    if (rank == 0)
        printf("osc: all checks passed (%d ranks)\n", nranks);
    MPI_Finalize();
    return 0;
}
