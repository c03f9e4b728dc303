/*
 * checkpoint.h (internal) — the trainer's checkpoints and resume (docs/checkpoints.md): verl's
 * <default_local_dir>/global_step_<N>/ layout and latest_checkpointed_iteration.txt, written
 * crash-safely (a temporary directory beside it, fsync, rename, then `latest`), holding everything
 * the run needs to continue bit-exactly.
 */
#ifndef DF_WORKER_DAG_CHECKPOINT_H
#define DF_WORKER_DAG_CHECKPOINT_H

#include "workers/worker_internal.h"

/**
 * Remove what a killed save left in w->out_dir (temporaries named .global_step_<N>.tmp and
 * .global_step_<N>.old.tmp); rank 0 only, before anything else is written there.
 * Errors: DF_EIO naming the path.
 */
int df_worker_checkpoint_cleanup(df_dag_worker *w);

/**
 * Save global_step_<w->step>: the actor (HF directory + train_state.safetensors), the critic likewise,
 * trainer_state.json and data.json (rank 0: the dataloader's position), into
 * .global_step_<N>.tmp, then renamed into place and latest_checkpointed_iteration.txt updated.
 * Collective over w->comm: every rank calls it; when one fails every rank returns an error and
 * `latest` is left as it was. Errors: DF_EIO naming the file, DF_ENOMEM, DF_EINTERNAL (another rank).
 */
int df_worker_checkpoint_save(df_dag_worker *w);

/**
 * After a save, rank 0: df_checkpoint_prune with trainer.max_actor_ckpt_to_keep /
 * max_critic_ckpt_to_keep (null: keep all); remove_previous_ckpt_in_save (deprecated, verl) keeps
 * one of each where they are null. A removal that fails is a warning (the run goes on).
 */
int df_worker_checkpoint_prune(df_dag_worker *w);

/**
 * trainer.resume_mode: find the checkpoint to continue from (auto: the one latest_checkpointed_
 * iteration.txt in w->out_dir names, none when that file is absent; resume_path: trainer.
 * resume_from_path; disable: none) and restore it into w (models, optimizers, lr schedules,
 * dataloader position, KL controller; w->resumed_step = its global step). Call after the models,
 * the critic and the dataloader exist. Collective over w->comm; every rank reads the files itself.
 * rc: this rank's status so far, carried into the collective (a failed rank loads nothing).
 * Errors name the path and the problem: DF_ENOTFOUND (a missing checkpoint or file), DF_EINVAL
 * (malformed or truncated file, resume_from_path unset, a different dataset size or gen_batch_size),
 * DF_EINTERNAL (another rank failed). Another world size resumes (the banner says it).
 */
int df_worker_checkpoint_resume(df_dag_worker *w, int rc);

/**
 * Open trainer.logger's sinks on rank 0 (logging/loggers.h) into w->loggers. w->out_dir/metrics.jsonl
 * always: truncated on a fresh start; on a resume from step N, the lines of steps <= N kept (a line
 * that does not parse, e.g. cut by a crash, is dropped), the file rewritten atomically and opened
 * for appending. tensorboard: a new event file in trainer.tensorboard_dir (df_tensorboard_dir),
 * whose path is printed. Errors: DF_EIO naming the file, DF_ENOMEM.
 */
int df_worker_open_metrics(df_dag_worker *w);

#endif
