/*
 * Fuzz harness: sm's reader of a peer's ring (sm_poll_channel and the
 * handlers behind it), on a ring the fuzzer fills.
 *
 * The input says where the ring starts (any lap, including the ones around
 * the 16-bit lap counter's wrap) and then gives messages: active messages,
 * puts, puts with notification, get requests, get answers, atomic requests
 * (every operation, both widths, aligned or not) and atomic answers built the
 * way a sender builds them (so they get past the header checks) from fields the fuzzer picks - keys
 * of live, withdrawn, read-only and unmapped registrations or made-up ones,
 * addresses inside and outside them, answers for gets that are pending or
 * not - and, as often, headers the fuzzer writes itself: any length, type,
 * tag and lap. sm reads the ring, answers what it takes, and reads its own
 * answers back. Nothing may crash, and memory no key allows writing into
 * (a read-only registration, memory outside every registration) must stay
 * as it was.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "sm_fuzz.h"

#define NKEYS 5
#define NGETS 2

typedef struct world {
    smf_t *f;
    /* Targets: a read-write buffer, a read-only one, one registered and
     * then unmapped, one registered and then deregistered. */
    unsigned char *rw, *ro, *gone;
    size_t rw_len, ro_len;
    uint8_t keys[NKEYS][FERRY_BTL_KEY_MAX];
    uint64_t addrs[NKEYS];
    unsigned char ro_copy[256];
    /* Local memory of the gets we pretend to wait for. */
    unsigned char *get_buf[NGETS];
} world_t;

static void world_init(world_t *w)
{
    ferry_btl_module_t *btl = &w->f->mod->super;
    ferry_btl_reg_t *reg;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    w->rw_len = 4096;
    w->ro_len = sizeof(w->ro_copy);
    w->rw = malloc(w->rw_len);
    w->ro = malloc(w->ro_len);
    w->gone = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (w->rw == NULL || w->ro == NULL || w->gone == MAP_FAILED)
        abort();
    memset(w->rw, 1, w->rw_len);
    for (size_t i = 0; i < w->ro_len; i++)
        w->ro[i] = w->ro_copy[i] = (unsigned char)i;
    const uint32_t rw = FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE;
    /* The read-write buffer takes atomics too; the others do not. */
    if (btl->ops->register_mem(btl, NULL, w->rw, w->rw_len, rw | FERRY_ACCESS_REMOTE_ATOMIC,
                               &reg) != FERRY_OK)
        abort();
    memcpy(w->keys[0], reg->key, sizeof(sm_key_t));
    w->addrs[0] = (uint64_t)(uintptr_t)w->rw;
    if (btl->ops->register_mem(btl, NULL, w->ro, w->ro_len, FERRY_ACCESS_REMOTE_READ, &reg) !=
        FERRY_OK)
        abort();
    memcpy(w->keys[1], reg->key, sizeof(sm_key_t));
    w->addrs[1] = (uint64_t)(uintptr_t)w->ro;
    if (btl->ops->register_mem(btl, NULL, w->gone, page, rw, &reg) != FERRY_OK)
        abort();
    memcpy(w->keys[2], reg->key, sizeof(sm_key_t));
    w->addrs[2] = (uint64_t)(uintptr_t)w->gone;
    /* Registered, and gone: an inaccessible mapping takes its place (an
     * unmap for the kernel), so that nothing else lands there. */
    if (mmap(w->gone, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
        MAP_FAILED)
        abort();
    unsigned char *tmp = malloc(512);
    if (tmp == NULL ||
        btl->ops->register_mem(btl, NULL, tmp, 512, rw, &reg) != FERRY_OK)
        abort();
    memcpy(w->keys[3], reg->key, sizeof(sm_key_t));
    w->addrs[3] = (uint64_t)(uintptr_t)tmp;
    btl->ops->deregister_mem(btl, reg);
    free(tmp); /* a stale key to memory that is not ours any more */
    /* The read-write buffer's slot and generation with a guessed nonce. */
    memcpy(w->keys[4], w->keys[0], sizeof(sm_key_t));
    w->keys[4][8] ^= 1;
    w->addrs[4] = w->addrs[0];
}

/* Pretends to wait for two ring gets (cookies 1 and 2) of the given sizes. */
static void pending_gets(world_t *w, fuzz_in_t *in)
{
    smf_t *f = w->f;
    for (int i = 0; i < NGETS; i++) {
        size_t len = 1 + fuzz_u16(in) % (3 * SMF_MAX_SEND);
        btl_frag_t *frag = btl_frag_get(&f->mod->frags, BTL_FRAG_USER);
        w->get_buf[i] = malloc(len);
        if (frag == NULL || w->get_buf[i] == NULL)
            abort();
        ferry_btl_desc_t *des = &frag->base;
        des->dst = &frag->segs[0];
        des->dst_cnt = 1;
        des->src = &frag->segs[1];
        des->src_cnt = 1;
        frag->segs[0].addr = (uint64_t)(uintptr_t)w->get_buf[i];
        frag->segs[0].len = len;
        frag->segs[1].len = len;
        des->flags = FERRY_BTL_DES_OWNERSHIP | FERRY_BTL_DES_INFLIGHT;
        frag->op = SM_OP_GET;
        frag->ep = f->ep;
        frag->cookie = (uint64_t)i + 1;
        util_list_append(&f->ep->gets, &frag->link);
        f->ep->gets_out++;
        f->ep->rdma_inflight++;
    }
}

/* One message from the input into the ring; false when the ring is full or
 * the input is over. */
static bool one_message(world_t *w, fuzz_in_t *in)
{
    if (in->pos >= in->size)
        return false;
    uint8_t kind = fuzz_u8(in);
    uint8_t tag = fuzz_u8(in);
    uint8_t mode = fuzz_u8(in);
    unsigned char msg[SMF_MAX_SEND];
    uint32_t len = 0;
    uint8_t type;
    switch (kind % 9) {
    case 0: /* an active message */
        type = SM_T_DATA;
        len = (uint32_t)fuzz_bytes(in, msg, fuzz_u16(in) % (SMF_MAX_SEND + 1));
        break;
    case 1: { /* a chunk of a put */
        sm_put_hdr_t h;
        uint8_t k = fuzz_u8(in) % NKEYS;
        memcpy(&h.key, w->keys[k], sizeof(h.key));
        h.raddr = w->addrs[k] + (uint64_t)(int64_t)(int16_t)fuzz_u16(in);
        h.flags = fuzz_u8(in) & 1 ? SM_PUT_LAST : 0;
        h.status = 0;
        memcpy(msg, &h, sizeof(h));
        len = (uint32_t)(sizeof(h) +
                         fuzz_bytes(in, msg + sizeof(h), fuzz_u16(in) % (SMF_MAX_SEND - sizeof(h))));
        type = SM_T_PUT;
        break;
    }
    case 2: { /* a get request */
        sm_get_req_t r;
        uint8_t k = fuzz_u8(in) % NKEYS;
        memcpy(&r.key, w->keys[k], sizeof(r.key));
        r.raddr = w->addrs[k] + (uint64_t)(int64_t)(int16_t)fuzz_u16(in);
        r.len = fuzz_u8(in) & 1 ? fuzz_u64(in) : fuzz_u16(in) % (2 * SMF_MAX_SEND);
        /* Its answers come back into this very ring: cookies 1 and 2 match
         * the gets we wait for. */
        r.cookie = fuzz_u8(in) % 4;
        memcpy(msg, &r, sizeof(r));
        len = sizeof(r);
        type = SM_T_GET_REQ;
        break;
    }
    case 3: { /* an answer to a get */
        sm_get_resp_t r = {.cookie = fuzz_u8(in) % 4,
                           .offset = fuzz_u8(in) & 1 ? fuzz_u64(in) : fuzz_u16(in),
                           .status = fuzz_u8(in) & 1 ? (int32_t)fuzz_u32(in) : 0};
        memcpy(msg, &r, sizeof(r));
        len = (uint32_t)(sizeof(r) +
                         fuzz_bytes(in, msg + sizeof(r), fuzz_u16(in) % (SMF_MAX_SEND - sizeof(r))));
        type = SM_T_GET_RESP;
        break;
    }
    case 6: { /* an atomic for this process to execute: mostly well formed */
        sm_amo_req_t a = {.op = fuzz_u8(in) % 0x30,
                          .flags = fuzz_u8(in) & 7 ? (uint16_t)((fuzz_u8(in) & 1) |
                                                                (fuzz_u8(in) & 3) << 8)
                                                   : fuzz_u16(in),
                          .reserved = fuzz_u8(in) & 7 ? 0 : fuzz_u32(in),
                          .cookie = fuzz_u64(in),
                          .operand = fuzz_u64(in),
                          .compare = fuzz_u64(in)};
        uint8_t k = fuzz_u8(in) % NKEYS;
        memcpy(&a.key, w->keys[k], sizeof(sm_key_t));
        /* Aligned for either width inside the buffer, or anywhere. */
        a.raddr = w->addrs[k] + (fuzz_u8(in) & 1 ? (uint64_t)(fuzz_u16(in) % 512) * 8
                                                : (uint64_t)(int64_t)(int16_t)fuzz_u16(in));
        memcpy(msg, &a, sizeof(a));
        len = fuzz_u8(in) & 7 ? sizeof(a) : (uint32_t)(fuzz_u16(in) % (sizeof(a) + 16));
        type = SM_T_AMO_REQ;
        break;
    }
    case 7: { /* an answer to an atomic nobody asked for, or garbled */
        sm_amo_answer_t a = {.status = (int32_t)fuzz_u32(in),
                             .reserved = fuzz_u8(in) & 3 ? 0 : fuzz_u32(in),
                             .cookie = fuzz_u64(in),
                             .operand = fuzz_u64(in)};
        memcpy(msg, &a, sizeof(a));
        len = fuzz_u8(in) & 7 ? sizeof(a) : (uint32_t)(fuzz_u16(in) % (sizeof(a) + 16));
        type = SM_T_AMO_ANSWER;
        break;
    }
    case 8: { /* a put with notification: mostly well formed */
        sm_putn_hdr_t h;
        uint8_t k = fuzz_u8(in) % NKEYS;
        memcpy(&h.key, w->keys[k], sizeof(h.key));
        h.raddr = w->addrs[k] + (uint64_t)(int64_t)(int16_t)fuzz_u16(in);
        h.flags = fuzz_u8(in) & 3 ? SM_PUTN_TELL * (fuzz_u8(in) & 1) : fuzz_u16(in);
        h.status = 0;
        size_t room = SMF_MAX_SEND - sizeof(h);
        size_t body = fuzz_bytes(in, msg + sizeof(h), fuzz_u16(in) % room);
        /* The notification's share of the body, or a length past it. */
        h.plen = fuzz_u8(in) & 7 ? (uint16_t)(body > 0 ? fuzz_u16(in) % (body + 1) : 0)
                                 : fuzz_u16(in);
        memcpy(msg, &h, sizeof(h));
        len = (uint32_t)(fuzz_u8(in) & 7 ? sizeof(h) + body : fuzz_u16(in) % sizeof(h));
        type = SM_T_PUTN;
        break;
    }
    case 4: /* a skip where none is due */
        type = SM_T_SKIP;
        len = fuzz_u16(in) % 512;
        memset(msg, 0, len);
        break;
    default: /* the fuzzer's own type */
        type = fuzz_u8(in);
        len = (uint32_t)fuzz_bytes(in, msg, fuzz_u16(in) % 256);
        break;
    }
    /* The header says what the fuzzer likes, now and then. */
    uint32_t hdr_len = mode & 1 ? fuzz_u32(in) : len;
    uint16_t lap_off = mode & 2 ? fuzz_u16(in) : 0;
    return smf_write(w->f, type, tag, msg, len, hdr_len, lap_off) != NULL;
}

/* Refusals of untracked puts with notification, as the initiator learns
 * of them (the fuzzer's messages count them in the same channel). */
static unsigned long putn_refusals;
static void on_putn_refused(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                            ferry_btl_reg_t *lreg, void *cbctx, void *cbdata, int status)
{
    (void)btl;
    (void)ep;
    (void)lreg;
    (void)cbctx;
    if (local != NULL || cbdata != NULL || status != FERRY_ERR_ACCESS) {
        fprintf(stderr, "fuzz_sm_ring: a refusal reported with local %p, cbdata %p, status %d\n",
                local, cbdata, status);
        abort();
    }
    putn_refusals++;
}

static void drain(world_t *w)
{
    smf_t *f = w->f;
    for (int rounds = 0; rounds < 64 && f->ep->polled; rounds++) {
        int got = sm_poll_channel(f->mod, f->ep);
        int sent = f->ep->state == SM_EP_CONNECTED ? sm_rdma_progress(f->mod, f->ep) : 0;
        if (got == 0 && sent == 0)
            break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static world_t w;
    if (w.f == NULL) {
        w.f = smf_get();
        world_init(&w);
    }
    fuzz_in_t in = {.data = data, .size = size};
    static const uint64_t laps[] = {0, 1, 2, 65533, 65534, 65535, 65536, 131071};
    uint8_t lap = fuzz_u8(&in);
    uint64_t start = laps[lap % 8] * SMF_RING + (uint64_t)fuzz_u8(&in) * SM_ALIGN;
    smf_reset(w.f, start);
    w.f->ep->putn_cb = on_putn_refused;
    w.f->ep->putn_cbctx = &w;
    w.f->ep->putn_seen = atomic_load(&w.f->ep->out->putn_refused);
    pending_gets(&w, &in);
    /* Batches: write what fits, let sm read and answer, write more. */
    for (int batch = 0; batch < 8 && in.pos < in.size; batch++) {
        while (one_message(&w, &in))
            ;
        smf_hand_over(w.f);
        drain(&w);
        if (w.f->ep->state != SM_EP_CONNECTED)
            break;
        w.f->wpos = w.f->ep->head;
    }
    if (memcmp(w.ro, w.ro_copy, w.ro_len) != 0) {
        fprintf(stderr, "fuzz_sm_ring: a read-only registration was written to\n");
        abort();
    }
    smf_settle(w.f);
    for (int i = 0; i < NGETS; i++) {
        free(w.get_buf[i]);
        w.get_buf[i] = NULL;
    }
    return 0;
}
