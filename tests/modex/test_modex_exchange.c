/*
 * Every rank of a job puts values of many sizes (empty, small, several times
 * a PMI value's length, under a key long enough to be hashed), commits,
 * fences and reads every other rank's back; then a second round replaces
 * some. Run under ferryrun, under mpiexec.hydra (PMI_FD and PMI_PORT), and
 * alone (singleton). argv[1], when given, is the job size expected.
 *
 * With argv[2] "abort", rank 1 instead aborts the job with code 9 while the
 * others wait at a fence; the launcher must end the job with that code.
 *
 * Under a launcher that gives a job secret (ferryrun: FERRY_JOB_SECRET),
 * every rank checks that rt_modex_init took it (rt_modex_job_secret) and
 * wiped it from the environment, /proc/self/environ included.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "../unit/check.h"
#include "rt/auth.h"
#include "rt/log.h"
#include "rt/modex.h"

/* Names and sizes of the values each rank puts. 5000 bytes encode to more
 * than six times hydra's 1024-character values. */
static const char *const keys[] = {
    "empty", "one", "small", "medium", "large",
    "a-key-of-sixty-three-characters.with_every_allowed_kind.0123456",
};
static const size_t sizes[] = {0, 1, 17, 1000, 5000, 300};
#define N_KEYS (sizeof(keys) / sizeof(keys[0]))

static unsigned char pattern(int rank, size_t key, int round, size_t i)
{
    return (unsigned char)(i * 131 + (i >> 8) + (size_t)rank * 17 + key * 7 + (size_t)round * 3);
}

static size_t value_len(int rank, size_t key)
{
    /* Sizes differ a little between ranks, so a value read from the wrong
     * rank fails on its length too. */
    return sizes[key] == 0 ? 0 : sizes[key] + (size_t)rank;
}

static void put_all(rt_modex_t *mx, int round)
{
    int me = rt_modex_rank(mx);
    for (size_t k = 0; k < N_KEYS; k++) {
        size_t len = value_len(me, k);
        unsigned char *buf = malloc(len + 1);
        CHECK(buf != NULL);
        for (size_t i = 0; i < len; i++) {
            buf[i] = pattern(me, k, round, i);
        }
        CHECK(rt_modex_put(mx, keys[k], buf, len) == FERRY_OK);
        free(buf);
    }
    const char *id = rt_modex_job_id(mx);
    CHECK(rt_modex_put(mx, "job", id, strlen(id)) == FERRY_OK);
    CHECK(rt_modex_commit(mx) == FERRY_OK);
    CHECK(rt_modex_fence(mx) == FERRY_OK);
}

static void check_all(rt_modex_t *mx, int round)
{
    int size = rt_modex_size(mx);
    const char *id = rt_modex_job_id(mx);
    for (int r = 0; r < size; r++) {
        for (size_t k = 0; k < N_KEYS; k++) {
            void *val = NULL;
            size_t len = 0;
            int rc = rt_modex_get(mx, r, keys[k], &val, &len);
            if (rc != FERRY_OK) {
                fprintf(stderr, "rank %d: get(%d, %s) = %s\n", rt_modex_rank(mx), r, keys[k],
                        ferry_strerror(rc));
            }
            CHECK(rc == FERRY_OK);
            CHECK(len == value_len(r, k));
            for (size_t i = 0; i < len; i++) {
                CHECK(((unsigned char *)val)[i] == pattern(r, k, round, i));
            }
            free(val);
        }
        void *val = NULL;
        size_t len = 0;
        CHECK(rt_modex_get(mx, r, "job", &val, &len) == FERRY_OK);
        CHECK(len == strlen(id) && memcmp(val, id, len) == 0);
        free(val);
        CHECK(rt_modex_get(mx, r, "never-put", &val, &len) == FERRY_ERR_NOT_FOUND);
    }
    void *val = NULL;
    size_t len = 0;
    CHECK(rt_modex_get(mx, size, "small", &val, &len) == FERRY_ERR_INVALID);
    CHECK(rt_modex_get(mx, -1, "small", &val, &len) == FERRY_ERR_INVALID);
}

/* Whether this process's original environment block still holds text. */
static bool environ_block_holds(const char *text)
{
    FILE *f = fopen("/proc/self/environ", "r");
    CHECK(f != NULL);
    static char block[1 << 20];
    size_t n = fread(block, 1, sizeof(block) - 1, f);
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        if (block[i] == '\0') {
            block[i] = '\n';
        }
    }
    block[n] = '\0';
    return strstr(block, text) != NULL;
}

/* The secret, as the launcher gave it, must be taken and wiped. */
static void check_secret_taken(const rt_modex_t *mx, const char *given)
{
    uint8_t want[RT_AUTH_KEY_LEN], got[RT_AUTH_KEY_LEN];
    if (given[0] == '\0') {
        CHECK(rt_modex_job_secret(mx, got) == FERRY_ERR_NOT_FOUND);
        return;
    }
    CHECK(rt_auth_hex_decode(given, want, sizeof(want)) == FERRY_OK);
    CHECK(rt_modex_job_secret(mx, got) == FERRY_OK);
    CHECK(memcmp(want, got, sizeof(want)) == 0);
    CHECK(getenv(RT_AUTH_SECRET_ENV) == NULL);
    CHECK(!environ_block_holds(given));
}

int main(int argc, char **argv)
{
    rt_log_t log;
    rt_log_init(&log);
    rt_modex_t *mx = NULL;
    const char *secret_env = getenv(RT_AUTH_SECRET_ENV);
    char given[RT_AUTH_HEX_LEN + 1] = "";
    if (secret_env != NULL) {
        snprintf(given, sizeof(given), "%s", secret_env);
        CHECK(environ_block_holds(given));
    }
    int rc = rt_modex_init(&log, &mx);
    if (rc != FERRY_OK) {
        fprintf(stderr, "rt_modex_init: %s\n", ferry_strerror(rc));
    }
    CHECK(rc == FERRY_OK);
    check_secret_taken(mx, given);
    int me = rt_modex_rank(mx);
    log.rank = me;
    if (argc > 1) {
        CHECK(rt_modex_size(mx) == atoi(argv[1]));
    }
    CHECK(me >= 0 && me < rt_modex_size(mx));
    const char *job_env = getenv("FERRY_JOB_ID");
    if (job_env != NULL && strcmp(rt_modex_backend(mx), "pmi1") == 0) {
        /* Under ferryrun the kvs name is the job id. */
        CHECK(strcmp(job_env, rt_modex_job_id(mx)) == 0);
    }
    for (const char *c = rt_modex_job_id(mx); *c != '\0'; c++) {
        CHECK(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-", *c) !=
              NULL);
    }

    if (argc > 2 && strcmp(argv[2], "abort") == 0) {
        if (me == 1) {
            rt_modex_abort(mx, 9, "the exchange test aborts on purpose");
            fprintf(stderr, "rank 1: rt_modex_abort returned\n");
            return 1;
        }
        /* Never completes: the launcher kills this rank. */
        rt_modex_fence(mx);
        return 1;
    }

    put_all(mx, 0);
    check_all(mx, 0);
    /* Round two replaces every value; the fence keeps a slow reader of
     * round one from seeing round two. */
    CHECK(rt_modex_fence(mx) == FERRY_OK);
    put_all(mx, 1);
    check_all(mx, 1);

    printf("rank %d of %d (%s, job %s): ok\n", me, rt_modex_size(mx), rt_modex_backend(mx),
           rt_modex_job_id(mx));
    rt_modex_fini(mx);
    return 0;
}
