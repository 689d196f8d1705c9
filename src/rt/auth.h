/*
 * Authentication primitives, every one of them libsodium's: random bytes, a
 * MAC over several byte strings under a 32-byte key, constant-time
 * comparison, hex coding of secrets, and wiping. Nothing cryptographic is
 * written here; this file only fixes how ferry uses the library, so that
 * the launcher, the PMI-1 client and the transports use it the same way.
 *
 * The MAC is HMAC-SHA-256 (crypto_auth_hmacsha256). Keyed BLAKE2b would be
 * faster, but a MAC here runs a few times per connection, never per
 * message; HMAC-SHA-256 is the standard one (RFC 2104, FIPS 198-1) that
 * every crypto library and language offers, so a peer written elsewhere
 * (a test in a script, a client in another language) can check or produce
 * ferry's proofs. The parts are framed: each one's length (8 bytes, little
 * endian) goes before its bytes, so that ("ab", "c") and ("a", "bc") give
 * different MACs.
 *
 * Thread safety: every function may be called from any thread;
 * rt_auth_init runs sodium_init exactly once per process (pthread_once).
 */
#ifndef RT_AUTH_H
#define RT_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RT_AUTH_KEY_LEN 32
#define RT_AUTH_MAC_LEN 32
#define RT_AUTH_NONCE_LEN 32
/* Characters of a hex-encoded key, MAC or nonce (without the NUL). */
#define RT_AUTH_HEX_LEN 64

/* The environment variable that carries the job's secret, in hex, from the
 * launcher to each rank. The rank reads it once and wipes it. */
#define RT_AUTH_SECRET_ENV "FERRY_JOB_SECRET"

/* One byte string of a MAC's input; data may be NULL when len is 0. */
typedef struct rt_auth_part {
    const void *data;
    size_t len;
} rt_auth_part_t;

/* Initialises libsodium once. FERRY_OK, or FERRY_ERR when the library cannot
 * start (no source of randomness); every other function calls it. */
int rt_auth_init(void);

/* Fills buf with len bytes from the system's random source. */
int rt_auth_random(void *buf, size_t len);

/* HMAC-SHA-256 under key over the framed parts (see above). */
int rt_auth_mac(const uint8_t key[RT_AUTH_KEY_LEN], const rt_auth_part_t *parts, size_t n_parts,
                uint8_t mac_out[RT_AUTH_MAC_LEN]);

/* Compares in time that depends only on len, never on where a and b differ. */
bool rt_auth_equal(const void *a, const void *b, size_t len);

/* Writes the 2 * len lowercase hex digits of bin and a NUL into hex_out (of
 * hex_size bytes). FERRY_ERR_INVALID when it does not fit. */
int rt_auth_hex_encode(const void *bin, size_t len, char *hex_out, size_t hex_size);

/* Decodes hex, which must be exactly 2 * len hex digits and nothing else,
 * into len bytes. FERRY_ERR_INVALID otherwise (bin_out is then wiped). */
int rt_auth_hex_decode(const char *hex, void *bin_out, size_t len);

/* Overwrites len bytes with zeros in a way the compiler cannot drop. */
void rt_auth_wipe(void *buf, size_t len);

/* ---- The PMI-1 connection handshake ---------------------------------------
 * A remote rank connecting to its launcher's PMI port proves the job's
 * secret without sending it:
 *   client: cmd=initack pmiid=ID auth=hmac-sha256 nonce=NC
 *   server: cmd=auth_challenge rc=0 nonce=NS
 *   client: cmd=auth_response proof=MAC(client)
 *   server: cmd=initack rc=0 proof=MAC(server), then the cmd=set lines
 * Each MAC covers a label naming its sender's role, the job id, the pmiid
 * and both nonces, so that a proof made for one connection, one job, one
 * rank or one direction is worth nothing in another. */
#define RT_AUTH_PMI_METHOD "hmac-sha256"

typedef enum { RT_AUTH_PMI_CLIENT, RT_AUTH_PMI_SERVER } rt_auth_pmi_role_t;

int rt_auth_pmi_proof(const uint8_t key[RT_AUTH_KEY_LEN], rt_auth_pmi_role_t role,
                      const char *job_id, long pmiid, const uint8_t cnonce[RT_AUTH_NONCE_LEN],
                      const uint8_t snonce[RT_AUTH_NONCE_LEN], uint8_t proof_out[RT_AUTH_MAC_LEN]);

#endif /* RT_AUTH_H */
