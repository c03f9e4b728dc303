/* The decoupled PPO objective (include/distflow/async.h df_behav_imp_weights; AReaL
 * use_decoupled_loss): the weights by hand, the objective by hand, the identity with the standard
 * loss when the proximal and behaviour policies agree (every policy loss, every loss_agg_mode,
 * in the library and through the actor), the cap, the actor's seam (which column is the proximal
 * policy) and its metrics, and the config keys. */
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
#include "distflow/async.h"
#include "distflow/config.h"
#include "distflow/metrics.h"
#include "distflow/train_config.h"
#include "engine/actor.h"
#include "workers/worker_internal.h"

#define ACTOR_KEY "actor_rollout_ref.actor."

static const char *const LOSSES[] = {"vanilla", "gspo", "gpg", "cpgd", "clip_cov", "kl_cov"};
static const char *const MODES[] = {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                    "seq-mean-token-sum-norm", "seq-mean-token-sum-norm-seqavg"};
enum { N_LOSSES = 6, N_MODES = 5 };

/* Relative tolerance of a double expression of a few roundings against a 10-digit literal, and of
   a float product of it (one float rounding, u32 = 2^-24). */
#define LIT10 1e-10
#define F32 1.2e-7

/*
 * Five tokens, cap 2, the last token outside the mask (an appended multi-turn token):
 *   prox  = -1,  -0.5,  -2,    -0.125, -3        (all exact in float)
 *   behav = -1,  -1,    -1.75, -2.5,   -3
 *   x     =  0,   0.5,  -0.25,  2.375,  0
 *   r=e^x =  1,   1.6487212707, 0.7788007831, 10.7510131861, 1
 *   kept (r <= 2): yes, yes, yes, no, yes
 *   w_in  =  0.1, 0.2,  0.3,   0.4,    0.5
 *   w_out =  0.1, 0.3297442541, 0.2336402349, 0, 0.5
 * Statistics over the four masked-in tokens: n_tokens 4, n_kept 3,
 *   weight_sum = 1 + 1.6487212707 + 0.7788007831 = 3.4275220538, approx_kl_sum = 0.5 - 0.25 = 0.25.
 */
static void test_weights_by_hand(void **state)
{
    (void)state;
    const float prox[] = {-1, -0.5f, -2, -0.125f, -3}, behav[] = {-1, -1, -1.75f, -2.5f, -3};
    const float w_in[] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
    const int32_t mask[] = {1, 1, 1, 1, 0};
    float w[5];
    df_behav_stats st;
    assert_int_equal(df_behav_imp_weights(5, prox, behav, mask, 2.0, w_in, w, &st), 0);
    const double want[] = {0.1, 0.3297442541, 0.2336402349, 0, 0.5};
    for (int t = 0; t < 5; t++)
        assert_near(w[t], want[t], 2 * F32 * want[t] + 1e-10);
    assert_true(w[3] == 0.0f); /* dropped, not clipped to the cap */
    assert_int_equal(st.n_tokens, 4);
    assert_int_equal(st.n_kept, 3);
    assert_near(st.weight_sum, 3.4275220538, 1e-9);
    assert_near(st.approx_kl_sum, 0.25, 0); /* exact: sums of exact float differences */
    /* no cap: every token kept, w_out[3] = 0.4 * 10.7510131861 = 4.3004052744 */
    assert_int_equal(df_behav_imp_weights(5, prox, behav, NULL, 0, w_in, w, &st), 0);
    assert_near(w[3], 4.3004052744, 4.3004052744 * 2 * F32);
    assert_int_equal(st.n_tokens, 5);
    assert_int_equal(st.n_kept, 5);
    /* in place, w_in NULL = 1 */
    memcpy(w, w_in, sizeof w);
    assert_int_equal(df_behav_imp_weights(5, prox, behav, NULL, 2.0, w, w, NULL), 0);
    assert_near(w[1], 0.3297442541, 2 * F32 * 0.33);
    assert_int_equal(df_behav_imp_weights(5, prox, behav, NULL, 2.0, NULL, w, NULL), 0);
    assert_true(w[0] == 1.0f);
    assert_near(w[1], 1.6487212707, F32 * 1.65);
}

/* AReaL keeps a weight equal to the cap (behav_imp_weight <= cap) and drops the next one up. */
static void test_cap_boundary(void **state)
{
    (void)state;
    const float prox[] = {-0.5f}, behav[] = {-1};
    float w;
    df_behav_stats st;
    double r = exp(0.5); /* the same double the function computes */
    assert_int_equal(df_behav_imp_weights(1, prox, behav, NULL, r, NULL, &w, &st), 0);
    assert_int_equal(st.n_kept, 1);
    assert_true(w == (float)r);
    assert_int_equal(df_behav_imp_weights(1, prox, behav, NULL, nextafter(r, 0), NULL, &w, &st), 0);
    assert_int_equal(st.n_kept, 0);
    assert_true(w == 0.0f);
}

static void test_weights_errors(void **state)
{
    (void)state;
    const float a[] = {-1}, b[] = {-1};
    float w;
    assert_error_mentions(df_behav_imp_weights(1, a, b, NULL, 1.0, NULL, &w, NULL), DF_EINVAL, "> 1");
    assert_error_mentions(df_behav_imp_weights(1, a, b, NULL, 0.5, NULL, &w, NULL), DF_EINVAL,
                          "behav_imp_weight_cap");
    assert_error_mentions(df_behav_imp_weights(1, a, b, NULL, NAN, NULL, &w, NULL), DF_EINVAL,
                          "behav_imp_weight_cap");
    assert_error_mentions(df_behav_imp_weights(1, a, b, NULL, INFINITY, NULL, &w, NULL), DF_EINVAL,
                          "behav_imp_weight_cap");
    assert_error_mentions(df_behav_imp_weights(-1, a, b, NULL, 2, NULL, &w, NULL), DF_EINVAL, "negative");
    assert_error_mentions(df_behav_imp_weights(1, a, NULL, NULL, 2, NULL, &w, NULL), DF_EINVAL, "NULL");
    assert_error_mentions(df_behav_imp_weights(1, a, b, NULL, 2, NULL, NULL, NULL), DF_EINVAL, "NULL");
    df_behav_stats st = {.n_tokens = 7};
    assert_int_equal(df_behav_imp_weights(0, NULL, NULL, NULL, 2, NULL, NULL, &st), 0);
    assert_int_equal(st.n_tokens, 0);
}

/*
 * The objective by hand: one response of three tokens, vanilla PPO (clip 0.2, c = 3), token-mean
 * (w = 1/3), cap 5:
 *   log_prob = -1, -0.5, -2;  prox = -1.125, -0.5, -1.5;  behav = -1.375, -0.875, -0.25;  A = 1, -1, -2
 *   ratio r = e^(log_prob - prox) = e^0.125, 1, e^-0.5 = 1.1331484531, 1, 0.6065306597
 *   token loss: -A r = -1.1331484531 (in range); 1 (r = 1); A < 0 and r < 0.8: -A 0.8 = 1.6 (clipped,
 *               dual clip 6 not reached)
 *   b = e^(prox - behav) = e^0.25, e^0.375, e^-1.25 = 1.2840254167, 1.4549914146, 0.2865047969
 *   loss = (b0 l0 + b1 l1 + b2 l2) / 3 = (-1.4549914146 + 1.4549914146 + 0.4584076750) / 3 = 0.1528025583
 *   grad = w b (-A r) on unclipped tokens: -0.4849971382, 0.4849971382, 0
 * With prox and behav swapped (ratio against the behaviour policy, weight e^(behav - prox)) the loss is
 * 1.8833292641; the standard loss (no weight) is 0.4889505156.
 */
static void test_objective_by_hand(void **state)
{
    (void)state;
    const int64_t off[] = {0, 3};
    const float lp[] = {-1, -0.5f, -2}, prox[] = {-1.125f, -0.5f, -1.5f},
                behav[] = {-1.375f, -0.875f, -0.25f};
    const float adv[] = {1, -1, -2};
    float w[3], wb[3], g[3];
    assert_int_equal(df_loss_agg_weights("token-mean", 1, off, 3, 1, w), 0);
    df_policy_loss_input in = {.n = 1,
                               .offsets = off,
                               .log_prob = lp,
                               .advantages = adv,
                               .clip_ratio_low = 0.2f,
                               .clip_ratio_high = 0.2f,
                               .clip_ratio_c = 3};
    df_policy_loss_output out = {.grad = g};
    /* the decoupled assembly: weights from (prox, behav), ratio against prox */
    assert_int_equal(df_behav_imp_weights(3, prox, behav, NULL, 5.0, w, wb, NULL), 0);
    in.old_log_prob = prox, in.weights = wb;
    assert_int_equal(df_policy_loss_vanilla(&in, &out), 0);
    /* the weights are floats: each term carries a float rounding (relative F32) */
    assert_near(out.loss, 0.1528025583, 4 * F32);
    assert_near(g[0], -0.4849971382, 1e-7);
    assert_near(g[1], 0.4849971382, 1e-7);
    assert_true(g[2] == 0.0f);
    /* swapped roles */
    assert_int_equal(df_behav_imp_weights(3, behav, prox, NULL, 5.0, w, wb, NULL), 0);
    in.old_log_prob = behav;
    assert_int_equal(df_policy_loss_vanilla(&in, &out), 0);
    assert_near(out.loss, 1.8833292641, 4 * F32 * 2.5);
    /* the standard loss against prox */
    in.old_log_prob = prox, in.weights = w;
    assert_int_equal(df_policy_loss_vanilla(&in, &out), 0);
    assert_near(out.loss, 0.4889505156, 4 * F32);
}

/* Two responses (3 and 2 tokens) and an empty one; log-probs and advantages of both signs. */
static const int64_t OFF[] = {0, 3, 5, 5};
static const float LP[] = {-1.1f, -0.4f, -2.3f, -0.7f, -1.6f}, OLD[] = {-1.0f, -0.6f, -2.0f, -0.9f, -1.2f},
                   ADV[] = {0.8f, 0.8f, 0.8f, -1.2f, -1.2f};

/* With prox == behav every weight is exactly 1: loss, gradient and statistics of every policy loss
   under every aggregation are those of the standard loss, bit for bit. */
static void test_identity_when_policies_agree(void **state)
{
    (void)state;
    for (int i = 0; i < N_LOSSES; i++)
        for (int j = 0; j < N_MODES; j++) {
            df_policy_loss_fn fn;
            assert_int_equal(df_policy_loss_lookup(LOSSES[i], &fn), 0);
            float w[5], wb[5], g0[5], g1[5];
            assert_int_equal(df_loss_agg_weights_ex(MODES[j], 3, OFF, 5, 2, 4, w), 0);
            df_behav_stats st;
            assert_int_equal(df_behav_imp_weights(5, OLD, OLD, NULL, 5.0, w, wb, &st), 0);
            assert_int_equal(st.n_kept, 5);
            df_policy_loss_input in = {.n = 3,
                                       .offsets = OFF,
                                       .log_prob = LP,
                                       .old_log_prob = OLD,
                                       .advantages = ADV,
                                       .weights = w,
                                       .clip_ratio_low = 0.2f,
                                       .clip_ratio_high = 0.28f,
                                       .clip_ratio_c = 3,
                                       .policy_drift_coeff = 0.5,
                                       .clip_cov_ratio = 0.4,
                                       .clip_cov_lb = -5,
                                       .clip_cov_ub = 5,
                                       .kl_cov_ratio = 0.4,
                                       .ppo_kl_coef = 1,
                                       .seed = 7};
            df_policy_loss_output o0 = {.grad = g0}, o1 = {.grad = g1};
            assert_int_equal(fn(&in, &o0), 0);
            in.weights = wb;
            assert_int_equal(fn(&in, &o1), 0);
            if (o0.loss != o1.loss || memcmp(g0, g1, sizeof g0) || o0.pg_clipfrac != o1.pg_clipfrac ||
                o0.ppo_kl != o1.ppo_kl)
                fail_msg("%s / %s: %.17g vs %.17g", LOSSES[i], MODES[j], o0.loss, o1.loss);
            assert_true(o0.loss != 0); /* a loss that is there to compare */
        }
}

/* The weights scale each token's loss and gradient under every aggregation: a policy loss is
   linear in its per-token weights, so the decoupled gradient is b_t times the standard one for
   the token-level losses (vanilla, gpg, cpgd), whatever the aggregation weights. */
static void test_each_agg_mode_scales_tokens(void **state)
{
    (void)state;
    const float behav[] = {-1.3f, -0.2f, -2.1f, -0.95f, -1.5f};
    const char *token_losses[] = {"vanilla", "gpg", "cpgd"};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < N_MODES; j++) {
            df_policy_loss_fn fn;
            assert_int_equal(df_policy_loss_lookup(token_losses[i], &fn), 0);
            float w[5], wb[5], g0[5], g1[5];
            assert_int_equal(df_loss_agg_weights_ex(MODES[j], 3, OFF, 5, 2, 4, w), 0);
            assert_int_equal(df_behav_imp_weights(5, OLD, behav, NULL, 0, w, wb, NULL), 0);
            df_policy_loss_input in = {.n = 3,
                                       .offsets = OFF,
                                       .log_prob = LP,
                                       .old_log_prob = OLD,
                                       .advantages = ADV,
                                       .weights = w,
                                       .clip_ratio_low = 0.2f,
                                       .clip_ratio_high = 0.28f,
                                       .clip_ratio_c = 3,
                                       .policy_drift_coeff = 0.5};
            df_policy_loss_output o0 = {.grad = g0}, o1 = {.grad = g1};
            assert_int_equal(fn(&in, &o0), 0);
            in.weights = wb;
            assert_int_equal(fn(&in, &o1), 0);
            for (int t = 0; t < 5; t++) {
                double b = exp((double)OLD[t] - behav[t]);
                /* both gradients are float roundings of double products: 3 float roundings apart */
                if (fabs(g1[t] - b * g0[t]) > 4 * F32 * fabs(b * g0[t]) + 1e-30)
                    fail_msg("%s / %s token %d: grad %.9g, b * standard %.9g", token_losses[i], MODES[j], t,
                             g1[t], b * g0[t]);
            }
            if (!(fabs(o1.loss - o0.loss) > 1e-3 * fabs(o0.loss))) /* the weights matter here (>= 1% apart) */
                fail_msg("%s / %s: loss %.9g with the weights, %.9g without", token_losses[i], MODES[j],
                         o1.loss, o0.loss);
        }
}

/* ---------------------------------------------------------------------- through the actor */

static df_actor_params actor_params(const char *loss, const char *mode)
{
    df_actor_params p = {.optim.lr = 1e-2,
                         .optim.beta1 = 0.9,
                         .optim.beta2 = 0.999,
                         .optim.adam_eps = 1e-8,
                         .optim.grad_clip = 1e9,
                         .micro_batch_size = 2,
                         .logprob_micro_batch_size = 2,
                         .loss.ppo_epochs = 2,
                         .loss.policy_loss = loss,
                         .loss.loss_agg_mode = mode,
                         .loss.clip_ratio_low = 0.2,
                         .loss.clip_ratio_high = 0.2,
                         .loss.clip_ratio_c = 3.0,
                         .loss.loss_agg_norm_length = 8,
                         .loss.policy_drift_coeff = 0.5,
                         .loss.clip_cov_ratio = 0.3,
                         .loss.clip_cov_lb = -1,
                         .loss.clip_cov_ub = 5,
                         .loss.kl_cov_ratio = 0.3,
                         .loss.ppo_kl_coef = 1,
                         .temperature = 1.0f};
    return p;
}

/* Four samples (one empty response); old_log_probs from the actor, shifted by `shift` per token so the
   first ratio is not 1; rollout_log_probs = old + ro_shift per token (NULL: no such column). */
static df_batch *actor_batch(df_actor *a, const float *shift, const float *ro_shift)
{
    static const int64_t po[] = {0, 3, 4, 6, 10}, ro[] = {0, 2, 5, 5, 6};
    static const int32_t pt[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, rt[] = {11, 12, 13, 14, 15, 16};
    df_batch *b = df_batch_new(4);
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", po, pt), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", ro, rt), 0);
    assert_int_equal(df_actor_compute_log_prob(a, b, "old_log_probs", NULL), 0);
    float *adv, *old = (float *)df_batch_column(b, "old_log_probs")->data, *rl;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "advantages", "response_ids", &adv), 0);
    const float sample_adv[] = {0.9f, -0.6f, 0.0f, 1.3f};
    for (int i = 0; i < 4; i++)
        for (int64_t t = ro[i]; t < ro[i + 1]; t++)
            adv[t] = sample_adv[i];
    for (int t = 0; shift && t < 6; t++)
        old[t] += shift[t];
    if (ro_shift) {
        assert_int_equal(df_batch_alloc_tok_f32_like(b, "rollout_log_probs", "response_ids", &rl), 0);
        for (int t = 0; t < 6; t++)
            rl[t] = old[t] + ro_shift[t];
    }
    return b;
}

/* One update; the model after it and the metrics (caller frees both). */
static df_model *update(const df_actor_params *p, const float *shift, const float *ro_shift, df_metrics **m)
{
    df_actor *a;
    assert_int_equal(df_actor_create(df_test_micro_model(5), p, true, &a), 0);
    df_batch *b = actor_batch(a, shift, ro_shift);
    *m = df_metrics_new();
    if (df_actor_update_policy(a, b, *m))
        fail_msg("update: %s", df_last_error());
    df_model *out;
    assert_int_equal(df_model_clone(df_actor_model(a), &out), 0);
    df_batch_free(b);
    df_actor_free(a);
    return out;
}

/* Through the actor, every policy loss and aggregation: use_decoupled_loss with rollout_log_probs
   equal to old_log_probs (weights exactly 1) takes exactly the standard step; with a real mismatch it
   takes another. */
static void test_actor_identity_every_loss(void **state)
{
    (void)state;
    const float zero[6] = {0}, mism[6] = {0.3f, -0.2f, 0.1f, 0.25f, -0.3f, 0.2f};
    for (int i = 0; i < N_LOSSES; i++)
        for (int j = 0; j < N_MODES; j++) {
            df_actor_params p = actor_params(LOSSES[i], MODES[j]);
            df_metrics *m0, *m1, *m2;
            df_model *x0 = update(&p, NULL, NULL, &m0);
            p.use_decoupled_loss = true, p.behav_imp_weight_cap = 5;
            df_model *x1 = update(&p, NULL, zero, &m1);
            df_model *x2 = update(&p, NULL, mism, &m2);
            double d1 = df_test_max_param_diff(x0, x1), d2 = df_test_max_param_diff(x0, x2);
            double l0 = df_metrics_get(m0, "actor/pg_loss", NAN),
                   l1 = df_metrics_get(m1, "actor/pg_loss", NAN);
            if (d1 != 0 || l0 != l1)
                fail_msg("%s / %s: prox == behav moved the step by %.3g (pg_loss %.17g vs %.17g)", LOSSES[i],
                         MODES[j], d1, l0, l1);
            /* a weight e^(+-0.3) on tokens changes the step by a fair part of lr = 1e-2 */
            if (!(d2 > 1e-5))
                fail_msg("%s / %s: the behaviour weights did not change the step (%.3g)", LOSSES[i], MODES[j],
                         d2);
            assert_near(df_metrics_get(m1, "actor/behave_imp_weight", NAN), 1.0, 0);
            assert_near(df_metrics_get(m1, "actor/behave_filtered_frac", NAN), 0.0, 0);
            assert_false(df_metrics_has(m0, "actor/behave_imp_weight"));
            df_model_free(x0), df_model_free(x1), df_model_free(x2);
            df_metrics_free(m0), df_metrics_free(m1), df_metrics_free(m2);
        }
}

/*
 * The seam: the actor takes the ratio against old_log_probs (the proximal policy) and the weight
 * e^(old - rollout) (rollout_log_probs: the behaviour policy). Its first step's pg_loss (one epoch,
 * one mini-batch) must match that assembly from the library functions, at the current log-probs,
 * and not the swapped one; one token above the cap of 1.5 is dropped. The old log-probs are
 * shifted from the current ones so that the ratio is not 1 and the roles differ.
 */
static void test_actor_seam(void **state)
{
    (void)state;
    const float shift[6] = {0.15f, -0.1f, 0.05f, 0.12f, -0.08f, 0.1f};
    const float ro_shift[6] = {0.3f, -0.6f, 0.2f, 0.25f, -0.3f, 0.2f}; /* token 1: e^0.6 = 1.82 > 1.5 */
    df_actor_params p = actor_params("vanilla", "token-mean");
    p.loss.ppo_epochs = 1;
    p.use_decoupled_loss = true, p.behav_imp_weight_cap = 1.5;
    df_actor *a;
    assert_int_equal(df_actor_create(df_test_micro_model(5), &p, true, &a), 0);
    df_batch *b = actor_batch(a, shift, NULL);
    df_metrics *m = df_metrics_new();
    assert_error_mentions(df_actor_update_policy(a, b, m), DF_EINVAL, "rollout_log_probs");
    df_batch_free(b);
    b = actor_batch(a, shift, ro_shift);
    assert_int_equal(df_actor_compute_log_prob(a, b, "now", NULL), 0);
    const float *now = df_batch_column(b, "now")->data, *old = df_batch_column(b, "old_log_probs")->data,
                *ro = df_batch_column(b, "rollout_log_probs")->data,
                *adv = df_batch_column(b, "advantages")->data;
    const int64_t *off = df_batch_offsets(b, "response_ids");
    float w[6], wb[6];
    assert_int_equal(df_loss_agg_weights("token-mean", 4, off, 6, 3, w), 0);
    df_policy_loss_input in = {.n = 4,
                               .offsets = off,
                               .log_prob = now,
                               .advantages = adv,
                               .clip_ratio_low = 0.2f,
                               .clip_ratio_high = 0.2f,
                               .clip_ratio_c = 3};
    df_policy_loss_output want = {0}, swapped = {0};
    df_behav_stats st;
    assert_int_equal(df_behav_imp_weights(6, old, ro, NULL, 1.5, w, wb, &st), 0);
    assert_int_equal(st.n_kept, 5);
    in.old_log_prob = old, in.weights = wb;
    assert_int_equal(df_policy_loss_vanilla(&in, &want), 0);
    assert_int_equal(df_behav_imp_weights(6, ro, old, NULL, 1.5, w, wb, NULL), 0);
    in.old_log_prob = ro;
    assert_int_equal(df_policy_loss_vanilla(&in, &swapped), 0);
    assert_int_equal(df_actor_update_policy(a, b, m), 0);
    double got = df_metrics_get(m, "actor/pg_loss", NAN);
    /* the update's forward and the log-prob pass differ by rounding only (~1e-7 on log-probs) */
    double tol = 1e-5 * (1 + fabs(want.loss));
    if (!(fabs(got - want.loss) <= tol) || !(fabs(swapped.loss - want.loss) > 100 * tol))
        fail_msg("pg_loss %.9g, decoupled assembly %.9g, swapped %.9g (tol %.3g)", got, want.loss,
                 swapped.loss, tol);
    /* AReaL's statistics: means over the 5 kept tokens, 1 of 6 dropped */
    assert_near(df_metrics_get(m, "actor/behave_filtered_frac", NAN), 1.0 / 6.0, 1e-15);
    assert_near(df_metrics_get(m, "actor/behave_imp_weight", NAN), st.weight_sum / 5, 1e-12);
    assert_near(df_metrics_get(m, "actor/behave_approx_kl", NAN), st.approx_kl_sum / 5, 1e-12);
    /* TIS and the decoupled weights together are refused */
    df_actor_free(a);
    p.tis_imp_ratio_cap = 2;
    assert_int_equal(df_actor_create(df_test_micro_model(5), &p, true, &a), 0);
    assert_error_mentions(df_actor_update_policy(a, b, m), DF_EINVAL, "tis_imp_ratio_cap");
    df_metrics_free(m);
    df_batch_free(b);
    df_actor_free(a);
}

/* ---------------------------------------------------------------------- config */

static const char *const BASE = DF_TEST_GRPO_YAML;

/* Load BASE + one or two overrides and validate on one rank. */
static int validate2(const char *a, const char *b)
{
    const char *ov[] = {a, b};
    df_config *c = NULL;
    int rc = df_config_load_text(df_config_schema_train(), BASE, "base.yaml", ov, b ? 2 : 1, &c);
    if (rc)
        fail_msg("load failed: %s", df_last_error());
    rc = df_config_validate_train(c, 1);
    df_config_free(c);
    return rc;
}

static void test_config_keys(void **state)
{
    (void)state;
    assert_int_equal(validate2(ACTOR_KEY "use_decoupled_loss=true", NULL), 0);
    assert_int_equal(validate2(ACTOR_KEY "use_decoupled_loss=true", ACTOR_KEY "behav_imp_weight_cap=-1"), 0);
    assert_error_mentions(validate2(ACTOR_KEY "behav_imp_weight_cap=3", NULL), DF_EINVAL,
                          "use_decoupled_loss");
    assert_error_mentions(validate2(ACTOR_KEY "use_decoupled_loss=true", ACTOR_KEY "tis_imp_ratio_cap=2"),
                          DF_EINVAL, "set one");
    assert_error_mentions(validate2(ACTOR_KEY "use_decoupled_loss=true", ACTOR_KEY "behav_imp_weight_cap=1"),
                          DF_EINVAL, "must be > 1");
    /* the worker hands both to the actor */
    df_dag_worker w;
    memset(&w, 0, sizeof w);
    w.actor.layout.dp_size = 1;
    const char *ov[] = {ACTOR_KEY "use_decoupled_loss=true", ACTOR_KEY "behav_imp_weight_cap=2.5"};
    df_config *c = NULL;
    assert_int_equal(df_config_load(df_config_schema_train(), NULL, ov, 2, &c), DF_OK);
    assert_int_equal(df_worker_settings_init(&w.global, c), DF_OK);
    df_actor_params p;
    df_worker_actor_params(&w, &p);
    assert_true(p.use_decoupled_loss);
    assert_near(p.behav_imp_weight_cap, 2.5, 0);
    df_config_free(c);
    assert_int_equal(df_config_load(df_config_schema_train(), NULL, NULL, 0, &c), DF_OK);
    assert_int_equal(df_worker_settings_init(&w.global, c), DF_OK);
    df_worker_actor_params(&w, &p);
    assert_false(p.use_decoupled_loss);
    assert_near(p.behav_imp_weight_cap, 5.0, 0); /* AReaL's default */
    df_config_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weights_by_hand),
        cmocka_unit_test(test_cap_boundary),
        cmocka_unit_test(test_weights_errors),
        cmocka_unit_test(test_objective_by_hand),
        cmocka_unit_test(test_identity_when_policies_agree),
        cmocka_unit_test(test_each_agg_mode_scales_tokens),
        cmocka_unit_test(test_actor_identity_every_loss),
        cmocka_unit_test(test_actor_seam),
        cmocka_unit_test(test_config_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
