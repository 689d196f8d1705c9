/*
 * The authentication primitives of auth.h, over libsodium.
 */
#include "rt/auth.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include <ferry/ferry.h>

/* sodium_init's outcome, for every caller. sodium_init is itself safe to
 * call more than once, but the once-guard makes its result the process's
 * single answer, whatever thread asks first. This and the once-control are
 * the only process-wide state here, as libsodium's own is. */
static pthread_once_t auth_once = PTHREAD_ONCE_INIT;
static int auth_status = FERRY_ERR;

static void auth_init_once(void)
{
    /* 0: initialised now, 1: already initialised (by another library in
     * the process), -1: failure. */
    auth_status = sodium_init() >= 0 ? FERRY_OK : FERRY_ERR;
}

int rt_auth_init(void)
{
    if (pthread_once(&auth_once, auth_init_once) != 0) {
        return FERRY_ERR;
    }
    return auth_status;
}

int rt_auth_random(void *buf, size_t len)
{
    int rc = rt_auth_init();
    if (rc != FERRY_OK) {
        return rc;
    }
    if (len > 0) {
        randombytes_buf(buf, len);
    }
    return FERRY_OK;
}

int rt_auth_mac(const uint8_t key[RT_AUTH_KEY_LEN], const rt_auth_part_t *parts, size_t n_parts,
                uint8_t mac_out[RT_AUTH_MAC_LEN])
{
    int rc = rt_auth_init();
    if (rc != FERRY_OK) {
        return rc;
    }
    crypto_auth_hmacsha256_state st;
    if (crypto_auth_hmacsha256_init(&st, key, RT_AUTH_KEY_LEN) != 0) {
        return FERRY_ERR;
    }
    for (size_t i = 0; i < n_parts; i++) {
        uint8_t frame[8];
        uint64_t len = parts[i].len;
        for (int b = 0; b < 8; b++) {
            frame[b] = (uint8_t)(len >> (8 * b));
        }
        crypto_auth_hmacsha256_update(&st, frame, sizeof(frame));
        if (parts[i].len > 0) {
            crypto_auth_hmacsha256_update(&st, parts[i].data, parts[i].len);
        }
    }
    crypto_auth_hmacsha256_final(&st, mac_out);
    sodium_memzero(&st, sizeof(st));
    return FERRY_OK;
}

bool rt_auth_equal(const void *a, const void *b, size_t len)
{
    return sodium_memcmp(a, b, len) == 0;
}

int rt_auth_hex_encode(const void *bin, size_t len, char *hex_out, size_t hex_size)
{
    if (hex_size == 0 || len > (hex_size - 1) / 2) {
        return FERRY_ERR_INVALID;
    }
    sodium_bin2hex(hex_out, hex_size, bin, len);
    return FERRY_OK;
}

int rt_auth_hex_decode(const char *hex, void *bin_out, size_t len)
{
    size_t got = 0;
    const char *end = NULL;
    /* No characters are ignored: only hex digits, all of them used. */
    if (hex == NULL || strlen(hex) != 2 * len ||
        sodium_hex2bin(bin_out, len, hex, 2 * len, NULL, &got, &end) != 0 || got != len ||
        end != hex + 2 * len) {
        sodium_memzero(bin_out, len);
        return FERRY_ERR_INVALID;
    }
    return FERRY_OK;
}

void rt_auth_wipe(void *buf, size_t len)
{
    if (len > 0) {
        sodium_memzero(buf, len);
    }
}

int rt_auth_pmi_proof(const uint8_t key[RT_AUTH_KEY_LEN], rt_auth_pmi_role_t role,
                      const char *job_id, long pmiid, const uint8_t cnonce[RT_AUTH_NONCE_LEN],
                      const uint8_t snonce[RT_AUTH_NONCE_LEN], uint8_t proof_out[RT_AUTH_MAC_LEN])
{
    static const char client_label[] = "ferry pmi-1 initack client v1";
    static const char server_label[] = "ferry pmi-1 initack server v1";
    const char *label = role == RT_AUTH_PMI_CLIENT ? client_label : server_label;
    char id_text[24];
    int n = snprintf(id_text, sizeof(id_text), "%ld", pmiid);
    if (job_id == NULL || n < 0 || (size_t)n >= sizeof(id_text)) {
        return FERRY_ERR_INVALID;
    }
    const rt_auth_part_t parts[] = {
        {label, strlen(label)},
        {job_id, strlen(job_id)},
        {id_text, (size_t)n},
        {cnonce, RT_AUTH_NONCE_LEN},
        {snonce, RT_AUTH_NONCE_LEN},
    };
    return rt_auth_mac(key, parts, sizeof(parts) / sizeof(parts[0]), proof_out);
}
