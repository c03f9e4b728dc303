/*
 * test_backend_ops.c — the backend conformance harness (docs/testing.md, "Backend conformance";
 * ggml's test-backend-ops is the model): every entry of df_backend_ops, for every backend this
 * build has (df_backend_names: "cpu" always; "cuda" when built with it, skipped with a line when
 * no GPU is present), run on random inputs of several shapes through the backend's own memory
 * (alloc / upload / download) and compared element by element with the float64 references of
 * tests/backend_ref.h, within bounds derived there from the dtype's unit roundoff and each
 * output's reduction depth and magnitudes. The CPU's bf16 matmuls (df_mm_*, the backend's gemm
 * with a df_mm_ctx) are held to the bf16 bound. Backward operators get the same float inputs as
 * the reference; the reference's backward is itself checked against finite differences of its
 * float64 forward. Per backend and operator, the largest error / bound is printed at the end
 * (a summary table), so a regression shows before it fails.
 *
 * Shapes: odd sizes, MHA and GQA groups of 2 and 4, packed sequences of unequal length (1 token to
 * 257), sliding windows, qwen3's head_dim 128, vocabularies that are not a multiple of the LM
 * head's tile; Gemma 2's soft-caps (attention, kv_attention, the LM head) saturated and not.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "backend_testutil.h"
#include "geglu_ref.h"
#include "model/ops.h"

/* ---- memory ------------------------------------------------------------------------------- */

/* Buffers are 64-byte aligned (0 bytes too), copies are exact, zero clears, release(NULL) is a no-op. */
static void test_memory(void **state)
{
    (void)state;
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        const df_backend_ops *o = b->be.ops;
        unsigned char h[1001];
        for (int i = 0; i < 1001; i++)
            h[i] = (unsigned char)(i * 37 + 11);
        void *z = NULL, *d = NULL, *e = NULL;
        BO_OK(o->alloc(b->be.ctx, 0, &z));
        assert_non_null(z);
        assert_int_equal((uintptr_t)z % 64, 0);
        d = bo_up(b, h, sizeof h);
        assert_int_equal((uintptr_t)d % 64, 0);
        BO_OK(o->alloc(b->be.ctx, sizeof h, &e));
        BO_OK(o->copy(b->be.ctx, e, d, sizeof h));
        unsigned char *back = bo_down(b, e, sizeof h);
        assert_memory_equal(back, h, sizeof h);
        free(back);
        BO_OK(o->zero(b->be.ctx, (float *)e, 250));
        back = bo_down(b, e, sizeof h);
        for (int i = 0; i < 1000; i++)
            assert_int_equal(back[i], 0);
        assert_int_equal(back[1000], h[1000]); /* only n floats */
        free(back);
        BO_OK(o->sync(b->be.ctx));
        o->release(b->be.ctx, NULL);
        bo_free(b, z), bo_free(b, d), bo_free(b, e);
        bo_note(b->name, "memory", 0, 1);
    }
}

/* ---- gemm ----------------------------------------------------------------------------------- */

/*
 * One GEMM through b against br_gemm_ref, within br_gemm_rel(K, 2 or 0) S elementwise. Not vacuous:
 * a float32 GEMM must also be within a sixteenth of the bf16 bound; a bf16 one must leave the
 * float32 bound somewhere (the backend does round its operands).
 */
static void gemm_case(const bo_backend *b, bool bf16, bool ta, bool tb, int64_t M, int64_t N,
                      int64_t K, float alpha, float beta, uint64_t seed)
{
    const int64_t na = M * K, nb = K * N, nc = M * N;
    float *A = bo_rand(na, seed, 1), *B = bo_rand(nb, seed + 1, 1), *C0 = bo_rand(nc, seed + 2, 1);
    double *C = br_dvec(nc), *S = br_dvec(nc), *bd = br_dvec(nc);
    br_gemm_ref(ta, tb, M, N, K, alpha, A, B, beta, C0, C, S);
    const double rel = br_gemm_rel(K, bf16 ? 2 : 0), rel32 = br_gemm_rel(K, 0);
    for (int64_t i = 0; i < nc; i++)
        bd[i] = BR_REF * rel * S[i];
    float *dA = bo_up(b, A, 4 * (size_t)na), *dB = bo_up(b, B, 4 * (size_t)nb);
    float *dC = bo_up(b, C0, 4 * (size_t)nc);
    int rc = b->be.ops->gemm(b->be.ctx, ta, tb, M, N, K, alpha, dA, dB, beta, dC);
    if (ta && tb && rc != DF_OK) { /* (1,1) may be refused, with a message */
        assert_int_equal(rc, DF_EINVAL);
        assert_true(strlen(df_last_error()) > 0);
    } else {
        BO_OK(rc);
        float *got = bo_down(b, dC, 4 * (size_t)nc);
        char op[32];
        snprintf(op, sizeof op, "gemm %s%s%s", bf16 ? "bf16 " : "", ta ? "t" : "n", tb ? "t" : "n");
        bo_check(b->name, op, got, C, bd, nc);
        bool beyond32 = false;
        for (int64_t i = 0; i < nc; i++) {
            const double e = fabs(got[i] - C[i]);
            beyond32 |= e > rel32 * S[i];
            if (!bf16 && K >= 64 && !(e <= br_gemm_rel(K, 2) * S[i] / 16))
                fail_msg("%s %s: float32 result as coarse as bf16", b->name, op);
        }
        if (bf16 && K >= 16)
            assert_true(beyond32);
        free(got);
    }
    free(A), free(B), free(C0), free(C), free(S), free(bd);
    bo_free(b, dA), bo_free(b, dB), bo_free(b, dC);
}

static void gemm_cases(const bo_backend *b, bool bf16)
{
    gemm_case(b, bf16, false, true, 67, 45, 129, 1.0f, 0.0f, 11); /* x W^T */
    gemm_case(b, bf16, false, false, 33, 70, 257, 0.5f, 1.0f, 12);
    gemm_case(b, bf16, true, false, 64, 31, 96, -2.0f, 0.25f, 13); /* a weight gradient */
    gemm_case(b, bf16, false, true, 5, 128, 896, 1.0f, 1.0f, 14);  /* one token, qwen-like K */
    gemm_case(b, bf16, false, true, 130, 257, 300, 1.0f, 0.0f, 18); /* blocked kernels */
    gemm_case(b, bf16, false, true, 1, 1, 1, 1.0f, 0.0f, 15);
    gemm_case(b, bf16, false, true, 5, 7, 0, 1.0f, 0.5f, 16); /* K = 0: C = beta C */
    gemm_case(b, bf16, true, true, 17, 19, 40, 1.0f, -1.0f, 17); /* computed or refused */
}

static void test_gemm(void **state)
{
    (void)state;
    for (int bi = 0; bi < bo_n; bi++)
        gemm_cases(&bo_list[bi], false);
}

/* The CPU backend with bf16 matmuls (df_backend_cpu_bf16): its gemm rounds both operands. */
static void test_gemm_bf16(void **state)
{
    (void)state;
    df_mm_ctx *mm = NULL;
    int rc = df_mm_ctx_create(1 << 20, &mm);
    if (rc == DF_EUNSUPPORTED) {
        print_message("SKIP: cpu bf16 gemm: %s\n", df_last_error());
        skip();
    }
    BO_OK(rc);
    const bo_backend b = {"cpu", df_backend_cpu_bf16(&mm)};
    gemm_cases(&b, true);
    assert_int_equal(df_mm_ctx_fallbacks(mm), 0);
    df_mm_ctx_free(mm);
}

/*
 * Every backend's gemm_bf16 entry (both operands rounded per call): gemm_cases in bf16 through
 * a copy of its table whose gemm is that entry. The CPU's needs its bf16 context (refused with a
 * message without one).
 */
static void test_gemm_bf16_entry(void **state)
{
    (void)state;
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        if (!b->be.ops->gemm_bf16) {
            print_message("SKIP: %s gemm_bf16: not provided\n", b->name);
            continue;
        }
        df_backend_ops ops = *b->be.ops;
        ops.gemm = ops.gemm_bf16;
        df_mm_ctx *mm = NULL;
        bo_backend e = {b->name, {&ops, b->be.ctx}};
        if (df_backend_is_cpu(&b->be)) {
            float a = 1, w = 1, c = 0;
            assert_int_equal(ops.gemm_bf16(NULL, false, true, 1, 1, 1, 1, &a, &w, 0, &c), DF_EINVAL);
            assert_true(strlen(df_last_error()) > 0);
            int rc = df_mm_ctx_create(1 << 20, &mm);
            if (rc == DF_EUNSUPPORTED) {
                print_message("SKIP: cpu gemm_bf16: %s\n", df_last_error());
                continue;
            }
            BO_OK(rc);
            e.be.ctx = &mm;
        }
        gemm_cases(&e, true);
        df_mm_ctx_free(mm);
    }
}

/*
 * bf16_from_f32 (a device's refresh of its bf16 weights): df_bf16_from_f32's bits for every
 * element (random values over many binades, ties, NaN, infinities, subnormals, the overflow
 * to infinity), with hand-checked values first: the two ties of 1 + 2^-8 (to 1, even) and
 * 1 + 3 2^-8 (up, to even), a NaN staying a NaN.
 */
static void test_bf16_from_f32(void **state)
{
    (void)state;
    const int64_t n = 4099; /* odd: off any vector width */
    float *x = bo_rand(n, 61, 1);
    for (int64_t i = 0; i < n; i++)
        x[i] = ldexpf(x[i], (int)(i % 61) - 30);
    const uint32_t special[] = {0x3f808000u /* 1 + 2^-8 */, 0x3f818000u /* 1 + 3 2^-8 */,
                                0x7fc00001u, 0xffa00000u /* NaNs */, 0x7f800000u, 0xff800000u,
                                0x00000001u, 0x80008000u, 0x7f7fffffu /* to +inf */, 0};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        memcpy(&x[i], &special[i], 4);
    uint16_t *ref = xmalloc(2 * (size_t)n);
    df_bf16_from_f32(ref, x, n);
    assert_int_equal(ref[0], 0x3f80);
    assert_int_equal(ref[1], 0x3f82);
    assert_true((ref[2] & 0x7f80) == 0x7f80 && (ref[2] & 0x7f) != 0);
    assert_int_equal(ref[8], 0x7f80);
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        if (!b->be.ops->bf16_from_f32) {
            print_message("SKIP: %s bf16_from_f32: not provided (bf16 weights converted on the host)\n",
                          b->name);
            continue;
        }
        float *dx = bo_up(b, x, 4 * (size_t)n);
        uint16_t *junk = xmalloc(2 * (size_t)n); /* every element must be written */
        memset(junk, 0x55, 2 * (size_t)n);
        uint16_t *dy = bo_up(b, junk, 2 * (size_t)n);
        free(junk);
        BO_OK(b->be.ops->bf16_from_f32(b->be.ctx, dy, dx, n));
        BO_OK(b->be.ops->bf16_from_f32(b->be.ctx, dy, dx, 0)); /* n = 0: nothing */
        uint16_t *got = bo_down(b, dy, 2 * (size_t)n);
        assert_memory_equal(got, ref, 2 * (size_t)n);
        print_message("%s bf16_from_f32: %lld elements, the CPU's bits\n", b->name, (long long)n);
        free(got);
        bo_free(b, dx), bo_free(b, dy);
    }
    free(x), free(ref);
}

/*
 * gemm_w16: C = alpha A op(W) + beta C0 with W in bf16 (tb: W [N,K], else W [K,N]) and A rounded
 * per call: against the float64 product of the float A and the bf16 W as given, within
 * br_gemm_rel(K, 1) S (one operand rounded); beyond the float32 bound somewhere (A is rounded).
 */
static void w16_case_ex(const bo_backend *b, df_mm_ctx *packer, bool tb, int64_t M, int64_t N,
                        int64_t K, float alpha, float beta, uint64_t seed)
{
    const int64_t nc = M * N;
    float *A = bo_rand(M * K, seed, 1), *Wf = bo_rand(K * N, seed + 1, 1);
    float *C0 = bo_rand(nc, seed + 2, 1);
    uint16_t *W = xmalloc(2 * (size_t)(K * N));
    df_bf16_from_f32(W, Wf, K * N);
    for (int64_t i = 0; i < K * N; i++) { /* the weight's value: bf16 widened exactly */
        uint32_t bits = (uint32_t)W[i] << 16;
        memcpy(&Wf[i], &bits, 4);
    }
    double *C = br_dvec(nc), *S = br_dvec(nc), *bd = br_dvec(nc);
    br_gemm_ref(false, tb, M, N, K, alpha, A, Wf, beta, C0, C, S);
    for (int64_t i = 0; i < nc; i++)
        bd[i] = BR_REF * br_gemm_rel(K, 1) * S[i];
    float *dA = bo_up(b, A, 4 * (size_t)(M * K)), *dC = bo_up(b, C0, 4 * (size_t)nc);
    uint16_t *dW = bo_up(b, W, 2 * (size_t)(K * N));
    if (packer) { /* the weight reordered into the backend's layout first (host memory) */
        const int64_t pb = df_mm_packed_bytes(packer, N, K);
        assert_true(pb >= 2 * N * K);
        uint16_t *P = aligned_alloc(64, (size_t)(pb + 63) / 64 * 64);
        assert_non_null(P);
        BO_OK(df_mm_pack_w16(packer, N, K, W, P));
        assert_true(df_mm_packed_native(packer, M, N, K)); /* not oneDNN's reference kernel */
        BO_OK(b->be.ops->gemm_w16_packed(b->be.ctx, M, N, K, alpha, dA, P, beta, dC));
        free(P);
    } else {
        BO_OK(b->be.ops->gemm_w16(b->be.ctx, tb, M, N, K, alpha, dA, dW, beta, dC));
    }
    float *got = bo_down(b, dC, 4 * (size_t)nc);
    bo_check(b->name, packer ? "gemm_w16_packed" : tb ? "gemm_w16 nt" : "gemm_w16 nn", got, C, bd,
             nc);
    bool beyond32 = false;
    for (int64_t i = 0; i < nc; i++)
        beyond32 |= fabs(got[i] - C[i]) > br_gemm_rel(K, 0) * S[i];
    assert_true(beyond32 || K < 16);
    free(A), free(Wf), free(C0), free(W), free(C), free(S), free(bd), free(got);
    bo_free(b, dA), bo_free(b, dC), bo_free(b, dW);
}

static void w16_case(const bo_backend *b, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                     float beta, uint64_t seed)
{
    w16_case_ex(b, NULL, tb, M, N, K, alpha, beta, seed);
}

static void w16_cases(const bo_backend *b)
{
    w16_case(b, true, 67, 45, 129, 1.0f, 0.0f, 21); /* a Linear forward x W^T */
    w16_case(b, false, 33, 70, 257, 0.5f, 1.0f, 22); /* its input gradient dy W */
    w16_case(b, true, 5, 128, 896, 1.0f, 1.0f, 23);
    w16_case(b, true, 1, 1, 1, 1.0f, 0.0f, 24);
}

/* Every backend with a gemm_w16; the CPU's through df_backend_cpu_bf16 (without a bf16 context
 * it refuses, with a message). */
static void test_gemm_w16(void **state)
{
    (void)state;
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        if (!b->be.ops->gemm_w16) {
            print_message("SKIP: %s gemm_w16: not provided (no bf16 matmuls)\n", b->name);
            continue;
        }
        if (!df_backend_is_cpu(&b->be)) {
            w16_cases(b);
            continue;
        }
        float a = 1, c = 0;
        uint16_t w = 0x3f80;
        assert_int_equal(b->be.ops->gemm_w16(b->be.ctx, true, 1, 1, 1, 1, &a, &w, 0, &c), DF_EINVAL);
        assert_true(strlen(df_last_error()) > 0);
        df_mm_ctx *mm = NULL; /* 4096 elements: A goes in blocks of 4096 / K rows */
        int rc = df_mm_ctx_create(4096, &mm);
        if (rc == DF_EUNSUPPORTED) {
            print_message("SKIP: cpu gemm_w16: %s\n", df_last_error());
            continue;
        }
        BO_OK(rc);
        const bo_backend bf = {b->name, df_backend_cpu_bf16(&mm)};
        w16_cases(&bf);
        /* packed weights (the rollout's copy): N and K off oneDNN's blocks (64 / 32), M of a
         * decode step, of one row and past the context's 4096-element blocks of A */
        assert_non_null(bf.be.ops->gemm_w16_packed);
        w16_case_ex(&bf, mm, true, 64, 130, 129, 1.0f, 0.0f, 25);
        w16_case_ex(&bf, mm, true, 1, 45, 96, 1.0f, 1.0f, 26);
        w16_case_ex(&bf, mm, true, 300, 192, 64, 0.5f, 1.0f, 27);
        w16_case_ex(&bf, mm, true, 7, 4864 / 16, 896, 1.0f, 0.0f, 28);
        df_mm_ctx_free(mm);
    }
}

/* ---- rows: a Linear's bias and its gradient, output rows --------------------------------- */

static void test_rows(void **state)
{
    (void)state;
    const int64_t M = 37, N = 67, n = 9, R = 23;
    const int64_t rows[9] = {22, 0, 5, 17, 3, 21, 1, 9, 14}; /* distinct, unordered */
    float *bias = bo_rand(N, 40, 1), *dy = bo_rand(M * N, 41, 1), *db0 = bo_rand(N, 42, 1);
    float *src = bo_rand(R * N, 43, 1), *rs = bo_rand(n * N, 44, 1);
    double *ref = br_dvec(M * N), *bd = br_dvec(M * N); /* M > R > n */
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        void *cx = b->be.ctx;
        /* rows_fill: a copy per row */
        float *dY = bo_nan(b, M * N), *dbias = bo_up(b, bias, 4 * (size_t)N);
        BO_OK(b->be.ops->rows_fill(cx, dY, dbias, M, N));
        float *got = bo_down(b, dY, 4 * (size_t)(M * N));
        for (int64_t i = 0; i < M * N; i++)
            ref[i] = bias[i % N], bd[i] = 0;
        bo_check(b->name, "rows_fill", got, ref, bd, M * N);
        free(got);
        /* col_sum_add: M terms onto db0, any order: gamma_M of their magnitudes */
        float *ddy = bo_up(b, dy, 4 * (size_t)(M * N)), *ddb = bo_up(b, db0, 4 * (size_t)N);
        BO_OK(b->be.ops->col_sum_add(cx, ddb, ddy, M, N));
        got = bo_down(b, ddb, 4 * (size_t)N);
        for (int64_t j = 0; j < N; j++) {
            double s = db0[j], m = fabs(db0[j]);
            for (int64_t i = 0; i < M; i++)
                s += dy[i * N + j], m += fabs(dy[i * N + j]);
            ref[j] = s, bd[j] = BR_REF * br_g((double)M) * m;
        }
        bo_check(b->name, "col_sum_add", got, ref, bd, N);
        free(got);
        /* gather_rows: copies; scatter_add_rows: one correctly rounded add per element of a
         * listed row (u of the result), the others untouched */
        int64_t *drows = bo_up(b, rows, sizeof rows);
        float *dsrc = bo_up(b, src, 4 * (size_t)(R * N)), *dg = bo_nan(b, n * N);
        BO_OK(b->be.ops->gather_rows(cx, dg, dsrc, drows, n, N));
        got = bo_down(b, dg, 4 * (size_t)(n * N));
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < N; i++)
                ref[j * N + i] = src[rows[j] * N + i], bd[j * N + i] = 0;
        bo_check(b->name, "gather_rows", got, ref, bd, n * N);
        free(got);
        float *drs = bo_up(b, rs, 4 * (size_t)(n * N));
        BO_OK(b->be.ops->scatter_add_rows(cx, dsrc, drs, drows, n, N));
        got = bo_down(b, dsrc, 4 * (size_t)(R * N));
        for (int64_t i = 0; i < R * N; i++)
            ref[i] = src[i], bd[i] = 0;
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < N; i++) {
                ref[rows[j] * N + i] += rs[j * N + i];
                bd[rows[j] * N + i] = BR_REF * DF_U32 * fabs(ref[rows[j] * N + i]);
            }
        bo_check(b->name, "scatter_add_rows", got, ref, bd, R * N);
        free(got);
        bo_free(b, dY), bo_free(b, dbias), bo_free(b, ddy), bo_free(b, ddb), bo_free(b, drows);
        bo_free(b, dsrc), bo_free(b, dg), bo_free(b, drs);
    }
    free(bias), free(dy), free(db0), free(src), free(rs), free(ref), free(bd);
}

/* ---- embedding ---------------------------------------------------------------------------- */

/* Forward: a copy. Backward: a row used c times gets c terms onto its start (gamma_c of their
 * magnitudes); the rows no id names are untouched, bit for bit. */
static void test_embedding(void **state)
{
    (void)state;
    const int64_t V = 11, H = 70, T = 19;
    const int32_t ids[19] = {3, 0, 3, 5, 3, 10, 7, 7, 0, 3, 2, 9, 9, 9, 9, 1, 5, 3, 10};
    float *tab = bo_rand(V * H, 50, 1), *dout = bo_rand(T * H, 51, 1);
    double *ref = br_dvec(T * H), *bd = br_dvec(T * H), *mag = br_dvec(V * H); /* T > V */
    int cnt[11] = {0};
    for (int64_t t = 0; t < T; t++)
        cnt[ids[t]]++;
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        int32_t *dids = bo_up(b, ids, sizeof ids);
        float *dtab = bo_up(b, tab, 4 * (size_t)(V * H)), *dout_d = bo_up(b, dout, 4 * (size_t)(T * H));
        float *dO = bo_nan(b, T * H);
        BO_OK(b->be.ops->embedding_fwd(b->be.ctx, dO, dids, dtab, T, H));
        float *got = bo_down(b, dO, 4 * (size_t)(T * H));
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < H; i++)
                ref[t * H + i] = tab[ids[t] * H + i], bd[t * H + i] = 0;
        bo_check(b->name, "embedding_fwd", got, ref, bd, T * H);
        free(got);
        BO_OK(b->be.ops->embedding_bwd(b->be.ctx, dtab, dout_d, dids, T, H));
        got = bo_down(b, dtab, 4 * (size_t)(V * H));
        for (int64_t i = 0; i < V * H; i++)
            ref[i] = tab[i], mag[i] = fabs(tab[i]);
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < H; i++) {
                ref[ids[t] * H + i] += dout[t * H + i];
                mag[ids[t] * H + i] += fabs(dout[t * H + i]);
            }
        for (int64_t i = 0; i < V * H; i++)
            bd[i] = BR_REF * br_g(cnt[i / H]) * mag[i];
        bo_check(b->name, "embedding_bwd", got, ref, bd, V * H);
        free(got);
        bo_free(b, dids), bo_free(b, dtab), bo_free(b, dout_d), bo_free(b, dO);
    }
    free(tab), free(dout), free(ref), free(bd), free(mag);
}

/* embedding_fwd_w16 (mixed precision's lookup): rows of a bf16 table widened to float32, which
 * is exact (a bf16 is the top half of its float32): bound 0 against the float64 value of each
 * bf16, on a table whose rounding moved every entry (so a float32 lookup would fail). */
static void test_embedding_w16(void **state)
{
    (void)state;
    const int64_t V = 13, H = 67, T = 21;
    int32_t ids[21];
    for (int64_t t = 0; t < T; t++)
        ids[t] = (int32_t)((t * 5 + 3) % V);
    ids[0] = (int32_t)(V - 1);
    float *tab = bo_rand(V * H, 52, 1);
    uint16_t *t16 = xmalloc(2 * (size_t)(V * H));
    df_bf16_from_f32(t16, tab, V * H);
    double *ref = br_dvec(T * H), *bd = br_dvec(T * H);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < H; i++) {
            uint32_t bits = (uint32_t)t16[ids[t] * H + i] << 16;
            float v;
            memcpy(&v, &bits, 4);
            ref[t * H + i] = v, bd[t * H + i] = 0;
        }
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        if (!b->be.ops->embedding_fwd_w16) {
            print_message("SKIP: %s embedding_fwd_w16: not provided (no mixed precision)\n", b->name);
            continue;
        }
        int32_t *dids = bo_up(b, ids, sizeof ids);
        uint16_t *dt16 = bo_up(b, t16, 2 * (size_t)(V * H));
        float *dO = bo_nan(b, T * H);
        BO_OK(b->be.ops->embedding_fwd_w16(b->be.ctx, dO, dids, dt16, T, H));
        float *got = bo_down(b, dO, 4 * (size_t)(T * H));
        bo_check(b->name, "embedding_fwd_w16", got, ref, bd, T * H);
        int64_t moved = 0; /* the float32 rows are not what it returns */
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < H; i++)
                moved += got[t * H + i] != tab[ids[t] * H + i];
        assert_true(moved > T * H / 2);
        free(got);
        bo_free(b, dids), bo_free(b, dt16), bo_free(b, dO);
    }
    free(tab), free(t16), free(ref), free(bd);
}

/* ---- RMSNorm ---------------------------------------------------------------------------------- */

typedef struct {
    int64_t T, H;
    double eps, *x, *w, *R; /* loss = sum R out */
} rms_fd;

static double rms_loss(void *p)
{
    const rms_fd *c = p;
    double l = 0;
    for (int64_t t = 0; t < c->T; t++) {
        double ss = 0;
        for (int64_t i = 0; i < c->H; i++)
            ss += c->x[t * c->H + i] * c->x[t * c->H + i];
        const double r = 1.0 / sqrt(ss / (double)c->H + c->eps);
        for (int64_t i = 0; i < c->H; i++)
            l += c->R[t * c->H + i] * c->w[i] * c->x[t * c->H + i] * r;
    }
    return l;
}

/*
 * The reference backward (exact r, dx0 = dw0 = 0) against finite differences of rms_loss along
 * two random directions over (x, w), x's on the scale of x. The double loss: each term H + 6 roundings, T H terms.
 */
static void rmsnorm_fd(const float *x, const float *w, const float *R, int64_t T, int64_t H,
                       float eps, double xscale, uint64_t seed)
{
    rms_fd c = {T, H, eps, to_d(x, T * H), to_d(w, H), to_d(R, T * H)};
    double *out = br_dvec(T * H), *r = br_dvec(T), *bo = br_dvec(T * H), *br = br_dvec(T);
    double *gx = br_dvec(T * H), *gw = br_dvec(H), *b1 = br_dvec(T * H), *b2 = br_dvec(H);
    float *z = calloc((size_t)(T * H), sizeof(float));
    br_rmsnorm_fwd(out, r, bo, br, x, w, T, H, eps);
    br_rmsnorm_bwd(gx, gw, b1, b2, z, z, R, x, w, r, T, H);
    double mag = 0;
    for (int64_t i = 0; i < T * H; i++)
        mag += fabs(R[i] * out[i]);
    const double eps_l = df_tol_gamma((double)(H + 7 + T * H), DF_U64) * mag;
    for (int d = 0; d < 2; d++) {
        float *vx = bo_rand(T * H, seed + d, xscale), *vw = bo_rand(H, seed + 5 + d, 1);
        double *ux = to_d(vx, T * H), *uw = to_d(vw, H);
        free(vx), free(vw);
        double *xs[2] = {c.x, c.w}, *us[2] = {ux, uw}, fe, bound = 0;
        const int64_t ns[2] = {T * H, H};
        const double fd = br_fd_slope(rms_loss, &c, xs, us, ns, 2, 1e-3, eps_l, &fe);
        const double an = dot_b(gx, ux, T * H, &bound) + dot_b(gw, uw, H, &bound);
        bo_fd("rmsnorm_bwd", an, fd, fe + bound);
        free(ux), free(uw);
    }
    free(c.x), free(c.w), free(c.R), free(out), free(r), free(bo), free(br), free(gx), free(gw);
    free(b1), free(b2), free(z);
}

/* T rows of H (a qwen3 q/k norm: tokens x heads rows of head_dim) through every backend. */
static void rmsnorm_case(int64_t T, int64_t H, double xs, uint64_t seed)
{
    const float eps = 1e-6f;
    float *x = bo_rand(T * H, seed, xs), *w = bo_rand(H, seed + 1, 1), *R = bo_rand(T * H, seed + 2, 1);
    float *dx0 = bo_rand(T * H, seed + 3, 1), *dw0 = bo_rand(H, seed + 4, 1);
    double *out = br_dvec(T * H), *r = br_dvec(T), *bo = br_dvec(T * H), *br = br_dvec(T);
    double *dx = br_dvec(T * H), *dw = br_dvec(H), *bdx = br_dvec(T * H), *bdw = br_dvec(H);
    br_rmsnorm_fwd(out, r, bo, br, x, w, T, H, eps);
    float *rf = to_f(r, T);
    double *rr = to_d(rf, T); /* the backward reads the forward's float rstd */
    br_rmsnorm_bwd(dx, dw, bdx, bdw, dx0, dw0, R, x, w, rr, T, H);
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        float *dX = bo_up(b, x, 4 * (size_t)(T * H)), *dW = bo_up(b, w, 4 * (size_t)H);
        float *dO = bo_nan(b, T * H), *dr = bo_nan(b, T);
        BO_OK(b->be.ops->rmsnorm_fwd(b->be.ctx, dO, dr, dX, dW, T, H, eps));
        float *got = bo_down(b, dO, 4 * (size_t)(T * H)), *gr = bo_down(b, dr, 4 * (size_t)T);
        bo_check(b->name, "rmsnorm_fwd out", got, out, bo, T * H);
        bo_check(b->name, "rmsnorm_fwd rstd", gr, r, br, T);
        free(got), free(gr);
        float *dR = bo_up(b, R, 4 * (size_t)(T * H)), *drs = bo_up(b, rf, 4 * (size_t)T);
        float *ddx = bo_up(b, dx0, 4 * (size_t)(T * H)), *ddw = bo_up(b, dw0, 4 * (size_t)H);
        BO_OK(b->be.ops->rmsnorm_bwd(b->be.ctx, ddx, ddw, dR, dX, dW, drs, T, H));
        got = bo_down(b, ddx, 4 * (size_t)(T * H));
        bo_check(b->name, "rmsnorm_bwd dx", got, dx, bdx, T * H);
        free(got);
        got = bo_down(b, ddw, 4 * (size_t)H);
        bo_check(b->name, "rmsnorm_bwd dw", got, dw, bdw, H);
        free(got);
        /* dw = NULL: dx alone, the same values */
        BO_OK(b->be.ops->upload(b->be.ctx, ddx, dx0, 4 * (size_t)(T * H)));
        BO_OK(b->be.ops->rmsnorm_bwd(b->be.ctx, ddx, NULL, dR, dX, dW, drs, T, H));
        got = bo_down(b, ddx, 4 * (size_t)(T * H));
        bo_check(b->name, "rmsnorm_bwd dx", got, dx, bdx, T * H);
        free(got);
        bo_free(b, dX), bo_free(b, dW), bo_free(b, dO), bo_free(b, dr), bo_free(b, dR);
        bo_free(b, drs), bo_free(b, ddx), bo_free(b, ddw);
    }
    rmsnorm_fd(x, w, R, T, H, eps, xs, seed + 10);
    free(x), free(w), free(R), free(dx0), free(dw0), free(out), free(r), free(bo), free(br);
    free(dx), free(dw), free(bdx), free(bdw), free(rf), free(rr);
}

static void test_rmsnorm(void **state)
{
    (void)state;
    rmsnorm_case(7, 67, 1.5, 60);
    rmsnorm_case(5 * 4, 128, 1.0, 70); /* qwen3 q_norm: 5 tokens x 4 heads of 128 */
    rmsnorm_case(3, 896, 30.0, 80);    /* qwen2.5-0.5b's hidden, large activations */
    rmsnorm_case(4, 33, 1e-3, 85);     /* mean x^2 ~ eps: eps matters */
}

/* ---- RoPE -------------------------------------------------------------------------------------- */

/* Tables of n_pos rows in double, rounded: cos / sin of p theta^(-2i / rd) (the op takes them as
 * given; df_rope_table's own rounding is test_ops.c's). */
static void rope_tables(float *c, float *s, int64_t n_pos, int64_t rd, double theta)
{
    for (int64_t p = 0; p < n_pos; p++)
        for (int64_t i = 0; i < rd / 2; i++) {
            const double a = (double)p * pow(theta, -2.0 * (double)i / (double)rd);
            c[p * rd / 2 + i] = (float)cos(a), s[p * rd / 2 + i] = (float)sin(a);
        }
}

/* rd < hd: a partial rotary embedding (phi3 partial_rotary_factor), the rest of each head passed. */
static void rope_case(int64_t T, int64_t nh, int64_t hd, int64_t rd, const int32_t *pos,
                      int64_t n_pos, uint64_t seed)
{
    const int64_t n = T * nh * hd, nt = n_pos * rd / 2;
    float *x = bo_rand(n, seed, 1), *ct = xmalloc(4 * (size_t)nt), *st = xmalloc(4 * (size_t)nt);
    rope_tables(ct, st, n_pos, rd, 1e6);
    double *ref = br_dvec(n), *bd = br_dvec(n), *inv = br_dvec(n), *bi_ = br_dvec(n);
    br_rope(ref, bd, x, pos, T, nh, hd, rd, ct, st, false);
    br_rope(inv, bi_, x, pos, T, nh, hd, rd, ct, st, true);
    /* The reference's inverse is the forward's transpose: <y, F x> = <F^T y, x> for y = x. */
    double l = 0, r = 0, m = 0;
    for (int64_t i = 0; i < n; i++)
        l += x[i] * ref[i], r += inv[i] * x[i], m += fabs(x[i] * ref[i]) + fabs(inv[i] * x[i]);
    bo_fd("rope inverse = transpose", l, r, df_tol_gamma((double)n + 3, DF_U64) * m + 1e-300);
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        int32_t *dp = bo_up(b, pos, 4 * (size_t)T);
        float *dc = bo_up(b, ct, 4 * (size_t)nt), *ds = bo_up(b, st, 4 * (size_t)nt);
        for (int dir = 0; dir < 2; dir++) {
            float *dx = bo_up(b, x, 4 * (size_t)n);
            BO_OK(b->be.ops->rope_apply(b->be.ctx, dx, dp, T, nh, hd, rd, dc, ds, dir == 1));
            float *got = bo_down(b, dx, 4 * (size_t)n);
            bo_check(b->name, dir ? "rope_apply inverse" : "rope_apply", got, dir ? inv : ref,
                     dir ? bi_ : bd, n);
            free(got);
            bo_free(b, dx);
        }
        bo_free(b, dp), bo_free(b, dc), bo_free(b, ds);
    }
    free(x), free(ct), free(st), free(ref), free(bd), free(inv), free(bi_);
}

static void test_rope(void **state)
{
    (void)state;
    const int32_t pos1[9] = {0, 1, 2, 0, 57, 1999, 3, 4, 5}; /* two packed sequences */
    rope_case(9, 3, 8, 8, pos1, 2000, 90);
    const int32_t pos2[5] = {4095, 0, 1, 2, 700};
    rope_case(5, 4, 128, 128, pos2, 4096, 91); /* qwen3's head_dim */
    rope_case(5, 3, 128, 96, pos2, 4096, 92);  /* Phi-4-mini: 96 of 128 dims rotated */
    rope_case(9, 2, 8, 2, pos1, 2000, 93);     /* one rotated pair, six dims passed */
}

/* ---- SwiGLU ------------------------------------------------------------------------------------- */

typedef struct {
    int64_t n;
    double *g, *u, *R;
} swi_fd;

static double swi_loss(void *p)
{
    const swi_fd *c = p;
    double l = 0;
    for (int64_t i = 0; i < c->n; i++)
        l += c->R[i] * c->g[i] / (1 + exp(-c->g[i])) * c->u[i];
    return l;
}

/* A gated unit (SwiGLU or GeGLU: `gelu`) on every backend against the float64 references (out,
 * dgate, dup with their bounds), the backward also in place (dgate == gate, dup == up) as the
 * decoder's backward calls it. */
static void glu_on_backends(bool gelu, const float *g, const float *u, const float *R, const double *const ref[3],
                            const double *const bnd[3], int64_t n)
{
    const char *name = gelu ? "geglu" : "swiglu", *what[3] = {"fwd", "bwd dgate", "bwd dup"};
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        const df_backend_ops *o = b->be.ops;
        float *dG = bo_up(b, g, 4 * (size_t)n), *dU = bo_up(b, u, 4 * (size_t)n);
        float *dR = bo_up(b, R, 4 * (size_t)n), *dv[3] = {bo_nan(b, n), bo_nan(b, n), bo_nan(b, n)};
        BO_OK((gelu ? o->geglu_fwd : o->swiglu_fwd)(b->be.ctx, dv[0], dG, dU, n));
        BO_OK((gelu ? o->geglu_bwd : o->swiglu_bwd)(b->be.ctx, dv[1], dv[2], dR, dG, dU, n));
        BO_OK((gelu ? o->geglu_bwd : o->swiglu_bwd)(b->be.ctx, dG, dU, dR, dG, dU, n)); /* in place */
        float *in_place[3] = {NULL, dG, dU};
        for (int k = 0; k < 3; k++)
            for (int ip = 0; ip < (k ? 2 : 1); ip++) {
                char label[64];
                snprintf(label, sizeof label, "%s_%s%s", name, what[k], ip ? " in place" : "");
                float *got = bo_down(b, ip ? in_place[k] : dv[k], 4 * (size_t)n);
                bo_check(b->name, label, got, ref[k], bnd[k], n);
                free(got);
            }
        bo_free(b, dG), bo_free(b, dU), bo_free(b, dR);
        for (int k = 0; k < 3; k++)
            bo_free(b, dv[k]);
    }
}

/* The reference backward (dg, du) against finite differences of `loss` over (g, u): `roundings` a
 * term of the loss, n terms; direction seeds from `seed`. */
static void glu_fd(const char *name, double (*loss)(void *), const float *g, const float *u, const float *R,
                   const double *out, const double *dg, const double *du, int64_t n, int roundings, uint64_t seed)
{
    swi_fd c = {n, to_d(g, n), to_d(u, n), to_d(R, n)};
    double mag = 0;
    for (int64_t i = 0; i < n; i++)
        mag += fabs(R[i] * out[i]);
    for (int d = 0; d < 2; d++) {
        float *vg = bo_rand(n, seed + (uint64_t)d, 1), *vu = bo_rand(n, seed + 10 + (uint64_t)d, 1);
        double *ug = to_d(vg, n), *uu = to_d(vu, n), *xs[2] = {c.g, c.u}, *us[2] = {ug, uu};
        const int64_t ns[2] = {n, n};
        double fe, bound = 0;
        const double fd = br_fd_slope(loss, &c, xs, us, ns, 2, 1e-3,
                                      df_tol_gamma((double)(n + roundings), DF_U64) * mag, &fe);
        const double an = dot_b(dg, ug, n, &bound) + dot_b(du, uu, n, &bound);
        bo_fd(name, an, fd, fe + bound);
        free(vg), free(vu), free(ug), free(uu);
    }
    free(c.g), free(c.u), free(c.R);
}

static void test_swiglu(void **state)
{
    (void)state;
    const int64_t n = 1003;
    float *g = bo_rand(n, 100, 3), *u = bo_rand(n, 101, 1), *R = bo_rand(n, 102, 1);
    const float special[] = {-100.0f, -92.0f, -1.2785f, -1e-3f, 0.0f, 1e-3f, 20.0f, 90.0f, 100.0f};
    memcpy(g, special, sizeof special); /* exp overflow, silu' near 0, saturation */
    double *out = br_dvec(n), *dg = br_dvec(n), *du = br_dvec(n), *bo = br_dvec(n);
    double *bg = br_dvec(n), *bu = br_dvec(n);
    br_swiglu(out, dg, du, bo, bg, bu, g, u, R, n);
    glu_on_backends(false, g, u, R, (const double *const[3]){out, dg, du}, (const double *const[3]){bo, bg, bu}, n);
    glu_fd("swiglu_bwd", swi_loss, g, u, R, out, dg, du, n, 8, 110); /* the loss: 6 roundings a term */
    free(g), free(u), free(R), free(out), free(dg), free(du), free(bo), free(bg), free(bu);
}

/* ---- GeGLU (tests/geglu_ref.h: the float64 values and the bounds) ------------------------------ */

static double geg_loss(void *p)
{
    const swi_fd *c = p;
    const double k0 = sqrt(2.0 / 3.14159265358979323846);
    double l = 0;
    for (int64_t i = 0; i < c->n; i++) {
        const double g = c->g[i];
        l += c->R[i] * 0.5 * g * (1 + tanh(k0 * (g + 0.044715 * g * g * g))) * c->u[i];
    }
    return l;
}

static void test_geglu(void **state)
{
    (void)state;
    const int64_t n = 1003;
    float *g = bo_rand(n, 130, 4), *u = bo_rand(n, 131, 1), *R = bo_rand(n, 132, 1);
    /* exp overflow (and its edge), gelu' near 0, saturation */
    const float special[] = {-100.0f, -10.2f, -9.7f, -0.7518f, -1e-3f, 0.0f, 1e-3f, 20.0f, 100.0f};
    memcpy(g, special, sizeof special);
    double *out = br_dvec(n), *dg = br_dvec(n), *du = br_dvec(n), *bo = br_dvec(n);
    double *bg = br_dvec(n), *bu = br_dvec(n);
    for (int64_t i = 0; i < n; i++) {
        const geglu_ref r = geglu_ref_at(g[i], u[i], R[i], BR_EXP_ERR, DF_U32);
        out[i] = r.out, dg[i] = r.dgate, du[i] = r.dup;
        bo[i] = BR_REF * r.bout, bg[i] = BR_REF * r.bdgate, bu[i] = BR_REF * r.bdup;
    }
    glu_on_backends(true, g, u, R, (const double *const[3]){out, dg, du}, (const double *const[3]){bo, bg, bu}, n);
    glu_fd("geglu_bwd", geg_loss, g, u, R, out, dg, du, n, 14, 140); /* the tanh form: 12 roundings a term */
    free(g), free(u), free(R), free(out), free(dg), free(du), free(bo), free(bg), free(bu);
}

/* op with " softcap" after its first word when cap > 0: the summary's name of a capped case. */
static const char *capname(char *buf, size_t n, const char *op, double cap)
{
    const char *sp = strchr(op, ' ');
    if (!(cap > 0))
        snprintf(buf, n, "%s", op);
    else
        snprintf(buf, n, "%.*s softcap%s", (int)(sp ? sp - op : (ptrdiff_t)strlen(op)), op,
                 sp ? sp : "");
    return buf;
}

/* Whether some |x - y| exceeds 2 bd: a case the soft-cap visibly moves (dropping it fails). */
static bool moved(const double *x, const double *y, const double *bd, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (fabs(x[i] - y[i]) > 2 * bd[i])
            return true;
    return false;
}

/* ---- attention over packed sequences ------------------------------------------------------------ */

typedef struct {
    br_attn a;
    double *q, *k, *v, *R, *out, *lse;
} att_fd;

static double att_loss(void *p)
{
    att_fd *c = p;
    br_attn_fwd_d(&c->a, c->q, c->k, c->v, c->out, c->lse);
    double l = 0;
    for (int64_t i = 0; i < c->a.T * c->a.nh * c->a.hd; i++)
        l += c->R[i] * c->out[i];
    return l;
}

/*
 * The reference backward from the exact forward (double out and lse) against finite differences
 * of att_loss along three random directions over (q, k, v), soft-capped as c->a says. The double
 * loss: an output is a chain of hd + 2 L + 10 roundings (6 more for the cap's tanh) of at most
 * max |v| per unit of |R|, and T nh hd of them are summed.
 */
static void attention_fd(att_fd *c, uint64_t seed)
{
    const br_attn *a = &c->a;
    const int64_t nq = a->T * a->nh * a->hd, nk = a->T * a->nkv * a->hd;
    double *dq = br_dvec(nq), *dk = br_dvec(nk), *dv = br_dvec(nk), Lmax = 0, vmax = 0, rs = 0;
    att_loss(c);
    br_attn_bwd_d(a, c->q, c->k, c->v, c->out, c->lse, c->R, dq, dk, dv, NULL, NULL, NULL);
    for (int64_t s = 0; s < a->n_seqs; s++)
        Lmax = fmax(Lmax, (double)(a->off[s + 1] - a->off[s]));
    for (int64_t i = 0; i < nk; i++)
        vmax = fmax(vmax, fabs(c->v[i]));
    for (int64_t i = 0; i < nq; i++)
        rs += fabs(c->R[i]);
    const double eps_l = df_tol_gamma((double)a->hd + 2 * Lmax + 16 + (double)nq, DF_U64) * rs * vmax;
    char op[40];
    capname(op, sizeof op, a->window ? "attention_bwd window" : "attention_bwd", a->softcap);
    for (int d = 0; d < 3; d++) {
        float *f[3] = {bo_rand(nq, seed + d, 1), bo_rand(nk, seed + 10 + d, 1), bo_rand(nk, seed + 20 + d, 1)};
        double *us[3] = {to_d(f[0], nq), to_d(f[1], nk), to_d(f[2], nk)}, *xs[3] = {c->q, c->k, c->v};
        const int64_t ns[3] = {nq, nk, nk};
        double fe, bound = 0;
        const double fd = br_fd_slope(att_loss, c, xs, us, ns, 3, 1e-3, eps_l, &fe);
        const double an = dot_b(dq, us[0], nq, &bound) + dot_b(dk, us[1], nk, &bound) +
                          dot_b(dv, us[2], nk, &bound);
        bo_fd(op, an, fd, fe + bound);
        for (int i = 0; i < 3; i++)
            free(f[i]), free(us[i]);
    }
    free(dq), free(dk), free(dv);
}

/* Without a cap: the forward's out must move by more than its bound somewhere (att_case). */
static void att_cap_moves(att_fd *c, const double *bout)
{
    att_fd u = *c;
    const int64_t nq = c->a.T * c->a.nh * c->a.hd;
    u.a.softcap = 0, u.out = br_dvec(nq), u.lse = br_dvec(c->a.T * c->a.nh);
    br_attn_fwd_d(&u.a, u.q, u.k, u.v, u.out, u.lse);
    if (!moved(c->out, u.out, bout, nq))
        fail_msg("attention softcap %g: the cap does not move the output", c->a.softcap);
    free(u.out), free(u.lse);
}

/*
 * One batch of packed sequences (off[n_seqs + 1]) through every backend with the window cap
 * (window > 0) and the soft-cap one (cap > 0: Gemma 2's C; q then ~ N(0, 9), scores of a few
 * units, saturating a small C).
 */
static void attention_case(const int64_t *off, int64_t n_seqs, int64_t nh, int64_t nkv, int64_t hd,
                           int64_t window, float cap, uint64_t seed)
{
    const int64_t T = off[n_seqs], nq = T * nh * hd, nk = T * nkv * hd;
    float *q = bo_rand(nq, seed, cap > 0 ? 3 : 1), *k = bo_rand(nk, seed + 1, 1);
    float *v = bo_rand(nk, seed + 2, 1), *R = bo_rand(nq, seed + 3, 1);
    att_fd c = {{off, n_seqs, nh, nkv, hd, window, T, q, k, v, cap}, to_d(q, nq), to_d(k, nk),
                to_d(v, nk), to_d(R, nq), br_dvec(nq), br_dvec(T * nh)};
    double *bout = br_dvec(nq), *blse = br_dvec(T * nh);
    br_attn_fwd_d(&c.a, c.q, c.k, c.v, c.out, c.lse);
    br_attn_fwd_bounds(&c.a, c.q, c.k, c.v, c.lse, bout, blse);
    if (cap > 0)
        att_cap_moves(&c, bout);
    /* the backward's inputs: the forward's outputs rounded to float, as a backend stores them */
    float *Of = to_f(c.out, nq), *lf = to_f(c.lse, T * nh);
    double *Od = to_d(Of, nq), *ld = to_d(lf, T * nh);
    double *dq = br_dvec(nq), *dk = br_dvec(nk), *dv = br_dvec(nk);
    double *bq = br_dvec(nq), *bk = br_dvec(nk), *bv = br_dvec(nk);
    br_attn_bwd_d(&c.a, c.q, c.k, c.v, Od, ld, c.R, dq, dk, dv, bq, bk, bv);
    int64_t max_len = 0;
    for (int64_t s = 0; s < n_seqs; s++)
        max_len = off[s + 1] - off[s] > max_len ? off[s + 1] - off[s] : max_len;
    char fwd[40], lsen[40], bwd[40];
    capname(fwd, sizeof fwd, window ? "attention_fwd window" : "attention_fwd", cap);
    capname(lsen, sizeof lsen, window ? "attention_fwd lse window" : "attention_fwd lse", cap);
    capname(bwd, sizeof bwd, window ? "attention_bwd window" : "attention_bwd", cap);
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        if (window && !b->be.ops->attention_window) {
            print_message("%s: no attention_window capability: window %lld not run\n", b->name,
                          (long long)window);
            continue;
        }
        if (cap > 0 && !b->be.ops->attention_softcap) {
            print_message("%s: no attention_softcap capability: softcap %g not run\n", b->name,
                          (double)cap);
            continue;
        }
        int64_t *doff = bo_up(b, off, sizeof(int64_t) * (size_t)(n_seqs + 1));
        const df_backend_seqs s = {doff, n_seqs, T, max_len, window, cap};
        float *dQ = bo_up(b, q, 4 * (size_t)nq), *dK = bo_up(b, k, 4 * (size_t)nk);
        float *dV = bo_up(b, v, 4 * (size_t)nk), *dO = bo_nan(b, nq), *dL = bo_nan(b, T * nh);
        BO_OK(b->be.ops->attention_fwd(b->be.ctx, dO, dL, dQ, dK, dV, &s, nh, nkv, hd));
        float *got = bo_down(b, dO, 4 * (size_t)nq);
        bo_check(b->name, fwd, got, c.out, bout, nq);
        free(got);
        got = bo_down(b, dL, 4 * (size_t)(T * nh));
        bo_check(b->name, lsen, got, c.lse, blse, T * nh);
        free(got);
        BO_OK(b->be.ops->upload(b->be.ctx, dO, Of, 4 * (size_t)nq));
        BO_OK(b->be.ops->upload(b->be.ctx, dL, lf, 4 * (size_t)(T * nh)));
        float *dR = bo_up(b, R, 4 * (size_t)nq), *gq = bo_nan(b, nq), *gk = bo_nan(b, nk);
        float *gv = bo_nan(b, nk);
        BO_OK(b->be.ops->attention_bwd(b->be.ctx, gq, gk, gv, dR, dO, dL, dQ, dK, dV, &s, nh,
                                       nkv, hd));
        const float *gs[3] = {gq, gk, gv};
        const double *refs[3] = {dq, dk, dv}, *bds[3] = {bq, bk, bv};
        for (int i = 0; i < 3; i++) {
            got = bo_down(b, gs[i], 4 * (size_t)(i ? nk : nq));
            char op[48];
            snprintf(op, sizeof op, "%s d%c", bwd, "qkv"[i]);
            bo_check(b->name, op, got, refs[i], bds[i], i ? nk : nq);
            free(got);
        }
        bo_free(b, doff), bo_free(b, dQ), bo_free(b, dK), bo_free(b, dV), bo_free(b, dO);
        bo_free(b, dL), bo_free(b, dR), bo_free(b, gq), bo_free(b, gk), bo_free(b, gv);
    }
    attention_fd(&c, seed + 50);
    free(q), free(k), free(v), free(R), free(c.q), free(c.k), free(c.v), free(c.R), free(c.out);
    free(c.lse), free(bout), free(blse), free(Of), free(lf), free(Od), free(ld);
    free(dq), free(dk), free(dv), free(bq), free(bk), free(bv);
}

static void test_attention(void **state)
{
    (void)state;
    const int64_t off1[5] = {0, 1, 6, 39, 109}; /* lengths 1, 5, 33, 70 */
    attention_case(off1, 4, 4, 2, 8, 0, 0, 200);   /* GQA 2, a small head */
    const int64_t off2[4] = {0, 40, 41, 191};   /* lengths 40, 1, 150 */
    attention_case(off2, 3, 2, 1, 64, 32, 0, 210); /* a window of one key tile */
    attention_case(off2, 3, 2, 2, 64, 0, 0, 220);  /* MHA */
    const int64_t off3[4] = {0, 20, 23, 68};    /* qwen3-like: head_dim 128, GQA 2 */
    attention_case(off3, 3, 4, 2, 128, 0, 0, 230);
    attention_case(off3, 3, 4, 2, 128, 7, 0, 240);
    const int64_t off4[4] = {0, 257, 259, 390}; /* GQA 4, crossing 128-row query blocks */
    attention_case(off4, 3, 8, 2, 64, 0, 0, 250);
    attention_case(off4, 3, 8, 2, 64, 100, 0, 260);
}

/* Gemma 2's soft-cap: C 1 and 2 against scores of a few units (most saturate), and C 50 (the
 * cap a small correction). */
static void test_attention_softcap(void **state)
{
    (void)state;
    const int64_t off1[5] = {0, 1, 6, 39, 109}, off2[4] = {0, 40, 41, 191};
    const int64_t off3[4] = {0, 20, 23, 68};
    attention_case(off1, 4, 4, 2, 8, 0, 1.0f, 270);    /* GQA 2 */
    attention_case(off2, 3, 2, 1, 64, 32, 2.0f, 280);  /* a window, GQA 2 */
    attention_case(off3, 3, 4, 4, 128, 7, 1.0f, 290);  /* MHA, head_dim 128, a window */
    attention_case(off2, 3, 8, 2, 64, 0, 50.0f, 295);  /* GQA 4, C large */
}

/* ---- the rollout's KV cache ---------------------------------------------------------------------- */

/* A random host cache (both tensors N(0,1); bf16 ones rounded by br_bf16_bits). */
static df_backend_kv kv_host(int64_t L, int64_t S, int64_t M, int64_t kvd, df_kv_dtype dt,
                             uint64_t seed)
{
    df_backend_kv c = {NULL, NULL, L, S, M, kvd, dt};
    const int64_t n = L * S * M * kvd;
    for (int t = 0; t < 2; t++) {
        float *x = bo_rand(n, seed + (uint64_t)t, 1);
        void *p = x;
        if (dt == DF_KV_BF16) {
            uint16_t *b16 = xmalloc(2 * (size_t)n);
            for (int64_t i = 0; i < n; i++)
                b16[i] = br_bf16_bits(x[i]);
            free(x);
            p = b16;
        }
        *(t ? &c.v : &c.k) = p;
    }
    return c;
}

/* Element i of a cache tensor as float32 (a bf16 widened exactly). */
static float kv_val(const df_backend_kv *c, const void *t, int64_t i)
{
    if (c->dtype == DF_KV_F32)
        return ((const float *)t)[i];
    const uint32_t bits = (uint32_t)((const uint16_t *)t)[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The backend's copy of host cache h. */
static df_backend_kv kv_up(const bo_backend *b, const df_backend_kv *h)
{
    df_backend_kv d = *h;
    d.k = bo_up(b, h->k, df_backend_kv_bytes(h));
    d.v = bo_up(b, h->v, df_backend_kv_bytes(h));
    return d;
}

/* Both tensors of the backend's cache d hold want's bits, every element. */
static void kv_expect(const bo_backend *b, const char *op, const df_backend_kv *d,
                      const df_backend_kv *want)
{
    const size_t bytes = df_backend_kv_bytes(want), es = want->dtype == DF_KV_BF16 ? 2 : 4;
    for (int t = 0; t < 2; t++) {
        unsigned char *got = bo_down(b, t ? d->v : d->k, bytes);
        const unsigned char *w = t ? want->v : want->k;
        for (size_t i = 0; i < bytes; i += es)
            if (memcmp(got + i, w + i, es)) {
                uint32_t g = 0, x = 0;
                memcpy(&g, got + i, es), memcpy(&x, w + i, es);
                fail_msg("%s %s: %c element %zu is 0x%x, expected 0x%x", b->name, op, "KV"[t],
                         i / es, g, x);
            }
        free(got);
    }
    bo_note(b->name, op, 0, (int64_t)(2 * bytes / es));
}

static void kv_free(const bo_backend *b, df_backend_kv *d)
{
    if (b)
        bo_free(b, d->k), bo_free(b, d->v);
    else
        free(d->k), free(d->v);
}

static float f_of(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/*
 * kv_write: rows at distinct (slot, pos) cells of layer 1, the rest of the cache untouched; a
 * float32 cache holds the rows' bits, a bf16 one br_bf16_bits of them (special values first:
 * NaNs with payloads, infinities, -0, ties at 1 and in the subnormals, overflow to inf).
 */
static void kv_write_case(df_kv_dtype dt, uint64_t seed)
{
    const int64_t L = 3, S = 5, M = 40, kvd = 2 * 64, n = 7, layer = 1;
    const int32_t slot[7] = {4, 0, 2, 0, 4, 1, 3}, pos[7] = {0, 39, 17, 0, 1, 5, 38};
    /* (input, its bf16 by hand): the reference rounding itself checked */
    const uint32_t sp[][2] = {
        {0x7fa12345u, 0x7fe1u}, {0xffc00001u, 0xffc0u}, {0x7f800000u, 0x7f80u},
        {0xff800000u, 0xff80u}, {0x80000000u, 0x8000u}, {0x3f808000u, 0x3f80u},
        {0x3f818000u, 0x3f82u}, {0x7f7fffffu, 0x7f80u}, {0x00000001u, 0x0000u},
        {0x00008000u, 0x0000u}, {0x00018000u, 0x0002u}, {0x807fffffu, 0x8080u},
        {0x3f80ffffu, 0x3f81u}, {0x7f7f8000u, 0x7f80u}, {0xbf7f7fffu, 0xbf7fu}};
    const int nsp = (int)(sizeof sp / sizeof sp[0]);
    df_backend_kv init = kv_host(L, S, M, kvd, dt, seed), want = kv_host(L, S, M, kvd, dt, seed);
    float *k = bo_rand(n * kvd, seed + 2, 3), *v = bo_rand(n * kvd, seed + 3, 3);
    for (int i = 0; i < nsp; i++) {
        k[i] = f_of(sp[i][0]), v[kvd + i] = f_of(sp[i][0]);
        if (br_bf16_bits(k[i]) != sp[i][1])
            fail_msg("br_bf16_bits(0x%08x) = 0x%04x, by hand 0x%04x", sp[i][0],
                     br_bf16_bits(k[i]), sp[i][1]);
    }
    int64_t rounded_up = 0; /* rows where nearest-even is not truncation: the rounding shows */
    for (int64_t r = 0; r < n; r++)
        for (int64_t e = 0; e < kvd; e++) {
            const int64_t i = ((layer * S + slot[r]) * M + pos[r]) * kvd + e;
            for (int t = 0; t < 2; t++) {
                const float x = (t ? v : k)[r * kvd + e];
                if (dt == DF_KV_F32) {
                    ((float *)(t ? want.v : want.k))[i] = x;
                } else {
                    uint32_t u;
                    memcpy(&u, &x, 4);
                    const uint16_t h = br_bf16_bits(x);
                    ((uint16_t *)(t ? want.v : want.k))[i] = h;
                    rounded_up += !isnan(x) && h != (uint16_t)(u >> 16);
                }
            }
        }
    assert_true(dt == DF_KV_F32 || rounded_up > n * kvd / 4);
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        df_backend_kv d = kv_up(b, &init);
        float *dk = bo_up(b, k, 4 * (size_t)(n * kvd)), *dv = bo_up(b, v, 4 * (size_t)(n * kvd));
        int32_t *ds = bo_up(b, slot, sizeof slot), *dp = bo_up(b, pos, sizeof pos);
        BO_OK(b->be.ops->kv_write(b->be.ctx, &d, layer, dk, dv, ds, dp, n));
        kv_expect(b, dt == DF_KV_BF16 ? "kv_write bf16" : "kv_write f32", &d, &want);
        kv_free(b, &d);
        bo_free(b, dk), bo_free(b, dv), bo_free(b, ds), bo_free(b, dp);
    }
    kv_free(NULL, &init), kv_free(NULL, &want);
    free(k), free(v);
}

/* kv_copy: positions [0, len) of slot src in every layer onto slot dst; nothing else moves. */
static void kv_copy_case(df_kv_dtype dt, int64_t S, int64_t M, int64_t kvd, int64_t src,
                         int64_t dst, int64_t len, uint64_t seed)
{
    const int64_t L = 3;
    const size_t es = dt == DF_KV_BF16 ? 2 : 4;
    df_backend_kv init = kv_host(L, S, M, kvd, dt, seed), want = kv_host(L, S, M, kvd, dt, seed);
    for (int64_t l = 0; l < L; l++)
        for (int t = 0; t < 2; t++) {
            char *w = t ? want.v : want.k;
            memcpy(w + (size_t)((l * S + dst) * M * kvd) * es,
                   w + (size_t)((l * S + src) * M * kvd) * es, (size_t)(len * kvd) * es);
        }
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        df_backend_kv d = kv_up(b, &init);
        BO_OK(b->be.ops->kv_copy(b->be.ctx, &d, src, dst, len));
        kv_expect(b, dt == DF_KV_BF16 ? "kv_copy bf16" : "kv_copy f32", &d, &want);
        kv_free(b, &d);
    }
    kv_free(NULL, &init), kv_free(NULL, &want);
}

/*
 * kv_attention over layer 1 of a random cache (2 layers, 4 slots of M positions) for n rows
 * (slot[r], pos[r]) against br_kv_attn_row's float64 result and bound, outputs poisoned with NaN
 * first; then each row alone (n = 1, the same scratch) must give the batch's bits: a row's
 * result depends on no other row (backend.h). cap > 0: Gemma 2's soft-cap (q ~ N(0, 9), as
 * attention_case's), on backends with attention_softcap, the uncapped output beyond the bound.
 */
static void kv_attn_case(df_kv_dtype dt, int64_t nh, int64_t nkv, int64_t hd, int64_t window,
                         int64_t M, const int32_t *slot, const int32_t *pos, int64_t n,
                         float cap, uint64_t seed)
{
    const int64_t S = 4, kvd = nkv * hd, layer = 1, qd = nh * hd;
    df_backend_kv c = kv_host(2, S, M, kvd, dt, seed);
    float *q = bo_rand(n * qd, seed + 5, cap > 0 ? 3 : 1), *Kr = xmalloc(4 * (size_t)(M * kvd));
    float *Vr = xmalloc(4 * (size_t)(M * kvd));
    double *ref = br_dvec(n * qd), *bd = br_dvec(n * qd), *ref0 = br_dvec(qd), *bd0 = br_dvec(qd);
    bool any = cap <= 0;
    for (int64_t r = 0; r < n; r++) {
        const int64_t j0 = window > 0 && pos[r] + 1 > window ? pos[r] + 1 - window : 0;
        const int64_t Lr = pos[r] + 1 - j0;
        for (int64_t j = 0; j < Lr; j++)
            for (int64_t e = 0; e < kvd; e++) {
                const int64_t i = ((layer * S + slot[r]) * M + j0 + j) * kvd + e;
                Kr[j * kvd + e] = kv_val(&c, c.k, i), Vr[j * kvd + e] = kv_val(&c, c.v, i);
            }
        br_kv_attn_row(q + r * qd, Kr, Vr, kvd, Lr, nh, nkv, hd, cap, ref + r * qd, bd + r * qd);
        if (!any) {
            br_kv_attn_row(q + r * qd, Kr, Vr, kvd, Lr, nh, nkv, hd, 0, ref0, bd0);
            any = moved(ref + r * qd, ref0, bd + r * qd, qd);
        }
    }
    if (!any)
        fail_msg("kv_attention softcap %g: the cap does not move the output", (double)cap);
    char op[48], opn[48];
    snprintf(opn, sizeof opn, "kv_attention %s%s", dt == DF_KV_BF16 ? "bf16" : "f32",
             window ? " window" : "");
    capname(op, sizeof op, opn, cap);
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        void *cx = b->be.ctx;
        if (cap > 0 && !b->be.ops->attention_softcap) {
            print_message("%s: no attention_softcap capability: %s not run\n", b->name, op);
            continue;
        }
        df_backend_kv d = kv_up(b, &c);
        const int64_t nsc = b->be.ops->kv_scratch_floats(cx, nh, M);
        float *sc = bo_nan(b, nsc > 0 ? nsc : 1), *dq = bo_up(b, q, 4 * (size_t)(n * qd));
        float *dO = bo_nan(b, n * qd), *dO1 = bo_nan(b, qd);
        int32_t *ds = bo_up(b, slot, 4 * (size_t)n), *dp = bo_up(b, pos, 4 * (size_t)n);
        BO_OK(b->be.ops->kv_attention(cx, dO, dq, &d, layer, ds, dp, n, nh, nkv, hd, window, cap, sc));
        float *got = bo_down(b, dO, 4 * (size_t)(n * qd));
        bo_check(b->name, op, got, ref, bd, n * qd);
        for (int64_t r = 0; r < n; r++) {
            BO_OK(b->be.ops->kv_attention(cx, dO1, dq + r * qd, &d, layer, ds + r, dp + r, 1, nh,
                                          nkv, hd, window, cap, sc));
            float *one = bo_down(b, dO1, 4 * (size_t)qd);
            if (memcmp(one, got + r * qd, 4 * (size_t)qd))
                fail_msg("%s %s: row %lld (slot %d, pos %d) alone differs from the batch", b->name,
                         op, (long long)r, slot[r], pos[r]);
            free(one);
        }
        bo_note(b->name, "kv_attention row alone", 0, n * qd);
        free(got);
        kv_free(b, &d);
        bo_free(b, sc), bo_free(b, dq), bo_free(b, dO), bo_free(b, dO1), bo_free(b, ds);
        bo_free(b, dp);
    }
    kv_free(NULL, &c);
    free(q), free(Kr), free(Vr), free(ref), free(bd), free(ref0), free(bd0);
}

static void test_kv(void **state)
{
    (void)state;
    for (int i = 0; i < bo_n; i++)
        if (!bo_list[i].be.ops->kv_write || !bo_list[i].be.ops->kv_copy ||
            !bo_list[i].be.ops->kv_scratch_floats || !bo_list[i].be.ops->kv_attention)
            fail_msg("%s: a kv_* entry is NULL", bo_list[i].name);
    kv_write_case(DF_KV_F32, 400);
    kv_write_case(DF_KV_BF16, 410);
    /* word sizes of a device copy: 16-byte rows, 4-byte, 2-byte; the whole slot; nothing */
    kv_copy_case(DF_KV_F32, 4, 40, 64, 3, 0, 23, 420);
    kv_copy_case(DF_KV_F32, 4, 37, 25, 0, 2, 10, 421);
    kv_copy_case(DF_KV_BF16, 3, 37, 25, 1, 2, 37, 422);
    kv_copy_case(DF_KV_BF16, 3, 37, 64, 2, 1, 0, 423);
    /* 48 rows (enough rows x heads that a GPU runs them unsplit; alone, each is split), pos 0,
     * lengths on and off the 32-position chunks and 256-position segments, up to 1100 */
    int32_t s1[48], p1[48];
    const int32_t pl[12] = {0, 1099, 300, 255, 256, 17, 513, 31, 32, 1, 767, 1024};
    for (int r = 0; r < 48; r++)
        s1[r] = (int32_t)(r * 3 % 4), p1[r] = pl[r % 12] - (int32_t)(r / 12) * (pl[r % 12] > 40);
    kv_attn_case(DF_KV_F32, 8, 2, 64, 0, 1100, s1, p1, 48, 0, 430);     /* GQA 4 */
    kv_attn_case(DF_KV_BF16, 8, 2, 64, 0, 1100, s1, p1, 48, 0, 440);
    kv_attn_case(DF_KV_BF16, 8, 2, 64, 1, 1100, s1, p1, 12, 0, 445);    /* a window of itself */
    const int32_t s2[5] = {3, 3, 0, 1, 2}, p2[5] = {0, 612, 99, 100, 450}; /* slot 3 twice */
    kv_attn_case(DF_KV_F32, 4, 4, 128, 100, 640, s2, p2, 5, 0, 450);    /* MHA, qwen3's hd */
    kv_attn_case(DF_KV_BF16, 4, 2, 128, 300, 640, s2, p2, 5, 0, 460);   /* a window past a segment */
    kv_attn_case(DF_KV_F32, 4, 2, 128, 0, 640, s2, p2, 5, 0, 465);
    const int32_t s3[2] = {0, 2}, p3[2] = {599, 3};
    kv_attn_case(DF_KV_BF16, 2, 1, 256, 0, 600, s3, p3, 2, 0, 470);     /* hd 256 */
    /* Gemma 2's soft-cap: C 1 and 2 saturating scores of a few units, C 50 barely */
    kv_attn_case(DF_KV_F32, 8, 2, 64, 0, 1100, s1, p1, 24, 1.0f, 480);  /* GQA 4 */
    kv_attn_case(DF_KV_BF16, 8, 2, 64, 0, 1100, s1, p1, 24, 2.0f, 485);
    kv_attn_case(DF_KV_BF16, 4, 2, 128, 300, 640, s2, p2, 5, 1.0f, 490); /* a window */
    kv_attn_case(DF_KV_F32, 4, 4, 128, 100, 640, s2, p2, 5, 50.0f, 495); /* MHA, C large */
}

/* ---- LM head -------------------------------------------------------------------------------------- */

typedef struct {
    int64_t n, V, H;
    double temp, *h, *W, *a, *b, *logp, *ent, *lse;
    const int32_t *tgt;
    double cap; /* Gemma 2's final-logit soft-cap (0: none) */
} lm_fd;

static double lm_loss(void *p)
{
    lm_fd *c = p;
    br_lmhead_fwd_d(c->h, c->W, c->tgt, c->n, c->V, c->H, c->temp, c->cap, c->logp, c->ent,
                    c->lse);
    double l = 0;
    for (int64_t i = 0; i < c->n; i++)
        l += c->a[i] * c->logp[i] + c->b[i] * c->ent[i];
    return l;
}

/* Without the cap some log-prob moves beyond its bound (lmhead_case, lmhead_w16_case). */
static void lm_cap_moves(const double *h, const double *W, const int32_t *tgt, int64_t n, int64_t V,
                         int64_t H, double temp, double cap, const double *logp, const double *blp)
{
    double *lp = br_dvec(n), *ent = br_dvec(n), *lse = br_dvec(n);
    br_lmhead_fwd_d(h, W, tgt, n, V, H, temp, 0, lp, ent, lse);
    if (!moved(logp, lp, blp, n))
        fail_msg("lmhead softcap %g: the cap does not move the log-probs", cap);
    free(lp), free(ent), free(lse);
}

/*
 * The LM head (lmhead_fwd / _bwd) through every backend: n rows of a [V, H] head (logits of a
 * few units) at temperature temp; cap > 0: Gemma 2's final-logit soft-cap, on backends with
 * attention_softcap.
 */
static void lmhead_case(int64_t n, int64_t V, int64_t H, double temp, double cap, uint64_t seed)
{
    float *h = bo_rand(n * H, seed, 1), *W = bo_rand(V * H, seed + 1, 3.0 / sqrt((double)H));
    float *a = bo_rand(n, seed + 2, 1), *bb = bo_rand(n, seed + 3, 1), *dW0 = bo_rand(V * H, seed + 4, 0.1);
    int32_t *tgt = xmalloc(4 * (size_t)n);
    df_rng r;
    df_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++)
        tgt[i] = (int32_t)df_rng_below(&r, (uint64_t)V);
    tgt[0] = (int32_t)(V - 1); /* the last, partial tile */
    lm_fd c = {n, V, H, temp, to_d(h, n * H), to_d(W, V * H), to_d(a, n), to_d(bb, n),
               br_dvec(n), br_dvec(n), br_dvec(n), tgt, cap};
    lm_loss(&c);
    double *blp = br_dvec(n), *bent = br_dvec(n), *blse = br_dvec(n), *sq = br_dvec(n), *bsq = br_dvec(n);
    br_lmhead_fwd_bounds(c.h, c.W, tgt, n, V, H, temp, cap, c.logp, c.ent, c.lse, blp, bent, blse);
    br_lmhead_sumsq_d(c.h, c.W, n, V, H, temp, cap, 0, sq, bsq);
    if (cap > 0)
        lm_cap_moves(c.h, c.W, tgt, n, V, H, temp, cap, c.logp, blp);
    float *lsef = to_f(c.lse, n), *entf = to_f(c.ent, n);
    double *lsed = to_d(lsef, n), *entd = to_d(entf, n);
    double *dh = br_dvec(n * H), *dW = br_dvec(V * H), *bdh = br_dvec(n * H), *bdW = br_dvec(V * H);
    double *dh1 = br_dvec(n * H), *dW1 = br_dvec(V * H), *bdh1 = br_dvec(n * H), *bdW1 = br_dvec(V * H);
    br_lmhead_bwd_d(c.h, c.W, tgt, lsed, entd, c.a, c.b, n, V, H, temp, cap, dW0, dh, dW, bdh, bdW);
    br_lmhead_bwd_d(c.h, c.W, tgt, lsed, entd, c.a, NULL, n, V, H, temp, cap, dW0, dh1, dW1, bdh1,
                    bdW1);
    const float fc = (float)cap;
    char nm[48];
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        void *cx = b->be.ctx;
        if (cap > 0 && !b->be.ops->attention_softcap) {
            print_message("%s: no attention_softcap capability: lmhead softcap %g not run\n",
                          b->name, cap);
            continue;
        }
        const int64_t nsc = b->be.ops->lmhead_scratch_floats(cx, n, V, H);
        float *sc = bo_nan(b, nsc > 0 ? nsc : 1), *dH = bo_up(b, h, 4 * (size_t)(n * H));
        float *dWt = bo_up(b, W, 4 * (size_t)(V * H)), *dlp = bo_nan(b, n), *den = bo_nan(b, n);
        float *dls = bo_nan(b, n);
        int32_t *dt = bo_up(b, tgt, 4 * (size_t)n);
        BO_OK(b->be.ops->lmhead_fwd(cx, dlp, den, NULL, dls, dH, dWt, dt, n, V, H, (float)temp, fc, sc));
        float *got = bo_down(b, dlp, 4 * (size_t)n);
        bo_check(b->name, capname(nm, sizeof nm, "lmhead_fwd logp", cap), got, c.logp, blp, n);
        free(got);
        got = bo_down(b, den, 4 * (size_t)n);
        bo_check(b->name, capname(nm, sizeof nm, "lmhead_fwd entropy", cap), got, c.ent, bent, n);
        free(got);
        got = bo_down(b, dls, 4 * (size_t)n);
        bo_check(b->name, capname(nm, sizeof nm, "lmhead_fwd lse", cap), got, c.lse, blse, n);
        free(got);
        /* no entropy: the same log-probs; the sum of p^2 with and without the entropy */
        BO_OK(b->be.ops->lmhead_fwd(cx, dlp, NULL, NULL, dls, dH, dWt, dt, n, V, H, (float)temp, fc, sc));
        got = bo_down(b, dlp, 4 * (size_t)n);
        bo_check(b->name, capname(nm, sizeof nm, "lmhead_fwd logp", cap), got, c.logp, blp, n);
        free(got);
        float *dsq = bo_nan(b, n);
        for (int withe = 0; withe < 2; withe++) {
            BO_OK(b->be.ops->lmhead_fwd(cx, dlp, withe ? den : NULL, dsq, dls, dH, dWt, dt, n, V, H,
                                        (float)temp, fc, sc));
            got = bo_down(b, dsq, 4 * (size_t)n);
            bo_check(b->name, capname(nm, sizeof nm, "lmhead_fwd sum_pi_sq", cap), got, sq, bsq, n);
            free(got);
            got = bo_down(b, withe ? den : dlp, 4 * (size_t)n);
            capname(nm, sizeof nm, withe ? "lmhead_fwd entropy" : "lmhead_fwd logp", cap);
            bo_check(b->name, nm, got, withe ? c.ent : c.logp, withe ? bent : blp, n);
            free(got);
        }
        /* backward from the float lse and entropy, with and without an entropy gradient */
        float *da = bo_up(b, a, 4 * (size_t)n), *db = bo_up(b, bb, 4 * (size_t)n);
        BO_OK(b->be.ops->upload(cx, dls, lsef, 4 * (size_t)n));
        BO_OK(b->be.ops->upload(cx, den, entf, 4 * (size_t)n));
        for (int withe = 1; withe >= 0; withe--) {
            float *ddh = bo_nan(b, n * H), *ddW = bo_up(b, dW0, 4 * (size_t)(V * H));
            BO_OK(b->be.ops->lmhead_bwd(cx, ddh, ddW, da, withe ? db : NULL, dH, dWt, dt, dls,
                                        den, n, V, H, (float)temp, fc, sc));
            got = bo_down(b, ddh, 4 * (size_t)(n * H));
            bo_check(b->name, capname(nm, sizeof nm, "lmhead_bwd dh", cap), got,
                     withe ? dh : dh1, withe ? bdh : bdh1, n * H);
            free(got);
            got = bo_down(b, ddW, 4 * (size_t)(V * H));
            bo_check(b->name, capname(nm, sizeof nm, "lmhead_bwd dW", cap), got,
                     withe ? dW : dW1, withe ? bdW : bdW1, V * H);
            free(got);
            bo_free(b, ddh), bo_free(b, ddW);
        }
        { /* a frozen head (LoRA): dW NULL skips the weight gradient, dh as with it */
            float *ddh = bo_nan(b, n * H);
            BO_OK(b->be.ops->lmhead_bwd(cx, ddh, NULL, da, db, dH, dWt, dt, dls, den, n, V, H,
                                        (float)temp, fc, sc));
            got = bo_down(b, ddh, 4 * (size_t)(n * H));
            bo_check(b->name, capname(nm, sizeof nm, "lmhead_bwd dh, dW NULL", cap), got, dh, bdh,
                     n * H);
            free(got);
            bo_free(b, ddh);
        }
        bo_free(b, sc), bo_free(b, dH), bo_free(b, dWt), bo_free(b, dlp), bo_free(b, den);
        bo_free(b, dls), bo_free(b, dt), bo_free(b, da), bo_free(b, db), bo_free(b, dsq);
    }
    /* the reference backward (exact lse and entropy, dW0 = 0) against finite differences over
     * (h, W); the double loss: H + V + 10 roundings per row (6 more for the cap's tanh) */
    float *zero = calloc((size_t)(V * H), sizeof(float));
    br_lmhead_bwd_d(c.h, c.W, tgt, c.lse, c.ent, c.a, c.b, n, V, H, temp, cap, zero, dh, dW, NULL,
                    NULL);
    double mag = 0;
    for (int64_t i = 0; i < n; i++)
        mag += (fabs(c.a[i]) + fabs(c.b[i])) * (fabs(c.lse[i]) + fabs(c.logp[i]) + fabs(c.ent[i]));
    const double eps_l = df_tol_gamma((double)(H + V + 16 + n), DF_U64) * mag;
    for (int d = 0; d < 2; d++) {
        float *vh = bo_rand(n * H, seed + 10 + d, 1), *vW = bo_rand(V * H, seed + 20 + d, 1);
        double *uh = to_d(vh, n * H), *uW = to_d(vW, V * H), *xs[2] = {c.h, c.W}, *us[2] = {uh, uW};
        const int64_t ns[2] = {n * H, V * H};
        double fe, bound = 0;
        const double fd = br_fd_slope(lm_loss, &c, xs, us, ns, 2, 1e-3, eps_l, &fe);
        const double an = dot_b(dh, uh, n * H, &bound) + dot_b(dW, uW, V * H, &bound);
        bo_fd(capname(nm, sizeof nm, "lmhead_bwd", cap), an, fd, fe + bound);
        free(vh), free(vW), free(uh), free(uW);
    }
    free(zero), free(h), free(W), free(a), free(bb), free(dW0), free(tgt);
    free(c.h), free(c.W), free(c.a), free(c.b), free(c.logp), free(c.ent), free(c.lse);
    free(blp), free(bent), free(blse), free(lsef), free(entf), free(lsed), free(entd);
    free(dh), free(dW), free(bdh), free(bdW), free(dh1), free(dW1), free(bdh1), free(bdW1);
    free(sq), free(bsq);
}

/* Whether some |got - ref| exceeds the float32 bound b32: the bf16 path is not float32. */
static bool beyond(const float *got, const double *ref, const double *b32, int64_t n)
{
    bool any = false;
    for (int64_t i = 0; i < n; i++)
        any |= fabs((double)got[i] - ref[i]) > b32[i];
    return any;
}

/*
 * lmhead_fwd_w16 / _bwd_w16 (mixed precision's head): W given in bf16 (its value: bf16 widened
 * exactly), h rounded to bf16, dL/dlogits rounded per tile: against the float64 head of the
 * float h and that W within the bf16 bounds (backend_ref.h, bf16 1: one operand of each
 * product rounded for the logits, dlogits' rounding on the gradients), and beyond the float32
 * bounds somewhere (the head is not silently float32). cap > 0: Gemma 2's final-logit soft-cap.
 */
static void lmhead_w16_case(const bo_backend *b, int64_t n, int64_t V, int64_t H, double temp,
                            double cap, uint64_t seed)
{
    float *h = bo_rand(n * H, seed, 1), *W = bo_rand(V * H, seed + 1, 3.0 / sqrt((double)H));
    float *a = bo_rand(n, seed + 2, 1), *bb = bo_rand(n, seed + 3, 1), *dW0 = bo_rand(V * H, seed + 4, 0.1);
    uint16_t *W16 = xmalloc(2 * (size_t)(V * H));
    df_bf16_from_f32(W16, W, V * H);
    for (int64_t i = 0; i < V * H; i++) {
        uint32_t bits = (uint32_t)W16[i] << 16;
        memcpy(&W[i], &bits, 4);
    }
    int32_t *tgt = xmalloc(4 * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        tgt[i] = (int32_t)((i * 7919 + (int64_t)seed) % V);
    tgt[0] = (int32_t)(V - 1);
    double *hd = to_d(h, n * H), *Wd = to_d(W, V * H), *ad = to_d(a, n), *bd = to_d(bb, n);
    double *lp = br_dvec(n), *ent = br_dvec(n), *lse = br_dvec(n);
    br_lmhead_fwd_d(hd, Wd, tgt, n, V, H, temp, cap, lp, ent, lse);
    double *b16[4], *b32[4];
    for (int k = 0; k < 3; k++)
        b16[k] = br_dvec(n), b32[k] = br_dvec(n);
    br_lmhead_fwd_bounds_ex(hd, Wd, tgt, n, V, H, temp, cap, lp, ent, lse, b16[0], b16[1], b16[2],
                            1);
    br_lmhead_fwd_bounds(hd, Wd, tgt, n, V, H, temp, cap, lp, ent, lse, b32[0], b32[1], b32[2]);
    if (cap > 0)
        lm_cap_moves(hd, Wd, tgt, n, V, H, temp, cap, lp, b16[0]);
    float *lsef = to_f(lse, n), *entf = to_f(ent, n);
    double *lsed = to_d(lsef, n), *entd = to_d(entf, n);
    double *dh = br_dvec(n * H), *dW = br_dvec(V * H), *bdh = br_dvec(n * H), *bdW = br_dvec(V * H);
    double *dh32 = br_dvec(n * H), *dW32 = br_dvec(V * H), *bdh32 = br_dvec(n * H);
    double *bdW32 = br_dvec(V * H);
    br_lmhead_bwd_d_ex(hd, Wd, tgt, lsed, entd, ad, bd, n, V, H, temp, cap, dW0, dh, dW, bdh, bdW,
                       1);
    br_lmhead_bwd_d(hd, Wd, tgt, lsed, entd, ad, bd, n, V, H, temp, cap, dW0, dh32, dW32, bdh32,
                    bdW32);
    void *cx = b->be.ctx;
    const int64_t nsc = b->be.ops->lmhead_scratch_floats(cx, n, V, H);
    float *sc = bo_nan(b, nsc), *dH = bo_up(b, h, 4 * (size_t)(n * H)), *dlp = bo_nan(b, n);
    float *den = bo_nan(b, n), *dls = bo_nan(b, n), *dsq = bo_nan(b, n);
    uint16_t *dW16 = bo_up(b, W16, 2 * (size_t)(V * H));
    int32_t *dt = bo_up(b, tgt, 4 * (size_t)n);
    double *sq = br_dvec(n);
    br_lmhead_sumsq_d(hd, Wd, n, V, H, temp, cap, 1, sq, b16[3] = br_dvec(n));
    br_lmhead_sumsq_d(hd, Wd, n, V, H, temp, cap, 0, sq, b32[3] = br_dvec(n));
    const float fc = (float)cap;
    char nm[48];
    BO_OK(b->be.ops->lmhead_fwd_w16(cx, dlp, den, dsq, dls, dH, dW16, dt, n, V, H, (float)temp, fc, sc));
    float *got[4] = {bo_down(b, dlp, 4 * (size_t)n), bo_down(b, den, 4 * (size_t)n),
                     bo_down(b, dls, 4 * (size_t)n), bo_down(b, dsq, 4 * (size_t)n)};
    const double *ref[4] = {lp, ent, lse, sq};
    const char *names[4] = {"lmhead_fwd_w16 logp", "lmhead_fwd_w16 entropy", "lmhead_fwd_w16 lse",
                            "lmhead_fwd_w16 sum_pi_sq"};
    bool any32 = false;
    for (int k = 0; k < 4; k++) {
        bo_check(b->name, capname(nm, sizeof nm, names[k], cap), got[k], ref[k], b16[k], n);
        any32 |= beyond(got[k], ref[k], b32[k], n);
        free(got[k]);
    }
    assert_true(any32);
    float *da = bo_up(b, a, 4 * (size_t)n), *db = bo_up(b, bb, 4 * (size_t)n);
    BO_OK(b->be.ops->upload(cx, dls, lsef, 4 * (size_t)n));
    BO_OK(b->be.ops->upload(cx, den, entf, 4 * (size_t)n));
    float *ddh = bo_nan(b, n * H), *ddW = bo_up(b, dW0, 4 * (size_t)(V * H));
    BO_OK(b->be.ops->lmhead_bwd_w16(cx, ddh, ddW, da, db, dH, dW16, dt, dls, den, n, V, H,
                                    (float)temp, fc, sc));
    float *gh = bo_down(b, ddh, 4 * (size_t)(n * H)), *gW = bo_down(b, ddW, 4 * (size_t)(V * H));
    bo_check(b->name, capname(nm, sizeof nm, "lmhead_bwd_w16 dh", cap), gh, dh, bdh, n * H);
    bo_check(b->name, capname(nm, sizeof nm, "lmhead_bwd_w16 dW", cap), gW, dW, bdW, V * H);
    assert_true(beyond(gh, dh32, bdh32, n * H) && beyond(gW, dW32, bdW32, V * H));
    free(gh);
    /* a frozen head (LoRA): dW NULL skips the weight gradient, dh as with it */
    BO_OK(b->be.ops->lmhead_bwd_w16(cx, ddh, NULL, da, db, dH, dW16, dt, dls, den, n, V, H,
                                    (float)temp, fc, sc));
    gh = bo_down(b, ddh, 4 * (size_t)(n * H));
    bo_check(b->name, capname(nm, sizeof nm, "lmhead_bwd_w16 dh, dW NULL", cap), gh, dh, bdh,
             n * H);
    free(gh), free(gW), free(h), free(W), free(a), free(bb), free(dW0), free(W16), free(tgt);
    free(hd), free(Wd), free(ad), free(bd), free(lp), free(ent), free(lse), free(lsef), free(entf);
    free(lsed), free(entd), free(dh), free(dW), free(bdh), free(bdW), free(dh32), free(dW32);
    free(bdh32), free(bdW32), free(sq);
    for (int k = 0; k < 4; k++)
        free(b16[k]), free(b32[k]);
    bo_free(b, sc), bo_free(b, dH), bo_free(b, dlp), bo_free(b, den), bo_free(b, dls), bo_free(b, dsq);
    bo_free(b, dW16), bo_free(b, dt), bo_free(b, da), bo_free(b, db), bo_free(b, ddh);
    bo_free(b, ddW);
}

static void lmhead_w16_cases(const bo_backend *b)
{
    lmhead_w16_case(b, 7, 37, 16, 1.0, 0, 330);          /* a vocabulary inside one tile */
    lmhead_w16_case(b, 5, 8192 + 1031, 64, 0.7, 0, 340); /* past a column group, a partial tile */
    lmhead_w16_case(b, 70, 1500, 200, 1.3, 0, 350);      /* rows past a row tile (padded), odd H */
    /* rows past a work item of the CPU's backward (512 rows): a second, padded item; the
     * group's columns in chunks of 1024 and a partial one (df_lmhead_bwd16) */
    lmhead_w16_case(b, 600, 2100, 16, 1.0, 0, 360);
    if (!b->be.ops->attention_softcap) {
        print_message("%s: no attention_softcap capability: lmhead_*_w16 softcap not run\n",
                      b->name);
        return;
    }
    lmhead_w16_case(b, 70, 1500, 200, 1.3, 2.0, 365); /* Gemma 2's cap, most logits saturated */
    lmhead_w16_case(b, 7, 300, 48, 0.7, 30.0, 366);   /* C large against the logits */
}

/* Every backend with the bf16 head; the CPU's through df_backend_cpu_bf16. */
static void test_lmhead_w16(void **state)
{
    (void)state;
    for (int bi = 0; bi < bo_n; bi++) {
        const bo_backend *b = &bo_list[bi];
        if (!b->be.ops->lmhead_fwd_w16 || !b->be.ops->lmhead_bwd_w16) {
            print_message("SKIP: %s lmhead_*_w16: not provided (the head stays float32)\n",
                          b->name);
            continue;
        }
        if (!df_backend_is_cpu(&b->be)) {
            lmhead_w16_cases(b);
            continue;
        }
        df_mm_ctx *mm = NULL;
        int rc = df_mm_ctx_create(4096, &mm);
        if (rc == DF_EUNSUPPORTED) {
            print_message("SKIP: cpu lmhead_*_w16: %s\n", df_last_error());
            continue;
        }
        BO_OK(rc);
        const bo_backend bf = {b->name, df_backend_cpu_bf16(&mm)};
        lmhead_w16_cases(&bf);
        assert_true(df_mm_ctx_created(mm) > 0);
        df_mm_ctx_free(mm);
    }
}

static void test_lmhead(void **state)
{
    (void)state;
    lmhead_case(7, 37, 16, 1.0, 0, 300);        /* a vocabulary inside one tile */
    lmhead_case(5, 8192 + 1031, 64, 0.7, 0, 310); /* past a column group, a partial tile */
    lmhead_case(70, 1500, 200, 1.3, 0, 320);      /* rows past a row tile, odd H */
}

/* Gemma 2's final-logit soft-cap: C 1 and 2 against logits of a few units (most saturate),
 * C 30 (Gemma 2's own, the cap a small correction here). */
static void test_lmhead_softcap(void **state)
{
    (void)state;
    lmhead_case(7, 37, 16, 1.3, 2.0, 370);
    lmhead_case(5, 8192 + 1031, 64, 0.7, 1.0, 380);
    lmhead_case(70, 1500, 200, 1.3, 2.0, 390);
    lmhead_case(9, 300, 48, 0.7, 30.0, 395);
}

/* ---- main ---------------------------------------------------------------------------------------- */

int main(void)
{
    open_backends();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory),    cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_gemm_bf16), cmocka_unit_test(test_gemm_w16),
        cmocka_unit_test(test_gemm_bf16_entry), cmocka_unit_test(test_bf16_from_f32),
        cmocka_unit_test(test_rows),      cmocka_unit_test(test_embedding), cmocka_unit_test(test_embedding_w16),
        cmocka_unit_test(test_rmsnorm),   cmocka_unit_test(test_rope),
        cmocka_unit_test(test_swiglu),    cmocka_unit_test(test_geglu),
        cmocka_unit_test(test_attention), cmocka_unit_test(test_attention_softcap),
        cmocka_unit_test(test_kv),
        cmocka_unit_test(test_lmhead),   cmocka_unit_test(test_lmhead_softcap),
        cmocka_unit_test(test_lmhead_w16),
    };
    return cmocka_run_group_tests(tests, NULL, print_summary);
}
