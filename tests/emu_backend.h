/*
 * emu_backend.h — a device emulated on the host, for tests of code that runs on a backend
 * whose memory is not the host's (the CUDA backend) on a machine without a GPU.
 *
 * emu_open(&dev) gives a backend with host_memory = false whose operators are the CPU
 * backend's (so results are the CPU's bits) over buffers of its own: each alloc is a mapping
 * of its own that is PROT_NONE except while a call of the backend that names it (a pointer
 * into it among the call's arguments) runs. So
 *   - host code that reads or writes backend memory directly crashes (SIGSEGV), as it would
 *     fault or read garbage on a GPU, and so does an operator reaching a buffer it was not handed;
 *   - an operator handed a host pointer where backend memory is due aborts naming the
 *     operator (emu_need), as a CUDA kernel would fault on it;
 *   - everything crossing the seam goes through upload / download / copy, which it counts.
 * The mixed-precision entries (gemm_w16, embedding_fwd_w16, lmhead_*_w16, gemm_bf16) are NULL
 * until emu_bf16(d) fills them with the CPU's under a bf16 context of the device's own (where
 * the CPU has native bf16 kernels), over a df_weights16 in the device's memory; emu_close frees
 * that context. bf16_from_f32 is always there (df_bf16_from_f32 over the device's memory).
 * `sample`, which the CPU backend has not (its rollout samples
 * from host logits), is the CPU's logits GEMM, Gemma 2's final-logit cap C tanhf(z / C) as the
 * host path's cap_logits, and df_sample_token_u row by row, so a rollout sampling on the device
 * draws the host path's tokens. Like the CPU it has attention_softcap (every entry hands Gemma 2's
 * soft-caps to the CPU's: attention_fwd / _bwd in df_backend_seqs, kv_attention, the LM head's
 * and sample's argument), so Gemma 2 runs here (tests/test_device_gemma2.c); a test clears
 * d->ops.attention_softcap for a device without it. The optimizer's entries (adamw_step,
 * grad_norm, scale, group_open / _close, allreduce_sum) are the CPU's over the device's memory,
 * so training keeps its master weights, moments and all-reduce on the device; emu_no_optim
 * takes them away (the host optimizer of a backend without them). `alltoallv` (the data
 * coordinator's payloads) is MPI's over the device's memory. Not thread-safe; one emu_dev
 * per test.
 */
#ifndef DF_TESTS_EMU_BACKEND_H
#define DF_TESTS_EMU_BACKEND_H

#include "distflow/backend.h"
#include "engine/sampling.h"
#include "model/ops.h"
#include "distflow/model.h"
#include "tolerance.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define EMU_MAX_BUFS 4096

typedef struct emu_dev {
    df_backend cpu;
    df_backend_ops ops;
    struct {
        char *p;
        size_t bytes; /* mapped */
    } buf[EMU_MAX_BUFS];
    int n;
    int64_t uploads, downloads, copies, calls; /* counts of calls */
    int64_t kv_attentions;                     /* kv_attention calls: a rollout ran here */
    int64_t samples;                           /* sample calls */
    int64_t allreduces, adamw_steps;          /* of allreduce_sum and adamw_step */
    int64_t alltoallvs, a2a_bytes;             /* alltoallv calls, bytes they sent */
    int64_t up_bytes, down_bytes;
    int64_t w16_calls, conversions;            /* gemm_w16 + gemm_bf16 calls; bf16_from_f32's */
    df_mm_ctx *mm;                             /* emu_bf16: the CPU's bf16 context */
    df_backend cpu16;                          /* the CPU backend under mm */
    int open[16], n_open; /* the buffers the next call names (emu_need), opened for it alone */
} emu_dev;

static void emu_protect(emu_dev *d, int prot)
{
    for (int k = 0; k < d->n_open; k++)
        if (mprotect(d->buf[d->open[k]].p, d->buf[d->open[k]].bytes, prot)) {
            perror("emu_backend: mprotect");
            abort();
        }
}

/* Inside a call: the buffers it named readable by the CPU operator (every other one stays
   PROT_NONE, so an operator reaching past what it was handed faults too; opening only those keeps
   a call to a few mprotects however many buffers the device holds). */
static void emu_enter(emu_dev *d)
{
    d->calls++;
    emu_protect(d, PROT_READ | PROT_WRITE);
}

static void emu_leave(emu_dev *d)
{
    emu_protect(d, PROT_NONE);
    d->n_open = 0;
}

/* p must be NULL or inside one of the device's buffers, which the next call then opens. */
static void emu_need(emu_dev *d, const void *p, const char *op)
{
    if (!p)
        return;
    for (int i = 0; i < d->n; i++)
        if ((const char *)p >= d->buf[i].p && (const char *)p < d->buf[i].p + d->buf[i].bytes) {
            int k = 0;
            while (k < d->n_open && d->open[k] != i)
                k++;
            if (k == d->n_open && d->n_open == 16) {
                fprintf(stderr, "emu_backend: %s names more than 16 buffers\n", op);
                abort();
            }
            if (k == d->n_open)
                d->open[d->n_open++] = i;
            return;
        }
    fprintf(stderr, "emu_backend: %s was handed %p, which is not device memory\n", op, p);
    abort();
}

#define EMU_NEED(d, op, ...)                                                                     \
    do {                                                                                         \
        const void *ps_[] = {__VA_ARGS__};                                                       \
        for (size_t i_ = 0; i_ < sizeof ps_ / sizeof ps_[0]; i_++)                               \
            emu_need(d, ps_[i_], op);                                                            \
    } while (0)

/* Run the CPU's entry `op` with the device's memory open; the pointers listed must be its. */
#define EMU_CALL(ctx, op, ptrs, ...)                                                             \
    emu_dev *d_ = (ctx);                                                                         \
    EMU_NEED(d_, #op, EXPAND_PTRS ptrs);                                                         \
    emu_enter(d_);                                                                               \
    int rc_ = d_->cpu.ops->op(d_->cpu.ctx, __VA_ARGS__);                                        \
    emu_leave(d_);                                                                               \
    return rc_
#define EXPAND_PTRS(...) __VA_ARGS__

static int emu_alloc(void *ctx, size_t bytes, void **p)
{
    emu_dev *d = ctx;
    const size_t mapped = (bytes + 4095) / 4096 * 4096 + 4096;
    if (d->n == EMU_MAX_BUFS)
        return df_error(DF_ENOMEM, "emu_backend: more than %d buffers", EMU_MAX_BUFS);
    void *m = mmap(NULL, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return df_error(DF_ENOMEM, "emu_backend: out of memory for %zu bytes", bytes);
    d->buf[d->n].p = m;
    d->buf[d->n++].bytes = mapped;
    *p = m;
    return DF_OK;
}

static void emu_release(void *ctx, void *p)
{
    emu_dev *d = ctx;
    if (!p)
        return;
    for (int i = 0; i < d->n; i++)
        if (d->buf[i].p == p) {
            munmap(p, d->buf[i].bytes);
            d->buf[i] = d->buf[--d->n];
            return;
        }
    fprintf(stderr, "emu_backend: release of %p, not a buffer of the device\n", p);
    abort();
}

static int emu_upload(void *ctx, void *dst, const void *src, size_t bytes)
{
    emu_dev *d = ctx;
    emu_need(d, dst, "upload");
    d->uploads++;
    d->up_bytes += (int64_t)bytes;
    emu_enter(d);
    memcpy(dst, src, bytes);
    emu_leave(d);
    return DF_OK;
}

static int emu_download(void *ctx, void *dst, const void *src, size_t bytes)
{
    emu_dev *d = ctx;
    emu_need(d, src, "download");
    d->downloads++;
    d->down_bytes += (int64_t)bytes;
    emu_enter(d);
    memcpy(dst, src, bytes);
    emu_leave(d);
    return DF_OK;
}

static int emu_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    emu_dev *d = ctx;
    EMU_NEED(d, "copy", dst, src);
    d->copies++;
    emu_enter(d);
    memmove(dst, src, bytes);
    emu_leave(d);
    return DF_OK;
}

/* EMU_CALL on the CPU backend under the device's bf16 context (emu_bf16). */
#define EMU_CALL16(ctx, op, ptrs, ...)                                                           \
    emu_dev *d_ = (ctx);                                                                         \
    EMU_NEED(d_, #op, EXPAND_PTRS ptrs);                                                         \
    emu_enter(d_);                                                                               \
    int rc_ = d_->cpu16.ops->op(d_->cpu16.ctx, __VA_ARGS__);                                    \
    emu_leave(d_);                                                                               \
    return rc_

static int emu_zero(void *ctx, float *x, int64_t n) { EMU_CALL(ctx, zero, (x), x, n); }
static int emu_sync(void *ctx) { return ((emu_dev *)ctx)->cpu.ops->sync(((emu_dev *)ctx)->cpu.ctx); }

static int emu_gemm(void *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, const float *B, float beta, float *C)
{
    EMU_CALL(ctx, gemm, (A, B, C), ta, tb, M, N, K, alpha, A, B, beta, C);
}
static int emu_gemm_bf16(void *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                         float alpha, const float *A, const float *B, float beta, float *C)
{
    ((emu_dev *)ctx)->w16_calls++;
    EMU_CALL16(ctx, gemm_bf16, (A, B, C), ta, tb, M, N, K, alpha, A, B, beta, C);
}
static int emu_gemm_w16(void *ctx, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, const uint16_t *W, float beta, float *C)
{
    ((emu_dev *)ctx)->w16_calls++;
    EMU_CALL16(ctx, gemm_w16, (A, W, C), tb, M, N, K, alpha, A, W, beta, C);
}
static int emu_embedding_fwd_w16(void *ctx, float *out, const int32_t *ids,
                                 const uint16_t *table16, int64_t T, int64_t H)
{
    EMU_CALL16(ctx, embedding_fwd_w16, (out, ids, table16), out, ids, table16, T, H);
}
static int emu_lmhead_fwd_w16(void *ctx, float *logp, float *entropy, float *sum_pi_sq, float *lse,
                              const float *h, const uint16_t *W16, const int32_t *target, int64_t n,
                              int64_t V, int64_t H, float temperature, float softcap, float *scratch)
{
    EMU_CALL16(ctx, lmhead_fwd_w16, (logp, entropy, sum_pi_sq, lse, h, W16, target, scratch), logp,
               entropy, sum_pi_sq, lse, h, W16, target, n, V, H, temperature, softcap, scratch);
}
static int emu_lmhead_bwd_w16(void *ctx, float *dh, float *dW, const float *dlogp,
                              const float *dentropy, const float *h, const uint16_t *W16,
                              const int32_t *target, const float *lse, const float *entropy,
                              int64_t n, int64_t V, int64_t H, float temperature, float softcap,
                              float *scratch)
{
    EMU_CALL16(ctx, lmhead_bwd_w16, (dh, dW, dlogp, dentropy, h, W16, target, lse, entropy, scratch),
               dh, dW, dlogp, dentropy, h, W16, target, lse, entropy, n, V, H, temperature, softcap,
               scratch);
}
static int emu_bf16_from_f32(void *ctx, uint16_t *dst, const float *src, int64_t n)
{
    ((emu_dev *)ctx)->conversions++;
    EMU_CALL(ctx, bf16_from_f32, (dst, src), dst, src, n);
}
static int emu_rows_fill(void *ctx, float *y, const float *b, int64_t M, int64_t N)
{
    EMU_CALL(ctx, rows_fill, (y, b), y, b, M, N);
}
static int emu_col_sum_add(void *ctx, float *db, const float *dy, int64_t M, int64_t N)
{
    EMU_CALL(ctx, col_sum_add, (db, dy), db, dy, M, N);
}
static int emu_gather_rows(void *ctx, float *dst, const float *src, const int64_t *rows,
                           int64_t n, int64_t H)
{
    EMU_CALL(ctx, gather_rows, (dst, src, rows), dst, src, rows, n, H);
}
static int emu_scatter_add_rows(void *ctx, float *dst, const float *src, const int64_t *rows,
                                int64_t n, int64_t H)
{
    EMU_CALL(ctx, scatter_add_rows, (dst, src, rows), dst, src, rows, n, H);
}
static int emu_embedding_fwd(void *ctx, float *out, const int32_t *ids, const float *table,
                             int64_t T, int64_t H)
{
    EMU_CALL(ctx, embedding_fwd, (out, ids, table), out, ids, table, T, H);
}
static int emu_embedding_bwd(void *ctx, float *dtable, const float *dout, const int32_t *ids,
                             int64_t T, int64_t H)
{
    EMU_CALL(ctx, embedding_bwd, (dtable, dout, ids), dtable, dout, ids, T, H);
}
static int emu_rmsnorm_fwd(void *ctx, float *out, float *rstd, const float *x, const float *w,
                           int64_t T, int64_t H, float eps)
{
    EMU_CALL(ctx, rmsnorm_fwd, (out, rstd, x, w), out, rstd, x, w, T, H, eps);
}
static int emu_rmsnorm_bwd(void *ctx, float *dx, float *dw, const float *dout, const float *x,
                           const float *w, const float *rstd, int64_t T, int64_t H)
{
    EMU_CALL(ctx, rmsnorm_bwd, (dx, dw, dout, x, w, rstd), dx, dw, dout, x, w, rstd, T, H);
}
static int emu_rope_apply(void *ctx, float *x, const int32_t *pos, int64_t T, int64_t nh,
                          int64_t hd, int64_t rd, const float *cs, const float *sn, bool inverse)
{
    EMU_CALL(ctx, rope_apply, (x, pos, cs, sn), x, pos, T, nh, hd, rd, cs, sn, inverse);
}
static int emu_attention_fwd(void *ctx, float *out, float *lse, const float *q, const float *k,
                             const float *v, const df_backend_seqs *s, int64_t nh, int64_t nkv,
                             int64_t hd)
{
    EMU_CALL(ctx, attention_fwd, (out, lse, q, k, v, s->offsets), out, lse, q, k, v, s, nh, nkv,
             hd);
}
static int emu_attention_bwd(void *ctx, float *dq, float *dk, float *dv, const float *dout,
                             const float *out, const float *lse, const float *q, const float *k,
                             const float *v, const df_backend_seqs *s, int64_t nh, int64_t nkv,
                             int64_t hd)
{
    EMU_CALL(ctx, attention_bwd, (dq, dk, dv, dout, out, lse, q, k, v, s->offsets), dq, dk, dv,
             dout, out, lse, q, k, v, s, nh, nkv, hd);
}
static int emu_kv_write(void *ctx, const df_backend_kv *kv, int64_t layer, const float *k,
                        const float *v, const int32_t *slot, const int32_t *pos, int64_t n)
{
    EMU_CALL(ctx, kv_write, (kv->k, kv->v, k, v, slot, pos), kv, layer, k, v, slot, pos, n);
}
static int emu_kv_copy(void *ctx, const df_backend_kv *kv, int64_t src, int64_t dst, int64_t len)
{
    EMU_CALL(ctx, kv_copy, (kv->k, kv->v), kv, src, dst, len);
}
static int64_t emu_kv_scratch_floats(void *ctx, int64_t nh, int64_t max_len)
{
    emu_dev *d = ctx;
    return d->cpu.ops->kv_scratch_floats(d->cpu.ctx, nh, max_len);
}
static int emu_kv_attention(void *ctx, float *out, const float *q, const df_backend_kv *kv,
                            int64_t layer, const int32_t *slot, const int32_t *pos, int64_t n,
                            int64_t nh, int64_t nkv, int64_t hd, int64_t window, float softcap,
                            float *scratch)
{
    ((emu_dev *)ctx)->kv_attentions++;
    EMU_CALL(ctx, kv_attention, (out, q, kv->k, kv->v, slot, pos, scratch), out, q, kv, layer,
             slot, pos, n, nh, nkv, hd, window, softcap, scratch);
}
static int emu_swiglu_fwd(void *ctx, float *out, const float *gate, const float *up, int64_t n)
{
    EMU_CALL(ctx, swiglu_fwd, (out, gate, up), out, gate, up, n);
}
static int emu_swiglu_bwd(void *ctx, float *dgate, float *dup, const float *dout,
                          const float *gate, const float *up, int64_t n)
{
    EMU_CALL(ctx, swiglu_bwd, (dgate, dup, dout, gate, up), dgate, dup, dout, gate, up, n);
}
static int emu_geglu_fwd(void *ctx, float *out, const float *gate, const float *up, int64_t n)
{
    EMU_CALL(ctx, geglu_fwd, (out, gate, up), out, gate, up, n);
}
static int emu_geglu_bwd(void *ctx, float *dgate, float *dup, const float *dout,
                         const float *gate, const float *up, int64_t n)
{
    EMU_CALL(ctx, geglu_bwd, (dgate, dup, dout, gate, up), dgate, dup, dout, gate, up, n);
}
static int64_t emu_lmhead_scratch_floats(void *ctx, int64_t n, int64_t V, int64_t H)
{
    emu_dev *d = ctx;
    return d->cpu.ops->lmhead_scratch_floats(d->cpu.ctx, n, V, H);
}
static int emu_lmhead_fwd(void *ctx, float *logp, float *entropy, float *sum_pi_sq, float *lse,
                          const float *h, const float *W, const int32_t *target, int64_t n, int64_t V,
                          int64_t H, float temperature, float softcap, float *scratch)
{
    EMU_CALL(ctx, lmhead_fwd, (logp, entropy, sum_pi_sq, lse, h, W, target, scratch), logp, entropy,
             sum_pi_sq, lse, h, W, target, n, V, H, temperature, softcap, scratch);
}
static int emu_lmhead_bwd(void *ctx, float *dh, float *dW, const float *dlogp,
                          const float *dentropy, const float *h, const float *W,
                          const int32_t *target, const float *lse, const float *entropy,
                          int64_t n, int64_t V, int64_t H, float temperature, float softcap,
                          float *scratch)
{
    EMU_CALL(ctx, lmhead_bwd, (dh, dW, dlogp, dentropy, h, W, target, lse, entropy, scratch), dh,
             dW, dlogp, dentropy, h, W, target, lse, entropy, n, V, H, temperature, softcap, scratch);
}

static int64_t emu_sample_scratch_floats(void *ctx, int64_t n, int64_t V, int64_t H)
{
    (void)ctx, (void)H;
    return n * V + df_sample_work_bytes(V) / 4 + 16;
}

/* The host path's logits (df_gemm_nt over the n rows) and sampler, on the device's memory. */
static int emu_sample(void *ctx, int32_t *tok, float *logp, const float *h, const float *W,
                      int64_t n, int64_t V, int64_t H, float temperature, float softcap,
                      int64_t top_k, float top_p, const double *u, float *scratch)
{
    emu_dev *d = ctx;
    if (!tok || !h || !W || !scratch) {
        fprintf(stderr, "emu_backend: sample was handed a NULL token, row, head or scratch\n");
        abort();
    }
    EMU_NEED(d, "sample", tok, logp, h, W, scratch);
    d->samples++;
    emu_enter(d);
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.temperature = temperature, sp.top_k = (int)top_k, sp.top_p = top_p;
    sp.greedy = temperature == 0.0f;
    df_gemm_nt(n, V, H, 1.0f, h, W, 0.0f, scratch);
    if (softcap > 0.0f) /* Gemma 2's final-logit cap, as the host path's logits */
        for (int64_t i = 0; i < n * V; i++)
            scratch[i] = softcap * tanhf(scratch[i] / softcap);
    void *work = (void *)(((uintptr_t)(scratch + n * V) + 63) / 64 * 64);
    for (int64_t i = 0; i < n; i++) {
        float lp;
        tok[i] = df_sample_token_u(scratch + i * V, V, &sp, sp.greedy ? 0.0 : u[i], work, &lp);
        if (logp)
            logp[i] = lp;
    }
    emu_leave(d);
    return DF_OK;
}

/*
 * How far a log-prob the emulated device's `sample` records may sit from the host path's for the
 * same token: only the LM head's row blocking differs (the device samples the slots' gathered
 * rows, the host its chunk's rows, and oneDNN may sum each H-term logit in another order):
 * every logit z_v = h . W_v within
 * gamma_H sum_i |h_i W_vi| <= gamma_H ||h|| ||W_v||, with ||h|| <= sqrt(H) max |g| after the
 * final RMSNorm (gain g: w, or 1 + w where the norms scale by 1 + w as Gemma's), and
 * log p = z_t / T - lse(z / T) moving by at most twice the largest. Gemma 2's final-logit cap
 * C tanhf(z / C), evaluated alike on both sides, is 1-Lipschitz in z, but each evaluation
 * rounds: z / C and the product by C once each (u), tanhf within 2 ulps (glibc's documented
 * bound; 4u relative), the rounded argument moving the result by at most C u max x sech^2 x
 * < C u / 2: within 6 u C of C tanh(z / C), so two evaluations add 12 u C to each logit's
 * difference (gamma_12 C here).
 */
static inline double emu_head_logp_bound(const df_model *m, float T)
{
    const int64_t H = m->cfg.hidden_size, V = m->cfg.vocab_size;
    const double one = m->cfg.norm_plus_one ? 1.0 : 0.0;
    double g = 0, w = 0;
    for (int64_t i = 0; i < H; i++)
        g = fmax(g, fabs(one + m->w.final_norm[i]));
    for (int64_t v = 0; v < V; v++) {
        double s = 0;
        for (int64_t i = 0; i < H; i++)
            s += (double)m->w.lm_head[v * H + i] * m->w.lm_head[v * H + i];
        w = fmax(w, sqrt(s));
    }
    const double C = m->cfg.final_logit_softcap > 0 ? (float)m->cfg.final_logit_softcap : 0.0;
    return 2 * (df_tol_gamma((double)H, DF_U32) * sqrt((double)H) * g * w + df_tol_gamma(12, DF_U32) * C) / T;
}

static int emu_adamw_step(void *ctx, float *p, const float *g, float *m, float *v, int64_t n,
                          const df_adamw_config *cfg, int64_t step, double lr)
{
    ((emu_dev *)ctx)->adamw_steps++;
    EMU_CALL(ctx, adamw_step, (p, g, m, v), p, g, m, v, n, cfg, step, lr);
}
static int emu_grad_norm(void *ctx, const float *x, int64_t n, double *norm)
{
    EMU_CALL(ctx, grad_norm, (x), x, n, norm); /* norm: a host result */
}
static int emu_scale(void *ctx, float *x, int64_t n, float s) { EMU_CALL(ctx, scale, (x), x, n, s); }
static int emu_group_open(void *ctx, df_comm *group, void **h)
{
    emu_dev *d = ctx;
    return d->cpu.ops->group_open(d->cpu.ctx, group, h);
}
static void emu_group_close(void *ctx, void *h)
{
    emu_dev *d = ctx;
    d->cpu.ops->group_close(d->cpu.ctx, h);
}
static int emu_allreduce_sum(void *ctx, void *h, float *x, int64_t n)
{
    ((emu_dev *)ctx)->allreduces++;
    EMU_CALL(ctx, allreduce_sum, (x), h, x, n); /* MPI reads and writes x while it is open */
}

/* The coordinator's payload move: MPI's alltoallv over the handle's group (the CPU's handle is
 * the group) from the device's memory into it, each received block's size checked against the
 * caller's recv_counts (the counts exchange the seam leaves to the caller). */
static int emu_alltoallv(void *ctx, void *h, const void *send, const int64_t *send_counts,
                         void *recv, const int64_t *recv_counts)
{
    emu_dev *d = ctx;
    df_comm *group = h;
    int size = df_comm_size(group);
    EMU_NEED(d, "alltoallv", send, recv);
    d->alltoallvs++;
    for (int p = 0; p < size; p++)
        d->a2a_bytes += send_counts[p];
    void *got = NULL;
    int64_t *counts = NULL, *displs = NULL;
    emu_enter(d);
    int rc = df_comm_alltoallv(group, send, send_counts, &got, &counts, &displs);
    for (int p = 0; !rc && p < size; p++)
        if (counts[p] != recv_counts[p]) {
            fprintf(stderr, "emu_backend: alltoallv: rank %d sent %lld bytes, recv_counts says %lld\n",
                    p, (long long)counts[p], (long long)recv_counts[p]);
            abort();
        }
    if (!rc && size > 0)
        memcpy(recv, got, (size_t)(displs[size - 1] + counts[size - 1]));
    emu_leave(d);
    free(got);
    free(counts);
    free(displs);
    return rc;
}

/* A fresh emulated device (name "emu"); *d must outlive every use of the backend. */
static df_backend emu_open(emu_dev *d)
{
    memset(d, 0, sizeof *d);
    d->cpu = df_backend_cpu();
    d->ops = (df_backend_ops){
        .name = "emu", .host_memory = false, .attention_window = true, .attention_softcap = true,
        .alloc = emu_alloc, .release = emu_release, .upload = emu_upload,
        .download = emu_download, .copy = emu_copy, .zero = emu_zero, .sync = emu_sync,
        .gemm = emu_gemm, .rows_fill = emu_rows_fill, .col_sum_add = emu_col_sum_add,
        .gather_rows = emu_gather_rows, .scatter_add_rows = emu_scatter_add_rows,
        .embedding_fwd = emu_embedding_fwd, .embedding_bwd = emu_embedding_bwd,
        .rmsnorm_fwd = emu_rmsnorm_fwd, .rmsnorm_bwd = emu_rmsnorm_bwd,
        .rope_apply = emu_rope_apply, .attention_fwd = emu_attention_fwd,
        .attention_bwd = emu_attention_bwd, .kv_write = emu_kv_write, .kv_copy = emu_kv_copy,
        .kv_scratch_floats = emu_kv_scratch_floats, .kv_attention = emu_kv_attention,
        .swiglu_fwd = emu_swiglu_fwd, .swiglu_bwd = emu_swiglu_bwd,
        .geglu_fwd = emu_geglu_fwd, .geglu_bwd = emu_geglu_bwd,
        .lmhead_scratch_floats = emu_lmhead_scratch_floats, .lmhead_fwd = emu_lmhead_fwd,
        .lmhead_bwd = emu_lmhead_bwd, .sample_scratch_floats = emu_sample_scratch_floats,
        .sample = emu_sample, .adamw_step = emu_adamw_step,
        .grad_norm = emu_grad_norm, .scale = emu_scale, .group_open = emu_group_open,
        .group_close = emu_group_close, .allreduce_sum = emu_allreduce_sum,
        .alltoallv = emu_alltoallv,
        .bf16_from_f32 = emu_bf16_from_f32};
    return (df_backend){&d->ops, d};
}

/* Elements of one operand the emulated device's bf16 context rounds per call: larger than any
 * test model's (a call over it would fall back to float32 sgemm, ops_mm_bf16.c). */
#define EMU_MM_ELEMS ((int64_t)1 << 22)

/*
 * Mixed precision on the device: its gemm_w16, embedding_fwd_w16, lmhead_*_w16 and gemm_bf16
 * become the CPU's under a bf16 context of its own, so a bf16 pass here computes the CPU's bf16
 * bits. false (nothing changed) where the CPU has no native bf16 kernels
 * (df_model_bf16_available) or the context cannot be made.
 */
static inline bool emu_bf16(emu_dev *d)
{
    if (df_model_bf16_available() != DF_OK || (!d->mm && df_mm_ctx_create(EMU_MM_ELEMS, &d->mm)))
        return false;
    d->cpu16 = df_backend_cpu_bf16(&d->mm);
    d->ops.gemm_w16 = emu_gemm_w16;
    d->ops.gemm_bf16 = emu_gemm_bf16;
    d->ops.embedding_fwd_w16 = emu_embedding_fwd_w16;
    d->ops.lmhead_fwd_w16 = emu_lmhead_fwd_w16;
    d->ops.lmhead_bwd_w16 = emu_lmhead_bwd_w16;
    return true;
}

/* Without the bf16 LM head (a device that has none): the head then runs in float32 there. */
static inline void emu_no_head16(emu_dev *d)
{
    d->ops.lmhead_fwd_w16 = NULL;
    d->ops.lmhead_bwd_w16 = NULL;
}

/* What emu_bf16 made (the device's buffers are the test's to release). */
static inline void emu_close(emu_dev *d)
{
    df_mm_ctx_free(d->mm);
    d->mm = NULL;
}

/* Take the optimizer's entries away: a device backend whose training steps on the host. */
static inline void emu_no_optim(emu_dev *d)
{
    d->ops.adamw_step = NULL;
    d->ops.grad_norm = NULL;
    d->ops.scale = NULL;
    d->ops.group_open = NULL;
    d->ops.group_close = NULL;
    d->ops.allreduce_sum = NULL;
    d->ops.alltoallv = NULL;
}

/* Every buffer released (a leak check for the code under test); the count left. */
static int emu_buffers(const emu_dev *d) { return d->n; }

#endif /* DF_TESTS_EMU_BACKEND_H */
