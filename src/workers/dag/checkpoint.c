/* The trainer's checkpoints: crash-safe saves and bit-exact resume (checkpoint.h, docs/checkpoints.md). */
#include "workers/dag/checkpoint.h"

#include "engine/hf_dir.h"
#include "util/fsutil.h"
#include "util/killpoint.h"
#include "workers/common/ckpt_files.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKPT_FORMAT "distflow-checkpoint/1"
#define TRAINER_STATE "trainer_state.json"
#define ACTOR_STATE "actor/train_state.safetensors"
#define CRITIC_STATE "critic/train_state.safetensors"

typedef char path_buf[DF_CKPT_PATH_MAX];

/* Every rank's status merged (collective over the world): a failure anywhere fails every rank. */
static int sync_rc(df_dag_worker *w, int rc, const char *what)
{
    double zero = 0, total;
    return df_worker_group_sum(w->comm, rc, &zero, 1, &total, what, "job");
}

int df_worker_checkpoint_cleanup(df_dag_worker *w)
{
    return w->rank == 0 ? df_ckpt_cleanup(w->out_dir, w->console) : DF_OK;
}

/* ---- saving ---- */

/* data_dp_rank_<d>.json: this data-parallel rank's dataloader position (its model-parallel replicas
   read the same rows, so only mp rank 0 writes it). */
static int save_data_state(df_dag_worker *w, const char *dir)
{
    int64_t epoch, step;
    df_dataloader_tell(w->dl, &epoch, &step);
    path_buf p;
    int rc = df_ckpt_path(p, "%s/data_dp_rank_%d.json", dir, w->data_layout.dp_rank);
    if (rc)
        return rc;
    return df_ckpt_write_json(json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "format", CKPT_FORMAT, "dp_rank",
                                (json_int_t)w->data_layout.dp_rank, "dp_size", (json_int_t)w->data_layout.dp_size,
                                "epoch", (json_int_t)epoch, "step", (json_int_t)step, "rows_per_rank",
                                (json_int_t)df_dataloader_rows_per_rank(w->dl)),
                      p);
}

/* agent groups beyond 0 (agents.c): actor_agent_<g>/, as siiRL names its agents' checkpoints */
static int agent_dir(char *out, const char *dir, int g, const char *rel)
{
    return df_ckpt_path(out, "%s/actor_agent_%d%s%s", dir, g, rel[0] ? "/" : "", rel);
}

/* "agents": the training state of each group beyond 0, in group order; none in a single-agent job,
   whose file stays as it was. */
static int add_agents(df_dag_worker *w, json_t *o)
{
    if (w->n_agents < 2)
        return DF_OK;
    json_t *a = json_array();
    for (int g = 1; a && g < w->n_agents; g++) {
        path_buf rel;
        int rc = df_ckpt_path(rel, "actor_agent_%d/train_state.safetensors", g);
        if (rc) {
            json_decref(a);
            return rc;
        }
        json_array_append_new(a, json_string(rel));
    }
    return a && !json_object_set_new(o, "agents", a) ? DF_OK : df_error(DF_ENOMEM, "out of memory");
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

/* Each agent group beyond 0: its actor as a Hugging Face directory with its training state. */
static int save_agents(df_dag_worker *w, const char *tmp)
{
    int rc = DF_OK;
    for (int g = 1; !rc && g < w->n_agents; g++) {
        const df_agent_slot *s = &w->agents[g];
        const df_model *m = df_actor_model(s->actor->model);
        path_buf d, state;
        rc = agent_dir(d, tmp, g, "");
        if (!rc)
            rc = agent_dir(state, tmp, g, "train_state.safetensors");
        if (!rc)
            rc = df_hf_dir_save(m, m->cfg.torch_dtype, s->tokenizer_dir, d);
        if (!rc)
            rc = df_actor_save_state(s->actor->model, state);
        if (!rc)
            rc = df_fsync_dir(d);
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
        rc = df_hf_dir_save(m, m->cfg.torch_dtype, w->tokenizer_dir, actor);
    if (!rc)
        rc = df_actor_save_state(w->actor.model, state);
    if (!rc)
        rc = df_worker_save_critic(w, tmp);
    if (!rc)
        rc = save_agents(w, tmp);
    if (!rc)
        rc = save_trainer_state(w, tmp);
    if (!rc)
        rc = df_fsync_dir(actor);
    path_buf critic;
    if (!rc && w->critic.model && !(rc = df_ckpt_path(critic, "%s/%s", tmp, "critic"))) {
        rc = df_fsync_dir(critic);
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
    for (int g = 1; !rc && g < w->n_agents; g++)
        rc = df_ckpt_check_finite(df_actor_model(w->agents[g].actor->model), "agent group actor");
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
    if (w->data_layout.mp_rank == 0)
        rc = save_data_state(w, s.tmp);
    if (!rc && w->rank == 0)
        rc = save_shared(w, s.tmp);
    rc = sync_rc(w, rc, "checkpoint: writing");
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

/* The dataloader position from this rank's data_dp_rank_<d>.json. */
static int load_data_state(df_dag_worker *w, const char *dir)
{
    path_buf p;
    json_t *o = NULL;
    int rc = df_ckpt_path(p, "%s/data_dp_rank_%d.json", dir, w->data_layout.dp_rank);
    if (!rc)
        rc = df_ckpt_load_json(p, CKPT_FORMAT, &o);
    int64_t dp = 0, rows = 0, epoch = 0, step = 0;
    if (!rc)
        rc = df_ckpt_json_int(o, "dp_size", p, &dp);
    if (!rc)
        rc = df_ckpt_json_int(o, "rows_per_rank", p, &rows);
    if (!rc)
        rc = df_ckpt_json_int(o, "epoch", p, &epoch);
    if (!rc)
        rc = df_ckpt_json_int(o, "step", p, &step);
    json_decref(o);
    if (!rc && dp != w->data_layout.dp_size)
        rc = df_error(DF_EINVAL, "%s: written by %lld data-parallel ranks, this run has %d", p, (long long)dp,
                      w->data_layout.dp_size);
    if (!rc && rows != df_dataloader_rows_per_rank(w->dl))
        rc = df_error(DF_EINVAL, "%s: written for %lld rows per rank, this run's data gives %lld (the dataset "
                                 "or its filters changed)", p, (long long)rows,
                      (long long)df_dataloader_rows_per_rank(w->dl));
    if (!rc && (rc = df_dataloader_seek(w->dl, epoch, step)))
        rc = df_error_wrap(rc, "%s", p);
    return rc;
}

/* The training state of every agent group beyond 0 (trainer_state.json's "agents", in `p`). */
static int load_agents(df_dag_worker *w, const char *dir, const json_t *agents, const char *p)
{
    int n = json_is_array(agents) ? (int)json_array_size(agents) : 0;
    if (n != w->n_agents - 1)
        return df_error(DF_EINVAL, "%s: the checkpoint has %d agent group(s) and this run %d", p, n + 1,
                        w->n_agents > 0 ? w->n_agents : 1);
    int rc = DF_OK;
    for (int g = 1; !rc && g < w->n_agents; g++) {
        path_buf state;
        rc = agent_dir(state, dir, g, "train_state.safetensors");
        if (!rc)
            rc = df_actor_load_state(w->agents[g].actor->model, state);
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
    if (!rc && world != w->world)
        rc = df_error(DF_EINVAL, "%s: the checkpoint was written by %lld ranks and this run has %d; resuming on "
                                 "another number of ranks is not supported", p, (long long)world, w->world);
    const json_t *critic = rc ? NULL : json_object_get(o, "critic"), *beta = rc ? NULL : json_object_get(o, "kl_ctrl_beta");
    if (!rc)
        rc = load_agents(w, dir, json_object_get(o, "agents"), p);
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
