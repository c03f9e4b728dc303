/*
 * embodied_worker.h (internal) — siiRL's embodied workload in the DAG worker (docs/embodied.md):
 * the environment and the policy's action tokens as the config names them (embodied_setup.c), the
 * env rollout (embodied_rollout.c), the embodied sampling filter and SRPO's reward as nodes
 * (embodied_nodes.c), and the trajectory <-> model-call views the actor and the reference compute
 * on (embodied_calls.c).
 *
 * The batch of an embodied step has one row per episode (siiRL's [B, traj_len, chunk x tokens]
 * responses, flattened): response_ids holds traj_len = ceil(max_steps / action_chunks_len) calls of
 * C = action_chunks_len x action_token_len action tokens each, response_mask is 1 on the tokens of
 * the actions that ran (t < finish_step x action_token_len), and call k's observation prompt is
 * kept in call_prompt_ids (lengths in call_prompt_lens), so that the actor's log-prob of call k's
 * tokens is conditioned on call k's observation alone, as siiRL's VLA sees only the current frame.
 */
#ifndef DF_WORKER_EMBODIED_H
#define DF_WORKER_EMBODIED_H

#include "distflow/batch.h"
#include "distflow/metrics.h"
#include "distflow/config.h"
#include "distflow/dataset.h"
#include "distflow/embodied.h"
#include "distflow/rollout.h"
#include "distflow/srpo.h"
#include "distflow/tokenizer.h"
#include "distflow/train_config.h"

/* Batch columns an embodied rollout adds (beside prompt_ids, response_ids, rollout_log_probs and
 * response_mask). */
#define DF_EMB_CALL_PROMPTS "call_prompt_ids" /* TOK_I32: the traj_len call prompts, concatenated */
#define DF_EMB_CALL_LENS "call_prompt_lens"   /* TOK_I32: [traj_len] their lengths */
#define DF_EMB_EMBEDDING "embedding"          /* TOK_F32: [2 x feature_dim] the trajectory embedding */

/** What the embodied rollout needs, resolved once from actor_rollout_ref.embodied.* and the tokenizer. */
typedef struct df_embodied_setup {
    const df_embodied_env *env; /* env.env_type's class */
    char *env_config;           /* env.config as JSON (owned) */
    df_embodied_info info;      /* the class's description (a probe episode's) */
    df_embodied_vec_opts vo;    /* env.num_envs, env.max_steps, action_chunks_len */
    int64_t traj_len;           /* model calls per episode at most: ceil(max_steps / action_chunks_len) */
    int64_t call_tokens;        /* tokens per call: action_chunks_len x action_token_len */
    /* The policy's token of action value v at position p: word[p * action_vocab + v], the token of
       the word after a space (" north", as the demonstrations write every word); -1 where v is no
       value at p. */
    int32_t *word;
    const char *env_name;       /* env.env_name (borrowed from the config) */
} df_embodied_setup;

/** True when the job runs control episodes: actor_rollout_ref.model.model_type is embodied. */
bool df_embodied_enabled(const df_train_config *t);

/**
 * Resolve s from t's actor_rollout_ref.embodied.* and the policy's tokenizer (NULL: the token
 * tables are not made, as the checks before loading do): the class (grid_place, or a plugin ref,
 * loaded when load is true), its config and description, action_token_len equal to the class's,
 * and each action word one token of tok. Errors name the key (c gives where it was set).
 */
int df_embodied_setup_init(df_embodied_setup *s, const df_config *c, const df_train_config *t,
                           const df_tokenizer *tok, bool load);
void df_embodied_setup_clear(df_embodied_setup *s);

/**
 * The checks of a train config with embodied keys (df_train_check): model_type=embodied needs
 * data.dataset_type=embodied, reward_model.reward_manager=embodied, a readable environment
 * (df_embodied_setup_init without a tokenizer), token-mean loss aggregation, no reward model and
 * no multi-turn / asynchronous rollout; algorithm.workflow_type=embodied, the graph's embodied
 * sampling node or reward_manager=embodied need model_type=embodied; reward_model.reward_kwargs
 * holds only reward_coef and action_token_len. `embodied_graph`: the graph has the embodied
 * sampling node. Errors: DF_EINVAL / DF_EUNSUPPORTED naming the key.
 */
int df_embodied_check(const df_config *c, const df_train_config *t, bool embodied_graph);

/** reward_model.reward_kwargs' reward_coef (1 when absent); errors name the key. */
int df_embodied_reward_coef(const df_train_config *t, double *coef);

/**
 * Each prompt row's episode: the dataset's task_id and trial_id (siiRL's manifest columns) of the
 * rows named by the batch's `row` column, into task[n] / trial[n]. Errors: DF_EINVAL naming the
 * file and line of a row without them.
 */
int df_embodied_prompt_episodes(const df_dataset *ds, const df_batch *prompts, int64_t *task, int64_t *trial);

/** Options of one embodied rollout. */
typedef struct df_embodied_rollout_opts {
    df_sampling_params sp; /* temperature, top_k / top_p, greedy; the length and stops are set here */
    uint64_t seed;         /* the step's seed; an episode's draws are keyed by its prompt's `index`,
                              its sample and the call, so they do not depend on the ranks' split */
    int64_t n;             /* episodes per prompt row (rollout.n) */
    const char *label;     /* progress line label; NULL: none */
} df_embodied_rollout_opts;

/**
 * Run n episodes per row of `prompts` (task[i], trial[i]; the `index` column keys the draws) in
 * waves of env.num_envs through the policy m on engine e, and return *out: each prompt row repeated
 * n times with the columns of the header above plus finish_step, complete, task_id, trial_id,
 * invalid_actions (I64) and the embedding. The calls after an episode ended are not generated:
 * their tokens are the no-op word, log-prob 0, mask 0, prompt the first call's first token.
 * Errors: the class's, the engine's, DF_ENOMEM.
 */
int df_embodied_rollout(const df_embodied_setup *s, df_rollout_engine *e, const df_model *m, const df_tokenizer *tok,
                        const df_batch *prompts, const int64_t *task, const int64_t *trial,
                        const df_embodied_rollout_opts *o, df_batch **out);

/** Policy tokens -> action values: tokens[C] of call k's response into act[C] (-1: no action word). */
void df_embodied_decode_call(const df_embodied_setup *s, const int32_t *tokens, int32_t *act);

/**
 * The model-call view of an embodied trajectory batch: one row per (episode, call), call-major
 * within an episode (traj_len rows each); prompt_ids is the call's observation prompt, and every
 * TOK column laid out as response_ids (response_ids, rollout_log_probs, response_mask,
 * old_log_probs, ref_log_prob, advantages, returns, ...) is cut into the calls' slices; per-row
 * columns are repeated; the other TOK columns are left out. *calls is NULL when b has no
 * call_prompt_ids (not an embodied batch). Errors: DF_EINVAL (inconsistent columns), DF_ENOMEM.
 */
int df_embodied_calls_split(const df_batch *b, df_batch **calls);

/** Copy TOK_F32 column `col` of the call view back into b (created there like response_ids). */
int df_embodied_calls_join(const df_batch *calls, const char *col, df_batch *b);

/** The rows an actor mini-batch of `samples` episodes spans in the call view (x traj_len). */
int64_t df_embodied_call_rows(const df_train_config *t, int64_t samples);

/* The sums of an evaluation: episodes, successes, finish_steps. */
#define DF_EMB_EVAL_SUMS 3

/**
 * Run every row of ds (this rank's shard) as o->n episodes (df_embodied_rollout) and add up
 * sums[DF_EMB_EVAL_SUMS]: episodes, successes, finish_steps. Errors: as df_embodied_rollout.
 */
int df_embodied_evaluate(const df_embodied_setup *s, df_rollout_engine *e, const df_model *m, const df_tokenizer *tok,
                         const df_dataset *ds, const df_embodied_rollout_opts *o, double sums[DF_EMB_EVAL_SUMS]);

/* ---- the DAG worker's side (embodied_nodes.c, embodied_validate.c) ---- */
struct df_dag_worker;
/**
 * With model_type=embodied: w->embodied from the config and the tokenizer, and the graph's built-in
 * generate, compute_reward, compute_old_log_prob, compute_ref_log_prob and train_actor nodes bound
 * to their embodied forms (after the graph is resolved). Nothing otherwise.
 */
int df_worker_embodied_setup(struct df_dag_worker *w);
void df_worker_embodied_free(struct df_dag_worker *w);
/** Register embodied_local_rank_sampling (siiRL's names of it). */
int df_worker_register_embodied_nodes(void);
/**
 * Validation of an embodied job: data.val_files' rows as n episodes each with sampling sp; the
 * success rate over the job (collective over w->group) into *success, m's embodied/test_score/all
 * and embodied/test_score/<env_name>, and embodied/test_finish_step/mean.
 */
int df_worker_embodied_validate(struct df_dag_worker *w, const df_sampling_params *sp, int64_t n, uint64_t seed,
                                df_metrics *m, double *success, int64_t *episodes);

#endif
