/* Unit tests for the losses block of include/distflow/algo.h around the policy
 * losses: KL coefficient controllers, truncated importance sampling weights and
 * the rollout-training mismatch metrics, and the losses inside the actor
 * (aggregation length, TIS, micro-batch invariance) and the worker's settings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "testtrain.h"
#include "tolerance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distflow/algo.h"
#include "distflow/metrics.h"
#include "distflow/rng.h"
#include "engine/actor.h"
#include "engine/critic.h"
#include "workers/worker_internal.h"

#define ACTOR_KEY "actor_rollout_ref.actor."

/* A decimal literal with 9 digits after the point is within 0.5e-9 of the number it stands for; the
   code computes in double with at most `ops` roundings of relative size DF_U64. */
static double lit9(double v, int ops)
{
    return 0.5e-9 + df_tol_gamma(ops, DF_U64) * fabs(v);
}
/* x against a 9-digit literal v of a double computation of <= 16 roundings */
#define assert_lit9(x, v) assert_near(x, v, lit9(v, 16))

/* ====================================================================== KL controllers */

static void test_kl_ctrl_fixed(void **state)
{
    (void)state;
    df_kl_ctrl *c;
    assert_int_equal(df_kl_ctrl_create("fixed", 0.05, 0, 0, &c), 0); /* target / horizon unused */
    assert_int_equal(df_kl_ctrl_update(c, 3.0, 64), 0);
    assert_int_equal(df_kl_ctrl_update(c, 0.0, 64), 0);
    assert_near(df_kl_ctrl_value(c), 0.05, 0); /* exact: the value given, never updated */
    df_kl_ctrl_free(c);
}

/*
 * adaptive, beta0 = 0.1, target 0.5, horizon 100:
 *   kl 1.0,  n 10: e = clamp(1.0/0.5 - 1 = 1, +-0.2) = 0.2   -> 0.1 (1 + 0.2 * 10/100) = 0.102
 *   kl 0.25, n 20: e = clamp(-0.5) = -0.2                    -> 0.102 (1 - 0.2 * 0.2) = 0.09792
 *   kl 0.55, n 50: e = 0.1                                   -> 0.09792 (1 + 0.1 * 0.5) = 0.102816
 */
static void test_kl_ctrl_adaptive(void **state)
{
    (void)state;
    df_kl_ctrl *c;
    assert_int_equal(df_kl_ctrl_create("adaptive", 0.1, 0.5, 100, &c), 0);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_kl_ctrl_step(c, 1.0, 10, m), 0);
    /* double arithmetic: per update the inexact constants (0.1, 0.2 and the literal) and 4 operations
       round; at kl 0.55, 1.1 - 1 amplifies the rounding of 0.55 / 0.5 by 11 (about 2 roundings more) */
    assert_near(df_kl_ctrl_value(c), 0.102, df_tol_gamma(7, DF_U64) * 0.102);
    /* the metrics carry the coefficient that was applied, i.e. before the update */
    assert_near(df_metrics_get(m, "actor/reward_kl_penalty", -1), 1.0, 0); /* exact: copies */
    assert_near(df_metrics_get(m, "actor/reward_kl_penalty_coeff", -1), 0.1, 0);
    assert_int_equal(df_kl_ctrl_update(c, 0.25, 20), 0);
    assert_near(df_kl_ctrl_value(c), 0.09792, df_tol_gamma(12, DF_U64) * 0.09792);
    assert_int_equal(df_kl_ctrl_update(c, 0.55, 50), 0);
    assert_near(df_kl_ctrl_value(c), 0.102816, df_tol_gamma(20, DF_U64) * 0.102816);
    assert_int_equal(df_kl_ctrl_update(c, 0.55, 0), 0); /* no samples, no change */
    assert_near(df_kl_ctrl_value(c), 0.102816, df_tol_gamma(20, DF_U64) * 0.102816);
    assert_int_equal(df_kl_ctrl_set_value(c, 0.3), 0); /* resume */
    assert_near(df_kl_ctrl_value(c), 0.3, 0);          /* exact: the value set */
    assert_error_mentions(df_kl_ctrl_update(c, NAN, 1), DF_EINVAL, "not finite");
    assert_error_mentions(df_kl_ctrl_update(c, 0.1, -1), DF_EINVAL, "negative");
    assert_error_mentions(df_kl_ctrl_set_value(c, -1), DF_EINVAL, ">= 0");
    assert_near(df_kl_ctrl_value(c), 0.3, 0); /* exact: refused calls change nothing */
    df_kl_ctrl_free(c);
    df_metrics_free(m);
}

static void test_kl_ctrl_bad(void **state)
{
    (void)state;
    df_kl_ctrl *c = NULL;
    assert_error_mentions(df_kl_ctrl_create("pid", 0.1, 0.1, 10, &c), DF_EINVAL, "fixed, adaptive");
    assert_error_mentions(df_kl_ctrl_create(NULL, 0.1, 0.1, 10, &c), DF_EINVAL, "(null)");
    assert_error_mentions(df_kl_ctrl_create("fixed", -0.1, 0.1, 10, &c), DF_EINVAL, "kl_coef");
    assert_error_mentions(df_kl_ctrl_create("adaptive", 0.1, 0, 10, &c), DF_EINVAL, "target_kl");
    assert_error_mentions(df_kl_ctrl_create("adaptive", 0.1, 0.1, 0, &c), DF_EINVAL, "horizon");
    assert_null(c);
}

/* In-reward KL with a controller: rewards use beta, the mean KL drives the update.
 * k1 per token: [0.5, 0.5] and [-0.2]: sample means 0.5, -0.2 -> current_kl 0.15;
 * rewards = scores - 0.2 kl; then beta *= 1 + clamp(0.15/0.1 - 1, +-0.2) 3/30 = 1.02.
 * The code works in double on float inputs: of those only -1.8f and beta = 0.2f are inexact (by
 * <= DF_U32 relative), and each reward is rounded to float once. */
static double reward_tol(double beta, double kl, double kl_err, double r)
{
    return DF_U32 * (fabs(beta * kl) + fabs(r)) + fabs(beta) * kl_err + df_tol_gamma(4, DF_U64) * fabs(r);
}

static void test_kl_ctrl_in_reward(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 3};
    const float scores[] = {0, 1, 2}, old[] = {-1, -1, -2}, ref[] = {-1.5f, -1.5f, -1.8f};
    float rew[3];
    df_kl_ctrl *c;
    assert_int_equal(df_kl_ctrl_create("adaptive", 0.2, 0.1, 30, &c), 0);
    double kl;
    assert_int_equal(
        df_kl_apply_in_reward("kl", 2, off, scores, old, ref, (float)df_kl_ctrl_value(c), rew, &kl), 0);
    const double k1_err = DF_U32 * 1.8;                                /* token 2's k1 = -2 - (-1.8f) */
    assert_near(kl, 0.15, k1_err / 2 + df_tol_gamma(6, DF_U64) * 0.5); /* a mean of 2 sample means */
    assert_near(rew[0], -0.1, reward_tol(0.2, 0.5, 0, -0.1));
    assert_near(rew[1], 0.9, reward_tol(0.2, 0.5, 0, 0.9));
    assert_near(rew[2], 2.04, reward_tol(0.2, -0.2, k1_err, 2.04));
    assert_int_equal(df_kl_ctrl_step(c, kl, 3, NULL), 0);
    /* the error is clamped to 0.2 whatever kl's rounding: beta 0.2 (1 + 0.2 * 3 / 30) in double */
    assert_near(df_kl_ctrl_value(c), 0.2 * 1.02, df_tol_gamma(8, DF_U64) * 0.204);
    df_kl_ctrl_free(c);
}

/* ====================================================================== TIS and mismatch */

/*
 * x = old - rollout = [0.5, -0.5, 0, 2.5, 1000], cap 2:
 *   min(e^x, 2) = [1.648721271, 0.606530660, 1, 2 (e^2.5 = 12.18), 2 (no overflow)]
 *   times w_in [0.1, 0.2, 0.3, 0.4, 1] = [0.164872127, 0.121306132, 0.3, 0.8, 2]
 */
static void test_tis_weights(void **state)
{
    (void)state;
    const float old[] = {-1, -1, -2, -0.5f, 0}, ro[] = {-1.5f, -0.5f, -2, -3, -1000};
    float w[] = {0.1f, 0.2f, 0.3f, 0.4f, 1}, out[5];
    assert_int_equal(df_tis_weights(5, old, ro, 2.0, NULL, out), 0);
    /* x = old - ro is exact in double, exp and log(cap) in double, one rounding to float */
    const double plain[] = {1.648721271, 0.606530660, 1, 2, 2};
    for (int t = 0; t < 5; t++)
        assert_near(out[t], plain[t], DF_U32 * plain[t] + lit9(plain[t], 4));
    assert_int_equal(df_tis_weights(5, old, ro, 2.0, w, w), 0); /* in place */
    /* and the float weights 0.1f.. are off from the decimals by <= DF_U32 relative */
    const double scaled[] = {0.164872127, 0.121306132, 0.3, 0.8, 2};
    for (int t = 0; t < 5; t++)
        assert_near(w[t], scaled[t], df_tol_gamma(2, DF_U32) * scaled[t] + lit9(scaled[t], 5));
    assert_int_equal(df_tis_weights(0, NULL, NULL, 2.0, NULL, NULL), 0);
    assert_error_mentions(df_tis_weights(5, old, ro, 0, NULL, out), DF_EINVAL, "tis_imp_ratio_cap");
    assert_error_mentions(df_tis_weights(5, old, ro, NAN, NULL, out), DF_EINVAL, "tis_imp_ratio_cap");
    assert_error_mentions(df_tis_weights(-1, old, ro, 2, NULL, out), DF_EINVAL, "negative");
    assert_error_mentions(df_tis_weights(5, old, NULL, 2, NULL, out), DF_EINVAL, "NULL");
}

/*
 * Variance proxies. Sample 0: advantages [1, 3] (A = 4 / (2 + 1e-8) = 2), pi = [0.5, 1] and sum pi^2
 * [0.5, 1]: w = [1 - 1 + 0.5, 1 - 2 + 1] = [0.5, 0], W = 0.5. Sample 1: tool token in the middle
 * (mask 0, its garbage unread), advantages [-1, -1] (A = -1), pi = 0.25, sum pi^2 0.25 on both:
 * w = 0.75, W = 1.5. Empty sample 2: A = 0, W = 0. Sums: 3 responses, A^2 W = 2 + 1.5 = 3.5,
 * A^2 = 5, W = 2. With grad_norm 1: proxy1 1, proxy2 3.5 / 3, proxy3 (3.5 / 3 - 1) / 2 = 1 / 12,
 * E[A^2] 5 / 3, E[W] 2 / 3; with grad_norm 2 proxy3 is clamped to 0; without one, proxy1 = proxy3 = 0.
 * Error: the 1e-8 of verl's masked mean (A^2 relative 1e-8) and the float log-probs (each pi within
 * 2 u, so each w within 4 u absolute and W within 8 u): < 1e-7 on every sum.
 */
static void test_variance_proxy(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 5, 5};
    const int32_t mask[] = {1, 1, 1, 0, 1};
    const float adv[] = {1, 3, -1, 99, -1};
    const float lp[] = {logf(0.5f), 0, logf(0.25f), 7, logf(0.25f)}, sq[] = {0.5f, 1, 0.25f, -3, 0.25f};
    double sums[DF_VPROXY_SUMS] = {0};
    assert_int_equal(df_variance_proxy_sums(3, off, mask, adv, lp, sq, NULL, sums), 0);
    const double want[DF_VPROXY_SUMS] = {3, 3.5, 5, 2};
    for (int k = 0; k < DF_VPROXY_SUMS; k++)
        assert_near(sums[k], want[k], 1e-7);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_variance_proxy_record(sums, 1.0, m), 0);
    assert_near(df_metrics_get(m, "variance_proxy/proxy1_signal_strength", NAN), 1.0, 0);
    assert_near(df_metrics_get(m, "variance_proxy/proxy2_total_power", NAN), 3.5 / 3, 1e-7);
    assert_near(df_metrics_get(m, "variance_proxy/proxy3_pure_noise", NAN), 1.0 / 12, 1e-7);
    assert_near(df_metrics_get(m, "variance_proxy/expected_a_squared", NAN), 5.0 / 3, 1e-7);
    assert_near(df_metrics_get(m, "variance_proxy/expected_w", NAN), 2.0 / 3, 1e-7);
    assert_int_equal(df_variance_proxy_record(sums, 2.0, m), 0);
    assert_near(df_metrics_get(m, "variance_proxy/proxy3_pure_noise", NAN), 0.0, 0);
    assert_int_equal(df_variance_proxy_record(sums, NAN, m), 0);
    assert_near(df_metrics_get(m, "variance_proxy/proxy1_signal_strength", NAN), 0.0, 0);
    assert_near(df_metrics_get(m, "variance_proxy/proxy3_pure_noise", NAN), 0.0, 0);
    /* rollout IS weights rho (verl's IS branch): rho = [2, 1] on sample 0 (mean 1.5), 1 on sample 1.
       Sample 0: w rho^2 = [2, 0], so W = 2 for expected_w; proxy2 takes rho_bar^2 A^2 W_0 with W_0 =
       sum w rho^2 / rho^2 = 0.5: 2.25 * 4 * 0.5 = 4.5. Sample 1 unchanged (1.5); sample 2 empty (0).
       Sums: A^2 W 6, A^2 5, W 3.5. */
    const float rho[] = {2, 1, 1, 9, 1};
    double isums[DF_VPROXY_SUMS] = {0};
    assert_int_equal(df_variance_proxy_sums(3, off, mask, adv, lp, sq, rho, isums), 0);
    const double iwant[DF_VPROXY_SUMS] = {3, 6, 5, 3.5};
    for (int k = 0; k < DF_VPROXY_SUMS; k++)
        assert_near(isums[k], iwant[k], 1e-7);
    /* the sums add: a second shard (rank) with sample 0 again */
    assert_int_equal(df_variance_proxy_sums(1, off, NULL, adv, lp, sq, NULL, sums), 0);
    assert_near(sums[DF_VPROXY_A2W], 5.5, 1e-7);
    df_metrics_free(m);
    /* no response: nothing recorded */
    df_metrics *e = df_metrics_new();
    const double none[DF_VPROXY_SUMS] = {0};
    assert_int_equal(df_variance_proxy_record(none, 1.0, e), 0);
    assert_int_equal(df_metrics_count(e), 0);
    df_metrics_free(e);
    assert_error_mentions(df_variance_proxy_sums(3, off, mask, adv, NULL, sq, NULL, sums), DF_EINVAL, "NULL");
}

/*
 * Samples: old [-1, -2] / rollout [-1.5, -2]; empty; old [-0.5] / rollout [-0.25].
 * Tokens: |e^ro - e^old| = |0.223130 - 0.367879| = 0.144749, 0, |0.778801 - 0.606531| = 0.172270
 *   max 0.172270, mean 0.105673, std (n - 1) 0.092544
 *   kl = mean(ro - old) = (-0.5 + 0 + 0.25) / 3 = -0.083333
 *   x = old - ro = [0.5, 0, -0.25]: k3 = e^x - x - 1 = [0.148721, 0, 0.028801], mean 0.059174
 *   rho = [1.648721, 1, 0.778801]: chi2_token = mean rho^2 - 1 = 0.441604, is_mean 1.142507,
 *   max 1.648721, min 0.778801; cap 1.2 -> fraction high 1/3
 * Sequences (the empty one skipped): mean old [-1.5, -0.5], mean ro [-1.75, -0.25]
 *   training_ppl = (e^1.5 + e^0.5) / 2 = 3.065205, training_log_ppl = 1
 *   rollout_ppl = (e^1.75 + e^0.25) / 2 = 3.519314, rollout_log_ppl = 1
 *   log_ppl_diff per seq = mean ro - mean old = [-0.25, 0.25]: mean 0, abs 0.25, max 0.25,
 *   min -0.25, ppl_ratio = (e^-0.25 + e^0.25) / 2 = 1.031413
 *   chi2_seq = (e^(2 * 0.5) + e^(2 * -0.25)) / 2 - 1 = (2.718282 + 0.606531) / 2 - 1 = 0.662406
 */
/* The inputs are exactly representable and the code works in double: the 9-digit literals bound the
 * comparison (lit9); the log-ppl values, 1/3 and the +-0.25 differences come out exact (sums and
 * halvings of exactly representable numbers, and 1 / 3.0 computed the same way). */
static void test_mismatch_metrics(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 2, 3};
    const float old[] = {-1, -2, -0.5f}, ro[] = {-1.5f, -2, -0.25f};
    df_rollout_mismatch mm;
    assert_int_equal(df_rollout_mismatch_compute(3, off, old, ro, 1.2, &mm), 0);
    assert_int_equal(mm.n_tokens, 3);
    assert_int_equal(mm.n_seqs, 2);
    assert_lit9(mm.probs_diff_max, 0.172270123);
    assert_lit9(mm.probs_diff_mean, 0.105673135);
    assert_lit9(mm.probs_diff_std, 0.092544356);
    assert_lit9(mm.kl, -0.083333333);
    assert_lit9(mm.k3_kl, 0.059174018);
    assert_lit9(mm.chi2_token, 0.441604163);
    assert_lit9(mm.is_mean, 1.142507351);
    assert_lit9(mm.is_max, 1.648721271);
    assert_lit9(mm.is_min, 0.778800783);
    assert_near(mm.is_fraction_high, 1 / 3.0, 0);
    assert_lit9(mm.training_ppl, 3.065205171);
    assert_near(mm.training_log_ppl, 1.0, 0);
    assert_lit9(mm.rollout_ppl, 3.519314046);
    assert_near(mm.rollout_log_ppl, 1.0, 0);
    assert_near(mm.log_ppl_diff, 0.0, 0);
    assert_near(mm.log_ppl_abs_diff, 0.25, 0);
    assert_near(mm.log_ppl_diff_max, 0.25, 0);
    assert_near(mm.log_ppl_diff_min, -0.25, 0);
    assert_lit9(mm.ppl_ratio, 1.031413100);
    assert_lit9(mm.chi2_seq, 0.662406244);

    df_metrics *m = df_metrics_new();
    assert_int_equal(df_rollout_mismatch_record(&mm, m), 0);
    assert_int_equal(df_metrics_count(m), 20);
    assert_lit9(df_metrics_get(m, "training/rollout_probs_diff_max", -1), 0.172270123);
    assert_near(df_metrics_get(m, "rollout_corr/rollout_log_ppl", -1), 1.0, 0);
    assert_near(df_metrics_get(m, "rollout_corr/training_log_ppl", -1), 1.0, 0);
    assert_near(df_metrics_get(m, "rollout_corr/rollout_is_ratio_fraction_high", -1), 1 / 3.0, 0);
    df_metrics_free(m);
}

/* Identical streams: no mismatch (exactly: x - x = 0 and exp(0) = 1 give 0 and 1 with no rounding);
   no tokens: zeros and nothing recorded; malformed input. */
static void test_mismatch_edges(void **state)
{
    (void)state;
    const int64_t off[] = {0, 1, 3};
    const float lp[] = {-0.1f, -2, -3};
    df_rollout_mismatch mm;
    assert_int_equal(df_rollout_mismatch_compute(2, off, lp, lp, 2.0, &mm), 0);
    assert_near(mm.probs_diff_max, 0, 0);
    assert_near(mm.kl, 0, 0);
    assert_near(mm.k3_kl, 0, 0);
    assert_near(mm.chi2_token, 0, 0);
    assert_near(mm.chi2_seq, 0, 0);
    assert_near(mm.ppl_ratio, 1, 0);
    assert_near(mm.is_fraction_high, 0, 0);
    /* one token: std 0 (torch.std would give nan) */
    assert_int_equal(df_rollout_mismatch_compute(1, off, lp, lp, 0, &mm), 0);
    assert_near(mm.probs_diff_std, 0, 0);

    const int64_t empty[] = {0, 0};
    assert_int_equal(df_rollout_mismatch_compute(1, empty, NULL, NULL, 2.0, &mm), 0);
    assert_int_equal(mm.n_tokens, 0);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_rollout_mismatch_record(&mm, m), 0);
    assert_int_equal(df_metrics_count(m), 0);
    df_metrics_free(m);
    const int64_t bad[] = {0, 3, 1};
    assert_int_equal(df_rollout_mismatch_compute(2, bad, lp, lp, 2.0, &mm), DF_EINVAL);
    assert_error_mentions(df_rollout_mismatch_compute(2, off, lp, NULL, 2.0, &mm), DF_EINVAL, "NULL");
}

/* ====================================================================== in the actor */

/* 4 samples (prompts 3, 1, 2, 4 tokens; responses 2, 3, 0, 1) with the PPO columns. */
static df_batch *actor_batch(df_actor *a, bool rollout_lp)
{
    static const int64_t po[] = {0, 3, 4, 6, 10}, ro[] = {0, 2, 5, 5, 6};
    static const int32_t pt[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, rt[] = {11, 12, 13, 14, 15, 16};
    df_batch *b = df_batch_new(4);
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", po, pt), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", ro, rt), 0);
    assert_int_equal(df_actor_compute_log_prob(a, b, "old_log_probs", NULL), 0);
    float *adv, *rl;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "advantages", "response_ids", &adv), 0);
    const float *old = df_batch_column(b, "old_log_probs")->data;
    const float sample_adv[] = {0.9f, -0.6f, 0.0f, 1.3f};
    for (int i = 0; i < 4; i++)
        for (int64_t t = ro[i]; t < ro[i + 1]; t++)
            adv[t] = sample_adv[i];
    if (rollout_lp) { /* the sampler saw slightly different log-probs */
        assert_int_equal(df_batch_alloc_tok_f32_like(b, "rollout_log_probs", "response_ids", &rl), 0);
        for (int t = 0; t < 6; t++)
            rl[t] = old[t] + 0.3f * (float)(t % 3 - 1);
    }
    return b;
}

static df_actor_params actor_params(const char *loss, const char *mode, int64_t micro)
{
    df_actor_params p = {.optim.lr = 1e-2,
                         .optim.beta1 = 0.9,
                         .optim.beta2 = 0.999,
                         .optim.adam_eps = 1e-8,
                         .optim.grad_clip = 1e9,
                         .micro_batch_size = micro,
                         .logprob_micro_batch_size = micro,
                         .loss.ppo_epochs = 2,
                         .loss.policy_loss = loss,
                         .loss.loss_agg_mode = mode,
                         .loss.clip_ratio_low = 0.2,
                         .loss.clip_ratio_high = 0.2,
                         .loss.clip_ratio_c = 3.0,
                         .loss.loss_agg_norm_length = 8,
                         .loss.policy_drift_coeff = 0.5,
                         .temperature = 1.0f};
    return p;
}

/* Parameters after one update (two PPO epochs, so the second sees ratios != 1). */
static df_model *actor_update(const df_actor_params *p, bool rollout_lp, double *pg_loss)
{
    df_actor *a;
    assert_int_equal(df_actor_create(df_test_micro_model(5), p, true, &a), 0);
    df_batch *b = actor_batch(a, rollout_lp);
    df_metrics *m = df_metrics_new();
    if (df_actor_update_policy(a, b, m))
        fail_msg("update: %s", df_last_error());
    *pg_loss = df_metrics_get(m, "actor/pg_loss", NAN);
    df_model *out;
    assert_int_equal(df_model_clone(df_actor_model(a), &out), 0);
    df_metrics_free(m);
    df_batch_free(b);
    df_actor_free(a);
    return out;
}

/* What one optimizer step of the micro-batch-invariance test may differ by (see below). */
typedef struct step_bound {
    double grad; /* ||g^1 - g^4||_2 */
    double loss; /* |pg_loss^1 - pg_loss^4| */
} step_bound;

/*
 * One update of actor_batch with loss p at the weights of m (runs with micro-batches of 1 and of 4
 * samples; their log-probs differ by <= F). The gradient is a sum over response tokens of
 * c_t grad log p_t, c_t = dL/dlog p_t; per loss (w_t the aggregation weight, tau_t <= cap the TIS
 * weight, R >= every ratio exp|log p - old| and >= 1 + clip_ratio_high, alpha cpgd's drift coefficient):
 *   |c_t| and |dc_t / dr_t| <= B_t = w_t tau_t (|A_t| R + alpha R)
 *   (vanilla, gspo -A r or 0; gpg -A; cpgd -A + alpha (e^r - 1)),
 * and the per-token loss |l_t| <= |A_t| (R + |log p_t|) + alpha R, |log p_t| <= |old_t| + log R.
 * So, with J_t = ||grad log p_t|| (tt_logp_grad_norms) and G = sum_t B_t J_t:
 *   rounding of the gradient, tt_grad_rel G: forward + backward in both runs (probabilistic),
 *   plus the micro-1 run's sum of 4 micro-batches (gamma_3); the log-ratio r = log p - old moves
 *   by <= 2F and the TIS weight by <= F relative, so c_t by <= 3F B_t: 3F G. The loss:
 *   sum_t w_t tau_t (2F (|A| R + alpha R) + F |l_t|).
 */
static step_bound update_bound(const df_model *m, const df_actor_params *p, const df_batch *b1,
                               const df_batch *b4)
{
    const int64_t T = 6;
    double F = tb_forward_bound(m, 5, p->temperature), J[6];
    tt_logp_grad_norms(m, b4, p->temperature, J);
    float w[6];
    assert_int_equal(df_loss_agg_weights_ex(p->loss.loss_agg_mode, 4, df_batch_offsets(b4, "response_ids"), T,
                                            4, p->loss.loss_agg_norm_length, w),
                     0);
    /* R from this step's ratios (log-probs at the current weights) in either run */
    double R = 1 + p->loss.clip_ratio_high;
    df_actor *a;
    df_model *c;
    df_actor_params pf = *p;
    assert_int_equal(df_model_clone(m, &c), 0);
    assert_int_equal(df_actor_create(c, &pf, false, &a), 0);
    const df_batch *bs[] = {b1, b4};
    for (int k = 0; k < 2; k++) {
        df_batch *x;
        assert_int_equal(df_batch_slice(bs[k], 0, 4, &x), 0);
        assert_int_equal(df_actor_compute_log_prob(a, x, "now", NULL), 0);
        const float *now = df_batch_column(x, "now")->data, *old = df_batch_column(x, "old_log_probs")->data;
        for (int64_t t = 0; t < T; t++)
            R = fmax(R, exp(fabs((double)now[t] - old[t]) + F));
        df_batch_free(x);
    }
    df_actor_free(a);
    const float *adv = df_batch_column(b4, "advantages")->data,
                *old = df_batch_column(b4, "old_log_probs")->data;
    double alpha = !strcmp(p->loss.policy_loss, "cpgd") ? p->loss.policy_drift_coeff : 0;
    double tau = p->tis_imp_ratio_cap > 0 ? p->tis_imp_ratio_cap : 1, G = 0, dL = 0, L = 0;
    for (int64_t t = 0; t < T; t++) {
        double A = fabs(adv[t]), wt = (double)w[t] * tau, lt = A * (R + fabs(old[t]) + log(R)) + alpha * R;
        G += wt * (A * R + alpha * R) * J[t];
        dL += wt * (2 * F * (A * R + alpha * R) + F * lt);
        L += wt * lt;
    }
    /* 16 packed tokens in the micro-batch of 4; the loss is summed in double: 2 gamma_T(u64) sum |w l|
       for the two orders */
    step_bound sb = {.grad = (tt_grad_rel(m, 5, 16, 4) + 3 * F) * G,
                     .loss = dL + 2 * df_tol_gamma((double)T, DF_U64) * L};
    if (getenv("DF_TOL_DEBUG"))
        print_message("F %.3g R %.4g G %.4g n %.0f grad %.3g loss %.3g\n", F, R, G,
                      tb_grad_chain(&m->cfg, 5, 16), sb.grad, sb.loss);
    return sb;
}

/* One update (one optimizer step: ppo_epochs 1) of a; pg_loss out. */
static double update_once(df_actor *a, df_batch *b)
{
    df_metrics *m = df_metrics_new();
    if (df_actor_update_policy(a, b, m))
        fail_msg("update: %s", df_last_error());
    double l = df_metrics_get(m, "actor/pg_loss", NAN);
    df_metrics_free(m);
    return l;
}

/*
 * Every loss and aggregation mode through the actor: micro-batches of 1 sample and of the whole
 * batch take the same step (seq-mean-token-sum-norm with the actor's loss_agg_norm_length), with TIS
 * weights as well, over two optimizer steps (the second sees ratios != 1).
 *
 * The runs differ by float summation order only, so the comparison is bounded by an error analysis
 * (update_bound), which needs Adam to be Lipschitz in the gradient: adam_eps = 1, well above the
 * gradient's rounding noise (~1e-7; with eps 1e-8 a parameter whose gradient is that noise moves by
 * up to lr either way). Then each step moves a weight by lr df_tol_adam_gain / eps times the largest
 * gradient difference so far, plus the rounding of the AdamW arithmetic and of the weight itself. Before
 * the second step the micro-1 run takes the micro-4 run's weights, so that the bound needs no Hessian:
 * only the Adam moments keep the first step's difference. The log-probs at the initial weights are
 * checked against tb_forward_bound on the way (the two runs compute their old_log_probs with their own
 * micro-batches).
 */
static void test_actor_micro_invariant(void **state)
{
    (void)state;
    const char *losses[] = {"vanilla", "gspo", "gpg", "cpgd"};
    const char *modes[] = {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"};
    double worst = 0, worst_loss = 0;
    for (size_t i = 0; i < 4; i++)
        for (size_t j = 0; j < 3; j++)
            for (int tis = 0; tis < 2; tis++) {
                df_actor_params p[2] = {actor_params(losses[i], modes[j], 1),
                                        actor_params(losses[i], modes[j], 4)};
                df_actor *a[2];
                df_batch *b[2];
                for (int k = 0; k < 2; k++) {
                    p[k].loss.ppo_epochs = 1;
                    p[k].optim.lr = 0.1;
                    p[k].optim.adam_eps = 1;
                    p[k].tis_imp_ratio_cap = tis ? 1.2 : 0;
                    assert_int_equal(df_actor_create(df_test_micro_model(5), &p[k], true, &a[k]), 0);
                    b[k] = actor_batch(a[k], tis);
                }
                df_model *m0 = df_actor_model(a[1]), *init;
                assert_int_equal(df_model_clone(m0, &init), 0);
                double F = tb_forward_bound(m0, 5, 1.0f);
                const float *o1 = df_batch_column(b[0], "old_log_probs")->data,
                            *o4 = df_batch_column(b[1], "old_log_probs")->data;
                for (int t = 0; t < 6; t++)
                    if (fabs((double)o1[t] - o4[t]) > F)
                        fail_msg("old_log_probs[%d]: %.9g vs %.9g (bound %.3g)", t, o1[t], o4[t], F);
                const double lr = p[0].optim.lr, eps = p[0].optim.adam_eps;
                double dg = 0, moved = 0;
                for (int step = 1; step <= 2; step++) {
                    step_bound sb = update_bound(df_actor_model(a[1]), &p[1], b[0], b[1]);
                    dg = fmax(dg, sb.grad);
                    double gain = df_tol_adam_gain(step, p[0].optim.beta1, p[0].optim.beta2);
                    double l1 = update_once(a[0], b[0]), l4 = update_once(a[1], b[1]);
                    const df_model *x1 = df_actor_model(a[0]), *x4 = df_actor_model(a[1]);
                    double bound = tt_adam_inject(lr, eps, gain, dg, tt_max_abs(x4));
                    double d = df_test_max_param_diff(x1, x4), dl = fabs(l1 - l4);
                    if (!(d <= bound) || !(dl <= sb.loss) || !isfinite(l1))
                        fail_msg(
                            "%s / %s / tis %d, step %d: param diff %.3g (bound %.3g), pg_loss %.9g vs %.9g "
                            "(bound %.3g)",
                            losses[i], modes[j], tis, step, d, bound, l1, l4, sb.loss);
                    if (getenv("DF_TOL_DEBUG"))
                        print_message(
                            "  %s/%s/tis%d step %d: d %.3g bound %.3g  dl %.3g (l %.4g) bound %.3g\n",
                            losses[i], modes[j], tis, step, d, bound, dl, l4, sb.loss);
                    worst = fmax(worst, d / bound);
                    worst_loss = fmax(worst_loss, dl / sb.loss);
                    if (step == 1) {
                        moved = df_test_max_param_diff(x4, init);
                        if (getenv("DF_TOL_DEBUG"))
                            print_message("  moved %.3g\n", moved);
                        /* the comparison has teeth: a wrong weight on one sample's terms changes the
                           step by a fair fraction of itself, far above the bound */
                        if (!(moved > 30 * bound))
                            fail_msg("%s / %s / tis %d: the step moved weights by %.3g only (bound %.3g)",
                                     losses[i], modes[j], tis, moved, bound);
                        memcpy(df_actor_model(a[0])->params, x4->params,
                               (size_t)x4->n_params * sizeof(float));
                    }
                }
                df_model_free(init);
                for (int k = 0; k < 2; k++) {
                    df_actor_free(a[k]);
                    df_batch_free(b[k]);
                }
            }
    print_message("[ micro invariance ] worst observed / bound: weights %.3g, pg_loss %.3g\n", worst,
                  worst_loss);
}

/* TIS with rollout == trainer log-probs and cap >= 1 is the identity; a real
 * mismatch changes the step; the column must be there. */
static void test_actor_tis(void **state)
{
    (void)state;
    df_actor_params p = actor_params("vanilla", "token-mean", 2);
    double l0, l1, l2;
    df_model *x0 = actor_update(&p, false, &l0);
    p.tis_imp_ratio_cap = 1.5;
    df_model *x2 = actor_update(&p, true, &l2);
    /* not rounding: with the weights ignored the two runs would be the same computation (difference
       exactly 0); weights e^(+-0.3) change the gradient by ~30% and the weights by ~lr = 1e-2 */
    assert_true(df_test_max_param_diff(x0, x2) > 1e-4);
    df_actor *a;
    assert_int_equal(df_actor_create(df_test_micro_model(5), &p, true, &a), 0);
    df_batch *b = actor_batch(a, false);
    df_metrics *m = df_metrics_new();
    assert_error_mentions(df_actor_update_policy(a, b, m), DF_EINVAL, "rollout_log_probs");
    /* identical streams: weights min(e^0, 1.5) = 1 */
    float *rl;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "rollout_log_probs", "response_ids", &rl), 0);
    memcpy(rl, df_batch_column(b, "old_log_probs")->data, 6 * sizeof *rl);
    assert_int_equal(df_actor_update_policy(a, b, m), 0);
    l1 = df_metrics_get(m, "actor/pg_loss", NAN);
    /* exact: every weight is min(e^0, 1.5) = 1, so this is x0's computation bit for bit */
    assert_near(l1, l0, 0);
    assert_near(df_test_max_param_diff(df_actor_model(a), x0), 0, 0);
    df_metrics_free(m);
    df_batch_free(b);
    df_actor_free(a);
    df_model_free(x0), df_model_free(x2);
}

/* seq-mean-token-sum-norm needs the constant length; kl_cov / clip_cov run. */
static void test_actor_norm_length_and_cov(void **state)
{
    (void)state;
    df_actor_params p = actor_params("vanilla", "seq-mean-token-sum-norm", 2);
    p.loss.loss_agg_norm_length = 0;
    df_actor *a;
    assert_int_equal(df_actor_create(df_test_micro_model(5), &p, true, &a), 0);
    df_batch *b = actor_batch(a, false);
    df_metrics *m = df_metrics_new();
    assert_error_mentions(df_actor_update_policy(a, b, m), DF_EINVAL, "length normaliser");
    df_actor_loss l = p.loss;
    l.loss_agg_norm_length = 8, l.policy_loss = "kl_cov", l.kl_cov_ratio = 0.3, l.ppo_kl_coef = 1;
    df_actor_set_loss(a, &l);
    assert_int_equal(df_actor_update_policy(a, b, m), 0);
    assert_true(isfinite(df_metrics_get(m, "actor/pg_loss", NAN)));
    l.policy_loss = "clip_cov", l.clip_cov_ratio = 0.3, l.clip_cov_lb = -1, l.clip_cov_ub = 5;
    df_actor_set_loss(a, &l);
    assert_int_equal(df_actor_update_policy(a, b, m), 0);
    assert_true(df_metrics_get(m, "actor/pg_clipfrac", -1) >= 0);
    df_metrics_free(m);
    df_batch_free(b);
    df_actor_free(a);
}

/* df_actor_set_loss replaces every loss setting: an actor created with one loss and
 * switched to another takes exactly the step of an actor created with the second. */
static void test_actor_set_loss(void **state)
{
    (void)state;
    df_actor_params pa = actor_params("vanilla", "token-mean", 2);
    df_actor_params pb = actor_params("cpgd", "seq-mean-token-sum-norm", 2);
    pb.loss.ppo_epochs = 3, pb.loss.clip_ratio_high = 0.3, pb.loss.policy_drift_coeff = 0.2;
    pb.loss.loss_agg_norm_length = 5, pb.loss.entropy_coeff = 0.01;
    double lb;
    df_model *xb = actor_update(&pb, false, &lb);
    df_actor *a;
    assert_int_equal(df_actor_create(df_test_micro_model(5), &pa, true, &a), 0);
    df_actor_set_loss(a, &pb.loss);
    df_batch *b = actor_batch(a, false);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_actor_update_policy(a, b, m), 0);
    assert_true(df_metrics_get(m, "actor/pg_loss", NAN) == lb);
    assert_true(isfinite(df_metrics_get(m, "actor/entropy_loss", NAN)));
    assert_true(df_test_max_param_diff(df_actor_model(a), xb) == 0);
    df_metrics_free(m);
    df_batch_free(b);
    df_actor_free(a);
    df_model_free(xb);
}

/*
 * A loss whose descriptor fixes its aggregation (gspo, sapo: seq-mean-token-mean, as verl's agg_loss
 * calls) aggregates its policy term with it whatever loss_agg_mode: without KL and entropy terms,
 * gspo under token-mean trains to the same bits as under seq-mean-token-mean. The responses have
 * 2, 3, 0 and 1 tokens, so the two modes weigh tokens differently: vanilla under them differs.
 */
static void test_actor_loss_own_aggregation(void **state)
{
    (void)state;
    double la, lb;
    df_actor_params pa = actor_params("gspo", "token-mean", 2), pb = actor_params("gspo", "seq-mean-token-mean", 2);
    df_model *xa = actor_update(&pa, false, &la), *xb = actor_update(&pb, false, &lb);
    assert_true(df_test_max_param_diff(xa, xb) == 0);
    assert_true(la == lb);
    df_model_free(xa), df_model_free(xb);
    pa.loss.policy_loss = pb.loss.policy_loss = "vanilla";
    xa = actor_update(&pa, false, &la), xb = actor_update(&pb, false, &lb);
    assert_true(df_test_max_param_diff(xa, xb) > 0);
    df_model_free(xa), df_model_free(xb);
}

/*
 * geo_mean (GMPO) takes its importance weights per sequence as the geometric mean of its tokens'
 * (verl compute_policy_loss_geo_mean), the other losses per token. One epoch over the whole batch at
 * the weights that made old_log_probs (ratio exactly 1): pg_loss = -(1/S) sum_i g_i A_i over the
 * S = 3 responses with tokens, g the geometric means of rollout_is_weights [4, 1], [1, 1, 1], [0.25]
 * = 2, 1, 0.25 (verl's +1e-10 and +1e-8 move them by < 1e-9): -(1.8 - 0.6 + 0.325) / 3; per
 * token (the arithmetic mean 2.5 for the first) it would be -(2.25 - 0.6 + 0.325) / 3. The float
 * weights and the double sums: within 1e-6.
 */
static void test_actor_geo_mean_is_weights(void **state)
{
    (void)state;
    df_actor_params p = actor_params("geo_mean", "seq-mean-token-mean", 8);
    p.loss.ppo_epochs = 1;
    df_actor *a;
    assert_int_equal(df_actor_create(df_test_micro_model(5), &p, true, &a), 0);
    df_batch *b = actor_batch(a, false);
    float *rw;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "rollout_is_weights", "response_ids", &rw), 0);
    const float rho[] = {4, 1, 1, 1, 1, 0.25f};
    memcpy(rw, rho, sizeof rho);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_actor_update_policy(a, b, m), 0);
    assert_near(df_metrics_get(m, "actor/pg_loss", NAN), -(1.8 - 0.6 + 0.325) / 3, 1e-6);
    df_metrics_free(m);
    df_batch_free(b);
    df_actor_free(a);
}

/* actor_batch's rows in the order idx. */
static df_batch *rows_in_order(df_actor *a, const int64_t *idx)
{
    df_batch *b = actor_batch(a, false), *out;
    assert_int_equal(df_batch_select(b, idx, 4, &out), 0);
    df_batch_free(b);
    return out;
}

/*
 * actor.shuffle (train_core.h): each PPO epoch's mini-batches from the next permutation of a
 * df_rng seeded with df_rng_key(seed, 0, 0, 0) at every update, drawn by df_rng_shuffle_i64.
 * Two updates of 2 epochs x 2 mini-batches of 2 rows with shuffle on must leave the weights
 * bit for bit where four unshuffled 1-epoch updates over the batch in orders p1, p2, p1, p2
 * leave them (the same mini-batches, rows with their own columns, in the same order: the same
 * floating-point operations). The seed is chosen so that p1 and p2 regroup the rows (other
 * mini-batch compositions than the batch order's, and than each other's), so an update that ignored shuffle, reused one permutation for both
 * epochs, or did not re-seed per update would change the weights.
 */
static void test_actor_shuffle(void **state)
{
    (void)state;
    const uint64_t seed = 11;
    int64_t p1[4] = {0, 1, 2, 3}, p2[4] = {0, 1, 2, 3};
    df_rng r;
    df_rng_seed(&r, df_rng_key(seed, 0, 0, 0));
    df_rng_shuffle_i64(&r, p1, 4);
    df_rng_shuffle_i64(&r, p2, 4);
    /* both epochs regroup the rows, each its own way */
    const bool regrouped = (p1[0] < 2) != (p1[1] < 2) && (p2[0] < 2) != (p2[1] < 2);
    assert_true(regrouped && (p1[0] + p1[1]) != (p2[0] + p2[1]));

    df_actor_params ps = actor_params("vanilla", "token-mean", 1);
    ps.mini_batch_size = 2, ps.shuffle = true, ps.shuffle_seed = seed;
    df_actor_params pr = ps;
    pr.shuffle = false, pr.loss.ppo_epochs = 1;
    df_actor *as, *ar;
    assert_int_equal(df_actor_create(df_test_micro_model(5), &ps, true, &as), 0);
    assert_int_equal(df_actor_create(df_test_micro_model(5), &pr, true, &ar), 0);
    df_batch *b = actor_batch(as, false), *o1 = rows_in_order(ar, p1), *o2 = rows_in_order(ar, p2);
    df_metrics *m = df_metrics_new();
    for (int u = 0; u < 2; u++) {
        assert_int_equal(df_actor_update_policy(as, b, m), 0);
        assert_int_equal(df_actor_update_policy(ar, o1, m), 0);
        assert_int_equal(df_actor_update_policy(ar, o2, m), 0);
    }
    const df_model *ms = df_actor_model(as), *mr = df_actor_model(ar);
    assert_int_equal(ms->n_params, mr->n_params);
    assert_true(memcmp(ms->params, mr->params, (size_t)ms->n_params * sizeof(float)) == 0);
    /* and the unshuffled update over the batch order differs from both */
    df_actor *an;
    df_actor_params pn = ps;
    pn.shuffle = false;
    assert_int_equal(df_actor_create(df_test_micro_model(5), &pn, true, &an), 0);
    for (int u = 0; u < 2; u++)
        assert_int_equal(df_actor_update_policy(an, b, m), 0);
    assert_true(memcmp(ms->params, df_actor_model(an)->params, (size_t)ms->n_params * sizeof(float)) != 0);
    df_batch_free(b), df_batch_free(o1), df_batch_free(o2);
    df_metrics_free(m);
    df_actor_free(as), df_actor_free(ar), df_actor_free(an);
}

/* The worker's actor settings: loss_scale_factor else data.max_response_length; CPGD
 * selected by use_cpgd_loss or adv_estimator=cpgd; the policy_loss.* keys; TIS cap; the loss
 * coefficients and clip ratios each from its own key. */
static void test_worker_actor_params(void **state)
{
    (void)state;
    df_dag_worker w;
    memset(&w, 0, sizeof w);
    w.actor.layout.dp_size = 1; /* rollout.n is 1 by default */
    const char *ov[] = {"data.max_response_length=96", ACTOR_KEY "policy_drift_coeff=0.01",
                        ACTOR_KEY "policy_loss.kl_cov_ratio=0.002", ACTOR_KEY "tis_imp_ratio_cap=2.5",
                        "trainer.seed=9", ACTOR_KEY "entropy_coeff=0.25", ACTOR_KEY "kl_loss_coef=0.125",
                        ACTOR_KEY "clip_ratio_low=0.15", ACTOR_KEY "clip_ratio_high=0.3",
                        ACTOR_KEY "shuffle=true"};
    df_config *c = NULL;
    assert_int_equal(df_config_load(df_config_schema_train(), NULL, ov, 10, &c), DF_OK);
    df_actor_params p;
    assert_int_equal(df_worker_settings_init(&w.global, c), DF_OK);
    df_worker_actor_params(&w, &p);
    assert_int_equal(p.loss.loss_agg_norm_length, 96);
    assert_string_equal(p.loss.policy_loss, "vanilla");
    /* exact: the config parses "0.01" to the same double as the literal */
    assert_near(p.loss.policy_drift_coeff, 0.01, 0);
    assert_near(p.loss.kl_cov_ratio, 0.002, 0);
    assert_near(p.loss.clip_cov_lb, 1.0, 0);
    assert_near(p.loss.clip_cov_ub, 5.0, 0);
    assert_near(p.tis_imp_ratio_cap, 2.5, 0);
    assert_true(p.seed == 9);
    /* each loss coefficient from its own key (distinct values: a swap of two keys fails) */
    assert_near(p.loss.entropy_coeff, 0.25, 0);
    assert_near(p.loss.kl_loss_coef, 0.125, 0);
    assert_near(p.loss.clip_ratio_low, 0.15, 0);
    assert_near(p.loss.clip_ratio_high, 0.3, 0);
    assert_string_equal(p.loss.kl_loss_type, "low_var_kl"); /* actor.kl_loss_type, not algorithm.kl_penalty (kl) */
    /* shuffle: the actor's key, verl's default seed 42; the critic follows actor.shuffle */
    df_critic_params cp;
    df_worker_critic_params(&w, &cp);
    assert_true(p.shuffle && p.shuffle_seed == 42 && cp.shuffle && cp.shuffle_seed == 42);
    df_config_free(c);
    const char *ov2[] = {ACTOR_KEY "loss_scale_factor=4096", ACTOR_KEY "use_cpgd_loss=true",
                         ACTOR_KEY "data_loader_seed=null", "trainer.seed=11", "critic.shuffle=true",
                         "critic.data_loader_seed=5"};
    assert_int_equal(df_config_load(df_config_schema_train(), NULL, ov2, 6, &c), DF_OK);
    assert_int_equal(df_worker_settings_init(&w.global, c), DF_OK);
    df_worker_actor_params(&w, &p);
    df_worker_critic_params(&w, &cp);
    assert_int_equal(p.loss.loss_agg_norm_length, 4096);
    assert_string_equal(p.loss.policy_loss, "cpgd");
    /* null: trainer.seed; the critic's keys its own */
    assert_true(!p.shuffle && p.shuffle_seed == 11 && cp.shuffle && cp.shuffle_seed == 5);
    df_config_free(c);
    const char *ov3[] = {ACTOR_KEY "use_cpgd_loss=true", ACTOR_KEY "policy_loss.loss_mode=gspo"};
    assert_int_equal(df_config_load(df_config_schema_train(), NULL, ov3, 2, &c), DF_OK);
    assert_int_equal(df_worker_settings_init(&w.global, c), DF_OK);
    df_worker_actor_params(&w, &p);
    assert_string_equal(p.loss.policy_loss, "gspo"); /* an explicit loss_mode wins */
    df_config_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kl_ctrl_fixed),
        cmocka_unit_test(test_kl_ctrl_adaptive),
        cmocka_unit_test(test_kl_ctrl_bad),
        cmocka_unit_test(test_kl_ctrl_in_reward),
        cmocka_unit_test(test_tis_weights),
        cmocka_unit_test(test_variance_proxy),
        cmocka_unit_test(test_mismatch_metrics),
        cmocka_unit_test(test_mismatch_edges),
        cmocka_unit_test(test_actor_micro_invariant),
        cmocka_unit_test(test_actor_tis),
        cmocka_unit_test(test_actor_norm_length_and_cov),
        cmocka_unit_test(test_actor_set_loss),
        cmocka_unit_test(test_actor_loss_own_aggregation),
        cmocka_unit_test(test_actor_geo_mean_is_weights),
        cmocka_unit_test(test_actor_shuffle),
        cmocka_unit_test(test_worker_actor_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
