/*
 * distflow/node.h — what a node function can reach besides its batch: the
 * public node context. A node function (distflow/dag.h, df_node_fn) gets a
 * df_node_ctx; these accessors read the DAG worker behind it, so a plugin node
 * can decode responses with the job's tokenizer, read its typed configuration
 * (the global keys with the node's `config:` overrides), know the ranks it
 * runs with, and ask the job's models for log-probs, values or generations,
 * through public headers only (docs/architecture.md, "Extension
 * points"). siiRL's node workers reach the same things through `self`.
 *
 * Every accessor takes the context the executor passed and never fails on it:
 * a context without a worker (a graph run by df_task_graph_run outside
 * `distflow train`) gives NULL / the one-rank answers documented below.
 * What they return is owned by the worker and valid during the call of the
 * node function.
 */
#ifndef DISTFLOW_NODE_H
#define DISTFLOW_NODE_H

#include "distflow/comm.h"
#include "distflow/dag.h"
#include "distflow/tokenizer.h"
#include "distflow/train_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The job's tokenizer (the actor model's, or data.tokenizer), or NULL without a worker. */
DF_API const df_tokenizer *df_node_tokenizer(const df_node_ctx *ctx);

/**
 * The node's typed configuration: the global `train` keys with the node's own
 * `config:` overrides applied (resolved once at setup), or NULL without a
 * worker. Keys a node may override are those its function honours.
 */
DF_API const df_train_config *df_node_config(const df_node_ctx *ctx);

/**
 * The communicator of the process group the node runs in (its ranks hold the
 * data-parallel shards of its batch), or NULL without a worker (one rank).
 */
DF_API df_comm *df_node_comm(const df_node_ctx *ctx);

/**
 * The node's data-parallel layout: *dp_size ranks each hold a shard of the
 * batch, this rank's shard is *dp_rank; *mp_size ranks (model parallel) share
 * one shard, this rank being *mp_rank of them (any pointer may be NULL).
 * Without a worker: 1, 0, 1, 0.
 */
DF_API void df_node_layout_of(const df_node_ctx *ctx, int *dp_size, int *dp_rank, int *mp_size, int *mp_rank);

/* ---- the job's models ------------------------------------------------------------- */

/**
 * Whether the job holds a model for `role`: DF_ROLE_ACTOR (the policy being trained) and
 * DF_ROLE_ROLLOUT (the same weights, sampled by the rollout engine: verl's hybrid engine) in
 * every job; DF_ROLE_REFERENCE (the frozen initial policy) when a KL term needs it;
 * DF_ROLE_CRITIC (the value model) when the estimator needs values. False without a worker.
 */
DF_API bool df_node_has_model(const df_node_ctx *ctx, df_node_role role);

/**
 * Forward pass of the ACTOR or REFERENCE model over `batch` (its prompt_ids and response_ids):
 * TOK_F32 column `column` (laid out like response_ids) gets each response token's log-prob
 * given the prompt and the tokens before it, at the temperature the rollout sampled with, as
 * the built-in old_log_probs / ref_log_prob. *entropy_mean (NULL: not computed) receives the
 * token-mean entropy over the node's process group: then the call is collective (every rank of
 * the group passes NULL or every rank does not). Errors: DF_EINVAL (no worker, no batch, a
 * role without a model or not ACTOR / REFERENCE), the engine's (a batch without the columns).
 */
DF_API int df_node_log_probs(const df_node_ctx *ctx, df_node_role role, df_batch *batch,
                             const char *column, double *entropy_mean);

/**
 * The critic's value of every response token into TOK_F32 column "values" (verl's
 * compute_values). Errors: DF_EINVAL (no worker, no batch, a job without a critic), the engine's.
 */
DF_API int df_node_values(const df_node_ctx *ctx, df_batch *batch);

/**
 * actor_rollout_ref.rollout.n responses for each prompt row of `prompts` from the current
 * policy, with the node's sampling settings (its `config:` overrides where its function
 * declared them), into a new batch *out shaped as the rollout node's output (caller frees with
 * df_batch_free). Each calling node draws its own random stream, distinct from the rollout
 * node's at the same step. Errors: DF_EINVAL (no worker, no prompts), the rollout engine's.
 */
DF_API int df_node_generate(const df_node_ctx *ctx, const df_batch *prompts, df_batch **out);

#ifdef __cplusplus
}
#endif

#endif /* DISTFLOW_NODE_H */
