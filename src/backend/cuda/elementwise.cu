/*
 * elementwise.cu — embedding, RMSNorm, RoPE and SwiGLU on the device (cuda_backend.h), the
 * twins of src/model/ops_basic.c: same layouts, same formulas evaluated in the same order.
 * Elementwise ops are grid-stride loops over int64 indices; row ops (RMSNorm) give one block
 * per row and reduce with warp shuffles. expf is CUDA's (<= 2 ulp); no fast-math intrinsics.
 */
#include "backend/cuda/cuda_internal.h"

#define EW_THREADS 256
#define ROW_THREADS 256  /* threads per RMSNorm row: a multiple of 32, at most 1024 */
#define DW_ROWS 64       /* rows one thread sums before its atomicAdd into dw */
#define MAX_GRID (65535u * 8u)

/* Grid-stride loop over [0, n) with 64-bit indices. */
#define GRID_LOOP(i, n)                                                                    \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);               \
         i += (int64_t)gridDim.x * blockDim.x)

/*
 * Sum of v over the block, returned to every thread (blockDim.x a multiple of 32). The xor
 * butterfly gives every lane bit-identical sums (each step adds the same pair, commuted).
 * The leading __syncthreads lets a block call this again in a loop: sh may still be read.
 */
__device__ static float block_sum(float v, float *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static unsigned row_blocks(int64_t T)
{
    return (unsigned)(T < (int64_t)MAX_GRID ? T : (int64_t)MAX_GRID);
}

/* ---- embedding ----------------------------------------------------------------------- */

__global__ static void embedding_fwd_kernel(float *out, const int32_t *ids, const float *table,
                                            int64_t T, int64_t H)
{
    GRID_LOOP(i, T * H)
    {
        int64_t t = i / H, j = i - t * H;
        out[i] = table[(int64_t)ids[t] * H + j];
    }
}

__global__ static void embedding_bwd_kernel(float *dtable, const float *dout, const int32_t *ids,
                                            int64_t T, int64_t H)
{
    GRID_LOOP(i, T * H)
    {
        int64_t t = i / H, j = i - t * H;
        atomicAdd(dtable + (int64_t)ids[t] * H + j, dout[i]); /* repeated ids collide */
    }
}

static int check_th(const char *fn, int64_t T, int64_t H)
{
    if (T < 0 || H < 0)
        return df_error(DF_EINVAL, "%s: T = %lld, H = %lld", fn, (long long)T, (long long)H);
    return DF_OK;
}

int df_cuda_embedding_fwd(df_cuda *c, float *d_out, const int32_t *d_ids, const float *d_table,
                          int64_t T, int64_t H)
{
    int rc = check_th("df_cuda_embedding_fwd", T, H);
    if (rc || T == 0 || H == 0)
        return rc;
    embedding_fwd_kernel<<<df_cuda_blocks(T * H, EW_THREADS), EW_THREADS, 0, c->stream>>>(
        d_out, d_ids, d_table, T, H);
    DFC_LAUNCHED();
    return DF_OK;
}

int df_cuda_embedding_bwd(df_cuda *c, float *d_dtable, const float *d_dout, const int32_t *d_ids,
                          int64_t T, int64_t H)
{
    int rc = check_th("df_cuda_embedding_bwd", T, H);
    if (rc || T == 0 || H == 0)
        return rc;
    embedding_bwd_kernel<<<df_cuda_blocks(T * H, EW_THREADS), EW_THREADS, 0, c->stream>>>(
        d_dtable, d_dout, d_ids, T, H);
    DFC_LAUNCHED();
    return DF_OK;
}

/* ---- RMSNorm ----------------------------------------------------------------------------- */

/* One block per row (grid-stride over rows: the loop bound is uniform, so the barriers in
 * block_sum are reached by every thread). */
__global__ static void rmsnorm_fwd_kernel(float *out, float *rstd, const float *x, const float *w,
                                          int64_t T, int64_t H, float eps)
{
    __shared__ float sh[32];
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        const float *xr = x + t * H;
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
            ss += xr[i] * xr[i];
        ss = block_sum(ss, sh);
        const float r = 1.0f / sqrtf(ss / (float)H + eps);
        if (threadIdx.x == 0)
            rstd[t] = r;
        float *o = out + t * H;
        for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
            o[i] = w[i] * (xr[i] * r);
    }
}

/* dx += r (dout w - x c), c = (sum dout w x) r^2 / H: one block per row, as the forward. */
__global__ static void rmsnorm_bwd_dx_kernel(float *dx, const float *dout, const float *x,
                                             const float *w, const float *rstd, int64_t T,
                                             int64_t H)
{
    __shared__ float sh[32];
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        const float *xr = x + t * H, *dr = dout + t * H;
        const float r = rstd[t];
        float dot = 0.0f;
        for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
            dot += dr[i] * w[i] * xr[i];
        dot = block_sum(dot, sh);
        const float cc = dot * r * r / (float)H;
        float *dxr = dx + t * H;
        for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
            dxr[i] += r * (dr[i] * w[i] - xr[i] * cc);
    }
}

/*
 * dw[j] += sum_t dout[t,j] x[t,j] rstd[t]. A thread owns column j (coalesced rows) and sums
 * chunks of DW_ROWS rows (blockIdx.y, grid-stride), then one atomicAdd: no scratch buffer,
 * T / DW_ROWS atomics per column. The order of the chunks' adds varies run to run, which the
 * any-order summation bound (gamma_{T+2}) covers.
 */
__global__ static void rmsnorm_bwd_dw_kernel(float *dw, const float *dout, const float *x,
                                             const float *rstd, int64_t T, int64_t H)
{
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= H)
        return;
    const int64_t nchunks = (T + DW_ROWS - 1) / DW_ROWS;
    float acc = 0.0f;
    for (int64_t ch = blockIdx.y; ch < nchunks; ch += gridDim.y) {
        const int64_t t1 = (ch + 1) * DW_ROWS < T ? (ch + 1) * DW_ROWS : T;
        for (int64_t t = ch * DW_ROWS; t < t1; t++)
            acc += dout[t * H + j] * x[t * H + j] * rstd[t];
    }
    atomicAdd(dw + j, acc);
}

int df_cuda_rmsnorm_fwd(df_cuda *c, float *d_out, float *d_rstd, const float *d_x,
                        const float *d_w, int64_t T, int64_t H, float eps)
{
    int rc = check_th("df_cuda_rmsnorm_fwd", T, H);
    if (rc || T == 0 || H == 0)
        return rc;
    rmsnorm_fwd_kernel<<<row_blocks(T), ROW_THREADS, 0, c->stream>>>(d_out, d_rstd, d_x, d_w, T,
                                                                       H, eps);
    DFC_LAUNCHED();
    return DF_OK;
}

int df_cuda_rmsnorm_bwd(df_cuda *c, float *d_dx, float *d_dw, const float *d_dout,
                        const float *d_x, const float *d_w, const float *d_rstd, int64_t T,
                        int64_t H)
{
    int rc = check_th("df_cuda_rmsnorm_bwd", T, H);
    if (rc || T == 0 || H == 0)
        return rc;
    rmsnorm_bwd_dx_kernel<<<row_blocks(T), ROW_THREADS, 0, c->stream>>>(d_dx, d_dout, d_x, d_w,
                                                                          d_rstd, T, H);
    DFC_LAUNCHED();
    if (!d_dw)
        return DF_OK;
    const int64_t nchunks = (T + DW_ROWS - 1) / DW_ROWS;
    dim3 grid((unsigned)((H + EW_THREADS - 1) / EW_THREADS),
              (unsigned)(nchunks < 65535 ? nchunks : 65535));
    rmsnorm_bwd_dw_kernel<<<grid, EW_THREADS, 0, c->stream>>>(d_dw, d_dout, d_x, d_rstd, T, H);
    DFC_LAUNCHED();
    return DF_OK;
}

/* ---- RoPE ---------------------------------------------------------------------------------- */

/*
 * One thread per pair (t, head h, i < half = rd / 2): x[t, h hd + i] and x[t, h hd + i + half]
 * rotate by table row pos[t], column i; dims rd .. hd-1 are not touched; sign = -1 is the
 * inverse. df_rope_apply's expressions.
 */
__global__ static void rope_kernel(float *x, const int32_t *pos, int64_t T, int64_t n_heads,
                                   int64_t hd, int64_t rd, const float *cos_t, const float *sin_t,
                                   float sign)
{
    const int64_t half = rd / 2, per_row = n_heads * half;
    GRID_LOOP(k, T * per_row)
    {
        const int64_t t = k / per_row, rem = k - t * per_row;
        const int64_t h = rem / half, i = rem - h * half;
        const int64_t tab = (int64_t)pos[t] * half + i;
        const float cs = cos_t[tab], sn = sign * sin_t[tab];
        float *a = x + t * n_heads * hd + h * hd + i, *b = a + half;
        const float x0 = *a, x1 = *b;
        *a = x0 * cs - x1 * sn;
        *b = x1 * cs + x0 * sn;
    }
}

int df_cuda_rope_apply(df_cuda *c, float *d_x, const int32_t *d_pos, int64_t T,
                       int64_t n_heads, int64_t hd, int64_t rd, const float *d_cos,
                       const float *d_sin, bool inverse)
{
    if (T < 0 || n_heads < 0 || hd < 0 || hd % 2 || rd < 0 || rd % 2 || rd > hd)
        return df_error(DF_EINVAL, "df_cuda_rope_apply: T = %lld, n_heads = %lld, hd = %lld, rd = %lld "
                        "(even, rd <= hd)", (long long)T, (long long)n_heads, (long long)hd, (long long)rd);
    const int64_t n = T * n_heads * (rd / 2);
    if (n == 0)
        return DF_OK;
    rope_kernel<<<df_cuda_blocks(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(
        d_x, d_pos, T, n_heads, hd, rd, d_cos, d_sin, inverse ? -1.0f : 1.0f);
    DFC_LAUNCHED();
    return DF_OK;
}

/* ---- SwiGLU --------------------------------------------------------------------------------- */

/* expf(-g) overflows to inf for g < -88.7: g / inf = -0, as the CPU's df_expf gives. */
__global__ static void swiglu_fwd_kernel(float *out, const float *gate, const float *up,
                                         int64_t n)
{
    GRID_LOOP(i, n)
    {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* silu'(g) = s (1 + g (1 - s)), s = sigmoid(g). */
__global__ static void swiglu_bwd_kernel(float *dgate, float *dup, const float *dout,
                                         const float *gate, const float *up, int64_t n)
{
    GRID_LOOP(i, n)
    {
        /* inputs read before outputs are written: dgate == gate, dup == up allowed */
        const float g = gate[i], u = up[i], s = 1.0f / (1.0f + expf(-g)), d = dout[i];
        dup[i] = d * g * s;
        dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
    }
}

int df_cuda_swiglu_fwd(df_cuda *c, float *d_out, const float *d_gate, const float *d_up,
                       int64_t n)
{
    if (n <= 0)
        return DF_OK;
    swiglu_fwd_kernel<<<df_cuda_blocks(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(d_out, d_gate,
                                                                                    d_up, n);
    DFC_LAUNCHED();
    return DF_OK;
}

int df_cuda_swiglu_bwd(df_cuda *c, float *d_dgate, float *d_dup, const float *d_dout,
                       const float *d_gate, const float *d_up, int64_t n)
{
    if (n <= 0)
        return DF_OK;
    swiglu_bwd_kernel<<<df_cuda_blocks(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(
        d_dgate, d_dup, d_dout, d_gate, d_up, n);
    DFC_LAUNCHED();
    return DF_OK;
}

/* ---- GeGLU (GELU, tanh approximation) --------------------------------------------------------- */

/* The constants and the evaluation of df_geglu_fwd / _bwd (src/model/ops_basic.c, ops.h):
 * gelu_tanh(g) = g sigmoid(z), z = 2 sqrt(2 / pi) (g + 0.044715 g^3). */
#define GELU_2K0 1.5957691216057308f
#define GELU_K1 0.044715f
#define GELU_3K1 0.134145f

__global__ static void geglu_fwd_kernel(float *out, const float *gate, const float *up, int64_t n)
{
    GRID_LOOP(i, n)
    {
        const float g = gate[i], g2 = g * g;
        const float z = GELU_2K0 * (g + GELU_K1 * g2 * g);
        out[i] = g / (1.0f + expf(-z)) * up[i];
    }
}

/* gelu'(g) = s (1 + 2 sqrt(2 / pi) g (1 - s) (1 + 3 0.044715 g^2)), s = sigmoid(z). */
__global__ static void geglu_bwd_kernel(float *dgate, float *dup, const float *dout,
                                        const float *gate, const float *up, int64_t n)
{
    GRID_LOOP(i, n)
    {
        /* inputs read before outputs are written: dgate == gate, dup == up allowed */
        const float g = gate[i], u = up[i], d = dout[i], g2 = g * g;
        const float z = GELU_2K0 * (g + GELU_K1 * g2 * g);
        const float s = 1.0f / (1.0f + expf(-z));
        dup[i] = d * g * s;
        dgate[i] = d * u * s * (1.0f + GELU_2K0 * g * (1.0f - s) * (1.0f + GELU_3K1 * g2));
    }
}

int df_cuda_geglu_fwd(df_cuda *c, float *d_out, const float *d_gate, const float *d_up, int64_t n)
{
    if (n <= 0)
        return DF_OK;
    geglu_fwd_kernel<<<df_cuda_blocks(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(d_out, d_gate,
                                                                                   d_up, n);
    DFC_LAUNCHED();
    return DF_OK;
}

int df_cuda_geglu_bwd(df_cuda *c, float *d_dgate, float *d_dup, const float *d_dout,
                      const float *d_gate, const float *d_up, int64_t n)
{
    if (n <= 0)
        return DF_OK;
    geglu_bwd_kernel<<<df_cuda_blocks(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(
        d_dgate, d_dup, d_dout, d_gate, d_up, n);
    DFC_LAUNCHED();
    return DF_OK;
}
