/*
 * A peer that dies holding a lock of libfabric's shm provider
 * (src/btl/ofi/ofi_wedge.c), on purpose.
 *
 *   ofi_wedge die|stall
 *
 * This program defines pthread_spin_lock (it is linked with its symbols
 * exported, so the provider's calls land here) and passes every call on to
 * the C library's. In the last rank, once the traffic runs, the first lock
 * it takes inside a mapping of /dev/shm (the provider's regions: its own
 * and its peers') is where it stops, holding it:
 *   die    SIGKILL: the lock stays held for good. Every survivor must end:
 *          report the victim and finalize with FERRY_ERR_UNREACH, or be
 *          ended by the watchdog (status 70, its error naming the victim).
 *   stall  it sleeps 3 s holding it, lets go and goes on: everyone is
 *          alive, the watchdog must only warn, and the job ends well.
 * The other ranks send to every rank (the victim included) until a failure
 * is known, or, in stall, a fixed number of messages each.
 *
 * Lines: "ofi_wedge: rank R: ..." on stdout (run_wedge.sh reads them).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/ferry.h>

#define TAG 50
#define MAX_RANGES 64
#define STALL_MSGS 20000

static struct {
    uintptr_t lo, hi;
} g_ranges[MAX_RANGES];
static int g_nranges;
static atomic_int g_armed; /* 1: die, 2: stall */
static int (*g_real_lock)(pthread_spinlock_t *);

/* The provider's regions: every mapping of a file in /dev/shm. */
static void read_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    g_nranges = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL && g_nranges < MAX_RANGES) {
        unsigned long lo, hi;
        if (strstr(line, " /dev/shm/") != NULL && sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
            g_ranges[g_nranges].lo = lo;
            g_ranges[g_nranges].hi = hi;
            g_nranges++;
        }
    }
    if (f != NULL)
        fclose(f);
}

static int in_shm(const volatile void *p)
{
    uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < g_nranges; i++)
        if (a >= g_ranges[i].lo && a < g_ranges[i].hi)
            return 1;
    return 0;
}

int pthread_spin_lock(pthread_spinlock_t *lock)
{
    if (g_real_lock == NULL)
        g_real_lock = (int (*)(pthread_spinlock_t *))dlsym(RTLD_NEXT, "pthread_spin_lock");
    int rc = g_real_lock(lock);
    int mode = atomic_load(&g_armed);
    if (mode != 0 && in_shm(lock)) {
        atomic_store(&g_armed, 0);
        if (mode == 1) {
            printf("ofi_wedge: victim: dies holding a lock at %p\n", (void *)lock);
            fflush(stdout);
            raise(SIGKILL);
        }
        printf("ofi_wedge: victim: holds a lock at %p for 3 s\n", (void *)lock);
        fflush(stdout);
        struct timespec ts = {.tv_sec = 3};
        nanosleep(&ts, NULL);
    }
    return rc;
}

static int g_failures;

static void on_error(ferry_ctx_t *ctx, int peer, int status, const char *msg, void *arg)
{
    (void)ctx, (void)arg;
    if (g_failures++ == 0)
        printf("ofi_wedge: rank %d: told rank %d failed (%s): %s\n", ferry_rank(ctx), peer,
               ferry_strerror(status), msg);
    fflush(stdout);
}

static long g_got;

static void on_msg(ferry_ctx_t *ctx, int src, int tag, const void *data, size_t len, void *arg)
{
    (void)ctx, (void)src, (void)tag, (void)data, (void)len, (void)arg;
    g_got++;
}

static const char *name(int rc)
{
    return rc == FERRY_OK ? "FERRY_OK" : rc == FERRY_ERR_UNREACH ? "FERRY_ERR_UNREACH" : ferry_strerror(rc);
}

int main(int argc, char **argv)
{
    int mode = argc == 2 && strcmp(argv[1], "die") == 0     ? 1
               : argc == 2 && strcmp(argv[1], "stall") == 0 ? 2
                                                            : 0;
    if (mode == 0) {
        fprintf(stderr, "usage: ofi_wedge die|stall\n");
        return 2;
    }
    ferry_ctx_t *ctx;
    if (ferry_init(NULL, &ctx) != FERRY_OK) {
        fprintf(stderr, "ofi_wedge: ferry_init failed\n");
        return 1;
    }
    int me = ferry_rank(ctx), n = ferry_size(ctx), victim = n - 1;
    if (n < 3) {
        printf("SKIPPED: ofi_wedge needs 3 ranks or more\n");
        return 77;
    }
    ferry_set_error_cb(ctx, on_error, NULL);
    ferry_am_register(ctx, TAG, on_msg, NULL);
    /* The victim may leave this barrier, arm and die before a survivor has
     * left it too: the survivor's barrier then fails on the victim, which is
     * a failure it was told of, and it goes straight on to finalize. */
    int first = ferry_barrier(ctx);
    if (first != FERRY_OK && !(first == FERRY_ERR_UNREACH && g_failures > 0 && me != victim)) {
        fprintf(stderr, "ofi_wedge: rank %d: the first barrier failed: %s\n", me,
                ferry_strerror(first));
        return 1;
    }
    if (me == victim) {
        read_maps();
        if (g_nranges == 0) {
            printf("ofi_wedge: victim: no /dev/shm mapping (is the provider shm?)\n");
            return 1;
        }
        atomic_store(&g_armed, mode);
    }
    unsigned char buf[256];
    memset(buf, 0xab, sizeof(buf));
    long sent = 0;
    while (first == FERRY_OK && g_failures == 0 && (mode == 1 || sent < STALL_MSGS)) {
        int dst = (int)(sent % n);
        int rc = ferry_am_send(ctx, dst, TAG, buf, sizeof(buf));
        if (rc == FERRY_OK)
            sent++;
        else if (rc != FERRY_ERR_NO_RESOURCE && !(rc == FERRY_ERR_UNREACH && g_failures > 0)) {
            printf("ofi_wedge: rank %d: FAIL: ferry_am_send: %s\n", me, ferry_strerror(rc));
            return 1;
        }
        ferry_progress(ctx);
    }
    int brc = ferry_barrier(ctx);
    int frc = ferry_finalize(&ctx);
    printf("ofi_wedge: rank %d: sent %ld, got %ld, barrier %s, finalized: %s\n", me, sent,
           g_got, name(brc), name(frc));
    fflush(stdout);
    if (mode == 2)
        return brc == FERRY_OK && frc == FERRY_OK && g_failures == 0 ? 0 : 1;
    return frc == FERRY_ERR_UNREACH ? 0 : 1;
}
