/*
 * Remote ranks' connections to the PMI port, up to the point where one
 * becomes a rank's.
 *
 * Anyone who reaches the port can connect, so a connection proves the
 * job's secret before it is anyone's (the handshake in src/rt/auth.h):
 *   <- cmd=initack pmiid=ID auth=hmac-sha256 nonce=NC
 *   -> cmd=auth_challenge rc=0 nonce=NS          (NS fresh for this connection)
 *   <- cmd=auth_response proof=MAC(client, job, ID, NC, NS)
 *   -> cmd=initack rc=0 proof=MAC(server, ...), then cmd=set size, rank, debug
 * The secret never crosses the wire; a proof is bound to this connection's
 * nonces, this job and this pmiid, so a recorded one fails on any other
 * connection, and the two directions' labels differ, so a server proof sent
 * back as a client's fails too. Only a proven connection is checked
 * further: its pmiid must name a remote rank that has not connected yet and
 * is still running. A plain initack (hydra's, without auth) is refused.
 *
 * Strangers are refused with a reason, to them and here; the messages here
 * are rate-limited (a few, then a count), so that a flood costs a few lines.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ferryrun.h"

void fr_pmi_pending_close(fr_pending_t *pc)
{
    if (pc->fd >= 0) {
        close(pc->fd);
    }
    pc->fd = -1;
    pc->in_len = 0;
    pc->state = FR_PENDING_INITACK;
    rt_auth_wipe(pc->cnonce, sizeof(pc->cnonce));
    rt_auth_wipe(pc->snonce, sizeof(pc->snonce));
}

/* Refuses a pending connection, saying why here and to the peer. */
static void fr_pending_refuse(fr_job_t *job, fr_pending_t *pc, const char *text,
                              const char *reason)
{
    char ex[64];
    fr_excerpt(text, ex);
    if (ex[0] != '\0') {
        fr_complain(&job->refusals, "refused a PMI connection from %s (%s): '%s'", pc->peer,
                    reason, ex);
    } else {
        fr_complain(&job->refusals, "refused a PMI connection from %s (%s)", pc->peer, reason);
    }
    char line[128];
    int n = snprintf(line, sizeof(line), "cmd=initack rc=-1 msg=%s\n", reason);
    (void)send(pc->fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    fr_pmi_pending_close(pc);
}

/* Sends a short line on a pending connection. Its socket buffer is empty
 * but for what we sent before (a line or two), so the line fits; a peer
 * that went away makes it fail. */
static bool fr_pending_send(fr_pending_t *pc, const char *line, size_t len)
{
    ssize_t n = send(pc->fd, line, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    return n == (ssize_t)len;
}

static void fr_peer_name(int fd, char out[64])
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char host[NI_MAXHOST], port[NI_MAXSERV];
    if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0 &&
        getnameinfo((struct sockaddr *)&ss, len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
        snprintf(out, 64, ss.ss_family == AF_INET6 ? "[%.40s]:%s" : "%.40s:%s", host, port);
    } else {
        snprintf(out, 64, "an unknown address");
    }
}

/* The slot for a new connection: a free one, else the oldest pending one,
 * closed to make room (see FR_PENDING_MAX). */
static fr_pending_t *fr_pending_slot(fr_job_t *job)
{
    fr_pending_t *oldest = NULL;
    for (int i = 0; i < FR_PENDING_MAX; i++) {
        fr_pending_t *pc = &job->pending[i];
        if (pc->fd < 0) {
            return pc;
        }
        if (oldest == NULL || pc->since_ms < oldest->since_ms) {
            oldest = pc;
        }
    }
    fr_complain(&job->refusals,
                "%d PMI connections wait to prove themselves; closing the oldest (from %s)",
                FR_PENDING_MAX, oldest->peer);
    /* A genuine rank told "busy" tries again (src/rt/modex_pmi1.c). */
    static const char busy[] = "cmd=initack rc=-1 msg=busy\n";
    (void)fr_pending_send(oldest, busy, sizeof(busy) - 1);
    fr_pmi_pending_close(oldest);
    return oldest;
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
                fr_complain(&job->refusals, "accepting a PMI connection: %s", strerror(errno));
            }
            return;
        }
        fr_pending_t *slot = fr_pending_slot(job);
        slot->fd = fd;
        slot->in_len = 0;
        slot->state = FR_PENDING_INITACK;
        slot->since_ms = fr_now_ms();
        fr_peer_name(fd, slot->peer);
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
            fr_pending_refuse(job, pc, "", "too_slow");
        } else if (again == 0 || end < again) {
            again = end;
        }
    }
    return again;
}

/* Parses a field of 64 hex digits into RT_AUTH_NONCE_LEN bytes. */
static bool fr_req_hex(const fr_req_t *req, const char *key, uint8_t out[RT_AUTH_NONCE_LEN])
{
    const char *text = fr_req_field(req, key);
    return text != NULL && rt_auth_hex_decode(text, out, RT_AUTH_NONCE_LEN) == 0;
}

/* The initack: checks its form and sends the challenge. The claim itself
 * (which rank) is checked only once the connection has proved the secret,
 * so that a stranger learns nothing about the job's ranks. */
static const char *fr_pending_initack(fr_job_t *job, fr_pending_t *pc, const fr_req_t *req)
{
    if (strcmp(req->val[0], "initack") != 0) {
        return "expected_initack";
    }
    const char *text = fr_req_field(req, "pmiid");
    char *end = NULL;
    errno = 0;
    long id = text != NULL ? strtol(text, &end, 10) : -1;
    if (text == NULL || errno != 0 || end == text || *end != '\0' || id < 0 || id > FR_NP_MAX) {
        return "bad_pmiid";
    }
    const char *method = fr_req_field(req, "auth");
    if (method == NULL) {
        return "auth_required";
    }
    if (strcmp(method, RT_AUTH_PMI_METHOD) != 0) {
        return "unknown_auth_method";
    }
    if (!fr_req_hex(req, "nonce", pc->cnonce)) {
        return "bad_nonce";
    }
    char hex[RT_AUTH_HEX_LEN + 1];
    if (rt_auth_random(pc->snonce, sizeof(pc->snonce)) != 0 ||
        rt_auth_hex_encode(pc->snonce, sizeof(pc->snonce), hex, sizeof(hex)) != 0) {
        return "internal_error";
    }
    char line[RT_AUTH_HEX_LEN + 64];
    int n = snprintf(line, sizeof(line), "cmd=auth_challenge rc=0 nonce=%s\n", hex);
    if (!fr_pending_send(pc, line, (size_t)n)) {
        return "peer_gone";
    }
    pc->pmiid = id;
    pc->state = FR_PENDING_PROOF;
    return NULL;
}

/* The answer to the challenge: checks the proof, then the claim. Sets
 * *rank_out to the rank whose connection this becomes. */
static const char *fr_pending_proof(fr_job_t *job, fr_pending_t *pc, const fr_req_t *req,
                                    fr_rank_t **rank_out)
{
    if (strcmp(req->val[0], "auth_response") != 0) {
        return "expected_auth_response";
    }
    uint8_t proof[RT_AUTH_MAC_LEN], expect[RT_AUTH_MAC_LEN];
    if (!fr_req_hex(req, "proof", proof)) {
        return "bad_proof";
    }
    bool ok = rt_auth_pmi_proof(job->secret, RT_AUTH_PMI_CLIENT, job->job_id, pc->pmiid,
                                pc->cnonce, pc->snonce, expect) == 0 &&
              rt_auth_equal(proof, expect, sizeof(proof));
    rt_auth_wipe(expect, sizeof(expect));
    if (!ok) {
        return "auth_failed";
    }
    if (pc->pmiid >= job->opt.np) {
        return "bad_pmiid";
    }
    fr_rank_t *r = &job->ranks[pc->pmiid];
    if (!r->remote) {
        return "pmiid_of_local_rank";
    }
    if (r->pmi_fd >= 0 || r->pmi_closed_ms > 0 || r->finalized) {
        return "pmiid_already_connected";
    }
    if (r->reaped || job->ending) {
        return "rank_ended";
    }
    *rank_out = r;
    return NULL;
}

/* The connection is the rank's now: it gets the server's proof and the
 * initack's cmd=set lines; bytes after the proof (a client that did not wait
 * for the answer) are its first requests. */
static void fr_pending_adopt(fr_job_t *job, fr_pending_t *pc, fr_rank_t *r, const char *rest,
                             size_t rest_len)
{
    uint8_t proof[RT_AUTH_MAC_LEN];
    char hex[RT_AUTH_HEX_LEN + 1] = "";
    if (rt_auth_pmi_proof(job->secret, RT_AUTH_PMI_SERVER, job->job_id, pc->pmiid, pc->cnonce,
                          pc->snonce, proof) == 0) {
        (void)rt_auth_hex_encode(proof, sizeof(proof), hex, sizeof(hex));
    }
    rt_auth_wipe(proof, sizeof(proof));
    r->pmi_fd = pc->fd;
    r->in_len = 0;
    pc->fd = -1;
    fr_pmi_pending_close(pc);
    fr_pmi_answer(job, r,
                  "cmd=initack rc=0 proof=%s\ncmd=set size=%d\ncmd=set rank=%d\ncmd=set debug=0\n",
                  hex, job->opt.np, r->rank);
    /* Serve what is already here; the next read may never come. */
    fr_pmi_input(job, r, rest, rest_len);
}

void fr_pmi_pending_input(fr_job_t *job, fr_pending_t *pc, const char *data, size_t len)
{
    while (pc->fd >= 0) {
        size_t room = sizeof(pc->in) - pc->in_len;
        size_t n = len < room ? len : room;
        memcpy(pc->in + pc->in_len, data, n);
        pc->in_len += n;
        data += n;
        len -= n;
        char *nl = memchr(pc->in, '\n', pc->in_len);
        if (nl == NULL) {
            if (pc->in_len == sizeof(pc->in)) {
                fr_pending_refuse(job, pc, "", "line_too_long");
            }
            if (len == 0 || pc->fd < 0) {
                return;
            }
            continue;
        }
        *nl = '\0';
        char copy[FR_PMI_LINE_MAX];
        snprintf(copy, sizeof(copy), "%s", pc->in);
        fr_req_t req;
        const char *why = memchr(pc->in, '\0', (size_t)(nl - pc->in)) != NULL
                              ? "nul_byte"
                              : fr_req_parse(pc->in, &req);
        fr_rank_t *r = NULL;
        if (why == NULL) {
            why = pc->state == FR_PENDING_INITACK ? fr_pending_initack(job, pc, &req)
                                                  : fr_pending_proof(job, pc, &req, &r);
        }
        if (why != NULL) {
            fr_pending_refuse(job, pc, copy, why);
            return;
        }
        /* The rest of the buffer, then the rest of data, follow the line. */
        size_t used = (size_t)(nl + 1 - pc->in);
        if (r != NULL) {
            char *rest = malloc(pc->in_len - used + len + 1);
            if (rest == NULL) {
                fr_pending_refuse(job, pc, "", "out_of_memory");
                return;
            }
            size_t rest_len = pc->in_len - used;
            memcpy(rest, pc->in + used, rest_len);
            memcpy(rest + rest_len, data, len);
            fr_pending_adopt(job, pc, r, rest, rest_len + len);
            free(rest);
            return;
        }
        pc->in_len -= used;
        memmove(pc->in, pc->in + used, pc->in_len);
    }
}

void fr_pmi_pending_readable(fr_job_t *job, fr_pending_t *pc)
{
    char buf[FR_PMI_LINE_MAX];
    size_t room = sizeof(pc->in) - pc->in_len;
    ssize_t n = read(pc->fd, buf, room < sizeof(buf) ? room : sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
    }
    if (n <= 0) {
        /* Gone before proving anything: nothing worth saying. */
        fr_pmi_pending_close(pc);
        return;
    }
    fr_pmi_pending_input(job, pc, buf, (size_t)n);
}
