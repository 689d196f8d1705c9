/*
 * Hosts: the host list (--host h1:2,h2 or --hostfile FILE), the placement of
 * ranks on it, the launch agent's command line for a remote rank, and the TCP
 * listener through which remote ranks reach the PMI server.
 *
 * A host's ranks are forked here when the host is this one (localhost,
 * 127.0.0.1, or this machine's name, full or short); any other host's ranks
 * are started as `AGENT... host env VAR=VALUE... prog args`. The agent is
 * given the host as its first argument and nothing else is assumed about it:
 * ssh runs the rest as a remote command, `ip netns exec` runs it in the
 * network namespace the "host" names. ssh hands its command to a shell, so
 * for an agent named ssh or rsh every word that a shell would change is
 * quoted; other agents get the words as they are.
 *
 * The job's secret never goes on a command line, where any user of either
 * host could read it. Agents that keep the environment get it there; ssh
 * and rsh, which pass none, get it as the first line of their standard
 * input, which a small sh wrapper on the remote side reads into the rank's
 * environment before it execs the program:
 *   AGENT host env VAR=VALUE... sh -c 'IFS= read -r FERRY_JOB_SECRET ...;
 *       export FERRY_JOB_SECRET; exec "$@"' ferryrun-rank prog args
 */
#include <errno.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ferryrun.h"

/* Exit statuses, as in ferryrun.c. */
#define FR_EXIT_ERROR 1
#define FR_EXIT_USAGE 2

/* Most slots one host entry may declare, and most entries. */
#define FR_SLOTS_MAX FR_NP_MAX
#define FR_HOSTS_MAX FR_NP_MAX

static bool fr_host_char_ok(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '-' || c == '_' || c == '@';
}

/* Parses a slot count: digits only, 1..FR_SLOTS_MAX. */
static bool fr_parse_slots(const char *text, size_t len, int *slots_out)
{
    if (len == 0 || len > 5) {
        return false;
    }
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9') {
            return false;
        }
        v = v * 10 + (text[i] - '0');
    }
    if (v < 1 || v > FR_SLOTS_MAX) {
        return false;
    }
    *slots_out = (int)v;
    return true;
}

static bool fr_is_this_host(const char *name)
{
    if (strcmp(name, "localhost") == 0 || strcmp(name, "127.0.0.1") == 0) {
        return true;
    }
    char me[FR_HOST_MAX + 1] = "";
    if (gethostname(me, sizeof(me) - 1) != 0) {
        return false;
    }
    if (strcmp(name, me) == 0) {
        return true;
    }
    /* "node1" names this host when it is "node1.example.org", and the other
     * way round. */
    size_t short_me = strcspn(me, ".");
    size_t short_name = strcspn(name, ".");
    return short_me == short_name && strncmp(name, me, short_me) == 0 &&
           (me[short_me] == '\0' || name[short_name] == '\0');
}

/* Adds one entry "NAME" with slots; where names the source for messages. */
static int fr_host_add(fr_job_t *job, const char *name, size_t len, int slots,
                       const char *where)
{
    if (len == 0 || len > FR_HOST_MAX) {
        fprintf(stderr, "ferryrun: %s: a host name must have 1 to %d characters\n", where,
                FR_HOST_MAX);
        return FR_EXIT_USAGE;
    }
    for (size_t i = 0; i < len; i++) {
        if (!fr_host_char_ok(name[i])) {
            fprintf(stderr,
                    "ferryrun: %s: host '%.*s' has a character other than letters, digits, "
                    "'.', '-', '_' and '@'\n",
                    where, (int)len, name);
            return FR_EXIT_USAGE;
        }
    }
    if (job->n_hosts == FR_HOSTS_MAX) {
        fprintf(stderr, "ferryrun: %s: more than %d hosts\n", where, FR_HOSTS_MAX);
        return FR_EXIT_USAGE;
    }
    fr_host_t *h = &job->hosts[job->n_hosts++];
    memcpy(h->name, name, len);
    h->name[len] = '\0';
    h->slots = slots;
    h->local = fr_is_this_host(h->name);
    return 0;
}

/* "NAME" or "NAME:SLOTS". */
static int fr_host_add_spec(fr_job_t *job, const char *spec, size_t len, const char *where)
{
    const char *colon = memchr(spec, ':', len);
    int slots = 1;
    size_t nlen = len;
    if (colon != NULL) {
        nlen = (size_t)(colon - spec);
        if (!fr_parse_slots(colon + 1, len - nlen - 1, &slots)) {
            fprintf(stderr, "ferryrun: %s: '%.*s': slots must be a number from 1 to %d\n",
                    where, (int)len, spec, FR_SLOTS_MAX);
            return FR_EXIT_USAGE;
        }
    }
    return fr_host_add(job, spec, nlen, slots, where);
}

static int fr_hosts_from_list(fr_job_t *job, const char *list)
{
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, ",");
        if (len == 0) {
            fprintf(stderr, "ferryrun: --host: empty entry in '%s'\n", list);
            return FR_EXIT_USAGE;
        }
        int st = fr_host_add_spec(job, p, len, "--host");
        if (st != 0) {
            return st;
        }
        if (p[len] == '\0') {
            return 0;
        }
        p += len + 1;
    }
}

/* Lines "host", "host:N" or "host slots=N"; '#' starts a comment. */
static int fr_hosts_from_file(fr_job_t *job, const char *file)
{
    FILE *f = fopen(file, "r");
    if (f == NULL) {
        fprintf(stderr, "ferryrun: --hostfile %s: %s\n", file, strerror(errno));
        return FR_EXIT_USAGE;
    }
    char line[1024];
    int lineno = 0;
    int st = 0;
    while (st == 0 && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        char where[64];
        snprintf(where, sizeof(where), "--hostfile line %d", lineno);
        if (strchr(line, '\n') == NULL && !feof(f)) {
            fprintf(stderr, "ferryrun: %s: longer than %zu characters\n", where,
                    sizeof(line) - 2);
            st = FR_EXIT_USAGE;
            break;
        }
        line[strcspn(line, "#\r\n")] = '\0';
        char *save = NULL;
        char *name = strtok_r(line, " \t", &save);
        if (name == NULL) {
            continue;
        }
        char *opt = strtok_r(NULL, " \t", &save);
        if (opt == NULL) {
            st = fr_host_add_spec(job, name, strlen(name), where);
            continue;
        }
        int slots = 0;
        if (strncmp(opt, "slots=", 6) != 0 || strchr(name, ':') != NULL ||
            !fr_parse_slots(opt + 6, strlen(opt + 6), &slots) ||
            strtok_r(NULL, " \t", &save) != NULL) {
            fprintf(stderr,
                    "ferryrun: %s: expected 'host', 'host:N' or 'host slots=N' (N from 1 to "
                    "%d)\n",
                    where, FR_SLOTS_MAX);
            st = FR_EXIT_USAGE;
            break;
        }
        st = fr_host_add(job, name, strlen(name), slots, where);
    }
    if (st == 0 && ferror(f)) {
        fprintf(stderr, "ferryrun: --hostfile %s: read error\n", file);
        st = FR_EXIT_USAGE;
    }
    fclose(f);
    if (st == 0 && job->n_hosts == 0) {
        fprintf(stderr, "ferryrun: --hostfile %s names no host\n", file);
        st = FR_EXIT_USAGE;
    }
    return st;
}

int fr_hosts_load(fr_job_t *job)
{
    if (job->opt.host_list == NULL && job->opt.hostfile == NULL) {
        return 0;
    }
    job->hosts = calloc(FR_HOSTS_MAX, sizeof(*job->hosts));
    if (job->hosts == NULL) {
        fprintf(stderr, "ferryrun: out of memory\n");
        return FR_EXIT_ERROR;
    }
    if (job->opt.host_list != NULL) {
        return fr_hosts_from_list(job, job->opt.host_list);
    }
    return fr_hosts_from_file(job, job->opt.hostfile);
}

int fr_hosts_place(fr_job_t *job)
{
    if (job->hosts == NULL) {
        return 0;
    }
    long total = 0;
    for (int h = 0; h < job->n_hosts; h++) {
        total += job->hosts[h].slots;
    }
    if (job->opt.np == 0) {
        if (total > FR_NP_MAX) {
            fprintf(stderr, "ferryrun: the hosts have %ld slots, more than %d ranks\n", total,
                    FR_NP_MAX);
            return FR_EXIT_USAGE;
        }
        job->opt.np = (int)total;
    } else if (job->opt.np > total) {
        fprintf(stderr, "ferryrun: -n %d needs %d slots, but the hosts have %ld\n",
                job->opt.np, job->opt.np, total);
        return FR_EXIT_USAGE;
    }
    return 0;
}

/* ---- The launch agent's command line --------------------------------------- */

static bool fr_agent_uses_shell(const char *agent)
{
    size_t len = strcspn(agent, " \t");
    const char *base = agent;
    for (size_t i = 0; i < len; i++) {
        if (agent[i] == '/') {
            base = agent + i + 1;
        }
    }
    size_t blen = len - (size_t)(base - agent);
    return (blen == 3 && (strncmp(base, "ssh", 3) == 0 || strncmp(base, "rsh", 3) == 0));
}

static bool fr_shell_safe(const char *word)
{
    if (word[0] == '\0') {
        return false;
    }
    for (const char *c = word; *c != '\0'; c++) {
        bool ok = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
                  (*c >= '0' && *c <= '9') || strchr("_./:=@%+,-", *c) != NULL;
        if (!ok) {
            return false;
        }
    }
    return true;
}

/* Bytes needed for word in single quotes, each ' written as '\''. */
static size_t fr_quoted_len(const char *word)
{
    size_t n = 2;
    for (const char *c = word; *c != '\0'; c++) {
        n += *c == '\'' ? 4 : 1;
    }
    return n;
}

static char *fr_put_word(char *dst, const char *word, bool quote)
{
    if (!quote || fr_shell_safe(word)) {
        size_t n = strlen(word);
        memcpy(dst, word, n + 1);
        return dst + n + 1;
    }
    *dst++ = '\'';
    for (const char *c = word; *c != '\0'; c++) {
        if (*c == '\'') {
            memcpy(dst, "'\\''", 4);
            dst += 4;
        } else {
            *dst++ = *c;
        }
    }
    *dst++ = '\'';
    *dst++ = '\0';
    return dst;
}

bool fr_agent_secret_stdin(const fr_job_t *job)
{
    if (job->opt.agent_secret != FR_SECRET_AUTO) {
        return job->opt.agent_secret == FR_SECRET_STDIN;
    }
    return fr_agent_uses_shell(job->opt.launch_agent);
}

/* The VAR=VALUE words every remote rank gets before the -x ones. */
#define FR_ENV_FIXED 5
/* The words before the program when the secret comes on standard input: the
 * script reads one line, and only a whole one, so that a rank 0 reading its
 * input finds it unchanged after the secret. */
static const char *const fr_stdin_wrapper[] = {
    "sh",
    "-c",
    "IFS= read -r " RT_AUTH_SECRET_ENV " || { echo \"ferryrun: no job secret on standard "
    "input\" >&2; exit 127; }; export " RT_AUTH_SECRET_ENV "; exec \"$@\"",
    "ferryrun-rank",
};
#define FR_WRAPPER_WORDS (sizeof(fr_stdin_wrapper) / sizeof(fr_stdin_wrapper[0]))

char **fr_agent_argv(const fr_job_t *job, const fr_rank_t *r)
{
    const char *agent = job->opt.launch_agent;
    bool quote = fr_agent_uses_shell(agent);
    char fixed[FR_ENV_FIXED][FR_HOST_MAX + 64];
    snprintf(fixed[0], sizeof(fixed[0]), "PMI_PORT=%s", job->pmi_port);
    snprintf(fixed[1], sizeof(fixed[1]), "PMI_ID=%d", r->rank);
    snprintf(fixed[2], sizeof(fixed[2]), "PMI_RANK=%d", r->rank);
    snprintf(fixed[3], sizeof(fixed[3]), "PMI_SIZE=%d", job->opt.np);
    snprintf(fixed[4], sizeof(fixed[4]), "FERRY_JOB_ID=%s", job->job_id);

    /* -x VAR=VALUE as given; a bare -x VAR with its value here, since a
     * remote shell does not inherit this environment. */
    size_t n_x = (size_t)job->opt.n_xvars;
    char **xwords = calloc(n_x + 1, sizeof(char *));
    if (xwords == NULL) {
        return NULL;
    }
    size_t nx_used = 0;
    bool failed = false;
    for (size_t i = 0; i < n_x && !failed; i++) {
        const char *x = job->opt.xvars[i];
        if (strchr(x, '=') != NULL) {
            xwords[nx_used] = strdup(x);
        } else if (getenv(x) != NULL) {
            size_t len = strlen(x) + strlen(getenv(x)) + 2;
            xwords[nx_used] = malloc(len);
            if (xwords[nx_used] != NULL) {
                snprintf(xwords[nx_used], len, "%s=%s", x, getenv(x));
            }
        } else {
            continue;
        }
        failed = xwords[nx_used++] == NULL;
    }

    /* One block: the pointer array, then the words. */
    size_t n_words = 0;
    size_t bytes = 0;
    const char *a = agent;
    while (*a != '\0') {
        a += strspn(a, " \t");
        size_t len = strcspn(a, " \t");
        if (len > 0) {
            n_words++;
            bytes += len + 1;
        }
        a += len;
    }
    bool wrap = fr_agent_secret_stdin(job);
    n_words += 2 + FR_ENV_FIXED + nx_used; /* host, "env" */
    if (wrap) {
        for (size_t i = 0; i < FR_WRAPPER_WORDS; i++) {
            n_words++;
            bytes += fr_quoted_len(fr_stdin_wrapper[i]) + 1;
        }
    }
    bytes += strlen(job->hosts[r->host].name) + 1 + 4;
    for (int i = 0; i < FR_ENV_FIXED; i++) {
        bytes += fr_quoted_len(fixed[i]) + 1;
    }
    for (size_t i = 0; i < nx_used; i++) {
        bytes += fr_quoted_len(xwords[i]) + 1;
    }
    for (char **w = job->opt.argv; *w != NULL; w++) {
        n_words++;
        bytes += fr_quoted_len(*w) + 1;
    }
    char **argv = failed ? NULL : malloc((n_words + 1) * sizeof(char *) + bytes);
    if (argv != NULL) {
        char *dst = (char *)(argv + n_words + 1);
        size_t k = 0;
        a = agent;
        while (*a != '\0') {
            a += strspn(a, " \t");
            size_t len = strcspn(a, " \t");
            if (len > 0) {
                argv[k++] = dst;
                memcpy(dst, a, len);
                dst[len] = '\0';
                dst += len + 1;
            }
            a += len;
        }
        argv[k++] = dst;
        dst = fr_put_word(dst, job->hosts[r->host].name, false);
        argv[k++] = dst;
        dst = fr_put_word(dst, "env", false);
        for (int i = 0; i < FR_ENV_FIXED; i++) {
            argv[k++] = dst;
            dst = fr_put_word(dst, fixed[i], quote);
        }
        for (size_t i = 0; i < nx_used; i++) {
            argv[k++] = dst;
            dst = fr_put_word(dst, xwords[i], quote);
        }
        for (size_t i = 0; wrap && i < FR_WRAPPER_WORDS; i++) {
            argv[k++] = dst;
            dst = fr_put_word(dst, fr_stdin_wrapper[i], quote);
        }
        for (char **w = job->opt.argv; *w != NULL; w++) {
            argv[k++] = dst;
            dst = fr_put_word(dst, *w, quote);
        }
        argv[k] = NULL;
    }
    for (size_t i = 0; i < nx_used; i++) {
        free(xwords[i]);
    }
    free(xwords);
    return argv;
}

/* ---- The PMI listener ----------------------------------------------------------- */

/* The address of this host that packets to host leave from: the one the
 * host can most likely reach back. */
static int fr_route_source(const char *host, struct sockaddr_storage *ss, socklen_t *len)
{
    const char *at = strrchr(host, '@');
    if (at != NULL) {
        host = at + 1; /* ssh's user@host */
    }
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, "9", &hints, &res) != 0) {
        return -1;
    }
    int rc = -1;
    for (struct addrinfo *ai = res; ai != NULL && rc != 0; ai = ai->ai_next) {
        /* Connecting a datagram socket sends nothing: it only asks the
         * kernel for the route. */
        int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            continue;
        }
        *len = sizeof(*ss);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            getsockname(fd, (struct sockaddr *)ss, len) == 0) {
            rc = 0;
        }
        close(fd);
    }
    freeaddrinfo(res);
    return rc;
}

static int fr_resolve_addr(const char *text, struct sockaddr_storage *ss, socklen_t *len)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(text, NULL, &hints, &res);
    if (gai != 0) {
        fprintf(stderr, "ferryrun: --pmi-addr %s: %s\n", text, gai_strerror(gai));
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int fr_pmi_listen(fr_job_t *job)
{
    struct sockaddr_storage ss;
    socklen_t len = 0;
    if (job->opt.pmi_addr != NULL) {
        if (fr_resolve_addr(job->opt.pmi_addr, &ss, &len) != 0) {
            return -1;
        }
    } else {
        const char *first = NULL;
        for (int i = 0; i < job->opt.np && first == NULL; i++) {
            if (job->ranks[i].remote) {
                first = job->hosts[job->ranks[i].host].name;
            }
        }
        if (first == NULL || fr_route_source(first, &ss, &len) != 0) {
            fprintf(stderr,
                    "ferryrun: cannot tell which address of this host '%s' reaches (it does "
                    "not resolve to an address); give it with --pmi-addr or "
                    "FERRYRUN_PMI_ADDR\n",
                    first != NULL ? first : "");
            return -1;
        }
    }
    if (ss.ss_family == AF_INET) {
        ((struct sockaddr_in *)&ss)->sin_port = 0;
    } else if (ss.ss_family == AF_INET6) {
        ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    }
    char host[NI_MAXHOST];
    if (getnameinfo((struct sockaddr *)&ss, len, host, sizeof(host), NULL, 0,
                    NI_NUMERICHOST) != 0) {
        fprintf(stderr, "ferryrun: cannot print the PMI address\n");
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        fprintf(stderr, "ferryrun: PMI listener: socket: %s\n", strerror(errno));
        return -1;
    }
    /* Bound to the one address the ranks are told, not to every address of
     * this host: the port is open to whoever reaches that address. */
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 128) != 0) {
        fprintf(stderr, "ferryrun: cannot listen for PMI connections on %s: %s\n", host,
                strerror(errno));
        close(fd);
        return -1;
    }
    len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        fprintf(stderr, "ferryrun: PMI listener: getsockname: %s\n", strerror(errno));
        close(fd);
        return -1;
    }
    int port = ss.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
                                       : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    snprintf(job->pmi_port, sizeof(job->pmi_port), ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d",
             host, port);
    job->listen_fd = fd;
    return 0;
}
