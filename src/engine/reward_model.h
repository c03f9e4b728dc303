/*
 * reward_model.h (internal) — a reward model (verl's RewardModelWorker): an HF
 * *ForSequenceClassification or *ForTokenClassification decoder with one label,
 * frozen, whose score of a token sequence is its head's output at the sequence's
 * last token (verl _forward_micro_batch: the last valid token of the attention
 * mask; transformers' sequence classifiers pool at the same row).
 *
 * The model is include/distflow/model.h's value model (num_labels 1, score.weight
 * [1, hidden], score.bias [1], 0 for a sequence classifier without one), run
 * forward-only (DF_ACTS_FORWARD_ONLY) through the training core's packing and
 * micro-batch planning, in float32 or, with bf16, with the decoder's matmuls in
 * bf16 (DF_ACTS_BF16).
 */
#ifndef DF_ENGINE_REWARD_MODEL_H
#define DF_ENGINE_REWARD_MODEL_H

#include "distflow/backend.h"
#include "distflow/model.h"

typedef struct df_reward_model_params {
    int64_t micro_batch_size; /* sequences per forward (reward_model.micro_batch_size_per_gpu);
                                 <= 0: the token budget only */
    int64_t max_token_len;    /* packed tokens per forward when > 0 (use_dynamic_bsz:
                                 forward_max_token_len_per_gpu), counting one token more per
                                 sequence than it has (reward_model.c); a longer one runs alone */
    bool bf16;                /* bf16 matmuls (DF_ACTS_BF16) from a bf16-only copy of the layers'
                                 matmul weights (df_train_core_set_precision's bf16_only: the
                                 float32 ones are released at the first score); refused where
                                 the CPU has none (reward_model.model.fsdp_config.mixed_precision
                                 .param_dtype) */
} df_reward_model_params;

typedef struct df_reward_model df_reward_model;

/**
 * Wrap `model` (ownership passes on success): it must have a score head with one
 * label (num_labels 1). Errors: DF_EINVAL for a causal LM (no score head), those of
 * df_train_core_set_precision; the caller keeps the model on error.
 */
int df_reward_model_create(df_model *model, const df_reward_model_params *p, df_reward_model **out);
/**
 * Load `dir` (df_model_load) as a reward model. Errors: df_model_load's; DF_EUNSUPPORTED
 * naming dir/config.json when it holds a causal LM (architectures *ForCausalLM or none:
 * a reward model is a *ForSequenceClassification or *ForTokenClassification checkpoint).
 */
int df_reward_model_load(const char *dir, const df_reward_model_params *p, df_reward_model **out);
void df_reward_model_free(df_reward_model *rm);
/** Run on backend `be` (trainer.device), before the first score. */
int df_reward_model_set_backend(df_reward_model *rm, const df_backend *be);
const df_model *df_reward_model_model(const df_reward_model *rm);
/** Whether it computes in bf16 (its params' bf16, accepted by df_train_core_set_precision). */
bool df_reward_model_bf16(const df_reward_model *rm);

/**
 * scores[i] = the head's output at the last token of sequence i, for n sequences whose
 * tokens are tokens[offsets[i] .. offsets[i + 1]) (offsets[0] = 0; each at least one token,
 * ids below the model's vocabulary). Micro-batched by the params' limits, in order; each
 * sequence attends to itself only. Errors: DF_EINVAL (an empty sequence, an id out of
 * range), model errors, DF_ENOMEM.
 */
int df_reward_model_score(df_reward_model *rm, int64_t n, const int64_t *offsets, const int32_t *tokens,
                          float *scores);

#endif
