/*
 * test_memstat.c — the memory the metrics report: df_memtrack (live bytes by address and their
 * peak, what the CUDA backend counts its cudaMalloc buffers with) against a shadow array through
 * thousands of adds and removes (growth and backward-shift deletion among colliding addresses),
 * and /proc/meminfo's used memory by psutil's formula on hand-written files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "util/memstat.h"
#include "util/memtrack.h"

#include <stdint.h>

static void test_peak_hand(void **state)
{
    (void)state;
    df_memtrack t = {0};
    static char a, b, c; /* three addresses */
    assert_int_equal(df_memtrack_add(&t, &a, 100), 0);
    assert_int_equal(df_memtrack_add(&t, &b, 50), 0);
    df_memtrack_remove(&t, &a);
    df_memtrack_remove(&t, &a);   /* twice: the second changes nothing */
    df_memtrack_remove(&t, NULL); /* never recorded */
    assert_int_equal(df_memtrack_add(&t, &c, 70), 0);
    assert_int_equal(t.live, 120);
    assert_int_equal(t.peak, 150);
    assert_int_equal(t.n, 2);
    df_memtrack_free(&t);
    assert_int_equal(t.peak, 150);
}

enum { N = 4096 };

/* Addresses 256 bytes apart as cudaMalloc's, many hashing near each other; a random walk of adds
 * and removes checked against a shadow of what is live after every operation. */
static void test_against_shadow(void **state)
{
    (void)state;
    static int64_t size[N]; /* 0: not live */
    char *base = (char *)(uintptr_t)0x7f0000000000ull;
    df_memtrack t = {0};
    int64_t live = 0, peak = 0, n = 0;
    uint64_t r = 12345;
    for (int step = 0; step < 40000; step++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int i = (int)((r >> 33) % N);
        if (size[i]) {
            df_memtrack_remove(&t, base + 256 * (int64_t)i);
            live -= size[i], size[i] = 0, n--;
        } else {
            size[i] = 1 + (int64_t)((r >> 13) % 1000);
            assert_int_equal(df_memtrack_add(&t, base + 256 * (int64_t)i, size[i]), 0);
            live += size[i], n++;
            peak = live > peak ? live : peak;
        }
        assert_int_equal(t.live, live);
        assert_int_equal(t.n, n);
    }
    assert_int_equal(t.peak, peak);
    /* every live address still found: removing them all leaves nothing */
    for (int i = 0; i < N; i++)
        if (size[i])
            df_memtrack_remove(&t, base + 256 * (int64_t)i);
    assert_int_equal(t.live, 0);
    assert_int_equal(t.n, 0);
    df_memtrack_free(&t);
}

static void test_meminfo(void **state)
{
    (void)state;
    int64_t u = -7;
    /* psutil: total - free - buffers - (Cached + SReclaimable); SwapCached is not Cached */
    const char *f = "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    600 kB\n"
                    "Buffers:          50 kB\nCached:          200 kB\nSwapCached:       30 kB\n"
                    "SReclaimable:     20 kB\n";
    assert_int_equal(df_meminfo_used_bytes(f, &u), 0);
    assert_int_equal(u, (1000 - 100 - 50 - 200 - 20) * 1024);
    /* negative: psutil's fallback total - free */
    assert_int_equal(df_meminfo_used_bytes("MemTotal: 100 kB\nMemFree: 10 kB\nCached: 500 kB\n", &u), 0);
    assert_int_equal(u, 90 * 1024);
    /* no Buffers / SReclaimable lines (older kernels, containers): counted as 0 */
    assert_int_equal(df_meminfo_used_bytes("MemFree: 10 kB\nMemTotal: 100 kB\n", &u), 0);
    assert_int_equal(u, 90 * 1024);
    u = -7;
    assert_int_equal(df_meminfo_used_bytes("MemTotal: 100 kB\n", &u), -1);
    assert_int_equal(df_meminfo_used_bytes("MemTotal: x kB\nMemFree: 1 kB\n", &u), -1);
    assert_int_equal(df_meminfo_used_bytes("", &u), -1);
    assert_int_equal(u, -7);
    assert_true(df_host_memory_used_bytes() > 0); /* Linux: this host's */
    assert_true(df_process_peak_rss_bytes() > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peak_hand),
        cmocka_unit_test(test_against_shadow),
        cmocka_unit_test(test_meminfo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
