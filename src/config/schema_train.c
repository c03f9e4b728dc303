/*
 * The `distflow train` schema and its typed struct's bindings, expanded from the
 * one key table distflow/train_config.def (see there for how to add a key).
 */
#include "config/config_internal.h"

#include "distflow/train_config.h"

#define CFG_TABLE "distflow/train_config.def"
#define CFG_STRUCT df_train_config
#define CFG_NAME "train"
#include "config/schema_table.h"

const df_config_schema *df_config_schema_train(void) { return &cfg_schema; }

int df_train_config_resolve(const df_config *c, df_train_config *out)
{
    return cfg_resolve_typed(c, &cfg_schema, out);
}

bool df_train_rollout_correction_decoupled(const df_train_config *t)
{
    const struct df_train_algorithm_rollout_correction *co = &t->algorithm.rollout_correction;
    return !co->bypass_mode && ((co->rollout_is && *co->rollout_is) || (co->rollout_rs && *co->rollout_rs));
}
