/*
 * The readers of fuzz_modex_values, one file each: every transport's
 * header defines its own endpoint type, so they cannot share a file.
 */
#ifndef FERRY_FUZZ_MODEX_VALUES_H
#define FERRY_FUZZ_MODEX_VALUES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

/* data in a buffer of exactly size bytes (ASan's red zone right after it);
 * NULL when out of memory. */
static inline void *fuzz_exact_copy(const uint8_t *data, size_t size)
{
    void *p = malloc(size > 0 ? size : 1);
    if (p != NULL && size > 0)
        memcpy(p, data, size);
    return p;
}

void fuzz_modex_tcp(const uint8_t *data, size_t size);
void fuzz_modex_sm(const uint8_t *data, size_t size);

#endif
