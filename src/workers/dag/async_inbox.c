/* A trainer rank's received episodes (async.h): kept in arrival order, checked for staleness at
 * consumption, taken oldest first; and the count, per rollout rank, of the taken episodes that a
 * filter then threw away. */
#include "workers/dag/async.h"

#include "distflow/algo.h"

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

/* ---- episodes consumed but not trained on (DAPO's filtered groups) ------------------ */

int df_async_count_rejected(const df_batch *b, const int64_t *keep, int64_t n_keep, int n_src, int64_t *per_src)
{
    int64_t n = df_batch_size(b);
    if (n == 0)
        return DF_OK;
    const df_column *uid = df_batch_column(b, "uid");
    const int64_t *src = df_batch_i64(b, DF_ASYNC_SOURCE_COLUMN);
    if (!uid || uid->kind != DF_COL_STR || !src)
        return df_error(DF_EINVAL, "async: counting rejected episodes needs the uid and %s columns",
                        DF_ASYNC_SOURCE_COLUMN);
    int64_t *g = malloc((size_t)n * sizeof *g), *count = calloc((size_t)(n_src > 0 ? n_src : 1), sizeof *count);
    char *kept = calloc((size_t)n, 1), *seen = calloc((size_t)n, 1);
    int rc = g && count && kept && seen ? df_group_ids((const char *const *)uid->data, n, g)
                                        : df_error(DF_ENOMEM, "out of memory");
    /* a group with any row kept is trained on: only whole groups are rejected */
    for (int64_t i = 0; !rc && i < n_keep; i++) {
        if (keep[i] < 0 || keep[i] >= n)
            rc = df_error(DF_EINVAL, "async: kept row %lld of a batch of %lld", (long long)keep[i], (long long)n);
        else
            kept[g[keep[i]]] = 1;
    }
    for (int64_t i = 0; !rc && i < n; i++) {
        if (kept[g[i]] || seen[g[i]])
            continue;
        if (src[i] < 0 || src[i] >= n_src)
            rc = df_error(DF_EINVAL, "async: row %lld says rollout rank %lld of %d", (long long)i, (long long)src[i],
                          n_src);
        else
            count[src[i]]++, seen[g[i]] = 1;
    }
    for (int r = 0; !rc && r < n_src; r++) /* all or nothing */
        per_src[r] += count[r];
    free(g), free(count), free(kept), free(seen);
    return rc;
}

void df_async_unaccept(df_staleness *st, int64_t n)
{
    n = n < st->accepted ? n : st->accepted;
    st->accepted -= n, st->rejected += n;
}
