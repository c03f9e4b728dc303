/*
 * actor.h (internal) — the actor / reference role (verl's DataParallelPPOActor):
 * log-probabilities of responses under a model, and the PPO policy update
 * with mini-batches, micro-batches and gradient accumulation. SFT reuses the
 * same update with a cross-entropy loss.
 *
 * Data parallelism (df_actor_set_comm): the D ranks of a DP group hold the same
 * weights and each its own shard of the batch. The loss normalisers (token and
 * sequence counts of each mini-batch) are summed over the group, each rank
 * back-propagates its rows' share of the global loss, and the gradient blob is
 * summed over the group (all-reduce in buckets of 8 Mi floats) before clipping;
 * so D ranks x B samples take the same step as one rank x D*B samples, up to
 * float summation order (verl's DataParallelPPOActor with global batch info;
 * the gradient is summed, not averaged, because the normalisers are already
 * global). Every rank of the group must make the same calls in the same order
 * (each one below says which are collective). A rank that fails locally still
 * joins the next all-reduce with a failure flag, and then every rank returns
 * an error (DF_EINTERNAL on the others, naming the data-parallel group) instead
 * of waiting in a collective. That machinery lives in engine/train_core.h,
 * shared with the PPO critic (engine/critic.h).
 */
#ifndef DF_ENGINE_ACTOR_H
#define DF_ENGINE_ACTOR_H

#include "distflow/algo.h"
#include "distflow/batch.h"
#include "distflow/comm.h"
#include "distflow/metrics.h"
#include "distflow/model.h"
#include "engine/train_core.h"

/* The PPO loss settings: set at creation, replaceable per update (df_actor_set_loss) for a
   workflow's train_actor node with its own actor.* overrides. Such a node may override
   clip_ratio_low / high / c, entropy_coeff, kl_loss_coef, kl_loss_type, loss_agg_mode,
   policy_loss.loss_mode and ppo_epochs (the keys DAGWorker.train_actor registers, nodes.c); the
   other fields then keep the global config's values. Strings are borrowed. */
typedef struct df_actor_loss {
    const char *policy_loss;      /* policy_loss.loss_mode, e.g. "vanilla" (algo registry) */
    const char *loss_agg_mode;    /* "token-mean", ... */
    double clip_ratio_low, clip_ratio_high, clip_ratio_c;
    double entropy_coeff;
    double kl_loss_coef;          /* used when df_actor_params.use_kl_loss */
    const char *kl_loss_type;
    int ppo_epochs;               /* passes over the batch per update */
    int64_t loss_agg_norm_length; /* seq-mean-token-sum-norm's constant length: the worker sets
                                     actor.loss_scale_factor, else data.max_response_length */
    double policy_drift_coeff;    /* cpgd: alpha (actor.policy_drift_coeff) */
    double cpgd_drift_clip;       /* cpgd: bound on the drift weight r - 1; <= 0: none (the paper) */
    double clip_cov_ratio, clip_cov_lb, clip_cov_ub; /* policy_loss.clip_cov_* */
    double kl_cov_ratio, ppo_kl_coef;                /* policy_loss.kl_cov_ratio, ppo_kl_coef */
    double tau_pos, tau_neg;                         /* sapo: actor.tau_pos, tau_neg */
    const struct df_train_actor *config; /* the typed actor settings these come from, handed to the
                                            policy loss (df_policy_loss_input.config); may be NULL */
} df_actor_loss;

/* actor.router_replay.mode (docs/models.md, Router replay). R2: the old-log-prob pass records each
 * token's experts into the batch field routed_experts and the updates replay them; R3: the rollout
 * recorded them, and the old-log-prob pass and the updates replay them. */
enum { DF_ROUTER_REPLAY_OFF = 0, DF_ROUTER_REPLAY_R2 = 2, DF_ROUTER_REPLAY_R3 = 3 };
#define DF_ROUTES_COLUMN "routed_experts" /* TOK_I32: per sample (prompt + response tokens) x
                                             df_model_route_width entries */

typedef struct df_actor_params {
    df_core_optim optim;        /* actor_rollout_ref.actor.optim.*, grad_clip */
    /* batching */
    int64_t mini_batch_size;    /* samples (responses) per optimizer step; <= 0: whole batch */
    int64_t micro_batch_size;   /* samples per forward / backward; <= 0: token budget only */
    int64_t max_token_len;      /* packed tokens per micro-batch when > 0 (use_dynamic_bsz) */
    bool shuffle;               /* actor.shuffle: each epoch over a permutation (df_core_loss) */
    uint64_t shuffle_seed;      /* actor.data_loader_seed (null: trainer.seed) */
    int64_t logprob_micro_batch_size; /* the same two limits for forward-only log-prob passes */
    int64_t logprob_max_token_len;
    df_actor_loss loss;         /* PPO loss settings */
    /* fixed at creation (use_kl_loss and the TIS cap decide which columns an update needs) */
    bool use_kl_loss;             /* add the KL loss against ref_log_prob */
    double tis_imp_ratio_cap;     /* > 0: weight the policy loss by min(exp(old - rollout), cap),
                                     from column rollout_log_probs (verl PR #2953) */
    bool use_decoupled_loss;      /* AReaL's decoupled PPO: the ratio against old_log_probs (the
                                     proximal policy), the policy loss weighted by
                                     exp(old - rollout_log_probs) (df_behav_imp_weights); not with
                                     tis_imp_ratio_cap (the worker's validation refuses both) */
    double behav_imp_weight_cap;  /* with use_decoupled_loss: tokens whose weight exceeds it are
                                     dropped from the policy loss; <= 0: no cap */
    /* algorithm.rollout_correction in bypass mode (old_log_probs are the rollout's): verl's
       weights and rejections made in the loss, per micro-batch, from the policy being trained
       against old_log_probs (df_rollout_correction; not with the two corrections above) */
    bool bypass;                  /* bypass mode on: old_log_probs are the rollout's */
    int bypass_is_level;          /* DF_ROLLOUT_IS_*: the weights (OFF: none); ppo_clip measures them
                                     only, its ratio against the rollout already weighs (verl) */
    double bypass_is_threshold;   /* their truncation */
    df_rollout_rs bypass_rs;      /* the rejections (n = 0: none): a rejected token leaves the policy term */
    bool bypass_reinforce;        /* loss_type reinforce: the policy term is REINFORCE's -A log p (the gpg
                                     loss) times the weights; ppo_clip: the clipped ratio, unweighted
                                     (verl: the ratio against the rollout already corrects) */
    int router_replay;            /* DF_ROUTER_REPLAY_*: a model with experts routes its passes by the
                                     batch field routed_experts (actor.router_replay.mode) */
    uint64_t seed;                /* clip_cov's random token choice, keyed per micro-batch */
    float temperature;          /* rollout temperature: logits are divided by it */
    bool gradient_checkpointing; /* recompute each layer's activations in the backward
                                    (model.enable_gradient_checkpointing; DF_ACTS_CHECKPOINT) */
    bool bf16;                  /* mixed precision: bf16 matmuls with float32 accumulation from a bf16
                                   copy of the weights (fsdp_config.mixed_precision.param_dtype;
                                   DF_ACTS_BF16, docs/mixed_precision.md) */
    bool bf16_weights;          /* a frozen model (the reference) keeps only the bf16 copy of its
                                   layers' matmul weights (fsdp_config.model_dtype bf16; needs bf16) */
    const char *offload_dir;    /* a frozen bf16 model: its bf16 copy in a file in this directory,
                                   paged out after every pass (fsdp_config.param_offload;
                                   df_train_core_set_offload); NULL: resident */
    const char *progress_label; /* non-NULL: update_policy draws a TTY progress bar over samples */
} df_actor_params;

typedef struct df_actor df_actor;

/**
 * Wrap `model` (ownership passes to the actor). A trainable actor allocates
 * gradients and AdamW state; a frozen one (the reference) only runs forward.
 */
int df_actor_create(df_model *model, const df_actor_params *p, bool trainable, df_actor **out);
void df_actor_free(df_actor *a);
/**
 * Replace the PPO loss settings (all of df_actor_loss) used by the following
 * updates: a workflow's train_actor node with its own overrides sets them for
 * its update, then the worker sets the global ones back. The optimizer,
 * batching, use_kl_loss, tis_imp_ratio_cap, seed and temperature stay as
 * created. Nothing is checked here, as at creation: an unknown policy_loss,
 * loss_agg_mode or (with use_kl_loss) kl_loss_type fails the next update
 * (DF_EINVAL). The strings are borrowed: they must outlive the updates. Not
 * collective, but every rank of a DP group must set the same values.
 */
void df_actor_set_loss(df_actor *a, const df_actor_loss *l);
/**
 * Train data-parallel over `dp` (borrowed; it must outlive the actor's use of
 * it). NULL or a communicator of size 1 means no DP: no collective is called
 * and the numbers are exactly those of a lone actor. Every rank of `dp` must
 * start from identical weights (df_model_param_checksum checks it). The
 * mini-batch size stays per rank (the caller divides ppo_mini_batch_size by
 * the DP size, as verl does). `dp` holds one rank per DP group: gradients are
 * summed over all of its ranks, so with mp > 1 replicas per group (which hold
 * the same rows) build one DP comm per mp_rank (df_comm_split with color
 * mp_rank, key dp_rank); each replica then computes the same update.
 */
void df_actor_set_comm(df_actor *a, df_comm *dp);
/**
 * Log-probs and updates on backend `be` (trainer.device; df_train_core_set_backend): before the
 * first of them. A backend with the optimizer's entries keeps the master weights and AdamW there
 * and the model's host weights are their download after every step; either way the host weights
 * are current for the rollout, checkpoints and the reference.
 */
int df_actor_set_backend(df_actor *a, const df_backend *be);
df_model *df_actor_model(df_actor *a);
/** The actor's training core (its weights' precision, offload, activations): for tests. */
df_train_core *df_actor_core(df_actor *a);
/** Training steps taken so far (the lr schedule's step: one per update call, as verl). */
int64_t df_actor_step_count(const df_actor *a);
/** Whether the actor's matmuls run in bf16 (df_actor_params.bf16 as the machine allowed it). */
bool df_actor_bf16(const df_actor *a);
/**
 * The actor's bf16 copy of its weights (mixed precision; df_train_core_weights16), made now if
 * its first plan has not yet: for a colocated bf16 rollout to read instead of a copy of its own
 * (df_rollout_engine_share_weights16). Owned by the actor, alive until df_actor_free, refreshed
 * after every optimizer step and state load. Errors: DF_EINVAL without mixed precision, DF_ENOMEM.
 */
int df_actor_weights16(df_actor *a, const df_weights16 **out);
/** The actor's master weights on its device (df_train_core_device_weights): for a colocated
 *  rollout on the same backend to read (df_rollout_engine_share_device_weights); NULL when its
 *  optimizer runs on the host. */
const df_weights_dev *df_actor_device_weights(const df_actor *a);
/** With LoRA (df_actor_params.optim.lora), the adapter's PEFT files into `dir`/lora_adapter
 *  (df_train_core_save_lora); a no-op without. */
int df_actor_save_lora(const df_actor *a, const char *dir, const char *base_model);
/** Save / restore a trainable actor's training state: weights, AdamW moments and step, lr schedule
 *  position (df_train_core_save_state / _load_state at `path`, errors as those). */
int df_actor_save_state(df_actor *a, const char *path);
int df_actor_load_state(df_actor *a, const char *path);
/** Around a save by one rank, on every rank of the DP group: AdamW's sharded moments stream to
 *  its rank 0 as that rank saves (df_train_core_gather_begin / _end, errors as those). */
int df_actor_gather_begin(df_actor *a, bool saver);
int df_actor_gather_end(df_actor *a);

/**
 * Forward only: fill TOK_F32 column `out_col` (like response_ids) with each
 * response token's log-prob at the actor's temperature. When `entropy_mean`
 * is non-NULL it receives the token-mean entropy (metric actor/entropy); with
 * a DP comm that is the mean over the whole group's tokens (sum and count
 * all-reduced), so it is collective exactly when entropy_mean is non-NULL
 * (every rank passes NULL or every rank does not). An empty shard is fine.
 */
int df_actor_compute_log_prob(df_actor *a, df_batch *b, const char *out_col, double *entropy_mean);
/**
 * df_actor_compute_log_prob that also fills TOK_F32 column `sq_col` (NULL: not computed) with each
 * response token's sum over the vocabulary of squared probabilities at the same temperature,
 * sum_v softmax(z / T)_v^2 in (0, 1] (verl's sum_pi_squared, actor.calculate_sum_pi_squared), which
 * the optimal token baseline estimators read. One multiply-add per logit more (df_head_out).
 */
int df_actor_compute_log_prob_sq(df_actor *a, df_batch *b, const char *out_col, const char *sq_col,
                                 double *entropy_mean);
/**
 * The reference's log-probs from a LoRA actor (verl's ref_in_actor: "the actor without LoRA
 * applied is the ref"): the base weights are written back into the model (df_lora_unmerge, its
 * bf16 and device copies refreshed), `out_col` filled as df_actor_compute_log_prob does with the
 * micro-batch limits of `ref` (the reference's logprob_micro_batch_size / logprob_max_token_len),
 * then the adapters merged again. The same bits as a frozen copy of the base computing in the
 * actor's precision. entropy_mean as df_actor_compute_log_prob's (collective exactly when given).
 * Errors: DF_EINVAL (no LoRA), df_actor_compute_log_prob's.
 */
int df_actor_compute_base_log_prob(df_actor *a, df_batch *b, const char *out_col, const df_actor_params *ref,
                                   double *entropy_mean);

/**
 * PPO update over `b` (prompt_ids, response_ids, old_log_probs, advantages,
 * with use_kl_loss ref_log_prob, with tis_imp_ratio_cap > 0 or use_decoupled_loss
 * rollout_log_probs; TIS and the decoupled objective's behaviour weights scale the
 * policy loss only, not the KL or entropy terms, as in verl and AReaL; the two
 * together are DF_EINVAL): ppo_epochs passes over mini-batches; one
 * optimizer step per mini-batch, all at the lr of this training step (the
 * schedule advances once per call, as verl's lr_scheduler.step() per
 * update_actor). Records actor/pg_loss, actor/pg_clipfrac,
 * actor/pg_clipfrac_lower, actor/ppo_kl, actor/kl_loss, actor/grad_norm,
 * actor/lr (and actor/entropy_loss when entropy_coeff != 0; with use_decoupled_loss
 * actor/behave_imp_weight and actor/behave_approx_kl, means over the tokens kept under the
 * cap, and actor/behave_filtered_frac, the fraction of model tokens dropped by it).
 * Metrics are means over the optimizer steps of the call.
 *
 * Data parallel (collective over the DP comm): every rank takes as many
 * optimizer steps as the rank with the most mini-batches (an all-reduce max),
 * mini-batch k of the group being the union of the ranks' k-th local
 * mini-batches; a rank with no rows left joins with zero gradient. Per step it
 * all-reduces the token / sequence totals (the normalisers of every
 * loss_agg_mode: token-mean divides by the group's tokens, seq-mean-* by its
 * sequences), the loss statistics, then the gradient. The metrics above are
 * then global values, identical on every rank (grad_norm included).
 * clip_cov / kl_cov select their tokens within each micro-batch, as verl does
 * (so, unlike the other losses, their update depends on the micro-batching).
 */
int df_actor_update_policy(df_actor *a, df_batch *b, df_metrics *m);

/**
 * One supervised step: minimise the token-mean negative log-likelihood of
 * response_ids given prompt_ids over all of `b` (one optimizer step with
 * micro-batch gradient accumulation). With a per-token f32 column
 * "loss_mask" shaped as response_ids (multi-turn SFT: 1 on assistant
 * tokens), token j weighs loss_mask[j] and the mean is over the mask's sum. Records train/loss, train/lr,
 * train/grad_norm. Collective with a DP comm: the mean is over the group's
 * tokens, the gradient is summed over the group, train/loss is global.
 * `b` may have no rows on some ranks.
 */
int df_actor_sft_step(df_actor *a, df_batch *b, df_metrics *m);

#endif
