/*
 * Workflow files in the DAG worker: dag.workflow_path selects a workflow YAML
 * instead of the built-in pipeline, nodes without an executable get siiRL's
 * default for their type and role, and each node's `config:` entries become a
 * merged config for that node (siiRL graph_updater: the node's keys over the
 * global ones), resolved once into the node's typed df_node_settings. Which
 * keys a node may set is what its function registered (df_exec_register_keys;
 * a plugin's `<symbol>_keys` object); df_train_check checks every node before setup.
 */
#include "workers/worker_internal.h"

#include "util/fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const df_worker_planner_node_keys[] = {"model_params", NULL};

const char *df_worker_default_exec(const df_node *n)
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

/* A key the planner reads from the node (siiRL's model_params), not a config key. */
static bool planner_key(const char *key)
{
    for (int i = 0; df_worker_planner_node_keys[i]; i++)
        if (!strcmp(key, df_worker_planner_node_keys[i]))
            return true;
    return false;
}

static bool key_in(const char (*keys)[DF_NODE_KEY_LEN], const char *key)
{
    for (int i = 0; i < DF_NODE_KEYS_MAX && keys[i][0]; i++)
        if (!strcmp(key, keys[i]))
            return true;
    return false;
}

/* "a, b, c" of a key list appended to out. */
static void key_list(const char (*keys)[DF_NODE_KEY_LEN], char *out, size_t cap)
{
    for (int i = 0; i < DF_NODE_KEYS_MAX && keys[i][0]; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? ", " : "", keys[i]);
}

/* DF_EUNSUPPORTED for a key the node's function does not read, saying which it reads. */
static int refuse_key(const df_node_keys *k, const char *key, const char *where)
{
    char list[2 * DF_NODE_KEYS_MAX * DF_NODE_KEY_LEN] = "";
    key_list(k->global, list, sizeof list);
    if (k->own[0][0]) {
        snprintf(list + strlen(list), sizeof list - strlen(list), "%sits own keys: ", list[0] ? "; " : "");
        key_list(k->own, list, sizeof list);
    }
    if (!list[0])
        return df_error(DF_EUNSUPPORTED, "%s: %s cannot be changed per node (this node's function reads no "
                        "per-node keys)", where, key);
    return df_error(DF_EUNSUPPORTED, "%s: %s cannot be changed per node (this node honours: %s)", where, key,
                    list);
}

int df_worker_node_overrides(const df_config *cfg, const df_node *n, const char *ref, const char *where,
                             df_config **out)
{
    *out = NULL;
    df_node_keys k = {0};
    int rc = ref ? df_exec_node_keys(ref, &k) : DF_OK;
    if (rc)
        return df_error_wrap(rc, "%s", where);
    int nk = 0; /* the job config's keys: not the planner's, not the function's own */
    for (int i = 0; i < n->n_config; i++)
        nk += !planner_key(n->config_keys[i]) && !key_in(k.own, n->config_keys[i]);
    if (!nk)
        return DF_OK;
    char **keys = calloc((size_t)nk, sizeof *keys);
    const char **vals = calloc((size_t)nk, sizeof *vals);
    rc = keys && vals ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int i = 0, j = 0; !rc && i < n->n_config; i++) {
        if (planner_key(n->config_keys[i]) || key_in(k.own, n->config_keys[i]))
            continue;
        vals[j] = n->config_values[i];
        keys[j] = full_key(df_config_get_schema(cfg), n, n->config_keys[i]);
        if (!keys[j])
            rc = df_error(DF_ENOMEM, "out of memory");
        else if (k.own[0][0] && !df_config_schema_find(df_config_get_schema(cfg), keys[j]))
            rc = refuse_key(&k, keys[j], where); /* likelier a misspelt key of the node's own */
        j++;
    }
    if (!rc) /* unknown keys and bad values first, with the schema's hints */
        rc = df_config_with_overrides(cfg, (const char *const *)keys, vals, nk, where, out);
    for (int i = 0; !rc && i < nk; i++)
        if (!key_in(k.global, keys[i]))
            rc = refuse_key(&k, keys[i], where);
    df_train_config t; /* a loss the node overrides must be registered (a plugin's only globally) */
    df_policy_loss_fn pl;
    if (!rc && *out && !(rc = df_train_config_resolve(*out, &t)) &&
        (rc = df_policy_loss_lookup(t.actor_rollout_ref.actor.policy_loss.loss_mode, &pl)))
        rc = df_error_wrap(rc, "%s", where);
    for (int i = 0; keys && i < nk; i++)
        free(keys[i]);
    free(keys);
    free(vals);
    if (rc) {
        df_config_free(*out);
        *out = NULL;
    }
    return rc;
}

void df_worker_warn(void *user, const char *msg)
{
    const df_dag_worker *w = user;
    if (w->rank == 0)
        fprintf(stderr, "[distflow] warning: %s\n", msg);
}

/* The node's typed settings from its overrides (resolve.c), once; *set stays NULL without overrides. */
static int node_settings(const df_dag_worker *w, const df_node *n, const char *where, df_node_settings **set)
{
    df_config *cfg = NULL;
    *set = NULL;
    int rc = df_worker_node_overrides(w->cfg, n, n->executable_ref, where, &cfg);
    if (rc || !cfg)
        return rc;
    df_node_settings *s = calloc(1, sizeof *s);
    if (!s) {
        df_config_free(cfg);
        return df_error(DF_ENOMEM, "out of memory");
    }
    s->owned = cfg;
    rc = df_worker_settings_init(s, s->owned);
    if (rc) {
        df_config_free(s->owned);
        free(s);
        return df_error_wrap(rc, "%s", where);
    }
    *set = s;
    return DF_OK;
}

int df_worker_setup_workflow(df_dag_worker *w)
{
    const char *path = w->global.cfg.dag.workflow_path;
    int rc = DF_OK;
    for (int i = 0; !rc && i < df_task_graph_num_nodes(w->graph); i++) {
        df_node *n = df_task_graph_node_at(w->graph, i);
        if (!n->executable_ref && df_worker_default_exec(n))
            rc = df_node_set_executable_ref(n, df_worker_default_exec(n));
    }
    if (!rc)
        rc = df_task_graph_resolve(w->graph);
    int nn = rc ? 0 : df_task_graph_num_nodes(w->graph);
    if (!rc && !(w->node_set = calloc((size_t)(nn ? nn : 1), sizeof *w->node_set)))
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < nn; i++, w->n_node_set++) {
        const df_node *n = df_task_graph_node_at(w->graph, i);
        char where[1200];
        snprintf(where, sizeof where, "%s node '%s'", path, n->node_id);
        rc = node_settings(w, n, where, &w->node_set[i]);
    }
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
