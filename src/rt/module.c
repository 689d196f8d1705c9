/*
 * Finding and loading modules (rt/module.h).
 */
#include "rt/module.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <ferry/ferry.h>

#ifndef FERRY_VERSION_STRING
#error "FERRY_VERSION_STRING must be defined by the build"
#endif

int rt_module_register_params(rt_params_t *params, const char **path_out)
{
    return rt_param_register_string(params, "module_path", "",
                                    "Folders searched first for ferry's modules (ofi, pmix), "
                                    "colon separated; then the folder 'ferry' beside libferry",
                                    path_out);
}

bool rt_module_default_dir(char *buf, size_t len)
{
    Dl_info info;
    if (dladdr((const void *)&rt_module_default_dir, &info) == 0 || info.dli_fname == NULL ||
        info.dli_fname[0] == '\0')
        return false;
    /* The real file, so that a link to the library elsewhere still finds
     * the modules installed beside it. */
    char real[PATH_MAX];
    const char *lib = realpath(info.dli_fname, real) != NULL ? real : info.dli_fname;
    const char *slash = strrchr(lib, '/');
    int n = slash == NULL ? snprintf(buf, len, "ferry")
                          : snprintf(buf, len, "%.*s/ferry", (int)(slash - lib), lib);
    return n > 0 && (size_t)n < len;
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Appends one folder to the list of those searched, for the message. */
static void note_dir(char *searched, size_t len, const char *dir, size_t dir_len)
{
    size_t used = strlen(searched);
    if (used + 1 < len)
        snprintf(searched + used, len - used, "%s%.*s", used > 0 ? ":" : "", (int)dir_len, dir);
}

/* Looks for FILE.so in each folder; path_out gets the first that exists. */
static bool find_module(const char *path_list, const char *file, char *path_out, size_t len,
                        char *searched, size_t searched_len)
{
    searched[0] = '\0';
    for (const char *p = path_list != NULL ? path_list : ""; *p != '\0';) {
        const char *end = strchr(p, ':');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (n > 0) {
            int w = snprintf(path_out, len, "%.*s/%s.so", (int)n, p, file);
            if (w > 0 && (size_t)w < len && is_file(path_out))
                return true;
            note_dir(searched, searched_len, p, n);
        }
        p += n + (end != NULL ? 1 : 0);
    }
    char dir[PATH_MAX];
    if (rt_module_default_dir(dir, sizeof(dir))) {
        int w = snprintf(path_out, len, "%s/%s.so", dir, file);
        if (w > 0 && (size_t)w < len && is_file(path_out))
            return true;
        note_dir(searched, searched_len, dir, strlen(dir));
    }
    return false;
}

int rt_module_load(const char *path_list, const char *file, const char *kind,
                   const char *name, rt_module_t *mod_out, char *why)
{
    char path[PATH_MAX];
    char searched[RT_MODULE_WHY_MAX / 2];
    if (!find_module(path_list, file, path, sizeof(path), searched, sizeof(searched))) {
        snprintf(why, RT_MODULE_WHY_MAX, "%s.so is in none of the folders searched (%s)", file,
                 searched[0] != '\0' ? searched : "none: FERRY_MODULE_PATH is empty");
        return FERRY_ERR_NOT_FOUND;
    }
    /* RTLD_LOCAL: a module's symbols are its own, and the foreign library it
     * brings cannot interpose on the program's. */
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (handle == NULL) {
        /* dlerror names the file and what it lacks, e.g. "libfabric.so.1:
         * cannot open shared object file". */
        const char *err = dlerror();
        snprintf(why, RT_MODULE_WHY_MAX, "%.500s", err != NULL ? err : path);
        return FERRY_ERR_NOT_SUPPORTED;
    }
    const rt_module_info_t *info = dlsym(handle, RT_MODULE_SYMBOL);
    if (info == NULL) {
        snprintf(why, RT_MODULE_WHY_MAX, "%.300s is not a ferry module (no symbol %s)", path,
                 RT_MODULE_SYMBOL);
        dlclose(handle);
        return FERRY_ERR_INVALID;
    }
    if (info->abi != RT_MODULE_ABI || info->version == NULL ||
        strcmp(info->version, FERRY_VERSION_STRING) != 0 || info->kind == NULL ||
        strcmp(info->kind, kind) != 0 || info->name == NULL || strcmp(info->name, name) != 0 ||
        info->entry == NULL) {
        snprintf(why, RT_MODULE_WHY_MAX,
                 "%.300s is the %.16s module '%.32s' of ferry %.16s (module ABI %u), not the %s "
                 "module '%s' of this ferry %s (module ABI %u)",
                 path, info->kind != NULL ? info->kind : "?", info->name != NULL ? info->name : "?",
                 info->version != NULL ? info->version : "?", (unsigned)info->abi, kind, name,
                 FERRY_VERSION_STRING, RT_MODULE_ABI);
        dlclose(handle);
        return FERRY_ERR_INVALID;
    }
    char *copy = strdup(path);
    if (copy == NULL) {
        dlclose(handle);
        snprintf(why, RT_MODULE_WHY_MAX, "out of memory loading %.300s", path);
        return FERRY_ERR_NO_MEMORY;
    }
    mod_out->handle = handle;
    mod_out->path = copy;
    mod_out->info = info;
    return FERRY_OK;
}

void rt_module_unload(rt_module_t *mod)
{
    if (mod == NULL)
        return;
    if (mod->handle != NULL)
        dlclose(mod->handle);
    free(mod->path);
    mod->handle = NULL;
    mod->path = NULL;
    mod->info = NULL;
}
