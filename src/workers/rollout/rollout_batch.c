/* Generate and score batches (rollout_batch.h). */
#include "workers/rollout/rollout_batch.h"

#include "util/timeutil.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    df_progress bar;
} gen_progress;

static void on_progress(void *user, int64_t done, int64_t total, int64_t tokens)
{
    gen_progress *g = user;
    char extra[64];
    double dt = df_now() - g->bar.start;
    snprintf(extra, sizeof extra, "%lld tok, %.0f tok/s", (long long)tokens,
             dt > 0 ? (double)tokens / dt : 0.0);
    (void)total;
    df_progress_update(&g->bar, done, extra);
}

int df_generate_batch(df_rollout_engine *e, const df_model *m, const df_batch *prompts,
                      int64_t n, const df_sampling_params *sp, uint64_t seed, const char *label,
                      df_batch **out)
{
    const df_column *pc = df_batch_column(prompts, "prompt_ids");
    if (!pc || pc->kind != DF_COL_TOK_I32)
        return df_error(DF_EINVAL, "generate: the batch has no prompt_ids column");
    int64_t np = df_batch_size(prompts);
    const int64_t *idx = df_batch_i64(prompts, "index");
    uint64_t *keys = idx ? malloc((size_t)(np ? np : 1) * sizeof *keys) : NULL;
    if (idx && !keys)
        return df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; keys && i < np; i++)
        keys[i] = (uint64_t)idx[i];
    df_rollout_request req = {.n_prompts = np, .prompt_offsets = pc->offsets,
                              .prompt_tokens = pc->data, .n_samples = n, .seed = seed,
                              .prompt_keys = keys};
    df_rollout_result res = {0};
    gen_progress g;
    df_progress_begin(&g.bar, label, np * n);
    int rc = df_rollout_generate(e, m, &req, sp, &res, on_progress, &g);
    df_progress_end(&g.bar);
    free(keys);
    df_batch *b = NULL;
    if (!rc)
        rc = df_batch_repeat_interleave(prompts, n, &b);
    if (!rc)
        rc = df_batch_set_tok_i32(b, "response_ids", res.offsets, res.tokens);
    if (!rc)
        rc = df_batch_set_tok_f32(b, "rollout_log_probs", res.offsets, res.log_probs);
    df_rollout_result_free(&res);
    if (rc) {
        df_batch_free(b);
        return rc;
    }
    *out = b;
    return DF_OK;
}

/* verl's reward_extra_info with overlong_buffer.log: overlong_reward and overlong (1.0 where penalised). */
static int set_overlong(df_batch *b, float *overlong_reward)
{
    int rc = df_batch_set_f32(b, "overlong_reward", overlong_reward);
    for (int64_t i = 0; i < df_batch_size(b); i++)
        overlong_reward[i] = overlong_reward[i] < 0.0f ? 1.0f : 0.0f;
    return rc ? rc : df_batch_set_f32(b, "overlong", overlong_reward);
}

int df_score_batch(const df_tokenizer *tok, const df_reward_manager_cfg *rcfg, df_batch *b,
                   int64_t *n_empty)
{
    int64_t n = df_batch_size(b);
    char **texts = calloc((size_t)(n ? n : 1), sizeof *texts);
    float *score = malloc((size_t)(n ? n : 1) * sizeof *score);
    float *acc = malloc((size_t)(n ? n : 1) * sizeof *acc);
    float *overlong = malloc((size_t)(n ? n : 1) * sizeof *overlong);
    int rc = texts && score && acc && overlong ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n && !rc; i++) {
        int64_t len;
        const int32_t *ids = df_batch_tok_i32(b, "response_ids", i, &len);
        rc = ids ? df_tokenizer_decode(tok, ids, len, true, &texts[i])
                 : df_error(DF_EINVAL, "score: the batch has no response_ids column");
    }
    if (!rc)
        rc = df_reward_manager_run(rcfg, b, (const char *const *)texts, score, acc, overlong, n_empty);
    if (!rc)
        rc = df_batch_set_f32(b, "score", score);
    if (!rc)
        rc = df_batch_set_f32(b, "acc", acc);
    if (!rc && df_reward_manager_logs_overlong(rcfg))
        rc = set_overlong(b, overlong);
    for (int64_t i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(score);
    free(acc);
    free(overlong);
    return rc;
}
