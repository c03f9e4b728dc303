/*
 * attention.cu — causal attention over packed sequences (FlashAttention-2, Dao 2023;
 * cuda_backend.h, "attention"), optionally over a sliding window of the last W keys (the
 * CPU's df_attention_fwd convention: query i sees keys i - W < j <= i). The rollout's decode
 * attention over its KV cache is kv.cu's.
 *
 * Float32 throughout, expf / logf of the CUDA math library (2 / 1 ulp; no fast math).
 * The packed-sequence kernels share one layout: a block of 8 warps, tiles of HD columns
 * (HD = 64, 128 or 256 >= hd, zero-padded) at a row stride of HD + 4 floats in shared
 * memory. A warp owns R "own" rows of one tile (broadcast reads) and its 32 lanes take the
 * rows lane + 32 t of the other tile (float4 reads; the + 4 padding spreads a quarter-warp's
 * 8 rows over all 32 banks). Zero padding keeps every dot product exact, and zero rows past
 * the end of a sequence keep 0 * row = 0 (never 0 * NaN from a neighbour's memory).
 *
 * Backward: two kernels, so every output has one writer and no atomics (deterministic):
 * dK / dV per (key tile, kv head, sequence) over the group's query heads and the query rows
 * at or after the tile, dQ per (query tile, head, sequence) over the keys up to the tile.
 * Both recompute P = exp(S - lse) and D_i = dO_i . O_i (the latter read from out, so no
 * scratch buffer is needed). A window only narrows the tile loops (tiles no row of the block
 * can see are skipped) and the mask; `w` is 0 for plain causal attention. Gemma 2's soft-cap
 * `cap` (0: none) turns each visible scaled score s into cap tanh(s / cap) (df_soft_cap); the
 * backward recomputes tanh from s and multiplies the capped score's gradient by 1 - tanh^2.
 */
#include "backend/cuda/cuda_internal.h"

#include <math.h>
#include <stdint.h>

namespace {

constexpr int kWarps = 8, kThreads = kWarps * 32;

/* sm[rows][HD + 4] = global rows g + r * ld (r < n_valid), columns d < hd; zero elsewhere. */
template <int HD>
__device__ void load_tile(float *sm, int rows, const float *g, int64_t ld, int n_valid, int hd)
{
    for (int i = threadIdx.x; i < rows * HD; i += blockDim.x) {
        const int r = i / HD, d = i % HD;
        sm[r * (HD + 4) + d] = r < n_valid && d < hd ? g[(int64_t)r * ld + d] : 0.0f;
    }
}

/* acc[r][t] = sum_d X[r][d] * Y[lane + 32 t][d] over d < hd4 (hd rounded up to 4; the
 * padding is zero). X: the warp's R rows (the same float4 for all lanes: a broadcast). */
template <int HD, int R, int NT>
__device__ __forceinline__ void warp_dots(float (&acc)[R][NT], const float *X, const float *Y,
                                          int lane, int hd4)
{
    constexpr int LD = HD + 4;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            acc[r][t] = 0.0f;
#pragma unroll 2
    for (int d = 0; d < hd4; d += 4) {
        float4 y[NT];
#pragma unroll
        for (int t = 0; t < NT; t++)
            y[t] = *reinterpret_cast<const float4 *>(Y + (lane + 32 * t) * LD + d);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float4 x = *reinterpret_cast<const float4 *>(X + r * LD + d);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                acc[r][t] = fmaf(x.x, y[t].x, acc[r][t]);
                acc[r][t] = fmaf(x.y, y[t].y, acc[r][t]);
                acc[r][t] = fmaf(x.z, y[t].z, acc[r][t]);
                acc[r][t] = fmaf(x.w, y[t].w, acc[r][t]);
            }
        }
    }
}

/* acc[r][c] += sum_{j < J} W[r][j] * Z[j][lane + 32 c]: W the warp's [R][J] weights (zero
 * where masked), Z a [J][HD + 4] tile; lanes read consecutive columns (no bank conflict). */
template <int HD, int R, int J>
__device__ __forceinline__ void warp_accum(float (&acc)[R][HD / 32], const float *W,
                                           const float *Z, int lane)
{
    constexpr int LD = HD + 4;
#pragma unroll 1
    for (int j = 0; j < J; j += 4) {
        float4 w[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            w[r] = *reinterpret_cast<const float4 *>(W + r * J + j);
#pragma unroll
        for (int jj = 0; jj < 4; jj++) {
#pragma unroll
            for (int c = 0; c < HD / 32; c++) {
                const float z = Z[(j + jj) * LD + lane + 32 * c];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float wr = jj == 0 ? w[r].x : jj == 1 ? w[r].y : jj == 2 ? w[r].z : w[r].w;
                    acc[r][c] = fmaf(wr, z, acc[r][c]);
                }
            }
        }
    }
}

/* D[i] = dO_i . O_i and lse[i] for the n_valid rows of a query tile of head h (0 beyond):
 * one warp per row, lanes over the columns. */
__device__ void load_rowstats(float *Ds, float *Ls, int rows, const float *dout,
                              const float *out, const float *lse, int64_t row0, int n_valid,
                              int64_t ldq, int64_t nh, int64_t h, int hd)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = warp; i < rows; i += kWarps) {
        float acc = 0.0f;
        if (i < n_valid) {
            const float *o = out + (row0 + i) * ldq + h * hd, *g = dout + (row0 + i) * ldq + h * hd;
            for (int d = lane; d < hd; d += 32)
                acc = fmaf(g[d], o[d], acc);
        }
        acc = df_warp_sum(acc);
        if (lane == 0) {
            Ds[i] = acc;
            Ls[i] = i < n_valid ? lse[(row0 + i) * nh + h] : 0.0f;
        }
    }
}

/* Key j is visible to query i: causal, and within the window when w > 0. */
__device__ __forceinline__ bool visible(int j, int i, int w)
{
    return j <= i && (w == 0 || i - j < w);
}

/* The first key tile (a multiple of bc, as the CPU's first_tile) rows from q0 on can see. */
__device__ __forceinline__ int first_key_tile(int q0, int w, int bc)
{
    return w > 0 && q0 - w + 1 > 0 ? (q0 - w + 1) / bc * bc : 0;
}

/* ---- forward: grid (sequence, query tile, head) ----------------------------------------- */

template <int HD, int R, int NK>
struct fwd_cfg {
    static constexpr int BR = kWarps * R, BC = 32 * NK, LD = HD + 4;
    static constexpr size_t smem = sizeof(float) * (size_t)(BR * LD + 2 * BC * LD + BR * BC);
};

template <int HD, int R, int NK>
__global__ void __launch_bounds__(kThreads)
attn_fwd_kernel(float *out, float *lse, const float *q, const float *k, const float *v,
                const int64_t *offs, int64_t nh, int64_t nkv, int hd, float scale, int w,
                float cap)
{
    using C = fwd_cfg<HD, R, NK>;
    constexpr int BR = C::BR, BC = C::BC, LD = C::LD;
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4), *Ks = Qs + BR * LD, *Vs = Ks + BC * LD;
    float *Ps = Vs + BC * LD; /* [BR][BC], R rows per warp */

    const int64_t s = blockIdx.x, h = blockIdx.z, r0 = offs[s];
    const int L = (int)(offs[s + 1] - r0);
    /* the last (longest) tiles first; tiles past this sequence's end leave at once */
    const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * BR;
    if (q0 >= L)
        return;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, hd4 = (hd + 3) & ~3;
    const int64_t ldq = nh * hd, ldk = nkv * hd, kvh = h / (nh / nkv);
    const float *Qw = Qs + warp * R * LD;
    float *Pw = Ps + warp * R * BC;

    load_tile<HD>(Qs, BR, q + (r0 + q0) * ldq + h * hd, ldq, min(BR, L - q0), hd);
    float o[R][HD / 32], m[R], l[R]; /* l: this lane's share of the row sum */
#pragma unroll
    for (int r = 0; r < R; r++) {
        m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < HD / 32; c++)
            o[r][c] = 0.0f;
    }
    const int kend = min(q0 + BR, L); /* causal: no key after the tile's last row */
    for (int k0 = first_key_tile(q0, w, BC); k0 < kend; k0 += BC) {
        __syncthreads(); /* the previous tile's K / V reads are done */
        const int nk = min(BC, L - k0);
        load_tile<HD>(Ks, BC, k + (r0 + k0) * ldk + kvh * hd, ldk, nk, hd);
        load_tile<HD>(Vs, BC, v + (r0 + k0) * ldk + kvh * hd, ldk, nk, hd);
        __syncthreads();
        float sc[R][NK];
        warp_dots<HD, R, NK>(sc, Qw, Ks, lane, hd4);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int qi = q0 + warp * R + r;
            float mt = -INFINITY;
#pragma unroll
            for (int t = 0; t < NK; t++) {
                const int kj = k0 + lane + 32 * t;
                float dcap;
                sc[r][t] = visible(kj, qi, w) && kj < L ? df_soft_cap(sc[r][t] * scale, cap, &dcap)
                                                        : -INFINITY;
                mt = fmaxf(mt, sc[r][t]);
            }
            const float mn = fmaxf(m[r], df_warp_max(mt));
            /* a row with no key yet (only rows past the end) keeps 0s, not NaN; a tile whose
             * keys are all masked for the row gives alpha = exp(0) = 1 and p = 0 exactly */
            const float base = mn == -INFINITY ? 0.0f : mn;
            const float alpha = expf(m[r] - base);
            m[r] = mn;
            l[r] *= alpha;
#pragma unroll
            for (int t = 0; t < NK; t++) {
                const float p = expf(sc[r][t] - base);
                l[r] += p;
                Pw[r * BC + lane + 32 * t] = p;
            }
#pragma unroll
            for (int c = 0; c < HD / 32; c++)
                o[r][c] *= alpha;
        }
        __syncwarp();
        warp_accum<HD, R, BC>(o, Pw, Vs, lane);
        __syncwarp(); /* Pw is rewritten next tile */
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float lt = df_warp_sum(l[r]);
        const int qi = q0 + warp * R + r;
        if (qi < L) {
            const float inv = 1.0f / lt;
            float *orow = out + (r0 + qi) * ldq + h * hd;
#pragma unroll
            for (int c = 0; c < HD / 32; c++)
                if (lane + 32 * c < hd)
                    orow[lane + 32 * c] = o[r][c] * inv;
            if (lane == 0)
                lse[(r0 + qi) * nh + h] = m[r] + logf(lt);
        }
    }
}

/* ---- backward dK, dV: grid (sequence, key tile, kv head) --------------------------------- */

template <int HD, int R, int NQ>
struct dkdv_cfg {
    static constexpr int BC = kWarps * R, BR = 32 * NQ, LD = HD + 4;
    static constexpr size_t smem =
        sizeof(float) * (size_t)(2 * BC * LD + 2 * BR * LD + 2 * BC * BR + 2 * BR);
};

/* A warp owns R key rows j; lanes take query rows i. With P^T = exp(S^T - lse) and
 * dS^T = P^T (dP^T - D) scale: dV_j += sum_i P_ij dO_i, dK_j += sum_i dS_ij Q_i. */
/* minimum 1 block per SM: two accumulator sets; without it ptxas caps HD 256 at 128 registers
 * and spills */
template <int HD, int R, int NQ>
__global__ void __launch_bounds__(kThreads, 1)
attn_bwd_dkdv_kernel(float *dk, float *dv, const float *dout, const float *out,
                     const float *lse, const float *q, const float *k, const float *v,
                     const int64_t *offs, int64_t nh, int64_t nkv, int hd, float scale, int w,
                     float cap)
{
    using C = dkdv_cfg<HD, R, NQ>;
    constexpr int BR = C::BR, BC = C::BC, LD = C::LD;
    extern __shared__ float4 smem4[];
    float *Ks = reinterpret_cast<float *>(smem4), *Vs = Ks + BC * LD, *Qs = Vs + BC * LD;
    float *dOs = Qs + BR * LD, *Ps = dOs + BR * LD, *dSs = Ps + BC * BR, *Ds = dSs + BC * BR;
    float *Ls = Ds + BR;

    const int64_t s = blockIdx.x, kvh = blockIdx.z, r0 = offs[s];
    const int L = (int)(offs[s + 1] - r0);
    const int k0 = (int)(gridDim.y - 1 - blockIdx.y) * BC;
    if (k0 >= L)
        return;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, hd4 = (hd + 3) & ~3;
    const int64_t ldq = nh * hd, ldk = nkv * hd, grp = nh / nkv;
    const float *Kw = Ks + warp * R * LD, *Vw = Vs + warp * R * LD;
    float *Pw = Ps + warp * R * BR, *dSw = dSs + warp * R * BR;

    const int nk = min(BC, L - k0);
    /* rows past the tile's last key's window see none of it */
    const int qend = w > 0 ? min(L, k0 + nk - 1 + w) : L;
    load_tile<HD>(Ks, BC, k + (r0 + k0) * ldk + kvh * hd, ldk, nk, hd);
    load_tile<HD>(Vs, BC, v + (r0 + k0) * ldk + kvh * hd, ldk, nk, hd);
    float dka[R][HD / 32], dva[R][HD / 32];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < HD / 32; c++)
            dka[r][c] = dva[r][c] = 0.0f;

    for (int64_t h = kvh * grp; h < (kvh + 1) * grp; h++)
        for (int q0 = k0; q0 < qend; q0 += BR) { /* causal: rows before k0 see none of these keys */
            __syncthreads(); /* the previous tile's Q / dO / P reads are done */
            const int nq = min(BR, L - q0);
            load_tile<HD>(Qs, BR, q + (r0 + q0) * ldq + h * hd, ldq, nq, hd);
            load_tile<HD>(dOs, BR, dout + (r0 + q0) * ldq + h * hd, ldq, nq, hd);
            load_rowstats(Ds, Ls, BR, dout, out, lse, r0 + q0, nq, ldq, nh, h, hd);
            __syncthreads();
            float st[R][NQ], dpt[R][NQ];
            warp_dots<HD, R, NQ>(st, Kw, Qs, lane, hd4);
            warp_dots<HD, R, NQ>(dpt, Vw, dOs, lane, hd4);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int kj = k0 + warp * R + r;
#pragma unroll
                for (int t = 0; t < NQ; t++) {
                    const int i = lane + 32 * t, qi = q0 + i;
                    const bool ok = visible(kj, qi, w) && qi < L;
                    float dcap = 0.0f;
                    const float p =
                        ok ? expf(df_soft_cap(st[r][t] * scale, cap, &dcap) - Ls[i]) : 0.0f;
                    Pw[r * BR + i] = p;
                    dSw[r * BR + i] = ok ? p * (dpt[r][t] - Ds[i]) * dcap * scale : 0.0f;
                }
            }
            __syncwarp();
            warp_accum<HD, R, BR>(dva, Pw, dOs, lane);
            warp_accum<HD, R, BR>(dka, dSw, Qs, lane);
        }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int kj = k0 + warp * R + r;
        if (kj < L) {
            float *dkr = dk + (r0 + kj) * ldk + kvh * hd, *dvr = dv + (r0 + kj) * ldk + kvh * hd;
#pragma unroll
            for (int c = 0; c < HD / 32; c++)
                if (lane + 32 * c < hd) {
                    dkr[lane + 32 * c] = dka[r][c];
                    dvr[lane + 32 * c] = dva[r][c];
                }
        }
    }
}

/* ---- backward dQ: grid (sequence, query tile, head) --------------------------------------- */

template <int HD, int R, int NK>
struct dq_cfg {
    static constexpr int BR = kWarps * R, BC = 32 * NK, LD = HD + 4;
    static constexpr size_t smem =
        sizeof(float) * (size_t)(2 * BR * LD + 2 * BC * LD + BR * BC + 2 * BR);
};

/* A warp owns R query rows; lanes take keys. dQ_i = sum_j dS_ij K_j. */
template <int HD, int R, int NK>
__global__ void __launch_bounds__(kThreads)
attn_bwd_dq_kernel(float *dq, const float *dout, const float *out, const float *lse,
                   const float *q, const float *k, const float *v, const int64_t *offs,
                   int64_t nh, int64_t nkv, int hd, float scale, int w, float cap)
{
    using C = dq_cfg<HD, R, NK>;
    constexpr int BR = C::BR, BC = C::BC, LD = C::LD;
    extern __shared__ float4 smem4[];
    float *Qs = reinterpret_cast<float *>(smem4), *dOs = Qs + BR * LD, *Ks = dOs + BR * LD;
    float *Vs = Ks + BC * LD, *dSs = Vs + BC * LD, *Ds = dSs + BR * BC, *Ls = Ds + BR;

    const int64_t s = blockIdx.x, h = blockIdx.z, r0 = offs[s];
    const int L = (int)(offs[s + 1] - r0);
    const int q0 = (int)(gridDim.y - 1 - blockIdx.y) * BR;
    if (q0 >= L)
        return;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, hd4 = (hd + 3) & ~3;
    const int64_t ldq = nh * hd, ldk = nkv * hd, kvh = h / (nh / nkv);
    const float *Qw = Qs + warp * R * LD, *dOw = dOs + warp * R * LD;
    float *dSw = dSs + warp * R * BC;

    const int nq = min(BR, L - q0);
    load_tile<HD>(Qs, BR, q + (r0 + q0) * ldq + h * hd, ldq, nq, hd);
    load_tile<HD>(dOs, BR, dout + (r0 + q0) * ldq + h * hd, ldq, nq, hd);
    load_rowstats(Ds, Ls, BR, dout, out, lse, r0 + q0, nq, ldq, nh, h, hd);
    float dqa[R][HD / 32];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int c = 0; c < HD / 32; c++)
            dqa[r][c] = 0.0f;

    const int kend = min(q0 + BR, L);
    for (int k0 = first_key_tile(q0, w, BC); k0 < kend; k0 += BC) {
        __syncthreads(); /* previous K / V reads done (first pass: Q, dO, D, lse visible below) */
        const int nk = min(BC, L - k0);
        load_tile<HD>(Ks, BC, k + (r0 + k0) * ldk + kvh * hd, ldk, nk, hd);
        load_tile<HD>(Vs, BC, v + (r0 + k0) * ldk + kvh * hd, ldk, nk, hd);
        __syncthreads();
        float sc[R][NK], dp[R][NK];
        warp_dots<HD, R, NK>(sc, Qw, Ks, lane, hd4);
        warp_dots<HD, R, NK>(dp, dOw, Vs, lane, hd4);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int i = warp * R + r, qi = q0 + i;
#pragma unroll
            for (int t = 0; t < NK; t++) {
                const int kj = k0 + lane + 32 * t;
                const bool ok = visible(kj, qi, w) && qi < L;
                float dcap = 0.0f;
                const float p =
                    ok ? expf(df_soft_cap(sc[r][t] * scale, cap, &dcap) - Ls[i]) : 0.0f;
                dSw[r * BC + lane + 32 * t] = ok ? p * (dp[r][t] - Ds[i]) * dcap * scale : 0.0f;
            }
        }
        __syncwarp();
        warp_accum<HD, R, BC>(dqa, dSw, Ks, lane);
        __syncwarp(); /* dSw is rewritten next tile */
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int qi = q0 + warp * R + r;
        if (qi < L) {
            float *dqr = dq + (r0 + qi) * ldq + h * hd;
#pragma unroll
            for (int c = 0; c < HD / 32; c++)
                if (lane + 32 * c < hd)
                    dqr[lane + 32 * c] = dqa[r][c];
        }
    }
}

/* ---- host side ----------------------------------------------------------------------------- */

int check_sizes(const char *fn, int64_t n_seqs, int64_t T, int64_t max_len, int64_t nh,
                int64_t nkv, int64_t hd, int64_t window, float cap)
{
    if (df_cuda_check_softcap(fn, cap))
        return DF_EINVAL;
    if (n_seqs < 0 || T < 0 || max_len < 0 || nh <= 0 || nkv <= 0 || hd <= 0 || window < 0)
        return df_error(DF_EINVAL,
                        "%s: bad sizes n_seqs=%lld T=%lld max_len=%lld nh=%lld nkv=%lld hd=%lld "
                        "window=%lld",
                        fn, (long long)n_seqs, (long long)T, (long long)max_len, (long long)nh,
                        (long long)nkv, (long long)hd, (long long)window);
    if (hd > 256)
        return df_error(DF_EINVAL, "%s: head_dim %lld > 256", fn, (long long)hd);
    if (nh % nkv != 0)
        return df_error(DF_EINVAL, "%s: nh = %lld is not a multiple of nkv = %lld", fn,
                        (long long)nh, (long long)nkv);
    if (nh > 65535 || n_seqs > INT32_MAX)
        return df_error(DF_EINVAL, "%s: nh = %lld or n_seqs = %lld beyond the grid", fn,
                        (long long)nh, (long long)n_seqs);
    if (T > 0 && n_seqs > 0 && max_len == 0)
        return df_error(DF_EINVAL, "%s: max_len = 0 with T = %lld tokens", fn, (long long)T);
    return DF_OK;
}

/* Opt in to the kernel's dynamic shared memory (> 48 KB for most tiles). */
template <typename K>
int prepare(df_cuda *c, K kernel, size_t smem, const char *fn)
{
    if (smem > c->prop.sharedMemPerBlockOptin)
        return df_error(DF_EUNSUPPORTED, "%s: needs %zu bytes of shared memory, device has %zu", fn,
                        smem, (size_t)c->prop.sharedMemPerBlockOptin);
    DFC_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    return DF_OK;
}

/* Grid (sequence, tile, head) with tiles of `rows` over min(max_len, T) (no sequence is longer). */
int tile_grid(dim3 *grid, int64_t n_seqs, int64_t T, int64_t max_len, int rows, int64_t heads,
              const char *fn)
{
    const int64_t len = max_len < T ? max_len : T, tiles = (len + rows - 1) / rows;
    if (tiles > 65535)
        return df_error(DF_EINVAL, "%s: max_len = %lld is beyond the grid", fn, (long long)max_len);
    *grid = dim3((unsigned)n_seqs, (unsigned)tiles, (unsigned)heads);
    return DF_OK;
}

template <int HD, int R, int NK>
int launch_fwd(df_cuda *c, float *out, float *lse, const float *q, const float *k, const float *v,
               const int64_t *offs, int64_t n_seqs, int64_t T, int64_t max_len, int64_t nh,
               int64_t nkv, int hd, float scale, int w, float cap)
{
    using C = fwd_cfg<HD, R, NK>;
    auto kern = attn_fwd_kernel<HD, R, NK>;
    dim3 grid;
    int rc = tile_grid(&grid, n_seqs, T, max_len, C::BR, nh, "df_cuda_attention_fwd");
    if (!rc)
        rc = prepare(c, kern, C::smem, "df_cuda_attention_fwd");
    if (rc)
        return rc;
    kern<<<grid, kThreads, C::smem, c->stream>>>(out, lse, q, k, v, offs, nh, nkv, hd, scale, w,
                                                 cap);
    DFC_LAUNCHED();
    return DF_OK;
}

template <int HD, int R1, int NQ, int R2, int NK>
int launch_bwd(df_cuda *c, float *dq, float *dk, float *dv, const float *dout, const float *out,
               const float *lse, const float *q, const float *k, const float *v,
               const int64_t *offs, int64_t n_seqs, int64_t T, int64_t max_len, int64_t nh,
               int64_t nkv, int hd, float scale, int w, float cap)
{
    using C1 = dkdv_cfg<HD, R1, NQ>;
    using C2 = dq_cfg<HD, R2, NK>;
    auto k1 = attn_bwd_dkdv_kernel<HD, R1, NQ>;
    auto k2 = attn_bwd_dq_kernel<HD, R2, NK>;
    dim3 g1, g2;
    int rc = tile_grid(&g1, n_seqs, T, max_len, C1::BC, nkv, "df_cuda_attention_bwd");
    if (!rc)
        rc = tile_grid(&g2, n_seqs, T, max_len, C2::BR, nh, "df_cuda_attention_bwd");
    if (!rc)
        rc = prepare(c, k1, C1::smem, "df_cuda_attention_bwd");
    if (!rc)
        rc = prepare(c, k2, C2::smem, "df_cuda_attention_bwd");
    if (rc)
        return rc;
    k1<<<g1, kThreads, C1::smem, c->stream>>>(dk, dv, dout, out, lse, q, k, v, offs, nh, nkv,
                                               hd, scale, w, cap);
    DFC_LAUNCHED();
    k2<<<g2, kThreads, C2::smem, c->stream>>>(dq, dout, out, lse, q, k, v, offs, nh, nkv, hd,
                                               scale, w, cap);
    DFC_LAUNCHED();
    return DF_OK;
}

/* The CPU's scale, bit for bit: 1.0f / sqrtf((float)hd), both correctly rounded. */
float attn_scale(int64_t hd) { return 1.0f / sqrtf((float)hd); }

/* The kernels' window: 0 when none or when it covers every sequence (no row of at most max_len
 * positions has a key W or more behind it), so the int never overflows. */
int kernel_window(int64_t window, int64_t max_len)
{
    return window > 0 && window < max_len ? (int)window : 0;
}

} // namespace

/*
 * Tiles per head-dim bucket (shared memory, fwd / dkdv / dq): the registers of a warp's
 * accumulators are R * HD / 32 per lane (twice in dK / dV), kept near 64 for HD = 256.
 *   HD  64: fwd Br 64 Bc 64 (69 KB), dkdv Bc 64 Br 64 (103 KB), dq Br 64 Bc 64 (87 KB)
 *   HD 128: fwd Br 64 Bc 32 (76 KB), dkdv Bc 32 Br 32 (76 KB),  dq Br 64 Bc 32 (110 KB)
 *   HD 256: fwd Br 32 Bc 32 (104 KB), dkdv Bc 32 Br 32 (142 KB), dq Br 32 Bc 32 (138 KB)
 */
int df_cuda_attention_fwd(df_cuda *c, float *d_out, float *d_lse, const float *d_q,
                          const float *d_k, const float *d_v, const int64_t *d_seq_offsets,
                          int64_t n_seqs, int64_t T, int64_t max_len, int64_t nh, int64_t nkv,
                          int64_t hd, int64_t window, float softcap)
{
    int rc = check_sizes("df_cuda_attention_fwd", n_seqs, T, max_len, nh, nkv, hd, window, softcap);
    if (rc)
        return rc;
    if (n_seqs == 0 || T == 0)
        return DF_OK;
    const float sc = attn_scale(hd);
    const int h = (int)hd, w = kernel_window(window, max_len);
    if (hd <= 64)
        return launch_fwd<64, 8, 2>(c, d_out, d_lse, d_q, d_k, d_v, d_seq_offsets, n_seqs, T,
                                    max_len, nh, nkv, h, sc, w, softcap);
    if (hd <= 128)
        return launch_fwd<128, 8, 1>(c, d_out, d_lse, d_q, d_k, d_v, d_seq_offsets, n_seqs, T,
                                     max_len, nh, nkv, h, sc, w, softcap);
    return launch_fwd<256, 4, 1>(c, d_out, d_lse, d_q, d_k, d_v, d_seq_offsets, n_seqs, T,
                                 max_len, nh, nkv, h, sc, w, softcap);
}

int df_cuda_attention_bwd(df_cuda *c, float *d_dq, float *d_dk, float *d_dv, const float *d_dout,
                          const float *d_out, const float *d_lse, const float *d_q,
                          const float *d_k, const float *d_v, const int64_t *d_seq_offsets,
                          int64_t n_seqs, int64_t T, int64_t max_len, int64_t nh, int64_t nkv,
                          int64_t hd, int64_t window, float softcap)
{
    int rc = check_sizes("df_cuda_attention_bwd", n_seqs, T, max_len, nh, nkv, hd, window, softcap);
    if (rc)
        return rc;
    if (n_seqs == 0 || T == 0)
        return DF_OK;
    const float sc = attn_scale(hd);
    const int h = (int)hd, w = kernel_window(window, max_len);
    if (hd <= 64)
        return launch_bwd<64, 8, 2, 8, 2>(c, d_dq, d_dk, d_dv, d_dout, d_out, d_lse, d_q, d_k,
                                          d_v, d_seq_offsets, n_seqs, T, max_len, nh, nkv, h, sc,
                                          w, softcap);
    if (hd <= 128)
        return launch_bwd<128, 4, 1, 8, 1>(c, d_dq, d_dk, d_dv, d_dout, d_out, d_lse, d_q, d_k,
                                           d_v, d_seq_offsets, n_seqs, T, max_len, nh, nkv, h, sc,
                                           w, softcap);
    return launch_bwd<256, 4, 1, 4, 1>(c, d_dq, d_dk, d_dv, d_dout, d_out, d_lse, d_q, d_k, d_v,
                                       d_seq_offsets, n_seqs, T, max_len, nh, nkv, h, sc, w,
                                       softcap);
}
