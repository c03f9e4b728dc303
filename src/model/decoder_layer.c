/* The one decoder layer (decoder_layer.h): training's forward and recompute, the rollout's
 * prefill and decode. */
#include "model/decoder_layer.h"
#include "model/moe.h"

#include <assert.h>
#include <stdlib.h>

/* A call of the layer: where operators run and the first failure. */
typedef struct {
    const df_backend *be;
    int *err;
    bool packed; /* the layer's bf16 weights are packed (df_layer16.packed) */
} run;

/* Call operator `op` of the backend unless an earlier call of this pass failed. */
#define LB(r, op, ...) \
    (*(r)->err ? (void)0 : (void)(*(r)->err = (r)->be->ops->op((r)->be->ctx, __VA_ARGS__)))

/* C = alpha A W^T + beta C for a [N, K] weight: its bf16 copy W16 (gemm_w16, or
 * gemm_w16_packed on a packed copy) when there is one, else the float32 GEMM. */
static void wmm(const run *r, int64_t M, int64_t N, int64_t K, const float *A, const float *W,
                const uint16_t *W16, float beta, float *C)
{
    if (W16 && r->packed)
        LB(r, gemm_w16_packed, M, N, K, 1.0f, A, W16, beta, C);
    else if (W16)
        LB(r, gemm_w16, true, M, N, K, 1.0f, A, W16, beta, C);
    else
        LB(r, gemm, false, true, M, N, K, 1.0f, A, W, beta, C);
}

/* y[M,N] = x W^T + b: the bias rows first, the GEMM accumulating onto them. */
static void linear(const run *r, float *y, const float *x, const float *W, const uint16_t *W16,
                   const float *b, int64_t M, int64_t N, int64_t K)
{
    if (b)
        LB(r, rows_fill, y, b, M, N);
    wmm(r, M, N, K, x, W, W16, b ? 1.0f : 0.0f, y);
}

/* dst[n] += src[n]: the column sums of one row (col_sum_add with M = 1), a single rounded add
 * per element on every backend, so the seam needs no operator of its own for it. */
static void add(const run *r, float *dst, const float *src, int64_t n)
{
    LB(r, col_sum_add, dst, src, 1, n);
}

/* n1 = rmsnorm1(x) (the post-norm layer projects x itself), then q / k / v with their biases,
 * the q/k norms and RoPE. */
static void qkv(const run *r, const df_model_config *c, const df_layer_view *w,
                const df_layer16 *w16, int64_t l, int64_t T, const df_layer_bufs *b)
{
    const int64_t H = c->hidden_size, nh = c->num_attention_heads, nkv = c->num_key_value_heads;
    const int64_t hd = c->head_dim, qd = nh * hd, kvd = nkv * hd;
    const float eps = (float)c->rms_norm_eps;
    const float *in = b->x;
    if (c->sandwich_norm) { /* gemma3: the post-norm layer's inputs normalised too */
        LB(r, rmsnorm_fwd, b->xin, b->rstdin, b->x, w->ln1, T, H, eps);
        in = b->xin;
    } else if (!c->post_norm) {
        LB(r, rmsnorm_fwd, b->xn1, b->rstd1, b->x, w->ln1, T, H, eps);
        in = b->xn1;
    }
    if (c->qk_norm) {
        /* qwen3's per-head RMSNorms (T n rows of hd) or olmo2's over the whole projection (T rows
         * of n hd): df_qk_norm_width. Training keeps the projections for the norms' backward. */
        const int64_t wq = df_qk_norm_width(c, nh), wk = df_qk_norm_width(c, nkv);
        linear(r, b->qraw, in, w->wq, w16 ? w16->wq : NULL, w->bq, T, qd, H);
        linear(r, b->kraw, in, w->wk, w16 ? w16->wk : NULL, w->bk, T, kvd, H);
        LB(r, rmsnorm_fwd, b->q, b->qrstd, b->qraw, w->q_norm, T * qd / wq, wq, eps);
        LB(r, rmsnorm_fwd, b->k, b->krstd, b->kraw, w->k_norm, T * kvd / wk, wk, eps);
    } else {
        linear(r, b->q, in, w->wq, w16 ? w16->wq : NULL, w->bq, T, qd, H);
        linear(r, b->k, in, w->wk, w16 ? w16->wk : NULL, w->bk, T, kvd, H);
    }
    linear(r, b->v, in, w->wv, w16 ? w16->wv : NULL, w->bv, T, kvd, H);
    const int64_t rd = df_model_rope_dim(c);
    const bool local = df_model_layer_local_rope(c, l);
    const float *cs = local ? b->rope_cos_local : b->rope_cos, *sn = local ? b->rope_sin_local : b->rope_sin;
    LB(r, rope_apply, b->q, b->pos, T, nh, hd, rd, cs, sn, false);
    LB(r, rope_apply, b->k, b->pos, T, nkv, hd, rd, cs, sn, false);
    const float qs = df_model_q_scale(c); /* the attention's 1 / sqrt(hd) then scales by qpas^-0.5 */
    if (qs != 1.0f)
        LB(r, scale, b->q, T * qd, qs);
}

/* The residual stream and queries of the rows that go on past the attention: all of them, or
 * (prefill's last layer) the output rows gathered into at->xc / qc. */
typedef struct {
    int64_t T;
    const float *x, *q;
    float *h, *xout;
    const int32_t *slot, *pos;
} rows_on;

/* ATTENTION: packed causal (training) or through the KV cache (rollout). */
static void attention(const run *r, const df_model_config *c, int64_t l, int64_t T,
                      const df_layer_bufs *b, const df_layer_attn *at, rows_on *o)
{
    const int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads, hd = c->head_dim;
    const int64_t H = c->hidden_size, window = df_model_layer_window(c, l);
    *o = (rows_on){T, b->x, b->q, b->h, b->xout, at->slot, b->pos};
    if (!at->kv) {
        df_backend_seqs seqs = *at->seqs;
        seqs.window = window;
        seqs.softcap = (float)c->attn_logit_softcap; /* Gemma 2 (0: none) */
        LB(r, attention_fwd, b->att, at->lse, b->q, b->k, b->v, &seqs, nh, nkv, hd);
        return;
    }
    LB(r, kv_write, at->kv, l, b->k, b->v, at->slot, b->pos, T);
    if (at->out_rows) { /* the rest of the layer for the output rows only */
        LB(r, gather_rows, at->xc, b->x, at->out_rows, at->n_out, H);
        LB(r, gather_rows, at->qc, b->q, at->out_rows, at->n_out, nh * hd);
        *o = (rows_on){at->n_out, at->xc, at->qc, at->xc, b->xout ? at->xc : NULL,
                       at->out_slot, at->out_pos};
    }
    LB(r, kv_attention, b->att, o->q, at->kv, l, o->slot, o->pos, o->T, nh, nkv, hd, window,
       (float)c->attn_logit_softcap, at->scratch);
}

/* dst = res + rmsnorm(y) over n rows of H: the norm into dst, then res added; when dst is res
 * (the rollout's and the forward-only pass's rows, where nothing reads y again) the norm is
 * made in y and added to res. Either way each element is one rounded add of the same two
 * values. */
static void norm_add(const run *r, float *dst, const float *res, float *y, const float *wn,
                     float *rstd, int64_t n, int64_t H, float eps)
{
    float *out = dst == res ? y : dst;
    LB(r, rmsnorm_fwd, out, rstd, y, wn, n, H, eps);
    add(r, dst, dst == res ? y : res, n * H);
}

/* The post-norm layer after the attention (olmo2, Olmo2DecoderLayer):
 *   h = x + ln2(att W_o^T (+ b_o)),  x' = h + ln3(down(silu(gate(h)) * up(h))),
 * the sublayers' outputs, the norms' inputs the backward reads, kept in xn1 / xn2 with their
 * statistics in rstd1 / rstd2. */
static void post_norm_rest(const run *r, const df_model_config *c, const df_layer_view *w,
                           const df_layer16 *w16, const df_layer_bufs *b, const rows_on *o)
{
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    const int64_t qd = c->num_attention_heads * c->head_dim;
    const float eps = (float)c->rms_norm_eps;
    assert(o->xout); /* the checkpointed recompute runs the whole post-norm layer (forward.c) */
    linear(r, b->xn1, b->att, w->wo, w16 ? w16->wo : NULL, w->bo, o->T, H, qd);
    norm_add(r, o->h, o->x, b->xn1, w->ln2, b->rstd1, o->T, H, eps);
    const float *in = o->h; /* the MLP's input: h, or (sandwich_norm) its pre-feedforward norm */
    if (c->sandwich_norm) {
        LB(r, rmsnorm_fwd, b->xff, b->rstdff, o->h, w->ln_ff, o->T, H, eps);
        in = b->xff;
    }
    const int64_t C = df_decoder_mlp_chunk(b, o->T);
    for (int64_t r0 = 0; r0 < o->T && !*r->err; r0 += C) {
        const int64_t n = o->T - r0 < C ? o->T - r0 : C;
        df_decoder_mlp_in(r->be, c, w, w16, n, in + r0 * H, b->gate, b->up, r->err);
        df_decoder_mlp_act(r->be, c, b->act, b->gate, b->up, n * I, r->err);
        wmm(r, n, H, I, b->act, w->w_down, w16 ? w16->w_down : NULL, 0.0f, b->xn2 + r0 * H);
    }
    norm_add(r, o->xout, o->h, b->xn2, w->ln3, b->rstd2, o->T, H, eps);
}

int df_decoder_layer(const df_backend *be, const df_model_config *c, const df_layer_view *w,
                     const df_layer16 *w16, int64_t l, int64_t T, const df_layer_bufs *b,
                     const df_layer_attn *at, int *err)
{
    const run r = {be, err, w16 && w16->packed};
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    const int64_t qd = c->num_attention_heads * c->head_dim;
    const float eps = (float)c->rms_norm_eps;
    qkv(&r, c, w, w16, l, T, b);
    rows_on o;
    attention(&r, c, l, T, b, at, &o);
    if (c->post_norm) {
        post_norm_rest(&r, c, w, w16, b, &o);
        return *err;
    }
    /* h = x + att W_o^T: the residual add rides on the GEMM's beta = 1; an o_proj bias on a
     * rank-1 one (ones b^T). */
    if (o.h != o.x)
        LB(&r, copy, o.h, o.x, (size_t)(o.T * H) * sizeof(float));
    wmm(&r, o.T, H, qd, b->att, w->wo, w16 ? w16->wo : NULL, 1.0f, o.h);
    if (w->bo)
        LB(&r, gemm, false, false, o.T, H, 1, 1.0f, b->ones, w->bo, 1.0f, o.h);
    LB(&r, rmsnorm_fwd, b->xn2, b->rstd2, o.h, w->ln2, o.T, H, eps);
    const int64_t C = df_decoder_mlp_chunk(b, o.T);
    const bool moe = df_model_layer_moe(c, l);
    if (!o.xout) { /* the recompute: the backward forms silu(gate) * up itself */
        if (C == o.T && !moe) /* chunked (or sparse), the backward projects each chunk again itself */
            df_decoder_mlp_in(be, c, w, w16, o.T, b->xn2, b->gate, b->up, err);
        return *err;
    }
    if (o.xout != o.h)
        LB(&r, copy, o.xout, o.h, (size_t)(o.T * H) * sizeof(float));
    /* Row-local, so chunks of C rows give every row the sums the whole would; gate / up / act
     * then hold C rows, not T (Mini-Sequence Transformer, arXiv 2407.15892, section 3) */
    for (int64_t r0 = 0; r0 < o.T && !*err; r0 += C) {
        const int64_t n = o.T - r0 < C ? o.T - r0 : C;
        if (moe) { /* the sparse block (moe.h), onto the residual like down's GEMM; the routes of
                      the output rows only (prefill's last layer) are those rows' */
            const int64_t *map = at->kv && at->out_rows ? at->out_rows + r0 : NULL, off = map ? 0 : r0 * b->route_stride;
            const df_moe_routes rt = {b->routes_in ? b->routes_in + off : NULL, b->routes_out ? b->routes_out + off : NULL,
                                      b->route_stride, map};
            df_moe_fwd(be, c, w, w16, &rt, n, b->xn2 + r0 * H, o.xout + r0 * H, b->gate, b->up, b->act, b->moe, err);
            continue;
        }
        df_decoder_mlp_in(be, c, w, w16, n, b->xn2 + r0 * H, b->gate, b->up, err);
        df_decoder_mlp_act(be, c, b->act, b->gate, b->up, n * I, err);
        wmm(&r, n, H, I, b->act, w->w_down, w16 ? w16->w_down : NULL, 1.0f, o.xout + r0 * H);
    }
    return *err;
}

void df_decoder_mlp_in(const df_backend *be, const df_model_config *c, const df_layer_view *w,
                       const df_layer16 *w16, int64_t n, const float *xn2, float *gate, float *up,
                       int *err)
{
    const run r = {be, err, w16 && w16->packed};
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    linear(&r, gate, xn2, w->w_gate, w16 ? w16->w_gate : NULL, NULL, n, I, H);
    linear(&r, up, xn2, w->w_up, w16 ? w16->w_up : NULL, NULL, n, I, H);
}

void df_decoder_mlp_act(const df_backend *be, const df_model_config *c, float *act, const float *gate,
                        const float *up, int64_t n, int *err)
{
    const run r = {be, err, false};
    if (c->geglu)
        LB(&r, geglu_fwd, act, gate, up, n);
    else
        LB(&r, swiglu_fwd, act, gate, up, n);
}

/* ---- (1 + w) norm weights (Gemma3RMSNorm) ---- */

static int64_t ones_len(const df_model_config *c)
{
    return c->hidden_size > c->head_dim ? c->hidden_size : c->head_dim;
}

int64_t df_norm_shift_floats(const df_model_config *c)
{
    if (!c->norm_plus_one)
        return 0;
    return ones_len(c) + c->hidden_size + c->num_hidden_layers * (4 * c->hidden_size + 2 * c->head_dim);
}

int df_norm_shift_init(const df_backend *be, const df_model_config *c, float *blob)
{
    const int64_t n = ones_len(c);
    if (be->ops->host_memory) {
        for (int64_t i = 0; i < n; i++)
            blob[i] = 1.0f;
        return DF_OK;
    }
    float *h = malloc((size_t)n * sizeof(float));
    if (!h)
        return df_error(DF_ENOMEM, "out of memory for the norms' ones");
    for (int64_t i = 0; i < n; i++)
        h[i] = 1.0f;
    int rc = be->ops->upload(be->ctx, blob, h, (size_t)n * sizeof(float));
    free(h);
    return rc;
}

/* *dst = 1 + src over n floats at *next (advanced): the ones row, then src added onto it. */
static float *shift(const run *r, float **next, const float *ones, const float *src, int64_t n)
{
    float *d = *next;
    *next += n;
    LB(r, copy, d, ones, (size_t)n * sizeof(float));
    add(r, d, src, n);
    return d;
}

void df_norm_shift_view(const df_backend *be, const df_model_config *c, const df_model_view *w, float *blob,
                        df_layer_view *layers, df_model_view *out, int *err)
{
    const run r = {be, err, false};
    const int64_t H = c->hidden_size, hd = c->head_dim;
    const float *ones = blob;
    float *next = blob + ones_len(c);
    *out = *w;
    out->layers = layers;
    out->final_norm = shift(&r, &next, ones, w->final_norm, H);
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        const df_layer_view *s = &w->layers[l];
        df_layer_view *d = &layers[l];
        *d = *s;
        d->ln1 = shift(&r, &next, ones, s->ln1, H);
        d->ln2 = shift(&r, &next, ones, s->ln2, H);
        d->ln_ff = shift(&r, &next, ones, s->ln_ff, H);
        d->ln3 = shift(&r, &next, ones, s->ln3, H);
        if (c->qk_norm) { /* gemma3_text's; Gemma 2 has none */
            d->q_norm = shift(&r, &next, ones, s->q_norm, hd);
            d->k_norm = shift(&r, &next, ones, s->k_norm, hd);
        }
    }
}
