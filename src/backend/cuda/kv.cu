/*
 * kv.cu — the rollout's KV cache in the seam's contiguous layout (distflow/backend.h
 * df_backend_kv: per layer [slot][max_len][kv_dim], float32 or bfloat16): writing rows,
 * copying a prompt's prefix between slots, and decode attention over it. Device twins of
 * src/model/ops_kv.c (cuda_backend.h, "KV cache in slots").
 *
 * Attention: one block of 128 threads per (row, query head) walks the row's positions in
 * segments of kSeg, each an online softmax over chunks of 32 positions (K / V staged in shared
 * memory, widened to float32 from bf16), giving a partial (max m, sum l, unnormalised o).
 * Partials are merged in segment order by one function. With few rows (a long prompt's last
 * rows, a small decode batch) the segments run as separate blocks (flash-decoding: partials in
 * the scratch, merged by a second kernel); otherwise one block merges them as it goes. The
 * partials and the merge are the same floats in both cases (products and sums written as
 * __fmul_rn / __fadd_rn so no contraction differs), so a row's result never depends on how many
 * other rows share the call: as the CPU's, each row is independent. Gemma 2's soft-cap `cap`
 * (0: none) turns each scaled score s into cap tanh(s / cap) (df_soft_cap).
 */
#include "backend/cuda/cuda_internal.h"

#include <math.h>
#include <stdint.h>

namespace {

constexpr int kThreads = 128; /* columns tid and tid + 128: hd <= 256 */
constexpr int kChunk = 32;    /* positions per step: one per lane of warp 0 */
constexpr int kSeg = 256;     /* positions per segment (a multiple of kChunk) */
constexpr int kMaxHd = 256;
constexpr int64_t kSplitRows = 16; /* rows x heads the scratch holds partials for, at hd 256 */

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(uint16_t x) { return __uint_as_float((uint32_t)x << 16); }

__host__ __device__ constexpr size_t attn_smem(int hd)
{
    /* K, V chunks at stride hd + 1, q, 4 partial dot products and the weights per position,
     * 4 statistics */
    return sizeof(float) * (size_t)(2 * kChunk * (hd + 1) + hd + 5 * kChunk + 4);
}

/* A row's positions: j0 (0 or its window's start) and the count len = pos + 1 - j0. */
__device__ __forceinline__ void row_span(int64_t p, int64_t window, int64_t *j0, int64_t *len)
{
    *j0 = window > 0 && p + 1 > window ? p + 1 - window : 0;
    *len = p + 1 - *j0;
}

/* Running (M, L, O) absorbs a segment's (m, l, o): the one merge of both paths. M = -inf
 * (nothing yet) gives a = 0 and L = l, O = o; m is finite (a segment holds a position). */
__device__ __forceinline__ void merge(float &M, float &L, float &O0, float &O1, float m, float l,
                                      float o0, float o1)
{
    const float Mn = fmaxf(M, m), a = expf(M - Mn), b = expf(m - Mn);
    L = __fadd_rn(__fmul_rn(L, a), __fmul_rn(l, b));
    O0 = __fadd_rn(__fmul_rn(O0, a), __fmul_rn(o0, b));
    O1 = __fadd_rn(__fmul_rn(O1, a), __fmul_rn(o1, b));
    M = Mn;
}

/*
 * Positions [s0, s1) of the row's K / V (rows at stride kvd from K, V: the head's columns):
 * the segment's max m, sum l and unnormalised o (columns tid, tid + 128), the same in every
 * thread. qs: the query in shared memory (visible after the first barrier here).
 */
template <typename T>
__device__ void attend_segment(const T *K, const T *V, int64_t kvd, int64_t s0, int64_t s1,
                               int hd, float scale, float cap, float *sm, float &m_out,
                               float &l_out, float &o0, float &o1)
{
    constexpr int CH = kChunk;
    const int ld = hd + 1, tid = threadIdx.x;
    float *Ks = sm, *Vs = Ks + CH * ld, *qs = Vs + CH * ld;
    float *part = qs + hd, *ps = part + 4 * CH, *stat = ps + CH;
    float m = -INFINITY, l = 0.0f; /* warp 0's */
    o0 = 0.0f, o1 = 0.0f;
    for (int64_t c0 = s0; c0 < s1; c0 += CH) {
        const int nc = (int)min((int64_t)CH, s1 - c0);
        __syncthreads(); /* the previous chunk's reads are done */
        for (int i = tid; i < CH * hd; i += kThreads) {
            const int j = i / hd, d = i % hd;
            float kx = 0.0f, vx = 0.0f; /* zero rows past the end: 0 * row, never 0 * NaN */
            if (j < nc) {
                const int64_t o = (c0 + j) * kvd + d;
                kx = widen(K[o]), vx = widen(V[o]);
            }
            Ks[j * ld + d] = kx;
            Vs[j * ld + d] = vx;
        }
        __syncthreads();
        {
            /* position tid % 32, columns d = w mod 4: four partial dot products */
            const int j = tid % 32, w = tid / 32;
            float acc = 0.0f;
            for (int d = w; d < hd; d += 4)
                acc = fmaf(qs[d], Ks[j * ld + d], acc);
            part[w * CH + j] = acc;
        }
        __syncthreads();
        if (tid < 32) {
            const int j = tid;
            float sj = ((part[j] + part[CH + j]) + (part[2 * CH + j] + part[3 * CH + j])) * scale;
            float dcap;
            sj = j < nc ? df_soft_cap(sj, cap, &dcap) : -INFINITY;
            const float mn = fmaxf(m, df_warp_max(sj)); /* finite: the chunk holds a position */
            const float alpha = expf(m - mn);
            const float p = expf(sj - mn);
            l = __fmaf_rn(l, alpha, df_warp_sum(p));
            m = mn;
            ps[j] = p;
            if (j == 0)
                stat[0] = alpha;
        }
        __syncthreads();
        const float alpha = stat[0];
        if (tid < hd) {
            float a = o0 * alpha;
            for (int j = 0; j < nc; j++)
                a = fmaf(ps[j], Vs[j * ld + tid], a);
            o0 = a;
        }
        if (tid + kThreads < hd) {
            float a = o1 * alpha;
            for (int j = 0; j < nc; j++)
                a = fmaf(ps[j], Vs[j * ld + tid + kThreads], a);
            o1 = a;
        }
    }
    if (tid == 0)
        stat[1] = m, stat[2] = l;
    __syncthreads();
    m_out = stat[1], l_out = stat[2];
}

/*
 * Grid (row, head[, segment]). part == NULL: the block merges the row's segments in order and
 * writes out. part: block z computes segment z alone (if the row has it) into
 * part[((r nh + h) n_seg + z) (hd + 2)] = m, l, o[hd].
 */
template <typename T>
__global__ void __launch_bounds__(kThreads)
kv_attention_kernel(float *out, float *part, int64_t n_seg, const float *q, const T *kc,
                    const T *vc, int64_t layer, int64_t n_slots, int64_t max_len, int64_t kvd,
                    const int32_t *slot, const int32_t *pos, int64_t nh, int64_t nkv, int hd,
                    int64_t window, float scale, float cap)
{
    extern __shared__ float4 smem4[];
    float *sm = reinterpret_cast<float *>(smem4);
    float *qs = sm + 2 * kChunk * (hd + 1);
    const int64_t r = blockIdx.x, h = blockIdx.y, g = h / (nh / nkv);
    const int tid = threadIdx.x;
    int64_t j0, len;
    row_span(pos[r], window, &j0, &len);
    const int64_t segs = (len + kSeg - 1) / kSeg;
    if (part && (int64_t)blockIdx.z >= segs)
        return; /* the whole block: before any barrier */
    const int64_t base = ((layer * n_slots + slot[r]) * max_len + j0) * kvd + g * hd;
    const T *K = kc + base, *V = vc + base;
    for (int d = tid; d < hd; d += kThreads)
        qs[d] = q[(r * nh + h) * hd + d];
    float m, l, o0, o1;
    if (part) {
        const int64_t s0 = (int64_t)blockIdx.z * kSeg;
        attend_segment<T>(K, V, kvd, s0, min(len, s0 + kSeg), hd, scale, cap, sm, m, l, o0, o1);
        float *pp = part + ((r * nh + h) * n_seg + blockIdx.z) * (hd + 2);
        if (tid == 0)
            pp[0] = m, pp[1] = l;
        if (tid < hd)
            pp[2 + tid] = o0;
        if (tid + kThreads < hd)
            pp[2 + tid + kThreads] = o1;
        return;
    }
    float M = -INFINITY, L = 0.0f, O0 = 0.0f, O1 = 0.0f;
    for (int64_t s0 = 0; s0 < len; s0 += kSeg) {
        attend_segment<T>(K, V, kvd, s0, min(len, s0 + kSeg), hd, scale, cap, sm, m, l, o0, o1);
        merge(M, L, O0, O1, m, l, o0, o1);
    }
    float *orow = out + (r * nh + h) * hd;
    if (tid < hd)
        orow[tid] = __fdiv_rn(O0, L);
    if (tid + kThreads < hd)
        orow[tid + kThreads] = __fdiv_rn(O1, L);
}

/* Grid (row, head): the partials of kv_attention_kernel's split, merged in segment order. */
__global__ void __launch_bounds__(kThreads)
kv_merge_kernel(float *out, const float *part, int64_t n_seg, const int32_t *pos, int64_t nh,
                int hd, int64_t window)
{
    const int64_t r = blockIdx.x, h = blockIdx.y;
    const int tid = threadIdx.x;
    int64_t j0, len;
    row_span(pos[r], window, &j0, &len);
    const int64_t segs = (len + kSeg - 1) / kSeg;
    float M = -INFINITY, L = 0.0f, O0 = 0.0f, O1 = 0.0f;
    for (int64_t s = 0; s < segs; s++) {
        const float *pp = part + ((r * nh + h) * n_seg + s) * (hd + 2);
        merge(M, L, O0, O1, pp[0], pp[1], tid < hd ? pp[2 + tid] : 0.0f,
              tid + kThreads < hd ? pp[2 + tid + kThreads] : 0.0f);
    }
    float *orow = out + (r * nh + h) * hd;
    if (tid < hd)
        orow[tid] = __fdiv_rn(O0, L);
    if (tid + kThreads < hd)
        orow[tid + kThreads] = __fdiv_rn(O1, L);
}

/* k, v rows [n, kvd] into (layer, slot[r], pos[r]), rounded as the CPU when T is bf16. */
template <typename T>
__global__ void kv_write_kernel(T *kc, T *vc, int64_t layer, int64_t n_slots, int64_t max_len,
                                int64_t kvd, const float *k, const float *v, const int32_t *slot,
                                const int32_t *pos, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * kvd;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / kvd, d = i % kvd;
        const int64_t o = ((layer * n_slots + slot[r]) * max_len + pos[r]) * kvd + d;
        if constexpr (sizeof(T) == 2) {
            kc[o] = df_cuda_bf16_rne(k[i]);
            vc[o] = df_cuda_bf16_rne(v[i]);
        } else {
            kc[o] = k[i];
            vc[o] = v[i];
        }
    }
}

/* units [0, per_layer) of slot src copied to slot dst in each of n_layers layers, for K and V
 * (U: the widest word that divides every offset and size). */
template <typename U>
__global__ void kv_copy_kernel(U *kc, U *vc, int64_t layer_stride, int64_t src_off,
                               int64_t dst_off, int64_t per_layer, int64_t n_layers)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_layers * per_layer;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t l = i / per_layer, e = i % per_layer;
        kc[l * layer_stride + dst_off + e] = kc[l * layer_stride + src_off + e];
        vc[l * layer_stride + dst_off + e] = vc[l * layer_stride + src_off + e];
    }
}

int64_t elt_bytes(const df_backend_kv *kv) { return kv->dtype == DF_KV_BF16 ? 2 : 4; }

int check_cache(const char *fn, const df_backend_kv *kv)
{
    if (!kv || !kv->k || !kv->v || kv->n_layers <= 0 || kv->n_slots <= 0 || kv->max_len <= 0 ||
        kv->kv_dim <= 0 || (kv->dtype != DF_KV_F32 && kv->dtype != DF_KV_BF16))
        return df_error(DF_EINVAL, "%s: bad cache (layers, slots, max_len, kv_dim or dtype)", fn);
    return DF_OK;
}

int check_layer(const char *fn, const df_backend_kv *kv, int64_t layer, int64_t n)
{
    int rc = check_cache(fn, kv);
    if (rc)
        return rc;
    if (layer < 0 || layer >= kv->n_layers || n < 0)
        return df_error(DF_EINVAL, "%s: layer %lld of %lld, n = %lld rows", fn, (long long)layer,
                        (long long)kv->n_layers, (long long)n);
    return DF_OK;
}

/* Segments of a row of at most max_len positions (a window caps it). */
int64_t max_segments(int64_t max_len, int64_t window)
{
    const int64_t len = window > 0 && window < max_len ? window : max_len;
    return (len + kSeg - 1) / kSeg;
}

template <typename T>
int launch_attention(df_cuda *c, float *out, const float *q, const df_backend_kv *kv,
                     int64_t layer, const int32_t *slot, const int32_t *pos, int64_t n,
                     int64_t nh, int64_t nkv, int64_t hd, int64_t window, float cap,
                     float *scratch)
{
    const char *fn = "kv_attention (CUDA)";
    const size_t smem = attn_smem((int)hd);
    if (smem > c->prop.sharedMemPerBlockOptin)
        return df_error(DF_EUNSUPPORTED, "%s: needs %zu bytes of shared memory, device has %zu",
                        fn, smem, (size_t)c->prop.sharedMemPerBlockOptin);
    auto kern = kv_attention_kernel<T>;
    DFC_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const T *kc = static_cast<const T *>(kv->k), *vc = static_cast<const T *>(kv->v);
    const float sc = 1.0f / sqrtf((float)hd); /* the CPU's scale, bit for bit */
    const int64_t n_seg = max_segments(kv->max_len, window);
    /* split over segments only where blocks would be few, and the scratch holds the partials */
    const bool split = scratch && n_seg >= 2 && n * nh < 2 * (int64_t)c->prop.multiProcessorCount &&
                       n * nh * n_seg * (hd + 2) <= df_cuda_kv_slots_scratch_floats(nh, kv->max_len) &&
                       n_seg <= 65535;
    if (split) {
        kern<<<dim3((unsigned)n, (unsigned)nh, (unsigned)n_seg), kThreads, smem, c->stream>>>(
            out, scratch, n_seg, q, kc, vc, layer, kv->n_slots, kv->max_len, kv->kv_dim, slot, pos,
            nh, nkv, (int)hd, window, sc, cap);
        DFC_LAUNCHED();
        kv_merge_kernel<<<dim3((unsigned)n, (unsigned)nh), kThreads, 0, c->stream>>>(
            out, scratch, n_seg, pos, nh, (int)hd, window);
        DFC_LAUNCHED();
        return DF_OK;
    }
    kern<<<dim3((unsigned)n, (unsigned)nh), kThreads, smem, c->stream>>>(
        out, nullptr, 1, q, kc, vc, layer, kv->n_slots, kv->max_len, kv->kv_dim, slot, pos, nh,
        nkv, (int)hd, window, sc, cap);
    DFC_LAUNCHED();
    return DF_OK;
}

} // namespace

int df_cuda_kv_slots_write(df_cuda *c, const df_backend_kv *kv, int64_t layer, const float *d_k,
                           const float *d_v, const int32_t *d_slot, const int32_t *d_pos,
                           int64_t n)
{
    int rc = check_layer("kv_write (CUDA)", kv, layer, n);
    if (rc || n == 0)
        return rc;
    const unsigned blocks = df_cuda_blocks(n * kv->kv_dim, 256);
    if (kv->dtype == DF_KV_BF16)
        kv_write_kernel<uint16_t><<<blocks, 256, 0, c->stream>>>(
            static_cast<uint16_t *>(kv->k), static_cast<uint16_t *>(kv->v), layer, kv->n_slots,
            kv->max_len, kv->kv_dim, d_k, d_v, d_slot, d_pos, n);
    else
        kv_write_kernel<float><<<blocks, 256, 0, c->stream>>>(
            static_cast<float *>(kv->k), static_cast<float *>(kv->v), layer, kv->n_slots,
            kv->max_len, kv->kv_dim, d_k, d_v, d_slot, d_pos, n);
    DFC_LAUNCHED();
    return DF_OK;
}

int df_cuda_kv_slots_copy(df_cuda *c, const df_backend_kv *kv, int64_t src, int64_t dst,
                          int64_t len)
{
    const char *fn = "kv_copy (CUDA)";
    int rc = check_cache(fn, kv);
    if (rc)
        return rc;
    if (src < 0 || dst < 0 || src >= kv->n_slots || dst >= kv->n_slots || src == dst || len < 0 ||
        len > kv->max_len)
        return df_error(DF_EINVAL, "%s: slots %lld -> %lld of %lld, len %lld of max_len %lld", fn,
                        (long long)src, (long long)dst, (long long)kv->n_slots, (long long)len,
                        (long long)kv->max_len);
    if (len == 0)
        return DF_OK;
    const int64_t slot_bytes = kv->max_len * kv->kv_dim * elt_bytes(kv);
    const int64_t bytes = len * kv->kv_dim * elt_bytes(kv);
    const uintptr_t ptrs = (uintptr_t)kv->k | (uintptr_t)kv->v;
    /* the widest word dividing the slot stride, the length and both bases (cudaMalloc: 256) */
    int64_t w = 16;
    while (w > 2 && (slot_bytes % w || bytes % w || ptrs % (uintptr_t)w))
        w /= 2;
    const int64_t ls = kv->n_slots * slot_bytes / w, so = src * slot_bytes / w,
                  dof = dst * slot_bytes / w, per = bytes / w;
    const unsigned blocks = df_cuda_blocks(kv->n_layers * per, 256);
    if (w == 16)
        kv_copy_kernel<uint4><<<blocks, 256, 0, c->stream>>>(
            static_cast<uint4 *>(kv->k), static_cast<uint4 *>(kv->v), ls, so, dof, per, kv->n_layers);
    else if (w == 8)
        kv_copy_kernel<uint2><<<blocks, 256, 0, c->stream>>>(
            static_cast<uint2 *>(kv->k), static_cast<uint2 *>(kv->v), ls, so, dof, per, kv->n_layers);
    else if (w == 4)
        kv_copy_kernel<uint32_t><<<blocks, 256, 0, c->stream>>>(
            static_cast<uint32_t *>(kv->k), static_cast<uint32_t *>(kv->v), ls, so, dof, per,
            kv->n_layers);
    else
        kv_copy_kernel<uint16_t><<<blocks, 256, 0, c->stream>>>(
            static_cast<uint16_t *>(kv->k), static_cast<uint16_t *>(kv->v), ls, so, dof, per,
            kv->n_layers);
    DFC_LAUNCHED();
    return DF_OK;
}

int64_t df_cuda_kv_slots_scratch_floats(int64_t nh, int64_t max_len)
{
    const int64_t segs = max_segments(max_len, 0);
    return segs >= 2 && nh > 0 ? kSplitRows * nh * segs * (kMaxHd + 2) : 0;
}

int df_cuda_kv_slots_attention(df_cuda *c, float *d_out, const float *d_q, const df_backend_kv *kv,
                               int64_t layer, const int32_t *d_slot, const int32_t *d_pos,
                               int64_t n, int64_t nh, int64_t nkv, int64_t hd, int64_t window,
                               float softcap, float *d_scratch)
{
    const char *fn = "kv_attention (CUDA)";
    int rc = check_layer(fn, kv, layer, n);
    if (rc)
        return rc;
    if (nh <= 0 || nkv <= 0 || hd <= 0 || hd > kMaxHd || nh % nkv || nkv * hd > kv->kv_dim ||
        window < 0)
        return df_error(DF_EINVAL,
                        "%s: nh = %lld, nkv = %lld, hd = %lld (at most %d), window %lld for "
                        "kv_dim %lld",
                        fn, (long long)nh, (long long)nkv, (long long)hd, kMaxHd, (long long)window,
                        (long long)kv->kv_dim);
    if (df_cuda_check_softcap(fn, softcap))
        return DF_EINVAL;
    if (n > INT32_MAX || nh > 65535)
        return df_error(DF_EINVAL, "%s: n = %lld rows or nh = %lld beyond the grid", fn,
                        (long long)n, (long long)nh);
    if (n == 0)
        return DF_OK;
    if (kv->dtype == DF_KV_BF16)
        return launch_attention<uint16_t>(c, d_out, d_q, kv, layer, d_slot, d_pos, n, nh, nkv, hd,
                                          window, softcap, d_scratch);
    return launch_attention<float>(c, d_out, d_q, kv, layer, d_slot, d_pos, n, nh, nkv, hd,
                                   window, softcap, d_scratch);
}
