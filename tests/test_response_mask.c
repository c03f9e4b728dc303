/*
 * response_mask (multi-turn batches: 1 on the model's tokens, 0 on appended tool / user
 * tokens) end to end: the loss aggregation weights and counts, the in-reward KL penalty, the
 * batch accessor, the entropy metric, and the seam: an actor update whose pg_loss and kl_loss
 * are the means over the model tokens only, so flipping the mask of the appended tokens changes them, while an
 * all-ones mask changes nothing (bit for bit).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/algo.h"
#include "distflow/metrics.h"
#include "engine/actor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* 4 responses of 2, 3, 0, 1 tokens (df_test_small_batch); the last is all appended */
static const int64_t RO[] = {0, 2, 5, 5, 6};
static const int32_t MASK[] = {1, 0, 0, 1, 1, 0};
static const int32_t ONES[] = {1, 1, 1, 1, 1, 1};

static void test_agg_weights(void **state)
{
    (void)state;
    float w[6], ref[6];
    int64_t tk, sq;
    df_loss_agg_count_masked(4, RO, MASK, &tk, &sq);
    assert_int_equal(tk, 3);
    assert_int_equal(sq, 2); /* the all-appended response is not counted */
    df_loss_agg_count_masked(4, RO, NULL, &tk, &sq);
    assert_int_equal(tk, 6);
    assert_int_equal(sq, 3);
    /* token-mean: 1 / model tokens on model tokens, 0 elsewhere */
    assert_int_equal(df_loss_agg_weights_masked("token-mean", 4, RO, MASK, 3, 2, 0, w), 0);
    for (int t = 0; t < 6; t++)
        assert_true(w[t] == (MASK[t] ? 1.0f / 3.0f : 0.0f));
    /* seq-mean-token-mean: each response's model tokens average, over responses with some */
    assert_int_equal(df_loss_agg_weights_masked("seq-mean-token-mean", 4, RO, MASK, 3, 2, 0, w), 0);
    const float want[6] = {0.5f, 0, 0, 0.25f, 0.25f, 0};
    for (int t = 0; t < 6; t++)
        assert_true(fabsf(w[t] - want[t]) <= 1e-7f);
    /* seq-mean-token-sum: 1 / responses */
    assert_int_equal(df_loss_agg_weights_masked("seq-mean-token-sum", 4, RO, MASK, 3, 2, 0, w), 0);
    for (int t = 0; t < 6; t++)
        assert_true(w[t] == (MASK[t] ? 0.5f : 0.0f));
    /* NULL and all-ones masks are the unmasked weights, bit for bit */
    static const char *const modes[] = {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                        "seq-mean-token-sum-norm"};
    for (int k = 0; k < 4; k++) {
        assert_int_equal(df_loss_agg_weights_ex(modes[k], 4, RO, 6, 3, 8, ref), 0);
        assert_int_equal(df_loss_agg_weights_masked(modes[k], 4, RO, ONES, 6, 3, 8, w), 0);
        assert_memory_equal(w, ref, sizeof w);
        assert_int_equal(df_loss_agg_weights_masked(modes[k], 4, RO, NULL, 6, 3, 8, w), 0);
        assert_memory_equal(w, ref, sizeof w);
    }
    /* the totals are model tokens: the unmasked count is refused as a local excess */
    assert_int_equal(df_loss_agg_weights_masked("token-mean", 4, RO, MASK, 2, 2, 0, w), DF_EINVAL);
}

static void test_kl_in_reward(void **state)
{
    (void)state;
    const float sc[6] = {0, 1, 0, 0, 0, 2};
    const float old[6] = {-1.0f, -2.0f, -0.5f, -1.5f, -0.2f, -3.0f};
    const float ref[6] = {-1.2f, -1.0f, -0.7f, -1.0f, -0.4f, -1.0f};
    float r[6], kl[6];
    double mean;
    assert_int_equal(df_kl_penalty("kl", 6, old, ref, kl, NULL), 0);
    assert_int_equal(df_kl_apply_in_reward_masked("kl", 4, RO, MASK, sc, old, ref, 0.5f, r, &mean), 0);
    for (int t = 0; t < 6; t++)
        assert_true(r[t] == (MASK[t] ? (float)((double)sc[t] - 0.5 * kl[t]) : sc[t]));
    /* per-response means over model tokens (0 for none), averaged over the 4 responses */
    double m0 = kl[0], m1 = (kl[3] + kl[4]) / 2.0;
    assert_true(fabs(mean - (m0 + m1) / 4.0) <= 1e-6);
    float r2[6];
    double mean2;
    assert_int_equal(df_kl_apply_in_reward_masked("kl", 4, RO, ONES, sc, old, ref, 0.5f, r, &mean), 0);
    assert_int_equal(df_kl_apply_in_reward("kl", 4, RO, sc, old, ref, 0.5f, r2, &mean2), 0);
    assert_memory_equal(r, r2, sizeof r);
    assert_true(mean == mean2);
}

static void test_batch_accessor(void **state)
{
    (void)state;
    df_batch *b = df_test_small_batch();
    const int32_t *m = (const int32_t *)1;
    assert_int_equal(df_batch_response_mask(b, &m), 0);
    assert_null(m); /* none: every token is the model's */
    assert_int_equal(df_batch_set_tok_i32(b, "response_mask", RO, MASK), 0);
    assert_int_equal(df_batch_response_mask(b, &m), 0);
    assert_memory_equal(m, MASK, sizeof MASK);
    static const int64_t other[] = {0, 1, 5, 5, 6};
    assert_int_equal(df_batch_set_tok_i32(b, "response_mask", other, MASK), 0);
    assert_int_equal(df_batch_response_mask(b, &m), DF_EINVAL);
    assert_null(m);
    float f[6] = {0};
    assert_int_equal(df_batch_set_tok_f32(b, "response_mask", RO, f), 0);
    assert_int_equal(df_batch_response_mask(b, &m), DF_EINVAL);
    df_batch_free(b);
}

/* GAE over a multi-turn batch (verl): appended tokens are no steps, so the model tokens' GAE
 * equals GAE over the responses with their appended tokens removed (bit for bit before and
 * after the whitening, whose statistics are the model tokens'); an appended token carries the
 * next model token's advantage. reward at each response's last token, as the reward node puts it. */
static void test_gae_skips_appended_tokens(void **state)
{
    (void)state;
    static const int64_t ro[] = {0, 5, 9};
    static const int32_t mask[] = {1, 1, 0, 0, 1, 0, 1, 1, 1};
    const float rew[9] = {0, 0, 0, 0, 1.0f, 0, 0, 0, -0.5f};
    const float val[9] = {0.3f, -0.2f, 0.9f, 0.4f, 0.1f, 0.7f, -0.6f, 0.25f, 0.05f};
    float adv[9], ret[9], adv_c[9], ret_c[9], rew_c[9], val_c[9];
    int64_t ro_c[3] = {0, 0, 0};
    int k = 0;
    for (int i = 0; i < 2; i++) {
        for (int64_t t = ro[i]; t < ro[i + 1]; t++)
            if (mask[t]) {
                rew_c[k] = rew[t], val_c[k] = val[t];
                k++;
            }
        ro_c[i + 1] = k;
    }
    df_adv_input in = {.n = 2, .offsets = ro, .token_level_rewards = rew, .values = val, .gamma = 0.9f,
                       .lam = 0.8f, .response_mask = mask};
    df_adv_input cin = {.n = 2, .offsets = ro_c, .token_level_rewards = rew_c, .values = val_c, .gamma = 0.9f,
                        .lam = 0.8f};
    for (int defer = 0; defer < 2; defer++) {
        in.defer_whiten = cin.defer_whiten = defer;
        assert_int_equal(df_adv_gae(&in, adv, ret), 0);
        assert_int_equal(df_adv_gae(&cin, adv_c, ret_c), 0);
        for (int t = 0, j = 0; t < 9; t++) {
            if (mask[t]) {
                assert_memory_equal(&adv[t], &adv_c[j], sizeof(float));
                assert_memory_equal(&ret[t], &ret_c[j], sizeof(float));
                j++;
            } else if (defer) { /* the carried advantage: the next model token's */
                int64_t u = t;
                while (!mask[u])
                    u++;
                assert_memory_equal(&adv[t], &adv[u], sizeof(float));
            }
        }
    }
    /* the mask changes the answer: without it the appended tokens are steps */
    in.response_mask = NULL;
    in.defer_whiten = true;
    float plain[9];
    assert_int_equal(df_adv_gae(&in, plain, ret), 0);
    assert_true(plain[0] != adv[0]);
}

/* The rollout-training mismatch metrics over sampled tokens: the masked statistics are those of
 * the responses without their appended tokens (whose rollout log-prob is 0), bit for bit. */
static void test_mismatch_over_sampled_tokens(void **state)
{
    (void)state;
    const float old[6] = {-1.0f, -2.0f, -0.5f, -1.5f, -0.2f, -3.0f};
    const float ro[6] = {-1.1f, 0.0f, 0.0f, -1.4f, -0.3f, 0.0f};
    const int64_t ro_c[] = {0, 1, 3, 3, 3};
    const float old_c[3] = {old[0], old[3], old[4]}, ro_cv[3] = {ro[0], ro[3], ro[4]};
    df_rollout_mismatch a, b, c;
    assert_int_equal(df_rollout_mismatch_compute_masked(4, RO, MASK, old, ro, 2.0, &a), 0);
    assert_int_equal(df_rollout_mismatch_compute(4, ro_c, old_c, ro_cv, 2.0, &b), 0);
    assert_memory_equal(&a, &b, sizeof a);
    assert_int_equal(a.n_tokens, 3);
    assert_int_equal(a.n_seqs, 2);
    assert_int_equal(df_rollout_mismatch_compute(4, RO, old, ro, 2.0, &c), 0);
    assert_true(c.kl != a.kl); /* the appended tokens' 0 would weigh in */
}

/*
 * Every built-in policy loss given response_mask equals the same loss on the model tokens alone
 * (the appended ones cut out), bit for bit: loss, statistics, gradient; the appended tokens get
 * gradient 0. They carry weights, large log-ratios and advantages, so they would show anywhere
 * (gspo's sequence ratio, the covariance means and selection, every statistic). clip_cov_ratio 1
 * selects every candidate, so its random keys, which depend on token positions, do not matter.
 */
static void test_losses_mask_equals_cut(void **state)
{
    (void)state;
    static const int64_t off[] = {0, 4, 7, 9}, cut_off[] = {0, 2, 4, 5};
    static const int32_t mk[] = {1, 0, 0, 1, 1, 1, 0, 0, 1};
    static const float lp[] = {-1.0f, -4.0f, -3.0f, -0.7f, -2.0f, -1.6f, -0.1f, -6.0f, -0.9f};
    static const float old[] = {-1.1f, -0.5f, -9.0f, -0.9f, -2.2f, -1.3f, -3.0f, -1.0f, -0.6f};
    static const float adv[] = {1.5f, 9.0f, -7.0f, 1.5f, -0.5f, -0.5f, 8.0f, 6.0f, 2.0f};
    static const float w[] = {0.2f, 0.3f, 0.3f, 0.2f, 0.2f, 0.2f, 0.5f, 0.5f, 0.2f};
    float clp[5], cold[5], cadv[5], cw[5];
    for (int t = 0, k = 0; t < 9; t++)
        if (mk[t])
            clp[k] = lp[t], cold[k] = old[t], cadv[k] = adv[t], cw[k++] = w[t];
    static const char *const names[] = {"vanilla", "gspo", "gpg", "cpgd", "clip_cov", "kl_cov"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        df_policy_loss_fn fn;
        assert_int_equal(df_policy_loss_lookup(names[i], &fn), 0);
        df_policy_loss_input in = {.n = 3, .offsets = off, .log_prob = lp, .old_log_prob = old,
                                   .advantages = adv, .weights = w, .clip_ratio_low = 0.2f,
                                   .clip_ratio_high = 0.2f, .clip_ratio_c = 3.0f, .policy_drift_coeff = 0.1,
                                   .clip_cov_ratio = 1.0, .clip_cov_lb = -10.0, .clip_cov_ub = 10.0,
                                   .kl_cov_ratio = 0.4, .ppo_kl_coef = 1.0, .seed = 7, .response_mask = mk};
        df_policy_loss_input cut = in;
        cut.offsets = cut_off, cut.log_prob = clp, cut.old_log_prob = cold, cut.advantages = cadv;
        cut.weights = cw, cut.response_mask = NULL;
        float g[9], cg[5];
        memset(g, 0x7f, sizeof g); /* the appended tokens' gradient must be written */
        df_policy_loss_output a = {.grad = g}, b = {.grad = cg};
        assert_int_equal(fn(&in, &a), 0);
        assert_int_equal(fn(&cut, &b), 0);
        print_message("%-8s loss %.9f clipfrac %.4f lower %.4f ppo_kl %.6f\n", names[i], a.loss, a.pg_clipfrac,
                      a.pg_clipfrac_lower, a.ppo_kl);
        assert_true(a.loss == b.loss && a.pg_clipfrac == b.pg_clipfrac);
        assert_true(a.pg_clipfrac_lower == b.pg_clipfrac_lower && a.ppo_kl == b.ppo_kl);
        for (int t = 0, k = 0; t < 9; t++)
            assert_true(g[t] == (mk[t] ? cg[k++] : 0.0f));
        in.response_mask = NULL; /* the appended tokens count again: the loss moves */
        df_policy_loss_output c = {0};
        assert_int_equal(fn(&in, &c), 0);
        assert_true(c.loss != a.loss);
    }
    /* the covariance selection's size and means are the model tokens' */
    df_policy_loss_input in = {.n = 3, .offsets = off, .log_prob = lp, .old_log_prob = old, .advantages = adv,
                               .weights = w, .kl_cov_ratio = 0.4, .ppo_kl_coef = 1.0, .response_mask = mk};
    df_cov_stats st;
    assert_int_equal(df_cov_stats_compute("kl_cov", &in, &st), 0);
    assert_int_equal(st.n_tokens, 5);
    assert_int_equal(st.n_select, 2); /* floor(0.4 * 5) */
    assert_true(fabs(st.adv_mean - (1.5 + 1.5 - 0.5 - 0.5 + 2.0) / 5.0) <= 1e-12);
}

/* ---- the seam: an actor update ------------------------------------------------------------ */

static df_actor_params params(void)
{
    df_actor_params p = {.optim.lr = 1e-2, .optim.beta1 = 0.9, .optim.beta2 = 0.999, .optim.adam_eps = 1e-8,
                         .optim.grad_clip = 1e9, .mini_batch_size = 0, .micro_batch_size = 2,
                         .logprob_micro_batch_size = 2, .loss.ppo_epochs = 1,
                         .loss.policy_loss = "vanilla", .loss.loss_agg_mode = "token-mean",
                         .loss.clip_ratio_low = 0.2, .loss.clip_ratio_high = 0.2, .loss.clip_ratio_c = 3.0,
                         .loss.entropy_coeff = 0.0, .use_kl_loss = true, .loss.kl_loss_coef = 0.1,
                         .loss.kl_loss_type = "low_var_kl", .temperature = 0.8f};
    return p;
}

typedef struct {
    double pg_loss, kl_loss, clipfrac, clipfrac_lower, ppo_kl;
    float old[6], ref[6], adv[6];
} update_out;

/* One PPO update of a fresh actor on the small batch with response_mask `mask` (NULL: none);
   shift (NULL: none) is added to the recomputed old log-probs, so token t's ratio is e^-shift[t]. */
static update_out update_shifted(const int32_t *mask, const float *shift)
{
    df_actor *a;
    df_actor_params p = params();
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, true, &a), 0);
    df_batch *b = df_test_small_batch();
    if (mask)
        assert_int_equal(df_batch_set_tok_i32(b, "response_mask", RO, mask), 0);
    assert_int_equal(df_actor_compute_log_prob(a, b, "old_log_probs", NULL), 0);
    float *ref, *adv;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "ref_log_prob", "response_ids", &ref), 0);
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "advantages", "response_ids", &adv), 0);
    float *old = df_batch_column(b, "old_log_probs")->data;
    update_out o;
    for (int j = 0; j < 6; j++) {
        old[j] += shift ? shift[j] : 0.0f;
        ref[j] = old[j] + 0.05f * (float)(j - 2);
        adv[j] = (float)(j % 3) - 0.8f;
        o.old[j] = old[j], o.ref[j] = ref[j], o.adv[j] = adv[j];
    }
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_actor_update_policy(a, b, m), 0);
    o.pg_loss = df_metrics_get(m, "actor/pg_loss", NAN);
    o.kl_loss = df_metrics_get(m, "actor/kl_loss", NAN);
    o.clipfrac = df_metrics_get(m, "actor/pg_clipfrac", NAN);
    o.clipfrac_lower = df_metrics_get(m, "actor/pg_clipfrac_lower", NAN);
    o.ppo_kl = df_metrics_get(m, "actor/ppo_kl", NAN);
    df_metrics_free(m);
    df_batch_free(b);
    df_actor_free(a);
    return o;
}

static update_out update(const int32_t *mask) { return update_shifted(mask, NULL); }

static void test_actor_update_sees_model_tokens_only(void **state)
{
    (void)state;
    update_out none = update(NULL), ones = update(ONES), masked = update(MASK);
    /* an all-ones mask is no mask */
    assert_true(memcmp(&none.pg_loss, &ones.pg_loss, sizeof(double)) == 0);
    assert_true(memcmp(&none.kl_loss, &ones.kl_loss, sizeof(double)) == 0);
    /* first epoch: the ratio is 1 (log-probs recomputed by the same forward), so the vanilla
       loss is -mean(A) and the KL loss mean(kl(old, ref)) over the weighted tokens */
    float kl[6];
    assert_int_equal(df_kl_penalty("low_var_kl", 6, masked.old, masked.ref, kl, NULL), 0);
    double pg_all = 0, pg_model = 0, kl_all = 0, kl_model = 0;
    for (int t = 0; t < 6; t++) {
        pg_all -= masked.adv[t] / 6.0;
        kl_all += kl[t] / 6.0;
        pg_model -= MASK[t] ? masked.adv[t] / 3.0 : 0;
        kl_model += MASK[t] ? kl[t] / 3.0 : 0;
    }
    print_message("pg_loss %.6f (model tokens %.6f, all %.6f), kl_loss %.6f (model %.6f, all %.6f)\n",
                  masked.pg_loss, pg_model, pg_all, masked.kl_loss, kl_model, kl_all);
    assert_true(fabs(masked.pg_loss - pg_model) <= 1e-5);
    assert_true(fabs(masked.kl_loss - kl_model) <= 1e-5);
    assert_true(fabs(none.pg_loss - pg_all) <= 1e-5);
    assert_true(fabs(none.kl_loss - kl_all) <= 1e-5);
    /* flipping the appended tokens' mask changes both */
    assert_true(fabs(masked.pg_loss - none.pg_loss) > 0.1);
    assert_true(fabs(masked.kl_loss - none.kl_loss) > 1e-4);
}

/*
 * actor/pg_clipfrac, pg_clipfrac_lower and ppo_kl are means over the model tokens (verl's
 * masked_mean over response_mask), by hand. A = (t mod 3) - 0.8 = -0.8 0.2 1.2 -0.8 0.2 1.2; the
 * old log-probs are shifted by s = 0.5 -0.5 -0.5 -1.5 0 -0.5, so the ratio r = e^-s (clip 0.2, c 3):
 *   t0 (model) r 0.607 < 0.8, A < 0: clipped           t3 (model) r 4.48: -A r = 3.58 > -A c = 2.4: lower
 *   t4 (model) r 1: neither                             t1, t2, t5 (tool) r 1.65 > 1.2, A > 0: clipped
 * Model tokens 0, 3, 4: pg_clipfrac 1/3, pg_clipfrac_lower 1/3, ppo_kl = mean(s) = -1/3. Averaged
 * over all tokens of the micro-batch (rows 0-1, tokens 0-4; the second holds only t5) they would
 * be 3/5, 1/5 and -2/5. Without a mask: 4/6, 1/6, -2.5/6. Bound: the log-ratio is -s up to the
 * float32 rounding of old + s and the two forwards (1e-5 as the loss test above); the clip
 * decisions are 0.1 away from their thresholds.
 */
static void test_actor_metrics_over_model_tokens(void **state)
{
    (void)state;
    static const float shift[6] = {0.5f, -0.5f, -0.5f, -1.5f, 0.0f, -0.5f};
    update_out masked = update_shifted(MASK, shift), none = update_shifted(NULL, shift);
    print_message("masked: clipfrac %.6f lower %.6f ppo_kl %.6f; none: %.6f %.6f %.6f\n", masked.clipfrac,
                  masked.clipfrac_lower, masked.ppo_kl, none.clipfrac, none.clipfrac_lower, none.ppo_kl);
    assert_true(fabs(masked.clipfrac - 1.0 / 3.0) <= 1e-12);
    assert_true(fabs(masked.clipfrac_lower - 1.0 / 3.0) <= 1e-12);
    assert_true(fabs(masked.ppo_kl + 1.0 / 3.0) <= 1e-5);
    assert_true(fabs(none.clipfrac - 4.0 / 6.0) <= 1e-12);
    assert_true(fabs(none.clipfrac_lower - 1.0 / 6.0) <= 1e-12);
    assert_true(fabs(none.ppo_kl + 2.5 / 6.0) <= 1e-5);
}

/* actor/entropy (the old-log-prob pass's mean) is over the model tokens: with a one-hot mask it
 * is that token's entropy, with MASK the mean of those; an all-ones mask is no mask. */
static double entropy_mean(df_actor *a, const int32_t *mask)
{
    df_batch *b = df_test_small_batch();
    if (mask)
        assert_int_equal(df_batch_set_tok_i32(b, "response_mask", RO, mask), 0);
    double ent;
    assert_int_equal(df_actor_compute_log_prob(a, b, "old_log_probs", &ent), 0);
    df_batch_free(b);
    return ent;
}

static void test_entropy_over_model_tokens(void **state)
{
    (void)state;
    df_actor *a;
    df_actor_params p = params();
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, false, &a), 0);
    double tok[6], want = 0;
    for (int t = 0; t < 6; t++) {
        int32_t one[6] = {0};
        one[t] = 1;
        tok[t] = entropy_mean(a, one);
        want += MASK[t] ? tok[t] / 3.0 : 0;
    }
    const double none = entropy_mean(a, NULL), ones = entropy_mean(a, ONES), masked = entropy_mean(a, MASK);
    assert_true(memcmp(&none, &ones, sizeof none) == 0);
    assert_true(fabs(masked - want) <= 1e-6 * fabs(want));
    print_message("entropy: model tokens %.9f, all %.9f (tokens %.6f %.6f %.6f %.6f %.6f %.6f)\n", masked, none, tok[0],
                  tok[1], tok[2], tok[3], tok[4], tok[5]);
    assert_true(fabs(masked - none) > 1e-5);
    df_actor_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agg_weights),
        cmocka_unit_test(test_kl_in_reward),
        cmocka_unit_test(test_batch_accessor),
        cmocka_unit_test(test_gae_skips_appended_tokens),
        cmocka_unit_test(test_mismatch_over_sampled_tokens),
        cmocka_unit_test(test_losses_mask_equals_cut),
        cmocka_unit_test(test_actor_update_sees_model_tokens_only),
        cmocka_unit_test(test_actor_metrics_over_model_tokens),
        cmocka_unit_test(test_entropy_over_model_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
