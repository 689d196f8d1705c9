/*
 * The pmix modex backend (modex_pmix.c), built when libpmix is found
 * (FERRY_HAVE_PMIX). Its init has the contract of the other backends' in
 * modex_impl.h.
 */
#ifndef RT_MODEX_PMIX_H
#define RT_MODEX_PMIX_H

#include "rt/modex_impl.h"

int rt_modex_pmix_init(rt_modex_t *mx);

#endif /* RT_MODEX_PMIX_H */
