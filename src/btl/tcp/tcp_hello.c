/*
 * The hello: how two ranks prove to each other that they hold the job's key
 * without sending it, and the checks of every hello message. These are
 * plain functions of bytes (no socket, no endpoint), so that the fuzz
 * harness drives them as the endpoints do (tcp_endpoint.c).
 *
 *   connector -> listener  OPEN     from, to, size, job, nonce_c
 *   listener  -> connector PROVE    nonce_l, MAC(listener)
 *   connector -> listener  ANSWER   MAC(connector)
 *   listener  -> connector VERDICT  status, MAC(verdict)
 *
 * Each MAC (HMAC-SHA-256, src/rt/auth.h) covers a label naming its role, the
 * job's id and size, both ranks, both nonces and the listener's address as
 * the connector dialed it, and the step and status. So the connector
 * reveals nothing usable before the listener has proven itself; a proof is
 * worth nothing in another connection (fresh nonces), in the other
 * direction or sent back to its maker (the label), for another pair of
 * ranks, another job, or through a relay that listens elsewhere (the
 * address).
 */
#include <string.h>

#include "btl/tcp/tcp.h"

uint64_t tcp_job_hash(const char *job_id)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (const char *p = job_id; *p != '\0'; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return h;
}

int tcp_jobkey_derive(const uint8_t secret[TCP_KEY_LEN], uint8_t key_out[TCP_KEY_LEN])
{
    /* The transport's key is the launcher's secret put through the MAC
     * under a label of its own, so that no proof made with one is a proof
     * made with the other. */
    static const char label[] = "ferry tcp job key";
    rt_auth_part_t part = {label, sizeof(label) - 1};
    return rt_auth_mac(secret, &part, 1, key_out);
}

void tcp_hello_fill(tcp_hello_t *h, uint8_t step, int32_t from, int32_t to, int32_t size,
                    uint64_t job)
{
    memset(h, 0, sizeof(*h));
    h->magic = TCP_MAGIC;
    h->version = TCP_VERSION;
    h->step = step;
    h->from = from;
    h->to = to;
    h->size = size;
    h->job = job;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    uint8_t any = 0;
    for (size_t i = 0; i < n; i++)
        any |= p[i];
    return any == 0;
}

const char *tcp_hello_check(const tcp_hello_t *h, const tcp_hello_want_t *w)
{
    if (h->magic != TCP_MAGIC)
        return "not a ferry tcp hello";
    if (h->version != TCP_VERSION)
        return "another protocol version";
    if (h->step != w->step)
        return "a hello message out of order";
    bool has_nonce = h->step == TCP_HELLO_OPEN || h->step == TCP_HELLO_PROVE;
    bool has_mac = h->step != TCP_HELLO_OPEN;
    if (h->zero != 0 || h->zero2 != 0 || (h->step != TCP_HELLO_VERDICT && h->status != 0) ||
        h->status > TCP_HELLO_REFUSED || (!has_nonce && !all_zero(h->nonce, sizeof(h->nonce))) ||
        (!has_mac && !all_zero(h->mac, sizeof(h->mac))))
        return "a malformed hello";
    if (h->job != w->job)
        return "a hello from another job";
    if (h->size != w->size || h->from < 0 || h->from >= w->size || h->from == w->me)
        return "a rank outside this job";
    if (w->from >= 0 && h->from != w->from)
        return "another rank";
    if (h->to != w->me)
        return "a hello for another rank";
    return NULL;
}

int tcp_hello_mac(const uint8_t key[TCP_KEY_LEN], const char *job_id, int32_t size,
                  const tcp_session_t *s, uint8_t step, uint8_t status,
                  uint8_t mac_out[TCP_MAC_LEN])
{
    const char *label = step == TCP_HELLO_PROVE    ? "ferry tcp hello: listener"
                        : step == TCP_HELLO_ANSWER ? "ferry tcp hello: connector"
                                                   : "ferry tcp hello: verdict";
    int32_t ranks[3] = {size, s->rank_c, s->rank_l};
    /* The address as family, port (little endian) and the bytes that count. */
    uint8_t at[19] = {s->at.family, (uint8_t)s->at.port, (uint8_t)(s->at.port >> 8)};
    memcpy(at + 3, s->at.addr, s->at.family == 4 ? 4 : 16);
    uint8_t how[2] = {step, status};
    const rt_auth_part_t parts[] = {
        {label, strlen(label)},
        {job_id, strlen(job_id)},
        {ranks, sizeof(ranks)},
        {s->nonce_c, sizeof(s->nonce_c)},
        {s->nonce_l, sizeof(s->nonce_l)},
        {at, sizeof(at)},
        {how, sizeof(how)},
    };
    return rt_auth_mac(key, parts, sizeof(parts) / sizeof(parts[0]), mac_out);
}

bool tcp_hello_proves(const uint8_t key[TCP_KEY_LEN], const char *job_id, int32_t size,
                      const tcp_session_t *s, const tcp_hello_t *h)
{
    uint8_t want[TCP_MAC_LEN];
    if (h->step == TCP_HELLO_OPEN ||
        tcp_hello_mac(key, job_id, size, s, h->step, h->status, want) != FERRY_OK)
        return false;
    bool ok = rt_auth_equal(want, h->mac, sizeof(want));
    rt_auth_wipe(want, sizeof(want));
    return ok;
}
