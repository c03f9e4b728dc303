/*
 * scorer_check.h (internal) — before a run generates anything: every row's data_source (the value
 * of its reward_fn_key column) has a scorer in the reward registry. Otherwise every response to
 * those prompts would fail at its reward, after the whole generation; the error names the file and
 * line where such a value first appears. Used by train's preflight and `distflow eval`.
 */
#ifndef DF_WORKER_SCORER_CHECK_H
#define DF_WORKER_SCORER_CHECK_H

#include <stdint.h>

/** The settings a message names, as the user wrote them (config keys or command-line options). */
typedef struct df_scorer_check {
    const char *files;  /* what lists the files: "data.val_files", "--data" */
    const char *fn_key; /* what names the column: "data.reward_fn_key", "--reward-fn-key" */
    const char *custom; /* a scorer of every row instead: "custom_reward_function.path", "--reward-function" */
} df_scorer_check;

/**
 * Every distinct value of the field at dotted path `key` in the first max_rows rows (< 0: all) of
 * the files paths[n_paths] (df_dataset_scan_values) has a scorer (df_reward_lookup). Errors:
 * DF_ENOTFOUND "<who->files>: FILE:LINE: <the lookup's reason>. Every response ... " naming the
 * three settings of `who`; those of df_dataset_scan_values.
 */
int df_scorer_check_files(const char *const *paths, int n_paths, const char *key, int64_t max_rows,
                          const df_scorer_check *who);

#endif
