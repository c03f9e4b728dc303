/*
 * distflow/dag.h — the DAG layer (docs/architecture.md, docs/conventions.md §3): nodes, task graphs, the
 * pipeline builder, built-in pipelines, the executable registry and a small
 * executor. It mirrors siiRL's siirl/execution/dag/{node.py, task_graph.py,
 * pipeline.py, builtin_pipelines.py}: an RL algorithm is a DAG of nodes, each
 * naming the function that runs it; every worker walks its own task graph.
 *
 * Ownership: a task graph owns its nodes; a node owns its strings. Arrays of
 * node pointers returned by queries are malloc'd (free the array, not the
 * nodes); they stay valid until the graph is changed or freed.
 * All fallible functions return 0 or a DF_E* status and set df_last_error().
 */
#ifndef DISTFLOW_DAG_H
#define DISTFLOW_DAG_H

#include "distflow/batch.h"
#include "distflow/common.h"
#include "distflow/metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * Enums (siiRL NodeType / NodeRole / NodeStatus; names are siiRL's spellings)
 * ====================================================================== */

typedef enum df_node_type {
    DF_NODE_COMPUTE = 0,     /**< "COMPUTE": general computing task */
    DF_NODE_DATA_LOAD,       /**< "DATA_LOAD": load data from the DataLoader */
    DF_NODE_ENV_INTERACT,    /**< "ENV_INTERACT": interact with an environment */
    DF_NODE_MODEL_INFERENCE, /**< "MODEL_INFERENCE": model inference (rollout) */
    DF_NODE_MODEL_TRAIN,     /**< "MODEL_TRAIN": model training or forward-only passes */
    DF_NODE_PUT_TO_BUFFER,   /**< "PUT_TO_BUFFER": put data into the distributed buffer */
    DF_NODE_GET_FROM_BUFFER, /**< "GET_FROM_BUFFER": get data from the distributed buffer */
    DF_NODE_BARRIER_SYNC,    /**< "BARRIER_SYNC": global synchronisation point */
    DF_NODE_CUSTOM,          /**< "CUSTOM": user-defined, run through its executable */
    DF_NODE_TYPE_COUNT
} df_node_type;

typedef enum df_node_role {
    DF_ROLE_DEFAULT = 0,      /**< "DEFAULT" */
    DF_ROLE_ACTOR,            /**< "ACTOR" */
    DF_ROLE_ADVANTAGE,        /**< "ADVANTAGE" */
    DF_ROLE_CRITIC,           /**< "CRITIC" */
    DF_ROLE_ROLLOUT,          /**< "ROLLOUT" */
    DF_ROLE_REFERENCE,        /**< "REFERENCE" */
    DF_ROLE_REWARD,           /**< "REWARD" */
    DF_ROLE_DYNAMIC_SAMPLING, /**< "DYNAMIC_SAMPLING": dynamic sampling in the data buffer */
    DF_ROLE_DATA_REBALANCE,   /**< "DATA_REBALANCE": redistribute samples across workers
                                   (newer siiRL, e.g. its workflow_embodied_srpo.yaml) */
    DF_ROLE_POSTPROCESS_SAMPLING, /**< "POSTPROCESS_SAMPLING": after DAPO's dynamic sampling
                                       (siiRL's workflow_dapo.yaml) */
    DF_NODE_ROLE_COUNT
} df_node_role;

typedef enum df_node_status {
    DF_STATUS_PENDING = 0, /**< "PENDING": waiting for dependencies */
    DF_STATUS_READY,       /**< "READY": dependencies done, about to run */
    DF_STATUS_RUNNING,     /**< "RUNNING" */
    DF_STATUS_COMPLETED,   /**< "COMPLETED" */
    DF_STATUS_FAILED,      /**< "FAILED" */
    DF_STATUS_SKIPPED,     /**< "SKIPPED": not run (no executable, or an earlier node failed) */
    DF_NODE_STATUS_COUNT
} df_node_status;

/** siiRL spelling of an enum value ("MODEL_TRAIN", "ACTOR", "PENDING"); "UNKNOWN" if out of range. */
DF_API const char *df_node_type_name(df_node_type t);
DF_API const char *df_node_role_name(df_node_role r);
DF_API const char *df_node_status_name(df_node_status s);

/**
 * Parse a siiRL spelling, case-insensitively (siiRL does NodeType[s.upper()]).
 * Unknown -> DF_EINVAL naming the string and listing the valid ones.
 */
DF_API int df_node_type_parse(const char *s, df_node_type *out);
DF_API int df_node_role_parse(const char *s, df_node_role *out);
DF_API int df_node_status_parse(const char *s, df_node_status *out);

/* ======================================================================
 * Node functions
 * ====================================================================== */

typedef struct df_node df_node;

/** What a node function sees. The executor copies a template and sets `node`. */
typedef struct df_task_graph df_task_graph;
typedef struct df_run_opts df_run_opts;

typedef struct df_node_ctx {
    void *worker;        /**< the df_dag_worker running the graph (opaque here) */
    const df_node *node; /**< the node being run (its config holds per-node overrides) */
    int64_t step;        /**< global training step */
    df_metrics *metrics; /**< step metrics to add to (may be NULL) */
    void *user;          /**< free for the caller */
    /* set by df_task_graph_run, for df_node_rerun_upstream: */
    df_task_graph *graph;      /**< the graph being run, or NULL */
    const df_run_opts *opts;   /**< its run options, or NULL */
    int pass;                  /**< 0 for the step's pass; k for the k-th re-run of this
                                    node's upstream (df_node_rerun_upstream): generation
                                    nodes draw a fresh random stream per pass */
    unsigned flags;            /**< DF_PASS_* bits of this pass (0 for the step's pass) */
    const df_batch *input;     /**< a copy of the batch this pass started from (the step's
                                    prompts, or a re-run's new prompts), owned by the executor;
                                    NULL when the pass started with none or the run has no
                                    df_run_opts.copy_batch */
} df_node_ctx;

/** How a pass over (part of) the graph differs from the step's pass (df_node_ctx.flags). */
enum {
    /** Generation nodes decode greedily and make one response per prompt (verl's
     *  do_sample=False): the pass that gives ReMax its baseline. */
    DF_PASS_GREEDY = 1u << 0,
};

/** A node's result: set `batch` to hand a new batch downstream (else NULL). */
typedef struct df_node_output {
    df_batch *batch;
} df_node_output;

/**
 * The one signature of every node function (siiRL DAGWorker methods such as
 * generate / compute_reward / train_actor). A node either edits `batch` in
 * place or builds a new batch and stores it in out->batch; the new batch then
 * replaces `batch` for the nodes downstream. Return 0, DF_ERETRY for a failure
 * that may succeed if run again, or another DF_E* code (with df_error()).
 * `batch` may be NULL for the first node of a graph (e.g. a DATA_LOAD node).
 */
typedef int (*df_node_fn)(df_node_ctx *ctx, df_batch *batch, df_node_output *out);

/* ======================================================================
 * df_node (siiRL Node)
 * ====================================================================== */

/**
 * siiRL's per-node `agent_options` (AgentArguments, siirl/params/model_args.py): one agent's
 * settings in a multi-agent (MARFT) workflow, as the file gives them (docs/multi_agent.md says
 * what distflow does with each). Owned by its node; strings NUL-terminated.
 */
typedef struct df_agent_options {
    int64_t train_cycle;   /**< > 0: the node runs only in steps s with (s / train_cycle) mod
                                (number of agent groups) == its agent_group, so the agents train in
                                turns (siiRL DAGWorker's node loop; df_marft_node_runs); 0: always */
    int share_instance;    /**< >= 0: the node uses the model instance of this agent group (siiRL:
                                critic_2_* on agent 0's critic); -1: its own */
    bool obs_with_env;     /**< the agent's turn reads the environment's observation (siiRL
                                MultiAgentLoop); an env_path node also steps the environment */
    bool rewards_with_env; /**< siiRL reads the rollout-wide key (actor_rollout_ref.rollout.agent.
                                rewards_with_env), not this; kept as written */
    char *process_path;    /**< siiRL: a Python file with pre_process / post_process, or NULL;
                                distflow's counterpart is df_marft_chain (distflow/marft.h) */
    char **env_path;       /**< [n_env_path] siiRL: "file.py:Class" environments */
    int n_env_path;
    char **pre_kwargs;     /**< [2 * n_pre_kwargs]: key, value, ... of pre_process_kwargs (values: scalars as written) */
    int n_pre_kwargs;
    char **post_kwargs;    /**< [2 * n_post_kwargs]: the same for post_process_kwargs */
    int n_post_kwargs;
} df_agent_options;

/** Value of `key` in o's pre_process_kwargs (post false) or post_process_kwargs, or NULL. */
DF_API const char *df_agent_options_kwarg(const df_agent_options *o, bool post, const char *key);

/**
 * A node. Read the fields directly; change them through the functions below
 * (which own the strings), except status / retries_done / fn / retry_limit /
 * agent_group / only_forward_compute, which callers may set.
 */
struct df_node {
    char *node_id;             /**< unique within a graph, non-empty */
    df_node_type node_type;
    df_node_role node_role;    /**< DEFAULT unless type is COMPUTE / MODEL_TRAIN / MODEL_INFERENCE */
    bool only_forward_compute; /**< e.g. actor_old_log_prob: forward pass only */
    int agent_group;           /**< multi-agent group id (0 for single agent) */
    char **dependencies;       /**< [n_dependencies] ids of upstream nodes, in declared order */
    int n_dependencies;
    char **config_keys;        /**< [n_config] per-node overrides: key -> value strings */
    char **config_values;
    int n_config;
    char *executable_ref;      /**< e.g. "DAGWorker.generate", or NULL */
    df_node_fn fn;             /**< resolved function (df_task_graph_resolve), or NULL */
    int retry_limit;           /**< extra attempts after a DF_ERETRY failure (default 0) */
    int retries_done;          /**< retries used in the current run (attempts - 1) */
    df_node_status status;
    df_agent_options *agent_options; /**< siiRL's agent_options of a workflow node, or NULL (last:
                                          a plugin built before it reads the fields above) */
};

/**
 * New node with no dependencies, status PENDING. As in siiRL's Node, only
 * COMPUTE, MODEL_TRAIN and MODEL_INFERENCE nodes may have a role other than
 * DEFAULT. Errors: DF_EINVAL (empty id, enum out of range, role on a non-model
 * type — the message names the node), DF_ENOMEM.
 */
DF_API int df_node_new(const char *node_id, df_node_type type, df_node_role role,
                       df_node **out);
DF_API void df_node_free(df_node *node);
/** Deep copy, including fn, status and retries_done (siiRL Node.copy). */
DF_API int df_node_copy(const df_node *node, df_node **out);
/** Add an upstream dependency (no-op if already present). DF_EINVAL for an empty id. */
DF_API int df_node_add_dependency(df_node *node, const char *dep_id);
/** Remove a dependency; no-op if absent. */
DF_API void df_node_remove_dependency(df_node *node, const char *dep_id);
/** Set (or replace) a config entry; both strings are copied. */
DF_API int df_node_set_config(df_node *node, const char *key, const char *value);
/** Config value for key, or NULL when absent. */
DF_API const char *df_node_get_config(const df_node *node, const char *key);
/** Set the executable ref (copied; NULL clears) and forget any resolved fn. */
DF_API int df_node_set_executable_ref(df_node *node, const char *ref);

/* ======================================================================
 * df_task_graph (siiRL TaskGraph): nodes + adj (node -> dependents) +
 * rev_adj (node -> dependencies), rebuilt from the nodes' dependency lists
 * whenever a query needs them, so editing a node's dependencies is safe.
 * ====================================================================== */

/** Empty graph. DF_EINVAL for a NULL/empty id, DF_ENOMEM. */
DF_API int df_task_graph_new(const char *graph_id, df_task_graph **out);
DF_API void df_task_graph_free(df_task_graph *g);
DF_API const char *df_task_graph_id(const df_task_graph *g);
DF_API int df_task_graph_num_nodes(const df_task_graph *g);
/** i-th node in insertion order (0 <= i < num_nodes), else NULL. */
DF_API df_node *df_task_graph_node_at(const df_task_graph *g, int i);
/** Node by id, or NULL. */
DF_API df_node *df_task_graph_get_node(const df_task_graph *g, const char *node_id);

/**
 * Add a node; the graph takes ownership in every case (on error the node is
 * freed). Dependencies may name nodes added later (checked by validate).
 * Errors: DF_EINVAL for a duplicate id (naming it and the graph), DF_ENOMEM.
 */
DF_API int df_task_graph_add_node(df_task_graph *g, df_node *node);

/**
 * Remove and free a node, and drop it from the dependency lists of the nodes
 * that depended on it (they become entry nodes if it was their only input).
 * DF_ENOTFOUND naming the id if absent.
 */
DF_API int df_task_graph_remove_node(df_task_graph *g, const char *node_id);

/**
 * Check the graph (siiRL validate_graph): every node id unique and non-empty;
 * every dependency exists ("task graph 'g': node 'b' depends on 'x', which is
 * not in the graph"); no cycle ("... dependency cycle: a -> b -> c -> a", an
 * arrow meaning "feeds"). Errors: DF_EINVAL, DF_ENOMEM.
 */
DF_API int df_task_graph_validate(df_task_graph *g);

/**
 * Topological order by Kahn's algorithm; among nodes that are ready at the
 * same time the one added first comes first, so the order is deterministic.
 * *order receives a malloc'd array of *n node pointers.
 * Errors: as df_task_graph_validate.
 */
DF_API int df_task_graph_topo_order(df_task_graph *g, df_node ***order, int *n);

/**
 * up[i] = true for every node i (df_task_graph_node_at order) that `node` depends on, directly
 * or through others; false elsewhere and for node itself. up has df_task_graph_num_nodes
 * entries. Errors: DF_EINVAL when node is not in g; DF_ENOMEM.
 */
DF_API int df_task_graph_ancestors(const df_task_graph *g, const df_node *node, bool *up);

/** Nodes without dependencies, in insertion order (malloc'd array in *out). */
DF_API int df_task_graph_entry_nodes(df_task_graph *g, df_node ***out, int *n);
/** Nodes nothing depends on, in insertion order. */
DF_API int df_task_graph_exit_nodes(df_task_graph *g, df_node ***out, int *n);
/** Direct dependents of node_id (siiRL get_downstream_nodes), in insertion order.
 *  DF_ENOTFOUND for an unknown id. */
DF_API int df_task_graph_downstream_nodes(df_task_graph *g, const char *node_id,
                                          df_node ***out, int *n);
/** Direct dependencies of node_id that exist in the graph, in declared order. */
DF_API int df_task_graph_upstream_nodes(df_task_graph *g, const char *node_id, df_node ***out,
                                        int *n);
/** Nodes with the given role, in insertion order (siiRL get_nodes_by_role). */
DF_API int df_task_graph_nodes_by_role(df_task_graph *g, df_node_role role, df_node ***out,
                                       int *n);

/**
 * The agent groups of a multi-agent (siiRL MARFT) graph: *n_groups = 1 + the largest node
 * agent_group (1 for a single-agent graph), after checking what siiRL's DAG worker assumes
 * (it indexes its agents 0 .. n-1 and looks a shared instance up by group and role): every
 * group 0 .. n-1 has a node, and a node's agent_options.share_instance names another group
 * with a node of the same role that has its own instance. Errors (DF_EINVAL, naming the
 * graph and node): a group without nodes, a share_instance outside [0, n), naming its own
 * group, or naming a group without such a node.
 */
DF_API int df_task_graph_agent_groups(const df_task_graph *g, int *n_groups);

/** Deep copy under new_id (NULL keeps the id). */
DF_API int df_task_graph_copy(const df_task_graph *g, const char *new_id, df_task_graph **out);

/** Every node back to PENDING with retries_done 0 (siiRL reset_nodes_status). */
DF_API void df_task_graph_reset(df_task_graph *g);

/**
 * Text picture of the graph (siiRL TaskGraph.__repr__), malloc'd into *out:
 * a header line, then per node in topological order (insertion order, with
 * the validation problem in the header, when the graph is invalid):
 *   [actor_old_log_prob] MODEL_TRAIN role=ACTOR status=PENDING forward-only
 *     agent_group: 1                    (only when not 0)
 *     agent_options: train_cycle 15, share_instance 0, obs_with_env, process_path p.py,
 *                    env_path [e.py:E], pre_process_kwargs {pre_chat_template}   (when set)
 *     ref: siirl.dag_worker.dagworker:DAGWorker.compute_old_log_prob
 *     config: key=value, ...            (only when set)
 *     after: calculate_advantages       ("(entry node)" when none)
 *     before: reference_log_prob        ("(exit node)" when none)
 */
DF_API int df_task_graph_print(df_task_graph *g, char **out);

/* ======================================================================
 * Executables: name -> df_node_fn
 * ====================================================================== */

/**
 * Register (or replace) a node function under a built-in name such as
 * "DAGWorker.generate", "DAGWorker.compute_reward", "DAGWorker.compute_advantage",
 * "DAGWorker.compute_old_log_prob", "DAGWorker.compute_ref_log_prob",
 * "DAGWorker.train_actor", "DAGWorker.compute_value", "DAGWorker.train_critic",
 * "dapo.dynamic_sampling". Not thread-safe: register at start-up.
 * DF_EINVAL for an empty name or NULL fn.
 */
DF_API int df_exec_register(const char *name, df_node_fn fn);
/** Remove a registration; no-op if absent. */
DF_API void df_exec_unregister(const char *name);

/* ---- what a node function reads from its workflow node's `config:` ------------ */

#define DF_NODE_KEYS_MAX 16 /**< keys per list */
#define DF_NODE_KEY_LEN 96  /**< bytes per key, NUL included */
/**
 * The `config:` keys a node function honours, declared so that plan, config check and train
 * refuse any other key on its node before anything runs (a key no function reads would be
 * silently ignored). Plain arrays, no pointers, so that the check can read a plugin's
 * declaration from its library file without loading it; an empty string ends each list.
 *   own:    keys of the function's own, read with df_node_get_config (e.g. "target_length");
 *           they stay on the node and never touch the job's config.
 *   global: job config keys the function reads per node through its node's typed config
 *           (df_node_config; full dotted names, e.g. "actor_rollout_ref.rollout.temperature"):
 *           the node's value overrides the global one for this node only. A workflow may write
 *           them relative to the node's role branch ("rollout.temperature" on a rollout node).
 * A plugin declares them by exporting, beside node function `sym`, the object
 *     DF_API const df_node_keys sym_keys = {.own = {"target_length"}};
 * (DF_NODE_KEYS_SUFFIX); a function that declares nothing accepts no `config:` keys.
 */
typedef struct df_node_keys {
    char own[DF_NODE_KEYS_MAX][DF_NODE_KEY_LEN];
    char global[DF_NODE_KEYS_MAX][DF_NODE_KEY_LEN];
} df_node_keys;
#define DF_NODE_KEYS_SUFFIX "_keys"

/**
 * df_exec_register with the keys the function honours (keys NULL: none).
 * Errors as df_exec_register; DF_ENOMEM.
 */
DF_API int df_exec_register_keys(const char *name, df_node_fn fn, const df_node_keys *keys);

/**
 * The keys `ref`'s function honours into *out (all lists empty when it declares none): for a
 * registered name (or alias, or siiRL spelling) what its registration declared; for a plugin
 * ref "lib.so:sym" the object "sym_keys" read from the library file (df_plugin_check_object:
 * nothing is loaded). Errors: those of df_plugin_check_object for a plugin file that exports
 * "sym_keys" as something else than a df_node_keys; DF_ENOTFOUND for an unknown name.
 */
DF_API int df_exec_node_keys(const char *ref, df_node_keys *out);

/**
 * Resolve an executable ref to a function. Accepted spellings:
 *   "DAGWorker.generate"                              a registered name
 *   "siirl.dag_worker.dagworker:DAGWorker.generate"   siiRL's, = "DAGWorker.generate" (also the
 *                                                     older module "siirl.workers.dag_worker.dagworker:")
 *   "siirl.user_interface.filter_interface.dapo.dynamic_sampling"
 *                                                     siiRL's, = "dapo.dynamic_sampling"
 *   an alias: another module path siiRL's workflow files use for a function
 *             distflow has; today "dapo.dynamic_sampling",
 *             "siirl.algorithm.dapo.dynamic_sampling" and
 *             "siirl.algorithm.dapo.dapo.dynamic_sampling", all
 *             "DAGWorker.dynamic_sampling" (docs/siirl_workflows.md)
 *   "path/to/libplugin.so:symbol"                     a plugin (see "Plugins" below):
 *                                                     `symbol` from that shared library
 * Registered names win over aliases, aliases over plugin refs. A ref counts as
 * a plugin ref when the part before its last ':' ends in ".so" or contains a '/'.
 * Errors: DF_EUNSUPPORTED for a siiRL function distflow knows and lacks (e.g.
 * "siirl.algorithm.embodied.embodied_local_rank_sampling"), saying why;
 * DF_ENOTFOUND for any other unknown name; both messages hold the ref, the
 * closest registered name (df_fn_registry_closest: by the function's own
 * name, after the last '.' or ':') and, for DF_ENOTFOUND, every registered
 * name. DF_EINVAL for NULL / ""; plugin errors as df_plugin_symbol.
 */
DF_API int df_exec_resolve(const char *ref, df_node_fn *fn);

/**
 * The registered function `ref` names (a name, an alias or a siiRL spelling,
 * as df_exec_resolve), never loading a plugin. Errors: DF_ENOTFOUND for
 * anything else, plugin refs included.
 */
DF_API int df_exec_find(const char *ref, df_node_fn *fn);

/**
 * What df_exec_resolve would decide about `ref`, without loading anything: a
 * registered name, alias or siiRL spelling is accepted; a plugin ref is
 * checked by df_plugin_check (the library's file is read, not loaded, so no
 * plugin code runs). A name that only a plugin's df_plugin_init registers is
 * known only once that plugin is loaded: name such a function by its plugin
 * ref instead. Errors: those of df_exec_resolve / df_plugin_check.
 */
DF_API int df_exec_check(const char *ref);

/**
 * Resolve the executable_ref of every node whose fn is not yet set. Nodes
 * without a ref are left alone (the executor skips them). Errors: the first
 * failure, naming the node and its ref.
 */
DF_API int df_task_graph_resolve(df_task_graph *g);

/* ======================================================================
 * Plugins: node functions and pipelines from shared libraries (the C
 * counterpart of siiRL's importlib refs "module:function").
 *
 * A plugin is a shared library built against include/distflow/ that leaves
 * the df_* symbols it uses undefined: the host provides them (the `distflow`
 * CLI exports its public symbols; a program embedding libdistflow.so gets
 * them from there). A plugin must export
 *     const int df_plugin_abi_version = DF_PLUGIN_ABI_VERSION;
 * (write `DF_PLUGIN_DECLARE_ABI;` once), and may export
 *     int df_plugin_init(void);
 * which is called once, right after loading, e.g. to df_exec_register() more
 * names; a non-zero return fails the load. Functions named in refs must be
 * exported (default visibility; DF_API marks them so).
 *
 * Loading is not thread-safe: resolve at start-up, like registration.
 * ====================================================================== */

/** Version of the plugin ABI (df_node_ctx, df_node_output, df_node_fn,
 *  df_pipeline_fn layouts); bumped on any incompatible change. */
#define DF_PLUGIN_ABI_VERSION 1

/** Defines the ABI marker a plugin must export; use once per plugin. */
#define DF_PLUGIN_DECLARE_ABI DF_API const int df_plugin_abi_version = DF_PLUGIN_ABI_VERSION

/** Optional plugin entry point `df_plugin_init`: 0 or a DF_E* code (with df_error()). */
typedef int (*df_plugin_init_fn)(void);

/**
 * A pipeline factory (siiRL dag.custom_pipeline_fn, a function returning a
 * Pipeline): build a task graph into *out (caller frees it) and return 0, or
 * return a DF_E* code with df_error().
 */
typedef int (*df_pipeline_fn)(df_task_graph **out);

/**
 * Resolve "path/to/libx.so:symbol" to the address of `symbol` (a function,
 * cast it to its type). The path is relative to the current directory or
 * absolute, with a leading "~/" expanded; the symbol is after the last ':'.
 * The library is loaded once (dlopen RTLD_NOW | RTLD_LOCAL, cached by its
 * real path) after its file passed df_plugin_check's checks (so a library of
 * another ABI is refused before its constructors run), its
 * df_plugin_abi_version checked again in memory and its df_plugin_init run.
 * Errors, each naming the file and the symbol:
 *   DF_EINVAL      ref without ':' / empty path or symbol; file not loadable
 *                  ("cannot load: " + df_plugin_check's reason or the dlerror
 *                  text, e.g. an undefined symbol); missing
 *                  df_plugin_abi_version; df_plugin_init failed (its message)
 *   DF_ENOTFOUND   file missing; symbol not exported
 *   DF_EUNSUPPORTED df_plugin_abi_version differs from DF_PLUGIN_ABI_VERSION
 *                  (both numbers in the message)
 */
DF_API int df_plugin_symbol(const char *ref, void (**fn)(void));

/**
 * Check a plugin ref "path/to/libx.so:symbol" without executing any of the
 * library's code (dlopen would run its ELF constructors, and loading runs
 * df_plugin_init): the library's file is read as data with libelf. Checks,
 * in order: the ref's form; the file exists; it is an ELF shared object of
 * this program's class, byte order and machine; its dynamic symbol table
 * exports df_plugin_abi_version, an int whose value in the file equals
 * DF_PLUGIN_ABI_VERSION; every undefined df_* symbol it needs is exported by
 * this program (what dlopen would fail on); `symbol` is an exported function.
 * df_plugin_symbol runs the same checks (but the symbol's) before it loads a
 * file. Limits: a library whose section headers were stripped (sstrip) is
 * refused; non-df_* undefined symbols are left to the loader.
 * Errors, each "plugin '<real path>' (ref '<ref>'): ...", with the codes of
 * df_plugin_symbol: DF_EINVAL (form, "cannot load: not an ELF file" / not a
 * shared object / another machine / "undefined symbol: df_x", missing marker,
 * symbol not a function), DF_ENOTFOUND (no file, symbol not exported),
 * DF_EUNSUPPORTED (ABI mismatch, both numbers), DF_EIO (unreadable).
 */
DF_API int df_plugin_check(const char *ref);

/**
 * df_plugin_check for a data object: `symbol` must be an exported object of
 * exactly `size` bytes; its bytes as stored in the file are copied to `bytes`
 * [size]. Constants read as written; pointers in the object hold what the
 * loader would relocate (typically 0), so only its plain fields mean anything.
 * No code of the library runs. Errors: those of df_plugin_check, and
 * DF_EINVAL when the symbol is not a data object of that size (or size is 0).
 */
DF_API int df_plugin_check_object(const char *ref, size_t size, void *bytes);

/**
 * Register an algorithm a plugin declares as an exported descriptor object
 * (distflow/algo_desc.h), under the name `ref` ("path/to/libx.so:symbol"),
 * so that algorithm.adv_estimator / actor.policy_loss.loss_mode may name it:
 *     DF_API const df_adv_estimator_desc my_estimator = {.fn = my_fn,
 *         .needs = DF_ADV_NEEDS_GROUPS, .summary = "..."};
 * load false (plan, config check): the descriptor is read from the file
 * (df_plugin_check_object; no plugin code runs) and registered with its needs
 * and flags and a function that refuses to run, so that validation asks the
 * same descriptor train will use; load true (train): the library is loaded
 * and its descriptor registered (replacing a checked one). The descriptor's
 * name is ignored (the ref is the name); its policy_loss (estimators) must be
 * NULL, and is checked when loading. Errors: those of df_plugin_check_object /
 * df_plugin_symbol, of the registration (unknown bits, NULL fn), DF_EINVAL
 * for a policy_loss. A `ref` that is not a plugin ref (a registry name, or
 * NULL) is left alone: DF_OK. Start-up only (not thread-safe).
 */
DF_API int df_plugin_adv_estimator(const char *ref, bool load);
/** The same for a df_policy_loss_desc (its loss_agg_mode is read only when loading). */
DF_API int df_plugin_policy_loss(const char *ref, bool load);

/**
 * Load the tool class a plugin exports as `const df_tool symbol = {...}` (distflow/agent.h) and
 * register it under its ref "path/to/libx.so:symbol" (the descriptor's name is ignored), so that a
 * tool config's class_name can name it: pass this function as df_tool_set_load's loader. What it
 * registers is removed when the plugin is unloaded. Errors: those of df_plugin_check_object /
 * df_plugin_symbol, of df_tool_class_register (no create / execute), DF_EINVAL for a ref that is not
 * a plugin ref. Start-up only (not thread-safe).
 */
DF_API int df_plugin_tool(const char *ref);
/** The same for an interaction class (`const df_interaction symbol`; df_interaction_set_load). */
DF_API int df_plugin_interaction(const char *ref);
/** The same for an environment class (`const df_env symbol`, distflow/env.h; df_env_spec_load's
    loader for dag.environment_path). */
DF_API int df_plugin_env(const char *ref);

/**
 * Build a task graph from a plugin pipeline factory (dag.custom_pipeline_fn):
 * resolve ref as df_plugin_symbol, call it, and validate the graph it returns
 * (refs are not resolved). Errors: as df_plugin_symbol; the factory's code
 * wrapped as "custom pipeline 'ref': ..."; DF_EINVAL if it returned 0 but no
 * graph, or an invalid graph.
 */
DF_API int df_pipeline_from_plugin(const char *ref, df_task_graph **out);

/** Number of plugin libraries currently loaded. */
DF_API int df_plugin_count(void);

/**
 * Unregister the names plugins registered in df_plugin_init, dlclose every
 * plugin and free the cache. Also runs at exit. Function pointers resolved
 * from plugins (node->fn) dangle afterwards: free or re-resolve such graphs.
 * A name a plugin registered is removed, not restored to what it shadowed.
 */
DF_API void df_exec_unload_plugins(void);

/* ======================================================================
 * Pipeline builder (siiRL Pipeline)
 * ====================================================================== */

typedef struct df_pipeline df_pipeline;

/** Everything df_pipeline_add takes; zero-initialise and set what you need. */
typedef struct df_node_spec {
    const char *node_id;
    const char *func_ref;     /**< executable ref (may be NULL when fn is given) */
    df_node_fn fn;            /**< direct function (siiRL's Callable), or NULL */
    const char *const *deps;  /**< [n_deps] upstream node ids */
    int n_deps;
    df_node_type node_type;   /**< siiRL's default: COMPUTE */
    df_node_role node_role;   /**< siiRL's default: DEFAULT */
    bool only_forward_compute;
    int agent_group;
    int retry_limit;
} df_node_spec;

/** New builder; id and description are copied. NULL on allocation failure or a NULL/empty id. */
DF_API df_pipeline *df_pipeline_new(const char *pipeline_id, const char *description);
DF_API void df_pipeline_free(df_pipeline *p);
DF_API const char *df_pipeline_description(const df_pipeline *p);

/**
 * Add a node (siiRL Pipeline.add_node). Returns its status, and the first
 * error is also kept and returned again by df_pipeline_build, so a chain of
 * adds can be checked once. Errors: DF_EINVAL for an empty or duplicate id
 * ("node 'x' already exists in pipeline 'p'"), a role on a non-model node,
 * NULL deps with n_deps > 0; DF_ENOMEM.
 */
DF_API int df_pipeline_add(df_pipeline *p, const df_node_spec *spec);

/** Shorthand for df_pipeline_add with func_ref, deps, type, role, only_forward_compute. */
DF_API int df_pipeline_add_node(df_pipeline *p, const char *node_id, const char *func_ref,
                                const char *const *deps, int n_deps, df_node_type type,
                                df_node_role role, bool only_forward_compute);

/**
 * Build and validate the task graph (graph id = pipeline id). Executable refs
 * are not resolved here (see df_task_graph_resolve): the worker registers its
 * functions after plans are made. Errors: the first df_pipeline_add error,
 * or "invalid pipeline 'p': <validation error>".
 */
DF_API int df_pipeline_build(df_pipeline *p, df_task_graph **out);

/**
 * A built-in pipeline (siiRL builtin_pipelines.py), with siiRL's node ids,
 * executable refs (siiRL spelling), types, roles, only_forward_compute and
 * dependencies:
 *   "grpo"      grpo_training_pipeline: rollout_actor -> function_reward ->
 *               calculate_advantages -> actor_old_log_prob -> reference_log_prob -> actor_train
 *   "ppo"       ppo_training_pipeline: as grpo with compute_value (CRITIC, forward only)
 *               before calculate_advantages and critic_train after actor_train
 *   "dapo"      dapo_training_pipeline: as grpo with dynamic_sampling
 *               (DYNAMIC_SAMPLING) after function_reward
 *   "embodied_srpo" (alias "embodied") embodied_grpo_training_pipeline (siiRL
 *               embodied_grpo_pipeline)
 * Unknown name -> DF_ENOTFOUND listing the known ones.
 */
DF_API int df_builtin_pipeline(const char *name, df_task_graph **out);

/* ======================================================================
 * Workflow files (siiRL DAGConfigLoader, siirl/execution/dag/config_loader.py)
 * ====================================================================== */

/**
 * Load a task graph from a workflow YAML file in siiRL's format:
 *
 *   dag_id: grpo_training_pipeline          # required; becomes the graph id
 *   description: ...                        # optional, not kept
 *   global_config: {...}                    # optional; target of `!Ref global_config.a.b`
 *   nodes:                                  # required list
 *     - node_id: rollout_actor              # required, unique
 *       node_type: MODEL_INFERENCE          # required; NodeType name, any case
 *       node_role: ROLLOUT                  # default DEFAULT; NodeRole name, any case
 *       dependencies: [other_node]          # default []; ids of nodes in the file
 *       executable_ref: siirl.dag_worker.dagworker:DAGWorker.generate   # or `func:`
 *       only_forward_compute: false         # default false
 *       agent_group: 0                      # default 0
 *       retry_limit: 0                      # default 0 (distflow extension)
 *       config: {rollout.temperature: 0.7}  # per-node overrides, see below
 *
 * Other top-level keys are ignored (siiRL files use them to hold anchors).
 * Anchors, aliases and `<<` merge keys (a mapping or a list of mappings;
 * explicit keys win) work everywhere. `config` is flattened to dotted keys
 * (`rollout: {n: 8}` gives `rollout.n`); each value is stored as YAML text, as
 * the right-hand side of a command-line override would be: plain scalars
 * verbatim, quoted ones double-quoted, lists in flow style, empty as "null";
 * `!Ref global_config.x.y` values are replaced by what they name.
 * Executable refs are not resolved here (df_task_graph_resolve does that).
 *       agent_options: {train_cycle: 15, share_instance: 0, obs_with_env: true,
 *                       process_path: p.py, env_path: [e.py:E],
 *                       pre_process_kwargs: {k: v}, post_process_kwargs: {k: v}}
 *                                           # siiRL's MARFT options, into node->agent_options
 * Unknown per-node options, and unknown agent_options (or siiRL's rollout-wide
 * agent_name / num_workers / custom_async_server there), are not errors: each
 * produces a warning through `warn` (NULL: dropped).
 *
 * Errors (DF_EINVAL unless noted), each "<file>:<line>: node '<id>': ..." when
 * about a node: YAML syntax ("<file>:<line>:<col>: ..."), empty file, missing
 * dag_id / nodes, an entry that is not a mapping or has no node_id ("node #3"),
 * duplicate node id, missing or unknown node_type, unknown node_role, a role on
 * a non-model node type, wrong value types (bool, non-negative int, list,
 * mapping), agent_options of the wrong types (kwargs values must be scalars),
 * a dependency not in the file, an unresolved !Ref; a cycle or other
 * validation failure is "<file>: task graph '<id>': ... dependency cycle: ...".
 * DF_EIO when the file cannot be read, DF_ENOMEM. The graph is validated.
 */
DF_API int df_workflow_load_ex(const char *path, df_warn_fn warn, void *user,
                               df_task_graph **out);
/** df_workflow_load_ex without warnings. */
DF_API int df_workflow_load(const char *path, df_task_graph **out);
/** As df_workflow_load_ex with the YAML given as text; `name` stands for the file in messages. */
DF_API int df_workflow_load_text(const char *text, const char *name, df_warn_fn warn, void *user,
                                 df_task_graph **out);

/* ======================================================================
 * Executor
 * ====================================================================== */

/** Frees a batch the executor no longer needs (normally df_batch_free). */
typedef void (*df_batch_release_fn)(df_batch *b);

struct df_run_opts {
    /** Called on a batch replaced through out->batch (and on a batch a failing
     *  node returned). NULL: the executor frees nothing. */
    df_batch_release_fn release_batch;
    /** Copies a pass's input batch for the nodes' ctx->input (normally every row, df_batch_slice);
     *  the copy is released with release_batch when the pass ends. NULL: no ctx->input. */
    int (*copy_batch)(const df_batch *b, df_batch **out);
    /** Record each node's wall time as "timing_s/<node_id>" in ctx->metrics. */
    bool record_timing;
    /** Called by df_task_graph_run before each node runs, with the batch the
     *  node will receive: the DAG worker moves data between stages here
     *  (siiRL's put_data_to_buffers / get_data_from_buffers). It may replace
     *  *batch (freeing the old one itself). A non-zero return fails the node
     *  ("node 'id': <message>") without calling it. NULL: nothing. */
    int (*before_node)(void *user, df_node *node, df_batch **batch);
    /** Called when a pass over nodes starts with a fresh input batch: df_task_graph_run's,
     *  and each df_node_rerun_upstream (the DAG worker resets where its data lies). NULL: nothing. */
    void (*begin_pass)(void *user);
    /** Asked before each node of df_task_graph_run's pass: true skips it (status SKIPPED, the
     *  batch passes on unchanged, before_node is not called). The DAG worker skips the nodes whose
     *  agent_options.train_cycle gives the step to another agent group. NULL: nothing skipped. */
    bool (*skip_node)(void *user, const df_node *node);
    void *hook_user; /**< passed to before_node, begin_pass and skip_node */
};

/**
 * Run again, on *batch (a fresh input: more prompts, or a copy of ctx->input), the part of the
 * graph that leads to ctx->node: every ancestor of the node in the graph's topological order,
 * with the run's options (begin_pass, then before_node before each), then before_node for
 * ctx->node itself, so *batch comes back as the node would have received it. The ancestors see
 * `pass` (a caller's k-th re-run passes pass = k: generation draws a new random stream), `flags`
 * (DF_PASS_* bits, e.g. DF_PASS_GREEDY) and as ctx->input a copy of *batch, and run without step
 * metrics (the step's pass recorded them); their statuses stay those of the step's pass. This is
 * how a node re-enters the graph: DAPO's dynamic sampling refills its batch, and ReMax's baseline
 * node scores a greedy pass, through the same rollout and reward nodes (a workflow's own reward
 * node included) as the step's batch.
 * Errors: DF_EINVAL when ctx was not made by df_task_graph_run (no graph); DF_ENOMEM,
 * copy_batch's, an ancestor's error, with *batch released (opts->release_batch) and set to NULL.
 */
DF_API int df_node_rerun_upstream(const df_node_ctx *ctx, int pass, unsigned flags, df_batch **batch);

/**
 * Run one node: status RUNNING, call its function with a copy of *tmpl
 * (node set), retry while it returns DF_ERETRY and retries_done < retry_limit,
 * then COMPLETED or FAILED. A node with no fn but a ref is resolved first; a
 * node with neither is SKIPPED. When the node sets out->batch, *batch is
 * released (opts->release_batch) and replaced by it. opts may be NULL.
 * Errors: the node's code, the message wrapped as
 * "node 'id' (ref) failed[ after N attempts]: <message>".
 */
DF_API int df_node_run(df_node *node, const df_node_ctx *tmpl, df_batch **batch,
                       const df_run_opts *opts);

/**
 * Run a whole graph once: validate, reset statuses, then df_node_run in
 * topological order, each node READY just before it runs. On the first
 * failure the remaining nodes are marked SKIPPED and the error (prefixed with
 * "task graph 'g': ") is returned. *batch is the batch in and out; with
 * opts->copy_batch the nodes see a copy of the input as ctx->input.
 * Errors: as above, copy_batch's.
 */
DF_API int df_task_graph_run(df_task_graph *g, const df_node_ctx *tmpl, df_batch **batch,
                             const df_run_opts *opts);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_DAG_H */
