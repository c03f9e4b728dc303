/*
 * distflow/metrics.h — a step's named scalar metrics (siiRL / verl names such
 * as "critic/score/mean", "actor/pg_loss", "timing_s/gen").
 *
 * Values are kept in insertion order. df_metrics_set() replaces a value;
 * df_metrics_mean() accumulates samples and reports their mean (used for
 * per-micro-batch losses). Across ranks, a metric is reduced by its name's
 * suffix: ".../max" -> max, ".../min" -> min, anything else -> mean.
 */
#ifndef DISTFLOW_METRICS_H
#define DISTFLOW_METRICS_H

#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct df_metrics df_metrics;

DF_API df_metrics *df_metrics_new(void);
DF_API void df_metrics_free(df_metrics *m);
/** Remove every value (keeps the allocation for the next step). */
DF_API void df_metrics_clear(df_metrics *m);
/** Set `name` to `value` (replacing any earlier value or samples). */
DF_API int df_metrics_set(df_metrics *m, const char *name, double value);
/** Add one sample to `name`; its reported value is the mean of its samples. */
DF_API int df_metrics_mean(df_metrics *m, const char *name, double value);
/** Set `name` to its current value (0 when absent) plus `value` (a running total, set semantics). */
DF_API int df_metrics_add(df_metrics *m, const char *name, double value);
/** Current value of `name`, or `dflt` when absent. */
DF_API double df_metrics_get(const df_metrics *m, const char *name, double dflt);
DF_API bool df_metrics_has(const df_metrics *m, const char *name);
DF_API int df_metrics_count(const df_metrics *m);
/** i-th metric in insertion order; returns its name and stores its value. */
DF_API const char *df_metrics_at(const df_metrics *m, int i, double *value);
/**
 * Prefix the names of the metrics at positions [start, df_metrics_count) with `prefix`, those that
 * already begin with it, or with any agent group's "agent_<g>_", left as they are (siiRL's
 * add_prefix_to_metrics: "agent_1_" for what a node of agent group 1 recorded; siiRL leaves every
 * name beginning "agent_", which would also keep e.g. agent_loop/tool_calls/mean unprefixed). A prefixed name that is already present takes the value (set
 * semantics). Errors: DF_ENOMEM (the metrics stay valid; some may be renamed).
 */
DF_API int df_metrics_prefix_from(df_metrics *m, int start, const char *prefix);
/** Copy every metric of `src` into `dst` (set semantics). */
DF_API int df_metrics_merge(df_metrics *dst, const df_metrics *src);
/**
 * Fold one sample of metrics (a micro-batch's) into `acc` by verl's reduce_metrics rule
 * (verl/utils/metric/utils.py): a name containing "max" keeps the largest value seen, else one
 * containing "min" the smallest, any other the mean of its samples. `acc` should hold only folded
 * values (a plain value there counts as one sample). Errors: DF_ENOMEM.
 */
DF_API int df_metrics_fold(df_metrics *acc, const df_metrics *sample);
/**
 * One JSON object on one line, `{"step": step, "<name>": value, ...}` with a
 * trailing newline, malloc'd into *out. Non-finite values are written as null.
 */
DF_API int df_metrics_to_json(const df_metrics *m, int64_t step, char **out);
/**
 * As df_metrics_to_json with a wall-clock time right after the step:
 * `{"step": step, "timestamp": t, "<name>": value, ...}`, t in seconds since the
 * Unix epoch (UTC) with millisecond digits (%.3f). A negative t leaves the field
 * out, and so does one of 1e12 or more (NaN included). Errors: DF_ENOMEM.
 */
DF_API int df_metrics_to_json_at(const df_metrics *m, int64_t step, double timestamp, char **out);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_METRICS_H */
