/*
 * Kernel variant selection (distflow/platform.h, util/kernels.h): which copy of
 * the hot kernels runs, checked against CPUID / XCR0, forced by DF_CPU_VARIANT.
 */
#include "util/kernels.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQ_END DF_CPU_N_FEATURES
#ifndef DF_BUILD_NATIVE /* CMake: 1 in a DF_NATIVE=ON build */
#define DF_BUILD_NATIVE 0
#endif

/* x86-64-v2 and -v3 as the avx2 variant's -m flags enable them (cmake/KernelVariants.cmake). */
#define REQ_V3                                                                                    \
    DF_CPU_SSE3, DF_CPU_SSSE3, DF_CPU_SSE41, DF_CPU_SSE42, DF_CPU_POPCNT, DF_CPU_AVX,            \
        DF_CPU_AVX2, DF_CPU_FMA, DF_CPU_F16C, DF_CPU_BMI1, DF_CPU_BMI2, DF_CPU_LZCNT,             \
        DF_CPU_MOVBE, DF_CPU_OS_AVX
#define REQ_V4                                                                                    \
    REQ_V3, DF_CPU_AVX512F, DF_CPU_AVX512CD, DF_CPU_AVX512BW, DF_CPU_AVX512DQ, DF_CPU_AVX512VL,  \
        DF_CPU_OS_AVX512

typedef struct {
    const char *name;
    df_cpu_feature needs[24]; /* ends at REQ_END */
} variant;

#if defined(DF_KERNELS_SINGLE)
/* One variant; for -march=native, the features the compiler was allowed to use. */
static const variant variants[] = {{DF_KERNELS_SINGLE,
                                    {
#if defined(__AVX2__)
                                        DF_CPU_AVX2, DF_CPU_OS_AVX,
#endif
#if defined(__FMA__)
                                        DF_CPU_FMA,
#endif
#if defined(__AVX512F__)
                                        DF_CPU_AVX512F, DF_CPU_OS_AVX512,
#endif
#if defined(__AVX512BW__)
                                        DF_CPU_AVX512BW,
#endif
#if defined(__AVX512BF16__)
                                        DF_CPU_AVX512_BF16,
#endif
                                        REQ_END}}};
#else
static const variant variants[DF_KV_COUNT] = {
    [DF_KV_GENERIC] = {"generic", {REQ_END}},
    [DF_KV_AVX2] = {"avx2", {REQ_V3, REQ_END}},
    [DF_KV_AVX512] = {"avx512", {REQ_V4, REQ_END}},
};
#endif
#define N_VARIANTS ((int)(sizeof variants / sizeof variants[0]))

static atomic_int active = -1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char reason[320]; /* guarded by lock */

static bool is_auto(const char *name) { return !name || !*name || !strcmp(name, "auto"); }

static int find(const char *name)
{
    for (int v = 0; v < N_VARIANTS; v++)
        if (!strcmp(name, variants[v].name))
            return v;
    return -1;
}

/* 0 when variant v runs on c; otherwise the error code, with the message in msg. */
static int check(int v, const df_cpu_info *c, char *msg, size_t n)
{
    for (const df_cpu_feature *f = variants[v].needs; *f != REQ_END; f++) {
        if (c->has[*f])
            continue;
        const char *nm = df_cpu_feature_name(*f);
        if (!strncmp(nm, "os_", 3))
            snprintf(msg, n,
                     "kernel variant %s needs the %s register state, which the operating system "
                     "has not enabled (XCR0 = 0x%llx)",
                     variants[v].name, nm + 3, (unsigned long long)c->xcr0);
        else
            snprintf(msg, n, "kernel variant %s needs %s, which this CPU does not have",
                     variants[v].name, nm);
        return DF_EUNSUPPORTED;
    }
    return DF_OK;
}

/* The highest variant c runs, or -1 (only when a native build's CPU check fails). */
static int best(const df_cpu_info *c)
{
    char msg[160];
    for (int v = N_VARIANTS - 1; v >= 0; v--)
        if (!check(v, c, msg, sizeof msg))
            return v;
    return -1;
}

/* Index of name on c, or -1 with the error code in *rc and the message in msg. */
static int resolve(const char *name, const df_cpu_info *c, int *rc, char *msg, size_t n)
{
    int v = is_auto(name) ? N_VARIANTS - 1 : find(name);
    if (v < 0) {
        snprintf(msg, n, "unknown kernel variant \"%s\" (this build has: %s, auto)", name,
                 DF_KERNELS_COMPILED);
        *rc = DF_EINVAL;
        return -1;
    }
    *rc = check(v, c, msg, n);
    if (*rc && is_auto(name) && (v = best(c)) >= 0)
        *rc = DF_OK;
    return *rc ? -1 : v;
}

/* Select name under the lock; why says who asked. Returns 0 or the error code. */
static int select_locked(const char *name, const char *why, char *msg, size_t n)
{
    df_cpu_info c;
    df_cpu_detect(&c);
    int rc = DF_OK, v = resolve(name, &c, &rc, msg, n);
    if (v < 0)
        return rc;
    if (N_VARIANTS == 1)
        snprintf(reason, sizeof reason, "the only variant of this build%s",
                 DF_BUILD_NATIVE ? " (DF_NATIVE=ON: -march=native)" : "");
    else if (is_auto(name))
        snprintf(reason, sizeof reason, "%s%sbest this CPU supports", why, *why ? "; using the " : "");
    else
        snprintf(reason, sizeof reason, "%s", why);
    atomic_store_explicit(&active, v, memory_order_release);
    return DF_OK;
}

int df_kernels_select(const char *name)
{
    char msg[256];
    pthread_mutex_lock(&lock);
    int rc = select_locked(name, "selected by df_kernels_select", msg, sizeof msg);
    pthread_mutex_unlock(&lock);
    return rc ? df_error(rc, "%s", msg) : DF_OK;
}

/* Selection from DF_CPU_VARIANT under the lock; msg receives the error. */
static int init_locked(const char **env, char *msg, size_t n)
{
    *env = getenv("DF_CPU_VARIANT");
    char why[96] = "";
    if (*env && **env && strcmp(*env, "auto"))
        snprintf(why, sizeof why, "forced by DF_CPU_VARIANT=%.60s", *env);
    return select_locked(*env, why, msg, n);
}

int df_kernels_init(void)
{
    char msg[256];
    const char *env;
    pthread_mutex_lock(&lock);
    int rc = init_locked(&env, msg, sizeof msg);
    pthread_mutex_unlock(&lock);
    return rc ? df_error(rc, "DF_CPU_VARIANT=%s: %s", env, msg) : DF_OK;
}

/* First kernel call: as df_kernels_init, but a bad DF_CPU_VARIANT falls back to
 * the best variant (library code cannot stop the program) and says so. */
static int lazy_select(void)
{
    pthread_mutex_lock(&lock);
    if (atomic_load_explicit(&active, memory_order_acquire) < 0) {
        char msg[256], why[300];
        const char *env;
        if (init_locked(&env, msg, sizeof msg)) {
            snprintf(why, sizeof why, "DF_CPU_VARIANT=%.40s ignored: %.200s", env, msg);
            if (select_locked(NULL, why, msg, sizeof msg)) { /* a native build on a lesser CPU */
                snprintf(reason, sizeof reason, "%.300s", msg);
                atomic_store_explicit(&active, 0, memory_order_release);
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return atomic_load_explicit(&active, memory_order_acquire);
}

int df_kernels_index(void)
{
    int v = atomic_load_explicit(&active, memory_order_acquire);
    return v >= 0 ? v : lazy_select();
}

const char *df_kernels_active(void) { return variants[df_kernels_index()].name; }

const char *df_kernels_reason(void)
{
    df_kernels_index();
    return reason;
}

const char *df_kernels_compiled(void) { return DF_KERNELS_COMPILED; }

int df_kernels_check(const char *name, const df_cpu_info *c)
{
    char msg[256];
    int rc = DF_OK;
    if (resolve(name, c, &rc, msg, sizeof msg) < 0)
        return df_error(rc, "%s", msg);
    return DF_OK;
}
