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

/*
 * Keys siiRL's MARFT workflow sets on its rollout and actor nodes (YAML anchors actor_1_config /
 * actor_2_config) that distflow reads once for the whole job: a node may repeat the job's value, so
 * that siiRL's file loads when the job agrees with it, and any other value is refused, naming the
 * node, the key and the job's value (docs/siirl_workflows.md, docs/multi_agent.md). A function that
 * declares one of them per node (df_node_keys.global) honours it instead.
 */
static const struct {
    const char *key, *why;
} k_job_wide[] = {
    {"actor_rollout_ref.rollout.n",
     "every rollout node answers the same prompts, every agent of a multi-agent "
     "graph the same episodes, and the batch sizes count n responses per prompt"},
    {"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
     "the old-log-prob pass's micro-batch is set when the actor is made"},
    {"actor_rollout_ref.rollout.tensor_model_parallel_size",
     "plan and config check size the rollout's data-parallel layout from the job's key"},
    {"actor_rollout_ref.rollout.gpu_memory_utilization",
     "it has no effect in distflow: no KV-cache pool is sized"},
};

static const char *job_wide_why(const char *key)
{
    for (size_t i = 0; i < sizeof k_job_wide / sizeof *k_job_wide; i++)
        if (!strcmp(key, k_job_wide[i].key))
            return k_job_wide[i].why;
    return NULL;
}

/* c's value of `key` as text ("null" when null); exact (%.17g) or for people (%g). */
static void value_text(const df_config *c, const char *key, bool exact, char *out, size_t cap)
{
    const df_config_entry *e = df_config_schema_find(df_config_get_schema(c), key);
    if (!e || df_config_is_null(c, key))
        snprintf(out, cap, "null");
    else if (e->type == DF_CFG_INT)
        snprintf(out, cap, "%lld", (long long)df_config_int(c, key));
    else if (e->type == DF_CFG_FLOAT)
        snprintf(out, cap, exact ? "%.17g" : "%g", df_config_float(c, key));
    else if (e->type == DF_CFG_BOOL)
        snprintf(out, cap, "%s", df_config_bool(c, key) ? "true" : "false");
    else
        snprintf(out, cap, "%s", e->type == DF_CFG_STR ? df_config_str(c, key) : "(a list or map)");
}

/* A job-wide key on a node: DF_OK when the node's value (in node) is the job's (in cfg). */
static int check_job_value(const df_config *cfg, const df_config *node, const char *key, const char *why,
                           const char *where)
{
    char mine[128], job[128];
    value_text(node, key, true, mine, sizeof mine);
    value_text(cfg, key, true, job, sizeof job);
    if (!strcmp(mine, job))
        return DF_OK;
    value_text(node, key, false, mine, sizeof mine);
    value_text(cfg, key, false, job, sizeof job);
    return df_error(DF_EUNSUPPORTED,
                    "%s: %s=%s differs from the job's %s (%s); distflow reads this key once for "
                    "the job, not per node (%s): set the job's %s=%s, or leave it out of the node's config",
                    where, key, mine, job, df_config_where(cfg, key), why, key, mine);
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
    for (int i = 0; !rc && i < nk; i++) {
        const char *why = key_in(k.global, keys[i]) ? NULL : job_wide_why(keys[i]);
        if (why)
            rc = check_job_value(cfg, *out, keys[i], why, where);
        else if (!key_in(k.global, keys[i]))
            rc = refuse_key(&k, keys[i], where);
    }
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
