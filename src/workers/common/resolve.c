/*
 * The DAG worker's configuration, resolved once: the typed keys of the global
 * configuration and of each workflow node with overrides (df_node_settings),
 * and every value derived from several keys or from the workflow — the loss
 * settings, the optimizer schedule, mini-batch sizes in samples, the sampling
 * settings, the actor's log-prob temperature. Nothing else in the worker reads
 * the configuration by key, and nothing derives these values a second time.
 *
 * Types and casts are those the worker has always used (float temperatures
 * from the double keys, int64 step counts), so the numbers are the same bits.
 */
#include "workers/worker_internal.h"

#include "distflow/embodied.h"
#include "workers/common/lora_config.h"
#include "workers/common/precision.h"

#include "distflow/algo_desc.h"

#include <stdio.h>
#include <string.h>

int df_worker_settings_init(df_node_settings *s, const df_config *c)
{
    s->src = c;
    int rc = df_train_config_resolve(c, &s->cfg);
    if (rc)
        return rc;
    df_worker_actor_loss(&s->cfg, &s->actor_loss);
    df_worker_critic_loss(&s->cfg, &s->critic_loss);
    df_sampling_params_defaults(&s->sampling);
    return DF_OK;
}

void df_worker_optim(const struct df_train_optim *o, double grad_clip, int64_t trainer_steps, df_core_optim *out)
{
    memset(out, 0, sizeof *out);
    out->lr = o->lr;
    out->weight_decay = o->weight_decay;
    out->beta1 = o->betas.items[0]; /* the schema requires exactly 2 items */
    out->beta2 = o->betas.items[1];
    out->adam_eps = 1e-8;
    out->schedule = !strcmp(o->warmup_style, "cosine") ? DF_LR_COSINE : DF_LR_CONSTANT;
    out->total_steps = o->total_training_steps > 0 ? o->total_training_steps : trainer_steps;
    out->warmup_steps = o->lr_warmup_steps > 0 ? o->lr_warmup_steps
                                               : (int64_t)(o->lr_warmup_steps_ratio * (double)out->total_steps);
    /* siiRL's OptimizerArguments.min_lr_ratio is Optional; null means the 0.0 default */
    out->min_lr_ratio = o->min_lr_ratio.set ? o->min_lr_ratio.v : 0.0;
    out->num_cycles = o->num_cycles;
    out->grad_clip = grad_clip;
}

void df_worker_actor_loss(const df_train_config *t, df_actor_loss *l)
{
    const struct df_train_actor *a = &t->actor_rollout_ref.actor;
    memset(l, 0, sizeof *l);
    l->ppo_epochs = (int)a->ppo_epochs;
    l->policy_loss = a->policy_loss.loss_mode;
    l->loss_agg_mode = a->loss_agg_mode;
    l->clip_ratio_low = a->clip_ratio_low;
    l->clip_ratio_high = a->clip_ratio_high;
    l->clip_ratio_c = a->clip_ratio_c;
    l->entropy_coeff = a->entropy_coeff;
    l->kl_loss_coef = a->kl_loss_coef;
    l->kl_loss_type = a->kl_loss_type;
    /* the loss an estimator implies in place of vanilla (cpgd: siiRL turns use_cpgd_loss on for it) */
    const df_adv_estimator_desc *est = df_adv_estimator_find(t->algorithm.adv_estimator);
    const char *implied = a->use_cpgd_loss ? "cpgd" : est ? est->policy_loss : NULL;
    if (implied && !strcmp(l->policy_loss, "vanilla"))
        l->policy_loss = implied;
    l->policy_drift_coeff = a->policy_drift_coeff;
    l->loss_agg_norm_length = a->loss_scale_factor.set ? a->loss_scale_factor.v : t->data.max_response_length;
    l->clip_cov_ratio = a->policy_loss.clip_cov_ratio;
    l->clip_cov_lb = a->policy_loss.clip_cov_lb;
    l->clip_cov_ub = a->policy_loss.clip_cov_ub;
    l->kl_cov_ratio = a->policy_loss.kl_cov_ratio;
    l->ppo_kl_coef = a->policy_loss.ppo_kl_coef;
    l->tau_pos = a->tau_pos;
    l->tau_neg = a->tau_neg;
    l->config = a;
}

void df_worker_critic_loss(const df_train_config *t, df_critic_loss *l)
{
    memset(l, 0, sizeof *l);
    l->ppo_epochs = (int)t->critic.ppo_epochs;
    l->cliprange_value = t->critic.cliprange_value;
    l->loss_agg_mode = t->critic.loss_agg_mode;
    l->loss_agg_norm_length = t->data.max_response_length;
}

/* compute_bf16: the role's param_dtype, a notice from rank 0 where the machine has no bf16 kernels. */
static bool compute_bf16(const df_dag_worker *w, const char *key, const char *dtype)
{
    return df_role_compute_bf16(key, dtype, w->global.cfg.trainer.device, w->rank == 0);
}

/* The micro-batch limits of a forward-only log-prob pass: by token budget, or rows (default: the update's). */
static void logprob_limits(bool dyn, const df_config_opt_int *rows, int64_t max_tokens, df_actor_params *p)
{
    p->logprob_micro_batch_size = dyn ? 0 : rows->set ? rows->v : p->micro_batch_size;
    p->logprob_max_token_len = dyn ? max_tokens : 0;
}

/* An embodied episode reaches the actor as its model calls, one row each (workers/embodied/): the
   batch sizes that count samples count episodes, so they span calls x as many rows. */
static int64_t embodied_rows(const df_train_config *t)
{
    if (strcmp(t->actor_rollout_ref.model.model_type, "embodied"))
        return 1;
    return df_embodied_model_calls(t->actor_rollout_ref.embodied.env.max_steps,
                                   (int)t->actor_rollout_ref.embodied.action_chunks_len);
}

int df_worker_lora_config(const df_config *c, const df_train_config *t, df_lora_config *out)
{
    const struct df_train_model *m = &t->actor_rollout_ref.model;
    return df_role_lora_config(c, "actor_rollout_ref.model", m->lora_rank, m->lora_alpha,
                               &m->target_modules, m->lora_adapter_path, m->exclude_modules, m->path, out);
}

int df_worker_critic_lora_config(const df_config *c, const df_train_config *t, df_lora_config *out)
{
    const struct df_train_critic_model *m = &t->critic.model;
    return df_role_lora_config(c, "critic.model", m->lora_rank, m->lora_alpha, &m->target_modules,
                               m->lora_adapter_path, NULL, NULL, out);
}

void df_worker_reference_params(const df_dag_worker *w, const df_actor_params *actor, df_actor_params *p)
{
    const struct df_train_ref *r = &w->global.cfg.actor_rollout_ref.ref;
    *p = *actor;
    p->optim.lora = (df_lora_config){0}; /* frozen: the base model */
    p->router_replay = DF_ROUTER_REPLAY_OFF; /* the reference routes live (ref.router_replay.mode) */
    logprob_limits(r->log_prob_use_dynamic_bsz, &r->log_prob_micro_batch_size_per_gpu, r->log_prob_max_token_len_per_gpu,
                   p);
    if (r->log_prob_micro_batch_size_per_gpu.set) /* else the actor's, scaled already */
        p->logprob_micro_batch_size *= embodied_rows(&w->global.cfg);
    p->bf16 = compute_bf16(w, "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype",
                           r->fsdp_config.mixed_precision.param_dtype);
    /* model_dtype null: verl's bf16 for a model without gradients, where it computes in bf16 (the
       validation refused an explicit bf16 with param_dtype fp32) */
    const char *md = r->fsdp_config.model_dtype;
    p->bf16_weights = p->bf16 && (!md || !strcmp(md, "bf16") || !strcmp(md, "bfloat16"));
    /* verl moves a frozen model's parameters to host memory between passes; here the bf16 copy
       goes to a file and out of memory (docs/mixed_precision.md) */
    p->offload_dir = r->fsdp_config.param_offload ? w->global.cfg.trainer.default_local_dir : NULL;
}

void df_worker_actor_params(const df_dag_worker *w, df_actor_params *p)
{
    const df_train_config *t = &w->global.cfg;
    const struct df_train_actor *a = &t->actor_rollout_ref.actor;
    memset(p, 0, sizeof *p);
    df_worker_optim(&a->optim, a->grad_clip, w->total_steps, &p->optim);
    p->optim.skip_nonfinite = t->trainer.skip_nonfinite_steps;
    p->optim.shard_optim = a->fsdp_config.fsdp_size != 1; /* checked by df_train_check */
    df_worker_lora_config(w->cfg, t, &p->optim.lora); /* checked by df_train_check */
    p->optim.lora_seed = df_worker_seed(w);
    p->optim.lora_adapter = t->actor_rollout_ref.model.lora_adapter_path;
    /* ppo_mini_batch_size counts prompts (verl multiplies it by rollout.n), over all ranks */
    p->mini_batch_size = a->ppo_mini_batch_size * df_worker_n_samples(w) / w->actor.layout.dp_size;
    bool dyn = a->use_dynamic_bsz;
    p->micro_batch_size = dyn ? 0 : a->ppo_micro_batch_size_per_gpu.set ? a->ppo_micro_batch_size_per_gpu.v : 0;
    p->max_token_len = dyn ? a->ppo_max_token_len_per_gpu : 0;
    p->shuffle = a->shuffle;
    p->shuffle_seed = (uint64_t)(a->data_loader_seed.set ? a->data_loader_seed.v : t->trainer.seed);
    const struct df_train_rollout *r = &t->actor_rollout_ref.rollout; /* the old-log-prob pass: verl's rollout keys */
    logprob_limits(r->log_prob_use_dynamic_bsz, &r->log_prob_micro_batch_size_per_gpu,
                   r->log_prob_max_token_len_per_gpu, p);
    p->loss = w->global.actor_loss;
    p->use_kl_loss = a->use_kl_loss;
    p->tis_imp_ratio_cap = a->tis_imp_ratio_cap;
    p->use_decoupled_loss = a->use_decoupled_loss;
    p->behav_imp_weight_cap = a->behav_imp_weight_cap;
    const struct df_train_algorithm_rollout_correction *co = &t->algorithm.rollout_correction;
    p->bypass = co->bypass_mode;
    if (co->bypass_mode) { /* verl's bypass-mode correction, in the loss (validated: these parse) */
        if (df_rollout_is_parse(co->rollout_is, &p->bypass_is_level) ||
            df_rollout_rs_parse(co->rollout_rs, co->rollout_rs_threshold, &p->bypass_rs))
            p->bypass_is_level = 0, p->bypass_rs.n = 0;
        p->bypass_is_threshold = co->rollout_is_threshold;
        p->bypass_reinforce = !strcmp(co->loss_type, "reinforce");
    }
    p->router_replay = !strcmp(a->router_replay.mode, "R2")   ? DF_ROUTER_REPLAY_R2
                       : !strcmp(a->router_replay.mode, "R3") ? DF_ROUTER_REPLAY_R3
                                                              : DF_ROUTER_REPLAY_OFF;
    p->seed = df_worker_seed(w);
    p->temperature = (float)t->actor_rollout_ref.rollout.temperature;
    p->progress_label = w->rank == 0 ? "update_actor" : NULL;
    p->gradient_checkpointing = t->actor_rollout_ref.model.enable_gradient_checkpointing;
    p->bf16 = compute_bf16(w, "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype",
                           a->fsdp_config.mixed_precision.param_dtype);
    const int64_t calls = embodied_rows(t);
    p->mini_batch_size *= calls, p->micro_batch_size *= calls, p->logprob_micro_batch_size *= calls;
}

void df_worker_critic_params(const df_dag_worker *w, df_critic_params *p)
{
    const struct df_train_critic *c = &w->global.cfg.critic;
    memset(p, 0, sizeof *p);
    df_worker_optim(&c->optim, c->grad_clip, w->total_steps, &p->optim);
    p->optim.skip_nonfinite = w->global.cfg.trainer.skip_nonfinite_steps;
    p->optim.shard_optim = c->model.fsdp_config.fsdp_size != 1; /* checked by df_train_check */
    df_worker_critic_lora_config(w->cfg, &w->global.cfg, &p->optim.lora); /* checked by df_train_check */
    p->optim.lora_seed = df_worker_seed(w) + 1; /* other A than the actor's */
    p->optim.lora_adapter = c->model.lora_adapter_path;
    /* prompts x rollout_n over all ranks, divided by the critic's DP size (verl's fsdp critic worker) */
    int dp = w->critic.layout.dp_size > 0 ? w->critic.layout.dp_size : 1;
    p->mini_batch_size = c->ppo_mini_batch_size * c->rollout_n / dp;
    bool dyn = c->use_dynamic_bsz;
    p->micro_batch_size = dyn ? 0 : c->ppo_micro_batch_size_per_gpu.set ? c->ppo_micro_batch_size_per_gpu.v : 0;
    p->max_token_len = dyn ? c->ppo_max_token_len_per_gpu : 0;
    p->shuffle = c->shuffle;
    p->shuffle_seed = (uint64_t)(c->data_loader_seed.set ? c->data_loader_seed.v : w->global.cfg.trainer.seed);
    p->forward_micro_batch_size =
        dyn ? 0 : c->forward_micro_batch_size_per_gpu.set ? c->forward_micro_batch_size_per_gpu.v : p->micro_batch_size;
    p->forward_max_token_len = dyn ? c->forward_max_token_len_per_gpu : 0;
    p->loss = w->global.critic_loss;
    p->progress_label = w->rank == 0 ? "update_critic" : NULL;
    p->gradient_checkpointing = c->model.enable_gradient_checkpointing;
    p->bf16 = compute_bf16(w, "critic.model.fsdp_config.mixed_precision.param_dtype",
                           c->model.fsdp_config.mixed_precision.param_dtype);
}

/* Sampling settings from a rollout block's keys (rollout.* or rollout.val_kwargs.*). */
static void sampling(const df_dag_worker *w, double temperature, int64_t top_k, double top_p, bool do_sample,
                     df_sampling_params *sp)
{
    df_sampling_params_defaults(sp);
    sp->temperature = (float)temperature;
    sp->top_k = (int)top_k;
    sp->top_p = (float)top_p;
    sp->greedy = !do_sample || sp->temperature == 0;
    if (sp->greedy)
        sp->temperature = 1.0f;
    sp->max_new_tokens = w->global.cfg.actor_rollout_ref.rollout.response_length;
    /* ignore_eos (vLLM's): neither the tokenizer's nor the model's end-of-sequence ids stop a response */
    sp->ignore_eos = w->global.cfg.actor_rollout_ref.rollout.ignore_eos;
    if (!sp->ignore_eos)
        sp->stop_ids = df_tokenizer_eos_ids(w->tok, &sp->n_stop);
    /* stop strings, matched on the text the tokenizer gives each token (rollout.stop) */
    const df_config_strs *stop = &w->global.cfg.actor_rollout_ref.rollout.stop;
    sp->stop = stop->n ? stop->items : NULL;
    sp->n_stop_str = stop->n;
    sp->tokenizer = stop->n ? w->tok : NULL;
}

static void rollout_sampling(const df_dag_worker *w, df_node_settings *s)
{
    const struct df_train_rollout *r = &s->cfg.actor_rollout_ref.rollout;
    sampling(w, r->temperature, r->top_k, r->top_p, r->do_sample, &s->sampling);
}

/*
 * Log-probs at another temperature than the sampler's would make old_log_probs
 * and the PPO ratio disagree with the rollout (a workflow's rollout node
 * overriding the temperature).
 */
int df_worker_actor_temperature(const df_dag_worker *w, float *t)
{
    const df_node *first = NULL;
    df_node_fn gen;
    int rc = df_exec_resolve("DAGWorker.generate", &gen);
    *t = (float)w->global.cfg.actor_rollout_ref.rollout.temperature;
    for (int i = 0; !rc && i < df_task_graph_num_nodes(w->graph); i++) {
        const df_node *n = df_task_graph_node_at(w->graph, i);
        if (n->fn != gen)
            continue;
        float nt = (float)df_worker_node_settings(w, n)->cfg.actor_rollout_ref.rollout.temperature;
        if (first && nt != *t)
            return df_error(DF_EUNSUPPORTED,
                            "rollout nodes '%s' and '%s' sample at temperatures %g and %g; the actor "
                            "computes log-probs at one temperature",
                            first->node_id, n->node_id, (double)*t, (double)nt);
        first = n;
        *t = nt;
    }
    return rc;
}

int df_worker_resolve(df_dag_worker *w, df_actor_params *actor)
{
    rollout_sampling(w, &w->global);
    for (int i = 0; i < w->n_node_set; i++)
        if (w->node_set[i])
            rollout_sampling(w, w->node_set[i]);
    const struct df_train_rollout_val_kwargs *v = &w->global.cfg.actor_rollout_ref.rollout.val_kwargs;
    sampling(w, v->temperature, v->top_k, v->top_p, v->do_sample, &w->rollout.val_sp);
    if (!actor)
        return DF_OK;
    df_worker_actor_params(w, actor);
    return df_worker_actor_temperature(w, &actor->temperature);
}
