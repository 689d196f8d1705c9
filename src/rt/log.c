/*
 * Levelled logging to stderr. Each line is formatted into one buffer and
 * written with a single call, so lines from several processes sharing a
 * terminal or a launcher's pipe do not interleave mid-line.
 */

#include "rt/log.h"
#include "rt/progress.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

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
    log->sink = NULL;
    log->sink_arg = NULL;
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
    if (log != NULL && log->sink != NULL) {
        line[used] = '\0';
        log->sink(log->sink_arg, level, line);
        return;
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

void rt_ratelimit_init(rt_ratelimit_t *rl, unsigned burst, long long interval_ms)
{
    rl->burst = burst > 0 ? burst : 1;
    rl->interval_ms = interval_ms > 0 ? interval_ms : 1;
    rl->start_ms = 0;
    rl->used = 0;
    rl->held = 0;
}

bool rt_ratelimit_allow(rt_ratelimit_t *rl, long long now_ms, unsigned long *held_out)
{
    /* A clock that went back (a caller mixing clocks) starts a new interval
     * rather than holding everything back until it catches up. */
    if (rl->used == 0 || now_ms - rl->start_ms >= rl->interval_ms || now_ms < rl->start_ms) {
        rl->start_ms = now_ms;
        rl->used = 0;
    }
    if (rl->used >= rl->burst) {
        if (rl->held < (unsigned long)-1) {
            rl->held++;
        }
        return false;
    }
    rl->used++;
    *held_out = rl->held;
    rl->held = 0;
    return true;
}

unsigned long rt_ratelimit_take(rt_ratelimit_t *rl)
{
    unsigned long held = rl->held;
    rl->held = 0;
    return held;
}

void rt_log_limited(const rt_log_t *log, rt_ratelimit_t *rl, rt_log_level_t level,
                    const char *fmt, ...)
{
    char msg[LOG_LINE_MAX];
    unsigned long held = 0;
    va_list ap;

    if (!rt_log_enabled(log, level))
        return;
    if (!rt_ratelimit_allow(rl, (long long)(rt_now_ns() / 1000000u), &held))
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (held > 0)
        rt_log(log, level, "%s (%lu similar messages suppressed)", msg, held);
    else
        rt_log(log, level, "%s", msg);
}
