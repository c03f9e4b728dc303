/*
 * runtime.cu — devices, contexts, buffers and dtype conversion of the CUDA backend
 * (cuda_backend.h). A context is one stream and one cuBLAS handle on one device.
 */
#include "backend/cuda/cuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int df_cuda_fail(cudaError_t e, const char *what, const char *file, int line)
{
    cudaGetLastError(); /* reset a non-sticky error so the next check does not report it again */
    return df_error(e == cudaErrorMemoryAllocation ? DF_ENOMEM : DF_EINTERNAL,
                    "CUDA: %s failed: %s (%s:%d)", what, cudaGetErrorString(e), file, line);
}

int df_cublas_fail(cublasStatus_t s, const char *what, const char *file, int line)
{
    return df_error(s == CUBLAS_STATUS_ALLOC_FAILED ? DF_ENOMEM : DF_EINTERNAL,
                    "cuBLAS: %s failed: %s (%s:%d)", what, cublasGetStatusString(s), file, line);
}

int df_cuda_device_count(int *n)
{
    int k = 0;
    cudaError_t e = cudaGetDeviceCount(&k);
    if (e != cudaSuccess) { /* no driver, or no device: both mean "none here" */
        cudaGetLastError();
        k = 0;
    }
    *n = k;
    return DF_OK;
}

static int env_int(const char *name, int *v)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    long x = strtol(s, &end, 10);
    if (*end || x < 0 || x > 1 << 20)
        return 0;
    *v = (int)x;
    return 1;
}

int df_cuda_local_device(int *device)
{
    int n = 0;
    df_cuda_device_count(&n);
    if (n == 0) {
        int k = 0;
        cudaError_t e = cudaGetDeviceCount(&k);
        cudaGetLastError();
        return df_error(DF_EUNSUPPORTED, "trainer.device=cuda: no usable CUDA device (%s)",
                        e == cudaSuccess ? "the driver reports none" : cudaGetErrorString(e));
    }
    int local = 0;
    if (!env_int("OMPI_COMM_WORLD_LOCAL_RANK", &local) && !env_int("MPI_LOCALRANKID", &local))
        env_int("SLURM_LOCALID", &local);
    *device = local % n;
    return DF_OK;
}

int df_cuda_create(int device, df_cuda **out)
{
    *out = NULL;
    if (device < 0) {
        int rc = df_cuda_local_device(&device);
        if (rc)
            return rc;
    } else {
        int n = 0;
        df_cuda_device_count(&n);
        if (device >= n)
            return df_error(DF_EUNSUPPORTED, "CUDA device %d requested, %d visible", device, n);
    }
    df_cuda *c = (df_cuda *)calloc(1, sizeof *c);
    if (!c)
        return df_error(DF_ENOMEM, "CUDA context: out of host memory");
    c->device = device;
    int rc = DF_OK;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaGetDeviceProperties(&c->prop, device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        rc = df_cuda_fail(e, "device setup", __FILE__, __LINE__);
    } else {
        cublasStatus_t s = cublasCreate(&c->blas);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasSetStream(c->blas, c->stream);
        /* default math: CUBLAS_COMPUTE_32F on float32 operands stays float32 (no TF32),
         * bf16 operands use the tensor cores */
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
        if (s != CUBLAS_STATUS_SUCCESS)
            rc = df_cublas_fail(s, "cublasCreate", __FILE__, __LINE__);
    }
    if (rc) {
        df_cuda_free(c);
        return rc;
    }
    *out = c;
    return DF_OK;
}

void df_cuda_free(df_cuda *c)
{
    if (!c)
        return;
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    df_cuda_gemm16_free(c);
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    df_memtrack_free(&c->mem);
    free(c);
}

const char *df_cuda_device_name(const df_cuda *c) { return c->prop.name; }

void df_cuda_get_info(const df_cuda *c, df_cuda_info *out)
{
    memset(out, 0, sizeof *out);
    out->device = c->device;
    snprintf(out->name, sizeof out->name, "%s", c->prop.name);
    out->cc_major = c->prop.major;
    out->cc_minor = c->prop.minor;
    out->n_sm = c->prop.multiProcessorCount;
    out->mem_bytes = (int64_t)c->prop.totalGlobalMem;
    out->l2_bytes = (int64_t)c->prop.l2CacheSize;
    cudaRuntimeGetVersion(&out->runtime_version);
    cudaDriverGetVersion(&out->driver_version);
}

int df_cuda_sync(df_cuda *c)
{
    DFC_TRY(cudaStreamSynchronize(c->stream));
    DFC_TRY(cudaGetLastError());
    return DF_OK;
}

int df_cuda_alloc(df_cuda *c, size_t bytes, void **d)
{
    *d = NULL;
    if (bytes == 0)
        return DF_OK;
    cudaError_t e = cudaMalloc(d, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        *d = NULL;
        return df_error(e == cudaErrorMemoryAllocation ? DF_ENOMEM : DF_EINTERNAL,
                        "CUDA: cannot allocate %zu bytes on device %d: %s", bytes, c->device,
                        cudaGetErrorString(e));
    }
    if (df_memtrack_add(&c->mem, *d, (int64_t)bytes)) {
        cudaFree(*d);
        *d = NULL;
        return DF_ENOMEM;
    }
    return DF_OK;
}

void df_cuda_release(df_cuda *c, void *d)
{
    if (!d)
        return;
    df_memtrack_remove(&c->mem, d);
    cudaFree(d);
}

int64_t df_cuda_memory_peak(const df_cuda *c) { return c->mem.peak; }

int df_cuda_upload(df_cuda *c, void *d_dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return DF_OK;
    /* pageable host memory: the copy is staged before this returns, so src may be reused */
    DFC_TRY(cudaMemcpyAsync(d_dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    return DF_OK;
}

int df_cuda_download(df_cuda *c, void *dst, const void *d_src, size_t bytes)
{
    if (bytes == 0)
        return df_cuda_sync(c);
    DFC_TRY(cudaMemcpyAsync(dst, d_src, bytes, cudaMemcpyDeviceToHost, c->stream));
    return df_cuda_sync(c);
}

int df_cuda_copy(df_cuda *c, void *d_dst, const void *d_src, size_t bytes)
{
    if (bytes == 0)
        return DF_OK;
    DFC_TRY(cudaMemcpyAsync(d_dst, d_src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    return DF_OK;
}

__global__ static void fill_kernel(float *d, int64_t n, float value)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        d[i] = value;
}

int df_cuda_fill(df_cuda *c, float *d, int64_t n, float value)
{
    if (n <= 0)
        return DF_OK;
    fill_kernel<<<df_cuda_blocks(n, 256), 256, 0, c->stream>>>(d, n, value);
    DFC_LAUNCHED();
    return DF_OK;
}

__global__ static void to_bf16_kernel(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = df_cuda_bf16_rne(src[i]); /* the CPU's bits, NaNs too */
}

__global__ static void from_bf16_kernel(float *dst, const uint16_t *src, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __uint_as_float((uint32_t)src[i] << 16);
}

int df_cuda_f32_to_bf16(df_cuda *c, uint16_t *d_dst, const float *d_src, int64_t n)
{
    if (n <= 0)
        return DF_OK;
    to_bf16_kernel<<<df_cuda_blocks(n, 256), 256, 0, c->stream>>>(d_dst, d_src, n);
    DFC_LAUNCHED();
    return DF_OK;
}

int df_cuda_bf16_to_f32(df_cuda *c, float *d_dst, const uint16_t *d_src, int64_t n)
{
    if (n <= 0)
        return DF_OK;
    from_bf16_kernel<<<df_cuda_blocks(n, 256), 256, 0, c->stream>>>(d_dst, d_src, n);
    DFC_LAUNCHED();
    return DF_OK;
}
