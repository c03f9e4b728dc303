/* A trainer rank's received episodes (async.h): kept in arrival order, checked for staleness at
 * consumption, taken oldest first. */
#include "workers/dag/async.h"

#include <stdlib.h>
#include <string.h>

int df_async_inbox_push(df_async_inbox *in, df_batch *b, int64_t order, int64_t version, int64_t src)
{
    if (in->n == in->cap) {
        int64_t cap = in->cap ? 2 * in->cap : 64;
        df_batch **r = realloc(in->rows, (size_t)cap * sizeof *r);
        if (r)
            in->rows = r;
        int64_t *o = realloc(in->order, (size_t)cap * sizeof *o);
        if (o)
            in->order = o;
        int64_t *v = realloc(in->version, (size_t)cap * sizeof *v);
        if (v)
            in->version = v;
        int64_t *f = realloc(in->src, (size_t)cap * sizeof *f);
        if (f)
            in->src = f;
        if (!r || !o || !v || !f)
            return df_error(DF_ENOMEM, "out of memory");
        in->cap = cap;
    }
    in->rows[in->n] = b, in->order[in->n] = order, in->version[in->n] = version, in->src[in->n] = src;
    in->n++;
    return DF_OK;
}

/* Close the gaps the NULL rows left, keeping the others' arrival order. */
static void compact(df_async_inbox *in)
{
    int64_t k = 0;
    for (int64_t i = 0; i < in->n; i++)
        if (in->rows[i]) {
            in->rows[k] = in->rows[i], in->order[k] = in->order[i];
            in->version[k] = in->version[i], in->src[k] = in->src[i];
            k++;
        }
    in->n = k;
}

int df_async_inbox_drop_stale(df_async_inbox *in, df_staleness *st, int64_t version, int64_t *dropped)
{
    int rc = DF_OK;
    for (int64_t i = 0; i < in->n && !rc; i++) {
        /* the trainer checks its inbox at every poll while it waits: only a drop is a consumption
         * (counted once, as the episode goes); a kept one is counted when it is taken */
        if (version - in->version[i] <= st->p.max_staleness)
            continue;
        rc = df_staleness_consume(st, in->version[i], version, NULL);
        if (!rc) {
            df_batch_free(in->rows[i]);
            in->rows[i] = NULL;
            dropped[in->src[i]]++;
        }
    }
    compact(in);
    return rc;
}

static int cmp_order(const void *x, const void *y, void *user)
{
    const int64_t *o = user, a = o[*(const int64_t *)x], b = o[*(const int64_t *)y];
    return (a > b) - (a < b);
}

int df_async_inbox_take(df_async_inbox *in, const int64_t *limit, df_staleness *st, int64_t version,
                        df_batch **out)
{
    if (in->n == 0)
        return df_error(DF_EINVAL, "async inbox: taking from an empty inbox");
    int64_t *idx = malloc((size_t)in->n * sizeof *idx), take = 0;
    df_batch **parts = malloc((size_t)in->n * sizeof *parts);
    if (!idx || !parts) {
        free(idx), free(parts);
        return df_error(DF_ENOMEM, "out of memory");
    }
    for (int64_t i = 0; i < in->n; i++)
        if (in->order[i] <= limit[in->src[i]])
            idx[take++] = i;
    qsort_r(idx, (size_t)take, sizeof *idx, cmp_order, in->order);
    int rc = DF_OK;
    for (int64_t i = 0; i < take && !rc; i++) {
        parts[i] = in->rows[idx[i]];
        rc = df_staleness_consume(st, in->version[idx[i]], version, NULL);
    }
    if (rc) {
        free(idx), free(parts);
        return rc;
    }
    rc = take ? df_batch_concat((const df_batch *const *)parts, (int)take, out)
              : df_batch_slice(in->rows[0], 0, 0, out);
    for (int64_t i = 0; !rc && i < take; i++) {
        df_batch_free(in->rows[idx[i]]);
        in->rows[idx[i]] = NULL;
    }
    compact(in);
    free(idx), free(parts);
    return rc;
}

void df_async_inbox_clear(df_async_inbox *in)
{
    for (int64_t i = 0; i < in->n; i++)
        df_batch_free(in->rows[i]);
    free(in->rows), free(in->order), free(in->version), free(in->src);
    memset(in, 0, sizeof *in);
}
