/*
 * Attacks on ferryrun's PMI port (PMI_PORT), for test_attack.sh. Each
 * prints what it tried and what came back, and exits 0 when every attack
 * failed as it must, 1 when one got through.
 *
 *   fr_attack stranger HOST:PORT ID   a process outside the job claims pmiid
 *                                     ID without the secret. Refused: exit 0.
 *                                     Accepted: it goes on in the background
 *                                     as that rank, reads rank 0's values
 *                                     (btl.tcp.jobkey) as they appear, and
 *                                     the agent's exit status is 1.
 *   fr_attack replay                  runs as a remote rank (PMI_PORT, PMI_ID,
 *                                     FERRY_JOB_ID, FERRY_JOB_SECRET): tries a
 *                                     replayed, a reflected and misbound
 *                                     proofs, each on a connection of its
 *                                     own, then joins with the genuine one
 *                                     and behaves as fr_helper's "exit -1 0"
 *                                     rank (two barriers, finalize).
 *   fr_attack flood HOST:PORT N       N connections sending junk, and one
 *                                     sending 1 MiB of it, without reading.
 *   fr_attack hold HOST:PORT N FILE   N connections that say nothing, held
 *                                     open by a child (its pid in FILE) for
 *                                     up to 60 s, to keep ranks out.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "rt/auth.h"

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fr_attack: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static int connect_to(const char *addr)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || (size_t)(colon - addr) >= sizeof(host)) {
        die("'%s' is not host:port", addr);
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0) {
        die("cannot resolve %s", addr);
    }
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
        die("cannot connect to %s: %s", addr, strerror(errno));
    }
    freeaddrinfo(res);
    return fd;
}

static void send_line(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void send_line(int fd, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* A refused connection may be closed already: that is its answer. */
    (void)send(fd, line, (size_t)n, MSG_NOSIGNAL);
}

/* Reads one line within 10 s; false at end of file or on timeout. */
static bool recv_line(int fd, char *buf, size_t size)
{
    size_t n = 0;
    while (n + 1 < size) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 10000) <= 0) {
            return false;
        }
        char c;
        ssize_t r = read(fd, &c, 1);
        if (r <= 0) {
            return false;
        }
        if (c == '\n') {
            break;
        }
        buf[n++] = c;
    }
    buf[n] = '\0';
    return true;
}

static bool field_hex(const char *line, const char *key, uint8_t out[RT_AUTH_NONCE_LEN])
{
    const char *at = strstr(line, key);
    char hex[RT_AUTH_HEX_LEN + 1];
    if (at == NULL) {
        return false;
    }
    at += strlen(key);
    size_t n = strspn(at, "0123456789abcdef");
    if (n != RT_AUTH_HEX_LEN) {
        return false;
    }
    memcpy(hex, at, n);
    hex[n] = '\0';
    return rt_auth_hex_decode(hex, out, RT_AUTH_NONCE_LEN) == FERRY_OK;
}

/* ---- stranger ---------------------------------------------------------- */

/* Accepted as a rank: reads what it can of rank 0's values, the way a
 * process that took a rank's place would, until the job closes it. */
static void stranger_inside(int fd)
{
    char line[8192];
    char kvs[256] = "";
    while (recv_line(fd, line, sizeof(line)) && strncmp(line, "cmd=set debug", 13) != 0) {
    }
    send_line(fd, "cmd=init pmi_version=1 pmi_subversion=1\n");
    recv_line(fd, line, sizeof(line));
    send_line(fd, "cmd=get_my_kvsname\n");
    if (recv_line(fd, line, sizeof(line))) {
        const char *k = strstr(line, "kvsname=");
        if (k != NULL) {
            snprintf(kvs, sizeof(kvs), "%.*s", (int)strcspn(k + 8, " "), k + 8);
        }
    }
    /* Both namings of rank 0's first revision of the tcp job key. */
    static const char *const keys[] = {"h0_0_btl.tcp.jobkey", "0.h0.btl.tcp.jobkey"};
    for (int round = 0; round < 200; round++) {
        for (size_t k = 0; k < 2; k++) {
            send_line(fd, "cmd=get kvsname=%s key=%s\n", kvs, keys[k]);
            if (!recv_line(fd, line, sizeof(line))) {
                return;
            }
            if (strstr(line, "rc=0") != NULL) {
                printf("stranger: read rank 0's %s: %s\n", keys[k], line);
                fflush(stdout);
                return;
            }
        }
        usleep(50000);
    }
}

static int mode_stranger(const char *addr, const char *id)
{
    int fd = connect_to(addr);
    char line[4096];
    send_line(fd, "cmd=initack pmiid=%s\n", id);
    if (!recv_line(fd, line, sizeof(line))) {
        printf("stranger: the connection was closed without an answer\n");
        return 0;
    }
    if (strstr(line, "rc=-1") != NULL) {
        printf("stranger: refused: %s\n", line);
        /* Nothing more comes: the server closed. */
        char rest[64];
        if (recv_line(fd, rest, sizeof(rest))) {
            printf("stranger: but the server still speaks: %s\n", rest);
            return 1;
        }
        return 0;
    }
    printf("stranger: ACCEPTED as pmiid %s: %s\n", id, line);
    fflush(stdout);
    /* Let the real rank start (and be refused); stay as the impostor. */
    pid_t pid = fork();
    if (pid == 0) {
        stranger_inside(fd);
        _exit(0);
    }
    return 1;
}

/* ---- replay ------------------------------------------------------------ */

typedef struct job_env {
    const char *port;
    const char *job;
    long id;
    uint8_t secret[RT_AUTH_KEY_LEN];
} job_env_t;

/* Opens a connection, sends an authenticated initack with cnonce and
 * returns the server's challenge nonce. */
static int open_challenged(const job_env_t *je, long claim, const uint8_t cnonce[32],
                           uint8_t snonce_out[32])
{
    char hex[RT_AUTH_HEX_LEN + 1];
    char line[4096];
    rt_auth_hex_encode(cnonce, 32, hex, sizeof(hex));
    int fd = connect_to(je->port);
    send_line(fd, "cmd=initack pmiid=%ld auth=%s nonce=%s\n", claim, RT_AUTH_PMI_METHOD, hex);
    if (!recv_line(fd, line, sizeof(line))) {
        die("no answer to an authenticated initack");
    }
    if (strncmp(line, "cmd=auth_challenge rc=0 ", 24) != 0 ||
        !field_hex(line, "nonce=", snonce_out)) {
        printf("replay: ACCEPTED without any proof: '%s'\n", line);
        exit(1);
    }
    return fd;
}

/* Sends a proof and checks that it is refused and the connection closed. */
static bool expect_refused(int fd, const char *what, const char *proof_text)
{
    char line[4096];
    send_line(fd, "cmd=auth_response proof=%s\n", proof_text);
    bool got = recv_line(fd, line, sizeof(line));
    bool refused = got && strncmp(line, "cmd=initack rc=-1", 17) == 0;
    char extra[64];
    bool closed = !recv_line(fd, extra, sizeof(extra));
    close(fd);
    printf("replay: %s: %s%s\n", what, got ? line : "(closed)",
           refused && closed ? "" : "  <-- NOT REFUSED");
    return refused && closed;
}

static bool attack_with_proof(const job_env_t *je, const char *what, long claim,
                              const uint8_t key[32], rt_auth_pmi_role_t role, const char *job,
                              long id)
{
    uint8_t cn[32], sn[32], proof[32];
    char hex[RT_AUTH_HEX_LEN + 1];
    rt_auth_random(cn, sizeof(cn));
    int fd = open_challenged(je, claim, cn, sn);
    rt_auth_pmi_proof(key, role, job, id, cn, sn, proof);
    rt_auth_hex_encode(proof, sizeof(proof), hex, sizeof(hex));
    return expect_refused(fd, what, hex);
}

static void rank_call(int fd, const char *req, const char *expect)
{
    char line[4096];
    send_line(fd, "%s", req);
    if (!recv_line(fd, line, sizeof(line)) || strncmp(line, expect, strlen(expect)) != 0) {
        die("answer to '%s' is not '%s'", req, expect);
    }
}

static int mode_replay(void)
{
    job_env_t je;
    const char *id = getenv("PMI_ID");
    const char *secret = getenv(RT_AUTH_SECRET_ENV);
    je.port = getenv("PMI_PORT");
    je.job = getenv("FERRY_JOB_ID");
    if (id == NULL || secret == NULL || je.port == NULL || je.job == NULL) {
        die("run me as a remote rank of ferryrun (PMI_PORT, PMI_ID, FERRY_JOB_ID, %s)",
            RT_AUTH_SECRET_ENV);
    }
    je.id = atol(id);
    if (rt_auth_hex_decode(secret, je.secret, sizeof(je.secret)) != FERRY_OK) {
        die("%s is not a secret", RT_AUTH_SECRET_ENV);
    }
    bool ok = true;

    /* The genuine exchange, left waiting for its answer: its proof is what
     * an eavesdropper would capture. */
    uint8_t cn[32], sn_a[32], sn_b[32], proof_a[32], sproof[32];
    char hex[RT_AUTH_HEX_LEN + 1];
    rt_auth_random(cn, sizeof(cn));
    int a = open_challenged(&je, je.id, cn, sn_a);
    rt_auth_pmi_proof(je.secret, RT_AUTH_PMI_CLIENT, je.job, je.id, cn, sn_a, proof_a);
    rt_auth_hex_encode(proof_a, sizeof(proof_a), hex, sizeof(hex));

    /* Replayed: the same client nonce and the captured proof on a new
     * connection, which gets a new challenge. */
    int b = open_challenged(&je, je.id, cn, sn_b);
    ok &= expect_refused(b, "captured proof replayed on a new connection", hex);
    /* Reflected: the server's own kind of proof sent back as the client's. */
    uint8_t other[32];
    memcpy(other, je.secret, sizeof(other));
    other[0] ^= 1;
    ok &= attack_with_proof(&je, "server proof reflected as the client's", je.id, je.secret,
                            RT_AUTH_PMI_SERVER, je.job, je.id);
    ok &= attack_with_proof(&je, "proof made for another job", je.id, je.secret,
                            RT_AUTH_PMI_CLIENT, "ferry-1-0000000000000000", je.id);
    ok &= attack_with_proof(&je, "proof made for another pmiid", je.id, je.secret,
                            RT_AUTH_PMI_CLIENT, je.job, je.id ^ 1);
    ok &= attack_with_proof(&je, "proof made with a wrong secret", je.id, other,
                            RT_AUTH_PMI_CLIENT, je.job, je.id);
    {
        uint8_t cn2[32], sn2[32];
        rt_auth_random(cn2, sizeof(cn2));
        int fd = open_challenged(&je, je.id, cn2, sn2);
        ok &= expect_refused(fd, "a proof that is not hex", "zz");
    }
    {
        int fd = connect_to(je.port);
        char line[4096];
        send_line(fd, "cmd=initack pmiid=%ld\n", je.id);
        bool refused = recv_line(fd, line, sizeof(line)) && strstr(line, "rc=-1") != NULL;
        printf("replay: plain initack without proof: %s%s\n", line,
               refused ? "" : "  <-- NOT REFUSED");
        ok &= refused;
        close(fd);
    }

    /* The genuine answer on its own connection is accepted, and the
     * server proves itself in turn. */
    char line[4096];
    send_line(a, "cmd=auth_response proof=%s\n", hex);
    if (!recv_line(a, line, sizeof(line)) || strncmp(line, "cmd=initack rc=0 ", 17) != 0 ||
        !field_hex(line, "proof=", sproof)) {
        die("the genuine proof was not accepted: '%s'", line);
    }
    uint8_t expect[32];
    rt_auth_pmi_proof(je.secret, RT_AUTH_PMI_SERVER, je.job, je.id, cn, sn_a, expect);
    if (!rt_auth_equal(expect, sproof, sizeof(expect))) {
        die("the server's proof is wrong");
    }
    printf("replay: the genuine proof was accepted and the server proved itself\n");
    for (int i = 0; i < 3; i++) {
        if (!recv_line(a, line, sizeof(line)) || strncmp(line, "cmd=set ", 8) != 0) {
            die("expected cmd=set after initack, got '%s'", line);
        }
    }
    rank_call(a, "cmd=init pmi_version=1 pmi_subversion=1\n", "cmd=response_to_init");
    rank_call(a, "cmd=barrier_in\n", "cmd=barrier_out");
    rank_call(a, "cmd=barrier_in\n", "cmd=barrier_out");
    rank_call(a, "cmd=finalize\n", "cmd=finalize_ack");
    printf("replay: %s\n", ok ? "every attack was refused" : "AN ATTACK GOT THROUGH");
    return ok ? 0 : 1;
}

/* ---- flood ------------------------------------------------------------- */

static int mode_flood(const char *addr, int n)
{
    static const char *const junk[] = {
        "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "cmd=initack pmiid=-1\n",
        "cmd=initack pmiid=1 auth=md5 nonce=00\n",
        "cmd=get kvsname=x key=y\n",
        "\x01\x02\x03 binary junk\n",
    };
    for (int i = 0; i < n; i++) {
        int fd = connect_to(addr);
        const char *j = junk[i % (int)(sizeof(junk) / sizeof(junk[0]))];
        (void)send(fd, j, strlen(j), MSG_NOSIGNAL);
        close(fd);
    }
    /* 1 MiB of junk lines on one connection, never reading an answer. */
    int fd = connect_to(addr);
    char block[65536];
    for (size_t i = 0; i < sizeof(block); i++) {
        block[i] = i % 16 == 15 ? '\n' : "junk junk junk!"[i % 16];
    }
    size_t sent = 0;
    while (sent < ((size_t)1 << 20)) {
        ssize_t w = send(fd, block, sizeof(block), MSG_NOSIGNAL);
        if (w <= 0) {
            break; /* closed on us: the expected end */
        }
        sent += (size_t)w;
    }
    close(fd);
    printf("flood: %d junk connections and %zu bytes of junk sent\n", n, sent);
    return 0;
}

static int mode_hold(const char *addr, int n, const char *pid_file)
{
    int *fds = calloc((size_t)n, sizeof(int));
    if (fds == NULL) {
        die("out of memory");
    }
    for (int i = 0; i < n; i++) {
        fds[i] = connect_to(addr);
    }
    /* The server accepts at its pace; make sure it has seen them all. */
    usleep(300000);
    pid_t pid = fork();
    if (pid < 0) {
        die("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        sleep(60);
        _exit(0);
    }
    FILE *f = fopen(pid_file, "w");
    if (f != NULL) {
        fprintf(f, "%ld\n", (long)pid);
        fclose(f);
    }
    for (int i = 0; i < n; i++) {
        close(fds[i]); /* the child holds its copies */
    }
    free(fds);
    printf("hold: %d silent connections held open\n", n);
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 4 && strcmp(argv[1], "stranger") == 0) {
        return mode_stranger(argv[2], argv[3]);
    }
    if (argc >= 2 && strcmp(argv[1], "replay") == 0) {
        return mode_replay();
    }
    if (argc >= 4 && strcmp(argv[1], "flood") == 0) {
        return mode_flood(argv[2], atoi(argv[3]));
    }
    if (argc >= 5 && strcmp(argv[1], "hold") == 0) {
        return mode_hold(argv[2], atoi(argv[3]), argv[4]);
    }
    die("usage: fr_attack stranger HOST:PORT ID | replay | flood HOST:PORT N | "
        "hold HOST:PORT N FILE");
}
