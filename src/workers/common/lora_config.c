/* A role's LoRA keys (lora_config.h). */
#include "workers/common/lora_config.h"

#include "util/fsutil.h"
#include "workers/common/model_overrides.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where key `prefix.name` was set ("the config" without c), and whether it was. */
static const char *where(const df_config *c, const char *prefix, const char *name, char *key,
                         size_t cap, bool *set)
{
    snprintf(key, cap, "%s.%s", prefix, name);
    const char *w = c ? df_config_where(c, key) : "the config";
    *set = c && strcmp(w, "default");
    return w;
}

/* lora_adapter_path: the adapter's settings, and those the config sets agreeing with them. */
static int from_adapter(const df_config *c, const char *prefix, int64_t rank, double alpha,
                        unsigned targets, const char *adapter, df_lora_config *lc)
{
    char key[160], ak[160];
    bool set;
    const char *aw = where(c, prefix, "lora_adapter_path", ak, sizeof ak, &set);
    int rc = df_lora_read_peft_config(adapter, lc);
    if (rc)
        return df_error_wrap(rc, "%s (%s)", ak, aw);
    const char *w = where(c, prefix, "lora_rank", key, sizeof key, &set);
    if (set && rank != lc->rank)
        return df_error(DF_EINVAL, "%s (%s) is %lld, and the adapter of %s (%s) has r %lld", key, w,
                        (long long)rank, ak, adapter, (long long)lc->rank);
    w = where(c, prefix, "lora_alpha", key, sizeof key, &set);
    if (set && alpha != lc->alpha)
        return df_error(DF_EINVAL, "%s (%s) is %g, and the adapter of %s (%s) has lora_alpha %g",
                        key, w, alpha, ak, adapter, lc->alpha);
    w = where(c, prefix, "target_modules", key, sizeof key, &set);
    if (set && targets != lc->targets)
        return df_error(DF_EINVAL, "%s (%s) names other modules than the adapter of %s (%s)", key,
                        w, ak, adapter);
    return DF_OK;
}

/* exclude_modules: PEFT's pattern over the module names of the model at model_path (its layers and
   modules from config.json with the role's override_config). An adapter's own adapter_config.json decides its
   modules: not with one. */
static int exclude(const df_config *c, const char *prefix, const char *pattern, const char *model_path,
                   const char *adapter, unsigned *targets)
{
    char key[160], ak[160];
    bool set;
    const char *w = where(c, prefix, "exclude_modules", key, sizeof key, &set);
    if (adapter) {
        const char *aw = where(c, prefix, "lora_adapter_path", ak, sizeof ak, &set);
        return df_error(DF_EINVAL, "%s (%s) with %s (%s): the adapter's adapter_config.json names its modules", key,
                        w, ak, aw);
    }
    df_model_config mc;
    char ok[160];
    snprintf(ok, sizeof ok, "%s.override_config", prefix);
    df_config_overrides ov = {0};
    char *dir = model_path ? df_expand_user(model_path) : NULL, *file = dir ? df_path_join(dir, "config.json") : NULL;
    int rc = file ? df_config_model_overrides(c, ok, &ov) : df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = df_model_config_load_ex(file, &ov, &mc);
    df_train_model_overrides_free(&ov);
    free(dir);
    free(file);
    if (rc)
        return df_error_wrap(rc, "%s (%s): reading the model's layers and modules", key, w);
    char label[256];
    snprintf(label, sizeof label, "%s (%s)", key, w);
    return df_lora_exclude(pattern, &mc, targets, label);
}

int df_role_lora_config(const df_config *c, const char *prefix, int64_t rank, double alpha,
                        const df_config_strs *targets, const char *adapter, const char *exclude_modules,
                        const char *model_path, df_lora_config *out)
{
    df_lora_config lc = {.rank = rank, .alpha = alpha};
    if (out)
        *out = (df_lora_config){0};
    if (rank == 0 && !adapter)
        return DF_OK;
    char key[160];
    bool set;
    const char *w = where(c, prefix, "target_modules", key, sizeof key, &set);
    int rc = df_lora_parse_targets(targets->items, targets->n, w, &lc.targets);
    if (rc)
        return df_error_wrap(rc, "%s", key);
    if (exclude_modules && (rc = exclude(c, prefix, exclude_modules, model_path, adapter, &lc.targets)))
        return rc;
    if (adapter && (rc = from_adapter(c, prefix, rank, alpha, lc.targets, adapter, &lc)))
        return rc;
    if (!(lc.alpha > 0)) {
        w = where(c, prefix, "lora_alpha", key, sizeof key, &set);
        return df_error(DF_EINVAL, "%s (%s): must be > 0 with lora_rank %lld", key, w,
                        (long long)lc.rank);
    }
    if (out)
        *out = lc;
    return DF_OK;
}
