/*
 * test_cuda_ops.c — the CUDA backend's runtime, dtype conversion and cuBLAS matmuls against
 * the CPU (docs/cuda.md). Without a GPU: a SKIP line and exit 77 (ctest: skipped).
 */
#include "cuda_testutil.h"
#include "backend_ref.h"
#include "model/ops.h"

/* One case: ||C_gpu - C_exact||_F <= br_gemm_rel(K, 2 or 0) ||S||_F (tests/backend_ref.h: the
 * bf16 operands add 2 u_bf16 + u_bf16^2 per product, each operand rounded once; the float32
 * chain is gamma_{K+2}); test_backend_ops holds the backend's gemm to it elementwise. */
static void gemm_case(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                      df_cuda_dtype dt, uint64_t seed)
{
    size_t na = (size_t)(M * K), nb = (size_t)(K * N), nc = (size_t)(M * N);
    float *A = malloc(4 * (na + 1)), *B = malloc(4 * (nb + 1)), *C0 = malloc(4 * nc);
    double *C = malloc(8 * nc), *S = malloc(8 * nc);
    dfct_rand(A, (int64_t)na, seed, -1, 1);
    dfct_rand(B, (int64_t)nb, seed + 1, -1, 1);
    dfct_rand(C0, (int64_t)nc, seed + 2, -1, 1);
    br_gemm_ref(ta, tb, M, N, K, alpha, A, B, beta, C0, C, S);
    float *dA = dfct_up(A, 4 * (na + 1)), *dB = dfct_up(B, 4 * (nb + 1));
    float *dC = dfct_up(C0, 4 * nc);
    const void *opA = dA, *opB = dB;
    uint16_t *hA = NULL, *hB = NULL;
    if (dt == DF_CUDA_BF16) {
        hA = dfct_alloc(2 * (na + 1));
        hB = dfct_alloc(2 * (nb + 1));
        DFCT_OK(df_cuda_f32_to_bf16(dfct_cu, hA, dA, (int64_t)na));
        DFCT_OK(df_cuda_f32_to_bf16(dfct_cu, hB, dB, (int64_t)nb));
        opA = hA, opB = hB;
    }
    DFCT_OK(df_cuda_gemm(dfct_cu, ta, tb, M, N, K, alpha, opA, opB, dt, beta, dC));
    float *got = dfct_down(dC, 4 * nc);
    double err = 0, s2 = 0;
    for (size_t i = 0; i < nc; i++) {
        assert_true(isfinite(got[i]));
        err += (got[i] - C[i]) * (got[i] - C[i]);
        s2 += S[i] * S[i];
    }
    double per = br_gemm_rel(K, dt == DF_CUDA_BF16 ? 2 : 0);
    double bound = per * sqrt(s2) + 1e-30;
    printf("  gemm %s%s %s M=%lld N=%lld K=%lld: ||err|| %.3e (bound %.3e)\n", ta ? "t" : "n",
           tb ? "t" : "n", dt == DF_CUDA_BF16 ? "bf16" : "f32", (long long)M, (long long)N,
           (long long)K, sqrt(err), bound);
    assert_true(sqrt(err) <= bound);
    /* not vacuous: a float32 result is far tighter than the bf16 bound */
    if (dt == DF_CUDA_F32 && K >= 64)
        assert_true(sqrt(err) <= 2 * DF_U_BF16 * sqrt(s2) / 16);
    free(got), free(A), free(B), free(C0), free(C), free(S);
    dfct_free(dA), dfct_free(dB), dfct_free(dC), dfct_free(hA), dfct_free(hB);
}

static void test_gemm_f32(void **state)
{
    (void)state;
    gemm_case(false, true, 67, 45, 129, 1.0f, 0.0f, DF_CUDA_F32, 11);
    gemm_case(false, false, 33, 70, 257, 0.5f, 1.0f, DF_CUDA_F32, 12);
    gemm_case(true, false, 64, 31, 96, -2.0f, 0.25f, DF_CUDA_F32, 13);
    gemm_case(true, true, 17, 19, 1000, 1.0f, -1.0f, DF_CUDA_F32, 14);
    gemm_case(false, true, 5, 7, 0, 1.0f, 0.5f, DF_CUDA_F32, 15); /* K = 0: C = beta C */
}

static void test_gemm_bf16(void **state)
{
    (void)state;
    gemm_case(false, true, 128, 96, 512, 1.0f, 0.0f, DF_CUDA_BF16, 21);
    gemm_case(false, false, 77, 130, 200, 1.0f, 1.0f, DF_CUDA_BF16, 22);
    gemm_case(true, false, 96, 64, 333, 0.5f, 0.0f, DF_CUDA_BF16, 23);
}

/* The device rounding is the CPU's bit for bit, ties, NaN and infinities included. */
static void test_bf16_conversion(void **state)
{
    (void)state;
    enum { N = 4096 };
    float x[N];
    dfct_rand(x, N, 31, -1e4f, 1e4f);
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1.0f + 0x1p-8f,
                             1.0f + 0x1p-8f + 0x1p-9f, 1.0f + 3 * 0x1p-8f, 0x1p-130f, 3.4e38f};
    memcpy(x, special, sizeof special);
    uint16_t want[N];
    df_bf16_from_f32(want, x, N);
    float *dx = dfct_up(x, sizeof x);
    uint16_t *db = dfct_alloc(2 * N);
    DFCT_OK(df_cuda_f32_to_bf16(dfct_cu, db, dx, N));
    uint16_t *got = dfct_down(db, 2 * N);
    for (int i = 0; i < N; i++)
        if (got[i] != want[i])
            fail_msg("bf16(%a): device %04x, CPU %04x", (double)x[i], got[i], want[i]);
    float *dy = dfct_alloc(4 * N);
    DFCT_OK(df_cuda_bf16_to_f32(dfct_cu, dy, db, N));
    float *back = dfct_down(dy, 4 * N);
    for (int i = 0; i < N; i++) {
        uint32_t bits;
        memcpy(&bits, &back[i], 4);
        assert_int_equal(bits, (uint32_t)want[i] << 16);
    }
    free(got), free(back);
    dfct_free(dx), dfct_free(db), dfct_free(dy);
}

/* Buffers: a round trip, a device-to-device copy, and a clear error for an impossible size. */
static void test_buffers_and_errors(void **state)
{
    (void)state;
    float h[1000];
    dfct_rand(h, 1000, 41, -1, 1);
    float *a = dfct_up(h, sizeof h), *b = dfct_alloc(sizeof h);
    DFCT_OK(df_cuda_copy(dfct_cu, b, a, sizeof h));
    float *back = dfct_down(b, sizeof h);
    assert_memory_equal(back, h, sizeof h);
    free(back);
    dfct_free(a), dfct_free(b);

    void *huge = NULL;
    assert_int_equal(df_cuda_alloc(dfct_cu, (size_t)1 << 50, &huge), DF_ENOMEM);
    assert_null(huge);
    assert_non_null(strstr(df_last_error(), "cannot allocate"));
    df_cuda *none = NULL;
    assert_int_equal(df_cuda_create(1 << 16, &none), DF_EUNSUPPORTED);
    assert_null(none);
    assert_int_equal(df_cuda_gemm(dfct_cu, false, false, 2, 2, -1, 1, h, h, DF_CUDA_F32, 0,
                                  (float *)h), DF_EINVAL);
    DFCT_OK(df_cuda_sync(dfct_cu)); /* the context still works after the errors */
}

/*
 * df_cuda_upload's contract (cuda_backend.h): the host buffer may be reused when it returns.
 * The rollout rewrites its batch arrays right after uploading them (rollout_forward.c
 * stage_batch) while the stream is still busy; a copy that read the host later would see the
 * new values. The stream is kept busy with matmuls first, so a deferred read would happen
 * after the overwrite; sizes: one that fits a command, one staging chunk, many chunks.
 */
static void test_upload_reuse(void **state)
{
    (void)state;
    const int64_t G = 2048;
    float *ga = dfct_alloc((size_t)(G * G) * 4), *gc = dfct_alloc((size_t)(G * G) * 4);
    const size_t sizes[3] = {16, (size_t)1 << 20, (size_t)64 << 20};
    for (int i = 0; i < 3; i++) {
        const int64_t n = (int64_t)(sizes[i] / 4);
        float *h = malloc(sizes[i]), *want = malloc(sizes[i]);
        assert_non_null(h), assert_non_null(want);
        dfct_rand(want, n, 60 + (uint64_t)i, -1, 1);
        memcpy(h, want, sizes[i]);
        float *d = dfct_alloc(sizes[i]);
        for (int r = 0; r < 8; r++) /* ~ms of queued work before the upload */
            DFCT_OK(df_cuda_gemm(dfct_cu, false, false, G, G, G, 1.0f, ga, ga, DF_CUDA_F32, 0.0f, gc));
        DFCT_OK(df_cuda_upload(dfct_cu, d, h, sizes[i]));
        for (int64_t j = 0; j < n; j++) /* reused at once, as the rollout does */
            h[j] = 1e30f;
        float *back = dfct_down(d, sizes[i]);
        if (memcmp(back, want, sizes[i]))
            fail_msg("upload of %zu bytes read the host buffer after df_cuda_upload returned",
                     sizes[i]);
        free(back), free(h), free(want);
        dfct_free(d);
    }
    dfct_free(ga), dfct_free(gc);
}

/* A bf16 operand workspace that cannot grow fails with DF_ENOMEM, and the next launch does not
 * report that failure again (its cudaMalloc error is cleared). */
static void test_gemm16_workspace_oom(void **state)
{
    (void)state;
    float *x = dfct_alloc(64);
    const int64_t big = (int64_t)1 << 25; /* M * K = 2^50 bf16 elements */
    assert_int_equal(df_cuda_gemm_w16(dfct_cu, true, big, 1, big, 1.0f, x, (const uint16_t *)x,
                                      0.0f, x), DF_ENOMEM);
    DFCT_OK(df_cuda_fill(dfct_cu, x, 16, 1.0f));
    DFCT_OK(df_cuda_sync(dfct_cu));
    /* and the workspace still grows for a real call afterwards */
    float one[16];
    for (int i = 0; i < 16; i++)
        one[i] = 1.0f;
    uint16_t w16[16];
    df_bf16_from_f32(w16, one, 16);
    uint16_t *dw = dfct_up(w16, sizeof w16);
    float *a = dfct_up(one, sizeof one), *c = dfct_alloc(16 * 4);
    DFCT_OK(df_cuda_gemm_w16(dfct_cu, true, 4, 4, 4, 1.0f, a, dw, 0.0f, c));
    float *got = dfct_down(c, 16 * 4);
    for (int i = 0; i < 16; i++)
        assert_true(got[i] == 4.0f); /* sums of four products of ones: exact */
    free(got);
    dfct_free(x), dfct_free(dw), dfct_free(a), dfct_free(c);
}

/* perf/max_memory_allocated_gb's count on a fresh context: the most bytes live at once, the
 * bf16 workspace included, and a release that lowers what is live but not the peak. */
static void test_memory_peak(void **state)
{
    (void)state;
    df_cuda *c = NULL;
    DFCT_OK(df_cuda_create(0, &c));
    assert_int_equal(df_cuda_memory_peak(c), 0);
    void *a = NULL, *b = NULL, *d = NULL;
    DFCT_OK(df_cuda_alloc(c, 3 << 20, &a));
    DFCT_OK(df_cuda_alloc(c, 1 << 20, &b));
    df_cuda_release(c, a);
    DFCT_OK(df_cuda_alloc(c, 2 << 20, &d));
    assert_int_equal(df_cuda_memory_peak(c), 4 << 20);
    /* a 4x4x4 bf16 GEMM grows the two operand workspaces to 16 elements each: 64 bytes more */
    DFCT_OK(df_cuda_alloc(c, 2 << 20, &a));
    float *x = NULL;
    DFCT_OK(df_cuda_alloc(c, 64, (void **)&x));
    DFCT_OK(df_cuda_fill(c, x, 16, 0.0f));
    DFCT_OK(df_cuda_gemm_bf16(c, false, true, 4, 4, 4, 1.0f, x, x, 0.0f, x));
    DFCT_OK(df_cuda_sync(c));
    assert_int_equal(df_cuda_memory_peak(c), (5 << 20) + 64 + 2 * 16 * 2);
    df_cuda_release(c, a), df_cuda_release(c, b), df_cuda_release(c, d), df_cuda_release(c, x);
    df_cuda_free(c);
}

/* One rank per GPU: the node-local rank picks the device, modulo the count. */
static void test_local_device(void **state)
{
    (void)state;
    int n = 0, dev = -1;
    df_cuda_device_count(&n);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5", 1);
    DFCT_OK(df_cuda_local_device(&dev));
    assert_int_equal(dev, 5 % n);
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    setenv("SLURM_LOCALID", "3", 1);
    DFCT_OK(df_cuda_local_device(&dev));
    assert_int_equal(dev, 3 % n);
    unsetenv("SLURM_LOCALID");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_f32),
        cmocka_unit_test(test_gemm_bf16),
        cmocka_unit_test(test_bf16_conversion),
        cmocka_unit_test(test_buffers_and_errors),
        cmocka_unit_test(test_upload_reuse),
        cmocka_unit_test(test_gemm16_workspace_oom),
        cmocka_unit_test(test_memory_peak),
        cmocka_unit_test(test_local_device),
    };
    return dfct_main("test_cuda_ops", tests, sizeof tests / sizeof tests[0]);
}
