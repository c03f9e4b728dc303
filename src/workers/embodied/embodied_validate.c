/*
 * Embodied validation (siiRL DAGWorker._validate_embodied): every row of the validation set runs as
 * episodes of the current policy (rollout.val_kwargs: greedy by default), and the success rate is
 * the metric; `distflow embodied eval` runs the same on a model directory.
 */
#include "workers/embodied/embodied_worker.h"
#include "workers/worker_internal.h"

#include <stdio.h>
#include <stdlib.h>

int df_embodied_evaluate(const df_embodied_setup *s, df_rollout_engine *e, const df_model *m, const df_tokenizer *tok,
                         const df_dataset *ds, const df_embodied_rollout_opts *o, double sums[DF_EMB_EVAL_SUMS])
{
    for (int j = 0; j < DF_EMB_EVAL_SUMS; j++)
        sums[j] = 0;
    const int64_t n = df_dataset_size(ds);
    if (!n)
        return DF_OK;
    df_batch *p = df_batch_new(n), *b = NULL;
    int64_t *row = malloc((size_t)n * sizeof *row), *idx = malloc((size_t)n * sizeof *idx),
            *task = malloc((size_t)n * sizeof *task), *trial = malloc((size_t)n * sizeof *trial);
    int rc = p && row && idx && task && trial ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < n; i++)
        row[i] = i, idx[i] = df_dataset_global_index(ds, i);
    if (!rc)
        rc = df_batch_set_i64(p, "row", row);
    if (!rc)
        rc = df_batch_set_i64(p, "index", idx);
    if (!rc)
        rc = df_embodied_prompt_episodes(ds, p, task, trial);
    if (!rc)
        rc = df_embodied_rollout(s, e, m, tok, p, task, trial, o, &b);
    for (int64_t i = 0; !rc && i < df_batch_size(b); i++) {
        sums[0] += 1;
        sums[1] += (double)df_batch_i64(b, "complete")[i];
        sums[2] += (double)df_batch_i64(b, "finish_step")[i];
    }
    df_batch_free(p), df_batch_free(b);
    free(row), free(idx), free(task), free(trial);
    return rc;
}

int df_worker_embodied_validate(df_dag_worker *w, const df_sampling_params *sp, int64_t n, uint64_t seed,
                                df_metrics *m, double *success, int64_t *episodes)
{
    df_embodied_rollout_opts o = {.sp = *sp, .seed = seed, .n = n,
                                  .label = w->console && w->rank == 0 ? "validate" : NULL};
    double sums[DF_EMB_EVAL_SUMS], tot[DF_EMB_EVAL_SUMS];
    int rc = df_embodied_evaluate(w->embodied, w->rollout.engine, df_actor_model(w->actor.model), w->tok, w->val_ds,
                                  &o, sums);
    if (w->data_layout.mp_rank != 0) /* a model-parallel replica repeats its DP rank's episodes */
        for (int j = 0; j < DF_EMB_EVAL_SUMS; j++)
            sums[j] = 0;
    rc = df_worker_group_sum(w->group, rc, sums, DF_EMB_EVAL_SUMS, tot, "embodied validation", "job");
    if (rc)
        return rc;
    if (tot[0] <= 0)
        return df_error(DF_EINVAL, "embodied validation: data.val_files holds no episode");
    *success = tot[1] / tot[0], *episodes = (int64_t)tot[0];
    char key[160];
    snprintf(key, sizeof key, "embodied/test_score/%s", w->global.cfg.actor_rollout_ref.embodied.env.env_name);
    df_metrics_set(m, "embodied/test_score/all", *success);
    df_metrics_set(m, key, *success);
    df_metrics_set(m, "embodied/test_finish_step/mean", tot[2] / tot[0]);
    return DF_OK;
}
