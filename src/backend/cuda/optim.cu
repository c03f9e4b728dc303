/*
 * optim.cu — AdamW, the gradient's sum of squares and its scaling on the device
 * (cuda_backend.h), the twins of src/model/optim_step.c.
 */
#include "backend/cuda/cuda_internal.h"

#include <math.h>

#define OPT_THREADS 256
#define SUMSQ_THREADS 256   /* a multiple of 32 */
#define SUMSQ_MAX_BLOCKS 1024

#define GRID_LOOP(i, n)                                                                    \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);               \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---- AdamW ------------------------------------------------------------------------------ */

/* The step's float32 scalars, each computed in double on the host and rounded once. */
typedef struct adamw_scalars {
    float decay, b1, b2, omb1, omb2, step_size, bc2_sqrt, eps;
} adamw_scalars;

/* df_adamw_step's loop body, expression for expression. */
__global__ static void adamw_kernel(float *p, const float *g, float *m, float *v, int64_t n,
                                    adamw_scalars s)
{
    GRID_LOOP(i, n)
    {
        const float gi = g[i];
        const float pi = p[i] * s.decay;
        const float mi = m[i] * s.b1 + gi * s.omb1;
        const float vi = v[i] * s.b2 + gi * gi * s.omb2;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - s.step_size * (mi / (sqrtf(vi) / s.bc2_sqrt + s.eps));
    }
}

int df_cuda_adamw_step(df_cuda *c, float *d_p, const float *d_g, float *d_m, float *d_v,
                       int64_t n, const df_adamw_config *cfg, int64_t step, double lr)
{
    if (!cfg || step < 1)
        return df_error(DF_EINVAL, "df_cuda_adamw_step: %s", cfg ? "step must be >= 1" : "no config");
    if (!(lr >= 0) || !isfinite(lr))
        return df_error(DF_EINVAL, "AdamW: learning rate must be finite and >= 0 (got %g)", lr);
    if (n <= 0)
        return DF_OK;
    /* Scalars in double then rounded once: the same host libm calls as df_adamw_step, so
     * they are bit-identical to the CPU's. */
    const double t = (double)step;
    adamw_scalars s;
    s.decay = (float)(1.0 - lr * cfg->weight_decay);
    s.b1 = (float)cfg->beta1;
    s.b2 = (float)cfg->beta2;
    s.omb1 = (float)(1.0 - cfg->beta1);
    s.omb2 = (float)(1.0 - cfg->beta2);
    s.step_size = (float)(lr / (1.0 - pow(cfg->beta1, t)));
    s.bc2_sqrt = (float)sqrt(1.0 - pow(cfg->beta2, t));
    s.eps = (float)cfg->eps;
    adamw_kernel<<<df_cuda_blocks(n, OPT_THREADS), OPT_THREADS, 0, c->stream>>>(d_p, d_g, d_m,
                                                                                 d_v, n, s);
    DFC_LAUNCHED();
    return DF_OK;
}

/* ---- sum of squares ------------------------------------------------------------------------ */

/* Sum over the block (blockDim.x a multiple of 32) in a fixed order; valid in thread 0. */
__device__ static double block_sum_f64(double v)
{
    __shared__ double sh[32];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    v = 0.0;
    if (warp == 0) {
        v = lane < nw ? sh[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, o);
    }
    return v;
}

/* Pass 1: block b's partial[b] over its grid-stride share; a square of a float is exact in
 * double, so only the (fixed-order) additions round. */
__global__ static void sumsq_partial_kernel(const float *x, int64_t n, double *partial)
{
    double acc = 0.0;
    GRID_LOOP(i, n)
    {
        const double xi = x[i];
        acc += xi * xi;
    }
    acc = block_sum_f64(acc);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = acc;
}

/* Pass 2, one block: partial[nb] = sum of partial[0 .. nb), in a fixed order. */
__global__ static void sumsq_final_kernel(double *partial, int nb)
{
    double acc = 0.0;
    for (int b = threadIdx.x; b < nb; b += blockDim.x)
        acc += partial[b];
    acc = block_sum_f64(acc);
    if (threadIdx.x == 0)
        partial[nb] = acc;
}

static int sumsq_run(df_cuda *c, const float *d_x, int64_t n, unsigned nb, double *d_part,
                     double *sumsq)
{
    sumsq_partial_kernel<<<nb, SUMSQ_THREADS, 0, c->stream>>>(d_x, n, d_part);
    DFC_LAUNCHED();
    sumsq_final_kernel<<<1, SUMSQ_THREADS, 0, c->stream>>>(d_part, (int)nb);
    DFC_LAUNCHED();
    DFC_TRY(cudaMemcpyAsync(sumsq, d_part + nb, sizeof(double), cudaMemcpyDeviceToHost,
                            c->stream));
    DFC_TRY(cudaStreamSynchronize(c->stream));
    return DF_OK;
}

int df_cuda_sumsq(df_cuda *c, const float *d_x, int64_t n, double *sumsq)
{
    *sumsq = 0.0;
    if (n <= 0)
        return DF_OK;
    /* The block count depends on n only, so the summation order (and the result's bits) is
     * the same on every run and every device. */
    unsigned nb = df_cuda_blocks(n, SUMSQ_THREADS);
    nb = nb < SUMSQ_MAX_BLOCKS ? nb : SUMSQ_MAX_BLOCKS;
    /* nb + 1 doubles of stream-ordered scratch (pool-backed: cheap once per step); the
     * last holds the result. */
    double *d_part = NULL;
    DFC_TRY(cudaMallocAsync((void **)&d_part, (nb + 1) * sizeof(double), c->stream));
    int rc = sumsq_run(c, d_x, n, nb, d_part, sumsq);
    cudaError_t e = cudaFreeAsync(d_part, c->stream);
    if (rc)
        return rc;
    if (e != cudaSuccess)
        return df_cuda_fail(e, "cudaFreeAsync", __FILE__, __LINE__);
    return DF_OK;
}

/* ---- scaling ---------------------------------------------------------------------------------- */

__global__ static void scale_x_kernel(float *x, int64_t n, float s)
{
    GRID_LOOP(i, n)
        x[i] *= s;
}

int df_cuda_scale(df_cuda *c, float *d_x, int64_t n, float s)
{
    if (n <= 0)
        return DF_OK;
    scale_x_kernel<<<df_cuda_blocks(n, OPT_THREADS), OPT_THREADS, 0, c->stream>>>(d_x, n, s);
    DFC_LAUNCHED();
    return DF_OK;
}
