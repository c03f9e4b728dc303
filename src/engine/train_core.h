/*
 * train_core.h (internal) — the machinery every trainable role shares (the
 * actor in actor.c, the PPO critic in critic.c): the model with its gradient
 * blob and AdamW state, activations and per-token scratch sized for each
 * micro-batch plan, packing, the data-parallel reductions that carry failure
 * flags, the bucketed gradient all-reduce, clipping + AdamW at the scheduled
 * lr, and the epoch / mini-batch / micro-batch loop of a PPO-style update
 * with a per-micro-batch loss callback.
 *
 * Data parallelism follows actor.h: normalisers and statistics are summed
 * over the DP group, each rank back-propagates its rows' share of the global
 * loss, the gradient blob is summed (not averaged) before clipping, and a rank
 * that failed locally joins the next reduction with a flag so that every rank
 * returns an error instead of waiting in a collective.
 */
#ifndef DF_ENGINE_TRAIN_CORE_H
#define DF_ENGINE_TRAIN_CORE_H

#include "distflow/batch.h"
#include "distflow/comm.h"
#include "distflow/lora.h"
#include "distflow/metrics.h"
#include "distflow/model.h"
#include "distflow/optim.h"
#include "engine/packing.h"
#include "model/weights_dev.h"
#include "util/timeutil.h"

enum { DF_CORE_MAX_BUFS = 8, DF_CORE_MAX_SUMS = 16 };

/** Optimizer and lr schedule of one role (actor.optim.* / critic.optim.*, grad_clip). */
typedef struct df_core_optim {
    double lr, weight_decay, beta1, beta2, adam_eps;
    int64_t warmup_steps, total_steps;
    df_lr_kind schedule; /* after warmup: constant, cosine decay, or wsd (stable, then cosine) */
    double min_lr_ratio, num_cycles;
    double grad_clip;
    bool skip_nonfinite; /* trainer.skip_nonfinite_steps: skip a non-finite update (verl), else fail */
    df_lora_config lora; /* rank > 0: train LoRA adapters of these targets instead of the model
                            (a trainable core on the CPU backend; see df_train_core_init) */
    bool shard_optim;    /* fsdp_config.fsdp_size != 1: AdamW's moments sharded over the DP group
                            (ZeRO-1; df_train_core_optimizer_step) */
    uint64_t lora_seed;  /* draws the adapters' A */
    const char *lora_adapter; /* non-NULL: A and B from this PEFT adapter directory instead
                                 (lora_adapter_path; its config must be `lora`'s) */
} df_core_optim;

typedef struct df_train_core {
    df_model *model; /* owned */
    const char *who; /* "actor" / "critic": names the role in errors */
    bool trainable;
    df_core_optim o;
    df_backend be; /* where forward / backward run (trainer.device); CPU by default */
    float *grads;  /* [n_params] host, when trainable: what the host optimizer all-reduces, clips
                      and steps (unused with dev_optim) */
    float *bgrads; /* [n_params] the backward's accumulator in the backend's memory (grads on the CPU) */
    df_adamw *opt; /* config and step; m / v: the host's moments (with dev_optim a staging copy,
                      current only around df_train_core_save_state / load_state); NULL until
                      df_train_core_shard with o.shard_optim */
    /* The optimizer on the device (a backend that is not host memory and has the optimizer's
       entries of df_backend_ops: df_train_core_set_backend): the gradient is all-reduced,
       clipped and stepped where it was accumulated, and model->params is the download of
       wmaster after every step. */
    bool dev_optim;
    df_weights_dev wmaster; /* the master weights in the backend's memory, synced from
                               model->params whenever model->version moved (first step, a load) */
    float *dm, *dv;         /* [opt->n] AdamW's moments in the backend's memory (this rank's slice
                               when sharded), made at the first step */
    void *dp_group;         /* group_open's handle for dp (made at the first all-reduce) */
    df_acts *acts;
    int64_t acts_tokens, acts_out;
    bool checkpoint; /* activations checkpointed per layer (DF_ACTS_CHECKPOINT); set before a plan */
    bool bf16;       /* mixed precision (DF_ACTS_BF16; df_train_core_set_precision) */
    bool bf16_only;  /* frozen and stored in bf16: the layers' float32 matmul weights released */
    df_weights16 *w16; /* bf16: the copy of the weights every df_acts of this core shares, made
                          at the first plan and refreshed after every change of the weights */
    const char *offload_dir; /* frozen bf16: w16 lives in a file there, paged out after every
                                pass (df_train_core_set_offload); NULL: resident */
    df_packed pk;
    float *buf[DF_CORE_MAX_BUFS]; /* n_buf per-token scratch arrays of buf_cap floats */
    int n_buf;
    int64_t buf_cap;
    int64_t steps;              /* updates taken: the lr schedule's step */
    df_lora *lora;              /* LoRA (o.lora, df_train_core_init): the optimizer trains the
                                   adapter's blob, model->params holds the merged weights; owned */
    df_comm *dp;                /* data-parallel group (borrowed); NULL: this rank alone */
    /* ZeRO-1 (o.shard_optim; decided at the first step, state load or gather: df_train_core_shard):
       opt holds the moments of this rank's slice [shard_lo, shard_lo + opt->n) of the trained
       blob only; shard is the group they are spread over (dp then), NULL while whole. */
    bool shard_decided;
    df_comm *shard;
    int64_t shard_lo;
    struct df_core_gather *gather; /* df_train_core_gather_begin .. _end: a save's streaming */
    int64_t stream_piece;          /* floats a message of that stream (0: 4 Mi); tests make it small */
    const char *progress_label; /* non-NULL: updates draw a TTY bar over samples */
    df_progress bar;
    int64_t bar_done;
    int64_t *offs; /* df_train_core_rebased_offsets' buffer, grown as needed */
    int64_t offs_cap;
} df_train_core;

/**
 * Take ownership of `model`; a trainable core allocates gradients and AdamW state from `o`.
 * With o->lora.rank > 0 (distflow/lora.h) it trains LoRA adapters made from the model instead
 * (which must hold the base weights; A drawn from o->lora_seed and B zero, or both read from
 * o->lora_adapter and merged): the gradients, AdamW's state, the all-reduce, clipping and the
 * training state cover the adapter's blob only, every base tensor is frozen (the backward
 * computes none of its gradients), and after every optimizer step or state load the model's
 * targeted weights are the merged W0 + s B A, so its readers (the rollout, evaluation, the HF
 * save) see the trained policy. On a device backend the backward runs there (the adapter's
 * gradient in its memory) and the adapters' optimizer on the host (no dev_optim). n_buf (<= DF_CORE_MAX_BUFS) per-token scratch arrays are kept as large as
 * the largest micro-batch planned so far. On error the model is not freed (the caller still
 * owns it) and *c is released.
 */
int df_train_core_init(df_train_core *c, df_model *model, const df_core_optim *o, bool trainable, int n_buf,
                       const char *who);
/** Free everything, the model included. */
void df_train_core_release(df_train_core *c);
/**
 * `what` needs columns cols[0..n) of b. Every one other than prompt_ids and
 * response_ids must be a TOK_F32 column laid out like response_ids (the same
 * offsets): the losses read it at response-token offsets. DF_EINVAL naming
 * the column otherwise.
 */
int df_train_core_need_columns(const df_batch *b, const char *const *cols, int n, const char *what);
/** Floats the optimizer trains: the adapter's with LoRA, else the model's n_params. */
static inline int64_t df_train_core_n_train(const df_train_core *c)
{
    return c->lora ? c->lora->n_params : c->model->n_params;
}
/** What the backward accumulates the model's gradient into: bgrads, or NULL with LoRA (frozen). */
static inline float *df_train_core_model_grads(const df_train_core *c)
{
    return c->lora ? NULL : c->bgrads;
}
/** NULL or a size-1 communicator: no data parallelism (no collective is ever called). */
void df_train_core_set_comm(df_train_core *c, df_comm *dp);
/**
 * Run forward / backward on backend `be` (before the first plan). A device backend keeps the
 * activations, a copy of the weights and the gradient accumulator (bgrads) in its memory. With
 * the optimizer's entries (adamw_step, grad_norm, scale, group_open / _close, allreduce_sum;
 * a trainable core) it also keeps the master weights and AdamW's moments there (dev_optim):
 * the gradient is all-reduced, clipped and stepped on the device, the forward's copy refreshed
 * device to device, and the new weights downloaded to model->params once per step. Without
 * them the master weights, AdamW and the all-reduce stay on the host (one gradient download
 * and one weight upload per step). docs/backend.md, "Where things live". Errors: DF_ENOMEM
 * (or the backend's), DF_EINVAL after the first micro-batch.
 */
int df_train_core_set_backend(df_train_core *c, const df_backend *be);
/**
 * Compute dtype and weight storage (fsdp_config.mixed_precision.param_dtype, model_dtype; before
 * the first plan): bf16 runs the decoder's matmuls in bf16 from a bf16 copy of the weights
 * (DF_ACTS_BF16, docs/mixed_precision.md), refreshed once after every optimizer step and state
 * load; bf16_only (a frozen core, with bf16) keeps only that copy of the layers' matmul weights,
 * releasing their float32 pages once it is made. Errors: DF_EINVAL (bf16_only without bf16 or on
 * a trainable core, after the first plan), DF_EUNSUPPORTED (no native bf16 kernels here, or the
 * backend has no mixed precision), naming the role.
 */
int df_train_core_set_precision(df_train_core *c, bool bf16, bool bf16_only);
/**
 * verl's param_offload for a frozen core computing in bf16 (the reference): its bf16 copy, once
 * made, moves to an unlinked file in `dir` (df_weights16_offload) and df_train_core_page_out gives
 * its pages back after every pass; `dir` (borrowed) must outlive the core. Errors: DF_EINVAL (a
 * trainable core, no bf16, or after the first micro-batch).
 */
int df_train_core_set_offload(df_train_core *c, const char *dir);
/** An offloaded core's weight pages back to the OS (nothing otherwise); the next pass reads them
 *  from the page cache or the disk. */
void df_train_core_page_out(df_train_core *c);
/**
 * After every change of the model's weights (an optimizer step, a state load): the one bf16
 * conversion of this weight version (with bf16) and a device backend's copy. Errors: those of
 * df_weights16_refresh and df_acts_load_weights.
 */
int df_train_core_weights_changed(df_train_core *c);
/**
 * Give back the activations (a frozen core after its pass: the reference holds nothing between
 * steps while the actor trains); the next plan makes them again for its own batch.
 */
void df_train_core_drop_acts(df_train_core *c);
/**
 * The core's bf16 copy of the weights (with bf16: df_train_core_set_precision), made now if no
 * plan made it yet, versioned (df_weights16_refresh_model) and refreshed by
 * df_train_core_weights_changed; owned by the core. A bf16_only core's float32 matmul weights
 * are released once it is made. Errors: DF_EINVAL without bf16, df_weights16_create's.
 */
int df_train_core_weights16(df_train_core *c, const df_weights16 **out);
/** With dev_optim, the master weights in the backend's memory (current when their version is
 *  the model's: df_weights_dev_current; not made before the first step), else NULL. Alive
 *  until the core is freed. */
const df_weights_dev *df_train_core_device_weights(const df_train_core *c);
/** Zero the backward's accumulator (bgrads) before a mini-batch. */
int df_train_core_zero_grads(df_train_core *c);
/** This rank has no rows: a zero gradient where the all-reduce reads it (grads, or bgrads
 *  with dev_optim). */
int df_train_core_no_grads(df_train_core *c);
/** The accumulated gradient into the host blob `grads` (a no-op on the CPU, and with
 *  dev_optim: the gradient stays on the device). */
int df_train_core_grads_to_host(df_train_core *c);
/**
 * dev_optim: AdamW's moments (the whole or this rank's slice) between the device (dm, dv) and
 * the host's opt->m / opt->v, for the training state's file (train_state.c, and the sharded
 * save's stream); no-ops otherwise and before the first step made the device's. Errors: the
 * backend's.
 */
int df_train_core_moments_to_host(const df_train_core *c);
int df_train_core_moments_to_device(df_train_core *c);

/**
 * Micro-batches of rows of at most `rows` samples / `tokens` packed tokens
 * (<= 0: unlimited; df_plan_micro_batches), with activations and scratch
 * reserved for the largest. *bounds is malloc'd ([*n_mb + 1]).
 */
int df_train_core_plan(df_train_core *c, const df_batch *b, int64_t rows, int64_t tokens, int64_t **bounds,
                       int64_t *n_mb);

/**
 * Reduce v[0..n) (n < DF_CORE_MAX_SUMS) over the DP group with `op`; `rc`
 * (this rank's status so far) travels as a flag, and when any rank failed
 * every rank returns an error (its own, or DF_EINTERNAL naming the group and
 * `where`). Returns rc untouched without DP.
 */
int df_train_core_reduce(df_train_core *c, double *v, int n, df_comm_op op, int rc, const char *where);
/** Sum the gradient blob over the DP group in buckets of 8 Mi floats (with dev_optim, bgrads by
 *  the backend's allreduce_sum: NCCL on CUDA). */
int df_train_core_allreduce_grads(df_train_core *c);
/** lr of the current step: o.lr times the schedule (df_lr_schedule_factor) at `steps`. */
double df_train_core_lr(const df_train_core *c);
/**
 * Clip the gradient to o.grad_clip, AdamW step at `lr`, record <prefix>/grad_norm (mean) and
 * <prefix>/lr into m. With dev_optim on the device (grad_norm, scale, adamw_step: the
 * df_clip_grad_norm / df_adamw_step formulas), then the weights downloaded to model->params. A NaN / Inf gradient norm fails the step (DF_EINVAL naming the role,
 * <prefix>/grad_norm and `where`, e.g. "mini-batch 2 of 4, epoch 1", or NULL) and changes
 * nothing; with o.skip_nonfinite the update is skipped instead, as verl does, and counted in
 * <prefix>/nonfinite_steps (df_train_core_nonfinite). The gradient norm is the DP group's (the
 * blob is all-reduced before), so every rank takes the same decision.
 */
int df_train_core_optimizer_step(df_train_core *c, double lr, df_metrics *m, const char *prefix,
                                 const char *where);
/**
 * A non-finite update: with o.skip_nonfinite, add 1 to <prefix>/nonfinite_steps in m and return
 * DF_OK (the caller skips the update); otherwise DF_EINVAL with "<who>: <what> is not finite
 * (<where>)" and how to skip instead. `what` names the metric and its value.
 */
int df_train_core_nonfinite(df_train_core *c, df_metrics *m, const char *prefix, const char *what,
                            const char *where);

/**
 * The slice [*lo, *hi) of n trained floats that rank r of k owns under ZeRO-1: boundaries at
 * multiples of 16 floats (64 bytes, the kernels' vector width), ascending, [0, n) in all.
 */
void df_train_core_shard_range(int64_t n, int r, int k, int64_t *lo, int64_t *hi);
/**
 * Make AdamW's state (c->opt, zero moments) once (idempotent; a frozen core has none): whole, or
 * with o.shard_optim, a DP group of k > 1 ranks and at least 32 k trained floats, only this
 * rank's slice (df_train_core_shard_range), so that the whole moments are never allocated (with
 * dev_optim neither on the device: dm / dv hold the slice). df_train_core_init makes it at once
 * without o.shard_optim. Then each optimizer step updates only that slice, from the whole
 * all-reduced gradient (so the norm, the clip and each element's update are the replicated
 * run's, bit for bit), and every slice's owner broadcasts its new weights (on a device: the
 * others' slices set to -0.0 and summed, which is exact): all ranks hold all the weights. Called
 * by the step, the state load and the gather, which every rank of the group reaches together.
 * Errors: DF_ENOMEM.
 */
int df_train_core_shard(df_train_core *c);
/** Whether df_train_core_shard shards (or did): the conditions above, from the core's settings now. */
bool df_train_core_sharded(const df_train_core *c);
/** After a sharded step: every slice's owner broadcasts its new values of p (the trained blob). */
int df_train_core_share_slices(df_train_core *c, float *p);
/**
 * Around a save by one rank, collective over the DP group (every rank calls begin, then end).
 * With sharded moments and `saver` true on the group's rank 0 (its value there decides for the
 * group), begin readies the stream: the other ranks post their slices (non-blocking sends);
 * df_train_core_save_state on rank 0 then writes its own slice and receives the others' piece by
 * piece (4 Mi floats) as the file is written, so no rank holds the whole moments; end waits for
 * the sends (others) or receives whatever the save did not take (rank 0: a save that failed or
 * was skipped), then frees the stream. Otherwise both do nothing. Errors: DF_ENOMEM (on rank 0:
 * every rank returns it), the communicator's.
 */
int df_train_core_gather_begin(df_train_core *c, bool saver);
int df_train_core_gather_end(df_train_core *c);
/** Free a stream without communicating (df_train_core_release's; NULL-safe). */
void df_train_core_gather_free(df_train_core *c);
/**
 * AdamW's moments as the tensors exp_avg and exp_avg_sq of w (shape [n_train]): borrowed when
 * whole, streamed from the group (df_train_core_gather_begin) when sharded. Errors: DF_EINVAL for
 * sharded moments on a rank the stream does not end at; df_st_writer_add's.
 */
struct df_st_writer;
int df_train_core_add_moments(df_train_core *c, struct df_st_writer *w, const int64_t shape[1]);

/**
 * Save what resuming this role needs (train_state.c) to `path` as a safetensors file, atomically
 * (temporary, fsync, rename): F32 tensors params (the float32 master weights; the HF directory beside
 * may round them), exp_avg and exp_avg_sq (AdamW's m and v), each [n_params] in the model's blob
 * layout (docs/checkpoints.md), and metadata format "distflow-train-state/1", role, optim_step
 * (AdamW's step) and lr_scheduler_step (c->steps). With LoRA the three tensors are the adapter's
 * ([its n_params], its layout) and the metadata adds lora_rank, lora_alpha and lora_targets.
 * Sharded moments stream to the group's rank 0 (df_train_core_gather_begin), the one rank that
 * may save them. Errors: DF_EINVAL for a frozen core or sharded moments elsewhere, DF_EIO naming
 * the file, DF_ENOMEM, the stream's.
 */
int df_train_core_save_state(df_train_core *c, const char *path);
/**
 * Restore weights, AdamW moments and step and the lr schedule's step from a file written by
 * df_train_core_save_state for a model of the same parameter count. Errors (naming the file):
 * DF_ENOTFOUND, DF_EIO, DF_EINVAL for a malformed or truncated file, another format, a missing
 * tensor or metadata key, or a tensor that is not F32 [n_params]. With LoRA the adapter is read and merged
 * into the model; a state whose LoRA metadata differs from the core's (or a LoRA state on a core
 * without, and the reverse) is DF_EINVAL naming both. Sharded moments (df_train_core_shard,
 * which this calls: every rank of the group loads) read only this rank's slice, so a state saved
 * on any number of ranks resumes on any other. On error the core's state is undefined (the
 * caller gives up the run).
 */
int df_train_core_load_state(df_train_core *c, const char *path);

/**
 * With LoRA, the adapter in PEFT's layout into `dir`/lora_adapter (df_lora_save_peft;
 * base_model_name_or_path = base_model), as verl's checkpoint manager saves lora_adapter/ beside
 * the model; a no-op without. Errors: df_lora_save_peft's, naming the role.
 */
int df_train_core_save_lora(const df_train_core *c, const char *dir, const char *base_model);

/** The loss of an update, called per micro-batch by df_train_core_update. */
typedef struct df_core_loss {
    int n_sums;                       /* statistics per mini-batch, < DF_CORE_MAX_SUMS */
    int64_t micro_rows, micro_tokens; /* micro-batch limits (df_train_core_plan) */
    bool shuffle;                     /* each epoch's mini-batches from a permutation of the rows */
    uint64_t shuffle_seed;            /* its generator's seed, the same at every update */
    /* Loss and gradient of rows [s, e) of mini-batch mb (this rank's part of a
       mini-batch of `tokens` response tokens / `seqs` non-empty responses over the DP
       group): ACCUMULATE into c->grads, add statistics already normalised by the
       mini-batch into sums[0..n_sums). */
    int (*micro)(void *user, const df_batch *mb, int64_t s, int64_t e, int64_t tokens, int64_t seqs,
                 double *sums);
    /* Record the mini-batch's global statistics (summed over the group). */
    void (*record)(void *user, const double *sums, df_metrics *m);
    void *user;
    const char *prefix; /* metric prefix of grad_norm / lr ("actor", "critic") */
    const char *const *sum_names; /* [n_sums] metric names of the statistics, for the non-finite guard */
} df_core_loss;

/**
 * epochs passes over `b` in mini-batches of mini_batch_size rows (<= 0: the
 * whole batch), in batch order or, with loss->shuffle, each pass over a permutation of the rows
 * drawn from a generator seeded with loss->shuffle_seed at this call (verl's make_iterator: a
 * DataLoader with shuffle over the batch, its torch.Generator seeded at every update, so every
 * update's k-th pass uses the same permutation of row positions; each rank permutes its own
 * rows); one optimizer step per mini-batch, all at the lr of this call
 * (the schedule advances once per call). Collective with DP: every rank takes
 * as many steps as the rank with the most mini-batches, mini-batch k being the
 * union of the ranks' k-th local mini-batches (a rank without rows joins with
 * zero gradient); per step the token / sequence totals, the statistics and the
 * gradient are all-reduced. `rc` carries a failure of the caller's own checks
 * into the first collective. A mini-batch whose global statistics (the loss) or
 * gradient norm are NaN / Inf fails the update, or is skipped without an optimizer
 * step with o.skip_nonfinite (df_train_core_nonfinite); the error names the
 * statistic, the mini-batch and epoch, and the first micro-batch of this rank whose
 * statistics were not finite.
 */
int df_train_core_update(df_train_core *c, df_batch *b, int64_t mini_batch_size, int epochs,
                         const df_core_loss *loss, df_metrics *m, int rc);

/**
 * Offsets of rows [s, e) of a ragged column, rebased to 0, into c's buffer
 * ([e - s + 1]; valid until the next call, owned by c).
 */
int df_train_core_rebased_offsets(df_train_core *c, const int64_t *ro, int64_t s, int64_t e, int64_t **out);

#endif
