/*
 * Training backward pass (model.h): the reverse of forward.c, layer by layer,
 * ACCUMULATING parameter gradients into a blob with the model's layout. The
 * residual-stream gradient lives in a->dres; RMSNorm backwards add into it,
 * which is how the residual connections' identity paths are carried. The
 * LM head and a value model's score head share the trunk's backward. With
 * activation checkpointing each layer's activations are recomputed from its
 * saved input just before its backward (acts.h).
 */
#include "model/acts.h"
#include "model/decoder_layer.h"
#include "model/lora_grad.h"
#include "model/moe.h"
#include "model/ops.h"

#include <string.h>

/* Backward of a q/k norm (qwen3's per head, olmo2's over the whole projection): dx OVERWRITTEN
 * (rmsnorm_bwd accumulates, so it starts from zero), dw accumulated. */
static void head_norm_bwd(df_acts *a, float *dx, float *dw, const float *dy, const float *x,
                          const float *w, const float *rstd, int64_t rows, int64_t hd)
{
    DF_BE(a, zero, dx, rows * hd);
    DF_BE(a, rmsnorm_bwd, dx, dw, dy, x, w, rstd, rows, hd);
}

/* Where a sublayer's gradients go. Pre-norm: its output's gradient is the residual's (dres) and
 * its input's is gathered in dxn (beta 0) for the input norm's backward to add onto dres.
 * Post-norm: its output's gradient is its norm's backward of dres (made in dxn) and its input,
 * the residual itself, adds its gradient onto dres (beta 1). */
typedef struct {
    const float *dy; /* [T, out] the sublayer's output gradient */
    float *din;      /* [T, in] where its input's gradient goes */
    float beta;      /* onto din: 0 (overwrite) or 1 (add) */
    const float *in; /* [T, in] its input (the projections' x of their weight gradients) */
} sub_grads;

/* Post-norm: dxn = rmsnorm_bwd(dres) of the norm whose input y (statistics rstd, weight wn,
 * gradient gn) the sublayer produced; the sublayer then sends its input's gradient onto dres. */
static sub_grads post_norm_grads(df_acts *a, const float *y, const float *rstd, const float *wn,
                                 float *gn, const float *in, int64_t T, int64_t H)
{
    DF_BE(a, zero, a->dxn, T * H);
    DF_BE(a, rmsnorm_bwd, a->dxn, gn, a->dres, y, wn, rstd, T, H);
    return (sub_grads){a->dxn, a->dres, 1.0f, in};
}

/* MLP: out = act W_down^T, act = silu(gate) * up or gelu_tanh(gate) * up (recomputed, not saved), in the forward's row
 * chunks (gate / up projected again per chunk when chunked). gemm(ta, tb): (1, 0) accumulates a
 * weight gradient dy^T x (in mixed precision both rounded per call, as autocast does),
 * DF_WMM(tb = 0) is an input gradient dy W. gate / up become their own gradients in place. */
static void mlp_backward(const df_model_config *c, const df_layer_view *w, df_acts *a, int64_t l,
                         const df_layer_view *g, const sub_grads *sg, float *gate, float *up)
{
    const int64_t T = a->bb.seqs.T, H = c->hidden_size, I = c->intermediate_size;
    const df_layer16 *w16 = df_acts_layer16(a, l); /* mixed precision: dy W from the bf16 copy */
    const int64_t C = a->mlp_rows < T ? a->mlp_rows : T;
    for (int64_t r0 = 0; r0 < T; r0 += C) {
        const int64_t n = T - r0 < C ? T - r0 : C;
        const float *xc = sg->in + r0 * H, *dyc = sg->dy + r0 * H;
        float *dinc = sg->din + r0 * H;
        if (w->experts) { /* a sparse layer: routing and experts recomputed per chunk (moe.h) */
            const int64_t stride = df_model_route_width(c), col = df_model_route_col(c, l);
            const df_moe_routes rt = {a->bb.routes_in ? a->bb.routes_in + col + r0 * stride : NULL, NULL, stride, NULL};
            df_moe_bwd(&a->be, c, w, w16, &rt, g, n, xc, dyc, dinc, sg->beta, gate, up, a->mlp_a, a->moe, &a->err);
            continue;
        }
        if (C < T)
            df_decoder_mlp_in(&a->be, c, w, w16, n, xc, gate, up, &a->err);
        df_decoder_mlp_act(&a->be, c, a->mlp_a, gate, up, n * I, &a->err);
        df_lora_weight_grad(a, l, DF_LORA_DOWN, dyc, a->mlp_a, n, H, I, g->w_down);
        DF_WMM(a, false, n, I, H, 1.0f, dyc, w->w_down, w16 ? w16->w_down : NULL, 0.0f, a->mlp_a);
        float *dgate = gate, *dup = up;
        if (c->geglu)
            DF_BE(a, geglu_bwd, dgate, dup, a->mlp_a, gate, up, n * I);
        else
            DF_BE(a, swiglu_bwd, dgate, dup, a->mlp_a, gate, up, n * I);
        DF_WMM(a, false, n, H, I, 1.0f, dgate, w->w_gate, w16 ? w16->w_gate : NULL, sg->beta, dinc);
        DF_WMM(a, false, n, H, I, 1.0f, dup, w->w_up, w16 ? w16->w_up : NULL, 1.0f, dinc);
        df_lora_weight_grad(a, l, DF_LORA_GATE, dgate, xc, n, I, H, g->w_gate);
        df_lora_weight_grad(a, l, DF_LORA_UP, dup, xc, n, I, H, g->w_up);
    }
}

/* Attention: out = att W_o^T (+ b_o) from q, k, v = proj(in) (q, k through their norms), RoPE. */
static void attn_backward(const df_model_config *c, const df_layer_view *w, df_acts *a, int64_t l,
                          const df_layer_view *g, const sub_grads *sg)
{
    const df_acts_batch *bb = &a->bb;
    const int64_t T = bb->seqs.T, H = c->hidden_size;
    const int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads, hd = c->head_dim;
    const int64_t qd = nh * hd, kvd = nkv * hd, MT = a->max_tokens, s = df_acts_slot(a, l);
    const float *q = a->q + s * MT * qd, *k = a->k + s * MT * kvd, *v = a->v + s * MT * kvd;
    const float *att = a->att + s * MT * qd;
    const df_layer16 *w16 = df_acts_layer16(a, l);
    df_backend_seqs seqs = bb->seqs;
    seqs.window = df_model_layer_window(c, l);
    seqs.softcap = (float)c->attn_logit_softcap; /* Gemma 2 (0: none) */
    df_lora_weight_grad(a, l, DF_LORA_O, sg->dy, att, T, H, qd, g->wo);
    if (g->bo)
        DF_BE(a, col_sum_add, g->bo, sg->dy, T, H);
    DF_WMM(a, false, T, qd, H, 1.0f, sg->dy, w->wo, w16 ? w16->wo : NULL, 0.0f, a->dao);
    DF_BE(a, attention_bwd, a->dq, a->dk, a->dv, a->dao, att, a->att_lse + s * MT * nh, q, k, v,
          &seqs, nh, nkv, hd);
    const float qs = df_model_q_scale(c); /* the forward scaled q after RoPE */
    if (qs != 1.0f)
        DF_BE(a, scale, a->dq, T * qd, qs);
    const bool local = df_model_layer_local_rope(c, l);
    const float *cs = local ? a->rope_cos_local : a->rope_cos, *sn = local ? a->rope_sin_local : a->rope_sin;
    DF_BE(a, rope_apply, a->dq, bb->pos, T, nh, hd, df_model_rope_dim(c), cs, sn, true);
    DF_BE(a, rope_apply, a->dk, bb->pos, T, nkv, hd, df_model_rope_dim(c), cs, sn, true);
    /* The projections' outputs: q / k themselves, or the inputs of the q/k norms. */
    const float *dq = a->dq, *dk = a->dk;
    if (c->qk_norm) {
        const int64_t wq = df_qk_norm_width(c, nh), wk = df_qk_norm_width(c, nkv);
        dq = a->dqn;
        dk = a->dkn;
        head_norm_bwd(a, a->dqn, g->q_norm, a->dq, a->qraw + s * MT * qd, w->q_norm,
                      a->qrstd + s * MT * nh, T * qd / wq, wq);
        head_norm_bwd(a, a->dkn, g->k_norm, a->dk, a->kraw + s * MT * kvd, w->k_norm,
                      a->krstd + s * MT * nkv, T * kvd / wk, wk);
    }
    DF_WMM(a, false, T, H, qd, 1.0f, dq, w->wq, w16 ? w16->wq : NULL, sg->beta, sg->din);
    DF_WMM(a, false, T, H, kvd, 1.0f, dk, w->wk, w16 ? w16->wk : NULL, 1.0f, sg->din);
    DF_WMM(a, false, T, H, kvd, 1.0f, a->dv, w->wv, w16 ? w16->wv : NULL, 1.0f, sg->din);
    df_lora_weight_grad(a, l, DF_LORA_Q, dq, sg->in, T, qd, H, g->wq);
    df_lora_weight_grad(a, l, DF_LORA_K, dk, sg->in, T, kvd, H, g->wk);
    df_lora_weight_grad(a, l, DF_LORA_V, a->dv, sg->in, T, kvd, H, g->wv);
    if (g->bq) { /* bias gradients: column sums of dq / dk / dv */
        DF_BE(a, col_sum_add, g->bq, dq, T, qd);
        DF_BE(a, col_sum_add, g->bk, dk, T, kvd);
        DF_BE(a, col_sum_add, g->bv, a->dv, T, kvd);
    }
}

/* gemma3's sandwich layer, x' = h + ln3(mlp(ln_ff(h))), h = x + ln2(attn(ln1(x))): each
 * sublayer's output gradient is its post-norm's backward of dres (in dxn), its input's gradient
 * is gathered in dxn2 and goes through the input norm's backward onto dres. */
static void sandwich_backward(const df_model_config *c, const df_layer_view *w, df_acts *a, int64_t l,
                              const df_layer_view *g, float *gate, float *up)
{
    const int64_t T = a->bb.seqs.T, H = c->hidden_size, MT = a->max_tokens, s = df_acts_slot(a, l);
    const float *x = a->x + l * MT * H, *h = a->hmid + s * MT * H;
    sub_grads sg = post_norm_grads(a, a->xn2 + s * MT * H, a->rstd2 + s * MT, w->ln3, g->ln3, h, T, H);
    sg = (sub_grads){sg.dy, a->dxn2, 0.0f, a->xff + s * MT * H};
    mlp_backward(c, w, a, l, g, &sg, gate, up);
    DF_BE(a, rmsnorm_bwd, a->dres, g->ln_ff, a->dxn2, h, w->ln_ff, a->rstdff + s * MT, T, H);
    sg = post_norm_grads(a, a->xn1 + s * MT * H, a->rstd1 + s * MT, w->ln2, g->ln2, x, T, H);
    sg = (sub_grads){sg.dy, a->dxn2, 0.0f, a->xin + s * MT * H};
    attn_backward(c, w, a, l, g, &sg);
    DF_BE(a, rmsnorm_bwd, a->dres, g->ln1, a->dxn2, x, w->ln1, a->rstdin + s * MT, T, H);
}

/* Layer l's backward from the residual gradient dres of its output, which becomes that of its
 * input x[l]: pre-norm (x' = h + mlp(ln2(h)), h = x + attn(ln1(x))) or post-norm (x' = h +
 * ln3(mlp(h)), h = x + ln2(attn(x))); the residual adds are dres carried through. */
static void layer_backward(const df_model_config *c, const df_layer_view *w, df_acts *a,
                           int64_t l, const df_layer_view *g)
{
    const int64_t T = a->bb.seqs.T, H = c->hidden_size, I = df_model_mlp_width(c);
    const int64_t MT = a->max_tokens, s = df_acts_slot(a, l);
    const float *x = a->x + l * MT * H, *h = a->hmid + s * MT * H;
    const float *xn1 = a->xn1 + s * MT * H, *xn2 = a->xn2 + s * MT * H;
    const float *rstd1 = a->rstd1 + s * MT, *rstd2 = a->rstd2 + s * MT;
    /* gate / up become their own gradients in place (swiglu_bwd): the slot is spent */
    float *gate = a->gate + s * MT * I, *up = a->up + s * MT * I;
    if (c->sandwich_norm) {
        sandwich_backward(c, w, a, l, g, gate, up);
        return;
    }
    if (c->post_norm) {
        sub_grads sg = post_norm_grads(a, xn2, rstd2, w->ln3, g->ln3, h, T, H);
        mlp_backward(c, w, a, l, g, &sg, gate, up);
        sg = post_norm_grads(a, xn1, rstd1, w->ln2, g->ln2, x, T, H);
        attn_backward(c, w, a, l, g, &sg);
        return;
    }
    sub_grads sg = {a->dres, a->dxn, 0.0f, xn2};
    mlp_backward(c, w, a, l, g, &sg, gate, up);
    DF_BE(a, rmsnorm_bwd, a->dres, g->ln2, a->dxn, h, w->ln2, rstd2, T, H);
    sg = (sub_grads){a->dres, a->dxn, 0.0f, xn1};
    attn_backward(c, w, a, l, g, &sg);
    DF_BE(a, rmsnorm_bwd, a->dres, g->ln1, a->dxn, x, w->ln1, rstd1, T, H);
}

/* Checks common to both heads: a forward of kind `head` on `a` for this batch. */
static int check_forward(const df_acts *a, const df_seq_batch *b, int head, const char *fn)
{
    if (a->fwd_only)
        return df_error(DF_EINVAL, "%s: these activations were created forward-only "
                        "(DF_ACTS_FORWARD_ONLY, a frozen model's) and keep nothing for a backward",
                        fn);
    if (!a->fwd_valid)
        return df_error(DF_EINVAL, "%s: no forward pass on these activations", fn);
    if (a->fwd_head != head)
        return df_error(DF_EINVAL, "%s: the last forward on these activations was %s", fn,
                        a->fwd_head == DF_ACTS_HEAD_VALUE ? "df_model_forward_values"
                                                          : "df_model_forward (log-probs)");
    if (b->n_tokens != a->fwd_tokens || b->n_out != a->fwd_out)
        return df_error(DF_EINVAL, "%s: batch (%lld tokens, %lld outputs) differs from the "
                        "forward's (%lld, %lld)", fn, (long long)b->n_tokens,
                        (long long)b->n_out, (long long)a->fwd_tokens, (long long)a->fwd_out);
    return DF_OK;
}

/* From the head's gradient a->dxnf [n_out, H]: the final norm, the residual stream of the
 * output rows, every layer and the embedding, accumulated into gv. The batch was staged by
 * the caller (df_acts_stage). */
static int trunk_backward(const df_model *m, const df_model_view *w, df_acts *a,
                          const df_seq_batch *b, const df_model_view *gv)
{
    const df_model_config *c = &m->cfg;
    const int64_t T = b->n_tokens, H = c->hidden_size, L = c->num_hidden_layers;
    DF_BE(a, zero, a->dxf, b->n_out * H);
    DF_BE(a, rmsnorm_bwd, a->dxf, gv->final_norm, a->dxnf, a->xf, w->final_norm, a->rstdf,
          b->n_out, H);
    DF_BE(a, zero, a->dres, T * H);
    DF_BE(a, scatter_add_rows, a->dres, a->dxf, a->bb.rows, b->n_out, H);
    for (int64_t l = L - 1; l >= 0; l--) {
        /* The forward kept only x[l]: refill the layer's slot from it, unless the slot
         * still holds layer l (the forward's last layer; layer_backward reads it only). */
        if (a->ckpt && a->slot_layer != l)
            df_acts_layer_recompute(c, &w->layers[l], a, l);
        layer_backward(c, &w->layers[l], a, l, &gv->layers[l]);
        a->slot_layer = -1; /* its gate / up now hold their gradients */
    }
    a->fwd_valid = 0; /* the saved activations are spent: another backward needs a new forward */
    if (c->embed_scale && gv->embed) /* the lookup's rows were scaled: so is their gradient */
        DF_BE(a, scale, a->dres, T * H, df_model_embed_scale(c));
    if (gv->embed)
        DF_BE(a, embedding_bwd, gv->embed, a->dres, a->bb.tokens, T, H);
    return a->err;
}

/* What both heads' backwards start with: the weights the backend reads (*w), the batch staged
 * for it, and *gv viewing the gradient blob (its layers array set by the caller). */
static int backward_begin(const df_model *m, df_acts *a, const df_seq_batch *b, float *grads,
                          const df_model_view **w, df_model_view *gv)
{
    if (!grads && !a->lora)
        return df_error(DF_EINVAL, "no gradient blob (NULL grads needs a LoRA adapter: "
                        "df_acts_set_lora)");
    int rc = df_acts_weights(a, m, w);
    if (!rc)
        rc = df_acts_stage(a, b);
    if (rc)
        return rc;
    if (grads) {
        df_model_view_of(m, grads, gv);
    } else { /* the base frozen (LoRA): no view, so every base gradient below is skipped */
        df_layer_view *layers = gv->layers;
        memset(layers, 0, (size_t)m->cfg.num_hidden_layers * sizeof *layers);
        *gv = (df_model_view){.layers = layers};
    }
    /* a value model's score head trains whole in the adapter's blob (distflow/lora.h) */
    if (a->lora && a->lora->head >= 0) {
        gv->score_weight = a->lgrad_blob + a->lora->head;
        gv->score_bias = a->lgrad_blob + a->lora->head_bias;
    }
    return DF_OK;
}

int df_model_backward(const df_model *m, df_acts *a, const df_seq_batch *b, float temperature,
                      const float *dlogp, const float *dentropy, float *grads)
{
    int rc = check_forward(a, b, DF_ACTS_HEAD_LM, "df_model_backward");
    if (rc)
        return rc;
    if (temperature != a->fwd_temperature)
        return df_error(DF_EINVAL, "df_model_backward: temperature %g differs from the forward's "
                        "%g", (double)temperature, (double)a->fwd_temperature);
    if (dentropy && !a->fwd_entropy)
        return df_error(DF_EINVAL, "df_model_backward: dentropy given but the forward pass "
                                   "computed no entropy (pass an entropy buffer to "
                                   "df_model_forward)");
    const df_model_config *c = &m->cfg;
    const df_model_view *w = NULL;
    df_model_view gv = {.layers = a->gview_layers};
    if ((rc = backward_begin(m, a, b, grads, &w, &gv)))
        return df_error_wrap(rc, "df_model_backward");
    /* A device reads dlogp / dentropy from its staging rows. */
    const int64_t n = b->n_out;
    if (!a->be.ops->host_memory) {
        float *d = a->b_io + 2 * a->max_out;
        DF_BE(a, upload, d, dlogp, (size_t)n * sizeof(float));
        dlogp = d;
        if (dentropy) {
            DF_BE(a, upload, d + a->max_out, dentropy, (size_t)n * sizeof(float));
            dentropy = d + a->max_out;
        }
    }
    /* LM head on the output rows; tied embeddings share gv.lm_head. */
    const uint16_t *w16 = df_acts_lm_head16(a);
    if (w16)
        DF_BE(a, lmhead_bwd_w16, a->dxnf, gv.lm_head, dlogp, dentropy, a->xnf, w16,
              a->bb.targets, a->lse, a->ent, n, c->vocab_size, c->hidden_size, temperature,
              (float)c->final_logit_softcap, a->lm_scratch);
    else
        DF_BE(a, lmhead_bwd, a->dxnf, gv.lm_head, dlogp, dentropy, a->xnf, w->lm_head,
              a->bb.targets, a->lse, a->ent, n, c->vocab_size, c->hidden_size, temperature,
              (float)c->final_logit_softcap, a->lm_scratch);
    rc = trunk_backward(m, w, a, b, &gv);
    return rc ? df_error_wrap(rc, "df_model_backward on the %s backend", a->be.ops->name) : DF_OK;
}

/* A device backend's value head backward, as GEMMs: dxnf = dv score_weight (an outer
 * product), d score_weight += dv^T xnf, d score_bias += sum(dv). dvalues host [n]. */
static void value_head_bwd_device(df_acts *a, const df_model_view *w, const df_model_view *gv,
                                  const float *dvalues, int64_t n, int64_t H)
{
    float *d_dv = a->b_io + 2 * a->max_out;
    DF_BE(a, upload, d_dv, dvalues, (size_t)n * sizeof(float));
    DF_BE32(a, gemm, false, false, n, H, 1, 1.0f, d_dv, w->score_weight, 0.0f, a->dxnf);
    DF_BE32(a, gemm, true, false, 1, H, n, 1.0f, d_dv, a->xnf, 1.0f, gv->score_weight);
    DF_BE(a, col_sum_add, gv->score_bias, d_dv, n, 1);
}

/* The CPU's value head backward: per-row products, column sums in double. */
static void value_head_bwd_host(const df_model *m, df_acts *a, const df_model_view *gv,
                                const float *dvalues, int64_t n, int64_t H)
{
    /* values[j] = w . xnf[j] + bias: dxnf[j] = dv[j] w, dw += sum_j dv[j] xnf[j],
     * dbias += sum_j dv[j]. Threads own columns of dw; rows summed in order. */
    const float *w = m->w.score_weight;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < H; i++)
            a->dxnf[j * H + i] = dvalues[j] * w[i];
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < H; i++) {
        double acc = 0.0;
        for (int64_t j = 0; j < n; j++)
            acc += (double)dvalues[j] * a->xnf[j * H + i];
        gv->score_weight[i] += (float)acc;
    }
    double db = 0.0;
    for (int64_t j = 0; j < n; j++)
        db += dvalues[j];
    gv->score_bias[0] += (float)db;
}

int df_model_backward_values(const df_model *m, df_acts *a, const df_seq_batch *b,
                             const float *dvalues, float *grads)
{
    int rc = check_forward(a, b, DF_ACTS_HEAD_VALUE, "df_model_backward_values");
    if (rc)
        return rc;
    if (m->cfg.num_labels != 1)
        return df_error(DF_EINVAL, "df_model_backward_values: not a value model");
    if (!dvalues && b->n_out > 0)
        return df_error(DF_EINVAL, "df_model_backward_values: dvalues must not be NULL");
    const int64_t H = m->cfg.hidden_size, n = b->n_out;
    const df_model_view *w = NULL;
    df_model_view gv = {.layers = a->gview_layers};
    if ((rc = backward_begin(m, a, b, grads, &w, &gv)))
        return df_error_wrap(rc, "df_model_backward_values");
    if (a->be.ops->host_memory)
        value_head_bwd_host(m, a, &gv, dvalues, n, H);
    else
        value_head_bwd_device(a, w, &gv, dvalues, n, H);
    rc = trunk_backward(m, w, a, b, &gv);
    return rc ? df_error_wrap(rc, "df_model_backward_values on the %s backend", a->be.ops->name)
              : DF_OK;
}
