/*
 * What sm's fuzz harnesses share: one process whose sm endpoint to itself
 * is the peer (its channel to itself is a ring like any other, in its own
 * segment), a small ring, a writer that puts headers and messages where a
 * sender would (or, when asked, where it would not), and a reader for what
 * sm writes back.
 */
#ifndef SM_FUZZ_H
#define SM_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/ferry.h>

#include "btl/sm/sm.h"

/* The ring the harnesses use (FERRY_SM_RING_SIZE) and the largest message. */
#define SMF_RING 16384u
#define SMF_MAX_SEND 4096u

typedef struct smf {
    ferry_ctx_t *ctx;
    sm_module_t *mod;
    ferry_btl_endpoint_t *ep;
    uint64_t wpos; /* where the writer puts the next message */
} smf_t;

/* The fuzzer's bytes, taken from the front; zeros once they run out. */
typedef struct smf_in {
    const uint8_t *data;
    size_t size, pos;
} smf_in_t;

uint8_t smf_u8(smf_in_t *in);
uint16_t smf_u16(smf_in_t *in);
uint32_t smf_u32(smf_in_t *in);
uint64_t smf_u64(smf_in_t *in);
/* Up to n bytes (fewer when the input ends); returns how many. */
size_t smf_bytes(smf_in_t *in, void *out, size_t n);

/* The process and its endpoint, made once. Aborts if sm cannot open. */
smf_t *smf_get(void);

/* Empties the ring and starts both ends at position start (any lap). */
void smf_reset(smf_t *f, uint64_t start);

/* Fails what is pending and runs the completions, so that the next input
 * starts clean. */
void smf_settle(smf_t *f);

/* Writes a message at the writer's position as a sender would (a SKIP
 * first when it does not fit before the lap's end, the next header's
 * place zeroed). hdr_len is what the header says the length is (normally
 * len), lap_off is added to the header's lap (normally 0). Returns a
 * pointer to the message's payload in the ring, or NULL when the ring has
 * no room. */
unsigned char *smf_write(smf_t *f, uint8_t type, uint8_t tag, const void *payload, uint32_t len,
                         uint32_t hdr_len, uint16_t lap_off);

/* Makes sm's own writes (answers) go after what the writer wrote. */
void smf_hand_over(smf_t *f);

/* Reads the next message sm wrote after rpos (the reader's position,
 * advanced past it); false when there is none. */
bool smf_read(smf_t *f, uint64_t *rpos, uint8_t *type, const unsigned char **msg, uint32_t *len);

#endif /* SM_FUZZ_H */
