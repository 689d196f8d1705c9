/*
 * Endpoints: lazy connection to a peer's segment, discovery of new senders,
 * and failure detection.
 *
 * A peer's death is seen through a pidfd (readable once the process has
 * exited, zombie or not, and immune to pid reuse), polled at most every
 * FERRY_SM_FAIL_TIMEOUT/4 from progress. Where pidfd_open is missing, kill(pid, 0)
 * stands in.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "btl/sm/sm.h"
#include "rt/modex.h"

static int open_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

/* Checks a copy of a peer's header against what we expect of it. The copy
 * is ours: the header in the segment may change while we look. */
static int check_peer_hdr(sm_module_t *mod, ferry_btl_endpoint_t *ep, const sm_seg_hdr_t *h,
                          size_t size)
{
    const char *what = NULL;
    if (h->magic != SM_MAGIC || h->version != SM_VERSION)
        what = "not a ferry sm segment of this version";
    else if (h->rank != ep->rank || h->nchan != (uint32_t)mod->nranks)
        what = "belongs to another rank or job";
    else if (h->ring_size != mod->p.ring_size)
        what = "has another ring size (FERRY_SM_RING_SIZE must agree across ranks)";
    else if (h->seg_size > size || h->chan_off > size ||
             h->chan_stride < sizeof(sm_chan_t) + h->ring_size ||
             (size - h->chan_off) / h->chan_stride < h->nchan ||
             h->reg_off > size ||
             (size - h->reg_off) / sizeof(sm_reg_entry_t) < h->reg_slots ||
             h->reg_off % _Alignof(sm_reg_entry_t) != 0 || h->chan_off % SM_LINE != 0 ||
             h->chan_stride % SM_LINE != 0)
        what = "has an inconsistent layout";
    else if (h->get_slots == 0)
        what = "offers no get slots";
    if (what != NULL) {
        rt_log(&mod->super.ctx->log, RT_LOG_ERROR, "sm: segment of rank %d %s", ep->rank, what);
        return FERRY_ERR_PROTO;
    }
    return FERRY_OK;
}

int sm_addr_decode(const void *val, size_t len, sm_addr_t *addr)
{
    static const char prefix[] = "/ferry-";
    if (val == NULL || len != sizeof(*addr))
        return FERRY_ERR_PROTO;
    memcpy(addr, val, sizeof(*addr));
    size_t n = strnlen(addr->name, sizeof(addr->name));
    /* Only a segment ferry names: a name of another program's shared
     * memory would have us map it read-write and write rings into it. */
    if (n == sizeof(addr->name) || n <= sizeof(prefix) - 1 ||
        strncmp(addr->name, prefix, sizeof(prefix) - 1) != 0 ||
        strchr(addr->name + 1, '/') != NULL)
        return FERRY_ERR_PROTO;
    if (addr->version != SM_VERSION || addr->pid <= 0 || addr->seg_size < sizeof(sm_seg_hdr_t) ||
        addr->seg_size > (uint64_t)SIZE_MAX / 2)
        return FERRY_ERR_PROTO;
    return FERRY_OK;
}

int sm_ep_connect(sm_module_t *mod, ferry_btl_endpoint_t *ep)
{
    ferry_ctx_t *ctx = mod->super.ctx;
    if (ep->state == SM_EP_CONNECTED)
        return FERRY_OK;
    if (ep->state == SM_EP_FAILED || ep->state == SM_EP_CLOSED)
        return FERRY_ERR_UNREACH;

    if (ep->rank == ctx->rank) {
        ep->peer_base = mod->seg;
        ep->peer_size = mod->seg_size;
        ep->pid = getpid();
        snprintf(ep->peer_name, sizeof(ep->peer_name), "%s", mod->seg_name);
    } else {
        void *val = NULL;
        size_t len = 0;
        sm_addr_t addr;
        int rc = rt_modex_get(ctx->modex, ep->rank, "btl.sm", &val, &len);
        if (rc != FERRY_OK)
            return rc == FERRY_ERR_NOT_FOUND ? FERRY_ERR_UNREACH : rc;
        rc = sm_addr_decode(val, len, &addr);
        free(val);
        if (rc != FERRY_OK) {
            rt_log(&ctx->log, RT_LOG_ERROR, "sm: rank %d published a malformed address",
                   ep->rank);
            return rc;
        }
        int fd = shm_open(addr.name, O_RDWR, 0);
        if (fd < 0)
            return rt_log_errno(&ctx->log, "sm: opening a peer's segment", errno);
        struct stat st;
        if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < addr.seg_size ||
            addr.seg_size < sizeof(sm_seg_hdr_t)) {
            close(fd);
            rt_log(&ctx->log, RT_LOG_ERROR, "sm: segment of rank %d is truncated", ep->rank);
            return FERRY_ERR_PROTO;
        }
        void *base = mmap(NULL, addr.seg_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (base == MAP_FAILED)
            return rt_log_errno(&ctx->log, "sm: mapping a peer's segment", errno);
        ep->peer_base = base;
        ep->peer_size = addr.seg_size;
        ep->pid = addr.pid;
        snprintf(ep->peer_name, sizeof(ep->peer_name), "%s", addr.name);
    }
    /* Read once, checked, and used only from here on (our own header too:
     * peers can write it). */
    sm_seg_hdr_t h;
    memcpy(&h, ep->peer_base, sizeof(h));
    int crc = check_peer_hdr(mod, ep, &h, ep->peer_size);
    if (crc != FERRY_OK) {
        if (ep->peer_base != mod->seg)
            munmap(ep->peer_base, ep->peer_size);
        ep->peer_base = NULL;
        return crc;
    }
    ep->peer_hdr = (sm_seg_hdr_t *)ep->peer_base;
    ep->peer_reg_off = h.reg_off;
    ep->peer_reg_slots = h.reg_slots;
    ep->peer_get_slots = h.get_slots;
    ep->out = (sm_chan_t *)(ep->peer_base + h.chan_off + (uint64_t)ctx->rank * h.chan_stride);
    /* Resume where an earlier connection of ours stopped (rings outlive
     * del_procs): the receiver's position is exactly what we wrote. */
    ep->cached_tail = atomic_load_explicit(&ep->out->tail, memory_order_acquire);
    if (ep->head < ep->cached_tail)
        ep->head = ep->cached_tail;
    ep->out->sender_pid = getpid();
    atomic_store_explicit(&ep->out->connected, 1, memory_order_release);
    atomic_fetch_add_explicit(&ep->peer_hdr->connect_seq, 1, memory_order_acq_rel);
    if (ep->pidfd < 0 && ep->rank != ctx->rank)
        ep->pidfd = open_pidfd(ep->pid);
    ep->state = SM_EP_CONNECTED;
    return FERRY_OK;
}

void sm_poll_add(sm_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (ep->polled)
        return;
    ep->in = sm_chan_of(mod, ep->rank);
    ep->rlap_start = ep->rpos & ~(uint64_t)(mod->p.ring_size - 1);
    ep->rlap = sm_lap(ep->rpos, mod->p.ring_size);
    mod->poll[mod->npoll++] = ep;
    ep->polled = true;
}

static void poll_remove(sm_module_t *mod, ferry_btl_endpoint_t *ep)
{
    for (int i = 0; i < mod->npoll; i++) {
        if (mod->poll[i] == ep) {
            memmove(&mod->poll[i], &mod->poll[i + 1],
                    (size_t)(mod->npoll - i - 1) * sizeof(mod->poll[0]));
            mod->npoll--;
            break;
        }
    }
    ep->polled = false;
}

int sm_scan_new_senders(sm_module_t *mod)
{
    uint64_t seq = atomic_load_explicit(&mod->hdr->connect_seq, memory_order_acquire);
    int found = 0;
    if (seq == mod->seen_connect_seq)
        return 0;
    mod->seen_connect_seq = seq;
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *ep = mod->eps[r];
        sm_chan_t *ch = sm_chan_of(mod, r);
        if (ep == NULL || ep->polled || ep->state == SM_EP_FAILED || ep->state == SM_EP_CLOSED ||
            !atomic_load_explicit(&ch->connected, memory_order_acquire))
            continue;
        if (ep->pidfd < 0 && r != mod->super.ctx->rank) {
            ep->pid = ch->sender_pid;
            ep->pidfd = open_pidfd(ep->pid);
        }
        sm_poll_add(mod, ep);
        found++;
    }
    return found;
}

static void fail_list(sm_module_t *mod, util_list_t *list, int status)
{
    util_list_item_t *it;
    while ((it = util_list_pop_front(list)) != NULL)
        sm_complete(mod, UTIL_CONTAINER_OF(it, btl_frag_t, link), status);
}

/* Did the peer finalize before it went (so its exit is no failure)? */
static bool peer_closed(const sm_module_t *mod, const ferry_btl_endpoint_t *ep)
{
    if (ep->polled && atomic_load_explicit(&ep->in->closed, memory_order_acquire))
        return true;
    return ep->peer_hdr != NULL &&
           atomic_load_explicit(&ep->peer_hdr->closing, memory_order_acquire);
}

static bool ep_has_work(const ferry_btl_endpoint_t *ep)
{
    return !util_list_empty(&ep->queue) || !util_list_empty(&ep->ring_puts) ||
           !util_list_empty(&ep->iputs) || !util_list_empty(&ep->gets) ||
           !util_list_empty(&ep->igets) || ep->rdma_inflight > 0 ||
           btl_amo_inflight(&ep->amo) > 0;
}


void sm_announce_close(sm_module_t *mod)
{
    if (mod->hdr != NULL)
        atomic_store_explicit(&mod->hdr->closing, 1, memory_order_release);
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *ep = mod->eps != NULL ? mod->eps[r] : NULL;
        if (ep != NULL && ep->state == SM_EP_CONNECTED)
            atomic_store_explicit(&ep->out->closed, 1, memory_order_release);
    }
}

void sm_ep_fail(sm_module_t *mod, ferry_btl_endpoint_t *ep, const char *why)
{
    if (ep->state == SM_EP_FAILED || ep->state == SM_EP_CLOSED)
        return;
    ep->state = SM_EP_FAILED;
    fail_list(mod, &ep->queue, FERRY_ERR_UNREACH);
    sm_rdma_fail(mod, ep, FERRY_ERR_UNREACH);
    if (ep->polled)
        poll_remove(mod, ep);
    btl_base_report_error(&mod->super, FERRY_ERR_UNREACH, ep->rank, "rank %d (pid %d): %s",
                          ep->rank, (int)ep->pid, why);
}

void sm_ep_release(sm_module_t *mod, ferry_btl_endpoint_t *ep)
{
    fail_list(mod, &ep->queue, FERRY_ERR_UNREACH);
    sm_rdma_fail(mod, ep, FERRY_ERR_UNREACH);
    if (ep->polled)
        poll_remove(mod, ep);
    if (ep->sending) {
        util_list_remove(&mod->sending, &ep->sending_link);
        ep->sending = false;
    }
    sm_ep_unmap_heaps(ep);
    if (ep->peer_base != NULL && ep->peer_base != mod->seg)
        munmap(ep->peer_base, ep->peer_size);
    if (ep->pidfd >= 0)
        close(ep->pidfd);
    sm_rdma_ep_fini(ep);
    free(ep->hdr_bits);
    free(ep);
}

static bool peer_dead(const ferry_btl_endpoint_t *ep)
{
    if (ep->pidfd >= 0) {
        struct pollfd pfd = {.fd = ep->pidfd, .events = POLLIN};
        return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR));
    }
    return ep->pid > 0 && kill(ep->pid, 0) != 0 && errno == ESRCH;
}

/* Called from progress: every so often, looks for peers that have died. */
int sm_check_peers(sm_module_t *mod)
{
    uint64_t now = rt_now_coarse_ns();
    if (now < mod->next_check_ns)
        return 0;
    mod->next_check_ns = now + (uint64_t)mod->p.fail_timeout_ms * 1000000u / 4;
    int n = 0;
    for (int r = 0; r < mod->nranks; r++) {
        ferry_btl_endpoint_t *ep = mod->eps[r];
        if (ep == NULL || ep->state == SM_EP_FAILED || ep->state == SM_EP_CLOSED ||
            r == mod->super.ctx->rank)
            continue;
        if ((ep->state != SM_EP_CONNECTED && !ep->polled) || !peer_dead(ep))
            continue;
        /* What it sent before it died is still good: take it first. */
        if (ep->polled)
            while (sm_poll_channel(mod, ep) > 0)
                ;
        if (peer_closed(mod, ep) && !ep_has_work(ep)) {
            /* A clean exit after ferry_finalize: nothing to report. */
            ep->state = SM_EP_CLOSED;
            if (ep->polled)
                poll_remove(mod, ep);
        } else {
            sm_ep_fail(mod, ep, peer_closed(mod, ep) ? "process finalized with work pending to it"
                                                     : "process exited");
        }
        n++;
    }
    return n;
}
