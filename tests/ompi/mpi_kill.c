/*
 * A rank killed in the middle of traffic: every rank exchanges messages
 * with its neighbours (small and large, so that eager sends, rendezvous and
 * RDMA are all in flight), and after a few rounds the last rank sends
 * itself SIGKILL. The job must end (mpirun reporting the signal, the
 * others told by the transport or killed by mpirun), not hang, and leave
 * no shared-memory file behind; tests/ompi/run_ompi.sh checks both.
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, nranks;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    size_t big = 1u << 20;
    char *out = calloc(1, big), *in = calloc(1, big);
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    for (int round = 0; round < 1000000; round++) {
        if (round == 20 && rank == nranks - 1) {
            printf("rank %d: killing itself\n", rank);
            fflush(stdout);
            raise(SIGKILL);
        }
        size_t n = round % 2 == 0 ? 64 : big;
        MPI_Sendrecv(out, (int)n, MPI_BYTE, right, 1, in, (int)n, MPI_BYTE, left, 1,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    /* Not reached: the job ends with the killed rank. */
    printf("rank %d: the killed rank was never noticed\n", rank);
    MPI_Finalize();
    return 1;
}
