/* Score a batch of responses with the reward manager (score_batch.h). */
#include "workers/reward/score_batch.h"

#include <stdlib.h>
#include <string.h>

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

int df_score_key_column(df_dataloader *dl, const char *reward_fn_key)
{
    if (!reward_fn_key || !reward_fn_key[0] || !strcmp(reward_fn_key, "data_source"))
        return DF_OK;
    return df_dataloader_add_column(dl, reward_fn_key);
}
