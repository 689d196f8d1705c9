/*
 * ferry convertor: describes the application's data (contiguous, an iovec
 * list, or a strided vector of equal blocks) and packs it into, or unpacks
 * it from, transport fragments from any byte position. Transports'
 * prepare_src/prepare_dst take one.
 *
 * A convertor does not own the memory it describes; the iovec array passed to
 * ferry_convertor_init_iov must outlive it.
 */
#ifndef FERRY_DT_H
#define FERRY_DT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_iov {
    void *base;
    size_t len;
} ferry_iov_t;

typedef enum {
    FERRY_CONV_CONTIG = 0, /* one contiguous block */
    FERRY_CONV_IOV = 1,    /* a list of blocks */
    FERRY_CONV_VECTOR = 2  /* count blocks of block_len bytes, stride bytes apart */
} ferry_conv_kind_t;

/* A strided vector: count blocks of block_len bytes, block i at
 * base + i * stride (stride may be negative, or smaller than block_len when
 * only reading). The layout of MPI_Type_vector in bytes. */
typedef struct ferry_vector {
    void *base;
    size_t count;
    size_t block_len;
    ptrdiff_t stride;
} ferry_vector_t;

typedef struct ferry_convertor {
    ferry_conv_kind_t kind;
    ferry_iov_t single;     /* the block of a CONTIG convertor */
    const ferry_iov_t *iov; /* the blocks (points at single for CONTIG) */
    size_t iov_cnt;
    size_t total;   /* bytes described */
    size_t pos;     /* bytes already packed or unpacked */
    size_t cur_idx; /* cursor: block holding byte pos ... */
    size_t cur_off; /* ... and the offset within it */
    ferry_vector_t vec; /* the layout of a VECTOR convertor (iov is NULL then) */
} ferry_convertor_t;

/* Describes len bytes at buf. buf may be NULL only when len is 0. */
void ferry_convertor_init_contig(ferry_convertor_t *conv, const void *buf, size_t len);

/* Describes cnt blocks. Returns FERRY_ERR_INVALID for a NULL base with a
 * non-zero length or a total that overflows size_t. */
int ferry_convertor_init_iov(ferry_convertor_t *conv, const ferry_iov_t *iov, size_t cnt);

/* Describes a strided vector. FERRY_ERR_INVALID for a NULL base with
 * bytes to describe, a total that overflows size_t, or blocks whose
 * addresses would wrap around the address space. */
int ferry_convertor_init_vector(ferry_convertor_t *conv, const ferry_vector_t *vec);

/* Moves the cursor to byte pos (0 <= pos <= total), else FERRY_ERR_INVALID. */
int ferry_convertor_set_position(ferry_convertor_t *conv, size_t pos);

/* Copies up to max bytes from the cursor into dst and advances; returns the
 * number copied (0 at the end). */
size_t ferry_convertor_pack(ferry_convertor_t *conv, void *dst, size_t max);

/* Copies up to len bytes from src to the cursor and advances; returns the
 * number copied (less than len when the description ends first). */
size_t ferry_convertor_unpack(ferry_convertor_t *conv, const void *src, size_t len);

/* Bytes from the cursor to the end. */
static inline size_t ferry_convertor_remaining(const ferry_convertor_t *conv)
{
    return conv->total - conv->pos;
}

/* True when the data must be packed through a buffer: it is not one
 * contiguous block (the seed's need_buffers test). A vector whose stride
 * equals its block length, or with one block, is contiguous. */
bool ferry_convertor_need_buffers(const ferry_convertor_t *conv);

/* For data that needs no buffers: the address of the byte at the cursor.
 * For any data: the address of the byte at the cursor, which
 * ferry_convertor_contig_len bytes follow contiguously. */
void *ferry_convertor_contig_ptr(const ferry_convertor_t *conv);

/* Bytes from the cursor that lie contiguously in memory: to the end for
 * data that needs no buffers, else to the end of the cursor's block. A
 * transport that describes memory in place (zero copy) takes data block by
 * block this way. 0 at the end. */
size_t ferry_convertor_contig_len(const ferry_convertor_t *conv);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_DT_H */
