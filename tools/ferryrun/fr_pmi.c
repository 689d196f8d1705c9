/*
 * The PMI-1 server: each rank sends one-line requests "cmd=NAME key=value
 * ..." over its connection and gets one-line answers. Supported: init,
 * get_maxes, get_appnum, get_universe_size, get_my_kvsname, put, get,
 * barrier_in (answered with barrier_out to every rank once all have entered),
 * finalize and abort.
 *
 * Local ranks are connected from the start (a socket pair, PMI_FD), which
 * only ferryrun and the rank hold; remote ranks connect to a TCP listener
 * (PMI_PORT) and must first prove the job's secret (fr_accept.c).
 *
 * A rank's bytes are untrusted. A request that is not key=value text, or
 * names an unknown command, gets an error answer (cmd=error rc=-1) and a
 * message here, rate-limited per rank (a few lines, then a count); a line
 * too long, or a rank that never reads its answers, has its connection
 * closed. A put of another rank's key, or past the rank's quota, is refused
 * (fr_kvs.c). ferryrun itself carries on either way.
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

/* ---- Connection ----------------------------------------------------------- */

void fr_pmi_close(fr_job_t *job, fr_rank_t *r)
{
    if (r->pmi_fd < 0) {
        return;
    }
    char what[96];
    snprintf(what, sizeof(what), "messages about rank %d's PMI requests", r->rank);
    fr_complain_flush(&r->complaints, what);
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

void fr_pmi_answer(fr_job_t *job, fr_rank_t *r, const char *fmt, ...)
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

void fr_excerpt(const char *text, char out[64])
{
    size_t n = strlen(text);
    size_t m = n < 60 ? n : 60;
    for (size_t i = 0; i < m; i++) {
        unsigned char c = (unsigned char)text[i];
        out[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    strcpy(out + m, n > 60 ? "..." : "");
}

const char *fr_req_field(const fr_req_t *req, const char *key)
{
    for (int i = 1; i < req->n; i++) {
        if (strcmp(req->key[i], key) == 0) {
            return req->val[i];
        }
    }
    return NULL;
}

const char *fr_req_parse(char *line, fr_req_t *req)
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
    fr_complain(&r->complaints, "rank %d sent a bad PMI request (%s): '%s'", r->rank, reason, ex);
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
    const char *why = fr_kvs_put(&job->kvs, r->rank, key, val);
    if (why != NULL) {
        char ex[64];
        fr_excerpt(key, ex);
        fr_complain(&r->complaints, "refused rank %d's put of PMI key '%s': %s", r->rank, ex,
                    why);
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

void fr_pmi_consume(fr_job_t *job, fr_rank_t *r)
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
        fr_complain(&r->complaints,
                    "rank %d sent a PMI request longer than %d bytes; closing its PMI connection",
                    r->rank, FR_PMI_LINE_MAX);
        fr_pmi_close(job, r);
    }
}

void fr_pmi_input(fr_job_t *job, fr_rank_t *r, const char *data, size_t len)
{
    while (len > 0 && r->pmi_fd >= 0) {
        size_t room = sizeof(r->in) - r->in_len;
        size_t n = len < room ? len : room;
        memcpy(r->in + r->in_len, data, n);
        r->in_len += n;
        data += n;
        len -= n;
        fr_pmi_consume(job, r);
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
