/*
 * util_bitmap: set, clear, test, count and find_next against a bool array,
 * out-of-range bits, sizes around word boundaries, and fini on a zeroed or
 * already-finished bitmap.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "check.h"
#include "util/bitmap.h"

/* A fixed seed: a failure must reproduce. */
static unsigned long long rng_state = 0x9e3779b97f4a7c15ull;

static unsigned long long rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void check_against(const util_bitmap_t *bm, const bool *ref, size_t n)
{
    size_t count = 0;

    for (size_t i = 0; i < n; i++) {
        CHECK(util_bitmap_test(bm, i) == ref[i]);
        count += ref[i];
    }
    CHECK(util_bitmap_count(bm) == count);

    /* find_next from every position agrees with a linear scan. */
    for (size_t from = 0; from <= n + 1; from++) {
        size_t expect = SIZE_MAX;
        for (size_t i = from; i < n; i++) {
            if (ref[i]) {
                expect = i;
                break;
            }
        }
        CHECK(util_bitmap_find_next(bm, from) == expect);
    }
}

static void test_size(size_t n)
{
    util_bitmap_t bm;
    bool *ref = calloc(n + 1, sizeof(bool));

    CHECK(ref != NULL);
    CHECK(util_bitmap_init(&bm, n) == FERRY_OK);
    CHECK(bm.nbits == n);
    check_against(&bm, ref, n);

    /* Out-of-range bits are refused and never read as set. */
    CHECK(util_bitmap_set(&bm, n) == FERRY_ERR_INVALID);
    CHECK(util_bitmap_clear(&bm, n) == FERRY_ERR_INVALID);
    CHECK(util_bitmap_set(&bm, SIZE_MAX) == FERRY_ERR_INVALID);
    CHECK(!util_bitmap_test(&bm, n));
    CHECK(!util_bitmap_test(&bm, SIZE_MAX));
    CHECK(util_bitmap_find_next(&bm, SIZE_MAX) == SIZE_MAX);

    for (int round = 0; round < 4 * (int)n + 8; round++) {
        if (n == 0)
            break;
        size_t bit = (size_t)(rng() % n);
        if (rng() & 1) {
            CHECK(util_bitmap_set(&bm, bit) == FERRY_OK);
            ref[bit] = true;
        } else {
            CHECK(util_bitmap_clear(&bm, bit) == FERRY_OK);
            ref[bit] = false;
        }
        if (round % 16 == 0)
            check_against(&bm, ref, n);
    }
    check_against(&bm, ref, n);

    /* The last bit and the first bit, the edges of the word arithmetic. */
    if (n > 0) {
        CHECK(util_bitmap_set(&bm, n - 1) == FERRY_OK);
        CHECK(util_bitmap_set(&bm, 0) == FERRY_OK);
        ref[n - 1] = ref[0] = true;
        check_against(&bm, ref, n);
    }

    util_bitmap_clear_all(&bm);
    memset(ref, 0, n * sizeof(bool));
    check_against(&bm, ref, n);
    CHECK(util_bitmap_count(&bm) == 0);

    /* Setting every bit counts them all. */
    for (size_t i = 0; i < n; i++) {
        CHECK(util_bitmap_set(&bm, i) == FERRY_OK);
        ref[i] = true;
    }
    CHECK(util_bitmap_count(&bm) == n);
    check_against(&bm, ref, n);

    util_bitmap_fini(&bm);
    CHECK(bm.words == NULL && bm.nbits == 0);
    util_bitmap_fini(&bm); /* twice is safe */
    free(ref);
}

int main(void)
{
    static const size_t sizes[] = {0, 1, 2, 63, 64, 65, 127, 128, 129, 200, 1000};
    util_bitmap_t zero;

    memset(&zero, 0, sizeof(zero));
    util_bitmap_fini(&zero); /* a zeroed bitmap is safe to finish */
    CHECK(util_bitmap_count(&zero) == 0);
    CHECK(!util_bitmap_test(&zero, 0));
    CHECK(util_bitmap_find_next(&zero, 0) == SIZE_MAX);

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        test_size(sizes[i]);
    return 0;
}
