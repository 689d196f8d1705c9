/*
 * A value a PMIx server returned, checked like any outside input before
 * ferry uses it (modex_pmix.c; the fuzz harness modex_values).
 */
#ifndef FERRY_RT_MODEX_PMIX_VALUE_H
#define FERRY_RT_MODEX_PMIX_VALUE_H

#include <stddef.h>

#include <pmix.h>

#include "rt/log.h"

/* Copies rank's value of key out of val into a new buffer (*val_out, of
 * *len_out bytes; a buffer even when empty): FERRY_ERR_PROTO, logged, unless
 * val is a byte object of at most RT_MODEX_VAL_MAX bytes. val stays the
 * caller's. */
int modex_pmix_value_take(const rt_log_t *log, int rank, const char *key, const pmix_value_t *val,
                          void **val_out, size_t *len_out);

#endif
