/*
 * The target-executed atomics (src/btl/base_atomic.c) against a peer that
 * breaks the protocol: a stand-in transport whose send hook keeps the
 * messages, so that the test can forge, replay and hold them. Every check
 * the target and the initiator make has a case that tries to get past it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/btl.h>
#include <ferry/ferry.h>

#include "api/api.h"
#include "btl/base_atomic.h"
#include "check.h"

/* The stand-in transport: one peer, messages kept in order. */
#define MAXMSG 256
static btl_amo_msg_t sent[MAXMSG];
static size_t nsent;
static bool send_full;         /* the send hook says NO_RESOURCE */
static btl_amo_ep_t peer_state;
static ferry_btl_endpoint_t *const PEER = (ferry_btl_endpoint_t *)&peer_state;

/* Target memory: one registration, key "GOODKEY", with the atomic right. */
static _Alignas(8) uint8_t mem[64];
static uint32_t last_need;
static size_t last_len;

static int fake_send(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const btl_amo_msg_t *m)
{
    if (send_full)
        return FERRY_ERR_NO_RESOURCE;
    CHECK(nsent < MAXMSG);
    sent[nsent++] = *m;
    return FERRY_OK;
}

static int fake_resolve(ferry_btl_module_t *btl, const uint8_t *key, uint64_t addr, size_t len,
                        uint32_t need, void **ptr_out)
{
    last_need = need;
    last_len = len;
    ferry_btl_reg_t reg = {.base = mem, .len = sizeof(mem), .access = FERRY_ACCESS_REMOTE_ATOMIC};
    if (memcmp(key, "GOODKEY", 8) != 0 || btl_base_check_access(&reg, addr, len, need) != FERRY_OK)
        return FERRY_ERR_ACCESS;
    *ptr_out = (void *)(uintptr_t)addr;
    return FERRY_OK;
}

static btl_amo_ep_t *fake_ep(ferry_btl_endpoint_t *ep)
{
    CHECK(ep == PEER);
    return &peer_state;
}

static const btl_amo_hooks_t hooks = {
    .send = fake_send, .resolve = fake_resolve, .ep_state = fake_ep};

typedef struct done {
    int calls, status;
} done_t;

static void cb(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
               ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status)
{
    done_t *d = cbdata;
    d->calls++;
    d->status = status;
}

static const uint8_t goodkey[FERRY_BTL_KEY_MAX] = "GOODKEY";

static btl_amo_msg_t req(uint32_t op, uint32_t flags, uint64_t raddr, uint64_t operand)
{
    btl_amo_msg_t m = {.magic = BTL_AMO_MAGIC, .kind = BTL_AMO_REQ, .op = (uint16_t)op,
                       .flags = flags, .cookie = 77, .raddr = raddr, .operand = operand};
    memcpy(m.key, goodkey, sizeof(m.key));
    return m;
}

/* Feeds a request to the target; returns what btl_amo_target said, and the
 * answer it sent in *ans (when it sent one). */
static int target(ferry_btl_module_t *btl, btl_amo_module_t *am, const btl_amo_msg_t *m,
                  btl_amo_msg_t *ans)
{
    size_t before = nsent;
    int rc = btl_amo_target(btl, am, PEER, m, sizeof(*m));
    if (rc == 1 && nsent == before + 1 && ans != NULL)
        *ans = sent[before];
    return rc;
}

int main(void)
{
    ferry_ctx_t *ctx = NULL;
    CHECK(setenv("FERRY_MODEX", "singleton", 1) == 0);
    CHECK(api_ctx_create(NULL, API_CTX_OPEN, &ctx) == FERRY_OK);
    ferry_btl_module_t btl;
    memset(&btl, 0, sizeof(btl));
    btl.ctx = ctx;
    btl.attr.name = "fake";
    btl.attr.reg_handle_size = 8;
    btl.attr.flags = FERRY_BTL_FLAG_ATOMIC_OPS | FERRY_BTL_FLAG_ATOMIC_FOPS;
    btl.attr.atomic_flags = BTL_ATOMIC_SUPPORTS_CPU;
    btl_amo_module_t am;
    btl_amo_module_init(&am, &hooks, 4);
    uint64_t *w0 = (uint64_t *)mem;
    btl_amo_msg_t ans;

    /* A round trip: request out, executed, answered, completed by the
     * answer (which the transport hands over from its progress), never
     * inside the call that started it. */
    uint64_t result = 0;
    done_t d = {0};
    *w0 = 40;
    CHECK(btl_amo_start(&btl, &am, PEER, &result, NULL, (uint64_t)(uintptr_t)mem, goodkey,
                        FERRY_BTL_ATOMIC_ADD, 2, 0, 0, false, true, cb, NULL, &d) == FERRY_OK);
    CHECK(d.calls == 0);
    CHECK(nsent == 1 && sent[0].kind == BTL_AMO_REQ && btl_amo_inflight(&peer_state) == 1);
    btl_amo_msg_t r0 = sent[0];
    CHECK(target(&btl, &am, &r0, &ans) == 1);
    CHECK(*w0 == 42 && ans.kind == BTL_AMO_ANSWER && ans.status == FERRY_OK && ans.operand == 40);
    CHECK(last_need == FERRY_ACCESS_REMOTE_ATOMIC && last_len == 8);
    CHECK(btl_amo_answer(&btl, &am, PEER, &ans, sizeof(ans)) == 1);
    CHECK(d.calls == 1 && d.status == FERRY_OK && result == 40 &&
          btl_amo_inflight(&peer_state) == 0);
    CHECK(btl_amo_progress(&btl, &am) == 0 && d.calls == 1);
    printf("ok  a round trip completes with its answer, with the old value\n");

    /* Forged answers: replayed, unknown, malformed. */
    CHECK(btl_amo_answer(&btl, &am, PEER, &ans, sizeof(ans)) == FERRY_ERR_PROTO);
    CHECK(btl_amo_answer(&btl, &am, PEER, &ans, sizeof(ans) - 1) == FERRY_ERR_PROTO);
    uint32_t res32 = 0;
    done_t d32 = {0};
    CHECK(btl_amo_start(&btl, &am, PEER, &res32, NULL, (uint64_t)(uintptr_t)mem + 8, goodkey,
                        FERRY_BTL_ATOMIC_SWAP, 5, 0, FERRY_BTL_ATOMIC_FLAG_32BIT, false, true, cb,
                        NULL, &d32) == FERRY_OK);
    btl_amo_msg_t a = {.magic = BTL_AMO_MAGIC, .kind = BTL_AMO_ANSWER,
                       .cookie = sent[nsent - 1].cookie};
    btl_amo_msg_t bad = a;
    bad.operand = 0x100000000ull; /* a 32-bit answer cannot hold it */
    CHECK(btl_amo_answer(&btl, &am, PEER, &bad, sizeof(bad)) == FERRY_ERR_PROTO);
    bad = a;
    bad.status = 3;
    CHECK(btl_amo_answer(&btl, &am, PEER, &bad, sizeof(bad)) == FERRY_ERR_PROTO);
    bad = a;
    bad.status = FERRY_ERR_LAST;
    CHECK(btl_amo_answer(&btl, &am, PEER, &bad, sizeof(bad)) == FERRY_ERR_PROTO);
    bad = a;
    bad.flags = 1;
    CHECK(btl_amo_answer(&btl, &am, PEER, &bad, sizeof(bad)) == FERRY_ERR_PROTO);
    bad = a;
    bad.magic ^= 1;
    CHECK(btl_amo_answer(&btl, &am, PEER, &bad, sizeof(bad)) == FERRY_ERR_PROTO);
    bad = a;
    bad.kind = BTL_AMO_REQ;
    CHECK(btl_amo_answer(&btl, &am, PEER, &bad, sizeof(bad)) == FERRY_ERR_PROTO);
    bad = a;
    bad.cookie += 1000;
    CHECK(btl_amo_answer(&btl, &am, PEER, &bad, sizeof(bad)) == FERRY_ERR_PROTO);
    CHECK(btl_amo_progress(&btl, &am) == 0 && d32.calls == 0);
    a.operand = 9;
    CHECK(btl_amo_answer(&btl, &am, PEER, &a, sizeof(a)) == 1);
    CHECK(d32.calls == 1 && res32 == 9);
    printf("ok  replayed, unknown and malformed answers are protocol errors\n");

    /* Forged requests: malformed ones are protocol errors and change
     * nothing; well-formed ones the target must refuse are answered so. */
    memset(mem, 0x33, sizeof(mem));
    uint64_t base = (uint64_t)(uintptr_t)mem;
    btl_amo_msg_t m = req(FERRY_BTL_ATOMIC_ADD, 0, base, 1);
    CHECK(btl_amo_target(&btl, &am, PEER, &m, sizeof(m) + 1) == FERRY_ERR_PROTO);
    m.magic = 0;
    CHECK(target(&btl, &am, &m, NULL) == FERRY_ERR_PROTO);
    m = req(FERRY_BTL_ATOMIC_ADD, 0, base, 1);
    m.kind = BTL_AMO_ANSWER;
    CHECK(target(&btl, &am, &m, NULL) == FERRY_ERR_PROTO);
    m = req(FERRY_BTL_ATOMIC_ADD, 0, base, 1);
    m.status = FERRY_ERR_ACCESS;
    CHECK(target(&btl, &am, &m, NULL) == FERRY_ERR_PROTO);
    m = req(FERRY_BTL_ATOMIC_ADD, 1u << 12, base, 1); /* unknown flag */
    CHECK(target(&btl, &am, &m, NULL) == FERRY_ERR_PROTO);
    m = req(FERRY_BTL_ATOMIC_ADD, BTL_AMO_CSWAP, base, 1); /* cswap naming an op */
    CHECK(target(&btl, &am, &m, NULL) == FERRY_ERR_PROTO);
    const struct {
        const char *what;
        btl_amo_msg_t m;
        int want;
    } refused[] = {
        {"an unknown operation", req(0x13, 0, base, 1), FERRY_ERR_INVALID},
        {"misaligned 64-bit", req(FERRY_BTL_ATOMIC_ADD, 0, base + 4, 1), FERRY_ERR_INVALID},
        {"misaligned 32-bit", req(FERRY_BTL_ATOMIC_ADD, FERRY_BTL_ATOMIC_FLAG_32BIT, base + 2, 1),
         FERRY_ERR_INVALID},
        {"past the end", req(FERRY_BTL_ATOMIC_ADD, 0, base + sizeof(mem), 1), FERRY_ERR_ACCESS},
        {"before the start", req(FERRY_BTL_ATOMIC_ADD, 0, base - 8, 1), FERRY_ERR_ACCESS},
        {"wrapping", req(FERRY_BTL_ATOMIC_ADD, 0, UINT64_MAX - 7, 1), FERRY_ERR_ACCESS},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        memset(&ans, 0, sizeof(ans));
        CHECK(target(&btl, &am, &refused[i].m, &ans) == 1);
        if (ans.status != refused[i].want) {
            fprintf(stderr, "%s: answered %d\n", refused[i].what, ans.status);
            CHECK(false);
        }
    }
    m = req(FERRY_BTL_ATOMIC_ADD, 0, base, 1);
    m.key[0] ^= 1; /* a wrong key */
    CHECK(target(&btl, &am, &m, &ans) == 1 && ans.status == FERRY_ERR_ACCESS);
    for (size_t i = 0; i < sizeof(mem); i++)
        CHECK(mem[i] == 0x33);
    printf("ok  forged requests are refused and change nothing\n");

    /* The target's budget: answers it cannot send are owed; past the budget
     * the next request is held back unexecuted; the owed ones leave in
     * order first. */
    memset(mem, 0, sizeof(mem));
    send_full = true;
    for (int i = 0; i < 4; i++) {
        m = req(FERRY_BTL_ATOMIC_ADD, 0, base, 1);
        m.cookie = 100 + (uint64_t)i;
        CHECK(target(&btl, &am, &m, NULL) == 1);
    }
    CHECK(btl_amo_owes(&peer_state) && *w0 == 4);
    m = req(FERRY_BTL_ATOMIC_ADD, 0, base, 1);
    m.cookie = 104;
    CHECK(target(&btl, &am, &m, NULL) == 0 && *w0 == 4); /* held, not executed */
    size_t before = nsent;
    send_full = false;
    CHECK(btl_amo_send_owed(&btl, &am, PEER) == 4 && !btl_amo_owes(&peer_state));
    for (int i = 0; i < 4; i++)
        CHECK(sent[before + (size_t)i].cookie == 100 + (uint64_t)i &&
              sent[before + (size_t)i].operand == (uint64_t)i);
    CHECK(target(&btl, &am, &m, &ans) == 1 && ans.cookie == 104 && ans.operand == 4);
    printf("ok  a peer past its budget of owed answers is held back, nothing lost\n");

    /* The initiator's budget, and failure: callbacks from progress. */
    done_t ds[5] = {{0}};
    uint64_t rs[5];
    for (int i = 0; i < 4; i++)
        CHECK(btl_amo_start(&btl, &am, PEER, &rs[i], NULL, base, goodkey, FERRY_BTL_ATOMIC_ADD,
                            1, 0, 0, false, true, cb, NULL, &ds[i]) == FERRY_OK);
    CHECK(btl_amo_start(&btl, &am, PEER, &rs[4], NULL, base, goodkey, FERRY_BTL_ATOMIC_ADD, 1, 0,
                        0, false, true, cb, NULL, &ds[4]) == FERRY_ERR_NO_RESOURCE);
    CHECK(btl_amo_start(&btl, &am, PEER, NULL, NULL, base, goodkey, FERRY_BTL_ATOMIC_ADD, 1, 0, 0,
                        false, true, cb, NULL, &ds[4]) == FERRY_ERR_INVALID);
    CHECK(btl_amo_start(&btl, &am, PEER, &rs[4], NULL, base + 1, goodkey, FERRY_BTL_ATOMIC_ADD, 1,
                        0, 0, false, true, cb, NULL, &ds[4]) == FERRY_ERR_INVALID);
    btl_amo_ep_fail(&am, &peer_state, FERRY_ERR_UNREACH);
    CHECK(ds[0].calls == 0 && btl_amo_inflight(&peer_state) == 0);
    CHECK(btl_amo_progress(&btl, &am) == 4);
    for (int i = 0; i < 4; i++)
        CHECK(ds[i].calls == 1 && ds[i].status == FERRY_ERR_UNREACH);
    CHECK(ds[4].calls == 0);
    printf("ok  the initiator's budget holds and a failed peer's atomics complete with it\n");

    /* A deadline: an atomic whose answer does not come in time completes
     * with FERRY_ERR_TIMEOUT, from progress, its result untouched; flush no
     * longer waits for it, but it keeps its slot until the answer comes,
     * which is then dropped (nothing written) and frees the slot; the same
     * answer again is a protocol error. */
    am.timeout_ns = 1000;
    done_t de[4] = {{0}};
    uint64_t re[4] = {7, 7, 7, 7};
    size_t first = nsent;
    for (int i = 0; i < 4; i++)
        CHECK(btl_amo_start(&btl, &am, PEER, &re[i], NULL, base, goodkey, FERRY_BTL_ATOMIC_ADD, 1,
                            0, 0, false, true, cb, NULL, &de[i]) == FERRY_OK);
    CHECK(btl_amo_expire(&am, &peer_state, 0) == 0); /* not due yet */
    CHECK(btl_amo_expire(&am, &peer_state, UINT64_MAX) == 4);
    CHECK(btl_amo_expire(&am, &peer_state, UINT64_MAX) == 0); /* once */
    CHECK(de[0].calls == 0 && btl_amo_inflight(&peer_state) == 0);
    CHECK(btl_amo_progress(&btl, &am) == 4);
    for (int i = 0; i < 4; i++)
        CHECK(de[i].calls == 1 && de[i].status == FERRY_ERR_TIMEOUT && re[i] == 7);
    CHECK(btl_amo_start(&btl, &am, PEER, &rs[4], NULL, base, goodkey, FERRY_BTL_ATOMIC_ADD, 1, 0,
                        0, false, true, cb, NULL, &ds[4]) == FERRY_ERR_NO_RESOURCE);
    btl_amo_msg_t late = sent[first];
    CHECK(target(&btl, &am, &late, &ans) == 1 && ans.status == FERRY_OK);
    CHECK(btl_amo_answer(&btl, &am, PEER, &ans, sizeof(ans)) == 1);
    CHECK(re[0] == 7 && de[0].calls == 1 && btl_amo_progress(&btl, &am) == 0);
    CHECK(btl_amo_answer(&btl, &am, PEER, &ans, sizeof(ans)) == FERRY_ERR_PROTO);
    done_t dn = {0};
    uint64_t rn = 0;
    CHECK(btl_amo_start(&btl, &am, PEER, &rn, NULL, base, goodkey, FERRY_BTL_ATOMIC_ADD, 1, 0, 0,
                        false, true, cb, NULL, &dn) == FERRY_OK); /* the freed slot */
    /* The peer fails with expired ones still due: each completes once. */
    btl_amo_ep_fail(&am, &peer_state, FERRY_ERR_UNREACH);
    CHECK(btl_amo_progress(&btl, &am) == 1 && dn.calls == 1 && dn.status == FERRY_ERR_UNREACH);
    for (int i = 0; i < 4; i++)
        CHECK(de[i].calls == 1);
    am.timeout_ns = 0;
    printf("ok  an atomic past its deadline times out once, its late answer writes nothing\n");

    /* del_procs of a peer that may still answer: its atomics complete at
     * once, and their answers, when they come, are dropped (no protocol
     * error, nothing written), each once. */
    btl_amo_ep_fini(&am, &peer_state); /* the failed peer's expired ones freed */
    done_t df[2] = {{0}};
    uint64_t rf[2] = {9, 9};
    first = nsent;
    for (int i = 0; i < 2; i++)
        CHECK(btl_amo_start(&btl, &am, PEER, &rf[i], NULL, base, goodkey, FERRY_BTL_ATOMIC_ADD,
                            1, 0, 0, false, true, cb, NULL, &df[i]) == FERRY_OK);
    btl_amo_ep_forget(&am, &peer_state, FERRY_ERR_UNREACH);
    CHECK(btl_amo_inflight(&peer_state) == 0 && btl_amo_progress(&btl, &am) == 2);
    for (int i = 0; i < 2; i++) {
        CHECK(df[i].calls == 1 && df[i].status == FERRY_ERR_UNREACH && rf[i] == 9);
        late = sent[first + (size_t)i];
        CHECK(target(&btl, &am, &late, &ans) == 1 && ans.status == FERRY_OK);
        CHECK(btl_amo_answer(&btl, &am, PEER, &ans, sizeof(ans)) == 1);
        CHECK(btl_amo_answer(&btl, &am, PEER, &ans, sizeof(ans)) == FERRY_ERR_PROTO);
    }
    CHECK(btl_amo_progress(&btl, &am) == 0 && rf[0] == 9 && rf[1] == 9 && df[0].calls == 1);
    printf("ok  atomics to a deleted peer complete at once; its late answers are dropped\n");

    btl_amo_ep_fini(&am, &peer_state);
    btl_amo_module_fini(&btl, &am);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    return 0;
}
