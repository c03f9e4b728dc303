/*
 * console.h (internal) — what a user of `distflow train` reads: the resolved config saved beside the
 * run, a start banner, one line per step, the checkpoints, validations and an end summary. Lines go
 * to stdout on rank 0 when trainer.logger has "console" (warnings and errors go to stderr
 * elsewhere); each block is flushed, so a pipe shows them in order with stderr.
 */
#ifndef DF_WORKER_DAG_CONSOLE_H
#define DF_WORKER_DAG_CONSOLE_H

#include "workers/dag/evaluate.h"
#include "workers/worker_internal.h"

/**
 * Rank 0: the resolved config (df_config_dump: every key, `# where` on the values not from the
 * defaults) written atomically to <trainer.default_local_dir>/config.yaml, replacing the copy of an
 * earlier start of the same directory (a resumed run records the config it runs with). Loading it
 * gives the same values. Other ranks: nothing. Errors: DF_EIO naming the file (with strerror),
 * DF_ENOMEM.
 */
int df_worker_save_config(df_dag_worker *w);

/**
 * The start banner (rank 0, console on): the config file, the keys set by the file or the command
 * line and the path of the full copy; the model (architecture, parameters, layers, hidden size,
 * heads, vocabulary, dtype of its files and the float32 compute); the tokenizer; the prompts per
 * dataset; the world (ranks, machines) and the pipeline's nodes in order with each one's
 * data-parallel x model-parallel ranks; the device; the outputs (checkpoints, metrics.jsonl,
 * validation dumps, config.yaml); fresh start or resume; the steps to run.
 */
void df_console_banner(const df_dag_worker *w);

/**
 * The step's line: `step N/T | score ... | ... | tok/s/rank R | tok/s J` from the step's reduced
 * metrics m (a column only when its metric is present; tok/s/rank is verl's perf/throughput,
 * tok/s the job's tokens over the step's wall time, shown with more than one rank).
 */
void df_console_step(const df_dag_worker *w, const df_metrics *m);

/** A validation at w->step: recorded for the summary; its line printed (rank 0, console on). */
void df_console_validation(df_dag_worker *w, const df_eval_result *res, double seconds);

/** The checkpoint of w->step was written: recorded for the summary; `saved <dir>` printed. */
void df_console_saved(df_dag_worker *w);

/**
 * The end summary (rank 0, console on): `how` ("finished", "stopped on request", "validation
 * only"), the steps this run trained and its wall time, the last step's score, the last
 * validation, the last checkpoint (and that the same command resumes from it) and where the
 * metrics and the config are.
 */
void df_console_summary(const df_dag_worker *w, const char *how);

#endif
