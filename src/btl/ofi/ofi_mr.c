/*
 * ofi memory registration: every mode a provider may demand.
 *
 * - FI_MR_LOCAL: local buffers need a descriptor. Ours (transmit slots,
 *   receive buffers) are registered once; a put/get finds its local
 *   registration through the slot in the segment's key, or registers the
 *   buffer for that one operation.
 * - FI_MR_VIRT_ADDR off: remote addresses are offsets into the
 *   registration; the key carries the target's base to compute them.
 * - FI_MR_PROV_KEY: the provider picks the key, which goes to peers in
 *   ofi_key_t; otherwise ferry requests a key drawn at random for each
 *   registration (as many bytes as the domain's mr_key_size, up to 8), so
 *   that a peer cannot guess the key of memory it was not given, nor a
 *   released key name new memory but by a 2^-64 chance. A key the domain
 *   already has is drawn again.
 * - FI_MR_ALLOCATED: ferry's own buffers are allocated and touched before
 *   registration; user memory must be too (README.md).
 * - FI_MR_ENDPOINT: each registration is bound to the module's endpoint
 *   and enabled.
 *
 * Every registration goes through ofi_mr_register. Registrations made on
 * behalf of an operation go through the module's registration cache
 * (src/mem/rcache.h): prepare_src/prepare_dst's (and so the API's puts and
 * gets without a local registration) through the fragment code's use of it
 * (src/btl/frag.c), and the FI_MR_LOCAL registration of unknown local memory
 * through ofi_mr_acquire; the cache calls back into ofi_register_mem.
 * ferry_mem_register's explicit registrations stay direct.
 */
#include <stdlib.h>
#include <string.h>

#include "btl/ofi/ofi.h"
#include "mem/rcache.h"
#include "rt/auth.h"

#define OFI_REG_MAGIC 0x5245474fu /* "OGER" */

static uint64_t fi_access_of(uint32_t access)
{
    /* Local rights always: the frag code registers user memory for local
     * use and remote access at once. */
    uint64_t acc = FI_SEND | FI_RECV | FI_READ | FI_WRITE;
    if (access & FERRY_ACCESS_REMOTE_READ)
        acc |= FI_REMOTE_READ;
    if (access & FERRY_ACCESS_REMOTE_WRITE)
        acc |= FI_REMOTE_WRITE;
    return acc;
}

static int slot_take(ofi_module_t *mod, uint32_t *slot_out)
{
    for (size_t i = 0; i < mod->nregs_cap; i++) {
        if (mod->regs[i] == NULL) {
            *slot_out = (uint32_t)i;
            return FERRY_OK;
        }
    }
    size_t cap = mod->nregs_cap != 0 ? mod->nregs_cap * 2 : 64;
    if (cap > UINT32_MAX)
        return FERRY_ERR_NO_RESOURCE;
    ofi_reg_t **regs = realloc(mod->regs, cap * sizeof(*regs));
    if (regs == NULL)
        return FERRY_ERR_NO_MEMORY;
    memset(regs + mod->nregs_cap, 0, (cap - mod->nregs_cap) * sizeof(*regs));
    *slot_out = (uint32_t)mod->nregs_cap;
    mod->regs = regs;
    mod->nregs_cap = cap;
    return FERRY_OK;
}

/* A requested key: random, within the domain's key size. */
static int random_key(ofi_module_t *mod, uint64_t *key_out)
{
    uint64_t key;
    if (rt_auth_random(&key, sizeof(key)) != FERRY_OK) {
        rt_log(&mod->super.ctx->log, RT_LOG_ERROR,
               "ofi: no random bytes for a registration's key");
        return FERRY_ERR;
    }
    if (mod->mr_key_size > 0 && mod->mr_key_size < sizeof(key))
        key &= ((uint64_t)1 << (8 * mod->mr_key_size)) - 1;
    *key_out = key;
    return FERRY_OK;
}

int ofi_mr_register(ofi_module_t *mod, void *base, size_t len, uint32_t access,
                    ofi_reg_t **reg_out)
{
    if (base == NULL || len == 0 || reg_out == NULL)
        return FERRY_ERR_INVALID;
    ofi_reg_t *reg = calloc(1, sizeof(*reg));
    if (reg == NULL)
        return FERRY_ERR_NO_MEMORY;
    uint32_t slot;
    int rc = slot_take(mod, &slot);
    if (rc != FERRY_OK)
        goto err_free;
    for (int tries = 0;; tries++) {
        uint64_t want_key = 0;
        if (!(mod->mr_mode & FI_MR_PROV_KEY) && (rc = random_key(mod, &want_key)) != FERRY_OK)
            goto err_free;
        rc = fi_mr_reg(mod->domain, base, len, fi_access_of(access), 0, want_key, 0, &reg->mr,
                       NULL);
        if (rc == 0)
            break;
        if (rc != -FI_ENOKEY || (mod->mr_mode & FI_MR_PROV_KEY) || tries == 8) {
            rc = ofi_log_error(mod, "fi_mr_reg", rc);
            goto err_free;
        }
    }
    if (mod->mr_mode & FI_MR_ENDPOINT) {
        if ((rc = fi_mr_bind(reg->mr, &mod->ep->fid, 0)) != 0 ||
            (rc = fi_mr_enable(reg->mr)) != 0) {
            rc = ofi_log_error(mod, "binding a registration to the endpoint", rc);
            goto err_close;
        }
    }
    reg->mr_key = fi_mr_key(reg->mr);
    if (reg->mr_key == FI_KEY_NOTAVAIL) {
        rt_log(&mod->super.ctx->log, RT_LOG_ERROR,
               "ofi: the provider's keys do not fit in 64 bits (FI_MR_RAW); not supported");
        rc = FERRY_ERR_NOT_SUPPORTED;
        goto err_close;
    }
    reg->magic = OFI_REG_MAGIC;
    reg->slot = slot;
    reg->base.base = base;
    reg->base.len = len;
    reg->base.access = access | FERRY_ACCESS_LOCAL;
    const ofi_key_t key = {
        .base = (uint64_t)(uintptr_t)base,
        .len = len,
        .mr_key = reg->mr_key,
        .access = reg->base.access,
        .slot = slot,
    };
    memset(reg->base.key, 0, sizeof(reg->base.key));
    memcpy(reg->base.key, &key, sizeof(key));
    mod->regs[slot] = reg;
    *reg_out = reg;
    return FERRY_OK;

err_close:
    fi_close(&reg->mr->fid);
err_free:
    free(reg);
    return rc;
}

int ofi_mr_deregister(ofi_module_t *mod, ofi_reg_t *reg)
{
    int rc = FERRY_OK;
    if (reg->slot < mod->nregs_cap && mod->regs[reg->slot] == reg)
        mod->regs[reg->slot] = NULL;
    if (reg->mr != NULL) {
        int frc = fi_close(&reg->mr->fid);
        if (frc != 0)
            rc = ofi_log_error(mod, "closing a registration", frc);
    }
    reg->magic = 0;
    free(reg);
    return rc;
}

void ofi_mr_release_all(ofi_module_t *mod)
{
    for (size_t i = 0; i < mod->nregs_cap; i++) {
        if (mod->regs[i] != NULL) {
            rt_log(&mod->super.ctx->log, RT_LOG_DEBUG,
                   "ofi: registration of %zu bytes at %p released at finalize",
                   mod->regs[i]->base.len, mod->regs[i]->base.base);
            ofi_mr_deregister(mod, mod->regs[i]);
        }
    }
}

void *ofi_mr_local_desc(ofi_module_t *mod, const ferry_btl_segment_t *seg, bool *need_reg)
{
    ofi_key_t key;
    memcpy(&key, seg->key, sizeof(key));
    *need_reg = false;
    if (key.slot < mod->nregs_cap) {
        ofi_reg_t *reg = mod->regs[key.slot];
        if (reg != NULL && reg->mr_key == key.mr_key &&
            btl_base_check_access(&reg->base, seg->addr, seg->len, 0) == FERRY_OK)
            return fi_mr_desc(reg->mr);
    }
    *need_reg = (mod->mr_mode & FI_MR_LOCAL) != 0;
    return NULL;
}

int ofi_register_mem(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep, void *base, size_t len,
                     uint32_t access, ferry_btl_reg_t **reg_out)
{
    if (btl == NULL || reg_out == NULL)
        return FERRY_ERR_INVALID;
    ofi_reg_t *reg;
    int rc = ofi_mr_register(ofi_of(btl), base, len, access, &reg);
    if (rc == FERRY_OK)
        *reg_out = &reg->base;
    return rc;
}

int ofi_deregister_mem(ferry_btl_module_t *btl, ferry_btl_reg_t *breg)
{
    ofi_module_t *mod = ofi_of(btl);
    ofi_reg_t *reg = (ofi_reg_t *)breg;
    if (btl == NULL || reg == NULL || reg->magic != OFI_REG_MAGIC ||
        reg->slot >= mod->nregs_cap || mod->regs[reg->slot] != reg)
        return FERRY_ERR_INVALID;
    return ofi_mr_deregister(mod, reg);
}

int ofi_mr_acquire(ofi_module_t *mod, void *base, size_t len, uint32_t access,
                   ofi_reg_t **reg_out, struct mem_reg **creg_out)
{
    mem_rcache_t *cache = btl_frags_rcache(&mod->frags);
    *creg_out = NULL;
    if (cache == NULL)
        return ofi_mr_register(mod, base, len, access, reg_out);
    mem_reg_t *creg;
    int rc = mem_rcache_get(cache, base, len, access | FERRY_ACCESS_LOCAL, &creg);
    if (rc != FERRY_OK)
        return rc;
    *reg_out = creg->handle;
    *creg_out = creg;
    return FERRY_OK;
}

void ofi_mr_release(ofi_module_t *mod, ofi_reg_t *reg, struct mem_reg *creg)
{
    if (creg != NULL)
        mem_rcache_put(btl_frags_rcache(&mod->frags), creg);
    else if (reg != NULL)
        ofi_mr_deregister(mod, reg);
}
