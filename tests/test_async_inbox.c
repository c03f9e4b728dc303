/*
 * test_async_inbox.c — a trainer rank's inbox of the asynchronous runtime (src/workers/dag/async.h),
 * on hand-made episodes: the staleness check at consumption drops exactly the episodes more than
 * max_staleness versions behind and counts them per sender, the others keep their arrival order
 * and are counted in the version-gap statistics once, when taken (not at every check while the
 * trainer waits), and a take returns the oldest (smallest order) episodes in prompt order; the
 * groups a DAPO filter rejects are counted per rollout rank, and that report gives the rollout
 * side's admission room for as many.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "workers/dag/async.h"

/* A one-row episode whose `tag` column holds its order. */
static df_batch *episode(int64_t order)
{
    df_batch *b = df_batch_new(1);
    assert_non_null(b);
    assert_int_equal(df_batch_set_i64(b, "tag", &order), 0);
    return b;
}

static void test_drop_and_take(void **state)
{
    (void)state;
    df_staleness st;
    df_staleness_params p = {.max_staleness = 1, .max_concurrent_rollouts = 8, .consumer_batch_size = 4};
    assert_int_equal(df_staleness_init(&st, &p), 0);
    df_async_inbox in = {0};
    /* arrival order: orders 4 1 3 0 2 5, oldest token versions 2 0 3 1 2 3, senders 0 1 0 1 1 0 */
    const int64_t order[] = {4, 1, 3, 0, 2, 5}, version[] = {2, 0, 3, 1, 2, 3}, src[] = {0, 1, 0, 1, 1, 0};
    for (int i = 0; i < 6; i++)
        assert_int_equal(df_async_inbox_push(&in, episode(order[i]), order[i], version[i], src[i]), 0);
    /* at trainer version 3 with max_staleness 1: versions 0 and 1 (gaps 3 and 2) go, both from sender 1 */
    int64_t dropped[2] = {0, 0};
    assert_int_equal(df_async_inbox_drop_stale(&in, &st, 3, dropped), 0);
    assert_int_equal(dropped[0], 0);
    assert_int_equal(dropped[1], 2);
    assert_int_equal(st.dropped_stale, 2);
    assert_int_equal(st.gap_max, 3);
    assert_int_equal(in.n, 4);
    /* the kept ones are not counted yet, however often the trainer checks while it waits */
    assert_int_equal(st.consumed, 2);
    assert_int_equal(df_async_inbox_drop_stale(&in, &st, 3, dropped), 0);
    assert_int_equal(st.consumed, 2);
    assert_int_equal(st.gap_sum, 5);
    const int64_t left[] = {4, 3, 2, 5}; /* arrival order kept */
    for (int i = 0; i < 4; i++)
        assert_int_equal(in.order[i], left[i]);
    /* each sender's own limit: of sender 0's up to order 3, none of sender 1's (its 2 stays although
       older: another rollout rank's share) */
    df_batch *b = NULL;
    const int64_t only0[2] = {3, INT64_MIN};
    assert_int_equal(df_async_inbox_take(&in, only0, &st, 3, &b), 0);
    assert_int_equal(st.consumed, 3); /* counted once, as taken: gap 0 (version 3) */
    assert_int_equal(st.gap_sum, 5);
    assert_int_equal(df_batch_size(b), 1);
    assert_int_equal(df_batch_i64(b, "tag")[0], 3);
    df_batch_free(b);
    assert_int_equal(in.n, 3);
    /* both senders' episodes come out as one batch in prompt order: 2 (sender 1), 4, 5 (sender 0) */
    const int64_t both[2] = {5, 2};
    assert_int_equal(df_async_inbox_take(&in, both, &st, 3, &b), 0);
    assert_int_equal(st.consumed, 6); /* gaps 1 (order 2, version 2), 1 (order 4), 0 (order 5) */
    assert_int_equal(st.gap_sum, 7);
    assert_int_equal(df_batch_size(b), 3);
    const int64_t in_order[3] = {2, 4, 5};
    for (int i = 0; i < 3; i++)
        assert_int_equal(df_batch_i64(b, "tag")[i], in_order[i]);
    df_batch_free(b);
    assert_int_equal(in.n, 0);
    /* none: no rows, the columns of those waiting */
    assert_int_equal(df_async_inbox_push(&in, episode(9), 9, 3, 1), 0);
    const int64_t none[2] = {INT64_MIN, 8};
    assert_int_equal(df_async_inbox_take(&in, none, &st, 3, &b), 0);
    assert_int_equal(df_batch_size(b), 0);
    assert_true(df_batch_has(b, "tag"));
    df_batch_free(b);
    assert_int_equal(in.n, 1);
    df_async_inbox_clear(&in);
    assert_int_equal(df_async_inbox_take(&in, none, &st, 3, &b), DF_EINVAL); /* empty */
}

/* DAPO's filter in mode=async: the groups it throws away are counted per rollout rank that made
 * them (the rows' rollout_rank), once per group, and the rollout side's account of that report
 * admits exactly as many new episodes as were rejected. */
static void test_rejected_groups(void **state)
{
    (void)state;
    /* groups a (rank 1, kept), b (rank 0, dropped), c (rank 1, dropped), d (rank 1, one row kept:
       trained on), e (rank 0, dropped); rows of a group need not be consecutive */
    const char *uid[] = {"a", "a", "b", "b", "c", "c", "d", "d", "e", "e"};
    const int64_t src[] = {1, 1, 0, 0, 1, 1, 1, 1, 0, 0};
    df_batch *b = df_batch_new(10);
    assert_int_equal(df_batch_set_str(b, "uid", uid), 0);
    assert_int_equal(df_batch_set_i64(b, DF_ASYNC_SOURCE_COLUMN, src), 0);
    const int64_t keep[] = {0, 1, 7};
    int64_t per[2] = {0, 0};
    assert_int_equal(df_async_count_rejected(b, keep, 3, 2, per), 0);
    assert_int_equal(per[0], 2); /* b, e */
    assert_int_equal(per[1], 1); /* c */
    /* added to what was there; an empty batch counts nothing */
    df_batch *none = df_batch_new(0);
    assert_int_equal(df_async_count_rejected(none, NULL, 0, 2, per), 0);
    assert_int_equal(per[0] + per[1], 3);
    df_batch_free(none);
    /* a source outside the rollout ranks, a missing column */
    assert_error_mentions(df_async_count_rejected(b, keep, 3, 1, per), DF_EINVAL, "rollout rank 1 of 1");
    assert_int_equal(per[0] + per[1], 3); /* unchanged */
    df_batch_drop(b, DF_ASYNC_SOURCE_COLUMN);
    assert_error_mentions(df_async_count_rejected(b, keep, 3, 2, per), DF_EINVAL, "rollout_rank");
    df_batch_free(b);

    /* the rollout side at max_staleness 0, 4 episodes per batch, all 4 of version 0 sent: no room
       until the trainer's next version; the 3 rejected make room for 3 */
    df_staleness st;
    df_staleness_params p = {.max_staleness = 0, .max_concurrent_rollouts = 8, .consumer_batch_size = 4};
    assert_int_equal(df_staleness_init(&st, &p), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(df_staleness_submit(&st, 0), 0);
        assert_int_equal(df_staleness_accept(&st), 0);
    }
    assert_int_equal(df_staleness_capacity(&st, 0), 0);
    df_async_unaccept(&st, per[0] + per[1]);
    assert_int_equal(df_staleness_capacity(&st, 0), 3);
    assert_int_equal(st.accepted, 1);
    assert_int_equal(st.rejected, 3);
    df_async_unaccept(&st, 5); /* never below none accepted */
    assert_int_equal(st.accepted, 0);
    assert_int_equal(st.rejected, 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_drop_and_take), cmocka_unit_test(test_rejected_groups)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
