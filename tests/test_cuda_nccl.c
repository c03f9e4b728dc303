/*
 * test_cuda_nccl.c — the gradient all-reduce over NCCL (src/backend/cuda/nccl.cu): a
 * communicator made from the world's process group, one GPU per rank (the node-local rank picks
 * it). Each rank contributes (rank + 1) * (i % 7) to element i, so the sum is
 * N (N + 1) / 2 * (i % 7): small integers, exact in float32. Without a GPU, or with fewer GPUs
 * than ranks (NCCL refuses two ranks on one device): a SKIP line and exit 77.
 *
 * mpi-test: np 2
 */
#include "cuda_testutil.h"
#include "testmpi.h"

static void test_allreduce_sum(void **state)
{
    (void)state;
    df_cuda_nccl *n = NULL;
    DFCT_OK(df_cuda_nccl_create(dfct_cu, W, &n));
    assert_int_equal(df_cuda_nccl_size(n), df_comm_size(W));
    enum { COUNT = (1 << 20) + 3 };
    float *h = malloc(sizeof(float) * COUNT);
    assert_non_null(h);
    const int rank = df_comm_rank(W), size = df_comm_size(W);
    for (int i = 0; i < COUNT; i++)
        h[i] = (float)((rank + 1) * (i % 7));
    float *d = dfct_up(h, sizeof(float) * COUNT);
    DFCT_OK(df_cuda_nccl_allreduce_sum(n, d, COUNT));
    float *got = dfct_down(d, sizeof(float) * COUNT);
    const float tri = (float)(size * (size + 1) / 2);
    for (int i = 0; i < COUNT; i++)
        if (got[i] != tri * (float)(i % 7))
            fail_msg("rank %d element %d: %g, expected %g", rank, i, (double)got[i], (double)(tri * (i % 7)));
    DFCT_OK(df_cuda_nccl_allreduce_sum(n, d, 0)); /* nothing to do */
    assert_int_equal(df_cuda_nccl_allreduce_sum(n, d, -1), DF_EINVAL);
    free(h);
    free(got);
    dfct_free(d);
    df_cuda_nccl_free(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_allreduce_sum)};
    if (df_test_world_setup(NULL))
        return 1;
    int n = 0, dev = 0;
    df_cuda_device_count(&n);
    int rc = 77;
    if (n == 0)
        printf("SKIP: test_cuda_nccl: no CUDA device on this machine\n");
    else if (df_comm_size(W) > n)
        printf("SKIP: test_cuda_nccl: %d ranks but %d GPU(s): NCCL needs one GPU per rank\n", df_comm_size(W), n);
    else if (df_cuda_local_device(&dev) || df_cuda_create(dev, &dfct_cu))
        rc = fprintf(stderr, "test_cuda_nccl: %s\n", df_last_error()) > 0;
    else {
        rc = _cmocka_run_group_tests("test_cuda_nccl", tests, 1, NULL, NULL);
        df_cuda_free(dfct_cu);
    }
    df_test_world_teardown(NULL);
    return rc;
}
