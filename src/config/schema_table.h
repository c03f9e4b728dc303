/*
 * schema_table.h (internal) — one schema and its typed struct's bindings,
 * expanded from a key table: entry i of the schema and binding i describe the
 * same key. Not a header to include for declarations: schema_train.c and
 * schema_sft.c each define
 *   CFG_TABLE   the table's path ("distflow/train_config.def")
 *   CFG_STRUCT  its typed struct (df_train_config)
 *   CFG_NAME    the command ("train")
 * and include this file once, after the struct's header; it defines the statics
 * cfg_entries, cfg_bindings, cfg_compat and cfg_schema.
 */

/* Schema entries. */
#define DF_CFG_KEY(path, leaf, key, kind, ctype, nullable, dflt, lo, hi, len, choices, from, help) \
    {key, kind, nullable, dflt, lo, hi, len, choices, from, help},
#define DF_CFG_GROUP(leaf, tag)
#define DF_CFG_END(leaf)
#define DF_CFG_BLOCK(group, leaf, tag)
#define DF_CFG_EXPAND_BLOCKS 1
static const df_config_entry cfg_entries[] = {
#include CFG_TABLE
};
#undef DF_CFG_KEY

/* Where each key's value goes in the typed struct, and the field's C type. */
#define DF_CFG_KEY(path, leaf, key, kind, ctype, ...) \
    {offsetof(CFG_STRUCT, path), sizeof(((CFG_STRUCT *)0)->path), CFG_CTYPE_OF(((CFG_STRUCT *)0)->path)},
static const cfg_binding cfg_bindings[] = {
#include CFG_TABLE
};
#undef DF_CFG_KEY

/* Compile-time: each field's C type fits its key's schema type (CFG_KIND_FITS). */
#define DF_CFG_KEY(path, leaf, key, kind, ctype, nullable, ...) \
    _Static_assert(CFG_KIND_FITS(kind, CFG_CTYPE_OF(((CFG_STRUCT *)0)->path), nullable), \
                   "C type of " key " does not fit its schema type");
#include CFG_TABLE
#undef DF_CFG_KEY

/* Each key's df_config_compat: a DFK_NO_EFFECT / DFK_UNSUPPORTED wrapper gives its class and
   hides the entry it wraps, every other entry is DF_CFG_EFFECTIVE. */
#define DF_CFG_KEY(...) DF_CFG_EFFECTIVE,
#define DF_CFG_COMPAT(cls, ...) cls,
static const unsigned char cfg_compat[] = {
#include CFG_TABLE
};
#undef DF_CFG_KEY
#undef DF_CFG_COMPAT
#undef DF_CFG_GROUP
#undef DF_CFG_END
#undef DF_CFG_BLOCK
#undef DF_CFG_EXPAND_BLOCKS

_Static_assert(sizeof cfg_entries / sizeof cfg_entries[0] == sizeof cfg_compat, "one class per schema entry");
_Static_assert(sizeof cfg_entries / sizeof cfg_entries[0] == sizeof cfg_bindings / sizeof cfg_bindings[0],
               "one binding per schema entry");

static const df_config_schema cfg_schema = {CFG_NAME, cfg_entries, (int)(sizeof cfg_entries / sizeof cfg_entries[0]),
                                            cfg_bindings, sizeof(CFG_STRUCT), cfg_compat};
