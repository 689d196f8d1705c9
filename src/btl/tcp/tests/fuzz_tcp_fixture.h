/*
 * A tcp module without listeners or a launcher, for the fuzz harnesses of
 * the hello and the frame parser: made by hand from what tcp_open sets,
 * with rank 1 as its one peer, two registrations (read-write and
 * read-only, between guard bytes) and room for gets and puts in flight.
 * Each input gets a fresh module; nothing is kept between inputs.
 */
#ifndef TESTS_TCP_FUZZ_TCP_FIXTURE_H
#define TESTS_TCP_FUZZ_TCP_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "btl/tcp/tcp.h"
#include "btl/ctx.h"

#define FX_ABORT_UNLESS(cond)                                                             \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "fuzz: %s:%d: %s\n", __FILE__, __LINE__, #cond);              \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

#define FX_ZONE 4096
#define FX_GUARD 64
#define FX_GUARD_BYTE 0x5c
#define FX_PENDING 4   /* puts and gets of ours waiting for their answer */
#define FX_GET_LEN 512 /* bytes each get wants */
#define FX_TAG 7       /* the one active-message tag with a handler */

typedef struct fx {
    ferry_ctx_t ctx;
    tcp_module_t *mod;
    ferry_btl_endpoint_t *ep; /* rank 1's */
    ferry_btl_reg_t *rw, *ro;
    unsigned char mem[2][FX_GUARD + FX_ZONE + FX_GUARD]; /* rw, then ro */
    btl_frag_t req[FX_PENDING];
    unsigned char get_buf[FX_PENDING][FX_GET_LEN];
    size_t delivered;
} fx_t;

static inline unsigned char *fx_zone(fx_t *f, int which)
{
    return f->mem[which] + FX_GUARD;
}

static void fx_on_msg(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, void *arg)
{
    fx_t *f = arg;
    (void)btl;
    FX_ABORT_UNLESS(rd->tag == FX_TAG && rd->seg_cnt == 1 && rd->peer == 1);
    const ferry_btl_segment_t *seg = &rd->segs[0];
    FX_ABORT_UNLESS(seg->len <= f->mod->super.attr.max_send_size);
    /* Every byte handed over is readable (ASan checks this loop). */
    const volatile unsigned char *p = ferry_btl_seg_ptr(seg);
    unsigned sum = 0;
    for (size_t i = 0; i < seg->len; i++)
        sum += p[i];
    (void)sum;
    f->delivered++;
}

/* A module with params small enough for the fuzzer to reach every limit. */
static inline void fx_init(fx_t *f, int epfd)
{
    memset(f, 0, sizeof(*f));
    rt_log_init(&f->ctx.log);
    f->ctx.log.level = RT_LOG_ERROR;
    f->ctx.rank = 0;
    f->ctx.size = 2;
    tcp_module_t *mod = calloc(1, sizeof(*mod));
    FX_ABORT_UNLESS(mod != NULL);
    f->mod = mod;
    mod->super.ctx = &f->ctx;
    mod->super.attr.name = "tcp";
    mod->super.attr.max_send_size = 64 * 1024;
    mod->super.attr.eager_limit = 4096;
    /* The atomics tcp_open announces: the target executes what they allow. */
    mod->super.attr.flags = FERRY_BTL_FLAG_ATOMIC_OPS | FERRY_BTL_FLAG_ATOMIC_FOPS;
    mod->super.attr.atomic_flags = BTL_ATOMIC_SUPPORTS_CPU;
    mod->p.connect_timeout_ms = 1000;
    mod->p.eager_limit = 4096;
    mod->p.max_send_size = 64 * 1024;
    mod->p.sendq_max = 8 * 1024;
    mod->p.rdma_max_inflight = 6;
    mod->p.rx_buffer = 4096;
    mod->p.reg_slots = 16;
    mod->p.pending_max = 4;
    mod->p.pending_per_addr = 2;
    mod->epfd = epfd;
    mod->nranks = 2;
    util_list_init(&mod->conns);
    util_list_init(&mod->connecting);
    util_list_init(&mod->sending);
    util_list_init(&mod->completed);
    /* Few answers owed per peer, so that the fuzzer reaches the budget. */
    mod->p.atomic_slots = 4;
    btl_amo_module_init(&mod->amo, &tcp_amo_hooks, mod->p.atomic_slots);
    util_list_init(&mod->resume);
    util_list_init(&mod->evicted_conns);
    mod->eps = calloc(2, sizeof(*mod->eps));
    mod->hot = calloc(2, sizeof(*mod->hot));
    mod->same_host = calloc(2, sizeof(*mod->same_host));
    FX_ABORT_UNLESS(mod->eps && mod->hot && mod->same_host);
    tcp_regtab_t *tab = NULL;
    FX_ABORT_UNLESS(tcp_regtab_create(mod->p.reg_slots, &tab) == FERRY_OK);
    tcp_regtab_attach(tab, mod);
    tcp_regtab_release(tab); /* the module's reference keeps it */
    /* The job and its key, fixed. */
    mod->job_id = "fuzz-job";
    mod->job_hash = tcp_job_hash(mod->job_id);
    memset(mod->jobkey, 0x4b, sizeof(mod->jobkey));
    mod->have_jobkey = true;
    FX_ABORT_UNLESS(btl_base_register_am(&mod->super, FX_TAG, fx_on_msg, f) == FERRY_OK);
    memset(f->mem, FX_GUARD_BYTE, sizeof(f->mem));
    for (size_t i = 0; i < FX_ZONE; i++)
        fx_zone(f, 1)[i] = (unsigned char)(i * 13u + 5u);
    FX_ABORT_UNLESS(tcp_register_mem(&mod->super, NULL, fx_zone(f, 0), FX_ZONE,
                                     FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE |
                                         FERRY_ACCESS_REMOTE_ATOMIC,
                                     &f->rw) == FERRY_OK);
    FX_ABORT_UNLESS(tcp_register_mem(&mod->super, NULL, fx_zone(f, 1), FX_ZONE,
                                     FERRY_ACCESS_REMOTE_READ, &f->ro) == FERRY_OK);
    f->ep = tcp_ep_get(mod, 1);
    FX_ABORT_UNLESS(f->ep != NULL);
}

/* The peer connected, with puts and gets of ours waiting for their answer
 * (cookies 1.., a put first, then alternating). */
static inline void fx_connect(fx_t *f)
{
    ferry_btl_endpoint_t *ep = f->ep;
    ep->rx_cap = 2 * (sizeof(tcp_hdr_t) + TCP_BIG_FRAME) + TCP_LOOKAHEAD;
    ep->rx = malloc(ep->rx_cap);
    FX_ABORT_UNLESS(ep->rx != NULL);
    ep->rx_mode = TCP_RX_FRAMES;
    ep->state = TCP_EP_CONNECTED;
    tcp_hot_add(f->mod, ep);
    for (int i = 0; i < FX_PENDING; i++) {
        btl_frag_t *fr = &f->req[i];
        fr->op = (i & 1) ? TCP_OP_GET : TCP_OP_PUT;
        fr->ep = ep;
        fr->cookie = (uint64_t)i + 1;
        fr->segs[0].addr = (uint64_t)(uintptr_t)f->get_buf[i];
        fr->segs[0].len = FX_GET_LEN;
        fr->base.dst = &fr->segs[0];
        fr->base.dst_cnt = 1;
        fr->base.src = &fr->segs[1];
        fr->base.src_cnt = 1;
        fr->segs[1].len = FX_GET_LEN;
        util_list_append(&ep->rdma_wait, &fr->link);
        ep->rdma_inflight++;
        if (fr->op == TCP_OP_GET)
            ep->get_inflight_bytes += FX_GET_LEN;
    }
}

/* The guard bytes around both zones are untouched, and the read-only zone
 * too. */
static inline void fx_check_memory(fx_t *f)
{
    for (int z = 0; z < 2; z++)
        for (size_t i = 0; i < FX_GUARD; i++) {
            FX_ABORT_UNLESS(f->mem[z][i] == FX_GUARD_BYTE);
            FX_ABORT_UNLESS(f->mem[z][FX_GUARD + FX_ZONE + i] == FX_GUARD_BYTE);
        }
    for (size_t i = 0; i < FX_ZONE; i++)
        FX_ABORT_UNLESS(fx_zone(f, 1)[i] == (unsigned char)(i * 13u + 5u));
}

/* Every completion handed over has a status ferry knows, and each of our
 * requests completed at most once. */
static inline void fx_check_completions(fx_t *f)
{
    int seen[FX_PENDING] = {0};
    for (util_list_item_t *it = util_list_first(&f->mod->completed); it != NULL;
         it = util_list_next(&f->mod->completed, it)) {
        btl_frag_t *fr = UTIL_CONTAINER_OF(it, btl_frag_t, link);
        FX_ABORT_UNLESS(fr >= f->req && fr < f->req + FX_PENDING);
        FX_ABORT_UNLESS(fr->status <= 0 && fr->status > FERRY_ERR_LAST);
        FX_ABORT_UNLESS(seen[fr - f->req]++ == 0);
    }
}

static inline void fx_fini(fx_t *f)
{
    tcp_module_t *mod = f->mod;
    mod->finalizing = true;
    tcp_ep_fail(mod, f->ep, FERRY_ERR_UNREACH, "end of input");
    fx_check_completions(f);
    util_list_init(&mod->completed);
    while (!util_list_empty(&mod->conns))
        tcp_conn_close(mod, UTIL_CONTAINER_OF(util_list_first(&mod->conns), tcp_conn_t, link));
    tcp_ep_free(mod, f->ep);
    mod->eps[1] = NULL;
    FX_ABORT_UNLESS(tcp_deregister_mem(&mod->super, f->rw) == FERRY_OK);
    FX_ABORT_UNLESS(tcp_deregister_mem(&mod->super, f->ro) == FERRY_OK);
    free(mod->eps);
    free(mod->hot);
    free(mod->same_host);
    tcp_regtab_detach(mod->tab, mod);
    btl_base_reports_fini(&mod->super);
    free(mod);
}

#endif /* TESTS_TCP_FUZZ_TCP_FIXTURE_H */
