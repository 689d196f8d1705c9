/*
 * The PMI-1 server: each rank sends one-line requests "cmd=NAME key=value
 * ..." over its socket and gets one-line answers. Supported: init,
 * get_maxes, get_appnum, get_universe_size, get_my_kvsname, put, get,
 * barrier_in (answered with barrier_out to every rank once all have entered),
 * finalize and abort.
 *
 * Local ranks are connected from the start (a socket pair, PMI_FD); remote
 * ranks connect to a TCP listener (PMI_PORT) and first say which rank they
 * are with "cmd=initack pmiid=N" (PMI_ID), which is answered, as hydra
 * does, with initack and three "cmd=set" lines: size, rank and debug. Each
 * remote rank may connect once; a connection that names a local rank, a rank
 * already connected, or nothing within FR_PENDING_MS is closed.
 *
 * A rank's bytes are untrusted. A request that is not key=value text, or
 * names an unknown command, gets an error answer (cmd=error rc=-1) and a
 * message here; a line too long, or a rank that never reads its answers, has
 * its connection closed. ferryrun itself carries on either way.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ferryrun.h"

#define FR_TOKENS_MAX 16

typedef struct fr_req {
    int n;
    const char *key[FR_TOKENS_MAX];
    const char *val[FR_TOKENS_MAX];
} fr_req_t;

/* ---- Key-value store ------------------------------------------------------ */

static size_t fr_kvs_bucket(const char *key)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *key != '\0'; key++) {
        h ^= (unsigned char)*key;
        h *= 0x100000001b3ull;
    }
    return (size_t)(h % FR_KVS_BUCKETS);
}

static const char *fr_kvs_get(const fr_kvs_t *kvs, const char *key)
{
    for (const fr_kv_t *kv = kvs->buckets[fr_kvs_bucket(key)]; kv != NULL; kv = kv->next) {
        if (strcmp(kv->key, key) == 0) {
            return kv->val;
        }
    }
    return NULL;
}

/* Stores or replaces a value. Returns a short reason on failure, for the
 * msg= of the answer, or NULL. */
static const char *fr_kvs_put(fr_kvs_t *kvs, const char *key, const char *val)
{
    size_t b = fr_kvs_bucket(key);
    size_t vlen = strlen(val);
    for (fr_kv_t *kv = kvs->buckets[b]; kv != NULL; kv = kv->next) {
        if (strcmp(kv->key, key) == 0) {
            size_t old = strlen(kv->val);
            if (kvs->bytes - old + vlen > FR_KVS_BYTES_MAX) {
                return "kvs_full";
            }
            char *copy = strdup(val);
            if (copy == NULL) {
                return "out_of_memory";
            }
            free(kv->val);
            kv->val = copy;
            kvs->bytes = kvs->bytes - old + vlen;
            return NULL;
        }
    }
    size_t klen = strlen(key);
    if (kvs->bytes + klen + vlen > FR_KVS_BYTES_MAX) {
        return "kvs_full";
    }
    fr_kv_t *kv = calloc(1, sizeof(*kv));
    if (kv != NULL) {
        kv->key = strdup(key);
        kv->val = strdup(val);
    }
    if (kv == NULL || kv->key == NULL || kv->val == NULL) {
        if (kv != NULL) {
            free(kv->key);
            free(kv->val);
        }
        free(kv);
        return "out_of_memory";
    }
    kv->next = kvs->buckets[b];
    kvs->buckets[b] = kv;
    kvs->bytes += klen + vlen;
    return NULL;
}

void fr_kvs_fini(fr_kvs_t *kvs)
{
    for (size_t b = 0; b < FR_KVS_BUCKETS; b++) {
        fr_kv_t *kv = kvs->buckets[b];
        while (kv != NULL) {
            fr_kv_t *next = kv->next;
            free(kv->key);
            free(kv->val);
            free(kv);
            kv = next;
        }
        kvs->buckets[b] = NULL;
    }
    kvs->bytes = 0;
}

/* ---- Connection ----------------------------------------------------------- */

void fr_pmi_close(fr_job_t *job, fr_rank_t *r)
{
    if (r->pmi_fd < 0) {
        return;
    }
    close(r->pmi_fd);
    r->pmi_fd = -1;
    free(r->outq);
    r->outq = NULL;
    r->outq_len = 0;
    r->outq_cap = 0;
    if (!r->finalized) {
        r->pmi_closed_ms = fr_now_ms();
    }
}

void fr_pmi_writable(fr_job_t *job, fr_rank_t *r)
{
    while (r->pmi_fd >= 0 && r->outq_len > 0) {
        ssize_t n = send(r->pmi_fd, r->outq, r->outq_len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            memmove(r->outq, r->outq + n, r->outq_len - (size_t)n);
            r->outq_len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        /* The rank went away: its exit status tells the rest. */
        fr_pmi_close(job, r);
    }
}

/* Queues one answer line and tries to send it at once. */
static void fr_pmi_answer(fr_job_t *job, fr_rank_t *r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fr_pmi_answer(fr_job_t *job, fr_rank_t *r, const char *fmt, ...)
{
    if (r->pmi_fd < 0) {
        return;
    }
    char line[FR_PMI_LINE_MAX + 64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(line)) {
        /* Values are bounded by FR_PMI_VALLEN_MAX, so this cannot happen. */
        fprintf(stderr, "ferryrun: internal error: PMI answer to rank %d too long\n", r->rank);
        return;
    }
    if (r->outq_len + (size_t)n > FR_PMI_OUTQ_MAX) {
        fprintf(stderr,
                "ferryrun: rank %d does not read its PMI answers; closing its PMI connection\n",
                r->rank);
        fr_pmi_close(job, r);
        return;
    }
    if (r->outq_len + (size_t)n > r->outq_cap) {
        size_t cap = r->outq_cap > 0 ? r->outq_cap : 4096;
        while (cap < r->outq_len + (size_t)n) {
            cap *= 2;
        }
        char *q = realloc(r->outq, cap);
        if (q == NULL) {
            fprintf(stderr, "ferryrun: out of memory; closing rank %d's PMI connection\n",
                    r->rank);
            fr_pmi_close(job, r);
            return;
        }
        r->outq = q;
        r->outq_cap = cap;
    }
    memcpy(r->outq + r->outq_len, line, (size_t)n);
    r->outq_len += (size_t)n;
    fr_pmi_writable(job, r);
}

/* ---- Requests ------------------------------------------------------------- */

/* Copies at most 60 characters of a rank's text for a message. */
static void fr_excerpt(const char *text, char out[64])
{
    size_t n = strlen(text);
    size_t m = n < 60 ? n : 60;
    for (size_t i = 0; i < m; i++) {
        unsigned char c = (unsigned char)text[i];
        out[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    strcpy(out + m, n > 60 ? "..." : "");
}

static const char *fr_req_field(const fr_req_t *req, const char *key)
{
    for (int i = 1; i < req->n; i++) {
        if (strcmp(req->key[i], key) == 0) {
            return req->val[i];
        }
    }
    return NULL;
}

/* Splits a request into key=value tokens, in place; NULL or a reason. */
static const char *fr_req_parse(char *line, fr_req_t *req)
{
    for (const char *c = line; *c != '\0'; c++) {
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) {
            return "unprintable_byte";
        }
    }
    req->n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(line, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        if (eq == NULL || eq == tok) {
            return "not_key_value";
        }
        if (req->n == FR_TOKENS_MAX) {
            return "too_many_fields";
        }
        *eq = '\0';
        req->key[req->n] = tok;
        req->val[req->n] = eq + 1;
        req->n++;
    }
    if (req->n == 0 || strcmp(req->key[0], "cmd") != 0) {
        return "no_cmd";
    }
    return NULL;
}

/* Answers a request that cannot be served, and says so. */
static void fr_pmi_refuse(fr_job_t *job, fr_rank_t *r, const char *what, const char *reason)
{
    char ex[64];
    fr_excerpt(what, ex);
    fprintf(stderr, "ferryrun: rank %d sent a bad PMI request (%s): '%s'\n", r->rank, reason, ex);
    fr_pmi_answer(job, r, "cmd=error rc=-1 msg=%s\n", reason);
}

/* True when a put/get names this job's kvs; answers the failure otherwise. */
static bool fr_pmi_kvs_ok(fr_job_t *job, fr_rank_t *r, const fr_req_t *req, const char *result)
{
    const char *kvsname = fr_req_field(req, "kvsname");
    if (kvsname == NULL || strcmp(kvsname, job->job_id) != 0) {
        fr_pmi_answer(job, r, "cmd=%s rc=-1 msg=unknown_kvsname\n", result);
        return false;
    }
    return true;
}

static void fr_pmi_put(fr_job_t *job, fr_rank_t *r, const fr_req_t *req)
{
    if (!fr_pmi_kvs_ok(job, r, req, "put_result")) {
        return;
    }
    const char *key = fr_req_field(req, "key");
    const char *val = fr_req_field(req, "value");
    if (key == NULL || val == NULL) {
        fr_pmi_answer(job, r, "cmd=put_result rc=-1 msg=missing_key_or_value\n");
        return;
    }
    if (key[0] == '\0' || strlen(key) >= FR_PMI_KEYLEN_MAX) {
        fr_pmi_answer(job, r, "cmd=put_result rc=-1 msg=bad_key_length\n");
        return;
    }
    if (strlen(val) >= FR_PMI_VALLEN_MAX) {
        fr_pmi_answer(job, r, "cmd=put_result rc=-1 msg=value_too_long\n");
        return;
    }
    const char *why = fr_kvs_put(&job->kvs, key, val);
    if (why != NULL) {
        fprintf(stderr, "ferryrun: cannot store rank %d's PMI key: %s\n", r->rank, why);
        fr_pmi_answer(job, r, "cmd=put_result rc=-1 msg=%s\n", why);
        return;
    }
    fr_pmi_answer(job, r, "cmd=put_result rc=0 msg=success\n");
}

static void fr_pmi_get(fr_job_t *job, fr_rank_t *r, const fr_req_t *req)
{
    if (!fr_pmi_kvs_ok(job, r, req, "get_result")) {
        return;
    }
    const char *key = fr_req_field(req, "key");
    if (key == NULL) {
        fr_pmi_answer(job, r, "cmd=get_result rc=-1 msg=missing_key\n");
        return;
    }
    const char *val = fr_kvs_get(&job->kvs, key);
    if (val == NULL) {
        fr_pmi_answer(job, r, "cmd=get_result rc=-1 msg=key_not_found value=unknown\n");
        return;
    }
    fr_pmi_answer(job, r, "cmd=get_result rc=0 msg=success value=%s\n", val);
}

static void fr_pmi_barrier_in(fr_job_t *job, fr_rank_t *r)
{
    if (r->in_barrier) {
        fr_pmi_refuse(job, r, "barrier_in", "already_in_barrier");
        return;
    }
    r->in_barrier = true;
    job->n_barrier++;
    if (job->n_barrier < job->opt.np) {
        return;
    }
    job->n_barrier = 0;
    for (int i = 0; i < job->opt.np; i++) {
        job->ranks[i].in_barrier = false;
        fr_pmi_answer(job, &job->ranks[i], "cmd=barrier_out rc=0\n");
    }
}

static void fr_pmi_abort(fr_job_t *job, fr_rank_t *r, const fr_req_t *req)
{
    const char *text = fr_req_field(req, "exitcode");
    long code = 1;
    if (text != NULL) {
        char *end = NULL;
        errno = 0;
        code = strtol(text, &end, 10);
        if (errno != 0 || end == text || *end != '\0') {
            code = 1;
        }
    }
    const char *msg = fr_req_field(req, "msg");
    char ex[64];
    fr_excerpt(msg != NULL ? msg : "", ex);
    /* An exit status is 8 bits; an abort must not look like success. */
    int status = code >= 1 && code <= 255 ? (int)code : 1;
    if (!job->ending) {
        fprintf(stderr, "ferryrun: rank %d called PMI abort with exit code %ld%s%s; killing the "
                        "job\n",
                r->rank, code, msg != NULL ? ": " : "", ex);
    }
    fr_job_fail(job, status);
}

static void fr_pmi_request(fr_job_t *job, fr_rank_t *r, char *line)
{
    char copy[FR_PMI_LINE_MAX];
    snprintf(copy, sizeof(copy), "%s", line);
    fr_req_t req;
    const char *why = fr_req_parse(line, &req);
    if (why != NULL) {
        fr_pmi_refuse(job, r, copy, why);
        return;
    }
    const char *cmd = req.val[0];
    if (strcmp(cmd, "init") == 0) {
        const char *ver = fr_req_field(&req, "pmi_version");
        if (ver == NULL || strcmp(ver, "1") != 0) {
            fr_pmi_answer(job, r, "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1 "
                                  "msg=only_pmi_version_1\n");
            return;
        }
        fr_pmi_answer(job, r, "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
    } else if (strcmp(cmd, "get_maxes") == 0) {
        fr_pmi_answer(job, r, "cmd=maxes rc=0 kvsname_max=%d keylen_max=%d vallen_max=%d\n",
                      FR_PMI_KVSNAME_MAX, FR_PMI_KEYLEN_MAX, FR_PMI_VALLEN_MAX);
    } else if (strcmp(cmd, "get_appnum") == 0) {
        fr_pmi_answer(job, r, "cmd=appnum rc=0 appnum=0\n");
    } else if (strcmp(cmd, "get_universe_size") == 0) {
        fr_pmi_answer(job, r, "cmd=universe_size rc=0 size=%d\n", job->opt.np);
    } else if (strcmp(cmd, "get_my_kvsname") == 0) {
        fr_pmi_answer(job, r, "cmd=my_kvsname rc=0 kvsname=%s\n", job->job_id);
    } else if (strcmp(cmd, "put") == 0) {
        fr_pmi_put(job, r, &req);
    } else if (strcmp(cmd, "get") == 0) {
        fr_pmi_get(job, r, &req);
    } else if (strcmp(cmd, "barrier_in") == 0) {
        fr_pmi_barrier_in(job, r);
    } else if (strcmp(cmd, "finalize") == 0) {
        r->finalized = true;
        fr_pmi_answer(job, r, "cmd=finalize_ack rc=0\n");
    } else if (strcmp(cmd, "abort") == 0) {
        fr_pmi_abort(job, r, &req);
    } else {
        fr_pmi_refuse(job, r, copy, "unknown_command");
    }
}

/* Serves the complete request lines in r->in. */
static void fr_pmi_consume(fr_job_t *job, fr_rank_t *r)
{
    char *start = r->in;
    char *nl;
    while (r->pmi_fd >= 0 &&
           (nl = memchr(start, '\n', r->in_len - (size_t)(start - r->in))) != NULL) {
        *nl = '\0';
        if (memchr(start, '\0', (size_t)(nl - start)) != NULL) {
            fr_pmi_refuse(job, r, "", "nul_byte");
        } else {
            fr_pmi_request(job, r, start);
        }
        start = nl + 1;
    }
    if (r->pmi_fd < 0) {
        return;
    }
    r->in_len -= (size_t)(start - r->in);
    memmove(r->in, start, r->in_len);
    if (r->in_len == sizeof(r->in)) {
        fprintf(stderr,
                "ferryrun: rank %d sent a PMI request longer than %d bytes; closing its PMI "
                "connection\n",
                r->rank, FR_PMI_LINE_MAX);
        fr_pmi_close(job, r);
    }
}

void fr_pmi_readable(fr_job_t *job, fr_rank_t *r)
{
    /* A few reads per wakeup, so that a rank that floods requests cannot
     * keep the loop from the others. */
    for (int round = 0; round < 8 && r->pmi_fd >= 0; round++) {
        ssize_t n = read(r->pmi_fd, r->in + r->in_len, sizeof(r->in) - r->in_len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        if (n <= 0) {
            fr_pmi_close(job, r);
            return;
        }
        r->in_len += (size_t)n;
        fr_pmi_consume(job, r);
    }
}

/* ---- TCP connections of remote ranks ----------------------------------------- */

void fr_pmi_pending_close(fr_pending_t *pc)
{
    if (pc->fd >= 0) {
        close(pc->fd);
    }
    pc->fd = -1;
    pc->in_len = 0;
}

void fr_pmi_accept(fr_job_t *job)
{
    for (;;) {
        int fd = accept4(job->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                fprintf(stderr, "ferryrun: accepting a PMI connection: %s\n", strerror(errno));
            }
            return;
        }
        fr_pending_t *slot = NULL;
        for (int i = 0; i < FR_PENDING_MAX && slot == NULL; i++) {
            if (job->pending[i].fd < 0) {
                slot = &job->pending[i];
            }
        }
        if (slot == NULL) {
            /* Ranks connect once each and identify themselves at once: this
             * many silent connections are not theirs. */
            fprintf(stderr, "ferryrun: %d PMI connections wait to identify themselves; "
                            "refusing another\n",
                    FR_PENDING_MAX);
            close(fd);
            continue;
        }
        slot->fd = fd;
        slot->in_len = 0;
        slot->since_ms = fr_now_ms();
    }
}

long long fr_pmi_pending_expire(fr_job_t *job, long long now)
{
    long long again = 0;
    for (int i = 0; i < FR_PENDING_MAX; i++) {
        fr_pending_t *pc = &job->pending[i];
        if (pc->fd < 0) {
            continue;
        }
        long long end = pc->since_ms + FR_PENDING_MS;
        if (now >= end) {
            fprintf(stderr, "ferryrun: a PMI connection did not say which rank it is within "
                            "%d s; closing it\n",
                    FR_PENDING_MS / 1000);
            fr_pmi_pending_close(pc);
        } else if (again == 0 || end < again) {
            again = end;
        }
    }
    return again;
}

/* Refuses a pending connection, saying why here and to the peer. */
static void fr_pending_refuse(fr_pending_t *pc, const char *text, const char *reason)
{
    char ex[64];
    fr_excerpt(text, ex);
    fprintf(stderr, "ferryrun: refused a PMI connection (%s): '%s'\n", reason, ex);
    char line[128];
    int n = snprintf(line, sizeof(line), "cmd=initack rc=-1 msg=%s\n", reason);
    (void)send(pc->fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    fr_pmi_pending_close(pc);
}

void fr_pmi_pending_readable(fr_job_t *job, fr_pending_t *pc)
{
    ssize_t n = read(pc->fd, pc->in + pc->in_len, sizeof(pc->in) - pc->in_len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
    }
    if (n <= 0) {
        fr_pmi_pending_close(pc);
        return;
    }
    pc->in_len += (size_t)n;
    char *nl = memchr(pc->in, '\n', pc->in_len);
    if (nl == NULL) {
        if (pc->in_len == sizeof(pc->in)) {
            fr_pending_refuse(pc, "", "line_too_long");
        }
        return;
    }
    *nl = '\0';
    char copy[FR_PMI_LINE_MAX];
    snprintf(copy, sizeof(copy), "%s", pc->in);
    fr_req_t req;
    const char *why = memchr(pc->in, '\0', (size_t)(nl - pc->in)) != NULL
                          ? "nul_byte"
                          : fr_req_parse(pc->in, &req);
    if (why == NULL && strcmp(req.val[0], "initack") != 0) {
        why = "expected_initack";
    }
    const char *text = why == NULL ? fr_req_field(&req, "pmiid") : NULL;
    long id = -1;
    if (why == NULL) {
        char *end = NULL;
        errno = 0;
        id = text != NULL ? strtol(text, &end, 10) : -1;
        if (text == NULL || errno != 0 || end == text || *end != '\0' || id < 0 ||
            id >= job->opt.np) {
            why = "bad_pmiid";
        }
    }
    fr_rank_t *r = why == NULL ? &job->ranks[id] : NULL;
    if (r != NULL && !r->remote) {
        why = "pmiid_of_local_rank";
    } else if (r != NULL && (r->pmi_fd >= 0 || r->pmi_closed_ms > 0 || r->finalized)) {
        why = "pmiid_already_connected";
    } else if (r != NULL && (r->reaped || job->ending)) {
        why = "rank_ended";
    }
    if (why != NULL) {
        fr_pending_refuse(pc, copy, why);
        return;
    }
    /* The connection is the rank's now; bytes after the initack (a client
     * that did not wait for the answer) are its first requests. */
    r->pmi_fd = pc->fd;
    size_t rest = pc->in_len - (size_t)(nl + 1 - pc->in);
    memcpy(r->in, nl + 1, rest);
    r->in_len = rest;
    pc->fd = -1;
    pc->in_len = 0;
    fr_pmi_answer(job, r, "cmd=initack rc=0\ncmd=set size=%d\ncmd=set rank=%d\ncmd=set debug=0\n",
                  job->opt.np, r->rank);
    if (rest > 0 && memchr(r->in, '\n', rest) != NULL) {
        /* Serve what is already here; the next read may never come. */
        fr_pmi_consume(job, r);
    }
}
