/*
 * test_plugin_algo.c — algorithms from plugins (df_plugin_adv_estimator /
 * df_plugin_policy_loss, src/dag/plugin_algo.c) with the example estimator
 * examples/plugins/adv_median.c: the descriptor read from the file without
 * running plugin code, then loaded and run on a hand-computed case; refs that
 * name the wrong kind of symbol are refused. DF_PLUGIN_DIR is build/plugins.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "distflow/algo_desc.h"
#include "distflow/dag.h"

#include <string.h>

#define MEDIAN_REF DF_PLUGIN_DIR "/libadv_median.so:median_baseline"

/* Checked only: the needs come from the file, and the stand-in refuses to run. */
static void test_check_reads_descriptor(void **state)
{
    (void)state;
    int before = df_plugin_count();
    assert_int_equal(df_plugin_adv_estimator(MEDIAN_REF, false), 0);
    assert_int_equal(df_plugin_count(), before); /* nothing loaded */
    const df_adv_estimator_desc *d = df_adv_estimator_find(MEDIAN_REF);
    assert_non_null(d);
    assert_string_equal(d->name, MEDIAN_REF);
    assert_int_equal(d->needs, DF_ADV_NEEDS_GROUPS);
    assert_int_equal(d->flags, 0);
    assert_string_equal(df_adv_estimator_pipeline(d), "grpo");
    float a[1], r[1];
    df_adv_input in = {0};
    assert_int_equal(d->fn(&in, a, r), DF_EINTERNAL);
    assert_non_null(strstr(df_last_error(), "checked but not loaded"));
}

/* Loaded: groups {1, 0, 0} and {3, 1, 2, 6} of one-token rewards (scores) and a two-token sample.
 * Medians 0 and (2 + 3) / 2 = 2.5. */
static void test_load_and_run(void **state)
{
    (void)state;
    assert_int_equal(df_plugin_adv_estimator(MEDIAN_REF, true), 0);
    const df_adv_estimator_desc *d = df_adv_estimator_find(MEDIAN_REF);
    assert_non_null(d);
    assert_int_equal(d->needs, DF_ADV_NEEDS_GROUPS);
    assert_string_equal(d->summary, "outcome score minus the median score of the prompt's responses");
    const int64_t off[] = {0, 1, 2, 3, 4, 5, 7, 8};
    const float rew[] = {1, 0, 0, 3, 1, 0.5f, 1.5f, 6}; /* sample 5: 0.5 + 1.5 = 2 */
    const int64_t group[] = {0, 0, 0, 1, 1, 1, 1};
    df_adv_input in = {.n = 7, .offsets = off, .token_level_rewards = rew, .group = group};
    float adv[8], ret[8];
    assert_int_equal(d->fn(&in, adv, ret), 0);
    const float want[] = {1, 0, 0, 0.5f, -1.5f, -0.5f, -0.5f, 3.5f};
    for (int t = 0; t < 8; t++) {
        assert_float_equal(adv[t], want[t], 0); /* sums and halves of small integers: exact */
        assert_float_equal(ret[t], want[t], 0);
    }
    df_adv_estimator_fn fn;
    assert_int_equal(df_adv_estimator_lookup(MEDIAN_REF, &fn), 0);
    assert_true(fn == d->fn);
}

/* A function symbol is not a descriptor; a descriptor is not a loss; a missing one is named. */
static void test_wrong_symbols(void **state)
{
    (void)state;
    assert_int_equal(df_plugin_adv_estimator(DF_PLUGIN_DIR "/libreward_length.so:compute_length_reward", false),
                     DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "'compute_length_reward' is not a data object"));
    assert_int_equal(df_plugin_policy_loss(MEDIAN_REF, false), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "is not an object of"));
    assert_int_equal(df_plugin_adv_estimator(DF_PLUGIN_DIR "/libadv_median.so:no_such", false), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "no exported symbol 'no_such'"));
    assert_int_equal(df_plugin_adv_estimator(DF_PLUGIN_DIR "/libnone.so:x", false), DF_ENOTFOUND);
}

/* What loading registered belongs to the plugin: unloading it removes the estimator, so no
   registry entry is left pointing into unmapped code. */
static void test_unload_removes(void **state)
{
    (void)state;
    assert_int_equal(df_plugin_adv_estimator(MEDIAN_REF, true), 0);
    assert_non_null(df_adv_estimator_find(MEDIAN_REF));
    df_exec_unload_plugins();
    assert_int_equal(df_plugin_count(), 0);
    assert_null(df_adv_estimator_find(MEDIAN_REF));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_reads_descriptor),
        cmocka_unit_test(test_load_and_run),
        cmocka_unit_test(test_wrong_symbols),
        cmocka_unit_test(test_unload_removes),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    df_exec_unload_plugins();
    return rc;
}
