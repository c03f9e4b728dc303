/*
 * rollout_dump.h (internal) — trainer.rollout_data_dir: verl's _log_rollout_data, each training
 * step's rollouts as JSON lines (df_gen_dump_rows' keys, "step" included) in
 * <dir>/<global_step>.jsonl, or <step>.dp<d>.jsonl from each of several data-parallel ranks of the
 * step's last layout; written atomically.
 */
#ifndef DF_WORKER_DAG_ROLLOUT_DUMP_H
#define DF_WORKER_DAG_ROLLOUT_DUMP_H

#include "workers/worker_internal.h"

/**
 * At the end of step w->step, with `b` the step's batch on this rank: when trainer.rollout_data_dir
 * is set, this data-parallel rank (not a model-parallel replica, which holds the same rows) writes
 * its rows and records timing_s/dump_rollout_generations in `m` (verl's timer). Collective over w->group when the
 * key is set (every rank learns whether one failed). Errors: those of df_gen_dump_rows and
 * df_gen_dump_write (under trainer.rollout_data_dir), DF_ENOMEM, DF_EINTERNAL on the ranks whose
 * peer failed, comm failures.
 */
int df_worker_rollout_dump(df_dag_worker *w, const df_batch *b, df_metrics *m);

#endif
