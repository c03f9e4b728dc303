/*
 * test_pf_ppo.c — PF-PPO's weights and draws (df_pf_ppo_weights / df_pf_ppo_draw, include/distflow/algo.h;
 * verl core_algos.compute_pf_ppo_reweight_data), on hand-worked cases.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "distflow/algo.h"

#include <math.h>
#include <string.h>

static void test_weights(void **state)
{
    (void)state;
    const float scores[] = {0.5f, -2.0f, 1.0f, 0.0f, 1.0f};
    float w[5];
    /* pow 2: |s|^2, + 1e-8 (below float32's resolution at these sizes, so exact), 0 becomes 1e-8 */
    assert_int_equal(df_pf_ppo_weights(scores, 5, DF_PF_PPO_POW, 2.0, w), DF_OK);
    const float pow2[] = {0.25f, 4.0f, 1.0f, 1e-8f, 1.0f};
    for (int i = 0; i < 5; i++)
        assert_true(w[i] == pow2[i]);
    /* max_min: the highest (1.0, twice) and lowest (-2.0) get 1, the others 1e-8 */
    assert_int_equal(df_pf_ppo_weights(scores, 5, DF_PF_PPO_MAX_MIN, 2.0, w), DF_OK);
    const float mm[] = {1e-8f, 1.0f, 1.0f, 1e-8f, 1.0f};
    for (int i = 0; i < 5; i++)
        assert_true(w[i] == mm[i]);
    /* max_random: 0.4 for the highest, 0.1 for the rest, + 1e-8 in float32 as torch adds it: 0.4f
       keeps its value (1e-8 is below half its ulp, 2^-25), 0.1f moves up one ulp (2^-27 ~ 7.5e-9) */
    assert_int_equal(df_pf_ppo_weights(scores, 5, DF_PF_PPO_MAX_RANDOM, 2.0, w), DF_OK);
    const float lo = nextafterf(0.1f, 1.0f), mr[] = {lo, lo, 0.4f, lo, 0.4f};
    for (int i = 0; i < 5; i++)
        assert_true(w[i] == mr[i]);
    /* pow 0: every sequence the same weight (0^0 = 1, as torch.pow) */
    assert_int_equal(df_pf_ppo_weights(scores, 5, DF_PF_PPO_POW, 0.0, w), DF_OK);
    for (int i = 0; i < 5; i++)
        assert_true(w[i] == 1.0f);
    const float bad[] = {1.0f, NAN};
    assert_int_equal(df_pf_ppo_weights(bad, 2, DF_PF_PPO_POW, 2.0, w), DF_EINVAL);
    assert_int_equal(df_pf_ppo_weights(scores, 5, DF_PF_PPO_POW, -1.0, w), DF_EINVAL);
    df_pf_ppo_method m;
    assert_int_equal(df_pf_ppo_method_parse("max_min", &m), DF_OK);
    assert_int_equal(m, DF_PF_PPO_MAX_MIN);
    assert_int_equal(df_pf_ppo_method_parse("Pow", &m), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "\"Pow\""));
}

/* Weights 1 : 0 : 3: index 1 is never drawn, index 2 is drawn with probability 3/4. Over N draws
   the count of 2 is binomial: mean 3N/4, sd sqrt(N 3/16); 6 sd is a bound a correct sampler
   breaks with probability ~2e-9 (the stream is fixed, so the test is deterministic anyway). */
static void test_draws(void **state)
{
    (void)state;
    enum { N = 40000 };
    static int64_t d[N];
    const float w[] = {1.0f, 0.0f, 3.0f};
    df_rng r;
    df_rng_seed(&r, df_rng_key(7, 1, 2, 3));
    assert_int_equal(df_pf_ppo_draw(w, 3, N, &r, d), DF_OK);
    int64_t c[3] = {0, 0, 0};
    for (int i = 0; i < N; i++) {
        assert_true(d[i] >= 0 && d[i] < 3);
        c[d[i]]++;
    }
    assert_int_equal(c[1], 0);
    assert_true(fabs((double)c[2] - 0.75 * N) <= 6 * sqrt(N * 3.0 / 16));
    /* the same stream gives the same draws */
    static int64_t e[N];
    df_rng_seed(&r, df_rng_key(7, 1, 2, 3));
    assert_int_equal(df_pf_ppo_draw(w, 3, N, &r, e), DF_OK);
    assert_memory_equal(d, e, sizeof d);
    const float zero[] = {0.0f, 0.0f}, neg[] = {1.0f, -1.0f};
    assert_int_equal(df_pf_ppo_draw(zero, 2, 1, &r, e), DF_EINVAL);
    assert_int_equal(df_pf_ppo_draw(neg, 2, 1, &r, e), DF_EINVAL);
    assert_int_equal(df_pf_ppo_draw(w, 0, 1, &r, e), DF_EINVAL);
    assert_int_equal(df_pf_ppo_draw(w, 3, 0, &r, e), DF_OK); /* nothing to draw */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weights),
        cmocka_unit_test(test_draws),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
