/*
 * Op tests (src/model/ops.h): every forward against a naive double-precision
 * reference written here, every backward against central finite differences
 * of that double reference. Shapes are small and odd: packed sequences of
 * lengths 1, 5, 33 and 70 (crossing the 32-key and 64-query tiles), GQA with
 * nh / nkv = 2, vocabularies that are not a multiple of the LM-head tile,
 * temperature != 1 and entropy gradients.
 *
 * Tolerances: every comparison is elementwise, |got - ref| <= bound, with the
 * bound derived from the op's computation (tests/tolerance.h): gamma_n = n u /
 * (1 - n u) times the magnitudes of the n terms accumulated (Higham eq. 3.5,
 * any summation order), plus the errors the op's inputs already carry (a
 * score error moves a softmax weight, an lse error every probability of the
 * backward), plus the error of the reference itself: gamma_n of double for the
 * forward references, and for finite differences the Richardson estimate of
 * the truncation and the rounding of the double loss (fd_slope). The bounds
 * are computed in double from the same inputs, never from the op's outputs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "distflow/common.h"
#include "distflow/rng.h"
#include "model/ops.h"
#include "model/ops_attention_vec.h"
#include "testbounds.h"
#include "tolerance.h"
#include "geglu_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------ */

static float *fvec(int64_t n)
{
    float *p = aligned_alloc(64, ((size_t)n * sizeof(float) + 63) / 64 * 64);
    assert_non_null(p);
    return p;
}

static double *dvec(int64_t n)
{
    double *p = calloc((size_t)n, sizeof(double));
    assert_non_null(p);
    return p;
}

static void fill(float *x, int64_t n, uint64_t seed, double scale)
{
    df_rng r;
    df_rng_seed(&r, df_rng_key(seed, 7, 0, 0));
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(df_rng_normal(&r) * scale);
}

static double *to_d(const float *x, int64_t n)
{
    double *d = dvec(n);
    for (int64_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

static double dot_fd(const float *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* a . b in double, and in *mag the magnitude behind it, sum |a_i b_i|. */
static double dot_mag(const double *a, const double *b, int64_t n, double *mag)
{
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++)
        d += a[i] * b[i], m += fabs(a[i] * b[i]);
    *mag = m;
    return d;
}

static double g32(double n) { return df_tol_gamma(n, DF_U32); }
static double g64(double n) { return df_tol_gamma(n, DF_U64); }

/* libm's logf is within 1 ulp (2 u); sqrtf and 1 / x are correctly rounded (u). */
#define LOGF_ERR (2 * DF_U32)

/* |got[i] - ref[i]| <= bound[i] for every i; prints the worst error / bound. */
static void check_bound(const char *what, const float *got, const double *ref,
                        const double *bound, int64_t n)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= bound[i]))
            fail_msg("%s[%lld] = %.9g, reference %.9g: error %.3g above its bound %.3g", what,
                     (long long)i, (double)got[i], ref[i], e, bound[i]);
        if (bound[i] > 0)
            worst = fmax(worst, e / bound[i]);
    }
    print_message("%-24s worst error / bound %.3f\n", what, worst);
}

/* A scalar loss of the double reference, over inputs that the FD code perturbs. */
typedef double (*loss_fn)(void *ctx);

/* Step of the finite differences. Richardson extrapolation makes the truncation
 * O(h^4), so h can be large enough that the rounding of the double loss, eps / h,
 * stays far below the float32 bounds. */
#define FD_H 1e-3

/*
 * Slope at t = 0 of loss(x + t u) over k arrays xs[a] += t us[a] (n[a] entries):
 * D(h) = (f(h) - f(-h)) / 2h, R(h) = (4 D(h) - D(2h)) / 3 = f'(0) + O(h^4).
 * *err bounds |R(h) - f'(0)|: |R(h) - R(2h)| (15 times R(h)'s h^4 term) plus the
 * rounding, 1.5 eps / h for a loss computed to within eps (each loss is
 * within eps; the step x + t u rounds too, which eps must cover).
 */
static double fd_slope(loss_fn f, void *ctx, double **xs, double **us, const int64_t *ns, int k,
                       double eps, double *err)
{
    double D[3];
    for (int s = 0; s < 3; s++) {
        double t = FD_H * (double)(1 << s), l[2];
        for (int side = 0; side < 2; side++) {
            double sg = side ? -t : t;
            double **save = malloc(sizeof(double *) * (size_t)k);
            for (int a = 0; a < k; a++) {
                save[a] = malloc(sizeof(double) * (size_t)ns[a]);
                memcpy(save[a], xs[a], sizeof(double) * (size_t)ns[a]);
                for (int64_t i = 0; i < ns[a]; i++)
                    xs[a][i] += sg * us[a][i];
            }
            l[side] = f(ctx);
            for (int a = 0; a < k; a++) {
                memcpy(xs[a], save[a], sizeof(double) * (size_t)ns[a]);
                free(save[a]);
            }
            free(save);
        }
        D[s] = (l[0] - l[1]) / (2 * t);
    }
    double R1 = (4 * D[0] - D[1]) / 3, R2 = (4 * D[1] - D[2]) / 3;
    *err = fabs(R1 - R2) + 1.5 * eps / FD_H;
    return R1;
}

/* fd_slope along coordinate i of x. */
static double fd_at(loss_fn f, void *ctx, double *x, int64_t i, double eps, double *err)
{
    double keep = x[i], d[3], l[2];
    for (int s = 0; s < 3; s++) {
        double t = FD_H * (double)(1 << s);
        x[i] = keep + t;
        l[0] = f(ctx);
        x[i] = keep - t;
        l[1] = f(ctx);
        d[s] = (l[0] - l[1]) / (2 * t);
    }
    x[i] = keep;
    double R1 = (4 * d[0] - d[1]) / 3, R2 = (4 * d[1] - d[2]) / 3;
    /* the rounded steps x[i] +- t move the loss by up to u64 (|x[i]| + 4h) |f'| more */
    *err = fabs(R1 - R2) + 1.5 * (eps + DF_U64 * (fabs(keep) + 4 * FD_H) * fabs(R1)) / FD_H;
    return R1;
}

/* The finite-difference gradient of loss w.r.t. x[n] into g, its error bounds into e. */
static void fd_grad(loss_fn f, void *ctx, double *x, int64_t n, double eps, double *g, double *e)
{
    for (int64_t i = 0; i < n; i++)
        g[i] = fd_at(f, ctx, x, i, eps, &e[i]);
}

/* ---- gemm / linear --------------------------------------------------------------- */

/* m[i, j] = sum_k |A(i, k) B(j, k)| over [M, N], inner K, with A(i, k) = A[i ai + k ak] and
   B(j, k) = B[j bj + k bk]: the magnitude behind each entry of a product, in any layout. */
static double *abs_prod(const float *A, int64_t ai, int64_t ak, const float *B, int64_t bj, int64_t bk,
                        int64_t M, int64_t N, int64_t K)
{
    double *m = dvec(M * N);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            for (int64_t k = 0; k < K; k++)
                m[i * N + j] += fabs((double)A[i * ai + k * ak] * B[j * bj + k * bk]);
    return m;
}

/* m[i, j] = sum_k |A[i, k] B[j, k]| (A [M, K], B [N, K]): the magnitude behind a GEMM entry. */
static double *abs_gemm(const float *A, const float *B, int64_t M, int64_t N, int64_t K)
{
    return abs_prod(A, K, 1, B, K, 1, M, N, K);
}

static void test_gemm(void **state)
{
    (void)state;
    const int64_t M = 13, N = 7, K = 19;
    float *A = fvec(M * K), *At = fvec(K * M), *B = fvec(N * K), *Bn = fvec(K * N);
    float *C = fvec(M * N), *C0 = fvec(M * N);
    fill(A, M * K, 1, 1.0);
    fill(B, N * K, 2, 1.0);
    fill(C0, M * N, 3, 1.0);
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++)
            At[k * M + i] = A[i * K + k];
    for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++)
            Bn[k * N + j] = B[j * K + k];
    double *ref = dvec(M * N), *bound = abs_gemm(A, B, M, N, K);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)A[i * K + k] * B[j * K + k];
            ref[i * N + j] = 0.5 * s + 2.0 * C0[i * N + j];
        }
    /* K products and sums, the alpha and beta products and the final add, in any order
     * (the reference: the same count in double). */
    for (int64_t i = 0; i < M * N; i++)
        bound[i] = (g32(K + 3) + g64(K + 3)) * (0.5 * bound[i] + 2.0 * fabs(C0[i]));
    memcpy(C, C0, sizeof(float) * M * N);
    df_gemm_nt(M, N, K, 0.5f, A, B, 2.0f, C);
    check_bound("gemm_nt", C, ref, bound, M * N);
    memcpy(C, C0, sizeof(float) * M * N);
    df_gemm_nn(M, N, K, 0.5f, A, Bn, 2.0f, C);
    check_bound("gemm_nn", C, ref, bound, M * N);
    memcpy(C, C0, sizeof(float) * M * N);
    df_gemm_tn(M, N, K, 0.5f, At, Bn, 2.0f, C);
    check_bound("gemm_tn", C, ref, bound, M * N);
    /* K = 0: C = beta C. */
    memcpy(C, C0, sizeof(float) * M * N);
    df_gemm_nt(M, N, 0, 1.0f, A, B, 0.0f, C);
    for (int64_t i = 0; i < M * N; i++)
        assert_true(C[i] == 0.0f);
    free(A), free(At), free(B), free(Bn), free(C), free(C0), free(ref), free(bound);
}

typedef struct {
    int64_t M, N, K;
    double *x, *W, *b, *R;
} lin_ctx;

static void ref_linear(double *y, const lin_ctx *c)
{
    for (int64_t i = 0; i < c->M; i++)
        for (int64_t j = 0; j < c->N; j++) {
            double s = c->b[j];
            for (int64_t k = 0; k < c->K; k++)
                s += c->x[i * c->K + k] * c->W[j * c->K + k];
            y[i * c->N + j] = s;
        }
}

static double lin_loss(void *p)
{
    lin_ctx *c = p;
    double *y = dvec(c->M * c->N), l = 0;
    ref_linear(y, c);
    for (int64_t i = 0; i < c->M * c->N; i++)
        l += y[i] * c->R[i];
    free(y);
    return l;
}

static void test_linear(void **state)
{
    (void)state;
    const int64_t M = 9, N = 5, K = 11;
    float *x = fvec(M * K), *W = fvec(N * K), *b = fvec(N), *R = fvec(M * N), *y = fvec(M * N);
    float *dx = fvec(M * K), *dW = fvec(N * K), *db = fvec(N);
    fill(x, M * K, 10, 1.0);
    fill(W, N * K, 11, 0.5);
    fill(b, N, 12, 1.0);
    fill(R, M * N, 13, 1.0);
    lin_ctx c = {M, N, K, to_d(x, M * K), to_d(W, N * K), to_d(b, N), to_d(R, M * N)};
    double *yr = dvec(M * N), *ym = abs_gemm(x, W, M, N, K), *bd = dvec(M * N);
    ref_linear(yr, &c);
    /* y = x W^T + b: K products and sums plus the bias add, in float and in the reference. */
    double eps = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            ym[i * N + j] += fabs(b[j]);
            bd[i * N + j] = (g32(K + 1) + g64(K + 1)) * ym[i * N + j];
            eps += fabs(R[i * N + j]) * ym[i * N + j];
        }
    /* the double loss sum_ij R y: K + 1 terms per y, M N of them */
    eps *= g64(K + 2 + M * N);
    df_linear_fwd(y, x, W, b, M, N, K);
    check_bound("linear_fwd", y, yr, bd, M * N);
    /* Backward accumulates: start from 1.0 and subtract it again. */
    for (int64_t i = 0; i < M * K; i++)
        dx[i] = 1.0f;
    for (int64_t i = 0; i < N * K; i++)
        dW[i] = 1.0f;
    for (int64_t i = 0; i < N; i++)
        db[i] = 1.0f;
    df_linear_bwd(dx, dW, db, R, x, W, M, N, K);
    for (int64_t i = 0; i < M * K; i++)
        dx[i] -= 1.0f;
    for (int64_t i = 0; i < N * K; i++)
        dW[i] -= 1.0f;
    for (int64_t i = 0; i < N; i++)
        db[i] -= 1.0f;
    double *gx = dvec(M * K), *ex = dvec(M * K), *gW = dvec(N * K), *eW = dvec(N * K);
    double *gb = dvec(N), *eb = dvec(N);
    fd_grad(lin_loss, &c, c.x, M * K, eps, gx, ex);
    fd_grad(lin_loss, &c, c.W, N * K, eps, gW, eW);
    fd_grad(lin_loss, &c, c.b, N, eps, gb, eb);
    /* dx = R W (N terms), dW = R^T x (M terms), db = column sums of R (M terms), each
     * accumulated onto 1 and then 1 subtracted: two more roundings of at most 1 + |sum|. */
    double *mx = abs_prod(R, N, 1, W, 1, K, M, K, N), *mW = abs_prod(R, 1, N, x, 1, K, N, K, M);
    for (int64_t i = 0; i < M * K; i++)
        ex[i] += g32(N + 2) * (1 + mx[i]);
    for (int64_t i = 0; i < N * K; i++)
        eW[i] += g32(M + 2) * (1 + mW[i]);
    free(mx), free(mW);
    for (int64_t j = 0; j < N; j++) {
        double mb = 1;
        for (int64_t i = 0; i < M; i++)
            mb += fabs(R[i * N + j]);
        eb[j] += g32(M + 2) * mb;
    }
    check_bound("linear_bwd dx", dx, gx, ex, M * K);
    check_bound("linear_bwd dW", dW, gW, eW, N * K);
    check_bound("linear_bwd db", db, gb, eb, N);
    free(x), free(W), free(b), free(R), free(y), free(dx), free(dW), free(db);
    free(c.x), free(c.W), free(c.b), free(c.R), free(yr), free(ym), free(bd);
    free(gx), free(ex), free(gW), free(eW), free(gb), free(eb);
}

/* ---- bf16 matmuls ------------------------------------------------------------------ */

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_bf16_rounding(void **state)
{
    (void)state;
    const uint32_t in[] = {0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f808001u,
                           0xbf7fffffu, 0x7f7fffffu, 0x7f800000u, 0x00000001u};
    const uint16_t want[] = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xbf80, 0x7f80, 0x7f80, 0x0000};
    float f[9];
    uint16_t h[9];
    for (int i = 0; i < 8; i++)
        memcpy(&f[i], &in[i], sizeof f[i]);
    f[8] = NAN;
    df_bf16_from_f32(h, f, 9);
    for (int i = 0; i < 8; i++)
        assert_int_equal(h[i], want[i]); /* ties to even, overflow to inf */
    assert_true(isnan(bf16_to_f32(h[8])));
}

static void test_bf16_matmul(void **state)
{
    (void)state;
    df_mm_ctx *c = NULL;
    int rc = df_mm_ctx_create(4096, &c);
    if (rc == DF_EUNSUPPORTED) {
        print_message("bf16 matmul unsupported here: %s\n", df_last_error());
        skip();
    }
    assert_int_equal(rc, DF_OK);
    const int64_t M = 37, N = 29, K = 41;
    float *A = fvec(M * K), *B = fvec(N * K), *C = fvec(M * N), *C0 = fvec(M * N);
    float *At = fvec(K * M), *Bn = fvec(K * N), *A16 = fvec(M * K), *B16 = fvec(N * K);
    uint16_t *a16 = malloc(sizeof(uint16_t) * M * K), *b16 = malloc(sizeof(uint16_t) * N * K);
    fill(A, M * K, 150, 1.0);
    fill(B, N * K, 151, 1.0);
    fill(C0, M * N, 152, 1.0);
    df_bf16_from_f32(a16, A, M * K);
    df_bf16_from_f32(b16, B, N * K);
    for (int64_t i = 0; i < M * K; i++)
        A16[i] = bf16_to_f32(a16[i]);
    for (int64_t i = 0; i < N * K; i++)
        B16[i] = bf16_to_f32(b16[i]);
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++)
            At[k * M + i] = A[i * K + k];
    for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++)
            Bn[k * N + j] = B[j * K + k];
    /* Reference: products of the bf16-rounded operands, in double; and of the float32 ones. */
    double *ref = dvec(M * N), *ref32 = dvec(M * N);
    double *m16 = abs_gemm(A16, B16, M, N, K), *m32 = abs_gemm(A, B, M, N, K);
    double *b_bf = dvec(M * N), *b_f32 = dvec(M * N), *b_in = dvec(M * N);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, s32 = 0;
            for (int64_t k = 0; k < K; k++) {
                s += (double)A16[i * K + k] * B16[j * K + k];
                s32 += (double)A[i * K + k] * B[j * K + k];
            }
            ref[i * N + j] = s + C0[i * N + j];
            ref32[i * N + j] = s32 + C0[i * N + j];
        }
    for (int64_t i = 0; i < M * N; i++) {
        /* bf16 x bf16 products are exact in float32 (8 + 8 significant bits), so a bf16
         * GEMM from the rounded operands is a float32 sum: K terms and the beta add. */
        b_bf[i] = (g32(K + 2) + g64(K + 2)) * (m16[i] + fabs(C0[i]));
        /* the float32 GEMM of the unrounded operands */
        b_f32[i] = (g32(K + 2) + g64(K + 2)) * (m32[i] + fabs(C0[i]));
        /* rounding both operands to bf16 moves a product by (2 u16 + u16^2) |a b| */
        b_in[i] = b_bf[i] + (2 * DF_U_BF16 + DF_U_BF16 * DF_U_BF16) * m32[i];
    }
    /* "visibly not float32": the bf16 inputs move C by more than both GEMMs' rounding,
     * so a result within b_bf of ref cannot also be within b_f32 of ref32. */
    double sep = 0;
    for (int64_t i = 0; i < M * N; i++)
        sep = fmax(sep, fabs(ref[i] - ref32[i]) - b_bf[i] - b_f32[i]);
    assert_true(sep > 0);
    for (int variant = 0; variant < 3; variant++) {
        memcpy(C, C0, sizeof(float) * M * N);
        if (variant == 0)
            df_mm_nt(c, M, N, K, 1.0f, A, B, 1.0f, C);
        else if (variant == 1)
            df_mm_nn(c, M, N, K, 1.0f, A, Bn, 1.0f, C);
        else
            df_mm_tn(c, M, N, K, 1.0f, At, Bn, 1.0f, C);
        check_bound("bf16 mm vs bf16 inputs", C, ref, b_bf, M * N);
        check_bound("bf16 mm vs float32", C, ref32, b_in, M * N);
        int not_f32 = 0;
        for (int64_t i = 0; i < M * N; i++)
            not_f32 |= fabs(C[i] - ref32[i]) > b_f32[i];
        assert_true(not_f32);
    }
    /* beta = 0 and alpha != 1 get their own primitives (0.5 scales exactly). */
    df_mm_nt(c, M, N, K, 0.5f, A, B, 0.0f, C);
    for (int64_t i = 0; i < M * N; i++) {
        ref[i] = 0.5 * (ref[i] - C0[i]);
        b_bf[i] = (g32(K + 1) + g64(K + 1)) * 0.5 * m16[i];
    }
    check_bound("bf16 mm alpha 0.5", C, ref, b_bf, M * N);
    /* Operands larger than the context: the float32 fallback calls df_gemm_nt with the
       same arguments, so the bits are the same. */
    const int64_t M2 = 200;
    float *A2 = fvec(M2 * K), *C2 = fvec(M2 * N), *C3 = fvec(M2 * N);
    fill(A2, M2 * K, 153, 1.0);
    df_mm_nt(c, M2, N, K, 1.0f, A2, B, 0.0f, C2);
    df_gemm_nt(M2, N, K, 1.0f, A2, B, 0.0f, C3);
    assert_memory_equal(C2, C3, sizeof(float) * M2 * N);
    assert_int_equal(df_mm_ctx_fallbacks(c), 0);
    /* NULL context: float32. */
    df_mm_nt(NULL, M, N, K, 1.0f, A, B, 0.0f, C);
    for (int64_t i = 0; i < M * N; i++) {
        ref32[i] -= C0[i];
        b_f32[i] = (g32(K) + g64(K)) * m32[i];
    }
    check_bound("mm NULL ctx (float32)", C, ref32, b_f32, M * N);
    df_mm_ctx_free(c);
    free(A), free(B), free(C), free(C0), free(At), free(Bn), free(A16), free(B16), free(a16);
    free(b16), free(ref), free(ref32), free(m16), free(m32), free(b_bf), free(b_f32), free(b_in);
    free(A2), free(C2), free(C3);
}

/* ---- embedding ------------------------------------------------------------------ */

static void test_embedding(void **state)
{
    (void)state;
    const int64_t V = 6, H = 70, T = 5; /* H > 64 spans two column blocks */
    int32_t ids[5] = {3, 0, 3, 5, 3};
    float *tab = fvec(V * H), *out = fvec(T * H), *dout = fvec(T * H), *dtab = fvec(V * H);
    fill(tab, V * H, 20, 1.0);
    fill(dout, T * H, 21, 1.0);
    df_embedding_fwd(out, ids, tab, T, H);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < H; i++)
            assert_true(out[t * H + i] == tab[ids[t] * H + i]); /* a copy */
    for (int64_t i = 0; i < V * H; i++)
        dtab[i] = 0.5f;
    df_embedding_bwd(dtab, dout, ids, T, H);
    for (int64_t i = 0; i < H; i++) {
        /* row 3: 0.5 plus three float terms, any order (3 roundings); the double sum of
         * four floats is exact to well within g64(3) */
        double want3 = 0.5 + (double)dout[0 * H + i] + dout[2 * H + i] + dout[4 * H + i];
        double m3 = 0.5 + fabs(dout[0 * H + i]) + fabs(dout[2 * H + i]) + fabs(dout[4 * H + i]);
        assert_true(fabs(dtab[3 * H + i] - want3) <= (g32(3) + g64(3)) * m3);
        /* row 0: one rounded add */
        assert_true(fabs(dtab[0 * H + i] - (0.5 + dout[1 * H + i])) <=
                    (DF_U32 + DF_U64) * fabs(0.5 + dout[1 * H + i]));
        assert_true(dtab[1 * H + i] == 0.5f && dtab[2 * H + i] == 0.5f); /* untouched */
    }
    free(tab), free(out), free(dout), free(dtab);
}

/* ---- RMSNorm ---------------------------------------------------------------------- */

typedef struct {
    int64_t T, H;
    double eps;
    double *x, *w, *R;
} rms_ctx;

static void ref_rmsnorm(double *out, const rms_ctx *c)
{
    for (int64_t t = 0; t < c->T; t++) {
        double ss = 0;
        for (int64_t i = 0; i < c->H; i++)
            ss += c->x[t * c->H + i] * c->x[t * c->H + i];
        double r = 1.0 / sqrt(ss / c->H + c->eps);
        for (int64_t i = 0; i < c->H; i++)
            out[t * c->H + i] = c->w[i] * c->x[t * c->H + i] * r;
    }
}

static double rms_loss(void *p)
{
    rms_ctx *c = p;
    double *o = dvec(c->T * c->H), l = 0;
    ref_rmsnorm(o, c);
    for (int64_t i = 0; i < c->T * c->H; i++)
        l += o[i] * c->R[i];
    free(o);
    return l;
}

/* df_rmsnorm_fwd / _bwd on T rows of H against the float64 reference and finite differences. */
static void check_rmsnorm(int64_t T, int64_t H, uint64_t seed)
{
    const float eps = 1e-6f;
    float *x = fvec(T * H), *w = fvec(H), *R = fvec(T * H), *out = fvec(T * H), *rstd = fvec(T);
    float *dx = fvec(T * H), *dw = fvec(H);
    fill(x, T * H, seed, 1.5);
    fill(w, H, seed + 1, 1.0);
    fill(R, T * H, seed + 2, 1.0);
    rms_ctx c = {T, H, eps, to_d(x, T * H), to_d(w, H), to_d(R, T * H)};
    double *ref = dvec(T * H), *bd = dvec(T * H), *r = dvec(T);
    ref_rmsnorm(ref, &c);
    /* rstd: a sum of H positive squares (gamma_H), / H, + eps, sqrtf, 1 / x: its relative
     * error th_r is half the square's gamma_{H+2} plus two roundings. out = w (x r): two more. */
    const double th_r = 0.5 * g32(H + 2) + g32(2);
    double loss_mag = 0;
    for (int64_t t = 0; t < T; t++) {
        double ss = 0;
        for (int64_t i = 0; i < H; i++)
            ss += c.x[t * H + i] * c.x[t * H + i];
        r[t] = 1.0 / sqrt(ss / (double)H + c.eps);
    }
    for (int64_t i = 0; i < T * H; i++) {
        bd[i] = (th_r + g32(2) + g64(H + 6)) * fabs(ref[i]);
        loss_mag += fabs(R[i] * ref[i]);
    }
    df_rmsnorm_fwd(out, rstd, x, w, T, H, eps);
    check_bound("rmsnorm_fwd", out, ref, bd, T * H);
    for (int64_t i = 0; i < T * H; i++)
        dx[i] = 0.25f;
    for (int64_t i = 0; i < H; i++)
        dw[i] = -0.5f;
    df_rmsnorm_bwd(dx, dw, R, x, w, rstd, T, H);
    for (int64_t i = 0; i < T * H; i++)
        dx[i] -= 0.25f;
    for (int64_t i = 0; i < H; i++)
        dw[i] += 0.5f;
    /* the double loss: H + 6 operations per output, T H outputs summed */
    const double eps_l = g64(H + 7 + T * H) * loss_mag;
    double *gx = dvec(T * H), *ex = dvec(T * H), *gw = dvec(H), *ew = dvec(H);
    fd_grad(rms_loss, &c, c.x, T * H, eps_l, gx, ex);
    fd_grad(rms_loss, &c, c.w, H, eps_l, gw, ew);
    for (int64_t t = 0; t < T; t++) {
        /* dx_i = r (d_i w_i - x_i cc), cc = (sum_j d_j w_j x_j) r^2 / H: the dot is H
         * terms of two products (gamma_{H+2}), cc three more roundings and r^2; dx_i four
         * roundings, r's error, cc's error times r |x_i|; then the accumulation onto 0.25
         * and its removal, two roundings of at most 0.25 + |dx_i|. */
        const double rt = r[t];
        double dm = 0;
        for (int64_t j = 0; j < H; j++)
            dm += fabs(c.R[t * H + j] * c.w[j] * c.x[t * H + j]);
        double cm = dm * rt * rt / (double)H, dc = (g32(H + 5) + 2 * th_r) * cm, cc = 0;
        for (int64_t j = 0; j < H; j++)
            cc += c.R[t * H + j] * c.w[j] * c.x[t * H + j];
        cc *= rt * rt / (double)H;
        for (int64_t i = 0; i < H; i++) {
            double m = rt * (fabs(c.R[t * H + i] * c.w[i]) + fabs(c.x[t * H + i] * cc));
            ex[t * H + i] += (g32(4) + th_r) * m + rt * fabs(c.x[t * H + i]) * dc +
                             g32(2) * (0.25 + m);
        }
    }
    for (int64_t i = 0; i < H; i++) {
        /* dw_i = sum_t d_ti x_ti r_t: T terms of two products, each with r's error; onto
         * -0.5 and back */
        double m = 0;
        for (int64_t t = 0; t < T; t++)
            m += fabs(c.R[t * H + i] * c.x[t * H + i]) * r[t];
        ew[i] += (g32(T + 2) + th_r) * m + g32(2) * (0.5 + m);
    }
    check_bound("rmsnorm_bwd dx", dx, gx, ex, T * H);
    check_bound("rmsnorm_bwd dw", dw, gw, ew, H);
    free(x), free(w), free(R), free(out), free(rstd), free(dx), free(dw), free(r), free(bd);
    free(c.x), free(c.w), free(c.R), free(ref), free(gx), free(ex), free(gw), free(ew);
}

static void test_rmsnorm(void **state)
{
    (void)state;
    check_rmsnorm(7, 67, 30);
}

/*
 * Qwen3's q_norm / k_norm: an RMSNorm over head_dim of every head of every token, one weight
 * [hd] shared by the heads. On q [T, nh * hd] that is df_rmsnorm over T * nh rows of hd (the
 * model calls it so): per-head statistics, and a weight gradient summed over tokens AND heads.
 * 5 tokens x 4 heads of hd 16 (a real head size's multiple-of-16 rows) and of hd 6.
 */
static void test_qk_norm(void **state)
{
    (void)state;
    check_rmsnorm(5 * 4, 16, 33);
    check_rmsnorm(3 * 2, 6, 36);
}

/* ---- RoPE ------------------------------------------------------------------------------ */

typedef struct {
    int64_t T, nh, hd;
    const int32_t *pos;
    double theta;
    double *x, *R;
} rope_ctx;

static void ref_rope(double *out, const rope_ctx *c)
{
    int64_t half = c->hd / 2;
    for (int64_t t = 0; t < c->T; t++)
        for (int64_t h = 0; h < c->nh; h++)
            for (int64_t i = 0; i < half; i++) {
                /* HF: inv_freq and pos * inv_freq in float32. */
                float inv = 1.0f / powf((float)c->theta, (float)(2 * i) / (float)c->hd);
                double a = (double)((float)c->pos[t] * inv);
                const double *xr = c->x + (t * c->nh + h) * c->hd;
                double *o = out + (t * c->nh + h) * c->hd;
                o[i] = xr[i] * cos(a) - xr[i + half] * sin(a);
                o[i + half] = xr[i + half] * cos(a) + xr[i] * sin(a);
            }
}

static double rope_loss(void *p)
{
    rope_ctx *c = p;
    int64_t n = c->T * c->nh * c->hd;
    double *o = dvec(n), l = 0;
    ref_rope(o, c);
    for (int64_t i = 0; i < n; i++)
        l += o[i] * c->R[i];
    free(o);
    return l;
}

static void test_rope(void **state)
{
    (void)state;
    const int64_t T = 6, nh = 3, hd = 8, n = T * nh * hd, half = hd / 2;
    const int32_t pos[6] = {0, 1, 2, 0, 57, 1999};
    const double theta = 1e6;
    float *x = fvec(n), *y = fvec(n), *y2 = fvec(n), *R = fvec(n), *dx = fvec(n);
    float *ct = fvec(2000 * hd / 2), *st = fvec(2000 * hd / 2);
    fill(x, n, 40, 1.0);
    fill(R, n, 41, 1.0);
    rope_ctx c = {T, nh, hd, pos, theta, to_d(x, n), to_d(R, n)};
    double *ref = dvec(n), *bf = dvec(n), *g = dvec(n), *eg = dvec(n);
    ref_rope(ref, &c);
    /* The angle is the same float32 product in the op and the reference (HF's). Then
     * cos / sin rounded to float (u each), two products and a sum: gamma_3 of
     * |x0 cos| + |x1 sin|, for the input x (forward) or R (backward, the transpose). */
    double loss_mag = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = 0; i < half; i++) {
                float inv = 1.0f / powf((float)theta, (float)(2 * i) / (float)hd);
                double a = (double)((float)pos[t] * inv), ca = fabs(cos(a)), sa = fabs(sin(a));
                int64_t o = (t * nh + h) * hd + i;
                double mx0 = fabs(x[o]) * ca + fabs(x[o + half]) * sa;
                double mx1 = fabs(x[o + half]) * ca + fabs(x[o]) * sa;
                double mr0 = fabs(R[o]) * ca + fabs(R[o + half]) * sa;
                double mr1 = fabs(R[o + half]) * ca + fabs(R[o]) * sa;
                bf[o] = (g32(3) + g64(3)) * mx0;
                bf[o + half] = (g32(3) + g64(3)) * mx1;
                eg[o] = g32(3) * mr0;
                eg[o + half] = g32(3) * mr1;
                loss_mag += fabs(R[o]) * mx0 + fabs(R[o + half]) * mx1;
            }
    memcpy(y, x, sizeof(float) * n);
    df_rope_fwd(y, pos, T, nh, hd, theta);
    check_bound("rope_fwd", y, ref, bf, n);
    df_rope_table(ct, st, 2000, hd, theta);
    memcpy(y2, x, sizeof(float) * n);
    df_rope_apply(y2, pos, T, nh, hd, hd, ct, st, false);
    for (int64_t i = 0; i < n; i++)
        assert_true(y2[i] == y[i]); /* the same float cos / sin and the same rotation code */
    /* Position 0 is the identity: cos 0 = 1 and sin 0 = 0 exactly. */
    for (int64_t i = 0; i < nh * hd; i++)
        assert_true(y[i] == x[i]);
    memcpy(dx, R, sizeof(float) * n);
    df_rope_bwd(dx, pos, T, nh, hd, theta);
    /* the loss is linear in x, so the differences only carry rounding */
    const double eps_l = g64(4 + n) * loss_mag;
    for (int64_t i = 0; i < n; i++) {
        double e;
        g[i] = fd_at(rope_loss, &c, c.x, i, eps_l, &e);
        eg[i] += e;
    }
    check_bound("rope_bwd", dx, g, eg, n);
    memcpy(y2, R, sizeof(float) * n);
    df_rope_apply(y2, pos, T, nh, hd, hd, ct, st, true);
    check_bound("rope_apply inverse", y2, g, eg, n);
    free(x), free(y), free(y2), free(R), free(dx), free(ct), free(st), free(c.x), free(c.R);
    free(ref), free(g), free(bf), free(eg);
}

/*
 * Llama 3.1's RoPE frequencies (HF _compute_llama3_parameters) with Llama-3.1-8B's settings
 * (theta 5e5, head_dim 128, factor 8, low / high frequency factors 1 / 4, original context
 * 8192): against the formula in float64 from the same float32 default frequencies f. The
 * high band (wavelength 2 pi / f < 8192 / 4) keeps f bit for bit, the low band (> 8192) is
 * f / 8 exactly (a power of two); the medium band blends them: s = (8192 / wl - 1) / 3 off by
 * the reciprocal, product and subtraction (a few u of 8192 / wl, relative to hi - lo), then
 * (1 - s) f / 8 + s f: s's error times (1 + 1/8) f, and five roundings of f.
 */
static void test_rope_llama3(void **state)
{
    (void)state;
    df_model_config c;
    df_model_config_defaults(&c);
    snprintf(c.model_type, sizeof c.model_type, "llama");
    c.attention_bias = false, c.head_dim = 128, c.rope_theta = 500000.0;
    c.rope_type = DF_ROPE_LLAMA3, c.rope_factor = 8, c.rope_low_freq_factor = 1;
    c.rope_high_freq_factor = 4, c.rope_original_max_pos = 8192;
    float got[64], plain[64];
    df_rope_inv_freq(got, &c);
    c.rope_type = DF_ROPE_DEFAULT;
    df_rope_inv_freq(plain, &c);
    int bands[3] = {0};
    for (int64_t i = 0; i < 64; i++) {
        const double f = plain[i], wl = 2 * M_PI / f;
        assert_true(plain[i] == 1.0f / powf(500000.0f, (float)(2 * i) / 128.0f));
        if (wl < 2048.0 * (1 - 4 * DF_U32)) {
            assert_true(got[i] == plain[i]);
            bands[0]++;
        } else if (wl > 8192.0 * (1 + 4 * DF_U32)) {
            assert_true(got[i] == plain[i] / 8.0f);
            bands[2]++;
        } else if (wl > 2048.0 * (1 + 4 * DF_U32) && wl < 8192.0 * (1 - 4 * DF_U32)) {
            const double sm = (8192.0 / wl - 1) / 3, want = (1 - sm) * f / 8 + sm * f;
            const double es = 4 * DF_U32 * (8192.0 / wl + 1) / 3 + DF_U32 * fabs(sm);
            const double bound = (1 + 1.0 / 8) * f * es + g32(5) * f;
            if (!(fabs(got[i] - want) <= bound))
                fail_msg("llama3 inv_freq[%lld] = %.9g, want %.9g (bound %.3g)", (long long)i,
                         (double)got[i], want, bound);
            assert_true(got[i] < plain[i] && got[i] > plain[i] / 8.0f);
            bands[1]++;
        }
    }
    print_message("llama3 frequency bands: %d high, %d medium, %d low\n", bands[0], bands[1], bands[2]);
    assert_true(bands[0] > 0 && bands[1] > 0 && bands[2] > 0);
    /* A table from the default frequencies is df_rope_table's, bit for bit. */
    float *c1 = fvec(50 * 64), *s1 = fvec(50 * 64), *c2 = fvec(50 * 64), *s2 = fvec(50 * 64);
    df_rope_table(c1, s1, 50, 128, 500000.0);
    df_rope_table_freq(c2, s2, 50, 128, plain);
    assert_memory_equal(c1, c2, sizeof(float) * 50 * 64);
    assert_memory_equal(s1, s2, sizeof(float) * 50 * 64);
    free(c1), free(s1), free(c2), free(s2);
}

/* Linear scaling: each default frequency divided by the factor in float32 (HF's inv_freq /= factor),
 * bit for bit; factor 1 is the default RoPE's table. */
static void test_rope_linear(void **state)
{
    (void)state;
    df_model_config c;
    df_model_config_defaults(&c);
    c.head_dim = 64, c.rope_theta = 1e6;
    float plain[32], got[32];
    df_rope_inv_freq(plain, &c);
    c.rope_type = DF_ROPE_LINEAR;
    const double factors[] = {2.0, 3.7, 0.5};
    for (int k = 0; k < 3; k++) {
        c.rope_factor = factors[k];
        df_rope_inv_freq(got, &c);
        for (int i = 0; i < 32; i++)
            assert_true(got[i] == plain[i] / (float)factors[k]);
    }
    c.rope_factor = 1.0;
    float *c1 = fvec(20 * 32), *s1 = fvec(20 * 32), *c2 = fvec(20 * 32), *s2 = fvec(20 * 32);
    df_rope_model_table(c1, s1, 20, &c);
    df_rope_table(c2, s2, 20, 64, 1e6);
    assert_memory_equal(c1, c2, sizeof(float) * 20 * 32);
    assert_memory_equal(s1, s2, sizeof(float) * 20 * 32);
    df_model_config two = c;
    two.rope_factor = 2.0;
    assert_false(df_rope_same(&c, &two));
    free(c1), free(s1), free(c2), free(s2);
}

/*
 * Partial rotary (phi3 partial_rotary_factor, Phi-4-mini: 96 of 128): the first rd dims of each
 * head are rotated exactly as a whole head of rd dims is, by the same code and table, and the
 * other dims pass untouched, so both are compared bit for bit; the model's table and frequencies
 * are those of a head_dim-rd model (HF sizes them by the rotated dims).
 */
static void test_rope_partial(void **state)
{
    (void)state;
    const int64_t T = 7, nh = 3, hd = 16, rd = 12, P = 300;
    const int32_t pos[7] = {0, 1, 299, 5, 0, 64, 200};
    df_model_config c;
    df_model_config_defaults(&c);
    snprintf(c.model_type, sizeof c.model_type, "phi3");
    c.attention_bias = false, c.head_dim = hd, c.rope_dim = rd, c.rope_theta = 10000.0;
    float *ct = fvec(P * rd / 2), *st = fvec(P * rd / 2), *c2 = fvec(P * rd / 2), *s2 = fvec(P * rd / 2);
    df_rope_model_table(ct, st, P, &c);
    df_rope_table(c2, s2, P, rd, 10000.0);
    assert_memory_equal(ct, c2, sizeof(float) * (size_t)(P * rd / 2));
    assert_memory_equal(st, s2, sizeof(float) * (size_t)(P * rd / 2));
    float *x = fvec(T * nh * hd), *y = fvec(T * nh * hd), *xr = fvec(T * nh * rd);
    fill(x, T * nh * hd, 41, 1.0);
    for (int dir = 0; dir < 2; dir++) {
        memcpy(y, x, sizeof(float) * (size_t)(T * nh * hd));
        df_rope_apply(y, pos, T, nh, hd, rd, ct, st, dir == 1);
        for (int64_t r = 0; r < T * nh; r++) /* each head's rotated part, packed as heads of rd */
            memcpy(xr + r * rd, x + r * hd, sizeof(float) * (size_t)rd);
        df_rope_apply(xr, pos, T, nh, rd, rd, ct, st, dir == 1);
        for (int64_t r = 0; r < T * nh; r++) {
            assert_memory_equal(y + r * hd, xr + r * rd, sizeof(float) * (size_t)rd);
            assert_memory_equal(y + r * hd + rd, x + r * hd + rd, sizeof(float) * (size_t)(hd - rd));
        }
    }
    /* A changed pair of a non-zero position proves the part is rotated at all. */
    assert_true(y[5 * nh * hd] != x[5 * nh * hd]);
    /* df_rope_same tells the rotated dims apart even with equal frequencies. */
    df_model_config whole = c;
    whole.rope_dim = 0, whole.head_dim = 12;
    assert_false(df_rope_same(&c, &whole));
    whole.head_dim = hd;
    assert_false(df_rope_same(&c, &whole));
    assert_true(df_rope_same(&c, &c));
    df_model_config two = c, four = c; /* one frequency each, equal: only the width tells them apart */
    two.rope_dim = 2, four.rope_dim = 4;
    assert_false(df_rope_same(&two, &four));
    free(ct), free(st), free(c2), free(s2), free(x), free(y), free(xr);
}

/* ---- attention -------------------------------------------------------------------------- */

typedef struct {
    const int64_t *off;
    int64_t n_seqs, nh, nkv, hd, T;
    double *q, *k, *v, *R;
    double *out, *lse; /* filled by ref_attention */
    int64_t window;    /* 0: causal; W: keys i - W < j <= i (HF's sliding-window mask) */
    double softcap;    /* 0: none; C: scores C tanh(s / C) (Gemma 2's attn_logit_softcapping) */
} att_ctx;

/* The first key row i (of a sequence starting at row j0) attends to. */
static int64_t att_first_key(const att_ctx *c, int64_t j0, int64_t i)
{
    return c->window > 0 && i - c->window + 1 > j0 ? i - c->window + 1 : j0;
}

static void ref_attention(att_ctx *c)
{
    const int64_t nh = c->nh, nkv = c->nkv, hd = c->hd, grp = nh / nkv;
    double *s = dvec(c->T);
    for (int64_t sq = 0; sq < c->n_seqs; sq++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = c->off[sq]; i < c->off[sq + 1]; i++) {
                double m = -INFINITY, z = 0;
                const int64_t ja = att_first_key(c, c->off[sq], i);
                for (int64_t j = ja; j <= i; j++) {
                    double d = 0;
                    for (int64_t e = 0; e < hd; e++)
                        d += c->q[(i * nh + h) * hd + e] * c->k[(j * nkv + h / grp) * hd + e];
                    s[j] = d / sqrt((double)hd);
                    if (c->softcap > 0)
                        s[j] = c->softcap * tanh(s[j] / c->softcap);
                    m = s[j] > m ? s[j] : m;
                }
                for (int64_t j = ja; j <= i; j++)
                    z += exp(s[j] - m);
                double *o = c->out + (i * nh + h) * hd;
                for (int64_t e = 0; e < hd; e++)
                    o[e] = 0;
                for (int64_t j = ja; j <= i; j++) {
                    double p = exp(s[j] - m) / z;
                    for (int64_t e = 0; e < hd; e++)
                        o[e] += p * c->v[(j * nkv + h / grp) * hd + e];
                }
                c->lse[i * nh + h] = m + log(z);
            }
    free(s);
}

static double att_loss(void *p)
{
    att_ctx *c = p;
    ref_attention(c);
    double l = 0;
    for (int64_t i = 0; i < c->T * c->nh * c->hd; i++)
        l += c->out[i] * c->R[i];
    return l;
}

/*
 * Bounds of the flash-attention kernels (ops_attention.c: keys in tiles of
 * DF_ATTN_BK with an online softmax; the backward recomputes P = exp(S - lse)).
 * For query row i of head h with L keys (nt tiles):
 *   score s_j: hd products and sums, the scale 1 / sqrtf(hd) (two roundings) and its
 *     product: ds_j = gamma_{hd+3} sum_e |q_e k_je| / sqrt(hd);
 *   weight e^(s_j - m) relative to a common factor: the rounded argument
 *     (u |s_j - m| <= u span), the exp (DF_TOL_EXPF) and per tile the rescale
 *     factor (the same three plus its product): th = max ds + (nt + 1)(u span + e + u);
 *   out = sum_j w_j v_j / sum_j w_j: weights off by th move it by 2 th sum_j p_j |v_j|;
 *     the two sums (L terms, nt rescales), 1 / l and its product: gamma_{2L + 3nt + 3};
 *   lse = m + logf(l): max ds + th' (th without the score part) + gamma_{L + 2nt}
 *     + logf's error on |log l| + the final add.
 * Backward, with the forward's bounds dO on out and dlse on lse:
 *   p_j relative th_p = ds_j + dlse + u |s_j - lse| + e;
 *   D = dO . O over hd: gamma_hd sum |dO O| + sum |dO| dO_err; dp_j = dO . v_j: gamma_hd;
 *   dS_j = p_j (dp_j - D) scale: P_j / sqrt(hd) (th_p |dp_j - D| + d dp_j + dD
 *     + gamma_5 |dp_j - D|);
 *   dq = sum_j dS_j k_j (L terms), dk_j = sum over the group's rows (grp L terms),
 *   dv_j = sum p_ij dO_i (grp L terms): gamma of the count times the magnitude, plus
 *   the propagated dS / p errors times |k|, |q|, |dO|.
 * The reference's own error (double) is added as gamma_n of double on the same
 * magnitudes.
 * Soft-cap C (Gemma 2): the capped score C t, t = tanh(s / C), moves by at most the raw
 * score's error (|d/ds C tanh(s / C)| <= 1) plus C (tau + u): tau bounds the float tanh of the
 * rounded argument, tau = 2u |s| / C (the argument's two roundings; tanh' <= 1) + 2 e + 8u (the
 * kernels' 1 - 2 / (e^{2x} + 1): the exp, the add, the division and the subtraction, each on a
 * quantity <= 2; tanhf's 2 ulp is less), u the product with C. The backward's factor
 * g = 1 - t^2 is off by 2 tau + 2u (the square, the subtraction) plus the raw score's error
 * times max |g'| <= 1 / C, and its product adds gamma_2 to dS_raw = g dS_capped.
 */
typedef struct {
    double *out, *lse;    /* forward bounds [T nh hd], [T nh] */
    double *dq, *dk, *dv; /* backward bounds, like q, k, v */
    double loss_eps;      /* a bound on the double loss's rounding */
} att_bounds;

static att_bounds attention_bounds(const att_ctx *c)
{
    const int64_t nh = c->nh, nkv = c->nkv, hd = c->hd, grp = nh / nkv, T = c->T;
    const double isq = 1.0 / sqrt((double)hd), u = DF_U32, ex = DF_TOL_EXPF;
    att_bounds b = {dvec(T * nh * hd), dvec(T * nh), dvec(T * nh * hd), dvec(T * nkv * hd),
                    dvec(T * nkv * hd), 0};
    double *s = dvec(T), *ds = dvec(T), *P = dvec(T), *dp = dvec(T), *dS = dvec(T), *edS = dvec(T);
    double *thp = dvec(T), *A = dvec(hd), *G = dvec(T), *eG = dvec(T);
    const double C = c->softcap;
    for (int64_t sq = 0; sq < c->n_seqs; sq++) {
        const int64_t j0 = c->off[sq], L = c->off[sq + 1] - j0;
        for (int64_t h = 0; h < nh; h++) {
            const int64_t kh = h / grp;
            for (int64_t i = j0; i < j0 + L; i++) {
                /* a window's keys may straddle one more tile than their count fills */
                const int64_t ja = att_first_key(c, j0, i), Li = i - ja + 1;
                const int64_t nt = (Li - 1) / DF_ATTN_BK + 1 + (c->window > 0);
                const double *qi = c->q + (i * nh + h) * hd, *Ri = c->R + (i * nh + h) * hd;
                const double *oi = c->out + (i * nh + h) * hd, lse = c->lse[i * nh + h];
                double m = -INFINITY, mn = INFINITY, dsmax = 0, smmax = 0;
                for (int64_t j = ja; j <= i; j++) {
                    const double *kj = c->k + (j * nkv + kh) * hd;
                    double sm;
                    const double d = dot_mag(qi, kj, hd, &sm);
                    s[j] = d * isq;
                    ds[j] = g32(hd + 3) * sm * isq;
                    G[j] = 1, eG[j] = 0;
                    if (C > 0) { /* the cap (see above) */
                        const double t = tanh(s[j] / C);
                        const double tau = 2 * u * fabs(s[j]) / C + 2 * ex + 8 * u;
                        G[j] = 1 - t * t;
                        eG[j] = 2 * tau + 2 * u + ds[j] / C;
                        ds[j] += C * (tau + u);
                        s[j] = C * t;
                    }
                    m = fmax(m, s[j]), mn = fmin(mn, s[j]);
                    dsmax = fmax(dsmax, ds[j]), smmax = fmax(smmax, sm * isq);
                }
                const double span = m - mn, th1 = (double)(nt + 1) * (u * span + ex + u);
                const double th = dsmax + th1;
                for (int64_t e = 0; e < hd; e++)
                    A[e] = 0;
                for (int64_t j = ja; j <= i; j++) {
                    P[j] = exp(s[j] - lse);
                    const double *vj = c->v + (j * nkv + kh) * hd;
                    for (int64_t e = 0; e < hd; e++)
                        A[e] += P[j] * fabs(vj[e]);
                }
                /* the double reference: scores off by g64(hd + 4) |s|, the same sums */
                const double th64 = g64(hd + 4) * smmax + g64(4) * span + g64(4) * C;
                double *bo = b.out + (i * nh + h) * hd;
                for (int64_t e = 0; e < hd; e++) {
                    double e64 = (2 * th64 + g64(2 * Li + 4)) * A[e];
                    bo[e] = (2 * th + g32(2 * Li + 3 * nt + 3)) * A[e] + e64;
                    /* the double loss sum R out: out's error and the sum's */
                    b.loss_eps += fabs(Ri[e]) * (e64 + g64(T * nh * hd) * fabs(oi[e]));
                }
                double l = 0;
                for (int64_t j = ja; j <= i; j++)
                    l += exp(s[j] - m);
                const double dlse = dsmax + th1 + g32(Li + 2 * nt) + LOGF_ERR * fabs(log(l)) +
                                    u * fabs(lse) + th64 + g64(Li + 4) * (1 + fabs(lse));
                b.lse[i * nh + h] = dlse;
                /* backward */
                double D = 0, Dm = 0, dD = 0;
                for (int64_t e = 0; e < hd; e++) {
                    D += Ri[e] * oi[e];
                    Dm += fabs(Ri[e] * oi[e]);
                    dD += fabs(Ri[e]) * bo[e];
                }
                dD += g32(hd) * Dm;
                for (int64_t j = ja; j <= i; j++) {
                    const double *vj = c->v + (j * nkv + kh) * hd;
                    double dm;
                    const double d = dot_mag(Ri, vj, hd, &dm);
                    dp[j] = d;
                    thp[j] = ds[j] + dlse + u * fabs(s[j] - lse) + ex;
                    const double diff = fabs(dp[j] - D);
                    dS[j] = P[j] * (dp[j] - D) * isq;
                    edS[j] = P[j] * isq * (thp[j] * diff + g32(hd) * dm + dD + g32(5) * diff);
                    /* through the cap: dS_raw = g dS_capped */
                    edS[j] = G[j] * edS[j] + fabs(dS[j]) * (eG[j] + g32(2) * G[j]);
                    dS[j] *= G[j];
                }
                double *bq = b.dq + (i * nh + h) * hd;
                for (int64_t j = ja; j <= i; j++) {
                    const double *kj = c->k + (j * nkv + kh) * hd;
                    double *bk = b.dk + (j * nkv + kh) * hd, *bv = b.dv + (j * nkv + kh) * hd;
                    for (int64_t e = 0; e < hd; e++) {
                        bq[e] += g32(Li + 1) * fabs(dS[j] * kj[e]) + edS[j] * fabs(kj[e]);
                        bk[e] += g32(grp * L + 1) * fabs(dS[j] * qi[e]) + edS[j] * fabs(qi[e]);
                        bv[e] += (g32(grp * L + 1) + thp[j]) * P[j] * fabs(Ri[e]);
                    }
                }
            }
        }
    }
    free(s), free(ds), free(P), free(dp), free(dS), free(edS), free(thp), free(A), free(G), free(eG);
    return b;
}

static void check_attention_wc(const int64_t *off, int64_t n_seqs, int64_t nh, int64_t nkv,
                               int64_t hd, int64_t window, double softcap, int n_samples, uint64_t seed)
{
    const int64_t T = off[n_seqs], nq = T * nh * hd, nk = T * nkv * hd;
    float *q = fvec(nq), *k = fvec(nk), *v = fvec(nk), *R = fvec(nq), *out = fvec(nq);
    float *lse = fvec(T * nh), *dq = fvec(nq), *dk = fvec(nk), *dv = fvec(nk);
    fill(q, nq, seed, 1.0);
    fill(k, nk, seed + 1, 1.0);
    fill(v, nk, seed + 2, 1.0);
    fill(R, nq, seed + 3, 1.0);
    att_ctx c = {off, n_seqs, nh, nkv, hd, T, to_d(q, nq), to_d(k, nk), to_d(v, nk),
                 to_d(R, nq), dvec(nq), dvec(T * nh), window, softcap};
    ref_attention(&c);
    att_bounds bd = attention_bounds(&c);
    df_attention_fwd(out, lse, q, k, v, off, n_seqs, nh, nkv, hd, window, (float)softcap);
    check_bound("attention out", out, c.out, bd.out, nq);
    check_bound("attention lse", lse, c.lse, bd.lse, T * nh);
    /* A length-1 sequence attends only to itself: its one weight is e^0 = 1 exactly, so
       out is v of its kv head bit for bit. */
    for (int64_t s = 0; s < n_seqs; s++)
        if (off[s + 1] - off[s] == 1)
            for (int64_t h = 0; h < nh; h++)
                for (int64_t e = 0; e < hd; e++)
                    assert_true(out[(off[s] * nh + h) * hd + e] ==
                                v[(off[s] * nkv + h / (nh / nkv)) * hd + e]);
    /* Outputs are overwritten: poison them first. */
    for (int64_t i = 0; i < nq; i++)
        dq[i] = NAN;
    for (int64_t i = 0; i < nk; i++)
        dk[i] = dv[i] = NAN;
    df_attention_bwd(dq, dk, dv, R, out, lse, q, k, v, off, n_seqs, nh, nkv, hd, window, (float)softcap);
    /* the rounded steps move the loss by up to u64 sum |g| |x| */
    double step = 0;
    for (int64_t i = 0; i < nq; i++)
        step += fabs((double)dq[i] * q[i]);
    for (int64_t i = 0; i < nk; i++)
        step += fabs((double)dk[i] * k[i]) + fabs((double)dv[i] * v[i]);
    const double eps_l = bd.loss_eps + 2 * DF_U64 * step;
    /* Three random directions over (q, k, v) together: the float gradient's error along
     * them is at most sum |u| bound. */
    for (int d = 0; d < 3; d++) {
        float *uq = fvec(nq), *uk = fvec(nk), *uv = fvec(nk);
        fill(uq, nq, seed + 10 + d, 1.0);
        fill(uk, nk, seed + 20 + d, 1.0);
        fill(uv, nk, seed + 30 + d, 1.0);
        double *xs[3] = {c.q, c.k, c.v};
        double *us[3] = {to_d(uq, nq), to_d(uk, nk), to_d(uv, nk)};
        int64_t ns[3] = {nq, nk, nk};
        double fe, fd = fd_slope(att_loss, &c, xs, us, ns, 3, eps_l, &fe);
        double an = dot_fd(dq, us[0], nq) + dot_fd(dk, us[1], nk) + dot_fd(dv, us[2], nk);
        double bound = fe, mag = 0;
        for (int64_t i = 0; i < nq; i++)
            bound += fabs(us[0][i]) * bd.dq[i], mag += fabs(dq[i] * us[0][i]);
        for (int64_t i = 0; i < nk; i++) {
            bound += fabs(us[1][i]) * bd.dk[i] + fabs(us[2][i]) * bd.dv[i];
            mag += fabs(dk[i] * us[1][i]) + fabs(dv[i] * us[2][i]);
        }
        bound += g64(nq + 2 * nk) * mag; /* the double dot products */
        if (!(fabs(fd - an) <= bound))
            fail_msg("attention: directional derivative %.9g, finite difference %.9g: error "
                     "%.3g above its bound %.3g", an, fd, fabs(fd - an), bound);
        print_message("attention direction %d     error / bound %.3f\n", d, fabs(fd - an) / bound);
        free(uq), free(uk), free(uv), free(us[0]), free(us[1]), free(us[2]);
    }
    /* Sampled coordinates, always including the first and last rows. */
    df_rng r;
    df_rng_seed(&r, seed);
    double worst = 0;
    for (int i = 0; i < n_samples; i++) {
        int which = i % 3;
        int64_t n = which == 0 ? nq : nk;
        int64_t idx = i < 6 ? (i < 3 ? 0 : n - 1) : (int64_t)df_rng_below(&r, (uint64_t)n);
        double *x = which == 0 ? c.q : which == 1 ? c.k : c.v;
        float an = (which == 0 ? dq : which == 1 ? dk : dv)[idx];
        double fe, fd = fd_at(att_loss, &c, x, idx, eps_l, &fe);
        double bound = fe + (which == 0 ? bd.dq : which == 1 ? bd.dk : bd.dv)[idx];
        if (!(fabs(an - fd) <= bound))
            fail_msg("attention d%c[%lld] = %.9g, finite difference %.9g: error %.3g above its "
                     "bound %.3g", "qkv"[which], (long long)idx, (double)an, fd, fabs(an - fd), bound);
        worst = fmax(worst, fabs(an - fd) / bound);
    }
    print_message("attention sampled grads   worst error / bound %.3f\n", worst);
    free(q), free(k), free(v), free(R), free(out), free(lse), free(dq), free(dk), free(dv);
    free(c.q), free(c.k), free(c.v), free(c.R), free(c.out), free(c.lse);
    free(bd.out), free(bd.lse), free(bd.dq), free(bd.dk), free(bd.dv);
}

static void check_attention_w(const int64_t *off, int64_t n_seqs, int64_t nh, int64_t nkv,
                              int64_t hd, int64_t window, int n_samples, uint64_t seed)
{
    check_attention_wc(off, n_seqs, nh, nkv, hd, window, 0.0, n_samples, seed);
}

static void check_attention(const int64_t *off, int64_t n_seqs, int64_t nh, int64_t nkv,
                            int64_t hd, int n_samples, uint64_t seed)
{
    check_attention_w(off, n_seqs, nh, nkv, hd, 0, n_samples, seed);
}

static void test_attention_small_heads(void **state)
{
    (void)state;
    const int64_t off[5] = {0, 1, 6, 39, 109}; /* lengths 1, 5, 33, 70 */
    check_attention(off, 4, 4, 2, 8, 150, 50); /* generic head-dim path */
}

static void test_attention_specialised(void **state)
{
    (void)state;
    const int64_t off[4] = {0, 40, 41, 75};
    check_attention(off, 3, 2, 1, 32, 60, 60);
    check_attention(off, 3, 2, 2, 64, 30, 70);
    const int64_t off1[3] = {0, 1, 20};
    check_attention(off1, 2, 4, 2, 128, 30, 80);
    const int64_t off2[4] = {0, 70, 71, 100}; /* hd 48: vector kernel, runtime head dim */
    check_attention(off2, 3, 2, 1, 48, 30, 90);
    const int64_t off3[3] = {0, 150, 151}; /* longer than one 128-row query block */
    check_attention(off3, 2, 2, 1, 32, 30, 95);
}

/*
 * Gemma 2's soft-capped attention scores (C tanh(s / C) before the mask and softmax), forward
 * and backward against the float64 reference and finite differences, on the generic (hd 8)
 * and vector (hd 32, 64) kernels, causal and windowed. Caps of 0.5 and 2 bite: the scores of
 * these inputs reach several units (q, k in [-1, 1], |s| up to sqrt(hd)); a cap the scores
 * never approach (1e4) is the plain kernel within its bound, and a cap of 0.5 must change
 * the output.
 */
static void test_attention_softcap(void **state)
{
    (void)state;
    const int64_t off[5] = {0, 1, 6, 39, 109}; /* lengths 1, 5, 33, 70 */
    check_attention_wc(off, 4, 4, 2, 8, 0, 0.5, 90, 210);
    check_attention_wc(off, 4, 4, 2, 8, 5, 2.0, 90, 220);
    const int64_t off2[4] = {0, 40, 41, 191}; /* lengths 40, 1, 150 */
    check_attention_wc(off2, 3, 2, 1, 32, 0, 0.5, 40, 230);
    check_attention_wc(off2, 3, 2, 2, 64, 33, 2.0, 40, 240);
    check_attention_wc(off2, 3, 2, 1, 32, 7, 1e4, 40, 250);
    const int64_t T = off2[3], nh = 2, nkv = 1;
    for (int64_t hd = 8; hd <= 32; hd += 24) {
        const int64_t nq = T * nh * hd, nk = T * nkv * hd;
        float *q = fvec(nq), *k = fvec(nk), *v = fvec(nk), *o1 = fvec(nq), *o2 = fvec(nq);
        float *l1 = fvec(T * nh), *l2 = fvec(T * nh);
        fill(q, nq, 260, 1.0), fill(k, nk, 261, 1.0), fill(v, nk, 262, 1.0);
        df_attention_fwd(o1, l1, q, k, v, off2, 3, nh, nkv, hd, 0, 0.5f);
        df_attention_fwd(o2, l2, q, k, v, off2, 3, nh, nkv, hd, 0, 0.0f);
        double diff = 0;
        for (int64_t i = 0; i < nq; i++)
            diff = fmax(diff, fabs((double)o1[i] - o2[i]));
        assert_true(diff > 1e-3);
        free(q), free(k), free(v), free(o1), free(o2), free(l1), free(l2);
    }
}

/*
 * Sliding-window attention (Qwen2 / Qwen3 use_sliding_window): the query at position i sees
 * keys i - W < j <= i. Windows inside one key tile, exactly one (32), across tiles and across
 * the vector kernel's 128-row query blocks, on the generic (hd 8) and vector (hd 32, 64)
 * kernels, against the float64 reference and finite differences. Exact cases: W = 1 leaves
 * each row its own value; a window as long as the longest sequence is the causal kernel,
 * bit for bit.
 */
static void test_attention_window(void **state)
{
    (void)state;
    const int64_t off[5] = {0, 1, 6, 39, 109}; /* lengths 1, 5, 33, 70 */
    check_attention_w(off, 4, 4, 2, 8, 5, 90, 110);
    check_attention_w(off, 4, 4, 2, 8, 33, 90, 120);
    const int64_t off2[4] = {0, 40, 41, 191}; /* lengths 40, 1, 150 */
    check_attention_w(off2, 3, 2, 1, 32, 7, 40, 130);
    check_attention_w(off2, 3, 2, 2, 64, 32, 40, 140);
    check_attention_w(off2, 3, 2, 1, 32, 129, 40, 150);
    const int64_t T = off2[3], nh = 2, nkv = 1;
    for (int64_t hd = 8; hd <= 32; hd += 24) {
        const int64_t nq = T * nh * hd, nk = T * nkv * hd;
        float *q = fvec(nq), *k = fvec(nk), *v = fvec(nk), *o1 = fvec(nq), *o2 = fvec(nq);
        float *l1 = fvec(T * nh), *l2 = fvec(T * nh);
        fill(q, nq, 160, 1.0), fill(k, nk, 161, 1.0), fill(v, nk, 162, 1.0);
        df_attention_fwd(o1, l1, q, k, v, off2, 3, nh, nkv, hd, 1, 0.0f);
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < nh; h++)
                for (int64_t e = 0; e < hd; e++)
                    assert_true(o1[(t * nh + h) * hd + e] == v[t * nkv * hd + e]);
        df_attention_fwd(o1, l1, q, k, v, off2, 3, nh, nkv, hd, 150, 0.0f);
        df_attention_fwd(o2, l2, q, k, v, off2, 3, nh, nkv, hd, 0, 0.0f);
        assert_memory_equal(o1, o2, sizeof(float) * (size_t)nq);
        assert_memory_equal(l1, l2, sizeof(float) * (size_t)(T * nh));
        /* and a shorter window does change the long sequences */
        df_attention_fwd(o1, l1, q, k, v, off2, 3, nh, nkv, hd, 149, 0.0f);
        assert_true(memcmp(o1, o2, sizeof(float) * (size_t)nq) != 0);
        free(q), free(k), free(v), free(o1), free(o2), free(l1), free(l2);
    }
}

/* ---- SwiGLU ---------------------------------------------------------------------------- */

typedef struct {
    int64_t n;
    double *g, *u, *R;
} swi_ctx;

static double swi_loss(void *p)
{
    swi_ctx *c = p;
    double l = 0;
    for (int64_t i = 0; i < c->n; i++)
        l += c->g[i] / (1 + exp(-c->g[i])) * c->u[i] * c->R[i];
    return l;
}

static void test_swiglu(void **state)
{
    (void)state;
    const int64_t n = 203;
    float *g = fvec(n), *u = fvec(n), *R = fvec(n), *o = fvec(n), *dg = fvec(n), *du = fvec(n);
    fill(g, n, 90, 3.0);
    fill(u, n, 91, 1.0);
    fill(R, n, 92, 1.0);
    g[0] = -100.0f; /* exp overflow side: silu -> -0 */
    g[1] = 100.0f;  /* exp underflow side: e^-100 flushed to 0, silu = g */
    swi_ctx c = {n, to_d(g, n), to_d(u, n), to_d(R, n)};
    double *ref = dvec(n), *bf = dvec(n), *gg = dvec(n), *eg = dvec(n), *gu = dvec(n);
    double *eu = dvec(n);
    /*
     * s = 1 / (1 + df_expf(-g)): the exp's error moves s by at most DF_TOL_EXPF relative
     * (e / (1 + e) <= 1), plus the add and the division: ds = DF_TOL_EXPF + gamma_2 (an exp
     * flushed to 0 below -87.3 moves s by e^-87 relative). silu = g s and out = silu u: two
     * more products. Backward: dup = dout g s (two products); dgate = dout up s F with
     * F = 1 + g (1 - s): 1 - s is off by ds s + u |1 - s| (absolute: F changes sign near
     * g = -1.28, so no relative bound), g (1 - s) and F add a rounding each. Where e^-g
     * overflows (g[0]) s is 0: ds = 1.
     */
    double loss_mag = 0;
    for (int64_t i = 0; i < n; i++) {
        double gi = c.g[i], si = 1 / (1 + exp(-gi)), ui = c.u[i], Ri = c.R[i];
        /* e^-g overflows to inf above 88.72: s = 0, all of s is the error */
        const double dsr = -gi > 88.72 ? 1.0 : DF_TOL_EXPF + g32(2);
        ref[i] = gi * si * ui;
        bf[i] = (dsr + g32(2) + g64(6)) * fabs(ref[i]);
        loss_mag += fabs(ref[i] * Ri);
        double oms = 1 - si, F = 1 + gi * oms;
        double dF = fabs(gi) * (dsr * si + DF_U32 * oms) + g32(2) * (fabs(gi * oms) + fabs(F));
        eg[i] = fabs(Ri * ui * si) * (dF + (g32(3) + dsr) * fabs(F));
        eu[i] = (g32(2) + dsr) * fabs(Ri * gi * si);
    }
    df_swiglu_fwd(o, g, u, n);
    assert_true(o[0] == 0.0f); /* e^100 overflows to inf, and g / inf = -0 */
    check_bound("swiglu_fwd", o + 1, ref + 1, bf + 1, n - 1);
    df_swiglu_bwd(dg, du, R, g, u, n);
    /* the double loss: about six operations per term, n terms */
    const double eps_l = g64(8 + n) * loss_mag;
    double e;
    for (int64_t i = 0; i < n; i++) {
        gg[i] = fd_at(swi_loss, &c, c.g, i, eps_l, &e);
        eg[i] += e;
        gu[i] = fd_at(swi_loss, &c, c.u, i, eps_l, &e);
        eu[i] += e;
    }
    check_bound("swiglu_bwd dgate", dg, gg, eg, n);
    check_bound("swiglu_bwd dup", du, gu, eu, n);
    free(g), free(u), free(R), free(o), free(dg), free(du), free(c.g), free(c.u), free(c.R);
    free(ref), free(bf), free(gg), free(eg), free(gu), free(eu);
}

/* ---- GeGLU ----------------------------------------------------------------------------- */

static double geg_loss(void *p)
{
    swi_ctx *c = p;
    const double k0 = sqrt(2.0 / 3.14159265358979323846);
    double l = 0;
    for (int64_t i = 0; i < c->n; i++) {
        const double g = c->g[i];
        l += 0.5 * g * (1 + tanh(k0 * (g + 0.044715 * g * g * g))) * c->u[i] * c->R[i];
    }
    return l;
}

/* df_geglu_fwd / _bwd against float64 (the bounds: tests/geglu_ref.h) and the backward
 * against finite differences of the tanh form (PyTorch's gelu(approximate="tanh")). */
static void test_geglu(void **state)
{
    (void)state;
    const int64_t n = 211;
    float *g = fvec(n), *u = fvec(n), *R = fvec(n), *o = fvec(n), *dg = fvec(n), *du = fvec(n);
    fill(g, n, 93, 4.0);
    fill(u, n, 94, 1.0);
    fill(R, n, 95, 1.0);
    const float special[] = {-100.0f, 100.0f, 0.0f, -0.7518f, -9.7f, -10.2f, 1e-4f, -1e-4f, 6.0f};
    memcpy(g, special, sizeof special); /* exp overflow, saturation, gelu' = 0, the edge of exp */
    swi_ctx c = {n, to_d(g, n), to_d(u, n), to_d(R, n)};
    double *ref = dvec(n), *bf = dvec(n), *gg = dvec(n), *eg = dvec(n), *gu = dvec(n);
    double *eu = dvec(n), loss_mag = 0;
    for (int64_t i = 0; i < n; i++) {
        const geglu_ref r = geglu_ref_at(g[i], u[i], R[i], DF_TOL_EXPF, DF_U32);
        ref[i] = r.out, bf[i] = r.bout, eg[i] = r.bdgate, eu[i] = r.bdup;
        loss_mag += fabs(r.out * R[i]);
    }
    df_geglu_fwd(o, g, u, n);
    assert_true(o[0] == 0.0f && o[1] == 100.0f * u[1]); /* -100 / inf: -0 */
    check_bound("geglu_fwd", o, ref, bf, n);
    df_geglu_bwd(dg, du, R, g, u, n);
    /* the double loss: about twelve operations per term, n terms */
    const double eps_l = g64(14 + n) * loss_mag;
    double e;
    for (int64_t i = 0; i < n; i++) {
        gg[i] = fd_at(geg_loss, &c, c.g, i, eps_l, &e);
        eg[i] += e;
        gu[i] = fd_at(geg_loss, &c, c.u, i, eps_l, &e);
        eu[i] += e;
    }
    check_bound("geglu_bwd dgate", dg, gg, eg, n);
    check_bound("geglu_bwd dup", du, gu, eu, n);
    /* in place, as the backward runs it: the same bits */
    float *g2 = fvec(n), *u2 = fvec(n);
    memcpy(g2, g, sizeof(float) * (size_t)n), memcpy(u2, u, sizeof(float) * (size_t)n);
    df_geglu_bwd(g2, u2, R, g2, u2, n);
    assert_memory_equal(g2, dg, sizeof(float) * (size_t)n);
    assert_memory_equal(u2, du, sizeof(float) * (size_t)n);
    free(g), free(u), free(R), free(o), free(dg), free(du), free(c.g), free(c.u), free(c.R);
    free(ref), free(bf), free(gg), free(eg), free(gu), free(eu), free(g2), free(u2);
}

/* ---- LM head ---------------------------------------------------------------------------- */

typedef struct {
    int64_t n, V, H;
    double temp;
    const int32_t *tgt;
    double *h, *W, *cl, *ce;
    double *logp, *ent; /* filled by ref_lmhead */
    double *sq;         /* NULL, or filled by ref_lmhead: sum_v p_v^2 */
    double cap;         /* 0, or Gemma 2's final-logit soft-cap C: z = C tanh(y / C) / t */
} lm_ctx;

static void ref_lmhead(lm_ctx *c)
{
    double *z = dvec(c->V);
    for (int64_t i = 0; i < c->n; i++) {
        double m = -INFINITY, s = 0, pz = 0;
        for (int64_t v = 0; v < c->V; v++) {
            double d = 0;
            for (int64_t e = 0; e < c->H; e++)
                d += c->h[i * c->H + e] * c->W[v * c->H + e];
            if (c->cap > 0)
                d = c->cap * tanh(d / c->cap);
            z[v] = d / c->temp;
            m = z[v] > m ? z[v] : m;
        }
        for (int64_t v = 0; v < c->V; v++)
            s += exp(z[v] - m);
        double lse = m + log(s), sq = 0;
        for (int64_t v = 0; v < c->V; v++) {
            double p = exp(z[v] - lse);
            pz += p * z[v];
            sq += p * p;
        }
        c->logp[i] = z[c->tgt[i]] - lse;
        c->ent[i] = lse - pz;
        if (c->sq)
            c->sq[i] = sq;
    }
    free(z);
}

static double lm_loss(void *p)
{
    lm_ctx *c = p;
    ref_lmhead(c);
    double l = 0;
    for (int64_t i = 0; i < c->n; i++)
        l += c->cl[i] * c->logp[i] + c->ce[i] * c->ent[i];
    return l;
}

/*
 * Bounds of the LM head (ops_lmhead.c, ops_vocab.c; sums are float within a tile of
 * `cols` columns and double across tiles and groups). For row i, with zm_v =
 * sum_e |h_e W_ve| / t:
 *   logit z_v: a GEMM of H terms with alpha = 1/t rounded: dz_v = gamma_{H+2} zm_v;
 *   lse = m + log(s0) and entropy = log(s0) - s1 / s0 from these logits: dlse, dent of
 *     tb_row_lse_bound (tests/testbounds.h); logp = z_t - lse rounded to float, the lse
 *     kept for the backward rounded too, the entropy's float store; sum of p^2: its dsq and
 *     float store;
 * Backward (dlogits_row): p_v = exp(z_v - lse) from the stored lse:
 *   th_p = dz_v + dlse + u |z_v - lse| + DF_TOL_EXPF; the entropy term's lp + ent
 *   carries dz_v + dlse + dent plus two roundings; g = -gl p - ge p (lp + ent) (+ gl
 *   at the target) with gl = c / t, ge = d / t: six roundings of its magnitude;
 *   dh = sum_v g_v W_v (V terms, G group partials), dW_v = 2 + sum_i g_iv h_i and
 *   the 2 removed (n + 2 terms): gamma of the count times the magnitude plus the
 *   propagated g errors.
 * The double reference adds gamma_n of double on its logits, sums and logs.
 * Soft-cap C (Gemma 2): the tile holds x = y / C (alpha 1 / C: dx = gamma_{H+2} zm t / C), then
 * z = (C / t) tanh(x): tanh' <= 1 passes dx, the kernels' 1 - 2 / (e^{2x} + 1) adds 2 e + 8u (the
 * exp, the add, the division and the subtraction, each on a quantity <= 2), and C / t (two
 * roundings) and the product 3u |z|. The backward's factor 1 - t^2 from that float t: twice its
 * function error, the square and the subtraction (3u), and dx through |d(1 - t^2)/dx| <= 1; the
 * factor's product one more rounding of g.
 */
typedef struct {
    double *logp, *ent, *sq, *dh, *dW, loss_eps;
} lm_bounds;

static lm_bounds lmhead_bounds(const lm_ctx *c, const df_vocab_tiling *tl)
{
    const int64_t n = c->n, V = c->V, H = c->H, G = df_vocab_groups(V, tl);
    const int64_t ct = df_vocab_tiling_clamp(tl).cols, cols = ct < V ? ct : V;
    const double u = DF_U32, ex = DF_TOL_EXPF;
    lm_bounds b = {dvec(n), dvec(n), dvec(n), dvec(n * H), dvec(V * H), 0};
    double *z = dvec(V), *zm = dvec(V), *dz = dvec(V), *gm = dvec(V);
    double *ge_ = dvec(V), *dWm = dvec(V * H), *dWe = dvec(V * H), *Gc = dvec(V), *eG = dvec(V);
    const double C = c->cap, capT = C > 0 ? C / c->temp : 0;
    for (int64_t i = 0; i < n; i++) {
        const double *hi = c->h + i * H;
        double zmax = 0;
        for (int64_t v = 0; v < V; v++) {
            double a;
            const double d = dot_mag(hi, c->W + v * H, H, &a);
            z[v] = d / c->temp;
            zm[v] = a / c->temp;
            dz[v] = g32(H + 2) * zm[v];
            Gc[v] = 1;
            eG[v] = 0;
            if (C > 0) { /* the cap (see above) */
                const double t = tanh(d / C), dx = g32(H + 2) * a / C;
                z[v] = capT * t;
                dz[v] = capT * (dx + 2 * ex + 8 * u) + 3 * u * fabs(z[v]);
                Gc[v] = 1 - t * t;
                eG[v] = 2 * (2 * ex + 8 * u) + 3 * u + dx;
            }
            zmax = fmax(zmax, zm[v]);
        }
        /* lse and entropy (tb_row_lse_bound; its dz_v = 1 * dz[v]) */
        const tb_lse_bound r = tb_row_lse_bound(z, dz, 1.0, V, cols);
        const double lse = r.lse, ent = lse - r.Ez;
        /* the double reference: its logits off by g64(H + 2) zm, its sums and logs */
        const double e64 = g64(H + 2) * zmax * 3 + g64(V + 4) * (1 + fabs(lse) + fabs(r.Ez)) + g64(8) * capT * 3;
        const double dlse_d = r.dlse + e64;
        const double logp = z[c->tgt[i]] - lse;
        b.logp[i] = dz[c->tgt[i]] + dlse_d + u * fabs(logp) + e64;
        const double de = r.dent + u * ent + e64;
        b.ent[i] = de;
        b.sq[i] = r.dsq + u * r.sq + r.sq * (4 * g64(H + 2) * zmax + 3 * g64(V + 4));
        b.loss_eps += fabs(c->cl[i]) * e64 + fabs(c->ce[i]) * 2 * e64;
        /* backward */
        const double dlse = dlse_d + u * fabs(lse), gl = c->cl[i] / c->temp;
        const double gE = c->ce[i] / c->temp, dent = de;
        for (int64_t v = 0; v < V; v++) {
            double p = exp(z[v] - lse), lp = z[v] - lse, lpe = lp + ent;
            double thp = dz[v] + dlse + u * fabs(lp) + ex;
            double dlpe = dz[v] + dlse + dent + u * fabs(lp) + u * fabs(lpe);
            double mag = fabs(gl) * p + fabs(gE) * p * fabs(lpe);
            double err = fabs(gl) * p * thp + fabs(gE) * p * (thp * fabs(lpe) + dlpe) + g32(6) * mag;
            double g = -gl * p - gE * p * lpe;
            if (v == c->tgt[i]) {
                g += gl;
                err += g32(3) * (fabs(gl) + fabs(g));
            }
            if (C > 0) { /* dL/dy = dL/dz (1 - t^2) */
                err = Gc[v] * err + fabs(g) * (eG[v] + g32(1) * Gc[v]);
                g *= Gc[v];
            }
            gm[v] = fabs(g);
            ge_[v] = err;
        }
        for (int64_t e = 0; e < H; e++) {
            double a = 0, p = 0;
            for (int64_t v = 0; v < V; v++) {
                a += gm[v] * fabs(c->W[v * H + e]);
                p += ge_[v] * fabs(c->W[v * H + e]);
            }
            b.dh[i * H + e] = g32(V + G + 1) * a + p;
        }
        for (int64_t v = 0; v < V; v++)
            for (int64_t e = 0; e < H; e++) {
                dWm[v * H + e] += gm[v] * fabs(hi[e]);
                dWe[v * H + e] += ge_[v] * fabs(hi[e]);
            }
    }
    for (int64_t k = 0; k < V * H; k++)
        b.dW[k] = g32(n + 3) * (2 + dWm[k]) + dWe[k];
    free(z), free(zm), free(dz), free(gm), free(ge_), free(dWm), free(dWe), free(Gc), free(eG);
    return b;
}

static void check_lmhead_c(int64_t n, int64_t V, int64_t H, float temp, float cap, int64_t rt,
                           int64_t ctile, int64_t group, int with_entropy, uint64_t seed)
{
    float *h = fvec(n * H), *W = fvec(V * H), *cl = fvec(n), *ce = fvec(n);
    float *logp = fvec(n), *ent = fvec(n), *lse = fvec(n), *dh = fvec(n * H), *dW = fvec(V * H);
    float *sq = fvec(n), *lp2 = fvec(n), *lse2 = fvec(n);
    int32_t *tgt = malloc(sizeof(int32_t) * (size_t)n);
    fill(h, n * H, seed, 1.0);
    fill(W, V * H, seed + 1, 1.0);
    fill(cl, n, seed + 2, 1.0);
    fill(ce, n, seed + 3, with_entropy ? 1.0 : 0.0);
    df_rng r;
    df_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++)
        tgt[i] = (int32_t)df_rng_below(&r, (uint64_t)V);
    tgt[0] = (int32_t)(V - 1); /* last column of the last, partial tile */
    lm_ctx c = {n, V, H, temp, tgt, to_d(h, n * H), to_d(W, V * H), to_d(cl, n), to_d(ce, n),
                dvec(n), dvec(n), dvec(n), cap};
    ref_lmhead(&c);
    double *ref_sq = c.sq;
    c.sq = NULL; /* the finite differences below need no sum of p^2 */
    df_vocab_tiling tl = {rt, ctile, group, 2 * rt + 1};
    lm_bounds bd = lmhead_bounds(&c, &tl);
    float *scratch = fvec(df_lmhead_scratch_floats_tiled(n, V, H, &tl));
    /* the sum of p^2 alone, then with the entropy: the same log-probs either way */
    df_lmhead_fwd_tiled(lp2, NULL, sq, lse2, h, W, tgt, n, V, H, temp, cap, &tl, scratch);
    check_bound("lmhead sum of p^2", sq, ref_sq, bd.sq, n);
    df_lmhead_fwd_tiled(logp, ent, sq, lse, h, W, tgt, n, V, H, temp, cap, &tl, scratch);
    check_bound("lmhead logp", logp, c.logp, bd.logp, n);
    check_bound("lmhead entropy", ent, c.ent, bd.ent, n);
    check_bound("lmhead sum of p^2 with entropy", sq, ref_sq, bd.sq, n);
    assert_memory_equal(lp2, logp, (size_t)n * sizeof(float));
    assert_memory_equal(lse2, lse, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < V * H; i++)
        dW[i] = 2.0f;
    for (int64_t i = 0; i < n * H; i++)
        dh[i] = NAN; /* overwritten */
    df_lmhead_bwd_tiled(dh, dW, cl, with_entropy ? ce : NULL, h, W, tgt, lse, ent, n, V, H,
                        temp, cap, &tl, scratch);
    for (int64_t i = 0; i < V * H; i++)
        dW[i] -= 2.0f;
    double step = 0; /* the rounded FD steps: u64 sum |g| |x| */
    for (int64_t i = 0; i < n * H; i++)
        step += fabs((double)dh[i] * h[i]);
    for (int64_t i = 0; i < V * H; i++)
        step += fabs((double)dW[i] * W[i]);
    const double eps_l = bd.loss_eps + DF_U64 * step;
    double *gh = dvec(n * H), *eh = dvec(n * H), *gW = dvec(V * H), *eW = dvec(V * H);
    fd_grad(lm_loss, &c, c.h, n * H, eps_l, gh, eh);
    fd_grad(lm_loss, &c, c.W, V * H, eps_l, gW, eW);
    for (int64_t i = 0; i < n * H; i++)
        eh[i] += bd.dh[i];
    for (int64_t i = 0; i < V * H; i++)
        eW[i] += bd.dW[i];
    check_bound("lmhead dh", dh, gh, eh, n * H);
    check_bound("lmhead dW", dW, gW, eW, V * H);
    free(h), free(W), free(cl), free(ce), free(logp), free(ent), free(lse), free(dh), free(dW);
    free(sq), free(lp2), free(lse2), free(ref_sq);
    free(tgt), free(scratch), free(c.h), free(c.W), free(c.cl), free(c.ce), free(c.logp);
    free(c.ent), free(gh), free(eh), free(gW), free(eW);
    free(bd.logp), free(bd.ent), free(bd.sq), free(bd.dh), free(bd.dW);
}

static void check_lmhead(int64_t n, int64_t V, int64_t H, float temp, int64_t rt, int64_t ctile,
                         int64_t group, int with_entropy, uint64_t seed)
{
    check_lmhead_c(n, V, H, temp, 0.0f, rt, ctile, group, with_entropy, seed);
}

/* Gemma 2's final-logit soft-cap z = C tanh(y / C) / t: log-probs, entropies, sums of p^2 and both
   gradients against the float64 reference and finite differences, with caps that bite (the
   logits of these inputs reach a few units; H = 16 reaches more), partial tiles and groups as
   test_lmhead_tiles; a cap of 1 must change the log-probs. */
static void test_lmhead_softcap(void **state)
{
    (void)state;
    check_lmhead_c(11, 50, 6, 0.7f, 1.0f, 4, 7, 14, 1, 300);
    check_lmhead_c(6, 31, 16, 1.3f, 2.5f, 2, 8, 8, 0, 310);
    check_lmhead_c(7, 53, 3, 1.0f, 0.5f, 3, 16, 10, 1, 320);
    const int64_t n = 4, V = 40, H = 8;
    float *h = fvec(n * H), *W = fvec(V * H), *l1 = fvec(n), *l2 = fvec(n), *lse = fvec(n);
    int32_t tgt[4] = {0, 7, 21, 39};
    fill(h, n * H, 330, 1.0);
    fill(W, V * H, 331, 1.0);
    float *scratch = fvec(df_lmhead_scratch_floats(n, V, H));
    df_lmhead_fwd(l1, NULL, NULL, lse, h, W, tgt, n, V, H, 1.0f, 1.0f, scratch);
    df_lmhead_fwd(l2, NULL, NULL, lse, h, W, tgt, n, V, H, 1.0f, 0.0f, scratch);
    double diff = 0;
    for (int64_t i = 0; i < n; i++)
        diff = fmax(diff, fabs((double)l1[i] - l2[i]));
    assert_true(diff > 1e-2);
    free(h), free(W), free(l1), free(l2), free(lse), free(scratch);
}

static void test_lmhead_tiles(void **state)
{
    (void)state;
    /* 11 rows in tiles of 4, vocabulary 50 in tiles of 7 and groups of 14: every
     * edge is partial, and groups merge across tiles and across each other. */
    check_lmhead(11, 50, 6, 0.7f, 4, 7, 14, 1, 100);
    check_lmhead(5, 23, 4, 1.0f, 256, 4096, 8192, 1, 110); /* one tile */
    check_lmhead(6, 31, 5, 1.3f, 2, 8, 8, 0, 120);         /* no entropy gradient */
    check_lmhead(7, 53, 3, 0.8f, 3, 16, 10, 1, 150);       /* group rounded up to 16 */
}

static void test_lmhead_default_tiles(void **state)
{
    (void)state;
    /* Default tiles with a vocabulary of two groups, not a multiple of DF_LMHEAD_COLS. */
    const int64_t n = 3, V = DF_LMHEAD_GROUP + DF_LMHEAD_COLS + 37, H = 3;
    float *h = fvec(n * H), *W = fvec(V * H), *logp = fvec(n), *ent = fvec(n), *lse = fvec(n);
    float *sq = fvec(n), *scratch = fvec(df_lmhead_scratch_floats(n, V, H));
    int32_t tgt[3] = {5, (int32_t)V - 1, DF_LMHEAD_GROUP};
    fill(h, n * H, 130, 2.0);
    fill(W, V * H, 131, 1.0);
    lm_ctx c = {n, V, H, 0.7, tgt, to_d(h, n * H), to_d(W, V * H), dvec(n), dvec(n), dvec(n),
                dvec(n), dvec(n), 0};
    df_vocab_tiling tl = df_vocab_tiling_for(V, H);
    ref_lmhead(&c);
    lm_bounds bd = lmhead_bounds(&c, &tl);
    df_lmhead_fwd(logp, ent, sq, lse, h, W, tgt, n, V, H, 0.7f, 0.0f, scratch);
    check_bound("lmhead default logp", logp, c.logp, bd.logp, n);
    check_bound("lmhead default entropy", ent, c.ent, bd.ent, n);
    check_bound("lmhead default sum of p^2", sq, c.sq, bd.sq, n);
    free(bd.logp), free(bd.ent), free(bd.sq), free(bd.dh), free(bd.dW);
    /* A large logit range: entropy stays accurate (no lse - E[z] cancellation, which
     * would cost u |lse| absolute, far above this bound). */
    for (int64_t i = 0; i < H; i++)
        h[i] *= 40.0f, c.h[i] = h[i];
    ref_lmhead(&c);
    bd = lmhead_bounds(&c, &tl);
    df_lmhead_fwd(logp, ent, sq, lse, h, W, tgt, n, V, H, 0.7f, 0.0f, scratch);
    check_bound("lmhead peaked logp", logp, c.logp, bd.logp, n);
    check_bound("lmhead peaked entropy", ent, c.ent, bd.ent, n);
    check_bound("lmhead peaked sum of p^2", sq, c.sq, bd.sq, n);
    assert_true(c.sq[0] > 0.5); /* the peak: the groups' s2 rescaled by e^(2 dm) matter */
    free(bd.logp), free(bd.ent), free(bd.sq), free(bd.dh), free(bd.dW);
    free(h), free(W), free(logp), free(ent), free(lse), free(sq), free(scratch), free(c.h), free(c.W);
    free(c.cl), free(c.ce), free(c.logp), free(c.ent), free(c.sq);
}

static void test_lmhead_many_rows(void **state)
{
    (void)state;
    /* More rows than DF_LMHEAD_ROWS: the row-tile loop with the default tile. */
    const int64_t n = DF_LMHEAD_ROWS + 9, V = 17, H = 4;
    check_lmhead(n, V, H, 0.9f, DF_LMHEAD_ROWS, DF_LMHEAD_COLS, DF_LMHEAD_GROUP, 1, 140);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_bf16_matmul),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_qk_norm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_rope_llama3),
        cmocka_unit_test(test_rope_partial),
        cmocka_unit_test(test_rope_linear),
        cmocka_unit_test(test_attention_small_heads),
        cmocka_unit_test(test_attention_specialised),
        cmocka_unit_test(test_attention_window),
        cmocka_unit_test(test_attention_softcap),
        cmocka_unit_test(test_lmhead_softcap),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_geglu),
        cmocka_unit_test(test_lmhead_tiles),
        cmocka_unit_test(test_lmhead_default_tiles),
        cmocka_unit_test(test_lmhead_many_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
