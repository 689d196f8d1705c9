/*
 * rt_params: defaults, environment overrides of every type, strict parsing,
 * bad and out-of-range values refused with a message naming the variable,
 * name validation, duplicate registration and the textual forms; FERRY_*
 * variables that are no parameter warned about with the nearest name, except
 * those of a part whose module is not loaded.
 */
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "capture.h"
#include "check.h"
#include "rt/log.h"
#include "rt/params.h"

static void test_parse_int(void)
{
    long long v;

    CHECK(rt_param_parse_int("0", &v) == FERRY_OK && v == 0);
    CHECK(rt_param_parse_int("42", &v) == FERRY_OK && v == 42);
    CHECK(rt_param_parse_int("-42", &v) == FERRY_OK && v == -42);
    CHECK(rt_param_parse_int("+7", &v) == FERRY_OK && v == 7);
    CHECK(rt_param_parse_int("0x1f", &v) == FERRY_OK && v == 31);
    CHECK(rt_param_parse_int("0XFF", &v) == FERRY_OK && v == 255);
    CHECK(rt_param_parse_int("-0x10", &v) == FERRY_OK && v == -16);
    CHECK(rt_param_parse_int("9223372036854775807", &v) == FERRY_OK && v == LLONG_MAX);
    CHECK(rt_param_parse_int("-9223372036854775808", &v) == FERRY_OK && v == LLONG_MIN);

    v = 99;
    CHECK(rt_param_parse_int("9223372036854775808", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_int("-9223372036854775809", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_int("99999999999999999999999", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_int("", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_int("-", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_int("0x", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_int("12abc", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_int("abc", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_int(" 1", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_int("1 ", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_int("1k", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_int("--1", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_int(NULL, &v) == FERRY_ERR_INVALID);
    CHECK(v == 99); /* failures leave the output alone */
}

static void test_parse_size(void)
{
    size_t v;

    CHECK(rt_param_parse_size("0", &v) == FERRY_OK && v == 0);
    CHECK(rt_param_parse_size("4096", &v) == FERRY_OK && v == 4096);
    CHECK(rt_param_parse_size("64k", &v) == FERRY_OK && v == 65536);
    CHECK(rt_param_parse_size("64K", &v) == FERRY_OK && v == 65536);
    CHECK(rt_param_parse_size("64kb", &v) == FERRY_OK && v == 65536);
    CHECK(rt_param_parse_size("64KiB", &v) == FERRY_OK && v == 65536);
    CHECK(rt_param_parse_size("2m", &v) == FERRY_OK && v == 2u << 20);
    CHECK(rt_param_parse_size("2M", &v) == FERRY_OK && v == 2u << 20);
    CHECK(rt_param_parse_size("3g", &v) == FERRY_OK && v == (size_t)3 << 30);
    CHECK(rt_param_parse_size("1G", &v) == FERRY_OK && v == (size_t)1 << 30);
    CHECK(rt_param_parse_size("0x100", &v) == FERRY_OK && v == 256);
    CHECK(rt_param_parse_size("18446744073709551615", &v) == FERRY_OK && v == SIZE_MAX);

    v = 99;
    CHECK(rt_param_parse_size("-1", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_size("+1", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_size("abc", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_size("", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_size("k", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_size("12x", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_size("12kk", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_size("12ki", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_size("12t", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_size("12 k", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_size("12k ", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_size("18446744073709551616", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_size("17179869184g", &v) == FERRY_ERR_INVALID); /* 2^64 */
    CHECK(rt_param_parse_size("18014398509481984k", &v) == FERRY_ERR_INVALID);
    CHECK(rt_param_parse_size(NULL, &v) == FERRY_ERR_INVALID);
    CHECK(v == 99);
}

static void test_parse_bool(void)
{
    static const char *const yes[] = {"1", "true", "TRUE", "True", "yes", "YES", "on", "On"};
    static const char *const no[] = {"0", "false", "FALSE", "no", "No", "off", "OFF"};
    static const char *const bad[] = {"", "2", "y", "n", "truee", "of", " on", "on ", "-1"};
    bool v;

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        v = false;
        CHECK(rt_param_parse_bool(yes[i], &v) == FERRY_OK && v);
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        v = true;
        CHECK(rt_param_parse_bool(no[i], &v) == FERRY_OK && !v);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = true;
        CHECK(rt_param_parse_bool(bad[i], &v) == FERRY_ERR_INVALID && v);
    }
    CHECK(rt_param_parse_bool(NULL, &v) == FERRY_ERR_INVALID);
}

static void test_defaults(void)
{
    rt_log_t log;
    rt_params_t params;
    long long i = 0;
    size_t sz = 0;
    bool b = false;
    const char *s = NULL;
    const rt_param_t *p;

    rt_log_init(&log);
    rt_params_init(&params, &log);
    unsetenv("FERRY_UT_INT");
    unsetenv("FERRY_UT_SIZE");
    unsetenv("FERRY_UT_BOOL");
    unsetenv("FERRY_UT_STR");
    unsetenv("FERRY_UT_NULLSTR");

    CHECK(rt_param_register_int(&params, "ut_int", -5, -10, 10, "an int", &i) == FERRY_OK);
    CHECK(i == -5);
    CHECK(rt_param_register_size(&params, "ut_size", 4096, 1, 1 << 20, "a size", &sz) ==
          FERRY_OK);
    CHECK(sz == 4096);
    CHECK(rt_param_register_bool(&params, "ut_bool", true, "a bool", &b) == FERRY_OK);
    CHECK(b);
    CHECK(rt_param_register_string(&params, "ut_str", "hello", "a string", &s) == FERRY_OK);
    CHECK(s != NULL && strcmp(s, "hello") == 0);
    CHECK(rt_param_register_string(&params, "ut_nullstr", NULL, "empty default", &s) ==
          FERRY_OK);
    CHECK(s != NULL && strcmp(s, "") == 0);

    /* The records: registration order, env names, help, textual forms. */
    p = params.head;
    CHECK(p != NULL && strcmp(p->name, "ut_int") == 0);
    CHECK(strcmp(p->env, "FERRY_UT_INT") == 0);
    CHECK(strcmp(p->help, "an int") == 0);
    CHECK(p->type == RT_PARAM_INT);
    CHECK(strcmp(p->def_text, "-5") == 0 && strcmp(p->value_text, "-5") == 0);
    CHECK(!p->from_env);
    CHECK(p->min == -10 && p->max == 10);
    p = p->next;
    CHECK(p != NULL && strcmp(p->env, "FERRY_UT_SIZE") == 0 && p->type == RT_PARAM_SIZE);
    CHECK(strcmp(p->def_text, "4096") == 0 && p->value.sz == 4096);
    CHECK(p->min == 1 && p->max == 1 << 20);
    p = p->next;
    CHECK(p != NULL && strcmp(p->env, "FERRY_UT_BOOL") == 0 && p->type == RT_PARAM_BOOL);
    CHECK(strcmp(p->def_text, "true") == 0 && p->value.b);
    p = p->next;
    CHECK(p != NULL && strcmp(p->env, "FERRY_UT_STR") == 0 && p->type == RT_PARAM_STRING);
    CHECK(strcmp(p->def_text, "hello") == 0 && strcmp(p->value_text, "hello") == 0);
    p = p->next;
    CHECK(p != NULL && strcmp(p->def_text, "") == 0);
    CHECK(p->next == NULL && params.tail == p);

    CHECK(rt_param_find(&params, "ut_size") != NULL);
    CHECK(rt_param_find(&params, "ut_size")->value.sz == 4096);
    CHECK(rt_param_find(&params, "nope") == NULL);
    CHECK(rt_param_find(&params, NULL) == NULL);

    rt_params_fini(&params);
    CHECK(params.head == NULL);
    rt_params_fini(&params); /* twice is safe */
}

static void test_env(void)
{
    rt_log_t log;
    rt_params_t params;
    long long i = 0;
    size_t sz = 0;
    bool b = true;
    const char *s = NULL;
    const rt_param_t *p;

    rt_log_init(&log);
    rt_params_init(&params, &log);
    setenv("FERRY_UT_INT", "0x7", 1);
    setenv("FERRY_UT_SIZE", "64k", 1);
    setenv("FERRY_UT_BOOL", "off", 1);
    setenv("FERRY_UT_STR", "from env", 1);
    setenv("FERRY_UT_EMPTYSTR", "", 1);

    CHECK(rt_param_register_int(&params, "ut_int", 1, 0, 100, "h", &i) == FERRY_OK);
    CHECK(i == 7);
    p = rt_param_find(&params, "ut_int");
    CHECK(p->from_env && strcmp(p->value_text, "7") == 0 && strcmp(p->def_text, "1") == 0);

    CHECK(rt_param_register_size(&params, "ut_size", 4096, 0, 0, "h", &sz) == FERRY_OK);
    CHECK(sz == 65536);
    p = rt_param_find(&params, "ut_size");
    CHECK(p->from_env && strcmp(p->value_text, "65536") == 0);

    CHECK(rt_param_register_bool(&params, "ut_bool", true, "h", &b) == FERRY_OK);
    CHECK(!b);
    p = rt_param_find(&params, "ut_bool");
    CHECK(p->from_env && strcmp(p->value_text, "false") == 0);

    CHECK(rt_param_register_string(&params, "ut_str", "dflt", "h", &s) == FERRY_OK);
    CHECK(strcmp(s, "from env") == 0);
    p = rt_param_find(&params, "ut_str");
    CHECK(p->from_env && strcmp(p->def_text, "dflt") == 0);

    /* An empty string is a value, not an absence. */
    CHECK(rt_param_register_string(&params, "ut_emptystr", "dflt", "h", &s) == FERRY_OK);
    CHECK(strcmp(s, "") == 0);

    /* Range bounds themselves are accepted. */
    setenv("FERRY_UT_EDGE", "-3", 1);
    CHECK(rt_param_register_int(&params, "ut_edge", 0, -3, 3, "h", &i) == FERRY_OK);
    CHECK(i == -3);
    setenv("FERRY_UT_SZEDGE", "1m", 1);
    CHECK(rt_param_register_size(&params, "ut_szedge", 1, 1, 1 << 20, "h", &sz) == FERRY_OK);
    CHECK(sz == 1 << 20);

    rt_params_fini(&params);
    unsetenv("FERRY_UT_INT");
    unsetenv("FERRY_UT_SIZE");
    unsetenv("FERRY_UT_BOOL");
    unsetenv("FERRY_UT_STR");
    unsetenv("FERRY_UT_EMPTYSTR");
    unsetenv("FERRY_UT_EDGE");
    unsetenv("FERRY_UT_SZEDGE");
}

typedef enum { KIND_INT, KIND_SIZE, KIND_BOOL } kind_t;

/* Registers name with FERRY_<NAME>=value and expects FERRY_ERR_INVALID, a
 * message naming the variable and containing want, an untouched output and
 * no record. */
static void expect_bad(kind_t kind, const char *name, const char *env, const char *value,
                       const char *want)
{
    rt_log_t log;
    rt_params_t params;
    capture_t cap;
    const char *msg;
    int rc = FERRY_OK;
    long long i = 1234;
    size_t sz = 1234;
    bool b = true;

    rt_log_init(&log);
    rt_params_init(&params, &log);
    setenv(env, value, 1);
    capture_begin(&cap);
    switch (kind) {
    case KIND_INT:
        rc = rt_param_register_int(&params, name, 5, 0, 100, "h", &i);
        break;
    case KIND_SIZE:
        rc = rt_param_register_size(&params, name, 5, 0, 1 << 20, "h", &sz);
        break;
    case KIND_BOOL:
        rc = rt_param_register_bool(&params, name, true, "h", &b);
        break;
    }
    msg = capture_end(&cap);
    CHECK(rc == FERRY_ERR_INVALID);
    CHECK(strstr(msg, env) != NULL);
    CHECK(strstr(msg, want) != NULL);
    CHECK(i == 1234 && sz == 1234 && b);
    CHECK(rt_param_find(&params, name) == NULL);
    rt_params_fini(&params);
    unsetenv(env);
}

static void test_bad_values(void)
{
    expect_bad(KIND_SIZE, "sm_eager_limit", "FERRY_SM_EAGER_LIMIT", "abc",
               "FERRY_SM_EAGER_LIMIT='abc' is not a size (expected a number with optional k, "
               "m or g suffix)");
    expect_bad(KIND_SIZE, "ut_size", "FERRY_UT_SIZE", "-1", "is not a size");
    expect_bad(KIND_SIZE, "ut_size", "FERRY_UT_SIZE", "4k2", "is not a size");
    expect_bad(KIND_SIZE, "ut_size", "FERRY_UT_SIZE", "", "is not a size");
    expect_bad(KIND_SIZE, "ut_size", "FERRY_UT_SIZE", "99999999999999999999",
               "is not a size");
    expect_bad(KIND_SIZE, "ut_size", "FERRY_UT_SIZE", "2m",
               "FERRY_UT_SIZE='2m' is out of range [0, 1048576]");
    expect_bad(KIND_INT, "ut_int", "FERRY_UT_INT", "12abc", "is not an integer");
    expect_bad(KIND_INT, "ut_int", "FERRY_UT_INT", "1.5", "is not an integer");
    expect_bad(KIND_INT, "ut_int", "FERRY_UT_INT", "101",
               "FERRY_UT_INT='101' is out of range [0, 100]");
    expect_bad(KIND_INT, "ut_int", "FERRY_UT_INT", "-1", "is out of range [0, 100]");
    expect_bad(KIND_BOOL, "ut_bool", "FERRY_UT_BOOL", "maybe",
               "FERRY_UT_BOOL='maybe' is not a boolean");
    /* Unprintable bytes are not echoed raw; a long value is cut. */
    expect_bad(KIND_INT, "ut_int", "FERRY_UT_INT", "1\x1b[2J", "'1?[2J'");
    expect_bad(KIND_INT, "ut_int", "FERRY_UT_INT",
               "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
               "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
               "...' is not an integer");
}

static void test_names(void)
{
    static const char *const bad[] = {"",        "Upper",      "has-dash", "has space",
                                      "dot.ted", "\xc3\xa9", "a\n"};
    rt_params_t params;
    capture_t cap;
    const char *msg;
    long long i = 77;
    size_t sz = 77;
    bool b = true;
    const char *s = "untouched";

    rt_params_init(&params, NULL);
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        capture_begin(&cap);
        CHECK(rt_param_register_int(&params, bad[k], 0, 0, 1, "h", &i) == FERRY_ERR_INVALID);
        CHECK(rt_param_register_size(&params, bad[k], 0, 0, 1, "h", &sz) == FERRY_ERR_INVALID);
        CHECK(rt_param_register_bool(&params, bad[k], false, "h", &b) == FERRY_ERR_INVALID);
        CHECK(rt_param_register_string(&params, bad[k], "x", "h", &s) == FERRY_ERR_INVALID);
        msg = capture_end(&cap);
        CHECK(strstr(msg, "name") != NULL);
    }
    CHECK(rt_param_register_int(&params, NULL, 0, 0, 1, "h", &i) == FERRY_ERR_INVALID);
    CHECK(i == 77 && sz == 77 && b && strcmp(s, "untouched") == 0);
    CHECK(params.head == NULL);

    /* Digits and underscores are fine anywhere. */
    unsetenv("FERRY_9_A_B_");
    CHECK(rt_param_register_int(&params, "9_a_b_", 1, 0, 1, "h", &i) == FERRY_OK);
    CHECK(strcmp(rt_param_find(&params, "9_a_b_")->env, "FERRY_9_A_B_") == 0);
    rt_params_fini(&params);
}

static void test_duplicates(void)
{
    rt_params_t params;
    capture_t cap;
    long long i = 0;
    size_t sz = 0;
    bool b = false;
    const char *s = NULL;
    const char *s2 = NULL;
    size_t n = 0;

    rt_params_init(&params, NULL);
    unsetenv("FERRY_UT_DUP");
    unsetenv("FERRY_UT_DUPS");
    CHECK(rt_param_register_int(&params, "ut_dup", 3, 0, 10, "h", &i) == FERRY_OK);
    CHECK(i == 3);
    /* The environment changing in between does not matter: the first
     * registration's value stands. */
    setenv("FERRY_UT_DUP", "9", 1);
    i = 0;
    CHECK(rt_param_register_int(&params, "ut_dup", 3, 0, 10, "h", &i) == FERRY_OK);
    CHECK(i == 3);
    unsetenv("FERRY_UT_DUP");

    /* A different default is not an error either; the first one wins. */
    capture_begin(&cap);
    CHECK(rt_param_register_int(&params, "ut_dup", 4, 0, 10, "h", &i) == FERRY_OK);
    capture_end(&cap);
    CHECK(i == 3);

    /* The same name with another type is an error. */
    capture_begin(&cap);
    CHECK(rt_param_register_size(&params, "ut_dup", 3, 0, 10, "h", &sz) == FERRY_ERR_INVALID);
    CHECK(rt_param_register_bool(&params, "ut_dup", true, "h", &b) == FERRY_ERR_INVALID);
    CHECK(strstr(capture_end(&cap), "ut_dup") != NULL);
    CHECK(sz == 0 && !b);

    CHECK(rt_param_register_string(&params, "ut_dups", "a", "h", &s) == FERRY_OK);
    CHECK(rt_param_register_string(&params, "ut_dups", "a", "h", &s2) == FERRY_OK);
    CHECK(s == s2);

    /* One record per name. */
    for (const rt_param_t *p = params.head; p != NULL; p = p->next)
        n++;
    CHECK(n == 2);
    rt_params_fini(&params);
}

static void test_bad_declarations(void)
{
    rt_params_t params;
    capture_t cap;
    long long i = 0;
    size_t sz = 0;

    rt_params_init(&params, NULL);
    unsetenv("FERRY_UT_DECL");
    capture_begin(&cap);
    /* A default outside its own range, or an empty range, is a bug in the
     * caller, refused rather than silently clamped. */
    CHECK(rt_param_register_int(&params, "ut_decl", 11, 0, 10, "h", &i) == FERRY_ERR_INVALID);
    CHECK(rt_param_register_int(&params, "ut_decl", 0, 5, 1, "h", &i) == FERRY_ERR_INVALID);
    CHECK(rt_param_register_size(&params, "ut_decl", 0, 1, 10, "h", &sz) == FERRY_ERR_INVALID);
    capture_end(&cap);
    CHECK(params.head == NULL);

    /* SIZE with max 0 has no upper bound. */
    setenv("FERRY_UT_DECL", "1g", 1);
    CHECK(rt_param_register_size(&params, "ut_decl", 0, 0, 0, "h", &sz) == FERRY_OK);
    CHECK(sz == (size_t)1 << 30);
    unsetenv("FERRY_UT_DECL");
    rt_params_fini(&params);
}

static void test_edit_distance(void)
{
    CHECK(rt_params_edit_distance("kitten", 6, "sitting", 5) == 3);
    CHECK(rt_params_edit_distance("kitten", 6, "sitting", 2) == 3); /* limit + 1 */
    CHECK(rt_params_edit_distance("SM_RINGSIZE", 11, "SM_RING_SIZE", 3) == 1);
    CHECK(rt_params_edit_distance("SM_RIGN_SIZE", 12, "SM_RING_SIZE", 3) == 1); /* a swap */
    CHECK(rt_params_edit_distance("sm_ring_size", 12, "SM_RING_SIZE", 3) == 0);
    CHECK(rt_params_edit_distance("", 0, "BTL", 3) == 3);
    CHECK(rt_params_edit_distance("BTL", 3, "BTL", 0) == 0);
    /* Only the first a_len characters count. */
    CHECK(rt_params_edit_distance("BTL=self", 3, "BTL", 0) == 0);
    /* A name far longer than anything declared is not compared at all. */
    char longname[300];
    memset(longname, 'A', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    CHECK(rt_params_edit_distance(longname, strlen(longname), "A", 3) == 4);
}

/* Runs the check over env and returns what it logged. */
static const char *check_env(const rt_params_t *params, char *const *env, int expect_unknown,
                             capture_t *cap)
{
    capture_begin(cap);
    int n = rt_params_check_env(params, env, RT_LOG_WARN);
    const char *text = capture_end(cap);
    if (n != expect_unknown)
        fprintf(stderr, "check_env: %d unknown, expected %d; logged:\n%s", n, expect_unknown,
                text);
    CHECK(n == expect_unknown);
    return text;
}

static int count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what))
        n++;
    return n;
}

static void test_unknown_env(void)
{
    rt_params_t params;
    rt_log_t log;
    capture_t cap;
    size_t sz;
    const char *str;

    rt_log_init(&log);
    rt_params_init(&params, &log);
    CHECK(rt_param_register_size(&params, "sm_ring_size", 4096, 0, 0, "h", &sz) == FERRY_OK);
    CHECK(rt_param_register_size(&params, "sm_eager_limit", 4096, 0, 0, "h", &sz) == FERRY_OK);
    CHECK(rt_param_register_string(&params, "btl", "", "h", &str) == FERRY_OK);

    /* The right names, a launcher's variable and variables that are not
     * ferry's (FERRYRUN_ is ferryrun's own prefix) say nothing. */
    char *good[] = {"FERRY_SM_RING_SIZE=65536", "FERRY_BTL=self,sm", "FERRY_JOB_ID=ferry-1-2",
                    "FERRYRUN_PMI_ADDR=x", "PATH=/bin", "FERRY=1", "FERRY_", "ferry_btl=x",
                    NULL};
    CHECK(strcmp(check_env(&params, good, 0, &cap), "") == 0);
    CHECK(rt_params_env_known(&params, "FERRY_SM_RING_SIZE"));
    CHECK(rt_params_env_known(&params, "FERRY_JOB_ID"));
    CHECK(!rt_params_env_known(&params, "FERRY_SM_RINGSIZE"));
    CHECK(!rt_params_env_known(&params, NULL));

    /* A misspelt one: warned about once, with the name meant. */
    char *typo[] = {"FERRY_SM_RINGSIZE=65536", "FERRY_SM_RING_SIZE=1", "FERRY_SM_RINGSIZE=2",
                    NULL};
    const char *text = check_env(&params, typo, 1, &cap);
    CHECK(strstr(text, "FERRY_SM_RINGSIZE is set but is not a ferry parameter; did you mean "
                       "FERRY_SM_RING_SIZE?") != NULL);
    CHECK(count(text, "FERRY_SM_RINGSIZE") == 1);

    /* Case, a swap, an extra letter, a variable with no '='. */
    char *near[] = {"FERRY_sm_ring_size=1", "FERRY_SM_EAGRE_LIMIT=1", "FERRY_BTLS=self",
                    "FERRY_BTLX", NULL};
    text = check_env(&params, near, 4, &cap);
    CHECK(strstr(text, "FERRY_sm_ring_size is set but is not a ferry parameter; did you mean "
                       "FERRY_SM_RING_SIZE?") != NULL);
    CHECK(strstr(text, "did you mean FERRY_SM_EAGER_LIMIT?") != NULL);
    CHECK(count(text, "did you mean FERRY_BTL?") == 2);

    /* Nothing near: warned about without a guess. */
    char *far[] = {"FERRY_COMPLETELY_DIFFERENT=1", "FERRY_Q=1", NULL};
    text = check_env(&params, far, 2, &cap);
    CHECK(count(text, "is not a ferry parameter (ferry_info -a lists them)") == 2);
    CHECK(strstr(text, "did you mean") == NULL);

    /* A hostile name: cut short and made printable in the message. */
    char hostile[400] = "FERRY_";
    memset(hostile + 6, 'X', 300);
    hostile[20] = '\033';
    strcpy(hostile + 306, "=1");
    char *bad[] = {hostile, NULL};
    text = check_env(&params, bad, 1, &cap);
    CHECK(strchr(text, '\033') == NULL);
    CHECK(strstr(text, "...") != NULL && strlen(text) < 300);

    /* Below the warning threshold nothing is printed, but it still counts. */
    capture_begin(&cap);
    CHECK(rt_params_check_env(&params, typo, RT_LOG_DEBUG) == 1);
    CHECK(strcmp(capture_end(&cap), "") == 0);
    CHECK(rt_params_check_env(&params, NULL, RT_LOG_WARN) == 0);
    rt_params_fini(&params);
}

/* A part whose parameters are not declared (its module is not loaded):
 * exactly its FERRY_<PART>_* variables are left alone. */
static void test_unchecked_prefix(void)
{
    rt_params_t params;
    rt_log_t log;
    capture_t cap;
    size_t sz;

    rt_log_init(&log);
    rt_params_init(&params, &log);
    CHECK(rt_param_register_size(&params, "sm_ring_size", 4096, 0, 0, "h", &sz) == FERRY_OK);
    char *env[] = {"FERRY_OFI_PROVIDER=shm", "FERRY_OFI_TX_SLOTS=8", NULL};
    check_env(&params, env, 2, &cap);

    CHECK(rt_params_skip_prefix(&params, "ofi") == FERRY_OK);
    CHECK(rt_params_skip_prefix(&params, "ofi") == FERRY_OK); /* twice: once */
    CHECK(params.unchecked != NULL && params.unchecked->next == NULL);
    CHECK(strcmp(check_env(&params, env, 0, &cap), "") == 0);

    /* Only that prefix: a longer part's name, the prefix alone, the bare
     * part name and another part's variables are still looked at. */
    char *others[] = {"FERRY_OFIX_A=1", "FERRY_OFI_=1", "FERRY_OFI=1", "FERRY_SM_RINGSIZE=1",
                      "FERRY_PMIX_X=1", NULL};
    const char *text = check_env(&params, others, 5, &cap);
    CHECK(strstr(text, "did you mean FERRY_SM_RING_SIZE?") != NULL);

    /* Names that are no part's are refused, as for parameters. */
    CHECK(rt_params_skip_prefix(&params, "") == FERRY_ERR_INVALID);
    CHECK(rt_params_skip_prefix(&params, NULL) == FERRY_ERR_INVALID);
    CHECK(rt_params_skip_prefix(&params, "OFI") == FERRY_ERR_INVALID);
    CHECK(rt_params_skip_prefix(&params, "o-fi") == FERRY_ERR_INVALID);
    CHECK(rt_params_skip_prefix(&params, "pmix") == FERRY_OK);
    char *pmix[] = {"FERRY_PMIX_X=1", NULL};
    check_env(&params, pmix, 0, &cap);
    rt_params_fini(&params);
    CHECK(params.unchecked == NULL);
}

int main(void)
{
    rt_params_t zero;

    memset(&zero, 0, sizeof(zero));
    rt_params_fini(&zero); /* safe on a zeroed registry */

    test_parse_int();
    test_parse_size();
    test_parse_bool();
    test_defaults();
    test_env();
    test_bad_values();
    test_names();
    test_duplicates();
    test_bad_declarations();
    test_edit_distance();
    test_unknown_env();
    test_unchecked_prefix();
    return 0;
}
