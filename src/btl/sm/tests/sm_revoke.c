/*
 * Revocation on sm's ring path (cross-memory attach refused: FERRY_SM_CMA=0),
 * tried as an attacker would. Rank 0 is the target, rank 1 the initiator.
 *
 * usage (under ferryrun -n 2 -x FERRY_SM_CMA=0): sm_revoke CASE
 *   put        rank 0 deregisters a buffer after rank 1's put has passed
 *              rank 1's own check and sits in rank 0's ring: the put must
 *              complete with FERRY_ERR_ACCESS at rank 1 and leave the buffer
 *              untouched.
 *   get        rank 0 deregisters and unmaps a buffer while it is answering a
 *              large get: rank 0 must survive, the get must fail with
 *              FERRY_ERR_ACCESS.
 *   unmap-put  rank 0 unmaps a registered buffer without deregistering it
 *   unmap-get  after rank 1's put (or get) reached its ring: refused, no crash.
 *   guess      rank 1 gets from a registration rank 0 never shared, with a key
 *              made of the slot and generation it reads in rank 0's table:
 *              refused, and not one byte of the secret arrives.
 * A second argument "nopvm" makes the kernel refuse process_vm_readv/writev
 * to both ranks (a seccomp filter, as container runtimes install), so the
 * target cannot use them on itself either.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <ferry/ferry.h>

#include "unit/btl_rdma.h"
#include "unit/check.h"
#include "sm_pair.h"
#include "btl/sm/sm.h"

#define TAG_INFO 30
#define TAG_DONE 31
#define PUT_LEN 4096
#define BUF_LEN (32u << 20)
#define SECRET "the target's secret, never shared"

typedef struct info {
    uint64_t addr;
    uint64_t len;
    uint8_t key[FERRY_BTL_KEY_MAX];
} info_t;

typedef struct state {
    bool have_info;
    info_t info;
    bool done;
    int done_status;
} state_t;

typedef struct op {
    bool done;
    int status;
} op_t;

static void on_info(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    CHECK(len == sizeof(info_t));
    memcpy(&st->info, data, sizeof(info_t));
    st->have_info = true;
}

static void on_done(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    CHECK(len == sizeof(int));
    memcpy(&st->done_status, data, sizeof(int));
    st->done = true;
}

static void on_comp(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                    int status)
{
    op_t *op = des->cbdata;
    op->status = status;
    op->done = true;
}

static void send_retry(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *data, size_t len)
{
    int rc;
    while ((rc = ferry_am_send(ctx, dst, tag, data, len)) == FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    CHECK(rc == FERRY_OK);
}

/* A put or get straight through the transport, so that nothing above it
 * checks or splits. Returns the completion status. */
static int rdma(ferry_ctx_t *ctx, ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, bool put,
                void *local, size_t len, uint64_t raddr, const uint8_t *key)
{
    ferry_btl_desc_t *des = test_rdma_desc(btl, ep, put, local, len, raddr, key);
    op_t op = {false, 0};
    des->cbfunc = on_comp;
    des->cbdata = &op;
    int rc = put ? btl->ops->put(btl, ep, des) : btl->ops->get(btl, ep, des);
    if (rc != FERRY_OK) {
        btl->ops->free(btl, des);
        return rc;
    }
    while (!op.done)
        CHECK(ferry_progress(ctx) >= 0);
    btl->ops->free(btl, des);
    return op.status;
}

/* The type of the next message from ep waiting in our ring, without taking
 * it; 0 while there is none. */
static int next_type(ferry_btl_endpoint_t *ep, uint64_t *pos_out)
{
    uint64_t ring = ep->mod->p.ring_size;
    uint64_t pos = ep->rpos;
    for (int i = 0; i < 2; i++) {
        uint64_t off = pos & (ring - 1);
        uint64_t h = atomic_load_explicit((_Atomic uint64_t *)(void *)(ep->in->ring + off),
                                          memory_order_acquire);
        if ((uint16_t)(h >> 48) != sm_lap(pos, ring))
            return 0;
        int type = (int)(uint8_t)(h >> 40);
        if (type != SM_T_SKIP) {
            *pos_out = pos;
            return type;
        }
        pos += ring - off;
    }
    return 0;
}

static void target(ferry_ctx_t *ctx, ferry_btl_module_t *btl, state_t *st, const char *what)
{
    ferry_btl_endpoint_t *ep = ctx->peers[1].ep;
    bool is_get = strcmp(what, "get") == 0 || strcmp(what, "unmap-get") == 0;
    bool unmap_only = strncmp(what, "unmap-", 6) == 0;
    size_t len = is_get ? BUF_LEN : PUT_LEN * 4;
    unsigned char *buf =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(buf != MAP_FAILED);
    memset(buf, 0x5a, len);
    ferry_btl_reg_t *reg = NULL, *secret_reg = NULL;
    CHECK(btl->ops->register_mem(btl, NULL, buf, len,
                                 FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE,
                                 &reg) == FERRY_OK);
    static char secret[4096] = SECRET;
    CHECK(btl->ops->register_mem(btl, NULL, secret, sizeof(secret), FERRY_ACCESS_REMOTE_READ,
                                 &secret_reg) == FERRY_OK);
    info_t info = {.addr = (uint64_t)(uintptr_t)buf, .len = len};
    memcpy(info.key, reg->key, btl->attr.reg_handle_size);
    send_retry(ctx, 1, TAG_INFO, &info, sizeof(info));

    bool mapped = true;
    if (strcmp(what, "guess") != 0) {
        /* Wait, without progress, for the request to sit in our ring: the
         * initiator has checked the key by now. */
        int want = is_get ? SM_T_GET_REQ : SM_T_PUT;
        uint64_t pos = 0;
        int type;
        while ((type = next_type(ep, &pos)) != want)
            CHECK(type == 0);
        if (is_get && !unmap_only) {
            /* Take the request and answer its first chunks. */
            while (ep->rpos <= pos)
                CHECK(ferry_progress(ctx) >= 0);
            CHECK(ferry_progress(ctx) >= 0);
        }
        if (!unmap_only) {
            CHECK(btl->ops->deregister_mem(btl, reg) == FERRY_OK);
            reg = NULL;
        }
        if (is_get || unmap_only) {
            CHECK(munmap(buf, len) == 0);
            mapped = false;
        }
        printf("rank 0: %s while rank 1's %s was in flight\n",
               unmap_only ? "unmapped the buffer without deregistering it"
                          : mapped ? "deregistered the buffer"
                                   : "deregistered and unmapped the buffer",
               is_get ? "get" : "put");
    }
    while (!st->done)
        CHECK(ferry_progress(ctx) >= 0);
    if (mapped) {
        for (size_t i = 0; i < len; i++)
            CHECK(buf[i] == 0x5a);
        printf("rank 0: the buffer is untouched\n");
    }
    printf("rank 0: survived; rank 1 saw %s\n", ferry_strerror(st->done_status));
    if (reg != NULL)
        CHECK(btl->ops->deregister_mem(btl, reg) == FERRY_OK);
    CHECK(btl->ops->deregister_mem(btl, secret_reg) == FERRY_OK);
    if (mapped)
        munmap(buf, len);
}

/* A key for some live registration of rank 0 other than the one it shared,
 * made from its table: slot and generation, nothing else. */
static bool guess_key(ferry_btl_endpoint_t *ep, const info_t *shared, uint64_t *addr_out,
                      uint8_t *key_out)
{
    const sm_seg_hdr_t *h = ep->peer_hdr;
    const sm_reg_entry_t *table = (const sm_reg_entry_t *)(ep->peer_base + h->reg_off);
    for (uint32_t s = 0; s < h->reg_slots; s++) {
        uint32_t gen = atomic_load(&table[s].gen);
        if (gen == 0 || (gen & 1) || table[s].base == shared->addr ||
            !(table[s].access & FERRY_ACCESS_REMOTE_READ))
            continue;
        sm_key_t k;
        memset(&k, 0, sizeof(k));
        k.slot = s;
        k.gen = gen;
        memset(key_out, 0, FERRY_BTL_KEY_MAX);
        memcpy(key_out, &k, sizeof(k));
        *addr_out = table[s].base;
        return true;
    }
    return false;
}

static void initiator(ferry_ctx_t *ctx, ferry_btl_module_t *btl, state_t *st, const char *what)
{
    ferry_btl_endpoint_t *ep = ctx->peers[0].ep;
    while (!st->have_info)
        CHECK(ferry_progress(ctx) >= 0);
    int status;
    if (strcmp(what, "guess") == 0) {
        uint64_t addr;
        uint8_t key[FERRY_BTL_KEY_MAX];
        CHECK(guess_key(ep, &st->info, &addr, key));
        char got[64];
        memset(got, 0, sizeof(got));
        status = rdma(ctx, btl, ep, false, got, sizeof(got), addr, key);
        CHECK(strstr(got, "secret") == NULL);
    } else if (strcmp(what, "get") == 0 || strcmp(what, "unmap-get") == 0) {
        unsigned char *local = malloc(st->info.len);
        CHECK(local != NULL);
        status = rdma(ctx, btl, ep, false, local, st->info.len, st->info.addr, st->info.key);
        free(local);
    } else {
        unsigned char local[PUT_LEN];
        memset(local, 0xa5, sizeof(local));
        status = rdma(ctx, btl, ep, true, local, sizeof(local), st->info.addr + PUT_LEN,
                      st->info.key);
    }
    printf("rank 1: %s: %s\n", what, ferry_strerror(status));
    send_retry(ctx, 0, TAG_DONE, &status, sizeof(status));
    CHECK(status == FERRY_ERR_ACCESS);
}

/* process_vm_readv and process_vm_writev fail with EPERM from now on. */
static void refuse_pvm(void)
{
    struct sock_filter prog[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    };
    struct sock_fprog fprog = {.len = sizeof(prog) / sizeof(prog[0]), .filter = prog};
    CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
    CHECK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) == 0);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2 || (argc == 3 && strcmp(argv[2], "nopvm") == 0));
    const char *what = argv[1];
    if (argc == 3)
        refuse_pvm();
    CHECK(strcmp(what, "put") == 0 || strcmp(what, "get") == 0 ||
          strcmp(what, "unmap-put") == 0 || strcmp(what, "unmap-get") == 0 ||
          strcmp(what, "guess") == 0);
    ferry_ctx_t *ctx;
    state_t st = {.have_info = false};
    ferry_btl_module_t *btl = sm_pair_init(&ctx);
    int me = ferry_rank(ctx);
    CHECK(ferry_am_register(ctx, TAG_INFO, on_info, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_DONE, on_done, &st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (me == 0)
        target(ctx, btl, &st, what);
    else
        initiator(ctx, btl, &st, what);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    return 0;
}
