/*
 * Modules: the parts of ferry that need a foreign library (the ofi transport:
 * libfabric; the pmix modex backend: libpmix) are shared objects loaded with
 * dlopen when they are asked for, so that a program that does not use them
 * never maps that library, runs its constructors or pays its start-up cost.
 * libfabric's DL providers and Open MPI's MCA components work the same way.
 *
 * A module is "NAME.so" (e.g. ferry_btl_ofi.so) in one of these folders,
 * searched in this order:
 *   1. each folder of FERRY_MODULE_PATH (a colon-separated list);
 *   2. the folder "ferry" beside the shared library that holds this code
 *      (${libdir}/ferry once installed; the build folder's ferry/ before).
 * It exports one symbol, ferry_module (rt_module_info_t), and links the
 * shared library for the internals it uses; those are exported under the
 * private symbol version FERRY_PRIVATE_<version> (cmake/libferry.map), which
 * is no interface: a module loads only into the ferry it was built with.
 *
 * The static library holds its modules' code itself and never loads one.
 */
#ifndef RT_MODULE_H
#define RT_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rt/params.h"

/* Changes whenever what a module and the library share changes shape. */
#define RT_MODULE_ABI 1u

/* The name of the one symbol a module exports. */
#define RT_MODULE_SYMBOL "ferry_module"

/* What a module says about itself. */
typedef struct rt_module_info {
    uint32_t abi;        /* RT_MODULE_ABI of the build it comes from */
    const char *version; /* ferry's version, as "0.1.0" */
    const char *kind;    /* "btl" (a transport) or "modex" (a launcher backend) */
    const char *name;    /* "ofi", "pmix" */
    /* For "btl": const ferry_btl_component_t *; for "modex": const
     * rt_modex_backend_t * (rt/modex_impl.h). */
    const void *entry;
} rt_module_info_t;

/* Defined by the generated file each module is built with (cmake/module.c.in). */
extern const rt_module_info_t ferry_module;

/* A loaded module. */
typedef struct rt_module {
    void *handle;
    char *path; /* the file it came from, malloc'd */
    const rt_module_info_t *info;
} rt_module_t;

/* Longest reason rt_module_load writes: one line. */
#define RT_MODULE_WHY_MAX 512

/* Registers FERRY_MODULE_PATH; *path_out points into the registry. */
int rt_module_register_params(rt_params_t *params, const char **path_out);

/* Finds FILE.so in the folders above (path_list is FERRY_MODULE_PATH's
 * value, may be NULL or empty), loads it and checks that it is the module
 * of that kind and name from this build. On failure nothing stays loaded,
 * *mod_out is untouched and why (of RT_MODULE_WHY_MAX bytes) holds one line
 * saying why, naming the file or the folders searched:
 *   FERRY_ERR_NOT_FOUND      no folder holds FILE.so;
 *   FERRY_ERR_NOT_SUPPORTED  dlopen refused it (e.g. libfabric is missing);
 *   FERRY_ERR_INVALID        it is not the expected module of this build.
 * Modules are never unmapped (RTLD_NODELETE): foreign libraries are rarely
 * safe to unload, and a pointer into one may outlive its last user. */
int rt_module_load(const char *path_list, const char *file, const char *kind,
                   const char *name, rt_module_t *mod_out, char *why);

/* Drops the reference rt_module_load took and frees mod's path. Safe on a
 * zeroed object. */
void rt_module_unload(rt_module_t *mod);

/* The default folder (2. above) into buf; false when it cannot be told.
 * In a program linked with the static library it is beside the program,
 * which does not matter: that library has its modules built in. */
bool rt_module_default_dir(char *buf, size_t len);

#endif /* RT_MODULE_H */
