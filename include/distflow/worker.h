/*
 * distflow/worker.h — the DAG worker (docs/architecture.md): one per rank, each its
 * own controller. It builds its TaskGraph from the config (the built-in
 * pipeline selected by algorithm.adv_estimator / workflow_type), owns the
 * role workers (actor, reference, rollout, reward) and runs every training
 * step by walking the graph: rollout_actor -> function_reward ->
 * calculate_advantages -> actor_old_log_prob -> reference_log_prob ->
 * actor_train for GRPO, as siiRL's grpo_pipeline.
 */
#ifndef DISTFLOW_WORKER_H
#define DISTFLOW_WORKER_H

#include "distflow/comm.h"
#include "distflow/config.h"
#include "distflow/scheduler.h"

#include <signal.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct df_dag_worker df_dag_worker;

/**
 * Everything `distflow train` checks before it loads a model or a dataset, as
 * the one function `distflow plan`, `distflow config check` and
 * df_dag_worker_create all call, so that no command accepts a config another
 * refuses (docs/configuration.md, "Which command checks what"). For a job of
 * `world` ranks (`mpirun -np`), in order:
 *  1. settings distflow cannot honour yet (data.multi_agent,
 *     rollout.multi_turn.enable, dag.env_enable, data.custom_cls.path,
 *     reward_model.sandbox_fusion.url, ...): DF_EUNSUPPORTED naming the key;
 *  2. the plan (df_plan_create) for trainer.nnodes machines sharing the
 *     `world` ranks (trainer.n_gpus_per_node = world / nnodes; a warning when
 *     it was set to something else): the graph of dag.workflow_path /
 *     dag.custom_pipeline_fn / the built-in pipeline, split and scheduled;
 *  3. the graph: its agent groups (algorithm.adv_estimator=gae_marft needs several and its
 *     advantage node in the last one), then every node in agent group 0 (multi-agent graphs
 *     are refused, naming the node and what its group would need of its own);
 *     every node's executable ref, or in a workflow file siiRL's default for
 *     its role, known (df_exec_check: names, siiRL aliases, plugin refs read
 *     from the library's ELF file, no plugin code run); a node's own model
 *     directory (an agent group's, a critic's) holds the job's longest
 *     sequence within its max_position_embeddings (as in 6); in a workflow file
 *     each node's `config:` merged over `cfg` and every key one its function
 *     reads per node (the table in src/workers/dag/train_check.c; siiRL's
 *     `model_params` is the planner's and always allowed); with
 *     algorithm.filter_groups.enable, nothing but generate and the built-in
 *     reward upstream of a dynamic-sampling node (its refill runs only those);
 *  4. each model node's model-parallel size (rollout.tensor_model_parallel_size,
 *     actor / ref / critic ulysses_sequence_parallel_size) divides the ranks
 *     of its process group;
 *  5. df_config_validate_train_ex for the actor's data-parallel size as rank 0
 *     lays it out (its process group's ranks / the actor's ulysses size; the
 *     group's ranks when rank 0 runs no actor update);
 *  6. the files (src/workers/dag/preflight.h): the model directories exist
 *     (a missing hub id `Org/Name` gets a "download it first" hint), each
 *     model's max_position_embeddings (its config.json) is at least the job's
 *     longest sequence (data.max_prompt_length + rollout.response_length, or
 *     rollout.max_model_len when longer; the reward model's input limit for
 *     it: src/workers/common/max_pos.h), as verl checks before starting vLLM; the data
 *     files exist, and every data_source (or data.reward_fn_key column) value
 *     of the rows the run reads has a scorer in the reward registry (unless
 *     custom_reward_function.path scores every row; training rows only when a
 *     built-in reward node scores them); trainer.val_only without
 *     data.val_files is refused.
 * Messages name the file, node and key: "<workflow file> node '<id>': ...".
 * Warnings (workflow options ignored, settings that are probably mistakes) go
 * to `warn` (NULL: dropped). On success *plan (when plan is not NULL) is the
 * plan made in step 2 (free with df_plan_free); NULL on failure.
 * Errors: DF_EINVAL for world outside [1, 2^20] and the failures above, with
 * the codes of the functions named.
 */
DF_API int df_train_check(const df_config *cfg, int world, df_warn_fn warn, void *user, df_plan **plan);

/**
 * Step 2 of df_train_check alone: the plan for a job of `world` ranks, without the checks
 * before or after it (nothing but the config's config.json files is read). `distflow plan`
 * shows it for a multi-agent graph that df_train_check refuses, so that its agent groups and
 * their process groups can be seen. *plan: free with df_plan_free. Errors: those of the plan.
 */
DF_API int df_train_plan(const df_config *cfg, int world, df_warn_fn warn, void *user, df_plan **plan);

/**
 * Set up this rank's worker from a resolved `train` config. `comm` is the
 * job's world (df_comm_world(); NULL means that) and is borrowed: every rank
 * of it calls this collectively. First df_train_check for the launched
 * ranks (every rank reaches the same verdict); each rank then takes the plan
 * it made (trainer.nnodes machines sharing the launched ranks),
 * takes its own TaskGraph and the communicator of the ranks sharing it, gives
 * every node a data-parallel layout (DP size = group size / the role's
 * model-parallel size: rollout.tensor_model_parallel_size,
 * actor / ref / critic ulysses_sequence_parallel_size; other nodes inherit
 * the layout of the node before them), then loads: tokenizer and model
 * (actor_rollout_ref.model.path; every rank reads the files itself), the
 * reference model when the KL loss needs it, rollout engine, this rank's
 * shard of the datasets (prompts chat-templated and encoded once, over-long
 * ones filtered or truncated per data.*), dataloader, reward manager; then,
 * per trainer.resume_mode, restores the checkpoint the run continues from
 * (docs/checkpoints.md; collective). `cfg` must outlive the worker. Errors
 * name the config key or file at fault.
 */
DF_API int df_dag_worker_create(const df_config *cfg, df_comm *comm, df_dag_worker **out);

/**
 * Train: optional validation before the first step (trainer.val_before_train;
 * skipped on a resume unless val_only), then the steps after the resumed one
 * (0 on a fresh start) up to trainer.total_training_steps (or total_epochs over
 * the data), validating every trainer.test_freq steps and at the end, saving a
 * checkpoint <default_local_dir>/global_step_<N>/ (the actor as a Hugging Face
 * directory, and the training state; docs/checkpoints.md) every
 * trainer.save_freq steps and at the end (save_freq > 0). Each step's metrics go
 * to the console (trainer.logger has "console") and, as one JSON object per
 * line, to <default_local_dir>/metrics.jsonl.
 * A NaN / Inf loss or gradient norm fails the step (DF_EINVAL naming the step,
 * the role and the metric) before anything of it is saved, unless
 * trainer.skip_nonfinite_steps; a checkpoint is never written from non-finite
 * weights (docs/numerics.md). With a stop flag (df_dag_worker_set_stop_flag)
 * raised on any rank, every rank stops at the same step boundary: the step
 * finishes, is checkpointed when save_freq > 0 and logged, and fit returns
 * DF_ESTOPPED (docs/checkpoints.md, "Stopping").
 */
DF_API int df_dag_worker_fit(df_dag_worker *w);

/**
 * Make df_dag_worker_fit poll *flag at every step boundary (before each step and
 * after its validation): non-zero asks for a stop, and its value (e.g. the signal
 * number) is what df_dag_worker_stopped reports. The flag is only read, so a
 * signal handler may set it (volatile sig_atomic_t, async-signal-safe). The
 * ranks agree by an all-reduce (max) over the job every step, so a flag raised on
 * one rank stops them all at the same step. Every rank calls it, or none; `flag`
 * must outlive the worker; NULL removes it.
 */
DF_API void df_dag_worker_set_stop_flag(df_dag_worker *w, const volatile sig_atomic_t *flag);

/** The largest stop flag value over the ranks when fit returned DF_ESTOPPED, else 0. */
DF_API int df_dag_worker_stopped(const df_dag_worker *w);

DF_API void df_dag_worker_free(df_dag_worker *w);

/** How df_sft_run runs. A zeroed struct (or NULL): this process alone, never stopped. */
typedef struct df_sft_opts {
    /** The data-parallel ranks, every one calling df_sft_run (collective); NULL: this process alone. */
    df_comm *comm;
    /** Polled at every step boundary (a signal handler sets it); non-zero on any rank: every rank
     *  stops after the same step. NULL: never. */
    const volatile sig_atomic_t *stop;
} df_sft_opts;

/**
 * Supervised fine-tuning (verl's fsdp_sft_trainer) from a resolved `sft`
 * config: prompt (data.prompt_key: chat messages or text, rendered with the
 * chat template) -> response (data.response_key) + EOS, cross-entropy on the
 * response tokens, AdamW with warmup + cosine / constant schedule. Saves the
 * model as a Hugging Face directory <default_local_dir>/global_step_<N> and
 * records N in <default_local_dir>/latest_checkpointed_iteration.txt.
 * On o->comm's ranks (docs/sft.md, "On several ranks"): each loads and trains
 * on its shard of the rows (i % size == rank) and of every batch
 * (data.train_batch_size / size rows), the loss is the token mean over the
 * whole global batch, rank 0 writes the logs and checkpoints, and every rank
 * returns the same success or failure (DF_EINTERNAL on the ranks whose peer
 * failed; the failing rank's own error says why). A stop request
 * (docs/checkpoints.md, "Stopping") ends the run after the step in progress,
 * checkpointed when trainer.save_freq > 0: DF_ESTOPPED, *stopped (may be NULL)
 * the flag's largest value over the ranks (0 when not stopped).
 */
DF_API int df_sft_run(const df_config *cfg, const df_sft_opts *o, int *stopped);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_WORKER_H */
