/*
 * testmpi.h — the world communicator of tests that also run under mpiexec
 * (a `mpi-test: np ...` line in the test source): W, its rank R and size N,
 * set by the group fixtures df_test_world_setup / df_test_world_teardown.
 * Include after cmocka.h.
 */
#ifndef DF_TESTS_TESTMPI_H
#define DF_TESTS_TESTMPI_H

#include "distflow/comm.h"

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
    return 0;
}

static int df_test_world_teardown(void **state)
{
    (void)state;
    return df_comm_shutdown();
}

#endif
