/*
 * testbounds.h — rounding bounds of the model's outputs (logits, log-probs,
 * entropies, values) under the error model of tests/tolerance.h: how large
 * the head's outputs can be, how many roundings lie on the way to them, and
 * what that makes of one forward pass's error. For the engine tests
 * (test_actor, test_value_head, test_model_golden, test_rollout*, test_vocab)
 * and tests/testtrain.h. Include after cmocka.h.
 *
 * A model is a deep computation: its bounds are the probabilistic bound of
 * Higham & Mary (df_tol_gamma_prob, DF_TOL_LAMBDA) over the roundings on the
 * longest path, relative to the magnitude of each result.
 */
#ifndef DF_TESTS_TESTBOUNDS_H
#define DF_TESTS_TESTBOUNDS_H

#include "distflow/model.h"
#include "distflow/rollout.h"
#include "model/acts.h"
#include "tolerance.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * Z: a bound on the head's outputs over every input. The head reads n * x / rms(x)
 * from the final RMSNorm (n its weight), whose 2-norm is <= sqrt(hidden), so by
 * Cauchy-Schwarz a logit |z_j| <= sqrt(hidden) ||W_j * n||_2 / T and a value
 * |v| <= sqrt(hidden) ||w * n||_2 + |b|. These also bound the magnitudes of the
 * terms summed in the head (sum_e |h_e W_je| / T <= Z for a logit), so a float
 * logit is within gamma_{H+1} Z of the exact one.
 */
static inline double tb_head_bound(const df_model *m, float temperature)
{
    const int64_t H = m->cfg.hidden_size;
    const bool value = m->cfg.num_labels > 0;
    const float *head = value ? m->w.score_weight : m->w.lm_head;
    int64_t rows = value ? 1 : m->cfg.vocab_size;
    double z = 0;
    for (int64_t j = 0; j < rows; j++) {
        double s = 0;
        for (int64_t k = 0; k < H; k++) {
            /* the norm's scale: its weight, or 1 + w (Gemma3RMSNorm) */
            double n = (double)m->w.final_norm[k] + (m->cfg.norm_plus_one ? 1.0 : 0.0);
            double x = (double)head[j * H + k] * n;
            s += x * x;
        }
        z = fmax(z, sqrt(s));
    }
    return value ? sqrt((double)H) * z + fabs(m->w.score_bias[0]) : sqrt((double)H) * z / temperature;
}

/* ---- roundings on the longest path (n of df_tol_gamma_prob), sequences of <= L tokens ---- */

/* The width of the q/k norms' rows (0 without them): head_dim (qwen3) or the query's whole
   projection (olmo2; the key's is narrower). */
static inline double tb_qk_norm_width(const df_model_config *c)
{
    return !c->qk_norm ? 0 : (double)c->head_dim * (c->qk_norm_full ? (double)c->num_attention_heads : 1);
}

/* Roundings the attention features of some families add per layer: q/k norms (an RMSNorm over
   rows of width w: w + 4 forward as H + 4 for the hidden one, w + 8 backward as H + 8) and an
   o_proj bias (one add forward; its gradient sums the T tokens, which the chain ends with).
   OLMo 2's post-norm layer has as many RMSNorms and residual adds as the pre-norm one, in
   other places on the path: its chain is the same. */
/* Gemma 3's layer (sandwich_norm) adds per layer two RMSNorms on the path (the input and
   pre-feedforward ones: H + 4 each forward, H + 8 backward, and one residual add each backward),
   the (1 + w) add of each of its six norms' weights (one rounding each), the q scale (one
   multiply each way) and GeGLU's tanh form in place of SwiGLU (geglu_ref.h: about 13 roundings
   forward against SwiGLU's 3, 12 a term backward against 6: 10 and 8 more); the model adds the
   embedding scale (one multiply each way) and the final norm's (1 + w) (one). */
static inline double tb_gemma3_extra(const df_model_config *c, bool bwd)
{
    if (!c->sandwich_norm)
        return 0;
    const double H = (double)c->hidden_size;
    const double layer = bwd ? 2 * (H + 8) + 2 + 1 + 8 : 2 * (H + 4) + 6 + 1 + 10;
    return (double)c->num_hidden_layers * layer + (bwd ? 1 : 2);
}

/* The sparse layers of qwen3_moe, qwen2_moe and mixtral (moe.h) put the routing weight on the path of each expert's output:
   the router's GEMM (K = hidden), the softmax (the shift, exp 3 u, the sum of E terms, the
   division), the renormalisation (a sum of k, a division), the product with the expert's output
   and the sum of the k products: H + E + 2 k + 8 forward. Backward the weights' gradients add a
   dot product over hidden, the renormalisation's and the softmax's sums (k and E terms) and the
   router's input gradient (K = E): H + 2 E + 2 k + 12. The experts' own GEMMs are the dense MLP's
   chain at df_model_mlp_width. qwen2_moe's shared expert is a path beside them: its gate (a dot
   over hidden, the sigmoid: 3 u of exp, an add, a division) is shorter than the router's; its
   output is one more term of the sum (+1), and of the gradient's (+1). */
static inline double tb_moe_extra(const df_model_config *c, bool bwd)
{
    double sparse = 0;
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        sparse += df_model_layer_moe(c, l);
    const double H = (double)c->hidden_size, E = (double)c->num_experts, k = (double)c->num_experts_per_tok;
    const double shared = c->shared_expert_intermediate_size > 0 ? 1 : 0;
    return sparse * (bwd ? H + 2 * E + 2 * k + 12 + shared : H + E + 2 * k + 8 + shared);
}

static inline double tb_attn_extra_fwd(const df_model_config *c)
{
    double per_layer = (c->qk_norm ? tb_qk_norm_width(c) + 4 : 0) + (c->o_proj_bias ? 1 : 0);
    return (double)c->num_hidden_layers * per_layer + tb_gemma3_extra(c, false) + tb_moe_extra(c, false);
}

static inline double tb_attn_extra_bwd(const df_model_config *c)
{
    return (double)c->num_hidden_layers * (c->qk_norm ? tb_qk_norm_width(c) + 8 : 0) + tb_gemma3_extra(c, true) +
           tb_moe_extra(c, true);
}

/* To the head's outputs: the decoder (df_tol_decoder_fwd_chain), then the LM head (a GEMM of
   K = hidden, the product with the rounded 1 / T) or the value head (K = hidden, the bias). */
static inline double tb_head_chain(const df_model_config *c, int64_t L)
{
    return df_tol_decoder_fwd_chain(c->hidden_size, df_model_mlp_width(c), c->num_attention_heads, c->head_dim,
                                    L, c->num_hidden_layers) +
           tb_attn_extra_fwd(c) + (double)(c->hidden_size + 2);
}

/* To a log-prob or an entropy: the logits, then a log-softmax (or its entropy) over the
   vocabulary: the shift by the max, the exp (3 u, DF_TOL_EXPF), the sum of V terms, the log and
   the two subtractions. */
static inline double tb_logp_chain(const df_model_config *c, int64_t L)
{
    return tb_head_chain(c, L) + (double)(c->vocab_size + 6);
}

/* To the model's output: a log-prob / entropy, or a value for a value model. */
static inline double tb_forward_chain(const df_model_config *c, int64_t L)
{
    return c->num_labels > 0 ? tb_head_chain(c, L) : tb_logp_chain(c, L);
}

/* To a parameter's gradient of a loss on the outputs of T packed tokens: the forward, the head's
   backward (the LM head: dlogits and the sum over V; the value head: 2), the decoder's backward
   (df_tol_decoder_bwd_chain, whose last step sums the T tokens). */
static inline double tb_grad_chain(const df_model_config *c, int64_t L, int64_t T)
{
    double head = c->num_labels > 0 ? 2.0 : (double)(c->vocab_size + 8);
    return tb_forward_chain(c, L) + head + tb_attn_extra_bwd(c) +
           df_tol_decoder_bwd_chain(c->hidden_size, df_model_mlp_width(c), c->num_attention_heads,
                                    c->num_key_value_heads, c->head_dim, L, c->num_hidden_layers, T);
}

/* ---- one forward pass ------------------------------------------------------------------ */

/*
 * |error| of one float forward pass of m's output (sequences of <= L tokens): a log-prob
 * z_y - lse(z) (or an entropy, from the same operands) has the magnitude of the logits, |z| <= Z
 * and |lse| <= Z + log V, so eps (2 Z + log V); a value eps Z.
 */
static inline double tb_forward_err(const df_model *m, int64_t L, float temperature)
{
    double Z = tb_head_bound(m, temperature);
    double mag = m->cfg.num_labels > 0 ? Z : 2 * Z + log((double)m->cfg.vocab_size);
    return df_tol_gamma_prob(tb_forward_chain(&m->cfg, L), DF_TOL_LAMBDA, DF_U32) * mag;
}

/* F: how far two forward passes of the same weights that block their GEMMs differently (other
   row sets, micro-batches, another CPU's kernels) may put a log-prob, entropy or value: twice one
   pass's error. */
static inline double tb_forward_bound(const df_model *m, int64_t L, float temperature)
{
    return 2 * tb_forward_err(m, L, temperature);
}

/* ---- the LM head's log-softmax statistics (src/model/ops_vocab.c, ops_lmhead.c) ----------- */

/* |error| of the float sum of e^(z_v - m) over columns [c0, c1), float within tiles of `cols`
   columns from c0 (df_tol_pos_sum each) and double across them. */
static inline double tb_tiled_exp_sum_err(const double *z, double m, int64_t c0, int64_t c1, int64_t cols)
{
    double err = 0;
    for (int64_t k0 = c0; k0 < c1; k0 += cols) {
        double st = 0, tm = 0;
        for (int64_t v = k0; v < c1 && v < k0 + cols; v++)
            st += exp(z[v] - m), tm = fmax(tm, exp(z[v] - m));
        err += df_tol_pos_sum(c1 - k0 < cols ? c1 - k0 : cols, st, tm);
    }
    return err;
}

typedef struct {
    double lse, Ez; /* of the exact logits, in double */
    double dzmax;   /* the largest logit error */
    double dlse, dent;
    double sq, dsq; /* sum_v p_v^2 of the exact logits and the bound on its computed value */
} tb_lse_bound;

/*
 * Bounds on the statistics of one row of float logits as the vocabulary kernels compute them
 * (m the max, weights e^(z - m), sums float within tiles of `cols` columns and double across),
 * each logit within dz_v = c zm_v of the exact z (zm_v = sum_e |h_e W_ve| / T the magnitude
 * behind it, c the GEMM's gamma, doubled for two float computations compared). Weights: the
 * float difference and the exp, th_v = u |z_v - m| + DF_TOL_EXPF (0 for a max that leads by more
 * than 2 dzmax: e^0 = 1 exactly); s0 their sum, relative error d0 (tb_tiled_exp_sum_err).
 *   lse = m + log(s0): sum_v p_v (dz_v + th_v) + d0;
 *   entropy = log(s0) - s1 / s0, s1 = sum e^(z - m) (z - m) (all terms <= 0, no cancellation):
 *   z errors move it by p_v |z_v - E z| dz_v, weight errors by p_v th_v (1 + |z_v - E z|);
 *   d = z - m, the product, s1's float sum (2 u + gamma_cols) and s0's d0 act on
 *   sum p |z - m|; d0 on log(s0).
 *   sum of p^2 = s2 / s0^2, s2 = sum e^(2 (z - m)) (m cancels): each weight relative
 *   eta_v = dz_v + th_v, squared 2 eta_v + u; s2's float sum gamma_cols (positive terms) and
 *   s0's sum_v p_v eta_v + d0 twice; to second order, E (1 + E) of sq for the sum E.
 * The caller adds its reference's double rounding and any float store.
 */
static inline tb_lse_bound tb_row_lse_bound_e(const double *z, const double *zm, double c, int64_t V,
                                              int64_t cols, double exp_err);

static inline tb_lse_bound tb_row_lse_bound(const double *z, const double *zm, double c, int64_t V,
                                            int64_t cols)
{
    return tb_row_lse_bound_e(z, zm, c, V, cols, DF_TOL_EXPF);
}

/* As tb_row_lse_bound with an exp of relative error exp_err (another backend's math library). */
static inline tb_lse_bound tb_row_lse_bound_e(const double *z, const double *zm, double c, int64_t V,
                                              int64_t cols, double exp_err)
{
    const double u = DF_U32;
    double m = -INFINITY, m2 = -INFINITY, s0 = 0, Ez = 0;
    int64_t am = 0;
    tb_lse_bound b = {0};
    for (int64_t v = 0; v < V; v++) {
        if (z[v] > m)
            m2 = m, m = z[v], am = v;
        else
            m2 = fmax(m2, z[v]);
        b.dzmax = fmax(b.dzmax, c * zm[v]);
    }
    for (int64_t v = 0; v < V; v++)
        s0 += exp(z[v] - m);
    const double d0 = tb_tiled_exp_sum_err(z, m, 0, V, cols) / s0;
    b.lse = m + log(s0);
    for (int64_t v = 0; v < V; v++)
        Ez += exp(z[v] - b.lse) * z[v];
    b.Ez = Ez;
    b.dlse = b.dent = d0;
    const double gc = df_tol_gamma(cols < V ? cols : V, DF_U32);
    double e2 = 0;
    for (int64_t v = 0; v < V; v++) {
        double p = exp(z[v] - b.lse), dz = c * zm[v];
        double th = v == am && m - m2 > 2 * b.dzmax ? 0 : u * fabs(z[v] - m) + exp_err;
        b.dlse += p * (dz + th);
        b.dent += p * (fabs(z[v] - Ez) * (dz + th) + th + (2 * u + gc + d0) * fabs(z[v] - m));
        b.sq += p * p;
        e2 += p * p * (2 * (dz + th) + u);
    }
    const double E = e2 / b.sq + gc + 2 * b.dlse; /* dlse: s0's relative error */
    b.dsq = b.sq * E * (1 + E);
    return b;
}

/* ---- per output row, from a forward's final hidden states ------------------------------ */

/*
 * A log-prob z_t - lse at output row j has the magnitude of its own logits, tighter than Z: each
 * z_v is off by at most eps zm_v, zm_v = sum_e |h_e W_ve| / T over the final hidden state h, and
 * lse by at most eps max_v zm_v; so |dlogp| <= eps (zm_t + max_v zm_v) plus its rounding to float,
 * eps = tb_logp_eps.
 */
static inline double tb_logp_eps(const df_model_config *c, int64_t L)
{
    return df_tol_gamma_prob(tb_logp_chain(c, L), DF_TOL_LAMBDA, DF_U32);
}

/* zm_t + max_v zm_v for output row j of the last forward in a (its final hidden states). */
static inline double tb_row_scale(const df_model *m, const df_acts *a, int64_t j, int32_t tgt, double T)
{
    const int64_t H = m->cfg.hidden_size, V = m->cfg.vocab_size;
    const float *h = a->xnf + j * H;
    double zt = 0, zmax = 0;
    for (int64_t v = 0; v < V; v++) {
        double s = 0;
        for (int64_t e = 0; e < H; e++)
            s += fabs((double)h[e] * m->w.lm_head[v * H + e]);
        zmax = fmax(zmax, s / T);
        if (v == tgt)
            zt = s / T;
    }
    return zt + zmax;
}

/*
 * Teacher forcing: the log-probs lp[0..nr) of response r under m after prompt p of np tokens (one
 * sequence, row np - 1 + t predicting r[t]) at temperature T, and in err[t] the bound of one float
 * computation of each: eps tb_row_scale + u |lp_t| (eps = tb_logp_eps for sequences of at least
 * np + nr tokens). a holds np + nr tokens and nr outputs.
 */
static inline void tb_teacher_forced(const df_model *m, df_acts *a, const int32_t *p, int64_t np,
                                     const int32_t *r, int64_t nr, float T, double eps, float *lp,
                                     double *err)
{
    int32_t *tok = malloc((size_t)(np + nr) * sizeof *tok);
    int64_t *rows = malloc((size_t)(nr + 1) * sizeof *rows), off[2] = {0, np + nr};
    memcpy(tok, p, (size_t)np * sizeof *tok);
    memcpy(tok + np, r, (size_t)nr * sizeof *tok);
    for (int64_t t = 0; t < nr; t++)
        rows[t] = np - 1 + t;
    df_seq_batch sb = {np + nr, tok, 1, off, nr, rows, tok + np, NULL, NULL};
    assert_int_equal(df_model_forward(m, a, &sb, T, lp, NULL), 0);
    for (int64_t t = 0; t < nr; t++)
        err[t] = eps * tb_row_scale(m, a, t, r[t], T) + DF_U32 * fabs(lp[t]);
    free(tok), free(rows);
}

/* tb_teacher_forced (T = 1) for every response of rollout result r of request q, into
 * lp[r->offsets[s] ...) and err alike; a holds the longest prompt + response (64 tokens). */
static inline void tb_rollout_teacher_forced(const df_model *m, df_acts *a, const df_rollout_request *q,
                                             const df_rollout_result *r, float *lp, double *err)
{
    for (int64_t s = 0; s < r->n_seqs; s++) {
        int64_t i = s / q->n_samples, np = q->prompt_offsets[i + 1] - q->prompt_offsets[i];
        int64_t nr = r->offsets[s + 1] - r->offsets[s];
        tb_teacher_forced(m, a, q->prompt_tokens + q->prompt_offsets[i], np, r->tokens + r->offsets[s],
                          nr, 1.0f, tb_logp_eps(&m->cfg, 64), lp + r->offsets[s], err + r->offsets[s]);
    }
}

#endif
