/*
 * A digest of what an MPI test program received, to compare one run with
 * another of the same program over another BTL (tests/ompi/run_ompi.sh
 * runs each over ferry and over vader): every received buffer, count and
 * status adds the FNV-1a hash of its bytes, so the order in which messages
 * of different senders arrive does not matter. The ranks' sums are added
 * up on rank 0, which prints "NAME: digest HEX".
 */
#ifndef FERRY_TESTS_OMPI_DIGEST_H
#define FERRY_TESTS_OMPI_DIGEST_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static uint64_t digest_sum;

/* Adds n bytes at p, told apart from equal bytes elsewhere by salt. */
static void digest_add(const void *p, size_t n, uint64_t salt)
{
    uint64_t h = 14695981039346656037ull ^ salt;
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    h ^= n;
    h *= 1099511628211ull;
    digest_sum += h;
}

static void digest_print(const char *name)
{
    uint64_t total = 0;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Reduce(&digest_sum, &total, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: digest %016llx\n", name, (unsigned long long)total);
}

#endif
