/*
 * Step metrics aggregated across ranks by name (siiRL's DAG worker reduces
 * its ranks' metrics the same way): every rank's (name, value) pairs are
 * allgathered and each name is reduced by the rule its name implies.
 */
#include "workers/dag/metrics_reduce.h"

#include "util/sbuf.h"

#include <stdlib.h>
#include <string.h>

/* A multi-agent metric's name without its group prefix "agent_<g>_" (df_worker_agent_metrics). */
static const char *unprefixed(const char *name)
{
    if (strncmp(name, "agent_", 6))
        return name;
    const char *p = name + 6;
    while (*p >= '0' && *p <= '9')
        p++;
    return p > name + 6 && *p == '_' ? p + 1 : name;
}

df_metric_reduce df_metric_reduce_of(const char *name)
{
    name = unprefixed(name);
    const char *last = strrchr(name, '/');
    last = last ? last + 1 : name;
    if (!strncmp(name, "timing_s/", 9) || !strcmp(name, "perf/time_per_step"))
        return DF_METRIC_MAX; /* the slowest rank sets the step's wall time */
    if (!strcmp(name, "perf/total_num_tokens"))
        return DF_METRIC_SUM;
    size_t n = strlen(last);
    if (!strncmp(last, "max", 3) || (n > 4 && !strcmp(last + n - 4, "_max")))
        return DF_METRIC_MAX;
    if (!strncmp(last, "min", 3) || (n > 4 && !strcmp(last + n - 4, "_min")))
        return DF_METRIC_MIN;
    return DF_METRIC_MEAN;
}

typedef struct {
    const char *name;
    double acc;
    int n;
    df_metric_reduce op;
} agg;

/* Fold one rank's "name\tvalue\n" records into aggs (first-seen order). */
static int fold(char *p, char *end, df_metric_reduce (*rule)(const char *), agg **aggs, int *n, int *cap)
{
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p)), *tab = memchr(p, '\t', (size_t)(end - p));
        if (!nl || !tab || tab > nl)
            return df_error(DF_EINTERNAL, "malformed metric record from another rank");
        *tab = *nl = '\0';
        double v = strtod(tab + 1, NULL);
        int i = 0;
        while (i < *n && strcmp((*aggs)[i].name, p))
            i++;
        if (i == *n) {
            if (*n == *cap) {
                int nc = *cap ? 2 * *cap : 64;
                agg *na = realloc(*aggs, (size_t)nc * sizeof *na);
                if (!na)
                    return df_error(DF_ENOMEM, "out of memory");
                *aggs = na;
                *cap = nc;
            }
            (*aggs)[(*n)++] = (agg){.name = p, .acc = v, .op = rule(p)};
        } else {
            agg *a = &(*aggs)[i];
            a->acc = a->op == DF_METRIC_MAX   ? (v > a->acc ? v : a->acc)
                     : a->op == DF_METRIC_MIN ? (v < a->acc ? v : a->acc)
                                              : a->acc + v;
        }
        (*aggs)[i].n++;
        p = nl + 1;
    }
    return DF_OK;
}

int df_metrics_reduce(df_comm *c, df_metrics *m)
{
    return df_metrics_reduce_by(c, m, df_metric_reduce_of);
}

int df_metrics_reduce_by(df_comm *c, df_metrics *m, df_metric_reduce (*rule)(const char *name))
{
    if (!c || df_comm_size(c) == 1)
        return DF_OK;
    df_sbuf b = {0};
    for (int i = 0; i < df_metrics_count(m); i++) {
        double v;
        const char *k = df_metrics_at(m, i, &v);
        df_sbuf_printf(&b, "%s\t%.17g\n", k, v); /* %.17g: the double exactly */
    }
    char *text = NULL, *all = NULL;
    int64_t *counts = NULL, *displs = NULL;
    int rc = df_sbuf_finish(&b, &text);
    if (!rc)
        rc = df_comm_allgatherv(c, text, (int64_t)strlen(text), (void **)&all, &counts, &displs);
    agg *aggs = NULL;
    int n = 0, cap = 0;
    for (int r = 0; !rc && r < df_comm_size(c); r++)
        rc = fold(all + displs[r], all + displs[r] + counts[r], rule, &aggs, &n, &cap);
    if (!rc)
        df_metrics_clear(m);
    for (int i = 0; !rc && i < n; i++)
        rc = df_metrics_set(m, aggs[i].name, aggs[i].op == DF_METRIC_MEAN ? aggs[i].acc / aggs[i].n : aggs[i].acc);
    free(aggs);
    free(text);
    free(all);
    free(counts);
    free(displs);
    return rc ? df_error_wrap(rc, "aggregating metrics across ranks") : DF_OK;
}
