/*
 * Convertor over contiguous data, an iovec list or a strided vector. All
 * three are a sequence of blocks: CONTIG and IOV keep them in an array
 * (CONTIG's is its own `single`), VECTOR computes block i from base and
 * stride. The cursor (cur_idx, cur_off) always names the block holding byte
 * pos and the offset in it; when pos is at a block's end it is normalised to
 * the start of the next non-empty block (or to the block count at the very
 * end), so pack and unpack never have to skip empty blocks before copying.
 */
#include <ferry/dt.h>

#include <stdint.h>
#include <string.h>

#include <ferry/ferry.h>

static size_t n_blocks(const ferry_convertor_t *conv)
{
    return conv->kind == FERRY_CONV_VECTOR ? conv->vec.count : conv->iov_cnt;
}

static size_t block_len(const ferry_convertor_t *conv, size_t i)
{
    return conv->kind == FERRY_CONV_VECTOR ? conv->vec.block_len : conv->iov[i].len;
}

static char *block_ptr(const ferry_convertor_t *conv, size_t i)
{
    if (conv->kind == FERRY_CONV_VECTOR)
        return (char *)conv->vec.base + (ptrdiff_t)i * conv->vec.stride;
    return conv->iov[i].base;
}

/* Moves the cursor past exhausted and zero-length blocks. */
static void cursor_normalise(ferry_convertor_t *conv)
{
    size_t n = n_blocks(conv);
    while (conv->cur_idx < n && conv->cur_off == block_len(conv, conv->cur_idx)) {
        conv->cur_idx++;
        conv->cur_off = 0;
    }
}

static void reset(ferry_convertor_t *conv, ferry_conv_kind_t kind)
{
    memset(conv, 0, sizeof(*conv));
    conv->kind = kind;
}

void ferry_convertor_init_contig(ferry_convertor_t *conv, const void *buf, size_t len)
{
    /* The convertor also unpacks into this memory, so it holds it as
     * writable; whether it may be written is the caller's contract. The
     * cursor of an empty block is already past it. */
    *conv = (ferry_convertor_t){.kind = FERRY_CONV_CONTIG,
                                .single = {.base = (void *)(uintptr_t)buf, .len = len},
                                .iov_cnt = 1,
                                .total = len,
                                .cur_idx = len == 0 ? 1 : 0};
    conv->iov = &conv->single;
}

int ferry_convertor_init_iov(ferry_convertor_t *conv, const ferry_iov_t *iov, size_t cnt)
{
    size_t total = 0;

    if (conv == NULL || (iov == NULL && cnt != 0))
        return FERRY_ERR_INVALID;
    for (size_t i = 0; i < cnt; i++) {
        if (iov[i].base == NULL && iov[i].len != 0)
            return FERRY_ERR_INVALID;
        if (iov[i].len > SIZE_MAX - total)
            return FERRY_ERR_INVALID;
        total += iov[i].len;
    }
    reset(conv, FERRY_CONV_IOV);
    conv->iov = iov;
    conv->iov_cnt = cnt;
    conv->total = total;
    cursor_normalise(conv);
    return FERRY_OK;
}

int ferry_convertor_init_vector(ferry_convertor_t *conv, const ferry_vector_t *vec)
{
    if (conv == NULL || vec == NULL)
        return FERRY_ERR_INVALID;
    size_t count = vec->count, blen = vec->block_len;
    if (blen != 0 && count > SIZE_MAX / blen)
        return FERRY_ERR_INVALID;
    size_t total = count * blen;
    if (total != 0) {
        if (vec->base == NULL)
            return FERRY_ERR_INVALID;
        /* Every block, first to last, must lie inside the address space:
         * the span from the lowest to the highest block start, plus a
         * block, may not wrap. */
        uintptr_t base = (uintptr_t)vec->base;
        uintptr_t mag = vec->stride < 0 ? (uintptr_t)0 - (uintptr_t)vec->stride
                                        : (uintptr_t)vec->stride;
        if (count > 1 && mag != 0 && (uintptr_t)(count - 1) > UINTPTR_MAX / mag)
            return FERRY_ERR_INVALID;
        uintptr_t span = (uintptr_t)(count - 1) * mag;
        if (span > (uintptr_t)PTRDIFF_MAX)
            return FERRY_ERR_INVALID;
        uintptr_t hi = base;
        if (vec->stride < 0) {
            if (span > base)
                return FERRY_ERR_INVALID;
        } else {
            if (span > UINTPTR_MAX - base)
                return FERRY_ERR_INVALID;
            hi = base + span;
        }
        if (blen > UINTPTR_MAX - hi)
            return FERRY_ERR_INVALID;
    }
    reset(conv, FERRY_CONV_VECTOR);
    conv->vec = *vec;
    if (total == 0)
        conv->vec.count = 0; /* nothing to walk: blocks of length 0 */
    conv->total = total;
    cursor_normalise(conv);
    return FERRY_OK;
}

int ferry_convertor_set_position(ferry_convertor_t *conv, size_t pos)
{
    size_t idx = 0;
    size_t left = pos;

    if (pos > conv->total)
        return FERRY_ERR_INVALID;
    if (conv->kind == FERRY_CONV_VECTOR) {
        /* Equal blocks: straight to the one holding pos (total > 0 implies
         * block_len > 0). */
        if (conv->total > 0) {
            idx = pos / conv->vec.block_len;
            left = pos % conv->vec.block_len;
        }
    } else {
        /* Walk whole blocks; the loop stops in the block holding byte pos,
         * or past the last block when pos is the end. */
        while (idx < conv->iov_cnt && left >= conv->iov[idx].len) {
            left -= conv->iov[idx].len;
            idx++;
        }
    }
    conv->pos = pos;
    conv->cur_idx = idx;
    conv->cur_off = left;
    return FERRY_OK;
}

/* Copies between the description and a flat buffer: packing when to_flat. */
static size_t copy(ferry_convertor_t *conv, char *flat, size_t max, bool to_flat)
{
    if (conv->kind == FERRY_CONV_CONTIG) {
        /* One block: the cursor is pos, and past the block at its end. */
        size_t n = conv->total - conv->pos;
        if (n > max)
            n = max;
        char *p = (char *)conv->single.base + conv->pos;
        if (n > 0)
            memcpy(to_flat ? flat : p, to_flat ? p : flat, n);
        conv->pos += n;
        conv->cur_idx = conv->pos == conv->total ? 1 : 0;
        conv->cur_off = conv->pos == conv->total ? 0 : conv->pos;
        return n;
    }
    size_t done = 0;
    size_t n_blk = n_blocks(conv);

    while (done < max && conv->cur_idx < n_blk) {
        char *p = block_ptr(conv, conv->cur_idx) + conv->cur_off;
        size_t n = block_len(conv, conv->cur_idx) - conv->cur_off;
        if (n > max - done)
            n = max - done;
        if (to_flat)
            memcpy(flat + done, p, n);
        else
            memcpy(p, flat + done, n);
        done += n;
        conv->cur_off += n;
        cursor_normalise(conv);
    }
    conv->pos += done;
    return done;
}

size_t ferry_convertor_pack(ferry_convertor_t *conv, void *dst, size_t max)
{
    return copy(conv, dst, max, true);
}

size_t ferry_convertor_unpack(ferry_convertor_t *conv, const void *src, size_t len)
{
    return copy(conv, (char *)(uintptr_t)src, len, false);
}

bool ferry_convertor_need_buffers(const ferry_convertor_t *conv)
{
    size_t nonempty = 0;

    switch (conv->kind) {
    case FERRY_CONV_CONTIG:
        return false;
    case FERRY_CONV_VECTOR:
        return conv->vec.count > 1 && conv->vec.stride != (ptrdiff_t)conv->vec.block_len;
    case FERRY_CONV_IOV:
    default:
        break;
    }
    /* An iovec list with at most one non-empty block is contiguous too. */
    for (size_t i = 0; i < conv->iov_cnt; i++) {
        if (conv->iov[i].len != 0 && ++nonempty > 1)
            return true;
    }
    return false;
}

void *ferry_convertor_contig_ptr(const ferry_convertor_t *conv)
{
    size_t n = n_blocks(conv);
    size_t idx = conv->cur_idx;
    size_t off = conv->cur_off;

    if (n == 0)
        return conv->kind == FERRY_CONV_VECTOR ? conv->vec.base
                                               : (conv->iov_cnt > 0 ? conv->iov[0].base : NULL);
    /* At the very end the cursor is past the last block; point just past the
     * last non-empty block's bytes, as a pointer to the end of an array. */
    if (idx >= n) {
        idx = n;
        while (idx > 0 && block_len(conv, idx - 1) == 0)
            idx--;
        if (idx == 0)
            return block_ptr(conv, 0);
        idx--;
        off = block_len(conv, idx);
    }
    return block_ptr(conv, idx) + off;
}

size_t ferry_convertor_contig_len(const ferry_convertor_t *conv)
{
    if (!ferry_convertor_need_buffers(conv))
        return ferry_convertor_remaining(conv);
    if (conv->cur_idx >= n_blocks(conv))
        return 0;
    return block_len(conv, conv->cur_idx) - conv->cur_off;
}
