/*
 * The libFuzzer interface every harness implements (cmake/fuzz.cmake), and
 * what harnesses share. A harness must not keep state from one input to the
 * next, must not leak, and must stay quick: no sleeps, no timeouts waited
 * out.
 */
#ifndef FERRY_FUZZ_H
#define FERRY_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A property every accepted input must have: when it does not, the
 * harness names it and aborts, which libFuzzer reports as a crash. */
#define CHECK_FUZZ(cond)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "fuzz: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

/* Harness inputs made of records end each record with this byte, so that
 * seeds can be written with printf and the fuzzer can cut and splice them. */
#define FUZZ_RECORD_END 0x1e

/* The next record of data (from *off): its bytes and length, without the
 * end byte. False when none is left. */
static inline int fuzz_next_record(const uint8_t *data, size_t size, size_t *off,
                                   const uint8_t **rec_out, size_t *len_out)
{
    if (*off >= size) {
        return 0;
    }
    size_t start = *off, end = start;
    while (end < size && data[end] != FUZZ_RECORD_END) {
        end++;
    }
    *rec_out = data + start;
    *len_out = end - start;
    *off = end < size ? end + 1 : end;
    return 1;
}

#endif /* FERRY_FUZZ_H */
