/*
 * Fuzz harness: what a peer sends the BML (src/bml/bml.c, bml_recv): the
 * counts, losses and requests of the replay of active messages, fed to a
 * stand-in context of rank 1 of 4 with three modules to every peer (two
 * tcp rails and a lower path) and messages kept to every peer.
 *
 * Input: byte 0 says how many messages are kept to each peer first (0-63);
 * then records (FUZZ_RECORD_END-terminated), each:
 *   byte 0   the sender (its low two bits; rank 1 is this process)
 *   byte 1   bit 0: repair the header (magic, reserved field) so that
 *            mutations get past the first checks; bit 1: progress after it
 *            (answers and replays go through stub transports); bit 2: lose
 *            the rail named by bits 4-5 to that sender first; bit 3: keep
 *            one more message to it first
 *   the rest the message, cut or as long as it is
 * Besides not crashing, leaking or reading past the message, after every
 * record each peer's state must hold together: what is kept is what was
 * sent and not yet counted, a replay runs inside it, and only rails that
 * exist are dropped.
 */
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "bml/bml.h"
#include "btl/ctx.h"
#include "fuzz.h"

#define NRANKS 4
#define NMODULES 3

static const ferry_btl_component_t comp_tcp = {.name = "tcp"};
static const ferry_btl_component_t comp_low = {.name = "low"};
static ferry_btl_module_t modules[NMODULES];
static ferry_btl_module_t *module_list[NMODULES];
static ferry_btl_ops_t ops;
static ferry_ctx_t ctx;
static btl_peer_t peers[NRANKS];
static ferry_btl_endpoint_t *eps[NRANKS][NMODULES + 1];
static char ep_storage[NRANKS][NMODULES];

static int stub_register_am(ferry_btl_module_t *btl, uint8_t tag, ferry_btl_am_cb_t cb,
                            void *cbdata)
{
    (void)btl, (void)tag, (void)cb, (void)cbdata;
    return FERRY_OK;
}

/* The transports take every inline send and no descriptor. */
static int stub_sendi(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *hdr,
                      size_t hlen, const void *payload, size_t plen, uint8_t tag)
{
    (void)btl, (void)ep, (void)hdr, (void)hlen, (void)payload, (void)plen, (void)tag;
    return FERRY_OK;
}

static int stub_alloc(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, size_t size,
                      uint32_t flags, ferry_btl_desc_t **des_out)
{
    (void)btl, (void)ep, (void)size, (void)flags, (void)des_out;
    return FERRY_ERR_NO_RESOURCE;
}

static void discard(void *arg, rt_log_level_t level, const char *line)
{
    (void)arg, (void)level, (void)line;
}

static void setup(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    rt_log_init(&ctx.log);
    ctx.log.sink = discard;
    rt_params_init(&ctx.params, &ctx.log);
    ctx.magic = BTL_CTX_MAGIC;
    ctx.rank = 1;
    ctx.size = NRANKS;
    ops.register_am = stub_register_am;
    ops.sendi = stub_sendi;
    ops.alloc = stub_alloc;
    const char *names[NMODULES] = {"tcp", "tcp", "low"};
    for (int m = 0; m < NMODULES; m++) {
        modules[m].attr.name = names[m];
        modules[m].component = m < 2 ? &comp_tcp : &comp_low;
        modules[m].attr.exclusivity = m < 2 ? 1024 : 512;
        modules[m].attr.latency = 10 + (uint32_t)m;
        modules[m].attr.max_send_size = 1024;
        modules[m].attr.eager_limit = 1024;
        modules[m].attr.flags = FERRY_BTL_FLAG_SEND | FERRY_BTL_FLAG_SENDI;
        modules[m].ops = &ops;
        modules[m].ctx = &ctx;
        module_list[m] = &modules[m];
    }
    ctx.modules = module_list;
    ctx.n_modules = NMODULES;
    ctx.peers = peers;
}

static void reset(void)
{
    memset(peers, 0, sizeof(peers));
    for (int r = 0; r < NRANKS; r++) {
        for (int m = 0; m < NMODULES; m++)
            eps[r][m] = r == ctx.rank ? NULL : (ferry_btl_endpoint_t *)&ep_storage[r][m];
        peers[r].eps = eps[r];
        peers[r].module_idx = r == ctx.rank ? -1 : 0;
        peers[r].ep = eps[r][0];
    }
    ctx.n_failed = 0;
    ctx.closing = false;
}

static void check_peer(const bml_peer_t *bp)
{
    CHECK_FUZZ(bp->tx_base <= bp->tx_seq);
    CHECK_FUZZ(bp->tx_seq - bp->tx_base <= BML_KEEP_MAX);
    CHECK_FUZZ((bp->rx_drop & ~((1ull << NMODULES) - 1)) == 0);
    CHECK_FUZZ(bp->tx_state >= BML_TX_STEADY && bp->tx_state <= BML_TX_REPLAY);
    if (!bp->keeping) {
        CHECK_FUZZ(bp->kept_bytes == 0);
        return;
    }
    if (bp->tx_state == BML_TX_REPLAY)
        CHECK_FUZZ(bp->replay_next >= bp->tx_base && bp->replay_next <= bp->tx_seq);
    size_t bytes = 0;
    for (uint64_t i = bp->tx_base; i < bp->tx_seq; i++) {
        const bml_kept_t *k = bp->kept[i % BML_KEEP_MAX];
        CHECK_FUZZ(k != NULL);
        bytes += k->len;
    }
    CHECK_FUZZ(bytes == bp->kept_bytes);
}

static void keep_one(int dst, unsigned n)
{
    unsigned char msg[64];
    memset(msg, (int)n, sizeof(msg));
    if (bml_am_gate(&ctx, dst) == FERRY_OK &&
        bml_am_keep(&ctx, dst, (uint8_t)(n & 0x7f), msg, n % sizeof(msg), NULL, 0) ==
            FERRY_OK)
        (void)bml_am_sent(&ctx, dst, peers[dst].module_idx, FERRY_OK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 1)
        return 0;
    reset();
    CHECK_FUZZ(bml_register_params(&ctx) == FERRY_OK);
    CHECK_FUZZ(bml_init(&ctx) == FERRY_OK);
    unsigned first = data[0] & 63u;
    for (int r = 0; r < NRANKS; r++)
        for (unsigned i = 0; r != ctx.rank && i < first; i++)
            keep_one(r, i);
    size_t off = 1;
    const uint8_t *rec;
    size_t len;
    while (fuzz_next_record(data, size, &off, &rec, &len)) {
        if (len < 2)
            continue;
        int src = rec[0] & 3;
        unsigned flags = rec[1];
        if ((flags & 8u) && src != ctx.rank)
            keep_one(src, (unsigned)len);
        if ((flags & 4u) && src != ctx.rank)
            (void)bml_path_lost(&ctx, src, (int)((flags >> 4) & 3u) % NMODULES,
                                FERRY_ERR_UNREACH, "fuzz");
        /* The message on the heap, exactly its length. */
        size_t mlen = len - 2;
        unsigned char *msg = malloc(mlen > 0 ? mlen : 1);
        CHECK_FUZZ(msg != NULL);
        memcpy(msg, rec + 2, mlen);
        if ((flags & 1u) && mlen >= sizeof(bml_msg_t)) {
            bml_msg_t m;
            memcpy(&m, msg, sizeof(m));
            m.magic = BML_MSG_MAGIC;
            m.zero2 = 0;
            memcpy(msg, &m, sizeof(m));
        }
        bml_recv(&ctx, src, msg, mlen);
        free(msg);
        if (flags & 2u)
            (void)bml_progress(&ctx);
        for (int r = 0; r < NRANKS; r++)
            check_peer(&ctx.bml->peers[r]);
    }
    bml_fini(&ctx);
    free(ctx.ctrl_q);
    ctx.ctrl_q = NULL;
    ctx.ctrl_len = ctx.ctrl_cap = 0;
    return 0;
}
