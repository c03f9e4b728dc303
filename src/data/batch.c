/* df_batch: columns, typed access, metadata and row operations (include/distflow/batch.h). */
#include "data/batch_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t df_col_elem_size(df_col_kind kind)
{
    switch (kind) {
    case DF_COL_I64:
        return sizeof(int64_t);
    case DF_COL_F32:
    case DF_COL_TOK_F32:
        return sizeof(float);
    case DF_COL_TOK_I32:
        return sizeof(int32_t);
    default:
        return 0;
    }
}

/* malloc that never returns NULL for a zero-size request, so "no data" and
 * "out of memory" stay distinguishable and empty columns still have a pointer. */
static void *xmalloc(size_t n) { return malloc(n ? n : 1); }
static void *xcalloc(size_t n, size_t sz) { return calloc(n ? n : 1, sz ? sz : 1); }

int df_col_name_check(const char *name)
{
    if (!name || !name[0])
        return df_error(DF_EINVAL, "batch: empty column name");
    if (strlen(name) >= DF_COL_NAME_MAX)
        return df_error(DF_EINVAL, "batch: column name '%.40s...' longer than %d bytes", name,
                        DF_COL_NAME_MAX - 1);
    return DF_OK;
}

/* ---- lifetime ------------------------------------------------------------ */

df_batch *df_batch_new(int64_t n)
{
    if (n < 0)
        return NULL;
    df_batch *b = calloc(1, sizeof *b);
    if (b)
        b->n = n;
    return b;
}

void df_column_free(df_column *c, int64_t n)
{
    if (!c)
        return;
    if (c->kind == DF_COL_STR && c->data) {
        char **s = c->data;
        for (int64_t i = 0; i < n; i++)
            free(s[i]);
    }
    free(c->data);
    free(c->offsets);
    free(c);
}

void df_batch_free(df_batch *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->ncol; i++)
        df_column_free(b->cols[i], b->n);
    free(b->cols);
    for (int i = 0; i < b->nmeta; i++)
        free(b->meta[i].key);
    free(b->meta);
    free(b);
}

int64_t df_batch_size(const df_batch *b) { return b->n; }
int df_batch_num_columns(const df_batch *b) { return b->ncol; }

const df_column *df_batch_column_at(const df_batch *b, int i)
{
    return (i >= 0 && i < b->ncol) ? b->cols[i] : NULL;
}

static int find_col(const df_batch *b, const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < b->ncol; i++)
        if (!strcmp(b->cols[i]->name, name))
            return i;
    return -1;
}

const df_column *df_batch_column(const df_batch *b, const char *name)
{
    int i = find_col(b, name);
    return i < 0 ? NULL : b->cols[i];
}

bool df_batch_has(const df_batch *b, const char *name) { return find_col(b, name) >= 0; }

void df_batch_drop(df_batch *b, const char *name)
{
    int i = find_col(b, name);
    if (i < 0)
        return;
    df_column_free(b->cols[i], b->n);
    memmove(&b->cols[i], &b->cols[i + 1], (size_t)(b->ncol - i - 1) * sizeof *b->cols);
    b->ncol--;
}

int df_batch_rename(df_batch *b, const char *from, const char *to)
{
    int i = find_col(b, from);
    size_t len = to ? strlen(to) : 0;
    if (i < 0)
        return df_error(DF_ENOTFOUND, "batch has no column '%s' to rename", from ? from : "(null)");
    if (len == 0 || len >= DF_COL_NAME_MAX)
        return df_error(DF_EINVAL, "column name '%s' must be 1 to %d bytes", to ? to : "(null)", DF_COL_NAME_MAX - 1);
    if (!strcmp(from, to))
        return DF_OK;
    df_batch_drop(b, to);
    i = find_col(b, from); /* the drop may have moved it */
    memcpy(b->cols[i]->name, to, len + 1);
    return DF_OK;
}

int df_batch_adopt(df_batch *b, df_column *c)
{
    int i = find_col(b, c->name);
    if (i >= 0) { /* replace in place: column order stays stable */
        df_column_free(b->cols[i], b->n);
        b->cols[i] = c;
        return DF_OK;
    }
    if (b->ncol == b->capcol) {
        int cap = b->capcol ? 2 * b->capcol : 8;
        df_column **nc = realloc(b->cols, (size_t)cap * sizeof *nc);
        if (!nc) {
            df_column_free(c, b->n);
            return df_error(DF_ENOMEM, "batch: out of memory adding column %s", c->name);
        }
        b->cols = nc;
        b->capcol = cap;
    }
    b->cols[b->ncol++] = c;
    return DF_OK;
}

static df_column *col_new(const char *name, df_col_kind kind)
{
    df_column *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    strcpy(c->name, name); /* length checked by df_col_name_check */
    c->kind = kind;
    return c;
}

/* ---- adding columns -------------------------------------------------------- */

static int set_scalar(df_batch *b, const char *name, df_col_kind kind, const void *vals)
{
    int rc = df_col_name_check(name);
    if (rc)
        return rc;
    if (b->n > 0 && !vals)
        return df_error(DF_EINVAL, "batch: column %s: NULL values for %lld rows", name,
                        (long long)b->n);
    size_t bytes = (size_t)b->n * df_col_elem_size(kind);
    df_column *c = col_new(name, kind);
    if (!c || !(c->data = xmalloc(bytes))) {
        df_column_free(c, 0);
        return df_error(DF_ENOMEM, "batch: out of memory for column %s", name);
    }
    if (bytes)
        memcpy(c->data, vals, bytes);
    return df_batch_adopt(b, c);
}

int df_batch_set_i64(df_batch *b, const char *name, const int64_t *vals)
{
    return set_scalar(b, name, DF_COL_I64, vals);
}

int df_batch_set_f32(df_batch *b, const char *name, const float *vals)
{
    return set_scalar(b, name, DF_COL_F32, vals);
}

int df_batch_set_str(df_batch *b, const char *name, const char *const *vals)
{
    int rc = df_col_name_check(name);
    if (rc)
        return rc;
    if (b->n > 0 && !vals)
        return df_error(DF_EINVAL, "batch: column %s: NULL strings for %lld rows", name,
                        (long long)b->n);
    df_column *c = col_new(name, DF_COL_STR);
    char **s = c ? xcalloc((size_t)b->n, sizeof(char *)) : NULL;
    if (!s) {
        free(c);
        return df_error(DF_ENOMEM, "batch: out of memory for column %s", name);
    }
    c->data = s;
    for (int64_t i = 0; i < b->n; i++) {
        if (!(s[i] = strdup(vals[i] ? vals[i] : ""))) {
            df_column_free(c, b->n);
            return df_error(DF_ENOMEM, "batch: out of memory for column %s", name);
        }
    }
    return df_batch_adopt(b, c);
}

int df_batch_set_str_at(df_batch *b, const char *name, int64_t i, const char *val)
{
    int k = find_col(b, name);
    if (k < 0 || b->cols[k]->kind != DF_COL_STR)
        return df_error(DF_ENOTFOUND, "batch: no string column %s", name ? name : "(null)");
    if (i < 0 || i >= b->n)
        return df_error(DF_EINVAL, "batch: row %lld out of range [0, %lld) in column %s",
                        (long long)i, (long long)b->n, name);
    char *dup = strdup(val ? val : "");
    if (!dup)
        return df_error(DF_ENOMEM, "batch: out of memory in column %s", name);
    char **s = b->cols[k]->data;
    free(s[i]);
    s[i] = dup;
    return DF_OK;
}

static int check_offsets(const char *name, const int64_t *off, int64_t n)
{
    if (!off)
        return df_error(DF_EINVAL, "batch: column %s: NULL offsets", name);
    if (off[0] != 0)
        return df_error(DF_EINVAL, "batch: column %s: offsets[0] = %lld, expected 0", name,
                        (long long)off[0]);
    for (int64_t i = 0; i < n; i++)
        if (off[i + 1] < off[i])
            return df_error(DF_EINVAL, "batch: column %s: offsets decrease at row %lld", name,
                            (long long)i);
    return DF_OK;
}

static int set_ragged(df_batch *b, const char *name, df_col_kind kind, const int64_t *offsets,
                      const void *data)
{
    int rc = df_col_name_check(name);
    if (rc || (rc = check_offsets(name, offsets, b->n)))
        return rc;
    int64_t total = offsets[b->n];
    if (total > 0 && !data)
        return df_error(DF_EINVAL, "batch: column %s: NULL data for %lld tokens", name,
                        (long long)total);
    size_t bytes = (size_t)total * df_col_elem_size(kind);
    df_column *c = col_new(name, kind);
    if (!c || !(c->offsets = xmalloc((size_t)(b->n + 1) * sizeof(int64_t))) ||
        !(c->data = xmalloc(bytes))) {
        df_column_free(c, 0);
        return df_error(DF_ENOMEM, "batch: out of memory for column %s", name);
    }
    memcpy(c->offsets, offsets, (size_t)(b->n + 1) * sizeof(int64_t));
    if (bytes)
        memcpy(c->data, data, bytes);
    return df_batch_adopt(b, c);
}

int df_batch_set_tok_i32(df_batch *b, const char *name, const int64_t *offsets,
                         const int32_t *data)
{
    return set_ragged(b, name, DF_COL_TOK_I32, offsets, data);
}

int df_batch_set_tok_f32(df_batch *b, const char *name, const int64_t *offsets, const float *data)
{
    return set_ragged(b, name, DF_COL_TOK_F32, offsets, data);
}

int df_batch_alloc_tok_f32_like(df_batch *b, const char *name, const char *like, float **out)
{
    int rc = df_col_name_check(name);
    if (rc)
        return rc;
    const df_column *src = df_batch_column(b, like);
    if (!src)
        return df_error(DF_ENOTFOUND, "batch: no column %s to shape %s like", like ? like : "(null)",
                        name);
    if (!df_col_is_ragged(src->kind))
        return df_error(DF_EINVAL, "batch: column %s is not a per-token column", like);
    int64_t total = src->offsets[b->n];
    df_column *c = col_new(name, DF_COL_TOK_F32);
    if (!c || !(c->offsets = xmalloc((size_t)(b->n + 1) * sizeof(int64_t))) ||
        !(c->data = xcalloc((size_t)total, sizeof(float)))) {
        df_column_free(c, 0);
        return df_error(DF_ENOMEM, "batch: out of memory for column %s", name);
    }
    /* copied before adopt: `like` may be the column being replaced */
    memcpy(c->offsets, src->offsets, (size_t)(b->n + 1) * sizeof(int64_t));
    float *data = c->data;
    if ((rc = df_batch_adopt(b, c)))
        return rc;
    if (out)
        *out = data;
    return DF_OK;
}

/* ---- typed access ----------------------------------------------------------- */

static const df_column *col_of(const df_batch *b, const char *name, df_col_kind kind)
{
    const df_column *c = df_batch_column(b, name);
    return (c && c->kind == kind) ? c : NULL;
}

const int64_t *df_batch_i64(const df_batch *b, const char *name)
{
    const df_column *c = col_of(b, name, DF_COL_I64);
    return c ? c->data : NULL;
}

const float *df_batch_f32(const df_batch *b, const char *name)
{
    const df_column *c = col_of(b, name, DF_COL_F32);
    return c ? c->data : NULL;
}

const char *df_batch_str(const df_batch *b, const char *name, int64_t i)
{
    const df_column *c = col_of(b, name, DF_COL_STR);
    if (!c || i < 0 || i >= b->n)
        return NULL;
    return ((char **)c->data)[i];
}

void *df_batch_data_mut(df_batch *b, const char *name)
{
    int i = find_col(b, name);
    return i < 0 ? NULL : b->cols[i]->data;
}

static const void *tok_row(const df_batch *b, const char *name, df_col_kind kind, int64_t i,
                           int64_t *len)
{
    const df_column *c = col_of(b, name, kind);
    if (!c || i < 0 || i >= b->n)
        return NULL;
    if (len)
        *len = c->offsets[i + 1] - c->offsets[i];
    return (const char *)c->data + (size_t)c->offsets[i] * df_col_elem_size(kind);
}

const int32_t *df_batch_tok_i32(const df_batch *b, const char *name, int64_t i, int64_t *len)
{
    return tok_row(b, name, DF_COL_TOK_I32, i, len);
}

const float *df_batch_tok_f32(const df_batch *b, const char *name, int64_t i, int64_t *len)
{
    return tok_row(b, name, DF_COL_TOK_F32, i, len);
}

const int64_t *df_batch_offsets(const df_batch *b, const char *name)
{
    const df_column *c = df_batch_column(b, name);
    return (c && df_col_is_ragged(c->kind)) ? c->offsets : NULL;
}

int df_batch_response_mask(const df_batch *b, const int32_t **mask)
{
    *mask = NULL;
    const df_column *c = df_batch_column(b, "response_mask");
    if (!c)
        return DF_OK;
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    if (c->kind != DF_COL_TOK_I32 || !ro)
        return df_error(DF_EINVAL, "batch: response_mask must be a token column (int32) next to "
                        "response_ids");
    for (int64_t i = 1; i <= df_batch_size(b); i++)
        if (c->offsets[i] != ro[i])
            return df_error(DF_EINVAL, "batch: response_mask of sample %lld has %lld tokens, its "
                            "response %lld", (long long)(i - 1),
                            (long long)(c->offsets[i] - c->offsets[i - 1]),
                            (long long)(ro[i] - ro[i - 1]));
    *mask = c->data;
    return DF_OK;
}

/* ---- metadata ------------------------------------------------------------------ */

int df_batch_meta_set(df_batch *b, const char *key, double value)
{
    if (!key || !key[0])
        return df_error(DF_EINVAL, "batch: empty metadata key");
    for (int i = 0; i < b->nmeta; i++)
        if (!strcmp(b->meta[i].key, key)) {
            b->meta[i].value = value;
            return DF_OK;
        }
    if (b->nmeta == b->capmeta) {
        int cap = b->capmeta ? 2 * b->capmeta : 8;
        df_meta_entry *nm = realloc(b->meta, (size_t)cap * sizeof *nm);
        if (!nm)
            return df_error(DF_ENOMEM, "batch: out of memory for metadata %s", key);
        b->meta = nm;
        b->capmeta = cap;
    }
    char *k = strdup(key);
    if (!k)
        return df_error(DF_ENOMEM, "batch: out of memory for metadata %s", key);
    b->meta[b->nmeta].key = k;
    b->meta[b->nmeta].value = value;
    b->nmeta++;
    return DF_OK;
}

double df_batch_meta_get(const df_batch *b, const char *key, double dflt)
{
    for (int i = 0; key && i < b->nmeta; i++)
        if (!strcmp(b->meta[i].key, key))
            return b->meta[i].value;
    return dflt;
}

int df_batch_meta_count(const df_batch *b) { return b->nmeta; }

const char *df_batch_meta_at(const df_batch *b, int i, double *value)
{
    if (i < 0 || i >= b->nmeta)
        return NULL;
    if (value)
        *value = b->meta[i].value;
    return b->meta[i].key;
}

static int copy_meta(df_batch *dst, const df_batch *src)
{
    for (int i = 0; i < src->nmeta; i++) {
        int rc = df_batch_meta_set(dst, src->meta[i].key, src->meta[i].value);
        if (rc)
            return rc;
    }
    return DF_OK;
}

/* ---- row operations --------------------------------------------------------------- */

/* Column c of a batch of `n` rows, gathered at rows idx[0..k). */
static df_column *gather_col(const df_column *c, const int64_t *idx, int64_t k)
{
    df_column *o = col_new(c->name, c->kind);
    if (!o)
        return NULL;
    size_t es = df_col_elem_size(c->kind);
    if (c->kind == DF_COL_STR) {
        char **dst = xcalloc((size_t)k, sizeof(char *));
        char *const *src = c->data;
        o->data = dst;
        if (!dst)
            goto fail;
        for (int64_t r = 0; r < k; r++)
            if (!(dst[r] = strdup(src[idx[r]])))
                goto fail;
        return o;
    }
    if (!df_col_is_ragged(c->kind)) {
        if (!(o->data = xmalloc((size_t)k * es)))
            goto fail;
        for (int64_t r = 0; r < k; r++)
            memcpy((char *)o->data + (size_t)r * es, (const char *)c->data + (size_t)idx[r] * es, es);
        return o;
    }
    if (!(o->offsets = xmalloc((size_t)(k + 1) * sizeof(int64_t))))
        goto fail;
    o->offsets[0] = 0;
    for (int64_t r = 0; r < k; r++)
        o->offsets[r + 1] = o->offsets[r] + (c->offsets[idx[r] + 1] - c->offsets[idx[r]]);
    if (!(o->data = xmalloc((size_t)o->offsets[k] * es)))
        goto fail;
    for (int64_t r = 0; r < k; r++) {
        int64_t len = o->offsets[r + 1] - o->offsets[r];
        if (len)
            memcpy((char *)o->data + (size_t)o->offsets[r] * es,
                   (const char *)c->data + (size_t)c->offsets[idx[r]] * es, (size_t)len * es);
    }
    return o;
fail:
    df_column_free(o, k);
    return NULL;
}

/* idx is trusted to be in range. */
static int gather(const df_batch *b, const int64_t *idx, int64_t k, df_batch **out)
{
    df_batch *o = df_batch_new(k);
    if (!o)
        return df_error(DF_ENOMEM, "batch: out of memory for %lld rows", (long long)k);
    int rc = copy_meta(o, b);
    for (int i = 0; !rc && i < b->ncol; i++) {
        df_column *c = gather_col(b->cols[i], idx, k);
        rc = c ? df_batch_adopt(o, c)
               : df_error(DF_ENOMEM, "batch: out of memory gathering column %s", b->cols[i]->name);
    }
    if (rc) {
        df_batch_free(o);
        return rc;
    }
    *out = o;
    return DF_OK;
}

int df_batch_select(const df_batch *b, const int64_t *idx, int64_t k, df_batch **out)
{
    if (k < 0 || (k > 0 && !idx))
        return df_error(DF_EINVAL, "batch select: bad index list (k = %lld)", (long long)k);
    for (int64_t r = 0; r < k; r++)
        if (idx[r] < 0 || idx[r] >= b->n)
            return df_error(DF_EINVAL, "batch select: index %lld at position %lld out of range [0, %lld)",
                            (long long)idx[r], (long long)r, (long long)b->n);
    return gather(b, idx, k, out);
}

/* Gather the rows first + r / rep for r in [0, k). */
static int gather_range(const df_batch *b, int64_t first, int64_t k, int64_t rep, df_batch **out)
{
    int64_t *idx = xmalloc((size_t)k * sizeof *idx);
    if (!idx)
        return df_error(DF_ENOMEM, "batch: out of memory for %lld rows", (long long)k);
    for (int64_t r = 0; r < k; r++)
        idx[r] = first + r / rep;
    int rc = gather(b, idx, k, out);
    free(idx);
    return rc;
}

int df_batch_slice(const df_batch *b, int64_t start, int64_t end, df_batch **out)
{
    if (start < 0 || end < start || end > b->n)
        return df_error(DF_EINVAL, "batch slice: [%lld, %lld) not within [0, %lld]", (long long)start,
                        (long long)end, (long long)b->n);
    return gather_range(b, start, end - start, 1, out);
}

int df_batch_copy(const df_batch *b, df_batch **out)
{
    return gather_range(b, 0, b->n, 1, out);
}

int df_batch_repeat_interleave(const df_batch *b, int64_t k, df_batch **out)
{
    if (k < 1)
        return df_error(DF_EINVAL, "batch repeat_interleave: repeat count %lld < 1", (long long)k);
    if (b->n > 0 && k > INT64_MAX / 2 / b->n)
        return df_error(DF_EINVAL, "batch repeat_interleave: %lld x %lld rows overflows",
                        (long long)b->n, (long long)k);
    return gather_range(b, 0, b->n * k, k, out);
}

int df_batch_split(const df_batch *b, int64_t chunk, df_batch ***parts, int *n_parts)
{
    if (chunk < 1)
        return df_error(DF_EINVAL, "batch split: chunk size %lld < 1", (long long)chunk);
    int64_t np = (b->n + chunk - 1) / chunk;
    if (np > INT32_MAX)
        return df_error(DF_EINVAL, "batch split: %lld chunks exceed the int range", (long long)np);
    df_batch **p = xcalloc((size_t)np, sizeof *p);
    if (!p)
        return df_error(DF_ENOMEM, "batch split: out of memory");
    for (int64_t i = 0; i < np; i++) {
        int64_t s = i * chunk, e = s + chunk < b->n ? s + chunk : b->n;
        int rc = df_batch_slice(b, s, e, &p[i]);
        if (rc) {
            for (int64_t j = 0; j < i; j++)
                df_batch_free(p[j]);
            free(p);
            return rc;
        }
    }
    *parts = p;
    *n_parts = (int)np;
    return DF_OK;
}

/* Concatenate column `name` (present in every part with the same kind). */
static df_column *concat_col(const df_batch *const *parts, int n_parts, const df_column *c0,
                             int64_t n)
{
    df_column *o = col_new(c0->name, c0->kind);
    if (!o)
        return NULL;
    size_t es = df_col_elem_size(c0->kind);
    bool ragged = df_col_is_ragged(c0->kind);
    int64_t total = 0, row = 0;
    for (int p = 0; p < n_parts; p++) {
        const df_column *c = df_batch_column(parts[p], c0->name);
        total += ragged ? c->offsets[parts[p]->n] : parts[p]->n;
    }
    if (c0->kind == DF_COL_STR)
        o->data = xcalloc((size_t)n, sizeof(char *));
    else
        o->data = xmalloc((size_t)total * es);
    if (!o->data || (ragged && !(o->offsets = xmalloc((size_t)(n + 1) * sizeof(int64_t)))))
        goto fail;
    int64_t at = 0; /* element position in o->data */
    if (ragged)
        o->offsets[0] = 0;
    for (int p = 0; p < n_parts; p++) {
        const df_column *c = df_batch_column(parts[p], c0->name);
        int64_t pn = parts[p]->n;
        if (c0->kind == DF_COL_STR) {
            for (int64_t r = 0; r < pn; r++)
                if (!(((char **)o->data)[row + r] = strdup(((char **)c->data)[r])))
                    goto fail;
        } else {
            int64_t cnt = ragged ? c->offsets[pn] : pn;
            if (cnt)
                memcpy((char *)o->data + (size_t)at * es, c->data, (size_t)cnt * es);
            if (ragged)
                for (int64_t r = 0; r < pn; r++)
                    o->offsets[row + r + 1] = at + c->offsets[r + 1];
            at += cnt;
        }
        row += pn;
    }
    return o;
fail:
    df_column_free(o, n);
    return NULL;
}

int df_batch_concat(const df_batch *const *parts, int n_parts, df_batch **out)
{
    if (n_parts < 1 || !parts)
        return df_error(DF_EINVAL, "batch concat: no parts");
    const df_batch *a = parts[0];
    int64_t n = 0;
    for (int p = 0; p < n_parts; p++) {
        const df_batch *q = parts[p];
        if (q->ncol != a->ncol)
            return df_error(DF_EINVAL, "batch concat: part %d has %d columns, part 0 has %d", p,
                            q->ncol, a->ncol);
        for (int i = 0; i < a->ncol; i++) {
            const df_column *c = df_batch_column(q, a->cols[i]->name);
            if (!c)
                return df_error(DF_EINVAL, "batch concat: part %d lacks column %s", p,
                                a->cols[i]->name);
            if (c->kind != a->cols[i]->kind)
                return df_error(DF_EINVAL, "batch concat: column %s has kind %d in part %d, %d in part 0",
                                c->name, (int)c->kind, p, (int)a->cols[i]->kind);
        }
        n += q->n;
    }
    df_batch *o = df_batch_new(n);
    if (!o)
        return df_error(DF_ENOMEM, "batch concat: out of memory");
    int rc = copy_meta(o, a);
    for (int i = 0; !rc && i < a->ncol; i++) {
        df_column *c = concat_col(parts, n_parts, a->cols[i], n);
        rc = c ? df_batch_adopt(o, c)
               : df_error(DF_ENOMEM, "batch concat: out of memory for column %s", a->cols[i]->name);
    }
    if (rc) {
        df_batch_free(o);
        return rc;
    }
    *out = o;
    return DF_OK;
}

/* ---- per-sample summary ------------------------------------------------------------ */

/* The columns a summary reads, each looked up once: NULL where absent (or, but for the
   ragged lengths, not of the kind read); a multi-agent batch's agent_group_<g>_prompt_ids /
   _response_ids (every agent's own, distflow/marft.h) count into the lengths too. */
#define AGENT_COLS 32
typedef struct {
    const df_column *prompt, *response, *uid, *group, *score;
    const df_column *agent_prompt[AGENT_COLS], *agent_response[AGENT_COLS];
    int n_agent_prompt, n_agent_response;
} sample_cols;

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static sample_cols sample_cols_of(const df_batch *b)
{
    sample_cols c = {.prompt = df_batch_column(b, "prompt_ids"),
                     .response = df_batch_column(b, "response_ids"),
                     .uid = col_of(b, "uid", DF_COL_STR),
                     .group = col_of(b, "index", DF_COL_I64),
                     .score = col_of(b, "score", DF_COL_F32)};
    for (int i = 0; i < b->ncol; i++) {
        const df_column *col = b->cols[i];
        if (strncmp(col->name, "agent_group_", 12))
            continue;
        if (ends_with(col->name, "_prompt_ids") && c.n_agent_prompt < AGENT_COLS)
            c.agent_prompt[c.n_agent_prompt++] = col;
        else if (ends_with(col->name, "_response_ids") && c.n_agent_response < AGENT_COLS)
            c.agent_response[c.n_agent_response++] = col;
    }
    return c;
}

static int64_t row_len(const df_batch *b, const df_column *c, int64_t i)
{
    if (!c || !df_col_is_ragged(c->kind) || i < 0 || i >= b->n)
        return 0;
    return c->offsets[i + 1] - c->offsets[i];
}

static df_sample_info sample_info_at(const df_batch *b, const sample_cols *c, int64_t i)
{
    df_sample_info s;
    bool in = i >= 0 && i < b->n;
    s.prompt_length = row_len(b, c->prompt, i);
    s.response_length = row_len(b, c->response, i);
    for (int k = 0; k < c->n_agent_prompt; k++)
        s.prompt_length += row_len(b, c->agent_prompt[k], i);
    for (int k = 0; k < c->n_agent_response; k++)
        s.response_length += row_len(b, c->agent_response[k], i);
    s.sum_tokens = s.prompt_length + s.response_length;
    s.uid = c->uid && in ? ((char **)c->uid->data)[i] : NULL;
    s.group = c->group && in ? ((const int64_t *)c->group->data)[i] : -1;
    s.score = c->score && in ? (double)((const float *)c->score->data)[i] : (double)NAN;
    s.src_rank = 0;
    s.src_index = i;
    return s;
}

df_sample_info df_batch_sample_info(const df_batch *b, int64_t i)
{
    sample_cols c = sample_cols_of(b);
    return sample_info_at(b, &c, i);
}
