/*
 * Fixed-size bitmap stored as 64-bit words.
 */
#include "util/bitmap.h"

#include <stdlib.h>

#include <ferry/ferry.h>

#define WORD_BITS 64u

static size_t words_for(size_t nbits)
{
    return nbits / WORD_BITS + (nbits % WORD_BITS != 0);
}

int util_bitmap_init(util_bitmap_t *bm, size_t nbits)
{
    size_t nwords = words_for(nbits);

    bm->words = NULL;
    bm->nbits = 0;
    /* calloc(0, ...) may return NULL legitimately, so an empty bitmap keeps no
     * words at all rather than reporting a bogus allocation failure. */
    if (nwords > 0) {
        bm->words = calloc(nwords, sizeof(*bm->words));
        if (bm->words == NULL)
            return FERRY_ERR_NO_MEMORY;
    }
    bm->nbits = nbits;
    return FERRY_OK;
}

void util_bitmap_fini(util_bitmap_t *bm)
{
    free(bm->words);
    bm->words = NULL;
    bm->nbits = 0;
}

int util_bitmap_set(util_bitmap_t *bm, size_t bit)
{
    if (bit >= bm->nbits)
        return FERRY_ERR_INVALID;
    bm->words[bit / WORD_BITS] |= UINT64_C(1) << (bit % WORD_BITS);
    return FERRY_OK;
}

int util_bitmap_clear(util_bitmap_t *bm, size_t bit)
{
    if (bit >= bm->nbits)
        return FERRY_ERR_INVALID;
    bm->words[bit / WORD_BITS] &= ~(UINT64_C(1) << (bit % WORD_BITS));
    return FERRY_OK;
}

bool util_bitmap_test(const util_bitmap_t *bm, size_t bit)
{
    if (bit >= bm->nbits)
        return false;
    return (bm->words[bit / WORD_BITS] >> (bit % WORD_BITS)) & 1u;
}

void util_bitmap_clear_all(util_bitmap_t *bm)
{
    size_t nwords = words_for(bm->nbits);

    for (size_t i = 0; i < nwords; i++)
        bm->words[i] = 0;
}

size_t util_bitmap_count(const util_bitmap_t *bm)
{
    size_t nwords = words_for(bm->nbits);
    size_t n = 0;

    /* Bits past nbits are never set (set refuses them), so whole words can be
     * counted. */
    for (size_t i = 0; i < nwords; i++)
        n += (size_t)__builtin_popcountll(bm->words[i]);
    return n;
}

size_t util_bitmap_find_next(const util_bitmap_t *bm, size_t from)
{
    size_t nwords = words_for(bm->nbits);
    size_t w;
    uint64_t word;

    if (from >= bm->nbits)
        return SIZE_MAX;
    w = from / WORD_BITS;
    /* Mask off the bits below from in its first word. */
    word = bm->words[w] & (~UINT64_C(0) << (from % WORD_BITS));
    for (;;) {
        if (word != 0) {
            size_t bit = w * WORD_BITS + (size_t)__builtin_ctzll(word);
            return bit < bm->nbits ? bit : SIZE_MAX;
        }
        if (++w >= nwords)
            return SIZE_MAX;
        word = bm->words[w];
    }
}
