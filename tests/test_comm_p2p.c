/*
 * test_comm_p2p.c — point-to-point and non-blocking communication: send / isend / probe / recv,
 * ibroadcast, and requests (test, wait, free), with the comm's timeout. Runs as a plain ctest
 * (the single backend: a rank sends to itself) and under mpiexec, where rank 1 talks to rank 0
 * (and every rank but 0 sends to rank 0 in the any-source test).
 * mpi-test: np 2 3
 */
/* rounding-free (scripts/test-variants.sh skips it): point-to-point bytes, no arithmetic */
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

/* The pair the tests use: the sender (rank 1, or rank 0 alone) and the receiver (rank 0). */
#define SND (N > 1 ? 1 : 0)
#define RCV 0

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Poll df_comm_probe until a message from `from` (or any) on tag is there; fails after 20 s, so a
 * broken peer fails the test instead of hanging it. *src, *n: its sender and size. */
static void probe_until(int from, int tag, int *src, int64_t *n)
{
    const time_t give_up = time(NULL) + 20;
    bool found = false;
    while (!found) {
        assert_int_equal(df_comm_probe(W, from, tag, &found, src, n), 0);
        if (time(NULL) > give_up)
            fail_msg("no message from %d on tag %d after 20 s", from, tag);
    }
}

/* from -> to, n bytes on tag: from isends (so a rank sending itself can receive before it waits),
 * to probes for the size and receives. */
static void move(int from, int to, const void *src, void *dst, int64_t n, int tag)
{
    df_comm_request *req = NULL;
    if (R == from)
        assert_int_equal(df_comm_isend(W, src, n, to, tag, &req), 0);
    if (R == to) {
        int s = -1;
        int64_t got = -1;
        probe_until(from, tag, &s, &got);
        assert_int_equal(s, from);
        assert_true(got == n);
        assert_int_equal(df_comm_recv(W, dst, n, from, tag), 0);
    }
    assert_int_equal(df_comm_wait(&req), 0);
    assert_null(req);
}

/* Sizes 0, 1 and 1 MiB there and back; the pong is the ping plus one, byte by byte. */
static void test_pingpong(void **state)
{
    static const int64_t sizes[] = {0, 1, 1 << 20};
    for (int i = 0; i < 3; i++) {
        int64_t n = sizes[i];
        unsigned char *ping = malloc((size_t)n + 1), *got = malloc((size_t)n + 1),
                      *back = malloc((size_t)n + 1);
        for (int64_t k = 0; k < n; k++)
            ping[k] = (unsigned char)(k * 13 + i);
        move(SND, RCV, ping, got, n, 1);
        if (R == RCV)
            for (int64_t k = 0; k < n; k++)
                got[k]++;
        move(RCV, SND, got, back, n, 2);
        if (R == SND)
            for (int64_t k = 0; k < n; k++)
                if (back[k] != (unsigned char)(ping[k] + 1))
                    fail_msg("size %lld: byte %lld came back as %d", (long long)n, (long long)k, back[k]);
        free(ping);
        free(got);
        free(back);
    }
    /* the blocking send: to another rank (a world of one cannot send itself without isend) */
    if (N > 1) {
        char msg[6] = "hello", in[6] = {0};
        if (R == SND)
            assert_int_equal(df_comm_send(W, msg, 6, RCV, 3), 0);
        if (R == RCV) {
            assert_int_equal(df_comm_recv(W, in, 6, SND, 3), 0);
            assert_string_equal(in, "hello");
        }
    }
    assert_int_equal(df_comm_barrier(W), 0);
}

/* Every rank but 0 (rank 0 alone: itself) sends rank 0 r + 3 bytes of value r on one tag; rank 0
 * takes them in whatever order they come, by probing any source. */
static void test_any_source(void **state)
{
    enum { TAG = 5 };
    unsigned char mine[8];
    memset(mine, R, sizeof mine);
    df_comm_request *req = NULL;
    if (R != 0 || N == 1)
        assert_int_equal(df_comm_isend(W, mine, R + 3, 0, TAG, &req), 0);
    if (R == 0) {
        int senders = N > 1 ? N - 1 : 1, seen = 0;
        bool from[8] = {false};
        while (seen < senders) {
            bool found = false;
            int src = -1, src2 = -1;
            int64_t n = -1, n2 = -1;
            probe_until(DF_COMM_ANY_SOURCE, TAG, &src, &n);
            /* probing again names the same message until it is received */
            assert_int_equal(df_comm_probe(W, DF_COMM_ANY_SOURCE, TAG, &found, &src2, &n2), 0);
            assert_true(found && src2 == src && n2 == n);
            assert_true(src >= 0 && src < N && !from[src]);
            assert_true(n == src + 3);
            unsigned char in[8] = {0};
            assert_int_equal(df_comm_recv(W, in, n, src, TAG), 0);
            for (int k = 0; k < n; k++)
                assert_int_equal(in[k], src);
            from[src] = true;
            seen++;
        }
        bool found = true;
        assert_int_equal(df_comm_probe(W, DF_COMM_ANY_SOURCE, TAG, &found, NULL, NULL), 0);
        assert_false(found);
    }
    assert_int_equal(df_comm_wait(&req), 0);
    assert_int_equal(df_comm_barrier(W), 0);
}

/* Six messages on one tag arrive in send order (different sizes, so a swap shows), and a message
 * on another tag sent between them does not get in their way. */
static void test_ordering(void **state)
{
    enum { K = 6, TAG = 7, OTHER = 8 };
    unsigned char out[K][K + 1], other = 99;
    df_comm_request *reqs[K + 1] = {NULL};
    if (R == SND)
        for (int k = 0; k < K; k++) {
            memset(out[k], 10 + k, sizeof out[k]);
            assert_int_equal(df_comm_isend(W, out[k], k + 1, RCV, TAG, &reqs[k]), 0);
            if (k == 2)
                assert_int_equal(df_comm_isend(W, &other, 1, RCV, OTHER, &reqs[K]), 0);
        }
    if (R == RCV) {
        for (int k = 0; k < K; k++) {
            int64_t n = -1;
            probe_until(SND, TAG, NULL, &n);
            assert_true(n == k + 1);
            unsigned char in[K + 1] = {0};
            assert_int_equal(df_comm_recv(W, in, n, SND, TAG), 0);
            for (int j = 0; j <= k; j++)
                assert_int_equal(in[j], 10 + k);
        }
        unsigned char o = 0;
        assert_int_equal(df_comm_recv(W, &o, 1, SND, OTHER), 0);
        assert_int_equal(o, 99);
    }
    for (int k = 0; k <= K; k++)
        assert_int_equal(df_comm_wait(&reqs[k]), 0);
    assert_int_equal(df_comm_barrier(W), 0);
}

/* Chunks of 7 bytes stand in for INT_MAX: 100 bytes go as 15 data messages, 14 as exactly 2 and
 * 0 as none. Only the sender lowers its chunk: the receiver reads it from the header. Then a
 * 50-byte ibroadcast in chunks of 7 (every rank lowers it, as for df_comm_broadcast). */
static void test_chunked(void **state)
{
    static const int64_t sizes[] = {100, 14, 0, 7};
    unsigned char out[100], in[100];
    for (int i = 0; i < 100; i++)
        out[i] = (unsigned char)(3 * i + 1);
    if (R == SND)
        df_comm_set_max_chunk(W, 7);
    for (int i = 0; i < 4; i++) {
        memset(in, 0, sizeof in);
        move(SND, RCV, out, in, sizes[i], 11);
        if (R == RCV)
            assert_memory_equal(in, out, (size_t)sizes[i]);
    }
    df_comm_set_max_chunk(W, 7);
    unsigned char b[50];
    for (int i = 0; i < 50; i++)
        b[i] = R == 0 ? (unsigned char)(200 - i) : 0;
    df_comm_request *req = NULL;
    int rc = df_comm_ibroadcast(W, b, 50, 0, &req);
    if (!rc)
        rc = df_comm_wait(&req);
    df_comm_set_max_chunk(W, 0);
    assert_int_equal(rc, 0);
    for (int i = 0; i < 50; i++)
        assert_int_equal(b[i], 200 - i);
    assert_int_equal(df_comm_barrier(W), 0);
}

/* Rollout ranks poll for new weights between decode steps: the root (the last rank) broadcasts
 * only after 0.3 s, so every other rank's first tests say not done; then the data is there. */
static void test_ibroadcast_poll(void **state)
{
    int root = N - 1;
    double w[64];
    for (int i = 0; i < 64; i++)
        w[i] = R == root ? 0.5 * i - 3 : -1;
    if (R == root && N > 1)
        sleep_s(0.3);
    df_comm_request *req = NULL;
    assert_int_equal(df_comm_ibroadcast(W, w, sizeof w, root, &req), 0);
    assert_non_null(req);
    bool done = false;
    long polls = 0;
    const time_t give_up = time(NULL) + 20;
    while (!done) {
        assert_int_equal(df_comm_test(&req, &done), 0);
        assert_true(time(NULL) <= give_up);
        polls++;
        if (!done)
            sleep_s(0.001); /* a decode step */
    }
    assert_null(req);
    if (R != root)
        assert_true(polls > 10); /* about 300 polls: the root was asleep */
    for (int i = 0; i < 64; i++)
        assert_near(w[i], 0.5 * i - 3, 0);
    /* the group's next collective still matches */
    int64_t x = 1;
    assert_int_equal(df_comm_allreduce(W, &x, 1, DF_COMM_INT64, DF_COMM_SUM), 0);
    assert_true(x == N);
    bool d2 = false;
    assert_int_equal(df_comm_test(&req, &d2), 0); /* a NULL request is done */
    assert_true(d2);
}

/* With a 0.2 s timeout, rank 0 gives up on a recv and on an ibroadcast wait whose peer (rank 1)
 * has not sent yet; the message stays queued and the request pending, so both succeed later. Rank
 * 1 sends only once rank 0 says it gave up (a handshake on the world, which has no timeout), so
 * the test does not depend on how long either rank is descheduled on a loaded machine. */
static void test_timeout(void **state)
{
    df_comm *g = NULL;
    assert_int_equal(df_comm_split(W, 0, R, &g), 0);
    df_comm_set_timeout(g, 0.2);
    int v = 0, go = 1;
    if (N == 1) { /* nothing can ever come: an error at once, not a hang */
        assert_error_mentions(df_comm_recv(g, &v, sizeof v, 0, 9), DF_EINTERNAL, "recv");
        assert_last_error_mentions(df_comm_backend_of(g) == DF_COMM_SINGLE ? "wait forever" : "after 0.2 s");
        df_comm_free(g);
        return;
    }
    int late = 42;
    if (R == 1) {
        assert_int_equal(df_comm_recv(W, &go, sizeof go, 0, 10), 0);
        assert_int_equal(df_comm_send(g, &late, sizeof late, 0, 9), 0);
    } else if (R == 0) {
        assert_error_mentions(df_comm_recv(g, &v, sizeof v, 1, 9), DF_EINTERNAL, "comm recv (rank 0 of");
        assert_last_error_mentions("no message from rank 1 on tag 9");
        assert_last_error_mentions("a later recv can still take the message");
        assert_int_equal(df_comm_send(W, &go, sizeof go, 1, 10), 0);
        df_comm_set_timeout(g, 0);
        assert_int_equal(df_comm_recv(g, &v, sizeof v, 1, 9), 0);
        assert_int_equal(v, 42);
        df_comm_set_timeout(g, 0.2);
    }
    int b = R == 1 ? 7 : 0;
    if (R == 1)
        assert_int_equal(df_comm_recv(W, &go, sizeof go, 0, 11), 0);
    df_comm_request *req = NULL;
    assert_int_equal(df_comm_ibroadcast(g, &b, sizeof b, 1, &req), 0);
    if (R == 0) {
        assert_error_mentions(df_comm_wait(&req), DF_EINTERNAL, "comm ibroadcast (rank 0 of");
        assert_last_error_mentions("still pending");
        assert_non_null(req);
        assert_int_equal(df_comm_send(W, &go, sizeof go, 1, 11), 0);
    }
    df_comm_set_timeout(g, 0); /* ranks 2.. wait for the late root too */
    assert_int_equal(df_comm_wait(&req), 0);
    assert_int_equal(b, 7);
    df_comm_free(g);
}

/* A recv of the wrong size is refused and leaves the message queued for the right one. */
static void test_size_mismatch(void **state)
{
    char out[10] = "012345678", in[10] = {0};
    df_comm_request *req = NULL;
    if (R == SND)
        assert_int_equal(df_comm_isend(W, out, 10, RCV, 12, &req), 0);
    if (R == RCV) {
        assert_error_mentions(df_comm_recv(W, in, 9, SND, 12), DF_EINVAL, "has 10 bytes, not 9");
        assert_last_error_mentions("comm recv");
        bool found = false;
        int64_t n = -1;
        assert_int_equal(df_comm_probe(W, SND, 12, &found, NULL, &n), 0);
        assert_true(found && n == 10);
        assert_int_equal(df_comm_recv(W, in, 10, SND, 12), 0);
        assert_string_equal(in, "012345678");
    }
    assert_int_equal(df_comm_wait(&req), 0);
    assert_int_equal(df_comm_barrier(W), 0);
}

static void test_bad_arguments(void **state)
{
    char b[4] = {0};
    df_comm_request *req = (df_comm_request *)1;
    bool found = true;
    assert_error_mentions(df_comm_send(W, b, 4, N, 0), DF_EINVAL, "dest");
    assert_error_mentions(df_comm_isend(W, b, 4, 0, DF_COMM_TAG_MAX + 1, &req), DF_EINVAL, "tag 32768");
    assert_null(req);
    assert_error_mentions(df_comm_isend(W, NULL, 4, 0, 0, &req), DF_EINVAL, "buf NULL");
    assert_error_mentions(df_comm_recv(W, b, 4, DF_COMM_ANY_SOURCE, 0), DF_EINVAL, "probe first");
    assert_error_mentions(df_comm_recv(W, b, -1, 0, 0), DF_EINVAL, "recv");
    assert_error_mentions(df_comm_probe(W, N, 0, &found, NULL, NULL), DF_EINVAL, "source");
    assert_false(found);
    assert_error_mentions(df_comm_probe(W, 0, -1, &found, NULL, NULL), DF_EINVAL, "tag -1");
    assert_error_mentions(df_comm_ibroadcast(W, b, 4, -1, &req), DF_EINVAL, "root -1");
    assert_int_equal(df_comm_wait(NULL), DF_EINVAL);
    df_comm_request_free(NULL);
    df_comm_request *none = NULL;
    df_comm_request_free(&none);
}

/* Freeing a pending ibroadcast hands it to the group, whose collectives then fail until
 * df_comm_settle; a freed isend is still delivered. */
static void test_request_free(void **state)
{
    df_comm *g = NULL;
    assert_int_equal(df_comm_split(W, 0, R, &g), 0);
    int root = N - 1, b = R == root ? 5 : 0;
    if (R == root && N > 1)
        sleep_s(0.3);
    df_comm_request *req = NULL;
    assert_int_equal(df_comm_ibroadcast(g, &b, sizeof b, root, &req), 0);
    if (R != root) {
        df_comm_request_free(&req);
        assert_null(req);
        assert_error_mentions(df_comm_barrier(g), DF_EINTERNAL, "abandoned");
        assert_int_equal(df_comm_settle(g), 0);
    } else {
        assert_int_equal(df_comm_wait(&req), 0);
    }
    assert_int_equal(b, 5);
    assert_int_equal(df_comm_barrier(g), 0);

    int v = 31, in = 0;
    if (R == SND) {
        assert_int_equal(df_comm_isend(g, &v, sizeof v, RCV, 4, &req), 0);
        df_comm_request_free(&req);
        assert_null(req);
    }
    if (R == RCV) {
        assert_int_equal(df_comm_recv(g, &in, sizeof in, SND, 4), 0);
        assert_int_equal(in, 31);
    }
    assert_int_equal(df_comm_barrier(g), 0);
    df_comm_free(g);
}

/* The world with a 20 s timeout: a rank that fails an assertion and skips a collective makes
 * its peers fail too, instead of hanging until ctest's timeout. */
static int setup(void **state)
{
    int rc = df_test_world_setup(state);
    if (!rc)
        df_comm_set_timeout(W, 20);
    return rc;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pingpong),        cmocka_unit_test(test_any_source),
        cmocka_unit_test(test_ordering),        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_ibroadcast_poll), cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_size_mismatch),   cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_request_free),
    };
    return cmocka_run_group_tests(tests, setup, df_test_world_teardown);
}
