/*
 * Logging with levels. The threshold lives in an rt_log_t owned by the
 * context (FERRY_LOG_LEVEL); a NULL logger prints errors and warnings only.
 * Lines go to stderr as "ferry[RANK] LEVEL: message".
 */
#ifndef RT_LOG_H
#define RT_LOG_H

#include <stdarg.h>
#include <stddef.h>

typedef enum {
    RT_LOG_ERROR = 0,
    RT_LOG_WARN = 1,
    RT_LOG_INFO = 2,
    RT_LOG_DEBUG = 3,
    RT_LOG_TRACE = 4
} rt_log_level_t;

typedef struct rt_log {
    rt_log_level_t level;
    int rank; /* -1 until known */
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

/* Translates an errno value to a ferry status. */
int rt_status_from_errno(int err);

/* Logs "what: strerror(err)" at error level and returns the translated status:
 * the one helper for a failed native call. */
int rt_log_errno(const rt_log_t *log, const char *what, int err);

#endif /* RT_LOG_H */
