/* A job's longest sequence against each model's max_position_embeddings (max_pos.h). */
#include "workers/common/max_pos.h"
#include "workers/embodied/embodied_worker.h"

#include "distflow/common.h"
#include "util/fsutil.h"

#include <stdio.h>
#include <stdlib.h>

int df_check_max_pos(const df_model_config *cfg, const char *dir, const df_config_overrides *ov, const char *where,
                     const char *model_key, const df_seq_bound *b)
{
    if (b->len <= df_model_max_positions(cfg))
        return DF_OK;
    const char *who = ov && ov->json ? ov->who : NULL;
    return df_error(DF_EINVAL,
                    "%s: %s=%s: the job's sequences reach %lld tokens (%s), more than the model's "
                    "%s %lld (%s/config.json%s%s): positions past it are outside the range "
                    "the model was trained for (vLLM refuses such a max_model_len); lower the lengths or use a "
                    "model with a longer context",
                    where, model_key, dir, (long long)b->len, b->why, df_model_max_positions_name(cfg),
                    (long long)df_model_max_positions(cfg), dir,
                    who ? " with " : "", who ? who : "");
}

int df_check_max_pos_dir(const char *dir, const df_config_overrides *ov, const char *where, const char *model_key,
                         const df_seq_bound *b)
{
    char *d = df_expand_user(dir), *file = d ? df_path_join(d, "config.json") : NULL;
    int rc = file ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    df_model_config cfg;
    if (!rc && df_file_exists(file)) {
        if (df_model_config_load_ex(file, ov, &cfg)) /* the loader says what is wrong with it, first */
            df_clear_error();
        else
            rc = df_check_max_pos(&cfg, d, ov, where, model_key, b);
    }
    free(file);
    free(d);
    return rc;
}

void df_train_seq_bound(const df_config *c, const df_train_config *t, df_seq_bound *b)
{
    const char *P = "data.max_prompt_length", *R = "actor_rollout_ref.rollout.response_length";
    const int64_t p = t->data.max_prompt_length, r = t->actor_rollout_ref.rollout.response_length;
    const struct df_train_embodied *e = &t->actor_rollout_ref.embodied;
    const int64_t call = e->action_chunks_len * e->action_token_len;
    const df_config_opt_int mml = t->actor_rollout_ref.rollout.max_model_len;
    b->len = p + r;
    snprintf(b->why, sizeof b->why, "%s=%lld (%s) + %s=%lld (%s)", P, (long long)p, df_config_where(c, P), R,
             (long long)r, df_config_where(c, R));
    if (df_embodied_enabled(t) && p + call > b->len) { /* one model call's answer */
        b->len = p + call;
        snprintf(b->why, sizeof b->why,
                 "%s=%lld (%s) + one model call's actor_rollout_ref.embodied.action_chunks_len=%lld (%s) x "
                 "action_token_len=%lld (%s) tokens",
                 P, (long long)p, df_config_where(c, P), (long long)e->action_chunks_len,
                 df_config_where(c, "actor_rollout_ref.embodied.action_chunks_len"), (long long)e->action_token_len,
                 df_config_where(c, "actor_rollout_ref.embodied.action_token_len"));
    }
    if (mml.set && mml.v > b->len) {
        b->len = mml.v;
        snprintf(b->why, sizeof b->why, "actor_rollout_ref.rollout.max_model_len=%lld (%s)", (long long)mml.v,
                 df_config_where(c, "actor_rollout_ref.rollout.max_model_len"));
    }
}

void df_train_rm_seq_bound(const df_config *c, const df_train_config *t, df_seq_bound *b)
{
    const struct df_train_reward_model *k = &t->reward_model;
    if (!k->model.input_tokenizer) {
        df_train_seq_bound(c, t, b);
        return;
    }
    if (k->max_length.set) {
        b->len = k->max_length.v;
        snprintf(b->why, sizeof b->why, "reward_model.max_length=%lld (%s), the re-templated input's limit",
                 (long long)b->len, df_config_where(c, "reward_model.max_length"));
        return;
    }
    const char *P = "data.max_prompt_length", *R = "data.max_response_length";
    b->len = t->data.max_prompt_length + t->data.max_response_length;
    snprintf(b->why, sizeof b->why, "reward_model.max_length=null: %s=%lld (%s) + %s=%lld (%s)", P,
             (long long)t->data.max_prompt_length, df_config_where(c, P), R, (long long)t->data.max_response_length,
             df_config_where(c, R));
}
