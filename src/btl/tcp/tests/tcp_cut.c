/*
 * A link cut in the middle of traffic: `tcp_cut STATE_DIR BOUND_MS`, two
 * ranks over tcp on a link that run_cutlink.sh takes down once both write
 * STATE_DIR/ready.<rank>; it then creates STATE_DIR/cut.
 *
 * Each rank keeps puts to the other in flight (so that its socket holds data
 * the peer has not acknowledged when the link goes) and messages going the
 * other way. After the cut, each must hear of the failure through the error
 * callback, naming the other rank, within BOUND_MS of seeing the cut file
 * (FERRY_TCP_USER_TIMEOUT plus a margin), and every put still in flight must
 * complete with an error: none may succeed after the callback, and none may
 * stay pending. A rank that sees no error within 4 * BOUND_MS fails the
 * test, instead of hanging.
 *
 * Prints "tcp_cut: rank R: ok" per rank; exits 1 on a failed check, 77
 * (skipped) when not run as two ranks.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "unit/check.h"

#define TAG_KEY 60
#define TAG_DATA 61
#define PUT_LEN (256u * 1024u)
#define WINDOW 8
#define MSG_LEN 1024

typedef struct key_msg {
    ferry_rkey_t rkey;
    uint64_t base;
} key_msg_t;

static struct {
    int rank, peer;
    bool have_key;
    key_msg_t key;
    int inflight;
    long ok, ok_after_error, failed;
    bool error_seen;
    int error_peer, error_status;
    char error_msg[256];
    uint64_t error_ns;
    long msgs_in;
} st;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    (void)ctx, (void)arg;
    if (st.error_seen)
        return;
    st.error_seen = true;
    st.error_ns = now_ns();
    st.error_peer = peer;
    st.error_status = status;
    snprintf(st.error_msg, sizeof(st.error_msg), "%s", msg != NULL ? msg : "");
}

static void on_key(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    CHECK(len == sizeof(key_msg_t));
    memcpy(&st.key, data, sizeof(st.key));
    st.have_key = true;
}

static void on_data(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)data, (void)len, (void)arg;
    st.msgs_in++;
}

static void on_put(void *arg, int status)
{
    (void)arg;
    st.inflight--;
    if (status == FERRY_OK) {
        st.ok++;
        if (st.error_seen)
            st.ok_after_error++;
    } else {
        st.failed++;
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s STATE_DIR BOUND_MS\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    long bound_ms = atol(argv[2]);
    CHECK(bound_ms > 0);
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    if (ferry_size(ctx) != 2) {
        printf("tcp_cut: SKIP: needs exactly 2 ranks, got %d\n", ferry_size(ctx));
        ferry_finalize(&ctx);
        return 77;
    }
    st.rank = ferry_rank(ctx);
    st.peer = 1 - st.rank;
    CHECK(ferry_set_error_cb(ctx, on_error, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_KEY, on_key, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_DATA, on_data, NULL) == FERRY_OK);

    unsigned char *area = calloc(WINDOW, PUT_LEN);
    unsigned char *src = malloc(PUT_LEN);
    CHECK(area != NULL && src != NULL);
    memset(src, 0x5a + st.rank, PUT_LEN);
    ferry_mem_t *mem;
    CHECK(ferry_mem_register(ctx, area, (size_t)WINDOW * PUT_LEN, FERRY_ACCESS_REMOTE_WRITE,
                             &mem) == FERRY_OK);
    key_msg_t mine = {.base = (uint64_t)(uintptr_t)area};
    CHECK(ferry_mem_rkey(mem, &mine.rkey) == FERRY_OK);
    int rc;
    while ((rc = ferry_am_send(ctx, st.peer, TAG_KEY, &mine, sizeof(mine))) ==
           FERRY_ERR_NO_RESOURCE)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(rc == FERRY_OK);
    while (!st.have_key)
        CHECK(ferry_progress(ctx) >= 0);

    char ready[512], cut[512];
    snprintf(ready, sizeof(ready), "%s/ready.%d", dir, st.rank);
    snprintf(cut, sizeof(cut), "%s/cut", dir);
    unsigned char msg[MSG_LEN];
    memset(msg, 0xa5, sizeof(msg));
    long started = 0;
    uint64_t cut_ns = 0, start_ns = now_ns();
    bool said_ready = false;
    unsigned slot = 0;
    while (!st.error_seen) {
        /* The window of puts stays full until the link goes. */
        while (st.inflight < WINDOW) {
            rc = ferry_put(ctx, st.peer, src, PUT_LEN, NULL, st.key.base + slot * PUT_LEN,
                           &st.key.rkey, on_put, NULL);
            if (rc == FERRY_ERR_NO_RESOURCE)
                break;
            if (rc != FERRY_OK)
                break; /* the failure's callback comes from progress */
            slot = (slot + 1) % WINDOW;
            st.inflight++;
            started++;
        }
        rc = ferry_am_send(ctx, st.peer, TAG_DATA, msg, sizeof(msg));
        CHECK(rc == FERRY_OK || rc == FERRY_ERR_NO_RESOURCE || rc == FERRY_ERR_UNREACH);
        CHECK(ferry_progress(ctx) >= 0);
        if (!said_ready && st.ok >= 4 * WINDOW && st.msgs_in > 0) {
            FILE *f = fopen(ready, "w");
            CHECK(f != NULL);
            fclose(f);
            said_ready = true;
        }
        if (cut_ns == 0 && access(cut, F_OK) == 0) {
            cut_ns = now_ns();
            printf("tcp_cut: rank %d: link cut after %ld puts done, %d in flight\n", st.rank,
                   st.ok, st.inflight);
        }
        uint64_t ref = cut_ns != 0 ? cut_ns : start_ns;
        if (now_ns() - ref > (uint64_t)(4 * bound_ms + (cut_ns != 0 ? 0 : 60000)) * 1000000u) {
            fprintf(stderr, "rank %d: no error %s\n", st.rank,
                    cut_ns != 0 ? "within four times the bound after the cut"
                                : "and no cut within 60 s");
            return 1;
        }
    }
    long wait_ms = cut_ns != 0 ? (long)((st.error_ns - cut_ns) / 1000000u) : -1;
    printf("tcp_cut: rank %d: error callback %ld ms after the cut: peer %d, %s: %s\n", st.rank,
           wait_ms, st.error_peer, ferry_strerror(st.error_status), st.error_msg);
    CHECK(cut_ns != 0);
    CHECK(st.error_peer == st.peer);
    CHECK(st.error_status != FERRY_OK);
    if (wait_ms > bound_ms) {
        fprintf(stderr, "rank %d: the error came %ld ms after the cut (bound %ld ms)\n",
                st.rank, wait_ms, bound_ms);
        return 1;
    }
    /* Every put still in flight ends, with an error. */
    uint64_t t0 = now_ns();
    while (st.inflight > 0 && now_ns() - t0 < (uint64_t)bound_ms * 1000000u)
        CHECK(ferry_progress(ctx) >= 0);
    printf("tcp_cut: rank %d: %ld puts done, %ld failed, %d pending, %ld done after the "
           "error\n",
           st.rank, st.ok, st.failed, st.inflight, st.ok_after_error);
    CHECK(st.inflight == 0);
    CHECK(st.ok_after_error == 0);
    CHECK(st.failed > 0);
    CHECK(started == st.ok + st.failed);
    /* The peer is gone for this job: new work to it is refused. */
    rc = ferry_put(ctx, st.peer, src, PUT_LEN, NULL, st.key.base, &st.key.rkey, on_put, NULL);
    CHECK(rc == FERRY_ERR_UNREACH);
    CHECK(ferry_mem_deregister(ctx, mem) == FERRY_OK);
    rc = ferry_finalize(&ctx);
    CHECK(rc == FERRY_OK || rc == FERRY_ERR_UNREACH);
    printf("tcp_cut: rank %d: ok\n", st.rank);
    free(area);
    free(src);
    return 0;
}
