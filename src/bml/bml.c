/*
 * The paths to each peer: rails, the primary among them, failover
 * (bml.h says what each means).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bml/bml.h"
#include "rt/progress.h"

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
    rc = rt_param_register_size(
        &ctx->params, "bml_stripe_frag", (size_t)256 << 10, 4096, (size_t)1 << 30,
        "The largest piece of a striped put or get that goes to one rail at a time (a "
        "transport's own piece limit is kept when smaller)",
        &bml->stripe_frag);
    if (rc != FERRY_OK)
        return rc;
    rc = rt_param_register_size(
        &ctx->params, "bml_keep_max_message", (size_t)64 << 10, 4096, (size_t)1 << 30,
        "The largest active message sent whole to a peer with several rails, where each "
        "message is kept (copied) for the replay until the peer has counted it; larger "
        "ones go by rendezvous, whose data moves by put or get, striped and without a copy",
        &bml->keep_max);
    if (rc != FERRY_OK)
        return rc;
    long long ms = 0;
    rc = rt_param_register_int(
        &ctx->params, "bml_replay_timeout", 30000, 1, 24LL * 3600 * 1000,
        "Milliseconds a rank waits for a peer's count after telling it of a lost rail "
        "(the replay of active messages); then the peer is taken as failed",
        &ms);
    bml->replay_timeout_ns = (uint64_t)ms * 1000000u;
    return rc;
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

static bml_path_t *find_path(bml_peer_t *bp, int m);

/* A copy for a message of len bytes: a spare one (keep_max bytes) when len
 * is at least half that, so that a spare never holds more than twice what
 * it keeps; else from malloc. */
static bml_kept_t *kept_alloc(struct bml *bml, size_t len)
{
    if (len > bml->keep_max || len < bml->keep_max / 2) {
        bml_kept_t *k = malloc(sizeof(*k) + (len > 0 ? len : 1));
        if (k != NULL)
            k->full = false;
        return k;
    }
    bml_kept_t *k = bml->spare;
    if (k != NULL) {
        bml->spare = k->next_spare;
        bml->n_spare--;
        return k;
    }
    k = malloc(sizeof(*k) + bml->keep_max);
    if (k != NULL)
        k->full = true;
    return k;
}

static void kept_free(struct bml *bml, bml_kept_t *k)
{
    if (k != NULL && k->full && (bml->n_spare + 1) * bml->keep_max <= BML_SPARE_BYTES) {
        k->next_spare = bml->spare;
        bml->spare = k;
        bml->n_spare++;
        return;
    }
    free(k);
}

/* Frees spare copies beyond max bytes of them. */
static void spare_trim(struct bml *bml, size_t max)
{
    while (bml->spare != NULL && bml->n_spare * bml->keep_max > max) {
        bml_kept_t *k = bml->spare;
        bml->spare = k->next_spare;
        bml->n_spare--;
        free(k);
    }
}

static void drop_kept(struct bml *bml, bml_peer_t *bp)
{
    if (bp->kept != NULL)
        for (uint64_t i = bp->tx_base; i < bp->tx_seq; i++)
            kept_free(bml, bp->kept[i % BML_KEEP_MAX]);
    free(bp->kept);
    bp->kept = NULL;
    bp->keeping = false;
    bp->tx_base = bp->tx_seq = 0;
    bp->kept_bytes = 0;
}

/* Forgets the kept messages before number upto (the peer handled them). */
static void trim_kept(struct bml *bml, bml_peer_t *bp, uint64_t upto)
{
    while (bp->tx_base < upto) {
        bml_kept_t *k = bp->kept[bp->tx_base % BML_KEEP_MAX];
        bp->kept[bp->tx_base % BML_KEEP_MAX] = NULL;
        bp->kept_bytes -= k->len;
        kept_free(bml, k);
        bp->tx_base++;
    }
    if (bp->kept_bytes == 0)
        spare_trim(bml, BML_SPARE_IDLE);
}

/* Sends data on tag to dst over its current rail, with nothing kept: the BML's own messages and the replay. */
static int send_raw(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *data, size_t len)
{
    if (ctx->peers[dst].failed)
        return FERRY_ERR_UNREACH;
    return btl_ctx_send_small(ctx, dst, tag, data, len);
}

static int send_msg(ferry_ctx_t *ctx, int dst, const bml_msg_t *m)
{
    return send_raw(ctx, dst, BML_TAG, m, sizeof(*m));
}

const char *bml_msg_parse(const void *data, size_t len, bml_msg_t *out)
{
    if (len != sizeof(*out))
        return "wrong length";
    memcpy(out, data, sizeof(*out));
    if (out->magic != BML_MSG_MAGIC)
        return "not a BML message";
    if (out->zero2 != 0)
        return "a reserved field set";
    switch (out->kind) {
    case BML_MSG_ASK:
    case BML_MSG_COUNT:
        if (out->instance != 0 || out->last != 0 || out->epoch != 0 || out->name[0] != '\0')
            return "fields set that its kind does not have";
        return NULL;
    case BML_MSG_RECOUNT:
        if (out->instance != 0 || out->last != 0 || out->name[0] != '\0')
            return "fields set that its kind does not have";
        return NULL;
    case BML_MSG_LOST: {
        if (out->last > 1 || out->count != 0)
            return "a malformed loss";
        size_t n = strnlen(out->name, sizeof(out->name));
        if (n == 0 || n == sizeof(out->name))
            return "a loss naming no transport";
        for (size_t i = n; i < sizeof(out->name); i++)
            if (out->name[i] != '\0')
                return "a loss with bytes after its name";
        return NULL;
    }
    default:
        return "an unknown kind";
    }
}

static void refuse(ferry_ctx_t *ctx, int src, const char *why)
{
    rt_log_limited(&ctx->log, &ctx->bml->bad_rl, RT_LOG_WARN,
                   "BML message from rank %d dropped: %s", src, why);
}

static void violation(ferry_ctx_t *ctx, int src, const char *why)
{
    char text[160];
    snprintf(text, sizeof(text), "rank %d broke the replay protocol: %s", src, why);
    btl_ctx_fail_peer(ctx, src, FERRY_ERR_PROTO, "bml", text);
}

/* A BML message from rd->peer (the transport's word for who sent it). */
static void on_bml_msg(ferry_btl_module_t *btl, const ferry_btl_recv_desc_t *rd, void *cbdata)
{
    ferry_ctx_t *ctx = cbdata;
    (void)btl;
    unsigned char buf[sizeof(bml_msg_t) + 1];
    size_t len = 0;
    for (unsigned i = 0; i < rd->seg_cnt && len < sizeof(buf); i++) {
        size_t take = rd->segs[i].len < sizeof(buf) - len ? rd->segs[i].len : sizeof(buf) - len;
        memcpy(buf + len, ferry_btl_seg_ptr(&rd->segs[i]), take);
        len += take;
    }
    bml_recv(ctx, rd->peer, buf, len);
}

void bml_recv(ferry_ctx_t *ctx, int src, const void *buf, size_t len)
{
    if (src < 0 || src >= ctx->size || ctx->bml == NULL || ctx->bml->peers == NULL ||
        src == ctx->rank)
        return;
    bml_msg_t m;
    const char *why = bml_msg_parse(buf, len, &m);
    if (why != NULL) {
        refuse(ctx, src, why);
        return;
    }
    bml_peer_t *bp = &ctx->bml->peers[src];
    switch (m.kind) {
    case BML_MSG_ASK:
        bp->owe_count = true;
        break;
    case BML_MSG_COUNT:
        if (!bp->keeping)
            return;
        if (m.count > bp->tx_seq) {
            violation(ctx, src, "it counts more messages than were sent to it");
            return;
        }
        if (m.count > bp->tx_base)
            trim_kept(ctx->bml, bp, m.count);
        /* A replay under way need not send what the peer now says it has. */
        if (bp->replay_next < bp->tx_base)
            bp->replay_next = bp->tx_base;
        return;
    case BML_MSG_RECOUNT:
        if (!bp->keeping || bp->tx_state != BML_TX_WAIT || m.epoch != bp->epoch)
            return; /* of a round already over */
        if (m.count > bp->tx_seq || m.count < bp->tx_base) {
            violation(ctx, src, "its count after a loss is outside what was kept for it");
            return;
        }
        trim_kept(ctx->bml, bp, m.count);
        bp->replay_next = m.count;
        bp->tx_state = BML_TX_REPLAY;
        break;
    case BML_MSG_LOST: {
        int lm = btl_ctx_module_named(ctx, m.name, m.instance);
        if (lm < 0 || lm >= 64) {
            refuse(ctx, src, "a loss of a rail this process does not have");
        } else {
            /* Nothing more is taken from it: what is on it comes again. */
            bp->rx_drop |= 1ull << lm;
            bml_path_t *p = find_path(bp, lm);
            if (p != NULL && !p->down) {
                char text[96];
                snprintf(text, sizeof(text), "rank %d lost its end", src);
                bml_path_lost(ctx, src, lm, FERRY_ERR_UNREACH, text);
            }
        }
        if (m.last) {
            bp->owe_replay = true;
            bp->owe_epoch = m.epoch;
        }
        break;
    }
    }
    ctx->bml->work = true;
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
            if (m >= 64 && bp->n > 0) {
                rt_log(&ctx->log, RT_LOG_WARN,
                       "rank %d: module %d (%s) is beyond the 64 the BML tells apart; unused as "
                       "a path",
                       r, m, ctx->modules[m]->attr.name);
                continue;
            }
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
        if (bp->n > 0 && r != ctx->rank)
            rt_log(&ctx->log, RT_LOG_DEBUG, "rank %d: reached through %s (module %d), %d path(s)",
                   r, ctx->modules[bp->path[0].m]->attr.name, bp->path[0].m, bp->n);
        /* btl_ctx_add_procs chose the same primary (best first): every
         * rail beside it is polled too, since traffic may be striped or
         * move over to it, and the peer may send on any of them. */
        if (bp->n_live > 1)
            for (int i = 0; i < bp->n_live; i++)
                btl_ctx_poll_module(ctx, bp->path[i].m);
        if (bp->n_live > 1) {
            rt_log(&ctx->log, RT_LOG_DEBUG, "rank %d: %d rails, primary %s (module %d)", r,
                   bp->n_live, ctx->modules[bp->path[0].m]->attr.name, bp->path[0].m);
            bp->kept = calloc(BML_KEEP_MAX, sizeof(*bp->kept));
            if (bp->kept == NULL)
                return FERRY_ERR_NO_MEMORY;
            bp->keeping = true;
            /* What is kept must fit every rail that may replay it, and
             * costs a copy of its own: larger messages go by rendezvous,
             * whose messages are all small. */
            if (bml->keep_max < peer->max_send)
                peer->max_send = bml->keep_max;
            for (int i = 0; i < bp->n_live; i++) {
                size_t max = ctx->modules[bp->path[i].m]->attr.max_send_size;
                if (max < peer->max_send)
                    peer->max_send = max;
            }
        }
    }
    rt_ratelimit_init(&bml->bad_rl, RT_RATELIMIT_BURST, RT_RATELIMIT_INTERVAL_MS);
    for (int m = 0; m < ctx->n_modules; m++)
        ctx->modules[m]->ops->register_am(ctx->modules[m], BML_TAG, on_bml_msg, ctx);
    ctx->path_lost = on_path_lost;
    return FERRY_OK;
}

void bml_fini(ferry_ctx_t *ctx)
{
    if (ctx->bml == NULL)
        return;
    ctx->path_lost = NULL;
    for (int r = 0; ctx->bml->peers != NULL && r < ctx->size; r++)
        drop_kept(ctx->bml, &ctx->bml->peers[r]);
    spare_trim(ctx->bml, 0);
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
    uint32_t best = 0;
    if (rail_class(ctx, bp, &best) >= 0 && best > excl) {
        /* A path below the rails' class, which carries nothing while a
         * rail lives (tcp beside sm): only marked down. */
        lost->down = true;
        rt_log(&ctx->log, RT_LOG_INFO, "rank %d: path %s (module %d), not a rail, lost: %s (%s)",
               r, ctx->modules[m]->attr.name, m, msg != NULL ? msg : "",
               ferry_strerror(status));
        return true;
    }
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
    if (peer->module_idx == m) {
        peer->module_idx = next->m;
        peer->ep = next->ep;
        /* The active messages went on it: what the peer did not get goes
         * again on the new rail, once the peer has said how many it got. */
        if (bp->keeping) {
            bp->epoch++;
            bp->tx_state = BML_TX_ASK;
            bp->lost_told = 0;
            bml->work = true;
        }
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

/* ---- the replay ---- */

int bml_am_gate_slow(ferry_ctx_t *ctx, int dst)
{
    bml_peer_t *bp = &ctx->bml->peers[dst];
    if (ctx->peers[dst].failed)
        return FERRY_OK; /* the send itself says so */
    if (bp->tx_state != BML_TX_STEADY) {
        ctx->bml->work = true;
        return FERRY_ERR_NO_RESOURCE;
    }
    if (bp->tx_seq - bp->tx_base >= BML_KEEP_MAX || bp->kept_bytes >= BML_KEEP_BYTES) {
        bp->ask_count = true;
        ctx->bml->work = true;
        return FERRY_ERR_NO_RESOURCE;
    }
    return FERRY_OK;
}

static bml_kept_t *kept_new(ferry_ctx_t *ctx, int dst, uint8_t tag, size_t len)
{
    bml_peer_t *bp = &ctx->bml->peers[dst];
    bml_kept_t *k = kept_alloc(ctx->bml, len);
    if (k == NULL)
        return NULL;
    k->tag = tag;
    k->len = len;
    bp->kept[bp->tx_seq % BML_KEEP_MAX] = k;
    bp->tx_seq++;
    bp->kept_bytes += len;
    bp->kept_since_ask += len;
    if (bp->tx_seq - bp->asked_at >= BML_ASK_EVERY || bp->kept_since_ask >= BML_ASK_BYTES) {
        bp->ask_count = true;
        ctx->bml->work = true;
    }
    return k;
}

int bml_am_keep_slow(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *a, size_t alen,
                     const void *b, size_t blen)
{
    if (ctx->peers[dst].failed)
        return FERRY_OK;
    bml_kept_t *k = kept_new(ctx, dst, tag, alen + blen);
    if (k == NULL)
        return FERRY_ERR_NO_MEMORY;
    if (alen > 0)
        memcpy(k->data, a, alen);
    if (blen > 0)
        memcpy(k->data + alen, b, blen);
    return FERRY_OK;
}

int bml_am_keep_des_slow(ferry_ctx_t *ctx, int dst, uint8_t tag, const ferry_btl_desc_t *des)
{
    if (ctx->peers[dst].failed)
        return FERRY_OK;
    size_t len = 0;
    for (unsigned i = 0; i < des->src_cnt; i++)
        len += des->src[i].len;
    bml_kept_t *k = kept_new(ctx, dst, tag, len);
    if (k == NULL)
        return FERRY_ERR_NO_MEMORY;
    size_t off = 0;
    for (unsigned i = 0; i < des->src_cnt; i++) {
        memcpy(k->data + off, ferry_btl_seg_ptr(&des->src[i]), des->src[i].len);
        off += des->src[i].len;
    }
    return FERRY_OK;
}

/* Asks dst for its count, behind what was sent to it; false when the
 * transport cannot take it now (progress tries again). */
static bool ask(ferry_ctx_t *ctx, int dst, bml_peer_t *bp)
{
    bml_msg_t m = {.magic = BML_MSG_MAGIC, .kind = BML_MSG_ASK, .count = bp->tx_seq};
    if (send_msg(ctx, dst, &m) == FERRY_ERR_NO_RESOURCE)
        return false;
    bp->ask_count = false;
    bp->asked_at = bp->tx_seq;
    bp->kept_since_ask = 0;
    return true;
}

int bml_am_sent_slow(ferry_ctx_t *ctx, int dst, int m, int rc)
{
    bml_peer_t *bp = &ctx->bml->peers[dst];
    /* The count is asked for right behind the message that made it due: a
     * sender that keeps sending without progress would otherwise ask only
     * once the most it may keep is reached, and then wait for the peer to
     * handle all of it. */
    if (rc == FERRY_OK && bp->ask_count && bp->tx_state == BML_TX_STEADY &&
        !ctx->peers[dst].failed && !ask(ctx, dst, bp))
        ctx->bml->asks_deferred++;
    if (rc == FERRY_OK || ctx->peers[dst].failed || bp->tx_seq == bp->tx_base)
        return rc;
    if (rc == FERRY_ERR_UNREACH &&
        bml_path_lost(ctx, dst, m, rc, "a send on it failed"))
        return FERRY_OK; /* kept: the replay sends it */
    bp->tx_seq--;
    bml_kept_t *k = bp->kept[bp->tx_seq % BML_KEEP_MAX];
    bp->kept[bp->tx_seq % BML_KEEP_MAX] = NULL;
    bp->kept_bytes -= k->len;
    kept_free(ctx->bml, k);
    return rc;
}

bool bml_am_rx_slow(ferry_ctx_t *ctx, const ferry_btl_module_t *btl, bml_peer_t *bp)
{
    int m = btl_ctx_module_index(ctx, btl);
    if (m >= 0 && m < 64 && (bp->rx_drop & (1ull << m)) != 0)
        return false;
    bp->rx_count++;
    return true;
}

/* The sender's side of a round: tells every rail lost (the last one asks
 * for the count), waits, then sends again what the peer did not get.
 * Returns events; sets *more when it must be called again. */
static int replay_step(ferry_ctx_t *ctx, int r, bml_peer_t *bp, bool *more)
{
    int events = 0;
    if (bp->tx_state == BML_TX_ASK) {
        int n_down = 0;
        for (int i = 0; i < bp->n; i++)
            n_down += bp->path[i].down;
        int told = 0;
        for (int i = 0; i < bp->n; i++) {
            if (!bp->path[i].down)
                continue;
            if (told++ < bp->lost_told)
                continue;
            int m = bp->path[i].m;
            /* Named as the peer numbers its end of the rail. */
            const ferry_btl_module_t *btl = ctx->modules[m];
            int theirs = btl->ops->peer_instance != NULL && bp->path[i].ep != NULL
                             ? btl->ops->peer_instance(ctx->modules[m], bp->path[i].ep)
                             : -1;
            bml_msg_t msg = {.magic = BML_MSG_MAGIC,
                             .kind = BML_MSG_LOST,
                             .instance = theirs >= 0 && theirs <= UINT8_MAX
                                             ? (uint8_t)theirs
                                             : btl_ctx_module_instance(ctx, m),
                             .last = told == n_down,
                             .epoch = bp->epoch};
            snprintf(msg.name, sizeof(msg.name), "%s", ctx->modules[m]->attr.name);
            int rc = send_msg(ctx, r, &msg);
            if (rc == FERRY_ERR_NO_RESOURCE) {
                *more = true;
                return events;
            }
            if (rc != FERRY_OK)
                return events; /* the rail's own failure starts another round */
            bp->lost_told++;
            events++;
        }
        bp->tx_state = BML_TX_WAIT;
        bp->wait_since_ns = rt_now_coarse_ns();
    }
    if (bp->tx_state == BML_TX_WAIT) {
        if (rt_now_coarse_ns() - bp->wait_since_ns > ctx->bml->replay_timeout_ns) {
            char text[160];
            snprintf(text, sizeof(text),
                     "rank %d did not answer the replay's count within "
                     "FERRY_BML_REPLAY_TIMEOUT (%llu ms)",
                     r, (unsigned long long)(ctx->bml->replay_timeout_ns / 1000000u));
            btl_ctx_fail_peer(ctx, r, FERRY_ERR_TIMEOUT, "bml", text);
            return events;
        }
        *more = true;
        return events;
    }
    if (bp->tx_state == BML_TX_REPLAY) {
        const ferry_btl_module_t *btl = ctx->modules[ctx->peers[r].module_idx];
        while (bp->replay_next < bp->tx_seq) {
            bml_kept_t *k = bp->kept[bp->replay_next % BML_KEEP_MAX];
            /* Not with the API's own sizes (bml_init); a guard all the same. */
            if (k->len > btl->attr.max_send_size) {
                char text[160];
                snprintf(text, sizeof(text),
                         "a %zu-byte message to rank %d cannot go again on %s, whose largest "
                         "is %zu bytes",
                         k->len, r, btl->attr.name, btl->attr.max_send_size);
                btl_ctx_fail_peer(ctx, r, FERRY_ERR_UNREACH, "bml", text);
                return events;
            }
            int rc = send_raw(ctx, r, k->tag, k->data, k->len);
            if (rc == FERRY_ERR_NO_RESOURCE) {
                *more = true;
                return events;
            }
            if (rc != FERRY_OK) {
                /* That rail broke too: its loss starts another round. */
                if (rc == FERRY_ERR_UNREACH)
                    bml_path_lost(ctx, r, ctx->peers[r].module_idx, rc, "a replay on it failed");
                *more = true;
                return events;
            }
            bp->replay_next++;
            ctx->bml->replayed++;
            events++;
        }
        bp->tx_state = BML_TX_STEADY;
        rt_log(&ctx->log, RT_LOG_INFO, "rank %d: replay done on %s (module %d)", r,
               btl->attr.name, ctx->peers[r].module_idx);
    }
    return events;
}

int bml_progress(ferry_ctx_t *ctx)
{
    struct bml *bml = ctx->bml;
    if (bml == NULL || !bml->work || bml->peers == NULL)
        return 0;
    bml->work = false;
    bool more = false;
    int events = 0;
    for (int r = 0; r < ctx->size; r++) {
        bml_peer_t *bp = &bml->peers[r];
        if (ctx->peers[r].failed) {
            if (bp->keeping)
                drop_kept(ctx->bml, bp);
            bp->owe_count = bp->owe_replay = false;
            continue;
        }
        if (bp->owe_count) {
            bml_msg_t m = {.magic = BML_MSG_MAGIC, .kind = BML_MSG_COUNT, .count = bp->rx_count};
            int rc = send_msg(ctx, r, &m);
            if (rc == FERRY_OK || rc != FERRY_ERR_NO_RESOURCE)
                bp->owe_count = false;
            else
                more = true;
        }
        if (bp->owe_replay) {
            bml_msg_t m = {.magic = BML_MSG_MAGIC,
                           .kind = BML_MSG_RECOUNT,
                           .epoch = bp->owe_epoch,
                           .count = bp->rx_count};
            int rc = send_msg(ctx, r, &m);
            if (rc == FERRY_OK || rc != FERRY_ERR_NO_RESOURCE)
                bp->owe_replay = false;
            else
                more = true;
        }
        if (!bp->keeping)
            continue;
        if (bp->tx_state != BML_TX_STEADY)
            events += replay_step(ctx, r, bp, &more);
        if (bp->tx_state == BML_TX_STEADY && bp->ask_count) {
            if (ask(ctx, r, bp))
                events++;
            else
                more = true;
        }
    }
    if (more)
        bml->work = true;
    return events;
}
