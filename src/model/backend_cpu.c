/*
 * The CPU backend (distflow/backend.h): host memory, oneDNN matmuls through the
 * activations' precision (ops.h df_mm_*: float32, or bf16 in mixed precision) and the
 * kernels of src/model/ops_*.c. Its context is NULL (float32) or the address of a
 * df_mm_ctx pointer, read at each matmul: gemm then rounds both operands (autocast's
 * weight-gradient matmuls), gemm_w16 only the activation (the weight is a df_weights16).
 */
#include "distflow/backend.h"
#include "model/ops.h"

#include <stdlib.h>
#include <string.h>

static int cpu_alloc(void *ctx, size_t bytes, void **p)
{
    (void)ctx;
    size_t n = (bytes + 63) / 64 * 64;
    *p = aligned_alloc(64, n ? n : 64);
    return *p ? DF_OK : df_error(DF_ENOMEM, "out of memory allocating %zu bytes", bytes);
}

static void cpu_release(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static int cpu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    if (bytes)
        memcpy(dst, src, bytes);
    return DF_OK;
}

static int cpu_zero(void *ctx, float *x, int64_t n)
{
    (void)ctx;
    if (n > 0)
        memset(x, 0, (size_t)n * sizeof(float));
    return DF_OK;
}

static int cpu_sync(void *ctx)
{
    (void)ctx;
    return DF_OK;
}

static int cpu_gemm(void *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, const float *B, float beta, float *C)
{
    df_mm_ctx *mm = ctx ? *(df_mm_ctx **)ctx : NULL;
    if (ta && tb)
        return df_error(DF_EINVAL, "cpu gemm: op(A) = A^T with op(B) = B^T is not supported");
    if (tb)
        df_mm_nt(mm, M, N, K, alpha, A, B, beta, C);
    else if (ta)
        df_mm_tn(mm, M, N, K, alpha, A, B, beta, C);
    else
        df_mm_nn(mm, M, N, K, alpha, A, B, beta, C);
    return DF_OK;
}

static int cpu_gemm_w16(void *ctx, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, const uint16_t *W, float beta, float *C)
{
    df_mm_ctx *mm = ctx ? *(df_mm_ctx **)ctx : NULL;
    if (!mm)
        return df_error(DF_EINVAL, "cpu gemm_w16: this backend has no bf16 matmul context "
                        "(df_backend_cpu_bf16, or activations created with DF_ACTS_BF16)");
    return df_mm_w16(mm, tb, M, N, K, alpha, A, W, beta, C);
}

/* Both operands rounded: the CPU's gemm under a bf16 context, which it needs. */
static int cpu_gemm_bf16(void *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                         float alpha, const float *A, const float *B, float beta, float *C)
{
    if (!ctx || !*(df_mm_ctx **)ctx)
        return df_error(DF_EINVAL, "cpu gemm_bf16: this backend has no bf16 matmul context "
                        "(df_backend_cpu_bf16)");
    return cpu_gemm(ctx, ta, tb, M, N, K, alpha, A, B, beta, C);
}

static int cpu_bf16_from_f32(void *ctx, uint16_t *dst, const float *src, int64_t n)
{
    (void)ctx;
    df_bf16_from_f32(dst, src, n);
    return DF_OK;
}

static int cpu_gemm_w16_packed(void *ctx, int64_t M, int64_t N, int64_t K, float alpha,
                               const float *A, const uint16_t *Wp, float beta, float *C)
{
    df_mm_ctx *mm = ctx ? *(df_mm_ctx **)ctx : NULL;
    if (!mm)
        return df_error(DF_EINVAL, "cpu gemm_w16_packed: this backend has no bf16 matmul context");
    return df_mm_w16_packed(mm, M, N, K, alpha, A, Wp, beta, C);
}

static int cpu_rows_fill(void *ctx, float *y, const float *b, int64_t M, int64_t N)
{
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M; i++)
        memcpy(y + i * N, b, (size_t)N * sizeof(float));
    return DF_OK;
}

static int cpu_col_sum_add(void *ctx, float *db, const float *dy, int64_t M, int64_t N)
{
    (void)ctx;
    df_linear_bwd(NULL, NULL, db, dy, NULL, NULL, M, N, 0);
    return DF_OK;
}

static int cpu_gather_rows(void *ctx, float *dst, const float *src, const int64_t *rows,
                           int64_t n, int64_t H)
{
    (void)ctx;
    for (int64_t j = 0; j < n; j++)
        memcpy(dst + j * H, src + rows[j] * H, (size_t)H * sizeof(float));
    return DF_OK;
}

static int cpu_scatter_add_rows(void *ctx, float *dst, const float *src, const int64_t *rows,
                                int64_t n, int64_t H)
{
    (void)ctx;
    for (int64_t j = 0; j < n; j++) {
        float *d = dst + rows[j] * H;
        const float *s = src + j * H;
        for (int64_t i = 0; i < H; i++)
            d[i] += s[i];
    }
    return DF_OK;
}

static int cpu_embedding_fwd(void *ctx, float *out, const int32_t *ids, const float *table,
                             int64_t T, int64_t H)
{
    (void)ctx;
    df_embedding_fwd(out, ids, table, T, H);
    return DF_OK;
}

static int cpu_embedding_fwd_w16(void *ctx, float *out, const int32_t *ids,
                                 const uint16_t *table16, int64_t T, int64_t H)
{
    (void)ctx;
    df_embedding_fwd_bf16(out, ids, table16, T, H);
    return DF_OK;
}

static int cpu_embedding_bwd(void *ctx, float *dtable, const float *dout, const int32_t *ids,
                             int64_t T, int64_t H)
{
    (void)ctx;
    df_embedding_bwd(dtable, dout, ids, T, H);
    return DF_OK;
}

static int cpu_rmsnorm_fwd(void *ctx, float *out, float *rstd, const float *x, const float *w,
                           int64_t T, int64_t H, float eps)
{
    (void)ctx;
    df_rmsnorm_fwd(out, rstd, x, w, T, H, eps);
    return DF_OK;
}

static int cpu_rmsnorm_bwd(void *ctx, float *dx, float *dw, const float *dout, const float *x,
                           const float *w, const float *rstd, int64_t T, int64_t H)
{
    (void)ctx;
    df_rmsnorm_bwd(dx, dw, dout, x, w, rstd, T, H);
    return DF_OK;
}

static int cpu_rope_apply(void *ctx, float *x, const int32_t *pos, int64_t T, int64_t n_heads,
                          int64_t hd, int64_t rd, const float *cos_t, const float *sin_t, bool inverse)
{
    (void)ctx;
    df_rope_apply(x, pos, T, n_heads, hd, rd, cos_t, sin_t, inverse);
    return DF_OK;
}

static int cpu_attention_fwd(void *ctx, float *out, float *lse, const float *q, const float *k,
                             const float *v, const df_backend_seqs *s, int64_t nh, int64_t nkv,
                             int64_t hd)
{
    (void)ctx;
    df_attention_fwd(out, lse, q, k, v, s->offsets, s->n_seqs, nh, nkv, hd, s->window, s->softcap);
    return DF_OK;
}

static int cpu_attention_bwd(void *ctx, float *dq, float *dk, float *dv, const float *dout,
                             const float *out, const float *lse, const float *q, const float *k,
                             const float *v, const df_backend_seqs *s, int64_t nh, int64_t nkv,
                             int64_t hd)
{
    (void)ctx;
    df_attention_bwd(dq, dk, dv, dout, out, lse, q, k, v, s->offsets, s->n_seqs, nh, nkv, hd,
                     s->window, s->softcap);
    return DF_OK;
}

static int cpu_kv_write(void *ctx, const df_backend_kv *kv, int64_t layer, const float *k,
                        const float *v, const int32_t *slot, const int32_t *pos, int64_t n)
{
    (void)ctx;
    df_kv_write(kv, layer, k, v, slot, pos, n);
    return DF_OK;
}

static int cpu_kv_copy(void *ctx, const df_backend_kv *kv, int64_t src, int64_t dst, int64_t len)
{
    (void)ctx;
    df_kv_copy(kv, src, dst, len);
    return DF_OK;
}

static int64_t cpu_kv_scratch_floats(void *ctx, int64_t nh, int64_t max_len)
{
    (void)ctx;
    return df_kv_scratch_floats(nh, max_len);
}

static int cpu_kv_attention(void *ctx, float *out, const float *q, const df_backend_kv *kv,
                            int64_t layer, const int32_t *slot, const int32_t *pos, int64_t n,
                            int64_t nh, int64_t nkv, int64_t hd, int64_t window, float softcap,
                            float *scratch)
{
    (void)ctx;
    df_kv_attention(out, q, kv, layer, slot, pos, n, nh, nkv, hd, window, softcap, scratch);
    return DF_OK;
}

static int cpu_swiglu_fwd(void *ctx, float *out, const float *gate, const float *up, int64_t n)
{
    (void)ctx;
    df_swiglu_fwd(out, gate, up, n);
    return DF_OK;
}

static int cpu_swiglu_bwd(void *ctx, float *dgate, float *dup, const float *dout,
                          const float *gate, const float *up, int64_t n)
{
    (void)ctx;
    df_swiglu_bwd(dgate, dup, dout, gate, up, n);
    return DF_OK;
}

static int cpu_geglu_fwd(void *ctx, float *out, const float *gate, const float *up, int64_t n)
{
    (void)ctx;
    df_geglu_fwd(out, gate, up, n);
    return DF_OK;
}

static int cpu_geglu_bwd(void *ctx, float *dgate, float *dup, const float *dout,
                         const float *gate, const float *up, int64_t n)
{
    (void)ctx;
    df_geglu_bwd(dgate, dup, dout, gate, up, n);
    return DF_OK;
}

/* The bf16 head's backward tiling: df_vocab_tiling_for with work items of up to
 * DF_LMHEAD_ITEM_ROWS rows while the groups' dh parts stay under 64 MiB. Every item streams
 * the whole dW once, and its rows are the reduction length of dW += dlogits^T h
 * (df_lmhead_bwd16), so the float32 path's 16 MiB cap would cost more than it saves here. */
static df_vocab_tiling head16_bwd_tiling(int64_t V, int64_t H)
{
    df_vocab_tiling t = df_vocab_tiling_for(V, H);
    const int64_t G = df_vocab_groups(V, &t);
    while (t.item_rows * 2 <= DF_LMHEAD_ITEM_ROWS && G * t.item_rows * 2 * H <= ((int64_t)1 << 24))
        t.item_rows *= 2;
    return t;
}

static int64_t cpu_lmhead_scratch_floats(void *ctx, int64_t n, int64_t V, int64_t H)
{
    (void)ctx;
    /* Enough for the bf16 head too (its dh parts have whole tiles of rows). */
    df_vocab_tiling t = head16_bwd_tiling(V, H);
    const int64_t f32 = df_lmhead_scratch_floats(n, V, H);
    const int64_t b16 = df_lmhead_scratch_floats16(n, V, H, &t);
    return f32 > b16 ? f32 : b16;
}

/* h [n, H] rounded to bf16 into a buffer padded with zero rows (df_vocab16). */
static int head16_operands(void *ctx, const float *h, const uint16_t *W16, int64_t n,
                           int64_t H, const df_vocab_tiling *t, df_vocab16 *b, uint16_t **h16)
{
    df_mm_ctx *mm = ctx ? *(df_mm_ctx **)ctx : NULL;
    if (!mm)
        return df_error(DF_EINVAL, "cpu lmhead_*_w16: this backend has no bf16 matmul context");
    const int64_t rows = df_vocab16_rows(n, t);
    *h16 = aligned_alloc(64, ((size_t)(rows * H) * sizeof(uint16_t) + 63) / 64 * 64);
    if (!*h16)
        return df_error(DF_ENOMEM, "out of memory for the LM head's bf16 rows (%lld x %lld)",
                        (long long)rows, (long long)H);
    df_bf16_from_f32(*h16, h, n * H);
    memset(*h16 + n * H, 0, (size_t)((rows - n) * H) * sizeof(uint16_t));
    *b = (df_vocab16){mm, *h16, W16, 0};
    return DF_OK;
}

static int cpu_lmhead_fwd_w16(void *ctx, float *logp, float *entropy, float *sum_pi_sq, float *lse,
                              const float *h, const uint16_t *W16, const int32_t *target, int64_t n,
                              int64_t V, int64_t H, float temperature, float softcap, float *scratch)
{
    df_vocab_tiling t = df_vocab_tiling_for(V, H);
    df_vocab16 b;
    uint16_t *h16 = NULL;
    int rc = head16_operands(ctx, h, W16, n, H, &t, &b, &h16);
    if (!rc && df_lmhead_fwd16(logp, entropy, sum_pi_sq, lse, &b, target, n, V, H, temperature, softcap,
                                &t, scratch))
        rc = df_error(DF_EINTERNAL, "cpu lmhead_fwd_w16: oneDNN failed on a bf16 logits tile");
    free(h16);
    return rc;
}

static int cpu_lmhead_bwd_w16(void *ctx, float *dh, float *dW, const float *dlogp,
                              const float *dentropy, const float *h, const uint16_t *W16,
                              const int32_t *target, const float *lse, const float *entropy,
                              int64_t n, int64_t V, int64_t H, float temperature, float softcap, float *scratch)
{
    df_vocab_tiling t = head16_bwd_tiling(V, H);
    df_vocab16 b;
    uint16_t *h16 = NULL;
    int rc = head16_operands(ctx, h, W16, n, H, &t, &b, &h16);
    if (!rc && df_lmhead_bwd16(dh, dW, dlogp, dentropy, &b, target, lse, entropy, n, V, H,
                               temperature, softcap, &t, scratch))
        rc = df_error(DF_EINTERNAL, "cpu lmhead_bwd_w16: oneDNN failed on a bf16 tile");
    free(h16);
    return rc;
}

static int cpu_lmhead_fwd(void *ctx, float *logp, float *entropy, float *sum_pi_sq, float *lse,
                          const float *h, const float *W, const int32_t *target, int64_t n, int64_t V, int64_t H,
                          float temperature, float softcap, float *scratch)
{
    (void)ctx;
    df_lmhead_fwd(logp, entropy, sum_pi_sq, lse, h, W, target, n, V, H, temperature, softcap, scratch);
    return DF_OK;
}

static int cpu_lmhead_bwd(void *ctx, float *dh, float *dW, const float *dlogp,
                          const float *dentropy, const float *h, const float *W,
                          const int32_t *target, const float *lse, const float *entropy,
                          int64_t n, int64_t V, int64_t H, float temperature, float softcap, float *scratch)
{
    (void)ctx;
    df_lmhead_bwd(dh, dW, dlogp, dentropy, h, W, target, lse, entropy, n, V, H, temperature, softcap,
                  scratch);
    return DF_OK;
}

/* ---- the optimizer's entries: the host functions themselves (optim.h, comm.h) ---- */

static int cpu_adamw_step(void *ctx, float *p, const float *g, float *m, float *v, int64_t n,
                          const df_adamw_config *cfg, int64_t step, double lr)
{
    (void)ctx;
    if (step < 1)
        return df_error(DF_EINVAL, "cpu adamw_step: step must be >= 1 (got %lld)", (long long)step);
    /* df_adamw_step over these moments: it increments step to t first */
    df_adamw o = {.cfg = *cfg, .n = n, .step = step - 1, .m = m, .v = v};
    return n > 0 ? df_adamw_step(&o, p, g, lr) : DF_OK;
}

static int cpu_grad_norm(void *ctx, const float *x, int64_t n, double *norm)
{
    (void)ctx;
    *norm = df_grad_norm(x, n);
    return DF_OK;
}

static int cpu_scale(void *ctx, float *x, int64_t n, float s)
{
    (void)ctx;
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
    return DF_OK;
}

static int cpu_group_open(void *ctx, df_comm *group, void **h)
{
    (void)ctx;
    *h = group;
    return group ? DF_OK : df_error(DF_EINVAL, "cpu group_open: no group");
}

static void cpu_group_close(void *ctx, void *h) { (void)ctx, (void)h; }

static int cpu_allreduce_sum(void *ctx, void *h, float *x, int64_t n)
{
    (void)ctx;
    return df_comm_allreduce(h, x, n, DF_COMM_FLOAT32, DF_COMM_SUM);
}

static const df_backend_ops cpu_ops = {
    .name = "cpu",
    .host_memory = true,
    .attention_window = true,
    .attention_softcap = true, /* Gemma 2's soft-caps: attention, kv_attention, LM head, sampler */
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .gemm = cpu_gemm,
    .gemm_w16 = cpu_gemm_w16,
    .gemm_w16_packed = cpu_gemm_w16_packed,
    .gemm_bf16 = cpu_gemm_bf16,
    .bf16_from_f32 = cpu_bf16_from_f32,
    .rows_fill = cpu_rows_fill,
    .col_sum_add = cpu_col_sum_add,
    .gather_rows = cpu_gather_rows,
    .scatter_add_rows = cpu_scatter_add_rows,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_fwd_w16 = cpu_embedding_fwd_w16,
    .embedding_bwd = cpu_embedding_bwd,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .rope_apply = cpu_rope_apply,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .kv_write = cpu_kv_write,
    .kv_copy = cpu_kv_copy,
    .kv_scratch_floats = cpu_kv_scratch_floats,
    .kv_attention = cpu_kv_attention,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .geglu_fwd = cpu_geglu_fwd,
    .geglu_bwd = cpu_geglu_bwd,
    .lmhead_scratch_floats = cpu_lmhead_scratch_floats,
    .lmhead_fwd = cpu_lmhead_fwd,
    .lmhead_bwd = cpu_lmhead_bwd,
    .lmhead_fwd_w16 = cpu_lmhead_fwd_w16,
    .lmhead_bwd_w16 = cpu_lmhead_bwd_w16,
    .adamw_step = cpu_adamw_step,
    .grad_norm = cpu_grad_norm,
    .scale = cpu_scale,
    .group_open = cpu_group_open,
    .group_close = cpu_group_close,
    .allreduce_sum = cpu_allreduce_sum,
};

df_backend df_backend_cpu(void)
{
    return (df_backend){.ops = &cpu_ops, .ctx = NULL};
}

df_backend df_backend_cpu_bf16(df_mm_ctx **mm)
{
    return (df_backend){.ops = &cpu_ops, .ctx = mm};
}

bool df_backend_is_cpu(const df_backend *b)
{
    return b && b->ops == &cpu_ops;
}
