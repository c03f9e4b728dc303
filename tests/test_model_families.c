/*
 * The model families beyond Qwen2 against PyTorch (tests/golden/gen_golden_models.py, a float64
 * reference of transformers' modeling_qwen3.py / modeling_llama.py):
 *   tiny_qwen3    q/k RMSNorms, head_dim 16 with hidden 32, no biases, and the sliding window
 *                 (4 positions) on layer 1 only (max_window_layers 1);
 *   tiny_llama31  Llama 3.1's llama3 RoPE scaling (frequencies in all three bands), q/k/v and
 *                 o_proj biases (attention_bias), tied embeddings;
 *   tiny_qwen3_yarn  tiny_qwen3's layout with YaRN rope_scaling (factor 4 over an original 2048
 *                 of 8192 positions, beta_fast 24 / beta_slow 2: frequencies 0-2 kept, 3-4 blended,
 *                 5-7 divided by 4; cos / sin times 0.1 ln 4 + 1);
 *   tiny_mistral  MistralConfig's window (4 positions) on every layer, no biases, head_dim 16
 *                 with hidden 32, rope_theta 1e6, untied;
 *   tiny_phi3     Phi-3's checkpoint layout: each layer's q / k / v weights fused in
 *                 self_attn.qkv_proj and gate / up in mlp.gate_up_proj (split at load, fused
 *                 at save), GQA, no biases, no window; its gradients compared per fused tensor;
 *   tiny_phi3_longrope  the same with Phi-3.5's LongRoPE (per-frequency short factors, cos / sin
 *                 times the attention factor of a 16x context extension);
 *   tiny_phi4_mini  Phi-4-mini's partial rotary embedding (partial_rotary_factor 0.75: the first
 *                 12 of each head's 16 dims rotated, 6 frequencies) with LongRoPE, tied embeddings;
 *   tiny_olmo2    OLMo 2's post-norm layers (no input norm; post_attention_layernorm on the
 *                 attention's output, post_feedforward_layernorm on the MLP's, before the residual
 *                 adds) and q/k norms over the whole projections, GQA, head_dim 16 with hidden 32,
 *                 rope_theta 5e5, untied; tiny_olmo2_bias the same with attention_bias (q/k/v and
 *                 o_proj biases) and tied embeddings;
 *   tiny_gemma3   Gemma 3's text model: the sandwich layer (input, post-attention, pre-feedforward
 *                 and post-feedforward norms), every norm scaling by 1 + w, per-head q/k norms,
 *                 GeGLU, the embedding times sqrt(hidden), query_pre_attn_scalar 24 over head_dim
 *                 16, layer_types [sliding, sliding, full] with a window of 4, the sliding layers'
 *                 local RoPE (1e4) and the full layer's rope_theta 1e6 with linear scaling x8;
 *   tiny_qwen3_moe  Qwen3-MoE's sparse layers (layers 0 and 2, mlp_only_layers [1] dense): a
 *                 router over 4 experts, the top 2 renormalised (norm_topk_prob); _topk the top 3
 *                 of 5 unnormalised, decoder_sparse_step 2 (layer 1 sparse), tied embeddings;
 *   tiny_mixtral  Mixtral's sparse block on both layers under its names (block_sparse_moe, w1 /
 *                 w3 / w2), 2 of 4 experts renormalised, Mistral's window of 4 on every layer;
 *   tiny_qwen2_moe  Qwen2-MoE: Qwen2's attention (q/k/v biases), layers 0 and 2 sparse (2 of 4
 *                 experts of 16, unnormalised) with the shared expert of 40 scaled by
 *                 sigmoid(x shared_expert_gate^T), layer 1 dense;
 *   tiny_olmoe    OLMoE: Llama's pre-norm layer with q/k norms over the whole projections (head_dim
 *                 hidden / heads, no key), both layers sparse, 2 of 4 experts of intermediate_size
 *                 unnormalised.
 * For each: log-probs and entropies at two temperatures, full logits of a few rows and the
 * gradient of sum(c logp) + sum(d entropy) w.r.t. every parameter, within the bounds of
 * test_model_golden.c (tests/testbounds.h chains, which add the q/k norms' and the o_proj
 * bias's roundings); the rollout decoder's log-probs against the training decoder's on
 * sequences longer than the window; save / load round trips.
 *
 * Can it fail? Each feature is switched off or moved on the same weights (no q/k norm effect:
 * a norm weight moved by 1e-2; no window; the window on every layer; plain RoPE instead of
 * llama3; an o_proj bias moved by 1e-2; Mistral's window on layer 1 only, or rope_theta 1e4;
 * YaRN without its attention factor, with beta_fast / beta_slow swapped, or plain RoPE;
 * phi3's k and v, or gate and up, read in each other's place; longrope's long factors, no attention
 * factor, or plain RoPE; the whole head or fewer dims rotated instead of 12; an OLMo 2 post-norm
 * or q/k norm weight moved; Gemma 3's (1 + w) read as w, no embedding scale, SwiGLU, head_dim's
 * attention scale, one RoPE for all layers or the two swapped, the window on its full layer, two
 * norms swapped) and the same comparison must then exceed its bound.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "distflow/lora.h"
#include "distflow/model.h"
#include "distflow/rollout.h"
#include "model/acts.h"
#include "model/ops.h"
#include "testbounds.h"
#include "testgolden.h"
#include "tolerance.h"

#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN_DIR DF_SOURCE_DIR "/tests/golden"

typedef struct {
    df_model *m;
    df_golden_batch gb;
} golden;

#define FWD_TOL(g) df_golden_tol(tb_logp_chain(&(g)->m->cfg, df_golden_max_len(&(g)->gb)))
#define LOGITS_TOL(g) df_golden_tol(tb_head_chain(&(g)->m->cfg, df_golden_max_len(&(g)->gb)))
#define GRAD_TOL(g) df_golden_tol(tb_grad_chain(&(g)->m->cfg, df_golden_max_len(&(g)->gb), (g)->gb.T))

static golden load(const char *name)
{
    golden g;
    char dir[512], exp[512];
    snprintf(dir, sizeof dir, "%s/%s", GOLDEN_DIR, name);
    snprintf(exp, sizeof exp, "%s/%s_expected.safetensors", GOLDEN_DIR, name);
    if (df_model_load(dir, &g.m))
        fail_msg("%s: %s", name, df_last_error());
    df_golden_batch_load(&g.gb, exp);
    return g;
}

static void unload(golden *g)
{
    df_model_free(g->m);
    df_golden_batch_free(&g->gb);
}

/* m with g's weights but configuration c (the same tensors). */
static df_model *variant(const golden *g, const df_model_config *c)
{
    df_model *m;
    assert_int_equal(df_model_create(c, &m), DF_OK);
    assert_int_equal(m->n_params, g->m->n_params);
    memcpy(m->params, g->m->params, sizeof(float) * (size_t)m->n_params);
    return m;
}

/* Max relative L2 error of logp / entropy at temperatures 1 and 0.7. */
static double forward_error(const df_model *m, const golden *g)
{
    df_acts *a;
    assert_int_equal(df_acts_create(&m->cfg, g->gb.T, g->gb.n_out, &a), DF_OK);
    float *lp = malloc(sizeof(float) * (size_t)g->gb.n_out),
          *en = malloc(sizeof(float) * (size_t)g->gb.n_out);
    const char *names[2][2] = {{"logp.t1", "entropy.t1"}, {"logp.t07", "entropy.t07"}};
    const float temps[2] = {1.0f, 0.7f};
    double worst = 0;
    for (int k = 0; k < 2; k++) {
        assert_int_equal(df_model_forward(m, a, &g->gb.b, temps[k], lp, en), DF_OK);
        float *el = df_golden_read_vec(g->gb.exp, names[k][0], NULL);
        float *ee = df_golden_read_vec(g->gb.exp, names[k][1], NULL);
        worst =
            fmax(worst, fmax(df_golden_rel_err(lp, el, g->gb.n_out), df_golden_rel_err(en, ee, g->gb.n_out)));
        free(el), free(ee);
    }
    free(lp), free(en);
    df_acts_free(a);
    return worst;
}

/* Full logits of the fixture's logits.rows: the final-normed rows times the LM head. */
static double logits_error(const golden *g)
{
    df_acts *a;
    assert_int_equal(df_acts_create(&g->m->cfg, g->gb.T, g->gb.n_out, &a), DF_OK);
    float *lp = malloc(sizeof(float) * (size_t)g->gb.n_out);
    assert_int_equal(df_model_forward(g->m, a, &g->gb.b, 1.0f, lp, NULL), DF_OK);
    int64_t nr, nl;
    float *rows = df_golden_read_vec(g->gb.exp, "logits.rows", &nr),
          *want = df_golden_read_vec(g->gb.exp, "logits", &nl);
    const int64_t V = g->m->cfg.vocab_size, H = g->m->cfg.hidden_size;
    assert_int_equal(nl, nr * V);
    float *got = malloc(sizeof(float) * (size_t)nl);
    for (int64_t r = 0; r < nr; r++)
        df_gemm_nt(1, V, H, 1.0f, a->xnf + (int64_t)rows[r] * H, g->m->w.lm_head, 0.0f, got + r * V);
    double e = df_golden_rel_err(got, want, nl);
    free(lp), free(rows), free(want), free(got);
    df_acts_free(a);
    return e;
}

/* The gradient of the golden loss after `passes` forward / backward passes (malloc'd). */
static float *golden_grads(const df_model *m, const golden *g, int passes)
{
    df_acts *a;
    assert_int_equal(df_acts_create(&m->cfg, g->gb.T, g->gb.n_out, &a), DF_OK);
    float *lp = malloc(sizeof(float) * (size_t)g->gb.n_out),
          *en = malloc(sizeof(float) * (size_t)g->gb.n_out);
    float *c = df_golden_read_vec(g->gb.exp, "loss.c", NULL),
          *d = df_golden_read_vec(g->gb.exp, "loss.d", NULL);
    float *grads = calloc((size_t)m->n_params, sizeof(float));
    for (int p = 0; p < passes; p++) {
        assert_int_equal(df_model_forward(m, a, &g->gb.b, 0.7f, lp, en), DF_OK);
        assert_int_equal(df_model_backward(m, a, &g->gb.b, 0.7f, c, d, grads), DF_OK);
    }
    free(lp), free(en), free(c), free(d);
    df_acts_free(a);
    return grads;
}

/* Forward, logits and every gradient (one pass, and two accumulated) within their bounds. */
static void check_golden(const golden *g, const char *name)
{
    double fe = forward_error(g->m, g), le = logits_error(g);
    print_message("%s: logp/entropy rel err %.2e (bound %.2e), logits %.2e (bound %.2e)\n", name, fe,
                  FWD_TOL(g), le, LOGITS_TOL(g));
    assert_true(fe <= FWD_TOL(g));
    assert_true(le <= LOGITS_TOL(g));
    float *grads = golden_grads(g->m, g, 1);
    const char *wn = "";
    double ge = df_golden_worst_grad(g->m, g->gb.exp, grads, 1.0f, &wn);
    print_message("%s: worst gradient rel err %.2e (%s), bound %.2e\n", name, ge, wn, GRAD_TOL(g));
    assert_true(ge <= GRAD_TOL(g));
    free(grads);
    grads = golden_grads(g->m, g, 2);
    assert_true(df_golden_worst_grad(g->m, g->gb.exp, grads, 2.0f, NULL) <= GRAD_TOL(g));
    free(grads);
}

/* A change of the model that the comparison must see. */
static void expect_forward_moves(const df_model *m, const golden *g, const char *what)
{
    double fe = forward_error(m, g);
    print_message("%s: forward %.2e (bound %.2e)\n", what, fe, FWD_TOL(g));
    if (!(fe > FWD_TOL(g)))
        fail_msg("%s is invisible to the golden comparison (%.2e <= %.2e)", what, fe, FWD_TOL(g));
}

/* ---- Qwen3 -------------------------------------------------------------------------------- */

static void test_qwen3_config_and_layout(void **state)
{
    (void)state;
    golden g = load("tiny_qwen3");
    const df_model_config *c = &g.m->cfg;
    assert_string_equal(c->model_type, "qwen3");
    assert_true(c->qk_norm);
    assert_false(c->attention_bias || c->o_proj_bias);
    assert_int_equal(c->head_dim, 16); /* num_heads * head_dim = 64 != hidden 32 */
    assert_int_equal(c->sliding_window, 4);
    assert_int_equal(df_model_layer_window(c, 0), 0);
    assert_int_equal(df_model_layer_window(c, 1), 4);
    const df_param_desc *d = df_model_find_tensor(g.m, "model.layers.1.self_attn.k_norm.weight");
    assert_non_null(d);
    assert_int_equal(d->ndim, 1);
    assert_int_equal(d->shape[0], 16);
    assert_null(df_model_find_tensor(g.m, "model.layers.0.self_attn.q_proj.bias"));
    assert_null(df_model_find_tensor(g.m, "model.layers.0.self_attn.o_proj.bias"));
    assert_ptr_equal(g.m->w.layers[1].k_norm, g.m->params + d->offset);
    /* HF's init: the q/k norm weights are 1, like the other RMSNorms. */
    df_model *r;
    assert_int_equal(df_model_create(c, &r), DF_OK);
    assert_int_equal(df_model_init_random(r, 5), DF_OK);
    for (int64_t i = 0; i < 16; i++)
        assert_true(r->w.layers[0].q_norm[i] == 1.0f && r->w.layers[1].k_norm[i] == 1.0f);
    df_model_free(r);
    unload(&g);
}

static void test_qwen3_golden(void **state)
{
    (void)state;
    golden g = load("tiny_qwen3");
    check_golden(&g, "qwen3");
    unload(&g);
}

static void test_qwen3_detects(void **state)
{
    (void)state;
    golden g = load("tiny_qwen3");
    df_model_config c = g.m->cfg;
    df_model *m;
    assert_int_equal(df_model_clone(g.m, &m), DF_OK);
    m->w.layers[1].q_norm[3] += 1e-2f;
    expect_forward_moves(m, &g, "q_norm weight + 1e-2");
    m->w.layers[1].q_norm[3] -= 1e-2f;
    m->w.layers[0].k_norm[7] += 1e-3f;
    float *grads = golden_grads(m, &g, 1);
    double ge = df_golden_worst_grad(m, g.gb.exp, grads, 1.0f, NULL);
    print_message("k_norm weight + 1e-3: gradient %.2e (bound %.2e)\n", ge, GRAD_TOL(&g));
    assert_true(ge > GRAD_TOL(&g));
    free(grads);
    df_model_free(m);
    c.sliding_window = 0; /* no window anywhere */
    m = variant(&g, &c);
    expect_forward_moves(m, &g, "no sliding window");
    df_model_free(m);
    c = g.m->cfg;
    c.max_window_layers = 0; /* the window on layer 0 too */
    m = variant(&g, &c);
    expect_forward_moves(m, &g, "window on every layer");
    df_model_free(m);
    unload(&g);
}

/* YaRN: the blended frequencies and the attention factor against PyTorch's float32 evaluation. */
static void test_qwen3_yarn_golden(void **state)
{
    (void)state;
    golden g = load("tiny_qwen3_yarn");
    const df_model_config *c = &g.m->cfg;
    assert_int_equal(c->rope_type, DF_ROPE_YARN);
    assert_true(c->rope_factor == 4.0 && c->rope_beta_fast == 24.0 && c->rope_beta_slow == 2.0 && c->rope_truncate);
    assert_int_equal(c->rope_original_max_pos, 2048);
    assert_true(fabs(c->rope_attention_factor - (0.1 * log(4.0) + 1)) < 1e-15);
    assert_int_equal(df_model_max_positions(c), 8192);
    check_golden(&g, "qwen3 yarn");
    df_model_config v = *c;
    v.rope_attention_factor = 1.0;
    assert_false(df_rope_same(c, &v));
    df_model *m = variant(&g, &v);
    expect_forward_moves(m, &g, "yarn without its attention factor");
    df_model_free(m);
    v = *c;
    v.rope_beta_fast = c->rope_beta_slow, v.rope_beta_slow = c->rope_beta_fast;
    m = variant(&g, &v);
    expect_forward_moves(m, &g, "yarn with beta_fast and beta_slow swapped");
    df_model_free(m);
    v = *c;
    v.rope_type = DF_ROPE_DEFAULT;
    m = variant(&g, &v);
    expect_forward_moves(m, &g, "plain RoPE instead of yarn");
    df_model_free(m);
    unload(&g);
}

/* ---- Llama 3.1 ------------------------------------------------------------------------------ */

static void test_llama31_golden(void **state)
{
    (void)state;
    golden g = load("tiny_llama31");
    const df_model_config *c = &g.m->cfg;
    assert_int_equal(c->rope_type, DF_ROPE_LLAMA3);
    assert_true(c->rope_factor == 8.0 && c->rope_low_freq_factor == 1.0 && c->rope_high_freq_factor == 8.0);
    assert_int_equal(c->rope_original_max_pos, 1024);
    assert_true(c->attention_bias && c->o_proj_bias && c->tie_word_embeddings);
    assert_non_null(df_model_find_tensor(g.m, "model.layers.1.self_attn.o_proj.bias"));
    check_golden(&g, "llama3.1");
    unload(&g);
}

static void test_llama31_detects(void **state)
{
    (void)state;
    golden g = load("tiny_llama31");
    df_model_config c = g.m->cfg;
    c.rope_type = DF_ROPE_DEFAULT; /* plain RoPE on the same weights */
    df_model *m = variant(&g, &c);
    expect_forward_moves(m, &g, "plain RoPE instead of llama3");
    df_model_free(m);
    assert_int_equal(df_model_clone(g.m, &m), DF_OK);
    m->w.layers[0].bo[5] += 1e-2f;
    expect_forward_moves(m, &g, "o_proj bias + 1e-2");
    df_model_free(m);
    unload(&g);
}

/* ---- Mistral ----------------------------------------------------------------------------- */

static void test_mistral_golden(void **state)
{
    (void)state;
    golden g = load("tiny_mistral");
    const df_model_config *c = &g.m->cfg;
    assert_string_equal(c->model_type, "mistral");
    assert_true(!c->attention_bias && !c->o_proj_bias && !c->qk_norm && !c->tie_word_embeddings);
    assert_int_equal(c->head_dim, 16);
    assert_true(c->rope_theta == 1e6);
    assert_int_equal(df_model_layer_window(c, 0), 4);
    assert_int_equal(df_model_layer_window(c, 1), 4);
    assert_null(df_model_find_tensor(g.m, "model.layers.0.self_attn.q_proj.bias"));
    check_golden(&g, "mistral");
    df_model_config v = *c;
    v.max_window_layers = 1; /* the window on layer 1 only, as a Qwen2 reading would give */
    df_model *m = variant(&g, &v);
    expect_forward_moves(m, &g, "window on layer 1 only");
    df_model_free(m);
    v = *c;
    v.rope_theta = 1e4; /* Mistral 7B v0.1's theta on v0.2's weights */
    m = variant(&g, &v);
    expect_forward_moves(m, &g, "rope_theta 1e4");
    df_model_free(m);
    unload(&g);
}

/* ---- Phi-3 ---------------------------------------------------------------------------------- */

/* A copy of g's model with the contents of layout tensors a and b of every layer exchanged. */
static df_model *swapped(const golden *g, const char *a, const char *b)
{
    df_model *m = variant(g, &g->m->cfg);
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) {
        char na[96], nb[96];
        snprintf(na, sizeof na, "model.layers.%lld.%s", (long long)l, a);
        snprintf(nb, sizeof nb, "model.layers.%lld.%s", (long long)l, b);
        const df_param_desc *da = df_model_find_tensor(m, na), *db = df_model_find_tensor(m, nb);
        assert_true(da && db && da->numel == db->numel);
        for (int64_t j = 0; j < da->numel; j++) {
            float t = m->params[da->offset + j];
            m->params[da->offset + j] = m->params[db->offset + j];
            m->params[db->offset + j] = t;
        }
    }
    return m;
}

static void test_phi3_golden(void **state)
{
    (void)state;
    golden g = load("tiny_phi3");
    const df_model_config *c = &g.m->cfg;
    assert_string_equal(c->model_type, "phi3");
    assert_true(!c->attention_bias && !c->o_proj_bias && !c->qk_norm && !c->tie_word_embeddings);
    assert_int_equal(c->num_key_value_heads, 2);
    assert_int_equal(c->sliding_window, 0);
    /* split inside: the engine's tensors are Llama's */
    const df_param_desc *k = df_model_find_tensor(g.m, "model.layers.1.self_attn.k_proj.weight");
    assert_non_null(k);
    assert_int_equal(k->shape[0], 32);
    assert_null(df_model_find_tensor(g.m, "model.layers.1.self_attn.qkv_proj.weight"));
    check_golden(&g, "phi3");
    /* the rows of each part: k and v, gate and up (same shapes) taken in each other's place */
    df_model *m = swapped(&g, "self_attn.k_proj.weight", "self_attn.v_proj.weight");
    expect_forward_moves(m, &g, "phi3 k and v exchanged");
    df_model_free(m);
    m = swapped(&g, "mlp.gate_proj.weight", "mlp.up_proj.weight");
    expect_forward_moves(m, &g, "phi3 gate and up exchanged");
    df_model_free(m);
    unload(&g);
}

/* LongRoPE within the original context: the short factors and the attention factor. */
static void test_phi3_longrope_golden(void **state)
{
    (void)state;
    golden g = load("tiny_phi3_longrope");
    const df_model_config *c = &g.m->cfg;
    assert_int_equal(c->rope_type, DF_ROPE_LONGROPE);
    assert_int_equal(c->rope_original_max_pos, 512);
    assert_true(fabs(c->rope_attention_factor - sqrt(1 + log(16.0) / log(512.0))) < 1e-15);
    assert_true(c->rope_short_factor[7] == 9.5 && c->rope_long_factor[7] == 20.0);
    /* the short factors' range is what runs: 512 positions, not 8192 */
    assert_int_equal(df_model_max_positions(c), 512);
    assert_non_null(strstr(df_model_max_positions_name(c), "original_max_position_embeddings"));
    check_golden(&g, "phi3 longrope");
    df_model_config v = *c;
    memcpy(v.rope_short_factor, c->rope_long_factor, sizeof v.rope_short_factor);
    df_model *m = variant(&g, &v);
    expect_forward_moves(m, &g, "longrope's long factors");
    df_model_free(m);
    v = *c;
    v.rope_attention_factor = 1.0;
    assert_false(df_rope_same(c, &v)); /* a rollout engine built for one refuses a model of the other */
    m = variant(&g, &v);
    expect_forward_moves(m, &g, "longrope without its attention factor");
    df_model_free(m);
    v = *c;
    v.rope_type = DF_ROPE_DEFAULT;
    m = variant(&g, &v);
    expect_forward_moves(m, &g, "plain RoPE");
    df_model_free(m);
    unload(&g);
}

/* Partial rotary: RoPE on the first 12 of 16 dims per head, the frequencies sized by those 12. */
static void test_phi4_mini_golden(void **state)
{
    (void)state;
    golden g = load("tiny_phi4_mini");
    const df_model_config *c = &g.m->cfg;
    assert_int_equal(c->rope_dim, 12);
    assert_int_equal(df_model_rope_dim(c), 12);
    assert_int_equal(c->rope_type, DF_ROPE_LONGROPE);
    assert_true(c->tie_word_embeddings && c->rope_short_factor[5] == 4.0);
    check_golden(&g, "phi4-mini partial rotary");
    /* the whole head rotated (the two extra frequencies given factor 1), or only 8 dims */
    df_model_config v = *c;
    v.rope_dim = 16;
    v.rope_short_factor[6] = v.rope_short_factor[7] = v.rope_long_factor[6] = v.rope_long_factor[7] = 1.0;
    assert_false(df_rope_same(c, &v));
    df_model *m = variant(&g, &v);
    expect_forward_moves(m, &g, "RoPE on the whole head");
    df_model_free(m);
    v = *c;
    v.rope_dim = 8;
    m = variant(&g, &v);
    expect_forward_moves(m, &g, "RoPE on 8 dims");
    df_model_free(m);
    unload(&g);
}

/* dir/config.json of m and dir/model.safetensors of m's checkpoint tensors, except: `split` writes
   the layout's own (split) names instead; `drop` leaves one out; `short_qkv` writes layer 0's
   qkv_proj without its v rows. Then df_model_load(dir)'s status. */
static int phi3_file(const df_model *m, const char *dir, bool split, const char *drop, bool short_qkv)
{
    char path[600];
    assert_int_equal(df_mkdir_p(dir), DF_OK);
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(df_model_config_save(&m->cfg, m->config_json, path), DF_OK);
    df_hf_tensor *hf = NULL;
    int n = 0;
    assert_int_equal(df_hf_tensor_table(m, &hf, &n), DF_OK);
    df_st_writer *w = NULL;
    assert_int_equal(df_st_writer_new(&w), DF_OK);
    for (int i = 0; i < n; i++) {
        df_hf_tensor h = hf[i];
        const float *parts[3];
        int64_t numel[3];
        for (int k = 0; k < h.n_parts; k++) {
            const df_param_desc *d = &m->tensors[h.part[k]];
            parts[k] = m->params + d->offset, numel[k] = d->numel;
            if (split)
                assert_int_equal(df_st_writer_add_borrowed(w, d->name, DF_DTYPE_F32, d->ndim, d->shape, parts[k]), DF_OK);
        }
        if (split || (drop && !strcmp(h.name, drop)))
            continue;
        if (short_qkv && !strcmp(h.name, "model.layers.0.self_attn.qkv_proj.weight"))
            h.n_parts = 2, h.shape[0] -= m->tensors[h.part[2]].shape[0];
        assert_int_equal(df_st_writer_add_gathered(w, h.name, DF_DTYPE_F32, h.ndim, h.shape, parts, numel, h.n_parts),
                         DF_OK);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(df_st_writer_write(w, path), DF_OK);
    df_st_writer_free(w);
    free(hf);
    df_model *back = NULL;
    int rc = df_model_load(dir, &back);
    df_model_free(back);
    return rc;
}

/* A phi3 checkpoint holds the fused names only: split tensors are unexpected, a missing or
   mis-shaped fused tensor is named with the shape config.json gives it. */
static void test_phi3_file_errors(void **state)
{
    const char *dir = *state;
    golden g = load("tiny_phi3");
    char d[600];
    snprintf(d, sizeof d, "%s/ok", dir);
    assert_int_equal(phi3_file(g.m, d, false, NULL, false), DF_OK);
    snprintf(d, sizeof d, "%s/split", dir);
    assert_error_mentions(phi3_file(g.m, d, true, NULL, false), DF_EINVAL,
                          "unexpected tensor \"model.layers.0.self_attn.q_proj.weight\" (not in the phi3 layout");
    snprintf(d, sizeof d, "%s/missing", dir);
    assert_error_mentions(phi3_file(g.m, d, false, "model.layers.1.mlp.gate_up_proj.weight", false), DF_EINVAL,
                          "missing tensor \"model.layers.1.mlp.gate_up_proj.weight\" [shape 48, 32]");
    snprintf(d, sizeof d, "%s/short", dir);
    assert_error_mentions(phi3_file(g.m, d, false, NULL, true), DF_EINVAL,
                          "\"model.layers.0.self_attn.qkv_proj.weight\" has shape [96, 32], config.json implies [128, 32]");
    unload(&g);
}

/* LoRA on phi3 as PEFT adapts it: one adapter per fused module. Its PEFT files name qkv_proj /
 * gate_up_proj (B [128, r] and [48, r]), load back bit for bit, and merged onto the base by
 * df_lora_apply_peft (merge_and_unload) give the merge's weights; saved, the merged model is a
 * phi3 checkpoint whose fused tensors hold every part's update. */
static void test_phi3_lora(void **state)
{
    const char *dir = *state;
    golden g = load("tiny_phi3");
    df_model *base = df_test_model_copy(g.m);
    df_lora_config lc = {.rank = 2, .alpha = 4, .targets = DF_LORA_ALL_LINEAR};
    df_lora *l = NULL, *back = NULL;
    assert_int_equal(df_lora_create(g.m, &lc, 1, &l), DF_OK);
    const df_param_desc *d = df_lora_find_tensor(l, "base_model.model.model.layers.1.self_attn.qkv_proj.lora_B.weight");
    assert_true(d && d->shape[0] == 128 && d->shape[1] == 2);
    d = df_lora_find_tensor(l, "base_model.model.model.layers.0.mlp.gate_up_proj.lora_B.weight");
    assert_true(d && d->shape[0] == 48);
    for (int i = 1; i < l->n_tensors; i += 2)
        for (int64_t k = 0; k < l->tensors[i].numel; k++)
            l->params[l->tensors[i].offset + k] = 0.01f * (float)((k * 7 + i) % 13) - 0.06f;
    assert_int_equal(df_lora_merge(l, g.m), DF_OK);
    char ad[600], md[600];
    snprintf(ad, sizeof ad, "%s/adapter", dir);
    assert_int_equal(df_lora_save_peft(l, ad, NULL), DF_OK);
    snprintf(md, sizeof md, "%s/adapter/adapter_config.json", dir);
    json_t *j = json_load_file(md, 0, NULL);
    json_t *tm = json_object_get(j, "target_modules");
    const char *want[4] = {"down_proj", "gate_up_proj", "o_proj", "qkv_proj"};
    assert_int_equal(json_array_size(tm), 4);
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(json_string_value(json_array_get(tm, i)), want[i]);
    json_decref(j);
    assert_int_equal(df_lora_create(base, &lc, 2, &back), DF_OK);
    assert_int_equal(df_lora_load_peft(back, ad), DF_OK);
    assert_memory_equal(back->params, l->params, sizeof(float) * (size_t)l->n_params);
    assert_int_equal(df_lora_apply_peft(base, ad), DF_OK);
    assert_memory_equal(base->params, g.m->params, sizeof(float) * (size_t)g.m->n_params);
    /* every part moved: the fused file tensor differs from the fixture's in each row block */
    const df_param_desc *wk = df_model_find_tensor(g.m, "model.layers.0.self_attn.k_proj.weight");
    const df_param_desc *wv = df_model_find_tensor(g.m, "model.layers.0.self_attn.v_proj.weight");
    golden g0 = load("tiny_phi3");
    assert_true(memcmp(g.m->params + wk->offset, g0.m->params + wk->offset, 4 * (size_t)wk->numel));
    assert_true(memcmp(g.m->params + wv->offset, g0.m->params + wv->offset, 4 * (size_t)wv->numel));
    snprintf(md, sizeof md, "%s/merged", dir);
    assert_int_equal(df_model_save(g.m, md, DF_DTYPE_F32, 0), DF_OK);
    df_model *rm = NULL;
    assert_int_equal(df_model_load(md, &rm), DF_OK);
    assert_memory_equal(rm->params, g.m->params, sizeof(float) * (size_t)g.m->n_params);
    df_model_free(rm);
    unload(&g0);
    df_lora_free(back);
    df_lora_free(l);
    df_model_free(base);
    unload(&g);
}

/* ---- OLMo 2 ------------------------------------------------------------------------------------ */

static void test_olmo2_config_and_layout(void **state)
{
    (void)state;
    golden g = load("tiny_olmo2");
    const df_model_config *c = &g.m->cfg;
    assert_string_equal(c->model_type, "olmo2");
    assert_true(c->post_norm && c->qk_norm && c->qk_norm_full);
    assert_false(c->attention_bias || c->o_proj_bias || c->tie_word_embeddings);
    assert_true(c->num_key_value_heads == 2 && c->head_dim == 16 && c->rope_theta == 5e5);
    assert_int_equal(c->sliding_window, 0);
    /* the q/k norms span the projections [4 x 16], [2 x 16]; no input norm; a post-feedforward one */
    const df_param_desc *q = df_model_find_tensor(g.m, "model.layers.1.self_attn.q_norm.weight");
    const df_param_desc *k = df_model_find_tensor(g.m, "model.layers.1.self_attn.k_norm.weight");
    const df_param_desc *f = df_model_find_tensor(g.m, "model.layers.1.post_feedforward_layernorm.weight");
    const df_param_desc *p = df_model_find_tensor(g.m, "model.layers.1.post_attention_layernorm.weight");
    assert_true(q && k && f && p);
    assert_true(q->ndim == 1 && q->shape[0] == 64 && k->shape[0] == 32 && f->shape[0] == 32);
    assert_null(df_model_find_tensor(g.m, "model.layers.0.input_layernorm.weight"));
    assert_null(g.m->w.layers[0].ln1);
    assert_ptr_equal(g.m->w.layers[1].ln3, g.m->params + f->offset);
    assert_ptr_equal(g.m->w.layers[1].ln2, g.m->params + p->offset);
    assert_ptr_equal(g.m->w.layers[1].k_norm, g.m->params + k->offset);
    /* HF's init: every norm 1, the full-width q/k norms too */
    df_model *r;
    assert_int_equal(df_model_create(c, &r), DF_OK);
    assert_int_equal(df_model_init_random(r, 5), DF_OK);
    for (int64_t i = 0; i < 64; i++)
        assert_true(r->w.layers[0].q_norm[i] == 1.0f && (i >= 32 || r->w.layers[1].ln3[i] == 1.0f));
    df_model_free(r);
    unload(&g);
}

static void test_olmo2_golden(void **state)
{
    (void)state;
    golden g = load("tiny_olmo2");
    check_golden(&g, "olmo2");
    unload(&g);
    g = load("tiny_olmo2_bias");
    assert_true(g.m->cfg.attention_bias && g.m->cfg.o_proj_bias && g.m->cfg.tie_word_embeddings);
    assert_non_null(df_model_find_tensor(g.m, "model.layers.0.self_attn.o_proj.bias"));
    check_golden(&g, "olmo2 with biases");
    unload(&g);
}

/* Each of OLMo 2's norms matters where HF applies it: a weight moved breaks the bound (q_norm's
 * in the third head: the norm reads the whole projection). */
static void test_olmo2_detects(void **state)
{
    (void)state;
    golden g = load("tiny_olmo2");
    df_model *m;
    assert_int_equal(df_model_clone(g.m, &m), DF_OK);
    df_layer_view *l0 = &m->w.layers[0], *l1 = &m->w.layers[1];
    float *moved[3] = {&l1->ln2[3], &l0->ln3[5], &l1->q_norm[40]};
    const char *what[3] = {"post_attention_layernorm weight + 1e-2", "post_feedforward_layernorm weight + 1e-2",
                           "q_norm weight 40 (head 2) + 1e-2"};
    for (int i = 0; i < 3; i++) {
        *moved[i] += 1e-2f;
        expect_forward_moves(m, &g, what[i]);
        *moved[i] -= 1e-2f;
    }
    l0->k_norm[20] += 1e-3f;
    float *grads = golden_grads(m, &g, 1);
    double ge = df_golden_worst_grad(m, g.gb.exp, grads, 1.0f, NULL);
    print_message("k_norm weight 20 + 1e-3: gradient %.2e (bound %.2e)\n", ge, GRAD_TOL(&g));
    assert_true(ge > GRAD_TOL(&g));
    free(grads);
    df_model_free(m);
    unload(&g);
}

/* dir/config.json of m and a dir/model.safetensors of m's tensors, except `drop` left out and
   `extra` written as a [n] tensor (instead of the tensor of that name, or besides them); then
   df_model_load(dir)'s status. */
static int olmo2_file(const df_model *m, const char *dir, const char *drop, const char *extra, int64_t n)
{
    char path[600];
    assert_int_equal(df_mkdir_p(dir), DF_OK);
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(df_model_config_save(&m->cfg, m->config_json, path), DF_OK);
    df_st_writer *w = NULL;
    assert_int_equal(df_st_writer_new(&w), DF_OK);
    for (int i = 0; i < m->n_tensors; i++) {
        const df_param_desc *d = &m->tensors[i];
        if ((drop && !strcmp(d->name, drop)) || (extra && !strcmp(d->name, extra)))
            continue;
        assert_int_equal(df_st_writer_add_borrowed(w, d->name, DF_DTYPE_F32, d->ndim, d->shape, m->params + d->offset),
                         DF_OK);
    }
    const int64_t shape[2] = {n, 0};
    if (extra)
        assert_int_equal(df_st_writer_add_borrowed(w, extra, DF_DTYPE_F32, 1, shape, m->params), DF_OK);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(df_st_writer_write(w, path), DF_OK);
    df_st_writer_free(w);
    df_model *back = NULL;
    int rc = df_model_load(dir, &back);
    df_model_free(back);
    return rc;
}

/* An OLMo 2 checkpoint with a Llama / Qwen3 layer's norms is refused naming the tensor: a q_norm of
   one head's width, an input_layernorm, no post_feedforward_layernorm. */
static void test_olmo2_file_errors(void **state)
{
    const char *dir = *state;
    golden g = load("tiny_olmo2");
    char d[600];
    snprintf(d, sizeof d, "%s/ok", dir);
    assert_int_equal(olmo2_file(g.m, d, NULL, NULL, 0), DF_OK);
    snprintf(d, sizeof d, "%s/per_head", dir);
    assert_error_mentions(olmo2_file(g.m, d, NULL, "model.layers.1.self_attn.q_norm.weight", 16), DF_EINVAL,
                          "\"model.layers.1.self_attn.q_norm.weight\" has shape [16], config.json implies [64]");
    snprintf(d, sizeof d, "%s/input_norm", dir);
    assert_error_mentions(olmo2_file(g.m, d, NULL, "model.layers.0.input_layernorm.weight", 32), DF_EINVAL,
                          "unexpected tensor \"model.layers.0.input_layernorm.weight\" (not in the olmo2 layout");
    snprintf(d, sizeof d, "%s/no_ff_norm", dir);
    assert_error_mentions(olmo2_file(g.m, d, "model.layers.0.post_feedforward_layernorm.weight", NULL, 0),
                          DF_EINVAL, "missing tensor \"model.layers.0.post_feedforward_layernorm.weight\" [shape 32]");
    unload(&g);
}

/* ---- Gemma 3 ----------------------------------------------------------------------------------- */

static void test_gemma3_config_and_layout(void **state)
{
    (void)state;
    golden g = load("tiny_gemma3");
    const df_model_config *c = &g.m->cfg;
    assert_string_equal(c->model_type, "gemma3_text");
    assert_true(c->post_norm && c->sandwich_norm && c->norm_plus_one && c->embed_scale && c->geglu);
    assert_true(c->qk_norm && !c->qk_norm_full && c->tie_word_embeddings && !c->attention_bias);
    assert_true(c->query_pre_attn_scalar == 24 && c->rope_local_theta == 1e4 && c->rope_theta == 1e6);
    assert_true(c->rope_type == DF_ROPE_LINEAR && c->rope_factor == 8);
    /* layer_types [sliding, sliding, full]: the window and the local RoPE on layers 0 and 1 */
    assert_true(df_model_layer_window(c, 0) == 4 && df_model_layer_window(c, 1) == 4 &&
                df_model_layer_window(c, 2) == 0);
    assert_true(df_model_layer_local_rope(c, 1) && !df_model_layer_local_rope(c, 2));
    const df_param_desc *ff = df_model_find_tensor(g.m, "model.layers.1.pre_feedforward_layernorm.weight");
    const df_param_desc *in = df_model_find_tensor(g.m, "model.layers.1.input_layernorm.weight");
    const df_param_desc *q = df_model_find_tensor(g.m, "model.layers.1.self_attn.q_norm.weight");
    assert_true(ff && in && q && q->shape[0] == 16);
    assert_ptr_equal(g.m->w.layers[1].ln_ff, g.m->params + ff->offset);
    assert_ptr_equal(g.m->w.layers[1].ln1, g.m->params + in->offset);
    assert_int_equal(g.m->n_tensors, 1 + 3 * 13 + 1);
    /* Gemma3's init: its norms scale by 1 + w, so w starts at 0 */
    df_model *r;
    assert_int_equal(df_model_create(c, &r), DF_OK);
    assert_int_equal(df_model_init_random(r, 5), DF_OK);
    for (int64_t i = 0; i < 16; i++)
        assert_true(r->w.layers[0].q_norm[i] == 0.0f && r->w.layers[2].ln_ff[i] == 0.0f && r->w.final_norm[i] == 0.0f);
    df_model_free(r);
    unload(&g);
}

static void test_gemma3_golden(void **state)
{
    (void)state;
    golden g = load("tiny_gemma3");
    check_golden(&g, "gemma3");
    unload(&g);
}

/* Each of Gemma 3's features matters where HF applies it: switched off, moved or swapped on the
 * same weights, the forward (or the gradient) leaves its bound. */
static void test_gemma3_detects(void **state)
{
    (void)state;
    golden g = load("tiny_gemma3");
    df_model_config c = g.m->cfg;
    c.norm_plus_one = false; /* the norms' weights read as w, not 1 + w */
    df_model *m = variant(&g, &c);
    expect_forward_moves(m, &g, "norms scaled by w instead of 1 + w");
    df_model_free(m);
    c = g.m->cfg;
    c.embed_scale = false;
    m = variant(&g, &c);
    expect_forward_moves(m, &g, "no embedding scale");
    df_model_free(m);
    c = g.m->cfg;
    c.geglu = false;
    m = variant(&g, &c);
    expect_forward_moves(m, &g, "SwiGLU instead of GeGLU");
    df_model_free(m);
    c = g.m->cfg;
    c.query_pre_attn_scalar = 0; /* head_dim^-0.5 */
    m = variant(&g, &c);
    expect_forward_moves(m, &g, "attention scale head_dim^-0.5");
    df_model_free(m);
    c = g.m->cfg;
    c.rope_local_theta = 0; /* every layer the full layers' RoPE */
    m = variant(&g, &c);
    expect_forward_moves(m, &g, "the global RoPE on the sliding layers");
    df_model_free(m);
    c = g.m->cfg;
    const double t = c.rope_theta; /* the two tables swapped (the scaling kept on the global one) */
    c.rope_theta = c.rope_local_theta, c.rope_local_theta = t;
    m = variant(&g, &c);
    expect_forward_moves(m, &g, "RoPE bases swapped");
    df_model_free(m);
    c = g.m->cfg;
    c.full_layers[0] = 0, c.max_window_layers = 1; /* layer 0 full, layers 1 and 2 windowed */
    m = variant(&g, &c);
    expect_forward_moves(m, &g, "the window on the full layer");
    df_model_free(m);
    /* the norms in each other's places: pre_feedforward <-> post_attention, input <-> post_feedforward */
    assert_int_equal(df_model_clone(g.m, &m), DF_OK);
    df_layer_view *l1 = &m->w.layers[1];
    float tmp[32];
    float *pairs[2][2] = {{l1->ln_ff, l1->ln2}, {l1->ln1, l1->ln3}};
    for (int i = 0; i < 2; i++) {
        memcpy(tmp, pairs[i][0], sizeof tmp);
        memcpy(pairs[i][0], pairs[i][1], sizeof tmp);
        memcpy(pairs[i][1], tmp, sizeof tmp);
        expect_forward_moves(m, &g, i ? "input / post_feedforward norms swapped" : "pre_feedforward / post_attention norms swapped");
        memcpy(pairs[i][1], pairs[i][0], sizeof tmp);
        memcpy(pairs[i][0], tmp, sizeof tmp);
    }
    m->w.layers[0].k_norm[5] += 1e-3f;
    float *grads = golden_grads(m, &g, 1);
    double ge = df_golden_worst_grad(m, g.gb.exp, grads, 1.0f, NULL);
    print_message("k_norm weight 5 + 1e-3: gradient %.2e (bound %.2e)\n", ge, GRAD_TOL(&g));
    assert_true(ge > GRAD_TOL(&g));
    free(grads);
    df_model_free(m);
    unload(&g);
}


/* ---- Qwen3-MoE, Mixtral -------------------------------------------------------------------- */

/* Swap the data of two equal-sized tensors of m (by HF name). */
static void swap_tensors(df_model *m, const char *a, const char *b)
{
    const df_param_desc *da = df_model_find_tensor(m, a), *db = df_model_find_tensor(m, b);
    assert_true(da && db && da->numel == db->numel);
    for (int64_t i = 0; i < da->numel; i++) {
        const float t = m->params[da->offset + i];
        m->params[da->offset + i] = m->params[db->offset + i];
        m->params[db->offset + i] = t;
    }
}

/* tiny_qwen3_moe: the config as parsed, which layers are sparse and where each expert's tensors
 * sit in the blob and in the layer's view. */
static void test_qwen3_moe_config_and_layout(void **state)
{
    (void)state;
    golden g = load("tiny_qwen3_moe");
    const df_model_config *c = &g.m->cfg;
    assert_string_equal(c->model_type, "qwen3_moe");
    assert_true(c->qk_norm && c->norm_topk_prob);
    assert_true(c->num_experts == 4 && c->num_experts_per_tok == 2 && c->moe_intermediate_size == 24);
    assert_true(c->decoder_sparse_step == 1 && c->mlp_only_layers[0] == 2u); /* mlp_only_layers [1] */
    assert_true(df_model_layer_moe(c, 0) && !df_model_layer_moe(c, 1) && df_model_layer_moe(c, 2));
    const df_param_desc *r = df_model_find_tensor(g.m, "model.layers.2.mlp.gate.weight");
    const df_param_desc *e0 = df_model_find_tensor(g.m, "model.layers.2.mlp.experts.0.gate_proj.weight");
    const df_param_desc *u2 = df_model_find_tensor(g.m, "model.layers.2.mlp.experts.2.up_proj.weight");
    const df_param_desc *d3 = df_model_find_tensor(g.m, "model.layers.2.mlp.experts.3.down_proj.weight");
    assert_true(r && e0 && u2 && d3);
    assert_true(r->shape[0] == 4 && r->shape[1] == 32 && d3->shape[0] == 32 && d3->shape[1] == 24);
    const df_layer_view *l2 = &g.m->w.layers[2];
    const int64_t stride = df_model_expert_floats(c);
    assert_ptr_equal(l2->router, g.m->params + r->offset);
    assert_ptr_equal(l2->experts, g.m->params + e0->offset);
    assert_ptr_equal(l2->experts + 2 * stride + stride / 3, g.m->params + u2->offset);
    assert_ptr_equal(l2->experts + 3 * stride + 2 * stride / 3, g.m->params + d3->offset);
    assert_null(l2->w_gate);
    assert_null(df_model_find_tensor(g.m, "model.layers.0.mlp.gate_proj.weight"));
    assert_non_null(df_model_find_tensor(g.m, "model.layers.1.mlp.gate_proj.weight"));
    assert_true(g.m->w.layers[1].w_gate && !g.m->w.layers[1].router);
    assert_null(df_model_find_tensor(g.m, "model.layers.1.mlp.experts.0.up_proj.weight"));
    unload(&g);
    g = load("tiny_qwen3_moe_topk"); /* decoder_sparse_step 2: layer 1 only */
    c = &g.m->cfg;
    assert_true(!df_model_layer_moe(c, 0) && df_model_layer_moe(c, 1) && !df_model_layer_moe(c, 2));
    assert_true(c->num_experts == 5 && c->num_experts_per_tok == 3 && !c->norm_topk_prob);
    unload(&g);
}

static void test_qwen3_moe_golden(void **state)
{
    (void)state;
    golden g = load("tiny_qwen3_moe");
    check_golden(&g, "qwen3_moe");
    unload(&g);
    g = load("tiny_qwen3_moe_topk");
    check_golden(&g, "qwen3_moe_topk");
    unload(&g);
}

/* tiny_mixtral: Mistral's attention (window 4 on every layer) and MixtralSparseMoeBlock on both
 * layers under its own names (block_sparse_moe.gate, experts.<e>.w1 / w3 / w2 as gate / up /
 * down); w1 and w3 read in each other's place (a swapped name at the loader) must break the
 * bound, and so must the window dropped. */
static void test_mixtral_golden(void **state)
{
    (void)state;
    golden g = load("tiny_mixtral");
    const df_model_config *c = &g.m->cfg;
    assert_true(c->num_experts == 4 && c->num_experts_per_tok == 2 && c->moe_intermediate_size == 24);
    assert_true(c->norm_topk_prob && df_model_layer_moe(c, 0) && df_model_layer_moe(c, 1));
    assert_int_equal(df_model_layer_window(c, 0), 4);
    const df_param_desc *w3 = df_model_find_tensor(g.m, "model.layers.1.block_sparse_moe.experts.2.w3.weight");
    assert_non_null(w3);
    const int64_t stride = df_model_expert_floats(c);
    assert_ptr_equal(g.m->w.layers[1].experts + 2 * stride + stride / 3, g.m->params + w3->offset);
    check_golden(&g, "mixtral");
    df_model *m = variant(&g, c);
    swap_tensors(m, "model.layers.0.block_sparse_moe.experts.1.w1.weight",
                 "model.layers.0.block_sparse_moe.experts.1.w3.weight");
    expect_forward_moves(m, &g, "expert 1's w1 and w3 swapped");
    df_model_free(m);
    df_model_config nw = *c;
    nw.sliding_window = 0;
    m = variant(&g, &nw);
    expect_forward_moves(m, &g, "no window");
    df_model_free(m);
    unload(&g);
}

/* tiny_qwen2_moe: the shared expert's tensors in the blob and the view (the widest MLP, 40); the
 * golden comparison; the shared expert's gate_proj and up_proj read in each other's place, its
 * gate's sign flipped (sigmoid(-z) = 1 - sigmoid(z)), and the routing weights renormalised must
 * each break the bound, and a moved shared gate weight the gradients'. */
static void test_qwen2_moe_golden(void **state)
{
    (void)state;
    golden g = load("tiny_qwen2_moe");
    const df_model_config *c = &g.m->cfg;
    assert_string_equal(c->model_type, "qwen2_moe");
    assert_true(c->attention_bias && !c->o_proj_bias && !c->qk_norm && !c->norm_topk_prob);
    assert_true(c->num_experts == 4 && c->moe_intermediate_size == 16 && c->shared_expert_intermediate_size == 40);
    assert_true(df_model_layer_moe(c, 0) && !df_model_layer_moe(c, 1) && df_model_layer_moe(c, 2));
    assert_int_equal(df_model_mlp_width(c), 40);
    const df_param_desc *su = df_model_find_tensor(g.m, "model.layers.2.mlp.shared_expert.up_proj.weight");
    const df_param_desc *sd = df_model_find_tensor(g.m, "model.layers.2.mlp.shared_expert.down_proj.weight");
    const df_param_desc *sg = df_model_find_tensor(g.m, "model.layers.2.mlp.shared_expert_gate.weight");
    assert_true(su && sd && sg && sd->shape[0] == 32 && sd->shape[1] == 40 && sg->shape[0] == 1 && sg->shape[1] == 32);
    const df_layer_view *l2 = &g.m->w.layers[2];
    const int64_t sf = df_model_shared_floats(c);
    assert_ptr_equal(l2->shared + sf / 3, g.m->params + su->offset);
    assert_ptr_equal(l2->shared + 2 * sf / 3, g.m->params + sd->offset);
    assert_ptr_equal(l2->shared_gate, g.m->params + sg->offset);
    assert_true(!g.m->w.layers[1].shared && !g.m->w.layers[1].shared_gate);
    assert_null(df_model_find_tensor(g.m, "model.layers.1.mlp.shared_expert_gate.weight"));
    check_golden(&g, "qwen2_moe");
    df_model *m = variant(&g, c);
    swap_tensors(m, "model.layers.0.mlp.shared_expert.gate_proj.weight", "model.layers.0.mlp.shared_expert.up_proj.weight");
    expect_forward_moves(m, &g, "the shared expert's gate_proj and up_proj swapped");
    df_model_free(m);
    m = variant(&g, c);
    for (int64_t h = 0; h < c->hidden_size; h++)
        m->w.layers[2].shared_gate[h] = -m->w.layers[2].shared_gate[h];
    expect_forward_moves(m, &g, "the shared expert's gate negated");
    df_model_free(m);
    df_model_config nt = *c;
    nt.norm_topk_prob = true;
    m = variant(&g, &nt);
    expect_forward_moves(m, &g, "routing weights renormalised");
    df_model_free(m);
    m = variant(&g, c);
    m->w.layers[0].shared_gate[3] += 1e-2f;
    float *grads = golden_grads(m, &g, 1);
    const char *wn = "";
    double ge = df_golden_worst_grad(m, g.gb.exp, grads, 1.0f, &wn);
    print_message("shared gate weight 3 + 1e-2: gradient %.2e (%s, bound %.2e)\n", ge, wn, GRAD_TOL(&g));
    assert_true(ge > GRAD_TOL(&g));
    free(grads);
    df_model_free(m);
    unload(&g);
}

/* tiny_olmoe: OLMo 2's full-width q/k norms in Llama's pre-norm layer, every layer sparse under the
 * qwen names (mlp.gate, mlp.experts.<e>.*_proj) with experts of intermediate_size. A q_norm weight
 * past the first head's 8 moved (read only as a full-width norm), the weights renormalised and two
 * experts' down_proj swapped each break the bound. */
static void test_olmoe_golden(void **state)
{
    (void)state;
    golden g = load("tiny_olmoe");
    const df_model_config *c = &g.m->cfg;
    assert_string_equal(c->model_type, "olmoe");
    assert_true(c->qk_norm && c->qk_norm_full && !c->post_norm && !c->attention_bias && !c->norm_topk_prob);
    assert_true(c->head_dim == 8 && c->num_experts == 4 && c->num_experts_per_tok == 2);
    assert_true(c->moe_intermediate_size == 24 && df_model_layer_moe(c, 0) && df_model_layer_moe(c, 1));
    const df_param_desc *qn = df_model_find_tensor(g.m, "model.layers.1.self_attn.q_norm.weight");
    const df_param_desc *kn = df_model_find_tensor(g.m, "model.layers.1.self_attn.k_norm.weight");
    assert_true(qn && kn && qn->numel == 32 && kn->numel == 16);
    assert_non_null(df_model_find_tensor(g.m, "model.layers.0.input_layernorm.weight"));
    assert_non_null(df_model_find_tensor(g.m, "model.layers.1.mlp.experts.3.down_proj.weight"));
    check_golden(&g, "olmoe");
    df_model *m = variant(&g, c);
    m->params[qn->offset + 20] += 0.1f;
    expect_forward_moves(m, &g, "q_norm weight 20 (head 2) + 0.1");
    df_model_free(m);
    df_model_config nt = *c;
    nt.norm_topk_prob = true;
    m = variant(&g, &nt);
    expect_forward_moves(m, &g, "routing weights renormalised");
    df_model_free(m);
    m = variant(&g, c);
    swap_tensors(m, "model.layers.0.mlp.experts.0.down_proj.weight", "model.layers.0.mlp.experts.3.down_proj.weight");
    expect_forward_moves(m, &g, "experts 0 and 3's down_proj swapped");
    df_model_free(m);
    unload(&g);
}

/* Each piece of the routing must be visible: the weights not renormalised, one expert fewer a
 * token, two experts' up projections read in each other's place, two router rows swapped (the
 * tokens of one expert sent to the other), and the dense layer made sparse (layer 1's own dense
 * MLP then unread: a different layout, so its MLP replaced through a variant of the config). */
static void test_qwen3_moe_detects(void **state)
{
    (void)state;
    golden g = load("tiny_qwen3_moe");
    df_model_config c = g.m->cfg;
    c.norm_topk_prob = false;
    df_model *m = variant(&g, &c);
    expect_forward_moves(m, &g, "routing weights not renormalised");
    df_model_free(m);
    c = g.m->cfg;
    c.num_experts_per_tok = 1;
    m = variant(&g, &c);
    expect_forward_moves(m, &g, "top-1 instead of top-2");
    df_model_free(m);
    m = variant(&g, &g.m->cfg);
    swap_tensors(m, "model.layers.0.mlp.experts.1.up_proj.weight", "model.layers.0.mlp.experts.2.up_proj.weight");
    expect_forward_moves(m, &g, "experts 1 and 2's up_proj swapped");
    df_model_free(m);
    m = variant(&g, &g.m->cfg);
    const int64_t H = c.hidden_size;
    float *router = m->w.layers[2].router, row[64];
    memcpy(row, router, sizeof(float) * (size_t)H);
    memcpy(router, router + 3 * H, sizeof(float) * (size_t)H);
    memcpy(router + 3 * H, row, sizeof(float) * (size_t)H);
    expect_forward_moves(m, &g, "router rows 0 and 3 swapped");
    /* the router's gradient: a router weight moved must move the gradients past their bound */
    df_model_free(m);
    m = variant(&g, &g.m->cfg);
    m->w.layers[0].router[7] += 1e-2f;
    float *grads = golden_grads(m, &g, 1);
    const char *wn = "";
    double ge = df_golden_worst_grad(m, g.gb.exp, grads, 1.0f, &wn);
    print_message("router weight 7 + 1e-2: gradient %.2e (%s, bound %.2e)\n", ge, wn, GRAD_TOL(&g));
    assert_true(ge > GRAD_TOL(&g));
    free(grads);
    df_model_free(m);
    unload(&g);
}

/* Mixed precision on a MoE fixture: the router's, the experts' (and the shared expert's and its
 * gate's) matmuls read the bf16 copy (gemm_w16; each expert's rows padded to a power of two) and
 * none falls back to float32. Bounds as test_model_golden.c's bf16 test: two bf16 roundings per
 * GEMM stage on the path (q/k/v, o, gate / up, down: 8 a layer, the router 2 more on a sparse
 * layer, the shared expert's gate 2 more again, the head 2) forward, three times that backward;
 * the log-probs must also differ from float32's (really bf16). */
static void check_moe_bf16(const char *fixture)
{
    golden g = load(fixture);
    const df_model *m = g.m;
    df_acts *a;
    assert_int_equal(df_acts_create(&m->cfg, g.gb.T, g.gb.n_out, &a), DF_OK);
    int rc = df_acts_set_bf16_matmul(a, true);
    if (rc == DF_EUNSUPPORTED) {
        print_message("bf16 matmul unsupported here: %s\n", df_last_error());
        df_acts_free(a);
        unload(&g);
        skip();
    }
    assert_int_equal(rc, DF_OK);
    assert_int_equal(df_acts_load_weights(a, m), DF_OK);
    const int64_t n = g.gb.n_out;
    float *lp = malloc(sizeof(float) * (size_t)n), *en = malloc(sizeof(float) * (size_t)n);
    float *c = df_golden_read_vec(g.gb.exp, "loss.c", NULL), *d = df_golden_read_vec(g.gb.exp, "loss.d", NULL);
    float *grads = calloc((size_t)m->n_params, sizeof(float));
    assert_int_equal(df_model_forward(m, a, &g.gb.b, 0.7f, lp, en), DF_OK);
    assert_int_equal(df_model_backward(m, a, &g.gb.b, 0.7f, c, d, grads), DF_OK);
    assert_int_equal(df_mm_ctx_fallbacks(a->mm), 0);
    float *want = df_golden_read_vec(g.gb.exp, "logp.t07", NULL);
    const double fe = df_golden_rel_err(lp, want, n);
    double worst_cos = 1.0;
    for (int i = 0; i < m->n_tensors; i++) {
        const df_param_desc *t = &m->tensors[i];
        char name[128];
        snprintf(name, sizeof name, "grad.%s", t->name);
        float *gw = df_golden_read_vec(g.gb.exp, name, NULL);
        double dot = 0, n1 = 0, n2 = 0;
        for (int64_t j = 0; j < t->numel; j++) {
            dot += (double)grads[t->offset + j] * gw[j];
            n1 += (double)grads[t->offset + j] * grads[t->offset + j];
            n2 += (double)gw[j] * gw[j];
        }
        worst_cos = fmin(worst_cos, dot / (sqrt(n1 * n2) + 1e-30));
        free(gw);
    }
    double S = 0; /* the sparse layers' gates: the router's, and the shared expert's */
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++)
        S += df_model_layer_moe(&m->cfg, l) * (m->cfg.shared_expert_intermediate_size > 0 ? 2 : 1);
    const double L = (double)m->cfg.num_hidden_layers;
    const double fb = df_tol_gamma_prob(8 * L + 2 * S + 2, DF_TOL_LAMBDA, DF_U_BF16) + FWD_TOL(&g);
    const double gb = df_tol_gamma_prob(24 * L + 6 * S + 6, DF_TOL_LAMBDA, DF_U_BF16) + GRAD_TOL(&g);
    print_message("%s bf16: logp rel err %.2e (bound %.2e), worst gradient cosine %.5f (bound %.5f)\n", fixture, fe,
                  fb, worst_cos, sqrt(1 - gb * gb));
    assert_true(fe > FWD_TOL(&g) && fe <= fb);
    assert_true(gb < 1 && worst_cos >= sqrt(1 - gb * gb));
    free(lp), free(en), free(c), free(d), free(grads), free(want);
    df_acts_free(a);
    unload(&g);
}

static void test_moe_bf16(void **state)
{
    (void)state;
    check_moe_bf16("tiny_qwen3_moe");
    check_moe_bf16("tiny_qwen2_moe");
    check_moe_bf16("tiny_olmoe");
}

/* What a model with experts cannot do yet is refused, naming it: a device backend (the routing
 * runs on the host) and LoRA on the MLPs (attention-only adapters are accepted). */
static void test_qwen3_moe_refusals(void **state)
{
    (void)state;
    golden g = load("tiny_qwen3_moe");
    df_backend_ops ops = *df_backend_cpu().ops;
    ops.name = "otherdev";
    ops.host_memory = false;
    df_backend be = {&ops, NULL};
    assert_error_mentions(df_model_check_backend(&be, &g.m->cfg), DF_EUNSUPPORTED, "experts");
    assert_last_error_mentions("otherdev");
    df_backend cpu = df_backend_cpu();
    assert_int_equal(df_model_check_backend(&cpu, &g.m->cfg), DF_OK);
    df_lora_config lc = {.rank = 4, .alpha = 8, .targets = DF_LORA_ALL_LINEAR};
    df_lora *l = NULL;
    assert_error_mentions(df_lora_create(g.m, &lc, 1, &l), DF_EUNSUPPORTED, "gate_proj, up_proj, down_proj");
    lc.targets = 1u << DF_LORA_Q | 1u << DF_LORA_V;
    assert_int_equal(df_lora_create(g.m, &lc, 1, &l), DF_OK);
    df_lora_free(l);
    unload(&g);
}

/* ---- the rollout decoder ------------------------------------------------------------------- */

/*
 * Greedy generations from prompts taken from the fixture's batch, 12 new tokens (positions up to
 * 17, well past the window of 4), and their log-probs teacher-forced through the training
 * decoder: two float computations of the same values (KV-cache decode, one prefill), each within
 * tb_teacher_forced's bound.
 */
static void check_rollout(const char *name)
{
    golden g = load(name);
    const df_model *m = g.m;
    const int64_t poff[3] = {0, 3, 9};
    int32_t ptok[9];
    for (int i = 0; i < 9; i++)
        ptok[i] = g.gb.tokens[i + 2];
    df_rollout_request q = {2, poff, ptok, 1, 7, NULL, NULL};
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.greedy = true;
    sp.max_new_tokens = 12;
    sp.ignore_eos = true; /* a fixture's greedy path may reach its eos id early */
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create(&m->cfg, 2, 32, &e), DF_OK);
    df_rollout_result r;
    if (df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL))
        fail_msg("%s: %s", name, df_last_error());
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&m->cfg, 32, 32, &a), DF_OK);
    double worst = 0;
    for (int64_t s = 0; s < r.n_seqs; s++) {
        const int64_t P = poff[s + 1] - poff[s], R = r.offsets[s + 1] - r.offsets[s];
        float lp[32];
        double err[32];
        assert_int_equal(R, 12);
        tb_teacher_forced(m, a, ptok + poff[s], P, r.tokens + r.offsets[s], R, 1.0f,
                          tb_logp_eps(&m->cfg, P + R), lp, err);
        for (int64_t t = 0; t < R; t++) {
            double d = fabs(r.log_probs[r.offsets[s] + t] - lp[t]);
            if (!(d <= 2 * err[t]))
                fail_msg("%s: sequence %lld token %lld: rollout log-prob %.7g, training %.7g "
                         "(bound %.3g)",
                         name, (long long)s, (long long)t, (double)r.log_probs[r.offsets[s] + t],
                         (double)lp[t], 2 * err[t]);
            worst = fmax(worst, d / (2 * err[t]));
        }
    }
    print_message("%s: rollout vs training log-probs, worst error / bound %.3f\n", name, worst);
    df_acts_free(a);
    df_rollout_result_free(&r);
    df_rollout_engine_free(e);
    unload(&g);
}

static void test_rollout_decoder(void **state)
{
    (void)state;
    check_rollout("tiny_qwen3");
    check_rollout("tiny_llama31");
    check_rollout("tiny_mistral");
    check_rollout("tiny_phi3");
    check_rollout("tiny_phi3_longrope");
    check_rollout("tiny_phi4_mini");
    check_rollout("tiny_olmo2");
    check_rollout("tiny_olmo2_bias");
    check_rollout("tiny_gemma3");
    check_rollout("tiny_qwen3_moe");
    check_rollout("tiny_qwen3_moe_topk");
    check_rollout("tiny_mixtral");
    check_rollout("tiny_qwen2_moe");
    check_rollout("tiny_olmoe");
}

/* ---- files ------------------------------------------------------------------------------------ */

/* phi3 as saved in `dir`: the fixture's fused tensors, each bit for bit (float32), none split; in
   bfloat16 each element is the original's rounding. */
static void check_phi3_files(const char *dir)
{
    static const char *const fused[] = {"model.layers.1.self_attn.qkv_proj.weight", "model.layers.1.mlp.gate_up_proj.weight"};
    static const int64_t rows[] = {16 * 4 + 2 * 16 * 2, 2 * 24};
    char path[600], orig[600], half_dir[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(orig, sizeof orig, "%s/tiny_phi3/model.safetensors", GOLDEN_DIR);
    snprintf(half_dir, sizeof half_dir, "%s_bf16", dir);
    df_model *m = NULL;
    assert_int_equal(df_model_load(dir, &m), DF_OK);
    assert_int_equal(df_model_save(m, half_dir, DF_DTYPE_BF16, 0), DF_OK);
    df_model_free(m);
    char half[700];
    snprintf(half, sizeof half, "%s/model.safetensors", half_dir);
    df_st_file *f = NULL, *o = NULL, *h = NULL;
    assert_int_equal(df_st_open(path, &f), DF_OK);
    assert_int_equal(df_st_open(orig, &o), DF_OK);
    assert_int_equal(df_st_open(half, &h), DF_OK);
    df_st_tensor t;
    assert_int_equal(df_st_find(f, "model.layers.0.self_attn.q_proj.weight", &t), DF_ENOTFOUND);
    assert_int_equal(df_st_find(f, "model.layers.0.mlp.up_proj.weight", &t), DF_ENOTFOUND);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(df_st_find(f, fused[i], &t), DF_OK);
        assert_int_equal(t.shape[0], rows[i]);
        assert_int_equal(t.shape[1], 32);
        const int64_t n = rows[i] * 32;
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n),
              *c = malloc(sizeof(float) * (size_t)n);
        assert_int_equal(df_st_read_f32(f, fused[i], a, n), DF_OK);
        assert_int_equal(df_st_read_f32(o, fused[i], b, n), DF_OK);
        assert_int_equal(df_st_read_f32(h, fused[i], c, n), DF_OK);
        assert_memory_equal(a, b, sizeof(float) * (size_t)n);
        for (int64_t j = 0; j < n; j++)
            assert_true(c[j] == df_bf16_to_f32(df_f32_to_bf16(b[j])));
        free(a), free(b), free(c);
    }
    df_st_close(f);
    df_st_close(o);
    df_st_close(h);
}

/* Save each fixture (its config.json kept and updated) and load it back: the same weights and
   configuration; the written config.json is what transformers reads for these models. */
static void test_save_load_roundtrip(void **state)
{
    const char *dir = *state;
    const char *names[14] = {"tiny_qwen3",         "tiny_llama31",   "tiny_mistral", "tiny_phi3",
                             "tiny_phi3_longrope", "tiny_phi4_mini", "tiny_olmo2",   "tiny_gemma3",
                             "tiny_qwen3_yarn",    "tiny_qwen3_moe", "tiny_qwen3_moe_topk", "tiny_mixtral",
                             "tiny_qwen2_moe", "tiny_olmoe"};
    const char *archs[14] = {"Qwen3ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM", "Phi3ForCausalLM",
                             "Phi3ForCausalLM",  "Phi3ForCausalLM",  "Olmo2ForCausalLM",   "Gemma3ForCausalLM",
                             "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM",
                             "Qwen2MoeForCausalLM", "OlmoeForCausalLM"};
    for (int i = 0; i < 14; i++) {
        golden g = load(names[i]);
        char sub[512], cfgp[600];
        snprintf(sub, sizeof sub, "%s/%s", dir, names[i]);
        assert_int_equal(df_model_save(g.m, sub, DF_DTYPE_F32, 0), DF_OK);
        df_model *back;
        assert_int_equal(df_model_load(sub, &back), DF_OK);
        assert_int_equal(back->n_params, g.m->n_params);
        assert_memory_equal(back->params, g.m->params, sizeof(float) * (size_t)g.m->n_params);
        const df_model_config *a = &g.m->cfg, *b = &back->cfg;
        assert_int_equal(a->qk_norm, b->qk_norm);
        assert_int_equal(a->qk_norm_full, b->qk_norm_full);
        assert_int_equal(a->post_norm, b->post_norm);
        assert_int_equal(a->o_proj_bias, b->o_proj_bias);
        assert_int_equal(a->rope_type, b->rope_type);
        assert_int_equal(a->sliding_window, b->sliding_window);
        assert_true(df_rope_same(a, b));
        assert_int_equal(a->rope_dim, b->rope_dim);
        assert_int_equal(a->max_window_layers, b->max_window_layers);
        assert_memory_equal(a->full_layers, b->full_layers, sizeof a->full_layers);
        assert_true(a->sandwich_norm == b->sandwich_norm && a->norm_plus_one == b->norm_plus_one &&
                    a->embed_scale == b->embed_scale && a->geglu == b->geglu);
        assert_true(a->query_pre_attn_scalar == b->query_pre_attn_scalar);
        assert_true(a->num_experts == b->num_experts && a->num_experts_per_tok == b->num_experts_per_tok &&
                    a->moe_intermediate_size == b->moe_intermediate_size && a->norm_topk_prob == b->norm_topk_prob &&
                    a->decoder_sparse_step == b->decoder_sparse_step &&
                    a->shared_expert_intermediate_size == b->shared_expert_intermediate_size);
        assert_memory_equal(a->mlp_only_layers, b->mlp_only_layers, sizeof a->mlp_only_layers);
        snprintf(cfgp, sizeof cfgp, "%s/config.json", sub);
        json_error_t je;
        json_t *j = json_load_file(cfgp, 0, &je);
        assert_non_null(j);
        const char *arch = json_string_value(json_array_get(json_object_get(j, "architectures"), 0));
        assert_string_equal(arch, archs[i]);
        if (i == 13) /* OlmoeConfig has no head_dim: hidden / heads, not written */
            assert_null(json_object_get(j, "head_dim"));
        else
            assert_int_equal(json_integer_value(json_object_get(j, "head_dim")), 16);
        if (i == 0) {
            assert_true(json_is_true(json_object_get(j, "use_sliding_window")));
            assert_int_equal(json_integer_value(json_object_get(j, "sliding_window")), 4);
            assert_int_equal(json_integer_value(json_object_get(j, "max_window_layers")), 1);
        } else if (i == 2) {
            assert_int_equal(json_integer_value(json_object_get(j, "sliding_window")), 4);
            assert_null(json_object_get(j, "use_sliding_window"));
        } else if (i == 4) { /* Phi-3's form: "type" and the two lists, the context at the top */
            json_t *rs = json_object_get(j, "rope_scaling");
            assert_string_equal(json_string_value(json_object_get(rs, "type")), "longrope");
            assert_null(json_object_get(rs, "rope_type"));
            assert_int_equal(json_object_size(rs), 3);
            assert_true(json_number_value(json_array_get(json_object_get(rs, "short_factor"), 6)) == 5.0);
            assert_int_equal(json_integer_value(json_object_get(j, "original_max_position_embeddings")), 512);
        } else if (i == 5) { /* the factor as the file has it, 6 frequencies per list */
            assert_true(json_number_value(json_object_get(j, "partial_rotary_factor")) == 0.75);
            json_t *rs = json_object_get(j, "rope_scaling");
            assert_int_equal(json_array_size(json_object_get(rs, "short_factor")), 6);
            assert_true(json_is_true(json_object_get(j, "tie_word_embeddings")));
        } else if (i == 6) { /* Olmo2Config: no window keys, attention_bias written, the file's pad kept */
            assert_string_equal(json_string_value(json_object_get(j, "model_type")), "olmo2");
            assert_null(json_object_get(j, "use_sliding_window"));
            assert_null(json_object_get(j, "sliding_window"));
            assert_true(json_is_false(json_object_get(j, "attention_bias")));
            assert_true(json_number_value(json_object_get(j, "rope_theta")) == 5e5);
            assert_int_equal(json_integer_value(json_object_get(j, "pad_token_id")), 1);
        } else if (i == 7) { /* Gemma3TextConfig's keys: the file's layer_types, the local base */
            json_t *lt = json_object_get(j, "layer_types");
            assert_string_equal(json_string_value(json_array_get(lt, 2)), "full_attention");
            assert_string_equal(json_string_value(json_array_get(lt, 1)), "sliding_attention");
            assert_int_equal(json_integer_value(json_object_get(j, "sliding_window")), 4);
            assert_true(json_number_value(json_object_get(j, "rope_local_base_freq")) == 1e4);
            assert_true(json_number_value(json_object_get(j, "query_pre_attn_scalar")) == 24);
            assert_string_equal(json_string_value(json_object_get(json_object_get(j, "rope_scaling"), "rope_type")),
                                "linear");
            assert_null(json_object_get(j, "hidden_act"));
            assert_null(json_object_get(j, "use_sliding_window"));
        } else if (i == 8) { /* the file's yarn keys, written back */
            json_t *rs = json_object_get(j, "rope_scaling");
            assert_string_equal(json_string_value(json_object_get(rs, "rope_type")), "yarn");
            assert_true(json_number_value(json_object_get(rs, "factor")) == 4.0);
            assert_true(json_number_value(json_object_get(rs, "beta_fast")) == 24.0);
            assert_true(json_number_value(json_object_get(rs, "beta_slow")) == 2.0);
            assert_int_equal(json_integer_value(json_object_get(rs, "original_max_position_embeddings")), 2048);
            assert_null(json_object_get(rs, "attention_factor"));
            assert_true(a->rope_attention_factor == b->rope_attention_factor && b->rope_truncate);
        } else if (i == 11) { /* MixtralConfig's keys, Mistral's window */
            assert_int_equal(json_integer_value(json_object_get(j, "num_local_experts")), 4);
            assert_null(json_object_get(j, "num_experts"));
            assert_int_equal(json_integer_value(json_object_get(j, "sliding_window")), 4);
            assert_true(json_number_value(json_object_get(j, "router_jitter_noise")) == 0.0);
        } else if (i == 13) { /* OlmoeConfig's keys, no window keys */
            assert_int_equal(json_integer_value(json_object_get(j, "num_experts")), 4);
            assert_true(json_is_false(json_object_get(j, "norm_topk_prob")));
            assert_true(json_is_null(json_object_get(j, "clip_qkv")));
            assert_null(json_object_get(j, "use_sliding_window"));
            assert_null(json_object_get(j, "moe_intermediate_size"));
        } else if (i == 12) { /* Qwen2MoeConfig's: the shared expert, qkv_bias, the dense layer */
            assert_int_equal(json_integer_value(json_object_get(j, "shared_expert_intermediate_size")), 40);
            assert_true(json_is_true(json_object_get(j, "qkv_bias")));
            assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "mlp_only_layers"), 0)), 1);
            assert_true(json_is_false(json_object_get(j, "use_sliding_window")));
        } else if (i >= 9) { /* Qwen3MoeConfig's keys, the dense layers as the file's list */
            json_t *dense = json_object_get(j, "mlp_only_layers");
            assert_int_equal(json_array_size(dense), i == 9 ? 1 : 0);
            assert_int_equal(json_integer_value(json_object_get(j, "num_experts")), i == 9 ? 4 : 5);
            assert_true(json_is_boolean(json_object_get(j, "norm_topk_prob")));
            assert_true(json_is_false(json_object_get(j, "output_router_logits"))); /* the file's, kept */
        } else if (i == 3) {
            assert_true(json_is_null(json_object_get(j, "sliding_window")));
            assert_null(json_object_get(j, "use_sliding_window"));
            assert_null(json_object_get(j, "attention_bias"));
            check_phi3_files(sub);
        } else {
            json_t *rs = json_object_get(j, "rope_scaling");
            assert_string_equal(json_string_value(json_object_get(rs, "rope_type")), "llama3");
            assert_true(json_number_value(json_object_get(rs, "high_freq_factor")) == 8.0);
            assert_true(json_is_true(json_object_get(j, "attention_bias")));
        }
        json_decref(j);
        df_model_free(back);
        unload(&g);
    }
}

/* A device backend without windowed attention refuses such a model up front (the CPU table
   under another name, with attention_window cleared, stands for it). */
static void test_device_refuses_window(void **state)
{
    (void)state;
    golden g = load("tiny_qwen3");
    df_backend_ops ops = *df_backend_cpu().ops;
    ops.name = "otherdev";
    ops.attention_window = false;
    df_backend be = {&ops, NULL};
    df_acts *a = NULL;
    assert_error_mentions(df_acts_create_on(&be, &g.m->cfg, 16, 8, &a), DF_EUNSUPPORTED,
                          "sliding-window attention");
    assert_last_error_mentions("otherdev");
    assert_null(a);
    /* the check trainers make when they choose the backend (before any activations) */
    assert_error_mentions(df_model_check_backend(&be, &g.m->cfg), DF_EUNSUPPORTED, "use_sliding_window");
    df_backend cpu = df_backend_cpu();
    assert_int_equal(df_model_check_backend(&cpu, &g.m->cfg), DF_OK);
    df_model_config c = g.m->cfg;
    c.sliding_window = 0; /* the q/k norms go through the backend's RMSNorm: accepted */
    assert_int_equal(df_acts_create_on(&be, &c, 16, 8, &a), DF_OK);
    df_acts_free(a);
    /* the capability, not the backend's identity, decides */
    ops.attention_window = true;
    assert_int_equal(df_model_check_backend(&be, &g.m->cfg), DF_OK);
    unload(&g);
    /* Gemma 3's windowed layers come before its full one: each layer is checked, not the last */
    ops.attention_window = false;
    g = load("tiny_gemma3");
    assert_error_mentions(df_model_check_backend(&be, &g.m->cfg), DF_EUNSUPPORTED, "sliding_window 4 on layer 0");
    unload(&g);
}

/* ---- Gemma 2 ----------------------------------------------------------------------------------- */

/* tiny_gemma2: the config as parsed (no layer_types: Gemma2Config's alternation), the golden
 * forward, logits and gradients within the bounds the other families use (tanh is 1-Lipschitz, so
 * a capped score or logit carries no more of the propagated error than the raw one; its own
 * evaluation adds a few float32 ulps of the cap, below the bounds' per-operation terms), and each
 * Gemma 2 feature visible: either cap dropped, the window on the other layers' parity. */
static void test_gemma2_golden(void **state)
{
    (void)state;
    golden g = load("tiny_gemma2");
    const df_model_config *c = &g.m->cfg;
    assert_string_equal(c->model_type, "gemma2");
    assert_true(c->post_norm && c->sandwich_norm && c->norm_plus_one && c->embed_scale && c->geglu);
    assert_true(!c->qk_norm && c->rope_local_theta == 0 && c->rope_theta == 1e4 && c->query_pre_attn_scalar == 24);
    assert_true(c->attn_logit_softcap == 2.0 && c->final_logit_softcap == 3.0);
    assert_true(df_model_layer_window(c, 0) == 4 && df_model_layer_window(c, 1) == 0 &&
                df_model_layer_window(c, 2) == 4);
    assert_null(df_model_find_tensor(g.m, "model.layers.0.self_attn.q_norm.weight"));
    assert_int_equal(g.m->n_tensors, 1 + 3 * 11 + 1);
    check_golden(&g, "gemma2");
    df_model_config v = g.m->cfg;
    v.attn_logit_softcap = 0;
    df_model *m = variant(&g, &v);
    expect_forward_moves(m, &g, "no attention soft-cap");
    df_model_free(m);
    v = g.m->cfg;
    v.final_logit_softcap = 0;
    m = variant(&g, &v);
    expect_forward_moves(m, &g, "no final-logit soft-cap");
    df_model_free(m);
    v = g.m->cfg;
    v.attn_logit_softcap = 2.5; /* another cap moves the scores too */
    m = variant(&g, &v);
    expect_forward_moves(m, &g, "attention soft-cap 2.5 instead of 2");
    df_model_free(m);
    v = g.m->cfg;
    v.full_layers[0] = 0, v.max_window_layers = 1; /* layer 0 full, layers 1 and 2 windowed */
    m = variant(&g, &v);
    expect_forward_moves(m, &g, "the window on the odd layers");
    df_model_free(m);
    unload(&g);
}

/* Saved and loaded back: Gemma2ForCausalLM, the soft-caps and the window written to config.json,
 * the same weights; the KV-cache rollout against the teacher-forced training decoder (both
 * soft-caps on both paths); a backend without attention_softcap refuses the model. */
static void test_gemma2_save_rollout_refusal(void **state)
{
    const char *dir = *state;
    golden g = load("tiny_gemma2");
    char d[600];
    snprintf(d, sizeof d, "%s/gemma2", dir);
    assert_int_equal(df_model_save(g.m, d, DF_DTYPE_F32, 0), DF_OK);
    df_model *back = NULL;
    assert_int_equal(df_model_load(d, &back), DF_OK);
    assert_true(back->cfg.attn_logit_softcap == 2.0 && back->cfg.final_logit_softcap == 3.0);
    assert_true(back->cfg.sliding_window == 4 && !memcmp(back->cfg.full_layers, g.m->cfg.full_layers,
                                                          sizeof back->cfg.full_layers));
    assert_int_equal(back->n_params, g.m->n_params);
    assert_memory_equal(back->params, g.m->params, sizeof(float) * (size_t)g.m->n_params);
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", d);
    json_t *j = json_load_file(path, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                        "Gemma2ForCausalLM");
    assert_string_equal(json_string_value(json_object_get(j, "model_type")), "gemma2");
    assert_true(json_number_value(json_object_get(j, "attn_logit_softcapping")) == 2.0);
    assert_true(json_number_value(json_object_get(j, "final_logit_softcapping")) == 3.0);
    json_decref(j);
    df_model_free(back);
    check_rollout("tiny_gemma2");
    df_rollout_engine *e = NULL; /* an engine made for other soft-caps refuses the model */
    df_model_config ec = g.m->cfg;
    ec.final_logit_softcap = 30;
    assert_int_equal(df_rollout_engine_create(&ec, 2, 32, &e), DF_OK);
    const int64_t poff[2] = {0, 3};
    df_rollout_request q = {1, poff, g.gb.tokens, 1, 7, NULL, NULL};
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.greedy = true;
    sp.max_new_tokens = 2;
    df_rollout_result rr;
    assert_error_mentions(df_rollout_generate(e, g.m, &q, &sp, &rr, NULL, NULL), DF_EINVAL, "soft-caps");
    df_rollout_engine_free(e);
    df_backend_ops ops = *df_backend_cpu().ops;
    ops.name = "otherdev";
    ops.attention_softcap = false;
    df_backend be = {&ops, NULL};
    df_acts *a = NULL;
    assert_error_mentions(df_acts_create_on(&be, &g.m->cfg, 16, 8, &a), DF_EUNSUPPORTED,
                          "tanh soft-capping");
    assert_last_error_mentions("otherdev");
    assert_null(a);
    df_model_config c = g.m->cfg;
    c.attn_logit_softcap = 0; /* the final cap alone is refused too */
    assert_error_mentions(df_model_check_backend(&be, &c), DF_EUNSUPPORTED, "final_logit_softcapping 3");
    c.final_logit_softcap = 0;
    assert_int_equal(df_model_check_backend(&be, &c), DF_OK);
    unload(&g);
}

int main(void)
{
    omp_set_num_threads(2); /* tiny models: more threads only wait on each other */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_config_and_layout),
        cmocka_unit_test(test_qwen3_golden),
        cmocka_unit_test(test_qwen3_detects),
        cmocka_unit_test(test_qwen3_yarn_golden),
        cmocka_unit_test(test_llama31_golden),
        cmocka_unit_test(test_llama31_detects),
        cmocka_unit_test(test_mistral_golden),
        cmocka_unit_test(test_phi3_golden),
        cmocka_unit_test(test_phi3_longrope_golden),
        cmocka_unit_test(test_phi4_mini_golden),
        cmocka_unit_test_setup_teardown(test_phi3_file_errors, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_phi3_lora, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test(test_olmo2_config_and_layout),
        cmocka_unit_test(test_olmo2_golden),
        cmocka_unit_test(test_olmo2_detects),
        cmocka_unit_test_setup_teardown(test_olmo2_file_errors, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test(test_gemma3_config_and_layout),
        cmocka_unit_test(test_gemma3_golden),
        cmocka_unit_test(test_gemma3_detects),
        cmocka_unit_test(test_qwen3_moe_config_and_layout),
        cmocka_unit_test(test_qwen3_moe_golden),
        cmocka_unit_test(test_qwen3_moe_detects),
        cmocka_unit_test(test_moe_bf16),
        cmocka_unit_test(test_qwen2_moe_golden),
        cmocka_unit_test(test_olmoe_golden),
        cmocka_unit_test(test_mixtral_golden),
        cmocka_unit_test(test_qwen3_moe_refusals),
        cmocka_unit_test(test_rollout_decoder),
        cmocka_unit_test_setup_teardown(test_save_load_roundtrip, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test(test_device_refuses_window),
        cmocka_unit_test(test_gemma2_golden),
        cmocka_unit_test_setup_teardown(test_gemma2_save_rollout_refusal, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
