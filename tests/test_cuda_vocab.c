/*
 * test_cuda_vocab.c — the CUDA LM head (log-probs, entropy, their backward) and token sampler
 * (src/backend/cuda/vocab.cu) against the CPU references df_lmhead_fwd / _bwd and
 * df_sample_token. Without a GPU: a SKIP line and exit 77 (ctest: skipped).
 *
 * Every bound is the sum of the device's and the CPU's worst-case errors from exact
 * arithmetic (tests/tolerance.h), first order in the unit roundoffs; SECOND_ORDER covers the
 * products of relative errors, all below 1e-2 here.
 */
#include "cuda_testutil.h"
#include "distflow/rollout.h"
#include "engine/sampling.h"
#include "model/ops.h"

#define SECOND_ORDER 1.02
/* CUDA's tanhf: 2 ulp of |tanh| <= 1, an absolute 4 u */
#define TANHF_ERR (4 * DF_U32)

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

static void rand_targets(int32_t *t, int64_t n, int64_t V, uint64_t seed)
{
    df_rng r;
    df_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++)
        t[i] = (int32_t)df_rng_below(&r, (uint64_t)V);
}

/* z[v] = scale h . W[v] and A[v] = scale sum_k |h_k W[v,k]| in double. */
static void row_logits(const float *h, const float *W, int64_t V, int64_t H, double scale, double *z,
                       double *A)
{
    for (int64_t v = 0; v < V; v++) {
        double s = 0, a = 0;
        for (int64_t k = 0; k < H; k++) {
            double p = (double)h[k] * W[v * H + k];
            s += p;
            a += fabs(p);
        }
        z[v] = scale * s;
        A[v] = scale * a;
    }
}

/* Every |got - ref| <= bound (got finite); prints the worst ratio. */
static void check_within(const char *what, const float *got, const float *ref, const double *bound, int64_t n)
{
    double worst = 0, maxerr = 0, maxb = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!isfinite(got[i]) || !(e <= bound[i]))
            fail_msg("%s[%lld]: device %.9g, CPU %.9g, |diff| %.3e > bound %.3e", what, (long long)i,
                     (double)got[i], (double)ref[i], e, bound[i]);
        maxerr = fmax(maxerr, e);
        maxb = fmax(maxb, bound[i]);
        if (bound[i] > 0)
            worst = fmax(worst, e / bound[i]);
    }
    printf("  %-46s max |diff| %.3e, max bound %.3e, max diff/bound %.3f\n", what, maxerr, maxb, worst);
}

/* ---- LM head forward ------------------------------------------------------------------ */

/*
 * Per row, device and CPU each (doubled for their difference), with u = 2^-24:
 *   Ez = gamma_{H+2} max_v A_v: error of a logit (a length-H dot product times 1/T, Higham
 *        eq. 3.5, and the alpha multiply; both sides use the same float 1/T);
 *   lse is 1-Lipschitz in the max norm: Ez; its sum s0 = sum e^(z - m) with terms rounded
 *        at d = z - m (u |d|, carried through the exp as a relative u |d|), the exp (4 u: 2 ulp
 *        on the device, 3 u on the CPU) and the sum (the CPU sums a tile row of `cols` floats:
 *        gamma_cols, the rest in double: gamma_V(2^-53)): rho0 = u M1 + 4 u + gc, with
 *        M1 = sum p |d|, M2 = sum p d^2; then the float output, u |lse|;
 *   logp = z_t - lse: Ez + Ez + rho0 + u |logp|;
 *   entropy = log s0 - s1 / s0, dH/dz_v = -p_v (z_v - E z): 2 Ez M1 from the logits; the
 *        rounding of log s0 (rho0), of s1 / s0 (terms e d: u M2 + 6 u M1; sum: gc M1; s0's
 *        rho0 times s1 / s0 = M1); then u |entropy|;
 *   sum of p^2 S = s2 / s0^2 (m cancels): |d log S / d z_v| = 2 |p_v^2 / S - p_v| sums to <= 4,
 *        so 4 Ez from the logits; s2's terms are squared weights, 2 (u |d| + 4 u) + u relative,
 *        and its sum gc; s0's rho0 twice; then u S (S, b_sq NULL: skipped).
 */
static void lm_fwd_bounds(const float *h, const float *W, int64_t n, int64_t V, int64_t H, float T,
                          const float *logp, const float *lse, const float *ent, double *b_logp,
                          double *b_lse, double *b_ent, const float *sq, double *b_sq)
{
    const double inv_t = (double)(1.0f / T), u = DF_U32, E = 2 * SECOND_ORDER;
    df_vocab_tiling t = df_vocab_tiling_for(V, H);
    t = df_vocab_tiling_clamp(&t);
    const double gc = df_tol_gamma((double)t.cols, DF_U32) + df_tol_gamma((double)V, DF_U64);
    double *z = xmalloc(8 * (size_t)V), *A = xmalloc(8 * (size_t)V);
    for (int64_t i = 0; i < n; i++) {
        row_logits(h + i * H, W, V, H, inv_t, z, A);
        double m = -INFINITY, amax = 0, s = 0, M1 = 0, M2 = 0, S = 0, Sd = 0;
        for (int64_t v = 0; v < V; v++) {
            m = fmax(m, z[v]);
            amax = fmax(amax, A[v]);
        }
        for (int64_t v = 0; v < V; v++)
            s += exp(z[v] - m);
        for (int64_t v = 0; v < V; v++) {
            double d = m - z[v], p = exp(-d) / s;
            M1 += p * d;
            M2 += p * d * d;
            S += p * p;
            Sd += p * p * d;
        }
        const double Ez = df_tol_gamma((double)H + 2, u) * amax, rho0 = u * M1 + 4 * u + gc;
        b_lse[i] = E * (Ez + rho0 + u * fabs(lse[i]));
        b_logp[i] = E * (2 * Ez + rho0 + u * fabs(logp[i]));
        if (ent)
            b_ent[i] =
                E * (2 * Ez * M1 + rho0 + u * M2 + 6 * u * M1 + gc * M1 + M1 * rho0 + u * fabs(ent[i]));
        if (sq)
            b_sq[i] = E * (S * (4 * Ez + 9 * u + gc + 2 * rho0) + 2 * u * Sd + u * fabs(sq[i]));
    }
    free(z), free(A);
}

/* The bounds must stay far below the errors of a wrong formula (a missed tile, a wrong
 * temperature or rescale move logp by >> 1e-2): otherwise the check proves nothing. */
static void assert_meaningful(const char *what, const double *b, int64_t n, double limit)
{
    for (int64_t i = 0; i < n; i++)
        if (!(b[i] < limit))
            fail_msg("%s bound %.3e >= %.3e: too loose to test anything", what, b[i], limit);
}

static void lm_fwd_case(int64_t n, int64_t V, int64_t H, float T, bool with_ent, uint64_t seed)
{
    printf(" lmhead fwd n=%lld V=%lld H=%lld T=%g entropy %s\n", (long long)n, (long long)V, (long long)H,
           (double)T, with_ent ? "on" : "off");
    const size_t nh = (size_t)(n * H), vh = (size_t)(V * H), n4 = 4 * (size_t)n;
    float *h = xmalloc(4 * nh), *W = xmalloc(4 * vh);
    int32_t *tg = xmalloc(n4);
    dfct_rand(h, (int64_t)nh, seed, -1, 1);
    dfct_rand(W, (int64_t)vh, seed + 1, -1, 1);
    rand_targets(tg, n, V, seed + 2);
    /* the sum of p^2 without the entropy (the other flag combination) */
    float *logp = xmalloc(n4), *ent = xmalloc(n4), *lse = xmalloc(n4), *sq = with_ent ? NULL : xmalloc(n4);
    float *cs = xmalloc(4 * (size_t)df_lmhead_scratch_floats(n, V, H));
    df_lmhead_fwd(logp, with_ent ? ent : NULL, sq, lse, h, W, tg, n, V, H, T, 0.0f, cs);

    float *dh = dfct_up(h, 4 * nh), *dW = dfct_up(W, 4 * vh);
    int32_t *dt = dfct_up(tg, n4);
    float *dlogp = dfct_alloc(n4), *dlse = dfct_alloc(n4), *dent = with_ent ? dfct_alloc(n4) : NULL;
    float *dsq = with_ent ? NULL : dfct_alloc(n4);
    float *ds = dfct_alloc(4 * (size_t)df_cuda_vocab_scratch_floats(n, V, H));
    DFCT_OK(df_cuda_lmhead_fwd(dfct_cu, dlogp, dent, dsq, dlse, dh, dW, dt, n, V, H, T, 0.0f, ds));
    float *g_logp = dfct_down(dlogp, n4), *g_lse = dfct_down(dlse, n4);
    float *g_ent = with_ent ? dfct_down(dent, n4) : NULL, *g_sq = with_ent ? NULL : dfct_down(dsq, n4);

    double *b_logp = xmalloc(8 * (size_t)n), *b_lse = xmalloc(8 * (size_t)n);
    double *b_ent = xmalloc(8 * (size_t)n), *b_sq = xmalloc(8 * (size_t)n);
    lm_fwd_bounds(h, W, n, V, H, T, logp, lse, with_ent ? ent : NULL, b_logp, b_lse, b_ent, sq, b_sq);
    assert_meaningful("logp", b_logp, n, 1e-2);
    check_within("logp", g_logp, logp, b_logp, n);
    check_within("lse", g_lse, lse, b_lse, n);
    if (with_ent) {
        assert_meaningful("entropy", b_ent, n, 5e-2);
        check_within("entropy", g_ent, ent, b_ent, n);
    } else {
        assert_meaningful("sum of p^2", b_sq, n, 1e-3);
        check_within("sum of p^2", g_sq, sq, b_sq, n);
    }
    free(h), free(W), free(tg), free(logp), free(ent), free(lse), free(sq), free(cs);
    free(g_logp), free(g_lse), free(g_ent), free(g_sq), free(b_logp), free(b_lse), free(b_ent), free(b_sq);
    dfct_free(dh), dfct_free(dW), dfct_free(dt), dfct_free(dlogp), dfct_free(dlse);
    dfct_free(dent), dfct_free(dsq), dfct_free(ds);
}

/* n = 37: one tile. V = 5003 and 151936 (Qwen2's vocabulary), T = 1 and 0.7. */
static void test_lmhead_fwd(void **state)
{
    (void)state;
    lm_fwd_case(37, 5003, 96, 1.0f, true, 101);
    lm_fwd_case(37, 5003, 96, 0.7f, false, 102);
    lm_fwd_case(37, 151936, 32, 0.7f, true, 103);
    lm_fwd_case(37, 151936, 32, 1.0f, false, 104);
}

/* n = 120 at V = 151936: two vocabulary tiles (139776 + 12160 columns: the online rescale);
 * n = 33000: two row blocks (32768 + 232). */
static void test_lmhead_fwd_tiles(void **state)
{
    (void)state;
    lm_fwd_case(120, 151936, 16, 1.0f, true, 111);
    lm_fwd_case(120, 151936, 16, 0.7f, false, 113); /* the sum of p^2's rescale */
    lm_fwd_case(33000, 300, 8, 0.7f, true, 112);
}

/* ---- LM head backward ----------------------------------------------------------------- */

/*
 * Both sides recompute p = e^(z - lse) from the same lse and entropy (the CPU forward's), so
 * with gl = dlogp / T, ge = dentropy / T, lp = z - lse, a_v = |gl| (p + [v = t]) +
 * |ge| p (|lp| + |ent|) >= |dlogits_v|:
 *   p's relative error: Ez_v (the logit, as the forward) + u |lp| (the subtraction) + 4 u (exp);
 *   gl, ge, the products, (lp + ent), the subtraction and the target's add: <= 9 u more, so
 *   c_v = Ez_v + u (|lp| + 9) and |error of dlogits_v| <= d_v = c_v (a_v + |ge| p) (the
 *   |ge| p term: the absolute error of lp + ent);
 *   dh[i,k] = sum_v dlogits W[v,k] over <= V + 64 roundings (tiles accumulate with beta = 1):
 *   sum_v d_v |W[v,k]| + gamma_{V+64} sum_v a_v |W[v,k]|;
 *   dW[v,k] = dW0 + sum_i dlogits h[i,k], n + 2 roundings (row blocks): sum_i d_v |h[i,k]| +
 *   gamma_{n+2} (sum_i a_v |h[i,k]| + |dW0|).
 */
static void lm_bwd_bounds(const float *h, const float *W, const int32_t *tg, const float *dlogp,
                          const float *dent, const float *lse, const float *ent, const float *dW0, int64_t n,
                          int64_t V, int64_t H, float T, double *b_dh, double *b_dW)
{
    const double inv_t = (double)(1.0f / T), u = DF_U32, E = 2 * SECOND_ORDER;
    const double gz = df_tol_gamma((double)H + 2, u);
    double *z = xmalloc(8 * (size_t)V), *A = xmalloc(8 * (size_t)V);
    double *Dh = xmalloc(8 * (size_t)H), *Sh = xmalloc(8 * (size_t)H);
    double *DW = calloc((size_t)(V * H), 8), *SW = calloc((size_t)(V * H), 8);
    assert_non_null(DW);
    assert_non_null(SW);
    for (int64_t i = 0; i < n; i++) {
        const float *hi = h + i * H;
        row_logits(hi, W, V, H, inv_t, z, A);
        const double gl = (double)dlogp[i] * inv_t, ge = dent ? (double)dent[i] * inv_t : 0;
        const double e = ge != 0 ? fabs((double)ent[i]) : 0, l = lse[i];
        memset(Dh, 0, 8 * (size_t)H);
        memset(Sh, 0, 8 * (size_t)H);
        for (int64_t v = 0; v < V; v++) {
            const double lp = z[v] - l, p = exp(lp), c = gz * A[v] + u * (fabs(lp) + 9);
            const double a = fabs(gl) * (p + (v == tg[i])) + fabs(ge) * p * (fabs(lp) + e);
            const double d = c * (a + fabs(ge) * p);
            const float *wv = W + v * H;
            double *dw = DW + v * H, *sw = SW + v * H;
            for (int64_t k = 0; k < H; k++) {
                Dh[k] += d * fabs(wv[k]);
                Sh[k] += a * fabs(wv[k]);
                dw[k] += d * fabs(hi[k]);
                sw[k] += a * fabs(hi[k]);
            }
        }
        for (int64_t k = 0; k < H; k++)
            b_dh[i * H + k] = E * (Dh[k] + df_tol_gamma((double)V + 64, u) * Sh[k]);
    }
    for (int64_t j = 0; j < V * H; j++)
        b_dW[j] = E * (DW[j] + df_tol_gamma((double)n + 2, u) * (SW[j] + fabs(dW0[j])));
    free(z), free(A), free(Dh), free(Sh), free(DW), free(SW);
}

static void lm_bwd_case(int64_t n, int64_t V, int64_t H, float T, bool with_dent, uint64_t seed)
{
    printf(" lmhead bwd n=%lld V=%lld H=%lld T=%g dentropy %s\n", (long long)n, (long long)V, (long long)H,
           (double)T, with_dent ? "on" : "off");
    const size_t nh = (size_t)(n * H), vh = (size_t)(V * H), n4 = 4 * (size_t)n;
    float *h = xmalloc(4 * nh), *W = xmalloc(4 * vh), *dW0 = xmalloc(4 * vh);
    int32_t *tg = xmalloc(n4);
    float *logp = xmalloc(n4), *ent = xmalloc(n4), *lse = xmalloc(n4);
    float *dlogp = xmalloc(n4), *dent = xmalloc(n4);
    dfct_rand(h, (int64_t)nh, seed, -1, 1);
    dfct_rand(W, (int64_t)vh, seed + 1, -1, 1);
    rand_targets(tg, n, V, seed + 2);
    dfct_rand(dlogp, n, seed + 3, -1, 1);
    dfct_rand(dent, n, seed + 4, -1, 1);
    /* small initial dW: the gradient of a non-target row (~ n p) stays visible above it */
    dfct_rand(dW0, (int64_t)vh, seed + 5, -1e-3f, 1e-3f);
    float *cs = xmalloc(4 * (size_t)df_lmhead_scratch_floats(n, V, H));
    df_lmhead_fwd(logp, ent, NULL, lse, h, W, tg, n, V, H, T, 0.0f, cs);
    float *dh_c = xmalloc(4 * nh), *dW_c = xmalloc(4 * vh);
    memcpy(dW_c, dW0, 4 * vh);
    df_lmhead_bwd(dh_c, dW_c, dlogp, with_dent ? dent : NULL, h, W, tg, lse, with_dent ? ent : NULL, n, V, H,
                  T, 0.0f, cs);

    float *d_h = dfct_up(h, 4 * nh), *d_W = dfct_up(W, 4 * vh), *d_dW = dfct_up(dW0, 4 * vh);
    int32_t *d_tg = dfct_up(tg, n4);
    float *d_lse = dfct_up(lse, n4), *d_ent = dfct_up(ent, n4);
    float *d_dlogp = dfct_up(dlogp, n4), *d_dent = dfct_up(dent, n4);
    float *d_dh = dfct_alloc(4 * nh); /* NaN: must be overwritten */
    float *ds = dfct_alloc(4 * (size_t)df_cuda_vocab_scratch_floats(n, V, H));
    DFCT_OK(df_cuda_lmhead_bwd(dfct_cu, d_dh, d_dW, d_dlogp, with_dent ? d_dent : NULL, d_h, d_W, d_tg, d_lse,
                               with_dent ? d_ent : NULL, n, V, H, T, 0.0f, ds));
    float *g_dh = dfct_down(d_dh, 4 * nh), *g_dW = dfct_down(d_dW, 4 * vh);

    double *b_dh = xmalloc(8 * nh), *b_dW = xmalloc(8 * vh);
    lm_bwd_bounds(h, W, tg, dlogp, with_dent ? dent : NULL, lse, ent, dW0, n, V, H, T, b_dh, b_dW);
    check_within("dh", g_dh, dh_c, b_dh, (int64_t)nh);
    check_within("dW (accumulated)", g_dW, dW_c, b_dW, (int64_t)vh);
    free(h), free(W), free(dW0), free(tg), free(logp), free(ent), free(lse), free(dlogp);
    free(dent), free(cs), free(dh_c), free(dW_c), free(g_dh), free(g_dW), free(b_dh), free(b_dW);
    dfct_free(d_h), dfct_free(d_W), dfct_free(d_dW), dfct_free(d_tg), dfct_free(d_lse);
    dfct_free(d_ent), dfct_free(d_dlogp), dfct_free(d_dent), dfct_free(d_dh), dfct_free(ds);
}

static void test_lmhead_bwd(void **state)
{
    (void)state;
    lm_bwd_case(37, 5003, 96, 0.7f, true, 201);
    lm_bwd_case(37, 5003, 96, 1.0f, false, 202);
    lm_bwd_case(37, 151936, 32, 1.0f, true, 203);
}

/* two vocabulary tiles; two row blocks (dW accumulates across them) */
static void test_lmhead_bwd_tiles(void **state)
{
    (void)state;
    lm_bwd_case(120, 151936, 16, 0.7f, true, 211);
    lm_bwd_case(33000, 300, 8, 1.0f, true, 212);
}

/* ---- sampling --------------------------------------------------------------------------- */

/*
 * Inputs: uniform floats in [-1, 1], or with `exact` multiples of 1/8 in [-1, 1] and H <= 64,
 * whose dot products (multiples of 2^-6, |x| <= 64) are exact in float in any order: the
 * device's logits are then the CPU's bit for bit, ties included.
 */
static void sample_inputs(float *h, int64_t nh, float *W, int64_t nw, bool exact, uint64_t seed)
{
    if (!exact) {
        dfct_rand(h, nh, seed, -1, 1);
        dfct_rand(W, nw, seed + 1, -1, 1);
        return;
    }
    df_rng r;
    df_rng_seed(&r, seed);
    for (int64_t i = 0; i < nh; i++)
        h[i] = (float)((int)df_rng_below(&r, 17) - 8) / 8.0f;
    for (int64_t i = 0; i < nw; i++)
        W[i] = (float)((int)df_rng_below(&r, 17) - 8) / 8.0f;
}

static void *sample_work(int64_t V)
{
    void *w = aligned_alloc(64, (size_t)(df_sample_work_bytes(V) + 63) / 64 * 64);
    assert_non_null(w);
    return w;
}

/*
 * Double-precision weights w = e^(x / T - max) on either side (sampling.c and the device):
 * x / T and the max carry 2 roundings each, the difference one, the exp 5 ulp of 2^-53
 * (v8d_exp's 4.04, rounded up); a sum of V of them gamma_V. e64 bounds the relative error of
 * any weight, sum, cumulative sum or ratio of them, per side (zabs = max |x| / T). A logp
 * z_t - zmax - log(sum) takes 3 e64: log(sum) e64, the roundings of z_t and zmax (4 u zabs)
 * and of the two subtractions (u (|lse| + |logp|) <= u (4 zabs + 2 log V) < 5 u zabs + gamma_V).
 */
static double err64(int64_t V, double zabs)
{
    return DF_U64 * (5 * zabs + 5) + df_tol_gamma((double)V, DF_U64);
}

typedef struct {
    float x;
    int32_t id;
} xid;

static int cmp_xid_desc(const void *pa, const void *pb)
{
    const xid *a = pa, *b = pb;
    if (a->x != b->x)
        return a->x > b->x ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Row x[V] (float) of logits and Delta = max_v |device logit - x_v| <= gamma_H A_v (the
 * device's dot product, alpha = 1) + u |x_v| (x is the exact value rounded): 0 when exact.
 * With Gemma 2's final-logit cap C > 0, x_v = C tanh(z_v / C) rounded and the device's error
 * passes through the cap: (1 - t^2) (gamma_H A_v + u |z_v|) (the dot product and the division by
 * C), C TANHF_ERR and the product by C, u |x_v|. */
static double sample_row(const float *h, const float *W, int64_t V, int64_t H, bool exact, float cap,
                         float *x)
{
    double *z = xmalloc(8 * (size_t)V), *A = xmalloc(8 * (size_t)V), delta = 0;
    row_logits(h, W, V, H, 1.0, z, A);
    assert_false(exact && cap > 0); /* capped logits are never exact */
    for (int64_t v = 0; v < V; v++) {
        const double t = cap > 0 ? tanh(z[v] / cap) : 0, dz = df_tol_gamma((double)H, DF_U32) * A[v];
        x[v] = (float)(cap > 0 ? cap * t : z[v]);
        if (exact)
            assert_true((double)x[v] == z[v]);
        else if (cap > 0)
            delta = fmax(delta, (1 - t * t) * (dz + DF_U32 * fabs(z[v])) + cap * TANHF_ERR +
                                    2 * DF_U32 * fabs(x[v]));
        else
            delta = fmax(delta, dz + DF_U32 * fabs(x[v]));
    }
    free(z), free(A);
    return delta;
}

/*
 * The filters of the case on the sorted row, chosen away from float ambiguity: top-k moves k
 * up to where the k-th and (k+1)-th logits differ by > 2 Delta (unless exact: ties kept on
 * purpose); top-p is set half-way through the probability of the last kept token, which must
 * exceed 2 (margin + 2 u) (top_p's float rounding and the product need = top_p mass) and be
 * followed by a logit gap > 2 Delta. Returns the expected number of kept tokens.
 */
static int64_t choose_filters(const xid *s, int64_t V, double Te, double delta, double margin, bool exact,
                              int64_t *top_k, double q, float *top_p)
{
    int64_t kc = V;
    if (*top_k > 0 && *top_k < V) {
        int64_t k = *top_k;
        while (!exact && k < V && !(s[k - 1].x - s[k].x > 2 * delta))
            k++;
        *top_k = k;
        for (kc = k; kc < V && s[kc].x == s[k - 1].x; kc++)
            ;
    }
    *top_p = 1.0f;
    if (q >= 1)
        return kc;
    double *cum = xmalloc(8 * (size_t)(kc + 1));
    cum[0] = 0;
    for (int64_t j = 0; j < kc; j++)
        cum[j + 1] = cum[j] + exp(((double)s[j].x - s[0].x) / Te);
    const double mass = cum[kc];
    int64_t j = 0;
    while (j + 1 < kc && cum[j + 1] < q * mass)
        j++;
    for (; j >= 0; j--) {
        const double half = (cum[j + 1] - cum[j]) / 2 / mass;
        const bool gap = exact || j + 1 == kc || s[j].x - s[j + 1].x > 2 * delta;
        if (half > margin + 2 * DF_U32 && gap)
            break;
    }
    if (j < 0)
        fail_msg("no top-p boundary clear of rounding near %g", q);
    *top_p = (float)((cum[j] + (cum[j + 1] - cum[j]) / 2) / mass);
    free(cum);
    return j + 1;
}

/*
 * One row of logits (h W^T), drawn n times with different u (rows of h copied): the device's
 * token must lie in the CPU's kept set, its CDF interval (CPU probabilities, id order) must
 * hold u within `margin`, and it must be the CPU's token (df_sample_token on the same u)
 * unless u is within `margin` of that token's interval. margin: the CPU and the device each
 * compute the CDF to 2 e64; device logits off by <= Delta scale each weight by e^(+-Delta/T),
 * so the CDF by e^(+-2 Delta/T). logp: both sides' float roundings, 2 Delta / T (the logit and
 * lse, 1-Lipschitz), 3 e64 per side.
 */
static void sample_case_cap(int64_t V, int64_t H, int64_t n, float T, int64_t top_k, double q,
                            bool exact, float cap, uint64_t seed)
{
    float *h = xmalloc(4 * (size_t)H), *W = xmalloc(4 * (size_t)(V * H)), *x = xmalloc(4 * (size_t)V);
    sample_inputs(h, H, W, V * H, exact, seed);
    const double delta = sample_row(h, W, V, H, exact, cap, x), Te = T > 0 ? T : 1.0;
    xid *s = xmalloc(sizeof(xid) * (size_t)V);
    for (int64_t v = 0; v < V; v++)
        s[v] = (xid){x[v], (int32_t)v};
    qsort(s, (size_t)V, sizeof *s, cmp_xid_desc);
    const double zabs = fmax(fabs((double)s[0].x), fabs((double)s[V - 1].x)) / Te;
    const double e64 = err64(V, zabs), margin = expm1(2 * delta / Te) + 4 * e64;
    float top_p;
    const int64_t n_kept = choose_filters(s, V, Te, delta, margin, exact, &top_k, q, &top_p);
    printf(" sample V=%lld H=%lld n=%lld T=%g top_k=%lld top_p=%.7g softcap %g %s: %lld kept, "
           "margin %.2e\n",
           (long long)V, (long long)H, (long long)n, (double)T, (long long)top_k, (double)top_p,
           (double)cap, exact ? "exact logits" : "float logits", (long long)n_kept, margin);

    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.temperature = T;
    sp.top_k = (int)top_k;
    sp.top_p = top_p;
    void *work = sample_work(V);
    double *probs = xmalloc(8 * (size_t)V), *F = xmalloc(8 * (size_t)V), lse = 0;
    df_sample_probs(x, V, &sp, work, probs);
    int64_t nz = 0;
    for (int64_t v = 0; v < V; v++) {
        nz += probs[v] > 0;
        F[v] = (v ? F[v - 1] : 0) + probs[v];
        lse += exp(x[v] / Te - s[0].x / Te);
    }
    lse = s[0].x / Te + log(lse);
    assert_int_equal(nz, n_kept); /* the test reads the CPU's filters as they are */

    /* u: 0 for row 0 (the first kept token), then the draws df_sample_token consumes */
    double *u = xmalloc(8 * (size_t)n);
    int32_t *tok_c = xmalloc(4 * (size_t)n);
    float *lp_c = xmalloc(4 * (size_t)n), *hn = xmalloc(4 * (size_t)(n * H));
    df_rng r;
    df_rng_seed(&r, seed + 7);
    for (int64_t i = 0; i < n; i++) {
        memcpy(hn + i * H, h, 4 * (size_t)H);
        df_rng before = r;
        u[i] = df_rng_uniform(&before);
        tok_c[i] = df_sample_token(x, V, &sp, &r, work, &lp_c[i]);
        assert_memory_equal(&before, &r, sizeof r); /* it drew exactly u[i] */
    }
    u[0] = 0.0;
    for (tok_c[0] = 0; tok_c[0] < V && !(F[tok_c[0]] > 0.0); tok_c[0]++)
        ;
    lp_c[0] = (float)(x[tok_c[0]] / Te - lse);

    float *d_h = dfct_up(hn, 4 * (size_t)(n * H)), *d_W = dfct_up(W, 4 * (size_t)(V * H));
    int32_t *d_tok = dfct_alloc(4 * (size_t)n);
    float *d_lp = dfct_alloc(4 * (size_t)n);
    float *ds = dfct_alloc(4 * (size_t)df_cuda_vocab_scratch_floats(n, V, H));
    DFCT_OK(df_cuda_sample(dfct_cu, d_tok, d_lp, d_h, d_W, n, V, H, T, cap, top_k, top_p, u, ds));
    int32_t *tok = dfct_down(d_tok, 4 * (size_t)n);
    float *lp = dfct_down(d_lp, 4 * (size_t)n);

    int64_t near = 0;
    double lp_err = 0;
    for (int64_t i = 0; i < n; i++) {
        const int32_t t = tok[i], c = tok_c[i];
        if (t < 0 || t >= V || !(probs[t] > 0))
            fail_msg("row %lld (u = %.17g): device token %d is not kept by the CPU filters", (long long)i,
                     u[i], t);
        const double lo = F[t] - probs[t], hi = F[t];
        if (!(u[i] >= lo - margin && u[i] <= hi + margin))
            fail_msg("row %lld: u = %.17g outside the device token %d's CDF interval "
                     "[%.17g, %.17g) by more than %.2e",
                     (long long)i, u[i], t, lo, hi, margin);
        if (t != c) {
            const double dist = fmin(fabs(u[i] - (F[c] - probs[c])), fabs(u[i] - F[c]));
            if (dist > margin)
                fail_msg("row %lld: u = %.17g is %.2e from a CDF boundary (margin %.2e) but "
                         "device %d != CPU %d",
                         (long long)i, u[i], dist, margin, t, c);
            near++;
            continue;
        }
        const double b = 2 * DF_U32 * fabs(lp_c[i]) + 2 * delta / Te + 6 * e64;
        const double e = fabs((double)lp[i] - lp_c[i]);
        if (!(e <= b))
            fail_msg("row %lld token %d: logp device %.9g, CPU %.9g (bound %.3e)", (long long)i, t,
                     (double)lp[i], (double)lp_c[i], b);
        lp_err = fmax(lp_err, e);
    }
    printf("  tokens: %lld of %lld equal the CPU's, %lld differ within the margin; max logp "
           "|diff| %.3e\n",
           (long long)(n - near), (long long)n, (long long)near, lp_err);
    if (exact)
        assert_int_equal(near, 0); /* margin ~1e-11: a boundary hit means a bug, not rounding */
    free(h), free(W), free(x), free(s), free(work), free(probs), free(F), free(u), free(tok_c);
    free(lp_c), free(hn), free(tok), free(lp);
    dfct_free(d_h), dfct_free(d_W), dfct_free(d_tok), dfct_free(d_lp), dfct_free(ds);
}

static void sample_case(int64_t V, int64_t H, int64_t n, float T, int64_t top_k, double q, bool exact,
                        uint64_t seed)
{
    sample_case_cap(V, H, n, T, top_k, q, exact, 0.0f, seed);
}

/*
 * Greedy (temperature 0): the lowest argmax, bit-exact on exact logits; row 0 gets a tie at
 * its maximum (W row of the argmax copied to a lower id). logp at temperature 1: both sides'
 * float rounding and 3 e64 each.
 */
static void greedy_case(int64_t V, int64_t H, int64_t n, bool null_u, uint64_t seed)
{
    printf(" greedy V=%lld H=%lld n=%lld\n", (long long)V, (long long)H, (long long)n);
    float *h = xmalloc(4 * (size_t)(n * H)), *W = xmalloc(4 * (size_t)(V * H));
    float *x = xmalloc(4 * (size_t)(n * V));
    sample_inputs(h, n * H, W, V * H, true, seed);
    sample_row(h, W, V, H, true, 0.0f, x);
    int64_t a = 0;
    for (int64_t v = 1; v < V; v++)
        a = x[v] > x[a] ? v : a;
    const int64_t b = a > 0 ? a / 2 : 1, tie = a < b ? a : b;
    memcpy(W + b * H, W + a * H, 4 * (size_t)H);
    for (int64_t i = 0; i < n; i++)
        sample_row(h + i * H, W, V, H, true, 0.0f, x + i * V);

    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.temperature = 0.0f;
    void *work = sample_work(V);
    int32_t *tok_c = xmalloc(4 * (size_t)n);
    float *lp_c = xmalloc(4 * (size_t)n);
    double *u = xmalloc(8 * (size_t)n), zabs = 0;
    df_rng r;
    df_rng_seed(&r, seed + 3);
    for (int64_t i = 0; i < n; i++) {
        u[i] = 0.0; /* unused when greedy */
        tok_c[i] = df_sample_token(x + i * V, V, &sp, &r, work, &lp_c[i]);
        for (int64_t v = 0; v < V; v++)
            zabs = fmax(zabs, fabs(x[i * V + v]));
    }
    assert_int_equal(tok_c[0], tie);

    float *d_h = dfct_up(h, 4 * (size_t)(n * H)), *d_W = dfct_up(W, 4 * (size_t)(V * H));
    int32_t *d_tok = dfct_alloc(4 * (size_t)n);
    float *d_lp = dfct_alloc(4 * (size_t)n);
    float *ds = dfct_alloc(4 * (size_t)df_cuda_vocab_scratch_floats(n, V, H));
    DFCT_OK(df_cuda_sample(dfct_cu, d_tok, d_lp, d_h, d_W, n, V, H, 0.0f, 0.0f, 0, 1.0f,
                           null_u ? NULL : u, ds));
    int32_t *tok = dfct_down(d_tok, 4 * (size_t)n);
    float *lp = dfct_down(d_lp, 4 * (size_t)n);
    const double e64 = err64(V, zabs);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (tok[i] != tok_c[i])
            fail_msg("row %lld: device argmax %d, CPU %d", (long long)i, tok[i], tok_c[i]);
        const double bound = 2 * DF_U32 * fabs(lp_c[i]) + 6 * e64;
        const double e = fabs((double)lp[i] - lp_c[i]);
        if (!(e <= bound))
            fail_msg("row %lld: greedy logp device %.9g, CPU %.9g (bound %.3e)", (long long)i, (double)lp[i],
                     (double)lp_c[i], bound);
        worst = fmax(worst, e);
    }
    printf("  %lld argmaxes equal (row 0: tie at %lld and %lld), max logp |diff| %.3e\n", (long long)n,
           (long long)a, (long long)b, worst);
    free(h), free(W), free(x), free(work), free(tok_c), free(lp_c), free(u), free(tok), free(lp);
    dfct_free(d_h), dfct_free(d_W), dfct_free(d_tok), dfct_free(d_lp), dfct_free(ds);
}

static void test_sample_greedy(void **state)
{
    (void)state;
    greedy_case(151936, 64, 64, false, 301);
    greedy_case(5003, 64, 37, true, 302); /* u may be NULL when greedy */
}

/* n = 128 at V = 151936: two row blocks of logits (110 + 18) */
static void test_sample_temperature(void **state)
{
    (void)state;
    sample_case(151936, 64, 128, 1.0f, 0, 1.0, true, 311);
    sample_case(5003, 64, 128, 0.7f, 0, 1.0, false, 312);
}

static void test_sample_top_k(void **state)
{
    (void)state;
    sample_case(151936, 64, 128, 0.8f, 1000, 1.0, true, 321); /* ties at the k-th logit */
    sample_case(5003, 64, 128, 1.0f, 50, 1.0, false, 322);
    sample_case(5003, 64, 64, 1.0f, 5003, 1.0, true, 323); /* k = V: off */
}

static void test_sample_top_p(void **state)
{
    (void)state;
    sample_case(151936, 64, 128, 1.3f, 0, 0.8, true, 331);
    sample_case(5003, 64, 128, 1.0f, 0, 0.6, false, 332);
    sample_case(151936, 64, 128, 1.1f, 2000, 0.9, true, 333); /* top-k, then top-p */
    sample_case(5003, 64, 64, 2.0f, 0, 0.3, true, 334);
}

/* Gemma 2's final-logit soft-cap: logits h W^T of std ~ sqrt(H / 9) = 2.7 (H = 64) capped at C =
 * 2 (most saturate: the CPU's kept set and CDF then differ from the uncapped one's) and C = 30
 * (gemma-2's value; nearly linear), with top-k and top-p. */
static void test_sample_softcap(void **state)
{
    (void)state;
    sample_case_cap(5003, 64, 128, 1.0f, 0, 1.0, false, 2.0f, 341);
    sample_case_cap(5003, 64, 128, 0.7f, 50, 0.9, false, 2.0f, 342);
    sample_case_cap(151936, 64, 64, 1.0f, 0, 0.8, false, 30.0f, 343);
}

/* Bad sizes and parameters are DF_EINVAL before any launch; n = 0 is a no-op. */
static void test_vocab_errors(void **state)
{
    (void)state;
    float *d = dfct_alloc(4096);
    int32_t *ti = (int32_t *)(void *)d;
    double u[4] = {0};
    assert_int_equal(df_cuda_lmhead_fwd(dfct_cu, d, NULL, NULL, d, d, d, ti, 4, 0, 8, 1.0f, 0.0f, d), DF_EINVAL);
    assert_int_equal(df_cuda_lmhead_fwd(dfct_cu, d, NULL, NULL, d, d, d, ti, 4, 16, 8, 0.0f, 0.0f, d), DF_EINVAL);
    assert_int_equal(df_cuda_lmhead_fwd(dfct_cu, d, NULL, NULL, d, d, d, ti, 4, 16, 0, 1.0f, 0.0f, d), DF_EINVAL);
    DFCT_OK(df_cuda_lmhead_fwd(dfct_cu, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 16, 8, 1.0f, 0.0f, NULL));
    assert_int_equal(df_cuda_lmhead_bwd(dfct_cu, d, d, d, d, d, d, ti, d, NULL, 4, 16, 8, 1.0f, 0.0f, d),
                     DF_EINVAL); /* dentropy without entropy */
    assert_int_equal(df_cuda_sample(dfct_cu, ti, d, d, d, 4, 16, 8, 1.0f, 0.0f, 0, 0.0f, u, d), DF_EINVAL);
    assert_int_equal(df_cuda_sample(dfct_cu, ti, d, d, d, 4, 16, 8, -1.0f, 0.0f, 0, 1.0f, u, d), DF_EINVAL);
    assert_int_equal(df_cuda_sample(dfct_cu, ti, d, d, d, 4, 16, 8, 1.0f, 0.0f, 0, 1.0f, NULL, d), DF_EINVAL);
    DFCT_OK(df_cuda_sample(dfct_cu, NULL, NULL, NULL, NULL, 0, 16, 8, 1.0f, 0.0f, 0, 1.0f, NULL, NULL));
    /* a soft-cap must be 0 or finite and > 0 */
    assert_int_equal(df_cuda_sample(dfct_cu, ti, d, d, d, 4, 16, 8, 1.0f, -2.0f, 0, 1.0f, u, d), DF_EINVAL);
    assert_int_equal(df_cuda_lmhead_fwd(dfct_cu, d, NULL, NULL, d, d, d, ti, 4, 16, 8, 1.0f, NAN, d),
                     DF_EINVAL);
    assert_int_equal(df_cuda_lmhead_bwd(dfct_cu, d, d, d, NULL, d, d, ti, d, NULL, 4, 16, 8, 1.0f,
                                        INFINITY, d), DF_EINVAL);
    assert_int_equal(df_cuda_vocab_scratch_floats(0, 100, 8), 0);
    assert_true(df_cuda_vocab_scratch_floats(64, 151936, 64) >= 64 * 151936);
    assert_true(df_cuda_vocab_scratch_floats(37, 151936, 64) < ((int64_t)1 << 24) + 4096);
    /* sized once for the largest n (acts: max_out), so never smaller for more rows: the LM
     * head's R x Vt tile alone is not monotone (21845 rows tile 768 columns, 21846 only 512) */
    const int64_t Vs[3] = {151936, 152064, 1000};
    for (int i = 0; i < 3; i++)
        for (int64_t n = 2, prev = df_cuda_vocab_scratch_floats(1, Vs[i], 64); n <= 70000; n++) {
            const int64_t f = df_cuda_vocab_scratch_floats(n, Vs[i], 64);
            if (f < prev)
                fail_msg("vocab scratch: %lld floats for %lld rows, %lld for %lld (V %lld)",
                         (long long)f, (long long)n, (long long)prev, (long long)(n - 1),
                         (long long)Vs[i]);
            prev = f;
        }
    DFCT_OK(df_cuda_sync(dfct_cu));
    dfct_free(d);
}

/*
 * Scratch sized once for the largest n serves fewer rows (df_acts sizes it for max_out): 21846
 * rows tile the head 512 columns wide, 21845 rows 768, so a sizing of R x Vt (before the fix)
 * put the tile of a 21845-row call 87320 floats past the end of a scratch sized for 21846. A
 * guard after the scratch must come back untouched through the float32 and bf16 heads' forward
 * and backward (V = 1000, H = 8: cheap matmuls, the same tile arithmetic as V = 151936).
 */
static void test_lmhead_scratch_guard(void **state)
{
    (void)state;
    const int64_t N = 21846, n = 21845, V = 1000, H = 8, G = (int64_t)1 << 18;
    const int64_t sf = df_cuda_vocab_scratch_floats(N, V, H);
    const size_t nh = (size_t)(n * H), vh = (size_t)(V * H), n4 = 4 * (size_t)n;
    float *h = xmalloc(4 * nh), *W = xmalloc(4 * vh);
    int32_t *tg = xmalloc(n4);
    dfct_rand(h, (int64_t)nh, 71, -1, 1);
    dfct_rand(W, (int64_t)vh, 72, -1, 1);
    rand_targets(tg, n, V, 73);
    float *dh = dfct_up(h, 4 * nh), *dW = dfct_up(W, 4 * vh);
    int32_t *dt = dfct_up(tg, n4);
    uint16_t *dW16 = dfct_alloc(2 * vh);
    DFCT_OK(df_cuda_f32_to_bf16(dfct_cu, dW16, dW, (int64_t)vh));
    float *dlogp = dfct_alloc(n4), *dlse = dfct_alloc(n4), *dent = dfct_alloc(n4);
    float *ones = dfct_alloc(n4), *gh = dfct_alloc(4 * nh), *gW = dfct_alloc(4 * vh);
    DFCT_OK(df_cuda_fill(dfct_cu, ones, n, 1.0f));
    DFCT_OK(df_cuda_fill(dfct_cu, gW, (int64_t)vh, 0.0f));
    float *ds = dfct_alloc(4 * (size_t)(sf + G));
    DFCT_OK(df_cuda_fill(dfct_cu, ds + sf, G, 12345.0f));
    DFCT_OK(df_cuda_lmhead_fwd(dfct_cu, dlogp, dent, NULL, dlse, dh, dW, dt, n, V, H, 1.0f, 0.0f, ds));
    DFCT_OK(df_cuda_lmhead_bwd(dfct_cu, gh, gW, ones, ones, dh, dW, dt, dlse, dent, n, V, H, 1.0f, 0.0f, ds));
    DFCT_OK(df_cuda_lmhead_fwd_w16(dfct_cu, dlogp, dent, NULL, dlse, dh, dW16, dt, n, V, H, 1.0f, 0.0f, ds));
    DFCT_OK(df_cuda_lmhead_bwd_w16(dfct_cu, gh, gW, ones, ones, dh, dW16, dt, dlse, dent, n, V, H,
                                   1.0f, 0.0f, ds));
    float *guard = dfct_down(ds + sf, 4 * (size_t)G), *lse = dfct_down(dlse, n4);
    for (int64_t i = 0; i < G; i++)
        if (guard[i] != 12345.0f)
            fail_msg("LM head with %lld rows wrote float %lld past a scratch of %lld floats sized "
                     "for %lld rows", (long long)n, (long long)i, (long long)sf, (long long)N);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(lse[i]))
            fail_msg("lse[%lld] = %g: the head did not run", (long long)i, (double)lse[i]);
    free(h), free(W), free(tg), free(guard), free(lse);
    dfct_free(dh), dfct_free(dW), dfct_free(dt), dfct_free(dW16), dfct_free(dlogp);
    dfct_free(dlse), dfct_free(dent), dfct_free(ones), dfct_free(gh), dfct_free(gW), dfct_free(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lmhead_fwd),    cmocka_unit_test(test_lmhead_fwd_tiles),
        cmocka_unit_test(test_lmhead_bwd),    cmocka_unit_test(test_lmhead_bwd_tiles),
        cmocka_unit_test(test_sample_greedy), cmocka_unit_test(test_sample_temperature),
        cmocka_unit_test(test_sample_top_k),  cmocka_unit_test(test_sample_top_p),
        cmocka_unit_test(test_sample_softcap),
        cmocka_unit_test(test_vocab_errors),  cmocka_unit_test(test_lmhead_scratch_guard),
    };
    return dfct_main("test_cuda_vocab", tests, sizeof tests / sizeof tests[0]);
}
