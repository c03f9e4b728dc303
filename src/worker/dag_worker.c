/* The DAG worker: setup from the config, the training loop, validation, checkpoints. */
#include "worker/worker_internal.h"

#include "distflow/scheduler.h"
#include "engine/hf_dir.h"
#include "util/fsutil.h"
#include "util/timeutil.h"
#include "worker/data_metrics.h"
#include "worker/evaluate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A config path with "~/" expanded, into a fixed buffer. */
static int expand_path(const char *in, char *out, size_t cap)
{
    char *p = df_expand_user(in);
    if (!p)
        return df_error(DF_ENOMEM, "out of memory");
    int n = snprintf(out, cap, "%s", p);
    free(p);
    return n < 0 || (size_t)n >= cap ? df_error(DF_EINVAL, "path too long: %s", in) : DF_OK;
}

void df_worker_optim(const df_dag_worker *w, const df_config *c, const char *role, df_core_optim *o)
{
    char k[128];
#define K(suffix) (snprintf(k, sizeof k, "%s%s", role, suffix), k)
    memset(o, 0, sizeof *o);
    o->lr = df_config_float(c, K("optim.lr"));
    o->weight_decay = df_config_float(c, K("optim.weight_decay"));
    o->beta1 = df_config_list_float_at(c, K("optim.betas"), 0);
    o->beta2 = df_config_list_float_at(c, K("optim.betas"), 1);
    o->adam_eps = 1e-8;
    o->cosine = !strcmp(df_config_str(c, K("optim.warmup_style")), "cosine");
    int64_t total = df_config_int(c, K("optim.total_training_steps"));
    o->total_steps = total > 0 ? total : w->total_steps;
    int64_t warm = df_config_int(c, K("optim.lr_warmup_steps"));
    o->warmup_steps = warm > 0 ? warm
                               : (int64_t)(df_config_float(c, K("optim.lr_warmup_steps_ratio")) *
                                           (double)o->total_steps);
    /* siiRL's OptimizerArguments.min_lr_ratio is Optional; null means the 0.0 default */
    o->min_lr_ratio = df_config_is_null(c, K("optim.min_lr_ratio")) ? 0.0
                                                                    : df_config_float(c, K("optim.min_lr_ratio"));
    o->num_cycles = df_config_float(c, K("optim.num_cycles"));
    o->grad_clip = df_config_float(c, K("grad_clip"));
#undef K
}

#define A "actor_rollout_ref.actor."
void df_worker_actor_loss(const df_config *c, df_actor_loss *l)
{
    memset(l, 0, sizeof *l);
    l->ppo_epochs = (int)df_config_int(c, A "ppo_epochs");
    l->policy_loss = df_config_str(c, A "policy_loss.loss_mode");
    l->loss_agg_mode = df_config_str(c, A "loss_agg_mode");
    l->clip_ratio_low = df_config_float(c, A "clip_ratio_low");
    l->clip_ratio_high = df_config_float(c, A "clip_ratio_high");
    l->clip_ratio_c = df_config_float(c, A "clip_ratio_c");
    l->entropy_coeff = df_config_float(c, A "entropy_coeff");
    l->kl_loss_coef = df_config_float(c, A "kl_loss_coef");
    l->kl_loss_type = df_config_str(c, A "kl_loss_type");
    /* siiRL turns use_cpgd_loss on for adv_estimator=cpgd; distflow's CPGD is a policy loss */
    bool cpgd = df_config_bool(c, A "use_cpgd_loss") ||
                !strcmp(df_config_str(c, "algorithm.adv_estimator"), "cpgd");
    if (cpgd && !strcmp(l->policy_loss, "vanilla"))
        l->policy_loss = "cpgd";
    l->policy_drift_coeff = df_config_float(c, A "policy_drift_coeff");
    l->loss_agg_norm_length =
        df_worker_int_or(c, A "loss_scale_factor", df_config_int(c, "data.max_response_length"));
    l->clip_cov_ratio = df_config_float(c, A "policy_loss.clip_cov_ratio");
    l->clip_cov_lb = df_config_float(c, A "policy_loss.clip_cov_lb");
    l->clip_cov_ub = df_config_float(c, A "policy_loss.clip_cov_ub");
    l->kl_cov_ratio = df_config_float(c, A "policy_loss.kl_cov_ratio");
    l->ppo_kl_coef = df_config_float(c, A "policy_loss.ppo_kl_coef");
}

void df_worker_actor_params(const df_dag_worker *w, const df_config *c, df_actor_params *p)
{
    memset(p, 0, sizeof *p);
    df_worker_optim(w, c, A, &p->optim);
    /* ppo_mini_batch_size counts prompts (verl multiplies it by rollout.n), over all ranks */
    p->mini_batch_size = df_config_int(c, A "ppo_mini_batch_size") * w->n_samples / w->actor_layout.dp_size;
    bool dyn = df_config_bool(c, A "use_dynamic_bsz");
    p->micro_batch_size = dyn ? 0 : df_worker_int_or(c, A "ppo_micro_batch_size_per_gpu", 0);
    p->max_token_len = dyn ? df_config_int(c, A "ppo_max_token_len_per_gpu") : 0;
    p->logprob_micro_batch_size =
        dyn ? 0 : df_worker_int_or(c, "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                             p->micro_batch_size);
    p->logprob_max_token_len = p->max_token_len;
    df_worker_actor_loss(c, &p->loss);
    p->use_kl_loss = df_config_bool(c, A "use_kl_loss");
    p->tis_imp_ratio_cap = df_config_float(c, A "tis_imp_ratio_cap");
    p->seed = w->seed;
    p->temperature = (float)df_config_float(c, "actor_rollout_ref.rollout.temperature");
    p->progress_label = w->rank == 0 ? "update_actor" : NULL;
}
#undef A

void df_worker_sampling(const df_dag_worker *w, const df_config *c, const char *prefix,
                        df_sampling_params *sp)
{
    char k[128];
    df_sampling_params_defaults(sp);
#define KEY(x) (snprintf(k, sizeof k, "%s%s", prefix, x), k)
    sp->temperature = (float)df_config_float(c, KEY("temperature"));
    sp->top_k = (int)df_config_int(c, KEY("top_k"));
    sp->top_p = (float)df_config_float(c, KEY("top_p"));
    sp->greedy = !df_config_bool(c, KEY("do_sample")) || sp->temperature == 0;
#undef KEY
    if (sp->greedy)
        sp->temperature = 1.0f;
    sp->max_new_tokens = w->max_response_len;
    sp->stop_ids = df_tokenizer_eos_ids(w->tok, &sp->n_stop);
}

/* Load a dataset list, encode its prompts and apply data.max_prompt_length. */
static int load_data(df_dag_worker *w, const char *key, df_dataset **ds, df_prompt_cache *pc)
{
    const df_config *c = w->cfg;
    int n = df_config_list_len(c, key);
    char **paths = calloc((size_t)(n ? n : 1), sizeof *paths);
    int rc = paths ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        char buf[4096];
        rc = expand_path(df_config_list_at(c, key, i), buf, sizeof buf);
        if (!rc && !(paths[i] = strdup(buf)))
            rc = df_error(DF_ENOMEM, "out of memory");
    }
    /* this rank's shard: the first stage's DP rank (its model-parallel replicas read the same) */
    df_dataset_opts o = {.prompt_key = df_config_str(c, "data.prompt_key"),
                         .shard_index = w->data_layout.dp_rank, .shard_count = w->data_layout.dp_size};
    if (!rc)
        rc = df_dataset_load((const char *const *)paths, n, &o, ds);
    const char *max_key = strcmp(key, "data.train_files") ? "data.val_max_samples" : "data.train_max_samples";
    int64_t max_rows = df_config_int(c, max_key);
    if (!rc && df_dataset_head(*ds, max_rows) < 0)
        rc = DF_ENOMEM;
    if (!rc)
        rc = df_prompts_encode(*ds, w->tok, pc);
    int64_t dropped = 0, before = rc ? 0 : df_dataset_size(*ds);
    if (!rc)
        rc = df_prompts_limit(*ds, pc, w->max_prompt_len, df_config_bool(c, "data.filter_overlong_prompts"),
                              df_config_str(c, "data.truncation"), &dropped);
    int64_t counts[2] = {before - dropped, dropped}; /* over the job: each shard counted once */
    if (w->data_layout.mp_rank != 0)
        counts[0] = counts[1] = 0;
    if (!rc)
        rc = df_comm_allreduce(w->group, counts, 2, DF_COMM_INT64, DF_COMM_SUM);
    if (!rc && w->rank == 0)
        fprintf(stderr, "[distflow] %s: %lld prompts (%lld longer than data.max_prompt_length=%lld filtered)\n",
                key, (long long)counts[0], (long long)counts[1], (long long)w->max_prompt_len);
    for (int i = 0; paths && i < n; i++)
        free(paths[i]);
    free(paths);
    return rc ? df_error_wrap(rc, "%s", key) : DF_OK;
}

static int agree_rows(df_dag_worker *w)
{
    int64_t r = df_dataloader_rows_available(w->dl);
    int rc = df_comm_allreduce(w->group, &r, 1, DF_COMM_INT64, DF_COMM_MIN);
    return rc ? rc : df_dataloader_set_rows_per_rank(w->dl, r);
}

/*
 * The temperature the actor and reference compute log-probs at: the one the
 * rollout samples with, which a workflow's rollout node may override
 * (node_config.c). Log-probs at another temperature would make old_log_probs
 * and the PPO ratio disagree with the sampler. Rollout nodes that sample at
 * different temperatures are refused: the actor has one.
 */
static int rollout_temperature(const df_dag_worker *w, float *t)
{
    const char *key = "actor_rollout_ref.rollout.temperature";
    const df_node *first = NULL;
    df_node_fn gen;
    int rc = df_exec_resolve("DAGWorker.generate", &gen);
    *t = (float)df_config_float(w->cfg, key);
    for (int i = 0; !rc && i < df_task_graph_num_nodes(w->graph); i++) {
        const df_node *n = df_task_graph_node_at(w->graph, i);
        if (n->fn != gen)
            continue;
        float nt = (float)df_config_float(df_worker_node_config(w, n), key);
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

/* Actor (taking ownership of `m`), reference, sampling settings and rollout engine. */
static int setup_models(df_dag_worker *w, df_model *m)
{
    const df_config *c = w->cfg;
    df_model *ref = NULL;
    int rc;
    df_actor_params p;
    df_worker_actor_params(w, c, &p);
    if ((rc = rollout_temperature(w, &p.temperature))) {
        df_model_free(m);
        return rc;
    }
    bool kl_in_reward = df_config_bool(c, "algorithm.use_kl_in_reward");
    if ((p.use_kl_loss || kl_in_reward) && (rc = df_model_clone(m, &ref))) {
        df_model_free(m);
        return rc;
    }
    /* verl get_kl_controller; its state is not checkpointed (no resume yet): the metrics record beta */
#define KC "algorithm.kl_ctrl."
    if (kl_in_reward && (rc = df_kl_ctrl_create(df_config_str(c, KC "type"), df_config_float(c, KC "kl_coef"),
                                                df_config_float(c, KC "target_kl"),
                                                df_config_float(c, KC "horizon"), &w->kl_ctrl))) {
        df_model_free(m);
        df_model_free(ref);
        return df_error_wrap(rc, "%s", df_config_where(c, KC "type"));
    }
#undef KC
    rc = df_actor_create(m, &p, true, &w->actor);
    if (!rc)
        df_actor_set_comm(w->actor, w->actor_dp);
    if (rc) {
        df_model_free(m);
        df_model_free(ref);
        return rc;
    }
    if (ref && (rc = df_actor_create(ref, &p, false, &w->ref))) {
        df_model_free(ref);
        return rc;
    }
    df_worker_sampling(w, c, "actor_rollout_ref.rollout.", &w->sp);
    df_worker_sampling(w, c, "actor_rollout_ref.rollout.val_kwargs.", &w->val_sp);
    /* KV cache for as many sequences as a step needs, within rollout.max_num_seqs and ~8 GiB */
    int64_t seq_len = w->max_prompt_len + w->max_response_len;
    int64_t per_step = df_config_int(c, "data.train_batch_size") / w->data_layout.dp_size * w->n_samples;
    int64_t slots = df_config_int(c, "actor_rollout_ref.rollout.max_num_seqs");
    if (slots > per_step)
        slots = per_step;
    while (slots > 1 && df_rollout_engine_bytes(&m->cfg, slots, seq_len) > (8LL << 30))
        slots /= 2;
    return df_rollout_engine_create(&m->cfg, slots, seq_len, &w->rollout);
}

/* This rank's graph from the plan, finished and resolved, and its nodes' layouts. */
static int build_pipeline(df_dag_worker *w, const char **name)
{
    int rc = df_worker_setup_parallel(w);
    if (rc)
        return rc;
    *name = w->plan->pipeline;
    if (!strcmp(*name, "workflow"))
        rc = df_worker_setup_workflow(w); /* resolves the graph itself */
    else
        rc = df_task_graph_resolve(w->graph);
    return rc ? rc : df_worker_setup_layouts(w);
}

static int setup_graph(df_dag_worker *w)
{
    const char *name = "";
    int rc = df_worker_register_nodes();
    if (!rc)
        rc = build_pipeline(w, &name);
    return rc ? df_error_wrap(rc, "building the %s pipeline", name) : DF_OK;
}

static int setup_output(df_dag_worker *w)
{
    w->console = false;
    for (int i = 0; i < df_config_list_len(w->cfg, "trainer.logger"); i++)
        if (!strcmp(df_config_list_at(w->cfg, "trainer.logger", i), "console"))
            w->console = true;
    if (w->rank != 0)
        return DF_OK;
    int rc = df_mkdir_p(w->out_dir);
    if (rc)
        return rc;
    char *path = df_path_join(w->out_dir, "metrics.jsonl");
    w->metrics_file = path ? fopen(path, "w") : NULL;
    rc = w->metrics_file ? DF_OK : df_error(DF_EIO, "cannot open %s for writing", path ? path : w->out_dir);
    free(path);
    return rc;
}

int df_dag_worker_create(const df_config *cfg, df_comm *comm, df_dag_worker **out)
{
    int rc = comm ? DF_OK : df_comm_world(&comm);
    df_dag_worker *w = rc ? NULL : calloc(1, sizeof *w);
    if (!w)
        return rc ? rc : df_error(DF_ENOMEM, "out of memory");
    w->cfg = cfg;
    w->comm = comm;
    w->rank = df_comm_rank(comm);
    w->world = df_comm_size(comm);
    w->seed = (uint64_t)df_config_int(cfg, "trainer.seed");
    w->n_samples = df_config_int(cfg, "actor_rollout_ref.rollout.n");
    w->val_n = df_config_int(cfg, "actor_rollout_ref.rollout.val_kwargs.n");
    w->max_prompt_len = df_config_int(cfg, "data.max_prompt_length");
    w->max_response_len = df_config_int(cfg, "actor_rollout_ref.rollout.response_length");
    /* plan, config check and train validate alike: everything before the files */
    rc = df_train_check(cfg, w->world, df_worker_warn, w, &w->plan);
    if (!rc) /* checked from their files above; now their code */
        rc = df_worker_algorithm_plugins(cfg, true);
    if (!rc)
        rc = expand_path(df_config_str(cfg, "actor_rollout_ref.model.path"), w->model_dir, sizeof w->model_dir);
    if (!rc)
        rc = expand_path(df_config_is_null(cfg, "data.tokenizer") ? w->model_dir : df_config_str(cfg, "data.tokenizer"),
                         w->tokenizer_dir, sizeof w->tokenizer_dir);
    if (!rc)
        rc = expand_path(df_config_str(cfg, "trainer.default_local_dir"), w->out_dir, sizeof w->out_dir);
    if (!rc)
        rc = setup_graph(w);
    if (!rc)
        rc = df_adv_estimator_lookup(df_config_str(cfg, "algorithm.adv_estimator"), &w->adv_fn);
    if (!rc)
        rc = df_data_buffers_create(w->group, &w->buffers);
    w->balance_batch = df_config_bool(cfg, "trainer.balance_batch");
    w->remax = !strcmp(df_config_str(cfg, "algorithm.adv_estimator"), "remax");
    w->reward.reward_fn_key = df_config_str(cfg, "data.reward_fn_key");
    if (!rc)
        rc = df_worker_setup_reward(w);
    df_model *m = NULL;
    if (!rc && (rc = df_hf_dir_load(w->model_dir, w->tokenizer_dir, &m, &w->tok)))
        rc = df_error_wrap(rc, "actor_rollout_ref.model.path");
    /* the data before the actor: the step count feeds its lr schedule */
    if (!rc)
        rc = load_data(w, "data.train_files", &w->train_ds, &w->train_prompts);
    if (!rc)
        rc = df_dataloader_create(w->train_ds, df_config_int(cfg, "data.train_batch_size"),
                                  w->data_layout.dp_rank, w->data_layout.dp_size,
                                  df_config_bool(cfg, "data.shuffle"), (uint64_t)df_config_int(cfg, "data.seed"),
                                  true, &w->dl);
    if (!rc) /* every rank draws as many rows as the smallest shard holds */
        rc = agree_rows(w);
    if (!rc) {
        int64_t per_epoch = df_dataloader_steps_per_epoch(w->dl);
        w->total_steps = df_config_is_null(cfg, "trainer.total_training_steps")
                             ? per_epoch * df_config_int(cfg, "trainer.total_epochs")
                             : df_config_int(cfg, "trainer.total_training_steps");
    }
    if (!rc && df_config_list_len(cfg, "data.val_files") > 0)
        rc = load_data(w, "data.val_files", &w->val_ds, &w->val_prompts);
    if (!rc) {
        rc = setup_models(w, m);
        m = NULL;
    }
    df_model_free(m);
    if (!rc) /* after the actor: the critic's vocabulary must match it */
        rc = df_worker_setup_critic(w);
    if (!rc)
        rc = setup_output(w);
    if (!rc && !(w->metrics = df_metrics_new()))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (rc) {
        df_dag_worker_free(w);
        return rc;
    }
    *out = w;
    return DF_OK;
}

void df_dag_worker_free(df_dag_worker *w)
{
    if (!w)
        return;
    df_worker_free_node_configs(w);
    df_task_graph_free(w->graph);
    df_data_buffers_free(w->buffers);
    df_worker_free_critic(w);
    df_worker_free_parallel(w);
    df_rollout_engine_free(w->rollout);
    df_actor_free(w->actor);
    df_actor_free(w->ref);
    df_kl_ctrl_free(w->kl_ctrl);
    df_dataloader_free(w->dl);
    df_prompt_cache_free(&w->train_prompts);
    df_prompt_cache_free(&w->val_prompts);
    df_dataset_free(w->train_ds);
    df_dataset_free(w->val_ds);
    df_tokenizer_free(w->tok);
    df_metrics_free(w->metrics);
    if (w->metrics_file)
        fclose(w->metrics_file);
    free(w);
}
