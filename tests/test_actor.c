/*
 * Packing batch rows into model input, micro-batch planning, and the actor:
 * log-probs equal the model's, micro-batching does not change the PPO update
 * (token-mean over the mini-batch), SFT steps lower the loss.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "engine/actor.h"
#include "engine/packing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* 4 samples with prompts of 3,1,2,4 tokens and responses of 2,3,0,1 tokens. */
static df_batch *make_batch(void)
{
    static const int64_t po[] = {0, 3, 4, 6, 10}, ro[] = {0, 2, 5, 5, 6};
    static const int32_t p[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, r[] = {11, 12, 13, 14, 15, 16};
    df_batch *b = df_batch_new(4);
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", po, p), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", ro, r), 0);
    return b;
}

static void test_pack(void **state)
{
    (void)state;
    df_batch *b = make_batch();
    df_packed pk = {0};
    assert_int_equal(df_pack_responses(&pk, b, 1, 4), 0);
    /* sample 1: [4 | 13 14 15], sample 2: [5 6 | ], sample 3: [7 8 9 10 | 16] */
    const int32_t tokens[] = {4, 13, 14, 15, 5, 6, 7, 8, 9, 10, 16};
    const int64_t offs[] = {0, 4, 6, 11}, rows[] = {0, 1, 2, 9};
    const int32_t targets[] = {13, 14, 15, 16};
    assert_int_equal(pk.sb.n_tokens, 11);
    assert_int_equal(pk.sb.n_seqs, 3);
    assert_int_equal(pk.sb.n_out, 4);
    assert_memory_equal(pk.sb.tokens, tokens, sizeof tokens);
    assert_memory_equal(pk.sb.seq_offsets, offs, sizeof offs);
    assert_memory_equal(pk.sb.out_rows, rows, sizeof rows);
    assert_memory_equal(pk.sb.out_targets, targets, sizeof targets);
    df_packed_free(&pk);
    df_batch_free(b);
}

static void test_plan(void **state)
{
    (void)state;
    df_batch *b = make_batch(); /* sample sizes in tokens: 5, 4, 2, 5 */
    int64_t *bd, n;
    assert_int_equal(df_plan_micro_batches(b, 3, 0, &bd, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(bd[1], 3);
    assert_int_equal(bd[2], 4);
    free(bd);
    assert_int_equal(df_plan_micro_batches(b, 0, 9, &bd, &n), 0); /* 5+4 | 2+5 */
    assert_int_equal(n, 2);
    assert_int_equal(bd[1], 2);
    free(bd);
    assert_int_equal(df_plan_micro_batches(b, 0, 3, &bd, &n), 0); /* every sample alone */
    assert_int_equal(n, 4);
    int64_t mt, mo;
    df_plan_extent(b, bd, n, &mt, &mo);
    assert_int_equal(mt, 5);
    assert_int_equal(mo, 3);
    free(bd);
    df_batch_free(b);
}

static df_actor_params params(int64_t micro)
{
    df_actor_params p = {.optim.lr = 1e-2, .optim.beta1 = 0.9, .optim.beta2 = 0.999, .optim.adam_eps = 1e-8,
                         .optim.grad_clip = 1e9, .mini_batch_size = 0, .micro_batch_size = micro,
                         .logprob_micro_batch_size = micro, .loss.ppo_epochs = 1,
                         .loss.policy_loss = "vanilla", .loss.loss_agg_mode = "token-mean",
                         .loss.clip_ratio_low = 0.2, .loss.clip_ratio_high = 0.2, .loss.clip_ratio_c = 3.0,
                         .loss.entropy_coeff = 0.01, .use_kl_loss = true, .loss.kl_loss_coef = 0.1,
                         .loss.kl_loss_type = "low_var_kl", .temperature = 0.8f};
    return p;
}

/* Batch with the PPO columns: old / ref log-probs near the model's, varied advantages. */
static df_batch *ppo_batch(df_actor *a)
{
    df_batch *b = make_batch();
    assert_int_equal(df_actor_compute_log_prob(a, b, "old_log_probs", NULL), 0);
    float *ref, *adv;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "ref_log_prob", "response_ids", &ref), 0);
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "advantages", "response_ids", &adv), 0);
    const float *old = df_batch_column(b, "old_log_probs")->data;
    for (int j = 0; j < 6; j++) {
        ref[j] = old[j] + 0.05f * (float)(j - 2);
        adv[j] = (float)(j % 3) - 0.8f;
    }
    return b;
}

static void test_log_prob_matches_model(void **state)
{
    (void)state;
    df_actor *a;
    df_actor_params p = params(2);
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, false, &a), 0);
    df_batch *b = make_batch();
    double ent;
    assert_int_equal(df_actor_compute_log_prob(a, b, "lp", &ent), 0);
    /* the same numbers straight from the model on the whole batch at once */
    df_packed pk = {0};
    assert_int_equal(df_pack_responses(&pk, b, 0, 4), 0);
    df_acts *acts;
    assert_int_equal(df_acts_create(&df_actor_model(a)->cfg, pk.sb.n_tokens, pk.sb.n_out, &acts), 0);
    float lp[6], e[6];
    assert_int_equal(df_model_forward(df_actor_model(a), acts, &pk.sb, 0.8f, lp, e), 0);
    const float *got = df_batch_column(b, "lp")->data;
    double emean = 0;
    for (int j = 0; j < 6; j++) {
        assert_true(fabsf(got[j] - lp[j]) < 1e-5f);
        assert_true(lp[j] < 0);
        emean += e[j] / 6;
    }
    assert_true(fabs(ent - emean) < 1e-5);
    df_acts_free(acts);
    df_packed_free(&pk);
    df_batch_free(b);
    df_actor_free(a);
}

/* One PPO update with micro-batches of `micro` samples; returns the new parameters. */
static float *update_with(int64_t micro, double *pg_loss)
{
    df_actor *a;
    df_actor_params p = params(micro);
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, true, &a), 0);
    df_batch *b = ppo_batch(a);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_actor_update_policy(a, b, m), 0);
    *pg_loss = df_metrics_get(m, "actor/pg_loss", NAN);
    assert_true(df_metrics_get(m, "actor/grad_norm", 0) > 0);
    assert_true(df_metrics_has(m, "actor/kl_loss"));
    df_model *mod = df_actor_model(a);
    float *out = malloc((size_t)mod->n_params * sizeof *out);
    memcpy(out, mod->params, (size_t)mod->n_params * sizeof *out);
    df_metrics_free(m);
    df_batch_free(b);
    df_actor_free(a);
    return out;
}

static void test_micro_batching_invariant(void **state)
{
    (void)state;
    double l1, l4;
    float *p1 = update_with(1, &l1), *p4 = update_with(4, &l4);
    df_model *ref = df_test_micro_model(3);
    double max_diff = 0, moved = 0;
    for (int64_t i = 0; i < ref->n_params; i++) {
        max_diff = fmax(max_diff, fabs((double)p1[i] - p4[i]));
        moved = fmax(moved, fabs((double)p1[i] - ref->params[i]));
    }
    assert_true(moved > 1e-3);     /* the update did something */
    assert_true(max_diff < 1e-5);  /* and the same thing, however the batch was split */
    assert_true(fabs(l1 - l4) < 1e-6);
    df_model_free(ref);
    free(p1);
    free(p4);
}

static void test_sft_lowers_loss(void **state)
{
    (void)state;
    df_actor *a;
    df_actor_params p = params(2);
    p.optim.lr = 3e-2;
    p.temperature = 1.0f;
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, true, &a), 0);
    df_batch *b = make_batch();
    df_metrics *m = df_metrics_new();
    double first = 0, last = 0;
    for (int it = 0; it < 30; it++) {
        df_metrics_clear(m);
        assert_int_equal(df_actor_sft_step(a, b, m), 0);
        if (it == 0)
            first = df_metrics_get(m, "train/loss", 0);
        last = df_metrics_get(m, "train/loss", 0);
    }
    assert_true(first > 3.0);        /* about log(40) for a random model */
    assert_true(last < 0.5 * first); /* memorising 6 tokens is easy */
    assert_int_equal(df_actor_step_count(a), 30);
    df_metrics_free(m);
    df_batch_free(b);
    df_actor_free(a);
}

static void test_errors(void **state)
{
    (void)state;
    df_actor *a;
    df_actor_params p = params(2);
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, false, &a), 0);
    df_batch *b = make_batch();
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_actor_update_policy(a, b, m), DF_EINVAL); /* frozen */
    df_actor_free(a);
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, true, &a), 0);
    assert_int_equal(df_actor_update_policy(a, b, m), DF_EINVAL); /* no old_log_probs */
    assert_non_null(strstr(df_last_error(), "old_log_probs"));
    df_metrics_free(m);
    df_batch_free(b);
    df_actor_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_log_prob_matches_model),
        cmocka_unit_test(test_micro_batching_invariant),
        cmocka_unit_test(test_sft_lowers_loss),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
