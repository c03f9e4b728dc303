/*
 * gemm.cu — row-major matmuls through cuBLAS (cuda_backend.h, df_cuda_gemm).
 * cuBLAS is column-major; a row-major [r, c] matrix is the column-major [c, r] one, so the
 * row-major C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T.
 */
#include "backend/cuda/cuda_internal.h"

__global__ static void scale_kernel(float *c, int64_t n, float beta)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        c[i] = beta == 0.0f ? 0.0f : beta * c[i]; /* beta = 0 overwrites NaN, as BLAS does */
}

int df_cuda_gemm(df_cuda *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const void *d_A, const void *d_B, df_cuda_dtype dtype, float beta, float *d_C)
{
    if (M <= 0 || N <= 0)
        return DF_OK;
    if (K < 0)
        return df_error(DF_EINVAL, "df_cuda_gemm: K = %lld < 0", (long long)K);
    if (K == 0) {
        scale_kernel<<<df_cuda_blocks(M * N, 256), 256, 0, c->stream>>>(d_C, M * N, beta);
        DFC_LAUNCHED();
        return DF_OK;
    }
    cudaDataType_t t = dtype == DF_CUDA_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    DFC_BLAS(cublasGemmEx_64(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                             N, M, K, &alpha, d_B, t, tb ? K : N, d_A, t, ta ? M : K, &beta, d_C,
                             CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return DF_OK;
}
