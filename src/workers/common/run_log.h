/*
 * run_log.h (internal) — where a trainer's step metrics go, shared by `distflow train` and `distflow
 * sft`: metrics.jsonl (the crash-safe log of ckpt_files.h, always written, with the row's step and
 * timestamp) and trainer.logger's other sinks (logging/loggers.h: tensorboard). The console line
 * stays each trainer's own. One process (rank 0) holds it open; a zeroed log is a closed one.
 */
#ifndef DF_WORKER_RUN_LOG_H
#define DF_WORKER_RUN_LOG_H

#include "distflow/config.h"
#include "distflow/metrics.h"
#include "logging/loggers.h"
#include "workers/common/ckpt_files.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct df_run_log {
    df_metrics_log metrics; /**< metrics.jsonl */
    df_loggers *sinks;      /**< trainer.logger's other sinks (NULL: none) */
} df_run_log;

/** Where a trainer's logs go: its `trainer.*` keys. */
typedef struct df_run_log_opts {
    const char *out_dir;           /**< trainer.default_local_dir (resolved) */
    int64_t resumed_step;          /**< the checkpoint's step a resumed run continues from; 0: fresh */
    const df_config_strs *logger;  /**< trainer.logger */
    const char *tensorboard_dir;   /**< trainer.tensorboard_dir (NULL: $TENSORBOARD_DIR or the default) */
    const char *project, *experiment; /**< trainer.project_name / experiment_name */
    bool print;                    /**< say where the event file goes (stdout) */
} df_run_log_opts;

/** Prepare metrics.jsonl (df_metrics_log_open) and open the other sinks. On failure nothing stays open.
 *  Errors: those of df_metrics_log_open and df_loggers_open. */
int df_run_log_open(df_run_log *l, const df_run_log_opts *o);
/** True once the first line has made metrics.jsonl (the run has logged something). */
bool df_run_log_started(const df_run_log *l);
/** One step: its metrics.jsonl line (`sync`: durable before a checkpoint that follows), then the sinks. */
int df_run_log_step(df_run_log *l, int64_t step, const df_metrics *m, bool sync);
/** Close and zero (a zeroed log too). */
void df_run_log_close(df_run_log *l);

#endif
