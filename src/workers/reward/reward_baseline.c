/*
 * ReMax's baseline node (Li et al. 2023, arXiv 2310.10505; verl ray_trainer
 * RayPPOTrainer.fit, adv_estimator == remax, volcengine/verl@00401103): the
 * step's prompts go once more through the nodes before this one as a greedy
 * pass (DF_PASS_GREEDY: one do_sample=False response per prompt), so the
 * workflow's own rollout and reward nodes make and score them; the sum of each
 * greedy response's token_level_scores (the scores, never a KL-penalised
 * reward) is `reward_baselines` of every one of that prompt's rollout.n
 * samples. verl times the pass as timing_s/gen_max.
 */
#include "workers/worker_internal.h"

#include "util/timeutil.h"
#include "workers/common/data_metrics.h"

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

/* uid and token_level_scores of the greedy rows, serialized behind a status byte (1: this rank failed). */
static int pack_scores(int rc, const df_batch *g, bool contributes, uint8_t **buf, size_t *len)
{
    df_batch *b = NULL;
    uint8_t *body = NULL;
    size_t n_body = 0;
    const df_column *sc = rc || !contributes ? NULL : df_batch_column(g, "token_level_scores");
    const df_column *uid = rc || !contributes ? NULL : df_batch_column(g, "uid");
    if (!rc && contributes && (!sc || sc->kind != DF_COL_TOK_F32 || !uid || uid->kind != DF_COL_STR))
        rc = df_error(DF_EINVAL, "ReMax baseline: the greedy batch needs uid and token_level_scores columns");
    if (!rc && (b = df_batch_new(contributes ? df_batch_size(g) : 0)) == NULL)
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc && contributes && !(rc = df_batch_set_str(b, "uid", (const char *const *)uid->data)))
        rc = df_batch_set_tok_f32(b, "token_level_scores", sc->offsets, sc->data);
    if (!rc)
        rc = df_batch_serialize(b, &body, &n_body);
    df_batch_free(b);
    *len = 1 + n_body;
    *buf = malloc(*len);
    if (*buf) {
        (*buf)[0] = rc != 0;
        if (n_body)
            memcpy(*buf + 1, body, n_body);
    }
    free(body);
    return rc ? rc : *buf ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

/*
 * Every rank's greedy rows (uid, token_level_scores) into *all: trainer.balance_batch moves the
 * greedy rows as it moves the samples, so a prompt's greedy row may sit on another rank than its
 * samples. Model-parallel replicas add nothing (they hold their leader's rows). Collective over
 * w->group, failed or not: a failure anywhere fails every rank.
 */
static int gather_greedy(df_dag_worker *w, int rc, const df_batch *g, df_batch **all)
{
    uint8_t *mine = NULL, *recv = NULL;
    size_t len = 0;
    int64_t *counts = NULL, *displs = NULL;
    int size = df_comm_size(w->group);
    int prc = pack_scores(rc, g, w->cur_layout.mp_rank == 0, &mine, &len);
    int crc = df_comm_allgatherv(w->group, mine ? mine : (const uint8_t *)"\1", mine ? (int64_t)len : 1,
                                 (void **)&recv, &counts, &displs);
    df_batch **parts = calloc((size_t)size, sizeof *parts);
    rc = prc ? prc : crc ? crc : parts ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int r = 0; !rc && r < size; r++)
        if (counts[r] < 1 || recv[displs[r]])
            rc = df_error(DF_EINVAL, "ReMax baseline: rank %d failed its greedy pass", r);
    for (int r = 0; !rc && r < size; r++)
        rc = df_batch_deserialize(recv + displs[r] + 1, (size_t)counts[r] - 1, &parts[r]);
    if (!rc)
        rc = df_batch_concat((const df_batch *const *)parts, size, all);
    for (int r = 0; parts && r < size; r++)
        df_batch_free(parts[r]);
    free(parts);
    free(mine);
    free(recv);
    free(counts);
    free(displs);
    return rc;
}

/* reward_baseline: the greedy pass through the nodes before this one, its scores as the baselines. */
static int node_reward_baseline(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    double t0 = df_now();
    df_dag_worker *w = df_node_worker(ctx);
    df_batch *g = NULL, *all = NULL;
    int rc = df_worker_need_batch(batch, "compute_reward_baseline");
    if (!rc && !ctx->input)
        rc = df_error(DF_EINVAL, "compute_reward_baseline: the pass has no input prompts to decode greedily");
    if (!rc)
        rc = df_batch_copy(ctx->input, &g);
    if (!rc)
        rc = df_node_rerun_upstream(ctx, ctx->pass, ctx->flags | DF_PASS_GREEDY, &g);
    rc = gather_greedy(w, rc, g, &all);
    if (!rc)
        rc = df_remax_set_baselines(batch, all);
    df_batch_free(g);
    df_batch_free(all);
    (void)out;
    df_worker_timing(ctx, "gen_max", t0);
    return rc ? df_error_wrap(rc, "ReMax greedy baseline (algorithm.adv_estimator=remax)") : DF_OK;
}

int df_worker_register_reward_baseline(void)
{
    return df_exec_register("DAGWorker.compute_reward_baseline", node_reward_baseline);
}
