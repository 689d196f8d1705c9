/*
 * The packed layout of ferry_rkey_t (src/api/rdma.c), for tests that play a
 * peer reading or rewriting its own copy of a remote key.
 */
#ifndef TESTS_TCP_RKEY_LAYOUT_H
#define TESTS_TCP_RKEY_LAYOUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

typedef struct rkey_header {
    uint32_t magic;
    uint16_t version;
    uint16_t n_entries;
    int32_t owner;
    uint32_t access;
    uint64_t base;
    uint64_t len;
} rkey_header_t;

typedef struct rkey_entry {
    uint32_t name_hash; /* FNV-1a of the transport's name */
    uint8_t first;      /* the modules [first, first + count) of the transport */
    uint8_t count;
    uint8_t key_len;
    uint8_t zero;
} rkey_entry_t;

static inline uint32_t rkey_name_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s != '\0'; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* Where the key of tcp module 0 (and of the others, which share it) sits in
 * a packed remote key, and its length; exits when the key has none. */
static inline size_t rkey_tcp_offset(const ferry_rkey_t *rk, size_t *len_out)
{
    rkey_header_t h;
    memcpy(&h, rk->bytes, sizeof(h));
    size_t off = sizeof(h);
    for (unsigned i = 0; i < h.n_entries; i++) {
        rkey_entry_t e;
        if (off + sizeof(e) > sizeof(rk->bytes))
            break;
        memcpy(&e, rk->bytes + off, sizeof(e));
        if (e.name_hash == rkey_name_hash("tcp") && e.first == 0 &&
            off + sizeof(e) + e.key_len <= sizeof(rk->bytes)) {
            *len_out = e.key_len;
            return off + sizeof(e);
        }
        off += sizeof(e) + e.key_len;
    }
    fprintf(stderr, "the remote key has no tcp entry\n");
    exit(1);
}

#endif /* TESTS_TCP_RKEY_LAYOUT_H */
