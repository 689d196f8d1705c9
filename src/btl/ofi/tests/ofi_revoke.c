/*
 * A put or get through a key the target has released, then ordinary
 * traffic: whatever the provider does with the bad access, nothing may be
 * reported done that did not happen, and nothing may wait forever.
 *
 *   ofi_revoke put|get SIZE [unmap] [strict]
 *
 * Run under ferryrun with two ranks. Rank 1 registers two buffers, sends
 * their keys to rank 0 and releases the first (with "unmap", also unmaps
 * it). Rank 0 then puts (or gets) SIZE bytes through the released key,
 * waiting at most OP_WAIT seconds for the completion, then sends a message
 * and puts a pattern through the live key, flushes, and says it is done.
 *
 * What each rank checks:
 * - every operation completes, within its bound (finding 13: a get through
 *   a released key over the shm provider never completed);
 * - after the bad access, an operation reported FERRY_OK did happen: the
 *   message arrived, the pattern landed (finding 8: over tcp;ofi_rxm the
 *   put flushed FERRY_OK and never landed, the message was lost);
 * - a peer failure is seen on both sides or on neither: when one rank's
 *   error callback names the other, the other's names it too, and the
 *   operations that failed did so with an error, never silently.
 * With "strict" (a provider that refuses a released key: tcp;ofi_rxm), also:
 * - the access through the released key fails (FERRY_ERR_ACCESS when the
 *   provider names the missing key, FERRY_ERR_UNREACH when it reports only
 *   the dropped connection: README.md), and a put leaves the released
 *   buffer as it was;
 * - the pair keeps working: the message and the put that follow arrive,
 *   and neither rank is reported failed.
 * Rank 1 reports what it saw to rank 0 in one message when the pair still
 * works; each rank prints one line "rank R: ...".
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "../../../../tests/unit/check.h"

#define TAG_KEYS 40
#define TAG_RELEASED 41
#define TAG_DATA 42
#define TAG_FIN 43
#define TAG_REPORT 44
#define TAG_HELLO 45

#define OP_WAIT 40.0   /* seconds any one completion may take */
#define PEER_WAIT 60.0 /* seconds rank 1 waits for rank 0 to finish */
#define LIVE_LEN 4096
#define LINGER 3.0     /* seconds rank 0 stays after its last operation */

typedef struct keys {
    uint64_t bad_addr, live_addr;
    ferry_rkey_t bad, live;
} keys_t;

typedef struct report {
    uint32_t data_seen;    /* the message after the bad access arrived */
    uint32_t live_landed;  /* the pattern is in the live buffer */
    uint32_t peer_failed;  /* rank 1's error callback named rank 0 */
    uint32_t released_changed; /* the released buffer changed (put) */
} report_t;

typedef struct state {
    int me;
    bool have_keys, released, data_seen, fin, have_report;
    keys_t keys;
    report_t report;
    int failed_peer;
    int failures;
    pid_t peer_pid;      /* rank 0's, told to rank 1 */
    bool told_alive;     /* the error callback ran while the failed peer's process lived */
    bool have_hello;
    int op_status;
    bool op_done;
} state_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    state_t *st = arg;
    st->failures++;
    st->failed_peer = peer;
    /* Told through the connection, not by the peer's death. */
    st->told_alive = st->peer_pid > 0 && kill(st->peer_pid, 0) == 0;
    printf("rank %d: error callback: peer %d: %s (%s)\n", st->me, peer, msg,
           ferry_strerror(status));
    fflush(stdout);
}

static void on_am(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    state_t *st = arg;
    switch (tag) {
    case TAG_KEYS:
        CHECK(len == sizeof(keys_t));
        memcpy(&st->keys, data, sizeof(keys_t));
        st->have_keys = true;
        break;
    case TAG_RELEASED:
        st->released = true;
        break;
    case TAG_DATA:
        CHECK(len == 5 && memcmp(data, "after", 5) == 0);
        st->data_seen = true;
        break;
    case TAG_FIN:
        st->fin = true;
        break;
    case TAG_REPORT:
        CHECK(len == sizeof(report_t));
        memcpy(&st->report, data, sizeof(report_t));
        st->have_report = true;
        break;
    case TAG_HELLO:
        CHECK(len == sizeof(pid_t));
        memcpy(&st->peer_pid, data, sizeof(pid_t));
        st->have_hello = true;
        break;
    }
}

static void on_op(void *arg, int status)
{
    state_t *st = arg;
    st->op_status = status;
    st->op_done = true;
}

static bool wait_flag(ferry_ctx_t *ctx, state_t *st, const bool *flag, double bound)
{
    double end = now_s() + bound;
    while (!*flag && st->failures == 0) {
        CHECK(ferry_progress(ctx) >= 0);
        if (now_s() > end)
            return false;
        if (!*flag)
            usleep(100);
    }
    return *flag;
}

/* Starts an operation and waits for its completion (at most OP_WAIT). */
static int run_op(ferry_ctx_t *ctx, state_t *st, bool put, void *buf, size_t len,
                  uint64_t raddr, const ferry_rkey_t *rkey, const char *what)
{
    st->op_done = false;
    double start = now_s();
    int rc = put ? ferry_put(ctx, 1, buf, len, NULL, raddr, rkey, on_op, st)
                 : ferry_get(ctx, 1, buf, len, NULL, raddr, rkey, on_op, st);
    if (rc != FERRY_OK) {
        printf("rank 0: %s refused at once: %s\n", what, ferry_status_name(rc));
        return rc;
    }
    while (!st->op_done) {
        CHECK(ferry_progress(ctx) >= 0);
        if (now_s() > start + OP_WAIT) {
            printf("rank 0: FAILED: %s not completed after %.0f s\n", what, OP_WAIT);
            fflush(stdout);
            exit(1);
        }
    }
    printf("rank 0: %s completed with %s after %.0f ms\n", what, ferry_status_name(st->op_status),
           (now_s() - start) * 1000);
    return st->op_status;
}

static void send_am(ferry_ctx_t *ctx, int dst, int tag, const void *data, size_t len,
                    int *rc_out)
{
    int rc;
    double end = now_s() + OP_WAIT;
    while ((rc = ferry_am_send(ctx, dst, tag, data, len)) == FERRY_ERR_NO_RESOURCE &&
           now_s() < end)
        ferry_progress(ctx);
    *rc_out = rc;
}

static int initiator(ferry_ctx_t *ctx, state_t *st, bool put, size_t size, bool strict)
{
    pid_t me = getpid();
    int hrc;
    send_am(ctx, 1, TAG_HELLO, &me, sizeof(me), &hrc);
    CHECK(hrc == FERRY_OK);
    CHECK(wait_flag(ctx, st, &st->have_keys, PEER_WAIT));
    CHECK(wait_flag(ctx, st, &st->released, PEER_WAIT));
    unsigned char *buf = malloc(size);
    CHECK(buf != NULL);
    memset(buf, 0xa5, size);
    int bad = run_op(ctx, st, put, buf, size, st->keys.bad_addr, &st->keys.bad,
                     put ? "the put through the released key" : "the get through the released key");
    double start = now_s();
    int frc = ferry_flush(ctx, 1);
    printf("rank 0: flush after the bad access: %s after %.0f ms\n", ferry_status_name(frc),
           (now_s() - start) * 1000);

    /* Ordinary traffic afterwards. */
    int am_rc;
    send_am(ctx, 1, TAG_DATA, "after", 5, &am_rc);
    unsigned char live[LIVE_LEN];
    for (size_t i = 0; i < sizeof(live); i++)
        live[i] = (unsigned char)(i * 7 + 3);
    int put_rc = run_op(ctx, st, true, live, sizeof(live), st->keys.live_addr, &st->keys.live,
                        "the put through the live key");
    start = now_s();
    frc = ferry_flush(ctx, 1);
    printf("rank 0: final flush: %s after %.0f ms\n", ferry_status_name(frc),
           (now_s() - start) * 1000);
    int fin_rc;
    send_am(ctx, 1, TAG_FIN, "", 0, &fin_rc);

    /* Rank 1's view, unless the pair failed. */
    bool reported = fin_rc == FERRY_OK && wait_flag(ctx, st, &st->have_report, PEER_WAIT);
    printf("rank 0: bad=%s message=%s live_put=%s fin=%s peer_failed=%d report=%s "
           "data_seen=%u live_landed=%u released_changed=%u\n",
           ferry_status_name(bad), ferry_status_name(am_rc), ferry_status_name(put_rc),
           ferry_status_name(fin_rc), st->failures > 0 && st->failed_peer == 1,
           reported ? "yes" : "no", st->report.data_seen, st->report.live_landed,
           st->report.released_changed);
    bool ok = true;
    if (strict) {
        if (bad == FERRY_OK) {
            printf("rank 0: FAILED: the access through the released key reported FERRY_OK\n");
            ok = false;
        } else if (bad != FERRY_ERR_ACCESS && bad != FERRY_ERR_UNREACH) {
            printf("rank 0: FAILED: the access through the released key failed with %s\n",
                   ferry_status_name(bad));
            ok = false;
        }
        if (!reported) {
            printf("rank 0: FAILED: the pair stopped working after the refused access\n");
            ok = false;
        } else if (st->report.released_changed) {
            printf("rank 0: FAILED: the put changed the released buffer\n");
            ok = false;
        }
    }
    if (reported) {
        /* The pair kept working: what was reported done must have
         * happened, and nobody was failed. */
        if (am_rc == FERRY_OK && !st->report.data_seen) {
            printf("rank 0: FAILED: the message was sent (FERRY_OK) and never arrived\n");
            ok = false;
        }
        if (put_rc == FERRY_OK && !st->report.live_landed) {
            printf("rank 0: FAILED: the put completed with FERRY_OK and did not land\n");
            ok = false;
        }
        if (st->failures > 0 || st->report.peer_failed) {
            printf("rank 0: FAILED: a rank was reported failed, yet the pair still talks\n");
            ok = false;
        }
    } else {
        /* The pair failed: this side must have been told, and what failed
         * must have failed with an error. */
        if (st->failures == 0 || st->failed_peer != 1) {
            printf("rank 0: FAILED: rank 1 stopped answering and no error callback said so\n");
            ok = false;
        }
        if (am_rc == FERRY_OK && put_rc == FERRY_OK && fin_rc == FERRY_OK) {
            printf("rank 0: FAILED: every operation reported FERRY_OK, yet rank 1 never "
                   "answered\n");
            ok = false;
        }
    }
    /* Stay a while, so that rank 1 must learn of a failure from the
     * fabric, not from this process's exit. */
    double end = now_s() + LINGER;
    while (now_s() < end)
        CHECK(ferry_progress(ctx) >= 0);
    free(buf);
    return ok ? 0 : 1;
}

static int target(ferry_ctx_t *ctx, state_t *st, size_t size, bool unmap)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t bad_len = (size + (size_t)page - 1) / (size_t)page * (size_t)page;
    unsigned char *bad = mmap(NULL, bad_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                              -1, 0);
    CHECK(bad != MAP_FAILED);
    memset(bad, 0x11, bad_len);
    unsigned char *live = calloc(1, LIVE_LEN);
    CHECK(live != NULL);
    ferry_mem_t *mbad, *mlive;
    unsigned acc = FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE;
    CHECK(ferry_mem_register(ctx, bad, bad_len, acc, &mbad) == FERRY_OK);
    CHECK(ferry_mem_register(ctx, live, LIVE_LEN, acc, &mlive) == FERRY_OK);
    keys_t k = {.bad_addr = (uint64_t)(uintptr_t)bad, .live_addr = (uint64_t)(uintptr_t)live};
    CHECK(ferry_mem_rkey(mbad, &k.bad) == FERRY_OK);
    CHECK(ferry_mem_rkey(mlive, &k.live) == FERRY_OK);
    int rc;
    CHECK(wait_flag(ctx, st, &st->have_hello, PEER_WAIT));
    send_am(ctx, 0, TAG_KEYS, &k, sizeof(k), &rc);
    CHECK(rc == FERRY_OK);
    CHECK(ferry_mem_deregister(ctx, mbad) == FERRY_OK);
    if (unmap)
        CHECK(munmap(bad, bad_len) == 0);
    send_am(ctx, 0, TAG_RELEASED, "", 0, &rc);
    CHECK(rc == FERRY_OK);

    bool fin = wait_flag(ctx, st, &st->fin, PEER_WAIT);
    /* Give a failure found by the other side the time to reach this one. */
    double end = now_s() + 1.0;
    while (now_s() < end && st->failures == 0)
        CHECK(ferry_progress(ctx) >= 0);
    report_t r = {.data_seen = st->data_seen, .peer_failed = st->failures > 0};
    r.live_landed = 1;
    for (size_t i = 0; i < LIVE_LEN; i++)
        if (live[i] != (unsigned char)(i * 7 + 3))
            r.live_landed = 0;
    if (!unmap)
        for (size_t i = 0; i < bad_len; i++)
            if (bad[i] != 0x11)
                r.released_changed = 1;
    printf("rank 1: fin=%d data_seen=%u live_landed=%u peer_failed=%d told_alive=%d "
           "released_changed=%u\n",
           fin, r.data_seen, r.live_landed, st->failures > 0 && st->failed_peer == 0,
           st->told_alive, r.released_changed);
    int result = 0;
    if (!fin && st->failures == 0) {
        printf("rank 1: FAILED: rank 0 never finished and no error callback said why\n");
        result = 1;
    }
    if (st->failures > 0 && !st->told_alive) {
        printf("rank 1: FAILED: rank 0 failed this rank and it learned so only when rank 0's "
               "process exited\n");
        result = 1;
    }
    if (st->failures == 0) {
        send_am(ctx, 0, TAG_REPORT, &r, sizeof(r), &rc);
        if (rc != FERRY_OK)
            printf("rank 1: the report could not be sent: %s\n", ferry_status_name(rc));
    }
    CHECK(ferry_mem_deregister(ctx, mlive) == FERRY_OK);
    if (!unmap)
        munmap(bad, bad_len);
    free(live);
    return result;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "put") != 0 && strcmp(argv[1], "get") != 0)) {
        fprintf(stderr, "usage: ofi_revoke put|get SIZE [unmap] [strict]\n");
        return 2;
    }
    bool put = strcmp(argv[1], "put") == 0;
    size_t size = (size_t)strtoul(argv[2], NULL, 0);
    bool unmap = false, strict = false;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "unmap") == 0) {
            unmap = true;
        } else if (strcmp(argv[i], "strict") == 0) {
            strict = true;
        } else {
            fprintf(stderr, "ofi_revoke: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    CHECK(size > 0);
    ferry_ctx_t *ctx;
    state_t st = {.failed_peer = -1};
    int irc = ferry_init(NULL, &ctx);
    if (irc == FERRY_ERR_NOT_SUPPORTED) {
        printf("SKIPPED: ferry_init: %s (is the ofi module built, and the provider here?)\n",
               ferry_strerror(irc));
        return 77;
    }
    CHECK(irc == FERRY_OK);
    st.me = ferry_rank(ctx);
    CHECK(ferry_size(ctx) == 2);
    if (ferry_am_max_size(ctx, 1 - st.me) < 0) {
        printf("SKIPPED: rank %d cannot be reached\n", 1 - st.me);
        return 77;
    }
    CHECK(ferry_set_error_cb(ctx, on_error, &st) == FERRY_OK);
    for (int tag = TAG_KEYS; tag <= TAG_HELLO; tag++)
        CHECK(ferry_am_register(ctx, tag, on_am, &st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    int result = st.me == 0 ? initiator(ctx, &st, put, size, strict) : target(ctx, &st, size, unmap);
    fflush(stdout);
    /* The pair may have failed: finalize's barrier then says so. */
    ferry_finalize(&ctx);
    return result;
}
