/*
 * max_pos.h (internal) — a job's longest sequence against each model's max_position_embeddings,
 * checked before anything is loaded or run (train's df_train_check, sft, eval, embodied eval), as
 * verl checks max_model_len (prompt_length + response_length) against the HF config before it
 * starts vLLM, which itself refuses a max_model_len above the model's. A position past the range
 * the model was trained for has no defined quality (RoPE gives any position an angle, so nothing
 * would fail); the engine's own guards (df_model_forward, df_rollout_generate) stay behind these.
 */
#ifndef DF_WORKER_MAX_POS_H
#define DF_WORKER_MAX_POS_H

#include "distflow/config.h"
#include "distflow/model.h"
#include "distflow/train_config.h"

#include <stdint.h>

/** A job's longest sequence in tokens and the keys that set it, "KEY=V (where) + KEY=V (where)". */
typedef struct df_seq_bound {
    int64_t len;
    char why[1024];
} df_seq_bound;

/**
 * b->len <= df_model_max_positions(cfg), else DF_EINVAL naming `where` (the model key's
 * df_config_where, or "command line" for a command's option), model_key=dir, the bound and the keys
 * behind it, and the model's limit with its config.json path (and ov->who when cfg was read with
 * overrides `ov`; may be NULL). Writes nothing.
 */
int df_check_max_pos(const df_model_config *cfg, const char *dir, const df_config_overrides *ov, const char *where,
                     const char *model_key, const df_seq_bound *b);

/**
 * df_check_max_pos with the config of directory `dir` (as configured; "~/" expanded): its
 * config.json with the overrides `ov` (may be NULL) merged in, no weights. A directory without a
 * config.json that parses is DF_OK: the model's loader refuses it before anything runs. Errors:
 * DF_EINVAL, DF_ENOMEM.
 */
int df_check_max_pos_dir(const char *dir, const df_config_overrides *ov, const char *where, const char *model_key,
                         const df_seq_bound *b);

/**
 * train: the longest sequence of the policy and its critic (rollout, actor, reference, critic,
 * every agent group's): data.max_prompt_length + actor_rollout_ref.rollout.response_length, the
 * rollout's slot length. What grows a conversation stays inside it: multi-turn replies and tool
 * responses count against the response length (distflow/rollout.h, df_turn_handler), a
 * chained multi-agent episode ends when an agent's prompt would pass data.max_prompt_length
 * (marft_rollout.c), an embodied call adds action_chunks_len x action_token_len tokens (taken
 * when longer). actor_rollout_ref.rollout.max_model_len, when set and longer, is the bound (verl's
 * sglang rollout checks max_position_embeddings >= max_model_len). `c` gives the keys' origins.
 */
void df_train_seq_bound(const df_config *c, const df_train_config *t, df_seq_bound *b);

/**
 * train: the reward model's longest input: with reward_model.model.input_tokenizer the
 * re-templated text cut at reward_model.max_length (null: data.max_prompt_length +
 * data.max_response_length, as reward_setup.c); without, the policy's ids as they are
 * (df_train_seq_bound).
 */
void df_train_rm_seq_bound(const df_config *c, const df_train_config *t, df_seq_bound *b);

#endif
