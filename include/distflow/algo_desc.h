/*
 * distflow/algo_desc.h — algorithm descriptors: what an advantage estimator or a
 * policy loss needs from the rest of the pipeline and how it behaves, declared
 * once beside its function and registered under its verl name in one place.
 * Validation (`config check`), the planner (which built-in pipeline) and the
 * DAG worker (which inputs to fill, whether to whiten over the data-parallel
 * group, whether the rollout adds a greedy pass) ask the descriptor instead of
 * comparing names, so a new estimator is one file plus one registration, and a
 * plugin registers one the same way (docs/algorithms.md, "Adding an
 * estimator"). verl keeps the same knowledge in ADV_ESTIMATOR_REGISTRY /
 * POLICY_LOSS_REGISTRY (verl/trainer/ppo/core_algos.py) plus special cases in
 * RayPPOTrainer (use_critic for gae, the greedy pass for remax).
 *
 * Registration is not thread-safe: register at start-up (or in a plugin's
 * df_plugin_init). The plain df_adv_estimator_register / df_policy_loss_register
 * of distflow/algo.h register a descriptor with no needs and no flags.
 */
#ifndef DISTFLOW_ALGO_DESC_H
#define DISTFLOW_ALGO_DESC_H

#include "distflow/algo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- advantage estimators ---------------------------------------------------------------- */

/** What an estimator reads besides token_level_rewards and offsets (df_adv_input). */
enum {
    /** df_adv_input.group: the baseline comes from the other responses to the same prompt, so
     *  actor_rollout_ref.rollout.n must be at least 2 (verl's group estimators). */
    DF_ADV_NEEDS_GROUPS = 1u << 0,
    /** df_adv_input.values: a critic (a CRITIC node); the built-in pipeline is "ppo" (verl:
     *  use_critic for gae). */
    DF_ADV_NEEDS_VALUES = 1u << 1,
    /** df_adv_input.reward_baselines: the rollout adds one greedy response per prompt, scored by
     *  the reward, whose score is the baseline (ReMax; verl RayPPOTrainer.fit, gen_baseline). */
    DF_ADV_NEEDS_BASELINES = 1u << 2,
    /** Every agent group's columns and the episodes' layout (request_id, traj_len): a multi-agent
     *  workflow, its nodes in several agent groups (siiRL MARFT's gae_marft, df_adv_gae_marft);
     *  `config check` refuses it for a graph of one agent group. */
    DF_ADV_NEEDS_AGENTS = 1u << 3,
    /** df_adv_input.old_log_probs and .sum_pi_squared: the actor's old-log-prob pass must compute
     *  each token's sum of squared probabilities (actor_rollout_ref.actor.calculate_sum_pi_squared:
     *  true, as verl asserts) and run before the advantage node (the Optimal Token Baseline
     *  estimators, df_adv_optimal_token_baseline). */
    DF_ADV_NEEDS_SUM_PI_SQUARED = 1u << 4,
};

/** How an estimator behaves. */
enum {
    /** It whitens its advantages over the batch's tokens, and honours df_adv_input.defer_whiten
     *  so the worker can whiten over the whole data-parallel group (verl whitens the step's batch). */
    DF_ADV_WHITENS = 1u << 0,
    /** Its returns are its advantages, so they are whitened with them (reinforce_plus_plus_baseline). */
    DF_ADV_WHITENS_RETURNS = 1u << 1,
    /** It scales by counts over the whole step batch (df_adv_batch_counts: gpg, cpgd), which the
     *  worker sums over the data-parallel group and passes in df_adv_input.batch_counts. */
    DF_ADV_BATCH_COUNTS = 1u << 2,
};

typedef struct df_adv_estimator_desc {
    const char *name;        /**< algorithm.adv_estimator (verl's name); non-empty; first member (the registry names its copy) */
    df_adv_estimator_fn fn;  /**< the estimator; non-NULL */
    unsigned needs;          /**< DF_ADV_NEEDS_* bits */
    unsigned flags;          /**< DF_ADV_WHITENS*, DF_ADV_BATCH_COUNTS bits; DF_ADV_WHITENS_RETURNS needs DF_ADV_WHITENS */
    const char *policy_loss; /**< the policy loss it implies where actor.policy_loss.loss_mode is
                                  "vanilla" (cpgd: siiRL's use_cpgd_loss), or NULL */
    const char *summary;     /**< one line: what it computes and its source, or NULL */
} df_adv_estimator_desc;

/**
 * Register (or replace) the estimator `d->name` with its descriptor (copied;
 * the strings it points to must outlive the registration — a plugin's are
 * removed when it is unloaded). Errors: DF_EINVAL for a NULL descriptor, an
 * empty name, a NULL fn, unknown bits, DF_ADV_WHITENS_RETURNS without
 * DF_ADV_WHITENS; DF_ENOMEM.
 */
DF_API int df_adv_estimator_register_desc(const df_adv_estimator_desc *d);

/**
 * The descriptor registered under `name` (runtime registrations first, then
 * the built-ins), or NULL when none (or name is NULL). The pointer stays valid
 * until that name is registered again or its plugin unloaded. Never fails.
 */
DF_API const df_adv_estimator_desc *df_adv_estimator_find(const char *name);

/**
 * df_adv_estimator_find with an error: DF_EINVAL "unknown advantage estimator
 * 'x' (known: ...)" when there is none.
 */
DF_API int df_adv_estimator_get(const char *name, const df_adv_estimator_desc **out);

/** The built-in pipeline an estimator implies for algorithm.workflow_type=default: "ppo" when
 *  it needs values (a critic), else "grpo". */
DF_API const char *df_adv_estimator_pipeline(const df_adv_estimator_desc *d);

/* ---- policy losses ------------------------------------------------------------------------ */

typedef struct df_policy_loss_desc {
    const char *name;          /**< actor.policy_loss.loss_mode (verl's name); non-empty; first member (as above) */
    df_policy_loss_fn fn;      /**< the loss; non-NULL */
    const char *loss_agg_mode; /**< the aggregation its objective is defined with, or NULL for
                                    any. When set, the actor aggregates the policy term with it
                                    whatever actor.loss_agg_mode says (which then aggregates the KL
                                    and entropy terms only), as verl's gspo and sapo call agg_loss
                                    with "seq-mean-token-mean"; `config check` says so when they
                                    differ (gspo: arXiv 2507.18071 eq. 7) */
    const char *summary;       /**< one line: what it computes and its source, or NULL */
} df_policy_loss_desc;

/** Register (or replace) a policy loss with its descriptor, as df_adv_estimator_register_desc.
 *  Errors: DF_EINVAL for a NULL descriptor, an empty name, a NULL fn; DF_ENOMEM. */
DF_API int df_policy_loss_register_desc(const df_policy_loss_desc *d);

/** The descriptor registered under `name`, or NULL (as df_adv_estimator_find). Never fails. */
DF_API const df_policy_loss_desc *df_policy_loss_find(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* DISTFLOW_ALGO_DESC_H */
