/*
 * A rank program for ferryrun's tests. It speaks PMI-1 itself, with a
 * minimal client, so that ferryrun can be tested without the ferry library.
 *
 *   fr_helper exit R CODE     barrier; rank R exits with CODE, the others wait
 *                             at a second barrier (R = -1: nobody fails)
 *   fr_helper signal R        barrier; rank R raises SIGKILL, the others wait
 *   fr_helper sleep S         sleeps S seconds
 *   fr_helper stubborn S      ignores SIGTERM, sleeps S seconds
 *   fr_helper print           a line on stdout, a partial line, a line on stderr
 *   fr_helper env VAR...      prints "rank R: VAR=value" (or "VAR unset")
 *   fr_helper bigout N        prints N numbered lines
 *   fr_helper abort CODE      rank 0 sends PMI abort with CODE, the others wait
 *   fr_helper nofinalize      rank 0 exits 0 at once, the others wait at a barrier
 *                             and print its answer
 *   fr_helper pmi             puts, gets, bad requests, barrier, finalize
 *   fr_helper longline        rank 0 sends an endless request line
 *   fr_helper bind            prints the CPUs the rank may run on
 *   fr_helper steal           rank 1 tries to overwrite and to take rank 0's
 *                             keys; both check rank 0's values are intact
 *   fr_helper quota           ranks use up their key-value quotas (bytes,
 *                             keys, revisions) and check each is refused in
 *                             time, without starving the other rank
 *   fr_helper junk            rank 0 sends 1 MiB of junk requests, reading
 *                             the error answers, then finishes normally
 *   fr_helper secret S        prints "rank R secret HEX" (FERRY_JOB_SECRET),
 *                             then sleeps S seconds
 *
 * Every rank prints "pid R PID" first on stdout (unless printing nothing else
 * is the point), so the driver can check that no rank outlives the job.
 */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int pmi_fd = -1;
static int rank = -1;
static int size = -1;
static char kvsname[256];

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fr_helper[%d]: ", rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(99);
}

static void pmi_send(const char *line)
{
    size_t len = strlen(line);
    while (len > 0) {
        ssize_t n = write(pmi_fd, line, len);
        if (n <= 0) {
            die("PMI write failed: %s", strerror(errno));
        }
        line += n;
        len -= (size_t)n;
    }
}

/* Reads one answer line; false at end of file. */
static int pmi_recv(char *buf, size_t size_buf)
{
    size_t n = 0;
    while (n + 1 < size_buf) {
        char c;
        ssize_t r = read(pmi_fd, &c, 1);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return 0;
        }
        if (c == '\n') {
            break;
        }
        buf[n++] = c;
    }
    buf[n] = '\0';
    return 1;
}

/* Sends a request and checks the answer starts with expect. */
static void pmi_call(const char *req, const char *expect, char *ans, size_t ans_size)
{
    pmi_send(req);
    if (!pmi_recv(ans, ans_size)) {
        die("no answer to %s", req);
    }
    if (strncmp(ans, expect, strlen(expect)) != 0) {
        die("answer to '%s' is '%s', expected '%s'", req, ans, expect);
    }
}

static void pmi_init(void)
{
    const char *fd = getenv("PMI_FD");
    const char *r = getenv("PMI_RANK");
    const char *s = getenv("PMI_SIZE");
    if (fd == NULL || r == NULL || s == NULL) {
        die("PMI_FD, PMI_RANK or PMI_SIZE missing");
    }
    pmi_fd = atoi(fd);
    rank = atoi(r);
    size = atoi(s);
    char ans[2048];
    pmi_call("cmd=init pmi_version=1 pmi_subversion=1\n", "cmd=response_to_init", ans,
             sizeof(ans));
    if (strstr(ans, "rc=0") == NULL) {
        die("init refused: %s", ans);
    }
    pmi_call("cmd=get_maxes\n", "cmd=maxes", ans, sizeof(ans));
    pmi_call("cmd=get_my_kvsname\n", "cmd=my_kvsname", ans, sizeof(ans));
    const char *k = strstr(ans, "kvsname=");
    if (k == NULL || sscanf(k, "kvsname=%255s", kvsname) != 1) {
        die("no kvsname in '%s'", ans);
    }
}

static void pmi_barrier(void)
{
    char ans[256];
    pmi_call("cmd=barrier_in\n", "cmd=barrier_out", ans, sizeof(ans));
}

static void pmi_finalize(void)
{
    char ans[256];
    pmi_call("cmd=finalize\n", "cmd=finalize_ack", ans, sizeof(ans));
}

static void print_pid(void)
{
    printf("pid %d %ld\n", rank, (long)getpid());
    fflush(stdout);
}

static int mode_pmi(void)
{
    char req[2048];
    char ans[2048];
    /* Bad requests get an error answer and the connection stays usable. */
    pmi_call("this is not pmi\n", "cmd=error rc=-1", ans, sizeof(ans));
    pmi_call("cmd=no_such_command\n", "cmd=error rc=-1", ans, sizeof(ans));
    pmi_call("cmd=put key=x value=y\n", "cmd=put_result rc=-1", ans, sizeof(ans));
    snprintf(req, sizeof(req), "cmd=put kvsname=%s key=k%d value=%s\n", kvsname, rank,
             "valueless=");
    /* "valueless=" holds a '=', which the value may contain after the first. */
    pmi_call(req, "cmd=put_result rc=0", ans, sizeof(ans));
    char big[1100];
    memset(big, 'v', 1050);
    big[1050] = '\0';
    snprintf(req, sizeof(req), "cmd=put kvsname=%s key=big%d value=%s\n", kvsname, rank, big);
    pmi_call(req, "cmd=put_result rc=-1", ans, sizeof(ans));
    snprintf(req, sizeof(req), "cmd=put kvsname=%s key=r%d value=v%d\n", kvsname, rank, rank);
    pmi_call(req, "cmd=put_result rc=0", ans, sizeof(ans));
    pmi_barrier();
    for (int r = 0; r < size; r++) {
        char want[64];
        snprintf(req, sizeof(req), "cmd=get kvsname=%s key=r%d\n", kvsname, r);
        pmi_call(req, "cmd=get_result rc=0", ans, sizeof(ans));
        snprintf(want, sizeof(want), "value=v%d", r);
        if (strstr(ans, want) == NULL) {
            die("get r%d gave '%s'", r, ans);
        }
    }
    snprintf(req, sizeof(req), "cmd=get kvsname=%s key=missing\n", kvsname);
    pmi_call(req, "cmd=get_result rc=-1", ans, sizeof(ans));
    pmi_call("cmd=get_appnum\n", "cmd=appnum", ans, sizeof(ans));
    pmi_call("cmd=get_universe_size\n", "cmd=universe_size", ans, sizeof(ans));
    pmi_barrier();
    pmi_finalize();
    printf("rank %d pmi ok\n", rank);
    return 0;
}

/* A put; returns the answer's msg= (or "success") in why. */
static bool pmi_put(const char *key, const char *val, char *why, size_t why_size)
{
    char req[4096];
    char ans[2048];
    snprintf(req, sizeof(req), "cmd=put kvsname=%s key=%s value=%s\n", kvsname, key, val);
    pmi_call(req, "cmd=put_result", ans, sizeof(ans));
    const char *m = strstr(ans, "msg=");
    snprintf(why, why_size, "%.*s", m != NULL ? (int)strcspn(m + 4, " ") : 0,
             m != NULL ? m + 4 : "");
    return strstr(ans, "rc=0") != NULL;
}

/* A get; true with the value in val when found. */
static bool pmi_get(const char *key, char *val, size_t val_size)
{
    char req[512];
    char ans[2048];
    snprintf(req, sizeof(req), "cmd=get kvsname=%s key=%s\n", kvsname, key);
    pmi_call(req, "cmd=get_result", ans, sizeof(ans));
    const char *v = strstr(ans, "value=");
    if (strstr(ans, "rc=0") == NULL || v == NULL) {
        return false;
    }
    snprintf(val, val_size, "%s", v + 6);
    return true;
}

static void expect_value(const char *key, const char *want)
{
    char val[2048];
    if (!pmi_get(key, val, sizeof(val)) || strcmp(val, want) != 0) {
        die("%s should still be '%s'", key, want);
    }
}

/* Rank 1 attacks rank 0's keys: one rank 0 stored under its own prefix,
 * one it stored first without a prefix, and one of its names it has not
 * used yet. Every attempt must be refused; rank 0 may still replace its
 * own values. */
static int mode_steal(void)
{
    char why[256];
    if (rank == 0) {
        if (!pmi_put("0.addr", "genuine", why, sizeof(why)) ||
            !pmi_put("shared", "first", why, sizeof(why))) {
            die("rank 0's own puts were refused: %s", why);
        }
    }
    pmi_barrier();
    if (rank == 1) {
        static const char *const targets[] = {"0.addr", "shared", "0.future"};
        for (size_t i = 0; i < 3; i++) {
            if (pmi_put(targets[i], "evil", why, sizeof(why))) {
                die("rank 1 overwrote or took rank 0's key %s", targets[i]);
            }
            printf("rank 1: put of %s refused: %s\n", targets[i], why);
        }
        if (!pmi_put("1.mine", "ok", why, sizeof(why))) {
            die("rank 1's put of its own key was refused: %s", why);
        }
    }
    pmi_barrier();
    expect_value("0.addr", "genuine");
    expect_value("shared", "first");
    char val[64];
    if (pmi_get("0.future", val, sizeof(val))) {
        die("0.future exists: '%s'", val);
    }
    expect_value("1.mine", "ok");
    /* Both have read; now rank 0 replaces its own value. */
    pmi_barrier();
    if (rank == 0 && !pmi_put("0.addr", "renewed", why, sizeof(why))) {
        die("rank 0 could not replace its own value: %s", why);
    }
    pmi_barrier();
    expect_value("0.addr", "renewed");
    pmi_barrier();
    pmi_finalize();
    printf("rank %d steal ok\n", rank);
    return 0;
}

/* Puts distinct keys until one is refused; returns how many were stored,
 * dying when more than limit are. */
static long put_until_refused(const char *name, const char *val, long limit, char *why,
                              size_t why_size)
{
    for (long i = 0; i <= limit; i++) {
        char key[64];
        snprintf(key, sizeof(key), "%d.%s%ld", rank, name, i);
        if (!pmi_put(key, val, why, why_size)) {
            return i;
        }
    }
    die("%ld puts of '%s' keys and no quota refused one", limit + 1, name);
}

static int mode_quota(void)
{
    char why[256];
    char big[1001];
    memset(big, 'b', 1000);
    big[1000] = '\0';
    /* Rank 1 fills its byte quota first; rank 0 must still store its keys
     * in full afterwards: one rank's use is not the other's loss. */
    if (rank == 1) {
        long n = put_until_refused("big", big, 40000, why, sizeof(why));
        printf("rank 1 stored %ld values of 1000 bytes, then: %s\n", n, why);
        if (strcmp(why, "quota_bytes") != 0 || n < 1000) {
            die("expected quota_bytes after many puts");
        }
    }
    pmi_barrier();
    if (rank == 0) {
        long n = put_until_refused("k", "v", 40000, why, sizeof(why));
        printf("rank 0 stored %ld keys, then: %s\n", n, why);
        if (strcmp(why, "quota_keys") != 0 || n < 30000) {
            die("expected quota_keys after many keys");
        }
        long r = 0;
        for (; r <= 10000; r++) {
            char val[32];
            snprintf(val, sizeof(val), "r%ld", r);
            if (!pmi_put("0.k0", val, why, sizeof(why))) {
                break;
            }
        }
        printf("rank 0 replaced a value %ld times, then: %s\n", r, why);
        if (strcmp(why, "quota_revisions") != 0 || r > 10000) {
            die("expected quota_revisions after many replacements");
        }
    }
    pmi_barrier();
    /* What was stored is intact and readable by the other rank. */
    expect_value("1.big0", big);
    expect_value("0.k1", "v");
    pmi_barrier();
    pmi_finalize();
    printf("rank %d quota ok\n", rank);
    return 0;
}

/* 1 MiB of junk requests, in batches, each answer read before the next
 * batch so that the answers never pile up unread. */
static int mode_junk(void)
{
    if (rank == 0) {
        static const char *const lines[] = {
            "junk\n", "cmd=bogus a=b\n", "no_equals_sign here\n", "cmd=put kvsname=x\n",
            "=value\n", "cmd=get\n",
        };
        size_t sent = 0;
        long n = 0;
        char ans[2048];
        while (sent < ((size_t)1 << 20)) {
            int batch = 0;
            for (; batch < 100; batch++) {
                const char *l = lines[(n + batch) % 6];
                pmi_send(l);
                sent += strlen(l);
            }
            for (int i = 0; i < batch; i++) {
                if (!pmi_recv(ans, sizeof(ans)) || strstr(ans, "rc=-1") == NULL) {
                    die("junk request %ld got '%s'", n + i, ans);
                }
            }
            n += batch;
        }
        printf("rank 0 sent %ld junk requests (%zu bytes), each refused\n", n, sent);
    }
    pmi_barrier();
    pmi_finalize();
    printf("rank %d junk ok\n", rank);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        die("no mode");
    }
    const char *mode = argv[1];
    if (strcmp(mode, "sleep") == 0 || strcmp(mode, "stubborn") == 0) {
        if (strcmp(mode, "stubborn") == 0) {
            signal(SIGTERM, SIG_IGN);
        }
        rank = getenv("PMI_RANK") != NULL ? atoi(getenv("PMI_RANK")) : -1;
        print_pid();
        sleep(argc > 2 ? (unsigned)atoi(argv[2]) : 30);
        return 0;
    }
    if (strcmp(mode, "print") == 0) {
        rank = atoi(getenv("PMI_RANK"));
        printf("line1 from %d\npartial %d", rank, rank);
        fflush(stdout);
        fprintf(stderr, "err from %d\n", rank);
        return 0;
    }
    if (strcmp(mode, "env") == 0) {
        rank = atoi(getenv("PMI_RANK"));
        for (int i = 2; i < argc; i++) {
            const char *v = getenv(argv[i]);
            if (v != NULL) {
                printf("rank %d: %s=%s\n", rank, argv[i], v);
            } else {
                printf("rank %d: %s unset\n", rank, argv[i]);
            }
        }
        return 0;
    }
    if (strcmp(mode, "bigout") == 0) {
        rank = atoi(getenv("PMI_RANK"));
        long n = argc > 2 ? atol(argv[2]) : 1000;
        for (long i = 0; i < n; i++) {
            printf("out %d %ld ................................................\n", rank, i);
        }
        return 0;
    }
    if (strcmp(mode, "secret") == 0) {
        rank = getenv("PMI_RANK") != NULL ? atoi(getenv("PMI_RANK")) : -1;
        const char *sec = getenv("FERRY_JOB_SECRET");
        printf("rank %d secret %s\n", rank, sec != NULL ? sec : "(unset)");
        fflush(stdout);
        sleep(argc > 2 ? (unsigned)atoi(argv[2]) : 0);
        return 0;
    }
    if (strcmp(mode, "bind") == 0) {
        rank = atoi(getenv("PMI_RANK"));
        cpu_set_t set;
        CPU_ZERO(&set);
        if (sched_getaffinity(0, sizeof(set), &set) != 0) {
            die("sched_getaffinity: %s", strerror(errno));
        }
        printf("rank %d cpus %d\n", rank, CPU_COUNT(&set));
        return 0;
    }

    pmi_init();
    if (strcmp(mode, "exit") == 0 || strcmp(mode, "signal") == 0) {
        int who = argc > 2 ? atoi(argv[2]) : 0;
        print_pid();
        pmi_barrier();
        if (rank == who) {
            if (strcmp(mode, "signal") == 0) {
                raise(SIGKILL);
            }
            exit(argc > 3 ? atoi(argv[3]) : 1);
        }
        /* Never completes when a rank failed: ferryrun must kill us. */
        pmi_barrier();
        pmi_finalize();
        return 0;
    }
    if (strcmp(mode, "abort") == 0) {
        print_pid();
        if (rank == 0) {
            char req[128];
            snprintf(req, sizeof(req), "cmd=abort exitcode=%s\n", argc > 2 ? argv[2] : "1");
            pmi_send(req);
            pause();
        }
        pmi_barrier();
        return 0;
    }
    if (strcmp(mode, "nofinalize") == 0) {
        print_pid();
        if (rank == 0) {
            return 0;
        }
        char ans[256];
        pmi_call("cmd=barrier_in\n", "cmd=barrier_out", ans, sizeof(ans));
        printf("rank %d barrier: %s\n", rank, ans);
        return 0;
    }
    if (strcmp(mode, "pmi") == 0) {
        return mode_pmi();
    }
    if (strcmp(mode, "steal") == 0) {
        return mode_steal();
    }
    if (strcmp(mode, "quota") == 0) {
        return mode_quota();
    }
    if (strcmp(mode, "junk") == 0) {
        return mode_junk();
    }
    if (strcmp(mode, "longline") == 0) {
        if (rank == 0) {
            char junk[1000];
            memset(junk, 'j', sizeof(junk));
            /* ferryrun closes the connection after its line limit; the
             * writes then fail, and reading sees the end. */
            signal(SIGPIPE, SIG_IGN);
            for (int i = 0; i < 100; i++) {
                if (write(pmi_fd, junk, sizeof(junk)) < 0) {
                    break;
                }
            }
            char ans[64];
            while (pmi_recv(ans, sizeof(ans))) {
            }
            printf("rank 0 saw its PMI connection closed\n");
            return 0;
        }
        pmi_finalize();
        return 0;
    }
    die("unknown mode %s", mode);
}
