/*
 * test_cuda_elementwise.c — the CUDA backend's embedding, RMSNorm, RoPE, SwiGLU (elementwise.cu)
 * and AdamW, sum of squares, scaling (optim.cu) against the CPU reference (src/model/ops.h,
 * optim_step.c) on the same random inputs. Without a GPU: a SKIP line and exit 77.
 *
 * Bounds (tests/tolerance.h): for each output element an absolute bound b_i on |device - CPU|,
 * the sum of two worst-case bounds on |implementation - exact| (exact = real arithmetic on the
 * same float inputs and scalars), each derived per op below, first order in u (gamma_n counts
 * rounded up by one where a second-order term could matter). Then ||device - CPU||_2 <= ||b||_2,
 * and dfct_check holds the relative error to ||b|| / ||CPU||.
 */
#include "cuda_testutil.h"
#include "distflow/optim.h"
#include "geglu_ref.h"
#include "model/ops.h"

static double g32(double n) { return df_tol_gamma(n, DF_U32); }

/* CUDA's expf: at most 2 ulp (CUDA C Programming Guide, Mathematical Functions), an ulp
 * being at most 2 u of the value: 4 u relative; the CPU's df_expf is within DF_TOL_EXPF = 3 u. */
#define DEV_EXPF (4 * DF_U32)

static float *frand(int64_t n, uint64_t seed, float lo, float hi)
{
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    assert_non_null(x);
    dfct_rand(x, n, seed, lo, hi);
    return x;
}

static float *fdup(const float *x, int64_t n)
{
    float *y = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    assert_non_null(y);
    memcpy(y, x, sizeof(float) * (size_t)n);
    return y;
}

static double *dzeros(int64_t n)
{
    double *d = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    assert_non_null(d);
    return d;
}

static int32_t *irand(int64_t n, uint64_t seed, int64_t below)
{
    int32_t *v = malloc(sizeof(int32_t) * (size_t)n);
    assert_non_null(v);
    df_rng r;
    df_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++)
        v[i] = (int32_t)df_rng_below(&r, (uint64_t)below);
    return v;
}

static double norm2(const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += b[i] * b[i];
    return sqrt(s);
}

/* ||got - ref|| <= ||b|| as dfct_check's relative error (ref nonzero in every case here). */
static void check_abs(const char *what, const float *got, const float *ref, const double *b,
                      int64_t n)
{
    double r = 0;
    for (int64_t i = 0; i < n; i++)
        r += (double)ref[i] * ref[i];
    dfct_check(what, got, ref, n, norm2(b, n) / sqrt(r));
}

/* ---- embedding ---------------------------------------------------------------------------- */

static void embedding_case(int64_t V, int64_t T, int64_t H, uint64_t seed)
{
    char what[80];
    float *tab = frand(V * H, seed, -1, 1);
    int32_t *ids = irand(T, seed + 1, V);
    ids[0] = 0;
    ids[T - 1] = (int32_t)(V - 1); /* the table's first and last rows */
    if (T >= 8)
        ids[1] = ids[T / 2] = ids[T - 2] = 3; /* repeats at least 3 times */
    int32_t *d_ids = dfct_up(ids, sizeof(int32_t) * (size_t)T);
    float *d_tab = dfct_up(tab, sizeof(float) * (size_t)(V * H));
    float *d_out = dfct_alloc(sizeof(float) * (size_t)(T * H));

    /* forward: a copy, bit for bit */
    DFCT_OK(df_cuda_embedding_fwd(dfct_cu, d_out, d_ids, d_tab, T, H));
    float *got = dfct_down(d_out, sizeof(float) * (size_t)(T * H));
    float *ref = malloc(sizeof(float) * (size_t)(T * H));
    df_embedding_fwd(ref, ids, tab, T, H);
    snprintf(what, sizeof what, "embedding_fwd V=%lld T=%lld H=%lld", (long long)V, (long long)T,
             (long long)H);
    dfct_check(what, got, ref, T * H, 0.0);
    free(got), free(ref);

    /* backward onto random dtable: row r is dtable0[r] plus its k_r token rows, k_r + 1 terms
     * added in any order (atomics on the device): gamma_{k_r} sum |terms| each side. */
    float *dtab0 = frand(V * H, seed + 2, -1, 1), *dout = frand(T * H, seed + 3, -1, 1);
    float *d_dtab = dfct_up(dtab0, sizeof(float) * (size_t)(V * H));
    float *d_dout = dfct_up(dout, sizeof(float) * (size_t)(T * H));
    DFCT_OK(df_cuda_embedding_bwd(dfct_cu, d_dtab, d_dout, d_ids, T, H));
    got = dfct_down(d_dtab, sizeof(float) * (size_t)(V * H));
    ref = fdup(dtab0, V * H);
    df_embedding_bwd(ref, dout, ids, T, H);
    double *b = dzeros(V * H);
    int64_t *cnt = calloc((size_t)V, sizeof(int64_t));
    for (int64_t t = 0; t < T; t++) {
        cnt[ids[t]]++;
        for (int64_t j = 0; j < H; j++)
            b[ids[t] * H + j] += fabs(dout[t * H + j]);
    }
    for (int64_t r = 0; r < V; r++)
        for (int64_t j = 0; j < H; j++)
            b[r * H + j] = 2 * g32((double)cnt[r]) * (b[r * H + j] + fabs(dtab0[r * H + j]));
    snprintf(what, sizeof what, "embedding_bwd V=%lld T=%lld H=%lld", (long long)V, (long long)T,
             (long long)H);
    check_abs(what, got, ref, b, V * H);
    for (int64_t r = 0; r < V; r++) /* rows no token names are untouched */
        if (cnt[r] == 0)
            assert_memory_equal(got + r * H, dtab0 + r * H, sizeof(float) * (size_t)H);
    free(got), free(ref), free(b), free(cnt), free(tab), free(ids), free(dtab0), free(dout);
    dfct_free(d_ids), dfct_free(d_tab), dfct_free(d_out), dfct_free(d_dtab), dfct_free(d_dout);
}

static void test_embedding(void **state)
{
    (void)state;
    embedding_case(1000, 37, 896, 101);
    embedding_case(13, 300, 96, 111);  /* ~23 tokens per row: many colliding atomics */
    embedding_case(7, 129, 130, 121);
    assert_int_equal(df_cuda_embedding_fwd(dfct_cu, NULL, NULL, NULL, -1, 8), DF_EINVAL);
    DFCT_OK(df_cuda_embedding_bwd(dfct_cu, NULL, NULL, NULL, 0, 8)); /* empty: no launch */
}

/* ---- RMSNorm -------------------------------------------------------------------------------- */

static void rmsnorm_case(int64_t T, int64_t H, float eps, bool with_dw, uint64_t seed)
{
    char what[80];
    const int64_t n = T * H;
    float *x = frand(n, seed, -2, 2), *w = frand(H, seed + 1, 0.5f, 1.5f);
    float *d_x = dfct_up(x, sizeof(float) * (size_t)n), *d_w = dfct_up(w, sizeof(float) * (size_t)H);
    float *d_out = dfct_alloc(sizeof(float) * (size_t)n), *d_rstd = dfct_alloc(sizeof(float) * (size_t)T);
    DFCT_OK(df_cuda_rmsnorm_fwd(dfct_cu, d_out, d_rstd, d_x, d_w, T, H, eps));
    float *out = dfct_down(d_out, sizeof(float) * (size_t)n);
    float *rstd = dfct_down(d_rstd, sizeof(float) * (size_t)T);
    float *out_c = malloc(sizeof(float) * (size_t)n), *rstd_c = malloc(sizeof(float) * (size_t)T);
    df_rmsnorm_fwd(out_c, rstd_c, x, w, T, H, eps);

    /* rstd: H exact-input squares summed in any order (gamma_H with the squares' rounding),
     * / H, + eps (one rounding each), the sqrt halves that and adds one, 1 / x one more:
     * th_r = gamma_{H+2} / 2 + gamma_2 relative (test_ops' derivation). out = w (x r): two
     * more roundings. Each side within that of the exact value: twice it between them. */
    const double th_r = 0.5 * g32((double)H + 3) + g32(2);
    double *bo = dzeros(n), *br = dzeros(T);
    for (int64_t t = 0; t < T; t++) {
        double ss = 0;
        for (int64_t i = 0; i < H; i++)
            ss += (double)x[t * H + i] * x[t * H + i];
        double r = 1.0 / sqrt(ss / (double)H + eps);
        br[t] = 2 * th_r * r;
        for (int64_t i = 0; i < H; i++)
            bo[t * H + i] = 2 * (th_r + g32(2)) * fabs(w[i] * x[t * H + i] * r);
    }
    snprintf(what, sizeof what, "rmsnorm_fwd out T=%lld H=%lld", (long long)T, (long long)H);
    check_abs(what, out, out_c, bo, n);
    snprintf(what, sizeof what, "rmsnorm_fwd rstd T=%lld H=%lld", (long long)T, (long long)H);
    check_abs(what, rstd, rstd_c, br, T);

    /* backward onto random dx, dw, both sides from the CPU's rstd (exact inputs r). */
    float *dout = frand(n, seed + 2, -1, 1), *dx0 = frand(n, seed + 3, -1, 1);
    float *dw0 = frand(H, seed + 4, -1, 1);
    float *d_dout = dfct_up(dout, sizeof(float) * (size_t)n), *d_dx = dfct_up(dx0, sizeof(float) * (size_t)n);
    float *d_dw = with_dw ? dfct_up(dw0, sizeof(float) * (size_t)H) : NULL;
    float *d_rc = dfct_up(rstd_c, sizeof(float) * (size_t)T);
    DFCT_OK(df_cuda_rmsnorm_bwd(dfct_cu, d_dx, d_dw, d_dout, d_x, d_w, d_rc, T, H));
    float *dx = dfct_down(d_dx, sizeof(float) * (size_t)n);
    float *dx_c = fdup(dx0, n), *dw_c = fdup(dw0, H);
    df_rmsnorm_bwd(dx_c, with_dw ? dw_c : NULL, dout, x, w, rstd_c, T, H);

    /* dx_i = dx0_i + r (d_i w_i - x_i c), c = (sum_j d_j w_j x_j) r^2 / H: the dot is H terms of
     * two products (gamma_{H+1} of S = sum |d w x|), c three more roundings: |dc| <=
     * gamma_{H+4} S r^2 / H; d w - x c and r (..) four roundings of m_i = r (|d w| + |x c|)
     * plus r |x| |dc|; the add onto dx0 one rounding of at most |dx0| + m_i (gamma_5 m_i). */
    double *bx = dzeros(n);
    for (int64_t t = 0; t < T; t++) {
        const double r = rstd_c[t];
        double S = 0, dot = 0;
        for (int64_t j = 0; j < H; j++) {
            double p = (double)dout[t * H + j] * w[j] * x[t * H + j];
            S += fabs(p);
            dot += p;
        }
        const double cm = S * r * r / (double)H, c = dot * r * r / (double)H;
        for (int64_t i = 0; i < H; i++) {
            const double xi = x[t * H + i];
            const double m = r * (fabs((double)dout[t * H + i] * w[i]) + fabs(xi * c));
            bx[t * H + i] = 2 * (g32(5) * m + g32((double)H + 4) * r * fabs(xi) * cm +
                                 DF_U32 * fabs(dx0[t * H + i]));
        }
    }
    snprintf(what, sizeof what, "rmsnorm_bwd dx T=%lld H=%lld", (long long)T, (long long)H);
    check_abs(what, dx, dx_c, bx, n);
    if (with_dw) {
        /* dw_j = dw0_j + sum_t (d x) r: T + 1 terms in any order (atomics), each product two
         * roundings: gamma_{T+2} of the sum of |terms|. */
        float *dw = dfct_down(d_dw, sizeof(float) * (size_t)H);
        double *bw = dzeros(H);
        for (int64_t j = 0; j < H; j++) {
            double m = fabs(dw0[j]);
            for (int64_t t = 0; t < T; t++)
                m += fabs((double)dout[t * H + j] * x[t * H + j]) * rstd_c[t];
            bw[j] = 2 * g32((double)T + 2) * m;
        }
        snprintf(what, sizeof what, "rmsnorm_bwd dw T=%lld H=%lld", (long long)T, (long long)H);
        check_abs(what, dw, dw_c, bw, H);
        free(dw), free(bw);
    }
    free(x), free(w), free(out), free(rstd), free(out_c), free(rstd_c), free(bo), free(br);
    free(dout), free(dx0), free(dw0), free(dx), free(dx_c), free(dw_c), free(bx);
    dfct_free(d_x), dfct_free(d_w), dfct_free(d_out), dfct_free(d_rstd), dfct_free(d_dout);
    dfct_free(d_dx), dfct_free(d_dw), dfct_free(d_rc);
}

static void test_rmsnorm(void **state)
{
    (void)state;
    rmsnorm_case(37, 896, 1e-6f, true, 201);   /* Qwen2-0.5B hidden */
    rmsnorm_case(130, 96, 1e-5f, true, 211);   /* T > 2 dw chunks of 64 rows, with a tail */
    rmsnorm_case(200, 20, 1e-6f, true, 221);   /* H < one warp */
    rmsnorm_case(5, 4099, 1e-6f, false, 231);  /* wide rows, dw = NULL */
    assert_int_equal(df_cuda_rmsnorm_fwd(dfct_cu, NULL, NULL, NULL, NULL, 3, -1, 1e-6f), DF_EINVAL);
    DFCT_OK(df_cuda_rmsnorm_bwd(dfct_cu, NULL, NULL, NULL, NULL, NULL, NULL, 0, 64));
}

/* ---- RoPE ------------------------------------------------------------------------------------- */

/* Pair (a, b) = (x0 c - x1 s', x1 c + x0 s'): two products and an add, gamma_2 of
 * |x0 c| + |x1 s| (resp. |x1 c| + |x0 s|) on each side, with the same table values. */
static double *rope_bound(const float *x, const int32_t *pos, int64_t T, int64_t nh, int64_t hd,
                          int64_t rd, const float *ct, const float *st)
{
    const int64_t half = rd / 2, n = T * nh * hd; /* dims rd .. hd-1 pass exactly: bound 0 */
    double *b = dzeros(n);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = 0; i < half; i++) {
                int64_t a = t * nh * hd + h * hd + i;
                double c = fabs(ct[pos[t] * half + i]), s = fabs(st[pos[t] * half + i]);
                double x0 = fabs(x[a]), x1 = fabs(x[a + half]);
                b[a] = 2 * g32(2) * (x0 * c + x1 * s);
                b[a + half] = 2 * g32(2) * (x1 * c + x0 * s);
            }
    return b;
}

/* rd < hd: the first rd dims of each head rotate (phi3 partial_rotary_factor), the rest pass. */
static void rope_case(int64_t T, int64_t nh, int64_t hd, int64_t rd, int64_t n_pos, double theta,
                      uint64_t seed)
{
    char what[96];
    const int64_t n = T * nh * hd, half = rd / 2;
    float *ct = malloc(sizeof(float) * (size_t)(n_pos * half));
    float *st = malloc(sizeof(float) * (size_t)(n_pos * half));
    df_rope_table(ct, st, n_pos, rd, theta);
    int32_t *pos = irand(T, seed, n_pos);
    pos[0] = 0;
    pos[T - 1] = (int32_t)(n_pos - 1); /* the table's first and last rows */
    float *x = frand(n, seed + 1, -1, 1);
    float *d_ct = dfct_up(ct, sizeof(float) * (size_t)(n_pos * half));
    float *d_st = dfct_up(st, sizeof(float) * (size_t)(n_pos * half));
    int32_t *d_pos = dfct_up(pos, sizeof(int32_t) * (size_t)T);
    float *d_x = dfct_up(x, sizeof(float) * (size_t)n), *d_y = dfct_up(x, sizeof(float) * (size_t)n);
    double *b = rope_bound(x, pos, T, nh, hd, rd, ct, st);

    DFCT_OK(df_cuda_rope_apply(dfct_cu, d_x, d_pos, T, nh, hd, rd, d_ct, d_st, false));
    float *got = dfct_down(d_x, sizeof(float) * (size_t)n), *ref = fdup(x, n);
    df_rope_apply(ref, pos, T, nh, hd, rd, ct, st, false);
    snprintf(what, sizeof what, "rope fwd T=%lld nh=%lld hd=%lld rd=%lld", (long long)T,
             (long long)nh, (long long)hd, (long long)rd);
    check_abs(what, got, ref, b, n);
    free(got), free(ref);

    /* the inverse on the same input (the bound's terms are symmetric in the sign of s) */
    DFCT_OK(df_cuda_rope_apply(dfct_cu, d_y, d_pos, T, nh, hd, rd, d_ct, d_st, true));
    got = dfct_down(d_y, sizeof(float) * (size_t)n), ref = fdup(x, n);
    df_rope_apply(ref, pos, T, nh, hd, rd, ct, st, true);
    snprintf(what, sizeof what, "rope inverse T=%lld nh=%lld hd=%lld", (long long)T,
             (long long)nh, (long long)hd);
    check_abs(what, got, ref, b, n);
    free(got), free(ref);

    /* forward then inverse on the device returns x: R^T R = (c^2 + s^2) I with c, s rounded
     * (|c^2 + s^2 - 1| <= 2 u), and each pass adds gamma_2 of m with ||m|| <= sqrt(2) ||x||
     * (Cauchy-Schwarz per pair): ||x'' - x|| <= (2 u + 2 sqrt(2) gamma_2) ||x|| < (2 u + 3 gamma_2) ||x||. */
    DFCT_OK(df_cuda_rope_apply(dfct_cu, d_x, d_pos, T, nh, hd, rd, d_ct, d_st, true));
    got = dfct_down(d_x, sizeof(float) * (size_t)n);
    snprintf(what, sizeof what, "rope fwd+inverse T=%lld nh=%lld hd=%lld", (long long)T,
             (long long)nh, (long long)hd);
    dfct_check(what, got, x, n, 2 * DF_U32 + 3 * g32(2));
    free(got), free(ct), free(st), free(pos), free(x), free(b);
    dfct_free(d_ct), dfct_free(d_st), dfct_free(d_pos), dfct_free(d_x), dfct_free(d_y);
}

static void test_rope(void **state)
{
    (void)state;
    rope_case(37, 14, 64, 64, 4096, 1e6, 301);   /* Qwen2-0.5B q: 14 heads of 64 */
    rope_case(37, 2, 64, 64, 4096, 1e6, 311);    /* its k: 2 kv heads (GQA) */
    rope_case(53, 7, 128, 128, 32768, 1e6, 321); /* hd = 128, long positions */
    rope_case(3, 1, 2, 2, 5, 1e4, 331);          /* one pair per row */
    rope_case(41, 24, 128, 96, 4096, 1e4, 341);  /* Phi-4-mini: 96 of 128 dims rotated */
    assert_int_equal(df_cuda_rope_apply(dfct_cu, NULL, NULL, 4, 2, 63, 63, NULL, NULL, false), DF_EINVAL);
    assert_int_equal(df_cuda_rope_apply(dfct_cu, NULL, NULL, 4, 2, 64, 66, NULL, NULL, false), DF_EINVAL);
    DFCT_OK(df_cuda_rope_apply(dfct_cu, NULL, NULL, 0, 2, 64, 64, NULL, NULL, false));
}

/* ---- SwiGLU ------------------------------------------------------------------------------------ */

static void test_swiglu(void **state)
{
    (void)state;
    const int64_t n = 37 * 896 + 3;
    float *g = frand(n, 401, -8, 8), *u = frand(n, 402, -1.5f, 1.5f), *R = frand(n, 403, -1, 1);
    g[0] = -100.0f; /* e^100 overflows: s = 0, silu = -0 on both sides */
    g[1] = 100.0f;  /* e^-100 is 0 (CPU) or subnormal (device): 1 + e = 1, s = 1 */
    g[2] = 0.0f;
    float *d_g = dfct_up(g, sizeof(float) * (size_t)n), *d_u = dfct_up(u, sizeof(float) * (size_t)n);
    float *d_R = dfct_up(R, sizeof(float) * (size_t)n), *d_o = dfct_alloc(sizeof(float) * (size_t)n);
    float *d_dg = dfct_alloc(sizeof(float) * (size_t)n), *d_du = dfct_alloc(sizeof(float) * (size_t)n);
    DFCT_OK(df_cuda_swiglu_fwd(dfct_cu, d_o, d_g, d_u, n));
    DFCT_OK(df_cuda_swiglu_bwd(dfct_cu, d_dg, d_du, d_R, d_g, d_u, n));
    float *o = dfct_down(d_o, sizeof(float) * (size_t)n);
    float *dg = dfct_down(d_dg, sizeof(float) * (size_t)n), *du = dfct_down(d_du, sizeof(float) * (size_t)n);
    float *o_c = malloc(sizeof(float) * (size_t)n), *dg_c = malloc(sizeof(float) * (size_t)n);
    float *du_c = malloc(sizeof(float) * (size_t)n);
    df_swiglu_fwd(o_c, g, u, n);
    df_swiglu_bwd(dg_c, du_c, R, g, u, n);
    /*
     * With e = exp(-g) off by de <= DEV_EXPF relative (the larger of the two exps), 1 + e is off
     * by de relative (e / (1 + e) <= 1), so s = 1 / (1 + e) by ds = de + gamma_2 (the add, the
     * division). out = (g / (1 + e)) up: de + gamma_3. dup = (d g) s: ds + gamma_2. dgate =
     * A F, A = (d up) s off by ds + gamma_2 relative, F = 1 + g (1 - s): 1 - s off by
     * s ds + u |1 - s|, then g (..) and 1 + (..) a rounding each (F changes sign, so absolute);
     * the product one more. Where e^-g overflows (g < -88.72) both sides give s = 0 exactly
     * (ds = 1 covers it). Each side within that of the exact value: twice it between them.
     */
    double *bo = dzeros(n), *bg = dzeros(n), *bu = dzeros(n);
    for (int64_t i = 0; i < n; i++) {
        const double gi = g[i], s = 1 / (1 + exp(-gi)), oms = 1 - s, F = 1 + gi * oms;
        const double ds = -gi > 88.72 ? 1.0 : DEV_EXPF + g32(2);
        const double A = fabs((double)R[i] * u[i] * s);
        const double dF = fabs(gi) * (s * ds + DF_U32 * oms) + g32(2) * (fabs(gi * oms) + fabs(F));
        bo[i] = 2 * (ds + g32(1)) * fabs(gi * s * u[i]);
        bu[i] = 2 * (ds + g32(2)) * fabs(R[i] * gi * s);
        bg[i] = 2 * A * (dF + (ds + g32(3)) * fabs(F));
    }
    assert_true(o[0] == 0.0f && !signbit(o[0]) == !signbit(o_c[0])); /* -100 / inf * up */
    check_abs("swiglu_fwd", o, o_c, bo, n);
    check_abs("swiglu_bwd dgate", dg, dg_c, bg, n);
    check_abs("swiglu_bwd dup", du, du_c, bu, n);
    DFCT_OK(df_cuda_swiglu_fwd(dfct_cu, NULL, NULL, NULL, 0));
    free(g), free(u), free(R), free(o), free(dg), free(du), free(o_c), free(dg_c), free(du_c);
    free(bo), free(bg), free(bu);
    dfct_free(d_g), dfct_free(d_u), dfct_free(d_R), dfct_free(d_o), dfct_free(d_dg), dfct_free(d_du);
}

/* GeGLU: the device and the CPU each within tests/geglu_ref.h's bound of the exact value. */
static void test_geglu(void **state)
{
    (void)state;
    const int64_t n = 37 * 896 + 5;
    float *g = frand(n, 404, -12, 12), *u = frand(n, 405, -1.5f, 1.5f), *R = frand(n, 406, -1, 1);
    const float special[] = {-100.0f, 100.0f, 0.0f, -10.2f, -9.7f};
    memcpy(g, special, sizeof special);
    const size_t bytes = sizeof(float) * (size_t)n;
    float *d_g = dfct_up(g, bytes), *d_u = dfct_up(u, bytes), *d_R = dfct_up(R, bytes);
    float *d_o = dfct_alloc(bytes), *d_dg = dfct_alloc(bytes), *d_du = dfct_alloc(bytes);
    DFCT_OK(df_cuda_geglu_fwd(dfct_cu, d_o, d_g, d_u, n));
    DFCT_OK(df_cuda_geglu_bwd(dfct_cu, d_dg, d_du, d_R, d_g, d_u, n));
    float *o = dfct_down(d_o, bytes), *dg = dfct_down(d_dg, bytes), *du = dfct_down(d_du, bytes);
    float *o_c = malloc(bytes), *dg_c = malloc(bytes), *du_c = malloc(bytes);
    df_geglu_fwd(o_c, g, u, n);
    df_geglu_bwd(dg_c, du_c, R, g, u, n);
    double *bo = dzeros(n), *bg = dzeros(n), *bu = dzeros(n);
    for (int64_t i = 0; i < n; i++) {
        const geglu_ref r = geglu_ref_at(g[i], u[i], R[i], DEV_EXPF, DF_U32);
        bo[i] = 2 * r.bout, bg[i] = 2 * r.bdgate, bu[i] = 2 * r.bdup;
    }
    assert_true(o[0] == 0.0f && !signbit(o[0]) == !signbit(o_c[0])); /* -100 / inf * up */
    check_abs("geglu_fwd", o, o_c, bo, n);
    check_abs("geglu_bwd dgate", dg, dg_c, bg, n);
    check_abs("geglu_bwd dup", du, du_c, bu, n);
    DFCT_OK(df_cuda_geglu_fwd(dfct_cu, NULL, NULL, NULL, 0));
    free(g), free(u), free(R), free(o), free(dg), free(du), free(o_c), free(dg_c), free(du_c);
    free(bo), free(bg), free(bu);
    dfct_free(d_g), dfct_free(d_u), dfct_free(d_R), dfct_free(d_o), dfct_free(d_dg), dfct_free(d_du);
}

/* ---- AdamW ------------------------------------------------------------------------------------- */

/*
 * Worst-case error of one implementation after each step against exact arithmetic with the
 * same float32 scalars, per element, carried across steps (first order; gamma counts cover
 * the compounding):
 *   m = m b1 + g (1 - b1): gamma_2 of M = b1 M + |g| (1 - b1), plus b1 times the old error;
 *   v = v b2 + g^2 (1 - b2): gamma_3 of v (all terms >= 0), plus b2 times the old error;
 *   den = sqrt(v) / bc2 + eps: v's relative error rho (the sqrt at most keeps it) and three
 *   roundings; q = m / den: m's error / den, q times den's error, one rounding; step_size q
 *   one more; p = p decay - step_size q: the old error times decay, two roundings of
 *   |p decay| + step_size |q|.
 */
typedef struct {
    double p, m, v, M, Ep, Em, Ev;
} adam_track;

static void adam_track_step(adam_track *a, double g, double decay, double b1, double b2,
                            double omb1, double omb2, double step_size, double bc2, double eps)
{
    const double pd = a->p * decay;
    a->m = a->m * b1 + g * omb1;
    a->M = a->M * b1 + fabs(g) * omb1;
    a->Em = (1 + g32(2)) * b1 * a->Em + g32(2) * a->M;
    a->v = a->v * b2 + g * g * omb2;
    a->Ev = (1 + g32(3)) * b2 * a->Ev + g32(3) * a->v;
    const double den = sqrt(a->v) / bc2 + eps, q = a->m / den;
    const double rho = a->v > 0 ? a->Ev / a->v : 0;
    const double dd = rho * (1 + g32(3)) + g32(3);
    const double Eq = (a->Em / den + fabs(q) * dd) * (1 + g32(2)) + DF_U32 * fabs(q);
    const double Esq = step_size * (Eq + DF_U32 * fabs(q)) * (1 + DF_U32);
    a->Ep = (1 + g32(2)) * (decay * a->Ep + Esq) + g32(2) * (fabs(pd) + step_size * fabs(q));
    a->p = pd - step_size * q;
}

static void test_adamw(void **state)
{
    (void)state;
    const int64_t n = 50001;
    const df_adamw_config cfg = {0.8, 0.95, 1e-6, 0.1};
    const double lrs[3] = {1e-2, 3e-3, 5e-3};
    df_adamw *o = NULL;
    DFCT_OK(df_adamw_create(&cfg, n, &o));
    float *p_c = frand(n, 501, -1, 1), *zero = calloc((size_t)n, sizeof(float));
    adam_track *tr = calloc((size_t)n, sizeof *tr);
    for (int64_t i = 0; i < n; i++)
        tr[i].p = p_c[i];
    float *d_p = dfct_up(p_c, sizeof(float) * (size_t)n), *d_g = dfct_alloc(sizeof(float) * (size_t)n);
    float *d_m = dfct_up(zero, sizeof(float) * (size_t)n), *d_v = dfct_up(zero, sizeof(float) * (size_t)n);
    double *bp = dzeros(n), *bm = dzeros(n), *bv = dzeros(n);
    for (int s = 0; s < 3; s++) {
        const double lr = lrs[s];
        float *g = frand(n, 510 + (uint64_t)s, -1, 1);
        g[s] = 0.0f; /* a zero gradient: m, v only decay */
        DFCT_OK(df_cuda_upload(dfct_cu, d_g, g, sizeof(float) * (size_t)n));
        DFCT_OK(df_adamw_step(o, p_c, g, lr));
        DFCT_OK(df_cuda_adamw_step(dfct_cu, d_p, d_g, d_m, d_v, n, &cfg, o->step, lr));
        /* the scalars exactly as both implementations round them */
        const double t = (double)o->step;
        const float decay = (float)(1.0 - lr * cfg.weight_decay);
        const float b1 = (float)cfg.beta1, b2 = (float)cfg.beta2;
        const float omb1 = (float)(1.0 - cfg.beta1), omb2 = (float)(1.0 - cfg.beta2);
        const float step_size = (float)(lr / (1.0 - pow(cfg.beta1, t)));
        const float bc2 = (float)sqrt(1.0 - pow(cfg.beta2, t)), eps = (float)cfg.eps;
        for (int64_t i = 0; i < n; i++) {
            adam_track_step(&tr[i], g[i], decay, b1, b2, omb1, omb2, step_size, bc2, eps);
            bp[i] = 2 * tr[i].Ep, bm[i] = 2 * tr[i].Em, bv[i] = 2 * tr[i].Ev;
        }
        float *p = dfct_down(d_p, sizeof(float) * (size_t)n), *m = dfct_down(d_m, sizeof(float) * (size_t)n);
        float *v = dfct_down(d_v, sizeof(float) * (size_t)n);
        char what[64];
        snprintf(what, sizeof what, "adamw step %lld p", (long long)o->step);
        check_abs(what, p, p_c, bp, n);
        snprintf(what, sizeof what, "adamw step %lld m", (long long)o->step);
        check_abs(what, m, o->m, bm, n);
        snprintf(what, sizeof what, "adamw step %lld v", (long long)o->step);
        check_abs(what, v, o->v, bv, n);
        free(p), free(m), free(v), free(g);
    }
    assert_int_equal(df_cuda_adamw_step(dfct_cu, d_p, d_g, d_m, d_v, n, &cfg, 0, 1e-3), DF_EINVAL);
    assert_int_equal(df_cuda_adamw_step(dfct_cu, d_p, d_g, d_m, d_v, n, &cfg, 1, -1.0), DF_EINVAL);
    DFCT_OK(df_cuda_adamw_step(dfct_cu, d_p, d_g, d_m, d_v, 0, &cfg, 1, 1e-3));
    df_adamw_free(o);
    free(p_c), free(zero), free(tr), free(bp), free(bm), free(bv);
    dfct_free(d_p), dfct_free(d_g), dfct_free(d_m), dfct_free(d_v);
}

/* ---- sum of squares, scaling ------------------------------------------------------------------- */

static void sumsq_case(int64_t n, uint64_t seed)
{
    float *x = frand(n, seed, -1, 1);
    float *d_x = dfct_up(x, sizeof(float) * (size_t)n);
    double S = 0;
    for (int64_t i = 0; i < n; i++)
        S += (double)x[i] * x[i];
    double s1 = -1, s2 = -1;
    DFCT_OK(df_cuda_sumsq(dfct_cu, d_x, n, &s1));
    DFCT_OK(df_cuda_sumsq(dfct_cu, d_x, n, &s2));
    /* a float's square is exact in double (48 significant bits): only the n - 1 additions
     * round, in any order on either side: 2 gamma_{n-1}(u64) S between them */
    const double bound = 2 * df_tol_gamma((double)(n - 1), DF_U64);
    const double e = fabs(s1 - S) / S;
    char what[64];
    snprintf(what, sizeof what, "sumsq n=%lld", (long long)n);
    printf("  %-40s rel err %.3e (bound %.3e)\n", what, e, bound);
    assert_true(e <= bound);
    assert_memory_equal(&s1, &s2, sizeof s1); /* fixed order: the same bits every call */
    free(x);
    dfct_free(d_x);
}

static void test_sumsq_scale(void **state)
{
    (void)state;
    sumsq_case((1 << 20) + 123, 601); /* > 1024 blocks' worth: grid-stride partials */
    sumsq_case(300, 611);             /* two blocks, the second partial */
    sumsq_case(1, 621);
    double z = -1;
    DFCT_OK(df_cuda_sumsq(dfct_cu, NULL, 0, &z));
    assert_true(z == 0.0);

    /* x *= s is one correctly rounded product per element on both sides: bit for bit */
    const int64_t n = 100003;
    const float s = 0.3713f;
    float *x = frand(n, 631, -3, 3), *ref = fdup(x, n);
    for (int64_t i = 0; i < n; i++)
        ref[i] *= s;
    float *d_x = dfct_up(x, sizeof(float) * (size_t)n);
    DFCT_OK(df_cuda_scale(dfct_cu, d_x, n, s));
    float *got = dfct_down(d_x, sizeof(float) * (size_t)n);
    dfct_check("scale", got, ref, n, 0.0);
    DFCT_OK(df_cuda_scale(dfct_cu, NULL, 0, s));
    free(x), free(ref), free(got);
    dfct_free(d_x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_geglu),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_sumsq_scale),
    };
    return dfct_main("test_cuda_elementwise", tests, sizeof tests / sizeof tests[0]);
}
