/*
 * distflow/async.h — the pieces of asynchronous RL (issue 16, the AReaL design: Fu et al. 2025,
 * "AReaL: A Large-Scale Asynchronous Reinforcement Learning System for Language Reasoning",
 * arXiv 2505.24298) that do not depend on the runtime:
 *
 *   - the decoupled PPO objective's behaviour importance weights (AReaL use_decoupled_loss,
 *     behav_imp_weight_cap; the paper's eq. 5), which the actor applies through the same seam as
 *     truncated importance sampling (src/engine/actor.c);
 *   - the staleness manager (AReaL areal/infra/staleness_manager.py StalenessManager): how many
 *     new rollouts may start so that no sample is more than max_staleness policy versions old
 *     when the trainer consumes it, with the per-sample version-gap statistics.
 *
 * docs/async.md says what exists, how the config keys map to AReaL's and verl's, and what the
 * runtime (disaggregated placement, rollout executor, in-flight weight updates) still lacks.
 */
#ifndef DISTFLOW_ASYNC_H
#define DISTFLOW_ASYNC_H

#include "distflow/common.h"
#include "distflow/metrics.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * Decoupled PPO objective (AReaL ppo_actor_loss_fn with use_decoupled_loss)
 * ====================================================================== */

/** What df_behav_imp_weights saw, over the counted tokens (mask != 0; all without a mask). */
typedef struct df_behav_stats {
    int64_t n_tokens;     /**< counted tokens */
    int64_t n_kept;       /**< counted tokens whose weight is at most the cap (all with no cap) */
    double weight_sum;    /**< sum over kept tokens of exp(prox - behav) (AReaL behave_imp_weight) */
    double approx_kl_sum; /**< sum over kept tokens of prox - behav (AReaL behave_approx_kl) */
} df_behav_stats;

/**
 * Behaviour importance weights of the decoupled PPO objective (AReaL, arXiv 2505.24298 eq. 5;
 * AReaL ppo_actor_loss_fn before its rejection_sampling refactor, token_mask mode). The
 * objective of a token is
 *     w_t * b_t * clip-loss(log_prob_t - prox_t, A_t)
 * where the policy loss takes its ratio against the proximal policy prox (pass prox as the loss's
 * old_log_prob) and b_t = exp(prox_t - behav_t) corrects for the behaviour policy that sampled
 * the token (behav: the rollout engine's log-probs, column rollout_log_probs). Per token:
 *     x_t = prox_t - behav_t;   r_t = exp(x_t)   (computed in double)
 *     b_t = r_t                 when cap <= 0 (no cap) or r_t <= cap
 *     b_t = 0                   when r_t > cap, or r_t is NaN: the token is masked out of the
 *                               loss (AReaL filters; it does not clip — truncation is
 *                               df_tis_weights). Its aggregation weight, the loss's denominator,
 *                               is unchanged (AReaL keeps loss_mask_count).
 *     w_out_t = (w_in ? w_in_t : 1) * b_t
 * The weight is data: no gradient flows through prox or behav. Use w_out as the policy loss's
 * `weights` only (the KL and entropy terms keep the plain aggregation weights, as AReaL weights
 * pg_loss only). With prox == behav every b_t is exactly 1 (cap >= 1), so the objective is the
 * standard loss bit for bit. Without a cap r_t may overflow to +inf (x_t > ~88 in float): the
 * trainer's non-finite guard then stops the step.
 * n_tokens: packed tokens; prox_log_prob, behav_log_prob, w_in (may be NULL), w_out (may alias
 * w_in): [n_tokens]; mask [n_tokens] or NULL: which tokens the statistics count (multi-turn
 * responses: the model's tokens); every token is weighted either way. cap: behav_imp_weight_cap,
 * > 1 or <= 0 (none). st: may be NULL; overwritten.
 * Errors: DF_EINVAL for n_tokens < 0, NULL arrays when n_tokens > 0, 0 < cap <= 1 or a
 * non-finite cap (AReaL requires a cap above 1).
 */
DF_API int df_behav_imp_weights(int64_t n_tokens, const float *prox_log_prob, const float *behav_log_prob,
                                const int32_t *mask, double cap, const float *w_in, float *w_out,
                                df_behav_stats *st);

/* ======================================================================
 * Staleness manager (AReaL StalenessManager)
 * ====================================================================== */

/** Its settings (config async_training.*; units in the comments). */
typedef struct df_staleness_params {
    int64_t max_staleness;           /**< >= 0: policy versions a sample may lag the trainer by when
                                          consumed (AReaL max_head_offpolicyness); 0: on-policy */
    int64_t max_concurrent_rollouts; /**< >= 1: rollouts (episodes) running at once */
    int64_t consumer_batch_size;     /**< >= 1: episodes the trainer consumes per version (one
                                          optimizer version per consumed batch) */
} df_staleness_params;

/**
 * The manager's state: counters of episodes (an episode: one prompt's rollout, whatever its
 * number of responses, as AReaL counts workflow runs) and the version gaps of consumed samples.
 * A plain value: no allocation, no free. Not thread-safe (AReaL locks; the runtime that calls
 * this from several threads must serialise the calls).
 */
typedef struct df_staleness {
    df_staleness_params p;
    int64_t running;       /**< submitted, not yet accepted or rejected */
    int64_t accepted;      /**< finished and kept (AReaL accepted), since creation or recovery */
    int64_t rejected;      /**< finished and discarded by the workflow (AReaL rejected) */
    int64_t consumed;      /**< samples handed to df_staleness_consume */
    int64_t dropped_stale; /**< of those, dropped for a version gap > max_staleness */
    int64_t stale_kept;    /**< of those, kept with a version gap > 0 */
    int64_t gap_sum;       /**< sum of the version gaps of the consumed samples */
    int64_t gap_max;       /**< largest version gap of a consumed sample (0 before any) */
} df_staleness;

struct df_train_async_training; /* distflow/train_config.h */

/**
 * The settings from the typed config `async_training.*` (distflow/train_config.h):
 * max_concurrent_rollouts null takes consumer_batch_size (AReaL's default). Errors: DF_EINVAL
 * for NULL arguments or settings df_staleness_init refuses.
 */
DF_API int df_staleness_params_from_config(const struct df_train_async_training *a, df_staleness_params *p);

/**
 * Initialise `s` with `p`, all counters 0.
 * Errors: DF_EINVAL naming the setting (its async_training key) when max_staleness < 0,
 * max_concurrent_rollouts < 1 or consumer_batch_size < 1; s is then left as it was.
 */
DF_API int df_staleness_init(df_staleness *s, const df_staleness_params *p);

/**
 * How many new episodes may start now, at trainer version `current_version` (>= 0: optimizer
 * steps taken; the weights the rollout runs):
 *   min(max_concurrent_rollouts - running,
 *       (max_staleness + current_version + 1) * consumer_batch_size - (accepted + running))
 * (AReaL get_capacity, which counts the running episodes in the staleness term as well). Why:
 * an episode started now is sample k = accepted + running, consumed with batch k /
 * consumer_batch_size, i.e. by the trainer at that version when batches are consumed in order;
 * the bound keeps k / consumer_batch_size <= current_version + max_staleness, so its version gap
 * is at most max_staleness. May be 0 or negative (no room); a negative current_version counts
 * as 0.
 */
DF_API int64_t df_staleness_capacity(const df_staleness *s, int64_t current_version);

/**
 * Record that one episode starts (running + 1). Errors: DF_EINVAL when
 * df_staleness_capacity(s, current_version) < 1 (the caller must ask first); nothing changes.
 */
DF_API int df_staleness_submit(df_staleness *s, int64_t current_version);

/** An episode finished and is kept (running - 1, accepted + 1). DF_EINVAL when none runs. */
DF_API int df_staleness_accept(df_staleness *s);

/** An episode finished and is discarded (running - 1, rejected + 1). DF_EINVAL when none runs. */
DF_API int df_staleness_reject(df_staleness *s);

/**
 * The trainer, at version current_version, consumes a sample generated by version
 * sample_version (for a sample whose tokens span several versions: the oldest, AReaL's head
 * version). gap = current_version - sample_version; *keep = gap <= max_staleness. Counts the
 * sample, its gap (gap_sum, gap_max) and, when dropped, dropped_stale; a kept sample with gap > 0
 * counts in stale_kept. With the capacity rule above and batches consumed in order no sample is
 * dropped: this is the check that the runtime kept its promise, and the statistics.
 * Errors: DF_EINVAL when sample_version < 0 or gap < 0 (a sample from a future policy); nothing
 * changes.
 */
DF_API int df_staleness_consume(df_staleness *s, int64_t sample_version, int64_t current_version, bool *keep);

/**
 * Resume at trainer version `version` (>= 0) from a checkpoint: accepted = version *
 * consumer_batch_size (AReaL on_version_recovered), so the capacity is that of a run which
 * consumed every batch so far, not a burst of version * consumer_batch_size episodes.
 * Errors: DF_EINVAL for version < 0.
 */
DF_API int df_staleness_recover(df_staleness *s, int64_t version);

/**
 * Record the statistics under verl's fully-async names where it has one:
 * fully_async/count/dropped_stale_samples, fully_async/count/stale_samples_processed,
 * and fully_async/version_gap/mean (mean gap of the consumed samples), fully_async/version_gap/max
 * (reduced by max across ranks, metrics.h), fully_async/stale_dropped_frac (dropped / consumed),
 * fully_async/count/running, fully_async/count/accepted, fully_async/count/rejected. The gap
 * statistics only once a sample was consumed.
 * Errors: DF_EINVAL for NULL arguments; DF_ENOMEM from df_metrics.
 */
DF_API int df_staleness_record(const df_staleness *s, df_metrics *m);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_ASYNC_H */
