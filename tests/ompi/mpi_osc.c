/*
 * One-sided MPI, every result checked: put and get under fences,
 * accumulate, fetch_and_op (a shared counter whose fetched values must be
 * all different), compare_and_swap (exactly one winner), read-modify-write
 * under exclusive locks, and puts completed by MPI_Win_flush under
 * lock_all. Any rank count >= 2; run it with --mca osc rdma to put it on a
 * BTL's RDMA and atomics.
 *
 * Rank 0 prints "osc: all checks passed" when everything is right.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;

static void fail(const char *what, long at, long long got, long long want)
{
    fprintf(stderr, "rank %d: %s: element %ld is %lld, expected %lld\n", rank, what, at, got,
            want);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

enum { N = 4096, ROUNDS = 50 };

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks < 2) {
        if (rank == 0)
            fprintf(stderr, "mpi_osc: needs at least 2 ranks\n");
        MPI_Finalize();
        return 2;
    }
    /* The window: N data words, then a counter, a lock word and a total. */
    int64_t *base;
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)((N + 3) * sizeof(int64_t)), sizeof(int64_t), MPI_INFO_NULL,
                     MPI_COMM_WORLD, &base, &win);
    const MPI_Aint counter = N, lockw = N + 1, total = N + 2;
    for (int i = 0; i < N + 3; i++)
        base[i] = 0;
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    int64_t *buf = malloc(sizeof(int64_t) * N);

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
    int64_t *fetched = malloc(sizeof(int64_t) * ROUNDS);
    MPI_Win_lock_all(0, win);
    for (int k = 0; k < ROUNDS; k++) {
        int64_t one = 1;
        MPI_Fetch_and_op(&one, &fetched[k], MPI_INT64_T, 0, counter, MPI_SUM, win);
        MPI_Win_flush(0, win);
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    int64_t *allf = rank == 0 ? calloc((size_t)nranks * ROUNDS, sizeof(int64_t)) : NULL;
    MPI_Gather(fetched, ROUNDS, MPI_INT64_T, allf, ROUNDS, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (base[counter] != (int64_t)nranks * ROUNDS)
            fail("fetch_and_op total", counter, base[counter], (int64_t)nranks * ROUNDS);
        char *seen = calloc((size_t)nranks * ROUNDS, 1);
        for (int i = 0; i < nranks * ROUNDS; i++) {
            if (allf[i] < 0 || allf[i] >= (int64_t)nranks * ROUNDS || seen[allf[i]])
                fail("fetch_and_op values", i, allf[i], -1);
            seen[allf[i]] = 1;
        }
        free(seen);
    }

    /* compare_and_swap: everyone tries 0 -> rank + 1; one wins. */
    int64_t want0 = 0, mine = rank + 1, old = -1;
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    MPI_Compare_and_swap(&mine, &want0, &old, MPI_INT64_T, 0, lockw, win);
    MPI_Win_unlock(0, win);
    int64_t won = old == 0, winners = 0;
    MPI_Allreduce(&won, &winners, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (winners != 1)
        fail("compare_and_swap winners", lockw, winners, 1);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && (base[lockw] < 1 || base[lockw] > nranks))
        fail("compare_and_swap value", lockw, base[lockw], 1);

    /* Read-modify-write under an exclusive lock: no update lost. */
    for (int k = 0; k < 10; k++) {
        int64_t v = -1;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        MPI_Get(&v, 1, MPI_INT64_T, 0, total, 1, MPI_INT64_T, win);
        MPI_Win_flush(0, win);
        v++;
        MPI_Put(&v, 1, MPI_INT64_T, 0, total, 1, MPI_INT64_T, win);
        MPI_Win_unlock(0, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && base[total] != (int64_t)nranks * 10)
        fail("exclusive lock", total, base[total], (int64_t)nranks * 10);

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

    MPI_Win_free(&win);
    free(fetched);
    free(allf);
    free(buf);
    if (rank == 0)
        printf("osc: all checks passed (%d ranks)\n", nranks);
    MPI_Finalize();
    return 0;
}
