/* metrics.jsonl read back into one series per metric (logging/plot.h). */
#include "logging/plot.h"

#include "distflow/common.h"
#include "util/fsutil.h"

#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void df_metrics_table_free(df_metrics_table *t)
{
    for (int i = 0; i < t->n; i++) {
        free(t->s[i].key);
        free(t->s[i].x);
        free(t->s[i].y);
    }
    free(t->s);
    memset(t, 0, sizeof *t);
}

const df_series *df_metrics_table_find(const df_metrics_table *t, const char *key)
{
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->s[i].key, key))
            return &t->s[i];
    return NULL;
}

/* The series of `key`, added at the end when new; NULL when out of memory. */
static df_series *series_of(df_metrics_table *t, const char *key)
{
    df_series *s = (df_series *)df_metrics_table_find(t, key);
    if (s)
        return s;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        df_series *ns = realloc(t->s, (size_t)cap * sizeof *ns);
        if (!ns)
            return NULL;
        t->s = ns, t->cap = cap;
    }
    s = &t->s[t->n];
    memset(s, 0, sizeof *s);
    if (!(s->key = strdup(key)))
        return NULL;
    t->n++;
    return s;
}

/* Append (x, y), keeping the series sorted by step: an insertion from the end, O(1) for the usual
   increasing steps; a repeated step (two runs appended to one file) keeps both points in file order. */
static int add_point(df_series *s, double x, double y)
{
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 64;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
        if (nx)
            s->x = nx;
        double *ny = nx ? realloc(s->y, (size_t)cap * sizeof *ny) : NULL;
        if (!ny)
            return df_error(DF_ENOMEM, "out of memory reading metrics");
        s->y = ny, s->cap = cap;
    }
    int64_t i = s->n++;
    for (; i > 0 && s->x[i - 1] > x; i--) {
        s->x[i] = s->x[i - 1];
        s->y[i] = s->y[i - 1];
    }
    s->x[i] = x, s->y[i] = y;
    return DF_OK;
}

static bool blank(const char *p, const char *end)
{
    for (; p < end; p++)
        if (!isspace((unsigned char)*p))
            return false;
    return true;
}

/* One line (without its newline): its numeric metrics added at x = its step. */
static int read_line(df_metrics_table *t, const char *path, int64_t lineno, const char *l, size_t n)
{
    json_error_t err;
    json_t *o = json_loadb(l, n, 0, &err);
    int rc = DF_OK;
    json_t *step = json_object_get(o, "step");
    if (!o)
        rc = df_error(DF_EINVAL, "%s:%lld: not valid JSON (column %d: %s)", path, (long long)lineno, err.column,
                      err.text);
    else if (!json_is_object(o))
        rc = df_error(DF_EINVAL, "%s:%lld: expected a JSON object of metrics", path, (long long)lineno);
    else if (!json_is_integer(step))
        rc = df_error(DF_EINVAL, "%s:%lld: no integer \"step\" in this line", path, (long long)lineno);
    const char *key;
    json_t *v;
    json_object_foreach(rc ? NULL : o, key, v) {
        if (v == step || !json_is_number(v) || !strcmp(key, "timestamp")) /* the row's wall time, not a metric */
            continue;
        df_series *s = series_of(t, key);
        rc = s ? add_point(s, (double)json_integer_value(step), json_number_value(v))
               : df_error(DF_ENOMEM, "out of memory reading %s", path);
        if (rc)
            break;
    }
    json_decref(o);
    return rc;
}

static int read_text(df_metrics_table *t, const char *path, const char *text, size_t len)
{
    const char *p = text, *end = text + len;
    int64_t lineno = 0;
    for (; p < end; p++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        lineno++;
        if (!blank(p, e)) {
            int rc = read_line(t, path, lineno, p, (size_t)(e - p));
            if (rc && !nl) { /* the last line, cut by a crash while it was written */
                t->cut_last_line = true;
                break;
            }
            if (rc)
                return rc;
            t->lines++;
        }
        p = e;
    }
    if (t->lines == 0)
        return df_error(DF_EINVAL, "%s: no metrics: the file is empty%s", path,
                        t->cut_last_line ? " but for a cut last line" : "");
    if (t->n == 0)
        return df_error(DF_EINVAL, "%s: no numeric metric in its %lld line(s)", path, (long long)t->lines);
    return DF_OK;
}

int df_metrics_table_read(const char *path, df_metrics_table *t)
{
    memset(t, 0, sizeof *t);
    char *text = NULL;
    size_t len = 0;
    int rc = df_read_file(path, &text, &len);
    if (rc)
        return df_error_wrap(rc, "metrics file");
    rc = read_text(t, path, text, len);
    free(text);
    if (rc)
        df_metrics_table_free(t);
    return rc;
}
