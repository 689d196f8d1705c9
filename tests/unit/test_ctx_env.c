/*
 * The check of FERRY_* variables as a context makes it: the launcher
 * interface's variables (FERRY_MODEX, FERRY_PMI_TIMEOUT) are declared
 * parameters, in a context that joins the job and in one that only inspects
 * (ferry_info's, which joins none), and a misspelling of one is still caught
 * in both.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "api/api.h"
#include "capture.h"
#include "check.h"

/* Creates and finalizes a context; returns what it logged. */
static const char *create(unsigned flags, capture_t *cap)
{
    ferry_ctx_t *ctx = NULL;

    capture_begin(cap);
    int rc = api_ctx_create(NULL, flags, &ctx);
    int frc = rc == FERRY_OK ? ferry_finalize(&ctx) : FERRY_OK;
    const char *text = capture_end(cap);
    CHECK(rc == FERRY_OK);
    CHECK(frc == FERRY_OK);
    return text;
}

int main(void)
{
    static const unsigned flags[] = {0, API_CTX_OPEN};
    capture_t cap;

    CHECK(setenv("FERRY_BTL", "self", 1) == 0);
    CHECK(setenv("FERRY_MODEX", "singleton", 1) == 0);
    CHECK(setenv("FERRY_PMI_TIMEOUT", "30", 1) == 0);
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        const char *text = create(flags[i], &cap);
        CHECK(strstr(text, "not a ferry parameter") == NULL);
    }
    printf("ok  FERRY_MODEX and FERRY_PMI_TIMEOUT are parameters\n");

    CHECK(setenv("FERRY_PMI_TIMEOT", "30", 1) == 0);
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        const char *text = create(flags[i], &cap);
        CHECK(strstr(text, "FERRY_PMI_TIMEOT is set but is not a ferry parameter; did you "
                           "mean FERRY_PMI_TIMEOUT?") != NULL);
    }
    printf("ok  a misspelling of one is warned about\n");
    return 0;
}
