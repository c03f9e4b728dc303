/* Validation / evaluation over a dataset (evaluate.h). */
#include "workers/dag/evaluate.h"

#include "distflow/dataloader.h"
#include "distflow/rng.h"
#include "workers/common/val_metrics.h"
#include "workers/dag/gen_dump.h"
#include "workers/dag/metrics_reduce.h"

#include <stdio.h>

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
    df_metrics *t = df_metrics_new(); /* sums: total/<field> and df_val_metrics_add's */
    if (!t)
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int64_t s = 0; !rc && dl && s < df_dataloader_steps_per_epoch(dl); s++) {
        df_batch *prompts = NULL, *b = NULL;
        rc = df_dataloader_next(dl, &prompts);
        if (!rc)
            rc = df_prompts_attach(prompts, pc);
        if (!rc && o->generate)
            rc = o->generate(o->gen_user, prompts, o->n, o->seed, &b);
        else if (!rc)
            rc = df_agent_generate(o->agent, tok, e, m, prompts, o->n, &o->sp, o->seed, df_rng_key(o->seed, 0xe57, 0, 0),
                                   o->label, &b);
        if (!rc)
            rc = df_score_batch(tok, rcfg, b, NULL);
        if (!rc && o->dump)
            rc = df_gen_dump_rows(o->dump, tok, b, o->with_step, o->step);
        if (!rc && metrics) /* per prompt, keyed by its dataset-wide index: independent of the split */
            rc = df_val_metrics_add(t, b, o->n, o->seed);
        for (int64_t i = 0; !rc && i < df_batch_size(b); i++) {
            int64_t len;
            df_batch_tok_i32(b, "response_ids", i, &len);
            add_total(t, "score", df_sequence_score(b, i)), add_total(t, "acc", df_batch_f32(b, "acc")[i]);
            add_total(t, "resp_len", (double)len), add_total(t, "n", 1);
        }
        df_batch_free(prompts);
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
    if (metrics && !(rc = df_val_metrics_finish(t, o->n, metrics)))
        rc = df_metrics_set(metrics, "val-aux/response_length/mean", res->response_length_mean);
    df_metrics_free(t);
    return rc;
}
