/* fuzz_modex_values: a rank's "btl.tcp" addresses (tcp_addr_decode). */
#include <stddef.h>

#include <ferry/ferry.h>

#include "fuzz_modex_values.h"
#include "btl/tcp/tcp.h"

void fuzz_modex_tcp(const uint8_t *data, size_t size)
{
    void *val = fuzz_exact_copy(data, size);
    if (val == NULL)
        return;
    tcp_addr_blob_t blob;
    if (tcp_addr_decode(val, size, &blob) == FERRY_OK) {
        CHECK_FUZZ(blob.count <= TCP_MAX_ADDRS);
        CHECK_FUZZ(size == offsetof(tcp_addr_blob_t, entry) +
                               (size_t)blob.count * sizeof(tcp_addr_entry_t));
        CHECK_FUZZ(blob.magic == (uint32_t)TCP_MAGIC && blob.version == TCP_VERSION);
    }
    free(val);
}
