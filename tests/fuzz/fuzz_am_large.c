/*
 * Fuzz harness of what a peer writes into the rendezvous of large active
 * messages, into the tagged layer's fragments and into puts with
 * notification that travel in one message (src/api/am_large.c,
 * src/msg/msg.c, src/api/onesided.c): announcements, completions,
 * clear-to-sends, put completions, tagged fragments and API_TAG_PUTN
 * messages, delivered as if from a peer.
 *
 * Each input runs in a fresh singleton context over the self transport
 * (FERRY_BTL=self, FERRY_AM_LARGE_MAX=1 MiB so that what ferry allocates
 * for a tag without a data handler stays small), with: a data handler on
 * tag 1 that takes every message into a 64-byte buffer, an ordinary handler
 * on tag 2, the tagged layer started with one receive posted, and one real
 * large send in flight to itself (id 1), which the crafted completions may
 * hit. Input: records of [kind: 1 byte][length: 2 bytes, little endian]
 * [bytes], kind modulo 7: announcement, completion, clear-to-send, put
 * completion, tagged fragment, put with notification (or its refusal), and
 * a PIPE fragment (am_frag_t then data). An input of odd length runs with
 * FERRY_AM_RNDV=pipe (the real send, and crafted clear-to-sends and
 * completions, then meet a PIPE send; an announcement with protocol PIPE is
 * taken either way). After the records the context progresses,
 * the receive is canceled or completed, and everything is torn down: no
 * crash, no hang, no leak.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>
#include <ferry/msg.h>

#include "api/am_large.h"
#include "api/api.h"
#include "fuzz.h"

static const uint8_t tags[7] = {API_TAG_AM_RTS,      API_TAG_AM_FIN, API_TAG_AM_CTS,
                                API_TAG_AM_PUT_DONE, API_TAG_MSG,    0,
                                API_TAG_AM_FRAG};

typedef struct harness {
    uint8_t sink[64];
    int done;
} harness_t;

static void taken(void *arg, int status)
{
    (void)status;
    ((harness_t *)arg)->done++;
}

static void on_data(ferry_ctx_t *ctx, int src, int tag, ferry_am_data_t *data, size_t len,
                    void *arg)
{
    harness_t *h = arg;
    (void)src, (void)tag, (void)len;
    if (ferry_am_recv_data(ctx, data, h->sink, sizeof(h->sink), taken, h) != FERRY_OK)
        ferry_am_data_drop(ctx, data);
}

static void on_msg(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)data, (void)len, (void)arg;
}

static void sent(void *arg, int status)
{
    (void)status;
    (*(int *)arg)++;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    setenv("FERRY_BTL", "self", 1);
    setenv("FERRY_AM_LARGE_MAX", "1048576", 1);
    /* A crafted rendezvous that is never finished must not hold finalize
     * past the fuzzer's patience: a short deadline (the regression input
     * timeout-33cf6bd2 waited forever). */
    setenv("FERRY_AM_FINALIZE_TIMEOUT", "100", 1);
    setenv("FERRY_LOG_LEVEL", "error", 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ferry_ctx_t *ctx;
    setenv("FERRY_AM_RNDV", size % 2 == 1 ? "pipe" : "auto", 1);
    if (ferry_init(NULL, &ctx) != FERRY_OK)
        abort();
    harness_t h = {.done = 0};
    ferry_msg_t *msg;
    if (ferry_am_register_data(ctx, 1, on_data, &h) != FERRY_OK ||
        ferry_am_register(ctx, 2, on_msg, &h) != FERRY_OK ||
        ferry_am_register(ctx, 1, on_msg, &h) != FERRY_OK || ferry_msg_init(ctx, &msg) != FERRY_OK)
        abort();
    uint8_t rbuf[100];
    ferry_msg_req_t *req;
    if (ferry_msg_irecv(msg, FERRY_MSG_ANY_SOURCE, 0, 0, FERRY_MSG_ANY_TAG, rbuf, sizeof(rbuf),
                        &req) != FERRY_OK)
        abort();
    size_t big = (size_t)ferry_am_max_size(ctx, 0) + 1;
    uint8_t *src = calloc(1, big);
    int sends = 0;
    if (src == NULL || ferry_am_send_nb(ctx, 0, 1, src, big, sent, &sends) != FERRY_OK)
        abort();

    size_t off = 0;
    while (off + 3 <= size) {
        uint8_t kind = data[off] % 7;
        size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
        off += 3;
        if (len > size - off)
            len = size - off;
        if (kind == 5)
            api_putn_recv(ctx, 0, data + off, len); /* a put with notification in one message */
        else
            api_am_large_recv(ctx, 0, tags[kind], data + off, len);
        off += len;
        for (int i = 0; i < 4; i++)
            ferry_progress(ctx);
    }
    for (int i = 0; i < 64; i++)
        ferry_progress(ctx);
    if (ferry_msg_cancel(msg, req) != FERRY_OK)
        ferry_msg_wait(msg, &req, NULL);
    else
        ferry_msg_wait(msg, &req, NULL);
    if (ferry_msg_fini(&msg) != FERRY_OK)
        abort();
    if (ferry_finalize(&ctx) != FERRY_OK)
        abort();
    free(src);
    return 0;
}
