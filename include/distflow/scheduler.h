/*
 * distflow/scheduler.h — the DAG planner (docs/architecture.md): split a task graph
 * into irreducible subgraphs, apportion and place ranks on them, and derive the
 * process groups the ranks will need. It mirrors siiRL's
 * siirl/execution/dag/task_loader.py (discover_and_split_parallel_paths),
 * siirl/execution/scheduler/task_scheduler.py (TaskScheduler) and
 * siirl/execution/scheduler/process_group_manager.py (ProcessGroupManager).
 *
 * Everything here is pure computation on graphs and integers: no MPI, no model
 * or data loading. Every rank computes the same plan from the same inputs, so
 * results are deterministic (ties are broken by node id / graph order, never by
 * hashing or addresses).
 * All fallible functions return 0 or a DF_E* status and set df_last_error().
 */
#ifndef DISTFLOW_SCHEDULER_H
#define DISTFLOW_SCHEDULER_H

#include "distflow/common.h"
#include "distflow/config.h"
#include "distflow/dag.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * Graph splitting (siiRL task_loader.py)
 * ====================================================================== */

/**
 * Structural signature of a graph (siiRL generate_structural_signature): node
 * ids sorted, each with its type, role and sorted dependencies, then the sorted
 * edges; the graph id is ignored. Two graphs with the same signature are the
 * same work. malloc'd into *out. Errors: DF_ENOMEM.
 */
DF_API int df_task_graph_signature(df_task_graph *g, char **out);

/**
 * Split a graph into irreducible subgraphs (siiRL
 * discover_and_split_parallel_paths). A FIFO queue starts with a copy of g;
 * each graph taken from it (skipping structures already seen) is
 *  1. split at the first fork node (by sorted id) whose children reach
 *     pairwise disjoint sets of exit nodes (largest such set of children
 *     first): one subgraph per child = the fork, its ancestors and everything
 *     downstream of the child, id "<id>_fan<k>_<fork>_b<i>"; else
 *  2. split at re-converging paths: all entry-to-exit paths (children visited in
 *     id order) are compared pairwise from their ends; the first shared node of
 *     the common suffix is a merge node, the prefixes before it are branches;
 *     one subgraph per branch = its prefix nodes + the merge node and everything
 *     downstream of it, id "<id>_reconv<k>_<merge>_s<j>_b<i>"; else
 *  3. irreducible.
 * k counts the graphs processed so far (from 1). Dependencies of copied nodes
 * are cut to the subgraph. The irreducible graphs, deduplicated by signature,
 * are renamed "<g id>_split_<1..n>" in discovery order. Node order inside a
 * subgraph is g's insertion order (siiRL's is set order).
 * *out: malloc'd array of *n owned graphs (free with df_task_graph_list_free);
 * an empty g gives *n = 0. A chain gives one graph, the copy of g.
 * Errors: DF_EINVAL when g is invalid (the validation message), DF_ENOMEM.
 */
DF_API int df_task_graph_split(df_task_graph *g, df_task_graph ***out, int *n);

/** Free n graphs and the array holding them (NULL is fine). */
DF_API void df_task_graph_list_free(df_task_graph **graphs, int n);

/* ======================================================================
 * TaskScheduler (siiRL task_scheduler.py)
 * ====================================================================== */

/** How workers beyond the first one per subgraph are shared out. */
typedef enum df_apportion {
    /** "param_aware" (siiRL's default): one at a time, cycling over the
     *  subgraphs from the largest size down (ties: input order); when no size
     *  is positive it falls back to even. */
    DF_APPORTION_PARAM_AWARE = 0,
    /** "even": the same number each, the remainder one each to the subgraphs
     *  with the smallest graph ids (strcmp order). */
    DF_APPORTION_EVEN,
} df_apportion;

/** "even" / "param_aware" -> enum. DF_EINVAL naming the string otherwise. */
DF_API int df_apportion_parse(const char *s, df_apportion *out);

/**
 * A model size string as siiRL's _parse_model_params_string reads it:
 * "70B" -> 7e10, "500M" -> 5e8, "100K" -> 1e5, "1000000" -> 1e6 (suffix
 * case-insensitive). DF_EINVAL naming the string when it has no leading number
 * or an unknown suffix (siiRL logs and uses 0).
 */
DF_API int df_parse_model_params(const char *s, double *out);

/**
 * Default size of a graph (siiRL estimate_graph_model_params): the sum of the
 * "model_params" node config values over MODEL_TRAIN / MODEL_INFERENCE nodes;
 * 0 when such nodes exist but none has a positive value (or a value does not
 * parse); the number of nodes when the graph has no model nodes.
 */
DF_API double df_graph_estimate_params(const df_task_graph *g);

/** Size of a subgraph for param_aware apportioning (e.g. parameter count from config.json). */
typedef double (*df_graph_size_fn)(const df_task_graph *g, void *user);

typedef struct df_schedule_opts {
    df_apportion apportion;   /**< zero value: param_aware, as siiRL */
    df_graph_size_fn size_fn; /**< NULL: df_graph_estimate_params */
    void *size_user;
    /* Placement score terms (siiRL consider_*; all on when these are false). */
    bool no_node_cohesion;    /**< +1 for a machine already running this subgraph */
    bool no_node_load;        /**< -(workers already placed on the machine) */
    bool no_rank_preference;  /**< -(rank): lower ranks first */
} df_schedule_opts;

/** A plan: which subgraph each rank runs. Read the fields directly. */
typedef struct df_schedule {
    int nnodes;               /**< machines (trainer.nnodes) */
    int gpus_per_node;        /**< ranks per machine (trainer.n_gpus_per_node) */
    int n_workers;            /**< nnodes * gpus_per_node; rank r is on machine r / gpus_per_node */
    int n_graphs;
    df_task_graph **graphs;   /**< [n_graphs] the subgraphs, borrowed from the caller */
    double *sizes;            /**< [n_graphs] size of each subgraph */
    int *graph_workers;       /**< [n_graphs] workers apportioned to each subgraph */
    int *rank_graph;          /**< [n_workers] index into graphs, -1 for an idle rank */
} df_schedule;

/**
 * Apportion and place workers (siiRL TaskScheduler.schedule_and_assign_tasks,
 * after its splitting step): subgraphs are sorted by size, largest first
 * (stable); each gets one worker and the rest are apportioned (opts->apportion);
 * subgraphs are then placed in order of (workers, size) descending (stable),
 * each worker on the machine whose lowest free rank scores best by
 * (cohesion, -load, -rank) compared lexicographically, the first machine
 * winning ties. `graphs` must outlive the schedule. opts may be NULL.
 * Errors: DF_EINVAL for nnodes or gpus_per_node < 1, or more subgraphs than
 * workers ("3 subgraphs but only 2 workers (trainer.nnodes=1 x
 * trainer.n_gpus_per_node=2)"); DF_ENOMEM.
 */
DF_API int df_schedule_create(df_task_graph *const *graphs, int n_graphs, int nnodes,
                              int gpus_per_node, const df_schedule_opts *opts, df_schedule **out);
DF_API void df_schedule_free(df_schedule *s);

/** The subgraph rank runs, or NULL when idle or out of range. */
DF_API df_task_graph *df_schedule_graph_of(const df_schedule *s, int rank);

/**
 * The ranks running subgraph `graph` (ascending), malloc'd into *ranks
 * (NULL when none). Errors: DF_EINVAL for an index out of range, DF_ENOMEM.
 */
DF_API int df_schedule_ranks_of(const df_schedule *s, int graph, int **ranks, int *n);

/* ======================================================================
 * ProcessGroupManager (siiRL process_group_manager.py)
 * ====================================================================== */

typedef struct df_process_groups df_process_groups;

/**
 * Process groups for a schedule (siiRL ProcessGroupManager): for every node of
 * a relevant type in an assigned subgraph, the ranks running it (the union over
 * the subgraphs holding a node with that id, ascending); one group per distinct
 * rank list, named "process_group_<i>" with i = 1.. in lexicographic order of
 * the rank lists (Python tuple order). type_mask is a bit set of
 * (1u << df_node_type); 0 means siiRL's default, MODEL_INFERENCE and
 * MODEL_TRAIN. Errors: DF_ENOMEM.
 */
DF_API int df_process_groups_create(const df_schedule *s, unsigned type_mask,
                                    df_process_groups **out);
DF_API void df_process_groups_free(df_process_groups *pg);

/** Number of groups; group i's name and its ranks (ascending, borrowed). */
DF_API int df_process_groups_count(const df_process_groups *pg);
DF_API const char *df_process_groups_name(const df_process_groups *pg, int i);
DF_API const int *df_process_groups_ranks(const df_process_groups *pg, int i, int *n);

/** Ranks of a group by name (siiRL get_group_spec); NULL when unknown. */
DF_API const int *df_process_groups_find(const df_process_groups *pg, const char *name, int *n);

/** Number of nodes with a group; node i's id (node ids in strcmp order). */
DF_API int df_process_groups_num_nodes(const df_process_groups *pg);
DF_API const char *df_process_groups_node_at(const df_process_groups *pg, int i);

/** Group name of a node (siiRL get_node_assignment), NULL when it has none. */
DF_API const char *df_process_groups_node_group(const df_process_groups *pg, const char *node_id);

/* ======================================================================
 * Planning from a config (distflow plan; the DAG worker's pipeline choice)
 * ====================================================================== */

/**
 * The built-in pipeline for a train config, as siiRL's main_dag picks it:
 * algorithm.workflow_type "dapo" -> "dapo", "embodied" (or "embodied_srpo") -> "embodied_srpo",
 * "default" -> "ppo" when algorithm.adv_estimator is "gae", else "grpo"
 * (workflow_type compared case-insensitively). *name is a static string.
 * Errors: DF_EINVAL naming the key's file:line and the value.
 */
DF_API int df_pipeline_select(const df_config *c, const char **name);

/**
 * The task graph a train config runs (the DAG worker and `distflow plan` both
 * use this): the workflow file of dag.workflow_path (df_workflow_load_ex,
 * `~` expanded, warnings to `warn`, which may be NULL), else the factory of
 * dag.custom_pipeline_fn (df_pipeline_from_plugin), else the built-in of
 * df_pipeline_select. *name is "workflow", "custom" or the built-in's name.
 * The graph is checked with df_task_graph_check_models; executable refs are
 * not resolved. With algorithm.use_kl_in_reward the advantage node must come
 * after the old-log-prob and reference nodes (the penalty needs both): a
 * built-in takes verl's order (rollout -> reward -> [dynamic_sampling /
 * compute_value] -> actor_old_log_prob -> reference_log_prob ->
 * calculate_advantages -> actor_train ...); a workflow file or custom
 * pipeline without it is refused (DF_EINVAL naming the file and the node).
 * Errors: those of the source, prefixed with the key's file:line for the
 * first two, or of the checks.
 */
DF_API int df_pipeline_from_config(const df_config *c, df_warn_fn warn, void *user,
                                   const char **name, df_task_graph **out);

/**
 * Check that the role of every MODEL_TRAIN / MODEL_INFERENCE node has a model
 * in the config (siiRL builds one model worker per role): ACTOR, ROLLOUT and
 * REFERENCE use actor_rollout_ref.model.path, CRITIC critic.model.path, REWARD
 * reward_model.model.path with reward_model.enable=true; other roles have
 * none. df_pipeline_from_config runs it on the graph it returns.
 * Errors: DF_EINVAL naming the node, its type and role, and the key.
 */
DF_API int df_task_graph_check_models(df_task_graph *g, const df_config *c);

/** A whole plan: the pipeline, its subgraphs, the schedule, the groups. */
typedef struct df_plan {
    const char *pipeline;       /**< built-in name ("grpo", ...), "workflow" or "custom" */
    df_task_graph *graph;       /**< the resolved pipeline (owned) */
    df_task_graph **subgraphs;  /**< [n_subgraphs] owned */
    int n_subgraphs;
    df_schedule *schedule;
    df_process_groups *groups;
    int rollout_ranks;          /**< actor_rollout_ref.rollout.mode=async: the rollout side's ranks,
                                     the job's last ones (the schedule covers the others); 0: sync */
    int n_agent_groups;         /**< agent groups of the graph (df_task_graph_agent_groups): 1, or
                                     more for a multi-agent (siiRL MARFT) workflow */
} df_plan;

/**
 * Plan a train config: df_pipeline_from_config, split, schedule over
 * trainer.nnodes x trainer.n_gpus_per_node (param_aware; a model node's size
 * is its `model_params` config as in siiRL, else the parameter count of its
 * role's model from that directory's config.json, 0 when unreadable), process
 * groups with the default types, the agent groups (df_task_graph_agent_groups).
 * Reads config.json files only: no weights, no data. Workflow-file warnings go
 * to `warn` (may be NULL). Errors: those of the steps, wrapped with "planning".
 */
DF_API int df_plan_create(const df_config *c, df_warn_fn warn, void *user, df_plan **out);
DF_API void df_plan_free(df_plan *p);

/**
 * Human-readable plan (the text of `distflow plan`): the pipeline
 * (df_task_graph_print), each subgraph's node ids, the rank -> subgraph
 * assignment and the process groups; for a multi-agent graph then each agent
 * group: the roles it has models for, the checkpoint directory siiRL saves its
 * actor in (actor_agent_<g>), and each of its nodes with its process group
 * (or the group whose instance it shares). Errors: DF_EIO, DF_ENOMEM.
 */
DF_API int df_plan_print(const df_plan *p, FILE *f);

/**
 * Graphviz DOT text of a plan, malloc'd into *out: one cluster per subgraph,
 * labelled with its id and ranks; nodes "<subgraph index>:<node id>" labelled
 * with id, type and role; edges dependency -> dependent. Errors: DF_ENOMEM.
 */
DF_API int df_plan_dot(const df_plan *p, char **out);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_SCHEDULER_H */
