/* Pipeline builder and built-in pipelines (include/distflow/dag.h; siiRL
 * execution/dag/pipeline.py and builtin_pipelines.py). */
#include "distflow/dag.h"

#include "planner/dag_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct pnode {
    char *id, *ref;
    df_node_fn fn;
    char **deps;
    int n_deps;
    df_node_type type;
    df_node_role role;
    bool only_forward_compute;
    int agent_group, retry_limit;
} pnode;

struct df_pipeline {
    char *id, *description;
    pnode *v;
    int n, cap;
    int err;       /* first add error, reported again by build */
    char *err_msg;
};

df_pipeline *df_pipeline_new(const char *pipeline_id, const char *description)
{
    if (!pipeline_id || !pipeline_id[0])
        return NULL;
    df_pipeline *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->id = strdup(pipeline_id);
    p->description = strdup(description ? description : "");
    if (!p->id || !p->description) {
        df_pipeline_free(p);
        return NULL;
    }
    return p;
}

static void pnode_free(pnode *e)
{
    free(e->id);
    free(e->ref);
    for (int i = 0; i < e->n_deps; i++)
        free(e->deps[i]);
    free(e->deps);
}

void df_pipeline_free(df_pipeline *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n; i++)
        pnode_free(&p->v[i]);
    free(p->v);
    free(p->id);
    free(p->description);
    free(p->err_msg);
    free(p);
}

const char *df_pipeline_description(const df_pipeline *p) { return p->description; }

/* Keep the first error so that build() reports it. */
static int keep_error(df_pipeline *p, int rc)
{
    if (rc && !p->err) {
        p->err = rc;
        p->err_msg = strdup(df_last_error());
    }
    return rc;
}

static int check_spec(const df_pipeline *p, const df_node_spec *s)
{
    if (!s || !s->node_id || !s->node_id[0])
        return df_error(DF_EINVAL, "pipeline '%s': node id must be a non-empty string", p->id);
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->v[i].id, s->node_id))
            return df_error(DF_EINVAL, "node '%s' already exists in pipeline '%s'", s->node_id,
                            p->id);
    if (s->n_deps < 0 || (s->n_deps > 0 && !s->deps))
        return df_error(DF_EINVAL, "pipeline '%s': node '%s': bad dependency list", p->id,
                        s->node_id);
    for (int i = 0; i < s->n_deps; i++)
        if (!s->deps[i] || !s->deps[i][0])
            return df_error(DF_EINVAL, "pipeline '%s': node '%s': dependency %d is empty", p->id,
                            s->node_id, i);
    if (s->retry_limit < 0)
        return df_error(DF_EINVAL, "pipeline '%s': node '%s': negative retry_limit", p->id,
                        s->node_id);
    int rc = df_node_check_kind(s->node_id, s->node_type, s->node_role);
    return rc ? df_error_wrap(rc, "pipeline '%s'", p->id) : DF_OK;
}

int df_pipeline_add(df_pipeline *p, const df_node_spec *s)
{
    int rc = check_spec(p, s);
    if (rc)
        return keep_error(p, rc);
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 8;
        pnode *nv = realloc(p->v, (size_t)cap * sizeof *nv);
        if (!nv)
            return keep_error(p, df_error(DF_ENOMEM, "pipeline '%s': out of memory", p->id));
        p->v = nv;
        p->cap = cap;
    }
    pnode e = {.fn = s->fn, .type = s->node_type, .role = s->node_role,
               .only_forward_compute = s->only_forward_compute,
               .agent_group = s->agent_group, .retry_limit = s->retry_limit};
    e.id = strdup(s->node_id);
    e.ref = s->func_ref ? strdup(s->func_ref) : NULL;
    e.deps = calloc((size_t)s->n_deps + 1, sizeof *e.deps);
    bool ok = e.id && e.deps && (!s->func_ref || e.ref);
    for (int i = 0; ok && i < s->n_deps; i++, e.n_deps++)
        ok = (e.deps[i] = strdup(s->deps[i])) != NULL;
    if (!ok) {
        pnode_free(&e);
        return keep_error(p, df_error(DF_ENOMEM, "pipeline '%s': out of memory", p->id));
    }
    p->v[p->n++] = e;
    return DF_OK;
}

int df_pipeline_add_node(df_pipeline *p, const char *node_id, const char *func_ref,
                         const char *const *deps, int n_deps, df_node_type type,
                         df_node_role role, bool only_forward_compute)
{
    df_node_spec s = {.node_id = node_id, .func_ref = func_ref, .deps = deps, .n_deps = n_deps,
                      .node_type = type, .node_role = role,
                      .only_forward_compute = only_forward_compute};
    return df_pipeline_add(p, &s);
}

static int make_node(const pnode *e, df_node **out)
{
    df_node *nd;
    int rc = df_node_new(e->id, e->type, e->role, &nd);
    if (rc)
        return rc;
    nd->only_forward_compute = e->only_forward_compute;
    nd->agent_group = e->agent_group;
    nd->retry_limit = e->retry_limit;
    for (int i = 0; !rc && i < e->n_deps; i++)
        rc = df_node_add_dependency(nd, e->deps[i]);
    if (!rc)
        rc = df_node_set_executable_ref(nd, e->ref);
    nd->fn = e->fn; /* after set_executable_ref, which clears it */
    if (rc) {
        df_node_free(nd);
        return rc;
    }
    *out = nd;
    return DF_OK;
}

int df_pipeline_build(df_pipeline *p, df_task_graph **out)
{
    *out = NULL;
    if (p->err)
        return df_error(p->err, "%s", p->err_msg ? p->err_msg : "pipeline error");
    df_task_graph *g;
    int rc = df_task_graph_new(p->id, &g);
    for (int i = 0; !rc && i < p->n; i++) {
        df_node *nd;
        rc = make_node(&p->v[i], &nd);
        if (!rc)
            rc = df_task_graph_add_node(g, nd);
    }
    if (!rc && (rc = df_task_graph_validate(g)) != 0)
        df_error_wrap(rc, "invalid pipeline '%s'", p->id);
    if (rc) {
        df_task_graph_free(g);
        return rc;
    }
    *out = g;
    return DF_OK;
}

/* ---- built-in pipelines (siiRL builtin_pipelines.py) ------------------------- */

#define DAGW "siirl.dag_worker.dagworker:DAGWorker."
#define FILTERS "siirl.user_interface.filter_interface."

typedef struct {
    const char *id, *ref, *dep;
    df_node_type type;
    df_node_role role;
    bool forward_only;
} builtin_node;

/* Every built-in is a chain, so each node has at most one dependency. */
static const builtin_node k_grpo[] = {
    {"rollout_actor", DAGW "generate", NULL, DF_NODE_MODEL_INFERENCE, DF_ROLE_ROLLOUT, false},
    {"function_reward", DAGW "compute_reward", "rollout_actor", DF_NODE_COMPUTE, DF_ROLE_REWARD,
     false},
    {"calculate_advantages", DAGW "compute_advantage", "function_reward", DF_NODE_COMPUTE,
     DF_ROLE_ADVANTAGE, false},
    {"actor_old_log_prob", DAGW "compute_old_log_prob", "calculate_advantages",
     DF_NODE_MODEL_TRAIN, DF_ROLE_ACTOR, true},
    {"reference_log_prob", DAGW "compute_ref_log_prob", "actor_old_log_prob",
     DF_NODE_MODEL_TRAIN, DF_ROLE_REFERENCE, false},
    {"actor_train", DAGW "train_actor", "reference_log_prob", DF_NODE_MODEL_TRAIN,
     DF_ROLE_ACTOR, false},
};

static const builtin_node k_ppo[] = {
    {"rollout_actor", DAGW "generate", NULL, DF_NODE_MODEL_INFERENCE, DF_ROLE_ROLLOUT, false},
    {"function_reward", DAGW "compute_reward", "rollout_actor", DF_NODE_COMPUTE, DF_ROLE_REWARD,
     false},
    {"compute_value", DAGW "compute_value", "function_reward", DF_NODE_MODEL_TRAIN,
     DF_ROLE_CRITIC, true},
    {"calculate_advantages", DAGW "compute_advantage", "compute_value", DF_NODE_COMPUTE,
     DF_ROLE_ADVANTAGE, false},
    {"actor_old_log_prob", DAGW "compute_old_log_prob", "calculate_advantages",
     DF_NODE_MODEL_TRAIN, DF_ROLE_ACTOR, true},
    {"reference_log_prob", DAGW "compute_ref_log_prob", "actor_old_log_prob",
     DF_NODE_MODEL_TRAIN, DF_ROLE_REFERENCE, false},
    {"actor_train", DAGW "train_actor", "reference_log_prob", DF_NODE_MODEL_TRAIN,
     DF_ROLE_ACTOR, false},
    {"critic_train", DAGW "train_critic", "actor_train", DF_NODE_MODEL_TRAIN, DF_ROLE_CRITIC,
     false},
};

static const builtin_node k_dapo[] = {
    {"rollout_actor", DAGW "generate", NULL, DF_NODE_MODEL_INFERENCE, DF_ROLE_ROLLOUT, false},
    {"function_reward", DAGW "compute_reward", "rollout_actor", DF_NODE_COMPUTE, DF_ROLE_REWARD,
     false},
    {"dynamic_sampling", FILTERS "dapo.dynamic_sampling", "function_reward", DF_NODE_COMPUTE,
     DF_ROLE_DYNAMIC_SAMPLING, false},
    {"calculate_advantages", DAGW "compute_advantage", "dynamic_sampling", DF_NODE_COMPUTE,
     DF_ROLE_ADVANTAGE, false},
    {"actor_old_log_prob", DAGW "compute_old_log_prob", "calculate_advantages",
     DF_NODE_MODEL_TRAIN, DF_ROLE_ACTOR, true},
    {"reference_log_prob", DAGW "compute_ref_log_prob", "actor_old_log_prob",
     DF_NODE_MODEL_TRAIN, DF_ROLE_REFERENCE, false},
    {"actor_train", DAGW "train_actor", "reference_log_prob", DF_NODE_MODEL_TRAIN,
     DF_ROLE_ACTOR, false},
};

/* siiRL spells the sampling node "dynaminc_sampling"; kept for compatibility. */
static const builtin_node k_embodied[] = {
    {"rollout_actor", DAGW "generate", NULL, DF_NODE_MODEL_INFERENCE, DF_ROLE_ROLLOUT, false},
    {"dynaminc_sampling", FILTERS "embodied.embodied_local_rank_sampling", "rollout_actor",
     DF_NODE_COMPUTE, DF_ROLE_DYNAMIC_SAMPLING, false},
    {"compute_reward", DAGW "compute_reward", "dynaminc_sampling", DF_NODE_COMPUTE,
     DF_ROLE_REWARD, false},
    {"calculate_advantages", DAGW "compute_advantage", "compute_reward", DF_NODE_COMPUTE,
     DF_ROLE_ADVANTAGE, false},
    {"actor_old_log_prob", DAGW "compute_old_log_prob", "calculate_advantages",
     DF_NODE_MODEL_TRAIN, DF_ROLE_ACTOR, true},
    {"reference_log_prob", DAGW "compute_ref_log_prob", "actor_old_log_prob",
     DF_NODE_MODEL_TRAIN, DF_ROLE_REFERENCE, false},
    {"actor_train", DAGW "train_actor", "reference_log_prob", DF_NODE_MODEL_TRAIN,
     DF_ROLE_ACTOR, false},
};

#define BUILTIN(name, alias, id, desc, table) \
    {name, alias, id, desc, table, sizeof table / sizeof table[0]}
static const struct {
    const char *name, *alias, *id, *description;
    const builtin_node *nodes;
    size_t n;
} k_builtins[] = {
    BUILTIN("grpo", NULL, "grpo_training_pipeline", "Standard GRPO workflow", k_grpo),
    BUILTIN("ppo", NULL, "ppo_training_pipeline", "Standard PPO workflow", k_ppo),
    BUILTIN("dapo", NULL, "dapo_training_pipeline", "DAPO workflow", k_dapo),
    BUILTIN("embodied_srpo", "embodied", "embodied_grpo_training_pipeline",
            "Embodied AI GRPO training workflow with data filtering", k_embodied),
};

int df_builtin_pipeline(const char *name, df_task_graph **out)
{
    *out = NULL;
    for (size_t b = 0; name && b < sizeof k_builtins / sizeof k_builtins[0]; b++) {
        if (strcmp(name, k_builtins[b].name) != 0 &&
            !(k_builtins[b].alias && !strcmp(name, k_builtins[b].alias)))
            continue;
        df_pipeline *p = df_pipeline_new(k_builtins[b].id, k_builtins[b].description);
        if (!p)
            return df_error(DF_ENOMEM, "out of memory building pipeline '%s'", name);
        for (size_t i = 0; i < k_builtins[b].n; i++) {
            const builtin_node *e = &k_builtins[b].nodes[i];
            df_pipeline_add_node(p, e->id, e->ref, e->dep ? &e->dep : NULL, e->dep ? 1 : 0,
                                 e->type, e->role, e->forward_only);
        }
        int rc = df_pipeline_build(p, out);
        df_pipeline_free(p);
        return rc;
    }
    return df_error(DF_ENOTFOUND, "unknown built-in pipeline '%s' (known: grpo, ppo, dapo, "
                                  "embodied_srpo, embodied)",
                    name ? name : "(null)");
}
