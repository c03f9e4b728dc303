/*
 * Agent groups in the DAG worker (docs/multi_agent.md, "Design: agent groups in the DAG
 * worker"): one slot of role workers per agent_group of the plan, and the lookup that sends a
 * node to its group's slot. Slot 0 is the single-agent job's own workers, so a graph of one group
 * runs exactly as before.
 */
#include "workers/worker_internal.h"
#include "workers/dag/marft_run.h"

#include "engine/hf_dir.h"
#include "util/fsutil.h"
#include "workers/common/model_overrides.h"

#include <stdio.h>
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
        df_actor_free(o->actor.model); /* its dp communicator is slot 0's */
        df_actor_free(o->reference.model);
        df_critic_free(o->critic.model); /* its dp communicator is slot 0's too */
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

int df_worker_agent_metrics(df_dag_worker *w, const df_node *next)
{
    if (w->n_agents <= 1 || !w->metrics)
        return DF_OK;
    int rc = DF_OK;
    if (w->metrics_group >= 0) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "agent_%d_", w->metrics_group);
        rc = df_metrics_prefix_from(w->metrics, w->metrics_mark, prefix);
    }
    w->metrics_group = next ? next->agent_group : -1;
    w->metrics_mark = df_metrics_count(w->metrics);
    return rc;
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

bool df_worker_node_sets_critic_path(const df_node *n)
{
    bool model = n->node_type == DF_NODE_MODEL_TRAIN || n->node_type == DF_NODE_MODEL_INFERENCE;
    for (int i = 0; model && n->node_role == DF_ROLE_CRITIC && i < n->n_config; i++)
        if (!strcmp(n->config_keys[i], "model.path") || !strcmp(n->config_keys[i], "critic.model.path"))
            return true;
    return false;
}

/* One model directory per agent group for `key`, from the nodes that set it (`sets`). */
static int note_path(char **paths, const df_node **from, int n_groups, const df_node *n, const char *path,
                     const char *src, bool sets, const char *key, const char *roles)
{
    int g = n->agent_group;
    if (!sets || g < 0 || g >= n_groups)
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
                    "%s: nodes '%s' and '%s' of agent_group %d set %s to %s and %s; the %s nodes of a group "
                    "share one model (docs/multi_agent.md)",
                    src, from[g]->node_id, n->node_id, g, key, paths[g], path, roles);
}

int df_worker_note_model_path(char **paths, const df_node **from, int n_groups, const df_node *n, const char *path,
                              const char *src)
{
    return note_path(paths, from, n_groups, n, path, src, df_worker_node_sets_model_path(n),
                     "actor_rollout_ref.model.path", "rollout, actor and reference");
}

int df_worker_note_critic_path(char **paths, const df_node **from, int n_groups, const df_node *n, const char *path,
                               const char *src)
{
    return note_path(paths, from, n_groups, n, path, src, df_worker_node_sets_critic_path(n), "critic.model.path",
                     "critic");
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
    /* a later group's slot owns its workers, its directory its nodes' path or the global one */
    for (int g = 1; !rc && g < w->n_agents; g++) {
        df_agent_slot *s = &w->agents[g];
        df_agent_own *o = s->own = calloc(1, sizeof *o);
        if (!o) {
            rc = df_error(DF_ENOMEM, "out of memory");
            break;
        }
        rc = expand_into(paths[g] ? paths[g] : w->model_dir, o->model_dir, sizeof o->model_dir);
        *s = (df_agent_slot){.group = g, .rollout = &o->rollout, .actor = &o->actor, .reference = &o->reference,
                             .critic = &o->critic, .model_dir = o->model_dir, .tokenizer_dir = w->tokenizer_dir,
                             .own = o};
    }
    if (!rc) /* agent_options.share_instance: another group's worker of the role */
        df_worker_apply_shares(w);
    /* group 0's directory is the worker's own */
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

/* ---- the models of the groups beyond 0 ---- */

/* Whether slot s's model directory holds group 0's tokenizer (or data.tokenizer names the one for all). */
static int same_tokenizer(const df_dag_worker *w, const df_agent_slot *s, bool *same)
{
    *same = true;
    if (w->global.cfg.data.tokenizer || !strcmp(s->model_dir, w->tokenizer_dir))
        return DF_OK;
    char pa[1100], pb[1100], *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    snprintf(pa, sizeof pa, "%s/tokenizer.json", w->tokenizer_dir);
    snprintf(pb, sizeof pb, "%s/tokenizer.json", s->model_dir);
    int rc = df_read_file(pa, &a, &na);
    if (!rc)
        rc = df_read_file(pb, &b, &nb);
    *same = !rc && na == nb && !memcmp(a, b, na);
    free(a);
    free(b);
    return rc;
}

/* Slot s's tokenizer: group 0's, or in a chained graph (each agent renders its own prompts and
   decodes its own answers) the group's own when its model directory holds another. Independent
   groups read the prompts group 0's tokenizer encoded: another is refused. */
static int slot_tokenizer(df_dag_worker *w, df_agent_slot *s)
{
    bool same;
    int rc = same_tokenizer(w, s, &same);
    s->tok = w->tok;
    if (rc || same)
        return rc;
    if (!df_worker_marft_chained(w->graph, w->n_agents))
        return df_error(DF_EUNSUPPORTED,
                        "agent group %d: its model %s has another tokenizer than agent group 0's (%s); agent groups "
                        "that each sample the step's prompts share group 0's tokenizer (in siiRL's chained layout "
                        "each agent has its own: docs/multi_agent.md): use models of one tokenizer, or set "
                        "data.tokenizer",
                        s->group, s->model_dir, w->tokenizer_dir);
    if (w->global.cfg.actor_rollout_ref.model.custom_chat_template)
        return df_error(DF_EUNSUPPORTED, "agent group %d renders with its own tokenizer (%s), and "
                        "actor_rollout_ref.model.custom_chat_template replaces group 0's template only: drop the key, "
                        "or give the groups one tokenizer (data.tokenizer)", s->group, s->model_dir);
    if ((rc = df_tokenizer_load(s->model_dir, &s->own->tok)))
        return df_error_wrap(rc, "agent group %d's tokenizer", s->group);
    s->tok = s->own->tok;
    return DF_OK;
}

/* trainer.device for a model the slot owns (a shared one is its owner's, set up already). */
static int set_device(df_dag_worker *w, df_actor *a)
{
    df_backend be;
    int rc = df_backend_open(w->global.cfg.trainer.device, &be);
    if (!rc)
        rc = df_actor_set_backend(a, &be);
    return rc ? df_error_wrap(rc, "%s", df_config_where(w->cfg, "trainer.device")) : DF_OK;
}

/* Slot s's actor (taking m) and rollout engine, with group 0's settings p and its data-parallel
   group (the groups share the ranks of the plan). */
static int setup_actor(df_dag_worker *w, df_agent_slot *s, df_model *m, const df_actor_params *p)
{
    int rc = df_actor_create(m, p, true, &s->actor->model);
    if (rc) {
        df_model_free(m);
        return rc;
    }
    s->actor->layout = w->actor.layout;
    df_actor_set_comm(s->actor->model, w->actor.dp); /* borrowed: slot 0 owns it */
    rc = set_device(w, s->actor->model);
    return rc ? rc : df_worker_create_rollout(w, s, &df_actor_model(s->actor->model)->cfg, p->bf16);
}

/* Slot s's frozen reference (taking ref). */
static int setup_reference(df_dag_worker *w, df_agent_slot *s, df_model *ref, const df_actor_params *p)
{
    df_actor_params rp;
    df_worker_reference_params(w, p, &rp);
    rp.offload_dir = NULL; /* one offload file per job: the groups' references stay in memory */
    int rc = df_actor_create(ref, &rp, false, &s->reference->model);
    if (rc) {
        df_model_free(ref);
        return rc;
    }
    return set_device(w, s->reference->model);
}

/* What slot s owns of its actor (with its rollout engine: they share together) and reference,
   from its model directory; a shared role is its owner's already. */
static int setup_slot(df_dag_worker *w, df_agent_slot *s, const df_actor_params *p)
{
    bool own_actor = s->actor == &s->own->actor;
    bool own_ref = s->reference == &s->own->reference &&
                   (p->use_kl_loss || w->global.cfg.algorithm.use_kl_in_reward);
    if (!own_actor && !own_ref)
        return DF_OK;
    df_model *m = NULL, *ref = NULL;
    df_actor_params rp;
    df_worker_reference_params(w, p, &rp);
    rp.offload_dir = NULL; /* as setup_reference's */
    const bool in_actor = own_actor && own_ref && df_worker_ref_in_actor(p, &rp);
    /* the ids of the slot's tokenizer must fit the model's embedding */
    df_config_overrides ov;
    int rc = df_train_model_overrides(&w->global.cfg, false, &ov);
    if (!rc)
        rc = df_hf_dir_load(s->model_dir, s->tok == w->tok ? w->tokenizer_dir : s->model_dir, &ov, &m, NULL);
    df_train_model_overrides_free(&ov);
    if (rc)
        return df_error_wrap(rc, "actor_rollout_ref.model.path");
    if (!rc && own_ref && !own_actor) { /* a shared actor: the reference is the directory's model */
        ref = m;
        m = NULL;
    } else if (!rc && own_ref && !in_actor && (rc = df_model_clone(m, &ref))) {
        df_model_free(m);
        return rc;
    }
    if (!rc && own_actor) {
        rc = setup_actor(w, s, m, p);
        m = NULL;
    }
    if (!rc && own_ref && in_actor) /* a LoRA actor is its own reference */
        *s->reference = (df_reference_worker){.in_actor = s->actor->model, .params = rp};
    if (ref) {
        if (!rc)
            rc = setup_reference(w, s, ref, p);
        else
            df_model_free(ref);
    }
    df_model_free(m);
    return rc;
}

int df_worker_setup_agent_models(df_dag_worker *w, const df_actor_params *p)
{
    int rc = DF_OK;
    for (int g = 1; !rc && g < w->n_agents; g++) {
        df_agent_slot *s = &w->agents[g];
        rc = s->own ? slot_tokenizer(w, s) : DF_OK;
        if (!rc)
            rc = setup_slot(w, s, p);
        if (rc)
            rc = df_error_wrap(rc, "agent group %d (%s)", g, s->model_dir);
    }
    return rc;
}
