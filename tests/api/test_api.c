/*
 * The application API (ferry.h) end to end: init and its refusals, active
 * messages, registration, remote keys, put/get with completions, flush,
 * barrier and the no-recursion rule. Runs as one process or under ferryrun;
 * each rank talks to every rank a transport reaches.
 *
 *   test_api [--need-peers | --expect-unreachable]
 *
 * --need-peers: the run is about talking to the other ranks (over the
 * transports FERRY_BTL names), so a rank no transport reaches makes it exit
 * 77, skipped, with the reason, rather than pass without having tried.
 * --expect-unreachable: no other rank may be reachable (FERRY_BTL=self), and
 * sends to them must fail with FERRY_ERR_UNREACH.
 * --stale-handle: only the check against a stale copy of a finalized handle
 * (skipped under AddressSanitizer and ThreadSanitizer, which report that use
 * themselves).
 * --heap-beyond-shm: only sm's refusal of a shared heap larger than
 * /dev/shm's free space (run_small_shm.sh makes /dev/shm small).
 */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "../unit/capture.h"
#include "../unit/check.h"

#define TAG_DATA 7
#define TAG_NESTED 8

#define MAX_RANKS 64

typedef struct am_state {
    int received;
    int bad;
    int from[MAX_RANKS];      /* messages received per source */
    size_t last_len[MAX_RANKS];
    int nested_progress_rc;
    int nested_flush_rc;
    int nested_finalize_rc;
    bool nested_handle_kept;
} am_state_t;

static unsigned char pattern(int src, size_t size, size_t i)
{
    return (unsigned char)(src * 31 + size * 7 + i * 13);
}

static void on_data(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    am_state_t *st = arg;
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern(src, len, i)) {
            st->bad++;
            break;
        }
    if (src >= 0 && src < MAX_RANKS) {
        st->last_len[src] = len;
        st->from[src]++;
    } else {
        st->bad++;
    }
    st->received++;
}

static void on_nested(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                      void *arg)
{
    am_state_t *st = arg;
    st->nested_progress_rc = ferry_progress(ctx);
    st->nested_flush_rc = ferry_flush(ctx, -1);
    ferry_ctx_t *handle = ctx;
    st->nested_finalize_rc = ferry_finalize(&handle);
    st->nested_handle_kept = handle == ctx;
    st->received++;
}

static void wait_for_at(ferry_ctx_t *ctx, const int *counter, int target, int line)
{
    for (long spins = 0; *counter < target; spins++) {
        CHECK(ferry_progress(ctx) >= 0);
        if (spins == 100000000L) {
            fprintf(stderr, "rank %d: waited in vain at line %d: %d of %d\n", ferry_rank(ctx),
                    line, *counter, target);
            exit(1);
        }
    }
}
#define wait_for(ctx, counter, target) wait_for_at(ctx, counter, target, __LINE__)

/* Sends, progressing through back pressure. */
static int send_retry(ferry_ctx_t *ctx, int dst, int tag, const void *buf, size_t len)
{
    int rc;
    while ((rc = ferry_am_send(ctx, dst, tag, buf, len)) == FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    return rc;
}

static void test_init_refusals(void)
{
    ferry_ctx_t *ctx = (ferry_ctx_t *)0x1;
    ferry_init_params_t p = {.thread_level = FERRY_THREAD_MULTIPLE};
    capture_t cap;

    capture_begin(&cap);
    CHECK(ferry_init(&p, &ctx) == FERRY_ERR_NOT_SUPPORTED);
    CHECK(strstr(capture_end(&cap), "FERRY_THREAD_MULTIPLE") != NULL);
    CHECK(ctx == (ferry_ctx_t *)0x1);

    p.thread_level = (ferry_thread_level_t)42;
    CHECK(ferry_init(&p, &ctx) == FERRY_ERR_INVALID);
    CHECK(ferry_init(NULL, NULL) == FERRY_ERR_INVALID);

    p.thread_level = FERRY_THREAD_SINGLE;
    p.transports = "self,nosuch";
    capture_begin(&cap);
    CHECK(ferry_init(&p, &ctx) == FERRY_ERR_INVALID);
    CHECK(strstr(capture_end(&cap),
                 "ferry_init_params_t.transports='self,nosuch': transport 'nosuch' is not "
                 "built") != NULL);

    /* A bad FERRY_BTL is refused naming the variable, the value and the name.
     * The run's own FERRY_BTL (ferryrun -x) is put back afterwards. */
    const char *run_btl = getenv("FERRY_BTL");
    char *saved_btl = run_btl != NULL ? strdup(run_btl) : NULL;
    CHECK(run_btl == NULL || saved_btl != NULL);
    setenv("FERRY_BTL", "self,nosuch", 1);
    capture_begin(&cap);
    CHECK(ferry_init(NULL, &ctx) == FERRY_ERR_INVALID);
    CHECK(strstr(capture_end(&cap),
                 "FERRY_BTL='self,nosuch': transport 'nosuch' is not built (built: self") !=
          NULL);
    setenv("FERRY_BTL", ",self", 1);
    capture_begin(&cap);
    CHECK(ferry_init(NULL, &ctx) == FERRY_ERR_INVALID);
    CHECK(strstr(capture_end(&cap), "FERRY_BTL=',self': an empty transport name") != NULL);
    /* A huge value: refused, and the message stays one short line. */
    static char huge[20000];
    memset(huge, 'q', sizeof(huge) - 1);
    setenv("FERRY_BTL", huge, 1);
    capture_begin(&cap);
    CHECK(ferry_init(NULL, &ctx) == FERRY_ERR_INVALID);
    const char *text = capture_end(&cap);
    CHECK(strstr(text, "FERRY_BTL='qqq") != NULL && strlen(text) < 400);
    if (saved_btl != NULL)
        CHECK(setenv("FERRY_BTL", saved_btl, 1) == 0);
    else
        unsetenv("FERRY_BTL");
    free(saved_btl);

    setenv("FERRY_LOG_LEVEL", "loud", 1);
    capture_begin(&cap);
    CHECK(ferry_init(NULL, &ctx) == FERRY_ERR_INVALID);
    CHECK(strstr(capture_end(&cap), "FERRY_LOG_LEVEL") != NULL);
    unsetenv("FERRY_LOG_LEVEL");

    /* FERRY_JOB_LABEL goes into file names: anything but a plain label is
     * refused, naming the variable. The run's own label is put back. */
    const char *run_label = getenv("FERRY_JOB_LABEL");
    char *saved_label = run_label != NULL ? strdup(run_label) : NULL;
    CHECK(run_label == NULL || saved_label != NULL);
    static const char *const bad_labels[] = {"a.b", "../../etc", "a b", "x\033[2J",
                                             "0123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof(bad_labels) / sizeof(bad_labels[0]); i++) {
        setenv("FERRY_JOB_LABEL", bad_labels[i], 1);
        capture_begin(&cap);
        CHECK(ferry_init(NULL, &ctx) == FERRY_ERR_INVALID);
        CHECK(strstr(capture_end(&cap), "FERRY_JOB_LABEL=") != NULL);
    }
    if (saved_label != NULL)
        CHECK(setenv("FERRY_JOB_LABEL", saved_label, 1) == 0);
    else
        unsetenv("FERRY_JOB_LABEL");
    free(saved_label);

    setenv("FERRY_SELF_EAGER_LIMIT", "12q", 1);
    capture_begin(&cap);
    CHECK(ferry_init(NULL, &ctx) == FERRY_ERR_INVALID);
    CHECK(strstr(capture_end(&cap), "FERRY_SELF_EAGER_LIMIT") != NULL);
    unsetenv("FERRY_SELF_EAGER_LIMIT");
    CHECK(ctx == (ferry_ctx_t *)0x1);
    CHECK(ferry_finalize(NULL) == FERRY_OK);
    printf("ok  init_refusals\n");
}

/* The message sizes sent to a peer whose largest message is max. */
static size_t am_sizes(size_t max, size_t *sizes)
{
    static const size_t fixed[] = {0, 1, 8, 100, 4095, 4096, 4097, 65536};
    size_t n = 0;
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        if (fixed[i] < max - 1)
            sizes[n++] = fixed[i];
    sizes[n++] = max - 1;
    sizes[n++] = max;
    return n;
}

static void test_am(ferry_ctx_t *ctx, am_state_t *st, int dst)
{
    long max = ferry_am_max_size(ctx, dst);
    CHECK(max > 1);
    size_t sizes[16];
    size_t nsizes = am_sizes((size_t)max, sizes);
    unsigned char *buf = malloc((size_t)max);
    CHECK(buf != NULL);
    for (size_t k = 0; k < nsizes; k++) {
        size_t len = sizes[k];
        for (size_t i = 0; i < len; i++)
            buf[i] = pattern(ferry_rank(ctx), len, i);
        CHECK(send_retry(ctx, dst, TAG_DATA, buf, len) == FERRY_OK);
        /* The buffer is ours again at once. */
        memset(buf, 0xee, len);
        if (dst == ferry_rank(ctx)) {
            int me = ferry_rank(ctx);
            wait_for(ctx, &st->from[me], (int)k + 1);
            CHECK(st->last_len[me] == len);
        }
    }
    /* Above max a message goes by rendezvous (tests/msg/test_am_large.c). */
    CHECK(ferry_am_send(ctx, dst, FERRY_AM_TAG_MAX + 1, buf, 1) == FERRY_ERR_INVALID);
    CHECK(ferry_am_send(ctx, dst, TAG_DATA, NULL, 1) == FERRY_ERR_INVALID);
    CHECK(ferry_am_send(ctx, -1, TAG_DATA, buf, 1) == FERRY_ERR_INVALID);
    CHECK(ferry_am_send(ctx, ferry_size(ctx), TAG_DATA, buf, 1) == FERRY_ERR_INVALID);
    CHECK(ferry_am_register(ctx, FERRY_AM_TAG_MAX + 1, on_data, st) == FERRY_ERR_INVALID);
    free(buf);
    CHECK(st->bad == 0);
    printf("ok  am to rank %d\n", dst);
}

typedef struct comp {
    int done;
    int status;
} comp_t;

static void on_comp(void *arg, int status)
{
    comp_t *c = arg;
    c->done++;
    c->status = status;
}

/* Registrations larger than the address range, wrapping around it, or over
 * memory the process does not have; allocations no host could back. */
static void test_register_bounds(ferry_ctx_t *ctx)
{
    static char small[64];
    ferry_mem_t *mem = (ferry_mem_t *)0x1;
    capture_t cap;
    const unsigned rw = FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE;

    capture_begin(&cap);
    CHECK(ferry_mem_register(ctx, small, SIZE_MAX / 2, rw, &mem) == FERRY_ERR_INVALID);
    CHECK(strstr(capture_end(&cap), "is not all mapped memory of this process") != NULL);
    capture_begin(&cap);
    CHECK(ferry_mem_register(ctx, small, SIZE_MAX, rw, &mem) == FERRY_ERR_INVALID);
    CHECK(ferry_mem_register(ctx, (void *)(UINTPTR_MAX - 10), 100, rw, &mem) ==
          FERRY_ERR_INVALID);
    CHECK(strstr(capture_end(&cap), "wraps around the address space") != NULL);
    capture_begin(&cap);
    CHECK(ferry_mem_register(ctx, (void *)(UINTPTR_MAX - 4095), 4096, rw, &mem) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_mem_register(ctx, (void *)((uintptr_t)1 << 62), 4096, rw, &mem) ==
          FERRY_ERR_INVALID);
    capture_end(&cap);
    /* A hole in the middle of a range: refused; the mapped part alone: fine. */
    long page = sysconf(_SC_PAGESIZE);
    char *three = mmap(NULL, 3 * (size_t)page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(three != MAP_FAILED);
    CHECK(munmap(three + page, (size_t)page) == 0);
    capture_begin(&cap);
    CHECK(ferry_mem_register(ctx, three, 3 * (size_t)page, rw, &mem) == FERRY_ERR_INVALID);
    CHECK(ferry_mem_register(ctx, three + page - 1, 2, rw, &mem) == FERRY_ERR_INVALID);
    capture_end(&cap);
    CHECK(mem == (ferry_mem_t *)0x1); /* untouched by every refusal */
    CHECK(ferry_mem_register(ctx, three, (size_t)page, rw, &mem) == FERRY_OK);
    CHECK(ferry_mem_deregister(ctx, mem) == FERRY_OK);
    CHECK(ferry_mem_register(ctx, three + 2 * page + 7, 9, rw, &mem) == FERRY_OK);
    CHECK(ferry_mem_deregister(ctx, mem) == FERRY_OK);
    munmap(three, (size_t)page);
    munmap(three + 2 * page, (size_t)page);

    /* 64 TiB: more than any host here has, refused before anything is made. */
    void *addr = NULL;
    mem = NULL;
    capture_begin(&cap);
    CHECK(ferry_mem_alloc(ctx, (size_t)64 << 40, rw, &addr, &mem) == FERRY_ERR_NO_MEMORY);
    CHECK(strstr(capture_end(&cap), "is more than this host's memory") != NULL);
    CHECK(addr == NULL && mem == NULL);
    printf("ok  registrations and allocations beyond the memory there is are refused\n");
}

static void test_rdma_self(ferry_ctx_t *ctx)
{
    size_t len = (5u << 20) + 3;
    unsigned char *target = malloc(len);
    unsigned char *src = malloc(len);
    unsigned char *back = malloc(len);
    CHECK(target != NULL && src != NULL && back != NULL);
    memset(target, 0, len);
    for (size_t i = 0; i < len; i++)
        src[i] = (unsigned char)(i * 7 + 1);

    ferry_mem_t *tmem, *lmem;
    ferry_rkey_t rkey;
    CHECK(ferry_mem_register(ctx, target, len,
                             FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE, &tmem) == 0);
    CHECK(ferry_mem_register(ctx, src, len, FERRY_ACCESS_LOCAL, &lmem) == FERRY_OK);
    CHECK(ferry_mem_rkey(tmem, &rkey) == FERRY_OK);
    uint64_t base = (uint64_t)(uintptr_t)target;
    int me = ferry_rank(ctx);

    size_t sizes[] = {0, 1, 7, 4096, 65537, 1u << 20, len};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        size_t off = n < len ? (len - n) / 3 : 0;
        comp_t c = {0, 1};
        CHECK(ferry_put(ctx, me, src + off, n, k % 2 ? lmem : NULL, base + off, &rkey, on_comp,
                        &c) == FERRY_OK);
        CHECK(c.done == 0); /* never from inside the call */
        CHECK(ferry_flush(ctx, me) == FERRY_OK);
        CHECK(c.done == 1 && c.status == FERRY_OK);
        CHECK(memcmp(target + off, src + off, n) == 0);
        memset(back, 0, len);
        c.done = 0;
        CHECK(ferry_get(ctx, me, back, n, NULL, base + off, &rkey, on_comp, &c) == FERRY_OK);
        CHECK(ferry_flush(ctx, -1) == FERRY_OK);
        CHECK(c.done == 1 && c.status == FERRY_OK);
        CHECK(memcmp(back, src + off, n) == 0);
    }

    /* ferry keeps the last raw key it parsed: a key used a moment ago, then
     * changed in place, is parsed again, and the same bytes for another
     * rank are another rank's key (refused: it is this rank's). */
    ferry_rkey_t bent = rkey;
    CHECK(ferry_put(ctx, me, src, 1, NULL, base, &bent, NULL, NULL) == FERRY_OK);
    bent.bytes[0] ^= 0x01;
    CHECK(ferry_put(ctx, me, src, 1, NULL, base, &bent, NULL, NULL) == FERRY_ERR_INVALID);
    bent.bytes[0] ^= 0x01;
    CHECK(ferry_put(ctx, me, src, 1, NULL, base, &bent, NULL, NULL) == FERRY_OK);
    if (ferry_size(ctx) > 1) {
        int other = (me + 1) % ferry_size(ctx);
        CHECK(ferry_put(ctx, other, src, 1, NULL, base, &bent, NULL, NULL) ==
              (ferry_am_max_size(ctx, other) < 0 ? FERRY_ERR_UNREACH : FERRY_ERR_INVALID));
    }
    CHECK(ferry_flush(ctx, -1) == FERRY_OK);

    /* Outside the registration or its rights: refused, memory unchanged. */
    memset(target, 0x5a, len);
    comp_t c = {0, 0};
    CHECK(ferry_put(ctx, me, src, 1, NULL, base + len, &rkey, on_comp, &c) == FERRY_ERR_ACCESS);
    CHECK(ferry_put(ctx, me, src, 2, NULL, base + len - 1, &rkey, on_comp, &c) ==
          FERRY_ERR_ACCESS);
    CHECK(ferry_put(ctx, me, src, 1, NULL, base - 1, &rkey, on_comp, &c) == FERRY_ERR_ACCESS);
    CHECK(ferry_put(ctx, me, src, 16, NULL, UINT64_MAX - 4, &rkey, on_comp, &c) ==
          FERRY_ERR_ACCESS);
    CHECK(ferry_put(ctx, me, src, 1, NULL, base, NULL, on_comp, &c) == FERRY_ERR_INVALID);
    CHECK(ferry_put(ctx, me, NULL, 1, NULL, base, &rkey, on_comp, &c) == FERRY_ERR_INVALID);
    /* A local registration that does not cover the buffer. */
    CHECK(ferry_put(ctx, me, back, 1, lmem, base, &rkey, on_comp, &c) == FERRY_ERR_INVALID);
    ferry_rkey_t junk;
    memset(&junk, 0xab, sizeof(junk));
    CHECK(ferry_put(ctx, me, src, 1, NULL, base, &junk, on_comp, &c) == FERRY_ERR_INVALID);
    CHECK(c.done == 0);

    ferry_mem_t *ro;
    ferry_rkey_t rokey;
    CHECK(ferry_mem_register(ctx, target, 64, FERRY_ACCESS_REMOTE_READ, &ro) == FERRY_OK);
    CHECK(ferry_mem_rkey(ro, &rokey) == FERRY_OK);
    CHECK(ferry_put(ctx, me, src, 8, NULL, base, &rokey, on_comp, &c) == FERRY_ERR_ACCESS);
    CHECK(ferry_get(ctx, me, back, 8, NULL, base, &rokey, on_comp, &c) == FERRY_OK);
    CHECK(ferry_flush(ctx, me) == FERRY_OK);
    CHECK(c.done == 1 && c.status == FERRY_OK);
    CHECK(ferry_mem_deregister(ctx, ro) == FERRY_OK);
    /* A key whose registration is gone: the target refuses it. */
    c.done = 0;
    int rc = ferry_get(ctx, me, back, 8, NULL, base, &rokey, on_comp, &c);
    if (rc == FERRY_OK) {
        CHECK(ferry_flush(ctx, me) == FERRY_ERR_ACCESS);
        CHECK(c.done == 1 && c.status == FERRY_ERR_ACCESS);
    } else {
        CHECK(rc == FERRY_ERR_ACCESS);
    }
    for (size_t i = 0; i < len; i++)
        CHECK(target[i] == 0x5a);

    test_register_bounds(ctx);
    CHECK(ferry_mem_register(ctx, NULL, 8, 0, &ro) == FERRY_ERR_INVALID);
    CHECK(ferry_mem_register(ctx, target, 0, 0, &ro) == FERRY_ERR_INVALID);
    CHECK(ferry_mem_register(ctx, target, 8, 0x80, &ro) == FERRY_ERR_INVALID);
    CHECK(ferry_mem_deregister(ctx, NULL) == FERRY_OK);
    CHECK(ferry_mem_deregister(ctx, tmem) == FERRY_OK);
    CHECK(ferry_mem_deregister(ctx, lmem) == FERRY_OK);
    free(target);
    free(src);
    free(back);

    /* Memory from ferry_mem_alloc: a shared heap where sm is open, plain
     * registered pages otherwise (FERRY_BTL=self). */
    void *heap;
    ferry_mem_t *hmem;
    ferry_rkey_t hkey;
    CHECK(ferry_mem_alloc(ctx, 10000, FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE, &heap,
                          &hmem) == FERRY_OK);
    CHECK(((uintptr_t)heap & 4095) == 0);
    CHECK(ferry_mem_rkey(hmem, &hkey) == FERRY_OK);
    char msg[] = "into allocated memory";
    comp_t hc = {0, 1};
    CHECK(ferry_put(ctx, me, msg, sizeof(msg), NULL, (uint64_t)(uintptr_t)heap + 9000, &hkey,
                    on_comp, &hc) == FERRY_OK);
    CHECK(ferry_flush(ctx, me) == FERRY_OK && hc.done == 1 && hc.status == FERRY_OK);
    CHECK(memcmp((char *)heap + 9000, msg, sizeof(msg)) == 0);
    /* Whole pages are registered: 12288 bytes, and not one more. */
    CHECK(ferry_put(ctx, me, msg, 2, NULL, (uint64_t)(uintptr_t)heap + 12287, &hkey, on_comp,
                    &hc) == FERRY_ERR_ACCESS);
    void *none_addr = NULL;
    ferry_mem_t *none = NULL;
    CHECK(ferry_mem_alloc(ctx, 0, 0, &none_addr, &none) == FERRY_ERR_INVALID);
    CHECK(ferry_mem_alloc(ctx, 8, 0x80, &none_addr, &none) == FERRY_ERR_INVALID);
    CHECK(ferry_mem_alloc(NULL, 8, 0, &none_addr, &none) == FERRY_ERR_INVALID);
    CHECK(none == NULL && none_addr == NULL);
    CHECK(ferry_mem_free(ctx, hmem) == FERRY_OK);
    CHECK(ferry_mem_free(ctx, NULL) == FERRY_OK);
    printf("ok  rdma to self\n");
}

#define TAG_RKEY 9

typedef struct rkey_msg {
    ferry_rkey_t rkey;
    uint64_t addr;
    uint64_t len;
} rkey_msg_t;

typedef struct rkey_box {
    int got;
    rkey_msg_t msg;
} rkey_box_t;

static void on_rkey(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    rkey_box_t *box = arg;
    CHECK(len == sizeof(rkey_msg_t));
    memcpy(&box->msg, data, sizeof(box->msg));
    box->got++;
}

/* Put and get with the next rank, through whatever transport reaches it,
 * into ordinary memory or (alloc) memory from ferry_mem_alloc. */
static void test_rdma_peer(ferry_ctx_t *ctx, rkey_box_t *box, bool alloc)
{
    int me = ferry_rank(ctx), size = ferry_size(ctx);
    int next = (me + 1) % size, prev = (me + size - 1) % size;
    if (size == 1 || ferry_am_max_size(ctx, next) < 0 || ferry_am_max_size(ctx, prev) < 0) {
        /* Only in the runs where that is the point (one rank, or
         * --expect-unreachable); --need-peers has made sure of the others. */
        printf("ok  rdma to peer: not run, %s\n",
               size == 1 ? "a single rank" : "no transport reaches the neighbours, as expected");
        return;
    }
    size_t len = (3u << 20) + 5;
    unsigned char *target, *src = malloc(len), *back = malloc(len);
    CHECK(src != NULL && back != NULL);
    for (size_t i = 0; i < len; i++)
        src[i] = (unsigned char)(i * 3 + (size_t)me);
    ferry_mem_t *tmem;
    const unsigned rw = FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE;
    if (alloc) {
        void *p;
        CHECK(ferry_mem_alloc(ctx, len, rw, &p, &tmem) == FERRY_OK);
        target = p;
        CHECK(((uintptr_t)target & 4095) == 0);
        memset(target, 0, len);
        CHECK(ferry_mem_deregister(ctx, tmem) == FERRY_ERR_INVALID);
    } else {
        target = calloc(1, len);
        CHECK(target != NULL);
        CHECK(ferry_mem_register(ctx, target, len, rw, &tmem) == FERRY_OK);
    }
    /* The peer's key may arrive before we look (even during the barrier
     * that ended the previous round): count rounds, not arrivals. */
    static int round;
    round++;
    /* Allocated memory is registered whole pages. */
    size_t reg_len = alloc ? (len + 4095) & ~(size_t)4095 : len;
    rkey_msg_t mine = {.addr = (uint64_t)(uintptr_t)target, .len = reg_len};
    CHECK(ferry_mem_rkey(tmem, &mine.rkey) == FERRY_OK);
    CHECK(send_retry(ctx, prev, TAG_RKEY, &mine, sizeof(mine)) == FERRY_OK);
    wait_for(ctx, &box->got, round);
    const rkey_msg_t *peer = &box->msg;

    size_t sizes[] = {1, 8, 1000, 16384, 100000, len};
    size_t off = 0;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        if (off + n > len)
            off = 0;
        comp_t c = {0, 1};
        CHECK(ferry_put(ctx, next, src + off, n, NULL, peer->addr + off, &peer->rkey, on_comp,
                        &c) == FERRY_OK);
        CHECK(ferry_flush(ctx, next) == FERRY_OK);
        CHECK(c.done == 1 && c.status == FERRY_OK);
        memset(back, 0, n);
        CHECK(ferry_get(ctx, next, back, n, NULL, peer->addr + off, &peer->rkey, on_comp, &c) ==
              FERRY_OK);
        CHECK(ferry_flush(ctx, next) == FERRY_OK);
        CHECK(c.done == 2 && c.status == FERRY_OK);
        CHECK(memcmp(back, src + off, n) == 0);
        off += n;
    }
    /* Outside the peer's registration: refused before any byte moves. */
    comp_t c = {0, 0};
    int rc = ferry_put(ctx, next, src, 2, NULL, peer->addr + peer->len - 1, &peer->rkey,
                       on_comp, &c);
    if (rc == FERRY_OK)
        CHECK(ferry_flush(ctx, next) == FERRY_ERR_ACCESS);
    else
        CHECK(rc == FERRY_ERR_ACCESS);
    /* Our own key is no good for another rank. */
    CHECK(ferry_put(ctx, next, src, 1, NULL, mine.addr, &mine.rkey, on_comp, &c) ==
          FERRY_ERR_INVALID);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    /* prev wrote its pattern into our target at the same offsets. */
    off = 0;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        if (off + n > len)
            off = 0;
        for (size_t i = 0; i < n; i++)
            CHECK(target[off + i] == (unsigned char)((off + i) * 3 + (size_t)prev));
        off += n;
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (alloc) {
        CHECK(ferry_mem_free(ctx, tmem) == FERRY_OK);
    } else {
        CHECK(ferry_mem_free(ctx, tmem) == FERRY_ERR_INVALID);
        CHECK(ferry_mem_deregister(ctx, tmem) == FERRY_OK);
        free(target);
    }
    free(src);
    free(back);
    printf("ok  rdma to peer%s\n", alloc ? " (ferry_mem_alloc memory)" : "");
}

typedef struct tag_box {
    int hits;
    int last_tag;
} tag_box_t;

static void on_tag(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    tag_box_t *box = arg;
    box->hits++;
    box->last_tag = tag;
}

/* Tags are ints, checked before anything narrows them to a transport's 8-bit
 * tag: 300 is refused, not delivered as 300 & 255 = 44. */
static void test_tags(ferry_ctx_t *ctx)
{
    enum { LOW = 44 }; /* 300, 556 and -212 all wrap to it */
    static const int bad[] = {300, 556, 256, -212, -1, FERRY_AM_TAG_MAX + 1, 255, INT_MAX,
                              INT_MIN};
    int me = ferry_rank(ctx);
    tag_box_t right = {0, -1}, wrong = {0, -1};
    char byte = 'x';
    ferry_iov_t iov = {.base = &byte, .len = 1};
    ferry_convertor_t conv;

    CHECK(ferry_am_register(ctx, LOW, on_tag, &right) == FERRY_OK);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(ferry_am_register(ctx, bad[i], on_tag, &wrong) == FERRY_ERR_INVALID);
        CHECK(ferry_am_send(ctx, me, bad[i], &byte, 1) == FERRY_ERR_INVALID);
        CHECK(ferry_am_sendv(ctx, me, bad[i], &iov, 1) == FERRY_ERR_INVALID);
        ferry_convertor_init_contig(&conv, &byte, 1);
        CHECK(ferry_am_send_conv(ctx, me, bad[i], &conv) == FERRY_ERR_INVALID);
    }
    /* Nothing was sent under the wrapped tag, and its handler is the right one. */
    for (int i = 0; i < 1000; i++)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(right.hits == 0 && wrong.hits == 0);
    CHECK(send_retry(ctx, me, LOW, &byte, 1) == FERRY_OK);
    wait_for(ctx, &right.hits, 1);
    CHECK(right.last_tag == LOW && wrong.hits == 0);
    /* Both ends of the range are the application's. */
    CHECK(ferry_am_register(ctx, FERRY_AM_TAG_MAX, on_tag, &right) == FERRY_OK);
    CHECK(send_retry(ctx, me, FERRY_AM_TAG_MAX, &byte, 1) == FERRY_OK);
    wait_for(ctx, &right.hits, 2);
    CHECK(right.last_tag == FERRY_AM_TAG_MAX);
    CHECK(ferry_am_register(ctx, FERRY_AM_TAG_MAX, NULL, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, LOW, NULL, NULL) == FERRY_OK);
    /* Ranks are checked the same way. */
    CHECK(ferry_am_send(ctx, INT_MIN, LOW, &byte, 1) == FERRY_ERR_INVALID);
    CHECK(ferry_am_send(ctx, INT_MAX, LOW, &byte, 1) == FERRY_ERR_INVALID);
    CHECK(ferry_am_sendv(ctx, ferry_size(ctx), LOW, &iov, 1) == FERRY_ERR_INVALID);
    CHECK(ferry_am_max_size(ctx, -1) == FERRY_ERR_INVALID);
    CHECK(ferry_flush(ctx, -2) == FERRY_ERR_INVALID);
    CHECK(ferry_flush(ctx, ferry_size(ctx)) == FERRY_ERR_INVALID);
    printf("ok  tags and ranks checked\n");
}

static void test_no_recursion(ferry_ctx_t *ctx, am_state_t *st)
{
    CHECK(ferry_am_register(ctx, TAG_NESTED, on_nested, st) == FERRY_OK);
    int before = st->received;
    st->nested_progress_rc = -100;
    CHECK(send_retry(ctx, ferry_rank(ctx), TAG_NESTED, "x", 1) == FERRY_OK);
    wait_for(ctx, &st->received, before + 1);
    CHECK(st->nested_progress_rc == 0);
    CHECK(st->nested_flush_rc == FERRY_ERR_BUSY);
    CHECK(st->nested_finalize_rc == FERRY_ERR_BUSY && st->nested_handle_kept);
    printf("ok  no_recursion\n");
}

/* Finalize with registrations left live, then everything a program might
 * do with its handle afterwards. */
static void test_finalize(ferry_ctx_t **ctx_p)
{
    ferry_ctx_t *ctx = *ctx_p;
    static char buf[4096];
    ferry_mem_t *reg, *alloc;
    void *heap;
    capture_t cap;

    CHECK(ferry_mem_register(ctx, buf, sizeof(buf), FERRY_ACCESS_REMOTE_READ, &reg) == FERRY_OK);
    CHECK(ferry_mem_alloc(ctx, 8192, FERRY_ACCESS_REMOTE_WRITE, &heap, &alloc) == FERRY_OK);
    capture_begin(&cap);
    CHECK(ferry_finalize(ctx_p) == FERRY_OK);
    CHECK(strstr(capture_end(&cap), "2 memory registration(s)") != NULL);
    CHECK(*ctx_p == NULL);
    /* Twice, and with nothing to finalize: nothing happens. */
    CHECK(ferry_finalize(ctx_p) == FERRY_OK);
    CHECK(ferry_finalize(NULL) == FERRY_OK);
    /* The NULL handle is refused by every call, without a crash. */
    ctx = *ctx_p;
    char byte = 0;
    ferry_iov_t iov = {.base = &byte, .len = 1};
    ferry_convertor_t conv;
    ferry_rkey_t rkey;
    memset(&rkey, 0, sizeof(rkey));
    ferry_convertor_init_contig(&conv, &byte, 1);
    CHECK(ferry_rank(ctx) == FERRY_ERR_INVALID);
    CHECK(ferry_size(ctx) == FERRY_ERR_INVALID);
    CHECK(ferry_progress(ctx) == FERRY_ERR_INVALID);
    CHECK(ferry_barrier(ctx) == FERRY_ERR_INVALID);
    CHECK(ferry_set_error_cb(ctx, NULL, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_am_register(ctx, 1, on_tag, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_am_max_size(ctx, 0) == FERRY_ERR_INVALID);
    CHECK(ferry_am_send(ctx, 0, 1, &byte, 1) == FERRY_ERR_INVALID);
    CHECK(ferry_am_sendv(ctx, 0, 1, &iov, 1) == FERRY_ERR_INVALID);
    CHECK(ferry_am_send_conv(ctx, 0, 1, &conv) == FERRY_ERR_INVALID);
    CHECK(ferry_mem_register(ctx, buf, 8, 0, &reg) == FERRY_ERR_INVALID);
    CHECK(ferry_mem_alloc(ctx, 8, 0, &heap, &alloc) == FERRY_ERR_INVALID);
    CHECK(ferry_put(ctx, 0, &byte, 1, NULL, 0, &rkey, NULL, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_get(ctx, 0, &byte, 1, NULL, 0, &rkey, NULL, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_put_conv(ctx, 0, &conv, 0, &rkey, NULL, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_get_conv(ctx, 0, &conv, 0, &rkey, NULL, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_flush(ctx, -1) == FERRY_ERR_INVALID);
    printf("ok  finalize: twice, with registrations left, and calls after it\n");
}

/* A stale copy of a finalized handle: undefined behaviour that ferry catches
 * while the freed memory is not reused (its magic is cleared), and that
 * AddressSanitizer and ThreadSanitizer report by themselves, so those builds
 * skip the run. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STALE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define STALE_SANITIZED 1
#endif
#endif

static int test_stale_handle(void)
{
#ifdef STALE_SANITIZED
    printf("SKIPPED: the sanitizer reports a use after free itself (this run reads the "
           "freed context on purpose)\n");
    return 77;
#endif
    ferry_ctx_t *ctx = NULL;
    capture_t cap;
    CHECK(setenv("FERRY_BTL", "self", 1) == 0);
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    ferry_ctx_t *stale = ctx;
    /* Nothing may allocate between the free and the uses: the capture
     * starts first. */
    capture_begin(&cap);
    CHECK(ferry_finalize(&ctx) == FERRY_OK && ctx == NULL);
    int progress_rc = ferry_progress(stale);
    int rank_rc = ferry_rank(stale);
    int send_rc = ferry_am_send(stale, 0, 1, "x", 1);
    int finalize_rc = ferry_finalize(&stale);
    const char *text = capture_end(&cap);
    CHECK(progress_rc == FERRY_ERR_INVALID);
    CHECK(rank_rc == FERRY_ERR_INVALID);
    CHECK(send_rc == FERRY_ERR_INVALID);
    CHECK(finalize_rc == FERRY_ERR_INVALID && stale != NULL);
    CHECK(strstr(text, "not a live context was passed: used after ferry_finalize?") != NULL);
    printf("ok  a stale copy of a finalized handle is refused\n");
    return 0;
}

/* Run where /dev/shm is a small file system (run_small_shm.sh): sm must
 * refuse a shared heap larger than its free space, with a message, instead
 * of handing out memory that faults when touched; ferry_mem_alloc then
 * gives ordinary registered memory, which is all usable. */
static int test_heap_beyond_shm(void)
{
    ferry_ctx_t *ctx = NULL;
    capture_t cap;
    const size_t len = (size_t)8 << 20;
    void *addr;
    ferry_mem_t *mem;

    CHECK(setenv("FERRY_BTL", "self,sm", 1) == 0);
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    capture_begin(&cap);
    int rc = ferry_mem_alloc(ctx, len, FERRY_ACCESS_REMOTE_WRITE, &addr, &mem);
    const char *text = capture_end(&cap);
    CHECK(rc == FERRY_OK);
    CHECK(strstr(text, "sm: a shared heap of 8388608 bytes is more than the") != NULL);
    memset(addr, 0x5a, len); /* every page is there */
    CHECK(ferry_mem_free(ctx, mem) == FERRY_OK);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    printf("ok  a shared heap larger than /dev/shm is refused by sm\n");
    return 0;
}

/* What the run is about (see the top of the file): returns 0 to go on, or
 * the exit status (77: skipped). */
static int check_reach(ferry_ctx_t *ctx, bool need_peers, bool expect_unreachable)
{
    int me = ferry_rank(ctx), size = ferry_size(ctx);
    const char *btl = getenv("FERRY_BTL");
    for (int r = 0; r < size; r++) {
        if (r == me)
            continue;
        long max = ferry_am_max_size(ctx, r);
        if (need_peers && max < 0) {
            printf("SKIPPED: rank %d cannot reach rank %d over FERRY_BTL='%s' (%s): a "
                   "transport did not open here; FERRY_LOG_LEVEL=info says why\n",
                   me, r, btl != NULL ? btl : "", ferry_strerror((int)max));
            return 77;
        }
        if (expect_unreachable) {
            CHECK(max == FERRY_ERR_UNREACH);
            CHECK(ferry_am_send(ctx, r, TAG_DATA, "x", 1) == FERRY_ERR_UNREACH);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    bool need_peers = false, expect_unreachable = false;
    if (argc == 2 && strcmp(argv[1], "--stale-handle") == 0)
        return test_stale_handle();
    if (argc == 2 && strcmp(argv[1], "--heap-beyond-shm") == 0)
        return test_heap_beyond_shm();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--need-peers") == 0) {
            need_peers = true;
        } else if (strcmp(argv[i], "--expect-unreachable") == 0) {
            expect_unreachable = true;
        } else {
            fprintf(stderr,
                    "usage: %s [--need-peers | --expect-unreachable | --stale-handle | "
                    "--heap-beyond-shm]\n",
                    argv[0]);
            return 2;
        }
    }
    test_init_refusals();

    ferry_ctx_t *ctx = NULL;
    ferry_init_params_t p = {.thread_level = FERRY_THREAD_FUNNELED};
    CHECK(ferry_init(&p, &ctx) == FERRY_OK);
    int rank = ferry_rank(ctx), size = ferry_size(ctx);
    CHECK(rank >= 0 && rank < size);
    int skip = check_reach(ctx, need_peers, expect_unreachable);
    if (skip != 0) {
        CHECK(ferry_finalize(&ctx) == FERRY_OK);
        return skip;
    }
    CHECK(ferry_rank(NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_progress(NULL) == FERRY_ERR_INVALID);

    am_state_t st = {0};
    rkey_box_t box = {0};
    /* Handlers exist before any peer may send (the barrier says so): a
     * message for a tag without one is dropped. */
    CHECK(ferry_am_register(ctx, TAG_DATA, on_data, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_RKEY, on_rkey, &box) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(size <= MAX_RANKS);
    int reachable = 0;
    for (int dst = 0; dst < size; dst++) {
        if (ferry_am_max_size(ctx, dst) == FERRY_ERR_UNREACH) {
            CHECK(ferry_am_send(ctx, dst, TAG_DATA, "x", 1) == FERRY_ERR_UNREACH);
            continue;
        }
        reachable++;
        test_am(ctx, &st, dst);
    }
    /* Every rank that reaches us sent the same sequence; all of it arrives. */
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    for (int src = 0; src < size; src++) {
        if (ferry_am_max_size(ctx, src) == FERRY_ERR_UNREACH)
            continue;
        size_t sizes[16];
        wait_for(ctx, &st.from[src], (int)am_sizes((size_t)ferry_am_max_size(ctx, src), sizes));
    }
    CHECK(st.bad == 0);
    test_rdma_self(ctx);
    test_rdma_peer(ctx, &box, false);
    test_rdma_peer(ctx, &box, true);
    test_tags(ctx);
    test_no_recursion(ctx, &st);
    for (int i = 0; i < 3; i++)
        CHECK(ferry_barrier(ctx) == FERRY_OK);
    test_finalize(&ctx);
    printf("rank %d: 1 passed, 0 failed\n", rank);
    return 0;
}
