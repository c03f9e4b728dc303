/* Unit tests for include/distflow/algo.h: hand-computed cases, finite-difference
 * gradient checks, registries and malformed input. */
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

/* ====================================================================== grouping */

static void test_group_ids(void **state)
{
    (void)state;
    const char *uids[] = {"a", "b", "a", "c", "b", ""};
    int64_t g[6];
    assert_int_equal(df_group_ids(uids, 6, g), 0);
    int64_t want[] = {0, 1, 0, 2, 1, 3}; /* first appearance order; "" is a uid too */
    for (int i = 0; i < 6; i++)
        assert_int_equal(g[i], want[i]);
    assert_int_equal(df_group_ids(NULL, 0, NULL), 0);

    const char *bad[] = {"a", NULL};
    assert_error_mentions(df_group_ids(bad, 2, g), DF_EINVAL, "sample 1");
    assert_int_equal(df_group_ids(uids, -1, g), DF_EINVAL);
}

static void test_group_ids_many(void **state)
{
    (void)state;
    /* 4000 samples, uid "u<i/4>" in a shuffled-looking order: group = first-seen rank. */
    enum { N = 4000 };
    char (*buf)[16] = malloc(N * sizeof *buf);
    const char **uids = malloc(N * sizeof *uids);
    int64_t *g = malloc(N * sizeof *g);
    for (int i = 0; i < N; i++) {
        snprintf(buf[i], sizeof buf[i], "u%d", i / 4);
        uids[i] = buf[i];
    }
    assert_int_equal(df_group_ids(uids, N, g), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(g[i], i / 4);
    free(buf), free(uids), free(g);
}

/* ====================================================================== grpo */

/*
 * Six samples (token counts 2, 1, 3, 2, 0, 1), groups A = {0, 1, 2}, B = {3},
 * C = {4, 5}:
 *   scores: s0 = 0 + 1 = 1, s1 = 0, s2 = 0 + 0 + 2 = 2, s3 = 0 + 0.5 = 0.5,
 *           s4 = 0 (empty response), s5 = 3
 *   A: mean 1, unbiased var ((1-1)^2 + (0-1)^2 + (2-1)^2) / 2 = 1, std 1
 *      -> adv (s - 1) / (1 + 1e-6): 0, -0.999999000001, 0.999999000001
 *   B: one sample -> mean 0, std 1 -> 0.5 / (1 + 1e-6) = 0.4999995000005
 *   C: mean 1.5, var (1.5^2 + 1.5^2) / 1 = 4.5, std 2.12132034
 *      -> s5: 1.5 / (2.12132034 + 1e-6) = 0.707106448 (s4 has no tokens)
 * Dr.GRPO (no std): 0, -1, 1, 0.5, 1.5.
 * The scores, means and stds are exact in double but for sqrt(4.5); 1e-6f's own
 * representation moves the values by < 1e-6 DF_U32: the bound is the hand value's
 * last digit and the float32 output (df_tol_hand); Dr.GRPO's values are exact.
 */
static const int64_t k_off[] = {0, 2, 3, 6, 8, 8, 9};
static const float k_rew[] = {0, 1, 0, 0, 0, 2, 0, 0.5f, 3};
static const int64_t k_grp[] = {0, 0, 0, 1, 2, 2};

static void test_grpo_two_groups(void **state)
{
    (void)state;
    df_adv_estimator_fn fn;
    assert_int_equal(df_adv_estimator_lookup("grpo", &fn), 0);
    df_adv_input in = {.n = 6, .offsets = k_off, .token_level_rewards = k_rew, .group = k_grp,
                       .norm_adv_by_std_in_grpo = true, .epsilon = 1e-6f};
    float adv[9], ret[9];
    assert_int_equal(fn(&in, adv, ret), 0);
    const double want[9] = {0,              0,         -0.999999000001, 0.999999000001, 0.999999000001,
                            0.999999000001, 0.4999995000005, 0.4999995000005, 0.707106448};
    const double lit[9] = {0, 0, 5e-13, 5e-13, 5e-13, 5e-13, 5e-14, 5e-14, 5e-10};
    for (int t = 0; t < 9; t++) {
        assert_near(adv[t], want[t], df_tol_hand(lit[t], fabs(want[t]), 0, fabs(want[t])));
        assert_near(ret[t], adv[t], 0); /* returns = advantages */
    }

    in.norm_adv_by_std_in_grpo = false; /* Dr.GRPO */
    assert_int_equal(fn(&in, adv, ret), 0);
    const double want_dr[9] = {0, 0, -1, 1, 1, 1, 0.5, 0.5, 1.5};
    for (int t = 0; t < 9; t++)
        assert_near(adv[t], want_dr[t], 0); /* sums and halves of small integers: exact */
}

static void test_grpo_equal_scores_and_empty(void **state)
{
    (void)state;
    /* Three samples with score 2 in one group: std 0 -> (2 - 2) / (0 + eps) = 0. */
    const int64_t off[] = {0, 1, 3, 4};
    const float rew[] = {2, 1, 1, 2};
    const int64_t grp[] = {0, 0, 0};
    float adv[4] = {9, 9, 9, 9}, ret[4];
    df_adv_input in = {.n = 3, .offsets = off, .token_level_rewards = rew, .group = grp,
                       .norm_adv_by_std_in_grpo = true, .epsilon = 1e-6f};
    assert_int_equal(df_adv_grpo(&in, adv, ret), 0);
    for (int t = 0; t < 4; t++)
        assert_near(adv[t], 0.0, 0);

    /* All responses empty: nothing to write, no error. */
    const int64_t off0[] = {0, 0, 0};
    df_adv_input e = {.n = 2, .offsets = off0, .group = grp, .epsilon = 1e-6f};
    assert_int_equal(df_adv_grpo(&e, NULL, NULL), 0);
    df_adv_input none = {.n = 0, .offsets = off0};
    assert_int_equal(df_adv_grpo(&none, NULL, NULL), 0);
}

static void test_grpo_bad_input(void **state)
{
    (void)state;
    float adv[9], ret[9];
    const int64_t bad_grp[] = {0, 0, 0, 1, 2, 6};
    df_adv_input in = {.n = 6, .offsets = k_off, .token_level_rewards = k_rew,
                       .group = bad_grp, .epsilon = 1e-6f};
    assert_error_mentions(df_adv_grpo(&in, adv, ret), DF_EINVAL, "sample 5");
    const int64_t bad_off[] = {0, 2, 1, 6, 8, 8, 9};
    in.group = k_grp;
    in.offsets = bad_off;
    assert_error_mentions(df_adv_grpo(&in, adv, ret), DF_EINVAL, "decrease at sample 1");
    const int64_t bad_off0[] = {1, 2, 3, 6, 8, 8, 9};
    in.offsets = bad_off0;
    assert_error_mentions(df_adv_grpo(&in, adv, ret), DF_EINVAL, "offsets[0]");
    in.offsets = k_off;
    in.epsilon = -1;
    assert_int_equal(df_adv_grpo(&in, adv, ret), DF_EINVAL);
}

static int fake_estimator(const df_adv_input *in, float *adv, float *ret)
{
    for (int64_t t = 0; t < in->offsets[in->n]; t++)
        adv[t] = ret[t] = 7;
    return 0;
}

static void test_adv_registry(void **state)
{
    (void)state;
    df_adv_estimator_fn fn = NULL;
    assert_error_mentions(df_adv_estimator_lookup("gae_typo", &fn), DF_EINVAL, "'gae_typo'");
    assert_non_null(strstr(df_last_error(), "grpo")); /* known names listed */
    assert_null(fn);
    assert_int_equal(df_adv_estimator_lookup(NULL, &fn), DF_EINVAL);
    assert_int_equal(df_adv_estimator_register("my_est", fake_estimator), 0);
    assert_int_equal(df_adv_estimator_lookup("my_est", &fn), 0);
    float a[1], r[1];
    const int64_t off[] = {0, 1};
    const float rew[] = {1};
    const int64_t g[] = {0};
    df_adv_input in = {.n = 1, .offsets = off, .token_level_rewards = rew, .group = g};
    assert_int_equal(fn(&in, a, r), 0);
    assert_near(a[0], 7, 0);
    assert_int_equal(df_adv_estimator_register("", fake_estimator), DF_EINVAL);
}

/* ====================================================================== loss aggregation */

static void test_agg_weights(void **state)
{
    (void)state;
    /* Micro-batch of 3 samples (lengths 2, 0, 3) out of a mini-batch of 10 tokens in 4 responses
       that have tokens. */
    const int64_t off[] = {0, 2, 2, 5};
    float w[5];
    /* a weight is one double division rounded to float32: exact for powers of 2, else
       within the float32 rounding of 1/10 and 1/12 (df_tol_hand with out = |w|) */
    assert_int_equal(df_loss_agg_weights("token-mean", 3, off, 10, 4, w), 0);
    for (int t = 0; t < 5; t++)
        assert_near(w[t], 0.1, df_tol_hand(0, 0.1, 0, 0.1)); /* 1 / 10 */
    assert_int_equal(df_loss_agg_weights("seq-mean-token-sum", 3, off, 10, 4, w), 0);
    for (int t = 0; t < 5; t++)
        assert_near(w[t], 0.25, 0); /* 1 / 4 */
    assert_int_equal(df_loss_agg_weights("seq-mean-token-mean", 3, off, 10, 4, w), 0);
    assert_near(w[0], 0.125, 0); /* 1 / (4 * 2) */
    assert_near(w[1], 0.125, 0);
    for (int t = 2; t < 5; t++)
        assert_near(w[t], 1.0 / 12, df_tol_hand(0, 1.0 / 12, 0, 1.0 / 12)); /* 1 / (4 * 3) */
    /* verl: the token sum over L = 8, no mean over the responses (the totals are not read) */
    assert_int_equal(df_loss_agg_weights_ex("seq-mean-token-sum-norm", 3, off, 10, 4, 8, w), 0);
    for (int t = 0; t < 5; t++)
        assert_near(w[t], 0.125, 0); /* 1 / 8 */
    assert_int_equal(df_loss_agg_weights_ex("seq-mean-token-sum-norm", 3, off, 0, 0, 8, w), 0);
    assert_near(w[4], 0.125, 0);
    /* distflow's earlier mode, kept under its own name: also averaged over responses */
    assert_int_equal(df_loss_agg_weights_ex("seq-mean-token-sum-norm-seqavg", 3, off, 10, 4, 8, w), 0);
    for (int t = 0; t < 5; t++)
        assert_near(w[t], 1.0 / 32, 0); /* 1 / (4 * 8) */

    /* Errors: unknown mode, missing norm length, bad totals. */
    assert_error_mentions(df_loss_agg_weights("token_mean", 3, off, 10, 4, w), DF_EINVAL,
                          "'token_mean'");
    assert_error_mentions(df_loss_agg_weights("seq-mean-token-sum-norm", 3, off, 10, 4, w),
                          DF_EINVAL, "length");
    assert_error_mentions(df_loss_agg_weights("seq-mean-token-sum-norm-seqavg", 3, off, 10, 4, w),
                          DF_EINVAL, "length");
    assert_int_equal(df_loss_agg_weights_ex("seq-mean-token-sum-norm-seqavg", 3, off, 10, 0, 8, w), DF_EINVAL);
    assert_int_equal(df_loss_agg_weights("token-mean", 3, off, 0, 4, w), DF_EINVAL);
    assert_error_mentions(df_loss_agg_weights("token-mean", 3, off, 4, 4, w), DF_EINVAL,
                          "exceed");
    /* two non-empty responses here (the empty one does not count): a total of 1 is too few, 2 is not */
    assert_error_mentions(df_loss_agg_weights("seq-mean-token-sum", 3, off, 10, 1, w), DF_EINVAL, "exceed");
    assert_int_equal(df_loss_agg_weights("seq-mean-token-sum", 3, off, 10, 2, w), 0);
    assert_near(w[4], 0.5, 0);
    /* Empty micro-batch is fine. */
    const int64_t off0[] = {0};
    assert_int_equal(df_loss_agg_weights("token-mean", 0, off0, 10, 4, NULL), 0);
}

/*
 * A mini-batch with a fully masked (zero-length) response, every mode by hand (verl agg_loss at
 * b178a3cd: seq-mean modes leave such rows out of the sequence count; seq-mean-token-sum-norm is the
 * token sum over L with no mean over responses). Lengths 3, 0, 2, 1; losses 1 2 3 | - | 4 5 | 6;
 * S = 3 responses with tokens (4 rows), L = 8:
 *   token-mean                      21 / 6                      = 3.5
 *   seq-mean-token-sum              (6 + 9 + 6) / 3             = 7         (counting the row: 5.25)
 *   seq-mean-token-mean             (2 + 4.5 + 6) / 3           = 4.1666667 (counting the row: 3.125)
 *   seq-mean-token-sum-norm         21 / 8                      = 2.625     (the earlier mode: 0.65625)
 *   seq-mean-token-sum-norm-seqavg  21 / (3 * 8)                = 0.875
 * Bounds: the weights are float32 roundings of 1/6, 1/3, 1/6, 1/24 (DF_U32 relative each) times
 * exact losses, summed in double: cond = the result (every term positive); lit for 4.1666667.
 */
static void test_agg_masked_row(void **state)
{
    (void)state;
    const int64_t off[] = {0, 3, 3, 5, 6};
    const float l[6] = {1, 2, 3, 4, 5, 6};
    float w[6];
    const int64_t S = df_loss_agg_count_seqs(4, off);
    assert_int_equal(S, 3);
    assert_int_equal(df_loss_agg_count_seqs(0, off), 0);
    assert_int_equal(df_loss_agg_count_seqs(2, NULL), 0);
    static const struct {
        const char *mode;
        double want, lit;
    } k[] = {{"token-mean", 3.5, 0},
             {"seq-mean-token-sum", 7, 0},
             {"seq-mean-token-mean", 4.1666667, 5e-8},
             {"seq-mean-token-sum-norm", 2.625, 0},
             {"seq-mean-token-sum-norm-seqavg", 0.875, 0}};
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        assert_int_equal(df_loss_agg_weights_ex(k[i].mode, 4, off, 6, S, 8, w), 0);
        double got = df_loss_agg_apply(6, l, w);
        double tol = df_tol_hand(k[i].lit, 0, k[i].want, k[i].want);
        if (!(fabs(got - k[i].want) <= tol))
            fail_msg("%s: %.9g, expected %.9g (tol %.3g)", k[i].mode, got, k[i].want, tol);
    }
    /* split into micro-batches {0, 1} and {2, 3}: each counts only its non-empty rows, the sum is S */
    const int64_t m1[] = {0, 3, 3}, m2[] = {0, 2, 3};
    assert_int_equal(df_loss_agg_count_seqs(2, m1) + df_loss_agg_count_seqs(2, m2), S);
    float w1[3], w2[3];
    assert_int_equal(df_loss_agg_weights("seq-mean-token-mean", 2, m1, 6, S, w1), 0);
    assert_int_equal(df_loss_agg_weights("seq-mean-token-mean", 2, m2, 6, S, w2), 0);
    double split = df_loss_agg_apply(3, l, w1) + df_loss_agg_apply(3, l + 3, w2);
    assert_near(split, 4.1666667, df_tol_hand(5e-8, 0, 4.1666667, 4.1666667));
}

/* token-mean over a mini-batch split into micro-batches equals one full-batch mean. */
static void test_agg_micro_batch_invariance(void **state)
{
    (void)state;
    const int64_t off[] = {0, 3, 4, 8, 10}; /* 4 samples, 10 tokens */
    const float l[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    float w[10];
    assert_int_equal(df_loss_agg_weights("token-mean", 4, off, 10, 4, w), 0);
    /* The products and sums of float32 weights and small integers are exact in double: the
       only error is the float32 weights' (1/10, 1/12, 1/16...) representation, DF_U32 each:
       cond = sum |w_t l_t| = 5.5 */
    const double tol = df_tol_hand(0, 0, 5.5, 5.5);
    double full = df_loss_agg_apply(10, l, w); /* 55 / 10 */
    assert_near(full, 5.5, tol);
    /* micro-batches {0, 1} (4 tokens) and {2, 3} (6 tokens) */
    const int64_t m1[] = {0, 3, 4}, m2[] = {0, 4, 6};
    float w1[4], w2[6];
    assert_int_equal(df_loss_agg_weights("token-mean", 2, m1, 10, 4, w1), 0);
    assert_int_equal(df_loss_agg_weights("token-mean", 2, m2, 10, 4, w2), 0);
    assert_near(df_loss_agg_apply(4, l, w1) + df_loss_agg_apply(6, l + 4, w2), 5.5, tol);

    /* seq-mean-token-mean: (mean(1,2,3) + 4 + mean(5..8) + mean(9,10)) / 4
     *                    = (2 + 4 + 6.5 + 9.5) / 4 = 5.5 */
    assert_int_equal(df_loss_agg_weights("seq-mean-token-mean", 4, off, 10, 4, w), 0);
    assert_near(df_loss_agg_apply(10, l, w), 5.5, tol);
    /* entropy term uses the same weights: here token-mean of H = 0.5 everywhere -> 0.5 */
    const float h[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    assert_int_equal(df_loss_agg_weights("token-mean", 2, m1, 10, 4, w1), 0);
    assert_near(df_entropy_loss(4, h, w1), 0.2, df_tol_hand(0, 0, 0.2, 0.2)); /* 4 * 0.5 / 10 */
}

/* ====================================================================== vanilla PPO loss */

/*
 * Seven tokens in three samples, clip_ratio_low 0.2, clip_ratio_high 0.28, c = 3,
 * old_log_prob 0, weights {0.5, 0.5 | 1, 1, 1 | 0.25, 0.25}:
 *   t  A   log_prob    r       l1=-Ar  l2=-A clip(r,.8,1.28)  loss    branch        grad
 *   0  1   ln 1.1      1.1     -1.1    -1.1                   -1.1    unclipped     -1.1*0.5
 *   1  1   ln 1.5      1.5     -1.5    -1.28                  -1.28   clipped high  0
 *   2 -1   ln 0.5      0.5      0.5     0.8                    0.8    clipped low   0
 *   3 -1   ln 1.5      1.5      1.5     1.28                   1.5    unclipped     +1.5
 *   4 -1   ln 4        4        4       1.28    min(4, 3)      3      dual clip     0
 *   5  1   ln 0.5      0.5     -0.5    -0.8                   -0.5    unclipped     -0.5*0.25
 *   6  1   -25 -> -20  e^-20   -e^-20  -0.8                   -e^-20  log-ratio clamped: 0
 * loss = 0.5(-1.1) + 0.5(-1.28) + 0.8 + 1.5 + 3 + 0.25(-0.5) + 0.25(-2.06e-9) = 3.985
 * pg_clipfrac = 2/7 (t1, t2), pg_clipfrac_lower = 1/7 (t4),
 * ppo_kl = mean(-d) = (20 - ln(1.1 * 1.5 * 0.5 * 1.5 * 4 * 0.5)) / 7 = 2.72767994
 * (checked against PyTorch autograd of verl's formula).
 * Bounds (df_tol_hand): the inputs are logf of float32 numbers, off the exact logs by
 * DF_U32 (the rounding of 1.1f: d log x = dx / x) plus logf's ulp (2 DF_U32 |lp|); the
 * loss and the gradient move by |dl/dlp| = |w A r| on the unclipped tokens t0, t3, t5,
 * the clipped ones by |w| 0.28f's and 0.2f's representation; the hand loss drops t6's
 * 0.25 e^-20 = 5.2e-10; pg_clipfrac is one double division, as 2.0 / 7: exact.
 */
static void test_vanilla_branches(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 5, 7};
    const float lp[7] = {logf(1.1f), logf(1.5f), logf(0.5f), logf(1.5f), logf(4.f), logf(0.5f),
                         -25.f};
    const float old[7] = {0};
    const float A[7] = {1, 1, -1, -1, -1, 1, 1};
    const float w[7] = {0.5f, 0.5f, 1, 1, 1, 0.25f, 0.25f};
    float grad[7];
    df_policy_loss_fn fn;
    assert_int_equal(df_policy_loss_lookup("vanilla", &fn), 0);
    df_policy_loss_input in = {.n = 3, .offsets = off, .log_prob = lp, .old_log_prob = old,
                               .advantages = A, .weights = w, .clip_ratio_low = 0.2f,
                               .clip_ratio_high = 0.28f, .clip_ratio_c = 3.f};
    df_policy_loss_output out = {.grad = grad};
    assert_int_equal(fn(&in, &out), 0);
    /* input error of lp_t in DF_U32: 1 for the rounding of 1.1f, 2 |lp_t| for logf */
    double in_err[7], loss_cond = 0.5 * 0.28 + 1 * 0.2, kl_cond = 0, kl_mag = 0;
    for (int t = 0; t < 7; t++) {
        in_err[t] = (t == 0) + 2 * fabs(lp[t]);
        kl_cond += t < 6 ? in_err[t] / 7 : 0; /* t6 is clamped: no dependence */
        kl_mag += fmin(fabs(lp[t]), 20) / 7;
    }
    const double want[7] = {-0.55, 0, 0, 1.5, 0, -0.125, 0};
    for (int t = 0; t < 7; t++)
        loss_cond += fabs(want[t]) * in_err[t]; /* |dl/dlp_t| = |grad_t| */
    const double loss_tol = df_tol_hand(0.25 * exp(-20), 0, loss_cond, 6.615); /* sum |w l| */
    assert_near(out.loss, 3.985, loss_tol);
    for (int t = 0; t < 7; t++)
        assert_near(grad[t], want[t], df_tol_hand(0, fabs(want[t]), fabs(want[t]) * in_err[t], 1.5));
    assert_near(out.pg_clipfrac, 2.0 / 7, 0);
    assert_near(out.pg_clipfrac_lower, 1.0 / 7, 0);
    assert_near(out.ppo_kl, 2.72767994, df_tol_hand(5e-9, 0, kl_cond, kl_mag));

    /* Gradient optional; zero tokens give zeros. */
    out.grad = NULL;
    assert_int_equal(fn(&in, &out), 0);
    assert_near(out.loss, 3.985, loss_tol);
    const int64_t off0[] = {0, 0};
    df_policy_loss_input e = in;
    e.n = 1;
    e.offsets = off0;
    assert_int_equal(fn(&e, &out), 0);
    assert_near(out.loss, 0, 0);
    assert_near(out.pg_clipfrac, 0, 0);
    assert_near(out.ppo_kl, 0, 0);
}

/* Analytic gradient vs central differences of the aggregated loss, away from kinks. */
static void test_vanilla_finite_difference(void **state)
{
    (void)state;
    enum { T = 40 };
    float lp[T], old[T], A[T], w[T], grad[T];
    const int64_t off[] = {0, 7, 7, 19, 40};
    unsigned s = 12345;
    for (int t = 0; t < T; t++) {
        s = s * 1103515245u + 12345u;
        double u1 = (s >> 8) / 16777216.0;
        s = s * 1103515245u + 12345u;
        double u2 = (s >> 8) / 16777216.0;
        old[t] = (float)(-1.0 - u1);
        lp[t] = old[t] + (float)(1.6 * u2 - 0.8); /* log-ratio in [-0.8, 0.8] */
        A[t] = (float)((t % 3) - 1) * (float)(0.5 + u1);
        double r = exp((double)lp[t] - old[t]);
        if (fabs(r - 0.8) < 0.02 || fabs(r - 1.28) < 0.02 || fabs(r - 3.0) < 0.02)
            lp[t] = old[t]; /* keep finite differences off the clip kinks */
    }
    assert_int_equal(df_loss_agg_weights("token-mean", 4, off, T, 4, w), 0);
    df_policy_loss_input in = {.n = 4, .offsets = off, .log_prob = lp, .old_log_prob = old,
                               .advantages = A, .weights = w, .clip_ratio_low = 0.2f,
                               .clip_ratio_high = 0.28f, .clip_ratio_c = 3.f};
    df_policy_loss_output out = {.grad = grad};
    assert_int_equal(df_policy_loss_vanilla(&in, &out), 0);
    /* The loss is a double sum of T terms |w_t l_t| <= w_t |A_t| max(r_t, 3): each
       evaluation is within gamma_{8T} (a few operations per term, exp included) of it */
    double abs_loss = 0;
    for (int t = 0; t < T; t++)
        abs_loss += w[t] * fabs(A[t]) * fmax(exp(fabs((double)lp[t] - old[t])), 3.0);
    const double ferr = df_tol_gamma(8 * T, DF_U64) * abs_loss;
    int n_live = 0;
    for (int t = 0; t < T; t++) {
        const float keep = lp[t], a = keep + 1e-3f, b = keep - 1e-3f;
        df_policy_loss_output o = {0};
        lp[t] = a;
        assert_int_equal(df_policy_loss_vanilla(&in, &o), 0);
        double up = o.loss;
        lp[t] = b;
        assert_int_equal(df_policy_loss_vanilla(&in, &o), 0);
        double down = o.loss;
        lp[t] = keep;
        double fd = (up - down) / ((double)a - (double)b); /* exact float step */
        /* token t's term -w A e^d (unclipped) has |f''| = |f'''| = w |A| e^d: at most
           w |A| e^(|d| + h) on the step */
        double h = ((double)a - (double)b) / 2, mid = fabs(((double)a + (double)b) / 2 - keep);
        double m = w[t] * fabs(A[t]) * exp(fabs((double)keep - old[t]) + h);
        assert_near(grad[t], fd, df_tol_fd(h, m, mid, m, ferr, grad[t]));
        n_live += grad[t] != 0;
    }
    assert_true(n_live > 10); /* the check exercised the unclipped branch, too */
}

static void test_vanilla_bad_input(void **state)
{
    (void)state;
    const int64_t off[] = {0, 1};
    const float x[1] = {0};
    df_policy_loss_input in = {.n = 1, .offsets = off, .log_prob = x, .old_log_prob = x,
                               .advantages = x, .weights = x, .clip_ratio_low = 0.2f,
                               .clip_ratio_high = 0.2f, .clip_ratio_c = 1.f};
    df_policy_loss_output out = {0};
    assert_error_mentions(df_policy_loss_vanilla(&in, &out), DF_EINVAL, "clip_ratio_c");
    in.clip_ratio_c = 3;
    in.clip_ratio_low = -0.1f;
    assert_int_equal(df_policy_loss_vanilla(&in, &out), DF_EINVAL);
    in.clip_ratio_low = 0.2f;
    in.weights = NULL;
    assert_int_equal(df_policy_loss_vanilla(&in, &out), DF_EINVAL);
    df_policy_loss_fn fn = NULL;
    assert_error_mentions(df_policy_loss_lookup("gspo_typo", &fn), DF_EINVAL, "'gspo_typo'");
    assert_non_null(strstr(df_last_error(), "vanilla"));
}

/* ====================================================================== KL */

/*
 * log_prob -1, ref -1.5 -> x = 0.5:
 *   kl / k1: 0.5, d 1;  abs: 0.5, d 1;  mse / k2: 0.5 * 0.25 = 0.125, d 0.5
 *   low_var_kl / k3: y = -0.5, e^-0.5 + 0.5 - 1 = 0.10653066, d = 1 - e^-0.5 = 0.39346934
 * log_prob -2, ref -1.5 -> x = -0.5: abs 0.5, d -1; k3: y = 0.5, e^0.5 - 1.5 = 0.14872127,
 *   d = 1 - e^0.5 = -0.64872127
 */
static void test_kl_values(void **state)
{
    (void)state;
    const float lp[2] = {-1.0f, -2.0f}, ref[2] = {-1.5f, -1.5f};
    float kl[2], d[2];
    /* x is exact, so k1, abs and k2 are exact (lit 0, no rounding); k3's values are
       printed to 8 decimals and rounded to float32 once (df_tol_hand) */
    struct {
        const char *type;
        double kl0, d0, kl1, d1, lit;
    } cases[] = {
        {"kl", 0.5, 1, -0.5, 1, -1},
        {"k1", 0.5, 1, -0.5, 1, -1},
        {"abs", 0.5, 1, 0.5, -1, -1},
        {"mse", 0.125, 0.5, 0.125, -0.5, -1},
        {"k2", 0.125, 0.5, 0.125, -0.5, -1},
        {"low_var_kl", 0.10653066, 0.39346934, 0.14872127, -0.64872127, 5e-9},
        {"k3", 0.10653066, 0.39346934, 0.14872127, -0.64872127, 5e-9},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(df_kl_penalty(cases[i].type, 2, lp, ref, kl, d), 0);
        double lit = cases[i].lit;
#define KL_TOL(v) (lit < 0 ? 0 : df_tol_hand(lit, fabs(v), 0, fabs(v)))
        assert_near(kl[0], cases[i].kl0, KL_TOL(cases[i].kl0));
        assert_near(d[0], cases[i].d0, KL_TOL(cases[i].d0));
        assert_near(kl[1], cases[i].kl1, KL_TOL(cases[i].kl1));
        assert_near(d[1], cases[i].d1, KL_TOL(cases[i].d1));
#undef KL_TOL
    }
    /* abs at x = 0: value 0, gradient 0 (torch sign). */
    const float z = -1.0f;
    assert_int_equal(df_kl_penalty("abs", 1, &z, &z, kl, d), 0);
    assert_near(kl[0], 0, 0);
    assert_near(d[0], 0, 0);
    assert_error_mentions(df_kl_penalty("full", 2, lp, ref, kl, d), DF_EINVAL, "'full'");
    assert_int_equal(df_kl_penalty("kl", -1, lp, ref, kl, d), DF_EINVAL);
    assert_int_equal(df_kl_penalty("kl", 0, NULL, NULL, NULL, NULL), 0);
}

/*
 * k3 clamps: x = -5 -> y = 5: e^5 - 6 = 142.4 -> 10; x = 15 -> y = -15: e^-15 + 14 = 14.0000003
 * -> 10; x = -25 -> y clamped to 20 -> 10. Gradient 0 in all three.
 */
static void test_kl_k3_clamp(void **state)
{
    (void)state;
    const float lp[3] = {-6, 14, -26}, ref[3] = {-1, -1, -1};
    float kl[3], d[3];
    assert_int_equal(df_kl_penalty("low_var_kl", 3, lp, ref, kl, d), 0);
    for (int t = 0; t < 3; t++) {
        assert_near(kl[t], 10, 0);
        assert_near(d[t], 0, 0);
    }
}

static void test_kl_finite_difference(void **state)
{
    (void)state;
    const char *types[] = {"kl", "abs", "mse", "low_var_kl"};
    const float ref[6] = {-1.2f, -0.3f, -2.0f, -0.7f, -1.0f, -3.0f};
    float lp[6] = {-1.0f, -0.9f, -1.1f, -0.2f, -2.5f, -2.2f}; /* x in [-1.5, 0.9], no kinks */
    for (size_t k = 0; k < 4; k++) {
        float kl[6], d[6], up, down;
        assert_int_equal(df_kl_penalty(types[k], 6, lp, ref, kl, d), 0);
        for (int t = 0; t < 6; t++) {
            float a = lp[t] + 1e-3f, b = lp[t] - 1e-3f;
            assert_int_equal(df_kl_penalty(types[k], 1, &a, &ref[t], &up, NULL), 0);
            assert_int_equal(df_kl_penalty(types[k], 1, &b, &ref[t], &down, NULL), 0);
            double fd = ((double)up - (double)down) / ((double)a - (double)b);
            /* k1 and abs are linear here (|x| >= 0.2 > h), k2 = x^2 / 2 has f'' = 1, k3 =
               e^y - y - 1 (y = ref - lp) has |f''| = |f'''| = e^y; the values are float32, so
               each evaluation is off by its rounding (plus a few double operations) */
            double h = ((double)a - (double)b) / 2, mid = fabs(((double)a + (double)b) / 2 - lp[t]);
            double m2 = k == 2 ? 1 : k == 3 ? exp((double)ref[t] - lp[t] + h) : 0, m3 = k == 3 ? m2 : 0;
            double ferr = (DF_U32 + 8 * DF_U64) * fmax(fabs(up), fabs(down));
            assert_near(d[t], fd, df_tol_fd(h, m3, mid, m2, ferr, d[t]));
        }
    }
}

/*
 * KL loss, k2 with weights {0.5, 0.25}, coef 0.1, x = {0.5, -1}:
 *   kl = {0.125, 0.5}; loss = 0.5 * 0.125 + 0.25 * 0.5 = 0.1875
 *   grad += 0.1 * w * x = {0.1 * 0.5 * 0.5, 0.1 * 0.25 * -1} = {0.025, -0.025}, on top of {1, 2}.
 */
static void test_kl_loss(void **state)
{
    (void)state;
    const float lp[2] = {-1.0f, -2.5f}, ref[2] = {-1.5f, -1.5f}, w[2] = {0.5f, 0.25f};
    float grad[2] = {1, 2};
    double loss = -1;
    assert_int_equal(df_kl_loss("mse", 2, lp, ref, w, 0.1f, &loss, grad), 0);
    /* x, kl and w are exact: the loss is exact; a gradient is 0.1f's representation
       (cond 0.025) and two float32 roundings, of the term and of the sum (df_tol_hand) */
    assert_near(loss, 0.1875, 0);
    assert_near(grad[0], 1.025, df_tol_hand(0, 0.025 + 1.025, 0.025, 1.025));
    assert_near(grad[1], 1.975, df_tol_hand(0, 0.025 + 1.975, 0.025, 1.975));
    assert_int_equal(df_kl_loss("mse", 2, lp, ref, w, 0.1f, &loss, NULL), 0);
    assert_near(loss, 0.1875, 0);
    assert_error_mentions(df_kl_loss("k4", 2, lp, ref, w, 0.1f, &loss, grad), DF_EINVAL, "'k4'");
    assert_int_equal(df_kl_loss("mse", 2, lp, ref, NULL, 0.1f, &loss, grad), DF_EINVAL);
}

/*
 * In-reward KL, k1, beta 0.1; samples (old - ref): s0 {0.2, 0.4}, s1 empty, s2 {-0.3}:
 *   rewards = scores - 0.1 * kl: s0 {1 - 0.02, 0 - 0.04}, s2 {0.5 + 0.03}
 *   mean_kl = (mean(0.2, 0.4) + 0 + (-0.3)) / 3 = (0.3 + 0 - 0.3) / 3 = 0
 */
static void test_kl_in_reward(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 2, 3};
    const float scores[3] = {1, 0, 0.5f}, old[3] = {-0.8f, -0.6f, -1.3f},
                ref[3] = {-1.0f, -1.0f, -1.0f};
    float rew[3];
    double mkl = 9;
    assert_int_equal(df_kl_apply_in_reward("kl", 3, off, scores, old, ref, 0.1f, rew, &mkl), 0);
    /* df_tol_hand: the float32 old log-probs -0.8f, -0.6f, -1.3f and beta 0.1f are not exact:
       cond = beta |old| + beta |kl|; the rewards are float32, the mean KL a double whose
       dependence on old_t is 1 / (3 len) */
    assert_near(rew[0], 0.98, df_tol_hand(0, 0.98, 0.1 * 0.8 + 0.1 * 0.2, 1));
    assert_near(rew[1], -0.04, df_tol_hand(0, 0.04, 0.1 * 0.6 + 0.1 * 0.4, 0.04));
    assert_near(rew[2], 0.53, df_tol_hand(0, 0.53, 0.1 * 1.3 + 0.1 * 0.3, 0.53));
    assert_near(mkl, 0.0, df_tol_hand(0, 0, (0.8 / 2 + 0.6 / 2 + 1.3) / 3, 0.2));
    assert_int_equal(df_kl_apply_in_reward("nope", 3, off, scores, old, ref, 0.1f, rew, &mkl),
                     DF_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_ids),
        cmocka_unit_test(test_group_ids_many),
        cmocka_unit_test(test_grpo_two_groups),
        cmocka_unit_test(test_grpo_equal_scores_and_empty),
        cmocka_unit_test(test_grpo_bad_input),
        cmocka_unit_test(test_adv_registry),
        cmocka_unit_test(test_agg_weights),
        cmocka_unit_test(test_agg_masked_row),
        cmocka_unit_test(test_agg_micro_batch_invariance),
        cmocka_unit_test(test_vanilla_branches),
        cmocka_unit_test(test_vanilla_finite_difference),
        cmocka_unit_test(test_vanilla_bad_input),
        cmocka_unit_test(test_kl_values),
        cmocka_unit_test(test_kl_k3_clamp),
        cmocka_unit_test(test_kl_finite_difference),
        cmocka_unit_test(test_kl_loss),
        cmocka_unit_test(test_kl_in_reward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
