/*
 * Parameter registry. Each registration reads FERRY_<NAME> from the
 * environment, parses it strictly (the whole text must parse, overflow is an
 * error, ranges are checked) and records the value and its default as text so
 * ferry_info can list them.
 */
#include "rt/params.h"

#include <inttypes.h>
#include <limits.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <ferry/ferry.h>

/* Enough for any formatted integer, size or boolean. */
#define PARAM_NUM_TEXT 32
/* How much of a bad environment value is echoed in an error message. */
#define PARAM_ECHO_MAX 64

/* ---- Parsers -------------------------------------------------------------- */

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Parses an unsigned decimal or 0x-hexadecimal number at *pp, advancing *pp
 * past it. Fails on no digits or on overflow of uint64_t. */
static int parse_u64(const char **pp, uint64_t *out)
{
    const char *p = *pp;
    unsigned base = 10;
    uint64_t v = 0;
    const char *digits;

    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        base = 16;
        p += 2;
    }
    digits = p;
    for (;; p++) {
        int d = hex_digit(*p);
        if (d < 0 || (unsigned)d >= base)
            break;
        if (v > (UINT64_MAX - (unsigned)d) / base)
            return FERRY_ERR_INVALID;
        v = v * base + (unsigned)d;
    }
    if (p == digits)
        return FERRY_ERR_INVALID;
    *pp = p;
    *out = v;
    return FERRY_OK;
}

int rt_param_parse_int(const char *text, long long *out)
{
    const char *p = text;
    bool neg = false;
    uint64_t mag;

    if (text == NULL)
        return FERRY_ERR_INVALID;
    if (*p == '-' || *p == '+') {
        neg = *p == '-';
        p++;
    }
    if (parse_u64(&p, &mag) != FERRY_OK || *p != '\0')
        return FERRY_ERR_INVALID;
    if (neg) {
        if (mag > (uint64_t)LLONG_MAX + 1)
            return FERRY_ERR_INVALID;
        /* Negate in unsigned arithmetic so LLONG_MIN does not overflow. */
        *out = mag == (uint64_t)LLONG_MAX + 1 ? LLONG_MIN : -(long long)mag;
    } else {
        if (mag > (uint64_t)LLONG_MAX)
            return FERRY_ERR_INVALID;
        *out = (long long)mag;
    }
    return FERRY_OK;
}

int rt_param_parse_size(const char *text, size_t *out)
{
    const char *p = text;
    uint64_t v;
    unsigned shift = 0;

    /* No sign is accepted: a negative size is refused rather than wrapped. */
    if (text == NULL || parse_u64(&p, &v) != FERRY_OK)
        return FERRY_ERR_INVALID;
    switch (*p) {
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    default:
        break;
    }
    if (shift != 0) {
        p++;
        /* "64k", "64kb" and "64KiB" all mean 65536. */
        if (*p == 'i' || *p == 'I') {
            p++;
            if (*p != 'b' && *p != 'B')
                return FERRY_ERR_INVALID;
        }
        if (*p == 'b' || *p == 'B')
            p++;
    }
    if (*p != '\0')
        return FERRY_ERR_INVALID;
    if (v > (UINT64_MAX >> shift))
        return FERRY_ERR_INVALID;
    v <<= shift;
    if (v > SIZE_MAX)
        return FERRY_ERR_INVALID;
    *out = (size_t)v;
    return FERRY_OK;
}

int rt_param_parse_bool(const char *text, bool *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};

    if (text == NULL)
        return FERRY_ERR_INVALID;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *out = true;
            return FERRY_OK;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *out = false;
            return FERRY_OK;
        }
    }
    return FERRY_ERR_INVALID;
}

/* ---- Registry ------------------------------------------------------------- */

void rt_params_init(rt_params_t *params, const rt_log_t *log)
{
    params->head = NULL;
    params->tail = NULL;
    params->unchecked = NULL;
    params->log = log;
    params->source = NULL;
    params->source_arg = NULL;
}

static void param_free(rt_param_t *p)
{
    free(p->name);
    free(p->env);
    free(p->help);
    free(p->def_text);
    free(p->value_text);
    free(p);
}

void rt_params_fini(rt_params_t *params)
{
    rt_param_t *p = params->head;

    while (p != NULL) {
        rt_param_t *next = p->next;
        param_free(p);
        p = next;
    }
    params->head = NULL;
    params->tail = NULL;
    rt_params_prefix_t *u = params->unchecked;
    while (u != NULL) {
        rt_params_prefix_t *next = u->next;
        free(u->prefix);
        free(u);
        u = next;
    }
    params->unchecked = NULL;
}

const rt_param_t *rt_param_find(const rt_params_t *params, const char *name)
{
    if (name == NULL)
        return NULL;
    for (const rt_param_t *p = params->head; p != NULL; p = p->next) {
        if (strcmp(p->name, name) == 0)
            return p;
    }
    return NULL;
}

static bool name_valid(const char *name)
{
    if (name == NULL || *name == '\0')
        return false;
    for (const char *c = name; *c != '\0'; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
            return false;
    }
    return true;
}

/* Copies text for an error message: at most PARAM_ECHO_MAX characters, with
 * anything unprintable replaced, since environment values are untrusted. */
static void echo_value(const char *text, char *buf, size_t size)
{
    size_t n = 0;

    for (; n < PARAM_ECHO_MAX && n + 4 < size && text[n] != '\0'; n++)
        buf[n] = (text[n] >= 0x20 && text[n] < 0x7f) ? text[n] : '?';
    if (text[n] != '\0' && n + 4 <= size) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
}

static const char *type_name(rt_param_type_t type)
{
    switch (type) {
    case RT_PARAM_INT:
        return "integer";
    case RT_PARAM_SIZE:
        return "size";
    case RT_PARAM_BOOL:
        return "boolean";
    case RT_PARAM_STRING:
        return "string";
    }
    return "?";
}

/*
 * Common first half of every registration. Returns FERRY_OK with *existing_out
 * set when the name is already registered (with the same type), FERRY_OK with
 * *param_out set to a new unlinked parameter holding name, env and help, or an
 * error.
 */
static int param_begin(rt_params_t *params, const char *name, rt_param_type_t type,
                       const char *help, const rt_param_t **existing_out,
                       rt_param_t **param_out)
{
    const rt_param_t *old;
    rt_param_t *p;

    *existing_out = NULL;
    *param_out = NULL;
    if (!name_valid(name)) {
        char echo[PARAM_ECHO_MAX + 8];
        echo_value(name != NULL ? name : "(null)", echo, sizeof(echo));
        rt_log(params->log, RT_LOG_ERROR, "parameter name '%s' is invalid (expected [a-z0-9_]+)",
               echo);
        return FERRY_ERR_INVALID;
    }
    old = rt_param_find(params, name);
    if (old != NULL) {
        if (old->type != type) {
            rt_log(params->log, RT_LOG_ERROR,
                   "parameter '%s' registered as a %s and again as a %s", name,
                   type_name(old->type), type_name(type));
            return FERRY_ERR_INVALID;
        }
        *existing_out = old;
        return FERRY_OK;
    }

    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return FERRY_ERR_NO_MEMORY;
    p->type = type;
    p->name = strdup(name);
    p->help = strdup(help != NULL ? help : "");
    p->env = malloc(strlen("FERRY_") + strlen(name) + 1);
    if (p->name == NULL || p->help == NULL || p->env == NULL) {
        param_free(p);
        return FERRY_ERR_NO_MEMORY;
    }
    strcpy(p->env, "FERRY_");
    for (size_t i = 0; name[i] != '\0'; i++) {
        char c = name[i];
        p->env[6 + i] = (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c;
    }
    p->env[6 + strlen(name)] = '\0';
    *param_out = p;
    return FERRY_OK;
}

/* Stores the textual forms and links the parameter at the tail. Frees it on
 * failure. */
static int param_finish(rt_params_t *params, rt_param_t *p, const char *def_text,
                        const char *value_text)
{
    p->def_text = strdup(def_text);
    p->value_text = strdup(value_text);
    if (p->def_text == NULL || p->value_text == NULL) {
        param_free(p);
        return FERRY_ERR_NO_MEMORY;
    }
    if (params->tail != NULL)
        params->tail->next = p;
    else
        params->head = p;
    params->tail = p;
    return FERRY_OK;
}

/* The text given for p: the registry's source's, else the environment's;
 * NULL when neither gives one. *origin_out names where it came from, for
 * messages. */
static const char *param_given(const rt_params_t *params, const rt_param_t *p,
                               const char **origin_out)
{
    *origin_out = p->env;
    if (params->source != NULL) {
        const char *origin = NULL;
        const char *text = params->source(params->source_arg, p->name, &origin);
        if (text != NULL) {
            if (origin != NULL)
                *origin_out = origin;
            return text;
        }
    }
    return getenv(p->env);
}

static int param_bad_value(rt_params_t *params, const char *origin, const char *text,
                           const char *expected)
{
    char echo[PARAM_ECHO_MAX + 8];

    echo_value(text, echo, sizeof(echo));
    rt_log(params->log, RT_LOG_ERROR, "%s='%s' is not %s", origin, echo, expected);
    return FERRY_ERR_INVALID;
}

/* Warns when a second registration disagrees with the first: harmless, but a
 * sign that two components document one tunable differently. */
static void param_check_same_default(rt_params_t *params, const rt_param_t *old,
                                     const char *def_text)
{
    if (strcmp(old->def_text, def_text) != 0)
        rt_log(params->log, RT_LOG_WARN,
               "parameter '%s' registered again with default '%s' (first: '%s'); "
               "keeping the first",
               old->name, def_text, old->def_text);
}

int rt_param_register_int(rt_params_t *params, const char *name, long long def, long long min,
                          long long max, const char *help, long long *value_out)
{
    const rt_param_t *old;
    rt_param_t *p;
    const char *env;
    const char *origin;
    long long v = def;
    char def_text[PARAM_NUM_TEXT];
    char val_text[PARAM_NUM_TEXT];
    int rc;

    rc = param_begin(params, name, RT_PARAM_INT, help, &old, &p);
    if (rc != FERRY_OK)
        return rc;
    snprintf(def_text, sizeof(def_text), "%lld", def);
    if (old != NULL) {
        param_check_same_default(params, old, def_text);
        if (value_out != NULL)
            *value_out = old->value.i;
        return FERRY_OK;
    }
    if (min > max || def < min || def > max) {
        rt_log(params->log, RT_LOG_ERROR,
               "parameter '%s': default %lld or range [%lld, %lld] is inconsistent", name, def,
               min, max);
        param_free(p);
        return FERRY_ERR_INVALID;
    }
    env = param_given(params, p, &origin);
    if (env != NULL) {
        if (rt_param_parse_int(env, &v) != FERRY_OK) {
            rc = param_bad_value(params, origin, env,
                                 "an integer (expected a decimal or 0x hexadecimal number)");
            param_free(p);
            return rc;
        }
        if (v < min || v > max) {
            char echo[PARAM_ECHO_MAX + 8];
            echo_value(env, echo, sizeof(echo));
            rt_log(params->log, RT_LOG_ERROR, "%s='%s' is out of range [%lld, %lld]", origin,
                   echo, min, max);
            param_free(p);
            return FERRY_ERR_INVALID;
        }
        p->from_env = true;
    }
    p->value.i = v;
    p->min = min;
    p->max = max;
    snprintf(val_text, sizeof(val_text), "%lld", v);
    rc = param_finish(params, p, def_text, val_text);
    if (rc != FERRY_OK)
        return rc;
    if (value_out != NULL)
        *value_out = v;
    return FERRY_OK;
}

int rt_param_register_size(rt_params_t *params, const char *name, size_t def, size_t min,
                           size_t max, const char *help, size_t *value_out)
{
    const rt_param_t *old;
    rt_param_t *p;
    const char *env;
    const char *origin;
    size_t v = def;
    /* A max of 0 means no upper bound, as the header's min/max fields say. */
    size_t hi = max != 0 ? max : SIZE_MAX;
    char def_text[PARAM_NUM_TEXT];
    char val_text[PARAM_NUM_TEXT];
    int rc;

    rc = param_begin(params, name, RT_PARAM_SIZE, help, &old, &p);
    if (rc != FERRY_OK)
        return rc;
    snprintf(def_text, sizeof(def_text), "%zu", def);
    if (old != NULL) {
        param_check_same_default(params, old, def_text);
        if (value_out != NULL)
            *value_out = old->value.sz;
        return FERRY_OK;
    }
    if (min > hi || def < min || def > hi) {
        rt_log(params->log, RT_LOG_ERROR,
               "parameter '%s': default %zu or range [%zu, %zu] is inconsistent", name, def, min,
               hi);
        param_free(p);
        return FERRY_ERR_INVALID;
    }
    env = param_given(params, p, &origin);
    if (env != NULL) {
        if (rt_param_parse_size(env, &v) != FERRY_OK) {
            rc = param_bad_value(params, origin, env,
                                 "a size (expected a number with optional k, m or g suffix)");
            param_free(p);
            return rc;
        }
        if (v < min || v > hi) {
            char echo[PARAM_ECHO_MAX + 8];
            echo_value(env, echo, sizeof(echo));
            rt_log(params->log, RT_LOG_ERROR, "%s='%s' is out of range [%zu, %zu]", origin, echo,
                   min, hi);
            param_free(p);
            return FERRY_ERR_INVALID;
        }
        p->from_env = true;
    }
    p->value.sz = v;
    /* The record keeps the range as long long; a bound beyond that is shown
     * as unbounded (max 0). */
    p->min = min <= (size_t)LLONG_MAX ? (long long)min : LLONG_MAX;
    p->max = hi <= (size_t)LLONG_MAX ? (long long)hi : 0;
    snprintf(val_text, sizeof(val_text), "%zu", v);
    rc = param_finish(params, p, def_text, val_text);
    if (rc != FERRY_OK)
        return rc;
    if (value_out != NULL)
        *value_out = v;
    return FERRY_OK;
}

int rt_param_register_bool(rt_params_t *params, const char *name, bool def, const char *help,
                           bool *value_out)
{
    const rt_param_t *old;
    rt_param_t *p;
    const char *env;
    const char *origin;
    bool v = def;
    int rc;

    rc = param_begin(params, name, RT_PARAM_BOOL, help, &old, &p);
    if (rc != FERRY_OK)
        return rc;
    if (old != NULL) {
        param_check_same_default(params, old, def ? "true" : "false");
        if (value_out != NULL)
            *value_out = old->value.b;
        return FERRY_OK;
    }
    env = param_given(params, p, &origin);
    if (env != NULL) {
        if (rt_param_parse_bool(env, &v) != FERRY_OK) {
            rc = param_bad_value(params, origin, env,
                                 "a boolean (expected 1/0, true/false, yes/no or on/off)");
            param_free(p);
            return rc;
        }
        p->from_env = true;
    }
    p->value.b = v;
    p->min = 0;
    p->max = 1;
    rc = param_finish(params, p, def ? "true" : "false", v ? "true" : "false");
    if (rc != FERRY_OK)
        return rc;
    if (value_out != NULL)
        *value_out = v;
    return FERRY_OK;
}

int rt_param_register_string(rt_params_t *params, const char *name, const char *def,
                             const char *help, const char **value_out)
{
    const rt_param_t *old;
    rt_param_t *p;
    const char *env;
    const char *origin;
    const char *v;
    int rc;

    if (def == NULL)
        def = "";
    rc = param_begin(params, name, RT_PARAM_STRING, help, &old, &p);
    if (rc != FERRY_OK)
        return rc;
    if (old != NULL) {
        param_check_same_default(params, old, def);
        if (value_out != NULL)
            *value_out = old->value_text;
        return FERRY_OK;
    }
    env = param_given(params, p, &origin);
    v = env != NULL ? env : def;
    p->from_env = env != NULL;
    rc = param_finish(params, p, def, v);
    if (rc != FERRY_OK)
        return rc;
    if (value_out != NULL)
        *value_out = params->tail->value_text;
    return FERRY_OK;
}

/* ---- Unknown variables in the environment ---------------------------------- */

/* FERRY_* variables that are not parameters. Everything ferry's library
 * reads is a parameter (registered, so ferry_info -a lists it); these are
 * set by ferry's launcher for the ranks or read by ferry's own tools, and
 * must not be reported as misspellings. tests/unit/check_env_names.cmake
 * fails when ferryrun sets, or the code reads, a FERRY_* variable that is
 * neither a parameter nor listed here. */
static const rt_env_var_t other_vars[] = {
    {"FERRY_JOB_ID", "set by ferryrun for each rank: the job's id (also its PMI kvs name)"},
    {"FERRY_JOB_SECRET", "set by ferryrun for each rank: the job's secret, which a remote rank "
                         "proves to the PMI port; read and wiped by the launcher interface"},
    {"FERRY_BENCH_BIND", "read by ferry-bench: 0 leaves its ranks unpinned, 1 (the default) "
                         "pins each to a CPU (see ferry-bench(1))"},
    {"FERRY_BENCH_TCP_FLOOR_ADDR", "read by ferry-bench: the IPv4 address of rank 1 that its "
                                   "tcp floors listen on (default 127.0.0.1; two hosts: "
                                   "rank 1's address on the link measured)"},
    {"FERRY_BENCH_FAULT", "read by ferry-bench, for its tests: amo-sum, notify-count or "
                          "notify-data makes an error on purpose that the final checks of "
                          "amo-rate and put-notify-bw must report (see ferry-bench(1))"},
    {NULL, NULL},
};

const rt_env_var_t *rt_params_other_vars(void)
{
    return other_vars;
}

/* The variable's name: what precedes the first '=' (or all of it). */
static size_t env_name_len(const char *entry)
{
    const char *eq = strchr(entry, '=');
    return eq != NULL ? (size_t)(eq - entry) : strlen(entry);
}

static bool name_is(const char *name, size_t len, const char *known)
{
    return strlen(known) == len && memcmp(name, known, len) == 0;
}

static bool env_known_n(const rt_params_t *params, const char *name, size_t len)
{
    for (const rt_param_t *p = params->head; p != NULL; p = p->next)
        if (name_is(name, len, p->env))
            return true;
    for (const rt_env_var_t *v = other_vars; v->name != NULL; v++)
        if (name_is(name, len, v->name))
            return true;
    return false;
}

bool rt_params_env_known(const rt_params_t *params, const char *name)
{
    return name != NULL && env_known_n(params, name, strlen(name));
}

/* Longest name compared: nothing ferry declares comes close, and it bounds
 * the work an absurd variable name can cause. */
#define ENV_NAME_CMP_MAX 128

size_t rt_params_edit_distance(const char *a, size_t a_len, const char *b, size_t limit)
{
    /* Optimal string alignment over three rows of the usual table. */
    size_t b_len = strlen(b);
    size_t rows[3][ENV_NAME_CMP_MAX + 1];
    if (a_len > ENV_NAME_CMP_MAX || b_len > ENV_NAME_CMP_MAX)
        return limit + 1;
    if ((a_len > b_len ? a_len - b_len : b_len - a_len) > limit)
        return limit + 1;
    size_t *prev2 = rows[0], *prev = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= b_len; j++)
        prev[j] = j;
    for (size_t i = 1; i <= a_len; i++) {
        size_t best = cur[0] = i;
        char ca = (char)toupper((unsigned char)a[i - 1]);
        for (size_t j = 1; j <= b_len; j++) {
            char cb = (char)toupper((unsigned char)b[j - 1]);
            size_t d = prev[j - 1] + (ca != cb);
            if (prev[j] + 1 < d)
                d = prev[j] + 1;
            if (cur[j - 1] + 1 < d)
                d = cur[j - 1] + 1;
            if (i > 1 && j > 1 && ca == toupper((unsigned char)b[j - 2]) &&
                toupper((unsigned char)a[i - 2]) == cb && prev2[j - 2] + 1 < d)
                d = prev2[j - 2] + 1;
            cur[j] = d;
            if (d < best)
                best = d;
        }
        if (best > limit)
            return limit + 1;
        size_t *t = prev2;
        prev2 = prev;
        prev = cur;
        cur = t;
    }
    return prev[b_len] <= limit ? prev[b_len] : limit + 1;
}

/* Keeps the nearer of the best so far and known. */
static void consider(const char *name, size_t len, const char *known, size_t limit,
                     const char **best, size_t *best_d)
{
    size_t d = rt_params_edit_distance(name, len, known, limit);
    if (d <= limit && d < *best_d) {
        *best = known;
        *best_d = d;
    }
}

/* The known name nearest to name, when it is near enough to be what was
 * meant: within a third of the name's length (at least 1, at most 3) after
 * "FERRY_", letters compared ignoring case. NULL when none is. */
static const char *env_nearest(const rt_params_t *params, const char *name, size_t len)
{
    size_t tail = len - strlen("FERRY_");
    size_t limit = tail / 3;
    if (limit < 1)
        limit = 1;
    if (limit > 3)
        limit = 3;
    const char *best = NULL;
    size_t best_d = limit + 1;
    for (const rt_param_t *p = params->head; p != NULL; p = p->next)
        consider(name, len, p->env, limit, &best, &best_d);
    for (const rt_env_var_t *v = other_vars; v->name != NULL; v++)
        consider(name, len, v->name, limit, &best, &best_d);
    return best;
}

int rt_params_skip_prefix(rt_params_t *params, const char *part)
{
    if (!name_valid(part))
        return FERRY_ERR_INVALID;
    size_t n = strlen("FERRY_") + strlen(part) + 1;
    char *prefix = malloc(n + 1);
    if (prefix == NULL)
        return FERRY_ERR_NO_MEMORY;
    strcpy(prefix, "FERRY_");
    for (size_t i = 0; part[i] != '\0'; i++)
        prefix[strlen("FERRY_") + i] = (char)toupper((unsigned char)part[i]);
    strcpy(prefix + n - 1, "_");
    for (const rt_params_prefix_t *u = params->unchecked; u != NULL; u = u->next) {
        if (strcmp(u->prefix, prefix) == 0) {
            free(prefix);
            return FERRY_OK;
        }
    }
    rt_params_prefix_t *u = malloc(sizeof(*u));
    if (u == NULL) {
        free(prefix);
        return FERRY_ERR_NO_MEMORY;
    }
    u->prefix = prefix;
    u->next = params->unchecked;
    params->unchecked = u;
    return FERRY_OK;
}

/* Is the variable one of a part whose parameters are not declared here? */
static bool env_unchecked(const rt_params_t *params, const char *name, size_t len)
{
    for (const rt_params_prefix_t *u = params->unchecked; u != NULL; u = u->next) {
        size_t n = strlen(u->prefix);
        if (len > n && memcmp(name, u->prefix, n) == 0)
            return true;
    }
    return false;
}

int rt_params_check_env(const rt_params_t *params, char *const *env, rt_log_level_t level)
{
    int unknown = 0;
    if (env == NULL)
        return 0;
    for (size_t i = 0; env[i] != NULL; i++) {
        const char *entry = env[i];
        size_t len = env_name_len(entry);
        if (len <= strlen("FERRY_") || strncmp(entry, "FERRY_", strlen("FERRY_")) != 0 ||
            env_known_n(params, entry, len) || env_unchecked(params, entry, len))
            continue;
        /* Once per variable, however many times the environment holds it. */
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++)
            seen = env_name_len(env[k]) == len && memcmp(env[k], entry, len) == 0;
        if (seen)
            continue;
        unknown++;
        char echo[PARAM_ECHO_MAX + 8];
        char name[PARAM_ECHO_MAX + 1];
        size_t n = len < PARAM_ECHO_MAX ? len : PARAM_ECHO_MAX;
        memcpy(name, entry, n);
        name[n] = '\0';
        echo_value(name, echo, sizeof(echo));
        if (n < len)
            strcat(echo, "...");
        const char *near = env_nearest(params, entry, len);
        if (near != NULL)
            rt_log(params->log, level,
                   "%s is set but is not a ferry parameter; did you mean %s? "
                   "(ferry_info -a lists them)",
                   echo, near);
        else
            rt_log(params->log, level,
                   "%s is set but is not a ferry parameter (ferry_info -a lists them)", echo);
    }
    return unknown;
}
