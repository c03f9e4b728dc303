/*
 * rm_score.h (internal) — the reward node's reward-model mode (reward_model.enable; verl
 * RewardModelWorker.compute_rm_score): build each sample's reward-model input, score it
 * with the reward model at its last token, and place the score at the last response token.
 */
#ifndef DF_WORKER_RM_SCORE_H
#define DF_WORKER_RM_SCORE_H

#include "distflow/batch.h"
#include "distflow/tokenizer.h"
#include "engine/reward_model.h"

typedef struct df_rm_scorer {
    df_reward_model *model;        /* the reward model (borrowed) */
    const df_tokenizer *input_tok; /* reward_model.model.input_tokenizer: decodes the responses;
                                      NULL: no re-templating, the actor's token ids are read */
    const df_tokenizer *rm_tok;    /* the reward model's own tokenizer (with input_tok) */
    int64_t max_length;            /* re-templated inputs keep their first max_length tokens */
} df_rm_scorer;

/**
 * The reward model's input of row i of b into *ids / *n (malloc'd):
 *  - without input_tok: prompt_ids ++ response_ids as they are;
 *  - with input_tok (verl _switch_chat_template): the response decoded with input_tok,
 *    special tokens kept and every occurrence of its eos token's text removed, appended as
 *    {"role": "assistant", "content": ...} to the messages of the row's raw_prompt (a JSON
 *    array), rendered with rm_tok's chat template (add_generation_prompt false), encoded
 *    without special tokens and cut to its first max_length tokens (verl's right truncation).
 * Errors: DF_EINVAL naming the row (no raw_prompt, not a JSON array, the template's
 * errors, an empty input), DF_ENOMEM.
 */
int df_rm_input(const df_rm_scorer *s, const df_batch *b, int64_t i, int32_t **ids, int64_t *n);

/**
 * TOK_F32 column rm_scores of b (laid out like response_ids, zero everywhere) with each
 * non-empty response's reward-model score at its last token (verl _expand_to_token_level).
 * Rows with an empty response are not scored (verl's slice of the response part drops
 * their score). Errors: df_rm_input's, the reward model's.
 */
int df_rm_score_batch(const df_rm_scorer *s, df_batch *b);

#endif
