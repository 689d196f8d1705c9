/*
 * A process wedged inside libfabric by a peer that died.
 *
 * libfabric's shm provider (1.17, Debian 12's) guards each process's
 * command queue, in shared memory, with a spin lock that its senders take.
 * A peer SIGKILLed while it holds one leaves it held for good: every later
 * send to that process, and that process's own completion-queue reads,
 * spin inside the provider and never return to ferry, so neither the
 * liveness checks (ofi_live.c) nor the error callback run, and the job
 * hangs. Nothing in the provider's state can be trusted after that (the
 * dead peer was half-way through its queue), so there is no way back.
 *
 * The watchdog makes it an error instead of a hang. Every libfabric call
 * that can spin so (sends, receives, completion reads, RMA) is bracketed by
 * ofi_call_enter/ofi_call_leave, which bump a counter (odd: inside a call).
 * A thread looks at the counter every quarter of FERRY_OFI_WEDGE_TIMEOUT;
 * when one call has lasted that long and a peer process on this host has
 * exited (its own pidfd, kept for as long as the module lives, failed or
 * not), it logs what happened, naming every such peer, and ends the
 * process with OFI_WEDGE_EXIT.
 * A call that long with every local peer alive is only reported (once per
 * call): a live holder will let go.
 *
 * The thread runs only in a module with peers on this host and a timeout;
 * FERRY_OFI_WEDGE_TIMEOUT=0 turns it off.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "btl/ofi/ofi.h"

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static bool exited(const ofi_wedge_peer_t *p)
{
    if (p->pidfd >= 0) {
        struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
        return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
    }
    return kill(p->pid, 0) != 0 && errno == ESRCH;
}

/* Ends the process if a watched peer has exited, naming every one that has
 * (which of them held the lock cannot be told: others it wedged may have
 * been ended by their own watchdogs since). With wd->lock held. */
static void end_if_wedged(ofi_module_t *mod, uint64_t ms)
{
    ofi_wedge_t *wd = &mod->wedge;
    char names[512];
    size_t off = 0;
    int n = 0;
    names[0] = '\0';
    for (int i = 0; i < wd->n; i++) {
        if (!exited(&wd->peers[i]))
            continue;
        if (off < sizeof(names)) {
            int w = snprintf(names + off, sizeof(names) - off, "%srank %d (pid %d)",
                             n > 0 ? ", " : "", wd->peers[i].rank, (int)wd->peers[i].pid);
            off += w > 0 ? (size_t)w : 0;
        }
        n++;
    }
    if (n == 0)
        return;
    rt_log(&mod->super.ctx->log, RT_LOG_ERROR,
           "ofi (%s): stuck for %llu ms inside one libfabric call, and processes on this host "
           "have died: %s; a lock the provider keeps in shared memory, which one of them held, "
           "is never released (libfabric's shm provider cannot recover it), so this process "
           "cannot go on and exits with status %d (FERRY_OFI_WEDGE_TIMEOUT)",
           mod->info->fabric_attr->prov_name, (unsigned long long)ms, names, OFI_WEDGE_EXIT);
    _exit(OFI_WEDGE_EXIT);
}

static void *wedge_main(void *arg)
{
    ofi_module_t *mod = arg;
    ofi_wedge_t *wd = &mod->wedge;
    uint64_t timeout = (uint64_t)mod->p.wedge_timeout_ms;
    uint64_t period = timeout / 4;
    if (period < 10)
        period = 10;
    if (period > 1000)
        period = 1000;
    uint64_t last = 0, since = 0;
    bool reported = false;
    pthread_mutex_lock(&wd->lock);
    while (!wd->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += (time_t)(period / 1000);
        until.tv_nsec += (long)(period % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&wd->cond, &wd->lock, &until);
        if (wd->stop)
            break;
        uint64_t c = atomic_load_explicit(&wd->calls, memory_order_relaxed);
        uint64_t now = mono_ms();
        if ((c & 1) == 0 || c != last) {
            last = c;
            since = now;
            reported = false;
            continue;
        }
        if (now - since < timeout)
            continue;
        end_if_wedged(mod, now - since);
        if (!reported) {
            rt_log(&mod->super.ctx->log, RT_LOG_WARN,
                   "ofi (%s): one libfabric call has lasted %llu ms; every peer process on this "
                   "host is alive, so it waits on",
                   mod->info->fabric_attr->prov_name, (unsigned long long)(now - since));
            reported = true;
        }
    }
    pthread_mutex_unlock(&wd->lock);
    return NULL;
}

void ofi_wedge_init(ofi_module_t *mod)
{
    ofi_wedge_t *wd = &mod->wedge;
    atomic_init(&wd->calls, 0);
    pthread_mutex_init(&wd->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wd->cond, &ca);
    pthread_condattr_destroy(&ca);
    wd->peers = NULL;
    wd->n = wd->cap = 0;
    wd->running = false;
    wd->stop = false;
}

void ofi_wedge_watch(ofi_module_t *mod, const ferry_btl_endpoint_t *ep)
{
    ofi_wedge_t *wd = &mod->wedge;
    if (mod->p.wedge_timeout_ms <= 0 || ep->addr.proc.pid <= 0)
        return;
    pthread_mutex_lock(&wd->lock);
    if (wd->n == wd->cap) {
        int cap = wd->cap > 0 ? 2 * wd->cap : 8;
        ofi_wedge_peer_t *grown = realloc(wd->peers, (size_t)cap * sizeof(*grown));
        if (grown == NULL) {
            pthread_mutex_unlock(&wd->lock);
            return; /* unwatched by the watchdog: a hang stays possible */
        }
        wd->peers = grown;
        wd->cap = cap;
    }
    ofi_wedge_peer_t *p = &wd->peers[wd->n++];
    p->rank = ep->rank;
    p->pid = (pid_t)ep->addr.proc.pid;
    /* Its own descriptor: the module closes ep->pidfd once the peer has
     * failed, and a failed peer is just the one that may hold the lock. */
    p->pidfd = ep->pidfd >= 0 ? fcntl(ep->pidfd, F_DUPFD_CLOEXEC, 0) : -1;
    bool start = !wd->running;
    pthread_mutex_unlock(&wd->lock);
    if (start) {
        if (pthread_create(&wd->thread, NULL, wedge_main, mod) == 0)
            wd->running = true;
        else
            rt_log(&mod->super.ctx->log, RT_LOG_WARN,
                   "ofi: no watchdog thread: a peer on this host that dies holding a lock of "
                   "the provider's would hang this process");
    }
}

void ofi_wedge_fini(ofi_module_t *mod)
{
    ofi_wedge_t *wd = &mod->wedge;
    if (wd->running) {
        pthread_mutex_lock(&wd->lock);
        wd->stop = true;
        pthread_cond_signal(&wd->cond);
        pthread_mutex_unlock(&wd->lock);
        pthread_join(wd->thread, NULL);
        wd->running = false;
    }
    for (int i = 0; i < wd->n; i++)
        if (wd->peers[i].pidfd >= 0)
            close(wd->peers[i].pidfd);
    free(wd->peers);
    wd->peers = NULL;
    wd->n = wd->cap = 0;
    pthread_cond_destroy(&wd->cond);
    pthread_mutex_destroy(&wd->lock);
}
