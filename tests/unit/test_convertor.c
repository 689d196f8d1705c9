/*
 * ferry_convertor: pack and unpack over random iovec layouts (zero-length
 * blocks included), in random fragment sizes from random start positions,
 * against a reference built with memcpy; set_position agreeing with the
 * cursor that packing reaches; argument checks; need_buffers and contig_ptr.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/dt.h>
#include <ferry/ferry.h>

#include "check.h"

#define ARENA 8192
#define MAX_BLOCKS 24

/* A fixed seed: a failure must reproduce. */
static unsigned long long rng_state = 0x2545f4914f6cdd1dull;

static unsigned long long rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static size_t rnd(size_t n) /* uniform-ish in [0, n) */
{
    return (size_t)(rng() % n);
}

typedef struct layout {
    unsigned char arena[ARENA]; /* blocks live here, with gaps between them */
    ferry_iov_t iov[MAX_BLOCKS];
    size_t cnt;
    size_t total;
} layout_t;

/* Random blocks at increasing offsets in the arena, with random gaps; about
 * one in four has length zero, some of those with a NULL base. */
static void make_layout(layout_t *l)
{
    size_t off = rnd(16);

    l->cnt = 1 + rnd(MAX_BLOCKS);
    l->total = 0;
    for (size_t i = 0; i < l->cnt; i++) {
        size_t len = rnd(4) == 0 ? 0 : 1 + rnd(ARENA / MAX_BLOCKS / 2);
        l->iov[i].len = len;
        l->iov[i].base = (len == 0 && rnd(2) == 0) ? NULL : l->arena + off;
        off += len + rnd(16);
        CHECK(off <= ARENA);
        l->total += len;
    }
}

/* The bytes the layout describes, in order. */
static void flatten(const layout_t *l, unsigned char *out)
{
    size_t at = 0;

    for (size_t i = 0; i < l->cnt; i++) {
        if (l->iov[i].len != 0)
            memcpy(out + at, l->iov[i].base, l->iov[i].len);
        at += l->iov[i].len;
    }
}

static void fill_random(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)rng();
}

static void check_cursor_matches_seek(const ferry_convertor_t *conv)
{
    ferry_convertor_t seek = *conv;

    CHECK(ferry_convertor_set_position(&seek, conv->pos) == FERRY_OK);
    CHECK(seek.pos == conv->pos);
    CHECK(seek.cur_idx == conv->cur_idx);
    CHECK(seek.cur_off == conv->cur_off);
}

static void test_pack_random(void)
{
    static layout_t l;
    static unsigned char flat[ARENA];
    static unsigned char out[ARENA + 64];

    for (int round = 0; round < 2000; round++) {
        ferry_convertor_t conv;
        size_t start;
        size_t got = 0;

        make_layout(&l);
        fill_random(l.arena, ARENA);
        flatten(&l, flat);
        CHECK(ferry_convertor_init_iov(&conv, l.iov, l.cnt) == FERRY_OK);
        CHECK(conv.total == l.total);
        CHECK(conv.pos == 0);
        check_cursor_matches_seek(&conv);

        start = rnd(l.total + 1);
        CHECK(ferry_convertor_set_position(&conv, start) == FERRY_OK);
        CHECK(conv.pos == start);
        CHECK(ferry_convertor_remaining(&conv) == l.total - start);

        memset(out, 0xee, sizeof(out));
        while (ferry_convertor_remaining(&conv) > 0) {
            size_t want = rnd(4) == 0 ? 1 + rnd(8) : 1 + rnd(l.total + 1);
            size_t left = ferry_convertor_remaining(&conv);
            size_t n = ferry_convertor_pack(&conv, out + got, want);
            CHECK(n == (want < left ? want : left));
            got += n;
            CHECK(conv.pos == start + got);
            check_cursor_matches_seek(&conv);
        }
        CHECK(got == l.total - start);
        CHECK(memcmp(out, flat + start, got) == 0);
        CHECK(out[got] == 0xee); /* nothing written past what was returned */
        /* At the end: nothing more, and a zero-sized request is fine. */
        CHECK(ferry_convertor_pack(&conv, out, sizeof(out)) == 0);
        CHECK(ferry_convertor_pack(&conv, out, 0) == 0);
    }
}

static void test_unpack_random(void)
{
    static layout_t l;
    static unsigned char before[ARENA];
    static unsigned char expect[ARENA];
    static unsigned char stream[ARENA];

    for (int round = 0; round < 2000; round++) {
        ferry_convertor_t conv;
        size_t start;
        size_t put = 0;

        make_layout(&l);
        fill_random(l.arena, ARENA);
        memcpy(before, l.arena, ARENA);
        CHECK(ferry_convertor_init_iov(&conv, l.iov, l.cnt) == FERRY_OK);
        start = rnd(l.total + 1);
        CHECK(ferry_convertor_set_position(&conv, start) == FERRY_OK);
        fill_random(stream, l.total - start);

        /* The reference: the same bytes written block by block with memcpy,
         * skipping the first start bytes; the gaps stay as they were. */
        memcpy(expect, before, ARENA);
        {
            size_t at = 0;
            for (size_t i = 0; i < l.cnt; i++) {
                for (size_t j = 0; j < l.iov[i].len; j++, at++) {
                    if (at >= start) {
                        size_t off = (size_t)((unsigned char *)l.iov[i].base - l.arena) + j;
                        expect[off] = stream[at - start];
                    }
                }
            }
        }

        while (put < l.total - start) {
            size_t want = rnd(4) == 0 ? 1 + rnd(8) : 1 + rnd(l.total + 1);
            size_t left = ferry_convertor_remaining(&conv);
            size_t chunk = want < left ? want : left;
            /* Offering more than remains is allowed; only what fits is taken. */
            size_t n = ferry_convertor_unpack(&conv, stream + put, chunk == left ? want : chunk);
            CHECK(n == chunk);
            put += n;
            CHECK(conv.pos == start + put);
            check_cursor_matches_seek(&conv);
        }
        CHECK(memcmp(l.arena, expect, ARENA) == 0);
        CHECK(ferry_convertor_unpack(&conv, stream, 10) == 0);
    }
}

static void test_contig(void)
{
    unsigned char src[1000];
    unsigned char out[1000];
    ferry_convertor_t conv;

    fill_random(src, sizeof(src));
    for (int round = 0; round < 500; round++) {
        size_t len = rnd(sizeof(src) + 1);
        size_t start = rnd(len + 1);
        size_t got = 0;

        ferry_convertor_init_contig(&conv, src, len);
        CHECK(conv.kind == FERRY_CONV_CONTIG && conv.total == len && conv.pos == 0);
        CHECK(!ferry_convertor_need_buffers(&conv));
        CHECK(ferry_convertor_contig_ptr(&conv) == src);
        CHECK(ferry_convertor_set_position(&conv, start) == FERRY_OK);
        CHECK(ferry_convertor_contig_ptr(&conv) == src + start);
        while (ferry_convertor_remaining(&conv) > 0) {
            size_t n = ferry_convertor_pack(&conv, out + got, 1 + rnd(64));
            CHECK(n > 0);
            got += n;
            CHECK(ferry_convertor_contig_ptr(&conv) == src + start + got);
        }
        CHECK(got == len - start);
        CHECK(memcmp(out, src + start, got) == 0);
        CHECK(ferry_convertor_contig_ptr(&conv) == src + len);
        CHECK(ferry_convertor_set_position(&conv, len + 1) == FERRY_ERR_INVALID);
        CHECK(conv.pos == len); /* a refused seek leaves the cursor alone */
    }

    /* Unpack into contiguous memory, from the middle. */
    {
        unsigned char dst[100];
        memset(dst, 0, sizeof(dst));
        ferry_convertor_init_contig(&conv, dst, sizeof(dst));
        CHECK(ferry_convertor_set_position(&conv, 40) == FERRY_OK);
        CHECK(ferry_convertor_unpack(&conv, src, 100) == 60);
        CHECK(memcmp(dst + 40, src, 60) == 0);
        for (size_t i = 0; i < 40; i++)
            CHECK(dst[i] == 0);
    }

    /* Empty contiguous data, with a NULL buffer. */
    ferry_convertor_init_contig(&conv, NULL, 0);
    CHECK(conv.total == 0);
    CHECK(ferry_convertor_remaining(&conv) == 0);
    CHECK(ferry_convertor_pack(&conv, out, sizeof(out)) == 0);
    CHECK(ferry_convertor_unpack(&conv, out, sizeof(out)) == 0);
    CHECK(ferry_convertor_set_position(&conv, 0) == FERRY_OK);
    CHECK(ferry_convertor_set_position(&conv, 1) == FERRY_ERR_INVALID);
    CHECK(!ferry_convertor_need_buffers(&conv));
}

static void test_iov_edges(void)
{
    unsigned char a[10], b[20];
    ferry_convertor_t conv;
    ferry_iov_t iov[5];

    /* A NULL base with a length, and totals that overflow, are refused. */
    iov[0] = (ferry_iov_t){a, sizeof(a)};
    iov[1] = (ferry_iov_t){NULL, 5};
    CHECK(ferry_convertor_init_iov(&conv, iov, 2) == FERRY_ERR_INVALID);
    iov[1] = (ferry_iov_t){b, SIZE_MAX - 5};
    CHECK(ferry_convertor_init_iov(&conv, iov, 2) == FERRY_ERR_INVALID);
    iov[1] = (ferry_iov_t){b, SIZE_MAX - sizeof(a)}; /* exactly SIZE_MAX: fine */
    CHECK(ferry_convertor_init_iov(&conv, iov, 2) == FERRY_OK);
    CHECK(conv.total == SIZE_MAX);
    CHECK(ferry_convertor_init_iov(&conv, NULL, 1) == FERRY_ERR_INVALID);

    /* No blocks at all. */
    CHECK(ferry_convertor_init_iov(&conv, NULL, 0) == FERRY_OK);
    CHECK(conv.total == 0);
    CHECK(ferry_convertor_pack(&conv, a, sizeof(a)) == 0);
    CHECK(!ferry_convertor_need_buffers(&conv));
    CHECK(ferry_convertor_contig_ptr(&conv) == NULL);

    /* Only empty blocks. */
    iov[0] = (ferry_iov_t){NULL, 0};
    iov[1] = (ferry_iov_t){a, 0};
    CHECK(ferry_convertor_init_iov(&conv, iov, 2) == FERRY_OK);
    CHECK(ferry_convertor_pack(&conv, b, sizeof(b)) == 0);
    CHECK(ferry_convertor_set_position(&conv, 0) == FERRY_OK);
    CHECK(!ferry_convertor_need_buffers(&conv));

    /* One non-empty block among empty ones needs no buffers, and contig_ptr
     * follows the cursor into it. */
    iov[0] = (ferry_iov_t){NULL, 0};
    iov[1] = (ferry_iov_t){b, sizeof(b)};
    iov[2] = (ferry_iov_t){a, 0};
    CHECK(ferry_convertor_init_iov(&conv, iov, 3) == FERRY_OK);
    CHECK(!ferry_convertor_need_buffers(&conv));
    CHECK(ferry_convertor_contig_ptr(&conv) == b);
    CHECK(ferry_convertor_set_position(&conv, 7) == FERRY_OK);
    CHECK(ferry_convertor_contig_ptr(&conv) == b + 7);
    CHECK(ferry_convertor_set_position(&conv, sizeof(b)) == FERRY_OK);
    CHECK(ferry_convertor_contig_ptr(&conv) == b + sizeof(b));

    /* Two non-empty blocks need buffers. */
    iov[0] = (ferry_iov_t){a, sizeof(a)};
    iov[1] = (ferry_iov_t){NULL, 0};
    iov[2] = (ferry_iov_t){b, sizeof(b)};
    CHECK(ferry_convertor_init_iov(&conv, iov, 3) == FERRY_OK);
    CHECK(ferry_convertor_need_buffers(&conv));
    CHECK(conv.total == sizeof(a) + sizeof(b));
    /* Seeking to a block boundary lands on the next non-empty block. */
    CHECK(ferry_convertor_set_position(&conv, sizeof(a)) == FERRY_OK);
    CHECK(conv.cur_idx == 2 && conv.cur_off == 0);
    CHECK(ferry_convertor_set_position(&conv, conv.total) == FERRY_OK);
    CHECK(conv.cur_idx == 3 && conv.cur_off == 0);
    CHECK(ferry_convertor_set_position(&conv, conv.total + 1) == FERRY_ERR_INVALID);
    CHECK(ferry_convertor_set_position(&conv, SIZE_MAX) == FERRY_ERR_INVALID);
}

/* Strided vectors: random count, block length and stride (negative, equal
 * to the block length, or larger), packed and unpacked in random fragment
 * sizes from random start positions, against the bytes read block by block;
 * contig_ptr/contig_len naming exactly the rest of the cursor's block. */
static void test_vector_random(void)
{
    static unsigned char arena[ARENA], packed[ARENA], out[ARENA], ref[ARENA];

    for (int round = 0; round < 2000; round++) {
        size_t count = rnd(12), blen = rnd(40);
        ptrdiff_t stride;
        switch (rnd(3)) {
        case 0: stride = (ptrdiff_t)blen; break;
        case 1: stride = (ptrdiff_t)(blen + rnd(40)); break;
        default: stride = -(ptrdiff_t)(blen + rnd(40)); break;
        }
        size_t span = count > 0 ? (count - 1) * (size_t)(stride < 0 ? -stride : stride) : 0;
        unsigned char *base = stride < 0 ? arena + span : arena;
        ferry_vector_t v = {.base = base, .count = count, .block_len = blen, .stride = stride};
        fill_random(arena, ARENA);
        size_t total = count * blen;
        for (size_t b = 0; b < count; b++)
            memcpy(ref + b * blen, base + (ptrdiff_t)b * stride, blen);
        ferry_convertor_t conv;
        CHECK(ferry_convertor_init_vector(&conv, &v) == FERRY_OK);
        CHECK(conv.total == total);
        CHECK(ferry_convertor_need_buffers(&conv) ==
              (count > 1 && blen > 0 && stride != (ptrdiff_t)blen));
        size_t start = total > 0 ? rnd(total + 1) : 0;
        CHECK(ferry_convertor_set_position(&conv, start) == FERRY_OK);
        size_t got = 0;
        while (ferry_convertor_remaining(&conv) > 0) {
            size_t pos = conv.pos;
            size_t clen = ferry_convertor_contig_len(&conv);
            CHECK(clen > 0);
            CHECK(memcmp(ferry_convertor_contig_ptr(&conv), ref + pos, clen) == 0);
            if (ferry_convertor_need_buffers(&conv))
                CHECK(clen == blen - pos % blen);
            size_t n = ferry_convertor_pack(&conv, packed + got, 1 + rnd(64));
            CHECK(n > 0);
            got += n;
        }
        CHECK(ferry_convertor_contig_len(&conv) == 0);
        CHECK(got == total - start && memcmp(packed, ref + start, got) == 0);
        /* Unpack the packed bytes into a fresh copy of the layout. */
        memset(out, 0, sizeof(out));
        ferry_vector_t vo = v;
        vo.base = out + (base - arena);
        CHECK(ferry_convertor_init_vector(&conv, &vo) == FERRY_OK);
        CHECK(ferry_convertor_set_position(&conv, start) == FERRY_OK);
        size_t put = 0;
        while (put < got) {
            size_t n = ferry_convertor_unpack(&conv, packed + put, 1 + rnd(64));
            CHECK(n > 0);
            put += n;
        }
        for (size_t i = start; i < total; i++)
            CHECK(out[(base - arena) + (ptrdiff_t)(i / blen) * stride + i % blen] == ref[i]);
    }
    /* Bad descriptions are refused. */
    ferry_convertor_t conv;
    ferry_vector_t bad = {.base = NULL, .count = 2, .block_len = 4, .stride = 8};
    CHECK(ferry_convertor_init_vector(&conv, &bad) == FERRY_ERR_INVALID);
    bad = (ferry_vector_t){.base = arena, .count = SIZE_MAX, .block_len = 2, .stride = 2};
    CHECK(ferry_convertor_init_vector(&conv, &bad) == FERRY_ERR_INVALID);
    bad = (ferry_vector_t){.base = arena, .count = 3, .block_len = 4, .stride = PTRDIFF_MAX};
    CHECK(ferry_convertor_init_vector(&conv, &bad) == FERRY_ERR_INVALID);
    bad = (ferry_vector_t){.base = (void *)(uintptr_t)64, .count = 3, .block_len = 4, .stride = -64};
    CHECK(ferry_convertor_init_vector(&conv, &bad) == FERRY_ERR_INVALID);
    CHECK(ferry_convertor_init_vector(&conv, NULL) == FERRY_ERR_INVALID);
    /* An empty vector (blocks of length zero) describes nothing. */
    bad = (ferry_vector_t){.base = NULL, .count = 5, .block_len = 0, .stride = 8};
    CHECK(ferry_convertor_init_vector(&conv, &bad) == FERRY_OK);
    CHECK(conv.total == 0 && ferry_convertor_pack(&conv, packed, 8) == 0);
}

int main(void)
{
    test_iov_edges();
    test_contig();
    test_pack_random();
    test_unpack_random();
    test_vector_random();
    return 0;
}
