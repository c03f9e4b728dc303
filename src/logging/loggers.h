/*
 * logging/loggers.h (internal) — where a run's step metrics go: the sinks named by trainer.logger.
 *
 * A sink is a struct of function pointers (log one step, close). df_loggers is the set a trainer
 * opens from its logger list, verl's Tracking: one log call fans a step out to every sink. The
 * names, as in verl: `console` (the trainer's one-line summary, printed by the trainer), `file` /
 * `jsonl` (metrics.jsonl), `tensorboard` (a TensorBoard event file). metrics.jsonl is written
 * whatever the list says, by the trainers' crash-safe log (workers/common/run_log.h: one write per
 * line, cut back to the checkpoint on a resume) — `distflow plot` draws it — so the set opens a sink
 * only for `tensorboard`. Any other name (wandb, swanlab, mlflow, ...) is refused.
 *
 * Only rank 0 writes logs: other ranks hold a NULL set, which every function accepts.
 * Layer: logging sits just above util (scripts/check-layers.sh); it knows df_metrics and files,
 * nothing of configs or workers, so the trainers hand it resolved paths.
 */
#ifndef DF_LOGGING_LOGGERS_H
#define DF_LOGGING_LOGGERS_H

#include "distflow/metrics.h"

#include <stdbool.h>
#include <stdint.h>

/** One sink. `self` is the backend's state; `name` the logger name it was opened for. */
typedef struct df_metrics_sink {
    const char *name;
    const char *file; /**< the file it writes (owned by self) */
    void *self;
    /** Record one step's metrics, every one in their order. When it returns, the step is with the
     *  operating system (no user-space buffer), so a crash of the process loses at most the step
     *  being written. Errors carry the file and strerror(errno). */
    int (*log)(void *self, int64_t step, const df_metrics *m);
    /** Flush, close and free `self`; the status of the last write or of the close. */
    int (*close)(void *self);
} df_metrics_sink;

typedef struct df_loggers_opts {
    const char *const *names; /**< [n_names] trainer.logger, checked by df_loggers_check_names */
    int n_names;
    const char *tb_dir;       /**< event directory (df_tensorboard_dir); read when names has tensorboard */
    int64_t resume_step;      /**< > 0: the checkpoint's step a resumed run continues from (tensorboard) */
} df_loggers_opts;

typedef struct df_loggers df_loggers;

/** The accepted logger names, for messages: "console, file, jsonl, tensorboard". */
const char *df_logger_names(void);
/** True if `name` is in names[0..n). */
bool df_loggers_has(const char *const *names, int n, const char *name);
/**
 * Check a logger list: DF_EUNSUPPORTED naming `key` (e.g. "trainer.logger (file.yaml:12)") and the
 * first name that is not a distflow logger, with the list of those that are; also for
 * `tensorboard` in a build without protobuf-c. DF_OK otherwise (an empty list included).
 */
int df_loggers_check_names(const char *const *names, int n, const char *key);
/**
 * Open the sinks of o->names (checked first): tensorboard when listed (`console`, `file` and `jsonl`
 * name what the trainers write themselves). On failure nothing stays open. DF_EIO naming the file and the reason (strerror),
 * DF_EUNSUPPORTED for a bad name, DF_ENOMEM.
 */
int df_loggers_open(const df_loggers_opts *o, df_loggers **out);
/** Fan one step out to every sink, in order; the first failure is returned (later sinks not called).
 *  DF_OK for l == NULL. */
int df_loggers_log(df_loggers *l, int64_t step, const df_metrics *m);
/** Close every sink and free the set (NULL accepted); the first failure of a close. */
int df_loggers_close(df_loggers *l);

/* ---- backends (open one sink; the set calls them) ------------------------------------------ */


/**
 * TensorBoard: a new event file `events.out.tfevents.<unix seconds>.<hostname>` in `dir` (made
 * with its parents; `.<pid>.<k>` appended when the name is taken), TFRecord-framed Event messages
 * (logging/tfrecord.h; fields and numbers of TensorFlow's event.proto / summary.proto, packed by
 * protobuf-c from logging/tb_event.proto): first {wall_time, file_version "brain.Event:2"}; when
 * resume_step > 0, {step resume_step + 1, session_log START}, the restart marker after which
 * TensorBoard's Python reader drops the earlier files' points at and beyond that step (those of the
 * stopped run its checkpoint did not keep; docs/logging.md); then per step one {wall_time, step, summary} holding every
 * metric as a simple_value (float32) with its metric name as tag. Each step is written with
 * write(2) in one record. DF_EIO naming the path and strerror; DF_EUNSUPPORTED without protobuf-c.
 */
int df_sink_tensorboard_open(const char *dir, int64_t resume_step, df_metrics_sink *out);
/** Whether this build has the TensorBoard writer (protobuf-c found when it was configured). */
bool df_tensorboard_available(void);
/**
 * The event directory, malloc'd (NULL when out of memory), as verl's tracking does, plus a key:
 * `dir` when non-NULL and non-empty ("~/" expanded); else $TENSORBOARD_DIR when set and non-empty
 * (used as the directory itself, as verl reads it); else tensorboard_log/<project>/<experiment>,
 * relative to the working directory.
 */
char *df_tensorboard_dir(const char *dir, const char *project, const char *experiment);
/** The event file of the set's tensorboard sink (borrowed), or NULL when it has none. */
const char *df_loggers_tensorboard_path(const df_loggers *l);

#endif
