/*
 * The pairing of per-interface modules (tcp_pair.c, tcp_pair_match), on
 * made-up modules, no network: each case gives the two processes' modules
 * (an address each, as tcp_open publishes them, or several, or none) and
 * the pairing expected. Then random modules on a few subnets, where on
 * each subnet the i-th module of one side must pair with the i-th of the
 * other, every pair must reach, and no two modules left over may reach
 * each other. Prints "tcp_pair_unit: ok".
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "btl/tcp/tcp.h"
#include "unit/check.h"

#define MAXM 32

typedef struct side {
    int n;
    tcp_addr_blob_t mods[MAXM];
} side_t;

/* Appends a module listening on "a.b.c.d/prefix" or "x::y/prefix"; NULL
 * for a module that published nothing that decodes. */
static void add(side_t *s, const char *cidr)
{
    CHECK(s->n < MAXM);
    tcp_addr_blob_t *b = &s->mods[s->n++];
    memset(b, 0, sizeof(*b));
    if (cidr == NULL)
        return;
    char text[64];
    snprintf(text, sizeof(text), "%s", cidr);
    char *slash = strchr(text, '/');
    CHECK(slash != NULL);
    *slash = '\0';
    tcp_addr_entry_t *e = &b->entry[0];
    if (inet_pton(AF_INET, text, e->addr) == 1) {
        e->family = 4;
    } else {
        CHECK(inet_pton(AF_INET6, text, e->addr) == 1);
        e->family = 6;
    }
    e->prefix = (uint8_t)atoi(slash + 1);
    e->port = 4000;
    b->magic = (uint32_t)TCP_MAGIC;
    b->version = TCP_VERSION;
    b->count = 1;
}

/* Pairs lo with hi and checks lo_out against want (hi_out follows). */
static void expect(const char *name, const side_t *lo, const side_t *hi, bool same_host,
                   const int *want)
{
    int16_t lo_out[MAXM], hi_out[MAXM];
    tcp_pair_side_t a = {.nmods = lo->n, .mods = lo->mods};
    tcp_pair_side_t b = {.nmods = hi->n, .mods = hi->mods};
    tcp_pair_match(&a, &b, same_host, lo_out, hi_out);
    for (int i = 0; i < lo->n; i++) {
        if (lo_out[i] != want[i]) {
            fprintf(stderr, "%s: module %d of the lower rank paired with %d, expected %d\n",
                    name, i, lo_out[i], want[i]);
            exit(1);
        }
        if (want[i] >= 0)
            CHECK(hi_out[want[i]] == i);
    }
    for (int j = 0; j < hi->n; j++)
        CHECK(hi_out[j] < 0 || lo_out[hi_out[j]] == j);
    printf("tcp_pair_unit: %s\n", name);
}

static void cases(void)
{
    side_t a, b;
    /* The hosts list their two subnets in opposite orders, two links each:
     * links of one address in order. */
    a = (side_t){0}, b = (side_t){0};
    add(&a, "10.78.0.1/24"), add(&a, "10.78.0.1/24"), add(&a, "10.79.0.1/24"),
        add(&a, "10.79.0.1/24");
    add(&b, "10.79.0.2/24"), add(&b, "10.79.0.2/24"), add(&b, "10.78.0.2/24"),
        add(&b, "10.78.0.2/24");
    expect("opposite orders", &a, &b, false, (int[]){2, 3, 0, 1});
    expect("opposite orders, the other way", &b, &a, false, (int[]){2, 3, 0, 1});
    /* FERRY_TCP_LINKS 2 against 1: the first link of each address pairs. */
    b = (side_t){0};
    add(&b, "10.79.0.2/24"), add(&b, "10.78.0.2/24");
    expect("links 2 against 1", &a, &b, false, (int[]){1, -1, 0, -1});
    expect("links 1 against 2", &b, &a, false, (int[]){2, 0});
    /* A subnet on one side only, and modules past it keep their pairs. */
    a = (side_t){0}, b = (side_t){0};
    add(&a, "10.77.0.1/24"), add(&a, "10.78.0.1/24"), add(&a, "10.80.0.1/24");
    add(&b, "10.78.0.2/24"), add(&b, "10.81.0.2/24"), add(&b, "10.80.0.2/24");
    expect("subnets on one side only", &a, &b, false, (int[]){-1, 0, 2});
    /* Prefixes that differ compare over the shorter one. */
    a = (side_t){0}, b = (side_t){0};
    add(&a, "10.1.2.5/24"), add(&a, "10.1.3.5/24");
    add(&b, "10.1.9.9/16");
    expect("the shorter prefix", &a, &b, false, (int[]){0, -1});
    a = (side_t){0}, b = (side_t){0};
    add(&a, "10.1.2.5/24");
    add(&b, "10.1.3.9/24");
    expect("neighbouring /24s", &a, &b, false, (int[]){-1});
    /* Loopback with loopback, on one host only; never with another address,
     * nor IPv4 with IPv6. */
    a = (side_t){0}, b = (side_t){0};
    add(&a, "127.0.0.1/8"), add(&a, "192.0.2.2/24"), add(&a, "::1/128"),
        add(&a, "fd00::2/64");
    add(&b, "::1/128"), add(&b, "fd00::3/64"), add(&b, "127.0.0.1/8"), add(&b, "192.0.2.3/24");
    expect("one host", &a, &b, true, (int[]){2, 3, 0, 1});
    expect("two hosts", &a, &b, false, (int[]){-1, 3, -1, 1});
    /* A module that published nothing usable pairs with none, and the
     * indices after it are still the modules'. */
    a = (side_t){0}, b = (side_t){0};
    add(&a, NULL), add(&a, "10.78.0.1/24");
    add(&b, "10.78.0.2/24"), add(&b, NULL);
    expect("a module without an address", &a, &b, false, (int[]){-1, 0});
    a = (side_t){0}, b = (side_t){0};
    add(&a, "10.78.0.1/24"), add(&a, "10.78.0.1/24"), add(&a, "10.78.0.1/24");
    add(&b, "10.78.0.2/24"), add(&b, "10.78.0.2/24"), add(&b, "10.78.0.2/24");
    b.mods[0].entry[0].port = 0;
    b.mods[1].entry[0].prefix = 33;
    b.mods[2].entry[0].family = 5;
    expect("addresses no one may dial", &a, &b, false, (int[]){-1, -1, -1});
    /* A module of several addresses (as a peer may publish) pairs through
     * any of them. */
    a = (side_t){0}, b = (side_t){0};
    add(&a, "10.78.0.1/24"), add(&a, "10.79.0.1/24");
    add(&b, "10.79.0.2/24");
    b.mods[0].entry[1] = b.mods[0].entry[0];
    b.mods[0].entry[1].addr[1] = 78;
    b.mods[0].count = 2;
    expect("a module of two addresses", &a, &b, false, (int[]){0, -1});
    /* Nothing on either side. */
    a = (side_t){0}, b = (side_t){0};
    expect("no modules", &a, &b, false, (int[]){0});
    add(&a, "10.78.0.1/24");
    expect("no modules on one side", &a, &b, false, (int[]){-1});
}

static uint32_t rnd(uint32_t *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 16;
}

/* Random modules on subnets 10.S.0.0/24 (S of 70..73), loopback or an
 * IPv6 block: on each, the i-th of one side pairs with the i-th of the
 * other; each pair reaches; no two modules left over reach each other. */
static void random_rounds(void)
{
    uint32_t seed = 12345;
    for (int round = 0; round < 2000; round++) {
        side_t s[2] = {0};
        int net[2][MAXM];
        bool same_host = rnd(&seed) & 1;
        for (int side = 0; side < 2; side++) {
            int n = (int)(rnd(&seed) % (MAXM + 1));
            for (int i = 0; i < n; i++) {
                int k = (int)(rnd(&seed) % 6);
                char cidr[64];
                if (k < 4)
                    snprintf(cidr, sizeof(cidr), "10.%d.0.%d/24", 70 + k, 1 + side);
                else if (k == 4)
                    snprintf(cidr, sizeof(cidr), "127.0.0.1/8");
                else
                    snprintf(cidr, sizeof(cidr), "fd00:%d::%d/64", 7, 1 + side);
                add(&s[side], cidr);
                net[side][i] = k;
            }
        }
        int16_t out[2][MAXM];
        tcp_pair_side_t a = {.nmods = s[0].n, .mods = s[0].mods};
        tcp_pair_side_t b = {.nmods = s[1].n, .mods = s[1].mods};
        tcp_pair_match(&a, &b, same_host, out[0], out[1]);
        for (int k = 0; k < 6; k++) {
            /* The modules of each side on this subnet, in order. */
            int on[2][MAXM], cnt[2] = {0, 0};
            for (int side = 0; side < 2; side++)
                for (int i = 0; i < s[side].n; i++)
                    if (net[side][i] == k)
                        on[side][cnt[side]++] = i;
            bool reach = k != 4 || same_host;
            for (int x = 0; x < cnt[0]; x++) {
                int want = reach && x < cnt[1] ? on[1][x] : -1;
                CHECK(out[0][on[0][x]] == want);
            }
            for (int y = 0; y < cnt[1]; y++) {
                int want = reach && y < cnt[0] ? on[0][y] : -1;
                CHECK(out[1][on[1][y]] == want);
            }
        }
    }
    printf("tcp_pair_unit: 2000 random rounds\n");
}

int main(void)
{
    char key[TCP_MODEX_KEY_LEN];
    tcp_modex_key(0, key);
    CHECK(strcmp(key, "btl.tcp") == 0);
    tcp_modex_key(1, key);
    CHECK(strcmp(key, "btl.tcp.1") == 0);
    tcp_modex_key(TCP_MAX_MODULES - 1, key);
    CHECK(strcmp(key, "btl.tcp.127") == 0);
    cases();
    random_rounds();
    printf("tcp_pair_unit: ok\n");
    return 0;
}
