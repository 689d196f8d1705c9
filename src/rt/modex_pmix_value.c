/*
 * Checks a value from the PMIx server (modex_pmix_value.h). Kept apart from
 * modex_pmix.c, which talks to the server, so that a fuzz harness can feed
 * it any value without one.
 */
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "rt/modex_impl.h"
#include "rt/modex_pmix_value.h"

int modex_pmix_value_take(const rt_log_t *log, int rank, const char *key, const pmix_value_t *val,
                          void **val_out, size_t *len_out)
{
    if (val == NULL || val->type != PMIX_BYTE_OBJECT) {
        rt_log(log, RT_LOG_ERROR,
               "modex: rank %d's value of %s from the PMIx server is not a byte object", rank,
               key);
        return FERRY_ERR_PROTO;
    }
    size_t len = val->data.bo.size;
    if (len > RT_MODEX_VAL_MAX || (len > 0 && val->data.bo.bytes == NULL)) {
        rt_log(log, RT_LOG_ERROR,
               "modex: rank %d's value of %s from the PMIx server is malformed (%zu bytes)",
               rank, key, len);
        return FERRY_ERR_PROTO;
    }
    void *copy = malloc(len > 0 ? len : 1);
    if (copy == NULL)
        return FERRY_ERR_NO_MEMORY;
    if (len > 0)
        memcpy(copy, val->data.bo.bytes, len);
    *val_out = copy;
    *len_out = len;
    return FERRY_OK;
}
