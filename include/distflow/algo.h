/*
 * distflow/algo.h — RL algorithm kernels on flat, packed arrays: advantage
 * estimators, loss aggregation, policy losses, KL penalties and the entropy
 * term (docs/conventions.md §2, registries). Names and semantics follow verl's
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
#include "distflow/metrics.h"
#include "distflow/rng.h"

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
/**
 * Counts over the whole step batch that the batch-level estimators scale by (gpg's and
 * gpg_paper's alpha, cpgd's clip_filter_like_weight): verl's driver computes them on the whole
 * batch, so a data-parallel worker sums its ranks' counts (df_adv_batch_counts_of on each shard,
 * then a sum over the group) and passes the totals in df_adv_input.batch_counts. Only groups are
 * counted whole: a group's samples are on one rank (the rollout makes them there).
 */
typedef struct df_adv_batch_counts {
    int64_t n_samples;         /**< B */
    int64_t n_nonzero_score;   /**< samples whose score is not 0 (gpg, verl's M') */
    int64_t n_flat_samples;    /**< samples in flat groups: >= 2 samples, all scores equal (gpg_paper's M) */
    int64_t n_groups;          /**< group ids in use (cpgd's P) */
    int64_t n_flat_groups;     /**< of which flat (cpgd's P_flat) */
} df_adv_batch_counts;

struct df_train_algorithm; /* distflow/train_config.h */
struct df_train_actor;     /* distflow/train_config.h */

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
    bool defer_whiten;                /**< estimators that whiten (df_adv_estimator_whitens): write
                                           the advantages before whitening, so the caller can whiten
                                           them over a larger batch (df_adv_whiten_sum / _ssd /
                                           _stats); the others ignore it. See the advest block. */
    const df_adv_batch_counts *batch_counts; /**< estimators with DF_ADV_BATCH_COUNTS: the whole
                                           step batch's counts when this input is one shard of it;
                                           NULL: this input's own (one rank); others ignore it */
    const struct df_train_algorithm *config; /**< the job's typed `algorithm.*` section
                                           (distflow/train_config.h), as verl passes its AlgoConfig
                                           as `config`: for an estimator (a plugin's) that reads
                                           settings beyond the fields above. The fields above are
                                           filled from it; NULL outside a training job. */
    const int32_t *response_mask;     /**< [offsets[n]] multi-turn: 1 on the model's tokens, 0 on
                                           appended tool / user tokens (distflow/rollout.h); NULL:
                                           every token the model's. gae carries values and TD error
                                           over appended tokens (verl), and whitening estimators
                                           take their statistics over the model's tokens */
    /* -- response_mask and the fields below came later, each appended last, so that a plugin
          built before a field finds the fields ahead of it where they were: add new ones last -- */
    const float *old_log_probs;       /**< [offsets[n]] the actor's old log-probs (its old-log-prob
                                           pass); estimators with DF_ADV_NEEDS_SUM_PI_SQUARED */
    const float *sum_pi_squared;      /**< [offsets[n]] sum over the vocabulary of pi^2 per token
                                           (actor.calculate_sum_pi_squared); likewise */
    const float *rollout_is_weights;  /**< [offsets[n]] algorithm.rollout_correction.rollout_is's
                                           weights (batch field rollout_is_weights), NULL when off:
                                           the optimal token baselines scale w_t by their square
                                           (verl); the other estimators ignore them */
} df_adv_input;

/**
 * The counts of df_adv_batch_counts over `in` alone (group ids required). Errors: those of the
 * group estimators' input checks (advest block), DF_ENOMEM.
 */
DF_API int df_adv_batch_counts_of(const df_adv_input *in, df_adv_batch_counts *out);

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
 * Register (or replace) an estimator under `name` (verl register_adv_est). Its
 * descriptor (distflow/algo_desc.h) is the built-in's when fn is a built-in
 * estimator function, else one with no needs and no flags;
 * df_adv_estimator_register_desc declares them. Not thread-safe: register at
 * start-up. DF_EINVAL for an empty name / NULL fn.
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
 *                The statistics are those of the batch passed in. With
 *                defer_whiten set, gae, reinforce_plus_plus and
 *                reinforce_plus_plus_baseline skip this step and write the
 *                values they would whiten (rounded to float); returns are as
 *                without the flag, except reinforce_plus_plus_baseline's,
 *                which are its advantages and so are unwhitened too
 *                (df_adv_estimator_whitens_returns). The DAG worker uses it to
 *                whiten over the whole data-parallel step batch, as verl's
 *                driver does (siiRL's DAG workers whiten each rank's shard).
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

/*
 * Whitening of a batch cut into parts (e.g. one per data-parallel rank), with
 * the statistics of the whole batch, in two reductions (mean first, then the
 * sum of squared deviations about it — accurate where a sum of squares is
 * not):
 *   1. every part: df_adv_whiten_sum(n_p, x_p, &s_p);
 *      caller: count = sum_p n_p, sum = sum_p s_p
 *   2. every part: df_adv_whiten_ssd(n_p, x_p, count, sum, &d_p);
 *      caller: ssd = sum_p d_p
 *   3. every part: df_adv_whiten_stats(n_p, x_p, count, sum, ssd, out_p)
 * giving out = (x - mean) / sqrt(ssd / (count - 1) + 1e-8), mean = sum / count
 * (0 where count is 1), i.e. df_adv_whiten of the whole batch up to the order
 * of the additions. With one part (count = n) the result is df_adv_whiten's,
 * bit for bit. Every part must use the same count, sum and ssd.
 * Common errors (DF_EINVAL): n_tokens < 0, NULL arrays with n_tokens > 0,
 * count < n_tokens (a part's count passed for the batch's), a non-finite sum.
 */

/** Step 1: *sum = sum of x[n_tokens] (double accumulation, in index order). */
DF_API int df_adv_whiten_sum(int64_t n_tokens, const float *x, double *sum);

/** Step 2: *ssd = sum_t (x_t - sum / count)^2 over this part's n_tokens values (0 when count is 0). */
DF_API int df_adv_whiten_ssd(int64_t n_tokens, const float *x, int64_t count, double sum, double *ssd);

/**
 * Step 3: out[n_tokens] = whiten(x) with the batch's count, sum and ssd; out
 * may alias x. Errors: the common ones; ssd negative or not finite.
 */
DF_API int df_adv_whiten_stats(int64_t n_tokens, const float *x, int64_t count, double sum, double ssd,
                               float *out);

/**
 * The split form over the model's tokens of multi-turn responses (verl masked_whiten):
 * mask[n_tokens] 1 on a token that counts, 0 on an appended one (NULL: all count, exactly the
 * functions above). Step 1 also gives this part's count (*count, tokens with mask 1); the
 * statistics are over counted tokens, and step 3 whitens every token with them (appended ones
 * too: their loss weight is 0); a batch with no counted token gives 0 everywhere.
 */
DF_API int df_adv_whiten_masked_sum(int64_t n_tokens, const float *x, const int32_t *mask, double *sum,
                                    int64_t *count);
DF_API int df_adv_whiten_masked_ssd(int64_t n_tokens, const float *x, const int32_t *mask, int64_t count,
                                    double sum, double *ssd);
DF_API int df_adv_whiten_masked_stats(int64_t n_tokens, const float *x, const int32_t *mask, int64_t count,
                                      double sum, double ssd, float *out);

/**
 * True when the estimator registered under `name` whitens its advantages, i.e.
 * honours df_adv_input.defer_whiten: its descriptor has DF_ADV_WHITENS
 * (distflow/algo_desc.h; built-ins gae, reinforce_plus_plus,
 * reinforce_plus_plus_baseline). False for the others, unknown names, and a
 * function of a plugin registered without a descriptor
 * (df_adv_estimator_register), also under a built-in's name. Never fails.
 */
DF_API bool df_adv_estimator_whitens(const char *name);

/**
 * True when `name`'s returns are its whitened advantages (DF_ADV_WHITENS_RETURNS;
 * reinforce_plus_plus_baseline, as verl's): under defer_whiten the caller
 * whitens its returns with the same statistics. False otherwise.
 */
DF_API bool df_adv_estimator_whitens_returns(const char *name);

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
 * "rloo_vectorized" — verl compute_rloo_vectorized_outcome_advantage: rloo's leave-one-out
 * baseline, A_i = (k_g score_i - sum_g score) / (k_g - 1) for k_g >= 2, and A_i = 0 for a group
 * of one (rloo keeps the score there). Needs group ids.
 */
DF_API int df_adv_rloo_vectorized(const df_adv_input *in, float *advantages, float *returns);

/**
 * "grpo_vectorized" — verl compute_grpo_vectorized_outcome_advantage (utils/groupwise.py
 * group_mean_std): grpo with the unbiased variance floored at epsilon,
 *   A_i = (score_i - mean_g) / (sqrt(max(var_g, epsilon)) + epsilon)   (norm_adv_by_std_in_grpo)
 *   A_i = score_i - mean_g                                            (otherwise)
 * mean 0 and std 1 for a group of one, as grpo; the floor keeps a near-flat group's advantages
 * within |score_i - mean_g| / sqrt(epsilon). distflow takes the variance in two passes in double
 * (verl: (sum x^2 - (sum x)^2 / k) / (k - 1) in float32). Needs group ids.
 */
DF_API int df_adv_grpo_vectorized(const df_adv_input *in, float *advantages, float *returns);

/**
 * "grpo_passk" — Pass@k training (Chen et al. 2025, arXiv 2503.19595), verl
 * compute_grpo_passk_outcome_advantage: only the best response of each group is reinforced,
 * by the margin over the second best:
 *   A_best = (score_max - score_second) / (std_g + epsilon)   (std_g unbiased; without the division
 *                                                              when !norm_adv_by_std_in_grpo)
 *   A_i = 0 for every other response of the group
 * score_second is the second largest score counting repeats, so a tie at the top gives 0 to
 * all (which of the tied responses verl's topk picks does not matter). Needs group ids and at
 * least two responses in every group (DF_EINVAL naming the sample otherwise, as verl raises).
 */
DF_API int df_adv_grpo_passk(const df_adv_input *in, float *advantages, float *returns);

/**
 * "opo" — On-Policy RL with Optimal reward baseline (Hao et al. 2025, arXiv 2505.23585), verl
 * compute_opo_outcome_advantage: the group's length-weighted mean score as the baseline,
 *   b_g = sum_{j in g} len_j score_j / sum_{j in g} len_j;  A_i = score_i - b_g
 * with len_j sample j's model tokens (response_mask), b_g = 0 for a group of one (verl), and
 * the plain mean when the group's lengths sum to 0 (verl would divide 0 by 0). Needs group ids.
 */
DF_API int df_adv_opo(const df_adv_input *in, float *advantages, float *returns);

/**
 * "optimal_token_baseline" — Optimal Token Baseline (OTB; Li 2025,
 * https://richardli.xyz/optimal-token-baseline, verl docs/algo/otb.md), verl
 * compute_optimal_token_baseline_advantage (core_algos.py at commit
 * b178a3cd56f58b2d502255daba591e92833930a7): a baseline per token position, weighted by how much
 * policy-gradient variance each response has accumulated up to that token. For the token of
 * sample i at index t within the sample, with m_t = response_mask (NULL: 1):
 *   G_t = sum_{s >= t} r_s m_s                        (reward-to-go of the model's rewards)
 *   w_t = 1 - 2 exp(old_log_probs_t) + sum_pi_squared_t   (the logit-gradient proxy of the
 *                                     token's squared score norm; >= (1 - pi_t)^2 as sum pi^2 >= pi_t^2)
 *   W_t = sum_{s <= t} w_s m_s                        (cumulative "realized energy")
 *   per group g and position t:
 *     B_t = sum_{i in g} G_t^i W_t^i m_t^i / (sum_{i in g} W_t^i m_t^i + 1e-8)
 *   A_t = (G_t - B_t) m_t;  returns = G (every token, appended ones too)
 * Positions are token indices, so an appended (tool) token takes up a position without adding to
 * it: samples whose turns are laid out differently are compared token index by token index (use
 * "tir_optimal_token_baseline" for multi-turn). A group of one sample has B = 0 (A = G m); samples
 * shorter than t, or masked at t, add nothing to B_t. The epsilon is verl's default 1e-8, fixed:
 * verl calls the estimator without it, and in->epsilon is grpo's std guard (1e-6 by default),
 * which would pull B_t toward 0 where the group's W_t is small. verl's handle_zero_tail is off
 * by default for this estimator, and off here. With in->rollout_is_weights (rho, the rollout
 * correction's IS weights) w_t is scaled by rho_t^2 before the cumulative sum (verl: the baseline
 * that minimises the MSE under truncated IS). Needs group ids,
 * old_log_probs and sum_pi_squared (DF_ADV_NEEDS_SUM_PI_SQUARED); their values on tokens with
 * m_t = 0 are not read.
 * Errors: the common ones; old_log_probs or sum_pi_squared NULL while there are tokens (the
 * message says to set actor_rollout_ref.actor.calculate_sum_pi_squared: true); on a model token,
 * an old log-prob that is not finite or above 1e-5, a sum_pi_squared outside [0, 1 + 1e-5] or
 * not finite (naming the sample and token).
 */
DF_API int df_adv_optimal_token_baseline(const df_adv_input *in, float *advantages, float *returns);

/**
 * "tir_optimal_token_baseline" — OTB for multi-turn (tool-integrated) responses, verl
 * compute_multi_turn_optimal_token_baseline_advantage (same commit): G, w, W as
 * "optimal_token_baseline", but positions count the model's tokens only: the k-th token of a
 * sample with m = 1 is at compacted position k, so appended tool / user tokens do not shift the
 * comparison. Per group g and compacted position k:
 *   B_k = sum_{i in g} G_k^i W_k^i / (sum_{i in g} W_k^i + 1e-8)
 * over the samples with more than k model tokens; A = G - B scattered back to the model's tokens,
 * 0 on the others; returns = G on every token. A sample with no model token leaves its group
 * (advantage 0); a group of one (after that) has B = 0. handle_zero_tail is on, as verl's
 * default for this estimator: when one sample of a group is strictly the longest (in model
 * tokens, L_1 > L_2 the second longest), its baseline at compacted positions k >= L_2 is 0, so
 * A = G there (no other sample reaches those positions: the baseline would be its own return and
 * its advantage about 0). A tie for the longest keeps every baseline. The rollout-IS scaling as
 * above. Needs as "optimal_token_baseline"; tool tokens' old_log_probs
 * and sum_pi_squared are not read.
 * Errors: those of "optimal_token_baseline".
 */
DF_API int df_adv_tir_optimal_token_baseline(const df_adv_input *in, float *advantages, float *returns);

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
 * advantage with the gradient-estimation correction), with verl's alpha
 * (compute_gpg_outcome_advantage, verl/trainer/ppo/core_algos.py at commit
 * b178a3cd56f58b2d502255daba591e92833930a7):
 *   A_i = alpha (score_i - mean_g) / F_norm,  F_norm = 1,
 *   alpha = B / max(M', 1), B = n samples in the batch, M' = samples whose
 *   score is not 0 (torch.count_nonzero of the scores).
 *   every token of sample i gets A_i; returns = advantages.
 * Like verl, a group of one has mean 0 (the paper's groups always have several
 * samples). The paper's F_norm = std variant is not offered (verl fixes
 * F_norm = 1). B and M' are in->batch_counts' when given (the DAG worker
 * sums them over its data-parallel ranks, so N ranks scale as verl's driver
 * does on the whole batch), else the input's own.
 * Errors: the common ones (advest block).
 */
DF_API int df_adv_gpg(const df_adv_input *in, float *advantages, float *returns);

/**
 * "gpg_paper" — "gpg" with the paper's alpha (§3, eq. for the corrected
 * gradient): alpha = B / (B - M), M = samples in flat groups (every score of
 * the group equal: their centred scores are 0 and they carry no gradient), so
 * the batch gradient is rescaled to the samples that have one; alpha = 1 when
 * every sample is in a flat group (then every advantage is 0 anyway).
 * verl's M' counts zero scores instead, which differs whenever a group is
 * all-correct or a mixed group has zero scores (groups {1, 0}, {1, 1}: paper
 * alpha = 4 / 2 = 2, verl 4 / 3). Choose it to follow the paper, or for
 * rewards that are not 0 / 1 (a constant shift of every reward changes verl's
 * alpha, not the paper's).
 * Errors: those of "gpg".
 */
DF_API int df_adv_gpg_paper(const df_adv_input *in, float *advantages, float *returns);

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
 *                               clip_filter_like_weight_func, rows = prompts);
 *                               P, P_flat from in->batch_counts when given
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

/* ---------------------------------------------------------------------------
 * marft: advantages and rewards of multi-agent (MARFT) episodes, siiRL
 * siirl/dag_worker/core_algos.py compute_marft_gae_advantage_return and
 * siirl/dag_worker/dagworker.py compute_multi_agent_advantage (siiRL commit
 * af00a771817324f55f40c7b980d925cb008db6d8). docs/multi_agent.md.
 *
 * Layout: A agents (agent groups 0 .. A-1, in the order they act in a turn)
 * and n rows. A row is one turn of one episode; agent a's response to it is
 * tokens [offsets_a[i], offsets_a[i + 1]) of agent a's packed per-token arrays
 * (each agent its own offsets; a response may be empty). The rows of one
 * episode are contiguous and share a request_id; traj_len is their number.
 * ------------------------------------------------------------------------- */

/** One agent's per-token columns over the n rows (siiRL agent_group_{a}_*; the last agent's unprefixed). */
typedef struct df_marft_agent_input {
    const int64_t *offsets;           /**< [n + 1] */
    const float *token_level_rewards; /**< [offsets[n]] */
    const float *values;              /**< [offsets[n]] this agent's critic values */
} df_marft_agent_input;

typedef struct df_adv_marft_input {
    int64_t n;                          /**< rows */
    int n_agents;                       /**< A >= 1 */
    const df_marft_agent_input *agents; /**< [n_agents], agent group order */
    const char *const *request_id;      /**< [n] the episode of each row (siiRL request_id) */
    const int64_t *traj_len;            /**< [n] rows of that episode (siiRL traj_len), >= 1 */
    float gamma;                        /**< discount, [0, 1] */
    float lam;                          /**< GAE lambda, [0, 1] */
    bool defer_whiten;                  /**< write the advantages before whitening (as df_adv_input's) */
} df_adv_marft_input;

/**
 * "gae_marft" — GAE chained across the agents and turns of each episode, then
 * whitened per agent (siiRL compute_marft_gae_advantage_return). Per episode
 * (its first row b, in order of first appearance; L = traj_len[b]), with one
 * running g = 0 for the whole episode, for k = 0 .. L-1 (row r = b + k), for
 * agents a = A-1 down to 0, for tokens t = T-1 down to 0 (T = agent a's
 * response length in row r; V_a, R_a its values and rewards):
 *   t <  T-1:  delta = gamma V_a[r, t+1] - V_a[r, t]        (rewards off the last token are not read)
 *   t == T-1:  delta = R_a[r, t] + gamma v_next - V_a[r, t], with
 *              v_next = V_{a+1}[r, 0]                       for a < A-1 (the next agent's first value)
 *              v_next = V_0[r-1, 0]                         for a = A-1, k > 0
 *              v_next = 0                                   for a = A-1, k = 0 (the episode's end)
 *   g = delta + gamma lam g;  advantages_a[r, t] = g;  returns_a[r, t] = g + V_a[r, t]
 * then advantages_a = whiten(advantages_a) over agent a's tokens of all rows
 * (df_adv_whiten; skipped under defer_whiten). The value of an empty
 * response's first token is 0 (siiRL's critic zeroes values off the response
 * mask). Row k of an episode is thus taken as the step AFTER row k + 1: siiRL
 * expects each episode's rows last turn first (its loop's comment says the
 * trajectory "has been reserved", and a commented-out assert wants row k to be
 * turn L-1-k); its rollout writes them first turn first, so with use_all_traj
 * and several turns its chain runs against time. Pass them last turn first.
 * siiRL writes the advantages of every agent but the last under the prefix of
 * agent A-2 (a loop variable left over), which matters from three agents on;
 * here each agent gets its own.
 * advantages[a], returns[a]: [agents[a].offsets[n]] outputs, caller-allocated.
 * Errors (DF_EINVAL, naming the agent, row and token): NULL arrays, n < 0,
 * n_agents < 1, bad offsets, non-finite rewards / values, gamma or lam outside
 * [0, 1], a NULL request_id, traj_len < 1, an episode whose rows are not
 * contiguous or do not number its traj_len (rows sharing a request_id must
 * agree on it); DF_ENOMEM.
 */
DF_API int df_adv_gae_marft(const df_adv_marft_input *in, float *const *advantages, float *const *returns);

/**
 * "gae_marft" registered as an estimator (df_adv_estimator_fn): the one-agent
 * case of df_adv_gae_marft with every sample an episode of one turn, i.e. GAE
 * (df_adv_gae) reading each response's reward at its last token only. Its
 * descriptor needs values and agent groups (DF_ADV_NEEDS_AGENTS): training
 * runs the multi-agent form. Honours defer_whiten. Errors: the common ones,
 * values NULL, a response_mask with a 0 (a MARFT response is the model's
 * tokens only).
 */
DF_API int df_adv_gae_marft_single(const df_adv_input *in, float *advantages, float *returns);

/**
 * siiRL's share_reward_in_agent (compute_multi_agent_advantage): the rewards
 * of agents that have none of their own, from the next agent's. For a = A-2
 * down to 0 with has_own[a] false, in every row i: agent a's rewards are set
 * to 0, and with share, its last token gets the sum of agent a + 1's rewards
 * in row i (so every such agent gets the last agent's score); an empty
 * response gets nothing. Agents with has_own[a] keep theirs; the last agent
 * must have its own. siiRL clones the next agent's padded reward tensor
 * instead, which puts the reward at the next agent's last position: in
 * gae_marft (which reads an agent's reward at its last token only) it counts
 * only when the two responses have the same length; this places it where
 * gae_marft reads it. (siiRL also zeroes the last agent's rewards when its
 * reward columns carry another group's prefix and share is off; not followed.)
 * rewards[a]: [offsets[a][n]], edited in place. Errors (DF_EINVAL): NULL
 * arrays, n < 0, n_agents < 1, bad offsets, has_own[A-1] false, a non-finite
 * reward of a next agent.
 */
DF_API int df_marft_share_reward(int64_t n, int n_agents, const int64_t *const *offsets, float *const *rewards,
                                 const bool *has_own, bool share);

/* ======================================================================
 * Loss aggregation (verl agg_loss, expressed as per-token weights)
 * ====================================================================== */

/**
 * Per-token weights w[offsets[n]] for a micro-batch of n samples so that the
 * aggregated loss is sum_t w_t * l_t, normalised over the whole mini-batch
 * (all micro-batches on all data-parallel ranks), which makes gradient
 * accumulation give exactly the full-batch gradient. Modes (verl agg_loss,
 * loss_agg_mode; verl/trainer/ppo/core_algos.py at commit
 * b178a3cd56f58b2d502255daba591e92833930a7, 0.8.0.dev):
 *   "token-mean"            w_t = 1 / global_tokens
 *   "seq-mean-token-sum"    w_t = 1 / global_seqs
 *   "seq-mean-token-mean"   w_t = 1 / (global_seqs * len_i)   (len_i > 0)
 *   "seq-mean-token-sum-norm", "seq-mean-token-sum-norm-seqavg" need a
 *                           constant length: use df_loss_agg_weights_ex
 *                           (here: DF_EINVAL)
 * global_tokens: response tokens in the mini-batch (> 0 for token-mean);
 * global_seqs: responses with at least one token in the mini-batch
 * (df_loss_agg_count_seqs summed over the micro-batches and ranks; > 0 for the
 * seq-mean modes). A zero-length response has no loss terms and is not counted,
 * as verl's agg_loss leaves fully masked rows out of its sequence count. (Counting
 * it would only shrink every other response's weight by the share of empty ones,
 * which changes from step to step, so no mode does.)
 * Errors: DF_EINVAL for an unknown mode (named, with the known ones), a
 * non-positive normaliser, more local tokens / non-empty responses than the
 * given totals (a sign that micro-batch counts were passed), bad offsets.
 */
DF_API int df_loss_agg_weights(const char *mode, int64_t n, const int64_t *offsets,
                               int64_t global_tokens, int64_t global_seqs, float *w);

/**
 * df_loss_agg_weights plus norm_length L, the constant length normaliser of
 * the two token-sum-norm modes (Dr.GRPO's MAX_TOKENS, Liu et al. 2025, arXiv
 * 2503.20783; verl's loss_scale_factor, by default the padded response length,
 * i.e. data.max_response_length):
 *   "seq-mean-token-sum-norm"         w_t = 1 / L   (verl agg_loss: the token
 *        sum of the whole mini-batch over L, no mean over the responses; verl's
 *        docs: "turns off seq-dim averaging"). The loss grows with the number of
 *        responses in the mini-batch. global_tokens and global_seqs are not read.
 *        verl's trainers then scale each micro-batch's loss again (the legacy
 *        dp_actor by micro / mini-batch rows, the new engine by 1 / dp_size
 *        through FSDP's gradient mean), so its step depends on the micro-batch
 *        size or the DP size; here it is the formula above for any split.
 *   "seq-mean-token-sum-norm-seqavg"  w_t = 1 / (global_seqs * L): the same,
 *        averaged over the responses. Keep it to carry a learning rate across batch sizes: the
 *        loss scale does not grow with the batch. global_seqs as above.
 * norm_length is ignored by the other modes.
 */
DF_API int df_loss_agg_weights_ex(const char *mode, int64_t n, const int64_t *offsets,
                                  int64_t global_tokens, int64_t global_seqs,
                                  int64_t norm_length, float *w);

/**
 * The number of responses among n (packed by offsets[n + 1]) that have at
 * least one token: what a micro-batch contributes to global_seqs. 0 for
 * NULL offsets or n <= 0.
 */
DF_API int64_t df_loss_agg_count_seqs(int64_t n, const int64_t *offsets);

/**
 * df_loss_agg_weights_ex over the model tokens of multi-turn responses (verl's response_mask
 * in agg_loss): mask [offsets[n]] is 1 on a token the policy generated and 0 on one appended
 * for it (a tool response, a user turn; distflow/rollout.h df_turn_handler); NULL: every
 * token is the model's (exactly df_loss_agg_weights_ex). Masked tokens get w_t = 0; a
 * sample's length len_i is its number of model tokens, and global_tokens / global_seqs count
 * model tokens and responses with at least one (df_loss_agg_count_masked summed over the
 * mini-batch). Errors: as df_loss_agg_weights_ex.
 */
DF_API int df_loss_agg_weights_masked(const char *mode, int64_t n, const int64_t *offsets,
                                      const int32_t *mask, int64_t global_tokens,
                                      int64_t global_seqs, int64_t norm_length, float *w);

/** Model tokens (mask != 0; all tokens when mask is NULL) of n responses packed by offsets,
 *  and the responses with at least one: a micro-batch's share of global_tokens / global_seqs
 *  (either output may be NULL). */
DF_API void df_loss_agg_count_masked(int64_t n, const int64_t *offsets, const int32_t *mask,
                                     int64_t *tokens, int64_t *seqs);

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
    /* ---- losses block (gspo, gpg, cpgd, clip_cov, kl_cov): fields a loss does not
     * use may stay 0; each loss's docstring below says which it reads. ---- */
    double policy_drift_coeff;  /**< cpgd: alpha >= 0 (actor.policy_drift_coeff) */
    double cpgd_drift_clip;     /**< cpgd: bound c on the drift weight r - 1; <= 0: unbounded */
    double clip_cov_ratio;      /**< clip_cov: fraction of tokens dropped, > 0 (policy_loss.clip_cov_ratio) */
    double clip_cov_lb;         /**< clip_cov: lower covariance bound (policy_loss.clip_cov_lb, 1.0) */
    double clip_cov_ub;         /**< clip_cov: upper covariance bound (policy_loss.clip_cov_ub, 5.0) */
    double kl_cov_ratio;        /**< kl_cov: fraction of tokens penalised, > 0 (policy_loss.kl_cov_ratio) */
    double ppo_kl_coef;         /**< kl_cov: weight of |log-ratio| (policy_loss.ppo_kl_coef) */
    uint64_t seed;              /**< clip_cov: seed of the random choice among candidate tokens */
    int64_t token_base;         /**< clip_cov / kl_cov: index of this call's first token in the
                                     batch `cov` describes (0 when cov is NULL) */
    const struct df_cov_stats *cov; /**< clip_cov / kl_cov: token selection of the whole mini-batch
                                     (df_cov_stats_compute); NULL: select within this call */
    const struct df_train_actor *config; /**< the typed `actor_rollout_ref.actor.*` settings of the
                                     node that trains (its workflow overrides included;
                                     distflow/train_config.h), as verl passes its ActorConfig as
                                     `config`: for a loss (a plugin's) that reads settings beyond
                                     the fields above. NULL outside a training job. */
    const int32_t *response_mask; /**< [offsets[n]] or NULL (every token counts): verl's response_mask,
                                     1 on the model's own tokens, 0 on tokens a multi-turn rollout
                                     appended (tool responses, user and environment turns). A 0
                                     token takes no part: no loss term, gradient 0, not in the
                                     statistics, nor in gspo's sequence ratio or the covariance
                                     losses' means and selection (verl masks all of these). */
    double tau_pos;             /**< sapo: gate temperature of tokens with A > 0 (actor.tau_pos, 1.0) */
    double tau_neg;             /**< sapo: gate temperature of the others (actor.tau_neg, 1.05); last,
                                     so that a plugin built before them finds the fields above */
} df_policy_loss_input;

typedef struct df_policy_loss_output {
    double loss;              /**< aggregated loss sum_t w_t * pg_loss_t */
    float *grad;              /**< caller-allocated [offsets[n]] or NULL: receives
                                   (overwrites) dloss / dlog_prob[t] */
    double pg_clipfrac;       /**< token mean, see the loss */
    double pg_clipfrac_lower; /**< token mean, see the loss */
    double ppo_kl;            /**< token mean of old_log_prob - log_prob (clamped) */
} df_policy_loss_output;

/** A policy loss. Every "token mean" of a loss below is over the tokens whose
 *  response_mask is not 0 (all tokens without a mask), as verl's masked_mean;
 *  statistics are 0 when there are no such tokens. */
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

/**
 * df_kl_apply_in_reward over the model tokens of multi-turn responses (verl: kld *
 * response_mask): where mask[t] is 0 (an appended token) the reward is the score, and a
 * sample's token mean KL is over its model tokens (0 for none). mask NULL: exactly
 * df_kl_apply_in_reward. Errors as df_kl_apply_in_reward.
 */
DF_API int df_kl_apply_in_reward_masked(const char *type, int64_t n, const int64_t *offsets,
                                        const int32_t *mask, const float *token_level_scores,
                                        const float *old_log_prob, const float *ref_log_prob,
                                        float beta, float *token_level_rewards, double *mean_kl);

/* ======================================================================
 * ---- losses block: policy losses beyond vanilla, KL controllers,
 * rollout-training mismatch (truncated importance sampling) ----
 * verl commits read: core_algos.py 012be9d9dcb7c38499f23616142870d2682757fc
 * (policy losses, KL controllers, agg_loss), rollout_corr_helper.py
 * e1904109a3a83d7c911baaf8998b9188b4cf7874 (mismatch metrics) and
 * b178a3cd5 (rollout correction: IS weights, rejection sampling); TIS is verl
 * PR #2953 (tis_imp_ratio_cap in compute_policy_loss_vanilla).
 * ====================================================================== */

/**
 * "gspo" — GSPO (Zheng et al. 2025, arXiv 2507.18071: the objective on the
 * length-normalised sequence ratio s_i), in the token-level stop-gradient form
 * of verl compute_policy_loss_gspo (the paper's GSPO-token variant). Per
 * sample i with n_i > 0 model tokens:
 *   s_i     = exp(min(mean_{t in i}(log_prob_t - old_log_prob_t), 10))   (t: i's model tokens)
 *   l_t     = max(-A_t s_i, -A_t clamp(s_i, 1 - clip_ratio_low, 1 + clip_ratio_high))
 *   loss    = sum_t w_t l_t
 *   grad_t  = w_t (-A_t s_i) where l_t takes the unclipped branch and the mean
 *             log-ratio is <= 10; 0 otherwise (verl's sg[s_i] pi_t / sg[pi_t]
 *             differentiates to s_i per token)
 *   pg_clipfrac = token mean of [clipped branch > unclipped]; pg_clipfrac_lower = 0;
 *   ppo_kl = token mean of (old_log_prob - log_prob).
 * With advantages and weights constant over each sample (outcome advantages)
 * grad is the exact derivative of loss. The paper averages over sequences
 * (1/G sum_i) and verl forces "seq-mean-token-mean"; distflow uses the
 * caller's weights: pass seq-mean-token-mean weights for the paper's loss.
 * The paper's clip ranges are tiny (3e-4, 4e-4; §5.1). Errors as vanilla
 * (clip_ratio_c is not read).
 */
DF_API int df_policy_loss_gspo(const df_policy_loss_input *in, df_policy_loss_output *out);

/**
 * "gpg" — GPG (Chu et al. 2025, arXiv 2504.02546, its policy loss), verl
 * compute_policy_loss_gpg: l_t = -A_t log_prob_t, loss = sum_t w_t l_t,
 * grad_t = -w_t A_t. A plain policy gradient (no ratio, no clipping), so
 * old_log_prob may be NULL; every statistic is 0 as in verl. GPG's alpha
 * rescaling lives in its advantage estimators (gpg, gpg_paper). Errors: NULL arrays, bad offsets.
 */
DF_API int df_policy_loss_gpg(const df_policy_loss_input *in, df_policy_loss_output *out);

/**
 * "cpgd" — CPGD (Liu et al. 2025, arXiv 2505.12504, the CPGD objective): a policy
 * gradient on the clipped log-ratio plus the policy-drift regulariser
 * alpha * KL(pi_old || pi_theta). Per token, d = clamp(log_prob - old_log_prob, -20, 20):
 *   A > 0:  pg_t = -A min(d, ln(1 + clip_ratio_high))
 *   A < 0:  pg_t = -A max(d, ln(1 - clip_ratio_low))   (no lower bound when clip_ratio_low >= 1)
 *   drift_t = k3 estimate of KL(pi_old || pi_theta) on samples of pi_old:
 *           e^d - 1 - d, with gradient e^d - 1; when cpgd_drift_clip c > 0 and
 *           e^d - 1 > c the term continues linearly, D(d0) + c (d - d0) with
 *           d0 = ln(1 + c), so its gradient is min(e^d - 1, c)
 *   l_t = pg_t + policy_drift_coeff * drift_t;  loss = sum_t w_t l_t
 *   grad_t = w_t (-A [pg unclipped] + alpha dD/dd), 0 where d is clamped
 *   pg_clipfrac = token mean of [pg clipped]; pg_clipfrac_lower = 0;
 *   ppo_kl = token mean of -d.
 * The clip acts per token, as in the paper's implementation. siiRL's CPGD
 * path does not compute this (it keeps PPO's ratio clipping, adds
 * clamp(r - 1, max 2) * log_prob and zeroes the drift when on-policy), so
 * distflow follows the paper; cpgd_drift_clip = 2 reproduces siiRL's bound on
 * the drift weight. Errors: NULL arrays, bad offsets, negative clip ratios or
 * policy_drift_coeff.
 */
DF_API int df_policy_loss_cpgd(const df_policy_loss_input *in, df_policy_loss_output *out);

/**
 * "cispo" — CISPO (MiniMax 2025, arXiv 2506.13585 eq. 4), verl compute_policy_loss_cispo: the
 * importance weight clipped and taken as data, the gradient that of log_prob. Per model token,
 * d = clamp(log_prob - old_log_prob, -20, 20), r = e^d:
 *   c_t    = clamp(r, 1 - clip_ratio_low, 1 + clip_ratio_high)   (no gradient: verl's detach)
 *   l_t    = -c_t A_t log_prob_t;  loss = sum_t w_t l_t;  grad_t = -w_t c_t A_t
 *   pg_clipfrac = token mean of [r != c_t]; pg_clipfrac_lower = 0; ppo_kl = token mean of -d.
 * grad is not the derivative of loss where r is inside the clip range (c_t depends on log_prob
 * there); it is the objective's gradient by definition. Errors as vanilla (clip_ratio_c not read).
 */
DF_API int df_policy_loss_cispo(const df_policy_loss_input *in, df_policy_loss_output *out);

/**
 * "sapo" — SAPO (Qwen 2025, arXiv 2511.20347), verl compute_policy_loss_sapo: a smooth gate in
 * place of the ratio's clip. Per model token, d = clamp(log_prob - old_log_prob, -20, 20),
 * r = e^d, tau = tau_pos where A_t > 0, else tau_neg:
 *   g_t = sigmoid(tau (r - 1)) 4 / tau;  l_t = -g_t A_t;  loss = sum_t w_t l_t
 *   grad_t = -w_t A_t 4 s (1 - s) r with s = sigmoid(tau (r - 1)); 0 where d is clamped
 *   pg_clipfrac = pg_clipfrac_lower = 0 (verl reports 0); ppo_kl = token mean of -d.
 * verl aggregates it with seq-mean-token-mean whatever loss_agg_mode says; distflow uses the
 * caller's weights (the descriptor's loss_agg_mode makes `config check` warn, as for gspo).
 * Errors: as vanilla (clip ratios not read), tau_pos or tau_neg not > 0.
 */
DF_API int df_policy_loss_sapo(const df_policy_loss_input *in, df_policy_loss_output *out);

/**
 * "geo_mean" — GMPO (Zhao et al. 2025, arXiv 2507.20673: the geometric mean of the token ratios),
 * verl compute_policy_loss_geo_mean. Per sample i with M_i its model tokens (n_i of them),
 * d_t = log_prob_t - old_log_prob_t (not clamped, as verl), s_t = sign(A_t):
 *   m_t   = s_t min(s_t d_t, s_t clamp(d_t, -clip_ratio_low, clip_ratio_high))  (the clip on the
 *           log-ratio itself, pessimistic in A's direction)
 *   R_i   = exp(sum_{M_i} m_t / (n_i + 1e-8));  Abar_i = sum_{M_i} A_t / (n_i + 1e-8)
 *   L_i   = -Abar_i R_i;  W_i = sum_{M_i} w_t;  loss = sum_i W_i L_i
 *   grad_t = W_i L_i / (n_i + 1e-8) where s_t != 0 and s_t d_t <= s_t clamp(d_t) (the unclipped
 *            side is the min, ties included: torch's min splits a tie's gradient between two
 *            equal paths), else 0
 *   pg_clipfrac = token mean of [d_t clamped and A_t > 0]; pg_clipfrac_lower the same for
 *   A_t < 0; ppo_kl = token mean of -d.
 * verl averages L_i over the sequences (torch.mean) whatever loss_agg_mode says: with
 * seq-mean-token-mean weights W_i is 1/#sequences, its loss (the actor aggregates this loss with
 * its descriptor's seq-mean-token-mean whatever loss_agg_mode says). With rollout IS weights the
 * actor puts in w the sequence's geometric mean of them on each of its tokens (verl), so W_i
 * carries it; given per-token weights here W_i would sum them.
 * Errors as vanilla (clip_ratio_c not read).
 */
DF_API int df_policy_loss_geo_mean(const df_policy_loss_input *in, df_policy_loss_output *out);

/**
 * Token selection of the covariance losses (Cui et al. 2025, "The Entropy
 * Mechanism of RL for Reasoning LMs", arXiv 2505.22617, §4: Clip-Cov and
 * KL-Cov). For a batch of N model tokens (response_mask not 0; the others
 * are never selected), with means over them,
 *   cov_t = (A_t - mean A) (log_prob_t - mean log_prob)
 * kl_cov selects the k = max(floor(kl_cov_ratio N), 1) tokens of largest
 * cov_t; clip_cov selects k = max(floor(clip_cov_ratio N), 1) tokens at random
 * among the candidates (clip_cov_lb < cov_t < clip_cov_ub and not already
 * clipped by PPO's ratio clip), as verl does with torch.randperm. distflow's
 * random choice is deterministic: token g (index in the batch) gets the key
 * u_g = uniform from df_rng_key(seed, g, 0, 0), and the k candidates of smallest
 * (u_g, g) are chosen, which is a uniform random k-subset. A token is then
 * selected iff it is a candidate whose (key, index) does not come after
 * (key, index) of the k-th choice, so a micro-batch or a data-parallel shard
 * given the mini-batch's statistics selects exactly the tokens the whole
 * mini-batch would. verl computes all of this per micro-batch (cov = NULL).
 */
typedef struct df_cov_stats {
    double adv_mean;        /**< token mean of advantages over the batch */
    double logp_mean;       /**< token mean of log_prob over the batch */
    int64_t n_tokens;       /**< N (model tokens) */
    int64_t n_select;       /**< tokens selected: min(k, candidates) */
    double key_threshold;   /**< key of the last selected token (kl_cov: cov_t; clip_cov: u_t) */
    int64_t index_threshold;/**< its index, which breaks ties */
    int kind;               /**< 1 clip_cov, 2 kl_cov (set by df_cov_stats_compute) */
} df_cov_stats;

/**
 * Selection statistics of `loss_mode` ("clip_cov" or "kl_cov") over all the
 * model tokens of `in` (the whole mini-batch; in->cov is ignored and token indices
 * start at in->token_base). Reads log_prob, old_log_prob, advantages, the
 * ratio of its mode and, for clip_cov, the clip ratios, clip_cov_lb / ub and seed.
 * Errors: DF_EINVAL for another mode, NULL arrays, bad offsets, ratio <= 0;
 * DF_ENOMEM.
 */
DF_API int df_cov_stats_compute(const char *loss_mode, const df_policy_loss_input *in,
                                df_cov_stats *out);

/**
 * "clip_cov" — Clip-Cov (arXiv 2505.22617), verl
 * compute_policy_loss_clip_cov. Per token, d = clamp(log_prob - old_log_prob,
 * -20, 20) (verl does not clamp; identical for |d| <= 20), r = e^d:
 *   l_t = max(-A r, -A clamp(r, 1 - clip_ratio_low, 1 + clip_ratio_high)), or 0
 *         for a selected token (df_cov_stats: selected tokens lose their gradient)
 *   grad_t = w_t (-A r) on the unclipped branch of an unselected token, else 0
 *   pg_clipfrac = fraction of this call's tokens selected; pg_clipfrac_lower = 0;
 *   ppo_kl = token mean of -d.
 * Selection statistics come from in->cov, or from this call's tokens when NULL.
 * Errors: NULL arrays, bad offsets, clip_cov_ratio <= 0, negative clip ratios,
 * a cov of the other kind; DF_ENOMEM.
 */
DF_API int df_policy_loss_clip_cov(const df_policy_loss_input *in, df_policy_loss_output *out);

/**
 * "kl_cov" — KL-Cov (arXiv 2505.22617), verl
 * compute_policy_loss_kl_cov. Per token, d = clamp(log_prob - old_log_prob,
 * -20, 20), r = e^d:
 *   l_t = -A r + (selected ? ppo_kl_coef |d| : 0)     (no ratio clipping)
 *   grad_t = w_t (-A r + selected ppo_kl_coef sign(d)), 0 where d is clamped
 *   ppo_kl = token mean of |d| (verl's ppo_kl_abs); clip fractions are 0.
 * Selection as clip_cov. Errors: NULL arrays, bad offsets, kl_cov_ratio <= 0,
 * ppo_kl_coef < 0, a cov of the other kind; DF_ENOMEM.
 */
DF_API int df_policy_loss_kl_cov(const df_policy_loss_input *in, df_policy_loss_output *out);

/* ---- KL coefficient controllers (algorithm.kl_ctrl; verl FixedKLController,
 * AdaptiveKLController) for the in-reward penalty ---- */

typedef struct df_kl_ctrl df_kl_ctrl;

/**
 * A controller of the in-reward KL coefficient beta. type "fixed": beta stays
 * kl_coef. type "adaptive" (Ziegler et al. 2019, arXiv 1909.08593, eq. 2, as
 * verl AdaptiveKLController): after each batch,
 *   e = clamp(current_kl / target_kl - 1, -0.2, 0.2)
 *   beta <- beta (1 + e n_steps / horizon)
 * (the paper's K_beta = 0.1 per step becomes n_steps / horizon, n_steps being
 * the batch's samples). Errors: DF_EINVAL for an unknown type (named),
 * kl_coef < 0, and for adaptive target_kl <= 0 or horizon <= 0; DF_ENOMEM.
 */
DF_API int df_kl_ctrl_create(const char *type, double kl_coef, double target_kl, double horizon,
                             df_kl_ctrl **out);
DF_API void df_kl_ctrl_free(df_kl_ctrl *c);
/** Current beta. */
DF_API double df_kl_ctrl_value(const df_kl_ctrl *c);
/** Restore beta (checkpoint resume). DF_EINVAL when negative or not finite. */
DF_API int df_kl_ctrl_set_value(df_kl_ctrl *c, double beta);
/** Apply one batch's mean KL (see create). DF_EINVAL for a non-finite KL or n_steps < 0. */
DF_API int df_kl_ctrl_update(df_kl_ctrl *c, double current_kl, int64_t n_steps);

/**
 * verl apply_kl_penalty's bookkeeping after df_kl_apply_in_reward ran with
 * beta = df_kl_ctrl_value(c): records actor/reward_kl_penalty = current_kl and
 * actor/reward_kl_penalty_coeff = beta (the value used), then updates the
 * controller with (current_kl, n_samples). With data parallelism pass the
 * global values (every rank the same) so all controllers stay equal.
 * m may be NULL. Errors as df_kl_ctrl_update.
 */
DF_API int df_kl_ctrl_step(df_kl_ctrl *c, double current_kl, int64_t n_samples, df_metrics *m);

/* ---- Rollout-training mismatch: truncated importance sampling (TIS) ---- */

/**
 * Truncated importance weights for rollout log-probs that differ from the
 * trainer's (verl actor.tis_imp_ratio_cap, PR #2953; Yao et al. 2025, "Your
 * Efficient RL Framework Secretly Brings You Off-Policy RL Training"):
 *   w_out_t = (w_in ? w_in_t : 1) * min(exp(old_log_prob_t - rollout_log_prob_t), cap)
 * The weight is data (no gradient). Pass the aggregation weights as w_in and
 * use w_out as the policy loss's `weights` (verl multiplies pg_losses only:
 * keep plain weights for the KL and entropy terms). w_out may alias w_in.
 * Errors: DF_EINVAL for n_tokens < 0, NULL arrays, cap <= 0 or not finite.
 */
DF_API int df_tis_weights(int64_t n_tokens, const float *old_log_prob,
                          const float *rollout_log_prob, double cap, const float *w_in,
                          float *w_out);

/** Mismatch statistics between the trainer's and the rollout's log-probs. */
typedef struct df_rollout_mismatch {
    int64_t n_tokens;          /**< tokens measured */
    int64_t n_seqs;            /**< non-empty responses measured */
    /* training/rollout_probs_diff_{max,mean,std}: |exp(rollout) - exp(old)| per
     * token (verl ray_trainer; std unbiased, 0 below two tokens) */
    double probs_diff_max, probs_diff_mean, probs_diff_std;
    /* rollout_corr/... (verl compute_offpolicy_metrics); per-sequence means skip
     * empty responses (verl counts them as 0) */
    double training_ppl;       /**< mean_i exp(-mean_t old_i) */
    double training_log_ppl;   /**< mean_i (-mean_t old_i), the actor's log-perplexity */
    double rollout_ppl;        /**< mean_i exp(-mean_t rollout_i) */
    double rollout_log_ppl;    /**< mean_i (-mean_t rollout_i) */
    double kl;                 /**< token mean of rollout - old: k1 of KL(rollout || training) */
    double k3_kl;              /**< token mean of e^x - x - 1, x = old - rollout (clamped +-20) */
    double log_ppl_diff;       /**< mean_i (mean_t rollout_i - mean_t old_i) */
    double log_ppl_abs_diff;   /**< mean_i |...| */
    double log_ppl_diff_max, log_ppl_diff_min;
    double ppl_ratio;          /**< mean_i exp(log_ppl_diff_i) */
    double chi2_token;         /**< token mean of rho^2 - 1, rho = e^x (x clamped +-20) */
    double chi2_seq;           /**< mean_i exp(2 clamp(sum_t x, +-20)) - 1 */
    /* rollout_corr/rollout_is_*: the raw ratio rho (before the cap) */
    double is_mean, is_max, is_min;
    double is_fraction_high;   /**< token fraction with rho > cap (0 when cap <= 0) */
} df_rollout_mismatch;

/**
 * Compute the statistics above for n responses (packed layout, old_log_prob =
 * the trainer's recomputed log-probs, rollout_log_prob = the sampler's).
 * cap: tis_imp_ratio_cap for is_fraction_high (<= 0: not measured). No tokens
 * gives all zeros. Errors: DF_EINVAL for bad offsets or NULL arrays.
 */
DF_API int df_rollout_mismatch_compute(int64_t n, const int64_t *offsets, const float *old_log_prob,
                                       const float *rollout_log_prob, double cap,
                                       df_rollout_mismatch *out);

/** df_rollout_mismatch_compute over the model's tokens of multi-turn responses: mask
 *  [offsets[n]] 1 on a sampled token, 0 on an appended one (whose rollout log-prob is 0); NULL:
 *  every token (exactly df_rollout_mismatch_compute). */
DF_API int df_rollout_mismatch_compute_masked(int64_t n, const int64_t *offsets, const int32_t *mask,
                                              const float *old_log_prob, const float *rollout_log_prob,
                                              double cap, df_rollout_mismatch *out);

/**
 * Record `mm` under verl's names: training/rollout_probs_diff_{max,mean,std},
 * rollout_corr/{training_ppl, training_log_ppl, rollout_ppl, rollout_log_ppl,
 * kl, k3_kl, log_ppl_diff, log_ppl_abs_diff, log_ppl_diff_max, log_ppl_diff_min,
 * ppl_ratio, chi2_token, chi2_seq, rollout_is_mean, rollout_is_max,
 * rollout_is_min, rollout_is_ratio_fraction_high}. Nothing when mm has no
 * tokens. Errors: DF_ENOMEM from df_metrics.
 */
DF_API int df_rollout_mismatch_record(const df_rollout_mismatch *mm, df_metrics *m);

/**
 * Record only verl's off-policy diagnostics of `mm` (compute_offpolicy_metrics; the names above
 * from rollout_corr/training_ppl to rollout_corr/chi2_seq), as verl's actor logs them per
 * micro-batch from the policy being trained against the rollout's log-probs
 * (compute_rollout_corr_metrics_from_logprobs, dp_actor.update_policy): pass those as
 * old_log_prob to df_rollout_mismatch_compute_masked. Nothing when mm has no tokens.
 * Errors: DF_EINVAL for NULL arguments; DF_ENOMEM from df_metrics.
 */
DF_API int df_rollout_offpolicy_record(const df_rollout_mismatch *mm, df_metrics *m);

/* ---- Rollout correction (algorithm.rollout_correction; verl rollout_corr_helper.py at b178a3cd5,
 * decoupled mode): importance-sampling weights and rejection sampling between the trainer's
 * recomputed log-probs and the rollout engine's ----
 *
 * Per token, lr_t = old_log_probs_t - rollout_log_probs_t (in double from the float inputs), the
 * log of the training-to-rollout probability ratio; c_t = clamp(lr_t, -20, 20) (verl SAFETY_BOUND).
 * mask [offsets[n]] int32: 1 (non-zero) on a token the model sampled, 0 on an appended tool / user
 * token (verl's response_mask); NULL: every token is the model's. The model tokens of response i are
 * M_i, k_i = |M_i|; a response is "valid" when k_i > 0; T = sum_i k_i, S = the valid responses.
 * "masked mean" below is verl_F.masked_mean, sum / (count + 1e-8), kept literally (in verl's float32
 * arithmetic the 1e-8 vanishes for counts >= 1; here it is a relative 1e-8 / count).
 *
 * Deviations from verl, all for responses or inputs verl does not meet in practice:
 * - a response with no model token (empty, or only appended tokens) takes no part in any
 *   per-sequence statistic; verl's padded rows count it in the sequence-level rollout_is_max /
 *   _min / _ratio_fraction_* (as a log-ratio sum of 0), in rollout_is_seq_* (as a mean weight of 0)
 *   and in the denominator of rollout_rs_seq_masked_fraction (its per-option RS metrics skip it, as
 *   here);
 * - a shard with no model token records nothing and is no error (verl raises: it sees the whole
 *   batch, a data-parallel shard may be empty);
 * - the off-policy diagnostics verl adds in the same call (compute_offpolicy_metrics: kl, k3_kl,
 *   ppls, chi2) are df_rollout_mismatch_compute_masked / _record's. That record also writes
 *   rollout_corr/rollout_is_mean, _max, _min and _ratio_fraction_high (an older verl's raw-ratio
 *   statistics): record df_rollout_correction's metrics after it so that, with rollout_is on, these
 *   names carry verl b178a3cd's values (set semantics);
 * - the parsers refuse what verl lets through to a degenerate run: a k1 spec whose lower bound
 *   exceeds its upper (verl rejects every token), a NaN threshold (passes verl's `<= 0` test).
 */

/* algorithm.rollout_correction.rollout_is */
enum { DF_ROLLOUT_IS_OFF = 0, DF_ROLLOUT_IS_TOKEN = 1, DF_ROLLOUT_IS_SEQUENCE = 2 };

/**
 * rollout_is: "token" -> DF_ROLLOUT_IS_TOKEN, "sequence" -> DF_ROLLOUT_IS_SEQUENCE, NULL (the
 * config's null) -> DF_ROLLOUT_IS_OFF. Errors: DF_EINVAL for anything else ("" included, as verl's
 * "Invalid rollout_is"), naming the value and the choices, or a NULL level.
 */
DF_API int df_rollout_is_parse(const char *s, int *level);

/** rollout_rs option levels (df_rollout_rs_opt.level). */
enum {
    DF_ROLLOUT_RS_TOKEN = 0,
    DF_ROLLOUT_RS_SEQ_SUM = 1,
    DF_ROLLOUT_RS_SEQ_MEAN = 2,
    DF_ROLLOUT_RS_SEQ_MAX = 3
};

/** One rejection-sampling option: verl's name (e.g. "seq_mean_k3"), its level, its divergence
 *  estimator k and its bounds. k1: lower, upper > 0, bounds on exp(-lr) (the rollout-to-training
 *  probability ratio; compared in log space); k2 / k3: upper > 0 and lower = 0. */
typedef struct df_rollout_rs_opt {
    char name[16];
    int level;           /**< DF_ROLLOUT_RS_TOKEN, _SEQ_SUM, _SEQ_MEAN, _SEQ_MAX */
    int k;               /**< 1, 2 or 3 (seq_max: 2 or 3) */
    double lower, upper;
} df_rollout_rs_opt;

/** algorithm.rollout_correction.rollout_rs with its thresholds: n options (0: off), each once,
 *  in the order first given. */
typedef struct df_rollout_rs {
    int n;
    df_rollout_rs_opt opt[11];
} df_rollout_rs;

/**
 * Parse rollout_rs and rollout_rs_threshold as verl compute_rollout_rejection_mask and
 * _parse_rollout_rs_thresholds. rs: comma-separated options among token_k1, token_k2, token_k3,
 * seq_sum_k1, seq_sum_k2, seq_sum_k3, seq_mean_k1, seq_mean_k2, seq_mean_k3, seq_max_k2,
 * seq_max_k3 (blanks around each trimmed, empty fields skipped, a repeated option kept once, as
 * verl); NULL or "" -> out->n = 0 (off; threshold is then not read). threshold: comma-separated
 * specs (trimmed, empty fields skipped), either one shared by every option or exactly one per
 * (deduplicated) option, in order. A k1 option's spec is "lower_upper" (split at the first '_') or
 * a bare "upper" with lower = 1 / upper; a k2 / k3 option's spec is one upper bound, '_' refused.
 * Numbers are read by strtod, the whole field (trimmed) must be one, NaN refused, inf accepted.
 * Errors (DF_EINVAL, naming the option or spec and what is expected): an unknown option, a
 * non-empty rs with no option, threshold NULL with rs set, no spec, a spec count that is neither 1
 * nor the option count, a non-numeric spec, a bound <= 0, a k1 lower bound above its upper
 * (verl would keep nothing), '_' in a k2 / k3 spec, a NULL out; DF_ENOMEM.
 */
DF_API int df_rollout_rs_parse(const char *rs, const char *threshold, df_rollout_rs *out);

/** Settings of df_rollout_correction. */
typedef struct df_rollout_corr_cfg {
    int is_level;              /**< DF_ROLLOUT_IS_OFF / _TOKEN / _SEQUENCE */
    double is_threshold;       /**< rollout_is_threshold: the weights' truncation (> 0, finite) */
    const df_rollout_rs *rs;   /**< NULL or n = 0: no rejection sampling */
} df_rollout_corr_cfg;

/**
 * This shard's rollout correction, verl compute_rollout_correction_and_rejection_mask (decoupled
 * mode: old_log_probs recomputed by the trainer), with its IS weights NOT batch-normalised (see
 * df_rollout_is_normalize). n responses packed by offsets; old_log_probs, rollout_log_probs
 * [offsets[n]]; mask_in [offsets[n]] or NULL (see above).
 *
 * IS weights (is_level not OFF; verl compute_rollout_correction_weights), w [offsets[n]]:
 *   token:    w_t = min(exp(c_t), is_threshold)                      on model tokens
 *   sequence: w_t = min(exp(clamp(sum_{M_i} lr, -20, 20)), is_threshold) on the model tokens of i
 *             (the sum of the unclamped log-ratios of i's model tokens)
 *   w_t = 0 on the other tokens (those of mask 0).
 * norm[2] (may be NULL) += this shard's normalisation sums over mask_in (before any rejection):
 *   token: (sum of the weights w_t as written, over model tokens; T);
 *   sequence: (sum over valid responses of their weight; S).
 * Add them over the data-parallel group, then call df_rollout_is_normalize on every shard.
 * is_level OFF: w and norm are not touched (w may be NULL).
 *
 * Rejection sampling (rs->n > 0; verl compute_rollout_rejection_mask): per token, on c_t,
 *   k1_t = -c_t,  k2_t = c_t^2 / 2,  k3_t = exp(c_t) - 1 - c_t.
 * An option's statistic: token_kX: kX_t per token; seq_sum_kX: sum_{M_i} kX_t; seq_mean_kX: that
 * sum / (k_i + 1e-8); seq_max_kX: max_{M_i} kX_t (0 for none); a sequence statistic applies to
 * every token of i. Kept: k1 when log(lower) <= stat <= log(upper), k2 / k3 when stat <= upper
 * (NaN: rejected). mask_out [offsets[n]] = 1 where mask_in is not 0 (or NULL) and every option
 * keeps the token, else 0. mask_out may be mask_in itself (updated in place); it must not
 * overlap it otherwise. rs off: mask_out, when not NULL, receives mask_in's 0 / 1 (1 for NULL).
 *
 * Metrics (m may be NULL; set semantics; nothing when T = 0), all named "rollout_corr/...":
 * With rollout_is on (verl compute_is_metrics), from the weights before truncation, p_t = exp(c_t)
 * (token) or P_i = exp(clamp(sum_{M_i} lr)) on i's tokens (sequence); thr = is_threshold,
 * lo = 1 / thr; q_t = clamp(p_t, lo, thr):
 *   rollout_is_mean                masked mean of p over the model tokens
 *   rollout_is_max, _min           token: max / min of p_t; sequence: exp(min(max_i L_i, 20)) and
 *                                  exp(min_i L_i), L_i = sum_{M_i} lr over valid i (the minimum
 *                                  unclamped as verl's: inf when every L_i > 709, 0 below -745)
 *   rollout_is_ratio_fraction_high token: masked mean of [p_t > thr]; sequence: the fraction of
 *                                  valid responses with L_i > log(thr)
 *   rollout_is_ratio_fraction_low  the same with p_t < lo / L_i < log(lo)
 *   rollout_is_std                 sqrt(max(0, mm(q^2) - mm(q)^2)), mm the masked mean over the
 *                                  model tokens; 0 when T = 1 (verl's population form)
 *   rollout_is_eff_sample_size     1 / mm((q / (mm(q) + 1e-8))^2)
 *   rollout_is_seq_mean, _seq_std, _seq_max, _seq_min over the valid responses of v_i = the masked
 *                                  mean of p over M_i (std unbiased as torch .std(), 0 for S = 1)
 *   rollout_is_seq_max_deviation   max_i |v_i - 1|
 *   rollout_is_seq_fraction_high / _low  fraction of valid responses with v_i > thr / v_i < lo
 * With rollout_rs on (verl compute_rs_metrics), per option <o> with statistic s (per token; a
 * sequence option's value on each of its tokens), hi = log(upper) (k1) or upper, lw = log(lower)
 * (k1) or 0, and per valid response u_i = its sequence statistic (token options: the masked mean
 * of s over M_i):
 *   rollout_rs_<o>_mean            masked mean of s over the model tokens (token-weighted)
 *   rollout_rs_<o>_max, _min       token option: over the model tokens; sequence: over u_i
 *   rollout_rs_<o>_fraction_high   token: masked mean of [s > hi]; sequence: fraction of u_i > hi
 *   rollout_rs_<o>_fraction_low    k1: the same with < lw; k2 / k3: 0
 *   rollout_rs_<o>_std             sqrt(max(0, mm(z^2) - mm(z)^2)), z = clamp(s, lw, hi); 0 for T = 1
 *   rollout_rs_<o>_seq_mean, _seq_std (unbiased, 0 for S = 1), _seq_max, _seq_min of u_i
 *   rollout_rs_<o>_seq_max_deviation  max_i |u_i|
 *   rollout_rs_<o>_seq_fraction_high  fraction of u_i > hi
 *   rollout_rs_<o>_seq_fraction_low   (k1 only) fraction of u_i < lw
 *   rollout_rs_<o>_masked_fraction    masked mean of [the option rejects the token]
 *   rollout_rs_<o>_seq_masked_fraction  fraction of valid responses with a model token it rejects
 *   rollout_rs_masked_fraction     masked mean of [some option rejects the token]
 *   rollout_rs_seq_masked_fraction fraction of valid responses with a rejected model token (verl
 *                                  divides by every row, empty ones included)
 * Errors: DF_EINVAL for a NULL cfg, bad offsets, NULL log-prob arrays while there are tokens, an
 * unknown is_level, with rollout_is on is_threshold <= 0 or not finite or w NULL while there are
 * tokens, with rs on an invalid option (n > 11, level / k / bounds out of range) or mask_out NULL
 * while there are tokens; DF_ENOMEM (only with m).
 */
DF_API int df_rollout_correction(const df_rollout_corr_cfg *cfg, int64_t n, const int64_t *offsets,
                                 const int32_t *mask_in, const float *old_log_probs,
                                 const float *rollout_log_probs, float *w, int32_t *mask_out,
                                 double norm[2], df_metrics *m);

/**
 * verl's rollout_is_batch_normalize: with mean = sums[0] / sums[1] (df_rollout_correction's norm
 * summed over the data-parallel group, verl distributed_masked_mean), w_t /= mean on the model
 * tokens of mask (NULL: all) when mean > 1e-8; otherwise (sums[1] = 0 included: verl's 0 / 0)
 * w is unchanged. Records rollout_corr/rollout_is_batch_norm_factor = mean, or 1 when unchanged,
 * into m (may be NULL). Tokens of mask 0 are not touched (df_rollout_correction wrote 0 there).
 * verl's single-process path divides by count + 1e-8 (token) or max(count, 1e-8) (sequence), the
 * same in its float32 arithmetic. Errors: DF_EINVAL for bad offsets, sums NULL, w NULL while there
 * are tokens; DF_ENOMEM from m.
 */
DF_API int df_rollout_is_normalize(int64_t n, const int64_t *offsets, const int32_t *mask,
                                   const double sums[2], float *w, df_metrics *m);

/*
 * Gradient-variance proxies (verl compute_variance_proxy_metrics, docs/algo/otb.md; Li 2025,
 * "Optimal Token Baseline"): with w_t = 1 - 2 exp(old_log_prob_t) + sum_pi_squared_t (the squared
 * norm of token t's logit gradient, ||e_y - pi||^2 in [0, 2]), each response's score-norm proxy
 * W = sum_t w_t and scalar advantage A = masked mean of its advantages (sum / (tokens + 1e-8), as
 * verl's masked_mean), over the B responses of the step batch:
 *   variance_proxy/proxy1_signal_strength = g^2, g = actor/grad_norm (0 when not given)
 *   variance_proxy/proxy2_total_power     = mean(A^2 max(W, 0))
 *   variance_proxy/proxy3_pure_noise      = max(0, (proxy2 - proxy1) / (B - 1)) (0 for B < 2 or no g)
 *   variance_proxy/expected_a_squared     = mean(A^2);  variance_proxy/expected_w = mean(W)
 * verl's rollout-IS branch (rollout_is_weights) does not arise: distflow's algorithm.rollout_correction
 * .rollout_is is refused. Sums are double, so a data-parallel group adds its ranks' sums.
 */
enum { DF_VPROXY_N, DF_VPROXY_A2W, DF_VPROXY_A2, DF_VPROXY_W, DF_VPROXY_SUMS };

/**
 * Add n responses' terms to sums[DF_VPROXY_SUMS] (count, sum A^2 max(W, 0), sum A^2, sum W).
 * mask [offsets[n]]: the model's tokens (NULL: all). is_weights [offsets[n]] (NULL: none): the
 * rollout IS weights rho of algorithm.rollout_correction.rollout_is, with which verl scales w_t by
 * rho_t^2 (so expected_w is the mean of sum_t rho_t^2 w_t) and takes proxy2 as the mean of
 * rho_bar^2 A^2 max(W_0, 0), rho_bar the response's mean weight, W_0 = sum_t rho_t^2 w_t /
 * max(rho_t^2, 1e-10). Errors: DF_EINVAL for bad offsets or NULL arrays while there are tokens.
 */
DF_API int df_variance_proxy_sums(int64_t n, const int64_t *offsets, const int32_t *mask,
                                  const float *advantages, const float *old_log_probs,
                                  const float *sum_pi_squared, const float *is_weights,
                                  double sums[DF_VPROXY_SUMS]);

/** Record the five metrics above from a batch's sums; grad_norm NAN: proxy1 and proxy3 are 0.
 *  Nothing when the sums count no response. Errors: DF_ENOMEM from df_metrics. */
DF_API int df_variance_proxy_record(const double sums[DF_VPROXY_SUMS], double grad_norm, df_metrics *m);

/* ---- end of losses block ---- */

/* ---- critic block: the PPO value loss ---------------------------------- */

/** Inputs of df_value_loss, in the packed layout above. */
typedef struct df_value_loss_input {
    int64_t n;               /**< number of samples */
    const int64_t *offsets;  /**< [n + 1] */
    const float *vpreds;     /**< [offsets[n]] the critic's current predictions V_theta(s_t) */
    const float *values;     /**< [offsets[n]] old values (column `values`, before the update) */
    const float *returns;    /**< [offsets[n]] value targets (column `returns`, e.g. GAE's A + V) */
    const float *weights;    /**< [offsets[n]] aggregation weights (df_loss_agg_weights(_ex)) */
    double cliprange_value;  /**< c >= 0 (critic.cliprange_value, default 0.5) */
    const int32_t *response_mask; /**< [offsets[n]] or NULL (every token counts): verl's
                                     response_mask; a 0 token (appended by a multi-turn rollout)
                                     is left out of vf_clipfrac and vpred_mean (verl's masked_mean;
                                     its loss term and gradient follow its weight, 0 from
                                     df_loss_agg_weights_masked) */
} df_value_loss_input;

typedef struct df_value_loss_output {
    double loss;        /**< 0.5 * sum_t w_t * max(l1_t, l2_t) */
    float *grad;        /**< caller-allocated [offsets[n]] or NULL: receives (overwrites)
                             dloss / dvpreds[t] */
    double vf_clipfrac; /**< token mean of [l2_t > l1_t] over the response_mask tokens (0
                             without tokens) */
    double vpred_mean;  /**< token mean of vpreds over the response_mask tokens
                             (critic/vpred_mean; 0 without tokens) */
} df_value_loss_output;

/**
 * PPO's clipped value-function loss — verl core_algos.compute_value_loss
 * (volcengine/verl commit 012be9d9, itself from TRL's ppo_trainer), the value
 * clipping of OpenAI baselines ppo2 (Schulman et al. 2017, "Proximal Policy
 * Optimization Algorithms", sec. 5 / baselines ppo2/model.py). Per token:
 *   vc_t = clamp(vpred_t, values_t - c, values_t + c)
 *   l1_t = (vpred_t - returns_t)^2;   l2_t = (vc_t - returns_t)^2
 *   loss = 0.5 * sum_t w_t * max(l1_t, l2_t)
 * so with the weights of a loss_agg_mode this is verl's 0.5 * agg_loss(...),
 * normalised over the whole mini-batch. With c = 0 the old value wins wherever
 * it is farther from the return than the prediction.
 * Gradient dloss/dvpred_t = w_t * (vpred_t - returns_t) on the unclipped branch
 * (l1_t >= l2_t, ties included) and 0 where the clipped branch wins: that only
 * happens when the clamp is active, and the clamp passes no gradient.
 * Errors: DF_EINVAL for NULL in / out, bad offsets, NULL arrays when there
 * are tokens, cliprange_value negative, NaN or infinite.
 */
DF_API int df_value_loss(const df_value_loss_input *in, df_value_loss_output *out);

/* ---- end of critic block ---- */

/* ---- PF-PPO: policy filtration by resampling (algorithm.use_pf_ppo) ------------------ */

/** algorithm.pf_ppo.reweight_method. */
typedef enum df_pf_ppo_method {
    DF_PF_PPO_POW = 0,        /**< |score|^weight_pow */
    DF_PF_PPO_MAX_MIN = 1,    /**< 1 for the batch's highest and lowest scores, 0 for the rest */
    DF_PF_PPO_MAX_RANDOM = 2  /**< 0.4 for the highest score, 0.1 for the rest */
} df_pf_ppo_method;

/** "pow" | "max_min" | "max_random"; DF_EINVAL naming the value otherwise. */
DF_API int df_pf_ppo_method_parse(const char *name, df_pf_ppo_method *out);

/**
 * PF-PPO's sampling weights (Zhang et al. 2024, "Policy Filtration in RLHF to
 * Fine-Tune LLM for Code Generation", arXiv 2409.06957; verl
 * core_algos.compute_pf_ppo_reweight_data's compute_weights): from the
 * sequences' scores[n] (the sums of their token_level_scores) the method's
 * weight, then max(w + 1e-8, 1e-8), all in float32 as torch computes them,
 * into weights[n]. The maximum and minimum are the whole batch's.
 * Errors: DF_EINVAL (n < 0, NULL arrays with n > 0, weight_pow negative or
 * not finite, a non-finite score).
 */
DF_API int df_pf_ppo_weights(const float *scores, int64_t n, df_pf_ppo_method method, double weight_pow,
                             float *weights);

/**
 * n_draws indices into draws[], each i in [0, n) with probability
 * weights[i] / sum(weights), drawn independently with replacement from `rng`
 * (torch.multinomial(weights, n_draws, replacement=True): the same
 * distribution, not torch's random stream): one uniform per draw, placed by
 * binary search in the float64 running sums of the weights.
 * Errors: DF_EINVAL (n < 1 with n_draws > 0, negative n_draws, NULL arrays,
 * a negative or non-finite weight, all weights zero).
 */
DF_API int df_pf_ppo_draw(const float *weights, int64_t n, int64_t n_draws, df_rng *rng, int64_t *draws);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_ALGO_H */
