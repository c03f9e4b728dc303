/*
 * distflow/sft_config.h -- the `distflow sft` configuration as one typed
 * struct, generated from the key table distflow/sft_config.def, as
 * distflow/train_config.h does for `train` (same field types, nesting and
 * lifetime rules: see there). Groups are `struct df_sft_<group path>`.
 */
#ifndef DISTFLOW_SFT_CONFIG_H
#define DISTFLOW_SFT_CONFIG_H

#include "distflow/config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DF_CFG_KEY(path, leaf, key, kind, ctype, ...) ctype leaf DF_CFG_AUDIT_ATTR("sft", key);
#define DF_CFG_GROUP(leaf, tag) struct tag {
#define DF_CFG_END(leaf) } leaf;
#define DF_CFG_BLOCK(group, leaf, tag) struct tag leaf;
#define DF_CFG_EXPAND_BLOCKS 0

/** Every `distflow sft` key, nested as in the YAML. */
typedef struct df_sft_config {
#include "distflow/sft_config.def"
} df_sft_config;

#undef DF_CFG_KEY
#undef DF_CFG_GROUP
#undef DF_CFG_END
#undef DF_CFG_BLOCK
#undef DF_CFG_EXPAND_BLOCKS

/**
 * Fill *out from `c` (loaded with df_config_schema_sft()), as
 * df_train_config_resolve. Errors: DF_EINVAL when `c` is not an sft config.
 */
DF_API int df_sft_config_resolve(const df_config *c, df_sft_config *out);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_SFT_CONFIG_H */
