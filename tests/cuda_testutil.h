/*
 * cuda_testutil.h — what the CUDA conformance tests (tests/test_cuda_*.c) share: one device
 * context, a skip line and exit code 77 (ctest's SKIP_RETURN_CODE) where no GPU is present,
 * device buffers that fail the test on error, and error norms against the CPU reference.
 * Bounds come from tests/tolerance.h's error model (docs/testing.md), never from one run.
 */
#ifndef DF_TESTS_CUDA_TESTUTIL_H
#define DF_TESTS_CUDA_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "distflow/rng.h"
#include "tolerance.h"

/** The test program's device context (created by dfct_main). */
static df_cuda *dfct_cu;

#define DFCT_OK(call)                                                                  \
    do {                                                                               \
        int dfct_rc_ = (call);                                                         \
        if (dfct_rc_ != DF_OK)                                                         \
            fail_msg("%s -> %d: %s", #call, dfct_rc_, df_last_error());                \
    } while (0)

/**
 * Run the cmocka group on device 0, or print "SKIP: <prog>: no CUDA device" and return 77
 * when none is present (never a silent pass).
 */
static inline int dfct_main(const char *prog, const struct CMUnitTest *tests, size_t n_tests)
{
    int n = 0;
    df_cuda_device_count(&n);
    if (n == 0) {
        printf("SKIP: %s: no CUDA device on this machine (the CUDA backend is built; its "
               "conformance tests need a GPU)\n", prog);
        return 77;
    }
    if (df_cuda_create(0, &dfct_cu) != DF_OK) {
        fprintf(stderr, "%s: %s\n", prog, df_last_error());
        return 1;
    }
    df_cuda_info in;
    df_cuda_get_info(dfct_cu, &in);
    printf("%s: %s, compute capability %d.%d, %d SMs, %.1f GiB\n", prog, in.name, in.cc_major,
           in.cc_minor, in.n_sm, (double)in.mem_bytes / (1 << 30));
    int rc = _cmocka_run_group_tests(prog, tests, n_tests, NULL, NULL);
    df_cuda_free(dfct_cu);
    return rc;
}

/** n floats (or bytes / 4) of device memory filled with NaN: an output never written shows. */
static inline void *dfct_alloc(size_t bytes)
{
    void *d = NULL;
    DFCT_OK(df_cuda_alloc(dfct_cu, bytes, &d));
    if (bytes % sizeof(float) == 0)
        DFCT_OK(df_cuda_fill(dfct_cu, (float *)d, (int64_t)(bytes / sizeof(float)), NAN));
    return d;
}

/** A device copy of host memory. */
static inline void *dfct_up(const void *h, size_t bytes)
{
    void *d = dfct_alloc(bytes);
    DFCT_OK(df_cuda_upload(dfct_cu, d, h, bytes));
    return d;
}

/** A host copy (malloc) of device memory; waits for the stream. */
static inline void *dfct_down(const void *d, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    assert_non_null(h);
    DFCT_OK(df_cuda_download(dfct_cu, h, d, bytes));
    return h;
}

static inline void dfct_free(void *d) { df_cuda_release(dfct_cu, d); }

/* tests/golden/`leaf` of this checkout; DF_SOURCE_DIR in the environment names another (a GPU
 * machine that runs binaries built here: scripts/device-cuda.sh) */
static inline void dfct_golden_path(char *out, size_t cap, const char *leaf)
{
    const char *root = getenv("DF_SOURCE_DIR");
    snprintf(out, cap, "%s/tests/golden/%s", root && *root ? root : DF_SOURCE_DIR, leaf);
}

/** x[n] uniform in [lo, hi) from a seeded distflow RNG (fresh inputs per case). */
static inline void dfct_rand(float *x, int64_t n, uint64_t seed, float lo, float hi)
{
    df_rng r;
    df_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (float)df_rng_uniform(&r);
}

/** ||got - ref||_2 / ||ref||_2 in double; +inf if any got is NaN / inf (ref must be finite). */
static inline double dfct_rel_err(const float *got, const float *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            return INFINITY;
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/** Fail naming the op when the relative error exceeds its bound; print it either way. */
static inline void dfct_check(const char *what, const float *got, const float *ref, int64_t n,
                              double bound)
{
    double e = dfct_rel_err(got, ref, n);
    printf("  %-40s rel err %.3e (bound %.3e)\n", what, e, bound);
    if (!(e <= bound))
        fail_msg("%s: relative error %.3e exceeds %.3e", what, e, bound);
}

#endif /* DF_TESTS_CUDA_TESTUTIL_H */
