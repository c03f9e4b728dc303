/*
 * A plan from a train config: pick the built-in pipeline (as siiRL's main_dag),
 * split it, schedule it over trainer.nnodes x trainer.n_gpus_per_node and
 * derive the process groups; print it as text or Graphviz DOT.
 */
#include "planner/sched_internal.h"
#include "distflow/algo_desc.h"
#include "distflow/model.h"
#include "distflow/train_config.h"
#include "util/fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The planner reads the typed config; `c` stays for where a value came from in messages. */
static int pipeline_select(const df_config *c, const df_train_config *t, const char **name)
{
    const char *wf = t->algorithm.workflow_type;
    const char *adv = t->algorithm.adv_estimator;
    if (!strcasecmp(wf, "dapo"))
        *name = "dapo";
    else if (!strcasecmp(wf, "embodied") || !strcasecmp(wf, "embodied_srpo"))
        *name = "embodied_srpo";
    else if (!strcasecmp(wf, "default"))
        *name = df_adv_estimator_pipeline(df_adv_estimator_find(adv)); /* a critic's: ppo */
    else
        return df_error(DF_EINVAL, "%s: algorithm.workflow_type '%s' is not one of default, dapo, embodied",
                        df_config_where(c, "algorithm.workflow_type"), wf);
    return DF_OK;
}

int df_pipeline_select(const df_config *c, const char **name)
{
    df_train_config t;
    int rc = df_train_config_resolve(c, &t);
    return rc ? rc : pipeline_select(c, &t, name);
}

/* The config key holding the model of a model node's role, or NULL when the role has none;
   its value in t into *path. */
static const char *role_model_key(df_node_role r, const df_train_config *t, const char **path)
{
    switch (r) {
    case DF_ROLE_ACTOR:
    case DF_ROLE_ROLLOUT:
    case DF_ROLE_REFERENCE: *path = t->actor_rollout_ref.model.path; return "actor_rollout_ref.model.path";
    case DF_ROLE_CRITIC: *path = t->critic.model.path; return "critic.model.path";
    case DF_ROLE_REWARD: *path = t->reward_model.model.path; return "reward_model.model.path";
    default: *path = NULL; return NULL;
    }
}

static int check_models(df_task_graph *g, const df_train_config *t)
{
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        const df_node *n = df_task_graph_node_at(g, i);
        if (n->node_type != DF_NODE_MODEL_TRAIN && n->node_type != DF_NODE_MODEL_INFERENCE)
            continue;
        const char *path;
        const char *key = role_model_key(n->node_role, t, &path);
        const char *why = !key ? "that role has no model"
                          : !path || !*path ? "the key is not set"
                          : n->node_role == DF_ROLE_REWARD && !t->reward_model.enable
                              ? "reward_model.enable is false"
                              : NULL;
        if (why)
            return df_error(DF_EINVAL, "task graph '%s': %s node '%s' has role %s, but %s%s%s",
                            df_task_graph_id(g), df_node_type_name(n->node_type), n->node_id,
                            df_node_role_name(n->node_role), key ? key : "", key ? ": " : "", why);
    }
    return DF_OK;
}

int df_task_graph_check_models(df_task_graph *g, const df_config *c)
{
    df_train_config t;
    int rc = df_train_config_resolve(c, &t);
    return rc ? rc : check_models(g, &t);
}

/* rc, else check_models; the graph is freed on failure. */
static int checked(int rc, const df_train_config *t, df_task_graph **g)
{
    if (!rc && (rc = check_models(*g, t))) {
        df_task_graph_free(*g);
        *g = NULL;
    }
    return rc;
}

/* An estimator that needs reward_baselines (ReMax): the built-in chain gets its greedy-pass node.
   *g is freed on failure. */
static int reward_baseline(const df_train_config *t, const char *name, df_task_graph **g)
{
    const df_adv_estimator_desc *d = df_adv_estimator_find(t->algorithm.adv_estimator);
    if (!d || !(d->needs & DF_ADV_NEEDS_BASELINES))
        return DF_OK;
    char what[300];
    snprintf(what, sizeof what, "built-in pipeline '%s'", name);
    int rc = df_task_graph_add_reward_baseline(*g, what);
    if (rc) {
        df_task_graph_free(*g);
        *g = NULL;
    }
    return rc;
}

/*
 * An advantage that reads log-probs runs after the nodes computing them: both for
 * algorithm.use_kl_in_reward, the old ones for the optimal token baseline
 * (DF_ADV_NEEDS_SUM_PI_SQUARED) and verl's rollout correction (its weights and rejections are
 * made at the advantage node, as verl makes them before compute_advantage). The built-in chains
 * take verl's order, other graphs must have it (kl_order.c). The default graphs are untouched. *g
 * is freed on failure.
 */
static int log_prob_order(const df_train_config *t, bool builtin, const char *source, df_task_graph **g)
{
    const df_adv_estimator_desc *d = df_adv_estimator_find(t->algorithm.adv_estimator);
    const bool kl = t->algorithm.use_kl_in_reward, sq = d && (d->needs & DF_ADV_NEEDS_SUM_PI_SQUARED);
    const bool corr = df_train_rollout_correction_decoupled(t);
    if (!kl && !sq && !corr)
        return DF_OK;
    char what[1300], why[300];
    snprintf(what, sizeof what, "%s%s%s", builtin ? "built-in pipeline '" : "", source, builtin ? "'" : "");
    if (kl)
        snprintf(why, sizeof why, "algorithm.use_kl_in_reward=true subtracts beta * KL(old_log_probs, "
                 "ref_log_prob) from the reward before the advantage");
    else if (sq)
        snprintf(why, sizeof why, "algorithm.adv_estimator=%s reads old_log_probs and sum_pi_squared",
                 t->algorithm.adv_estimator);
    else
        snprintf(why, sizeof why, "algorithm.rollout_correction (rollout_is / rollout_rs) weighs and masks "
                 "the responses by old_log_probs against the rollout's before the advantage");
    const int need = DF_NEED_OLD_LOG_PROB | (kl ? DF_NEED_REF_LOG_PROB : 0);
    int rc = df_task_graph_order_log_probs_first(*g, need, builtin, what, why);
    if (rc) {
        df_task_graph_free(*g);
        *g = NULL;
    }
    return rc;
}

int df_pipeline_from_config(const df_config *c, df_warn_fn warn, void *user, const char **name,
                            df_task_graph **out)
{
    df_train_config t;
    int rc = df_train_config_resolve(c, &t);
    if (rc)
        return rc;
    const char *wf = "dag.workflow_path", *fn = "dag.custom_pipeline_fn";
    const char *key = t.dag.workflow_path ? wf : t.dag.custom_pipeline_fn ? fn : NULL;
    const char *value = key == wf ? t.dag.workflow_path : t.dag.custom_pipeline_fn;
    if (!key) {
        rc = pipeline_select(c, &t, name);
        if (!rc)
            rc = checked(df_builtin_pipeline(*name, out), &t, out);
        if (!rc)
            rc = reward_baseline(&t, *name, out);
        return rc ? rc : log_prob_order(&t, true, *name, out);
    }
    if (key == wf) {
        *name = "workflow";
        char *path = df_expand_user(value);
        rc = path ? df_workflow_load_ex(path, warn, user, out) : df_error(DF_ENOMEM, "out of memory");
        free(path);
    } else {
        *name = "custom";
        rc = df_pipeline_from_plugin(value, out);
    }
    if (!rc) {
        char src[1200];
        snprintf(src, sizeof src, "%s '%s'", key == wf ? "workflow file" : "custom pipeline", value);
        rc = log_prob_order(&t, false, src, out);
    }
    if (rc)
        return df_error_wrap(rc, "%s: %s", df_config_where(c, key), key);
    return checked(DF_OK, &t, out);
}

/* The override_config of a role's model (flow-YAML map text), NULL for none. */
static const char *role_overrides(df_node_role r, const df_train_config *t)
{
    return r == DF_ROLE_CRITIC    ? t->critic.model.override_config
           : r == DF_ROLE_REWARD ? NULL
                                  : t->actor_rollout_ref.model.override_config;
}

/* Parameters of the model at dir/config.json with the overrides of `overrides` (map text), or 0 when
   it cannot be read (a plan needs no files). */
static double model_dir_params(const char *dir, const char *overrides)
{
    char *d = df_expand_user(dir), *path = d ? df_path_join(d, "config.json") : NULL, *json = NULL;
    df_model_config mc;
    df_param_desc *descs = NULL;
    int n = 0;
    int64_t total = 0;
    if (!path || df_config_map_json(overrides, &json) ||
        df_model_config_load_ex(path, &(df_config_overrides){.json = json}, &mc) ||
        df_model_layout(&mc, &descs, &n, &total))
        df_clear_error(), total = 0;
    free(json);
    free(descs);
    free(path);
    free(d);
    return (double)total;
}

/* param_aware sizes of a plan: each model path's parameter count, read at most once per key. */
typedef struct {
    const df_train_config *t;
    int n;
    struct {
        const char *key;
        double params;
    } seen[3]; /* role_model_key's keys */
} plan_sizes;

/* A model node without `model_params`: the parameter count of its role's model from config.json. */
static double node_model_params(const df_node *n, void *user)
{
    plan_sizes *ps = user;
    const char *path;
    const char *key = role_model_key(n->node_role, ps->t, &path);
    if (!key || !path)
        return 0;
    for (int i = 0; i < ps->n; i++)
        if (!strcmp(ps->seen[i].key, key))
            return ps->seen[i].params;
    double p = model_dir_params(path, role_overrides(n->node_role, ps->t));
    if (ps->n < (int)(sizeof ps->seen / sizeof ps->seen[0]))
        ps->seen[ps->n].key = key, ps->seen[ps->n++].params = p;
    return p;
}

/* Size of a subgraph for param_aware: each model node's `model_params` config
   (siiRL), else the parameter count of its role's model from config.json. */
static double config_graph_size(const df_task_graph *g, void *user)
{
    return df_sched_graph_params(g, node_model_params, user);
}

void df_plan_free(df_plan *p)
{
    if (!p)
        return;
    df_process_groups_free(p->groups);
    df_schedule_free(p->schedule);
    df_task_graph_list_free(p->subgraphs, p->n_subgraphs);
    df_task_graph_free(p->graph);
    free(p);
}

int df_plan_create(const df_config *c, df_warn_fn warn, void *user, df_plan **out)
{
    *out = NULL;
    df_plan *p = calloc(1, sizeof *p);
    if (!p)
        return df_error(DF_ENOMEM, "out of memory");
    df_train_config t;
    int rc = df_train_config_resolve(c, &t);
    if (!rc)
        rc = df_pipeline_from_config(c, warn, user, &p->pipeline, &p->graph);
    if (!rc)
        rc = df_task_graph_agent_groups(p->graph, &p->n_agent_groups);
    if (!rc)
        rc = df_task_graph_split(p->graph, &p->subgraphs, &p->n_subgraphs);
    int64_t nnodes = t.trainer.nnodes;
    int64_t gpus = t.trainer.n_gpus_per_node;
    if (!rc && (nnodes > (1 << 20) || gpus > (1 << 20)))
        rc = df_error(DF_EINVAL, "%s: trainer.nnodes x trainer.n_gpus_per_node is too large",
                      df_config_where(c, "trainer.nnodes"));
    plan_sizes sizes = {.t = &t};
    df_schedule_opts so = {.size_fn = config_graph_size, .size_user = &sizes};
    if (!rc)
        rc = df_schedule_create(p->subgraphs, p->n_subgraphs, (int)nnodes, (int)gpus, &so, &p->schedule);
    if (!rc)
        rc = df_process_groups_create(p->schedule, 0, &p->groups);
    if (rc) {
        df_plan_free(p);
        return df_error_wrap(rc, "planning");
    }
    *out = p;
    return DF_OK;
}

/* "0-7" / "0,2,5" / "0-3,8-11": ascending ranks as compact ranges. */
static void ranks_text(df_sbuf *b, const int *r, int n)
{
    if (!n)
        df_sbuf_printf(b, "(none)");
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && r[j + 1] == r[j] + 1)
            j++;
        df_sbuf_printf(b, "%s%d", i ? "," : "", r[i]);
        if (j > i)
            df_sbuf_printf(b, "-%d", r[j]);
        i = j + 1;
    }
}

static void plan_text(const df_plan *p, df_sbuf *b)
{
    const df_schedule *s = p->schedule;
    df_sbuf_printf(b, "\n== subgraphs (%d)\n", p->n_subgraphs);
    for (int i = 0; i < p->n_subgraphs; i++) {
        df_task_graph *g = p->subgraphs[i];
        df_sbuf_printf(b, "[%d] %s:", i, df_task_graph_id(g));
        for (int k = 0; k < df_task_graph_num_nodes(g); k++)
            df_sbuf_printf(b, " %s", df_task_graph_node_at(g, k)->node_id);
        df_sbuf_printf(b, "\n");
    }
    df_sbuf_printf(b, "\n== assignment (%d nodes x %d ranks = %d workers)\n", s->nnodes, s->gpus_per_node,
                   s->n_workers);
    for (int i = 0; i < s->n_graphs; i++) {
        int *r = NULL, n = 0;
        if (df_schedule_ranks_of(s, i, &r, &n)) {
            b->failed = true;
            return;
        }
        df_sbuf_printf(b, "%s: %d workers, ranks ", df_task_graph_id(s->graphs[i]), n);
        ranks_text(b, r, n);
        df_sbuf_printf(b, "\n");
        free(r);
    }
    for (int r = 0; r < s->n_workers; r++) {
        df_task_graph *g = df_schedule_graph_of(s, r);
        df_sbuf_printf(b, "rank %d (node %d) -> %s\n", r, r / s->gpus_per_node, g ? df_task_graph_id(g) : "(idle)");
    }
    df_sbuf_printf(b, "\n== process groups (%d)\n", df_process_groups_count(p->groups));
    for (int i = 0; i < df_process_groups_count(p->groups); i++) {
        int n;
        const int *r = df_process_groups_ranks(p->groups, i, &n);
        df_sbuf_printf(b, "%s: ranks ", df_process_groups_name(p->groups, i));
        ranks_text(b, r, n);
        df_sbuf_printf(b, "\n");
    }
    for (int i = 0; i < df_process_groups_num_nodes(p->groups); i++) {
        const char *id = df_process_groups_node_at(p->groups, i);
        df_sbuf_printf(b, "node %s -> %s\n", id, df_process_groups_node_group(p->groups, id));
    }
    if (p->rollout_ranks > 0) {
        int first = s->n_workers, last = s->n_workers + p->rollout_ranks - 1;
        df_sbuf_printf(b, "\n== asynchronous rollout side (actor_rollout_ref.rollout.mode=async)\n");
        df_sbuf_printf(b, "rollout: %d ranks, ranks %d-%d: the rollout node's engine, streaming episodes to ranks "
                          "0-%d (trainer side, the assignment above)\n", p->rollout_ranks, first, last, first - 1);
        df_sbuf_printf(b, "weights: ranks 0,%d-%d (trainer rank 0 broadcasts each version)\n", first, last);
    }
}

/* The roles agent group grp has models of its own for, "ROLLOUT, ACTOR, ..." in first-seen order, into
   b and seen[]. */
static void agent_roles(const df_task_graph *g, int grp, df_sbuf *b, bool seen[DF_NODE_ROLE_COUNT])
{
    const char *sep = "";
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        const df_node *n = df_task_graph_node_at(g, i);
        bool model = n->node_type == DF_NODE_MODEL_TRAIN || n->node_type == DF_NODE_MODEL_INFERENCE;
        bool shares = n->agent_options && n->agent_options->share_instance >= 0; /* another group's model */
        if (n->agent_group != grp || !model || shares || seen[n->node_role])
            continue;
        seen[n->node_role] = true;
        df_sbuf_printf(b, "%s%s", sep, df_node_role_name(n->node_role));
        sep = ", ";
    }
    if (!*sep)
        df_sbuf_printf(b, "(none)");
}

/* Multi-agent graphs (siiRL MARFT): each agent group's models, checkpoint and nodes. */
static void agent_groups_text(const df_plan *p, df_sbuf *b)
{
    df_sbuf_printf(b, "\n== agent groups (%d)\n", p->n_agent_groups);
    for (int grp = 0; grp < p->n_agent_groups; grp++) {
        bool own[DF_NODE_ROLE_COUNT] = {0};
        df_sbuf_printf(b, "agent %d: models ", grp);
        agent_roles(p->graph, grp, b, own);
        /* group 0 keeps the single-agent layout (docs/checkpoints.md); a shared model is its owner's */
        char sfx[32] = "";
        if (grp > 0)
            snprintf(sfx, sizeof sfx, "_agent_%d", grp);
        df_sbuf_printf(b, "; checkpoint");
        if (own[DF_ROLE_ACTOR])
            df_sbuf_printf(b, " actor%s/", sfx);
        if (own[DF_ROLE_CRITIC])
            df_sbuf_printf(b, " critic%s/", sfx);
        if (!own[DF_ROLE_ACTOR] && !own[DF_ROLE_CRITIC])
            df_sbuf_printf(b, " (none of its own)");
        df_sbuf_printf(b, "\n");
        for (int i = 0; i < df_task_graph_num_nodes(p->graph); i++) {
            const df_node *n = df_task_graph_node_at(p->graph, i);
            if (n->agent_group != grp)
                continue;
            const char *pg = df_process_groups_node_group(p->groups, n->node_id);
            int share = n->agent_options ? n->agent_options->share_instance : -1;
            df_sbuf_printf(b, "  %s -> %s", n->node_id, pg ? pg : "(no model: its subgraph's ranks)");
            if (share >= 0)
                df_sbuf_printf(b, ", %s instance of agent %d", df_node_role_name(n->node_role), share);
            df_sbuf_printf(b, "\n");
        }
    }
}

int df_plan_print(const df_plan *p, FILE *f)
{
    char *graph = NULL, *text = NULL;
    int rc = df_task_graph_print(p->graph, &graph);
    df_sbuf b = {0};
    if (!rc) {
        df_sbuf_printf(&b, "== pipeline %s\n%s", p->pipeline, graph);
        plan_text(p, &b);
        if (p->n_agent_groups > 1)
            agent_groups_text(p, &b);
        rc = df_sbuf_finish(&b, &text);
    }
    if (!rc && fputs(text, f) == EOF)
        rc = df_error(DF_EIO, "cannot write the plan");
    free(graph);
    free(text);
    return rc;
}

/* s as the inside of a DOT quoted string: '"' and '\\' escaped. */
static void dot_text(df_sbuf *b, const char *s)
{
    for (; *s; s++)
        df_sbuf_printf(b, "%s%c", *s == '"' || *s == '\\' ? "\\" : "", *s);
}

/* A node's DOT id: "<subgraph index>:<node id>", quoted. */
static void dot_node(df_sbuf *b, int i, const char *id)
{
    df_sbuf_printf(b, "\"%d:", i);
    dot_text(b, id);
    df_sbuf_printf(b, "\"");
}

int df_plan_dot(const df_plan *p, char **out)
{
    df_sbuf b = {0};
    df_sbuf_printf(&b, "digraph \"");
    dot_text(&b, df_task_graph_id(p->graph));
    df_sbuf_printf(&b, "\" {\n  rankdir=TB;\n  node [shape=box];\n");
    for (int i = 0; i < p->n_subgraphs; i++) {
        df_task_graph *g = p->subgraphs[i];
        int *r = NULL, n = 0;
        if (df_schedule_ranks_of(p->schedule, i, &r, &n)) {
            b.failed = true;
            break;
        }
        df_sbuf_printf(&b, "  subgraph \"cluster_%d\" {\n    label=\"", i);
        dot_text(&b, df_task_graph_id(g));
        df_sbuf_printf(&b, "\\nranks ");
        ranks_text(&b, r, n);
        free(r);
        df_sbuf_printf(&b, "\";\n");
        for (int k = 0; k < df_task_graph_num_nodes(g); k++) {
            const df_node *node = df_task_graph_node_at(g, k);
            const char *grp = df_process_groups_node_group(p->groups, node->node_id);
            df_sbuf_printf(&b, "    ");
            dot_node(&b, i, node->node_id);
            df_sbuf_printf(&b, " [label=\"");
            dot_text(&b, node->node_id);
            df_sbuf_printf(&b, "\\n%s %s%s%s\"];\n", df_node_type_name(node->node_type),
                           df_node_role_name(node->node_role), grp ? "\\n" : "", grp ? grp : "");
        }
        for (int k = 0; k < df_task_graph_num_nodes(g); k++) {
            const df_node *node = df_task_graph_node_at(g, k);
            for (int d = 0; d < node->n_dependencies; d++) {
                df_sbuf_printf(&b, "    ");
                dot_node(&b, i, node->dependencies[d]);
                df_sbuf_printf(&b, " -> ");
                dot_node(&b, i, node->node_id);
                df_sbuf_printf(&b, ";\n");
            }
        }
        df_sbuf_printf(&b, "  }\n");
    }
    df_sbuf_printf(&b, "}\n");
    return df_sbuf_finish(&b, out);
}
