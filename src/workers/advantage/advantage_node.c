/*
 * The advantage node: siiRL's DAGWorker.compute_advantage — the configured estimator
 * on group ids from `uid`, with the data-parallel group's batch statistics
 * (whitening, batch counts; adv_whiten.c) and, with algorithm.use_kl_in_reward, the
 * KL penalty subtracted from the rewards first; with algorithm.use_pf_ppo, the batch resampled
 * after (pf_ppo.c).
 */
#include "workers/worker_internal.h"

#include "util/timeutil.h"

#include <stdlib.h>
#include <string.h>

/* The estimator's input: the batch's rewards, values, ReMax baselines and (for the optimal token
   baseline) old log-probs and sums of p^2, the algorithm's settings. */
static df_adv_input adv_input(const df_dag_worker *w, const df_batch *batch, const df_column *rew,
                              const int64_t *group, bool defer)
{
    const struct df_train_algorithm *alg = &w->global.cfg.algorithm;
    const df_column *val = df_batch_column(batch, "values");
    /* per-sample reward of the greedy response, when a ReMax baseline step filled it */
    const float *baselines = df_batch_has(batch, "reward_baselines") ? df_batch_f32(batch, "reward_baselines") : NULL;
    const df_column *old = df_batch_column(batch, "old_log_probs"), *sq = df_batch_column(batch, "sum_pi_squared");
    const df_column *isw = df_batch_column(batch, "rollout_is_weights");
    return (df_adv_input){.n = df_batch_size(batch), .offsets = rew->offsets, .token_level_rewards = rew->data,
                          .values = val ? val->data : NULL, .group = group,
                          .gamma = (float)alg->gamma,
                          .lam = (float)alg->lam,
                          .norm_adv_by_std_in_grpo = alg->norm_adv_by_std_in_grpo,
                          .epsilon = 1e-6f,
                          .reward_baselines = baselines,
                          .cpgd_weight_factor = alg->weight_factor_in_cpgd,
                          .defer_whiten = defer,
                          .config = alg,
                          .old_log_probs = old ? old->data : NULL,
                          .sum_pi_squared = sq ? sq->data : NULL,
                          .rollout_is_weights = isw ? isw->data : NULL};
}

/* Multi-turn responses (a response_mask column): the estimators read the mask (gae skips
 * appended tokens, whitening counts the model's), sequence-level advantages are broadcast over
 * the response, and appended (tool / user) tokens end with none (verl: scores * response_mask).
 * reinforce_plus_plus discounts its return over every token, tool tokens included: refused. */
static int check_mask(const df_dag_worker *w, const df_batch *batch, const int32_t **mask)
{
    int rc = df_batch_response_mask(batch, mask);
    const char *name = w->global.cfg.algorithm.adv_estimator;
    if (!rc && *mask && !strcmp(name, "reinforce_plus_plus"))
        rc = df_error(DF_EUNSUPPORTED, "compute_advantage: adv_estimator reinforce_plus_plus discounts "
                      "the return over every response token, appended tool / user tokens included; "
                      "multi-turn batches take another estimator (gae, grpo, rloo, "
                      "reinforce_plus_plus_baseline, remax, gpg, cpgd)");
    return rc;
}

static void apply_mask(int64_t n_tokens, const int32_t *mask, float *adv, float *ret)
{
    for (int64_t t = 0; mask && t < n_tokens; t++)
        if (!mask[t])
            adv[t] = ret[t] = 0.0f;
}

/* calculate_advantages: the configured estimator on group ids from `uid`. */
static int node_compute_advantage(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    df_dag_worker *w = df_node_worker(ctx);
    double t0 = df_now();
    int rc = df_worker_need_batch(batch, "compute_advantage");
    if (!rc) /* algorithm.use_kl_in_reward: rewards = scores - beta * KL, before the estimator */
        rc = df_worker_kl_in_reward(w, ctx->node, batch, ctx->metrics);
    /* algorithm.rollout_correction: IS weights and rejections, after the KL as verl (collective) */
    rc = df_worker_rollout_correction(w, ctx->node, rc, batch, ctx->metrics);
    const int32_t *mask = NULL;
    if (!rc)
        rc = check_mask(w, batch, &mask);
    int64_t n = rc ? 0 : df_batch_size(batch);
    const df_column *uid = rc ? NULL : df_batch_column(batch, "uid");
    const df_column *rew = rc ? NULL : df_batch_column(batch, "token_level_rewards");
    if (!rc && (!uid || !rew))
        rc = df_error(DF_EINVAL, "compute_advantage needs the uid and token_level_rewards columns");
    int64_t *group = rc ? NULL : malloc((size_t)(n ? n : 1) * sizeof *group);
    if (!rc && !group)
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = df_group_ids((const char *const *)uid->data, n, group);
    float *adv = NULL, *ret = NULL;
    const bool defer = df_worker_defers_whiten(w, ctx->node); /* whitened over the DP group below */
    if (!rc)
        rc = df_batch_alloc_tok_f32_like(batch, "advantages", "response_ids", &adv);
    if (!rc)
        rc = df_batch_alloc_tok_f32_like(batch, "returns", "response_ids", &ret);
    df_adv_input in = rc ? (df_adv_input){0} : adv_input(w, batch, rew, group, defer);
    in.response_mask = mask;
    /* gpg / cpgd over several ranks: the whole step batch's counts (collective, failed or not) */
    df_adv_batch_counts counts;
    bool whole = false;
    rc = df_worker_adv_batch_counts(w, ctx->node, rc, &in, &counts, &whole);
    in.batch_counts = whole ? &counts : NULL;
    if (!rc)
        rc = w->advantage.fn(&in, adv, ret);
    free(group);
    if (defer) /* collective: every rank, failed or not (verl whitens the whole step batch) */
        rc = df_worker_whiten_advantages(w, ctx->node, rc, batch);
    if (!rc) /* after the whitening: appended tokens end with none */
        apply_mask(df_batch_offsets(batch, "response_ids")[n], mask, adv, ret);
    if (w->global.cfg.algorithm.use_pf_ppo) /* collective: every rank, failed or not */
        rc = df_worker_pf_ppo(w, ctx->node, rc, batch, &out->batch);
    df_worker_timing(ctx, "adv", t0);
    return rc;
}

int df_worker_register_advantage_nodes(void)
{
    return df_exec_register("DAGWorker.compute_advantage", node_compute_advantage);
}
