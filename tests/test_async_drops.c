/*
 * test_async_drops.c — the drop report of the asynchronous runtime (src/workers/dag/async.h
 * df_async_report_drops / df_async_take_drops, tag DF_ASYNC_TAG_DROPPED): a trainer rank that
 * drops episodes as too stale tells their rollout rank, which takes them out of its accepted
 * count (so that admission makes up for them). The counts are made up, so the outcome is exact.
 *
 * mpi-test: np 2 3 4
 * (as a plain ctest, one rank: the job's split is refused, no trainer rank left.)
 *
 * Every trainer rank t reports (t + 1) * (r + 2) drops of rollout rank r: each rollout rank's
 * accepted count must fall by exactly the sum over trainer ranks, a report sent to another rank,
 * lost or sent twice shows as another count (or a timeout). A second round checks that a report
 * is sent once (the trainer's counts are zeroed) and that a rank is never taken below zero
 * accepted (the rest counted as rejected only up to what was accepted).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testmpi.h"

#include "distflow/train_config.h"
#include "util/timeutil.h"
#include "workers/dag/async.h"

#include <time.h>

static df_async *split(int n_rollouts)
{
    char r[64];
    snprintf(r, sizeof r, "rollout.n_gpus_per_node=%d", n_rollouts);
    const char *ov[] = {"actor_rollout_ref.rollout.mode=async", r};
    df_config *cfg = df_test_config("trainer: {total_training_steps: 1}\n", "drops.yaml", ov, 2);
    df_train_config t;
    assert_int_equal(df_train_config_resolve(cfg, &t), 0);
    df_async *a = NULL;
    int rc = df_async_create(&t, W, &a);
    df_config_free(cfg);
    if (rc) {
        assert_null(a);
        return NULL;
    }
    return a;
}

/* Rollout side: take reports until accepted is `want` (or 20 s pass); *bad counts a miss. */
static void take_until(df_async *a, int64_t want, int *bad)
{
    double t0 = df_now();
    while (a->st.accepted != want && df_now() - t0 < 20) {
        assert_int_equal(df_async_take_drops(a), 0);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (a->st.accepted != want)
        print_error("rollout rank %d: accepted %lld, expected %lld\n", a->index, (long long)a->st.accepted,
                    (long long)want), (*bad)++;
}

/* Every rank learns whether any missed (a rank failing alone would leave the others in a barrier). */
static void agree(int bad)
{
    assert_int_equal(df_test_all_max(bad), 0);
}

static void test_report_reaches_its_rank(void **state)
{
    (void)state;
    const int Rn = N >= 3 ? 2 : 1; /* rollout ranks: the last Rn */
    df_async *a = split(N == 1 ? 1 : Rn);
    if (N == 1) {
        assert_null(a);
        assert_last_error_mentions("leave no trainer rank");
        return;
    }
    assert_non_null(a);
    const int T = N - Rn;
    assert_int_equal(a->n_trainers, T);
    int64_t sum = 0; /* what each rollout rank r must lose: sum over t of (t + 1) * (r + 2) */
    for (int t = 0; t < T; t++)
        sum += t + 1;
    int bad = 0;
    if (!a->rollout_side) {
        for (int r = 0; r < Rn; r++)
            a->dropped[r] = (a->index + 1) * (r + 2);
        assert_int_equal(df_async_report_drops(a), 0);
        for (int r = 0; r < Rn; r++)
            bad += a->dropped[r] != 0; /* sent: not reported again */
    } else {
        a->st.accepted = 100;
        take_until(a, 100 - sum * (a->index + 2), &bad);
        bad += a->st.rejected != sum * (a->index + 2);
    }
    agree(bad);
    /* round 2: trainer rank 0 alone, 1000 for the last rollout rank (more than it accepted) */
    if (!a->rollout_side && a->index == 0) {
        a->dropped[Rn - 1] = 1000;
        assert_int_equal(df_async_report_drops(a), 0);
        assert_int_equal(df_async_report_drops(a), 0); /* nothing left to send */
    }
    if (a->rollout_side) {
        const int64_t before = a->st.accepted, rejected = a->st.rejected;
        bool last = a->index == Rn - 1;
        take_until(a, last ? 0 : before, &bad);
        bad += a->st.rejected != rejected + (last ? before : 0);
    }
    agree(bad);
    if (a->rollout_side) { /* nothing else was on its way */
        const int64_t accepted = a->st.accepted;
        assert_int_equal(df_async_take_drops(a), 0);
        bad += a->st.accepted != accepted;
    }
    agree(bad);
    df_async_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_report_reaches_its_rank)};
    return cmocka_run_group_tests(tests, df_test_world_setup, df_test_world_teardown);
}
