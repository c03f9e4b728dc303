/* Every data_source of a run's rows has a scorer (scorer_check.h). */
#include "workers/common/scorer_check.h"

#include "distflow/dataset.h"
#include "distflow/reward.h"

#include <stdio.h>

/* df_dataset_value_fn: a value without a scorer is an error at the row it first appears. */
static int need_scorer(void *user, const char *value, const char *file, int64_t line)
{
    const df_scorer_check *who = user;
    df_reward_fn fn;
    if (!df_reward_lookup(value, &fn))
        return DF_OK;
    char why[512];
    snprintf(why, sizeof why, "%s", df_last_error());
    return df_error(DF_ENOTFOUND,
                    "%s: %s:%lld: %s. Every response to these prompts would fail at its reward: give the "
                    "rows a known data_source (the column %s names), set %s to a Python file or library "
                    "that scores them, or register a scorer (df_reward_register) from a plugin",
                    who->files, file, (long long)line, why, who->fn_key, who->custom);
}

int df_scorer_check_files(const char *const *paths, int n_paths, const char *key, int64_t max_rows,
                          const df_scorer_check *who)
{
    return df_dataset_scan_values(paths, n_paths, key, max_rows, need_scorer, (void *)who);
}
