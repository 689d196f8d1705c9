/*
 * Parameters: every tunable has a name, a type, a default, one line of help
 * and an environment variable, FERRY_ followed by the name in upper case
 * ("sm_eager_limit" is FERRY_SM_EAGER_LIMIT). A registry belongs to a
 * context; nothing is global.
 *
 * A value from the environment that does not parse, or lies outside the
 * declared range, makes registration fail with FERRY_ERR_INVALID and a logged
 * message naming the variable, the value and what was expected.
 */
#ifndef RT_PARAMS_H
#define RT_PARAMS_H

#include <stdbool.h>
#include <stddef.h>

#include "rt/log.h"

typedef enum {
    RT_PARAM_INT,    /* long long, decimal or 0x hex */
    RT_PARAM_SIZE,   /* size_t, with optional k/K, m/M, g/G suffix (powers of 1024) */
    RT_PARAM_BOOL,   /* 1/0, true/false, yes/no, on/off */
    RT_PARAM_STRING  /* any text */
} rt_param_type_t;

typedef struct rt_param {
    char *name;       /* "sm_eager_limit" */
    char *env;        /* "FERRY_SM_EAGER_LIMIT" */
    char *help;
    rt_param_type_t type;
    char *def_text;   /* the default, as text */
    char *value_text; /* the current value, as text */
    bool from_env;    /* the value came from the environment */
    union {
        long long i;
        size_t sz;
        bool b;
    } value;
    long long min, max; /* range for INT; SIZE uses them as size_t when max > 0 */
    struct rt_param *next;
} rt_param_t;

/* A prefix of variables whose parameters this registry does not hold. */
typedef struct rt_params_prefix {
    char *prefix; /* "FERRY_OFI_" */
    struct rt_params_prefix *next;
} rt_params_prefix_t;

/* Values from somewhere other than the environment (a host's own settings,
 * include/ferry/host.h): the text given for the parameter name
 * ("sm_eager_limit"), or NULL to read FERRY_<NAME> from the environment.
 * *origin_out may name where the value came from, for messages (it must
 * live as long as the registry); left NULL, the variable's name is used. */
typedef const char *(*rt_param_source_t)(void *arg, const char *name, const char **origin_out);

typedef struct rt_params {
    rt_param_t *head; /* in registration order */
    rt_param_t *tail;
    rt_params_prefix_t *unchecked; /* see rt_params_skip_prefix */
    const rt_log_t *log;
    rt_param_source_t source; /* NULL: the environment only */
    void *source_arg;
} rt_params_t;

void rt_params_init(rt_params_t *params, const rt_log_t *log);
void rt_params_fini(rt_params_t *params);

/* Each sets *value_out to the source's value (rt_params_t.source), else the
 * environment's, else the default. A name
 * registered twice returns the first registration's value (the default and
 * help must then agree; it is not an error). Names are [a-z0-9_]+. */
int rt_param_register_int(rt_params_t *params, const char *name, long long def, long long min,
                          long long max, const char *help, long long *value_out);
int rt_param_register_size(rt_params_t *params, const char *name, size_t def, size_t min,
                           size_t max, const char *help, size_t *value_out);
int rt_param_register_bool(rt_params_t *params, const char *name, bool def, const char *help,
                           bool *value_out);
/* *value_out points into the registry and lives as long as it. def may be
 * NULL (shown as empty). */
int rt_param_register_string(rt_params_t *params, const char *name, const char *def,
                             const char *help, const char **value_out);

/* The registered parameter of that name, or NULL. */
const rt_param_t *rt_param_find(const rt_params_t *params, const char *name);

/* A FERRY_* variable ferry knows that is not a parameter: one a launcher sets
 * for its ranks, or one of ferry's own tools reads. */
typedef struct rt_env_var {
    const char *name; /* "FERRY_JOB_ID" */
    const char *what; /* who sets or reads it, for ferry_info -a */
} rt_env_var_t;

/* The known variables that are not parameters, ending with a NULL name. */
const rt_env_var_t *rt_params_other_vars(void);

/* True when name (a variable name such as "FERRY_BTL") is a registered
 * parameter's variable or one of rt_params_other_vars. */
bool rt_params_env_known(const rt_params_t *params, const char *name);

/* Says that the parameters of part (a transport or launcher backend, as
 * "ofi"), are not declared here: its module is not loaded, so its variables
 * FERRY_<PART>_* cannot be told from misspellings and rt_params_check_env
 * leaves them alone. part follows the rules of parameter names. */
int rt_params_skip_prefix(rt_params_t *params, const char *part);

/*
 * Looks at every FERRY_* variable in env (an environ-style array, NULL
 * terminated) and warns, at level (RT_LOG_WARN for the rank that speaks for
 * the job), about each one that is neither a registered parameter nor one
 * of rt_params_other_vars, nor of a part whose parameters are not declared
 * (rt_params_skip_prefix), naming the nearest known name by edit distance
 * when one is close ("FERRY_SM_RINGSIZE ... did you mean
 * FERRY_SM_RING_SIZE?"). A variable set twice is warned about once. Call it
 * after every parameter is registered. Returns how many were unknown.
 */
int rt_params_check_env(const rt_params_t *params, char *const *env, rt_log_level_t level);

/* The edit distance (insertions, deletions, substitutions and swaps of two
 * neighbours, letters compared ignoring case) between a and b, at most
 * limit + 1: the search stops once the distance exceeds limit. Exposed for
 * tests. */
size_t rt_params_edit_distance(const char *a, size_t a_len, const char *b, size_t limit);

/* Parsers, exposed for tests and tools. Return FERRY_OK or FERRY_ERR_INVALID. */
int rt_param_parse_int(const char *text, long long *out);
int rt_param_parse_size(const char *text, size_t *out);
int rt_param_parse_bool(const char *text, bool *out);

#endif /* RT_PARAMS_H */
