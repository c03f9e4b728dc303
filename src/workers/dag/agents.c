/*
 * Agent groups in the DAG worker (docs/multi_agent.md, "Design: agent groups in the DAG
 * worker"): one slot of role workers per agent_group of the plan, and the lookup that sends a
 * node to its group's slot. Slot 0 is the single-agent job's own workers, so a graph of one group
 * runs exactly as before.
 */
#include "workers/worker_internal.h"

#include "util/fsutil.h"

#include <stdlib.h>
#include <string.h>

/* Slot 0: the worker's own fields (the cast: a slot lets its user change them, as w's fields). */
static df_agent_slot own_slot(const df_dag_worker *w)
{
    df_dag_worker *m = (df_dag_worker *)w;
    return (df_agent_slot){.group = 0, .rollout = &m->rollout, .actor = &m->actor, .reference = &m->reference,
                           .critic = &m->critic, .tok = m->tok, .model_dir = m->model_dir,
                           .tokenizer_dir = m->tokenizer_dir};
}

int df_worker_setup_agents(df_dag_worker *w)
{
    int n = w->plan && w->plan->n_agent_groups > 1 ? w->plan->n_agent_groups : 1;
    df_agent_slot *a = calloc((size_t)n, sizeof *a);
    if (!a)
        return df_error(DF_ENOMEM, "out of memory");
    for (int g = 0; g < n; g++)
        a[g].group = g;
    w->agents = a;
    w->n_agents = n;
    return DF_OK;
}

void df_worker_free_agents(df_dag_worker *w)
{
    for (int g = 1; w->agents && g < w->n_agents; g++) {
        df_agent_own *o = w->agents[g].own;
        if (!o)
            continue;
        df_rollout_engine_free(o->rollout.engine);
        df_actor_free(o->actor.model);
        df_comm_free(o->actor.dp);
        df_actor_free(o->reference.model);
        df_tokenizer_free(o->tok);
        free(o);
    }
    free(w->agents);
    w->agents = NULL;
    w->n_agents = 0;
}

df_agent_slot df_worker_slot(const df_dag_worker *w, const df_node *n)
{
    int g = n ? n->agent_group : 0;
    /* slot 0 is read from w's fields at each call: they are set up after w->agents */
    if (g <= 0 || !w->agents || g >= w->n_agents)
        return own_slot(w);
    return w->agents[g];
}

int df_worker_slot_sync(const df_agent_slot *s)
{
    int64_t step = df_actor_step_count(s->actor->model);
    if (s->rollout->synced_step == step)
        return DF_OK;
    int rc = df_rollout_engine_load_weights(s->rollout->engine, df_actor_model(s->actor->model));
    if (!rc)
        s->rollout->synced_step = step;
    return rc;
}

/* ---- a group's model directory (per-node actor_rollout_ref.model.path) ---- */

bool df_worker_node_sets_model_path(const df_node *n)
{
    bool model = n->node_type == DF_NODE_MODEL_TRAIN || n->node_type == DF_NODE_MODEL_INFERENCE;
    bool role = n->node_role == DF_ROLE_ROLLOUT || n->node_role == DF_ROLE_ACTOR || n->node_role == DF_ROLE_REFERENCE;
    for (int i = 0; model && role && i < n->n_config; i++)
        if (!strcmp(n->config_keys[i], "model.path") || !strcmp(n->config_keys[i], "actor_rollout_ref.model.path"))
            return true;
    return false;
}

int df_worker_note_model_path(char **paths, const df_node **from, int n_groups, const df_node *n, const char *path,
                              const char *src)
{
    int g = n->agent_group;
    if (!df_worker_node_sets_model_path(n) || g < 0 || g >= n_groups)
        return DF_OK;
    if (!paths[g]) {
        if (!(paths[g] = strdup(path)))
            return df_error(DF_ENOMEM, "out of memory");
        from[g] = n;
        return DF_OK;
    }
    if (!strcmp(paths[g], path))
        return DF_OK;
    return df_error(DF_EINVAL,
                    "%s: nodes '%s' and '%s' of agent_group %d set actor_rollout_ref.model.path to %s and %s; the "
                    "rollout, actor and reference nodes of a group share one model (docs/multi_agent.md)",
                    src, from[g]->node_id, n->node_id, g, paths[g], path);
}

/* A path with "~/" expanded into out[cap]. */
static int expand_into(const char *in, char *out, size_t cap)
{
    char *p = df_expand_user(in);
    int n = p ? snprintf(out, cap, "%s", p) : -1;
    free(p);
    if (!p)
        return df_error(DF_ENOMEM, "out of memory");
    return n < 0 || (size_t)n >= cap ? df_error(DF_EINVAL, "path too long: %s", in) : DF_OK;
}

int df_worker_setup_agent_dirs(df_dag_worker *w)
{
    int ng = w->n_agents > 0 ? w->n_agents : 1, nn = w->graph ? df_task_graph_num_nodes(w->graph) : 0;
    char **paths = calloc((size_t)ng, sizeof *paths);
    const df_node **from = calloc((size_t)ng, sizeof *from);
    int rc = paths && from ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < nn; i++) {
        const df_node *n = df_task_graph_node_at(w->graph, i);
        rc = df_worker_note_model_path(paths, from, ng, n, df_worker_node_settings(w, n)->cfg.actor_rollout_ref.model.path,
                                       "dag.workflow_path");
    }
    /* group 0's directory is the worker's own; a later group's goes into its slot when it gets one */
    if (!rc && paths[0])
        rc = expand_into(paths[0], w->model_dir, sizeof w->model_dir);
    const char *tok = w->global.cfg.data.tokenizer;
    if (!rc && paths[0] && !tok) /* the tokenizer follows the model unless data.tokenizer names one */
        rc = expand_into(w->model_dir, w->tokenizer_dir, sizeof w->tokenizer_dir);
    for (int g = 0; paths && g < ng; g++)
        free(paths[g]);
    free(paths);
    free(from);
    return rc ? df_error_wrap(rc, "%s", df_config_where(w->cfg, "dag.workflow_path")) : DF_OK;
}
