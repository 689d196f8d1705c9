/*
 * Convertor over contiguous data or an iovec list. The cursor (cur_idx,
 * cur_off) always names the block holding byte pos and the offset in it; when
 * pos is at a block's end it is normalised to the start of the next non-empty
 * block (or to iov_cnt at the very end), so pack and unpack never have to
 * skip empty blocks before copying.
 */
#include <ferry/dt.h>

#include <stdint.h>
#include <string.h>

#include <ferry/ferry.h>

/* Moves the cursor past exhausted and zero-length blocks. */
static void cursor_normalise(ferry_convertor_t *conv)
{
    while (conv->cur_idx < conv->iov_cnt && conv->cur_off == conv->iov[conv->cur_idx].len) {
        conv->cur_idx++;
        conv->cur_off = 0;
    }
}

void ferry_convertor_init_contig(ferry_convertor_t *conv, const void *buf, size_t len)
{
    conv->kind = FERRY_CONV_CONTIG;
    /* The convertor also unpacks into this memory, so it holds it as
     * writable; whether it may be written is the caller's contract. */
    conv->single.base = (void *)(uintptr_t)buf;
    conv->single.len = len;
    conv->iov = &conv->single;
    conv->iov_cnt = 1;
    conv->total = len;
    conv->pos = 0;
    conv->cur_idx = 0;
    conv->cur_off = 0;
    cursor_normalise(conv);
}

int ferry_convertor_init_iov(ferry_convertor_t *conv, const ferry_iov_t *iov, size_t cnt)
{
    size_t total = 0;

    if (iov == NULL && cnt != 0)
        return FERRY_ERR_INVALID;
    for (size_t i = 0; i < cnt; i++) {
        if (iov[i].base == NULL && iov[i].len != 0)
            return FERRY_ERR_INVALID;
        if (iov[i].len > SIZE_MAX - total)
            return FERRY_ERR_INVALID;
        total += iov[i].len;
    }
    conv->kind = FERRY_CONV_IOV;
    conv->single.base = NULL;
    conv->single.len = 0;
    conv->iov = iov;
    conv->iov_cnt = cnt;
    conv->total = total;
    conv->pos = 0;
    conv->cur_idx = 0;
    conv->cur_off = 0;
    cursor_normalise(conv);
    return FERRY_OK;
}

int ferry_convertor_set_position(ferry_convertor_t *conv, size_t pos)
{
    size_t idx = 0;
    size_t left = pos;

    if (pos > conv->total)
        return FERRY_ERR_INVALID;
    /* Walk whole blocks; the loop stops in the block holding byte pos, or
     * past the last block when pos is the end. */
    while (idx < conv->iov_cnt && left >= conv->iov[idx].len) {
        left -= conv->iov[idx].len;
        idx++;
    }
    conv->pos = pos;
    conv->cur_idx = idx;
    conv->cur_off = left;
    return FERRY_OK;
}

size_t ferry_convertor_pack(ferry_convertor_t *conv, void *dst, size_t max)
{
    char *out = dst;
    size_t done = 0;

    while (done < max && conv->cur_idx < conv->iov_cnt) {
        const ferry_iov_t *b = &conv->iov[conv->cur_idx];
        size_t n = b->len - conv->cur_off;
        if (n > max - done)
            n = max - done;
        memcpy(out + done, (const char *)b->base + conv->cur_off, n);
        done += n;
        conv->cur_off += n;
        cursor_normalise(conv);
    }
    conv->pos += done;
    return done;
}

size_t ferry_convertor_unpack(ferry_convertor_t *conv, const void *src, size_t len)
{
    const char *in = src;
    size_t done = 0;

    while (done < len && conv->cur_idx < conv->iov_cnt) {
        const ferry_iov_t *b = &conv->iov[conv->cur_idx];
        size_t n = b->len - conv->cur_off;
        if (n > len - done)
            n = len - done;
        memcpy((char *)b->base + conv->cur_off, in + done, n);
        done += n;
        conv->cur_off += n;
        cursor_normalise(conv);
    }
    conv->pos += done;
    return done;
}

bool ferry_convertor_need_buffers(const ferry_convertor_t *conv)
{
    size_t nonempty = 0;

    if (conv->kind == FERRY_CONV_CONTIG)
        return false;
    /* An iovec list with at most one non-empty block is contiguous too. */
    for (size_t i = 0; i < conv->iov_cnt; i++) {
        if (conv->iov[i].len != 0 && ++nonempty > 1)
            return true;
    }
    return false;
}

void *ferry_convertor_contig_ptr(const ferry_convertor_t *conv)
{
    size_t idx = conv->cur_idx;
    size_t off = conv->cur_off;

    if (conv->iov_cnt == 0)
        return NULL;
    /* At the very end the cursor is past the last block; point just past the
     * last non-empty block's bytes, as a pointer to the end of an array. */
    if (idx >= conv->iov_cnt) {
        idx = conv->iov_cnt;
        while (idx > 0 && conv->iov[idx - 1].len == 0)
            idx--;
        if (idx == 0)
            return conv->iov[0].base;
        idx--;
        off = conv->iov[idx].len;
    }
    return (char *)conv->iov[idx].base + off;
}
