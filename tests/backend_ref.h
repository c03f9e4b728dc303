/*
 * backend_ref.h — float64 references of the backend operators (include/distflow/backend.h) and
 * the error bounds a conforming float32 backend must meet, for tests/test_backend_ops.c (and the
 * GEMM for tests/test_cuda_ops.c; include after cmocka.h). Written from the formulas of src/model/ops.h, never from the
 * kernels, and never calling them.
 *
 * The bounds are backend-generic: they assume only IEEE float32 arithmetic (every + - * / and
 * sqrt correctly rounded, u = DF_U32 = 2^-24; an FMA only removes a rounding), sums of n terms
 * in ANY order or blocking (Higham eq. 3.5 / 4.4: gamma_n times the sum of the magnitudes),
 * online softmaxes over ANY key / vocabulary tiling (the worst case: a rescale per key), and a
 * math library whose exp is within BR_EXP_ERR and log within BR_LOG_ERR (see below). They are
 * elementwise: |got - ref| <= bound for every output element, each bound built from the
 * magnitudes of the terms behind that element (computed here in double from the same inputs).
 *
 * Backward operators are checked on the same float inputs as the backend gets, the forward's
 * saved statistics (rstd, out, lse, entropy) included: the reference computes the backward
 * formula from those exact floats, so the bound is the backward's own arithmetic. That the
 * formulas are the derivatives of the forward is checked separately, in double, against finite
 * differences of the float64 forward (br_fd_slope).
 *
 * The reference's own rounding: the same chains in double (u64 = 2^-53, libm's exp / log within
 * 1 ulp), so at most 2^-29 x 4 of each bound; every bound is multiplied by BR_REF to cover it.
 */
#ifndef DF_TESTS_BACKEND_REF_H
#define DF_TESTS_BACKEND_REF_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testbounds.h"
#include "tolerance.h"

/* exp within 2 ulp (CUDA's expf; the CPU's df_v16_exp is within 3 u = DF_TOL_EXPF): 4 u. */
#define BR_EXP_ERR (4 * DF_U32)
/* log within 1 ulp (libm's logf, CUDA's logf): 2 u. 1 / sqrt: sqrtf and a division (2 u), or a
   2-ulp rsqrt (4 u): 4 u. */
#define BR_LOG_ERR (2 * DF_U32)
#define BR_RSQRT_ERR (4 * DF_U32)
/* The float64 reference's own error, relative to a bound (header comment). */
#define BR_REF (1.0 + 0x1p-26)
/*
 * tanh within 6 u absolutely (|tanh| < 1, so in units of 1). The CPU's df_tanh_f = 1 - r,
 * r = 2 / (E + 1), E = e^2x (2x exact) within BR_EXP_ERR = e: E's error moves r by
 * e 2E / (E + 1)^2 = e (1 - t^2) / 2, the add and the division by 2 u r (r = 1 - t <= 2), the
 * final difference by u |t|: max over t of 2u (1 - t^2) + 2u (1 - t) + u |t| is 5.13 u (at
 * t = -3/4), second-order terms far below the rest. CUDA's tanhf: 2 ulp, and an ulp below 1 is
 * at most u: 2 u. libm's tanhf (the CPU's scalar attention, kv_attention): under 1 ulp.
 */
#define BR_TANH_ERR (6 * DF_U32)

static inline double br_g(double n) { return df_tol_gamma(n, DF_U32); }

static inline double *br_dvec(int64_t n)
{
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!p)
        abort();
    return p;
}

/* ---- GEMM ------------------------------------------------------------------------------ */

/*
 * C = alpha op(A) op(B) + beta C0 in double (op(A) = A [M,K] or, ta, A^T with A [K,M]; op(B) =
 * B [K,N] or, tb, B^T with B [N,K]), and S[i,j] = |alpha| sum_k |op(A)[i,k] op(B)[k,j]| +
 * |beta C0[i,j]|, the magnitude behind each entry (Higham eq. 3.5).
 */
static inline void br_gemm_ref(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                               const float *A, const float *B, float beta, const float *C0,
                               double *C, double *S)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0, abs = 0;
            for (int64_t k = 0; k < K; k++) {
                double a = ta ? A[k * M + i] : A[i * K + k];
                double b = tb ? B[j * K + k] : B[k * N + j];
                acc += a * b;
                abs += fabs(a * b);
            }
            C[i * N + j] = alpha * acc + beta * (double)C0[i * N + j];
            S[i * N + j] = fabs(alpha) * abs + fabs(beta * (double)C0[i * N + j]);
        }
}

/*
 * Relative bound per unit of S: a float32 GEMM's entry is a chain of K + 2 roundings (the
 * products and K - 1 sums, alpha's product, the add of beta C0, which is itself one product):
 * gamma_{K+2}. With n_bf16 operands rounded to bf16 (8 significant bits) once each (2: both, as
 * autocast's matmuls; 1: the activation against a weight already in bf16, gemm_w16) a product
 * moves by r = (1 + u16)^n - 1 (2 u16 + u16^2, or u16) before the float32 accumulation, whose
 * gamma then acts on the rounded products (a factor 1 + r on S).
 */
static inline double br_gemm_rel(int64_t K, int n_bf16)
{
    const double ub = DF_U_BF16, r = n_bf16 == 2 ? 2 * ub + ub * ub : n_bf16 == 1 ? ub : 0;
    return r + br_g((double)K + 2) * (1 + r);
}

/* ---- RMSNorm ----------------------------------------------------------------------------- */

/*
 * Forward: out = w x r, r = 1 / sqrt(sum x^2 / H + eps). r: H positive squares summed (gamma_{H}
 * relative: the squares' roundings and the sums'), / H and + eps (2 more), half of that through
 * the sqrt, then the 1 / sqrt (BR_RSQRT_ERR): th_r = gamma_{H+2} / 2 + BR_RSQRT_ERR. out: two
 * products more. Bounds are relative to |r| and |out|.
 */
static inline void br_rmsnorm_fwd(double *out, double *r, double *bout, double *br,
                                  const float *x, const float *w, int64_t T, int64_t H, float eps)
{
    const double th_r = br_g((double)H + 2) / 2 + BR_RSQRT_ERR;
    for (int64_t t = 0; t < T; t++) {
        double ss = 0;
        for (int64_t i = 0; i < H; i++)
            ss += (double)x[t * H + i] * x[t * H + i];
        r[t] = 1.0 / sqrt(ss / (double)H + eps);
        br[t] = BR_REF * th_r * r[t];
        for (int64_t i = 0; i < H; i++) {
            out[t * H + i] = (double)w[i] * x[t * H + i] * r[t];
            bout[t * H + i] = BR_REF * ((1 + th_r) * (1 + br_g(2)) - 1) * fabs(out[t * H + i]);
        }
    }
}

/*
 * Backward from the given r (the forward's float rstd): with g = dout w and S = sum_j g_j x_j,
 *   dx_i = dx0_i + r g_i - r^3 x_i S / H,    dw_i = dw0_i + sum_t dout_ti x_ti r_t.
 * dx: S is H products of three factors summed (gamma_{H+2} of Sm = sum |g x|), its scaling by
 * r^3 / H a few more, the difference, the product with r, the accumulation: gamma_{H+10} of
 * |dx0| + r |g_i| + r^3 |x_i| Sm / H. dw: T terms of three factors onto dw0: gamma_{T+3}.
 * dw may be NULL.
 */
static inline void br_rmsnorm_bwd(double *dx, double *dw, double *bdx, double *bdw,
                                  const float *dx0, const float *dw0, const float *dout,
                                  const float *x, const float *w, const double *r, int64_t T,
                                  int64_t H)
{
    for (int64_t t = 0; t < T; t++) {
        const float *d = dout + t * H, *xt = x + t * H;
        double S = 0, Sm = 0;
        const double rt = r[t];
        for (int64_t j = 0; j < H; j++) {
            double gx = (double)d[j] * w[j] * xt[j];
            S += gx;
            Sm += fabs(gx);
        }
        for (int64_t i = 0; i < H; i++) {
            double gi = (double)d[i] * w[i];
            dx[t * H + i] = dx0[t * H + i] + rt * gi - rt * rt * rt * xt[i] * S / (double)H;
            double m = fabs(dx0[t * H + i]) + rt * fabs(gi) +
                       rt * rt * rt * fabs(xt[i]) * Sm / (double)H;
            bdx[t * H + i] = BR_REF * br_g((double)H + 10) * m;
        }
    }
    if (!dw)
        return;
    for (int64_t i = 0; i < H; i++) {
        double s = dw0[i], m = fabs(dw0[i]);
        for (int64_t t = 0; t < T; t++) {
            double p = (double)dout[t * H + i] * x[t * H + i] * r[t];
            s += p;
            m += fabs(p);
        }
        dw[i] = s;
        bdw[i] = BR_REF * br_g((double)T + 3) * m;
    }
}

/* ---- RoPE ---------------------------------------------------------------------------------- */

/*
 * x'[i] = x[i] c - x[i + h] s, x'[i + h] = x[i + h] c + x[i] s, h = rd / 2, with c, s the given
 * float table entries of the row's position (inverse: the signs of s flipped, the transpose). Two
 * products and a sum: gamma_3 of |x[i] c| + |x[i + h] s|. Position 0 (c = 1, s = 0) is exact, and
 * so are the dims rd .. hd-1 of each head, passed unchanged (bound 0).
 */
static inline void br_rope(double *out, double *b, const float *x, const int32_t *pos, int64_t T,
                           int64_t nh, int64_t hd, int64_t rd, const float *cos_t,
                           const float *sin_t, bool inverse)
{
    const int64_t half = rd / 2;
    for (int64_t i = 0; i < T * nh * hd; i++)
        out[i] = x[i], b[i] = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = 0; i < half; i++) {
                const double c = cos_t[pos[t] * half + i];
                const double s = (inverse ? -1.0 : 1.0) * sin_t[pos[t] * half + i];
                const int64_t o = (t * nh + h) * hd + i;
                const double x0 = x[o], x1 = x[o + half];
                out[o] = x0 * c - x1 * s;
                out[o + half] = x1 * c + x0 * s;
                b[o] = BR_REF * br_g(3) * (fabs(x0 * c) + fabs(x1 * s));
                b[o + half] = BR_REF * br_g(3) * (fabs(x1 * c) + fabs(x0 * s));
            }
}

/* ---- SwiGLU -------------------------------------------------------------------------------- */

/*
 * out = g u s, s = 1 / (1 + e^-g). s: the exp (BR_EXP_ERR; 1 + E moves by at most as much
 * relatively), the add and the division: BR_EXP_ERR + gamma_2; out two products more.
 * Backward: dup = dout g s (the same), dgate = dout u s (1 + g (1 - s)): 1 - s carries s's error
 * absolutely (s (e + gamma_2) + u), g (1 - s) and the add a rounding each, a cancellation near
 * g = -1.28 where silu' = 0; so relative to |dout u| s (1 + 2 |g|): BR_EXP_ERR + gamma_8.
 * Plus underflow: where e^-g overflows float, and a few 2^-150 for subnormal results.
 */
static inline void br_swiglu(double *out, double *dgate, double *dup, double *bout, double *bdg,
                             double *bdu, const float *gate, const float *up, const float *dout,
                             int64_t n)
{
    const double e = BR_EXP_ERR;
    for (int64_t i = 0; i < n; i++) {
        const double g = gate[i], u = up[i], d = dout[i], s = 1.0 / (1.0 + exp(-g));
        out[i] = g * s * u;
        bout[i] = BR_REF * (e + br_g(4)) * fabs(out[i]);
        dup[i] = d * g * s;
        bdu[i] = BR_REF * (e + br_g(4)) * fabs(dup[i]);
        dgate[i] = d * u * s * (1 + g * (1 - s));
        bdg[i] = BR_REF * (e + br_g(8)) * fabs(d * u) * s * (1 + 2 * fabs(g));
        /* e^-g past FLT_MAX: s = 0 in float, the exact s below 1 / FLT_MAX is lost */
        if (-g > log(FLT_MAX)) {
            const double lost = 1.0 / FLT_MAX;
            bout[i] += fabs(g * u) * lost, bdu[i] += fabs(d * g) * lost;
            bdg[i] += fabs(d * u) * (1 + fabs(g)) * lost;
        }
        /* gradual underflow: at most 2^-150 per rounding below 2^-126 */
        bout[i] += 4 * 0x1p-150, bdu[i] += 4 * 0x1p-150, bdg[i] += 8 * 0x1p-150;
    }
}

/* ---- Gemma 2's soft-caps -------------------------------------------------------------------- */

/* A value v (a score or a logit) within dv of a backend's, its derivative f and f's error df. */
typedef struct br_capped {
    double v, dv, f, df;
} br_capped;

/*
 * v = C tanh(y / C), t = tanh(y / C), f = dv/dy = 1 - t^2, from a raw value y whose float
 * computation is within dy (C <= 0: no cap, v = y, f = 1 exactly). A backend's:
 *   x = y / C (a division, or a product by 1/C rounded): dx = (dy + gamma_2 (|y| + dy)) / C;
 *   t' = tanh(x'): tanh's slope over [|x| - dx, |x| + dx] is at most 1 - tanh^2 of its
 *     smallest |x|, so dt = that dx + BR_TANH_ERR;
 *   v' = C t' with k roundings (1: fl(C t); the LM head's C / T: 3): C (dt + gamma_k (|t| + dt));
 *   f' = 1 - t''^2 with t'' = t' or recomputed from v' (t' + k + 2 roundings):
 *     d2 = dt + gamma_{k+2} (|t| + dt), |t''^2 - t^2| <= (2 |t| + d2) d2, the square and the
 *     difference 2 u (t^2 + f = 1).
 * f in double as 1 / cosh^2: no cancellation where the cap saturates.
 */
static inline br_capped br_softcap(double y, double dy, double C, int k)
{
    if (!(C > 0))
        return (br_capped){y, dy, 1, 0};
    const double x = y / C, t = tanh(x), ch = cosh(x), dx = (dy + br_g(2) * (fabs(y) + dy)) / C;
    const double tl = tanh(fmax(fabs(x) - dx, 0)), dt = (1 - tl * tl) * dx + BR_TANH_ERR;
    const double d2 = dt + br_g(k + 2) * (fabs(t) + dt);
    return (br_capped){C * t, C * (dt + br_g(k) * (fabs(t) + dt)), 1 / (ch * ch),
                       (2 * fabs(t) + d2) * d2 + 2 * DF_U32};
}

static inline br_capped *br_cvec(int64_t n)
{
    br_capped *p = calloc((size_t)(n > 0 ? n : 1), sizeof(br_capped));
    if (!p)
        abort();
    return p;
}

/* ---- attention over packed sequences -------------------------------------------------------- */

typedef struct br_attn {
    const int64_t *off; /* host offsets [n_seqs + 1] */
    int64_t n_seqs, nh, nkv, hd, window, T;
    const float *q, *k, *v; /* [T, nh hd], [T, nkv hd] */
    double softcap;         /* Gemma 2's C (0: none) */
} br_attn;

/* The first key of row i of the sequence starting at j0 (window W: i - W < j). */
static inline int64_t br_first_key(const br_attn *a, int64_t j0, int64_t i)
{
    return a->window > 0 && i - a->window + 1 > j0 ? i - a->window + 1 : j0;
}

/*
 * The scores of row i, head h over keys ja .. i: s[j].v = q_i . k_j / sqrt(hd), soft-capped
 * (a->softcap, br_softcap with k = 1), within s[j].dv of a backend's: the raw score's hd
 * products and sums, the scale 1 / sqrt(hd) (two roundings) and its product, gamma_{hd+3} of
 * sum |q_i k_j| / sqrt(hd), then the cap's; s[j].f its derivative (1 without a cap).
 */
static inline void br_scores(const br_attn *a, const double *q, const double *k, int64_t i,
                             int64_t h, int64_t ja, br_capped *s)
{
    const int64_t hd = a->hd, kh = h / (a->nh / a->nkv);
    const double isq = 1.0 / sqrt((double)hd);
    for (int64_t j = ja; j <= i; j++) {
        double d = 0, m = 0;
        for (int64_t e = 0; e < hd; e++) {
            double p = q[(i * a->nh + h) * hd + e] * k[(j * a->nkv + kh) * hd + e];
            d += p;
            m += fabs(p);
        }
        s[j] = br_softcap(d * isq, br_g((double)hd + 3) * m * isq, a->softcap, 1);
    }
}

/*
 * Forward in double from double q, k, v (the float inputs, or perturbed ones for finite
 * differences): out [T, nh hd], lse [T, nh].
 */
static inline void br_attn_fwd_d(const br_attn *a, const double *q, const double *k,
                                 const double *v, double *out, double *lse)
{
    const int64_t nh = a->nh, hd = a->hd, kh_div = a->nh / a->nkv;
    br_capped *s = br_cvec(a->T);
    for (int64_t sq = 0; sq < a->n_seqs; sq++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = a->off[sq]; i < a->off[sq + 1]; i++) {
                const int64_t ja = br_first_key(a, a->off[sq], i);
                br_scores(a, q, k, i, h, ja, s);
                double m = -INFINITY, l = 0;
                for (int64_t j = ja; j <= i; j++)
                    m = fmax(m, s[j].v);
                for (int64_t j = ja; j <= i; j++)
                    l += exp(s[j].v - m);
                double *o = out + (i * nh + h) * hd;
                for (int64_t e = 0; e < hd; e++)
                    o[e] = 0;
                for (int64_t j = ja; j <= i; j++) {
                    const double p = exp(s[j].v - m) / l, *vj = v + (j * a->nkv + h / kh_div) * hd;
                    for (int64_t e = 0; e < hd; e++)
                        o[e] += p * vj[e];
                }
                lse[i * nh + h] = m + log(l);
            }
    free(s);
}

/*
 * Forward bounds for row i of head h with L keys, any key tiling (worst case: one tile per key,
 * so L rescales of the online softmax):
 *   score s_j (capped or not): ds_j of br_scores;
 *   weight e^(s_j - m) relative to a common factor: the rounded argument (u |s_j - m| <= u span),
 *     the exp, and per rescale its factor (the same three and its product):
 *     th = max ds + (L + 1)(u span + BR_EXP_ERR + u);
 *   out = sum_j w_j v_j / sum_j w_j: weights off by th move it by 2 th sum_j p_j |v_j|; the two
 *     sums (L terms, L rescales), 1 / l and its product: gamma_{5L+3};
 *   lse = m + log(l): th + gamma_{3L} (l's sum and rescales), the log (BR_LOG_ERR |log l|), the add.
 */
static inline void br_attn_fwd_bounds(const br_attn *a, const double *q, const double *k,
                                      const double *v, const double *lse, double *bout,
                                      double *blse)
{
    const int64_t nh = a->nh, hd = a->hd, grp = a->nh / a->nkv;
    const double u = DF_U32;
    br_capped *s = br_cvec(a->T);
    double *A = br_dvec(hd);
    for (int64_t sq = 0; sq < a->n_seqs; sq++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = a->off[sq]; i < a->off[sq + 1]; i++) {
                const int64_t ja = br_first_key(a, a->off[sq], i), L = i - ja + 1;
                br_scores(a, q, k, i, h, ja, s);
                double m = -INFINITY, mn = INFINITY, dsmax = 0, l = 0;
                for (int64_t j = ja; j <= i; j++) {
                    m = fmax(m, s[j].v), mn = fmin(mn, s[j].v);
                    dsmax = fmax(dsmax, s[j].dv);
                }
                const double th = dsmax + (double)(L + 1) * (u * (m - mn) + BR_EXP_ERR + u);
                const double li = lse[i * nh + h];
                for (int64_t e = 0; e < hd; e++)
                    A[e] = 0;
                for (int64_t j = ja; j <= i; j++) {
                    const double p = exp(s[j].v - li), *vj = v + (j * a->nkv + h / grp) * hd;
                    l += exp(s[j].v - m);
                    for (int64_t e = 0; e < hd; e++)
                        A[e] += p * fabs(vj[e]);
                }
                for (int64_t e = 0; e < hd; e++)
                    bout[(i * nh + h) * hd + e] = BR_REF * (2 * th + br_g(5.0 * L + 3)) * A[e];
                blse[i * nh + h] = BR_REF * (th + br_g(3.0 * L) + BR_LOG_ERR * fabs(log(l)) +
                                             u * fabs(li));
            }
    free(s), free(A);
}

/*
 * Backward in double from the given out O and lse (the floats the backend gets, or the exact
 * double forward's for finite differences): P_ij = e^(s_ij - lse_i) (s capped), D_i = dO_i . O_i,
 * dS_ij = P_ij (dO_i . v_j - D_i) f_ij / sqrt(hd) (f the cap's 1 - t^2, 1 without);
 * dq_i = sum_j dS_ij k_j, dk_j = sum_i dS_ij q_i,
 * dv_j = sum_i P_ij dO_i (over the rows of every query head of kv head j's group). Overwrites.
 * With bounds (bdq non-NULL), per row:
 *   P_j relative th_p = ds_j + u |s_j - lse| + BR_EXP_ERR + u (ds_j of br_scores);
 *   D: gamma_hd sum |dO O|; dp_j = dO . v_j: gamma_hd sum |dO v_j|;
 *   X_j = P_j (dp_j - D) / sqrt(hd) within e_j = P_j / sqrt(hd) (th_p |dp_j - D| + dp_j's and
 *     D's errors + gamma_5 |dp_j - D|) (gamma_6 with a cap: the product by f one more);
 *   dS_j = X_j f_j: e_j (f_j + df_j) + |X_j| df_j;
 *   dq: L terms and the scale (gamma_{L+2}), dk and dv: the group's grp L rows (gamma_{grp L+2}),
 *   each of its magnitude plus dS's (P's for dv) errors times |k|, |q| (|dO|).
 */
static inline void br_attn_bwd_d(const br_attn *a, const double *q, const double *k,
                                 const double *v, const double *O, const double *lse,
                                 const double *dO, double *dq, double *dk, double *dv,
                                 double *bdq, double *bdk, double *bdv)
{
    const int64_t nh = a->nh, nkv = a->nkv, hd = a->hd, grp = nh / nkv, T = a->T;
    const double isq = 1.0 / sqrt((double)hd), u = DF_U32;
    const double gr = br_g(a->softcap > 0 ? 6 : 5);
    br_capped *s = br_cvec(T);
    memset(dq, 0, sizeof(double) * (size_t)(T * nh * hd));
    memset(dk, 0, sizeof(double) * (size_t)(T * nkv * hd));
    memset(dv, 0, sizeof(double) * (size_t)(T * nkv * hd));
    if (bdq) {
        memset(bdq, 0, sizeof(double) * (size_t)(T * nh * hd));
        memset(bdk, 0, sizeof(double) * (size_t)(T * nkv * hd));
        memset(bdv, 0, sizeof(double) * (size_t)(T * nkv * hd));
    }
    for (int64_t sq = 0; sq < a->n_seqs; sq++) {
        const int64_t j0 = a->off[sq], Ls = a->off[sq + 1] - j0;
        for (int64_t h = 0; h < nh; h++) {
            const int64_t kh = h / grp;
            for (int64_t i = j0; i < j0 + Ls; i++) {
                const int64_t ja = br_first_key(a, j0, i), L = i - ja + 1;
                const double *qi = q + (i * nh + h) * hd, *dOi = dO + (i * nh + h) * hd;
                const double *Oi = O + (i * nh + h) * hd, li = lse[i * nh + h];
                br_scores(a, q, k, i, h, ja, s);
                double D = 0, Dm = 0;
                for (int64_t e = 0; e < hd; e++)
                    D += dOi[e] * Oi[e], Dm += fabs(dOi[e] * Oi[e]);
                for (int64_t j = ja; j <= i; j++) {
                    const double *kj = k + (j * nkv + kh) * hd, *vj = v + (j * nkv + kh) * hd;
                    double dp = 0, dm = 0;
                    for (int64_t e = 0; e < hd; e++)
                        dp += dOi[e] * vj[e], dm += fabs(dOi[e] * vj[e]);
                    const double P = exp(s[j].v - li), X = P * (dp - D) * isq, dS = X * s[j].f;
                    double *dkj = dk + (j * nkv + kh) * hd, *dvj = dv + (j * nkv + kh) * hd;
                    for (int64_t e = 0; e < hd; e++) {
                        dq[(i * nh + h) * hd + e] += dS * kj[e];
                        dkj[e] += dS * qi[e];
                        dvj[e] += P * dOi[e];
                    }
                    if (!bdq)
                        continue;
                    const double diff = fabs(dp - D);
                    const double thp = s[j].dv + u * fabs(s[j].v - li) + BR_EXP_ERR + u;
                    const double eX = P * isq * (thp * diff + br_g((double)hd) * (dm + Dm) +
                                                 gr * diff);
                    const double edS = eX * (s[j].f + s[j].df) + fabs(X) * s[j].df;
                    const double gk = br_g((double)(grp * Ls) + 2);
                    double *bk = bdk + (j * nkv + kh) * hd, *bv = bdv + (j * nkv + kh) * hd;
                    for (int64_t e = 0; e < hd; e++) {
                        bdq[(i * nh + h) * hd + e] += BR_REF * (br_g((double)L + 2) *
                                                      fabs(dS * kj[e]) + edS * fabs(kj[e]));
                        bk[e] += BR_REF * (gk * fabs(dS * qi[e]) + edS * fabs(qi[e]));
                        bv[e] += BR_REF * (gk + thp) * P * fabs(dOi[e]);
                    }
                }
            }
        }
    }
    free(s);
}

/* ---- the rollout's KV cache ------------------------------------------------------------------ */

/*
 * x rounded to bfloat16, nearest even, as bits: computed in double (8 significant bits by
 * nearbyint's ties-to-even; a subnormal's quantum is 2^-133; past the largest bf16 it overflows
 * to inf), not by the library's bit trick. A NaN: the contract of df_backend_kv (backend.h,
 * df_bf16_from_f32): its sign and top 7 payload bits, made quiet.
 */
static inline uint16_t br_bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if (isnan(x))
        return (uint16_t)((u >> 16) | 0x40u);
    if (isinf(x) || x == 0)
        return (uint16_t)(u >> 16);
    int e = ilogb(x);
    e = e < -126 ? -126 : e;
    const float y = (float)ldexp(nearbyint(ldexp((double)x, 7 - e)), e - 7); /* exact, or inf */
    memcpy(&u, &y, 4);
    return (uint16_t)(u >> 16);
}

/*
 * One row of df_kv_attention in double: q [nh hd] over L cached positions K, V (rows at stride
 * kvd, the values the cache holds, bf16 ones widened; head h reads columns (h / (nh / nkv)) hd),
 * out [nh hd] and its bound bout [nh hd]. Once K / V are read the backend's arithmetic is float32
 * whatever the cache's dtype, so the bound is br_attn_fwd_bounds's for `out` with the row's L
 * keys: scores gamma_{hd+3} sm_j; every weight e^(s_j - m) carries at most L + 1 factors of
 * (rounded argument, exp, product): its own exp and one per later rescale, where a key tiling
 * into chunks of an online softmax and partials merged by segment (the CUDA kernel: chunks of
 * 32 in segments of 256, a partial's merge being one more factor) has at most chunks + segments
 * <= L + 1 of them, th = max ds + (L + 1)(u span + BR_EXP_ERR + u); out = sum w v / sum w:
 * 2 th sum p |v| plus gamma_{5L+3} for the two sums, the rescales and the division. A soft-cap
 * C > 0 (Gemma 2) caps each score as br_scores does, its error with it.
 */
static inline void br_kv_attn_row(const float *q, const float *K, const float *V, int64_t kvd,
                                  int64_t L, int64_t nh, int64_t nkv, int64_t hd, double softcap,
                                  double *out, double *bout)
{
    const double u = DF_U32, isq = 1.0 / sqrt((double)hd);
    double *s = br_dvec(L), *A = br_dvec(hd);
    for (int64_t h = 0; h < nh; h++) {
        const int64_t c0 = h / (nh / nkv) * hd;
        const float *qh = q + h * hd;
        double m = -INFINITY, mn = INFINITY, dsmax = 0, l = 0;
        for (int64_t j = 0; j < L; j++) {
            double d = 0, a = 0;
            for (int64_t e = 0; e < hd; e++) {
                const double p = (double)qh[e] * (double)K[j * kvd + c0 + e];
                d += p, a += fabs(p);
            }
            const br_capped c = br_softcap(d * isq, br_g((double)hd + 3) * a * isq, softcap, 1);
            s[j] = c.v;
            m = fmax(m, s[j]), mn = fmin(mn, s[j]);
            dsmax = fmax(dsmax, c.dv);
        }
        for (int64_t j = 0; j < L; j++)
            l += exp(s[j] - m);
        double *o = out + h * hd;
        for (int64_t e = 0; e < hd; e++)
            o[e] = 0, A[e] = 0;
        for (int64_t j = 0; j < L; j++) {
            const double p = exp(s[j] - m) / l;
            for (int64_t e = 0; e < hd; e++) {
                const double x = V[j * kvd + c0 + e];
                o[e] += p * x, A[e] += p * fabs(x);
            }
        }
        const double th = dsmax + (double)(L + 1) * (u * (m - mn) + BR_EXP_ERR + u);
        for (int64_t e = 0; e < hd; e++)
            bout[h * hd + e] = BR_REF * (2 * th + br_g(5.0 * (double)L + 3)) * A[e];
    }
    free(s), free(A);
}

/* ---- LM head ------------------------------------------------------------------------------ */

/*
 * One row h [H] of logits (doubles): y_v = h . W_v, z_v = y_v / temp, or with Gemma 2's
 * final-logit cap C > 0 z_v = C tanh(y_v / C) / temp. dz (NULL: skipped) bounds a backend's
 * float z_v for a GEMM within c ym_v (br_gemm_rel; ym_v = sum_e |h_e W_ve|): c ym_v / temp (the
 * 1 / temp its alpha), or capped br_softcap(y_v, c ym_v, C, 3) / temp (C / T: two roundings
 * and the product); f, df (NULL: skipped) the cap's 1 - t^2 and its error.
 */
static inline void br_logits(const double *h, const double *W, int64_t V, int64_t H, double temp,
                             double cap, double c, double *z, double *dz, double *f, double *df)
{
    for (int64_t v = 0; v < V; v++) {
        double d = 0, m = 0;
        for (int64_t e = 0; e < H; e++) {
            const double p = h[e] * W[v * H + e];
            d += p;
            m += fabs(p);
        }
        const br_capped r = br_softcap(d, c * m, cap, 3);
        z[v] = r.v / temp;
        if (dz)
            dz[v] = r.dv / temp;
        if (f)
            f[v] = r.f, df[v] = r.df;
    }
}

/* logp, entropy and lse of n rows in double (h [n, H], W [V, H] as doubles; cap C or 0). */
static inline void br_lmhead_fwd_d(const double *h, const double *W, const int32_t *tgt, int64_t n,
                                   int64_t V, int64_t H, double temp, double cap, double *logp,
                                   double *ent, double *lse)
{
    double *z = br_dvec(V);
    for (int64_t i = 0; i < n; i++) {
        br_logits(h + i * H, W, V, H, temp, cap, 0, z, NULL, NULL, NULL);
        double m = -INFINITY, s = 0, pz = 0;
        for (int64_t v = 0; v < V; v++)
            m = fmax(m, z[v]);
        for (int64_t v = 0; v < V; v++)
            s += exp(z[v] - m);
        const double l = m + log(s);
        for (int64_t v = 0; v < V; v++)
            pz += exp(z[v] - l) * z[v];
        logp[i] = z[tgt[i]] - l;
        ent[i] = l - pz;
        lse[i] = l;
    }
    free(z);
}

/*
 * Backward in double from the given lse and entropy (the floats the backend gets, or the exact
 * forward's), with p_v = e^(z_v - lse) and lp_v = z_v - lse:
 *   g_v = (dlogp (1[v = target] - p_v) - dent p_v (lp_v + entropy)) / temp, times the cap's
 *     f_v = 1 - t_v^2 (dz_v / dy_v = f_v / temp),
 *   dh = sum_v g_v W_v (overwritten), dW_v = dW0_v + sum_i g_iv h_i.
 * With bounds (bdh non-NULL): z_v off by dz_v of br_logits (a dot product and the 1 / temp, or
 * the cap's); p_v relative th_v = dz_v + u |lp_v| + BR_EXP_ERR + u; lp_v + entropy off by dz_v +
 * two roundings; g_v six roundings of its magnitude more (seven with the product by f_v, whose
 * own error df_v adds e (f + df) + |g| df); dh: V terms (gamma_{V+1}) plus g's errors times |W|;
 * dW: n terms onto dW0 (gamma_{n+2}) plus g's errors times |h|.
 */
static inline void br_lmhead_bwd_d_ex(const double *h, const double *W, const int32_t *tgt,
                                      const double *lse, const double *ent, const double *dlogp,
                                      const double *dent, int64_t n, int64_t V, int64_t H,
                                      double temp, double cap, const float *dW0, double *dh,
                                      double *dW, double *bdh, double *bdW, int bf16)
{
    const double u = DF_U32, ub = bf16 ? DF_U_BF16 : 0, gr = br_g(cap > 0 ? 7 : 6);
    double *z = br_dvec(V), *dz = br_dvec(V), *g = br_dvec(V), *eg = br_dvec(V);
    double *f = br_dvec(V), *df = br_dvec(V);
    double *Wm = bdW ? br_dvec(V * H) : NULL, *We = bdW ? br_dvec(V * H) : NULL;
    for (int64_t k = 0; k < V * H; k++)
        dW[k] = dW0[k];
    for (int64_t i = 0; i < n; i++) {
        const double *hi = h + i * H, a = dlogp[i], b = dent ? dent[i] : 0;
        br_logits(hi, W, V, H, temp, cap, br_gemm_rel(H, bf16 ? 1 : 0), z, dz, f, df);
        for (int64_t v = 0; v < V; v++) {
            const double lp = z[v] - lse[i], p = exp(lp), lpe = lp + ent[i];
            const double one = v == tgt[i] ? 1.0 : 0.0;
            const double gz = (a * (one - p) - b * p * lpe) / temp;
            const double th = dz[v] + u * fabs(lp) + BR_EXP_ERR + u;
            const double mag = fabs(a) * (one + p) + fabs(b) * p * (fabs(lp) + fabs(ent[i]));
            const double dlpe = dz[v] + u * fabs(lp) + u * fabs(lpe);
            const double ez = (fabs(a) * p * th + fabs(b) * p * (th * fabs(lpe) + dlpe) +
                               (gr + ub) * (1 + ub) * mag) / temp;
            g[v] = gz * f[v];
            eg[v] = ez * (f[v] + df[v]) + fabs(gz) * df[v];
        }
        for (int64_t e = 0; e < H; e++) {
            double s = 0, m = 0, pe = 0;
            for (int64_t v = 0; v < V; v++) {
                s += g[v] * W[v * H + e];
                m += fabs(g[v] * W[v * H + e]);
                pe += eg[v] * fabs(W[v * H + e]);
            }
            dh[i * H + e] = s;
            if (bdh)
                bdh[i * H + e] = BR_REF * (br_g((double)V + 1) * m * (1 + ub) + pe);
        }
        for (int64_t v = 0; v < V; v++)
            for (int64_t e = 0; e < H; e++) {
                dW[v * H + e] += g[v] * hi[e];
                if (bdW) {
                    Wm[v * H + e] += fabs(g[v] * hi[e]);
                    We[v * H + e] += eg[v] * fabs(hi[e]);
                }
            }
    }
    if (bdW)
        for (int64_t k = 0; k < V * H; k++)
            bdW[k] = BR_REF * (br_g((double)n + 2) * (fabs(dW0[k]) + Wm[k] * (1 + 2 * ub)) +
                               ub * Wm[k] + We[k] * (1 + ub));
    free(z), free(dz), free(g), free(eg), free(f), free(df), free(Wm), free(We);
}

static inline void br_lmhead_bwd_d(const double *h, const double *W, const int32_t *tgt,
                                   const double *lse, const double *ent, const double *dlogp,
                                   const double *dent, int64_t n, int64_t V, int64_t H,
                                   double temp, double cap, const float *dW0, double *dh,
                                   double *dW, double *bdh, double *bdW)
{
    br_lmhead_bwd_d_ex(h, W, tgt, lse, ent, dlogp, dent, n, V, H, temp, cap, dW0, dh, dW, bdh,
                       bdW, 0);
}

/*
 * Forward bounds of n rows (logp, entropy, lse the exact values of br_lmhead_fwd_d): logits off by
 * dz of br_logits (gamma_{H+2} zm: a dot product and the 1 / temp; or the cap's); lse and entropy
 * from them as tb_row_lse_bound_e (tests/testbounds.h, with c = 1 on dz) with every sum float
 * over the whole vocabulary (any tiling); plus the log of s0 <= V (BR_LOG_ERR log V), the final
 * add and the float stores.
 */
static inline void br_lmhead_fwd_bounds_ex(const double *h, const double *W, const int32_t *tgt,
                                           int64_t n, int64_t V, int64_t H, double temp,
                                           double cap, const double *logp, const double *ent,
                                           const double *lse, double *blp, double *bent,
                                           double *blse, int bf16)
{
    double *z = br_dvec(V), *dz = br_dvec(V);
    for (int64_t i = 0; i < n; i++) {
        br_logits(h + i * H, W, V, H, temp, cap, br_gemm_rel(H, bf16 ? 1 : 0), z, dz, NULL, NULL);
        const tb_lse_bound r = tb_row_lse_bound_e(z, dz, 1.0, V, V, BR_EXP_ERR);
        /* log(s0) <= log V: s0 sums V weights of at most 1 */
        const double dlse = r.dlse + BR_LOG_ERR * log((double)V) + DF_U32 * fabs(lse[i]);
        blse[i] = BR_REF * dlse;
        blp[i] = BR_REF * (dz[tgt[i]] + dlse + DF_U32 * fabs(logp[i]));
        bent[i] = BR_REF * (r.dent + BR_LOG_ERR * log((double)V) + DF_U32 * fabs(ent[i]));
    }
    free(z), free(dz);
}

static inline void br_lmhead_fwd_bounds(const double *h, const double *W, const int32_t *tgt,
                                        int64_t n, int64_t V, int64_t H, double temp, double cap,
                                        const double *logp, const double *ent, const double *lse,
                                        double *blp, double *bent, double *blse)
{
    br_lmhead_fwd_bounds_ex(h, W, tgt, n, V, H, temp, cap, logp, ent, lse, blp, bent, blse, 0);
}

/* sum_v p_v^2 of n rows in double (sq) and the bound on a backend's float value (bsq): the logits
 * as br_lmhead_fwd_bounds_ex's (bf16: one operand rounded; cap C or 0), tb_row_lse_bound_e's dsq
 * with every sum float over the whole vocabulary, and the float store. */
static inline void br_lmhead_sumsq_d(const double *h, const double *W, int64_t n, int64_t V, int64_t H,
                                     double temp, double cap, int bf16, double *sq, double *bsq)
{
    double *z = br_dvec(V), *dz = br_dvec(V);
    for (int64_t i = 0; i < n; i++) {
        br_logits(h + i * H, W, V, H, temp, cap, br_gemm_rel(H, bf16 ? 1 : 0), z, dz, NULL, NULL);
        const tb_lse_bound r = tb_row_lse_bound_e(z, dz, 1.0, V, V, BR_EXP_ERR);
        sq[i] = r.sq;
        bsq[i] = BR_REF * (r.dsq + DF_U32 * r.sq);
    }
    free(z), free(dz);
}

/* ---- finite differences of a float64 loss ------------------------------------------------- */

typedef double (*br_loss_fn)(void *ctx);

/*
 * Slope at t = 0 of f(x + t u) over k arrays (xs[a] += t us[a], ns[a] entries, k <= 8; restored after):
 * central differences D(t) at t = h, 2h, 4h and Richardson's R(t) = (4 D(t) - D(2t)) / 3, which is
 * f' + O(t^4). *err bounds |R(h) - f'|: |R(h) - R(2h)| (15 times R(h)'s t^4 term, so a
 * generous estimate of it) plus the rounding of the loss, 1.5 eps / h for a loss computed to
 * within eps.
 */
static inline double br_fd_slope(br_loss_fn f, void *ctx, double **xs, double *const *us,
                                 const int64_t *ns, int k, double h, double eps, double *err)
{
    double D[3], *save[8];
    if (k > 8)
        abort();
    for (int a = 0; a < k; a++)
        save[a] = br_dvec(ns[a]);
    for (int s = 0; s < 3; s++) {
        const double t = h * (double)(1 << s);
        double l[2];
        for (int side = 0; side < 2; side++) {
            const double sg = side ? -t : t;
            for (int a = 0; a < k; a++) {
                memcpy(save[a], xs[a], sizeof(double) * (size_t)ns[a]);
                for (int64_t i = 0; i < ns[a]; i++)
                    xs[a][i] += sg * us[a][i];
            }
            l[side] = f(ctx);
            for (int a = 0; a < k; a++)
                memcpy(xs[a], save[a], sizeof(double) * (size_t)ns[a]);
        }
        D[s] = (l[0] - l[1]) / (2 * t);
    }
    for (int a = 0; a < k; a++)
        free(save[a]);
    const double R1 = (4 * D[0] - D[1]) / 3, R2 = (4 * D[1] - D[2]) / 3;
    *err = fabs(R1 - R2) + 1.5 * eps / h;
    return R1;
}

#endif /* DF_TESTS_BACKEND_REF_H */
