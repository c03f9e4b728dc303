/*
 * vocab.cu — LM-head log-probs / entropy and token sampling (cuda_backend.h, "vocabulary").
 * CPU references: df_lmhead_fwd / _bwd (src/model/ops_lmhead.c), df_sample_token
 * (src/engine/sampling.c).
 *
 * LM head. Rows go in blocks of at most kMaxRows, the vocabulary in tiles of Vt columns
 * (lm_cols). cuBLAS writes z_tile = (h W_tile^T) / T into the scratch; one block per row folds
 * the tile into running statistics m = max z, s0 = sum e^(z-m), s1 = sum e^(z-m) (z-m) (and
 * s2 = sum e^(2 (z-m)) for the sum of p^2) with
 * the online-softmax rescale (Milakov & Gimelshein 2018), as ops_vocab.c's fold_tile_row.
 * Terms are float (z - m, expf, as the CPU) but every sum is double: V = 152k float adds would
 * lose up to V u relative, double keeps the sums exact to the float terms' own rounding.
 * The backward recomputes each tile, turns it into dL/dlogits in place and feeds two GEMMs.
 * Mixed precision's head (df_cuda_lmhead_*_w16) is the same with each row block of h rounded
 * to bf16 and the bf16 head: bf16 x bf16 tiles with float32 accumulation, and in the
 * backward the tile's dL/dlogits rounded to bf16 for both GEMMs (df_lmhead_bwd16).
 * Gemma 2's final-logit soft-cap C: as the CPU's tiles, cuBLAS writes y / C, which cap_logits
 * turns into (C / T) tanh(y / C); the backward recomputes tanh and multiplies dL/dlogits by
 * 1 - tanh^2. Sampling caps its raw logits as C tanh(y / C) (the CPU rollout's cap_logits).
 *
 * Sampling. The logits of a row block (rows x V, float, alpha = 1) are materialised and one
 * 1024-thread block per row filters and draws in double, with the formulas of sampling.c:
 * w_v = exp(x_v / T - max), top-k as the k-th largest float key (4 radix passes of 8 bits,
 * exact integer counts), top-p as the float key where the descending mass crosses top_p
 * (8 radix passes of 4 bits; per-thread sums reduced in a fixed order, so the draw is
 * deterministic), ties at that key taken in id order, then the inverse CDF in id order as a
 * chunked block-wide prefix sum. Top-p ranks tokens by float logit, the CPU by double
 * weight: the same order, except that distinct logits within ~2^-28 max(1, |z_max|) of zero,
 * or with underflowing weights, share one weight there; it matters only if the top-p
 * boundary falls among them.
 */
#include "backend/cuda/cuda_internal.h"

#include <limits.h>
#include <math.h>

namespace
{

constexpr int64_t kTileFloats = int64_t(1) << 24; /* logits tile budget: 64 MiB */
constexpr int64_t kMaxRows = 32768;               /* rows per block: grid.y of dlogits_tile stays < 65536 */
constexpr int64_t kAlign = 64;                    /* floats: scratch parts start 256-byte aligned */
constexpr int kRedThreads = 512;
constexpr int kSampleThreads = 1024;
constexpr int kWalkItems = 4; /* consecutive ids per thread in the CDF walk */

int64_t pad(int64_t f)
{
    return (f + kAlign - 1) / kAlign * kAlign;
}
int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* LM head: R rows x Vt columns per tile; R <= 32768 makes Vt >= 512. */
int64_t lm_rows(int64_t n)
{
    return min64(n, kMaxRows);
}
int64_t lm_cols(int64_t R, int64_t V)
{
    return min64(V, kTileFloats / R / 256 * 256);
}
/* s0, s1, s2 [R] double, m, zt [R] float, then the tile: R lm_cols(R, V) <= min(R V, 2^24) floats.
 * The bound, not the tile itself, is what is reserved: R lm_cols(R, V) is not monotone in R
 * (R = 21845 tiles 768 columns, R = 21846 only 512), and a buffer sized once for a largest n
 * (the activations' max_out rows) must hold every call with fewer rows. */
int64_t lm_floats(int64_t n, int64_t V)
{
    const int64_t R = lm_rows(n);
    return pad(8 * R) + min64(R * V, kTileFloats);
}

/* Sampling: u [n] double, then the logits of Rs whole rows. */
int64_t smp_rows(int64_t n, int64_t V)
{
    return min64(n, kTileFloats / V > 1 ? kTileFloats / V : 1);
}
int64_t smp_floats(int64_t n, int64_t V)
{
    return pad(2 * n) + smp_rows(n, V) * V;
}

/* ---- block reductions (deterministic: fixed order; a butterfly leaves the same value in
 * every lane since a + b == b + a exactly) ---------------------------------------------- */

struct Sum {
    template <class T> __device__ T operator()(T a, T b) const
    {
        return a + b;
    }
};
struct Max {
    __device__ float operator()(float a, float b) const
    {
        return fmaxf(a, b);
    }
};
struct Min {
    __device__ long long operator()(long long a, long long b) const
    {
        return a < b ? a : b;
    }
};

template <class T, class Op> __device__ T warp_reduce(T v, Op op)
{
    for (int o = 16; o > 0; o >>= 1)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Every thread of the block gets the result; blockDim a multiple of 32. */
template <class T, class Op> __device__ T block_reduce(T v, Op op, T identity)
{
    __shared__ T part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_reduce(v, op);
    __syncthreads(); /* the previous call's readers are done with part */
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    return warp_reduce(lane < nw ? part[lane] : identity, op);
}

/* Sum over the threads before this one (in thread order); *total = the block's sum. */
template <class T> __device__ T block_exclusive_scan(T v, T *total)
{
    __shared__ T part[32];
    const unsigned full = 0xffffffffu;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    T inc = v;
    for (int o = 1; o < 32; o <<= 1) {
        T y = __shfl_up_sync(full, inc, o);
        if (lane >= o)
            inc += y;
    }
    __syncthreads();
    if (lane == 31)
        part[warp] = inc;
    __syncthreads();
    T winc = lane < nw ? part[lane] : T(0);
    for (int o = 1; o < 32; o <<= 1) {
        T y = __shfl_up_sync(full, winc, o);
        if (lane >= o)
            winc += y;
    }
    *total = __shfl_sync(full, winc, 31);
    T before_warp = __shfl_sync(full, winc, (warp + 31) & 31); /* inclusive sum of warp - 1 */
    T before_lane = __shfl_up_sync(full, inc, 1);
    return (warp ? before_warp : T(0)) + (lane ? before_lane : T(0));
}

/* ---- LM head ----------------------------------------------------------------------- */

__global__ void stats_init(double *s0, double *s1, double *s2, float *m, float *zt, int64_t R)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < R;
         i += (int64_t)gridDim.x * blockDim.x) {
        s0[i] = 0.0, s1[i] = 0.0, s2[i] = 0.0, m[i] = -INFINITY;
        zt[i] = NAN; /* stays NaN (logp NaN) if target[i] is outside [0, V) */
    }
}

/* Block i folds tile row i (nv columns from v0) into its running statistics. */
template <bool ENT, bool SQ>
__global__ void __launch_bounds__(kRedThreads)
    fold_tile(const float *tile, int64_t nv, int64_t v0, const int32_t *target, double *s0, double *s1,
              double *s2, float *m, float *zt)
{
    const int64_t i = blockIdx.x;
    const float *z = tile + i * nv;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x)
        mx = fmaxf(mx, z[j]);
    /* every thread reads m[i] before the barriers that precede thread 0's write */
    const float mo = m[i], M = fmaxf(mo, block_reduce(mx, Max(), -INFINITY));
    double a0 = 0.0, a1 = 0.0, a2 = 0.0;
    if (M > -INFINITY) /* else every z is -inf: no mass, and z - M would be NaN */
        for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
            const float d = z[j] - M, e = expf(d);
            a0 += e;
            if (ENT)
                a1 += (double)e * d;
            if (SQ)
                a2 += (double)e * e;
        }
    a0 = block_reduce(a0, Sum(), 0.0);
    if (ENT)
        a1 = block_reduce(a1, Sum(), 0.0);
    if (SQ)
        a2 = block_reduce(a2, Sum(), 0.0);
    if (threadIdx.x == 0) {
        double S0 = s0[i], S1 = s1[i], S2 = SQ ? s2[i] : 0.0;
        if (M > mo && S0 > 0.0) { /* z - M = (z - mo) + dm */
            const double dm = (double)mo - (double)M, a = exp(dm);
            S1 = a * (S1 + dm * S0);
            S0 *= a;
            S2 *= a * a;
        }
        s0[i] = S0 + a0, s1[i] = S1 + a1, m[i] = M;
        if (SQ)
            s2[i] = S2 + a2;
        const int64_t t = (int64_t)target[i] - v0;
        if (t >= 0 && t < nv)
            zt[i] = z[t];
    }
}

/* The formulas of df_lmhead_fwd_tiled, in double. */
__global__ void stats_finish(float *logp, float *entropy, float *sum_pi_sq, float *lse, const double *s0,
                             const double *s1, const double *s2, const float *m, const float *zt, int64_t R)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < R;
         i += (int64_t)gridDim.x * blockDim.x) {
        const double ls = log(s0[i]), l = (double)m[i] + ls;
        lse[i] = (float)l;
        logp[i] = (float)((double)zt[i] - l);
        if (entropy)
            entropy[i] = (float)(ls - s1[i] / s0[i]);
        if (sum_pi_sq)
            sum_pi_sq[i] = (float)(s2[i] / (s0[i] * s0[i]));
    }
}

/* x[i] = tanh(x[i] / div) mul: Gemma 2's final-logit cap on n logits (a tile of y / C: div 1,
 * mul C / T; raw logits: div = mul = C). */
__global__ void cap_logits(float *x, int64_t n, float div, float mul)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = tanhf(x[i] / div) * mul;
}

/* In place, tile row blockIdx.y: z -> dz / T (ops_lmhead.c dlogits_row). cap_a = C / T > 0: the
 * tile holds y / C, z = tanh(y / C) cap_a, and dz / T gains the factor 1 - tanh^2 (0: no cap). */
__global__ void dlogits_tile(float *tile, int64_t nv, int64_t v0, const float *dlogp, const float *dentropy,
                             const float *lse, const float *entropy, const int32_t *target, float inv_t,
                             float cap_a)
{
    const int64_t i = blockIdx.y;
    const float gl = dlogp ? dlogp[i] * inv_t : 0.0f;
    const float ge = dentropy ? dentropy[i] * inv_t : 0.0f;
    const float ent = ge != 0.0f ? entropy[i] : 0.0f, l = lse[i];
    const int64_t t = (int64_t)target[i] - v0;
    float *z = tile + i * nv;
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < nv;
         j += (int64_t)gridDim.x * blockDim.x) {
        const float th = cap_a > 0.0f ? tanhf(z[j]) : 0.0f;
        const float lp = (cap_a > 0.0f ? th * cap_a : z[j]) - l, p = expf(lp);
        float g = ge != 0.0f ? -gl * p - ge * p * (lp + ent) : -gl * p;
        if (j == t)
            g += gl;
        z[j] = cap_a > 0.0f ? g * (1.0f - th * th) : g;
    }
}

int lm_check(const char *fn, int64_t n, int64_t V, int64_t H, float temperature, float softcap,
             const void *scratch)
{
    if (df_cuda_check_softcap(fn, softcap))
        return DF_EINVAL;
    if (n < 0 || V <= 0 || V > INT32_MAX || H <= 0)
        return df_error(DF_EINVAL, "%s: n = %lld, V = %lld, H = %lld (need n >= 0, 0 < V <= 2^31 - 1, H > 0)",
                        fn, (long long)n, (long long)V, (long long)H);
    if (!(temperature > 0.0f) || !isfinite(temperature))
        return df_error(DF_EINVAL, "%s: temperature must be finite and > 0 (got %g)", fn,
                        (double)temperature);
    if (n > 0 && (!scratch || (uintptr_t)scratch % 8))
        return df_error(DF_EINVAL, "%s: scratch must be device memory, 8-byte aligned", fn);
    return DF_OK;
}

/* Per-row statistics of the scratch (lm_floats layout). */
struct LmStats {
    double *s0, *s1, *s2;
    float *m, *zt, *tile;
};

LmStats lm_stats(float *scratch, int64_t R)
{
    LmStats s;
    s.s0 = (double *)(void *)scratch;
    s.s1 = s.s0 + R;
    s.s2 = s.s1 + R;
    s.m = (float *)(void *)(s.s2 + R);
    s.zt = s.m + R;
    s.tile = scratch + pad(8 * R);
    return s;
}

/* A row block's head operands: float32 h and W, or (mixed precision) the block's rows rounded
 * to bf16 and the bf16 head. */
struct LmOps {
    const void *h, *W;
    df_cuda_dtype dt;
};

/* tile [nr, nv] = (h W[v0 : v0 + nv]^T) * inv_t, or with a cap C > 0 (h W^T) / C (ops_vocab.c
 * tile_alpha: cap_logits or dlogits_tile finish it) */
int lm_tile(df_cuda *c, const LmOps &o, int64_t nr, int64_t v0, int64_t nv, int64_t H, float inv_t,
            float cap, float *tile)
{
    const size_t es = o.dt == DF_CUDA_BF16 ? sizeof(uint16_t) : sizeof(float);
    const float alpha = cap > 0.0f ? 1.0f / cap : inv_t;
    return df_cuda_gemm(c, false, true, nr, nv, H, alpha, o.h, (const char *)o.W + (size_t)(v0 * H) * es,
                        o.dt, 0.0f, tile);
}

/* One tile's fold, with the statistics the outputs need (four instantiations). */
void lm_fold(df_cuda *c, bool ent, bool sq, const float *tile, int64_t nr, int64_t nv, int64_t v0,
             const int32_t *target, const LmStats &s)
{
    auto *k = ent ? (sq ? fold_tile<true, true> : fold_tile<true, false>)
                  : (sq ? fold_tile<false, true> : fold_tile<false, false>);
    k<<<(unsigned)nr, kRedThreads, 0, c->stream>>>(tile, nv, v0, target, s.s0, s.s1, s.s2, s.m, s.zt);
}

/* Rows [r0, r0 + nr) of the forward. */
int lm_fwd_rows(df_cuda *c, float *logp, float *entropy, float *sum_pi_sq, float *lse, const LmOps &o,
                const int32_t *target, int64_t nr, int64_t V, int64_t H, float inv_t, float cap,
                int64_t Vt, const LmStats &s)
{
    stats_init<<<df_cuda_blocks(nr, 256), 256, 0, c->stream>>>(s.s0, s.s1, s.s2, s.m, s.zt, nr);
    DFC_LAUNCHED();
    for (int64_t v0 = 0; v0 < V; v0 += Vt) {
        const int64_t nv = min64(Vt, V - v0);
        int rc = lm_tile(c, o, nr, v0, nv, H, inv_t, cap, s.tile);
        if (rc)
            return rc;
        if (cap > 0.0f) {
            cap_logits<<<df_cuda_blocks(nr * nv, 256), 256, 0, c->stream>>>(s.tile, nr * nv, 1.0f,
                                                                             cap * inv_t);
            DFC_LAUNCHED();
        }
        lm_fold(c, entropy != nullptr, sum_pi_sq != nullptr, s.tile, nr, nv, v0, target, s);
        DFC_LAUNCHED();
    }
    stats_finish<<<df_cuda_blocks(nr, 256), 256, 0, c->stream>>>(logp, entropy, sum_pi_sq, lse, s.s0, s.s1,
                                                                 s.s2, s.m, s.zt, nr);
    DFC_LAUNCHED();
    return DF_OK;
}

/* ---- sampling ------------------------------------------------------------------------ */

/* Order key of a float (a < b <=> key(a) < key(b)); -0 and +0 share one key. */
__device__ __forceinline__ uint32_t fkey(float x)
{
    const uint32_t b = __float_as_uint(x == 0.0f ? 0.0f : x);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float key_float(uint32_t k)
{
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/* sampling.c's weight e^(z - zmax), z = x / T in double */
__device__ __forceinline__ double weight(float x, double inv_t, double zmax)
{
    return exp((double)x * inv_t - zmax);
}

/* Token v is kept iff key >= kmin (top-k) and (key > ktau, or key == ktau and v <= vcut)
 * (top-p); {0, 0, V} keeps all. */
struct Keep {
    uint32_t kmin, ktau;
    int64_t vcut;
};

__device__ __forceinline__ bool kept(const Keep &k, uint32_t key, int64_t v)
{
    return key >= k.kmin && (key > k.ktau || (key == k.ktau && v <= k.vcut));
}

/* sum of the kept weights */
__device__ double kept_mass(const float *x, int64_t V, const Keep &k, double inv_t, double zmax)
{
    double s = 0.0;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
        if (kept(k, fkey(x[v]), v))
            s += weight(x[v], inv_t, zmax);
    return block_reduce(s, Sum(), 0.0);
}

/* Lowest v with x[v] == xmax (0 if none: all NaN). */
__device__ int64_t argmax_lowest(const float *x, int64_t V, float xmax)
{
    long long j = LLONG_MAX;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
        if (x[v] == xmax) {
            j = v;
            break;
        }
    j = block_reduce(j, Min(), (long long)LLONG_MAX);
    return j == LLONG_MAX ? 0 : j;
}

/* Key of the k-th largest x (1 <= k <= V, ties counted): radix select, 8 bits a pass. */
__device__ uint32_t kth_key(const float *x, int64_t V, int64_t k)
{
    __shared__ unsigned hist[256];
    __shared__ unsigned s_digit;
    __shared__ long long s_above;
    uint32_t prefix = 0, mask = 0;
    long long need = k; /* rank wanted among the keys matching prefix */
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x)
            hist[b] = 0;
        __syncthreads();
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
            const uint32_t key = fkey(x[v]);
            if ((key & mask) == prefix)
                atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            long long above = 0;
            int d = 255;
            for (; d > 0 && above + hist[d] < need; d--)
                above += hist[d];
            s_digit = (unsigned)d, s_above = above;
        }
        __syncthreads();
        prefix |= s_digit << shift;
        mask |= 255u << shift;
        need -= s_above;
    }
    return prefix;
}

/* Id of the t-th token (1-based, id order) with key kt. */
__device__ int64_t nth_tie(const float *x, int64_t V, uint32_t kt, long long t)
{
    long long seen = 0;
    for (int64_t base = 0; base < V; base += blockDim.x) {
        const int64_t v = base + threadIdx.x;
        const int f = v < V && fkey(x[v]) == kt;
        int total;
        const int before = block_exclusive_scan(f, &total);
        long long hit = f && seen + before + 1 == t ? (long long)v : LLONG_MAX;
        hit = block_reduce(hit, Min(), (long long)LLONG_MAX);
        if (hit != LLONG_MAX)
            return hit;
        seen += total;
    }
    return V;
}

/*
 * Top-p among the tokens with key >= k->kmin: the most probable first (ties: lower ids) until
 * their mass reaches need (sampling.c nucleus). Sets k->ktau to the boundary key (the largest
 * K with mass(key > K) < need) and k->vcut to the last tied id taken.
 */
__device__ void nucleus(const float *x, int64_t V, double inv_t, double zmax, double need, Keep *k)
{
    uint32_t prefix = 0, mask = 0;
    double above = 0.0; /* mass of the candidates with a key above the prefix's range */
    for (int shift = 28; shift >= 0; shift -= 4) {
        double acc[16];
#pragma unroll
        for (int b = 0; b < 16; b++)
            acc[b] = 0.0;
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
            const uint32_t key = fkey(x[v]);
            if (key >= k->kmin && (key & mask) == prefix)
                acc[(key >> shift) & 15u] += weight(x[v], inv_t, zmax);
        }
        double bins[16];
#pragma unroll
        for (int b = 0; b < 16; b++)
            bins[b] = block_reduce(acc[b], Sum(), 0.0);
        int d = 15;
        double a = 0.0;
        for (; d >= 0 && above + a + bins[d] < need; d--)
            a += bins[d];
        if (d < 0) { /* rounding left the total short of need: keep the whole range */
            for (d = 0; d < 15 && !(bins[d] > 0.0); d++)
                ;
            a = 0.0;
            for (int b = 15; b > d; b--)
                a += bins[b];
        }
        above += a;
        prefix |= (uint32_t)d << shift;
        mask |= 15u << shift;
    }
    long long cnt = 0;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
        cnt += fkey(x[v]) == prefix;
    cnt = block_reduce(cnt, Sum(), 0LL);
    /* ties at the boundary, in id order, until the mass reaches need */
    const double wt = weight(key_float(prefix), inv_t, zmax);
    long long t = cnt;
    if (wt > 0.0) {
        const double r = ceil((need - above) / wt);
        t = r < 1.0 ? 1 : r < (double)cnt ? (long long)r : cnt;
    }
    k->ktau = prefix;
    k->vcut = t < cnt ? nth_tie(x, V, prefix, t) : V;
}

/* First kept v (id order) whose running kept mass exceeds target; -1 if none. */
__device__ int64_t cdf_walk(const float *x, int64_t V, const Keep &k, double inv_t, double zmax,
                            double target)
{
    double run = 0.0;
    const int64_t chunk = (int64_t)blockDim.x * kWalkItems;
    for (int64_t base = 0; base < V; base += chunk) {
        const int64_t v0 = base + (int64_t)threadIdx.x * kWalkItems;
        double w[kWalkItems], s = 0.0;
#pragma unroll
        for (int l = 0; l < kWalkItems; l++) {
            const int64_t v = v0 + l;
            w[l] = v < V && kept(k, fkey(x[v]), v) ? weight(x[v], inv_t, zmax) : 0.0;
            s += w[l];
        }
        double total;
        double cum = run + block_exclusive_scan(s, &total);
        long long hit = LLONG_MAX;
#pragma unroll
        for (int l = 0; l < kWalkItems; l++)
            if (hit == LLONG_MAX && w[l] > 0.0 && (cum += w[l]) > target)
                hit = v0 + l;
        hit = block_reduce(hit, Min(), (long long)LLONG_MAX);
        if (hit != LLONG_MAX)
            return hit;
        run += total;
    }
    return -1;
}

struct SampleArgs {
    const float *x; /* logits [rows, V], row i of the block */
    const double *u;
    int32_t *tok;
    float *logp;
    int64_t V, top_k;
    double inv_t, top_p;
    bool greedy;
};

/* One block per row: df_sample_token on x[i]. */
__global__ void __launch_bounds__(kSampleThreads) sample_rows(SampleArgs a)
{
    const int64_t i = blockIdx.x, V = a.V;
    const float *x = a.x + i * V;
    float mx = -INFINITY;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
        mx = fmaxf(mx, x[v]);
    const float xmax = block_reduce(mx, Max(), -INFINITY);
    const Keep all = {0u, 0u, V};
    if (a.greedy) { /* logp = log_softmax(x)[tok] = -log sum e^(x - x_tok) */
        const int64_t t = argmax_lowest(x, V, xmax);
        const double s = kept_mass(x, V, all, 1.0, (double)x[t]);
        if (threadIdx.x == 0) {
            a.tok[i] = (int32_t)t;
            if (a.logp)
                a.logp[i] = (float)-log(s);
        }
        return;
    }
    const double zmax = (double)xmax * a.inv_t; /* x -> x / T is monotone */
    double mass = kept_mass(x, V, all, a.inv_t, zmax);
    const double lse = zmax + log(mass);
    Keep k = all;
    if (a.top_k > 0 && a.top_k < V) {
        k.kmin = kth_key(x, V, a.top_k);
        mass = kept_mass(x, V, k, a.inv_t, zmax);
    }
    if (a.top_p < 1.0) { /* on the distribution renormalised after top-k */
        nucleus(x, V, a.inv_t, zmax, a.top_p * mass, &k);
        mass = kept_mass(x, V, k, a.inv_t, zmax);
    }
    int64_t t = cdf_walk(x, V, k, a.inv_t, zmax, a.u[i] * mass);
    if (t < 0) /* rounding left u * mass past the walk's sum: the most probable token */
        t = argmax_lowest(x, V, xmax);
    if (threadIdx.x == 0) {
        a.tok[i] = (int32_t)t;
        if (a.logp)
            a.logp[i] = (float)((double)x[t] * a.inv_t - lse);
    }
}

} /* namespace */

/* ---- API ------------------------------------------------------------------------------- */

/*
 * max(LM head, sampling) floats, at most ~64 MiB plus O(n) for any V <= 16M and n <= 32768,
 * non-decreasing in n (scratch sized for n rows serves every call with fewer):
 *   LM head: pad64(8 R) + min(R V, 2^24) >= pad64(8 R) + R Vt, R = min(n, 32768) rows,
 *   Vt = min(V, floor(2^24 / R / 256) 256);
 *   sampling: pad64(2 n) + Rs V, Rs = min(n, max(1, floor(2^24 / V))) whole rows of logits
 *   (V = 151936: 110 rows, 64 MiB; n = 64: 39 MB).
 */
int64_t df_cuda_vocab_scratch_floats(int64_t n, int64_t V, int64_t H)
{
    (void)H;
    if (n <= 0 || V <= 0)
        return 0;
    const int64_t a = lm_floats(n, V), b = smp_floats(n, V);
    return a > b ? a : b;
}

namespace
{

/* The forward over row blocks; W16 non-NULL: mixed precision (h rounded per block). */
int lm_fwd(df_cuda *c, const char *fn, float *d_logp, float *d_entropy, float *d_sum_pi_sq, float *d_lse,
           const float *d_h, const float *d_W, const uint16_t *d_W16, const int32_t *d_target, int64_t n,
           int64_t V, int64_t H, float temperature, float softcap, float *d_scratch)
{
    int rc = lm_check(fn, n, V, H, temperature, softcap, d_scratch);
    if (rc || n == 0)
        return rc;
    if (!d_logp || !d_lse || !d_h || !(d_W || d_W16) || !d_target)
        return df_error(DF_EINVAL, "%s: NULL logp, lse, h, W or target", fn);
    const float inv_t = 1.0f / temperature; /* float, as df_lmhead_fwd_tiled */
    const int64_t R = lm_rows(n), Vt = lm_cols(R, V);
    const LmStats s = lm_stats(d_scratch, R);
    if (d_W16 && (rc = df_cuda_reserve16(c, &c->a16, &c->a16_n, R * H)))
        return rc;
    for (int64_t r0 = 0; r0 < n; r0 += R) {
        const int64_t nr = min64(R, n - r0);
        LmOps o = {d_h + r0 * H, d_W, DF_CUDA_F32};
        if (d_W16) {
            o = LmOps{c->a16, d_W16, DF_CUDA_BF16};
            if ((rc = df_cuda_f32_to_bf16(c, c->a16, d_h + r0 * H, nr * H)))
                return rc;
        }
        rc = lm_fwd_rows(c, d_logp + r0, d_entropy ? d_entropy + r0 : nullptr,
                         d_sum_pi_sq ? d_sum_pi_sq + r0 : nullptr, d_lse + r0, o, d_target + r0, nr, V, H,
                         inv_t, softcap, Vt, s);
        if (rc)
            return rc;
    }
    return DF_OK;
}

/* dh = sum over tiles of dlogits W_tile (beta 0 first: dh is overwritten), dW_tile +=
 * dlogits^T h: float32, or the tile rounded to bf16 (c->b16) against the bf16 operands. */
int lm_bwd_gemms(df_cuda *c, const LmOps &o, float *tile, int64_t nr, int64_t v0, int64_t nv, int64_t H,
                 float *dh, float *dW)
{
    const bool w16 = o.dt == DF_CUDA_BF16;
    const void *g = tile;
    const void *Wt = (const char *)o.W + (size_t)(v0 * H) * (w16 ? sizeof(uint16_t) : sizeof(float));
    int rc = DF_OK;
    if (w16 && !(rc = df_cuda_reserve16(c, &c->b16, &c->b16_n, nr * nv)))
        rc = df_cuda_f32_to_bf16(c, c->b16, tile, nr * nv);
    if (w16)
        g = c->b16;
    if (!rc)
        rc = df_cuda_gemm(c, false, false, nr, H, nv, 1.0f, g, Wt, o.dt, v0 == 0 ? 0.0f : 1.0f, dh);
    if (!rc && dW) /* NULL: a frozen head (LoRA) */
        rc = df_cuda_gemm(c, true, false, nv, H, nr, 1.0f, g, o.h, o.dt, 1.0f, dW + v0 * H);
    return rc;
}

int lm_bwd(df_cuda *c, const char *fn, float *d_dh, float *d_dW, const float *d_dlogp, const float *d_dentropy,
           const float *d_h, const float *d_W, const uint16_t *d_W16, const int32_t *d_target,
           const float *d_lse, const float *d_entropy, int64_t n, int64_t V, int64_t H, float temperature,
           float softcap, float *d_scratch)
{
    int rc = lm_check(fn, n, V, H, temperature, softcap, d_scratch);
    if (rc || n == 0)
        return rc;
    if (!d_dh || !d_h || !(d_W || d_W16) || !d_target || !d_lse || (d_dentropy && !d_entropy))
        return df_error(DF_EINVAL, "%s: NULL dh, h, W, target, lse, or entropy with dentropy given",
                        fn);
    const float inv_t = 1.0f / temperature;
    const int64_t R = lm_rows(n), Vt = lm_cols(R, V);
    float *tile = lm_stats(d_scratch, R).tile;
    if (d_W16 && (rc = df_cuda_reserve16(c, &c->a16, &c->a16_n, R * H)))
        return rc;
    for (int64_t r0 = 0; r0 < n; r0 += R) {
        const int64_t nr = min64(R, n - r0);
        LmOps o = {d_h + r0 * H, d_W, DF_CUDA_F32};
        if (d_W16) {
            o = LmOps{c->a16, d_W16, DF_CUDA_BF16};
            if ((rc = df_cuda_f32_to_bf16(c, c->a16, d_h + r0 * H, nr * H)))
                return rc;
        }
        for (int64_t v0 = 0; v0 < V; v0 += Vt) {
            const int64_t nv = min64(Vt, V - v0);
            if ((rc = lm_tile(c, o, nr, v0, nv, H, inv_t, softcap, tile)))
                return rc;
            const dim3 grid((unsigned)min64((nv + 255) / 256, 4096), (unsigned)nr);
            dlogits_tile<<<grid, 256, 0, c->stream>>>(
                tile, nv, v0, d_dlogp ? d_dlogp + r0 : nullptr, d_dentropy ? d_dentropy + r0 : nullptr,
                d_lse + r0, d_entropy ? d_entropy + r0 : nullptr, d_target + r0, inv_t, softcap * inv_t);
            DFC_LAUNCHED();
            if ((rc = lm_bwd_gemms(c, o, tile, nr, v0, nv, H, d_dh + r0 * H, d_dW)))
                return rc;
        }
    }
    return DF_OK;
}

} /* namespace */

int df_cuda_lmhead_fwd(df_cuda *c, float *d_logp, float *d_entropy, float *d_sum_pi_sq, float *d_lse,
                       const float *d_h, const float *d_W, const int32_t *d_target, int64_t n, int64_t V,
                       int64_t H, float temperature, float softcap, float *d_scratch)
{
    return lm_fwd(c, "df_cuda_lmhead_fwd", d_logp, d_entropy, d_sum_pi_sq, d_lse, d_h, d_W, nullptr, d_target,
                  n, V, H, temperature, softcap, d_scratch);
}

int df_cuda_lmhead_bwd(df_cuda *c, float *d_dh, float *d_dW, const float *d_dlogp, const float *d_dentropy,
                       const float *d_h, const float *d_W, const int32_t *d_target, const float *d_lse,
                       const float *d_entropy, int64_t n, int64_t V, int64_t H, float temperature,
                       float softcap, float *d_scratch)
{
    return lm_bwd(c, "df_cuda_lmhead_bwd", d_dh, d_dW, d_dlogp, d_dentropy, d_h, d_W, nullptr, d_target,
                  d_lse, d_entropy, n, V, H, temperature, softcap, d_scratch);
}

int df_cuda_lmhead_fwd_w16(df_cuda *c, float *d_logp, float *d_entropy, float *d_sum_pi_sq, float *d_lse,
                           const float *d_h, const uint16_t *d_W16, const int32_t *d_target, int64_t n,
                           int64_t V, int64_t H, float temperature, float softcap, float *d_scratch)
{
    if (n > 0 && !d_W16)
        return df_error(DF_EINVAL, "df_cuda_lmhead_fwd_w16: NULL W16");
    return lm_fwd(c, "df_cuda_lmhead_fwd_w16", d_logp, d_entropy, d_sum_pi_sq, d_lse, d_h, nullptr, d_W16,
                  d_target, n, V, H, temperature, softcap, d_scratch);
}

int df_cuda_lmhead_bwd_w16(df_cuda *c, float *d_dh, float *d_dW, const float *d_dlogp,
                           const float *d_dentropy, const float *d_h, const uint16_t *d_W16,
                           const int32_t *d_target, const float *d_lse, const float *d_entropy, int64_t n,
                           int64_t V, int64_t H, float temperature, float softcap, float *d_scratch)
{
    if (n > 0 && !d_W16)
        return df_error(DF_EINVAL, "df_cuda_lmhead_bwd_w16: NULL W16");
    return lm_bwd(c, "df_cuda_lmhead_bwd_w16", d_dh, d_dW, d_dlogp, d_dentropy, d_h, nullptr, d_W16, d_target,
                  d_lse, d_entropy, n, V, H, temperature, softcap, d_scratch);
}

int df_cuda_sample(df_cuda *c, int32_t *d_tok, float *d_logp, const float *d_h, const float *d_W, int64_t n,
                   int64_t V, int64_t H, float temperature, float softcap, int64_t top_k, float top_p,
                   const double *u, float *d_scratch)
{
    if (n < 0 || V <= 0 || V > INT32_MAX || H <= 0)
        return df_error(
            DF_EINVAL, "df_cuda_sample: n = %lld, V = %lld, H = %lld (need n >= 0, 0 < V <= 2^31 - 1, H > 0)",
            (long long)n, (long long)V, (long long)H);
    if (!(temperature >= 0.0f) || !isfinite(temperature))
        return df_error(DF_EINVAL, "df_cuda_sample: temperature must be finite and >= 0 (got %g)",
                        (double)temperature);
    if (!(top_p > 0.0f && top_p <= 1.0f))
        return df_error(DF_EINVAL, "df_cuda_sample: top_p must be in (0, 1] (got %g)", (double)top_p);
    if (df_cuda_check_softcap("df_cuda_sample", softcap))
        return DF_EINVAL;
    if (n == 0)
        return DF_OK;
    const bool greedy = temperature == 0.0f; /* u unused: may be NULL */
    if (!d_tok || !d_h || !d_W || (!u && !greedy) || !d_scratch || (uintptr_t)d_scratch % 8)
        return df_error(DF_EINVAL, "df_cuda_sample: NULL tok, h, W or u, or scratch not "
                                   "8-byte aligned device memory");
    double *du = (double *)(void *)d_scratch;
    float *logits = d_scratch + pad(2 * n);
    int rc = greedy ? DF_OK : df_cuda_upload(c, du, u, (size_t)n * sizeof(double));
    if (rc)
        return rc;
    const int64_t Rs = smp_rows(n, V);
    for (int64_t r0 = 0; r0 < n; r0 += Rs) {
        const int64_t nr = min64(Rs, n - r0);
        /* raw logits, as df_sample_token reads them; 1 / T is applied in double */
        rc = df_cuda_gemm(c, false, true, nr, V, H, 1.0f, d_h + r0 * H, d_W, DF_CUDA_F32, 0.0f, logits);
        if (rc)
            return rc;
        if (softcap > 0.0f) {
            cap_logits<<<df_cuda_blocks(nr * V, 256), 256, 0, c->stream>>>(logits, nr * V, softcap,
                                                                           softcap);
            DFC_LAUNCHED();
        }
        SampleArgs a;
        a.x = logits, a.u = du + r0, a.tok = d_tok + r0, a.logp = d_logp ? d_logp + r0 : nullptr;
        a.V = V, a.top_k = top_k;
        a.inv_t = greedy ? 1.0 : 1.0 / (double)temperature, a.top_p = (double)top_p;
        a.greedy = greedy;
        sample_rows<<<(unsigned)nr, kSampleThreads, 0, c->stream>>>(a);
        DFC_LAUNCHED();
    }
    return DF_OK;
}
