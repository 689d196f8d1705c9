/*
 * The raw libfabric floors, measured between the two ranks of the run on the
 * provider ferry's ofi transport uses (FERRY_OFI_PROVIDER, and the domain
 * FERRY_OFI_IFACE names, as the transport chooses them):
 * - ping-pong: 8 bytes each way with fi_inject (fi_send where the provider's
 *   inject size is smaller) into a pre-posted fi_recv, both ranks
 *   busy-polling their completion queue; the half round trip.
 * - write stream: rank 0 posts windows of BENCH_WINDOW fi_write of the size
 *   into rank 1's registered buffer and waits for their completions, as
 *   put-bw does with puts and ferry_flush; rank 1 polls its completion queue
 *   (software providers progress the target there) until rank 0 says it is
 *   done with a message, which it answers; MB/s.
 * Each rank opens its own fabric, domain, endpoint, completion queue and
 * address vector, written directly against libfabric (none of ferry's code),
 * and sends the other its fi_getname address and its target buffer's
 * address and key in a control message. They stand for the ofi transport's
 * floors when FERRY_BTL selects ofi without sm or tcp
 * (bench_floor_ofi_selected). Built without libfabric, the floors are n/a.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

bool bench_floor_ofi_selected(const bench_t *b)
{
    const char *t = b->transport;
    return strstr(t, "ofi") != NULL && strstr(t, "sm") == NULL && strstr(t, "tcp") == NULL;
}

double bench_floor_ofi_stream_at(const bench_t *b, size_t size)
{
    for (int i = 0; i < b->floors.n_ofi; i++)
        if (b->floors.ofi_size[i] == size)
            return b->floors.ofi_mbs[i];
    return -1.0;
}

#ifndef FERRY_BENCH_HAVE_OFI

int bench_floor_ofi_setup(bench_t *b)
{
    if (!b->floors.ofi_setup_done) {
        b->floors.ofi_setup_done = true;
        b->floors.ofi_lat_us = -1.0;
        snprintf(b->floors.ofi_error, sizeof(b->floors.ofi_error),
                 "ferry-bench was built without libfabric");
    }
    return FERRY_OK;
}

int bench_floor_ofi(bench_t *b, const size_t *sizes, int n)
{
    (void)sizes, (void)n;
    return bench_floor_ofi_setup(b);
}

/* Never run: without libfabric ofi_ok stays false, so no block is made. */
int bench_floor_ofi_pingpong_block(bench_t *b, const bench_block_t *blk, long n,
                                   uint64_t *ns_out)
{
    bench_error(b, "libfabric floor: %s", b->floors.ofi_error);
    return FERRY_ERR_NOT_SUPPORTED;
}

int bench_floor_ofi_stream_block(bench_t *b, const bench_block_t *blk, long n,
                                 uint64_t *ns_out)
{
    bench_error(b, "libfabric floor: %s", b->floors.ofi_error);
    return FERRY_ERR_NOT_SUPPORTED;
}

void bench_floor_ofi_fini(bench_t *b)
{
    (void)b;
}

#else

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define OFI_PP_ITERS 10000
#define OFI_PP_WARMUP 1000
#define OFI_MSG_LEN 8
#define OFI_ADDR_CAP 256

/* The libfabric objects of one rank. */
struct bench_ofi {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_ep *ep;
    struct fid_mr *mr_msg, *mr_src, *mr_dst;
    uint64_t mr_mode;
    size_t inject_size;
    uint8_t *msg;       /* [0, 64): receive; [64, 128): send */
    uint8_t *src, *dst; /* b->buf_len each */
    fi_addr_t peer;
    uint64_t peer_addr; /* the remote address of the peer's dst, as fi_write wants it */
    uint64_t peer_key;
    struct fi_context2 rx_ctx, tx_ctx, wr_ctx[BENCH_WINDOW];
    long writes_done;
    bool recv_done;
};

/* What each rank sends the other. */
typedef struct ofi_hello {
    int32_t ok;
    uint32_t addrlen;
    uint64_t dst_addr;
    uint64_t dst_len;
    uint64_t dst_key;
    uint8_t addr[OFI_ADDR_CAP];
} ofi_hello_t;

_Static_assert(sizeof(ofi_hello_t) <= BENCH_CTRL_MAX, "ofi hello larger than a control message");

static int fail(bench_t *b, const char *what, long fi_rc)
{
    snprintf(b->floors.ofi_error, sizeof(b->floors.ofi_error), "%s: %s", what,
             fi_strerror((int)(fi_rc < 0 ? -fi_rc : fi_rc)));
    return FERRY_ERR_IO;
}

/* 0 native, 1 tcp, 2 must be named: the transport's rule when
 * FERRY_OFI_PROVIDER is unset. */
static int prov_rank(const char *p)
{
    static const char *const named[] = {"shm", "sockets", "udp", "net", "ofi_rxd"};
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++)
        if (strstr(p, named[i]) != NULL)
            return 2;
    return strncmp(p, "tcp", 3) == 0 ? 1 : 0;
}

static bool in_list(const char *name, const char *list)
{
    size_t n = strlen(name);
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p = end != NULL ? end + 1 : NULL;
    }
    return false;
}

/* The provider and domain the transport's module 0 takes. */
static struct fi_info *pick(bench_t *b, struct fi_info *list)
{
    const char *want = getenv("FERRY_OFI_PROVIDER");
    const char *iface = getenv("FERRY_OFI_IFACE");
    const char *prov = NULL;
    int best = 2;
    for (struct fi_info *i = list; i != NULL; i = i->next) {
        const char *name = i->fabric_attr->prov_name;
        if (name == NULL)
            continue;
        if (want != NULL && want[0] != '\0') {
            if (strcmp(name, want) == 0 || prov == NULL)
                prov = name;
            if (strcmp(name, want) == 0)
                break;
        } else if (prov_rank(name) < best) {
            best = prov_rank(name);
            prov = name;
        }
    }
    if (prov == NULL) {
        snprintf(b->floors.ofi_error, sizeof(b->floors.ofi_error),
                 "no provider the transport would choose (set FERRY_OFI_PROVIDER)");
        return NULL;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (struct fi_info *i = list; i != NULL; i = i->next) {
            const char *dom = i->domain_attr->name != NULL ? i->domain_attr->name : "";
            if (i->fabric_attr->prov_name == NULL || strcmp(i->fabric_attr->prov_name, prov) != 0)
                continue;
            if (iface != NULL && iface[0] != '\0' ? in_list(dom, iface)
                                                  : pass == 1 || strcmp(dom, "lo") != 0)
                return i;
        }
    }
    snprintf(b->floors.ofi_error, sizeof(b->floors.ofi_error),
             "provider %s has no domain named in FERRY_OFI_IFACE", prov);
    return NULL;
}

static int reg(bench_t *b, struct bench_ofi *o, void *buf, size_t len, uint64_t acc,
               uint64_t req_key, struct fid_mr **mr_out)
{
    int rc = fi_mr_reg(o->domain, buf, len, acc, 0, req_key, 0, mr_out, NULL);
    if (rc != 0)
        return fail(b, "fi_mr_reg", rc);
    if (o->mr_mode & FI_MR_ENDPOINT) {
        if ((rc = fi_mr_bind(*mr_out, &o->ep->fid, 0)) != 0 || (rc = fi_mr_enable(*mr_out)) != 0)
            return fail(b, "binding a registration to the endpoint", rc);
    }
    return FERRY_OK;
}

static void *desc_of(const struct bench_ofi *o, struct fid_mr *mr)
{
    return (o->mr_mode & FI_MR_LOCAL) ? fi_mr_desc(mr) : NULL;
}

static int post_recv(bench_t *b, struct bench_ofi *o)
{
    ssize_t rc;
    o->recv_done = false;
    while ((rc = fi_recv(o->ep, o->msg, 64, desc_of(o, o->mr_msg), FI_ADDR_UNSPEC,
                         &o->rx_ctx)) == -FI_EAGAIN)
        (void)fi_cq_read(o->cq, NULL, 0);
    return rc == 0 ? FERRY_OK : fail(b, "fi_recv", rc);
}

/* Opens this rank's objects; the reason of a failure goes to ofi_error. */
static int open_ofi(bench_t *b, struct bench_ofi *o, uint8_t *addr, size_t *addrlen)
{
    struct fi_info *hints = fi_allocinfo(), *list = NULL;
    int rc;
    if (hints == NULL)
        return fail(b, "fi_allocinfo", -FI_ENOMEM);
    /* The transport's own hints, so the provider behaves as it does there. */
    hints->caps = FI_MSG | FI_RMA;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    const char *want = getenv("FERRY_OFI_PROVIDER");
    if (want != NULL && want[0] != '\0' &&
        (hints->fabric_attr->prov_name = strdup(want)) == NULL) {
        fi_freeinfo(hints);
        return fail(b, "strdup", -FI_ENOMEM);
    }
    rc = fi_getinfo(FI_VERSION(1, 5), NULL, NULL, 0, hints, &list);
    fi_freeinfo(hints);
    if (rc != 0)
        return fail(b, "fi_getinfo", rc);
    struct fi_info *chosen = pick(b, list);
    o->info = chosen != NULL ? fi_dupinfo(chosen) : NULL;
    fi_freeinfo(list);
    if (o->info == NULL)
        return b->floors.ofi_error[0] != '\0' ? FERRY_ERR_NOT_FOUND : fail(b, "fi_dupinfo", -FI_ENOMEM);
    snprintf(b->floors.ofi_prov, sizeof(b->floors.ofi_prov), "%s, domain %s",
             o->info->fabric_attr->prov_name, o->info->domain_attr->name);
    o->mr_mode = (uint64_t)o->info->domain_attr->mr_mode;
    o->inject_size = o->info->tx_attr->inject_size;

    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE,
                                 .size = 1024};
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = 2};
    if ((rc = fi_fabric(o->info->fabric_attr, &o->fabric, NULL)) != 0)
        return fail(b, "fi_fabric", rc);
    if ((rc = fi_domain(o->fabric, o->info, &o->domain, NULL)) != 0)
        return fail(b, "fi_domain", rc);
    if ((rc = fi_cq_open(o->domain, &cq_attr, &o->cq, NULL)) != 0)
        return fail(b, "fi_cq_open", rc);
    if ((rc = fi_av_open(o->domain, &av_attr, &o->av, NULL)) != 0)
        return fail(b, "fi_av_open", rc);
    if ((rc = fi_endpoint(o->domain, o->info, &o->ep, NULL)) != 0)
        return fail(b, "fi_endpoint", rc);
    if ((rc = fi_ep_bind(o->ep, &o->cq->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
        (rc = fi_ep_bind(o->ep, &o->av->fid, 0)) != 0)
        return fail(b, "fi_ep_bind", rc);
    if ((rc = fi_enable(o->ep)) != 0)
        return fail(b, "fi_enable", rc);
    if ((rc = fi_getname(&o->ep->fid, addr, addrlen)) != 0)
        return fail(b, "fi_getname", rc);

    /* Allocated and touched before registration (FI_MR_ALLOCATED). */
    o->msg = aligned_alloc(4096, 4096);
    o->src = aligned_alloc(4096, b->buf_len);
    o->dst = aligned_alloc(4096, b->buf_len);
    if (o->msg == NULL || o->src == NULL || o->dst == NULL)
        return fail(b, "allocating buffers", -FI_ENOMEM);
    memset(o->msg, 0, 4096);
    memcpy(o->src, b->pattern, b->buf_len);
    memset(o->dst, 0, b->buf_len);
    if ((rc = reg(b, o, o->msg, 4096, FI_SEND | FI_RECV, 1, &o->mr_msg)) != FERRY_OK ||
        (rc = reg(b, o, o->src, b->buf_len, FI_WRITE, 2, &o->mr_src)) != FERRY_OK ||
        (rc = reg(b, o, o->dst, b->buf_len, FI_REMOTE_WRITE, 3, &o->mr_dst)) != FERRY_OK)
        return rc;
    return post_recv(b, o);
}

static void close_ofi(struct bench_ofi *o)
{
    /* The endpoint first: it holds the posted receive and bound
     * registrations. */
    struct fid *fids[] = {
        o->ep != NULL ? &o->ep->fid : NULL,
        o->mr_msg != NULL ? &o->mr_msg->fid : NULL,
        o->mr_src != NULL ? &o->mr_src->fid : NULL,
        o->mr_dst != NULL ? &o->mr_dst->fid : NULL,
        o->av != NULL ? &o->av->fid : NULL,
        o->cq != NULL ? &o->cq->fid : NULL,
        o->domain != NULL ? &o->domain->fid : NULL,
        o->fabric != NULL ? &o->fabric->fid : NULL,
    };
    for (size_t i = 0; i < sizeof(fids) / sizeof(fids[0]); i++)
        if (fids[i] != NULL)
            fi_close(fids[i]);
    if (o->info != NULL)
        fi_freeinfo(o->info);
    free(o->msg);
    free(o->src);
    free(o->dst);
    free(o);
}

/* Reads completions once: the receive, sends and writes are counted. */
static int poll_once(bench_t *b, struct bench_ofi *o)
{
    struct fi_cq_entry ent[16];
    ssize_t got = fi_cq_read(o->cq, ent, 16);
    if (got == -FI_EAGAIN)
        return FERRY_OK;
    if (got == -FI_EAVAIL) {
        struct fi_cq_err_entry err;
        memset(&err, 0, sizeof(err));
        (void)fi_cq_readerr(o->cq, &err, 0);
        return fail(b, "error completion", err.err);
    }
    if (got < 0)
        return fail(b, "fi_cq_read", got);
    for (ssize_t i = 0; i < got; i++) {
        if (ent[i].op_context == &o->rx_ctx)
            o->recv_done = true;
        else if (ent[i].op_context != &o->tx_ctx)
            o->writes_done++;
    }
    return FERRY_OK;
}

static int wait_recv(bench_t *b, struct bench_ofi *o)
{
    bench_deadline_t d;
    bench_deadline_init(b, &d);
    while (!o->recv_done) {
        int rc = poll_once(b, o);
        if (rc != FERRY_OK)
            return rc;
        if (bench_deadline_passed(&d))
            return fail(b, "waiting for the peer's message", -FI_ETIMEDOUT);
    }
    return post_recv(b, o);
}

/* One 8-byte message: inline where the provider allows, else a send and
 * its completion. */
static int send_msg(bench_t *b, struct bench_ofi *o)
{
    uint8_t *buf = o->msg + 64;
    ssize_t rc;
    bench_deadline_t d;
    bench_deadline_init(b, &d);
    if (o->inject_size >= OFI_MSG_LEN) {
        while ((rc = fi_inject(o->ep, buf, OFI_MSG_LEN, o->peer)) == -FI_EAGAIN) {
            if ((rc = poll_once(b, o)) != FERRY_OK)
                return (int)rc;
            if (bench_deadline_passed(&d))
                return fail(b, "fi_inject", -FI_ETIMEDOUT);
        }
        return rc == 0 ? FERRY_OK : fail(b, "fi_inject", rc);
    }
    while ((rc = fi_send(o->ep, buf, OFI_MSG_LEN, desc_of(o, o->mr_msg), o->peer,
                         &o->tx_ctx)) == -FI_EAGAIN) {
        if ((rc = poll_once(b, o)) != FERRY_OK)
            return (int)rc;
        if (bench_deadline_passed(&d))
            return fail(b, "fi_send", -FI_ETIMEDOUT);
    }
    /* Its completion is read by the polling that waits for the answer. */
    return rc == 0 ? FERRY_OK : fail(b, "fi_send", rc);
}

static int pingpong(bench_t *b, struct bench_ofi *o, long n, uint64_t *ns_out)
{
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        int rc;
        if (b->rank == 0) {
            if ((rc = send_msg(b, o)) != FERRY_OK || (rc = wait_recv(b, o)) != FERRY_OK)
                return rc;
        } else {
            if ((rc = wait_recv(b, o)) != FERRY_OK || (rc = send_msg(b, o)) != FERRY_OK)
                return rc;
        }
    }
    *ns_out = bench_now_ns() - t0;
    return FERRY_OK;
}

/* Rank 0: windows of writes of size, each waited for; then the message that
 * ends the stream and its answer. Rank 1: polls until that message comes,
 * and answers. */
static int stream(bench_t *b, struct bench_ofi *o, size_t size, long windows, uint64_t *ns_out)
{
    uint64_t t0 = bench_now_ns();
    int rc;
    if (b->rank == 0) {
        bench_deadline_t d;
        bench_deadline_init(b, &d);
        for (long w = 0; w < windows; w++) {
            o->writes_done = 0;
            for (int k = 0; k < BENCH_WINDOW; k++) {
                ssize_t frc;
                while ((frc = fi_write(o->ep, o->src, size, desc_of(o, o->mr_src), o->peer,
                                       o->peer_addr, o->peer_key, &o->wr_ctx[k])) == -FI_EAGAIN) {
                    if ((rc = poll_once(b, o)) != FERRY_OK)
                        return rc;
                    if (bench_deadline_passed(&d))
                        return fail(b, "fi_write", -FI_ETIMEDOUT);
                }
                if (frc != 0)
                    return fail(b, "fi_write", frc);
            }
            while (o->writes_done < BENCH_WINDOW) {
                if ((rc = poll_once(b, o)) != FERRY_OK)
                    return rc;
                if (bench_deadline_passed(&d))
                    return fail(b, "waiting for fi_write completions", -FI_ETIMEDOUT);
            }
        }
        if ((rc = send_msg(b, o)) != FERRY_OK || (rc = wait_recv(b, o)) != FERRY_OK)
            return rc;
    } else {
        if ((rc = wait_recv(b, o)) != FERRY_OK || (rc = send_msg(b, o)) != FERRY_OK)
            return rc;
    }
    *ns_out = bench_now_ns() - t0;
    return FERRY_OK;
}

/* Opens the objects and exchanges addresses and keys; both ranks learn
 * whether both succeeded. */
static int setup(bench_t *b)
{
    bench_floors_t *f = &b->floors;
    f->ofi_setup_done = true;
    f->ofi_lat_us = -1.0;
    ofi_hello_t mine, theirs;
    memset(&mine, 0, sizeof(mine));
    size_t addrlen = sizeof(mine.addr);
    struct bench_ofi *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return FERRY_ERR_NO_MEMORY;
    f->ofi = o;
    if (open_ofi(b, o, mine.addr, &addrlen) == FERRY_OK) {
        mine.ok = 1;
        mine.addrlen = (uint32_t)addrlen;
        mine.dst_addr = (o->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)o->dst : 0;
        mine.dst_len = b->buf_len;
        mine.dst_key = fi_mr_key(o->mr_dst);
    }
    size_t len;
    int rc;
    if (b->rank == 0) {
        if ((rc = bench_ctrl_send(b, BENCH_CTRL_OFI, &mine, sizeof(mine))) != FERRY_OK ||
            (rc = bench_ctrl_recv(b, BENCH_CTRL_OFI, &theirs, sizeof(theirs), &len)) != FERRY_OK)
            return rc;
    } else {
        if ((rc = bench_ctrl_recv(b, BENCH_CTRL_OFI, &theirs, sizeof(theirs), &len)) !=
                FERRY_OK ||
            (rc = bench_ctrl_send(b, BENCH_CTRL_OFI, &mine, sizeof(mine))) != FERRY_OK)
            return rc;
    }
    if (len != sizeof(theirs) || theirs.addrlen > sizeof(theirs.addr) ||
        (theirs.ok && theirs.dst_len < b->buf_len)) {
        bench_error(b, "malformed libfabric address from rank %d", b->peer);
        return FERRY_ERR_PROTO;
    }
    if (!mine.ok || !theirs.ok) {
        if (f->ofi_error[0] == '\0')
            snprintf(f->ofi_error, sizeof(f->ofi_error), "rank %d could not open libfabric",
                     b->peer);
        return FERRY_OK;
    }
    if (fi_av_insert(o->av, theirs.addr, 1, &o->peer, 0, NULL) != 1) {
        /* The peer would wait for us forever: this is an error, not n/a. */
        bench_error(b, "fi_av_insert of rank %d's libfabric address failed", b->peer);
        return FERRY_ERR_IO;
    }
    o->peer_addr = theirs.dst_addr;
    o->peer_key = theirs.dst_key;
    f->ofi_ok = true;
    return FERRY_OK;
}

int bench_floor_ofi_setup(bench_t *b)
{
    return b->floors.ofi_setup_done ? FERRY_OK : setup(b);
}

int bench_floor_ofi_pingpong_block(bench_t *b, const bench_block_t *blk, long n,
                                   uint64_t *ns_out)
{
    int rc = pingpong(b, b->floors.ofi, n, ns_out);
    if (rc != FERRY_OK)
        bench_error(b, "libfabric ping-pong floor: %s", b->floors.ofi_error);
    return rc;
}

int bench_floor_ofi_stream_block(bench_t *b, const bench_block_t *blk, long n,
                                 uint64_t *ns_out)
{
    int rc = stream(b, b->floors.ofi, blk->size, n, ns_out);
    if (rc != FERRY_OK)
        bench_error(b, "libfabric fi_write floor at %zu bytes: %s", blk->size,
                    b->floors.ofi_error);
    return rc;
}

int bench_floor_ofi(bench_t *b, const size_t *sizes, int n)
{
    bench_floors_t *f = &b->floors;
    int rc;
    if ((rc = bench_floor_ofi_setup(b)) != FERRY_OK)
        return rc;
    if (!f->ofi_lat_done) {
        f->ofi_lat_done = true;
        if (f->ofi_ok) {
            double us[101];
            uint64_t ns;
            rc = pingpong(b, f->ofi, OFI_PP_WARMUP, &ns);
            for (int r = 0; rc == FERRY_OK && r < b->opts.reps; r++) {
                rc = pingpong(b, f->ofi, OFI_PP_ITERS, &ns);
                us[r] = (double)ns / 1e3 / (2.0 * OFI_PP_ITERS);
            }
            if (rc != FERRY_OK) {
                bench_error(b, "libfabric ping-pong floor: %s", f->ofi_error);
                return rc;
            }
            f->ofi_lat_us = bench_median(us, b->opts.reps);
        }
    }
    for (int k = 0; k < n; k++) {
        size_t size = sizes[k];
        bool known = false;
        for (int i = 0; i < f->n_ofi; i++)
            known = known || f->ofi_size[i] == size;
        if (known || size == 0 || size > b->buf_len || f->n_ofi == BENCH_SIZES_MAX)
            continue;
        double mbs = -1.0;
        if (f->ofi_ok) {
            long iters = bench_iters(b, BENCH_LIMITS, size);
            double v[101];
            uint64_t ns;
            rc = stream(b, f->ofi, size, bench_warmup(b, BENCH_LIMITS, size) + 1, &ns);
            for (int r = 0; rc == FERRY_OK && r < b->opts.reps; r++) {
                rc = stream(b, f->ofi, size, iters, &ns);
                v[r] = (double)size * BENCH_WINDOW * (double)iters / ((double)ns / 1e3);
            }
            if (rc != FERRY_OK) {
                bench_error(b, "libfabric fi_write floor at %zu bytes: %s", size, f->ofi_error);
                return rc;
            }
            mbs = bench_median(v, b->opts.reps);
        }
        f->ofi_size[f->n_ofi] = size;
        f->ofi_mbs[f->n_ofi] = mbs;
        f->n_ofi++;
    }
    return FERRY_OK;
}

void bench_floor_ofi_fini(bench_t *b)
{
    if (b->floors.ofi != NULL)
        close_ofi(b->floors.ofi);
    b->floors.ofi = NULL;
}

#endif /* FERRY_BENCH_HAVE_OFI */
