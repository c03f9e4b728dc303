/* The staleness manager of asynchronous RL (include/distflow/async.h; AReaL StalenessManager):
 * the capacity formula by hand across version bumps, accounting errors, the version-gap
 * statistics and their metrics, recovery, and the async_training.* keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <string.h>

#include "distflow/async.h"
#include "distflow/config.h"
#include "distflow/metrics.h"
#include "distflow/train_config.h"

static void submit_n(df_staleness *s, int n, int64_t version)
{
    for (int i = 0; i < n; i++)
        if (df_staleness_submit(s, version))
            fail_msg("submit %d at version %lld: %s", i, (long long)version, df_last_error());
}

static void accept_n(df_staleness *s, int n)
{
    for (int i = 0; i < n; i++)
        assert_int_equal(df_staleness_accept(s), 0);
}

/*
 * max_staleness 1, max_concurrent_rollouts 6, consumer_batch_size 4;
 * capacity = min(6 - running, (1 + v + 1) * 4 - (accepted + running)):
 *   v 0, nothing yet:                    min(6, 8 - 0)   = 6
 *   submit 6 (running 6):                min(0, 8 - 6)   = 0
 *   accept 4 (running 2, accepted 4):    min(4, 8 - 6)   = 2   (the staleness bound binds)
 *   submit 2 (running 4):                min(2, 8 - 8)   = 0
 *   accept 4 (running 0, accepted 8):    min(6, 8 - 8)   = 0   (two batches ahead of version 0: full)
 *   v 1 (the trainer took batch 0):      min(6, 12 - 8)  = 4
 *   submit 4 (running 4):                min(2, 12 - 12) = 0
 *   reject 1 (running 3, rejected 1):    min(3, 12 - 11) = 1   (a rejected episode frees its slot)
 *   v 2:                                 min(3, 16 - 11) = 3
 *   v 5 (versions need not be adjacent): min(3, 28 - 11) = 3   (the concurrency bound binds)
 */
static void test_capacity_by_hand(void **state)
{
    (void)state;
    df_staleness s;
    df_staleness_params p = {.max_staleness = 1, .max_concurrent_rollouts = 6, .consumer_batch_size = 4};
    assert_int_equal(df_staleness_init(&s, &p), 0);
    assert_int_equal(df_staleness_capacity(&s, 0), 6);
    submit_n(&s, 6, 0);
    assert_int_equal(df_staleness_capacity(&s, 0), 0);
    accept_n(&s, 4);
    assert_int_equal(df_staleness_capacity(&s, 0), 2);
    submit_n(&s, 2, 0);
    assert_int_equal(df_staleness_capacity(&s, 0), 0);
    accept_n(&s, 4);
    assert_int_equal(s.running, 0);
    assert_int_equal(s.accepted, 8);
    assert_int_equal(df_staleness_capacity(&s, 0), 0);
    assert_error_mentions(df_staleness_submit(&s, 0), DF_EINVAL, "no capacity");
    assert_int_equal(s.running, 0); /* refused: nothing changed */
    assert_int_equal(df_staleness_capacity(&s, 1), 4);
    submit_n(&s, 4, 1);
    assert_int_equal(df_staleness_capacity(&s, 1), 0);
    assert_int_equal(df_staleness_reject(&s), 0);
    assert_int_equal(s.rejected, 1);
    assert_int_equal(s.running, 3);
    assert_int_equal(df_staleness_capacity(&s, 1), 1);
    assert_int_equal(df_staleness_capacity(&s, 2), 3);
    assert_int_equal(df_staleness_capacity(&s, 5), 3);
    assert_int_equal(df_staleness_capacity(&s, -3), df_staleness_capacity(&s, 0)); /* counts as 0 */
}

/*
 * max_staleness 0 (on-policy), concurrency 8, batch 2: one batch in flight per version.
 *   v 0: min(8, 2) = 2; submit 2: min(6, 0) = 0; accept 2: still 0 (accepted 2 = one batch).
 *   v 1: min(8, 4 - 2) = 2.
 * Capacity may be negative: a caller reporting version 0 after two batches were accepted gets
 * min(8, 2 - 4) = -2 (no room).
 */
static void test_on_policy_and_negative(void **state)
{
    (void)state;
    df_staleness s;
    df_staleness_params p = {.max_staleness = 0, .max_concurrent_rollouts = 8, .consumer_batch_size = 2};
    assert_int_equal(df_staleness_init(&s, &p), 0);
    assert_int_equal(df_staleness_capacity(&s, 0), 2);
    submit_n(&s, 2, 0);
    assert_int_equal(df_staleness_capacity(&s, 0), 0);
    accept_n(&s, 2);
    assert_int_equal(df_staleness_capacity(&s, 0), 0);
    assert_int_equal(df_staleness_capacity(&s, 1), 2);
    submit_n(&s, 2, 1);
    accept_n(&s, 2);
    assert_int_equal(df_staleness_capacity(&s, 0), -2);
}

/* AReaL on_version_recovered: accepted = version x batch, so a resumed run at version 5 (batch 4,
   max_staleness 1, concurrency 100) has (1 + 5 + 1) 4 - 20 = 8 slots, not 28. */
static void test_recover(void **state)
{
    (void)state;
    df_staleness s;
    df_staleness_params p = {.max_staleness = 1, .max_concurrent_rollouts = 100, .consumer_batch_size = 4};
    assert_int_equal(df_staleness_init(&s, &p), 0);
    assert_int_equal(df_staleness_capacity(&s, 5), 28);
    assert_int_equal(df_staleness_recover(&s, 5), 0);
    assert_int_equal(s.accepted, 20);
    assert_int_equal(df_staleness_capacity(&s, 5), 8);
    assert_error_mentions(df_staleness_recover(&s, -1), DF_EINVAL, "negative");
    assert_int_equal(s.accepted, 20);
}

static void test_accounting_errors(void **state)
{
    (void)state;
    df_staleness s;
    df_staleness_params p = {.max_staleness = 2, .max_concurrent_rollouts = 3, .consumer_batch_size = 2};
    assert_int_equal(df_staleness_init(&s, &p), 0);
    assert_error_mentions(df_staleness_accept(&s), DF_EINVAL, "none is running");
    assert_error_mentions(df_staleness_reject(&s), DF_EINVAL, "none is running");
    assert_int_equal(s.accepted + s.rejected + s.running, 0);
    df_staleness_params bad[] = {{-1, 3, 2}, {0, 0, 2}, {0, 3, 0}};
    const char *key[] = {"async_training.max_staleness", "async_training.max_concurrent_rollouts",
                         "async_training.consumer_batch_size"};
    for (int i = 0; i < 3; i++) {
        df_staleness t = s;
        assert_error_mentions(df_staleness_init(&t, &bad[i]), DF_EINVAL, key[i]);
        assert_memory_equal(&t, &s, sizeof s); /* left as it was */
    }
    assert_error_mentions(df_staleness_init(NULL, &p), DF_EINVAL, "NULL");
}

/*
 * Version gaps, max_staleness 1: samples of versions 3, 3, 2, 1, 4 consumed at version 3 give
 * gaps 0, 0, 1, 2, -1: the last is an error (a future policy) and is not counted, the gap-2 sample
 * is dropped. Consumed 4, gap sum 3, mean 0.75, max 2, dropped 1 (fraction 0.25), stale but
 * kept 1.
 */
static void test_version_gaps_and_metrics(void **state)
{
    (void)state;
    df_staleness s;
    df_staleness_params p = {.max_staleness = 1, .max_concurrent_rollouts = 4, .consumer_batch_size = 2};
    assert_int_equal(df_staleness_init(&s, &p), 0);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_staleness_record(&s, m), 0);
    assert_false(df_metrics_has(m, "fully_async/version_gap/mean")); /* nothing consumed yet */
    assert_true(df_metrics_has(m, "fully_async/count/dropped_stale_samples"));
    const int64_t ver[] = {3, 3, 2, 1};
    const bool want[] = {true, true, true, false};
    for (int i = 0; i < 4; i++) {
        bool keep = !want[i];
        assert_int_equal(df_staleness_consume(&s, ver[i], 3, &keep), 0);
        assert_true(keep == want[i]);
    }
    assert_error_mentions(df_staleness_consume(&s, 4, 3, NULL), DF_EINVAL, "ahead of the trainer");
    assert_error_mentions(df_staleness_consume(&s, -1, 3, NULL), DF_EINVAL, "version");
    assert_int_equal(s.consumed, 4);
    assert_int_equal(s.gap_sum, 3);
    assert_int_equal(s.gap_max, 2);
    assert_int_equal(s.dropped_stale, 1);
    assert_int_equal(s.stale_kept, 1);
    submit_n(&s, 3, 0);
    assert_int_equal(df_staleness_accept(&s), 0);
    assert_int_equal(df_staleness_reject(&s), 0);
    assert_int_equal(df_staleness_record(&s, m), 0);
    /* exact: small integers and their quotients by 4 */
    assert_near(df_metrics_get(m, "fully_async/version_gap/mean", -1), 0.75, 0);
    assert_near(df_metrics_get(m, "fully_async/version_gap/max", -1), 2, 0);
    assert_near(df_metrics_get(m, "fully_async/stale_dropped_frac", -1), 0.25, 0);
    assert_near(df_metrics_get(m, "fully_async/count/dropped_stale_samples", -1), 1, 0);
    assert_near(df_metrics_get(m, "fully_async/count/stale_samples_processed", -1), 1, 0);
    assert_near(df_metrics_get(m, "fully_async/count/running", -1), 1, 0);
    assert_near(df_metrics_get(m, "fully_async/count/accepted", -1), 1, 0);
    assert_near(df_metrics_get(m, "fully_async/count/rejected", -1), 1, 0);
    assert_error_mentions(df_staleness_record(&s, NULL), DF_EINVAL, "NULL");
    df_metrics_free(m);
}

/* The keys: their defaults give the manager's settings (consumer_batch_size from
   data.train_batch_size, max_concurrent_rollouts from it). */
static void test_config(void **state)
{
    (void)state;
    const char *ov[] = {"data.train_batch_size=16"};
    df_config *c = NULL;
    assert_int_equal(df_config_load(df_config_schema_train(), NULL, ov, 1, &c), 0);
    df_train_config t;
    assert_int_equal(df_train_config_resolve(c, &t), 0);
    df_staleness_params p;
    assert_int_equal(df_staleness_params_from_config(&t.async_training, &p), 0);
    assert_int_equal(p.max_staleness, 0);
    assert_int_equal(p.consumer_batch_size, 16);
    assert_int_equal(p.max_concurrent_rollouts, 16);
    struct df_train_async_training a = t.async_training;
    a.max_concurrent_rollouts.set = true, a.max_concurrent_rollouts.v = 40, a.max_staleness = 3;
    assert_int_equal(df_staleness_params_from_config(&a, &p), 0);
    assert_int_equal(p.max_concurrent_rollouts, 40);
    assert_int_equal(p.max_staleness, 3);
    a.consumer_batch_size = 0;
    assert_error_mentions(df_staleness_params_from_config(&a, &p), DF_EINVAL, "consumer_batch_size");
    assert_int_equal(p.max_staleness, 3); /* unchanged */
    df_config_free(c);

    /* what the runtime does not do is refused with the key's help (the other keys' checks:
       test_async_plan) */
    const char *refused[] = {"async_training.use_rollout_log_probs=true", "async_training.compute_prox_log_prob=false"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        assert_int_equal(df_config_load(df_config_schema_train(), NULL, &refused[i], 1, &c), 0);
        assert_error_mentions(df_config_validate_train(c, 1), DF_EUNSUPPORTED, "distflow");
        df_config_free(c);
    }
    /* bounds are checked when loading */
    const char *neg[] = {"async_training.max_staleness=-1"};
    assert_int_not_equal(df_config_load(df_config_schema_train(), NULL, neg, 1, &c), 0);
    assert_last_error_mentions("async_training.max_staleness");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capacity_by_hand),
        cmocka_unit_test(test_on_policy_and_negative),
        cmocka_unit_test(test_recover),
        cmocka_unit_test(test_accounting_errors),
        cmocka_unit_test(test_version_gaps_and_metrics),
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
