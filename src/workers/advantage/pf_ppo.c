/*
 * PF-PPO in the advantage node (algorithm.use_pf_ppo; verl's compute_advantage resamples with
 * compute_pf_ppo_reweight_data after GAE). verl's single controller resamples the whole step batch;
 * here every rank gathers the data-parallel group's sequence scores, puts them in an order that
 * does not depend on the ranks (by prompt dataset row, then response), draws the same indices from
 * the same stream (trainer.seed, the step), and keeps the draws that fall on its own rows. The
 * ranks then hold unequal numbers of rows: the hand-off before the next node evens them through
 * the Data Coordinator (handoff.c).
 */
#include "workers/worker_internal.h"

#include "distflow/algo.h"
#include "util/hash.h"

#include <stdlib.h>
#include <string.h>

#define WHAT "PF-PPO resampling"
#define GROUP "data-parallel group"

/* A sequence in the group's canonical order: its prompt's dataset row and uid (the uid tells a
   row drawn twice in a step apart, DAPO's refills across an epoch's end), its place among that
   prompt's responses (they stay on one rank, in order: the hand-offs keep groups), and where it
   lives. */
typedef struct {
    int64_t index;
    uint64_t uid;
    int64_t j, row;
    int32_t dp_rank;
    float score;
} seq;

/* By prompt (dataset row, uid), then `last`: j for the canonical order, row for the local one. */
static int cmp_prompt(const seq *x, const seq *y, int64_t xl, int64_t yl)
{
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    if (x->uid != y->uid)
        return x->uid < y->uid ? -1 : 1;
    return xl < yl ? -1 : xl > yl;
}

static int cmp_seq(const void *a, const void *b)
{
    const seq *x = a, *y = b;
    return cmp_prompt(x, y, x->j, y->j);
}

static int cmp_row(const void *a, const void *b)
{
    const seq *x = a, *y = b;
    return cmp_prompt(x, y, x->row, y->row);
}

/* This rank's sequences: the score is the sum of the token_level_scores (verl:
   token_level_scores.sum(-1)), j counts the earlier rows (in batch order) of the same dataset row. */
static int local_seqs(const df_batch *b, int dp_rank, seq **out)
{
    const df_column *s = df_batch_column(b, "token_level_scores");
    const int64_t *index = df_batch_has(b, "index") ? df_batch_i64(b, "index") : NULL;
    const df_column *uid = df_batch_column(b, "uid");
    int64_t n = df_batch_size(b);
    if (!s || !index || !uid)
        return df_error(DF_EINVAL, WHAT ": the batch has no %s column",
                        !s ? "token_level_scores" : !index ? "index" : "uid");
    seq *v = calloc((size_t)(n ? n : 1), sizeof *v);
    if (!v)
        return df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        float sum = 0.0f;
        for (int64_t t = s->offsets[i]; t < s->offsets[i + 1]; t++)
            sum += ((const float *)s->data)[t];
        v[i] = (seq){.index = index[i], .uid = df_fnv1a(df_batch_str(b, "uid", i)), .row = i, .dp_rank = dp_rank,
                     .score = sum};
    }
    qsort(v, (size_t)n, sizeof *v, cmp_row);
    for (int64_t i = 1; i < n; i++)
        v[i].j = v[i].index == v[i - 1].index && v[i].uid == v[i - 1].uid ? v[i - 1].j + 1 : 0;
    *out = v;
    return DF_OK;
}

/* The group's sequences on every rank, sorted into the canonical order (a model-parallel replica
   sends none: its rows are its DP rank's). Collective, failed or not. */
static int gather_seqs(df_comm *comm, int rc, bool replica, const seq *mine, int64_t n, seq **all, int64_t *total)
{
    double contrib = rc || replica ? 0 : (double)n, sum;
    rc = df_worker_group_sum(comm, rc, &contrib, 1, &sum, WHAT, GROUP); /* the verdict first */
    if (rc)
        return rc;
    void *recv = NULL;
    int64_t bytes = replica ? 0 : n * (int64_t)sizeof *mine;
    if (comm)
        rc = df_comm_allgatherv(comm, mine, bytes, &recv, NULL, NULL);
    else if (!(recv = malloc((size_t)(bytes ? bytes : 1))))
        rc = df_error(DF_ENOMEM, "out of memory");
    else if (bytes)
        memcpy(recv, mine, (size_t)bytes);
    if (rc)
        return df_error_wrap(rc, WHAT ": gathering the scores");
    *all = recv;
    *total = (int64_t)sum;
    qsort(*all, (size_t)*total, sizeof **all, cmp_seq);
    return DF_OK;
}

int df_worker_pf_ppo(df_dag_worker *w, const df_node *node, int rc, df_batch *batch, df_batch **out)
{
    const struct df_train_algorithm *alg = &w->global.cfg.algorithm;
    const df_node_layout *l = df_worker_node_layout(w, node);
    const int dp_rank = l ? l->dp_rank : 0;
    df_pf_ppo_method method = DF_PF_PPO_POW;
    seq *mine = NULL, *all = NULL;
    float *scores = NULL, *weights = NULL;
    int64_t *draws = NULL, *keep = NULL, n = rc ? 0 : df_batch_size(batch), total = 0, k = 0;
    if (!rc)
        rc = df_pf_ppo_method_parse(alg->pf_ppo.reweight_method, &method);
    if (!rc)
        rc = local_seqs(batch, dp_rank, &mine);
    rc = gather_seqs(w->group, rc, l && l->mp_rank != 0, mine, n, &all, &total);
    size_t cap = (size_t)(total ? total : 1);
    if (!rc && (!(scores = malloc(cap * sizeof *scores)) || !(weights = malloc(cap * sizeof *weights)) ||
                !(draws = malloc(cap * sizeof *draws)) || !(keep = malloc(cap * sizeof *keep))))
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < total; i++)
        scores[i] = all[i].score;
    if (!rc)
        rc = df_pf_ppo_weights(scores, total, method, alg->pf_ppo.weight_pow, weights);
    df_rng rng; /* the same stream on every rank: the same draws */
    df_rng_seed(&rng, df_rng_key(df_worker_seed(w), 0x9f9, (uint64_t)w->step, 0));
    if (!rc)
        rc = df_pf_ppo_draw(weights, total, total, &rng, draws);
    for (int64_t d = 0; !rc && d < total; d++) /* the draws of this rank's rows, in draw order */
        if (all[draws[d]].dp_rank == dp_rank)
            keep[k++] = all[draws[d]].row;
    if (!rc)
        rc = df_batch_select(batch, keep, k, out);
    if (!rc) /* the next hand-off evens the ranks' counts (handoff.c) */
        w->rebalance_next = l && l->dp_size > 1;
    free(mine), free(all), free(scores), free(weights), free(draws), free(keep);
    return rc ? df_error_wrap(rc, "algorithm.use_pf_ppo (reweight_method %s)", alg->pf_ppo.reweight_method) : DF_OK;
}
