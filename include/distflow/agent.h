/*
 * distflow/agent.h — tools and interactions for multi-turn rollouts, verl's multi-turn tool system
 * (verl/tools/, verl/interactions/, verl/experimental/agent_loop/) as a C library. The rollout's
 * multi-turn loop calls it; nothing here generates tokens.
 *
 * One turn of the loop, with the names below:
 *   1. the model's turn ends; df_tool_calls_parse() finds its hermes `<tool_call>{json}</tool_call>`
 *      blocks (a malformed one is a call whose `error` is the text to answer with);
 *   2. df_tool_session_execute() runs each call against this trajectory's tool instances, giving
 *      the response text, a step reward and metrics;
 *   3. df_agent_truncate() cuts a long response to multi_turn.max_tool_response_length tokens;
 *   4. the responses become {"role": "tool", "content": ...} messages, and df_agent_render_delta()
 *      gives the token ids to append to the KV-cached sequence (the chat template's rendering of the
 *      conversation with them, minus its rendering without them, plus the generation prompt);
 *   5. with no tool call, an interaction (df_interaction_session_respond) may answer as the user
 *      (verl's GSM8K interaction: "Your response is correct!" and stop, or ask for a retry).
 * At the end, df_tool_session_reward() / df_interaction_session_score() give the rewards verl's
 * calc_reward / calculate_score give.
 *
 * Built-in tool classes (df_tool_class_lookup; verl's class paths are accepted as aliases):
 *   "calculator"  exact big-integer + - * / ( ) arithmetic (function calculator(expression))
 *   "gsm8k"       verl.tools.gsm8k_tool.Gsm8kTool (function calc_gsm8k_reward(answer))
 * Built-in interaction: "gsm8k" (verl.interactions.gsm8k_interaction.Gsm8kInteraction).
 * A plugin tool or interaction is a `const df_tool` / `const df_interaction` object exported from
 * a shared library and named by its ref "path/to/libx.so:symbol" in the config's class_name
 * (loaded through distflow/dag.h's plugin loader; see df_plugin_tool). docs/agents.md has the
 * YAML formats and a worked plugin.
 *
 * Threads: a tool set / interaction set is read-only once loaded; sessions (one per trajectory)
 * may run on different threads at once, each session on one thread at a time. A tool's init runs
 * once per set; its create / execute / calc_reward / release get the tool's state as const data.
 */
#ifndef DISTFLOW_AGENT_H
#define DISTFLOW_AGENT_H

#include "distflow/common.h"
#include "distflow/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- hermes tool calls ------------------------------------------------------------------------ */

/** One `<tool_call>` block of a model turn. Exactly one of (name + arguments) and error is set. */
typedef struct df_tool_call {
    char *name;      /**< the function name, or NULL when the block is malformed */
    char *arguments; /**< the arguments as compact JSON object text ("{}" when absent), or NULL */
    char *error;     /**< NULL for a well-formed call; else the tool response to send back,
                          "Error when executing tool: <why>" as verl's agent loop words a failure */
} df_tool_call;

/** What df_tool_calls_parse finds in one model turn. Free with df_tool_calls_clear. */
typedef struct df_tool_calls {
    char *content;      /**< the turn's text with every tool-call block (and an unterminated one) cut out */
    df_tool_call *calls; /**< [n_calls], in the order written */
    int n_calls;
    int n_dropped;      /**< blocks past max_parallel_calls, dropped as verl's agent loop drops them */
} df_tool_calls;

/**
 * Parse a model turn in the hermes format (Qwen2.5 / NousResearch Hermes; verl's HermesToolParser):
 * every `<tool_call>` ... `</tool_call>` block holds one JSON object {"name": string, "arguments":
 * object}. "arguments" may also be a JSON string that holds an object (some models emit that) or be
 * absent ({}). At most `max_parallel_calls` (>= 1) blocks become calls; the rest are counted in
 * n_dropped. `tool_names` [n_names] (may be NULL with n_names 0: names are not checked) are the
 * functions that exist.
 * A malformed block is not an error of this function: it becomes a call with `error` set — bad
 * JSON (with jansson's reason and column), not an object, no string "name", a name not in
 * tool_names (listing the known ones), arguments neither an object nor a string holding one, or an
 * opening tag with no closing tag (the rest of the turn). verl's parser logs and drops such blocks;
 * distflow answers the model instead (issue 15: "an error message to the model, not a crash").
 * Errors: DF_EINVAL (NULL text / out, max_parallel_calls < 1), DF_ENOMEM; *out is then empty.
 */
DF_API int df_tool_calls_parse(const char *text, const char *const *tool_names, int n_names,
                               int max_parallel_calls, df_tool_calls *out);

/** Free what df_tool_calls_parse allocated and zero *c (NULL ok). */
DF_API void df_tool_calls_clear(df_tool_calls *c);

/* ---- tool plugin interface -------------------------------------------------------------------- */

/** What one tool call returns (verl BaseTool.execute's (ToolResponse, reward, metrics)). */
typedef struct df_tool_result {
    char *text;     /**< malloc'd response text (the tool message's content) */
    double reward;  /**< step reward of this call */
    char *metrics;  /**< malloc'd JSON object text, or NULL for none */
} df_tool_result;

/** Free a result's strings and zero it (NULL ok). */
DF_API void df_tool_result_clear(df_tool_result *r);

/**
 * A tool class: verl's BaseTool lifecycle as a vtable. `tool` is what init made from the config
 * entry (NULL when init is NULL); `inst` one trajectory's state from create. Every function
 * returns 0 or a DF_E* status with df_error(). A plugin exports one as `const df_tool sym = {...}`.
 */
typedef struct df_tool {
    const char *name;   /**< class name ("calculator"); a plugin's is replaced by its ref */
    const char *schema; /**< default OpenAI function schema as JSON text ({"type": "function",
                             "function": {name, description, parameters}}), used when the config
                             entry has no tool_schema; NULL: the entry must have one */
    /** Build the tool from the entry's `config` (a JSON object text, never NULL). May be NULL. */
    int (*init)(const char *config_json, void **tool);
    /** Free what init made. May be NULL. */
    void (*fini)(void *tool);
    /** Start a trajectory: `instance_id` (unique per trajectory and tool), `create_kwargs` (JSON
        object text, "{}" when none: verl's tools_kwargs[name].create_kwargs, e.g. ground_truth).
        Required. */
    int (*create)(const void *tool, const char *instance_id, const char *create_kwargs, void **inst);
    /** Run one call with `arguments` (a JSON object text). A bad argument is DF_EINVAL with a message
        for the model; `out` is zeroed on entry and owned by the caller after. Required. */
    int (*execute)(const void *tool, void *inst, const char *arguments, df_tool_result *out);
    /** The trajectory's reward as the tool sees it (verl calc_reward). NULL: 0. */
    int (*calc_reward)(const void *tool, void *inst, double *reward);
    /** End the trajectory, freeing inst. May be NULL (then inst must need no freeing). */
    void (*release)(const void *tool, void *inst);
} df_tool;

/** The built-in calculator and GSM8K tool classes (also found by df_tool_class_lookup). */
DF_API extern const df_tool df_tool_calculator;
DF_API extern const df_tool df_tool_gsm8k;

/**
 * Register `tool` under tool->name (shadowing a built-in of that name); the vtable is copied, its
 * strings are not. Not thread-safe: register at start-up. Errors: DF_EINVAL (NULL, empty name, no
 * create or execute), DF_ENOMEM.
 */
DF_API int df_tool_class_register(const df_tool *tool);

/**
 * The tool class named `name`: a registered one, a built-in, or one of verl's class paths for them
 * ("verl.tools.gsm8k_tool.Gsm8kTool", "verl.workers.tool.gsm8k_tool.Gsm8kTool"). Errors:
 * DF_ENOTFOUND listing the known names (a plugin ref not yet loaded: load it with df_plugin_tool).
 */
DF_API int df_tool_class_lookup(const char *name, const df_tool **out);

/* ---- tool sets (multi_turn.tool_config_path) -------------------------------------------------- */

typedef struct df_tool_set df_tool_set;

/** Loads a plugin ref ("lib.so:symbol") so that df_tool_class_lookup finds it (df_plugin_tool). */
typedef int (*df_tool_plugin_loader)(const char *ref);

/**
 * Load verl's tool config YAML:
 *   tools:
 *     - class_name: verl.tools.gsm8k_tool.Gsm8kTool   # or calculator, or path/to/lib.so:symbol
 *       config: {type: native, ...}                   # handed to init as JSON (type must be native)
 *       tool_schema: {type: function, function: {name, description, parameters}}   # optional
 * `load_plugin` (may be NULL) is called for a class_name that is a plugin ref not yet registered.
 * Errors name the file, the entry (index and class_name) and the problem: DF_ENOTFOUND (no file, an
 * unknown class), DF_EINVAL (bad YAML with its line, no `tools` list, a schema without a function
 * name, two tools with one name, type other than native — verl's mcp / benchmax tools are
 * DF_EUNSUPPORTED —), the class's init error.
 */
DF_API int df_tool_set_load(const char *path, df_tool_plugin_loader load_plugin, df_tool_set **out);

/** An empty tool set, to fill with df_tool_set_add. Errors: DF_ENOMEM. */
DF_API int df_tool_set_create(df_tool_set **out);

/**
 * Add a tool of class `tool` with `config_json` (NULL: {}) and `schema_json` (NULL: the class's
 * default schema). Errors: DF_EINVAL (bad JSON, no function name in the schema, a duplicate name),
 * the init's error.
 */
DF_API int df_tool_set_add(df_tool_set *set, const df_tool *tool, const char *config_json,
                           const char *schema_json);

/** Free the set (every tool's fini). NULL ok. Sessions of the set must be freed first. */
DF_API void df_tool_set_free(df_tool_set *set);

/** Number of tools. */
DF_API int df_tool_set_size(const df_tool_set *set);

/** The function names [size] (for df_tool_calls_parse); valid while the set lives. */
DF_API const char *const *df_tool_set_names(const df_tool_set *set);

/**
 * The `tools` JSON array of the set's schemas (malloc'd text) for the chat template
 * (df_tokenizer_apply_chat_template_json's tools_json). Errors: DF_ENOMEM.
 */
DF_API int df_tool_set_tools_json(const df_tool_set *set, char **out);

/* ---- tool sessions: one trajectory's instances -------------------------------------------------- */

typedef struct df_tool_session df_tool_session;

/**
 * Create every tool's instance for one trajectory (verl creates them when the request starts).
 * `instance_id` names the trajectory (each tool gets "<instance_id>/<function name>");
 * `tools_kwargs` is verl's extra_info.tools_kwargs JSON object text ({"<function name>":
 * {"create_kwargs": {...}}}; NULL or a missing entry: {}). Errors: DF_EINVAL (bad JSON), a create's.
 */
DF_API int df_tool_session_create(const df_tool_set *set, const char *instance_id, const char *tools_kwargs,
                                  df_tool_session **out);

/**
 * Run one parsed call. A call with `error`, an unknown name and a tool's own failure (any status but
 * DF_ENOMEM) are answered, not returned: out->text is "Error when executing tool: <why>" and the
 * reward 0, as verl's agent loop. *out is zeroed first and the caller's after (df_tool_result_clear).
 * Errors: DF_EINVAL (NULL arguments), DF_ENOMEM.
 */
DF_API int df_tool_session_execute(df_tool_session *s, const df_tool_call *call, df_tool_result *out);

/** Tool i's calc_reward for this trajectory (0 when the class has none). Errors: the tool's. */
DF_API int df_tool_session_reward(df_tool_session *s, int i, double *reward);

/** Number of calls executed, well-formed and not (metrics: agent_loop/tool_calls). */
DF_API int64_t df_tool_session_n_calls(const df_tool_session *s);

/** Release every instance and free the session. NULL ok. */
DF_API void df_tool_session_free(df_tool_session *s);

/* ---- interactions (multi_turn.interaction_config_path) ---------------------------------------- */

/** What an interaction answers (verl BaseInteraction.generate_response's tuple). */
typedef struct df_interaction_result {
    bool should_terminate; /**< end the trajectory */
    char *text;            /**< malloc'd user message content */
    double reward;         /**< the turn's reward */
    char *metrics;         /**< malloc'd JSON object text, or NULL */
} df_interaction_result;

/** Free a result's strings and zero it (NULL ok). */
DF_API void df_interaction_result_clear(df_interaction_result *r);

/** An interaction class: verl's BaseInteraction lifecycle as a vtable (same rules as df_tool). */
typedef struct df_interaction {
    const char *name; /**< class name ("gsm8k"); a plugin's is replaced by its ref */
    int (*init)(const char *config_json, void **state); /**< may be NULL */
    void (*fini)(void *state);                           /**< may be NULL */
    /** Start a trajectory; `kwargs` is verl's extra_info.interaction_kwargs JSON object text. */
    int (*start)(const void *state, const char *instance_id, const char *kwargs, void **inst);
    /** Answer the conversation so far (`messages`: a JSON array of {role, content}). */
    int (*generate_response)(const void *state, void *inst, const char *messages, df_interaction_result *out);
    /** The trajectory's score (verl calculate_score). NULL: 0. */
    int (*calculate_score)(const void *state, void *inst, double *score);
    /** End the trajectory, freeing inst (verl finalize_interaction). May be NULL. */
    void (*finalize)(const void *state, void *inst);
} df_interaction;

DF_API extern const df_interaction df_interaction_gsm8k;

/** Register an interaction class under its name (as df_tool_class_register). */
DF_API int df_interaction_class_register(const df_interaction *ia);

/** The interaction class `name` (registered, built-in, or verl's class path for it). DF_ENOTFOUND. */
DF_API int df_interaction_class_lookup(const char *name, const df_interaction **out);

typedef struct df_interaction_set df_interaction_set;

/**
 * Load verl's interaction config YAML:
 *   interaction:
 *     - name: gsm8k                # optional; default: the class's last path component, lowercased,
 *                                  # without "interaction" (verl: Gsm8kInteraction -> "gsm8k")
 *       class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction
 *       config: {}
 * Plugins and errors as df_tool_set_load (the entry, its name and the problem; duplicate names).
 */
DF_API int df_interaction_set_load(const char *path, df_tool_plugin_loader load_plugin, df_interaction_set **out);

/** An empty set / add one interaction under `name` (NULL: the class name) with config (NULL: {}). */
DF_API int df_interaction_set_create(df_interaction_set **out);
DF_API int df_interaction_set_add(df_interaction_set *set, const char *name, const df_interaction *ia,
                                  const char *config_json);
DF_API void df_interaction_set_free(df_interaction_set *set);
DF_API int df_interaction_set_size(const df_interaction_set *set);

typedef struct df_interaction_session df_interaction_session;

/**
 * Start the interaction that `kwargs` names (verl extra_info.interaction_kwargs: {"name": ...,
 * "ground_truth": ..., ...}; no "name": "gsm8k", verl's default) for one trajectory.
 * Errors: DF_EINVAL (bad JSON), DF_ENOTFOUND (no interaction of that name, listing the set's), start's.
 */
DF_API int df_interaction_session_start(const df_interaction_set *set, const char *instance_id,
                                        const char *kwargs, df_interaction_session **out);

/** The interaction's answer to `messages` (JSON array). *out zeroed first. Errors: the class's. */
DF_API int df_interaction_session_respond(df_interaction_session *s, const char *messages,
                                          df_interaction_result *out);

/** calculate_score of the trajectory (0 when the class has none). */
DF_API int df_interaction_session_score(df_interaction_session *s, double *score);

/** Finalize and free. NULL ok. */
DF_API void df_interaction_session_free(df_interaction_session *s);

/* ---- rendering for the loop -------------------------------------------------------------------- */

/** Options of df_agent_render_delta; zero-initialised = no tools, no extra variables. */
typedef struct df_agent_render_opts {
    const char *tools_json; /**< the tool set's tools JSON (df_tool_set_tools_json) or NULL */
    const char *extra_json; /**< extra template variables (JSON object) or NULL */
    /** What of the template's text after the last old message's content the token sequence already
        holds: "<|im_end|>" when the rollout keeps the stop token it generated (NULL = ""). */
    const char *kept_suffix;
} df_agent_render_opts;

/**
 * The token ids to append to a KV-cached sequence that holds the rendering of `messages` (a JSON
 * array ending with the model's turn, whose content is the model's raw text) up to the end of that
 * turn's content plus opts->kept_suffix, so that it then holds the rendering of messages +
 * `new_messages` (tool / user messages) with the generation prompt. As verl's multi-turn rollout:
 * the conversation is rendered with and without the new messages, the old rendering (without the
 * generation prompt) must be a prefix of the new one, and the suffix is tokenised — together with
 * what the template writes after the last content and the sequence lacks (Qwen2.5: "\n" after
 * <|im_end|>). The delta starts after a special token in the templates distflow knows, so
 * tokenising it alone gives the ids a whole re-tokenisation gives.
 * A last message with empty content and no kept_suffix (a model turn whose tokens decode to no
 * text, stopped by an id that is no special token; verl appends it as it is) ends where the
 * rendering of the messages before it with the generation prompt ends.
 * On success *ids is malloc'd ([*n] int32). Errors: DF_EINVAL (bad JSON, an empty `messages`, a
 * template error, an old rendering that is not a prefix, a last message whose content the template
 * does not write verbatim or that lacks kept_suffix after it — a turn cut by the length limit has
 * no stop token to keep —, an empty last message alone or not after the generation prompt's
 * rendering), DF_ENOMEM.
 */
DF_API int df_agent_render_delta(const df_tokenizer *tok, const char *messages, const char *new_messages,
                                 const df_agent_render_opts *opts, int32_t **ids, int64_t *n);

/**
 * Cut `text` to at most `max_tokens` tokens of `tok` (multi_turn.max_tool_response_length) keeping
 * side "left" (the start, then "...(truncated)"), "right" ("(truncated)..." then the end) or
 * "middle" (max_tokens/2 tokens of each end around "...(truncated)..."), as verl's agent loop cuts
 * a tool response (verl counts characters; the key's unit here is tokens). A cut never splits a
 * UTF-8 character; text within the limit is copied unchanged. *out is malloc'd.
 * Errors: DF_EINVAL (max_tokens < 1, unknown side, invalid UTF-8), DF_ENOMEM.
 */
DF_API int df_agent_truncate(const df_tokenizer *tok, const char *text, int64_t max_tokens, const char *side,
                             char **out);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_AGENT_H */
