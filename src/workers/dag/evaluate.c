/* Validation / evaluation over a dataset (evaluate.h). */
#include "workers/dag/evaluate.h"

#include "distflow/dataloader.h"
#include "workers/common/data_metrics.h"
#include "workers/dag/metrics_reduce.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Add v to the sum "src/<name>/<field>", or "total/<field>" for name NULL. */
static void add(df_metrics *t, const char *name, const char *field, double v)
{
    char key[512];
    if (name)
        snprintf(key, sizeof key, "src/%s/%s", name, field);
    else
        snprintf(key, sizeof key, "total/%s", field);
    df_metrics_add(t, key, v);
}

static df_metric_reduce sum_rule(const char *name)
{
    (void)name;
    return DF_METRIC_SUM;
}

/* val-core/<source>/{reward,acc}/mean@n from the "src/<source>/{score,acc,n}" sums. */
static void source_metrics(const df_metrics *t, int64_t n, df_metrics *out)
{
    for (int i = 0; i < df_metrics_count(t); i++) {
        double cnt;
        const char *k = df_metrics_at(t, i, &cnt);
        size_t len = strlen(k);
        if (strncmp(k, "src/", 4) || len < 7 || strcmp(k + len - 2, "/n"))
            continue;
        char name[512], key[600];
        snprintf(name, sizeof name, "%.*s", (int)(len - 6), k + 4);
        snprintf(key, sizeof key, "src/%s/score", name);
        double sc = df_metrics_get(t, key, 0);
        snprintf(key, sizeof key, "src/%s/acc", name);
        double ac = df_metrics_get(t, key, 0);
        snprintf(key, sizeof key, "val-core/%s/reward/mean@%lld", name, (long long)n);
        df_metrics_set(out, key, sc / cnt);
        snprintf(key, sizeof key, "val-core/%s/acc/mean@%lld", name, (long long)n);
        df_metrics_set(out, key, ac / cnt);
        static const char *const extra[] = {"overlong_reward", "overlong"}; /* dapo, overlong_buffer.log */
        for (int e = 0; e < 2; e++) {
            snprintf(key, sizeof key, "src/%s/%s", name, extra[e]);
            if (!df_metrics_has(t, key))
                continue;
            double v = df_metrics_get(t, key, 0);
            snprintf(key, sizeof key, "val-aux/%s/%s/mean@%lld", name, extra[e], (long long)n);
            df_metrics_set(out, key, v / cnt);
        }
    }
}

/* The reward of row i as verl's validation sums it: the row's token_level_scores (with dapo's overlong
 * penalty), or its score when the response is empty and has no token to carry it. */
static double row_reward(const df_batch *b, int64_t i)
{
    int64_t len = 0;
    const float *t = df_batch_tok_f32(b, "token_level_scores", i, &len);
    return t && len > 0 ? df_row_sum_f32(t, len) : df_batch_f32(b, "score")[i];
}

/* One JSON line per response (df_eval_opts.dump). */
static int dump_rows(FILE *f, const df_tokenizer *tok, const df_dataset *ds, const df_batch *b,
                     const df_eval_opts *o)
{
    const int64_t *idx = df_batch_i64(b, "index"), *pos = df_batch_i64(b, "row");
    const float *score = df_batch_f32(b, "score"), *acc = df_batch_f32(b, "acc");
    int rc = DF_OK;
    for (int64_t i = 0; !rc && i < df_batch_size(b); i++) {
        int64_t plen, rlen;
        const int32_t *p = df_batch_tok_i32(b, "prompt_ids", i, &plen);
        const int32_t *r = df_batch_tok_i32(b, "response_ids", i, &rlen);
        char *input = NULL, *output = NULL;
        rc = df_tokenizer_decode(tok, p, plen, false, &input);
        if (!rc)
            rc = df_tokenizer_decode(tok, r, rlen, true, &output);
        json_t *row = rc ? NULL
                         : json_pack("{s:s, s:s, s:s, s:f, s:f, s:I, s:s}", "input", input, "output",
                                     output, "gts", df_dataset_ground_truth(ds, pos[i]), "score",
                                     (double)score[i], "acc", (double)acc[i], "index",
                                     (json_int_t)idx[i], "data_source",
                                     df_dataset_data_source(ds, pos[i]));
        if (row && o->with_step)
            json_object_set_new(row, "step", json_integer((json_int_t)o->step));
        if (!rc && !row)
            rc = df_error(DF_ENOMEM, "out of memory writing generations");
        if (!rc && (json_dumpf(row, f, JSON_COMPACT | JSON_ENSURE_ASCII) || fputc('\n', f) == EOF))
            rc = df_error(DF_EIO, "writing the generations: %s", strerror(errno));
        json_decref(row);
        free(input), free(output);
    }
    return rc;
}

int df_evaluate(df_rollout_engine *e, const df_model *m, const df_tokenizer *tok,
                const df_reward_manager_cfg *rcfg, const df_dataset *ds,
                const df_prompt_cache *pc, const df_eval_opts *o, df_metrics *metrics,
                df_eval_result *res)
{
    int64_t n_rows = df_dataset_size(ds);
    int64_t chunk = o->batch_prompts > 0 && o->batch_prompts < n_rows ? o->batch_prompts : n_rows;
    df_dataloader *dl = NULL;
    /* with a comm, a rank's shard may be empty (a small val set on many ranks) */
    int rc = n_rows > 0 ? df_dataloader_create(ds, chunk, 0, 1, false, 0, false, &dl) : DF_OK;
    df_metrics *t = df_metrics_new(); /* sums: total/<field>, src/<data_source>/<field> */
    if (!t)
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int64_t s = 0; !rc && dl && s < df_dataloader_steps_per_epoch(dl); s++) {
        df_batch *prompts = NULL, *b = NULL;
        rc = df_dataloader_next(dl, &prompts);
        if (!rc)
            rc = df_prompts_attach(prompts, pc);
        if (!rc)
            rc = df_generate_batch(e, m, prompts, o->n, &o->sp, o->seed, o->label, &b);
        if (!rc)
            rc = df_score_batch(tok, rcfg, b, NULL);
        if (!rc && o->dump)
            rc = dump_rows(o->dump, tok, ds, b, o);
        for (int64_t i = 0; !rc && i < df_batch_size(b); i++) {
            double sc = row_reward(b, i), ac = df_batch_f32(b, "acc")[i];
            int64_t len;
            df_batch_tok_i32(b, "response_ids", i, &len);
            const char *source = df_dataset_data_source(ds, df_batch_i64(b, "row")[i]);
            add(t, NULL, "score", sc), add(t, NULL, "acc", ac), add(t, NULL, "resp_len", (double)len);
            add(t, NULL, "n", 1), add(t, source, "score", sc), add(t, source, "acc", ac), add(t, source, "n", 1);
            if (df_batch_has(b, "overlong_reward"))
                add(t, source, "overlong_reward", df_batch_f32(b, "overlong_reward")[i]),
                    add(t, source, "overlong", df_batch_f32(b, "overlong")[i]);
        }
        df_batch_free(prompts);
        df_batch_free(b);
    }
    df_dataloader_free(dl);
    if (t && (rc || o->replica)) /* failed, or it repeats another rank's shard: contribute nothing */
        df_metrics_clear(t);
    if (t) {
        add(t, NULL, "prompts", o->replica ? 0 : (double)n_rows);
        add(t, NULL, "failed", rc ? 1 : 0); /* every rank joins the reduce, so none waits for a failed one */
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
    if (rc) {
        df_metrics_free(t);
        return rc;
    }
    double n_resp = df_metrics_get(t, "total/n", 0), div = n_resp > 0 ? n_resp : 1;
    *res = (df_eval_result){.n_prompts = (int64_t)df_metrics_get(t, "total/prompts", 0),
                            .n_responses = (int64_t)n_resp,
                            .score_mean = df_metrics_get(t, "total/score", 0) / div,
                            .acc_mean = df_metrics_get(t, "total/acc", 0) / div,
                            .response_length_mean = df_metrics_get(t, "total/resp_len", 0) / div};
    if (metrics) {
        source_metrics(t, o->n, metrics);
        df_metrics_set(metrics, "val-aux/response_length/mean", res->response_length_mean);
    }
    df_metrics_free(t);
    return DF_OK;
}
