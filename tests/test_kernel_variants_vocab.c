/*
 * test_kernel_variants_vocab.c — the kernel variants agree (as in
 * test_kernel_variants.c) on the vocabulary kernels (LM head forward /
 * backward, the row helpers behind sampling), top-k / top-p sampling, decode
 * attention over the KV cache and the optimizer step. These hold the variants'
 * own AVX-512 code (vscalef exp, the double exp, bucket masks, masked dot
 * products). Bounds are derived per element in double (kvariants.h).
 */
#include "kvariants.h"

#include "distflow/model.h"
#include "distflow/optim.h"
#include "engine/rollout_internal.h"
#include "model/ops.h"
#include "engine/sampling.h"
#include "model/ops.h"

#define PAIRS(l, a, b)                                                                            \
    for (int a = 0; a < (l).n; a++)                                                               \
        for (int b = a + 1; b < (l).n; b++)

#define U64 DF_U64

/* ---- LM head ------------------------------------------------------------------- */

typedef struct {
    int64_t n, V, H, cols;
    float temp, *h, *W;
    int32_t *tgt;
    double *z, *ez; /* [n, V] exact logits and the bound on sgemm's error in each */
} lm_in;

/* A logit is a K = H dot product scaled by 1 / T: gamma_{H+1} inv_t sum |h W|. */
static lm_in lm_make(int64_t n, int64_t V, int64_t H, float temp)
{
    lm_in a = {n, V, H, df_vocab_tiling_for(V, H).cols, temp, kv_fvec(n * H), kv_fvec(V * H),
               malloc((size_t)n * sizeof(int32_t)), kv_dvec(n * V), kv_dvec(n * V)};
    kv_fill(a.h, n * H, 41, -1.0, 1.0);
    kv_fill(a.W, V * H, 42, -0.5, 0.5);
    const double inv_t = 1.0 / temp;
    for (int64_t i = 0; i < n; i++) {
        a.tgt[i] = (int32_t)((i * 7919) % V);
        for (int64_t v = 0; v < V; v++) {
            double s = 0, m = 0;
            for (int64_t e = 0; e < H; e++) {
                s += (double)a.h[i * H + e] * a.W[v * H + e];
                m += fabs((double)a.h[i * H + e] * a.W[v * H + e]);
            }
            a.z[i * V + v] = s * inv_t;
            a.ez[i * V + v] = kv_g((double)H + 1) * m * inv_t;
        }
    }
    return a;
}

static void lm_free(lm_in *a) { free(a->h), free(a->W), free(a->tgt), free(a->z), free(a->ez); }

/*
 * Row i of the forward: lse = m + log sum e^(z - m) is shift invariant, so each
 * term contributes its own logit error, the rounding of z - m and the exp
 * (delta_v); tile rows are summed in float (cols terms, gamma_cols), tiles in
 * double. logp = z_t - lse. The entropy log s0 - s1 / s0 moves by at most
 * max_v(error of the term) sum_v p_v |log p_v + H| through the weights, plus
 * the roundings of d = z - m and e d and the float sums of s1.
 */
static void lm_row_bounds(const lm_in *a, int64_t i, double *blogp, double *bent, double *blse,
                          double *bsq)
{
    const double *z = a->z + i * a->V, *ez = a->ez + i * a->V, E = kv_exp_err();
    double m = -INFINITY, emax = 0, dmax = 0, s0 = 0, Ez = 0, S1 = 0, Sd = 0;
    for (int64_t v = 0; v < a->V; v++)
        m = fmax(m, z[v]), emax = fmax(emax, ez[v]);
    for (int64_t v = 0; v < a->V; v++)
        s0 += exp(z[v] - m), dmax = fmax(dmax, m - z[v]);
    const double lse = m + log(s0);
    for (int64_t v = 0; v < a->V; v++)
        Ez += exp(z[v] - lse) * z[v];
    const double ent = lse - Ez, gc = kv_g((double)a->cols);
    double sq = 0;
    for (int64_t v = 0; v < a->V; v++) {
        double p = exp(z[v] - lse);
        S1 += p * fabs(z[v] - lse + ent);
        Sd += p * (m - z[v]);
        sq += p * p;
    }
    const double delta = kv_grow(emax + KV_U * dmax + E), dbl = df_tol_gamma((double)a->V + 8, U64);
    *blse = delta + gc / (1 - gc) + KV_U * fabs(lse) + dbl * (1 + fabs(m) + fabs(lse));
    *blogp = ez[a->tgt[i]] + *blse + KV_U * fabs(z[a->tgt[i]] - lse);
    *bent = (emax + delta) * S1 + 2 * KV_U * Sd + gc * (1 + Sd) * (1 + delta) + KV_U * fabs(ent) +
            dbl * (1 + Sd + fabs(lse));
    /* sum of p^2 = s2 / s0^2: each weight relative delta, squared (2 delta + u), both float
     * sums gc; s0 counts twice; to second order; the float store */
    const double Esq = 2 * delta + KV_U + gc + 2 * (delta + gc);
    *bsq = sq * (Esq * (1 + Esq) + KV_U + dbl);
}

static void test_lmhead_fwd(void **state)
{
    (void)state;
    kv_list l = kv_runnable();
    KV_REQUIRE_TWO(l);
    lm_in a = lm_make(40, 3000, 64, 0.7f);
    float *lp[KV_MAX], *en[KV_MAX], *ls[KV_MAX], *sq[KV_MAX];
    float *scratch = kv_fvec(df_lmhead_scratch_floats(a.n, a.V, a.H));
    for (int v = 0; v < l.n; v++) {
        lp[v] = kv_fvec(a.n), en[v] = kv_fvec(a.n), ls[v] = kv_fvec(a.n), sq[v] = kv_fvec(a.n);
        kv_use(l.name[v]);
        df_lmhead_fwd(lp[v], en[v], sq[v], ls[v], a.h, a.W, a.tgt, a.n, a.V, a.H, a.temp, 0.0f, scratch);
    }
    kv_restore();
    double *bl = kv_dvec(a.n), *be = kv_dvec(a.n), *bs = kv_dvec(a.n), *bq = kv_dvec(a.n);
    for (int64_t i = 0; i < a.n; i++)
        lm_row_bounds(&a, i, &bl[i], &be[i], &bs[i], &bq[i]);
    PAIRS(l, p, q)
    {
        kv_check_f("lmhead logp", l.name[p], lp[p], l.name[q], lp[q], bl, a.n);
        kv_check_f("lmhead entropy", l.name[p], en[p], l.name[q], en[q], be, a.n);
        kv_check_f("lmhead lse", l.name[p], ls[p], l.name[q], ls[q], bs, a.n);
        kv_check_f("lmhead sum of p^2", l.name[p], sq[p], l.name[q], sq[q], bq, a.n);
    }
    for (int v = 0; v < l.n; v++)
        free(lp[v]), free(en[v]), free(ls[v]), free(sq[v]);
    free(scratch), free(bl), free(be), free(bs), free(bq);
    lm_free(&a);
}

/*
 * dlogits_v = -gl p_v - ge p_v (lp_v + ent) (+ gl at the target), lp = z - lse,
 * p = e^lp within pi_v = e^(ez_v + u |lp| + E) - 1, gl / ge = dlogp / dentropy
 * over T (one rounding each). dh = dlogits W sums V terms (tiles, then groups,
 * gamma_{V+1}), dW = dlogits^T h sums the n rows (gamma_{n+1}).
 */
static void lm_bwd_bounds(const lm_in *a, const float *lse, const float *ent, const float *dlp,
                          const float *den, double *bh, double *bw)
{
    const double inv_t = 1.0 / a->temp, E = kv_exp_err(), gv = kv_g((double)a->V + 1);
    const double gn = kv_g((double)a->n + 1);
    for (int64_t i = 0; i < a->n; i++)
        for (int64_t v = 0; v < a->V; v++) {
            double lp = a->z[i * a->V + v] - lse[i], p = exp(lp), ezv = a->ez[i * a->V + v];
            double gl = dlp[i] * inv_t, ge = den[i] * inv_t, t = fabs(lp + ent[i]);
            double pi = kv_grow(ezv + KV_U * fabs(lp) + E);
            double dl = fabs(gl) * p + fabs(ge) * p * t + (v == a->tgt[i] ? fabs(gl) : 0.0);
            double ddl = fabs(gl) * p * (pi + kv_g(3)) +
                         fabs(ge) * p * ((pi + kv_g(4)) * t + (1 + pi) * (ezv + KV_U * fabs(lp))) +
                         (v == a->tgt[i] ? KV_U * (fabs(gl) + dl) : 0.0);
            for (int64_t e = 0; e < a->H; e++) {
                double wv = fabs(a->W[v * a->H + e]), hv = fabs(a->h[i * a->H + e]);
                bh[i * a->H + e] += ddl * wv * (1 + gv) + gv * dl * wv;
                bw[v * a->H + e] += ddl * hv * (1 + gn) + gn * dl * hv;
            }
        }
}

static void test_lmhead_bwd(void **state)
{
    (void)state;
    kv_list l = kv_runnable();
    KV_REQUIRE_TWO(l);
    lm_in a = lm_make(24, 2500, 48, 0.9f);
    const int64_t n = a.n, V = a.V, H = a.H;
    float *scratch = kv_fvec(df_lmhead_scratch_floats(n, V, H));
    float *lp = kv_fvec(n), *ent = kv_fvec(n), *lse = kv_fvec(n);
    float *dlp = kv_fvec(n), *den = kv_fvec(n), *dh[KV_MAX], *dW[KV_MAX];
    kv_fill(dlp, n, 43, -1.0, 1.0);
    kv_fill(den, n, 44, -0.1, 0.1);
    kv_use(l.name[0]); /* the same forward statistics feed every variant's backward */
    df_lmhead_fwd(lp, ent, NULL, lse, a.h, a.W, a.tgt, n, V, H, a.temp, 0.0f, scratch);
    for (int v = 0; v < l.n; v++) {
        dh[v] = kv_fvec(n * H), dW[v] = kv_fvec(V * H);
        memset(dW[v], 0, (size_t)(V * H) * sizeof(float));
        kv_use(l.name[v]);
        df_lmhead_bwd(dh[v], dW[v], dlp, den, a.h, a.W, a.tgt, lse, ent, n, V, H, a.temp, 0.0f,
                      scratch);
    }
    kv_restore();
    double *bh = kv_dvec(n * H), *bw = kv_dvec(V * H);
    lm_bwd_bounds(&a, lse, ent, dlp, den, bh, bw);
    PAIRS(l, p, q)
    {
        kv_check_f("lmhead dh", l.name[p], dh[p], l.name[q], dh[q], bh, n * H);
        kv_check_f("lmhead dW", l.name[p], dW[p], l.name[q], dW[q], bw, V * H);
    }
    for (int v = 0; v < l.n; v++)
        free(dh[v]), free(dW[v]);
    free(scratch), free(lp), free(ent), free(lse), free(dlp), free(den), free(bh), free(bw);
    lm_free(&a);
}

/* ---- row helpers and sampling ----------------------------------------------------- */

/*
 * e^x in double, libm (within 1 ulp) or the AVX-512 variant's own (ops_vocab.c:
 * Cody-Waite reduction, 0.8 u; coefficients 1/k! rounded, 2 u; Horner of degree
 * 12 (Higham eq. 5.3), 2 gamma_24; truncation |r|^13 / 13! e^(2|r|) < 3.4e-16).
 */
static double exp64_err(void) { return 2.8 * U64 + 2 * df_tol_gamma(24, U64) + 3.4e-16; }

/* max, first index of the max: exact; w = e^(x - shift) as df_expf; the double sum of
 * float 16-lane partial sums: gamma_16 in float, gamma_n in double. */
static void test_row_helpers(void **state)
{
    (void)state;
    kv_list l = kv_runnable();
    KV_REQUIRE_TWO(l);
    const int64_t n = 1003;
    float *x = kv_fvec(n), *xn = kv_fvec(n), *w[KV_MAX];
    double *w64[KV_MAX], s32[KV_MAX], s64[KV_MAX];
    float mx[KV_MAX];
    int64_t at[KV_MAX];
    kv_fill(x, n, 51, -9.0, 9.0);
    x[777] = x[901] = 9.5f; /* a tie for the max: the lower index wins */
    memcpy(xn, x, (size_t)n * sizeof(float));
    xn[5] = NAN; /* ignored by the max */
    for (int v = 0; v < l.n; v++) {
        w[v] = kv_fvec(n), w64[v] = kv_dvec(n);
        kv_use(l.name[v]);
        mx[v] = df_row_max(xn, n);
        at[v] = df_row_find(xn, n, mx[v]);
        s32[v] = df_row_exp(w[v], x, n, 9.5f);
        s64[v] = df_row_exp_f64(w64[v], x, n, 1.25, 9.5 * 1.25);
    }
    kv_restore();
    const double E = kv_exp_err(), E64 = exp64_err();
    double *b32 = kv_dvec(n), *b64 = kv_dvec(n), sum32 = 0, sum64 = 0;
    for (int64_t j = 0; j < n; j++) {
        double d = (double)x[j] - 9.5, z = (double)x[j] * 1.25;
        b32[j] = (E + KV_U * fabs(d) / (1 - KV_U)) * exp(d);
        b64[j] = (E64 + U64 * (fabs(z) + fabs(z - 11.875))) * exp(z - 11.875);
        sum32 += exp(d) + b32[j], sum64 += exp(z - 11.875) + b64[j];
    }
    PAIRS(l, a, b)
    {
        assert_true(mx[a] == mx[b] && at[a] == at[b] && at[a] == 777);
        kv_check_f("row_exp w", l.name[a], w[a], l.name[b], w[b], b32, n);
        kv_check("row_exp_f64 w", l.name[a], w64[a], l.name[b], w64[b], b64, n);
        double bs = (kv_g(16) + df_tol_gamma((double)n, U64)) * sum32;
        kv_check("row_exp sum", l.name[a], &s32[a], l.name[b], &s32[b], &bs, 1);
        double bs64 = df_tol_gamma((double)n, U64) * sum64;
        kv_check("row_exp_f64 sum", l.name[a], &s64[a], l.name[b], &s64[b], &bs64, 1);
    }
    for (int v = 0; v < l.n; v++)
        free(w[v]), free(w64[v]);
    free(x), free(xn), free(b32), free(b64);
}

static int cmp_desc(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a < b) - (a > b);
}

/*
 * Precondition for comparing kept sets: in exact arithmetic the top-p boundary
 * is not within 1e-9 (relative) of the cumulative mass of either neighbouring
 * token, so relative weight errors of ~1e-14 cannot move it.
 */
static void nucleus_margin_ok(const float *x, int64_t V, float T, int top_k, float top_p)
{
    double *w = kv_dvec(V), *s = kv_dvec(V);
    for (int64_t v = 0; v < V; v++)
        w[v] = (double)x[v] / T;
    memcpy(s, w, (size_t)V * sizeof(double));
    qsort(s, (size_t)V, sizeof(double), cmp_desc);
    double M = 0, cum = 0, zmax = s[0];
    for (int k = 0; k < top_k; k++)
        M += exp(s[k] - zmax);
    for (int k = 0; k < top_k; k++) {
        double next = cum + exp(s[k] - zmax);
        if (next >= top_p * M) {
            double margin = fmin(top_p * M - cum, next - top_p * M) / M;
            if (!(margin > 1e-9))
                fail_msg("test data: the top-p boundary lies %.3g from a token's mass", margin);
            break;
        }
        cum = next;
    }
    free(w), free(s);
}

/*
 * probs_v = w_v / mass over the kept tokens: w_v = e^(x_v / T - zmax) in
 * double (exp64_err plus the roundings of x / T and of the subtraction), the
 * mass a double sum of at most V terms (gamma_V), one division.
 */
static void test_sample_probs(void **state)
{
    (void)state;
    kv_list l = kv_runnable();
    KV_REQUIRE_TWO(l);
    const int64_t V = 5000;
    float *x = kv_fvec(V);
    kv_fill(x, V, 61, -6.0, 6.0);
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.temperature = 0.8f, sp.top_k = 400, sp.top_p = 0.9f;
    nucleus_margin_ok(x, V, sp.temperature, sp.top_k, sp.top_p);
    void *work = malloc((size_t)df_sample_work_bytes(V));
    double *pr[KV_MAX];
    for (int v = 0; v < l.n; v++) {
        pr[v] = kv_dvec(V);
        kv_use(l.name[v]);
        df_sample_probs(x, V, &sp, work, pr[v]);
    }
    kv_restore();
    double *bp = kv_dvec(V), inv_t = 1.0 / (double)sp.temperature, zmax = -INFINITY, wmax = 0;
    for (int64_t v = 0; v < V; v++)
        zmax = fmax(zmax, (double)x[v] * inv_t);
    for (int64_t v = 0; v < V; v++) {
        double z = (double)x[v] * inv_t;
        wmax = fmax(wmax, exp64_err() + U64 * (fabs(z) + fabs(z - zmax)));
    }
    const double rel = 2 * wmax + df_tol_gamma((double)V, U64) + U64;
    for (int64_t v = 0; v < V; v++)
        bp[v] = rel * pr[0][v];
    PAIRS(l, a, b)
    {
        for (int64_t v = 0; v < V; v++)
            if ((pr[a][v] > 0) != (pr[b][v] > 0))
                fail_msg("token %lld kept by %s only", (long long)v,
                         pr[a][v] > 0 ? l.name[a] : l.name[b]);
        kv_check("sample probs", l.name[a], pr[a], l.name[b], pr[b], bp, V);
    }
    for (int v = 0; v < l.n; v++)
        free(pr[v]);
    free(x), free(work), free(bp);
}

/* ---- decode attention over the KV cache ---------------------------------------- */

/*
 * As the training attention (test_kernel_variants.c) without tiles: scores
 * gamma_{hd+1} D, softmax with libm's expf (1 ulp: 2 u), a float sum of the L
 * weights, out = sum_j p_j v_j (gamma_{L+1}).
 */
static void kv_row_bounds(const df_backend_kv *kv, const float *q, int64_t slot, int64_t L,
                          int64_t nh, int64_t nkv, int64_t hd, double *bout)
{
    const double scale = 1.0 / sqrt((double)hd);
    const float *K = df_kv_at(kv, kv->k, 0, slot, 0), *Vv = df_kv_at(kv, kv->v, 0, slot, 0);
    for (int64_t h = 0; h < nh; h++) {
        double s[64], m = -INFINITY, emax = 0, range = 0, W = 0;
        const int64_t g = h / (nh / nkv);
        for (int64_t j = 0; j < L; j++) {
            double d = 0, ad = 0;
            for (int64_t e = 0; e < hd; e++) {
                d += (double)q[h * hd + e] * K[j * kv->kv_dim + g * hd + e];
                ad += fabs((double)q[h * hd + e] * K[j * kv->kv_dim + g * hd + e]);
            }
            s[j] = d * scale, m = fmax(m, s[j]);
            emax = fmax(emax, kv_g((double)hd + 1) * ad * scale);
        }
        for (int64_t j = 0; j < L; j++)
            W += exp(s[j] - m), range = fmax(range, m - s[j]);
        const double eta = kv_grow(emax + KV_U * range + 2 * KV_U), gl = kv_g((double)L + 2);
        for (int64_t e = 0; e < hd; e++) {
            double o = 0, A = 0;
            for (int64_t j = 0; j < L; j++) {
                double vj = Vv[j * kv->kv_dim + g * hd + e], w = exp(s[j] - m) / W;
                o += w * vj, A += w * fabs(vj);
            }
            bout[h * hd + e] = ((eta + gl) * (A + fabs(o))) / (1 - eta - gl) + kv_g(2) * fabs(o);
        }
    }
}

static void test_kv_attention(void **state)
{
    (void)state;
    kv_list l = kv_runnable();
    KV_REQUIRE_TWO(l);
    const int64_t nh = 4, nkv = 2, hd = 40, slots = 3, max_len = 64, n = 3;
    df_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.num_hidden_layers = 1, cfg.num_key_value_heads = nkv, cfg.head_dim = hd;
    df_backend_kv kv;
    assert_int_equal(df_kv_cache_init(&kv, &cfg, slots, max_len, DF_KV_F32), 0);
    kv_fill(kv.k, slots * max_len * nkv * hd, 71, -1.5, 1.5);
    kv_fill(kv.v, slots * max_len * nkv * hd, 72, -1.0, 1.0);
    const int32_t slot[3] = {2, 0, 1}, pos[3] = {0, 37, 63};
    float *q = kv_fvec(n * nh * hd), *out[KV_MAX];
    float *scores = kv_fvec(64 * nh * max_len); /* per thread, up to 64 threads */
    kv_fill(q, n * nh * hd, 73, -1.5, 1.5);
    for (int v = 0; v < l.n; v++) {
        out[v] = kv_fvec(n * nh * hd);
        kv_use(l.name[v]);
        df_kv_attention(out[v], q, &kv, 0, slot, pos, n, nh, nkv, hd, 0, 0.0f, scores);
    }
    kv_restore();
    double *bo = kv_dvec(n * nh * hd);
    for (int64_t r = 0; r < n; r++)
        kv_row_bounds(&kv, q + r * nh * hd, slot[r], pos[r] + 1, nh, nkv, hd, bo + r * nh * hd);
    PAIRS(l, a, b)
    kv_check_f("kv attention", l.name[a], out[a], l.name[b], out[b], bo, n * nh * hd);
    for (int v = 0; v < l.n; v++)
        free(out[v]);
    free(q), free(scores), free(bo);
    df_kv_cache_release(&kv);
}

/* ---- optimizer --------------------------------------------------------------------- */

/* Bounds of one AdamW step from the state (m, v, p, g) with the float scalars of
 * optim_step.c: m' in three roundings, v' in four, the denominator
 * sqrt(v') / bc2 + eps within gamma_5 relative, p' = p decay - step m' / den. */
static void adamw_bounds(const df_adamw *o, const float *p, const float *g, double lr, double *bp,
                         double *bm, double *bv)
{
    const double t = (double)o->step + 1;
    const float decay = (float)(1.0 - lr * o->cfg.weight_decay);
    const float b1 = (float)o->cfg.beta1, b2 = (float)o->cfg.beta2;
    const float omb1 = (float)(1.0 - o->cfg.beta1), omb2 = (float)(1.0 - o->cfg.beta2);
    const float step = (float)(lr / (1.0 - pow(o->cfg.beta1, t)));
    const float bc2 = (float)sqrt(1.0 - pow(o->cfg.beta2, t)), eps = (float)o->cfg.eps;
    for (int64_t i = 0; i < o->n; i++) {
        double m = (double)o->m[i] * b1 + (double)g[i] * omb1;
        double v = (double)o->v[i] * b2 + (double)g[i] * g[i] * omb2;
        bm[i] = kv_g(3) * (fabs((double)o->m[i] * b1) + fabs((double)g[i] * omb1));
        bv[i] = kv_g(4) * v;
        double den = sqrt(v) / bc2 + eps, r = m / den;
        double dr = bm[i] / den + fabs(r) * (kv_g(5) + KV_U);
        bp[i] = kv_g(2) * fabs((double)p[i] * decay) + step * (dr + kv_g(2) * fabs(r));
    }
}

static void test_optimizer(void **state)
{
    (void)state;
    kv_list l = kv_runnable();
    KV_REQUIRE_TWO(l);
    const int64_t n = 777;
    df_adamw_config cfg;
    df_adamw_config_defaults(&cfg);
    df_adamw *o = NULL;
    assert_int_equal(df_adamw_create(&cfg, n, &o), 0);
    float *p0 = kv_fvec(n), *g = kv_fvec(n), *m0 = kv_fvec(n), *v0 = kv_fvec(n);
    kv_fill(p0, n, 81, -1.0, 1.0), kv_fill(g, n, 82, -0.1, 0.1);
    kv_fill(m0, n, 83, -0.05, 0.05), kv_fill(v0, n, 84, 0.0, 1e-3);
    o->step = 4;
    float *p[KV_MAX], *m[KV_MAX], *v[KV_MAX], *gc[KV_MAX];
    double nrm[KV_MAX], clip[KV_MAX], ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)g[i] * g[i];
    const double max_norm = 0.5 * sqrt(ss); /* clipping halves the gradient */
    for (int k = 0; k < l.n; k++) {
        p[k] = kv_fvec(n), m[k] = kv_fvec(n), v[k] = kv_fvec(n), gc[k] = kv_fvec(n);
        memcpy(p[k], p0, (size_t)n * 4), memcpy(gc[k], g, (size_t)n * 4);
        memcpy(o->m, m0, (size_t)n * 4), memcpy(o->v, v0, (size_t)n * 4);
        o->step = 4;
        kv_use(l.name[k]);
        assert_int_equal(df_adamw_step(o, p[k], g, 1e-3), 0);
        memcpy(m[k], o->m, (size_t)n * 4), memcpy(v[k], o->v, (size_t)n * 4);
        nrm[k] = df_grad_norm(g, n);
        clip[k] = df_clip_grad_norm(gc[k], n, max_norm);
    }
    kv_restore();
    memcpy(o->m, m0, (size_t)n * 4), memcpy(o->v, v0, (size_t)n * 4);
    o->step = 4;
    double *bp = kv_dvec(n), *bm = kv_dvec(n), *bv = kv_dvec(n), *bg = kv_dvec(n);
    adamw_bounds(o, p0, g, 1e-3, bp, bm, bv);
    /* norm: a double sum of squares (gamma_{n+1}, halved by the sqrt, and one rounding);
     * clipping multiplies by c = max_norm / (norm + 1e-6) ~ 1/2, which carries the norm's
     * relative error plus its rounding to float, then rounds the product. */
    double bn = (df_tol_gamma((double)n + 1, U64) + U64) * sqrt(ss);
    for (int64_t i = 0; i < n; i++)
        bg[i] = (2 * KV_U + 2 * bn / sqrt(ss)) * fabs(g[i]) * 0.5;
    PAIRS(l, a, b)
    {
        kv_check_f("adamw p", l.name[a], p[a], l.name[b], p[b], bp, n);
        kv_check_f("adamw m", l.name[a], m[a], l.name[b], m[b], bm, n);
        kv_check_f("adamw v", l.name[a], v[a], l.name[b], v[b], bv, n);
        kv_check("grad norm", l.name[a], &nrm[a], l.name[b], &nrm[b], &bn, 1);
        kv_check("clip norm", l.name[a], &clip[a], l.name[b], &clip[b], &bn, 1);
        kv_check_f("clipped grad", l.name[a], gc[a], l.name[b], gc[b], bg, n);
    }
    for (int k = 0; k < l.n; k++)
        free(p[k]), free(m[k]), free(v[k]), free(gc[k]);
    free(p0), free(g), free(m0), free(v0), free(bp), free(bm), free(bv), free(bg);
    df_adamw_free(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lmhead_fwd),   cmocka_unit_test(test_lmhead_bwd),
        cmocka_unit_test(test_row_helpers),  cmocka_unit_test(test_sample_probs),
        cmocka_unit_test(test_kv_attention), cmocka_unit_test(test_optimizer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
