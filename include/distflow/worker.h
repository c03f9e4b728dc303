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

#ifdef __cplusplus
extern "C" {
#endif

typedef struct df_dag_worker df_dag_worker;

/**
 * Set up this rank's worker from a resolved `train` config. `comm` is the
 * job's world (df_comm_world(); NULL means that) and is borrowed: every rank
 * of it calls this collectively. Each rank plans the job the same way
 * (df_plan_create over trainer.nnodes machines sharing the launched ranks),
 * takes its own TaskGraph and the communicator of the ranks sharing it, gives
 * every node a data-parallel layout (DP size = group size / the role's
 * model-parallel size: rollout.tensor_model_parallel_size,
 * actor / ref / critic ulysses_sequence_parallel_size; other nodes inherit
 * the layout of the node before them), then loads: tokenizer and model
 * (actor_rollout_ref.model.path; every rank reads the files itself), the
 * reference model when the KL loss needs it, rollout engine, this rank's
 * shard of the datasets (prompts chat-templated and encoded once, over-long
 * ones filtered or truncated per data.*), dataloader, reward manager. `cfg`
 * must outlive the worker. Errors name the config key or file at fault.
 */
DF_API int df_dag_worker_create(const df_config *cfg, df_comm *comm, df_dag_worker **out);

/**
 * Train: optional validation before the first step (trainer.val_before_train),
 * then trainer.total_training_steps steps (or total_epochs over the data),
 * validating every trainer.test_freq steps and at the end, saving the actor as
 * a Hugging Face directory <default_local_dir>/global_step_<N>/actor every
 * trainer.save_freq steps and at the end (save_freq > 0). Each step's metrics go
 * to the console (trainer.logger has "console") and, as one JSON object per
 * line, to <default_local_dir>/metrics.jsonl.
 */
DF_API int df_dag_worker_fit(df_dag_worker *w);

DF_API void df_dag_worker_free(df_dag_worker *w);

/**
 * Supervised fine-tuning (verl's fsdp_sft_trainer) from a resolved `sft`
 * config: prompt (data.prompt_key: chat messages or text, rendered with the
 * chat template) -> response (data.response_key) + EOS, cross-entropy on the
 * response tokens, AdamW with warmup + cosine / constant schedule. Saves the
 * model as a Hugging Face directory <default_local_dir>/global_step_<N> and
 * records N in <default_local_dir>/latest_checkpointed_iteration.txt.
 */
DF_API int df_sft_run(const df_config *cfg);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_WORKER_H */
