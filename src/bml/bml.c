/*
 * The paths to each peer: rails, the primary among them, failover
 * (bml.h says what each means).
 */
#include <stdlib.h>
#include <string.h>

#include "bml/bml.h"

int bml_register_params(ferry_ctx_t *ctx)
{
    struct bml *bml = calloc(1, sizeof(*bml));
    if (bml == NULL)
        return FERRY_ERR_NO_MEMORY;
    ctx->bml = bml;
    int rc = rt_param_register_size(
        &ctx->params, "bml_stripe_min", (size_t)512 << 10, 0, SIZE_MAX,
        "Puts and gets of at least this many bytes to a peer with several rails (paths of "
        "the best class, such as several tcp links) are striped across them by bandwidth",
        &bml->stripe_min);
    if (rc != FERRY_OK)
        return rc;
    return rt_param_register_size(
        &ctx->params, "bml_stripe_frag", (size_t)256 << 10, 4096, (size_t)1 << 30,
        "The largest piece of a striped put or get that goes to one rail at a time (a "
        "transport's own piece limit is kept when smaller)",
        &bml->stripe_frag);
}

/* a before b: higher exclusivity, then lower latency, then table order. */
static bool path_before(const ferry_ctx_t *ctx, const bml_path_t *a, const bml_path_t *b)
{
    const ferry_btl_attr_t *x = &ctx->modules[a->m]->attr, *y = &ctx->modules[b->m]->attr;
    if (x->exclusivity != y->exclusivity)
        return x->exclusivity > y->exclusivity;
    if (x->latency != y->latency)
        return x->latency < y->latency;
    return a->m < b->m;
}

/* The exclusivity of rank r's rails: that of its best live path. */
static int rail_class(const ferry_ctx_t *ctx, const bml_peer_t *bp, uint32_t *excl_out)
{
    for (int i = 0; i < bp->n; i++)
        if (!bp->path[i].down) {
            *excl_out = ctx->modules[bp->path[i].m]->attr.exclusivity;
            return i;
        }
    return -1;
}

/* Counts rank r's live rails (paths of its best class). */
static void count_rails(const ferry_ctx_t *ctx, bml_peer_t *bp)
{
    uint32_t excl = 0;
    bp->n_live = 0;
    if (rail_class(ctx, bp, &excl) < 0)
        return;
    for (int i = 0; i < bp->n; i++)
        if (!bp->path[i].down && ctx->modules[bp->path[i].m]->attr.exclusivity == excl)
            bp->n_live++;
}

static bool on_path_lost(ferry_ctx_t *ctx, int rank, int m, int status, const char *msg)
{
    return bml_path_lost(ctx, rank, m, status, msg);
}

int bml_init(ferry_ctx_t *ctx)
{
    struct bml *bml = ctx->bml;
    if (bml == NULL || ctx->peers == NULL)
        return FERRY_ERR_INVALID;
    bml->peers = calloc((size_t)ctx->size, sizeof(*bml->peers));
    bml->rail_bytes = calloc((size_t)ctx->n_modules + 1, sizeof(*bml->rail_bytes));
    if (bml->peers == NULL || bml->rail_bytes == NULL)
        return FERRY_ERR_NO_MEMORY;
    for (int r = 0; r < ctx->size; r++) {
        btl_peer_t *peer = &ctx->peers[r];
        bml_peer_t *bp = &bml->peers[r];
        for (int m = 0; m < ctx->n_modules; m++) {
            if (peer->eps[m] == NULL)
                continue;
            if (bp->n == BML_MAX_PATHS) {
                rt_log(&ctx->log, RT_LOG_WARN,
                       "rank %d: more than %d paths; %s (module %d) and later ones unused", r,
                       BML_MAX_PATHS, ctx->modules[m]->attr.name, m);
                break;
            }
            /* Insertion in order: a handful of paths. */
            bml_path_t p = {.m = m, .ep = peer->eps[m], .down = false};
            int i = bp->n++;
            while (i > 0 && path_before(ctx, &p, &bp->path[i - 1])) {
                bp->path[i] = bp->path[i - 1];
                i--;
            }
            bp->path[i] = p;
        }
        count_rails(ctx, bp);
        /* btl_ctx_add_procs chose the same primary (best first): every
         * rail beside it is polled too, since traffic may be striped or
         * move over to it, and the peer may send on any of them. */
        if (bp->n_live > 1)
            for (int i = 0; i < bp->n_live; i++)
                btl_ctx_poll_module(ctx, bp->path[i].m);
        if (bp->n_live > 1)
            rt_log(&ctx->log, RT_LOG_DEBUG, "rank %d: %d rails, primary %s (module %d)", r,
                   bp->n_live, ctx->modules[bp->path[0].m]->attr.name, bp->path[0].m);
    }
    ctx->path_lost = on_path_lost;
    return FERRY_OK;
}

void bml_fini(ferry_ctx_t *ctx)
{
    if (ctx->bml == NULL)
        return;
    ctx->path_lost = NULL;
    free(ctx->bml->peers);
    free(ctx->bml->rail_bytes);
    free(ctx->bml);
    ctx->bml = NULL;
}

static bml_path_t *find_path(bml_peer_t *bp, int m)
{
    for (int i = 0; i < bp->n; i++)
        if (bp->path[i].m == m)
            return &bp->path[i];
    return NULL;
}

bool bml_path_lost(ferry_ctx_t *ctx, int r, int m, int status, const char *msg)
{
    struct bml *bml = ctx->bml;
    if (bml == NULL || bml->peers == NULL || r < 0 || r >= ctx->size)
        return false;
    btl_peer_t *peer = &ctx->peers[r];
    bml_peer_t *bp = &bml->peers[r];
    bml_path_t *lost = find_path(bp, m);
    if (lost == NULL || peer->failed)
        return false;
    if (lost->down)
        return true; /* already moved over; its transport's report comes now */
    uint32_t excl = ctx->modules[m]->attr.exclusivity;
    /* The best live path of the same class, other than this one. */
    bml_path_t *next = NULL;
    for (int i = 0; i < bp->n && next == NULL; i++)
        if (&bp->path[i] != lost && !bp->path[i].down &&
            ctx->modules[bp->path[i].m]->attr.exclusivity == excl)
            next = &bp->path[i];
    uint32_t cur = 0;
    if (next == NULL || rail_class(ctx, bp, &cur) < 0 || cur != excl)
        return false;
    lost->down = true;
    count_rails(ctx, bp);
    bml->failovers++;
    bp->failovers++;
    if (peer->module_idx == m) {
        peer->module_idx = next->m;
        peer->ep = next->ep;
    }
    btl_ctx_poll_module(ctx, next->m);
    rt_log(&ctx->log, RT_LOG_WARN,
           "rank %d: path %s (module %d) lost: %s (%s); %d rail(s) left, traffic on %s "
           "(module %d)",
           r, ctx->modules[m]->attr.name, m, msg != NULL ? msg : "", ferry_strerror(status),
           bp->n_live, ctx->modules[peer->module_idx]->attr.name, peer->module_idx);
    /* Something at once on the path that took over: if the peer itself is
     * gone, that path says so too, and the peer is failed as usual. */
    if (btl_ctx_probe(ctx, r) != FERRY_OK)
        rt_log(&ctx->log, RT_LOG_WARN, "rank %d: no probe queued after failover", r);
    return true;
}

int bml_rails(const ferry_ctx_t *ctx, int r, uint32_t need, int *ms, int max)
{
    if (ctx->bml == NULL || ctx->bml->peers == NULL)
        return 0;
    const bml_peer_t *bp = &ctx->bml->peers[r];
    uint32_t excl = 0;
    if (rail_class(ctx, bp, &excl) < 0)
        return 0;
    int n = 0;
    for (int i = 0; i < bp->n && n < max; i++) {
        const ferry_btl_attr_t *a = &ctx->modules[bp->path[i].m]->attr;
        if (!bp->path[i].down && a->exclusivity == excl && (a->flags & need) == need)
            ms[n++] = bp->path[i].m;
    }
    return n;
}

bool bml_rail_live(const ferry_ctx_t *ctx, int r, int m)
{
    if (ctx->bml == NULL || ctx->bml->peers == NULL || r < 0 || r >= ctx->size)
        return false;
    int ms[BML_MAX_PATHS];
    int n = bml_rails(ctx, r, 0, ms, BML_MAX_PATHS);
    for (int i = 0; i < n; i++)
        if (ms[i] == m)
            return true;
    return false;
}

bool bml_test_cut(ferry_ctx_t *ctx, int r, int m)
{
    if (ctx->bml == NULL || ctx->bml->peers == NULL || r < 0 || r >= ctx->size ||
        r == ctx->rank || m < 0 || m >= ctx->n_modules || ctx->peers[r].eps[m] == NULL)
        return false;
    bml_path_t *p = find_path(&ctx->bml->peers[r], m);
    if (p == NULL || p->down)
        return false;
    /* Its endpoint torn down as a broken link would leave it: what is
     * pending on it ends with FERRY_ERR_UNREACH, and the peer sees the
     * connection go. */
    if (!bml_path_lost(ctx, r, m, FERRY_ERR_UNREACH, "cut by a test"))
        return false;
    ferry_btl_module_t *btl = ctx->modules[m];
    btl->ops->del_procs(btl, 1, &ctx->peers[r].eps[m]);
    ctx->peers[r].eps[m] = NULL;
    p->ep = NULL;
    return true;
}

uint64_t bml_rail_bytes(const ferry_ctx_t *ctx, int m)
{
    if (ctx->bml == NULL || ctx->bml->rail_bytes == NULL || m < 0 || m >= ctx->n_modules)
        return 0;
    return ctx->bml->rail_bytes[m];
}
