/*
 * The `distflow sft` schema and its typed struct's bindings, both expanded
 * from the one key table distflow/sft_config.def (see there for how to add
 * a key): entry i of the schema and binding i describe the same key.
 */
#include "config/config_internal.h"

#include "distflow/sft_config.h"

/* Schema entries. */
#define DF_CFG_KEY(path, leaf, key, kind, ctype, nullable, dflt, lo, hi, len, choices, from, help) \
    {key, kind, nullable, dflt, lo, hi, len, choices, from, help},
#define DF_CFG_GROUP(leaf, tag)
#define DF_CFG_END(leaf)
#define DF_CFG_BLOCK(group, leaf, tag)
#define DF_CFG_EXPAND_BLOCKS 1
static const df_config_entry sft[] = {
#include "distflow/sft_config.def"
};
#undef DF_CFG_KEY

/* Where each key's value goes in df_sft_config, and the field's C type. */
#define DF_CFG_KEY(path, leaf, key, kind, ctype, ...) \
    {offsetof(df_sft_config, path), sizeof(((df_sft_config *)0)->path), CFG_CTYPE_OF(((df_sft_config *)0)->path)},
static const cfg_binding sft_bind[] = {
#include "distflow/sft_config.def"
};
#undef DF_CFG_KEY

/* Compile-time: each field's C type fits its key's schema type (CFG_KIND_FITS). */
#define DF_CFG_KEY(path, leaf, key, kind, ctype, nullable, ...) \
    _Static_assert(CFG_KIND_FITS(kind, CFG_CTYPE_OF(((df_sft_config *)0)->path), nullable), \
                   "C type of " key " does not fit its schema type");
#include "distflow/sft_config.def"
#undef DF_CFG_KEY
#undef DF_CFG_GROUP
#undef DF_CFG_END
#undef DF_CFG_BLOCK
#undef DF_CFG_EXPAND_BLOCKS

#define N_SFT ((int)(sizeof sft / sizeof sft[0]))
_Static_assert(sizeof sft / sizeof sft[0] == sizeof sft_bind / sizeof sft_bind[0],
               "one binding per schema entry");

static const df_config_schema sft_schema = {"sft", sft, N_SFT, sft_bind, sizeof(df_sft_config)};

const df_config_schema *df_config_schema_sft(void) { return &sft_schema; }

int df_sft_config_resolve(const df_config *c, df_sft_config *out)
{
    return cfg_resolve_typed(c, &sft_schema, out);
}
