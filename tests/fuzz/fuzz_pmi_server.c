/*
 * Fuzz harness: ferryrun's PMI-1 server (tools/ferryrun: fr_pmi.c's
 * requests, fr_accept.c's handshake of remote ranks, fr_kvs.c's store), fed
 * as ferryrun's event loop feeds it, without the loop.
 *
 * A job of four ranks: 0 and 1 local (connected from the start), 2 and 3
 * remote, reached through four pending TCP connections. The input is a
 * series of records, each ended by FUZZ_RECORD_END; a record's first byte
 * says where its other bytes go:
 *   0-3    to rank t's connection (requests)
 *   4-7    to pending connection t - 4 (a handshake)
 *   8-11   a valid handshake step on pending connection t - 8, made here:
 *          the initack with a nonce if none was sent, else the proof the
 *          secret gives for this connection's nonces, with the pmiid of the
 *          record's first byte (mod 5). Without it the fuzzer would never
 *          get past the MAC to what follows.
 *   other  skipped
 * "@K" in a record stands for the job's kvs name, which a put or get must
 * name; the store's quotas are made small (8 keys, 4 replacements, 1 KiB a
 * rank) so that inputs of a few records reach them.
 * The answers are read and dropped every 16 records; every connection is
 * real (a socket pair), so the server's own writes, queues and closes run
 * as they do in ferryrun.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ferryrun.h"
#include "fuzz.h"

#define NP 4
#define N_PENDING 4

static const char job_id[] = "ferry-1-00000000000000f1";

typedef struct harness {
    fr_job_t job;
    fr_rank_t ranks[NP];
    int peer_rank[NP];        /* our end of each local rank's connection */
    int peer_pending[N_PENDING]; /* our end of each pending connection */
} harness_t;

static void socket_pair(int *ours, int *theirs)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
        perror("fuzz_pmi_server: socketpair");
        abort();
    }
    *ours = sv[0];
    *theirs = sv[1];
}

static void harness_init(harness_t *h)
{
    memset(h, 0, sizeof(*h));
    fr_job_t *job = &h->job;
    job->opt.np = NP;
    job->ranks = h->ranks;
    job->listen_fd = -1;
    job->stdin_fwd.out_fd = -1;
    snprintf(job->job_id, sizeof(job->job_id), "%s", job_id);
    for (size_t i = 0; i < sizeof(job->secret); i++) {
        job->secret[i] = (uint8_t)(0xa5 ^ i);
    }
    rt_auth_hex_encode(job->secret, sizeof(job->secret), job->secret_hex,
                       sizeof(job->secret_hex));
    rt_ratelimit_init(&job->refusals, RT_RATELIMIT_BURST, RT_RATELIMIT_INTERVAL_MS);
    if (fr_kvs_init(&job->kvs, NP) != 0) {
        abort();
    }
    job->kvs.rank_keys_max = 8;
    job->kvs.rank_revisions_max = 4;
    job->kvs.rank_bytes_max = 1024;
    for (int i = 0; i < NP; i++) {
        fr_rank_t *r = &h->ranks[i];
        r->rank = i;
        r->cpu = -1;
        r->host = -1;
        r->out.fd = -1;
        r->err.fd = -1;
        r->pmi_fd = -1;
        r->remote = i >= 2;
        rt_ratelimit_init(&r->complaints, RT_RATELIMIT_BURST, RT_RATELIMIT_INTERVAL_MS);
        h->peer_rank[i] = -1;
        if (!r->remote) {
            socket_pair(&h->peer_rank[i], &r->pmi_fd);
        }
    }
    for (int k = 0; k < FR_PENDING_MAX; k++) {
        job->pending[k].fd = -1;
    }
    for (int k = 0; k < N_PENDING; k++) {
        fr_pending_t *pc = &job->pending[k];
        socket_pair(&h->peer_pending[k], &pc->fd);
        pc->since_ms = fr_now_ms();
        snprintf(pc->peer, sizeof(pc->peer), "fuzz-%d", k);
    }
}

/* Reads and drops what the server wrote, so that its queues stay short. */
static void drain(int fd)
{
    char buf[65536];
    while (fd >= 0 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
    }
}

static void drain_all(harness_t *h)
{
    for (int i = 0; i < NP; i++) {
        drain(h->peer_rank[i]);
    }
    for (int k = 0; k < N_PENDING; k++) {
        drain(h->peer_pending[k]);
    }
}

static void harness_fini(harness_t *h)
{
    fr_job_t *job = &h->job;
    /* What ferryrun does at the end: expire what still waits, close all. */
    (void)fr_pmi_pending_expire(job, fr_now_ms() + FR_PENDING_MS);
    for (int k = 0; k < FR_PENDING_MAX; k++) {
        fr_pmi_pending_close(&job->pending[k]);
    }
    for (int i = 0; i < NP; i++) {
        fr_pmi_close(job, &h->ranks[i]);
        if (h->peer_rank[i] >= 0) {
            close(h->peer_rank[i]);
        }
    }
    for (int k = 0; k < N_PENDING; k++) {
        close(h->peer_pending[k]);
    }
    fr_kvs_fini(&job->kvs);
}

/* Copies a record's bytes with each "@K" replaced by the kvs name. */
static size_t expand_kvsname(const char *in, size_t len, char *out, size_t out_size)
{
    size_t o = 0, klen = strlen(job_id);
    for (size_t i = 0; i < len && o + klen < out_size; i++) {
        if (in[i] == '@' && i + 1 < len && in[i + 1] == 'K') {
            memcpy(out + o, job_id, klen);
            o += klen;
            i++;
        } else {
            out[o++] = in[i];
        }
    }
    return o;
}

/* A valid handshake step for pending connection pc: the initack, or the
 * proof answering the challenge it got. */
static size_t valid_step(const harness_t *h, const fr_pending_t *pc, const uint8_t *rec,
                         size_t len, char *out, size_t out_size)
{
    long id = len > 0 ? rec[0] % 5 : 2;
    char hex[RT_AUTH_HEX_LEN + 1];
    if (pc->state == FR_PENDING_INITACK) {
        uint8_t nonce[RT_AUTH_NONCE_LEN] = {0};
        memcpy(nonce, rec, len < sizeof(nonce) ? len : sizeof(nonce));
        rt_auth_hex_encode(nonce, sizeof(nonce), hex, sizeof(hex));
        return (size_t)snprintf(out, out_size, "cmd=initack pmiid=%ld auth=%s nonce=%s\n", id,
                                RT_AUTH_PMI_METHOD, hex);
    }
    uint8_t proof[RT_AUTH_MAC_LEN];
    rt_auth_pmi_proof(h->job.secret, RT_AUTH_PMI_CLIENT, h->job.job_id, pc->pmiid, pc->cnonce,
                      pc->snonce, proof);
    rt_auth_hex_encode(proof, sizeof(proof), hex, sizeof(hex));
    /* Requests may follow the proof in the same bytes, as a client that
     * does not wait would send them. */
    size_t n = (size_t)snprintf(out, out_size, "cmd=auth_response proof=%s\n", hex);
    size_t more = len > 1 ? len - 1 : 0;
    if (n + more > out_size) {
        more = out_size - n;
    }
    memcpy(out + n, rec + (len > 1 ? 1 : 0), more);
    return n + more;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static harness_t h;
    harness_init(&h);
    size_t off = 0;
    const uint8_t *rec;
    size_t len;
    unsigned records = 0;
    while (fuzz_next_record(data, size, &off, &rec, &len)) {
        if (len == 0) {
            continue;
        }
        /* Now and then, as a rank would, read what the server answered;
         * in between answers pile up, and the server's queue and its
         * limit get their turn. */
        if (++records % 16 == 0) {
            drain_all(&h);
        }
        unsigned t = rec[0];
        static char bytes[3 * 16384];
        size_t n = expand_kvsname((const char *)rec + 1, len - 1, bytes, sizeof(bytes));
        if (t < 4) {
            fr_rank_t *r = &h.ranks[t];
            if (r->pmi_fd >= 0) {
                fr_pmi_input(&h.job, r, bytes, n);
            }
        } else if (t < 8) {
            fr_pending_t *pc = &h.job.pending[t - 4];
            if (pc->fd >= 0) {
                fr_pmi_pending_input(&h.job, pc, bytes, n);
            }
        } else if (t < 12) {
            fr_pending_t *pc = &h.job.pending[t - 8];
            if (pc->fd >= 0) {
                char step[FR_PMI_LINE_MAX];
                size_t m = valid_step(&h, pc, (const uint8_t *)bytes, n, step, sizeof(step));
                fr_pmi_pending_input(&h.job, pc, step, m);
            }
        }
    }
    harness_fini(&h);
    return 0;
}
