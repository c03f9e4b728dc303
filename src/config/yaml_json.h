/*
 * yaml_json.h (internal) — YAML nodes as JSON values (jansson): the one walker
 * behind every place that hands YAML on as data. Its callers:
 *   df_config_map_json (map_json.c)   a free-form config map (DF_CFG_MAP text)
 *   df_yaml_file_json                 the agent's tool / interaction / environment
 *                                     files (verl loads them with OmegaConf.load)
 * and the scalar predicates below, which the config loader (loader.c, map.c) and
 * the workflow loader (src/planner/workflow.c) type their own fields with.
 *
 * Scalar typing is the config's (scalar.c: YAML 1.2's core schema plus YAML
 * 1.1's yes / no / on / off and `_` digit separators, the reading OmegaConf and
 * so verl give these files): a quoted scalar is a string; a plain one is null
 * (empty, ~, null, Null, NULL), a bool (true / false / yes / no / on / off, any
 * case), an integer (decimal, 0x hex, 0o octal, `_` between digits, within
 * int64), a finite float ([digits][.digits][e[sign]digits]), else a string.
 * `.inf` / `.nan` and integers beyond int64 that do not read as a float stay
 * strings: JSON has no non-finite numbers. Tags are not consulted (libyaml's
 * loader tags every untagged scalar !!str, so an explicit !!str looks the same).
 */
#ifndef DF_CONFIG_YAML_JSON_H
#define DF_CONFIG_YAML_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

/** The deepest node df_yaml_node_json converts (the root is depth 0); an alias
 *  to its own ancestor (`a: &x [*x]`) is a cycle that only this bound stops. */
#define DF_YAML_MAX_DEPTH 64
/** The most nodes df_yaml_node_json visits: aliases of aliases repeat a subtree
 *  exponentially often (the "billion laughs"), so a small file can name 2^60. */
#define DF_YAML_MAX_NODES ((size_t)1 << 20)

/** Whether scalar node n is plain (unquoted, not a block scalar): only a plain
 *  scalar is typed; a quoted "true" is the string. */
bool df_yaml_is_plain(const yaml_node_t *n);
/** Whether n is a plain null scalar (empty, ~, null, Null, NULL); false for
 *  NULL, a collection or a quoted scalar. */
bool df_yaml_is_null(const yaml_node_t *n);
/** A plain scalar n that reads as a bool (true / false / yes / no / on / off,
 *  any case): *out set, true returned; else false and *out unchanged. */
bool df_yaml_bool(const yaml_node_t *n, bool *out);

/**
 * Scalar node n as a JSON value, typed as the file comment says (a new
 * reference). A value holding a NUL (a quoted "\0") stays a string, whole.
 * NULL only when out of memory or the text is not UTF-8 (libyaml's reader
 * validates its input, so only the first).
 */
json_t *df_yaml_scalar_json(const yaml_node_t *n);

/**
 * The subtree of `doc` at `node` as JSON (*out, a new reference; NULL on
 * error). Scalars as df_yaml_scalar_json; sequences arrays; mappings objects,
 * with YAML 1.1 merge keys applied (a plain `<<: *base` or `<<: [*a, *b]`: the
 * mapping's own keys win, then earlier sources; the merged keys take the
 * place of the `<<`), as PyYAML and the config loader do. Aliases are
 * expanded (each use converted again).
 * Errors, DF_EINVAL "name:line:col: ..." at the offending node (`name`: the
 * file, or what the text is): a node deeper than DF_YAML_MAX_DEPTH ("nested
 * deeper than 64 levels (or an alias refers to itself)"), more than
 * DF_YAML_MAX_NODES nodes or DF_YAML_MAX_BYTES of scalar text (keys too) once
 * aliases are expanded (a long string behind many aliases), a key that is not a
 * scalar, holds a NUL or is not UTF-8, a key given twice in one mapping (JSON
 * would keep one silently; "the key 'k' appears twice in one mapping"), a `<<`
 * of something other than a mapping or a list of mappings; DF_ENOMEM.
 */
int df_yaml_node_json(yaml_document_t *doc, yaml_node_t *node, const char *name, json_t **out);

/**
 * The YAML file at `path` as JSON: df_yaml_load_file, then df_yaml_node_json
 * of its root (errors named by the path). Errors: df_yaml_load_file's,
 * df_yaml_node_json's, DF_EINVAL "path: empty YAML document".
 */
int df_yaml_file_json(const char *path, json_t **out);

#endif
