/*
 * Status names and the one translation from errno to ferry status.
 */
#include <errno.h>

#include <ferry/ferry.h>

#include "rt/log.h"

/* Indexed by the negated status. */
static const char *const status_names[] = {
    [-FERRY_OK] = "success",
    [-FERRY_ERR] = "unspecified error",
    [-FERRY_ERR_NO_RESOURCE] = "temporarily out of resources",
    [-FERRY_ERR_INVALID] = "invalid argument or parameter",
    [-FERRY_ERR_NOT_SUPPORTED] = "operation not supported",
    [-FERRY_ERR_UNREACH] = "peer unreachable or failed",
    [-FERRY_ERR_NO_MEMORY] = "out of memory",
    [-FERRY_ERR_ACCESS] = "remote access denied",
    [-FERRY_ERR_TRUNCATE] = "data truncated",
    [-FERRY_ERR_TIMEOUT] = "timed out",
    [-FERRY_ERR_PROTO] = "protocol error: malformed data",
    [-FERRY_ERR_IO] = "operating-system call failed",
    [-FERRY_ERR_BUSY] = "object in use",
    [-FERRY_ERR_NOT_FOUND] = "not found",
    [-FERRY_ERR_CANCELED] = "canceled",
    [-FERRY_ERR_LAUNCHER] = "launcher (PMI) failed or absent",
};

/* A new code added to ferry.h without a name here fails the build. */
_Static_assert(sizeof(status_names) / sizeof(status_names[0]) == -FERRY_ERR_LAST,
               "every status code needs a name in status_names");

const char *ferry_strerror(int status)
{
    if (status > 0 || status <= FERRY_ERR_LAST)
        return "unknown status";
    return status_names[-status] != NULL ? status_names[-status] : "unknown status";
}

int rt_status_from_errno(int err)
{
    /* No case for 0: this is called on failure paths, and a failure whose
     * errno was not set must not turn into success. */
    switch (err) {
    case ENOMEM:
        return FERRY_ERR_NO_MEMORY;
    case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
    case ENOBUFS:
        return FERRY_ERR_NO_RESOURCE;
    case EINVAL:
        return FERRY_ERR_INVALID;
    case ENOENT:
        return FERRY_ERR_NOT_FOUND;
    case ETIMEDOUT:
        return FERRY_ERR_TIMEOUT;
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case EHOSTUNREACH:
    case ENETUNREACH:
        return FERRY_ERR_UNREACH;
    case EACCES:
    case EPERM:
    case EFAULT:
        return FERRY_ERR_ACCESS;
    case ENOSYS:
#if EOPNOTSUPP != ENOSYS
    case EOPNOTSUPP:
#endif
        return FERRY_ERR_NOT_SUPPORTED;
    default:
        return FERRY_ERR_IO;
    }
}
