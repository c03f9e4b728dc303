/* df_sample_token / df_sample_probs on fixed logits: greedy, temperature,
 * top-k, top-p, the log-prob it returns, and empirical frequencies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "distflow/rollout.h"
#include "engine/sampling.h"
#include "tolerance.h"

static void *work_for(int64_t V)
{
    void *w = aligned_alloc(64, (size_t)(df_sample_work_bytes(V) + 63) / 64 * 64);
    assert_non_null(w);
    return w;
}

static df_sampling_params params(float temperature, int top_k, float top_p)
{
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.temperature = temperature;
    sp.top_k = top_k;
    sp.top_p = top_p;
    return sp;
}

/* log_softmax(x / T)[i] in double, the reference for returned log-probs. */
static double ref_logp(const float *x, int V, double T, int i)
{
    double mx = -INFINITY, s = 0.0;
    for (int v = 0; v < V; v++)
        mx = fmax(mx, x[v] / T);
    for (int v = 0; v < V; v++)
        s += exp(x[v] / T - mx);
    return x[i] / T - mx - log(s);
}

/*
 * Probabilities and log-probs are double computations from float logits, here and in
 * the sampler (e^(z - max) with z = x / T or x * (1 / T): a few roundings of |z| in the
 * argument, the exp: v8d_exp within 4.04 u (ops_vocab.c's analysis, rounded up to 5 u) or
 * libm's within 1 ulp; a sum of V weights; a division or a log). Two such computations
 * of the same value differ by at most twice that.
 */
#define EXP64 (5 * DF_U64)

/* |a - b| <= tol in double (cmocka's assert_float_equal compares in float). */
#define assert_close(a, b, tol)                                                                  \
    do {                                                                                         \
        double a_ = (a), b_ = (b), t_ = (tol);                                                   \
        if (!(fabs(a_ - b_) <= t_))                                                              \
            fail_msg("%s = %.17g, expected %.17g (tol %.3g)", #a, a_, b_, t_);                   \
    } while (0)

/* |x_v / T| over the logits: the scale of the exp arguments' rounding. */
static double zscale(const float *x, int V, double T)
{
    double m = 0;
    for (int v = 0; v < V; v++)
        m = fmax(m, fabs(x[v] / T));
    return m;
}

/* A probability q of softmax(x / T) restricted to kept tokens, two computations. */
static double p_tol(const float *x, int V, double T, double q)
{
    return 2 * (2 * (5 * DF_U64 * zscale(x, V, T) + EXP64) + df_tol_gamma(V + 2, DF_U64)) * q;
}

/* A log-prob ref = z_t - lse rounded to float by the sampler: u |ref|, plus two double
   computations of z_t - lse. */
static double lp_tol(const float *x, int V, double T, double ref)
{
    return DF_U32 * fabs(ref) +
           2 * (5 * DF_U64 * zscale(x, V, T) + EXP64 + df_tol_gamma(V + 4, DF_U64) * (1 + fabs(ref)));
}

static void test_defaults_and_validation(void **state)
{
    (void)state;
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    assert_true(sp.temperature == 1.0f && sp.top_k == -1 && sp.top_p == 1.0f && !sp.greedy);
    assert_int_equal(sp.max_new_tokens, 512);
    assert_int_equal(df_sampling_params_validate(&sp, 10), 0);
    sp.top_p = 0.0f;
    assert_int_equal(df_sampling_params_validate(&sp, 10), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "top_p"));
    sp.top_p = 1.5f;
    assert_int_equal(df_sampling_params_validate(&sp, 10), DF_EINVAL);
    sp.top_p = 1.0f;
    sp.temperature = -0.5f;
    assert_int_equal(df_sampling_params_validate(&sp, 10), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "temperature"));
    sp.temperature = NAN;
    assert_int_equal(df_sampling_params_validate(&sp, 10), DF_EINVAL);
    sp.temperature = 1.0f;
    sp.max_new_tokens = 0;
    assert_int_equal(df_sampling_params_validate(&sp, 10), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "max_new_tokens"));
    sp.max_new_tokens = 4;
    int32_t stops[] = {3, 10};
    sp.stop_ids = stops;
    sp.n_stop = 2;
    assert_int_equal(df_sampling_params_validate(&sp, 10), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "stop_ids[1] = 10"));
    sp.n_stop = 1;
    assert_int_equal(df_sampling_params_validate(&sp, 10), 0);
    sp.stop_ids = NULL;
    assert_int_equal(df_sampling_params_validate(&sp, 10), DF_EINVAL);
}

static void test_greedy_ties_lowest_id(void **state)
{
    (void)state;
    const float x[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 2.0f};
    void *w = work_for(6);
    df_sampling_params sp = params(0.3f, -1, 1.0f);
    sp.greedy = true;
    df_rng r;
    df_rng_seed(&r, 1);
    df_rng before = r;
    float lp;
    assert_int_equal(df_sample_token(x, 6, &sp, &r, w, &lp), 1);
    /* greedy scores at temperature 1 and draws nothing */
    assert_close(lp, ref_logp(x, 6, 1.0, 1), lp_tol(x, 6, 1.0, ref_logp(x, 6, 1.0, 1)));
    assert_memory_equal(&r, &before, sizeof r);
    /* temperature 0 means greedy too */
    sp.greedy = false;
    sp.temperature = 0.0f;
    assert_int_equal(df_sample_token(x, 6, &sp, &r, w, &lp), 1);
    double p[6];
    df_sample_probs(x, 6, &sp, w, p);
    assert_true(p[1] == 1.0 && p[3] == 0.0 && p[5] == 0.0);
    free(w);
}

static void test_top_k_keeps_exactly_the_k_largest(void **state)
{
    (void)state;
    const float x[8] = {0.1f, 3.0f, -2.0f, 1.5f, 2.5f, 0.0f, 1.0f, -0.5f};
    void *w = work_for(8);
    df_sampling_params sp = params(1.0f, 3, 1.0f);
    double p[8];
    df_sample_probs(x, 8, &sp, w, p);
    double z = exp(3.0) + exp(2.5) + exp(1.5);
    for (int v = 0; v < 8; v++) {
        double want = (v == 1 || v == 4 || v == 3) ? exp(x[v]) / z : 0.0;
        assert_close(p[v], want, p_tol(x, 8, 1.0, want));
    }
    /* ties at the k-th value are all kept (HF TopKLogitsWarper) */
    const float t[5] = {1.0f, 2.0f, 1.0f, 0.0f, 1.0f};
    sp.top_k = 2;
    df_sample_probs(t, 5, &sp, w, p);
    assert_true(p[0] > 0 && p[1] > 0 && p[2] > 0 && p[4] > 0 && p[3] == 0.0);
    const double p0 = exp(1.0) / (exp(2.0) + 3 * exp(1.0));
    assert_close(p[0], p0, p_tol(t, 5, 1.0, p0));
    /* top_k = 1 is greedy; top_k >= V is off */
    sp.top_k = 1;
    df_sample_probs(x, 8, &sp, w, p);
    assert_true(p[1] == 1.0);
    sp.top_k = 8;
    df_sample_probs(x, 8, &sp, w, p);
    for (int v = 0; v < 8; v++)
        assert_true(p[v] > 0.0);
    free(w);
}

static void test_top_p_keeps_the_smallest_nucleus(void **state)
{
    (void)state;
    /* probabilities 0.4, 0.1, 0.3, 0.2 (ids 0..3) */
    const float x[4] = {logf(0.4f), logf(0.1f), logf(0.3f), logf(0.2f)};
    void *w = work_for(4);
    double p[4];
    struct { float top_p; int keep[4]; } cases[] = {
        {0.35f, {1, 0, 0, 0}}, {0.45f, {1, 0, 1, 0}}, {0.65f, {1, 0, 1, 0}},
        {0.75f, {1, 0, 1, 1}}, {0.95f, {1, 1, 1, 1}}, {1e-6f, {1, 0, 0, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        df_sampling_params sp = params(1.0f, -1, cases[c].top_p);
        df_sample_probs(x, 4, &sp, w, p);
        double mass = 0.0;
        for (int v = 0; v < 4; v++)
            mass += cases[c].keep[v] ? exp(x[v]) : 0.0;
        for (int v = 0; v < 4; v++) {
            double want = cases[c].keep[v] ? exp(x[v]) / mass : 0.0;
            assert_close(p[v], want, p_tol(x, 4, 1.0, want));
        }
    }
    /* top-p applies to the distribution renormalised after top-k:
     * top-2 leaves 0.4/0.7 = 0.571 and 0.3/0.7 = 0.429; top_p 0.55 keeps id 0 only */
    df_sampling_params sp = params(1.0f, 2, 0.55f);
    df_sample_probs(x, 4, &sp, w, p);
    assert_true(p[0] == 1.0 && p[1] == 0.0 && p[2] == 0.0 && p[3] == 0.0);
    /* temperature sharpens before top-p: T = 0.5 gives 16:1:9:4 / 30, top_p 0.75 -> {0, 2};
       the logits are float logs of float probabilities (logf within 1 ulp, 0.4f within u of
       0.4: 2 u |x| + u), which e^(x / T) turns into 2 (2 u |x| + u) / T relative, twice
       (the weight and the sum) */
    sp = params(0.5f, -1, 0.75f);
    df_sample_probs(x, 4, &sp, w, p);
    const double dx = 2 * DF_U32 * fabs(log(0.1)) + DF_U32;
    assert_close(p[0], 16.0 / 25.0, 2 * dx / 0.5 * (16.0 / 25.0) + p_tol(x, 4, 0.5, 16.0 / 25.0));
    assert_close(p[2], 9.0 / 25.0, 2 * dx / 0.5 * (9.0 / 25.0) + p_tol(x, 4, 0.5, 9.0 / 25.0));
    assert_true(p[1] == 0.0 && p[3] == 0.0);
    free(w);
}

/* The large-vocabulary path (candidate pre-selection) against a full sort. */
static void test_top_p_large_vocab_matches_full_sort(void **state)
{
    (void)state;
    enum { V = 5000 };
    float *x = malloc(V * sizeof *x);
    double *p = malloc(V * sizeof *p), *q = malloc(V * sizeof *q);
    int *order = malloc(V * sizeof *order);
    df_rng r;
    df_rng_seed(&r, 7);
    for (int v = 0; v < V; v++)
        x[v] = (float)(3.0 * df_rng_normal(&r));
    void *w = work_for(V);
    const float tps[] = {0.5f, 0.9f, 0.999f};
    for (int c = 0; c < 3; c++) {
        df_sampling_params sp = params(1.0f, -1, tps[c]);
        df_sample_probs(x, V, &sp, w, p);
        /* reference: selection sort of ids by logit, accumulate to top_p */
        double zmax = -INFINITY, tot = 0.0;
        for (int v = 0; v < V; v++)
            zmax = fmax(zmax, x[v]);
        for (int v = 0; v < V; v++) {
            tot += exp(x[v] - zmax);
            order[v] = v;
        }
        for (int i = 0; i < V; i++)
            for (int j = i + 1; j < V; j++)
                if (x[order[j]] > x[order[i]]) {
                    int t = order[i];
                    order[i] = order[j];
                    order[j] = t;
                }
        memset(q, 0, V * sizeof *q);
        double cum = 0.0;
        int n = 0;
        while (n < V && cum < tps[c] * tot)
            cum += exp(x[order[n++]] - zmax);
        for (int i = 0; i < n; i++)
            q[order[i]] = exp(x[order[i]] - zmax) / cum;
        for (int v = 0; v < V; v++) {
            assert_true((p[v] == 0.0) == (q[v] == 0.0));
            assert_close(p[v], q[v], p_tol(x, V, 1.0, q[v]));
        }
    }
    free(x);
    free(p);
    free(q);
    free(order);
    free(w);
}

/* Equal weights at the nucleus boundary are taken lowest id first. */
static void test_top_p_ties_take_lower_ids(void **state)
{
    (void)state;
    enum { V = 200 };
    float x[V] = {0};
    x[150] = x[170] = 2.0f;
    void *w = work_for(V);
    double p[V];
    df_sampling_params sp = params(1.0f, -1, 0.5f);
    df_sample_probs(x, V, &sp, w, p);
    /* mass 2 e^2 + 198; half of it needs both peaks and 92 of the unit weights */
    double kept = 2.0 * exp(2.0) + 92.0;
    for (int v = 0; v < V; v++) {
        double want = v == 150 || v == 170 ? exp(2.0) / kept : (v < 92 ? 1.0 / kept : 0.0);
        assert_close(p[v], want, p_tol(x, V, 1.0, want));
    }
    free(w);
}

static void test_logp_is_before_filtering(void **state)
{
    (void)state;
    const float x[5] = {1.0f, 0.2f, -0.7f, 2.2f, 0.9f};
    void *w = work_for(5);
    df_sampling_params sp = params(0.7f, 2, 0.8f);
    df_rng r;
    df_rng_seed(&r, 3);
    for (int it = 0; it < 50; it++) {
        float lp;
        int32_t tok = df_sample_token(x, 5, &sp, &r, w, &lp);
        assert_true(tok == 3 || tok == 0);
        const double ref = ref_logp(x, 5, 0.7, tok);
        assert_close(lp, ref, lp_tol(x, 5, 0.7, ref));
    }
    free(w);
}

/* Draw N tokens and compare counts with N * probs within 5 standard errors of the
   binomial count (normal approximation, N p >= 2000 here): a correct sampler fails one
   such check with probability 6e-7. p itself is exact to ~1e-15, far below a count. */
static void check_frequencies(const float *x, int V, df_sampling_params sp, uint64_t seed)
{
    enum { N = 200000 };
    void *w = work_for(V);
    double p[16];
    int64_t count[16] = {0};
    df_sample_probs(x, V, &sp, w, p);
    df_rng r;
    df_rng_seed(&r, seed);
    for (int i = 0; i < N; i++) {
        df_rng before = r;
        int32_t t = df_sample_token(x, V, &sp, &r, w, NULL);
        assert_true(t >= 0 && t < V);
        count[t]++;
        /* exactly one uniform draw per token */
        df_rng_uniform(&before);
        assert_memory_equal(&before, &r, sizeof r);
    }
    for (int v = 0; v < V; v++) {
        if (p[v] == 0.0) {
            assert_int_equal(count[v], 0);
            continue;
        }
        double se = sqrt(N * p[v] * (1.0 - p[v])) + 1e-9;
        assert_true(fabs((double)count[v] - N * p[v]) < 5.0 * se);
    }
    free(w);
}

static void test_empirical_frequencies(void **state)
{
    (void)state;
    const float x[7] = {0.3f, 1.2f, -0.4f, 0.9f, 2.0f, -1.5f, 1.1f};
    check_frequencies(x, 7, params(1.0f, -1, 1.0f), 11);
    check_frequencies(x, 7, params(0.6f, -1, 1.0f), 12);
    check_frequencies(x, 7, params(1.3f, 4, 1.0f), 13);
    check_frequencies(x, 7, params(1.0f, -1, 0.8f), 14);
    check_frequencies(x, 7, params(0.9f, 5, 0.7f), 15);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_validation),
        cmocka_unit_test(test_greedy_ties_lowest_id),
        cmocka_unit_test(test_top_k_keeps_exactly_the_k_largest),
        cmocka_unit_test(test_top_p_keeps_the_smallest_nucleus),
        cmocka_unit_test(test_top_p_large_vocab_matches_full_sort),
        cmocka_unit_test(test_top_p_ties_take_lower_ids),
        cmocka_unit_test(test_logp_is_before_filtering),
        cmocka_unit_test(test_empirical_frequencies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
