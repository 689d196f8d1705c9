/*
 * Point-to-point under MPI, every byte checked: blocking ping-pong of sizes
 * 0 to -m (64 MiB by default) at powers of two and their neighbours,
 * non-blocking exchanges with many requests in flight, wildcards, probe,
 * many-to-one with the order of each sender checked, non-contiguous
 * datatypes (vector, indexed, struct) of small and large counts, a storm of
 * small non-blocking messages between every pair, and a ring of
 * MPI_Sendrecv, and sends from a buffer unmapped and mapped again at the
 * same address in between. Any rank count >= 2. Rank 0 prints a digest of everything
 * received (digest.h), the same over any BTL.
 *
 *   mpi_p2p [-m MAX_BYTES]
 *
 * -m bounds every message of every test (so that a small one keeps all of
 * them eager). Exits 0 and rank 0 prints "p2p: all checks passed" when everything
 * arrived intact; a wrong byte names the test, size and offset and aborts
 * the job.
 */
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "digest.h"

static int rank, nranks;
static size_t max_bytes; /* -m: no message of any test is larger */

/* A test's message size, cut to -m. */
static size_t cap(size_t size)
{
    return size < max_bytes ? size : max_bytes;
}

static void fail(const char *what, size_t size, size_t at, unsigned got, unsigned want)
{
    fprintf(stderr, "rank %d: %s: size %zu: byte %zu is %u, expected %u\n", rank, what, size,
            at, got, want);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

/* The byte at offset i of a message of size bytes from src with salt. */
static unsigned char pattern(size_t i, size_t size, int src, unsigned salt)
{
    return (unsigned char)((i * 131u) ^ (i >> 8) ^ size ^ ((unsigned)src * 29u) ^ salt);
}

static void fill(unsigned char *buf, size_t size, int src, unsigned salt)
{
    for (size_t i = 0; i < size; i++)
        buf[i] = pattern(i, size, src, salt);
}

static void check(const char *what, const unsigned char *buf, size_t size, int src,
                  unsigned salt)
{
    for (size_t i = 0; i < size; i++)
        if (buf[i] != pattern(i, size, src, salt))
            fail(what, size, i, buf[i], pattern(i, size, src, salt));
    digest_add(buf, size, ((uint64_t)(unsigned)src << 32) ^ salt);
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

/* Rank 0 and 1 bounce every size; the others wait. */
static void pingpong(size_t max)
{
    unsigned char *buf = xmalloc(max + 8);
    size_t sizes[256];
    int n = 0;
    sizes[n++] = 0;
    for (size_t s = 1; s <= max && n < 250; s *= 2) {
        sizes[n++] = s;
        if (s > 2 && s + 1 <= max)
            sizes[n++] = s + 1;
        if (s > 2)
            sizes[n++] = s - 1;
    }
    for (int k = 0; k < n && rank < 2; k++) {
        size_t s = sizes[k];
        int peer = 1 - rank;
        if (rank == 0) {
            fill(buf, s, 0, 1);
            MPI_Send(buf, (int)s, MPI_BYTE, peer, 10, MPI_COMM_WORLD);
            memset(buf, 0, s);
            MPI_Status st;
            MPI_Recv(buf, (int)s, MPI_BYTE, peer, 11, MPI_COMM_WORLD, &st);
            int count;
            MPI_Get_count(&st, MPI_BYTE, &count);
            if ((size_t)count != s)
                fail("pingpong count", s, 0, (unsigned)count, (unsigned)s);
            check("pingpong back", buf, s, 1, 2);
        } else {
            MPI_Recv(buf, (int)s, MPI_BYTE, peer, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            check("pingpong there", buf, s, 0, 1);
            fill(buf, s, 1, 2);
            MPI_Send(buf, (int)s, MPI_BYTE, peer, 11, MPI_COMM_WORLD);
        }
    }
    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Rank 0 sends twice from a fresh mapping (rewritten in between), unmaps
 * it and maps new memory at the same address for the next round: every
 * message arrives as it was sent. A BTL that keeps registrations for the
 * next user must not hand out one whose memory went: its key no longer
 * names the new pages (ferry's sm refuses it, the peer's get fails). */
static void remap(void)
{
    size_t size = cap((size_t)1 << 20);
    unsigned char *buf = rank == 1 ? xmalloc(size) : NULL;
    void *at = NULL;
    for (unsigned round = 0; round < 4 && rank < 2; round++) {
        if (rank == 1) {
            for (unsigned k = 0; k < 2; k++) {
                MPI_Recv(buf, (int)size, MPI_BYTE, 0, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                check("remap", buf, size, 0, 0x70 + 2 * round + k);
            }
            continue;
        }
        unsigned char *m = mmap(at, size, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | (at != NULL ? MAP_FIXED_NOREPLACE : 0),
                                -1, 0);
        if (m == MAP_FAILED && at != NULL) /* the address was taken meanwhile */
            m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "rank 0: remap: mmap of %zu bytes failed\n", size);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        at = m;
        for (unsigned k = 0; k < 2; k++) {
            fill(m, size, 0, 0x70 + 2 * round + k);
            MPI_Send(m, (int)size, MPI_BYTE, 1, 12, MPI_COMM_WORLD);
        }
        munmap(m, size);
    }
    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Every rank exchanges with every other at once: eight sizes, each as an
 * Isend and an Irecv, all in flight together, completed in one Waitall. */
static void nonblocking(size_t max)
{
    enum { K = 8 };
    size_t sizes[K] = {0, 1, 100, 4096, 4097, 65536, 1u << 20, max};
    for (int k = 0; k < K; k++)
        if (sizes[k] > max)
            sizes[k] = max;
    size_t total = 0;
    for (int k = 0; k < K; k++)
        total += sizes[k];
    int npeers = nranks - 1;
    unsigned char *out = xmalloc(total);
    unsigned char *in = xmalloc(total * (size_t)npeers);
    MPI_Request *req = xmalloc(sizeof(*req) * 2 * K * (size_t)npeers);
    int nreq = 0;
    size_t off = 0;
    for (int k = 0; k < K; k++) {
        fill(out + off, sizes[k], rank, 3 + (unsigned)k);
        off += sizes[k];
    }
    for (int p = 0, slot = 0; p < nranks; p++) {
        if (p == rank)
            continue;
        off = 0;
        for (int k = 0; k < K; k++) {
            MPI_Irecv(in + (size_t)slot * total + off, (int)sizes[k], MPI_BYTE, p, 20 + k,
                      MPI_COMM_WORLD, &req[nreq++]);
            off += sizes[k];
        }
        slot++;
    }
    for (int p = 0; p < nranks; p++) {
        if (p == rank)
            continue;
        off = 0;
        for (int k = 0; k < K; k++) {
            MPI_Isend(out + off, (int)sizes[k], MPI_BYTE, p, 20 + k, MPI_COMM_WORLD,
                      &req[nreq++]);
            off += sizes[k];
        }
    }
    MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
    for (int p = 0, slot = 0; p < nranks; p++) {
        if (p == rank)
            continue;
        off = 0;
        for (int k = 0; k < K; k++) {
            check("nonblocking", in + (size_t)slot * total + off, sizes[k], p, 3 + (unsigned)k);
            off += sizes[k];
        }
        slot++;
    }
    free(req);
    free(in);
    free(out);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Rank 0 takes one message from each other rank through MPI_ANY_SOURCE and
 * MPI_ANY_TAG, after probing it for its size; the status names the sender
 * and tag, which the data must match. */
static void wildcards_and_probe(void)
{
    if (rank != 0) {
        size_t s = cap(1000 + (size_t)rank * 5000); /* eager for some, rendezvous for others */
        unsigned char *buf = xmalloc(s);
        fill(buf, s, rank, 40);
        MPI_Send(buf, (int)s, MPI_BYTE, 0, 100 + rank, MPI_COMM_WORLD);
        free(buf);
    } else {
        int seen = 0;
        for (int got = 0; got < nranks - 1; got++) {
            MPI_Status st;
            if (got % 2 == 0) {
                MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            } else {
                int flag = 0;
                while (!flag)
                    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
            }
            int count;
            MPI_Get_count(&st, MPI_BYTE, &count);
            int src = st.MPI_SOURCE;
            if (src <= 0 || src >= nranks || st.MPI_TAG != 100 + src ||
                (size_t)count != cap(1000 + (size_t)src * 5000) || (seen & (1 << (src % 30))))
                fail("probe status", (size_t)count, 0, (unsigned)src, (unsigned)st.MPI_TAG);
            seen |= 1 << (src % 30);
            int got_st[3] = {src, st.MPI_TAG, count};
            digest_add(got_st, sizeof(got_st), 41);
            unsigned char *buf = xmalloc((size_t)count);
            MPI_Status rst;
            MPI_Recv(buf, count, MPI_BYTE, MPI_ANY_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &rst);
            if (rst.MPI_SOURCE != src)
                fail("wildcard source", (size_t)count, 0, (unsigned)rst.MPI_SOURCE,
                     (unsigned)src);
            check("wildcard data", buf, (size_t)count, src, 40);
            free(buf);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Everyone floods rank 0 with numbered messages of mixed sizes; rank 0
 * takes them through MPI_ANY_SOURCE and checks that each sender's arrive
 * in the order sent (MPI's non-overtaking rule). */
static void many_to_one(void)
{
    enum { MSGS = 200 };
    static const size_t sizes[] = {8, 300, 4000, 20000, 70000};
    size_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
    size_t maxs = 70000 + sizeof(uint32_t);
    unsigned char *buf = xmalloc(maxs);
    if (rank != 0) {
        for (uint32_t i = 0; i < MSGS; i++) {
            size_t s = cap(sizes[(i + (unsigned)rank) % nsizes] + sizeof(i)) - sizeof(i);
            fill(buf, s, rank, i);
            memcpy(buf + s, &i, sizeof(i));
            MPI_Send(buf, (int)(s + sizeof(i)), MPI_BYTE, 0, 7, MPI_COMM_WORLD);
        }
    } else {
        uint32_t *next = calloc((size_t)nranks, sizeof(*next));
        for (int m = 0; m < MSGS * (nranks - 1); m++) {
            MPI_Status st;
            MPI_Recv(buf, (int)maxs, MPI_BYTE, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &st);
            int count;
            MPI_Get_count(&st, MPI_BYTE, &count);
            size_t s = (size_t)count - sizeof(uint32_t);
            uint32_t seq;
            memcpy(&seq, buf + s, sizeof(seq));
            int src = st.MPI_SOURCE;
            if (seq != next[src] || s != cap(sizes[(seq + (unsigned)src) % nsizes] + sizeof(seq)) - sizeof(seq))
                fail("many-to-one order", s, seq, (unsigned)seq, next[src]);
            check("many-to-one data", buf, s, src, seq);
            next[src]++;
        }
        free(next);
    }
    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Non-contiguous datatypes between rank 0 and rank 1, both ways, counts
 * that stay eager and counts that go by rendezvous: the receiver's layout
 * differs from the sender's, so the convertor works at both ends. */
static void datatypes(void)
{
    static const int counts[] = {1, 7, 300, 70000};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]) && rank < 2; c++) {
        int count = counts[c];
        if ((size_t)count * 3 * sizeof(double) > max_bytes)
            break; /* the largest message of this count is above -m */
        /* A vector of doubles: every third one, two at a time. */
        MPI_Datatype vec;
        MPI_Type_vector(count, 2, 3, MPI_DOUBLE, &vec);
        MPI_Type_commit(&vec);
        double *v = xmalloc(sizeof(double) * 3 * (size_t)count);
        double *packed = xmalloc(sizeof(double) * 2 * (size_t)count);
        /* Indexed ints: blocks of growing length with holes between. */
        int nblk = count < 50 ? count : 50;
        int *len = xmalloc(sizeof(int) * (size_t)nblk);
        int *disp = xmalloc(sizeof(int) * (size_t)nblk);
        int total = 0, at = 0;
        for (int b = 0; b < nblk; b++) {
            len[b] = 1 + (b * 7 + count) % 13;
            disp[b] = at;
            at += len[b] + 3;
            total += len[b];
        }
        MPI_Datatype idx;
        MPI_Type_indexed(nblk, len, disp, MPI_INT, &idx);
        MPI_Type_commit(&idx);
        int *ix = xmalloc(sizeof(int) * (size_t)at);
        int *ixpacked = xmalloc(sizeof(int) * (size_t)total);
        /* A struct: a char, a gap, a double, an int, count of them. */
        struct rec {
            char c;
            double d;
            int i;
        };
        int blen[3] = {1, 1, 1};
        MPI_Aint bdisp[3] = {offsetof(struct rec, c), offsetof(struct rec, d),
                             offsetof(struct rec, i)};
        MPI_Datatype btype[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT}, st0, st;
        MPI_Type_create_struct(3, blen, bdisp, btype, &st0);
        MPI_Type_create_resized(st0, 0, sizeof(struct rec), &st);
        MPI_Type_commit(&st);
        struct rec *recs = xmalloc(sizeof(struct rec) * (size_t)count);

        int peer = 1 - rank;
        if (rank == 0) {
            for (int i = 0; i < 3 * count; i++)
                v[i] = i % 3 == 2 ? -1.0 : i * 0.5 + count;
            for (int i = 0; i < at; i++)
                ix[i] = i * 3 + count;
            for (int i = 0; i < count; i++)
                recs[i] = (struct rec){.c = (char)('a' + i % 26), .d = i * 1.25, .i = -i};
            MPI_Send(v, 1, vec, peer, 30, MPI_COMM_WORLD);
            MPI_Send(ix, 1, idx, peer, 31, MPI_COMM_WORLD);
            MPI_Send(recs, count, st, peer, 32, MPI_COMM_WORLD);
            /* Back as the contiguous packing, into the layouts. */
            memset(v, 0, sizeof(double) * 3 * (size_t)count);
            MPI_Recv(v, 1, vec, peer, 33, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int i = 0; i < 3 * count; i++) {
                double want = i % 3 == 2 ? 0.0 : -(i * 0.5 + count);
                if (v[i] != want)
                    fail("vector back", (size_t)count, (size_t)i, (unsigned)v[i],
                         (unsigned)want);
            }
            digest_add(v, sizeof(double) * 3 * (size_t)count, 33);
        } else {
            MPI_Recv(packed, 2 * count, MPI_DOUBLE, peer, 30, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int i = 0; i < count; i++)
                for (int j = 0; j < 2; j++) {
                    double want = (3 * i + j) * 0.5 + count;
                    if (packed[2 * i + j] != want)
                        fail("vector", (size_t)count, (size_t)(2 * i + j),
                             (unsigned)packed[2 * i + j], (unsigned)want);
                }
            MPI_Recv(ixpacked, total, MPI_INT, peer, 31, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int b = 0, k = 0; b < nblk; b++)
                for (int j = 0; j < len[b]; j++, k++)
                    if (ixpacked[k] != (disp[b] + j) * 3 + count)
                        fail("indexed", (size_t)count, (size_t)k, (unsigned)ixpacked[k],
                             (unsigned)((disp[b] + j) * 3 + count));
            memset(recs, 0, sizeof(struct rec) * (size_t)count);
            MPI_Recv(recs, count, st, peer, 32, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int i = 0; i < count; i++)
                if (recs[i].c != (char)('a' + i % 26) || recs[i].d != i * 1.25 ||
                    recs[i].i != -i)
                    fail("struct", (size_t)count, (size_t)i, (unsigned)recs[i].c,
                         (unsigned)('a' + i % 26));
            digest_add(packed, sizeof(double) * 2 * (size_t)count, 30);
            digest_add(ixpacked, sizeof(int) * (size_t)total, 31);
            for (int i = 0; i < count; i++) {
                digest_add(&recs[i].c, 1, 32);
                digest_add(&recs[i].d, sizeof(double), 32);
                digest_add(&recs[i].i, sizeof(int), 32);
            }
            for (int i = 0; i < 2 * count; i++)
                packed[i] = -packed[i];
            MPI_Send(packed, 2 * count, MPI_DOUBLE, peer, 33, MPI_COMM_WORLD);
        }
        MPI_Type_free(&vec);
        MPI_Type_free(&idx);
        MPI_Type_free(&st);
        MPI_Type_free(&st0);
        free(recs);
        free(ixpacked);
        free(ix);
        free(disp);
        free(len);
        free(packed);
        free(v);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A storm: every rank has STORM small messages to and from every other in
 * flight at once (sizes from 0 to a rendezvous, four tags), posted as
 * Irecvs before the Isends on even ranks and after them on odd ones, and
 * completed by Waitany in whatever order they finish. */
static void storm(void)
{
    enum { STORM = 256, SLOT = 5000 };
    static const size_t sizes[] = {0, 8, 64, 1000, 4999};
    size_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
    int npeers = nranks - 1;
    size_t n = (size_t)STORM * (size_t)npeers;
    unsigned char *out = xmalloc(n * SLOT), *in = xmalloc(n * SLOT);
    MPI_Request *req = xmalloc(sizeof(*req) * 2 * n);
    int nreq = 0;
    for (int phase = 0; phase < 2; phase++) {
        bool recvs = (phase == 0) == (rank % 2 == 0);
        for (int p = 0, slot = 0; p < nranks; p++) {
            if (p == rank)
                continue;
            for (int i = 0; i < STORM; i++, slot++) {
                size_t k = (size_t)slot;
                if (recvs) {
                    size_t s = cap(sizes[(size_t)(i + p) % nsizes]);
                    MPI_Irecv(in + k * SLOT, (int)s, MPI_BYTE, p, 200 + i % 4, MPI_COMM_WORLD,
                              &req[nreq++]);
                } else {
                    size_t s = cap(sizes[(size_t)(i + rank) % nsizes]);
                    fill(out + k * SLOT, s, rank, 300 + (unsigned)i);
                    MPI_Isend(out + k * SLOT, (int)s, MPI_BYTE, p, 200 + i % 4, MPI_COMM_WORLD,
                              &req[nreq++]);
                }
            }
        }
    }
    for (int done = 0; done < nreq; done++) {
        int idx;
        MPI_Waitany(nreq, req, &idx, MPI_STATUS_IGNORE);
        if (idx == MPI_UNDEFINED)
            fail("storm waitany", 0, (size_t)done, 0, 1);
    }
    for (int p = 0, slot = 0; p < nranks; p++) {
        if (p == rank)
            continue;
        for (int i = 0; i < STORM; i++, slot++)
            check("storm", in + (size_t)slot * SLOT, cap(sizes[(size_t)(i + p) % nsizes]), p,
                  300 + (unsigned)i);
    }
    free(req);
    free(in);
    free(out);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Each rank sends to its right neighbour and receives from its left. */
static void ring(size_t max)
{
    size_t s = max < (4u << 20) ? max : (4u << 20);
    unsigned char *out = xmalloc(s), *in = xmalloc(s);
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    for (int round = 0; round < 3; round++) {
        size_t n = round == 0 ? 64 : round == 1 ? 40000 : s;
        if (n > s)
            n = s; /* -m below a round's size */
        fill(out, n, rank, 50 + (unsigned)round);
        MPI_Sendrecv(out, (int)n, MPI_BYTE, right, 60, in, (int)n, MPI_BYTE, left, 60,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check("ring", in, n, left, 50 + (unsigned)round);
    }
    free(in);
    free(out);
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    size_t max = (size_t)64 << 20;
    for (int c; (c = getopt(argc, argv, "m:")) != -1;) {
        char *end;
        unsigned long long v = c == 'm' ? strtoull(optarg, &end, 0) : 0;
        if (c != 'm' || *end != '\0' || v < 8 || v > (1ull << 30)) {
            if (rank == 0)
                fprintf(stderr, "usage: mpi_p2p [-m MAX_BYTES (8 .. 1 GiB)]\n");
            MPI_Finalize();
            return 2;
        }
        max = (size_t)v;
    }
    max_bytes = max;
    if (nranks < 2) {
        if (rank == 0)
            fprintf(stderr, "mpi_p2p: needs at least 2 ranks\n");
        MPI_Finalize();
        return 2;
    }
    pingpong(max);
    nonblocking(max < (8u << 20) ? max : (8u << 20));
    wildcards_and_probe();
    many_to_one();
    datatypes();
    storm();
    ring(max);
    remap();
    digest_print("p2p");
    if (rank == 0)
        printf("p2p: all checks passed (%d ranks, up to %zu bytes)\n", nranks, max);
    MPI_Finalize();
    return 0;
}
