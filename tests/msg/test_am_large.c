/*
 * Active messages of any size, on a ring (each rank sends to the next and
 * to itself) under ferryrun:
 * - order: small and large messages interleaved, blocking and not, with
 *   a gathered (iovec) one among them; each handler checks the message's
 *   sequence number (handlers run in the order sent) and every byte;
 * - data handlers: a large message taken into the handler's own buffer,
 *   into a strided layout, into too small a buffer (FERRY_ERR_TRUNCATE,
 *   nothing past it written), dropped (the sender sees
 *   FERRY_ERR_CANCELED), and taken later, outside the handler;
 * - ferry_am_sizes agrees with ferry_am_max_size;
 * - with --limit (FERRY_AM_LARGE_MAX=1 MiB): a 2 MiB message to a tag
 *   without a data handler is refused at both ends;
 * - attacks: announcements of 2^63 and 2^40 bytes crafted on the wire
 *   (nothing allocated, the process carries on); a rendezvous key used
 *   after its message completed, and while a newer one is live on the
 *   same buffer, is refused;
 * - with --random: messages of random sizes up to 64 MiB, from contiguous
 *   and gathered sources, into ferry's buffer, a data handler's buffer, a
 *   scattered layout, dropped, and taken from later progress; every byte
 *   checked (run with each FERRY_AM_RNDV);
 * - with --frag-attack (FERRY_AM_RNDV=pipe): crafted PIPE fragments, short,
 *   for no message, overlapping, leaving a gap and running past the
 *   announced length, are refused without a byte written out of place;
 * - with --pipe-dies-recv / --pipe-dies-send: rank 1 (the receiver) or
 *   rank 0 (the sender) of a 64 MiB message dies in the middle of its
 *   stream; the other side's send or receive ends with an error
 *   (run_pipe_dies.sh).
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "../unit/check.h"
#include "api/am_large.h"
#include "api/api.h"

enum {
    TAG_ORD = 1,
    TAG_DATA = 2,
    TAG_KEY = 3,
    TAG_NOTE = 4,
    TAG_WIN = 5,
    TAG_WIN_DATA = 6,
    TAG_RAND_ORD = 7,
    TAG_RAND_DATA = 8
};

/* The window phase: messages in flight at once. */
#define WIN 40

static uint8_t pat(uint64_t seq, size_t i)
{
    return (uint8_t)(seq * 29u + i * 7u + (i >> 11));
}

static void fill(uint8_t *b, size_t len, uint64_t seq)
{
    for (size_t i = 0; i < len; i++)
        b[i] = pat(seq, i);
    if (len >= 8)
        memcpy(b, &seq, 8);
}

static bool good(const uint8_t *b, size_t len, uint64_t seq, size_t from)
{
    for (size_t i = from; i < len; i++)
        if (b[i] != pat(seq, i))
            return false;
    return true;
}

typedef struct state {
    ferry_ctx_t *ctx;
    uint64_t next_seq[2]; /* expected, from prev and from self */
    int prev, next, me;
    int got;
    /* data handler */
    int data_mode;
    ferry_am_data_t *kept;
    size_t kept_len;
    uint8_t *dbuf;
    size_t dcap;
    int dstatus;
    int ddone;
    /* key reuse */
    ferry_am_data_t *kdata;
    uint64_t kaddr[2];
    ferry_rkey_t kkey[2];
    int knum;
    int notes;
    int absurd_calls;
    /* window */
    uint64_t win_next;
    size_t win_len;
    uint8_t *win_buf; /* WIN slices of win_len */
    int win_taken, win_arrived;
    /* random sizes */
    int r_mode;
    size_t r_len;
    uint64_t r_seq;
    int r_got;
} state_t;

static void on_ord(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)tag;
    CHECK(len >= 8);
    CHECK(src == st->prev || src == st->me);
    uint64_t seq;
    memcpy(&seq, data, 8);
    int slot = src == st->me ? 1 : 0;
    if (seq != st->next_seq[slot])
        fprintf(stderr, "rank %d: from %d got seq %llu, expected %llu (len %zu)\n", st->me, src,
                (unsigned long long)seq, (unsigned long long)st->next_seq[slot], len);
    CHECK(seq == st->next_seq[slot]);
    CHECK(good(data, len, seq, 8));
    st->next_seq[slot]++;
    st->got++;
}

static void on_note(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)data, (void)len;
    ((state_t *)arg)->notes++;
}

static void on_win(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)src, (void)tag;
    uint64_t seq;
    CHECK(len == st->win_len);
    memcpy(&seq, data, 8);
    CHECK(seq == st->win_next);
    CHECK(good(data, len, seq, 8));
    st->win_next++;
}

static void win_arrived(void *arg, int status)
{
    state_t *st = arg;
    CHECK(status == FERRY_OK);
    st->win_arrived++;
}

static void on_win_data(ferry_ctx_t *ctx, int src, int tag, ferry_am_data_t *data, size_t len,
                        void *arg)
{
    state_t *st = arg;
    (void)src, (void)tag;
    CHECK(len == st->win_len && st->win_taken < WIN);
    uint8_t *slice = st->win_buf + (size_t)st->win_taken++ * len;
    CHECK(ferry_am_recv_data(ctx, data, slice, len, win_arrived, st) == FERRY_OK);
}

static void data_cb_done(void *arg, int status)
{
    state_t *st = arg;
    st->dstatus = status;
    st->ddone++;
}

enum { MODE_EXACT, MODE_VECTOR, MODE_SHORT, MODE_DROP, MODE_KEEP, MODE_ABSURD };

static ferry_vector_t g_vec;

static void on_data(ferry_ctx_t *ctx, int src, int tag, ferry_am_data_t *data, size_t len,
                    void *arg)
{
    state_t *st = arg;
    (void)tag;
    CHECK(src == st->prev);
    switch (st->data_mode) {
    case MODE_EXACT:
        CHECK(len <= st->dcap);
        CHECK(ferry_am_recv_data(ctx, data, st->dbuf, len, data_cb_done, st) == FERRY_OK);
        /* Taken once only. */
        CHECK(ferry_am_recv_data(ctx, data, st->dbuf, len, data_cb_done, st) == FERRY_ERR_INVALID);
        break;
    case MODE_VECTOR: {
        ferry_convertor_t conv;
        CHECK(ferry_convertor_init_vector(&conv, &g_vec) == FERRY_OK);
        CHECK(conv.total == len);
        CHECK(ferry_am_recv_data_conv(ctx, data, &conv, data_cb_done, st) == FERRY_OK);
        break;
    }
    case MODE_SHORT:
        CHECK(ferry_am_recv_data(ctx, data, st->dbuf, len / 3, data_cb_done, st) == FERRY_OK);
        break;
    case MODE_DROP:
        CHECK(ferry_am_data_drop(ctx, data) == FERRY_OK);
        st->ddone++;
        break;
    case MODE_KEEP:
        st->kept = data;
        st->kept_len = len;
        break;
    case MODE_ABSURD:
        /* The crafted 2^40-byte announcement: the handler sees the length
         * and takes a little of it, from a key that is no key. */
        st->absurd_calls++;
        CHECK(len == (size_t)1 << 40);
        CHECK(ferry_am_recv_data(ctx, data, st->dbuf, 16, data_cb_done, st) == FERRY_OK);
        break;
    }
}

static void on_key(ferry_ctx_t *ctx, int src, int tag, ferry_am_data_t *data, size_t len, void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)src, (void)tag, (void)len;
    CHECK(st->knum < 2);
    CHECK(api_am_data_peek_key(data, &st->kaddr[st->knum], &st->kkey[st->knum]) == FERRY_OK);
    st->knum++;
    st->kdata = data;
}

static void wait_until(ferry_ctx_t *ctx, const int *v, int want)
{
    while (*v < want)
        CHECK(ferry_progress(ctx) >= 0);
}

static int send_small(ferry_ctx_t *ctx, int dst, int tag, const void *b, size_t len)
{
    int rc;
    while ((rc = ferry_am_send(ctx, dst, tag, b, len)) == FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    return rc;
}

typedef struct nb {
    int done;
    int status;
} nb_t;

static void nb_done(void *arg, int status)
{
    nb_t *n = arg;
    n->status = status;
    n->done++;
}

static void phase_order(state_t *st, size_t max)
{
    ferry_ctx_t *ctx = st->ctx;
    const size_t sizes[] = {
        8, max, max + 1, 2 * max + 3, (size_t)1 << 20, 3 * max + 11, ((size_t)5 << 20) + 1, 64};
    const size_t n = sizeof(sizes) / sizeof(sizes[0]);
    size_t big = ((size_t)5 << 20) + 1 > 3 * max + 11 ? ((size_t)5 << 20) + 1 : 3 * max + 11;
    uint8_t *buf = malloc(big);
    uint8_t *buf2 = malloc(big);
    CHECK(buf != NULL && buf2 != NULL);
    uint64_t seq[2] = {0, 0};
    int targets[2] = {st->next, st->me};
    int sent = 0;
    for (int t = 0; t < 2; t++) {
        int dst = targets[t];
        if (t == 1 && dst == st->next)
            break; /* a ring of one: self is next */
        for (size_t k = 0; k < n; k++) {
            size_t len = sizes[k];
            fill(buf, len, seq[t]);
            if (len > max && k % 2 == 0) {
                /* Non-blocking: its buffer waits for the callback; a
                 * small one sent right behind must not overtake it. */
                nb_t done = {0, 1};
                CHECK(ferry_am_send_nb(ctx, dst, TAG_ORD, buf, len, nb_done, &done) == FERRY_OK);
                seq[t]++;
                fill(buf2, 8, seq[t]);
                CHECK(send_small(ctx, dst, TAG_ORD, buf2, 8) == FERRY_OK);
                seq[t]++;
                sent += 2;
                while (done.done == 0)
                    CHECK(ferry_progress(ctx) >= 0);
                CHECK(done.done == 1 && done.status == FERRY_OK);
            } else if (len > max && k % 3 == 0) {
                /* Gathered from three pieces. */
                ferry_iov_t iov[3] = {{buf, 5}, {buf + 5, len / 2}, {buf + 5 + len / 2, 0}};
                iov[2].len = len - 5 - len / 2;
                CHECK(ferry_am_sendv(ctx, dst, TAG_ORD, iov, 3) == FERRY_OK);
                seq[t]++;
                sent++;
            } else {
                CHECK(send_small(ctx, dst, TAG_ORD, buf, len) == FERRY_OK);
                memset(buf, 0xee, len); /* ours again at once */
                seq[t]++;
                sent++;
            }
        }
    }
    (void)sent;
    /* What we expect to receive: the same count from prev (and self). */
    int want = (int)(seq[0] + (st->next != st->me ? seq[1] : 0));
    wait_until(ctx, &st->got, want);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    free(buf);
    free(buf2);
}

static void phase_data(state_t *st, size_t max)
{
    ferry_ctx_t *ctx = st->ctx;
    size_t len = 2 * max + 100;
    st->dcap = len + 64;
    st->dbuf = malloc(st->dcap);
    uint8_t *src = malloc(len);
    CHECK(st->dbuf != NULL && src != NULL);
    fill(src, len, 77);
    /* The vector layout: len bytes in blocks of 1000 (the last shorter
     * is not possible in a vector, so len is cut to whole blocks). */
    size_t vlen = len / 1000 * 1000;
    uint8_t *vbuf = calloc(1, vlen / 1000 * 1500);
    CHECK(vbuf != NULL);
    g_vec = (ferry_vector_t){.base = vbuf, .count = vlen / 1000, .block_len = 1000, .stride = 1500};
    const int modes[] = {MODE_EXACT, MODE_VECTOR, MODE_SHORT, MODE_DROP, MODE_KEEP};
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        st->data_mode = modes[m];
        st->ddone = 0;
        st->dstatus = 1;
        memset(st->dbuf, 0x5a, st->dcap);
        CHECK(ferry_barrier(ctx) == FERRY_OK);
        size_t slen = modes[m] == MODE_VECTOR ? vlen : len;
        nb_t done = {0, 1};
        CHECK(ferry_am_send_nb(ctx, st->next, TAG_DATA, src, slen, nb_done, &done) == FERRY_OK);
        if (modes[m] == MODE_KEEP) {
            while (st->kept == NULL)
                CHECK(ferry_progress(ctx) >= 0);
            /* Outside the handler, later. */
            CHECK(st->kept_len == len);
            CHECK(ferry_am_recv_data(ctx, st->kept, st->dbuf, st->dcap, data_cb_done, st) ==
                  FERRY_OK);
            st->kept = NULL;
        }
        while (done.done == 0 || st->ddone == 0)
            CHECK(ferry_progress(ctx) >= 0);
        switch (modes[m]) {
        case MODE_EXACT:
        case MODE_KEEP:
            CHECK(done.status == FERRY_OK);
            CHECK(st->dstatus == FERRY_OK);
            CHECK(memcmp(st->dbuf, src, len) == 0);
            for (size_t i = len; i < st->dcap; i++)
                CHECK(st->dbuf[i] == 0x5a);
            break;
        case MODE_VECTOR:
            CHECK(st->dstatus == FERRY_OK);
            for (size_t b = 0; b < vlen / 1000; b++) {
                CHECK(memcmp(vbuf + b * 1500, src + b * 1000, 1000) == 0);
                if (b + 1 < vlen / 1000)
                    for (size_t i = 1000; i < 1500; i++)
                        CHECK(vbuf[b * 1500 + i] == 0);
            }
            break;
        case MODE_SHORT:
            CHECK(done.status == FERRY_OK);
            CHECK(st->dstatus == FERRY_ERR_TRUNCATE);
            CHECK(memcmp(st->dbuf, src, len / 3) == 0);
            for (size_t i = len / 3; i < st->dcap; i++)
                CHECK(st->dbuf[i] == 0x5a);
            break;
        case MODE_DROP:
            CHECK(done.status == FERRY_ERR_CANCELED);
            break;
        }
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    free(vbuf);
    free(src);
    free(st->dbuf);
    st->dbuf = NULL;
}

static void phase_limit(state_t *st)
{
    ferry_ctx_t *ctx = st->ctx;
    ferry_am_sizes_t sz;
    CHECK(ferry_am_sizes(ctx, st->next, &sz) == FERRY_OK);
    CHECK(sz.large_max == (size_t)1 << 20);
    size_t len = (size_t)2 << 20;
    uint8_t *b = malloc(len);
    CHECK(b != NULL);
    fill(b, len, 0);
    int got = st->got;
    CHECK(ferry_am_send(ctx, st->next, TAG_ORD, b, len) == FERRY_ERR_TRUNCATE);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(st->got == got);
    free(b);
}

/* Crafted announcements on the wire, as a peer that does not follow the
 * protocol would send them. */
static void send_raw_rts(ferry_ctx_t *ctx, int dst, uint8_t tag, uint64_t len)
{
    am_rts_t rts;
    memset(&rts, 0, sizeof(rts));
    rts.id = 0xbad0000 + len % 1000;
    rts.len = len;
    rts.raddr = 4096;
    rts.tag = tag;
    rts.proto = FERRY_AM_RNDV_GET;
    memset(&rts.rkey, 0x41, sizeof(rts.rkey));
    int rc;
    while ((rc = btl_ctx_send_small(ctx, dst, API_TAG_AM_RTS, &rts, sizeof(rts))) ==
           FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    CHECK(rc == FERRY_OK);
}

/* An announcement with the key's length on the wire (AM_RTS_KEY_LEN, as
 * ferry sends them) that lies: flags and key_len as given, nkey key bytes
 * actually sent. */
static void send_raw_rts_keylen(ferry_ctx_t *ctx, int dst, uint8_t tag, uint16_t flags,
                                uint16_t key_len, size_t nkey)
{
    am_rts_t rts;
    memset(&rts, 0, sizeof(rts));
    rts.id = 0xbad1000 + key_len;
    rts.len = 1000;
    rts.raddr = 4096;
    rts.tag = tag;
    rts.proto = FERRY_AM_RNDV_GET;
    rts.flags = flags;
    rts.key_len = key_len;
    /* The fixed part, then nkey key bytes (more than a key, maybe). */
    uint8_t wire[AM_RTS_FIXED + FERRY_RKEY_SIZE + 8];
    CHECK(nkey <= sizeof(wire) - AM_RTS_FIXED);
    memcpy(wire, &rts, AM_RTS_FIXED);
    memset(wire + AM_RTS_FIXED, 0x41, nkey);
    int rc;
    while ((rc = btl_ctx_send_small(ctx, dst, API_TAG_AM_RTS, wire, AM_RTS_FIXED + nkey)) ==
           FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    CHECK(rc == FERRY_OK);
}

static void phase_absurd(state_t *st)
{
    ferry_ctx_t *ctx = st->ctx;
    uint8_t small[16];
    st->dbuf = small;
    st->data_mode = MODE_ABSURD;
    st->ddone = 0;
    int got = st->got;
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    /* Keys that do not add up, refused before any handler: longer than a
     * key, longer than what came, and a flag nobody defined. */
    send_raw_rts_keylen(ctx, st->next, TAG_DATA, AM_RTS_KEY_LEN, FERRY_RKEY_SIZE + 1,
                        FERRY_RKEY_SIZE + 1);
    send_raw_rts_keylen(ctx, st->next, TAG_DATA, AM_RTS_KEY_LEN, 64, 10);
    send_raw_rts_keylen(ctx, st->next, TAG_DATA, AM_RTS_KEY_LEN | 2, 8, 8);
    send_raw_rts(ctx, st->next, TAG_ORD, (uint64_t)1 << 63);  /* beyond any address space */
    send_raw_rts(ctx, st->next, TAG_ORD, (uint64_t)1 << 40);  /* beyond FERRY_AM_LARGE_MAX */
    send_raw_rts(ctx, st->next, TAG_DATA, (uint64_t)1 << 63); /* refused before the handler */
    send_raw_rts(ctx, st->next, TAG_DATA, (uint64_t)1 << 40); /* the handler decides */
    wait_until(ctx, &st->ddone, 1);
    /* The key was no key: the get is refused. */
    CHECK(st->dstatus != FERRY_OK && st->dstatus != FERRY_ERR_TRUNCATE);
    CHECK(st->absurd_calls == 1);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(st->got == got);
    st->dbuf = NULL;
}

/* WIN large messages in flight at once, to a tag without a data handler
 * (taken one after the other, in order) and to one with a data handler
 * that takes each into its own slice (all at once): with few registration
 * slots (FERRY_SM_REG_SLOTS=16) the sender and the receiver run out, and
 * must wait and retry, never lose a message. */
static void phase_window(state_t *st, size_t max)
{
    ferry_ctx_t *ctx = st->ctx;
    size_t len = max + 1000;
    st->win_len = len;
    st->win_buf = malloc(len * WIN);
    uint8_t *src = malloc(len * WIN);
    CHECK(st->win_buf != NULL && src != NULL);
    for (int k = 0; k < WIN; k++)
        fill(src + (size_t)k * len, len, (uint64_t)k);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    for (int tag = TAG_WIN; tag <= TAG_WIN_DATA; tag++) {
        nb_t done[WIN];
        for (int k = 0; k < WIN; k++) {
            done[k] = (nb_t){0, 1};
            int rc;
            while ((rc = ferry_am_send_nb(ctx, st->next, tag, src + (size_t)k * len, len, nb_done,
                                          &done[k])) == FERRY_ERR_NO_RESOURCE)
                CHECK(ferry_progress(ctx) >= 0);
            CHECK(rc == FERRY_OK);
        }
        for (int k = 0; k < WIN; k++) {
            while (done[k].done == 0)
                CHECK(ferry_progress(ctx) >= 0);
            CHECK(done[k].status == FERRY_OK);
        }
        if (tag == TAG_WIN) {
            while (st->win_next < WIN)
                CHECK(ferry_progress(ctx) >= 0);
        } else {
            wait_until(ctx, &st->win_arrived, WIN);
            CHECK(st->win_taken == WIN);
            /* Slices were taken in announcement order, which is send order. */
            CHECK(memcmp(st->win_buf, src, len * WIN) == 0);
        }
        CHECK(ferry_barrier(ctx) == FERRY_OK);
    }
    free(src);
    free(st->win_buf);
    st->win_buf = NULL;
}

/* --peer-dies: rank 1 keeps rank 0's large messages without taking them,
 * then dies (SIGKILL). Rank 0's non-blocking send must complete with
 * FERRY_ERR_UNREACH and its blocking one return it: nothing waits for ever
 * on a dead peer. */
static void keep_data(ferry_ctx_t *ctx, int src, int tag, ferry_am_data_t *data, size_t len,
                      void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)src, (void)tag, (void)data, (void)len;
    if (++st->knum == 2)
        raise(SIGKILL);
}

static int phase_peer_dies(state_t *st, size_t max)
{
    ferry_ctx_t *ctx = st->ctx;
    size_t len = 4 * max;
    uint8_t *src = calloc(1, len);
    CHECK(src != NULL);
    CHECK(ferry_am_register_data(ctx, TAG_KEY, keep_data, st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (st->me == 0) {
        nb_t done = {0, 1};
        CHECK(ferry_am_send_nb(ctx, 1, TAG_KEY, src, len, nb_done, &done) == FERRY_OK);
        int rc = ferry_am_send(ctx, 1, TAG_KEY, src, len);
        while (done.done == 0)
            CHECK(ferry_progress(ctx) >= 0);
        printf("rank 0: sends to a dead peer: %s (blocking), %s (callback)\n",
               ferry_status_name(rc), ferry_status_name(done.status));
        CHECK(rc == FERRY_ERR_UNREACH && done.status == FERRY_ERR_UNREACH);
    } else if (st->me == 1) {
        for (;;)
            ferry_progress(ctx); /* until the second announcement kills it */
    }
    free(src);
    return 0;
}

static int get_status(ferry_ctx_t *ctx, int src, void *buf, size_t len, uint64_t raddr,
                      const ferry_rkey_t *rkey)
{
    nb_t done = {0, 1};
    int rc = ferry_get(ctx, src, buf, len, NULL, raddr, rkey, nb_done, &done);
    if (rc != FERRY_OK)
        return rc;
    while (done.done == 0)
        CHECK(ferry_progress(ctx) >= 0);
    return done.status;
}

/* One message of len bytes from src to next, taken into dst from prev; its
 * key in *key. */
static void key_round(state_t *st, const uint8_t *src, uint8_t *dst, size_t len,
                      ferry_rkey_t *key, uint64_t *raddr)
{
    ferry_ctx_t *ctx = st->ctx;
    /* Nobody sends the next round's message before everyone counts it. */
    st->knum = 0;
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    nb_t done = {0, 1};
    CHECK(ferry_am_send_nb(ctx, st->next, TAG_KEY, src, len, nb_done, &done) == FERRY_OK);
    while (st->knum < 1)
        CHECK(ferry_progress(ctx) >= 0);
    *key = st->kkey[0];
    *raddr = st->kaddr[0];
    memset(dst, 0, len);
    st->ddone = 0;
    CHECK(ferry_am_recv_data(ctx, st->kdata, dst, len, data_cb_done, st) == FERRY_OK);
    wait_until(ctx, &st->ddone, 1);
    CHECK(st->dstatus == FERRY_OK);
    while (done.done == 0)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(done.status == FERRY_OK);
}

/* A kept registration whose memory is unmapped must go with it: the next
 * message from new memory at the same address gets a new registration (a
 * new key), and its receiver reads the new bytes. Were the old one found
 * again, sm would have revoked it meanwhile (its monitor): the get refused. */
static void phase_key_unmapped(state_t *st, size_t len)
{
    ferry_ctx_t *ctx = st->ctx;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), maplen = (len + page - 1) / page * page;
    uint8_t *dst = malloc(len);
    CHECK(dst != NULL);
    uint8_t *src = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(src != MAP_FAILED);
    fill(src, len, 7);
    ferry_rkey_t k1, k2, k3;
    uint64_t a1, a2, a3;
    key_round(st, src, dst, len, &k1, &a1);
    uint8_t *want = malloc(len);
    CHECK(want != NULL);
    fill(want, len, 7);
    CHECK(memcmp(dst, want, len) == 0);
    key_round(st, src, dst, len, &k2, &a2);
    CHECK(memcmp(&k1, &k2, sizeof(k1)) == 0 && a2 == a1 && memcmp(dst, want, len) == 0);
    CHECK(munmap(src, maplen) == 0);
    /* New memory at the same address where it is free, else anywhere. */
    uint8_t *again = mmap(src, maplen, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (again != src) {
        if (again != MAP_FAILED)
            munmap(again, maplen);
        again = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(again != MAP_FAILED);
    }
    fill(again, len, 9);
    fill(want, len, 9);
    key_round(st, again, dst, len, &k3, &a3);
    CHECK(memcmp(dst, want, len) == 0);
    /* The sender's memory came back at the same address: a new key. */
    if (a3 == a1)
        CHECK(memcmp(&k3, &k1, sizeof(k1)) != 0);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    printf("key unmapped (rank %d): kept while mapped (same key), %s\n", st->me,
           a3 == a1 ? "dropped with its memory (same address, new key, new bytes)"
                    : "the sender's address was taken meanwhile: new bytes seen, key not compared");
    munmap(again, maplen);
    free(dst);
    free(want);
}

static void phase_key(state_t *st, size_t max)
{
    ferry_ctx_t *ctx = st->ctx;
    size_t len = 2 * max + 1;
    ferry_btl_module_t *btl = ctx->modules[ctx->peers[st->prev].module_idx];
    bool revokes = !(btl->attr.flags & FERRY_BTL_FLAG_NO_KEY_REVOKE);
    ferry_am_sizes_t sz;
    CHECK(ferry_am_sizes(ctx, st->prev, &sz) == FERRY_OK);
    bool get_mode = sz.rndv == FERRY_AM_RNDV_GET;
    /* sm with cross-memory attach keeps the registration for the next
     * message from the buffer (its peers read our memory anyway): then the
     * key must still read, and come back for the second message. */
    bool kept = sz.keeps_keys != 0;
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (!get_mode) {
        if (st->me == 0)
            printf("key reuse: rendezvous by put here (FERRY_AM_RNDV), no sender key to "
                   "reuse; part skipped\n");
        return;
    }
    uint8_t *src = malloc(len), *dst = malloc(len);
    CHECK(src != NULL && dst != NULL);
    fill(src, len, 5);
    /* First message, taken; then the sender says its send returned. */
    nb_t done = {0, 1};
    CHECK(ferry_am_send_nb(ctx, st->next, TAG_KEY, src, len, nb_done, &done) == FERRY_OK);
    while (st->knum < 1)
        CHECK(ferry_progress(ctx) >= 0);
    st->ddone = 0;
    CHECK(ferry_am_recv_data(ctx, st->kdata, dst, len, data_cb_done, st) == FERRY_OK);
    wait_until(ctx, &st->ddone, 1);
    CHECK(st->dstatus == FERRY_OK);
    CHECK(memcmp(dst, src, len) == 0);
    while (done.done == 0)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(done.status == FERRY_OK);
    CHECK(send_small(ctx, st->next, TAG_NOTE, "k", 1) == FERRY_OK);
    wait_until(ctx, &st->notes, 1);
    if (kept) {
        memset(dst, 0, len);
        int rc = get_status(ctx, st->prev, dst, len, st->kaddr[0], &st->kkey[0]);
        if (rc != FERRY_OK)
            fprintf(stderr, "rank %d: a kept rendezvous key does not read: %s\n", st->me,
                    ferry_strerror(rc));
        CHECK(rc == FERRY_OK && memcmp(dst, src, len) == 0);
    } else if (revokes) {
        int rc = get_status(ctx, st->prev, dst, len, st->kaddr[0], &st->kkey[0]);
        if (rc != FERRY_ERR_ACCESS)
            fprintf(stderr, "rank %d: a finished rendezvous's key still reads: %s\n", st->me,
                    ferry_strerror(rc));
        CHECK(rc == FERRY_ERR_ACCESS);
    }
    /* Second message from the same buffer: the old key still dead while
     * the new one is live. */
    done = (nb_t){0, 1};
    CHECK(ferry_am_send_nb(ctx, st->next, TAG_KEY, src, len, nb_done, &done) == FERRY_OK);
    while (st->knum < 2)
        CHECK(ferry_progress(ctx) >= 0);
    if (kept) {
        CHECK(memcmp(&st->kkey[1], &st->kkey[0], sizeof(st->kkey[0])) == 0);
        if (st->me == 0)
            printf("key reuse: %s keeps the registration (keeps_keys): the key read after "
                   "the message and came back for the next\n",
                   btl->attr.name);
    } else if (revokes) {
        int rc = get_status(ctx, st->prev, dst, len, st->kaddr[0], &st->kkey[0]);
        if (rc != FERRY_ERR_ACCESS)
            fprintf(stderr, "rank %d: an old rendezvous key reads a newer registration: %s\n",
                    st->me, ferry_strerror(rc));
        CHECK(rc == FERRY_ERR_ACCESS);
    } else if (st->me == 0) {
        printf("key reuse: %s does not revoke keys (no_key_revoke); refusal not checked\n",
               btl->attr.name);
    }
    memset(dst, 0, len);
    st->ddone = 0;
    CHECK(ferry_am_recv_data(ctx, st->kdata, dst, len, data_cb_done, st) == FERRY_OK);
    wait_until(ctx, &st->ddone, 1);
    CHECK(st->dstatus == FERRY_OK && memcmp(dst, src, len) == 0);
    while (done.done == 0)
        CHECK(ferry_progress(ctx) >= 0);
    CHECK(done.status == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    free(src);
    free(dst);
    if (kept)
        phase_key_unmapped(st, len);
}

/* ---- --random ---- */

enum { R_OWN, R_CONTIG, R_SCATTER, R_DROP, R_DEFER, R_MODES };

/* Into ferry's own buffer (the ordinary handler). */
static void on_rand_ord(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                        void *arg)
{
    state_t *st = arg;
    (void)ctx, (void)tag;
    CHECK(src == st->prev);
    CHECK(len == st->r_len);
    uint64_t seq = st->r_seq;
    if (len >= 8)
        CHECK(memcmp(data, &seq, 8) == 0);
    CHECK(good(data, len, seq, len >= 8 ? 8 : 0));
    st->r_got++;
}

/* The scattered layout: two halves of dbuf with a 64-byte gap. */
static ferry_iov_t g_scatter[2];

static void on_rand_data(ferry_ctx_t *ctx, int src, int tag, ferry_am_data_t *data, size_t len,
                         void *arg)
{
    state_t *st = arg;
    (void)tag;
    CHECK(src == st->prev && len == st->r_len && len + 64 <= st->dcap);
    switch (st->r_mode) {
    case R_CONTIG:
        CHECK(ferry_am_recv_data(ctx, data, st->dbuf, len, data_cb_done, st) == FERRY_OK);
        break;
    case R_SCATTER: {
        g_scatter[0] = (ferry_iov_t){st->dbuf, len / 2};
        g_scatter[1] = (ferry_iov_t){st->dbuf + len / 2 + 64, len - len / 2};
        ferry_convertor_t conv;
        CHECK(ferry_convertor_init_iov(&conv, g_scatter, 2) == FERRY_OK);
        CHECK(ferry_am_recv_data_conv(ctx, data, &conv, data_cb_done, st) == FERRY_OK);
        break;
    }
    case R_DROP:
        CHECK(ferry_am_data_drop(ctx, data) == FERRY_OK);
        st->dstatus = FERRY_ERR_CANCELED;
        st->ddone++;
        break;
    case R_DEFER:
        st->kept = data;
        st->kept_len = len;
        break;
    }
}

/* A size from 0 to 64 MiB, spread over the powers of two. */
static size_t rand_size(uint64_t *x)
{
    *x = *x * 6364136223846793005u + 1442695040888963407u;
    unsigned bits = (unsigned)(*x >> 59) % 27; /* 0 .. 26 */
    *x = *x * 6364136223846793005u + 1442695040888963407u;
    return bits == 0 ? 0 : (size_t)(*x >> 20) % ((size_t)1 << bits);
}

static void phase_random(state_t *st, size_t max)
{
    ferry_ctx_t *ctx = st->ctx;
    const size_t cap = (size_t)64 << 20;
    st->dcap = cap + 64;
    st->dbuf = malloc(st->dcap);
    uint8_t *src = malloc(cap);
    CHECK(st->dbuf != NULL && src != NULL);
    CHECK(ferry_am_register(ctx, TAG_RAND_ORD, on_rand_ord, st) == FERRY_OK);
    CHECK(ferry_am_register_data(ctx, TAG_RAND_DATA, on_rand_data, st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    /* The same sequence on every rank: each receives what its prev sends. */
    uint64_t x = 20261202;
    const int n = 30;
    for (int k = 0; k < n; k++) {
        size_t len = k == n - 1 ? cap : k == 1 ? max + 1 : rand_size(&x);
        int mode = k % R_MODES;
        bool gather = (k / R_MODES) % 2 == 1;
        if (mode != R_OWN && len <= max)
            len += max + 1; /* a data handler sees only rendezvous */
        if (len > cap)
            len = cap;
        st->r_len = len;
        st->r_mode = mode;
        st->r_seq = 1000 + (uint64_t)k;
        st->ddone = 0;
        st->dstatus = 1;
        int got = st->r_got;
        fill(src, len, st->r_seq);
        memset(st->dbuf, 0x5a, len + 64);
        CHECK(ferry_barrier(ctx) == FERRY_OK);
        int tag = mode == R_OWN ? TAG_RAND_ORD : TAG_RAND_DATA;
        nb_t done = {0, 1};
        ferry_convertor_t conv;
        ferry_iov_t iov[3] = {{src, len / 3}, {src + len / 3, len / 3 + 1}, {NULL, 0}};
        if (len < 3) {
            iov[0] = (ferry_iov_t){src, len};
            iov[1] = (ferry_iov_t){src + len, 0};
        }
        iov[2] = (ferry_iov_t){src + iov[0].len + iov[1].len, len - iov[0].len - iov[1].len};
        if (gather)
            CHECK(ferry_convertor_init_iov(&conv, iov, 3) == FERRY_OK);
        else
            ferry_convertor_init_contig(&conv, src, len);
        int rc;
        while ((rc = ferry_am_send_conv_nb(ctx, st->next, tag, &conv, nb_done, &done)) ==
               FERRY_ERR_NO_RESOURCE)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(rc == FERRY_OK);
        /* The blocks of a gathered source are the caller's again at once. */
        memset(iov, 0, sizeof(iov));
        if (mode == R_DEFER) {
            while (st->kept == NULL)
                CHECK(ferry_progress(ctx) >= 0);
            for (int i = 0; i < 10; i++)
                CHECK(ferry_progress(ctx) >= 0);
            CHECK(ferry_am_recv_data(ctx, st->kept, st->dbuf, st->kept_len, data_cb_done, st) ==
                  FERRY_OK);
            st->kept = NULL;
        }
        while (done.done == 0 || (mode == R_OWN ? st->r_got == got : st->ddone == 0))
            CHECK(ferry_progress(ctx) >= 0);
        if (mode == R_DROP) {
            CHECK(done.status == FERRY_ERR_CANCELED);
        } else {
            if (done.status != FERRY_OK)
                fprintf(stderr, "rank %d: message %d (%zu bytes, mode %d): %s\n", st->me, k, len,
                        mode, ferry_strerror(done.status));
            CHECK(done.status == FERRY_OK);
        }
        if (mode == R_CONTIG || mode == R_DEFER) {
            CHECK(st->dstatus == FERRY_OK);
            CHECK(memcmp(st->dbuf, &st->r_seq, len >= 8 ? 8 : len) == 0 || len < 8);
            CHECK(good(st->dbuf, len, st->r_seq, len >= 8 ? 8 : 0));
            for (size_t i = len; i < len + 64; i++)
                CHECK(st->dbuf[i] == 0x5a);
        } else if (mode == R_SCATTER) {
            CHECK(st->dstatus == FERRY_OK);
            size_t h = len / 2;
            uint8_t *tmp = st->dbuf;
            CHECK(memcmp(tmp, src, h) == 0);
            for (size_t i = h; i < h + 64; i++)
                CHECK(tmp[i] == 0x5a);
            CHECK(memcmp(tmp + h + 64, src + h, len - h) == 0);
        }
    }
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (st->me == 0)
        printf("random: %d messages up to %zu bytes checked\n", n, cap);
    free(src);
    free(st->dbuf);
    st->dbuf = NULL;
}

/* ---- --frag-attack ---- */

static void send_raw(ferry_ctx_t *ctx, int dst, uint8_t tag, const void *hdr, size_t hlen,
                     const void *payload, size_t plen)
{
    int rc;
    while ((rc = btl_ctx_send(ctx, dst, tag, hdr, hlen, payload, plen)) == FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    CHECK(rc == FERRY_OK);
}

static void send_pipe_rts(ferry_ctx_t *ctx, int dst, uint64_t id, uint64_t len)
{
    am_rts_t rts;
    memset(&rts, 0, sizeof(rts));
    rts.id = id;
    rts.len = len;
    rts.tag = TAG_DATA;
    rts.proto = FERRY_AM_RNDV_PIPE;
    send_raw(ctx, dst, API_TAG_AM_RTS, &rts, sizeof(rts), NULL, 0);
}

static void send_frag(ferry_ctx_t *ctx, int dst, uint64_t id, uint64_t off, const void *data,
                      size_t n)
{
    am_frag_t h = {.id = id, .off = off};
    send_raw(ctx, dst, API_TAG_AM_FRAG, &h, sizeof(h), data, n);
}

static void phase_frag_attack(state_t *st)
{
    ferry_ctx_t *ctx = st->ctx;
    const size_t L = 100;
    uint8_t bytes[256];
    for (size_t i = 0; i < sizeof(bytes); i++)
        bytes[i] = (uint8_t)(i + 1);
    st->dcap = L + 64;
    st->dbuf = malloc(st->dcap);
    CHECK(st->dbuf != NULL);
    st->data_mode = MODE_EXACT;
    const uint64_t base = 0xf1a60000u;
    /* Each case: a message of L bytes announced (the handler takes it into
     * dbuf), then fragments; 1: overlap, 2: gap, 3: past the end, 4: a good
     * stream, for the control. */
    for (int c = 1; c <= 4; c++) {
        memset(st->dbuf, 0x5a, st->dcap);
        st->ddone = 0;
        st->dstatus = 1;
        CHECK(ferry_barrier(ctx) == FERRY_OK);
        uint64_t id = base + (uint64_t)c;
        /* Short, and for no message: dropped, nothing else happens. */
        send_raw(ctx, st->next, API_TAG_AM_FRAG, bytes, 8, NULL, 0);
        send_frag(ctx, st->next, id + 100, 0, bytes, 10);
        send_pipe_rts(ctx, st->next, id, L);
        send_frag(ctx, st->next, id, 0, bytes, 40);
        if (c == 1)
            send_frag(ctx, st->next, id, 20, bytes, 40); /* overlaps [20, 40) */
        else if (c == 2)
            send_frag(ctx, st->next, id, 60, bytes, 40); /* leaves [40, 60) */
        else if (c == 3)
            send_frag(ctx, st->next, id, 40, bytes, 200); /* 140 bytes past the end */
        else
            send_frag(ctx, st->next, id, 40, bytes + 40, 60);
        /* After the message ended: for no message any more. */
        send_frag(ctx, st->next, id, 40, bytes, 60);
        wait_until(ctx, &st->ddone, 1);
        CHECK(ferry_barrier(ctx) == FERRY_OK);
        CHECK(st->ddone == 1);
        CHECK(memcmp(st->dbuf, bytes, 40) == 0);
        if (c == 4) {
            CHECK(st->dstatus == FERRY_OK);
            CHECK(memcmp(st->dbuf, bytes, L) == 0);
        } else {
            CHECK(st->dstatus == FERRY_ERR_PROTO);
            for (size_t i = 40; i < st->dcap; i++)
                CHECK(st->dbuf[i] == 0x5a);
        }
        for (size_t i = L; i < st->dcap; i++)
            CHECK(st->dbuf[i] == 0x5a);
    }
    if (st->me == 0)
        printf("frag attack: refused\n");
    free(st->dbuf);
    st->dbuf = NULL;
}

/* ---- --pipe-dies-recv, --pipe-dies-send ---- */

static void take_zeroed(ferry_ctx_t *ctx, int src, int tag, ferry_am_data_t *data, size_t len,
                        void *arg)
{
    state_t *st = arg;
    (void)src, (void)tag;
    memset(st->dbuf, 0, len);
    CHECK(ferry_am_recv_data(ctx, data, st->dbuf, len, data_cb_done, st) == FERRY_OK);
}

static void phase_pipe_dies(state_t *st, bool recv_dies)
{
    ferry_ctx_t *ctx = st->ctx;
    const size_t len = (size_t)64 << 20;
    st->dbuf = malloc(len);
    uint8_t *src = malloc(len);
    CHECK(st->dbuf != NULL && src != NULL);
    memset(src, 0xab, len);
    st->ddone = 0;
    CHECK(ferry_am_register_data(ctx, TAG_RAND_DATA, take_zeroed, st) == FERRY_OK);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    if (st->me == 0) {
        nb_t done = {0, 1};
        CHECK(ferry_am_send_nb(ctx, 1, TAG_RAND_DATA, src, len, nb_done, &done) == FERRY_OK);
        while (done.done == 0 && (recv_dies || st->notes == 0))
            CHECK(ferry_progress(ctx) >= 0);
        if (!recv_dies)
            raise(SIGKILL); /* half the stream is out */
        printf("rank 0: send to a peer dead mid-stream: %s\n", ferry_status_name(done.status));
        fflush(stdout);
        CHECK(done.status == FERRY_ERR_UNREACH);
    } else if (st->me == 1) {
        while (st->dbuf[len / 2] == 0 && st->ddone == 0)
            CHECK(ferry_progress(ctx) >= 0);
        CHECK(st->ddone == 0); /* in the middle */
        if (recv_dies)
            raise(SIGKILL);
        CHECK(send_small(ctx, 0, TAG_NOTE, "h", 1) == FERRY_OK);
        /* Taking nothing meanwhile, so that the sender, its path full,
         * dies before the rest is out. */
        usleep(300000);
        while (st->ddone == 0)
            CHECK(ferry_progress(ctx) >= 0);
        printf("rank 1: receive from a peer dead mid-stream: %s\n",
               ferry_status_name(st->dstatus));
        fflush(stdout);
        CHECK(st->dstatus == FERRY_ERR_UNREACH);
    }
    free(src);
    free(st->dbuf);
    st->dbuf = NULL;
}

int main(int argc, char **argv)
{
    bool limit = argc > 1 && strcmp(argv[1], "--limit") == 0;
    ferry_ctx_t *ctx;
    CHECK(ferry_init(NULL, &ctx) == FERRY_OK);
    state_t st = {.ctx = ctx};
    st.me = ferry_rank(ctx);
    int size = ferry_size(ctx);
    st.next = (st.me + 1) % size;
    st.prev = (st.me + size - 1) % size;
    for (int r = 0; r < size; r++) {
        long m = ferry_am_max_size(ctx, r);
        if (m < 0) {
            printf("SKIPPED: rank %d cannot reach rank %d over FERRY_BTL='%s' (%s)\n", st.me, r,
                   getenv("FERRY_BTL") ? getenv("FERRY_BTL") : "", ferry_strerror((int)m));
            ferry_finalize(&ctx);
            return 77;
        }
    }
    CHECK(ferry_am_register(ctx, TAG_ORD, on_ord, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_NOTE, on_note, &st) == FERRY_OK);
    CHECK(ferry_am_register_data(ctx, TAG_DATA, on_data, &st) == FERRY_OK);
    CHECK(ferry_am_register_data(ctx, TAG_KEY, on_key, &st) == FERRY_OK);
    CHECK(ferry_am_register(ctx, TAG_WIN, on_win, &st) == FERRY_OK);
    CHECK(ferry_am_register_data(ctx, TAG_WIN_DATA, on_win_data, &st) == FERRY_OK);
    CHECK(ferry_am_register_data(ctx, FERRY_AM_TAG_MAX + 1, on_key, &st) == FERRY_ERR_INVALID);
    CHECK(ferry_barrier(ctx) == FERRY_OK);

    long maxl = ferry_am_max_size(ctx, st.next);
    ferry_am_sizes_t sz;
    CHECK(ferry_am_sizes(ctx, st.next, &sz) == FERRY_OK);
    CHECK(sz.eager_max == (size_t)maxl && sz.rndv_min == (size_t)maxl + 1);
    CHECK(sz.rndv == FERRY_AM_RNDV_GET || sz.rndv == FERRY_AM_RNDV_PUT ||
          sz.rndv == FERRY_AM_RNDV_PIPE);
    CHECK(ferry_am_sizes(ctx, size, &sz) == FERRY_ERR_INVALID);
    CHECK(ferry_am_sizes(ctx, st.next, NULL) == FERRY_ERR_INVALID);
    /* Both paths (next and self) must share a threshold for the sizes to
     * straddle it: the smaller one is used. */
    long self_max = ferry_am_max_size(ctx, st.me);
    size_t max = (size_t)(maxl < self_max ? maxl : self_max);
    const char *rndv_name = sz.rndv == FERRY_AM_RNDV_GET   ? "get"
                            : sz.rndv == FERRY_AM_RNDV_PUT ? "put"
                                                           : "pipe";
    if (st.me == 0)
        printf("max send %zu (next) / %ld (self), rendezvous by %s, large max %zu\n", (size_t)maxl,
               self_max, rndv_name, sz.large_max);
    /* What the test's settings must make of the rule (ctest names it). */
    const char *want_rndv = getenv("TEST_EXPECT_RNDV");
    if (want_rndv != NULL)
        CHECK(strcmp(want_rndv, rndv_name) == 0);
    /* The tagged layer's cut: within the max send size, and where the test
     * names it (sm: FERRY_SM_MSG_EAGER_MAX with cross-memory attach, the
     * max send size without), that. */
    CHECK(sz.msg_eager_max > 0 && sz.msg_eager_max <= sz.eager_max);
    const char *want_cut = getenv("TEST_EXPECT_MSG_EAGER");
    if (want_cut != NULL)
        CHECK(sz.msg_eager_max == (size_t)strtoull(want_cut, NULL, 10));
    if (st.me == 0)
        printf("tagged messages: eager up to %zu bytes with their header; rendezvous "
               "registrations %s\n",
               sz.msg_eager_max, sz.keeps_keys ? "kept (keeps_keys)" : "released with each message");

    if (limit) {
        phase_limit(&st);
    } else if (argc > 1 && strcmp(argv[1], "--peer-dies") == 0) {
        phase_peer_dies(&st, (size_t)maxl);
    } else if (argc > 1 && strcmp(argv[1], "--window") == 0) {
        phase_window(&st, (size_t)maxl);
    } else if (argc > 1 && strcmp(argv[1], "--random") == 0) {
        phase_random(&st, (size_t)maxl);
    } else if (argc > 1 && strcmp(argv[1], "--frag-attack") == 0) {
        phase_frag_attack(&st);
    } else if (argc > 1 && strcmp(argv[1], "--pipe-dies-recv") == 0) {
        phase_pipe_dies(&st, true);
    } else if (argc > 1 && strcmp(argv[1], "--pipe-dies-send") == 0) {
        phase_pipe_dies(&st, false);
    } else {
        phase_window(&st, (size_t)maxl);
        phase_order(&st, max);
        phase_data(&st, (size_t)maxl);
        phase_absurd(&st);
        phase_key(&st, (size_t)maxl);
    }
    /* Where a rank was killed, finalize reports it (FERRY_ERR_UNREACH)
     * once this rank has learnt of it, which may be only during finalize's
     * own wait (ferry.h). */
    bool killed = argc > 1 && (strcmp(argv[1], "--pipe-dies-recv") == 0 ||
                               strcmp(argv[1], "--pipe-dies-send") == 0 ||
                               strcmp(argv[1], "--peer-dies") == 0);
    int frc = ferry_finalize(&ctx);
    CHECK(frc == FERRY_OK || (killed && frc == FERRY_ERR_UNREACH));
    if (st.me == 0)
        printf("am_large: ok\n");
    return 0;
}
