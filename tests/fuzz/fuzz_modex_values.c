/*
 * Fuzz harness: what the launcher hands back as other ranks' values. The
 * first byte picks the reader:
 *   0  a value as the PMIx server returns it (modex_pmix_value_take): two
 *      bytes of pmix data type, one byte of flags (bit 0: claim a size past
 *      RT_MODEX_VAL_MAX over a short buffer, as a broken or hostile server
 *      could), the rest the bytes;
 *   1  a rank's "btl.tcp" addresses (tcp_addr_decode);
 *   2  a rank's "btl.sm" address (sm_addr_decode).
 * Besides not crashing or reading past the input, whatever a reader
 * accepts must be what it promises: a PMIx value is a byte object no
 * longer than RT_MODEX_VAL_MAX copied exactly; tcp's count and length
 * agree; sm's name is a NUL-terminated ferry segment name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/ferry.h>

#include "fuzz.h"
#include "fuzz_modex_values.h"
#include "rt/log.h"
#include "rt/modex_impl.h"
#ifdef FUZZ_HAVE_PMIX
#include "rt/modex_pmix_value.h"
#endif

static rt_log_t quiet;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    rt_log_init(&quiet);
    quiet.level = RT_LOG_ERROR;
    return 0;
}

#ifdef FUZZ_HAVE_PMIX
static void pmix_value(const uint8_t *data, size_t size)
{
    if (size < 3)
        return;
    pmix_value_t val;
    memset(&val, 0, sizeof(val));
    val.type = (pmix_data_type_t)(data[0] | data[1] << 8);
    bool lie = data[2] & 1;
    /* The bytes in a buffer of their own, so that ASan sees any read past
     * what the server gave. */
    size_t n = size - 3;
    char *bytes = n > 0 ? malloc(n) : NULL;
    if (n > 0 && bytes == NULL)
        return;
    if (n > 0)
        memcpy(bytes, data + 3, n);
    val.data.bo.bytes = bytes;
    val.data.bo.size = lie ? RT_MODEX_VAL_MAX + 1 + n : n;
    void *out = NULL;
    size_t len = 0;
    int rc = modex_pmix_value_take(&quiet, 1, "btl.fuzz", &val, &out, &len);
    if (rc == FERRY_OK) {
        CHECK_FUZZ(val.type == PMIX_BYTE_OBJECT && !lie);
        CHECK_FUZZ(len == n && out != NULL);
        CHECK_FUZZ(n == 0 || memcmp(out, bytes, n) == 0);
        free(out);
    } else {
        CHECK_FUZZ(rc == FERRY_ERR_PROTO || rc == FERRY_ERR_NO_MEMORY);
        CHECK_FUZZ(val.type != PMIX_BYTE_OBJECT || lie);
    }
    free(bytes);
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0]) {
#ifdef FUZZ_HAVE_PMIX
    case 0:
        pmix_value(data + 1, size - 1);
        break;
#endif
    case 1:
        fuzz_modex_tcp(data + 1, size - 1);
        break;
    case 2:
        fuzz_modex_sm(data + 1, size - 1);
        break;
    default:
        break;
    }
    return 0;
}
