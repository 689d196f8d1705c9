/*
 * Fuzz harness of the atomics that travel as ferry's own active messages
 * (API_TAG_AMO, src/api/onesided.c: api_amo_recv), the path of atomics to a
 * peer with several rails: requests and answers as a peer writes them.
 *
 * One context over the self transport for the whole run, with a 64-byte
 * buffer registered with FERRY_ACCESS_REMOTE_ATOMIC and a second one
 * without the right. Input: records of [how: 1 byte][api_amo_msg_t]
 * [key_len bytes], each handed to api_amo_recv as if from rank 0, then
 * progress (the answer goes back through self and answers nothing of
 * ours). The bits of how make fields right where bytes would rarely be:
 * 0x01 the transport's name hash and instance of our self module, 0x02 the
 * real key of the atomic buffer (0x20 that of the other), 0x04 an address
 * inside the buffer at the input's offset (aligned or not, in range or
 * not), 0x08 the kind a request, 0x10 a valid operation.
 *
 * Oracle: a shadow of the buffer to which the harness applies, with the
 * same CPU operation, exactly the requests a target must carry out (a
 * request whose every field is right, inside the buffer with the right);
 * after each record the buffer and its shadow must be equal, and the
 * buffer without the right untouched, so that an accepted bad request and
 * a refused good one both abort.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/btl.h>
#include <ferry/ferry.h>

#include "api/api.h"
#include "api/rkey.h"
#include "fuzz.h"

#define BUF 64

static ferry_ctx_t *g_ctx;
static int g_mod = -1;
static uint8_t g_key[FERRY_BTL_KEY_MAX], g_key_ro[FERRY_BTL_KEY_MAX];
static size_t g_key_len;
static _Alignas(8) unsigned char g_buf[BUF], g_ro[BUF], g_shadow[BUF];

static const uint8_t g_ops[] = {FERRY_BTL_ATOMIC_ADD,  FERRY_BTL_ATOMIC_AND,  FERRY_BTL_ATOMIC_OR,
                                FERRY_BTL_ATOMIC_XOR,  FERRY_BTL_ATOMIC_LAND, FERRY_BTL_ATOMIC_LOR,
                                FERRY_BTL_ATOMIC_LXOR, FERRY_BTL_ATOMIC_SWAP, FERRY_BTL_ATOMIC_MIN,
                                FERRY_BTL_ATOMIC_MAX};

static void key_of(ferry_mem_t *mem, void *base, uint8_t *key_out)
{
    ferry_rkey_t rk;
    if (ferry_mem_rkey(mem, &rk) != FERRY_OK ||
        api_rkey_resolve(g_ctx, g_mod, 0, &rk, (uint64_t)(uintptr_t)base, BUF, 0, key_out) !=
            FERRY_OK)
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    setenv("FERRY_BTL", "self", 1);
    setenv("FERRY_LOG_LEVEL", "error", 1);
    if (ferry_init(NULL, &g_ctx) != FERRY_OK)
        abort();
    for (int i = 0; i < g_ctx->n_modules; i++)
        if (strcmp(g_ctx->modules[i]->attr.name, "self") == 0)
            g_mod = i;
    if (g_mod < 0)
        abort();
    g_key_len = g_ctx->modules[g_mod]->attr.reg_handle_size;
    ferry_mem_t *mem, *ro;
    if (ferry_mem_register(g_ctx, g_buf, BUF, FERRY_ACCESS_REMOTE_ATOMIC, &mem) != FERRY_OK ||
        ferry_mem_register(g_ctx, g_ro, BUF, FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE,
                           &ro) != FERRY_OK)
        abort();
    key_of(mem, g_buf, g_key);
    key_of(ro, g_ro, g_key_ro);
    return 0;
}

/* Whether a target must carry out m (with key, len bytes in all). */
static bool must_apply(const api_amo_msg_t *m, const uint8_t *key, size_t len)
{
    const struct api_rkey_id *id = &g_ctx->api->rkey_id[g_mod];
    uint64_t base = (uint64_t)(uintptr_t)g_buf;
    bool cswap = m->amo == 2;
    return m->kind == API_AMO_REQ && len == sizeof(*m) + m->key_len &&
           m->key_len == g_key_len && memcmp(key, g_key, g_key_len) == 0 &&
           m->name_hash == id->name_hash && m->instance == id->instance &&
           (m->size == 4 || m->size == 8) && m->zero[0] == 0 && m->zero[1] == 0 &&
           m->status == 0 && m->amo <= 2 &&
           (cswap ? m->op == 0 : ferry_btl_atomic_supports_bit(m->op) != 0) &&
           m->raddr >= base && m->raddr - base <= (uint64_t)(BUF - m->size) &&
           (m->raddr & (m->size - 1u)) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    memcpy(g_shadow, g_buf, BUF);
    size_t off = 0;
    unsigned char msg[sizeof(api_amo_msg_t) + 255];
    while (off + 1 + sizeof(api_amo_msg_t) <= size) {
        uint8_t how = data[off++];
        api_amo_msg_t m;
        memcpy(&m, data + off, sizeof(m));
        off += sizeof(m);
        size_t klen = m.key_len;
        if (how & 0x22)
            m.key_len = (uint8_t)g_key_len;
        if (how & 0x01) {
            m.name_hash = g_ctx->api->rkey_id[g_mod].name_hash;
            m.instance = g_ctx->api->rkey_id[g_mod].instance;
        }
        if (how & 0x04)
            m.raddr = (uint64_t)(uintptr_t)(how & 0x20 ? g_ro : g_buf) + m.raddr % (BUF + 8);
        if (how & 0x08)
            m.kind = API_AMO_REQ;
        if (how & 0x10) {
            m.amo %= 3;
            m.op = m.amo == 2 ? 0 : g_ops[m.op % sizeof(g_ops)];
        }
        memcpy(msg, &m, sizeof(m));
        size_t len = sizeof(m);
        if (how & 0x22) {
            memcpy(msg + len, how & 0x20 ? g_key_ro : g_key, g_key_len);
            len += g_key_len;
        } else {
            if (klen > size - off)
                klen = size - off;
            memcpy(msg + len, data + off, klen);
            off += klen;
            len += klen;
        }
        if (must_apply(&m, msg + sizeof(m), len))
            (void)ferry_btl_atomic_apply(g_shadow + (m.raddr - (uint64_t)(uintptr_t)g_buf),
                                         m.size == 4, m.amo == 2, m.op, m.operand, m.compare);
        api_amo_recv(g_ctx, 0, msg, len);
        for (int i = 0; i < 4; i++)
            ferry_progress(g_ctx);
        static const unsigned char zero[BUF];
        if (memcmp(g_buf, g_shadow, BUF) != 0 || memcmp(g_ro, zero, BUF) != 0)
            abort(); /* a good request refused, or a bad one carried out */
    }
    return 0;
}
