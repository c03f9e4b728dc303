/*
 * Activation checkpointing per decoder layer (model.h DF_ACTS_CHECKPOINT):
 *   - log-probs, entropies and the gradient blob of a checkpointed forward + backward equal
 *     those of the plain one to the bit (memcmp), for a Qwen2 with GQA and q/k/v biases over
 *     df_test_packed sequences, a Qwen3 (q/k norms, explicit head_dim, o_proj bias, a sliding window
 *     on its last layer), a Llama 3.1 (llama3 RoPE, tied embeddings, o_proj bias), an OLMo 2
 *     (post-norm layers, whose recompute runs the whole layer; full-width q/k norms, all four
 *     attention biases), a Qwen3-MoE (two sparse layers around a dense one), the value head (the
 *     critic) and the bf16 matmuls where the CPU has them;
 *   - two micro-batches accumulated into one blob on reused activations;
 *   - the MLP in row chunks (checkpointed activations above DF_MLP_CHUNK_ROWS tokens; here 7-row
 *     chunks of 48-row buffers): outputs and gradients equal to the plain pass's within the
 *     reassociation of the chunked weight-gradient sums (bound below);
 *   - the layout: df_acts_bytes counts num_hidden_layers - 1 fewer copies of the per-layer
 *     buffers (the formula written out here), df_acts_size of a created one agrees, flags
 *     other than DF_ACTS_CHECKPOINT are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "distflow/backend.h"
#include "distflow/model.h"
#include "distflow/rng.h"
#include "model/acts.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tiny config of `type` with GQA (4 heads / 2 KV heads) and 3 layers. */
static df_model_config base_config(const char *type)
{
    df_model_config c;
    df_model_config_defaults(&c);
    snprintf(c.model_type, sizeof c.model_type, "%s", type);
    c.vocab_size = 50;
    c.hidden_size = 32;
    c.intermediate_size = 48;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.max_position_embeddings = 64;
    c.initializer_range = 0.3;
    c.attention_bias = !strcmp(type, "qwen2");
    return c;
}

static df_model_config qwen3_config(void)
{
    df_model_config c = base_config("qwen3");
    c.head_dim = 16; /* explicit: num_heads * head_dim != hidden */
    c.qk_norm = true;
    c.attention_bias = c.o_proj_bias = true;
    c.sliding_window = 5;
    c.max_window_layers = 2; /* the last layer attends to 5 positions */
    return c;
}

/* qwen3_moe: layers 0 and 2 sparse (4 experts of width 24, the top 2 renormalised), layer 1
 * dense (mlp_only_layers [1]). */
static df_model_config moe_config(void)
{
    df_model_config c = base_config("qwen3_moe");
    c.head_dim = 16;
    c.qk_norm = true;
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 24;
    c.norm_topk_prob = true;
    c.decoder_sparse_step = 1;
    c.mlp_only_layers[0] = 1u << 1;
    return c;
}

/* qwen2_moe: the same sparse layers, unnormalised, with a shared expert of 40 (the widest MLP)
 * and q/k/v biases. */
static df_model_config moe2_config(void)
{
    df_model_config c = base_config("qwen2_moe");
    c.attention_bias = true;
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 24;
    c.shared_expert_intermediate_size = 40;
    c.decoder_sparse_step = 1;
    c.mlp_only_layers[0] = 1u << 1;
    return c;
}

static df_model_config olmo2_config(void)
{
    df_model_config c = base_config("olmo2");
    c.head_dim = 16;
    c.qk_norm = c.qk_norm_full = c.post_norm = true;
    c.attention_bias = c.o_proj_bias = true;
    return c;
}

/* gemma3_text: the sandwich layer with (1 + w) norms, per-head q/k norms, GeGLU, the scaled
 * embedding, q scaled for query_pre_attn_scalar 24, a window of 5 on layers 0 and 2 with the local
 * RoPE there and layer 1 full (full_layers), tied embeddings. */
static df_model_config gemma3_config(void)
{
    df_model_config c = base_config("gemma3_text");
    c.head_dim = 16;
    df_test_gemma3(&c, 5, 2 /* layer 1 */, 24);
    return c;
}

static df_model_config llama31_config(void)
{
    df_model_config c = base_config("llama");
    c.rope_type = DF_ROPE_LLAMA3;
    c.rope_factor = 8;
    c.rope_low_freq_factor = 1;
    c.rope_high_freq_factor = 4;
    c.rope_original_max_pos = 16;
    c.attention_bias = c.o_proj_bias = true;
    c.tie_word_embeddings = true;
    return c;
}

/* What one pass gives: per-row outputs and the accumulated gradient blob. */
typedef struct {
    float out[2][64]; /* logp and entropy, or values */
    float *grads;
} pass_result;

/* Forward + backward of each batch on one df_acts created with `flags` (max_tokens above
 * the batches', so rows sit at a stride), accumulating into r->grads; outputs of the last. */
static void run_passes(const df_model *m, unsigned flags, bool bf16, const df_test_packed *pk, int n_pk,
                       pass_result *r, int64_t mlp_rows)
{
    const bool value = m->cfg.num_labels > 0;
    df_backend cpu = df_backend_cpu();
    df_acts *a = NULL;
    assert_int_equal(df_acts_create_ex(&cpu, &m->cfg, 48, 48, flags, &a), DF_OK);
    assert_int_equal(a->mlp_rows, 48); /* 48 rows: below DF_MLP_CHUNK_ROWS, not chunked */
    if (mlp_rows) /* chunks of fewer rows than the buffers hold: the chunked path on small batches */
        a->mlp_rows = mlp_rows;
    if (bf16) {
        assert_int_equal(df_acts_set_bf16_matmul(a, true), DF_OK);
        assert_int_equal(df_acts_load_weights(a, m), DF_OK);
    }
    r->grads = calloc((size_t)m->n_params, sizeof(float));
    assert_non_null(r->grads);
    for (int i = 0; i < n_pk; i++) {
        const df_seq_batch *b = &pk[i].b;
        float d0[64], d1[64];
        for (int64_t j = 0; j < b->n_out; j++) { /* distinct weights so every row matters */
            d0[j] = -1.0f / (float)(b->n_out + j);
            d1[j] = 0.01f * (float)(j % 3 + 1);
        }
        if (value) {
            assert_int_equal(df_model_forward_values(m, a, b, r->out[0]), DF_OK);
            assert_int_equal(df_model_backward_values(m, a, b, d0, r->grads), DF_OK);
        } else {
            assert_int_equal(df_model_forward(m, a, b, 0.7f, r->out[0], r->out[1]), DF_OK);
            assert_int_equal(df_model_backward(m, a, b, 0.7f, d0, d1, r->grads), DF_OK);
        }
    }
    df_acts_free(a);
}

/* The plain pass and a checkpointed one (MLP chunks of mlp_rows, 0: unchunked) over the same
 * two micro-batches of packed sequences; *n_out: the last one's output rows. */
static void run_both(const df_model *m, bool bf16, int64_t mlp_rows, pass_result *plain,
                     pass_result *ckpt, int64_t *n_out)
{
    static const int64_t len1[3] = {9, 13, 6}, len2[2] = {17, 11};
    df_test_packed pk[2];
    df_test_pack(&pk[0], len1, 3, m->cfg.vocab_size, 1);
    df_test_pack(&pk[1], len2, 2, m->cfg.vocab_size, 2);
    memset(plain, 0, sizeof *plain);
    memset(ckpt, 0, sizeof *ckpt);
    run_passes(m, 0, bf16, pk, 2, plain, 0);
    run_passes(m, DF_ACTS_CHECKPOINT, bf16, pk, 2, ckpt, mlp_rows);
    *n_out = pk[1].b.n_out;
}

/* Both ways on the same model and batches: outputs and gradients equal to the bit, and the
 * gradient is not trivially zero. */
static void check_identical(const char *what, const df_model *m, bool bf16)
{
    pass_result plain, ckpt;
    int64_t n_rows;
    run_both(m, bf16, 0, &plain, &ckpt, &n_rows);
    const size_t n_out = (size_t)n_rows;
    if (memcmp(plain.out, ckpt.out, sizeof plain.out))
        fail_msg("%s: the checkpointed forward's outputs differ", what);
    int64_t first = -1, nonzero = 0;
    for (int64_t i = 0; i < m->n_params; i++) {
        if (memcmp(&plain.grads[i], &ckpt.grads[i], sizeof(float)) && first < 0)
            first = i;
        nonzero += plain.grads[i] != 0.0f;
    }
    if (first >= 0)
        fail_msg("%s: gradient %lld differs: %.9g without checkpointing, %.9g with", what, (long long)first,
                 (double)plain.grads[first], (double)ckpt.grads[first]);
    assert_memory_equal(plain.grads, ckpt.grads, (size_t)m->n_params * sizeof(float));
    if (nonzero < m->n_params * 9 / 10) /* every weight is on some path */
        fail_msg("%s: only %lld of %lld gradients are non-zero", what, (long long)nonzero,
                 (long long)m->n_params);
    print_message("%s: %lld gradients and %zu outputs identical\n", what, (long long)m->n_params, n_out);
    free(plain.grads);
    free(ckpt.grads);
}

/* Checkpointed with the MLP in 7-row chunks against the plain pass. Per row the chunked MLP
 * computes the same sums (row-local GEMMs); what may differ is the order of the weight
 * gradients' sums over the rows (chunk by chunk, beta = 1) and a GEMM kernel's choice by row
 * count: reassociating a sum of n <= 48 products moves it by at most gamma_n sum|p| ~ 3e-6 sum|p|,
 * and these propagate into earlier layers' gradients through the backward. Bound: 1e-4 of
 * the largest |value| of the same kind (outputs, gradients) — 30x the reassociation's size for
 * |p| sums up to 1x the maximum; a chunk read at the wrong rows moves values by O(1). */
static void check_chunked(const char *what, const df_model *m, bool bf16)
{
    pass_result plain, chunked;
    int64_t n_out;
    run_both(m, bf16, 7, &plain, &chunked, &n_out);
    double omax = 0, gmax = 0, oerr = 0, gerr = 0;
    for (int k = 0; k < 2; k++)
        for (int64_t j = 0; j < n_out; j++) {
            omax = fmax(omax, fabs(plain.out[k][j]));
            oerr = fmax(oerr, fabs((double)plain.out[k][j] - chunked.out[k][j]));
        }
    int64_t nonzero = 0;
    for (int64_t i = 0; i < m->n_params; i++) {
        gmax = fmax(gmax, fabs(plain.grads[i]));
        gerr = fmax(gerr, fabs((double)plain.grads[i] - chunked.grads[i]));
        nonzero += chunked.grads[i] != 0.0f;
    }
    print_message("%s, 7-row MLP chunks: outputs max diff %.3g (max %.3g), gradients %.3g (max %.3g)\n",
                  what, oerr, omax, gerr, gmax);
    assert_true(oerr <= 1e-4 * omax);
    assert_true(gerr <= 1e-4 * gmax);
    assert_true(nonzero >= m->n_params * 9 / 10);
    free(plain.grads);
    free(chunked.grads);
}

static void test_mlp_chunks(void **state)
{
    (void)state;
    df_model_config cs[6] = {base_config("qwen2"), qwen3_config(), olmo2_config(), gemma3_config(), moe_config(),
                             moe2_config()};
    for (int i = 0; i < 6; i++) {
        df_model *m = df_test_signal_model(&cs[i], 21 + i);
        check_chunked(cs[i].model_type, m, false);
        if (df_model_bf16_available() == DF_OK)
            check_chunked(cs[i].model_type, m, true);
        df_model_free(m);
    }
}

static void test_qwen2_gqa_bias(void **state)
{
    (void)state;
    df_model_config c = base_config("qwen2");
    df_model *m = df_test_signal_model(&c, 11);
    check_identical("qwen2", m, false);
    df_model_free(m);
}

static void test_qwen3_and_window(void **state)
{
    (void)state;
    df_model_config c = qwen3_config();
    df_model *m = df_test_signal_model(&c, 12);
    check_identical("qwen3", m, false);
    df_model_free(m);
}

static void test_llama31(void **state)
{
    (void)state;
    df_model_config c = llama31_config();
    df_model *m = df_test_signal_model(&c, 13);
    check_identical("llama 3.1", m, false);
    df_model_free(m);
}

static void test_olmo2(void **state)
{
    (void)state;
    df_model_config c = olmo2_config();
    df_model *m = df_test_signal_model(&c, 16);
    check_identical("olmo2", m, false);
    if (df_model_bf16_available() == DF_OK)
        check_identical("olmo2 bf16 matmuls", m, true);
    df_model_free(m);
}

static void test_gemma3(void **state)
{
    (void)state;
    df_model_config c = gemma3_config();
    df_model *m = df_test_signal_model(&c, 17);
    check_identical("gemma3", m, false);
    if (df_model_bf16_available() == DF_OK)
        check_identical("gemma3 bf16 matmuls", m, true);
    df_model_free(m);
}

/* The sparse layers recompute their routing and experts in the backward either way: the
 * checkpointed pass must see the plain one's bits. */
static void test_qwen3_moe(void **state)
{
    (void)state;
    df_model_config c = moe_config();
    df_model *m = df_test_signal_model(&c, 18);
    check_identical("qwen3_moe", m, false);
    if (df_model_bf16_available() == DF_OK)
        check_identical("qwen3_moe bf16 matmuls", m, true);
    df_model_free(m);
    c = moe2_config(); /* the shared expert is recomputed too */
    m = df_test_signal_model(&c, 19);
    check_identical("qwen2_moe", m, false);
    if (df_model_bf16_available() == DF_OK)
        check_identical("qwen2_moe bf16 matmuls", m, true);
    df_model_free(m);
}

static void test_value_head(void **state)
{
    (void)state;
    df_model_config c = base_config("qwen2");
    c.num_labels = 1;
    df_model *m = df_test_signal_model(&c, 14);
    check_identical("value model", m, false);
    df_model_free(m);
}

static void test_bf16_matmuls(void **state)
{
    (void)state;
    df_model_config c = base_config("qwen2");
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&c, 8, 8, &a), DF_OK);
    int rc = df_acts_set_bf16_matmul(a, true);
    df_acts_free(a);
    if (rc == DF_EUNSUPPORTED) {
        print_message("skipped: %s\n", df_last_error());
        skip();
    }
    assert_int_equal(rc, DF_OK);
    df_model *m = df_test_signal_model(&c, 15);
    check_identical("qwen2 bf16 matmuls", m, true);
    df_model_free(m);
}

/* The per-layer buffers' floats per token, written out from acts.h: hmid, xn1, xn2 (H each),
 * rstd1, rstd2 (1 each), q and att (qd), k and v (kvd), att_lse (nh), gate and up (I), and
 * with q/k norms qraw (qd), kraw (kvd), qrstd (nh), krstd (nkv). */
static int64_t layer_floats_per_token(const df_model_config *c)
{
    const int64_t qd = c->num_attention_heads * c->head_dim;
    const int64_t kvd = c->num_key_value_heads * c->head_dim;
    int64_t n = 3 * c->hidden_size + 2 + 2 * qd + 2 * kvd + c->num_attention_heads + 2 * c->intermediate_size;
    if (c->qk_norm)
        n += qd + kvd + c->num_attention_heads + c->num_key_value_heads;
    return n;
}

static void test_layout_bytes(void **state)
{
    (void)state;
    df_backend cpu = df_backend_cpu();
    df_model_config cs[2] = {base_config("qwen2"), qwen3_config()};
    for (int i = 0; i < 2; i++) {
        const df_model_config *c = &cs[i];
        const int64_t T = 40, L = c->num_hidden_layers;
        int64_t plain = 0, ckpt = 0;
        assert_int_equal(df_acts_bytes(&cpu, c, T, 30, 0, &plain), DF_OK);
        assert_int_equal(df_acts_bytes(&cpu, c, T, 30, DF_ACTS_CHECKPOINT, &ckpt), DF_OK);
        assert_int_equal(plain - ckpt, (L - 1) * T * layer_floats_per_token(c) * 4);
        df_acts *a = NULL;
        assert_int_equal(df_acts_create_ex(&cpu, c, T, 30, DF_ACTS_CHECKPOINT, &a), DF_OK);
        assert_int_equal(df_acts_size(a), ckpt);
        df_acts_free(a);
        assert_int_equal(df_acts_create_on(&cpu, c, T, 30, &a), DF_OK);
        assert_int_equal(df_acts_size(a), plain);
        df_acts_free(a);
        /* mixed precision adds the bf16 weights and the two operand scratches of
           [T, max(H, I, nh hd)] bf16 */
        int64_t mixed = 0, widest = c->intermediate_size;
        widest = c->hidden_size > widest ? c->hidden_size : widest;
        widest = c->num_attention_heads * c->head_dim > widest ? c->num_attention_heads * c->head_dim : widest;
        if (df_model_bf16_available() != DF_OK)
            continue;
        assert_int_equal(df_acts_bytes(&cpu, c, T, 30, DF_ACTS_BF16, &mixed), DF_OK);
        assert_int_equal(df_acts_create_ex(&cpu, c, T, 30, DF_ACTS_BF16, &a), DF_OK);
        df_model *m = df_test_signal_model(c, 3);
        assert_int_equal(df_acts_load_weights(a, m), DF_OK); /* makes the copy */
        assert_int_equal(df_acts_size(a), mixed);
        assert_int_equal(mixed - plain, df_weights16_bytes(a->w16) + 2 * 2 * T * widest);
        df_acts_free(a);
        df_model_free(m);
    }
    int64_t b = -1;
    assert_int_equal(df_acts_bytes(&cpu, &cs[0], 8, 8, 1u << 7, &b), DF_EINVAL);
    assert_int_equal(b, -1);
    df_acts *a = NULL;
    assert_int_equal(df_acts_create_ex(&cpu, &cs[0], 8, 8, 1u << 7, &a), DF_EINVAL);
    assert_null(a);
    /* The 0.5B shape at 4096 tokens: what docs/backend.md quotes, and the saving it is about. */
    df_model_config q = base_config("qwen2");
    q.vocab_size = 151936, q.hidden_size = 896, q.intermediate_size = 4864;
    q.num_hidden_layers = 24, q.num_attention_heads = 14, q.num_key_value_heads = 2;
    q.head_dim = 64, q.max_position_embeddings = 32768, q.tie_word_embeddings = true;
    int64_t p05 = 0, c05 = 0;
    assert_int_equal(df_acts_bytes(&cpu, &q, 4096, 4096, 0, &p05), DF_OK);
    assert_int_equal(df_acts_bytes(&cpu, &q, 4096, 4096, DF_ACTS_CHECKPOINT, &c05), DF_OK);
    print_message("Qwen2.5-0.5B shape, 4096 tokens: df_acts %.1f MiB, checkpointed %.1f MiB\n",
                  (double)p05 / 1048576.0, (double)c05 / 1048576.0);
    assert_true(c05 * 4 < p05);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen2_gqa_bias), cmocka_unit_test(test_qwen3_and_window),
        cmocka_unit_test(test_llama31),
        cmocka_unit_test(test_olmo2),        cmocka_unit_test(test_gemma3), cmocka_unit_test(test_qwen3_moe),
        cmocka_unit_test(test_value_head),
        cmocka_unit_test(test_bf16_matmuls),   cmocka_unit_test(test_layout_bytes),
        cmocka_unit_test(test_mlp_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
