/*
 * ckpt_files.h (internal) — the checkpoint directory as `distflow train` and `distflow sft` share it
 * (docs/checkpoints.md): verl's <default_local_dir>/global_step_<N>/ and
 * latest_checkpointed_iteration.txt, saved crash-safely (a temporary directory beside the final one,
 * fsync, rename, then `latest`), the temporaries a killed save leaves removed at the next start,
 * trainer.resume_mode, and metrics.jsonl appended line by line and cut back to a checkpoint on resume.
 * What goes inside a checkpoint is each trainer's own (workers/dag/checkpoint.c, workers/sft/).
 */
#ifndef DF_WORKER_CKPT_FILES_H
#define DF_WORKER_CKPT_FILES_H

#include "distflow/config.h"
#include "distflow/model.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define DF_CKPT_LATEST "latest_checkpointed_iteration.txt"
#define DF_CKPT_PATH_MAX 2048

/** printf into a DF_CKPT_PATH_MAX buffer. DF_EINVAL when the path does not fit. */
int df_ckpt_path(char *out, const char *fmt, ...) DF_PRINTF(2, 3);

/** DF_EINVAL naming the tensor and element when m holds a NaN / Inf weight (a checkpoint must be
 *  resumable, docs/numerics.md); `role` ("actor", "critic") names the model in the message. */
int df_ckpt_check_finite(const df_model *m, const char *role);

/** The three directories of one save of step N in out_dir. */
typedef struct df_ckpt_save {
    char tmp[DF_CKPT_PATH_MAX];   /**< <out>/.global_step_<N>.tmp: everything is written here */
    char final[DF_CKPT_PATH_MAX]; /**< <out>/global_step_<N> */
    char old[DF_CKPT_PATH_MAX];   /**< <out>/.global_step_<N>.old.tmp: a checkpoint being replaced */
    char out_dir[DF_CKPT_PATH_MAX];
    int64_t step;
} df_ckpt_save;

/** Fill s's paths for step `step` of out_dir. DF_EINVAL when a path is too long. */
int df_ckpt_save_paths(df_ckpt_save *s, const char *out_dir, int64_t step);

/**
 * Start the save (the one process that writes the shared files): a temporary left by an earlier
 * attempt removed, s->tmp created (with out_dir when it does not exist yet). Every process that
 * writes into it brackets its part with df_kill_point_save_scope (util/killpoint.h).
 * Errors: DF_EIO naming the directory.
 */
int df_ckpt_save_begin(const df_ckpt_save *s);

/**
 * Publish a complete s->tmp: fsync it, move an existing s->final aside to s->old, rename s->tmp to
 * s->final, fsync out_dir, remove s->old, and only then replace `latest` atomically with N. A kill
 * at any point leaves `latest` naming a complete checkpoint. Errors: DF_EIO naming the path.
 */
int df_ckpt_save_publish(const df_ckpt_save *s);

/** After a failed save (rc != 0): the temporary removed (best effort; the next start removes it
 *  otherwise). Nothing when rc is 0. */
void df_ckpt_save_end(const df_ckpt_save *s, int rc);

/**
 * Before anything is written to out_dir (one process): remove what a killed save or a killed
 * rewrite left there — .global_step_<N>.tmp, the temporaries of `latest` and metrics.jsonl — and
 * put back a .global_step_<N>.old.tmp whose global_step_<N> is missing (a replacement killed
 * between its two renames). Nothing when out_dir does not exist. console: say what was removed.
 * Errors: DF_EIO naming the path.
 */
int df_ckpt_cleanup(const char *out_dir, bool console);

/**
 * trainer.resume_mode of `cfg` (auto | disable | resume_path, with trainer.resume_from_path): the
 * checkpoint directory to continue from into dir[DF_CKPT_PATH_MAX], *have false when there is
 * none (auto without `latest`, disable). Errors name the key or the file: DF_ENOTFOUND (a missing
 * directory), DF_EINVAL (resume_from_path unset, `latest` not a step number).
 */
int df_ckpt_find(const df_config *cfg, const char *out_dir, const char *mode, const char *from_path, char *dir,
                 bool *have);

/** json_dumps(o) (consumed) with a final newline, written atomically to path. */
int df_ckpt_write_json(json_t *o, const char *path);

/**
 * Read a JSON object whose "format" must be `format`. Errors: DF_ENOTFOUND (no such file: an
 * incomplete checkpoint), DF_EINVAL (malformed, another format), naming the path.
 */
int df_ckpt_load_json(const char *path, const char *format, json_t **out);

/** A non-negative integer member of o; DF_EINVAL naming path and key otherwise. */
int df_ckpt_json_int(const json_t *o, const char *key, const char *path, int64_t *v);

/**
 * The warning for a checkpoint `path` of an earlier distflow written by `ranks` > 1 ranks, each of
 * which shuffled its own shard, resumed at (epoch, step) of today's global order, into buf[cap]
 * (docs/checkpoints.md, "data.json").
 */
void df_ckpt_legacy_order_note(char *buf, size_t cap, const char *path, int64_t ranks, int64_t epoch,
                               int64_t step);

/**
 * Keep the newest keep_actor checkpoints of dir's global_step_<N> directories (older ones removed
 * whole: a step without its actor cannot be resumed) and the critic of the newest keep_critic
 * (older critic/ and critic_agent_<g>/ subdirectories removed); <= 0: keep all. Errors: DF_EIO naming
 * the path.
 */
int df_checkpoint_prune(const char *dir, int64_t keep_actor, int64_t keep_critic);

/* ---- metrics.jsonl ---- */

/** <out_dir>/metrics.jsonl, written one whole line at a time. Zero-initialise (closing it is then safe). */
typedef struct df_metrics_log {
    char *path;
    int fd;      /* valid when opened */
    bool opened; /* the first line made the file */
    bool append; /* a resume: keep what is there */
} df_metrics_log;

/**
 * Prepare metrics.jsonl of out_dir. On a resume from step N (resumed_step > 0) its lines of steps
 * <= N are kept (the rest, and a last line cut by a crash, removed; the file rewritten atomically)
 * and new lines are appended. On a fresh start nothing is touched until the first line, which
 * creates the file (and out_dir) anew: a run that fails before its first step leaves no empty
 * metrics.jsonl, nor an earlier run's file truncated. Errors: DF_EIO naming the file, DF_ENOMEM.
 */
int df_metrics_log_open(df_metrics_log *l, const char *out_dir, int64_t resumed_step);

/**
 * Append one line (with its newline) in one write (df_append_line: never a cut line); `sync`:
 * fdatasync it too (before a checkpoint that must not be durable ahead of its metrics).
 * Errors: DF_EIO naming the file and strerror (ENOSPC: "No space left on device").
 */
int df_metrics_log_append(df_metrics_log *l, const char *line, bool sync);

/** Close and free (a zeroed log too). */
void df_metrics_log_close(df_metrics_log *l);

#endif
