/*
 * Which of a peer's modules each of ours pairs with.
 *
 * With FERRY_TCP_MODULES=one every module listens on every address, and
 * module k pairs with the peer's module k. Per interface a module listens
 * on one address and reaches only a module of the peer's on its subnet (or,
 * for loopback, on its host), and the hosts need not select their subnets
 * in the same order: interfaces may be named differently, or listed by the
 * kernel in another order. So the modules pair by what they reach: on each
 * subnet the i-th module of the lower rank with the i-th of the higher (the
 * links of one address in order), and a module left over reaches nothing
 * of that peer's.
 *
 * Both ranks compute the pairing, each on its own, from the same bytes: the
 * addresses both processes published in the modex (a process reads its own
 * back as its peers do), whether they share a host, and which rank is the
 * lower. So the module of ours that a peer's module connects to, having
 * read the address of the module it pairs with, is the one that pairs with
 * it, and an incoming connection needs no word of which module made it
 * (one that comes to a module that pairs with none of the rank's is
 * refused, tcp_endpoint.c). tcp_module.c numbers these modules by subnet,
 * so that where the hosts select the same subnets module k pairs with
 * module k, as the layers above expect (README.md, "Modules and links").
 * A peer's addresses are untrusted: at most TCP_MAX_MODULES modules are
 * read, each through tcp_addr_decode, and each address is checked
 * (tcp_addr_usable) before it counts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "btl/tcp/tcp.h"
#include "rt/modex.h"

bool tcp_addr_usable(const tcp_addr_entry_t *e)
{
    return (e->family == 4 || e->family == 6) && e->port != 0 &&
           e->prefix <= (e->family == 4 ? 32 : 128);
}

bool tcp_addr_is_loopback(const tcp_addr_entry_t *e)
{
    static const uint8_t v6lo[16] = {[15] = 1};
    return e->family == 4 ? e->addr[0] == 127 : memcmp(e->addr, v6lo, 16) == 0;
}

bool tcp_addr_same_subnet(const tcp_addr_entry_t *a, const tcp_addr_entry_t *b,
                          unsigned prefix)
{
    if (a->family != b->family)
        return false;
    unsigned max = a->family == 4 ? 32 : 128;
    if (prefix > max)
        prefix = max;
    unsigned full = prefix / 8, rest = prefix % 8;
    if (memcmp(a->addr, b->addr, full) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xffu << (8 - rest));
    return (a->addr[full] & mask) == (b->addr[full] & mask);
}

bool tcp_addr_reaches(const tcp_addr_entry_t *a, const tcp_addr_entry_t *b, bool same_host)
{
    if (a->family != b->family || tcp_addr_is_loopback(a) != tcp_addr_is_loopback(b))
        return false;
    if (tcp_addr_is_loopback(a))
        return same_host;
    return tcp_addr_same_subnet(a, b, a->prefix < b->prefix ? a->prefix : b->prefix);
}

void tcp_modex_key(int index, char key_out[TCP_MODEX_KEY_LEN])
{
    if (index == 0)
        snprintf(key_out, TCP_MODEX_KEY_LEN, "btl.tcp");
    else
        snprintf(key_out, TCP_MODEX_KEY_LEN, "btl.tcp.%d", index);
}

/* ---- the rule ---- */

/* Whether any usable address of x reaches any usable address of y. */
static bool modules_reach(const tcp_addr_blob_t *x, const tcp_addr_blob_t *y, bool same_host)
{
    int nx = x->count < TCP_MAX_ADDRS ? x->count : TCP_MAX_ADDRS;
    int ny = y->count < TCP_MAX_ADDRS ? y->count : TCP_MAX_ADDRS;
    for (int i = 0; i < nx; i++) {
        if (!tcp_addr_usable(&x->entry[i]))
            continue;
        for (int j = 0; j < ny; j++)
            if (tcp_addr_usable(&y->entry[j]) &&
                tcp_addr_reaches(&x->entry[i], &y->entry[j], same_host))
                return true;
    }
    return false;
}

static int side_count(const tcp_pair_side_t *s)
{
    if (s->mods == NULL || s->nmods < 0)
        return 0;
    return s->nmods < TCP_MAX_MODULES ? s->nmods : TCP_MAX_MODULES;
}

void tcp_pair_match(const tcp_pair_side_t *lo, const tcp_pair_side_t *hi, bool same_host,
                    int16_t *lo_out, int16_t *hi_out)
{
    int nlo = side_count(lo), nhi = side_count(hi);
    for (int i = 0; i < nlo; i++)
        lo_out[i] = -1;
    for (int j = 0; j < nhi; j++)
        hi_out[j] = -1;
    /* Where reaching is sharing a subnet, the modules of one subnet reach
     * each other and no others: the first free one of hi's on lo's module's
     * subnet is, by induction, the one in the same place on it. Where
     * prefixes make it lopsided (10.1.0.0/16 against 10.1.2.0/24 and
     * 10.1.3.0/24), the rule is still one both ranks compute alike, since
     * it is always driven from the lower rank's side. */
    for (int i = 0; i < nlo; i++)
        for (int j = 0; j < nhi; j++)
            if (hi_out[j] < 0 && modules_reach(&lo->mods[i], &hi->mods[j], same_host)) {
                lo_out[i] = (int16_t)j;
                hi_out[j] = (int16_t)i;
                break;
            }
}

/* ---- the pairing with each peer, kept ---- */

struct tcp_pairs {
    unsigned refs;           /* modules attached, and tcp_open while it runs */
    int nranks;
    int nmods;               /* this process's tcp modules */
    int own_n;               /* of ours, read back from the modex; -1: not yet */
    tcp_addr_blob_t *own;    /* [TCP_MAX_MODULES] */
    tcp_addr_blob_t *peer;   /* [TCP_MAX_MODULES], scratch for one peer's */
    int16_t *partner;        /* [nranks * nmods]: the peer's module, -1 for none */
    uint8_t *done;           /* [nranks]: 0 not computed, else 1 + same_host it was for */
    bool warned_crossed;     /* a pairing out of index order was logged */
};

int tcp_pairs_create(int nranks, int nmods, tcp_pairs_t **pairs_out)
{
    if (nranks < 1 || nmods < 1 || nmods > TCP_MAX_MODULES)
        return FERRY_ERR_INVALID;
    tcp_pairs_t *pp = calloc(1, sizeof(*pp));
    if (pp == NULL)
        return FERRY_ERR_NO_MEMORY;
    pp->refs = 1;
    pp->nranks = nranks;
    pp->nmods = nmods;
    pp->own_n = -1;
    pp->own = calloc(TCP_MAX_MODULES, sizeof(*pp->own));
    pp->peer = calloc(TCP_MAX_MODULES, sizeof(*pp->peer));
    pp->partner = calloc((size_t)nranks * (size_t)nmods, sizeof(*pp->partner));
    pp->done = calloc((size_t)nranks, sizeof(*pp->done));
    if (pp->own == NULL || pp->peer == NULL || pp->partner == NULL || pp->done == NULL) {
        tcp_pairs_release(pp);
        return FERRY_ERR_NO_MEMORY;
    }
    *pairs_out = pp;
    return FERRY_OK;
}

void tcp_pairs_attach(tcp_pairs_t *pairs, tcp_module_t *mod)
{
    pairs->refs++;
    mod->pairs = pairs;
}

void tcp_pairs_release(tcp_pairs_t *pairs)
{
    if (pairs == NULL || --pairs->refs > 0)
        return;
    free(pairs->own);
    free(pairs->peer);
    free(pairs->partner);
    free(pairs->done);
    free(pairs);
}

/* The modules rank published, in order, into blobs: up to the first index
 * with no key (or TCP_MAX_MODULES). A module whose address does not decode
 * is kept with none, so the indices of those after it stay theirs. */
static int read_side(tcp_module_t *mod, int rank, tcp_addr_blob_t *blobs)
{
    rt_modex_t *mx = mod->super.ctx->modex;
    int n = 0;
    for (; n < TCP_MAX_MODULES; n++) {
        char key[TCP_MODEX_KEY_LEN];
        tcp_modex_key(n, key);
        void *val = NULL;
        size_t len = 0;
        if (rt_modex_get(mx, rank, key, &val, &len) != FERRY_OK)
            break;
        if (tcp_addr_decode(val, len, &blobs[n]) != FERRY_OK) {
            rt_log(&mod->super.ctx->log, RT_LOG_ERROR,
                   "tcp: rank %d published a malformed address (%s)", rank, key);
            memset(&blobs[n], 0, sizeof(blobs[n]));
        }
        free(val);
    }
    return n;
}

/* Our modules' partners in rank's process, from both sides' addresses. */
static void pairs_compute(tcp_module_t *mod, tcp_pairs_t *pp, int rank, bool same_host)
{
    int me = mod->super.ctx->rank;
    int16_t *mine = &pp->partner[(size_t)rank * (size_t)pp->nmods];
    for (int k = 0; k < pp->nmods; k++)
        mine[k] = -1;
    if (pp->own_n < 0)
        pp->own_n = read_side(mod, me, pp->own);
    int peer_n = read_side(mod, rank, pp->peer);
    tcp_pair_side_t own = {.nmods = pp->own_n, .mods = pp->own};
    tcp_pair_side_t peer = {.nmods = peer_n, .mods = pp->peer};
    int16_t ours[TCP_MAX_MODULES], theirs[TCP_MAX_MODULES];
    if (me < rank)
        tcp_pair_match(&own, &peer, same_host, ours, theirs);
    else
        tcp_pair_match(&peer, &own, same_host, theirs, ours);
    int n = pp->own_n < pp->nmods ? pp->own_n : pp->nmods;
    char text[256];
    size_t off = 0;
    text[0] = '\0';
    int crossed = -1;
    for (int k = 0; k < n; k++) {
        mine[k] = ours[k];
        if (ours[k] >= 0 && ours[k] != k && crossed < 0)
            crossed = k;
        if (ours[k] >= 0 && off < sizeof(text)) {
            int w = snprintf(text + off, sizeof(text) - off, " %d-%d", k, ours[k]);
            off += w > 0 ? (size_t)w : 0;
        }
    }
    rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
           "tcp: rank %d (%d modules, %s host): modules paired (ours-its):%s", rank, peer_n,
           same_host ? "this" : "another", text[0] != '\0' ? text : " none");
    /* Right either way: the BML names a lost rail, and the API a key, by
     * the peer's number (peer_instance). Said once, for whoever reads the
     * numbers in the log. */
    if (crossed >= 0 && !pp->warned_crossed) {
        pp->warned_crossed = true;
        rt_log(&mod->super.ctx->log, RT_LOG_INFO,
               "tcp: module %d pairs with rank %d's module %d (the hosts number their "
               "per-interface modules differently)",
               crossed, rank, ours[crossed]);
    }
}

int tcp_pair_partner(tcp_module_t *mod, int rank)
{
    if (!mod->p.per_interface)
        return mod->index;
    tcp_pairs_t *pp = mod->pairs;
    if (pp == NULL || rank < 0 || rank >= pp->nranks || rank == mod->super.ctx->rank ||
        mod->index < 0 || mod->index >= pp->nmods)
        return -1;
    /* Loopback pairs only on one host: a pairing is for the same_host
     * add_procs said (one made before, by a connection that came first, is
     * made again). */
    bool same_host = mod->same_host != NULL && mod->same_host[rank];
    uint8_t want = same_host ? 2 : 1;
    if (pp->done[rank] != want) {
        pairs_compute(mod, pp, rank, same_host);
        pp->done[rank] = want;
    }
    return pp->partner[(size_t)rank * (size_t)pp->nmods + (size_t)mod->index];
}
