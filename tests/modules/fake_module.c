/*
 * Stand-ins for ferry_btl_ofi.so that the loader must refuse, each with the
 * reason it gives (tests/modules/run_modules.sh):
 * - FAKE_ABI: from another build (another module ABI and version);
 * - FAKE_KIND: a modex backend under a transport's file name;
 * - FAKE_MISSING: needs a library the loader cannot find.
 * None is ever used: entry points at something that is no component.
 */
#include "rt/module.h"

#if defined(FAKE_MISSING)
extern const int ferry_test_absent;
#define FAKE_ENTRY (&ferry_test_absent)
#else
static const int fake_entry;
#define FAKE_ENTRY (&fake_entry)
#endif

#if defined(FAKE_ABI)
#define FAKE_ABI_NUMBER 999u
#define FAKE_VERSION "0.0.0"
#else
#define FAKE_ABI_NUMBER RT_MODULE_ABI
#define FAKE_VERSION FERRY_VERSION_STRING
#endif

#if defined(FAKE_KIND)
#define FAKE_KIND_NAME "modex"
#else
#define FAKE_KIND_NAME "btl"
#endif

__attribute__((visibility("default"))) const rt_module_info_t ferry_module = {
    .abi = FAKE_ABI_NUMBER,
    .version = FAKE_VERSION,
    .kind = FAKE_KIND_NAME,
    .name = "ofi",
    .entry = FAKE_ENTRY,
};
