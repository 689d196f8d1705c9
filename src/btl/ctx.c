/*
 * The transports of a context: which to open (and which modules to load for
 * them), opening them, the path to each peer, progress and teardown.
 */
#include "btl/ctx.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/bitmap.h"

#define HOST_KEY "ferry.host"

/* Is the name, len bytes long, in the comma-separated list? */
static bool list_has(const char *list, const char *name, size_t n)
{
    for (const char *p = list; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p += len + (end != NULL ? 1 : 0);
    }
    return false;
}

static const btl_component_entry_t *find_entry(const char *name, size_t len)
{
    for (const btl_component_entry_t *e = btl_component_table; e->name != NULL; e++)
        if (strlen(e->name) == len && strncmp(name, e->name, len) == 0)
            return e;
    return NULL;
}

/* Every name in the list must be a transport of the table. source names
 * where the list came from (the variable or the init parameter), for the
 * message. */
static int check_list(ferry_ctx_t *ctx, const char *list, const char *source)
{
    for (const char *p = list; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (find_entry(p, len) == NULL) {
            char built[256] = "";
            for (const btl_component_entry_t *e = btl_component_table; e->name != NULL; e++) {
                if (e != btl_component_table)
                    strncat(built, ",", sizeof(built) - strlen(built) - 1);
                strncat(built, e->name, sizeof(built) - strlen(built) - 1);
            }
            /* The value may be anything; at most 64 characters of it are shown. */
            const char *more = strlen(list) > 64 ? "..." : "";
            if (len == 0)
                rt_log(&ctx->log, RT_LOG_ERROR,
                       "%s='%.64s%s': an empty transport name (expected a comma list of: %s)",
                       source, list, more, built);
            else
                rt_log(&ctx->log, RT_LOG_ERROR,
                       "%s='%.64s%s': transport '%.*s%s' is not built (built: %s)", source,
                       list, more, (int)(len < 64 ? len : 64), p, len > 64 ? "..." : "", built);
            return FERRY_ERR_INVALID;
        }
        p += len + (end != NULL ? 1 : 0);
    }
    return FERRY_OK;
}

/* Does any device the module is for exist here? */
static bool hardware_present(const btl_component_entry_t *e)
{
    for (const char *const *pat = e->hardware; pat != NULL && *pat != NULL; pat++) {
        glob_t g;
        int rc = glob(*pat, GLOB_NOSORT, NULL, &g);
        size_t n = rc == 0 ? g.gl_pathc : 0;
        if (rc == 0 || rc == GLOB_NOMATCH)
            globfree(&g);
        if (n > 0)
            return true;
    }
    return false;
}

static int load_module(ferry_ctx_t *ctx, btl_slot_t *slot, const char *named_in)
{
    char why[RT_MODULE_WHY_MAX];
    const btl_component_entry_t *e = slot->entry;
    int rc = rt_module_load(ctx->param_module_path, e->module, "btl", e->name, &slot->module,
                            why);
    if (rc == FERRY_OK) {
        slot->comp = slot->module.info->entry;
        rt_log(&ctx->log, RT_LOG_DEBUG, "transport %s: loaded %s", e->name, slot->module.path);
        return FERRY_OK;
    }
    slot->load_status = rc;
    slot->why_not = strdup(why);
    if (named_in != NULL)
        rt_log(&ctx->log, RT_LOG_ERROR, "transport %s, named in %s, cannot be used: %s",
               e->name, named_in, why);
    else
        rt_log(&ctx->log, RT_LOG_INFO, "transport %s not used: %s", e->name, why);
    return rc;
}

int btl_ctx_select(ferry_ctx_t *ctx, const char *list, unsigned flags)
{
    int rc = rt_param_register_string(&ctx->params, "btl", "",
                                      "Transports to use, comma separated (self is always "
                                      "used); empty: those built into the library, and each "
                                      "module whose hardware is present",
                                      &ctx->param_btl);
    if (rc == FERRY_OK)
        rc = rt_module_register_params(&ctx->params, &ctx->param_module_path);
    if (rc != FERRY_OK)
        return rc;
    const char *source = list != NULL ? "ferry_init_params_t.transports" : "FERRY_BTL";
    if (list == NULL)
        list = ctx->param_btl;
    if ((rc = check_list(ctx, list, source)) != FERRY_OK)
        return rc;

    int n = 0;
    while (btl_component_table[n].name != NULL)
        n++;
    ctx->slots = calloc((size_t)n + 1, sizeof(*ctx->slots));
    if (ctx->slots == NULL)
        return FERRY_ERR_NO_MEMORY;
    ctx->n_slots = n;
    for (int i = 0; i < n; i++) {
        btl_slot_t *slot = &ctx->slots[i];
        const btl_component_entry_t *e = &btl_component_table[i];
        bool named = list_has(list, e->name, strlen(e->name));
        slot->entry = e;
        slot->comp = e->builtin;
        if (e->builtin == NULL) {
            bool load = named || (flags & BTL_CTX_ALL_MODULES) != 0 ||
                        (list[0] == '\0' && hardware_present(e));
            if (!load) {
                slot->load_status = FERRY_ERR_NOT_FOUND;
                slot->why_not = strdup(list[0] == '\0'
                                           ? "not loaded: no device it is for was found here "
                                             "(FERRY_BTL naming it loads it)"
                                           : "not loaded: FERRY_BTL does not name it");
                continue;
            }
            rc = load_module(ctx, slot, named ? source : NULL);
            if (rc == FERRY_ERR_NO_MEMORY || (rc != FERRY_OK && named))
                return rc == FERRY_ERR_NO_MEMORY ? rc : FERRY_ERR_NOT_SUPPORTED;
            if (rc != FERRY_OK)
                continue;
        }
        slot->wanted = list[0] == '\0' || named || slot->comp->always_open;
    }
    /* Every transport's parameters are declared and checked, used or not,
     * so that ferry_info -a lists them and a bad value is never ignored. A
     * module not loaded declares none here: its variables (FERRY_OFI_* for
     * ofi) are left alone by the check for misspelt ones, so that a user's
     * setting for it is not reported as unknown. */
    for (int i = 0; i < n; i++) {
        const ferry_btl_component_t *comp = ctx->slots[i].comp;
        if (comp != NULL)
            rc = comp->register_params(ctx);
        else
            rc = rt_params_skip_prefix(&ctx->params, ctx->slots[i].entry->name);
        if (rc != FERRY_OK)
            return rc;
    }
    return FERRY_OK;
}

int btl_ctx_open(ferry_ctx_t *ctx)
{
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    int rc = rt_modex_put(ctx->modex, HOST_KEY, host, strlen(host));
    if (rc != FERRY_OK)
        return rc;
    for (int i = 0; i < ctx->n_slots; i++) {
        const ferry_btl_component_t *comp = ctx->slots[i].comp;
        if (comp == NULL || !ctx->slots[i].wanted)
            continue;
        ferry_btl_module_t **mods = NULL;
        int n = 0;
        rc = comp->open(ctx, &mods, &n);
        if (rc == FERRY_ERR_INVALID)
            return rc; /* a bad parameter: the user must hear of it */
        if (rc != FERRY_OK) {
            rt_log(&ctx->log, RT_LOG_INFO, "transport %s not used: %s", comp->name,
                   ferry_strerror(rc));
            continue;
        }
        if (n > 0) {
            ferry_btl_module_t **all =
                realloc(ctx->modules, (size_t)(ctx->n_modules + n) * sizeof(*all));
            if (all == NULL) {
                for (int k = 0; k < n; k++)
                    mods[k]->ops->finalize(mods[k]);
                free(mods);
                return FERRY_ERR_NO_MEMORY;
            }
            ctx->modules = all;
            memcpy(ctx->modules + ctx->n_modules, mods, (size_t)n * sizeof(*mods));
            ctx->n_modules += n;
        }
        free(mods);
    }
    return FERRY_OK;
}

static void on_transport_error(ferry_btl_module_t *btl, int status, int peer, const char *msg,
                               void *cbdata)
{
    ferry_ctx_t *ctx = cbdata;
    if (peer >= 0 && peer < ctx->size) {
        /* Another transport may still reach it, but ferry keeps one path per
         * peer: the peer is gone for this job. */
        if (ctx->peers[peer].failed)
            return;
        ctx->peers[peer].failed = true;
    }
    if (ctx->error_cb != NULL) {
        ctx->in_callback++;
        ctx->error_cb(ctx, peer, status, msg, ctx->error_arg);
        ctx->in_callback--;
    } else {
        rt_log(&ctx->log, RT_LOG_ERROR, "%s: %s: %s (%s)", btl->attr.name,
               peer >= 0 ? "peer failed" : "transport failed", msg, ferry_strerror(status));
    }
}

int btl_ctx_add_procs(ferry_ctx_t *ctx, ferry_btl_am_cb_t am_cb)
{
    size_t n = (size_t)ctx->size;
    ferry_btl_proc_t *procs = calloc(n, sizeof(*procs));
    ctx->peers = calloc(n, sizeof(*ctx->peers));
    if (procs == NULL || ctx->peers == NULL) {
        free(procs);
        return FERRY_ERR_NO_MEMORY;
    }
    char myhost[256] = "";
    gethostname(myhost, sizeof(myhost) - 1);
    for (size_t r = 0; r < n; r++) {
        void *val = NULL;
        size_t len = 0;
        procs[r].rank = (int)r;
        int local = r == (size_t)ctx->rank ? 1 : -1;
        if (local < 0 && ctx->hosted && ctx->host.same_host != NULL)
            local = ctx->host.same_host(ctx->host.arg, (int)r);
        if (local >= 0) {
            procs[r].same_host = local > 0;
        } else if (rt_modex_get(ctx->modex, (int)r, HOST_KEY, &val, &len) == FERRY_OK) {
            procs[r].same_host = len == strlen(myhost) && memcmp(val, myhost, len) == 0;
            free(val);
        }
        ctx->peers[r].module_idx = -1;
        ctx->peers[r].same_host = procs[r].same_host;
        ctx->peers[r].eps = calloc((size_t)ctx->n_modules + 1, sizeof(ferry_btl_endpoint_t *));
        if (ctx->peers[r].eps == NULL) {
            free(procs);
            return FERRY_ERR_NO_MEMORY;
        }
    }

    int rc = FERRY_OK;
    ferry_btl_endpoint_t **eps = calloc(n, sizeof(*eps));
    util_bitmap_t reach = {0};
    if (eps == NULL || util_bitmap_init(&reach, n) != FERRY_OK) {
        rc = FERRY_ERR_NO_MEMORY;
        goto out;
    }
    for (int m = 0; m < ctx->n_modules; m++) {
        ferry_btl_module_t *btl = ctx->modules[m];
        util_bitmap_clear_all(&reach);
        rc = btl->ops->add_procs(btl, n, procs, eps, &reach);
        if (rc != FERRY_OK) {
            rt_log(&ctx->log, RT_LOG_ERROR, "%s: add_procs failed: %s", btl->attr.name,
                   ferry_strerror(rc));
            goto out;
        }
        btl->ops->register_error(btl, on_transport_error, ctx);
        for (unsigned tag = 0; tag < FERRY_BTL_TAG_BTL_MIN; tag++)
            btl->ops->register_am(btl, (uint8_t)tag, am_cb, ctx);
        for (size_t r = 0; r < n; r++) {
            if (!util_bitmap_test(&reach, r) || eps[r] == NULL)
                continue;
            btl_peer_t *peer = &ctx->peers[r];
            peer->eps[m] = eps[r];
            const ferry_btl_attr_t *best =
                peer->module_idx >= 0 ? &ctx->modules[peer->module_idx]->attr : NULL;
            if (best == NULL || btl->attr.exclusivity > best->exclusivity ||
                (btl->attr.exclusivity == best->exclusivity && btl->attr.latency < best->latency)) {
                peer->module_idx = m;
                peer->ep = eps[r];
            }
        }
    }
    for (size_t r = 0; r < n; r++)
        if (ctx->peers[r].module_idx < 0)
            rt_log(&ctx->log, RT_LOG_INFO, "no transport reaches rank %zu", r);
    ctx->polled = calloc((size_t)ctx->n_modules + 1, sizeof(*ctx->polled));
    if (ctx->polled == NULL) {
        rc = FERRY_ERR_NO_MEMORY;
        goto out;
    }
    for (int m = 0; m < ctx->n_modules; m++) {
        bool used = false;
        for (size_t r = 0; r < n && !used; r++)
            used = ctx->peers[r].module_idx == m;
        if (used)
            ctx->polled[ctx->n_polled++] = ctx->modules[m];
        else
            rt_log(&ctx->log, RT_LOG_DEBUG, "%s reaches no peer first: not polled",
                   ctx->modules[m]->attr.name);
    }
out:
    util_bitmap_fini(&reach);
    free(eps);
    free(procs);
    return rc;
}

void btl_ctx_del_procs(ferry_ctx_t *ctx)
{
    if (ctx->peers == NULL)
        return;
    for (int m = 0; m < ctx->n_modules; m++) {
        ferry_btl_module_t *btl = ctx->modules[m];
        for (int r = 0; r < ctx->size; r++)
            if (ctx->peers[r].eps != NULL && ctx->peers[r].eps[m] != NULL)
                btl->ops->del_procs(btl, 1, &ctx->peers[r].eps[m]);
    }
}

int btl_ctx_close(ferry_ctx_t *ctx)
{
    int rc = FERRY_OK;
    for (int m = 0; m < ctx->n_modules; m++) {
        int mrc = ctx->modules[m]->ops->finalize(ctx->modules[m]);
        if (mrc != FERRY_OK && rc == FERRY_OK)
            rc = mrc;
    }
    free(ctx->modules);
    free(ctx->polled);
    if (ctx->peers != NULL)
        for (int r = 0; r < ctx->size; r++)
            free(ctx->peers[r].eps);
    free(ctx->peers);
    ctx->modules = NULL;
    ctx->polled = NULL;
    ctx->peers = NULL;
    ctx->n_modules = 0;
    ctx->n_polled = 0;
    for (int i = 0; i < ctx->n_slots; i++) {
        rt_module_unload(&ctx->slots[i].module);
        free(ctx->slots[i].why_not);
    }
    free(ctx->slots);
    ctx->slots = NULL;
    ctx->n_slots = 0;
    return rc;
}

ferry_btl_module_t *btl_ctx_find_module(ferry_ctx_t *ctx, const char *name)
{
    if (ctx == NULL || name == NULL)
        return NULL;
    for (int m = 0; m < ctx->n_modules; m++)
        if (strcmp(ctx->modules[m]->attr.name, name) == 0)
            return ctx->modules[m];
    return NULL;
}

int btl_ctx_progress(ferry_ctx_t *ctx)
{
    int events = 0;
    ferry_btl_module_t **mods = ctx->polled != NULL ? ctx->polled : ctx->modules;
    int n = ctx->polled != NULL ? ctx->n_polled : ctx->n_modules;
    for (int m = 0; m < n; m++) {
        int rc = mods[m]->ops->progress(mods[m]);
        if (rc < 0)
            return rc;
        events += rc;
    }
    return events;
}
