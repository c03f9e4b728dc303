/*
 * DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476, §3.2; verl
 * RayDAPOTrainer.fit with algorithm.filter_groups, siiRL's
 * filter_interface.dapo.dynamic_sampling): keep only the prompt groups whose
 * metric varies (a group that is all right or all wrong has zero GRPO
 * advantage and teaches nothing), and generate more batches until the kept
 * groups fill data.train_batch_size prompts — counted over every rank — or
 * algorithm.filter_groups.max_num_gen_batches is reached. A generation batch is
 * the dataloader's, data.gen_batch_size prompts (verl's DAPO recipe sets it
 * above train_batch_size so that one round usually suffices). A new batch re-runs the
 * graph's nodes before this one on the next dataloader batch (df_node_rerun_upstream),
 * so it is rolled out and scored as the first. The surplus is cut in rank order
 * (verl: batch[:train_batch_size * n]), so every rank knows which of its groups survive.
 *
 * With actor_rollout_ref.rollout.mode=async (docs/async.md) a re-run takes episodes from
 * the rollout side instead: only as many as groups are missing, after the filtered ones
 * were reported to the rollout ranks that made them as not accepted (AReaL's rejected
 * rollouts), whose admission makes up for exactly those. The rollout side may then stay
 * max_staleness batches ahead, never more; max_num_gen_batches bounds the prompts a step
 * takes to what the synchronous run may generate (that many train batches; data.gen_batch_size
 * is train_batch_size there, train_check refuses another).
 */
#include "workers/worker_internal.h"

#include "distflow/reward.h"
#include "util/timeutil.h"
#include "workers/common/data_metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Per-sample value of filter_groups.metric: acc, score, seq_reward (sum of token_level_scores),
   seq_final_reward (sum of token_level_rewards), or another key of the reward's extra info (a Python
   reward function's numeric key, column DF_REWARD_EXTRA_PREFIX<key>), as verl's dapo_ray_trainer
   reads any key of reward_extra_info. */
static int metric_values(const df_batch *b, const char *metric, double *v)
{
    int64_t n = df_batch_size(b);
    char extra[DF_COL_NAME_MAX];
    const char *col = !strcmp(metric, "acc") || !strcmp(metric, "score") ? metric
                      : !strcmp(metric, "seq_reward")                    ? "token_level_scores"
                      : !strcmp(metric, "seq_final_reward")              ? "token_level_rewards"
                                                                         : NULL;
    if (!col && snprintf(extra, sizeof extra, DF_REWARD_EXTRA_PREFIX "%s", metric) < (int)sizeof extra &&
        df_batch_f32(b, extra))
        col = extra;
    if (!col)
        return df_error(DF_EINVAL, "algorithm.filter_groups.metric=%s: expected acc, score, seq_reward, "
                                   "seq_final_reward or a numeric key of the Python reward function's results "
                                   "(this batch's have none named so)", metric);
    const df_column *c = df_batch_column(b, col);
    if (!c)
        return df_error(DF_EINVAL, "dynamic sampling: the batch has no %s column", col);
    for (int64_t i = 0; i < n; i++) {
        if (c->kind == DF_COL_F32) {
            v[i] = ((const float *)c->data)[i];
            continue;
        }
        /* per-token column: the response's sum */
        v[i] = df_row_sum_f32((const float *)c->data + c->offsets[i], c->offsets[i + 1] - c->offsets[i]);
    }
    return DF_OK;
}

/* Population std as verl's np.std; a group of one is kept (verl keeps len == 1). */
int df_dynamic_sampling_kept_rows(const df_batch *b, const char *metric, int64_t *keep, int64_t *n_keep,
                                  int64_t *groups)
{
    int64_t n = df_batch_size(b);
    const df_column *uid = df_batch_column(b, "uid");
    if (!uid)
        return df_error(DF_EINVAL, "dynamic sampling needs the uid column");
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v), *sum = calloc((size_t)(n ? n : 1), 3 * sizeof *sum);
    int64_t *g = malloc((size_t)(n ? n : 1) * sizeof *g);
    int rc = v && sum && g ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = metric_values(b, metric, v);
    if (!rc)
        rc = df_group_ids((const char *const *)uid->data, n, g);
    for (int64_t i = 0; !rc && i < n; i++) {
        sum[3 * g[i]] += 1, sum[3 * g[i] + 1] += v[i], sum[3 * g[i] + 2] += v[i] * v[i];
    }
    *n_keep = *groups = 0;
    for (int64_t i = 0; !rc && i < n; i++) {
        double *gs = &sum[3 * g[i]], k = fabs(gs[0]), mean = gs[1] / k;
        if (!(k == 1 || gs[2] / k - mean * mean > 1e-12 * (1 + mean * mean)))
            continue;
        keep[(*n_keep)++] = i;
        if (gs[0] > 0) { /* the group's first row: count it once */
            (*groups)++;
            gs[0] = -gs[0];
        }
    }
    free(v);
    free(sum);
    free(g);
    return rc;
}

/* Append the kept rows of `b` to *acc (taking neither). */
static int accumulate(df_batch **acc, const df_batch *b, const int64_t *keep, int64_t n_keep)
{
    df_batch *part = NULL, *joined = NULL;
    int rc = df_batch_select(b, keep, n_keep, &part);
    if (rc || !*acc) {
        *acc = rc ? *acc : part;
        return rc;
    }
    const df_batch *parts[2] = {*acc, part};
    rc = df_batch_concat(parts, 2, &joined);
    df_batch_free(part);
    if (!rc) {
        df_batch_free(*acc);
        *acc = joined;
    }
    return rc;
}

/*
 * Keep this rank's share of the first `target` groups in rank order (groups
 * stay whole). Model-parallel replicas hold their leader's groups: only
 * leaders count, and a replica cuts where its leader does.
 */
static int trim(df_dag_worker *w, df_batch **acc, int64_t mine, int64_t target)
{
    int size = df_comm_size(w->group), leader = w->group_rank - w->cur_layout.mp_rank;
    int64_t *counts = malloc((size_t)size * sizeof *counts), counted = w->cur_layout.mp_rank ? 0 : mine;
    if (!counts)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = df_comm_allgather(w->group, &counted, sizeof counted, counts);
    int64_t before = 0;
    for (int r = 0; r < leader; r++)
        before += counts[r];
    free(counts);
    int64_t take = target - before < 0 ? 0 : target - before < mine ? target - before : mine;
    if (rc || take == mine)
        return rc;
    df_batch *cut = NULL;
    rc = df_batch_slice(*acc, 0, take * df_worker_n_samples(w), &cut); /* groups are whole and in order */
    if (!rc) {
        df_batch_free(*acc);
        *acc = cut;
    }
    return rc;
}

/* One more generation batch: new prompts through the nodes before this one (the step's rollout
 * and reward nodes, the workflow's own included), as the graph ran them on the first batch.
 * mode=async: the rollout node takes the refill from the rollout side, which reads its own prompts. */
static int generate_more(df_dag_worker *w, df_node_ctx *ctx, int gen, df_batch **out)
{
    int rc = DF_OK;
    if (!w->async)
        rc = df_worker_next_prompts(w, gen, out);
    else if (!(*out = df_batch_new(0)))
        rc = df_error(DF_ENOMEM, "out of memory");
    return rc ? rc : df_node_rerun_upstream(ctx, gen, 0, out);
}

/* Append the rows of b's varying groups to *acc; their group count into *groups. mode=async: the
 * other groups were taken from the rollout side, which is told (df_async_reject_groups). */
static int keep_varying(df_dag_worker *w, const df_batch *b, const char *metric, df_batch **acc, int64_t *groups)
{
    int64_t n = df_batch_size(b), n_keep = 0;
    int64_t *keep = malloc((size_t)(n ? n : 1) * sizeof *keep);
    int rc = keep ? df_dynamic_sampling_kept_rows(b, metric, keep, &n_keep, groups)
                  : df_error(DF_ENOMEM, "out of memory");
    if (!rc && w->async)
        rc = df_async_reject_groups(w, b, keep, n_keep);
    if (!rc)
        rc = accumulate(acc, b, keep, n_keep);
    free(keep);
    return rc;
}

int64_t df_dynamic_sampling_refill(int64_t target, int64_t kept, int64_t taken, int64_t max_gen)
{
    int64_t more = target - kept;
    if (more < 1)
        return 0;
    return max_gen > 0 && taken + more > max_gen * target ? -1 : more;
}

/*
 * Before another generation round, with `global` groups kept of `target` after round gen (from 0):
 * synchronously a dataloader batch of data.gen_batch_size new prompts, while fewer than
 * max_num_gen_batches were made; mode=async
 * only the missing groups (df_async_set_refill), while the prompts the step took, *taken, stay within
 * max_num_gen_batches x target. The same on every rank (the counts are the group's).
 */
static int next_round(df_dag_worker *w, int gen, int64_t global, int64_t *taken)
{
    const df_train_config *t = &w->global.cfg;
    const char *metric = t->algorithm.filter_groups.metric;
    int64_t target = t->data.train_batch_size, max_gen = t->algorithm.filter_groups.max_num_gen_batches;
    int64_t more = w->async ? df_dynamic_sampling_refill(target, global, *taken, max_gen) : t->data.gen_batch_size;
    if (!w->async && max_gen > 0 && gen + 1 >= max_gen)
        return df_error(DF_EINVAL, "dynamic sampling: %lld of %lld prompts have a varying %s after %d generation "
                                   "batches of data.gen_batch_size=%lld prompts (algorithm.filter_groups."
                                   "max_num_gen_batches=%lld); the data may be too easy or too hard for the model",
                        (long long)global, (long long)target, metric, gen + 1, (long long)t->data.gen_batch_size,
                        (long long)max_gen);
    if (more < 0)
        return df_error(DF_EINVAL, "dynamic sampling: %lld of %lld prompts have a varying %s after %lld prompts "
                                   "in %d rounds; %lld more would pass algorithm.filter_groups."
                                   "max_num_gen_batches=%lld train batches of prompts; the data may be too easy "
                                   "or too hard for the model",
                        (long long)global, (long long)target, metric, (long long)*taken, gen + 1,
                        (long long)(target - global), (long long)max_gen);
    if (w->async)
        df_async_set_refill(w, more);
    *taken += more;
    return DF_OK;
}

/* The step's sampling metrics: verl's, and mode=async the share of the taken groups filtered out. */
static void record(df_node_ctx *ctx, int gen, int64_t taken, int64_t global, double t0)
{
    df_dag_worker *w = ctx->worker;
    if (!ctx->metrics)
        return;
    df_metrics_set(ctx->metrics, "train/num_gen_batches", gen + 1);
    df_metrics_set(ctx->metrics, "timing_s/dynamic_sampling", df_now() - t0);
    if (w->async) { /* every rank holds the group's counts: the mean over ranks is the count */
        df_metrics_set(ctx->metrics, "fully_async/count/filtered_samples", (double)(taken - global));
        df_metrics_set(ctx->metrics, "fully_async/filtered_frac", (double)(taken - global) / (double)taken);
    }
}

/*
 * The group's kept-group count, summed with a failure flag (as the actor's
 * df_train_core_reduce): every rank reaches it, failed or not, so a local
 * error ends the node on every rank instead of leaving the others waiting.
 * Replicas hold their DP rank's rows: only model-parallel rank 0 counts.
 */
static int count_groups(df_dag_worker *w, int rc, int64_t groups, int64_t *global)
{
    double mine = !rc && w->cur_layout.mp_rank == 0 ? (double)groups : 0, total = 0;
    rc = df_worker_group_sum(w->group, rc, &mine, 1, &total, "dynamic sampling: summing the kept group counts",
                             "group");
    if (!rc)
        *global += (int64_t)total;
    return rc;
}

static int node_dynamic_sampling(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    df_dag_worker *w = ctx->worker;
    const df_train_config *t = &w->global.cfg;
    int rc = df_worker_need_batch(batch, "dynamic_sampling");
    if (!t->algorithm.filter_groups.enable)
        return rc; /* DAPO without filtering: the batch passes through */
    double t0 = df_now();
    const char *metric = t->algorithm.filter_groups.metric;
    /* the first round is the step's dataloader batch: gen_batch_size prompts (mode=async: train_batch_size) */
    int64_t target = t->data.train_batch_size, taken = t->data.gen_batch_size;
    int64_t mine = 0, global = 0;
    df_batch *acc = NULL, *cur = batch;
    int gen = 0;
    for (;;) { /* a local failure skips the work but not the collective */
        int64_t groups = 0;
        if (!rc)
            rc = keep_varying(w, cur, metric, &acc, &groups);
        if (cur != batch)
            df_batch_free(cur);
        cur = NULL;
        mine += rc ? 0 : groups;
        if ((rc = count_groups(w, rc, groups, &global)) || global >= target)
            break;
        if ((rc = next_round(w, gen, global, &taken)))
            break;
        rc = generate_more(w, ctx, ++gen, &cur);
    }
    int64_t kept = global;
    if (!rc) /* every rank agrees here: the counts and the give-up are the group's (mode=async: nothing to cut) */
        rc = trim(w, &acc, mine, target);
    if (rc) {
        df_batch_free(acc);
        return rc;
    }
    out->batch = acc;
    record(ctx, gen, taken, kept, t0);
    return DF_OK;
}

int df_worker_register_dynamic_sampling(void)
{
    /* siiRL's names for it are aliases in the executable registry (src/planner/exec.c) */
    return df_exec_register("DAGWorker.dynamic_sampling", node_dynamic_sampling);
}
