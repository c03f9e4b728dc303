/*
 * test_critic.c — the PPO critic engine (engine/critic.h): values of response
 * tokens, the value loss going down over repeated updates, micro-batch
 * invariance, and data parallelism (each rank updates on its shard; every rank
 * also updates a lone critic on the whole batch from the same weights; weights
 * and metrics must match up to float summation order). Runs as one rank and
 * under mpiexec:
 * mpi-test: np 2
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testmpi.h"

#include "distflow/algo.h"
#include "distflow/rng.h"
#include "engine/critic.h"
#include "testutil.h"

#include <math.h>
#include <omp.h>

/* Same bounds as test_actor_dp: summation-order differences are ~1e-7, a missing
   all-reduce or a wrong normaliser ~1e-2. */
#define WEIGHT_TOL 1e-4
#define METRIC_RTOL 1e-4

static int group_setup(void **state)
{
    omp_set_num_threads(1); /* a tiny model gains nothing from threads on a shared machine */
    return df_test_world_setup(state);
}

/* A value model from the micro causal LM (vocab 40, hidden 16), head seeded by `seed`. */
static df_model *value_model(uint64_t seed)
{
    df_model *m = df_test_micro_model(11);
    assert_int_equal(df_model_to_value_model(&m, seed), 0);
    assert_int_equal((int)m->cfg.num_labels, 1);
    return m;
}

static df_critic_params params(const char *agg, int64_t mini, int64_t micro)
{
    df_critic_params p = {.optim = {.lr = 1e-2,
                                    .weight_decay = 0.01,
                                    .beta1 = 0.9,
                                    .beta2 = 0.999,
                                    .adam_eps = 1e-8,
                                    .grad_clip = 1.0},
                          .mini_batch_size = mini,
                          .micro_batch_size = micro,
                          .forward_micro_batch_size = micro,
                          .loss = {.ppo_epochs = 1, .cliprange_value = 0.2, .loss_agg_mode = agg,
                                   .loss_agg_norm_length = 8}};
    return p;
}

/* returns: a learnable function of the response token, (id mod 5) / 5 - 0.4. */
static void set_returns(df_batch *b)
{
    float *ret;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "returns", "response_ids", &ret), 0);
    const df_column *r = df_batch_column(b, "response_ids");
    const int32_t *ids = r->data;
    for (int64_t t = 0; t < r->offsets[df_batch_size(b)]; t++)
        ret[t] = (float)(ids[t] % 5) / 5.0f - 0.4f;
}

/* values = the initial critic's predictions + noise (so that some predictions clip), and returns. */
static void add_value_columns(df_batch *b, uint64_t seed)
{
    df_critic *c;
    df_critic_params p = params("token-mean", 0, 4);
    assert_int_equal(df_critic_create(value_model(5), &p, &c), 0);
    assert_int_equal(df_critic_compute_values(c, b), 0);
    df_critic_free(c);
    float *v = df_batch_data_mut(b, "values");
    df_rng rng;
    df_rng_seed(&rng, df_rng_key(seed, 9, 0, 0));
    for (int64_t t = 0; t < df_batch_offsets(b, "response_ids")[df_batch_size(b)]; t++)
        v[t] += (float)(0.6 * df_rng_uniform(&rng) - 0.3);
    set_returns(b);
}

static void test_refuses_causal_lm(void **state)
{
    (void)state;
    df_model *lm = df_test_micro_model(11);
    df_critic *c = NULL;
    df_critic_params p = params("token-mean", 0, 4);
    assert_error_mentions(df_critic_create(lm, &p, &c), DF_EINVAL, "num_labels");
    p.loss.loss_agg_mode = "token-sum";
    df_model *vm = value_model(5);
    assert_error_mentions(df_critic_create(vm, &p, &c), DF_EINVAL, "critic.loss_agg_mode");
    p = params("token-mean", 0, 4);
    p.loss.cliprange_value = -1;
    assert_error_mentions(df_critic_create(vm, &p, &c), DF_EINVAL, "cliprange_value");
    assert_null(c);
    df_model_free(lm); /* the caller still owns the models after a failed create */
    df_model_free(vm);
}

static void test_missing_columns(void **state)
{
    (void)state;
    df_critic *c;
    df_critic_params p = params("token-mean", 0, 4);
    assert_int_equal(df_critic_create(value_model(5), &p, &c), 0);
    df_batch *b = df_test_synth_batch(1, 6);
    assert_int_equal(df_critic_compute_values(c, b), 0);
    df_metrics *m = df_metrics_new();
    assert_error_mentions(df_critic_update(c, b, m), DF_EINVAL, "'returns'");
    assert_int_equal(df_critic_step_count(c), 0);
    df_batch_drop(b, "prompt_ids");
    assert_error_mentions(df_critic_compute_values(c, b), DF_EINVAL, "'prompt_ids'");
    df_metrics_free(m);
    df_batch_free(b);
    df_critic_free(c);
}

/* compute_values is the model's value forward, whatever the micro-batching: each
   response token's value is read at the row that predicts it. */
static void test_compute_values(void **state)
{
    (void)state;
    df_batch *b = df_test_synth_batch(3, 10);
    df_critic *c1, *c2;
    df_critic_params p1 = params("token-mean", 0, 0), p2 = params("token-mean", 0, 3);
    p2.forward_max_token_len = 9;
    assert_int_equal(df_critic_create(value_model(5), &p1, &c1), 0);
    assert_int_equal(df_critic_create(value_model(5), &p2, &c2), 0);
    assert_int_equal(df_critic_compute_values(c1, b), 0);
    df_batch *b2 = NULL;
    assert_int_equal(df_batch_slice(b, 0, 10, &b2), 0);
    assert_int_equal(df_critic_compute_values(c2, b2), 0);
    const float *v1 = df_batch_data_mut(b, "values"), *v2 = df_batch_data_mut(b2, "values");
    int64_t T = df_batch_offsets(b, "response_ids")[10];
    double spread = 0;
    for (int64_t t = 0; t < T; t++) {
        assert_near(v1[t], v2[t], 1e-5);
        spread = fmax(spread, fabs(v1[t] - v1[0]));
    }
    assert_true(spread > 1e-3); /* the values depend on the tokens */
    /* sample 0 on its own: prompt p ++ response r, value of r[j] at row |p| - 1 + j */
    const df_model *vm = df_critic_model(c1);
    int64_t np, nr;
    const int32_t *pt = df_batch_tok_i32(b, "prompt_ids", 0, &np),
                  *rt = df_batch_tok_i32(b, "response_ids", 0, &nr);
    int32_t toks[16];
    int64_t rows[8], so[2] = {0, np + nr};
    memcpy(toks, pt, (size_t)np * sizeof *toks);
    memcpy(toks + np, rt, (size_t)nr * sizeof *toks);
    for (int64_t j = 0; j < nr; j++)
        rows[j] = np - 1 + j;
    df_seq_batch sb = {
        .n_tokens = np + nr, .tokens = toks, .n_seqs = 1, .seq_offsets = so, .n_out = nr, .out_rows = rows};
    df_acts *acts;
    float vals[8];
    assert_int_equal(df_acts_create(&vm->cfg, np + nr, nr, &acts), 0);
    assert_int_equal(df_model_forward_values(vm, acts, &sb, vals), 0);
    for (int64_t j = 0; j < nr; j++)
        assert_near(v1[j], vals[j], 1e-5);
    df_acts_free(acts);
    df_batch_free(b);
    df_batch_free(b2);
    df_critic_free(c1);
    df_critic_free(c2);
}

/* PPO's critic loop on a fixed batch: values from the current critic, then an update.
   The fitted returns pull vf_loss well below its start. */
static void test_loss_decreases(void **state)
{
    (void)state;
    df_batch *b = df_test_synth_batch(7, 16);
    set_returns(b);
    df_critic *c;
    df_critic_params p = params("token-mean", 8, 4);
    p.loss.ppo_epochs = 2;
    assert_int_equal(df_critic_create(value_model(5), &p, &c), 0);
    double first = 0, last = 0, clip_any = 0;
    for (int k = 0; k < 20; k++) {
        df_metrics *m = df_metrics_new();
        assert_int_equal(df_critic_compute_values(c, b), 0);
        assert_int_equal(df_critic_update(c, b, m), 0);
        double vf = df_metrics_get(m, "critic/vf_loss", NAN);
        assert_true(isfinite(vf) && vf >= 0);
        assert_true(df_metrics_has(m, "critic/vpred_mean") && df_metrics_has(m, "critic/grad_norm"));
        assert_near(df_metrics_get(m, "critic/lr", 0), 1e-2, 1e-12);
        clip_any = fmax(clip_any, df_metrics_get(m, "critic/vf_clipfrac", NAN));
        if (k == 0)
            first = vf;
        last = vf;
        df_metrics_free(m);
    }
    print_message("[ critic ] vf_loss step 0 %.4g -> step 19 %.4g, max vf_clipfrac %.3f\n", first, last,
                  clip_any);
    assert_true(first > 0.02);
    assert_true(last < 0.5 * first);
    assert_int_equal(df_critic_step_count(c), 20);
    df_batch_free(b);
    df_critic_free(c);
}

/* df_critic_set_loss: a critic given other loss settings after creation takes the same steps
   as one created with them; bad settings are refused and leave the current ones. */
static void test_set_loss(void **state)
{
    (void)state;
    df_batch *b = df_test_synth_batch(13, 12);
    add_value_columns(b, 13);
    df_critic_params pa = params("token-mean", 6, 3), pb = params("seq-mean-token-sum", 6, 3);
    pb.loss.cliprange_value = 0.05;
    pb.loss.ppo_epochs = 2;
    df_critic *a, *bc, *ref;
    assert_int_equal(df_critic_create(value_model(5), &pa, &a), 0);
    assert_int_equal(df_critic_create(value_model(5), &pb, &bc), 0);
    assert_int_equal(df_critic_create(value_model(5), &pa, &ref), 0);
    df_critic_loss bad = pb.loss;
    bad.loss_agg_mode = "nope";
    assert_error_mentions(df_critic_set_loss(a, &bad), DF_EINVAL, "critic.loss_agg_mode");
    bad = pb.loss;
    bad.cliprange_value = NAN;
    assert_error_mentions(df_critic_set_loss(a, &bad), DF_EINVAL, "critic.cliprange_value");
    assert_int_equal(df_critic_set_loss(a, &pb.loss), 0);
    df_metrics *ma = df_metrics_new(), *mb = df_metrics_new(), *mr = df_metrics_new();
    assert_int_equal(df_critic_update(a, b, ma), 0);
    assert_int_equal(df_critic_update(bc, b, mb), 0);
    assert_int_equal(df_critic_update(ref, b, mr), 0);
    assert_true(df_test_max_param_diff(df_critic_model(a), df_critic_model(bc)) == 0.0);
    assert_true(df_metrics_get(ma, "critic/vf_loss", NAN) == df_metrics_get(mb, "critic/vf_loss", NAN));
    assert_true(df_test_max_param_diff(df_critic_model(a), df_critic_model(ref)) > 1e-4); /* the settings matter */
    df_metrics_free(ma);
    df_metrics_free(mb);
    df_metrics_free(mr);
    df_critic_free(a);
    df_critic_free(bc);
    df_critic_free(ref);
    df_batch_free(b);
}

/* Micro-batches of 3 rows, or a token budget, take the same step as one micro-batch. */
static void test_micro_batch_invariant(void **state)
{
    (void)state;
    const char *modes[] = {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                           "seq-mean-token-sum-norm"};
    for (size_t i = 0; i < 4; i++) {
        df_batch *b = df_test_synth_batch(11, 12);
        add_value_columns(b, 11);
        df_critic *whole, *micro;
        df_critic_params pw = params(modes[i], 6, 0), pm = params(modes[i], 6, 3);
        pm.max_token_len = 12;
        assert_int_equal(df_critic_create(value_model(5), &pw, &whole), 0);
        assert_int_equal(df_critic_create(value_model(5), &pm, &micro), 0);
        df_metrics *mw = df_metrics_new(), *mm = df_metrics_new();
        for (int u = 0; u < 2; u++) {
            assert_int_equal(df_critic_update(whole, b, mw), 0);
            assert_int_equal(df_critic_update(micro, b, mm), 0);
        }
        double d = df_test_max_param_diff(df_critic_model(whole), df_critic_model(micro));
        if (d > 1e-5)
            fail_msg("%s: micro-batched weights differ by %.3g", modes[i], d);
        const char *keys[] = {"critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean",
                              "critic/grad_norm"};
        for (size_t k = 0; k < 4; k++)
            assert_near(df_metrics_get(mm, keys[k], NAN), df_metrics_get(mw, keys[k], NAN),
                        1e-5 * fmax(1, fabs(df_metrics_get(mw, keys[k], 0))));
        assert_true(df_metrics_get(mw, "critic/vf_clipfrac", 0) > 0); /* clipping exercised */
        df_metrics_free(mw);
        df_metrics_free(mm);
        df_critic_free(whole);
        df_critic_free(micro);
        df_batch_free(b);
    }
}


static void run_dp(const char *agg, const int *per_rank, int64_t mbs, int epochs)
{
    int count[64] = {0};
    int64_t bounds[64], *mine, n_mine, G = 0;
    int n_mini;
    for (int r = 0; r < N; r++)
        G += count[r] = per_rank[r % 4];
    df_test_dp_layout(count, mbs, &mine, &n_mine, bounds, &n_mini);
    df_batch *global = df_test_synth_batch(42, G), *shard;
    add_value_columns(global, 42);
    assert_int_equal(df_batch_select(global, mine, n_mine, &shard), 0);
    df_critic *dp, *alone;
    df_critic_params pd = params(agg, mbs, 2), pa = params(agg, 0, 3);
    pd.loss.ppo_epochs = epochs;
    assert_int_equal(df_critic_create(value_model(5), &pd, &dp), 0);
    assert_int_equal(df_critic_create(value_model(5), &pa, &alone), 0);
    df_critic_set_comm(dp, W);
    double worst = 0;
    for (int u = 0; u < 2; u++) {
        df_metrics *md = df_metrics_new(), *ma = df_metrics_new();
        assert_int_equal(df_test_all_max(df_critic_update(dp, shard, md)), 0);
        for (int ep = 0; ep < epochs; ep++)
            for (int k = 0; k < n_mini; k++) { /* one optimizer step per global mini-batch */
                df_batch *mb;
                assert_int_equal(df_batch_slice(global, bounds[k], bounds[k + 1], &mb), 0);
                assert_int_equal(df_critic_update(alone, mb, ma), 0);
                df_batch_free(mb);
            }
        const char *keys[] = {"critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm",
                              "critic/lr"};
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
            double x = df_metrics_get(md, keys[i], NAN), y = df_metrics_get(ma, keys[i], NAN);
            assert_true(isfinite(x) && df_test_all_max(x) == df_test_all_min(x)); /* global: the same on every rank */
            if (df_test_all_max(fabs(x - y) / fmax(fabs(y), 1e-3)) > METRIC_RTOL)
                fail_msg("%s: DP %.9g vs whole batch %.9g", keys[i], x, y);
        }
        double d = df_test_all_max(df_test_max_param_diff(df_critic_model(dp), df_critic_model(alone)));
        worst = fmax(worst, d);
        if (d > WEIGHT_TOL)
            fail_msg("update %d: DP critic weights differ from the whole-batch update by %.3g", u, d);
        df_metrics_free(md);
        df_metrics_free(ma);
    }
    df_model *init = value_model(5);
    assert_true(df_test_all_min(df_test_max_param_diff(df_critic_model(dp), init)) > 1e-2); /* it trained */
    if (R == 0)
        print_message("[ critic %s, %d ranks ] max |w_dp - w_whole| %.3g\n", agg, N, worst);
    df_model_free(init);
    df_critic_free(dp);
    df_critic_free(alone);
    df_batch_free(shard);
    df_batch_free(global);
    free(mine);
}

static void test_dp_equal(void **state)
{
    (void)state;
    const int per_rank[4] = {6, 6, 6, 6};
    run_dp("token-mean", per_rank, 3, 2);
    run_dp("seq-mean-token-mean", per_rank, 3, 1);
}

/* Rank 0 has 3 mini-batches, rank 1 one: later steps run on rank 0's rows while the other joins with zero
 * gradient. */
static void test_dp_unequal(void **state)
{
    (void)state;
    const int per_rank[4] = {5, 1, 0, 3};
    run_dp("token-mean", per_rank, 2, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refuses_causal_lm),
        cmocka_unit_test(test_missing_columns),
        cmocka_unit_test(test_compute_values),
        cmocka_unit_test(test_loss_decreases),
        cmocka_unit_test(test_micro_batch_invariant),
        cmocka_unit_test(test_set_loss),
        cmocka_unit_test(test_dp_equal),
        cmocka_unit_test(test_dp_unequal),
    };
    return cmocka_run_group_tests(tests, group_setup, df_test_world_teardown);
}
