/*
 * The packed remote key (ferry_rkey_t): what ferry_mem_rkey writes and a
 * peer sends back with its puts and gets. Its bytes come from outside (the
 * application got them from a peer), so api_rkey_resolve checks every field
 * before it uses one; tests/fuzz/fuzz_rkey.c feeds it arbitrary keys.
 *
 * Layout, in host byte order (ranks of one job share an architecture): a
 * header, then n_entries entries, each followed by its key_len key bytes,
 * all within FERRY_RKEY_SIZE bytes. An entry is the key of a run of one
 * transport's modules (instances first to first + count - 1) whose keys
 * are the same bytes: tcp's modules share one registration table, so all
 * of a process's tcp modules take one entry, and a key holds any number of
 * them beside self and sm. A well-formed key has every entry inside it,
 * no entry of count 0 or past instance 255, a zero pad byte, and no two
 * entries of one transport that claim the same instance; any other key is
 * refused whole, whichever module it is used for.
 */
#ifndef API_RKEY_H
#define API_RKEY_H

#include <stdint.h>

#include <ferry/ferry.h>

#include "btl/ctx.h"

#define API_RKEY_MAGIC 0x59454b52u /* "RKEY" */
#define API_RKEY_VERSION 2 /* 2: an entry covers a run of instances */

typedef struct api_rkey_header {
    uint32_t magic;
    uint16_t version;
    uint16_t n_entries;
    int32_t owner;   /* the rank whose memory it is */
    uint32_t access; /* FERRY_ACCESS_* of the registration */
    uint64_t base;   /* the registration's range */
    uint64_t len;
} api_rkey_header_t;

/* The key of one or more modules of a transport, found again by the
 * transport's name and which of its modules they are. */
typedef struct api_rkey_entry {
    uint32_t name_hash; /* api_rkey_name_hash of the transport's name */
    uint8_t first;      /* the first module of that transport it is the key of */
    uint8_t count;      /* how many, from first on: 1 to 256 - first */
    uint8_t key_len;    /* at most FERRY_BTL_KEY_MAX */
    uint8_t zero;       /* must be 0 */
} api_rkey_entry_t;

/* Entries a key can hold at most (each at least its own 8 bytes). */
#define API_RKEY_MAX_ENTRIES \
    ((FERRY_RKEY_SIZE - sizeof(api_rkey_header_t)) / sizeof(api_rkey_entry_t))

/* FNV-1a of a transport's name. */
static inline uint32_t api_rkey_name_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/*
 * Finds in rkey the key for module m (ctx->modules[m]) reaching rank dst,
 * after checking that the key is well formed, belongs to dst, and covers
 * [raddr, raddr + len) with the rights need. On success the key is in
 * key_out (FERRY_BTL_KEY_MAX bytes, zero past the transport's key).
 * FERRY_ERR_INVALID for a key that is not well formed, or is of another
 * rank or lacks module m's key (logged); FERRY_ERR_ACCESS for a range or
 * rights it does not cover. key_out is written only on success.
 */
/* The number by which dst's keys name the module of dst that our module m
 * reaches: the peer's own number for it where the transport pairs modules
 * across numbers (peer_instance: tcp's per-interface modules pair by
 * subnet), else m's instance, the same on both sides. */
int api_rkey_peer_instance(const ferry_ctx_t *ctx, int m, int dst);

int api_rkey_resolve(const ferry_ctx_t *ctx, int m, int dst, const ferry_rkey_t *rkey,
                     uint64_t raddr, size_t len, uint32_t need, uint8_t *key_out);

/*
 * The checks of api_rkey_resolve but for the range: the key is well formed,
 * belongs to dst, its range does not wrap, and it has module m's key. On
 * success *hdr_out is its header and, when key_out is not NULL, the key is
 * there as for api_rkey_resolve. Errors as api_rkey_resolve (logged).
 */
int api_rkey_parse(const ferry_ctx_t *ctx, int m, int dst, const ferry_rkey_t *rkey,
                   api_rkey_header_t *hdr_out, uint8_t *key_out);

/* ferry_mem_rkey, and in *len_out (when not NULL) the bytes of the key its
 * header and entries take: the rest is zero. */
int api_mem_rkey(const ferry_mem_t *mem, ferry_rkey_t *rkey_out, size_t *len_out);

#endif /* API_RKEY_H */
