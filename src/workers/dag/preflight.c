/* The checks of a train config against its files (preflight.h). */
#include "workers/dag/preflight.h"
#include "workers/common/max_pos.h"
#include "workers/common/model_overrides.h"
#include "workers/common/scorer_check.h"
#include "workers/embodied/embodied_worker.h"

#include "distflow/dataset.h"
#include "distflow/reward.h"
#include "util/fsutil.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "Org/Name" as the Hugging Face hub spells a repository: one slash between two plain names. */
static bool looks_like_hub_id(const char *s)
{
    const char *slash = strchr(s, '/');
    if (!slash || slash == s || !slash[1] || strchr(slash + 1, '/') || *s == '.' || slash[1] == '.')
        return false;
    for (const char *p = s; *p; p++)
        if (p != slash && !isalnum((unsigned char)*p) && !strchr("-_.", *p))
            return false;
    return true;
}

/* Directory `key` = value exists and holds `file` (config.json, tokenizer.json). */
static int check_dir(const df_config *c, const char *key, const char *value, const char *file)
{
    char *dir = df_expand_user(value), *inside = dir ? df_path_join(dir, file) : NULL;
    int rc = inside ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    if (!rc && !df_dir_exists(dir) && looks_like_hub_id(value))
        rc = df_error(DF_ENOTFOUND,
                      "%s: %s=%s: no such directory. If that is a Hugging Face hub id: distflow reads local "
                      "files only, so download it first (huggingface-cli download %s --local-dir %s) and "
                      "set %s=%s",
                      df_config_where(c, key), key, value, value, strchr(value, '/') + 1, key,
                      strchr(value, '/') + 1);
    else if (!rc && !df_dir_exists(dir))
        rc = df_error(DF_ENOTFOUND, "%s: %s=%s: no such directory (a Hugging Face model directory: config.json, "
                      "model.safetensors, tokenizer.json)", df_config_where(c, key), key, dir);
    else if (!rc && !df_file_exists(inside))
        rc = df_error(DF_ENOTFOUND, "%s: %s=%s: the directory has no %s", df_config_where(c, key), key, dir,
                      file);
    free(inside);
    free(dir);
    return rc;
}

/* Every file of the list exists; *paths: the list with ~ expanded (caller frees each and the array). */
static int check_files(const df_config *c, const char *key, const df_config_strs *files, char ***paths)
{
    *paths = calloc((size_t)files->n + 1, sizeof **paths);
    int rc = *paths ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < files->n; i++) {
        if (!((*paths)[i] = df_expand_user(files->items[i])))
            rc = df_error(DF_ENOMEM, "out of memory");
        else if (!df_file_exists((*paths)[i]))
            rc = df_error(DF_ENOTFOUND, "%s: %s[%d]=%s: no such file", df_config_where(c, key), key, i,
                          (*paths)[i]);
    }
    return rc;
}

static void free_paths(char **paths)
{
    for (int i = 0; paths && paths[i]; i++)
        free(paths[i]);
    free(paths);
}

/* The data files of `key` exist; with `scored` their data.reward_fn_key values (data_source by default)
   have scorers. */
static int check_data(const df_config *c, const char *key, const df_config_strs *files, int64_t rows,
                      bool scored, const char *fn_key)
{
    char **paths = NULL;
    int rc = check_files(c, key, files, &paths);
    if (!rc && scored)
        rc = df_scorer_check_files((const char *const *)paths, files->n, fn_key, rows,
                                   &(df_scorer_check){key, "data.reward_fn_key", "custom_reward_function.path"});
    free_paths(paths);
    return rc;
}

/* A policy (critic false) or critic directory: the job's longest sequence against its config.json's
   positions. With the role's override_config the file is read here strictly, so that a key or value
   the loader would refuse is refused before the run (config check, plan). */
static int check_model_config(const df_config *c, const df_train_config *t, bool critic, const char *key,
                              const char *dir, const df_seq_bound *seq)
{
    df_config_overrides ov;
    int rc = df_train_model_overrides(t, critic, &ov);
    if (rc || !ov.json)
        return rc ? rc : df_check_max_pos_dir(dir, NULL, df_config_where(c, key), key, seq);
    char *d = df_expand_user(dir), *file = d ? df_path_join(d, "config.json") : NULL;
    df_model_config mc;
    rc = file ? df_model_config_load_ex(file, &ov, &mc) : df_error(DF_ENOMEM, "out of memory");
    if (rc)
        rc = df_error_wrap(rc, "%s", df_config_where(c, ov.who));
    else
        rc = df_check_max_pos(&mc, d, &ov, df_config_where(c, key), key, seq);
    free(file);
    free(d);
    df_train_model_overrides_free(&ov);
    return rc;
}

int df_train_preflight(const df_config *c, const df_train_config *t, bool critic, bool train_scored)
{
    const struct df_train_data *d = &t->data;
    if (t->trainer.val_only && d->val_files.n == 0)
        return df_error(DF_EINVAL, "%s: trainer.val_only=true validates and exits, but data.val_files is empty",
                        df_config_where(c, "trainer.val_only"));
    const char *A = "actor_rollout_ref.model.path", *C = "critic.model.path", *RM = "reward_model.model.path";
    df_seq_bound seq, rm;
    df_train_seq_bound(c, t, &seq);
    df_train_rm_seq_bound(c, t, &rm);
    int rc = check_dir(c, A, t->actor_rollout_ref.model.path, "config.json");
    if (!rc) /* rollout, actor and reference (a group's own path: check_nodes) */
        rc = check_model_config(c, t, false, A, t->actor_rollout_ref.model.path, &seq);
    if (!rc && d->tokenizer)
        rc = check_dir(c, "data.tokenizer", d->tokenizer, "tokenizer.json");
    if (!rc && critic)
        rc = check_dir(c, C, t->critic.model.path, "config.json");
    if (!rc && critic)
        rc = check_model_config(c, t, true, C, t->critic.model.path, &seq);
    if (!rc && t->reward_model.enable)
        rc = check_dir(c, RM, t->reward_model.model.path, "config.json");
    if (!rc && t->reward_model.enable)
        rc = df_check_max_pos_dir(t->reward_model.model.path, NULL, df_config_where(c, RM), RM, &rm);
    bool custom = t->custom_reward_function.path != NULL; /* it scores every row, whatever its source */
    /* data.*_max_samples = n: the run reads the first n rows of the files (df_dataset_head) */
    if (!rc)
        rc = check_data(c, "data.train_files", &d->train_files, d->train_max_samples, train_scored && !custom,
                        d->reward_fn_key);
    if (!rc)
        rc = check_data(c, "data.val_files", &d->val_files, d->val_max_samples,
                        !custom && !df_embodied_enabled(t), d->reward_fn_key);
    return rc;
}
