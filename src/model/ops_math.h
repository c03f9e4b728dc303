/*
 * ops_math.h (internal) — a branch-free expf that gcc vectorises inside
 * `#pragma omp simd` loops (glibc's vector expf needs -ffast-math, which the
 * project does not use). Accuracy: about 2 ulp over [-87, 88]; 0 below -87.3
 * (where expf is denormal or 0), +inf above 88.7.
 */
#ifndef DF_MODEL_OPS_MATH_H
#define DF_MODEL_OPS_MATH_H

#include <stdint.h>
#include <string.h>
/* Without AVX-512 the 64-byte vectors below are passed in memory; these helpers
 * are static inline, so the compilers' note that this ABI differs is moot. */
#if defined(__clang__) && !defined(__AVX512F__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__) && !defined(__AVX512F__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

static inline float df_expf(float x)
{
    const float lo = -87.33654f, hi = 88.72283f;
    float xc = x < lo ? lo : (x > hi ? hi : x);
    xc = xc == xc ? xc : 0.0f; /* NaN: reduce 0 (converting NaN to an int is undefined), return NaN */
    /* x = n ln2 + r, |r| <= ln2 / 2; ln2 split in two for an exact n*ln2_hi. */
    /* Round to nearest by adding and removing 1.5 * 2^23 (roundf would be a libm
     * call that blocks vectorisation; |x log2 e| < 2^22 here). */
    const float shifter = 12582912.0f;
    float n = (xc * 1.44269504088896341f + shifter) - shifter;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    /* Taylor series of e^r to r^7: truncation error < 4e-9 relative on |r| <= 0.347. */
    float p = 1.98412698e-4f;
    p = p * r + 1.38888889e-3f;
    p = p * r + 8.33333333e-3f;
    p = p * r + 4.16666667e-2f;
    p = p * r + 1.66666667e-1f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* Scale by 2^n in two halves so n = 128 (x near hi) does not overflow the exponent. */
    int32_t ni = (int32_t)n;
    int32_t n1 = ni >> 1, n2 = ni - n1;
    int32_t b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    float y = p * s1 * s2;
    y = x < lo ? 0.0f : y;
    y = x == x ? y : x;
    return x > hi ? __builtin_inff() : y;
}

/*
 * 16-float vectors through GCC vector extensions: one AVX-512 register where
 * the target has it, lowered to narrower instructions elsewhere. Used by the
 * register-blocked attention kernels.
 */
typedef float df_v16 __attribute__((vector_size(64)));
typedef int32_t df_v16i __attribute__((vector_size(64)));

static inline df_v16 df_v16_load(const float *p)
{
    df_v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void df_v16_store(float *p, df_v16 v) { memcpy(p, &v, sizeof v); }

static inline df_v16 df_v16_set1(float x) { return (df_v16){0} + x; }

/* m ? a : b for a comparison mask m (all bits set or clear per lane). */
static inline df_v16 df_v16_select(df_v16i m, df_v16 a, df_v16 b)
{
    return (df_v16)(((df_v16i)a & m) | ((df_v16i)b & ~m));
}

static inline df_v16 df_v16_max(df_v16 a, df_v16 b) { return df_v16_select(a > b, a, b); }

static inline float df_v16_hsum(df_v16 v)
{
    float s = 0.0f;
    for (int i = 0; i < 16; i++)
        s += v[i];
    return s;
}

static inline float df_v16_hmax(df_v16 v)
{
    float m = v[0];
    for (int i = 1; i < 16; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* df_expf on 16 lanes (same reduction and polynomial); always inlined (an out-of-line copy would
   pass 64-byte vectors in memory, which -Wpsabi rejects without AVX-512). */
static inline __attribute__((always_inline)) df_v16 df_v16_exp(df_v16 x)
{
    const df_v16 lo = df_v16_set1(-87.33654f), hi = df_v16_set1(88.72283f);
    df_v16 xc = df_v16_select(x < lo, lo, x);
    xc = df_v16_select(xc > hi, hi, xc);
    xc = df_v16_select(xc == xc, xc, df_v16_set1(0.0f)); /* NaN lanes: as df_expf */
    df_v16 n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    df_v16 r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    df_v16 p = df_v16_set1(1.98412698e-4f);
    p = p * r + 1.38888889e-3f;
    p = p * r + 8.33333333e-3f;
    p = p * r + 4.16666667e-2f;
    p = p * r + 1.66666667e-1f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    df_v16i ni = __builtin_convertvector(n, df_v16i);
    df_v16i n1 = ni >> 1, n2 = ni - n1;
    df_v16 y = p * (df_v16)((n1 + 127) << 23) * (df_v16)((n2 + 127) << 23);
    y = df_v16_select(x < lo, df_v16_set1(0.0f), y);
    y = df_v16_select(x == x, y, x);
    return df_v16_select(x > hi, df_v16_set1(__builtin_inff()), y);
}

/*
 * e^x on 16 lanes for softmax arguments (x = z - max <= 0; any x < 88.7 works),
 * the same reduction and polynomial as df_v16_exp. With AVX-512 the scaling by
 * 2^n is one vscalefps, which also gives the right gradual underflow to 0, so
 * no range selects are needed: ~15 instructions instead of ~35, the per-logit
 * cost of the LM head and of sampling. Results below -87.3 are denormal or 0
 * (df_v16_exp flushes them to 0). Elsewhere it is df_v16_exp.
 */
static inline df_v16 df_v16_exp_softmax(df_v16 x)
{
#if defined(__AVX512F__)
    __m512 v = _mm512_max_ps((__m512)x, _mm512_set1_ps(-104.0f)); /* e^-104 rounds to 0 */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), v);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.98412698e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.38888889e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.33333333e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16666667e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66666667e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return (df_v16)_mm512_scalef_ps(p, n);
#else
    return df_v16_exp(x);
#endif
}

/* ---- Gemma 2's tanh soft-caps ---- */

/* tanh(x) = 1 - 2 / (e^{2x} + 1) on 16 lanes: exactly +-1 where df_v16_exp overflows / flushes
 * to 0, else an absolute error of a few float32 ulps of 1 (the exp's ~2 ulp relative, the add,
 * the division and the subtraction, on quantities <= 2). */
static inline __attribute__((always_inline)) df_v16 df_v16_tanh(df_v16 x)
{
    const df_v16 one = df_v16_set1(1.0f);
    return one - df_v16_set1(2.0f) / (df_v16_exp(x + x) + one);
}

/* The same formula on one float (df_expf): a tail lane gives what a vector lane gives. */
static inline float df_tanh_f(float x)
{
    return 1.0f - 2.0f / (df_expf(x + x) + 1.0f);
}

/* z[0 .. n) = a tanh(z) in place: the LM head's final-logit soft-cap C on a tile row that holds
 * y / C (the logits over the cap), a = C / temperature (HF Gemma2ForCausalLM.forward). */
static inline __attribute__((always_inline)) void df_softcap_row(float *z, int64_t n, float a)
{
    const df_v16 av = df_v16_set1(a);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        df_v16_store(z + j, df_v16_tanh(df_v16_load(z + j)) * av);
    for (; j < n; j++)
        z[j] = df_tanh_f(z[j]) * a;
}

#endif /* DF_MODEL_OPS_MATH_H */
