/*
 * The CUDA backend of the engine's seam (distflow/backend.h): each entry forwards to the
 * operator of cuda_backend.h that is its device twin. Context: the df_cuda of the rank.
 */
#include "backend/cuda/cuda_backend.h"

#include <math.h>
#include <stdlib.h>

static int cu_alloc(void *ctx, size_t bytes, void **p)
{
    /* cudaMalloc aligns to 256 bytes; a zero-byte request still gets a buffer */
    return df_cuda_alloc(ctx, bytes ? bytes : 64, p);
}

static void cu_release(void *ctx, void *p)
{
    df_cuda_release(ctx, p);
}

static int cu_upload(void *ctx, void *dst, const void *src, size_t bytes)
{
    return bytes ? df_cuda_upload(ctx, dst, src, bytes) : DF_OK;
}

static int cu_download(void *ctx, void *dst, const void *src, size_t bytes)
{
    return bytes ? df_cuda_download(ctx, dst, src, bytes) : DF_OK;
}

static int cu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    return bytes ? df_cuda_copy(ctx, dst, src, bytes) : DF_OK;
}

static int cu_zero(void *ctx, float *x, int64_t n)
{
    return df_cuda_fill(ctx, x, n, 0.0f);
}

static int cu_sync(void *ctx)
{
    return df_cuda_sync(ctx);
}

static int cu_gemm(void *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const float *A, const float *B, float beta, float *C)
{
    return df_cuda_gemm(ctx, ta, tb, M, N, K, alpha, A, B, DF_CUDA_F32, beta, C);
}

/* ---- mixed precision (gemm16.cu, runtime.cu's conversion) ---- */

static int cu_gemm_w16(void *ctx, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, const uint16_t *W, float beta, float *C)
{
    return df_cuda_gemm_w16(ctx, tb, M, N, K, alpha, A, W, beta, C);
}

static int cu_gemm_bf16(void *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, const float *B, float beta, float *C)
{
    return df_cuda_gemm_bf16(ctx, ta, tb, M, N, K, alpha, A, B, beta, C);
}

static int cu_bf16_from_f32(void *ctx, uint16_t *dst, const float *src, int64_t n)
{
    return df_cuda_f32_to_bf16(ctx, dst, src, n);
}

static int cu_embedding_fwd_w16(void *ctx, float *out, const int32_t *ids, const uint16_t *table16,
                                int64_t T, int64_t H)
{
    return df_cuda_embedding_fwd_w16(ctx, out, ids, table16, T, H);
}

/* ---- the optimizer's entries (optim.cu, nccl.cu): a block of their own ---- */

static int cu_adamw_step(void *ctx, float *p, const float *g, float *m, float *v, int64_t n,
                         const df_adamw_config *cfg, int64_t step, double lr)
{
    return df_cuda_adamw_step(ctx, p, g, m, v, n, cfg, step, lr);
}

static int cu_grad_norm(void *ctx, const float *x, int64_t n, double *norm)
{
    double ss = 0.0;
    int rc = df_cuda_sumsq(ctx, x, n, &ss); /* waits for the stream: the host has the sum */
    *norm = sqrt(ss);
    return rc;
}

static int cu_scale(void *ctx, float *x, int64_t n, float s)
{
    return df_cuda_scale(ctx, x, n, s);
}

/* One process group's collectives (the gradient all-reduce, the coordinator's all-to-all): an
 * NCCL communicator, or (a build without NCCL) the group with a host staging buffer. Shared by
 * every handle of the same (context, group), counted, so the communicator is made once per
 * group; the group outlives its handles (group_open's contract), so its address cannot be
 * reused while an entry holds it. */
typedef struct cu_group {
    df_cuda *c;
    df_comm *group;
    df_cuda_nccl *nccl; /* NULL: no NCCL in this build */
    float *host;        /* staging: download, df_comm_allreduce, upload */
    int64_t host_cap;
    int refs;
} cu_group;

enum { CU_MAX_GROUPS = 16 };
static cu_group *cu_groups[CU_MAX_GROUPS];

static int cu_group_open(void *ctx, df_comm *group, void **h)
{
    *h = NULL;
    if (!group)
        return df_error(DF_EINVAL, "cuda group_open: no group");
    int slot = -1;
    for (int i = 0; i < CU_MAX_GROUPS; i++) {
        if (cu_groups[i] && cu_groups[i]->c == ctx && cu_groups[i]->group == group) {
            cu_groups[i]->refs++;
            *h = cu_groups[i];
            return DF_OK;
        }
        if (!cu_groups[i] && slot < 0)
            slot = i;
    }
    if (slot < 0) /* every rank opens the same groups in the same order: all fail alike */
        return df_error(DF_ENOMEM, "cuda group_open: more than %d process groups", CU_MAX_GROUPS);
    cu_group *g = calloc(1, sizeof *g);
    if (!g)
        return df_error(DF_ENOMEM, "cuda group_open: out of memory");
    g->c = ctx;
    g->group = group;
    g->refs = 1;
    int rc = df_cuda_nccl_create(ctx, group, &g->nccl);
    if (rc == DF_EUNSUPPORTED) /* the same build on every rank: all fall back alike */
        rc = DF_OK;
    if (rc) {
        free(g);
        return df_error_wrap(rc, "an NCCL communicator over %d ranks", df_comm_size(group));
    }
    cu_groups[slot] = g;
    *h = g;
    return DF_OK;
}

static void cu_group_close(void *ctx, void *h)
{
    (void)ctx;
    cu_group *g = h;
    if (!g || --g->refs > 0)
        return;
    for (int i = 0; i < CU_MAX_GROUPS; i++)
        if (cu_groups[i] == g)
            cu_groups[i] = NULL;
    df_cuda_nccl_free(g->nccl);
    free(g->host);
    free(g);
}

static int cu_allreduce_sum(void *ctx, void *h, float *x, int64_t n)
{
    cu_group *g = h;
    if (!g || n < 0)
        return df_error(DF_EINVAL, "cuda allreduce_sum: no handle or n < 0");
    if (g->nccl) /* in stream order, on the device */
        return df_cuda_nccl_allreduce_sum(g->nccl, x, n);
    int rc = DF_OK;
    if (n > g->host_cap) {
        float *b = realloc(g->host, (size_t)n * sizeof(float));
        if (b) {
            g->host = b;
            g->host_cap = n;
        } else {
            rc = df_error(DF_ENOMEM, "cuda allreduce_sum: out of memory for %lld floats", (long long)n);
        }
    }
    /* The download is the first sync after the backward's kernels, so it also reports their
     * asynchronous errors. A rank without its gradient on the host (no staging buffer, a failed
     * download) cannot join the sum: every rank learns it first and all fail alike, instead of
     * the others summing that rank's stale staging buffer and stepping on it. */
    const size_t bytes = (size_t)n * sizeof(float);
    if (!rc && n)
        rc = df_cuda_download(ctx, g->host, x, bytes);
    int64_t bad = rc != DF_OK;
    int crc = df_comm_allreduce(g->group, &bad, 1, DF_COMM_INT64, DF_COMM_MAX);
    if (rc || crc)
        return rc ? rc : crc;
    if (bad)
        return df_error(DF_EINTERNAL, "cuda allreduce_sum: another rank could not stage its gradient "
                        "on the host (its own error says why)");
    rc = df_comm_allreduce(g->group, g->host, n, DF_COMM_FLOAT32, DF_COMM_SUM);
    if (!rc && n)
        rc = df_cuda_upload(ctx, x, g->host, bytes);
    return rc;
}

#ifdef DF_HAVE_NCCL
/* The coordinator's payloads: only over NCCL (without it the entry is NULL and they stay on
 * MPI, which moves host memory without the two staging copies). */
static int cu_alltoallv(void *ctx, void *h, const void *send, const int64_t *send_counts,
                        void *recv, const int64_t *recv_counts)
{
    (void)ctx;
    cu_group *g = h;
    if (!g || !g->nccl)
        return df_error(DF_EINVAL, "cuda alltoallv: no NCCL communicator for the group");
    return df_cuda_nccl_alltoallv(g->nccl, send, send_counts, recv, recv_counts);
}
#endif

static int cu_embedding_fwd(void *ctx, float *out, const int32_t *ids, const float *table,
                            int64_t T, int64_t H)
{
    return df_cuda_embedding_fwd(ctx, out, ids, table, T, H);
}

static int cu_embedding_bwd(void *ctx, float *dtable, const float *dout, const int32_t *ids,
                            int64_t T, int64_t H)
{
    return df_cuda_embedding_bwd(ctx, dtable, dout, ids, T, H);
}

static int cu_rmsnorm_fwd(void *ctx, float *out, float *rstd, const float *x, const float *w,
                          int64_t T, int64_t H, float eps)
{
    return df_cuda_rmsnorm_fwd(ctx, out, rstd, x, w, T, H, eps);
}

static int cu_rmsnorm_bwd(void *ctx, float *dx, float *dw, const float *dout, const float *x,
                          const float *w, const float *rstd, int64_t T, int64_t H)
{
    return df_cuda_rmsnorm_bwd(ctx, dx, dw, dout, x, w, rstd, T, H);
}

static int cu_rope_apply(void *ctx, float *x, const int32_t *pos, int64_t T, int64_t n_heads,
                         int64_t hd, int64_t rd, const float *cos_t, const float *sin_t, bool inverse)
{
    return df_cuda_rope_apply(ctx, x, pos, T, n_heads, hd, rd, cos_t, sin_t, inverse);
}

static int cu_attention_fwd(void *ctx, float *out, float *lse, const float *q, const float *k,
                            const float *v, const df_backend_seqs *s, int64_t nh, int64_t nkv,
                            int64_t hd)
{
    return df_cuda_attention_fwd(ctx, out, lse, q, k, v, s->offsets, s->n_seqs, s->T, s->max_len,
                                 nh, nkv, hd, s->window, s->softcap);
}

static int cu_attention_bwd(void *ctx, float *dq, float *dk, float *dv, const float *dout,
                            const float *out, const float *lse, const float *q, const float *k,
                            const float *v, const df_backend_seqs *s, int64_t nh, int64_t nkv,
                            int64_t hd)
{
    return df_cuda_attention_bwd(ctx, dq, dk, dv, dout, out, lse, q, k, v, s->offsets, s->n_seqs,
                                 s->T, s->max_len, nh, nkv, hd, s->window, s->softcap);
}

static int cu_swiglu_fwd(void *ctx, float *out, const float *gate, const float *up, int64_t n)
{
    return df_cuda_swiglu_fwd(ctx, out, gate, up, n);
}

static int cu_swiglu_bwd(void *ctx, float *dgate, float *dup, const float *dout,
                         const float *gate, const float *up, int64_t n)
{
    return df_cuda_swiglu_bwd(ctx, dgate, dup, dout, gate, up, n);
}

static int cu_geglu_fwd(void *ctx, float *out, const float *gate, const float *up, int64_t n)
{
    return df_cuda_geglu_fwd(ctx, out, gate, up, n);
}

static int cu_geglu_bwd(void *ctx, float *dgate, float *dup, const float *dout,
                        const float *gate, const float *up, int64_t n)
{
    return df_cuda_geglu_bwd(ctx, dgate, dup, dout, gate, up, n);
}

static int64_t cu_lmhead_scratch_floats(void *ctx, int64_t n, int64_t V, int64_t H)
{
    (void)ctx;
    return df_cuda_vocab_scratch_floats(n, V, H);
}

/* Sampling shares the vocabulary operators' scratch (df_cuda_vocab_scratch_floats). */
static int cu_sample(void *ctx, int32_t *tok, float *logp, const float *h, const float *W, int64_t n,
                     int64_t V, int64_t H, float temperature, float softcap, int64_t top_k,
                     float top_p, const double *u, float *scratch)
{
    return df_cuda_sample(ctx, tok, logp, h, W, n, V, H, temperature, softcap, top_k, top_p, u,
                          scratch);
}

static int cu_lmhead_fwd(void *ctx, float *logp, float *entropy, float *sum_pi_sq, float *lse,
                         const float *h, const float *W, const int32_t *target, int64_t n, int64_t V,
                         int64_t H, float temperature, float softcap, float *scratch)
{
    return df_cuda_lmhead_fwd(ctx, logp, entropy, sum_pi_sq, lse, h, W, target, n, V, H, temperature,
                              softcap, scratch);
}

static int cu_lmhead_bwd(void *ctx, float *dh, float *dW, const float *dlogp,
                         const float *dentropy, const float *h, const float *W,
                         const int32_t *target, const float *lse, const float *entropy, int64_t n,
                         int64_t V, int64_t H, float temperature, float softcap, float *scratch)
{
    return df_cuda_lmhead_bwd(ctx, dh, dW, dlogp, dentropy, h, W, target, lse, entropy, n, V, H,
                              temperature, softcap, scratch);
}

static int cu_lmhead_fwd_w16(void *ctx, float *logp, float *entropy, float *sum_pi_sq, float *lse,
                             const float *h, const uint16_t *W16, const int32_t *target, int64_t n,
                             int64_t V, int64_t H, float temperature, float softcap, float *scratch)
{
    return df_cuda_lmhead_fwd_w16(ctx, logp, entropy, sum_pi_sq, lse, h, W16, target, n, V, H,
                                  temperature, softcap, scratch);
}

static int cu_lmhead_bwd_w16(void *ctx, float *dh, float *dW, const float *dlogp,
                             const float *dentropy, const float *h, const uint16_t *W16,
                             const int32_t *target, const float *lse, const float *entropy,
                             int64_t n, int64_t V, int64_t H, float temperature, float softcap,
                             float *scratch)
{
    return df_cuda_lmhead_bwd_w16(ctx, dh, dW, dlogp, dentropy, h, W16, target, lse, entropy, n, V,
                                  H, temperature, softcap, scratch);
}

static int cu_rows_fill(void *ctx, float *y, const float *b, int64_t M, int64_t N)
{
    return df_cuda_rows_fill(ctx, y, b, M, N);
}

static int cu_col_sum_add(void *ctx, float *db, const float *dy, int64_t M, int64_t N)
{
    return df_cuda_col_sum_add(ctx, db, dy, M, N);
}

static int cu_gather_rows(void *ctx, float *dst, const float *src, const int64_t *rows,
                          int64_t n, int64_t H)
{
    return df_cuda_gather_rows(ctx, dst, src, rows, n, H);
}

static int cu_scatter_add_rows(void *ctx, float *dst, const float *src, const int64_t *rows,
                               int64_t n, int64_t H)
{
    return df_cuda_scatter_add_rows(ctx, dst, src, rows, n, H);
}

static int cu_kv_write(void *ctx, const df_backend_kv *kv, int64_t layer, const float *k,
                       const float *v, const int32_t *slot, const int32_t *pos, int64_t n)
{
    return df_cuda_kv_slots_write(ctx, kv, layer, k, v, slot, pos, n);
}

static int cu_kv_copy(void *ctx, const df_backend_kv *kv, int64_t src, int64_t dst, int64_t len)
{
    return df_cuda_kv_slots_copy(ctx, kv, src, dst, len);
}

static int64_t cu_kv_scratch_floats(void *ctx, int64_t nh, int64_t max_len)
{
    (void)ctx;
    return df_cuda_kv_slots_scratch_floats(nh, max_len);
}

static int cu_kv_attention(void *ctx, float *out, const float *q, const df_backend_kv *kv,
                           int64_t layer, const int32_t *slot, const int32_t *pos, int64_t n,
                           int64_t nh, int64_t nkv, int64_t hd, int64_t window, float softcap,
                           float *scratch)
{
    return df_cuda_kv_slots_attention(ctx, out, q, kv, layer, slot, pos, n, nh, nkv, hd, window,
                                      softcap, scratch);
}

static const char *cu_device_name(void *ctx) { return df_cuda_device_name(ctx); }
static int64_t cu_memory_peak(void *ctx) { return df_cuda_memory_peak(ctx); }

static const df_backend_ops cuda_ops = {
    .name = "cuda",
    .host_memory = false,
    .attention_window = true,
    .attention_softcap = true,
    .alloc = cu_alloc,
    .release = cu_release,
    .upload = cu_upload,
    .download = cu_download,
    .copy = cu_copy,
    .zero = cu_zero,
    .sync = cu_sync,
    .gemm = cu_gemm,
    /* mixed precision: A rounded per call, the weight a df_weights16 in device memory; the LM
     * head's tiles bf16 too (lmhead_*_w16, vocab.cu) */
    .gemm_w16 = cu_gemm_w16,
    .gemm_bf16 = cu_gemm_bf16,
    .bf16_from_f32 = cu_bf16_from_f32,
    .rows_fill = cu_rows_fill,
    .col_sum_add = cu_col_sum_add,
    .gather_rows = cu_gather_rows,
    .scatter_add_rows = cu_scatter_add_rows,
    .embedding_fwd = cu_embedding_fwd,
    .embedding_fwd_w16 = cu_embedding_fwd_w16,
    .embedding_bwd = cu_embedding_bwd,
    .rmsnorm_fwd = cu_rmsnorm_fwd,
    .rmsnorm_bwd = cu_rmsnorm_bwd,
    .rope_apply = cu_rope_apply,
    .attention_fwd = cu_attention_fwd,
    .attention_bwd = cu_attention_bwd,
    .kv_write = cu_kv_write,
    .kv_copy = cu_kv_copy,
    .kv_scratch_floats = cu_kv_scratch_floats,
    .kv_attention = cu_kv_attention,
    .swiglu_fwd = cu_swiglu_fwd,
    .swiglu_bwd = cu_swiglu_bwd,
    .geglu_fwd = cu_geglu_fwd,
    .geglu_bwd = cu_geglu_bwd,
    .lmhead_scratch_floats = cu_lmhead_scratch_floats,
    .sample_scratch_floats = cu_lmhead_scratch_floats,
    .sample = cu_sample,
    .lmhead_fwd = cu_lmhead_fwd,
    .lmhead_bwd = cu_lmhead_bwd,
    .lmhead_fwd_w16 = cu_lmhead_fwd_w16, /* mixed precision's head: bf16 tiles */
    .lmhead_bwd_w16 = cu_lmhead_bwd_w16,
    /* the optimizer on the device (train_core.c keeps AdamW, the clip and the all-reduce here) */
    .adamw_step = cu_adamw_step,
    .grad_norm = cu_grad_norm,
    .scale = cu_scale,
    .group_open = cu_group_open,
    .group_close = cu_group_close,
    .allreduce_sum = cu_allreduce_sum,
#ifdef DF_HAVE_NCCL
    .alltoallv = cu_alltoallv, /* the data coordinator's payloads over NCCL */
#endif
    .device_name = cu_device_name,
    .memory_peak = cu_memory_peak,
};

df_backend df_backend_cuda(df_cuda *c)
{
    return (df_backend){.ops = &cuda_ops, .ctx = c};
}

int df_backend_cuda_open(df_backend *out)
{
    static df_cuda *ctx; /* the rank's device, for the life of the process */
    if (!ctx) {
        int rc = df_cuda_create(-1, &ctx);
        if (rc)
            return rc;
    }
    *out = df_backend_cuda(ctx);
    return DF_OK;
}
