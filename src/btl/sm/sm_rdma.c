/*
 * Registration and one-sided operations over shared memory.
 *
 * A registration is an entry in our segment's table, so an initiator checks
 * the key, bounds and access of a remote range itself, before any byte
 * moves. Data then goes one of two ways:
 * - single copy through cross-memory attach (process_vm_writev/readv) above
 *   FERRY_SM_CMA_THRESHOLD, when the kernel allows it;
 * - a plain copy, when the target's memory came from ferry_mem_alloc: it is
 *   a shared heap object the initiator maps (once) and copies into directly;
 * - through the ring: a put travels as data messages the target copies out
 *   (and completes once the target's tail passes it); a get is a request the
 *   target answers with data messages. This path serves small transfers and
 *   every transfer when cross-memory attach is refused (FERRY_SM_CMA=0).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "btl/sm/sm.h"
#include "rt/modex.h"

#define SM_REG_MAGIC 0x534d5247u

/* ---- registration ---- */

int sm_register_mem(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *base, size_t len,
                    uint32_t access, ferry_btl_reg_t **reg_out)
{
    sm_module_t *mod = (sm_module_t *)btl;
    int rc = btl_base_check_register(btl, base, len, access, reg_out);
    if (rc != FERRY_OK)
        return rc;
    uint32_t slot = 0;
    while (slot < mod->p.reg_slots && mod->regs[slot] != NULL)
        slot++;
    if (slot == mod->p.reg_slots) {
        /* Not an error yet: the registration cache evicts and retries, and
         * names the limit if that fails too. */
        rt_log(&btl->ctx->log, RT_LOG_DEBUG,
               "sm: all %zu registration slots in use (FERRY_SM_REG_SLOTS)", mod->p.reg_slots);
        return FERRY_ERR_NO_RESOURCE;
    }
    sm_reg_t *reg = calloc(1, sizeof(*reg));
    if (reg == NULL)
        return FERRY_ERR_NO_MEMORY;
    sm_reg_entry_t *e = &mod->reg_table[slot];
    /* Sequence lock: odd while the entry changes. */
    uint32_t gen = atomic_load_explicit(&e->gen, memory_order_relaxed);
    gen += (gen & 1) ? 1 : 2; /* the next even value, never 0 */
    atomic_store_explicit(&e->gen, gen - 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    e->access = access;
    e->base = (uint64_t)(uintptr_t)base;
    e->len = len;
    e->heap_id = 0;
    e->heap_off = 0;
    e->heap_len = 0;
    for (int h = 0; h < mod->nheaps; h++) {
        const sm_heap_t *heap = &mod->heaps[h];
        if ((unsigned char *)base >= heap->base &&
            (size_t)((unsigned char *)base - heap->base) <= heap->len &&
            len <= heap->len - (size_t)((unsigned char *)base - heap->base)) {
            e->heap_id = heap->id;
            e->heap_off = (uint64_t)((unsigned char *)base - heap->base);
            e->heap_len = heap->len;
        }
    }
    atomic_store_explicit(&e->gen, gen, memory_order_release);

    reg->magic = SM_REG_MAGIC;
    reg->slot = slot;
    reg->base.base = base;
    reg->base.len = len;
    reg->base.access = access;
    sm_key_t key = {.slot = slot, .gen = gen};
    memcpy(reg->base.key, &key, sizeof(key));
    mod->regs[slot] = reg;
    *reg_out = &reg->base;
    return FERRY_OK;
}

int sm_deregister_mem(ferry_btl_module_t *btl, ferry_btl_reg_t *breg)
{
    sm_module_t *mod = (sm_module_t *)btl;
    sm_reg_t *reg = (sm_reg_t *)breg;
    if (btl == NULL || reg == NULL || reg->magic != SM_REG_MAGIC ||
        reg->slot >= mod->p.reg_slots || mod->regs[reg->slot] != reg)
        return FERRY_ERR_INVALID;
    sm_reg_entry_t *e = &mod->reg_table[reg->slot];
    /* An odd generation matches no key: later accesses are refused. */
    atomic_fetch_add_explicit(&e->gen, 1, memory_order_release);
    mod->regs[reg->slot] = NULL;
    reg->magic = 0;
    free(reg);
    return FERRY_OK;
}

/* Checks [addr, addr + len) against the entry a key names in a table of
 * nslots (ours or a peer's), and copies the entry to *view. */
static int check_key(const sm_reg_entry_t *table, uint32_t nslots, const uint8_t *keybytes,
                     uint64_t addr, size_t len, uint32_t need, sm_reg_view_t *view)
{
    sm_key_t key;
    memcpy(&key, keybytes, sizeof(key));
    if (key.slot >= nslots || (key.gen & 1) || key.gen == 0)
        return FERRY_ERR_ACCESS;
    sm_reg_entry_t *e = (sm_reg_entry_t *)&table[key.slot];
    uint32_t g1 = atomic_load_explicit(&e->gen, memory_order_acquire);
    view->reg.base = (void *)(uintptr_t)e->base;
    view->reg.len = e->len;
    view->reg.access = e->access;
    view->heap_id = e->heap_id;
    view->heap_off = e->heap_off;
    view->heap_len = e->heap_len;
    atomic_thread_fence(memory_order_acquire);
    uint32_t g2 = atomic_load_explicit(&e->gen, memory_order_relaxed);
    if (g1 != key.gen || g2 != g1)
        return FERRY_ERR_ACCESS;
    /* The owner's word on where its heap lies is checked like the rest. */
    if (view->heap_id != 0 &&
        (view->heap_off > view->heap_len || view->reg.len > view->heap_len - view->heap_off))
        return FERRY_ERR_ACCESS;
    return btl_base_check_access(&view->reg, addr, len, need);
}

static void heap_name(char *buf, size_t size, const sm_module_t *mod, int rank, uint32_t id)
{
    snprintf(buf, size, "/ferry-%s-%d-h%u", rt_modex_job_id(mod->super.ctx->modex), rank, id);
}

/* Our mapping of a peer's heap, mapping it on first use; NULL if it cannot
 * be mapped (the caller falls back to the other paths). */
static unsigned char *heap_map(sm_module_t *mod, ferry_btl_endpoint_t *ep, uint32_t id,
                               size_t len)
{
    for (int i = 0; i < ep->nheaps; i++)
        if (ep->heaps[i].id == id && ep->heaps[i].len == len)
            return ep->heaps[i].base;
    char name[400];
    heap_name(name, sizeof(name), mod, ep->rank, id);
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *base = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= len)
        base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED)
        return NULL;
    if (ep->nheaps == SM_HEAP_MAPS) {
        /* The oldest mapping goes; a later access maps it again. */
        munmap(ep->heaps[0].base, ep->heaps[0].len);
        memmove(&ep->heaps[0], &ep->heaps[1], (SM_HEAP_MAPS - 1) * sizeof(ep->heaps[0]));
        ep->nheaps--;
    }
    ep->heaps[ep->nheaps++] = (sm_heap_map_t){.id = id, .base = base, .len = len};
    return base;
}

void sm_ep_unmap_heaps(ferry_btl_endpoint_t *ep)
{
    for (int i = 0; i < ep->nheaps; i++)
        munmap(ep->heaps[i].base, ep->heaps[i].len);
    ep->nheaps = 0;
}

int sm_mem_alloc(ferry_btl_module_t *btl, size_t len, uint32_t access, void **addr_out,
                 ferry_btl_reg_t **reg_out)
{
    sm_module_t *mod = (sm_module_t *)btl;
    if (btl == NULL || len == 0 || addr_out == NULL || reg_out == NULL || len > SIZE_MAX - 4096)
        return FERRY_ERR_INVALID;
    ferry_ctx_t *ctx = btl->ctx;
    size_t size = (len + 4095) & ~(size_t)4095;
    sm_heap_t *heaps = realloc(mod->heaps, (size_t)(mod->nheaps + 1) * sizeof(*heaps));
    if (heaps == NULL)
        return FERRY_ERR_NO_MEMORY;
    mod->heaps = heaps;
    uint32_t id = ++mod->next_heap_id;
    char name[400];
    heap_name(name, sizeof(name), mod, ctx->rank, id);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return rt_log_errno(&ctx->log, "sm: creating a shared heap", errno);
    rt_modex_register_shm(ctx->modex, name); /* gone even if we are killed */
    /* A tmpfs file can be sized far beyond the memory behind it, and its
     * mapping then fails with SIGBUS on the first page that finds none:
     * more than the file system has free is refused now, with a message. */
    struct statvfs fs;
    if (fstatvfs(fd, &fs) == 0 && fs.f_frsize > 0 &&
        (unsigned long long)size / fs.f_frsize > (unsigned long long)fs.f_bavail) {
        close(fd);
        shm_unlink(name);
        rt_log(&ctx->log, RT_LOG_ERROR,
               "sm: a shared heap of %zu bytes is more than the %llu bytes free in /dev/shm",
               size, (unsigned long long)fs.f_bavail * fs.f_frsize);
        return FERRY_ERR_NO_MEMORY;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        int err = errno;
        close(fd);
        shm_unlink(name);
        return rt_log_errno(&ctx->log, "sm: sizing a shared heap", err);
    }
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        int err = errno;
        shm_unlink(name);
        return rt_log_errno(&ctx->log, "sm: mapping a shared heap", err);
    }
    sm_heap_t *heap = &mod->heaps[mod->nheaps++];
    *heap = (sm_heap_t){.id = id, .base = base, .len = size};
    int rc = sm_register_mem(btl, NULL, base, size, access, &heap->reg);
    if (rc != FERRY_OK) {
        mod->nheaps--;
        munmap(base, size);
        shm_unlink(name);
        return rc;
    }
    *addr_out = base;
    *reg_out = heap->reg;
    return FERRY_OK;
}

static void heap_destroy(sm_module_t *mod, sm_heap_t *heap)
{
    char name[400];
    heap_name(name, sizeof(name), mod, mod->super.ctx->rank, heap->id);
    munmap(heap->base, heap->len);
    shm_unlink(name);
}

int sm_mem_free(ferry_btl_module_t *btl, ferry_btl_reg_t *reg)
{
    sm_module_t *mod = (sm_module_t *)btl;
    if (btl == NULL || reg == NULL)
        return FERRY_ERR_INVALID;
    for (int h = 0; h < mod->nheaps; h++) {
        if (mod->heaps[h].reg != reg)
            continue;
        int rc = sm_deregister_mem(btl, reg);
        if (rc != FERRY_OK)
            return rc;
        heap_destroy(mod, &mod->heaps[h]);
        mod->heaps[h] = mod->heaps[--mod->nheaps];
        return FERRY_OK;
    }
    return FERRY_ERR_INVALID;
}

void sm_heaps_release(sm_module_t *mod)
{
    for (int h = 0; h < mod->nheaps; h++)
        heap_destroy(mod, &mod->heaps[h]);
    free(mod->heaps);
    mod->heaps = NULL;
    mod->nheaps = 0;
}

static const sm_reg_entry_t *peer_table(const ferry_btl_endpoint_t *ep)
{
    return (const sm_reg_entry_t *)(ep->peer_base + ep->peer_hdr->reg_off);
}

/* ---- starting operations ---- */

static int rdma_start(sm_module_t *mod, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des,
                      bool put)
{
    if (ep == NULL || !btl_frag_valid(des) || (des->flags & FERRY_BTL_DES_INFLIGHT) ||
        des->src == NULL || des->dst == NULL || des->src_cnt != 1 || des->dst_cnt != 1 ||
        des->src[0].len != des->dst[0].len || des->src[0].len > mod->super.attr.max_rdma_size)
        return FERRY_ERR_INVALID;
    if (ep->deleted || ep->state == SM_EP_FAILED || ep->state == SM_EP_CLOSED)
        return FERRY_ERR_UNREACH;
    int rc = sm_ep_connect(mod, ep);
    if (rc != FERRY_OK)
        return rc;
    btl_frag_t *frag = btl_frag_of(des);
    const ferry_btl_segment_t *remote = put ? &des->dst[0] : &des->src[0];
    const ferry_btl_segment_t *local = put ? &des->src[0] : &des->dst[0];
    size_t len = remote->len;
    sm_reg_view_t view = {.heap_id = 0};
    if (len > 0) {
        rc = check_key(peer_table(ep), ep->peer_hdr->reg_slots, remote->key, remote->addr, len,
                       put ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ, &view);
        if (rc != FERRY_OK)
            return rc;
    }
    frag->op = put ? SM_OP_PUT : SM_OP_GET;
    frag->ep = ep;
    frag->done = 0;
    frag->status = FERRY_OK;
    des->flags |= FERRY_BTL_DES_INFLIGHT;
    ep->rdma_inflight++;

    if (len == 0) {
        sm_complete(mod, frag, FERRY_OK);
        return FERRY_OK;
    }
    if (ep->rank == mod->super.ctx->rank) {
        /* Our own memory: a plain copy. */
        if (put)
            memmove(ferry_btl_seg_ptr(remote), ferry_btl_seg_ptr(local), len);
        else
            memmove(ferry_btl_seg_ptr(local), ferry_btl_seg_ptr(remote), len);
        sm_complete(mod, frag, FERRY_OK);
        return FERRY_OK;
    }
    unsigned char *heap = view.heap_id != 0 ? heap_map(mod, ep, view.heap_id, view.heap_len)
                                            : NULL;
    if (heap != NULL) {
        /* The target's memory is mapped here too: a plain copy. */
        unsigned char *there =
            heap + view.heap_off + (remote->addr - (uint64_t)(uintptr_t)view.reg.base);
        if (put)
            memcpy(there, ferry_btl_seg_ptr(local), len);
        else
            memcpy(ferry_btl_seg_ptr(local), there, len);
        sm_complete(mod, frag, FERRY_OK);
        return FERRY_OK;
    }
    if (mod->cma_ok && len >= mod->p.cma_threshold) {
        struct iovec liov = {.iov_base = ferry_btl_seg_ptr(local), .iov_len = len};
        struct iovec riov = {.iov_base = ferry_btl_seg_ptr(remote), .iov_len = len};
        size_t moved = 0;
        while (moved < len) {
            ssize_t n = put ? process_vm_writev(ep->pid, &liov, 1, &riov, 1, 0)
                            : process_vm_readv(ep->pid, &liov, 1, &riov, 1, 0);
            if (n <= 0) {
                int err = n < 0 ? errno : EIO;
                if (err == EPERM || err == ENOSYS) {
                    rt_log(&mod->super.ctx->log, RT_LOG_INFO,
                           "sm: cross-memory attach refused (%s); copying through shared "
                           "memory instead",
                           strerror(err));
                    mod->cma_ok = false;
                    break;
                }
                sm_complete(mod, frag,
                            err == ESRCH ? FERRY_ERR_UNREACH
                                         : (err == EFAULT ? FERRY_ERR_ACCESS
                                                          : rt_status_from_errno(err)));
                return FERRY_OK;
            }
            moved += (size_t)n;
            liov.iov_base = (char *)liov.iov_base + n;
            liov.iov_len -= (size_t)n;
            riov.iov_base = (char *)riov.iov_base + n;
            riov.iov_len -= (size_t)n;
        }
        if (moved == len) {
            sm_complete(mod, frag, FERRY_OK);
            return FERRY_OK;
        }
        /* Refused on the first call: nothing moved; go through the ring. */
    }
    util_list_append(&ep->queue, &frag->link);
    sm_drain_queue(mod, ep);
    if (!util_list_empty(&ep->queue) || !util_list_empty(&ep->ring_puts) ||
        !util_list_empty(&ep->gets))
        sm_mark_sending(mod, ep);
    return FERRY_OK;
}

int sm_put(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des)
{
    if (btl == NULL || des == NULL)
        return FERRY_ERR_INVALID;
    return rdma_start((sm_module_t *)btl, ep, des, true);
}

int sm_get(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, ferry_btl_desc_t *des)
{
    if (btl == NULL || des == NULL)
        return FERRY_ERR_INVALID;
    return rdma_start((sm_module_t *)btl, ep, des, false);
}

/* ---- the ring path ---- */

/* Largest data chunk in one message after a header of hdr bytes. */
static size_t chunk_max(const sm_module_t *mod, size_t hdr)
{
    return mod->super.attr.max_send_size - hdr;
}

bool sm_rdma_push(sm_module_t *mod, ferry_btl_endpoint_t *ep, btl_frag_t *frag)
{
    ferry_btl_desc_t *des = &frag->base;
    unsigned char *slot;
    uint64_t pos;
    if (frag->op == SM_OP_PUT) {
        const ferry_btl_segment_t *remote = &des->dst[0];
        const char *src = ferry_btl_seg_ptr(&des->src[0]);
        while (frag->done < remote->len) {
            size_t n = remote->len - frag->done;
            if (n > chunk_max(mod, sizeof(sm_put_hdr_t)))
                n = chunk_max(mod, sizeof(sm_put_hdr_t));
            if (!sm_ring_reserve(ep, sizeof(sm_put_hdr_t) + n, &slot, &pos))
                return false;
            sm_put_hdr_t hdr = {.raddr = remote->addr + frag->done};
            memcpy(&hdr.key, remote->key, sizeof(hdr.key));
            hdr.ack = frag->done + n == remote->len;
            memcpy(slot, &hdr, sizeof(hdr));
            memcpy(slot + sizeof(hdr), src + frag->done, n);
            sm_ring_commit(ep, pos, (uint32_t)(sizeof(hdr) + n), 0, SM_T_PUT);
            frag->done += n;
        }
        frag->end_pos = ep->head;
        util_list_remove(&ep->queue, &frag->link);
        util_list_append(&ep->ring_puts, &frag->link);
        return true;
    }
    if (!sm_ring_reserve(ep, sizeof(sm_get_req_t), &slot, &pos))
        return false;
    sm_get_req_t req = {.raddr = des->src[0].addr, .len = des->src[0].len};
    memcpy(&req.key, des->src[0].key, sizeof(req.key));
    frag->cookie = req.cookie = ++mod->next_cookie;
    memcpy(slot, &req, sizeof(req));
    sm_ring_commit(ep, pos, sizeof(req), 0, SM_T_GET_REQ);
    util_list_remove(&ep->queue, &frag->link);
    util_list_append(&ep->gets, &frag->link);
    return true;
}

/* A message of the ring path arrived from ep; msg and len are the peer's. */
void sm_rdma_handle(sm_module_t *mod, ferry_btl_endpoint_t *ep, uint8_t type,
                    const unsigned char *msg, uint32_t len)
{
    ferry_ctx_t *ctx = mod->super.ctx;
    if (type == SM_T_PUT) {
        sm_put_hdr_t hdr;
        if (len < sizeof(hdr)) {
            sm_ep_fail(mod, ep, "it sent a truncated put");
            return;
        }
        memcpy(&hdr, msg, sizeof(hdr));
        size_t n = len - sizeof(hdr);
        uint8_t key[FERRY_BTL_KEY_MAX] = {0};
        memcpy(key, &hdr.key, sizeof(hdr.key));
        sm_reg_view_t view;
        if (check_key(mod->reg_table, (uint32_t)mod->p.reg_slots, key, hdr.raddr, n,
                      FERRY_ACCESS_REMOTE_WRITE, &view) != FERRY_OK) {
            /* The initiator checked too; this is a registration withdrawn
             * while the put was on its way. */
            rt_log(&ctx->log, RT_LOG_WARN,
                   "sm: put of %zu bytes from rank %d outside any registration refused", n,
                   ep->rank);
            return;
        }
        memcpy((void *)(uintptr_t)hdr.raddr, msg + sizeof(hdr), n);
    } else if (type == SM_T_GET_REQ) {
        sm_get_req_t req;
        if (len != sizeof(req)) {
            sm_ep_fail(mod, ep, "it sent a malformed get request");
            return;
        }
        memcpy(&req, msg, sizeof(req));
        sm_get_job_t *job = calloc(1, sizeof(*job));
        if (job == NULL) {
            rt_log(&ctx->log, RT_LOG_ERROR, "sm: out of memory answering a get from rank %d",
                   ep->rank);
            return;
        }
        uint8_t key[FERRY_BTL_KEY_MAX] = {0};
        memcpy(key, &req.key, sizeof(req.key));
        sm_reg_view_t view;
        job->req = req;
        job->status = req.len > SIZE_MAX
                          ? FERRY_ERR_ACCESS
                          : check_key(mod->reg_table, (uint32_t)mod->p.reg_slots, key,
                                      req.raddr, (size_t)req.len, FERRY_ACCESS_REMOTE_READ,
                                      &view);
        util_list_append(&ep->get_jobs, &job->link);
        sm_mark_sending(mod, ep);
    } else {
        sm_get_resp_t resp;
        if (len < sizeof(resp)) {
            sm_ep_fail(mod, ep, "it sent a truncated get response");
            return;
        }
        memcpy(&resp, msg, sizeof(resp));
        size_t n = len - sizeof(resp);
        btl_frag_t *frag = NULL;
        for (util_list_item_t *it = util_list_first(&ep->gets); it != NULL;
             it = util_list_next(&ep->gets, it)) {
            btl_frag_t *f = UTIL_CONTAINER_OF(it, btl_frag_t, link);
            if (f->cookie == resp.cookie) {
                frag = f;
                break;
            }
        }
        if (frag == NULL) {
            sm_ep_fail(mod, ep, "it answered a get nobody asked for");
            return;
        }
        ferry_btl_segment_t *local = &frag->base.dst[0];
        if (resp.status == FERRY_OK &&
            (resp.offset != frag->done || n > local->len - frag->done)) {
            sm_ep_fail(mod, ep, "it answered a get with data out of place");
            return;
        }
        if (resp.status == FERRY_OK) {
            memcpy((char *)ferry_btl_seg_ptr(local) + frag->done, msg + sizeof(resp), n);
            frag->done += n;
        }
        if (resp.status != FERRY_OK || frag->done == local->len) {
            util_list_remove(&ep->gets, &frag->link);
            sm_complete(mod, frag, resp.status == FERRY_OK ? FERRY_OK
                                   : resp.status < 0 && resp.status > FERRY_ERR_LAST
                                       ? resp.status
                                       : FERRY_ERR_PROTO);
        }
    }
}

/* Answers gets and completes ring puts the peer has consumed. Returns the
 * events handled. */
int sm_rdma_progress(sm_module_t *mod, ferry_btl_endpoint_t *ep)
{
    int n = 0;
    util_list_item_t *it;
    if (!util_list_empty(&ep->ring_puts)) {
        uint64_t tail = atomic_load_explicit(&ep->out->tail, memory_order_acquire);
        while ((it = util_list_first(&ep->ring_puts)) != NULL) {
            btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
            if (frag->end_pos > tail)
                break;
            util_list_remove(&ep->ring_puts, it);
            sm_complete(mod, frag, FERRY_OK);
            n++;
        }
    }
    while ((it = util_list_first(&ep->get_jobs)) != NULL) {
        sm_get_job_t *job = UTIL_CONTAINER_OF(it, sm_get_job_t, link);
        if (sm_ep_connect(mod, ep) != FERRY_OK)
            break;
        bool blocked = false;
        do {
            size_t chunk = job->status == FERRY_OK ? (size_t)(job->req.len - job->sent) : 0;
            if (chunk > chunk_max(mod, sizeof(sm_get_resp_t)))
                chunk = chunk_max(mod, sizeof(sm_get_resp_t));
            unsigned char *slot;
            uint64_t pos;
            if (!sm_ring_reserve(ep, sizeof(sm_get_resp_t) + chunk, &slot, &pos)) {
                blocked = true;
                break;
            }
            sm_get_resp_t resp = {
                .cookie = job->req.cookie, .offset = job->sent, .status = job->status};
            memcpy(slot, &resp, sizeof(resp));
            memcpy(slot + sizeof(resp), (const char *)(uintptr_t)job->req.raddr + job->sent,
                   chunk);
            sm_ring_commit(ep, pos, (uint32_t)(sizeof(resp) + chunk), 0, SM_T_GET_RESP);
            job->sent += chunk;
        } while (job->status == FERRY_OK && job->sent < job->req.len);
        if (blocked)
            break;
        util_list_remove(&ep->get_jobs, it);
        free(job);
        n++;
    }
    return n;
}

void sm_rdma_fail(sm_module_t *mod, ferry_btl_endpoint_t *ep, int status)
{
    util_list_item_t *it;
    while ((it = util_list_pop_front(&ep->ring_puts)) != NULL)
        sm_complete(mod, UTIL_CONTAINER_OF(it, btl_frag_t, link), status);
    while ((it = util_list_pop_front(&ep->gets)) != NULL)
        sm_complete(mod, UTIL_CONTAINER_OF(it, btl_frag_t, link), status);
    while ((it = util_list_pop_front(&ep->get_jobs)) != NULL)
        free(UTIL_CONTAINER_OF(it, sm_get_job_t, link));
}
