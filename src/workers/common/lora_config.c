/* A role's LoRA keys (lora_config.h). */
#include "workers/common/lora_config.h"

#include <stdio.h>
#include <string.h>

int df_role_lora_config(const df_config *c, const char *prefix, int64_t rank, double alpha,
                        const df_config_strs *targets, const char *device, df_lora_config *out)
{
    df_lora_config lc = {.rank = rank, .alpha = alpha};
    if (out)
        *out = (df_lora_config){0};
    if (rank == 0)
        return DF_OK;
    char key[128];
#define WHERE(k) (c ? df_config_where(c, k) : "the config")
    snprintf(key, sizeof key, "%s.target_modules", prefix);
    int rc = df_lora_parse_targets(targets->items, targets->n, WHERE(key), &lc.targets);
    if (rc)
        return df_error_wrap(rc, "%s", key);
    if (!(alpha > 0)) {
        snprintf(key, sizeof key, "%s.lora_alpha", prefix);
        return df_error(DF_EINVAL, "%s (%s): must be > 0 with lora_rank %lld", key,
                        WHERE(key), (long long)rank);
    }
    if (strcmp(device, "cpu")) {
        snprintf(key, sizeof key, "%s.lora_rank", prefix);
        return df_error(DF_EUNSUPPORTED, "%s (%s): LoRA adapters train on the CPU backend only; "
                        "trainer.device=%s has no LoRA path yet (docs/lora.md)", key,
                        WHERE(key), device);
    }
    if (out)
        *out = lc;
    return DF_OK;
#undef WHERE
}
