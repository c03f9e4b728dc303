/*
 * Supervised fine-tuning (verl's fsdp_sft_trainer): prompt -> response pairs,
 * token-mean cross-entropy on the response, with the actor's update machinery;
 * with data.multiturn.enable, chat conversations with the loss on the
 * assistant turns (sft_chat.c). On N ranks: data parallel, each rank its shard
 * of the rows and of every batch, the loss and gradients summed over the ranks
 * (the token mean of the whole global batch); rank 0 writes the outputs, and
 * every step's status is agreed so that the ranks stop together.
 */
#include "distflow/backend.h"
#include "distflow/config.h"
#include "distflow/dataloader.h"
#include "distflow/sft_config.h"
#include "distflow/worker.h"
#include "engine/actor.h"
#include "engine/hf_dir.h"
#include "logging/loggers.h"
#include "util/fsutil.h"
#include "util/killpoint.h"
#include "util/timeutil.h"
#include "workers/common/chat_template.h"
#include "workers/common/ckpt_files.h"
#include "workers/common/group_sum.h"
#include "workers/common/max_pos.h"
#include "workers/common/model_info.h"
#include "workers/common/lora_config.h"
#include "workers/common/precision.h"
#include "workers/common/prompts.h"
#include "workers/common/run_log.h"
#include "workers/common/stop.h"
#include "workers/sft/sft_chat.h"
#include "workers/sft/sft_checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    df_dataset *ds;
    df_prompt_cache prompt, response;
    float *mask; /* multi-turn: the loss mask of response's tokens; NULL: train on every response token */
} sft_data;

static void sft_data_free(sft_data *d)
{
    df_dataset_free(d->ds);
    df_prompt_cache_free(&d->prompt);
    df_prompt_cache_free(&d->response);
    free(d->mask);
}

/* Encode data.response_key of every row, plus EOS (verl appends tokenizer.eos_token). */
static int encode_responses(const df_dataset *ds, const df_tokenizer *tok, const char *key,
                            df_prompt_cache *out)
{
    int64_t n = df_dataset_size(ds), total = 0;
    int32_t eos = df_tokenizer_eos_id(tok);
    if (eos < 0)
        return df_error(DF_EINVAL, "the tokenizer has no EOS token to end SFT responses with");
    int32_t **ids = calloc((size_t)(n ? n : 1), sizeof *ids);
    int64_t *len = calloc((size_t)(n ? n : 1), sizeof *len);
    int rc = ids && len ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n && !rc; i++) {
        char *text = NULL;
        int64_t line;
        rc = df_dataset_field(ds, i, key, &text);
        if (!rc)
            rc = df_tokenizer_encode(tok, text, false, &ids[i], &len[i]);
        free(text);
        int32_t *grown = rc ? NULL : realloc(ids[i], (size_t)(len[i] + 1) * sizeof **ids);
        if (!rc && !grown)
            rc = df_error(DF_ENOMEM, "out of memory");
        if (!rc) {
            ids[i] = grown;
            ids[i][len[i]++] = eos;
            total += len[i];
        } else {
            const char *file = df_dataset_source(ds, i, &line);
            rc = df_error_wrap(rc, "%s:%lld: data.response_key '%s'", file, (long long)line, key);
        }
    }
    if (!rc) {
        out->n = n;
        out->offsets = malloc((size_t)(n + 1) * sizeof *out->offsets);
        out->tokens = malloc((size_t)(total ? total : 1) * sizeof *out->tokens);
        if (!out->offsets || !out->tokens)
            rc = df_error(DF_ENOMEM, "out of memory");
    }
    for (int64_t i = 0; !rc && i < n; i++) {
        if (i == 0)
            out->offsets[0] = 0;
        memcpy(out->tokens + out->offsets[i], ids[i], (size_t)len[i] * sizeof(int32_t));
        out->offsets[i + 1] = out->offsets[i] + len[i];
    }
    for (int64_t i = 0; ids && i < n; i++)
        free(ids[i]);
    free(ids);
    free(len);
    return rc;
}

/* data.max_length over prompt + response, per data.truncation ("error" | "left" | "right"). */
static int check_lengths(const sft_data *d, int64_t max_len, const char *trunc)
{
    for (int64_t i = 0; i < d->prompt.n; i++) {
        int64_t L = d->prompt.offsets[i + 1] - d->prompt.offsets[i] + d->response.offsets[i + 1] -
                    d->response.offsets[i];
        if (L > max_len && !strcmp(trunc, "error")) {
            int64_t line;
            const char *file = df_dataset_source(d->ds, i, &line);
            return df_error(DF_EINVAL, "%s:%lld: prompt + response have %lld tokens, more than "
                            "data.max_length = %lld (or set data.truncation=left|right)",
                            file, (long long)line, (long long)L, (long long)max_len);
        }
    }
    return DF_OK;
}

/* verl warns (once) where data.ignore_input_ids_mismatch keeps conversations whose turns render
   differently alone than together. */
static void warn_mismatch(const df_dataset *ds, const char *key, const df_sft_chat_stats *st)
{
    if (!st->mismatched)
        return;
    int64_t line = 0;
    int shard, shards;
    const char *file = df_dataset_source(ds, st->first_mismatched, &line);
    df_dataset_shard(ds, &shard, &shards);
    char where[48] = ""; /* on N ranks each rank reports the rows of its shard */
    if (shards > 1)
        snprintf(where, sizeof where, " of rank %d's shard", shard);
    fprintf(stderr, "[distflow] warning: %s: %lld conversation(s)%s render differently turn by turn than whole "
            "(first: %s:%lld); trained on the turn-by-turn tokens (data.ignore_input_ids_mismatch=true)\n",
            key, (long long)st->mismatched, where, file ? file : "?", (long long)line);
}

/* The files of list `files` (`key`: its name in messages): every row (`whole`: the training rows,
   in the dataloader's one global order; rank 0 reports them) or this rank's shard (rows i % world ==
   rank: the validation rows, each rank scoring its own); `pre`: the chat prefixes (multi-turn). */
static int load(const df_sft_config *t, const char *key, const df_config_strs *files, int64_t max_rows,
                const df_tokenizer *tok, const df_sft_chat_prefix *pre, int rank, int world, bool whole,
                sft_data *d)
{
    int n = files->n;
    const char **paths = calloc((size_t)(n ? n : 1), sizeof *paths);
    if (!paths)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = DF_OK;
    for (int i = 0; i < n && !rc; i++)
        if (!(paths[i] = df_expand_user(files->items[i])))
            rc = df_error(DF_ENOMEM, "out of memory");
    bool chat = t->data.multiturn.enable;
    df_dataset_opts o = {.prompt_key = t->data.prompt_key, .reward_optional = true, .no_prompt = chat,
                         .shard_index = whole ? 0 : rank, .shard_count = whole ? 1 : world};
    if (!rc)
        rc = df_dataset_load(paths, n, &o, &d->ds);
    if (!rc && df_dataset_head(d->ds, max_rows) < 0) /* data.*_max_samples: the same rows on any world size */
        rc = DF_ENOMEM;
    for (int i = 0; i < n; i++)
        free((char *)paths[i]);
    free(paths);
    df_sft_chat_keys k = {.messages_key = t->data.multiturn.messages_key, .tools_key = t->data.multiturn.tools_key,
                          .enable_thinking_key = t->data.multiturn.enable_thinking_key,
                          .max_length = t->data.max_length, .truncation = t->data.truncation,
                          .ignore_input_ids_mismatch = t->data.ignore_input_ids_mismatch};
    df_sft_chat_stats st = {0};
    if (!rc && chat) /* conversations, cut to data.max_length already */
        rc = df_sft_chat_load(d->ds, tok, pre, &k, &d->prompt, &d->response, &d->mask, &st);
    if (!rc && chat && (!whole || rank == 0))
        warn_mismatch(d->ds, key, &st);
    if (!rc && !chat)
        rc = df_prompts_encode(d->ds, tok, &d->prompt);
    if (!rc && !chat)
        rc = encode_responses(d->ds, tok, t->data.response_key, &d->response);
    if (!rc && !chat)
        rc = check_lengths(d, t->data.max_length, t->data.truncation);
    return rc ? df_error_wrap(rc, "%s", key) : DF_OK;
}

/* Rows of `d` as a batch with prompt_ids / response_ids, cut to max_len per truncation. */
static int make_batch(const sft_data *d, const int64_t *rows, int64_t n, int64_t max_len,
                      const char *trunc, df_batch **out)
{
    int64_t *po = malloc((size_t)(n + 1) * sizeof *po), *ro = malloc((size_t)(n + 1) * sizeof *ro);
    int64_t pt = 0, rt = 0;
    for (int64_t i = 0; po && ro && i < n; i++) {
        pt += d->prompt.offsets[rows[i] + 1] - d->prompt.offsets[rows[i]];
        rt += d->response.offsets[rows[i] + 1] - d->response.offsets[rows[i]];
    }
    int32_t *p = malloc((size_t)(pt + 1) * sizeof *p), *r = malloc((size_t)(rt + 1) * sizeof *r);
    float *w = d->mask ? malloc((size_t)(rt + 1) * sizeof *w) : NULL;
    df_batch *b = df_batch_new(n);
    int rc = po && ro && p && r && b && (w || !d->mask) ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < n; i++) {
        if (i == 0)
            po[0] = ro[0] = 0;
        const int32_t *ps = d->prompt.tokens + d->prompt.offsets[rows[i]];
        const int32_t *rs = d->response.tokens + d->response.offsets[rows[i]];
        int64_t P = d->prompt.offsets[rows[i] + 1] - d->prompt.offsets[rows[i]];
        int64_t R = d->response.offsets[rows[i] + 1] - d->response.offsets[rows[i]];
        int64_t over = P + R - max_len;
        if (over > 0 && !strcmp(trunc, "left")) { /* drop the start of the prompt */
            int64_t cut = over < P - 1 ? over : P - 1;
            ps += cut;
            P -= cut;
            over -= cut;
        }
        if (over > 0) /* "right" (or what "left" could not take): drop the end of the response */
            R = R - over > 0 ? R - over : 0;
        memcpy(p + po[i], ps, (size_t)P * sizeof *p);
        memcpy(r + ro[i], rs, (size_t)R * sizeof *r);
        if (w) /* multi-turn rows fit max_len already: the mask is the row's */
            memcpy(w + ro[i], d->mask + d->response.offsets[rows[i]], (size_t)R * sizeof *w);
        po[i + 1] = po[i] + P;
        ro[i + 1] = ro[i] + R;
    }
    if (!rc)
        rc = df_batch_set_tok_i32(b, "prompt_ids", po, p);
    if (!rc)
        rc = df_batch_set_tok_i32(b, "response_ids", ro, r);
    if (!rc && w)
        rc = df_batch_set_tok_f32(b, "loss_mask", ro, w);
    free(w);
    free(po);
    free(ro);
    free(p);
    free(r);
    if (rc) {
        df_batch_free(b);
        return rc;
    }
    *out = b;
    return DF_OK;
}

typedef struct {
    df_sft_config t; /* the typed config; strings point into the df_config it was resolved from */
    df_comm *comm;   /* the data-parallel ranks (NULL: this process alone) */
    int rank, world;
    const volatile sig_atomic_t *stop; /* the stop request (NULL: none) */
    int stopped;                       /* the agreed stop flag when the loop stopped early */
    char model_dir[2048], out_dir[2048];
    df_tokenizer *tok;
    df_sft_chat_prefix prefix; /* multi-turn: the template's default system turn and generation prompt */
    df_actor *actor;
    sft_data train, val;
    df_dataloader *dl;
    int64_t total_steps, max_len, resumed;
    const char *trunc;
    df_run_log log; /* metrics.jsonl and trainer.logger's other sinks */
    df_sft_ckpt ckpt; /* what a checkpoint saves and a resume restores */
} sft_run;

static void actor_params(const sft_run *s, df_actor_params *p)
{
    const struct df_sft_optim *o = &s->t.optim;
    memset(p, 0, sizeof *p);
    p->optim.lr = o->lr;
    p->optim.weight_decay = o->weight_decay;
    p->optim.beta1 = o->betas.items[0]; /* the schema requires exactly 2 items */
    p->optim.beta2 = o->betas.items[1];
    p->optim.adam_eps = 1e-8;
    p->optim.schedule = !strcmp(o->lr_scheduler, "wsd") ? DF_LR_WSD : DF_LR_COSINE;
    p->optim.total_steps = s->total_steps;
    int64_t warm = o->lr_warmup_steps;
    p->optim.warmup_steps = warm > 0 ? warm : (int64_t)(o->lr_warmup_steps_ratio * (double)s->total_steps);
    p->optim.min_lr_ratio = o->min_lr_ratio;
    p->optim.num_cycles = o->num_cycles;
    p->optim.grad_clip = o->clip_grad;
    p->optim.shard_optim = true; /* as verl's FSDP SFT trainer, which shards over every rank */
    df_role_lora_config(NULL, "model", s->t.model.lora_rank, s->t.model.lora_alpha,
                        &s->t.model.target_modules, s->t.model.lora_adapter_path, NULL, NULL,
                        &p->optim.lora); /* checked */
    p->optim.lora_seed = (uint64_t)s->t.trainer.seed;
    p->optim.lora_adapter = s->t.model.lora_adapter_path;
    p->micro_batch_size = s->t.data.micro_batch_size_per_gpu;
    p->logprob_micro_batch_size = p->micro_batch_size;
    p->temperature = 1.0f;
    p->gradient_checkpointing = s->t.model.enable_gradient_checkpointing;
    p->bf16 = df_role_compute_bf16("model.fsdp_config.mixed_precision.param_dtype",
                                   s->t.model.fsdp_config.mixed_precision.param_dtype,
                                   s->t.trainer.device, true);
}

/* Every rank's status agreed (collective): a failure anywhere fails every rank. */
static int agree(const sft_run *s, int rc, const char *what)
{
    return df_worker_agree(s->comm, rc, what, "job");
}

/* Token-mean NLL of the validation responses (verl's val/loss), each rank its shard (collective). */
static int val_loss(sft_run *s, double *loss)
{
    int64_t n = df_dataset_size(s->val.ds);
    double nll = 0, wsum = 0, sums[2];
    int rc = DF_OK;
    for (int64_t start = 0; start < n && !rc; start += 256) {
        int64_t k = n - start < 256 ? n - start : 256, rows[256];
        for (int64_t i = 0; i < k; i++)
            rows[i] = start + i;
        df_batch *b = NULL;
        rc = make_batch(&s->val, rows, k, s->max_len, s->trunc, &b);
        if (!rc)
            rc = df_actor_compute_log_prob(s->actor, b, "log_probs", NULL);
        const df_column *lp = rc ? NULL : df_batch_column(b, "log_probs");
        const df_column *w = rc ? NULL : df_batch_column(b, "loss_mask"); /* multi-turn: assistant tokens */
        for (int64_t j = 0; lp && j < lp->offsets[k]; j++) {
            double wj = w ? ((const float *)w->data)[j] : 1.0;
            nll -= wj * ((const float *)lp->data)[j];
            wsum += wj;
        }
        df_batch_free(b);
    }
    rc = df_worker_group_sum(s->comm, rc, (const double[]){nll, wsum}, 2, sums, "val/loss", "job");
    *loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
    return rc;
}

/* The console line (trainer.logger has console), then metrics.jsonl's line of `step` and trainer.logger's
   other sinks; `sync`: the line durable before the checkpoint after it. */
static int log_step(sft_run *s, int64_t step, df_metrics *m, double dt, double tokens, bool sync)
{
    df_metrics_set(m, "train/tokens_per_second", dt > 0 ? tokens / dt : 0);
    if (s->rank != 0) /* the metrics are global: rank 0 writes them */
        return DF_OK;
    if (df_config_strs_has(&s->t.trainer.logger, "console")) {
        printf("sft step %lld/%lld | loss %.4f | lr %.2e | grad_norm %.3f | %.0f tok/s",
               (long long)step, (long long)s->total_steps, df_metrics_get(m, "train/loss", 0),
               df_metrics_get(m, "train/lr", 0), df_metrics_get(m, "train/grad_norm", 0),
               df_metrics_get(m, "train/tokens_per_second", 0));
        if (df_metrics_has(m, "val/loss"))
            printf(" | val_loss %.4f", df_metrics_get(m, "val/loss", 0));
        printf("\n");
        fflush(stdout);
    }
    return df_run_log_step(&s->log, step, m, sync);
}

/* Step `step`'s rows of this rank as a batch; *tokens: the global batch's prompt + response tokens
   (collective: the ranks' statuses agreed before the step's reductions). */
static int step_batch(sft_run *s, int64_t *rows, df_batch **b, double *tokens)
{
    int64_t epoch, pos, n = 0;
    df_dataloader_tell(s->dl, &epoch, &pos);
    int rc = df_dataloader_indices(s->dl, epoch, pos, rows, s->t.data.train_batch_size, &n);
    if (!rc)
        rc = df_dataloader_seek(s->dl, epoch, pos + 1);
    if (!rc)
        rc = make_batch(&s->train, rows, n, s->max_len, s->trunc, b);
    double mine = rc ? 0 : (double)(df_batch_offsets(*b, "prompt_ids")[n] + df_batch_offsets(*b, "response_ids")[n]);
    return df_worker_group_sum(s->comm, rc, &mine, 1, tokens, "the step's batch", "job");
}

static int poll_stop(const sft_run *s, int *stop)
{
    return df_worker_poll_stop(s->comm, s->stop, stop);
}

static int stopped(sft_run *s, int flag, int64_t done, bool saved)
{
    s->stopped = flag;
    return df_worker_stopped(s->rank == 0, done, s->total_steps, saved, s->t.trainer.save_freq);
}

static int sft_loop(sft_run *s)
{
    int64_t per_epoch = df_dataloader_steps_per_epoch(s->dl);
    int64_t save_freq = s->t.trainer.save_freq;
    int64_t test_freq = s->t.trainer.test_freq;
    int64_t *rows = malloc((size_t)s->t.data.train_batch_size * sizeof *rows);
    df_metrics *m = df_metrics_new();
    int rc = agree(s, rows && m ? DF_OK : df_error(DF_ENOMEM, "out of memory"), "starting the loop");
    if (s->resumed >= s->total_steps && s->rank == 0)
        fprintf(stderr, "[distflow] the checkpoint is at step %lld of %lld: nothing left to train\n",
                (long long)s->resumed, (long long)s->total_steps);
    double start = df_now();
    int stop = 0; /* a signal while loading: stop before the first step */
    if (!rc && s->resumed < s->total_steps && !(rc = poll_stop(s, &stop)) && stop)
        rc = stopped(s, stop, s->resumed, false);
    for (int64_t step = s->resumed + 1; step <= s->total_steps && !rc; step++) {
        double t0 = df_now(), tokens = 0;
        df_batch *b = NULL;
        df_metrics_clear(m);
        rc = step_batch(s, rows, &b, &tokens);
        if (!rc) /* collective: a rank that fails here fails them all */
            rc = df_actor_sft_step(s->actor, b, m);
        df_batch_free(b);
        bool last = step == s->total_steps, epoch_end = step % per_epoch == 0;
        if (!rc && s->val.ds && (last || (test_freq > 0 ? step % test_freq == 0 : epoch_end))) {
            double vl;
            if (!(rc = val_loss(s, &vl)))
                df_metrics_set(m, "val/loss", vl);
        }
        if (!rc && !last)
            rc = poll_stop(s, &stop);
        bool save = last || (save_freq > 0 && (step % save_freq == 0 || stop));
        if (!rc) /* the line before the checkpoint, as train writes it (docs/checkpoints.md) */
            rc = agree(s, log_step(s, step, m, df_now() - t0, tokens, save), "writing the metrics");
        if (!rc)
            df_kill_point("metrics");
        if (!rc && save)
            rc = df_sft_checkpoint_save(&s->ckpt, step);
        if (!rc && stop)
            rc = stopped(s, stop, step, save);
    }
    if (!rc && s->total_steps > 0 && s->rank == 0) /* the last step is always saved */
        printf("== finished: %lld steps in %.1fs; last loss %.4f; checkpoint %s/global_step_%lld; metrics "
               "%s/metrics.jsonl\n",
               (long long)(s->total_steps - s->resumed), df_now() - start, df_metrics_get(m, "train/loss", 0), s->out_dir,
               (long long)s->total_steps, s->out_dir);
    free(rows);
    df_metrics_free(m);
    return rc;
}

/*
 * The tokenizer's chat template as data.* asks: data.chat_template in place of its own, the
 * multi-turn prefixes, then data.apply_chat_template_kwargs as variables of every render (verl
 * passes them to each apply_chat_template call but extracts the prefixes without them).
 */
static int setup_chat(sft_run *s)
{
    const df_sft_config *t = &s->t;
    int rc = df_worker_chat_template(s->tok, t->data.chat_template, "data.chat_template");
    if (!rc && t->data.multiturn.enable)
        rc = df_sft_chat_prefix_init(s->tok, &s->prefix);
    if (rc)
        return rc;
    char *kwargs = NULL;
    if (!(rc = df_config_map_json(t->data.apply_chat_template_kwargs, &kwargs)))
        rc = df_tokenizer_set_chat_template_kwargs(s->tok, kwargs);
    free(kwargs);
    return rc ? df_error_wrap(rc, "data.apply_chat_template_kwargs") : DF_OK;
}

static void sft_warn(void *user, const char *msg)
{
    (void)user;
    fprintf(stderr, "[distflow] warning: %s\n", msg);
}

static int check_supported(const df_config *cfg, const df_sft_config *t)
{
    int rc = df_config_check_compat(cfg, sft_warn, NULL);
    if (rc)
        return rc;
    const df_config_list_ref contents[] = {{&t->trainer.checkpoint.save_contents, "trainer.checkpoint.save_contents"},
                                           {&t->trainer.checkpoint.load_contents, "trainer.checkpoint.load_contents"}};
    rc = df_config_check_outputs(cfg, contents, 2); /* trainer.logger, tensorboard_dir, checkpoint contents */
    if (rc)
        return rc;
    if ((rc = df_role_lora_config(cfg, "model", t->model.lora_rank, t->model.lora_alpha,
                                  &t->model.target_modules, t->model.lora_adapter_path, NULL, NULL, NULL)))
        return rc;
    if (!df_backend_available(t->trainer.device))
        return df_error(DF_EUNSUPPORTED, "trainer.device=%s: this build of distflow has the %s backend "
                        "only (docs/cuda.md)", t->trainer.device, df_backend_names());
    return DF_OK;
}

/* The model and tokenizer of model.partial_pretrain, the chat template, the data. */
static int load_inputs(sft_run *s, const df_config *cfg, df_model **m)
{
    const df_sft_config *t = &s->t;
    int rc = check_supported(cfg, t);
    df_seq_bound len = {.len = t->data.max_length}; /* multi-turn: the whole conversation */
    snprintf(len.why, sizeof len.why, "data.max_length=%lld (%s)", (long long)len.len,
             df_config_where(cfg, "data.max_length"));
    if (!rc) /* before the weights are read */
        rc = df_check_max_pos_dir(s->model_dir, NULL, df_config_where(cfg, "model.partial_pretrain"),
                                  "model.partial_pretrain", &len);
    if (!rc && (rc = df_hf_dir_load(s->model_dir, NULL, NULL, m, &s->tok)))
        rc = df_error_wrap(rc, "model.partial_pretrain");
    if (!rc)
        rc = setup_chat(s);
    if (!rc)
        rc = load(t, "data.train_files", &t->data.train_files, t->data.train_max_samples, s->tok, &s->prefix,
                  s->rank, s->world, true, &s->train);
    if (!rc && t->data.val_files.n > 0)
        rc = load(t, "data.val_files", &t->data.val_files, t->data.val_max_samples, s->tok, &s->prefix,
                  s->rank, s->world, false, &s->val);
    return agree(s, rc, "loading the model and data");
}

/* The dataloader: one global order of the training rows, this rank its share of each batch. */
static int make_loader(sft_run *s)
{
    const df_sft_config *t = &s->t;
    int rc = df_dataloader_create(s->train.ds, t->data.train_batch_size, s->rank, s->world, true,
                                  (uint64_t)t->trainer.seed, true, &s->dl);
    if (rc)
        rc = df_error_wrap(rc, "data.train_batch_size=%lld on %d rank(s)", (long long)t->data.train_batch_size,
                           s->world);
    return agree(s, rc, "the dataloader");
}

/* The actor on trainer.device, its gradients summed over the ranks. */
static int make_actor(sft_run *s, df_model **m)
{
    s->total_steps = s->t.trainer.total_training_steps.set
                         ? s->t.trainer.total_training_steps.v
                         : df_dataloader_steps_per_epoch(s->dl) * s->t.trainer.total_epochs;
    df_actor_params p;
    actor_params(s, &p);
    int rc = df_actor_create(*m, &p, true, &s->actor);
    if (!rc) {
        *m = NULL;
        df_actor_set_comm(s->actor, s->comm);
    }
    df_backend be; /* forward / backward on trainer.device (docs/cuda.md) */
    if (!rc && ((rc = df_backend_open(s->t.trainer.device, &be)) || (rc = df_actor_set_backend(s->actor, &be))))
        rc = df_error_wrap(rc, "trainer.device=%s", s->t.trainer.device);
    return agree(s, rc, "creating the model's trainer");
}

static void print_banner(const sft_run *s, double examples)
{
    printf("== distflow %s sft\n", df_version());
    df_print_model_info(stdout, s->model_dir, df_actor_model(s->actor), df_actor_bf16(s->actor),
                        df_actor_core(s->actor)->lora, NULL, NULL);
    printf("data: %.0f examples, %lld steps of %lld", examples, (long long)s->total_steps,
           (long long)s->t.data.train_batch_size);
    if (s->world > 1)
        printf(" (%lld per rank on %d data-parallel ranks)", (long long)(s->t.data.train_batch_size / s->world),
               s->world);
    printf("; outputs: %s/ (global_step_<N>, metrics.jsonl)\n", s->out_dir);
    fflush(stdout);
}

int df_sft_run(const df_config *cfg, const df_sft_opts *o, int *stopped_by)
{
    df_comm *comm = o ? o->comm : NULL;
    sft_run s = {.comm = comm, .rank = comm ? df_comm_rank(comm) : 0, .world = comm ? df_comm_size(comm) : 1,
                 .stop = o ? o->stop : NULL};
    if (stopped_by)
        *stopped_by = 0;
    int rc = df_sft_config_resolve(cfg, &s.t);
    if (rc)
        return rc;
    const df_sft_config *t = &s.t;
    s.trunc = t->data.truncation;
    s.max_len = t->data.max_length;
    char *md = df_expand_user(t->model.partial_pretrain);
    char *od = df_expand_user(t->trainer.default_local_dir);
    snprintf(s.model_dir, sizeof s.model_dir, "%s", md ? md : "");
    snprintf(s.out_dir, sizeof s.out_dir, "%s", od ? od : "");
    free(md);
    free(od);
    df_model *m = NULL;
    rc = load_inputs(&s, cfg, &m);
    if (!rc)
        rc = make_loader(&s);
    if (!rc)
        rc = make_actor(&s, &m);
    s.ckpt = (df_sft_ckpt){.cfg = cfg, .t = t, .out_dir = s.out_dir, .tokenizer_dir = s.model_dir, .model_dir = s.model_dir,
                           .chat_template = t->data.chat_template && s.tok ? df_tokenizer_chat_template(s.tok) : NULL,
                           .actor = s.actor, .dl = s.dl, .total_steps = s.total_steps, .comm = comm,
                           .rank = s.rank, .world = s.world};
    if (!rc) /* the output directory itself is made by the first metrics line or checkpoint */
        rc = df_sft_checkpoint_resume(&s.ckpt, &s.resumed);
    double examples = 0, mine = rc ? 0 : (double)df_dataset_size(s.train.ds);
    if (!rc) { /* rank 0 logs; the examples are the shards' sum */
        int lrc = s.rank ? DF_OK
                         : df_run_log_open(&s.log, &(df_run_log_opts){
                                                       .out_dir = s.out_dir, .resumed_step = s.resumed,
                                                       .logger = &t->trainer.logger,
                                                       .tensorboard_dir = t->trainer.tensorboard_dir,
                                                       .project = t->trainer.project_name,
                                                       .experiment = t->trainer.experiment_name, .print = true});
        rc = df_worker_group_sum(comm, lrc, &mine, 1, &examples, "opening the logs", "job");
    }
    if (!rc && s.rank == 0)
        print_banner(&s, examples);
    if (!rc)
        rc = sft_loop(&s);
    if (stopped_by)
        *stopped_by = s.stopped;
    df_run_log_close(&s.log);
    df_model_free(m);
    df_actor_free(s.actor);
    df_dataloader_free(s.dl);
    sft_data_free(&s.train);
    sft_data_free(&s.val);
    df_sft_chat_prefix_free(&s.prefix);
    df_tokenizer_free(s.tok);
    return rc;
}
