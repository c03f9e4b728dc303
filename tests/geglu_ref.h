/*
 * geglu_ref.h (tests) — the float64 value of GeGLU (gelu_tanh(gate) * up, Gemma 3's MLP) and
 * its backward at one element, with the bound on how far a float32 evaluation of
 * df_geglu_fwd / _bwd's formula (src/model/ops_basic.c; the CUDA kernel evaluates the same
 * one) can be from it. Shared by test_ops, test_backend_ops, test_kernel_variants and
 * test_cuda_elementwise; each passes the relative error of its exp (E) and the unit roundoff.
 *
 * Exact: z = 2 k0 (g + k1 g^3), k0 = sqrt(2 / pi), k1 = 0.044715; s = 1 / (1 + e^-z);
 * out = g s u; dup = d g s; dgate = d u s F, F = 1 + 2 k0 g (1 - s) (1 + 3 k1 g^2).
 *
 * Error analysis (standard model, gamma_n = n u / (1 - n u)):
 * - z: the constants 2 k0 and k1 are rounded (u each); k1 g^2 g is three more roundings, the
 *   add of two terms of one sign one more, the product by 2 k0 one: |dz| <= gamma_7 |z|.
 * - e = exp(-z): the argument's error moves it by e^|dz| - 1 relative, the exp adds E; 1 + e
 *   carries (1 - s) of that relatively (e / (1 + e) = 1 - s), and the add and the division
 *   gamma_2: ds = (1 - s)(e^|dz| - 1 + E) + gamma_2, relative to s. Where e overflows float
 *   (or s is subnormal: -z > 87) s is 0 or below 2^-126 on both sides: ds = 2 covers it.
 * - out = (g / (1 + e)) u: ds + gamma_1; dup = (d g) s: ds + gamma_2.
 * - 1 - s is off by s ds + u (1 - s) absolutely (and by e^-z <= 2^-126 where exp flushes to
 *   0). P = 1 + 3 k1 g^2 >= 1: gamma_4 relative. Q = (2 k0 g)(1 - s) P: |dQ| <= |2 k0 g| P
 *   (s ds + u (1 - s) + 2^-126) + gamma_5 |Q| (the constant and three products), F = 1 + Q
 *   one more rounding: |dF| <= |dQ| + u |F|. F crosses 0 (gelu' = 0 near g = -0.7518), so
 *   its bound is absolute. dgate = ((d u) s) F: |d u s| ((1 + ds)(|dF| + gamma_3 |F|) + ds |F|).
 * - Plus a few 2^-150 for results in float's gradual underflow.
 */
#ifndef DF_TESTS_GEGLU_REF_H
#define DF_TESTS_GEGLU_REF_H

#include <math.h>

typedef struct {
    double out, dgate, dup;    /* exact values */
    double bout, bdgate, bdup; /* bounds on |float32 - exact| */
} geglu_ref;

static inline double geglu_gamma(double n, double u) { return n * u / (1 - n * u); }

static inline geglu_ref geglu_ref_at(double g, double u, double d, double E, double U)
{
    const double k0 = sqrt(2.0 / 3.14159265358979323846), k1 = 0.044715;
    const double z = 2 * k0 * (g + k1 * g * g * g), s = 1.0 / (1.0 + exp(-z)), oms = 1.0 - s;
    const double P = 1 + 3 * k1 * g * g, A = 2 * k0 * g, Q = A * oms * P, F = 1 + Q;
    const double dz = geglu_gamma(7, U) * fabs(z);
    const double ds = -z * (1 + geglu_gamma(7, U)) > 87.0
                          ? 2.0
                          : oms * (expm1(dz) + E) + geglu_gamma(2, U);
    const double dQ = fabs(A) * P * (s * ds + U * oms + 0x1p-126) + geglu_gamma(5, U) * fabs(Q);
    const double dF = dQ + U * fabs(F) + geglu_gamma(4, U) * fabs(A) * oms * P;
    geglu_ref r;
    r.out = g * s * u;
    r.dup = d * g * s;
    r.dgate = d * u * s * F;
    r.bout = (ds + geglu_gamma(1, U)) * fabs(r.out) + 4 * 0x1p-150;
    r.bdup = (ds + geglu_gamma(2, U)) * fabs(r.dup) + 4 * 0x1p-150;
    r.bdgate = fabs(d * u * s) * ((1 + ds) * (dF + geglu_gamma(3, U) * fabs(F)) + ds * fabs(F)) +
               8 * 0x1p-150;
    return r;
}

#endif
