/* The asynchronous runtime's placement: the job split into its trainer and rollout sides, and
 * the weights group (async.h). */
#include "workers/dag/async.h"

#include "distflow/train_config.h"

#include <stdlib.h>
#include <string.h>

int64_t df_async_rollout_ranks(const struct df_train_config *t)
{
    return t->rollout.nnodes * t->rollout.n_gpus_per_node;
}

int64_t df_async_share(int64_t total, int n, int i)
{
    return total / n + (i < total % n);
}

static int staleness_init(df_async *a, const struct df_train_config *t)
{
    df_staleness_params p;
    int rc = df_staleness_params_from_config(&t->async_training, &p);
    if (rc || !a->rollout_side)
        return rc ? rc : df_staleness_init(&a->st, &p);
    p.consumer_batch_size = df_async_share(p.consumer_batch_size, a->n_rollouts, a->index);
    p.max_concurrent_rollouts = df_async_share(p.max_concurrent_rollouts, a->n_rollouts, a->index);
    return df_staleness_init(&a->st, &p);
}

static int make_groups(df_async *a)
{
    int W = df_comm_size(a->world), rank = df_comm_rank(a->world);
    int rc = df_comm_split(a->world, a->rollout_side, rank, &a->side);
    int *ranks = rc ? NULL : malloc((size_t)(a->n_rollouts + 1) * sizeof *ranks);
    if (!rc && !ranks)
        rc = df_error(DF_ENOMEM, "out of memory");
    if (rc)
        return rc;
    ranks[0] = 0;
    for (int i = 0; i < a->n_rollouts; i++)
        ranks[i + 1] = W - a->n_rollouts + i;
    rc = df_comm_from_ranks(a->world, ranks, a->n_rollouts + 1, &a->weights);
    free(ranks);
    return rc;
}

int df_async_create(const struct df_train_config *t, df_comm *world, df_async **out)
{
    *out = NULL;
    int64_t R = df_async_rollout_ranks(t);
    if (strcmp(t->actor_rollout_ref.rollout.mode, "async"))
        return DF_OK;
    int W = df_comm_size(world), rank = df_comm_rank(world);
    if (R >= W)
        return df_error(DF_EINVAL, "rollout.nnodes x rollout.n_gpus_per_node = %lld rollout ranks leave no "
                        "trainer rank of the %d launched", (long long)R, W);
    df_async *a = calloc(1, sizeof *a);
    if (!a)
        return df_error(DF_ENOMEM, "out of memory");
    a->world = world;
    a->n_rollouts = (int)R;
    a->n_trainers = W - (int)R;
    a->rollout_side = rank >= a->n_trainers;
    a->index = a->rollout_side ? rank - a->n_trainers : rank;
    int rc = make_groups(a);
    if (!rc)
        rc = staleness_init(a, t);
    if (!rc && !a->rollout_side) {
        a->last_idle = calloc((size_t)R, sizeof *a->last_idle);
        a->last_busy = calloc((size_t)R, sizeof *a->last_busy);
        a->last_running = calloc((size_t)R, sizeof *a->last_running);
        a->last_accepted = calloc((size_t)R, sizeof *a->last_accepted);
        a->dropped = calloc((size_t)R, sizeof *a->dropped);
        a->take_limit = calloc((size_t)R, sizeof *a->take_limit);
        if (!a->last_idle || !a->last_busy || !a->last_running || !a->last_accepted || !a->dropped ||
            !a->take_limit)
            rc = df_error(DF_ENOMEM, "out of memory");
    }
    if (rc) {
        df_async_free(a);
        return df_error_wrap(rc, "the asynchronous runtime's groups");
    }
    *out = a;
    return DF_OK;
}

void df_async_free(df_async *a)
{
    if (!a)
        return;
    df_async_inbox_clear(&a->inbox);
    df_batch_free(a->columns);
    df_batch_free(a->prompts);
    free(a->dropped);
    free(a->take_limit);
    free(a->last_idle);
    free(a->last_busy);
    free(a->last_running);
    free(a->last_accepted);
    df_async_weights_free(a->wx);
    df_model_free(a->model);
    df_comm_free(a->weights);
    df_comm_free(a->side);
    free(a);
}
