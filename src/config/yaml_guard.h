/*
 * yaml_guard.h (internal) — limits checked on YAML text before libyaml parses it,
 * and the one guarded way every YAML reader (the config loader and its map
 * values, the workflow loader, the agent's tool / interaction / environment
 * files) loads a document. libyaml's scanner is quadratic in the nesting of flow
 * collections ([[[[...]]]] takes minutes at 100k levels), and a document is held
 * whole in memory, so both are bounded first.
 */
#ifndef DF_CONFIG_YAML_GUARD_H
#define DF_CONFIG_YAML_GUARD_H

#include <stddef.h>
#include <yaml.h>

/** The largest YAML text accepted, in bytes (a config or workflow is a few KB). */
#define DF_YAML_MAX_BYTES ((size_t)16 << 20)
/** The deepest nesting of flow collections ([ ] and { }) accepted. */
#define DF_YAML_MAX_FLOW_DEPTH 64

/**
 * Refuse `text` (len bytes) when it is longer than DF_YAML_MAX_BYTES or nests
 * flow collections deeper than DF_YAML_MAX_FLOW_DEPTH outside quoted scalars
 * and comments. Errors: DF_EINVAL "name[:line]: ..." naming the limit.
 */
int df_yaml_check_text(const char *text, size_t len, const char *name);

/** How df_yaml_load words a syntax error, by where the text came from. */
typedef enum {
    DF_YAML_FILE,  /**< a file: "name:line:col: problem (context at line N)" */
    DF_YAML_VALUE, /**< a one-line value (an override): "name: problem at column N" */
} df_yaml_source;

/**
 * Load the single YAML document of text[0..len) into *doc, after
 * df_yaml_check_text. Anchors and aliases are resolved by libyaml (an alias is
 * the same node again, so a walker must bound its depth and node count). An
 * empty text loads an empty document (yaml_document_get_root_node is NULL).
 * On success the caller owns *doc (yaml_document_delete); on failure *doc is
 * left deleted.
 * Errors: df_yaml_check_text's; DF_EINVAL for a syntax error or invalid UTF-8
 * ("name: problem (byte N)") and for a second document ("name:line: only one
 * YAML document is allowed" / "name: expected a single YAML value"); DF_ENOMEM.
 */
int df_yaml_load(const char *text, size_t len, const char *name, df_yaml_source src, yaml_document_t *doc);

/**
 * df_yaml_load of the file at `path` (named by its path in messages, as
 * DF_YAML_FILE). Errors: df_read_file's (DF_ENOTFOUND, DF_EIO), df_yaml_load's.
 */
int df_yaml_load_file(const char *path, yaml_document_t *doc);

#endif
