/* fuzz_modex_values: a rank's "btl.sm" address (sm_addr_decode). */
#include <stddef.h>

#include <ferry/ferry.h>

#include "fuzz_modex_values.h"
#include "btl/sm/sm.h"

void fuzz_modex_sm(const uint8_t *data, size_t size)
{
    void *val = fuzz_exact_copy(data, size);
    if (val == NULL)
        return;
    sm_addr_t addr;
    if (sm_addr_decode(val, size, &addr) == FERRY_OK) {
        size_t n = strnlen(addr.name, sizeof(addr.name));
        CHECK_FUZZ(n < sizeof(addr.name));
        CHECK_FUZZ(strncmp(addr.name, "/ferry-", 7) == 0 && strchr(addr.name + 1, '/') == NULL);
        CHECK_FUZZ(addr.version == SM_VERSION && addr.pid > 0);
        CHECK_FUZZ(addr.seg_size >= sizeof(sm_seg_hdr_t));
    }
    free(val);
}
