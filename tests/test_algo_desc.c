/*
 * test_algo_desc.c — algorithm descriptors (include/distflow/algo_desc.h): the
 * built-ins declare what verl's trainer special-cases for them (expected values
 * written from verl's RayPPOTrainer and core_algos, not read from our table),
 * plugins register their own, and bad descriptors are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "distflow/algo_desc.h"

#include <string.h>

/* Each built-in estimator: what verl's trainer does around it. */
static const struct {
    const char *name;
    unsigned needs, flags;
    const char *policy_loss, *pipeline;
} k_expect[] = {
    /* group baseline over the rollout.n responses of a prompt */
    {"grpo", DF_ADV_NEEDS_GROUPS, 0, NULL, "grpo"},
    {"rloo", DF_ADV_NEEDS_GROUPS, 0, NULL, "grpo"},
    {"grpo_vectorized", DF_ADV_NEEDS_GROUPS, 0, NULL, "grpo"},
    {"rloo_vectorized", DF_ADV_NEEDS_GROUPS, 0, NULL, "grpo"},
    {"grpo_passk", DF_ADV_NEEDS_GROUPS, 0, NULL, "grpo"},
    {"opo", DF_ADV_NEEDS_GROUPS, 0, NULL, "grpo"},
    /* verl's compute_advantage asserts sum_pi_squared from the actor for both */
    {"optimal_token_baseline", DF_ADV_NEEDS_GROUPS | DF_ADV_NEEDS_SUM_PI_SQUARED, 0, NULL, "grpo"},
    {"tir_optimal_token_baseline", DF_ADV_NEEDS_GROUPS | DF_ADV_NEEDS_SUM_PI_SQUARED, 0, NULL, "grpo"},
    /* alpha / the weight from counts over the whole step batch */
    {"gpg", DF_ADV_NEEDS_GROUPS, DF_ADV_BATCH_COUNTS, NULL, "grpo"},
    {"gpg_paper", DF_ADV_NEEDS_GROUPS, DF_ADV_BATCH_COUNTS, NULL, "grpo"},
    /* siiRL sets use_cpgd_loss for adv_estimator=cpgd */
    {"cpgd", DF_ADV_NEEDS_GROUPS, DF_ADV_BATCH_COUNTS, "cpgd", "grpo"},
    /* verl: use_critic for gae; masked_whiten of the advantages */
    {"gae", DF_ADV_NEEDS_VALUES, DF_ADV_WHITENS, NULL, "ppo"},
    {"reinforce_plus_plus", 0, DF_ADV_WHITENS, NULL, "grpo"},
    /* returns = advantages, both whitened */
    {"reinforce_plus_plus_baseline", DF_ADV_NEEDS_GROUPS, DF_ADV_WHITENS | DF_ADV_WHITENS_RETURNS, NULL, "grpo"},
    /* RayPPOTrainer.fit: a greedy generation whose reward is reward_baselines */
    {"remax", DF_ADV_NEEDS_BASELINES, 0, NULL, "grpo"},
};

static void test_builtin_estimators(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof k_expect / sizeof *k_expect; i++) {
        const df_adv_estimator_desc *d = df_adv_estimator_find(k_expect[i].name);
        assert_non_null(d);
        assert_string_equal(d->name, k_expect[i].name);
        assert_int_equal(d->needs, k_expect[i].needs);
        assert_int_equal(d->flags, k_expect[i].flags);
        if (k_expect[i].policy_loss)
            assert_string_equal(d->policy_loss, k_expect[i].policy_loss);
        else
            assert_null(d->policy_loss);
        assert_string_equal(df_adv_estimator_pipeline(d), k_expect[i].pipeline);
        assert_non_null(d->summary);
        df_adv_estimator_fn fn;
        assert_int_equal(df_adv_estimator_lookup(k_expect[i].name, &fn), 0);
        assert_true(fn == d->fn);
        assert_int_equal(df_adv_estimator_whitens(d->name), (d->flags & DF_ADV_WHITENS) != 0);
        assert_int_equal(df_adv_estimator_whitens_returns(d->name), (d->flags & DF_ADV_WHITENS_RETURNS) != 0);
    }
    assert_true(df_adv_estimator_find("gae")->fn == df_adv_gae);
    assert_true(df_adv_estimator_find("grpo")->fn == df_adv_grpo);
}

static void test_unknown_estimator(void **state)
{
    (void)state;
    assert_null(df_adv_estimator_find("no_such_estimator"));
    assert_null(df_adv_estimator_find(NULL));
    const df_adv_estimator_desc *d = (const df_adv_estimator_desc *)1;
    assert_int_equal(df_adv_estimator_get("no_such_estimator", &d), DF_EINVAL);
    assert_null(d);
    assert_non_null(strstr(df_last_error(), "unknown advantage estimator 'no_such_estimator'"));
    assert_non_null(strstr(df_last_error(), "remax")); /* the known names are listed */
    assert_int_equal(df_adv_estimator_get("rloo", &d), 0);
    assert_string_equal(d->name, "rloo");
}

static int my_estimator(const df_adv_input *in, float *adv, float *ret)
{
    (void)in, (void)adv, (void)ret;
    return 0;
}

/* A plugin's estimator: registered with its descriptor, which the registry copies. */
static void test_register_desc(void **state)
{
    (void)state;
    char name[] = "my_group_whitened";
    df_adv_estimator_desc d = {.name = name, .fn = my_estimator, .needs = DF_ADV_NEEDS_GROUPS,
                               .flags = DF_ADV_WHITENS, .summary = "test"};
    assert_int_equal(df_adv_estimator_register_desc(&d), 0);
    memset(name, 'x', sizeof name - 1); /* the caller's buffers may change after registration */
    d.needs = 0;
    const df_adv_estimator_desc *got = df_adv_estimator_find("my_group_whitened");
    assert_non_null(got);
    assert_string_equal(got->name, "my_group_whitened");
    assert_int_equal(got->needs, DF_ADV_NEEDS_GROUPS);
    assert_true(df_adv_estimator_whitens("my_group_whitened"));
    assert_false(df_adv_estimator_whitens_returns("my_group_whitened"));
    assert_string_equal(df_adv_estimator_pipeline(got), "grpo");
    df_adv_estimator_fn fn;
    assert_int_equal(df_adv_estimator_lookup("my_group_whitened", &fn), 0);
    assert_true(fn == my_estimator);

    /* a critic-based one implies the ppo pipeline */
    df_adv_estimator_desc v = {.name = "my_values", .fn = my_estimator, .needs = DF_ADV_NEEDS_VALUES};
    assert_int_equal(df_adv_estimator_register_desc(&v), 0);
    assert_string_equal(df_adv_estimator_pipeline(df_adv_estimator_find("my_values")), "ppo");

    /* a plugin's estimator may ask for the actor's sums of squared probabilities */
    df_adv_estimator_desc sq = {.name = "my_otb", .fn = my_estimator,
                                .needs = DF_ADV_NEEDS_GROUPS | DF_ADV_NEEDS_SUM_PI_SQUARED};
    assert_int_equal(df_adv_estimator_register_desc(&sq), 0);
    assert_int_equal(df_adv_estimator_find("my_otb")->needs,
                     DF_ADV_NEEDS_GROUPS | DF_ADV_NEEDS_SUM_PI_SQUARED);
}

/* A plain registration of another function replaces a built-in's descriptor too (it is not
   assumed to whiten); of a built-in function, under any name, it keeps that function's. */
static void test_plain_replacement(void **state)
{
    (void)state;
    df_adv_estimator_desc saved = *df_adv_estimator_find("reinforce_plus_plus");
    assert_int_equal(df_adv_estimator_register("reinforce_plus_plus", my_estimator), 0);
    const df_adv_estimator_desc *d = df_adv_estimator_find("reinforce_plus_plus");
    assert_int_equal(d->needs, 0);
    assert_int_equal(d->flags, 0);
    assert_false(df_adv_estimator_whitens("reinforce_plus_plus"));
    assert_int_equal(df_adv_estimator_register("my_gae", df_adv_gae), 0);
    assert_int_equal(df_adv_estimator_find("my_gae")->needs, DF_ADV_NEEDS_VALUES);
    assert_true(df_adv_estimator_whitens("my_gae"));
    assert_int_equal(df_adv_estimator_register_desc(&saved), 0); /* restore */
    assert_true(df_adv_estimator_whitens("reinforce_plus_plus"));
    assert_true(df_adv_estimator_find("reinforce_plus_plus")->fn == df_adv_reinforce_plus_plus);
}

static void test_bad_descriptors(void **state)
{
    (void)state;
    assert_int_equal(df_adv_estimator_register_desc(NULL), DF_EINVAL);
    df_adv_estimator_desc d = {.name = "bad", .fn = my_estimator, .needs = 1u << 7};
    assert_int_equal(df_adv_estimator_register_desc(&d), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "'bad'"));
    d = (df_adv_estimator_desc){.name = "bad", .fn = my_estimator, .flags = DF_ADV_WHITENS_RETURNS};
    assert_int_equal(df_adv_estimator_register_desc(&d), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "DF_ADV_WHITENS_RETURNS without DF_ADV_WHITENS"));
    d = (df_adv_estimator_desc){.name = "bad"};
    assert_int_equal(df_adv_estimator_register_desc(&d), DF_EINVAL);
    d = (df_adv_estimator_desc){.name = "", .fn = my_estimator};
    assert_int_equal(df_adv_estimator_register_desc(&d), DF_EINVAL);
    assert_null(df_adv_estimator_find("bad"));
}

static int my_loss(const df_policy_loss_input *in, df_policy_loss_output *out)
{
    (void)in, (void)out;
    return 0;
}

static void test_policy_losses(void **state)
{
    (void)state;
    static const char *const names[] = {"vanilla", "gspo", "gpg", "cpgd", "clip_cov", "kl_cov", "clip-cov", "kl-cov"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const df_policy_loss_desc *d = df_policy_loss_find(names[i]);
        assert_non_null(d);
        assert_string_equal(d->name, names[i]);
        df_policy_loss_fn fn;
        assert_int_equal(df_policy_loss_lookup(names[i], &fn), 0);
        assert_true(fn == d->fn);
        /* GSPO's objective averages over sequences (arXiv 2507.18071, eq. 7); the others any */
        if (!strcmp(names[i], "gspo"))
            assert_string_equal(d->loss_agg_mode, "seq-mean-token-mean");
        else
            assert_null(d->loss_agg_mode);
    }
    assert_true(df_policy_loss_find("clip-cov")->fn == df_policy_loss_find("clip_cov")->fn);
    assert_null(df_policy_loss_find("ppo"));
    df_policy_loss_desc d = {.name = "my_loss", .fn = my_loss, .loss_agg_mode = "token-mean"};
    assert_int_equal(df_policy_loss_register_desc(&d), 0);
    assert_string_equal(df_policy_loss_find("my_loss")->loss_agg_mode, "token-mean");
    assert_int_equal(df_policy_loss_register_desc(NULL), DF_EINVAL);
    d.fn = NULL;
    assert_int_equal(df_policy_loss_register_desc(&d), DF_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin_estimators), cmocka_unit_test(test_unknown_estimator),
        cmocka_unit_test(test_register_desc),      cmocka_unit_test(test_plain_replacement),
        cmocka_unit_test(test_bad_descriptors),    cmocka_unit_test(test_policy_losses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
