/* Validation / evaluation over a dataset (evaluate.h). */
#include "worker/evaluate.h"

#include "distflow/dataloader.h"
#include "util/sbuf.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SOURCES 64

typedef struct {
    const char *name;
    double score, acc;
    int64_t n;
} source_sum;

static void add_source(source_sum *s, int *n_src, const char *name, double score, double acc, int64_t n)
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
    s[k].n += n;
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

/*
 * Totals over the ranks of `c`: the scalar sums by allreduce, the per-source
 * sums by an allgather of "name\tscore\tacc\tn" lines merged by name (the
 * ranks may have seen different data sources). The merged names live in *names.
 */
static int reduce_sums(df_comm *c, double *score, double *acc, double *resp_len, int64_t *n_resp,
                       int64_t *n_rows, source_sum *src, int *n_src, char **names)
{
    double d[3] = {*score, *acc, *resp_len};
    int64_t k[2] = {*n_resp, *n_rows};
    int rc = df_comm_allreduce(c, d, 3, DF_COMM_FLOAT64, DF_COMM_SUM);
    if (!rc)
        rc = df_comm_allreduce(c, k, 2, DF_COMM_INT64, DF_COMM_SUM);
    df_sbuf b = {0};
    for (int i = 0; i < *n_src; i++)
        df_sbuf_printf(&b, "%s\t%.17g\t%.17g\t%lld\n", src[i].name, src[i].score, src[i].acc, (long long)src[i].n);
    char *text = NULL;
    int64_t *counts = NULL, *displs = NULL;
    if (!rc)
        rc = df_sbuf_finish(&b, &text);
    else
        df_sbuf_free(&b);
    if (!rc)
        rc = df_comm_allgatherv(c, text, (int64_t)strlen(text), (void **)names, &counts, &displs);
    free(text);
    if (!rc) {
        *score = d[0], *acc = d[1], *resp_len = d[2], *n_resp = k[0], *n_rows = k[1];
        *n_src = 0;
        int64_t total = displs[df_comm_size(c) - 1] + counts[df_comm_size(c) - 1];
        for (char *p = *names, *end = *names + total; p < end;) {
            char *nl = memchr(p, '\n', (size_t)(end - p));
            char *f1 = nl ? memchr(p, '\t', (size_t)(nl - p)) : NULL;
            if (!f1)
                return df_error(DF_EINTERNAL, "malformed validation totals from another rank");
            *f1 = *nl = '\0';
            char *q;
            double sc = strtod(f1 + 1, &q), ac = strtod(q, &q);
            int64_t n = strtoll(q, NULL, 10);
            add_source(src, n_src, p, sc, ac, n);
            p = nl + 1;
        }
    }
    free(counts);
    free(displs);
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
    int rc = n_rows > 0 ? df_dataloader_create(ds, chunk, 0, 1, false, 0, false, &dl)
                        : df_error(DF_EINVAL, "evaluation dataset is empty");
    source_sum src[MAX_SOURCES];
    int n_src = 0;
    char *names = NULL; /* backs src[].name after reduce_sums */
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
            add_source(src, &n_src, df_dataset_data_source(ds, df_batch_i64(b, "row")[i]), sc, ac, 1);
        }
        df_batch_free(prompts);
        df_batch_free(b);
    }
    df_dataloader_free(dl);
    if (!rc && o->replica)
        score = acc = resp_len = 0, n_resp = 0, n_src = 0, n_rows = 0;
    if (!rc && o->comm && df_comm_size(o->comm) > 1)
        rc = reduce_sums(o->comm, &score, &acc, &resp_len, &n_resp, &n_rows, src, &n_src, &names);
    if (rc) {
        free(names);
        return rc;
    }
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
    free(names);
    return DF_OK;
}
