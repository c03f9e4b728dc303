/*
 * test_dataloader.c — the dataloader's one global order and the ranks' shares.
 * One rank must reproduce the classic loader (a copy of its index logic is the
 * reference below); on W ranks the ranks' shares, in rank order, must be
 * exactly the one-rank batch of the same step (the order does not depend on
 * W), with hand-computed shares for a short last batch. The last test also
 * runs under mpiexec, each rank loading every row from files.
 * mpi-test: np 2 3 4
 */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testmpi.h"

#include "testutil.h"

#include "distflow/comm.h"
#include "distflow/dataloader.h"
#include "distflow/dataset.h"
#include "distflow/rng.h"

#define MAXB 64

/* Rows [0, n): prompt "p<g>", ground_truth "<g>", data_source "s<g % 2>", extra_info {"i": g}. */
static char *numbered_text(int n)
{
    char *text = malloc((size_t)n * 128 + 1);
    size_t at = 0;
    text[0] = '\0';
    for (int i = 0; i < n; i++)
        at += (size_t)sprintf(text + at,
                              "{\"data_source\": \"s%d\", \"prompt\": \"p%d\", \"reward_model\": "
                              "{\"ground_truth\": %d}, \"extra_info\": {\"i\": %d}}\n%s",
                              i % 2, i, i, i, i % 5 == 3 ? "\n" : "");
    return text;
}

/* Shard k of count of numbered_text(n) (count 0: every row). */
static df_dataset *numbered_shard(int n, int k, int count)
{
    char *text = numbered_text(n);
    df_dataset_opts o = {.shard_index = k, .shard_count = count};
    df_dataset *ds = NULL;
    int rc = df_dataset_load_buffer(text, strlen(text), "num", &o, &ds);
    free(text);
    if (rc)
        fail_msg("load: %s", df_last_error());
    return ds;
}

static df_dataset *numbered(int n)
{
    return numbered_shard(n, 0, 0);
}

static df_dataloader *make(const df_dataset *ds, int64_t gbs, int rank, int world, bool shuffle,
                           uint64_t seed, bool drop_last)
{
    df_dataloader *dl = NULL;
    if (df_dataloader_create(ds, gbs, rank, world, shuffle, seed, drop_last, &dl))
        fail_msg("create: %s", df_last_error());
    return dl;
}

/* Global row numbers of a loader's (epoch, step). */
static int64_t globals_at(const df_dataloader *dl, const df_dataset *ds, int64_t e, int64_t s, int64_t *g)
{
    int64_t n = -1, rows[MAXB];
    assert_int_equal(df_dataloader_indices(dl, e, s, rows, MAXB, &n), 0);
    for (int64_t k = 0; k < n; k++)
        g[k] = df_dataset_global_index(ds, rows[k]);
    return n;
}

/* ---- the loader before shards: the reference for one rank --------------------- */

static int64_t old_steps(int64_t n, int64_t gbs, bool drop_last)
{
    return drop_last ? n / gbs : (n + gbs - 1) / gbs;
}

static int64_t old_indices(int64_t n, int64_t gbs, bool shuffle, uint64_t seed, int64_t epoch, int64_t step,
                           int64_t *idx)
{
    int64_t *perm = malloc((size_t)n * sizeof *perm);
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    if (shuffle) {
        df_rng r;
        df_rng_seed(&r, df_rng_key(seed, (uint64_t)epoch, 0, 0));
        df_rng_shuffle_i64(&r, perm, n);
    }
    int64_t start = step * gbs, m = n - start < gbs ? n - start : gbs;
    for (int64_t k = 0; k < m; k++)
        idx[k] = perm[start + k];
    free(perm);
    return m;
}

static void check_like_old(const df_dataset *ds, int64_t gbs, bool shuffle, uint64_t seed, bool drop_last)
{
    int64_t n = df_dataset_size(ds), want[MAXB], got[MAXB], k = 0;
    df_dataloader *dl = NULL;
    int rc = df_dataloader_create(ds, gbs, 0, 1, shuffle, seed, drop_last, &dl);
    int64_t steps = old_steps(n, gbs, drop_last);
    if (steps == 0) {
        assert_int_equal(rc, DF_EINVAL);
        assert_null(dl);
        return;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(df_dataloader_steps_per_epoch(dl), steps);
    assert_int_equal(df_dataloader_rows(dl), n);
    for (int64_t e = 0; e < 3; e++)
        for (int64_t s = 0; s < steps; s++) {
            int64_t m = old_indices(n, gbs, shuffle, seed, e, s, want);
            assert_int_equal(df_dataloader_indices(dl, e, s, got, MAXB, &k), 0);
            assert_int_equal(k, m);
            assert_memory_equal(got, want, (size_t)m * sizeof *got);
            /* next(): the same rows, and `index` = `row` = the old index column */
            df_batch *b = NULL;
            assert_int_equal(df_dataloader_next(dl, &b), 0);
            assert_int_equal(df_batch_size(b), m);
            for (int64_t i = 0; i < m; i++) {
                assert_int_equal(df_batch_i64(b, "index")[i], want[i]);
                assert_int_equal(df_batch_i64(b, "row")[i], want[i]);
            }
            df_batch_free(b);
        }
    df_dataloader_free(dl);
}

static void test_one_rank_is_the_old_loader(void **state)
{
    (void)state;
    static const int sizes[] = {1, 7, 20, 33};
    static const int64_t batches[] = {1, 3, 4, 10, 33};
    static const uint64_t seeds[] = {0, 1, 7, 123, 42, (1ull << 40) + 5};
    for (size_t a = 0; a < 4; a++) {
        df_dataset *ds = numbered(sizes[a]);
        for (size_t b = 0; b < 5; b++)
            for (size_t c = 0; c < 6; c++)
                for (int f = 0; f < 4; f++)
                    check_like_old(ds, batches[b], f & 1, seeds[c], f & 2);
        df_dataset_free(ds);
    }
    /* data.train_max_samples: head keeps the first rows, as before */
    df_dataset *ds = numbered(30);
    assert_int_equal(df_dataset_head(ds, 17), 13);
    check_like_old(ds, 4, true, 5, true);
    check_like_old(ds, 5, true, 9, false);
    df_dataset_free(ds);
}

/* ---- W ranks --------------------------------------------------------------------- */

/* Rank r's share of a batch of len rows: [floor(r len / W), floor((r + 1) len / W)). */
static int64_t share_lo(int r, int64_t len, int world)
{
    return r * len / world;
}

/* The ranks' shares at every (epoch, step), in rank order, are the one-rank batch. */
static void check_shares(const df_dataset *ds, int64_t gbs, int world, bool shuffle, bool drop_last)
{
    df_dataloader *one = make(ds, gbs, 0, 1, shuffle, 7, drop_last), *dl[4];
    for (int r = 0; r < world; r++) {
        dl[r] = make(ds, gbs, r, world, shuffle, 7, drop_last);
        assert_int_equal(df_dataloader_steps_per_epoch(dl[r]), df_dataloader_steps_per_epoch(one));
        assert_int_equal(df_dataloader_rows(dl[r]), df_dataset_size(ds));
    }
    for (int64_t e = 0; e < 2; e++)
        for (int64_t s = 0; s < df_dataloader_steps_per_epoch(one); s++) {
            int64_t want[MAXB], got[MAXB], len = 0, at = 0, k = 0;
            assert_int_equal(df_dataloader_indices(one, e, s, want, MAXB, &len), 0);
            for (int r = 0; r < world; r++) {
                assert_int_equal(df_dataloader_indices(dl[r], e, s, got, MAXB, &k), 0);
                assert_int_equal(k, share_lo(r + 1, len, world) - share_lo(r, len, world));
                assert_in_range(k, 0, gbs / world);
                assert_memory_equal(got, want + at, (size_t)k * sizeof *got);
                at += k;
                /* next(): the batch carries the same rows, `index` their global numbers */
                df_batch *b = NULL;
                assert_int_equal(df_dataloader_next(dl[r], &b), 0);
                assert_int_equal(df_batch_size(b), k);
                for (int64_t i = 0; i < k; i++) {
                    assert_int_equal(df_batch_i64(b, "row")[i], got[i]);
                    assert_int_equal(df_batch_i64(b, "index")[i], df_dataset_global_index(ds, got[i]));
                }
                df_batch_free(b);
            }
            assert_int_equal(at, len); /* the shares cover the batch */
        }
    df_dataloader_free(one);
    for (int r = 0; r < world; r++)
        df_dataloader_free(dl[r]);
}

static void test_shares_are_the_global_batch(void **state)
{
    (void)state;
    static const struct { int n; int64_t gbs; int world; } c[] = {
        {24, 6, 2}, {24, 6, 3}, {24, 8, 4}, {25, 6, 2}, {22, 6, 3}, {31, 12, 4}, {7, 4, 4}, {33, 9, 3},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        df_dataset *ds = numbered(c[i].n);
        for (int f = 0; f < 4; f++)
            check_shares(ds, c[i].gbs, c[i].world, f & 1, f & 2);
        df_dataset_free(ds);
    }
}

/* Hand-computed: 22 rows, G = 6 on 3 ranks, unshuffled, without drop_last: steps [0,6) [6,12)
 * [12,18) [18,22); the last 4 rows split 1 / 1 / 2 (floor(r 4 / 3) = 0, 1, 2, 4). */
static void test_partial_last_step(void **state)
{
    (void)state;
    df_dataset *ds = numbered(22);
    static const int64_t last[3][2] = {{18, -1}, {19, -1}, {20, 21}};
    for (int r = 0; r < 3; r++) {
        df_dataloader *dl = make(ds, 6, r, 3, false, 0, false);
        assert_int_equal(df_dataloader_steps_per_epoch(dl), 4);
        int64_t g[MAXB];
        assert_int_equal(globals_at(dl, ds, 0, 1, g), 2);
        assert_int_equal(g[0], 6 + 2 * r); /* contiguous shares: rank r has 6 + 2r, 7 + 2r */
        assert_int_equal(g[1], 7 + 2 * r);
        assert_int_equal(globals_at(dl, ds, 0, 3, g), r == 2 ? 2 : 1);
        for (int k = 0; k < (r == 2 ? 2 : 1); k++)
            assert_int_equal(g[k], last[r][k]);
        df_dataloader_free(dl);
    }
    /* with drop_last the short batch is skipped */
    df_dataloader *dl = make(ds, 6, 1, 3, false, 0, true);
    assert_int_equal(df_dataloader_steps_per_epoch(dl), 3);
    df_dataloader_free(dl);
    df_dataset_free(ds);
}

/* Shuffled epochs: every row once per epoch, a new order each epoch and for another seed. */
static void test_shuffled_epochs(void **state)
{
    (void)state;
    enum { NR = 40, GB = 8, NW = 4 }; /* rows, global batch, ranks */
    df_dataset *ds = numbered(NR);
    df_dataloader *dl[NW], *other_seed = make(ds, GB, 1, NW, true, 12, true);
    for (int r = 0; r < NW; r++) {
        dl[r] = make(ds, GB, r, NW, true, 11, true);
        assert_int_equal(df_dataloader_steps_per_epoch(dl[r]), 5);
    }
    int64_t first[5][NW][2], g[MAXB], h[MAXB];
    int differs_epoch = 0, differs_seed = 0, unsorted = 0;
    for (int64_t e = 0; e < 3; e++) {
        int hit[NR] = {0};
        for (int64_t s = 0; s < 5; s++)
            for (int r = 0; r < NW; r++) {
                assert_int_equal(globals_at(dl[r], ds, e, s, g), 2);
                for (int k = 0; k < 2; k++) {
                    hit[g[k]]++;
                    if (e == 0)
                        first[s][r][k] = g[k];
                    else
                        differs_epoch += g[k] != first[s][r][k];
                }
                unsorted += g[0] > g[1];
                if (r == 1) {
                    globals_at(other_seed, ds, e, s, h);
                    differs_seed += memcmp(g, h, 2 * sizeof *g) != 0;
                }
            }
        for (int i = 0; i < NR; i++)
            assert_int_equal(hit[i], 1); /* an epoch reads every row once */
    }
    assert_true(differs_epoch > 0);
    assert_true(differs_seed > 0);
    assert_true(unsorted > 0); /* shuffled within the shares too, not only across them */
    for (int r = 0; r < NW; r++)
        df_dataloader_free(dl[r]);
    df_dataloader_free(other_seed);
    df_dataset_free(ds);
}

/* After a per-row filter the order is over the kept rows; `index` keeps the rows' file numbers. */
static void test_filtered(void **state)
{
    (void)state;
    df_dataset *ds = numbered(30);
    bool keep[30];
    for (int i = 0; i < 30; i++)
        keep[i] = i % 7 != 0; /* drops 0, 7, 14, 21, 28: 25 rows */
    assert_int_equal(df_dataset_filter(ds, keep), 5);
    check_shares(ds, 4, 2, true, false);
    check_shares(ds, 6, 3, false, true);
    df_dataloader *dl = make(ds, 4, 1, 2, false, 5, true);
    assert_int_equal(df_dataloader_rows(dl), 25);
    assert_int_equal(df_dataloader_steps_per_epoch(dl), 6);
    df_batch *b = NULL;
    assert_int_equal(df_dataloader_batch_at(dl, 0, 1, &b), 0); /* kept rows 4..7 of the order: 5 6 8 9 */
    assert_int_equal(df_batch_size(b), 2);
    assert_int_equal(df_batch_i64(b, "index")[0], 8);
    assert_int_equal(df_batch_i64(b, "index")[1], 9);
    assert_int_equal(df_batch_i64(b, "row")[0], 6);
    assert_string_equal(df_batch_str(b, "ground_truth", 1), "9");
    df_batch_free(b);
    df_dataloader_free(dl);
    df_dataset_free(ds);
}

static void test_batches_and_resume(void **state)
{
    (void)state;
    df_dataset *ds = numbered(21);
    df_dataloader *dl = make(ds, 4, 1, 2, true, 99, true), *again = make(ds, 4, 1, 2, true, 99, true);
    assert_int_equal(df_dataloader_steps_per_epoch(dl), 5);
    int64_t seen[12][2];
    for (int k = 0; k < 12; k++) { /* 5 steps per epoch: crosses two epoch boundaries */
        assert_int_equal(df_dataloader_epoch(dl), k / 5);
        assert_int_equal(df_dataloader_step(dl), k % 5);
        df_batch *b = NULL;
        assert_int_equal(df_dataloader_next(dl, &b), 0);
        assert_int_equal(df_batch_size(b), 2);
        assert_true(df_batch_meta_get(b, "epoch", -1) == k / 5);
        assert_true(df_batch_meta_get(b, "step", -1) == k % 5);
        for (int r = 0; r < 2; r++) {
            int64_t i = df_batch_i64(b, "index")[r];
            char want[64];
            seen[k][r] = i;
            assert_int_equal(df_batch_i64(b, "row")[r], i);
            snprintf(want, sizeof want, "s%lld", (long long)(i % 2));
            assert_string_equal(df_batch_str(b, "data_source", r), want);
            snprintf(want, sizeof want, "%lld", (long long)i);
            assert_string_equal(df_batch_str(b, "ground_truth", r), want);
            snprintf(want, sizeof want, "[{\"role\":\"user\",\"content\":\"p%lld\"}]", (long long)i);
            assert_string_equal(df_batch_str(b, "raw_prompt", r), want);
            snprintf(want, sizeof want, "{\"i\":%lld}", (long long)i);
            assert_string_equal(df_batch_str(b, "extra_info", r), want);
        }
        df_batch_free(b);
    }
    int64_t e, s;
    df_dataloader_tell(dl, &e, &s);
    assert_int_equal(e, 2);
    assert_int_equal(s, 2);
    /* resume a fresh loader at a saved position: same rows as the original run */
    assert_int_equal(df_dataloader_seek(again, 1, 3), 0);
    for (int k = 8; k < 12; k++) {
        df_batch *b = NULL;
        assert_int_equal(df_dataloader_next(again, &b), 0);
        assert_int_equal(df_batch_i64(b, "index")[0], seen[k][0]);
        assert_int_equal(df_batch_i64(b, "index")[1], seen[k][1]);
        df_batch_free(b);
    }
    /* the position resumes on another number of ranks: rank 2 of 4 reads the second half of rank 1 of 2's share */
    df_dataloader *four = make(ds, 4, 2, 4, true, 99, true);
    assert_int_equal(df_dataloader_seek(four, 1, 3), 0);
    df_batch *b4 = NULL;
    assert_int_equal(df_dataloader_next(four, &b4), 0);
    assert_int_equal(df_batch_size(b4), 1);
    assert_int_equal(df_batch_i64(b4, "index")[0], seen[8][0]);
    df_batch_free(b4);
    df_dataloader_free(four);
    assert_int_equal(df_dataloader_seek(again, 0, 5), 0); /* end of epoch 0 = start of epoch 1 */
    df_dataloader_tell(again, &e, &s);
    assert_int_equal(e, 1);
    assert_int_equal(s, 0);
    assert_int_equal(df_dataloader_seek(again, 0, 6), DF_EINVAL);
    assert_int_equal(df_dataloader_seek(again, -1, 0), DF_EINVAL);
    df_batch *b = NULL;
    assert_int_equal(df_dataloader_batch_at(again, 1, 2, &b), 0); /* batch_at does not move */
    assert_int_equal(df_batch_i64(b, "index")[0], seen[7][0]);
    df_batch_free(b);
    df_dataloader_tell(again, &e, &s);
    assert_int_equal(e * 10 + s, 10);
    df_dataloader_free(again);
    df_dataloader_free(dl);
    df_dataset_free(ds);
}

/* df_dataloader_add_column: a field of every row as a batch column (verl's data.reward_fn_key). */
static void test_extra_column(void **state)
{
    (void)state;
    df_dataset *ds = numbered(9);
    df_dataloader *dl = make(ds, 4, 1, 2, true, 3, true);
    assert_int_equal(df_dataloader_add_column(dl, "extra_info.i"), 0);
    df_batch *b = NULL;
    assert_int_equal(df_dataloader_next(dl, &b), 0);
    for (int64_t r = 0; r < df_batch_size(b); r++) {
        char want[32];
        snprintf(want, sizeof want, "%lld", (long long)df_batch_i64(b, "index")[r]);
        assert_string_equal(df_batch_str(b, "extra_info.i", r), want);
    }
    df_batch_free(b);
    assert_error_mentions(df_dataloader_add_column(dl, "data_source"), DF_EINVAL, "a column of every batch already");
    assert_error_mentions(df_dataloader_add_column(dl, "ability"), DF_ENOTFOUND, "num:1");
    assert_int_equal(df_dataloader_add_column(dl, ""), DF_EINVAL);
    const char *more[] = {"prompt", "reward_model.ground_truth", "reward_model"};
    for (int k = 0; k < 3; k++)
        assert_int_equal(df_dataloader_add_column(dl, more[k]), 0);
    assert_int_equal(df_dataloader_add_column(dl, "prompt"), 0); /* again: nothing added */
    assert_error_mentions(df_dataloader_add_column(dl, "no_such_key"), DF_EINVAL, "more than 4 extra columns");
    assert_int_equal(df_dataloader_next(dl, &b), 0); /* one column per key */
    assert_non_null(strstr(df_batch_str(b, "reward_model", 0), "ground_truth"));
    df_batch_free(b);
    df_dataloader_free(dl);
    df_dataset_free(ds);
}

static void test_errors(void **state)
{
    (void)state;
    df_dataset *ds = numbered(10);
    df_dataloader *dl = NULL;
    int64_t x[MAXB], n;
    dl = make(ds, 4, 0, 1, true, 1, true);
    assert_int_equal(df_dataloader_steps_per_epoch(dl), 2);
    assert_int_equal(df_dataloader_indices(dl, 0, 2, x, MAXB, &n), DF_EINVAL);
    assert_int_equal(df_dataloader_indices(dl, -1, 0, x, MAXB, &n), DF_EINVAL);
    assert_int_equal(df_dataloader_indices(dl, 0, 0, x, 3, &n), DF_EINVAL); /* buffer too small */
    assert_non_null(strstr(df_last_error(), "index buffer"));
    df_dataloader_free(dl);

    dl = NULL;
    assert_int_equal(df_dataloader_create(ds, 6, 0, 4, false, 0, true, &dl), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "not divisible"));
    assert_int_equal(df_dataloader_create(ds, 4, 2, 2, false, 0, true, &dl), DF_EINVAL);
    assert_int_equal(df_dataloader_create(ds, 4, -1, 2, false, 0, true, &dl), DF_EINVAL);
    assert_int_equal(df_dataloader_create(ds, 0, 0, 1, false, 0, true, &dl), DF_EINVAL);
    assert_int_equal(df_dataloader_create(NULL, 4, 0, 1, false, 0, true, &dl), DF_EINVAL);
    assert_int_equal(df_dataloader_create(ds, 12, 0, 1, false, 0, true, &dl), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "10 rows give no batch of 12 with drop_last"));
    assert_int_equal(df_dataloader_create(ds, 12, 1, 2, false, 0, true, &dl), DF_EINVAL);
    assert_null(dl);
    dl = make(ds, 12, 0, 1, false, 0, false);
    assert_int_equal(df_dataloader_steps_per_epoch(dl), 1);
    df_dataloader_free(dl);

    /* ranks need every row; one rank reads any dataset whole */
    df_dataset *sh = numbered_shard(10, 1, 3); /* rows 1, 4, 7 */
    assert_int_equal(df_dataloader_create(sh, 3, 1, 3, false, 0, true, &dl), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "the dataset holds shard 1 of 3; a loader reads every row"));
    dl = make(sh, 3, 0, 1, false, 0, true);
    assert_int_equal(globals_at(dl, sh, 0, 0, x), 3);
    assert_int_equal(x[2], 7);
    df_dataloader_free(dl);
    df_dataset_free(sh);
    df_dataset *none = numbered(0);
    assert_int_equal(df_dataloader_create(none, 2, 0, 1, false, 0, false, &dl), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "0 rows give no batch of 2"));
    df_dataset_free(none);
    df_dataset_free(ds);
}

/* ---- real ranks (mpiexec) ------------------------------------------------------------ */


#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (!(cond) && !bad++)                                                                               \
            snprintf(why, sizeof why, "rank %d: %s (line %d)", R, #cond, __LINE__);                          \
    } while (0)

/*
 * Every rank loads every row of three files and gathers each step's shares:
 * in rank order they must be the one-process batch (unshuffled: the global
 * rows [s G, (s + 1) G)). Failures are counted and agreed on before
 * asserting, so no rank is left in a collective.
 */
static void test_mpi_ranks(void **state)
{
    assert_in_range(N, 1, 4); /* the buffers below; every rank fails alike */
    const char *dir = *state;
    enum { ROWS = 53 };
    char *text = numbered_text(ROWS), paths[3][256];
    const char *pp[3];
    const size_t cut[4] = {0, strlen(text) / 3, 2 * strlen(text) / 3, strlen(text)};
    for (int f = 0; f < 3; f++) { /* split at line ends: three files, rows numbered across them */
        size_t a = cut[f], b = cut[f + 1];
        while (f > 0 && a < cut[3] && text[a - 1] != '\n')
            a++;
        while (f < 2 && b < cut[3] && text[b - 1] != '\n')
            b++;
        snprintf(paths[f], sizeof paths[f], "%s/part%d.jsonl", dir, f);
        FILE *fp = fopen(paths[f], "wb");
        assert_non_null(fp);
        fwrite(text + a, 1, b - a, fp);
        fclose(fp);
        pp[f] = paths[f];
    }
    int bad = 0;
    char why[256] = "";
    df_dataset *ds = NULL, *all = numbered(ROWS);
    CHECK(df_dataset_load(pp, 3, NULL, &ds) == 0);
    int64_t per = 2, gbs = per * N;
    for (int shuffle = 0; shuffle < 2 && ds; shuffle++) {
        df_dataloader *dl = make(ds, gbs, R, N, shuffle, 17, true), *ref = make(all, gbs, 0, 1, shuffle, 17, true);
        int64_t steps = df_dataloader_steps_per_epoch(dl);
        CHECK(steps == ROWS / gbs);
        for (int64_t e = 0; e < 2; e++)
            for (int64_t s = 0; s < steps; s++) {
                df_batch *b = NULL;
                int64_t mine[2] = {-1, -1}, got[8], want[8];
                if (df_dataloader_next(dl, &b) == 0 && df_batch_size(b) == per)
                    memcpy(mine, df_batch_i64(b, "index"), sizeof mine);
                df_batch_free(b);
                assert_int_equal(df_comm_allgather(W, mine, sizeof mine, got), 0);
                CHECK(globals_at(ref, all, e, s, want) == gbs);
                for (int64_t k = 0; k < gbs; k++)
                    CHECK(got[k] == want[k] && (shuffle || got[k] == s * gbs + k));
            }
        df_dataloader_free(ref);
        df_dataloader_free(dl);
    }
    df_dataset_free(ds);
    df_dataset_free(all);
    free(text);
    int64_t any = bad;
    assert_int_equal(df_comm_allreduce(W, &any, 1, DF_COMM_INT64, DF_COMM_MAX), 0);
    if (bad)
        fail_msg("%s", why);
    if (any)
        fail_msg("another rank failed");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_rank_is_the_old_loader),
        cmocka_unit_test(test_shares_are_the_global_batch),
        cmocka_unit_test(test_partial_last_step),
        cmocka_unit_test(test_shuffled_epochs),
        cmocka_unit_test(test_filtered),
        cmocka_unit_test(test_batches_and_resume),
        cmocka_unit_test(test_extra_column),
        cmocka_unit_test(test_errors),
        cmocka_unit_test_setup_teardown(test_mpi_ranks, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, df_test_world_setup, df_test_world_teardown);
}
