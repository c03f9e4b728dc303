/*
 * Training forward pass of the Qwen2 / Llama decoder over packed sequences
 * (model.h), following HF transformers' modeling_qwen2.py:
 *   x = embed(ids); per layer:
 *     h = x + o_proj(attn(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1))), n1 = rmsnorm1(x)
 *     x = h + down(silu(gate(n2)) * up(n2)),                                 n2 = rmsnorm2(h)
 *   final rmsnorm and the head, for the output rows only: the LM head
 *   (df_model_forward) or a value model's score head (df_model_forward_values).
 */
#include "model/acts.h"
#include "model/ops.h"

#include <stdlib.h>
#include <string.h>

/* ---- df_acts ----------------------------------------------------------------- */

static float *falloc(int64_t n, int *fail)
{
    size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes);
    if (!p)
        *fail = 1;
    return p;
}

void df_acts_free(df_acts *a)
{
    if (!a)
        return;
    float *bufs[] = {a->x,     a->hmid,   a->xn1,      a->xn2,      a->rstd1,  a->rstd2,
                     a->q,     a->k,      a->v,        a->att,      a->att_lse, a->gate,
                     a->up,    a->xf,     a->xnf,      a->rstdf,    a->lse,    a->ent,
                     a->rope_cos, a->rope_sin, a->mlp_a, a->mlp_b,  a->mlp_c,  a->dres,
                     a->dxn,   a->dq,     a->dk,       a->dv,       a->dao,    a->dxf,
                     a->dxnf,  a->lm_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(a->pos);
    free(a->gview_layers);
    df_mm_ctx_free(a->mm);
    free(a);
}

int df_acts_set_bf16_matmul(df_acts *a, bool on)
{
    if (!on) {
        df_mm_ctx_free(a->mm);
        a->mm = NULL;
        return DF_OK;
    }
    if (a->mm)
        return DF_OK;
    const df_model_config *c = &a->cfg;
    int64_t H = c->hidden_size, I = c->intermediate_size;
    int64_t widest = I > H ? I : H, qd = df_acts_qd(a);
    widest = qd > widest ? qd : widest;
    /* Largest operand: [max_tokens, widest] activations or a [widest, H] weight. */
    int64_t n = a->max_tokens * widest > widest * H ? a->max_tokens * widest : widest * H;
    int rc = df_mm_ctx_create(n, &a->mm);
    return rc ? df_error_wrap(rc, "df_acts_set_bf16_matmul") : DF_OK;
}

int df_acts_create(const df_model_config *cfg, int64_t max_tokens, int64_t max_out,
                   df_acts **out)
{
    int rc = df_model_config_validate(cfg);
    if (rc)
        return df_error_wrap(rc, "df_acts_create");
    if (max_tokens <= 0 || max_out < 0 || max_out > max_tokens)
        return df_error(DF_EINVAL,
                        "df_acts_create: need 0 < max_tokens and 0 <= max_out <= max_tokens "
                        "(got max_tokens %lld, max_out %lld)",
                        (long long)max_tokens, (long long)max_out);
    if (cfg->head_dim > DF_MAX_HEAD_DIM)
        return df_error(DF_EUNSUPPORTED, "df_acts_create: head_dim %lld exceeds the supported %d",
                        (long long)cfg->head_dim, DF_MAX_HEAD_DIM);
    df_acts *a = calloc(1, sizeof *a);
    if (!a)
        return df_error(DF_ENOMEM, "out of memory allocating activations");
    a->cfg = *cfg;
    a->max_tokens = max_tokens;
    a->max_out = max_out;
    const int64_t T = max_tokens, L = cfg->num_hidden_layers, H = cfg->hidden_size;
    const int64_t I = cfg->intermediate_size, nh = cfg->num_attention_heads;
    const int64_t qd = df_acts_qd(a), kvd = df_acts_kvd(a), O = max_out > 0 ? max_out : 1;
    int fail = 0;
    a->x = falloc((L + 1) * T * H, &fail);
    a->hmid = falloc(L * T * H, &fail);
    a->xn1 = falloc(L * T * H, &fail);
    a->xn2 = falloc(L * T * H, &fail);
    a->rstd1 = falloc(L * T, &fail);
    a->rstd2 = falloc(L * T, &fail);
    a->q = falloc(L * T * qd, &fail);
    a->k = falloc(L * T * kvd, &fail);
    a->v = falloc(L * T * kvd, &fail);
    a->att = falloc(L * T * qd, &fail);
    a->att_lse = falloc(L * T * nh, &fail);
    a->gate = falloc(L * T * I, &fail);
    a->up = falloc(L * T * I, &fail);
    a->xf = falloc(O * H, &fail);
    a->xnf = falloc(O * H, &fail);
    a->rstdf = falloc(O, &fail);
    a->lse = falloc(O, &fail);
    a->ent = falloc(O, &fail);
    a->rope_cos = falloc(T * cfg->head_dim / 2, &fail);
    a->rope_sin = falloc(T * cfg->head_dim / 2, &fail);
    a->mlp_a = falloc(T * I, &fail);
    a->mlp_b = falloc(T * I, &fail);
    a->mlp_c = falloc(T * I, &fail);
    a->dres = falloc(T * H, &fail);
    a->dxn = falloc(T * H, &fail);
    a->dq = falloc(T * qd, &fail);
    a->dk = falloc(T * kvd, &fail);
    a->dv = falloc(T * kvd, &fail);
    a->dao = falloc(T * qd, &fail);
    a->dxf = falloc(O * H, &fail);
    a->dxnf = falloc(O * H, &fail);
    /* A value model never runs the LM head. */
    a->lm_scratch = falloc(cfg->num_labels > 0 ? 1 : df_lmhead_scratch_floats(O, cfg->vocab_size, H),
                           &fail);
    a->pos = malloc((size_t)T * sizeof(int32_t));
    a->gview_layers = calloc((size_t)L, sizeof(df_layer_view));
    if (fail || !a->pos || !a->gview_layers) {
        df_acts_free(a);
        return df_error(DF_ENOMEM, "out of memory allocating activations for %lld tokens",
                        (long long)max_tokens);
    }
    df_rope_table(a->rope_cos, a->rope_sin, T, cfg->head_dim, cfg->rope_theta);
    *out = a;
    return DF_OK;
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
    for (int64_t s = 0; s < b->n_seqs; s++)
        if (b->seq_offsets[s + 1] <= b->seq_offsets[s])
            return df_error(DF_EINVAL, "sequence %lld is empty or seq_offsets decrease",
                            (long long)s);
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

/* ---- forward ------------------------------------------------------------------- */

/* y = x W^T + b through the activations' matmul precision. */
static void linear(df_mm_ctx *mm, float *y, const float *x, const float *W, const float *b,
                   int64_t M, int64_t N, int64_t K)
{
    if (b) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < M; i++)
            memcpy(y + i * N, b, (size_t)N * sizeof(float));
    }
    df_mm_nt(mm, M, N, K, 1.0f, x, W, b ? 1.0f : 0.0f, y);
}

static void layer_forward(const df_model *m, df_acts *a, const df_seq_batch *b, int64_t l)
{
    const df_model_config *c = &m->cfg;
    const df_layer_view *w = &m->w.layers[l];
    const int64_t T = b->n_tokens, H = c->hidden_size, I = c->intermediate_size;
    const int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads, hd = c->head_dim;
    const int64_t qd = nh * hd, kvd = nkv * hd, MT = a->max_tokens;
    const float *x = a->x + l * MT * H;
    float *xn1 = a->xn1 + l * MT * H, *xn2 = a->xn2 + l * MT * H, *h = a->hmid + l * MT * H;
    float *q = a->q + l * MT * qd, *k = a->k + l * MT * kvd, *v = a->v + l * MT * kvd;
    float *att = a->att + l * MT * qd, *gate = a->gate + l * MT * I, *up = a->up + l * MT * I;
    float *xnext = a->x + (l + 1) * MT * H;
    const float eps = (float)c->rms_norm_eps;

    df_rmsnorm_fwd(xn1, a->rstd1 + l * MT, x, w->ln1, T, H, eps);
    linear(a->mm, q, xn1, w->wq, w->bq, T, qd, H);
    linear(a->mm, k, xn1, w->wk, w->bk, T, kvd, H);
    linear(a->mm, v, xn1, w->wv, w->bv, T, kvd, H);
    df_rope_apply(q, a->pos, T, nh, hd, a->rope_cos, a->rope_sin, false);
    df_rope_apply(k, a->pos, T, nkv, hd, a->rope_cos, a->rope_sin, false);
    df_attention_fwd(att, a->att_lse + l * MT * nh, q, k, v, b->seq_offsets, b->n_seqs, nh,
                     nkv, hd);
    /* Residual adds ride on the GEMM's beta = 1. */
    memcpy(h, x, (size_t)(T * H) * sizeof(float));
    df_mm_nt(a->mm, T, H, qd, 1.0f, att, w->wo, 1.0f, h);
    df_rmsnorm_fwd(xn2, a->rstd2 + l * MT, h, w->ln2, T, H, eps);
    linear(a->mm, gate, xn2, w->w_gate, NULL, T, I, H);
    linear(a->mm, up, xn2, w->w_up, NULL, T, I, H);
    df_swiglu_fwd(a->mlp_a, gate, up, T * I);
    memcpy(xnext, h, (size_t)(T * H) * sizeof(float));
    df_mm_nt(a->mm, T, H, I, 1.0f, a->mlp_a, w->w_down, 1.0f, xnext);
}

/* Embedding, decoder layers, and the final norm of the output rows (into a->xnf): the
 * trunk both heads share. */
static void trunk_forward(const df_model *m, df_acts *a, const df_seq_batch *b)
{
    const df_model_config *c = &m->cfg;
    const int64_t T = b->n_tokens, H = c->hidden_size, L = c->num_hidden_layers;
    for (int64_t s = 0; s < b->n_seqs; s++)
        for (int64_t t = b->seq_offsets[s]; t < b->seq_offsets[s + 1]; t++)
            a->pos[t] = (int32_t)(t - b->seq_offsets[s]);
    df_embedding_fwd(a->x, b->tokens, m->w.embed, T, H);
    for (int64_t l = 0; l < L; l++)
        layer_forward(m, a, b, l);
    /* Only output rows reach the final norm and the head. */
    const float *xl = a->x + L * a->max_tokens * H;
    for (int64_t j = 0; j < b->n_out; j++)
        memcpy(a->xf + j * H, xl + b->out_rows[j] * H, (size_t)H * sizeof(float));
    df_rmsnorm_fwd(a->xnf, a->rstdf, a->xf, m->w.final_norm, b->n_out, H,
                   (float)c->rms_norm_eps);
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

int df_model_forward(const df_model *m, df_acts *a, const df_seq_batch *b, float temperature,
                     float *logp, float *entropy)
{
    if (m->cfg.num_labels > 0)
        return df_error(DF_EINVAL, "df_model_forward: a value model (num_labels %lld) has no LM "
                        "head; use df_model_forward_values", (long long)m->cfg.num_labels);
    int rc = df_acts_check_batch(a, &m->cfg, b, temperature);
    if (rc)
        return df_error_wrap(rc, "df_model_forward");
    if (!logp && b->n_out > 0)
        return df_error(DF_EINVAL, "df_model_forward: logp must not be NULL");
    const df_model_config *c = &m->cfg;
    a->fwd_valid = 0;
    trunk_forward(m, a, b);
    /* Entropy only when asked: the backward then takes no dentropy. */
    df_lmhead_fwd(logp, entropy ? a->ent : NULL, a->lse, a->xnf, m->w.lm_head, b->out_targets,
                  b->n_out, c->vocab_size, c->hidden_size, temperature, a->lm_scratch);
    if (entropy)
        memcpy(entropy, a->ent, (size_t)b->n_out * sizeof(float));
    mark_forward(a, b, DF_ACTS_HEAD_LM, temperature, entropy != NULL);
    return DF_OK;
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
    a->fwd_valid = 0;
    trunk_forward(m, a, b);
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
    mark_forward(a, b, DF_ACTS_HEAD_VALUE, 1.0f, 0);
    return DF_OK;
}
