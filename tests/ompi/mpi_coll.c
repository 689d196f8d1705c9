/*
 * Collectives under MPI, every element checked: bcast from each root,
 * allreduce (sum of ints, max of doubles, large counts), alltoall,
 * alltoallv with counts that differ per pair (zero included), gather and
 * gatherv to each root, and barriers between. Small and large messages,
 * so that the collectives' point-to-point goes eager and by rendezvous.
 *
 *   mpi_coll [-m MAX_BYTES]   (1 MiB by default: the largest bcast)
 *
 * Rank 0 prints a digest of every result (digest.h), the same over any
 * BTL, and "coll: all checks passed" when everything is right; a
 * wrong element names the collective and aborts the job.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "digest.h"

static int rank, nranks;

static void fail(const char *what, long at, long got, long want)
{
    fprintf(stderr, "rank %d: %s: element %ld is %ld, expected %ld\n", rank, what, at, got,
            want);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n > 0 ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "rank %d: out of memory for %zu bytes\n", rank, n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static int value(int src, long i, int salt)
{
    return (int)((i * 7 + src * 1000003L + salt * 31) % 2147483629L);
}

static void bcasts(size_t max)
{
    size_t counts[] = {1, 100, 5000, max / sizeof(int)};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        long n = (long)counts[c];
        int *buf = xmalloc(sizeof(int) * (size_t)n);
        for (int root = 0; root < nranks; root++) {
            for (long i = 0; i < n; i++)
                buf[i] = rank == root ? value(root, i, 1) : -1;
            MPI_Bcast(buf, (int)n, MPI_INT, root, MPI_COMM_WORLD);
            for (long i = 0; i < n; i++)
                if (buf[i] != value(root, i, 1))
                    fail("bcast", i, buf[i], value(root, i, 1));
            digest_add(buf, sizeof(int) * (size_t)n, 1000u + (unsigned)root);
        }
        free(buf);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void allreduces(void)
{
    long counts[] = {1, 1000, 300000};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        long n = counts[c];
        long long *in = xmalloc(sizeof(*in) * (size_t)n), *out = xmalloc(sizeof(*out) * (size_t)n);
        double *din = xmalloc(sizeof(*din) * (size_t)n), *dout = xmalloc(sizeof(*dout) * (size_t)n);
        for (long i = 0; i < n; i++) {
            in[i] = (long long)rank * n + i;
            din[i] = (double)((rank * 37 + i) % (nranks + 5));
        }
        MPI_Allreduce(in, out, (int)n, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(din, dout, (int)n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        for (long i = 0; i < n; i++) {
            long long want = (long long)nranks * i + n * ((long long)nranks * (nranks - 1) / 2);
            if (out[i] != want)
                fail("allreduce sum", i, (long)out[i], (long)want);
            double dwant = 0;
            for (int r = 0; r < nranks; r++) {
                double x = (double)((r * 37 + i) % (nranks + 5));
                if (x > dwant)
                    dwant = x;
            }
            if (dout[i] != dwant)
                fail("allreduce max", i, (long)dout[i], (long)dwant);
        }
        digest_add(out, sizeof(*out) * (size_t)n, 2000);
        digest_add(dout, sizeof(*dout) * (size_t)n, 2001);
        free(in);
        free(out);
        free(din);
        free(dout);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void alltoalls(void)
{
    long per[] = {1, 2000, 40000}; /* ints per pair */
    for (size_t c = 0; c < sizeof(per) / sizeof(per[0]); c++) {
        long n = per[c];
        int *out = xmalloc(sizeof(int) * (size_t)(n * nranks));
        int *in = xmalloc(sizeof(int) * (size_t)(n * nranks));
        for (int d = 0; d < nranks; d++)
            for (long i = 0; i < n; i++)
                out[d * n + i] = value(rank, i + d * 17, 2);
        MPI_Alltoall(out, (int)n, MPI_INT, in, (int)n, MPI_INT, MPI_COMM_WORLD);
        for (int s = 0; s < nranks; s++)
            for (long i = 0; i < n; i++)
                if (in[s * n + i] != value(s, i + rank * 17, 2))
                    fail("alltoall", s * n + i, in[s * n + i], value(s, i + rank * 17, 2));
        digest_add(in, sizeof(int) * (size_t)(n * nranks), 3000);
        free(out);
        free(in);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Counts from s to d: differ per pair, zero for some, large for others. */
static int vcount(int s, int d)
{
    int k = (s * 5 + d * 3) % 7;
    return k == 0 ? 0 : k * k * 900;
}

static void alltoallvs(void)
{
    int *scount = xmalloc(sizeof(int) * (size_t)nranks), *sdisp = xmalloc(sizeof(int) * (size_t)nranks);
    int *rcount = xmalloc(sizeof(int) * (size_t)nranks), *rdisp = xmalloc(sizeof(int) * (size_t)nranks);
    int stotal = 0, rtotal = 0;
    for (int p = 0; p < nranks; p++) {
        scount[p] = vcount(rank, p);
        sdisp[p] = stotal + p; /* a hole of p ints before each block */
        stotal += scount[p] + p;
        rcount[p] = vcount(p, rank);
        rdisp[p] = rtotal;
        rtotal += rcount[p] + 1;
    }
    int *out = xmalloc(sizeof(int) * (size_t)stotal), *in = xmalloc(sizeof(int) * (size_t)rtotal);
    for (int p = 0; p < nranks; p++)
        for (int i = 0; i < scount[p]; i++)
            out[sdisp[p] + i] = value(rank, i, 3 + p);
    for (int i = 0; i < rtotal; i++)
        in[i] = -7;
    MPI_Alltoallv(out, scount, sdisp, MPI_INT, in, rcount, rdisp, MPI_INT, MPI_COMM_WORLD);
    for (int p = 0; p < nranks; p++) {
        for (int i = 0; i < rcount[p]; i++)
            if (in[rdisp[p] + i] != value(p, i, 3 + rank))
                fail("alltoallv", rdisp[p] + i, in[rdisp[p] + i], value(p, i, 3 + rank));
        if (in[rdisp[p] + rcount[p]] != -7)
            fail("alltoallv hole", rdisp[p] + rcount[p], in[rdisp[p] + rcount[p]], -7);
    }
    digest_add(in, sizeof(int) * (size_t)rtotal, 4000);
    free(out);
    free(in);
    free(scount);
    free(sdisp);
    free(rcount);
    free(rdisp);
    MPI_Barrier(MPI_COMM_WORLD);
}

static void gathers(void)
{
    long per[] = {1, 30000};
    for (size_t c = 0; c < sizeof(per) / sizeof(per[0]); c++) {
        long n = per[c];
        int *mine = xmalloc(sizeof(int) * (size_t)n);
        int *all = xmalloc(sizeof(int) * (size_t)(n * nranks));
        for (int root = 0; root < nranks; root++) {
            for (long i = 0; i < n; i++)
                mine[i] = value(rank, i, 4 + root);
            MPI_Gather(mine, (int)n, MPI_INT, all, (int)n, MPI_INT, root, MPI_COMM_WORLD);
            if (rank == root)
                for (int s = 0; s < nranks; s++)
                    for (long i = 0; i < n; i++)
                        if (all[s * n + i] != value(s, i, 4 + root))
                            fail("gather", s * n + i, all[s * n + i], value(s, i, 4 + root));
            if (rank == root)
                digest_add(all, sizeof(int) * (size_t)(n * nranks), 5000u + (unsigned)root);
        }
        free(mine);
        free(all);
    }
    /* gatherv: rank r gives r + 1 blocks' worth. */
    int *counts = xmalloc(sizeof(int) * (size_t)nranks), *disps = xmalloc(sizeof(int) * (size_t)nranks);
    int total = 0;
    for (int p = 0; p < nranks; p++) {
        counts[p] = (p + 1) * 1000;
        disps[p] = total;
        total += counts[p];
    }
    int *mine = xmalloc(sizeof(int) * (size_t)counts[rank]), *all = xmalloc(sizeof(int) * (size_t)total);
    for (int i = 0; i < counts[rank]; i++)
        mine[i] = value(rank, i, 9);
    int root = nranks - 1;
    MPI_Gatherv(mine, counts[rank], MPI_INT, all, counts, disps, MPI_INT, root, MPI_COMM_WORLD);
    if (rank == root)
        for (int p = 0; p < nranks; p++)
            for (int i = 0; i < counts[p]; i++)
                if (all[disps[p] + i] != value(p, i, 9))
                    fail("gatherv", disps[p] + i, all[disps[p] + i], value(p, i, 9));
    if (rank == root)
        digest_add(all, sizeof(int) * (size_t)total, 6000);
    free(mine);
    free(all);
    free(counts);
    free(disps);
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    size_t max = (size_t)1 << 20;
    for (int c; (c = getopt(argc, argv, "m:")) != -1;) {
        char *end;
        unsigned long long v = c == 'm' ? strtoull(optarg, &end, 0) : 0;
        if (c != 'm' || *end != '\0' || v < sizeof(int) || v > (1ull << 30)) {
            if (rank == 0)
                fprintf(stderr, "usage: mpi_coll [-m MAX_BYTES (4 .. 1 GiB)]\n");
            MPI_Finalize();
            return 2;
        }
        max = (size_t)v;
    }
    bcasts(max);
    allreduces();
    alltoalls();
    alltoallvs();
    gathers();
    digest_print("coll");
    if (rank == 0)
        printf("coll: all checks passed (%d ranks)\n", nranks);
    MPI_Finalize();
    return 0;
}
