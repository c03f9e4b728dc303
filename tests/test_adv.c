/* Unit tests for the advantage estimators of include/distflow/algo.h (advest
 * block): hand-computed cases with the arithmetic in comments, edge cases,
 * invariance to the order of samples, and malformed input. grpo's own cases
 * live in test_algo.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "tolerance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distflow/algo.h"

static void assert_all_near(const float *got, const double *want, int n, double tol)
{
    for (int t = 0; t < n; t++)
        if (!(fabs((double)got[t] - want[t]) <= tol))
            fail_msg("token %d: %.9g, expected %.9g (tol %g)", t, (double)got[t], want[t], tol);
}

/*
 * The bound for a whitened value o worked out by hand (df_tol_hand): its printed digits
 * lit, plus the 1e-8 the whitening adds to the variance var (|o| 1e-8 / (2 var), whether
 * or not the hand value includes it); one float32 rounding; and the float32 errors of
 * the n inputs, err = sum_j |x_j| in DF_U32 units, carried through (x_t - mean) / std:
 * d o_t / d x_j = ((t == j) - 1/n) / std - o_t o_j / ((n - 1) std), so at most
 * err (1 + max|o|^2 / (n - 1)) / std.
 */
static double whiten_tol(double o, double lit, double var, int n, double max_o, double err)
{
    double cond = err * (1 + max_o * max_o / (n - 1)) / sqrt(var);
    return df_tol_hand(lit + fabs(o) * 1e-8 / (2 * var), fabs(o), cond, 1 + fabs(o));
}

static void assert_whitened(const float *got, const double *want, int n, double lit, double var,
                            double err)
{
    double max_o = 0;
    for (int t = 0; t < n; t++)
        max_o = fmax(max_o, fabs(want[t]));
    for (int t = 0; t < n; t++)
        assert_near(got[t], want[t], whiten_tol(want[t], lit, var, n, max_o, err));
}

/* df_tol_hand for float32 outputs of exact inputs: the printed digits and one rounding */
static void assert_all_hand(const float *got, const double *want, int n, double lit)
{
    for (int t = 0; t < n; t++)
        assert_near(got[t], want[t], df_tol_hand(lit, fabs(want[t]), 0, fabs(want[t])));
}

/* returns must equal advantages bit for bit (outcome estimators) */
static void assert_same(const float *ret, const float *adv, int n)
{
    for (int t = 0; t < n; t++)
        if (ret[t] != adv[t])
            fail_msg("token %d: returns %.9g != advantages %.9g", t, (double)ret[t], (double)adv[t]);
}

/* ====================================================================== registry */

static void test_registry_names(void **state)
{
    (void)state;
    struct {
        const char *name;
        df_adv_estimator_fn fn;
    } all[] = {
        {"grpo", df_adv_grpo},
        {"gae", df_adv_gae},
        {"rloo", df_adv_rloo},
        {"reinforce_plus_plus", df_adv_reinforce_plus_plus},
        {"reinforce_plus_plus_baseline", df_adv_reinforce_plus_plus_baseline},
        {"remax", df_adv_remax},
        {"gpg", df_adv_gpg},
        {"gpg_paper", df_adv_gpg_paper},
        {"cpgd", df_adv_cpgd},
        {"grpo_vectorized", df_adv_grpo_vectorized},
        {"rloo_vectorized", df_adv_rloo_vectorized},
        {"grpo_passk", df_adv_grpo_passk},
        {"opo", df_adv_opo},
        {"optimal_token_baseline", df_adv_optimal_token_baseline},
        {"tir_optimal_token_baseline", df_adv_tir_optimal_token_baseline},
    };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        df_adv_estimator_fn fn = NULL;
        assert_int_equal(df_adv_estimator_lookup(all[i].name, &fn), 0);
        assert_true(fn == all[i].fn);
    }
    df_adv_estimator_fn fn = NULL;
    assert_error_mentions(df_adv_estimator_lookup("reinforce_plus", &fn), DF_EINVAL, "rloo");
}

/* ====================================================================== whitening */

static void test_whiten(void **state)
{
    (void)state;
    /* x = 1, 2, 3, 6: mean 3, squared deviations 4 + 1 + 0 + 9 = 14, unbiased var 14 / 3,
     * std 2.1602469; out = (x - 3) / sqrt(14 / 3 + 1e-8) */
    const float x[] = {1, 2, 3, 6};
    float out[4];
    assert_int_equal(df_adv_whiten(4, x, out), 0);
    const double want[] = {-0.9258200988, -0.4629100494, 0, 1.3887301482};
    assert_whitened(out, want, 4, 5e-11, 14.0 / 3, 0); /* exact inputs */
    /* in place */
    float y[] = {1, 2, 3, 6};
    assert_int_equal(df_adv_whiten(4, y, y), 0);
    assert_memory_equal(y, out, sizeof y);
    /* one token: x - mean = 0 (verl would divide by zero in the Bessel factor) */
    float one = 5;
    assert_int_equal(df_adv_whiten(1, &one, &one), 0);
    assert_near(one, 0, 0);
    /* equal values: 0 / sqrt(0 + 1e-8) = 0 */
    float eq[] = {2, 2, 2};
    assert_int_equal(df_adv_whiten(3, eq, eq), 0);
    for (int t = 0; t < 3; t++)
        assert_near(eq[t], 0, 0);
    assert_int_equal(df_adv_whiten(0, NULL, NULL), 0);
    assert_int_equal(df_adv_whiten(-1, x, out), DF_EINVAL);
    assert_int_equal(df_adv_whiten(2, NULL, out), DF_EINVAL);
}

/* ====================================================================== gae */

static void test_gae_two_samples(void **state)
{
    (void)state;
    /*
     * gamma = lam = 1.
     * Sample 0: r = 0, 0, 1; V = 0.5, 0.5, 0.5
     *   t2: delta = 1 + 0 - 0.5 = 0.5, G = 0.5, ret = 1
     *   t1: delta = 0 + 0.5 - 0.5 = 0, G = 0 + 0.5 = 0.5, ret = 1
     *   t0: same, G = 0.5, ret = 1
     * Sample 1: r = 0, -1; V = 0.2, -0.4
     *   t1: delta = -1 + 0 + 0.4 = -0.6, G = -0.6, ret = -1
     *   t0: delta = 0 - 0.4 - 0.2 = -0.6, G = -1.2, ret = -1
     * G = 0.5, 0.5, 0.5, -1.2, -0.6: mean -0.06, squared deviations
     *   3 x 0.3136 + 1.2996 + 0.2916 = 2.532, var 0.633, std 0.79561298
     *   adv = (G + 0.06) / 0.79561298 = 0.70385981 (x3), -1.43285747, -0.67872196
     * The returns are exact in double (G + V gives back r - ... + V with float32 V); G of
     * sample 1 carries 0.2f's and 0.4f's errors, err = 0.2 + 0.4 (whiten_tol).
     */
    const int64_t off[] = {0, 3, 5};
    const float r[] = {0, 0, 1, 0, -1};
    const float v[] = {0.5f, 0.5f, 0.5f, 0.2f, -0.4f};
    df_adv_input in = {.n = 2, .offsets = off, .token_level_rewards = r, .values = v, .gamma = 1, .lam = 1};
    float adv[5], ret[5];
    assert_int_equal(df_adv_gae(&in, adv, ret), 0);
    const double want_ret[] = {1, 1, 1, -1, -1};
    const double want_adv[] = {0.70385981, 0.70385981, 0.70385981, -1.43285747, -0.67872196};
    assert_all_near(ret, want_ret, 5, 0);
    assert_whitened(adv, want_adv, 5, 5e-9, 0.633, 0.2 + 0.4);
}

static void test_gae_discounted_with_empty(void **state)
{
    (void)state;
    /*
     * gamma = 0.5, lam = 0.5 (gamma lam = 0.25).
     * Sample 0: r = 1, 0, 2; V = 1, 2, 0
     *   t2: delta = 2 + 0 - 0 = 2,          G = 2,                    ret = 2
     *   t1: delta = 0 + 0.5 * 0 - 2 = -2,   G = -2 + 0.25 * 2 = -1.5,  ret = 0.5
     *   t0: delta = 1 + 0.5 * 2 - 1 = 1,    G = 1 - 0.25 * 1.5 = 0.625, ret = 1.625
     * Sample 1: no tokens.
     * Sample 2: r = 3; V = 1: delta = 2, G = 2, ret = 3 (the last token of a
     *   response is terminal: nothing carries over from sample 0).
     * G = 0.625, -1.5, 2, 2: mean 0.78125, squared deviations 0.0244140625 +
     *   5.2041015625 + 2 x 1.4853515625 = 8.19921875, var 2.73307292, std 1.65320081
     *   adv = -0.09451362, -1.37989891, 0.73720627, 0.73720627
     * Exact inputs and dyadic G: the returns are exact.
     */
    const int64_t off[] = {0, 3, 3, 4};
    const float r[] = {1, 0, 2, 3};
    const float v[] = {1, 2, 0, 1};
    df_adv_input in = {
        .n = 3, .offsets = off, .token_level_rewards = r, .values = v, .gamma = 0.5f, .lam = 0.5f};
    float adv[4], ret[4];
    assert_int_equal(df_adv_gae(&in, adv, ret), 0);
    const double want_ret[] = {1.625, 0.5, 2, 3};
    const double want_adv[] = {-0.09451362, -1.37989891, 0.73720627, 0.73720627};
    assert_all_near(ret, want_ret, 4, 0);
    assert_whitened(adv, want_adv, 4, 5e-9, 2.73307292, 0);
}

static void test_gae_is_reward_to_go(void **state)
{
    (void)state;
    /*
     * gamma = lam = 1, V = 0: delta_t = r_t and G_t = sum_{u >= t} r_u, so the
     * unwhitened returns are the rewards-to-go, as reinforce_plus_plus computes
     * them with gamma = 1: r = 1, 2, 3 | 0.5, -1 -> 6, 5, 3 | -0.5, -1.
     */
    const int64_t off[] = {0, 3, 5};
    const float r[] = {1, 2, 3, 0.5f, -1};
    const float zero[5] = {0};
    df_adv_input in = {
        .n = 2, .offsets = off, .token_level_rewards = r, .values = zero, .gamma = 1, .lam = 1};
    float adv[5], ret[5], adv2[5], ret2[5];
    assert_int_equal(df_adv_gae(&in, adv, ret), 0);
    const double rtg[] = {6, 5, 3, -0.5, -1};
    assert_all_near(ret, rtg, 5, 0); /* sums of halves: exact */
    assert_int_equal(df_adv_reinforce_plus_plus(&in, adv2, ret2), 0);
    for (int t = 0; t < 5; t++) {
        assert_near(ret2[t], rtg[t], 0);
        assert_near(adv2[t], adv[t], 0); /* both whiten the same (exact) numbers the same way */
    }
}

static void test_gae_one_token_and_errors(void **state)
{
    (void)state;
    /* One token: r = 2, V = 0.5 -> G = 1.5, ret = 2, whitened advantage 0. */
    const int64_t off[] = {0, 1};
    const float r[] = {2}, v[] = {0.5f};
    df_adv_input in = {
        .n = 1, .offsets = off, .token_level_rewards = r, .values = v, .gamma = 1, .lam = 0.95f};
    float adv[1], ret[1];
    assert_int_equal(df_adv_gae(&in, adv, ret), 0);
    assert_near(ret[0], 2, 0); /* (2 - 0.5) + 0.5, exact */
    assert_near(adv[0], 0, 0);

    in.values = NULL;
    assert_error_mentions(df_adv_gae(&in, adv, ret), DF_EINVAL, "values");
    in.values = v;
    in.gamma = 1.5f;
    assert_error_mentions(df_adv_gae(&in, adv, ret), DF_EINVAL, "gamma");
    in.gamma = 1;
    in.lam = -0.1f;
    assert_error_mentions(df_adv_gae(&in, adv, ret), DF_EINVAL, "lam");
    in.lam = NAN;
    assert_error_mentions(df_adv_gae(&in, adv, ret), DF_EINVAL, "lam");
    in.lam = 1;
    const float bad_v[] = {INFINITY};
    in.values = bad_v;
    assert_error_mentions(df_adv_gae(&in, adv, ret), DF_EINVAL, "value of sample 0, token 0");
}

/* ====================================================================== reinforce++ */

static void test_reinforce_plus_plus(void **state)
{
    (void)state;
    /*
     * gamma = 0.5. Sample 0: r = 1, 0, 2 -> returns t2 = 2, t1 = 0 + 0.5 * 2 = 1,
     *   t0 = 1 + 0.5 * 1 = 1.5. Sample 1: no tokens. Sample 2: r = -1 -> -1.
     * returns = 1.5, 1, 2, -1: mean 0.875, squared deviations 0.390625 +
     *   0.015625 + 1.265625 + 3.515625 = 5.1875, var 1.72916667, std 1.31497782
     *   adv = 0.47529319, 0.09505864, 0.85552774, -1.42587956
     */
    const int64_t off[] = {0, 3, 3, 4};
    const float r[] = {1, 0, 2, -1};
    df_adv_input in = {.n = 3, .offsets = off, .token_level_rewards = r, .gamma = 0.5f};
    float adv[4], ret[4];
    assert_int_equal(df_adv_reinforce_plus_plus(&in, adv, ret), 0);
    const double want_ret[] = {1.5, 1, 2, -1};
    const double want_adv[] = {0.47529319, 0.09505864, 0.85552774, -1.42587956};
    assert_all_near(ret, want_ret, 4, 0); /* exact inputs, dyadic sums */
    assert_whitened(adv, want_adv, 4, 5e-9, 1.72916667, 0);

    /* gamma = 0: returns are the token rewards themselves. */
    in.gamma = 0;
    assert_int_equal(df_adv_reinforce_plus_plus(&in, adv, ret), 0);
    const double want0[] = {1, 0, 2, -1};
    assert_all_near(ret, want0, 4, 0);
    in.gamma = 2;
    assert_error_mentions(df_adv_reinforce_plus_plus(&in, adv, ret), DF_EINVAL, "gamma");
}

static void test_reinforce_plus_plus_baseline(void **state)
{
    (void)state;
    /*
     * Group 0: sample 0 (r = 0, 1 -> score 1), sample 1 (r = 3 -> 3): mean 2,
     *   centred -1, +1. Group 1: sample 2 alone (r = 5): mean 0 (verl), centred 5.
     * Per token: -1, -1, 1, 5: mean 1, squared deviations 4 + 4 + 0 + 16 = 24,
     *   var 8, std 2.82842713 -> -0.70710678, -0.70710678, 0, 1.41421356;
     *   returns = advantages.
     */
    const int64_t off[] = {0, 2, 3, 4};
    const float r[] = {0, 1, 3, 5};
    const int64_t g[] = {0, 0, 1};
    df_adv_input in = {.n = 3, .offsets = off, .token_level_rewards = r, .group = g};
    float adv[4], ret[4];
    assert_int_equal(df_adv_reinforce_plus_plus_baseline(&in, adv, ret), 0);
    const double want[] = {-0.70710678, -0.70710678, 0, 1.41421356};
    assert_whitened(adv, want, 4, 5e-9, 8, 0); /* exact inputs */
    assert_same(ret, adv, 4);

    /* All-equal scores in every group: every centred value is 0, whitened 0. */
    const float same[] = {1, 0, 1, 1};
    const int64_t g2[] = {0, 0, 0};
    df_adv_input eq = {.n = 3, .offsets = off, .token_level_rewards = same, .group = g2};
    assert_int_equal(df_adv_reinforce_plus_plus_baseline(&eq, adv, ret), 0);
    for (int t = 0; t < 4; t++)
        assert_near(adv[t], 0, 0);
}

/* ====================================================================== remax */

static void test_remax(void **state)
{
    (void)state;
    /*
     * Sample 0: r = 0, 0, 1, greedy baseline 0.25: reward-to-go 1, 1, 1;
     *   advantages 0.75 each. Sample 1: r = 0.5, 1, baseline 2: reward-to-go
     *   1.5, 1; advantages -0.5, -1. Sample 2: no tokens.
     */
    const int64_t off[] = {0, 3, 5, 5};
    const float r[] = {0, 0, 1, 0.5f, 1};
    const float base[] = {0.25f, 2, 7};
    df_adv_input in = {.n = 3,
                       .offsets = off,
                       .token_level_rewards = r,
                       .reward_baselines = base,
                       .gamma = 0.5f /* remax does not discount, as verl */};
    float adv[5], ret[5];
    assert_int_equal(df_adv_remax(&in, adv, ret), 0);
    const double want_ret[] = {1, 1, 1, 1.5, 1};
    const double want_adv[] = {0.75, 0.75, 0.75, -0.5, -1};
    assert_all_near(ret, want_ret, 5, 0); /* sums and differences of exact quarters */
    assert_all_near(adv, want_adv, 5, 0);

    in.reward_baselines = NULL;
    assert_error_mentions(df_adv_remax(&in, adv, ret), DF_EINVAL, "reward_baselines");
    const float nan_base[] = {0, NAN, 0};
    in.reward_baselines = nan_base;
    assert_error_mentions(df_adv_remax(&in, adv, ret), DF_EINVAL, "baseline of sample 1");
}

/* ====================================================================== rloo */

/*
 * Shared outcome case. Six samples, token counts 2, 1, 3, 1, 0, 1:
 *   scores s0 = 0 + 1 = 1, s1 = 0, s2 = 0.5 + 0.5 + 1 = 2, s3 = 4, s4 = 0 (empty),
 *   s5 = 3; groups A = {0, 1, 2}, B = {3} (one sample), C = {4, 5}.
 */
static const int64_t k_off[] = {0, 2, 3, 6, 7, 7, 8};
static const float k_rew[] = {0, 1, 0, 0.5f, 0.5f, 1, 4, 3};
static const int64_t k_grp[] = {0, 0, 0, 1, 2, 2};

static void test_rloo(void **state)
{
    (void)state;
    /*
     * A: s0 = 1 - (0 + 2) / 2 = 0; s1 = 0 - (1 + 2) / 2 = -1.5; s2 = 2 - (1 + 0) / 2 = 1.5
     *    (= k / (k - 1) (s - mean) = 1.5 (s - 1))
     * B: one sample, no other to compare with: 4 (verl keeps the score)
     * C: s4 = 0 - 3 = -3 (no tokens to write); s5 = 3 - 0 = 3
     */
    df_adv_input in = {.n = 6, .offsets = k_off, .token_level_rewards = k_rew, .group = k_grp};
    float adv[8], ret[8];
    assert_int_equal(df_adv_rloo(&in, adv, ret), 0);
    const double want[] = {0, 0, -1.5, 1.5, 1.5, 1.5, 4, 3};
    assert_all_near(adv, want, 8, 0); /* halves of small integers: exact */
    assert_same(ret, adv, 8);

    /* All-equal scores (2, 2): each leave-one-out baseline is 2, advantage 0. */
    const int64_t off[] = {0, 1, 3};
    const float r[] = {2, 1, 1};
    const int64_t g[] = {1, 1};
    df_adv_input eq = {.n = 2, .offsets = off, .token_level_rewards = r, .group = g};
    assert_int_equal(df_adv_rloo(&eq, adv, ret), 0);
    for (int t = 0; t < 3; t++)
        assert_near(adv[t], 0, 0);
}

/* rloo_vectorized: rloo's baselines, but a group of one gets 0 (B's sample 3), not its score. */
static void test_rloo_vectorized(void **state)
{
    (void)state;
    df_adv_input in = {.n = 6, .offsets = k_off, .token_level_rewards = k_rew, .group = k_grp};
    float adv[8], ret[8];
    assert_int_equal(df_adv_rloo_vectorized(&in, adv, ret), 0);
    const double want[] = {0, 0, -1.5, 1.5, 1.5, 1.5, 0, 3};
    assert_all_near(adv, want, 8, 0);
    assert_same(ret, adv, 8);
}

/*
 * grpo_vectorized on k_off's groups equals grpo where the variance is past the floor (A: var 1;
 * B alone: mean 0, std 1; C: var 4.5), and floors a near-flat group: scores 1 and 1.0001f
 * (var = (1.0001f - 1)^2 / 2 ~ 5e-9 < 1e-6) are divided by sqrt(1e-6) + 1e-6, not by their std.
 */
static void test_grpo_vectorized(void **state)
{
    (void)state;
    df_adv_input in = {.n = 6, .offsets = k_off, .token_level_rewards = k_rew, .group = k_grp,
                       .norm_adv_by_std_in_grpo = true, .epsilon = 1e-6f};
    float adv[8], ret[8], ref[8], rret[8];
    assert_int_equal(df_adv_grpo_vectorized(&in, adv, ret), 0);
    assert_int_equal(df_adv_grpo(&in, ref, rret), 0);
    assert_memory_equal(adv, ref, sizeof adv);
    assert_same(ret, adv, 8);
    const int64_t off[] = {0, 1, 2};
    const float r[] = {1.0f, 1.0001f};
    const int64_t g[] = {0, 0};
    df_adv_input near = {.n = 2, .offsets = off, .token_level_rewards = r, .group = g,
                         .norm_adv_by_std_in_grpo = true, .epsilon = 1e-6f};
    assert_int_equal(df_adv_grpo_vectorized(&near, adv, ret), 0);
    const double half = ((double)1.0001f - 1.0) / 2, eps = (double)1e-6f;
    const double want = half / (sqrt(eps) + eps); /* ~0.05, where grpo gives ~0.7 */
    assert_near(adv[1], want, 4 * DF_U32 * want);
    assert_near(adv[0], -want, 4 * DF_U32 * want);
    assert_int_equal(df_adv_grpo(&near, ref, rret), 0);
    assert_true(ref[1] > 10 * adv[1]);
    near.norm_adv_by_std_in_grpo = false;
    assert_int_equal(df_adv_grpo_vectorized(&near, adv, ret), 0);
    assert_near(adv[1], half, DF_U32 * half);
}

/*
 * grpo_passk. Group 0: scores 1, 0, 2 (std 1): only sample 2 is reinforced, by 2 - 1 over
 * std + eps; group 1: 4, 4, 3 (a tie at the top): every advantage 0. A prompt with one response
 * is refused, naming the sample.
 */
static void test_grpo_passk(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 3, 6, 7, 8, 9};
    const float r[] = {0, 1, 0, 0.5f, 0.5f, 1, 4, 4, 3};
    const int64_t g[] = {0, 0, 0, 1, 1, 1};
    df_adv_input in = {.n = 6, .offsets = off, .token_level_rewards = r, .group = g,
                       .norm_adv_by_std_in_grpo = true, .epsilon = 1e-6f};
    float adv[9], ret[9];
    assert_int_equal(df_adv_grpo_passk(&in, adv, ret), 0);
    const double m = 1.0 / (1.0 + (double)1e-6f);
    const double want[] = {0, 0, 0, m, m, m, 0, 0, 0};
    assert_all_near(adv, want, 9, DF_U32);
    assert_same(ret, adv, 9);
    in.norm_adv_by_std_in_grpo = false;
    assert_int_equal(df_adv_grpo_passk(&in, adv, ret), 0);
    assert_near(adv[3], 1.0, 0);
    const int64_t g1[] = {0, 0, 0, 1, 1, 2};
    in.group = g1;
    assert_error_mentions(df_adv_grpo_passk(&in, adv, ret), DF_EINVAL, "sample 5 is its prompt's only response");
}

/*
 * opo. Group 0: lengths 2, 1, 3 and scores 1, 0, 2: baseline (2 + 0 + 6) / 6 = 4/3, advantages
 * -1/3, -4/3, 2/3; group 1: lengths 1, 1, 1, scores 4, 4, 3: baseline 11/3, advantages 1/3, 1/3,
 * -2/3. Masking sample 2's last token (length 2): baseline (2 + 0 + 4) / 5 = 1.2. A group of one
 * has baseline 0; a group whose responses have no model token, the plain mean.
 */
static void test_opo(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 3, 6, 7, 8, 9};
    const float r[] = {0, 1, 0, 0.5f, 0.5f, 1, 4, 4, 3};
    const int64_t g[] = {0, 0, 0, 1, 1, 1};
    df_adv_input in = {.n = 6, .offsets = off, .token_level_rewards = r, .group = g};
    float adv[9], ret[9];
    assert_int_equal(df_adv_opo(&in, adv, ret), 0);
    const double want[] = {-1.0 / 3, -1.0 / 3, -4.0 / 3, 2.0 / 3, 2.0 / 3, 2.0 / 3, 1.0 / 3, 1.0 / 3, -2.0 / 3};
    assert_all_hand(adv, want, 9, 0);
    assert_same(ret, adv, 9);
    const int32_t mask[] = {1, 1, 1, 1, 1, 0, 1, 1, 1};
    in.response_mask = mask;
    assert_int_equal(df_adv_opo(&in, adv, ret), 0);
    const double want_m[] = {-0.2, -0.2, -1.2, 0.8, 0.8, 0.8, 1.0 / 3, 1.0 / 3, -2.0 / 3};
    assert_all_hand(adv, want_m, 9, 0);
    in.response_mask = NULL;
    const int64_t g1[] = {0, 0, 0, 1, 1, 2};
    in.group = g1;
    assert_int_equal(df_adv_opo(&in, adv, ret), 0);
    assert_near(adv[8], 3.0, 0); /* alone: baseline 0 */
    const int64_t off0[] = {0, 0, 0};
    const float r0[] = {0};
    const int64_t g0[] = {0, 0};
    df_adv_input empty = {.n = 2, .offsets = off0, .token_level_rewards = r0, .group = g0};
    assert_int_equal(df_adv_opo(&empty, NULL, NULL), 0);
}

/* ====================================================================== optimal token baseline */

/*
 * Token weights w = 1 - 2 pi + sum pi^2 chosen simple: pi = 0.5, sum 0.5 -> w = 0.5; pi = 0.25,
 * sum 0.5 -> w = 1; pi = 1, sum 1 -> w = 0 (log-prob 0: exact). ln 0.5 and ln 0.25 are float32
 * (LH, LQ): exp of them is pi (1 + d), |d| <= |ln pi| DF_U32, so each w is off by at most
 * 0.7 DF_U32 and a W by its token count times that; a baseline B = sum G W / sum W moves by
 * sum_i |G_i - B| |dW_i| / sum W, at most 1.2 DF_U32 in the cases below: cond 2 (df_tol_hand).
 * The hand values keep the estimators' epsilon 1e-8 in B's denominator (B = num / (den + 1e-8)).
 */
#define LH (-0.693147181f) /* ln 0.5 */
#define LQ (-1.386294361f) /* ln 0.25 */
#define OTB_B(num, den) ((double)(num) / ((double)(den) + 1e-8))

static void assert_otb(const float *got, const double *want, int n)
{
    for (int t = 0; t < n; t++)
        if (!(fabs((double)got[t] - want[t]) <= df_tol_hand(0, fabs(want[t]), 2, 8)))
            fail_msg("token %d: %.9g, expected %.9g", t, (double)got[t], want[t]);
}

/*
 * No mask. Group 0: three samples of 3, 2 and 4 tokens; group 1: sample 3 alone.
 *   s0: r 0 0 1    -> G 1 1 1;     w 1, 0.5, 0.5      -> W 1, 1.5, 2
 *   s1: r 0 0      -> G 0 0;       w 0.5, 0.5         -> W 0.5, 1
 *   s2: r 0 0 0 2  -> G 2 2 2 2;   w 1, 0, 0.25, 1    -> W 1, 1, 1.25, 2.25
 *       (w 0.25: pi = 0.5, sum pi^2 = 0.25)
 *   position 0: B = (1*1 + 0*0.5 + 2*1) / (1 + 0.5 + 1) = 3 / 2.5 = 1.2 -> A -0.2, -1.2, 0.8
 *   position 1: B = (1*1.5 + 0*1 + 2*1) / (1.5 + 1 + 1) = 3.5 / 3.5 = 1 -> A 0, -1, 1
 *   position 2: B = (1*2 + 2*1.25) / (2 + 1.25) = 4.5 / 3.25 = 18/13 -> A -5/13, 8/13 (s1 has
 *               no token there and adds nothing)
 *   position 3: s2 alone: B = 2*2.25 / 2.25 = 2 -> A 0 (up to the epsilon: 2 - 4.5 / (2.25 + 1e-8))
 *   s3 (alone): r 0.5 0.5 -> G 1, 0.5; B = 0, A = G.
 * returns = G everywhere (sums of halves: exact). tir_optimal_token_baseline, without a mask,
 * differs only by the zero tail: s2 is the group's only longest sample (4 model tokens, the
 * second longest 3), so its baseline at positions >= 3 is 0 and A = G = 2 there.
 */
static void test_otb_group(void **state)
{
    (void)state;
    const int64_t off[] = {0, 3, 5, 9, 11};
    const float r[] = {0, 0, 1, 0, 0, 0, 0, 0, 2, 0.5f, 0.5f};
    const float lp[] = {LQ, LH, LH, LH, LH, LQ, 0, LH, LQ, LH, LQ};
    const float sq[] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 1, 0.25f, 0.5f, 0.5f, 0.5f};
    const int64_t g[] = {0, 0, 0, 1};
    df_adv_input in = {.n = 4, .offsets = off, .token_level_rewards = r, .group = g, .old_log_probs = lp,
                       .sum_pi_squared = sq, .epsilon = 1e-6f /* not used: OTB's epsilon is 1e-8 */};
    float adv[12], ret[12]; /* 11 tokens, then 12 (the tie below) */
    assert_int_equal(df_adv_optimal_token_baseline(&in, adv, ret), 0);
    const double b0 = OTB_B(3, 2.5), b1 = OTB_B(3.5, 3.5), b2 = OTB_B(4.5, 3.25), b3 = OTB_B(4.5, 2.25);
    const double want[] = {1 - b0, 1 - b1, 1 - b2, 0 - b0, 0 - b1, 2 - b0, 2 - b1, 2 - b2, 2 - b3, 1, 0.5};
    assert_otb(adv, want, 11);
    assert_near(adv[0], -0.2, 1e-6); /* the hand values above, to their digits */
    assert_near(adv[7], 8.0 / 13, 1e-6);
    assert_near(adv[8], 0, 1e-7);
    const double want_ret[] = {1, 1, 1, 0, 0, 2, 2, 2, 2, 1, 0.5};
    assert_all_near(ret, want_ret, 11, 0);
    /* in->epsilon is grpo's std guard, not OTB's: another value changes nothing */
    float adv_e[11], ret_e[11];
    in.epsilon = 0.5f;
    assert_int_equal(df_adv_optimal_token_baseline(&in, adv_e, ret_e), 0);
    assert_memory_equal(adv_e, adv, sizeof adv_e);
    in.epsilon = 1e-6f;

    assert_int_equal(df_adv_tir_optimal_token_baseline(&in, adv, ret), 0);
    double want_tir[11];
    memcpy(want_tir, want, sizeof want);
    want_tir[8] = 2; /* the zero tail */
    assert_otb(adv, want_tir, 11);
    assert_all_near(ret, want_ret, 11, 0);

    /* A tie for the longest: no zero tail. s0 made 4 tokens long like s2 (an extra model token
       with w = 0, reward 0): position 3 then has s0 (G 1, W 2) and s2 (G 2, W 2.25):
       B = (2 + 4.5) / 4.25 for both estimators. */
    const int64_t off2[] = {0, 4, 6, 10, 12};
    const float r2[] = {0, 0, 1, 0, 0, 0, 0, 0, 0, 2, 0.5f, 0.5f};
    const float lp2[] = {LQ, LH, LH, 0, LH, LH, LQ, 0, LH, LQ, LH, LQ};
    const float sq2[] = {0.5f, 0.5f, 0.5f, 1, 0.5f, 0.5f, 0.5f, 1, 0.25f, 0.5f, 0.5f, 0.5f};
    in.offsets = off2, in.token_level_rewards = r2, in.old_log_probs = lp2, in.sum_pi_squared = sq2;
    /* s0: r 0 0 1 0 -> G 1 1 1 0; W 1, 1.5, 2, 2 */
    const double c0 = OTB_B(3, 2.5), c1 = OTB_B(3.5, 3.5), c2 = OTB_B(4.5, 3.25);
    const double c3 = OTB_B(0 * 2 + 2 * 2.25, 2 + 2.25);
    const double want2[] = {1 - c0, 1 - c1, 1 - c2, 0 - c3, 0 - c0, 0 - c1,
                            2 - c0, 2 - c1, 2 - c2, 2 - c3, 1,      0.5};
    assert_int_equal(df_adv_optimal_token_baseline(&in, adv, ret), 0);
    assert_otb(adv, want2, 12);
    assert_int_equal(df_adv_tir_optimal_token_baseline(&in, adv, ret), 0);
    assert_otb(adv, want2, 12);

    /* Rollout IS weights rho scale w by rho^2 (verl): rho = 2 on s1's tokens, 1 elsewhere (exact),
       s1's W becomes 2, 4: position 0 B = (1 + 0 + 2) / (1 + 2 + 1) = 3/4 -> A 0.25, -0.75, 1.25;
       position 1 B = (1.5 + 0 + 2) / (1.5 + 4 + 1) = 3.5 / 6.5. */
    const float rho[] = {1, 1, 1, 2, 2, 1, 1, 1, 1, 1, 1};
    in.offsets = off, in.token_level_rewards = r, in.old_log_probs = lp, in.sum_pi_squared = sq;
    in.rollout_is_weights = rho;
    assert_int_equal(df_adv_optimal_token_baseline(&in, adv, ret), 0);
    const double i0 = OTB_B(3, 4), i1 = OTB_B(3.5, 6.5);
    const double want_is[] = {1 - i0, 1 - i1, 0 - i0, 0 - i1, 2 - i0, 2 - i1};
    const float got_is[] = {adv[0], adv[1], adv[3], adv[4], adv[5], adv[6]};
    assert_otb(got_is, want_is, 6);
}

/*
 * Multi-turn: a tool token inside a response. Group 0:
 *   s0: 4 tokens, mask 1 0 1 1, r 0 3 0 1 (the tool token's reward is not the model's: left out)
 *       -> G 1 1 1 1; w 1, -, 0.5, 0.5 -> W 1, (1), 1.5, 2 (model tokens at indices 0, 2, 3)
 *   s1: 3 tokens, all the model's, r 0 0 0 -> G 0 0 0; w 0.5 each -> W 0.5, 1, 1.5
 * optimal_token_baseline compares token indices:
 *   index 0: B = 1*1 / (1 + 0.5) = 2/3   -> A s0 1/3, s1 -2/3
 *   index 1: s0's tool token adds nothing: B = 0*1 / 1 = 0 -> A s1 0; s0's tool token 0
 *   index 2: B = (1*1.5 + 0*1.5) / 3 = 0.5 -> A s0 0.5, s1 -0.5
 *   index 3: s0 alone: B = 2/2 = 1 -> A 0 (to the epsilon)
 * tir_optimal_token_baseline compares the k-th model tokens (both samples have 3: a tie, no
 * zero tail):
 *   k 0 (s0 t0, s1 t0): B = 1 / 1.5 = 2/3 -> A 1/3, -2/3
 *   k 1 (s0 t2, s1 t1): B = 1*1.5 / (1.5 + 1) = 0.6 -> A 0.4, -0.6
 *   k 2 (s0 t3, s1 t2): B = 1*2 / (2 + 1.5) = 4/7 -> A 3/7, -4/7
 *   s0's tool token: 0.
 * Group 1: s2 with two model tokens (r 0 1 -> G 1 1; w 0.5 0.5 -> W 0.5, 1) and s3 with none
 * (one tool token, r 2 -> G 0). optimal_token_baseline keeps s3 in the group, a group of two
 * whose baseline is s2's own return: A = 1 - 0.5 / (0.5 + 1e-8) ~ 2e-8, 1 - 1 / (1 + 1e-8);
 * tir_optimal_token_baseline leaves s3 out: s2 is alone, B = 0, A = G = 1, 1. s3's advantage
 * is 0 in both. returns: G on every token (1 1 1 1 | 0 0 0 | 1 1 | 0).
 */
static void test_otb_multi_turn(void **state)
{
    (void)state;
    const int64_t off[] = {0, 4, 7, 9, 10};
    const float r[] = {0, 3, 0, 1, 0, 0, 0, 0, 1, 2};
    const int32_t mask[] = {1, 0, 1, 1, 1, 1, 1, 1, 1, 0};
    const float nan = NAN; /* on tool tokens: not read */
    const float lp[] = {LQ, nan, LH, LH, LH, LH, LH, LH, LH, nan};
    const float sq[] = {0.5f, nan, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 7};
    const int64_t g[] = {0, 0, 1, 1};
    df_adv_input in = {.n = 4, .offsets = off, .token_level_rewards = r, .group = g, .old_log_probs = lp,
                       .sum_pi_squared = sq, .response_mask = mask};
    float adv[10], ret[10];
    const double want_ret[] = {1, 1, 1, 1, 0, 0, 0, 1, 1, 0};

    assert_int_equal(df_adv_optimal_token_baseline(&in, adv, ret), 0);
    const double want[] = {1 - OTB_B(1, 1.5), 0, 1 - OTB_B(1.5, 3), 1 - OTB_B(2, 2),
                           -OTB_B(1, 1.5), -OTB_B(0, 1), -OTB_B(1.5, 3),
                           1 - OTB_B(0.5, 0.5), 1 - OTB_B(1, 1), 0};
    assert_otb(adv, want, 10);
    assert_all_near(ret, want_ret, 10, 0);
    assert_true(adv[1] == 0.0f && adv[9] == 0.0f);

    assert_int_equal(df_adv_tir_optimal_token_baseline(&in, adv, ret), 0);
    const double want_tir[] = {1 - OTB_B(1, 1.5), 0, 1 - OTB_B(1.5, 2.5), 1 - OTB_B(2, 3.5),
                               -OTB_B(1, 1.5), -OTB_B(1.5, 2.5), -OTB_B(2, 3.5),
                               1, 1, 0};
    assert_otb(adv, want_tir, 10);
    assert_near(adv[2], 0.4, 1e-6);
    assert_near(adv[3], 3.0 / 7, 1e-6);
    assert_all_near(ret, want_ret, 10, 0);
    assert_true(adv[1] == 0.0f && adv[9] == 0.0f);

    /* All of a group's samples without a model token: every advantage 0, returns 0. */
    const int32_t none[] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 0};
    in.response_mask = none;
    assert_int_equal(df_adv_tir_optimal_token_baseline(&in, adv, ret), 0);
    for (int t = 0; t < 7; t++)
        assert_true(adv[t] == 0.0f && ret[t] == 0.0f);
}

/* Refusals: the actor's pass missing (the message says how to turn it on), values that are not
   probabilities, on the model's tokens; float rounding just past the bounds passes. */
static void test_otb_errors(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 3};
    const float r[] = {0, 1, 1};
    const float lp_ok[] = {LH, LH, 0};
    const float sq_ok[] = {0.5f, 0.5f, 1};
    const int64_t g[] = {0, 0};
    df_adv_input in = {.n = 2, .offsets = off, .token_level_rewards = r, .group = g, .old_log_probs = lp_ok,
                       .sum_pi_squared = sq_ok};
    float adv[3], ret[3];
    const df_adv_estimator_fn fns[] = {df_adv_optimal_token_baseline, df_adv_tir_optimal_token_baseline};
    const char *const names[] = {"optimal_token_baseline", "tir_optimal_token_baseline"};
    for (int e = 0; e < 2; e++) {
        in.old_log_probs = lp_ok, in.sum_pi_squared = sq_ok;
        assert_int_equal(fns[e](&in, adv, ret), 0);
        in.sum_pi_squared = NULL;
        assert_error_mentions(fns[e](&in, adv, ret), DF_EINVAL, "calculate_sum_pi_squared: true");
        assert_last_error_mentions(names[e]);
        assert_last_error_mentions("sum_pi_squared is NULL");
        in.sum_pi_squared = sq_ok, in.old_log_probs = NULL;
        assert_error_mentions(fns[e](&in, adv, ret), DF_EINVAL, "old_log_probs is NULL");
        assert_last_error_mentions("calculate_sum_pi_squared: true");
        in.old_log_probs = lp_ok;

        const float sq_big[] = {0.5f, 0.5f, 1.5f};
        in.sum_pi_squared = sq_big;
        assert_error_mentions(fns[e](&in, adv, ret), DF_EINVAL, "sum_pi_squared of sample 1, token 0 is 1.5");
        const float sq_neg[] = {0.5f, -0.25f, 1};
        in.sum_pi_squared = sq_neg;
        assert_error_mentions(fns[e](&in, adv, ret), DF_EINVAL, "sum_pi_squared of sample 0, token 1");
        const float sq_nan[] = {NAN, 0.5f, 1};
        in.sum_pi_squared = sq_nan;
        assert_error_mentions(fns[e](&in, adv, ret), DF_EINVAL, "sum_pi_squared of sample 0, token 0 is nan");
        const float sq_round[] = {0.5f, 0.5f, 1.000001f}; /* float rounding of a sum that is 1 */
        in.sum_pi_squared = sq_round;
        assert_int_equal(fns[e](&in, adv, ret), 0);
        in.sum_pi_squared = sq_ok;

        const float lp_nan[] = {LH, NAN, 0};
        in.old_log_probs = lp_nan;
        assert_error_mentions(fns[e](&in, adv, ret), DF_EINVAL, "old log-prob of sample 0, token 1 is nan");
        const float lp_inf[] = {LH, LH, -INFINITY};
        in.old_log_probs = lp_inf;
        assert_error_mentions(fns[e](&in, adv, ret), DF_EINVAL, "old log-prob of sample 1, token 0");
        const float lp_pos[] = {0.5f, LH, 0};
        in.old_log_probs = lp_pos;
        assert_error_mentions(fns[e](&in, adv, ret), DF_EINVAL, "old log-prob of sample 0, token 0 is 0.5");
        const float lp_round[] = {1e-6f, LH, 0};
        in.old_log_probs = lp_round;
        assert_int_equal(fns[e](&in, adv, ret), 0);
        in.old_log_probs = lp_ok;

        /* the common checks come first */
        const float r_nan[] = {0, 1, NAN};
        in.token_level_rewards = r_nan;
        assert_error_mentions(fns[e](&in, adv, ret), DF_EINVAL, "reward of sample 1, token 0");
        in.token_level_rewards = r;
    }
}

/* ====================================================================== gpg */

/* verl's alpha = B / max(M', 1), M' = samples with a non-zero score (algo.h "gpg"). */
static void test_gpg(void **state)
{
    (void)state;
    /*
     * Groups {1, 0} (samples 0, 1) and {1, 1} (samples 2, 3, flat): scores 1, 0, 1, 1.
     * B = 4, M' = 3 -> alpha = 4 / 3.
     *   group 0: mean 0.5 -> 4/3 * 0.5 = 0.66666667, -0.66666667; group 1: 0.
     * (The paper counts the flat group instead: alpha = 4 / 2 = 2, test_gpg_paper.)
     */
    const int64_t off[] = {0, 2, 3, 4, 5};
    const float r[] = {0, 1, 0, 1, 1};
    const int64_t g[] = {0, 0, 1, 1};
    df_adv_input in = {.n = 4, .offsets = off, .token_level_rewards = r, .group = g};
    float adv[5], ret[5];
    assert_int_equal(df_adv_gpg(&in, adv, ret), 0);
    const double want[] = {0.66666667, 0.66666667, -0.66666667, 0, 0};
    assert_all_hand(adv, want, 5, 5e-9); /* alpha = 4 / 3 in double */
    assert_same(ret, adv, 5);

    /*
     * Shared case: A = {1, 0, 2} mean 1; B = {4} alone (mean 0); C = {0 (no tokens), 3} mean 1.5.
     * Scores 1, 0, 2, 4, 0, 3: M' = 4 (the empty response scores 0), alpha = 6 / 4 = 1.5.
     *   A: 0, -1.5, 1.5; B: 6; C: -2.25 (no tokens), 2.25
     */
    df_adv_input s = {.n = 6, .offsets = k_off, .token_level_rewards = k_rew, .group = k_grp};
    float a8[8], r8[8];
    assert_int_equal(df_adv_gpg(&s, a8, r8), 0);
    const double want8[] = {0, 0, -1.5, 1.5, 1.5, 1.5, 6, 2.25};
    assert_all_near(a8, want8, 8, 0); /* alpha 1.5 and the means exact */

    /*
     * Flat group next to a single sample: {1, 1} flat, {0.5} alone, {0, 2}: scores 1, 1, 0.5, 0, 2.
     * B = 5, M' = 4, alpha = 1.25: 0, 0 | 1.25 * 0.5 = 0.625 | -1.25, 1.25.
     */
    const int64_t off3[] = {0, 1, 2, 3, 4, 5};
    const float r3[] = {1, 1, 0.5f, 0, 2};
    const int64_t g3[] = {0, 0, 1, 2, 2};
    df_adv_input t3 = {.n = 5, .offsets = off3, .token_level_rewards = r3, .group = g3};
    assert_int_equal(df_adv_gpg(&t3, adv, ret), 0);
    const double want3[] = {0, 0, 0.625, -1.25, 1.25};
    assert_all_near(adv, want3, 5, 0); /* exact */

    /* Negative scores count as non-zero: {-1, 1}, {0, 0}: M' = 2, alpha = 2: -2, 2, 0, 0. */
    const float r5[] = {-1, 1, 0, 0};
    const int64_t g5[] = {0, 0, 1, 1};
    df_adv_input t5 = {.n = 4, .offsets = off3, .token_level_rewards = r5, .group = g5};
    assert_int_equal(df_adv_gpg(&t5, adv, ret), 0);
    const double want5[] = {-2, 2, 0, 0};
    assert_all_near(adv, want5, 4, 0);

    /* Every score 0: M' = 0, clamped to 1 as verl; every advantage 0 (no division by zero). */
    const float r4[] = {0, 0, 0, 0, 0};
    const int64_t g4[] = {0, 0, 1, 1, 1};
    df_adv_input t4 = {.n = 5, .offsets = off3, .token_level_rewards = r4, .group = g4};
    assert_int_equal(df_adv_gpg(&t4, adv, ret), 0);
    for (int t = 0; t < 5; t++)
        assert_near(adv[t], 0, 0);
}

/*
 * The batch-level estimators on one shard of a step batch scale by the whole batch's counts
 * (df_adv_input.batch_counts), as verl's driver does: groups {1, 0}, {1, 1} on shard A and
 * {0, 0}, {2, 0} on shard B. Whole batch: B = 8, M' (non-zero scores) = 4, flat samples 4,
 * groups 4 of which 2 flat. gpg: alpha = 8 / 4 = 2 (shard A alone: 4 / 3); gpg_paper:
 * 8 / (8 - 4) = 2; cpgd clip_filter_like_weight: 4 / (4 - 2) = 2 (shard A alone gives 2 for
 * these two as well, so cpgd is also given skewed counts below). Each shard run with the
 * summed counts equals the whole batch run, bit for bit.
 */
static void test_batch_counts(void **state)
{
    (void)state;
    const int64_t off[] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    const float r[] = {1, 0, 1, 1, 0, 0, 2, 0};
    const int64_t g_all[] = {0, 0, 1, 1, 2, 2, 3, 3}, g_half[] = {0, 0, 1, 1};
    df_adv_input all = {.n = 8, .offsets = off, .token_level_rewards = r, .group = g_all, .epsilon = 1e-6f,
                        .cpgd_weight_factor = "clip_filter_like_weight"};
    df_adv_batch_counts c;
    assert_int_equal(df_adv_batch_counts_of(&all, &c), 0);
    assert_int_equal(c.n_samples, 8);
    assert_int_equal(c.n_nonzero_score, 4);
    assert_int_equal(c.n_flat_samples, 4);
    assert_int_equal(c.n_groups, 4);
    assert_int_equal(c.n_flat_groups, 2);
    df_adv_input part[2] = {all, all};
    df_adv_batch_counts pc[2], sum = {0};
    for (int h = 0; h < 2; h++) {
        part[h].n = 4;
        part[h].offsets = off; /* one token each: the same offsets */
        part[h].token_level_rewards = r + 4 * h;
        part[h].group = g_half;
        assert_int_equal(df_adv_batch_counts_of(&part[h], &pc[h]), 0);
        sum.n_samples += pc[h].n_samples, sum.n_nonzero_score += pc[h].n_nonzero_score;
        sum.n_flat_samples += pc[h].n_flat_samples, sum.n_groups += pc[h].n_groups;
        sum.n_flat_groups += pc[h].n_flat_groups;
    }
    assert_memory_equal(&sum, &c, sizeof c);
    const df_adv_estimator_fn fns[] = {df_adv_gpg, df_adv_gpg_paper, df_adv_cpgd};
    const double alone_a[] = {2.0 / 3, 1, 1}; /* shard A's first advantage scaled by its own counts */
    for (int f = 0; f < 3; f++) {
        float whole[8], wret[8], mine[4], mret[4];
        assert_int_equal(fns[f](&all, whole, wret), 0);
        assert_true(whole[0] == 1.0f); /* every weight is 2: 2 * (1 - 0.5) */
        for (int h = 0; h < 2; h++) {
            part[h].batch_counts = &c;
            assert_int_equal(fns[f](&part[h], mine, mret), 0);
            assert_memory_equal(mine, whole + 4 * h, sizeof mine);
            part[h].batch_counts = NULL;
        }
        assert_int_equal(fns[f](&part[0], mine, mret), 0); /* alone: its own counts */
        assert_near(mine[0], alone_a[f], 1e-7);
    }
    /* cpgd's weight follows the counts it is given: P = 4, P_flat = 3 -> min(4, 3) = 3 */
    df_adv_batch_counts skew = c;
    skew.n_flat_groups = 3;
    part[0].batch_counts = &skew;
    float mine[4], mret[4];
    assert_int_equal(df_adv_cpgd(&part[0], mine, mret), 0);
    assert_true(mine[0] == 1.5f); /* 3 * 0.5 */
}

/* The paper's alpha = B / (B - M), M = samples in flat groups (algo.h "gpg_paper"). */
static void test_gpg_paper(void **state)
{
    (void)state;
    /*
     * Groups {1, 0} (samples 0, 1) and {1, 1} (samples 2, 3, flat).
     * B = 4, M = 2 (the flat group) -> alpha = 4 / 2 = 2.
     *   group 0: mean 0.5 -> 2 * 0.5 = 1, 2 * -0.5 = -1; group 1: 0.
     * (verl counts the non-zero scores instead: alpha = 4 / 3, test_gpg.)
     */
    const int64_t off[] = {0, 2, 3, 4, 5};
    const float r[] = {0, 1, 0, 1, 1};
    const int64_t g[] = {0, 0, 1, 1};
    df_adv_input in = {.n = 4, .offsets = off, .token_level_rewards = r, .group = g};
    float adv[5], ret[5];
    assert_int_equal(df_adv_gpg_paper(&in, adv, ret), 0);
    const double want[] = {1, 1, -1, 0, 0};
    assert_all_near(adv, want, 5, 0); /* alpha 2 and the means exact */
    assert_same(ret, adv, 5);

    /*
     * Shared case: A = {1, 0, 2} mean 1; B = {4} alone (mean 0, not flat);
     * C = {0, 3} mean 1.5. No flat group: M = 0, alpha = 1.
     *   A: 0, -1, 1; B: 4; C: -1.5 (no tokens), 1.5
     */
    df_adv_input s = {.n = 6, .offsets = k_off, .token_level_rewards = k_rew, .group = k_grp};
    float a8[8], r8[8];
    assert_int_equal(df_adv_gpg_paper(&s, a8, r8), 0);
    const double want8[] = {0, 0, -1, 1, 1, 1, 4, 1.5};
    assert_all_near(a8, want8, 8, 0);

    /*
     * Flat group next to a single sample: {1, 1} flat, {0.5} alone, {0, 2}:
     * B = 5, M = 2, alpha = 5 / 3: 0, 0 | 5/3 * 0.5 = 0.8333333 | -5/3, 5/3.
     */
    const int64_t off3[] = {0, 1, 2, 3, 4, 5};
    const float r3[] = {1, 1, 0.5f, 0, 2};
    const int64_t g3[] = {0, 0, 1, 2, 2};
    df_adv_input t3 = {.n = 5, .offsets = off3, .token_level_rewards = r3, .group = g3};
    assert_int_equal(df_adv_gpg_paper(&t3, adv, ret), 0);
    const double want3[] = {0, 0, 0.83333333, -1.66666667, 1.66666667};
    assert_all_hand(adv, want3, 5, 5e-9); /* alpha = 5 / 3 in double */

    /* Every group flat: B = M, alpha = 1 and every advantage 0 (no division by zero). */
    const float r4[] = {1, 1, 0, 0, 0};
    const int64_t g4[] = {0, 0, 1, 1, 1};
    df_adv_input t4 = {.n = 5, .offsets = off3, .token_level_rewards = r4, .group = g4};
    assert_int_equal(df_adv_gpg_paper(&t4, adv, ret), 0);
    for (int t = 0; t < 5; t++)
        assert_near(adv[t], 0, 0);
}

/* ====================================================================== cpgd */

static void test_cpgd_weights(void **state)
{
    (void)state;
    /*
     * Groups: {1, 0, 0} (samples 0-2), {1, 1} (samples 3-4, flat), {2} (sample 5 alone).
     * Group 0: mean 1/3, squared deviations (2/3)^2 + 2 (1/3)^2 = 2/3,
     *   unbiased var 1/3, std 0.57735027.
     */
    const int64_t off[] = {0, 1, 2, 3, 4, 5, 6};
    const float r[] = {1, 0, 0, 1, 1, 2};
    const int64_t g[] = {0, 0, 0, 1, 1, 2};
    df_adv_input in = {.n = 6, .offsets = off, .token_level_rewards = r, .group = g, .epsilon = 1e-6f};
    float adv[6], ret[6];

    /* STD_weight (default, NULL): (2/3) / (0.57735027 + 1e-6) = 1.15469854,
     * (-1/3) / 0.57735127 = -0.57734927; flat group 0; alone: 2 / (1 + 1e-6) = 1.999998000002
     * (exact scores; 1e-6f's representation moves these by < 1e-6 DF_U32) */
    assert_int_equal(df_adv_cpgd(&in, adv, ret), 0);
    const double want_std[] = {1.15469854, -0.57734927, -0.57734927, 0, 0, 1.999998000002};
    assert_all_hand(adv, want_std, 6, 5e-9);
    assert_same(ret, adv, 6);
    in.cpgd_weight_factor = "STD_weight";
    assert_int_equal(df_adv_cpgd(&in, adv, ret), 0);
    assert_all_hand(adv, want_std, 6, 5e-9);

    /* clip_filter_like_weight: P = 3 groups, 1 flat -> w = 3 / 2 = 1.5 (< clip 3):
     *   1.5 * 2/3 = 1, 1.5 * -1/3 = -0.5 (x2); flat 0; alone 1.5 * 2 = 3.
     * (siiRL: 6 samples / 2 groups with non-zero std = 3 -> 2, -1, -1, 0, 0, 6.) */
    in.cpgd_weight_factor = "clip_filter_like_weight";
    assert_int_equal(df_adv_cpgd(&in, adv, ret), 0);
    const double want_cf[] = {1, -0.5, -0.5, 0, 0, 3};
    assert_all_hand(adv, want_cf, 6, 0); /* 2/3 and -1/3 are rounded in double */
    /* a lower clip caps w: 1.2 * 2/3 = 0.8, 1.2 * -1/3 = -0.4, 1.2 * 2 = 2.4; w is 1.2f, whose
       representation error moves each value by DF_U32 |value| (cond) */
    in.cpgd_weight_clip = 1.2f;
    assert_int_equal(df_adv_cpgd(&in, adv, ret), 0);
    const double want_cap[] = {0.8, -0.4, -0.4, 0, 0, 2.4};
    for (int t = 0; t < 6; t++) {
        double f = fabs(want_cap[t]);
        assert_near(adv[t], want_cap[t], df_tol_hand(0, f, f, f));
    }
    in.cpgd_weight_clip = 0;

    /* naive: centred scores 2/3, -1/3, -1/3, 0, 0, 2 */
    in.cpgd_weight_factor = "naive";
    assert_int_equal(df_adv_cpgd(&in, adv, ret), 0);
    const double want_naive[] = {0.66666667, -0.33333333, -0.33333333, 0, 0, 2};
    assert_all_hand(adv, want_naive, 6, 5e-9);

    in.cpgd_weight_factor = "bogus";
    assert_error_mentions(df_adv_cpgd(&in, adv, ret), DF_EINVAL, "'bogus'");
    in.cpgd_weight_factor = NULL;
    in.cpgd_weight_clip = -1;
    assert_int_equal(df_adv_cpgd(&in, adv, ret), DF_EINVAL);
    in.cpgd_weight_clip = 0;
    in.epsilon = -1;
    assert_int_equal(df_adv_cpgd(&in, adv, ret), DF_EINVAL);
}

static void test_cpgd_clip_default(void **state)
{
    (void)state;
    /*
     * Four groups, three flat: w = 4 / (4 - 3) = 4, capped at the default 3.
     * Group {0, 1}: mean 0.5 -> 3 * -0.5 = -1.5, 3 * 0.5 = 1.5; the flat groups 0.
     */
    const int64_t off[] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    const float r[] = {0, 1, 1, 1, 0, 0, 2, 2};
    const int64_t g[] = {0, 0, 1, 1, 2, 2, 3, 3};
    df_adv_input in = {.n = 8,
                       .offsets = off,
                       .token_level_rewards = r,
                       .group = g,
                       .cpgd_weight_factor = "clip_filter_like_weight"};
    float adv[8], ret[8];
    assert_int_equal(df_adv_cpgd(&in, adv, ret), 0);
    const double want[] = {-1.5, 1.5, 0, 0, 0, 0, 0, 0};
    assert_all_near(adv, want, 8, 0); /* w = 3, means of 0 and 1: exact */
}

/* ====================================================================== shared properties */

static const char *const k_names[] = {
    "gae", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "gpg", "gpg_paper", "cpgd",
    "grpo", "grpo_vectorized", "rloo_vectorized", "grpo_passk", "opo", "optimal_token_baseline",
    "tir_optimal_token_baseline"};
enum { N_NAMES = sizeof k_names / sizeof *k_names };

/* Inputs every estimator accepts (values, baselines, gamma / lam, the actor's old log-probs and
   sums of squared probabilities set; each estimator reads what it needs). */
static df_adv_input full_input(int64_t n, const int64_t *off, const float *r, const float *v,
                               const int64_t *g, const float *base, const float *lp, const float *sq)
{
    return (df_adv_input){.n = n,
                          .offsets = off,
                          .token_level_rewards = r,
                          .values = v,
                          .group = g,
                          .gamma = 0.9f,
                          .lam = 0.8f,
                          .norm_adv_by_std_in_grpo = true,
                          .epsilon = 1e-6f,
                          .reward_baselines = base,
                          .old_log_probs = lp,
                          .sum_pi_squared = sq};
}

static void test_zero_length_and_empty(void **state)
{
    (void)state;
    /* Responses with no tokens: nothing to write, no error, outputs may be NULL. */
    const int64_t off[] = {0, 0, 0};
    const int64_t g[] = {0, 0};
    const float base[] = {1, 2};
    df_adv_input in = full_input(2, off, NULL, NULL, g, base, NULL, NULL);
    const int64_t off0[] = {0};
    df_adv_input none = full_input(0, off0, NULL, NULL, NULL, NULL, NULL, NULL);
    for (int k = 0; k < N_NAMES; k++) {
        df_adv_estimator_fn fn;
        assert_int_equal(df_adv_estimator_lookup(k_names[k], &fn), 0);
        if (fn(&in, NULL, NULL) != 0)
            fail_msg("%s on empty responses: %s", k_names[k], df_last_error());
        if (fn(&none, NULL, NULL) != 0)
            fail_msg("%s on no samples: %s", k_names[k], df_last_error());
    }
}

static void test_order_invariance(void **state)
{
    (void)state;
    /*
     * Eight samples in three groups, lengths 3, 0, 2, 1, 4, 2, 1, 3. Reversing
     * the samples and relabelling the groups must move each sample's
     * advantages with it (whitening statistics do not depend on order).
     */
    enum { N = 8, T = 16 };
    const int64_t len[N] = {3, 0, 2, 1, 4, 2, 1, 3};
    const int64_t grp[N] = {0, 1, 2, 0, 1, 2, 0, 1};
    const float base[N] = {0.5f, 1, -1, 0, 2, 0.25f, 1, 0};
    int64_t off[N + 1] = {0}, poff[N + 1] = {0}, pgrp[N];
    float r[T], v[T], pr[T], pv[T], pbase[N], lp[T], sq[T], plp[T], psq[T];
    for (int i = 0; i < N; i++)
        off[i + 1] = off[i] + len[i];
    for (int t = 0; t < T; t++) {
        r[t] = (float)((t * 7) % 5) * 0.5f - 1; /* -1 .. 1 */
        v[t] = (float)((t * 3) % 4) * 0.25f;
        lp[t] = logf(t % 3 ? 0.5f : 0.25f); /* with sq 0.5: w = 0.5 or 1 (the OTB estimators) */
        sq[t] = 0.5f;
    }
    /* permuted sample j = original sample N - 1 - j; group ids relabelled g -> (g + 2) % 3 */
    for (int j = 0; j < N; j++) {
        int i = N - 1 - j;
        poff[j + 1] = poff[j] + len[i];
        pgrp[j] = (grp[i] + 2) % 3;
        pbase[j] = base[i];
        memcpy(pr + poff[j], r + off[i], (size_t)len[i] * sizeof *r);
        memcpy(pv + poff[j], v + off[i], (size_t)len[i] * sizeof *v);
        memcpy(plp + poff[j], lp + off[i], (size_t)len[i] * sizeof *lp);
        memcpy(psq + poff[j], sq + off[i], (size_t)len[i] * sizeof *sq);
    }
    df_adv_input a = full_input(N, off, r, v, grp, base, lp, sq);
    df_adv_input b = full_input(N, poff, pr, pv, pgrp, pbase, plp, psq);
    for (int k = 0; k < N_NAMES; k++) {
        for (int mode = 0; mode < 3; mode++) {
            if (mode > 0 && strcmp(k_names[k], "cpgd"))
                break;
            const char *modes[] = {"STD_weight", "clip_filter_like_weight", "naive"};
            a.cpgd_weight_factor = b.cpgd_weight_factor = modes[mode];
            df_adv_estimator_fn fn;
            assert_int_equal(df_adv_estimator_lookup(k_names[k], &fn), 0);
            float adv[T], ret[T], padv[T], pret[T];
            assert_int_equal(fn(&a, adv, ret), 0);
            assert_int_equal(fn(&b, padv, pret), 0);
            /* Both runs round to float32 (DF_U32 |x| each) a double computation that differs
               only in its summation order, each within gamma_{8T} of the exact value times the
               conditioning of (x - mean) / std: (max |x| + |mean|) / std <= 2.5 for these
               returns and group scores (their spread is of the order of their size), taken as 4 */
#define ORDER_TOL(x, y)                                                                            \
    (DF_U32 * (fabs(x) + fabs(y)) + 2 * df_tol_gamma(8 * T, DF_U64) * 5 * (1 + fmax(fabs(x), fabs(y))))
            double energy = 0;
            for (int j = 0; j < N; j++) {
                int i = N - 1 - j;
                for (int64_t u = 0; u < len[i]; u++) {
                    float a1 = adv[off[i] + u], a2 = padv[poff[j] + u];
                    float r1 = ret[off[i] + u], r2 = pret[poff[j] + u];
                    if (fabs(a1 - a2) > ORDER_TOL(a1, a2) || fabs(r1 - r2) > ORDER_TOL(r1, r2))
                        fail_msg("%s (%s): sample %d token %lld differs: %g vs %g", k_names[k], modes[mode],
                                 i, (long long)u, (double)adv[off[i] + u], (double)padv[poff[j] + u]);
                    energy += fabs(adv[off[i] + u]);
                }
            }
            if (!(energy > 0.1)) /* the case must not be trivially all-zero */
                fail_msg("%s: advantages are all ~0", k_names[k]);
#undef ORDER_TOL
        }
    }
}

static void test_bad_input(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 3};
    const float r[] = {1, 0, 1}, v[] = {0, 0, 0}, lp[] = {-1, -1, -1}, sq[] = {0.5f, 0.5f, 0.5f};
    const int64_t g_two[] = {0, 1}, g_pair[] = {0, 0};
    const float base[] = {0, 0};
    float adv[3], ret[3];
    for (int k = 0; k < N_NAMES; k++) {
        df_adv_estimator_fn fn;
        assert_int_equal(df_adv_estimator_lookup(k_names[k], &fn), 0);
        const int64_t *g = strcmp(k_names[k], "grpo_passk") ? g_two : g_pair; /* Pass@k compares two */
        df_adv_input in = full_input(2, off, r, v, g, base, lp, sq);
        assert_int_equal(fn(&in, adv, ret), 0);

        assert_int_equal(fn(NULL, adv, ret), DF_EINVAL);
        const int64_t bad_off[] = {0, 3, 2};
        in.offsets = bad_off;
        assert_error_mentions(fn(&in, adv, ret), DF_EINVAL, "decrease at sample 1");
        const int64_t bad_off0[] = {1, 2, 3};
        in.offsets = bad_off0;
        assert_error_mentions(fn(&in, adv, ret), DF_EINVAL, "offsets[0]");
        in.offsets = off;
        in.n = -1;
        assert_int_equal(fn(&in, adv, ret), DF_EINVAL);
        in.n = 2;
        assert_int_equal(fn(&in, NULL, ret), DF_EINVAL); /* tokens but no output */
        in.token_level_rewards = NULL;
        assert_int_equal(fn(&in, adv, ret), DF_EINVAL);
        in.token_level_rewards = r;

        bool grouped = strcmp(k_names[k], "gae") && strcmp(k_names[k], "reinforce_plus_plus") &&
                       strcmp(k_names[k], "remax");
        const int64_t bad_g[] = {0, 2};
        in.group = bad_g;
        if (grouped)
            assert_error_mentions(fn(&in, adv, ret), DF_EINVAL, "group id 2 of sample 1");
        else
            assert_int_equal(fn(&in, adv, ret), 0); /* group ids unused */
        in.group = NULL;
        if (grouped)
            assert_int_equal(fn(&in, adv, ret), DF_EINVAL);
        in.group = g;

        const float nan_r[] = {1, NAN, 1};
        in.token_level_rewards = nan_r;
        assert_error_mentions(fn(&in, adv, ret), DF_EINVAL, "reward of sample 0, token 1");
        in.token_level_rewards = r;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_names),
        cmocka_unit_test(test_whiten),
        cmocka_unit_test(test_gae_two_samples),
        cmocka_unit_test(test_gae_discounted_with_empty),
        cmocka_unit_test(test_gae_is_reward_to_go),
        cmocka_unit_test(test_gae_one_token_and_errors),
        cmocka_unit_test(test_reinforce_plus_plus),
        cmocka_unit_test(test_reinforce_plus_plus_baseline),
        cmocka_unit_test(test_remax),
        cmocka_unit_test(test_rloo),
        cmocka_unit_test(test_rloo_vectorized),
        cmocka_unit_test(test_grpo_vectorized),
        cmocka_unit_test(test_grpo_passk),
        cmocka_unit_test(test_opo),
        cmocka_unit_test(test_otb_group),
        cmocka_unit_test(test_otb_multi_turn),
        cmocka_unit_test(test_otb_errors),
        cmocka_unit_test(test_gpg),
        cmocka_unit_test(test_gpg_paper),
        cmocka_unit_test(test_batch_counts),
        cmocka_unit_test(test_cpgd_weights),
        cmocka_unit_test(test_cpgd_clip_default),
        cmocka_unit_test(test_zero_length_and_empty),
        cmocka_unit_test(test_order_invariance),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
