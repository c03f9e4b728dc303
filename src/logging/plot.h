/*
 * logging/plot.h (internal) — a run's metrics.jsonl as curves: `distflow plot`.
 *
 * df_metrics_table_read turns the file into one series per metric name (step -> value), and
 * df_plot_metrics draws them with PLplot (pngcairo device) as one PNG per panel: the standard
 * panels of an RL or SFT run (score, lengths, losses, KL, entropy, gradient norms, throughput,
 * timing, validation, ...) or one PNG per metric the caller names.
 */
#ifndef DF_LOGGING_PLOT_H
#define DF_LOGGING_PLOT_H

#include <stdbool.h>
#include <stdint.h>

/** One metric over the steps: points (x[i], y[i]) = (step, value), sorted by step. */
typedef struct df_series {
    char *key;
    double *x, *y; /* [n] */
    int64_t n, cap;
} df_series;

typedef struct df_metrics_table {
    df_series *s; /* [n], in the order the names first appear in the file */
    int n, cap;
    int64_t lines;      /* metric lines read */
    bool cut_last_line; /* the file's last line had no newline and did not parse: skipped (a run killed
                           while writing it) */
} df_metrics_table;

/**
 * Read a metrics.jsonl (one JSON object per line with an integer "step" and numeric metrics, as
 * df_metrics_to_json writes). null values (non-finite when written) and non-numeric fields are
 * skipped, blank lines too. Errors name the file and the line: DF_ENOTFOUND / DF_EIO (the file),
 * DF_EINVAL for a line that is not a JSON object with an integer "step", for a file without any
 * metric line, and for one without a single numeric metric. On error *t is left empty.
 */
int df_metrics_table_read(const char *path, df_metrics_table *t);
/** The series of `key`, or NULL. */
const df_series *df_metrics_table_find(const df_metrics_table *t, const char *key);
void df_metrics_table_free(df_metrics_table *t);

/** Called for each PNG written: its path and the metrics drawn in it. */
typedef void (*df_plot_written_fn)(void *user, const char *png, const char *const *keys, int n_keys);

/**
 * Draw the table into out_dir (created with its parents): with n_keys == 0 the standard panels
 * (<panel>.png, e.g. score.png; a panel none of whose metrics is in the table is skipped), else
 * one PNG per entry of keys, named after it with '/' as '_' ("actor/pg_loss" -> actor_pg_loss.png);
 * an entry ending in '*' draws every metric with that prefix in one PNG. x is the step, a legend
 * names each curve. Each PNG is written under a temporary name and renamed. *n_written (may be
 * NULL) counts the PNGs. DF_EINVAL when a named key has no series, or no panel had any;
 * DF_EUNSUPPORTED when the build has no PLplot or PLplot lacks its pngcairo driver (Debian's
 * plplot-driver-cairo); DF_EINTERNAL when PLplot reports a fatal error (its message included);
 * DF_EIO for the files.
 * PLplot keeps global state: not for concurrent use from several threads.
 */
int df_plot_metrics(const df_metrics_table *t, const char *out_dir, const char *const *keys, int n_keys,
                    df_plot_written_fn written, void *user, int *n_written);
/** Whether this build can draw (PLplot found when it was configured). */
bool df_plot_available(void);

#endif
