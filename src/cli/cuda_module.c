/* Loading libdistflow_cuda.so from the executable's folder (cuda_module.h). */
#include "cli/cuda_module.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MODULE_FILE "libdistflow_cuda.so"

static const df_cuda_module *loaded;

/* <folder of /proc/self/exe>/libdistflow_cuda.so: the build puts both in one folder. */
static int module_path(char *out, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return df_error(DF_EIO, "finding the CUDA module: reading /proc/self/exe: %s", strerror(errno));
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    if ((size_t)snprintf(out, cap, "%s/%s", slash ? exe : ".", MODULE_FILE) >= cap)
        return df_error(DF_EIO, "finding the CUDA module: path of %s too long", exe);
    return DF_OK;
}

int df_cli_cuda_module(const df_cuda_module **out)
{
    if (!loaded) {
        char path[PATH_MAX + sizeof MODULE_FILE + 1];
        int rc = module_path(path, sizeof path);
        if (rc)
            return rc;
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            return df_error(DF_EUNSUPPORTED, "loading the CUDA backend: %s (the build puts %s "
                            "beside the distflow executable: docs/cuda.md)", dlerror(), MODULE_FILE);
        const df_cuda_module *(*get)(void) = (const df_cuda_module *(*)(void))dlsym(h, DF_CUDA_MODULE_ENTRY);
        const df_cuda_module *m = get ? get() : NULL;
        if (!m || m->module_bytes != sizeof *m || m->ops_bytes != sizeof(df_backend_ops) ||
            m->info_bytes != sizeof(df_cuda_info)) {
            dlclose(h);
            return df_error(DF_EUNSUPPORTED, "%s is not the CUDA module of this distflow build (%s)",
                            path, get ? "its layouts differ" : "no " DF_CUDA_MODULE_ENTRY);
        }
        loaded = m; /* the handle stays open for the process's life */
    }
    *out = loaded;
    return DF_OK;
}

int df_cli_cuda_backend_open(df_backend *out)
{
    const df_cuda_module *m;
    int rc = df_cli_cuda_module(&m);
    return rc ? rc : m->backend_open(out);
}
