/*
 * Levelled logging to stderr. Each line is formatted into one buffer and
 * written with a single call, so lines from several processes sharing a
 * terminal or a launcher's pipe do not interleave mid-line.
 */

#include "rt/log.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <ferry/ferry.h>

/* Long enough for any message ferry writes; longer ones are cut and marked. */
#define LOG_LINE_MAX 1024

static const char *const level_names[] = {
    [RT_LOG_ERROR] = "error",
    [RT_LOG_WARN] = "warn",
    [RT_LOG_INFO] = "info",
    [RT_LOG_DEBUG] = "debug",
    [RT_LOG_TRACE] = "trace",
};

void rt_log_init(rt_log_t *log)
{
    log->level = RT_LOG_WARN;
    log->rank = -1;
}

int rt_log_parse_level(const char *text, rt_log_level_t *level_out)
{
    if (text == NULL)
        return FERRY_ERR_INVALID;
    if (text[0] >= '0' && text[0] <= '4' && text[1] == '\0') {
        *level_out = (rt_log_level_t)(text[0] - '0');
        return FERRY_OK;
    }
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (strcasecmp(text, level_names[i]) == 0) {
            *level_out = (rt_log_level_t)i;
            return FERRY_OK;
        }
    }
    return FERRY_ERR_INVALID;
}

void rt_vlog(const rt_log_t *log, rt_log_level_t level, const char *fmt, va_list ap)
{
    char line[LOG_LINE_MAX];
    int head;
    int body;
    size_t used;
    const char *lname;

    if (!rt_log_enabled(log, level))
        return;
    lname = (unsigned)level < sizeof(level_names) / sizeof(level_names[0]) ? level_names[level]
                                                                            : "log";
    if (log != NULL && log->rank >= 0)
        head = snprintf(line, sizeof(line), "ferry[%d] %s: ", log->rank, lname);
    else
        head = snprintf(line, sizeof(line), "ferry %s: ", lname);
    if (head < 0)
        return;
    used = (size_t)head < sizeof(line) ? (size_t)head : sizeof(line) - 1;

    body = vsnprintf(line + used, sizeof(line) - used, fmt, ap);
    if (body < 0)
        return;
    used += (size_t)body;
    /* Leave room for the newline; mark a message that did not fit. */
    if (used > sizeof(line) - 2) {
        static const char cut[] = "...";
        used = sizeof(line) - 2;
        memcpy(line + used - (sizeof(cut) - 1), cut, sizeof(cut) - 1);
    }
    line[used++] = '\n';
    line[used] = '\0';
    fputs(line, stderr);
}

void rt_log(const rt_log_t *log, rt_log_level_t level, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    rt_vlog(log, level, fmt, ap);
    va_end(ap);
}

int rt_log_errno(const rt_log_t *log, const char *what, int err)
{
    char buf[256];
    /* The GNU strerror_r (selected by _GNU_SOURCE) is thread-safe and returns
     * the message, which may or may not be buf. */
    const char *msg = strerror_r(err, buf, sizeof(buf));

    rt_log(log, RT_LOG_ERROR, "%s: %s (errno %d)", what, msg, err);
    return rt_status_from_errno(err);
}
