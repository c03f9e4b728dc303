/*
 * The large-vocabulary kernels (src/model/ops_vocab.c, src/engine/sampling.c):
 * 16-lane row helpers against scalar references, per-group softmax statistics
 * and their merge against a double-precision reference (odd sizes, several
 * tiles / groups / row items, ties for the argmax), independence from the
 * thread count, the inverse-CDF draw against a sequential scan, top-k / top-p
 * thresholds on a large vocabulary against a full sort, the fused rollout
 * sampler against the full-logits one, and the optional entropy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "distflow/model.h"
#include "distflow/rng.h"
#include "distflow/rollout.h"
#include "engine/sampling.h"
#include "model/ops.h"
#include "model/ops_math.h"
#include "testbounds.h"
#include "tolerance.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static float *fvec(int64_t n)
{
    float *p = aligned_alloc(64, ((size_t)n * sizeof(float) + 63) / 64 * 64);
    assert_non_null(p);
    return p;
}

static void fill(float *x, int64_t n, uint64_t seed, double scale)
{
    df_rng r;
    df_rng_seed(&r, df_rng_key(seed, 11, 0, 0));
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(df_rng_normal(&r) * scale);
}

static double g32(double n) { return df_tol_gamma(n, DF_U32); }
static double g64(double n) { return df_tol_gamma(n, DF_U64); }

/* glibc's exp in double: within 1 ulp (2 u). v8d_exp (ops_vocab.c, AVX-512): the
 * running error bound of its FMA Horner evaluation (12 steps), float64 coefficients,
 * Taylor truncation and Cody-Waite reduction is 4.04 u over |r| <= ln2 / 2. */
#define EXP64_LIBM (2 * DF_U64)
#define EXP64_KERNEL (5 * DF_U64)

/* z[i][v] = (h_i . W_v) * inv_t in double, and in *zm the magnitude behind each logit,
   sum_e |h_ie W_ve| * inv_t. */
static double *ref_logits(const float *h, const float *W, int64_t n, int64_t V, int64_t H, double inv_t,
                          double **zm)
{
    double *z = malloc((size_t)(n * V) * sizeof(double));
    *zm = malloc((size_t)(n * V) * sizeof(double));
    assert_non_null(z);
    assert_non_null(*zm);
    for (int64_t i = 0; i < n; i++)
        for (int64_t v = 0; v < V; v++) {
            double d = 0, a = 0;
            for (int64_t e = 0; e < H; e++) {
                d += (double)h[i * H + e] * W[v * H + e];
                a += fabs((double)h[i * H + e] * W[v * H + e]);
            }
            z[i * V + v] = d * inv_t;
            (*zm)[i * V + v] = a * inv_t;
        }
    return z;
}

/*
 * Bounds on the row statistics of float logits (tb_row_lse_bound), each within
 * dz_v = k gamma_{H+1} zm_v of the exact z (k = 1: the kernel against exact logits; k = 2:
 * against another float GEMM of the same logits), plus the double reference's gamma_n of
 * double on its sums and logs.
 */
typedef struct {
    double dlse, dent, dmax;
} row_bound;

static row_bound stats_bound(const double *z, const double *zm, int64_t V, int64_t H,
                             int64_t cols, double k)
{
    tb_lse_bound r = tb_row_lse_bound(z, zm, k * g32(H + 1), V, cols);
    double zmx = 0;
    for (int64_t v = 0; v < V; v++)
        zmx = fmax(zmx, fabs(z[v]));
    const double e64 = g64(V + 4) * (1 + fabs(r.lse) + zmx);
    row_bound b = {r.dlse + e64, r.dent + e64, r.dzmax};
    return b;
}

/* |err| <= bound, keeping the worst ratio in *worst. */
static void within(double err, double bound, double *worst, const char *what)
{
    if (!(fabs(err) <= bound))
        fail_msg("%s: error %.3g above its bound %.3g", what, fabs(err), bound);
    *worst = fmax(*worst, fabs(err) / bound);
}

/* ---- row helpers ------------------------------------------------------------------ */

static void test_row_helpers(void **state)
{
    (void)state;
    const int64_t sizes[] = {1, 5, 15, 16, 17, 33, 100, 1000};
    float *x = fvec(1000), *w = fvec(1000);
    double *wd = malloc(1000 * sizeof(double));
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        int64_t n = sizes[c];
        fill(x, n, 10 + c, 3.0);
        float m = -INFINITY;
        for (int64_t j = 0; j < n; j++)
            m = x[j] > m ? x[j] : m;
        assert_true(df_row_max(x, n) == m);
        x[n / 2] = m; /* a tie: the lowest index wins */
        int64_t first = 0;
        while (x[first] != m)
            first++;
        assert_int_equal(df_row_find(x, n, m), first);
        assert_int_equal(df_row_find(x, n, m + 1.0f), n);
        double s = df_row_exp(w, x, n, m), sd = df_row_exp_f64(wd, x, n, 0.5, 0.5 * m), ref = 0;
        for (int64_t j = 0; j < n; j++) {
            /* the float difference is the kernel's input (rounded like the old code's), so
             * only the exps differ: the kernel's and the double reference's */
            double e = exp((double)(x[j] - m)), ed = exp(0.5 * x[j] - 0.5 * m);
            assert_true(fabs(w[j] - e) <= (DF_TOL_EXPF + EXP64_LIBM) * e);
            /* the same double argument (0.5 x - 0.5 m) in the kernel and here */
            assert_true(fabs(wd[j] - ed) <= (EXP64_KERNEL + EXP64_LIBM) * ed);
            ref += e;
        }
        /* the sum: each exp's error, float sums of 16-lane blocks (15 adds each, any
         * order), double across blocks (ops_vocab.c) and in the reference */
        assert_true(fabs(s - ref) <= (DF_TOL_EXPF + EXP64_LIBM + g32(15) + 2 * g64(n)) * ref);
        assert_true(df_row_exp(NULL, x, n, m) == s); /* the same computation */
        (void)sd;
        /* inverse CDF at the middle of each interval, and past the end */
        double cum = 0;
        for (int64_t j = 0; j < n; j++) {
            assert_int_equal(df_row_cdf_find(w, n, cum + 0.5 * w[j]), j);
            cum += w[j];
        }
        assert_int_equal(df_row_cdf_find(w, n, cum * 2), n - 1);
    }
    /* the last positive weight when the sum stays short */
    float z3[3] = {0.5f, 0.25f, 0.0f};
    assert_int_equal(df_row_cdf_find(z3, 3, 1.0), 1);
    free(x), free(w), free(wd);
}

static void test_exp_softmax_accuracy(void **state)
{
    (void)state;
    double worst = 0;
    for (int i = 0; i < 16 * 4000; i += 16) {
        float xs[16];
        for (int l = 0; l < 16; l++)
            xs[l] = -110.0f * (float)(i + l) / (16.0f * 4000.0f) + 1.0f; /* 1 .. -109 */
        df_v16 e = df_v16_exp_softmax(df_v16_load(xs));
        for (int l = 0; l < 16; l++) {
            double want = exp((double)xs[l]);
            if (xs[l] > -87.0f)
                worst = fmax(worst, fabs(e[l] - want) / want);
            else /* 0 or the (denormal) e^x <= e^-87, rounded to the 2^-149 grid */
                assert_true(e[l] >= 0.0f && e[l] <= exp(-87.0) * (1 + DF_TOL_EXPF) + 0x1p-149);
        }
    }
    print_message("df_v16_exp_softmax: worst relative error %.3g u\n", worst / DF_U32);
    assert_true(worst <= DF_TOL_EXPF + EXP64_LIBM); /* the kernel's analysis, and the reference's */
}

/* NaN in, NaN out, and no undefined behaviour on the way (converting NaN to an int, shifting a
   negative exponent; UBSan builds report those); the ends of the range as documented. */
static void test_exp_special_values(void **state)
{
    (void)state;
    assert_true(isnan(df_expf(NAN)));
    assert_true(df_expf(-INFINITY) == 0.0f && df_expf(-100.0f) == 0.0f);
    assert_true(isinf(df_expf(INFINITY)) && isinf(df_expf(89.0f)));
    assert_true(df_expf(0.0f) == 1.0f);
    float xs[16] = {NAN, -INFINITY, INFINITY, 0.0f, -100.0f, 89.0f, 1.0f, -NAN};
    df_v16 e = df_v16_exp(df_v16_load(xs));
    for (int l = 0; l < 16; l++) { /* the vector exp is the scalar one, lane by lane */
        float want = df_expf(xs[l]);
        assert_true(isnan(want) ? isnan(e[l]) : e[l] == want);
    }
}

/* ---- statistics ------------------------------------------------------------------ */

typedef struct {
    int64_t n, V, H;
    float *h, *W;
    int32_t *tgt;
} problem;

/* Rows of h positive, W rows negative-ish with zero rows at `zeros`: the max
 * logit 0 is tied across those columns (tiles and groups apart). */
static problem make_problem(int64_t n, int64_t V, int64_t H, const int64_t *zeros, int nz,
                            uint64_t seed)
{
    problem p = {n, V, H, fvec(n * H), fvec(V * H), malloc((size_t)n * sizeof(int32_t))};
    fill(p.h, n * H, seed, 1.0);
    fill(p.W, V * H, seed + 1, 0.7);
    for (int64_t i = 0; nz && i < n * H; i++)
        p.h[i] = fabsf(p.h[i]) + 0.1f;
    for (int64_t i = 0; nz && i < V * H; i++)
        p.W[i] = -fabsf(p.W[i]);
    for (int k = 0; k < nz; k++)
        memset(p.W + zeros[k] * H, 0, (size_t)H * sizeof(float));
    df_rng r;
    df_rng_seed(&r, seed + 2);
    for (int64_t i = 0; i < n; i++)
        p.tgt[i] = (int32_t)df_rng_below(&r, (uint64_t)V);
    p.tgt[0] = (int32_t)(V - 1);
    return p;
}

static void free_problem(problem *p) { free(p->h), free(p->W), free(p->tgt); }

static void check_stats(const problem *p, float inv_t, const df_vocab_tiling *t, int64_t want_arg)
{
    const int64_t n = p->n, V = p->V, H = p->H, G = df_vocab_groups(V, t);
    const int64_t gc = df_vocab_tiling_clamp(t).group, cols = df_vocab_tiling_clamp(t).cols;
    const double u = DF_U32;
    df_vstat *st = malloc((size_t)(n * G) * sizeof *st);
    float *zt = fvec(n);
    df_vocab_stats(st, zt, p->tgt, p->h, p->W, n, V, H, inv_t, 0.0f,
                   DF_VSTAT_ENTROPY | DF_VSTAT_ARGMAX, t);
    double *zm, *z = ref_logits(p->h, p->W, n, V, H, inv_t, &zm), w[6] = {0};
    for (int64_t i = 0; i < n; i++) {
        const double *zi = z + i * V, *zmi = zm + i * V;
        /* the target's logit: H products and sums and the inv_t product */
        within(zt[i] - zi[p->tgt[i]], (g32(H + 1) + g64(H + 1)) * zmi[p->tgt[i]], &w[0], "zt");
        for (int64_t g = 0; g < G; g++) { /* each group against the reference */
            int64_t c0 = g * gc, c1 = c0 + gc < V ? c0 + gc : V, arg = c0;
            double m = -INFINITY, m2 = -INFINITY, s0 = 0, s1 = 0, dzm = 0;
            for (int64_t v = c0; v < c1; v++) {
                if (zi[v] > m)
                    m2 = m, m = zi[v], arg = v;
                else
                    m2 = fmax(m2, zi[v]);
                dzm = fmax(dzm, g32(H + 1) * zmi[v]);
            }
            /* Each float logit is within dz of the reference; the group max within the
             * largest dz. A weight e^(z - m) is then off by dz_v + dzm (the shift), the float
             * difference and the exp; s0 sums them (float tiles, tb_tiled_exp_sum_err; double
             * rescales). s1 = sum w (z - m), all terms <= 0: w's error times |d|, d's own
             * (dz_v + dzm and its rounding), the product, the float sums. */
            double ds0 = 0, ds1 = 0, aw = 0;
            for (int64_t v = c0; v < c1; v++) {
                double e = exp(zi[v] - m), d = zi[v] - m, dz = g32(H + 1) * zmi[v];
                double th = dz + dzm + u * fabs(d) + DF_TOL_EXPF;
                s0 += e, s1 += e * d;
                ds0 += e * th;
                ds1 += e * (fabs(d) * (th + 2 * u) + dz + dzm);
                aw += e * fabs(d);
            }
            ds0 += tb_tiled_exp_sum_err(zi, m, c0, c1, cols) + g64(c1 - c0 + 8) * s0;
            ds1 += (g32(cols) + g64(c1 - c0 + 8)) * aw;
            const df_vstat *s = &st[i * G + g];
            within(s->m - m, dzm, &w[1], "group max");
            within(s->s0 - s0, ds0, &w[2], "group s0");
            within(s->s1 - s1, ds1, &w[3], "group s1");
            if (want_arg < 0) {
                /* the same argmax unless another logit is within the float errors */
                assert_true(zi[s->arg] >= m - 2 * dzm);
                if (m - m2 > 2 * dzm)
                    assert_int_equal(s->arg, arg);
            }
        }
        df_vrow r;
        df_vstat_merge(st + i * G, G, &r);
        double m = -INFINITY, s = 0, pz = 0;
        for (int64_t v = 0; v < V; v++)
            m = fmax(m, zi[v]);
        for (int64_t v = 0; v < V; v++)
            s += exp(zi[v] - m);
        double lse = m + log(s);
        for (int64_t v = 0; v < V; v++)
            pz += exp(zi[v] - lse) * zi[v];
        row_bound rb = stats_bound(zi, zmi, V, H, cols, 1);
        within(r.m + log(r.s0) - lse, rb.dlse, &w[4], "lse");
        within(log(r.s0) - r.s1 / r.s0 - (lse - pz), rb.dent, &w[5], "entropy");
        if (want_arg >= 0)
            assert_int_equal(r.arg, want_arg); /* exact ties: zero rows give z = 0 exactly */
    }
    print_message("worst error / bound: zt %.3f, group max %.3f, s0 %.3f, s1 %.3f, lse %.3f, "
                  "entropy %.3f\n", w[0], w[1], w[2], w[3], w[4], w[5]);
    free(st), free(zt), free(z), free(zm);
}

static void test_stats_against_reference(void **state)
{
    (void)state;
    /* 13 rows in blocks of 4 and items of 8; 1037 columns in tiles of 48 and
     * groups of 144 (8 groups, the last partial). */
    df_vocab_tiling t = {4, 48, 144, 8};
    problem p = make_problem(13, 1037, 5, NULL, 0, 40);
    check_stats(&p, 1.0f / 0.7f, &t, -1);
    free_problem(&p);
    /* Ties at the max: zero rows in group 3 (second tile) and group 5; the
     * lowest id wins within a group and across groups. */
    const int64_t zeros[] = {500, 3 * 144 + 60, 3 * 144 + 50, 760};
    p = make_problem(7, 1037, 4, zeros, 4, 50);
    check_stats(&p, 1.0f, &t, 3 * 144 + 50);
    free_problem(&p);
    /* One tile for everything, and the library's tiling. */
    df_vocab_tiling big = df_vocab_tiling_for(300, 3);
    p = make_problem(3, 300, 3, NULL, 0, 60);
    check_stats(&p, 1.3f, &big, -1);
    free_problem(&p);
}

static void test_stats_do_not_depend_on_threads(void **state)
{
    (void)state;
    const int64_t n = 70, V = 20003, H = 8;
    problem p = make_problem(n, V, H, NULL, 0, 70);
    df_vocab_tiling t = df_vocab_tiling_for(V, H);
    t.item_rows = 16; /* several row items as well as groups */
    const int64_t G = df_vocab_groups(V, &t);
    assert_true(G > 2);
    df_vstat *st[3];
    float *zt[3];
    int saved = omp_get_max_threads();
    for (int k = 0; k < 3; k++) {
        st[k] = malloc((size_t)(n * G) * sizeof(df_vstat));
        zt[k] = fvec(n);
        memset(st[k], 0, (size_t)(n * G) * sizeof(df_vstat)); /* padding bytes too */
        omp_set_num_threads(k + 1);
        df_vocab_stats(st[k], zt[k], p.tgt, p.h, p.W, n, V, H, 0.9f, 0.0f, DF_VSTAT_ENTROPY, &t);
    }
    omp_set_num_threads(saved);
    for (int k = 1; k < 3; k++) {
        assert_memory_equal(st[0], st[k], (size_t)(n * G) * sizeof(df_vstat));
        assert_memory_equal(zt[0], zt[k], (size_t)n * sizeof(float));
    }
    for (int k = 0; k < 3; k++)
        free(st[k]), free(zt[k]);
    free_problem(&p);
}

/* ---- draws ---------------------------------------------------------------------- */

static void test_draw_is_the_sequential_inverse_cdf(void **state)
{
    (void)state;
    const int64_t n = 3, V = 5003, H = 6;
    const float inv_t = 1.0f / 0.8f;
    problem p = make_problem(n, V, H, NULL, 0, 80);
    df_vocab_tiling t = {4, 64, 64, 4}; /* groups of one tile, as the rollout uses */
    const int64_t G = df_vocab_groups(V, &t);
    df_vstat *st = malloc((size_t)(n * G) * sizeof *st);
    float *buf = fvec(2 * 64), *z = fvec(V);
    double *cum = malloc((size_t)(V + 1) * sizeof(double));
    df_vocab_stats(st, NULL, NULL, p.h, p.W, n, V, H, inv_t, 0.0f, 0u, &t);
    double *zm, *zx = ref_logits(p.h, p.W, n, V, H, inv_t, &zm);
    const int64_t cols = df_vocab_tiling_clamp(&t).cols;
    for (int64_t i = 0; i < n; i++) {
        /* Three float computations of the logits: the statistics', the draw's recomputed
         * group and this test's row (different GEMM shapes), each within dz of the exact
         * ones. lse: the statistics' and this row's; a CDF boundary (a partial mass over the
         * total) moves by at most twice the lse bound in each. */
        row_bound b2 = stats_bound(zx + i * V, zm + i * V, V, H, cols, 2);
        row_bound b3 = stats_bound(zx + i * V, zm + i * V, V, H, cols, 3);
        const double eC = 2 * b3.dlse;
        df_gemm_nt(1, V, H, inv_t, p.h + i * H, p.W, 0.0f, z);
        double m = -INFINITY;
        for (int64_t v = 0; v < V; v++)
            m = fmax(m, z[v]);
        cum[0] = 0;
        for (int64_t v = 0; v < V; v++)
            cum[v + 1] = cum[v] + exp(z[v] - m);
        const double total = cum[V], lse = m + log(total);
        df_vrow r;
        df_vstat_merge(st + i * G, G, &r);
        assert_true(fabs(r.m + log(r.s0) - lse) <= b2.dlse);
        /* u in the middle of token v's interval must give v (for intervals wide
         * enough that float weights cannot move the boundary past it) */
        int64_t checked = 0;
        for (int64_t v = 0; v < V; v += 7) {
            if (cum[v + 1] - cum[v] <= 2 * eC * total)
                continue;
            checked++;
            double u = (cum[v] + 0.5 * (cum[v + 1] - cum[v])) / total;
            float zt;
            int32_t tok = df_vocab_draw(st + i * G, G, &r, u, p.h + i * H, p.W, V, H, inv_t, 0.0f, &t,
                                        buf, &zt);
            assert_int_equal(tok, v);
            /* two float GEMMs of the same logit */
            assert_true(fabs(zt - z[v]) <= 2 * g32(H + 1) * zm[i * V + v]);
        }
        assert_true(checked > 100);
        /* u = 1 - 1e-12 lands in the last group (its prefix sums are the merged s0's, the
         * same double adds) and, in it, past the other tokens: the last weight exceeds
         * 1e-12 of the total plus twice the error of the group's recomputed float weights
         * (three float logits, the differences, the exps, a float sum of <= cols terms). */
        const int64_t gsz = df_vocab_tiling_clamp(&t).group, c0 = (V - 1) / gsz * gsz;
        double zmx = -INFINITY, zmn = INFINITY, dzm = 0;
        for (int64_t v = c0; v < V; v++) {
            zmx = fmax(zmx, zx[i * V + v]), zmn = fmin(zmn, zx[i * V + v]);
            dzm = fmax(dzm, g32(H + 1) * zm[i * V + v]);
        }
        const double eg = (6 * dzm + DF_U32 * (zmx - zmn) + DF_TOL_EXPF + g32(cols)) *
                          (cum[V] - cum[c0]);
        assert_true(cum[V] - cum[V - 1] > 2 * eg + 1e-12 * total);
        float zt;
        assert_int_equal(df_vocab_draw(st + i * G, G, &r, 0.0, p.h + i * H, p.W, V, H, inv_t, 0.0f,
                                       &t, buf, &zt),
                         0);
        assert_int_equal(df_vocab_draw(st + i * G, G, &r, 1.0 - 1e-12, p.h + i * H, p.W, V, H,
                                       inv_t, 0.0f, &t, buf, &zt),
                         V - 1);
    }
    free(st), free(buf), free(z), free(cum), free(zx), free(zm);
    free_problem(&p);
}

/* ---- top-k / top-p on a large vocabulary ------------------------------------------- */

static const float *g_sort_x;

static int by_logit_desc(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (g_sort_x[i] != g_sort_x[j])
        return g_sort_x[i] > g_sort_x[j] ? -1 : 1;
    return (i > j) - (i < j);
}

/* HF's warpers by a full sort: top-k keeps x >= the k-th largest (ties kept),
 * top-p the most probable (ties -> lower id) until their mass reaches top_p. */
static void ref_probs(const float *x, int64_t V, double T, int k, double top_p, double *p)
{
    int32_t *order = malloc((size_t)V * sizeof(int32_t));
    double m = -INFINITY, mass = 0, cum = 0;
    for (int64_t v = 0; v < V; v++) {
        order[v] = (int32_t)v;
        m = fmax(m, x[v] / T);
    }
    g_sort_x = x;
    qsort(order, (size_t)V, sizeof *order, by_logit_desc);
    int64_t nk = V;
    if (k > 0 && k < V) {
        nk = k;
        while (nk < V && x[order[nk]] == x[order[k - 1]])
            nk++;
    }
    for (int64_t i = 0; i < nk; i++)
        mass += exp(x[order[i]] / T - m);
    int64_t n = 0;
    while (n < nk && (n == 0 || cum < top_p * mass))
        cum += exp(x[order[n++]] / T - m);
    if (top_p >= 1.0)
        n = nk, cum = mass;
    memset(p, 0, (size_t)V * sizeof *p);
    for (int64_t i = 0; i < n; i++)
        p[order[i]] = exp(x[order[i]] / T - m) / cum;
    free(order);
}

static void test_top_k_top_p_large_vocab(void **state)
{
    (void)state;
    const int64_t V = 30011;
    float *x = fvec(V);
    fill(x, V, 90, 2.0);
    for (int64_t v = 100; v < 30000; v += 7) /* many exact ties */
        x[v] = 1.5f;
    double *p = malloc((size_t)V * sizeof(double)), *q = malloc((size_t)V * sizeof(double));
    void *work = aligned_alloc(64, (size_t)(df_sample_work_bytes(V) + 63) / 64 * 64);
    const struct {
        float T;
        int k;
        float top_p;
    } cases[] = {{1.0f, 50, 1.0f},   {0.7f, 5000, 1.0f}, {1.0f, -1, 0.9f}, {1.3f, -1, 0.5f},
                 {0.8f, 3000, 0.8f}, {1.0f, 1, 0.3f},    {1.0f, -1, 0.2f}, {2.0f, 20000, 0.99f}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        df_sampling_params sp;
        df_sampling_params_defaults(&sp);
        sp.temperature = cases[c].T;
        sp.top_k = cases[c].k;
        sp.top_p = cases[c].top_p;
        df_sample_probs(x, V, &sp, work, p);
        ref_probs(x, V, cases[c].T, cases[c].k, cases[c].top_p, q);
        /* Both are double: weights e^(z - max) with z = x / T (the kernel multiplies by a
         * rounded 1 / T: 2 u |z|; here one division: u |z|), the rounded difference
         * (u |z - max|) and the exp (the kernel's v8d_exp or libm), over their sums
         * (n terms each, in any order, carrying the largest weight error) and a division. */
        double zmax = -INFINITY, emax = 0;
        int64_t n_kept = 0;
        for (int64_t v = 0; v < V; v++)
            zmax = fmax(zmax, x[v] / (double)cases[c].T);
        for (int64_t v = 0; v < V; v++) {
            double z = x[v] / (double)cases[c].T;
            emax = fmax(emax, DF_U64 * (3 * fabs(z) + 2 * fabs(z - zmax)));
            n_kept += q[v] != 0.0;
        }
        const double e_mass = emax + EXP64_KERNEL + EXP64_LIBM + 2 * g64(n_kept) + 2 * DF_U64;
        int64_t kept = 0;
        double worst = 0;
        for (int64_t v = 0; v < V; v++) {
            assert_true((p[v] == 0.0) == (q[v] == 0.0));
            double z = x[v] / (double)cases[c].T;
            double e = DF_U64 * (3 * fabs(z) + 2 * fabs(z - zmax)) + EXP64_KERNEL + EXP64_LIBM;
            within(p[v] - q[v], (e + e_mass) * q[v], &worst, "top-k / top-p probability");
            kept += p[v] > 0;
        }
        print_message("top-k %d top-p %.2f: worst error / bound %.3f\n", cases[c].k,
                      (double)cases[c].top_p, worst);
        assert_true(kept > 0);
        /* a draw is the id-order inverse CDF of these probabilities */
        df_rng r, u;
        df_rng_seed(&r, 100 + c);
        u = r;
        double target = df_rng_uniform(&u), cum = 0;
        int64_t want = -1;
        for (int64_t v = 0; v < V && want < 0; v++)
            if ((cum += p[v]) > target)
                want = v;
        float lp;
        assert_int_equal(df_sample_token(x, V, &sp, &r, work, &lp), want);
    }
    free(x), free(p), free(q), free(work);
}

/* ---- rollout: fused sampler against the full-logits sampler ------------------------- */

static void test_fused_rollout_matches_full_logits(void **state)
{
    (void)state;
    df_model_config c;
    df_model_config_defaults(&c);
    c.vocab_size = 1500; /* three groups of 512 columns */
    c.hidden_size = 16;
    c.intermediate_size = 32;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 8;
    c.max_position_embeddings = 64;
    c.initializer_range = 0.3;
    c.n_eos = 0;
    df_model *m = NULL;
    assert_int_equal(df_model_create(&c, &m), DF_OK);
    assert_int_equal(df_model_init_random(m, 5), DF_OK);
    int64_t off[4] = {0, 3, 8, 10};
    int32_t tok[10] = {1, 2, 3, 40, 50, 60, 70, 80, 900, 1400};
    df_rollout_request q = {3, off, tok, 3, 77, NULL, NULL};
    df_sampling_params a, b;
    df_sampling_params_defaults(&a);
    a.temperature = 0.9f;
    a.max_new_tokens = 12;
    b = a;
    b.top_p = 1.0f - 0x1p-24f; /* keeps every token here, through the full-logits path */
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create(&c, 9, 32, &e), DF_OK);
    df_rollout_result ra, rb;
    assert_int_equal(df_rollout_generate(e, m, &q, &a, &ra, NULL, NULL), DF_OK);
    assert_int_equal(df_rollout_generate(e, m, &q, &b, &rb, NULL, NULL), DF_OK);
    assert_int_equal(ra.offsets[ra.n_seqs], rb.offsets[rb.n_seqs]);
    assert_memory_equal(ra.tokens, rb.tokens, (size_t)ra.offsets[ra.n_seqs] * sizeof(int32_t));
    /*
     * The same hidden states h (the same forward), two LM heads: the fused statistics
     * (float logits times a float 1 / T, lse from float tile sums) and the full float
     * logits row with a double log-softmax. Every |z_v| <= Z (tb_head_bound) and every
     * logit's float error is at most dz = gamma_{H+1} Z (+ u Z for the float 1 / T).
     * Each log-prob z_t - lse is then off by dz in z_t and dz + u 2Z + the exp + gamma_V
     * in lse (lse_bound of the weights e^(z - m)), plus its rounding to float.
     */
    const int64_t H = c.hidden_size, V = c.vocab_size;
    const double Z = tb_head_bound(m, a.temperature);
    const double dz = (g32(H + 1) + DF_U32) * Z;
    const double dlp = 2 * (2 * dz + DF_U32 * 2 * Z + DF_TOL_EXPF + g32(V) + g64(V + 4) * (1 + Z)) +
                       2 * DF_U32 * (2 * Z + log((double)V));
    double worst = 0;
    for (int64_t i = 0; i < ra.offsets[ra.n_seqs]; i++)
        within(ra.log_probs[i] - rb.log_probs[i], dlp, &worst, "fused against full log-prob");
    print_message("fused sampler log-probs: worst error / bound %.3f (bound %.3g)\n", worst, dlp);
    df_rollout_result_free(&ra);
    df_rollout_result_free(&rb);
    df_rollout_engine_free(e);
    df_model_free(m);
}

/* ---- entropy only when asked ----------------------------------------------------- */

static void test_entropy_is_optional(void **state)
{
    (void)state;
    const int64_t n = 9, V = 3000, H = 5;
    problem p = make_problem(n, V, H, NULL, 0, 110);
    float *lp1 = fvec(n), *lp2 = fvec(n), *ls1 = fvec(n), *ls2 = fvec(n), *ent = fvec(n);
    float *scratch = fvec(df_lmhead_scratch_floats(n, V, H));
    df_lmhead_fwd(lp1, ent, NULL, ls1, p.h, p.W, p.tgt, n, V, H, 0.8f, 0.0f, scratch);
    df_lmhead_fwd(lp2, NULL, NULL, ls2, p.h, p.W, p.tgt, n, V, H, 0.8f, 0.0f, scratch);
    assert_memory_equal(lp1, lp2, (size_t)n * sizeof(float));
    assert_memory_equal(ls1, ls2, (size_t)n * sizeof(float));
    free(lp1), free(lp2), free(ls1), free(ls2), free(ent), free(scratch);
    free_problem(&p);

    /* The model refuses dentropy after a forward without entropy. */
    df_model_config c;
    df_model_config_defaults(&c);
    c.vocab_size = 40;
    c.hidden_size = 8;
    c.intermediate_size = 16;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 4;
    c.max_position_embeddings = 16;
    df_model *m = NULL;
    df_acts *a = NULL;
    assert_int_equal(df_model_create(&c, &m), DF_OK);
    assert_int_equal(df_model_init_random(m, 3), DF_OK);
    assert_int_equal(df_acts_create(&c, 4, 3, &a), DF_OK);
    int32_t toks[4] = {1, 2, 3, 4}, tg[3] = {2, 3, 4};
    int64_t so[2] = {0, 4}, rows[3] = {0, 1, 2};
    df_seq_batch sb = {4, toks, 1, so, 3, rows, tg, NULL, NULL};
    float lp[3], en[3], d[3] = {1, 1, 1};
    float *grads = calloc((size_t)m->n_params, sizeof(float));
    assert_int_equal(df_model_forward(m, a, &sb, 1.0f, lp, NULL), DF_OK);
    assert_int_equal(df_model_backward(m, a, &sb, 1.0f, d, d, grads), DF_EINVAL);
    assert_int_equal(df_model_backward(m, a, &sb, 1.0f, d, NULL, grads), DF_OK);
    assert_int_equal(df_model_forward(m, a, &sb, 1.0f, lp, en), DF_OK);
    assert_int_equal(df_model_backward(m, a, &sb, 1.0f, d, d, grads), DF_OK);
    free(grads);
    df_acts_free(a);
    df_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_helpers),
        cmocka_unit_test(test_exp_softmax_accuracy),
        cmocka_unit_test(test_exp_special_values),
        cmocka_unit_test(test_stats_against_reference),
        cmocka_unit_test(test_stats_do_not_depend_on_threads),
        cmocka_unit_test(test_draw_is_the_sequential_inverse_cdf),
        cmocka_unit_test(test_top_k_top_p_large_vocab),
        cmocka_unit_test(test_fused_rollout_matches_full_logits),
        cmocka_unit_test(test_entropy_is_optional),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
