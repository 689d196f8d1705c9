/*
 * Keys that cannot be guessed: `tcp_keys`, two ranks under ferryrun with
 * FERRY_BTL=self,tcp. Rank 1 is the target; rank 0 is a job peer that holds
 * one genuine key and tries to reach memory it was never given a key for.
 *
 * Rank 1 registers A (read-write) and B (read-write) and gives rank 0 A's
 * key and, as if leaked, B's address only. Rank 0 checks that A's key works
 * (a get and a put), then forges keys for B from A's: A's tcp key with its
 * slot and generation replaced by every nearby slot and small generation (a
 * key that was only slot and generation is found this way). Then rank 1
 * deregisters A and registers C, which takes A's slot; rank 0 tries A's key
 * on A's memory (revoked) and the forged keys on C (the slot's next
 * generations). Every put and get through a forged or revoked key must be
 * refused with FERRY_ERR_ACCESS, and rank 1 checks that B and C kept their
 * bytes.
 *
 * Prints "tcp_keys: ok" from rank 0 on success; exits 1 on a failed check
 * and 77 (skipped) when not run as two ranks over tcp.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "unit/check.h"
#include "rkey_layout.h"
#include "btl/ctx.h"

#define TAG_INFO 40
#define TAG_STEP 41
#define LEN 4096

typedef struct info_msg {
    ferry_rkey_t rkey; /* A's */
    uint64_t a, b, c;  /* addresses; c is 0 until C exists */
} info_msg_t;

typedef struct state {
    bool have_info;
    info_msg_t info;
    int step;
    bool comp_done;
    int comp_status;
} state_t;

static void on_info(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)src, (void)tag;
    CHECK(len == sizeof(info_msg_t));
    memcpy(&st->info, data, sizeof(st->info));
    st->have_info = true;
}

static void on_step(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)src, (void)tag, (void)data, (void)len;
    st->step++;
}

static void on_comp(void *arg, int status)
{
    state_t *st = arg;
    st->comp_status = status;
    st->comp_done = true;
}

static void send_msg(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *data, size_t len)
{
    int rc;
    while ((rc = ferry_am_send(ctx, dst, tag, data, len)) == FERRY_ERR_NO_RESOURCE)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(rc == FERRY_OK);
}

static void wait_step(ferry_ctx_t *ctx, state_t *st, int step)
{
    while (st->step < step)
        CHECK(ferry_progress(ctx) >= 0);
}

/* A's key rewritten to cover [addr, addr + LEN) and to name (slot, gen). */
static ferry_rkey_t forge(const ferry_rkey_t *a, uint64_t addr, uint32_t slot, uint32_t gen)
{
    ferry_rkey_t k = *a;
    rkey_header_t h;
    memcpy(&h, k.bytes, sizeof(h));
    h.base = addr;
    h.len = LEN;
    memcpy(k.bytes, &h, sizeof(h));
    size_t klen;
    size_t off = rkey_tcp_offset(&k, &klen);
    CHECK(klen >= 8);
    memcpy(k.bytes + off, &slot, sizeof(slot));
    memcpy(k.bytes + off + 4, &gen, sizeof(gen));
    return k;
}

/* One put or get through rk; its status, from the call or the callback. */
static int try_rdma(ferry_ctx_t *ctx, state_t *st, bool put, unsigned char *buf, uint64_t addr,
                    const ferry_rkey_t *rk)
{
    st->comp_done = false;
    int rc = put ? ferry_put(ctx, 1, buf, LEN, NULL, addr, rk, on_comp, st)
                 : ferry_get(ctx, 1, buf, LEN, NULL, addr, rk, on_comp, st);
    if (rc != FERRY_OK)
        return rc;
    while (!st->comp_done)
        CHECK(ferry_progress(ctx) >= 0);
    (void)ferry_flush(ctx, 1); /* clears the error flush would report */
    return st->comp_status;
}

/* Every forged key for addr must be refused; returns how many were not. */
static int attack(ferry_ctx_t *ctx, state_t *st, uint64_t addr, const char *what)
{
    size_t klen;
    size_t off = rkey_tcp_offset(&st->info.rkey, &klen);
    CHECK(klen >= 8);
    uint32_t slot0, gen0;
    memcpy(&slot0, st->info.rkey.bytes + off, sizeof(slot0));
    memcpy(&gen0, st->info.rkey.bytes + off + 4, sizeof(gen0));
    unsigned char *buf = malloc(LEN);
    CHECK(buf != NULL);
    int got_in = 0, tries = 0;
    for (uint32_t slot = slot0 > 4 ? slot0 - 4 : 0; slot <= slot0 + 8; slot++) {
        for (uint32_t gen = 1; gen <= gen0 + 6; gen += 2) {
            ferry_rkey_t k = forge(&st->info.rkey, addr, slot, gen);
            for (int put = 0; put < 2; put++) {
                memset(buf, 'X', LEN);
                int rc = try_rdma(ctx, st, put, buf, addr, &k);
                tries++;
                if (rc != FERRY_ERR_ACCESS) {
                    got_in++;
                    printf("rank 0: %s of %s through a forged key (slot %u, generation %u): "
                           "%s%s\n",
                           put ? "put" : "get", what, slot, gen, ferry_strerror(rc),
                           !put && buf[0] != 'X' ? " (and read its bytes)" : "");
                }
            }
        }
    }
    printf("rank 0: %d of %d puts and gets into %s through forged keys got in\n", got_in, tries,
           what);
    free(buf);
    return got_in;
}

static void run_attacker(ferry_ctx_t *ctx, state_t *st)
{
    while (!st->have_info)
        CHECK(ferry_progress(ctx) >= 0);
    unsigned char *buf = malloc(LEN);
    CHECK(buf != NULL);
    /* The genuine key works, so a refusal below is not a broken path. */
    CHECK(try_rdma(ctx, st, false, buf, st->info.a, &st->info.rkey) == FERRY_OK);
    CHECK(buf[0] == 'A' && buf[LEN - 1] == 'A');
    memset(buf, 'P', LEN);
    CHECK(try_rdma(ctx, st, true, buf, st->info.a, &st->info.rkey) == FERRY_OK);
    int bad = attack(ctx, st, st->info.b, "B");
    send_msg(ctx, 1, TAG_STEP, "", 0); /* rank 1: deregister A, register C */
    wait_step(ctx, st, 1);
    CHECK(st->info.c != 0);
    memset(buf, 'X', LEN);
    int rc = try_rdma(ctx, st, false, buf, st->info.a, &st->info.rkey);
    printf("rank 0: get through A's revoked key: %s\n", ferry_strerror(rc));
    bad += rc != FERRY_ERR_ACCESS || buf[0] != 'X';
    rc = try_rdma(ctx, st, true, buf, st->info.a, &st->info.rkey);
    printf("rank 0: put through A's revoked key: %s\n", ferry_strerror(rc));
    bad += rc != FERRY_ERR_ACCESS;
    bad += attack(ctx, st, st->info.c, "C (A's slot, registered again)");
    send_msg(ctx, 1, TAG_STEP, "", 0); /* rank 1: check B and C */
    wait_step(ctx, st, 2);
    free(buf);
    printf("tcp_keys: %s\n", bad == 0 ? "ok" : "FAILED");
    fflush(stdout);
    if (bad != 0)
        exit(1);
}

static void run_target(ferry_ctx_t *ctx, state_t *st)
{
    unsigned char *a = malloc(LEN), *b = malloc(LEN), *c = malloc(LEN);
    CHECK(a != NULL && b != NULL && c != NULL);
    memset(a, 'A', LEN);
    memset(b, 'B', LEN);
    memset(c, 'C', LEN);
    unsigned rw = FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE;
    ferry_mem_t *ma, *mb, *mc;
    CHECK(ferry_mem_register(ctx, a, LEN, rw, &ma) == FERRY_OK);
    CHECK(ferry_mem_register(ctx, b, LEN, rw, &mb) == FERRY_OK);
    info_msg_t info = {.a = (uint64_t)(uintptr_t)a, .b = (uint64_t)(uintptr_t)b};
    CHECK(ferry_mem_rkey(ma, &info.rkey) == FERRY_OK);
    send_msg(ctx, 0, TAG_INFO, &info, sizeof(info));
    wait_step(ctx, st, 1);
    CHECK(ferry_mem_deregister(ctx, ma) == FERRY_OK);
    CHECK(ferry_mem_register(ctx, c, LEN, rw, &mc) == FERRY_OK);
    info.c = (uint64_t)(uintptr_t)c;
    send_msg(ctx, 0, TAG_INFO, &info, sizeof(info));
    send_msg(ctx, 0, TAG_STEP, "", 0);
    wait_step(ctx, st, 2);
    for (size_t i = 0; i < LEN; i++) {
        if (b[i] != 'B' || c[i] != 'C') {
            fprintf(stderr, "tcp_keys: rank 1: byte %zu of %s was overwritten\n", i,
                    b[i] != 'B' ? "B" : "C");
            exit(1);
        }
    }
    CHECK(a[0] == 'P'); /* the genuine put landed */
    send_msg(ctx, 0, TAG_STEP, "", 0);
    CHECK(ferry_mem_deregister(ctx, mb) == FERRY_OK);
    CHECK(ferry_mem_deregister(ctx, mc) == FERRY_OK);
    free(a);
    free(b);
    free(c);
}

int main(void)
{
    ferry_ctx_t *ctx;
    state_t st;
    memset(&st, 0, sizeof(st));
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    if (ferry_size(ctx) != 2 || btl_ctx_find_module(ctx, "tcp") == NULL) {
        printf("tcp_keys: SKIP: needs 2 ranks and the tcp transport (FERRY_BTL=self,tcp)\n");
        ferry_finalize(&ctx);
        return 77;
    }
    CHECK(ferry_am_register(ctx, TAG_INFO, on_info, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_STEP, on_step, &st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (ferry_rank(ctx) == 0)
        run_attacker(ctx, &st);
    else
        run_target(ctx, &st);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    return 0;
}
