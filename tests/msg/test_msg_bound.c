/*
 * The tagged layer's bound on what one source may leave unmatched
 * (FERRY_MSG_UNEXPECTED_BYTES and FERRY_MSG_UNEXPECTED_COUNT), on 2 ranks:
 * rank 1 sends to rank 0, which posts no receive until rank 1 is done.
 *
 *   --within  rank 1 sends exactly as many as the bounds allow; rank 0 then
 *             receives every one, bytes checked, and no one fails.
 *   --count   one message past FERRY_MSG_UNEXPECTED_COUNT, then more;
 *   --bytes   messages past FERRY_MSG_UNEXPECTED_BYTES, then more;
 *   --large   large (rendezvous) messages past FERRY_MSG_UNEXPECTED_COUNT:
 *             rank 0 takes rank 1 as failed, said through its error
 *             callback with FERRY_ERR_NO_MEMORY and the parameter's name;
 *             a receive from rank 1 ends with FERRY_ERR_UNREACH, nothing of
 *             rank 1's is matched afterwards (an any-source receive stays
 *             empty), and rank 1 learns that it was counted out. In
 *             --large, every send of rank 1 completes (none hangs), none
 *             with FERRY_OK.
 * The bounds come from the environment the test is run with (CMakeLists).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ferry/ferry.h>
#include <ferry/msg.h>

#include "../unit/check.h"

#define TAG 7
#define MAXN 64

typedef struct failure {
    int peer;
    int status;
    char msg[512];
    int n;
} failure_t;

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    (void)ctx;
    failure_t *f = arg;
    if (f->n++ == 0) {
        f->peer = peer;
        f->status = status;
        snprintf(f->msg, sizeof(f->msg), "%s", msg);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fill(unsigned char *p, size_t len, int i)
{
    for (size_t k = 0; k < len; k++)
        p[k] = (unsigned char)(i * 31 + (int)k);
}

/* Progresses until the error callback has run, at most 30 s. */
static void wait_failure(ferry_msg_t *msg, const failure_t *f)
{
    double end = now_s() + 30.0;
    while (f->n == 0) {
        CHECK(now_s() < end);
        ferry_msg_progress(msg);
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    bool within = strcmp(mode, "--within") == 0, large = strcmp(mode, "--large") == 0;
    CHECK(within || large || strcmp(mode, "--count") == 0 || strcmp(mode, "--bytes") == 0);
    /* How many messages rank 1 sends before it stops, and their size. */
    int n = large ? 3 : strcmp(mode, "--bytes") == 0 ? 9 : within ? 8 : 9;
    int extra = within || large ? 0 : 8; /* more, after the one past the bound */
    size_t len = large ? (size_t)1 << 20 : strcmp(mode, "--bytes") == 0 ? 8192 : 100;

    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    if (ferry_size(ctx) != 2) {
        fprintf(stderr, "test_msg_bound: needs 2 ranks\n");
        return 2;
    }
    int rank = ferry_rank(ctx);
    failure_t f = {.peer = -2};
    CHECK(ferry_set_error_cb(ctx, on_error, &f) == FERRY_OK);
    ferry_msg_t *msg;
    CHECK(ferry_msg_init(ctx, &msg) == FERRY_OK);
    /* Rank 1 may leave the barrier and send past the bound while rank 0 is
     * still in it: rank 0 then leaves it with rank 1 counted out. */
    int brc = ferry_barrier(ctx);
    CHECK(brc == FERRY_OK || (!within && rank == 0 && brc == FERRY_ERR_UNREACH && f.n > 0));

    unsigned char *buf = malloc(len * (size_t)(n + extra));
    CHECK(buf != NULL);
    if (rank == 1) {
        ferry_msg_req_t *reqs[MAXN] = {0};
        for (int i = 0; i < n + extra; i++) {
            fill(buf + (size_t)i * len, len, i);
            int rc = ferry_msg_isend(msg, 0, 0, TAG, buf + (size_t)i * len, len, &reqs[i]);
            /* Once rank 1 has heard that it was counted out, sends fail. */
            CHECK(rc == FERRY_OK || (f.n > 0 && rc == FERRY_ERR_UNREACH));
        }
        if (within) {
            for (int i = 0; i < n; i++)
                CHECK(ferry_msg_wait(msg, &reqs[i], NULL) == FERRY_OK);
            CHECK(ferry_barrier(ctx) == FERRY_OK);
            CHECK(ferry_barrier(ctx) == FERRY_OK);
        } else {
            for (int i = 0; i < n + extra; i++) {
                if (reqs[i] == NULL)
                    continue;
                ferry_msg_status_t st;
                int rc = ferry_msg_wait(msg, &reqs[i], &st);
                /* Eager sends are done once copied; large ones end when
                 * rank 0 drops them or rank 1 hears of the failure. */
                CHECK(!large || rc == FERRY_ERR_CANCELED || rc == FERRY_ERR_UNREACH);
            }
            wait_failure(msg, &f);
            CHECK(f.peer == 0);
            CHECK(f.status == FERRY_ERR_UNREACH);
        }
    } else if (within) {
        CHECK(ferry_barrier(ctx) == FERRY_OK);
        unsigned char *got = malloc(len);
        unsigned char *want = malloc(len);
        CHECK(got != NULL && want != NULL);
        for (int i = 0; i < n; i++) {
            ferry_msg_status_t st;
            CHECK(ferry_msg_recv(msg, 1, 0, TAG, FERRY_MSG_TAG_EXACT, got, len, &st) == FERRY_OK);
            CHECK(st.source == 1 && st.len == len && st.received == len);
            fill(want, len, i);
            CHECK(memcmp(got, want, len) == 0);
        }
        CHECK(f.n == 0);
        CHECK(ferry_barrier(ctx) == FERRY_OK);
        free(got);
        free(want);
    } else {
        wait_failure(msg, &f);
        const char *which = strcmp(mode, "--bytes") == 0 ? "FERRY_MSG_UNEXPECTED_BYTES"
                                                          : "FERRY_MSG_UNEXPECTED_COUNT";
        fprintf(stderr, "rank 0 was told: %s\n", f.msg);
        CHECK(f.peer == 1);
        CHECK(f.status == FERRY_ERR_NO_MEMORY);
        CHECK(strstr(f.msg, which) != NULL);
        /* A receive from the failed source cannot match: it ends. */
        ferry_msg_status_t st;
        CHECK(ferry_msg_recv(msg, 1, 0, TAG, FERRY_MSG_TAG_EXACT, buf, len, &st) ==
              FERRY_ERR_UNREACH);
        /* Nothing of rank 1's is held, and nothing it still sends is taken. */
        int found = 1;
        CHECK(ferry_msg_iprobe(msg, FERRY_MSG_ANY_SOURCE, 0, TAG, FERRY_MSG_TAG_EXACT, &found,
                               NULL) == FERRY_OK);
        CHECK(found == 0);
        ferry_msg_req_t *any;
        CHECK(ferry_msg_irecv(msg, FERRY_MSG_ANY_SOURCE, 0, TAG, FERRY_MSG_TAG_EXACT, buf, len,
                              &any) == FERRY_OK);
        double end = now_s() + 0.3;
        while (now_s() < end) {
            int done = 0;
            CHECK(ferry_msg_test(msg, &any, &done, NULL) == FERRY_OK);
            CHECK(!done);
        }
        CHECK(ferry_msg_cancel(msg, any) == FERRY_OK);
        CHECK(ferry_msg_wait(msg, &any, &st) == FERRY_ERR_CANCELED);
    }
    CHECK(ferry_msg_fini(&msg) == FERRY_OK);
    free(buf);
    int rc = ferry_finalize(&ctx);
    CHECK(rc == FERRY_OK || (!within && rc == FERRY_ERR_UNREACH));
    printf("rank %d: %s as expected\n", rank, mode);
    return 0;
}
