/*
 * backend/cuda/cuda_internal.h — what the CUDA backend's .cu files share: the context
 * and the checks that turn a failed CUDA / cuBLAS call or launch into df_error.
 */
#ifndef DF_BACKEND_CUDA_INTERNAL_H
#define DF_BACKEND_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>

#include "backend/cuda/cuda_backend.h"
#include "util/memtrack.h"

struct df_cuda {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cudaDeviceProp prop;
    /* gemm_w16 / gemm_bf16: the float32 operands rounded to bf16 per call (gemm16.cu), grown
     * on demand, freed with the context */
    uint16_t *a16, *b16;
    int64_t a16_n, b16_n;
    df_memtrack mem; /* df_cuda_alloc's buffers live, and their peak (df_cuda_memory_peak) */
};

/** Give back the bf16 operand workspace (df_cuda_free). */
void df_cuda_gemm16_free(df_cuda *c);
/** *buf (c->a16 or c->b16, capacity *cap) holds at least n bf16 elements (grown on demand). */
int df_cuda_reserve16(df_cuda *c, uint16_t **buf, int64_t *cap, int64_t n);

/** DF_EINTERNAL (DF_ENOMEM for an out-of-memory) naming the call and where it failed. */
int df_cuda_fail(cudaError_t e, const char *what, const char *file, int line);
int df_cublas_fail(cublasStatus_t s, const char *what, const char *file, int line);

/* Return the error of a failed CUDA / cuBLAS call, or of the launch just issued. */
#define DFC_TRY(call)                                                   \
    do {                                                                \
        cudaError_t dfc_e_ = (call);                                    \
        if (dfc_e_ != cudaSuccess)                                      \
            return df_cuda_fail(dfc_e_, #call, __FILE__, __LINE__);     \
    } while (0)
#define DFC_BLAS(call)                                                  \
    do {                                                                \
        cublasStatus_t dfc_s_ = (call);                                 \
        if (dfc_s_ != CUBLAS_STATUS_SUCCESS)                            \
            return df_cublas_fail(dfc_s_, #call, __FILE__, __LINE__);   \
    } while (0)
#define DFC_LAUNCHED() DFC_TRY(cudaGetLastError())

/** Gemma 2's soft-cap argument: 0 (none) or a finite C > 0, else DF_EINVAL naming fn. */
static inline int df_cuda_check_softcap(const char *fn, float softcap)
{
    if (!(softcap >= 0.0f) || isinf(softcap))
        return df_error(DF_EINVAL, "%s: softcap %g (need 0 or a finite C > 0)", fn, (double)softcap);
    return DF_OK;
}

/** Blocks of `threads` covering n items, capped (grid-stride loops do the rest). */
static inline unsigned df_cuda_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

/* The largest of a warp's 32 values, in every lane. */
__device__ __forceinline__ float df_warp_max(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o /= 2)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

/* Butterfly: every lane ends with the same sum (each step adds the same two values). */
__device__ __forceinline__ float df_warp_sum(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o /= 2)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* Gemma 2's tanh soft-cap of a score or logit s (cap 0: none, s returned as it is): cap tanh(s /
 * cap), with *dcap = 1 - tanh^2(s / cap), its derivative (1 without a cap). The CUDA math
 * library's tanhf (2 ulp); the CPU's df_tanh_f differs by a few ulps of 1, so of cap. */
__device__ __forceinline__ float df_soft_cap(float s, float cap, float *dcap)
{
    if (cap == 0.0f) {
        *dcap = 1.0f;
        return s;
    }
    const float t = tanhf(s / cap);
    *dcap = 1.0f - t * t;
    return cap * t;
}

/* float32 -> bfloat16 bits, the CPU's exactly (df_bf16_from_f32): nearest even, and a NaN keeps
 * its sign and top payload, made quiet (__float2bfloat16_rn would give the canonical 0x7fff). */
__device__ __forceinline__ uint16_t df_cuda_bf16_rne(float x)
{
    const uint32_t u = __float_as_uint(x);
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40u)
                                            : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#endif /* DF_BACKEND_CUDA_INTERNAL_H */
