/* Named step metrics (include/distflow/metrics.h). */
#include "distflow/metrics.h"

#include <math.h>
#include <stdio.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;
    double sum;
    int64_t count;
} metric;

struct df_metrics {
    metric *v;
    int n, cap;
};

df_metrics *df_metrics_new(void) { return calloc(1, sizeof(df_metrics)); }

void df_metrics_clear(df_metrics *m)
{
    for (int i = 0; i < m->n; i++)
        free(m->v[i].name);
    m->n = 0;
}

void df_metrics_free(df_metrics *m)
{
    if (!m)
        return;
    df_metrics_clear(m);
    free(m->v);
    free(m);
}

static metric *find(const df_metrics *m, const char *name)
{
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->v[i].name, name))
            return &m->v[i];
    return NULL;
}

static metric *find_or_add(df_metrics *m, const char *name)
{
    metric *e = find(m, name);
    if (e)
        return e;
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 32;
        metric *nv = realloc(m->v, (size_t)cap * sizeof *nv);
        if (!nv)
            return NULL;
        m->v = nv;
        m->cap = cap;
    }
    e = &m->v[m->n];
    if (!(e->name = strdup(name)))
        return NULL;
    e->sum = 0;
    e->count = 0;
    m->n++;
    return e;
}

/* "agent_<g>_...": a multi-agent group's metric already (df_metrics_prefix_from leaves it). */
static bool agent_prefixed(const char *name)
{
    if (strncmp(name, "agent_", 6) || !isdigit((unsigned char)name[6]))
        return false;
    const char *p = name + 6;
    while (isdigit((unsigned char)*p))
        p++;
    return *p == '_';
}

int df_metrics_prefix_from(df_metrics *m, int start, const char *prefix)
{
    size_t lp = strlen(prefix);
    for (int i = start < 0 ? 0 : start; i < m->n; i++) {
        if (!strncmp(m->v[i].name, prefix, lp) || agent_prefixed(m->v[i].name))
            continue;
        size_t ln = strlen(m->v[i].name);
        char *name = malloc(lp + ln + 1);
        if (!name)
            return df_error(DF_ENOMEM, "out of memory renaming metric %s", m->v[i].name);
        memcpy(name, prefix, lp);
        memcpy(name + lp, m->v[i].name, ln + 1);
        metric *old = find(m, name);
        if (old) { /* the earlier one takes the value; this entry goes */
            old->sum = m->v[i].sum, old->count = m->v[i].count;
            free(name);
            free(m->v[i].name);
            memmove(&m->v[i], &m->v[i + 1], (size_t)(m->n - i - 1) * sizeof *m->v);
            m->n--, i--;
            continue;
        }
        free(m->v[i].name);
        m->v[i].name = name;
    }
    return DF_OK;
}

int df_metrics_set(df_metrics *m, const char *name, double value)
{
    metric *e = find_or_add(m, name);
    if (!e)
        return df_error(DF_ENOMEM, "out of memory recording metric %s", name);
    e->sum = value;
    e->count = 1;
    return DF_OK;
}

int df_metrics_add(df_metrics *m, const char *name, double value)
{
    metric *e = find_or_add(m, name);
    if (!e)
        return df_error(DF_ENOMEM, "out of memory recording metric %s", name);
    e->sum = (e->count ? e->sum / (double)e->count : 0.0) + value;
    e->count = 1;
    return DF_OK;
}

int df_metrics_mean(df_metrics *m, const char *name, double value)
{
    metric *e = find_or_add(m, name);
    if (!e)
        return df_error(DF_ENOMEM, "out of memory recording metric %s", name);
    e->sum += value;
    e->count++;
    return DF_OK;
}

static double value_of(const metric *e) { return e->count ? e->sum / (double)e->count : 0.0; }

double df_metrics_get(const df_metrics *m, const char *name, double dflt)
{
    const metric *e = find(m, name);
    return e ? value_of(e) : dflt;
}

bool df_metrics_has(const df_metrics *m, const char *name) { return find(m, name) != NULL; }

int df_metrics_count(const df_metrics *m) { return m->n; }

const char *df_metrics_at(const df_metrics *m, int i, double *value)
{
    if (i < 0 || i >= m->n)
        return NULL;
    if (value)
        *value = value_of(&m->v[i]);
    return m->v[i].name;
}

int df_metrics_merge(df_metrics *dst, const df_metrics *src)
{
    for (int i = 0; i < src->n; i++) {
        int rc = df_metrics_set(dst, src->v[i].name, value_of(&src->v[i]));
        if (rc)
            return rc;
    }
    return DF_OK;
}

int df_metrics_fold(df_metrics *acc, const df_metrics *sample)
{
    for (int i = 0; i < sample->n; i++) {
        const char *name = sample->v[i].name;
        double v = value_of(&sample->v[i]);
        const metric *e = find(acc, name);
        bool hi = strstr(name, "max") != NULL, lo = !hi && strstr(name, "min");
        int rc = DF_OK;
        if (!hi && !lo)
            rc = df_metrics_mean(acc, name, v);
        else if (!e || (hi ? v > value_of(e) : v < value_of(e)))
            rc = df_metrics_set(acc, name, v);
        if (rc)
            return rc;
    }
    return DF_OK;
}

int df_metrics_to_json(const df_metrics *m, int64_t step, char **out)
{
    return df_metrics_to_json_at(m, step, -1, out);
}

int df_metrics_to_json_at(const df_metrics *m, int64_t step, double timestamp, char **out)
{
    size_t cap = 96 + (size_t)m->n * 96, len = 0;
    for (int i = 0; i < m->n; i++)
        cap += strlen(m->v[i].name) * 2;
    char *s = malloc(cap);
    if (!s)
        return df_error(DF_ENOMEM, "out of memory formatting metrics");
    len += (size_t)snprintf(s + len, cap - len, "{\"step\": %lld", (long long)step);
    if (timestamp >= 0 && timestamp < 1e12) /* bounded: its %.3f fits the bytes reserved above */
        len += (size_t)snprintf(s + len, cap - len, ", \"timestamp\": %.3f", timestamp);
    for (int i = 0; i < m->n; i++) {
        double v = value_of(&m->v[i]);
        len += (size_t)snprintf(s + len, cap - len, ", \"");
        for (const char *c = m->v[i].name; *c; c++) { /* names are ASCII; escape the two JSON specials */
            if (*c == '"' || *c == '\\')
                s[len++] = '\\';
            s[len++] = *c;
        }
        if (isfinite(v))
            len += (size_t)snprintf(s + len, cap - len, "\": %.10g", v);
        else
            len += (size_t)snprintf(s + len, cap - len, "\": null");
    }
    snprintf(s + len, cap - len, "}\n");
    *out = s;
    return DF_OK;
}
