/*
 * distflow/node.h — what a node function can reach besides its batch: the
 * public node context. A node function (distflow/dag.h, df_node_fn) gets a
 * df_node_ctx; these accessors read the DAG worker behind it, so a plugin node
 * can decode responses with the job's tokenizer, read its typed configuration
 * (the global keys with the node's `config:` overrides), and know the ranks it
 * runs with, through public headers only (docs/architecture.md, "Extension
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

#ifdef __cplusplus
}
#endif

#endif /* DISTFLOW_NODE_H */
