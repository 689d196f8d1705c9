/*
 * One-sided operations over shared memory.
 *
 * A registration is an entry in our segment's table (sm_reg.c), so an
 * initiator checks the key, bounds and access of a remote range itself,
 * before any byte moves. Data then goes one of three ways:
 * - single copy through cross-memory attach (process_vm_writev/readv) above
 *   FERRY_SM_CMA_THRESHOLD, when the kernel allows it;
 * - a plain copy, when the target's memory came from ferry_mem_alloc: it is
 *   a shared heap object the initiator maps (once) and copies into directly;
 * - through the ring: a put travels as data messages the target copies out
 *   (and completes once the target's tail passes it); a get is a request the
 *   target answers with data messages. This path serves small transfers and
 *   every transfer when cross-memory attach is refused (FERRY_SM_CMA=0).
 *   The target checks every chunk against its own registration state at the
 *   moment it copies it (sm_target_copy), so a registration withdrawn or
 *   unmapped meanwhile is refused there, and the refusal reaches the
 *   initiator: a put's through the status word of its last chunk, read
 *   when the tail passes it (so no OK can overtake it), a get's as an error
 *   answer.
 * Each peer may have at most the target's FERRY_SM_GET_SLOTS ring gets
 * outstanding there; the target answers them from as many slots, and a
 * request beyond them waits in the peer's ring, holding back everything
 * behind it, until a slot frees: a peer flooding requests slows itself.
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

/* A heap object's name: its owner's segment name, then the heap's id. */
static void heap_name(char *buf, size_t size, const char *seg_name, uint32_t id)
{
    snprintf(buf, size, "%s-h%u", seg_name, id);
}

/* The peer's heap object id, len bytes of it mapped here: shm_open of its
 * name and mmap. */
static unsigned char *heap_shm_map(const ferry_btl_endpoint_t *ep, uint32_t id, size_t len)
{
    char name[SM_NAME_MAX + 16];
    heap_name(name, sizeof(name), ep->peer_name, id);
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *base = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= len)
        base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return base == MAP_FAILED ? NULL : base;
}

static void heap_shm_unmap(unsigned char *base, size_t len)
{
    munmap(base, len);
}

sm_heap_mapper_t sm_heap_mapper = {.map = heap_shm_map, .unmap = heap_shm_unmap};

/* Our mapping of a peer's heap, mapping it on first use; NULL if it cannot
 * be mapped (the caller falls back to the other paths). */
static unsigned char *heap_map(sm_module_t *mod, ferry_btl_endpoint_t *ep, uint32_t id,
                               size_t len)
{
    for (int i = 0; i < ep->nheaps; i++)
        if (ep->heaps[i].id == id && ep->heaps[i].len == len)
            return ep->heaps[i].base;
    unsigned char *base = sm_heap_mapper.map(ep, id, len);
    if (base == NULL)
        return NULL;
    if (ep->nheaps == SM_HEAP_MAPS) {
        /* The oldest mapping goes; a later access maps it again. */
        ep->hcache.valid = false;
        sm_heap_mapper.unmap(ep->heaps[0].base, ep->heaps[0].len);
        memmove(&ep->heaps[0], &ep->heaps[1], (SM_HEAP_MAPS - 1) * sizeof(ep->heaps[0]));
        ep->nheaps--;
    }
    ep->heaps[ep->nheaps++] = (sm_heap_map_t){.id = id, .base = base, .len = len};
    return base;
}

void sm_ep_unmap_heaps(ferry_btl_endpoint_t *ep)
{
    ep->hcache.valid = false;
    for (int i = 0; i < ep->nheaps; i++)
        sm_heap_mapper.unmap(ep->heaps[i].base, ep->heaps[i].len);
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
    char name[SM_NAME_MAX + 16];
    heap_name(name, sizeof(name), mod->seg_name, id);
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
    char name[SM_NAME_MAX + 16];
    heap_name(name, sizeof(name), mod->seg_name, heap->id);
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

/* The peer's table, where the header said at connect (checked then). */
static const sm_reg_entry_t *peer_table(const ferry_btl_endpoint_t *ep)
{
    return (const sm_reg_entry_t *)(ep->peer_base + ep->peer_reg_off);
}

/* ---- copies both ends share ---- */

/*
 * A cross-memory put or get of FERRY_SM_CMA_ASSIST bytes or more is cut
 * into SM_ASSIST_CHUNK pieces. The initiator sets up a job in its channel
 * in the target's segment (assist_claim: the job's number and the next
 * piece), tells the target with SM_T_ASSIST, and takes pieces one at a
 * time with a compare-and-swap; a target that polls meanwhile takes them
 * the same way and copies each with the other call (process_vm_writev for
 * a get, process_vm_readv for a put), so that the two cores copy at once.
 * A target that does not poll costs one ring message: the initiator takes
 * every piece. The operation completes once the pieces the target took
 * are counted in assist_done, from progress if not at once.
 */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* len bytes between our memory at mine and pid's at theirs; 0 or an
 * errno. */
static int cma_copy(pid_t pid, bool to_them, void *mine, void *theirs, size_t len)
{
    struct iovec liov = {.iov_base = mine, .iov_len = len};
    struct iovec riov = {.iov_base = theirs, .iov_len = len};
    while (liov.iov_len > 0) {
        ssize_t n = to_them ? process_vm_writev(pid, &liov, 1, &riov, 1, 0)
                            : process_vm_readv(pid, &liov, 1, &riov, 1, 0);
        if (n <= 0)
            return n < 0 ? errno : EIO;
        liov.iov_base = (char *)liov.iov_base + n;
        liov.iov_len -= (size_t)n;
        riov.iov_base = (char *)riov.iov_base + n;
        riov.iov_len -= (size_t)n;
    }
    return 0;
}

/* The system refused us cross-memory attach (err: EPERM or ENOSYS), on the
 * first call as a rule: the ring copies everything from now on, and peers
 * cannot read us either (the system's rule is the same both ways), so keys
 * guard our memory again. */
static void cma_refused(sm_module_t *mod, int err)
{
    rt_log(&mod->super.ctx->log, RT_LOG_INFO,
           "sm: cross-memory attach refused (%s); copying through shared memory instead",
           strerror(err));
    mod->cma_ok = false;
    mod->super.attr.flags &= ~(uint32_t)FERRY_BTL_FLAG_PEERS_READ;
    mod->super.attr.msg_eager_max = 0;
}

static int cma_status(int err)
{
    return err == ESRCH ? FERRY_ERR_UNREACH
                        : (err == EFAULT ? FERRY_ERR_ACCESS : rt_status_from_errno(err));
}

static const sm_reg_entry_t *peer_table(const ferry_btl_endpoint_t *ep);

/* The job helped with is over (status: our pieces'): a piece the target
 * could not copy is copied again here, whole; then the key must still be
 * live, as after any cross-memory copy. */
static void assist_finish(sm_module_t *mod, ferry_btl_endpoint_t *ep, int status)
{
    btl_frag_t *frag = ep->assist.frag;
    ferry_btl_desc_t *des = &frag->base;
    bool put = ep->assist.put;
    const ferry_btl_segment_t *remote = put ? &des->dst[0] : &des->src[0];
    const ferry_btl_segment_t *local = put ? &des->src[0] : &des->dst[0];
    ep->assist.frag = NULL;
    if (status == FERRY_OK &&
        atomic_load_explicit(&ep->out->assist_failed, memory_order_acquire) == ep->assist.job) {
        int err = cma_copy(ep->pid, put, ferry_btl_seg_ptr(local), ferry_btl_seg_ptr(remote),
                           remote->len);
        if (err != 0)
            status = cma_status(err);
    }
    if (status == FERRY_OK && !sm_peer_key_live(peer_table(ep), ep->peer_reg_slots, remote->key))
        status = FERRY_ERR_ACCESS;
    sm_complete(mod, frag, status);
}

/* Whether the target finished the pieces it took; finishes the job then.
 * A done word that names another job was not written by a target that
 * keeps the protocol: the endpoint fails. */
static bool assist_check(sm_module_t *mod, ferry_btl_endpoint_t *ep)
{
    uint64_t d = atomic_load_explicit(&ep->out->assist_done, memory_order_acquire);
    if ((uint32_t)(d >> 32) != ep->assist.job) {
        sm_ep_fail(mod, ep, "it rewrote the count of a copy it helped with");
        return true;
    }
    if ((uint32_t)d < ep->assist.theirs)
        return false;
    assist_finish(mod, ep, ep->assist.status);
    return true;
}

/* The target wrote what no target keeping the protocol writes into the
 * claim word: the endpoint fails, and the operation with it. */
static bool assist_broken(sm_module_t *mod, ferry_btl_endpoint_t *ep, btl_frag_t *frag)
{
    ep->assist.frag = frag;
    ep->assist.status = FERRY_ERR_UNREACH;
    sm_ep_fail(mod, ep, "it rewrote the claims of a copy it helped with");
    if (ep->assist.frag != NULL)
        assist_finish(mod, ep, FERRY_ERR_UNREACH);
    return true;
}

/* A put or get by cross-memory attach, copied with the target's help where
 * it can be: true when the operation is taken (completed, or completing
 * from progress), false when nothing was done and the plain path is to
 * copy it. */
static bool assist_start(sm_module_t *mod, ferry_btl_endpoint_t *ep, btl_frag_t *frag, bool put,
                         const ferry_btl_segment_t *local, const ferry_btl_segment_t *remote)
{
    size_t len = remote->len;
    uint64_t nchunks = (len + SM_ASSIST_CHUNK - 1) / SM_ASSIST_CHUNK;
    if (nchunks < 2 || nchunks > SM_ASSIST_CHUNKS_MAX || ep->assist.frag != NULL ||
        !ep->cma_worked || ep->state != SM_EP_CONNECTED)
        return false;
    uint32_t job = ++ep->assist_jobs;
    if (job == 0)
        job = ++ep->assist_jobs;
    sm_chan_t *ch = ep->out;
    atomic_store_explicit(&ch->assist_failed, 0, memory_order_relaxed);
    atomic_store_explicit(&ch->assist_done, (uint64_t)job << 32, memory_order_relaxed);
    atomic_store_explicit(&ch->assist_claim, (uint64_t)job << 32, memory_order_release);
    unsigned char *slot;
    uint64_t pos;
    if (!sm_ring_reserve(ep, sizeof(sm_assist_req_t), &slot, &pos))
        return false; /* no room to tell it: nobody else takes a piece */
    sm_assist_req_t req = {.raddr = remote->addr,
                           .laddr = local->addr,
                           .len = len,
                           .job = job,
                           .chunk = SM_ASSIST_CHUNK,
                           .put = put};
    memcpy(&req.key, remote->key, sizeof(req.key));
    memcpy(slot, &req, sizeof(req));
    sm_ring_commit(ep, pos, (uint32_t)sizeof(req), 0, SM_T_ASSIST);

    unsigned char *mine = ferry_btl_seg_ptr(local), *theirs = ferry_btl_seg_ptr(remote);
    uint32_t ours = 0, claimed, next = 0;
    int err = 0;
    ep->assist.job = job;
    ep->assist.put = put;
    ep->assist.theirs = 0;
    for (;;) {
        uint64_t w = atomic_load_explicit(&ch->assist_claim, memory_order_acquire);
        uint32_t c = (uint32_t)w;
        /* The word only moves forward from what we last saw, and names
         * this job: only a peer that breaks the protocol writes anything
         * else (another job, a piece taken again). */
        if ((uint32_t)(w >> 32) != job || c < next || ours > nchunks)
            return assist_broken(mod, ep, frag);
        next = c;
        if (c >= nchunks) {
            claimed = (uint32_t)nchunks;
            break;
        }
        if (err != 0) {
            /* Ours failed: the target takes no more pieces either. */
            if (atomic_compare_exchange_weak_explicit(&ch->assist_claim, &w,
                                                      ((uint64_t)job << 32) | nchunks,
                                                      memory_order_acq_rel,
                                                      memory_order_acquire)) {
                claimed = c;
                break;
            }
            continue;
        }
        if (!atomic_compare_exchange_weak_explicit(&ch->assist_claim, &w, w + 1,
                                                   memory_order_acq_rel, memory_order_acquire))
            continue;
        ours++;
        next = c + 1;
        size_t off = (size_t)c * SM_ASSIST_CHUNK;
        size_t n = len - off < SM_ASSIST_CHUNK ? len - off : SM_ASSIST_CHUNK;
        err = cma_copy(ep->pid, put, mine + off, theirs + off, n);
    }
    if (ours > claimed) /* more taken here than claimed in all: set back */
        return assist_broken(mod, ep, frag);
    ep->assist.frag = frag;
    ep->assist.theirs = claimed - ours;
    mod->assist_received += ep->assist.theirs;
    ep->assist.status = err != 0 ? cma_status(err) : FERRY_OK;
    /* The target's last piece is usually under way: a short wait here
     * saves a trip through progress. */
    for (unsigned i = 0; i < 4096; i++) {
        if (assist_check(mod, ep))
            return true;
        cpu_relax();
    }
    sm_mark_sending(mod, ep); /* progress finishes it */
    return true;
}

/* SM_T_ASSIST at the target: the pieces of the sender's copy we can take
 * while it is still copying. Only what our own registration of the key
 * allows is touched, and a request that does not add up fails the
 * channel. */
static void handle_assist(sm_module_t *mod, ferry_btl_endpoint_t *ep, const unsigned char *msg,
                          uint32_t len)
{
    sm_assist_req_t req;
    if (len != sizeof(req)) {
        sm_ep_fail(mod, ep, "it sent a malformed copy request");
        return;
    }
    memcpy(&req, msg, sizeof(req));
    uint64_t nchunks = req.chunk > 0 ? (req.len + req.chunk - 1) / req.chunk : 0;
    if (req.job == 0 || req.put > 1 || req.reserved != 0 || req.chunk != SM_ASSIST_CHUNK ||
        req.len == 0 ||
        req.len > UINT64_MAX - req.chunk || nchunks > SM_ASSIST_CHUNKS_MAX ||
        req.raddr > UINT64_MAX - req.len || req.laddr > UINT64_MAX - req.len) {
        sm_ep_fail(mod, ep, "it sent a malformed copy request");
        return;
    }
    const uint32_t need = req.put ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ;
    void *ours;
    if (!mod->cma_ok || ep->assist_refused ||
        sm_target_resolve(&mod->super, (const uint8_t *)&req.key, req.raddr, req.len, need,
                          &ours) != FERRY_OK)
        return; /* the sender copies it all */
    sm_chan_t *ch = ep->in;
    /* Bounded whatever the sender writes into the claim word. */
    uint64_t tries = 2 * nchunks + 64;
    while (tries-- > 0) {
        uint64_t w = atomic_load_explicit(&ch->assist_claim, memory_order_acquire);
        uint32_t c = (uint32_t)w;
        if ((uint32_t)(w >> 32) != req.job || c >= nchunks)
            break;
        if (!atomic_compare_exchange_weak_explicit(&ch->assist_claim, &w, w + 1,
                                                   memory_order_acq_rel, memory_order_acquire))
            continue;
        uint64_t off = (uint64_t)c * req.chunk;
        size_t n = (size_t)(req.len - off < req.chunk ? req.len - off : req.chunk);
        /* Each piece is checked again as it is copied: memory the unmap
         * monitor revoked meanwhile (and whatever is mapped there now) is
         * not touched, and the sender copies the whole again, then finds
         * the key dead. */
        int err = sm_target_resolve(&mod->super, (const uint8_t *)&req.key, req.raddr + off, n,
                                    need, &ours) != FERRY_OK
                      ? EFAULT
                      : cma_copy(ep->pid, req.put == 0, (void *)(uintptr_t)(req.raddr + off),
                                 (void *)(uintptr_t)(req.laddr + off), n);
        if (err != 0) {
            atomic_store_explicit(&ch->assist_failed, req.job, memory_order_release);
            if (err == EPERM || err == ENOSYS)
                ep->assist_refused = true;
        }
        atomic_fetch_add_explicit(&ch->assist_done, 1, memory_order_release);
        mod->assist_given++;
    }
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
        rc = sm_check_peer_key(peer_table(ep), ep->peer_reg_slots, remote->key, remote->addr,
                               len, put ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ,
                               &view);
        if (rc != FERRY_OK)
            return rc;
    }
    /* Decided before this one counts as in flight. */
    const bool cma = sm_cma_for(mod, ep, len);
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
        /* Our own memory: a plain copy, once this module's own table says
         * the key is live. The shared table checked above holds no key's
         * random bits, so it alone would let a made-up key through. */
        sm_key_t key;
        memcpy(&key, remote->key, sizeof(key));
        if (sm_target_check(mod, &key, remote->addr, len, put) != FERRY_OK) {
            sm_complete(mod, frag, FERRY_ERR_ACCESS);
            return FERRY_OK;
        }
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
        /* The target may have withdrawn the registration during the copy:
         * then the copy does not count (a get's data is not to be used). */
        sm_complete(mod, frag,
                    sm_peer_key_live(peer_table(ep), ep->peer_reg_slots, remote->key)
                        ? FERRY_OK
                        : FERRY_ERR_ACCESS);
        return FERRY_OK;
    }
    if (cma) {
        if (mod->p.cma_assist > 0 && len >= mod->p.cma_assist &&
            assist_start(mod, ep, frag, put, local, remote))
            return FERRY_OK;
        int err = cma_copy(ep->pid, put, ferry_btl_seg_ptr(local), ferry_btl_seg_ptr(remote), len);
        if (err == 0) {
            ep->cma_worked = true;
            sm_complete(mod, frag,
                        sm_peer_key_live(peer_table(ep), ep->peer_reg_slots, remote->key)
                            ? FERRY_OK
                            : FERRY_ERR_ACCESS);
            return FERRY_OK;
        }
        if (err != EPERM && err != ENOSYS) {
            sm_complete(mod, frag, cma_status(err));
            return FERRY_OK;
        }
        cma_refused(mod, err);
    }
    util_list_append(&ep->queue, &frag->link);
    sm_drain_queue(mod, ep);
    if (sm_rdma_busy(ep))
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

bool sm_rdma_busy(const ferry_btl_endpoint_t *ep)
{
    return !util_list_empty(&ep->queue) || !util_list_empty(&ep->ring_puts) ||
           !util_list_empty(&ep->iputs) || !util_list_empty(&ep->igets) ||
           !util_list_empty(&ep->gets) || ep->njobs > 0 || btl_amo_owes(&ep->amo) ||
           ep->assist.frag != NULL;
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
            bool last = frag->done + n == remote->len;
            sm_put_hdr_t hdr = {.raddr = remote->addr + frag->done,
                                .flags = last ? SM_PUT_LAST : 0,
                                .status = FERRY_OK};
            memcpy(&hdr.key, remote->key, sizeof(hdr.key));
            memcpy(slot, &hdr, sizeof(hdr));
            memcpy(slot + sizeof(hdr), src + frag->done, n);
            sm_ring_commit(ep, pos, (uint32_t)(sizeof(hdr) + n), 0, SM_T_PUT);
            frag->done += n;
            if (last)
                /* Where the target leaves the outcome: read back when the
                 * tail passes end_pos, before we may write there again. */
                frag->cookie = (uint64_t)(slot - ep->out->ring) + offsetof(sm_put_hdr_t, status);
        }
        frag->end_pos = ep->head;
        util_list_remove(&ep->queue, &frag->link);
        util_list_append(&ep->ring_puts, &frag->link);
        return true;
    }
    /* The target answers at most peer_get_slots of our gets at a time; more
     * would wait in its ring and hold back what we send behind them. */
    if (ep->gets_out >= ep->peer_get_slots)
        return false;
    if (!sm_ring_reserve(ep, sizeof(sm_get_req_t), &slot, &pos))
        return false;
    sm_get_req_t req = {.raddr = des->src[0].addr, .len = des->src[0].len};
    memcpy(&req.key, des->src[0].key, sizeof(req.key));
    frag->cookie = req.cookie = ++mod->next_cookie;
    memcpy(slot, &req, sizeof(req));
    sm_ring_commit(ep, pos, sizeof(req), 0, SM_T_GET_REQ);
    util_list_remove(&ep->queue, &frag->link);
    util_list_append(&ep->gets, &frag->link);
    ep->gets_out++;
    return true;
}

int sm_rdma_puts_done(sm_module_t *mod, ferry_btl_endpoint_t *ep, uint64_t tail)
{
    int n = 0;
    util_list_item_t *it;
    while ((it = util_list_first(&ep->ring_puts)) != NULL) {
        btl_frag_t *frag = UTIL_CONTAINER_OF(it, btl_frag_t, link);
        if (frag->end_pos > tail)
            break;
        /* The target wrote the status before it published this tail
         * (release); our acquire load of the tail makes it visible. Any
         * value but 0 is a refusal, whatever the target wrote. */
        int32_t status;
        memcpy(&status, ep->out->ring + frag->cookie, sizeof(status));
        util_list_remove(&ep->ring_puts, it);
        sm_complete(mod, frag, status == FERRY_OK ? FERRY_OK : FERRY_ERR_ACCESS);
        n++;
    }
    while ((it = util_list_first(&ep->iputs)) != NULL) {
        sm_iput_t *p = UTIL_CONTAINER_OF(it, sm_iput_t, link);
        if (p->end_pos > tail)
            break;
        int32_t status;
        memcpy(&status, ep->out->ring + p->status_off, sizeof(status));
        util_list_remove(&ep->iputs, it);
        p->status = status == FERRY_OK ? FERRY_OK : FERRY_ERR_ACCESS;
        /* Its callback from progress: this may run inside a call that
         * waits for ring room. */
        util_list_append(&mod->iputs_done, it);
        n++;
    }
    return n;
}

/* ---- puts and gets without a descriptor ---- */

/* What sm_put_inline and sm_get_inline check alike, then a record for the
 * operation (NULL with *rc_out set: refused, or not this way, max is the
 * largest size this way). Only to a connected peer with nothing queued
 * (the descriptor path orders work behind the queue), where the descriptor
 * path would take the ring too (below the cross-memory attach threshold),
 * not to our own memory (the descriptor path copies it). */
static sm_iput_t *iop_start(sm_module_t *mod, ferry_btl_endpoint_t *ep, const void *local,
                            size_t size, size_t max, const uint8_t *rkey, int *rc_out)
{
    *rc_out = FERRY_ERR_INVALID;
    if (mod == NULL || ep == NULL || ep->mod != mod || rkey == NULL || local == NULL)
        return NULL;
    *rc_out = FERRY_ERR_UNREACH;
    if (ep->deleted || ep->state == SM_EP_FAILED || ep->state == SM_EP_CLOSED)
        return NULL;
    *rc_out = FERRY_ERR_NOT_SUPPORTED;
    if (size == 0 || size > max || sm_cma_for(mod, ep, size) ||
        ep->state != SM_EP_CONNECTED || !util_list_empty(&ep->queue) ||
        ep->rank == mod->super.ctx->rank)
        return NULL;
    sm_iput_t *p = util_pool_get(&mod->iops);
    *rc_out = p != NULL ? FERRY_OK : FERRY_ERR_NO_MEMORY;
    return p;
}

/* On the record from iop_start: a put written at slot of the ring, whose
 * status word lies status_at bytes into its payload, waits for the tail. */
static void iput_track(sm_module_t *mod, ferry_btl_endpoint_t *ep, sm_iput_t *p,
                       const unsigned char *slot, size_t status_at, const void *local,
                       ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    p->end_pos = ep->head;
    p->status_off = (uint64_t)(slot - ep->out->ring) + status_at;
    p->ep = ep;
    p->local = (void *)local;
    p->cb = cb;
    p->cbctx = cbctx;
    p->cbdata = cbdata;
    p->uncounted = false;
    util_list_append(&ep->iputs, &p->link);
    ep->rdma_inflight++; /* what flush waits for */
    sm_mark_sending(mod, ep); /* progress reads the tail that completes it */
}

int sm_put_inline(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *local,
                  size_t size, uint64_t raddr, const uint8_t *rkey, ferry_btl_rdma_cb_t cb,
                  void *cbctx, void *cbdata)
{
    sm_module_t *mod = (sm_module_t *)btl;
    int rc;
    /* One ring message. */
    size_t max = mod != NULL ? chunk_max(mod, sizeof(sm_put_hdr_t)) : 0;
    sm_iput_t *p = iop_start(mod, ep, local, size, max, rkey, &rc);
    if (p == NULL)
        return rc;
    unsigned char *slot;
    uint64_t pos;
    if (!sm_ring_reserve(ep, sizeof(sm_put_hdr_t) + size, &slot, &pos)) {
        util_pool_put(&mod->iops, p);
        return FERRY_ERR_NOT_SUPPORTED;
    }
    sm_put_hdr_t hdr = {.raddr = raddr, .flags = SM_PUT_LAST, .status = FERRY_OK};
    memcpy(&hdr.key, rkey, sizeof(hdr.key));
    memcpy(slot, &hdr, sizeof(hdr));
    memcpy(slot + sizeof(hdr), local, size);
    sm_ring_commit(ep, pos, (uint32_t)(sizeof(hdr) + size), 0, SM_T_PUT);
    iput_track(mod, ep, p, slot, offsetof(sm_put_hdr_t, status), local, cb, cbctx, cbdata);
    return FERRY_OK;
}

/* A put with notification's bytes at slot (SM_ALIGN-aligned), after its
 * ring header: the header, the notification's payload, then the data. */
static inline void putn_write(unsigned char *slot, uint64_t raddr, const uint8_t *rkey,
                              uint16_t flags, const void *payload, size_t plen,
                              const void *local, size_t size)
{
    sm_putn_hdr_t *h = (sm_putn_hdr_t *)(void *)slot;
    h->raddr = raddr;
    memcpy(&h->key, rkey, sizeof(h->key));
    h->plen = (uint16_t)plen;
    h->flags = flags;
    h->status = FERRY_OK;
    if (plen > 0)
        memcpy(slot + sizeof(*h), payload, plen);
    if (size > 0)
        sm_copy(slot + sizeof(*h) + plen, local, size);
}

/* sm_put_notify_inline with every check, and every case: a tracked one, a
 * first untracked one, a lap's end, credits to read again. */
static int __attribute__((noinline))
put_notify_checked(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *local,
                   size_t size, uint64_t raddr, const uint8_t *rkey, uint8_t tag,
                   const void *payload, size_t plen, uint32_t flags, ferry_btl_rdma_cb_t cb,
                   void *cbctx, void *cbdata)
{
    sm_module_t *mod = (sm_module_t *)btl;
    if (mod == NULL || ep == NULL || ep->mod != mod || rkey == NULL || cb == NULL ||
        tag >= FERRY_BTL_TAG_BTL_MIN || (payload == NULL && plen > 0) ||
        (local == NULL && size > 0) || (flags & ~(uint32_t)FERRY_BTL_PUTN_UNTRACKED) != 0)
        return FERRY_ERR_INVALID;
    if (ep->state != SM_EP_CONNECTED || ep->deleted)
        return ep->deleted || ep->state == SM_EP_FAILED || ep->state == SM_EP_CLOSED
                   ? FERRY_ERR_UNREACH
                   : FERRY_ERR_NOT_SUPPORTED;
    /* One ring message, below the cross-memory attach threshold, behind
     * nothing queued, never to our own process (put_inline's rules). */
    size_t max = chunk_max(mod, sizeof(sm_putn_hdr_t));
    if (plen > UINT16_MAX || size > max || plen > max - size ||
        (mod->cma_ok && size >= mod->p.cma_threshold) || !util_list_empty(&ep->queue) ||
        ep->rank == mod->super.ctx->rank)
        return FERRY_ERR_NOT_SUPPORTED;
    bool tracked = !(flags & FERRY_BTL_PUTN_UNTRACKED);
    sm_iput_t *p = NULL;
    if (tracked && (p = util_pool_get(&mod->iops)) == NULL)
        return FERRY_ERR_NO_MEMORY;
    unsigned char *slot;
    uint64_t pos;
    size_t len = sizeof(sm_putn_hdr_t) + plen + size;
    if (!sm_ring_reserve(ep, len, &slot, &pos)) {
        if (p != NULL)
            util_pool_put(&mod->iops, p);
        return FERRY_ERR_NOT_SUPPORTED;
    }
    putn_write(slot, raddr, rkey, tracked ? 0 : SM_PUTN_TELL, payload, plen, local, size);
    sm_ring_commit(ep, pos, (uint32_t)len, tag, SM_T_PUTN);
    if (tracked) {
        iput_track(mod, ep, p, slot, offsetof(sm_putn_hdr_t, status), local, cb, cbctx, cbdata);
    } else if (ep->putn_cb != cb || ep->putn_cbctx != cbctx) {
        /* Refusals counted before the first untracked one are nobody's. */
        if (ep->putn_cb == NULL)
            ep->putn_seen = atomic_load_explicit(&ep->out->putn_refused, memory_order_acquire);
        ep->putn_cb = cb;
        ep->putn_cbctx = cbctx;
    }
    return FERRY_OK;
}

/* The common case in one pass, with nothing to call: an untracked one to a
 * connected peer with nothing queued, whose refusals go where the last
 * one's went, of a size put_notify_checked takes, with room before the
 * lap's end within the credits cached. Anything else goes to
 * put_notify_checked, which decides it from the start. */
int sm_put_notify_inline(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const void *local,
                         size_t size, uint64_t raddr, const uint8_t *rkey, uint8_t tag,
                         const void *payload, size_t plen, uint32_t flags,
                         ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    sm_module_t *mod = (sm_module_t *)btl;
    const size_t max = mod != NULL ? chunk_max(mod, sizeof(sm_putn_hdr_t)) : 0;
    if (__builtin_expect(mod != NULL && ep != NULL && ep->mod == mod && rkey != NULL &&
                             cb != NULL && flags == FERRY_BTL_PUTN_UNTRACKED &&
                             cb == ep->putn_cb && cbctx == ep->putn_cbctx &&
                             tag < FERRY_BTL_TAG_BTL_MIN && (payload != NULL || plen == 0) &&
                             (local != NULL || size == 0) && ep->state == SM_EP_CONNECTED &&
                             !ep->deleted && plen <= UINT16_MAX && size <= max &&
                             plen <= max - size &&
                             !(mod->cma_ok && size >= mod->p.cma_threshold) &&
                             util_list_empty(&ep->queue) && ep->rank != mod->super.ctx->rank,
                         1)) {
        const uint64_t ring = mod->p.ring_size;
        const size_t len = sizeof(sm_putn_hdr_t) + plen + size;
        const uint64_t pos = ep->head, off = pos & (ring - 1), span = sm_span(off, len);
        if (__builtin_expect(sm_ring_room(ep, ring, off, span), 1)) {
            unsigned char *slot = ep->out->ring + off + SM_HDR_SIZE;
            sm_ring_take(ep, ring, off, span);
            putn_write(slot, raddr, rkey, SM_PUTN_TELL, payload, plen, local, size);
            sm_ring_publish(ep, ring, off, span,
                            sm_hdr_pack((uint32_t)len, tag, SM_T_PUTN, sm_lap(pos, ring)));
            return FERRY_OK;
        }
    }
    return put_notify_checked(btl, ep, local, size, raddr, rkey, tag, payload, plen, flags, cb,
                              cbctx, cbdata);
}

void sm_putn_refusals(ferry_btl_endpoint_t *ep)
{
    /* The peer's word: any change is taken as refusals, reported once. */
    uint64_t n = atomic_load_explicit(&ep->out->putn_refused, memory_order_acquire);
    if (n == ep->putn_seen)
        return;
    ep->putn_seen = n;
    ep->putn_cb(&ep->mod->super, ep, NULL, NULL, ep->putn_cbctx, NULL, FERRY_ERR_ACCESS);
}

bool sm_putn_handle(sm_module_t *mod, ferry_btl_endpoint_t *ep, uint8_t tag, unsigned char *msg,
                    uint32_t len)
{
    sm_putn_hdr_t hdr;
    if (len < sizeof(hdr) || tag >= FERRY_BTL_TAG_BTL_MIN) {
        sm_ep_fail(mod, ep, "it sent a truncated put with notification, or one on a reserved tag");
        return false;
    }
    memcpy(&hdr, msg, sizeof(hdr));
    if (hdr.plen > len - sizeof(hdr)) {
        sm_ep_fail(mod, ep, "it sent a put with notification whose lengths do not add up");
        return false;
    }
    if ((hdr.flags & ~SM_PUTN_TELL) != 0 || hdr.status != 0) {
        sm_ep_fail(mod, ep, "it sent a put with notification with unknown flags or a status");
        return false;
    }
    unsigned char *payload = msg + sizeof(hdr);
    size_t n = len - sizeof(hdr) - hdr.plen;
    if (sm_target_copy(mod, &hdr.key, hdr.raddr, payload + hdr.plen, n, true) != FERRY_OK) {
        rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
               "sm: put of %zu bytes at 0x%llx with notification from rank %d refused", n,
               (unsigned long long)hdr.raddr, ep->rank);
        int32_t status = FERRY_ERR_ACCESS;
        /* Read by the initiator once our tail passes this message. */
        memcpy(msg + offsetof(sm_putn_hdr_t, status), &status, sizeof(status));
        /* Counted before anything we send after handling it. */
        if (hdr.flags & SM_PUTN_TELL)
            atomic_store_explicit(&ep->in->putn_refused,
                                  atomic_load_explicit(&ep->in->putn_refused,
                                                       memory_order_relaxed) + 1,
                                  memory_order_release);
    }
    ferry_btl_segment_t seg = {.addr = (uint64_t)(uintptr_t)payload, .len = hdr.plen};
    ferry_btl_recv_desc_t rd = {.ep = ep, .peer = ep->rank, .tag = tag, .segs = &seg, .seg_cnt = 1};
    btl_base_deliver(&mod->super, &rd);
    return true;
}


int sm_get_inline(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local, size_t size,
                  uint64_t raddr, const uint8_t *rkey, ferry_btl_rdma_cb_t cb, void *cbctx,
                  void *cbdata)
{
    sm_module_t *mod = (sm_module_t *)btl;
    /* Within the target's budget of gets it answers. */
    if (ep != NULL && mod != NULL && ep->mod == mod && ep->gets_out >= ep->peer_get_slots)
        return FERRY_ERR_NOT_SUPPORTED;
    int rc;
    sm_iput_t *g = iop_start(mod, ep, local, size, mod != NULL ? mod->super.attr.max_rdma_size : 0,
                             rkey, &rc);
    if (g == NULL)
        return rc;
    unsigned char *slot;
    uint64_t pos;
    if (!sm_ring_reserve(ep, sizeof(sm_get_req_t), &slot, &pos)) {
        util_pool_put(&mod->iops, g);
        return FERRY_ERR_NOT_SUPPORTED;
    }
    sm_get_req_t req = {.raddr = raddr, .len = size};
    memcpy(&req.key, rkey, sizeof(req.key));
    g->cookie = req.cookie = ++mod->next_cookie;
    memcpy(slot, &req, sizeof(req));
    sm_ring_commit(ep, pos, sizeof(req), 0, SM_T_GET_REQ);
    g->ep = ep;
    g->local = local;
    g->size = size;
    g->done = 0;
    g->cb = cb;
    g->cbctx = cbctx;
    g->cbdata = cbdata;
    g->uncounted = false;
    util_list_append(&ep->igets, &g->link);
    ep->gets_out++;
    ep->rdma_inflight++;
    return FERRY_OK;
}

int sm_iputs_run(sm_module_t *mod)
{
    int n = 0;
    util_list_item_t *it;
    while ((it = util_list_pop_front(&mod->iputs_done)) != NULL) {
        sm_iput_t *p = UTIL_CONTAINER_OF(it, sm_iput_t, link), done = *p;
        /* The record is free before its callback, which may start another. */
        util_pool_put(&mod->iops, p);
        if (!done.uncounted)
            done.ep->rdma_inflight--;
        if (done.cb != NULL)
            done.cb(&mod->super, done.ep, done.local, NULL, done.cbctx, done.cbdata,
                    done.status);
        n++;
    }
    return n;
}

void sm_iputs_fini(sm_module_t *mod)
{
    util_pool_fini(&mod->iops);
}

/* A chunk of a put arrived: copy it in if its key allows, now. */
static void handle_put(sm_module_t *mod, ferry_btl_endpoint_t *ep, unsigned char *msg,
                       uint32_t len)
{
    sm_put_hdr_t hdr;
    if (len < sizeof(hdr)) {
        sm_ep_fail(mod, ep, "it sent a truncated put");
        return;
    }
    memcpy(&hdr, msg, sizeof(hdr));
    size_t n = len - sizeof(hdr);
    if (sm_target_copy(mod, &hdr.key, hdr.raddr, msg + sizeof(hdr), n, true) != FERRY_OK) {
        /* The initiator checked too: the registration was withdrawn or its
         * memory unmapped while the put was on its way (or the peer made
         * the key up). The initiator learns it from the last chunk. */
        if (!ep->put_refused)
            rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
                   "sm: put of %zu bytes at 0x%llx from rank %d refused", n,
                   (unsigned long long)hdr.raddr, ep->rank);
        ep->put_refused = true;
    }
    if (hdr.flags & SM_PUT_LAST) {
        int32_t status = ep->put_refused ? FERRY_ERR_ACCESS : FERRY_OK;
        /* Written before our tail passes this message (publish_tail is a
         * release store), read by the initiator after it sees the tail. */
        memcpy(msg + offsetof(sm_put_hdr_t, status), &status, sizeof(status));
        ep->put_refused = false;
    }
}

/* A get request arrived: take a job slot, or leave it in the ring. */
static bool handle_get_req(sm_module_t *mod, ferry_btl_endpoint_t *ep, const unsigned char *msg,
                           uint32_t len)
{
    sm_get_req_t req;
    if (len != sizeof(req)) {
        sm_ep_fail(mod, ep, "it sent a malformed get request");
        return true;
    }
    uint32_t slots = (uint32_t)mod->p.get_slots;
    if (ep->njobs == slots)
        return false; /* past its budget: back pressure */
    if (ep->jobs == NULL) {
        /* Once per peer, never per request. */
        ep->jobs = calloc(slots, sizeof(*ep->jobs));
        if (ep->jobs == NULL) {
            rt_log(&mod->super.ctx->log, RT_LOG_WARN,
                   "sm: out of memory for rank %d's get slots; its gets wait", ep->rank);
            return false;
        }
    }
    memcpy(&req, msg, sizeof(req));
    /* job_head < slots and njobs < slots: one subtraction wraps it (a
     * division by a parameter costs tens of cycles a request). */
    uint32_t at = ep->job_head + ep->njobs;
    sm_get_job_t *job = &ep->jobs[at >= slots ? at - slots : at];
    *job = (sm_get_job_t){.req = req, .sent = 0, .refused = req.len > SIZE_MAX};
    ep->njobs++;
    sm_mark_sending(mod, ep);
    return true;
}

/* A get answer's status as the get ends with: ours, or the peer's error
 * where it is one of ferry's (anything else breaks the protocol). */
static int get_resp_status(int32_t status)
{
    return status == FERRY_OK                               ? FERRY_OK
           : status < 0 && status > FERRY_ERR_LAST ? status
                                                            : FERRY_ERR_PROTO;
}

/* An answer to a get of sm_get_inline's (none of the descriptors' had its
 * cookie): its data into place, checked as for those; complete, its
 * callback now (this runs from progress). */
static void iget_resp(sm_module_t *mod, ferry_btl_endpoint_t *ep, const sm_get_resp_t *resp,
                      const unsigned char *data, size_t n)
{
    sm_iput_t *g = NULL;
    for (util_list_item_t *it = util_list_first(&ep->igets); it != NULL;
         it = util_list_next(&ep->igets, it)) {
        sm_iput_t *x = UTIL_CONTAINER_OF(it, sm_iput_t, link);
        if (x->cookie == resp->cookie) {
            g = x;
            break;
        }
    }
    if (g == NULL) {
        /* One forgotten at del_procs may still be answered: dropped. */
        if (resp->cookie == 0 || resp->cookie > ep->forgot_cookie)
            sm_ep_fail(mod, ep, "it answered a get nobody asked for");
        return;
    }
    if (resp->status == FERRY_OK && (resp->offset != g->done || n > g->size - g->done)) {
        sm_ep_fail(mod, ep, "it answered a get with data out of place");
        return;
    }
    if (resp->status == FERRY_OK) {
        memcpy((char *)g->local + g->done, data, n);
        g->done += n;
        if (g->done < g->size)
            return;
    }
    util_list_remove(&ep->igets, &g->link);
    ep->gets_out--;
    ep->rdma_inflight--;
    sm_iput_t done = *g;
    util_pool_put(&mod->iops, g);
    if (done.cb != NULL)
        done.cb(&mod->super, ep, done.local, NULL, done.cbctx, done.cbdata,
                get_resp_status(resp->status));
}

static void handle_get_resp(sm_module_t *mod, ferry_btl_endpoint_t *ep, const unsigned char *msg,
                            uint32_t len)
{
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
        iget_resp(mod, ep, &resp, msg + sizeof(resp), n);
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
        ep->gets_out--;
        sm_complete(mod, frag, get_resp_status(resp.status));
    }
}

static bool amo_expand(uint8_t type, const unsigned char *msg, uint32_t len, btl_amo_msg_t *out);

bool sm_rdma_handle(sm_module_t *mod, ferry_btl_endpoint_t *ep, uint8_t type, unsigned char *msg,
                    uint32_t len)
{
    if (type == SM_T_AMO_REQ || type == SM_T_AMO_ANSWER) {
        btl_amo_msg_t m;
        int rc = !amo_expand(type, msg, len, &m) ? FERRY_ERR_PROTO
                 : type == SM_T_AMO_REQ
                     ? btl_amo_target(&mod->super, &mod->amo, ep, &m, sizeof(m))
                     : btl_amo_answer(&mod->super, &mod->amo, ep, &m, sizeof(m));
        if (rc == 0) {
            /* Past its budget of answers owed: they go first. */
            sm_mark_sending(mod, ep);
            return false;
        }
        if (rc == FERRY_ERR_PROTO)
            sm_ep_fail(mod, ep,
                       type == SM_T_AMO_REQ ? "it sent a malformed atomic"
                                            : "it answered an atomic nobody asked for");
        else if (rc < 0 && rc != FERRY_ERR_UNREACH)
            sm_ep_fail(mod, ep, "an atomic's answer could not be sent");
        else if (btl_amo_owes(&ep->amo))
            sm_mark_sending(mod, ep);
        return true;
    }
    if (type == SM_T_ASSIST)
        handle_assist(mod, ep, msg, len);
    else if (type == SM_T_PUT)
        handle_put(mod, ep, msg, len);
    else if (type == SM_T_GET_REQ)
        return handle_get_req(mod, ep, msg, len);
    else
        handle_get_resp(mod, ep, msg, len);
    return true;
}

/* Writes the answers of the job at the head while credits last; true when
 * the job is done. Each chunk is checked and copied at the moment it is
 * written, so a registration withdrawn or unmapped meanwhile ends the job
 * with FERRY_ERR_ACCESS instead of a copy from memory no longer offered. */
static bool answer_job(sm_module_t *mod, ferry_btl_endpoint_t *ep, sm_get_job_t *job)
{
    for (;;) {
        size_t chunk = job->refused ? 0 : (size_t)(job->req.len - job->sent);
        if (chunk > chunk_max(mod, sizeof(sm_get_resp_t)))
            chunk = chunk_max(mod, sizeof(sm_get_resp_t));
        /* A chunk the key does not cover is not given ring space... */
        if (!job->refused &&
            sm_target_check(mod, &job->req.key, job->req.raddr + job->sent, chunk, false) !=
                FERRY_OK) {
            job->refused = true;
            chunk = 0;
        }
        unsigned char *slot;
        uint64_t pos;
        if (!sm_ring_reserve(ep, sizeof(sm_get_resp_t) + chunk, &slot, &pos))
            return false;
        /* ...and the copy checks again, at the moment it reads: memory
         * withdrawn between the two is refused here (the answer then
         * carries the error and its data is not used). */
        if (!job->refused &&
            sm_target_copy(mod, &job->req.key, job->req.raddr + job->sent,
                           slot + sizeof(sm_get_resp_t), chunk, false) != FERRY_OK)
            job->refused = true;
        sm_get_resp_t resp = {.cookie = job->req.cookie,
                              .offset = job->sent,
                              .status = job->refused ? FERRY_ERR_ACCESS : FERRY_OK};
        memcpy(slot, &resp, sizeof(resp));
        sm_ring_commit(ep, pos, (uint32_t)(sizeof(resp) + chunk), 0, SM_T_GET_RESP);
        job->sent += chunk;
        if (job->refused || job->sent == job->req.len)
            return true;
    }
}

/* Answers gets and completes ring puts the peer has consumed. Returns the
 * events handled. */
int sm_rdma_progress(sm_module_t *mod, ferry_btl_endpoint_t *ep)
{
    int n = 0;
    if (ep->assist.frag != NULL && assist_check(mod, ep))
        n++;
    if (!util_list_empty(&ep->ring_puts) || !util_list_empty(&ep->iputs)) {
        int done = sm_ring_refresh_tail(ep);
        if (done < 0)
            return n;
        n += done;
    }
    while (ep->njobs > 0) {
        if (sm_ep_connect(mod, ep) != FERRY_OK)
            break;
        sm_get_job_t *job = &ep->jobs[ep->job_head];
        if (!answer_job(mod, ep, job))
            break;
        ep->job_head = ep->job_head + 1 == (uint32_t)mod->p.get_slots ? 0 : ep->job_head + 1;
        ep->njobs--;
        n++;
    }
    if (btl_amo_owes(&ep->amo)) {
        int sent = btl_amo_send_owed(&mod->super, &mod->amo, ep);
        if (sent < 0 && sent != FERRY_ERR_UNREACH)
            sm_ep_fail(mod, ep, "an atomic's answer could not be sent");
        else if (sent > 0)
            n += sent;
    }
    return n;
}

void sm_rdma_fail(sm_module_t *mod, ferry_btl_endpoint_t *ep, int status)
{
    util_list_item_t *it;
    /* A peer that fails writes no more: its pieces will not be counted. */
    if (ep->assist.frag != NULL)
        assist_finish(mod, ep, status);
    while ((it = util_list_pop_front(&ep->ring_puts)) != NULL)
        sm_complete(mod, UTIL_CONTAINER_OF(it, btl_frag_t, link), status);
    for (int k = 0; k < 2; k++)
        while ((it = util_list_pop_front(k == 0 ? &ep->iputs : &ep->igets)) != NULL) {
            sm_iput_t *p = UTIL_CONTAINER_OF(it, sm_iput_t, link);
            p->status = status;
            p->uncounted = true;
            ep->rdma_inflight--;
            util_list_append(&mod->iputs_done, it);
        }
    while ((it = util_list_pop_front(&ep->gets)) != NULL)
        sm_complete(mod, UTIL_CONTAINER_OF(it, btl_frag_t, link), status);
    ep->gets_out = 0;
    ep->njobs = 0;
    ep->job_head = 0;
    btl_amo_ep_fail(&mod->amo, &ep->amo, status);
}

void sm_rdma_ep_fini(ferry_btl_endpoint_t *ep)
{
    free(ep->jobs);
    ep->jobs = NULL;
    btl_amo_ep_fini(&ep->mod->amo, &ep->amo);
}

/* ---- atomics ---- */

/* The generic path's hooks: requests and answers are ring messages of their
 * own types, behind whatever is queued (so never ahead of earlier work). */
static int amo_send(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, const btl_amo_msg_t *msg)
{
    sm_module_t *mod = (sm_module_t *)btl;
    int rc = ep->state == SM_EP_CONNECTED ? FERRY_OK : sm_ep_connect(mod, ep);
    if (rc != FERRY_OK)
        return rc;
    if (ep->state != SM_EP_CONNECTED)
        return FERRY_ERR_UNREACH;
    if (!util_list_empty(&ep->queue))
        return FERRY_ERR_NO_RESOURCE;
    bool req = msg->kind == BTL_AMO_REQ;
    size_t len = req ? sizeof(sm_amo_req_t) : sizeof(sm_amo_answer_t);
    unsigned char *slot;
    uint64_t pos;
    if (!sm_ring_reserve(ep, len, &slot, &pos))
        return FERRY_ERR_NO_RESOURCE;
    if (req) {
        /* Straight into the ring (slot is aligned for it). */
        sm_amo_req_t *r = (sm_amo_req_t *)(void *)slot;
        *r = (sm_amo_req_t){.op = msg->op,
                            .flags = (uint16_t)msg->flags,
                            .cookie = msg->cookie,
                            .raddr = msg->raddr,
                            .operand = msg->operand,
                            .compare = msg->compare};
        memcpy(&r->key, msg->key, sizeof(r->key));
    } else {
        sm_amo_answer_t a = {.status = msg->status, .cookie = msg->cookie, .operand = msg->operand};
        memcpy(slot, &a, sizeof(a));
    }
    sm_ring_commit(ep, pos, len, 0, req ? SM_T_AMO_REQ : SM_T_AMO_ANSWER);
    return FERRY_OK;
}

_Static_assert((BTL_AMO_CSWAP | BTL_AMO_FETCH | FERRY_BTL_ATOMIC_FLAG_32BIT) <= UINT16_MAX,
               "a request's flags fit sm's 16 bits");
_Static_assert(SM_HDR_SIZE + sizeof(sm_amo_req_t) == 64 &&
                   SM_HDR_SIZE + sizeof(sm_amo_answer_t) == 32,
               "sm's atomic messages: a request in 64 ring bytes, an answer in 32");

/* A ring atomic message as the generic path's btl_amo_msg_t (false: not
 * one of sm's forms). */
static bool amo_expand(uint8_t type, const unsigned char *msg, uint32_t len, btl_amo_msg_t *out)
{
    memset(out, 0, sizeof(*out));
    out->magic = BTL_AMO_MAGIC;
    if (type == SM_T_AMO_REQ) {
        sm_amo_req_t r;
        if (len != sizeof(r))
            return false;
        memcpy(&r, msg, sizeof(r));
        if (r.reserved != 0)
            return false;
        out->kind = BTL_AMO_REQ;
        out->op = r.op;
        out->flags = r.flags;
        out->cookie = r.cookie;
        out->raddr = r.raddr;
        out->operand = r.operand;
        out->compare = r.compare;
        memcpy(out->key, &r.key, sizeof(r.key));
        return true;
    }
    sm_amo_answer_t a;
    if (len != sizeof(a))
        return false;
    memcpy(&a, msg, sizeof(a));
    if (a.reserved != 0)
        return false;
    out->kind = BTL_AMO_ANSWER;
    out->status = a.status;
    out->cookie = a.cookie;
    out->operand = a.operand;
    return true;
}

static btl_amo_ep_t *amo_ep(ferry_btl_endpoint_t *ep)
{
    return &ep->amo;
}

const btl_amo_hooks_t sm_amo_hooks = {
    .send = amo_send,
    .resolve = sm_target_resolve,
    .ep_state = amo_ep,
};

/*
 * Where [raddr, raddr + size) under rkey lies in our mapping of the peer's
 * heap, with need among the registration's rights: FERRY_OK and *there;
 * FERRY_ERR_NOT_SUPPORTED when the memory is not a heap of the peer's (or
 * cannot be mapped), the key, range and right checked all the same (but for
 * an atomic its owner executes): the peer must do it, or a cross-memory
 * copy (cma_direct); FERRY_ERR_ACCESS when the key refuses. The last heap registration resolved is cached per endpoint and
 * revalidated by its table entry's generation, which changes with every
 * rewrite, so a repeated key costs one compare and one load. The caller
 * checks the generation again after the access (sm_peer_key_live).
 */
static int heap_resolve_slow(sm_module_t *mod, ferry_btl_endpoint_t *ep, const uint8_t *rkey,
                             uint64_t raddr, size_t size, uint32_t need, unsigned char **there);

static inline int heap_resolve(sm_module_t *mod, ferry_btl_endpoint_t *ep, const uint8_t *rkey,
                               uint64_t raddr, size_t size, uint32_t need,
                               unsigned char **there)
{
    sm_key_t key;
    memcpy(&key, rkey, sizeof(key));
    if (ep->hcache.valid && key.slot == ep->hcache.key.slot && key.gen == ep->hcache.key.gen &&
        key.nonce == ep->hcache.key.nonce &&
        atomic_load_explicit(&peer_table(ep)[key.slot].gen, memory_order_acquire) == key.gen) {
        /* Only the range and the right are new: checked, as the slow path
         * checks them, before ordinary memory is left to the caller. */
        if ((need & FERRY_ACCESS_REMOTE_ATOMIC) &&
            (ep->hcache.access & FERRY_BTL_ACCESS_TARGET_ATOMICS))
            return FERRY_ERR_NOT_SUPPORTED;
        if ((ep->hcache.access & need) != need || raddr < ep->hcache.base ||
            ep->hcache.len < size || raddr - ep->hcache.base > ep->hcache.len - size)
            return FERRY_ERR_ACCESS;
        if (ep->hcache.there == NULL)
            return FERRY_ERR_NOT_SUPPORTED;
        *there = ep->hcache.there + (raddr - ep->hcache.base);
        return FERRY_OK;
    }
    return heap_resolve_slow(mod, ep, rkey, raddr, size, need, there);
}

static int __attribute__((noinline)) heap_resolve_slow(sm_module_t *mod, ferry_btl_endpoint_t *ep,
                                                       const uint8_t *rkey, uint64_t raddr,
                                                       size_t size, uint32_t need,
                                                       unsigned char **there)
{
    const sm_reg_entry_t *table = peer_table(ep);
    sm_key_t key;
    memcpy(&key, rkey, sizeof(key));
    sm_reg_view_t view;
    int rc = sm_check_peer_key(table, ep->peer_reg_slots, rkey, raddr, size, need, &view);
    if (rc != FERRY_OK)
        return rc;
    unsigned char *heap = view.heap_id != 0 ? heap_map(mod, ep, view.heap_id, view.heap_len)
                                            : NULL;
    uint64_t rbase = (uint64_t)(uintptr_t)view.reg.base;
    ep->hcache.key = key;
    ep->hcache.base = rbase;
    ep->hcache.len = view.reg.len;
    ep->hcache.access = view.reg.access;
    ep->hcache.there = heap != NULL ? heap + view.heap_off : NULL;
    ep->hcache.valid = true;
    /* Its owner executes its atomics (FERRY_BTL_ACCESS_TARGET_ATOMICS). */
    bool by_owner = (view.reg.access & FERRY_BTL_ACCESS_TARGET_ATOMICS) != 0;
    if (heap == NULL || ((need & FERRY_ACCESS_REMOTE_ATOMIC) && by_owner))
        return FERRY_ERR_NOT_SUPPORTED;
    *there = ep->hcache.there + (raddr - rbase);
    return FERRY_OK;
}

/* An atomic: on our own memory or a peer's heap, the CPU's atomic here and
 * now (FERRY_BTL_DONE); on a peer's ordinary memory, executed by the peer
 * (cross-memory attach cannot do atomics). Inline in each of the three ops,
 * where cswap and fetch are constants. */
static inline __attribute__((always_inline)) int
atomic_start(sm_module_t *mod, ferry_btl_endpoint_t *ep, void *local, ferry_btl_reg_t *lreg,
             uint64_t raddr, const uint8_t *rkey, uint32_t op, uint64_t operand,
             uint64_t compare, uint32_t flags, bool cswap, bool fetch, bool direct,
             ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    if (mod == NULL || ep == NULL || ep->mod != mod || rkey == NULL || (fetch && local == NULL))
        return FERRY_ERR_INVALID;
    int rc = btl_base_atomic_check(&mod->super, op, cswap, raddr, flags);
    if (rc != FERRY_OK)
        return rc;
    if (ep->deleted || ep->state == SM_EP_FAILED || ep->state == SM_EP_CLOSED)
        return FERRY_ERR_UNREACH;
    bool w32 = (flags & FERRY_BTL_ATOMIC_FLAG_32BIT) != 0;
    size_t size = w32 ? 4 : 8;
    if (ep->rank == mod->super.ctx->rank) {
        void *mine;
        rc = sm_target_resolve(&mod->super, rkey, raddr, size, FERRY_ACCESS_REMOTE_ATOMIC, &mine);
        if (rc != FERRY_OK)
            return rc;
        uint64_t old = ferry_btl_atomic_apply(mine, w32, cswap, op, operand, compare);
        if (fetch)
            btl_atomic_store_result(local, w32, old);
        return FERRY_BTL_DONE;
    }
    if (ep->state != SM_EP_CONNECTED && (rc = sm_ep_connect(mod, ep)) != FERRY_OK)
        return rc;
    unsigned char *there;
    rc = heap_resolve(mod, ep, rkey, raddr, size, FERRY_ACCESS_REMOTE_ATOMIC, &there);
    if (rc == FERRY_ERR_NOT_SUPPORTED)
        return direct ? rc
                      : btl_amo_start(&mod->super, &mod->amo, ep, local, lreg, raddr, rkey, op,
                                      operand, compare, flags, cswap, fetch, cb, cbctx, cbdata);
    if (rc != FERRY_OK)
        return rc;
    uint64_t old = ferry_btl_atomic_apply(there, w32, cswap, op, operand, compare);
    /* A registration withdrawn meanwhile makes it not count (its memory
     * may be another's by now). */
    if (!sm_peer_key_live(peer_table(ep), ep->peer_reg_slots, rkey))
        return FERRY_ERR_ACCESS;
    if (fetch)
        btl_atomic_store_result(local, w32, old);
    return FERRY_BTL_DONE;
}

/* rdma_direct on ordinary memory whose key, range and right heap_resolve
 * has checked: where rdma_start would make a plain cross-memory copy at
 * once (sm_cma_for, below the assisted size), the same copy inside the
 * call, with no descriptor, no local registration and no completion to
 * queue (a large message's get at its receiver, a lone put or get).
 * FERRY_ERR_NOT_SUPPORTED: the ordinary path decides. */
static int cma_direct(sm_module_t *mod, ferry_btl_endpoint_t *ep, bool put, void *local,
                      uint64_t raddr, const uint8_t *rkey, size_t size)
{
    if (!sm_cma_for(mod, ep, size) || (mod->p.cma_assist > 0 && size >= mod->p.cma_assist))
        return FERRY_ERR_NOT_SUPPORTED;
    int err = cma_copy(ep->pid, put, local, (void *)(uintptr_t)raddr, size);
    if (err == EPERM || err == ENOSYS)
        cma_refused(mod, err);
    /* Refused, or failed otherwise (the peer gone: ESRCH; memory not
     * mapped: EFAULT): the ordinary path tries again and reports it through
     * the operation's completion, as it always has. A peer's death is not
     * the caller's to hear of from the call before progress has said so. */
    if (err != 0)
        return FERRY_ERR_NOT_SUPPORTED;
    ep->cma_worked = true;
    /* As after any cross-memory copy: a key withdrawn meanwhile voids it. */
    return sm_peer_key_live(peer_table(ep), ep->peer_reg_slots, rkey) ? FERRY_BTL_DONE
                                                                      : FERRY_ERR_ACCESS;
}

/* The direct path (ferry_btl_ops.rdma_direct): a peer's heap, or our own
 * memory, copied here and now, and ordinary memory by cma_direct; anything
 * else goes through put/get. */
int sm_rdma_direct(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, bool put, void *local,
                   uint64_t raddr, const uint8_t *rkey, size_t size)
{
    sm_module_t *mod = (sm_module_t *)btl;
    if (mod == NULL || ep == NULL || ep->mod != mod || rkey == NULL ||
        (local == NULL && size > 0) || size > mod->super.attr.max_rdma_size)
        return FERRY_ERR_INVALID;
    if (ep->deleted || ep->state == SM_EP_FAILED || ep->state == SM_EP_CLOSED)
        return FERRY_ERR_UNREACH;
    if (size == 0 || ep->rank == mod->super.ctx->rank)
        return FERRY_ERR_NOT_SUPPORTED; /* put/get: no faster way to say so */
    int rc;
    if (ep->state != SM_EP_CONNECTED && (rc = sm_ep_connect(mod, ep)) != FERRY_OK)
        return rc;
    unsigned char *there;
    rc = heap_resolve(mod, ep, rkey, raddr, size,
                      put ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ, &there);
    if (rc == FERRY_ERR_NOT_SUPPORTED)
        return cma_direct(mod, ep, put, local, raddr, rkey, size);
    if (rc != FERRY_OK)
        return rc;
    if (put)
        sm_copy(there, local, size);
    else
        sm_copy(local, there, size);
    /* Visible to whoever hears of the completion after this. */
    atomic_thread_fence(memory_order_release);
    return sm_peer_key_live(peer_table(ep), ep->peer_reg_slots, rkey) ? FERRY_BTL_DONE
                                                                      : FERRY_ERR_ACCESS;
}

int sm_atomic_op(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, uint64_t raddr,
                 const uint8_t *rkey, ferry_btl_atomic_op_t op, uint64_t operand, uint32_t flags,
                 ferry_btl_rdma_cb_t cb, void *cbctx, void *cbdata)
{
    return atomic_start((sm_module_t *)btl, ep, NULL, NULL, raddr, rkey, op, operand, 0, flags,
                        false, false, false, cb, cbctx, cbdata);
}

int sm_atomic_fop(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local, uint64_t raddr,
                  ferry_btl_reg_t *lreg, const uint8_t *rkey, ferry_btl_atomic_op_t op,
                  uint64_t operand, uint32_t flags, ferry_btl_rdma_cb_t cb, void *cbctx,
                  void *cbdata)
{
    return atomic_start((sm_module_t *)btl, ep, local, lreg, raddr, rkey, op, operand, 0, flags,
                        false, true, false, cb, cbctx, cbdata);
}

int sm_atomic_cswap(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *local,
                    uint64_t raddr, ferry_btl_reg_t *lreg, const uint8_t *rkey, uint64_t compare,
                    uint64_t value, uint32_t flags, ferry_btl_rdma_cb_t cb, void *cbctx,
                    void *cbdata)
{
    return atomic_start((sm_module_t *)btl, ep, local, lreg, raddr, rkey, 0, value, compare,
                        flags, true, true, false, cb, cbctx, cbdata);
}

/* The direct path (ferry_btl_ops.atomic_direct): the CPU's atomic where
 * atomic_start would do it inside the call; a peer's ordinary memory is
 * left to the three ops above. */
int sm_atomic_direct(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *result,
                     uint64_t raddr, const uint8_t *rkey, ferry_btl_atomic_op_t op,
                     uint64_t operand, uint64_t compare, uint32_t flags)
{
    sm_module_t *mod = (sm_module_t *)btl;
    uint32_t wflags = flags & ~(uint32_t)FERRY_BTL_ATOMIC_FLAG_CSWAP;
    if (flags & FERRY_BTL_ATOMIC_FLAG_CSWAP)
        return atomic_start(mod, ep, result, NULL, raddr, rkey, 0, operand, compare, wflags,
                            true, true, true, NULL, NULL, NULL);
    if (result != NULL)
        return atomic_start(mod, ep, result, NULL, raddr, rkey, op, operand, 0, wflags, false,
                            true, true, NULL, NULL, NULL);
    return atomic_start(mod, ep, NULL, NULL, raddr, rkey, op, operand, 0, wflags, false, false,
                        true, NULL, NULL, NULL);
}
