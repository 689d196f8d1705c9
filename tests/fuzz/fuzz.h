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
#include <string.h>

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

/* A harness's input read from the front: fuzz_u8 .. fuzz_u64 take bytes
 * little endian, zeros once they run out; fuzz_bytes copies up to n and
 * returns how many it copied. */
typedef struct fuzz_in {
    const uint8_t *data;
    size_t size, pos;
} fuzz_in_t;

static inline uint8_t fuzz_u8(fuzz_in_t *in)
{
    return in->pos < in->size ? in->data[in->pos++] : 0;
}

static inline uint16_t fuzz_u16(fuzz_in_t *in)
{
    return (uint16_t)(fuzz_u8(in) | (uint16_t)fuzz_u8(in) << 8);
}

static inline uint32_t fuzz_u32(fuzz_in_t *in)
{
    return fuzz_u16(in) | (uint32_t)fuzz_u16(in) << 16;
}

static inline uint64_t fuzz_u64(fuzz_in_t *in)
{
    return fuzz_u32(in) | (uint64_t)fuzz_u32(in) << 32;
}

static inline size_t fuzz_bytes(fuzz_in_t *in, void *out, size_t n)
{
    size_t left = in->size - in->pos;
    if (n > left)
        n = left;
    memcpy(out, in->data + in->pos, n);
    in->pos += n;
    return n;
}

#endif /* FERRY_FUZZ_H */
