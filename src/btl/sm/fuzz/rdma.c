/*
 * Fuzz harness: sm's answers to a peer's ring-path puts and get requests,
 * against a real registration table that changes between them.
 *
 * The input is a program: register part of a buffer with some rights,
 * deregister it, unmap it without deregistering, send a put chunk or a get
 * request with a key that is current, stale, forged (the right slot and
 * generation, a made-up nonce) or raw bytes, at an address inside or
 * outside the registration, and let sm answer. An oracle keeps a shadow of
 * every buffer and checks each outcome: a put lands exactly when the key
 * names a live registration covering the range with REMOTE_WRITE (and its
 * memory is still mapped), and leaves memory untouched otherwise; its last
 * chunk carries FERRY_ERR_ACCESS exactly when a chunk of it was refused;
 * each answer to a get is checked at the moment it is written, against the
 * registrations as they are then, and carries the buffer's bytes or
 * FERRY_ERR_ACCESS. Any difference aborts (a finding), as does a fault.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "sm_fuzz.h"

#define NBUF 4
#define NJOBS 4 /* FERRY_SM_GET_SLOTS in sm_fuzz.c */

typedef struct buf {
    unsigned char *mem;
    size_t size;
    bool mmapped;
    bool mapped;
    unsigned char *shadow;
    ferry_btl_reg_t *reg; /* current registration, or NULL */
    uint8_t stale[FERRY_BTL_KEY_MAX]; /* key of the last one deregistered */
    bool have_stale;
} buf_t;

typedef struct job {
    sm_get_req_t req;
    uint64_t sent;
    bool refused;
} job_t;

typedef struct world {
    smf_t *f;
    buf_t bufs[NBUF];
    job_t jobs[NJOBS];
    int njobs, job_head;
    bool put_refused;
    uint64_t rpos; /* where we read sm's answers */
    size_t page;
} world_t;

#define FINDING(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, "fuzz_sm_rdma: " __VA_ARGS__);                                             \
        fprintf(stderr, "\n");                                                                     \
        abort();                                                                                   \
    } while (0)

static void buffers_make(world_t *w, fuzz_in_t *in)
{
    size_t sizes[NBUF] = {1 + fuzz_u16(in) % 8192, 64, 2 * w->page, w->page};
    for (int i = 0; i < NBUF; i++) {
        buf_t *b = &w->bufs[i];
        memset(b, 0, sizeof(*b));
        b->size = sizes[i];
        b->mmapped = i >= 2;
        if (b->mmapped) {
            void *p = mmap(NULL, b->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
            if (p == MAP_FAILED)
                abort();
            b->mem = p;
        } else {
            b->mem = malloc(b->size);
        }
        b->shadow = malloc(b->size);
        if (b->mem == NULL || b->shadow == NULL)
            abort();
        for (size_t j = 0; j < b->size; j++)
            b->mem[j] = b->shadow[j] = (unsigned char)(j * 131 + (size_t)i * 17 + 1);
        b->mapped = true;
    }
}

static void buffers_free(world_t *w)
{
    ferry_btl_module_t *btl = &w->f->mod->super;
    for (int i = 0; i < NBUF; i++) {
        buf_t *b = &w->bufs[i];
        if (b->reg != NULL && btl->ops->deregister_mem(btl, b->reg) != FERRY_OK)
            FINDING("deregistering a live registration failed");
        if (b->mmapped)
            munmap(b->mem, b->size);
        else
            free(b->mem);
        free(b->shadow);
    }
}

/* Does key name a live registration covering [addr, addr + len) with need,
 * on memory still mapped? Which buffer, then. */
static buf_t *oracle(world_t *w, const uint8_t *key, uint64_t addr, uint64_t len, uint32_t need)
{
    for (int i = 0; i < NBUF; i++) {
        buf_t *b = &w->bufs[i];
        if (b->reg == NULL || memcmp(key, b->reg->key, sizeof(sm_key_t)) != 0)
            continue;
        uint64_t base = (uint64_t)(uintptr_t)b->reg->base;
        if (!b->mapped || (b->reg->access & need) != need || addr < base ||
            addr - base > b->reg->len || len > b->reg->len - (addr - base))
            return NULL;
        return b;
    }
    return NULL;
}

static void check_memory(world_t *w, const char *after)
{
    for (int i = 0; i < NBUF; i++) {
        buf_t *b = &w->bufs[i];
        if (b->mapped && memcmp(b->mem, b->shadow, b->size) != 0)
            FINDING("buffer %d differs from its shadow after %s", i, after);
    }
}

/* A key for an operation: current, stale, forged or raw. */
static void pick_key(world_t *w, fuzz_in_t *in, uint8_t *key, buf_t **b_out)
{
    uint8_t sel = fuzz_u8(in);
    buf_t *b = &w->bufs[sel % NBUF];
    *b_out = b;
    memset(key, 0, FERRY_BTL_KEY_MAX);
    switch ((sel / NBUF) % 5) {
    case 0: /* the current key */
    case 1:
        if (b->reg != NULL)
            memcpy(key, b->reg->key, sizeof(sm_key_t));
        break;
    case 2: /* a key of a registration since withdrawn */
        if (b->have_stale)
            memcpy(key, b->stale, sizeof(sm_key_t));
        break;
    case 3: /* the slot and generation, a guessed nonce */
        if (b->reg != NULL) {
            sm_key_t k;
            memcpy(&k, b->reg->key, sizeof(k));
            k.nonce = fuzz_u8(in) & 1 ? fuzz_u64(in) : 0;
            memcpy(key, &k, sizeof(k));
        }
        break;
    default: /* anything */
        fuzz_bytes(in, key, sizeof(sm_key_t));
        break;
    }
}

/* An address: relative to the buffer (inside, at its edges, outside) or raw. */
static uint64_t pick_addr(fuzz_in_t *in, const buf_t *b)
{
    uint8_t how = fuzz_u8(in);
    if (how % 8 == 7)
        return fuzz_u64(in);
    int32_t off = (int16_t)fuzz_u16(in);
    return (uint64_t)(uintptr_t)b->mem + (uint64_t)(int64_t)off;
}

static void op_register(world_t *w, fuzz_in_t *in)
{
    buf_t *b = &w->bufs[fuzz_u8(in) % NBUF];
    uint8_t rights = fuzz_u8(in);
    size_t off = fuzz_u16(in) % b->size;
    size_t len = 1 + fuzz_u16(in) % (b->size - off);
    if (b->reg != NULL || !b->mapped)
        return;
    uint32_t access = FERRY_ACCESS_LOCAL;
    if (rights & 1)
        access |= FERRY_ACCESS_REMOTE_READ;
    if (rights & 2)
        access |= FERRY_ACCESS_REMOTE_WRITE;
    ferry_btl_module_t *btl = &w->f->mod->super;
    if (btl->ops->register_mem(btl, NULL, b->mem + off, len, access, &b->reg) != FERRY_OK)
        FINDING("register_mem of a mapped buffer failed");
}

static void op_deregister(world_t *w, fuzz_in_t *in)
{
    buf_t *b = &w->bufs[fuzz_u8(in) % NBUF];
    if (b->reg == NULL)
        return;
    memcpy(b->stale, b->reg->key, sizeof(sm_key_t));
    b->have_stale = true;
    ferry_btl_module_t *btl = &w->f->mod->super;
    if (btl->ops->deregister_mem(btl, b->reg) != FERRY_OK)
        FINDING("deregister_mem of a live registration failed");
    b->reg = NULL;
}

/* Unmapped while (perhaps) registered: sm must refuse it from now on. An
 * inaccessible mapping takes its place (the kernel reports that as an
 * unmap too), so that nothing else lands at the address while a stale
 * registration still points there. */
static void op_unmap(world_t *w, fuzz_in_t *in)
{
    buf_t *b = &w->bufs[2 + fuzz_u8(in) % 2];
    if (!b->mapped)
        return;
    if (mmap(b->mem, b->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
        MAP_FAILED)
        abort();
    b->mapped = false;
}

/* The endpoint failed on a malformed message: as a new peer would start. */
static void restart(world_t *w)
{
    smf_settle(w->f);
    w->njobs = 0;
    w->job_head = 0;
    w->put_refused = false;
    w->rpos = w->f->ep->head;
}

static void op_put(world_t *w, fuzz_in_t *in)
{
    unsigned char msg[SMF_MAX_SEND];
    sm_put_hdr_t hdr;
    buf_t *b;
    uint8_t keybytes[FERRY_BTL_KEY_MAX];
    pick_key(w, in, keybytes, &b);
    memset(&hdr, 0, sizeof(hdr));
    memcpy(&hdr.key, keybytes, sizeof(hdr.key));
    hdr.raddr = pick_addr(in, b);
    uint8_t flags = fuzz_u8(in);
    hdr.flags = flags & 1 ? SM_PUT_LAST : 0;
    hdr.status = (int32_t)fuzz_u32(in); /* the target overwrites it on the last chunk */
    size_t n = fuzz_u16(in) % (sizeof(msg) - sizeof(hdr) + 1);
    memcpy(msg, &hdr, sizeof(hdr));
    n = fuzz_bytes(in, msg + sizeof(hdr), n);
    uint32_t len = (uint32_t)(sizeof(hdr) + n);
    if (flags & 2) {
        /* Truncated: the peer is cut off. */
        sm_rdma_handle(w->f->mod, w->f->ep, SM_T_PUT, msg, (uint32_t)(fuzz_u8(in) % sizeof(hdr)));
        if (w->f->ep->state != SM_EP_FAILED)
            FINDING("a truncated put did not fail the peer");
        restart(w);
        return;
    }
    buf_t *target = oracle(w, keybytes, hdr.raddr, n, FERRY_ACCESS_REMOTE_WRITE);
    if (!sm_rdma_handle(w->f->mod, w->f->ep, SM_T_PUT, msg, len))
        FINDING("a put was left in the ring");
    if (w->f->ep->state != SM_EP_CONNECTED)
        FINDING("a well-formed put failed the peer");
    if (target != NULL)
        memcpy(target->shadow + (hdr.raddr - (uint64_t)(uintptr_t)target->mem), msg + sizeof(hdr),
               n);
    else
        w->put_refused = true;
    if (hdr.flags & SM_PUT_LAST) {
        int32_t status;
        memcpy(&status, msg + offsetof(sm_put_hdr_t, status), sizeof(status));
        if (status != (w->put_refused ? FERRY_ERR_ACCESS : FERRY_OK))
            FINDING("the last chunk says %d, the put was %s", status,
                    w->put_refused ? "refused" : "accepted");
        w->put_refused = false;
    }
    check_memory(w, "a put");
}

static void op_get_req(world_t *w, fuzz_in_t *in)
{
    sm_get_req_t req;
    buf_t *b;
    uint8_t key[FERRY_BTL_KEY_MAX];
    pick_key(w, in, key, &b);
    memcpy(&req.key, key, sizeof(req.key));
    req.raddr = pick_addr(in, b);
    uint8_t how = fuzz_u8(in);
    req.len = how % 8 == 7 ? fuzz_u64(in) : fuzz_u16(in) % (3 * SMF_MAX_SEND);
    req.cookie = fuzz_u64(in);
    if (how & 0x40) {
        /* Malformed: the peer is cut off. */
        sm_rdma_handle(w->f->mod, w->f->ep, SM_T_GET_REQ, (unsigned char *)&req,
                       (uint32_t)(fuzz_u8(in) % sizeof(req)));
        if (w->f->ep->state != SM_EP_FAILED)
            FINDING("a malformed get request did not fail the peer");
        restart(w);
        return;
    }
    bool taken = sm_rdma_handle(w->f->mod, w->f->ep, SM_T_GET_REQ, (unsigned char *)&req,
                                sizeof(req));
    if (taken != (w->njobs < NJOBS))
        FINDING("a get request was %s with %d of %d slots busy", taken ? "taken" : "left",
                w->njobs, NJOBS);
    if (!taken)
        return;
    w->jobs[(w->job_head + w->njobs) % NJOBS] = (job_t){.req = req};
    w->njobs++;
}

/* Lets sm answer what it can, reads every answer and checks it against the
 * registrations as they are now. */
static void op_pump(world_t *w)
{
    smf_t *f = w->f;
    if (sm_rdma_progress(f->mod, f->ep) < 0)
        FINDING("rdma progress failed");
    uint8_t type;
    const unsigned char *msg;
    uint32_t len;
    const size_t chunk_max = SMF_MAX_SEND - sizeof(sm_get_resp_t);
    while (smf_read(f, &w->rpos, &type, &msg, &len)) {
        if (type != SM_T_GET_RESP || len < sizeof(sm_get_resp_t))
            FINDING("sm wrote a message of type %u, %u bytes", type, len);
        if (w->njobs == 0)
            FINDING("an answer to no request");
        job_t *job = &w->jobs[w->job_head];
        sm_get_resp_t resp;
        memcpy(&resp, msg, sizeof(resp));
        uint64_t n = len - sizeof(resp);
        uint64_t want = job->req.len - job->sent < chunk_max ? job->req.len - job->sent
                                                             : chunk_max;
        buf_t *src = oracle(w, (const uint8_t *)&job->req.key, job->req.raddr + job->sent, want,
                            FERRY_ACCESS_REMOTE_READ);
        if (resp.cookie != job->req.cookie || resp.offset != job->sent)
            FINDING("answer for cookie %llu at %llu, expected %llu at %llu",
                    (unsigned long long)resp.cookie, (unsigned long long)resp.offset,
                    (unsigned long long)job->req.cookie, (unsigned long long)job->sent);
        if (src == NULL) {
            if (resp.status != FERRY_ERR_ACCESS)
                FINDING("a chunk outside any live registration was answered with %d",
                        resp.status);
        } else {
            const unsigned char *from =
                src->shadow + (job->req.raddr + job->sent - (uint64_t)(uintptr_t)src->mem);
            if (resp.status != FERRY_OK || n != want ||
                memcmp(msg + sizeof(resp), from, (size_t)n) != 0)
                FINDING("a chunk of a live registration came back wrong (status %d, %llu of "
                        "%llu bytes)",
                        resp.status, (unsigned long long)n, (unsigned long long)want);
        }
        job->sent += resp.status == FERRY_OK ? n : 0;
        if (resp.status != FERRY_OK || job->sent == job->req.len) {
            w->job_head = (w->job_head + 1) % NJOBS;
            w->njobs--;
        }
    }
    /* What we read is consumed: the credits go back. */
    f->ep->rpos = w->rpos;
    atomic_store(&f->ep->in->tail, w->rpos);
    if (f->ep->njobs != (uint32_t)w->njobs)
        FINDING("sm holds %u get jobs, the oracle %d", f->ep->njobs, w->njobs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static world_t w;
    if (w.f == NULL) {
        w.f = smf_get();
        w.page = (size_t)sysconf(_SC_PAGESIZE);
    }
    fuzz_in_t in = {.data = data, .size = size};
    smf_reset(w.f, (uint64_t)fuzz_u16(&in) * SM_ALIGN * 7);
    w.njobs = w.job_head = 0;
    w.put_refused = false;
    w.rpos = w.f->ep->head;
    buffers_make(&w, &in);
    for (int steps = 0; steps < 64 && in.pos < in.size; steps++) {
        switch (fuzz_u8(&in) % 7) {
        case 0:
            op_register(&w, &in);
            break;
        case 1:
            op_deregister(&w, &in);
            break;
        case 2:
            op_unmap(&w, &in);
            break;
        case 3:
            op_put(&w, &in);
            break;
        case 4:
        case 5:
            op_get_req(&w, &in);
            break;
        default:
            op_pump(&w);
            break;
        }
    }
    for (int i = 0; i < 16 && w.njobs > 0; i++)
        op_pump(&w);
    if (w.njobs > 0)
        FINDING("%d get jobs never finished", w.njobs);
    check_memory(&w, "the input");
    smf_settle(w.f);
    buffers_free(&w);
    return 0;
}
