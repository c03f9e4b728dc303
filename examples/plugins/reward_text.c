/*
 * reward_text.c — an example distflow plugin: a reward node that scores the
 * response *text*, through the public node context (distflow/node.h).
 *
 * compute_text_reward decodes each response with the job's tokenizer
 * (df_node_tokenizer) and scores 1 when the text contains the sample's
 * `ground_truth` as a whole number (not inside a longer one: "17" does not
 * contain the answer "7"), else 0 — the check of a rule-based math reward,
 * written as a plugin. Like the built-in reward, the score goes on the last
 * response token of `token_level_scores`, with `token_level_rewards` = scores.
 * It also reports reward_text/score_mean and reward_text/chars_mean (decoded
 * characters per response) into the step's metrics.
 *
 * A workflow names it as its reward node's executable:
 *     - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout],
 *        executable_ref: build/plugins/libreward_text.so:compute_text_reward}
 * Only public headers.
 */
#include <distflow/node.h>

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

DF_PLUGIN_DECLARE_ABI;

/* `answer` occurs in `text` with no digit right before or after it. */
static int contains_number(const char *text, const char *answer)
{
    size_t n = strlen(answer);
    if (!n)
        return 0;
    for (const char *p = strstr(text, answer); p; p = strstr(p + 1, answer)) {
        int before = p > text && isdigit((unsigned char)p[-1]);
        int after = isdigit((unsigned char)p[n]);
        if (!before && !after)
            return 1;
    }
    return 0;
}

DF_API int compute_text_reward(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)out; /* edits the batch in place */
    const char *id = ctx->node ? ctx->node->node_id : "compute_text_reward";
    const df_tokenizer *tok = df_node_tokenizer(ctx);
    if (!tok)
        return df_error(DF_EINVAL, "node '%s': no tokenizer (run it inside `distflow train`)", id);
    const int64_t *offs = batch ? df_batch_offsets(batch, "response_ids") : NULL;
    if (!offs || !df_batch_has(batch, "ground_truth"))
        return df_error(DF_EINVAL, "node '%s': the batch needs response_ids and ground_truth", id);
    float *scores = NULL;
    int rc = df_batch_alloc_tok_f32_like(batch, "token_level_scores", "response_ids", &scores);
    int64_t n = df_batch_size(batch);
    double sum_score = 0, sum_chars = 0;
    for (int64_t i = 0; !rc && i < n; i++) {
        char *text = NULL;
        int64_t len = 0;
        const int32_t *ids = df_batch_tok_i32(batch, "response_ids", i, &len);
        rc = df_tokenizer_decode(tok, ids, len, true, &text);
        if (rc)
            break;
        const char *gt = df_batch_str(batch, "ground_truth", i);
        float s = gt && contains_number(text, gt) ? 1.0f : 0.0f;
        if (offs[i + 1] > offs[i])
            scores[offs[i + 1] - 1] = s;
        sum_score += s;
        sum_chars += (double)strlen(text);
        free(text);
    }
    if (!rc)
        rc = df_batch_set_tok_f32(batch, "token_level_rewards", offs, scores);
    if (!rc && ctx->metrics && n > 0) {
        df_metrics_set(ctx->metrics, "reward_text/score_mean", sum_score / (double)n);
        df_metrics_set(ctx->metrics, "reward_text/chars_mean", sum_chars / (double)n);
    }
    return rc ? df_error_wrap(rc, "node '%s'", id) : DF_OK;
}
