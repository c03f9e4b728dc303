/*
 * rows.cu — the row operators of the backend seam (distflow/backend.h) on the device: a
 * Linear layer's bias rows and bias gradient, and the output rows' gather / scatter-add
 * between the residual stream and the LM head. Twins of src/model/backend_cpu.c.
 */
#include "backend/cuda/cuda_internal.h"

#define EW_THREADS 256
#define CS_COLS 32  /* columns per column-sum block (one warp wide: coalesced rows) */
#define CS_SLICES 8 /* row slices per column-sum block, summed in slice order */

#define GRID_LOOP(i, n)                                                                    \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);               \
         i += (int64_t)gridDim.x * blockDim.x)

__global__ static void rows_fill_kernel(float *y, const float *b, int64_t M, int64_t N)
{
    GRID_LOOP(i, M * N)
    y[i] = b[i % N];
}

int df_cuda_rows_fill(df_cuda *c, float *d_y, const float *d_b, int64_t M, int64_t N)
{
    if (M <= 0 || N <= 0)
        return DF_OK;
    rows_fill_kernel<<<df_cuda_blocks(M * N, EW_THREADS), EW_THREADS, 0, c->stream>>>(d_y, d_b,
                                                                                        M, N);
    DFC_LAUNCHED();
    return DF_OK;
}

/* db[j] += sum_i dy[i, j]: slice y of a block sums rows y, y + CS_SLICES, ... of its column;
 * the slices are then added in order (deterministic). */
__global__ static void col_sum_kernel(float *db, const float *dy, int64_t M, int64_t N)
{
    __shared__ float part[CS_SLICES][CS_COLS + 1];
    const int64_t j = blockIdx.x * (int64_t)CS_COLS + threadIdx.x;
    float s = 0.0f;
    if (j < N)
        for (int64_t i = threadIdx.y; i < M; i += CS_SLICES)
            s += dy[i * N + j];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < N) {
        float t = 0.0f;
        for (int r = 0; r < CS_SLICES; r++)
            t += part[r][threadIdx.x];
        db[j] += t;
    }
}

int df_cuda_col_sum_add(df_cuda *c, float *d_db, const float *d_dy, int64_t M, int64_t N)
{
    if (M <= 0 || N <= 0)
        return DF_OK;
    dim3 block(CS_COLS, CS_SLICES);
    col_sum_kernel<<<(unsigned)((N + CS_COLS - 1) / CS_COLS), block, 0, c->stream>>>(d_db, d_dy,
                                                                                   M, N);
    DFC_LAUNCHED();
    return DF_OK;
}

__global__ static void gather_kernel(float *dst, const float *src, const int64_t *rows,
                                     int64_t n, int64_t H)
{
    GRID_LOOP(i, n * H)
    dst[i] = src[rows[i / H] * H + i % H];
}

int df_cuda_gather_rows(df_cuda *c, float *d_dst, const float *d_src, const int64_t *d_rows,
                        int64_t n, int64_t H)
{
    if (n <= 0 || H <= 0)
        return DF_OK;
    gather_kernel<<<df_cuda_blocks(n * H, EW_THREADS), EW_THREADS, 0, c->stream>>>(d_dst, d_src,
                                                                                     d_rows, n, H);
    DFC_LAUNCHED();
    return DF_OK;
}

/* Distinct rows: each destination element has one writer. */
__global__ static void scatter_add_kernel(float *dst, const float *src, const int64_t *rows,
                                          int64_t n, int64_t H)
{
    GRID_LOOP(i, n * H)
    dst[rows[i / H] * H + i % H] += src[i];
}

int df_cuda_scatter_add_rows(df_cuda *c, float *d_dst, const float *d_src,
                             const int64_t *d_rows, int64_t n, int64_t H)
{
    if (n <= 0 || H <= 0)
        return DF_OK;
    scatter_add_kernel<<<df_cuda_blocks(n * H, EW_THREADS), EW_THREADS, 0, c->stream>>>(
        d_dst, d_src, d_rows, n, H);
    DFC_LAUNCHED();
    return DF_OK;
}
