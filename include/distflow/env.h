/*
 * distflow/env.h — text environments for multi-turn rollouts: siiRL's ENV_INTERACT node
 * (`dag.env_enable`, `dag.environment_path`) as a C library. An environment is gym's interface over
 * text: reset(seed) gives the first observation, step(action text) gives the next observation, a
 * reward, terminated / truncated and an info JSON object. The rollout alternates model turns and
 * environment steps until every episode ends; nothing here generates tokens.
 *
 * The pieces, with the names below:
 *   df_env          one environment class as a vtable (built in, or a plugin's exported object);
 *   df_env_spec     what dag.environment_path names: a class and its config (df_env_spec_load);
 *   df_env_vec      N episodes of one class on one rank, reset with per-episode seeds derived from
 *                   (seed, global episode index), so an episode's course does not depend on how the
 *                   batch is split over ranks; stepped together, the ended ones skipped;
 *   adapter         df_env_vec_turn: a model turn's text in, the observation as a chat message and
 *                   "the episode ended" out (what the rollout's turn handler appends); the episode's
 *                   return for the REWARD stage (df_env_vec_episode) and verl's num_turns metrics
 *                   (df_env_vec_metrics).
 *
 * Built-in classes (docs/environments.md): "guess_number" (guess a whole number in [low, high] from
 * "higher" / "lower" hints) and "grid_nav" (walk a text grid around walls to a goal). A plugin class is a `const df_env` object exported from a shared library and
 * named by its ref "path/to/libx.so:symbol" (loaded through distflow/dag.h's df_plugin_env).
 *
 * Threads: a class and a spec are read-only; a df_env_vec is used by one thread at a time. Episodes
 * of one vector share nothing, so a caller may split a batch over several vectors and threads.
 */
#ifndef DISTFLOW_ENV_H
#define DISTFLOW_ENV_H

#include "distflow/common.h"
#include "distflow/metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

/** What one step returns (gym's step tuple). Free with df_env_step_clear. */
typedef struct df_env_step {
    char *observation; /**< malloc'd text the model reads next (also after the episode ends) */
    double reward;     /**< this step's reward */
    bool terminated;   /**< the episode reached an end state (won or lost) */
    bool truncated;    /**< the episode was cut (a turn limit) */
    char *info;        /**< malloc'd JSON object text, or NULL; `"success": true` marks a won episode
                            (the env/success_rate metric) */
} df_env_step;

/** Free a step's strings and zero it (NULL ok). */
DF_API void df_env_step_clear(df_env_step *s);

/**
 * An environment class. `state` is one episode's environment, made by create and reused across
 * resets. Every function returns 0 or a DF_E* status with df_error(). A plugin exports one as
 * `const df_env sym = {...}`.
 */
typedef struct df_env {
    const char *name; /**< class name ("guess_number"); a plugin's is replaced by its ref */
    /** Make one episode's environment from `config_json` (a JSON object text, never NULL). A bad
        config (an unknown key, a wrong type, a value out of range) is DF_EINVAL naming the key as
        `config.<key>` (df_env_config_read does all of this). Required. */
    int (*create)(const char *config_json, void **state);
    /** Start an episode: the same seed gives the same episode. *observation is malloc'd: the first
        user message (the task, its rules and the answer format). Required. */
    int (*reset)(void *state, uint64_t seed, char **observation);
    /** Apply the model's turn text. An action the environment cannot read is no error: the
        observation says what is wrong (the step may still count against a turn limit). `out` is
        zeroed on entry and the caller's after. Stepping an ended episode is DF_EINVAL. Required. */
    int (*step)(void *state, const char *action, df_env_step *out);
    /** Free state. May be NULL (then state must need no freeing). */
    void (*release)(void *state);
} df_env;

/* ---- reading a class's config ------------------------------------------------------------------ */

/** The kind of value of an environment config option. */
typedef enum df_env_option_type {
    DF_ENV_OPT_INT = 1,   /**< a whole number (a JSON integer); value is an int64_t * */
    DF_ENV_OPT_NUMBER = 2 /**< a finite number (integer or real); value is a double * */
} df_env_option_type;

/** One key a class reads under its `config:`. */
typedef struct df_env_option {
    const char *key;         /**< the key */
    df_env_option_type type; /**< its kind */
    double min, max;         /**< the inclusive range of its values */
    void *value;             /**< where the value goes; left as it is when the key is absent (the default) */
} df_env_option;

/**
 * Read an environment config (a create's `config_json`) against the class's options opts[n], for
 * built-in and plugin classes alike, so that no key is silently ignored. Every key of the object
 * must be an option's, and every value of the option's kind and within its range. Errors (DF_EINVAL,
 * starting with "<who>: "): "config is not a JSON object"; "unknown key config.lo (known: low,
 * high); did you mean 'low'?"; "config.max_turns must be an integer in [1, 1000], got 0" (a NUMBER:
 * "must be a number in [0, 1], got ..."). A message names the key as `config.<key>`:
 * df_env_spec_load finds that key in the environment config file and adds its line. DF_ENOMEM.
 */
DF_API int df_env_config_read(const char *who, const char *config_json, const df_env_option *opts, int n);

/** The built-in classes (also found by df_env_class_lookup as "guess_number" / "grid_nav"). */
DF_API extern const df_env df_env_guess_number;
DF_API extern const df_env df_env_grid_nav;

/**
 * Register `env` under env->name (shadowing a built-in of that name); the vtable is copied, its
 * strings are not. Not thread-safe: register at start-up. Errors: DF_EINVAL (NULL, empty name, no
 * create / reset / step), DF_ENOMEM.
 */
DF_API int df_env_class_register(const df_env *env);

/** The class `name` (registered or built-in). Errors: DF_ENOTFOUND listing the known names. */
DF_API int df_env_class_lookup(const char *name, const df_env **out);

/* ---- dag.environment_path ---------------------------------------------------------------------- */

/** A class and its config, as dag.environment_path names them. Free with df_env_spec_clear. */
typedef struct df_env_spec {
    const df_env *env; /**< the class (registry-owned); NULL after a check-only loader */
    char *config;      /**< malloc'd JSON object text handed to create ("{}" when none) */
    char *source;      /**< malloc'd: what named it (the file, or the name / ref), for messages */
} df_env_spec;

/** Loads a plugin ref ("lib.so:symbol") so that df_env_class_lookup finds it (df_plugin_env). */
typedef int (*df_env_plugin_loader)(const char *ref);

/**
 * Resolve dag.environment_path: a file ending in .yaml / .yml holding
 *   environment:
 *     name: guess_number        # a built-in class or a plugin ref path/to/libx.so:symbol
 *     config: {low: 1, high: 100, max_turns: 10}   # optional, handed to create as JSON
 * or a class name / plugin ref directly (config {}). `load` (may be NULL) loads a plugin ref not yet
 * registered. The config is tried once (create, then release) so that a bad one fails here. A
 * loader that returns 0 and registers nothing (one that only checks the library file, as
 * `config check` does without running plugin code) leaves out->env NULL: the class is checked, its
 * config is not.
 * Errors name the source: DF_EINVAL (NULL / empty path, bad YAML with its line, a key given twice,
 * a top-level key other than `environment`, a key of `environment` other than name and config, no
 * `environment` mapping or no string `name`, a config that is not a mapping, the class's create
 * error, with the file:line:column of the config key it names when the spec is a file),
 * DF_ENOTFOUND (no file, unknown class listing the known ones), load's error. *out is then empty.
 */
DF_API int df_env_spec_load(const char *environment_path, df_env_plugin_loader load, df_env_spec *out);

/** Free what df_env_spec_load allocated and zero *s (NULL ok). */
DF_API void df_env_spec_clear(df_env_spec *s);

/* ---- vectorised episodes ----------------------------------------------------------------------- */

/** One episode's record in a vector. */
typedef struct df_env_episode {
    uint64_t seed;       /**< the seed its reset got (df_env_episode_seed) */
    int64_t steps;       /**< environment steps taken = model turns answered */
    int64_t model_turns; /**< model turns the rollout reported (steps + a last turn cut by the engine) */
    double ret;          /**< sum of step rewards: the episode's reward for the REWARD stage */
    bool terminated, truncated; /**< as the last step said (truncated also when df_env_vec_cut) */
    bool success;        /**< the last step's info had "success": true */
    bool done;           /**< terminated || truncated */
} df_env_episode;

/**
 * The seed of the episode at global index `episode` (its row in the step's whole batch, over all
 * ranks) of a rollout with base `seed` (e.g. the data seed mixed with the global step): a hash of
 * both (df_rng_key), so any split of the batch over ranks gives each episode the same seed.
 */
DF_API uint64_t df_env_episode_seed(uint64_t seed, int64_t episode);

typedef struct df_env_vec df_env_vec;

/** Make `n` (>= 1) episodes of spec's class. Errors: DF_EINVAL (NULL, n < 1), create's, DF_ENOMEM. */
DF_API int df_env_vec_create(const df_env_spec *spec, int n, df_env_vec **out);

/** Release every episode and free the vector. NULL ok. */
DF_API void df_env_vec_free(df_env_vec *v);

/** Number of episodes. */
DF_API int df_env_vec_size(const df_env_vec *v);

/**
 * Reset every episode: episode i gets df_env_episode_seed(seed, first_episode + i), where
 * first_episode is this rank's offset in the global batch. Records are zeroed. Errors: reset's,
 * naming the episode.
 */
DF_API int df_env_vec_reset(df_env_vec *v, uint64_t seed, int64_t first_episode);

/**
 * Reset every episode i with the seed df_env_episode_seed(seed, ids[i]): `ids` [size] are global
 * episode ids of the rows. GRPO's groups (rollout.n > 1) pass the prompt's global index for each
 * of its n samples, so that the group plays one episode (one secret, one grid) n times and its
 * advantages compare the responses, not the episodes. Errors: DF_EINVAL (NULL ids, a negative id),
 * reset's naming the episode.
 */
DF_API int df_env_vec_reset_ids(df_env_vec *v, uint64_t seed, const int64_t *ids);

/** Episode i's current observation (the reset's, then the last step's); valid until the next
    reset / step of that episode. NULL for i out of range. */
DF_API const char *df_env_vec_observation(const df_env_vec *v, int i);

/** Episode i's record (NULL for i out of range). */
DF_API const df_env_episode *df_env_vec_episode(const df_env_vec *v, int i);

/** Number of episodes not yet done. */
DF_API int df_env_vec_n_active(const df_env_vec *v);

/**
 * Step every active episode i with actions[i] (entries of ended episodes are not read and may be
 * NULL). Errors: DF_EINVAL (NULL actions, an active episode's NULL action), step's naming the
 * episode (the episodes before it have stepped).
 */
DF_API int df_env_vec_step(df_env_vec *v, const char *const *actions);

/* ---- the rollout's adapter ------------------------------------------------------------------- */

/**
 * The first messages of episode i's conversation: a JSON array (malloc'd text) of an optional
 * {"role": "system", "content": system_prompt} (NULL / "": none) and {"role": "user", "content":
 * <the reset observation>}. Errors: DF_EINVAL (i out of range), DF_ENOMEM.
 */
DF_API int df_env_vec_prompt_messages(const df_env_vec *v, int i, const char *system_prompt, char **messages);

/**
 * One model turn of episode i ended with `text`: count the turn, step the episode with it and give
 * the observation as the messages to append, a JSON array (malloc'd) of one {"role": role, "content":
 * observation} (role "user" as verl's interactions and siiRL's environments answer, or "tool"), and
 * *done when the episode ended (the rollout then stops it; the last observation is returned
 * anyway, for logs). Errors: DF_EINVAL (i out of range or ended, NULL text, role not user / tool),
 * step's, DF_ENOMEM.
 */
DF_API int df_env_vec_turn(df_env_vec *v, int i, const char *text, const char *role, char **messages,
                           bool *done);

/**
 * The rollout stopped episode i without an environment step (the response length or the model
 * turn limit ran out): with `counted_turn` its last model turn is counted, and the episode ends as
 * truncated. An ended episode is left alone. Errors: DF_EINVAL (i out of range).
 */
DF_API int df_env_vec_cut(df_env_vec *v, int i, bool counted_turn);

/**
 * Add the vector's episode metrics to m (df_metrics_set), over its episodes:
 *   num_turns/min|max|mean    verl's num_turns: 1 (the prompt) + model turns + environment replies
 *   env/episode_return/min|max|mean  the episodes' returns
 *   env/success_rate          share of episodes whose last info said "success": true
 *   env/truncated_rate        share of episodes ended by truncation
 *   env/steps/mean            environment steps per episode
 * Errors: DF_EINVAL (NULL), DF_ENOMEM.
 */
DF_API int df_env_vec_metrics(const df_env_vec *v, df_metrics *m);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_ENV_H */
