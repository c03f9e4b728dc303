/* Per-rank partitioned dataloader (include/distflow/dataloader.h). */
#include "distflow/dataloader.h"

#include "distflow/rng.h"

#include <stdlib.h>
#include <string.h>

struct df_dataloader {
    const df_dataset *ds;
    int64_t n, gbs, steps;
    int rank, world;
    bool shuffle, drop_last;
    uint64_t seed;
    int64_t epoch, step; /* position of the next batch */
    int64_t *perm;       /* permutation of perm_epoch (shuffle only) */
    int64_t perm_epoch;
};

int df_dataloader_create(const df_dataset *ds, int64_t global_batch_size, int rank, int world,
                         bool shuffle, uint64_t seed, bool drop_last, df_dataloader **out)
{
    if (!ds)
        return df_error(DF_EINVAL, "dataloader: no dataset");
    if (global_batch_size < 1)
        return df_error(DF_EINVAL, "dataloader: global batch size %lld < 1",
                        (long long)global_batch_size);
    if (world < 1 || rank < 0 || rank >= world)
        return df_error(DF_EINVAL, "dataloader: rank %d outside world of %d", rank, world);
    if (global_batch_size % world)
        return df_error(DF_EINVAL,
                        "dataloader: global batch size %lld is not divisible by the %d data-parallel ranks",
                        (long long)global_batch_size, world);
    int64_t n = df_dataset_size(ds);
    int64_t steps = drop_last ? n / global_batch_size : (n + global_batch_size - 1) / global_batch_size;
    if (steps == 0)
        return df_error(DF_EINVAL, "dataloader: %lld rows give no batch of %lld%s", (long long)n,
                        (long long)global_batch_size, drop_last ? " with drop_last" : "");
    df_dataloader *dl = calloc(1, sizeof *dl);
    if (!dl || (shuffle && !(dl->perm = malloc((size_t)n * sizeof *dl->perm)))) {
        free(dl);
        return df_error(DF_ENOMEM, "dataloader: out of memory for %lld rows", (long long)n);
    }
    dl->ds = ds;
    dl->n = n;
    dl->gbs = global_batch_size;
    dl->steps = steps;
    dl->rank = rank;
    dl->world = world;
    dl->shuffle = shuffle;
    dl->drop_last = drop_last;
    dl->seed = seed;
    dl->perm_epoch = -1;
    *out = dl;
    return DF_OK;
}

void df_dataloader_free(df_dataloader *dl)
{
    if (!dl)
        return;
    free(dl->perm);
    free(dl);
}

int64_t df_dataloader_steps_per_epoch(const df_dataloader *dl) { return dl->steps; }
int64_t df_dataloader_epoch(const df_dataloader *dl) { return dl->epoch; }
int64_t df_dataloader_step(const df_dataloader *dl) { return dl->step; }

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

/* The epoch's visiting order: seeded by (seed, epoch) only, so every rank
 * draws the same permutation and a resumed run draws it again. */
static void draw_perm(const df_dataloader *dl, int64_t epoch, int64_t *perm)
{
    for (int64_t i = 0; i < dl->n; i++)
        perm[i] = i;
    df_rng r;
    df_rng_seed(&r, df_rng_key(dl->seed, (uint64_t)epoch, 0, 0));
    df_rng_shuffle_i64(&r, perm, dl->n);
}

/* This rank's [lo, hi) positions within the epoch's order at `step`. */
static void share(const df_dataloader *dl, int64_t step, int64_t *lo, int64_t *hi)
{
    int64_t start = step * dl->gbs;
    int64_t m = dl->n - start < dl->gbs ? dl->n - start : dl->gbs;
    *lo = start + (int64_t)dl->rank * m / dl->world;
    *hi = start + (int64_t)(dl->rank + 1) * m / dl->world;
}

int df_dataloader_indices(const df_dataloader *dl, int64_t epoch, int64_t step, int64_t *idx,
                          int64_t cap, int64_t *n)
{
    if (epoch < 0 || step < 0 || step >= dl->steps)
        return df_error(DF_EINVAL, "dataloader: no batch at epoch %lld step %lld (%lld steps per epoch)",
                        (long long)epoch, (long long)step, (long long)dl->steps);
    int64_t lo, hi;
    share(dl, step, &lo, &hi);
    if (hi - lo > cap)
        return df_error(DF_EINVAL, "dataloader: index buffer of %lld < %lld rows", (long long)cap,
                        (long long)(hi - lo));
    int64_t *perm = NULL, *tmp = NULL;
    if (dl->shuffle) {
        if (dl->perm_epoch == epoch) {
            perm = dl->perm;
        } else {
            if (!(tmp = malloc((size_t)dl->n * sizeof *tmp)))
                return df_error(DF_ENOMEM, "dataloader: out of memory");
            draw_perm(dl, epoch, tmp);
            perm = tmp;
        }
    }
    for (int64_t k = lo; k < hi; k++)
        idx[k - lo] = perm ? perm[k] : k;
    *n = hi - lo;
    free(tmp);
    return DF_OK;
}

static int build_batch(const df_dataloader *dl, const int64_t *idx, int64_t k, int64_t epoch,
                       int64_t step, df_batch **out)
{
    df_batch *b = df_batch_new(k);
    const char **s = malloc((size_t)(k ? k : 1) * sizeof *s);
    int rc = (!b || !s) ? df_error(DF_ENOMEM, "dataloader: out of memory") : DF_OK;
    if (!rc)
        rc = df_batch_set_i64(b, "index", idx);
    static const char *const names[] = {"data_source", "ground_truth", "raw_prompt", "extra_info"};
    const char *(*const get[])(const df_dataset *, int64_t) = {
        df_dataset_data_source, df_dataset_ground_truth, df_dataset_raw_prompt,
        df_dataset_extra_info};
    for (int c = 0; !rc && c < 4; c++) {
        for (int64_t r = 0; r < k; r++)
            s[r] = get[c](dl->ds, idx[r]);
        rc = df_batch_set_str(b, names[c], s);
    }
    if (!rc && !(rc = df_batch_meta_set(b, "epoch", (double)epoch)))
        rc = df_batch_meta_set(b, "step", (double)step);
    free(s);
    if (rc) {
        df_batch_free(b);
        return rc;
    }
    *out = b;
    return DF_OK;
}

int df_dataloader_batch_at(const df_dataloader *dl, int64_t epoch, int64_t step, df_batch **out)
{
    int64_t cap = dl->gbs / dl->world, k = 0;
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
