/* Validation / evaluation over a dataset (evaluate.h). */
#include "workers/dag/evaluate.h"

#include "distflow/dataloader.h"
#include "engine/actor.h"
#include "distflow/rng.h"
#include "workers/common/val_metrics.h"
#include "workers/dag/gen_dump.h"
#include "workers/dag/metrics_reduce.h"
#include "workers/reward/score_batch.h"

#include <stdio.h>
#include <stdlib.h>

/* Add v to the sum "total/<field>". */
static void add_total(df_metrics *t, const char *field, double v)
{
    char key[64];
    snprintf(key, sizeof key, "total/%s", field);
    df_metrics_add(t, key, v);
}

static df_metric_reduce sum_rule(const char *name)
{
    (void)name;
    return DF_METRIC_SUM;
}

/* The next batch of dl, generated: o->n responses per prompt into *out. */
static int generate_next(df_dataloader *dl, df_rollout_engine *e, const df_model *m, const df_tokenizer *tok,
                         const df_prompt_cache *pc, const df_eval_opts *o, df_batch **out)
{
    df_batch *prompts = NULL, *b = NULL;
    int rc = df_dataloader_next(dl, &prompts);
    if (!rc)
        rc = df_prompts_attach(prompts, pc);
    if (!rc && o->generate)
        rc = o->generate(o->gen_user, prompts, o->n, o->seed, &b);
    else if (!rc)
        rc = df_agent_generate(o->agent, tok, e, m, prompts, o->n, &o->sp, o->seed,
                               df_rng_key(o->seed, 0xe57, 0, 0), o->label, &b);
    df_batch_free(prompts);
    if (rc)
        df_batch_free(b);
    else
        *out = b;
    return rc;
}

/* Score generated rows and add them to the sums t: the dump's lines, the validation metrics, the totals. */
static int score_rows(const df_tokenizer *tok, const df_reward_manager_cfg *rcfg, df_batch *b,
                      const df_eval_opts *o, bool with_metrics, df_metrics *t)
{
    int rc = df_score_batch(tok, rcfg, b, NULL);
    if (!rc && o->dump)
        rc = df_gen_dump_rows(o->dump, tok, b, o->with_step, o->step);
    if (!rc && with_metrics) /* per prompt, keyed by its dataset-wide index: independent of the split */
        rc = df_val_metrics_add(t, b, o->n, o->seed);
    for (int64_t i = 0; !rc && i < df_batch_size(b); i++) {
        int64_t len;
        df_batch_tok_i32(b, "response_ids", i, &len);
        add_total(t, "score", df_sequence_score(b, i)), add_total(t, "acc", df_batch_f32(b, "acc")[i]);
        add_total(t, "resp_len", (double)len), add_total(t, "n", 1);
    }
    return rc;
}

/* *res and the metrics from the sums over every prompt in t. */
static int finish(const df_metrics *t, const df_eval_opts *o, df_metrics *metrics, df_eval_result *res)
{
    double n_resp = df_metrics_get(t, "total/n", 0), div = n_resp > 0 ? n_resp : 1;
    *res = (df_eval_result){.n_prompts = (int64_t)df_metrics_get(t, "total/prompts", 0),
                            .n_responses = (int64_t)n_resp,
                            .score_mean = df_metrics_get(t, "total/score", 0) / div,
                            .acc_mean = df_metrics_get(t, "total/acc", 0) / div,
                            .response_length_mean = df_metrics_get(t, "total/resp_len", 0) / div};
    int rc = DF_OK;
    if (metrics && !(rc = df_val_metrics_finish(t, o->n, metrics)))
        rc = df_metrics_set(metrics, "val-aux/response_length/mean", res->response_length_mean);
    return rc;
}

/* The rows of ds in file order, `chunk` prompts a batch, with the column rcfg scores by. */
static int prompt_loader(const df_dataset *ds, int64_t chunk, const df_reward_manager_cfg *rcfg,
                         df_dataloader **dl)
{
    int rc = df_dataloader_create(ds, chunk, 0, 1, false, 0, false, dl);
    if (!rc && (rc = df_score_key_column(*dl, rcfg ? rcfg->reward_fn_key : NULL))) {
        df_dataloader_free(*dl);
        *dl = NULL;
    }
    return rc;
}

/* Each rank scores its own rows; the sums are added over the ranks. */
static int evaluate_reduced(df_rollout_engine *e, const df_model *m, const df_tokenizer *tok,
                            const df_reward_manager_cfg *rcfg, const df_dataset *ds,
                            const df_prompt_cache *pc, const df_eval_opts *o, df_metrics *metrics,
                            df_eval_result *res)
{
    int64_t n_rows = df_dataset_size(ds);
    int64_t chunk = o->batch_prompts > 0 && o->batch_prompts < n_rows ? o->batch_prompts : n_rows;
    df_dataloader *dl = NULL;
    /* with a comm, a rank's shard may be empty (a small val set on many ranks) */
    int rc = n_rows > 0 ? prompt_loader(ds, chunk, rcfg, &dl) : DF_OK;
    df_metrics *t = df_metrics_new(); /* sums: total/<field> and df_val_metrics_add's */
    if (!t)
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int64_t s = 0; !rc && dl && s < df_dataloader_steps_per_epoch(dl); s++) {
        df_batch *b = NULL;
        rc = generate_next(dl, e, m, tok, pc, o, &b);
        if (!rc)
            rc = score_rows(tok, rcfg, b, o, metrics != NULL, t);
        df_batch_free(b);
    }
    df_dataloader_free(dl);
    if (t && (rc || o->replica)) /* failed, or it repeats another rank's shard: contribute nothing */
        df_metrics_clear(t);
    if (t) {
        add_total(t, "prompts", o->replica ? 0 : (double)n_rows);
        add_total(t, "failed", rc ? 1 : 0); /* every rank joins the reduce, so none waits for a failed one */
    }
    if (t && o->comm) {
        int crc = df_metrics_reduce_by(o->comm, t, sum_rule);
        rc = rc ? rc : crc;
    }
    if (!rc && df_metrics_get(t, "total/failed", 0) > 0)
        rc = df_error(DF_EINTERNAL, "evaluation: %g other rank(s) failed; their own errors say why",
                      df_metrics_get(t, "total/failed", 0));
    if (!rc && df_metrics_get(t, "total/prompts", 0) == 0)
        rc = df_error(DF_EINVAL, "evaluation dataset is empty");
    if (!rc)
        rc = finish(t, o, metrics, res);
    df_metrics_free(t);
    return rc;
}

/* Every response this rank generates for its rows, serialized into *buf (NULL, 0 for none). */
static int generate_shard(df_rollout_engine *e, const df_model *m, const df_tokenizer *tok,
                          const df_reward_manager_cfg *rcfg, const df_dataset *ds, const df_prompt_cache *pc,
                          const df_eval_opts *o, uint8_t **buf, size_t *len)
{
    int64_t n_rows = df_dataset_size(ds);
    int64_t chunk = o->batch_prompts > 0 && o->batch_prompts < n_rows ? o->batch_prompts : n_rows;
    df_dataloader *dl = NULL;
    int rc = n_rows > 0 ? prompt_loader(ds, chunk, rcfg, &dl) : DF_OK;
    int64_t steps = dl ? df_dataloader_steps_per_epoch(dl) : 0, done = 0;
    df_batch **parts = calloc((size_t)(steps ? steps : 1), sizeof *parts), *all = NULL;
    if (!rc && !parts)
        rc = df_error(DF_ENOMEM, "out of memory");
    for (; !rc && done < steps; done++) {
        rc = generate_next(dl, e, m, tok, pc, o, &parts[done]);
        /* what rank 0 does not read: the sampler's log-probs (a float per token) and the local row */
        if (!rc)
            df_batch_drop(parts[done], "rollout_log_probs"), df_batch_drop(parts[done], "row"),
                df_batch_drop(parts[done], DF_ROUTES_COLUMN);
    }
    if (!rc && steps > 0)
        rc = df_batch_concat((const df_batch *const *)parts, (int)steps, &all);
    if (!rc && all)
        rc = df_batch_serialize(all, buf, len);
    for (int64_t s = 0; parts && s < done; s++)
        df_batch_free(parts[s]);
    free(parts);
    df_batch_free(all);
    df_dataloader_free(dl);
    return rc;
}

typedef struct {
    int64_t index, pos;
} row_key;

static int cmp_row_key(const void *a, const void *b)
{
    const row_key *x = a, *y = b;
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Rank 0 of o->comm: every rank's rows (blocks of *recv, freed once read), in the order of the
 * dataset-wide index (a prompt's responses in their order), scored in batches of o->batch_prompts
 * prompts as one rank's dataloader would cut them: the same operations on the same values in the
 * same order. */
static int score_gathered(void **recv, const int64_t *counts, const int64_t *displs, int size,
                          int64_t n_prompts, const df_tokenizer *tok, const df_reward_manager_cfg *rcfg,
                          const df_eval_opts *o, df_metrics *metrics, df_eval_result *res)
{
    df_batch **parts = calloc((size_t)size, sizeof *parts), *all = NULL, *sorted = NULL;
    df_metrics *t = df_metrics_new();
    int rc = parts && t ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    int np = 0;
    for (int r = 0; !rc && r < size; r++)
        if (counts[r] > 0 &&
            (rc = df_batch_deserialize((const uint8_t *)*recv + displs[r], (size_t)counts[r], &parts[np++])))
            rc = df_error_wrap(rc, "evaluation: the responses of rank %d", r);
    free(*recv);
    *recv = NULL;
    if (!rc && np == 0)
        rc = df_error(DF_EINTERNAL, "evaluation: %lld prompts but no responses", (long long)n_prompts);
    if (!rc)
        rc = df_batch_concat((const df_batch *const *)parts, np, &all);
    for (int r = 0; parts && r < np; r++)
        df_batch_free(parts[r]);
    free(parts);
    int64_t rows = rc ? 0 : df_batch_size(all);
    const int64_t *index = rc ? NULL : df_batch_i64(all, "index");
    row_key *keys = rc ? NULL : malloc((size_t)(rows ? rows : 1) * sizeof *keys);
    int64_t *perm = rc ? NULL : malloc((size_t)(rows ? rows : 1) * sizeof *perm);
    if (!rc && (!index || !keys || !perm))
        rc =
            index ? df_error(DF_ENOMEM, "out of memory") : df_error(DF_EINVAL, "evaluation: no index column");
    for (int64_t i = 0; !rc && i < rows; i++)
        keys[i] = (row_key){index[i], i};
    if (!rc)
        qsort(keys, (size_t)rows, sizeof *keys, cmp_row_key);
    for (int64_t i = 0; !rc && i < rows; i++)
        perm[i] = keys[i].pos;
    if (!rc)
        rc = df_batch_select(all, perm, rows, &sorted);
    df_batch_free(all);
    const int64_t *si = rc ? NULL : df_batch_i64(sorted, "index");
    for (int64_t lo = 0, hi; !rc && lo < rows; lo = hi) { /* [lo, hi): batch_prompts prompts */
        int64_t prompts = 1;
        for (hi = lo + 1;
             hi < rows && (si[hi] == si[hi - 1] || o->batch_prompts <= 0 || prompts < o->batch_prompts); hi++)
            prompts += si[hi] != si[hi - 1];
        df_batch *b = NULL;
        rc = df_batch_slice(sorted, lo, hi, &b);
        if (!rc)
            rc = score_rows(tok, rcfg, b, o, metrics != NULL, t);
        df_batch_free(b);
    }
    df_batch_free(sorted);
    free(keys), free(perm);
    if (!rc) {
        add_total(t, "prompts", (double)n_prompts);
        rc = finish(t, o, metrics, res);
    }
    df_metrics_free(t);
    return rc;
}

/* o->gather: generation on every rank, scoring and sums on rank 0 (evaluate.h). */
static int evaluate_gathered(df_rollout_engine *e, const df_model *m, const df_tokenizer *tok,
                             const df_reward_manager_cfg *rcfg, const df_dataset *ds,
                             const df_prompt_cache *pc, const df_eval_opts *o, df_metrics *metrics,
                             df_eval_result *res)
{
    df_comm *c = o->comm;
    int rank = c ? df_comm_rank(c) : 0, size = c ? df_comm_size(c) : 1;
    uint8_t *buf = NULL;
    size_t len = 0;
    int64_t *send_counts = calloc((size_t)size, sizeof *send_counts); /* everything to rank 0 */
    int rc = send_counts ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    if (!rc && !o->replica)
        rc = generate_shard(e, m, tok, rcfg, ds, pc, o, &buf, &len);
    /* every rank joins, so none waits for a failed one */
    int64_t agree[2] = {rc ? 1 : 0, rc || o->replica ? 0 : df_dataset_size(ds)};
    if (c) {
        int crc = df_comm_allreduce(c, agree, 2, DF_COMM_INT64, DF_COMM_SUM);
        rc = rc ? rc : crc;
    }
    if (!rc && agree[0] > 0)
        rc = df_error(DF_EINTERNAL, "evaluation: %lld other rank(s) failed; their own errors say why",
                      (long long)agree[0]);
    if (!rc && agree[1] == 0)
        rc = df_error(DF_EINVAL, "evaluation dataset is empty");
    if (rc) {
        free(buf), free(send_counts);
        return rc;
    }
    void *recv = buf;
    int64_t one[2] = {(int64_t)len, 0}, *counts = one, *displs = one + 1;
    if (c) {
        send_counts[0] = (int64_t)len;
        rc = df_comm_alltoallv(c, buf, send_counts, &recv, &counts, &displs);
        free(buf);
    }
    df_eval_result r = {0};
    if (!rc && rank == 0)
        rc = score_gathered(&recv, counts, displs, size, agree[1], tok, rcfg, o, metrics, &r);
    free(recv);
    if (c)
        free(counts), free(displs);
    free(send_counts);
    /* rank 0 says how it went; every rank joins whatever its own gather did */
    struct {
        int64_t failed;
        df_eval_result r;
    } said = {rc ? 1 : 0, r};
    if (c && size > 1) {
        int crc = df_comm_broadcast(c, &said, sizeof said, 0);
        rc = rc ? rc : crc;
    }
    if (!rc && said.failed)
        rc = df_error(DF_EINTERNAL, "evaluation: rank 0 failed; its own error says why");
    if (!rc)
        *res = said.r;
    return rc;
}

int df_evaluate(df_rollout_engine *e, const df_model *m, const df_tokenizer *tok,
                const df_reward_manager_cfg *rcfg, const df_dataset *ds, const df_prompt_cache *pc,
                const df_eval_opts *o, df_metrics *metrics, df_eval_result *res)
{
    return o->gather ? evaluate_gathered(e, m, tok, rcfg, ds, pc, o, metrics, res)
                     : evaluate_reduced(e, m, tok, rcfg, ds, pc, o, metrics, res);
}
