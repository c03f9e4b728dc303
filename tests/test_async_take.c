/*
 * test_async_take.c — which episodes a step of the asynchronous runtime takes
 * (src/workers/dag/async.h df_async_take_limits): each rollout rank's share of the batch, its
 * oldest, whatever the other rollout ranks have sent; the trainer ranks' inboxes gathered.
 *
 * mpi-test: np 3 4
 * (as a plain ctest, one rank: skipped, a job needs trainer and rollout ranks.)
 *
 * Two rollout ranks, a batch of 6 (3 each). Rollout rank 0 lags: only its orders 0, 1, 2 and 5
 * arrived; rank 1 is ahead: 3, 4, 6, 7, 8, 9, 10, 11 (its next batch too). The job's 6 oldest
 * would be 0-5 (4 of rank 0's and 2 of rank 1's, pushing rank 1's episode 6 to the next batch);
 * the take is rank 0's 0, 1, 2 and rank 1's 3, 4, 6. The episodes are spread over the trainer
 * ranks by order (order % T), so the gathering counts. A refill (DAPO's replacements) takes the
 * job's oldest instead: 5 of them are 0-4.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testmpi.h"

#include "distflow/train_config.h"
#include "workers/dag/async.h"

static void test_each_rank_share(void **state)
{
    (void)state;
    if (N < 3) {
        skip();
        return;
    }
    const char *ov[] = {"actor_rollout_ref.rollout.mode=async", "rollout.n_gpus_per_node=2"};
    df_config *cfg = df_test_config("trainer: {total_training_steps: 1}\n", "take.yaml", ov, 2);
    df_train_config t;
    assert_int_equal(df_train_config_resolve(cfg, &t), 0);
    df_async *a = NULL;
    assert_int_equal(df_async_create(&t, W, &a), 0);
    if (!a->rollout_side) {
        const int T = a->n_trainers;
        const int64_t arrived[][2] = {{0, 0}, {1, 0}, {2, 0}, {5, 0}, {3, 1},  {4, 1},
                                      {6, 1}, {7, 1}, {8, 1}, {9, 1}, {10, 1}, {11, 1}};
        for (size_t i = 0; i < sizeof arrived / sizeof *arrived; i++) {
            const int64_t order = arrived[i][0], src = arrived[i][1];
            if (order % T != a->index)
                continue;
            df_batch *b = df_batch_new(1);
            assert_non_null(b);
            assert_int_equal(df_batch_set_i64(b, "tag", &order), 0);
            assert_int_equal(df_async_inbox_push(&a->inbox, b, order, 0, src), 0);
        }
        int64_t limit[2] = {-7, -7};
        /* a refill (DAPO's, each false) of 5 takes the job's 5 oldest: 0-4, rank 1's 3 and 4 among them */
        assert_int_equal(df_async_take_limits(a, 5, false, limit), 0);
        assert_int_equal(limit[0], 2);
        assert_int_equal(limit[1], 4);
        assert_int_equal(df_async_take_limits(a, 6, true, limit), 0);
        assert_int_equal(limit[0], 2);
        assert_int_equal(limit[1], 6);
        /* every trainer rank holds one at least (the gathered run waits for that): here its own */
        df_staleness st;
        df_staleness_params p = {.max_staleness = 0, .max_concurrent_rollouts = 12, .consumer_batch_size = 6};
        assert_int_equal(df_staleness_init(&st, &p), 0);
        df_batch *got = NULL;
        assert_int_equal(df_async_inbox_take(&a->inbox, limit, &st, 0, &got), 0);
        int64_t n = 0;
        for (int64_t order = 0; order <= 6; order++)
            n += order != 5 && order % T == a->index;
        assert_int_equal(df_batch_size(got), n);
        df_batch_free(got);
    }
    df_async_free(a);
    df_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_each_rank_share)};
    return cmocka_run_group_tests(tests, df_test_world_setup, df_test_world_teardown);
}
