/*
 * The singleton modex: a process without a launcher is rank 0 of 1; puts
 * read back, fences return at once, and every bad argument is refused.
 * Also covers backend selection by FERRY_MODEX.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/ferry.h>

#include "../unit/check.h"
#include "rt/modex.h"

static void clear_launcher_env(void)
{
    unsetenv("FERRY_MODEX");
    unsetenv("PMI_FD");
    unsetenv("PMI_PORT");
    unsetenv("PMI_ID");
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
}

static void check_value(rt_modex_t *mx, int rank, const char *key, const void *want,
                        size_t want_len)
{
    void *val = NULL;
    size_t len = 12345;
    CHECK(rt_modex_get(mx, rank, key, &val, &len) == FERRY_OK);
    CHECK(val != NULL);
    CHECK(len == want_len);
    CHECK(want_len == 0 || memcmp(val, want, want_len) == 0);
    free(val);
}

static void test_basic(void)
{
    clear_launcher_env();
    rt_modex_t *mx = NULL;
    CHECK(rt_modex_init(NULL, &mx) == FERRY_OK);
    CHECK(mx != NULL);
    CHECK(strcmp(rt_modex_backend(mx), "singleton") == 0);
    CHECK(rt_modex_rank(mx) == 0);
    CHECK(rt_modex_size(mx) == 1);
    char want_id[64];
    snprintf(want_id, sizeof(want_id), "singleton-%ld", (long)getpid());
    CHECK(strcmp(rt_modex_job_id(mx), want_id) == 0);

    CHECK(rt_modex_put(mx, "addr", "hello", 5) == FERRY_OK);
    CHECK(rt_modex_put(mx, "empty", NULL, 0) == FERRY_OK);
    CHECK(rt_modex_commit(mx) == FERRY_OK);
    CHECK(rt_modex_fence(mx) == FERRY_OK);
    check_value(mx, 0, "addr", "hello", 5);
    check_value(mx, 0, "empty", "", 0);

    /* A later put overwrites. */
    CHECK(rt_modex_put(mx, "addr", "world!", 6) == FERRY_OK);
    CHECK(rt_modex_commit(mx) == FERRY_OK);
    check_value(mx, 0, "addr", "world!", 6);

    /* A large binary blob, every byte value included. */
    size_t big_len = (size_t)1 << 20;
    unsigned char *big = malloc(big_len);
    CHECK(big != NULL);
    for (size_t i = 0; i < big_len; i++) {
        big[i] = (unsigned char)(i * 131 + (i >> 8));
    }
    CHECK(rt_modex_put(mx, "big.blob-1_x", big, big_len) == FERRY_OK);
    CHECK(rt_modex_commit(mx) == FERRY_OK);
    CHECK(rt_modex_fence(mx) == FERRY_OK);
    check_value(mx, 0, "big.blob-1_x", big, big_len);
    free(big);

    /* Missing keys and bad arguments. */
    void *val = (void *)0x1;
    size_t len = 99;
    CHECK(rt_modex_get(mx, 0, "nothing", &val, &len) == FERRY_ERR_NOT_FOUND);
    CHECK(val == (void *)0x1 && len == 99);
    CHECK(rt_modex_get(mx, 1, "addr", &val, &len) == FERRY_ERR_INVALID);
    CHECK(rt_modex_get(mx, -1, "addr", &val, &len) == FERRY_ERR_INVALID);
    CHECK(rt_modex_get(mx, 0, "", &val, &len) == FERRY_ERR_INVALID);
    CHECK(rt_modex_get(mx, 0, "has space", &val, &len) == FERRY_ERR_INVALID);
    CHECK(rt_modex_get(mx, 0, NULL, &val, &len) == FERRY_ERR_INVALID);
    CHECK(rt_modex_get(mx, 0, "addr", NULL, &len) == FERRY_ERR_INVALID);
    CHECK(rt_modex_get(mx, 0, "addr", &val, NULL) == FERRY_ERR_INVALID);
    CHECK(val == (void *)0x1 && len == 99);

    char long_key[65];
    memset(long_key, 'k', 64);
    long_key[64] = '\0';
    CHECK(rt_modex_put(mx, long_key, "x", 1) == FERRY_ERR_INVALID);
    long_key[63] = '\0'; /* 63 characters is the longest allowed */
    CHECK(rt_modex_put(mx, long_key, "x", 1) == FERRY_OK);
    check_value(mx, 0, long_key, "x", 1);
    CHECK(rt_modex_put(mx, "", "x", 1) == FERRY_ERR_INVALID);
    CHECK(rt_modex_put(mx, "a=b", "x", 1) == FERRY_ERR_INVALID);
    CHECK(rt_modex_put(mx, "a b", "x", 1) == FERRY_ERR_INVALID);
    CHECK(rt_modex_put(mx, "caf\xc3\xa9", "x", 1) == FERRY_ERR_INVALID);
    CHECK(rt_modex_put(mx, NULL, "x", 1) == FERRY_ERR_INVALID);
    CHECK(rt_modex_put(mx, "k", NULL, 1) == FERRY_ERR_INVALID);
    /* The length is refused before the (tiny) buffer is read. */
    CHECK(rt_modex_put(mx, "k", "x", (size_t)1 << 30) == FERRY_ERR_INVALID);
    CHECK(rt_modex_put(NULL, "k", "x", 1) == FERRY_ERR_INVALID);
    CHECK(rt_modex_commit(NULL) == FERRY_ERR_INVALID);
    CHECK(rt_modex_fence(NULL) == FERRY_ERR_INVALID);

    rt_modex_fini(mx);
    rt_modex_fini(NULL);
}

static void test_selection(void)
{
    rt_modex_t *mx = NULL;

    /* FERRY_MODEX=singleton wins over a launcher's variables. */
    clear_launcher_env();
    setenv("PMI_FD", "999", 1);
    setenv("FERRY_MODEX", "singleton", 1);
    CHECK(rt_modex_init(NULL, &mx) == FERRY_OK);
    CHECK(strcmp(rt_modex_backend(mx), "singleton") == 0);
    rt_modex_fini(mx);
    mx = NULL;

    clear_launcher_env();
    setenv("FERRY_MODEX", "pmi2", 1);
    CHECK(rt_modex_init(NULL, &mx) == FERRY_ERR_INVALID);
    CHECK(mx == NULL);

    /* pmi1 forced with no launcher to talk to. */
    clear_launcher_env();
    setenv("FERRY_MODEX", "pmi1", 1);
    CHECK(rt_modex_init(NULL, &mx) == FERRY_ERR_LAUNCHER);
    CHECK(mx == NULL);

    CHECK(rt_modex_init(NULL, NULL) == FERRY_ERR_INVALID);
    clear_launcher_env();
}

static void test_abort(void)
{
    clear_launcher_env();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        rt_modex_t *mx = NULL;
        if (rt_modex_init(NULL, &mx) != FERRY_OK) {
            _exit(100);
        }
        rt_modex_abort(mx, 7, "testing abort");
        _exit(101); /* not reached when abort works */
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 7);
}

/* A label goes in front of whatever id the backend made; only labels that
 * cannot be mistaken for part of the id are valid. */
static void test_label(void)
{
    clear_launcher_env();
    rt_modex_t *mx = NULL;
    CHECK(rt_modex_init(NULL, &mx) == FERRY_OK);
    char want_id[96];
    snprintf(want_id, sizeof(want_id), "ct-12_ab.singleton-%ld", (long)getpid());
    rt_modex_label_job_id(mx, "");
    rt_modex_label_job_id(mx, NULL);
    CHECK(strncmp(rt_modex_job_id(mx), "singleton-", 10) == 0);
    rt_modex_label_job_id(mx, "ct-12_ab");
    CHECK(strcmp(rt_modex_job_id(mx), want_id) == 0);
    rt_modex_fini(mx);

    CHECK(rt_modex_label_valid("ct0123abcdef"));
    CHECK(rt_modex_label_valid("a"));
    CHECK(rt_modex_label_valid("A_b-9"));
    CHECK(rt_modex_label_valid("01234567890123456789012345678901")); /* 32 */
    CHECK(!rt_modex_label_valid("012345678901234567890123456789012")); /* 33 */
    CHECK(!rt_modex_label_valid(""));
    CHECK(!rt_modex_label_valid(NULL));
    CHECK(!rt_modex_label_valid("a.b"));   /* '.' ends a label */
    CHECK(!rt_modex_label_valid("a/b"));   /* would leave /dev/shm */
    CHECK(!rt_modex_label_valid("a b"));
    CHECK(!rt_modex_label_valid("a\nb"));
}

int main(void)
{
    alarm(60);
    test_basic();
    test_label();
    test_selection();
    test_abort();
    printf("test_modex_singleton: ok\n");
    return 0;
}
