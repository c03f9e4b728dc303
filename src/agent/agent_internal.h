/* agent_internal.h (internal) — helpers shared by src/agent/. */
#ifndef DF_AGENT_INTERNAL_H
#define DF_AGENT_INTERNAL_H

#include "distflow/agent.h"

/* How a failed call is answered, as verl's agent loop words it (tool_agent_loop._call_tool). */
#define AGENT_TOOL_ERROR_PREFIX "Error when executing tool: "

/* tool_parser.c: malloc'd AGENT_TOOL_ERROR_PREFIX + the formatted reason, NULL when out of memory. */
char *agent_tool_error(const char *fmt, ...) DF_PRINTF(1, 2);

/* calculator.c: evaluate `expression` exactly into malloc'd text ("-12", "2.5", "7/3 (about ...)").
   Errors: DF_EINVAL "calculator: <why>", DF_ENOMEM. */
int agent_calculate(const char *expression, char **result);

struct json_t;
/* yaml_files.c (verl's YAML config files, read as JSON by df_yaml_file_json, config/yaml_json.h):
   where the mapping key keys[n - 1] (under keys[0] ... keys[n - 2] from the root) is in the YAML
   file `path`: *line and *col, 1-based; false when the file or the key cannot be found (a key
   brought in by a `<<` merge is not followed). For error messages: it leaves df_last_error() as
   it may have changed it, so save the message first. */
bool agent_yaml_locate(const char *path, const char *const *keys, int n, int *line, int *col);
/* yaml_files.c: DF_EINVAL "unknown key 'x' (<holds>); did you mean 'y'?" for the first key of the
   object o that is not one of choices "a|b|c" (a misspelt key would otherwise be ignored); *bad
   (bad may be NULL) is then that key, valid while o lives. */
int agent_known_keys(struct json_t *o, const char *choices, const char *holds, const char **bad);
/* yaml_files.c: load the YAML file `path` (df_yaml_file_json) and call fn on each entry of its
 * top-level list `key`, stopping at the first failure, which is wrapped with
 * "<what> config <path>: <key>[i] (class_name '...')". */
int agent_yaml_each(const char *path, const char *key, const char *what,
                    int (*fn)(void *user, struct json_t *entry), void *user);

/* The class `name` of a config entry: registered, built-in or alias, loading a plugin ref with
   `load` first when it is one and not yet registered. Errors: df_tool_class_lookup's, load's. */
int agent_tool_class_resolve(const char *name, df_tool_plugin_loader load, const df_tool **out);
int agent_interaction_class_resolve(const char *name, df_tool_plugin_loader load, const df_interaction **out);

/* True when `ref` looks like a plugin ref ("path/lib.so:symbol"), as the plan's plugin loader decides. */
bool agent_is_plugin_ref(const char *ref);

/* env_guess.c: read the guess of a model turn: the last <answer>N</answer> block, else the last
   "Answer: N". AGENT_GUESS_OK sets *guess; otherwise `what` (cap bytes) says what is wrong, for
   the model. N is an optional sign and 1..12 digits. */
enum { AGENT_GUESS_OK, AGENT_GUESS_NONE, AGENT_GUESS_MALFORMED };
int agent_env_guess_parse(const char *text, int64_t *guess, char *what, size_t cap);

#endif
