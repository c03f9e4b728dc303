/* Per-rank partitioned dataloader (include/distflow/dataloader.h). */
#include "distflow/dataloader.h"

#include "distflow/rng.h"

#include <stdlib.h>
#include <string.h>

struct df_dataloader {
    const df_dataset *ds;
    int64_t *pos;     /* local position -> dataset row; NULL: the identity */
    int64_t avail;    /* rows of this rank's shard in ds */
    int64_t rows;     /* rows per rank actually used (<= avail) */
    int64_t per;      /* rows per rank per step (global batch / world) */
    int64_t steps;    /* per epoch */
    int rank, world;
    bool shuffle, drop_last;
    uint64_t seed;
    int64_t epoch, step; /* position of the next batch */
    int64_t *perm;       /* permutation of perm_epoch (shuffle only), [avail] */
    int64_t perm_epoch;
};

static int64_t steps_for(const df_dataloader *dl, int64_t rows)
{
    return dl->drop_last ? rows / dl->per : (rows + dl->per - 1) / dl->per;
}

/*
 * This rank's rows of a dataset that holds every shard: the rows whose global
 * number is rank (mod world), as the sharded load would keep them (after the
 * same filter). *min_rows: the fewest any rank gets, which every rank computes
 * alike from the same data, so they agree on the step count with no exchange.
 */
static int select_rows(df_dataloader *dl, int64_t *min_rows)
{
    int64_t n = df_dataset_size(dl->ds), w = dl->world, k = 0;
    int64_t *count = calloc((size_t)w, sizeof *count);
    if (!count)
        return df_error(DF_ENOMEM, "dataloader: out of memory");
    for (int64_t i = 0; i < n; i++)
        count[df_dataset_global_index(dl->ds, i) % w]++;
    *min_rows = count[0];
    for (int64_t r = 1; r < w; r++)
        if (count[r] < *min_rows)
            *min_rows = count[r];
    dl->avail = count[dl->rank];
    free(count);
    if (!(dl->pos = malloc((size_t)(dl->avail ? dl->avail : 1) * sizeof *dl->pos)))
        return df_error(DF_ENOMEM, "dataloader: out of memory for %lld rows", (long long)dl->avail);
    for (int64_t i = 0; i < n; i++)
        if (df_dataset_global_index(dl->ds, i) % w == dl->rank)
            dl->pos[k++] = i;
    return DF_OK;
}

/* Which rows of ds this rank reads; DF_EINVAL when ds holds another rank's shard.
 * *shard_count: ds's shard count (1: it holds every shard). */
static int choose_rows(df_dataloader *dl, int64_t *default_rows, int *shard_count)
{
    int si, sc;
    df_dataset_shard(dl->ds, &si, &sc);
    *shard_count = sc;
    if (dl->world > 1 && sc == 1)
        return select_rows(dl, default_rows);
    if (dl->world > 1 && (sc != dl->world || si != dl->rank))
        return df_error(DF_EINVAL, "dataloader: rank %d of %d cannot read dataset shard %d of %d", dl->rank,
                        dl->world, si, sc);
    dl->avail = *default_rows = df_dataset_size(dl->ds); /* its own shard, or world 1 */
    return DF_OK;
}

/* "rows give no batch" (world 1) / "rows per rank give no batch". */
static int no_batch_error(const df_dataloader *dl, int64_t rows)
{
    return df_error(DF_EINVAL, "dataloader: %lld rows%s give no batch of %lld%s", (long long)rows,
                    dl->world > 1 ? " per rank" : "", (long long)dl->per,
                    dl->drop_last ? " with drop_last" : "");
}

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
    return DF_OK;
}

int df_dataloader_create(const df_dataset *ds, int64_t global_batch_size, int rank, int world, bool shuffle,
                         uint64_t seed, bool drop_last, df_dataloader **out)
{
    int rc = check_args(ds, global_batch_size, rank, world);
    df_dataloader *dl = rc ? NULL : calloc(1, sizeof *dl);
    if (rc || !dl)
        return rc ? rc : df_error(DF_ENOMEM, "dataloader: out of memory");
    *dl = (df_dataloader){.ds = ds,
                          .per = global_batch_size / world,
                          .rank = rank,
                          .world = world,
                          .shuffle = shuffle,
                          .drop_last = drop_last,
                          .seed = seed,
                          .perm_epoch = -1};
    int64_t rows = 0;
    int sc = 1;
    if (!(rc = choose_rows(dl, &rows, &sc)) && shuffle &&
        !(dl->perm = malloc((size_t)(dl->avail ? dl->avail : 1) * sizeof *dl->perm)))
        rc = df_error(DF_ENOMEM, "dataloader: out of memory for %lld rows", (long long)dl->avail);
    dl->rows = rows;
    dl->steps = steps_for(dl, rows);
    /* a rank holding its shard cannot see the others' counts: the check
     * waits for set_rows_per_rank, which all ranks call alike and fail alike */
    if (!rc && dl->steps == 0 && (world == 1 || sc == 1))
        rc = no_batch_error(dl, rows);
    if (rc) {
        df_dataloader_free(dl);
        return rc;
    }
    *out = dl;
    return DF_OK;
}

void df_dataloader_free(df_dataloader *dl)
{
    if (!dl)
        return;
    free(dl->pos);
    free(dl->perm);
    free(dl);
}

int64_t df_dataloader_rows_available(const df_dataloader *dl)
{
    return dl->avail;
}
int64_t df_dataloader_rows_per_rank(const df_dataloader *dl)
{
    return dl->rows;
}

int df_dataloader_set_rows_per_rank(df_dataloader *dl, int64_t rows)
{
    if (rows < 0 || rows > dl->avail)
        return df_error(DF_EINVAL, "dataloader: rows per rank %lld outside [0, %lld] (rank %d's rows)",
                        (long long)rows, (long long)dl->avail, dl->rank);
    int64_t steps = steps_for(dl, rows);
    if (steps == 0)
        return no_batch_error(dl, rows);
    if (dl->step >= steps)
        return df_error(DF_EINVAL, "dataloader: position step %lld is past the %lld steps of %lld rows",
                        (long long)dl->step, (long long)steps, (long long)rows);
    dl->rows = rows;
    dl->steps = steps;
    dl->perm_epoch = -1; /* the permutation's length changed */
    return DF_OK;
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

/* The epoch's visiting order of local positions: seeded by (seed, epoch)
 * only, so every rank draws the same permutation and a resumed run draws it
 * again. With one rank this is the permutation of all rows. */
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
    int64_t lo = step * dl->per, hi = lo + dl->per < dl->rows ? lo + dl->per : dl->rows;
    if (hi - lo > cap)
        return df_error(DF_EINVAL, "dataloader: index buffer of %lld < %lld rows", (long long)cap,
                        (long long)(hi - lo));
    int64_t *perm = NULL, *tmp = NULL;
    if (dl->shuffle) {
        if (dl->perm_epoch == epoch) {
            perm = dl->perm;
        } else {
            if (!(tmp = malloc((size_t)(dl->rows ? dl->rows : 1) * sizeof *tmp)))
                return df_error(DF_ENOMEM, "dataloader: out of memory");
            draw_perm(dl, epoch, tmp);
            perm = tmp;
        }
    }
    for (int64_t k = lo; k < hi; k++) {
        int64_t p = perm ? perm[k] : k;
        idx[k - lo] = dl->pos ? dl->pos[p] : p;
    }
    *n = hi - lo;
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
    static const char *const names[] = {"data_source", "ground_truth", "raw_prompt", "extra_info"};
    const char *(*const get[])(const df_dataset *, int64_t) = {
        df_dataset_data_source, df_dataset_ground_truth, df_dataset_raw_prompt, df_dataset_extra_info};
    for (int c = 0; !rc && c < 4; c++) {
        for (int64_t r = 0; r < k; r++)
            s[r] = get[c](dl->ds, rows[r]);
        rc = df_batch_set_str(b, names[c], s);
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
    int64_t cap = dl->per, k = 0;
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
    if (dl->steps == 0)
        return df_error(DF_EINVAL, "dataloader: %lld rows per rank give no batch", (long long)dl->rows);
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
