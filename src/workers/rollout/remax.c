/*
 * ReMax's baseline (Li et al. 2023, arXiv 2310.10505; verl ray_trainer
 * RayPPOTrainer.fit, adv_estimator == remax, volcengine/verl@00401103): the
 * same prompts generated once more with do_sample = False, scored by the
 * reward function; the sum of each greedy response's token_level_scores (the
 * scores, never a KL-penalised reward) is `reward_baselines` of every one of
 * that prompt's rollout.n samples. verl times it as timing_s/gen_max; the
 * seconds go back to the caller, which owns the step's metrics.
 */
#include "workers/worker_internal.h"

#include "util/timeutil.h"
#include "workers/dag/data_metrics.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *uid;
    float value;
} baseline;

static int by_uid(const void *a, const void *b)
{
    return strcmp(((const baseline *)a)->uid, ((const baseline *)b)->uid);
}

/* One baseline per greedy row, sorted by uid; a uid seen twice is an error (the match would be ambiguous). */
static int greedy_baselines(const df_batch *greedy, baseline *v)
{
    int64_t n = df_batch_size(greedy);
    const df_column *sc = df_batch_column(greedy, "token_level_scores");
    if (!sc || sc->kind != DF_COL_TOK_F32 || !df_batch_has(greedy, "uid"))
        return df_error(DF_EINVAL,
                        "ReMax baseline: the greedy batch needs uid and token_level_scores columns");
    const float *s = sc->data;
    for (int64_t i = 0; i < n; i++) {
        /* verl: reward_tensor.sum(dim=-1) */
        double sum = df_row_sum_f32(s + sc->offsets[i], sc->offsets[i + 1] - sc->offsets[i]);
        v[i] = (baseline){.uid = df_batch_str(greedy, "uid", i), .value = (float)sum};
    }
    qsort(v, (size_t)n, sizeof *v, by_uid);
    for (int64_t i = 1; i < n; i++)
        if (!strcmp(v[i].uid, v[i - 1].uid))
            return df_error(DF_EINVAL, "ReMax baseline: two greedy responses for uid '%s'", v[i].uid);
    return DF_OK;
}

int df_remax_set_baselines(df_batch *out, const df_batch *greedy)
{
    if (!out || !greedy)
        return df_error(DF_EINVAL, "ReMax baseline: NULL batch");
    int64_t n = df_batch_size(out), ng = df_batch_size(greedy);
    if (n > 0 && !df_batch_has(out, "uid"))
        return df_error(DF_EINVAL, "ReMax baseline: the rollout batch has no uid column");
    baseline *v = malloc((size_t)(ng ? ng : 1) * sizeof *v);
    float *col = malloc((size_t)(n ? n : 1) * sizeof *col);
    int rc = v && col ? greedy_baselines(greedy, v) : df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n && !rc; i++) {
        baseline key = {.uid = df_batch_str(out, "uid", i)};
        const baseline *hit = bsearch(&key, v, (size_t)ng, sizeof *v, by_uid);
        if (!hit)
            rc = df_error(DF_EINVAL, "ReMax baseline: no greedy response for uid '%s' (row %lld)", key.uid,
                          (long long)i);
        else
            col[i] = hit->value;
    }
    if (!rc)
        rc = df_batch_set_f32(out, "reward_baselines", col);
    free(v);
    free(col);
    return rc;
}

int df_worker_remax_baselines(df_dag_worker *w, const df_sampling_params *sp, const df_batch *prompts,
                              df_batch *out, double *seconds)
{
    double t0 = df_now();
    df_sampling_params g_sp = *sp; /* the rollout node's settings, decoded greedily (verl do_sample=False) */
    g_sp.greedy = true;
    g_sp.temperature = 1.0f;
    g_sp.top_k = -1;
    g_sp.top_p = 1.0f;
    df_batch *g = NULL; /* seed 0: argmax draws nothing */
    int rc = df_generate_batch(w->rollout.engine, df_actor_model(w->actor.model), prompts, 1, &g_sp, 0,
                               w->console && w->rank == 0 ? "gen_max" : NULL, &g);
    if (!rc)
        rc = df_worker_reward(w, g, NULL);
    if (!rc)
        rc = df_remax_set_baselines(out, g);
    df_batch_free(g);
    if (seconds)
        *seconds = df_now() - t0;
    return rc ? df_error_wrap(rc, "ReMax greedy baseline (algorithm.adv_estimator=remax)") : DF_OK;
}
