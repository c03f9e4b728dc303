/* Matrix products through oneDNN's row-major sgemm, and Linear layers (ops.h). */
#include "model/ops.h"

#include <assert.h>
#include <oneapi/dnnl/dnnl.h>
#include <string.h>

/* beta * C when there is nothing to multiply (K == 0); oneDNN wants K >= 1. */
static void scale_c(int64_t M, int64_t N, float beta, float *C)
{
    if (beta == 1.0f)
        return;
    for (int64_t i = 0; i < M * N; i++)
        C[i] = beta == 0.0f ? 0.0f : beta * C[i];
}

static void sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {
        scale_c(M, N, beta, C);
        return;
    }
    dnnl_status_t st = dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, N);
    (void)st;
    assert(st == dnnl_success);
}

void df_gemm_nt(int64_t M, int64_t N, int64_t K, float alpha, const float *A, const float *B,
                float beta, float *C)
{
    sgemm('N', 'T', M, N, K, alpha, A, K, B, K, beta, C);
}

void df_gemm_nn(int64_t M, int64_t N, int64_t K, float alpha, const float *A, const float *B,
                float beta, float *C)
{
    sgemm('N', 'N', M, N, K, alpha, A, K, B, N, beta, C);
}

void df_gemm_tn(int64_t M, int64_t N, int64_t K, float alpha, const float *A, const float *B,
                float beta, float *C)
{
    sgemm('T', 'N', M, N, K, alpha, A, M, B, N, beta, C);
}

void df_linear_fwd(float *y, const float *x, const float *W, const float *b, int64_t M,
                   int64_t N, int64_t K)
{
    if (b) {
        /* Seed every row with the bias, then accumulate x W^T on top (beta = 1). */
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < M; i++)
            memcpy(y + i * N, b, (size_t)N * sizeof(float));
        df_gemm_nt(M, N, K, 1.0f, x, W, 1.0f, y);
    } else {
        df_gemm_nt(M, N, K, 1.0f, x, W, 0.0f, y);
    }
}

/* db[N] += column sums of dy[M,N]; threads split the columns so no reduction races. */
static void colsum_acc(float *db, const float *dy, int64_t M, int64_t N)
{
    const int64_t blk = 64;
    int64_t nblk = (N + blk - 1) / blk;
#pragma omp parallel for schedule(static)
    for (int64_t cb = 0; cb < nblk; cb++) {
        int64_t c0 = cb * blk, c1 = c0 + blk < N ? c0 + blk : N;
        float acc[64] = {0};
        for (int64_t i = 0; i < M; i++) {
            const float *row = dy + i * N;
#pragma omp simd
            for (int64_t c = c0; c < c1; c++)
                acc[c - c0] += row[c];
        }
        for (int64_t c = c0; c < c1; c++)
            db[c] += acc[c - c0];
    }
}

void df_linear_bwd(float *dx, float *dW, float *db, const float *dy, const float *x,
                   const float *W, int64_t M, int64_t N, int64_t K)
{
    if (dx)
        df_gemm_nn(M, K, N, 1.0f, dy, W, 1.0f, dx);
    if (dW)
        df_gemm_tn(N, K, M, 1.0f, dy, x, 1.0f, dW);
    if (db)
        colsum_acc(db, dy, M, N);
}
