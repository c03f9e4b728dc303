/* Custom reward functions (custom_reward_function.path / .name) for the tests: score_quarter
 * gives 0.25 for every response, whatever its data_source, so test_plugin_algo's trainer
 * metrics show which scorer ran; score_parity varies within a group (test_siirl_workflows). */
#include <distflow/dag.h>

DF_PLUGIN_DECLARE_ABI;

DF_API int score_quarter(const char *data_source, const char *solution_str, const char *ground_truth,
                         const char *extra_info, double *score)
{
    (void)data_source, (void)solution_str, (void)ground_truth, (void)extra_info;
    *score = 0.25;
    return DF_OK;
}

/* 1 for a response of odd length, else 0: the responses to one prompt usually disagree, so
 * DAPO's dynamic sampling keeps some groups and refills for the rest (test_siirl_workflows). */
DF_API int score_parity(const char *data_source, const char *solution_str, const char *ground_truth,
                        const char *extra_info, double *score)
{
    (void)data_source, (void)ground_truth, (void)extra_info;
    size_t n = 0;
    while (solution_str && solution_str[n])
        n++;
    *score = (double)(n % 2);
    return DF_OK;
}

/* Reward nodes: each response's score on its last token, as the built-in reward puts it, from
 * score(ctx, row, first token id); token_level_rewards = token_level_scores. */
typedef float (*row_score_fn)(const df_node_ctx *ctx, int64_t row, int32_t first_token);

static int score_rows(const df_node_ctx *ctx, df_batch *batch, const char *who, row_score_fn score)
{
    const df_column *ids = batch ? df_batch_column(batch, "response_ids") : NULL;
    float *scores = NULL;
    if (!ids)
        return df_error(DF_EINVAL, "%s: no response_ids", who);
    int rc = df_batch_alloc_tok_f32_like(batch, "token_level_scores", "response_ids", &scores);
    for (int64_t i = 0; !rc && i < df_batch_size(batch); i++)
        if (ids->offsets[i + 1] > ids->offsets[i])
            scores[ids->offsets[i + 1] - 1] = score(ctx, i, ((const int32_t *)ids->data)[ids->offsets[i]]);
    return rc ? rc : df_batch_set_tok_f32(batch, "token_level_rewards", ids->offsets, scores);
}

static float first_token_parity(const df_node_ctx *ctx, int64_t row, int32_t first)
{
    (void)ctx, (void)row;
    return (float)(first % 2);
}

/* A reward node scoring each response by the parity of its first token id: varied within a
 * group, from the node graph rather than the reward manager (test_siirl_workflows' DAPO refill
 * through a workflow's own reward node). */
DF_API int parity_reward_node(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)out;
    return score_rows(ctx, batch, "parity_reward_node", first_token_parity);
}

static float odd_rows_on_rerun(const df_node_ctx *ctx, int64_t row, int32_t first)
{
    (void)first;
    return ctx->pass > 0 ? (float)(row % 2) : 0.0f;
}

/* A reward node that scores every response 0 on the step's pass and, on a re-run of the graph
 * (ctx->pass > 0), 1 for odd rows and 0 for even ones: DAPO's filter keeps nothing of the first
 * batch and every group of the first refill (test_plugin_algo). */
DF_API int pass_reward_node(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)out;
    return score_rows(ctx, batch, "pass_reward_node", odd_rows_on_rerun);
}

static float one_when_greedy(const df_node_ctx *ctx, int64_t row, int32_t first)
{
    (void)row, (void)first;
    return (ctx->flags & DF_PASS_GREEDY) ? 1.0f : 0.0f;
}

/* A reward node that scores every sampled response 0 and every response of a greedy pass
 * (DF_PASS_GREEDY: ReMax's baseline) 1: the baselines come from this node exactly when they are
 * all 1 (test_plugin_algo). */
DF_API int greedy_reward_node(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)out;
    return score_rows(ctx, batch, "greedy_reward_node", one_when_greedy);
}
