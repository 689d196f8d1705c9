/*
 * The pmi1 backend: a client of the PMI-1 wire protocol, the line-oriented
 * text protocol that ferryrun, MPICH's hydra and Slurm serve. Each request is
 * one line "cmd=NAME key=value ...\n" and gets one answer line.
 *
 * The server is outside this process, so everything it sends is checked:
 * lines are bounded, must be printable key=value tokens starting with the
 * expected cmd, and numbers must parse. Malformed answers fail with
 * FERRY_ERR_PROTO, an error the server reports (rc != 0) with
 * FERRY_ERR_LAUNCHER, and a server that closes or stays silent for
 * FERRY_PMI_TIMEOUT seconds (default 300) with FERRY_ERR_LAUNCHER; every
 * failure is logged with its reason. The timeout bounds fences as well, since
 * a barrier answer is an answer like any other: a job whose ranks reach a
 * fence further apart than that must raise it.
 *
 * Values are binary, so they are encoded in unpadded base64url (letters,
 * digits, '-' and '_', which every PMI server stores untouched) and split
 * into chunks that fit the server's value length.
 *
 * PMI-1 keys are meant to be written once: hydra's proxies cache values, so
 * a key written again after a barrier can still read back its old value. So
 * every commit of a key is a new revision under new names, never an
 * overwrite. Revision V of rank R's key K has a header "R.hV.K" holding
 * "<chunks>.<bytes>.<K>", and chunks "R.cV.i.K". Every name starts with the
 * rank that owns it and a '.', the convention by which ferryrun refuses a
 * put of another rank's key; other servers just store the names. Names
 * cannot collide: each number is digits ended by a '.', and the letter tells
 * a header from a chunk, so a name determines R, V, i and K. When a name
 * could exceed the server's key length, K is replaced by a 64-bit hash in
 * hex and the letters become 'g' and 'd'; the header's copy of K tells a
 * hash collision from a match.
 *
 * A reader wants the newest revision. Revisions are written in order, so
 * those that exist are 0..N; the reader finds N by doubling its step from
 * the last revision it saw until one is missing, then halving between the
 * two. However many revisions a rank publishes, a read costs at most about
 * 2 log2(PMI1_REV_MAX) probes, never one per revision.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "rt/auth.h"
#include "rt/modex_impl.h"
#include "rt/progress.h"

/* Longest line accepted from the server, newline included. */
#define PMI1_RECV_MAX 8192
/* Longest line sent: MPICH's simple PMI servers read requests into buffers
 * of 1024 bytes, so no request may be longer. */
#define PMI1_SEND_MAX 1024
/* Most key=value tokens in one answer line. */
#define PMI1_TOKENS_MAX 16
/* Digits reserved for a chunk's index in a key name; enough for the
 * RT_MODEX_VAL_MAX value in the smallest chunks accepted. */
#define PMI1_CHUNK_DIGITS 6
#define PMI1_CHUNKS_MAX 999999L
/* The same for a key's revisions. */
#define PMI1_REV_DIGITS 6
#define PMI1_REV_MAX 999999L
/* Smallest limits a server may announce and still be usable: a header value
 * holds two numbers and a key, a hashed chunk name needs about 40. */
#define PMI1_MIN_CHUNK 100
#define PMI1_MIN_KEYLEN 48
/* Attempts at a PMI_PORT handshake the server cut short, and the first
 * pause between them (doubled each time). */
#define PMI1_CONNECT_TRIES 5
#define PMI1_RETRY_FIRST_MS 50
#define PMI1_TIMEOUT_DEFAULT 300
#define PMI1_TIMEOUT_MAX (7L * 24 * 3600)

/* The newest revision of another rank's key seen so far, and its header. */
typedef struct pmi1_rev {
    int rank;
    long rev;
    char key[RT_MODEX_KEY_MAX + 1];
    char header[RT_MODEX_KEY_MAX + 64];
    struct pmi1_rev *next;
} pmi1_rev_t;

#define PMI1_REV_BUCKETS 256

typedef struct pmi1 {
    int fd;         /* the connection to the server; -1 when none */
    bool joined;    /* init was answered, so a finalize is owed */
    bool broken;    /* an exchange failed half way: the stream is out of step */
    bool busy;      /* the server refused the initack for now (msg=busy) */
    int timeout_s;  /* longest wait for any one answer */
    size_t key_max; /* longest key name, without the NUL */
    size_t chunk_max; /* encoded characters per chunk */
    char kvsname[RT_MODEX_JOB_ID_MAX + 1];
    pmi1_rev_t *revs[PMI1_REV_BUCKETS];
    size_t buf_len; /* bytes received and not yet consumed */
    char buf[PMI1_RECV_MAX];
    char line[PMI1_RECV_MAX]; /* the current answer, tokens point into it */
} pmi1_t;

/* One parsed answer line. */
typedef struct pmi1_msg {
    int n;
    const char *key[PMI1_TOKENS_MAX];
    const char *val[PMI1_TOKENS_MAX];
} pmi1_msg_t;

/* ---- Time and bounded I/O ------------------------------------------------ */

static long long pmi1_now_ms(void)
{
    return (long long)(rt_now_ns() / 1000000u);
}

/* Waits for events on the server's descriptor until the deadline. */
static int pmi1_wait(rt_modex_t *mx, short events, long long deadline, const char *what)
{
    pmi1_t *p = mx->backend;
    for (;;) {
        long long left = deadline - pmi1_now_ms();
        if (left <= 0) {
            rt_log(mx->log, RT_LOG_ERROR,
                   "modex: PMI server did not answer %s within %d s (FERRY_PMI_TIMEOUT)", what,
                   p->timeout_s);
            return FERRY_ERR_LAUNCHER;
        }
        struct pollfd pfd = {.fd = p->fd, .events = events};
        int n = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n > 0) {
            return FERRY_OK;
        }
        if (n < 0 && errno != EINTR) {
            rt_log_errno(mx->log, "modex: poll on the PMI connection", errno);
            return FERRY_ERR_LAUNCHER;
        }
    }
}

static int pmi1_write_all(rt_modex_t *mx, const char *data, size_t len, const char *what)
{
    pmi1_t *p = mx->backend;
    if (p->broken) {
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: cannot send %s: the PMI connection failed earlier", what);
        return FERRY_ERR_LAUNCHER;
    }
    long long deadline = pmi1_now_ms() + (long long)p->timeout_s * 1000;
    while (len > 0) {
        int rc = pmi1_wait(mx, POLLOUT, deadline, what);
        if (rc != FERRY_OK) {
            p->broken = true;
            return rc;
        }
        /* MSG_NOSIGNAL: a server that went away must give an error, not
         * kill this process with SIGPIPE. */
        ssize_t n = send(p->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == ENOTSOCK) {
            n = write(p->fd, data, len);
        }
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
                continue;
            }
            rt_log(mx->log, RT_LOG_ERROR, "modex: sending %s to the PMI server failed: %s", what,
                   strerror(errno));
            p->broken = true;
            return FERRY_ERR_LAUNCHER;
        }
        data += n;
        len -= (size_t)n;
    }
    return FERRY_OK;
}

/* Copies at most 60 characters of untrusted text for a log message, with
 * anything unprintable shown as '?'. */
static void pmi1_excerpt(const char *text, size_t len, char out[64])
{
    size_t n = len < 60 ? len : 60;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        out[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    strcpy(out + n, len > 60 ? "..." : "");
}

/* Reads one line (without its newline) into p->line. */
static int pmi1_read_line(rt_modex_t *mx, const char *what)
{
    pmi1_t *p = mx->backend;
    long long deadline = pmi1_now_ms() + (long long)p->timeout_s * 1000;
    for (;;) {
        char *nl = memchr(p->buf, '\n', p->buf_len);
        if (nl != NULL) {
            size_t len = (size_t)(nl - p->buf);
            memcpy(p->line, p->buf, len);
            p->line[len] = '\0';
            p->buf_len -= len + 1;
            memmove(p->buf, nl + 1, p->buf_len);
            if (memchr(p->line, '\0', len) != NULL) {
                rt_log(mx->log, RT_LOG_ERROR,
                       "modex: PMI server's answer to %s contains a NUL byte", what);
                return FERRY_ERR_PROTO;
            }
            return FERRY_OK;
        }
        if (p->buf_len == sizeof(p->buf)) {
            char ex[64];
            pmi1_excerpt(p->buf, p->buf_len, ex);
            rt_log(mx->log, RT_LOG_ERROR,
                   "modex: PMI server's answer to %s is longer than %d bytes: '%s'", what,
                   PMI1_RECV_MAX, ex);
            return FERRY_ERR_PROTO;
        }
        int rc = pmi1_wait(mx, POLLIN, deadline, what);
        if (rc != FERRY_OK) {
            return rc;
        }
        ssize_t n = read(p->fd, p->buf + p->buf_len, sizeof(p->buf) - p->buf_len);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) {
            rt_log(mx->log, RT_LOG_ERROR,
                   "modex: PMI server closed the connection while %s was awaited", what);
            return FERRY_ERR_LAUNCHER;
        }
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
                continue;
            }
            rt_log(mx->log, RT_LOG_ERROR, "modex: reading the PMI server's answer to %s: %s",
                   what, strerror(errno));
            return FERRY_ERR_LAUNCHER;
        }
        p->buf_len += (size_t)n;
    }
}

/* ---- Requests and answers ---------------------------------------------- */

static int pmi1_send(rt_modex_t *mx, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int pmi1_send(rt_modex_t *mx, const char *what, const char *fmt, ...)
{
    char req[PMI1_SEND_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(req, sizeof(req), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(req)) {
        /* Chunk and key sizes are chosen so that this cannot happen. */
        rt_log(mx->log, RT_LOG_ERROR, "modex: PMI request %s would exceed %d bytes", what,
               PMI1_SEND_MAX);
        return FERRY_ERR;
    }
    return pmi1_write_all(mx, req, (size_t)n, what);
}

/* Splits p->line into tokens, in place. */
static int pmi1_parse(rt_modex_t *mx, const char *what, pmi1_msg_t *msg)
{
    pmi1_t *p = mx->backend;
    char ex[64];
    pmi1_excerpt(p->line, strlen(p->line), ex);
    for (const char *c = p->line; *c != '\0'; c++) {
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) {
            rt_log(mx->log, RT_LOG_ERROR,
                   "modex: PMI server's answer to %s has the unprintable byte 0x%02x: '%s'",
                   what, (unsigned char)*c, ex);
            return FERRY_ERR_PROTO;
        }
    }
    msg->n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(p->line, " ", &save); tok != NULL;
         tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        if (eq == NULL || eq == tok) {
            rt_log(mx->log, RT_LOG_ERROR,
                   "modex: PMI server's answer to %s is not key=value text: '%s'", what, ex);
            return FERRY_ERR_PROTO;
        }
        if (msg->n == PMI1_TOKENS_MAX) {
            rt_log(mx->log, RT_LOG_ERROR,
                   "modex: PMI server's answer to %s has more than %d fields: '%s'", what,
                   PMI1_TOKENS_MAX, ex);
            return FERRY_ERR_PROTO;
        }
        *eq = '\0';
        msg->key[msg->n] = tok;
        msg->val[msg->n] = eq + 1;
        msg->n++;
    }
    if (msg->n == 0 || strcmp(msg->key[0], "cmd") != 0) {
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: PMI server's answer to %s does not start with cmd=: '%s'", what, ex);
        return FERRY_ERR_PROTO;
    }
    return FERRY_OK;
}

static const char *pmi1_field(const pmi1_msg_t *msg, const char *key)
{
    for (int i = 1; i < msg->n; i++) {
        if (strcmp(msg->key[i], key) == 0) {
            return msg->val[i];
        }
    }
    return NULL;
}

/* Parses a field holding a decimal integer in [min, max]. */
static int pmi1_field_long(rt_modex_t *mx, const pmi1_msg_t *msg, const char *key, long min,
                           long max, long *out)
{
    const char *text = pmi1_field(msg, key);
    if (text == NULL) {
        rt_log(mx->log, RT_LOG_ERROR, "modex: PMI server's cmd=%s answer lacks %s=",
               msg->val[0], key);
        return FERRY_ERR_PROTO;
    }
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > max) {
        char ex[64];
        pmi1_excerpt(text, strlen(text), ex);
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: PMI server's cmd=%s answer has %s='%s', expected a number in "
               "[%ld, %ld]",
               msg->val[0], key, ex, min, max);
        return FERRY_ERR_PROTO;
    }
    *out = v;
    return FERRY_OK;
}

/* The rc= field: absent counts as success (hydra's maxes and barrier_out
 * carry none); a failure is logged with the server's msg= and what it was
 * asked. */
static int pmi1_check_rc(rt_modex_t *mx, const pmi1_msg_t *msg, const char *what,
                         bool log_failure)
{
    if (pmi1_field(msg, "rc") == NULL) {
        return FERRY_OK;
    }
    long rc = 0;
    int st = pmi1_field_long(mx, msg, "rc", LONG_MIN, LONG_MAX, &rc);
    if (st != FERRY_OK) {
        return st;
    }
    if (rc == 0) {
        return FERRY_OK;
    }
    if (log_failure) {
        const char *text = pmi1_field(msg, "msg");
        char ex[64];
        pmi1_excerpt(text != NULL ? text : "(none)", strlen(text != NULL ? text : "(none)"), ex);
        rt_log(mx->log, RT_LOG_ERROR, "modex: PMI server refused %s: rc=%ld msg=%s", what, rc,
               ex);
    }
    return FERRY_ERR_LAUNCHER;
}

/* Reads an answer and checks that it is cmd=expect. */
static int pmi1_recv(rt_modex_t *mx, const char *what, const char *expect, pmi1_msg_t *msg)
{
    pmi1_t *p = mx->backend;
    int rc = pmi1_read_line(mx, what);
    if (rc == FERRY_OK) {
        rc = pmi1_parse(mx, what, msg);
    }
    if (rc != FERRY_OK) {
        p->broken = true;
        return rc;
    }
    if (strcmp(msg->val[0], expect) != 0) {
        char ex[64];
        pmi1_excerpt(msg->val[0], strlen(msg->val[0]), ex);
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: PMI server answered %s with cmd=%s, expected cmd=%s", what, ex, expect);
        p->broken = true;
        return FERRY_ERR_PROTO;
    }
    return FERRY_OK;
}

/* ---- Joining the job ------------------------------------------------------ */

/* Reads an integer environment variable in [min, max]. */
static int pmi1_env_long(rt_modex_t *mx, const char *name, long min, long max, long *out)
{
    const char *text = getenv(name);
    if (text == NULL) {
        rt_log(mx->log, RT_LOG_ERROR, "modex: the PMI-1 launcher did not set %s", name);
        return FERRY_ERR_LAUNCHER;
    }
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > max) {
        rt_log(mx->log, RT_LOG_ERROR, "modex: %s='%.64s' is not a number in [%ld, %ld]", name,
               text, min, max);
        return FERRY_ERR_LAUNCHER;
    }
    *out = v;
    return FERRY_OK;
}

static int pmi1_read_timeout(rt_modex_t *mx)
{
    pmi1_t *p = mx->backend;
    const char *text = mx->pmi_timeout; /* declared in modex.c */
    p->timeout_s = PMI1_TIMEOUT_DEFAULT;
    if (text == NULL || text[0] == '\0') {
        return FERRY_OK;
    }
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < 1 || v > PMI1_TIMEOUT_MAX) {
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: FERRY_PMI_TIMEOUT='%.64s' is not a number of seconds in [1, %ld]", text,
               PMI1_TIMEOUT_MAX);
        return FERRY_ERR_INVALID;
    }
    p->timeout_s = (int)v;
    return FERRY_OK;
}

/* Connects to PMI_PORT, "host:port" or "[v6addr]:port". */
static int pmi1_connect_port(rt_modex_t *mx, const char *addr)
{
    pmi1_t *p = mx->backend;
    char host[256];
    const char *colon = strrchr(addr, ':');
    size_t hlen = colon != NULL ? (size_t)(colon - addr) : 0;
    if (colon == NULL || hlen == 0 || hlen >= sizeof(host) || colon[1] == '\0') {
        rt_log(mx->log, RT_LOG_ERROR, "modex: PMI_PORT='%.64s' is not host:port", addr);
        return FERRY_ERR_LAUNCHER;
    }
    memcpy(host, addr, hlen);
    host[hlen] = '\0';
    if (host[0] == '[' && host[hlen - 1] == ']') {
        memmove(host, host + 1, hlen - 2);
        host[hlen - 2] = '\0';
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, colon + 1, &hints, &res);
    if (gai != 0) {
        rt_log(mx->log, RT_LOG_ERROR, "modex: cannot resolve PMI_PORT='%.64s': %s", addr,
               gai_strerror(gai));
        return FERRY_ERR_LAUNCHER;
    }
    int last_err = 0;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                        ai->ai_protocol);
        if (fd < 0) {
            last_err = errno;
            continue;
        }
        p->fd = fd;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
            last_err = errno;
        } else {
            /* The connection completes (or fails) within the usual timeout. */
            long long deadline = pmi1_now_ms() + (long long)p->timeout_s * 1000;
            int soerr = 0;
            socklen_t slen = sizeof(soerr);
            if (pmi1_wait(mx, POLLOUT, deadline, "connect") == FERRY_OK &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &slen) == 0 && soerr == 0) {
                freeaddrinfo(res);
                return FERRY_OK;
            }
            last_err = soerr != 0 ? soerr : ETIMEDOUT;
        }
        close(fd);
        p->fd = -1;
    }
    freeaddrinfo(res);
    rt_log(mx->log, RT_LOG_ERROR, "modex: cannot connect to PMI_PORT='%.64s': %s", addr,
           strerror(last_err));
    return FERRY_ERR_LAUNCHER;
}

/* Reads a field holding RT_AUTH_NONCE_LEN (or MAC) bytes in hex. */
static int pmi1_field_hex(rt_modex_t *mx, const pmi1_msg_t *msg, const char *key,
                          uint8_t out[RT_AUTH_MAC_LEN])
{
    const char *text = pmi1_field(msg, key);
    if (text == NULL || rt_auth_hex_decode(text, out, RT_AUTH_MAC_LEN) != FERRY_OK) {
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: PMI server's cmd=%s answer lacks %s= of %d hex digits", msg->val[0], key,
               RT_AUTH_HEX_LEN);
        return FERRY_ERR_PROTO;
    }
    return FERRY_OK;
}

/* Reads an answer during the initack: cmd=expect, or the server's refusal
 * (cmd=initack rc!=0), which is FERRY_ERR_LAUNCHER, logged, and marks the
 * connection busy when the server asks to be tried again (msg=busy: it
 * closed this connection to make room). */
static int pmi1_recv_initack(rt_modex_t *mx, const char *what, const char *expect,
                             pmi1_msg_t *msg)
{
    pmi1_t *p = mx->backend;
    int rc = pmi1_read_line(mx, what);
    if (rc == FERRY_OK) {
        rc = pmi1_parse(mx, what, msg);
    }
    if (rc != FERRY_OK) {
        p->broken = true;
        return rc;
    }
    if (strcmp(msg->val[0], "initack") == 0 && pmi1_field(msg, "rc") != NULL &&
        pmi1_check_rc(mx, msg, what, true) != FERRY_OK) {
        const char *why = pmi1_field(msg, "msg");
        p->busy = why != NULL && strcmp(why, "busy") == 0;
        if (why != NULL && strcmp(why, "auth_required") == 0) {
            rt_log(mx->log, RT_LOG_ERROR,
                   "modex: the launcher wants proof of the job's secret, but this rank was "
                   "given none (%s); under ferryrun, a launch agent that drops the "
                   "environment needs --agent-secret stdin",
                   RT_AUTH_SECRET_ENV);
        }
        p->broken = true;
        return FERRY_ERR_LAUNCHER;
    }
    if (strcmp(msg->val[0], expect) != 0) {
        char ex[64];
        pmi1_excerpt(msg->val[0], strlen(msg->val[0]), ex);
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: PMI server answered %s with cmd=%s, expected cmd=%s", what, ex, expect);
        p->broken = true;
        return FERRY_ERR_PROTO;
    }
    return pmi1_check_rc(mx, msg, what, true);
}

/* The authenticated part of the initack (auth.h): sends our nonce, answers
 * the server's challenge with our proof, and leaves the server's initack
 * in msg once its own proof has been checked. A server that cannot prove
 * the secret is not ferryrun, whatever it answers. */
static int pmi1_initack_auth(rt_modex_t *mx, long id, pmi1_msg_t *msg)
{
    const char *job = getenv("FERRY_JOB_ID");
    if (job == NULL || job[0] == '\0') {
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: the launcher gave a job secret but no FERRY_JOB_ID to prove it with");
        return FERRY_ERR_LAUNCHER;
    }
    uint8_t cnonce[RT_AUTH_NONCE_LEN], snonce[RT_AUTH_NONCE_LEN];
    uint8_t proof[RT_AUTH_MAC_LEN], expect[RT_AUTH_MAC_LEN];
    char hex[RT_AUTH_HEX_LEN + 1];
    int rc = rt_auth_random(cnonce, sizeof(cnonce));
    if (rc == FERRY_OK) {
        rc = rt_auth_hex_encode(cnonce, sizeof(cnonce), hex, sizeof(hex));
    }
    if (rc == FERRY_OK) {
        rc = pmi1_send(mx, "initack", "cmd=initack pmiid=%ld auth=%s nonce=%s\n", id,
                       RT_AUTH_PMI_METHOD, hex);
    }
    if (rc == FERRY_OK) {
        rc = pmi1_recv_initack(mx, "initack", "auth_challenge", msg);
    }
    if (rc == FERRY_OK) {
        rc = pmi1_field_hex(mx, msg, "nonce", snonce);
    }
    if (rc == FERRY_OK) {
        rc = rt_auth_pmi_proof(mx->secret, RT_AUTH_PMI_CLIENT, job, id, cnonce, snonce, proof);
    }
    if (rc == FERRY_OK) {
        rc = rt_auth_hex_encode(proof, sizeof(proof), hex, sizeof(hex));
    }
    if (rc == FERRY_OK) {
        rc = pmi1_send(mx, "auth_response", "cmd=auth_response proof=%s\n", hex);
    }
    if (rc == FERRY_OK) {
        rc = pmi1_recv_initack(mx, "auth_response", "initack", msg);
    }
    if (rc == FERRY_OK) {
        rc = pmi1_field_hex(mx, msg, "proof", proof);
    }
    if (rc == FERRY_OK) {
        rc = rt_auth_pmi_proof(mx->secret, RT_AUTH_PMI_SERVER, job, id, cnonce, snonce, expect);
    }
    if (rc == FERRY_OK && !rt_auth_equal(proof, expect, sizeof(proof))) {
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: the PMI server at PMI_PORT did not prove the job's secret: it is not "
               "this job's launcher");
        rc = FERRY_ERR_LAUNCHER;
    }
    rt_auth_wipe(proof, sizeof(proof));
    rt_auth_wipe(expect, sizeof(expect));
    return rc;
}

/* The handshake of a PMI_PORT connection: "initack" with our PMI_ID (and,
 * when the launcher gave a secret, the proof of it), then the server tells
 * size, rank and debug in "cmd=set" lines. */
static int pmi1_initack(rt_modex_t *mx)
{
    long id = 0;
    int rc = pmi1_env_long(mx, "PMI_ID", 0, INT_MAX, &id);
    if (rc != FERRY_OK) {
        return rc;
    }
    pmi1_msg_t msg;
    if (mx->have_secret) {
        rc = pmi1_initack_auth(mx, id, &msg);
    } else {
        rc = pmi1_send(mx, "initack", "cmd=initack pmiid=%ld\n", id);
        if (rc == FERRY_OK) {
            rc = pmi1_recv_initack(mx, "initack", "initack", &msg);
        }
    }
    long size = -1, rank = -1;
    for (int i = 0; i < 3 && rc == FERRY_OK; i++) {
        rc = pmi1_recv(mx, "initack", "set", &msg);
        if (rc != FERRY_OK) {
            break;
        }
        if (pmi1_field(&msg, "size") != NULL) {
            rc = pmi1_field_long(mx, &msg, "size", 1, INT_MAX, &size);
        } else if (pmi1_field(&msg, "rank") != NULL) {
            rc = pmi1_field_long(mx, &msg, "rank", 0, INT_MAX, &rank);
        } else if (pmi1_field(&msg, "debug") == NULL) {
            rt_log(mx->log, RT_LOG_ERROR,
                   "modex: PMI server's cmd=set after initack names none of size, rank, debug");
            rc = FERRY_ERR_PROTO;
        }
    }
    if (rc != FERRY_OK) {
        return rc;
    }
    if (size < 1 || rank < 0 || rank >= size) {
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: PMI server's initack gave rank %ld of size %ld, not a valid pair", rank,
               size);
        return FERRY_ERR_PROTO;
    }
    mx->rank = (int)rank;
    mx->size = (int)size;
    return FERRY_OK;
}

/* Connects to PMI_PORT and shakes hands. A server with too many strangers
 * waiting may let ours go to make room (ferryrun closes the oldest
 * connection that has not proved itself, with msg=busy): that is tried
 * again a few times, with growing pauses. Any other refusal, a closed
 * connection, or a wrong answer is final. */
static int pmi1_open_port(rt_modex_t *mx, const char *port)
{
    pmi1_t *p = mx->backend;
    int rc = FERRY_ERR_LAUNCHER;
    long pause_ms = PMI1_RETRY_FIRST_MS;
    for (int attempt = 1; attempt <= PMI1_CONNECT_TRIES; attempt++) {
        p->busy = false;
        p->broken = false;
        p->buf_len = 0;
        rc = pmi1_connect_port(mx, port);
        if (rc != FERRY_OK) {
            return rc;
        }
        rc = pmi1_initack(mx);
        if (rc == FERRY_OK || !p->busy || attempt == PMI1_CONNECT_TRIES) {
            return rc;
        }
        close(p->fd);
        p->fd = -1;
        rt_log(mx->log, RT_LOG_WARN,
               "modex: the PMI server is busy (attempt %d of %d); trying again in %ld ms",
               attempt, PMI1_CONNECT_TRIES, pause_ms);
        struct timespec ts = {.tv_sec = pause_ms / 1000, .tv_nsec = pause_ms % 1000 * 1000000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
        pause_ms *= 2;
    }
    return rc;
}

/* Opens the connection the environment names and learns rank and size. */
static int pmi1_open(rt_modex_t *mx)
{
    pmi1_t *p = mx->backend;
    const char *fd_text = getenv("PMI_FD");
    const char *port = getenv("PMI_PORT");
    if (fd_text != NULL) {
        long fd = 0, rank = 0, size = 0;
        int rc = pmi1_env_long(mx, "PMI_FD", 0, INT_MAX, &fd);
        if (rc == FERRY_OK) {
            rc = pmi1_env_long(mx, "PMI_SIZE", 1, INT_MAX, &size);
        }
        if (rc == FERRY_OK) {
            rc = pmi1_env_long(mx, "PMI_RANK", 0, size - 1, &rank);
        }
        if (rc != FERRY_OK) {
            return rc;
        }
        int flags = fcntl((int)fd, F_GETFD);
        if (flags < 0) {
            rt_log(mx->log, RT_LOG_ERROR, "modex: PMI_FD=%ld is not an open descriptor: %s", fd,
                   strerror(errno));
            return FERRY_ERR_LAUNCHER;
        }
        /* The descriptor is the job's, not for programs this one execs. */
        (void)fcntl((int)fd, F_SETFD, flags | FD_CLOEXEC);
        p->fd = (int)fd;
        mx->rank = (int)rank;
        mx->size = (int)size;
        return FERRY_OK;
    }
    if (port != NULL) {
        return pmi1_open_port(mx, port);
    }
    rt_log(mx->log, RT_LOG_ERROR,
           "modex: FERRY_MODEX=pmi1 but neither PMI_FD nor PMI_PORT is set: no launcher");
    return FERRY_ERR_LAUNCHER;
}

/* init, get_maxes, get_my_kvsname. */
static int pmi1_join(rt_modex_t *mx)
{
    pmi1_t *p = mx->backend;
    pmi1_msg_t msg;
    int rc = pmi1_send(mx, "init", "cmd=init pmi_version=1 pmi_subversion=1\n");
    if (rc == FERRY_OK) {
        rc = pmi1_recv(mx, "init", "response_to_init", &msg);
    }
    if (rc == FERRY_OK) {
        rc = pmi1_check_rc(mx, &msg, "init", true);
    }
    if (rc != FERRY_OK) {
        return rc;
    }
    long version = 0;
    rc = pmi1_field_long(mx, &msg, "pmi_version", 0, INT_MAX, &version);
    if (rc != FERRY_OK) {
        return rc;
    }
    if (version != 1) {
        rt_log(mx->log, RT_LOG_ERROR, "modex: PMI server speaks version %ld, not 1", version);
        return FERRY_ERR_LAUNCHER;
    }

    long kvs_max = 0, key_max = 0, val_max = 0;
    rc = pmi1_send(mx, "get_maxes", "cmd=get_maxes\n");
    if (rc == FERRY_OK) {
        rc = pmi1_recv(mx, "get_maxes", "maxes", &msg);
    }
    if (rc == FERRY_OK) {
        rc = pmi1_check_rc(mx, &msg, "get_maxes", true);
    }
    if (rc == FERRY_OK) {
        rc = pmi1_field_long(mx, &msg, "kvsname_max", 1, INT_MAX, &kvs_max);
    }
    if (rc == FERRY_OK) {
        rc = pmi1_field_long(mx, &msg, "keylen_max", 1, INT_MAX, &key_max);
    }
    if (rc == FERRY_OK) {
        rc = pmi1_field_long(mx, &msg, "vallen_max", 1, INT_MAX, &val_max);
    }
    if (rc != FERRY_OK) {
        return rc;
    }

    rc = pmi1_send(mx, "get_my_kvsname", "cmd=get_my_kvsname\n");
    if (rc == FERRY_OK) {
        rc = pmi1_recv(mx, "get_my_kvsname", "my_kvsname", &msg);
    }
    if (rc == FERRY_OK) {
        rc = pmi1_check_rc(mx, &msg, "get_my_kvsname", true);
    }
    if (rc != FERRY_OK) {
        return rc;
    }
    const char *kvsname = pmi1_field(&msg, "kvsname");
    size_t kvs_len = kvsname != NULL ? strlen(kvsname) : 0;
    if (kvs_len == 0 || kvs_len >= sizeof(p->kvsname) || kvs_len >= (size_t)kvs_max) {
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: PMI server's kvsname is missing, empty or longer than %zu characters",
               sizeof(p->kvsname) - 1);
        return FERRY_ERR_PROTO;
    }
    memcpy(p->kvsname, kvsname, kvs_len + 1);
    rt_modex_set_job_id(mx, p->kvsname);

    /* Key and value limits count the NUL, as the PMI-1 API's buffers do. A
     * request must also fit PMI1_SEND_MAX, which bounds the chunk further. */
    p->key_max = (size_t)key_max - 1;
    if (p->key_max > RT_MODEX_KEY_MAX + 32) {
        p->key_max = RT_MODEX_KEY_MAX + 32;
    }
    size_t overhead = strlen("cmd=put kvsname= key= value=\n") + kvs_len + p->key_max;
    size_t chunk = (size_t)val_max - 1;
    if (overhead < PMI1_SEND_MAX && chunk > PMI1_SEND_MAX - overhead) {
        chunk = PMI1_SEND_MAX - overhead;
    }
    if (overhead >= PMI1_SEND_MAX || chunk < PMI1_MIN_CHUNK || p->key_max < PMI1_MIN_KEYLEN) {
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: PMI server's limits (kvsname %zu characters, keylen_max %ld, "
               "vallen_max %ld) are too small for ferry (needs keys of %d, values of %d)",
               kvs_len, key_max, val_max, PMI1_MIN_KEYLEN + 1, PMI1_MIN_CHUNK + 1);
        return FERRY_ERR_LAUNCHER;
    }
    p->chunk_max = chunk;
    /* Only a complete join owes a finalize: after a failed one the process
     * is about to report the error and end, and a server that answered
     * wrongly may not answer a finalize at all. */
    p->joined = true;
    return FERRY_OK;
}

/* ---- Value encoding ------------------------------------------------------ */

static const char pmi1_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static size_t pmi1_enc_len(size_t len)
{
    return len / 3 * 4 + (len % 3 == 0 ? 0 : len % 3 + 1);
}

/* Encodes len bytes into out, which has room for pmi1_enc_len(len) + 1. */
static void pmi1_encode(const unsigned char *in, size_t len, char *out)
{
    size_t o = 0;
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = pmi1_b64[v >> 18 & 63];
        out[o++] = pmi1_b64[v >> 12 & 63];
        out[o++] = pmi1_b64[v >> 6 & 63];
        out[o++] = pmi1_b64[v & 63];
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = pmi1_b64[v >> 18 & 63];
        out[o++] = pmi1_b64[v >> 12 & 63];
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = pmi1_b64[v >> 18 & 63];
        out[o++] = pmi1_b64[v >> 12 & 63];
        out[o++] = pmi1_b64[v >> 6 & 63];
    }
    out[o] = '\0';
}

static int pmi1_b64_value(char c)
{
    if (c >= 'A' && c <= 'Z') {
        return c - 'A';
    }
    if (c >= 'a' && c <= 'z') {
        return c - 'a' + 26;
    }
    if (c >= '0' && c <= '9') {
        return c - '0' + 52;
    }
    if (c == '-') {
        return 62;
    }
    if (c == '_') {
        return 63;
    }
    return -1;
}

/* Decodes exactly len bytes from enc (of pmi1_enc_len(len) characters);
 * false when a character is outside the alphabet. */
static bool pmi1_decode(const char *enc, size_t len, unsigned char *out)
{
    size_t enc_len = pmi1_enc_len(len);
    size_t o = 0;
    for (size_t i = 0; i < enc_len; i += 4) {
        uint32_t v = 0;
        size_t group = enc_len - i < 4 ? enc_len - i : 4;
        for (size_t j = 0; j < 4; j++) {
            int d = j < group ? pmi1_b64_value(enc[i + j]) : 0;
            if (d < 0) {
                return false;
            }
            v = v << 6 | (uint32_t)d;
        }
        for (size_t j = 0; j + 1 < group; j++) {
            out[o++] = (unsigned char)(v >> (16 - 8 * j));
        }
    }
    return o == len;
}

/* ---- Key names ------------------------------------------------------------ */

static uint64_t pmi1_hash(const char *key)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *key != '\0'; key++) {
        h ^= (unsigned char)*key;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The name of revision rev of rank's header (chunk < 0) or of one of its
 * chunks. Whether the key is hashed depends only on the key, the rank and
 * the server's limit, so every rank computes the same names. */
static void pmi1_key_name(const pmi1_t *p, int rank, const char *key, long rev, long chunk,
                          char name[RT_MODEX_KEY_MAX + 64])
{
    char rank_text[16];
    snprintf(rank_text, sizeof(rank_text), "%d", rank);
    size_t longest = strlen(rank_text) + 2 + PMI1_REV_DIGITS + 1 + PMI1_CHUNK_DIGITS + 1 +
                     strlen(key);
    char tail[RT_MODEX_KEY_MAX + 1];
    bool hashed = longest > p->key_max;
    if (hashed) {
        snprintf(tail, sizeof(tail), "%016llx", (unsigned long long)pmi1_hash(key));
    } else {
        snprintf(tail, sizeof(tail), "%s", key);
    }
    if (chunk < 0) {
        snprintf(name, RT_MODEX_KEY_MAX + 64, "%s.%c%ld.%s", rank_text, hashed ? 'g' : 'h', rev,
                 tail);
    } else {
        snprintf(name, RT_MODEX_KEY_MAX + 64, "%s.%c%ld.%ld.%s", rank_text, hashed ? 'd' : 'c',
                 rev, chunk, tail);
    }
}

static pmi1_rev_t **pmi1_rev_slot(pmi1_t *p, int rank, const char *key)
{
    uint64_t h = pmi1_hash(key) ^ ((uint64_t)(unsigned)rank * 0x9e3779b97f4a7c15ull);
    return &p->revs[h % PMI1_REV_BUCKETS];
}

static pmi1_rev_t *pmi1_rev_find(pmi1_t *p, int rank, const char *key)
{
    for (pmi1_rev_t *r = *pmi1_rev_slot(p, rank, key); r != NULL; r = r->next) {
        if (r->rank == rank && strcmp(r->key, key) == 0) {
            return r;
        }
    }
    return NULL;
}

/* Remembers a revision; forgetting it for want of memory only costs probes
 * later, so that is not an error. */
static void pmi1_rev_store(pmi1_t *p, int rank, const char *key, long rev, const char *header)
{
    pmi1_rev_t *r = pmi1_rev_find(p, rank, key);
    if (r == NULL) {
        r = calloc(1, sizeof(*r));
        if (r == NULL) {
            return;
        }
        r->rank = rank;
        snprintf(r->key, sizeof(r->key), "%s", key);
        pmi1_rev_t **slot = pmi1_rev_slot(p, rank, key);
        r->next = *slot;
        *slot = r;
    }
    r->rev = rev;
    snprintf(r->header, sizeof(r->header), "%s", header);
}

/* ---- Operations ------------------------------------------------------------ */

static int pmi1_put(rt_modex_t *mx, const char *name, const char *value)
{
    pmi1_t *p = mx->backend;
    pmi1_msg_t msg;
    int rc = pmi1_send(mx, "put", "cmd=put kvsname=%s key=%s value=%s\n", p->kvsname, name,
                       value);
    if (rc == FERRY_OK) {
        rc = pmi1_recv(mx, "put", "put_result", &msg);
    }
    if (rc == FERRY_OK) {
        rc = pmi1_check_rc(mx, &msg, "put", true);
    }
    return rc;
}

static int pmi1_publish(rt_modex_t *mx, const rt_modex_kv_t *kv)
{
    pmi1_t *p = mx->backend;
    long rev = (long)kv->published;
    if (rev > PMI1_REV_MAX) {
        rt_log(mx->log, RT_LOG_ERROR, "modex: key %s was committed more than %ld times", kv->key,
               PMI1_REV_MAX);
        return FERRY_ERR_NO_RESOURCE;
    }
    size_t enc_len = pmi1_enc_len(kv->len);
    char *enc = malloc(enc_len + 1);
    if (enc == NULL) {
        return FERRY_ERR_NO_MEMORY;
    }
    pmi1_encode(kv->val, kv->len, enc);
    long chunks = (long)((enc_len + p->chunk_max - 1) / p->chunk_max);
    char name[RT_MODEX_KEY_MAX + 64];
    char *piece = malloc(p->chunk_max + 1);
    int rc = piece != NULL ? FERRY_OK : FERRY_ERR_NO_MEMORY;
    /* Chunks go first and the header last, so that a reader who finds the
     * header finds its chunks as well. */
    for (long i = 0; i < chunks && rc == FERRY_OK; i++) {
        size_t off = (size_t)i * p->chunk_max;
        size_t n = enc_len - off < p->chunk_max ? enc_len - off : p->chunk_max;
        memcpy(piece, enc + off, n);
        piece[n] = '\0';
        pmi1_key_name(p, mx->rank, kv->key, rev, i, name);
        rc = pmi1_put(mx, name, piece);
    }
    if (rc == FERRY_OK) {
        char header[RT_MODEX_KEY_MAX + 64];
        snprintf(header, sizeof(header), "%ld.%zu.%s", chunks, kv->len, kv->key);
        pmi1_key_name(p, mx->rank, kv->key, rev, -1, name);
        rc = pmi1_put(mx, name, header);
    }
    free(piece);
    free(enc);
    return rc;
}

static int pmi1_fence(rt_modex_t *mx)
{
    pmi1_msg_t msg;
    int rc = pmi1_send(mx, "barrier_in", "cmd=barrier_in\n");
    if (rc == FERRY_OK) {
        rc = pmi1_recv(mx, "barrier_in", "barrier_out", &msg);
    }
    if (rc == FERRY_OK) {
        rc = pmi1_check_rc(mx, &msg, "barrier_in", true);
    }
    return rc;
}

/* Fetches one PMI key's value into out (of out_size bytes). A missing key is
 * FERRY_ERR_NOT_FOUND: PMI-1 servers report it as a failed get. */
static int pmi1_get_raw(rt_modex_t *mx, const char *name, char *out, size_t out_size,
                        size_t *len_out)
{
    pmi1_t *p = mx->backend;
    pmi1_msg_t msg;
    int rc = pmi1_send(mx, "get", "cmd=get kvsname=%s key=%s\n", p->kvsname, name);
    if (rc == FERRY_OK) {
        rc = pmi1_recv(mx, "get", "get_result", &msg);
    }
    if (rc != FERRY_OK) {
        return rc;
    }
    rc = pmi1_check_rc(mx, &msg, "get", false);
    if (rc == FERRY_ERR_LAUNCHER) {
        rt_log(mx->log, RT_LOG_DEBUG, "modex: PMI key %s not found", name);
        return FERRY_ERR_NOT_FOUND;
    }
    if (rc != FERRY_OK) {
        return rc;
    }
    const char *value = pmi1_field(&msg, "value");
    if (value == NULL) {
        rt_log(mx->log, RT_LOG_ERROR, "modex: PMI server's get_result for %s has no value=",
               name);
        return FERRY_ERR_PROTO;
    }
    size_t len = strlen(value);
    if (len >= out_size) {
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: PMI value of %s is %zu characters, more than the %zu expected", name, len,
               out_size - 1);
        return FERRY_ERR_PROTO;
    }
    memcpy(out, value, len + 1);
    *len_out = len;
    return FERRY_OK;
}

/* Parses a header "<chunks>.<bytes>.<key>" and checks it against key. */
static int pmi1_parse_header(rt_modex_t *mx, const char *header, const char *key, int rank,
                             long *chunks_out, size_t *len_out)
{
    char *end = NULL;
    errno = 0;
    long chunks = strtol(header, &end, 10);
    bool ok = errno == 0 && end != header && *end == '.' && chunks >= 0 &&
              chunks <= PMI1_CHUNKS_MAX;
    unsigned long long len = 0;
    if (ok) {
        const char *start = end + 1;
        errno = 0;
        len = strtoull(start, &end, 10);
        ok = errno == 0 && end != start && *end == '.' && start[0] != '-' &&
             len <= RT_MODEX_VAL_MAX && strcmp(end + 1, key) == 0;
    }
    if (ok) {
        size_t enc_len = pmi1_enc_len((size_t)len);
        /* Every chunk holds at least one character, and there are chunks
         * exactly when there is something encoded. */
        ok = (size_t)chunks <= enc_len && (chunks == 0) == (enc_len == 0);
    }
    if (!ok) {
        char ex[64];
        pmi1_excerpt(header, strlen(header), ex);
        rt_log(mx->log, RT_LOG_ERROR,
               "modex: rank %d's stored header for key %s is malformed: '%s'", rank, key, ex);
        return FERRY_ERR_PROTO;
    }
    *chunks_out = chunks;
    *len_out = (size_t)len;
    return FERRY_OK;
}

/* Whether revision rev of rank's key exists; its header into header when
 * it does. FERRY_OK, FERRY_ERR_NOT_FOUND, or another error. */
static int pmi1_probe_rev(rt_modex_t *mx, int rank, const char *key, long rev,
                          char header[PMI1_RECV_MAX])
{
    pmi1_t *p = mx->backend;
    char name[RT_MODEX_KEY_MAX + 64];
    size_t header_len = 0;
    pmi1_key_name(p, rank, key, rev, -1, name);
    return pmi1_get_raw(mx, name, header, PMI1_RECV_MAX, &header_len);
}

/* Finds the newest revision of rank's key, starting from the one
 * remembered (or else revision 0, which must exist): steps of 1, 2, 4, ...
 * up until a revision is missing, then bisection between the last found
 * and the first missing. Every probe that finds a revision is newer than
 * every one found before it, so header always holds the newest found. */
static int pmi1_find_rev(rt_modex_t *mx, int rank, const char *key, long *rev_out,
                         char header[PMI1_RECV_MAX])
{
    pmi1_t *p = mx->backend;
    long found = 0;
    const pmi1_rev_t *seen = pmi1_rev_find(p, rank, key);
    if (seen != NULL) {
        found = seen->rev;
        snprintf(header, PMI1_RECV_MAX, "%s", seen->header);
    } else {
        int rc = pmi1_probe_rev(mx, rank, key, 0, header);
        if (rc != FERRY_OK) {
            return rc;
        }
    }
    char *next = malloc(PMI1_RECV_MAX);
    if (next == NULL) {
        return FERRY_ERR_NO_MEMORY;
    }
    int rc = FERRY_OK;
    long missing = PMI1_REV_MAX + 1; /* the lowest revision known not to exist */
    for (long step = 1; found < PMI1_REV_MAX; step *= 2) {
        long probe = step <= PMI1_REV_MAX - found ? found + step : PMI1_REV_MAX;
        rc = pmi1_probe_rev(mx, rank, key, probe, next);
        if (rc == FERRY_ERR_NOT_FOUND) {
            missing = probe;
            break;
        }
        if (rc != FERRY_OK) {
            break;
        }
        found = probe;
        snprintf(header, PMI1_RECV_MAX, "%s", next);
    }
    while (rc == FERRY_ERR_NOT_FOUND && missing - found > 1) {
        long probe = found + (missing - found) / 2;
        rc = pmi1_probe_rev(mx, rank, key, probe, next);
        if (rc == FERRY_OK) {
            found = probe;
            snprintf(header, PMI1_RECV_MAX, "%s", next);
            rc = FERRY_ERR_NOT_FOUND;
        } else if (rc == FERRY_ERR_NOT_FOUND) {
            missing = probe;
        }
    }
    free(next);
    if (rc != FERRY_OK && rc != FERRY_ERR_NOT_FOUND) {
        return rc;
    }
    /* A header too long to be one of ours is caught by the parser; it is
     * not worth remembering. */
    if (strlen(header) < RT_MODEX_KEY_MAX + 64) {
        pmi1_rev_store(p, rank, key, found, header);
    }
    *rev_out = found;
    return FERRY_OK;
}

static int pmi1_get(rt_modex_t *mx, int rank, const char *key, void **val_out, size_t *len_out)
{
    pmi1_t *p = mx->backend;
    char name[RT_MODEX_KEY_MAX + 64];
    char header[PMI1_RECV_MAX];
    long rev = 0;
    int rc = pmi1_find_rev(mx, rank, key, &rev, header);
    if (rc != FERRY_OK) {
        return rc;
    }
    long chunks = 0;
    size_t len = 0;
    rc = pmi1_parse_header(mx, header, key, rank, &chunks, &len);
    if (rc != FERRY_OK) {
        return rc;
    }
    size_t enc_len = pmi1_enc_len(len);
    char *enc = malloc(enc_len + PMI1_RECV_MAX);
    unsigned char *val = malloc(len > 0 ? len : 1);
    if (enc == NULL || val == NULL) {
        free(enc);
        free(val);
        return FERRY_ERR_NO_MEMORY;
    }
    size_t have = 0;
    for (long i = 0; i < chunks && rc == FERRY_OK; i++) {
        size_t n = 0;
        pmi1_key_name(p, rank, key, rev, i, name);
        /* Room for one more chunk than expected, so that an oversized one is
         * caught below rather than cut. */
        rc = pmi1_get_raw(mx, name, enc + have, enc_len + PMI1_RECV_MAX - have, &n);
        if (rc == FERRY_ERR_NOT_FOUND) {
            rt_log(mx->log, RT_LOG_ERROR,
                   "modex: rank %d's value of %s lacks chunk %ld of %ld", rank, key, i, chunks);
            rc = FERRY_ERR_PROTO;
        } else if (rc == FERRY_OK && (n == 0 || have + n > enc_len)) {
            rt_log(mx->log, RT_LOG_ERROR,
                   "modex: rank %d's value of %s has a chunk of the wrong size", rank, key);
            rc = FERRY_ERR_PROTO;
        }
        have += n;
    }
    if (rc == FERRY_OK && (have != enc_len || !pmi1_decode(enc, len, val))) {
        rt_log(mx->log, RT_LOG_ERROR, "modex: rank %d's value of %s is not valid encoding", rank,
               key);
        rc = FERRY_ERR_PROTO;
    }
    free(enc);
    if (rc != FERRY_OK) {
        free(val);
        return rc;
    }
    *val_out = val;
    *len_out = len;
    return FERRY_OK;
}

static int pmi1_abort(rt_modex_t *mx, int code)
{
    pmi1_t *p = mx->backend;
    int rc = pmi1_send(mx, "abort", "cmd=abort exitcode=%d\n", code);
    if (rc != FERRY_OK) {
        return rc;
    }
    /* The launcher now kills the job, this process included. Waiting for
     * that (the connection closing, or the timeout) keeps this rank from
     * running on as if nothing happened. */
    long long deadline = pmi1_now_ms() + (long long)p->timeout_s * 1000;
    while (pmi1_wait(mx, POLLIN, deadline, "abort") == FERRY_OK) {
        char sink[256];
        ssize_t n = read(p->fd, sink, sizeof(sink));
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
            break;
        }
    }
    p->joined = false;
    rt_log(mx->log, RT_LOG_ERROR, "modex: the PMI server did not end the job after abort");
    return FERRY_ERR_LAUNCHER;
}

static void pmi1_fini(rt_modex_t *mx)
{
    pmi1_t *p = mx->backend;
    if (p == NULL) {
        return;
    }
    if (p->joined && !p->broken && p->fd >= 0) {
        pmi1_msg_t msg;
        int rc = pmi1_send(mx, "finalize", "cmd=finalize\n");
        if (rc == FERRY_OK) {
            rc = pmi1_recv(mx, "finalize", "finalize_ack", &msg);
        }
        if (rc != FERRY_OK) {
            rt_log(mx->log, RT_LOG_WARN, "modex: PMI finalize failed: %s", ferry_strerror(rc));
        }
    }
    if (p->fd >= 0) {
        close(p->fd);
    }
    for (size_t b = 0; b < PMI1_REV_BUCKETS; b++) {
        pmi1_rev_t *r = p->revs[b];
        while (r != NULL) {
            pmi1_rev_t *next = r->next;
            free(r);
            r = next;
        }
    }
    free(p);
    mx->backend = NULL;
}

static const rt_modex_ops_t pmi1_ops = {
    .name = "pmi1",
    .publish = pmi1_publish,
    .fence = pmi1_fence,
    .get = pmi1_get,
    .abort = pmi1_abort,
    .fini = pmi1_fini,
};

int rt_modex_pmi1_init(rt_modex_t *mx)
{
    mx->ops = &pmi1_ops;
    pmi1_t *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return FERRY_ERR_NO_MEMORY;
    }
    p->fd = -1;
    mx->backend = p;
    int rc = pmi1_read_timeout(mx);
    if (rc == FERRY_OK) {
        rc = pmi1_open(mx);
    }
    if (rc == FERRY_OK) {
        rc = pmi1_join(mx);
    }
    return rc;
}
