/* Validation / evaluation over a dataset (evaluate.h). */
#include "worker/evaluate.h"

#include "distflow/dataloader.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SOURCES 64

typedef struct {
    const char *name;
    double score, acc;
    int64_t n;
} source_sum;

static void add_source(source_sum *s, int *n_src, const char *name, double score, double acc)
{
    int k = 0;
    while (k < *n_src && strcmp(s[k].name, name))
        k++;
    if (k == *n_src) {
        if (*n_src == MAX_SOURCES)
            return; /* more sources than we report separately: they still count in the totals */
        s[k] = (source_sum){.name = name};
        (*n_src)++;
    }
    s[k].score += score;
    s[k].acc += acc;
    s[k].n++;
}

static int dump_rows(FILE *f, const df_tokenizer *tok, const df_dataset *ds, const df_batch *b)
{
    const int64_t *idx = df_batch_i64(b, "index"), *pos = df_batch_i64(b, "row");
    const float *score = df_batch_f32(b, "score");
    for (int64_t i = 0; i < df_batch_size(b); i++) {
        int64_t len;
        const int32_t *ids = df_batch_tok_i32(b, "response_ids", i, &len);
        char *text = NULL;
        int rc = df_tokenizer_decode(tok, ids, len, true, &text);
        if (rc)
            return rc;
        json_t *row = json_pack("{s:I, s:s, s:s, s:s, s:f}", "index", (json_int_t)idx[i],
                                "data_source", df_dataset_data_source(ds, pos[i]),
                                "ground_truth", df_dataset_ground_truth(ds, pos[i]), "response",
                                text, "score", (double)score[i]);
        free(text);
        if (!row)
            return df_error(DF_ENOMEM, "out of memory writing generations");
        json_dumpf(row, f, JSON_COMPACT | JSON_ENSURE_ASCII);
        fputc('\n', f);
        json_decref(row);
    }
    return DF_OK;
}

int df_evaluate(df_rollout_engine *e, const df_model *m, const df_tokenizer *tok,
                const df_reward_manager_cfg *rcfg, const df_dataset *ds,
                const df_prompt_cache *pc, const df_eval_opts *o, df_metrics *metrics,
                df_eval_result *res)
{
    int64_t n_rows = df_dataset_size(ds);
    int64_t chunk = o->batch_prompts > 0 && o->batch_prompts < n_rows ? o->batch_prompts : n_rows;
    df_dataloader *dl = NULL;
    int rc = n_rows > 0 ? df_dataloader_create(ds, chunk, 0, 1, false, 0, false, &dl)
                        : df_error(DF_EINVAL, "evaluation dataset is empty");
    source_sum src[MAX_SOURCES];
    int n_src = 0;
    double score = 0, acc = 0, resp_len = 0;
    int64_t n_resp = 0;
    for (int64_t s = 0; !rc && s < df_dataloader_steps_per_epoch(dl); s++) {
        df_batch *prompts = NULL, *b = NULL;
        rc = df_dataloader_next(dl, &prompts);
        if (!rc)
            rc = df_prompts_attach(prompts, pc);
        if (!rc)
            rc = df_generate_batch(e, m, prompts, o->n, &o->sp, o->seed, o->label, &b);
        if (!rc)
            rc = df_score_batch(tok, rcfg, b, NULL);
        if (!rc && o->dump)
            rc = dump_rows(o->dump, tok, ds, b);
        for (int64_t i = 0; !rc && i < df_batch_size(b); i++) {
            double sc = df_batch_f32(b, "score")[i], ac = df_batch_f32(b, "acc")[i];
            int64_t len;
            df_batch_tok_i32(b, "response_ids", i, &len);
            score += sc;
            acc += ac;
            resp_len += (double)len;
            n_resp++;
            add_source(src, &n_src, df_dataset_data_source(ds, df_batch_i64(b, "row")[i]), sc, ac);
        }
        df_batch_free(prompts);
        df_batch_free(b);
    }
    df_dataloader_free(dl);
    if (rc)
        return rc;
    *res = (df_eval_result){.n_prompts = n_rows, .n_responses = n_resp,
                            .score_mean = n_resp ? score / (double)n_resp : 0,
                            .acc_mean = n_resp ? acc / (double)n_resp : 0,
                            .response_length_mean = n_resp ? resp_len / (double)n_resp : 0};
    for (int k = 0; metrics && k < n_src; k++) {
        char key[256];
        snprintf(key, sizeof key, "val-core/%s/reward/mean@%lld", src[k].name, (long long)o->n);
        df_metrics_set(metrics, key, src[k].score / (double)src[k].n);
        snprintf(key, sizeof key, "val-core/%s/acc/mean@%lld", src[k].name, (long long)o->n);
        df_metrics_set(metrics, key, src[k].acc / (double)src[k].n);
    }
    if (metrics)
        df_metrics_set(metrics, "val-aux/response_length/mean", res->response_length_mean);
    return DF_OK;
}
