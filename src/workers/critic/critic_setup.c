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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define C "critic."

/* critic.model.path as a value model: a causal LM gets a fresh score head, a
 *ForTokenClassification checkpoint (a saved critic) is taken as it is. */
static int load_value_model(df_dag_worker *w, df_model **out)
{
    const df_config *c = w->cfg;
    char *dir = df_expand_user(w->global.cfg.critic.model.path);
    if (!dir)
        return df_error(DF_ENOMEM, "out of memory");
    df_model *m = NULL;
    int rc = df_hf_dir_load(dir, NULL, &m, NULL);
    if (rc)
        rc = df_error_wrap(rc, "%s: critic.model.path", df_config_where(c, C "model.path"));
    int64_t vocab = df_actor_model(w->actor.model)->cfg.vocab_size;
    if (!rc && m->cfg.vocab_size != vocab)
        rc = df_error(
            DF_EINVAL,
            "%s: critic.model.path=%s has vocab_size %lld but the actor (actor_rollout_ref.model.path) "
            "has %lld: the critic reads the actor's token ids",
            df_config_where(c, C "model.path"), dir, (long long)m->cfg.vocab_size, (long long)vocab);
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
    df_model *m = NULL;
    int rc = load_value_model(w, &m);
    if (rc)
        return rc;
    if (warmup >= w->total_steps)
        df_worker_warn(w, "trainer.critic_warmup >= the number of training steps: the actor is never updated");
    df_critic_params p;
    df_worker_critic_params(w, &p);
    if ((rc = df_critic_create(m, &p, &w->critic.model))) {
        df_model_free(m);
        return df_error_wrap(rc, "creating the critic");
    }
    df_critic_set_comm(w->critic.model, w->critic.dp);
    df_backend be; /* trainer.device, as the actor's (docs/cuda.md) */
    if ((rc = df_backend_open(w->global.cfg.trainer.device, &be)) ||
        (rc = df_critic_set_backend(w->critic.model, &be)))
        return df_error_wrap(rc, "%s", df_config_where(c, "trainer.device"));
    return DF_OK;
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
    int rc = state ? df_hf_dir_save(m, m->cfg.torch_dtype, w->tokenizer_dir, dir) : df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = df_critic_save_state(w->critic.model, state);
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
