/*
 * Status messages and names, generated from the one table of codes
 * (FERRY_STATUS_MAP in ferry.h), and the one translation from errno to
 * ferry status.
 */
#include <errno.h>

#include <ferry/ferry.h>

#include "rt/log.h"

/* Every code lies between FERRY_ERR_LAST and 0; with the switches below,
 * where two codes of one value would be a duplicate case, this makes the
 * codes exactly FERRY_ERR_LAST + 1 .. 0. */
#define STATUS_IN_RANGE(name, value, message)                                              \
    _Static_assert((value) <= 0 && (value) > FERRY_ERR_LAST,                               \
                   "FERRY_" #name " lies outside FERRY_ERR_LAST .. 0");
FERRY_STATUS_MAP(STATUS_IN_RANGE)
#undef STATUS_IN_RANGE

const char *ferry_strerror(int status)
{
    switch (status) {
#define STATUS_MESSAGE(name, value, message)                                               \
    case (value):                                                                          \
        return message;
        FERRY_STATUS_MAP(STATUS_MESSAGE)
#undef STATUS_MESSAGE
    default:
        return "unknown status";
    }
}

const char *ferry_status_name(int status)
{
    switch (status) {
#define STATUS_NAME(name, value, message)                                                  \
    case (value):                                                                          \
        return "FERRY_" #name;
        FERRY_STATUS_MAP(STATUS_NAME)
#undef STATUS_NAME
    default:
        return "FERRY_UNKNOWN";
    }
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
