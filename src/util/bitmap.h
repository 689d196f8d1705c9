/*
 * Fixed-size bitmap (the seed's reachable set).
 */
#ifndef UTIL_BITMAP_H
#define UTIL_BITMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ferry_bitmap {
    uint64_t *words;
    size_t nbits;
};
typedef struct ferry_bitmap util_bitmap_t;

/* All bits clear. Returns FERRY_OK or FERRY_ERR_NO_MEMORY. nbits may be 0. */
int util_bitmap_init(util_bitmap_t *bm, size_t nbits);

/* Frees the words; safe on a zeroed bitmap and twice. */
void util_bitmap_fini(util_bitmap_t *bm);

/* Out-of-range bits: set/clear return FERRY_ERR_INVALID, test returns false. */
int util_bitmap_set(util_bitmap_t *bm, size_t bit);
int util_bitmap_clear(util_bitmap_t *bm, size_t bit);
bool util_bitmap_test(const util_bitmap_t *bm, size_t bit);
void util_bitmap_clear_all(util_bitmap_t *bm);

/* Number of set bits. */
size_t util_bitmap_count(const util_bitmap_t *bm);

/* Index of the first set bit at or after from, or SIZE_MAX when none. */
size_t util_bitmap_find_next(const util_bitmap_t *bm, size_t from);

#endif /* UTIL_BITMAP_H */
