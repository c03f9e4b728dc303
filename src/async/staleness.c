/* The staleness manager of asynchronous RL (include/distflow/async.h; AReaL
 * areal/infra/staleness_manager.py StalenessManager). */
#include "distflow/async.h"
#include "distflow/train_config.h"

#include <string.h>

int df_staleness_params_from_config(const struct df_train_async_training *a, df_staleness_params *p)
{
    if (!a || !p)
        return df_error(DF_EINVAL, "staleness manager: NULL config or settings");
    df_staleness_params q = {
        .max_staleness = a->max_staleness,
        .max_concurrent_rollouts =
            a->max_concurrent_rollouts.set ? a->max_concurrent_rollouts.v : a->consumer_batch_size,
        .consumer_batch_size = a->consumer_batch_size,
    };
    df_staleness s; /* the same checks as the manager's */
    int rc = df_staleness_init(&s, &q);
    if (!rc)
        *p = q;
    return rc;
}

int df_staleness_init(df_staleness *s, const df_staleness_params *p)
{
    if (!s || !p)
        return df_error(DF_EINVAL, "staleness manager: NULL state or settings");
    if (p->max_staleness < 0)
        return df_error(DF_EINVAL, "staleness manager: async_training.max_staleness must be >= 0, got %lld",
                        (long long)p->max_staleness);
    if (p->max_concurrent_rollouts < 1)
        return df_error(DF_EINVAL,
                        "staleness manager: async_training.max_concurrent_rollouts must be >= 1, got %lld",
                        (long long)p->max_concurrent_rollouts);
    if (p->consumer_batch_size < 1)
        return df_error(DF_EINVAL,
                        "staleness manager: async_training.consumer_batch_size must be >= 1, got %lld",
                        (long long)p->consumer_batch_size);
    memset(s, 0, sizeof *s);
    s->p = *p;
    return DF_OK;
}

int64_t df_staleness_capacity(const df_staleness *s, int64_t current_version)
{
    int64_t v = current_version > 0 ? current_version : 0;
    int64_t by_concurrency = s->p.max_concurrent_rollouts - s->running;
    /* episodes that may exist (accepted or running) before the trainer reaches version v + 1 + max_staleness
     */
    int64_t by_staleness =
        (s->p.max_staleness + v + 1) * s->p.consumer_batch_size - (s->accepted + s->running);
    return by_concurrency < by_staleness ? by_concurrency : by_staleness;
}

int df_staleness_submit(df_staleness *s, int64_t current_version)
{
    int64_t cap = df_staleness_capacity(s, current_version);
    if (cap < 1)
        return df_error(DF_EINVAL,
                        "staleness manager: no capacity at version %lld (capacity %lld: %lld running, %lld "
                        "accepted, max_staleness %lld): ask df_staleness_capacity before submitting",
                        (long long)current_version, (long long)cap, (long long)s->running,
                        (long long)s->accepted, (long long)s->p.max_staleness);
    s->running++;
    return DF_OK;
}

static int finish(df_staleness *s, int64_t *counter, const char *what)
{
    if (s->running < 1)
        return df_error(DF_EINVAL, "staleness manager: %s an episode while none is running", what);
    s->running--;
    (*counter)++;
    return DF_OK;
}

int df_staleness_accept(df_staleness *s)
{
    return finish(s, &s->accepted, "accepting");
}

int df_staleness_reject(df_staleness *s)
{
    return finish(s, &s->rejected, "rejecting");
}

int df_staleness_consume(df_staleness *s, int64_t sample_version, int64_t current_version, bool *keep)
{
    int64_t gap = current_version - sample_version;
    if (sample_version < 0 || gap < 0)
        return df_error(DF_EINVAL,
                        "staleness manager: a sample of policy version %lld consumed at trainer version %lld "
                        "(a version must be >= 0 and not ahead of the trainer)",
                        (long long)sample_version, (long long)current_version);
    bool k = gap <= s->p.max_staleness;
    s->consumed++;
    s->gap_sum += gap;
    s->gap_max = gap > s->gap_max ? gap : s->gap_max;
    s->dropped_stale += !k;
    s->stale_kept += k && gap > 0;
    if (keep)
        *keep = k;
    return DF_OK;
}

int df_staleness_recover(df_staleness *s, int64_t version)
{
    if (version < 0)
        return df_error(DF_EINVAL, "staleness manager: recovered version %lld is negative",
                        (long long)version);
    s->accepted = version * s->p.consumer_batch_size;
    return DF_OK;
}

int df_staleness_record(const df_staleness *s, df_metrics *m)
{
    if (!s || !m)
        return df_error(DF_EINVAL, "staleness manager: NULL state or metrics");
    const struct {
        const char *name;
        double v;
        bool gap; /* only once a sample was consumed */
    } kv[] = {
        {"fully_async/count/dropped_stale_samples", (double)s->dropped_stale, false},
        {"fully_async/count/stale_samples_processed", (double)s->stale_kept, false},
        {"fully_async/count/running", (double)s->running, false},
        {"fully_async/count/accepted", (double)s->accepted, false},
        {"fully_async/count/rejected", (double)s->rejected, false},
        {"fully_async/version_gap/mean", s->consumed ? (double)s->gap_sum / (double)s->consumed : 0, true},
        {"fully_async/version_gap/max", (double)s->gap_max, true},
        {"fully_async/stale_dropped_frac", s->consumed ? (double)s->dropped_stale / (double)s->consumed : 0,
         true},
    };
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++) {
        if (kv[i].gap && !s->consumed)
            continue;
        int rc = df_metrics_set(m, kv[i].name, kv[i].v);
        if (rc)
            return rc;
    }
    return DF_OK;
}
