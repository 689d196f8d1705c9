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
 *
 * Requests to help with a cross-memory copy (SM_T_ASSIST) get a world of
 * their own, refilled for each input: registrations that may be read and
 * written, only read, only written, or were withdrawn, each between pages
 * of canary, and the initiator's memory (ours too: the endpoint is to
 * ourselves) with inaccessible pages after it. The fuzzer picks the
 * request's length, key, range, direction, job, piece size and reserved
 * word, and the claim, count and failure words of the channel it is read
 * with. After each request sm has read: a request no live registration
 * with the right allows leaves those words as they were (nothing was
 * copied); pieces taken are pieces counted, and a request allowed is helped
 * with in full; a malformed one is never read past without failing the
 * channel. At the end of the input no canary, read-only or withdrawn byte
 * has changed, and no byte of a region nobody may read (canary, withdrawn,
 * write-only) has reached the initiator's memory or a registration.
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

/* The copies' world: its pages, in this order. */
enum {
    AS_CANARY0 = 0,
    AS_RW = 1, /* two pages, read and write */
    AS_CANARY1 = 3,
    AS_RO = 4,
    AS_CANARY2 = 5,
    AS_WO = 6,
    AS_CANARY3 = 7,
    AS_DEAD = 8, /* registered, then withdrawn */
    AS_CANARY4 = 9,
    AS_SENDER = 10, /* four pages: the initiator's memory */
    AS_GUARD = 14,  /* three inaccessible pages, past any allowed length */
    AS_PAGES = 17
};
#define AS_PAGE 4096u
#define AS_SENDER_LEN (4 * AS_PAGE)
/* What each region holds at the start of an input. */
enum { AS_C = 0xc5, AS_R = 0x52, AS_O = 0x4f, AS_W = 0x57, AS_D = 0xd7, AS_S = 0x53 };
/* Keys of the copies: the live ones with their rights first (AK_LIVE of
 * them), then refused ones. */
enum {
    AK_RW,
    AK_RO,
    AK_WO,
    AK_GONE,  /* the world's unmapped registration: allowed, and faults */
    AK_DEAD,  /* withdrawn */
    AK_NONCE, /* the read-write one with a guessed nonce */
    AK_GEN,   /* the read-only one a generation later */
    AK_STALE, /* the world's withdrawn one, its memory freed */
    AK_N
};
#define AK_LIVE AK_DEAD

/* What a request to help is expected to do, from the moment it is written
 * until sm has read it. It is written alone, with everything before it
 * read, so that sm must read it next: nothing before it can skip it or
 * hold it back. */
typedef struct assist_expect {
    bool pending;
    bool judged;      /* its header is true: what follows holds */
    bool well_formed; /* by the receiver's rules (assist_well_formed) */
    bool allowed;     /* well formed, and a live key with the right allows it */
    uint64_t claim0, done0;
    uint32_t failed0;
    uint32_t job;
    uint64_t nchunks;
    uint64_t end; /* the ring position after it */
} assist_expect_t;

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
    /* Requests to help with copies. */
    unsigned char *as;
    uint8_t as_keys[AK_N][FERRY_BTL_KEY_MAX];
    uint64_t as_base[AK_LIVE], as_len[AK_LIVE];
    uint32_t as_access[AK_LIVE];
    assist_expect_t expect;
} world_t;

static unsigned char *as_page(const world_t *w, int page)
{
    return w->as + (size_t)page * AS_PAGE;
}

/* The regions as an input starts. */
static void assist_fill(world_t *w)
{
    static const struct {
        int page, pages, byte;
    } fill[] = {{AS_CANARY0, 1, AS_C}, {AS_RW, 2, AS_R},  {AS_CANARY1, 1, AS_C},
                {AS_RO, 1, AS_O},      {AS_CANARY2, 1, AS_C}, {AS_WO, 1, AS_W},
                {AS_CANARY3, 1, AS_C}, {AS_DEAD, 1, AS_D}, {AS_CANARY4, 1, AS_C},
                {AS_SENDER, 4, AS_S}};
    for (size_t i = 0; i < sizeof(fill) / sizeof(fill[0]); i++)
        memset(as_page(w, fill[i].page), fill[i].byte, (size_t)fill[i].pages * AS_PAGE);
}

static void assist_init(world_t *w)
{
    ferry_btl_module_t *btl = &w->f->mod->super;
    ferry_btl_reg_t *reg;
    w->as = mmap(NULL, (size_t)AS_PAGES * AS_PAGE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (w->as == MAP_FAILED ||
        mprotect(as_page(w, AS_GUARD), (size_t)(AS_PAGES - AS_GUARD) * AS_PAGE, PROT_NONE) != 0)
        abort();
    assist_fill(w);
    const uint32_t r = FERRY_ACCESS_REMOTE_READ, wr = FERRY_ACCESS_REMOTE_WRITE;
    const struct {
        int page, pages;
        uint32_t access;
    } regs[] = {{AS_RW, 2, r | wr}, {AS_RO, 1, r}, {AS_WO, 1, wr}};
    for (int k = 0; k < 3; k++) {
        if (btl->ops->register_mem(btl, NULL, as_page(w, regs[k].page),
                                   (size_t)regs[k].pages * AS_PAGE, regs[k].access,
                                   &reg) != FERRY_OK)
            abort();
        memcpy(w->as_keys[k], reg->key, sizeof(sm_key_t));
        w->as_base[k] = (uint64_t)(uintptr_t)as_page(w, regs[k].page);
        w->as_len[k] = (uint64_t)regs[k].pages * AS_PAGE;
        w->as_access[k] = regs[k].access;
    }
    memcpy(w->as_keys[AK_GONE], w->keys[2], sizeof(sm_key_t));
    w->as_base[AK_GONE] = w->addrs[2];
    w->as_len[AK_GONE] = (uint64_t)sysconf(_SC_PAGESIZE);
    w->as_access[AK_GONE] = r | wr;
    if (btl->ops->register_mem(btl, NULL, as_page(w, AS_DEAD), AS_PAGE, r | wr, &reg) !=
        FERRY_OK)
        abort();
    memcpy(w->as_keys[AK_DEAD], reg->key, sizeof(sm_key_t));
    btl->ops->deregister_mem(btl, reg);
    sm_key_t k;
    memcpy(&k, w->as_keys[AK_RW], sizeof(k));
    k.nonce ^= 0x100;
    memcpy(w->as_keys[AK_NONCE], &k, sizeof(k));
    memcpy(&k, w->as_keys[AK_RO], sizeof(k));
    k.gen += 2;
    memcpy(w->as_keys[AK_GEN], &k, sizeof(k));
    memcpy(w->as_keys[AK_STALE], w->keys[3], sizeof(sm_key_t));
}

/* The receiver's rules, as the protocol states them (sm.h): what fails the
 * channel. */
static bool assist_well_formed(const sm_assist_req_t *r)
{
    if (r->job == 0 || r->put > 1 || r->reserved != 0 || r->chunk != SM_ASSIST_CHUNK ||
        r->len == 0 ||
        r->len > UINT64_MAX - r->chunk || r->raddr > UINT64_MAX - r->len ||
        r->laddr > UINT64_MAX - r->len)
        return false;
    return (r->len + r->chunk - 1) / r->chunk <= SM_ASSIST_CHUNKS_MAX;
}

/* Whether a live registration of ours, with the right, covers the request.
 * Live: also not revoked by the unmap monitor (the harness's other message
 * kinds unmap and remap memory; the target refuses what the monitor saw
 * go). */
static bool assist_allowed(const world_t *w, const sm_assist_req_t *r)
{
    for (int k = 0; k < AK_LIVE; k++) {
        if (memcmp(&r->key, w->as_keys[k], sizeof(sm_key_t)) != 0)
            continue;
        const sm_module_t *mod = w->f->mod;
        uint32_t slot = r->key.slot;
        if (slot < mod->p.reg_slots && mod->regs[slot] != NULL &&
            atomic_load(&mod->regs[slot]->revoked))
            return false;
        uint32_t right = r->put ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ;
        return (w->as_access[k] & right) && r->raddr >= w->as_base[k] &&
               r->raddr - w->as_base[k] <= w->as_len[k] &&
               r->len <= w->as_len[k] - (r->raddr - w->as_base[k]);
    }
    return false;
}

/* A request to help with a copy, mostly well formed, and the words of the
 * channel it is read with. */
static void assist_message(world_t *w, fuzz_in_t *in, unsigned char *msg, uint32_t *len_out)
{
    ferry_btl_endpoint_t *ep = w->f->ep;
    uint8_t sel = fuzz_u8(in), shape = fuzz_u8(in);
    uint8_t k = fuzz_u8(in) % (AK_N + 1);
    sm_assist_req_t r;
    memset(&r, 0, sizeof(r));
    if (k < AK_N)
        memcpy(&r.key, w->as_keys[k], sizeof(r.key));
    else
        fuzz_bytes(in, &r.key, sizeof(r.key)); /* made up */
    /* The range: in and around a region, or anywhere. */
    uint64_t base = k < AK_LIVE ? w->as_base[k] : w->as_base[AK_RW];
    switch (shape & 3) {
    case 0:
    case 1:
        r.raddr = base + fuzz_u16(in) % (2 * AS_PAGE);
        break;
    case 2:
        r.raddr = base + (uint64_t)(int64_t)(int16_t)fuzz_u16(in);
        break;
    default:
        r.raddr = fuzz_u64(in);
        break;
    }
    r.len = shape & 4 ? fuzz_u64(in) : fuzz_u16(in) % (3 * AS_PAGE + 1);
    /* The initiator's side: its memory, low addresses nobody maps, or the
     * top of the address space (which may wrap). */
    uint8_t where = fuzz_u8(in);
    r.laddr = where % 8 == 0   ? 0x1000 + (uint64_t)fuzz_u16(in)
              : where % 8 == 1 ? UINT64_MAX - fuzz_u16(in)
                               : (uint64_t)(uintptr_t)as_page(w, AS_SENDER) +
                                     fuzz_u16(in) % AS_SENDER_LEN;
    switch ((shape >> 3) & 3) {
    case 0:
        r.chunk = SM_ASSIST_CHUNK;
        break;
    case 1:
        r.chunk = 1 + fuzz_u16(in) % 4096;
        break;
    case 2:
        r.chunk = fuzz_u32(in);
        break;
    default:
        r.chunk = 1 + fuzz_u8(in) % 64;
        break;
    }
    r.job = sel & 3 ? 1 + (uint32_t)fuzz_u8(in) % 3 : fuzz_u32(in);
    r.put = sel & 4 ? fuzz_u32(in) : (uint32_t)(fuzz_u8(in) & 1);
    r.reserved = sel & 8 ? fuzz_u32(in) : 0;
    uint32_t len = sel & 16 ? (uint32_t)(fuzz_u8(in) % (sizeof(r) + 16)) : (uint32_t)sizeof(r);
    memset(msg, 0, sizeof(r) + 16);
    memcpy(msg, &r, sizeof(r));

    /* The words: mostly this job at a low piece, sometimes anything. */
    sm_chan_t *ch = ep->out;
    uint8_t words = fuzz_u8(in);
    uint32_t cjob = words & 3 ? r.job : fuzz_u32(in);
    uint32_t c0 = words & 4 ? fuzz_u32(in) : fuzz_u8(in) % 4;
    uint32_t djob = words & 8 ? fuzz_u32(in) : cjob;
    uint32_t d0 = fuzz_u8(in);
    assist_expect_t *e = &w->expect;
    e->claim0 = (uint64_t)cjob << 32 | c0;
    e->done0 = (uint64_t)djob << 32 | d0;
    e->failed0 = words & 16 ? fuzz_u32(in) : 0;
    atomic_store(&ch->assist_claim, e->claim0);
    atomic_store(&ch->assist_done, e->done0);
    atomic_store(&ch->assist_failed, e->failed0);
    e->well_formed = len == sizeof(r) && assist_well_formed(&r);
    e->allowed = e->well_formed && assist_allowed(w, &r);
    e->job = r.job;
    e->nchunks = e->well_formed ? (r.len + r.chunk - 1) / r.chunk : 0;
    *len_out = len;
}

/* Judges the request in flight against what sm did (after a drain). */
static void assist_judge(world_t *w)
{
    assist_expect_t *e = &w->expect;
    if (!e->pending)
        return;
    ferry_btl_endpoint_t *ep = w->f->ep;
    sm_chan_t *ch = ep->out;
    uint64_t claim = atomic_load(&ch->assist_claim), done = atomic_load(&ch->assist_done);
    uint32_t failed = atomic_load(&ch->assist_failed);
    bool connected = ep->state == SM_EP_CONNECTED;
    bool read = ep->rpos >= e->end; /* sm is past it */
    e->pending = false;
    if (!e->judged)
        return;
    if (!e->allowed) {
        /* Nothing claimed, nothing copied, nothing counted. */
        CHECK_FUZZ(claim == e->claim0);
        CHECK_FUZZ(done == e->done0);
        CHECK_FUZZ(failed == e->failed0);
    }
    /* Each piece taken is counted, once. */
    CHECK_FUZZ(done - e->done0 == claim - e->claim0);
    if (e->allowed) {
        uint32_t c0 = (uint32_t)e->claim0;
        uint64_t left = (uint32_t)(e->claim0 >> 32) == e->job && c0 < e->nchunks
                            ? e->nchunks - c0
                            : 0;
        CHECK_FUZZ(claim - e->claim0 <= left);
        /* Nothing else claims: every piece left was taken. */
        if (w->f->mod->cma_ok && !ep->assist_refused)
            CHECK_FUZZ(claim - e->claim0 == left);
    }
    /* Read: a malformed request fails the channel, and only that. */
    CHECK_FUZZ(connected == e->well_formed);
    CHECK_FUZZ(!connected || read);
}

/* Memory nobody may write stays as it was, and bytes nobody may read are
 * nowhere else. */
static void assist_memory(const world_t *w)
{
    static const int canaries[] = {AS_CANARY0, AS_CANARY1, AS_CANARY2, AS_CANARY3, AS_CANARY4};
    for (size_t i = 0; i < sizeof(canaries) / sizeof(canaries[0]); i++) {
        const unsigned char *p = as_page(w, canaries[i]);
        for (size_t j = 0; j < AS_PAGE; j++)
            CHECK_FUZZ(p[j] == AS_C);
    }
    const unsigned char *p = as_page(w, AS_RO);
    for (size_t j = 0; j < AS_PAGE; j++)
        CHECK_FUZZ(p[j] == AS_O);
    p = as_page(w, AS_DEAD);
    for (size_t j = 0; j < AS_PAGE; j++)
        CHECK_FUZZ(p[j] == AS_D);
    /* Readable bytes only (the sender's, the read-write and read-only
     * regions'), and in the write-only region its own too. */
    p = as_page(w, AS_SENDER);
    for (size_t j = 0; j < AS_SENDER_LEN; j++)
        CHECK_FUZZ(p[j] == AS_S || p[j] == AS_R || p[j] == AS_O);
    p = as_page(w, AS_RW);
    for (size_t j = 0; j < 2 * AS_PAGE; j++)
        CHECK_FUZZ(p[j] == AS_S || p[j] == AS_R || p[j] == AS_O);
    p = as_page(w, AS_WO);
    for (size_t j = 0; j < AS_PAGE; j++)
        CHECK_FUZZ(p[j] == AS_S || p[j] == AS_R || p[j] == AS_O || p[j] == AS_W);
}

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
    size_t at = in->pos;
    uint8_t kind = fuzz_u8(in);
    uint8_t tag = fuzz_u8(in);
    uint8_t mode = fuzz_u8(in);
    unsigned char msg[SMF_MAX_SEND];
    uint32_t len = 0;
    uint8_t type;
    bool assist = false;
    switch (kind % 10) {
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
    case 9: /* a request to help with a copy: mostly well formed */
        if (w->f->wpos != w->f->ep->rpos) {
            /* Written first in the next batch, once sm read the rest. */
            in->pos = at;
            return false;
        }
        assist_message(w, in, msg, &len);
        type = SM_T_ASSIST;
        assist = true;
        break;
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
    if (!assist)
        return smf_write(w->f, type, tag, msg, len, hdr_len, lap_off) != NULL;
    if (smf_write(w->f, type, tag, msg, len, hdr_len, lap_off) == NULL)
        return false;
    /* Judged only with a true header: one of another lap is not read, and
     * one that lies about the length is read with whatever the ring held
     * after it. The batch ends here, so that sm reads it alone, with the
     * words just set. */
    assist_expect_t *e = &w->expect;
    e->judged = hdr_len == len && lap_off == 0;
    e->end = w->f->wpos;
    e->pending = true;
    return false;
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
        assist_init(&w);
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
    assist_fill(&w);
    w.expect.pending = false;
    /* Batches: write what fits, let sm read and answer, write more. */
    for (int batch = 0; batch < 8 && in.pos < in.size; batch++) {
        while (one_message(&w, &in))
            ;
        smf_hand_over(w.f);
        drain(&w);
        assist_judge(&w);
        if (w.f->ep->state != SM_EP_CONNECTED)
            break;
        w.f->wpos = w.f->ep->head;
    }
    if (memcmp(w.ro, w.ro_copy, w.ro_len) != 0) {
        fprintf(stderr, "fuzz_sm_ring: a read-only registration was written to\n");
        abort();
    }
    assist_memory(&w);
    smf_settle(w.f);
    for (int i = 0; i < NGETS; i++) {
        free(w.get_buf[i]);
        w.get_buf[i] = NULL;
    }
    return 0;
}
