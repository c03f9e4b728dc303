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

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distflow/algo.h"
#include "distflow/metrics.h"
#include "engine/actor.h"
#include "worker/worker_internal.h"

#define ACTOR_KEY "actor_rollout_ref.actor."

/* ====================================================================== KL controllers */

static void test_kl_ctrl_fixed(void **state)
{
    (void)state;
    df_kl_ctrl *c;
    assert_int_equal(df_kl_ctrl_create("fixed", 0.05, 0, 0, &c), 0); /* target / horizon unused */
    assert_int_equal(df_kl_ctrl_update(c, 3.0, 64), 0);
    assert_int_equal(df_kl_ctrl_update(c, 0.0, 64), 0);
    assert_near(df_kl_ctrl_value(c), 0.05, 0);
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
    assert_near(df_kl_ctrl_value(c), 0.102, 1e-15);
    /* the metrics carry the coefficient that was applied, i.e. before the update */
    assert_near(df_metrics_get(m, "actor/reward_kl_penalty", -1), 1.0, 0);
    assert_near(df_metrics_get(m, "actor/reward_kl_penalty_coeff", -1), 0.1, 0);
    assert_int_equal(df_kl_ctrl_update(c, 0.25, 20), 0);
    assert_near(df_kl_ctrl_value(c), 0.09792, 1e-15);
    assert_int_equal(df_kl_ctrl_update(c, 0.55, 50), 0);
    assert_near(df_kl_ctrl_value(c), 0.102816, 1e-12);
    assert_int_equal(df_kl_ctrl_update(c, 0.55, 0), 0); /* no samples, no change */
    assert_near(df_kl_ctrl_value(c), 0.102816, 1e-12);
    assert_int_equal(df_kl_ctrl_set_value(c, 0.3), 0); /* resume */
    assert_near(df_kl_ctrl_value(c), 0.3, 0);
    assert_error_mentions(df_kl_ctrl_update(c, NAN, 1), DF_EINVAL, "not finite");
    assert_error_mentions(df_kl_ctrl_update(c, 0.1, -1), DF_EINVAL, "negative");
    assert_error_mentions(df_kl_ctrl_set_value(c, -1), DF_EINVAL, ">= 0");
    assert_near(df_kl_ctrl_value(c), 0.3, 0);
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
 * rewards = scores - 0.2 kl; then beta *= 1 + clamp(0.15/0.1 - 1, +-0.2) 3/30 = 1.02. */
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
    assert_near(kl, 0.15, 1e-7);
    assert_near(rew[0], -0.1, 1e-7);
    assert_near(rew[1], 0.9, 1e-7);
    assert_near(rew[2], 2.04, 1e-6);
    assert_int_equal(df_kl_ctrl_step(c, kl, 3, NULL), 0);
    assert_near(df_kl_ctrl_value(c), 0.2 * 1.02, 1e-8);
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
    const double plain[] = {1.648721271, 0.606530660, 1, 2, 2};
    for (int t = 0; t < 5; t++)
        assert_near(out[t], plain[t], 1e-6);
    assert_int_equal(df_tis_weights(5, old, ro, 2.0, w, w), 0); /* in place */
    const double scaled[] = {0.164872127, 0.121306132, 0.3, 0.8, 2};
    for (int t = 0; t < 5; t++)
        assert_near(w[t], scaled[t], 1e-7);
    assert_int_equal(df_tis_weights(0, NULL, NULL, 2.0, NULL, NULL), 0);
    assert_error_mentions(df_tis_weights(5, old, ro, 0, NULL, out), DF_EINVAL, "tis_imp_ratio_cap");
    assert_error_mentions(df_tis_weights(5, old, ro, NAN, NULL, out), DF_EINVAL, "tis_imp_ratio_cap");
    assert_error_mentions(df_tis_weights(-1, old, ro, 2, NULL, out), DF_EINVAL, "negative");
    assert_error_mentions(df_tis_weights(5, old, NULL, 2, NULL, out), DF_EINVAL, "NULL");
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
static void test_mismatch_metrics(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 2, 3};
    const float old[] = {-1, -2, -0.5f}, ro[] = {-1.5f, -2, -0.25f};
    df_rollout_mismatch mm;
    assert_int_equal(df_rollout_mismatch_compute(3, off, old, ro, 1.2, &mm), 0);
    assert_int_equal(mm.n_tokens, 3);
    assert_int_equal(mm.n_seqs, 2);
    assert_near(mm.probs_diff_max, 0.172270123, 1e-8);
    assert_near(mm.probs_diff_mean, 0.105673135, 1e-8);
    assert_near(mm.probs_diff_std, 0.092544356, 1e-8);
    assert_near(mm.kl, -0.083333333, 1e-8);
    assert_near(mm.k3_kl, 0.059174018, 1e-8);
    assert_near(mm.chi2_token, 0.441604163, 1e-8);
    assert_near(mm.is_mean, 1.142507351, 1e-8);
    assert_near(mm.is_max, 1.648721271, 1e-8);
    assert_near(mm.is_min, 0.778800783, 1e-8);
    assert_near(mm.is_fraction_high, 1 / 3.0, 1e-12);
    assert_near(mm.training_ppl, 3.065205171, 1e-8);
    assert_near(mm.training_log_ppl, 1.0, 1e-12);
    assert_near(mm.rollout_ppl, 3.519314046, 1e-8);
    assert_near(mm.rollout_log_ppl, 1.0, 1e-12);
    assert_near(mm.log_ppl_diff, 0.0, 1e-12);
    assert_near(mm.log_ppl_abs_diff, 0.25, 1e-12);
    assert_near(mm.log_ppl_diff_max, 0.25, 1e-12);
    assert_near(mm.log_ppl_diff_min, -0.25, 1e-12);
    assert_near(mm.ppl_ratio, 1.031413100, 1e-8);
    assert_near(mm.chi2_seq, 0.662406244, 1e-8);

    df_metrics *m = df_metrics_new();
    assert_int_equal(df_rollout_mismatch_record(&mm, m), 0);
    assert_int_equal(df_metrics_count(m), 20);
    assert_near(df_metrics_get(m, "training/rollout_probs_diff_max", -1), 0.172270123, 1e-8);
    assert_near(df_metrics_get(m, "rollout_corr/rollout_log_ppl", -1), 1.0, 1e-12);
    assert_near(df_metrics_get(m, "rollout_corr/training_log_ppl", -1), 1.0, 1e-12);
    assert_near(df_metrics_get(m, "rollout_corr/rollout_is_ratio_fraction_high", -1), 1 / 3.0, 1e-12);
    df_metrics_free(m);
}

/* Identical streams: no mismatch; no tokens: zeros and nothing recorded; malformed input. */
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
    assert_near(mm.chi2_token, 0, 1e-15);
    assert_near(mm.chi2_seq, 0, 1e-15);
    assert_near(mm.ppl_ratio, 1, 1e-15);
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

/* Every loss and aggregation mode through the actor: micro-batches of 1 sample and
 * of the whole batch take the same step (seq-mean-token-sum-norm with the actor's
 * loss_agg_norm_length), with TIS weights as well. */
static void test_actor_micro_invariant(void **state)
{
    (void)state;
    const char *losses[] = {"vanilla", "gspo", "gpg", "cpgd"};
    const char *modes[] = {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"};
    for (size_t i = 0; i < 4; i++)
        for (size_t j = 0; j < 3; j++)
            for (int tis = 0; tis < 2; tis++) {
                df_actor_params p1 = actor_params(losses[i], modes[j], 1);
                df_actor_params p4 = actor_params(losses[i], modes[j], 4);
                p1.tis_imp_ratio_cap = p4.tis_imp_ratio_cap = tis ? 1.2 : 0;
                double l1, l4;
                df_model *x1 = actor_update(&p1, tis, &l1), *x4 = actor_update(&p4, tis, &l4);
                if (df_test_max_param_diff(x1, x4) > 1e-5 || fabs(l1 - l4) > 1e-6 || !isfinite(l1))
                    fail_msg("%s / %s / tis %d: param diff %g, pg_loss %g vs %g", losses[i], modes[j], tis,
                             df_test_max_param_diff(x1, x4), l1, l4);
                df_model_free(x1), df_model_free(x4);
            }
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
    assert_near(l1, l0, 1e-7);
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

/* The worker's actor settings: loss_scale_factor else data.max_response_length; CPGD
 * selected by use_cpgd_loss or adv_estimator=cpgd; the policy_loss.* keys; TIS cap. */
static void test_worker_actor_params(void **state)
{
    (void)state;
    df_dag_worker w;
    memset(&w, 0, sizeof w);
    w.n_samples = 1, w.actor_layout.dp_size = 1, w.seed = 9;
    const char *ov[] = {"data.max_response_length=96", ACTOR_KEY "policy_drift_coeff=0.01",
                        ACTOR_KEY "policy_loss.kl_cov_ratio=0.002", ACTOR_KEY "tis_imp_ratio_cap=2.5"};
    df_config *c = NULL;
    assert_int_equal(df_config_load(df_config_schema_train(), NULL, ov, 4, &c), DF_OK);
    df_actor_params p;
    df_worker_actor_params(&w, c, &p);
    assert_int_equal(p.loss.loss_agg_norm_length, 96);
    assert_string_equal(p.loss.policy_loss, "vanilla");
    assert_near(p.loss.policy_drift_coeff, 0.01, 1e-12);
    assert_near(p.loss.kl_cov_ratio, 0.002, 1e-12);
    assert_near(p.loss.clip_cov_lb, 1.0, 0);
    assert_near(p.loss.clip_cov_ub, 5.0, 0);
    assert_near(p.tis_imp_ratio_cap, 2.5, 0);
    assert_true(p.seed == 9);
    df_config_free(c);
    const char *ov2[] = {ACTOR_KEY "loss_scale_factor=4096", ACTOR_KEY "use_cpgd_loss=true"};
    assert_int_equal(df_config_load(df_config_schema_train(), NULL, ov2, 2, &c), DF_OK);
    df_worker_actor_params(&w, c, &p);
    assert_int_equal(p.loss.loss_agg_norm_length, 4096);
    assert_string_equal(p.loss.policy_loss, "cpgd");
    df_config_free(c);
    const char *ov3[] = {ACTOR_KEY "use_cpgd_loss=true", ACTOR_KEY "policy_loss.loss_mode=gspo"};
    assert_int_equal(df_config_load(df_config_schema_train(), NULL, ov3, 2, &c), DF_OK);
    df_worker_actor_params(&w, c, &p);
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
        cmocka_unit_test(test_mismatch_metrics),
        cmocka_unit_test(test_mismatch_edges),
        cmocka_unit_test(test_actor_micro_invariant),
        cmocka_unit_test(test_actor_tis),
        cmocka_unit_test(test_actor_norm_length_and_cov),
        cmocka_unit_test(test_actor_set_loss),
        cmocka_unit_test(test_worker_actor_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
