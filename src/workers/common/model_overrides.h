/* model_overrides.h (internal) — verl's model.override_config of a role, as config.json overrides. */
#ifndef DF_WORKER_MODEL_OVERRIDES_H
#define DF_WORKER_MODEL_OVERRIDES_H

#include "distflow/model.h"
#include "distflow/train_config.h"

#include <stdbool.h>

/**
 * The overrides of the policy's models (`critic` false: actor_rollout_ref.model.override_config,
 * for the actor, the reference and the rollout of every agent group) or of the critics' (`critic`
 * true: critic.model.override_config), for df_model_load_ex / df_model_config_load_ex. ov->json is
 * malloc'd (release it with df_train_model_overrides_free), NULL when the mapping is empty or null.
 * Errors: DF_EINVAL naming the key (text that is not a mapping), DF_ENOMEM.
 */
int df_train_model_overrides(const df_train_config *t, bool critic, df_config_overrides *ov);
/** As df_train_model_overrides from the map key `key` of an untyped config c (NULL: none). */
int df_config_model_overrides(const df_config *c, const char *key, df_config_overrides *ov);
void df_train_model_overrides_free(df_config_overrides *ov);

#endif
