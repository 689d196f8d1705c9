/*
 * Registrations, and the copies a target makes for a peer.
 *
 * A registration lives twice: as an entry in our segment's table, which
 * peers read to check an access before they start it (and which any
 * process of the user can overwrite), and as a private sm_reg_t, which is
 * the only thing we believe when we touch our memory for a peer. Keys carry
 * 64 random bits (getrandom, in batches) that the table does not hold, so a
 * key cannot be guessed from a slot and a generation, and an old key never
 * matches a new registration of its slot.
 *
 * Memory a registration covers may be unmapped while it is registered. A
 * peer's put or get through the ring must then be refused, never copied
 * into or out of (a fault would kill us). Two mechanisms, used together:
 * - The unmap monitor (mem/monitor.h): registrations with remote rights are
 *   watched; when their range is unmapped or moved, the monitor thread
 *   marks them revoked, under the monitor lock. A copy checks the mark and
 *   copies, under the same lock when the monitor is handling events (and
 *   with no lock when it is settled, mem_monitor_settled), so memory
 *   unmapped before the copy began is refused. The kernel reports an unmap after the pages are gone, so this
 *   cannot stop an unmapping that another thread makes during the copy.
 * - A copy that cannot fault: process_vm_readv/writev on our own pid reads
 *   and writes our memory through the kernel, which answers EFAULT where
 *   nothing is mapped. It costs a system call per chunk (about 1 us), so it
 *   serves registrations the monitor cannot watch (no userfaultfd, or a
 *   kind of memory it cannot watch), and every registration when
 *   FERRY_SM_COPY_CHECKED=1 asks for safety against concurrent unmapping.
 * Where neither works (no userfaultfd, and process_vm_* refused to us),
 * msync tells whether the range is still mapped just before the copy.
 * docs/sm.md states what each configuration guarantees.
 */
#include <errno.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "btl/sm/sm.h"
#include "mem/rcache.h"

#define SM_REG_MAGIC 0x534d5247u

/* ---- random bits ---- */

/* ---- the unmap monitor ---- */

static bool revoke_one(mem_itree_node_t *node, void *arg)
{
    sm_module_t *mod = arg;
    sm_reg_t *reg = UTIL_CONTAINER_OF(node, sm_reg_t, node);
    atomic_store_explicit(&reg->revoked, true, memory_order_release);
    /* Peers' own checks refuse it from now on too: an odd generation
     * matches no key. */
    atomic_fetch_or_explicit(&mod->reg_table[reg->slot].gen, 1u, memory_order_release);
    return true;
}

/* Monitor thread, monitor lock held: no allocation, no logging. */
static void on_unmapped(mem_monitor_client_t *client, mem_monitor_event_t event, uintptr_t start,
                        uintptr_t end)
{
    /* Discarded pages are still mapped: copies into them are safe. */
    if (event == MEM_MONITOR_DISCARD)
        return;
    sm_module_t *mod = UTIL_CONTAINER_OF(client, sm_module_t, mon_client);
    mem_itree_overlaps(&mod->watched, start, end, revoke_one, mod);
}

/* Attaches to the monitor the first time memory with remote rights is
 * registered, unless FERRY_MEM_MONITOR=none. */
static void monitor_start(sm_module_t *mod)
{
    if (mod->mon_state != 0)
        return;
    mod->mon_state = -1;
    if (mod->frags.rcache == NULL || !mod->frags.rcache->p.mem.monitor)
        return;
    char why[160] = "";
    mem_itree_init(&mod->watched);
    mod->mon_client.invalidate = on_unmapped;
    if (mem_monitor_attach(&mod->mon_client, why, sizeof(why)) == FERRY_OK) {
        mod->mon_state = 1;
        mem_monitor_keep(mod->frags.rcache->p.mem.watch_keep);
    } else
        rt_log(&mod->super.ctx->log, RT_LOG_INFO,
               "sm: unmapped registered memory cannot be watched (%s); copies for peers are "
               "checked by the kernel instead",
               why);
}

/* The registration table and the tree change under the monitor lock once
 * the monitor thread may look at them. */
static void table_lock(sm_module_t *mod)
{
    if (mod->mon_state == 1)
        mem_monitor_lock();
}

static void table_unlock(sm_module_t *mod)
{
    if (mod->mon_state == 1)
        mem_monitor_unlock();
}

/* ---- registration ---- */

int sm_register_mem(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *base, size_t len,
                    uint32_t access, ferry_btl_reg_t **reg_out)
{
    sm_module_t *mod = (sm_module_t *)btl;
    int rc = btl_base_check_register(btl, base, len, access, reg_out);
    if (rc != FERRY_OK)
        return rc;
    const uint32_t remote_rights =
        FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_ATOMIC;
    if (!(access & remote_rights)) {
        /* Local rights only (the buffers of this process's own puts, gets
         * and sends): no slot, so that they never crowd out registrations
         * peers need, whatever FERRY_SM_REG_SLOTS. */
        sm_reg_t *lreg = calloc(1, sizeof(*lreg));
        if (lreg == NULL)
            return FERRY_ERR_NO_MEMORY;
        lreg->magic = SM_REG_MAGIC;
        lreg->slot = SM_SLOT_LOCAL;
        lreg->base.base = base;
        lreg->base.len = len;
        lreg->base.access = access;
        sm_key_t key = {.slot = SM_SLOT_LOCAL, .gen = 1, .nonce = 0};
        memcpy(lreg->base.key, &key, sizeof(key));
        util_list_append(&mod->local_regs, &lreg->local_link);
        *reg_out = &lreg->base;
        return FERRY_OK;
    }
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
    uint64_t nonce = 0;
    if ((rc = btl_base_nonce(btl, &mod->nonces, "sm", &nonce)) != FERRY_OK)
        return rc;
    sm_reg_t *reg = calloc(1, sizeof(*reg));
    if (reg == NULL)
        return FERRY_ERR_NO_MEMORY;
    uintptr_t start = (uintptr_t)base;
    const uint32_t remote =
        FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_ATOMIC;
    if (access & remote) {
        monitor_start(mod);
        if (mod->mon_state == 1 && mem_monitor_watch(start, start + len, &reg->watch) != FERRY_OK)
            reg->watch = NULL;
    }
    reg->node.start = start;
    reg->node.end = start + len;

    uint32_t heap_id = 0;
    uint64_t heap_off = 0, heap_len = 0;
    for (int h = 0; h < mod->nheaps; h++) {
        const sm_heap_t *heap = &mod->heaps[h];
        if ((unsigned char *)base >= heap->base &&
            (size_t)((unsigned char *)base - heap->base) <= heap->len &&
            len <= heap->len - (size_t)((unsigned char *)base - heap->base)) {
            heap_id = heap->id;
            heap_off = (uint64_t)((unsigned char *)base - heap->base);
            heap_len = heap->len;
        }
    }

    table_lock(mod);
    sm_reg_entry_t *e = &mod->reg_table[slot];
    /* Sequence lock: odd while the entry changes. */
    uint32_t gen = atomic_load_explicit(&e->gen, memory_order_relaxed);
    gen += (gen & 1) ? 1 : 2; /* the next even value, never 0 */
    if (gen == 0)
        gen = 2;
    atomic_store_explicit(&e->gen, gen - 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    e->access = access;
    e->base = (uint64_t)start;
    e->len = len;
    e->heap_id = heap_id;
    e->heap_off = heap_off;
    e->heap_len = heap_len;
    atomic_store_explicit(&e->gen, gen, memory_order_release);
    if (reg->watch != NULL)
        mem_itree_insert(&mod->watched, &reg->node);
    table_unlock(mod);

    reg->magic = SM_REG_MAGIC;
    reg->slot = slot;
    reg->gen = gen;
    reg->nonce = nonce;
    reg->base.base = base;
    reg->base.len = len;
    reg->base.access = access;
    sm_key_t key = {.slot = slot, .gen = gen, .nonce = nonce};
    memcpy(reg->base.key, &key, sizeof(key));
    mod->regs[slot] = reg;
    *reg_out = &reg->base;
    return FERRY_OK;
}

int sm_deregister_mem(ferry_btl_module_t *btl, ferry_btl_reg_t *breg)
{
    sm_module_t *mod = (sm_module_t *)btl;
    sm_reg_t *reg = (sm_reg_t *)breg;
    if (btl == NULL || reg == NULL || reg->magic != SM_REG_MAGIC)
        return FERRY_ERR_INVALID;
    if (reg->slot == SM_SLOT_LOCAL) {
        util_list_remove(&mod->local_regs, &reg->local_link);
        reg->magic = 0;
        free(reg);
        return FERRY_OK;
    }
    if (reg->slot >= mod->p.reg_slots || mod->regs[reg->slot] != reg)
        return FERRY_ERR_INVALID;
    table_lock(mod);
    sm_reg_entry_t *e = &mod->reg_table[reg->slot];
    /* An odd generation matches no key: later accesses are refused. The
     * monitor may have made it odd already. */
    uint32_t gen = atomic_load_explicit(&e->gen, memory_order_relaxed);
    if ((gen & 1) == 0)
        atomic_store_explicit(&e->gen, gen + 1, memory_order_release);
    if (reg->watch != NULL)
        mem_itree_remove(&mod->watched, &reg->node);
    table_unlock(mod);
    mod->regs[reg->slot] = NULL;
    reg->magic = 0;
    mem_monitor_unwatch(reg->watch);
    free(reg);
    return FERRY_OK;
}

void sm_regs_release(sm_module_t *mod)
{
    /* No more invalidations once detached: the tree is ours alone. */
    if (mod->mon_state == 1)
        mem_monitor_detach(&mod->mon_client);
    mod->mon_state = -1;
    if (mod->regs != NULL)
        for (size_t i = 0; i < mod->p.reg_slots; i++) {
            if (mod->regs[i] != NULL)
                mem_monitor_unwatch(mod->regs[i]->watch);
            free(mod->regs[i]);
        }
    free(mod->regs);
    mod->regs = NULL;
    util_list_item_t *it;
    while (mod->local_regs.head.next != NULL && (it = util_list_pop_front(&mod->local_regs)) != NULL)
        free(UTIL_CONTAINER_OF(it, sm_reg_t, local_link));
}

/* ---- copies for peers ---- */

/* process_vm_readv/writev on ourselves: where nothing is mapped (or the
 * rights do not allow it) the kernel says EFAULT instead of a fault. */
static int copy_by_kernel(sm_module_t *mod, uint64_t addr, void *buf, size_t len, bool to_mem)
{
    struct iovec liov = {.iov_base = buf, .iov_len = len};
    struct iovec riov = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
    size_t moved = 0;
    while (moved < len) {
        ssize_t n = to_mem ? process_vm_writev(mod->self_pid, &liov, 1, &riov, 1, 0)
                           : process_vm_readv(mod->self_pid, &liov, 1, &riov, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && moved == 0 && (errno == EPERM || errno == ENOSYS)) {
            rt_log(&mod->super.ctx->log, RT_LOG_INFO,
                   "sm: process_vm_readv/writev on this process refused (%s); copies for peers "
                   "check the mapping with msync instead",
                   strerror(errno));
            mod->self_cma = false;
            return FERRY_ERR_NOT_SUPPORTED;
        }
        if (n <= 0)
            return FERRY_ERR_ACCESS;
        moved += (size_t)n;
        liov.iov_base = (char *)liov.iov_base + n;
        liov.iov_len -= (size_t)n;
        riov.iov_base = (char *)riov.iov_base + n;
        riov.iov_len -= (size_t)n;
    }
    return FERRY_OK;
}

/* Last resort: is every page of the range mapped right now? */
static bool range_mapped(uint64_t addr, size_t len)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t lo = addr & ~(page - 1);
    uint64_t hi = addr + len;
    return msync((void *)(uintptr_t)lo, (size_t)(hi - lo), MS_ASYNC) == 0;
}

static const sm_reg_t *target_reg(const sm_module_t *mod, const sm_key_t *key, uint64_t addr,
                                  size_t len, bool to_mem)
{
    return sm_target_reg_need(mod, key, addr, len,
                           to_mem ? FERRY_ACCESS_REMOTE_WRITE : FERRY_ACCESS_REMOTE_READ);
}

int sm_target_resolve(ferry_btl_module_t *btl, const uint8_t *keybytes, uint64_t addr,
                      size_t len, uint32_t need, void **ptr_out)
{
    sm_module_t *mod = (sm_module_t *)btl;
    sm_key_t key;
    memcpy(&key, keybytes, sizeof(key));
    const sm_reg_t *reg = sm_target_reg_need(mod, &key, addr, len, need);
    if (reg == NULL)
        return FERRY_ERR_ACCESS;
    if (reg->watch != NULL) {
        /* The monitor marks a registration whose memory went away. As
         * under its lock, the copy the caller makes after this is not
         * covered (README.md, Limits). */
        if (atomic_load_explicit(&reg->revoked, memory_order_acquire))
            return FERRY_ERR_ACCESS;
    } else if (!range_mapped(addr, len)) {
        return FERRY_ERR_ACCESS;
    }
    *ptr_out = (void *)(uintptr_t)addr;
    return FERRY_OK;
}

int sm_target_check(const sm_module_t *mod, const sm_key_t *key, uint64_t addr, size_t len,
                    bool to_mem)
{
    return target_reg(mod, key, addr, len, to_mem) != NULL ? FERRY_OK : FERRY_ERR_ACCESS;
}

int sm_target_copy_slow(sm_module_t *mod, const sm_reg_t *reg, uint64_t addr, void *buf,
                        size_t len, bool to_mem)
{
    void *mem = (void *)(uintptr_t)addr;
    if (reg->watch != NULL) {
        /* Anything unmapped before now is marked: when the monitor is
         * settled, by the time of the load below; when it is handling
         * events, once it lets go of its lock. */
        bool copy = len > 0 && !mod->p.copy_checked;
        bool settled = mem_monitor_settled();
        if (!settled)
            mem_monitor_lock();
        bool live = !atomic_load_explicit(&reg->revoked, memory_order_acquire);
        if (live && copy) {
            if (to_mem)
                sm_copy(mem, buf, len);
            else
                sm_copy(buf, mem, len);
        }
        if (!settled)
            mem_monitor_unlock();
        if (!live)
            return FERRY_ERR_ACCESS;
        if (copy)
            return FERRY_OK;
    }
    if (len == 0)
        return FERRY_OK;
    if (mod->self_cma) {
        int rc = copy_by_kernel(mod, addr, buf, len, to_mem);
        if (rc != FERRY_ERR_NOT_SUPPORTED)
            return rc;
    }
    if (!range_mapped(addr, len))
        return FERRY_ERR_ACCESS;
    if (to_mem)
        memcpy(mem, buf, len);
    else
        memcpy(buf, mem, len);
    return FERRY_OK;
}

int sm_target_write(ferry_btl_module_t *btl, const uint8_t *keybytes, uint64_t addr,
                    const void *data, size_t len)
{
    sm_key_t key;
    memcpy(&key, keybytes, sizeof(key));
    /* Only read from: sm_target_copy writes into data for a get alone. */
    return sm_target_copy((sm_module_t *)btl, &key, addr, (void *)(uintptr_t)data, len, true);
}

/* ---- a peer's table ---- */

int sm_check_peer_key(const sm_reg_entry_t *table, uint32_t nslots, const uint8_t *keybytes,
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
    /* The owner's word on where its heap lies is checked like the rest:
     * inside the heap, and at the same place within a page as the address
     * it registered (its heap and our mapping of it both start on a page),
     * so that an aligned address is aligned in our mapping too. An atomic
     * at a misaligned address is no atomic, and faults on some CPUs. */
    if (view->heap_id != 0 &&
        (view->heap_off > view->heap_len || view->reg.len > view->heap_len - view->heap_off ||
         ((view->heap_off ^ (uint64_t)(uintptr_t)view->reg.base) & (SM_HEAP_PAGE - 1)) != 0))
        return FERRY_ERR_ACCESS;
    return btl_base_check_access(&view->reg, addr, len, need);
}
