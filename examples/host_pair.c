/*
 * host_pair: a host that embeds ferry (include/ferry/host.h) and plays the
 * launcher for a job of one or two processes on this machine. It forks the
 * second process itself, exchanges the addresses over a socketpair, takes
 * ferry's log lines into its own, and removes the shared-memory files of a
 * process that did not remove them (one that was killed).
 *
 *   host_pair [-n 1|2] [-k]
 *
 * Each process pings the other with an active message and writes into the
 * other's memory with a put; rank 0 checks the answers. -k makes rank 1
 * kill itself after the exchange: rank 0 is told, through ferry's error
 * callback, and the launcher still removes rank 1's files. Exit status 0
 * when everything checked out. FERRY_BTL chooses the transports as usual
 * (sm on one host by default; FERRY_BTL=tcp works too).
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/ferry.h>
#include <ferry/host.h>

#define KEYS_MAX 32
#define PING_TAG 1

/* The exchange: this process's values, then the peer's after the fence. */
typedef struct kv {
    char key[64];
    void *val;
    size_t len;
} kv_t;

typedef struct host_state {
    int rank, size;
    int sock;        /* to the other process; -1 in a job of one */
    int cleanup_fd;  /* to the launcher: paths to remove if we die */
    kv_t mine[KEYS_MAX], theirs[KEYS_MAX];
    int n_mine, n_theirs;
} host_state_t;

static int put_cb(void *arg, const char *key, const void *val, size_t len)
{
    host_state_t *h = arg;
    if (h->n_mine == KEYS_MAX || strlen(key) >= sizeof(h->mine[0].key))
        return FERRY_ERR_NO_MEMORY;
    kv_t *kv = &h->mine[h->n_mine++];
    snprintf(kv->key, sizeof(kv->key), "%s", key);
    kv->val = malloc(len > 0 ? len : 1);
    if (kv->val == NULL)
        return FERRY_ERR_NO_MEMORY;
    memcpy(kv->val, val, len);
    kv->len = len;
    return FERRY_OK;
}

/* The exchange's values, once ferry is done with them. */
static void store_free(host_state_t *h)
{
    for (int i = 0; i < h->n_mine; i++)
        free(h->mine[i].val);
    for (int i = 0; i < h->n_theirs; i++)
        free(h->theirs[i].val);
    h->n_mine = h->n_theirs = 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
    for (const char *p = buf; len > 0;) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return FERRY_ERR_IO;
        p += n;
        len -= (size_t)n;
    }
    return FERRY_OK;
}

static int read_all(int fd, void *buf, size_t len)
{
    for (char *p = buf; len > 0;) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return FERRY_ERR_IO;
        p += n;
        len -= (size_t)n;
    }
    return FERRY_OK;
}

/* Sends every value, then reads the peer's: both sides do the same, so it
 * is also a barrier. (The values are small, so the two writes never fill
 * the socketpair's buffer and block each other.) */
static int fence_cb(void *arg)
{
    host_state_t *h = arg;
    if (h->sock < 0)
        return FERRY_OK;
    uint32_t n = (uint32_t)h->n_mine;
    int rc = write_all(h->sock, &n, sizeof(n));
    for (int i = 0; rc == FERRY_OK && i < h->n_mine; i++) {
        uint64_t len = h->mine[i].len;
        rc = write_all(h->sock, h->mine[i].key, sizeof(h->mine[i].key));
        if (rc == FERRY_OK)
            rc = write_all(h->sock, &len, sizeof(len));
        if (rc == FERRY_OK)
            rc = write_all(h->sock, h->mine[i].val, h->mine[i].len);
    }
    if (rc == FERRY_OK)
        rc = read_all(h->sock, &n, sizeof(n));
    if (rc == FERRY_OK && n > KEYS_MAX)
        rc = FERRY_ERR_PROTO;
    for (uint32_t i = 0; rc == FERRY_OK && i < n; i++) {
        kv_t *kv = &h->theirs[h->n_theirs];
        uint64_t len;
        rc = read_all(h->sock, kv->key, sizeof(kv->key));
        if (rc == FERRY_OK)
            rc = read_all(h->sock, &len, sizeof(len));
        if (rc == FERRY_OK && (len > (1u << 20) || kv->key[sizeof(kv->key) - 1] != '\0'))
            rc = FERRY_ERR_PROTO;
        if (rc == FERRY_OK && (kv->val = malloc(len > 0 ? len : 1)) == NULL)
            rc = FERRY_ERR_NO_MEMORY;
        if (rc == FERRY_OK && (rc = read_all(h->sock, kv->val, len)) != FERRY_OK)
            free(kv->val);
        if (rc == FERRY_OK) {
            kv->len = len;
            h->n_theirs++;
        }
    }
    return rc;
}

static int get_cb(void *arg, int rank, const char *key, void **val_out, size_t *len_out)
{
    host_state_t *h = arg;
    for (int i = 0; i < h->n_theirs; i++) {
        if (strcmp(h->theirs[i].key, key) != 0)
            continue;
        void *copy = malloc(h->theirs[i].len > 0 ? h->theirs[i].len : 1);
        if (copy == NULL)
            return FERRY_ERR_NO_MEMORY;
        memcpy(copy, h->theirs[i].val, h->theirs[i].len);
        *val_out = copy;
        *len_out = h->theirs[i].len;
        return FERRY_OK;
    }
    return FERRY_ERR_NOT_FOUND;
}

static int same_host_cb(void *arg, int rank)
{
    return 1; /* both processes run here */
}

static void log_cb(void *arg, int level, const char *line)
{
    const host_state_t *h = arg;
    fprintf(stderr, "[host_pair %d] %s\n", h->rank, line);
}

/* The launcher removes these if this process ends without removing them. */
static int cleanup_cb(void *arg, const char *path)
{
    host_state_t *h = arg;
    dprintf(h->cleanup_fd, "%s\n", path);
    return FERRY_OK;
}

/* ---- what the job does ---- */

static int pings;

static void on_ping(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len,
                    void *arg)
{
    pings++;
}

static int failed_peer = -1;

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    failed_peer = peer;
}

static int run(host_state_t *h, bool kill_rank1)
{
    const ferry_host_t host = {
        .version = FERRY_HOST_VERSION,
        .rank = h->rank,
        .size = h->size,
        .job_id = getenv("HOST_PAIR_JOB"),
        .arg = h,
        .modex_put = put_cb,
        .modex_fence = fence_cb,
        .modex_get = get_cb,
        .same_host = same_host_cb,
        .log = log_cb,
        .cleanup = cleanup_cb,
    };
    ferry_ctx_t *ctx;
    int rc = ferry_host_init(&host, NULL, &ctx);
    if (rc != FERRY_OK) {
        fprintf(stderr, "rank %d: ferry_host_init: %s\n", h->rank, ferry_strerror(rc));
        store_free(h);
        return 1;
    }
    int peer = (h->rank + 1) % h->size;
    uint64_t *inbox;
    ferry_mem_t *mem = NULL;
    ferry_rkey_t rkey;
    if ((rc = ferry_set_error_cb(ctx, on_error, NULL)) != FERRY_OK ||
        (rc = ferry_am_register(ctx, PING_TAG, on_ping, NULL)) != FERRY_OK ||
        (rc = ferry_mem_alloc(ctx, sizeof(*inbox), FERRY_ACCESS_REMOTE_WRITE, (void **)&inbox,
                              &mem)) != FERRY_OK ||
        (rc = ferry_mem_rkey(mem, &rkey)) != FERRY_OK)
        goto out;
    *inbox = 0;
    /* The keys go round with the same exchange as the addresses would. */
    ferry_rkey_t peer_rkey = rkey;
    uint64_t peer_addr = (uint64_t)(uintptr_t)inbox;
    if (h->sock >= 0 &&
        ((rc = write_all(h->sock, &rkey, sizeof(rkey))) != FERRY_OK ||
         (rc = write_all(h->sock, &peer_addr, sizeof(peer_addr))) != FERRY_OK ||
         (rc = read_all(h->sock, &peer_rkey, sizeof(peer_rkey))) != FERRY_OK ||
         (rc = read_all(h->sock, &peer_addr, sizeof(peer_addr))) != FERRY_OK))
        goto out;
    uint64_t word = 0x1000 + (uint64_t)h->rank;
    /* A transport out of buffers (or still connecting) says
     * FERRY_ERR_NO_RESOURCE: progress, and try again. */
    while ((rc = ferry_am_send(ctx, peer, PING_TAG, "ping", 4)) == FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    while (rc == FERRY_OK && (rc = ferry_put(ctx, peer, &word, sizeof(word), NULL, peer_addr,
                                             &peer_rkey, NULL, NULL)) == FERRY_ERR_NO_RESOURCE)
        ferry_progress(ctx);
    if (rc != FERRY_OK || (rc = ferry_flush(ctx, peer)) != FERRY_OK)
        goto out;
    if (kill_rank1 && h->rank == 1)
        raise(SIGKILL); /* with its segment in /dev/shm */
    if (kill_rank1) {
        while (failed_peer < 0 && ferry_progress(ctx) >= 0)
            ;
        printf("rank %d: saw rank %d fail\n", h->rank, failed_peer);
    } else {
        if ((rc = ferry_barrier(ctx)) != FERRY_OK)
            goto out;
        if (pings != 1 || *inbox != 0x1000 + (uint64_t)peer) {
            fprintf(stderr, "rank %d: %d pings, inbox %#llx\n", h->rank, pings,
                    (unsigned long long)*inbox);
            rc = FERRY_ERR;
        } else {
            printf("rank %d of %d: ping and put from rank %d arrived\n", h->rank, h->size,
                   peer);
        }
    }
out:
    if (rc != FERRY_OK)
        fprintf(stderr, "rank %d: %s\n", h->rank, ferry_strerror(rc));
    if (mem != NULL)
        ferry_mem_free(ctx, mem);
    int frc = ferry_finalize(&ctx);
    store_free(h);
    return rc == FERRY_OK && frc == FERRY_OK ? 0 : 1;
}

/* ---- the launcher ---- */

/* Removes what a process registered and did not remove itself. */
static void remove_leftovers(int fd)
{
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    buf[n > 0 ? n : 0] = '\0';
    for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n"))
        if (unlink(line) == 0)
            printf("launcher: removed %s, left by a process that was killed\n", line);
}

int main(int argc, char **argv)
{
    int size = 2;
    bool kill_rank1 = false;
    for (int c; (c = getopt(argc, argv, "n:k")) != -1;) {
        if (c == 'n' && (strcmp(optarg, "1") == 0 || strcmp(optarg, "2") == 0)) {
            size = atoi(optarg);
        } else if (c == 'k') {
            kill_rank1 = true;
        } else {
            fprintf(stderr, "usage: host_pair [-n 1|2] [-k]\n");
            return 2;
        }
    }
    if (kill_rank1 && size != 2) {
        fprintf(stderr, "host_pair: -k needs two processes\n");
        return 2;
    }
    char job[64];
    snprintf(job, sizeof(job), "host_pair-%ld", (long)getpid());
    setenv("HOST_PAIR_JOB", job, 1);
    int sv[2] = {-1, -1}, cl[2];
    if ((size == 2 && socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) || pipe(cl) != 0) {
        perror("host_pair");
        return 1;
    }
    host_state_t h = {.rank = 0, .size = size, .sock = sv[0], .cleanup_fd = cl[1]};
    pid_t child = -1;
    if (size == 2) {
        fflush(NULL);
        child = fork();
        if (child < 0) {
            perror("host_pair: fork");
            return 1;
        }
        if (child == 0) {
            close(sv[0]);
            h.rank = 1;
            h.sock = sv[1];
            exit(run(&h, kill_rank1));
        }
        close(sv[1]);
    }
    int status = run(&h, kill_rank1);
    int wstatus = 0;
    if (child > 0 && waitpid(child, &wstatus, 0) == child) {
        bool killed = WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL;
        if (kill_rank1 ? !killed : !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0))
            status = 1;
    }
    close(cl[1]);
    remove_leftovers(cl[0]);
    return status;
}
