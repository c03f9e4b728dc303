/* The trainer's checkpoints: crash-safe saves and bit-exact resume (checkpoint.h, docs/checkpoints.md). */
#include "workers/dag/checkpoint.h"

#include "engine/hf_dir.h"
#include "util/fsutil.h"
#include "util/killpoint.h"
#include "workers/common/ckpt_files.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CKPT_FORMAT "distflow-checkpoint/1"
#define TRAINER_STATE "trainer_state.json"
#define DATA_STATE "data.json"
#define ACTOR_STATE "actor/train_state.safetensors"
#define CRITIC_STATE "critic/train_state.safetensors"

typedef char path_buf[DF_CKPT_PATH_MAX];

/* Every rank's status merged (collective over the world): a failure anywhere fails every rank. */
static int sync_rc(df_dag_worker *w, int rc, const char *what)
{
    return df_worker_agree(w->comm, rc, what, "job");
}

int df_worker_checkpoint_cleanup(df_dag_worker *w)
{
    return w->rank == 0 ? df_ckpt_cleanup(w->out_dir, w->console) : DF_OK;
}

/* ---- saving ---- */

/* data.json: the dataloader's position, the same on every rank (one global order: verl's data.pt). */
static int save_data_state(df_dag_worker *w, const char *dir)
{
    int64_t epoch, step;
    df_dataloader_tell(w->dl, &epoch, &step);
    path_buf p;
    int rc = df_ckpt_path(p, "%s/%s", dir, DATA_STATE);
    if (rc)
        return rc;
    return df_ckpt_write_json(json_pack("{s:s, s:I, s:I, s:I, s:I}", "format", CKPT_FORMAT, "epoch",
                                        (json_int_t)epoch, "step", (json_int_t)step, "rows",
                                        (json_int_t)df_dataloader_rows(w->dl), "batch_size",
                                        (json_int_t)w->global.cfg.data.gen_batch_size),
                              p);
}

/* agent groups beyond 0 (agents.c): <role>_agent_<g>/ (actor, critic), as siiRL names its agents'
   checkpoints */
static int agent_dir(char *out, const char *dir, const char *role, int g, const char *rel)
{
    return df_ckpt_path(out, "%s%s%s_agent_%d%s%s", dir, dir[0] ? "/" : "", role, g, rel[0] ? "/" : "", rel);
}

/* Group g's state file of `role` for trainer_state.json, or null when the group holds none of its own
   (a model shared through share_instance is listed by its owner; a group without a critic). */
static json_t *agent_entry(int g, const char *role, bool owns, int *rc)
{
    path_buf rel;
    if (!owns || (*rc = agent_dir(rel, "", role, g, "train_state.safetensors")))
        return json_null();
    return json_string(rel);
}

/* "agents" and "agent_critics": the actor's and the critic's training state of each group beyond 0,
   in group order; none in a single-agent job, whose file stays as it was. */
static int add_agents(df_dag_worker *w, json_t *o)
{
    if (w->n_agents < 2)
        return DF_OK;
    json_t *a = json_array(), *c = json_array();
    int rc = DF_OK;
    for (int g = 1; a && c && !rc && g < w->n_agents; g++) {
        json_array_append_new(a, agent_entry(g, "actor", df_agent_slot_owns_actor(&w->agents[g]), &rc));
        json_array_append_new(c, agent_entry(g, "critic", df_agent_slot_owns_critic(&w->agents[g]), &rc));
    }
    if (!rc && a && c && !json_object_set_new(o, "agents", a) && !json_object_set_new(o, "agent_critics", c))
        return DF_OK;
    return rc ? rc : df_error(DF_ENOMEM, "out of memory");
}

/* trainer_state.json: what is the same on every rank beyond the model files. */
static int save_trainer_state(df_dag_worker *w, const char *dir)
{
    const df_train_config *t = &w->global.cfg;
    json_t *o = json_pack("{s:s, s:I, s:i, s:I, s:I, s:I, s:s}", "format", CKPT_FORMAT, "global_step",
                          (json_int_t)w->step, "world_size", w->world, "total_training_steps",
                          (json_int_t)w->total_steps, "trainer_seed", (json_int_t)t->trainer.seed, "data_seed",
                          (json_int_t)t->data.seed, "actor", ACTOR_STATE);
    if (o) { /* json_real prints 17 significant digits: beta reads back to the same bits */
        json_object_set_new(o, "critic", w->critic.model ? json_string(CRITIC_STATE) : json_null());
        json_object_set_new(o, "kl_ctrl_beta", w->advantage.kl_ctrl
                                                   ? json_real(df_kl_ctrl_value(w->advantage.kl_ctrl))
                                                   : json_null());
    }
    path_buf p;
    int rc = o ? add_agents(w, o) : DF_OK;
    if (!rc)
        rc = df_ckpt_path(p, "%s/%s", dir, TRAINER_STATE);
    return rc ? (json_decref(o), rc) : df_ckpt_write_json(o, p);
}

/* Group g's model of `role` (its actor or critic) as a Hugging Face directory with its training state. */
static int save_agent_model(const df_dag_worker *w, const df_agent_slot *s, const char *tmp, const char *role,
                            const df_model *m)
{
    path_buf d, state;
    int rc = agent_dir(d, tmp, role, s->group, "");
    if (!rc)
        rc = agent_dir(state, tmp, role, s->group, "train_state.safetensors");
    if (!rc)
        rc = df_hf_dir_save(m, m->cfg.torch_dtype, s->tokenizer_dir, s->tok == w->tok ? df_worker_saved_chat_template(w) : NULL, d);
    if (!rc)
        rc = strcmp(role, "critic") ? df_actor_save_state(s->actor->model, state)
                                    : df_critic_save_state(s->critic->model, state);
    if (!rc)
        rc = strcmp(role, "critic") ? df_actor_save_lora(s->actor->model, d, s->model_dir)
                                    : df_critic_save_lora(s->critic->model, d, NULL);
    return rc ? rc : df_fsync_dir(d);
}

/* Each agent group beyond 0: the actor and the critic it owns (a shared one is saved by its owner). */
static int save_agents(df_dag_worker *w, const char *tmp)
{
    int rc = DF_OK;
    for (int g = 1; !rc && g < w->n_agents; g++) {
        const df_agent_slot *s = &w->agents[g];
        if (df_agent_slot_owns_actor(s))
            rc = save_agent_model(w, s, tmp, "actor", df_actor_model(s->actor->model));
        if (!rc && df_agent_slot_owns_critic(s))
            rc = save_agent_model(w, s, tmp, "critic", df_critic_model(s->critic->model));
    }
    return rc;
}

static int save_shared(df_dag_worker *w, const char *tmp)
{
    path_buf actor, state;
    int rc = df_ckpt_path(actor, "%s/%s", tmp, "actor");
    if (!rc)
        rc = df_ckpt_path(state, "%s/%s", tmp, ACTOR_STATE);
    const df_model *m = df_actor_model(w->actor.model);
    if (!rc) /* actor/ stays a Hugging Face directory, as verl's huggingface/ export */
        rc = df_hf_dir_save(m, m->cfg.torch_dtype, w->tokenizer_dir, df_worker_saved_chat_template(w), actor);
    if (!rc)
        rc = df_actor_save_state(w->actor.model, state);
    if (!rc)
        rc = df_actor_save_lora(w->actor.model, actor, w->model_dir);
    if (!rc)
        rc = df_worker_save_critic(w, tmp);
    if (!rc)
        rc = save_agents(w, tmp);
    if (!rc)
        rc = save_trainer_state(w, tmp);
    if (!rc)
        rc = save_data_state(w, tmp);
    if (!rc)
        rc = df_fsync_dir(actor);
    path_buf critic;
    if (!rc && w->critic.model && !(rc = df_ckpt_path(critic, "%s/%s", tmp, "critic"))) {
        rc = df_fsync_dir(critic);
    }
    return rc;
}

/* Agent group g's trained models on this rank (NULL: none of its own; group 0: the worker's). */
static void group_models(const df_dag_worker *w, int g, df_actor **a, df_critic **c)
{
    const df_agent_slot *s = g ? &w->agents[g] : NULL;
    *a = !s ? w->actor.model : df_agent_slot_owns_actor(s) ? s->actor->model : NULL;
    *c = !s ? w->critic.model : df_agent_slot_owns_critic(s) ? s->critic->model : NULL;
}

/* Every trained model's sharded AdamW state (ZeRO-1) streams to rank 0 as it saves (collective, in
   one order on every rank); end: the streams finish (a model without one: nothing). */
static int stream_begin(const df_dag_worker *w)
{
    int rc = DF_OK;
    for (int g = 0; !rc && g < (w->n_agents > 1 ? w->n_agents : 1); g++) {
        df_actor *a;
        df_critic *c;
        group_models(w, g, &a, &c);
        if (a)
            rc = df_actor_gather_begin(a, w->rank == 0);
        if (!rc && c)
            rc = df_critic_gather_begin(c, w->rank == 0);
    }
    return rc;
}

static int stream_end(const df_dag_worker *w)
{
    int rc = DF_OK;
    for (int g = 0; g < (w->n_agents > 1 ? w->n_agents : 1); g++) {
        df_actor *a;
        df_critic *c;
        group_models(w, g, &a, &c);
        int ea = a ? df_actor_gather_end(a) : DF_OK, ec = c ? df_critic_gather_end(c) : DF_OK;
        rc = rc ? rc : ea ? ea : ec;
    }
    return rc;
}

int df_worker_checkpoint_save(df_dag_worker *w)
{
    df_ckpt_save s;
    long long n = (long long)w->step;
    /* every rank holds the weights; each checks its own before anything is written */
    int rc = df_ckpt_check_finite(df_actor_model(w->actor.model), "actor");
    if (!rc && w->critic.model)
        rc = df_ckpt_check_finite(df_critic_model(w->critic.model), "critic");
    for (int g = 1; !rc && g < w->n_agents; g++) {
        const df_agent_slot *a = &w->agents[g];
        if (df_agent_slot_owns_actor(a))
            rc = df_ckpt_check_finite(df_actor_model(a->actor->model), "agent group actor");
        if (!rc && df_agent_slot_owns_critic(a))
            rc = df_ckpt_check_finite(df_critic_model(a->critic->model), "agent group critic");
    }
    if ((rc = sync_rc(w, rc, "checkpoint: checking the weights")))
        return df_error_wrap(rc, "saving checkpoint global_step_%lld", n);
    df_kill_point_save_scope(true);
    rc = df_ckpt_save_paths(&s, w->out_dir, w->step);
    if (!rc && w->rank == 0)
        rc = df_ckpt_save_begin(&s);
    if ((rc = sync_rc(w, rc, "checkpoint: creating the temporary directory"))) {
        df_kill_point_save_scope(false);
        return df_error_wrap(rc, "saving checkpoint global_step_%lld", n);
    }
    rc = stream_begin(w);
    if (!rc && w->rank == 0)
        rc = save_shared(w, s.tmp);
    int end = stream_end(w); /* after a failed begin too: what began must end */
    rc = sync_rc(w, rc ? rc : end, "checkpoint: writing");
    if (!rc && w->rank == 0)
        rc = df_ckpt_save_publish(&s);
    rc = sync_rc(w, rc, "checkpoint: renaming into place");
    if (w->rank == 0)
        df_ckpt_save_end(&s, rc);
    df_kill_point_save_scope(false);
    return rc ? df_error_wrap(rc, "saving checkpoint global_step_%lld", n) : DF_OK;
}

/* ---- resuming ---- */

/* The checkpoint directory resume_mode asks for into dir; *have false when there is none. */
static int find_checkpoint(df_dag_worker *w, char *dir, bool *have)
{
    const struct df_train_trainer *tr = &w->global.cfg.trainer;
    return df_ckpt_find(w->cfg, w->out_dir, tr->resume_mode, tr->resume_from_path, dir, have);
}

/* A checkpoint of distflow before the global data order: data_dp_rank_0.json (each data-parallel rank
 * shuffled its own shard). Its position is kept: with one rank that order was today's; with more, the
 * rest of its epoch follows the global order, so some of the epoch's rows may come twice or not at all
 * (a warning says so) rather than the run being lost. rows = rows_per_rank of one rank (*ranks 1). */
static int load_legacy_data_state(df_dag_worker *w, const char *legacy, char *p, int64_t *pos, int64_t *rows,
                                  int64_t *batch)
{
    json_t *o = NULL;
    int64_t ranks = 0;
    snprintf(p, sizeof(path_buf), "%s", legacy); /* the file messages name */
    int rc = df_ckpt_load_json(p, CKPT_FORMAT, &o);
    const char *keys[] = {"epoch", "step", "dp_size", "rows_per_rank"};
    int64_t *vals[] = {&pos[0], &pos[1], &ranks, rows};
    for (int k = 0; !rc && k < 4; k++)
        rc = df_ckpt_json_int(o, keys[k], p, vals[k]);
    if (!rc && json_object_get(o, "batch_size")) /* absent before data.gen_batch_size: the train batch */
        rc = df_ckpt_json_int(o, "batch_size", p, batch);
    json_decref(o);
    if (!rc && ranks > 1) {
        char msg[sizeof(path_buf) + 400];
        df_ckpt_legacy_order_note(msg, sizeof msg, p, ranks, pos[0], pos[1]);
        df_worker_warn(w, msg);
        *rows = -1; /* per rank: not comparable */
    }
    return rc;
}

/* The dataloader position from data.json (or an earlier distflow's data_dp_rank_0.json): the same rows
 * and batch, any number of ranks. */
static int load_data_state(df_dag_worker *w, const char *dir)
{
    path_buf p;
    json_t *o = NULL;
    int64_t rows = 0, pos[2] = {0, 0}, batch = w->global.cfg.data.train_batch_size;
    path_buf legacy;
    int rc = df_ckpt_path(p, "%s/%s", dir, DATA_STATE);
    if (!rc)
        rc = df_ckpt_path(legacy, "%s/data_dp_rank_0.json", dir);
    if (!rc && access(p, F_OK) && errno == ENOENT && !access(legacy, F_OK)) /* else data.json's own error */
        rc = load_legacy_data_state(w, legacy, p, pos, &rows, &batch);
    else if (!rc && !(rc = df_ckpt_load_json(p, CKPT_FORMAT, &o))) {
        const char *keys[] = {"rows", "epoch", "step", "batch_size"};
        int64_t *vals[] = {&rows, &pos[0], &pos[1], &batch};
        for (int k = 0; !rc && k < 4; k++)
            rc = df_ckpt_json_int(o, keys[k], p, vals[k]);
        json_decref(o);
    }
    if (!rc && batch != w->global.cfg.data.gen_batch_size)
        rc = df_error(DF_EINVAL, "%s: its data position counts batches of %lld prompts, this run's "
                                 "data.gen_batch_size is %lld (%s): resume with the batch it was written with",
                      p, (long long)batch, (long long)w->global.cfg.data.gen_batch_size,
                      df_config_where(w->cfg, "data.gen_batch_size"));
    if (!rc && rows >= 0 && rows != df_dataloader_rows(w->dl))
        rc = df_error(DF_EINVAL,
                      "%s: written for %lld rows, this run's data gives %lld (the dataset or its "
                      "filters changed)",
                      p, (long long)rows, (long long)df_dataloader_rows(w->dl));
    if (!rc && (rc = df_dataloader_seek(w->dl, pos[0], pos[1])))
        rc = df_error_wrap(rc, "%s", p);
    return rc;
}

/* Whether trainer_state.json (p) lists a state of group g in `list` as the run has one (`owns`). */
static int agent_matches(const json_t *list, int g, const char *role, bool owns, const char *p)
{
    const json_t *e = json_is_array(list) ? json_array_get(list, (size_t)g - 1) : NULL;
    bool has = e && !json_is_null(e); /* no "agent_critics": a checkpoint from before critics per group */
    if (has == owns)
        return DF_OK;
    return df_error(DF_EINVAL, "%s: agent group %d: the checkpoint %s a %s of its own and this run %s", p, g,
                    has ? "has" : "has no", role, owns ? "has one" : "has none (or shares another group's)");
}

/* The training state of every agent group beyond 0 (trainer_state.json's "agents" and
   "agent_critics", in `p`). */
static int load_agents(df_dag_worker *w, const char *dir, const json_t *o, const char *p)
{
    const json_t *agents = json_object_get(o, "agents"), *critics = json_object_get(o, "agent_critics");
    int n = json_is_array(agents) ? (int)json_array_size(agents) : 0;
    if (n != w->n_agents - 1)
        return df_error(DF_EINVAL, "%s: the checkpoint has %d agent group(s) and this run %d", p, n + 1,
                        w->n_agents > 0 ? w->n_agents : 1);
    int rc = DF_OK;
    for (int g = 1; !rc && g < w->n_agents; g++) {
        const df_agent_slot *s = &w->agents[g];
        bool actor = df_agent_slot_owns_actor(s), critic = df_agent_slot_owns_critic(s);
        path_buf state;
        rc = agent_matches(agents, g, "actor", actor, p);
        if (!rc)
            rc = agent_matches(critics, g, "critic", critic, p);
        if (!rc && actor && !(rc = agent_dir(state, dir, "actor", g, "train_state.safetensors")))
            rc = df_actor_load_state(s->actor->model, state);
        if (!rc && critic && !(rc = agent_dir(state, dir, "critic", g, "train_state.safetensors")))
            rc = df_critic_load_state(s->critic->model, state);
    }
    return rc;
}

/* Everything of checkpoint `dir` into w. */
static int load_checkpoint(df_dag_worker *w, const char *dir)
{
    path_buf p;
    json_t *o = NULL;
    int rc = df_ckpt_path(p, "%s/%s", dir, TRAINER_STATE);
    if (!rc)
        rc = df_ckpt_load_json(p, CKPT_FORMAT, &o);
    int64_t step = 0, world = 0;
    if (!rc)
        rc = df_ckpt_json_int(o, "global_step", p, &step);
    if (!rc)
        rc = df_ckpt_json_int(o, "world_size", p, &world);
    w->con.resumed_world = world; /* any number: the state is replicated, the data order global */
    const json_t *critic = rc ? NULL : json_object_get(o, "critic"), *beta = rc ? NULL : json_object_get(o, "kl_ctrl_beta");
    if (!rc)
        rc = load_agents(w, dir, o, p);
    if (!rc && (critic && !json_is_null(critic)) != (w->critic.model != NULL))
        rc = df_error(DF_EINVAL, "%s: the checkpoint %s a critic and this run %s", p,
                      w->critic.model ? "has no" : "has", w->critic.model ? "has one" : "has none");
    if (!rc && w->advantage.kl_ctrl && !json_is_number(beta))
        rc = df_error(DF_EINVAL, "%s: no kl_ctrl_beta, but this run has algorithm.use_kl_in_reward", p);
    if (!rc && w->advantage.kl_ctrl)
        rc = df_kl_ctrl_set_value(w->advantage.kl_ctrl, json_number_value(beta));
    const json_t *js = rc ? NULL : json_object_get(o, "trainer_seed"), *jd = rc ? NULL : json_object_get(o, "data_seed");
    if (!rc && (!json_is_integer(js) || !json_is_integer(jd)))
        rc = df_error(DF_EINVAL, "%s: \"trainer_seed\" or \"data_seed\" is missing or not an integer", p);
    if (!rc && (json_integer_value(js) != w->global.cfg.trainer.seed || json_integer_value(jd) != w->global.cfg.data.seed))
        df_worker_warn(w, "resuming with another trainer.seed or data.seed than the checkpoint's: the run "
                          "continues, but not as the original would have");
    json_decref(o);
    path_buf state;
    if (!rc && !(rc = df_ckpt_path(state, "%s/%s", dir, ACTOR_STATE))) {
        rc = df_actor_load_state(w->actor.model, state);
    }
    if (!rc)
        rc = df_worker_load_critic(w, dir);
    if (!rc)
        rc = load_data_state(w, dir);
    if (!rc)
        w->resumed_step = step;
    return rc;
}

int df_worker_checkpoint_resume(df_dag_worker *w, int rc)
{
    path_buf dir;
    bool have = false;
    bool before = rc != 0; /* failed before: nothing read, only the collective */
    if (!rc)
        rc = find_checkpoint(w, dir, &have);
    if (!rc && have)
        rc = load_checkpoint(w, dir);
    if (rc && !before)
        rc = df_error_wrap(rc, "resuming (trainer.resume_mode=%s)", w->global.cfg.trainer.resume_mode);
    rc = sync_rc(w, rc, "resuming from a checkpoint");
    if (!rc && have) /* the banner says it */
        snprintf(w->con.resumed_from, sizeof w->con.resumed_from, "%s", dir);
    return rc;
}

int df_worker_open_metrics(df_dag_worker *w)
{
    if (w->rank != 0)
        return DF_OK;
    const struct df_train_trainer *tr = &w->global.cfg.trainer;
    df_run_log_opts o = {.out_dir = w->out_dir, .resumed_step = w->resumed_step, .logger = &tr->logger,
                         .tensorboard_dir = tr->tensorboard_dir, .project = tr->project_name,
                         .experiment = tr->experiment_name, .print = w->console};
    return df_run_log_open(&w->log, &o);
}
