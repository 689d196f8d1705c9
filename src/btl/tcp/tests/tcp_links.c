/*
 * Several tcp modules per process: `tcp_links COUNT [or-skip]` under
 * ferryrun, any number of ranks, with FERRY_TCP_LINKS or FERRY_TCP_MODULES
 * set.
 *
 * Each rank checks that it opened COUNT tcp modules (0: any number, at
 * least one; with or-skip, at least COUNT, and fewer is a skip: the host
 * has fewer addresses than the run asks for), then that its remote key holds every module's key
 * with all the tcp modules in one entry (they share their registrations, so
 * their keys are the same bytes), and then, through each tcp module that
 * reaches a peer (the context keeps one path per peer and polls that one
 * only, so this program progresses every tcp module itself):
 * - sends the peer a message on that module, which the peer checks arrives
 *   on the module that pairs with the sender's and names the sender: with
 *   FERRY_TCP_MODULES=one its module of the same index; per interface one
 *   on the sender's module's subnet (checked here with the addresses the
 *   modules listen on, not with the transport's rule), of the same link,
 *   for loopback only on one host; it prints each arrival
 *   ("rank R's module K (ADDR link L) arrived on module J (ADDR link L)");
 * - puts a pattern into the peer's memory, through the key the module finds
 *   in the peer's remote key, and gets it back.
 * Each rank then checks that every module that reaches a peer got exactly
 * one message from it, and that every peer's module wrote its own slot.
 * Every module must reach every peer: with per-interface on one host
 * (loopback and the host's own addresses share a subnet), or across hosts
 * that share all their subnets with as many links.
 *
 * Prints "tcp_links: ok" from every rank on success; exits 1 on a failed
 * check and 77 (skipped) with one rank, without tcp, or (or-skip) with
 * fewer tcp modules than COUNT.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include <arpa/inet.h>

#include "api/rkey.h"
#include "btl/ctx.h"
#include "btl/tcp/tcp.h"
#include "rkey_layout.h"
#include "unit/check.h"

#define TAG_PROBE 50 /* sent on one tcp module directly */
#define TAG_KEY 51   /* the rank's remote key, through the context */
#define TAG_DONE 52  /* every operation of the sender has completed */
#define SLOT 512
#define MAX_MODS 256

typedef struct probe_msg {
    int32_t from;
    int32_t module; /* the sender's tcp module (ordinal among tcp modules) */
    int32_t link;   /* its link */
    int32_t per_interface;
    tcp_addr_entry_t addr; /* per interface: the address it listens on */
} probe_msg_t;

typedef struct key_msg {
    ferry_rkey_t rkey;
    uint64_t base;
} key_msg_t;

typedef struct state {
    ferry_ctx_t *ctx;
    int rank, size;
    int ntcp;
    int tcp_idx[MAX_MODS]; /* tcp module ordinal -> index in ctx->modules */
    int *probes;           /* [from * ntcp + module] received */
    key_msg_t *keys;       /* by rank */
    bool *have_key;
    int done;
    bool comp_done;
    int comp_status;
} state_t;

static state_t st;

static int ordinal_of(const ferry_btl_module_t *btl)
{
    for (int k = 0; k < st.ntcp; k++)
        if (st.ctx->modules[st.tcp_idx[k]] == btl)
            return k;
    return -1;
}

static const tcp_module_t *tcp_mod(const ferry_btl_module_t *btl)
{
    return (const tcp_module_t *)btl;
}

static void addr_text(const tcp_addr_entry_t *a, char *buf, size_t size)
{
    if (inet_ntop(a->family == 4 ? AF_INET : AF_INET6, a->addr, buf, (socklen_t)size) == NULL)
        snprintf(buf, size, "?");
}

static bool loopback(const tcp_addr_entry_t *a)
{
    static const uint8_t v6lo[16] = {[15] = 1};
    return a->family == 4 ? a->addr[0] == 127 : memcmp(a->addr, v6lo, 16) == 0;
}

/* Whether the first bits bits of a and b agree. */
static bool bits_agree(const uint8_t *a, const uint8_t *b, unsigned bits)
{
    for (unsigned i = 0; i < bits; i++)
        if (((a[i / 8] >> (7 - i % 8)) & 1) != ((b[i / 8] >> (7 - i % 8)) & 1))
            return false;
    return true;
}

/* The pairing rule as README.md states it: the same family; loopback with
 * loopback on one host; else one subnet, over the shorter prefix. */
static bool same_net(const tcp_addr_entry_t *a, const tcp_addr_entry_t *b, bool same_host)
{
    if (a->family != b->family || loopback(a) != loopback(b))
        return false;
    if (loopback(a))
        return same_host;
    return bits_agree(a->addr, b->addr, a->prefix < b->prefix ? a->prefix : b->prefix);
}

static void on_probe(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, void *cbdata)
{
    (void)cbdata;
    probe_msg_t m;
    CHECK(rd->seg_cnt == 1 && rd->segs[0].len == sizeof(m));
    memcpy(&m, ferry_btl_seg_ptr(&rd->segs[0]), sizeof(m));
    int k = ordinal_of(btl);
    bool bad = k < 0 || m.from != rd->peer || m.from < 0 || m.from >= st.size;
    const tcp_module_t *mod = k >= 0 ? tcp_mod(btl) : NULL;
    char theirs[64] = "", ours[64] = "";
    if (!bad && mod->p.per_interface) {
        bad = !m.per_interface || mod->nlocal < 1 || m.link != mod->link ||
              !same_net(&m.addr, &mod->local[0], st.ctx->peers[m.from].same_host);
        addr_text(&m.addr, theirs, sizeof(theirs));
        if (mod->nlocal > 0)
            addr_text(&mod->local[0], ours, sizeof(ours));
        printf("tcp_links: rank %d: rank %d's module %d (%s link %d) arrived on module %d "
               "(%s link %d)\n",
               st.rank, m.from, m.module, theirs, m.link, k, ours, mod->link);
    } else if (!bad) {
        bad = m.per_interface || m.module != k;
    }
    if (bad) {
        fprintf(stderr,
                "rank %d: probe from rank %d (says %d, module %d %s link %d) arrived on tcp "
                "module %d (%s)\n",
                st.rank, rd->peer, m.from, m.module, theirs, m.link, k, ours);
        exit(1);
    }
    st.probes[m.from * st.ntcp + k]++;
}

static void on_key(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)tag, (void)arg;
    CHECK(len == sizeof(key_msg_t) && src >= 0 && src < st.size);
    memcpy(&st.keys[src], data, sizeof(key_msg_t));
    st.have_key[src] = true;
}

static void on_done(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)data, (void)len, (void)arg;
    st.done++;
}

static void on_rdma(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                    int status)
{
    (void)btl, (void)ep, (void)des;
    st.comp_status = status;
    st.comp_done = true;
}

/* Progresses the context and every tcp module (the context polls only the
 * modules it chose). */
static void step(void)
{
    CHECK(ferry_progress(st.ctx) >= 0);
    for (int k = 0; k < st.ntcp; k++) {
        ferry_btl_module_t *btl = st.ctx->modules[st.tcp_idx[k]];
        CHECK(btl->ops->progress(btl) >= 0);
    }
}

static void send_ctx(int dst, int tag, const void *data, size_t len)
{
    int rc;
    while ((rc = ferry_am_send(st.ctx, dst, tag, data, len)) == FERRY_ERR_NO_RESOURCE)
        step();
    if (rc != FERRY_OK) {
        fprintf(stderr, "rank %d: ferry_am_send to rank %d: %s\n", st.rank, dst,
                ferry_strerror(rc));
        exit(1);
    }
}

static unsigned char pattern(int writer, int module, size_t i)
{
    return (unsigned char)(writer * 31 + module * 7 + (int)i + 1);
}

/* One put (is_put) or get of SLOT bytes through tcp module k to peer. */
static int rdma(int k, int peer, bool is_put, unsigned char *local, uint64_t raddr)
{
    int m = st.tcp_idx[k];
    ferry_btl_module_t *btl = st.ctx->modules[m];
    ferry_btl_endpoint_t *ep = st.ctx->peers[peer].eps[m];
    uint8_t key[FERRY_BTL_KEY_MAX] = {0};
    CHECK(api_rkey_resolve(st.ctx, m, peer, &st.keys[peer].rkey, raddr, SLOT,
                           is_put ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ,
                           key) == FERRY_OK);
    ferry_convertor_t conv;
    ferry_btl_desc_t *des = NULL;
    int rc;
    for (;;) {
        size_t sz = SLOT;
        ferry_convertor_init_contig(&conv, local, SLOT);
        rc = is_put ? btl->ops->prepare_src(btl, ep, NULL, &conv, 0, &sz, FERRY_BTL_PREP_RDMA, &des)
                    : btl->ops->prepare_dst(btl, ep, NULL, &conv, 0, &sz, FERRY_BTL_PREP_RDMA, &des);
        if (rc != FERRY_ERR_NO_RESOURCE)
            break;
        step();
    }
    CHECK(rc == FERRY_OK);
    /* The descriptor has room for the remote segment (btl.h). */
    ferry_btl_segment_t *rseg = is_put ? des->dst : des->src;
    CHECK(rseg != NULL);
    if (is_put)
        des->dst_cnt = 1;
    else
        des->src_cnt = 1;
    rseg->addr = raddr;
    rseg->len = SLOT;
    memcpy(rseg->key, key, sizeof(rseg->key));
    des->flags = FERRY_BTL_DES_OWNERSHIP;
    des->cbfunc = on_rdma;
    des->cbdata = NULL;
    st.comp_done = false;
    while ((rc = is_put ? btl->ops->put(btl, ep, des) : btl->ops->get(btl, ep, des)) ==
           FERRY_ERR_NO_RESOURCE)
        step();
    CHECK(rc == FERRY_OK);
    while (!st.comp_done)
        step();
    return st.comp_status;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "or-skip") != 0)) {
        fprintf(stderr, "usage: %s COUNT [or-skip] (tcp modules expected; 0: any)\n", argv[0]);
        return 2;
    }
    int want = atoi(argv[1]);
    bool or_skip = argc == 3;
    CHECK(ferry_init(NULL, &st.ctx) == FERRY_OK);
    st.rank = ferry_rank(st.ctx);
    st.size = ferry_size(st.ctx);
    if (st.size < 2) {
        printf("tcp_links: SKIP: needs 2 ranks or more, got %d\n", st.size);
        ferry_finalize(&st.ctx);
        return 77;
    }
    int nrdma = 0; /* modules with RDMA but tcp's */
    for (int m = 0; m < st.ctx->n_modules; m++) {
        const ferry_btl_module_t *btl = st.ctx->modules[m];
        if ((btl->attr.flags & (FERRY_BTL_FLAG_PUT | FERRY_BTL_FLAG_GET)) &&
            strcmp(btl->attr.name, "tcp") != 0)
            nrdma++;
        if (strcmp(btl->attr.name, "tcp") == 0 && st.ntcp < MAX_MODS)
            st.tcp_idx[st.ntcp++] = m;
    }
    if (st.ntcp == 0) {
        printf("tcp_links: SKIP: no tcp module opened (see the log)\n");
        ferry_finalize(&st.ctx);
        return 77;
    }
    printf("tcp_links: rank %d has %d tcp modules (%d modules in all)\n", st.rank, st.ntcp,
           st.ctx->n_modules);
    if (or_skip && st.ntcp < want) {
        printf("tcp_links: SKIP: %d tcp modules opened, %d wanted: this host has fewer "
               "addresses than the run asks for\n",
               st.ntcp, want);
        ferry_finalize(&st.ctx);
        return 77;
    }
    if (want > 0 && !or_skip && st.ntcp != want) {
        fprintf(stderr, "rank %d: %d tcp modules, expected %d\n", st.rank, st.ntcp, want);
        return 1;
    }
    st.probes = calloc((size_t)st.size * (size_t)st.ntcp, sizeof(*st.probes));
    st.keys = calloc((size_t)st.size, sizeof(*st.keys));
    st.have_key = calloc((size_t)st.size, sizeof(*st.have_key));
    CHECK(st.probes != NULL && st.keys != NULL && st.have_key != NULL);
    for (int k = 0; k < st.ntcp; k++) {
        ferry_btl_module_t *btl = st.ctx->modules[st.tcp_idx[k]];
        CHECK(btl->ops->register_am(btl, TAG_PROBE, on_probe, NULL) == FERRY_OK);
    }
    CHECK(ferry_am_register(st.ctx, TAG_KEY, on_key, NULL) == FERRY_OK);
    CHECK(ferry_am_register(st.ctx, TAG_DONE, on_done, NULL) == FERRY_OK);

    /* A slot for each (writer, module), exposed through every module. */
    size_t area_len = (size_t)st.size * (size_t)st.ntcp * SLOT;
    unsigned char *area = calloc(1, area_len);
    unsigned char *local = malloc(SLOT), *back = malloc(SLOT);
    CHECK(area != NULL && local != NULL && back != NULL);
    ferry_mem_t *mem = NULL;
    CHECK(ferry_mem_register(st.ctx, area, area_len,
                             FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE,
                             &mem) == FERRY_OK);
    key_msg_t mine = {.base = (uint64_t)(uintptr_t)area};
    int rc = ferry_mem_rkey(mem, &mine.rkey);
    if (rc != FERRY_OK) {
        fprintf(stderr, "rank %d: the remote key of %d modules (%d tcp) does not fit: %s\n",
                st.rank, nrdma + st.ntcp, st.ntcp, ferry_strerror(rc));
        return 1;
    }
    /* One entry for all the tcp modules, one for each other module. */
    rkey_header_t h;
    memcpy(&h, mine.rkey.bytes, sizeof(h));
    size_t off = sizeof(h);
    int tcp_entries = 0;
    for (unsigned i = 0; i < h.n_entries && off + sizeof(rkey_entry_t) <= FERRY_RKEY_SIZE; i++) {
        rkey_entry_t e;
        memcpy(&e, mine.rkey.bytes + off, sizeof(e));
        if (e.name_hash == rkey_name_hash("tcp")) {
            tcp_entries++;
            CHECK(e.first == 0 && e.count == st.ntcp);
        }
        off += sizeof(e) + e.key_len;
    }
    CHECK(tcp_entries == 1);
    CHECK(h.n_entries == nrdma + 1);
    /* Every tcp module finds the same key bytes in it. */
    uint8_t key0[FERRY_BTL_KEY_MAX], keyk[FERRY_BTL_KEY_MAX];
    CHECK(api_rkey_parse(st.ctx, st.tcp_idx[0], st.rank, &mine.rkey, &(api_rkey_header_t){0},
                         key0) == FERRY_OK);
    for (int k = 1; k < st.ntcp; k++) {
        CHECK(api_rkey_parse(st.ctx, st.tcp_idx[k], st.rank, &mine.rkey,
                             &(api_rkey_header_t){0}, keyk) == FERRY_OK);
        CHECK(memcmp(key0, keyk, sizeof(key0)) == 0);
    }
    printf("tcp_links: rank %d: a remote key holds %u entries for %d modules (%d tcp)\n",
           st.rank, (unsigned)h.n_entries, nrdma + st.ntcp, st.ntcp);
    for (int r = 0; r < st.size; r++)
        if (r != st.rank)
            send_ctx(r, TAG_KEY, &mine, sizeof(mine));
    for (int r = 0; r < st.size; r++)
        while (r != st.rank && !st.have_key[r])
            step();

    for (int r = 0; r < st.size; r++) {
        if (r == st.rank)
            continue;
        for (int k = 0; k < st.ntcp; k++) {
            int m = st.tcp_idx[k];
            ferry_btl_module_t *btl = st.ctx->modules[m];
            ferry_btl_endpoint_t *ep = st.ctx->peers[r].eps[m];
            if (ep == NULL) {
                fprintf(stderr, "rank %d: tcp module %d does not reach rank %d\n", st.rank, k, r);
                return 1;
            }
            const tcp_module_t *mod = tcp_mod(btl);
            probe_msg_t pm = {.from = st.rank,
                              .module = k,
                              .link = mod->link,
                              .per_interface = mod->p.per_interface};
            if (mod->p.per_interface && mod->nlocal > 0)
                pm.addr = mod->local[0];
            while ((rc = btl->ops->sendi(btl, ep, &pm, sizeof(pm), NULL, 0, TAG_PROBE)) ==
                   FERRY_ERR_NO_RESOURCE)
                step();
            CHECK(rc == FERRY_OK);
            uint64_t raddr = st.keys[r].base + ((uint64_t)st.rank * (uint64_t)st.ntcp +
                                                 (uint64_t)k) * SLOT;
            for (size_t i = 0; i < SLOT; i++)
                local[i] = pattern(st.rank, k, i);
            rc = rdma(k, r, true, local, raddr);
            if (rc != FERRY_OK) {
                fprintf(stderr, "rank %d: put to rank %d on tcp module %d: %s\n", st.rank, r, k,
                        ferry_strerror(rc));
                return 1;
            }
            memset(back, 0, SLOT);
            rc = rdma(k, r, false, back, raddr);
            if (rc != FERRY_OK || memcmp(back, local, SLOT) != 0) {
                fprintf(stderr, "rank %d: get from rank %d on tcp module %d: %s%s\n", st.rank,
                        r, k, ferry_strerror(rc), rc == FERRY_OK ? " (other bytes)" : "");
                return 1;
            }
        }
    }
    /* Every peer's probe on every module (each reaches every peer, checked
     * above: the peer's modules pair with all of ours), then every peer's
     * word that its puts have completed. */
    for (int w = 0; w < st.size; w++)
        for (int k = 0; k < st.ntcp; k++)
            while (w != st.rank && st.probes[w * st.ntcp + k] == 0)
                step();
    for (int r = 0; r < st.size; r++)
        if (r != st.rank)
            send_ctx(r, TAG_DONE, NULL, 0);
    while (st.done < st.size - 1)
        step();
    for (int w = 0; w < st.size; w++) {
        if (w == st.rank)
            continue;
        for (int k = 0; k < st.ntcp; k++) {
            if (st.probes[w * st.ntcp + k] != 1) {
                fprintf(stderr, "rank %d: %d probes from rank %d on tcp module %d\n", st.rank,
                        st.probes[w * st.ntcp + k], w, k);
                return 1;
            }
            const unsigned char *slot = area + ((size_t)w * (size_t)st.ntcp + (size_t)k) * SLOT;
            for (size_t i = 0; i < SLOT; i++)
                if (slot[i] != pattern(w, k, i)) {
                    fprintf(stderr, "rank %d: rank %d's put on tcp module %d differs at %zu\n",
                            st.rank, w, k, i);
                    return 1;
                }
        }
    }
    CHECK(ferry_mem_deregister(st.ctx, mem) == FERRY_OK);
    CHECK(ferry_finalize(&st.ctx) == FERRY_OK);
    printf("tcp_links: ok\n");
    free(area);
    free(local);
    free(back);
    free(st.probes);
    free(st.keys);
    free(st.have_key);
    return 0;
}
