/*
 * The pmi1 client against a fake PMI server that misbehaves: garbage,
 * unprintable or endless lines, wrong answers, refusals, silence, a closed
 * connection, corrupt stored values. Each must give the documented error
 * (FERRY_ERR_PROTO for malformed answers, FERRY_ERR_LAUNCHER for a server
 * that refuses, closes or stays silent) with a message, never a crash or a
 * hang. The server is a forked child on one end of a socketpair; the client
 * finds the other end in PMI_FD, as under a real launcher.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "../unit/capture.h"
#include "../unit/check.h"
#include "rt/modex.h"

/* One step of the fake server: wait for a request starting with expect
 * (NULL: do not wait), then send reply (len bytes, or strlen when 0). */
typedef struct step {
    const char *expect;
    const char *reply;
    size_t len;
} step_t;

#define HELLO                                                                                  \
    {"cmd=init ", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n", 0},             \
        {"cmd=get_maxes", "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n", 0},      \
        {"cmd=get_my_kvsname", "cmd=my_kvsname kvsname=kvs_42_0\n", 0}

/* The probe for a newer revision of rank 1's key "k", which does not exist. */
#define NO_REV1 {"cmd=get kvsname=kvs_42_0 key=1.h1.k", "cmd=get_result rc=-1 msg=not_found\n", 0}

typedef struct server {
    pid_t pid;
    bool linger; /* stays until killed */
    int fd; /* the client's end */
} server_t;

/* Reads one line from fd into buf; false at end of file. */
static bool read_line(int fd, char *buf, size_t size)
{
    size_t n = 0;
    while (n + 1 < size) {
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

/* The child: plays the steps, then either closes (linger false) or stays
 * silent until killed. Exits 3 when a request was not the one expected. */
static void serve(int fd, const step_t *steps, size_t n_steps, bool linger)
{
    for (size_t i = 0; i < n_steps; i++) {
        if (steps[i].expect != NULL) {
            char line[4096];
            if (!read_line(fd, line, sizeof(line))) {
                _exit(2);
            }
            if (strncmp(line, steps[i].expect, strlen(steps[i].expect)) != 0) {
                fprintf(stderr, "fake server: got '%s', expected '%s'\n", line, steps[i].expect);
                _exit(3);
            }
        }
        if (steps[i].reply != NULL) {
            size_t len = steps[i].len > 0 ? steps[i].len : strlen(steps[i].reply);
            if (write(fd, steps[i].reply, len) != (ssize_t)len) {
                _exit(4);
            }
        }
    }
    while (linger) {
        pause();
    }
    _exit(0);
}

static server_t server_start(const step_t *steps, size_t n_steps, bool linger)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    server_t s = {.fd = sv[0], .linger = linger};
    s.pid = fork();
    CHECK(s.pid >= 0);
    if (s.pid == 0) {
        close(sv[0]);
        serve(sv[1], steps, n_steps, linger);
    }
    close(sv[1]);
    char num[16];
    snprintf(num, sizeof(num), "%d", sv[0]);
    setenv("PMI_FD", num, 1);
    setenv("PMI_RANK", "0", 1);
    setenv("PMI_SIZE", "2", 1);
    return s;
}

/* Ends the server: kills one that lingers, waits for one that ends by
 * itself. Returns its exit status, -1 when it was killed. */
static int server_stop(server_t *s)
{
    int st = 0;
    if (s->linger) {
        (void)kill(s->pid, SIGKILL);
    }
    CHECK(waitpid(s->pid, &st, 0) == s->pid);
    /* The client's end belongs to the modex once PMI_FD is accepted: its
     * fini closes it, after a failed init too. */
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* rt_modex_init against the steps must fail with want, logging a message
 * that contains needle. */
static void expect_init_fails(const char *name, const step_t *steps, size_t n, int want,
                              const char *needle)
{
    server_t s = server_start(steps, n, true);
    rt_modex_t *mx = NULL;
    capture_t cap;
    capture_begin(&cap);
    int rc = rt_modex_init(NULL, &mx);
    const char *text = capture_end(&cap);
    if (rc != want || strstr(text, needle) == NULL) {
        fprintf(stderr, "case %s: got %s, wanted %s with '%s' logged\n", name,
                ferry_strerror(rc), ferry_strerror(want), needle);
    }
    CHECK(rc == want);
    CHECK(mx == NULL);
    CHECK(strstr(text, needle) != NULL);
    server_stop(&s);
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void test_bad_init(void)
{
    const step_t garbage[] = {{"cmd=init ", "hello world\n", 0}};
    expect_init_fails("garbage", garbage, N(garbage), FERRY_ERR_PROTO, "not key=value");

    const step_t wrong_cmd[] = {{"cmd=init ", "cmd=maxes rc=0\n", 0}};
    expect_init_fails("wrong cmd", wrong_cmd, N(wrong_cmd), FERRY_ERR_PROTO,
                      "expected cmd=response_to_init");

    const step_t no_cmd[] = {{"cmd=init ", "rc=0 cmd=response_to_init\n", 0}};
    expect_init_fails("no cmd", no_cmd, N(no_cmd), FERRY_ERR_PROTO, "start with cmd=");

    const step_t binary[] = {{"cmd=init ", "cmd=response_to_init\x01\xff rc=0\n", 0}};
    expect_init_fails("unprintable", binary, N(binary), FERRY_ERR_PROTO, "unprintable");

    static const char nul_line[] = "cmd=response_to_init\0 rc=0\n";
    const step_t nul[] = {{"cmd=init ", nul_line, sizeof(nul_line) - 1}};
    expect_init_fails("nul", nul, N(nul), FERRY_ERR_PROTO, "NUL");

    char *endless = malloc(100000);
    CHECK(endless != NULL);
    memset(endless, 'x', 100000);
    const step_t longline[] = {{"cmd=init ", endless, 100000}};
    expect_init_fails("endless line", longline, N(longline), FERRY_ERR_PROTO, "longer than");
    free(endless);

    const step_t refused[] = {
        {"cmd=init ", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1 msg=go_away\n",
         0}};
    expect_init_fails("refused", refused, N(refused), FERRY_ERR_LAUNCHER, "go_away");

    const step_t version[] = {
        {"cmd=init ", "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n", 0}};
    expect_init_fails("version", version, N(version), FERRY_ERR_LAUNCHER, "version 2");

    const step_t bad_num[] = {
        {"cmd=init ", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n", 0},
        {"cmd=get_maxes", "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=lots\n", 0}};
    expect_init_fails("bad number", bad_num, N(bad_num), FERRY_ERR_PROTO, "vallen_max='lots'");

    const step_t missing[] = {
        {"cmd=init ", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n", 0},
        {"cmd=get_maxes", "cmd=maxes kvsname_max=256 vallen_max=1024\n", 0}};
    expect_init_fails("missing field", missing, N(missing), FERRY_ERR_PROTO, "lacks keylen_max");

    const step_t tiny[] = {
        {"cmd=init ", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n", 0},
        {"cmd=get_maxes", "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=10\n", 0},
        {"cmd=get_my_kvsname", "cmd=my_kvsname kvsname=kvs_42_0\n", 0}};
    expect_init_fails("tiny limits", tiny, N(tiny), FERRY_ERR_LAUNCHER, "too small");

    const step_t no_kvs[] = {
        {"cmd=init ", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n", 0},
        {"cmd=get_maxes", "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n", 0},
        {"cmd=get_my_kvsname", "cmd=my_kvsname\n", 0}};
    expect_init_fails("no kvsname", no_kvs, N(no_kvs), FERRY_ERR_PROTO, "kvsname is missing");

    /* The server closes at once. */
    server_t s = server_start(NULL, 0, false);
    rt_modex_t *mx = NULL;
    CHECK(rt_modex_init(NULL, &mx) == FERRY_ERR_LAUNCHER);
    server_stop(&s);

    /* The server stays silent: the timeout ends the wait. */
    setenv("FERRY_PMI_TIMEOUT", "1", 1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    expect_init_fails("silent", NULL, 0, FERRY_ERR_LAUNCHER, "did not answer");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(t1.tv_sec - t0.tv_sec < 10);
    unsetenv("FERRY_PMI_TIMEOUT");
}

static void test_bad_env(void)
{
    const step_t none[] = {{NULL, NULL, 0}};
    struct {
        const char *var;
        const char *value;
        int want;
    } cases[] = {
        {"PMI_RANK", "2", FERRY_ERR_LAUNCHER},  {"PMI_RANK", "-1", FERRY_ERR_LAUNCHER},
        {"PMI_SIZE", "0", FERRY_ERR_LAUNCHER},  {"PMI_SIZE", "two", FERRY_ERR_LAUNCHER},
        {"PMI_FD", "abc", FERRY_ERR_LAUNCHER},  {"PMI_FD", "987", FERRY_ERR_LAUNCHER},
        {"FERRY_PMI_TIMEOUT", "0", FERRY_ERR_INVALID},
        {"FERRY_PMI_TIMEOUT", "soon", FERRY_ERR_INVALID},
    };
    for (size_t i = 0; i < N(cases); i++) {
        server_t s = server_start(none, N(none), true);
        setenv(cases[i].var, cases[i].value, 1);
        rt_modex_t *mx = NULL;
        capture_t cap;
        capture_begin(&cap);
        int rc = rt_modex_init(NULL, &mx);
        const char *text = capture_end(&cap);
        CHECK(rc == cases[i].want);
        CHECK(strstr(text, cases[i].var) != NULL);
        server_stop(&s);
        /* Refused before PMI_FD was taken over, so still ours to close. */
        CHECK(close(s.fd) == 0);
        unsetenv("FERRY_PMI_TIMEOUT");
    }
    unsetenv("PMI_FD");
    setenv("FERRY_MODEX", "pmi1", 1);
    setenv("PMI_PORT", "nocolon", 1);
    setenv("PMI_ID", "0", 1);
    rt_modex_t *mx = NULL;
    CHECK(rt_modex_init(NULL, &mx) == FERRY_ERR_LAUNCHER);
    setenv("PMI_PORT", "127.0.0.1:1", 1); /* nothing listens on port 1 */
    CHECK(rt_modex_init(NULL, &mx) == FERRY_ERR_LAUNCHER);
    unsetenv("PMI_PORT");
    unsetenv("PMI_ID");
    unsetenv("FERRY_MODEX");
}

/* A good join, then corrupt values for rank 1's key "k". */
static void expect_get_fails(const char *name, const step_t *gets, size_t n_gets, int want)
{
    step_t steps[16] = {HELLO};
    size_t n = 3;
    for (size_t i = 0; i < n_gets; i++) {
        steps[n++] = gets[i];
    }
    steps[n++] = (step_t){"cmd=finalize", "cmd=finalize_ack\n", 0};
    server_t s = server_start(steps, n, false);
    rt_modex_t *mx = NULL;
    CHECK(rt_modex_init(NULL, &mx) == FERRY_OK);
    CHECK(strcmp(rt_modex_backend(mx), "pmi1") == 0);
    CHECK(strcmp(rt_modex_job_id(mx), "kvs_42_0") == 0);
    CHECK(rt_modex_rank(mx) == 0 && rt_modex_size(mx) == 2);
    void *val = (void *)0x1;
    size_t len = 77;
    int rc = rt_modex_get(mx, 1, "k", &val, &len);
    if (rc != want) {
        fprintf(stderr, "case %s: got %s, wanted %s\n", name, ferry_strerror(rc),
                ferry_strerror(want));
    }
    CHECK(rc == want);
    CHECK(val == (void *)0x1 && len == 77);
    rt_modex_fini(mx);
    /* The server saw every request it expected, finalize included, unless
     * the stream broke, in which case no finalize is sent. */
    int st = server_stop(&s);
    CHECK(st == 0 || st == -1 || st == 2);
}

static void test_bad_values(void)
{
    const step_t not_found[] = {
        {"cmd=get kvsname=kvs_42_0 key=1.h0.k", "cmd=get_result rc=-1 msg=key_not_found\n", 0}};
    expect_get_fails("not found", not_found, N(not_found), FERRY_ERR_NOT_FOUND);

    const step_t bad_header[] = {
        {"cmd=get kvsname=kvs_42_0 key=1.h0.k", "cmd=get_result rc=0 value=zz.1.k\n", 0},
        NO_REV1};
    expect_get_fails("bad header", bad_header, N(bad_header), FERRY_ERR_PROTO);

    const step_t other_key[] = {
        {"cmd=get kvsname=kvs_42_0 key=1.h0.k", "cmd=get_result rc=0 value=1.3.j\n", 0},
        NO_REV1};
    expect_get_fails("other key", other_key, N(other_key), FERRY_ERR_PROTO);

    const step_t huge[] = {
        {"cmd=get kvsname=kvs_42_0 key=1.h0.k",
         "cmd=get_result rc=0 value=1.99999999999999999999.k\n", 0},
        NO_REV1};
    expect_get_fails("huge", huge, N(huge), FERRY_ERR_PROTO);

    const step_t no_value[] = {{"cmd=get kvsname=kvs_42_0 key=1.h0.k", "cmd=get_result rc=0\n", 0}};
    expect_get_fails("no value", no_value, N(no_value), FERRY_ERR_PROTO);

    const step_t lost_chunk[] = {
        {"cmd=get kvsname=kvs_42_0 key=1.h0.k", "cmd=get_result rc=0 value=1.3.k\n", 0},
        NO_REV1,
        {"cmd=get kvsname=kvs_42_0 key=1.c0.0.k", "cmd=get_result rc=-1 msg=key_not_found\n", 0}};
    expect_get_fails("lost chunk", lost_chunk, N(lost_chunk), FERRY_ERR_PROTO);

    const step_t bad_chars[] = {
        {"cmd=get kvsname=kvs_42_0 key=1.h0.k", "cmd=get_result rc=0 value=1.3.k\n", 0},
        NO_REV1,
        {"cmd=get kvsname=kvs_42_0 key=1.c0.0.k", "cmd=get_result rc=0 value=ab!d\n", 0}};
    expect_get_fails("bad chars", bad_chars, N(bad_chars), FERRY_ERR_PROTO);

    const step_t long_chunk[] = {
        {"cmd=get kvsname=kvs_42_0 key=1.h0.k", "cmd=get_result rc=0 value=1.3.k\n", 0},
        NO_REV1,
        {"cmd=get kvsname=kvs_42_0 key=1.c0.0.k", "cmd=get_result rc=0 value=abcdefgh\n", 0}};
    expect_get_fails("long chunk", long_chunk, N(long_chunk), FERRY_ERR_PROTO);

    /* And a good one: "abcd" is the encoding of the three bytes below. */
    step_t steps[] = {
        HELLO,
        {"cmd=get kvsname=kvs_42_0 key=1.h0.k", "cmd=get_result rc=0 value=1.3.k\n", 0},
        NO_REV1,
        {"cmd=get kvsname=kvs_42_0 key=1.c0.0.k", "cmd=get_result rc=0 value=abcd\n", 0},
        {"cmd=finalize", "cmd=finalize_ack\n", 0},
    };
    server_t s = server_start(steps, N(steps), false);
    rt_modex_t *mx = NULL;
    CHECK(rt_modex_init(NULL, &mx) == FERRY_OK);
    void *val = NULL;
    size_t len = 0;
    CHECK(rt_modex_get(mx, 1, "k", &val, &len) == FERRY_OK);
    CHECK(len == 3);
    CHECK(memcmp(val, "\x69\xb7\x1d", 3) == 0);
    free(val);
    rt_modex_fini(mx);
    CHECK(server_stop(&s) == 0);

    /* Revision 1 replaces revision 0; its single byte encodes to "AQ". */
    step_t rev_steps[] = {
        HELLO,
        {"cmd=get kvsname=kvs_42_0 key=1.h0.k", "cmd=get_result rc=0 value=1.3.k\n", 0},
        {"cmd=get kvsname=kvs_42_0 key=1.h1.k", "cmd=get_result rc=0 value=1.1.k\n", 0},
        /* Steps double (3 is 1 + 2), then halve between found and missing. */
        {"cmd=get kvsname=kvs_42_0 key=1.h3.k", "cmd=get_result rc=-1 msg=not_found\n", 0},
        {"cmd=get kvsname=kvs_42_0 key=1.h2.k", "cmd=get_result rc=-1 msg=not_found\n", 0},
        {"cmd=get kvsname=kvs_42_0 key=1.c1.0.k", "cmd=get_result rc=0 value=AQ\n", 0},
        /* The second get starts from the revision it saw. */
        {"cmd=get kvsname=kvs_42_0 key=1.h2.k", "cmd=get_result rc=-1 msg=not_found\n", 0},
        {"cmd=get kvsname=kvs_42_0 key=1.c1.0.k", "cmd=get_result rc=0 value=AQ\n", 0},
        {"cmd=finalize", "cmd=finalize_ack\n", 0},
    };
    s = server_start(rev_steps, N(rev_steps), false);
    CHECK(rt_modex_init(NULL, &mx) == FERRY_OK);
    for (int i = 0; i < 2; i++) {
        CHECK(rt_modex_get(mx, 1, "k", &val, &len) == FERRY_OK);
        CHECK(len == 1 && ((unsigned char *)val)[0] == 1);
        free(val);
    }
    rt_modex_fini(mx);
    CHECK(server_stop(&s) == 0);
}

/* A fake server whose rank 1 published revisions 0..top of key "k" (each
 * one byte, 0x01): it answers the handshake, every get by that rule, and a
 * finalize. Exits with the number of gets it served (250 at most), or 251
 * on a request it did not expect. */
static void serve_revisions(int fd, long top)
{
    static const char *const hello[] = {
        "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
        "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
        "cmd=my_kvsname kvsname=kvs_42_0\n",
    };
    int gets = 0;
    char line[4096];
    for (size_t i = 0; i < 3; i++) {
        if (!read_line(fd, line, sizeof(line)) || write(fd, hello[i], strlen(hello[i])) < 0) {
            _exit(251);
        }
    }
    while (read_line(fd, line, sizeof(line))) {
        long v = -1;
        char tail[8];
        const char *reply = "cmd=get_result rc=-1 msg=not_found\n";
        if (strncmp(line, "cmd=finalize", 12) == 0) {
            (void)write(fd, "cmd=finalize_ack\n", 17);
            _exit(gets < 250 ? gets : 250);
        }
        if (sscanf(line, "cmd=get kvsname=kvs_42_0 key=1.h%ld.%7s", &v, tail) == 2) {
            if (v >= 0 && v <= top) {
                reply = "cmd=get_result rc=0 value=1.1.k\n";
            }
        } else if (sscanf(line, "cmd=get kvsname=kvs_42_0 key=1.c%ld.0.%7s", &v, tail) == 2) {
            if (v == top) {
                reply = "cmd=get_result rc=0 value=AQ\n";
            }
        } else {
            fprintf(stderr, "fake server: unexpected '%s'\n", line);
            _exit(251);
        }
        gets++;
        if (write(fd, reply, strlen(reply)) < 0) {
            _exit(251);
        }
    }
    _exit(251);
}

/* However many revisions a rank published, a reader finds the newest in a
 * number of probes that grows with the logarithm of their count: one rank
 * publishing a million revisions must not make every reader ask a million
 * times. */
static void test_many_revisions(void)
{
    static const long tops[] = {0, 1, 2, 1000, 777777, 999999};
    for (size_t t = 0; t < sizeof(tops) / sizeof(tops[0]); t++) {
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            close(sv[0]);
            serve_revisions(sv[1], tops[t]);
        }
        close(sv[1]);
        char num[16];
        snprintf(num, sizeof(num), "%d", sv[0]);
        setenv("PMI_FD", num, 1);
        setenv("PMI_RANK", "0", 1);
        setenv("PMI_SIZE", "2", 1);
        rt_modex_t *mx = NULL;
        void *val = NULL;
        size_t len = 0;
        CHECK(rt_modex_init(NULL, &mx) == FERRY_OK);
        CHECK(rt_modex_get(mx, 1, "k", &val, &len) == FERRY_OK);
        CHECK(len == 1 && ((unsigned char *)val)[0] == 1);
        free(val);
        rt_modex_fini(mx);
        int st = 0;
        CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
        int gets = WEXITSTATUS(st);
        printf("revisions 0..%ld: found the newest in %d gets\n", tops[t], gets);
        /* Doubling up to 2^20 > 999999 and halving back: 2 * 20, plus the
         * first header and the chunk. */
        CHECK(gets <= 42);
    }
}

/* A listener on 127.0.0.1 for PMI_PORT tests; its port into *port_out. */
static int listen_local(int *port_out)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0 && listen(fd, 4) == 0);
    CHECK(getsockname(fd, (struct sockaddr *)&sin, &len) == 0);
    *port_out = ntohs(sin.sin_port);
    return fd;
}

/* Accepts within 2 s; -1 when nobody connects. */
static int accept_within(int lfd)
{
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    return poll(&p, 1, 2000) == 1 ? accept(lfd, NULL, NULL) : -1;
}

/* The server refuses the first connection's initack with reason, then
 * serves a second one if it comes. The child exits 0 when the second came
 * and was served, 10 when none came. */
static pid_t serve_refusal_then_job(int lfd, const char *reason)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid != 0) {
        return pid;
    }
    char line[4096], reply[256];
    int c1 = accept_within(lfd);
    if (c1 < 0 || !read_line(c1, line, sizeof(line))) {
        _exit(2);
    }
    snprintf(reply, sizeof(reply), "cmd=initack rc=-1 msg=%s\n", reason);
    (void)write(c1, reply, strlen(reply));
    close(c1);
    int c2 = accept_within(lfd);
    if (c2 < 0) {
        _exit(10);
    }
    const step_t steps[] = {
        {"cmd=initack pmiid=1",
         "cmd=initack rc=0\ncmd=set size=2\ncmd=set rank=1\ncmd=set debug=0\n", 0},
        HELLO,
        {"cmd=finalize", "cmd=finalize_ack\n", 0},
    };
    serve(c2, steps, N(steps), false);
    _exit(0);
}

/* ferryrun closes the oldest connection that has not proved itself when
 * strangers fill its slots, saying msg=busy: the client connects again and
 * gets in. Any other refusal is final: no second connection. */
static void test_busy_retry(void)
{
    int port = 0;
    int lfd = listen_local(&port);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    unsetenv("PMI_FD");
    setenv("PMI_PORT", addr, 1);
    setenv("PMI_ID", "1", 1);

    pid_t pid = serve_refusal_then_job(lfd, "busy");
    rt_modex_t *mx = NULL;
    capture_t cap;
    capture_begin(&cap);
    int rc = rt_modex_init(NULL, &mx);
    const char *text = capture_end(&cap);
    CHECK(rc == FERRY_OK);
    CHECK(rt_modex_rank(mx) == 1 && rt_modex_size(mx) == 2);
    CHECK(strstr(text, "busy") != NULL && strstr(text, "trying again") != NULL);
    rt_modex_fini(mx);
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);

    pid = serve_refusal_then_job(lfd, "pmiid_already_connected");
    mx = NULL;
    CHECK(rt_modex_init(NULL, &mx) == FERRY_ERR_LAUNCHER);
    CHECK(mx == NULL);
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 10);
    close(lfd);
    unsetenv("PMI_PORT");
    unsetenv("PMI_ID");
}

/* A put the server refuses is FERRY_ERR_LAUNCHER with its message; the
 * connection stays usable. */
static void test_refused_put(void)
{
    step_t steps[] = {
        HELLO,
        {"cmd=put kvsname=kvs_42_0 key=0.c0.0.k value=eHk", "cmd=put_result rc=0\n", 0},
        {"cmd=put kvsname=kvs_42_0 key=0.h0.k value=1.2.k",
         "cmd=put_result rc=-1 msg=kvs_full\n", 0},
        {"cmd=barrier_in", "cmd=barrier_out\n", 0},
        {"cmd=finalize", "cmd=finalize_ack\n", 0},
    };
    server_t s = server_start(steps, N(steps), false);
    rt_modex_t *mx = NULL;
    CHECK(rt_modex_init(NULL, &mx) == FERRY_OK);
    CHECK(rt_modex_put(mx, "k", "xy", 2) == FERRY_OK);
    capture_t cap;
    capture_begin(&cap);
    int rc = rt_modex_commit(mx);
    const char *text = capture_end(&cap);
    CHECK(rc == FERRY_ERR_LAUNCHER);
    CHECK(strstr(text, "kvs_full") != NULL);
    CHECK(rt_modex_fence(mx) == FERRY_OK);
    rt_modex_fini(mx);
    CHECK(server_stop(&s) == 0);
}

int main(void)
{
    alarm(120);
    unsetenv("FERRY_MODEX");
    unsetenv("PMI_PORT");
    unsetenv("FERRY_PMI_TIMEOUT");
    test_bad_init();
    test_bad_env();
    test_bad_values();
    test_refused_put();
    test_many_revisions();
    test_busy_retry();
    printf("test_modex_badpmi: ok\n");
    return 0;
}
