/*
 * distflow/algo.h — RL algorithm kernels on flat, packed arrays: advantage
 * estimators, loss aggregation, policy losses, KL penalties and the entropy
 * term (DESIGN.md §3, "Registries"). Names and semantics follow verl's
 * verl/trainer/ppo/core_algos.py, which siiRL reuses.
 *
 * Layout shared by every function here (no padding anywhere):
 *   n            number of responses (samples)
 *   offsets      int64 [n + 1], offsets[0] = 0, non-decreasing; sample i owns
 *                tokens [offsets[i], offsets[i + 1]) of every per-token array
 *   per-token    float [offsets[n]] (token_level_rewards, log_prob, ...)
 *   group        int64 [n], dense group id in [0, n) per sample: samples that
 *                answer the same prompt (same `uid`) share an id
 *                (see df_group_ids)
 * A zero-length response (offsets[i] == offsets[i + 1]) is allowed everywhere.
 *
 * Losses are expressed as per-token weights w (df_loss_agg_weights) so that
 * loss = sum_t w_t * l_t. This is how verl's agg_loss modes become
 * micro-batch independent: the weights come from the whole mini-batch.
 *
 * All fallible functions return 0 or a DF_E* status and set df_last_error().
 * Arithmetic is float32 per token with double accumulators for sums.
 */
#ifndef DISTFLOW_ALGO_H
#define DISTFLOW_ALGO_H

#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * Grouping
 * ====================================================================== */

/**
 * Map uid strings to dense group ids: group[i] = the rank of uids[i] among
 * the distinct uids in order of first appearance (so the first sample gets 0).
 * uids: [n] NUL-terminated strings; group: [n] output.
 * Errors: DF_EINVAL if n < 0 or a uid is NULL (naming the sample);
 * DF_ENOMEM. Runs in expected O(n) (hash table).
 */
DF_API int df_group_ids(const char *const *uids, int64_t n, int64_t *group);

/* ======================================================================
 * Advantage estimators (verl ADV_ESTIMATOR_REGISTRY / get_adv_estimator_fn)
 * ====================================================================== */

/** Inputs of an advantage estimator. Fields an estimator does not use may be 0 / NULL. */
typedef struct df_adv_input {
    int64_t n;                        /**< number of samples */
    const int64_t *offsets;           /**< [n + 1] */
    const float *token_level_rewards; /**< [offsets[n]] */
    const float *values;              /**< [offsets[n]] critic values; NULL for grpo */
    const int64_t *group;             /**< [n] dense group ids in [0, n) */
    float gamma;                      /**< discount (gae, reinforce_plus_plus) */
    float lam;                        /**< GAE lambda */
    bool norm_adv_by_std_in_grpo;     /**< grpo: divide by the group std (false: Dr.GRPO) */
    float epsilon;                    /**< grpo: std guard, verl default 1e-6 */
    /* -- fields added for the estimators of the advest block below (0 / NULL = unused) -- */
    const float *reward_baselines;    /**< [n] remax: reward of each prompt's greedy response
                                           (verl data.batch["reward_baselines"]); required by remax */
    const char *cpgd_weight_factor;   /**< cpgd: "STD_weight" (NULL), "clip_filter_like_weight"
                                           or "naive" (algorithm.weight_factor_in_cpgd) */
    float cpgd_weight_clip;           /**< cpgd clip_filter_like_weight: largest weight; 0 means 3
                                           (MM-EUREKA's clip_filter_like_weight_clip_eps) */
} df_adv_input;

/**
 * An advantage estimator: writes advantages[offsets[n]] and returns[offsets[n]]
 * (caller-allocated; they may not alias the inputs). Returns 0 or DF_E*.
 */
typedef int (*df_adv_estimator_fn)(const df_adv_input *in, float *advantages, float *returns);

/**
 * Look up an estimator by its verl name (algorithm.adv_estimator), e.g.
 * "grpo". Unknown name -> DF_EINVAL naming it and listing the known names.
 */
DF_API int df_adv_estimator_lookup(const char *name, df_adv_estimator_fn *fn);

/**
 * Register (or replace) an estimator under `name` (verl register_adv_est).
 * Not thread-safe: register at start-up. DF_EINVAL for an empty name / NULL fn.
 */
DF_API int df_adv_estimator_register(const char *name, df_adv_estimator_fn fn);

/**
 * "grpo" — verl compute_grpo_outcome_advantage (Shao et al. 2024,
 * DeepSeekMath, §4.1.2 outcome supervision):
 *   score_i = sum of sample i's token_level_rewards
 *   per group g: mean_g, std_g = unbiased std (torch.std, divisor k - 1);
 *                a group of one sample uses mean 0, std 1
 *   A_i = (score_i - mean_g) / (std_g + epsilon)   if norm_adv_by_std_in_grpo
 *   A_i =  score_i - mean_g                        otherwise (Dr.GRPO,
 *                                                  Liu et al. 2025, arXiv 2503.20783)
 *   every token of sample i gets A_i; returns = advantages.
 * Errors: DF_EINVAL for n < 0, NULL arrays, bad offsets, a group id outside
 * [0, n), epsilon < 0.
 */
DF_API int df_adv_grpo(const df_adv_input *in, float *advantages, float *returns);

/* ---------------------------------------------------------------------------
 * advest: the other advantage estimators of verl / siiRL (registered under
 * these names next to "grpo"). References: verl
 * verl/trainer/ppo/core_algos.py at commit 012be9d9dcb7c38499f23616142870d2682757fc,
 * masked_whiten in verl/utils/torch_functional.py; siiRL
 * siirl/dag_worker/core_algos.py at commit 171e8d44b3b7d55a1895ad8e528cd4dbcd73e3b4.
 *
 * Conventions shared by the estimators below:
 *   score_i    = sum of sample i's token_level_rewards (outcome estimators)
 *   group g    = the samples with group id g; k_g its size
 *   flat group = k_g >= 2 and every score of the group equal (its centred
 *                scores are all 0: the "invalid" samples of GPG / CPGD)
 *   a group of one has mean 0 (and std 1), as verl's group estimators do
 *   whiten(x)  = (x - mean) / sqrt(var + 1e-8) over ALL tokens passed in,
 *                var unbiased (divisor T - 1) — verl masked_whiten. With one
 *                token the result is 0 (verl raises); with none it is a no-op.
 *                The statistics are those of the batch passed in: the worker
 *                passes its rank's batch, as siiRL's DAG workers do (verl's
 *                driver whitens the whole step batch).
 * Common errors (DF_EINVAL, naming the estimator and the sample / token):
 * NULL input, n < 0, bad offsets, NULL arrays an estimator needs (output
 * arrays may be NULL only when there are no tokens), a group id outside
 * [0, n), a non-finite reward / value / baseline, gamma or lam outside [0, 1].
 * DF_ENOMEM when scratch memory runs out. Outputs are [offsets[n]] floats,
 * computed in double.
 * ------------------------------------------------------------------------- */

/**
 * Unbiased whitening of n_tokens values, verl masked_whiten with every token
 * valid: out_t = (x_t - mean) / sqrt(var + 1e-8), var = sum (x - mean)^2 / (T - 1).
 * T = 1 gives 0; T = 0 does nothing. out may alias x.
 * Errors: DF_EINVAL for n_tokens < 0, NULL arrays with n_tokens > 0.
 */
DF_API int df_adv_whiten(int64_t n_tokens, const float *x, float *out);

/**
 * "gae" — verl compute_gae_advantage_return; Schulman et al. 2016, "High-
 * Dimensional Continuous Control Using Generalized Advantage Estimation"
 * (arXiv 1506.02438), eq. 16. Needs values (a critic). Per sample, from its
 * last token backwards (V after the last token is 0):
 *   delta_t = r_t + gamma V_{t+1} - V_t
 *   G_t     = delta_t + gamma lam G_{t+1}          (G after the last token: 0)
 *   returns_t    = G_t + V_t                       (critic targets, unwhitened)
 *   advantages_t = whiten(G)_t                     (whitened over the batch's tokens)
 * With gamma = lam = 1 and V = 0, returns are the rewards-to-go.
 * Errors: the common ones; values NULL ("gae needs a critic").
 */
DF_API int df_adv_gae(const df_adv_input *in, float *advantages, float *returns);

/**
 * "rloo" — verl compute_rloo_outcome_advantage; REINFORCE Leave-One-Out,
 * Kool et al. 2019 and Ahmadian et al. 2024 (arXiv 2402.14740, §3.3):
 *   A_i = score_i - (sum_{j in g, j != i} score_j) / (k_g - 1)   (k_g >= 2)
 *   A_i = score_i                                               (group of one:
 *                                                                no other sample)
 *   every token of sample i gets A_i; returns = advantages.
 * Needs group ids.
 */
DF_API int df_adv_rloo(const df_adv_input *in, float *advantages, float *returns);

/**
 * "reinforce_plus_plus" — verl compute_reinforce_plus_plus_outcome_advantage;
 * REINFORCE++, Hu 2025 (arXiv 2501.03262), §3 (token-level discounted return,
 * global advantage normalisation):
 *   returns_t    = sum_{u >= t in the same sample} gamma^(u - t) r_u
 *   advantages_t = whiten(returns)_t   (over the batch's tokens)
 * Uses gamma; no group ids.
 */
DF_API int df_adv_reinforce_plus_plus(const df_adv_input *in, float *advantages,
                                      float *returns);

/**
 * "reinforce_plus_plus_baseline" — verl
 * compute_reinforce_plus_plus_baseline_outcome_advantage; REINFORCE++-baseline
 * (Hu 2025, arXiv 2501.03262, group-mean baseline then global normalisation):
 *   a_i = score_i - mean_g   (mean of the group; 0 for a group of one)
 *   every token of sample i gets a_i, then advantages = whiten(a) over the
 *   batch's tokens (so longer responses weigh more in the statistics, as in
 *   verl); returns = advantages.
 */
DF_API int df_adv_reinforce_plus_plus_baseline(const df_adv_input *in, float *advantages,
                                               float *returns);

/**
 * "remax" — verl compute_remax_outcome_advantage; ReMax, Li et al. 2023
 * (arXiv 2310.10505), Algorithm 1: the baseline is the reward of the greedy
 * response to the same prompt.
 *   returns_t    = sum_{u >= t in the same sample} r_u     (reward-to-go, no discount)
 *   advantages_t = returns_t - reward_baselines[i]
 * Errors: the common ones; reward_baselines NULL (the greedy baseline
 * generation must fill it).
 */
DF_API int df_adv_remax(const df_adv_input *in, float *advantages, float *returns);

/**
 * "gpg" — Group Policy Gradient, Chu et al. 2025 (arXiv 2504.02546, §3,
 * advantage with the gradient-estimation correction):
 *   A_i = alpha (score_i - mean_g) / F_norm,  F_norm = 1,
 *   alpha = B / (B - M), B = n samples in the batch, M = samples in flat
 *   groups (their advantage is 0 and they carry no gradient); alpha = 1 when
 *   every sample is in a flat group (B = M).
 *   every token of sample i gets A_i; returns = advantages.
 * Disagreement: verl compute_gpg_outcome_advantage counts M as the samples
 * whose *score* is 0 (alpha = B / max(#nonzero scores, 1)), which differs from
 * the paper whenever a group is all-correct or a mixed group has zero scores
 * (e.g. groups {1, 0}, {1, 1}: paper alpha = 4 / 2 = 2, verl 4 / 3). This
 * follows the paper. Like verl, a group of one has mean 0 (the paper's groups
 * always have several samples) and is not flat. The paper's F_norm = std
 * variant is not offered (verl fixes F_norm = 1).
 */
DF_API int df_adv_gpg(const df_adv_input *in, float *advantages, float *returns);

/**
 * "cpgd" — advantage of CPGD, Liu et al. 2025, "CPGD: Toward Stable Rule-based
 * Reinforcement Learning for Language Models" (arXiv 2505.12504): group-
 * centred scores times a weighting factor chosen by cpgd_weight_factor
 * (algorithm.weight_factor_in_cpgd):
 *   "STD_weight" (default)      A_i = (score_i - mean_g) / (std_g + epsilon)
 *                               (std unbiased; group of one: mean 0, std 1)
 *   "clip_filter_like_weight"   A_i = w (score_i - mean_g),
 *                               w = min(P / (P - P_flat), cpgd_weight_clip)
 *                               with P the number of groups and P_flat the
 *                               flat ones (w = 1 if all are flat) — the
 *                               weight of the paper's code (MM-EUREKA
 *                               clip_filter_like_weight_func, rows = prompts)
 *   "naive"                     A_i = score_i - mean_g
 *   every token of sample i gets A_i; returns = advantages.
 * siiRL's compute_cpgd_outcome_advantage is broken for the clip-filter-like
 * weight: it divides the number of *samples* by the number of *groups* with a
 * non-zero std, so the weight is about rollout.n times too large and nearly
 * always sits at the clamp of 3 (and groups of one count as valid). This
 * follows the paper's code (a ratio of groups to groups) instead.
 * Errors: the common ones; an unknown cpgd_weight_factor (named, with the
 * known ones); epsilon < 0; cpgd_weight_clip < 0 (0 means 3).
 */
DF_API int df_adv_cpgd(const df_adv_input *in, float *advantages, float *returns);

/* ======================================================================
 * Loss aggregation (verl agg_loss, expressed as per-token weights)
 * ====================================================================== */

/**
 * Per-token weights w[offsets[n]] for a micro-batch of n samples so that the
 * aggregated loss is sum_t w_t * l_t, normalised over the whole mini-batch
 * (all micro-batches on all data-parallel ranks), which makes gradient
 * accumulation give exactly the full-batch gradient. Modes (verl agg_loss,
 * loss_agg_mode):
 *   "token-mean"            w_t = 1 / global_tokens
 *   "seq-mean-token-sum"    w_t = 1 / global_seqs
 *   "seq-mean-token-mean"   w_t = 1 / (global_seqs * len_i)   (len_i > 0)
 *   "seq-mean-token-sum-norm" needs a constant length: use
 *                           df_loss_agg_weights_ex (here: DF_EINVAL)
 * global_tokens: response tokens in the mini-batch (> 0 for token-mean);
 * global_seqs: responses in the mini-batch (> 0 for seq-mean-*); a zero-length
 * response still counts in global_seqs, as in verl's torch.mean over the batch.
 * Errors: DF_EINVAL for an unknown mode (named, with the known ones), a
 * non-positive normaliser, more local tokens / samples than the given totals
 * (a sign that micro-batch counts were passed), bad offsets.
 */
DF_API int df_loss_agg_weights(const char *mode, int64_t n, const int64_t *offsets,
                               int64_t global_tokens, int64_t global_seqs, float *w);

/**
 * df_loss_agg_weights plus norm_length, the constant length normaliser of
 * "seq-mean-token-sum-norm" (Dr.GRPO's MAX_TOKENS; verl uses the padded
 * response length, i.e. data.max_response_length):
 *   "seq-mean-token-sum-norm"  w_t = 1 / (global_seqs * norm_length)
 * Note: verl's agg_loss divides the token sum by norm_length only (no mean over
 * sequences) and then scales by micro / mini batch size; the form above is the
 * batch-size independent one the mode's name describes (Liu et al. 2025, Dr.GRPO).
 * norm_length is ignored by the other modes.
 */
DF_API int df_loss_agg_weights_ex(const char *mode, int64_t n, const int64_t *offsets,
                                  int64_t global_tokens, int64_t global_seqs,
                                  int64_t norm_length, float *w);

/** sum_t w_t * values_t over n_tokens tokens (double accumulation). */
DF_API double df_loss_agg_apply(int64_t n_tokens, const float *values, const float *w);

/**
 * Entropy term: sum_t w_t * H_t, with H [n_tokens] the per-token entropy of
 * the actor's distribution (nats). verl dp_actor: entropy_loss =
 * agg_loss(entropy), policy_loss = pg_loss - entropy_coeff * entropy_loss;
 * the caller applies -entropy_coeff and back-propagates -entropy_coeff * w_t
 * into dH_t.
 */
DF_API double df_entropy_loss(int64_t n_tokens, const float *entropy, const float *w);

/* ======================================================================
 * Policy losses (verl POLICY_LOSS_REGISTRY / get_policy_loss_fn)
 * ====================================================================== */

typedef struct df_policy_loss_input {
    int64_t n;                  /**< number of samples */
    const int64_t *offsets;     /**< [n + 1] */
    const float *log_prob;      /**< [offsets[n]] current policy log pi(a_t) */
    const float *old_log_prob;  /**< [offsets[n]] behaviour policy log-probs */
    const float *advantages;    /**< [offsets[n]] */
    const float *weights;       /**< [offsets[n]] aggregation weights (df_loss_agg_weights) */
    float clip_ratio_low;       /**< epsilon_low  (actor.clip_ratio_low, default 0.2) */
    float clip_ratio_high;      /**< epsilon_high (actor.clip_ratio_high, default 0.2) */
    float clip_ratio_c;         /**< dual-clip constant c > 1 (actor.clip_ratio_c, default 3) */
} df_policy_loss_input;

typedef struct df_policy_loss_output {
    double loss;              /**< aggregated loss sum_t w_t * pg_loss_t */
    float *grad;              /**< caller-allocated [offsets[n]] or NULL: receives
                                   (overwrites) dloss / dlog_prob[t] */
    double pg_clipfrac;       /**< plain token mean, see the loss */
    double pg_clipfrac_lower; /**< plain token mean, see the loss */
    double ppo_kl;            /**< plain token mean of old_log_prob - log_prob (clamped) */
} df_policy_loss_output;

/** A policy loss. Statistics are 0 when there are no tokens. */
typedef int (*df_policy_loss_fn)(const df_policy_loss_input *in, df_policy_loss_output *out);

/** Look up by verl name (actor.policy_loss.loss_mode), e.g. "vanilla". Unknown -> DF_EINVAL. */
DF_API int df_policy_loss_lookup(const char *name, df_policy_loss_fn *fn);

/** Register (or replace) a policy loss (verl register_policy_loss). Start-up only. */
DF_API int df_policy_loss_register(const char *name, df_policy_loss_fn fn);

/**
 * "vanilla" — verl compute_policy_loss_vanilla: PPO clipped surrogate
 * (Schulman et al. 2017, eq. 7) with asymmetric clip range and dual clip
 * (Ye et al. 2020, arXiv 1912.09729, eq. 5). Per token:
 *   d      = clamp(log_prob - old_log_prob, -20, 20);  r = exp(d)
 *   l1     = -A r;   l2 = -A clamp(r, 1 - clip_ratio_low, 1 + clip_ratio_high)
 *   lc     = max(l1, l2)
 *   l      = A < 0 ? min(lc, -A clip_ratio_c) : lc
 *   loss   = sum_t w_t l_t
 *   pg_clipfrac       = mean_t [l2 > l1]
 *   pg_clipfrac_lower = mean_t [lc > -A clip_ratio_c and A < 0]
 *   ppo_kl            = mean_t (-d)
 * Gradient dloss/dlog_prob[t] = w_t * (-A r) on the unclipped branch, and 0
 * where the ratio is clipped, dual-clipped, or the log-ratio is clamped
 * (|log_prob - old_log_prob| > 20).
 * Errors: DF_EINVAL for NULL inputs, bad offsets, clip_ratio_c <= 1 (verl
 * asserts this), negative clip ratios.
 */
DF_API int df_policy_loss_vanilla(const df_policy_loss_input *in, df_policy_loss_output *out);

/* ======================================================================
 * KL penalties (verl kl_penalty; Schulman 2020, "Approximating KL divergence",
 * http://joschu.net/blog/kl-approx.html)
 * ====================================================================== */

/**
 * Per-token KL estimate of pi against pi_ref and its derivative with respect
 * to log_prob, for n_tokens tokens. With x = log_prob - ref_log_prob:
 *   "kl"  / "k1"          kl = x                     dkl = 1
 *   "abs"                 kl = |x|                   dkl = sign(x) (0 at x = 0)
 *   "mse" / "k2"          kl = x^2 / 2               dkl = x
 *   "low_var_kl" / "k3"   y = clamp(-x, -20, 20); kl = clamp(e^y - y - 1, -10, 10)
 *                         dkl = 1 - e^y where unclamped, 0 where either clamp is active
 * out_kl: [n_tokens] (may be NULL); out_dkl_dlogp: [n_tokens] (may be NULL).
 * Errors: DF_EINVAL for an unknown type (named, with the known ones) or
 * n_tokens < 0.
 */
DF_API int df_kl_penalty(const char *type, int64_t n_tokens, const float *log_prob,
                         const float *ref_log_prob, float *out_kl, float *out_dkl_dlogp);

/**
 * KL loss for actor.use_kl_loss (verl dp_actor.update_policy):
 *   *loss = sum_t w_t kl_t   (reported as actor/kl_loss; unscaled)
 *   grad[t] += kl_loss_coef * w_t * dkl_t   (grad may be NULL)
 * so the caller's total loss is pg_loss + kl_loss_coef * kl_loss.
 * type: actor.kl_loss_type, as in df_kl_penalty. Errors as df_kl_penalty.
 */
DF_API int df_kl_loss(const char *type, int64_t n_tokens, const float *log_prob,
                      const float *ref_log_prob, const float *w, float kl_loss_coef,
                      double *loss, float *grad);

/**
 * In-reward KL penalty (algorithm.use_kl_in_reward; verl ray_trainer
 * apply_kl_penalty): token_level_rewards[t] = token_level_scores[t] -
 * beta * kl_t with kl from df_kl_penalty(type, old_log_prob, ref_log_prob).
 * *mean_kl (may be NULL) receives the mean over samples of each sample's token
 * mean KL (verl's current_kl, logged as actor/reward_kl_penalty); zero-length
 * samples count as 0. rewards may alias scores. Errors as df_kl_penalty.
 */
DF_API int df_kl_apply_in_reward(const char *type, int64_t n, const int64_t *offsets,
                                 const float *token_level_scores, const float *old_log_prob,
                                 const float *ref_log_prob, float beta,
                                 float *token_level_rewards, double *mean_kl);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_ALGO_H */
