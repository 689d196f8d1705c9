/*
 * Logging with levels. The threshold lives in an rt_log_t owned by the
 * context (FERRY_LOG_LEVEL); a NULL logger prints errors and warnings only.
 * Lines go to stderr as "ferry[RANK] LEVEL: message", or to the logger's
 * sink when it has one (a host's log, include/ferry/host.h).
 */
#ifndef RT_LOG_H
#define RT_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum {
    RT_LOG_ERROR = 0,
    RT_LOG_WARN = 1,
    RT_LOG_INFO = 2,
    RT_LOG_DEBUG = 3,
    RT_LOG_TRACE = 4
} rt_log_level_t;

/* Where a logger's lines go instead of stderr: each line whole, without its
 * newline, once it has passed the threshold. */
typedef void (*rt_log_sink_t)(void *arg, rt_log_level_t level, const char *line);

typedef struct rt_log {
    rt_log_level_t level;
    int rank;           /* -1 until known */
    rt_log_sink_t sink; /* NULL: stderr */
    void *sink_arg;
} rt_log_t;

void rt_log_init(rt_log_t *log);

/* Parses "error", "warn", "info", "debug", "trace" or a digit 0-4. Returns
 * FERRY_OK or FERRY_ERR_INVALID. */
int rt_log_parse_level(const char *text, rt_log_level_t *level_out);

static inline int rt_log_enabled(const rt_log_t *log, rt_log_level_t level)
{
    return level <= (log != NULL ? log->level : RT_LOG_WARN);
}

void rt_log(const rt_log_t *log, rt_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void rt_vlog(const rt_log_t *log, rt_log_level_t level, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* ---- Rate limiting -------------------------------------------------------
 * Messages caused from outside (a stranger knocking, a peer sending junk)
 * must not flood the log: 1 MB of junk would otherwise print tens of
 * thousands of lines. A limiter lets `burst` messages through per
 * `interval_ms`; the others are counted, and the next message let through
 * says how many were held back, as does the final count a caller takes
 * with rt_ratelimit_take when it is done (at close or exit).
 *
 * A limiter is not locked: each belongs to one object whose owner
 * serializes its use (a context's progress, ferryrun's one thread). */
typedef struct rt_ratelimit {
    unsigned burst;          /* messages let through per interval */
    long long interval_ms;
    long long start_ms;      /* when the current interval began; 0: none yet */
    unsigned used;           /* messages let through in it */
    unsigned long held;      /* messages held back since the last one let through */
} rt_ratelimit_t;

/* The defaults for messages about refused peers and bad input. */
#define RT_RATELIMIT_BURST 5
#define RT_RATELIMIT_INTERVAL_MS 10000

void rt_ratelimit_init(rt_ratelimit_t *rl, unsigned burst, long long interval_ms);

/* Whether a message may be printed at now_ms (any monotonic clock in ms).
 * True sets *held_out to the number held back before it (0 mostly), which
 * the message should mention; false counts this one as held back. */
bool rt_ratelimit_allow(rt_ratelimit_t *rl, long long now_ms, unsigned long *held_out);

/* The number of messages held back and not yet mentioned; resets it. */
unsigned long rt_ratelimit_take(rt_ratelimit_t *rl);

/* rt_log through a limiter, on CLOCK_MONOTONIC. A message let through after
 * others were held back ends with "(N similar messages suppressed)". */
void rt_log_limited(const rt_log_t *log, rt_ratelimit_t *rl, rt_log_level_t level,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Translates an errno value to a ferry status. */
int rt_status_from_errno(int err);

/* Logs "what: strerror(err)" at error level and returns the translated status:
 * the one helper for a failed native call. */
int rt_log_errno(const rt_log_t *log, const char *what, int err);

#endif /* RT_LOG_H */
