/*
 * ferry_strerror names every status distinctly, never returns NULL and says
 * "unknown status" for anything else; rt_status_from_errno maps errno values
 * as documented.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include <ferry/ferry.h>

#include "check.h"
#include "rt/log.h"

int main(void)
{
    const char *names[-FERRY_ERR_LAST];

    for (int code = FERRY_OK; code > FERRY_ERR_LAST; code--) {
        const char *s = ferry_strerror(code);
        CHECK(s != NULL);
        CHECK(s[0] != '\0');
        CHECK(strcmp(s, "unknown status") != 0);
        for (int prev = FERRY_OK; prev > code; prev--)
            CHECK(strcmp(names[-prev], s) != 0);
        names[-code] = s;
    }

    static const int unknown[] = {FERRY_ERR_LAST, FERRY_ERR_LAST - 1, 1, 2, 100, -1000,
                                  INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        const char *s = ferry_strerror(unknown[i]);
        CHECK(s != NULL);
        CHECK(strcmp(s, "unknown status") == 0);
    }

    CHECK(rt_status_from_errno(ENOMEM) == FERRY_ERR_NO_MEMORY);
    CHECK(rt_status_from_errno(EAGAIN) == FERRY_ERR_NO_RESOURCE);
    CHECK(rt_status_from_errno(EWOULDBLOCK) == FERRY_ERR_NO_RESOURCE);
    CHECK(rt_status_from_errno(ENOBUFS) == FERRY_ERR_NO_RESOURCE);
    CHECK(rt_status_from_errno(EINVAL) == FERRY_ERR_INVALID);
    CHECK(rt_status_from_errno(ENOENT) == FERRY_ERR_NOT_FOUND);
    CHECK(rt_status_from_errno(ETIMEDOUT) == FERRY_ERR_TIMEOUT);
    CHECK(rt_status_from_errno(ECONNREFUSED) == FERRY_ERR_UNREACH);
    CHECK(rt_status_from_errno(ECONNRESET) == FERRY_ERR_UNREACH);
    CHECK(rt_status_from_errno(EPIPE) == FERRY_ERR_UNREACH);
    CHECK(rt_status_from_errno(EHOSTUNREACH) == FERRY_ERR_UNREACH);
    CHECK(rt_status_from_errno(ENETUNREACH) == FERRY_ERR_UNREACH);
    CHECK(rt_status_from_errno(EACCES) == FERRY_ERR_ACCESS);
    CHECK(rt_status_from_errno(EPERM) == FERRY_ERR_ACCESS);
    CHECK(rt_status_from_errno(EFAULT) == FERRY_ERR_ACCESS);
    CHECK(rt_status_from_errno(ENOSYS) == FERRY_ERR_NOT_SUPPORTED);
    CHECK(rt_status_from_errno(EOPNOTSUPP) == FERRY_ERR_NOT_SUPPORTED);
    CHECK(rt_status_from_errno(EIO) == FERRY_ERR_IO);
    CHECK(rt_status_from_errno(EBADF) == FERRY_ERR_IO);
    /* A failure without errno must not read as success. */
    CHECK(rt_status_from_errno(0) == FERRY_ERR_IO);
    CHECK(rt_status_from_errno(-1) == FERRY_ERR_IO);
    return 0;
}
