/*
 * distflow/marft_env.h — the environment of a chained multi-agent (MARFT) episode: what siiRL's
 * `agent_options.env_path` names (a Python class, e.g. examples/experimental/marft/config/
 * math_env.py:MathEnv, whose `step(actions, ground_truth)` siiRL's MultiAgentLoop calls after the
 * last agent of every turn; siirl/execution/rollout_flow/multi_agent/multiagent_generate.py) as a C
 * class. The chained rollout (distflow/marft.h has the prompts) steps it once per episode and turn:
 * it reads every agent's episode text and the last agent's answer, and gives the turn's reward, each
 * agent's next observation and whether the episode ends.
 *
 * Classes: the built-in MathEnv (df_marft_env_math, below), or a plugin: a shared library exporting
 *     DF_PLUGIN_DECLARE_ABI;
 *     DF_API const df_marft_env_class my_env = {.name = "my_env", .step = my_step};
 * named in env_path as "path/to/libx.so:my_env" (df_marft_env_resolve). docs/multi_agent.md.
 *
 * Threads: a class is stateless; step may run on several threads at once (one call per episode).
 */
#ifndef DISTFLOW_MARFT_ENV_H
#define DISTFLOW_MARFT_ENV_H

#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

struct df_reward_kwargs;

/** One turn of a chained episode, as the environment sees it after the last agent spoke. */
typedef struct df_marft_env_turn {
    int n_agents;                 /**< agents in turn order, >= 1 */
    const char *const *episodes;  /**< [n_agents]: the episode text after agent a's response this turn
                                       (siiRL's `actions`: the first agent's, ..., the last agent's) */
    const char *const *responses; /**< [n_agents]: agent a's own response text this turn */
    const char *ground_truth;     /**< the row's reward_model.ground_truth, or NULL */
    const char *data_source;      /**< the row's data_source, or NULL */
    const char *extra_info;       /**< the row's extra_info JSON text, or NULL (handed to the scorer) */
    const struct df_reward_kwargs *reward_kwargs; /**< the job's custom_reward_function.reward_kwargs
                                                       (distflow/reward.h); NULL: the scorers' defaults */
} df_marft_env_turn;

/** What a step returns. Free with df_marft_env_result_clear. */
typedef struct df_marft_env_result {
    char **
        obs; /**< [n_obs] malloc'd: each agent's next observation; obs[n_agents-1] is the next episode text */
    int n_obs;    /**< entries of obs: the turn's n_agents after a successful step */
    double score; /**< the turn's reward */
    bool stop;    /**< the episode ends (MathEnv: the answer is right) */
} df_marft_env_result;

/**
 * An environment class. `step` fills *out (zeroed on entry: obs malloc'd, n_obs = turn->n_agents)
 * and returns 0, or a DF_E* status with df_error() (then *out is the caller's to clear). It keeps
 * no state between calls and may run on several threads at once.
 */
typedef struct df_marft_env_class {
    const char *name; /**< for messages ("MathEnv"); may be NULL in a plugin */
    int (*step)(const df_marft_env_turn *turn, df_marft_env_result *out); /* stateless, thread-safe */
} df_marft_env_class;

/** Free a result's observations and zero it (NULL ok). */
DF_API void df_marft_env_result_clear(df_marft_env_result *r);

/**
 * Step `cls` on `turn`, checking both sides, so that a plugin's mistake is an error naming it rather
 * than a crash in the rollout: turn has n_agents >= 1 and non-NULL episodes[a] / responses[a];
 * after the step out has n_obs == n_agents non-NULL observations and a finite score. *out is
 * zeroed first, and cleared again on any error. Errors: DF_EINVAL for a malformed turn or result
 * (naming the class), the class's own status wrapped with its name.
 */
DF_API int df_marft_env_step(const df_marft_env_class *cls, const df_marft_env_turn *turn,
                             df_marft_env_result *out);

/**
 * The built-in MathEnv (siiRL examples/experimental/marft/config/math_env.py:MathEnv):
 *   score = df_reward_compute(data_source, responses[n_agents-1], ground_truth, extra_info,
 *                             reward_kwargs) — the rule scorer of the row's data source
 *           (distflow/reward.h; a NULL or "" data_source: "lighteval/MATH", the \boxed{} scorer
 *           siiRL's MathEnv always uses), on the LAST agent's own response;
 *   right = (score == 1.0);  stop = right;
 *   obs[a] = episodes[a] + (right ? " This answer is right." : " This answer is wrong.").
 * Departures from siiRL, documented in docs/multi_agent.md: siiRL scores the last agent's whole
 * episode text (the prompt and every agent's words) with its math scorer whatever the data source,
 * so an earlier agent's \boxed{} answer can count; here only the last agent's response is scored,
 * with the row's own scorer ("#### 42" for GSM8K rows).
 * Errors: DF_EINVAL for a malformed turn or a NULL ground_truth (nothing to score against);
 * df_reward_compute's (DF_ENOTFOUND for a data source without a scorer); DF_ENOMEM.
 */
DF_API extern const df_marft_env_class df_marft_env_math;

/** How siiRL's literal env_path entry for its math environment ends (any directory before it). */
#define DF_MARFT_ENV_MATH_FILE "math_env.py"
#define DF_MARFT_ENV_MATH_CLASS "MathEnv"

/**
 * Loads (load true) or only checks from its file (load false; *obj NULL then) a plugin ref
 * "lib.so:symbol" whose symbol is a df_marft_env_class object. The plan's plugin loader provides
 * both (df_marft_env_resolve / df_marft_env_check); a caller may pass its own.
 */
typedef int (*df_marft_env_loader)(const char *ref, bool load, const df_marft_env_class **obj);

/**
 * An env_path entry to a class, with `loader` for plugin refs:
 *   "<anything>/math_env.py:MathEnv" (or "math_env.py:MathEnv")  the built-in &df_marft_env_math;
 *   "<file>.py:<Class>", any other                                DF_EUNSUPPORTED: distflow runs no
 *                                         Python; the message names the built-in and the plugin form;
 *   "path/lib.so:symbol" (the part before the last ':' ends in ".so" or holds a '/')
 *                                         loader(entry, load, out): a plugin;
 *   anything else (no ':', an empty part)  DF_EINVAL naming both accepted forms.
 * *out: the class (NULL for a plugin only checked). Errors: those above, DF_EINVAL for a NULL or
 * empty entry, a plugin ref without loader, or a loaded plugin class without step; loader's.
 */
DF_API int df_marft_env_lookup(const char *entry, df_marft_env_loader loader, bool load,
                               const df_marft_env_class **out);

/**
 * df_marft_env_lookup with the plan's plugin loader (distflow/dag.h, as df_plugin_env loads an
 * environment class): a plugin's file is checked first (df_plugin_check_object: an exported object
 * of sizeof(df_marft_env_class) bytes, the plugin ABI marker), then the library is loaded once and
 * *out points at its object, valid until df_exec_unload_plugins. Implemented with the plugin loader
 * (src/planner/plugin_tool.c). Start-up only (not thread-safe). Errors: df_marft_env_lookup's,
 * df_plugin_check_object's / df_plugin_symbol's (DF_ENOTFOUND for a missing file or symbol),
 * all wrapped with "env_path entry '<entry>'".
 */
DF_API int df_marft_env_resolve(const char *entry, const df_marft_env_class **out);

/** df_marft_env_resolve without running any plugin code (plan, config check): a plugin's file is
    only read (df_plugin_check_object). Errors: as df_marft_env_resolve. */
DF_API int df_marft_env_check(const char *entry);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_MARFT_ENV_H */
