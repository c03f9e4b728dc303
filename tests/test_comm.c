/*
 * test_comm.c — the comm layer. Runs as a plain ctest (single backend, or MPI
 * with one rank) and again under `mpiexec -np 2/3/4` (the mpi-test line below), where
 * every rank checks rank-dependent inputs against closed-form results.
 * mpi-test: np 2 3 4
 * DF_TEST_EXPECT_SIZE (set by the mpiexec tests) makes a world of the wrong
 * size fail (df_test_world_setup) instead of passing trivially as one rank.
 */
/* rounding-free (scripts/test-variants.sh skips it): sums of multiples of 1/4, exact in float32 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "testmpi.h"
#include "testutil.h"

#include "comm/comm_internal.h"
#include "distflow/comm.h"

static void test_world(void **state)
{
    assert_true(N >= 1);
    assert_true(R >= 0 && R < N);
    if (N > 1)
        assert_int_equal(df_comm_backend_of(W), DF_COMM_MPI);
    df_comm *again = NULL;
    assert_int_equal(df_comm_world(&again), 0);
    assert_ptr_equal(again, W);
    df_comm_free(W); /* the world is borrowed: a no-op */
    assert_int_equal(df_comm_barrier(W), 0);
}

static void test_broadcast(void **state)
{
    int root = N - 1;
    unsigned char buf[37];
    for (int i = 0; i < 37; i++)
        buf[i] = R == root ? (unsigned char)(i * 7 + 3) : 0;
    assert_int_equal(df_comm_broadcast(W, buf, 37, root), 0);
    for (int i = 0; i < 37; i++)
        assert_int_equal(buf[i], (unsigned char)(i * 7 + 3));
    assert_int_equal(df_comm_broadcast(W, NULL, 0, 0), 0);

    assert_error_mentions(df_comm_broadcast(W, buf, 37, N), DF_EINVAL, "broadcast");
    assert_last_error_mentions("root");
    assert_int_equal(df_comm_broadcast(W, buf, -1, 0), DF_EINVAL);
}

static void test_allreduce_float(void **state)
{
    enum { n = 5 };
    float f[n], fmx[n], fmn[n];
    double d[n];
    for (int i = 0; i < n; i++) {
        f[i] = fmx[i] = fmn[i] = (float)R + 0.5f * (float)i;
        d[i] = 0.25 * R * R - i;
    }
    assert_int_equal(df_comm_allreduce(W, f, n, DF_COMM_FLOAT32, DF_COMM_SUM), 0);
    assert_int_equal(df_comm_allreduce(W, fmx, n, DF_COMM_FLOAT32, DF_COMM_MAX), 0);
    assert_int_equal(df_comm_allreduce(W, fmn, n, DF_COMM_FLOAT32, DF_COMM_MIN), 0);
    assert_int_equal(df_comm_allreduce(W, d, n, DF_COMM_FLOAT64, DF_COMM_SUM), 0);
    double sum_r = N * (N - 1) / 2.0, sum_r2 = (N - 1.0) * N * (2.0 * N - 1) / 6.0;
    /* every term, partial sum and total is a small multiple of 1/4 (below 2^24 / 4): exact in
       float32 and double whatever order the reduction adds in, so compared exactly */
    for (int i = 0; i < n; i++) {
        assert_near(f[i], sum_r + N * 0.5 * i, 0);
        assert_near(fmx[i], (N - 1) + 0.5 * i, 0);
        assert_near(fmn[i], 0.5 * i, 0);
        assert_near(d[i], 0.25 * sum_r2 - (double)N * i, 0);
    }
}

static void test_allreduce_int64(void **state)
{
    const int64_t T = 1000000000000LL; /* beyond int32: checks the 64-bit type */
    int64_t s[3], mx[3], mn[3];
    for (int i = 0; i < 3; i++)
        s[i] = mx[i] = mn[i] = (R + 1) * T + i - 7 * R;
    assert_int_equal(df_comm_allreduce(W, s, 3, DF_COMM_INT64, DF_COMM_SUM), 0);
    assert_int_equal(df_comm_allreduce(W, mx, 3, DF_COMM_INT64, DF_COMM_MAX), 0);
    assert_int_equal(df_comm_allreduce(W, mn, 3, DF_COMM_INT64, DF_COMM_MIN), 0);
    int64_t n = N;
    for (int i = 0; i < 3; i++) {
        assert_true(s[i] == T * n * (n + 1) / 2 + n * i - 7 * n * (n - 1) / 2);
        assert_true(mx[i] == n * T + i - 7 * (n - 1));
        assert_true(mn[i] == T + i);
    }
    assert_int_equal(df_comm_allreduce(W, NULL, 0, DF_COMM_INT64, DF_COMM_SUM), 0);
    assert_error_mentions(df_comm_allreduce(W, s, 3, (df_comm_dtype)9, DF_COMM_SUM), DF_EINVAL, "allreduce");
    assert_last_error_mentions("dtype");
    assert_int_equal(df_comm_allreduce(W, s, 3, DF_COMM_INT64, (df_comm_op)9), DF_EINVAL);
    assert_int_equal(df_comm_allreduce(W, s, -2, DF_COMM_INT64, DF_COMM_SUM), DF_EINVAL);
}

static void test_allgather(void **state)
{
    unsigned char send[3] = {(unsigned char)R, (unsigned char)(R + 100), (unsigned char)(2 * R)};
    unsigned char *recv = malloc((size_t)N * 3);
    assert_int_equal(df_comm_allgather(W, send, 3, recv), 0);
    for (int r = 0; r < N; r++) {
        assert_int_equal(recv[3 * r], r);
        assert_int_equal(recv[3 * r + 1], r + 100);
        assert_int_equal(recv[3 * r + 2], 2 * r);
    }
    assert_error_mentions(df_comm_allgather(W, send, (int64_t)INT_MAX + 1, recv), DF_EINVAL, "allgather");
    assert_last_error_mentions("INT_MAX");
    free(recv);
}

/* Chunked broadcast / allreduce (chunks of 3 elements stand in for INT_MAX):
 * 10 elements = chunks of 3, 3, 3, 1, each landing at its own offset. */
static void test_chunked(void **state)
{
    df_comm_set_max_chunk(W, 3);
    double d[10];
    unsigned char b[10];
    for (int i = 0; i < 10; i++) {
        d[i] = (R + 1) * (i + 1);
        b[i] = R == 0 ? (unsigned char)(200 + i) : 0;
    }
    int rc1 = df_comm_allreduce(W, d, 10, DF_COMM_FLOAT64, DF_COMM_SUM);
    int rc2 = df_comm_broadcast(W, b, 10, 0);
    df_comm_set_max_chunk(W, 0); /* back to INT_MAX */
    assert_int_equal(rc1, 0);
    assert_int_equal(rc2, 0);
    for (int i = 0; i < 10; i++) {
        assert_near(d[i], (double)N * (N + 1) / 2 * (i + 1), 0);
        assert_int_equal(b[i], 200 + i);
    }
}

/* Rank r contributes r+1 bytes when r is even, nothing when odd. */
static void test_allgatherv(void **state)
{
    int64_t mine = R % 2 == 0 ? R + 1 : 0;
    unsigned char send[8];
    for (int k = 0; k < 8; k++)
        send[k] = (unsigned char)(R * 10 + k);
    void *recv = NULL;
    int64_t *counts = NULL, *displs = NULL;
    assert_int_equal(df_comm_allgatherv(W, mine ? send : NULL, mine, &recv, &counts, &displs), 0);
    int64_t off = 0;
    for (int r = 0; r < N; r++) {
        int64_t want = r % 2 == 0 ? r + 1 : 0;
        assert_true(counts[r] == want);
        assert_true(displs[r] == off);
        for (int k = 0; k < want; k++)
            assert_int_equal(((unsigned char *)recv)[off + k], r * 10 + k);
        off += want;
    }
    free(recv);
    free(counts);
    free(displs);

    /* everyone empty: a valid, empty result */
    recv = NULL;
    assert_int_equal(df_comm_allgatherv(W, NULL, 0, &recv, &counts, NULL), 0);
    assert_non_null(recv);
    for (int r = 0; r < N; r++)
        assert_true(counts[r] == 0);
    free(recv);
    free(counts);
}

/* The byte counts are checked before any payload moves, so a small buffer
 * can claim a huge size: every rank must get the same error. */
static void test_allgatherv_overflow(void **state)
{
    char small[4] = {0};
    void *recv = (void *)1;
    int64_t each = (int64_t)INT_MAX / N + 1; /* N * each > INT_MAX for every N */
    assert_int_equal(df_comm_allgatherv(W, small, each, &recv, NULL, NULL), DF_EINVAL);
    assert_null(recv);
    assert_last_error_mentions("allgatherv");
    assert_last_error_mentions("INT_MAX");
    /* one rank alone too big */
    assert_int_equal(df_comm_allgatherv(W, small, R == 0 ? (int64_t)INT_MAX + 5 : 1, &recv, NULL, NULL),
                     DF_EINVAL);
    assert_int_equal(df_comm_allgatherv(W, NULL, 3, &recv, NULL, NULL), DF_EINVAL);
    /* the communicator still works afterwards */
    int64_t x = 1;
    assert_int_equal(df_comm_allreduce(W, &x, 1, DF_COMM_INT64, DF_COMM_SUM), 0);
    assert_true(x == N);
}

/* Rank s sends (s + 2d) % 3 bytes to rank d (uneven, some zero), byte k of
 * the block being 16s + 4d + k. */
static void test_alltoallv(void **state)
{
    int64_t *sc = malloc((size_t)N * sizeof *sc);
    unsigned char *send = malloc((size_t)N * 3 + 1);
    int64_t off = 0;
    for (int d = 0; d < N; d++) {
        sc[d] = (R + 2 * d) % 3;
        for (int k = 0; k < sc[d]; k++)
            send[off + k] = (unsigned char)(16 * R + 4 * d + k);
        off += sc[d];
    }
    void *recv = NULL;
    int64_t *rc = NULL, *rd = NULL;
    assert_int_equal(df_comm_alltoallv(W, send, sc, &recv, &rc, &rd), 0);
    int64_t roff = 0;
    for (int s = 0; s < N; s++) {
        int64_t want = (s + 2 * R) % 3;
        assert_true(rc[s] == want);
        assert_true(rd[s] == roff);
        for (int k = 0; k < want; k++)
            assert_int_equal(((unsigned char *)recv)[roff + k], 16 * s + 4 * R + k);
        roff += want;
    }
    free(recv);
    free(rc);
    free(rd);

    /* nothing to anyone */
    for (int d = 0; d < N; d++)
        sc[d] = 0;
    recv = NULL;
    assert_int_equal(df_comm_alltoallv(W, NULL, sc, &recv, &rc, NULL), 0);
    assert_non_null(recv);
    for (int s = 0; s < N; s++)
        assert_true(rc[s] == 0);
    free(recv);
    free(rc);

    /* rank 0 claims more than INT_MAX bytes for the last rank: all fail */
    sc[N - 1] = R == 0 ? (int64_t)INT_MAX + 1 : 0;
    assert_int_equal(df_comm_alltoallv(W, send, sc, &recv, NULL, NULL), DF_EINVAL);
    assert_null(recv);
    assert_last_error_mentions("alltoallv");
    assert_last_error_mentions("INT_MAX");
    sc[N - 1] = -1;
    assert_error_mentions(df_comm_alltoallv(W, send, sc, &recv, NULL, NULL), DF_EINVAL, "negative");
    assert_int_equal(df_comm_alltoallv(W, send, NULL, &recv, NULL, NULL), DF_EINVAL);
    free(sc);
    free(send);
}

/* Even and odd ranks form two groups, each ordered by descending parent rank. */
static void test_split(void **state)
{
    df_comm *g = NULL;
    assert_int_equal(df_comm_split(W, R % 2, -R, &g), 0);
    assert_non_null(g);
    int same = (N - R % 2 + 1) / 2; /* ranks of my parity */
    int above = 0;                  /* ranks of my parity above me */
    for (int r = R + 1; r < N; r++)
        above += r % 2 == R % 2;
    assert_int_equal(df_comm_size(g), same);
    assert_int_equal(df_comm_rank(g), above);
    int64_t v = R;
    assert_int_equal(df_comm_allreduce(g, &v, 1, DF_COMM_INT64, DF_COMM_SUM), 0);
    int64_t want = 0;
    for (int r = R % 2; r < N; r += 2)
        want += r;
    assert_true(v == want);
    /* a split of the split: everyone in g alone */
    df_comm *solo = NULL;
    assert_int_equal(df_comm_split(g, df_comm_rank(g), 0, &solo), 0);
    assert_int_equal(df_comm_size(solo), 1);
    df_comm_free(solo);
    df_comm_free(g);

    /* rank 0 opts out */
    g = (df_comm *)1;
    assert_int_equal(df_comm_split(W, R == 0 ? DF_COMM_UNDEFINED : 0, 0, &g), 0);
    if (R == 0) {
        assert_null(g);
    } else {
        assert_int_equal(df_comm_size(g), N - 1);
        assert_int_equal(df_comm_rank(g), R - 1);
        df_comm_free(g);
    }
    assert_error_mentions(df_comm_split(W, -5, 0, &g), DF_EINVAL, "split");
    assert_last_error_mentions("color -5");
}

/* The even ranks, listed in descending order. */
static void test_from_ranks(void **state)
{
    int ranks[8], n = 0;
    for (int r = N - 1; r >= 0; r--)
        if (r % 2 == 0)
            ranks[n++] = r;
    df_comm *g = (df_comm *)1;
    assert_int_equal(df_comm_from_ranks(W, ranks, n, &g), 0);
    if (R % 2 == 1) {
        assert_null(g);
    } else {
        assert_non_null(g);
        assert_int_equal(df_comm_size(g), n);
        int top = (N - 1) / 2 * 2; /* largest even rank: child rank 0 */
        assert_int_equal(df_comm_rank(g), (top - R) / 2);
        int64_t v = 100 + R;
        assert_int_equal(df_comm_broadcast(g, &v, sizeof v, 0), 0);
        assert_true(v == 100 + ranks[0]);
        df_comm_free(g);
    }
    int dup[2] = {0, 0};
    assert_error_mentions(df_comm_from_ranks(W, dup, 2, &g), DF_EINVAL, "twice");
    int bad[1] = {N};
    assert_error_mentions(df_comm_from_ranks(W, bad, 1, &g), DF_EINVAL, "from_ranks");
    assert_last_error_mentions("not a rank");
    assert_int_equal(df_comm_from_ranks(W, ranks, 0, &g), DF_EINVAL);
}

/* trainer.collective_timeout_s: with every rank there a collective completes as usual; the last
 * rank 2 s late makes the others give up after 0.3 s, naming the collective; the group then refuses
 * collectives until settled (the late rank's arrival completes the abandoned one), and groups made
 * from it inherit the timeout. */
static void test_timeout(void **state)
{
    (void)state;
    df_comm *g = NULL, *child = NULL;
    assert_int_equal(df_comm_split(W, 0, R, &g), 0);
    df_comm_set_timeout(g, 0.3);
    assert_int_equal(df_comm_split(g, 0, R, &child), 0);
    assert_true(child->timeout_s == 0.3);
    df_comm_free(child);
    double v = 1;
    df_comm_set_timeout(g, 60); /* the collectives that must succeed: no loaded machine misses it */
    assert_int_equal(df_comm_allreduce(g, &v, 1, DF_COMM_FLOAT64, DF_COMM_SUM), 0);
    assert_true(v == N);
    df_comm_set_timeout(g, 0.3);
    if (N > 1) {
        if (R == N - 1) {
            struct timespec late = {2, 0};
            nanosleep(&late, NULL);
            assert_int_equal(df_comm_barrier(g), 0);
        } else {
            assert_error_mentions(df_comm_barrier(g), DF_EINTERNAL, "barrier");
            assert_last_error_mentions("(trainer.collective_timeout_s): a rank of this group");
            assert_error_mentions(df_comm_allreduce(g, &v, 1, DF_COMM_FLOAT64, DF_COMM_SUM), DF_EINTERNAL,
                                  "timed out and was abandoned");
            assert_int_equal(df_comm_settle(g), 0);
        }
        /* usable again: a deadline no descheduling on a loaded machine reaches */
        df_comm_set_timeout(g, 60);
        v = 1;
        assert_int_equal(df_comm_allreduce(g, &v, 1, DF_COMM_FLOAT64, DF_COMM_SUM), 0);
        assert_true(v == N);
    }
    assert_int_equal(df_comm_settle(g), 0); /* nothing abandoned: at once */
    df_comm_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_world),           cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_allreduce_float), cmocka_unit_test(test_allreduce_int64),
        cmocka_unit_test(test_allgather),       cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_allgatherv),      cmocka_unit_test(test_allgatherv_overflow),
        cmocka_unit_test(test_alltoallv),       cmocka_unit_test(test_split),
        cmocka_unit_test(test_from_ranks),      cmocka_unit_test(test_timeout),
    };
    return cmocka_run_group_tests(tests, df_test_world_setup, df_test_world_teardown);
}
