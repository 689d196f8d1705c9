/*
 * Fuzz harness: the PMI-1 client (src/rt/modex_pmi1.c), against a server
 * whose answers are the input. The client runs as a rank does: joining the
 * job (rt_modex_init), publishing two values (one split into chunks),
 * fencing, reading another rank's values, and leaving. A thread plays the
 * server on a real connection, as the launcher would.
 *
 * The input's first byte picks how the client finds the server:
 *   0  PMI_FD, a socket pair (ferryrun's local ranks, hydra)
 *   1  PMI_PORT on 127.0.0.1, with the job's secret: the authenticated
 *      handshake (ferryrun's remote ranks)
 *   2  PMI_PORT without a secret (hydra -pmi-port)
 * The rest is what the server sends, as one stream: the client reads it as
 * the answers to its requests, one line each (a server may send ahead, and
 * a real one's answers arrive the same way). Structure-aware parts, so that
 * the fuzzer gets past the MACs: "@N" is replaced by a fresh server nonce
 * (64 hex digits) and "@S" by the proof of the secret for the connection's
 * nonces, as a genuine ferryrun would compute it; the stream waits at "@S"
 * until the client has sent its initack nonce. When the stream ends the
 * server stops writing, so that no input makes the client wait out its
 * timeout.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "fuzz.h"
#include "rt/auth.h"
#include "rt/modex.h"

extern char **environ;

static const char job_id[] = "ferry-2-00000000000000f2";
static uint8_t secret[RT_AUTH_KEY_LEN];
static int listen_fd = -1;
static int listen_port;

typedef struct server {
    int fd;        /* the connection; -1 until accepted */
    int cancel_fd; /* readable once the client is done */
    const uint8_t *data;
    size_t size, off;
    bool have_cnonce;
    uint8_t cnonce[RT_AUTH_NONCE_LEN];
    uint8_t snonce[RT_AUTH_NONCE_LEN];
    long pmiid;
    int requests; /* lines the client sent on this connection */
    char out[4096]; /* expanded bytes not yet sent */
    size_t out_len, out_off;
    char in[16384]; /* the client's requests, for its nonce */
    size_t in_len;
} server_t;

/* Takes note of what the client proves with: its nonce and pmiid. */
static void note_request(server_t *s, const char *line)
{
    const char *n = strstr(line, " nonce=");
    const char *id = strstr(line, "pmiid=");
    s->requests++;
    if (strncmp(line, "cmd=initack ", 12) == 0 && n != NULL) {
        char hex[RT_AUTH_HEX_LEN + 1];
        snprintf(hex, sizeof(hex), "%.*s", RT_AUTH_HEX_LEN, n + 7);
        s->have_cnonce = rt_auth_hex_decode(hex, s->cnonce, sizeof(s->cnonce)) == FERRY_OK;
        s->pmiid = id != NULL ? atol(id + 6) : 0;
    }
}

/* Expands the next stretch of the stream into s->out, up to an "@S" the
 * client's nonce is not known for yet. */
static void expand(server_t *s)
{
    s->out_len = s->out_off = 0;
    while (s->off < s->size && s->out_len + RT_AUTH_HEX_LEN < sizeof(s->out)) {
        const uint8_t *d = s->data + s->off;
        bool tag = d[0] == '@' && s->off + 1 < s->size;
        if (tag && (d[1] == 'N' || d[1] == 'S')) {
            char hex[RT_AUTH_HEX_LEN + 1];
            if (d[1] == 'N') {
                rt_auth_random(s->snonce, sizeof(s->snonce));
                rt_auth_hex_encode(s->snonce, sizeof(s->snonce), hex, sizeof(hex));
            } else if (s->have_cnonce) {
                uint8_t proof[RT_AUTH_MAC_LEN];
                rt_auth_pmi_proof(secret, RT_AUTH_PMI_SERVER, job_id, s->pmiid, s->cnonce,
                                  s->snonce, proof);
                rt_auth_hex_encode(proof, sizeof(proof), hex, sizeof(hex));
            } else if (s->requests > 0) {
                /* The client sent no nonce to prove anything for. */
                memset(hex, '0', RT_AUTH_HEX_LEN);
            } else {
                return; /* its initack has not come yet */
            }
            memcpy(s->out + s->out_len, hex, RT_AUTH_HEX_LEN);
            s->out_len += RT_AUTH_HEX_LEN;
            s->off += 2;
        } else {
            s->out[s->out_len++] = (char)d[0];
            s->off++;
        }
    }
}

/* Reads the client's requests; false once it has closed. */
static bool read_requests(server_t *s)
{
    ssize_t n = recv(s->fd, s->in + s->in_len, sizeof(s->in) - 1 - s->in_len, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        return false;
    }
    if (n > 0) {
        s->in_len += (size_t)n;
    }
    char *nl;
    while ((nl = memchr(s->in, '\n', s->in_len)) != NULL) {
        *nl = '\0';
        note_request(s, s->in);
        s->in_len -= (size_t)(nl + 1 - s->in);
        memmove(s->in, nl + 1, s->in_len);
    }
    if (s->in_len == sizeof(s->in) - 1) {
        s->in_len = 0; /* a request this long is not one we answer */
    }
    return true;
}

/* Serves one connection until the client closes it (or gives up). */
static void serve(server_t *s)
{
    bool shut = false;
    for (;;) {
        if (s->out_off == s->out_len) {
            expand(s);
        }
        bool pending = s->out_off < s->out_len;
        if (!pending && s->off >= s->size && !shut) {
            /* The stream is over: the launcher stops talking. */
            shutdown(s->fd, SHUT_WR);
            shut = true;
        }
        struct pollfd p[2] = {{.fd = s->fd, .events = POLLIN | (pending ? POLLOUT : 0)},
                              {.fd = s->cancel_fd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0 && errno != EINTR) {
            return;
        }
        if (p[1].revents != 0 && (p[0].revents & POLLIN) == 0) {
            return;
        }
        if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !read_requests(s)) {
            return;
        }
        if (pending && (p[0].revents & POLLOUT) != 0) {
            ssize_t n = send(s->fd, s->out + s->out_off, s->out_len - s->out_off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0 && errno != EAGAIN && errno != EINTR) {
                return;
            }
            if (n > 0) {
                s->out_off += (size_t)n;
            }
        }
    }
}

static void *server_main(void *arg)
{
    server_t *s = arg;
    if (s->fd >= 0) {
        serve(s);
        return NULL;
    }
    /* Over PMI_PORT a client told "busy" connects again; each connection
     * gets what is left of the stream, until the client is done. */
    for (;;) {
        struct pollfd p[2] = {{.fd = listen_fd, .events = POLLIN},
                              {.fd = s->cancel_fd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0 || p[1].revents != 0) {
            return NULL;
        }
        s->fd = accept(listen_fd, NULL, NULL);
        if (s->fd < 0) {
            return NULL;
        }
        s->in_len = 0;
        s->requests = 0;
        s->have_cnonce = false;
        serve(s);
        close(s->fd);
        s->fd = -1;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; i < sizeof(secret); i++) {
        secret[i] = (uint8_t)(0x5a ^ i);
    }
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t slen = sizeof(sin);
    if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
        listen(listen_fd, 16) != 0 || getsockname(listen_fd, (struct sockaddr *)&sin, &slen) != 0) {
        perror("fuzz_pmi_client: listener");
        abort();
    }
    listen_port = ntohs(sin.sin_port);
    return 0;
}

/* What a rank does with its launcher. */
static void client_script(void)
{
    rt_log_t log;
    rt_log_init(&log);
    log.level = RT_LOG_ERROR;
    rt_modex_t *mx = NULL;
    if (rt_modex_init(&log, &mx) != FERRY_OK) {
        rt_modex_fini(mx);
        return;
    }
    static unsigned char big[2500];
    memset(big, 0x5c, sizeof(big));
    int rc = rt_modex_put(mx, "a", "xyz", 3);
    if (rc == FERRY_OK) {
        rc = rt_modex_put(mx, "big.value", big, sizeof(big));
    }
    if (rc == FERRY_OK) {
        rc = rt_modex_commit(mx);
    }
    if (rc == FERRY_OK) {
        rc = rt_modex_fence(mx);
    }
    int peer = rt_modex_rank(mx) == 0 ? 1 : 0;
    static const char *const keys[] = {"a", "big.value", "a"};
    for (size_t k = 0; rc == FERRY_OK && peer < rt_modex_size(mx) && k < 3; k++) {
        void *val = NULL;
        size_t len = 0;
        int got = rt_modex_get(mx, peer, keys[k], &val, &len);
        if (got == FERRY_OK) {
            free(val);
        } else if (got != FERRY_ERR_NOT_FOUND) {
            rc = got;
        }
    }
    rt_modex_fini(mx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) {
        return 0;
    }
    if (listen_fd < 0) {
        LLVMFuzzerInitialize(NULL, NULL);
    }
    unsigned mode = data[0] % 3;
    static server_t s;
    memset(&s, 0, sizeof(s));
    s.fd = -1;
    s.data = data;
    s.size = size;
    s.off = 1;
    int cancel[2];
    if (pipe(cancel) != 0) {
        abort();
    }
    s.cancel_fd = cancel[0];
    char fd_var[32] = "", port_var[64] = "", secret_var[128];
    char hex[RT_AUTH_HEX_LEN + 1];
    rt_auth_hex_encode(secret, sizeof(secret), hex, sizeof(hex));
    snprintf(secret_var, sizeof(secret_var), "%s=%s", RT_AUTH_SECRET_ENV, hex);
    char job_var[64];
    snprintf(job_var, sizeof(job_var), "FERRY_JOB_ID=%s", job_id);
    char *env[12];
    size_t e = 0;
    int client_fd = -1;
    if (mode == 0) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
            abort();
        }
        s.fd = sv[0];
        client_fd = sv[1];
        snprintf(fd_var, sizeof(fd_var), "PMI_FD=%d", client_fd);
        env[e++] = fd_var;
        env[e++] = "PMI_RANK=0";
        env[e++] = "PMI_SIZE=2";
    } else {
        snprintf(port_var, sizeof(port_var), "PMI_PORT=127.0.0.1:%d", listen_port);
        env[e++] = port_var;
        env[e++] = "PMI_ID=1";
        if (mode == 1) {
            env[e++] = secret_var;
        }
    }
    env[e++] = job_var;
    env[e++] = "FERRY_MODEX=pmi1";
    env[e++] = "FERRY_PMI_TIMEOUT=1";
    env[e] = NULL;
    char **saved = environ;
    environ = env;

    pthread_t thread;
    if (pthread_create(&thread, NULL, server_main, &s) != 0) {
        abort();
    }
    client_script();
    /* The client closed its end (rt_modex_fini); the server sees it, or
     * the cancel pipe if it still waits to accept. */
    if (write(cancel[1], "x", 1) != 1) {
        abort();
    }
    pthread_join(thread, NULL);
    environ = saved;
    if (s.fd >= 0) {
        close(s.fd);
    }
    close(cancel[0]);
    close(cancel[1]);
    /* In mode 0 the client owns client_fd and closed it; a failed init
     * closes it too (rt_modex_fini). */
    (void)client_fd;
    return 0;
}
