/* Elementwise and row-wise ops: embedding, RMSNorm, RoPE, SwiGLU (ops.h). */
#include "model/kernels_rename.h" /* first: a kernel TU (util/kernels.h) */

#include "model/ops.h"
#include "model/ops_math.h"

#include <math.h>
#include <string.h>

/* ---- embedding ------------------------------------------------------------ */

void df_embedding_fwd(float *out, const int32_t *ids, const float *table, int64_t T, int64_t H)
{
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++)
        memcpy(out + t * H, table + (int64_t)ids[t] * H, (size_t)H * sizeof(float));
}

void df_embedding_fwd_bf16(float *out, const int32_t *ids, const uint16_t *table16, int64_t T,
                           int64_t H)
{
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++) {
        const uint16_t *r = table16 + (int64_t)ids[t] * H;
        float *o = out + t * H;
        for (int64_t i = 0; i < H; i++) { /* a bf16 is the top half of its float32 */
            const uint32_t bits = (uint32_t)r[i] << 16;
            memcpy(&o[i], &bits, sizeof bits);
        }
    }
}

void df_embedding_bwd(float *dtable, const float *dout, const int32_t *ids, int64_t T, int64_t H)
{
    /* Threads own disjoint column ranges, so repeated ids never race and the
     * summation order (token order) is the same for any thread count. */
    const int64_t blk = 64;
    int64_t nblk = (H + blk - 1) / blk;
#pragma omp parallel for schedule(static)
    for (int64_t cb = 0; cb < nblk; cb++) {
        int64_t c0 = cb * blk, c1 = c0 + blk < H ? c0 + blk : H;
        for (int64_t t = 0; t < T; t++) {
            float *dst = dtable + (int64_t)ids[t] * H;
            const float *src = dout + t * H;
#pragma omp simd
            for (int64_t c = c0; c < c1; c++)
                dst[c] += src[c];
        }
    }
}

/* ---- RMSNorm ---------------------------------------------------------------- */

void df_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w, int64_t T,
                    int64_t H, float eps)
{
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * H;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t i = 0; i < H; i++)
            ss += xr[i] * xr[i];
        float r = 1.0f / sqrtf(ss / (float)H + eps);
        rstd[t] = r;
        float *o = out + t * H;
#pragma omp simd
        for (int64_t i = 0; i < H; i++)
            o[i] = w[i] * (xr[i] * r);
    }
}

void df_rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x, const float *w,
                    const float *rstd, int64_t T, int64_t H)
{
    /* With xhat = x * rstd and g = dout * w:
     *   dx = rstd * (g - xhat * mean(g * xhat)),   dw = sum_t dout * xhat. */
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * H, *dr = dout + t * H;
        float r = rstd[t], dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t i = 0; i < H; i++)
            dot += dr[i] * w[i] * xr[i];
        float c = dot * r * r / (float)H;
        float *dxr = dx + t * H;
#pragma omp simd
        for (int64_t i = 0; i < H; i++)
            dxr[i] += r * (dr[i] * w[i] - xr[i] * c);
    }
    if (!dw)
        return;
    /* Parameter gradient by column blocks: no reduction across threads. */
    const int64_t blk = 64;
    int64_t nblk = (H + blk - 1) / blk;
#pragma omp parallel for schedule(static)
    for (int64_t cb = 0; cb < nblk; cb++) {
        int64_t c0 = cb * blk, c1 = c0 + blk < H ? c0 + blk : H;
        float acc[64] = {0};
        for (int64_t t = 0; t < T; t++) {
            const float *xr = x + t * H, *dr = dout + t * H;
            float r = rstd[t];
#pragma omp simd
            for (int64_t c = c0; c < c1; c++)
                acc[c - c0] += dr[c] * xr[c] * r;
        }
        for (int64_t c = c0; c < c1; c++)
            dw[c] += acc[c - c0];
    }
}

/* ---- RoPE ------------------------------------------------------------------- */

/* inv_freq[hd / 2] of the default RoPE with theta (df_rope_inv_freq, rope.c). */
static void default_inv_freq(float *inv_freq, int64_t hd, double theta)
{
    df_model_config c = {.head_dim = hd, .rope_theta = theta, .rope_type = DF_ROPE_DEFAULT};
    df_rope_inv_freq(inv_freq, &c);
}

void df_rope_table_freq(float *cos_t, float *sin_t, int64_t n_pos, int64_t hd,
                        const float *inv_freq)
{
    int64_t half = hd / 2;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < n_pos; p++)
        for (int64_t i = 0; i < half; i++) {
            /* float32 product as in HF (inv_freq @ position_ids), then cos / sin. */
            float ang = (float)p * inv_freq[i];
            cos_t[p * half + i] = (float)cos((double)ang);
            sin_t[p * half + i] = (float)sin((double)ang);
        }
}

void df_rope_table(float *cos_t, float *sin_t, int64_t n_pos, int64_t hd, double theta)
{
    float inv_freq[DF_MAX_HEAD_DIM / 2];
    default_inv_freq(inv_freq, hd, theta);
    df_rope_table_freq(cos_t, sin_t, n_pos, hd, inv_freq);
}

/* Rotate the first rd dims of every head of row x[n_heads * hd] by (c, s); sign = -1 applies
   the inverse. */
static void rope_row(float *x, const float *c, const float *s, int64_t n_heads, int64_t hd,
                     int64_t rd, float sign)
{
    int64_t half = rd / 2;
    for (int64_t h = 0; h < n_heads; h++) {
        float *a = x + h * hd, *b = a + half;
#pragma omp simd
        for (int64_t i = 0; i < half; i++) {
            float x0 = a[i], x1 = b[i], sn = sign * s[i];
            a[i] = x0 * c[i] - x1 * sn;
            b[i] = x1 * c[i] + x0 * sn;
        }
    }
}

void df_rope_apply(float *x, const int32_t *pos, int64_t T, int64_t n_heads, int64_t hd,
                   int64_t rd, const float *cos_t, const float *sin_t, bool inverse)
{
    int64_t half = rd / 2;
    float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++)
        rope_row(x + t * n_heads * hd, cos_t + (int64_t)pos[t] * half,
                 sin_t + (int64_t)pos[t] * half, n_heads, hd, rd, sign);
}

/* Without a table: one row of angles per token (the decode path's few tokens). */
static void rope_direct(float *x, const int32_t *pos, int64_t T, int64_t n_heads, int64_t hd,
                        double theta, float sign)
{
    int64_t half = hd / 2;
    float inv_freq[DF_MAX_HEAD_DIM / 2];
    default_inv_freq(inv_freq, hd, theta);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++) {
        float c[DF_MAX_HEAD_DIM / 2], s[DF_MAX_HEAD_DIM / 2];
        for (int64_t i = 0; i < half; i++) {
            float ang = (float)pos[t] * inv_freq[i];
            c[i] = (float)cos((double)ang);
            s[i] = (float)sin((double)ang);
        }
        rope_row(x + t * n_heads * hd, c, s, n_heads, hd, hd, sign);
    }
}

void df_rope_fwd(float *x, const int32_t *pos, int64_t T, int64_t n_heads, int64_t hd,
                 double theta)
{
    rope_direct(x, pos, T, n_heads, hd, theta, 1.0f);
}

void df_rope_bwd(float *dx, const int32_t *pos, int64_t T, int64_t n_heads, int64_t hd,
                 double theta)
{
    rope_direct(dx, pos, T, n_heads, hd, theta, -1.0f);
}

/* ---- SwiGLU ------------------------------------------------------------------- */

void df_swiglu_fwd(float *out, const float *gate, const float *up, int64_t n)
{
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + df_expf(-g)) * up[i];
    }
}

void df_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                   const float *up, int64_t n)
{
    /* silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g). */
    /* every input of element i is read before either output is written: in place is exact */
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i], u = up[i], d = dout[i], s = 1.0f / (1.0f + df_expf(-g));
        dup[i] = d * g * s;
        dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
    }
}

/* ---- GeGLU (GELU, tanh approximation) ------------------------------------------- */

/*
 * gelu_tanh(g) = 0.5 g (1 + tanh(z / 2)) with z = 2 sqrt(2 / pi) (g + 0.044715 g^3), computed as
 * g sigmoid(z) (1 + tanh(z / 2) = 2 sigmoid(z)): no cancellation near 0, and the same
 * df_expf as silu. gelu'(g) = s (1 + 2 sqrt(2 / pi) g (1 - s) (1 + 3 0.044715 g^2)),
 * s = sigmoid(z): PyTorch's GeluBackward (tanh) with 1 - tanh^2 = 4 s (1 - s).
 */
void df_geglu_fwd(float *out, const float *gate, const float *up, int64_t n)
{
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i], g2 = g * g;
        const float z = DF_GELU_2K0 * (g + DF_GELU_K1 * g2 * g);
        out[i] = g / (1.0f + df_expf(-z)) * up[i];
    }
}

void df_geglu_bwd(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                  int64_t n)
{
    /* every input of element i is read before either output is written: in place is exact */
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i], u = up[i], d = dout[i], g2 = g * g;
        const float z = DF_GELU_2K0 * (g + DF_GELU_K1 * g2 * g);
        const float s = 1.0f / (1.0f + df_expf(-z));
        dup[i] = d * g * s;
        dgate[i] = d * u * s * (1.0f + DF_GELU_2K0 * g * (1.0f - s) * (1.0f + DF_GELU_3K1 * g2));
    }
}
