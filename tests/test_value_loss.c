/*
 * test_value_loss.c — df_value_loss (verl compute_value_loss): hand-computed
 * cases, the gradient against finite differences, zero-length responses,
 * cliprange_value 0, masks through the weights, micro-batch additivity and
 * malformed input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "tolerance.h"

#include "distflow/algo.h"
#include "distflow/rng.h"

#include <math.h>

/* Three samples of 2, 0 and 1 tokens (the middle one empty). */
static const int64_t k_offs[] = {0, 2, 2, 3};
static const float k_v[] = {1.0f, 2.0f, 2.0f};   /* vpreds */
static const float k_old[] = {0.8f, 0.5f, 0.0f}; /* old values */
static const float k_ret[] = {2.0f, 1.0f, 3.0f}; /* returns */

static df_value_loss_input input(const float *w, double c)
{
    return (df_value_loss_input){.n = 3,
                                 .offsets = k_offs,
                                 .vpreds = k_v,
                                 .values = k_old,
                                 .returns = k_ret,
                                 .weights = w,
                                 .cliprange_value = c};
}

/*
 * token-mean (w = 1/3 each), c = 0.5:
 *   t0: vc = clamp(1.0, 0.3, 1.3) = 1.0;  l1 = (1-2)^2 = 1,  l2 = 1     -> l1, grad 1/3*(1-2) = -1/3
 *   t1: vc = clamp(2.0, 0.0, 1.0) = 1.0;  l1 = (2-1)^2 = 1,  l2 = 0     -> l1, grad 1/3*(2-1) = 1/3
 *   t2: vc = clamp(2.0, -0.5, 0.5) = 0.5; l1 = (2-3)^2 = 1,  l2 = 6.25  -> l2 (clipped), grad 0
 *   loss = 0.5 * (1 + 1 + 6.25) / 3 = 1.375; vf_clipfrac = 1/3; vpred_mean = 5/3
 * The squared errors are exact; the weights are float32 1/3 (cond sum |w l| / 2 = 1.375 for
 * the loss, |w| for a gradient, df_tol_hand); clipfrac and the mean are one double division.
 */
static void test_hand_token_mean(void **state)
{
    (void)state;
    float w[3], g[3];
    assert_int_equal(df_loss_agg_weights("token-mean", 3, k_offs, 3, 3, w), 0);
    df_value_loss_input in = input(w, 0.5);
    df_value_loss_output out = {.grad = g};
    assert_int_equal(df_value_loss(&in, &out), 0);
    assert_near(out.loss, 1.375, df_tol_hand(0, 0, 1.375, 1.375));
    assert_near(out.vf_clipfrac, 1.0 / 3.0, 0);
    assert_near(out.vpred_mean, 5.0 / 3.0, 0);
    assert_near(g[0], -1.0 / 3.0, df_tol_hand(0, 1.0 / 3, 1.0 / 3, 1.0 / 3));
    assert_near(g[1], 1.0 / 3.0, df_tol_hand(0, 1.0 / 3, 1.0 / 3, 1.0 / 3));
    assert_true(g[2] == 0.0f);
}

/*
 * cliprange_value 0: vc = the old value. seq-mean-token-mean over 3 sequences:
 * w = 1/(3*2) = 1/6 for sample 0's tokens, 1/(3*1) = 1/3 for sample 2's.
 *   t0: l1 = (1-2)^2 = 1, l2 = (0.8-2)^2 = 1.44 -> old value wins, grad 0
 *   t1: l1 = 1,           l2 = (0.5-1)^2 = 0.25 -> l1, grad 1/6*(2-1) = 1/6
 *   t2: l1 = 1,           l2 = (0-3)^2 = 9      -> old value wins, grad 0
 *   loss = 0.5 * (1.44/6 + 1/6 + 9/3) = 0.5 * 3.40666.. = 1.70333..; vf_clipfrac = 2/3
 * Bounds (df_tol_hand): the float32 weights 1/6, 1/3 (cond sum |w l| / 2) and old 0.8f
 * (|dl2/dold| |old| w / 2 = 2.4 * 0.8 / 12); the gradient is the float32 weight 1/6.
 */
static void test_hand_clip_zero(void **state)
{
    (void)state;
    float w[3], g[3];
    assert_int_equal(df_loss_agg_weights("seq-mean-token-mean", 3, k_offs, 3, 3, w), 0);
    df_value_loss_input in = input(w, 0.0);
    df_value_loss_output out = {.grad = g};
    assert_int_equal(df_value_loss(&in, &out), 0);
    const double want = 0.5 * (1.44 / 6 + 1.0 / 6 + 9.0 / 3);
    assert_near(out.loss, want, df_tol_hand(0, 0, want + 2.4 * 0.8 / 12, want));
    assert_near(out.vf_clipfrac, 2.0 / 3.0, 0);
    assert_true(g[0] == 0.0f && g[2] == 0.0f);
    assert_near(g[1], 1.0 / 6.0, df_tol_hand(0, 1.0 / 6, 1.0 / 6, 1.0 / 6));
}

/* A huge clip range is the plain squared error: 0.5 * sum_t w_t (v - R)^2. */
static void test_no_clip_is_mse(void **state)
{
    (void)state;
    float w[3];
    assert_int_equal(df_loss_agg_weights("seq-mean-token-sum", 3, k_offs, 3, 3, w), 0);
    df_value_loss_input in = input(w, 1e9);
    df_value_loss_output out = {0};
    assert_int_equal(df_value_loss(&in, &out), 0);
    /* w = 1/3 per token: 0.5 * (1 + 1 + 1) / 3 = 0.5, off by the float32 weights (cond 0.5) */
    assert_near(out.loss, 0.5, df_tol_hand(0, 0, 0.5, 0.5));
    assert_true(out.vf_clipfrac == 0.0);
}

/* A zero weight masks a token out of the loss and the gradient (not of the statistics). */
static void test_mask_by_weight(void **state)
{
    (void)state;
    float w[3] = {0.5f, 0.5f, 0.0f}, g[3];
    df_value_loss_input in = input(w, 0.5);
    df_value_loss_output out = {.grad = g};
    assert_int_equal(df_value_loss(&in, &out), 0);
    assert_near(out.loss, 0.5 * (0.5 * 1 + 0.5 * 1), 0); /* halves and exact squares */
    assert_true(g[2] == 0.0f);
    assert_near(g[0], -0.5, 0);
}

/*
 * A multi-turn mask (t1 a tool token: response_mask 0, weight 0 from df_loss_agg_weights_masked):
 * vf_clipfrac and vpred_mean are verl's masked means over t0 and t2 only, c = 0.5 as in
 * test_hand_token_mean: t0 unclipped, t2 clipped -> clipfrac 1/2 (1/3 over all tokens), vpred
 * mean (1 + 2) / 2 = 1.5 (5/3 over all). The loss: 0.5 * (0.5 * 1 + 0.5 * 6.25) = 1.8125.
 */
static void test_response_mask_stats(void **state)
{
    (void)state;
    const int32_t mask[3] = {1, 0, 1};
    float w[3] = {0.5f, 0.0f, 0.5f}, g[3];
    df_value_loss_input in = input(w, 0.5);
    in.response_mask = mask;
    df_value_loss_output out = {.grad = g};
    assert_int_equal(df_value_loss(&in, &out), 0);
    assert_near(out.vf_clipfrac, 0.5, 0);
    assert_near(out.vpred_mean, 1.5, 0);
    assert_near(out.loss, 1.8125, 0); /* halves and exact squares */
    assert_true(g[1] == 0.0f && g[2] == 0.0f);
}

/* Only empty responses, or no samples: loss 0 and zero statistics. */
static void test_empty(void **state)
{
    (void)state;
    const int64_t offs[] = {0, 0, 0};
    df_value_loss_input in = {.n = 2, .offsets = offs, .cliprange_value = 0.5};
    df_value_loss_output out = {.loss = 7, .vf_clipfrac = 7, .vpred_mean = 7};
    assert_int_equal(df_value_loss(&in, &out), 0);
    assert_true(out.loss == 0 && out.vf_clipfrac == 0 && out.vpred_mean == 0);
    in.n = 0;
    assert_int_equal(df_value_loss(&in, &out), 0);
    assert_true(out.loss == 0);
}

/* Loss of a copy of in with vpreds replaced. */
static double loss_at(const df_value_loss_input *in, const float *v)
{
    df_value_loss_input c = *in;
    c.vpreds = v;
    df_value_loss_output o = {0};
    assert_int_equal(df_value_loss(&c, &o), 0);
    return o.loss;
}

/* Central differences on random data, away from the kinks of max() and clamp(). */
static void test_finite_difference(void **state)
{
    (void)state;
    enum { N = 6, T = 40 };
    const int64_t offs[N + 1] = {0, 5, 5, 17, 18, 30, T};
    float v[T], old[T], ret[T], w[T], g[T];
    df_rng rng;
    df_rng_seed(&rng, 1234);
    for (int t = 0; t < T; t++) {
        old[t] = (float)(2 * df_rng_uniform(&rng) - 1);
        v[t] = old[t] + (float)(1.6 * df_rng_uniform(&rng) - 0.8);
        ret[t] = (float)(3 * df_rng_uniform(&rng) - 1.5);
    }
    assert_int_equal(df_loss_agg_weights("seq-mean-token-mean", N, offs, T, N, w), 0);
    df_value_loss_input in = {.n = N,
                              .offsets = offs,
                              .vpreds = v,
                              .values = old,
                              .returns = ret,
                              .weights = w,
                              .cliprange_value = 0.3};
    df_value_loss_output out = {.grad = g};
    assert_int_equal(df_value_loss(&in, &out), 0);
    assert_true(out.vf_clipfrac > 0.1 && out.vf_clipfrac < 0.9); /* both branches exercised */
    const float eps = 1e-3f;
    /* the loss is 0.5 sum_t w_t (.)^2: in vpred t a quadratic, f''' = 0 and f'' <= w_t; an
       evaluation is a double sum of T terms of a few operations (gamma_{8T}) */
    double abs_loss = 0;
    for (int t = 0; t < T; t++) {
        double e1 = fabs(v[t] - ret[t]), e2 = fabs(old[t] - ret[t]) + 0.3; /* |vc - ret| <= e2 */
        abs_loss += 0.5 * w[t] * fmax(e1 * e1, e2 * e2);
    }
    const double ferr = df_tol_gamma(8 * T, DF_U64) * abs_loss;
    int checked = 0;
    for (int t = 0; t < T; t++) {
        double c = in.cliprange_value, d1 = fabs(v[t] - (old[t] - c)), d2 = fabs(v[t] - (old[t] + c));
        double vc = fmin(fmax(v[t], old[t] - c), old[t] + c);
        double gap = fabs((v[t] - ret[t]) * (v[t] - ret[t]) - (vc - ret[t]) * (vc - ret[t]));
        /* a step of 1e-3 moves l1 - l2 by at most 2 |v - ret| 1e-3 < 1e-2 (|v - ret| < 3) */
        if (d1 < 1e-2 || d2 < 1e-2 || gap < 1e-2)
            continue; /* too close to a kink for a central difference */
        float vp[T], vm[T];
        memcpy(vp, v, sizeof v);
        memcpy(vm, v, sizeof v);
        vp[t] += eps;
        vm[t] -= eps;
        double h = (double)vp[t] - (double)vm[t]; /* the step actually taken in float */
        double fd = (loss_at(&in, vp) - loss_at(&in, vm)) / h;
        double mid = fabs(((double)vp[t] + (double)vm[t]) / 2 - v[t]);
        assert_near(g[t], fd, df_tol_fd(h / 2, 0, mid, w[t], ferr, g[t]));
        checked++;
    }
    assert_true(checked > T / 2);
}

/* Two micro-batches with the whole batch's weights sum to the whole batch's loss. */
static void test_micro_additive(void **state)
{
    (void)state;
    float w[3];
    assert_int_equal(df_loss_agg_weights("token-mean", 3, k_offs, 3, 3, w), 0);
    df_value_loss_input all = input(w, 0.5);
    df_value_loss_output o = {0}, a = {0}, b = {0};
    assert_int_equal(df_value_loss(&all, &o), 0);
    const int64_t o1[] = {0, 2}, o2[] = {0, 0, 1};
    df_value_loss_input p1 = {.n = 1,
                              .offsets = o1,
                              .vpreds = k_v,
                              .values = k_old,
                              .returns = k_ret,
                              .weights = w,
                              .cliprange_value = 0.5};
    df_value_loss_input p2 = {.n = 2,
                              .offsets = o2,
                              .vpreds = k_v + 2,
                              .values = k_old + 2,
                              .returns = k_ret + 2,
                              .weights = w + 2,
                              .cliprange_value = 0.5};
    assert_int_equal(df_value_loss(&p1, &a), 0);
    assert_int_equal(df_value_loss(&p2, &b), 0);
    /* float32 1/3 times the exact squared errors 1, 1, 6.25 needs < 53 bits: every product
       and sum is exact in double, in any grouping */
    assert_near(a.loss + b.loss, o.loss, 0);
}

static void test_malformed(void **state)
{
    (void)state;
    float w[3] = {1, 1, 1};
    df_value_loss_output out = {0};
    assert_error_mentions(df_value_loss(NULL, &out), DF_EINVAL, "NULL");
    df_value_loss_input in = input(w, 0.5);
    assert_error_mentions(df_value_loss(&in, NULL), DF_EINVAL, "NULL");
    in.cliprange_value = -0.1;
    assert_error_mentions(df_value_loss(&in, &out), DF_EINVAL, "cliprange_value");
    in.cliprange_value = NAN;
    assert_error_mentions(df_value_loss(&in, &out), DF_EINVAL, "cliprange_value");
    in.cliprange_value = INFINITY;
    assert_error_mentions(df_value_loss(&in, &out), DF_EINVAL, "cliprange_value");
    in = input(w, 0.5);
    in.returns = NULL;
    assert_error_mentions(df_value_loss(&in, &out), DF_EINVAL, "returns");
    in = input(w, 0.5);
    const int64_t bad[] = {0, 3, 2, 3}; /* decreasing */
    in.offsets = bad;
    assert_int_equal(df_value_loss(&in, &out), DF_EINVAL);
    const int64_t bad0[] = {1, 2, 2, 3}; /* does not start at 0 */
    in.offsets = bad0;
    assert_int_equal(df_value_loss(&in, &out), DF_EINVAL);
    in.offsets = NULL;
    assert_int_equal(df_value_loss(&in, &out), DF_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_token_mean), cmocka_unit_test(test_hand_clip_zero),
        cmocka_unit_test(test_no_clip_is_mse),  cmocka_unit_test(test_mask_by_weight),
        cmocka_unit_test(test_empty),           cmocka_unit_test(test_finite_difference),
        cmocka_unit_test(test_micro_additive),  cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_response_mask_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
