/*
 * Callbacks run only from progress: a failure that sm finds inside
 * ferry_am_send must be reported from the next ferry_progress, never from
 * inside the send.
 *
 * Rank 1 corrupts the credit word of rank 0's channel into it (a tail past
 * everything rank 0 wrote) and stops reading; rank 0 sends until its ring
 * runs out of cached credits, reads the word inside ferry_am_send and fails
 * the endpoint there.
 *
 * usage (under ferryrun -n 2 --keep-going): sm_defer
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "unit/check.h"
#include "sm_pair.h"
#include "btl/sm/sm.h"

#define TAG 9
#define TAG_GO 10

typedef struct state {
    bool in_send;
    int reports;
    int reports_in_send;
    int peer;
    int got;
    bool go;
} state_t;

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    state_t *st = arg;
    st->reports++;
    st->peer = peer;
    if (st->in_send)
        st->reports_in_send++;
    printf("rank %d: error callback (%s): peer %d: %s (%s)\n", ferry_rank(ctx),
           st->in_send ? "INSIDE ferry_am_send" : "from progress", peer, msg,
           ferry_strerror(status));
}

static void on_msg(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                   void *arg)
{
    state_t *st = arg;
    if (tag == TAG_GO)
        st->go = true;
    else
        st->got++;
}

int main(void)
{
    ferry_ctx_t *ctx;
    state_t st = {.peer = -2};
    ferry_btl_module_t *btl = sm_pair_init(&ctx);
    int me = ferry_rank(ctx);
    CHECK(ferry_set_error_cb(ctx, on_error, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG, on_msg, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_GO, on_msg, &st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    char buf[8] = "defer";
    ferry_btl_endpoint_t *ep = ctx->peers[1 - me].ep;

    if (me == 1) {
        /* Past everything rank 0 can have written: corrupt. */
        atomic_store_explicit(&ep->in->tail, ep->rpos + ((uint64_t)1 << 40),
                              memory_order_release);
        int rc;
        while ((rc = ferry_am_send(ctx, 0, TAG_GO, buf, sizeof(buf))) == FERRY_ERR_NO_RESOURCE)
            ;
        CHECK(rc == FERRY_OK);
        /* No more reading (it would publish a good tail): wait until rank 0
         * finalizes or dies, then go without finalizing, our segment with us. */
        while (!atomic_load_explicit(&ep->peer_hdr->closing, memory_order_acquire) &&
               !(kill(ep->pid, 0) != 0 && errno == ESRCH))
            usleep(1000);
        shm_unlink(((sm_module_t *)btl)->seg_name);
        _exit(0);
    }

    while (!st.go)
        CHECK(ferry_progress(ctx) >= 0);
    int sends = 0, rc;
    for (;;) {
        st.in_send = true;
        rc = ferry_am_send(ctx, 1, TAG, buf, sizeof(buf));
        st.in_send = false;
        sends++;
        if (rc != FERRY_OK)
            break;
        CHECK(sends < 10000000);
    }
    printf("rank 0: send %d returned %s; %d report(s) so far\n", sends, ferry_strerror(rc),
           st.reports);
    CHECK(rc == FERRY_ERR_UNREACH || rc == FERRY_ERR_NO_RESOURCE);
    CHECK(st.reports_in_send == 0);
    CHECK(st.reports == 0);
    /* The report comes with the next progress. */
    CHECK(ferry_progress(ctx) >= 0);
    CHECK(st.reports == 1);
    CHECK(st.peer == 1);
    CHECK(ferry_am_send(ctx, 1, TAG, buf, sizeof(buf)) == FERRY_ERR_UNREACH);
    printf("rank 0: the failure found inside ferry_am_send was reported by the next progress\n");
    ferry_finalize(&ctx);
    return 0;
}
