/*
 * ferry_info: the transports this build of ferry contains, what each one
 * reports about itself (limits, capabilities), and with -a every parameter
 * with its current value, its default and its help.
 *
 * It builds a context the way ferry_init does, up to opening the transports,
 * but never joins a job: it forces the singleton launcher backend, so running
 * it inside a ferryrun job or a hydra allocation inspects this process alone.
 * It loads every module (rt/module.h) it finds, to list them and their
 * transports' parameters, and says why a module could not be loaded.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/btl.h>
#include <ferry/ferry.h>

#include "api/api.h"
#include "btl/ctx.h"
#include "rt/modex.h"
#include "rt/modex_impl.h"
#include "rt/module.h"
#include "rt/params.h"

typedef struct info_opts {
    bool all_params;
} info_opts_t;

static void print_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "usage: %s [-a] [-h]\n"
            "Lists the transports built into ferry and what each reports about itself.\n"
            "  -a, --all   also list every parameter: its environment variable, current\n"
            "              value, default, type and help\n"
            "  -h, --help  show this help\n"
            "Parameters are set through the environment, e.g. FERRY_LOG_LEVEL=debug.\n",
            prog);
}

/* Returns 0 to go on, 1 when the help was printed, 2 for a usage error. */
static int parse_args(int argc, char **argv, info_opts_t *opts_out)
{
    static const struct option longopts[] = {
        {"all", no_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    info_opts_t opts = {.all_params = false};
    int c;

    /* getopt prints its own message for an unknown option; the usage follows. */
    while ((c = getopt_long(argc, argv, "ah", longopts, NULL)) != -1) {
        switch (c) {
        case 'a':
            opts.all_params = true;
            break;
        case 'h':
            print_usage(stdout, argv[0]);
            return 1;
        default:
            print_usage(stderr, argv[0]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[optind]);
        print_usage(stderr, argv[0]);
        return 2;
    }
    *opts_out = opts;
    return 0;
}

static const char *param_type_name(rt_param_type_t type)
{
    switch (type) {
    case RT_PARAM_INT:
        return "int";
    case RT_PARAM_SIZE:
        return "size";
    case RT_PARAM_BOOL:
        return "bool";
    case RT_PARAM_STRING:
        return "string";
    }
    return "?";
}

/* Writes a byte count the way people read it: exact bytes, with the
 * power-of-1024 form alongside when it is a whole number of KiB/MiB/GiB. */
static void format_size(size_t n, char *buf, size_t buflen)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    size_t scaled = n;
    int unit = -1;

    if (n == SIZE_MAX) {
        snprintf(buf, buflen, "unlimited");
        return;
    }
    while (scaled >= 1024 && scaled % 1024 == 0 && unit < 3) {
        scaled /= 1024;
        unit++;
    }
    if (unit < 0) {
        snprintf(buf, buflen, "%zu B", n);
    } else {
        snprintf(buf, buflen, "%zu B (%zu %s)", n, scaled, units[unit]);
    }
}

/* Names every flag from the table in btl.h; a bit outside it (a transport
 * built against a newer header) is shown in hex rather than dropped. */
static void print_flags(uint32_t flags)
{
    bool first = true;

    for (unsigned bit = 0; bit < 32; bit++) {
        uint32_t flag = 1u << bit;
        const char *name = ferry_btl_flag_name(flag);
        if ((flags & flag) == 0 || name == NULL) {
            continue;
        }
        printf("%s%s", first ? "" : " ", name);
        first = false;
    }
    if (flags & ~(uint32_t)FERRY_BTL_FLAGS_KNOWN) {
        printf("%s0x%x", first ? "" : " ", (unsigned)(flags & ~(uint32_t)FERRY_BTL_FLAGS_KNOWN));
        first = false;
    }
    if (first) {
        printf("none");
    }
    printf("\n");
}

/* Names every bit of attr.atomic_flags from FERRY_BTL_ATOMIC_SUPPORTS_MAP;
 * unknown bits in hex, as for the flags. */
static void print_atomic_flags(uint32_t flags)
{
    bool first = true;

    for (unsigned bit = 0; bit < 32; bit++) {
        uint32_t b = 1u << bit;
        const char *name = ferry_btl_atomic_supports_name(b);
        if ((flags & b) == 0 || name == NULL) {
            continue;
        }
        printf("%s%s", first ? "" : " ", name);
        first = false;
    }
    if (flags & ~(uint32_t)FERRY_BTL_ATOMIC_SUPPORTS_KNOWN) {
        printf("%s0x%x", first ? "" : " ",
               (unsigned)(flags & ~(uint32_t)FERRY_BTL_ATOMIC_SUPPORTS_KNOWN));
        first = false;
    }
    if (first) {
        printf("none");
    }
    printf("\n");
}

static void print_attr(const ferry_btl_attr_t *attr)
{
    char buf[64];

    format_size(attr->eager_limit, buf, sizeof buf);
    printf("    %-24s %s\n", "eager limit", buf);
    format_size(attr->max_send_size, buf, sizeof buf);
    printf("    %-24s %s\n", "max send size", buf);
    format_size(attr->rdma_pipeline_frag_size, buf, sizeof buf);
    printf("    %-24s %s\n", "rdma pipeline fragment", buf);
    format_size(attr->min_rdma_size, buf, sizeof buf);
    printf("    %-24s %s\n", "min rdma size", buf);
    format_size(attr->max_rdma_size, buf, sizeof buf);
    printf("    %-24s %s\n", "max rdma size", buf);
    printf("    %-24s %u\n", "exclusivity", (unsigned)attr->exclusivity);
    printf("    %-24s %u ns\n", "latency (nominal)", (unsigned)attr->latency);
    printf("    %-24s %u MB/s\n", "bandwidth (nominal)", (unsigned)attr->bandwidth);
    printf("    %-24s %zu B\n", "registration key size", attr->reg_handle_size);
    format_size(attr->mem_per_peer, buf, sizeof buf);
    printf("    %-24s %s\n", "memory per peer", buf);
    printf("    %-24s ", "capabilities");
    print_flags(attr->flags);
    printf("    %-24s ", "atomics");
    print_atomic_flags(attr->atomic_flags);
}

/* The transport's place in the context, or NULL. */
static const btl_slot_t *find_slot(const ferry_ctx_t *ctx, const btl_component_entry_t *e)
{
    for (int i = 0; ctx != NULL && i < ctx->n_slots; i++) {
        if (ctx->slots[i].entry == e) {
            return &ctx->slots[i];
        }
    }
    return NULL;
}

/* ctx is NULL when not even the parameters could be read; opened says
 * whether its transports were opened. */
static void print_transports(const ferry_ctx_t *ctx, bool opened)
{
    printf("transports built:");
    for (const btl_component_entry_t *e = btl_component_table; e->name != NULL; e++) {
        printf(" %s%s", e->name, e->builtin == NULL ? " (module)" : "");
    }
    printf("%s\n", btl_component_table[0].name == NULL ? " none" : "");

    for (const btl_component_entry_t *e = btl_component_table; e->name != NULL; e++) {
        const btl_slot_t *slot = find_slot(ctx, e);
        const ferry_btl_component_t *comp = slot != NULL ? slot->comp : e->builtin;
        int found = 0;

        printf("\n%s: %s\n", e->name,
               comp != NULL && comp->description != NULL ? comp->description : "");
        if (slot != NULL && slot->module.path != NULL) {
            printf("  from %s\n", slot->module.path);
        }
        if (comp == NULL) {
            printf("  module %s.so not loaded: %s\n", e->module,
                   slot != NULL && slot->why_not != NULL ? slot->why_not : "(not tried)");
            continue;
        }
        if (!opened) {
            printf("  (not opened)\n");
            continue;
        }
        for (int i = 0; i < ctx->n_modules; i++) {
            const ferry_btl_module_t *m = ctx->modules[i];

            if (m == NULL || m->component != comp) {
                continue;
            }
            printf("  module %d (%s)\n", found, m->attr.name != NULL ? m->attr.name : "?");
            print_attr(&m->attr);
            found++;
        }
        if (found == 0) {
            /* The component logs why at info level when it opens nothing. */
            printf("  not available on this host (FERRY_LOG_LEVEL=info says why)\n");
        }
    }
}

/* The modules of this build: the transports' (loaded by the context) and
 * the modex backends' (loaded here, to tell whether they would load). */
static void print_modules(const ferry_ctx_t *ctx)
{
    char dir[1024];
    int n = 0;

    printf("\nmodules, loaded when needed from FERRY_MODULE_PATH");
    if (ctx != NULL && ctx->param_module_path != NULL && ctx->param_module_path[0] != '\0') {
        printf(" (%s)", ctx->param_module_path);
    }
    if (rt_module_default_dir(dir, sizeof dir)) {
        printf(", then %s", dir);
    }
    printf(":\n");
    for (const btl_component_entry_t *e = btl_component_table; e->name != NULL; e++) {
        const btl_slot_t *slot = find_slot(ctx, e);

        if (e->builtin != NULL) {
            continue;
        }
        n++;
        if (slot != NULL && slot->module.path != NULL) {
            printf("  %-6s transport      %s\n", e->name, slot->module.path);
        } else {
            printf("  %-6s transport      not loaded: %s\n", e->name,
                   slot != NULL && slot->why_not != NULL ? slot->why_not : "(not tried)");
        }
    }
    for (const rt_modex_entry_t *e = rt_modex_backends; e->name != NULL; e++) {
        char why[RT_MODULE_WHY_MAX];
        rt_module_t mod = {0};

        if (e->builtin != NULL) {
            continue;
        }
        n++;
        if (rt_module_load(ctx != NULL ? ctx->param_module_path : NULL, e->module, "modex",
                           e->name, &mod, why) == FERRY_OK) {
            printf("  %-6s modex backend  %s\n", e->name, mod.path);
            rt_module_unload(&mod);
        } else {
            printf("  %-6s modex backend  not loaded: %s\n", e->name, why);
        }
    }
    if (n == 0) {
        printf("  none: every part of this build is in the library itself\n");
    }
}

static int count_params(const rt_params_t *params)
{
    int n = 0;

    for (const rt_param_t *p = params->head; p != NULL; p = p->next) {
        n++;
    }
    return n;
}

static void print_params(const rt_params_t *params)
{
    printf("\nparameters (set through the environment):\n");
    for (const rt_param_t *p = params->head; p != NULL; p = p->next) {
        const char *value = p->value_text != NULL ? p->value_text : "";
        const char *def = p->def_text != NULL ? p->def_text : "";
        const char *quote = p->type == RT_PARAM_STRING ? "\"" : "";

        printf("  %s = %s%s%s (default %s%s%s, %s%s): %s\n", p->env, quote, value, quote, quote,
               def, quote, param_type_name(p->type), p->from_env ? ", from the environment" : "",
               p->help != NULL ? p->help : "");
    }
    printf("\nother variables ferry knows (not parameters; any other FERRY_* variable is "
           "warned about):\n");
    for (const rt_env_var_t *v = rt_params_other_vars(); v->name != NULL; v++) {
        printf("  %s: %s\n", v->name, v->what);
    }
}

int main(int argc, char **argv)
{
    info_opts_t opts;
    ferry_ctx_t *ctx = NULL;
    int exit_code = 0;
    int rc;

    rc = parse_args(argc, argv, &opts);
    if (rc == 1) {
        return 0;
    }
    if (rc != 0) {
        return 2;
    }

    /* ferry_info describes this process only; it must not try to join (or
     * hang waiting for) a job whose launcher variables it inherited. */
    if (setenv("FERRY_MODEX", "singleton", 1) != 0) {
        perror("ferry_info: setenv");
        return 1;
    }

    printf("ferry %d.%d\n", FERRY_VERSION_MAJOR, FERRY_VERSION_MINOR);

    rc = api_ctx_create(NULL, API_CTX_OPEN | API_CTX_ALL_MODULES, &ctx);
    if (rc != FERRY_OK) {
        exit_code = 1;
        ctx = NULL;
        if (rc == FERRY_ERR_INVALID) {
            /* A parameter is wrong; the log line above names it, and reading
             * the parameters again would only fail the same way. */
            fprintf(stderr, "ferry_info: a parameter is invalid: %s\n", ferry_strerror(rc));
        } else {
            /* Still show what was built and the parameters, which may explain
             * why a transport would not open. */
            fprintf(stderr, "ferry_info: could not open the transports: %s\n",
                    ferry_strerror(rc));
            rc = api_ctx_create(NULL, API_CTX_ALL_MODULES, &ctx);
            if (rc != FERRY_OK) {
                fprintf(stderr, "ferry_info: could not read the parameters: %s\n",
                        ferry_strerror(rc));
                ctx = NULL;
            }
        }
        print_transports(ctx, false);
    } else {
        print_transports(ctx, true);
    }
    print_modules(ctx);

    if (ctx != NULL) {
        if (opts.all_params) {
            print_params(&ctx->params);
        } else {
            printf("\n%d parameters; `ferry_info -a` lists them with their values, defaults "
                   "and help.\n",
                   count_params(&ctx->params));
        }
        rc = ferry_finalize(&ctx);
        if (rc != FERRY_OK) {
            fprintf(stderr, "ferry_info: closing the transports: %s\n", ferry_strerror(rc));
            exit_code = 1;
        }
    }
    if (fflush(stdout) != 0) {
        perror("ferry_info: writing the output");
        exit_code = 1;
    }
    return exit_code;
}
