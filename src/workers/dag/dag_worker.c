/* The DAG worker: setup from the config, the training loop, validation, checkpoints. */
#include "workers/embodied/embodied_worker.h"
#include "workers/worker_internal.h"
#include "workers/reward/score_batch.h"
#include "workers/dag/marft_run.h"

#include "distflow/env.h"
#include "distflow/scheduler.h"
#include "engine/hf_dir.h"
#include "engine/rollout_internal.h"
#include "util/fsutil.h"
#include "util/timeutil.h"
#include "workers/common/chat_template.h"
#include "workers/common/data_metrics.h"
#include "workers/common/model_overrides.h"
#include "workers/common/precision.h"
#include "workers/dag/async.h"
#include "workers/dag/checkpoint.h"
#include "workers/dag/console.h"
#include "workers/dag/evaluate.h"

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

/* Load a dataset list (`key`: its name in messages), encode its prompts and apply data.max_prompt_length;
   its prompts and those dropped over the job into w->con's slot `which` (0 train, 1 validation). The
   training rows are loaded whole on every rank (the dataloader's one global order); the validation
   rows are sharded over the data-parallel ranks, each generating for its own. */
static int load_data(df_dag_worker *w, const char *key, int which, const df_config_strs *files, int64_t max_rows,
                     df_dataset **ds, df_prompt_cache *pc)
{
    const struct df_train_data *d = &w->global.cfg.data;
    int n = files->n;
    char **paths = calloc((size_t)(n ? n : 1), sizeof *paths);
    int rc = paths ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        char buf[4096];
        rc = expand_path(files->items[i], buf, sizeof buf);
        if (!rc && !(paths[i] = strdup(buf)))
            rc = df_error(DF_ENOMEM, "out of memory");
    }
    /* validation: this rank's shard by the first stage's DP rank (its model-parallel replicas read it too) */
    bool whole = which == 0;
    /* an environment's rows are replaced by its observations: their agent_name means nothing */
    const df_agent_config *ag = w->rollout.agent;
    bool rerender = ag && !ag->env.env;
    df_dataset_opts o = {.prompt_key = d->prompt_key, .shard_index = whole ? 0 : w->data_layout.dp_rank,
                         .shard_count = whole ? 1 : w->data_layout.dp_size,
                         .agent_loop = rerender ? "tool_agent" : ag ? NULL : "single_turn_agent"};
    if (!rc)
        rc = df_dataset_load((const char *const *)paths, n, &o, ds);
    if (!rc && df_dataset_head(*ds, max_rows) < 0)
        rc = DF_ENOMEM;
    /* measured as the rollout renders them: the multi-turn agent loop renders each row's messages
       again, with the tools' schemas */
    if (!rc) /* the training rows are every rank's: each encodes a share, the shares are allgathered */
        rc = df_prompts_encode_shared(*ds, w->tok, rerender, rerender ? ag->tools_json : NULL,
                                      whole ? w->group : NULL, pc);
    int64_t dropped = 0, before = rc ? 0 : df_dataset_size(*ds);
    df_prompt_limits lim = {d->max_prompt_length, d->filter_overlong_prompts, d->truncation,
                            rerender ? "actor_rollout_ref.rollout.multi_turn.enable" : NULL};
    if (!rc)
        rc = df_prompts_limit_ex(*ds, pc, &lim, &dropped);
    int64_t counts[2] = {before - dropped, dropped}; /* over the job: each row counted once */
    if (w->data_layout.mp_rank != 0 || (whole && w->data_layout.dp_rank != 0))
        counts[0] = counts[1] = 0;
    if (!rc)
        rc = df_comm_allreduce(w->group, counts, 2, DF_COMM_INT64, DF_COMM_SUM);
    w->con.prompts[which] = counts[0];
    w->con.filtered[which] = counts[1];
    for (int i = 0; paths && i < n; i++)
        free(paths[i]);
    free(paths);
    return rc ? df_error_wrap(rc, "%s", key) : DF_OK;
}

/* data.apply_chat_template_kwargs: variables of every render of the policy's template (verl). */
static int set_template_kwargs(df_tokenizer *tok, const char *map_text)
{
    char *json = NULL;
    int rc = df_config_map_json(map_text, &json);
    if (!rc)
        rc = df_tokenizer_set_chat_template_kwargs(tok, json);
    free(json);
    return rc ? df_error_wrap(rc, "data.apply_chat_template_kwargs") : DF_OK;
}

/* trainer.device: the actor's and the reference's log-probs and updates on that backend (the
 * rollout engine's: df_worker_create_rollout; docs/cuda.md). */
int df_worker_set_device(df_dag_worker *w, const df_agent_slot *s)
{
    const char *dev = w->global.cfg.trainer.device;
    df_backend be;
    int rc = df_backend_open(dev, &be);
    if (!rc && (rc = df_actor_set_backend(s->actor->model, &be)) == DF_OK && s->reference->model)
        rc = df_actor_set_backend(s->reference->model, &be);
    return rc ? df_error_wrap(rc, "%s", df_config_where(w->cfg, "trainer.device")) : DF_OK;
}

const char *df_worker_saved_chat_template(const df_dag_worker *w)
{
    return w->global.cfg.actor_rollout_ref.model.custom_chat_template ? df_tokenizer_chat_template(w->tok) : NULL;
}

df_backend df_worker_backend(const df_dag_worker *w)
{
    df_backend be;
    if (df_backend_open(w->global.cfg.trainer.device, &be)) {
        df_clear_error(); /* opened at setup already: this cannot fail after it */
        return (df_backend){0};
    }
    return be;
}

/* rollout.dtype: bfloat16 (verl's default) where trainer.device has bf16 matmuls (a CPU's native
 * ones, a device's gemm_w16), else one notice and float32. */
static df_rollout_dtype rollout_dtype(const df_dag_worker *w)
{
    if (strcmp(w->global.cfg.actor_rollout_ref.rollout.dtype, "bfloat16"))
        return DF_ROLLOUT_F32;
    if (!df_device_bf16(w->global.cfg.trainer.device))
        return DF_ROLLOUT_BF16;
    if (w->rank == 0)
        fprintf(stderr, "notice: actor_rollout_ref.rollout.dtype=bfloat16: %s; the rollout runs "
                "in float32\n", df_last_error());
    df_clear_error();
    return DF_ROLLOUT_F32;
}

/* Both in bf16 (rollout.dtype and the actor's mixed precision): the engine reads the actor's
 * bf16 copy, the same rounding of the same weights, refreshed after every update, instead of
 * a copy of its own (docs/mixed_precision.md). Both on a device whose optimizer runs there: the
 * engine reads the actor's master weights whenever they are the model's version. */
static int share_weights(const df_agent_slot *s, bool actor_bf16, const char *device)
{
    df_rollout_options o;
    df_rollout_engine_options(s->rollout->engine, &o);
    const df_weights_dev *dw = df_actor_device_weights(s->actor->model);
    if (dw) /* both on the device: the rollout reads the actor's master weights (no transfer) */
        return df_rollout_engine_share_device_weights(s->rollout->engine, dw);
    const df_weights16 *w16;
    /* a device's rollout converts its own bf16 copy there, from the float32 weights it reads */
    if (o.dtype != DF_ROLLOUT_BF16 || !actor_bf16 || strcmp(device, "cpu"))
        return DF_OK;
    int rc = df_actor_weights16(s->actor->model, &w16);
    if (!rc)
        rc = df_rollout_engine_share_weights16(s->rollout->engine, w16);
    s->rollout->shared_w16 = rc == DF_OK;
    return rc;
}

/* The rollout engine: its KV cache preallocated once for as many sequences as a round generates,
 * within rollout.max_num_seqs and ~8 GiB; forward calls of max_num_batched_tokens rows; its pages
 * given back after every rollout with rollout.free_cache_engine. */
int df_worker_create_rollout(df_dag_worker *w, const df_agent_slot *s, const df_model_config *cfg, bool actor_bf16)
{
    const df_train_config *t = &w->global.cfg;
    const struct df_train_rollout *r = &t->actor_rollout_ref.rollout;
    /* the rollout side of mode=async: as many sequences as its episodes in flight */
    int64_t per_step = (w->async && w->async->rollout_side ? w->async->st.p.max_concurrent_rollouts
                                                           : t->data.gen_batch_size / w->data_layout.dp_size) *
                       df_worker_n_samples(w);
    df_rollout_options o = {.max_num_seqs = r->max_num_seqs < per_step ? r->max_num_seqs : per_step,
                            .max_seq_len = t->data.max_prompt_length + r->response_length,
                            .max_num_batched_tokens = r->max_num_batched_tokens,
                            .dtype = rollout_dtype(w),
                            .free_cache_engine = r->free_cache_engine,
                            .record_routes = r->enable_rollout_routing_replay}; /* R3 */
    if (o.max_num_seqs > o.max_num_batched_tokens) /* as many as one forward call may decode */
        o.max_num_seqs = o.max_num_batched_tokens;
    while (o.max_num_seqs > 1 && df_rollout_engine_bytes_ex(cfg, &o) > (8LL << 30))
        o.max_num_seqs /= 2;
    s->rollout->synced_step = -1;
    df_backend be; /* trainer.device: the rollout on the actor's device (opened once per process) */
    int rc = df_backend_open(t->trainer.device, &be);
    o.backend = rc ? NULL : &be;
    if (!rc)
        rc = df_rollout_engine_create_ex(cfg, &o, &s->rollout->engine);
    if (!rc && s->actor) /* the async rollout side has no actor */
        rc = share_weights(s, actor_bf16, t->trainer.device);
    return rc ? df_error_wrap(rc, "%s", df_config_where(w->cfg, "actor_rollout_ref.rollout")) : DF_OK;
}

/* Actor (taking ownership of `m`), reference, sampling settings and rollout engine. */
/* ref.fsdp_config.param_offload: a bf16 reference, and the directory its file goes in. */
static int check_ref_offload(const df_dag_worker *w, const df_actor_params *rp)
{
    const char *key = "actor_rollout_ref.ref.fsdp_config.param_offload";
    if (strcmp(w->global.cfg.trainer.device, "cpu"))
        return df_error(DF_EINVAL, "%s (%s): offloads the reference's bf16 weights from host memory, "
                        "but with trainer.device=%s they live in the device's: set it to false",
                        key, df_config_where(w->cfg, key), w->global.cfg.trainer.device);
    if (!rp->bf16)
        return df_error(DF_EINVAL, "%s (%s): offloads the reference's bf16 weights, but the reference "
                        "computes in float32 here (its mixed_precision.param_dtype, or no native bf16 "
                        "matmuls on this CPU): set it to false", key, df_config_where(w->cfg, key));
    int rc = df_mkdir_p(rp->offload_dir);
    return rc ? df_error_wrap(rc, "%s: the directory of its file (trainer.default_local_dir)", key) : DF_OK;
}

static int setup_models(df_dag_worker *w, df_model *m)
{
    const df_train_config *t = &w->global.cfg;
    df_model *ref = NULL;
    df_actor_params p;
    int rc = df_worker_resolve(w, &p); /* sampling settings, actor settings and its temperature */
    if (rc) {
        df_model_free(m);
        return rc;
    }
    bool kl_in_reward = t->algorithm.use_kl_in_reward, want_ref = p.use_kl_loss || kl_in_reward;
    df_actor_params rp;
    df_worker_reference_params(w, &p, &rp);
    /* a LoRA actor is its own reference (the adapters disabled): no copy of the base */
    const bool ref_in_actor = want_ref && df_worker_ref_in_actor(&p, &rp);
    if (want_ref && !ref_in_actor && (rc = df_model_clone(m, &ref))) {
        df_model_free(m);
        return rc;
    }
    /* verl get_kl_controller; its beta is checkpointed (trainer_state.json) */
    const struct df_train_algorithm_kl_ctrl *kc = &t->algorithm.kl_ctrl;
    if (kl_in_reward && (rc = df_kl_ctrl_create(kc->type, kc->kl_coef, kc->target_kl, kc->horizon, &w->advantage.kl_ctrl))) {
        df_model_free(m);
        df_model_free(ref);
        return df_error_wrap(rc, "%s", df_config_where(w->cfg, "algorithm.kl_ctrl.type"));
    }
    rc = df_actor_create(m, &p, true, &w->actor.model);
    if (!rc)
        df_actor_set_comm(w->actor.model, w->actor.dp);
    if (rc) {
        df_model_free(m);
        df_model_free(ref);
        return rc;
    }
    if (ref_in_actor)
        w->reference = (df_reference_worker){.in_actor = w->actor.model, .params = rp};
    if (ref && rp.offload_dir && (rc = check_ref_offload(w, &rp))) {
        df_model_free(ref);
        return rc;
    }
    if (ref && (rc = df_actor_create(ref, &rp, false, &w->reference.model))) {
        df_model_free(ref);
        return rc;
    }
    df_agent_slot s0 = df_worker_slot(w, NULL);
    if ((rc = df_worker_set_device(w, &s0)) || (rc = df_worker_create_rollout(w, &s0, &m->cfg, p.bf16)))
        return rc;
    return df_worker_setup_agent_models(w, &p); /* the other agent groups' (agents.c) */
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

/* Stale checkpoint temporaries removed from the output directory, the checkpoint resume_mode picks,
   metrics.jsonl prepared to match it, and trainer.logger's other sinks opened. The directory itself is
   made by the first line or save: a run that fails before either leaves none. Collective (the resume). */
static int setup_output(df_dag_worker *w)
{
    w->console = df_config_strs_has(&w->global.cfg.trainer.logger, "console");
    int rc = df_worker_checkpoint_cleanup(w);
    rc = df_worker_checkpoint_resume(w, rc);
    return rc ? rc : df_worker_open_metrics(w);
}

/* What both a trainer rank and a rollout rank read: the policy's model and tokenizer (the chat
 * template's kwargs set before any render), the training prompts and the dataloader that gives this
 * rank its share (by w->data_layout) of each batch.
 * A dataloader batch is one generation round, data.gen_batch_size prompts (verl's DAPO trainer);
 * dynamic sampling cuts the kept groups to train_batch_size. */
static int load_policy_and_prompts(df_dag_worker *w, df_model **m)
{
    const df_train_config *t = &w->global.cfg;
    df_config_overrides ov;
    int rc = df_train_model_overrides(t, false, &ov);
    if (!rc && (rc = df_hf_dir_load(w->model_dir, w->tokenizer_dir, &ov, m, &w->tok)))
        rc = df_error_wrap(rc, "actor_rollout_ref.model.path");
    df_train_model_overrides_free(&ov);
    char key[600];
    snprintf(key, sizeof key, "%s: actor_rollout_ref.model.custom_chat_template",
             df_config_where(w->cfg, "actor_rollout_ref.model.custom_chat_template"));
    if (!rc)
        rc = df_worker_chat_template(w->tok, t->actor_rollout_ref.model.custom_chat_template, key);
    if (!rc)
        rc = set_template_kwargs(w->tok, t->data.apply_chat_template_kwargs);
    if (!rc)
        rc = load_data(w, "data.train_files", 0, &t->data.train_files, t->data.train_max_samples, &w->train_ds,
                       &w->train_prompts);
    if (!rc)
        rc = df_dataloader_create(w->train_ds, t->data.gen_batch_size, w->data_layout.dp_rank,
                                  w->data_layout.dp_size, t->data.shuffle, (uint64_t)t->data.seed, true, &w->dl);
    if (!rc && (rc = df_score_key_column(w->dl, t->data.reward_fn_key)))
        rc = df_error_wrap(rc, "%s: data.reward_fn_key", df_config_where(w->cfg, "data.reward_fn_key"));
    return rc;
}

/* The rollout side of mode=async (workers/dag/async.h): this rank reads its share of each batch of
 * training prompts (the side's ranks are its data-parallel ranks) and samples from its own copy of the
 * weights, which the trainer side sends; no graph, no trainer models. */
static int setup_rollout_side(df_dag_worker *w)
{
    df_async *a = w->async;
    w->group = w->comm;
    w->group_rank = a->index, w->group_size = a->n_rollouts;
    w->data_layout = (df_node_layout){.dp_size = a->n_rollouts, .mp = 1, .dp_rank = a->index};
    int rc = load_policy_and_prompts(w, &a->model);
    if (!rc)
        rc = df_worker_resolve(w, NULL);
    df_agent_slot s0 = {.rollout = &w->rollout}; /* the engine alone: no actor on this side */
    if (!rc)
        rc = df_worker_create_rollout(w, &s0, &a->model->cfg, false);
    return rc;
}

/* mode=async: this rank's side of the job (w->comm becomes the side's communicator). */
static int split_job(df_dag_worker *w)
{
    int rc = df_async_create(&w->global.cfg, w->comm, &w->async);
    if (rc || !w->async)
        return rc;
    w->comm = w->async->side;
    w->rank = w->async->index;
    w->world = df_comm_size(w->comm);
    if (w->async->rollout_side) { /* the plan is the trainer side's */
        df_plan_free(w->plan);
        w->plan = NULL;
    }
    return DF_OK;
}

/* Every rank of an asynchronous job learns whether every other set up (each side alone would wait
 * for the other forever). */
static int agree_setup(df_dag_worker *w, int rc)
{
    if (!w->async)
        return rc;
    double failed = rc != DF_OK;
    int crc = df_comm_allreduce(w->async->world, &failed, 1, DF_COMM_FLOAT64, DF_COMM_MAX);
    if (rc)
        return rc;
    if (crc)
        return crc;
    return failed > 0 ? df_error(DF_EINTERNAL, "another rank of the job failed to set up; its own error says why")
                      : DF_OK;
}

/* trainer.device: the Data Coordinator's payloads over the device's fabric (NCCL) where it has
 * one (df_data_buffers_use_backend). The backend's opening is agreed first: its communicator is
 * collective, and a rank without the device must not leave the others waiting in it. */
static int coordinator_device(df_dag_worker *w)
{
    df_backend be;
    int rc = df_backend_open(w->global.cfg.trainer.device, &be);
    int64_t failed = rc != DF_OK;
    int crc = df_comm_allreduce(w->group, &failed, 1, DF_COMM_INT64, DF_COMM_MAX);
    if (!rc && !(rc = crc) && failed)
        rc = df_error(DF_EINTERNAL, "another rank could not open the device; its own error says why");
    if (!rc)
        rc = df_data_buffers_use_backend(w->buffers, &be);
    return rc ? df_error_wrap(rc, "%s", df_config_where(w->cfg, "trainer.device")) : DF_OK;
}

static int setup_trainer_side(df_dag_worker *w)
{
    const df_train_config *t = &w->global.cfg;
    int rc = setup_graph(w);
    if (!rc) /* a group's nodes may name its model (per-node actor_rollout_ref.model.path) */
        rc = df_worker_setup_agent_dirs(w);
    if (!rc && w->async)
        rc = df_async_trainer_setup(w);
    if (!rc)
        rc = df_adv_estimator_lookup(t->algorithm.adv_estimator, &w->advantage.fn);
    if (!rc)
        rc = df_data_buffers_create(w->group, &w->buffers);
    if (!rc)
        rc = coordinator_device(w);
    w->reward.cfg.reward_fn_key = t->data.reward_fn_key;
    if (!rc)
        rc = df_worker_setup_reward(w);
    df_model *m = NULL;
    /* the data before the actor: the step count feeds its lr schedule */
    if (!rc)
        rc = load_policy_and_prompts(w, &m);
    if (!rc)
        rc = df_worker_setup_reward_model(w);
    if (!rc) {
        /* in generation batches (data.gen_batch_size), as verl's len(train_dataloader) */
        int64_t per_epoch = df_dataloader_steps_per_epoch(w->dl);
        w->total_steps = t->trainer.total_training_steps.set ? t->trainer.total_training_steps.v
                                                             : per_epoch * t->trainer.total_epochs;
    }
    if (!rc && t->data.val_files.n > 0)
        rc = load_data(w, "data.val_files", 1, &t->data.val_files, t->data.val_max_samples, &w->val_ds,
                       &w->val_prompts);
    if (!rc) {
        rc = setup_models(w, m);
        m = NULL;
    }
    df_model_free(m);
    if (!rc) /* model_type=embodied: the environment, the action tokens, the graph's embodied nodes */
        rc = df_worker_embodied_setup(w);
    if (!rc) /* after the actor: the critic's vocabulary must match it */
        rc = df_worker_setup_critic(w);
    if (!rc) /* the later agent groups' own critics (critic_setup.c) */
        rc = df_worker_setup_agent_critics(w);
    if (!rc) /* a chained multi-agent graph: its agents' tokenizers are loaded now */
        rc = df_worker_marft_setup(w);
    if (!rc)
        rc = setup_output(w);
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
    rc = df_worker_settings_init(&w->global, cfg); /* the typed config every part of the worker reads */
    const df_train_config *t = &w->global.cfg;
    if (!rc) /* before any group is made from it: they inherit it */
        df_comm_set_timeout(comm, t->trainer.collective_timeout_s);
    if (!rc) /* plan, config check and train validate alike: everything before the files */
        rc = df_train_check(cfg, w->world, df_worker_warn, w, &w->plan);
    if (!rc) /* a slot of role workers per agent group (agents.c); slot 0 is the fields below */
        rc = df_worker_setup_agents(w);
    if (!rc) /* checked from their files above; now their code */
        rc = df_worker_plugins(cfg, t, true, &w->reward.cfg.compute_score, &w->reward.cfg.python);
    if (!rc) /* tools, interactions or the environment of the rollout's agent loop */
        rc = df_worker_multi_turn(cfg, t, &w->rollout.agent);
    if (!rc)
        rc = expand_path(t->actor_rollout_ref.model.path, w->model_dir, sizeof w->model_dir);
    if (!rc)
        rc = expand_path(t->data.tokenizer ? t->data.tokenizer : w->model_dir, w->tokenizer_dir,
                         sizeof w->tokenizer_dir);
    if (!rc)
        rc = expand_path(t->trainer.default_local_dir, w->out_dir, sizeof w->out_dir);
    if (!rc) /* mode=async: the rollout and trainer sides (workers/dag/async.h) */
        rc = split_job(w);
    if (!rc)
        rc = w->async && w->async->rollout_side ? setup_rollout_side(w) : setup_trainer_side(w);
    rc = agree_setup(w, rc);
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
    df_worker_embodied_free(w);
    df_worker_marft_free(w);
    df_worker_free_agents(w);
    df_task_graph_free(w->graph);
    df_data_buffers_free(w->buffers);
    df_worker_free_critic(w);
    df_worker_free_reward(w);
    df_worker_free_parallel(w);
    df_async_free(w->async);
    df_rollout_engine_free(w->rollout.engine);
    df_agent_config_clear(w->rollout.agent);
    free(w->rollout.agent);
    df_actor_free(w->actor.model);
    df_actor_free(w->reference.model);
    df_kl_ctrl_free(w->advantage.kl_ctrl);
    df_dataloader_free(w->dl);
    df_prompt_cache_free(&w->train_prompts);
    df_prompt_cache_free(&w->val_prompts);
    df_dataset_free(w->train_ds);
    df_dataset_free(w->val_ds);
    df_tokenizer_free(w->tok);
    df_metrics_free(w->metrics);
    df_run_log_close(&w->log);
    free(w);
}
