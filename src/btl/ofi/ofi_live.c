/*
 * ofi liveness: knowing that a peer died without waiting on traffic, and
 * never taking a live one for dead.
 *
 * - A peer on this host (same boot, same pid namespace: ofi_proc_id_t in its
 *   address) is watched through a pidfd of its process, opened at
 *   add_procs whether or not we ever talk to it, the scheme sm uses: the
 *   pidfd turns readable once the process has exited, and is immune to pid
 *   reuse (its start time is checked when it is opened). A peer on this
 *   host whose process lives is never failed for being slow: a starved peer
 *   is only slow. Where pidfd_open is missing, kill(pid, 0) stands in.
 * - Any peer that something waits on (a queued fragment, a put or get in
 *   flight, ordered messages it has not acknowledged, a request that ran
 *   out of time) and that has said nothing for FERRY_OFI_PROBE_INTERVAL is
 *   sent a probe (16 bytes); its answer carries its credits. A peer on
 *   another host silent for FERRY_OFI_SEND_TIMEOUT while we wait on it is
 *   failed. Provider errors (a connection reset, a canceled send) fail a
 *   peer at once (ofi_msg.c).
 * - A probe tells the receiver how many messages were sent to it; one whose
 *   messages keep a hole (sent, never arrived, while later ones did or the
 *   probe said so) for FERRY_OFI_SEND_TIMEOUT has lost a message: the
 *   sender is failed, and told so (OFI_T_FAIL), because a message the
 *   provider took and lost would otherwise vanish unreported.
 * - Puts, gets, tracked puts with notification and atomics past their
 *   deadline complete with FERRY_ERR_TIMEOUT (ofi_rdma.c); the peer is then
 *   a suspect and the above decides. The late answer of a put with
 *   notification or an atomic is dropped (an atomic's value is not
 *   written).
 * - Puts and gets whose key was refused as the connection broke wait for
 *   the same verdict: FERRY_ERR_UNREACH if the peer is failed, else
 *   FERRY_ERR_ACCESS once it is known alive (ofi_rdma_release_held).
 *
 * All of it runs from progress, at most every FERRY_OFI_PROBE_INTERVAL.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "btl/ofi/ofi.h"

static int open_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

static void rebuild_pfds(ofi_module_t *mod)
{
    mod->npfds = 0;
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *ep = mod->eps[r];
        if (ep == NULL || !ep->local || ep->pidfd < 0)
            continue;
        mod->pfds[mod->npfds] = (struct pollfd){.fd = ep->pidfd, .events = POLLIN};
        mod->pfd_rank[mod->npfds] = r;
        mod->npfds++;
    }
}

void ofi_live_watch(ofi_module_t *mod, ferry_btl_endpoint_t *ep)
{
    pid_t pid = (pid_t)ep->addr.proc.pid;
    if (mod->pfds == NULL) {
        mod->pfds = calloc((size_t)mod->nranks, sizeof(*mod->pfds));
        mod->pfd_rank = calloc((size_t)mod->nranks, sizeof(*mod->pfd_rank));
        if (mod->pfds == NULL || mod->pfd_rank == NULL) {
            /* Then it is watched like a peer on another host. */
            free(mod->pfds);
            free(mod->pfd_rank);
            mod->pfds = NULL;
            mod->pfd_rank = NULL;
            return;
        }
    }
    ep->local = true;
    ep->pidfd = open_pidfd(pid);
    /* The process that published the address, not another that took its
     * pid since: a start time that differs (or none: no such process)
     * means it is gone already, which the first check finds. */
    uint64_t start = ofi_proc_start_time(pid);
    if (ep->addr.proc.start_time != 0 && start != ep->addr.proc.start_time) {
        rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
               "ofi: rank %d (pid %d) is no longer running at add_procs", ep->rank, (int)pid);
        if (ep->pidfd >= 0)
            close(ep->pidfd);
        ep->pidfd = -1;
        ep->addr.proc.pid = -1; /* dead: the check says so */
    }
    ofi_wedge_watch(mod, ep);
    rebuild_pfds(mod);
}

void ofi_live_unwatch(ofi_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (!ep->local)
        return;
    ep->local = false;
    if (ep->pidfd >= 0)
        close(ep->pidfd);
    ep->pidfd = -1;
    if (mod->pfds != NULL)
        rebuild_pfds(mod);
}

/* Has the watched process of ep exited? */
static bool process_gone(const ferry_btl_endpoint_t *ep, const struct pollfd *pfd)
{
    if (ep->pidfd >= 0)
        return pfd != NULL && (pfd->revents & (POLLIN | POLLHUP | POLLERR)) != 0;
    if (ep->addr.proc.pid <= 0)
        return true;
    return kill((pid_t)ep->addr.proc.pid, 0) != 0 && errno == ESRCH;
}

/* A watched process exited. What it sent before is still good: taken
 * first, so that a CLOSE it sent (a clean finalize) is seen, and only then
 * is it judged. */
static void process_exited(ofi_module_t *mod, ferry_btl_endpoint_t *ep)
{
    for (int i = 0; i < 64 && ep->state == OFI_EP_READY && ofi_poll_cq(mod) > 0; i++)
        ;
    if (ep->state != OFI_EP_READY)
        return;
    char why[96];
    snprintf(why, sizeof(why), "its process (pid %d) exited", (int)ep->addr.proc.pid);
    ofi_ep_fail(mod, ep, FERRY_ERR_UNREACH, false, why);
}

static int check_processes(ofi_module_t *mod)
{
    int n = 0;
    if (mod->npfds > 0 && poll(mod->pfds, (nfds_t)mod->npfds, 0) > 0) {
        /* Ranks first: failing one rebuilds the array. */
        int gone[64];
        int ngone = 0;
        for (int i = 0; i < mod->npfds && ngone < 64; i++)
            if (mod->pfds[i].revents & (POLLIN | POLLHUP | POLLERR))
                gone[ngone++] = mod->pfd_rank[i];
        for (int i = 0; i < ngone; i++) {
            ferry_btl_endpoint_t *ep = mod->eps[gone[i]];
            if (ep != NULL && ep->state == OFI_EP_READY) {
                process_exited(mod, ep);
                n++;
            }
        }
    }
    /* Local peers without a pidfd. */
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *ep = mod->eps[r];
        if (ep != NULL && ep->local && ep->pidfd < 0 && ep->state == OFI_EP_READY &&
            process_gone(ep, NULL)) {
            process_exited(mod, ep);
            n++;
        }
    }
    return n;
}

static bool waits_on(const ferry_btl_endpoint_t *ep)
{
    return !util_list_empty(&ep->queue) || ep->rdma_inflight > 0 || ep->putn.ninflight > 0 ||
           !util_list_empty(&ep->held) || ep->wire.tx_next != ep->wire.tx_acked || ep->suspect;
}

/* One peer's silence, holes and probes. */
static int check_peer(ofi_module_t *mod, ferry_btl_endpoint_t *ep, uint64_t now)
{
    const uint64_t ms = 1000000ull;
    uint64_t timeout = (uint64_t)mod->p.send_timeout_ms * ms;
    uint64_t interval = (uint64_t)mod->p.probe_interval_ms * ms;

    /* A hole in its messages that does not close: one was lost. */
    if (ep->wire.rx_known != ep->wire.rx_next) {
        if (ep->gap_since_ns == 0 || ep->gap_rx_next != ep->wire.rx_next) {
            ep->gap_since_ns = now;
            ep->gap_rx_next = ep->wire.rx_next;
        } else if (now - ep->gap_since_ns > timeout) {
            char why[128];
            snprintf(why, sizeof(why),
                     "its message %u never arrived in %lld ms although later ones were sent",
                     ep->wire.rx_next, mod->p.send_timeout_ms);
            ofi_ep_fail(mod, ep, FERRY_ERR_UNREACH, true, why);
            return 1;
        }
    } else {
        ep->gap_since_ns = 0;
    }

    if (ep->heard || !waits_on(ep)) {
        /* Silence counts only while something waits on it. */
        ep->quiet_since_ns = now;
        if (ep->heard)
            ep->suspect = false;
        ep->heard = false;
        return 0;
    }
    uint64_t quiet = now - ep->quiet_since_ns;
    if (quiet >= interval && now - ep->probe_sent_ns >= interval) {
        if (ofi_post_ctrl(mod, ep, OFI_T_PROBE, ep->wire.tx_next) == FERRY_OK)
            ep->probe_sent_ns = now;
    }
    if (ep->local) {
        /* Its process is alive (check_processes would have failed it):
         * slow, not dead. */
        ep->suspect = false;
        return 0;
    }
    if (quiet > timeout) {
        char why[128];
        snprintf(why, sizeof(why), "it answered nothing for %lld ms while work waited on it",
                 (long long)(quiet / ms));
        ofi_ep_fail(mod, ep, FERRY_ERR_UNREACH, false, why);
        return 1;
    }
    return 0;
}

int ofi_live_check(ofi_module_t *mod, uint64_t now)
{
    if (now < mod->next_check_ns)
        return 0;
    mod->next_check_ns = now + (uint64_t)mod->p.probe_interval_ms * 1000000ull;
    int n = check_processes(mod);
    n += ofi_rdma_expire(mod, now);
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *ep = mod->eps[r];
        if (ep == NULL)
            continue;
        if (ep->state == OFI_EP_FAILED && ep->tell_failed) {
            /* The notice of its failure, once per check until the tries
             * run out. */
            (void)ofi_post_ctrl(mod, ep, OFI_T_FAIL, (uint32_t)-ep->fail_status);
            if (ep->fail_tries == 0 || --ep->fail_tries == 0)
                ep->tell_failed = false;
            continue;
        }
        if (ep->state != OFI_EP_READY || r == mod->super.ctx->rank)
            continue;
        n += ofi_rdma_release_held(mod, ep, now);
        n += check_peer(mod, ep, now);
    }
    return n;
}
