/*
 * Random sizes from 0 to --max bytes (0 and --max always among them), all
 * to all: in step d of each round every rank sends to rank + d and
 * receives from rank - d, so that each pair is crossed in both directions
 * while each rank holds one message each way. Receives are posted before
 * or after the send, by source or any source, at random. Every message's
 * bytes come from a generator seeded by (source, destination, round), and
 * the receiver compares them all, plus a 64-bit checksum it prints at the
 * end so that runs can be compared.
 *
 * usage: test_msg_sizes [--max BYTES] [--count ROUNDS] [--seed N]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>
#include <ferry/msg.h>

#include "../unit/check.h"

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static void gen(uint8_t *b, size_t len, uint64_t seed)
{
    uint64_t s = mix(seed) | 1;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        memcpy(b + i, &s, 8);
    }
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    for (; i < len; i++)
        b[i] = (uint8_t)(s >> (8 * (i & 7)));
}

/* Message size for (src, dst, round): 0 and max among the first rounds,
 * otherwise log-uniform over [0, max] (mostly small, some huge). */
static size_t size_of(int src, int dst, int round, size_t max, uint64_t seed)
{
    if (round == 0)
        return 0;
    if (round == 1)
        return max;
    uint64_t r = mix(seed ^ ((uint64_t)src << 40) ^ ((uint64_t)dst << 20) ^ (uint64_t)round);
    int bits = 0;
    while (((size_t)1 << bits) < max)
        bits++;
    size_t v = (size_t)(r >> 8) & ((((size_t)1) << (r % (unsigned)(bits + 1))) - 1);
    return v > max ? max : v;
}

static uint64_t seed_of(int src, int dst, int round, uint64_t seed)
{
    return seed * 1000003u + (uint64_t)src * 65537u + (uint64_t)dst * 257u + (uint64_t)round;
}

int main(int argc, char **argv)
{
    size_t max = (size_t)4 << 20;
    int count = 10;
    uint64_t seed = 42;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--max") == 0)
            max = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--count") == 0)
            count = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--seed") == 0)
            seed = strtoull(argv[i + 1], NULL, 10);
    }
    CHECK(count >= 2);
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    int me = ferry_rank(ctx), size = ferry_size(ctx);
    for (int r = 0; r < size; r++) {
        long m = ferry_am_max_size(ctx, r);
        if (m < 0) {
            printf("SKIPPED: rank %d cannot reach rank %d over FERRY_BTL='%s' (%s)\n", me, r,
                   getenv("FERRY_BTL") ? getenv("FERRY_BTL") : "", ferry_strerror((int)m));
            ferry_finalize(&ctx);
            return 77;
        }
    }
    ferry_msg_t *msg;
    CHECK(ferry_msg_init(ctx, &msg) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    uint8_t *sbuf = malloc(max + 1), *rbuf = malloc(max + 1), *want = malloc(max + 1);
    CHECK(sbuf != NULL && rbuf != NULL && want != NULL);
    uint64_t sum = 0, bytes = 0, rng = mix(seed + (uint64_t)me);
    for (int round = 0; round < count; round++) {
        for (int d = 0; d < size; d++) {
            int to = (me + d) % size, from = (me - d + size) % size;
            size_t slen = size_of(me, to, round, max, seed);
            size_t rlen = size_of(from, me, round, max, seed);
            gen(sbuf, slen, seed_of(me, to, round, seed));
            uint64_t tag = ((uint64_t)round << 32) | (uint64_t)d;
            rng = mix(rng);
            bool post_first = rng & 1, any = (rng >> 1) & 1;
            ferry_msg_req_t *s = NULL, *r = NULL;
            int src = any ? FERRY_MSG_ANY_SOURCE : from;
            if (post_first)
                CHECK(ferry_msg_irecv(msg, src, 1, tag, FERRY_MSG_TAG_EXACT, rbuf, max + 1, &r) ==
                      FERRY_OK);
            CHECK(ferry_msg_isend(msg, to, 1, tag, sbuf, slen, &s) == FERRY_OK);
            if (!post_first)
                CHECK(ferry_msg_irecv(msg, src, 1, tag, FERRY_MSG_TAG_EXACT, rbuf, max + 1, &r) ==
                      FERRY_OK);
            ferry_msg_status_t st;
            CHECK(ferry_msg_wait(msg, &r, &st) == FERRY_OK);
            CHECK(st.source == from && st.len == rlen && st.received == rlen);
            gen(want, rlen, seed_of(from, me, round, seed));
            if (memcmp(want, rbuf, rlen) != 0) {
                size_t i = 0;
                while (want[i] == rbuf[i])
                    i++;
                fprintf(stderr, "rank %d: %zu-byte message from %d (round %d) differs at %zu\n", me,
                        rlen, from, round, i);
                CHECK(0);
            }
            for (size_t i = 0; i < rlen; i += 4096)
                sum = mix(sum ^ rbuf[i] ^ (uint64_t)i);
            bytes += rlen;
            CHECK(ferry_msg_wait(msg, &s, NULL) == FERRY_OK);
        }
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    printf("rank %d: %d rounds x %d peers, %llu bytes received, checksum %016llx\n", me, count,
           size, (unsigned long long)bytes, (unsigned long long)sum);
    free(sbuf);
    free(rbuf);
    free(want);
    CHECK(ferry_msg_fini(&msg) == FERRY_OK);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    return 0;
}
