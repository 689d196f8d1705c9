/*
 * Captures what a piece of code writes to stderr, so tests can assert that an
 * error message names what it should. Self-contained; uses CHECK from check.h.
 *
 *     capture_t cap;
 *     capture_begin(&cap);
 *     ... code that writes to stderr ...
 *     const char *text = capture_end(&cap); // valid until the next capture_end
 */
#ifndef FERRY_TESTS_CAPTURE_H
#define FERRY_TESTS_CAPTURE_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

typedef struct capture {
    FILE *tmp;
    int saved_fd;
    char text[8192];
} capture_t;

static inline void capture_begin(capture_t *cap)
{
    fflush(stderr);
    cap->tmp = tmpfile();
    CHECK(cap->tmp != NULL);
    cap->saved_fd = dup(STDERR_FILENO);
    CHECK(cap->saved_fd >= 0);
    CHECK(dup2(fileno(cap->tmp), STDERR_FILENO) == STDERR_FILENO);
}

static inline const char *capture_end(capture_t *cap)
{
    size_t n;

    fflush(stderr);
    CHECK(dup2(cap->saved_fd, STDERR_FILENO) == STDERR_FILENO);
    close(cap->saved_fd);
    rewind(cap->tmp);
    n = fread(cap->text, 1, sizeof(cap->text) - 1, cap->tmp);
    cap->text[n] = '\0';
    fclose(cap->tmp);
    /* Echo what was captured so a failing test's log shows it. */
    fputs(cap->text, stderr);
    return cap->text;
}

#endif /* FERRY_TESTS_CAPTURE_H */
