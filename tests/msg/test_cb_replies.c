/*
 * Sends started inside callbacks under back pressure, large and tagged:
 * every rank but 0 floods rank 0 with pings (active messages), and rank
 * 0 answers each one from inside a handler, never retrying: the first half
 * of a peer's pings from the ping's own handler, the second half all at
 * once from one handler after every peer's have arrived. Run with tiny
 * rings or send queues (CMakeLists), the answers meet a full transport;
 * ferry holds them and they leave with progress.
 *
 *   test_cb_replies --am | --msg [--bounded] [--count N]
 *
 * --am: each answer is a ferry_am_send_nb of a size from a cycle that runs
 * from 24 bytes to 3 MiB (above and below the max send size), followed by
 * a small ferry_am_send from the same handler; the completion callbacks of
 * some answers send again (ferry_am_send_nb above the max send size), and
 * rank 0 sends its counts from outside callbacks above the max send size
 * too, which must not overtake what callbacks left held. --msg: each answer is a
 * ferry_msg_isend of those sizes, and the handler also posts a
 * ferry_msg_irecv for a tagged message the pinger sends after its ping.
 * Every answer is counted and its bytes checked at the pinger; per peer the
 * answers (and, with --am, the small messages after them) arrive in the
 * order the handler sent them. Without --bounded no answer may be refused.
 * With --bounded (FERRY_CB_QUEUE_MAX tiny) an answer may be refused with
 * FERRY_ERR_NO_RESOURCE, never anything else, and exactly the answers
 * accepted arrive, each once, in order. --count: pings per peer (400).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>
#include <ferry/msg.h>

#include "../unit/check.h"

#define TAG_PING 1
#define TAG_PONG 2
#define TAG_AFTER 3
#define TAG_COUNT 4
#define TAG_GO 5
#define TAG_LATE 6
#define TAG_COUNT2 7

/* Tagged contexts: rank 0's answers, the pingers' follow-ups, the counts. */
#define CTX_ANSWER 0
#define CTX_FOLLOW 1
#define CTX_COUNT 2

#define MAX_RANKS 16
#define MAX_PINGS 1000

static size_t g_eager; /* ferry_am_max_size to rank 0 (and from it) */
static int g_n = 400;
static bool g_bounded;
static ferry_msg_t *g_msg;

/* The size of answer seq: a cycle around and far above the max send size. */
static size_t answer_size(uint64_t seq)
{
    switch (seq % 6) {
    case 0: return 24;
    case 1: return g_eager / 2;
    case 2: return g_eager + 1;
    case 3: return 70000;
    case 4: return seq % 30 == 4 ? 600000 : 9000;
    default:
        return seq % 60 == 5 ? (3u << 20) + 13 : seq % 60 == 35 ? (1u << 20) + 5 : 20000;
    }
}

/* The pingers' follow-ups: the same cycle, below a megabyte, so that the
 * receives rank 0 posts stay modest. */
static size_t follow_size(uint64_t seq)
{
    size_t s = answer_size(seq);
    return s > 600000 ? 600000 - seq : s;
}

/* Byte k of message seq from rank src (k >= 8: the first 8 are seq). */
static unsigned char pattern(int src, uint64_t seq, size_t k)
{
    return (unsigned char)(seq * 131u + k * 7u + (unsigned)src * 29u);
}

static void fill(unsigned char *p, size_t len, int src, uint64_t seq)
{
    if (len >= sizeof(seq))
        memcpy(p, &seq, sizeof(seq));
    for (size_t k = sizeof(seq); k < len; k++)
        p[k] = pattern(src, seq, k);
}

static bool intact(const unsigned char *p, size_t len, int src, uint64_t seq)
{
    uint64_t got;
    if (len < sizeof(got))
        return false;
    memcpy(&got, p, sizeof(got));
    if (got != seq)
        return false;
    for (size_t k = sizeof(seq); k < len; k++)
        if (p[k] != pattern(src, seq, k))
            return false;
    return true;
}

/* ---- rank 0: the answers ---- */

typedef struct peer_counts {
    long pongs, afters, lates; /* accepted */
} peer_counts_t;

static struct {
    long handled, refused, bad_rc, completed, bad_status;
    long lates_done, counts_done; /* --am: completions of late sends and counts */
    peer_counts_t acc[MAX_RANKS];
    /* --msg: the answers' requests and buffers, the follow-ups' receives. */
    ferry_msg_req_t *sreq[MAX_RANKS * MAX_PINGS];
    unsigned char *sbuf[MAX_RANKS * MAX_PINGS];
    ferry_msg_req_t *rreq[MAX_RANKS * MAX_PINGS];
    unsigned char *rbuf[MAX_RANKS * MAX_PINGS];
    uint64_t rseq[MAX_RANKS * MAX_PINGS];
    int rsrc[MAX_RANKS * MAX_PINGS];
    long nsreq, nrreq;
    long kept[MAX_RANKS], kept_all; /* pings kept for the burst */
} g0;

static ferry_ctx_t *g_ctx;

/* --am: the size of the message a completion callback sends for answer
 * seq (when seq % 6 == 3): above the max send size too. */
static size_t late_size(uint64_t seq)
{
    return g_eager + 1 + (size_t)seq;
}

static void count_rc(int rc, long *accepted)
{
    if (rc == FERRY_OK)
        (*accepted)++;
    else if (rc == FERRY_ERR_NO_RESOURCE)
        g0.refused++;
    else
        g0.bad_rc++;
}

static void on_late_sent(void *arg, int status)
{
    free(arg);
    g0.lates_done++;
    if (status != FERRY_OK)
        g0.bad_status++;
}

typedef struct sent_arg {
    unsigned char *buf;
    int src;
    uint64_t seq;
} sent_arg_t;

/* An answer's completion: some send again from inside this callback. */
static void on_sent(void *arg, int status)
{
    sent_arg_t *sa = arg;
    free(sa->buf);
    g0.completed++;
    if (status != FERRY_OK)
        g0.bad_status++;
    if (sa->seq % 6 == 3) {
        size_t len = late_size(sa->seq);
        unsigned char *buf = malloc(len);
        CHECK(buf != NULL);
        fill(buf, len, 0, sa->seq);
        int rc = ferry_am_send_nb(g_ctx, sa->src, TAG_LATE, buf, len, on_late_sent, buf);
        if (rc != FERRY_OK)
            free(buf);
        count_rc(rc, &g0.acc[sa->src].lates);
    }
    free(sa);
}

static void answer_am(ferry_ctx_t *ctx, int src, uint64_t seq)
{
    size_t len = answer_size(seq);
    unsigned char *buf = malloc(len);
    CHECK(buf != NULL);
    fill(buf, len, 0, seq);
    sent_arg_t *sa = malloc(sizeof(*sa));
    CHECK(sa != NULL);
    *sa = (sent_arg_t){.buf = buf, .src = src, .seq = seq};
    int rc = ferry_am_send_nb(ctx, src, TAG_PONG, buf, len, on_sent, sa);
    if (rc != FERRY_OK) {
        free(buf);
        free(sa);
    }
    count_rc(rc, &g0.acc[src].pongs);
    /* What the handler sends afterwards must arrive after it. */
    rc = ferry_am_send(ctx, src, TAG_AFTER, &seq, sizeof(seq));
    count_rc(rc, &g0.acc[src].afters);
}

static void answer_msg(int src, uint64_t seq)
{
    size_t len = answer_size(seq);
    unsigned char *buf = malloc(len);
    CHECK(buf != NULL);
    fill(buf, len, 0, seq);
    ferry_msg_req_t *req = NULL;
    int rc = ferry_msg_isend(g_msg, src, CTX_ANSWER, seq, buf, len, &req);
    if (rc == FERRY_OK) {
        CHECK(req != NULL);
        g0.sreq[g0.nsreq] = req;
        g0.sbuf[g0.nsreq++] = buf;
    } else {
        CHECK(req == NULL);
        free(buf);
    }
    count_rc(rc, &g0.acc[src].pongs);
    /* A receive posted from the handler: the pinger's follow-up. */
    size_t rlen = follow_size(seq);
    unsigned char *rbuf = malloc(rlen);
    CHECK(rbuf != NULL);
    memset(rbuf, 0, rlen);
    long i = g0.nrreq++;
    g0.rbuf[i] = rbuf;
    g0.rseq[i] = seq;
    g0.rsrc[i] = src;
    CHECK(ferry_msg_irecv(g_msg, src, CTX_FOLLOW, seq, FERRY_MSG_TAG_EXACT, rbuf, rlen,
                          &g0.rreq[i]) == FERRY_OK);
}

static void answer(ferry_ctx_t *ctx, int src, uint64_t seq)
{
    if (g_msg != NULL)
        answer_msg(src, seq);
    else
        answer_am(ctx, src, seq);
    g0.handled++;
}

/* The first half of each peer's pings is answered as it arrives; the
 * second half is kept until every peer's has arrived, then answered all at
 * once from one handler (of a message rank 0 sends itself), so that the
 * transport is sure to run out of room while the answers are made. */
static void on_ping(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)tag, (void)arg;
    uint64_t seq;
    CHECK(len == sizeof(seq) && src > 0 && src < MAX_RANKS);
    memcpy(&seq, data, sizeof(seq));
    if (seq < (uint64_t)g_n / 2) {
        answer(ctx, src, seq);
        return;
    }
    CHECK(seq == (uint64_t)g_n / 2 + (uint64_t)g0.kept[src]);
    g0.kept[src]++;
    if (++g0.kept_all == (long)(g_n - g_n / 2) * (ferry_size(ctx) - 1))
        CHECK(ferry_am_send(ctx, 0, TAG_GO, NULL, 0) == FERRY_OK);
}

static void on_go(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)src, (void)tag, (void)data, (void)len, (void)arg;
    for (uint64_t seq = (uint64_t)g_n / 2; seq < (uint64_t)g_n; seq++)
        for (int r = 1; r < ferry_size(ctx); r++)
            answer(ctx, r, seq);
}

/* Tests every live request once; returns how many are still live. */
static long msg_test_all(void)
{
    long live = 0;
    for (long i = 0; i < g0.nsreq; i++) {
        if (g0.sreq[i] == NULL)
            continue;
        int done = 0;
        ferry_msg_status_t st;
        int rc = ferry_msg_test(g_msg, &g0.sreq[i], &done, &st);
        if (!done) {
            CHECK(rc == FERRY_OK);
            live++;
            continue;
        }
        if (rc != FERRY_OK)
            g0.bad_status++;
        free(g0.sbuf[i]);
        g0.sbuf[i] = NULL;
        g0.completed++;
    }
    for (long i = 0; i < g0.nrreq; i++) {
        if (g0.rreq[i] == NULL)
            continue;
        int done = 0;
        ferry_msg_status_t st;
        int rc = ferry_msg_test(g_msg, &g0.rreq[i], &done, &st);
        if (!done) {
            CHECK(rc == FERRY_OK);
            live++;
            continue;
        }
        size_t want = follow_size(g0.rseq[i]);
        CHECK(rc == FERRY_OK && st.source == g0.rsrc[i] && st.tag == g0.rseq[i] &&
              st.len == want && st.received == want);
        CHECK(intact(g0.rbuf[i], want, g0.rsrc[i], g0.rseq[i]));
        free(g0.rbuf[i]);
        g0.rbuf[i] = NULL;
    }
    return live;
}

static void on_count_sent(void *arg, int status)
{
    free(arg);
    CHECK(status == FERRY_OK);
    g0.counts_done++;
}

/* --am: rank r's counts, sent from outside callbacks as a message above the
 * max send size: it must not overtake what callbacks left queued for r. */
static void send_counts(ferry_ctx_t *ctx, int r, int tag)
{
    size_t len = g_eager + 100;
    unsigned char *buf = calloc(1, len);
    CHECK(buf != NULL);
    memcpy(buf, &g0.acc[r], sizeof(g0.acc[r]));
    int rc;
    while ((rc = ferry_am_send_nb(ctx, r, tag, buf, len, on_count_sent, buf)) ==
           FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    CHECK(rc == FERRY_OK);
}

static void run_rank0(ferry_ctx_t *ctx, int size)
{
    long total = (long)g_n * (size - 1);
    while (g0.handled < total) {
        if (g_msg != NULL) {
            ferry_msg_progress(g_msg);
            msg_test_all();
        } else {
            ferry_progress(ctx);
        }
    }
    printf("rank 0: %ld pings answered from handlers, %ld sends refused, %ld failed otherwise\n",
           g0.handled, g0.refused, g0.bad_rc);
    CHECK(g0.bad_rc == 0);
    /* Tiny as it is, the bound is met by the answers made at once. */
    CHECK(g_bounded ? g0.refused > 0 : g0.refused == 0);
    /* Each pinger learns what was accepted for it, behind the answers. */
    long accepted = 0;
    for (int r = 1; r < size; r++) {
        accepted += g0.acc[r].pongs;
        if (g_msg != NULL) {
            CHECK(ferry_msg_send(g_msg, r, CTX_COUNT, 0, &g0.acc[r], sizeof(g0.acc[r])) ==
                  FERRY_OK);
            continue;
        }
        send_counts(ctx, r, TAG_COUNT);
    }
    if (g_msg != NULL) {
        while (msg_test_all() > 0)
            ;
        CHECK(g0.completed == accepted && g0.bad_status == 0);
        return;
    }
    /* Every answer's completion (each may start a late send), then every
     * late send's. */
    while (g0.completed < accepted)
        ferry_progress(ctx);
    long lates = 0;
    for (int r = 1; r < size; r++)
        lates += g0.acc[r].lates;
    while (g0.lates_done < lates)
        ferry_progress(ctx);
    CHECK(g0.completed == accepted && g0.lates_done == lates && g0.bad_status == 0);
    CHECK(g0.bad_rc == 0);
    for (int r = 1; r < size; r++)
        send_counts(ctx, r, TAG_COUNT2);
    while (g0.counts_done < 2L * (size - 1))
        ferry_progress(ctx);
}

/* ---- the pingers ---- */

static struct {
    long pongs, afters, lates, bad;
    long last_key; /* 2 * seq + (0: answer, 1: the message after it) */
    bool told, told2;
    peer_counts_t expect;
} gp = {.last_key = -1};

/* Per peer the handler's sends arrive in the order it made them: each
 * answer, then the message after it, then the next answer. */
static void see(uint64_t seq, int kind)
{
    long key = (long)seq * 2 + kind;
    if (key <= gp.last_key)
        gp.bad++;
    gp.last_key = key;
}

static void on_pong(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)tag, (void)arg;
    uint64_t seq = 0;
    CHECK(src == 0 && len >= sizeof(seq));
    memcpy(&seq, data, sizeof(seq));
    CHECK(seq < (uint64_t)g_n && len == answer_size(seq) && intact(data, len, 0, seq));
    see(seq, 0);
    gp.pongs++;
}

static void on_after(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)tag, (void)arg;
    uint64_t seq;
    CHECK(src == 0 && len == sizeof(seq));
    memcpy(&seq, data, sizeof(seq));
    see(seq, 1);
    gp.afters++;
}

static void on_count(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)tag, (void)arg;
    CHECK(src == 0 && len == (g_msg != NULL ? sizeof(gp.expect) : g_eager + 100) && !gp.told);
    memcpy(&gp.expect, data, sizeof(gp.expect));
    /* Handlers run in the order sent: every accepted answer came first. */
    CHECK(gp.pongs == gp.expect.pongs && gp.afters == gp.expect.afters);
    gp.told = true;
}

static void on_late(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)tag, (void)arg;
    uint64_t seq = 0;
    CHECK(src == 0 && len >= sizeof(seq));
    memcpy(&seq, data, sizeof(seq));
    CHECK(seq < (uint64_t)g_n && seq % 6 == 3 && len == late_size(seq) &&
          intact(data, len, 0, seq));
    gp.lates++;
}

static void on_count2(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)tag, (void)arg;
    CHECK(src == 0 && len == g_eager + 100 && gp.told && !gp.told2);
    peer_counts_t final;
    memcpy(&final, data, sizeof(final));
    CHECK(final.pongs == gp.expect.pongs && final.afters == gp.expect.afters);
    /* Every late send was accepted before this was sent. */
    CHECK(gp.lates == final.lates);
    gp.expect.lates = final.lates;
    gp.told2 = true;
}

/* With --bounded, after its last ping a pinger takes nothing for a while,
 * so that rank 0's burst of answers meets a path nobody empties and must
 * meet the bound. A pinger that drains at once can keep a whole burst
 * moving (answers by rendezvous announce themselves in two ring lines, and
 * are taken inside the handler that gets them): then nothing was refused,
 * now and then, and the bound went untested. */
static void pinger_pause(void)
{
    if (g_bounded)
        usleep(200 * 1000);
}

static void run_pinger_am(ferry_ctx_t *ctx)
{
    for (uint64_t i = 0; i < (uint64_t)g_n; i++) {
        int rc;
        while ((rc = ferry_am_send(ctx, 0, TAG_PING, &i, sizeof(i))) == FERRY_ERR_NO_RESOURCE)
            ferry_progress(ctx);
        CHECK(rc == FERRY_OK);
    }
    pinger_pause();
    while (!gp.told2)
        ferry_progress(ctx);
}

static void run_pinger_msg(ferry_ctx_t *ctx)
{
    ferry_msg_req_t *follow[MAX_PINGS];
    unsigned char *fbuf[MAX_PINGS];
    for (uint64_t i = 0; i < (uint64_t)g_n; i++) {
        int rc;
        while ((rc = ferry_am_send(ctx, 0, TAG_PING, &i, sizeof(i))) == FERRY_ERR_NO_RESOURCE)
            ferry_msg_progress(g_msg);
        CHECK(rc == FERRY_OK);
        size_t flen = follow_size(i);
        fbuf[i] = malloc(flen);
        CHECK(fbuf[i] != NULL);
        fill(fbuf[i], flen, ferry_rank(ctx), i);
        CHECK(ferry_msg_isend(g_msg, 0, CTX_FOLLOW, i, fbuf[i], flen, &follow[i]) == FERRY_OK);
    }
    pinger_pause();
    peer_counts_t expect;
    ferry_msg_req_t *creq = NULL, *areq = NULL;
    CHECK(ferry_msg_irecv(g_msg, 0, CTX_COUNT, 0, FERRY_MSG_TAG_EXACT, &expect, sizeof(expect),
                          &creq) == FERRY_OK);
    size_t amax = (3u << 20) + 13;
    unsigned char *abuf = malloc(amax);
    CHECK(abuf != NULL);
    long sends_live = g_n;
    while (!gp.told || gp.pongs < gp.expect.pongs || sends_live > 0) {
        int done = 0;
        ferry_msg_status_t st;
        if (creq != NULL) {
            CHECK(ferry_msg_test(g_msg, &creq, &done, &st) == FERRY_OK);
            if (done) {
                CHECK(st.len == sizeof(expect));
                gp.expect = expect;
                gp.told = true;
            }
        }
        if (areq == NULL && (!gp.told || gp.pongs < gp.expect.pongs))
            CHECK(ferry_msg_irecv(g_msg, 0, CTX_ANSWER, 0, FERRY_MSG_ANY_TAG, abuf, amax,
                                  &areq) == FERRY_OK);
        if (areq != NULL) {
            int rc = ferry_msg_test(g_msg, &areq, &done, &st);
            if (done) {
                CHECK(rc == FERRY_OK && st.source == 0 && st.tag < (uint64_t)g_n);
                CHECK(st.len == answer_size(st.tag) && st.received == st.len);
                CHECK(intact(abuf, st.len, 0, st.tag));
                see(st.tag, 0);
                gp.pongs++;
            }
        }
        for (int i = 0; i < g_n; i++) {
            if (follow[i] == NULL)
                continue;
            int rc = ferry_msg_test(g_msg, &follow[i], &done, &st);
            if (done) {
                CHECK(rc == FERRY_OK);
                free(fbuf[i]);
                sends_live--;
            }
        }
    }
    CHECK(gp.pongs == gp.expect.pongs);
    if (areq != NULL) {
        /* Nothing more comes: the last receive posted is still empty. */
        CHECK(ferry_msg_cancel(g_msg, areq) == FERRY_OK);
        CHECK(ferry_msg_wait(g_msg, &areq, NULL) == FERRY_ERR_CANCELED);
    }
    free(abuf);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    bool am = false, msg = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--am") == 0) {
            am = true;
        } else if (strcmp(argv[i], "--msg") == 0) {
            msg = true;
        } else if (strcmp(argv[i], "--bounded") == 0) {
            g_bounded = true;
        } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            g_n = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s --am | --msg [--bounded] [--count N]\n", argv[0]);
            return 2;
        }
    }
    CHECK(am != msg && g_n > 0 && g_n <= MAX_PINGS);

    ferry_ctx_t *ctx = NULL;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    g_ctx = ctx;
    int me = ferry_rank(ctx), size = ferry_size(ctx);
    CHECK(size <= MAX_RANKS);
    if (size < 2) {
        printf("SKIPPED: needs 2 ranks or more (run under ferryrun -n 2)\n");
        CHECK(ferry_finalize(&ctx) == FERRY_OK);
        return 77;
    }
    for (int r = 0; r < size; r++) {
        long max = ferry_am_max_size(ctx, r);
        if (max < 0) {
            const char *btl = getenv("FERRY_BTL");
            printf("SKIPPED: rank %d cannot reach rank %d over FERRY_BTL='%s' (%s): a transport "
                   "did not open here; FERRY_LOG_LEVEL=info says why\n",
                   me, r, btl != NULL ? btl : "", ferry_strerror((int)max));
            CHECK(ferry_finalize(&ctx) == FERRY_OK);
            return 77;
        }
    }
    g_eager = (size_t)ferry_am_max_size(ctx, me == 0 ? 1 : 0);
    CHECK(g_eager >= 64);
    if (msg)
        CHECK(ferry_msg_init(ctx, &g_msg) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_PING, on_ping, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_PONG, on_pong, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_AFTER, on_after, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_COUNT, on_count, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_GO, on_go, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_LATE, on_late, NULL) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_COUNT2, on_count2, NULL) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    if (me == 0)
        run_rank0(ctx, size);
    else if (msg)
        run_pinger_msg(ctx);
    else
        run_pinger_am(ctx);

    if (me != 0) {
        CHECK(gp.told && gp.bad == 0);
        CHECK(gp.pongs == gp.expect.pongs && gp.pongs <= g_n);
        if (am)
            CHECK(gp.afters == gp.expect.afters && gp.afters <= g_n);
        if (!g_bounded)
            CHECK(gp.pongs == g_n && (msg || gp.afters == g_n));
        if (!g_bounded && am)
            CHECK(gp.lates == (g_n + 2) / 6); /* one per seq with seq % 6 == 3 */
        printf("rank %d: %ld answers%s, every byte right, in order\n", me, gp.pongs,
               am ? " and the messages after them" : "");
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (g_msg != NULL)
        CHECK(ferry_msg_fini(&g_msg) == FERRY_OK);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    if (me == 0)
        printf("ok  %s from handlers under back pressure%s: none lost, none twice, in order\n",
               am ? "large active messages" : "tagged sends and receives",
               g_bounded ? " (bounded)" : "");
    return 0;
}
