/*
 * test_cuda_attention.c — the CUDA attention operators against the CPU references
 * (docs/cuda.md): df_cuda_attention_fwd / _bwd vs df_attention_fwd / _bwd on packed
 * sequences of unequal lengths with GQA, causal, over sliding windows and with Gemma 2's
 * attention-logit soft-cap. (The rollout's
 * KV-cache operators are the seam's, checked by test_backend_ops.)
 * Without a GPU: a SKIP line and exit 77 (ctest: skipped).
 *
 * Bounds (tests/tolerance.h, the analysis of tests/test_ops.c's attention_bounds widened to
 * the device's tiles and summation orders): b[i] bounds either implementation's distance to
 * the exact result on the same float32 inputs, so |gpu - cpu| <= 2 b elementwise and
 * dfct_check's relative error ||gpu - cpu|| / ||cpu|| is held to 2 ||b|| / ||cpu||. The
 * magnitudes in b (sums of |terms|, the exact weights) are computed in double from the inputs.
 */
#include "cuda_testutil.h"
#include "model/ops.h"

#include <omp.h>

static double g32(double n) { return df_tol_gamma(n, DF_U32); }

/* exp's relative error: CUDA's expf 2 ulp (4 u), the CPU's df_expf 3 u, libm's expf 1 ulp */
#define EXP_ERR (4 * DF_U32)
/* logf: 1 ulp on both sides */
#define LOG_ERR (2 * DF_U32)
/* fewest keys in a tile on either side (CPU DF_ATTN_BK = 32, device Bc = 32 or 64), so a
 * row of L keys sees at most ceil(L / 32) online-softmax rescales, one more under a window
 * (its L keys need not start on a tile boundary) */
#define MIN_TILE 32
/* tanh's absolute error (units of 1): CUDA's tanhf is within 2 ulp of |tanh| <= 1 (2 u); the
 * CPU's 1 - 2 / (e^{2x} + 1) within 5.13 u (its exp's error enters scaled by (1 - t^2) / 2:
 * tests/backend_ref.h, BR_TANH_ERR) */
#define TANH_ERR (6 * DF_U32)

/*
 * Gemma 2's soft-cap C > 0 on an exact score r with error bound *ds (in place: the capped score
 * C tanh(r / C) and its bound): the argument r / C carries (dr + u |r|) / C, tanh passes it on
 * scaled by 1 - t^2 and adds TANH_ERR, the product by C one rounding. *dc = 1 - t^2 (the
 * backward's factor) and *edc bounds its error: 2 |t| times t's error, plus u (t t and 1 - t t).
 */
static double cap_score(double r, double *ds, double C, double *dc, double *edc)
{
    const double u = DF_U32, t = tanh(r / C), et = (1 - t * t) * (*ds + u * fabs(r)) / C + TANH_ERR;
    *ds = C * et + u * fabs(C * t);
    *dc = 1 - t * t, *edc = 2 * fabs(t) * et + 2 * u;
    return C * t;
}

static float *fvec(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    assert_non_null(p);
    return p;
}

static double *dvec(int64_t n)
{
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof *p);
    assert_non_null(p);
    return p;
}

/* 2 ||b||_2 / ||ref||_2: the relative bound on ||gpu - cpu|| when both are within b. */
static double rel_bound(const double *b, const float *ref, int64_t n)
{
    double nb = 0, nr = 0;
    for (int64_t i = 0; i < n; i++)
        nb += b[i] * b[i], nr += (double)ref[i] * ref[i];
    return 2 * sqrt(nb) / sqrt(nr);
}

/* dfct_check against 2 ||b|| / ||ref||. Where that exceeds 1 the reference is itself rounding
 * noise (dq, dk of length-1 sequences are exactly 0: dp - D = 0) and the same inequality is
 * checked and printed in absolute form, ||gpu - cpu|| <= 2 ||b||. */
static void check_b(const char *what, const float *got, const float *ref, const double *b,
                    int64_t n)
{
    const double rb = rel_bound(b, ref, n);
    if (rb < 1) {
        dfct_check(what, got, ref, n, rb);
        return;
    }
    double ne = 0, nb = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            fail_msg("%s: element %lld is %g", what, (long long)i, (double)got[i]);
        ne += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]), nb += b[i] * b[i];
    }
    printf("  %-40s abs err %.3e (bound %.3e; the reference is rounding noise)\n", what, sqrt(ne),
           2 * sqrt(nb));
    if (!(sqrt(ne) <= 2 * sqrt(nb)))
        fail_msg("%s: error %.3e exceeds %.3e", what, sqrt(ne), 2 * sqrt(nb));
}

/*
 * One query row q against keys K + j ld and values V + j ld, j < L (head dim hd). Fills the
 * exact scaled scores s[j] and their error bounds ds[j], and bout[hd]; returns the bound on lse.
 *   score: hd products summed, the scale (sqrtf, the division) and its product:
 *     ds_j = gamma_{hd+3} sum_e |q_e k_je| / sqrt(hd); with a soft-cap, cap_score's;
 *   weight e^(s_j - m) against a common factor: the rounded subtraction (u span), exp
 *     (EXP_ERR) and, per tile, the rescale factor (the same two plus its product):
 *     th1 = (nt + 1)(u span + EXP_ERR + u), nt = ceil(L / 32) (a tile whose keys are all
 *     masked for the row rescales by exp(0) = 1 and adds 0, exactly);
 *   out = sum_j w_j v_j / sum_j w_j: weights off by th = max ds + th1 move it by at most
 *     2 th sum_j P_j |v_j| (P the exact softmax); the two sums of L terms with nt rescales,
 *     the device's 5-step warp sum of l, 1 / l and its product: gamma_{2L + 3nt + 8};
 *   lse = m + logf(l): log-sum-exp is 1-Lipschitz in the scores (max ds), th1, the sum of l
 *     (gamma_{L + 2nt + 5}), logf's error on |log l| and the final add.
 */
static double row_fwd_bounds(const float *q, const float *K, const float *V, int64_t ld,
                             int64_t L, int64_t hd, bool windowed, double cap, double *s,
                             double *ds, double *dc, double *edc, double *bout)
{
    const double isq = 1.0 / sqrt((double)hd), u = DF_U32;
    const int64_t nt = (L + MIN_TILE - 1) / MIN_TILE + windowed;
    double m = -INFINITY, mn = INFINITY, dsmax = 0;
    for (int64_t j = 0; j < L; j++) {
        double d = 0, a = 0;
        for (int64_t e = 0; e < hd; e++) {
            d += (double)q[e] * K[j * ld + e];
            a += fabs((double)q[e] * K[j * ld + e]);
        }
        s[j] = d * isq, ds[j] = g32((double)hd + 3) * a * isq, dc[j] = 1, edc[j] = 0;
        if (cap > 0)
            s[j] = cap_score(s[j], &ds[j], cap, &dc[j], &edc[j]);
        m = fmax(m, s[j]), mn = fmin(mn, s[j]), dsmax = fmax(dsmax, ds[j]);
    }
    const double th1 = (double)(nt + 1) * (u * (m - mn) + EXP_ERR + u), th = dsmax + th1;
    double l = 0;
    for (int64_t j = 0; j < L; j++)
        l += exp(s[j] - m);
    const double lse = m + log(l), gl = g32((double)(2 * L + 3 * nt + 8));
    for (int64_t e = 0; e < hd; e++) {
        double A = 0;
        for (int64_t j = 0; j < L; j++)
            A += exp(s[j] - lse) * fabs((double)V[j * ld + e]);
        bout[e] = (2 * th + gl) * A;
    }
    return dsmax + th1 + g32((double)(L + 2 * nt + 5)) + LOG_ERR * fabs(log(l)) + u * fabs(lse);
}

/* ---- packed causal attention, optionally windowed ------------------------------------------------------------ */

/*
 * Backward bounds, both sides given the same out, lse and dout (so those are exact inputs):
 *   P_j = exp(s_j - lse): relative th_p = ds_j + u |s_j - lse| + EXP_ERR;
 *   D = dO . O: gamma_{hd+5} sum |dO O| (the device's lane sums and 5-step warp sum);
 *   dp_j = dO . v_j: gamma_hd sum |dO v_j|;
 *   dS_j = P_j (dp_j - D) scale: P_j / sqrt(hd) (th_p |dp_j - D| + d dp_j + dD
 *     + gamma_5 |dp_j - D|) (subtraction, two products, the scale's two roundings); with a
 *   soft-cap, dS_j gains the factor c_j = 1 - t_j^2: every term above times c_j, plus
 *     |dS_j| edc_j / c_j (c_j's own error) and one more product (gamma_6);
 *   dq_i = sum_j dS_ij k_j (L_i terms), dk_j = sum over the group's rows i >= j of
 *   dS_ij q_i and dv_j = sum P_ij dO_i (at most grp L terms): gamma of the count times
 *   sum |terms|, plus the propagated dS / P errors times |k|, |q|, |dO| (first order).
 * With a window W each row i sees the L_i = min(i + 1, W) keys from j_lo = i + 1 - L_i: the
 * same bounds over those keys only (a key outside the window has weight 0 on both sides).
 */
static void attention_case_cap(const int64_t *lens, int64_t n_seqs, int64_t nh, int64_t nkv,
                               int64_t hd, int64_t extra_len, int64_t window, float cap,
                               uint64_t seed)
{
    int64_t off[17], maxL = 0;
    assert_true(n_seqs <= 16);
    off[0] = 0;
    for (int64_t s = 0; s < n_seqs; s++) {
        off[s + 1] = off[s] + lens[s];
        maxL = lens[s] > maxL ? lens[s] : maxL;
    }
    const int64_t T = off[n_seqs], ldq = nh * hd, ldk = nkv * hd, nq = T * ldq, nk = T * ldk;
    const int64_t grp = nh / nkv;
    printf(" attention: %lld sequences, T = %lld, nh = %lld, nkv = %lld, hd = %lld, window %lld, "
           "softcap %g\n",
           (long long)n_seqs, (long long)T, (long long)nh, (long long)nkv, (long long)hd,
           (long long)window, (double)cap);
    float *q = fvec(nq), *k = fvec(nk), *v = fvec(nk), *dout = fvec(nq);
    dfct_rand(q, nq, seed, -1, 1);
    dfct_rand(k, nk, seed + 1, -1, 1);
    dfct_rand(v, nk, seed + 2, -1, 1);
    dfct_rand(dout, nq, seed + 3, -1, 1);
    float *out = fvec(nq), *lse = fvec(T * nh), *dq = fvec(nq), *dk = fvec(nk), *dv = fvec(nk);
    df_attention_fwd(out, lse, q, k, v, off, n_seqs, nh, nkv, hd, window, cap);
    df_attention_bwd(dq, dk, dv, dout, out, lse, q, k, v, off, n_seqs, nh, nkv, hd, window, cap);

    float *d_q = dfct_up(q, 4 * nq), *d_k = dfct_up(k, 4 * nk), *d_v = dfct_up(v, 4 * nk);
    int64_t *d_off = dfct_up(off, 8 * (n_seqs + 1));
    float *d_out = dfct_alloc(4 * nq), *d_lse = dfct_alloc(4 * T * nh); /* NaN: unwritten shows */
    DFCT_OK(df_cuda_attention_fwd(dfct_cu, d_out, d_lse, d_q, d_k, d_v, d_off, n_seqs, T,
                                  maxL + extra_len, nh, nkv, hd, window, cap));
    float *g_out = dfct_down(d_out, 4 * nq), *g_lse = dfct_down(d_lse, 4 * T * nh);
    /* the backward on the CPU forward's out and lse, so both sides see the same inputs */
    float *d_cout = dfct_up(out, 4 * nq), *d_clse = dfct_up(lse, 4 * T * nh);
    float *d_dout = dfct_up(dout, 4 * nq);
    float *d_dq = dfct_alloc(4 * nq), *d_dk = dfct_alloc(4 * nk), *d_dv = dfct_alloc(4 * nk);
    DFCT_OK(df_cuda_attention_bwd(dfct_cu, d_dq, d_dk, d_dv, d_dout, d_cout, d_clse, d_q, d_k,
                                  d_v, d_off, n_seqs, T, maxL + extra_len, nh, nkv, hd, window,
                                  cap));
    float *g_dq = dfct_down(d_dq, 4 * nq), *g_dk = dfct_down(d_dk, 4 * nk);
    float *g_dv = dfct_down(d_dv, 4 * nk);

    double *bo = dvec(nq), *bl = dvec(T * nh), *bq = dvec(nq), *bk = dvec(nk), *bv = dvec(nk);
    double *s = dvec(maxL), *ds = dvec(maxL), *P = dvec(maxL), *thp = dvec(maxL);
    double *dS = dvec(maxL), *edS = dvec(maxL), *dc = dvec(maxL), *edc = dvec(maxL);
    const double isq = 1.0 / sqrt((double)hd), u = DF_U32;
    for (int64_t sq = 0; sq < n_seqs; sq++) {
        const int64_t j0 = off[sq], L = lens[sq];
        for (int64_t h = 0; h < nh; h++) {
            const int64_t kh = h / grp;
            const float *K = k + j0 * ldk + kh * hd, *V = v + j0 * ldk + kh * hd;
            for (int64_t i = 0; i < L; i++) {
                const int64_t row = j0 + i;
                const int64_t Li = window > 0 && window < i + 1 ? window : i + 1, jl = i + 1 - Li;
                const float *qi = q + row * ldq + h * hd, *oi = out + row * ldq + h * hd;
                const float *gi = dout + row * ldq + h * hd;
                const float *Kw = K + jl * ldk, *Vw = V + jl * ldk; /* the row's visible keys */
                bl[row * nh + h] = row_fwd_bounds(qi, Kw, Vw, ldk, Li, hd, window > 0, cap, s, ds,
                                                  dc, edc, bo + row * ldq + h * hd);
                const double lf = lse[row * nh + h];
                double D = 0, Dm = 0;
                for (int64_t e = 0; e < hd; e++)
                    D += (double)gi[e] * oi[e], Dm += fabs((double)gi[e] * oi[e]);
                const double eD = g32((double)hd + 5) * Dm;
                for (int64_t j = 0; j < Li; j++) {
                    double dp = 0, dm = 0;
                    for (int64_t e = 0; e < hd; e++)
                        dp += (double)gi[e] * Vw[j * ldk + e], dm += fabs((double)gi[e] * Vw[j * ldk + e]);
                    const double diff = fabs(dp - D);
                    P[j] = exp(s[j] - lf);
                    thp[j] = ds[j] + u * fabs(s[j] - lf) + EXP_ERR;
                    dS[j] = P[j] * (dp - D) * isq * dc[j];
                    edS[j] = P[j] * isq * dc[j] *
                                 (thp[j] * diff + g32((double)hd) * dm + eD + g32(6) * diff) +
                             P[j] * isq * diff * edc[j];
                }
                double *bqi = bq + row * ldq + h * hd;
                for (int64_t j = 0; j < Li; j++) {
                    const float *kj = Kw + j * ldk;
                    double *bkj = bk + (j0 + jl + j) * ldk + kh * hd;
                    double *bvj = bv + (j0 + jl + j) * ldk + kh * hd;
                    for (int64_t e = 0; e < hd; e++) {
                        bqi[e] += g32((double)Li + 1) * fabs(dS[j] * kj[e]) + edS[j] * fabs(kj[e]);
                        bkj[e] += g32((double)(grp * L + 1)) * fabs(dS[j] * qi[e]) + edS[j] * fabs(qi[e]);
                        bvj[e] += (g32((double)(grp * L + 1)) + thp[j]) * P[j] * fabs(gi[e]);
                    }
                }
            }
        }
    }
    check_b("fwd out", g_out, out, bo, nq);
    check_b("fwd lse", g_lse, lse, bl, T * nh);
    check_b("bwd dq", g_dq, dq, bq, nq);
    check_b("bwd dk", g_dk, dk, bk, nk);
    check_b("bwd dv", g_dv, dv, bv, nk);
    /* A length-1 sequence attends only to itself: its one weight is exp(0) = 1 exactly and
     * l = 1, so out is v of its kv head bit for bit, on both sides. */
    for (int64_t sq = 0; sq < n_seqs; sq++)
        if (lens[sq] == 1)
            for (int64_t h = 0; h < nh; h++)
                for (int64_t e = 0; e < hd; e++)
                    if (g_out[off[sq] * ldq + h * hd + e] != v[off[sq] * ldk + h / grp * hd + e])
                        fail_msg("length-1 sequence %lld head %lld: out[%lld] = %.9g, v = %.9g",
                                 (long long)sq, (long long)h, (long long)e,
                                 (double)g_out[off[sq] * ldq + h * hd + e],
                                 (double)v[off[sq] * ldk + h / grp * hd + e]);

    free(q), free(k), free(v), free(dout), free(out), free(lse), free(dq), free(dk), free(dv);
    free(g_out), free(g_lse), free(g_dq), free(g_dk), free(g_dv);
    free(bo), free(bl), free(bq), free(bk), free(bv);
    free(s), free(ds), free(P), free(thp), free(dS), free(edS), free(dc), free(edc);
    dfct_free(d_q), dfct_free(d_k), dfct_free(d_v), dfct_free(d_off), dfct_free(d_out);
    dfct_free(d_lse), dfct_free(d_cout), dfct_free(d_clse), dfct_free(d_dout);
    dfct_free(d_dq), dfct_free(d_dk), dfct_free(d_dv);
}

static void attention_case(const int64_t *lens, int64_t n_seqs, int64_t nh, int64_t nkv,
                           int64_t hd, int64_t extra_len, int64_t window, uint64_t seed)
{
    attention_case_cap(lens, n_seqs, nh, nkv, hd, extra_len, window, 0.0f, seed);
}

/* Qwen2.5-0.5B's heads (14 query, 2 kv, hd 64): lengths 1, 17, 64, 130 in one pack. */
static void test_attention_gqa_hd64(void **state)
{
    (void)state;
    const int64_t lens[4] = {1, 17, 64, 130};
    attention_case(lens, 4, 14, 2, 64, 0, 0, 101);
}

/* hd 128 without GQA; max_len above the longest sequence (tiles past every end leave). */
static void test_attention_mha_hd128(void **state)
{
    (void)state;
    const int64_t lens[4] = {130, 1, 64, 17};
    attention_case(lens, 4, 4, 4, 128, 37, 0, 202);
}

/* The third tile shape (hd 256), and head dims that are not multiples of 32 or of 4. */
static void test_attention_other_head_dims(void **state)
{
    (void)state;
    const int64_t l256[3] = {33, 1, 70};
    attention_case(l256, 3, 2, 1, 256, 0, 0, 303);
    const int64_t l50[4] = {5, 96, 1, 40};
    attention_case(l50, 4, 6, 3, 50, 3, 0, 304);
    const int64_t l96[3] = {65, 2, 31};
    attention_case(l96, 3, 4, 2, 96, 0, 0, 305);
}

/* Every sequence of length 1: each row's softmax has one score. */
static void test_attention_single_tokens(void **state)
{
    (void)state;
    const int64_t lens[5] = {1, 1, 1, 1, 1};
    attention_case(lens, 5, 14, 2, 64, 0, 0, 401);
    attention_case(lens, 5, 4, 4, 128, 100, 0, 402);
}

/* Sliding windows (Mistral / Qwen2 / Gemma layers): shorter than a tile (7), a tile (32, 64),
 * off the tiles (33, 100), one short of the longest sequence and as long as it (the kernels
 * then run causal), over sequences of many tiles, each head-dim bucket. */
static void test_attention_window(void **state)
{
    (void)state;
    const int64_t lens[5] = {1, 17, 64, 130, 257};
    attention_case(lens, 5, 14, 2, 64, 0, 7, 501);
    attention_case(lens, 5, 14, 2, 64, 0, 64, 502);
    attention_case(lens, 5, 4, 4, 128, 5, 32, 503);
    attention_case(lens, 5, 4, 2, 128, 0, 100, 504);
    const int64_t l256[3] = {70, 1, 129};
    attention_case(l256, 3, 2, 1, 256, 0, 33, 505);
    attention_case(lens, 5, 6, 3, 50, 0, 256, 506);
    attention_case(lens, 5, 6, 3, 50, 0, 257, 507);
}

/* Gemma 2's attention-logit soft-cap: C = 0.25 against scores of about 0.3 (uniform q, k in
 * [-1, 1]: a std of sqrt(hd / 9) / sqrt(hd)), so tanh saturates on many and the cap changes
 * the softmax; C = 2 (nearly linear); GQA, windows, each head-dim bucket. */
static void test_attention_softcap(void **state)
{
    (void)state;
    const int64_t lens[4] = {1, 17, 64, 130};
    attention_case_cap(lens, 4, 14, 2, 64, 0, 0, 0.25f, 601);
    attention_case_cap(lens, 4, 14, 2, 64, 0, 0, 2.0f, 602);
    attention_case_cap(lens, 4, 4, 4, 128, 5, 33, 0.25f, 603);
    const int64_t l256[3] = {70, 1, 129};
    attention_case_cap(l256, 3, 2, 1, 256, 0, 0, 0.25f, 604);
}

/* ---- argument checks ------------------------------------------------------------------------ */

static void test_attention_errors(void **state)
{
    (void)state;
    float x[4] = {0};
    const int64_t off[2] = {0, 1};
    /* host pointers: the sizes are refused before anything is launched */
    assert_int_equal(df_cuda_attention_fwd(dfct_cu, x, x, x, x, x, off, 1, 1, 1, 2, 2, 257, 0, 0.0f), DF_EINVAL);
    assert_int_equal(df_cuda_attention_fwd(dfct_cu, x, x, x, x, x, off, 1, 1, 1, 5, 2, 64, 0, 0.0f), DF_EINVAL);
    assert_int_equal(df_cuda_attention_fwd(dfct_cu, x, x, x, x, x, off, 1, -1, 1, 2, 2, 64, 0, 0.0f), DF_EINVAL);
    assert_int_equal(df_cuda_attention_fwd(dfct_cu, x, x, x, x, x, off, 1, 1, 1, 2, 2, 0, 0, 0.0f), DF_EINVAL);
    assert_int_equal(df_cuda_attention_fwd(dfct_cu, x, x, x, x, x, off, 1, 1, 1, 2, 2, 64, -1, 0.0f), DF_EINVAL);
    assert_int_equal(df_cuda_attention_bwd(dfct_cu, x, x, x, x, x, x, x, x, x, off, 1, 1, 1, 2, 2,
                                           300, 0, 0.0f), DF_EINVAL);
    assert_int_equal(df_cuda_attention_bwd(dfct_cu, x, x, x, x, x, x, x, x, x, off, 1, 1, 1, 6, 4,
                                           64, 0, 0.0f), DF_EINVAL);
    assert_int_equal(df_cuda_attention_bwd(dfct_cu, x, x, x, x, x, x, x, x, x, off, 1, 1, 1, 2, 2,
                                           64, -3, 0.0f), DF_EINVAL);
    /* nothing to do: no launch */
    DFCT_OK(df_cuda_attention_fwd(dfct_cu, x, x, x, x, x, off, 0, 0, 0, 2, 2, 64, 0, 0.0f));
    /* a soft-cap must be 0 or finite and > 0 */
    assert_int_equal(df_cuda_attention_fwd(dfct_cu, x, x, x, x, x, off, 1, 1, 1, 2, 2, 64, 0, -1.0f),
                     DF_EINVAL);
    assert_int_equal(df_cuda_attention_bwd(dfct_cu, x, x, x, x, x, x, x, x, x, off, 1, 1, 1, 2, 2,
                                           64, 0, INFINITY), DF_EINVAL);
    assert_int_equal(df_cuda_attention_fwd(dfct_cu, x, x, x, x, x, off, 1, 1, 1, 2, 2, 64, 0, NAN),
                     DF_EINVAL);
    DFCT_OK(df_cuda_sync(dfct_cu)); /* the context still works after the errors */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_gqa_hd64),
        cmocka_unit_test(test_attention_mha_hd128),
        cmocka_unit_test(test_attention_window),
        cmocka_unit_test(test_attention_other_head_dims),
        cmocka_unit_test(test_attention_single_tokens),
        cmocka_unit_test(test_attention_softcap),
        cmocka_unit_test(test_attention_errors),
    };
    return dfct_main("test_cuda_attention", tests, sizeof tests / sizeof tests[0]);
}
