/*
 * The reward worker's node: siiRL's DAGWorker.compute_reward — the reward manager's
 * rule-based scores (or custom_reward_function's) on the last response token.
 */
#include "workers/worker_internal.h"

#include "util/timeutil.h"

int df_worker_reward(df_dag_worker *w, df_batch *batch, df_metrics *m)
{
    int rc = df_score_batch(w->tok, &w->reward.cfg, batch, NULL);
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
    int rc = df_worker_need_batch(batch, "compute_reward");
    if (!rc)
        rc = df_worker_reward(df_node_worker(ctx), batch, ctx->metrics);
    (void)out;
    df_worker_timing(ctx, "reward", t0);
    return rc;
}

int df_worker_register_reward_nodes(void)
{
    int rc = df_exec_register("DAGWorker.compute_reward", node_compute_reward);
    return rc ? rc : df_worker_register_reward_baseline();
}
