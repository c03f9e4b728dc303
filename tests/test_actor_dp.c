/*
 * test_actor_dp.c — the data-parallel actor. Every rank builds the same global
 * batch, takes its shard and trains a DP actor on it; every rank also trains a
 * lone actor (no comm) on the whole batch from the same weights. The weights and
 * metrics must match (up to float summation order), and the parameter checksums
 * must agree across ranks. Runs as one rank (plain ctest) and under mpiexec:
 * mpi-test: np 2 3
 * Results that differ per rank are reduced (max over ranks) before asserting, so
 * every rank passes or fails together instead of leaving the others waiting.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testmpi.h"

#include "distflow/comm.h"
#include "distflow/rng.h"
#include "engine/actor.h"
#include "testutil.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Weights of the DP actor and the lone actor differ by float summation order only:
   measured max |diff| ~1e-7 (weights ~0.02-1, each step moves them ~1e-2); wrong
   normalisation or a missing all-reduce gives ~1e-2. */
#define WEIGHT_TOL 1e-4
#define METRIC_RTOL 1e-4

static int group_setup(void **state)
{
    omp_set_num_threads(1); /* a tiny model gains nothing from threads on a shared machine */
    return df_test_world_setup(state);
}

/* A world of more than one rank is MPI's (its size is checked by df_test_world_setup). */
static void test_world(void **state)
{
    (void)state;
    if (N > 1)
        assert_int_equal(df_comm_backend_of(W), DF_COMM_MPI);
}

static df_actor_params params(const char *agg, int64_t mini, int64_t micro)
{
    df_actor_params p = {.optim.lr = 1e-2,
                         .optim.beta1 = 0.9,
                         .optim.beta2 = 0.999,
                         .optim.adam_eps = 1e-8,
                         .optim.weight_decay = 0.01,
                         .optim.grad_clip = 1.0,
                         .mini_batch_size = mini,
                         .micro_batch_size = micro,
                         .logprob_micro_batch_size = micro,
                         .loss.ppo_epochs = 1,
                         .loss.policy_loss = "vanilla",
                         .loss.loss_agg_mode = agg,
                         .loss.clip_ratio_low = 0.2,
                         .loss.clip_ratio_high = 0.28,
                         .loss.clip_ratio_c = 3.0,
                         .loss.entropy_coeff = 0.01,
                         .use_kl_loss = true,
                         .loss.kl_loss_coef = 0.1,
                         .loss.kl_loss_type = "low_var_kl",
                         .temperature = 0.8f};
    return p;
}

/* old_log_probs = the model's log-probs + noise (so some ratios clip), ref, advantages. */
static void add_ppo_columns(df_batch *b, uint64_t seed)
{
    df_actor *a;
    df_actor_params p = params("token-mean", 0, 4);
    assert_int_equal(df_actor_create(df_test_micro_model(11), &p, false, &a), 0);
    assert_int_equal(df_actor_compute_log_prob(a, b, "old_log_probs", NULL), 0);
    df_actor_free(a);
    float *old = df_batch_data_mut(b, "old_log_probs"), *ref, *adv;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "ref_log_prob", "response_ids", &ref), 0);
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "advantages", "response_ids", &adv), 0);
    df_rng rng;
    df_rng_seed(&rng, df_rng_key(seed, 7, 0, 0));
    int64_t T = df_batch_offsets(b, "response_ids")[df_batch_size(b)];
    for (int64_t t = 0; t < T; t++) {
        old[t] += (float)(0.6 * df_rng_uniform(&rng) - 0.3);
        ref[t] = old[t] + (float)(0.4 * df_rng_uniform(&rng) - 0.2);
        adv[t] = (float)(2 * df_rng_uniform(&rng) - 1);
    }
}


/* Every rank's checksum of m is the same. */
static void assert_same_checksum(const df_model *m)
{
    uint64_t mine, *all = malloc((size_t)N * sizeof *all);
    assert_int_equal(df_model_param_checksum(m, &mine), 0);
    assert_int_equal(df_comm_allgather(W, &mine, sizeof mine, all), 0);
    for (int r = 0; r < N; r++)
        assert_true(all[r] == all[0]);
    free(all);
}

/* DP metric equals the lone actor's (relative), and is the same on every rank. */
static double check_metric(const df_metrics *dp, const df_metrics *ref, const char *key)
{
    double x = df_metrics_get(dp, key, NAN), y = df_metrics_get(ref, key, NAN);
    assert_true(isfinite(x) && isfinite(y));
    assert_true(df_test_all_max(x) == df_test_all_min(x));
    double rel = fabs(x - y) / fmax(fabs(y), 1e-3);
    if (df_test_all_max(rel) > METRIC_RTOL)
        fail_msg("%s: DP %.9g vs whole batch %.9g (rank %d)", key, x, y, R);
    return rel;
}

typedef struct scenario {
    const char *agg;
    int count[4]; /* rows per rank, by rank % 4 */
    int64_t mbs;  /* local mini-batch size */
    int epochs, updates;
} scenario;

/* Train DP on the shard and alone on the whole batch; compare after each update. */
static void run_ppo(const scenario *sc)
{
    int count[64] = {0};
    int64_t bounds[64], *mine, n_mine, G = 0;
    int n_mini;
    for (int r = 0; r < N; r++)
        G += count[r] = sc->count[r % 4];
    df_test_dp_layout(count, sc->mbs, &mine, &n_mine, bounds, &n_mini);
    df_batch *global = df_test_synth_batch(42, G), *shard;
    add_ppo_columns(global, 42);
    assert_int_equal(df_batch_select(global, mine, n_mine, &shard), 0);

    df_actor *dp, *alone;
    df_actor_params pd = params(sc->agg, sc->mbs, 2), pa = params(sc->agg, 0, 3);
    pd.loss.ppo_epochs = sc->epochs;
    assert_int_equal(df_actor_create(df_test_micro_model(11), &pd, true, &dp), 0);
    assert_int_equal(df_actor_create(df_test_micro_model(11), &pa, true, &alone), 0);
    df_actor_set_comm(dp, W);

    /* the entropy mean of the shards is the whole batch's */
    double ent_dp, ent_all;
    assert_int_equal(df_actor_compute_log_prob(dp, shard, "lp", &ent_dp), 0);
    assert_int_equal(df_actor_compute_log_prob(alone, global, "lp", &ent_all), 0);
    assert_true(df_test_all_max(fabs(ent_dp - ent_all)) < 1e-6 && ent_all > 1.0);

    df_model *init = df_test_micro_model(11);
    double worst_w = 0, worst_m = 0;
    for (int u = 0; u < sc->updates; u++) {
        df_metrics *md = df_metrics_new(), *ma = df_metrics_new();
        assert_int_equal(df_test_all_max(df_actor_update_policy(dp, shard, md)), 0);
        for (int ep = 0; ep < sc->epochs; ep++)
            for (int k = 0; k < n_mini; k++) { /* one optimizer step per global mini-batch */
                df_batch *mb;
                assert_int_equal(df_batch_slice(global, bounds[k], bounds[k + 1], &mb), 0);
                assert_int_equal(df_actor_update_policy(alone, mb, ma), 0);
                df_batch_free(mb);
            }
        const char *keys[] = {
            "actor/pg_loss",           "actor/kl_loss", "actor/entropy_loss", "actor/pg_clipfrac",
            "actor/pg_clipfrac_lower", "actor/ppo_kl",  "actor/grad_norm",    "actor/lr"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            worst_m = fmax(worst_m, check_metric(md, ma, keys[i]));
        double d = df_test_all_max(df_test_max_param_diff(df_actor_model(dp), df_actor_model(alone)));
        worst_w = fmax(worst_w, d);
        if (d > WEIGHT_TOL)
            fail_msg("update %d: DP weights differ from the whole-batch update by %.3g", u, d);
        assert_same_checksum(df_actor_model(dp));
        df_metrics_free(md);
        df_metrics_free(ma);
    }
    /* the updates did something, and clipping was exercised */
    assert_true(df_test_all_min(df_test_max_param_diff(df_actor_model(dp), init)) > 1e-2);
    if (R == 0)
        print_message("[ %s, %d ranks ] max |w_dp - w_whole| %.3g, max metric rel diff %.3g\n", sc->agg, N,
                      worst_w, worst_m);
    df_model_free(init);
    df_actor_free(dp);
    df_actor_free(alone);
    df_batch_free(shard);
    df_batch_free(global);
    free(mine);
}

static void test_ppo_equal_token_mean(void **state)
{
    (void)state;
    scenario sc = {"token-mean", {6, 6, 6, 6}, 3, 2, 3};
    run_ppo(&sc);
}

static void test_ppo_equal_seq_mean(void **state)
{
    (void)state;
    scenario sc = {"seq-mean-token-mean", {6, 6, 6, 6}, 3, 2, 3};
    run_ppo(&sc);
}

/* Rank 0 has 3 mini-batches, rank 1 one, rank 2 none: later steps run on rank 0's
   rows alone while the others join with zero gradients. */
static void test_ppo_unequal_token_mean(void **state)
{
    (void)state;
    scenario sc = {"token-mean", {5, 1, 0, 3}, 2, 1, 2};
    run_ppo(&sc);
}

static void test_ppo_unequal_seq_mean(void **state)
{
    (void)state;
    scenario sc = {"seq-mean-token-mean", {5, 1, 0, 3}, 2, 1, 2};
    run_ppo(&sc);
}

/* Negative control: each rank updating on its shard alone (no all-reduce) ends far
   outside WEIGHT_TOL of the whole-batch update, so the tolerance can tell. */
static void test_without_allreduce_differs(void **state)
{
    (void)state;
    if (N == 1)
        skip();
    int count[64] = {0};
    int64_t bounds[64], *mine, n_mine, G = 0;
    int n_mini;
    for (int r = 0; r < N; r++)
        G += count[r] = 6;
    df_test_dp_layout(count, 6, &mine, &n_mine, bounds, &n_mini);
    df_batch *global = df_test_synth_batch(42, G), *shard;
    add_ppo_columns(global, 42);
    assert_int_equal(df_batch_select(global, mine, n_mine, &shard), 0);
    df_actor *local, *alone;
    df_actor_params p = params("token-mean", 0, 3);
    assert_int_equal(df_actor_create(df_test_micro_model(11), &p, true, &local), 0);
    assert_int_equal(df_actor_create(df_test_micro_model(11), &p, true, &alone), 0);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_actor_update_policy(local, shard, m), 0);
    assert_int_equal(df_actor_update_policy(alone, global, m), 0);
    double d = df_test_all_min(df_test_max_param_diff(df_actor_model(local), df_actor_model(alone)));
    if (R == 0)
        print_message("[ no all-reduce ] max |w_local - w_whole| %.3g\n", d);
    assert_true(d > 100 * WEIGHT_TOL);
    df_metrics_free(m);
    df_actor_free(local);
    df_actor_free(alone);
    df_batch_free(shard);
    df_batch_free(global);
    free(mine);
}

static void test_sft(void **state)
{
    (void)state;
    int count[64] = {0}, per[4] = {4, 2, 0, 3};
    int64_t bounds[64], *mine, n_mine, G = 0;
    int n_mini;
    for (int r = 0; r < N; r++)
        G += count[r] = per[r % 4];
    df_test_dp_layout(count, 100, &mine, &n_mine, bounds, &n_mini);
    df_batch *global = df_test_synth_batch(5, G), *shard;
    assert_int_equal(df_batch_select(global, mine, n_mine, &shard), 0);
    df_actor *dp, *alone;
    df_actor_params pd = params("token-mean", 0, 1), pa = params("token-mean", 0, 3);
    pd.optim.lr = pa.optim.lr = 3e-2;
    assert_int_equal(df_actor_create(df_test_micro_model(11), &pd, true, &dp), 0);
    assert_int_equal(df_actor_create(df_test_micro_model(11), &pa, true, &alone), 0);
    df_actor_set_comm(dp, W);
    double worst = 0, first = 0, last = 0;
    for (int it = 0; it < 4; it++) {
        df_metrics *md = df_metrics_new(), *ma = df_metrics_new();
        assert_int_equal(df_test_all_max(df_actor_sft_step(dp, shard, md)), 0);
        assert_int_equal(df_actor_sft_step(alone, global, ma), 0);
        check_metric(md, ma, "train/loss");
        check_metric(md, ma, "train/grad_norm");
        last = df_metrics_get(md, "train/loss", 0);
        first = it == 0 ? last : first;
        double d = df_test_all_max(df_test_max_param_diff(df_actor_model(dp), df_actor_model(alone)));
        worst = fmax(worst, d);
        assert_true(d < WEIGHT_TOL);
        assert_same_checksum(df_actor_model(dp));
        df_metrics_free(md);
        df_metrics_free(ma);
    }
    assert_true(first > 3.0 && last < first - 0.3); /* log(40) ~ 3.7, and it learns */
    if (R == 0)
        print_message("[ sft, %d ranks ] max |w_dp - w_whole| %.3g\n", N, worst);
    df_actor_free(dp);
    df_actor_free(alone);
    df_batch_free(shard);
    df_batch_free(global);
    free(mine);
}

/* A rank that fails before the collectives makes every rank fail, none hangs. */
static void test_failure_agreement(void **state)
{
    (void)state;
    df_batch *b = df_test_synth_batch(3, 4);
    add_ppo_columns(b, 3);
    df_batch *bad = df_test_synth_batch(3, 4); /* no old_log_probs */
    df_actor *a;
    df_actor_params p = params("token-mean", 0, 2);
    assert_int_equal(df_actor_create(df_test_micro_model(11), &p, true, &a), 0);
    df_actor_set_comm(a, W);
    df_metrics *m = df_metrics_new();
    bool failer = R == N - 1;
    int rc = df_actor_update_policy(a, failer ? bad : b, m);
    if (failer)
        assert_error_mentions(rc, DF_EINVAL, "old_log_probs");
    else
        assert_error_mentions(rc, DF_EINTERNAL, "data-parallel");
    df_batch_drop(bad, "response_ids");
    rc = df_actor_sft_step(a, failer ? bad : b, m);
    if (failer)
        assert_error_mentions(rc, DF_EINVAL, "response_ids");
    else
        assert_error_mentions(rc, DF_EINTERNAL, "data-parallel");
    assert_int_equal(df_actor_update_policy(a, b, m), 0); /* the group still works */
    assert_same_checksum(df_actor_model(a));
    df_metrics_free(m);
    df_actor_free(a);
    df_batch_free(b);
    df_batch_free(bad);
}

/* ---- df_model_param_checksum ---------------------------------------------------- */

/* Golden values from tests/golden/param_checksum.py (the documented definition). */
static void test_checksum_golden(void **state)
{
    (void)state;
    static const struct {
        int64_t n;
        uint64_t want;
    } cases[] = {
        {0, 0x0000000000000000ULL}, {1, 0x5C3D77E4E6A060F9ULL},      {5, 0x936AC9B90872898AULL},
        {8, 0xAE8C219A36CA3C8DULL}, {300001, 0x7EC3EEECE4CC4962ULL}, /* two 1 MiB blocks and a half word */
    };
    int threads0 = omp_get_max_threads();
    float *buf = malloc(300001 * sizeof *buf);
    for (int64_t i = 0; i < 300001; i++)
        buf[i] = (float)((int)(i % 2001) - 1000) / 1024.0f;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        df_model m = {.n_params = cases[c].n, .params = buf};
        for (int threads = 1; threads <= 2; threads++) {
            omp_set_num_threads(threads);
            uint64_t got = 1;
            assert_int_equal(df_model_param_checksum(&m, &got), 0);
            if (got != cases[c].want)
                fail_msg("n %lld: 0x%016llX, want 0x%016llX", (long long)cases[c].n, (unsigned long long)got,
                         (unsigned long long)cases[c].want);
        }
    }
    omp_set_num_threads(threads0);
    free(buf);
    assert_int_equal(df_model_param_checksum(NULL, &(uint64_t){0}), DF_EINVAL);
}

static void test_checksum_sensitive(void **state)
{
    (void)state;
    df_model *m = df_test_micro_model(11), *c;
    assert_int_equal(df_model_clone(m, &c), 0);
    uint64_t h0, h1;
    assert_int_equal(df_model_param_checksum(m, &h0), 0);
    assert_int_equal(df_model_param_checksum(c, &h1), 0);
    assert_true(h0 == h1);
    int64_t at[] = {0, 1, m->n_params / 2, m->n_params - 1};
    for (size_t i = 0; i < 4; i++)
        for (int bit = 0; bit < 32; bit += 31) { /* lowest mantissa bit, sign bit */
            uint32_t u;
            memcpy(&u, &c->params[at[i]], 4);
            u ^= 1u << bit;
            memcpy(&c->params[at[i]], &u, 4);
            assert_int_equal(df_model_param_checksum(c, &h1), 0);
            assert_true(h1 != h0);
            u ^= 1u << bit;
            memcpy(&c->params[at[i]], &u, 4);
        }
    /* swapping two elements changes it too */
    float t = c->params[3];
    c->params[3] = c->params[4];
    c->params[4] = t;
    assert_int_equal(df_model_param_checksum(c, &h1), 0);
    assert_true(h1 != h0);
    df_model_free(m);
    df_model_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_world),
        cmocka_unit_test(test_checksum_golden),
        cmocka_unit_test(test_checksum_sensitive),
        cmocka_unit_test(test_ppo_equal_token_mean),
        cmocka_unit_test(test_ppo_equal_seq_mean),
        cmocka_unit_test(test_ppo_unequal_token_mean),
        cmocka_unit_test(test_ppo_unequal_seq_mean),
        cmocka_unit_test(test_without_allreduce_differs),
        cmocka_unit_test(test_sft),
        cmocka_unit_test(test_failure_agreement),
    };
    return cmocka_run_group_tests(tests, group_setup, df_test_world_teardown);
}
