/*
 * The `distflow sft` schema and its typed struct's bindings, expanded from the
 * one key table distflow/sft_config.def (see there for how to add a key).
 */
#include "config/config_internal.h"

#include "distflow/sft_config.h"

#define CFG_TABLE "distflow/sft_config.def"
#define CFG_STRUCT df_sft_config
#define CFG_NAME "sft"
#include "config/schema_table.h"

const df_config_schema *df_config_schema_sft(void) { return &cfg_schema; }

int df_sft_config_resolve(const df_config *c, df_sft_config *out)
{
    return cfg_resolve_typed(c, &cfg_schema, out);
}
