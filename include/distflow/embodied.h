/*
 * distflow/embodied.h — control environments for embodied RL (siiRL's `embodied_srpo` workload):
 * vectorised episodes driven by discrete action tokens, as siiRL's EmbodiedHFRollout drives LIBERO
 * through its LIBEROAdapter (siirl/engine/rollout/embodied_rollout.py,
 * siirl/environment/embodied/adapters/libero.py), and the built-in simulator "grid_place" that
 * needs no external engine (docs/embodied.md).
 *
 * The vocabulary of siiRL's embodied config (actor_rollout_ref.embodied.*), used by the names below:
 *   action_token_len   tokens per low-level action (OpenVLA: 7 — xyz, rotation, gripper);
 *   action_chunks_len  low-level actions per model call (OpenVLA-OFT: 8);
 *   env.num_envs       episodes stepped together; env.max_steps  low-level actions per episode at most;
 *   task / trial       the task of a suite (a layout and a goal) and the trial (its initial state);
 *   complete           the episode reached its goal (siiRL's `complete`, the success signal);
 *   finish_step        low-level actions executed when the episode ended (success or max_steps), or
 *                      executed so far while it runs: an int per episode in [0, max_steps].
 *
 * The pieces:
 *   df_embodied_env   one environment class as a vtable over one episode (the built-in grid_place, or
 *                     a plugin's exported object: a LIBERO adapter would be one, see docs/embodied.md);
 *   df_embodied_vec   num_envs episodes stepped one chunk (one model call) at a time with siiRL's
 *                     stopping rule, recording complete / finish_step and the trajectory embedding;
 *   text codec        action tokens <-> words (df_embodied_actions_text / df_embodied_actions_parse),
 *                     for policies that answer in text and for SFT data;
 *   demonstrations    a shortest-path planner for grid_place and an SFT jsonl writer.
 *
 * Threads: a class is read-only; an episode state and a vector are used by one thread at a time.
 */
#ifndef DISTFLOW_EMBODIED_H
#define DISTFLOW_EMBODIED_H

#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The most tokens one low-level action may have (siiRL's OpenVLA uses 7). */
#define DF_EMBODIED_MAX_TOKEN_LEN 8

/** What a class's episode state declares about itself (after create; constant for its life). */
typedef struct df_embodied_info {
    int action_token_len; /**< tokens per low-level action, in [1, DF_EMBODIED_MAX_TOKEN_LEN] */
    int action_vocab;     /**< every action token is an integer in [0, action_vocab) */
    /** The word of token value v at position p of an action: token_names[p * action_vocab + v], NULL
        where v is no valid value at p. NULL when the class has no text form. Static storage. */
    const char *const *token_names;
    int feature_dim;       /**< length of the state feature vector (df_embodied_env.features) */
    int64_t num_tasks;     /**< training tasks: ids [0, num_tasks) */
    int64_t num_heldout;   /**< held-out tasks: ids [num_tasks, num_tasks + num_heldout) */
} df_embodied_info;

/**
 * An environment class over one episode. Every function returning int gives 0 or a DF_E* status
 * with df_error(). A plugin exports one as `const df_embodied_env sym = {...}` and registers it
 * with df_embodied_env_register (docs/embodied.md: a LIBERO adapter).
 */
typedef struct df_embodied_env {
    const char *name; /**< class name ("grid_place") */
    /** Make one episode's state from `config_json` (a JSON object text, never NULL); a bad config is
        DF_EINVAL naming the key as `config.<key>` (distflow/env.h's df_env_config_read). Required. */
    int (*create)(const char *config_json, void **state);
    /** Fill *info (see df_embodied_info). Required. */
    void (*describe)(const void *state, df_embodied_info *info);
    /** Start trial `trial_id` (>= 0) of task `task_id` (a training or held-out id): the same pair
        gives the same initial state. Errors: DF_EINVAL for ids out of range. Required. */
    int (*reset)(void *state, int64_t task_id, int64_t trial_id);
    /** Apply one low-level action, action[action_token_len]. A token out of range makes the action
        a no-op (the step still counts, as a robot that holds still); *complete is set when the task
        is now achieved. Stepping a completed episode is DF_EINVAL. Required. */
    int (*step)(void *state, const int32_t *action, bool *complete);
    /** The observation as text (malloc'd): the task description and the current state. Required. */
    int (*observe)(const void *state, char **text);
    /** The state feature vector out[feature_dim] (finite floats). Required. */
    void (*features)(const void *state, float *out);
    /** The task's description ("put the red cube in the goal region"), static or state-owned;
        valid until the next reset. Required. */
    const char *(*task_description)(const void *state);
    /** Free state. May be NULL. */
    void (*release)(void *state);
} df_embodied_env;

/** The built-in simulator (docs/embodied.md): reach-and-place on a grid with obstacles. */
DF_API extern const df_embodied_env df_embodied_grid_place;

/** Register `env` under env->name (shadowing a built-in); the vtable is copied, its strings are
    not. Not thread-safe. Errors: DF_EINVAL (a NULL required member or empty name), DF_ENOMEM. */
DF_API int df_embodied_env_register(const df_embodied_env *env);

/** The class `name` (registered or built-in). Errors: DF_ENOTFOUND listing the known names. */
DF_API int df_embodied_env_lookup(const char *name, const df_embodied_env **out);

/* ---- vectorised episodes ----------------------------------------------------------------------- */

/** The vector's shape: siiRL's embodied.env.num_envs, env.max_steps and embodied.action_chunks_len. */
typedef struct df_embodied_vec_opts {
    int num_envs;          /**< episodes, >= 1 */
    int64_t max_steps;     /**< low-level actions per episode at most, >= 1 */
    int action_chunks_len; /**< low-level actions per model call, >= 1 */
} df_embodied_vec_opts;

/** One episode's record (siiRL's task_records entry). */
typedef struct df_embodied_episode {
    int64_t task_id, trial_id;
    bool active;         /**< still stepping: not complete and finish_step < max_steps */
    bool complete;       /**< the task was achieved (the success signal) */
    int64_t finish_step; /**< low-level actions executed (siiRL's finish_step) */
    int64_t invalid;     /**< actions with a token out of range (executed as no-ops) */
} df_embodied_episode;

typedef struct df_embodied_vec df_embodied_vec;

/**
 * Make o->num_envs episodes of class `env` with `config_json` (NULL: "{}"). Errors: DF_EINVAL (NULL
 * env / o / out, an option out of range, a describe out of range, create's error), DF_ENOMEM.
 */
DF_API int df_embodied_vec_create(const df_embodied_env *env, const char *config_json,
                                  const df_embodied_vec_opts *o, df_embodied_vec **out);

/** Free the vector and its episodes (NULL ok). */
DF_API void df_embodied_vec_free(df_embodied_vec *v);

/** The class's info (shared by every episode). */
DF_API const df_embodied_info *df_embodied_vec_info(const df_embodied_vec *v);

/**
 * Reset episode i to (task_ids[i], trial_ids[i]) for every i < num_envs; every episode becomes
 * active with finish_step 0. Errors: DF_EINVAL (NULL ids), reset's naming the episode.
 */
DF_API int df_embodied_vec_reset(df_embodied_vec *v, const int64_t *task_ids, const int64_t *trial_ids);

/**
 * One model call's actions for every episode: tokens[num_envs, action_chunks_len, action_token_len]
 * (the rows of inactive episodes are not read). As LIBEROAdapter._blocking_step: action j of every
 * still-active episode is executed in turn (j = 0 .. action_chunks_len - 1), finish_step counts it,
 * and an episode stops the moment it completes or finish_step reaches max_steps; the rest of its
 * chunk is not executed. Errors: DF_EINVAL (NULL tokens), step's naming the episode.
 */
DF_API int df_embodied_vec_step_chunk(df_embodied_vec *v, const int32_t *tokens);

/** Episodes still active. */
DF_API int df_embodied_vec_n_active(const df_embodied_vec *v);

/** Episode i's record (NULL for i out of range). */
DF_API const df_embodied_episode *df_embodied_vec_episode(const df_embodied_vec *v, int i);

/** Episode i's observation text (malloc'd, the class's observe). Errors: DF_EINVAL (i out of range). */
DF_API int df_embodied_vec_observation(const df_embodied_vec *v, int i, char **text);

/** Episode i's current state features out[feature_dim]. Errors: DF_EINVAL (i out of range). */
DF_API int df_embodied_vec_features(const df_embodied_vec *v, int i, float *out);

/**
 * Episode i's trajectory embedding out[2 * feature_dim], the stand-in for SRPO's V-JEPA video
 * embedding: [features of the last state, mean of the features over every state of the episode
 * (the reset state and the state after each executed action)]. Errors: DF_EINVAL (i out of range).
 */
DF_API int df_embodied_vec_embedding(const df_embodied_vec *v, int i, float *out);

/**
 * Model calls an episode of max_steps takes: ceil(max_steps / action_chunks_len), the iterations of
 * siiRL's `while step < max_steps: ...; step += action_chunks_len` (traj_len in its response shape
 * [B, traj_len, action_chunks_len * action_token_len]).
 */
DF_API int64_t df_embodied_model_calls(int64_t max_steps, int action_chunks_len);

/* ---- text codec ---------------------------------------------------------------------------------- */

/**
 * tokens[n_actions * info->action_token_len] as words (malloc'd): each token's name, separated by
 * single spaces ("north keep east close"). Errors: DF_EINVAL (a class without names, a token out of
 * range), DF_ENOMEM.
 */
DF_API int df_embodied_actions_text(const df_embodied_info *info, const int32_t *tokens, int n_actions,
                                    char **text);

/**
 * Read `text` as words into tokens[n_actions * action_token_len]: word k is token k (position
 * k % action_token_len). A word that is no name at its position, and every token past the last
 * word, becomes -1 (out of range: the action is a no-op); words past n_actions' are ignored.
 * *n_valid (may be NULL) = tokens read from a valid word. Errors: DF_EINVAL (a class without names,
 * NULL text).
 */
DF_API int df_embodied_actions_parse(const df_embodied_info *info, const char *text, int n_actions,
                                     int32_t *tokens, int *n_valid);

/* ---- grid_place demonstrations --------------------------------------------------------------------- */

/**
 * A shortest action sequence solving trial `trial_id` of task `task_id` of grid_place with
 * `config_json` (breadth-first search over arm cell x object cell x held): tokens[*n_actions *
 * action_token_len], at most max_actions actions. Errors: DF_EINVAL (config, ids, or no plan within
 * max_actions — never the case for a layout grid_place generates), DF_ENOMEM.
 */
DF_API int df_grid_place_plan(const char *config_json, int64_t task_id, int64_t trial_id, int32_t *tokens,
                              int max_actions, int *n_actions);

/**
 * Write scripted demonstrations as SFT JSON lines (docs/sft.md, single-turn) to `path` (atomically:
 * a temporary, then rename): for every task in [first_task, first_task + n_tasks) and trial in
 * [0, trials), the planner's solution cut into model calls of o->action_chunks_len actions (the last
 * padded with the no-op action), one row per call:
 *   {"prompt": <the observation text before the call>, "response": <the call's actions as words, each
 *    after a space (" north keep east close"): one token each for a BPE tokenizer trained on the rows>,
 *    "task_id": t, "trial_id": r, "call": k}
 * so `data.prompt_key=prompt data.response_key=response` trains a policy to answer each observation
 * with its next chunk. *n_rows (may be NULL) = rows written. Errors: DF_EINVAL (config, ids, a
 * solution longer than o->max_steps), DF_EIO with strerror, DF_EINTERNAL (a replayed plan that does
 * not complete: a planner bug), DF_ENOMEM. On an error no file is left at `path`.
 */
DF_API int df_grid_place_write_demos(const char *path, const char *config_json, const df_embodied_vec_opts *o,
                                     int64_t first_task, int64_t n_tasks, int64_t trials, int64_t *n_rows);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_EMBODIED_H */
