/*
 * An Open MPI memory pool (mpool framework, interface 3.0.0) serving
 * MPI_Alloc_mem from ferry's mem_alloc: on one host, the sm module's heap,
 * which every local peer maps. A window created over that memory
 * (MPI_Win_create) is reached by the peers' CPUs: osc/rdma's puts, gets and
 * atomics through the BTL become a memcpy or a CPU atomic in the peer's
 * mapping (sm_rdma_direct, sm's heap atomics), where on ordinary memory
 * they go through the target's ring and wait for it to progress.
 *
 * The component lives in mca_btl_ferry.so itself, exported as
 * mca_mpool_ferry_component beside mca_btl_ferry_component, and the build
 * puts a link mca_mpool_ferry.so to that file next to it: Open MPI loads
 * both names, the dynamic loader maps the file once, and the pool reaches
 * the BTL's ferry context directly. Until the BTL has opened ferry (and
 * after it has closed it), and where no ferry module allocates such memory,
 * the pool does not offer itself.
 *
 * Chosen for an MPI_Alloc_mem whose info has mpool_hints naming "ferry"
 * (priority 100), and for every other one when mpool_ferry_priority is
 * set above Open MPI's default pool's priority. An allocation ferry
 * cannot make (out of heap, an alignment above a page) returns NULL, and
 * Open MPI falls back to its default pool.
 */
#include "btl_ferry.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/mpool/base/base.h"
#include "opal/mca/mpool/mpool.h"
#include "opal/util/output.h"

/* One allocation: what mem_free needs. */
typedef struct pool_block {
    struct pool_block *next;
    void *addr;
    ferry_btl_module_t *fbtl;
    ferry_btl_reg_t *reg;
} pool_block_t;

static struct {
    int priority;        /* mpool_ferry_priority: for requests without the hint */
    pool_block_t *blocks; /* live allocations, newest first */
} pool;

/* The ferry module whose mem_alloc serves the pool, or NULL. */
static ferry_btl_module_t *pool_module(void)
{
    const mca_btl_ferry_state_t *st = &mca_btl_ferry;
    if (st->ctx == NULL || st->closing)
        return NULL;
    for (int i = 0; i < st->n_modules; i++) {
        ferry_btl_module_t *f = st->modules[i]->fbtl;
        if (!st->modules[i]->finalized && (f->attr.flags & FERRY_BTL_FLAG_MEM_ALLOC) &&
            f->ops->mem_alloc != NULL && f->ops->mem_free != NULL)
            return f;
    }
    return NULL;
}

/* Does hints name this pool ("ferry", alone or in a comma or space
 * separated list)? */
static bool hints_name_ferry(const char *hints)
{
    if (hints == NULL)
        return false;
    const char *p = hints;
    while ((p = strstr(p, "ferry")) != NULL) {
        bool start = p == hints || p[-1] == ',' || p[-1] == ' ' || p[-1] == '=';
        bool end = p[5] == '\0' || p[5] == ',' || p[5] == ' ';
        if (start && end)
            return true;
        p += 5;
    }
    return false;
}

static void *pool_alloc(mca_mpool_base_module_t *mpool, size_t size, size_t align,
                        uint32_t flags)
{
    (void)mpool, (void)flags;
    ferry_btl_module_t *f = pool_module();
    long page = sysconf(_SC_PAGESIZE);
    /* mem_alloc's memory starts on a page. */
    if (f == NULL || size == 0 || (page > 0 && align > (size_t)page)) {
        return NULL;
    }
    pool_block_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return NULL;
    void *addr = NULL;
    int rc = f->ops->mem_alloc(f, size,
                               FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE |
                                   FERRY_ACCESS_REMOTE_ATOMIC,
                               &addr, &b->reg);
    if (rc != FERRY_OK) {
        free(b);
        return NULL; /* Open MPI's default pool takes it */
    }
    b->addr = addr;
    b->fbtl = f;
    b->next = pool.blocks;
    pool.blocks = b;
    return addr;
}

static void pool_free(mca_mpool_base_module_t *mpool, void *addr)
{
    (void)mpool;
    for (pool_block_t **pp = &pool.blocks; *pp != NULL; pp = &(*pp)->next) {
        pool_block_t *b = *pp;
        if (b->addr != addr)
            continue;
        *pp = b->next;
        int rc = b->fbtl->ops->mem_free(b->fbtl, b->reg);
        if (rc != FERRY_OK)
            opal_output(0, "mpool ferry: freeing %p: %s", addr, ferry_strerror(rc));
        free(b);
        return;
    }
    /* Not ours, or its memory went with ferry (mca_btl_ferry_mpool_fini). */
}

static mca_mpool_base_module_t pool_module_ops = {
    .mpool_component = NULL, /* set at register: &mca_mpool_ferry_component */
    .mpool_alloc = pool_alloc,
    .mpool_free = pool_free,
    .mpool_name = "ferry",
};

static int pool_query(const char *hints, int *priority, mca_mpool_base_module_t **module)
{
    if (pool_module() == NULL)
        return OPAL_ERR_NOT_AVAILABLE;
    *priority = hints_name_ferry(hints) ? 100 : pool.priority;
    *module = &pool_module_ops;
    return OPAL_SUCCESS;
}

static int pool_register(void);

/* The loader's symbol for this name (mca_mpool_ferry.so). */
OPAL_MODULE_DECLSPEC extern mca_mpool_base_component_t mca_mpool_ferry_component;

mca_mpool_base_component_t mca_mpool_ferry_component = {
    .mpool_version =
        {
            MCA_MPOOL_BASE_VERSION_3_0_0,
            .mca_component_name = "ferry",
            MCA_BASE_MAKE_VERSION(component, OPAL_MAJOR_VERSION, OPAL_MINOR_VERSION,
                                  OPAL_RELEASE_VERSION),
            .mca_register_component_params = pool_register,
        },
    .mpool_data = {.param_field = MCA_BASE_METADATA_PARAM_NONE},
    .mpool_query = pool_query,
};

static int pool_register(void)
{
    pool_module_ops.mpool_component = &mca_mpool_ferry_component;
    pool.priority = 0;
    (void)mca_base_component_var_register(
        &mca_mpool_ferry_component.mpool_version, "priority",
        "Priority of ferry's pool for an MPI_Alloc_mem whose info has no mpool_hints naming "
        "\"ferry\" (those always take it): above the priority of Open MPI's default pool it "
        "serves them all, from memory of ferry's sm module that local peers map (btl ferry "
        "must be in use)",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_READONLY,
        &pool.priority);
    return OPAL_SUCCESS;
}

void mca_btl_ferry_mpool_fini(void)
{
    /* The heap goes with ferry: what is left cannot be freed later. */
    if (pool.blocks != NULL)
        opal_output(0, "mpool ferry: memory from MPI_Alloc_mem not freed before MPI_Finalize "
                       "goes away with ferry's heap");
    while (pool.blocks != NULL) {
        pool_block_t *b = pool.blocks;
        pool.blocks = b->next;
        (void)b->fbtl->ops->mem_free(b->fbtl, b->reg);
        free(b);
    }
}
