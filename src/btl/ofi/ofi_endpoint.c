/*
 * ofi endpoints: every peer's address in the address vector from the start,
 * the queue of work waiting for transmit slots, the window or the provider,
 * and failure.
 *
 * Why all addresses at once: with FI_SOURCE a message arrives with the
 * fi_addr of its sender, and a sender whose address is not in the vector
 * arrives as FI_ADDR_NOTAVAIL, a stranger, whatever it claims. Had ranks
 * been inserted on first use, a genuine peer's first message could come
 * before we ever sent to it and be taken for a stranger's. add_procs runs
 * before progress is first called, and both providers make completions
 * (and name their sources) only in progress, so every message of a rank of
 * the job finds it in the vector.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "btl/ofi/ofi.h"
#include "rt/modex.h"

/* Reads /proc/PID/stat's start time (field 22, after the command name in
 * parentheses, which may hold anything). 0 when it cannot. */
uint64_t ofi_proc_start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return 0;
    /* p is at ")", then a space before field 3 (state); the start time is
     * field 22, 19 spaces on. */
    p++;
    for (int field = 3; field < 22 && p != NULL; field++)
        p = strchr(p + 1, ' ');
    if (p == NULL)
        return 0;
    return strtoull(p + 1, NULL, 10);
}

void ofi_proc_id_self(ofi_proc_id_t *id)
{
    memset(id, 0, sizeof(*id));
    id->pid = (int32_t)getpid();
    id->start_time = ofi_proc_start_time(getpid());
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) == 0)
        id->pidns = ((uint64_t)st.st_dev << 32) ^ (uint64_t)st.st_ino;
    /* The boot's id, 36 characters of hex and dashes. */
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        char text[64] = "";
        if (fgets(text, sizeof(text), f) != NULL) {
            size_t k = 0;
            for (const char *c = text; *c != '\0' && k < 32; c++) {
                int v = *c >= '0' && *c <= '9'   ? *c - '0'
                        : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10
                                                 : -1;
                if (v < 0)
                    continue;
                id->boot_id[k / 2] = (uint8_t)(id->boot_id[k / 2] << 4 | v);
                k++;
            }
            if (k != 32)
                memset(id->boot_id, 0, sizeof(id->boot_id));
        }
        fclose(f);
    }
}

/* Does the peer run on this host, in our pid namespace? */
static bool same_host(const ofi_proc_id_t *mine, const ofi_proc_id_t *peer)
{
    static const uint8_t zero[16];
    return memcmp(mine->boot_id, zero, sizeof(zero)) != 0 &&
           memcmp(mine->boot_id, peer->boot_id, sizeof(zero)) == 0 && mine->pidns != 0 &&
           mine->pidns == peer->pidns && peer->pid > 0;
}

/* Reads a peer's address from the modex; false when it has none for this
 * module, or it is malformed or from another provider (logged at debug). */
static bool read_peer_addr(ofi_module_t *mod, int rank, ofi_addr_t *addr_out)
{
    void *val = NULL;
    size_t len = 0;
    bool ok = false;
    if (rt_modex_get(mod->super.ctx->modex, rank, mod->modex_key, &val, &len) != FERRY_OK)
        return false;
    if (len == sizeof(ofi_addr_t)) {
        memcpy(addr_out, val, sizeof(*addr_out));
        addr_out->prov[OFI_PROV_NAME_MAX - 1] = '\0';
        /* Lengths may differ (shm's names hold the process id). */
        ok = addr_out->version == OFI_ADDR_VERSION && addr_out->addrlen > 0 &&
             addr_out->addrlen <= OFI_ADDR_MAX && strcmp(addr_out->prov, mod->my_addr.prov) == 0;
    }
    if (!ok)
        rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
               "ofi: rank %d published no usable %s address (%zu bytes); not reachable", rank,
               mod->modex_key, len);
    free(val);
    return ok;
}

static ferry_btl_endpoint_t *ep_new(ofi_module_t *mod, int rank, const ofi_addr_t *addr)
{
    ferry_btl_endpoint_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return NULL;
    ep->mod = mod;
    ep->rank = rank;
    ep->state = OFI_EP_NEW;
    ep->addr = *addr;
    ep->fi_addr = FI_ADDR_NOTAVAIL;
    ep->pidfd = -1;
    util_list_init(&ep->queue);
    util_list_init(&ep->held);
    ofi_wire_peer_init(&ep->wire);
    ofi_putn_peer_init(&ep->putn);
    return ep;
}

/* Inserts ep's address into the vector; false (logged) when it cannot. One
 * address per call: providers read a batch differently (shm takes its
 * addresses as consecutive strings, whatever their published length). */
static bool insert_addr(ofi_module_t *mod, ferry_btl_endpoint_t *ep)
{
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    int got = fi_av_insert(mod->av, ep->addr.addr, 1, &fa, 0, NULL);
    if (got == 1 && fa != FI_ADDR_NOTAVAIL && fa < mod->rank_of_len && mod->rank_of[fa] == -1) {
        ep->fi_addr = fa;
        mod->rank_of[fa] = ep->rank;
        return true;
    }
    rt_log(&mod->super.ctx->log, RT_LOG_WARN,
           "ofi: rank %d's address could not be inserted into the address vector (%d, fi_addr "
           "%llu); not reachable through ofi",
           ep->rank, got, (unsigned long long)fa);
    if (got == 1 && fa != FI_ADDR_NOTAVAIL && (fa >= mod->rank_of_len || mod->rank_of[fa] != -1))
        fi_av_remove(mod->av, &fa, 1, 0);
    return false;
}

int ofi_ep_add(ofi_module_t *mod, size_t n, const ferry_btl_proc_t *procs)
{
    for (size_t i = 0; i < n; i++) {
        int r = procs[i].rank;
        if (r < 0 || r >= mod->nranks || mod->eps[r] != NULL)
            continue;
        ofi_addr_t addr;
        if (!read_peer_addr(mod, r, &addr))
            continue;
        ferry_btl_endpoint_t *ep = ep_new(mod, r, &addr);
        if (ep == NULL)
            return FERRY_ERR_NO_MEMORY;
        if (!insert_addr(mod, ep)) {
            /* Unreachable: no endpoint, so add_procs leaves it out. */
            ofi_ep_free(ep);
            continue;
        }
        mod->eps[r] = ep;
        ep->state = OFI_EP_READY;
        if (r != mod->super.ctx->rank && mod->p.watch_local &&
            same_host(&mod->my_addr.proc, &ep->addr.proc))
            ofi_live_watch(mod, ep);
    }
    return FERRY_OK;
}

void ofi_ep_free(ferry_btl_endpoint_t *ep)
{
    if (ep == NULL)
        return;
    ofi_wire_peer_clear(&ep->wire);
    free(ep->putn.owed);
    free(ep->putn.held);
    if (ep->pidfd >= 0)
        close(ep->pidfd);
    free(ep);
}

void ofi_complete(ofi_module_t *mod, btl_frag_t *frag, int status)
{
    frag->status = status;
    util_list_append(&mod->completed, &frag->link);
}

void ofi_mark_sending(ofi_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (!ep->sending) {
        ep->sending = true;
        util_list_append(&mod->sending, &ep->sending_link);
    }
}

bool ofi_ep_settled(ferry_btl_endpoint_t *ep)
{
    if (ep->settle_until_ns != 0 && rt_now_coarse_ns() < ep->settle_until_ns)
        return false;
    ep->settle_until_ns = 0;
    return true;
}

int ofi_ep_ready(ofi_module_t *mod, ferry_btl_endpoint_t *ep)
{
    if (ep == NULL || ep->mod != mod)
        return FERRY_ERR_INVALID;
    if (ep->deleted || ep->state != OFI_EP_READY)
        return FERRY_ERR_UNREACH;
    ep->used = true;
    return FERRY_OK;
}

void ofi_ep_fail_pending(ofi_module_t *mod, ferry_btl_endpoint_t *ep, int status)
{
    util_list_item_t *it;
    while ((it = util_list_pop_front(&ep->queue)) != NULL)
        ofi_complete(mod, UTIL_CONTAINER_OF(it, btl_frag_t, link), status);
    while ((it = util_list_pop_front(&ep->held)) != NULL)
        ofi_complete(mod, UTIL_CONTAINER_OF(it, btl_frag_t, link), status);
    /* What the provider holds for it may never come back (shm waits for a
     * dead target to copy a large write): completed now, so that no flush
     * waits on it. */
    ofi_rdma_abandon(mod, ep, status);
    btl_amo_ep_fail(&mod->amo, &ep->amo, status);
    ofi_putn_fail(mod, ep, status);
    ep->notice_due = false; /* its put was failed with the rest */
}

void ofi_ep_fail(ofi_module_t *mod, ferry_btl_endpoint_t *ep, int status, bool tell,
                 const char *why)
{
    if (ep->state == OFI_EP_FAILED || ep->state == OFI_EP_CLOSED) {
        ofi_ep_fail_pending(mod, ep, FERRY_ERR_UNREACH);
        return;
    }
    ep->state = OFI_EP_FAILED;
    ofi_ep_fail_pending(mod, ep, FERRY_ERR_UNREACH);
    /* Its messages are refused from now on; what it had sent ahead is
     * dropped with it. */
    ofi_wire_peer_clear(&ep->wire);
    ofi_live_unwatch(mod, ep);
    if (tell && ep->rank != mod->super.ctx->rank) {
        /* Now and at the next checks: a notice the provider took may still
         * be lost with the connection that broke (ofi_rxm connects again
         * for the next one). */
        ep->tell_failed = true;
        ep->fail_tries = OFI_FAIL_NOTICES;
        ep->fail_status = status;
        (void)ofi_post_ctrl(mod, ep, OFI_T_FAIL, (uint32_t)-status);
    }
    if (!mod->closing)
        btl_base_report_error(&mod->super, status, ep->rank, "ofi (%s): rank %d: %s",
                              mod->my_addr.prov, ep->rank, why);
}

int ofi_drain_queue(ofi_module_t *mod, ferry_btl_endpoint_t *ep)
{
    int n = 0;
    util_list_item_t *it;
    /* Answers to puts with notification first: everything in the queue
     * was sent after the message they answer was handled, or may go
     * after it. */
    if (ep->putn.nowed > 0) {
        uint32_t before = ep->putn.nowed;
        int rc = ofi_putn_send_owed(mod, ep);
        n += (int)(before - ep->putn.nowed);
        if (rc != FERRY_OK)
            return n;
    }
    if (ep->notice_due) {
        const struct iovec part = {ep->notice, ep->notice_len};
        if (ofi_post_sendv(mod, ep, &part, 1, ep->notice_tag, OFI_T_PUTN) != FERRY_OK)
            return n; /* no room yet, or the peer failed */
        ep->notice_due = false;
        n++;
    }
    while ((it = util_list_first(&ep->queue)) != NULL) {
        btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
        int rc;
        if (frag->op == OFI_OP_SEND)
            rc = ofi_post_send(mod, ep, NULL, 0, ferry_btl_seg_ptr(&frag->base.src[0]),
                               frag->base.src[0].len, frag->tag, OFI_T_DATA, 0);
        else
            rc = ofi_rdma_post(mod, ep, frag);
        /* A peer that takes nothing is the liveness check's to judge
         * (ofi_live.c): the queue waits. */
        if (rc == FERRY_ERR_NO_RESOURCE)
            break;
        if (ep->state != OFI_EP_READY && rc == FERRY_ERR_UNREACH) {
            /* Failing the peer completed the queue, this one included. */
            n++;
            break;
        }
        util_list_remove(&ep->queue, it);
        n++;
        if (frag->op == OFI_OP_SEND || rc != FERRY_OK)
            ofi_complete(mod, frag, rc);
    }
    return n;
}
