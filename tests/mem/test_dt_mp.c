/*
 * Non-contiguous data between two ranks over the API: rank 0 sends a
 * strided column and an iovec list as active messages, puts strided
 * vectors (small ones packed, large ones block by block in place) into rank
 * 1's registered memory, gets them back into another strided layout, and
 * is refused a remote range outside the registration with nothing moved.
 * Rank 1 checks every byte.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "../unit/check.h"

enum { TAG_COL = 1, TAG_IOV = 2, TAG_KEY = 3 };

#define ROWS 300
#define COLS 37
#define BIG_BLOCKS 96
#define BIG_BLOCK (20 * 1024)
#define BIG_STRIDE (24 * 1024)
#define REMOTE_LEN (BIG_BLOCKS * BIG_BLOCK)

struct key_msg {
    uint64_t addr;
    ferry_rkey_t rkey;
};

struct state {
    int cols, iovs, keys;
    struct key_msg key;
};

static uint8_t pat(size_t i, unsigned salt)
{
    return (uint8_t)((i * 131u + salt * 7u + (i >> 9)) & 0xff);
}

static void on_msg(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                   void *arg)
{
    struct state *st = arg;
    const uint8_t *d = data;
    (void)ctx, (void)src;
    if (tag == TAG_COL) {
        /* Column 5 of a ROWS x COLS matrix of uint32: m[r][c] = r * COLS + c. */
        CHECK(len == ROWS * sizeof(uint32_t));
        for (size_t r = 0; r < ROWS; r++) {
            uint32_t v;
            memcpy(&v, d + r * sizeof(v), sizeof(v));
            CHECK(v == r * COLS + 5);
        }
        st->cols++;
    } else if (tag == TAG_IOV) {
        CHECK(len == 3 + 0 + 1000 + 7);
        for (size_t i = 0; i < len; i++)
            CHECK(d[i] == pat(i, 1));
        st->iovs++;
    } else if (tag == TAG_KEY) {
        CHECK(len == sizeof(st->key));
        memcpy(&st->key, data, len);
        st->keys++;
    }
}

static int wait_for(ferry_ctx_t *ctx, const int *counter, int want)
{
    while (*counter < want) {
        int rc = ferry_progress(ctx);
        if (rc < 0)
            return rc;
    }
    return FERRY_OK;
}

static void send_retry(ferry_ctx_t *ctx, int dst, int tag, ferry_convertor_t *conv)
{
    int rc;
    while ((rc = ferry_am_send_conv(ctx, dst, tag, conv)) == FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    CHECK(rc == FERRY_OK);
}

static int done_count;
static int done_status = FERRY_OK;

static void on_done(void *arg, int status)
{
    (void)arg;
    if (status != FERRY_OK)
        done_status = status;
    done_count++;
}

/* Moves a vector layout to or from [raddr, ...) and waits for its callback. */
static void xfer(ferry_ctx_t *ctx, bool put, const ferry_vector_t *v, uint64_t raddr,
                 const ferry_rkey_t *rkey)
{
    ferry_convertor_t conv;
    CHECK(ferry_convertor_init_vector(&conv, v) == FERRY_OK);
    int before = done_count;
    int rc = put ? ferry_put_conv(ctx, 1, &conv, raddr, rkey, on_done, NULL)
                 : ferry_get_conv(ctx, 1, &conv, raddr, rkey, on_done, NULL);
    CHECK(rc == FERRY_OK);
    CHECK(ferry_convertor_remaining(&conv) == 0);
    CHECK(ferry_flush(ctx, 1) == FERRY_OK);
    CHECK(wait_for(ctx, &done_count, before + 1) == FERRY_OK);
    CHECK(done_status == FERRY_OK);
}

int main(void)
{
    ferry_ctx_t *ctx;
    struct state st = {0};
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    int rank = ferry_rank(ctx);
    if (ferry_size(ctx) != 2) {
        printf("SKIP: needs 2 ranks\n");
        ferry_finalize(&ctx);
        return 77;
    }
    if (ferry_am_max_size(ctx, 1 - rank) < 0) {
        printf("SKIPPED: rank %d cannot reach rank %d (FERRY_BTL='%s'): a transport did not "
               "open here; FERRY_LOG_LEVEL=info says why\n",
               rank, 1 - rank, getenv("FERRY_BTL") != NULL ? getenv("FERRY_BTL") : "");
        ferry_finalize(&ctx);
        return 77;
    }
    for (int t = TAG_COL; t <= TAG_KEY; t++)
        CHECK(ferry_am_register(ctx, t, on_msg, &st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    uint8_t *remote = NULL;
    ferry_mem_t *mem = NULL;
    if (rank == 1) {
        remote = calloc(1, REMOTE_LEN);
        CHECK(remote != NULL);
        CHECK(ferry_mem_register(ctx, remote, REMOTE_LEN,
                                 FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ,
                                 &mem) == FERRY_OK);
        struct key_msg k = {.addr = (uint64_t)(uintptr_t)remote};
        CHECK(ferry_mem_rkey(mem, &k.rkey) == FERRY_OK);
        ferry_convertor_t c;
        ferry_convertor_init_contig(&c, &k, sizeof(k));
        send_retry(ctx, 0, TAG_KEY, &c);
        CHECK(wait_for(ctx, &st.cols, 1) == FERRY_OK);
        CHECK(wait_for(ctx, &st.iovs, 1) == FERRY_OK);
        printf("rank 1: strided column and iovec message arrived intact\n");
    } else {
        CHECK(wait_for(ctx, &st.keys, 1) == FERRY_OK);
        /* A strided column as one active message. */
        uint32_t *m = malloc(ROWS * COLS * sizeof(*m));
        CHECK(m != NULL);
        for (size_t i = 0; i < ROWS * COLS; i++)
            m[i] = (uint32_t)i;
        ferry_vector_t col = {.base = m + 5, .count = ROWS, .block_len = sizeof(uint32_t),
                              .stride = COLS * sizeof(uint32_t)};
        ferry_convertor_t conv;
        CHECK(ferry_convertor_init_vector(&conv, &col) == FERRY_OK);
        send_retry(ctx, 1, TAG_COL, &conv);
        free(m);
        /* An iovec list with an empty block. */
        uint8_t msg[1010];
        for (size_t i = 0; i < sizeof(msg); i++)
            msg[i] = pat(i, 1);
        ferry_iov_t iov[4] = {{msg, 3}, {NULL, 0}, {msg + 3, 1000}, {msg + 1003, 7}};
        int rc;
        while ((rc = ferry_am_sendv(ctx, 1, TAG_IOV, iov, 4)) == FERRY_ERR_NO_RESOURCE)
            ferry_progress(ctx);
        CHECK(rc == FERRY_OK);

        /* Large blocks: put block by block, in place. */
        uint8_t *src = malloc(BIG_BLOCKS * BIG_STRIDE);
        uint8_t *back = calloc(1, BIG_BLOCKS * BIG_STRIDE);
        CHECK(src != NULL && back != NULL);
        for (size_t i = 0; i < BIG_BLOCKS * BIG_STRIDE; i++)
            src[i] = pat(i, 2);
        ferry_vector_t big = {.base = src, .count = BIG_BLOCKS, .block_len = BIG_BLOCK,
                              .stride = BIG_STRIDE};
        xfer(ctx, true, &big, st.key.addr, &st.key.rkey);
        /* Back into another layout: blocks in reverse order (negative stride). */
        ferry_vector_t rev = {.base = back + (BIG_BLOCKS - 1) * BIG_STRIDE, .count = BIG_BLOCKS,
                              .block_len = BIG_BLOCK, .stride = -(ptrdiff_t)BIG_STRIDE};
        xfer(ctx, false, &rev, st.key.addr, &st.key.rkey);
        for (size_t b = 0; b < BIG_BLOCKS; b++)
            CHECK(memcmp(back + (BIG_BLOCKS - 1 - b) * BIG_STRIDE, src + b * BIG_STRIDE,
                         BIG_BLOCK) == 0);
        /* Small blocks (packed) into the start of the remote buffer, and
         * back. */
        ferry_vector_t small = {.base = src, .count = 500, .block_len = 24, .stride = 40};
        xfer(ctx, true, &small, st.key.addr + 8, &st.key.rkey);
        memset(back, 0, 500 * 40);
        ferry_vector_t small_back = {.base = back, .count = 500, .block_len = 24, .stride = 40};
        xfer(ctx, false, &small_back, st.key.addr + 8, &st.key.rkey);
        for (size_t b = 0; b < 500; b++)
            CHECK(memcmp(back + b * 40, src + b * 40, 24) == 0);
        /* One byte past the registration: refused, nothing started. */
        CHECK(ferry_convertor_init_vector(&conv, &small) == FERRY_OK);
        CHECK(ferry_put_conv(ctx, 1, &conv, st.key.addr + REMOTE_LEN - 500 * 24 + 1,
                             &st.key.rkey, on_done, NULL) == FERRY_ERR_ACCESS);
        CHECK(ferry_convertor_remaining(&conv) == 500 * 24);
        free(src);
        free(back);
        printf("rank 0: strided put/get, packed and in place, and a refused range: right\n");
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (rank == 1) {
        /* The last put wrote the small vector at offset 8 over the big one. */
        for (size_t i = 0; i < REMOTE_LEN; i++) {
            size_t want_i;
            uint8_t want;
            if (i >= 8 && i < 8 + 500 * 24) {
                size_t k = i - 8;
                want_i = (k / 24) * 40 + k % 24;
                want = pat(want_i, 2);
            } else {
                want_i = (i / BIG_BLOCK) * BIG_STRIDE + i % BIG_BLOCK;
                want = pat(want_i, 2);
            }
            CHECK(remote[i] == want);
        }
        CHECK(ferry_mem_deregister(ctx, mem) == FERRY_OK);
        free(remote);
        printf("rank 1: every byte of the remote buffer is right\n");
    }
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    return 0;
}
