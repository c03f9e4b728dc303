/*
 * The actor worker's nodes: siiRL's DAGWorker.compute_old_log_prob (log-probs
 * before the update, and the rollout-training mismatch metrics) and train_actor
 * (the PPO update, with the node's own loss settings).
 */
#include "workers/worker_internal.h"

#include "util/memstat.h"
#include "util/timeutil.h"
#include "workers/common/data_metrics.h"

#include <math.h>

/* algorithm.rollout_correction.bypass_mode (verl apply_bypass_mode): the rollout engine's log-probs
 * become old_log_probs, no forward pass (so no actor/entropy, and no mismatch to measure). */
static int bypass_old_log_prob(df_node_ctx *ctx, df_batch *batch)
{
    double t0 = df_now();
    const df_column *rl = df_batch_column(batch, "rollout_log_probs");
    int rc = rl ? df_batch_set_tok_f32(batch, "old_log_probs", rl->offsets, rl->data)
                : df_error(DF_EINVAL, "compute_old_log_prob: algorithm.rollout_correction.bypass_mode needs the "
                                      "rollout's log-probs (batch field rollout_log_probs), and the batch has none");
    df_worker_timing(ctx, "old_log_prob", t0);
    return rc;
}

/* actor_old_log_prob: log-probs of the responses under the policy before the update (and, with
 * actor.calculate_sum_pi_squared, each token's sum of squared probabilities). */
static int node_compute_old_log_prob(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    df_dag_worker *w = df_node_worker(ctx);
    (void)out;
    int rc = df_worker_need_batch(batch, "compute_old_log_prob");
    if (!rc && w->global.cfg.algorithm.rollout_correction.bypass_mode)
        return bypass_old_log_prob(ctx, batch);
    double t0 = df_now(), entropy = 0;
    const bool sq = w->global.cfg.actor_rollout_ref.actor.calculate_sum_pi_squared;
    df_actor *actor = df_worker_slot(w, ctx->node).actor->model;
    if (!rc)
        rc = df_actor_compute_log_prob_sq(actor, batch, "old_log_probs", sq ? "sum_pi_squared" : NULL, &entropy);
    if (!rc && ctx->metrics)
        df_metrics_set(ctx->metrics, "actor/entropy", entropy);
    /* how far the rollout engine's log-probs are from the trainer's (verl's rollout-training mismatch) */
    const df_column *rl = rc ? NULL : df_batch_column(batch, "rollout_log_probs");
    if (rl && ctx->metrics) {
        df_rollout_mismatch mm;
        double cap = w->global.cfg.actor_rollout_ref.actor.tis_imp_ratio_cap;
        const int32_t *mask = NULL; /* multi-turn: appended tokens were not sampled */
        rc = df_batch_response_mask(batch, &mask);
        if (!rc)
            rc = df_rollout_mismatch_compute_masked(df_batch_size(batch), rl->offsets, mask,
                                                    df_batch_column(batch, "old_log_probs")->data, rl->data, cap,
                                                    &mm);
        if (!rc)
            rc = df_rollout_mismatch_record(&mm, ctx->metrics);
    }
    df_worker_timing(ctx, "old_log_prob", t0);
    return rc;
}

/*
 * trainer.critic_warmup: the actor's updates start after N critic-only steps,
 * i.e. steps 1..N train the critic alone. verl's ray_trainer updates the actor
 * when `critic_warmup <= global_steps` (global_steps from 1), which gives only
 * N - 1 warmup steps; siiRL's DAGWorker.train_actor skips while
 * `critic_warmup > global_steps` (global_steps = finished steps), as here.
 */
static bool critic_warmup(const df_dag_worker *w, const df_agent_slot *s, int64_t step)
{
    return s->critic->model && step <= w->global.cfg.trainer.critic_warmup;
}

/*
 * With actor.calculate_sum_pi_squared, verl's gradient-variance proxies of the step batch
 * (df_variance_proxy_sums / _record) from its advantages, old log-probs and sums of p^2, and the
 * update's actor/grad_norm: the sums over the data-parallel group (a replica counts nothing).
 * Collective over w->group, failed or not.
 */
static int variance_proxy(df_dag_worker *w, const df_node *node, int rc, const df_batch *b, df_metrics *m)
{
    if (!w->global.cfg.actor_rollout_ref.actor.calculate_sum_pi_squared)
        return rc;
    const df_node_layout *l = df_worker_node_layout(w, node);
    double mine[DF_VPROXY_SUMS] = {0}, tot[DF_VPROXY_SUMS] = {0};
    if (!rc && (!l || l->mp_rank == 0)) {
        const df_column *adv = df_batch_column(b, "advantages"), *old = df_batch_column(b, "old_log_probs");
        const df_column *sq = df_batch_column(b, "sum_pi_squared"), *isw = df_batch_column(b, "rollout_is_weights");
        const int32_t *mask = NULL;
        if (!adv || !old || !sq)
            rc = df_error(DF_EINVAL, "variance_proxy metrics: the batch lacks advantages, old_log_probs or "
                                     "sum_pi_squared (is the old-log-prob node before actor_train?)");
        if (!rc)
            rc = df_batch_response_mask(b, &mask);
        if (!rc)
            rc = df_variance_proxy_sums(df_batch_size(b), adv->offsets, mask, adv->data, old->data, sq->data,
                                        isw ? isw->data : NULL, mine);
    }
    rc = df_worker_group_sum(w->group, rc, mine, DF_VPROXY_SUMS, tot, "variance_proxy metrics",
                             "data-parallel group");
    if (!rc && m)
        rc = df_variance_proxy_record(tot, df_metrics_get(m, "actor/grad_norm", NAN), m);
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
    df_agent_slot s = df_worker_slot(w, ctx->node); /* the node's agent group's policy */
    df_actor *actor = s.actor->model;
    if (critic_warmup(w, &s, ctx->step)) /* the critic trains alone */
        return DF_OK;
    double t0 = df_now();
    int rc = df_worker_need_batch(batch, "train_actor");
    /* a workflow node may override the loss settings: set them for this update only */
    const df_node_settings *ns = df_worker_node_settings(w, ctx->node);
    if (!rc && ns != &w->global)
        df_actor_set_loss(actor, &ns->actor_loss);
    if (!rc)
        rc = df_actor_update_policy(actor, batch, ctx->metrics);
    df_backend be = df_worker_backend(w);
    if (!rc) {
        df_record_mfu(ctx->metrics, "perf/mfu/actor", &df_actor_model(actor)->cfg, batch, ns->actor_loss.ppo_epochs,
                      df_now() - t0, df_backend_peak_flops(&be));
        df_record_memory(ctx->metrics, df_backend_memory_peak(&be), df_host_memory_used_bytes());
    }
    if (ns != &w->global) /* back to the global settings */
        df_actor_set_loss(actor, &w->global.actor_loss);
    rc = variance_proxy(w, ctx->node, rc, batch, ctx->metrics);
    (void)out;
    df_worker_timing(ctx, "update_actor", t0);
    return rc;
}

#define AC "actor_rollout_ref.actor."
int df_worker_register_actor_nodes(void)
{
    /* an actor node's loss and epochs: read from its own typed settings, so a workflow node may set them */
    static const df_node_keys train_keys = {
        .global = {AC "clip_ratio_low", AC "clip_ratio_high", AC "clip_ratio_c", AC "entropy_coeff",
                   AC "kl_loss_coef", AC "kl_loss_type", AC "loss_agg_mode", AC "policy_loss.loss_mode",
                   AC "ppo_epochs", "actor_rollout_ref.model.path"}};
    /* the model directory of the node's agent group (agents.c) */
    static const df_node_keys fwd_keys = {.global = {"actor_rollout_ref.model.path"}};
    int rc = df_exec_register_keys("DAGWorker.compute_old_log_prob", node_compute_old_log_prob, &fwd_keys);
    return rc ? rc : df_exec_register_keys("DAGWorker.train_actor", node_train_actor, &train_keys);
}
#undef AC
