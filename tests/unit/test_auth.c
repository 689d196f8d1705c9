/*
 * The authentication primitives (src/rt/auth.c) and the log's rate limiter
 * (src/rt/log.c). The MAC vectors were computed apart from ferry, with
 * Python's hmac module over the same framing (each part's length as 8
 * bytes little endian, then its bytes), so they show that the MAC is plain
 * HMAC-SHA-256 another implementation can check.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <ferry/ferry.h>

#include "capture.h"
#include "check.h"
#include "rt/auth.h"
#include "rt/log.h"

static void hex_of(const uint8_t *bin, size_t len, char *out, size_t size)
{
    CHECK(rt_auth_hex_encode(bin, len, out, size) == FERRY_OK);
}

static void test_mac(void)
{
    uint8_t key[RT_AUTH_KEY_LEN], mac[RT_AUTH_MAC_LEN], again[RT_AUTH_MAC_LEN];
    char hex[RT_AUTH_HEX_LEN + 1];
    for (int i = 0; i < RT_AUTH_KEY_LEN; i++) {
        key[i] = (uint8_t)i;
    }
    const rt_auth_part_t parts[] = {{"ferry", 5}, {NULL, 0}, {"abc", 3}};
    CHECK(rt_auth_mac(key, parts, 3, mac) == FERRY_OK);
    hex_of(mac, sizeof(mac), hex, sizeof(hex));
    CHECK(strcmp(hex, "3aa8b43e613304314f23b40a1190fc360e74b8338e0d3ed1059ef4b98a7f35e2") == 0);
    /* The framing tells ("ab", "c") from ("a", "bc") and from ("abc"). */
    const rt_auth_part_t ab_c[] = {{"ab", 2}, {"c", 1}};
    const rt_auth_part_t a_bc[] = {{"a", 1}, {"bc", 2}};
    const rt_auth_part_t abc[] = {{"abc", 3}};
    CHECK(rt_auth_mac(key, ab_c, 2, mac) == FERRY_OK);
    CHECK(rt_auth_mac(key, a_bc, 2, again) == FERRY_OK);
    CHECK(!rt_auth_equal(mac, again, sizeof(mac)));
    CHECK(rt_auth_mac(key, abc, 1, again) == FERRY_OK);
    CHECK(!rt_auth_equal(mac, again, sizeof(mac)));
    /* Another key, another MAC; the same inputs, the same MAC. */
    CHECK(rt_auth_mac(key, ab_c, 2, again) == FERRY_OK);
    CHECK(rt_auth_equal(mac, again, sizeof(mac)));
    key[31] ^= 1;
    CHECK(rt_auth_mac(key, ab_c, 2, again) == FERRY_OK);
    CHECK(!rt_auth_equal(mac, again, sizeof(mac)));
}

static void test_pmi_proof(void)
{
    uint8_t key[RT_AUTH_KEY_LEN], cn[RT_AUTH_NONCE_LEN], sn[RT_AUTH_NONCE_LEN];
    uint8_t client[RT_AUTH_MAC_LEN], server[RT_AUTH_MAC_LEN], other[RT_AUTH_MAC_LEN];
    char hex[RT_AUTH_HEX_LEN + 1];
    for (int i = 0; i < RT_AUTH_KEY_LEN; i++) {
        key[i] = (uint8_t)i;
    }
    memset(cn, 1, sizeof(cn));
    memset(sn, 2, sizeof(sn));
    const char *job = "ferry-7-0000000000000abc";
    CHECK(rt_auth_pmi_proof(key, RT_AUTH_PMI_CLIENT, job, 3, cn, sn, client) == FERRY_OK);
    hex_of(client, sizeof(client), hex, sizeof(hex));
    CHECK(strcmp(hex, "943b581fedfd1a48be9a3573d347fa1414d95051c9d49b31e861a68358adf765") == 0);
    CHECK(rt_auth_pmi_proof(key, RT_AUTH_PMI_SERVER, job, 3, cn, sn, server) == FERRY_OK);
    hex_of(server, sizeof(server), hex, sizeof(hex));
    CHECK(strcmp(hex, "fb671d3e2150dc1c0f5954db14961e923c3a7d4d7465b81b39343de34e94cfcb") == 0);
    /* Each binding changes the proof: job, pmiid, either nonce. */
    CHECK(rt_auth_pmi_proof(key, RT_AUTH_PMI_CLIENT, "ferry-7-0000000000000abd", 3, cn, sn,
                            other) == FERRY_OK);
    CHECK(!rt_auth_equal(client, other, sizeof(other)));
    CHECK(rt_auth_pmi_proof(key, RT_AUTH_PMI_CLIENT, job, 4, cn, sn, other) == FERRY_OK);
    CHECK(!rt_auth_equal(client, other, sizeof(other)));
    CHECK(rt_auth_pmi_proof(key, RT_AUTH_PMI_CLIENT, job, 3, sn, sn, other) == FERRY_OK);
    CHECK(!rt_auth_equal(client, other, sizeof(other)));
    CHECK(rt_auth_pmi_proof(key, RT_AUTH_PMI_CLIENT, job, 3, cn, cn, other) == FERRY_OK);
    CHECK(!rt_auth_equal(client, other, sizeof(other)));
    CHECK(rt_auth_pmi_proof(key, RT_AUTH_PMI_CLIENT, NULL, 3, cn, sn, other) ==
          FERRY_ERR_INVALID);
}

static void test_hex(void)
{
    uint8_t bin[4] = {0x00, 0xab, 0x10, 0xff}, back[4];
    char hex[9];
    hex_of(bin, 4, hex, sizeof(hex));
    CHECK(strcmp(hex, "00ab10ff") == 0);
    CHECK(rt_auth_hex_encode(bin, 4, hex, 8) == FERRY_ERR_INVALID);
    CHECK(rt_auth_hex_decode("00ab10ff", back, 4) == FERRY_OK);
    CHECK(memcmp(bin, back, 4) == 0);
    CHECK(rt_auth_hex_decode("00AB10FF", back, 4) == FERRY_OK);
    CHECK(memcmp(bin, back, 4) == 0);
    /* Exactly 2 * len hex digits, nothing else, and a refused text leaves
     * nothing of itself behind. */
    static const char *const bad[] = {"00ab10f", "00ab10fff", "00ab10fg", "00ab 0ff",
                                      "00:b10ff", "",        "0xab10ff"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(back, 0x77, sizeof(back));
        CHECK(rt_auth_hex_decode(bad[i], back, 4) == FERRY_ERR_INVALID);
        CHECK(back[0] == 0 && back[1] == 0 && back[2] == 0 && back[3] == 0);
    }
    CHECK(rt_auth_hex_decode(NULL, back, 4) == FERRY_ERR_INVALID);
}

static void *random_thread(void *arg)
{
    uint8_t *buf = arg;
    CHECK(rt_auth_random(buf, 32) == FERRY_OK);
    return NULL;
}

static void test_random(void)
{
    /* Two threads may be first to initialise the library. */
    uint8_t a[32], b[32];
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, random_thread, a) == 0);
    CHECK(pthread_create(&tb, NULL, random_thread, b) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(memcmp(a, b, sizeof(a)) != 0);
    uint8_t zero[32] = {0};
    CHECK(memcmp(a, zero, sizeof(a)) != 0);
    CHECK(rt_auth_init() == FERRY_OK);
    rt_auth_wipe(a, sizeof(a));
    CHECK(memcmp(a, zero, sizeof(a)) == 0);
}

static void test_ratelimit(void)
{
    rt_ratelimit_t rl;
    unsigned long held = 99;
    rt_ratelimit_init(&rl, 3, 1000);
    for (int i = 0; i < 3; i++) {
        CHECK(rt_ratelimit_allow(&rl, 5000, &held) && held == 0);
    }
    /* The burst is spent: the rest of the interval is counted only. */
    for (int i = 0; i < 1000; i++) {
        CHECK(!rt_ratelimit_allow(&rl, 5000 + i % 999, &held));
    }
    /* A new interval lets one through, saying how many were held. */
    CHECK(rt_ratelimit_allow(&rl, 6000, &held) && held == 1000);
    CHECK(rt_ratelimit_allow(&rl, 6001, &held) && held == 0);
    CHECK(rt_ratelimit_allow(&rl, 6002, &held));
    CHECK(!rt_ratelimit_allow(&rl, 6003, &held));
    CHECK(!rt_ratelimit_allow(&rl, 6004, &held));
    CHECK(rt_ratelimit_take(&rl) == 2);
    CHECK(rt_ratelimit_take(&rl) == 0);
    /* A clock that goes back starts over rather than holding everything. */
    CHECK(rt_ratelimit_allow(&rl, 10, &held) && held == 0);
}

/* rt_log_limited prints a burst, then one line saying how many it held. */
static void test_log_limited(void)
{
    rt_log_t log;
    rt_log_init(&log);
    rt_ratelimit_t rl;
    rt_ratelimit_init(&rl, 2, 50);
    capture_t cap;
    capture_begin(&cap);
    for (int i = 0; i < 10; i++) {
        rt_log_limited(&log, &rl, RT_LOG_ERROR, "stranger %d refused", i);
    }
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 80 * 1000000};
    nanosleep(&pause, NULL);
    rt_log_limited(&log, &rl, RT_LOG_ERROR, "stranger %d refused", 10);
    /* A level that is off is not counted either. */
    rt_log_limited(&log, &rl, RT_LOG_DEBUG, "debug");
    const char *text = capture_end(&cap);
    CHECK(strstr(text, "stranger 0 refused\n") != NULL);
    CHECK(strstr(text, "stranger 1 refused\n") != NULL);
    CHECK(strstr(text, "stranger 2 refused") == NULL);
    CHECK(strstr(text, "stranger 10 refused (8 similar messages suppressed)\n") != NULL);
    CHECK(strstr(text, "debug") == NULL);
    size_t lines = 0;
    for (const char *c = text; *c != '\0'; c++) {
        lines += *c == '\n';
    }
    CHECK(lines == 3);
}

int main(void)
{
    test_mac();
    test_pmi_proof();
    test_hex();
    test_random();
    test_ratelimit();
    test_log_limited();
    printf("test_auth: ok\n");
    return 0;
}
