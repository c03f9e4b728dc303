/*
 * test_cuda_nccl.c — the gradient all-reduce and the coordinator's all-to-all over NCCL
 * (src/backend/cuda/nccl.cu): a
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

/* Byte j of the block rank s sends rank d: a function of (s, d, j), so a block in the wrong
 * place, cut short or shifted is seen. */
static unsigned char byte_of(int s, int d, int64_t j)
{
    return (unsigned char)(s * 37 + d * 11 + j * 7 + 1);
}

/* The block rank s sends rank d: uneven, and empty from rank 0 to rank 1. */
static int64_t block_of(int s, int d)
{
    return s == 0 && d == 1 ? 0 : (int64_t)(s + 1) * 1000 + d * 333 + 1;
}

/* The coordinator's payload all-to-all: every block at its place, with its bytes. */
static void test_alltoallv(void **state)
{
    (void)state;
    df_cuda_nccl *n = NULL;
    DFCT_OK(df_cuda_nccl_create(dfct_cu, W, &n));
    const int rank = df_comm_rank(W), size = df_comm_size(W);
    int64_t sc[16], rc[16], st = 0, rt = 0;
    assert_true(size <= 16);
    for (int p = 0; p < size; p++) {
        st += sc[p] = block_of(rank, p);
        rt += rc[p] = block_of(p, rank);
    }
    unsigned char *h = malloc((size_t)st), *o = h;
    for (int p = 0; p < size; p++)
        for (int64_t j = 0; j < sc[p]; j++)
            *o++ = byte_of(rank, p, j);
    void *ds = dfct_up(h, (size_t)st), *dr = dfct_alloc((size_t)rt);
    DFCT_OK(df_cuda_nccl_alltoallv(n, ds, sc, dr, rc));
    unsigned char *got = dfct_down(dr, (size_t)rt), *g = got;
    for (int p = 0; p < size; p++)
        for (int64_t j = 0; j < rc[p]; j++, g++)
            if (*g != byte_of(p, rank, j))
                fail_msg("rank %d, from %d, byte %lld: %d, expected %d", rank, p, (long long)j, *g,
                         byte_of(p, rank, j));
    assert_int_equal(df_cuda_nccl_alltoallv(n, ds, NULL, dr, rc), DF_EINVAL);
    free(h);
    free(got);
    dfct_free(ds);
    dfct_free(dr);
    df_cuda_nccl_free(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_allreduce_sum),
                                       cmocka_unit_test(test_alltoallv)};
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
        rc = cmocka_run_group_tests_name("test_cuda_nccl", tests, NULL, NULL);
        df_cuda_free(dfct_cu);
    }
    df_test_world_teardown(NULL);
    return rc;
}
