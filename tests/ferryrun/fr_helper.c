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
 *   fr_helper pmi             puts, gets, bad requests, barrier, finalize
 *   fr_helper longline        rank 0 sends an endless request line
 *   fr_helper bind            prints the CPUs the rank may run on
 *
 * Every rank prints "pid R PID" first on stdout (unless printing nothing else
 * is the point), so the driver can check that no rank outlives the job.
 */
#include <errno.h>
#include <sched.h>
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
        pmi_barrier();
        return 0;
    }
    if (strcmp(mode, "pmi") == 0) {
        return mode_pmi();
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
