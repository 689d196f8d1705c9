/*
 * Fuzz harness: the pairing of per-interface modules (tcp_pair.c) over the
 * addresses two processes published, which for a peer are untrusted bytes.
 * Byte 0: bit 0 the two share a host; bit 1 the records are structured.
 * Then records, each one module of one of the two sides, in order:
 *   raw         side (bit 0), length (2 bytes, little endian), the bytes of
 *               its modex value;
 *   structured  a byte: side (bit 0) and count (the rest, modulo 17), then
 *               count entries of 20 bytes (family, prefix, port, address)
 *               behind a right header, so that the fuzzer gets past the
 *               decoder to the rule.
 * Each value goes through tcp_addr_decode as the modex's does, a value that
 * does not decode counting as a module with no address (tcp_pair.c,
 * read_side). Whatever the bytes, the pairing must be a matching (each
 * module paired at most once, both directions agreeing, indices in range),
 * pair only modules that reach each other (checked here with a rule of
 * its own: one family, loopback with loopback on one host only, else one
 * subnet over the shorter prefix, any address of one with any of the
 * other's that a peer may dial), leave no two modules unpaired that reach
 * each other, and come out the same when computed again.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "btl/tcp/tcp.h"

typedef struct side {
    int n;
    tcp_addr_blob_t mods[TCP_MAX_MODULES];
} side_t;

static side_t sides[2];

static void add_value(side_t *s, const uint8_t *val, size_t len)
{
    if (s->n == TCP_MAX_MODULES)
        return;
    /* A copy of its own, so that ASan sees a read past what was given. */
    void *copy = malloc(len > 0 ? len : 1);
    if (copy == NULL)
        return;
    if (len > 0)
        memcpy(copy, val, len);
    tcp_addr_blob_t *b = &s->mods[s->n++];
    if (tcp_addr_decode(copy, len, b) != FERRY_OK)
        memset(b, 0, sizeof(*b));
    free(copy);
}

static bool dialable(const tcp_addr_entry_t *e)
{
    return (e->family == 4 && e->prefix <= 32 && e->port != 0) ||
           (e->family == 6 && e->prefix <= 128 && e->port != 0);
}

static bool loopback(const tcp_addr_entry_t *e)
{
    if (e->family == 4)
        return e->addr[0] == 127;
    for (int i = 0; i < 15; i++)
        if (e->addr[i] != 0)
            return false;
    return e->addr[15] == 1;
}

static bool reach(const tcp_addr_entry_t *a, const tcp_addr_entry_t *b, bool same_host)
{
    if (!dialable(a) || !dialable(b) || a->family != b->family || loopback(a) != loopback(b))
        return false;
    if (loopback(a))
        return same_host;
    unsigned bits = a->prefix < b->prefix ? a->prefix : b->prefix;
    for (unsigned i = 0; i < bits; i++)
        if (((a->addr[i / 8] ^ b->addr[i / 8]) >> (7 - i % 8)) & 1)
            return false;
    return true;
}

static bool modules_reach(const tcp_addr_blob_t *x, const tcp_addr_blob_t *y, bool same_host)
{
    CHECK_FUZZ(x->count <= TCP_MAX_ADDRS && y->count <= TCP_MAX_ADDRS);
    for (int i = 0; i < x->count; i++)
        for (int j = 0; j < y->count; j++)
            if (reach(&x->entry[i], &y->entry[j], same_host))
                return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool same_host = data[0] & 1, structured = data[0] & 2;
    sides[0].n = sides[1].n = 0;
    size_t at = 1;
    while (at < size) {
        side_t *s = &sides[data[at] & 1];
        if (structured) {
            unsigned count = (unsigned)(data[at] >> 1) % (TCP_MAX_ADDRS + 1);
            at++;
            uint8_t val[sizeof(tcp_addr_blob_t)];
            tcp_addr_blob_t head = {.magic = (uint32_t)TCP_MAGIC,
                                    .version = TCP_VERSION,
                                    .count = (uint16_t)count};
            size_t hlen = offsetof(tcp_addr_blob_t, entry);
            size_t elen = count * sizeof(tcp_addr_entry_t);
            memcpy(val, &head, hlen);
            size_t have = at < size ? size - at : 0;
            size_t take = have < elen ? have : elen;
            memcpy(val + hlen, data + at, take);
            memset(val + hlen + take, 0, elen - take);
            at += elen;
            add_value(s, val, hlen + elen);
        } else {
            if (size - at < 3)
                break;
            size_t len = (size_t)data[at + 1] | (size_t)data[at + 2] << 8;
            at += 3;
            if (len > size - at)
                len = size - at;
            add_value(s, data + at, len);
            at += len;
        }
    }
    tcp_pair_side_t lo = {.nmods = sides[0].n, .mods = sides[0].mods};
    tcp_pair_side_t hi = {.nmods = sides[1].n, .mods = sides[1].mods};
    int16_t lo_out[TCP_MAX_MODULES], hi_out[TCP_MAX_MODULES];
    int16_t lo_again[TCP_MAX_MODULES], hi_again[TCP_MAX_MODULES];
    tcp_pair_match(&lo, &hi, same_host, lo_out, hi_out);
    tcp_pair_match(&lo, &hi, same_host, lo_again, hi_again);
    for (int i = 0; i < lo.nmods; i++) {
        int j = lo_out[i];
        CHECK_FUZZ(j >= -1 && j < hi.nmods && lo_again[i] == j);
        if (j >= 0) {
            CHECK_FUZZ(hi_out[j] == i);
            CHECK_FUZZ(modules_reach(&sides[0].mods[i], &sides[1].mods[j], same_host));
        }
    }
    for (int j = 0; j < hi.nmods; j++) {
        int i = hi_out[j];
        CHECK_FUZZ(i >= -1 && i < lo.nmods && hi_again[j] == i);
        CHECK_FUZZ(i < 0 || lo_out[i] == j);
    }
    /* Nothing is left unpaired that could have been paired. */
    for (int i = 0; i < lo.nmods; i++)
        for (int j = 0; j < hi.nmods && lo_out[i] < 0; j++)
            CHECK_FUZZ(hi_out[j] >= 0 ||
                              !modules_reach(&sides[0].mods[i], &sides[1].mods[j], same_host));
    return 0;
}
