/*
 * Backends by name (distflow/backend.h): "cpu" built in, others registered by the program that
 * links them (a CPU-only library cannot name the CUDA one). Each is opened once per process:
 * a GPU context serves every model of the rank.
 */
#include "distflow/backend.h"

#include "util/memstat.h"

#include <stdio.h>
#include <string.h>

enum { MAX_BACKENDS = 8 };

static struct {
    char name[32];
    df_backend_open_fn open;
    bool opened;
    df_backend be;
} reg[MAX_BACKENDS];
static int n_reg;
static char names[MAX_BACKENDS * 34 + 8] = "cpu";

static int find(const char *name)
{
    for (int i = 0; i < n_reg; i++)
        if (!strcmp(reg[i].name, name))
            return i;
    return -1;
}

int df_backend_register(const char *name, df_backend_open_fn open)
{
    if (!name || !*name || strlen(name) >= sizeof reg[0].name || !strcmp(name, "cpu") || !open)
        return df_error(DF_EINVAL, "df_backend_register: bad backend name or open function");
    int i = find(name);
    if (i < 0) {
        if (n_reg == MAX_BACKENDS)
            return df_error(DF_EINVAL, "df_backend_register: more than %d backends", MAX_BACKENDS);
        i = n_reg++;
        snprintf(reg[i].name, sizeof reg[i].name, "%s", name);
        size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, ", %s", name);
    }
    reg[i].open = open;
    reg[i].opened = false;
    return DF_OK;
}

bool df_backend_available(const char *name)
{
    return name && (!strcmp(name, "cpu") || find(name) >= 0);
}

const char *df_backend_names(void)
{
    return names;
}

int df_backend_open(const char *name, df_backend *out)
{
    if (name && !strcmp(name, "cpu")) {
        *out = df_backend_cpu();
        return DF_OK;
    }
    int i = name ? find(name) : -1;
    if (i < 0)
        return df_error(DF_EUNSUPPORTED, "device '%s': this build of distflow has the %s "
                        "backend%s only (the CUDA backend is built where CMake finds nvcc and the "
                        "CUDA toolkit: docs/cuda.md)", name ? name : "(null)", names,
                        n_reg ? "s" : "");
    if (!reg[i].opened) {
        int rc = reg[i].open(&reg[i].be);
        if (rc)
            return df_error_wrap(rc, "opening the %s backend", name);
        reg[i].opened = true;
    }
    *out = reg[i].be;
    return DF_OK;
}

double df_device_peak_flops(const char *device_name)
{
    /* verl's table in its lookup order (sorted(..., reverse=True)): a longer key first where
       one contains another */
    static const struct {
        const char *key;
        double flops;
    } peak[] = {
        {"RTX 3070 Ti", 21.75e12}, {"MI300X", 1336e12}, {"L40S", 362.05e12}, {"L40", 181.05e12},
        {"L20", 119.5e12},         {"H800", 989e12},    {"H200", 989e12},    {"H20", 148e12},
        {"H100", 989e12},          {"GB200", 2.5e15},   {"CPU", 448e9},      {"B200", 2.25e15},
        {"Ascend910", 354e12},     {"A800", 312e12},    {"A40", 149.7e12},   {"A100", 312e12},
        {"910B", 354e12},
    };
    const char *name = device_name ? device_name : "CPU";
    for (size_t i = 0; i < sizeof peak / sizeof *peak; i++)
        if (strstr(name, peak[i].key))
            return peak[i].flops;
    return 0;
}

int64_t df_backend_memory_peak(const df_backend *b)
{
    if (b && b->ops && b->ops->memory_peak)
        return b->ops->memory_peak(b->ctx);
    return df_process_peak_rss_bytes();
}

double df_backend_peak_flops(const df_backend *b)
{
    const char *name = b && b->ops && b->ops->device_name ? b->ops->device_name(b->ctx) : NULL;
    return df_device_peak_flops(name);
}
