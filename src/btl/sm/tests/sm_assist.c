/*
 * Copies both ends share: a cross-memory put or get of FERRY_SM_CMA_ASSIST
 * bytes or more, which the target helps copy once the initiator asks with
 * SM_T_ASSIST (sm_rdma.c). Tried for its data, and as an attacker would,
 * from either end. Rank 0 and rank 1 are the two ends.
 *
 * usage (under ferryrun -n 2): sm_assist CASE
 *   data           rank 0 gets and puts many sizes, around the piece size
 *                  and FERRY_SM_CMA_ASSIST, at odd offsets of rank 1's
 *                  registration while rank 1 progresses, and checks every
 *                  byte: a get against rank 0's image of rank 1's buffer, a
 *                  put by reading it back (with copies of one piece, never
 *                  helped) and, at the end, by rank 1 comparing its buffer
 *                  with the image's checksum. Rank 0 goes on with large gets
 *                  until rank 1 has taken a piece of one: run_assist.sh
 *                  checks that rank 1's log says so.
 *   data_noassist  the same with FERRY_SM_CMA_ASSIST=0: no job is numbered
 *                  and nobody takes a piece for anybody.
 *   badkey         rank 1, a hostile initiator, asks rank 0 to help with
 *                  copies rank 0's registrations do not allow: made-up and
 *                  stale keys, ranges past a registration, a put into
 *                  read-only memory. Rank 0 copies nothing (the claim and
 *                  count words stay as rank 1 set them, both ends' memory is
 *                  unchanged) and keeps the channel: messages flow both ways
 *                  afterwards. A last request that is allowed shows that
 *                  rank 0 does take requests made this way.
 *   revoked        rank 0 unmaps a registration without withdrawing it and
 *                  maps other memory at its address (the unmap monitor
 *                  marks it revoked); rank 1 then asks for help with a get
 *                  and a put through its key: rank 0 copies neither, as its
 *                  ring path refuses such memory (README.md, "Unmapped
 *                  memory"). Skipped without the monitor.
 *   claims         rank 1 asks for help with a get of a real registration,
 *                  and a thread of it sets the claim word back to the first
 *                  piece whenever rank 0 takes one: rank 0 takes at most
 *                  twice the pieces and 64 more, counts each, and goes on
 *                  with the channel.
 *   done           rank 1, a hostile target, takes a piece of rank 0's get
 *                  and, while rank 0 waits for it, writes another job's
 *                  number into the count word: rank 0 fails rank 1 (error
 *                  callback) and the get completes with FERRY_ERR_UNREACH.
 *   claims_target  rank 1, a hostile target, sets rank 0's claim word back
 *                  to the first piece while rank 0 copies: rank 0's get must
 *                  return, and complete within seconds, with the data or
 *                  with an error and rank 1 failed.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "unit/btl_rdma.h"
#include "unit/check.h"
#include "sm_pair.h"
#include "btl/sm/sm.h"

#define TAG_INFO 20
#define TAG_PING 21
#define TAG_PONG 22
#define TAG_DONE 23
#define TAG_PROBE 24
#define TAG_PROBED 25
#define TAG_GO 26
#define TAG_RESETS 27

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)
#define PIECE ((size_t)SM_ASSIST_CHUNK)

/* A registration of one rank, as the other needs it. */
typedef struct info {
    uint64_t addr;
    uint64_t len;
    uint8_t key[FERRY_BTL_KEY_MAX]; /* sm's key (the hostile cases) */
    ferry_rkey_t rkey;              /* ferry's packed key (the data cases) */
} info_t;

typedef struct probe {
    int64_t pid;
    uint64_t addr;
} probe_t;

#define MAX_INFO 4

typedef struct state {
    sm_module_t *mod;
    info_t info[MAX_INFO];
    int ninfo;
    int pings, pongs;
    uint64_t pong_value; /* the assist_given of the rank that answered */
    bool done;
    uint64_t done_value;
    bool go;
    uint64_t go_value;
    bool have_probe;
    probe_t probe;
    bool probed;
    int32_t probed_ok;
    int resets_reported;
    int failures;
    int failed_peer;
    char msg[256];
} state_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void on_info(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    state_t *st = arg;
    CHECK(len == sizeof(info_t) && st->ninfo < MAX_INFO);
    memcpy(&st->info[st->ninfo++], data, sizeof(info_t));
}

static void on_ping(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    state_t *st = arg;
    st->pings++;
    uint64_t given = st->mod->assist_given;
    CHECK(ferry_am_send(ctx, src, TAG_PONG, &given, sizeof(given)) == FERRY_OK);
}

static void on_word(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    state_t *st = arg;
    uint64_t v = 0;
    CHECK(len <= sizeof(v));
    memcpy(&v, data, len);
    if (tag == TAG_PONG) {
        st->pongs++;
        st->pong_value = v;
    } else if (tag == TAG_DONE) {
        st->done = true;
        st->done_value = v;
    } else if (tag == TAG_GO) {
        st->go = true;
        st->go_value = v;
    } else if (tag == TAG_PROBED) {
        st->probed = true;
        st->probed_ok = (int32_t)v;
    } else {
        st->resets_reported += (int)v;
    }
}

static void on_probe(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    state_t *st = arg;
    CHECK(len == sizeof(probe_t));
    memcpy(&st->probe, data, sizeof(probe_t));
    st->have_probe = true;
}

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    state_t *st = arg;
    st->failures++;
    st->failed_peer = peer;
    snprintf(st->msg, sizeof(st->msg), "%s", msg);
    printf("rank %d: peer %d failed: %s (%s)\n", ferry_rank(ctx), peer, msg,
           ferry_strerror(status));
}

static void send_retry(ferry_ctx_t *ctx, int dst, int tag, const void *data, size_t len)
{
    int rc;
    while ((rc = ferry_am_send(ctx, dst, tag, data, len)) == FERRY_ERR_NO_RESOURCE)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(rc == FERRY_OK);
}

static void send_word(ferry_ctx_t *ctx, int dst, int tag, uint64_t v)
{
    send_retry(ctx, dst, tag, &v, sizeof(v));
}

/* A ping and its answer: everything sent to dst before has been handled
 * there. Returns the answer's word. */
static uint64_t ping(ferry_ctx_t *ctx, state_t *st, int dst)
{
    int want = st->pongs + 1;
    send_word(ctx, dst, TAG_PING, 0);
    while (st->pongs < want)
        CHECK(ferry_progress(ctx) >= 0);
    return st->pong_value;
}

static void wait_infos(ferry_ctx_t *ctx, state_t *st, int n)
{
    while (st->ninfo < n)
        CHECK(ferry_progress(ctx) >= 0);
}

static void wait_done(ferry_ctx_t *ctx, state_t *st)
{
    while (!st->done)
        CHECK(ferry_progress(ctx) >= 0);
}

static volatile uint64_t probe_word = 0x70726f6265ull;

/* Whether process_vm_readv reaches the other rank and the other rank us:
 * sm's cross-memory copies, and so the help, need it both ways. Both ranks
 * learn the same answer. */
static bool cma_both_ways(ferry_ctx_t *ctx, state_t *st)
{
    int peer = 1 - ferry_rank(ctx);
    probe_t mine = {.pid = getpid(), .addr = (uint64_t)(uintptr_t)&probe_word};
    send_retry(ctx, peer, TAG_PROBE, &mine, sizeof(mine));
    while (!st->have_probe)
        CHECK(ferry_progress(ctx) >= 0);
    uint64_t got = 0;
    struct iovec l = {.iov_base = &got, .iov_len = sizeof(got)};
    struct iovec r = {.iov_base = (void *)(uintptr_t)st->probe.addr, .iov_len = sizeof(got)};
    bool ok = process_vm_readv((pid_t)st->probe.pid, &l, 1, &r, 1, 0) == (ssize_t)sizeof(got) &&
              got == probe_word;
    send_word(ctx, peer, TAG_PROBED, ok);
    while (!st->probed)
        CHECK(ferry_progress(ctx) >= 0);
    return ok && st->probed_ok != 0;
}

/* ---- operations ---- */

typedef struct op {
    bool done;
    int status;
    ferry_btl_desc_t *des;
} op_t;

static void on_comp(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                    int status)
{
    op_t *op = des->cbdata;
    op->status = status;
    op->done = true;
}

/* Starts a put or get straight through sm, so that nothing above it splits
 * or checks it. A refusal at once completes op with its status. */
static void op_start(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, bool put, void *local,
                     size_t len, uint64_t raddr, const uint8_t *key, op_t *op)
{
    ferry_btl_desc_t *des = test_rdma_desc(btl, ep, put, local, len, raddr, key);
    *op = (op_t){.done = false, .status = 0, .des = des};
    des->cbfunc = on_comp;
    des->cbdata = op;
    int rc = put ? btl->ops->put(btl, ep, des) : btl->ops->get(btl, ep, des);
    if (rc != FERRY_OK) {
        btl->ops->free(btl, des);
        *op = (op_t){.done = true, .status = rc, .des = NULL};
    }
}

/* Progresses until op completes or seconds pass; true when it completed
 * (its descriptor is then freed). */
static bool op_wait(ferry_ctx_t *ctx, ferry_btl_module_t *btl, op_t *op, double seconds)
{
    double end = now_s() + seconds;
    while (!op->done && now_s() < end)
        CHECK(ferry_progress(ctx) >= 0);
    if (op->done && op->des != NULL) {
        btl->ops->free(btl, op->des);
        op->des = NULL;
    }
    return op->done;
}

typedef struct comp {
    bool done;
    int status;
} comp_t;

static void on_api_comp(void *arg, int status)
{
    comp_t *c = arg;
    c->status = status;
    c->done = true;
}

/* A put or get through ferry's API, waited for. */
static int api_op(ferry_ctx_t *ctx, int dst, bool put, void *buf, size_t len, uint64_t raddr,
                  const ferry_rkey_t *rkey)
{
    comp_t c = {false, 0};
    int rc = put ? ferry_put(ctx, dst, buf, len, NULL, raddr, rkey, on_api_comp, &c)
                 : ferry_get(ctx, dst, buf, len, NULL, raddr, rkey, on_api_comp, &c);
    if (rc != FERRY_OK)
        return rc;
    while (!c.done)
        CHECK(ferry_progress(ctx) >= 0);
    return c.status;
}

/* Publishes a message of ours in ep's ring as sm would (the channel goes on
 * afterwards). */
static void ring_send(ferry_ctx_t *ctx, ferry_btl_endpoint_t *ep, uint8_t type, const void *msg,
                      uint32_t len)
{
    unsigned char *slot;
    uint64_t pos;
    while (!sm_ring_reserve(ep, len, &slot, &pos))
        CHECK(ferry_progress(ctx) >= 0);
    memcpy(slot, msg, len);
    sm_ring_commit(ep, pos, len, 0, type);
}

static unsigned char *map(size_t len, int fill)
{
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    memset(p, fill, len);
    return p;
}

/* Whether [p, p + len) holds only byte b; prints where it does not. */
static bool all(const char *what, const unsigned char *p, size_t len, int b)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != (unsigned char)b) {
            printf("%s: byte %zu is 0x%02x, not 0x%02x\n", what, i, p[i], b);
            return false;
        }
    return true;
}

static bool same(const char *what, const unsigned char *got, const unsigned char *want,
                 size_t len, size_t where)
{
    for (size_t i = 0; i < len; i++)
        if (got[i] != want[i]) {
            printf("%s: byte %zu (at %zu) is 0x%02x, not 0x%02x\n", what, i, where + i, got[i],
                   want[i]);
            return false;
        }
    return true;
}

/* An sm registration of ours, told to the peer with its sm key. */
static ferry_btl_reg_t *register_and_tell(ferry_ctx_t *ctx, ferry_btl_module_t *btl, void *buf,
                                          size_t len, uint32_t access)
{
    ferry_btl_reg_t *reg = NULL;
    CHECK(btl->ops->register_mem(btl, NULL, buf, len, access, &reg) == FERRY_OK);
    info_t info = {.addr = (uint64_t)(uintptr_t)buf, .len = len};
    memcpy(info.key, reg->key, btl->attr.reg_handle_size);
    send_retry(ctx, 1 - ferry_rank(ctx), TAG_INFO, &info, sizeof(info));
    return reg;
}

/* ---- data ---- */

#define DATA_LEN (9 * MIB + 4 * KIB)
/* Read-back copies: one piece, never helped whatever FERRY_SM_CMA_ASSIST
 * says (a copy of one piece is not worth the message). */
#define READBACK PIECE
#define GUARD 64

static unsigned char image_byte(size_t i)
{
    return (unsigned char)(i * 131u + (i >> 11) * 7u + 5u);
}

static uint64_t fnv(const unsigned char *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Reads [off, off + len) of rank 1's buffer back and compares it with the
 * image. */
static void check_image(ferry_ctx_t *ctx, const info_t *info, const unsigned char *image,
                        size_t off, size_t len)
{
    static unsigned char piece[READBACK];
    for (size_t at = off; at < off + len;) {
        size_t n = off + len - at < READBACK ? off + len - at : READBACK;
        CHECK(api_op(ctx, 1, false, piece, n, info->addr + at, &info->rkey) == FERRY_OK);
        CHECK(same("read back", piece, image + at, n, at));
        at += n;
    }
}

static void data_initiator(ferry_ctx_t *ctx, state_t *st, bool assist)
{
    /* Around the threshold (the first three), one piece, two, and many;
     * the last ones are cut into several operations by ferry. */
    size_t threshold = st->mod->p.cma_assist > 0 ? st->mod->p.cma_assist : 2 * PIECE;
    const size_t sizes[] = {
        threshold - 1,  threshold,      threshold + 1,  PIECE + 1,     2 * PIECE - 1,
        2 * PIECE,      2 * PIECE + 1,  256 * KIB - 1,  256 * KIB,     256 * KIB + 1,
        4 * PIECE + 1,  5 * PIECE - 1,  5 * PIECE + 1,  8 * PIECE - 1, 8 * PIECE + 1,
        16 * PIECE - 1, 16 * PIECE + 1, MIB,            48 * PIECE - 1, 48 * PIECE + 1,
        3 * MIB + 13,   4 * MIB,        4 * MIB + 1,    6 * MIB + 3,   9 * MIB - 1,
    };
    ferry_btl_endpoint_t *ep = ctx->peers[1].ep;
    wait_infos(ctx, st, 1);
    const info_t *info = &st->info[0];
    CHECK(info->len == DATA_LEN);
    unsigned char *image = malloc(DATA_LEN);
    size_t lbuf_len = DATA_LEN + 2 * GUARD + 64;
    unsigned char *lbuf = malloc(lbuf_len);
    CHECK(image != NULL && lbuf != NULL);
    for (size_t i = 0; i < DATA_LEN; i++)
        image[i] = image_byte(i);

    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t len = sizes[k];
        CHECK(len + 2 <= DATA_LEN);
        /* Odd offsets at both ends, one byte of rank 1's buffer left on
         * either side. */
        size_t room = (DATA_LEN - len - 2) / 2;
        size_t off = 1 + 2 * ((k * 104729u) % (room + 1));
        unsigned char *local = lbuf + GUARD + (2 * k + 1) % 63;
        size_t before = (size_t)(local - lbuf), after = lbuf_len - before - len;

        memset(lbuf, 0xee, lbuf_len);
        CHECK(api_op(ctx, 1, false, local, len, info->addr + off, &info->rkey) == FERRY_OK);
        CHECK(same("get", local, image + off, len, off));
        CHECK(all("before the get's buffer", lbuf, before, 0xee));
        CHECK(all("after the get's buffer", local + len, after, 0xee));

        for (size_t i = 0; i < len; i++)
            local[i] = (unsigned char)(k * 29u + i * 17u + (i >> 9));
        CHECK(api_op(ctx, 1, true, local, len, info->addr + off, &info->rkey) == FERRY_OK);
        memcpy(image + off, local, len);
        check_image(ctx, info, image, off - 1, len + 2);
        printf("rank 0: get and put of %zu bytes at offset %zu: right\n", len, off);
    }

    sm_module_t *mod = st->mod;
    if (assist) {
        /* Rank 1 takes pieces only while it runs: more large gets until it
         * has taken some. */
        int gets = 0;
        while (mod->assist_received == 0 && gets < 2000) {
            size_t len = 4 * MIB, off = 4 * KIB + 3;
            CHECK(api_op(ctx, 1, false, lbuf, len, info->addr + off, &info->rkey) == FERRY_OK);
            CHECK(same("get", lbuf, image + off, len, off));
            gets++;
        }
        printf("rank 0: %u jobs numbered, %llu pieces of them taken by rank 1 (%d more gets)\n",
               ep->assist_jobs, (unsigned long long)mod->assist_received, gets);
        CHECK(ep->assist_jobs > 0);
        CHECK(mod->assist_received > 0);
    } else {
        printf("rank 0: no job numbered, no piece taken\n");
        CHECK(ep->assist_jobs == 0);
        CHECK(mod->assist_received == 0 && mod->assist_given == 0);
    }
    check_image(ctx, info, image, 0, DATA_LEN);
    send_word(ctx, 1, TAG_DONE, fnv(image, DATA_LEN));
    free(lbuf);
    free(image);
}

static void data_target(ferry_ctx_t *ctx, state_t *st, bool assist)
{
    unsigned char *buf = malloc(DATA_LEN);
    CHECK(buf != NULL);
    for (size_t i = 0; i < DATA_LEN; i++)
        buf[i] = image_byte(i);
    ferry_mem_t *mem;
    CHECK(ferry_mem_register(ctx, buf, DATA_LEN,
                             FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE,
                             &mem) == FERRY_OK);
    info_t info = {.addr = (uint64_t)(uintptr_t)buf, .len = DATA_LEN};
    CHECK(ferry_mem_rkey(mem, &info.rkey) == FERRY_OK);
    send_retry(ctx, 0, TAG_INFO, &info, sizeof(info));
    wait_done(ctx, st);
    CHECK(fnv(buf, DATA_LEN) == st->done_value);
    printf("rank 1: the buffer is what rank 0 put; rank 1 took %llu pieces of its copies\n",
           (unsigned long long)st->mod->assist_given);
    if (!assist)
        CHECK(st->mod->assist_given == 0);
    CHECK(ferry_mem_deregister(ctx, mem) == FERRY_OK);
    free(buf);
}

/* ---- a hostile initiator ---- */

#define HOSTILE_LEN MIB

/* Sets up job in our channel as an initiator would. */
static void job_open(sm_chan_t *ch, uint32_t job)
{
    atomic_store_explicit(&ch->assist_failed, 0, memory_order_relaxed);
    atomic_store_explicit(&ch->assist_done, (uint64_t)job << 32, memory_order_relaxed);
    atomic_store_explicit(&ch->assist_claim, (uint64_t)job << 32, memory_order_release);
}

static sm_assist_req_t request(uint64_t raddr, const void *laddr, uint64_t len, uint32_t job,
                               const uint8_t *key, bool put)
{
    sm_assist_req_t r = {.raddr = raddr,
                         .laddr = (uint64_t)(uintptr_t)laddr,
                         .len = len,
                         .job = job,
                         .chunk = SM_ASSIST_CHUNK,
                         .put = put};
    memcpy(&r.key, key, sizeof(r.key));
    return r;
}

static void badkey_target(ferry_ctx_t *ctx, ferry_btl_module_t *btl, state_t *st)
{
    unsigned char *ro = map(HOSTILE_LEN, 0x5a);
    unsigned char *gone = map(HOSTILE_LEN, 0x3c);
    ferry_btl_reg_t *ro_reg = register_and_tell(ctx, btl, ro, HOSTILE_LEN,
                                                FERRY_ACCESS_REMOTE_READ);
    ferry_btl_reg_t *gone_reg = register_and_tell(
        ctx, btl, gone, HOSTILE_LEN, FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
    /* Withdrawn before rank 1 can use it: its key is stale. */
    CHECK(btl->ops->deregister_mem(btl, gone_reg) == FERRY_OK);
    wait_done(ctx, st);
    CHECK(all("rank 0's read-only registration", ro, HOSTILE_LEN, 0x5a));
    CHECK(all("rank 0's withdrawn registration", gone, HOSTILE_LEN, 0x3c));
    ping(ctx, st, 1);
    CHECK(st->failures == 0);
    printf("rank 0: took %llu pieces, all of the allowed request; its memory is untouched\n",
           (unsigned long long)st->mod->assist_given);
    CHECK(st->mod->assist_given == 4);
    CHECK(btl->ops->deregister_mem(btl, ro_reg) == FERRY_OK);
}

static void badkey_initiator(ferry_ctx_t *ctx, state_t *st)
{
    ferry_btl_endpoint_t *ep = ctx->peers[0].ep;
    wait_infos(ctx, st, 2);
    const info_t *ro = &st->info[0], *gone = &st->info[1];
    CHECK(ep != NULL && ep->state == SM_EP_CONNECTED);
    sm_chan_t *ch = ep->out;
    unsigned char *mine = map(HOSTILE_LEN, 0xa5);

    sm_key_t real, k;
    memcpy(&real, ro->key, sizeof(real));
    struct attempt {
        const char *what;
        sm_key_t key;
        uint64_t raddr, len;
        bool put;
    } attempts[9];
    int n = 0;
    k = real;
    k.nonce ^= 1;
    attempts[n++] = (struct attempt){"a get with a guessed nonce", k, ro->addr, 4 * PIECE, false};
    k = real;
    k.gen += 2;
    attempts[n++] = (struct attempt){"a get with a later generation", k, ro->addr, 4 * PIECE,
                                     false};
    k = real;
    k.slot = ep->peer_hdr->reg_slots - 1;
    attempts[n++] = (struct attempt){"a get through a slot never used", k, ro->addr, 4 * PIECE,
                                     false};
    attempts[n++] = (struct attempt){"a get one byte past the registration", real, ro->addr + 1,
                                     ro->len, false};
    attempts[n++] = (struct attempt){"a get from before the registration", real,
                                     ro->addr - PIECE, 2 * PIECE, false};
    attempts[n++] = (struct attempt){"a put into read-only memory", real, ro->addr, 4 * PIECE,
                                     true};
    memcpy(&k, gone->key, sizeof(k));
    attempts[n++] = (struct attempt){"a get through a withdrawn key", k, gone->addr, 4 * PIECE,
                                     false};
    attempts[n++] = (struct attempt){"a put through a withdrawn key", k, gone->addr, 4 * PIECE,
                                     true};

    uint32_t job = 100;
    for (int i = 0; i < n; i++) {
        const struct attempt *a = &attempts[i];
        job++;
        job_open(ch, job);
        uint8_t key[FERRY_BTL_KEY_MAX] = {0};
        memcpy(key, &a->key, sizeof(a->key));
        sm_assist_req_t r = request(a->raddr, mine, a->len, job, key, a->put);
        ring_send(ctx, ep, SM_T_ASSIST, &r, sizeof(r));
        /* The ping is handled after the request. */
        uint64_t given = ping(ctx, st, 0);
        uint64_t claim = atomic_load(&ch->assist_claim), done = atomic_load(&ch->assist_done);
        printf("rank 1: %s: claim word %#llx, count word %#llx, %llu pieces taken by rank 0\n",
               a->what, (unsigned long long)claim, (unsigned long long)done,
               (unsigned long long)given);
        CHECK(claim == (uint64_t)job << 32);
        CHECK(done == (uint64_t)job << 32);
        CHECK(atomic_load(&ch->assist_failed) == 0);
        CHECK(given == 0);
        CHECK(all("rank 1's memory", mine, HOSTILE_LEN, 0xa5));
        CHECK(ep->state == SM_EP_CONNECTED && st->failures == 0);
    }

    /* The same kind of request, allowed: rank 0 takes all four pieces. */
    job++;
    job_open(ch, job);
    sm_assist_req_t r = request(ro->addr, mine, 4 * PIECE, job, ro->key, false);
    ring_send(ctx, ep, SM_T_ASSIST, &r, sizeof(r));
    uint64_t given = ping(ctx, st, 0);
    printf("rank 1: an allowed get: claim word %#llx, count word %#llx, %llu pieces taken\n",
           (unsigned long long)atomic_load(&ch->assist_claim),
           (unsigned long long)atomic_load(&ch->assist_done), (unsigned long long)given);
    CHECK(atomic_load(&ch->assist_claim) == ((uint64_t)job << 32 | 4));
    CHECK(atomic_load(&ch->assist_done) == ((uint64_t)job << 32 | 4));
    CHECK(given == 4);
    CHECK(all("the allowed get", mine, 4 * PIECE, 0x5a));
    CHECK(all("past the allowed get", mine + 4 * PIECE, HOSTILE_LEN - 4 * PIECE, 0xa5));

    send_word(ctx, 0, TAG_DONE, 0);
    /* Rank 0 pings back: the channel works the other way too. */
    while (st->pings == 0)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(st->failures == 0);
}

/* Returns false when no monitor revoked the registration (the case is
 * skipped). */
static bool revoked_target(ferry_ctx_t *ctx, ferry_btl_module_t *btl, state_t *st)
{
    unsigned char *buf = map(HOSTILE_LEN, 0x5a);
    ferry_btl_reg_t *reg = register_and_tell(ctx, btl, buf, HOSTILE_LEN,
                                             FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
    sm_key_t key;
    memcpy(&key, reg->key, sizeof(key));
    /* Unmapped, and other memory in its place: the registration is still
     * there, the memory it named is not. */
    CHECK(munmap(buf, HOSTILE_LEN) == 0);
    CHECK(mmap(buf, HOSTILE_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
               -1, 0) == buf);
    memset(buf, 0x66, HOSTILE_LEN);
    /* The monitor marks it: its table entry's generation turns odd. */
    double end = now_s() + 5;
    while (!(atomic_load(&st->mod->reg_table[key.slot].gen) & 1) && now_s() < end)
        CHECK(ferry_progress(ctx) >= 0);
    bool revoked = atomic_load(&st->mod->reg_table[key.slot].gen) & 1;
    send_word(ctx, 1, TAG_GO, revoked);
    if (!revoked) {
        printf("SKIPPED: the unmap monitor did not revoke the registration\n");
        return false;
    }
    wait_done(ctx, st);
    bool untouched = all("the memory now at the registration's address", buf, HOSTILE_LEN, 0x66);
    printf("rank 0: took %llu pieces; the memory now at the registration's address is %s\n",
           (unsigned long long)st->mod->assist_given, untouched ? "untouched" : "WRITTEN");
    ping(ctx, st, 1);
    CHECK(untouched);
    CHECK(st->mod->assist_given == 0);
    CHECK(st->failures == 0);
    CHECK(btl->ops->deregister_mem(btl, reg) == FERRY_OK);
    return true;
}

/* Returns false when rank 0 has no monitor (the case is skipped). */
static bool revoked_initiator(ferry_ctx_t *ctx, state_t *st)
{
    ferry_btl_endpoint_t *ep = ctx->peers[0].ep;
    wait_infos(ctx, st, 1);
    while (!st->go)
        CHECK(ferry_progress(ctx) >= 0);
    if (!st->go_value)
        return false;
    const info_t *info = &st->info[0];
    sm_chan_t *ch = ep->out;
    unsigned char *mine = map(HOSTILE_LEN, 0xa5);
    uint32_t job = 300;
    for (int put = 0; put < 2; put++) {
        job++;
        job_open(ch, job);
        sm_assist_req_t r = request(info->addr, mine, 4 * PIECE, job, info->key, put);
        ring_send(ctx, ep, SM_T_ASSIST, &r, sizeof(r));
        uint64_t given = ping(ctx, st, 0);
        uint64_t claim = atomic_load(&ch->assist_claim);
        printf("rank 1: a %s through the revoked key: claim word %#llx, %llu pieces taken\n",
               put ? "put" : "get", (unsigned long long)claim, (unsigned long long)given);
        if (!put)
            CHECK(all("rank 1's memory", mine, HOSTILE_LEN, 0xa5));
        CHECK(claim == (uint64_t)job << 32);
    }
    send_word(ctx, 0, TAG_DONE, 0);
    while (st->pings == 0)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(st->failures == 0);
    return true;
}

/* Sets the claim word back to the job's first piece whenever a piece of
 * the job it is given was taken. */
typedef struct resetter {
    _Atomic uint64_t *claim;
    _Atomic uint32_t job; /* 0: idle */
    _Atomic bool stop;
    _Atomic uint64_t resets;
} resetter_t;

static void *reset_claims(void *arg)
{
    resetter_t *r = arg;
    while (!atomic_load(&r->stop)) {
        uint32_t job = atomic_load(&r->job);
        if (job == 0)
            continue;
        uint64_t w = atomic_load(r->claim);
        /* A compare-and-swap: a plain store of a word read before the
         * round ended could land on the next round's job. */
        if ((uint32_t)(w >> 32) == job && (uint32_t)w != 0 &&
            atomic_compare_exchange_strong(r->claim, &w, (uint64_t)job << 32))
            atomic_fetch_add(&r->resets, 1);
    }
    return NULL;
}

#define CLAIMS_LEN (4 * MIB)
#define CLAIMS_PIECES (CLAIMS_LEN / PIECE)

static void claims_target(ferry_ctx_t *ctx, ferry_btl_module_t *btl, state_t *st)
{
    unsigned char *buf = map(CLAIMS_LEN, 0x5a);
    ferry_btl_reg_t *reg = register_and_tell(ctx, btl, buf, CLAIMS_LEN,
                                             FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
    wait_done(ctx, st);
    ping(ctx, st, 1);
    CHECK(st->failures == 0);
    CHECK(all("rank 0's registration", buf, CLAIMS_LEN, 0x5a));
    CHECK(btl->ops->deregister_mem(btl, reg) == FERRY_OK);
}

static void claims_initiator(ferry_ctx_t *ctx, state_t *st)
{
    ferry_btl_endpoint_t *ep = ctx->peers[0].ep;
    wait_infos(ctx, st, 1);
    const info_t *info = &st->info[0];
    sm_chan_t *ch = ep->out;
    unsigned char *mine = map(CLAIMS_LEN, 0xa5);
    resetter_t r = {.claim = &ch->assist_claim};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, reset_claims, &r) == 0);
    const uint64_t bound = 2 * CLAIMS_PIECES + 64;
    bool more = false;
    uint32_t job = 200;
    /* Rounds until the thread has set the word back while rank 0 copied
     * (on a loaded machine it may not run in time for a few). */
    double end = now_s() + 30;
    for (int round = 0; round < 2000 && !more && now_s() < end; round++) {
        uint64_t before = ping(ctx, st, 0);
        job++;
        job_open(ch, job);
        uint64_t resets = atomic_load(&r.resets);
        atomic_store(&r.job, job);
        sm_assist_req_t req = request(info->addr, mine, CLAIMS_LEN, job, info->key, false);
        ring_send(ctx, ep, SM_T_ASSIST, &req, sizeof(req));
        /* Room for the thread while rank 0 copies. */
        int want = st->pongs + 1;
        send_word(ctx, 0, TAG_PING, 0);
        while (st->pongs < want) {
            CHECK(ferry_progress(ctx) >= 0);
            usleep(100);
        }
        atomic_store(&r.job, 0);
        uint64_t taken = st->pong_value - before;
        uint32_t counted = (uint32_t)atomic_load(&ch->assist_done);
        resets = atomic_load(&r.resets) - resets;
        printf("rank 1: round %d: rank 0 took %llu pieces of %zu (at most %llu), counted %u; "
               "the claim word was set back %llu times\n",
               round, (unsigned long long)taken, CLAIMS_PIECES, (unsigned long long)bound,
               counted, (unsigned long long)resets);
        CHECK(taken >= 1 && taken <= bound);
        CHECK(counted == taken);
        CHECK(atomic_load(&ch->assist_failed) == 0);
        CHECK(ep->state == SM_EP_CONNECTED && st->failures == 0);
        /* Taking more pieces than the job has: the resets took effect. */
        more = taken > CLAIMS_PIECES;
    }
    atomic_store(&r.stop, true);
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(more);
    send_word(ctx, 0, TAG_DONE, 0);
    while (st->pings == 0)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(st->failures == 0);
}

/* ---- a hostile target ---- */

/* 16 MiB: a job of 256 pieces, open for some milliseconds, for rank 1 to
 * catch while it spins beside rank 0. */
#define TARGET_LEN (16 * MIB)
#define TARGET_PIECES (TARGET_LEN / PIECE)

/* Waits, without finalize, for rank 0 to finalize (rank 0 takes us as
 * failed) or to end, then leaves. */
static void leave_after_rank0(ferry_btl_endpoint_t *ep)
{
    double end = now_s() + 60;
    while (!atomic_load(&ep->peer_hdr->closing) && now_s() < end &&
           !(kill(ep->pid, 0) != 0 && errno == ESRCH))
        usleep(1000);
}

/* Rank 0's side of the hostile-target cases: a plain cross-memory get
 * first (so that it asks for help afterwards), then large gets until rank 1
 * has meddled with one of them. Returns the status of the last. */
static int gets_from_hostile(ferry_ctx_t *ctx, ferry_btl_module_t *btl, state_t *st,
                             bool until_failed, unsigned char *local)
{
    ferry_btl_endpoint_t *ep = ctx->peers[1].ep;
    wait_infos(ctx, st, 1);
    const info_t *info = &st->info[0];
    op_t op;
    op_start(btl, ep, false, local, 64 * KIB, info->addr, info->key, &op);
    CHECK(op_wait(ctx, btl, &op, 10) && op.status == FERRY_OK);
    CHECK(ep->cma_worked);
    send_word(ctx, 1, TAG_GO, 0);
    /* Until rank 1 meddled, for up to 30 s: rank 1 must run while a job is
     * open, which on a loaded machine takes a number of tries. */
    double give_up = now_s() + 30;
    for (int i = 0; now_s() < give_up; i++) {
        memset(local, 0, TARGET_LEN);
        double t = now_s();
        op_start(btl, ep, false, local, TARGET_LEN, info->addr, info->key, &op);
        double in_call = now_s() - t;
        bool done = op_wait(ctx, btl, &op, 10);
        printf("rank 0: get %d: %.3f s in the call, %s (%s)\n", i, in_call,
               done ? "complete" : "NOT COMPLETE after 10 s",
               done ? ferry_strerror(op.status) : "-");
        if (!done)
            printf("rank 0: job %u waits for %u pieces of rank 1's; the count word says %#llx\n",
                   ep->assist.job, ep->assist.theirs,
                   (unsigned long long)atomic_load(&ep->out->assist_done));
        CHECK(done);
        if (st->failures > 0)
            return op.status;
        CHECK(op.status == FERRY_OK);
        CHECK(all("a get from rank 1", local, TARGET_LEN, 0x77));
        /* Rank 1 says when it meddled: a moment for its word to arrive. */
        double end = now_s() + 0.05;
        while (now_s() < end)
            CHECK(ferry_progress(ctx) >= 0);
        if (!until_failed && st->resets_reported > 0)
            return op.status;
    }
    printf("rank 0: rank 1 never meddled with a get in 30 s\n");
    exit(1);
}

static void done_initiator(ferry_ctx_t *ctx, ferry_btl_module_t *btl, state_t *st)
{
    unsigned char *local = map(TARGET_LEN, 0);
    int status = gets_from_hostile(ctx, btl, st, true, local);
    CHECK(st->failures == 1 && st->failed_peer == 1);
    CHECK(strstr(st->msg, "rewrote the count") != NULL);
    CHECK(status == FERRY_ERR_UNREACH);
    printf("rank 0: failed rank 1 and ended its get\n");
}

/* Takes one piece of one of rank 0's jobs and writes another job's number
 * into the count word while rank 0 waits for the piece. */
static void done_target(ferry_ctx_t *ctx, ferry_btl_endpoint_t *ep)
{
    sm_chan_t *ch = ep->in; /* rank 0's channel in our segment */
    uint32_t seen = 0, job = 0;
    double end = now_s() + 60;
    while (job == 0 && now_s() < end) {
        uint64_t w = atomic_load(&ch->assist_claim);
        uint32_t j = (uint32_t)(w >> 32);
        if (j == 0 || j == seen)
            continue;
        seen = j;
        while ((uint32_t)(w >> 32) == j && (uint32_t)w < TARGET_PIECES)
            if (atomic_compare_exchange_weak(&ch->assist_claim, &w, w + 1)) {
                job = j;
                break;
            }
    }
    CHECK(job != 0);
    usleep(300 * 1000); /* rank 0 waits for the piece meanwhile */
    atomic_store(&ch->assist_done, (uint64_t)(job + 1000) << 32);
    printf("rank 1: took a piece of job %u, then wrote job %u into the count\n", job, job + 1000);
}

static void claims_target_initiator(ferry_ctx_t *ctx, ferry_btl_module_t *btl, state_t *st)
{
    unsigned char *local = map(TARGET_LEN, 0);
    int status = gets_from_hostile(ctx, btl, st, false, local);
    if (status != FERRY_OK)
        CHECK(st->failures == 1 && st->failed_peer == 1);
    printf("rank 0: its get came back: %s\n", ferry_strerror(status));
}

/* Sets the claim word of the first of rank 0's jobs it catches back to the
 * first piece, a number of times, as rank 0 copies. */
static void claims_target_target(ferry_ctx_t *ctx, ferry_btl_endpoint_t *ep)
{
    sm_chan_t *ch = ep->in;
    uint32_t job = 0;
    uint64_t resets = 0;
    double end = now_s() + 60, last = 0;
    /* Until rank 0 took the job's last piece, or gave the job up (it fails
     * us on the first reset it sees: the word then stays put). */
    while (resets < 200 && now_s() < end && (resets == 0 || now_s() < last + 2)) {
        uint64_t w = atomic_load(&ch->assist_claim);
        uint32_t j = (uint32_t)(w >> 32), c = (uint32_t)w;
        if (job != 0 && (j != job || c >= TARGET_PIECES))
            break; /* rank 0 took the job's last piece */
        if (j == 0 || c < 8 || c >= TARGET_PIECES)
            continue;
        if (atomic_compare_exchange_strong(&ch->assist_claim, &w, (uint64_t)j << 32)) {
            job = j;
            resets++;
            last = now_s();
        }
    }
    printf("rank 1: set the claim word of job %u back %llu times\n", job,
           (unsigned long long)resets);
    send_word(ctx, 0, TAG_RESETS, resets);
}

static void hostile_target(ferry_ctx_t *ctx, ferry_btl_module_t *btl, state_t *st, bool done)
{
    unsigned char *buf = map(TARGET_LEN, 0x77);
    register_and_tell(ctx, btl, buf, TARGET_LEN,
                      FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
    while (!st->go)
        CHECK(ferry_progress(ctx) >= 0);
    /* From now on no progress: rank 1 only meddles. */
    ferry_btl_endpoint_t *ep = ctx->peers[0].ep;
    if (done)
        done_target(ctx, ep);
    else
        claims_target_target(ctx, ep);
    leave_after_rank0(ep);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    const char *what = argv[1];
    bool data = strcmp(what, "data") == 0, noassist = strcmp(what, "data_noassist") == 0;
    if (!data && !noassist && strcmp(what, "badkey") != 0 && strcmp(what, "claims") != 0 &&
        strcmp(what, "done") != 0 && strcmp(what, "claims_target") != 0 &&
        strcmp(what, "revoked") != 0) {
        fprintf(stderr, "sm_assist: no case %s\n", what);
        return 2;
    }
    ferry_ctx_t *ctx;
    state_t st = {.failed_peer = -1};
    ferry_btl_module_t *btl = sm_pair_init(&ctx);
    int me = ferry_rank(ctx);
    st.mod = (sm_module_t *)btl;
    CHECK(ferry_set_error_cb(ctx, on_error, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_INFO, on_info, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_PING, on_ping, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_PROBE, on_probe, &st) == FERRY_OK);
    const int words[] = {TAG_PONG, TAG_DONE, TAG_GO, TAG_PROBED, TAG_RESETS};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        CHECK(ferry_am_register(ctx, words[i], on_word, &st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (!cma_both_ways(ctx, &st) || !st.mod->cma_ok) {
        if (me == 0)
            printf("SKIPPED: no cross-memory attach between the ranks\n");
        ferry_finalize(&ctx);
        return 77;
    }

    if (data || noassist) {
        if (me == 0)
            data_initiator(ctx, &st, data);
        else
            data_target(ctx, &st, data);
    } else if (strcmp(what, "badkey") == 0) {
        if (me == 0)
            badkey_target(ctx, btl, &st);
        else
            badkey_initiator(ctx, &st);
    } else if (strcmp(what, "revoked") == 0) {
        bool ran = me == 0 ? revoked_target(ctx, btl, &st) : revoked_initiator(ctx, &st);
        CHECK(ferry_finalize(&ctx) == FERRY_OK);
        return ran ? 0 : 77;
    } else if (strcmp(what, "claims") == 0) {
        if (me == 0)
            claims_target(ctx, btl, &st);
        else
            claims_initiator(ctx, &st);
    } else {
        bool done = strcmp(what, "done") == 0;
        if (me == 1) {
            /* The hostile target leaves without finalize. */
            hostile_target(ctx, btl, &st, done);
            return 0;
        }
        if (done)
            done_initiator(ctx, btl, &st);
        else
            claims_target_initiator(ctx, btl, &st);
        int rc = ferry_finalize(&ctx);
        CHECK(rc == FERRY_OK || rc == FERRY_ERR_UNREACH);
        return 0;
    }
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    return 0;
}
