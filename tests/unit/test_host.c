/*
 * The embedding interface (include/ferry/host.h): every refusal of a bad
 * host, the host's parameters winning over the environment (and a bad one
 * named by the host's origin), the log going to the host, the cleanup of
 * shared-memory files, the checks of what the host's get answers, the
 * parameter listing and the reachable sets.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/btl.h>
#include <ferry/ferry.h>
#include <ferry/host.h>

#include "rt/modex.h"
#include "check.h"

/* ---- a host of one process, with knobs for the tests ---- */

typedef struct test_host {
    char log[16384];      /* every line the host was given */
    const char *param_name; /* the parameter the host sets, if any */
    const char *param_value;
    char cleanup[8][256]; /* paths given to cleanup */
    int n_cleanup;
    int get_rc;           /* what get answers */
    size_t get_len;
    bool get_no_buffer;
    int puts;
} test_host_t;

static int put_cb(void *arg, const char *key, const void *val, size_t len)
{
    ((test_host_t *)arg)->puts++;
    return FERRY_OK;
}

static int fence_cb(void *arg)
{
    return FERRY_OK;
}

static int get_cb(void *arg, int rank, const char *key, void **val_out, size_t *len_out)
{
    test_host_t *t = arg;
    if (t->get_rc != FERRY_OK)
        return t->get_rc;
    *val_out = t->get_no_buffer ? NULL : calloc(1, 16);
    *len_out = t->get_len;
    return FERRY_OK;
}

static void log_cb(void *arg, int level, const char *line)
{
    test_host_t *t = arg;
    size_t used = strlen(t->log);
    snprintf(t->log + used, sizeof(t->log) - used, "%d|%s\n", level, line);
}

static const char *param_cb(void *arg, const char *name, const char **origin_out)
{
    test_host_t *t = arg;
    if (t->param_name == NULL || strcmp(name, t->param_name) != 0)
        return NULL;
    *origin_out = "host_var_of_test";
    return t->param_value;
}

static int cleanup_cb(void *arg, const char *path)
{
    test_host_t *t = arg;
    if (t->n_cleanup < 8)
        snprintf(t->cleanup[t->n_cleanup++], sizeof(t->cleanup[0]), "%s", path);
    return FERRY_OK;
}

static ferry_host_t make_host(test_host_t *t)
{
    memset(t, 0, sizeof(*t));
    return (ferry_host_t){
        .version = FERRY_HOST_VERSION,
        .rank = 0,
        .size = 1,
        .job_id = "unit-host",
        .arg = t,
        .modex_put = put_cb,
        .modex_fence = fence_cb,
        .modex_get = get_cb,
        .log = log_cb,
        .param = param_cb,
        .cleanup = cleanup_cb,
    };
}

static void refused(const ferry_host_t *h, int want, const char *why)
{
    ferry_ctx_t *ctx = (ferry_ctx_t *)0x1;
    test_host_t *t = h != NULL ? h->arg : NULL;
    if (t != NULL)
        t->log[0] = '\0';
    CHECK(ferry_host_open(h, NULL, &ctx) == want);
    CHECK(ctx == (ferry_ctx_t *)0x1); /* untouched on failure */
    CHECK(ferry_host_init(h, NULL, &ctx) == want);
    if (t != NULL && why != NULL) {
        if (strstr(t->log, why) == NULL)
            fprintf(stderr, "log lacks '%s':\n%s", why, t->log);
        CHECK(strstr(t->log, why) != NULL);
    }
}

static void test_refusals(void)
{
    test_host_t t;
    ferry_host_t h = make_host(&t);
    ferry_ctx_t *ctx;
    refused(NULL, FERRY_ERR_INVALID, NULL);
    CHECK(ferry_host_open(&h, NULL, NULL) == FERRY_ERR_INVALID);

    h = make_host(&t);
    /* (A host of another version may lay its functions out otherwise: its
     * log is not used, the message goes to stderr.) */
    h.version = FERRY_HOST_VERSION + 1;
    refused(&h, FERRY_ERR_NOT_SUPPORTED, NULL);
    CHECK(t.log[0] == '\0');

    h = make_host(&t);
    h.rank = 1;
    refused(&h, FERRY_ERR_INVALID, "rank is not in [0, size)");
    h.rank = -1;
    refused(&h, FERRY_ERR_INVALID, "rank is not in [0, size)");
    h.rank = 0;
    h.size = 0;
    refused(&h, FERRY_ERR_INVALID, "rank is not in [0, size)");

    h = make_host(&t);
    h.job_id = NULL;
    refused(&h, FERRY_ERR_INVALID, "no job id");
    h.job_id = "";
    refused(&h, FERRY_ERR_INVALID, "no job id");

    h = make_host(&t);
    h.modex_put = NULL;
    refused(&h, FERRY_ERR_INVALID, "lacks modex_put or modex_get");
    h = make_host(&t);
    h.modex_get = NULL;
    refused(&h, FERRY_ERR_INVALID, "lacks modex_put or modex_get");

    /* A whole context needs the fence; the transports alone do not. */
    h = make_host(&t);
    h.modex_fence = NULL;
    CHECK(ferry_host_init(&h, NULL, &ctx) == FERRY_ERR_INVALID);
    CHECK(strstr(t.log, "needs modex_fence") != NULL);
    CHECK(ferry_host_open(&h, NULL, &ctx) == FERRY_OK);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
}

/* The host's value wins over FERRY_*; a bad one is named by its origin. */
static void test_params(void)
{
    test_host_t t;
    ferry_host_t h = make_host(&t);
    ferry_ctx_t *ctx;
    ferry_init_params_t ip = {.transports = "sm"};

    setenv("FERRY_SM_MAX_SEND_SIZE", "8k", 1);
    t.param_name = "sm_max_send_size";
    t.param_value = "16k";
    CHECK(ferry_host_open(&h, &ip, &ctx) == FERRY_OK);
    ferry_btl_module_t *const *mods;
    int n = 0;
    CHECK(ferry_host_modules(ctx, &mods, &n) == FERRY_OK);
    bool found = false;
    for (int i = 0; i < n; i++) {
        if (strcmp(mods[i]->attr.name, "sm") == 0) {
            CHECK(mods[i]->attr.max_send_size == 16384);
            found = true;
        }
    }
    CHECK(found);
    /* The transport's address went to the host, and its segment is the
     * host's to remove if this process is killed. */
    CHECK(t.puts > 0);
    CHECK(t.n_cleanup == 1);
    CHECK(strncmp(t.cleanup[0], "/dev/shm/ferry-", 15) == 0);
    CHECK(strstr(t.cleanup[0], "unit-host") != NULL);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    CHECK(access(t.cleanup[0], F_OK) != 0); /* a normal finalize removes it */

    /* Without the host's value, the environment's. */
    t.param_name = NULL;
    CHECK(ferry_host_open(&h, &ip, &ctx) == FERRY_OK);
    CHECK(ferry_host_modules(ctx, &mods, &n) == FERRY_OK);
    for (int i = 0; i < n; i++)
        if (strcmp(mods[i]->attr.name, "sm") == 0)
            CHECK(mods[i]->attr.max_send_size == 8192);
    CHECK(ferry_finalize(&ctx) == FERRY_OK);
    unsetenv("FERRY_SM_MAX_SEND_SIZE");

    /* A bad value from the host: refused, the message naming the host's
     * origin and reaching the host's log, not stderr. */
    t.param_name = "sm_max_send_size";
    t.param_value = "lots";
    t.log[0] = '\0';
    ctx = NULL;
    CHECK(ferry_host_open(&h, &ip, &ctx) == FERRY_ERR_INVALID);
    CHECK(ctx == NULL);
    CHECK(strstr(t.log, "host_var_of_test='lots' is not a size") != NULL);
    CHECK(strstr(t.log, "0|ferry") != NULL); /* at error level */
    t.param_name = "log_level";
    t.param_value = "loud";
    t.log[0] = '\0';
    CHECK(ferry_host_open(&h, &ip, &ctx) == FERRY_ERR_INVALID);
    CHECK(strstr(t.log, "not a level") != NULL);
}

/* What the host's get answers is checked. */
static void test_get_checks(void)
{
    test_host_t t;
    ferry_host_t h = make_host(&t);
    h.size = 2;
    rt_log_t log;
    rt_log_init(&log);
    rt_modex_t *mx;
    CHECK(rt_modex_open_host(&log, &h, &mx) == FERRY_OK);
    CHECK(strcmp(rt_modex_backend(mx), "host") == 0);
    CHECK(strcmp(rt_modex_job_id(mx), "unit-host") == 0);
    void *val = NULL;
    size_t len = 0;

    t.get_len = 16;
    CHECK(rt_modex_get(mx, 1, "k", &val, &len) == FERRY_OK && len == 16);
    free(val);
    t.get_len = 0; /* an empty value still gets a buffer */
    t.get_no_buffer = true;
    CHECK(rt_modex_get(mx, 1, "k", &val, &len) == FERRY_OK && len == 0 && val != NULL);
    free(val);
    t.get_len = 4; /* bytes claimed, no buffer */
    CHECK(rt_modex_get(mx, 1, "k", &val, &len) == FERRY_ERR_PROTO);
    t.get_no_buffer = false;
    t.get_len = (size_t)64 << 20; /* more than any value may be */
    CHECK(rt_modex_get(mx, 1, "k", &val, &len) == FERRY_ERR_PROTO);
    t.get_rc = FERRY_ERR_NOT_FOUND;
    CHECK(rt_modex_get(mx, 1, "k", &val, &len) == FERRY_ERR_NOT_FOUND);
    t.get_rc = 7; /* not a status at all */
    CHECK(rt_modex_get(mx, 1, "k", &val, &len) == FERRY_ERR);
    t.get_rc = -1000;
    CHECK(rt_modex_get(mx, 1, "k", &val, &len) == FERRY_ERR);
    /* Cleanup registrations: only absolute paths, shm names only as names. */
    CHECK(rt_modex_register_cleanup(mx, "relative") == FERRY_ERR_INVALID);
    CHECK(rt_modex_register_shm(mx, "/a/b") == FERRY_ERR_INVALID);
    CHECK(rt_modex_register_shm(mx, "/ferry-x") == FERRY_OK);
    CHECK(t.n_cleanup == 1 && strcmp(t.cleanup[0], "/dev/shm/ferry-x") == 0);
    rt_modex_fini(mx);
}

typedef struct listing {
    int count;
    bool saw_sm_eager, saw_mem, saw_launcher, saw_set;
    int stop_after;
} listing_t;

static int list_cb(const ferry_param_info_t *p, void *arg)
{
    listing_t *l = arg;
    l->count++;
    CHECK(p->name != NULL && p->env != NULL && p->help != NULL && p->def != NULL &&
          p->value != NULL && p->type != NULL);
    CHECK(strncmp(p->env, "FERRY_", 6) == 0);
    if (strcmp(p->name, "sm_eager_limit") == 0) {
        l->saw_sm_eager = true;
        CHECK(strcmp(p->type, "size") == 0 && strcmp(p->def, "4096") == 0);
    }
    if (strcmp(p->name, "tcp_eager_limit") == 0 && p->set && strcmp(p->value, "2048") == 0)
        l->saw_set = true;
    if (strncmp(p->name, "mem_", 4) == 0)
        l->saw_mem = true;
    if (strcmp(p->name, "modex") == 0 || strcmp(p->name, "pmi_timeout") == 0)
        l->saw_launcher = true;
    return l->stop_after > 0 && l->count == l->stop_after ? 42 : 0;
}

static void test_listing(void)
{
    test_host_t t;
    ferry_host_t h = make_host(&t);
    listing_t l = {0};
    t.param_name = "tcp_eager_limit";
    t.param_value = "2048";
    CHECK(ferry_host_params(&h, NULL, list_cb, &l) == FERRY_OK);
    CHECK(l.count > 10 && l.saw_sm_eager && l.saw_mem && l.saw_set && !l.saw_launcher);
    /* Without a host too; a callback's non-zero answer stops the listing. */
    listing_t stop = {.stop_after = 3};
    CHECK(ferry_host_params(NULL, NULL, list_cb, &stop) == 42 && stop.count == 3);
    CHECK(ferry_host_params(NULL, NULL, NULL, NULL) == FERRY_ERR_INVALID);
    h.version = 99;
    CHECK(ferry_host_params(&h, NULL, list_cb, &l) == FERRY_ERR_NOT_SUPPORTED);
}

static void test_bitmaps(void)
{
    struct ferry_bitmap *bm;
    CHECK(ferry_bitmap_create(100, NULL) == FERRY_ERR_INVALID);
    CHECK(ferry_bitmap_create(100, &bm) == FERRY_OK);
    CHECK(!ferry_bitmap_test(bm, 5) && !ferry_bitmap_test(bm, 1000));
    CHECK(!ferry_bitmap_test(NULL, 0));
    ferry_bitmap_clear_all(bm);
    ferry_bitmap_destroy(bm);
    ferry_bitmap_destroy(NULL);
    CHECK(ferry_host_modules(NULL, NULL, NULL) == FERRY_ERR_INVALID);
}

/* A whole context of one through the host: ferry.h works on it. */
static void test_whole_context(void)
{
    test_host_t t;
    ferry_host_t h = make_host(&t);
    ferry_ctx_t *ctx;
    CHECK(ferry_host_init(&h, NULL, &ctx) == FERRY_OK);
    CHECK(ferry_rank(ctx) == 0 && ferry_size(ctx) == 1);
    CHECK(ferry_barrier(ctx) == FERRY_OK);
    CHECK(ferry_progress(ctx) >= 0);
    CHECK(ferry_finalize(&ctx) == FERRY_OK && ctx == NULL);
}

int main(void)
{
    test_refusals();
    test_params();
    test_get_checks();
    test_listing();
    test_bitmaps();
    test_whole_context();
    printf("test_host: all checks passed\n");
    return 0;
}
