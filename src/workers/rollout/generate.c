/*
 * The rollout worker's node: siiRL's DAGWorker.generate — rollout.n responses per
 * prompt from the current policy through the rollout engine, with the node's own
 * sampling settings, and ReMax's greedy baselines when the estimator needs them.
 */
#include "workers/worker_internal.h"

#include "util/timeutil.h"

int df_worker_generate(df_dag_worker *w, const df_node *node, const df_batch *prompts, int64_t step, int gen,
                       df_batch **out, double *gen_max_s)
{
    if (gen_max_s)
        *gen_max_s = 0;
    uint64_t seed = df_rng_key(df_worker_seed(w), 0x6e6, (uint64_t)step, (uint64_t)gen);
    /* a workflow node may override the sampling keys: its own settings, resolved at setup */
    const df_sampling_params node_sp = df_worker_node_settings(w, node)->sampling;
    int rc = df_generate_batch(w->rollout.engine, df_actor_model(w->actor.model), prompts, df_worker_n_samples(w), &node_sp, seed,
                               w->console && w->rank == 0 ? "rollout" : NULL, out);
    if (!rc && w->rollout.remax && (rc = df_worker_remax_baselines(w, &node_sp, prompts, *out, gen_max_s))) {
        df_batch_free(*out);
        *out = NULL;
    }
    return rc;
}

/* rollout_actor: n responses per prompt from the current policy. */
static int node_generate(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    double t0 = df_now(), gen_max = 0;
    int rc = df_worker_need_batch(batch, "generate");
    if (!rc)
        rc = df_worker_generate(df_node_worker(ctx), ctx->node, batch, ctx->step, ctx->pass, &out->batch,
                                &gen_max);
    df_worker_timing(ctx, "gen", t0 + gen_max); /* verl's gen leaves out ReMax's greedy pass */
    if (ctx->metrics && df_node_worker(ctx)->rollout.remax)
        df_metrics_set(ctx->metrics, "timing_s/gen_max", gen_max);
    return rc;
}

int df_worker_register_rollout_nodes(void)
{
    /* what a rollout node samples with: read from its own typed settings, so a workflow node may set it */
    static const df_node_keys keys = {.global = {"actor_rollout_ref.rollout.temperature", "actor_rollout_ref.rollout.top_k",
                                                 "actor_rollout_ref.rollout.top_p", "actor_rollout_ref.rollout.do_sample"}};
    int rc = df_exec_register_keys("DAGWorker.generate", node_generate, &keys);
    return rc ? rc : df_worker_register_dynamic_sampling();
}
