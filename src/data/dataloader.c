/* The dataloader: one global order, each rank its share (include/distflow/dataloader.h). */
#include "distflow/dataloader.h"

#include "distflow/rng.h"

#include <stdlib.h>
#include <string.h>

struct df_dataloader {
    const df_dataset *ds;
    int64_t rows;   /* N: the dataset's rows */
    int64_t global; /* G: rows per step over all ranks */
    int64_t steps;  /* per epoch */
    int rank, world;
    bool shuffle, drop_last;
    uint64_t seed;
    int64_t epoch, step; /* position of the next batch */
    int64_t *perm;       /* permutation of perm_epoch (shuffle only), [rows] */
    int64_t perm_epoch;
    char *fields[DF_DATALOADER_MAX_FIELDS]; /* df_dataloader_add_column's keys */
    int n_fields;
};

static int check_args(const df_dataset *ds, int64_t gbs, int rank, int world)
{
    if (!ds)
        return df_error(DF_EINVAL, "dataloader: no dataset");
    if (gbs < 1)
        return df_error(DF_EINVAL, "dataloader: global batch size %lld < 1", (long long)gbs);
    if (world < 1 || rank < 0 || rank >= world)
        return df_error(DF_EINVAL, "dataloader: rank %d outside world of %d", rank, world);
    if (gbs % world)
        return df_error(DF_EINVAL,
                        "dataloader: global batch size %lld is not divisible by the %d data-parallel ranks",
                        (long long)gbs, world);
    int si, sc;
    df_dataset_shard(ds, &si, &sc);
    if (world > 1 && sc > 1) /* the global order needs every row on every rank (one rank reads what it has) */
        return df_error(DF_EINVAL, "dataloader: the dataset holds shard %d of %d; a loader reads every row",
                        si, sc);
    return DF_OK;
}

int df_dataloader_create(const df_dataset *ds, int64_t global_batch_size, int rank, int world, bool shuffle,
                         uint64_t seed, bool drop_last, df_dataloader **out)
{
    int rc = check_args(ds, global_batch_size, rank, world);
    if (rc)
        return rc;
    int64_t n = df_dataset_size(ds), g = global_batch_size;
    int64_t steps = drop_last ? n / g : (n + g - 1) / g;
    if (steps == 0)
        return df_error(DF_EINVAL, "dataloader: %lld rows give no batch of %lld%s", (long long)n,
                        (long long)g, drop_last ? " with drop_last" : "");
    df_dataloader *dl = calloc(1, sizeof *dl);
    int64_t *perm = shuffle ? malloc((size_t)n * sizeof *perm) : NULL;
    if (!dl || (shuffle && !perm)) {
        free(dl);
        free(perm);
        return df_error(DF_ENOMEM, "dataloader: out of memory for %lld rows", (long long)n);
    }
    *dl = (df_dataloader){.ds = ds,
                          .rows = n,
                          .global = g,
                          .steps = steps,
                          .rank = rank,
                          .world = world,
                          .shuffle = shuffle,
                          .drop_last = drop_last,
                          .seed = seed,
                          .perm = perm,
                          .perm_epoch = -1};
    *out = dl;
    return DF_OK;
}

void df_dataloader_free(df_dataloader *dl)
{
    if (!dl)
        return;
    for (int k = 0; k < dl->n_fields; k++)
        free(dl->fields[k]);
    free(dl->perm);
    free(dl);
}

static const char *const COLUMNS[] = {"index",        "row",        "data_source",
                                      "ground_truth", "raw_prompt", "extra_info"};

int df_dataloader_add_column(df_dataloader *dl, const char *key)
{
    if (!key || !key[0])
        return df_error(DF_EINVAL, "dataloader: an extra column needs a name");
    for (size_t c = 0; c < sizeof COLUMNS / sizeof *COLUMNS; c++)
        if (!strcmp(key, COLUMNS[c]))
            return df_error(DF_EINVAL, "dataloader: '%s' is a column of every batch already", key);
    for (int k = 0; k < dl->n_fields; k++)
        if (!strcmp(key, dl->fields[k]))
            return DF_OK; /* one column per key: a batch cannot hold two of a name */
    if (dl->n_fields == DF_DATALOADER_MAX_FIELDS)
        return df_error(DF_EINVAL, "dataloader: more than %d extra columns", DF_DATALOADER_MAX_FIELDS);
    for (int64_t i = 0; i < dl->rows; i++) { /* every row has it: no batch fails later */
        char *v = NULL;
        int rc = df_dataset_field(dl->ds, i, key, &v);
        free(v);
        if (rc)
            return rc;
    }
    if (!(dl->fields[dl->n_fields] = strdup(key)))
        return df_error(DF_ENOMEM, "dataloader: out of memory");
    dl->n_fields++;
    return DF_OK;
}

int64_t df_dataloader_rows(const df_dataloader *dl)
{
    return dl->rows;
}
int64_t df_dataloader_steps_per_epoch(const df_dataloader *dl)
{
    return dl->steps;
}
int64_t df_dataloader_epoch(const df_dataloader *dl)
{
    return dl->epoch;
}
int64_t df_dataloader_step(const df_dataloader *dl)
{
    return dl->step;
}

void df_dataloader_tell(const df_dataloader *dl, int64_t *epoch, int64_t *step)
{
    if (epoch)
        *epoch = dl->epoch;
    if (step)
        *step = dl->step;
}

int df_dataloader_seek(df_dataloader *dl, int64_t epoch, int64_t step)
{
    if (epoch < 0 || step < 0 || step > dl->steps)
        return df_error(DF_EINVAL, "dataloader: cannot seek to epoch %lld step %lld (%lld steps per epoch)",
                        (long long)epoch, (long long)step, (long long)dl->steps);
    if (step == dl->steps) {
        epoch++;
        step = 0;
    }
    dl->epoch = epoch;
    dl->step = step;
    return DF_OK;
}

/* The epoch's visiting order: seeded by (seed, epoch) only, so every rank draws the same permutation
 * and a resumed run draws it again. */
static void draw_perm(const df_dataloader *dl, int64_t epoch, int64_t *perm)
{
    for (int64_t i = 0; i < dl->rows; i++)
        perm[i] = i;
    df_rng r;
    df_rng_seed(&r, df_rng_key(dl->seed, (uint64_t)epoch, 0, 0));
    df_rng_shuffle_i64(&r, perm, dl->rows);
}

int df_dataloader_indices(const df_dataloader *dl, int64_t epoch, int64_t step, int64_t *idx, int64_t cap,
                          int64_t *n)
{
    if (epoch < 0 || step < 0 || step >= dl->steps)
        return df_error(DF_EINVAL, "dataloader: no batch at epoch %lld step %lld (%lld steps per epoch)",
                        (long long)epoch, (long long)step, (long long)dl->steps);
    /* the step's global batch [lo, lo + len) of the order, then this rank's share of it */
    int64_t lo = step * dl->global, len = dl->rows - lo < dl->global ? dl->rows - lo : dl->global;
    int64_t a = lo + dl->rank * len / dl->world, b = lo + (dl->rank + 1) * len / dl->world;
    if (b - a > cap)
        return df_error(DF_EINVAL, "dataloader: index buffer of %lld < %lld rows", (long long)cap,
                        (long long)(b - a));
    int64_t *perm = NULL, *tmp = NULL;
    if (dl->shuffle) {
        if (dl->perm_epoch == epoch) {
            perm = dl->perm;
        } else {
            if (!(tmp = malloc((size_t)dl->rows * sizeof *tmp)))
                return df_error(DF_ENOMEM, "dataloader: out of memory");
            draw_perm(dl, epoch, tmp);
            perm = tmp;
        }
    }
    for (int64_t k = a; k < b; k++)
        idx[k - a] = perm ? perm[k] : k;
    *n = b - a;
    free(tmp);
    return DF_OK;
}

static int build_batch(const df_dataloader *dl, const int64_t *rows, int64_t k, int64_t epoch, int64_t step,
                       df_batch **out)
{
    df_batch *b = df_batch_new(k);
    const char **s = malloc((size_t)(k ? k : 1) * sizeof *s);
    int64_t *g = malloc((size_t)(k ? k : 1) * sizeof *g);
    int rc = (!b || !s || !g) ? df_error(DF_ENOMEM, "dataloader: out of memory") : DF_OK;
    for (int64_t r = 0; !rc && r < k; r++)
        g[r] = df_dataset_global_index(dl->ds, rows[r]);
    if (!rc && !(rc = df_batch_set_i64(b, "index", g)))
        rc = df_batch_set_i64(b, "row", rows);
    const char *const *names = COLUMNS + 2; /* after index and row */
    const char *(*const get[])(const df_dataset *, int64_t) = {
        df_dataset_data_source, df_dataset_ground_truth, df_dataset_raw_prompt, df_dataset_extra_info};
    for (int c = 0; !rc && c < 4; c++) {
        for (int64_t r = 0; r < k; r++)
            s[r] = get[c](dl->ds, rows[r]);
        rc = df_batch_set_str(b, names[c], s);
    }
    for (int c = 0; !rc && c < dl->n_fields; c++) {
        char **v = calloc((size_t)(k ? k : 1), sizeof *v);
        rc = v ? DF_OK : df_error(DF_ENOMEM, "dataloader: out of memory");
        for (int64_t r = 0; !rc && r < k; r++)
            rc = df_dataset_field(dl->ds, rows[r], dl->fields[c], &v[r]);
        if (!rc)
            rc = df_batch_set_str(b, dl->fields[c], (const char *const *)v);
        for (int64_t r = 0; v && r < k; r++)
            free(v[r]);
        free(v);
    }
    if (!rc && !(rc = df_batch_meta_set(b, "epoch", (double)epoch)))
        rc = df_batch_meta_set(b, "step", (double)step);
    free(s);
    free(g);
    if (rc) {
        df_batch_free(b);
        return rc;
    }
    *out = b;
    return DF_OK;
}

int df_dataloader_batch_at(const df_dataloader *dl, int64_t epoch, int64_t step, df_batch **out)
{
    int64_t cap = dl->global / dl->world, k = 0;
    int64_t *idx = malloc((size_t)cap * sizeof *idx);
    if (!idx)
        return df_error(DF_ENOMEM, "dataloader: out of memory");
    int rc = df_dataloader_indices(dl, epoch, step, idx, cap, &k);
    if (!rc)
        rc = build_batch(dl, idx, k, epoch, step, out);
    free(idx);
    return rc;
}

int df_dataloader_next(df_dataloader *dl, df_batch **out)
{
    if (dl->shuffle && dl->perm_epoch != dl->epoch) {
        draw_perm(dl, dl->epoch, dl->perm);
        dl->perm_epoch = dl->epoch;
    }
    int rc = df_dataloader_batch_at(dl, dl->epoch, dl->step, out);
    if (rc)
        return rc;
    if (++dl->step == dl->steps) {
        dl->epoch++;
        dl->step = 0;
    }
    return DF_OK;
}
