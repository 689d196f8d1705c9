/*
 * The one assertion the tests share. CHECK(cond) prints the file, line and
 * expression of a failed condition and exits with status 1; it does nothing
 * else. Unlike assert() it is never compiled out by NDEBUG.
 */
#ifndef FERRY_TESTS_CHECK_H
#define FERRY_TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);      \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#endif /* FERRY_TESTS_CHECK_H */
