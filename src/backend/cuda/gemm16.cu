/*
 * gemm16.cu — mixed precision's matmuls and lookup on the GPU (cuda_backend.h
 * df_cuda_gemm_w16 / _bf16 / df_cuda_embedding_fwd_w16): float32 operands rounded to bf16 with
 * the CPU's bits (df_cuda_f32_to_bf16) into a workspace of the context, then cuBLAS's bf16 x
 * bf16 GEMM with float32 accumulation (df_cuda_gemm DF_CUDA_BF16).
 */
#include "backend/cuda/cuda_internal.h"

/* *buf holds at least n elements (grown: cudaFree waits for the work that used the old one).
 * df_cuda_alloc clears a failed cudaMalloc's error, which the next launch check would
 * otherwise report; the old buffer is forgotten before anything can fail. */
int df_cuda_reserve16(df_cuda *c, uint16_t **buf, int64_t *cap, int64_t n)
{
    if (n <= *cap)
        return DF_OK;
    uint16_t *old = *buf;
    *buf = NULL;
    *cap = 0;
    df_cuda_release(c, old);
    void *p = NULL;
    int rc = df_cuda_alloc(c, (size_t)n * sizeof(uint16_t), &p);
    if (rc)
        return df_error_wrap(rc, "a bf16 operand of %lld elements", (long long)n);
    *buf = (uint16_t *)p;
    *cap = n;
    return DF_OK;
}

void df_cuda_gemm16_free(df_cuda *c)
{
    df_cuda_release(c, c->a16);
    df_cuda_release(c, c->b16);
    c->a16 = c->b16 = NULL;
    c->a16_n = c->b16_n = 0;
}

int df_cuda_gemm_w16(df_cuda *c, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *d_A, const uint16_t *d_W, float beta, float *d_C)
{
    if (M <= 0 || N <= 0 || K <= 0) /* nothing to round: df_cuda_gemm's no-op / beta C */
        return df_cuda_gemm(c, false, tb, M, N, K, alpha, d_A, d_W, DF_CUDA_BF16, beta,
                            d_C);
    int rc = df_cuda_reserve16(c, &c->a16, &c->a16_n, M * K);
    if (!rc)
        rc = df_cuda_f32_to_bf16(c, c->a16, d_A, M * K);
    return rc ? rc : df_cuda_gemm(c, false, tb, M, N, K, alpha, c->a16, d_W, DF_CUDA_BF16, beta, d_C);
}

int df_cuda_gemm_bf16(df_cuda *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *d_A, const float *d_B, float beta, float *d_C)
{
    if (ta && tb)
        return df_error(DF_EINVAL, "df_cuda_gemm_bf16: op(A) = A^T with op(B) = B^T is not supported");
    if (M <= 0 || N <= 0 || K <= 0)
        return df_cuda_gemm(c, ta, tb, M, N, K, alpha, d_A, d_B, DF_CUDA_BF16, beta, d_C);
    int rc = df_cuda_reserve16(c, &c->a16, &c->a16_n, M * K);
    if (!rc)
        rc = df_cuda_reserve16(c, &c->b16, &c->b16_n, K * N);
    if (!rc)
        rc = df_cuda_f32_to_bf16(c, c->a16, d_A, M * K);
    if (!rc)
        rc = df_cuda_f32_to_bf16(c, c->b16, d_B, K * N);
    return rc ? rc : df_cuda_gemm(c, ta, tb, M, N, K, alpha, c->a16, c->b16, DF_CUDA_BF16, beta, d_C);
}

/* Rows widened: a bf16 is the top half of its float32. */
__global__ static void embedding_fwd16_kernel(float *out, const int32_t *ids, const uint16_t *table,
                                              int64_t T, int64_t H)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < T * H;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / H, j = i % H;
        out[i] = __uint_as_float((uint32_t)table[(int64_t)ids[t] * H + j] << 16);
    }
}

int df_cuda_embedding_fwd_w16(df_cuda *c, float *d_out, const int32_t *d_ids,
                              const uint16_t *d_table16, int64_t T, int64_t H)
{
    if (T < 0 || H < 0)
        return df_error(DF_EINVAL, "df_cuda_embedding_fwd_w16: T %lld, H %lld", (long long)T,
                        (long long)H);
    if (T == 0 || H == 0)
        return DF_OK;
    embedding_fwd16_kernel<<<df_cuda_blocks(T * H, 256), 256, 0, c->stream>>>(d_out, d_ids, d_table16,
                                                                             T, H);
    DFC_LAUNCHED();
    return DF_OK;
}
