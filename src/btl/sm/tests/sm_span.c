/*
 * The ring bytes a message takes (sm_span), which sender and reader compute
 * alike: never less than its header and payload, never running past the
 * lap (a header that lies is refused before it is used), and, for messages
 * of more than half a cache line, ending on a line so that a stream of
 * them puts each in as few lines as it can; and the header bits a commit
 * clears for the slots its message covers; sm_copy, which fills slots and
 * makes small puts and gets.
 */
#include <stdio.h>
#include <string.h>

#include "unit/check.h"
#include "btl/sm/sm.h"

#define RING 4096u

int main(void)
{
    for (uint64_t off = 0; off < RING; off += SM_ALIGN) {
        for (uint64_t len = 0; len <= RING - off - SM_HDR_SIZE; len++) {
            uint64_t size = sm_align(SM_HDR_SIZE + len);
            uint64_t span = sm_span(off, len);
            CHECK(span >= size && span - size < SM_LINE && span % SM_ALIGN == 0);
            /* What the reader accepts stays inside the lap. */
            CHECK(off + span <= RING);
            if (size > SM_LINE / 2)
                CHECK((off + span) % SM_LINE == 0);
            else
                CHECK(span == size);
        }
    }
    printf("ok  every span covers its message, stays in the lap and ends where it should\n");

    /* A stream of 40-byte puts with notification (48 ring bytes), started
     * anywhere: from the second on each lies in one line. */
    for (uint64_t start = 0; start < SM_LINE; start += SM_ALIGN) {
        uint64_t pos = start + sm_span(start, 40);
        for (int i = 0; i < 64; i++) {
            uint64_t off = pos % RING;
            CHECK(off / SM_LINE == (off + sm_align(SM_HDR_SIZE + 40) - 1) / SM_LINE);
            pos += sm_span(off, 40);
        }
    }
    /* Small messages pack as before: four 8-byte ones to a line. */
    uint64_t pos = 0;
    for (int i = 0; i < 4; i++)
        pos += sm_span(pos, 8);
    CHECK(pos == SM_LINE);
    printf("ok  messages over half a line start on lines; small ones still pack\n");

    /* The header bits a commit clears: exactly [from, to), word edges
     * included, set bits elsewhere untouched. */
    enum { WORDS = 8 };
    for (uint64_t from = 0; from < 64 * WORDS; from++) {
        for (uint64_t to = from; to <= 64 * WORDS; to++) {
            uint64_t bits[WORDS];
            for (int w = 0; w < WORDS; w++)
                bits[w] = ~(uint64_t)0;
            sm_ring_bits_clear(bits, from, to);
            for (uint64_t slot = 0; slot < 64 * WORDS; slot++)
                CHECK(sm_ring_slot_is_hdr(bits, slot) == (slot < from || slot >= to));
        }
    }
    printf("ok  a commit clears the header bits of its slots and of no others\n");

    /* sm_copy: every length a sendi's header or payload, or a small put,
     * may have, at every alignment, the bytes exactly, nothing after. */
    unsigned char src[64 + 8], dst[64 + 16];
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (unsigned char)(i * 7 + 1);
    for (size_t at = 0; at < 8; at++) {
        for (size_t n = 0; n <= 64; n++) {
            memset(dst, 0xee, sizeof(dst));
            sm_copy(dst + at, src + at, n);
            for (size_t i = 0; i < sizeof(dst); i++)
                CHECK(dst[i] == (i >= at && i < at + n ? src[i] : 0xee));
        }
    }
    printf("ok  sm_copy writes its bytes and no others\n");
    return 0;
}
