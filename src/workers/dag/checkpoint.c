/* The trainer's checkpoints: crash-safe saves and bit-exact resume (checkpoint.h, docs/checkpoints.md). */
#include "workers/dag/checkpoint.h"

#include "engine/hf_dir.h"
#include "util/finite.h"
#include "util/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKPT_FORMAT "distflow-checkpoint/1"
#define LATEST "latest_checkpointed_iteration.txt"
#define TRAINER_STATE "trainer_state.json"
#define ACTOR_STATE "actor/train_state.safetensors"
#define CRITIC_STATE "critic/train_state.safetensors"

typedef char path_buf[2048];

/* printf into a path_buf; DF_EINVAL when it does not fit. */
static int fmt_path(char *out, const char *fmt, ...) DF_PRINTF(2, 3);
static int fmt_path(char *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out, sizeof(path_buf), fmt, ap);
    va_end(ap);
    return k < 0 || k >= (int)sizeof(path_buf) ? df_error(DF_EINVAL, "path too long: %s...", out) : DF_OK;
}

/* Every rank's status merged (collective over the world): a failure anywhere fails every rank. */
static int sync_rc(df_dag_worker *w, int rc, const char *what)
{
    double zero = 0, total;
    return df_worker_group_sum(w->comm, rc, &zero, 1, &total, what, "job");
}

/* ---- stale temporaries ---- */

/* A name this module gives a temporary: .global_step_<digits>.tmp or .global_step_<digits>.old.tmp */
static bool is_stale_tmp(const char *name)
{
    const char *p = name + strlen(".global_step_");
    if (strncmp(name, ".global_step_", strlen(".global_step_")) || *p < '0' || *p > '9')
        return false;
    while (*p >= '0' && *p <= '9')
        p++;
    return !strcmp(p, ".tmp") || !strcmp(p, ".old.tmp");
}

int df_worker_checkpoint_cleanup(df_dag_worker *w)
{
    if (w->rank != 0)
        return DF_OK;
    DIR *d = opendir(w->out_dir);
    if (!d)
        return errno == ENOENT ? DF_OK : df_error(DF_EIO, "%s: cannot list: %s", w->out_dir, strerror(errno));
    int rc = DF_OK;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (!is_stale_tmp(e->d_name))
            continue;
        char *p = df_path_join(w->out_dir, e->d_name);
        rc = p ? df_remove_tree(p) : df_error(DF_ENOMEM, "out of memory");
        if (!rc && w->console)
            fprintf(stderr, "[distflow] removed %s, left by an interrupted checkpoint save\n", p);
        free(p);
    }
    closedir(d);
    return rc;
}

/* ---- saving ---- */

static int write_json(json_t *o, const char *path)
{
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    if (!text)
        return df_error(DF_ENOMEM, "out of memory writing %s", path);
    size_t n = strlen(text);
    text[n] = '\n'; /* json_dumps' NUL becomes the final newline; the length says where it ends */
    int rc = df_write_file_atomic(path, text, n + 1);
    free(text);
    return rc;
}

/* data_dp_rank_<d>.json: this data-parallel rank's dataloader position (its model-parallel replicas
   read the same rows, so only mp rank 0 writes it). */
static int save_data_state(df_dag_worker *w, const char *dir)
{
    int64_t epoch, step;
    df_dataloader_tell(w->dl, &epoch, &step);
    path_buf p;
    int rc = fmt_path(p, "%s/data_dp_rank_%d.json", dir, w->data_layout.dp_rank);
    if (rc)
        return rc;
    return write_json(json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "format", CKPT_FORMAT, "dp_rank",
                                (json_int_t)w->data_layout.dp_rank, "dp_size", (json_int_t)w->data_layout.dp_size,
                                "epoch", (json_int_t)epoch, "step", (json_int_t)step, "rows_per_rank",
                                (json_int_t)df_dataloader_rows_per_rank(w->dl)),
                      p);
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
    int rc = fmt_path(p, "%s/%s", dir, TRAINER_STATE);
    return rc ? (json_decref(o), rc) : write_json(o, p);
}

static int save_shared(df_dag_worker *w, const char *tmp)
{
    path_buf actor, state;
    int rc = fmt_path(actor, "%s/%s", tmp, "actor");
    if (!rc)
        rc = fmt_path(state, "%s/%s", tmp, ACTOR_STATE);
    const df_model *m = df_actor_model(w->actor.model);
    if (!rc) /* actor/ stays a Hugging Face directory, as verl's huggingface/ export */
        rc = df_hf_dir_save(m, m->cfg.torch_dtype, w->tokenizer_dir, actor);
    if (!rc)
        rc = df_actor_save_state(w->actor.model, state);
    if (!rc)
        rc = df_worker_save_critic(w, tmp);
    if (!rc)
        rc = save_trainer_state(w, tmp);
    if (!rc)
        rc = df_fsync_dir(actor);
    path_buf critic;
    if (!rc && w->critic.model && !(rc = fmt_path(critic, "%s/%s", tmp, "critic"))) {
        rc = df_fsync_dir(critic);
    }
    return rc;
}

/* tmp -> final (an older final moved aside first, then removed), then `latest`. */
static int publish(df_dag_worker *w, const char *tmp, const char *final, const char *old)
{
    int rc = df_fsync_dir(tmp);
    if (!rc && df_dir_exists(final) && rename(final, old))
        rc = df_error(DF_EIO, "cannot move %s aside to %s: %s", final, old, strerror(errno));
    if (!rc && rename(tmp, final))
        rc = df_error(DF_EIO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
    if (!rc)
        rc = df_fsync_dir(w->out_dir);
    if (!rc)
        rc = df_remove_tree(old);
    path_buf latest;
    if (!rc)
        rc = fmt_path(latest, "%s/%s", w->out_dir, LATEST);
    if (!rc) {
        char txt[32];
        int n = snprintf(txt, sizeof txt, "%lld\n", (long long)w->step);
        rc = df_write_file_atomic(latest, txt, (size_t)n);
    }
    return rc;
}

/* DF_EINVAL naming the tensor when m holds a NaN / Inf weight (a checkpoint must be resumable). */
static int check_finite(const df_model *m, const char *role)
{
    int64_t bad = df_first_nonfinite(m->params, m->n_params);
    if (bad < 0)
        return DF_OK;
    const df_param_desc *d = &m->tensors[0];
    for (int i = 0; i < m->n_tensors; i++) /* the last tensor starting at or before `bad` */
        if (m->tensors[i].offset <= bad)
            d = &m->tensors[i];
    return df_error(DF_EINVAL, "the %s's weights are not finite (tensor \"%s\" element %lld is %g): no "
                    "checkpoint is written", role, d->name, (long long)(bad - d->offset), (double)m->params[bad]);
}

int df_worker_checkpoint_save(df_dag_worker *w)
{
    path_buf tmp, final, old;
    long long n = (long long)w->step;
    /* every rank holds the weights; each checks its own before anything is written */
    int rc = check_finite(df_actor_model(w->actor.model), "actor");
    if (!rc && w->critic.model)
        rc = check_finite(df_critic_model(w->critic.model), "critic");
    if ((rc = sync_rc(w, rc, "checkpoint: checking the weights")))
        return df_error_wrap(rc, "saving checkpoint global_step_%lld", n);
    rc = fmt_path(tmp, "%s/.global_step_%lld.tmp", w->out_dir, n);
    if (!rc)
        rc = fmt_path(old, "%s/.global_step_%lld.old.tmp", w->out_dir, n);
    if (!rc)
        rc = fmt_path(final, "%s/global_step_%lld", w->out_dir, n);
    if (!rc && w->rank == 0 && !(rc = df_remove_tree(tmp)))
        rc = df_mkdir_p(tmp);
    if ((rc = sync_rc(w, rc, "checkpoint: creating the temporary directory")))
        return rc;
    if (w->data_layout.mp_rank == 0)
        rc = save_data_state(w, tmp);
    if (!rc && w->rank == 0)
        rc = save_shared(w, tmp);
    rc = sync_rc(w, rc, "checkpoint: writing");
    if (!rc && w->rank == 0)
        rc = publish(w, tmp, final, old);
    rc = sync_rc(w, rc, "checkpoint: renaming into place");
    if (rc && w->rank == 0)
        df_remove_tree(tmp); /* best effort: the next start removes it otherwise */
    if (!rc && w->console && w->rank == 0)
        fprintf(stderr, "saved %s\n", final);
    return rc ? df_error_wrap(rc, "saving checkpoint global_step_%lld", n) : DF_OK;
}

/* ---- resuming ---- */

static int load_json(const char *path, json_t **out)
{
    char *text;
    int rc = df_read_file(path, &text, NULL);
    if (rc)
        return rc == DF_ENOTFOUND ? df_error(DF_ENOTFOUND, "%s: no such file (an incomplete checkpoint, or one "
                                                           "written before distflow kept training state; "
                                                           "trainer.resume_mode=disable starts afresh)", path)
                                  : rc;
    json_error_t e;
    *out = json_loads(text, 0, &e);
    free(text);
    if (!*out || !json_is_object(*out)) {
        json_decref(*out);
        return df_error(DF_EINVAL, "%s:%d: not a JSON object: %s", path, e.line, *out ? "" : e.text);
    }
    const char *fmt = json_string_value(json_object_get(*out, "format"));
    if (!fmt || strcmp(fmt, CKPT_FORMAT)) {
        json_decref(*out);
        return df_error(DF_EINVAL, "%s: format \"%s\", expected \"%s\"", path, fmt ? fmt : "(none)", CKPT_FORMAT);
    }
    return DF_OK;
}

static int get_int(const json_t *o, const char *key, const char *path, int64_t *v)
{
    const json_t *x = json_object_get(o, key);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return df_error(DF_EINVAL, "%s: \"%s\" is missing or not a non-negative integer", path, key);
    *v = (int64_t)json_integer_value(x);
    return DF_OK;
}

/* The checkpoint directory resume_mode asks for into dir; *have false when there is none. */
static int find_checkpoint(df_dag_worker *w, char *dir, bool *have)
{
    const struct df_train_trainer *tr = &w->global.cfg.trainer;
    *have = false;
    if (!strcmp(tr->resume_mode, "disable"))
        return DF_OK;
    if (!strcmp(tr->resume_mode, "resume_path")) {
        if (!tr->resume_from_path)
            return df_error(DF_EINVAL, "%s: trainer.resume_mode=resume_path needs trainer.resume_from_path",
                            df_config_where(w->cfg, "trainer.resume_mode"));
        char *p = df_expand_user(tr->resume_from_path);
        int rc = !p ? df_error(DF_ENOMEM, "out of memory") : fmt_path(dir, "%s", p);
        free(p);
        if (rc)
            return rc;
        if (!df_dir_exists(dir))
            return df_error(DF_ENOTFOUND, "%s: trainer.resume_from_path=%s: no such checkpoint directory",
                            df_config_where(w->cfg, "trainer.resume_from_path"), dir);
        *have = true;
        return DF_OK;
    }
    path_buf latest;
    int rc = fmt_path(latest, "%s/%s", w->out_dir, LATEST);
    if (rc || !df_file_exists(latest))
        return rc; /* auto without a checkpoint: a fresh start */
    char *text;
    if ((rc = df_read_file(latest, &text, NULL)))
        return rc;
    char *end;
    long long n = strtoll(text, &end, 10);
    bool ok = end != text && n >= 0 && strspn(end, " \t\r\n") == strlen(end);
    free(text);
    if (!ok)
        return df_error(DF_EINVAL, "%s: not a step number", latest);
    if ((rc = fmt_path(dir, "%s/global_step_%lld", w->out_dir, n)))
        return rc;
    if (!df_dir_exists(dir))
        return df_error(DF_ENOTFOUND, "%s names step %lld, but %s does not exist (trainer.resume_mode=disable "
                                      "starts afresh)", latest, n, dir);
    *have = true;
    return DF_OK;
}

/* The dataloader position from this rank's data_dp_rank_<d>.json. */
static int load_data_state(df_dag_worker *w, const char *dir)
{
    path_buf p;
    json_t *o = NULL;
    int rc = fmt_path(p, "%s/data_dp_rank_%d.json", dir, w->data_layout.dp_rank);
    if (!rc)
        rc = load_json(p, &o);
    int64_t dp = 0, rows = 0, epoch = 0, step = 0;
    if (!rc)
        rc = get_int(o, "dp_size", p, &dp);
    if (!rc)
        rc = get_int(o, "rows_per_rank", p, &rows);
    if (!rc)
        rc = get_int(o, "epoch", p, &epoch);
    if (!rc)
        rc = get_int(o, "step", p, &step);
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

/* Everything of checkpoint `dir` into w. */
static int load_checkpoint(df_dag_worker *w, const char *dir)
{
    path_buf p;
    json_t *o = NULL;
    int rc = fmt_path(p, "%s/%s", dir, TRAINER_STATE);
    if (!rc)
        rc = load_json(p, &o);
    int64_t step = 0, world = 0;
    if (!rc)
        rc = get_int(o, "global_step", p, &step);
    if (!rc)
        rc = get_int(o, "world_size", p, &world);
    if (!rc && world != w->world)
        rc = df_error(DF_EINVAL, "%s: the checkpoint was written by %lld ranks and this run has %d; resuming on "
                                 "another number of ranks is not supported", p, (long long)world, w->world);
    const json_t *critic = rc ? NULL : json_object_get(o, "critic"), *beta = rc ? NULL : json_object_get(o, "kl_ctrl_beta");
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
    if (!rc && !(rc = fmt_path(state, "%s/%s", dir, ACTOR_STATE))) {
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
    if (!rc && have && w->rank == 0)
        fprintf(stderr, "[distflow] resuming from %s at step %lld\n", dir, (long long)w->resumed_step + 1);
    return rc;
}

/* ---- metrics.jsonl ---- */

/* The lines of `text` whose "step" is at most `last`, into a new buffer. */
static char *kept_lines(char *text, int64_t last, size_t *len)
{
    size_t cap = strlen(text) + 1, n = 0;
    char *out = malloc(cap);
    for (char *l = text, *next; out && l && *l; l = next) {
        char *nl = strchr(l, '\n');
        next = nl ? nl + 1 : NULL;
        if (!nl)
            break; /* a last line without its newline was cut by a crash */
        json_t *o = json_loadb(l, (size_t)(nl - l), 0, NULL);
        json_t *s = json_object_get(o, "step");
        if (json_is_integer(s) && json_integer_value(s) <= last) {
            memcpy(out + n, l, (size_t)(next - l));
            n += (size_t)(next - l);
        }
        json_decref(o);
    }
    *len = n;
    return out;
}

int df_worker_open_metrics(df_dag_worker *w)
{
    if (w->rank != 0)
        return DF_OK;
    char *path = df_path_join(w->out_dir, "metrics.jsonl");
    if (!path)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = DF_OK;
    if (w->resumed_step > 0 && df_file_exists(path)) {
        char *text = NULL, *kept = NULL;
        size_t n = 0;
        rc = df_read_file(path, &text, NULL);
        if (!rc && !(kept = kept_lines(text, w->resumed_step, &n)))
            rc = df_error(DF_ENOMEM, "out of memory");
        if (!rc)
            rc = df_write_file_atomic(path, kept, n);
        free(text);
        free(kept);
    }
    const struct df_train_trainer *tr = &w->global.cfg.trainer;
    char *tb = rc ? NULL : df_tensorboard_dir(tr->tensorboard_dir, tr->project_name, tr->experiment_name);
    if (!rc && !tb)
        rc = df_error(DF_ENOMEM, "out of memory");
    df_loggers_opts o = {.names = tr->logger.items, .n_names = tr->logger.n, .jsonl_path = path,
                         .jsonl_append = w->resumed_step > 0, .tb_dir = tb, .resume_step = w->resumed_step};
    if (!rc) /* the console line stays the worker's own (fit.c), so no console sink */
        rc = df_loggers_open(&o, &w->loggers);
    const char *events = rc ? NULL : df_loggers_tensorboard_path(w->loggers);
    if (events && w->console)
        fprintf(stderr, "[distflow] TensorBoard event file: %s\n", events);
    free(tb);
    free(path);
    return rc;
}
