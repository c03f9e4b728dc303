/*
 * Training forward pass of the Qwen2 / Qwen3 / Llama decoder over packed sequences
 * (model.h), following HF transformers' modeling_qwen2.py / modeling_qwen3.py:
 *   x = embed(ids); per layer:
 *     h = x + o_proj(attn(rope(qn(q_proj(n1))), rope(kn(k_proj(n1))), v_proj(n1))),
 *                                                                        n1 = rmsnorm1(x)
 *     x = h + down(silu(gate(n2)) * up(n2)),                             n2 = rmsnorm2(h)
 *   with qn / kn the per-head RMSNorms of qwen3 (identity otherwise), o_proj's bias where
 *   the model has one, and attention limited to the layer's window (df_model_layer_window);
 *   OLMo 2's post-norm layer (modeling_olmo2.py) instead:
 *     h = x + rmsnorm2(o_proj(attn(rope(qn(q_proj(x))), rope(kn(k_proj(x))), v_proj(x)))),
 *     x = h + rmsnorm3(down(silu(gate(h)) * up(h))),  qn / kn over the whole projection;
 *   Gemma 3's sandwich layer (modeling_gemma3.py) normalises each sublayer's input too, with
 *   (1 + w) norm weights, GeGLU, x scaled by sqrt(hidden) after the lookup and q by
 *   df_model_q_scale, and its sliding layers' own RoPE (decoder_layer.h).
 *   final rmsnorm and the head, for the output rows only: the LM head
 *   (df_model_forward) or a value model's score head (df_model_forward_values).
 * The layer itself is decoder_layer.c's, shared with the rollout's prefill and decode; here it
 * runs with packed causal attention over the activations' buffers.
 */
#include "model/acts.h"
#include "model/lora_grad.h"
#include "model/decoder_layer.h"
#include "model/moe.h"
#include "model/ops.h"

#include <stdlib.h>
#include <string.h>

/* ---- df_acts ----------------------------------------------------------------- */

/* One buffer of n elements, counted in a->bytes; once *fail is set (a failure, or
 * df_acts_bytes's count-only pass) only counted. */
static float *balloc(df_acts *a, int64_t n, size_t elem, int *fail)
{
    void *p = NULL;
    const size_t bytes = (size_t)(n > 0 ? n : 1) * elem;
    a->bytes += (int64_t)bytes;
    if (!*fail && a->be.ops->alloc(a->be.ctx, bytes, &p))
        *fail = 1;
    return p;
}

static float *falloc(df_acts *a, int64_t n, int *fail)
{
    return balloc(a, n, sizeof(float), fail);
}

/* A buffer only a backward reads: none (NULL, not counted) for forward-only activations. */
static float *bwd_alloc(df_acts *a, int64_t n, int *fail)
{
    return a->fwd_only ? NULL : falloc(a, n, fail);
}

/* What the bf16 copy df_acts_load_weights makes holds: the head and the embedding too. */
#define W16_FLAGS (DF_W16_LM_HEAD | DF_W16_EMBED)

/* Drop the bf16 weight copy (freed when a owns it). */
static void drop_w16(df_acts *a)
{
    if (!a->w16_shared)
        df_weights16_free(a->w16);
    a->w16 = NULL;
    a->w16_shared = false;
}

void df_acts_free(df_acts *a)
{
    if (!a)
        return;
    df_acts_lora_release(a);
    df_moe_ws_free(a->moe);
    void *bufs[] = {a->x,     a->hmid,   a->xn1,      a->xn2,      a->rstd1,  a->rstd2,
                    a->q,     a->k,      a->v,        a->att,      a->att_lse, a->gate,
                    a->up,    a->xf,     a->xnf,      a->rstdf,    a->lse,    a->ent,
                    a->rope_cos, a->rope_sin, a->mlp_a, a->dres,
                    a->dxn,   a->dq,     a->dk,       a->dv,       a->dao,    a->dxf,
                    a->dxnf,  a->lm_scratch, a->b_tokens, a->b_targets, a->b_pos, a->b_offsets,
                    a->b_rows, a->b_io,  a->qraw,    a->kraw,   a->qrstd,  a->krstd,
                    a->dqn,   a->dkn,    a->ones, a->rope_cos_local, a->rope_sin_local, a->xin,
                    a->xff,   a->rstdin, a->rstdff, a->dxn2, a->nshift};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        a->be.ops->release(a->be.ctx, bufs[i]);
    free(a->pos);
    free(a->gview_layers);
    free(a->nshift_layers);
    df_weights_dev_free(&a->wdev);
    df_mm_ctx_free(a->mm);
    drop_w16(a);
    free(a);
}

/* Elements of the largest operand a bf16 matmul of `a` rounds per call: [max_tokens, widest]
 * activations (a weight gradient rounds two of them), the MLP's [mlp_rows, I] ones. */
static int64_t mm_elems(const df_acts *a)
{
    const df_model_config *c = &a->cfg;
    const int64_t qd = df_acts_qd(a), w = c->hidden_size > qd ? c->hidden_size : qd;
    const int64_t mlp = df_mm_elems_for(c, a->mlp_rows), rest = a->max_tokens * w;
    return mlp > rest ? mlp : rest;
}

int df_acts_set_bf16_matmul(df_acts *a, bool on)
{
    if (!on) {
        df_mm_ctx_free(a->mm);
        a->mm = NULL;
        if (a->dev16)
            a->be = a->be32;
        a->dev16 = false;
        drop_w16(a);
        return DF_OK;
    }
    const df_backend_ops *o = a->dev16 ? a->be32.ops : a->be.ops;
    const bool cpu = df_backend_is_cpu(&a->be);
    if (!o->gemm_w16 || !o->embedding_fwd_w16 || (!cpu && !o->gemm_bf16))
        return df_error(DF_EUNSUPPORTED, "mixed precision (bf16 matmuls): the %s backend has no "
                        "bf16 decoder matmuls yet (gemm_w16, embedding_fwd_w16, gemm_bf16)", o->name);
    if (a->mm || a->dev16)
        return DF_OK;
    if (!cpu) { /* a device: its own bf16 entries, no oneDNN context; the copy in its memory */
        a->be32 = a->be;
        a->ops16 = *a->be.ops;
        a->ops16.gemm = a->ops16.gemm_bf16;
        a->be.ops = &a->ops16;
        a->dev16 = true;
        return DF_OK;
    }
    /* The weight copy comes with df_acts_load_weights (or df_acts_share_weights16). */
    int rc = df_mm_ctx_create(mm_elems(a), &a->mm);
    return rc ? df_error_wrap(rc, "mixed precision (bf16 matmuls)") : DF_OK;
}

int df_acts_share_weights16(df_acts *a, const df_weights16 *w, const df_model *m)
{
    if (!df_acts_mixed(a))
        return df_error(DF_EINVAL, "df_acts_share_weights16: the activations were not created "
                        "for mixed precision (DF_ACTS_BF16)");
    if (!w || !m || m->cfg.hidden_size != a->cfg.hidden_size ||
        m->cfg.num_hidden_layers != a->cfg.num_hidden_layers)
        return df_error(DF_EINVAL, "df_acts_share_weights16: no weights, or another model's");
    if (df_weights16_on_device(w) != !a->be.ops->host_memory)
        return df_error(DF_EINVAL, "df_acts_share_weights16: the copy is in %s memory, the "
                        "activations on the %s backend", df_weights16_on_device(w) ? "device" : "host",
                        a->be.ops->name);
    drop_w16(a);
    a->w16 = (df_weights16 *)w; /* only read: df_acts_load_weights never refreshes a shared copy */
    a->w16_shared = true;
    return DF_OK;
}

/* One RoPE table pair of `cfg` for every position the activations hold into dc / ds (backend
 * memory). */
static int rope_table(df_acts *a, const df_model_config *cfg, float *dc, float *ds)
{
    const int64_t n = a->max_tokens * (df_model_rope_dim(cfg) / 2);
    const bool host = a->be.ops->host_memory;
    float *c = host ? dc : malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    float *s = host ? ds : malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    int rc = c && s ? DF_OK : df_error(DF_ENOMEM, "out of memory for the RoPE table");
    if (!rc)
        df_rope_model_table(c, s, a->max_tokens, cfg);
    if (!rc && !host) {
        rc = a->be.ops->upload(a->be.ctx, dc, c, (size_t)n * sizeof(float));
        if (!rc)
            rc = a->be.ops->upload(a->be.ctx, ds, s, (size_t)n * sizeof(float));
    }
    if (!host) {
        free(c);
        free(s);
    }
    return rc;
}

/* The RoPE tables for every position the activations hold (the model's: df_rope_model_table; the
 * local one of gemma3's sliding layers), the o_proj bias's column of ones and the (1 + w) norms'
 * ones, in the backend's memory. */
static int rope_tables(df_acts *a)
{
    const int64_t T = a->max_tokens;
    int rc = rope_table(a, &a->cfg, a->rope_cos, a->rope_sin);
    if (!rc && a->rope_cos_local) {
        df_model_config local;
        df_model_local_rope(&a->cfg, &local);
        rc = rope_table(a, &local, a->rope_cos_local, a->rope_sin_local);
    }
    if (!rc && a->nshift)
        rc = df_norm_shift_init(&a->be, &a->cfg, a->nshift);
    if (rc || !a->ones)
        return rc;
    const bool host = a->be.ops->host_memory;
    float *one = host ? a->ones : malloc((size_t)T * sizeof(float));
    if (!one)
        return df_error(DF_ENOMEM, "out of memory for the o_proj bias's column of ones");
    for (int64_t t = 0; t < T; t++)
        one[t] = 1.0f;
    if (!host) {
        rc = a->be.ops->upload(a->be.ctx, a->ones, one, (size_t)T * sizeof(float));
        free(one);
    }
    return rc;
}

/* Slots of the per-layer buffers: one with activation checkpointing or forward-only, else one
 * per layer. */
static int64_t slots_of(const df_acts *a)
{
    return a->ckpt || a->fwd_only ? 1 : a->cfg.num_hidden_layers;
}

/* The q/k norms' saved inputs and statistics (slots_of(a) layers) and their gradients' scratch
 * (qwen3, olmo2; the statistics sized for qwen3's rows per head), the o_proj bias's ones (its
 * GEMM adds it). */
static void alloc_attention_extras(df_acts *a, int *fail)
{
    const df_model_config *c = &a->cfg;
    const int64_t T = a->max_tokens, L = slots_of(a);
    if (c->qk_norm) {
        a->qraw = falloc(a, L * T * df_acts_qd(a), fail);
        a->kraw = falloc(a, L * T * df_acts_kvd(a), fail);
        a->qrstd = falloc(a, L * T * c->num_attention_heads, fail);
        a->krstd = falloc(a, L * T * c->num_key_value_heads, fail);
        a->dqn = bwd_alloc(a, T * df_acts_qd(a), fail);
        a->dkn = bwd_alloc(a, T * df_acts_kvd(a), fail);
    }
    if (c->o_proj_bias)
        a->ones = falloc(a, T, fail);
    if (c->rope_local_theta > 0) {
        a->rope_cos_local = falloc(a, T * (df_model_rope_dim(c) / 2), fail);
        a->rope_sin_local = falloc(a, T * (df_model_rope_dim(c) / 2), fail);
    }
    if (c->sandwich_norm) {
        a->xin = falloc(a, L * T * c->hidden_size, fail);
        a->xff = falloc(a, L * T * c->hidden_size, fail);
        a->rstdin = falloc(a, L * T, fail);
        a->rstdff = falloc(a, L * T, fail);
        a->dxn2 = bwd_alloc(a, T * c->hidden_size, fail);
    }
    if (c->norm_plus_one)
        a->nshift = falloc(a, df_norm_shift_floats(c), fail);
}

/* A device backend's copies of the batch and of the head's per-row inputs / outputs. */
static void alloc_batch_copies(df_acts *a, int *fail)
{
    if (a->be.ops->host_memory)
        return;
    const int64_t T = a->max_tokens, O = a->max_out > 0 ? a->max_out : 1;
    a->b_tokens = (int32_t *)balloc(a, T, sizeof(int32_t), fail);
    a->b_pos = (int32_t *)balloc(a, T, sizeof(int32_t), fail);
    a->b_targets = (int32_t *)balloc(a, O, sizeof(int32_t), fail);
    a->b_offsets = (int64_t *)balloc(a, T + 1, sizeof(int64_t), fail);
    a->b_rows = (int64_t *)balloc(a, O, sizeof(int64_t), fail);
    a->b_io = falloc(a, 4 * O, fail);
}

/* Every buffer of the layout (saved per-layer ones in slots_of(a) slots), in backend memory;
 * with *fail set on entry only adds up their bytes. */
static void alloc_buffers(df_acts *a, int *fail)
{
    const df_model_config *cfg = &a->cfg;
    const int64_t T = a->max_tokens, S = slots_of(a), H = cfg->hidden_size;
    const int64_t I = df_model_mlp_width(cfg), nh = cfg->num_attention_heads;
    const int64_t qd = df_acts_qd(a), kvd = df_acts_kvd(a), O = a->max_out > 0 ? a->max_out : 1;
    a->x = falloc(a, (a->fwd_only ? 2 : cfg->num_hidden_layers + 1) * T * H, fail);
    a->hmid = bwd_alloc(a, S * T * H, fail); /* forward-only: h is the other residual row */
    a->xn1 = falloc(a, S * T * H, fail);
    a->xn2 = falloc(a, S * T * H, fail);
    a->rstd1 = falloc(a, S * T, fail);
    a->rstd2 = falloc(a, S * T, fail);
    a->q = falloc(a, S * T * qd, fail);
    a->k = falloc(a, S * T * kvd, fail);
    a->v = falloc(a, S * T * kvd, fail);
    a->att = falloc(a, S * T * qd, fail);
    a->att_lse = falloc(a, S * T * nh, fail);
    const int64_t G = a->ckpt || a->fwd_only ? a->mlp_rows : S * T; /* chunks: mlp_rows */
    a->gate = falloc(a, G * I, fail);
    a->up = falloc(a, G * I, fail);
    a->xf = falloc(a, O * H, fail);
    a->xnf = falloc(a, O * H, fail);
    a->rstdf = falloc(a, O, fail);
    a->lse = falloc(a, O, fail);
    a->ent = falloc(a, O, fail);
    a->rope_cos = falloc(a, T * (df_model_rope_dim(cfg) / 2), fail);
    a->rope_sin = falloc(a, T * (df_model_rope_dim(cfg) / 2), fail);
    a->mlp_a = falloc(a, a->mlp_rows * I, fail); /* act, then its gradient (gate / up: in place) */
    a->dres = bwd_alloc(a, T * H, fail);
    a->dxn = bwd_alloc(a, T * H, fail);
    a->dq = bwd_alloc(a, T * qd, fail);
    a->dk = bwd_alloc(a, T * kvd, fail);
    a->dv = bwd_alloc(a, T * kvd, fail);
    a->dao = bwd_alloc(a, T * qd, fail);
    a->dxf = bwd_alloc(a, O * H, fail);
    a->dxnf = bwd_alloc(a, O * H, fail);
    /* A value model never runs the LM head. */
    a->lm_scratch = falloc(a, cfg->num_labels > 0 ? 1
                           : a->be.ops->lmhead_scratch_floats(a->be.ctx, O, cfg->vocab_size, H),
                           fail);
    alloc_batch_copies(a, fail);
    alloc_attention_extras(a, fail);
}

int df_acts_create(const df_model_config *cfg, int64_t max_tokens, int64_t max_out,
                   df_acts **out)
{
    df_backend cpu = df_backend_cpu();
    return df_acts_create_on(&cpu, cfg, max_tokens, max_out, out);
}

int df_model_check_backend_ex(const df_backend *be, const df_model_config *cfg, unsigned flags)
{
    if (be && be->ops && (flags & DF_ACTS_BF16) &&
        (!be->ops->gemm_w16 || !be->ops->embedding_fwd_w16 ||
         (!df_backend_is_cpu(be) && !be->ops->gemm_bf16)))
        return df_error(DF_EUNSUPPORTED, "mixed precision (bf16 matmuls with a bf16 copy of the "
                        "weights) is not implemented on the %s backend; set param_dtype fp32 "
                        "(fsdp_config.mixed_precision) or train on the cpu backend",
                        be->ops->name);
    return df_model_check_backend(be, cfg);
}

int df_model_check_backend(const df_backend *be, const df_model_config *cfg)
{
    /* the MoE block routes on the host (moe.h) */
    if (be && be->ops && !be->ops->host_memory && cfg->num_experts > 0)
        return df_error(DF_EUNSUPPORTED, "a model with experts (%s, %lld experts) runs on the cpu "
                        "backend only (its routing runs on the host), not on %s", cfg->model_type,
                        (long long)cfg->num_experts, be->ops->name);
    /* Gemma 2's soft-caps reach only a backend whose attention and LM head take them */
    if (be && be->ops && !be->ops->attention_softcap &&
        (cfg->attn_logit_softcap > 0 || (cfg->final_logit_softcap > 0 && cfg->num_labels == 0)))
        return df_error(DF_EUNSUPPORTED, "tanh soft-capping (%s: attn_logit_softcapping %g, "
                        "final_logit_softcapping %g) is not implemented on the %s backend; run this "
                        "model on the cpu backend", cfg->model_type, cfg->attn_logit_softcap,
                        cfg->final_logit_softcap, be->ops->name);
    /* Gemma's scalings (the embedding times sqrt(hidden), the queries by query_pre_attn_scalar)
     * call `scale`, one of the optimizer's entries, which a backend may lack (backend.h) */
    if (be && be->ops && !be->ops->scale && (cfg->embed_scale || df_model_q_scale(cfg) != 1.0f))
        return df_error(DF_EUNSUPPORTED, "%s's scaled embedding and queries need the %s backend's "
                        "`scale` entry, which it has not (nor the optimizer's other entries); run "
                        "this model on the cpu backend", cfg->model_type, be->ops->name);
    /* a backend whose attention takes no window runs no windowed layer (any layer may be one) */
    if (!be || !be->ops || be->ops->attention_window || cfg->sliding_window <= 0)
        return DF_OK;
    for (int64_t l = 0; l < cfg->num_hidden_layers; l++)
        if (df_model_layer_window(cfg, l) > 0)
            return df_error(DF_EUNSUPPORTED, "sliding-window attention (use_sliding_window, "
                            "sliding_window %lld on layer %lld and others) is not implemented on the %s "
                            "backend; train this model on the cpu backend",
                            (long long)cfg->sliding_window, (long long)l, be->ops->name);
    return DF_OK;
}

/* The checks of df_acts_create_ex, then a zeroed df_acts holding the sizes (*out). */
static int acts_new(const df_backend *be, const df_model_config *cfg, int64_t max_tokens,
                    int64_t max_out, unsigned flags, df_acts **out)
{
    int rc = df_model_config_validate(cfg);
    if (rc)
        return rc;
    if (!be || !be->ops)
        return df_error(DF_EINVAL, "no backend");
    if (max_tokens <= 0 || max_out < 0 || max_out > max_tokens)
        return df_error(DF_EINVAL, "need 0 < max_tokens and 0 <= max_out <= max_tokens "
                        "(got max_tokens %lld, max_out %lld)",
                        (long long)max_tokens, (long long)max_out);
    if (flags & ~(unsigned)(DF_ACTS_CHECKPOINT | DF_ACTS_BF16 | DF_ACTS_FORWARD_ONLY))
        return df_error(DF_EINVAL, "unknown flags 0x%x", flags);
    if (cfg->head_dim > DF_MAX_HEAD_DIM)
        return df_error(DF_EUNSUPPORTED, "head_dim %lld exceeds the supported %d",
                        (long long)cfg->head_dim, DF_MAX_HEAD_DIM);
    if ((rc = df_model_check_backend_ex(be, cfg, flags)))
        return rc;
    df_acts *a = calloc(1, sizeof *a);
    if (!a)
        return df_error(DF_ENOMEM, "out of memory allocating activations");
    a->cfg = *cfg;
    a->max_tokens = max_tokens;
    a->max_out = max_out;
    a->ckpt = (flags & DF_ACTS_CHECKPOINT) != 0;
    a->fwd_only = (flags & DF_ACTS_FORWARD_ONLY) != 0;
    const bool chunked = (a->ckpt || a->fwd_only) && max_tokens > DF_MLP_CHUNK_ROWS;
    a->mlp_rows = chunked ? DF_MLP_CHUNK_ROWS : max_tokens;
    a->slot_layer = -1;
    a->be = *be;
    if (df_backend_is_cpu(be))
        a->be.ctx = &a->mm; /* matmuls follow df_acts_set_bf16_matmul */
    *out = a;
    return DF_OK;
}

int df_acts_create_on(const df_backend *be, const df_model_config *cfg, int64_t max_tokens,
                      int64_t max_out, df_acts **out)
{
    return df_acts_create_ex(be, cfg, max_tokens, max_out, 0, out);
}

int df_acts_create_ex(const df_backend *be, const df_model_config *cfg, int64_t max_tokens,
                      int64_t max_out, unsigned flags, df_acts **out)
{
    df_acts *a = NULL;
    int rc = acts_new(be, cfg, max_tokens, max_out, flags, &a);
    if (rc)
        return df_error_wrap(rc, "df_acts_create");
    const int64_t T = max_tokens, L = cfg->num_hidden_layers;
    int fail = 0;
    alloc_buffers(a, &fail);
    if (!fail && cfg->num_experts > 0 && df_moe_ws_create(cfg, a->mlp_rows, &a->moe))
        fail = 1;
    a->pos = malloc((size_t)T * sizeof(int32_t));
    a->gview_layers = calloc((size_t)L, sizeof(df_layer_view));
    a->nshift_layers = cfg->norm_plus_one ? calloc((size_t)L, sizeof(df_layer_view)) : NULL;
    if (fail || !a->pos || !a->gview_layers || (cfg->norm_plus_one && !a->nshift_layers)) {
        df_acts_free(a);
        return df_error(DF_ENOMEM, "out of %s memory allocating activations for %lld tokens",
                        be->ops->name, (long long)max_tokens);
    }
    rc = rope_tables(a);
    if (!rc && (flags & DF_ACTS_BF16))
        rc = df_acts_set_bf16_matmul(a, true);
    if (rc) {
        df_acts_free(a);
        return df_error_wrap(rc, "df_acts_create");
    }
    *out = a;
    return DF_OK;
}

int df_acts_bytes(const df_backend *be, const df_model_config *cfg, int64_t max_tokens,
                  int64_t max_out, unsigned flags, int64_t *bytes)
{
    df_acts *a = NULL;
    int rc = acts_new(be, cfg, max_tokens, max_out, flags, &a);
    if (rc)
        return df_error_wrap(rc, "df_acts_bytes");
    int fail = 1; /* count, allocate nothing */
    alloc_buffers(a, &fail);
    /* mixed precision: the bf16 weights df_acts_load_weights makes and the two operand
     * scratches of the bf16 matmuls */
    *bytes = a->bytes + df_moe_ws_bytes(cfg, a->mlp_rows) + ((flags & DF_ACTS_BF16) ? df_weights16_bytes_for(cfg, W16_FLAGS) +
                         (df_backend_is_cpu(be) ? df_mm_ctx_bytes(mm_elems(a)) : 0) : 0);
    free(a); /* a dry run holds no buffer */
    return DF_OK;
}

int64_t df_acts_size(const df_acts *a)
{
    const int64_t w16 = a->w16 && !a->w16_shared ? df_weights16_bytes(a->w16) : 0;
    return a->bytes + df_moe_ws_bytes(&a->cfg, a->mlp_rows) +
           (a->mm ? w16 + df_mm_ctx_bytes(mm_elems(a)) : a->dev16 ? w16 : 0);
}

/* The float32 weights a device's forward reads: a lent copy, else its own. */
static df_weights_dev *dev_weights(const df_acts *a)
{
    return a->wlent ? a->wlent : (df_weights_dev *)&a->wdev;
}

void df_acts_borrow_weights(df_acts *a, df_weights_dev *w)
{
    if (a->be.ops->host_memory)
        return;
    df_weights_dev_free(&a->wdev);
    a->wlent = w;
}

int df_acts_load_weights(df_acts *a, const df_model *m)
{
    int rc = DF_OK;
    /* a device reads float32 weights too (norms, biases, a float32 head): uploaded first, so
     * that the bf16 copy is converted from them there; a lent copy only when it is stale */
    if (!a->be.ops->host_memory) /* a lent copy outlives a: it keeps the device's own table,
                                   not a's bf16 variant of it (ops16 lives in a) */
        rc = df_weights_dev_sync(dev_weights(a), a->dev16 ? &a->be32 : &a->be, m, !a->wlent);
    if (!rc && df_acts_mixed(a) && !a->w16_shared) { /* the one conversion of this version */
        if (!a->w16)
            rc = df_weights16_create_on(&a->be, &a->cfg, W16_FLAGS, &a->w16);
        if (!rc)
            rc = a->dev16 ? df_weights16_refresh_dev(a->w16, m, &dev_weights(a)->view)
                          : df_weights16_refresh_model(a->w16, m);
    }
    /* a shared copy: its owner refreshes it */
    return rc ? df_error_wrap(rc, "df_acts_load_weights") : DF_OK;
}

/* The weights the backend reads, before the norms' shift. */
static int base_weights(const df_acts *a, const df_model *m, const df_model_view **w)
{
    if (df_acts_mixed(a) && !df_weights16_is_current(a->w16, m)) /* made from m, at its current version */
        return df_error(DF_EINVAL, "mixed precision: the bf16 copy of this model's weights is not "
                        "current (call df_acts_load_weights after every change of them)");
    if (a->be.ops->host_memory) {
        *w = &m->w;
        return DF_OK;
    }
    const df_weights_dev *d = dev_weights(a);
    if (!d->blob || d->n_params != m->n_params)
        return df_error(DF_EINVAL, "the model's weights are not on the %s backend (call "
                        "df_acts_load_weights after every change of them)", a->be.ops->name);
    *w = &d->view;
    return DF_OK;
}

int df_acts_weights(df_acts *a, const df_model *m, const df_model_view **w)
{
    int rc = base_weights(a, m, w);
    if (rc || !a->cfg.norm_plus_one)
        return rc;
    /* Gemma3RMSNorm: 1 + w formed for this pass, from the weights as they are now */
    int err = DF_OK;
    df_norm_shift_view(&a->be, &a->cfg, *w, a->nshift, a->nshift_layers, &a->nshift_view, &err);
    *w = &a->nshift_view;
    return err;
}

/* Checks shared by both heads; `lm` adds those of the LM head. */
static int check_batch(const df_acts *a, const df_model_config *cfg, const df_seq_batch *b,
                       bool lm, float temperature)
{
    const df_model_config *c = &a->cfg;
    if (c->hidden_size != cfg->hidden_size || c->num_hidden_layers != cfg->num_hidden_layers ||
        c->intermediate_size != cfg->intermediate_size || c->vocab_size != cfg->vocab_size ||
        c->num_attention_heads != cfg->num_attention_heads ||
        c->num_key_value_heads != cfg->num_key_value_heads || c->head_dim != cfg->head_dim)
        return df_error(DF_EINVAL, "activations were created for a different model shape");
    if (lm && c->num_labels > 0)
        return df_error(DF_EINVAL, "activations were created for a value model (no LM-head "
                                   "scratch); create them with the causal LM's config");
    if (lm && !(temperature > 0.0f))
        return df_error(DF_EINVAL, "temperature must be > 0 (got %g)", (double)temperature);
    if (b->n_tokens <= 0 || b->n_tokens > a->max_tokens)
        return df_error(DF_EINVAL, "batch has %lld tokens; activations hold 1 .. %lld",
                        (long long)b->n_tokens, (long long)a->max_tokens);
    if (b->n_out < 0 || b->n_out > a->max_out)
        return df_error(DF_EINVAL, "batch has %lld output rows; activations hold at most %lld",
                        (long long)b->n_out, (long long)a->max_out);
    if (b->n_seqs <= 0 || b->seq_offsets[0] != 0 || b->seq_offsets[b->n_seqs] != b->n_tokens)
        return df_error(DF_EINVAL, "seq_offsets must start at 0 and end at n_tokens (%lld)",
                        (long long)b->n_tokens);
    for (int64_t s = 0; s < b->n_seqs; s++) {
        int64_t len = b->seq_offsets[s + 1] - b->seq_offsets[s];
        if (len <= 0)
            return df_error(DF_EINVAL, "sequence %lld is empty or seq_offsets decrease",
                            (long long)s);
        /* positions 0 .. len - 1: none past the model's range (the config checks come first) */
        if (len > df_model_max_positions(cfg))
            return df_error(DF_EINVAL, "sequence %lld has %lld tokens, more than the model's "
                            "%s %lld: positions past it are outside the range "
                            "the model was trained for", (long long)s, (long long)len,
                            df_model_max_positions_name(cfg), (long long)df_model_max_positions(cfg));
    }
    for (int64_t t = 0; t < b->n_tokens; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= c->vocab_size)
            return df_error(DF_EINVAL, "token %lld has id %d outside the vocabulary [0, %lld)",
                            (long long)t, b->tokens[t], (long long)c->vocab_size);
    for (int64_t j = 0; j < b->n_out; j++) {
        if (b->out_rows[j] < 0 || b->out_rows[j] >= b->n_tokens)
            return df_error(DF_EINVAL, "output row %lld is %lld, outside [0, %lld)",
                            (long long)j, (long long)b->out_rows[j], (long long)b->n_tokens);
        if (lm && (b->out_targets[j] < 0 || b->out_targets[j] >= c->vocab_size))
            return df_error(DF_EINVAL, "output %lld targets id %d outside the vocabulary",
                            (long long)j, b->out_targets[j]);
    }
    return DF_OK;
}

int df_acts_check_batch(const df_acts *a, const df_model_config *cfg, const df_seq_batch *b,
                        float temperature)
{
    return check_batch(a, cfg, b, true, temperature);
}

/* ---- the batch ---------------------------------------------------------------- */

int df_acts_stage(df_acts *a, const df_seq_batch *b)
{
    int64_t max_len = 0;
    for (int64_t s = 0; s < b->n_seqs; s++) {
        int64_t n = b->seq_offsets[s + 1] - b->seq_offsets[s];
        max_len = n > max_len ? n : max_len;
        for (int64_t t = b->seq_offsets[s]; t < b->seq_offsets[s + 1]; t++)
            a->pos[t] = (int32_t)(t - b->seq_offsets[s]);
    }
    df_acts_batch *o = &a->bb;
    o->seqs = (df_backend_seqs){.n_seqs = b->n_seqs, .T = b->n_tokens, .max_len = max_len};
    o->routes_in = b->routes_in; /* the MoE block routes on the host (moe.h) */
    o->routes_out = b->routes_out;
    a->err = DF_OK;
    if (a->be.ops->host_memory) {
        o->tokens = b->tokens;
        o->targets = b->out_targets;
        o->pos = a->pos;
        o->rows = b->out_rows;
        o->seqs.offsets = b->seq_offsets;
        return DF_OK;
    }
    const int64_t T = b->n_tokens, n = b->n_out;
    DF_BE(a, upload, a->b_tokens, b->tokens, (size_t)T * sizeof(int32_t));
    DF_BE(a, upload, a->b_pos, a->pos, (size_t)T * sizeof(int32_t));
    DF_BE(a, upload, a->b_offsets, b->seq_offsets, (size_t)(b->n_seqs + 1) * sizeof(int64_t));
    DF_BE(a, upload, a->b_rows, b->out_rows, (size_t)n * sizeof(int64_t));
    if (b->out_targets) /* NULL for a value head */
        DF_BE(a, upload, a->b_targets, b->out_targets, (size_t)n * sizeof(int32_t));
    *o = (df_acts_batch){.tokens = a->b_tokens, .targets = a->b_targets, .pos = a->b_pos,
                         .rows = a->b_rows, .seqs = o->seqs};
    o->seqs.offsets = a->b_offsets;
    return a->err;
}

/* ---- forward ------------------------------------------------------------------- */

/* Layer l's buffers: x[l] in, its slot df_acts_slot(a, l) for what the backward reads, x[l + 1]
 * out (NULL: the recompute, which stops after gate / up). Forward-only, h is x[l + 1] itself
 * (the layer then adds the MLP onto it in place: the same sums as a copy would see). */
static df_layer_bufs layer_bufs(const df_acts *a, int64_t l, bool full)
{
    const df_model_config *c = &a->cfg;
    const int64_t H = c->hidden_size, I = df_model_mlp_width(c), nh = c->num_attention_heads;
    const int64_t nkv = c->num_key_value_heads, qd = df_acts_qd(a), kvd = df_acts_kvd(a);
    const int64_t MT = a->max_tokens, s = df_acts_slot(a, l);
    df_layer_bufs b = {
        .pos = a->bb.pos, .rope_cos = a->rope_cos, .rope_sin = a->rope_sin, .ones = a->ones,
        .x = df_acts_x(a, l), .xn1 = a->xn1 + s * MT * H, .rstd1 = a->rstd1 + s * MT,
        .q = a->q + s * MT * qd, .k = a->k + s * MT * kvd, .v = a->v + s * MT * kvd,
        .att = a->att + s * MT * qd, .h = a->fwd_only ? df_acts_x(a, l + 1) : a->hmid + s * MT * H,
        .xn2 = a->xn2 + s * MT * H, .rstd2 = a->rstd2 + s * MT, .gate = a->gate + s * MT * I,
        .up = a->up + s * MT * I, .act = a->mlp_a, .mlp_rows = a->mlp_rows, .moe = a->moe,
        .route_stride = df_model_route_width(c),
        .xout = full ? df_acts_x(a, l + 1) : NULL, .rope_cos_local = a->rope_cos_local,
        .rope_sin_local = a->rope_sin_local};
    if (a->bb.routes_in || a->bb.routes_out) { /* router replay: this layer's columns */
        const int64_t col = df_model_route_col(c, l);
        b.routes_in = a->bb.routes_in ? a->bb.routes_in + col : NULL;
        b.routes_out = full && a->bb.routes_out ? a->bb.routes_out + col : NULL;
    }
    if (c->sandwich_norm) { /* the inputs' norms, which the backward reads */
        b.xin = a->xin + s * MT * H;
        b.rstdin = a->rstdin + s * MT;
        b.xff = a->xff + s * MT * H;
        b.rstdff = a->rstdff + s * MT;
    }
    if (c->qk_norm) { /* the projections and row statistics the norms' backward reads */
        b.qraw = a->qraw + s * MT * qd;
        b.kraw = a->kraw + s * MT * kvd;
        b.qrstd = a->qrstd + s * MT * nh;
        b.krstd = a->krstd + s * MT * nkv;
    }
    return b;
}

/* Layer l through the one decoder layer (decoder_layer.h) with packed causal attention: the
 * forward (full) or, for a checkpointed backward, its activations up to gate / up again. */
static void layer_run(const df_layer_view *w, df_acts *a, int64_t l, bool full)
{
    const df_layer_bufs b = layer_bufs(a, l, full);
    const df_layer_attn at = {.seqs = &a->bb.seqs,
                              .lse = a->att_lse + df_acts_slot(a, l) * a->max_tokens *
                                                      a->cfg.num_attention_heads};
    df_decoder_layer(&a->be, &a->cfg, w, df_acts_layer16(a, l), l, a->bb.seqs.T, &b, &at,
                     &a->err);
    a->slot_layer = l;
}

/* The forward and a checkpointed backward's recompute run the same code up to gate / up, so
 * the recomputed values are the forward's to the bit. */
void df_acts_layer_recompute(const df_model_config *c, const df_layer_view *w, df_acts *a,
                             int64_t l)
{
    /* Post-norm: the whole layer, whose MLP output and norm come after gate / up. It writes
     * x[l + 1] again, the same bits, which only layer l + 1's backward (done by now) reads. */
    layer_run(w, a, l, c->post_norm);
}

/* Stage the batch, then embedding, decoder layers, and the final norm of the output rows
 * (into a->xnf): the trunk both heads share. */
static int trunk_forward(const df_model *m, const df_model_view *w, df_acts *a,
                         const df_seq_batch *b)
{
    const df_model_config *c = &m->cfg;
    const int64_t T = b->n_tokens, H = c->hidden_size, L = c->num_hidden_layers;
    a->slot_layer = -1;
    int rc = df_acts_stage(a, b);
    if (rc)
        return rc;
    const uint16_t *e16 = df_acts_embed16(a); /* mixed precision: the bf16 table */
    if (e16)
        DF_BE(a, embedding_fwd_w16, a->x, a->bb.tokens, e16, T, H);
    else
        DF_BE(a, embedding_fwd, a->x, a->bb.tokens, w->embed, T, H);
    if (c->embed_scale) /* Gemma3TextScaledWordEmbedding: one float32 product per element */
        DF_BE(a, scale, a->x, T * H, df_model_embed_scale(c));
    for (int64_t l = 0; l < L; l++)
        layer_run(&w->layers[l], a, l, true);
    /* Only output rows reach the final norm and the head. */
    DF_BE(a, gather_rows, a->xf, df_acts_x(a, L), a->bb.rows, b->n_out, H);
    DF_BE(a, rmsnorm_fwd, a->xnf, a->rstdf, a->xf, w->final_norm, b->n_out, H,
          (float)c->rms_norm_eps);
    return a->err;
}

static void mark_forward(df_acts *a, const df_seq_batch *b, int head, float temperature,
                         int entropy)
{
    a->fwd_tokens = b->n_tokens;
    a->fwd_out = b->n_out;
    a->fwd_temperature = temperature;
    a->fwd_entropy = entropy;
    a->fwd_head = head;
    a->fwd_valid = 1;
}

/* The head's log-probs, entropies and sums of p^2: host arrays, written by the backend (CPU) or
 * copied from its staging rows (a device; b_io's second row holds the sums). */
static void lm_head(const df_model *m, const df_model_view *w, df_acts *a, int64_t n,
                    float temperature, const df_head_out *out)
{
    const df_model_config *c = &m->cfg;
    const bool host = a->be.ops->host_memory;
    float *d_logp = host ? out->logp : a->b_io;
    float *d_spq = !out->sum_pi_sq ? NULL : host ? out->sum_pi_sq : a->b_io + a->max_out;
    /* Entropy only when asked: the backward then takes no dentropy. */
    float *d_ent = out->entropy ? a->ent : NULL;
    const uint16_t *w16 = df_acts_lm_head16(a);
    if (w16)
        DF_BE(a, lmhead_fwd_w16, d_logp, d_ent, d_spq, a->lse, a->xnf, w16, a->bb.targets, n,
              c->vocab_size, c->hidden_size, temperature,
              (float)c->final_logit_softcap, a->lm_scratch);
    else
        DF_BE(a, lmhead_fwd, d_logp, d_ent, d_spq, a->lse, a->xnf, w->lm_head, a->bb.targets, n,
              c->vocab_size, c->hidden_size, temperature,
              (float)c->final_logit_softcap, a->lm_scratch);
    if (!host)
        DF_BE(a, download, out->logp, d_logp, (size_t)n * sizeof(float));
    if (out->entropy)
        DF_BE(a, download, out->entropy, a->ent, (size_t)n * sizeof(float));
    if (out->sum_pi_sq && !host)
        DF_BE(a, download, out->sum_pi_sq, d_spq, (size_t)n * sizeof(float));
}

int df_model_forward_head(const df_model *m, df_acts *a, const df_seq_batch *b, float temperature,
                          const df_head_out *out)
{
    if (m->cfg.num_labels > 0)
        return df_error(DF_EINVAL, "df_model_forward: a value model (num_labels %lld) has no LM "
                        "head; use df_model_forward_values", (long long)m->cfg.num_labels);
    int rc = df_acts_check_batch(a, &m->cfg, b, temperature);
    if (rc)
        return df_error_wrap(rc, "df_model_forward");
    if (!out || (!out->logp && b->n_out > 0))
        return df_error(DF_EINVAL, "df_model_forward: logp must not be NULL");
    const df_model_view *w = NULL;
    rc = df_acts_weights(a, m, &w);
    if (rc)
        return df_error_wrap(rc, "df_model_forward");
    a->fwd_valid = 0;
    rc = trunk_forward(m, w, a, b);
    if (!rc) {
        lm_head(m, w, a, b->n_out, temperature, out);
        rc = a->err;
    }
    if (rc)
        return df_error_wrap(rc, "df_model_forward on the %s backend", a->be.ops->name);
    mark_forward(a, b, DF_ACTS_HEAD_LM, temperature, out->entropy != NULL);
    return DF_OK;
}

int df_model_forward(const df_model *m, df_acts *a, const df_seq_batch *b, float temperature,
                     float *logp, float *entropy)
{
    const df_head_out out = {.logp = logp, .entropy = entropy};
    return df_model_forward_head(m, a, b, temperature, &out);
}

/* A device backend's value head: values = xnf score_weight^T + score_bias as one GEMM (the
 * CPU sums each dot product in double instead). */
static void value_head_device(df_acts *a, const df_model_view *w, int64_t n, int64_t H,
                              float *values)
{
    float *d_v = a->b_io;
    DF_BE(a, rows_fill, d_v, w->score_bias, n, 1);
    DF_BE32(a, gemm, false, true, n, 1, H, 1.0f, a->xnf, w->score_weight, 1.0f, d_v);
    DF_BE(a, download, values, d_v, (size_t)n * sizeof(float));
}

int df_model_forward_values(const df_model *m, df_acts *a, const df_seq_batch *b, float *values)
{
    if (m->cfg.num_labels != 1)
        return df_error(DF_EINVAL, "df_model_forward_values: not a value model (num_labels %lld; "
                        "see df_model_to_value_model)", (long long)m->cfg.num_labels);
    int rc = check_batch(a, &m->cfg, b, false, 1.0f);
    if (rc)
        return df_error_wrap(rc, "df_model_forward_values");
    if (!values && b->n_out > 0)
        return df_error(DF_EINVAL, "df_model_forward_values: values must not be NULL");
    const int64_t H = m->cfg.hidden_size;
    const df_model_view *wv = NULL;
    rc = df_acts_weights(a, m, &wv);
    if (rc)
        return df_error_wrap(rc, "df_model_forward_values");
    a->fwd_valid = 0;
    rc = trunk_forward(m, wv, a, b);
    if (!rc && !a->be.ops->host_memory) {
        value_head_device(a, wv, b->n_out, H, values);
        rc = a->err;
    }
    if (rc)
        return df_error_wrap(rc, "df_model_forward_values on the %s backend", a->be.ops->name);
    if (a->be.ops->host_memory) {
        /* score: one dot product per output row, summed in double (n_out * H is tiny next to
         * the trunk). */
        const float *w = m->w.score_weight, bias = m->w.score_bias[0];
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < b->n_out; j++) {
            const float *x = a->xnf + j * H;
            double acc = 0.0;
            for (int64_t i = 0; i < H; i++)
                acc += (double)x[i] * w[i];
            values[j] = (float)(acc + bias);
        }
    }
    mark_forward(a, b, DF_ACTS_HEAD_VALUE, 1.0f, 0);
    return DF_OK;
}
