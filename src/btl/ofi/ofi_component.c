/*
 * The ofi component: parameters, the choice of provider and domains, and the
 * translation of libfabric's error codes.
 *
 * Provider rule, when FERRY_OFI_PROVIDER does not name one: among the
 * providers that offer FI_EP_RDM with FI_MSG and FI_RMA here, a native one
 * (verbs, efa, cxi, psm3, opx, ...) first; then tcp (through ofi_rxm); shm
 * only when named, since it reaches one host only and sm does that better;
 * sockets, udp, net and ofi_rxd (known to be slow or meant for testing) only
 * when named.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "btl/ofi/ofi.h"

int ofi_status_from_fi(int fi_err)
{
    if (fi_err < 0)
        fi_err = -fi_err;
    switch (fi_err) {
    case 0:
        return FERRY_OK;
    case FI_EAGAIN:
        return FERRY_ERR_NO_RESOURCE;
    case FI_ENOMEM:
        return FERRY_ERR_NO_MEMORY;
    case FI_EACCES:
    case FI_EPERM:
    case FI_EKEYREJECTED:
        return FERRY_ERR_ACCESS;
    case FI_EINVAL:
        return FERRY_ERR_INVALID;
    case FI_ENOSYS:
    case FI_EOPNOTSUPP:
    case FI_ENODATA:
        return FERRY_ERR_NOT_SUPPORTED;
    case FI_ETRUNC:
    case FI_ETOOSMALL:
    case FI_EMSGSIZE:
        return FERRY_ERR_TRUNCATE;
    case FI_ECANCELED:
        return FERRY_ERR_CANCELED;
    case FI_ETIMEDOUT:
        return FERRY_ERR_TIMEOUT;
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_EHOSTUNREACH:
    case FI_ENOTCONN:
    case FI_ESHUTDOWN:
        return FERRY_ERR_UNREACH;
    default:
        return FERRY_ERR_IO;
    }
}

int ofi_log_error(ofi_module_t *mod, const char *what, int fi_rc)
{
    rt_log(&mod->super.ctx->log, RT_LOG_ERROR, "ofi: %s: %s (%d)", what,
           fi_strerror(fi_rc < 0 ? -fi_rc : fi_rc), fi_rc);
    return ofi_status_from_fi(fi_rc);
}

/* Parses a list of memory-registration modes ("local,virt_addr,prov_key,
 * allocated,endpoint", or "all", or "none"). */
static int parse_mr_mode(const char *text, uint64_t *mode_out)
{
    static const struct {
        const char *name;
        uint64_t bit;
    } names[] = {
        {"local", FI_MR_LOCAL},         {"virt_addr", FI_MR_VIRT_ADDR},
        {"allocated", FI_MR_ALLOCATED}, {"prov_key", FI_MR_PROV_KEY},
        {"endpoint", FI_MR_ENDPOINT},   {"all", OFI_MR_SUPPORTED},
        {"none", 0},
    };
    uint64_t mode = 0;
    char *copy = strdup(text);
    char *save = NULL;
    int rc = FERRY_OK;
    if (copy == NULL)
        return FERRY_ERR_NO_MEMORY;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        bool found = false;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            if (strcmp(tok, names[i].name) == 0) {
                mode |= names[i].bit;
                found = true;
            }
        }
        if (!found)
            rc = FERRY_ERR_INVALID;
    }
    free(copy);
    if (rc == FERRY_OK)
        *mode_out = mode;
    return rc;
}

static int ofi_read_params(ferry_ctx_t *ctx, ofi_params_t *p)
{
    rt_params_t *r = &ctx->params;
    int rc;
    if ((rc = rt_param_register_string(r, "ofi_provider", NULL,
                                       "libfabric provider to use (as fi_info -p names it, e.g. "
                                       "\"tcp;ofi_rxm\", shm, verbs;ofi_rxm); empty: a native "
                                       "provider first, then tcp",
                                       &p->provider)) != FERRY_OK ||
        (rc = rt_param_register_string(r, "ofi_iface", NULL,
                                       "Comma-separated libfabric domains to use (for tcp: "
                                       "interface names such as eth0); empty: all but loopback",
                                       &p->iface)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "ofi_max_modules", 1, 1, 64,
                                    "Most ofi modules (one per libfabric domain)",
                                    &p->max_modules)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "ofi_eager_limit", 4096, 64, 1u << 20,
                                     "Largest ofi fragment taken from the eager pool (bytes)",
                                     &p->eager_limit)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "ofi_max_send_size", 32 * 1024, 256, 16u << 20,
                                     "Largest single ofi send (bytes)",
                                     &p->max_send_size)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "ofi_tx_slots", 64, 2, 1u << 16,
                                     "Registered transmit slots (sends in flight) per module",
                                     &p->tx_slots)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "ofi_rx_slots", 128, 4, 1u << 16,
                                     "Receive buffers posted per module without FI_MULTI_RECV",
                                     &p->rx_slots)) != FERRY_OK ||
        (rc = rt_param_register_bool(r, "ofi_multi_recv", true,
                                     "Receive into a few large FI_MULTI_RECV buffers where the "
                                     "provider offers it",
                                     &p->multi_recv)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "ofi_multi_recv_size", 1u << 20, 64 * 1024, 1u << 30,
                                     "Bytes of each FI_MULTI_RECV buffer (four are posted)",
                                     &p->multi_recv_size)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "ofi_send_timeout", 30000, 100, 3600000,
                                    "Milliseconds a peer that something waits on may answer "
                                    "nothing (no message, no probe answer) before it is "
                                    "declared failed; a peer on this host whose process lives "
                                    "is never failed for its silence",
                                    &p->send_timeout_ms)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "ofi_probe_interval", 100, 10, 60000,
                                    "Milliseconds between looks at peers: processes on this "
                                    "host, deadlines, and a probe to a peer that something "
                                    "waits on and that said nothing for as long",
                                    &p->probe_interval_ms)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "ofi_request_timeout", 60000, 100, 3600000,
                                    "Milliseconds a put or get may take before it completes "
                                    "with FERRY_ERR_TIMEOUT and its peer is checked",
                                    &p->request_timeout_ms)) != FERRY_OK ||
        (rc = rt_param_register_bool(r, "ofi_putn_split", true,
                                     "Where the provider does not order a send after a write "
                                     "but carries completion data with one (shm), send a put "
                                     "with notification larger than one message as the write "
                                     "(fi_writedata) and its notification at once, the target "
                                     "holding the notification until the write lands; off, "
                                     "the notification leaves once the put has completed",
                                     &p->putn_split)) != FERRY_OK ||
        (rc = rt_param_register_bool(r, "ofi_watch_local", true,
                                     "Watch peers on this host through their processes "
                                     "(pidfd); off, they are judged as peers on other hosts "
                                     "are: by provider errors and unanswered probes",
                                     &p->watch_local)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "ofi_window", 128, 4, 1u << 16,
                                     "Ordered messages to one peer in flight before its "
                                     "acknowledgement (a receiver holds at most this many "
                                     "out of order)",
                                     &p->window)) != FERRY_OK ||
        (rc = rt_param_register_string(r, "ofi_mr_mode", "all",
                                       "Memory-registration modes ferry offers the provider: "
                                       "all, none, or a list of local, virt_addr, prov_key, "
                                       "allocated, endpoint",
                                       &p->mr_mode)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "ofi_exclusivity", -1, -1, 65535,
                                    "Exclusivity of ofi modules; -1: 16384 for native "
                                    "providers, 512 for tcp, shm, sockets and udp",
                                    &p->exclusivity)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "ofi_free_list_num", 16, 1, 1u << 20,
                                     "Descriptors each ofi pool allocates at start",
                                     &p->free_list_num)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "ofi_free_list_max", 1024, 1, 1u << 20,
                                     "Most descriptors in each ofi pool (back pressure beyond)",
                                     &p->free_list_max)) != FERRY_OK ||
        (rc = rt_param_register_size(r, "ofi_free_list_inc", 64, 1, 1u << 20,
                                     "Descriptors added when an ofi pool runs dry",
                                     &p->free_list_inc)) != FERRY_OK ||
        (rc = rt_param_register_int(r, "ofi_wedge_timeout", 5000, 0, 3600000,
                                    "Milliseconds one libfabric call may last, once a peer "
                                    "process on this host has died, before this process "
                                    "exits with status 70: the dead process held a lock of "
                                    "the provider's in shared memory, which no one releases "
                                    "(libfabric's shm provider); 0: no watchdog, and such a "
                                    "process hangs",
                                    &p->wedge_timeout_ms)) != FERRY_OK ||
        (rc = btl_amo_register_params(ctx, &p->atomic_slots)) != FERRY_OK)
        return rc;
    uint64_t mode;
    const char *bad = NULL;
    if (parse_mr_mode(p->mr_mode != NULL ? p->mr_mode : "all", &mode) != FERRY_OK)
        bad = "FERRY_OFI_MR_MODE must be all, none, or a comma-separated list of local, "
              "virt_addr, prov_key, allocated, endpoint";
    else if (p->eager_limit > p->max_send_size)
        bad = "FERRY_OFI_EAGER_LIMIT must not exceed FERRY_OFI_MAX_SEND_SIZE";
    else if (p->free_list_num > p->free_list_max)
        bad = "FERRY_OFI_FREE_LIST_NUM must not exceed FERRY_OFI_FREE_LIST_MAX";
    else if (p->multi_recv_size < 2 * (p->max_send_size + sizeof(ofi_hdr_t)))
        bad = "FERRY_OFI_MULTI_RECV_SIZE must hold at least two of the largest sends";
    else if (p->probe_interval_ms >= p->send_timeout_ms)
        bad = "FERRY_OFI_PROBE_INTERVAL must be shorter than FERRY_OFI_SEND_TIMEOUT";
    if (bad != NULL) {
        rt_log(&ctx->log, RT_LOG_ERROR, "%s (mr mode \"%s\", eager %zu, max send %zu)", bad,
               p->mr_mode != NULL ? p->mr_mode : "", p->eager_limit, p->max_send_size);
        return FERRY_ERR_INVALID;
    }
    return FERRY_OK;
}

static int ofi_register_params(ferry_ctx_t *ctx)
{
    ofi_params_t p;
    return ofi_read_params(ctx, &p);
}

/* 0 native, 1 tcp, 2 shm (one host), 3 known slow: lower is preferred. */
static int provider_rank(const char *prov)
{
    static const char *const slow[] = {"sockets", "udp", "net", "ofi_rxd"};
    for (size_t i = 0; i < sizeof(slow) / sizeof(slow[0]); i++)
        if (strstr(prov, slow[i]) != NULL)
            return 3;
    if (strcmp(prov, "shm") == 0)
        return 2;
    if (strncmp(prov, "tcp", 3) == 0)
        return 1;
    return 0;
}

static bool name_in_list(const char *name, const char *list)
{
    size_t n = strlen(name);
    const char *p = list;
    while (p != NULL && *p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p = end != NULL ? end + 1 : NULL;
    }
    return false;
}

/* FI_SOURCE is required: a message's sender is the rank the fabric names,
 * never the one the header claims. FI_SOURCE_ERR is taken where offered
 * (neither shm nor tcp;ofi_rxm has it in libfabric 1.17). */
static struct fi_info *make_hints(const ofi_params_t *p, const char *prov, bool multi_recv,
                                  bool source_err)
{
    uint64_t mode = OFI_MR_SUPPORTED;
    struct fi_info *hints = fi_allocinfo();
    if (hints == NULL)
        return NULL;
    (void)parse_mr_mode(p->mr_mode != NULL ? p->mr_mode : "all", &mode);
    hints->caps = FI_MSG | FI_RMA | FI_SOURCE | (source_err ? FI_SOURCE_ERR : 0) |
                  (multi_recv ? FI_MULTI_RECV : 0);
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = (int)mode;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    if (prov != NULL && prov[0] != '\0') {
        hints->fabric_attr->prov_name = strdup(prov);
        if (hints->fabric_attr->prov_name == NULL) {
            fi_freeinfo(hints);
            return NULL;
        }
    }
    return hints;
}

/* Asks libfabric for the endpoints that fit, with FI_MULTI_RECV when wanted
 * and offered, and FI_SOURCE_ERR where offered. *why_out says why nothing
 * fits. */
static struct fi_info *query(const ofi_params_t *p, const char *prov, const char **why_out)
{
    struct fi_info *list = NULL;
    /* With and without FI_SOURCE_ERR, then with and without FI_MULTI_RECV. */
    for (int pass = p->multi_recv ? 0 : 2; pass < 4; pass++) {
        struct fi_info *hints = make_hints(p, prov, pass / 2 == 0, pass % 2 == 0);
        if (hints == NULL) {
            *why_out = "out of memory";
            return NULL;
        }
        int rc = fi_getinfo(OFI_FI_VERSION, NULL, NULL, 0, hints, &list);
        fi_freeinfo(hints);
        if (rc == 0 && list != NULL)
            return list;
        *why_out = fi_strerror(-rc);
    }
    return NULL;
}

extern const ferry_btl_component_t btl_ofi_component;

static int ofi_open(ferry_ctx_t *ctx, ferry_btl_module_t ***modules_out, int *count_out)
{
    ofi_params_t p;
    const char *why = "no provider";
    int rc = ofi_read_params(ctx, &p);
    if (rc != FERRY_OK)
        return rc;
    *modules_out = NULL;
    *count_out = 0;

    struct fi_info *list = query(&p, p.provider, &why);
    /* What the user asked for explicitly and cannot have is worth a
     * warning; an absent fabric is not. */
    const rt_param_t *mrp = rt_param_find(&ctx->params, "ofi_mr_mode");
    bool asked = (p.provider != NULL && p.provider[0] != '\0') || (mrp != NULL && mrp->from_env);
    if (list == NULL) {
        rt_log(&ctx->log, asked ? RT_LOG_WARN : RT_LOG_INFO,
               "ofi: no libfabric provider%s%s offers reliable datagrams with messages, RMA "
               "and source addresses (FI_SOURCE) with memory-registration modes \"%s\" here "
               "(%s); transport not used",
               p.provider != NULL && p.provider[0] != '\0' ? " named " : "",
               p.provider != NULL ? p.provider : "", p.mr_mode != NULL ? p.mr_mode : "all", why);
        return FERRY_OK;
    }
    /* The provider: the one named, else the best by the rule above. */
    const char *chosen = NULL;
    int best = 99;
    for (struct fi_info *i = list; i != NULL; i = i->next) {
        const char *name = i->fabric_attr->prov_name;
        if (name == NULL)
            continue;
        if (p.provider != NULL && p.provider[0] != '\0') {
            if (strcmp(name, p.provider) == 0) {
                chosen = name;
                break;
            }
            if (chosen == NULL)
                chosen = name;
            continue;
        }
        int r = provider_rank(name);
        if (r < best && r < 2) {
            best = r;
            chosen = name;
        }
    }
    if (chosen == NULL) {
        rt_log(&ctx->log, RT_LOG_INFO,
               "ofi: only providers that must be named were found (shm, sockets, udp, net, "
               "ofi_rxd: set FERRY_OFI_PROVIDER); transport not used");
        fi_freeinfo(list);
        return FERRY_OK;
    }

    /* The domains of that provider: one module each, named ones only when
     * FERRY_OFI_IFACE lists some, loopback only when nothing else is there. */
    struct fi_info *picked[64];
    int npicked = 0;
    bool iface_given = p.iface != NULL && p.iface[0] != '\0';
    for (int pass = 0; pass < 2 && npicked == 0; pass++) {
        for (struct fi_info *i = list; i != NULL && npicked < p.max_modules; i = i->next) {
            const char *dom = i->domain_attr->name != NULL ? i->domain_attr->name : "";
            if (i->fabric_attr->prov_name == NULL || strcmp(i->fabric_attr->prov_name, chosen) != 0)
                continue;
            if (iface_given && !name_in_list(dom, p.iface))
                continue;
            if (!iface_given && pass == 0 && strcmp(dom, "lo") == 0)
                continue;
            bool dup = false;
            for (int k = 0; k < npicked; k++)
                dup = dup || strcmp(picked[k]->domain_attr->name, dom) == 0;
            if (!dup)
                picked[npicked++] = i;
        }
    }
    if (npicked == 0) {
        rt_log(&ctx->log, RT_LOG_WARN,
               "ofi: provider %s has no domain named in FERRY_OFI_IFACE=%s; transport not used",
               chosen, p.iface != NULL ? p.iface : "");
        fi_freeinfo(list);
        return FERRY_OK;
    }
    ferry_btl_module_t **mods = calloc((size_t)npicked, sizeof(*mods));
    if (mods == NULL) {
        fi_freeinfo(list);
        return FERRY_ERR_NO_MEMORY;
    }
    int n = 0;
    for (int k = 0; k < npicked; k++) {
        rc = ofi_module_open(ctx, &p, picked[k], n, &mods[n]);
        if (rc == FERRY_OK) {
            n++;
        } else {
            rt_log(&ctx->log, RT_LOG_WARN, "ofi: provider %s, domain %s: not used (%s)", chosen,
                   picked[k]->domain_attr->name, ferry_strerror(rc));
        }
    }
    fi_freeinfo(list);
    if (n == 0) {
        free(mods);
        return FERRY_OK;
    }
    *modules_out = mods;
    *count_out = n;
    return FERRY_OK;
}

const ferry_btl_component_t btl_ofi_component = {
    .name = "ofi",
    .description = "libfabric reliable datagrams (FI_EP_RDM) with messages and RMA",
    .register_params = ofi_register_params,
    .open = ofi_open,
};
