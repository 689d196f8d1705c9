/*
 * The key-value store behind PMI put and get, with owners and quotas.
 *
 * Ownership: a key belongs to the rank that put it first, and a put of it
 * by any other rank is refused. A name of the form "R.anything" (R a rank
 * in decimal, no leading zeros) belongs to rank R from the start, so that
 * no rank can take another's name before it is put: ferry's PMI-1 client
 * names every key so (src/rt/modex_pmi1.c). Reads are open to every rank of
 * the job; they are the point of the store.
 *
 * Quotas, per rank (ferryrun.h): bytes, keys, and revisions (puts that
 * replace a value the rank stored before). Each rank's byte quota is its
 * share of the total, so no rank can use up the store for the others, and
 * memory stays bounded by the number of ranks times the share.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ferryrun.h"

static uint64_t fr_kvs_hash(const char *key)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *key != '\0'; key++) {
        h ^= (unsigned char)*key;
        h *= 0x100000001b3ull;
    }
    return h;
}

int fr_kvs_init(fr_kvs_t *kvs, int np)
{
    memset(kvs, 0, sizeof(*kvs));
    kvs->buckets = calloc(FR_KVS_BUCKETS_MIN, sizeof(*kvs->buckets));
    kvs->usage = calloc((size_t)(np > 0 ? np : 1), sizeof(*kvs->usage));
    if (kvs->buckets == NULL || kvs->usage == NULL) {
        free(kvs->buckets);
        free(kvs->usage);
        memset(kvs, 0, sizeof(*kvs));
        return -1;
    }
    kvs->n_buckets = FR_KVS_BUCKETS_MIN;
    kvs->np = np;
    size_t share = FR_KVS_BYTES_MAX / (size_t)(np > 0 ? np : 1);
    kvs->rank_bytes_max = share > FR_KVS_RANK_BYTES_MAX   ? FR_KVS_RANK_BYTES_MAX
                          : share < FR_KVS_RANK_BYTES_MIN ? FR_KVS_RANK_BYTES_MIN
                                                          : share;
    kvs->rank_keys_max = FR_KVS_RANK_KEYS_MAX;
    kvs->rank_revisions_max = FR_KVS_RANK_REVISIONS_MAX;
    return 0;
}

void fr_kvs_fini(fr_kvs_t *kvs)
{
    for (size_t b = 0; b < kvs->n_buckets; b++) {
        fr_kv_t *kv = kvs->buckets[b];
        while (kv != NULL) {
            fr_kv_t *next = kv->next;
            free(kv->key);
            free(kv->val);
            free(kv);
            kv = next;
        }
    }
    free(kvs->buckets);
    free(kvs->usage);
    memset(kvs, 0, sizeof(*kvs));
}

static fr_kv_t *fr_kvs_find(const fr_kvs_t *kvs, const char *key)
{
    if (kvs->n_buckets == 0) {
        return NULL;
    }
    size_t b = (size_t)(fr_kvs_hash(key) & (kvs->n_buckets - 1));
    for (fr_kv_t *kv = kvs->buckets[b]; kv != NULL; kv = kv->next) {
        if (strcmp(kv->key, key) == 0) {
            return kv;
        }
    }
    return NULL;
}

const char *fr_kvs_get(const fr_kvs_t *kvs, const char *key)
{
    const fr_kv_t *kv = fr_kvs_find(kvs, key);
    return kv != NULL ? kv->val : NULL;
}

long fr_kvs_key_rank(const char *key)
{
    if (key[0] < '0' || key[0] > '9' || (key[0] == '0' && key[1] != '.')) {
        return -1;
    }
    long r = 0;
    size_t i = 0;
    for (; key[i] >= '0' && key[i] <= '9'; i++) {
        if (i >= 9) {
            return -1; /* no rank has ten digits (FR_NP_MAX) */
        }
        r = r * 10 + (key[i] - '0');
    }
    return key[i] == '.' && key[i + 1] != '\0' ? r : -1;
}

/* Doubles the table when it holds twice as many keys as buckets, so that a
 * lookup stays short however many keys the ranks put. Out of memory, the
 * table simply stays as it is. */
static void fr_kvs_grow(fr_kvs_t *kvs)
{
    if (kvs->n_keys <= 2 * kvs->n_buckets || kvs->n_buckets > (SIZE_MAX >> 2) / sizeof(void *)) {
        return;
    }
    size_t n = kvs->n_buckets * 2;
    fr_kv_t **buckets = calloc(n, sizeof(*buckets));
    if (buckets == NULL) {
        return;
    }
    for (size_t b = 0; b < kvs->n_buckets; b++) {
        fr_kv_t *kv = kvs->buckets[b];
        while (kv != NULL) {
            fr_kv_t *next = kv->next;
            size_t nb = (size_t)(fr_kvs_hash(kv->key) & (n - 1));
            kv->next = buckets[nb];
            buckets[nb] = kv;
            kv = next;
        }
    }
    free(kvs->buckets);
    kvs->buckets = buckets;
    kvs->n_buckets = n;
}

const char *fr_kvs_put(fr_kvs_t *kvs, int rank, const char *key, const char *val)
{
    if (rank < 0 || rank >= kvs->np) {
        return "not_a_rank";
    }
    fr_kvs_usage_t *use = &kvs->usage[rank];
    size_t vlen = strlen(val);
    fr_kv_t *kv = fr_kvs_find(kvs, key);
    if (kv != NULL) {
        if (kv->owner != rank) {
            return "key_of_another_rank";
        }
        if (use->revisions >= kvs->rank_revisions_max) {
            return "quota_revisions";
        }
        size_t old = strlen(kv->val);
        if (vlen > old && use->bytes + (vlen - old) > kvs->rank_bytes_max) {
            return "quota_bytes";
        }
        char *copy = strdup(val);
        if (copy == NULL) {
            return "out_of_memory";
        }
        free(kv->val);
        kv->val = copy;
        use->bytes = use->bytes - old + vlen;
        kvs->bytes = kvs->bytes - old + vlen;
        use->revisions++;
        return NULL;
    }
    long reserved = fr_kvs_key_rank(key);
    if (reserved >= 0 && reserved != rank) {
        return "key_of_another_rank";
    }
    if (use->keys >= kvs->rank_keys_max) {
        return "quota_keys";
    }
    size_t cost = strlen(key) + vlen + FR_KV_OVERHEAD;
    if (use->bytes + cost > kvs->rank_bytes_max) {
        return "quota_bytes";
    }
    kv = calloc(1, sizeof(*kv));
    if (kv != NULL) {
        kv->key = strdup(key);
        kv->val = strdup(val);
    }
    if (kv == NULL || kv->key == NULL || kv->val == NULL) {
        if (kv != NULL) {
            free(kv->key);
            free(kv->val);
        }
        free(kv);
        return "out_of_memory";
    }
    kv->owner = rank;
    size_t b = (size_t)(fr_kvs_hash(key) & (kvs->n_buckets - 1));
    kv->next = kvs->buckets[b];
    kvs->buckets[b] = kv;
    kvs->n_keys++;
    kvs->bytes += cost;
    use->bytes += cost;
    use->keys++;
    fr_kvs_grow(kvs);
    return NULL;
}
