/*
 * The one validation of a `train` config (include/distflow/worker.h,
 * df_train_check): what `distflow plan`, `distflow config check` and the DAG
 * worker's setup all run before anything is loaded, so that no command
 * accepts what another refuses. The settings distflow cannot honour, the plan
 * for the job's ranks, the graph (agent groups, every node's executable, each
 * workflow node's `config:` against the keys its function reads per node,
 * dynamic sampling's refill), each model node's model-parallel size, then the
 * cross-field checks of df_config_validate_train_ex for the actor's
 * data-parallel size, and last the files the run reads (preflight.c).
 */
#include "workers/worker_internal.h"
#include "util/fsutil.h"
#include "workers/common/max_pos.h"
#include "workers/common/model_overrides.h"
#include "workers/dag/preflight.h"
#include "workers/dag/marft_run.h"
#include "workers/embodied/embodied_worker.h"
#include "distflow/algo_desc.h"
#include "distflow/backend.h"
#include "distflow/env.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- settings and graph shapes distflow does not run -------------------------- */

/* Settings the key tables mark unsupported, before the plan reads them; the device must be one this
   build has. */
static int check_supported(const df_config *c, const df_train_config *t)
{
    int rc = df_config_check_compat(c, NULL, NULL); /* warnings come with the cross-field checks */
    if (rc)
        return rc;
    if ((rc = df_worker_lora_config(c, t, NULL)) || (rc = df_worker_critic_lora_config(c, t, NULL)))
        return rc;
    if (!df_backend_available(t->trainer.device))
        return df_error(DF_EUNSUPPORTED, "%s: trainer.device=%s: this build of distflow has the %s "
                        "backend only (the CUDA backend is built where CMake finds nvcc and the CUDA "
                        "toolkit: docs/cuda.md)", df_config_where(c, "trainer.device"),
                        t->trainer.device, df_backend_names());
    return DF_OK;
}

/* What messages call the graph's source: the workflow file, or the pipeline's name. */
static void source_of(const df_train_config *t, const df_plan *p, char *out, size_t cap)
{
    if (!strcmp(p->pipeline, "workflow"))
        snprintf(out, cap, "%s", t->dag.workflow_path);
    else if (!strcmp(p->pipeline, "custom"))
        snprintf(out, cap, "custom pipeline '%s'", t->dag.custom_pipeline_fn);
    else
        snprintf(out, cap, "built-in pipeline '%s'", p->pipeline);
}

/* The function a ref names when it is registered (no plugin is loaded to find out), else NULL. */
static df_node_fn known_fn(const char *ref)
{
    df_node_fn fn = NULL;
    if (!ref || df_exec_find(ref, &fn))
        fn = NULL;
    df_clear_error();
    return fn;
}

/* The node's ref: its own, or in a workflow file siiRL's default for its type and role. */
static const char *ref_of(const df_node *n, bool workflow)
{
    return n->executable_ref ? n->executable_ref : workflow ? df_worker_default_exec(n) : NULL;
}

/*
 * Nodes that re-run the nodes before them (df_node_rerun_upstream): DAPO's
 * refill (dynamic_sampling.c, only when filtering is on: off, it passes the
 * batch through) on new prompts, ReMax's baseline (reward_baseline.c) greedily
 * on the step's prompts. A node that trains there would train once per pass;
 * a sampler before the baseline would hand it refill rows that the greedy pass
 * of the step's prompts has no baseline for.
 */
static int check_reruns(const df_config *c, const df_train_config *t, df_task_graph *g, bool workflow,
                        const char *src)
{
    df_node_fn ds = known_fn("DAGWorker.dynamic_sampling"), bl = known_fn("DAGWorker.compute_reward_baseline");
    df_node_fn ta = known_fn("DAGWorker.train_actor"), tc = known_fn("DAGWorker.train_critic");
    const bool filter = t->algorithm.filter_groups.enable;
    int nn = df_task_graph_num_nodes(g);
    bool *up = malloc((size_t)(nn ? nn : 1) * sizeof *up);
    int rc = up ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < nn; i++) {
        const df_node *s = df_task_graph_node_at(g, i);
        df_node_fn sf = known_fn(ref_of(s, workflow));
        if (!sf || !((sf == ds && filter) || sf == bl) || (rc = df_task_graph_ancestors(g, s, up)))
            continue;
        const char *what = sf == ds ? "dynamic sampling refills a step by re-running every node before it on new "
                                      "prompts"
                                    : "the ReMax baseline re-runs every node before it greedily";
        const char *key = sf == ds ? "algorithm.filter_groups.enable" : "algorithm.adv_estimator";
        for (int k = 0; !rc && k < nn; k++) {
            const df_node *a = df_task_graph_node_at(g, k);
            df_node_fn fn = up[k] ? known_fn(ref_of(a, workflow)) : NULL;
            if (fn && (fn == ta || fn == tc))
                rc = df_error(DF_EUNSUPPORTED,
                              "%s node '%s': %s, and node '%s' (%s) trains, so it would train once per pass; "
                              "place the training nodes after it (%s)",
                              src, s->node_id, what, a->node_id, ref_of(a, workflow), df_config_where(c, key));
            else if (fn && fn == ds && filter && sf == bl)
                rc = df_error(DF_EUNSUPPORTED,
                              "%s node '%s': the ReMax baseline comes after dynamic sampling node '%s', whose "
                              "refills are prompts the baseline's greedy pass does not see; place the baseline "
                              "node before the sampling node",
                              src, s->node_id, a->node_id);
        }
    }
    free(up);
    return rc;
}

/*
 * data.gen_batch_size other than train_batch_size (the validator allows it only with
 * filter_groups.enable): a dynamic sampling node must cut each step's generation batches to the
 * train batch, or every later node would get gen_batch_size prompts (verl's plain trainer trains on
 * them all; distflow's mini-batches are sized for train_batch_size).
 */
static int check_gen_batch(const df_config *c, const df_train_config *t, df_task_graph *g, bool workflow,
                           const char *src)
{
    int64_t gbs = t->data.gen_batch_size, tbs = t->data.train_batch_size;
    df_node_fn ds = known_fn("DAGWorker.dynamic_sampling");
    if (gbs == tbs || !t->algorithm.filter_groups.enable)
        return DF_OK;
    for (int i = 0; ds && i < df_task_graph_num_nodes(g); i++)
        if (known_fn(ref_of(df_task_graph_node_at(g, i), workflow)) == ds)
            return DF_OK;
    return df_error(DF_EUNSUPPORTED,
                    "data.gen_batch_size=%lld (%s) differs from data.train_batch_size=%lld (%s), and no node of %s "
                    "runs DAPO's dynamic sampling (DAGWorker.dynamic_sampling), which cuts a step's generation "
                    "batches to the train batch: set algorithm.workflow_type=dapo (%s) or add the node",
                    (long long)gbs, df_config_where(c, "data.gen_batch_size"), (long long)tbs,
                    df_config_where(c, "data.train_batch_size"), src, df_config_where(c, "algorithm.workflow_type"));
}

/* An estimator that needs reward_baselines (ReMax): every advantage node comes after a baseline node. */
static int check_baseline(const df_train_config *t, df_task_graph *g, bool workflow, const char *src)
{
    const df_adv_estimator_desc *d = df_adv_estimator_find(t->algorithm.adv_estimator);
    df_node_fn bl = known_fn("DAGWorker.compute_reward_baseline"), adv = known_fn("DAGWorker.compute_advantage");
    if (!d || !(d->needs & DF_ADV_NEEDS_BASELINES) || !bl || !adv)
        return DF_OK;
    int nn = df_task_graph_num_nodes(g);
    bool *up = malloc((size_t)(nn ? nn : 1) * sizeof *up);
    int rc = up ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < nn; i++) {
        const df_node *a = df_task_graph_node_at(g, i);
        if (known_fn(ref_of(a, workflow)) != adv || (rc = df_task_graph_ancestors(g, a, up)))
            continue;
        bool found = false;
        for (int k = 0; k < nn && !found; k++)
            found = up[k] && known_fn(ref_of(df_task_graph_node_at(g, k), workflow)) == bl;
        if (!found)
            rc = df_error(DF_EINVAL,
                          "%s node '%s': algorithm.adv_estimator=%s needs reward_baselines, the reward of each "
                          "prompt's greedy response; add a node before it, after the reward node: {node_id: "
                          "reward_baseline, node_type: COMPUTE, executable_ref: DAGWorker.compute_reward_baseline, "
                          "dependencies: [<reward node>]}",
                          src, a->node_id, t->algorithm.adv_estimator);
    }
    free(up);
    return rc;
}

/*
 * Agent groups (siiRL MARFT; docs/multi_agent.md). gae_marft needs several, and computes in one
 * advantage node of the last group over every agent's columns (siiRL compute_multi_agent_advantage).
 * A multi-agent graph runs when df_worker_check_agents_run accepts it (agents_check.c), else it is
 * refused naming its node and what it needs of the runtime still missing.
 */
static int check_agents(const df_train_config *t, df_task_graph *g, const df_plan *p, bool workflow,
                        const char *src)
{
    const df_adv_estimator_desc *d = df_adv_estimator_find(t->algorithm.adv_estimator);
    const bool marft = d && (d->needs & DF_ADV_NEEDS_AGENTS);
    const int groups = p->n_agent_groups;
    df_node_fn adv = known_fn("DAGWorker.compute_advantage");
    if (marft && groups < 2)
        return df_error(DF_EINVAL, "algorithm.adv_estimator=%s chains GAE over the agent groups of a multi-agent "
                        "workflow (siiRL MARFT: nodes with agent_group 0, 1, ...); %s has one agent group: use gae",
                        t->algorithm.adv_estimator, src);
    for (int i = 0; marft && i < df_task_graph_num_nodes(g); i++) {
        const df_node *n = df_task_graph_node_at(g, i);
        if (known_fn(ref_of(n, workflow)) == adv && adv && n->agent_group != groups - 1)
            return df_error(DF_EINVAL, "%s node '%s': agent_group %d: algorithm.adv_estimator=%s computes every "
                            "agent's advantages in one node of the last agent group (%d), as siiRL does",
                            src, n->node_id, n->agent_group, t->algorithm.adv_estimator, groups - 1);
    }
    if (t->data.multi_agent && groups < 2)
        return df_error(DF_EINVAL, "data.multi_agent=true, but %s has one agent group (siiRL MARFT: nodes with "
                        "agent_group 0, 1, ...)", src);
    const struct df_train_rollout_multi_turn *mt = &t->actor_rollout_ref.rollout.multi_turn;
    if (mt->max_assistant_turns.set && !mt->enable && !t->dag.env_enable && !df_worker_marft_chained(g, groups))
        return df_error(DF_EINVAL, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns is set but multi_turn.enable "
                        "is false and %s is no chained multi-agent graph (siiRL MARFT: its agents' turns): enable "
                        "multi-turn rollouts or drop it", src);
    return groups > 1 ? df_worker_check_agents_run(t, g, groups, src) : DF_OK;
}

/* Per-node actor_rollout_ref.model.path (agents.c): one per agent group; not with mode=async,
   whose rollout side loads the global path without the graph. */
static int note_model_path(const df_config *c, const df_train_config *t, const df_train_config *mt,
                           const df_node *n, char **paths, const df_node **from, int ng, const char *src)
{
    if (!df_worker_node_sets_model_path(n))
        return DF_OK;
    if (!strcmp(t->actor_rollout_ref.rollout.mode, "async"))
        return df_error(DF_EUNSUPPORTED,
                        "%s node '%s': actor_rollout_ref.model.path cannot be set per node with %s=async (its "
                        "rollout side loads the global model): set the global key",
                        src, n->node_id, df_config_where(c, "actor_rollout_ref.rollout.mode"));
    return df_worker_note_model_path(paths, from, ng, n, mt->actor_rollout_ref.model.path, src);
}

/* A node's own model directory (an agent group's, or its critic's) holds the node's longest sequence
   (max_pos.h); the global directories are preflight's. */
static int node_max_pos(const df_config *merged, const df_train_config *mt, const df_node *n)
{
    const char *A = "actor_rollout_ref.model.path", *C = "critic.model.path";
    const bool actor = df_worker_node_sets_model_path(n), critic = !actor && df_worker_node_sets_critic_path(n);
    if (!actor && !critic)
        return DF_OK;
    df_seq_bound b;
    df_train_seq_bound(merged, mt, &b);
    df_config_overrides ov;
    int rc = df_train_model_overrides(mt, critic, &ov);
    if (!rc)
        rc = df_check_max_pos_dir(actor ? mt->actor_rollout_ref.model.path : mt->critic.model.path, &ov,
                                  df_config_where(merged, actor ? A : C), actor ? A : C, &b);
    df_train_model_overrides_free(&ov);
    return rc;
}

/*
 * Every node: its executable, and (workflow files) its `config:`; rollout nodes
 * sampling at one temperature, the one the actor computes log-probs at
 * (dag_worker.c rollout_temperature); one model directory and one critic model
 * directory per agent group.
 */
static int check_nodes(const df_config *c, const df_train_config *t, df_task_graph *g, bool workflow,
                       const char *src)
{
    df_node_fn gen = NULL;
    if (df_exec_resolve("DAGWorker.generate", &gen))
        return df_error_wrap(DF_EINTERNAL, "the built-in node functions are not registered");
    const df_node *first_gen = NULL;
    double temp = 0;
    int ng = 1, rc = df_task_graph_agent_groups(g, &ng);
    /* per group its model directory, then its critic's: [0, ng) and [ng, 2 ng) */
    char **paths = rc ? NULL : calloc((size_t)ng * 2, sizeof *paths);
    const df_node **from = rc ? NULL : calloc((size_t)ng * 2, sizeof *from);
    if (!rc && (!paths || !from))
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < df_task_graph_num_nodes(g); i++) {
        const df_node *n = df_task_graph_node_at(g, i);
        const char *ref = ref_of(n, workflow);
        if (ref && (rc = df_exec_check(ref))) {
            rc = df_error_wrap(rc, "%s node '%s'", src, n->node_id);
            break;
        }
        df_node_fn fn = known_fn(ref);
        df_config *merged = NULL;
        if (workflow && n->n_config) {
            char where[1200];
            snprintf(where, sizeof where, "%s node '%s'", src, n->node_id);
            rc = df_worker_node_overrides(c, n, ref, where, &merged);
        }
        df_train_config mt; /* the node's own keys over the global ones */
        if (!rc && merged)
            rc = df_train_config_resolve(merged, &mt);
        if (!rc && merged)
            rc = note_model_path(c, t, &mt, n, paths, from, ng, src);
        if (!rc && merged)
            rc = df_worker_note_critic_path(paths + ng, from + ng, ng, n, mt.critic.model.path, src);
        if (!rc && merged)
            rc = node_max_pos(merged, &mt, n);
        double temp_n = (merged ? &mt : t)->actor_rollout_ref.rollout.temperature;
        df_config_free(merged);
        if (rc || fn != gen)
            continue;
        if (first_gen && temp_n != temp)
            rc = df_error(DF_EUNSUPPORTED,
                          "%s: rollout nodes '%s' and '%s' sample at temperatures %g and %g; the actor computes "
                          "log-probs at one temperature",
                          src, first_gen->node_id, n->node_id, temp, temp_n);
        first_gen = n;
        temp = temp_n;
    }
    for (int i = 0; paths && i < 2 * ng; i++)
        free(paths[i]);
    free(paths);
    free(from);
    if (!rc)
        rc = check_baseline(t, g, workflow, src);
    if (!rc)
        rc = check_gen_batch(c, t, g, workflow, src);
    return rc ? rc : check_reruns(c, t, g, workflow, src);
}

/* ---- the plan and the parallel layout ------------------------------------------- */

/* Ranks of the process group a rank of subgraph gi joins: its first grouped node's (the worker's make_groups). */
static int group_size_of(const df_plan *p, int gi, int world)
{
    df_task_graph *g = p->subgraphs[gi];
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        const char *name = df_process_groups_node_group(p->groups, df_task_graph_node_at(g, i)->node_id);
        int n = 0;
        if (name && df_process_groups_find(p->groups, name, &n))
            return n;
    }
    return world; /* no model node: the graph's nodes run on every rank */
}

#define CR "critic."
/*
 * The critic of a subgraph whose ranks form `dp` data-parallel critic ranks
 * (critic_setup.c creates it on the ranks whose graph has a CRITIC node):
 * mini-batches split evenly, the micro-batch keys the worker reads set. With
 * adv_estimator=gae df_config_validate_train checks more (for the actor's DP).
 */
static int check_critic(const df_config *c, const struct df_train_critic *k, int dp)
{
    int64_t samples = k->ppo_mini_batch_size * k->rollout_n;
    if (samples % dp || samples / dp < 1)
        return df_error(DF_EINVAL,
                        "%s: critic.ppo_mini_batch_size x critic.rollout_n = %lld responses do not split "
                        "evenly over the critic's %d data-parallel ranks",
                        df_config_where(c, CR "ppo_mini_batch_size"), (long long)samples, dp);
    static const char *const deprecated[] = {CR "ppo_micro_batch_size", CR "forward_micro_batch_size"};
    const bool set[] = {k->ppo_micro_batch_size.set, k->forward_micro_batch_size.set};
    for (int i = 0; i < 2; i++) /* the validator refuses them with gae; a workflow may add a critic to any estimator */
        if (set[i])
            return df_error(DF_EINVAL, "%s: %s is deprecated and not read by distflow: set %s_per_gpu",
                            df_config_where(c, deprecated[i]), deprecated[i], deprecated[i]);
    if (!k->use_dynamic_bsz && !k->ppo_micro_batch_size_per_gpu.set)
        return df_error(DF_EINVAL,
                        "%s: set critic.ppo_micro_batch_size_per_gpu (or critic.use_dynamic_bsz=true): the "
                        "critic has no micro-batch size",
                        df_config_where(c, CR "ppo_micro_batch_size_per_gpu"));
    return DF_OK;
}
#undef CR

/* df_worker_role_node's choice in a subgraph: a model node of the role, its update (not forward-only) first. */
static const df_node *role_node(df_task_graph *g, df_node_role role, bool forward_ok)
{
    const df_node *found = NULL;
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        const df_node *n = df_task_graph_node_at(g, i);
        bool model = n->node_type == DF_NODE_MODEL_TRAIN || (forward_ok && n->node_type == DF_NODE_MODEL_INFERENCE);
        if (n->node_role != role || !model || (!forward_ok && n->only_forward_compute))
            continue;
        if (!found || !n->only_forward_compute)
            found = n;
    }
    return found;
}

/* fsdp_config.fsdp_size over a role's dp data-parallel ranks (train_core.h df_train_core_shard):
   -1 or >= dp shards AdamW's state over them, 1 keeps it whole; hybrid sharding between is not built. */
static int check_fsdp_size(const df_config *c, const char *key, int64_t v, int dp)
{
    if (v != 0 && (v <= 1 || v >= dp))
        return DF_OK;
    return df_error(DF_EINVAL, "%s=%lld (%s): %s; -1 spreads AdamW's state over the role's %d data-parallel "
                    "ranks, 1 keeps it whole on each (docs/sharding.md)", key, (long long)v, df_config_where(c, key),
                    v == 0 ? "0 is no group size" : "hybrid sharding (shard within groups of this size, "
                    "replicate across them) is not supported", dp);
}

/*
 * The worker's layouts without communicators (parallel.c, critic_setup.c), for
 * the ranks of every subgraph: every model node's model-parallel size divides
 * its group; a subgraph with a critic has a valid critic for its DP size, one
 * without has no trainer.critic_warmup. *actor_dp: the actor's DP size as rank
 * 0 sees it (its group over the actor's model-parallel size) for the batch
 * checks, the same on every rank and in every command.
 */
static int layouts(const df_config *c, const df_train_config *t, const df_plan *p, int world, int *actor_dp)
{
    int rc = DF_OK;
    *actor_dp = 0;
    for (int gi = 0; !rc && gi < p->n_subgraphs; gi++) {
        df_task_graph *g = p->subgraphs[gi];
        int size = group_size_of(p, gi, world);
        for (int i = 0; !rc && i < df_task_graph_num_nodes(g); i++) {
            const df_node *n = df_task_graph_node_at(g, i);
            bool model = n->node_type == DF_NODE_MODEL_TRAIN || n->node_type == DF_NODE_MODEL_INFERENCE;
            int64_t node_mp = 1;
            const char *key = model ? df_worker_mp_key(n->node_role, t, &node_mp) : NULL;
            int mp = key ? (int)node_mp : 1;
            if (key && size % mp)
                rc = df_error(DF_EINVAL, "%s=%d (%s) does not divide the %d ranks running node '%s'", key, mp,
                              df_config_where(c, key), size, n->node_id);
        }
        const df_node *critic = rc ? NULL : role_node(g, DF_ROLE_CRITIC, true);
        int64_t warmup = t->trainer.critic_warmup, critic_mp = 1, actor_mp = 1;
        df_worker_mp_key(DF_ROLE_CRITIC, t, &critic_mp);
        df_worker_mp_key(DF_ROLE_ACTOR, t, &actor_mp);
        if (critic) {
            rc = check_critic(c, &t->critic, size / (int)critic_mp);
            if (!rc)
                rc = check_fsdp_size(c, "critic.model.fsdp_config.fsdp_size",
                                     t->critic.model.fsdp_config.fsdp_size, size / (int)critic_mp);
        } else if (!rc && warmup > 0)
            rc = df_error(DF_EINVAL,
                          "%s: trainer.critic_warmup=%lld needs a critic (algorithm.adv_estimator=gae, "
                          "or a workflow with CRITIC nodes); this graph has none",
                          df_config_where(c, "trainer.critic_warmup"), (long long)warmup);
        const df_node *actor = role_node(g, DF_ROLE_ACTOR, false);
        if (!rc && actor)
            rc = check_fsdp_size(c, "actor_rollout_ref.actor.fsdp_config.fsdp_size",
                                 t->actor_rollout_ref.actor.fsdp_config.fsdp_size, size / (int)actor_mp);
        if (p->schedule->rank_graph[0] == gi) /* no actor update here: every group rank its own DP rank */
            *actor_dp = actor ? size / (int)actor_mp : size;
    }
    return rc;
}

#define KW "custom_reward_function.reward_kwargs."

/* Append "key (where)" to the list in buf[cap] (*len bytes so far, ", " between items); a list
   that does not fit is cut. */
static void append_key(const df_config *c, const char *key, char *buf, size_t cap, size_t *len)
{
    int w = snprintf(buf + *len, cap - *len, "%s%s (%s)", *len ? ", " : "", key, df_config_where(c, key));
    *len = w < 0 || (size_t)w >= cap - *len ? cap - 1 : *len + (size_t)w;
}

/* The group's keys of other names (reward_kwargs.extra) as a JSON object; NULL when out of memory. */
static json_t *extra_kwargs(const struct df_train_custom_reward_function_reward_kwargs *kw)
{
    char *text = NULL;
    if (!kw->extra) /* never null once loaded (DFK_OPEN's default {}); kept safe */
        return json_object();
    if (df_config_map_json(kw->extra, &text))
        return NULL;
    json_t *o = json_loads(text, 0, NULL);
    free(text);
    return o;
}

/* "custom_reward_function.reward_kwargs.a (where), ..." for the extra keys into buf; false when none. */
static bool extra_names(const df_config *c, const struct df_train_custom_reward_function_reward_kwargs *kw,
                        char *buf, size_t cap)
{
    json_t *o = extra_kwargs(kw), *v;
    const char *name;
    size_t len = 0;
    buf[0] = '\0';
    json_object_foreach(o, name, v) {
        char key[512];
        snprintf(key, sizeof key, KW "%s", name);
        append_key(c, key, buf, cap, &len);
    }
    bool any = json_object_size(o) > 0;
    json_decref(o);
    return any;
}

/* The custom_reward_function.reward_kwargs.* the config sets, typed keys and every other one, as
 * the JSON object text a Python reward function gets them in (verl passes its whole reward_kwargs
 * map as keyword arguments). */
static int python_kwargs(const df_config *c, const struct df_train_custom_reward_function_reward_kwargs *kw,
                         char **out)
{
    json_t *o = extra_kwargs(kw);
    if (o && df_config_is_set(c, KW "method"))
        json_object_set_new(o, "method", json_string(kw->method));
    if (o && df_config_is_set(c, KW "format_score"))
        json_object_set_new(o, "format_score", json_real(kw->format_score));
    if (o && df_config_is_set(c, KW "score"))
        json_object_set_new(o, "score", json_real(kw->score));
    if (o && df_config_is_set(c, KW "gsm8k_match"))
        json_object_set_new(o, "gsm8k_match", json_string(kw->gsm8k_match));
    if (o && df_config_is_set(c, KW "strict_box_verify"))
        json_object_set_new(o, "strict_box_verify", json_boolean(kw->strict_box_verify));
    *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return *out ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

/* How reward_model.reward_manager calls a Python reward function (prime: its pool from
 * reward_model.reward_kwargs). */
static int python_opts(const df_config *c, const df_train_config *t, df_reward_python_opts *o)
{
    char *json = NULL;
    int rc = df_config_map_json(t->reward_model.reward_kwargs, &json);
    if (!rc)
        rc = df_reward_python_opts_for(t->reward_model.reward_manager, json, o);
    free(json);
    return rc ? df_error_wrap(rc, "%s: reward_model.reward_kwargs",
                              df_config_where(c, "reward_model.reward_kwargs"))
              : DF_OK;
}

/* verl's custom_reward_function as a Python file: read here; started (a python3 child) into
 * *python when loading, called as reward_model.reward_manager calls it (python_opts). */
static int python_reward(const df_config *c, const df_train_config *t, bool load, df_reward_python **python)
{
    const struct df_train_custom_reward_function *f = &t->custom_reward_function;
    const char *where = df_config_where(c, "custom_reward_function.path");
    char *path = df_expand_user(f->path), *kwargs = NULL; /* ~/reward.py as verl's users write it */
    int rc = path ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    if (!rc && access(path, R_OK))
        rc = df_error(DF_ENOTFOUND, "%s: custom_reward_function.path: cannot read %s: %s", where, path,
                      strerror(errno));
    df_reward_python_opts o;
    if (!rc)
        rc = python_opts(c, t, &o);
    if (!rc && load && !(rc = python_kwargs(c, &f->reward_kwargs, &kwargs)) &&
        (rc = df_reward_python_open(path, f->name, kwargs, &o, python)))
        rc = df_error_wrap(rc, "%s: custom_reward_function.path / .name", where);
    free(kwargs);
    free(path);
    return rc;
}

/* verl's custom_reward_function: `path` a Python file (python_reward) or a shared library
 * exporting the df_reward_fn `name`; checked from the file, or loaded into *score / *python. */
static int custom_reward(const df_config *c, const df_train_config *t, bool load, df_reward_fn *score,
                         df_reward_python **python)
{
    const struct df_train_custom_reward_function *f = &t->custom_reward_function;
    if (!strcmp(t->reward_model.reward_manager, "batch") && !df_reward_python_file(f->path))
        return df_error(DF_EINVAL,
                        "%s: reward_model.reward_manager=batch calls a Python reward function with whole "
                        "batches (verl's BatchRewardManager): set custom_reward_function.path to a .py file",
                        df_config_where(c, "reward_model.reward_manager"));
    const struct df_train_custom_reward_function_reward_kwargs *kw = &f->reward_kwargs;
    char extra[1024];
    bool has_extra = extra_names(c, kw, extra, sizeof extra);
    if (!f->path && has_extra)
        return df_error(DF_EINVAL,
                        "%s: keyword arguments for a Python custom_reward_function, but custom_reward_function.path "
                        "is null: the built-in scorers read only reward_kwargs.method, format_score, score, "
                        "gsm8k_match and strict_box_verify; set the path, or drop the other keys",
                        extra);
    if (!f->path)
        return DF_OK;
    if (df_reward_python_file(f->path))
        return python_reward(c, t, load, python);
    /* the typed keys that change the built-in scorers (their defaults written out are harmless) */
    const struct {
        const char *key;
        bool changed;
    } typed_keys[] = {{KW "method", strcmp(kw->method, "strict")},
                      {KW "format_score", kw->format_score != 0.0},
                      {KW "score", kw->score != 1.0},
                      {KW "gsm8k_match", strcmp(kw->gsm8k_match, "first")},
                      {KW "strict_box_verify", kw->strict_box_verify}};
    char typed[1024] = "";
    size_t len = 0;
    for (size_t i = 0; i < sizeof typed_keys / sizeof *typed_keys; i++)
        if (typed_keys[i].changed)
            append_key(c, typed_keys[i].key, typed, sizeof typed, &len);
    if (len || has_extra)
        return df_error(DF_EINVAL,
                        "%s%s%s: keyword arguments, but custom_reward_function.path (%s) is a library whose "
                        "df_reward_fn takes no keyword arguments: drop the reward_kwargs, or read the settings "
                        "in the library",
                        typed, len && has_extra ? ", " : "", has_extra ? extra : "",
                        df_config_where(c, "custom_reward_function.path"));
    char ref[4200];
    if (snprintf(ref, sizeof ref, "%s:%s", f->path, f->name) >= (int)sizeof ref)
        return df_error(DF_EINVAL, "%s: custom_reward_function.path is too long",
                        df_config_where(c, "custom_reward_function.path"));
    void (*fn)(void) = NULL;
    int rc = load ? df_plugin_symbol(ref, &fn) : df_plugin_check(ref);
    if (rc)
        return df_error_wrap(rc, "%s: custom_reward_function.path / .name",
                             df_config_where(c, "custom_reward_function.path"));
    if (score)
        *score = (df_reward_fn)fn;
    return DF_OK;
}

int df_worker_plugins(const df_config *c, const df_train_config *t, bool load, df_reward_fn *score,
                      df_reward_python **python)
{
    int rc = df_plugin_adv_estimator(t->algorithm.adv_estimator, load);
    if (rc)
        return df_error_wrap(rc, "%s: algorithm.adv_estimator", df_config_where(c, "algorithm.adv_estimator"));
    const char *loss_key = "actor_rollout_ref.actor.policy_loss.loss_mode";
    if ((rc = df_plugin_policy_loss(t->actor_rollout_ref.actor.policy_loss.loss_mode, load)))
        return df_error_wrap(rc, "%s: %s", df_config_where(c, loss_key), loss_key);
    return custom_reward(c, t, load, score, python);
}

/* df_env_spec_load's loader for `config check` / `plan`: the library file is read (the df_env object's
   size and the ABI), no plugin code runs and nothing is registered. */
static int check_env_plugin(const char *ref)
{
    df_env bytes;
    return df_plugin_check_object(ref, sizeof bytes, &bytes);
}

int df_worker_env(const df_config *c, const df_train_config *t, bool load, df_env_spec *spec)
{
    const char *path = t->dag.environment_path;
    if (!t->dag.env_enable)
        return path ? df_error(DF_EINVAL, "%s: dag.environment_path is set but dag.env_enable is false: enable "
                                          "the environment or drop the path", df_config_where(c, "dag.environment_path"))
                    : DF_OK;
    if (!path)
        return df_error(DF_EINVAL, "%s: dag.env_enable needs dag.environment_path (an environment config file, "
                                   "a built-in class such as guess_number, or a plugin ref path/to/libx.so:symbol)",
                        df_config_where(c, "dag.env_enable"));
    df_env_spec s;
    int rc = df_env_spec_load(path, load ? df_plugin_env : check_env_plugin, &s);
    if (rc)
        return df_error_wrap(rc, "%s: dag.environment_path", df_config_where(c, "dag.environment_path"));
    if (spec)
        *spec = s;
    else
        df_env_spec_clear(&s);
    return DF_OK;
}

/* A multi_turn key that only means something with multi_turn.enable, set without it. */
static int multi_turn_unused(const df_config *c, const df_train_config *t)
{
    const struct df_train_rollout_multi_turn *m = &t->actor_rollout_ref.rollout.multi_turn;
    /* max_assistant_turns: also the turns of a chained multi-agent graph (check_agents) */
    const char *key = m->tool_config_path ? "tool_config_path" : m->interaction_config_path ? "interaction_config_path"
                    : m->max_user_turns.set ? "max_user_turns" : NULL;
    char full[96];
    if (!key)
        return DF_OK;
    snprintf(full, sizeof full, "actor_rollout_ref.rollout.multi_turn.%s", key);
    return df_error(DF_EINVAL, "%s: %s is set but multi_turn.enable is false: enable multi-turn rollouts or drop it",
                    df_config_where(c, full), full);
}

static int readable(const df_config *c, const char *key, const char *path)
{
    FILE *f = path ? fopen(path, "r") : NULL;
    if (path && !f)
        return df_error(DF_ENOTFOUND, "%s: %s: cannot open '%s': %s", df_config_where(c, key), key, path, strerror(errno));
    if (f)
        fclose(f);
    return DF_OK;
}

int df_worker_multi_turn(const df_config *c, const df_train_config *t, df_agent_config **agent)
{
    const struct df_train_rollout_multi_turn *m = &t->actor_rollout_ref.rollout.multi_turn;
    if (agent)
        *agent = NULL;
    if (!m->enable && !strcmp(t->actor_rollout_ref.rollout.agent.default_agent_loop, "tool_agent"))
        return df_error(DF_EINVAL, "%s: actor_rollout_ref.rollout.agent.default_agent_loop is tool_agent but the tool loop "
                        "is off: set actor_rollout_ref.rollout.multi_turn.enable (distflow's switch for it)",
                        df_config_where(c, "actor_rollout_ref.rollout.agent.default_agent_loop"));
    if (!m->enable && !t->dag.env_enable)
        return multi_turn_unused(c, t);
    if (m->enable && t->dag.env_enable)
        return df_error(DF_EINVAL, "%s: multi_turn.enable and dag.env_enable are both set: an environment answers the "
                        "model's turns itself; use one of them", df_config_where(c, "dag.env_enable"));
    if (!m->enable && (m->tool_config_path || m->interaction_config_path))
        return multi_turn_unused(c, t);
    if (m->enable && strcmp(m->format, "hermes"))
        return df_error(DF_EUNSUPPORTED, "%s: actor_rollout_ref.rollout.multi_turn.format '%s' is not supported (hermes "
                        "only: <tool_call>{json}</tool_call>)", df_config_where(c, "actor_rollout_ref.rollout.multi_turn.format"),
                        m->format);
    int rc = readable(c, "actor_rollout_ref.rollout.multi_turn.tool_config_path", m->tool_config_path);
    if (!rc)
        rc = readable(c, "actor_rollout_ref.rollout.multi_turn.interaction_config_path", m->interaction_config_path);
    if (rc || !agent)
        return rc;
    df_agent_config *a = calloc(1, sizeof *a);
    df_env_spec env = {0};
    if (!a)
        return df_error(DF_ENOMEM, "out of memory");
    /* an environment's episodes end by its own rules; multi_turn's limits still bound its turns */
    a->max_assistant_turns = m->max_assistant_turns.set ? m->max_assistant_turns.v : 0;
    a->max_user_turns = m->max_user_turns.set ? m->max_user_turns.v : 0;
    a->max_parallel_calls = (int)m->max_parallel_calls;
    a->max_tool_response_length = m->max_tool_response_length;
    a->max_prompt_length = t->data.max_prompt_length;
    a->truncate_side = !strcmp(m->tool_response_truncate_side, "left") ? "left"
                     : !strcmp(m->tool_response_truncate_side, "right") ? "right" : "middle";
    if (t->dag.env_enable)
        rc = df_worker_env(c, t, true, &env);
    if (!rc)
        rc = df_agent_config_load(a, m->tool_config_path, m->interaction_config_path, df_plugin_tool,
                                  df_plugin_interaction, t->dag.env_enable ? &env : NULL);
    df_env_spec_clear(&env);
    if (rc) {
        free(a);
        return df_error_wrap(rc, "%s: actor_rollout_ref.rollout.multi_turn",
                             df_config_where(c, "actor_rollout_ref.rollout.multi_turn.enable"));
    }
    *agent = a;
    return DF_OK;
}

/* Whether a node of g scores responses through the reward registry: the built-in reward node or ReMax's
   baseline (a plugin's reward node scores its own way, so its data_source values need no scorer). */
static bool scores_by_registry(df_task_graph *g, bool workflow)
{
    df_node_fn rw = known_fn("DAGWorker.compute_reward"), bl = known_fn("DAGWorker.compute_reward_baseline");
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        df_node_fn fn = known_fn(ref_of(df_task_graph_node_at(g, i), workflow));
        if (fn && (fn == rw || fn == bl))
            return true;
    }
    return false;
}

/* Whether a node of g runs the embodied sampling filter (embodied_local_rank_sampling). */
static bool has_embodied_sampling(df_task_graph *g, bool workflow)
{
    df_node_fn f = known_fn("embodied.embodied_local_rank_sampling");
    for (int i = 0; f && i < df_task_graph_num_nodes(g); i++)
        if (known_fn(ref_of(df_task_graph_node_at(g, i), workflow)) == f)
            return true;
    return false;
}

/* The checks that read the run's files (preflight.c), for the whole plan's graph. */
static int preflight(const df_config *c, const df_train_config *t, const df_plan *p)
{
    bool workflow = !strcmp(p->pipeline, "workflow");
    /* a reward model scores the training responses instead of the registry (validation keeps it); an
       embodied job's reward is SRPO's */
    return df_train_preflight(c, t, role_node(p->graph, DF_ROLE_CRITIC, true) != NULL,
                              !t->reward_model.enable && !df_embodied_enabled(t) && scores_by_registry(p->graph, workflow));
}

/* A key of async_training / rollout set to something other than its default, or NULL. */
static const char *async_key_set(const df_train_config *t)
{
    static const char *const keys[] = {"async_training.max_staleness", "async_training.max_concurrent_rollouts",
                                       "async_training.consumer_batch_size", "async_training.partial_rollout",
                                       "async_training.recompute_kv", "rollout.n_gpus_per_node"};
    const struct df_train_async_training *a = &t->async_training;
    bool nondefault[] = {a->max_staleness != 0, a->max_concurrent_rollouts.set,
                         a->consumer_batch_size != t->data.train_batch_size, !a->partial_rollout,
                         a->recompute_kv, t->rollout.n_gpus_per_node != 0};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (nondefault[i])
            return keys[i];
    return NULL;
}

/* actor_rollout_ref.rollout.mode=async (workers/dag/async.h): the rollout side's ranks, the batch
 * they share, and what the asynchronous runtime does not run yet. */
static int check_async(const df_config *c, const df_train_config *t)
{
    const char *mode_key = "actor_rollout_ref.rollout.mode";
    if (strcmp(t->actor_rollout_ref.rollout.mode, "async")) {
        const char *k = async_key_set(t);
        return k ? df_error(DF_EINVAL, "%s (%s): read only with %s=async (the asynchronous runtime, docs/async.md); "
                            "%s is sync", k, df_config_where(c, k), mode_key, df_config_where(c, mode_key))
                 : DF_OK;
    }
    int64_t R = t->rollout.nnodes * t->rollout.n_gpus_per_node, B = t->data.train_batch_size;
    const struct df_train_async_training *a = &t->async_training;
    int64_t conc = a->max_concurrent_rollouts.set ? a->max_concurrent_rollouts.v : a->consumer_batch_size;
    const char *why = NULL, *key = NULL;
    if (R < 1)
        key = "rollout.n_gpus_per_node", why = "must be >= 1: the asynchronous runtime runs the rollout on ranks of "
                                               "its own (verl fully-async's rollout.n_gpus_per_node); verl's other mode=async, its default (an AsyncLLM "
                                               "server on the training GPUs), is distflow's mode=sync";
    else if (a->consumer_batch_size != B)
        key = "async_training.consumer_batch_size", why = "must equal data.train_batch_size (null): one consumed "
                                                          "batch is one training step";
    else if (B % R)
        key = "data.train_batch_size", why = "must be a multiple of the rollout ranks (rollout.nnodes x "
                                             "rollout.n_gpus_per_node): each admits its share of every batch";
    else if (conc < R)
        key = "async_training.max_concurrent_rollouts", why = "must be at least the rollout ranks: each runs its share";
    else if (a->recompute_kv && !a->partial_rollout)
        key = "async_training.recompute_kv", why = "has nothing to recompute with async_training.partial_rollout=false "
                                                   "(the weights change only when nothing is in flight)";
    else if (df_embodied_enabled(t))
        key = "actor_rollout_ref.model.model_type", why = "embodied episodes are rolled out on the trainer ranks (the "
                                                          "rollout side's stream runs text episodes only)";
    /* DAPO's refill and ReMax's greedy pass re-run the rollout node, which takes the refill from the
       rollout side and decodes the greedy pass on the trainer side (async_trainer.c) */
    if (key)
        return df_error(DF_EINVAL, "%s (%s) with %s=async: %s", key, df_config_where(c, key), mode_key, why);
    return DF_OK;
}

int df_train_check(const df_config *cfg, int world, df_warn_fn warn, void *user, df_plan **plan_out)
{
    if (plan_out)
        *plan_out = NULL;
    if (world < 1 || world > 1 << 20)
        return df_error(DF_EINVAL, "the job's ranks must be between 1 and 1048576, got %d", world);
    df_plan *p = NULL;
    df_train_config t;
    int rc = df_train_config_resolve(cfg, &t);
    if (!rc)
        rc = check_supported(cfg, &t);
    if (!rc) /* before planning: the estimator's descriptor picks the pipeline */
        rc = df_worker_plugins(cfg, &t, false, NULL, NULL);
    if (!rc)
        rc = df_worker_env(cfg, &t, false, NULL);
    if (!rc)
        rc = df_worker_multi_turn(cfg, &t, NULL);
    if (!rc)
        rc = df_worker_register_nodes();
    if (!rc)
        rc = df_worker_plan(cfg, world, warn, user, &p);
    char src[1300] = "";
    if (!rc) {
        source_of(&t, p, src, sizeof src);
        rc = check_agents(&t, p->graph, p, !strcmp(p->pipeline, "workflow"), src);
    }
    if (!rc) {
        rc = check_nodes(cfg, &t, p->graph, !strcmp(p->pipeline, "workflow"), src);
    }
    int dp = 0;
    if (!rc)
        rc = layouts(cfg, &t, p, world - p->rollout_ranks, &dp);
    if (!rc)
        rc = check_async(cfg, &t);
    if (!rc) /* model_type=embodied and what it needs (workers/embodied/) */
        rc = df_embodied_check(cfg, &t, has_embodied_sampling(p->graph, !strcmp(p->pipeline, "workflow")));
    if (!rc)
        rc = df_config_validate_train_ex(cfg, dp, warn, user);
    if (!rc) /* last: every check of the config itself comes first */
        rc = preflight(cfg, &t, p);
    if (rc || !plan_out)
        df_plan_free(p);
    else
        *plan_out = p;
    return rc;
}

int df_train_plan(const df_config *cfg, int world, df_warn_fn warn, void *user, df_plan **plan)
{
    *plan = NULL;
    if (world < 1 || world > 1 << 20)
        return df_error(DF_EINVAL, "the job's ranks must be between 1 and 1048576, got %d", world);
    int rc = df_worker_register_nodes();
    return rc ? rc : df_worker_plan(cfg, world, warn, user, plan);
}
