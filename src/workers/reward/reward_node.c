/*
 * The reward worker's node: siiRL's DAGWorker.compute_reward — the reward manager's
 * rule-based scores (or custom_reward_function's) on the last response token, or with
 * reward_model.enable the reward model's (verl compute_rm_score, then the manager).
 */
#include "workers/worker_internal.h"

#include "util/timeutil.h"

#include <stdlib.h>

/*
 * reward_model.enable: rm_scores from the reward model, and the reward manager's answer as
 * verl's naive / dapo managers give it when the batch has rm_scores: those scores, the rule
 * functions not run. `score` is the row's reward-model score (0 for an empty response).
 */
static int reward_from_model(df_dag_worker *w, df_batch *batch)
{
    int rc = df_rm_score_batch(&w->reward.scorer, batch);
    const df_column *rm = rc ? NULL : df_batch_column(batch, "rm_scores");
    int64_t n = df_batch_size(batch);
    float *score = rc ? NULL : malloc((size_t)(n ? n : 1) * sizeof *score);
    if (!rc && !score)
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n && !rc; i++) {
        int64_t s = rm->offsets[i], e = rm->offsets[i + 1];
        score[i] = e > s ? ((const float *)rm->data)[e - 1] : 0.0f;
    }
    if (!rc)
        rc = df_batch_set_tok_f32(batch, "token_level_scores", rm->offsets, rm->data);
    if (!rc)
        rc = df_batch_set_f32(batch, "score", score);
    free(score);
    return rc ? df_error_wrap(rc, "reward model (reward_model.enable)") : DF_OK;
}

int df_worker_reward(df_dag_worker *w, const df_node *node, df_batch *batch, df_metrics *m)
{
    /* the node's agent group decodes its own responses (a chained multi-agent graph: each its tokenizer) */
    int rc = w->reward.rm ? reward_from_model(w, batch)
                          : df_score_batch(df_worker_slot(w, node).tok, &w->reward.cfg, batch, NULL);
    /* rewards = scores; with algorithm.use_kl_in_reward the advantage node subtracts the KL penalty */
    const df_column *sc = rc ? NULL : df_batch_column(batch, "token_level_scores");
    if (sc)
        rc = df_batch_set_tok_f32(batch, "token_level_rewards", sc->offsets, sc->data);
    const float *acc = df_batch_f32(batch, "acc"); /* the rule scorers' (none from a reward model) */
    if (!rc && m && acc) {
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
        rc = df_worker_reward(df_node_worker(ctx), ctx->node, batch, ctx->metrics);
    (void)out;
    df_worker_timing(ctx, "reward", t0);
    return rc;
}

int df_worker_register_reward_nodes(void)
{
    int rc = df_exec_register("DAGWorker.compute_reward", node_compute_reward);
    return rc ? rc : df_worker_register_reward_baseline();
}
