/*
 * testmpi.h — the world communicator of tests that also run under mpiexec
 * (a `mpi-test: np ...` line in the test source): W, its rank R and size N,
 * set by the group fixtures df_test_world_setup / df_test_world_teardown
 * (the setup fails on a world whose size is not DF_TEST_EXPECT_SIZE).
 * Include after cmocka.h.
 */
#ifndef DF_TESTS_TESTMPI_H
#define DF_TESTS_TESTMPI_H

#include "distflow/comm.h"
#include "testutil.h"

#include <stdlib.h>

static df_comm *W;
static int R, N;

static int df_test_world_setup(void **state)
{
    (void)state;
    if (df_comm_world(&W) != 0) {
        print_error("df_comm_world: %s\n", df_last_error());
        return -1;
    }
    R = df_comm_rank(W);
    N = df_comm_size(W);
    return df_test_size_ok(N) ? 0 : -1;
}

static int df_test_world_teardown(void **state)
{
    (void)state;
    return df_comm_shutdown();
}

/* max over ranks, so that all ranks assert on the same value */
static inline double df_test_all_max(double x)
{
    assert_int_equal(df_comm_allreduce(W, &x, 1, DF_COMM_FLOAT64, DF_COMM_MAX), 0);
    return x;
}

/* min over ranks */
static inline double df_test_all_min(double x)
{
    return -df_test_all_max(-x);
}

/*
 * Rank r holds count[r] rows and cuts them into local mini-batches of `mbs`.
 * The global batch is laid out in mini-batch order: global mini-batch k is the
 * ranks' k-th local mini-batches, rank by rank. Fills this rank's row indices
 * (*mine, local order) and the global mini-batch bounds (*bounds, *n_mini).
 */
static inline void df_test_dp_layout(const int *count, int64_t mbs, int64_t **mine, int64_t *n_mine,
                                     int64_t *bounds,
                   int *n_mini)
{
    int max_k = 0;
    for (int r = 0; r < N; r++)
        if ((count[r] + mbs - 1) / mbs > max_k)
            max_k = (int)((count[r] + mbs - 1) / mbs);
    *mine = malloc((size_t)(count[R] + 1) * sizeof **mine);
    *n_mine = 0;
    int64_t g = 0;
    bounds[0] = 0;
    for (int k = 0; k < max_k; k++) {
        for (int r = 0; r < N; r++)
            for (int64_t j = k * mbs; j < (k + 1) * mbs && j < count[r]; j++, g++)
                if (r == R)
                    (*mine)[(*n_mine)++] = g;
        bounds[k + 1] = g;
    }
    *n_mini = max_k;
}

#endif
