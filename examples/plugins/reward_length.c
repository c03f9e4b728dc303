/*
 * reward_length.c — an example distflow plugin: a custom reward node.
 *
 * compute_length_reward has the signature of every node function (siiRL's
 * DAGWorker.compute_reward): it scores each response by how close its length
 * L is to a target T read from the node's config,
 *     score = max(0, 1 - |L - T| / T),
 * and, like the built-in rule-based reward (verl's NaiveRewardManager),
 * writes it on the last response token of `token_level_scores`, with
 * `token_level_rewards` = scores (no KL in the reward). An empty response
 * has no token to hold a score and gets none.
 *
 * Node config (df_node_set_config, or `config:` in a workflow):
 *     target_length   positive integer, default 16
 * declared in compute_length_reward_keys, so that `distflow config check` (which reads the
 * declaration from this library's file) refuses any other key on the node.
 *
 * df_plugin_init also registers the function as "length_reward.compute", and
 * length_reward_pipeline is a dag.custom_pipeline_fn: siiRL's GRPO pipeline
 * with this reward in place of function_reward's built-in.
 */
#include <distflow/dag.h>

#include <stdlib.h>
#include <string.h>

DF_PLUGIN_DECLARE_ABI;

/* A positive integer from the node config, or dflt when the key is absent. */
static int config_positive(const df_node *node, const char *key, int64_t dflt, int64_t *out)
{
    const char *s = node ? df_node_get_config(node, key) : NULL;
    *out = dflt;
    if (!s)
        return DF_OK;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || v <= 0)
        return df_error(DF_EINVAL, "node '%s': config %s='%s' is not a positive integer",
                        node->node_id, key, s);
    *out = v;
    return DF_OK;
}

DF_API const df_node_keys compute_length_reward_keys = {.own = {"target_length"}};

DF_API int compute_length_reward(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)out; /* edits the batch in place */
    const char *id = ctx->node ? ctx->node->node_id : "compute_length_reward";
    if (!batch)
        return df_error(DF_EINVAL, "node '%s': no input batch", id);
    const int64_t *offs = df_batch_offsets(batch, "response_ids");
    if (!offs)
        return df_error(DF_EINVAL, "node '%s': the batch has no response_ids column", id);
    int64_t target;
    int rc = config_positive(ctx->node, "target_length", 16, &target);
    float *scores = NULL;
    if (!rc)
        rc = df_batch_alloc_tok_f32_like(batch, "token_level_scores", "response_ids", &scores);
    if (rc)
        return rc;
    int64_t n = df_batch_size(batch);
    double sum_len = 0, sum_score = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t len = offs[i + 1] - offs[i];
        double d = (double)(len > target ? len - target : target - len);
        double s = 1.0 - d / (double)target;
        if (s < 0)
            s = 0;
        if (len > 0)
            scores[offs[i + 1] - 1] = (float)s;
        sum_len += (double)len;
        sum_score += s;
    }
    rc = df_batch_set_tok_f32(batch, "token_level_rewards", offs, scores);
    if (!rc && ctx->metrics && n > 0) {
        df_metrics_set(ctx->metrics, "reward_length/response_length_mean", sum_len / (double)n);
        df_metrics_set(ctx->metrics, "reward_length/score_mean", sum_score / (double)n);
    }
    return rc;
}

/* dag.custom_pipeline_fn: siiRL's grpo_training_pipeline with the length reward. */
DF_API int length_reward_pipeline(df_task_graph **out)
{
    df_pipeline *p = df_pipeline_new("grpo_length_reward", "GRPO with a response-length reward");
    if (!p)
        return df_error(DF_ENOMEM, "out of memory");
    static const char *const roll[] = {"rollout_actor"}, *const rew[] = {"function_reward"},
                              *const adv[] = {"calculate_advantages"},
                              *const old[] = {"actor_old_log_prob"},
                              *const ref[] = {"reference_log_prob"};
    df_pipeline_add_node(p, "rollout_actor", "DAGWorker.generate", NULL, 0,
                         DF_NODE_MODEL_INFERENCE, DF_ROLE_ROLLOUT, false);
    df_pipeline_add_node(p, "function_reward", "length_reward.compute", roll, 1, DF_NODE_COMPUTE,
                         DF_ROLE_REWARD, false);
    df_pipeline_add_node(p, "calculate_advantages", "DAGWorker.compute_advantage", rew, 1,
                         DF_NODE_COMPUTE, DF_ROLE_ADVANTAGE, false);
    df_pipeline_add_node(p, "actor_old_log_prob", "DAGWorker.compute_old_log_prob", adv, 1,
                         DF_NODE_MODEL_TRAIN, DF_ROLE_ACTOR, true);
    df_pipeline_add_node(p, "reference_log_prob", "DAGWorker.compute_ref_log_prob", old, 1,
                         DF_NODE_MODEL_TRAIN, DF_ROLE_REFERENCE, false);
    df_pipeline_add_node(p, "actor_train", "DAGWorker.train_actor", ref, 1, DF_NODE_MODEL_TRAIN,
                         DF_ROLE_ACTOR, false);
    int rc = df_pipeline_build(p, out); /* reports the first add error, if any */
    df_pipeline_free(p);
    return rc;
}

DF_API int df_plugin_init(void)
{
    return df_exec_register_keys("length_reward.compute", compute_length_reward, &compute_length_reward_keys);
}
