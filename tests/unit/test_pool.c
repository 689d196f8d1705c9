/*
 * util_pool: initial, increment and max are honoured; get returns NULL at the
 * max and works again after a put; elem_init runs once per element and what
 * it set survives put and get; elements are aligned and do not overlap; bad
 * parameters are refused with a message; fini returns (and in debug builds
 * reports) the leak count.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "capture.h"
#include "check.h"
#include "util/pool.h"

#define MAGIC 0x5eedf00dcafe1234ull

typedef struct elem {
    unsigned long long magic; /* set by elem_init, must survive put/get */
    size_t id;
    char payload[40];
} elem_t;

static void elem_init(void *p, void *arg)
{
    size_t *count = arg;
    elem_t *e = p;

    e->magic = MAGIC;
    e->id = (*count)++;
}

static void count_init(void *p, void *arg)
{
    (void)p;
    (*(size_t *)arg)++;
}

static void test_growth(void)
{
    size_t inits = 0;
    util_pool_params_t pp = {
        .name = "growth",
        .elem_size = sizeof(elem_t),
        .initial = 4,
        .max = 10,
        .increment = 3,
        .elem_init = elem_init,
        .elem_init_arg = &inits,
    };
    util_pool_t pool;
    elem_t *got[10];
    bool seen[10] = {false};

    CHECK(util_pool_init(&pool, &pp) == FERRY_OK);
    CHECK(inits == 4);
    CHECK(pool.allocated == 4);
    CHECK(util_pool_in_use(&pool) == 0);

    /* The first four come from the initial allocation; the fifth grows by the
     * increment (3), the eighth by what is left to the max (3). */
    static const size_t allocated_after[10] = {4, 4, 4, 4, 7, 7, 7, 10, 10, 10};
    for (size_t i = 0; i < 10; i++) {
        got[i] = util_pool_get(&pool);
        CHECK(got[i] != NULL);
        CHECK(pool.allocated == allocated_after[i]);
        CHECK(inits == allocated_after[i]);
        CHECK(got[i]->magic == MAGIC);
        CHECK(got[i]->id < 10);
        CHECK(!seen[got[i]->id]); /* every element handed out once */
        seen[got[i]->id] = true;
        memset(got[i]->payload, (int)i, sizeof(got[i]->payload));
        CHECK(util_pool_in_use(&pool) == i + 1);
    }
    /* At the max: NULL, and nothing more was allocated. */
    CHECK(util_pool_get(&pool) == NULL);
    CHECK(util_pool_get(&pool) == NULL);
    CHECK(pool.allocated == 10);
    CHECK(inits == 10);

    /* Payloads did not overlap. */
    for (size_t i = 0; i < 10; i++) {
        for (size_t j = 0; j < sizeof(got[i]->payload); j++)
            CHECK(got[i]->payload[j] == (char)i);
    }

    /* A put makes a get succeed again, with that same element, and what
     * elem_init set is intact. */
    util_pool_put(&pool, got[6]);
    CHECK(util_pool_in_use(&pool) == 9);
    elem_t *again = util_pool_get(&pool);
    CHECK(again == got[6]);
    CHECK(again->magic == MAGIC);
    CHECK(util_pool_get(&pool) == NULL);

    /* Return everything, then cycle many times: no more elem_init calls and
     * the magic survives every round trip. */
    for (size_t i = 0; i < 10; i++)
        util_pool_put(&pool, got[i]);
    CHECK(util_pool_in_use(&pool) == 0);
    for (int round = 0; round < 100; round++) {
        elem_t *e[10];
        for (size_t i = 0; i < 10; i++) {
            e[i] = util_pool_get(&pool);
            CHECK(e[i] != NULL);
            CHECK(e[i]->magic == MAGIC);
        }
        CHECK(util_pool_get(&pool) == NULL);
        for (size_t i = 0; i < 10; i++)
            util_pool_put(&pool, e[(i + (size_t)round) % 10]);
    }
    CHECK(inits == 10);
    CHECK(util_pool_fini(&pool) == 0);
}

/* An increment that does not divide the room left: the last growth is cut
 * to the max. */
static void test_partial_growth(void)
{
    size_t inits = 0;
    util_pool_params_t pp = {
        .name = "partial",
        .elem_size = 8,
        .initial = 1,
        .max = 6,
        .increment = 4,
        .elem_init = count_init,
        .elem_init_arg = &inits,
    };
    util_pool_t pool;
    void *e[6];
    static const size_t allocated_after[6] = {1, 5, 5, 5, 5, 6};

    CHECK(util_pool_init(&pool, &pp) == FERRY_OK);
    for (size_t i = 0; i < 6; i++) {
        e[i] = util_pool_get(&pool);
        CHECK(e[i] != NULL);
        CHECK(pool.allocated == allocated_after[i]);
        CHECK(inits == allocated_after[i]);
    }
    CHECK(util_pool_get(&pool) == NULL);
    CHECK(pool.allocated == 6);
    for (size_t i = 0; i < 6; i++)
        util_pool_put(&pool, e[i]);
    CHECK(util_pool_fini(&pool) == 0);
}

static void test_unlimited(void)
{
    size_t inits = 0;
    util_pool_params_t pp = {
        .name = "unlimited",
        .elem_size = 8,
        .initial = 0,
        .max = 0,
        .increment = 7,
        .elem_init = count_init,
        .elem_init_arg = &inits,
    };
    util_pool_t pool;
    void **v = calloc(1000, sizeof(void *));

    CHECK(v != NULL);
    CHECK(util_pool_init(&pool, &pp) == FERRY_OK);
    CHECK(inits == 0);
    CHECK(pool.allocated == 0);
    for (size_t i = 0; i < 1000; i++) {
        v[i] = util_pool_get(&pool);
        CHECK(v[i] != NULL);
    }
    /* Grown in steps of the increment only. */
    CHECK(pool.allocated == 1001);
    CHECK(inits == 1001);
    for (size_t i = 0; i < 1000; i++)
        util_pool_put(&pool, v[i]);
    CHECK(util_pool_fini(&pool) == 0);
    free(v);
}

static void test_alignment(void)
{
    static const size_t aligns[] = {0, 1, 2, 8, 16, 32, 64, 256, 4096};
    static const size_t sizes[] = {1, 7, 8, 24, 100, 4096, 5000};

    for (size_t a = 0; a < sizeof(aligns) / sizeof(aligns[0]); a++) {
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
            size_t want = aligns[a] == 0 ? 16 : aligns[a];
            util_pool_params_t pp = {
                .name = "align",
                .elem_size = sizes[s],
                .align = aligns[a],
                .initial = 3,
                .max = 9,
                .increment = 2,
            };
            util_pool_t pool;
            unsigned char *e[9];

            CHECK(util_pool_init(&pool, &pp) == FERRY_OK);
            for (size_t i = 0; i < 9; i++) {
                e[i] = util_pool_get(&pool);
                CHECK(e[i] != NULL);
                CHECK((uintptr_t)e[i] % want == 0);
                /* Fill the whole element: ASan catches an element that is
                 * smaller than asked. */
                memset(e[i], (int)(i + 1), sizes[s]);
            }
            CHECK(util_pool_get(&pool) == NULL);
            for (size_t i = 0; i < 9; i++) {
                for (size_t j = 0; j < sizes[s]; j++)
                    CHECK(e[i][j] == (unsigned char)(i + 1));
            }
            for (size_t i = 0; i < 9; i++)
                util_pool_put(&pool, e[i]);
            CHECK(util_pool_fini(&pool) == 0);
        }
    }
}

static void expect_invalid(util_pool_params_t pp, const char *what)
{
    util_pool_t pool;
    capture_t cap;
    const char *msg;
    int rc;

    capture_begin(&cap);
    rc = util_pool_init(&pool, &pp);
    msg = capture_end(&cap);
    CHECK(rc == FERRY_ERR_INVALID);
    /* The message says which pool and why. */
    CHECK(strstr(msg, "ferry") != NULL);
    CHECK(strstr(msg, "'bad'") != NULL);
    CHECK(strstr(msg, what) != NULL);
    /* A failed init leaves a pool that fini accepts. */
    CHECK(util_pool_fini(&pool) == 0);
}

static void test_invalid(void)
{
    const util_pool_params_t good = {
        .name = "bad", .elem_size = 16, .initial = 1, .max = 4, .increment = 1};
    util_pool_params_t pp;
    util_pool_t pool;

    pp = good;
    pp.elem_size = 0;
    expect_invalid(pp, "size");
    pp = good;
    pp.align = 3;
    expect_invalid(pp, "alignment");
    pp = good;
    pp.align = 8192;
    expect_invalid(pp, "alignment");
    pp = good;
    pp.align = 48;
    expect_invalid(pp, "alignment");
    pp = good;
    pp.increment = 0;
    expect_invalid(pp, "increment");
    pp = good;
    pp.initial = 5;
    expect_invalid(pp, "maximum");
    pp = good;
    pp.elem_size = SIZE_MAX;
    expect_invalid(pp, "size");
    pp = good;
    pp.elem_size = SIZE_MAX - 100;
    pp.align = 4096;
    expect_invalid(pp, "size");

    CHECK(util_pool_init(&pool, NULL) == FERRY_ERR_INVALID);

    /* The good parameters themselves are accepted, and initial == max is fine. */
    pp = good;
    pp.initial = 4;
    CHECK(util_pool_init(&pool, &pp) == FERRY_OK);
    CHECK(util_pool_fini(&pool) == 0);
}

static void test_leaks(void)
{
    util_pool_params_t pp = {
        .name = "leaky", .elem_size = 32, .initial = 2, .max = 0, .increment = 2};
    util_pool_t pool;
    capture_t cap;
    const char *msg;
    size_t leaked;

    CHECK(util_pool_init(&pool, &pp) == FERRY_OK);
    void *a = util_pool_get(&pool);
    void *b = util_pool_get(&pool);
    void *c = util_pool_get(&pool);
    CHECK(a != NULL && b != NULL && c != NULL);
    util_pool_put(&pool, b);

    capture_begin(&cap);
    leaked = util_pool_fini(&pool);
    msg = capture_end(&cap);
    CHECK(leaked == 2);
#ifndef NDEBUG
    CHECK(strstr(msg, "ferry: pool 'leaky': 2 of 4 elements not returned") != NULL);
#else
    CHECK(msg[0] == '\0');
#endif
    /* fini zeroes the pool, so a second fini is harmless. */
    CHECK(util_pool_fini(&pool) == 0);

    /* No leak, no message. */
    CHECK(util_pool_init(&pool, &pp) == FERRY_OK);
    a = util_pool_get(&pool);
    util_pool_put(&pool, a);
    capture_begin(&cap);
    leaked = util_pool_fini(&pool);
    msg = capture_end(&cap);
    CHECK(leaked == 0);
    CHECK(msg[0] == '\0');
}

int main(void)
{
    util_pool_t zero;

    memset(&zero, 0, sizeof(zero));
    CHECK(util_pool_fini(&zero) == 0); /* safe on a zeroed pool */

    test_growth();
    test_partial_growth();
    test_unlimited();
    test_alignment();
    test_invalid();
    test_leaks();
    return 0;
}
