/* lora_config.h (internal) — a role's LoRA keys (verl's model.lora_rank / lora_alpha /
 * target_modules) checked and turned into a df_lora_config (docs/lora.md). */
#ifndef DF_WORKER_LORA_CONFIG_H
#define DF_WORKER_LORA_CONFIG_H

#include "distflow/config.h"
#include "distflow/lora.h"

/**
 * The LoRA settings of the model block `prefix` ("actor_rollout_ref.model", SFT's "model") into
 * *out (may be NULL: only checked; rank 0 when LoRA is off). With `adapter` (lora_adapter_path,
 * may be NULL) they are that PEFT adapter's (df_lora_read_peft_config), and each of lora_rank,
 * lora_alpha, target_modules that the config sets (df_config_where not "default"; c NULL: none)
 * must agree. `exclude_modules` (verl's key of that name; NULL: none) removes the targets whose
 * modules PEFT's pattern matches in every layer of the model at `model_path` (df_lora_exclude;
 * its config.json gives the layer count); not with an adapter. Errors: DF_EINVAL (an unknown or
 * repeated target module, lora_alpha <= 0, a set key that differs from the adapter's,
 * exclude_modules with an adapter), df_lora_exclude's, the model config's and the adapter's
 * config errors, naming the key and where the config c (may be NULL) set it.
 */
int df_role_lora_config(const df_config *c, const char *prefix, int64_t rank, double alpha,
                        const df_config_strs *targets, const char *adapter, const char *exclude_modules,
                        const char *model_path, df_lora_config *out);

#endif
