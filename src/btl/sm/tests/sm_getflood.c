/*
 * A peer flooding a target with get requests is slowed by back pressure and
 * never served at the others' cost. Rank 1 writes get requests straight
 * into its ring in rank 0's segment, as fast as credits allow and without
 * ever reading the answers (an honest initiator stops at the target's get
 * budget; this one does not). Meanwhile rank 2 sends rank 0 a stream of
 * messages. Rank 0 must receive every one of them, and its memory must stay
 * bounded: the requests past its budget wait in rank 1's ring.
 *
 * usage (under ferryrun -n 3 --keep-going): sm_getflood
 * Rank 1 leaves without finalizing once it is done; the others report it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "unit/check.h"
#include "btl/sm/sm.h"

#define TAG_INFO 30
#define TAG_MSG 31
#define TAG_FLOOD 32
#define MESSAGES 20000
#define REQUESTS 1000000u
#define BUF_LEN (1u << 20)
/* What rank 0 may grow by while flooded. A job per request (what this
 * test guards against) takes about 80 bytes each: 80 MB for the flood. */
#define GROWTH_MAX (16u << 20)

typedef struct info {
    uint64_t addr;
    uint8_t key[FERRY_BTL_KEY_MAX];
} info_t;

typedef struct state {
    bool have_info;
    info_t info;
    int msgs;
    bool flood_over;
    uint64_t flood_written;
    int failed;
} state_t;

static void on_info(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    CHECK(len == sizeof(info_t));
    memcpy(&st->info, data, sizeof(info_t));
    st->have_info = true;
}

static void on_msg(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                   void *arg)
{
    state_t *st = arg;
    CHECK(src == 2 && len == sizeof(int));
    int i;
    memcpy(&i, data, sizeof(i));
    CHECK(i == st->msgs);
    st->msgs++;
}

static void on_flood(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                     void *arg)
{
    state_t *st = arg;
    CHECK(len == sizeof(uint64_t));
    memcpy(&st->flood_written, data, sizeof(uint64_t));
    st->flood_over = true;
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    state_t *st = arg;
    printf("rank %d: peer %d failed: %s\n", ferry_rank(ctx), peer, msg);
    CHECK(peer == 1);
    st->failed++;
}

static size_t resident_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    CHECK(f != NULL);
    CHECK(fscanf(f, "%lu %lu", &size, &resident) == 2);
    fclose(f);
    return resident * (size_t)sysconf(_SC_PAGESIZE);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void send_retry(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *data, size_t len)
{
    int rc;
    while ((rc = ferry_am_send(ctx, dst, tag, data, len)) == FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    CHECK(rc == FERRY_OK);
}

/* Rank 1: requests into the ring until REQUESTS are written or rank 0 has
 * taken none for two seconds (it holds them back). It never progresses:
 * the answers pile up in its own ring, unread. */
static uint64_t flood(ferry_btl_endpoint_t *ep, const info_t *info)
{
    uint64_t written = 0;
    uint64_t last_tail = atomic_load(&ep->out->tail);
    double since = now_s();
    while (written < REQUESTS) {
        unsigned char *slot;
        uint64_t pos;
        if (sm_ring_reserve(ep, sizeof(sm_get_req_t), &slot, &pos)) {
            sm_get_req_t req;
            memset(&req, 0, sizeof(req));
            req.raddr = info->addr;
            req.len = BUF_LEN;
            memcpy(&req.key, info->key, sizeof(req.key));
            req.cookie = written + 1;
            memcpy(slot, &req, sizeof(req));
            sm_ring_commit(ep, pos, sizeof(req), 0, SM_T_GET_REQ);
            written++;
            continue;
        }
        CHECK(ep->state == SM_EP_CONNECTED);
        uint64_t tail = atomic_load(&ep->out->tail);
        if (tail != last_tail) {
            last_tail = tail;
            since = now_s();
        } else if (now_s() - since > 2.0) {
            break;
        }
        usleep(100);
    }
    return written;
}

int main(void)
{
    ferry_ctx_t *ctx;
    state_t st = {.have_info = false};
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    int me = ferry_rank(ctx);
    CHECK(ferry_size(ctx) == 3);
    ferry_btl_module_t *btl = btl_ctx_find_module(ctx, "sm");
    for (int r = 0; r < 3; r++) {
        if (r != me && (btl == NULL || ctx->peers[r].module_idx < 0 ||
                        ctx->modules[ctx->peers[r].module_idx] != btl)) {
            if (me == 0)
                printf("SKIPPED: the ranks are not joined by sm\n");
            ferry_finalize(&ctx);
            return 77;
        }
    }
    CHECK(ferry_set_error_cb(ctx, on_error, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_INFO, on_info, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_MSG, on_msg, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_FLOOD, on_flood, &st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    if (me == 0) {
        unsigned char *buf = malloc(BUF_LEN);
        CHECK(buf != NULL);
        memset(buf, 7, BUF_LEN);
        ferry_btl_reg_t *reg;
        CHECK(btl->ops->register_mem(btl, NULL, buf, BUF_LEN, FERRY_ACCESS_REMOTE_READ, &reg) ==
              FERRY_OK);
        info_t info = {.addr = (uint64_t)(uintptr_t)buf};
        memcpy(info.key, reg->key, btl->attr.reg_handle_size);
        size_t before = resident_bytes();
        send_retry(ctx, 1, TAG_INFO, &info, sizeof(info));
        while (st.msgs < MESSAGES || !st.flood_over)
            CHECK(ferry_progress(ctx) >= 0);
        size_t after = resident_bytes();
        printf("rank 0: all %d messages from rank 2 arrived while rank 1 wrote %llu get "
               "requests; resident memory grew by %zu KiB\n",
               st.msgs, (unsigned long long)st.flood_written,
               after > before ? (after - before) / 1024 : 0);
        CHECK(after < before || after - before < GROWTH_MAX);
        /* Rank 1 goes now; then we finalize with rank 2. */
        while (st.failed == 0)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(btl->ops->deregister_mem(btl, reg) == FERRY_OK);
        free(buf);
    } else if (me == 1) {
        while (!st.have_info)
            CHECK(ferry_progress(ctx) >= 0);
        uint64_t written = flood(ctx->peers[0].ep, &st.info);
        printf("rank 1: wrote %llu get requests\n", (unsigned long long)written);
        send_retry(ctx, 2, TAG_FLOOD, &written, sizeof(written));
        /* Gone without finalizing, our segment with us. */
        sm_module_t *mod = (sm_module_t *)btl;
        shm_unlink(mod->seg_name);
        fflush(stdout);
        _exit(0);
    } else {
        for (int i = 0; i < MESSAGES; i++)
            send_retry(ctx, 0, TAG_MSG, &i, sizeof(i));
        /* Rank 1's word goes on to rank 0. */
        while (!st.flood_over)
            CHECK(ferry_progress(ctx) >= 0);
        send_retry(ctx, 0, TAG_FLOOD, &st.flood_written, sizeof(st.flood_written));
        while (st.failed == 0)
            CHECK(ferry_progress(ctx) >= 0);
    }
    ferry_finalize(&ctx);
    printf("rank %d: done\n", me);
    return 0;
}
