/*
 * A sender that lies about who it is (finding 3): ofi must take a
 * message's sender from the fabric (FI_SOURCE), never from its header.
 *
 *   ferryrun -n 3 ofi_spoof       (FERRY_BTL=self,ofi, FERRY_OFI_PROVIDER set)
 *
 * Rank 1 is the target. It takes the transport's messages on TEST_TAG
 * itself (its own handler on the ofi module) and records who sent what.
 * - A stranger, a process outside the job that learned rank 1's address
 *   (rank 0 reads it from the job's modex, as anyone who sees a real run's
 *   key-value store can, and starts it), opens its own endpoint on the same
 *   provider and sends ferry messages claiming to be rank 0, with every
 *   sequence number rank 0 might be at.
 * - Rank 2, a rank of the job, sends through its own endpoint messages
 *   whose header claims rank 0.
 * - Then rank 0 sends the one genuine message.
 * Rank 1 must deliver exactly that one, as rank 0's, and nothing forged;
 * and rank 2, which broke the protocol, is reported failed. run_spoof.sh
 * also checks that rank 1 logged the refusals, so that the forged messages
 * did arrive.
 *
 * With "window" instead (ferryrun -n 3 ofi_spoof window), there is no
 * stranger, and rank 2 tells the truth about who it is but not about its
 * sequence: it sends the window's worth of messages less one that all
 * overtake a message it never sends (rank 1 must hold them, and no more),
 * then one beyond its window. Rank 1 must deliver none of them and fail
 * rank 2 with FERRY_ERR_PROTO, dropping what it held; the test's CTest
 * entry wants the log line that names the window.
 *
 * Rank 0 sends its message to rank 1 as early as it can, before rank 1 has
 * progressed at all: a genuine peer's first message must be taken as
 * its own whatever rank 1 has done so far.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <ferry/ferry.h>

#include "btl/ctx.h"
#include "btl/ofi/ofi.h"
#include "rt/modex.h"

#include "../../../../tests/unit/check.h"

#define TEST_TAG 100   /* a transport-level tag the target takes itself */
#define EARLY_TAG 101
#define DONE_TAG 102   /* rank 2 to rank 0: its forgeries are out */
#define READY_TAG 103  /* rank 1 to rank 2: its barrier is over, forge away */
#define FORGED 64      /* forged messages of each liar, seq 0 .. FORGED-1 */
#define WAIT_S 30.0

/* The header of an ofi message as it travels (ofi_wire.h): rank claimed,
 * seq, tag, type, magic, ack. Written out here so that the forger depends
 * on nothing but the format. */
static size_t forge(unsigned char *out, uint32_t claimed, uint32_t seq, const char *text)
{
    uint8_t tag = TEST_TAG, type = 1;
    uint16_t magic = 0x6f66;
    uint32_t ack = 0;
    memcpy(out, &claimed, 4);
    memcpy(out + 4, &seq, 4);
    memcpy(out + 8, &tag, 1);
    memcpy(out + 9, &type, 1);
    memcpy(out + 10, &magic, 2);
    memcpy(out + 12, &ack, 4);
    size_t n = strlen(text);
    memcpy(out + 16, text, n);
    return 16 + n;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the stranger: a plain libfabric program ---- */

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int stranger(const char *prov, const char *hex)
{
    unsigned char addr[256];
    size_t alen = strlen(hex) / 2;
    CHECK(alen > 0 && alen <= sizeof(addr));
    for (size_t i = 0; i < alen; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        CHECK(hi >= 0 && lo >= 0);
        addr[i] = (unsigned char)(hi << 4 | lo);
    }
    struct fi_info *hints = fi_allocinfo(), *info = NULL;
    CHECK(hints != NULL);
    hints->caps = FI_MSG;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->fabric_attr->prov_name = strdup(prov);
    CHECK(fi_getinfo(FI_VERSION(1, 5), NULL, NULL, 0, hints, &info) == 0 && info != NULL);
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT};
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = 1};
    CHECK(fi_fabric(info->fabric_attr, &fabric, NULL) == 0);
    CHECK(fi_domain(fabric, info, &domain, NULL) == 0);
    CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL) == 0);
    CHECK(fi_av_open(domain, &av_attr, &av, NULL) == 0);
    CHECK(fi_endpoint(domain, info, &ep, NULL) == 0);
    CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV) == 0);
    CHECK(fi_ep_bind(ep, &av->fid, 0) == 0);
    CHECK(fi_enable(ep) == 0);
    fi_addr_t target;
    CHECK(fi_av_insert(av, addr, 1, &target, 0, NULL) == 1);
    unsigned char msg[64];
    CHECK(info->tx_attr->inject_size >= 16 + 15);
    int sent = 0;
    double end = now_s() + WAIT_S;
    for (uint32_t seq = 0; seq < FORGED && now_s() < end;) {
        size_t n = forge(msg, 0, seq, "forged:stranger");
        ssize_t rc = fi_inject(ep, msg, n, target);
        if (rc == 0) {
            seq++;
            sent++;
        } else {
            CHECK(rc == -FI_EAGAIN);
        }
        struct fi_cq_entry e[8];
        (void)fi_cq_read(cq, e, 8);
    }
    /* Let a provider that progresses in software push them out. */
    double flush = now_s() + 1.0;
    while (now_s() < flush) {
        struct fi_cq_entry e[8];
        (void)fi_cq_read(cq, e, 8);
    }
    printf("stranger: %d forged messages claiming rank 0 sent to rank 1\n", sent);
    fi_close(&ep->fid);
    fi_close(&av->fid);
    fi_close(&cq->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
    fi_freeinfo(hints);
    return sent == FORGED ? 0 : 1;
}

/* ---- the job ---- */

typedef struct state {
    int me;
    int genuine, forged, wrong_peer;
    int early;
    bool done;
    int ready; /* READY messages: from ranks 0 and 1, each out of its barrier */
    int failed[3];
    int failed_status[3];
} state_t;

static state_t st;

static void on_btl_msg(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, void *cbdata)
{
    const char *p = (const char *)(uintptr_t)rd->segs[0].addr;
    size_t len = rd->segs[0].len;
    if (rd->tag == DONE_TAG) {
        st.done = true;
        return;
    }
    if (rd->tag == READY_TAG) {
        st.ready++;
        return;
    }
    if (rd->tag == EARLY_TAG) {
        st.early++;
        if (rd->peer != 0 || len != 5 || memcmp(p, "early", 5) != 0)
            st.wrong_peer++;
        return;
    }
    if (len == 7 && memcmp(p, "genuine", 7) == 0 && rd->peer == 0) {
        st.genuine++;
    } else {
        st.forged++;
        printf("rank 1: FAILED: delivered as rank %d's: \"%.*s\"\n", rd->peer, (int)len, p);
    }
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    if (peer >= 0 && peer < 3) {
        st.failed[peer]++;
        st.failed_status[peer] = status;
    }
    printf("rank %d: error callback: peer %d: %s (%s)\n", st.me, peer, msg,
           ferry_status_name(status));
}

static void progress_for(ferry_ctx_t *ctx, double seconds)
{
    double end = now_s() + seconds;
    while (now_s() < end)
        ferry_progress(ctx);
}

static int send_btl(ofi_module_t *mod, int dst, uint8_t tag, const char *text)
{
    ferry_btl_module_t *btl = &mod->super;
    int rc;
    double end = now_s() + WAIT_S;
    while ((rc = btl->ops->sendi(btl, mod->eps[dst], NULL, 0, text, strlen(text), tag)) ==
               FERRY_ERR_NO_RESOURCE &&
           now_s() < end)
        btl->ops->progress(btl);
    return rc;
}

/* Rank 1's address from the modex: the blob's addrlen and address
 * (ofi_addr_t: version, addrlen, provider name, address). */
static void peer_addr_hex(ferry_ctx_t *ctx, int rank, char *hex, size_t hexsize)
{
    void *val = NULL;
    size_t len = 0;
    CHECK(rt_modex_get(ctx->modex, rank, "btl.ofi", &val, &len) == FERRY_OK);
    CHECK(len >= 8 + 64);
    uint32_t alen;
    memcpy(&alen, (char *)val + 4, 4);
    CHECK(alen > 0 && 8 + 64 + alen <= len && 2 * alen < hexsize);
    const unsigned char *a = (const unsigned char *)val + 8 + 64;
    for (uint32_t i = 0; i < alen; i++)
        snprintf(hex + 2 * i, 3, "%02x", a[i]);
    free(val);
}

static void run_stranger(ferry_ctx_t *ctx, const char *self)
{
    const char *prov = getenv("FERRY_OFI_PROVIDER");
    char hex[2 * 256 + 1];
    CHECK(prov != NULL && prov[0] != '\0');
    peer_addr_hex(ctx, 1, hex, sizeof(hex));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        execl(self, self, "--stranger", prov, hex, (char *)NULL);
        _exit(127);
    }
    int status;
    /* Rank 1 must progress for the stranger to connect (it does: it waits
     * for the genuine message); this rank has nothing to do meanwhile. */
    while (waitpid(pid, &status, 0) < 0)
        CHECK(errno == EINTR);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--stranger") == 0)
        return stranger(argv[2], argv[3]);
    bool window = argc == 2 && strcmp(argv[1], "window") == 0;
    if (argc > 1 && !window) {
        fprintf(stderr, "usage: ofi_spoof [window]\n");
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
    CHECK(ferry_size(ctx) == 3);
    ofi_module_t *mod = (ofi_module_t *)btl_ctx_find_module(ctx, "ofi");
    if (mod == NULL) {
        printf("SKIPPED: no ofi module (set FERRY_BTL=self,ofi and FERRY_OFI_PROVIDER)\n");
        return 77;
    }
    CHECK(mod->eps[0] != NULL && mod->eps[1] != NULL && mod->eps[2] != NULL);
    CHECK(ferry_set_error_cb(ctx, on_error, NULL) == FERRY_OK);
    if (st.me == 1) {
        CHECK(mod->super.ops->register_am(&mod->super, TEST_TAG, on_btl_msg, NULL) == FERRY_OK);
        CHECK(mod->super.ops->register_am(&mod->super, EARLY_TAG, on_btl_msg, NULL) ==
              FERRY_OK);
    }
    if (st.me == 0)
        CHECK(mod->super.ops->register_am(&mod->super, DONE_TAG, on_btl_msg, NULL) == FERRY_OK);
    if (st.me == 2)
        CHECK(mod->super.ops->register_am(&mod->super, READY_TAG, on_btl_msg, NULL) ==
              FERRY_OK);
    if (st.me == 0)
        CHECK(send_btl(mod, 1, EARLY_TAG, "early") == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    int result = 0;
    if (st.me == 0) {
        if (!window)
            run_stranger(ctx, argv[0]);
        CHECK(ferry_barrier(ctx) == FERRY_OK); /* the stranger has spoken */
        CHECK(send_btl(mod, 2, READY_TAG, "ready") == FERRY_OK);
        /* Rank 2 speaks, then the genuine message. */
        double end = now_s() + WAIT_S;
        while (!st.done && now_s() < end)
            ferry_progress(ctx);
        CHECK(st.done);
        CHECK(send_btl(mod, 1, TEST_TAG, "genuine") == FERRY_OK);
        progress_for(ctx, 2.0);
    } else if (st.me == 2) {
        CHECK(ferry_barrier(ctx) == FERRY_OK);
        /* Not before ranks 0 and 1 are out of the barrier: once rank 1
         * fails this rank, every rank is told, and a barrier that still
         * waits would fail. */
        double ready_by = now_s() + WAIT_S;
        while (st.ready < 2 && now_s() < ready_by)
            ferry_progress(ctx);
        CHECK(st.ready == 2);
        /* Through this rank's own endpoint, which the fabric names rank 2,
         * with headers claiming rank 0; or, for "window", claiming rank 2
         * with sequence numbers ahead of the next one rank 1 expects (this
         * rank's next, which it never sends): 1 .. window - 1 ahead, held,
         * then window + 10 ahead, past the window. */
        unsigned char msg[64];
        int sent = 0;
        uint32_t next = mod->eps[1]->wire.tx_next;
        uint32_t count = window ? mod->window : FORGED;
        for (uint32_t i = 0; i < count; i++) {
            uint32_t seq = !window ? i : i + 1 < count ? next + 1 + i : next + mod->window + 10;
            size_t n = forge(msg, window ? 2 : 0, seq, window ? "forged:window" : "forged:member");
            double end = now_s() + WAIT_S;
            ssize_t rc;
            while ((rc = fi_inject(mod->ep, msg, n, mod->eps[1]->fi_addr)) == -FI_EAGAIN &&
                   now_s() < end)
                mod->super.ops->progress(&mod->super);
            sent += rc == 0;
        }
        printf("rank 2: %d forged messages %s sent to rank 1\n", sent,
               window ? "ahead of its sequence" : "claiming rank 0");
        progress_for(ctx, 0.5);
        CHECK(send_btl(mod, 0, DONE_TAG, "done") == FERRY_OK);
        progress_for(ctx, 2.0);
    } else {
        CHECK(ferry_barrier(ctx) == FERRY_OK);
        CHECK(send_btl(mod, 2, READY_TAG, "ready") == FERRY_OK);
        double end = now_s() + WAIT_S;
        while (st.genuine == 0 && st.forged == 0 && now_s() < end)
            ferry_progress(ctx);
        progress_for(ctx, 1.0);
        printf("rank 1: early %d, genuine %d, forged %d, wrongly attributed %d; rank 2 failed "
               "%d (%s)\n",
               st.early, st.genuine, st.forged, st.wrong_peer, st.failed[2],
               ferry_status_name(st.failed_status[2]));
        if (st.early != 1 || st.wrong_peer != 0) {
            printf("rank 1: FAILED: rank 0's early message was not delivered once as its "
                   "own\n");
            result = 1;
        }
        if (st.genuine != 1 || st.forged != 0) {
            printf("rank 1: FAILED: expected the one genuine message and nothing forged\n");
            result = 1;
        }
        if (st.failed[2] == 0 || st.failed_status[2] != FERRY_ERR_PROTO) {
            printf("rank 1: FAILED: rank 2 broke the protocol and was not reported\n");
            result = 1;
        }
        if (window && mod->eps[2]->wire.nheld != 0) {
            printf("rank 1: FAILED: rank 2 failed, and %u of its messages are still held\n",
                   mod->eps[2]->wire.nheld);
            result = 1;
        }
        if (st.failed[0] != 0) {
            printf("rank 1: FAILED: rank 0, which did nothing wrong, was reported failed\n");
            result = 1;
        }
    }
    fflush(stdout);
    ferry_finalize(&ctx);
    return result;
}
