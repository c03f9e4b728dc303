/* `distflow sft` checkpoints and resume (sft_checkpoint.h, docs/checkpoints.md). */
#include "workers/sft/sft_checkpoint.h"

#include "engine/hf_dir.h"
#include "util/fsutil.h"
#include "util/killpoint.h"
#include "workers/common/ckpt_files.h"
#include "workers/common/group_sum.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SFT_FORMAT "distflow-sft-checkpoint/1"
#define STATE "train_state.safetensors"
#define TRAINER_STATE "trainer_state.json"

/* trainer_state.json: the step, the seed and where the dataloader stands. */
static int save_trainer_state(const df_sft_ckpt *c, int64_t step, const char *dir)
{
    int64_t epoch, pos;
    df_dataloader_tell(c->dl, &epoch, &pos);
    char *p = df_path_join(dir, TRAINER_STATE);
    json_t *o = json_pack("{s:s, s:I, s:i, s:I, s:I, s:I, s:I, s:I, s:s}", "format", SFT_FORMAT, "global_step",
                          (json_int_t)step, "world_size", c->world, "total_training_steps", (json_int_t)c->total_steps,
                          "seed", (json_int_t)c->t->trainer.seed, "epoch", (json_int_t)epoch, "step",
                          (json_int_t)pos, "rows", (json_int_t)df_dataloader_rows(c->dl),
                          "train_state", STATE);
    int rc = p ? df_ckpt_write_json(o, p) : (json_decref(o), df_error(DF_ENOMEM, "out of memory"));
    free(p);
    return rc;
}

/* Every rank's status merged (collective): a failure anywhere fails every rank. */
static int agree(const df_sft_ckpt *c, int rc, const char *what)
{
    return df_worker_agree(c->comm, rc, what, "job");
}

/* Everything of the checkpoint into s->tmp. */
static int save_files(const df_sft_ckpt *c, int64_t step, const char *tmp)
{
    const df_model *m = df_actor_model(c->actor);
    char *state = df_path_join(tmp, STATE);
    int rc = state ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    if (!rc) /* the directory stays a Hugging Face model, loadable as it is */
        rc = df_hf_dir_save(m, m->cfg.torch_dtype, c->tokenizer_dir, c->chat_template, tmp);
    if (!rc)
        rc = df_actor_save_state(c->actor, state);
    if (!rc)
        rc = df_actor_save_lora(c->actor, tmp, c->model_dir);
    if (!rc)
        rc = save_trainer_state(c, step, tmp);
    free(state);
    return rc;
}

int df_sft_checkpoint_save(const df_sft_ckpt *c, int64_t step)
{
    df_ckpt_save s;
    bool writer = c->rank == 0; /* the ranks hold the same state: one writes it */
    int rc = df_ckpt_check_finite(df_actor_model(c->actor), "model");
    if ((rc = agree(c, rc, "checkpoint: checking the weights")))
        return df_error_wrap(rc, "saving checkpoint global_step_%lld", (long long)step);
    df_kill_point_save_scope(true);
    rc = df_ckpt_save_paths(&s, c->out_dir, step);
    if (!rc && writer)
        rc = df_ckpt_save_begin(&s);
    rc = agree(c, rc, "checkpoint: creating the temporary directory");
    if (!rc) /* ZeRO-1's sharded moments stream to the writer as it saves */
        rc = df_actor_gather_begin(c->actor, writer);
    if (!rc && writer)
        rc = save_files(c, step, s.tmp);
    int end = df_actor_gather_end(c->actor); /* nothing without a stream */
    rc = rc ? rc : end;
    rc = agree(c, rc, "checkpoint: writing");
    if (!rc && writer)
        rc = df_ckpt_save_publish(&s);
    rc = agree(c, rc, "checkpoint: renaming into place");
    if (writer)
        df_ckpt_save_end(&s, rc);
    df_kill_point_save_scope(false);
    if (rc)
        return df_error_wrap(rc, "saving checkpoint global_step_%lld", (long long)step);
    if (!writer)
        return DF_OK;
    printf("saved %s\n", s.final), fflush(stdout);
    const df_config_opt_int *keep = &c->t->trainer.max_ckpt_to_keep;
    if (keep->set && df_checkpoint_prune(c->out_dir, keep->v, 0)) /* costs disk, not the run */
        fprintf(stderr, "[distflow] warning: %s\n", df_last_error());
    return DF_OK;
}

/* trainer_state.json of dir: checked against this run, the dataloader moved to its position. */
static int load_trainer_state(const df_sft_ckpt *c, const char *dir, int64_t *step)
{
    char *p = df_path_join(dir, TRAINER_STATE);
    json_t *o = NULL;
    int64_t world = 0, epoch = 0, pos = 0, rows = 0, seed = 0;
    int rc = p ? df_ckpt_load_json(p, SFT_FORMAT, &o) : df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = df_ckpt_json_int(o, "global_step", p, step);
    if (!rc)
        rc = df_ckpt_json_int(o, "world_size", p, &world);
    if (!rc)
        rc = df_ckpt_json_int(o, "epoch", p, &epoch);
    if (!rc)
        rc = df_ckpt_json_int(o, "step", p, &pos);
    /* an earlier distflow's rows_per_rank (each rank shuffled its own shard): one rank's order was
       today's; with more the rest of the epoch follows today's order (a warning says so) */
    bool legacy = !rc && !json_object_get(o, "rows") && json_object_get(o, "rows_per_rank");
    if (!rc)
        rc = df_ckpt_json_int(o, legacy ? "rows_per_rank" : "rows", p, &rows);
    if (!rc && legacy && world > 1) {
        char msg[DF_CKPT_PATH_MAX + 400];
        df_ckpt_legacy_order_note(msg, sizeof msg, p, world, epoch, pos);
        if (c->rank == 0)
            fprintf(stderr, "[distflow] warning: %s\n", msg);
        rows = df_dataloader_rows(c->dl); /* per rank: not comparable */
    }
    if (!rc && !json_is_integer(json_object_get(o, "seed")))
        rc = df_error(DF_EINVAL, "%s: \"seed\" is missing or not an integer", p);
    if (!rc)
        seed = (int64_t)json_integer_value(json_object_get(o, "seed"));
    json_decref(o);
    if (!rc && rows != df_dataloader_rows(c->dl))
        rc = df_error(DF_EINVAL,
                      "%s: written for %lld training rows, this run's data gives %lld (the dataset or "
                      "data.train_max_samples changed)",
                      p, (long long)rows, (long long)df_dataloader_rows(c->dl));
    if (!rc && world != c->world && c->rank == 0) /* the state is replicated and the data order global */
        fprintf(stderr, "[distflow] the checkpoint was written by %lld ranks, this run has %d: the same data "
                        "order, gradients summed in another order (within rounding, not bit for bit)\n",
                (long long)world, c->world);
    if (!rc && seed != c->t->trainer.seed && c->rank == 0)
        fprintf(stderr, "[distflow] warning: resuming with another trainer.seed (%lld) than the checkpoint's "
                        "(%lld): the data order differs from the original run's\n",
                (long long)c->t->trainer.seed, (long long)seed);
    if (!rc && (rc = df_dataloader_seek(c->dl, epoch, pos)))
        rc = df_error_wrap(rc, "%s", p);
    free(p);
    return rc;
}

int df_sft_checkpoint_resume(const df_sft_ckpt *c, int64_t *resumed)
{
    const struct df_sft_trainer *tr = &c->t->trainer;
    char dir[DF_CKPT_PATH_MAX];
    bool have = false;
    *resumed = 0;
    int rc = agree(c, c->rank == 0 ? df_ckpt_cleanup(c->out_dir, true) : DF_OK, "removing a killed save's files");
    if (!rc)
        rc = df_ckpt_find(c->cfg, c->out_dir, tr->resume_mode, tr->resume_from_path, dir, &have);
    char *state = !rc && have ? df_path_join(dir, STATE) : NULL;
    if (!rc && have && !state)
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc && have)
        rc = load_trainer_state(c, dir, resumed);
    if (!rc && have)
        rc = df_actor_load_state(c->actor, state);
    free(state);
    if ((rc = agree(c, rc, "resuming")))
        return df_error_wrap(rc, "resuming (trainer.resume_mode=%s)", tr->resume_mode);
    if (have && c->rank == 0)
        fprintf(stderr, "[distflow] resuming from %s at step %lld\n", dir, (long long)*resumed + 1);
    return DF_OK;
}
