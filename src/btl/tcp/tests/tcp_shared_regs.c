/*
 * The tcp modules of a process share one registration table:
 * `tcp_shared_regs`, two ranks under ferryrun with FERRY_BTL=self,sm,tcp
 * and FERRY_TCP_LINKS=8.
 *
 * On each rank, in the process (the table's counts, tcp.h):
 * - all eight modules point to one table;
 * - ferry_mem_register makes one registration, which all eight modules
 *   hold, and ferry_mem_deregister frees it;
 * - register_mem of one range on module 2 and then module 5 hands out one
 *   handle; a second deregistration on module 2 is refused, and the
 *   registration stays alive for module 5 only: a key looked up through
 *   module 2, or module 3 that never registered it, is refused;
 * - a registration left to finalize (modules 1 and 6) is freed by it (the
 *   ASan run's leak check).
 * Between the ranks:
 * - rank 0 registers a range on module 2 only and gives rank 1 its key:
 *   a put through module 2 lands, the same put through module 3 is
 *   refused (FERRY_ERR_ACCESS) and writes nothing;
 * - rank 0 registers REGION bytes with ferry_mem_register and rank 1 puts
 *   all of it in one put through module 7; once rank 0 sees that put being
 *   read into the region on module 7, it deregisters the memory (the
 *   registration module 0 made). The rest of the put is discarded: nothing
 *   changes in the region after the deregistration, and rank 1's put ends
 *   with FERRY_ERR_ACCESS.
 *
 * Prints "tcp_shared_regs: ok" from every rank on success; exits 1 on a
 * failed check and 77 (skipped) when not two ranks with eight tcp modules.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "api/rkey.h"
#include "btl/ctx.h"
#include "btl/tcp/tcp.h"
#include "rkey_layout.h"
#include "unit/check.h"

#define NTCP 8
#define TAG_KEYS 60 /* rank 0's keys, through the context */
#define TAG_DONE 61 /* rank 1: its puts ended, with their statuses */
#define SMALL 4096
#define REGION ((size_t)64 << 20)
#define ACCESS_RW (FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE)

typedef struct keys_msg {
    uint64_t small_base;        /* registered on module 2 only */
    uint8_t small_key[FERRY_BTL_KEY_MAX];
    ferry_rkey_t region;        /* ferry_mem_register's */
} keys_msg_t;

typedef struct done_msg {
    int32_t via2, via3, region; /* the statuses of rank 1's puts */
} done_msg_t;

static struct {
    ferry_ctx_t *ctx;
    int rank;
    int tcp_idx[NTCP];
    bool have_keys, have_done;
    keys_msg_t keys;
    done_msg_t done;
    bool comp_done;
    int comp_status;
} st;

static tcp_module_t *tcp_mod(int k)
{
    return (tcp_module_t *)st.ctx->modules[st.tcp_idx[k]];
}

static void step(void)
{
    CHECK(ferry_progress(st.ctx) >= 0);
    for (int k = 0; k < NTCP; k++)
        CHECK(tcp_mod(k)->super.ops->progress(&tcp_mod(k)->super) >= 0);
}

static void on_keys(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    CHECK(len == sizeof(st.keys));
    memcpy(&st.keys, data, sizeof(st.keys));
    st.have_keys = true;
}

static void on_done(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)arg;
    CHECK(len == sizeof(st.done));
    memcpy(&st.done, data, sizeof(st.done));
    st.have_done = true;
}

static void on_rdma(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                    int status)
{
    (void)btl, (void)ep, (void)des;
    st.comp_status = status;
    st.comp_done = true;
}

static void send_ctx(int dst, int tag, const void *data, size_t len)
{
    int rc;
    while ((rc = ferry_am_send(st.ctx, dst, tag, data, len)) == FERRY_ERR_NO_RESOURCE)
        step();
    CHECK(rc == FERRY_OK);
}

/* A put of len bytes from local to raddr under key through tcp module k to
 * rank 0; its status once it completes. */
static int put(int k, const uint8_t *key, unsigned char *local, size_t len, uint64_t raddr)
{
    ferry_btl_module_t *btl = &tcp_mod(k)->super;
    ferry_btl_endpoint_t *ep = st.ctx->peers[0].eps[st.tcp_idx[k]];
    CHECK(ep != NULL);
    ferry_convertor_t conv;
    ferry_btl_desc_t *des = NULL;
    int rc;
    for (;;) {
        size_t sz = len;
        ferry_convertor_init_contig(&conv, local, len);
        rc = btl->ops->prepare_src(btl, ep, NULL, &conv, 0, &sz, FERRY_BTL_PREP_RDMA, &des);
        if (rc != FERRY_ERR_NO_RESOURCE)
            break;
        step();
    }
    CHECK(rc == FERRY_OK && des->src[0].len == len);
    des->dst_cnt = 1;
    des->dst[0].addr = raddr;
    des->dst[0].len = len;
    memcpy(des->dst[0].key, key, sizeof(des->dst[0].key));
    des->flags = FERRY_BTL_DES_OWNERSHIP;
    des->cbfunc = on_rdma;
    st.comp_done = false;
    while ((rc = btl->ops->put(btl, ep, des)) == FERRY_ERR_NO_RESOURCE)
        step();
    CHECK(rc == FERRY_OK);
    while (!st.comp_done)
        step();
    return st.comp_status;
}

/* The checks within the process. */
static void local_checks(void)
{
    tcp_regtab_t *tab = tcp_mod(0)->tab;
    CHECK(tab != NULL);
    for (int k = 1; k < NTCP; k++)
        CHECK(tcp_mod(k)->tab == tab);

    /* ferry_mem_register: one registration, held by every module. */
    static unsigned char buf[SMALL];
    uint64_t made = tab->made;
    size_t live = tab->live;
    ferry_mem_t *mem = NULL;
    CHECK(ferry_mem_register(st.ctx, buf, sizeof(buf), ACCESS_RW, &mem) == FERRY_OK);
    CHECK(tab->made == made + 1 && tab->live == live + 1);
    ferry_rkey_t rk;
    CHECK(ferry_mem_rkey(mem, &rk) == FERRY_OK);
    size_t klen = 0;
    size_t koff = rkey_tcp_offset(&rk, &klen);
    CHECK(klen == sizeof(tcp_key_t));
    tcp_key_t key;
    memcpy(&key, rk.bytes + koff, sizeof(key));
    CHECK(tcp_reg_alive(tcp_mod(0), key.slot, key.gen));
    CHECK(tab->regs[key.slot]->nholders == NTCP);
    CHECK(ferry_mem_deregister(st.ctx, mem) == FERRY_OK);
    CHECK(tab->made == made + 1 && tab->live == live);
    CHECK(!tcp_reg_alive(tcp_mod(0), key.slot, key.gen));

    /* Module 2, then module 5: one handle. */
    ferry_btl_module_t *m2 = &tcp_mod(2)->super, *m3 = &tcp_mod(3)->super,
                       *m5 = &tcp_mod(5)->super;
    ferry_btl_reg_t *r2 = NULL, *r5 = NULL;
    CHECK(m2->ops->register_mem(m2, NULL, buf, sizeof(buf), ACCESS_RW, &r2) == FERRY_OK);
    CHECK(m5->ops->register_mem(m5, NULL, buf, sizeof(buf), ACCESS_RW, &r5) == FERRY_OK);
    CHECK(r2 == r5 && tab->made == made + 2 && tab->live == live + 1);
    /* Other rights are another registration. */
    ferry_btl_reg_t *ro = NULL;
    CHECK(m5->ops->register_mem(m5, NULL, buf, sizeof(buf), FERRY_ACCESS_REMOTE_READ, &ro) ==
          FERRY_OK);
    CHECK(ro != r5 && tab->made == made + 3);
    CHECK(m5->ops->deregister_mem(m5, ro) == FERRY_OK);
    memcpy(&key, r2->key, sizeof(key));
    CHECK(m2->ops->deregister_mem(m2, r2) == FERRY_OK);
    CHECK(m2->ops->deregister_mem(m2, r2) == FERRY_ERR_INVALID);
    CHECK(m3->ops->deregister_mem(m3, r5) == FERRY_ERR_INVALID);
    CHECK(tcp_reg_alive(tcp_mod(5), key.slot, key.gen));
    tcp_reg_t *found = NULL;
    uint64_t addr = (uint64_t)(uintptr_t)buf;
    CHECK(tcp_reg_lookup(tcp_mod(5), &key, addr, 8, FERRY_ACCESS_REMOTE_WRITE, &found) ==
          FERRY_OK);
    CHECK(tcp_reg_lookup(tcp_mod(2), &key, addr, 8, FERRY_ACCESS_REMOTE_WRITE, &found) ==
          FERRY_ERR_ACCESS);
    CHECK(tcp_reg_lookup(tcp_mod(3), &key, addr, 8, FERRY_ACCESS_REMOTE_WRITE, &found) ==
          FERRY_ERR_ACCESS);
    CHECK(m5->ops->deregister_mem(m5, r5) == FERRY_OK);
    CHECK(!tcp_reg_alive(tcp_mod(5), key.slot, key.gen) && tab->live == live);

    /* Left for finalize, on modules 1 and 6. */
    static unsigned char left[SMALL];
    ferry_btl_module_t *m1 = &tcp_mod(1)->super, *m6 = &tcp_mod(6)->super;
    ferry_btl_reg_t *l1 = NULL, *l6 = NULL;
    CHECK(m1->ops->register_mem(m1, NULL, left, sizeof(left), ACCESS_RW, &l1) == FERRY_OK);
    CHECK(m6->ops->register_mem(m6, NULL, left, sizeof(left), ACCESS_RW, &l6) == FERRY_OK);
    CHECK(l1 == l6);
    printf("tcp_shared_regs: rank %d: %d modules share one table\n", st.rank, NTCP);
}

/* Rank 0: the memory rank 1 puts into. */
static void target(void)
{
    static unsigned char small[SMALL];
    ferry_btl_module_t *m2 = &tcp_mod(2)->super;
    ferry_btl_reg_t *r2 = NULL;
    CHECK(m2->ops->register_mem(m2, NULL, small, sizeof(small), ACCESS_RW, &r2) == FERRY_OK);
    unsigned char *region = calloc(1, REGION), *snap = malloc(REGION);
    CHECK(region != NULL && snap != NULL);
    ferry_mem_t *mem = NULL;
    CHECK(ferry_mem_register(st.ctx, region, REGION, ACCESS_RW, &mem) == FERRY_OK);
    keys_msg_t km;
    memset(&km, 0, sizeof(km));
    km.small_base = (uint64_t)(uintptr_t)small;
    memcpy(km.small_key, r2->key, sizeof(km.small_key));
    CHECK(ferry_mem_rkey(mem, &km.region) == FERRY_OK);
    send_ctx(1, TAG_KEYS, &km, sizeof(km));

    /* Rank 1's big put being read into the region through module 7. */
    const ferry_btl_endpoint_t *ep = st.ctx->peers[1].eps[st.tcp_idx[7]];
    CHECK(ep != NULL);
    while (!(ep->rx_mode == TCP_RX_DIRECT && ep->rx_type == TCP_T_PUT && ep->rx_left > 0) &&
           !st.have_done)
        step();
    if (st.have_done) {
        fprintf(stderr, "rank 0: the put through module 7 ended before it was seen in flight\n");
        exit(1);
    }
    size_t to_come = ep->rx_left;
    CHECK(ferry_mem_deregister(st.ctx, mem) == FERRY_OK);
    CHECK(ep->rx_mode == TCP_RX_DISCARD);
    memcpy(snap, region, REGION);
    while (!st.have_done)
        step();
    CHECK(memcmp(snap, region, REGION) == 0);
    printf("tcp_shared_regs: rank 0: deregistered with %zu bytes of the put still to come\n",
           to_come);
    /* The put through module 2 landed, the one through module 3 did not. */
    for (size_t i = 0; i < SMALL; i++)
        CHECK(small[i] == (unsigned char)(i * 7 + 3));
    CHECK(st.done.via2 == FERRY_OK && st.done.via3 == FERRY_ERR_ACCESS &&
          st.done.region == FERRY_ERR_ACCESS);
    CHECK(m2->ops->deregister_mem(m2, r2) == FERRY_OK);
    free(region);
    free(snap);
}

/* Rank 1: puts through modules 2, 3 and 7. */
static void initiator(void)
{
    while (!st.have_keys)
        step();
    done_msg_t dm;
    unsigned char *local = malloc(REGION);
    CHECK(local != NULL);
    for (size_t i = 0; i < SMALL; i++)
        local[i] = (unsigned char)(i * 7 + 3);
    dm.via2 = put(2, st.keys.small_key, local, SMALL, st.keys.small_base);
    /* Through a module that never registered it: refused, and nothing
     * written (rank 0 checks the pattern of the first put). */
    memset(local, 0x5a, SMALL);
    dm.via3 = put(3, st.keys.small_key, local, SMALL, st.keys.small_base);
    uint8_t key[FERRY_BTL_KEY_MAX];
    rkey_header_t h;
    memcpy(&h, st.keys.region.bytes, sizeof(h));
    CHECK(api_rkey_resolve(st.ctx, st.tcp_idx[7], 0, &st.keys.region, h.base, REGION,
                           FERRY_ACCESS_REMOTE_WRITE, key) == FERRY_OK);
    memset(local, 0xa5, REGION);
    dm.region = put(7, key, local, REGION, h.base);
    printf("tcp_shared_regs: rank 1: puts via modules 2, 3, 7: %s, %s, %s\n",
           ferry_strerror(dm.via2), ferry_strerror(dm.via3), ferry_strerror(dm.region));
    send_ctx(0, TAG_DONE, &dm, sizeof(dm));
    free(local);
}

int main(void)
{
    CHECK(ferry_init(NULL, &st.ctx) == FERRY_OK);
    st.rank = ferry_rank(st.ctx);
    int ntcp = 0;
    for (int m = 0; m < st.ctx->n_modules; m++)
        if (strcmp(st.ctx->modules[m]->attr.name, "tcp") == 0) {
            if (ntcp < NTCP)
                st.tcp_idx[ntcp] = m;
            ntcp++;
        }
    if (ferry_size(st.ctx) != 2 || ntcp != NTCP) {
        printf("tcp_shared_regs: SKIP: needs 2 ranks with %d tcp modules, got %d ranks, %d "
               "tcp modules\n",
               NTCP, ferry_size(st.ctx), ntcp);
        ferry_finalize(&st.ctx);
        return 77;
    }
    CHECK(ferry_am_register(st.ctx, TAG_KEYS, on_keys, NULL) == FERRY_OK);
    CHECK(ferry_am_register(st.ctx, TAG_DONE, on_done, NULL) == FERRY_OK);
    local_checks();
    if (st.rank == 0)
        target();
    else
        initiator();
    CHECK(ferry_finalize(&st.ctx) == FERRY_OK);
    printf("tcp_shared_regs: ok\n");
    return 0;
}
