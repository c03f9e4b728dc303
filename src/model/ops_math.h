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

static inline float df_expf(float x)
{
    const float lo = -87.33654f, hi = 88.72283f;
    float xc = x < lo ? lo : (x > hi ? hi : x);
    /* x = n ln2 + r, |r| <= ln2 / 2; ln2 split in two for an exact n*ln2_hi. */
    float n = __builtin_roundf(xc * 1.44269504088896341f);
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
    return x > hi ? __builtin_inff() : y;
}

#endif /* DF_MODEL_OPS_MATH_H */
