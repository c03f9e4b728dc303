/*
 * Workflow files in the DAG worker: dag.workflow_path selects a workflow YAML
 * instead of the built-in pipeline, nodes without an executable get siiRL's
 * default for their type and role, and each node's `config:` entries become a
 * merged config for that node (siiRL graph_updater: the node's keys over the
 * global ones), resolved once into the node's typed df_node_settings. Which
 * keys a node may override is listed in k_per_node.
 */
#include "worker/worker_internal.h"

#include "util/fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The keys each node function reads from its node's merged config. */
#define RO "actor_rollout_ref.rollout."
#define AC "actor_rollout_ref.actor."
static const struct {
    const char *exec;
    const char *keys[10];
} k_per_node[] = {
    {"DAGWorker.generate", {RO "temperature", RO "top_k", RO "top_p", RO "do_sample"}},
    {"DAGWorker.train_actor",
     {AC "clip_ratio_low", AC "clip_ratio_high", AC "clip_ratio_c", AC "entropy_coeff",
      AC "kl_loss_coef", AC "kl_loss_type", AC "loss_agg_mode", AC "policy_loss.loss_mode",
      AC "ppo_epochs"}},
    {"DAGWorker.train_critic", {"critic.cliprange_value", "critic.loss_agg_mode", "critic.ppo_epochs"}},
};
#define N_PER_NODE (sizeof k_per_node / sizeof *k_per_node)

/* siiRL's default function for a node without executable_ref (by type, role, forward-only). */
static const char *default_exec(const df_node *n)
{
    bool model = n->node_type == DF_NODE_MODEL_TRAIN || n->node_type == DF_NODE_MODEL_INFERENCE;
    bool fwd = n->only_forward_compute;
    switch (n->node_role) {
    case DF_ROLE_ROLLOUT: return model ? "DAGWorker.generate" : NULL;
    case DF_ROLE_REWARD: return "DAGWorker.compute_reward";
    case DF_ROLE_ADVANTAGE: return "DAGWorker.compute_advantage";
    case DF_ROLE_ACTOR: return fwd ? "DAGWorker.compute_old_log_prob" : "DAGWorker.train_actor";
    case DF_ROLE_REFERENCE: return "DAGWorker.compute_ref_log_prob";
    case DF_ROLE_CRITIC: return fwd ? "DAGWorker.compute_value" : "DAGWorker.train_critic";
    default: return NULL;
    }
}

/* siiRL merges a model node's config into the branch of its role: relative keys
 * (`rollout.n`) are found under it; absolute keys are taken as they are. */
static const char *role_branch(const df_node *n)
{
    if (n->node_type != DF_NODE_MODEL_TRAIN && n->node_type != DF_NODE_MODEL_INFERENCE)
        return NULL;
    switch (n->node_role) {
    case DF_ROLE_ACTOR:
    case DF_ROLE_ROLLOUT:
    case DF_ROLE_REFERENCE: return "actor_rollout_ref.";
    case DF_ROLE_CRITIC: return "critic.";
    case DF_ROLE_REWARD: return "reward_model.";
    default: return NULL;
    }
}

static char *full_key(const df_config_schema *s, const df_node *n, const char *key)
{
    const char *br = role_branch(n);
    if (br && !df_config_schema_find(s, key) && strncmp(key, br, strlen(br))) {
        size_t len = strlen(br) + strlen(key) + 1;
        char *k = malloc(len);
        if (k)
            snprintf(k, len, "%s%s", br, key);
        if (!k || df_config_schema_find(s, k))
            return k;
        free(k);
    }
    return strdup(key);
}

/* The k_per_node row of the node's function, or -1. */
static int exec_row(const df_node *n)
{
    for (size_t r = 0; r < N_PER_NODE; r++) {
        df_node_fn fn;
        if (n->fn && !df_exec_resolve(k_per_node[r].exec, &fn) && fn == n->fn)
            return (int)r;
    }
    return -1;
}

static int check_allowed(const df_node *n, const char *key, const char *where)
{
    int r = exec_row(n);
    for (int i = 0; r >= 0 && i < 10 && k_per_node[r].keys[i]; i++)
        if (!strcmp(key, k_per_node[r].keys[i]))
            return DF_OK;
    char list[600] = "";
    for (int i = 0; r >= 0 && i < 10 && k_per_node[r].keys[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 k_per_node[r].keys[i]);
    return df_error(DF_EUNSUPPORTED, "%s: %s cannot be changed per node (%s%s)", where, key,
                    r >= 0 ? "this node honours: " : "this node's function reads no per-node keys",
                    list);
}

/* Merge one node's overrides and resolve them; *set stays NULL when it has none. */
static int node_config(const df_dag_worker *w, const df_node *n, const char *path, df_node_settings **set)
{
    df_config *cfg = NULL;
    *set = NULL;
    if (!n->n_config)
        return DF_OK;
    char where[1200];
    snprintf(where, sizeof where, "%s node '%s'", path, n->node_id);
    char **keys = calloc((size_t)n->n_config, sizeof *keys);
    int rc = keys ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < n->n_config; i++) {
        keys[i] = full_key(df_config_get_schema(w->cfg), n, n->config_keys[i]);
        if (!keys[i])
            rc = df_error(DF_ENOMEM, "out of memory");
    }
    if (!rc)
        rc = df_config_with_overrides(w->cfg, (const char *const *)keys,
                                      (const char *const *)n->config_values, n->n_config, where,
                                      &cfg);
    for (int i = 0; !rc && i < n->n_config; i++)
        rc = check_allowed(n, keys[i], where);
    df_node_settings *s = rc ? NULL : calloc(1, sizeof *s);
    if (!rc && !s)
        rc = df_error(DF_ENOMEM, "out of memory");
    if (s) { /* the node's typed keys and derived loss settings, once (resolve.c) */
        s->owned = cfg;
        cfg = NULL;
        rc = df_worker_settings_init(s, s->owned);
    }
    df_policy_loss_fn pl;
    if (s && !rc && (rc = df_policy_loss_lookup(s->cfg.actor_rollout_ref.actor.policy_loss.loss_mode, &pl)))
        rc = df_error_wrap(rc, "%s", where);
    for (int i = 0; keys && i < n->n_config; i++)
        free(keys[i]);
    free(keys);
    df_config_free(cfg);
    if (rc && s) {
        df_config_free(s->owned);
        free(s);
        s = NULL;
    }
    *set = s;
    return rc;
}

void df_worker_warn(void *user, const char *msg)
{
    const df_dag_worker *w = user;
    if (w->rank == 0)
        fprintf(stderr, "[distflow] warning: %s\n", msg);
}

int df_worker_setup_workflow(df_dag_worker *w)
{
    const char *path = w->global.cfg.dag.workflow_path;
    int rc = DF_OK;
    for (int i = 0; !rc && i < df_task_graph_num_nodes(w->graph); i++) {
        df_node *n = df_task_graph_node_at(w->graph, i);
        if (!n->executable_ref && default_exec(n))
            rc = df_node_set_executable_ref(n, default_exec(n));
    }
    if (!rc)
        rc = df_task_graph_resolve(w->graph);
    int nn = rc ? 0 : df_task_graph_num_nodes(w->graph);
    if (!rc && !(w->node_set = calloc((size_t)(nn ? nn : 1), sizeof *w->node_set)))
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < nn; i++, w->n_node_set++)
        rc = node_config(w, df_task_graph_node_at(w->graph, i), path, &w->node_set[i]);
    return rc ? df_error_wrap(rc, "dag.workflow_path") : DF_OK;
}

const df_node_settings *df_worker_node_settings(const df_dag_worker *w, const df_node *n)
{
    int i = n ? df_worker_node_index(w, n) : -1;
    return i >= 0 && i < w->n_node_set && w->node_set[i] ? w->node_set[i] : &w->global;
}

void df_worker_free_node_configs(df_dag_worker *w)
{
    for (int i = 0; i < w->n_node_set; i++) {
        if (w->node_set[i])
            df_config_free(w->node_set[i]->owned);
        free(w->node_set[i]);
    }
    free(w->node_set);
    w->node_set = NULL;
    w->n_node_set = 0;
}
