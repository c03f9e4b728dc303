/*
 * The DAG worker's PPO critic: its settings (critic.*), its data-parallel
 * group, loading critic.model.path as a value model, its checkpoint directory
 * and trainer.critic_warmup. Created only when the worker's graph has a
 * CRITIC node (the built-in ppo pipeline, selected by adv_estimator=gae, or a
 * workflow naming compute_value / train_critic).
 */
#include "workers/worker_internal.h"
#include "distflow/backend.h"

#include "engine/hf_dir.h"
#include "util/fsutil.h"
#include "workers/common/model_overrides.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define C "critic."

/* Whether agent group grp has a CRITIC model node of its own (not sharing another group's). */
static bool group_has_critic(const df_dag_worker *w, int grp)
{
    for (int i = 0; i < df_task_graph_num_nodes(w->graph); i++) {
        const df_node *n = df_task_graph_node_at(w->graph, i);
        bool model = n->node_type == DF_NODE_MODEL_TRAIN || n->node_type == DF_NODE_MODEL_INFERENCE;
        if (n->agent_group == grp && n->node_role == DF_ROLE_CRITIC && model &&
            !(n->agent_options && n->agent_options->share_instance >= 0))
            return true;
    }
    return false;
}

const char *df_worker_group_critic_path(const df_dag_worker *w, int grp)
{
    for (int i = 0; w->graph && i < df_task_graph_num_nodes(w->graph); i++) {
        const df_node *n = df_task_graph_node_at(w->graph, i);
        if (n->agent_group == grp && df_worker_node_sets_critic_path(n))
            return df_worker_node_settings(w, n)->cfg.critic.model.path;
    }
    return w->global.cfg.critic.model.path;
}

/* Where agent group grp's critic path comes from, for messages: the global key or its nodes. */
static void path_where(const df_dag_worker *w, int grp, char *out, size_t cap)
{
    if (df_worker_group_critic_path(w, grp) == w->global.cfg.critic.model.path)
        snprintf(out, cap, "%s: critic.model.path", df_config_where(w->cfg, C "model.path"));
    else
        snprintf(out, cap, "%s: agent group %d's CRITIC nodes: critic.model.path",
                 df_config_where(w->cfg, "dag.workflow_path"), grp);
}

/* Agent group s's critic model as a value model: a causal LM gets a fresh score head, a
 *ForTokenClassification checkpoint (a saved critic) is taken as it is. */
static int load_value_model(df_dag_worker *w, const df_agent_slot *s, df_model **out)
{
    char where[1400];
    path_where(w, s->group, where, sizeof where);
    char *dir = df_expand_user(df_worker_group_critic_path(w, s->group));
    if (!dir)
        return df_error(DF_ENOMEM, "out of memory");
    df_model *m = NULL;
    df_config_overrides ov;
    int rc = df_train_model_overrides(&w->global.cfg, true, &ov);
    if (!rc)
        rc = df_hf_dir_load(dir, NULL, &ov, &m, NULL);
    df_train_model_overrides_free(&ov);
    if (rc)
        rc = df_error_wrap(rc, "%s", where);
    int64_t vocab = df_actor_model(s->actor->model)->cfg.vocab_size;
    if (!rc && m->cfg.vocab_size != vocab)
        rc = df_error(DF_EINVAL,
                      "%s=%s has vocab_size %lld but agent group %d's actor (actor_rollout_ref.model.path) has "
                      "%lld: the critic reads the actor's token ids",
                      where, dir, (long long)m->cfg.vocab_size, s->group, (long long)vocab);
    /* verl loads the critic as AutoModelForTokenClassification(num_labels=1); the head is seeded by
       trainer.seed, so every rank draws the same one */
    if (!rc && m->cfg.num_labels == 0)
        rc = df_model_to_value_model(&m, df_worker_seed(w));
    free(dir);
    if (rc) {
        df_model_free(m);
        return rc;
    }
    *out = m;
    return DF_OK;
}

/* Slot s's critic from its value model, with group 0's critic settings and data-parallel group. */
static int create_critic(df_dag_worker *w, const df_agent_slot *s)
{
    df_model *m = NULL;
    int rc = load_value_model(w, s, &m);
    if (rc)
        return rc;
    df_critic_params p;
    df_worker_critic_params(w, &p);
    if ((rc = df_critic_create(m, &p, &s->critic->model))) {
        df_model_free(m);
        return df_error_wrap(rc, "creating the critic");
    }
    s->critic->layout = w->critic.layout;
    df_critic_set_comm(s->critic->model, w->critic.dp); /* slot 0 owns it */
    df_backend be; /* trainer.device, as the actor's (docs/cuda.md) */
    if ((rc = df_backend_open(w->global.cfg.trainer.device, &be)) ||
        (rc = df_critic_set_backend(s->critic->model, &be)))
        return df_error_wrap(rc, "%s", df_config_where(w->cfg, "trainer.device"));
    return DF_OK;
}

int df_worker_setup_critic(df_dag_worker *w)
{
    const df_config *c = w->cfg;
    int64_t warmup = w->global.cfg.trainer.critic_warmup;
    if (df_worker_role_node(w, DF_ROLE_CRITIC, true) < 0)
        return warmup > 0
                   ? df_error(DF_EINVAL,
                              "%s: trainer.critic_warmup=%lld needs a critic (algorithm.adv_estimator=gae, "
                              "or a workflow with CRITIC nodes); this graph has none",
                              df_config_where(c, "trainer.critic_warmup"), (long long)warmup)
                   : DF_OK;
    /* the critic's batch sizes were checked by df_train_check (train_check.c), for every rank */
    if (warmup >= w->total_steps)
        df_worker_warn(w, "trainer.critic_warmup >= the number of training steps: the actor is never updated");
    if (!group_has_critic(w, 0)) /* a multi-agent graph whose later groups alone have critics */
        return DF_OK;
    df_agent_slot s0 = df_worker_slot(w, NULL);
    return create_critic(w, &s0);
}

int df_worker_setup_agent_critics(df_dag_worker *w)
{
    int rc = DF_OK;
    for (int g = 1; !rc && g < w->n_agents; g++) {
        df_agent_slot *s = &w->agents[g];
        if (s->critic == &s->own->critic && group_has_critic(w, g) && (rc = create_critic(w, s)))
            rc = df_error_wrap(rc, "agent group %d", g);
    }
    return rc;
}

void df_worker_free_critic(df_dag_worker *w)
{
    df_critic_free(w->critic.model);
    w->critic.model = NULL;
    df_comm_free(w->critic.dp);
    w->critic.dp = NULL;
}

int df_worker_save_critic(df_dag_worker *w, const char *step_dir)
{
    if (!w->critic.model || w->rank != 0)
        return DF_OK;
    char *dir = df_path_join(step_dir, "critic");
    char *state = dir ? df_path_join(dir, "train_state.safetensors") : NULL;
    const df_model *m = df_critic_model(w->critic.model);
    int rc = state ? df_hf_dir_save(m, m->cfg.torch_dtype, w->tokenizer_dir, df_worker_saved_chat_template(w), dir)
                   : df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = df_critic_save_state(w->critic.model, state);
    if (!rc)
        rc = df_critic_save_lora(w->critic.model, dir, w->global.cfg.critic.model.path);
    free(state);
    free(dir);
    return rc;
}

int df_worker_load_critic(df_dag_worker *w, const char *step_dir)
{
    if (!w->critic.model)
        return DF_OK;
    char *state = df_path_join(step_dir, "critic/train_state.safetensors");
    int rc = state ? df_critic_load_state(w->critic.model, state) : df_error(DF_ENOMEM, "out of memory");
    free(state);
    return rc;
}

int df_worker_check_critic_weights(df_dag_worker *w, df_metrics *m)
{
    return w->critic.model ? df_worker_check_in_sync(w, df_critic_model(w->critic.model), "critic", m) : DF_OK;
}
