/*
 * Fuzz harness: parameter values (src/rt/params.c), the text a user puts
 * in FERRY_* variables. The first byte picks the parser and, for the
 * registry, the range; the rest is the value (cut at a NUL, as an
 * environment value is). Besides not crashing, every accepted value must
 * print and parse back to itself, and a registered value must lie in its
 * range.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "fuzz.h"
#include "rt/log.h"
#include "rt/params.h"

extern char **environ;

static const struct {
    long long min, max;
} int_ranges[] = {{LLONG_MIN, LLONG_MAX}, {0, 1}, {-5, 5}, {1, 1 << 20}};
static const struct {
    size_t min, max; /* max 0: unbounded */
} size_ranges[] = {{0, 0}, {1, 4096}, {4096, (size_t)1 << 40}, {0, 1}};

static void check_int(const char *text)
{
    long long v = 0;
    if (rt_param_parse_int(text, &v) != FERRY_OK) {
        return;
    }
    char back[32];
    long long again = 0;
    snprintf(back, sizeof(back), "%lld", v);
    CHECK_FUZZ(rt_param_parse_int(back, &again) == FERRY_OK && again == v);
}

static void check_size(const char *text)
{
    size_t v = 0;
    if (rt_param_parse_size(text, &v) != FERRY_OK) {
        return;
    }
    char back[32];
    size_t again = 0;
    snprintf(back, sizeof(back), "%zu", v);
    CHECK_FUZZ(rt_param_parse_size(back, &again) == FERRY_OK && again == v);
}

static void check_bool(const char *text)
{
    bool v = false, again = true;
    if (rt_param_parse_bool(text, &v) != FERRY_OK) {
        return;
    }
    CHECK_FUZZ(rt_param_parse_bool(v ? "true" : "false", &again) == FERRY_OK && again == v);
}

/* Registers one parameter whose environment variable holds text. */
static void check_register(unsigned op, unsigned range, char *env_entry)
{
    char *env[] = {env_entry, NULL};
    char **saved = environ;
    environ = env;
    rt_log_t log;
    rt_log_init(&log);
    rt_params_t params;
    rt_params_init(&params, &log);
    int rc = FERRY_OK;
    switch (op) {
    case 0: {
        long long v = 0;
        long long lo = int_ranges[range % 4].min, hi = int_ranges[range % 4].max;
        rc = rt_param_register_int(&params, "fuzz_value", lo < 0 && hi > 0 ? 0 : lo, lo, hi,
                                   "a fuzzed integer", &v);
        CHECK_FUZZ(rc != FERRY_OK || (v >= lo && v <= hi));
        break;
    }
    case 1: {
        size_t v = 0;
        size_t lo = size_ranges[range % 4].min, hi = size_ranges[range % 4].max;
        rc = rt_param_register_size(&params, "fuzz_value", lo, lo, hi, "a fuzzed size", &v);
        CHECK_FUZZ(rc != FERRY_OK || (v >= lo && (hi == 0 || v <= hi)));
        break;
    }
    case 2: {
        bool v = false;
        rc = rt_param_register_bool(&params, "fuzz_value", true, "a fuzzed boolean", &v);
        break;
    }
    default: {
        const char *v = NULL;
        rc = rt_param_register_string(&params, "fuzz_value", "dflt", "a fuzzed string", &v);
        CHECK_FUZZ(rc != FERRY_OK || strcmp(v, strchr(env_entry, '=') + 1) == 0);
        break;
    }
    }
    const rt_param_t *p = rt_param_find(&params, "fuzz_value");
    /* A refused value registers nothing; an accepted one is listed. */
    CHECK_FUZZ((rc == FERRY_OK) == (p != NULL));
    CHECK_FUZZ(p == NULL || p->from_env);
    rt_params_fini(&params);
    environ = saved;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) {
        return 0;
    }
    static const char prefix[] = "FERRY_FUZZ_VALUE=";
    char entry[sizeof(prefix) + 4096];
    size_t n = size - 1 < 4096 ? size - 1 : 4096;
    memcpy(entry, prefix, sizeof(prefix) - 1);
    memcpy(entry + sizeof(prefix) - 1, data + 1, n);
    entry[sizeof(prefix) - 1 + n] = '\0';
    const char *text = entry + sizeof(prefix) - 1;
    unsigned op = data[0] & 7u, range = data[0] >> 3;
    switch (op) {
    case 0:
        check_int(text);
        break;
    case 1:
        check_size(text);
        break;
    case 2:
        check_bool(text);
        break;
    case 3: {
        rt_log_level_t level;
        if (rt_log_parse_level(text, &level) == FERRY_OK) {
            CHECK_FUZZ((unsigned)level <= RT_LOG_TRACE);
        }
        break;
    }
    default:
        check_register(op - 4, range, entry);
        break;
    }
    return 0;
}
