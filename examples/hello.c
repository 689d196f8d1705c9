/* hello.c: each rank greets the next one with an active message, then writes
 * the same greeting straight into that rank's memory with a put. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

enum { TAG_HELLO = 1, TAG_RKEY = 2 };

/* What a rank sends so that another can put into its inbox. */
struct inbox_key {
    uint64_t addr;
    ferry_rkey_t rkey;
};

struct state {
    int hellos;           /* greetings received */
    int have_key;         /* key has arrived */
    struct inbox_key key; /* where to put our greeting */
};

static void check(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "hello: %s: %s\n", what, ferry_strerror(rc));
        exit(1);
    }
}

static void on_hello(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                     void *arg)
{
    struct state *st = arg;

    (void)tag;
    printf("rank %d: message from rank %d: %.*s\n", ferry_rank(ctx), src, (int)len,
           (const char *)data);
    st->hellos++;
}

static void on_rkey(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    struct state *st = arg;

    (void)ctx, (void)src, (void)tag;
    if (len == sizeof st->key) {
        memcpy(&st->key, data, len);
        st->have_key = 1;
    }
}

/* Sends, progressing while the transport is out of buffers or credits. */
static void send_am(ferry_ctx_t *ctx, int dst, int tag, const void *data, size_t len)
{
    int rc;

    while ((rc = ferry_am_send(ctx, dst, tag, data, len)) == FERRY_ERR_NO_RESOURCE) {
        check(ferry_progress(ctx), "ferry_progress");
    }
    check(rc, "ferry_am_send");
}

int main(void)
{
    ferry_ctx_t *ctx;
    struct state st = {0};
    char inbox[64] = "";
    char text[64];
    char expect[64];
    ferry_mem_t *mem;
    struct inbox_key mine;

    check(ferry_init(NULL, &ctx), "ferry_init");
    int rank = ferry_rank(ctx);
    int size = ferry_size(ctx);

    /* Talk to the neighbours when a transport reaches them; where none does
     * (only the self transport is built), each rank talks to itself. */
    int next = (rank + 1) % size;
    int prev = (rank + size - 1) % size;
    if (ferry_am_max_size(ctx, next) < 0 || ferry_am_max_size(ctx, prev) < 0) {
        next = prev = rank;
    }

    check(ferry_am_register(ctx, TAG_HELLO, on_hello, &st), "ferry_am_register");
    check(ferry_am_register(ctx, TAG_RKEY, on_rkey, &st), "ferry_am_register");
    /* Every rank's handlers must be in place before anyone sends. */
    check(ferry_barrier(ctx), "ferry_barrier");

    /* prev will put its greeting into our inbox: send it the address and key. */
    check(ferry_mem_register(ctx, inbox, sizeof inbox,
                             FERRY_ACCESS_LOCAL | FERRY_ACCESS_REMOTE_WRITE, &mem),
          "ferry_mem_register");
    mine.addr = (uint64_t)(uintptr_t)inbox;
    check(ferry_mem_rkey(mem, &mine.rkey), "ferry_mem_rkey");
    send_am(ctx, prev, TAG_RKEY, &mine, sizeof mine);

    snprintf(text, sizeof text, "hello from rank %d", rank);
    send_am(ctx, next, TAG_HELLO, text, strlen(text));

    while (st.hellos == 0 || !st.have_key) {
        check(ferry_progress(ctx), "ferry_progress");
    }

    check(ferry_put(ctx, next, text, strlen(text) + 1, NULL, st.key.addr, &st.key.rkey, NULL,
                    NULL),
          "ferry_put");
    check(ferry_flush(ctx, next), "ferry_flush");
    /* After the barrier every put has landed, ours included. */
    check(ferry_barrier(ctx), "ferry_barrier");

    snprintf(expect, sizeof expect, "hello from rank %d", prev);
    printf("rank %d: inbox holds \"%s\"\n", rank, inbox);
    int ok = strcmp(inbox, expect) == 0;

    check(ferry_mem_deregister(ctx, mem), "ferry_mem_deregister");
    check(ferry_finalize(&ctx), "ferry_finalize");
    return ok ? 0 : 1;
}
