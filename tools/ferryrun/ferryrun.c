/*
 * ferryrun: starts N ranks of a program on this host, or on several through
 * a launch agent such as ssh, and serves them the PMI-1 wire protocol, the
 * way ferry (and any PMI-1 client, such as an MPICH program) finds its rank,
 * its job and its peers' addresses.
 *
 *   ferryrun [-n N] [--host H[:SLOTS],... | --hostfile FILE]
 *            [--launch-agent CMD] [--pmi-addr ADDR] [--bind-to core|none]
 *            [-x VAR[=VALUE]]... [--timeout S] [--tag-output] prog [args]
 *
 * Each local rank gets a socket for PMI (PMI_FD, PMI_RANK, PMI_SIZE), the
 * job's id (FERRY_JOB_ID, also the PMI kvs name) and the job's secret
 * (FERRY_JOB_SECRET, 32 random bytes in hex, drawn per job); a remote rank
 * is started as `CMD host env VAR=VALUE... prog args`, gets the secret in
 * the agent's environment or on its standard input (never on a command
 * line), and reaches the PMI server over TCP (PMI_PORT, PMI_ID), proving
 * the secret before it is served. A rank's stdout and stderr (a remote rank's through
 * its agent's) come back through pipes and go to ferryrun's own, line by
 * line; a remote rank's exit status is its agent's. The first rank to fail (a non-zero
 * exit, a signal, a PMI abort) ends the job: the others get SIGTERM and, two
 * seconds later, SIGKILL, and ferryrun exits with the failed rank's status
 * (128 + signal number for a signal). --timeout ends the job the same way
 * with status 124, as timeout(1) does. A rank that leaves while others wait
 * at a barrier it never entered also ends the job (status 1), since that
 * barrier could never complete; with --keep-going the barrier fails instead
 * (rc=-1 msg=rank_left to each rank waiting, and to each that enters one
 * later). ferryrun's own errors exit with 1, bad usage
 * with 2, a program that cannot be executed with 127.
 *
 * When the job is over, shared-memory files under /dev/shm whose names
 * contain the job id are removed: the leftovers of local ranks that were
 * killed. So are, as each local rank ends, the region files libfabric's
 * shm provider names after its pid. Remote hosts' /dev/shm is out of reach.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ferryrun.h"

/* Between SIGTERM and SIGKILL when ending a job. */
#define FR_GRACE_MS 2000
/* How long a rank's PMI connection may be closed before its process is
 * reaped, before the closing alone counts as the rank having left: the
 * kernel closes descriptors a moment before it reports the exit, and the
 * exit status is the better report. */
#define FR_CLOSED_GRACE_MS 1000
/* How long output is still forwarded after the last rank was reaped, when a
 * process the ranks started keeps their pipes open. */
#define FR_DRAIN_MS 2000

/* Which descriptor a pollfd is, besides the ranks' (3 * rank + stream),
 * the signals (-1), the listener (-2) and pending connections (-3 - k). */
#define FR_WHO_STDIN (-100)
#define FR_WHO_STDIN_OUT (-101)

/* Exit codes of ferryrun's own. */
#define FR_EXIT_ERROR 1
#define FR_EXIT_USAGE 2
#define FR_EXIT_TIMEOUT 124
#define FR_EXIT_NOEXEC 127

static void fr_usage(FILE *out)
{
    fprintf(out,
            "usage: ferryrun [-n N] [--host H[:SLOTS],... | --hostfile FILE]\n"
            "                [--launch-agent CMD] [--pmi-addr ADDR] [--bind-to core|none]\n"
            "                [--agent-secret env|stdin] [-x VAR[=VALUE]]... [--timeout S]\n"
            "                [--tag-output] prog [args]\n"
            "\n"
            "Starts N ranks of prog, on this host or on the hosts given, and serves them\n"
            "PMI-1.\n"
            "  -n N              number of ranks (1..%d); with hosts, all their slots\n"
            "                    by default\n"
            "  --host LIST       hosts as H[:SLOTS],... (1 slot by default); ranks fill\n"
            "                    the slots in order\n"
            "  --hostfile FILE   hosts, one a line: 'H', 'H:SLOTS' or 'H slots=SLOTS'\n"
            "  --launch-agent CMD  starts a rank on a host other than this one as\n"
            "                    'CMD host env VAR=VALUE... prog args' (default: ssh)\n"
            "  --pmi-addr ADDR   the address of this host remote ranks reach ferryrun at\n"
            "                    (default: FERRYRUN_PMI_ADDR, else the route to the\n"
            "                    first remote host)\n"
            "  --agent-secret env|stdin  how remote ranks get the job's secret: in the\n"
            "                    agent's environment, or on its standard input (the\n"
            "                    default for ssh and rsh, which pass no environment)\n"
            "  --bind-to core    bind rank i to the i-th CPU (mod the CPUs allowed)\n"
            "  --bind-to none    do not bind (the default)\n"
            "  -x VAR=VALUE      set VAR in the ranks' environment\n"
            "  -x VAR            pass VAR's current value on (the default for all)\n"
            "  --timeout S       kill the job after S seconds and exit with 124\n"
            "  --tag-output      prefix every line of output with \"[rank] \"\n"
            "  --keep-going      a rank that fails does not end the job; ferryrun still\n"
            "                    exits with the first failed rank's status\n"
            "  -h, --help        show this help\n",
            FR_NP_MAX);
}

static int fr_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int fr_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ferryrun: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fr_usage(stderr);
    return FR_EXIT_USAGE;
}

static bool fr_env_name_ok(const char *name, size_t len)
{
    if (len == 0 || !(name[0] == '_' || (name[0] >= 'A' && name[0] <= 'Z') ||
                      (name[0] >= 'a' && name[0] <= 'z'))) {
        return false;
    }
    for (size_t i = 1; i < len; i++) {
        char c = name[i];
        if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (c >= '0' && c <= '9'))) {
            return false;
        }
    }
    return true;
}

enum {
    FR_OPT_BIND = 256,
    FR_OPT_TIMEOUT,
    FR_OPT_TAG,
    FR_OPT_KEEP_GOING,
    FR_OPT_HOST,
    FR_OPT_HOSTFILE,
    FR_OPT_AGENT,
    FR_OPT_PMI_ADDR,
    FR_OPT_AGENT_SECRET,
};

/* Fills opt from the command line. Returns -1 to go on, or the status to
 * exit with (0 after --help, FR_EXIT_USAGE after a mistake). */
static int fr_parse_args(int argc, char **argv, fr_opts_t *opt)
{
    static const struct option longopts[] = {
        {"bind-to", required_argument, NULL, FR_OPT_BIND},
        {"timeout", required_argument, NULL, FR_OPT_TIMEOUT},
        {"tag-output", no_argument, NULL, FR_OPT_TAG},
        {"keep-going", no_argument, NULL, FR_OPT_KEEP_GOING},
        {"host", required_argument, NULL, FR_OPT_HOST},
        {"hostfile", required_argument, NULL, FR_OPT_HOSTFILE},
        {"launch-agent", required_argument, NULL, FR_OPT_AGENT},
        {"pmi-addr", required_argument, NULL, FR_OPT_PMI_ADDR},
        {"agent-secret", required_argument, NULL, FR_OPT_AGENT_SECRET},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    opt->np = 0;
    opterr = 0;
    /* '+': options end at the program's name, whose own options are its. */
    int c;
    while ((c = getopt_long(argc, argv, "+:n:x:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'n': {
            char *end = NULL;
            errno = 0;
            long n = strtol(optarg, &end, 10);
            if (errno != 0 || end == optarg || *end != '\0' || n < 1 || n > FR_NP_MAX) {
                return fr_usage_error("-n needs a number of ranks from 1 to 4096, not '%s'",
                                      optarg);
            }
            opt->np = (int)n;
            break;
        }
        case 'x': {
            const char *eq = strchr(optarg, '=');
            size_t len = eq != NULL ? (size_t)(eq - optarg) : strlen(optarg);
            if (!fr_env_name_ok(optarg, len)) {
                return fr_usage_error("-x needs VAR or VAR=VALUE with a valid name, not '%s'",
                                      optarg);
            }
            if (len == strlen(RT_AUTH_SECRET_ENV) &&
                strncmp(optarg, RT_AUTH_SECRET_ENV, len) == 0) {
                return fr_usage_error("-x %s: ferryrun draws the job's secret itself",
                                      RT_AUTH_SECRET_ENV);
            }
            opt->xvars[opt->n_xvars++] = optarg;
            break;
        }
        case FR_OPT_BIND:
            if (strcmp(optarg, "core") == 0) {
                opt->bind_core = true;
            } else if (strcmp(optarg, "none") == 0) {
                opt->bind_core = false;
            } else {
                return fr_usage_error("--bind-to takes 'core' or 'none', not '%s'", optarg);
            }
            break;
        case FR_OPT_TIMEOUT: {
            char *end = NULL;
            errno = 0;
            double s = strtod(optarg, &end);
            if (errno != 0 || end == optarg || *end != '\0' || !isfinite(s) || s < 0 ||
                s > 1e7) {
                return fr_usage_error("--timeout needs a number of seconds, not '%s'", optarg);
            }
            opt->timeout_s = s;
            break;
        }
        case FR_OPT_TAG:
            opt->tag_output = true;
            break;
        case FR_OPT_KEEP_GOING:
            opt->keep_going = true;
            break;
        case FR_OPT_HOST:
            if (opt->host_list != NULL || opt->hostfile != NULL) {
                return fr_usage_error("give one --host or --hostfile");
            }
            opt->host_list = optarg;
            break;
        case FR_OPT_HOSTFILE:
            if (opt->host_list != NULL || opt->hostfile != NULL) {
                return fr_usage_error("give one --host or --hostfile");
            }
            opt->hostfile = optarg;
            break;
        case FR_OPT_AGENT:
            if (optarg[strspn(optarg, " \t")] == '\0') {
                return fr_usage_error("--launch-agent needs a command");
            }
            opt->launch_agent = optarg;
            break;
        case FR_OPT_AGENT_SECRET:
            if (strcmp(optarg, "env") == 0) {
                opt->agent_secret = FR_SECRET_ENV;
            } else if (strcmp(optarg, "stdin") == 0) {
                opt->agent_secret = FR_SECRET_STDIN;
            } else {
                return fr_usage_error("--agent-secret takes 'env' or 'stdin', not '%s'", optarg);
            }
            break;
        case FR_OPT_PMI_ADDR:
            if (optarg[0] == '\0') {
                return fr_usage_error("--pmi-addr needs an address");
            }
            opt->pmi_addr = optarg;
            break;
        case 'h':
            fr_usage(stdout);
            return 0;
        case ':':
            if (optopt != 0 && optopt < 256) {
                return fr_usage_error("option '-%c' needs an argument", optopt);
            }
            return fr_usage_error("option '%s' needs an argument", argv[optind - 1]);
        default:
            if (optopt != 0) {
                return fr_usage_error("unknown option '-%c'", optopt);
            }
            return fr_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (opt->np == 0 && opt->host_list == NULL && opt->hostfile == NULL) {
        return fr_usage_error("-n N is required (or --host / --hostfile)");
    }
    if (opt->launch_agent == NULL) {
        opt->launch_agent = "ssh";
    }
    if (opt->pmi_addr == NULL) {
        const char *env = getenv("FERRYRUN_PMI_ADDR");
        opt->pmi_addr = env != NULL && env[0] != '\0' ? env : NULL;
    }
    if (optind >= argc) {
        return fr_usage_error("no program to run");
    }
    opt->argv = argv + optind;
    return -1;
}

/* ---- Starting ranks ------------------------------------------------------- */

static void fr_make_job_id(fr_job_t *job)
{
    unsigned long long rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd)) {
        /* No entropy yet: time and pid still tell this job from others. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        rnd = (unsigned long long)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^
              (unsigned long long)ts.tv_sec;
    }
    snprintf(job->job_id, sizeof(job->job_id), "ferry-%ld-%016llx", (long)getpid(), rnd);
}

/* Draws the job's secret. Without a source of randomness there is no
 * secret worth the name, and no job. */
static int fr_make_secret(fr_job_t *job)
{
    if (rt_auth_random(job->secret, sizeof(job->secret)) != 0 ||
        rt_auth_hex_encode(job->secret, sizeof(job->secret), job->secret_hex,
                           sizeof(job->secret_hex)) != 0) {
        fprintf(stderr, "ferryrun: cannot draw the job's secret: libsodium has no source of "
                        "randomness\n");
        return -1;
    }
    return 0;
}

/* The value PATH will have in the ranks' environment. */
static const char *fr_rank_path(const fr_opts_t *opt)
{
    const char *path = getenv("PATH");
    for (int i = 0; i < opt->n_xvars; i++) {
        if (strncmp(opt->xvars[i], "PATH=", 5) == 0) {
            path = opt->xvars[i] + 5;
        }
    }
    return path != NULL ? path : "/usr/local/bin:/usr/bin:/bin";
}

static bool fr_is_executable(const char *file)
{
    struct stat st;
    return stat(file, &st) == 0 && S_ISREG(st.st_mode) && access(file, X_OK) == 0;
}

/* Checks before starting anything that the program can be executed, so that
 * a typo gets one clear message instead of one per rank. */
static bool fr_program_found(const fr_opts_t *opt)
{
    const char *prog = opt->argv[0];
    if (prog[0] == '\0') {
        return false;
    }
    if (strchr(prog, '/') != NULL) {
        return fr_is_executable(prog);
    }
    const char *path = fr_rank_path(opt);
    while (true) {
        const char *colon = strchr(path, ':');
        size_t dlen = colon != NULL ? (size_t)(colon - path) : strlen(path);
        char file[PATH_MAX];
        int n = snprintf(file, sizeof(file), "%.*s%s%s", (int)dlen, path, dlen > 0 ? "/" : "",
                         prog);
        if (n > 0 && (size_t)n < sizeof(file) && fr_is_executable(file)) {
            return true;
        }
        if (colon == NULL) {
            return false;
        }
        path = colon + 1;
    }
}

/* Assigns each rank the CPU it is bound to: the (i mod n)-th of the n CPUs
 * this process may run on. */
static int fr_assign_cpus(fr_job_t *job)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        fprintf(stderr, "ferryrun: --bind-to core: cannot read the CPU affinity: %s\n",
                strerror(errno));
        return -1;
    }
    int cpus[CPU_SETSIZE];
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &set)) {
            cpus[n++] = c;
        }
    }
    if (n == 0) {
        fprintf(stderr, "ferryrun: --bind-to core: no CPU is available\n");
        return -1;
    }
    for (int i = 0; i < job->opt.np; i++) {
        job->ranks[i].cpu = cpus[i % n];
    }
    return 0;
}

/* Removes the variables through which another launcher (one that started
 * ferryrun itself: hydra, Open MPI's mpirun, Slurm) would be found. Only in
 * a child about to exec. */
static void fr_unset_launcher_env(void)
{
    static const char *const names[] = {"PMI_FD",  "PMI_RANK", "PMI_SIZE",
                                        "PMI_PORT", "PMI_ID",   RT_AUTH_SECRET_ENV};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        unsetenv(names[i]);
    }
    /* PMIx servers leave many PMIX_ variables; unsetting changes environ, so
     * look again from the start after each. */
    bool again = true;
    while (again) {
        again = false;
        for (char **e = environ; *e != NULL; e++) {
            if (strncmp(*e, "PMIX_", 5) == 0) {
                char name[256];
                size_t len = strcspn(*e, "=");
                snprintf(name, sizeof(name), "%.*s", (int)(len < 255 ? len : 255), *e);
                unsetenv(name);
                again = true;
                break;
            }
        }
    }
}

/* In the child of a remote rank: runs the launch agent, which starts the
 * rank on its host with the PMI address and the rank in its environment,
 * and the secret in the agent's environment or, when in_fd >= 0, on the
 * standard input in_fd is the read end of. Never returns. */
static void fr_child_remote(const fr_job_t *job, const fr_rank_t *r, int in_fd, int out_fd,
                            int err_fd, const sigset_t *orig_mask)
{
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, orig_mask, NULL);
    if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0) {
        _exit(FR_EXIT_ERROR);
    }
    if (in_fd >= 0) {
        if (dup2(in_fd, STDIN_FILENO) < 0) {
            _exit(FR_EXIT_ERROR);
        }
    } else if (r->rank != 0) {
        int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null_fd >= 0) {
            dup2(null_fd, STDIN_FILENO);
        }
    }
    /* Agents that keep the environment (ip netns exec) would otherwise pass
     * an outer launcher's variables on; the rank's own come through env. */
    fr_unset_launcher_env();
    if (in_fd < 0) {
        setenv(RT_AUTH_SECRET_ENV, job->secret_hex, 1);
    }
    char **argv = fr_agent_argv(job, r);
    if (argv == NULL) {
        fprintf(stderr, "ferryrun: rank %d: out of memory\n", r->rank);
        _exit(FR_EXIT_ERROR);
    }
    execvp(argv[0], argv);
    fprintf(stderr, "ferryrun: cannot execute the launch agent '%s': %s\n", argv[0],
            strerror(errno));
    _exit(FR_EXIT_NOEXEC);
}

/* In the child, between fork and exec: only async-signal-safe work matters
 * here in a threaded parent, and ferryrun has one thread, so setenv and
 * stdio are fine. Never returns. */
static void fr_child(const fr_job_t *job, const fr_rank_t *r, int pmi_fd, int out_fd,
                     int err_fd, const sigset_t *orig_mask)
{
    /* Undo what ferryrun set up for itself: exec keeps a signal mask and
     * ignored signals. */
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, orig_mask, NULL);

    if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0) {
        _exit(FR_EXIT_ERROR);
    }
    /* Rank 0 reads ferryrun's stdin; the others get end of file. */
    if (r->rank != 0) {
        int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null_fd >= 0) {
            dup2(null_fd, STDIN_FILENO);
        }
    }
    /* Every other descriptor was made close-on-exec; this one must stay. */
    int flags = fcntl(pmi_fd, F_GETFD);
    if (flags < 0 || fcntl(pmi_fd, F_SETFD, flags & ~FD_CLOEXEC) < 0) {
        fprintf(stderr, "ferryrun: rank %d: cannot pass the PMI socket: %s\n", r->rank,
                strerror(errno));
        _exit(FR_EXIT_ERROR);
    }

    /* A ferryrun started by another launcher must not let its ranks find
     * that launcher instead of this one. */
    fr_unset_launcher_env();
    char num[32];
    snprintf(num, sizeof(num), "%d", pmi_fd);
    setenv("PMI_FD", num, 1);
    snprintf(num, sizeof(num), "%d", r->rank);
    setenv("PMI_RANK", num, 1);
    snprintf(num, sizeof(num), "%d", job->opt.np);
    setenv("PMI_SIZE", num, 1);
    setenv("FERRY_JOB_ID", job->job_id, 1);
    for (int i = 0; i < job->opt.n_xvars; i++) {
        const char *x = job->opt.xvars[i];
        const char *eq = strchr(x, '=');
        if (eq != NULL) {
            char name[256];
            snprintf(name, sizeof(name), "%.*s", (int)(eq - x), x);
            setenv(name, eq + 1, 1);
        }
        /* A bare VAR is inherited already; main warned when it is unset. */
    }
    /* After the -x variables, which cannot name it anyway. */
    setenv(RT_AUTH_SECRET_ENV, job->secret_hex, 1);

    if (r->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(r->cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0) {
            fprintf(stderr, "ferryrun: rank %d: cannot bind to CPU %d: %s\n", r->rank, r->cpu,
                    strerror(errno));
        }
    }

    execvp(job->opt.argv[0], job->opt.argv);
    fprintf(stderr, "ferryrun: cannot execute '%s': %s\n", job->opt.argv[0], strerror(errno));
    _exit(FR_EXIT_NOEXEC);
}

static int fr_set_nonblock(int fd)
{
    int flags = fcntl(fd, F_GETFL);
    return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static void fr_close_fd(int fd)
{
    if (fd >= 0) {
        close(fd);
    }
}

/* Writes the secret line to the agent's standard input. The pipe is new
 * and empty, and the line far shorter than PIPE_BUF, so it goes at once and
 * whole; the rest is ferryrun's own input for rank 0, nothing for others. */
static int fr_give_secret(fr_job_t *job, const fr_rank_t *r, int fd)
{
    char line[RT_AUTH_HEX_LEN + 2];
    int n = snprintf(line, sizeof(line), "%s\n", job->secret_hex);
    ssize_t w = write(fd, line, (size_t)n);
    rt_auth_wipe(line, sizeof(line));
    if (w != (ssize_t)n) {
        fprintf(stderr, "ferryrun: rank %d: cannot give the launch agent the job's secret: %s\n",
                r->rank, w < 0 ? strerror(errno) : "short write");
        close(fd);
        return -1;
    }
    if (r->rank != 0) {
        close(fd);
        return 0;
    }
    (void)fr_set_nonblock(fd);
    job->stdin_fwd.out_fd = fd;
    return 0;
}

static int fr_spawn(fr_job_t *job, fr_rank_t *r, const sigset_t *orig_mask)
{
    int sv[2] = {-1, -1};
    int in[2] = {-1, -1};
    int out[2] = {-1, -1};
    int err[2] = {-1, -1};
    /* A remote rank connects to the listener instead; it may get the
     * secret on its agent's standard input. */
    if (!r->remote && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        goto err_report;
    }
    if (r->remote && fr_agent_secret_stdin(job) && pipe2(in, O_CLOEXEC) != 0) {
        goto err_close_socket;
    }
    if (pipe2(out, O_CLOEXEC) != 0) {
        goto err_close_in;
    }
    if (pipe2(err, O_CLOEXEC) != 0) {
        goto err_close_out;
    }
    r->started = time(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        goto err_close_err;
    }
    if (pid == 0) {
        if (r->remote) {
            fr_child_remote(job, r, in[0], out[1], err[1], orig_mask);
        }
        fr_child(job, r, sv[1], out[1], err[1], orig_mask);
    }
    fr_close_fd(sv[1]);
    fr_close_fd(in[0]);
    close(out[1]);
    close(err[1]);
    r->pid = pid;
    r->pmi_fd = sv[0];
    fr_stream_init(&r->out, out[0], STDOUT_FILENO);
    fr_stream_init(&r->err, err[0], STDERR_FILENO);
    if (sv[0] >= 0) {
        (void)fr_set_nonblock(sv[0]);
    }
    (void)fr_set_nonblock(out[0]);
    (void)fr_set_nonblock(err[0]);
    /* A rank whose agent cannot have the secret cannot connect: it fails,
     * with this message, and ends the job as any failed rank does. */
    if (in[1] >= 0) {
        (void)fr_give_secret(job, r, in[1]);
    }
    return 0;

err_close_err:
    close(err[0]);
    close(err[1]);
err_close_out:
    close(out[0]);
    close(out[1]);
err_close_in:
    fr_close_fd(in[0]);
    fr_close_fd(in[1]);
err_close_socket:
    fr_close_fd(sv[0]);
    fr_close_fd(sv[1]);
err_report:
    fprintf(stderr, "ferryrun: cannot start rank %d: %s\n", r->rank, strerror(errno));
    return -1;
}

/* ---- Ending the job --------------------------------------------------------- */

static const char *fr_signal_name(int sig, char buf[32])
{
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev != NULL) {
        snprintf(buf, 32, "SIG%s", abbrev);
    } else {
        snprintf(buf, 32, "%d", sig);
    }
    return buf;
}

/* Reports a rank's end; the first failure ends the job. */
static void fr_rank_ended(fr_job_t *job, fr_rank_t *r)
{
    /* Requests the rank sent just before it ended (an abort, typically)
     * count before its exit status. */
    if (r->pmi_fd >= 0) {
        fr_pmi_readable(job, r);
        fr_pmi_close(job, r);
    }
    int st = r->wstatus;
    if (job->ending) {
        return;
    }
    const char *then = job->opt.keep_going ? "the others go on" : "killing the job";
    /* A remote rank's pid is its launch agent's, on this host. */
    char who[FR_HOST_MAX + 64];
    if (r->remote) {
        snprintf(who, sizeof(who), "on %s, agent pid %ld", job->hosts[r->host].name,
                 (long)r->pid);
    } else {
        snprintf(who, sizeof(who), "pid %ld", (long)r->pid);
    }
    int code = 0;
    if (WIFEXITED(st) && WEXITSTATUS(st) != 0) {
        fprintf(stderr, "ferryrun: rank %d (%s) exited with status %d; %s\n", r->rank, who,
                WEXITSTATUS(st), then);
        code = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
        char name[32];
        fprintf(stderr, "ferryrun: rank %d (%s) killed by signal %s%s; %s\n", r->rank, who,
                fr_signal_name(WTERMSIG(st), name), WCOREDUMP(st) ? " (core dumped)" : "",
                then);
        code = 128 + WTERMSIG(st);
    }
    if (code == 0)
        return;
    if (!job->opt.keep_going)
        fr_job_fail(job, code);
    else if (job->first_failure == 0)
        job->first_failure = code;
}

/* Removes the region files libfabric's shm provider made for a local rank
 * that has ended. The provider (checked against libfabric 1.17) names each
 * endpoint's region "PID:UID:N" in /dev/shm, N counting the process's
 * endpoints, and removes it when the endpoint closes or a catchable signal
 * ends the process; after SIGKILL nothing does, and each is 16 MiB. The
 * rank has just been reaped, so its pid names no live process; only files
 * that are ours, have exactly that form and were made since the rank
 * started (by their time of last change, which the provider's writes keep
 * current) are touched: pids come round again (pid_max is often 32768), and
 * a file an earlier process of the same pid left is not this rank's (a
 * second of slack covers the coarse clock of file times). A rank that
 * exited normally and left some leaked them, which is worth a line. */
static void fr_remove_provider_shm(const fr_rank_t *r)
{
    DIR *dir = opendir("/dev/shm");
    if (dir == NULL) {
        return;
    }
    char prefix[48];
    int plen = snprintf(prefix, sizeof(prefix), "%ld:%ld:", (long)r->pid, (long)getuid());
    int dfd = dirfd(dir);
    int removed = 0;
    struct dirent *ent;
    while ((ent = readdir(dir)) != NULL) {
        const char *name = ent->d_name;
        if (strncmp(name, prefix, (size_t)plen) != 0) {
            continue;
        }
        const char *n = name + plen;
        if (n[0] == '\0' || strspn(n, "0123456789") != strlen(n)) {
            continue;
        }
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            st.st_uid == geteuid() && st.st_mtim.tv_sec + 1 >= r->started &&
            unlinkat(dfd, name, 0) == 0) {
            removed++;
        }
    }
    closedir(dir);
    if (removed > 0 && WIFEXITED(r->wstatus) && WEXITSTATUS(r->wstatus) == 0) {
        fprintf(stderr,
                "ferryrun: removed %d libfabric shm file(s) rank %d (pid %ld) left behind\n",
                removed, r->rank, (long)r->pid);
    }
}

static void fr_reap(fr_job_t *job)
{
    for (;;) {
        int st = 0;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid <= 0) {
            return;
        }
        for (int i = 0; i < job->opt.np; i++) {
            fr_rank_t *r = &job->ranks[i];
            if (r->pid == pid && !r->reaped) {
                r->reaped = true;
                r->wstatus = st;
                if (!r->remote) {
                    fr_remove_provider_shm(r);
                }
                fr_rank_ended(job, r);
                break;
            }
        }
    }
}

/* A barrier completes only when every rank enters it. When some ranks wait
 * and another has left (exited, finalized, or closed its PMI connection)
 * without entering, they would wait forever: that ends the job. Returns the
 * time at which to look again, or 0. */
static long long fr_check_barrier(fr_job_t *job, long long now)
{
    if (job->ending || job->n_barrier == 0) {
        return 0;
    }
    long long again = 0;
    for (int i = 0; i < job->opt.np; i++) {
        fr_rank_t *r = &job->ranks[i];
        if (r->in_barrier) {
            continue;
        }
        const char *how = NULL;
        if (r->reaped) {
            how = "exited";
        } else if (r->finalized) {
            how = "called PMI finalize";
        } else if (r->pmi_fd < 0 && r->pmi_closed_ms > 0) {
            if (now - r->pmi_closed_ms >= FR_CLOSED_GRACE_MS) {
                how = "closed its PMI connection";
            } else if (again == 0 || r->pmi_closed_ms + FR_CLOSED_GRACE_MS < again) {
                again = r->pmi_closed_ms + FR_CLOSED_GRACE_MS;
            }
        }
        if (how != NULL && job->opt.keep_going) {
            /* The others go on: they hear that the barrier failed, and so
             * does every later one (this rank never comes back). */
            fprintf(stderr,
                    "ferryrun: rank %d %s while %d rank(s) wait at a PMI barrier it never "
                    "entered; the barrier fails\n",
                    r->rank, how, job->n_barrier);
            for (int k = 0; k < job->opt.np; k++) {
                if (job->ranks[k].in_barrier) {
                    job->ranks[k].in_barrier = false;
                    fr_pmi_answer(job, &job->ranks[k], "cmd=barrier_out rc=-1 msg=rank_left\n");
                }
            }
            job->n_barrier = 0;
            return 0;
        }
        if (how != NULL) {
            fprintf(stderr,
                    "ferryrun: rank %d %s while %d rank(s) wait at a PMI barrier it never "
                    "entered; the barrier cannot complete, killing the job\n",
                    r->rank, how, job->n_barrier);
            fr_job_fail(job, FR_EXIT_ERROR);
            return 0;
        }
    }
    return again;
}

/* Removes the shared-memory files the job's ranks named after the job id:
 * ranks that were killed had no chance to. */
static void fr_remove_shm(const fr_job_t *job, int exit_code)
{
    DIR *dir = opendir("/dev/shm");
    if (dir == NULL) {
        return;
    }
    int dfd = dirfd(dir);
    int removed = 0;
    struct dirent *ent;
    while ((ent = readdir(dir)) != NULL) {
        if (strstr(ent->d_name, job->job_id) != NULL && unlinkat(dfd, ent->d_name, 0) == 0) {
            removed++;
        }
    }
    closedir(dir);
    /* After a clean job there should be nothing to remove: say so, since it
     * means a rank leaked a segment. */
    if (removed > 0 && exit_code == 0) {
        fprintf(stderr, "ferryrun: removed %d shared-memory file(s) job %s left behind\n",
                removed, job->job_id);
    }
}

/* ---- The event loop ----------------------------------------------------------- */

static void fr_handle_signals(fr_job_t *job, int sig_fd)
{
    struct signalfd_siginfo si;
    while (read(sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGCHLD) {
            continue; /* reaped below, whatever the number of signals */
        }
        /* SIGINT, SIGTERM, SIGHUP: the ranks decide what they mean. */
        fr_signal_ranks(job, (int)si.ssi_signo);
    }
    fr_reap(job);
}

static bool fr_all_reaped(const fr_job_t *job)
{
    for (int i = 0; i < job->opt.np; i++) {
        if (!job->ranks[i].reaped) {
            return false;
        }
    }
    return true;
}

static bool fr_streams_open(const fr_job_t *job)
{
    for (int i = 0; i < job->opt.np; i++) {
        if (job->ranks[i].out.fd >= 0 || job->ranks[i].err.fd >= 0) {
            return true;
        }
    }
    return false;
}

static void fr_wake_at(long long *wake, long long when)
{
    if (when > 0 && (*wake == 0 || when < *wake)) {
        *wake = when;
    }
}

static int fr_run(fr_job_t *job, int sig_fd)
{
    size_t max_fds = 3 + 3 * (size_t)job->opt.np + FR_PENDING_MAX;
    struct pollfd *pfds = calloc(max_fds, sizeof(*pfds));
    /* For each pollfd, the rank and which of its descriptors it is. */
    int *who = calloc(max_fds, sizeof(*who));
    if (pfds == NULL || who == NULL) {
        free(pfds);
        free(who);
        fprintf(stderr, "ferryrun: out of memory\n");
        fr_job_fail(job, FR_EXIT_ERROR);
        fr_signal_ranks(job, SIGKILL);
        return FR_EXIT_ERROR;
    }
    long long deadline = job->opt.timeout_s > 0
                             ? fr_now_ms() + (long long)(job->opt.timeout_s * 1000 + 0.999)
                             : 0;
    long long drain_until = 0;
    for (;;) {
        long long now = fr_now_ms();
        if (fr_all_reaped(job)) {
            if (!fr_streams_open(job)) {
                break;
            }
            if (drain_until == 0) {
                drain_until = now + FR_DRAIN_MS;
            } else if (now >= drain_until) {
                break;
            }
        }
        if (deadline > 0 && now >= deadline && !job->ending) {
            fprintf(stderr, "ferryrun: the job ran longer than --timeout %g s; killing it\n",
                    job->opt.timeout_s);
            fr_job_fail(job, FR_EXIT_TIMEOUT);
        }
        if (job->ending && !job->killed && now - job->term_ms >= FR_GRACE_MS) {
            fr_signal_ranks(job, SIGKILL);
            job->killed = true;
        }
        long long wake = fr_check_barrier(job, now);
        if (deadline > 0 && !job->ending) {
            fr_wake_at(&wake, deadline);
        }
        if (job->ending && !job->killed) {
            fr_wake_at(&wake, job->term_ms + FR_GRACE_MS);
        }
        fr_wake_at(&wake, drain_until);
        if (job->listen_fd >= 0) {
            fr_wake_at(&wake, fr_pmi_pending_expire(job, now));
        }
        for (int i = 0; i < job->opt.np; i++) {
            fr_rank_t *r = &job->ranks[i];
            fr_wake_at(&wake, fr_stream_flush_stale(job, r, &r->out, now));
            fr_wake_at(&wake, fr_stream_flush_stale(job, r, &r->err, now));
        }

        size_t n = 0;
        pfds[n] = (struct pollfd){.fd = sig_fd, .events = POLLIN};
        who[n++] = -1;
        /* Remote ranks connect and identify themselves: the listener is
         * -2, a pending connection k is -3 - k. */
        if (job->listen_fd >= 0) {
            pfds[n] = (struct pollfd){.fd = job->listen_fd, .events = POLLIN};
            who[n++] = -2;
            for (int k = 0; k < FR_PENDING_MAX; k++) {
                if (job->pending[k].fd >= 0) {
                    pfds[n] = (struct pollfd){.fd = job->pending[k].fd, .events = POLLIN};
                    who[n++] = -3 - k;
                }
            }
        }
        /* ferryrun's input on its way to a remote rank 0 (fr_output.c):
         * read when there is room, written when there is something. */
        fr_stdin_t *in = &job->stdin_fwd;
        if (in->out_fd >= 0 && in->off < in->len) {
            pfds[n] = (struct pollfd){.fd = in->out_fd, .events = POLLOUT};
            who[n++] = FR_WHO_STDIN_OUT;
        } else if (in->out_fd >= 0) {
            pfds[n] = (struct pollfd){.fd = STDIN_FILENO, .events = POLLIN};
            who[n++] = FR_WHO_STDIN;
        }
        for (int i = 0; i < job->opt.np; i++) {
            fr_rank_t *r = &job->ranks[i];
            if (r->out.fd >= 0) {
                pfds[n] = (struct pollfd){.fd = r->out.fd, .events = POLLIN};
                who[n++] = 3 * i;
            }
            if (r->err.fd >= 0) {
                pfds[n] = (struct pollfd){.fd = r->err.fd, .events = POLLIN};
                who[n++] = 3 * i + 1;
            }
            if (r->pmi_fd >= 0) {
                short ev = POLLIN;
                if (r->outq_len > 0) {
                    ev |= POLLOUT;
                }
                pfds[n] = (struct pollfd){.fd = r->pmi_fd, .events = ev};
                who[n++] = 3 * i + 2;
            }
        }
        int timeout = -1;
        if (wake > 0) {
            long long left = wake - fr_now_ms();
            timeout = left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
        }
        int ready = poll(pfds, n, timeout);
        if (ready < 0) {
            if (errno == EINTR) {
                continue;
            }
            fprintf(stderr, "ferryrun: poll: %s\n", strerror(errno));
            fr_job_fail(job, FR_EXIT_ERROR);
            fr_signal_ranks(job, SIGKILL);
            job->killed = true;
            sleep(1);
            fr_reap(job);
            break;
        }
        /* Descriptors first: what a rank wrote before it died is forwarded
         * and served before its death is reported. */
        for (size_t k = 1; k < n; k++) {
            if (pfds[k].revents == 0) {
                continue;
            }
            if (who[k] == -2) {
                fr_pmi_accept(job);
                continue;
            }
            if (who[k] == FR_WHO_STDIN) {
                fr_stdin_readable(&job->stdin_fwd);
                continue;
            }
            if (who[k] == FR_WHO_STDIN_OUT) {
                fr_stdin_writable(&job->stdin_fwd);
                continue;
            }
            if (who[k] < -2) {
                fr_pending_t *pc = &job->pending[-3 - who[k]];
                if (pc->fd >= 0) {
                    fr_pmi_pending_readable(job, pc);
                }
                continue;
            }
            fr_rank_t *r = &job->ranks[who[k] / 3];
            switch (who[k] % 3) {
            case 0:
                fr_stream_readable(job, r, &r->out);
                break;
            case 1:
                fr_stream_readable(job, r, &r->err);
                break;
            default:
                if (pfds[k].revents & POLLOUT) {
                    fr_pmi_writable(job, r);
                }
                if (pfds[k].revents & (POLLIN | POLLHUP | POLLERR)) {
                    fr_pmi_readable(job, r);
                }
                break;
            }
        }
        if (pfds[0].revents != 0) {
            fr_handle_signals(job, sig_fd);
        }
    }
    free(pfds);
    free(who);
    fr_complain_flush(&job->refusals, "messages about refused PMI connections");
    return job->ending ? job->exit_code : job->first_failure;
}

/* Opens /dev/null on any of descriptors 0, 1 and 2 that is closed, so that
 * no socket or pipe made later takes one of those numbers, which the ranks'
 * standard streams then overwrite. */
static void fr_fill_std_fds(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            /* The lower ones are open by now, so open() returns fd. */
            (void)open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        }
    }
}

int main(int argc, char **argv)
{
    fr_fill_std_fds();
    fr_job_t job;
    memset(&job, 0, sizeof(job));
    job.opt.xvars = calloc((size_t)argc, sizeof(char *));
    if (job.opt.xvars == NULL) {
        fprintf(stderr, "ferryrun: out of memory\n");
        return FR_EXIT_ERROR;
    }
    job.listen_fd = -1;
    job.stdin_fwd.out_fd = -1;
    rt_ratelimit_init(&job.refusals, RT_RATELIMIT_BURST, RT_RATELIMIT_INTERVAL_MS);
    for (int k = 0; k < FR_PENDING_MAX; k++) {
        job.pending[k].fd = -1;
    }
    int status = fr_parse_args(argc, argv, &job.opt);
    if (status >= 0) {
        free(job.opt.xvars);
        return status;
    }
    status = fr_hosts_load(&job);
    if (status == 0) {
        status = fr_hosts_place(&job);
    }
    if (status != 0) {
        free(job.hosts);
        free(job.opt.xvars);
        return status;
    }
    bool any_local = true;
    if (job.hosts != NULL) {
        int placed = 0;
        any_local = false;
        for (int h = 0; h < job.n_hosts && placed < job.opt.np; h++) {
            any_local = any_local || job.hosts[h].local;
            placed += job.hosts[h].slots;
        }
    }
    /* The program is looked for here only when some rank runs here: a
     * remote host has its own files. */
    if (any_local && !fr_program_found(&job.opt)) {
        fprintf(stderr, "ferryrun: cannot execute '%s': not found or not executable\n",
                job.opt.argv[0]);
        free(job.hosts);
        free(job.opt.xvars);
        return FR_EXIT_NOEXEC;
    }
    for (int i = 0; i < job.opt.n_xvars; i++) {
        if (strchr(job.opt.xvars[i], '=') == NULL && getenv(job.opt.xvars[i]) == NULL) {
            fprintf(stderr, "ferryrun: warning: -x %s: not set here, so not passed on\n",
                    job.opt.xvars[i]);
        }
    }
    fr_make_job_id(&job);
    status = FR_EXIT_ERROR;
    if (fr_make_secret(&job) != 0) {
        goto err_free_opts;
    }
    job.ranks = calloc((size_t)job.opt.np, sizeof(*job.ranks));
    if (job.ranks == NULL || fr_kvs_init(&job.kvs, job.opt.np) != 0) {
        fprintf(stderr, "ferryrun: out of memory\n");
        goto err_free_ranks;
    }
    for (int i = 0, h = 0, used = 0; i < job.opt.np; i++) {
        fr_rank_t *r = &job.ranks[i];
        r->rank = i;
        r->cpu = -1;
        r->host = -1;
        r->pmi_fd = -1;
        r->out.fd = -1;
        r->err.fd = -1;
        rt_ratelimit_init(&r->complaints, RT_RATELIMIT_BURST, RT_RATELIMIT_INTERVAL_MS);
        if (job.hosts != NULL) {
            /* Slots fill in order (fr_hosts_place checked that all fit). */
            while (used == job.hosts[h].slots) {
                h++;
                used = 0;
            }
            used++;
            r->host = h;
            r->remote = !job.hosts[h].local;
            job.n_remote += r->remote;
        }
    }
    if (job.opt.bind_core && fr_assign_cpus(&job) != 0) {
        goto err_free_ranks;
    }
    if (job.opt.bind_core && job.n_remote > 0) {
        fprintf(stderr, "ferryrun: warning: --bind-to core binds only the ranks on this host\n");
        for (int i = 0; i < job.opt.np; i++) {
            if (job.ranks[i].remote) {
                job.ranks[i].cpu = -1;
            }
        }
    }
    if (job.n_remote > 0 && fr_pmi_listen(&job) != 0) {
        goto err_free_ranks;
    }

    /* Signals arrive through a descriptor in the poll loop, so nothing runs
     * in a handler. SIGPIPE is ignored: a rank or reader that goes away shows
     * up as a write error. */
    sigset_t mask, orig_mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &mask, &orig_mask) != 0) {
        fprintf(stderr, "ferryrun: sigprocmask: %s\n", strerror(errno));
        goto err_free_ranks;
    }
    int sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sig_fd < 0) {
        fprintf(stderr, "ferryrun: signalfd: %s\n", strerror(errno));
        goto err_restore_mask;
    }
    signal(SIGPIPE, SIG_IGN);

    for (int i = 0; i < job.opt.np; i++) {
        if (fr_spawn(&job, &job.ranks[i], &orig_mask) != 0) {
            /* The ranks started so far are ended by the loop. */
            fr_job_fail(&job, FR_EXIT_ERROR);
            for (int j = i; j < job.opt.np; j++) {
                job.ranks[j].reaped = true;
            }
            break;
        }
    }
    status = fr_run(&job, sig_fd);

    for (int i = 0; i < job.opt.np; i++) {
        fr_pmi_close(&job, &job.ranks[i]);
        fr_stream_close(&job, &job.ranks[i], &job.ranks[i].out);
        fr_stream_close(&job, &job.ranks[i], &job.ranks[i].err);
    }
    for (int k = 0; k < FR_PENDING_MAX; k++) {
        fr_pmi_pending_close(&job.pending[k]);
    }
    fr_stdin_close(&job.stdin_fwd);
    /* Only this host's /dev/shm is within reach. */
    if (job.n_remote < job.opt.np) {
        fr_remove_shm(&job, status);
    }
    close(sig_fd);
err_restore_mask:
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &orig_mask, NULL);
err_free_ranks:
    if (job.listen_fd >= 0) {
        close(job.listen_fd);
    }
    fr_kvs_fini(&job.kvs);
    free(job.ranks);
err_free_opts:
    rt_auth_wipe(job.secret, sizeof(job.secret));
    rt_auth_wipe(job.secret_hex, sizeof(job.secret_hex));
    free(job.hosts);
    free(job.opt.xvars);
    return status;
}
