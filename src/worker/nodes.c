/*
 * The DAG worker's node functions — siiRL's DAGWorker.generate,
 * compute_reward, compute_advantage, compute_old_log_prob,
 * compute_ref_log_prob and train_actor — registered in the executable
 * registry so any TaskGraph can name them.
 */
#include "worker/worker_internal.h"

#include "util/timeutil.h"
#include "worker/data_metrics.h"

#include <stdlib.h>
#include <string.h>

static int need_batch(const df_batch *b, const char *node)
{
    return b ? DF_OK : df_error(DF_EINVAL, "%s: no input batch", node);
}

int df_worker_generate(df_dag_worker *w, const df_node *node, const df_batch *prompts, int64_t step, int gen,
                       df_batch **out, double *gen_max_s)
{
    if (gen_max_s)
        *gen_max_s = 0;
    uint64_t seed = df_rng_key(df_worker_seed(w), 0x6e6, (uint64_t)step, (uint64_t)gen);
    /* a workflow node may override the sampling keys: its own settings, resolved at setup */
    const df_sampling_params node_sp = df_worker_node_settings(w, node)->sampling;
    int rc = df_generate_batch(w->rollout, df_actor_model(w->actor), prompts, df_worker_n_samples(w), &node_sp, seed,
                               w->console && w->rank == 0 ? "rollout" : NULL, out);
    if (!rc && w->remax && (rc = df_worker_remax_baselines(w, &node_sp, prompts, *out, gen_max_s))) {
        df_batch_free(*out);
        *out = NULL;
    }
    return rc;
}

/* rollout_actor: n responses per prompt from the current policy. */
static int node_generate(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    double t0 = df_now(), gen_max = 0;
    int rc = need_batch(batch, "generate");
    if (!rc)
        rc = df_worker_generate(df_node_worker(ctx), ctx->node, batch, ctx->step, ctx->pass, &out->batch,
                                &gen_max);
    df_worker_timing(ctx, "gen", t0 + gen_max); /* verl's gen leaves out ReMax's greedy pass */
    if (ctx->metrics && df_node_worker(ctx)->remax)
        df_metrics_set(ctx->metrics, "timing_s/gen_max", gen_max);
    return rc;
}

int df_worker_reward(df_dag_worker *w, df_batch *batch, df_metrics *m)
{
    int rc = df_score_batch(w->tok, &w->reward, batch, NULL);
    /* rewards = scores; with algorithm.use_kl_in_reward the advantage node subtracts the KL penalty */
    const df_column *sc = rc ? NULL : df_batch_column(batch, "token_level_scores");
    if (sc)
        rc = df_batch_set_tok_f32(batch, "token_level_rewards", sc->offsets, sc->data);
    if (!rc && m) {
        const float *acc = df_batch_f32(batch, "acc");
        double s = 0;
        for (int64_t i = 0; i < df_batch_size(batch); i++)
            s += acc[i];
        df_metrics_set(m, "critic/acc/mean", df_batch_size(batch) ? s / (double)df_batch_size(batch) : 0);
    }
    return rc;
}

/* function_reward: rule-based scores on the last response token (NaiveRewardManager). */
static int node_compute_reward(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    double t0 = df_now();
    int rc = need_batch(batch, "compute_reward");
    if (!rc)
        rc = df_worker_reward(df_node_worker(ctx), batch, ctx->metrics);
    (void)out;
    df_worker_timing(ctx, "reward", t0);
    return rc;
}

/* The estimator's input: the batch's rewards, values and ReMax baselines, the algorithm's settings. */
static df_adv_input adv_input(const df_dag_worker *w, const df_batch *batch, const df_column *rew,
                              const int64_t *group, bool defer)
{
    const struct df_train_algorithm *alg = &w->global.cfg.algorithm;
    const df_column *val = df_batch_column(batch, "values");
    /* per-sample reward of the greedy response, when a ReMax baseline step filled it */
    const float *baselines = df_batch_has(batch, "reward_baselines") ? df_batch_f32(batch, "reward_baselines") : NULL;
    return (df_adv_input){.n = df_batch_size(batch), .offsets = rew->offsets, .token_level_rewards = rew->data,
                          .values = val ? val->data : NULL, .group = group,
                          .gamma = (float)alg->gamma,
                          .lam = (float)alg->lam,
                          .norm_adv_by_std_in_grpo = alg->norm_adv_by_std_in_grpo,
                          .epsilon = 1e-6f,
                          .reward_baselines = baselines,
                          .cpgd_weight_factor = alg->weight_factor_in_cpgd,
                          .defer_whiten = defer};
}

/* calculate_advantages: the configured estimator on group ids from `uid`. */
static int node_compute_advantage(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    df_dag_worker *w = df_node_worker(ctx);
    double t0 = df_now();
    int rc = need_batch(batch, "compute_advantage");
    if (!rc) /* algorithm.use_kl_in_reward: rewards = scores - beta * KL, before the estimator */
        rc = df_worker_kl_in_reward(w, ctx->node, batch, ctx->metrics);
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
    /* gpg / cpgd over several ranks: the whole step batch's counts (collective, failed or not) */
    df_adv_batch_counts counts;
    bool whole = false;
    rc = df_worker_adv_batch_counts(w, ctx->node, rc, &in, &counts, &whole);
    in.batch_counts = whole ? &counts : NULL;
    if (!rc)
        rc = w->adv_fn(&in, adv, ret);
    free(group);
    if (defer) /* collective: every rank, failed or not (verl whitens the whole step batch) */
        rc = df_worker_whiten_advantages(w, ctx->node, rc, batch);
    (void)out;
    df_worker_timing(ctx, "adv", t0);
    return rc;
}

/* actor_old_log_prob: log-probs of the responses under the policy before the update. */
static int node_compute_old_log_prob(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    df_dag_worker *w = df_node_worker(ctx);
    double t0 = df_now(), entropy = 0;
    int rc = need_batch(batch, "compute_old_log_prob");
    if (!rc)
        rc = df_actor_compute_log_prob(w->actor, batch, "old_log_probs", &entropy);
    if (!rc && ctx->metrics)
        df_metrics_set(ctx->metrics, "actor/entropy", entropy);
    /* how far the rollout engine's log-probs are from the trainer's (verl's rollout-training mismatch) */
    const df_column *rl = rc ? NULL : df_batch_column(batch, "rollout_log_probs");
    if (rl && ctx->metrics) {
        df_rollout_mismatch mm;
        double cap = w->global.cfg.actor_rollout_ref.actor.tis_imp_ratio_cap;
        rc = df_rollout_mismatch_compute(df_batch_size(batch), rl->offsets, df_batch_column(batch, "old_log_probs")->data,
                                         rl->data, cap, &mm);
        if (!rc)
            rc = df_rollout_mismatch_record(&mm, ctx->metrics);
    }
    (void)out;
    df_worker_timing(ctx, "old_log_prob", t0);
    return rc;
}

/* reference_log_prob: log-probs under the frozen reference (only when a KL term needs them). */
static int node_compute_ref_log_prob(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    df_dag_worker *w = df_node_worker(ctx);
    double t0 = df_now();
    int rc = need_batch(batch, "compute_ref_log_prob");
    if (!rc && w->ref)
        rc = df_actor_compute_log_prob(w->ref, batch, "ref_log_prob", NULL);
    (void)out;
    df_worker_timing(ctx, "ref", t0);
    return rc;
}

/*
 * actor_train: the PPO update. The rollout engine then generates from the
 * updated weights directly: in one process actor and rollout share one copy
 * (verl's hybrid engine), so the weight sync is this hand-over of the model.
 */
static int node_train_actor(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    df_dag_worker *w = df_node_worker(ctx);
    if (df_worker_critic_warmup(w, ctx->step)) /* trainer.critic_warmup: the critic trains alone */
        return DF_OK;
    double t0 = df_now();
    int rc = need_batch(batch, "train_actor");
    /* a workflow node may override the loss settings: set them for this update only */
    const df_node_settings *ns = df_worker_node_settings(w, ctx->node);
    if (!rc && ns != &w->global)
        df_actor_set_loss(w->actor, &ns->actor_loss);
    if (!rc)
        rc = df_actor_update_policy(w->actor, batch, ctx->metrics);
    if (ns != &w->global) /* back to the global settings */
        df_actor_set_loss(w->actor, &w->global.actor_loss);
    (void)out;
    df_worker_timing(ctx, "update_actor", t0);
    return rc;
}

#define RO "actor_rollout_ref.rollout."
#define AC "actor_rollout_ref.actor."
/* What a rollout node samples with and an actor node's loss and epochs: read from the node's own
 * typed settings (df_worker_node_settings), so a workflow node may set them. */
static const df_node_keys k_generate_keys = {
    .global = {RO "temperature", RO "top_k", RO "top_p", RO "do_sample"}};
static const df_node_keys k_train_actor_keys = {
    .global = {AC "clip_ratio_low", AC "clip_ratio_high", AC "clip_ratio_c", AC "entropy_coeff",
               AC "kl_loss_coef", AC "kl_loss_type", AC "loss_agg_mode", AC "policy_loss.loss_mode",
               AC "ppo_epochs"}};
#undef RO
#undef AC

int df_worker_register_nodes(void)
{
    static const struct {
        const char *name;
        df_node_fn fn;
        const df_node_keys *keys;
    } nodes[] = {
        {"DAGWorker.generate", node_generate, &k_generate_keys},
        {"DAGWorker.compute_reward", node_compute_reward, NULL},
        {"DAGWorker.compute_advantage", node_compute_advantage, NULL},
        {"DAGWorker.compute_old_log_prob", node_compute_old_log_prob, NULL},
        {"DAGWorker.compute_ref_log_prob", node_compute_ref_log_prob, NULL},
        {"DAGWorker.train_actor", node_train_actor, &k_train_actor_keys},
    };
    for (size_t i = 0; i < sizeof nodes / sizeof *nodes; i++) {
        int rc = df_exec_register_keys(nodes[i].name, nodes[i].fn, nodes[i].keys);
        if (rc)
            return rc;
    }
    int rc = df_worker_register_critic_nodes();
    return rc ? rc : df_worker_register_dynamic_sampling();
}
