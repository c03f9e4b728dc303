/*
 * test_zero_shard.c — ZeRO-1 (src/engine/train_shard.c): AdamW's moments spread over the
 * data-parallel ranks. Every rank trains two DP actors from the same weights on its shard of one
 * batch, one with sharded moments and one with whole ones. Each element's update is the same IEEE
 * operations on the same all-reduced gradient in both, so the weights and the moments must agree
 * bit for bit: a slice stepped at the wrong offset, a slice's new weights not broadcast or taken
 * from the wrong owner all change bits. Then the sharded state streams to rank 0, which saves it
 * (one message a slice, and 1000-float pieces), and a lone actor (a resume on another number of
 * ranks) and a sharded one load it: bit for bit again, and one more step still matches.
 * mpi-test: np 2 3
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testmpi.h"

#include "engine/actor.h"
#include "engine/train_core.h"
#include "testutil.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int group_setup(void **state)
{
    omp_set_num_threads(1);
    return df_test_world_setup(state);
}

/* Slice bounds by hand: r n / k rounded up to a multiple of 16, the last slice ending at n. */
static void test_shard_range(void **state)
{
    (void)state;
    int64_t lo, hi;
    const int64_t want3[4] = {0, 48, 80, 100}; /* n = 100: 33.3 -> 48, 66.7 -> 80 */
    for (int r = 0; r < 3; r++) {
        df_train_core_shard_range(100, r, 3, &lo, &hi);
        assert_int_equal(lo, want3[r]);
        assert_int_equal(hi, want3[r + 1]);
    }
    const int64_t want4[5] = {0, 256, 512, 752, 1000}; /* n = 1000: 250, 500, 750 */
    for (int r = 0; r < 4; r++) {
        df_train_core_shard_range(1000, r, 4, &lo, &hi);
        assert_int_equal(lo, want4[r]);
        assert_int_equal(hi, want4[r + 1]);
    }
    /* n = 3e10 over 7 ranks: n r stays within int64 (the bound divides first) */
    df_train_core_shard_range(30000000000, 6, 7, &lo, &hi);
    assert_int_equal(lo, 25714285728);
    assert_int_equal(hi, 30000000000);
    /* every n >= 32 k: ascending, 16-aligned inner bounds, none empty, [0, n) in all */
    for (int k = 2; k <= 9; k++)
        for (int64_t n = 32 * k; n < 32 * k + 200; n++) {
            int64_t prev = 0;
            for (int r = 0; r < k; r++) {
                df_train_core_shard_range(n, r, k, &lo, &hi);
                assert_int_equal(lo, prev);
                assert_true(hi > lo);
                assert_true(r == k - 1 ? hi == n : hi % 16 == 0);
                prev = hi;
            }
        }
}

static df_actor_params params(bool shard)
{
    df_actor_params p = {.optim.lr = 0.05,
                         .optim.beta1 = 0.9,
                         .optim.beta2 = 0.999,
                         .optim.adam_eps = 1e-8,
                         .optim.weight_decay = 0.01,
                         .optim.grad_clip = 1.0,
                         .optim.shard_optim = shard,
                         .micro_batch_size = 2,
                         .logprob_micro_batch_size = 2,
                         .loss.loss_agg_mode = "token-mean",
                         .temperature = 1.0f};
    return p;
}

/* This rank's shard of one global batch: 3 rows a rank. */
static df_batch *shard_batch(void)
{
    int count[64] = {0};
    int64_t bounds[64], *mine, n_mine;
    int n_mini;
    for (int r = 0; r < N; r++)
        count[r] = 3;
    df_test_dp_layout(count, 100, &mine, &n_mine, bounds, &n_mini);
    df_batch *global = df_test_synth_batch(5, 3 * N), *shard;
    assert_int_equal(df_batch_select(global, mine, n_mine, &shard), 0);
    df_batch_free(global);
    free(mine);
    return shard;
}

static df_actor *make(bool shard, bool dp)
{
    df_actor *a;
    df_actor_params p = params(shard);
    assert_int_equal(df_actor_create(df_test_micro_model(11), &p, true, &a), 0);
    df_actor_set_comm(a, dp ? W : NULL);
    return a;
}

static void steps(df_actor *a, df_batch *b, int n)
{
    for (int i = 0; i < n; i++) {
        df_metrics *m = df_metrics_new();
        assert_int_equal(df_test_all_max(df_actor_sft_step(a, b, m)), 0);
        df_metrics_free(m);
    }
}

/* A sharded and a replicated DP actor from the same weights, n steps each on this rank's shard *b. */
static void train_pair(int n, df_batch **b, df_actor **sh, df_actor **rep)
{
    *b = shard_batch();
    *sh = make(true, true), *rep = make(false, true);
    steps(*sh, *b, n);
    steps(*rep, *b, n);
}

/* Whether n floats agree bit for bit, on every rank. */
static bool same_everywhere(const float *x, const float *y, int64_t n)
{
    return df_test_all_max(memcmp(x, y, (size_t)n * sizeof(float)) != 0) == 0;
}

/* The sharded core holds exactly its slice, and its weights and moments are the replicated run's. */
static void assert_matches(df_actor *sh, df_actor *rep)
{
    df_train_core *s = df_actor_core(sh), *r = df_actor_core(rep);
    const int64_t n = s->model->n_params;
    int64_t lo = 0, hi = n;
    if (N > 1)
        df_train_core_shard_range(n, R, N, &lo, &hi);
    assert_ptr_equal(s->shard, N > 1 ? W : NULL);
    assert_null(r->shard);
    assert_int_equal(s->shard_lo, lo);
    assert_int_equal(s->opt->n, hi - lo);
    assert_int_equal(s->opt->step, r->opt->step);
    assert_true(same_everywhere(s->model->params, r->model->params, n));
    assert_true(same_everywhere(s->opt->m, r->opt->m + lo, hi - lo));
    assert_true(same_everywhere(s->opt->v, r->opt->v + lo, hi - lo));
}

static void test_equals_replicated(void **state)
{
    (void)state;
    df_batch *b;
    df_actor *sh, *rep;
    train_pair(3, &b, &sh, &rep);
    assert_matches(sh, rep);
    /* and the weights moved: a no-op step would match too */
    df_model *init = df_test_micro_model(11);
    const df_model *m = df_actor_model(sh);
    assert_true(memcmp(init->params, m->params, (size_t)m->n_params * sizeof(float)) != 0);
    df_model_free(init);
    df_actor_free(sh);
    df_actor_free(rep);
    df_batch_free(b);
}

/* Rank 0's temporary directory, the same path on every rank (one machine under mpiexec). */
static void shared_dir(char dir[64])
{
    memset(dir, 0, 64);
    if (R == 0) {
        snprintf(dir, 64, "/tmp/df_zero_XXXXXX");
        assert_non_null(mkdtemp(dir));
    }
    assert_int_equal(df_comm_broadcast(W, dir, 64, 0), 0);
}

/* Stream sh's state to rank 0, which saves it at path; `piece` floats a message (0: the default,
   one message a slice here). */
static void stream_save(df_actor *sh, const char *path, int64_t piece)
{
    df_train_core *s = df_actor_core(sh);
    s->stream_piece = piece;
    assert_int_equal(df_actor_gather_begin(sh, R == 0), DF_OK);
    assert_true(N > 1 ? s->gather != NULL : s->gather == NULL);
    int rc = R == 0 ? df_actor_save_state(sh, path) : DF_OK;
    assert_int_equal(df_actor_gather_end(sh), DF_OK);
    assert_null(s->gather);
    assert_int_equal(df_test_all_max(rc), 0);
}

static void test_gather_save_load(void **state)
{
    (void)state;
    df_batch *b;
    df_actor *sh, *rep;
    train_pair(2, &b, &sh, &rep);
    char dir[64], path[2][96];
    shared_dir(dir);
    snprintf(path[0], sizeof path[0], "%s/whole.safetensors", dir);
    snprintf(path[1], sizeof path[1], "%s/pieces.safetensors", dir);
    if (N > 1 && R == 0) /* sharded moments are saved only as the group streams them */
        assert_int_equal(df_actor_save_state(sh, path[0]), DF_EINVAL);
    /* saver false on rank 0: no stream */
    assert_int_equal(df_actor_gather_begin(sh, false), DF_OK);
    assert_null(df_actor_core(sh)->gather);
    assert_int_equal(df_actor_gather_end(sh), DF_OK);
    stream_save(sh, path[0], 0);
    /* several messages a slice, across the 16-float bounds */
    stream_save(sh, path[1], 1000);

    /* a lone actor (another number of ranks) loads the whole moments: the replicated run's */
    const df_train_core *r = df_actor_core(rep);
    for (int f = 0; f < 2; f++) {
        df_actor *lone = make(true, false);
        assert_int_equal(df_test_all_max(df_actor_load_state(lone, path[f])), 0);
        const df_train_core *l = df_actor_core(lone);
        const int64_t n = l->model->n_params;
        assert_int_equal(l->opt->n, n);
        assert_true(same_everywhere(l->opt->m, r->opt->m, n));
        assert_true(same_everywhere(l->opt->v, r->opt->v, n));
        assert_true(same_everywhere(l->model->params, r->model->params, n));
        df_actor_free(lone);
    }

    /* a sharded DP actor loads its slices, and goes on as the replicated run does */
    df_actor *again = make(true, true);
    assert_int_equal(df_test_all_max(df_actor_load_state(again, path[1])), 0);
    assert_matches(again, rep);
    steps(again, b, 1);
    steps(rep, b, 1);
    assert_matches(again, rep);

    assert_int_equal(df_comm_barrier(W), 0);
    if (R == 0)
        df_test_remove_tree(dir);
    df_actor_free(again);
    df_actor_free(sh);
    df_actor_free(rep);
    df_batch_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_range),
        cmocka_unit_test(test_equals_replicated),
        cmocka_unit_test(test_gather_save_load),
    };
    return cmocka_run_group_tests(tests, group_setup, df_test_world_teardown);
}
