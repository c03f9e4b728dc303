/*
 * The worker's place in the plan: every rank plans the same way (the planner
 * is deterministic), takes its own TaskGraph from the rank -> subgraph map,
 * turns the plan's process groups into communicators, and gives each node a
 * data-parallel layout (siiRL DAGWorker._get_node_dp_info).
 */
#include "workers/worker_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *df_worker_mp_key(df_node_role role, const df_train_config *t, int64_t *mp)
{
    const struct df_train_actor_rollout_ref *a = &t->actor_rollout_ref;
    switch (role) {
    case DF_ROLE_ROLLOUT:
        *mp = a->rollout.tensor_model_parallel_size;
        return "actor_rollout_ref.rollout.tensor_model_parallel_size";
    case DF_ROLE_ACTOR:
        *mp = a->actor.ulysses_sequence_parallel_size;
        return "actor_rollout_ref.actor.ulysses_sequence_parallel_size";
    case DF_ROLE_REFERENCE:
        *mp = a->ref.ulysses_sequence_parallel_size;
        return "actor_rollout_ref.ref.ulysses_sequence_parallel_size";
    case DF_ROLE_CRITIC:
        *mp = t->critic.ulysses_sequence_parallel_size;
        return "critic.ulysses_sequence_parallel_size";
    default:
        return NULL;
    }
}

static bool is_model_node(const df_node *n)
{
    return n->node_type == DF_NODE_MODEL_INFERENCE || n->node_type == DF_NODE_MODEL_TRAIN;
}

/*
 * Layouts in topological order: a model node's model-parallel size comes from
 * its role's key; every other node inherits the layout of the node before it
 * (siiRL resolves a COMPUTE node through its first non-compute ancestor), the
 * first node 1.
 */
static int node_layouts(df_dag_worker *w)
{
    df_node **order;
    int n, rc = df_task_graph_topo_order(w->graph, &order, &n);
    if (rc)
        return rc;
    int mp = 1;
    for (int i = 0; i < n && !rc; i++) {
        const df_node_settings *ns = df_worker_node_settings(w, order[i]);
        int64_t node_mp = 0;
        const char *key = is_model_node(order[i]) ? df_worker_mp_key(order[i]->node_role, &ns->cfg, &node_mp) : NULL;
        if (key)
            mp = (int)node_mp;
        if (w->group_size % mp) {
            rc = df_error(DF_EINVAL, "%s: %s=%d does not divide the %d ranks running node '%s'",
                          df_config_where(ns->src, key), key, mp, w->group_size, order[i]->node_id);
            break;
        }
        int k = df_worker_node_index(w, order[i]);
        w->layouts[k] = (df_node_layout){.dp_size = w->group_size / mp, .mp = mp,
                                         .dp_rank = w->group_rank / mp, .mp_rank = w->group_rank % mp};
        if (i == 0)
            w->data_layout = w->layouts[k]; /* the dataloader feeds the first node */
    }
    free(order);
    return rc;
}

int df_worker_node_index(const df_dag_worker *w, const df_node *node)
{
    for (int i = 0; i < df_task_graph_num_nodes(w->graph); i++)
        if (df_task_graph_node_at(w->graph, i) == node)
            return i;
    return -1;
}

const df_node_layout *df_worker_node_layout(const df_dag_worker *w, const df_node *node)
{
    int i = df_worker_node_index(w, node);
    return i >= 0 ? &w->layouts[i] : NULL;
}

/*
 * ProcessGroupManager's groups as communicators: every rank walks the plan's
 * groups in the same order (df_comm_from_ranks is collective over the listed
 * ranks only) and keeps the one its model nodes run in; a group of every rank
 * is the world itself.
 */
static int make_groups(df_dag_worker *w)
{
    const df_process_groups *pg = w->plan->groups;
    const char *mine = NULL;
    for (int i = 0; i < df_task_graph_num_nodes(w->graph) && !mine; i++)
        mine = df_process_groups_node_group(pg, df_task_graph_node_at(w->graph, i)->node_id);
    int rc = DF_OK;
    for (int i = 0; i < df_process_groups_count(pg) && !rc; i++) {
        int n;
        const int *ranks = df_process_groups_ranks(pg, i, &n);
        bool keep = mine && !strcmp(df_process_groups_name(pg, i), mine);
        df_comm *child = NULL;
        if (n < w->world)
            rc = df_comm_from_ranks(w->comm, ranks, n, &child);
        if (keep && !rc)
            w->group = n < w->world ? child : w->comm;
        else
            df_comm_free(child);
    }
    if (!rc && !w->group)
        w->group = w->comm; /* no model node: the graph's nodes run on every rank */
    if (!rc) {
        w->group_rank = df_comm_rank(w->group);
        w->group_size = df_comm_size(w->group);
    }
    return rc;
}

/* This rank's subgraph (a copy it owns) and its process group's communicator. */
static int take_graph(df_dag_worker *w)
{
    const df_schedule *s = w->plan->schedule;
    int gi = s->rank_graph[w->rank];
    if (gi < 0)
        return df_error(DF_EUNSUPPORTED, "rank %d has no task graph in the plan (%d subgraphs over %d ranks); "
                                         "idle ranks are not supported",
                        w->rank, s->n_graphs, w->world);
    int rc = df_task_graph_copy(s->graphs[gi], NULL, &w->graph);
    return rc ? rc : make_groups(w);
}

int df_worker_role_node(const df_dag_worker *w, df_node_role role, bool forward_ok)
{
    int found = -1;
    for (int i = 0; i < df_task_graph_num_nodes(w->graph); i++) {
        const df_node *n = df_task_graph_node_at(w->graph, i);
        bool model = n->node_type == DF_NODE_MODEL_TRAIN ||
                     (forward_ok && n->node_type == DF_NODE_MODEL_INFERENCE);
        if (n->node_role != role || !model || (!forward_ok && n->only_forward_compute))
            continue;
        if (found < 0 || !n->only_forward_compute)
            found = i;
    }
    return found;
}

/*
 * A role's layout (its df_worker_role_node's, else *dflt; without either:
 * nothing to do) and data-parallel communicator: the group's ranks with the
 * same model-parallel rank (NULL on one rank).
 */
static int role_dp_comm(df_dag_worker *w, df_node_role role, bool forward_ok, const df_node_layout *dflt,
                        df_node_layout *layout, df_comm **comm)
{
    int k = df_worker_role_node(w, role, forward_ok);
    if (k < 0 && !dflt)
        return DF_OK;
    *layout = k >= 0 ? w->layouts[k] : *dflt;
    if (w->group_size == 1)
        return DF_OK;
    return df_comm_split(w->group, layout->mp_rank, layout->dp_rank, comm);
}

/* The actor's: its training node's (else every group rank its own DP rank). */
static int actor_comm(df_dag_worker *w)
{
    const df_node_layout dflt = {.dp_size = w->group_size, .mp = 1, .dp_rank = w->group_rank};
    return role_dp_comm(w, DF_ROLE_ACTOR, false, &dflt, &w->actor.layout, &w->actor.dp);
}

int df_worker_setup_critic_comm(df_dag_worker *w)
{
    return role_dp_comm(w, DF_ROLE_CRITIC, true, NULL, &w->critic.layout, &w->critic.dp);
}

int df_worker_setup_parallel(df_dag_worker *w)
{
    /* df_dag_worker_create takes the plan df_train_check made */
    int rc = w->plan ? DF_OK : df_worker_plan(w->cfg, w->world, df_worker_warn, w, &w->plan);
    if (!rc)
        rc = take_graph(w);
    return rc ? df_error_wrap(rc, "rank %d of %d", w->rank, w->world) : DF_OK;
}

int df_worker_setup_layouts(df_dag_worker *w)
{
    int n = df_task_graph_num_nodes(w->graph);
    w->layouts = calloc((size_t)(n ? n : 1), sizeof *w->layouts);
    if (!w->layouts)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = node_layouts(w);
    if (!rc)
        rc = actor_comm(w);
    if (!rc)
        rc = df_worker_setup_critic_comm(w);
    return rc;
}

void df_worker_free_parallel(df_dag_worker *w)
{
    df_comm_free(w->actor.dp);
    if (w->group != w->comm)
        df_comm_free(w->group);
    free(w->layouts);
    df_plan_free(w->plan);
}

/*
 * <who>/weights_in_sync: 1 when the model's parameter checksum is the same on
 * every rank of the group (data-parallel ranks and model-parallel replicas all
 * hold the whole model). Different weights mean a broken all-reduce: an error.
 */
int df_worker_check_in_sync(df_dag_worker *w, const df_model *model, const char *who, df_metrics *m)
{
    uint64_t h;
    int rc = df_model_param_checksum(model, &h);
    int64_t v[2] = {(int64_t)h, ~(int64_t)h}; /* max of ~h is ~(min of h): one allreduce */
    if (!rc)
        rc = df_comm_allreduce(w->group, v, 2, DF_COMM_INT64, DF_COMM_MAX);
    if (rc)
        return rc;
    int64_t hi = v[0], lo = ~v[1];
    char key[64];
    snprintf(key, sizeof key, "%s/weights_in_sync", who);
    df_metrics_set(m, key, hi == lo);
    if (hi != lo)
        return df_error(DF_EINTERNAL, "the %s's weights differ across the %d ranks (checksums %016llx .. %016llx)",
                        who, w->group_size, (unsigned long long)lo, (unsigned long long)hi);
    return DF_OK;
}

int df_worker_plan(const df_config *c, int world, df_warn_fn warn, void *user, df_plan **out)
{
    *out = NULL;
    df_train_config t;
    int rc = df_train_config_resolve(c, &t);
    if (rc)
        return rc;
    int64_t nnodes = t.trainer.nnodes, gpus = t.trainer.n_gpus_per_node;
    /* mode=async: the trainer side is the job less its rollout ranks (workers/dag/async.h) */
    int64_t rollout = strcmp(t.actor_rollout_ref.rollout.mode, "async") ? 0
                                                                         : t.rollout.nnodes * t.rollout.n_gpus_per_node;
    if (rollout >= world)
        return df_error(DF_EINVAL, "%s: rollout.nnodes x rollout.n_gpus_per_node = %lld rollout ranks leave no "
                        "trainer rank of the %d launched", df_config_where(c, "rollout.n_gpus_per_node"),
                        (long long)rollout, world);
    world -= (int)rollout;
    if (world < 1 || world % nnodes)
        return df_error(DF_EINVAL, "%s: trainer.nnodes=%lld does not divide the %d launched ranks",
                        df_config_where(c, "trainer.nnodes"), (long long)nnodes, world);
    char val[32];
    snprintf(val, sizeof val, "%lld", (long long)(world / nnodes));
    bool set = strcmp(df_config_where(c, "trainer.n_gpus_per_node"), "default") != 0;
    if (set && nnodes * gpus != world) {
        char msg[400];
        snprintf(msg, sizeof msg, "trainer.nnodes x trainer.n_gpus_per_node = %lld but %d ranks were launched: "
                                  "planning for %lld x %s", (long long)(nnodes * gpus), world, (long long)nnodes, val);
        if (warn)
            warn(user, msg);
    }
    const char *key = "trainer.n_gpus_per_node", *v = val;
    df_config *pc = NULL;
    rc = df_config_with_overrides(c, &key, &v, 1, "the launched ranks", &pc);
    if (!rc)
        rc = df_plan_create(pc, warn, user, out);
    if (!rc)
        (*out)->rollout_ranks = (int)rollout;
    df_config_free(pc);
    return rc;
}
