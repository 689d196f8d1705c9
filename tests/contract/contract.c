/*
 * The transport contract suite: usage `contract_suite TRANSPORT [CASE[,CASE...]]`.
 *
 * It opens ferry with the transport (plus self, so the runtime can always
 * reach this rank), takes that transport's module, adds every rank of the job
 * and runs the cases of include/ferry/btl.h's contract against every peer the
 * module reaches. One line per case: "ok  CASE", or "FAIL CASE ..." lines with
 * file:line and the values; then "N passed, M failed". Exit status 0 when all
 * passed, 1 when any failed, 77 when the transport is not built or cannot run
 * here (CTest's SKIP_RETURN_CODE), 2 for a usage error.
 */
#include "contract.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ct_case {
    const char *name;
    ct_result_t (*fn)(ct_suite_t *s);
} ct_case_t;

static const ct_case_t ct_cases[] = {
    {"am_sizes", ct_case_am_sizes},
    {"am_all_tags", ct_case_am_all_tags},
    {"am_order", ct_case_am_order},
    {"back_pressure", ct_case_back_pressure},
    {"desc_accounting", ct_case_desc_accounting},
    {"prepare_src_reserve", ct_case_prepare_src_reserve},
    {"put_get", ct_case_put_get},
    {"rdma_bounds", ct_case_rdma_bounds},
    {"rdma_revoked", ct_case_rdma_revoked},
    {"rdma_revoke_inflight", ct_case_rdma_revoke_inflight},
    {"rdma_guess", ct_case_rdma_guess},
    {"rdma_prepared", ct_case_rdma_prepared},
    {"rdma_direct", ct_case_rdma_direct},
    {"put_inline", ct_case_put_inline},
    {"get_inline", ct_case_get_inline},
    {"put_ordered", ct_case_put_ordered},
    {"put_notify_inline", ct_case_put_notify_inline},
    {"invalid_args", ct_case_invalid_args},
    {"flush", ct_case_flush},
    {"atomic_counter", ct_case_atomic_counter},
    {"atomic_lock", ct_case_atomic_lock},
    {"atomic_ops", ct_case_atomic_ops},
    {"atomic_refusals", ct_case_atomic_refusals},
    {"atomic_revoke", ct_case_atomic_revoke},
    {"atomic_by_owner", ct_case_atomic_by_owner},
};
#define CT_NCASES (sizeof(ct_cases) / sizeof(ct_cases[0]))

static void usage(const char *argv0)
{
    fprintf(stderr, "usage: %s TRANSPORT [CASE[,CASE...]]\ncases:", argv0);
    for (size_t i = 0; i < CT_NCASES; i++)
        fprintf(stderr, " %s", ct_cases[i].name);
    fprintf(stderr, "\n");
}

/* A transport name is what ferry_add_transport accepts: [a-z0-9_], short. */
static bool valid_name(const char *name)
{
    size_t n = strlen(name);

    if (n == 0 || n > 32)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return false;
    }
    return true;
}

static bool transport_built(const char *name)
{
    for (const btl_component_entry_t *e = btl_component_table; e->name != NULL; e++) {
        if (strcmp(e->name, name) == 0)
            return true;
    }
    return false;
}

/* Parses the case filter into selected[]. False (after a message) when it
 * names an unknown case. */
static bool parse_filter(const char *filter, bool *selected)
{
    char *copy;
    char *save = NULL;
    bool ok = true;

    for (size_t i = 0; i < CT_NCASES; i++)
        selected[i] = filter == NULL;
    if (filter == NULL)
        return true;
    copy = strdup(filter);
    if (copy == NULL)
        return false;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        bool found = false;
        for (size_t i = 0; i < CT_NCASES; i++) {
            if (strcmp(tok, ct_cases[i].name) == 0) {
                selected[i] = true;
                found = true;
            }
        }
        if (!found) {
            fprintf(stderr, "contract: unknown case '%s'\n", tok);
            ok = false;
        }
    }
    free(copy);
    return ok;
}

static void ct_error_cb(ferry_btl_module_t *btl, int status, int peer, const char *msg,
                        void *cbdata)
{
    ct_suite_t *s = cbdata;

    s->errors_reported++;
    CT_CHECK(s, false, "transport error callback: status %d (%s), peer %d: %s", status,
             ferry_strerror(status), peer, msg != NULL ? msg : "(no message)");
}

/* Ends the current case: prints its line and counts it. */
static void ct_case_report(ct_suite_t *s, ct_result_t res)
{
    if (res == CT_RESULT_SKIP && s->case_failures == 0) {
        s->skipped++;
    } else if (s->case_failures == 0) {
        if (s->size > 1)
            printf("ok  %s [rank %d]\n", s->case_name, s->rank);
        else
            printf("ok  %s\n", s->case_name);
        s->passed++;
    } else {
        printf("FAIL %s [rank %d]: %d check%s failed\n", s->case_name, s->rank,
               s->case_failures, s->case_failures == 1 ? "" : "s");
        s->failed++;
    }
    fflush(stdout);
    s->case_failures = 0;
    s->case_name = NULL;
}

/* The attributes the suite relies on to size its own messages. */
static void ct_check_attr(ct_suite_t *s)
{
    const ferry_btl_attr_t *a = s->attr;

    CT_CHECK(s, a->name != NULL && strcmp(a->name, s->transport) == 0,
             "attr.name is '%s', module of transport '%s'", a->name != NULL ? a->name : "(null)",
             s->transport);
    CT_CHECK(s, (a->flags & FERRY_BTL_FLAG_SEND) != 0, "attr.flags 0x%x lack FERRY_BTL_FLAG_SEND",
             a->flags);
    CT_CHECK(s, a->eager_limit > 0 && a->eager_limit <= a->max_send_size,
             "eager_limit %zu, max_send_size %zu", a->eager_limit, a->max_send_size);
    CT_CHECK(s, a->max_send_size >= sizeof(ct_ctrl_t) && a->max_send_size <= ((size_t)1 << 30),
             "max_send_size %zu (the suite needs %zu .. 1 GiB)", a->max_send_size,
             sizeof(ct_ctrl_t));
    CT_CHECK(s, a->reg_handle_size <= FERRY_BTL_KEY_MAX, "reg_handle_size %zu > KEY_MAX %d",
             a->reg_handle_size, FERRY_BTL_KEY_MAX);
    if ((a->flags & (FERRY_BTL_FLAG_PUT | FERRY_BTL_FLAG_GET)) != 0)
        CT_CHECK(s, a->max_rdma_size > 0, "PUT/GET with max_rdma_size 0");
}

/*
 * The first case, always run: the endpoints. add_procs of every rank must
 * give the endpoints the runtime already holds, the reachable bitmap must
 * match the non-NULL endpoints, and self must reach exactly this rank.
 * Returns false when the suite cannot go on.
 */
static bool ct_setup(ct_suite_t *s)
{
    ferry_btl_proc_t *procs = calloc((size_t)s->size, sizeof(*procs));
    ferry_btl_endpoint_t **again = calloc((size_t)s->size, sizeof(*again));
    util_bitmap_t reach2 = {0};
    bool ok = false;
    int rc;

    s->case_name = "add_procs";
    s->eps = calloc((size_t)s->size, sizeof(*s->eps));
    s->peer = calloc((size_t)s->size, sizeof(*s->peer));
    s->reach = calloc((size_t)s->size, sizeof(*s->reach));
    s->rxbuf_len = s->attr->max_send_size;
    s->rxbuf = malloc(s->rxbuf_len);
    if (procs == NULL || again == NULL || s->eps == NULL || s->peer == NULL ||
        s->reach == NULL || s->rxbuf == NULL || util_bitmap_init(&s->reachable, (size_t)s->size) != 0 ||
        util_bitmap_init(&reach2, (size_t)s->size) != 0) {
        fprintf(stderr, "contract: out of memory\n");
        exit(1);
    }
    for (int r = 0; r < s->size; r++) {
        procs[r].rank = r;
        procs[r].same_host = true; /* ferryrun starts every rank on this host */
    }
    ct_check_attr(s);

    rc = s->btl->ops->add_procs(s->btl, (size_t)s->size, procs, s->eps, &s->reachable);
    if (!CT_CHECK_RC(s, rc, FERRY_OK, "add_procs"))
        goto out_free;
    for (int r = 0; r < s->size; r++) {
        bool bit = util_bitmap_test(&s->reachable, (size_t)r);
        CT_CHECK(s, bit == (s->eps[r] != NULL), "rank %d: reachable bit %d but endpoint %p", r,
                 bit, (void *)s->eps[r]);
        if (bit && s->eps[r] != NULL) {
            s->peer[r].reachable = true;
            s->peer[r].ep = s->eps[r];
            s->reach[s->nreach++] = r;
        }
        /* The runtime added the procs already: the same endpoints come back. */
        if (s->ctx->peers != NULL && s->ctx->peers[r].eps != NULL && s->module_idx >= 0)
            CT_CHECK(s, s->ctx->peers[r].eps[s->module_idx] == s->eps[r],
                     "rank %d: add_procs gave endpoint %p, the runtime holds %p", r,
                     (void *)s->eps[r], (void *)s->ctx->peers[r].eps[s->module_idx]);
    }
    rc = s->btl->ops->add_procs(s->btl, (size_t)s->size, procs, again, &reach2);
    if (CT_CHECK_RC(s, rc, FERRY_OK, "add_procs a second time")) {
        for (int r = 0; r < s->size; r++) {
            CT_CHECK(s, again[r] == s->eps[r], "rank %d: second add_procs gave %p, first %p", r,
                     (void *)again[r], (void *)s->eps[r]);
            CT_CHECK(s, util_bitmap_test(&reach2, (size_t)r) == util_bitmap_test(&s->reachable, (size_t)r),
                     "rank %d: reachable differs between two add_procs", r);
        }
    }
    if (strcmp(s->transport, "self") == 0) {
        /* Loopback reaches this process and nothing else. */
        CT_CHECK(s, s->nreach == 1 && s->reach[0] == s->rank,
                 "self reaches %d ranks (first %d), expected only rank %d", s->nreach,
                 s->nreach > 0 ? s->reach[0] : -1, s->rank);
    }
    if (!CT_CHECK(s, s->nreach > 0, "the module reaches no rank of %d", s->size))
        goto out_free;
    ct_note(s, "%s reaches %d of %d ranks; eager_limit %zu, max_send_size %zu, "
            "max_rdma_size %zu, flags 0x%x, reg_handle_size %zu",
            s->transport, s->nreach, s->size, s->attr->eager_limit, s->attr->max_send_size,
            s->attr->max_rdma_size, s->attr->flags, s->attr->reg_handle_size);
    rc = s->btl->ops->register_error(s->btl, ct_error_cb, s);
    CT_CHECK_RC(s, rc, FERRY_OK, "register_error");
    ct_register_handlers(s);
    ok = s->case_failures == 0;

out_free:
    util_bitmap_fini(&reach2);
    free(again);
    free(procs);
    ct_case_report(s, CT_RESULT_RUN);
    return ok;
}

static void ct_teardown(ct_suite_t *s)
{
    s->case_name = "teardown";
    ct_unregister_handlers(s);
    CT_CHECK(s, s->des_alloc == s->des_freed + s->des_released,
             "descriptors: %llu obtained, %llu freed by the suite, %llu released by the "
             "transport after completion",
             (unsigned long long)s->des_alloc, (unsigned long long)s->des_freed,
             (unsigned long long)s->des_released);
    CT_CHECK(s, s->ops_done == s->ops_started, "%llu operations started, %llu completed",
             (unsigned long long)s->ops_started, (unsigned long long)s->ops_done);
}

int main(int argc, char **argv)
{
    ferry_init_params_t params = {FERRY_THREAD_SINGLE, NULL};
    bool selected[CT_NCASES];
    char transports[64];
    ct_suite_t s;
    int rc;

    if (argc < 2 || argc > 3 || !valid_name(argv[1])) {
        usage(argv[0]);
        return 2;
    }
    if (!parse_filter(argc == 3 ? argv[2] : NULL, selected)) {
        usage(argv[0]);
        return 2;
    }
    if (!transport_built(argv[1])) {
        printf("SKIPPED: transport %s not available: not built into this ferry\n", argv[1]);
        return CT_EXIT_SKIP;
    }
    /* self comes along so the runtime always reaches this rank, whatever the
     * transport under test reaches. */
    if (strcmp(argv[1], "self") == 0)
        snprintf(transports, sizeof(transports), "self");
    else
        snprintf(transports, sizeof(transports), "self,%s", argv[1]);
    params.transports = transports;

    memset(&s, 0, sizeof(s));
    s.transport = argv[1];
    s.module_idx = -1;
    rc = ferry_init(&params, &s.ctx);
    if (rc == FERRY_ERR_NOT_SUPPORTED) {
        /* The transport's module or the library it needs is missing here:
         * the log line above says which. */
        printf("SKIPPED: transport %s not available: ferry_init(transports \"%s\") says %s\n",
               argv[1], transports, ferry_strerror(rc));
        return CT_EXIT_SKIP;
    }
    if (rc != FERRY_OK) {
        printf("FAIL setup: ferry_init(transports \"%s\") returned %d (%s)\n", transports, rc,
               ferry_strerror(rc));
        return 1;
    }
    s.rank = ferry_rank(s.ctx);
    s.size = ferry_size(s.ctx);
    s.btl = btl_ctx_find_module(s.ctx, argv[1]);
    if (s.btl == NULL) {
        printf("SKIPPED: transport %s not available: its component opened no module here "
               "(the log says why)\n",
               argv[1]);
        ferry_finalize(&s.ctx);
        return CT_EXIT_SKIP;
    }
    s.attr = &s.btl->attr;
    for (int i = 0; i < s.ctx->n_modules; i++) {
        if (s.ctx->modules[i] == s.btl)
            s.module_idx = i;
    }
    if (!ct_setup(&s)) {
        printf("0 passed, 1 failed\n");
        ferry_finalize(&s.ctx);
        return 1;
    }

    for (size_t i = 0; i < CT_NCASES; i++) {
        ct_result_t res;
        if (!selected[i])
            continue;
        s.case_name = ct_cases[i].name;
        s.case_id = (uint32_t)i + 1;
        res = ct_cases[i].fn(&s);
        ct_case_report(&s, res);
    }

    ct_teardown(&s);
    ct_case_report(&s, CT_RESULT_RUN);

    /* Finalizing returns every pool; a transport or pool that finds a
     * descriptor not returned says so (on stderr in debug builds, which CTest
     * watches) and must not report success. */
    s.case_name = "finalize";
    rc = ferry_finalize(&s.ctx);
    CT_CHECK_RC(&s, rc, FERRY_OK, "ferry_finalize");
    ct_case_report(&s, CT_RESULT_RUN);

    printf("%d passed, %d failed\n", s.passed, s.failed);
    util_bitmap_fini(&s.reachable);
    free(s.to_free);
    free(s.rxbuf);
    free(s.reach);
    free(s.peer);
    free(s.eps);
    return s.failed == 0 ? 0 : 1;
}
