/*
 * kvariants.h — running kernels under every kernel variant this CPU supports
 * (include/distflow/platform.h) and comparing the results within per-element
 * bounds from an error analysis (tolerance.h). Two variants each within B of
 * the exact value differ by at most 2 B, so every check below is
 * |a - b| <= 2 B with B a bound on one variant's error.
 */
#ifndef DF_TESTS_KVARIANTS_H
#define DF_TESTS_KVARIANTS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "distflow/platform.h"
#include "tolerance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_MAX 3
#define KV_U DF_U32

/** The compiled variants this CPU runs, lowest first. */
typedef struct {
    char name[KV_MAX][16];
    int n;
} kv_list;

static inline kv_list kv_runnable(void)
{
    kv_list l = {{{0}}, 0};
    df_cpu_info c;
    df_cpu_detect(&c);
    char buf[64];
    snprintf(buf, sizeof buf, "%s", df_kernels_compiled());
    for (char *s = strtok(buf, " "); s && l.n < KV_MAX; s = strtok(NULL, " "))
        if (df_kernels_check(s, &c) == DF_OK)
            snprintf(l.name[l.n++], sizeof l.name[0], "%s", s);
    return l;
}

/** Skip (pass) the calling test when fewer than two variants can be compared. */
#define KV_REQUIRE_TWO(l)                                                                         \
    do {                                                                                          \
        if ((l).n < 2) {                                                                          \
            print_message("only the %s kernels run here: nothing to compare\n", (l).name[0]);     \
            skip();                                                                               \
        }                                                                                         \
    } while (0)

static inline void kv_use(const char *name)
{
    if (df_kernels_select(name))
        fail_msg("select %s: %s", name, df_last_error());
}

/** Back to what the environment asks for (DF_CPU_VARIANT or the best). */
static inline void kv_restore(void) { df_kernels_init(); }

/** |a[i] - b[i]| <= 2 bound[i] for all i (NaN fails). */
static inline void kv_check(const char *what, const char *va, const double *a, const char *vb,
                            const double *b, const double *bound, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= 2.0 * bound[i]))
            fail_msg("%s[%lld]: %s %.9g vs %s %.9g, |diff| %.3g > 2 x bound %.3g", what,
                     (long long)i, va, a[i], vb, b[i], d, bound[i]);
    }
}

/** kv_check of float results (widened). */
static inline void kv_check_f(const char *what, const char *va, const float *a, const char *vb,
                              const float *b, const double *bound, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= 2.0 * bound[i]))
            fail_msg("%s[%lld]: %s %.9g vs %s %.9g, |diff| %.3g > 2 x bound %.3g", what,
                     (long long)i, va, (double)a[i], vb, (double)b[i], d, bound[i]);
    }
}

/** gamma_n in float32. */
static inline double kv_g(double n) { return df_tol_gamma(n, KV_U); }

/**
 * Relative error of df_expf / df_v16_exp / df_v16_exp_softmax (model/ops_math.h)
 * for arguments in [-87, 88], from their construction (x = n ln2 + r, a degree-7
 * Taylor polynomial in Horner form, scaling by 2^n exact):
 *   reduction: |r| <= ln2/2 + u|x| ln2 < 0.3467; r carries an absolute error
 *     <= u (|r1| + |r| + 3 |n| ln2_lo) <= 0.8 u (n ln2_hi is exact), which is a
 *     relative error <= 0.8 u of e^r;
 *   coefficients rounded to float: <= u sum|c_k r^k| <= u e^|r| <= 2 u e^r;
 *   Horner evaluation (Higham eq. 5.3): gamma_14 sum|c_k||r|^k <= 2 gamma_14 e^r;
 *   truncation: |r|^8 / 8! e^|r| / e^-|r| < 7.5e-9.
 */
static inline double kv_exp_err(void) { return 0.8 * KV_U + 2 * KV_U + 2 * kv_g(14) + 7.5e-9; }

/** e^x - 1 for the small x the bounds add up (stays a bound: e^x - 1 >= x). */
static inline double kv_grow(double x) { return expm1(x); }

static inline float *kv_fvec(int64_t n)
{
    float *p = aligned_alloc(64, ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) / 64 * 64);
    assert_non_null(p);
    return p;
}

static inline double *kv_dvec(int64_t n)
{
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    assert_non_null(p);
    return p;
}

/** Uniform values in [lo, hi) from a small LCG (deterministic, no library state). */
static inline void kv_fill(float *x, int64_t n, uint64_t seed, double lo, double hi)
{
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)(lo + (hi - lo) * (double)(s >> 11) * 0x1p-53);
    }
}

#endif /* DF_TESTS_KVARIANTS_H */
