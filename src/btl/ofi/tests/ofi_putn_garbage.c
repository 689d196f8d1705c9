/*
 * A rank of the job that sends a malformed put with notification, or an
 * answer to one that it was never asked for (ofi_wire.h, OFI_T_PUTN and
 * OFI_T_PUTN_ANSWER): the receiver must fail that rank with
 * FERRY_ERR_PROTO and say why in one line, run no handler and write
 * nothing, and neither crash nor hang.
 *
 *   ferryrun -n 2 ofi_putn_garbage KIND   (FERRY_BTL=self,ofi,
 *                                          FERRY_OFI_PROVIDER=shm)
 *
 * KIND: short (a body shorter than its own), lengths (the notification's
 * and the data's lengths do not add up to the message), flags (an unknown
 * flag), reserved (the reserved word set), cookie (tracked without a
 * cookie), answer (an answer to no put in flight), refusal (a refusal
 * though nothing was sent untracked), status (an answer with an unknown
 * status); good (a well-formed untracked one, which must land and be
 * handled, and fail nobody: the forger's message is the module's).
 *
 * Rank 0 writes the message itself, header and all, with the sequence
 * number rank 1 expects next, through fi_inject on the module's endpoint
 * (so the provider must take 16 + 64 + a few bytes inline: shm does, 4
 * KiB; tcp;ofi_rxm's 64 bytes do not). Rank 1 registers a region
 * writable by peers and hands its key to rank 0 first, so that a message
 * the target took for a good one would land there; the data written is
 * 0xee.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <ferry/ferry.h>

#include "btl/ctx.h"
#include "btl/ofi/ofi.h"

#include "../../../../tests/unit/check.h"

#define NOTE_TAG 100 /* a transport-level tag the target takes itself */
#define KEY_TAG 101
#define GO_TAG 102
#define WAIT_S 10.0

typedef struct state {
    int me;
    int notes;
    bool have_key, go;
    uint64_t raddr;
    uint8_t key[FERRY_BTL_KEY_MAX];
    int failed[2];
    int failed_status[2];
} state_t;

static state_t st;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void on_note(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, void *cbdata)
{
    (void)btl, (void)rd, (void)cbdata;
    st.notes++;
}

static void on_key(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, void *cbdata)
{
    (void)btl, (void)cbdata;
    CHECK(rd->segs[0].len == sizeof(st.raddr) + sizeof(st.key));
    memcpy(&st.raddr, ferry_btl_seg_ptr(&rd->segs[0]), sizeof(st.raddr));
    memcpy(st.key, (char *)ferry_btl_seg_ptr(&rd->segs[0]) + sizeof(st.raddr), sizeof(st.key));
    st.have_key = true;
}

static void on_go(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, void *cbdata)
{
    (void)btl, (void)rd, (void)cbdata;
    st.go = true;
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    (void)ctx, (void)arg;
    if (peer >= 0 && peer < 2) {
        st.failed[peer]++;
        st.failed_status[peer] = status;
    }
    printf("rank %d: error callback: peer %d: %s (%s)\n", st.me, peer, msg,
           ferry_status_name(status));
}

/* The message of kind to rank 1, after its header: returns its type and
 * fills body, *len. */
static uint8_t forge_body(const char *kind, unsigned char *body, size_t *len)
{
    ofi_putn_body_t b = {.raddr = st.raddr, .size = 8, .plen = 4};
    memcpy(b.key, st.key, sizeof(b.key));
    if (strcmp(kind, "short") == 0) {
        memcpy(body, &b, 40);
        *len = 40;
        return OFI_T_PUTN;
    }
    if (strcmp(kind, "answer") == 0 || strcmp(kind, "refusal") == 0 ||
        strcmp(kind, "status") == 0) {
        ofi_putn_answer_t a = {.cookie = strcmp(kind, "refusal") == 0 ? 0 : 1,
                               .status = strcmp(kind, "status") == 0 ? 5 : FERRY_ERR_ACCESS};
        memcpy(body, &a, sizeof(a));
        *len = sizeof(a);
        return OFI_T_PUTN_ANSWER;
    }
    if (strcmp(kind, "lengths") == 0)
        b.plen = 5;
    else if (strcmp(kind, "flags") == 0)
        b.flags = 0x40;
    else if (strcmp(kind, "reserved") == 0)
        b.split = 1;
    else if (strcmp(kind, "cookie") == 0)
        b.flags = OFI_PUTN_TRACKED;
    else if (strcmp(kind, "good") != 0)
        return 0;
    memcpy(body, &b, sizeof(b));
    memcpy(body + sizeof(b), "note", 4);
    memset(body + sizeof(b) + 4, 0xee, 8);
    *len = sizeof(b) + 12;
    return OFI_T_PUTN;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: ofi_putn_garbage KIND\n");
        return 2;
    }
    ferry_ctx_t *ctx;
    int irc = ferry_init(NULL, &ctx);
    if (irc == FERRY_ERR_NOT_SUPPORTED) {
        printf("SKIPPED: ferry_init: %s (is the ofi module built, and the provider here?)\n",
               ferry_strerror(irc));
        return 77;
    }
    CHECK(irc == FERRY_OK);
    st.me = ferry_rank(ctx);
    CHECK(ferry_size(ctx) == 2);
    ofi_module_t *mod = (ofi_module_t *)btl_ctx_find_module(ctx, "ofi");
    if (mod == NULL) {
        printf("SKIPPED: no ofi module (set FERRY_BTL=self,ofi and FERRY_OFI_PROVIDER)\n");
        return 77;
    }
    unsigned char msg[256];
    size_t blen = 0;
    if (forge_body(argv[1], msg + sizeof(ofi_hdr_t), &blen) == 0) {
        fprintf(stderr, "ofi_putn_garbage: unknown kind %s\n", argv[1]);
        return 2;
    }
    if (sizeof(ofi_hdr_t) + blen > mod->inject_size) {
        printf("SKIPPED: provider %s injects %zu bytes, the message is %zu\n", mod->my_addr.prov,
               mod->inject_size, sizeof(ofi_hdr_t) + blen);
        return 77;
    }
    CHECK(ferry_set_error_cb(ctx, on_error, NULL) == FERRY_OK);
    ferry_btl_module_t *btl = &mod->super;
    static unsigned char region[64];
    ferry_btl_reg_t *reg = NULL;
    if (st.me == 1) {
        CHECK(btl->ops->register_am(btl, NOTE_TAG, on_note, NULL) == FERRY_OK);
        CHECK(btl->ops->register_mem(btl, NULL, region, sizeof(region),
                                     FERRY_ACCESS_REMOTE_WRITE, &reg) == FERRY_OK);
        unsigned char k[sizeof(uint64_t) + FERRY_BTL_KEY_MAX];
        uint64_t base = (uint64_t)(uintptr_t)region;
        memcpy(k, &base, sizeof(base));
        memcpy(k + sizeof(base), reg->key, FERRY_BTL_KEY_MAX);
        int rc;
        while ((rc = btl->ops->sendi(btl, mod->eps[0], NULL, 0, k, sizeof(k), KEY_TAG)) ==
               FERRY_ERR_NO_RESOURCE)
            btl->ops->progress(btl);
        CHECK(rc == FERRY_OK);
    } else {
        CHECK(btl->ops->register_am(btl, KEY_TAG, on_key, NULL) == FERRY_OK);
        CHECK(btl->ops->register_am(btl, GO_TAG, on_go, NULL) == FERRY_OK);
        double end = now_s() + WAIT_S;
        while (!st.have_key && now_s() < end)
            ferry_progress(ctx);
        CHECK(st.have_key);
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    /* Rank 1 says when it is out of the barrier: failing rank 0 inside it
     * would fail the barrier. */
    if (st.me == 1) {
        int rc;
        while ((rc = btl->ops->sendi(btl, mod->eps[0], NULL, 0, "go", 2, GO_TAG)) ==
               FERRY_ERR_NO_RESOURCE)
            btl->ops->progress(btl);
        CHECK(rc == FERRY_OK);
    } else {
        double end = now_s() + WAIT_S;
        while (!st.go && now_s() < end)
            ferry_progress(ctx);
        CHECK(st.go);
    }

    int result = 0;
    if (st.me == 0) {
        /* Rebuilt now that the key is known; the header as the module
         * would write it, with the next sequence number. */
        uint8_t type = forge_body(argv[1], msg + sizeof(ofi_hdr_t), &blen);
        ferry_btl_endpoint_t *ep = mod->eps[1];
        ofi_hdr_t h = {.src = 0, .seq = ep->wire.tx_next, .tag = type == OFI_T_PUTN ? NOTE_TAG : 0,
                       .type = type, .magic = OFI_HDR_MAGIC, .ack = ep->wire.rx_next};
        memcpy(msg, &h, sizeof(h));
        ssize_t rc;
        double end = now_s() + WAIT_S;
        while ((rc = fi_inject(mod->ep, msg, sizeof(h) + blen, ep->fi_addr)) == -FI_EAGAIN &&
               now_s() < end)
            btl->ops->progress(btl);
        CHECK(rc == 0);
        /* It took a sequence number: rank 1's acknowledgements count it. */
        ofi_wire_sent(&ep->wire, &h);
        printf("rank 0: a %s message of %zu bytes sent to rank 1\n", argv[1], sizeof(h) + blen);
        /* Rank 1 tells us it failed us (or, for a good one, nothing). */
        end = now_s() + (strcmp(argv[1], "good") == 0 ? 2.0 : WAIT_S);
        while (st.failed[1] == 0 && now_s() < end)
            ferry_progress(ctx);
    } else {
        bool good = strcmp(argv[1], "good") == 0;
        double end = now_s() + (good ? 2.0 : WAIT_S);
        while (st.failed[0] == 0 && now_s() < end)
            ferry_progress(ctx);
        /* Anything else it would do comes now. */
        end = now_s() + 0.2;
        while (now_s() < end)
            ferry_progress(ctx);
        bool untouched = true;
        for (size_t i = 0; i < sizeof(region); i++)
            untouched = untouched && region[i] == 0;
        printf("rank 1: rank 0 failed %d time(s) (%s), notes %d, region %s\n", st.failed[0],
               ferry_status_name(st.failed_status[0]), st.notes,
               untouched ? "untouched" : "WRITTEN");
        bool landed = true;
        for (size_t i = 0; i < 8; i++)
            landed = landed && region[i] == 0xee;
        if (good) {
            if (st.failed[0] != 0 || st.notes != 1 || !landed) {
                printf("rank 1: FAILED: the well-formed put was not taken as one\n");
                result = 1;
            } else {
                printf("rank 1: the well-formed put landed and was handled\n");
            }
        } else if (st.failed[0] != 1 || st.failed_status[0] != FERRY_ERR_PROTO) {
            printf("rank 1: FAILED: rank 0 broke the protocol and was not failed with "
                   "FERRY_ERR_PROTO once\n");
            result = 1;
        }
        if (!good && (st.notes != 0 || !untouched)) {
            printf("rank 1: FAILED: the malformed message was acted on\n");
            result = 1;
        }
        CHECK(btl->ops->deregister_mem(btl, reg) == FERRY_OK);
    }
    fflush(stdout);
    ferry_finalize(&ctx);
    return result;
}
