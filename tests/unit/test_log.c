/*
 * rt_log: level parsing, the threshold (including a NULL logger's errors and
 * warnings only), the line format, long messages, and rt_log_errno's message
 * and translated status.
 */
#include <errno.h>
#include <string.h>

#include <ferry/ferry.h>

#include "capture.h"
#include "check.h"
#include "rt/log.h"

int main(void)
{
    rt_log_t log;
    rt_log_level_t lvl;
    capture_t cap;
    const char *msg;
    char big[3000];

    rt_log_init(&log);
    CHECK(log.level == RT_LOG_WARN && log.rank == -1);

    CHECK(rt_log_parse_level("error", &lvl) == FERRY_OK && lvl == RT_LOG_ERROR);
    CHECK(rt_log_parse_level("warn", &lvl) == FERRY_OK && lvl == RT_LOG_WARN);
    CHECK(rt_log_parse_level("info", &lvl) == FERRY_OK && lvl == RT_LOG_INFO);
    CHECK(rt_log_parse_level("DEBUG", &lvl) == FERRY_OK && lvl == RT_LOG_DEBUG);
    CHECK(rt_log_parse_level("trace", &lvl) == FERRY_OK && lvl == RT_LOG_TRACE);
    CHECK(rt_log_parse_level("0", &lvl) == FERRY_OK && lvl == RT_LOG_ERROR);
    CHECK(rt_log_parse_level("4", &lvl) == FERRY_OK && lvl == RT_LOG_TRACE);
    lvl = RT_LOG_INFO;
    CHECK(rt_log_parse_level("5", &lvl) == FERRY_ERR_INVALID);
    CHECK(rt_log_parse_level("", &lvl) == FERRY_ERR_INVALID);
    CHECK(rt_log_parse_level("11", &lvl) == FERRY_ERR_INVALID);
    CHECK(rt_log_parse_level("verbose", &lvl) == FERRY_ERR_INVALID);
    CHECK(rt_log_parse_level(NULL, &lvl) == FERRY_ERR_INVALID);
    CHECK(lvl == RT_LOG_INFO);

    /* Below the threshold nothing is written; at it, one line. */
    capture_begin(&cap);
    rt_log(&log, RT_LOG_INFO, "hidden %d", 1);
    rt_log(&log, RT_LOG_WARN, "shown %d", 2);
    msg = capture_end(&cap);
    CHECK(strstr(msg, "hidden") == NULL);
    CHECK(strcmp(msg, "ferry warn: shown 2\n") == 0);

    log.rank = 3;
    log.level = RT_LOG_TRACE;
    capture_begin(&cap);
    rt_log(&log, RT_LOG_TRACE, "t");
    rt_log(&log, RT_LOG_ERROR, "e%s", "!");
    msg = capture_end(&cap);
    CHECK(strcmp(msg, "ferry[3] trace: t\nferry[3] error: e!\n") == 0);

    /* A NULL logger prints errors and warnings only. */
    capture_begin(&cap);
    rt_log(NULL, RT_LOG_INFO, "no");
    rt_log(NULL, RT_LOG_ERROR, "yes");
    msg = capture_end(&cap);
    CHECK(strcmp(msg, "ferry error: yes\n") == 0);

    /* A message longer than the line buffer is cut, marked, and still ends
     * with exactly one newline. */
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    capture_begin(&cap);
    rt_log(&log, RT_LOG_ERROR, "%s", big);
    msg = capture_end(&cap);
    CHECK(strncmp(msg, "ferry[3] error: xxx", 19) == 0);
    CHECK(strlen(msg) < sizeof(big));
    CHECK(strstr(msg, "...\n") != NULL);
    CHECK(strchr(msg, '\n') == msg + strlen(msg) - 1);

    capture_begin(&cap);
    CHECK(rt_log_errno(&log, "connect to peer 2", ECONNREFUSED) == FERRY_ERR_UNREACH);
    CHECK(rt_log_errno(&log, "mmap", ENOMEM) == FERRY_ERR_NO_MEMORY);
    msg = capture_end(&cap);
    CHECK(strstr(msg, "ferry[3] error: connect to peer 2: ") != NULL);
    CHECK(strstr(msg, strerror(ECONNREFUSED)) != NULL);
    CHECK(strstr(msg, "mmap: ") != NULL);
    return 0;
}
