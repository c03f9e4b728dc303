/* metrics_reduce.h (internal) — step metrics aggregated across ranks by name. */
#ifndef DF_WORKER_METRICS_REDUCE_H
#define DF_WORKER_METRICS_REDUCE_H

#include "distflow/comm.h"
#include "distflow/metrics.h"

typedef enum { DF_METRIC_MEAN, DF_METRIC_MAX, DF_METRIC_MIN, DF_METRIC_SUM } df_metric_reduce;

/**
 * How a metric combines across ranks, from its name: timing_s/<name> and
 * perf/time_per_step take the max (the slowest rank bounds the step),
 * perf/total_num_tokens the sum, a last path component starting with "max" /
 * "min" or ending in "_max" / "_min" (response_length/max,
 * training/rollout_probs_diff_max) the max / min, everything
 * else the mean over the ranks that report it (ranks hold equal sample counts
 * in data-parallel stages, so the mean of means is the global mean). A multi-agent
 * metric's group prefix "agent_<g>_" is not part of the name the rule reads.
 */
df_metric_reduce df_metric_reduce_of(const char *name);

/**
 * Replace `m` on every rank of `c` with the aggregate over the ranks (the
 * union of names, in order of first appearance by rank). Collective over `c`;
 * a no-op for NULL or one rank. Errors: comm failures, DF_ENOMEM.
 */
int df_metrics_reduce(df_comm *c, df_metrics *m);

/** df_metrics_reduce with each name's reduction chosen by `rule`. */
int df_metrics_reduce_by(df_comm *c, df_metrics *m, df_metric_reduce (*rule)(const char *name));

#endif
