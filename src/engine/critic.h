/*
 * critic.h (internal) — the PPO critic (verl's DataParallelPPOCritic): a
 * value model (include/distflow/model.h, num_labels 1) that predicts a value
 * per response token, and its update on the clipped value loss
 * (df_value_loss) with mini-batches, micro-batches and gradient accumulation.
 *
 * The critic shares the actor's training machinery (engine/train_core.h):
 * the same micro-batch planning and packing, the same data parallelism (the
 * DP group's token / sequence totals normalise the loss, the gradient blob is
 * summed over the group before clipping, failures travel as flags so no rank
 * waits in a collective), the same clipping + AdamW + lr schedule and the same
 * epoch / mini-batch loop. So D ranks x B samples take the same step as one
 * rank x D*B samples, up to float summation order.
 */
#ifndef DF_ENGINE_CRITIC_H
#define DF_ENGINE_CRITIC_H

#include "distflow/batch.h"
#include "distflow/comm.h"
#include "distflow/metrics.h"
#include "distflow/model.h"
#include "engine/train_core.h"

/* The value-loss settings: set at creation, replaceable per update (df_critic_set_loss) for a
   workflow's train_critic node with its own critic.* overrides. */
typedef struct df_critic_loss {
    int ppo_epochs;               /* critic.ppo_epochs (<= 0: 1) */
    double cliprange_value;       /* critic.cliprange_value */
    const char *loss_agg_mode;    /* critic.loss_agg_mode (borrowed) */
    int64_t loss_agg_norm_length; /* seq-mean-token-sum-norm's constant length */
} df_critic_loss;

typedef struct df_critic_params {
    df_core_optim optim;              /* critic.optim.*, critic.grad_clip */
    int64_t mini_batch_size;          /* samples per optimizer step (ppo_mini_batch_size x rollout.n /
                                         DP size); <= 0: the whole batch */
    int64_t micro_batch_size;         /* samples per forward / backward (ppo_micro_batch_size_per_gpu);
                                         <= 0: token budget only */
    int64_t max_token_len;            /* packed tokens per training micro-batch when > 0
                                         (use_dynamic_bsz: ppo_max_token_len_per_gpu) */
    bool shuffle;                     /* critic.shuffle (df_core_loss) */
    uint64_t shuffle_seed;            /* critic.data_loader_seed (null: trainer.seed) */
    int64_t forward_micro_batch_size; /* the same two limits for compute_values */
    int64_t forward_max_token_len;    /* (forward_micro_batch_size_per_gpu, forward_max_token_len_per_gpu) */
    df_critic_loss loss;              /* value-loss settings */
    bool gradient_checkpointing;      /* critic.model.enable_gradient_checkpointing (DF_ACTS_CHECKPOINT) */
    bool bf16;                        /* mixed precision (critic.model.fsdp_config.mixed_precision;
                                         DF_ACTS_BF16) */
    const char *progress_label;       /* non-NULL: update draws a TTY progress bar over samples */
} df_critic_params;

typedef struct df_critic df_critic;

/**
 * Wrap value model `model` (cfg.num_labels == 1; ownership passes to the
 * critic on success). Errors: DF_EINVAL for a model without a value head
 * (convert a causal LM with df_model_to_value_model first), an unknown
 * loss_agg_mode or a bad cliprange_value; DF_ENOMEM. On error the caller
 * still owns the model.
 */
int df_critic_create(df_model *model, const df_critic_params *p, df_critic **out);
void df_critic_free(df_critic *c);
/**
 * Replace the value-loss settings for the following updates (a workflow
 * node's overrides; the optimizer and batching stay as created). Errors, with
 * the settings unchanged: DF_EINVAL for an unknown loss_agg_mode or a bad
 * cliprange_value.
 */
int df_critic_set_loss(df_critic *c, const df_critic_loss *l);
/** Train data-parallel over `dp` (borrowed), exactly as df_actor_set_comm. */
void df_critic_set_comm(df_critic *c, df_comm *dp);
/** Values and updates on backend `be` (trainer.device; df_train_core_set_backend), before the first. */
int df_critic_set_backend(df_critic *c, const df_backend *be);
df_model *df_critic_model(df_critic *c);
/** The training core (its optimizer's sharding, its DP group), for reporting. */
const df_train_core *df_critic_core(const df_critic *c);
/** Updates taken so far (the lr schedule's step: one per df_critic_update). */
int64_t df_critic_step_count(const df_critic *c);
/** Save / restore the critic's training state (df_train_core_save_state / _load_state at `path`). */
int df_critic_save_state(df_critic *c, const char *path);
/** With LoRA (df_critic_params.optim.lora), the adapter's PEFT files (TOKEN_CLS, its score head
 *  whole) into `dir`/lora_adapter (df_train_core_save_lora); a no-op without. */
int df_critic_save_lora(const df_critic *c, const char *dir, const char *base_model);
int df_critic_load_state(df_critic *c, const char *path);
/** As df_actor_gather_begin / _end, for the critic's AdamW state. */
int df_critic_gather_begin(df_critic *c, bool saver);
int df_critic_gather_end(df_critic *c);

/**
 * Forward only (verl compute_values): fill TOK_F32 column `values` (laid out
 * like response_ids) with the critic's value of each response token, read at
 * the row that predicts it (the last prompt token for the first response
 * token). Micro-batched by forward_micro_batch_size / forward_max_token_len.
 * Needs prompt_ids (>= 1 token per row) and response_ids. Not collective; an
 * empty shard is fine.
 */
int df_critic_compute_values(df_critic *c, df_batch *b);

/**
 * Value update (verl update_critic) over `b` (prompt_ids, response_ids,
 * values — the old predictions from df_critic_compute_values — and returns):
 * ppo_epochs passes over mini-batches, one optimizer step each at this call's
 * lr, on loss = df_value_loss with the loss_agg_mode weights of the whole
 * mini-batch. Records the means over the call's optimizer steps of
 * critic/vf_loss, critic/vf_clipfrac (token mean), critic/vpred_mean (token
 * mean of the predictions before each step's update), critic/grad_norm, and
 * critic/lr. Collective over the DP comm exactly as df_actor_update_policy;
 * the metrics are global and identical on every rank.
 * Errors: DF_EINVAL for a missing column; model errors; DF_EINTERNAL when
 * another rank of the DP group failed.
 */
int df_critic_update(df_critic *c, df_batch *b, df_metrics *m);

#endif
