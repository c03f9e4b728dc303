/*
 * Forward-only activations (model.h DF_ACTS_FORWARD_ONLY, a frozen model's: the reference) and
 * mixed precision's bf16 embedding (DF_W16_EMBED):
 *   - log-probs and entropies (values for the value head) of a forward-only pass equal those of
 *     a normal pass to the bit (memcmp), float32 and bf16, for a Qwen2 with GQA and q/k/v
 *     biases, a Qwen3 (q/k norms, o_proj bias, a sliding window), a Llama 3.1 with tied
 *     embeddings and an even number of layers (the two residual buffers end on the other one),
 *     an OLMo 2 (post-norm: its norms made in place where the layer's rows are one buffer), and
 *     the value head; two batches on reused activations;
 *   - a backward on them is refused, naming why;
 *   - df_acts_bytes: the bytes a forward-only layout saves, the formula written out here from
 *     acts.h, and on the Qwen2.5-0.5B shape the ratio it reaches against the checkpointed
 *     layout the reference used before;
 *   - the bf16 copy's embedding: the tied head's rows (no second copy) or a tensor of its own,
 *     and mixed precision's lookup reads it: a model whose embedding is already bf16-exact
 *     gives the same bits, while float32 passes tell the two models apart;
 *   - a bf16-only model's refresh gives back exactly the float32 tensors nothing reads any more.
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
#include "model/ops.h"
#include "model/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool have_bf16(void)
{
    if (df_model_bf16_available() == DF_OK)
        return true;
    print_message("bf16 parts skipped: %s\n", df_last_error());
    return false;
}

/* A tiny config of `type` with GQA (4 heads / 2 KV heads) and 3 layers. */
static df_model_config base_config(const char *type)
{
    df_model_config c;
    df_model_config_defaults(&c);
    snprintf(c.model_type, sizeof c.model_type, "%s", type);
    c.vocab_size = 50, c.hidden_size = 32, c.intermediate_size = 48, c.num_hidden_layers = 3;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 8;
    c.max_position_embeddings = 64, c.initializer_range = 0.3;
    c.attention_bias = !strcmp(type, "qwen2");
    return c;
}

static df_model_config qwen3_config(void)
{
    df_model_config c = base_config("qwen3");
    c.head_dim = 16;
    c.qk_norm = true;
    c.attention_bias = c.o_proj_bias = true;
    c.sliding_window = 5, c.max_window_layers = 2;
    return c;
}

static df_model_config llama_tied_config(void)
{
    df_model_config c = base_config("llama");
    c.num_hidden_layers = 4; /* even: the last layer writes the buffer the first one read */
    c.attention_bias = c.o_proj_bias = true;
    c.tie_word_embeddings = true;
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

/* Per batch: logp and entropy, or values. */
typedef struct {
    float out[2][2][64];
} outputs;

/* Forwards of both batches on one df_acts created with `flags` (48 rows: a stride above the
 * batches'); `a_out` keeps the activations when non-NULL. */
static void run_forwards(const df_model *m, unsigned flags, const df_test_packed *pk, outputs *o,
                         df_acts **a_out)
{
    df_backend cpu = df_backend_cpu();
    df_acts *a = NULL;
    memset(o, 0, sizeof *o);
    assert_int_equal(df_acts_create_ex(&cpu, &m->cfg, 48, 48, flags, &a), DF_OK);
    assert_int_equal(df_acts_load_weights(a, m), DF_OK);
    for (int i = 0; i < 2; i++) {
        if (m->cfg.num_labels > 0)
            assert_int_equal(df_model_forward_values(m, a, &pk[i].b, o->out[i][0]), DF_OK);
        else
            assert_int_equal(df_model_forward(m, a, &pk[i].b, 0.7f, o->out[i][0], o->out[i][1]),
                             DF_OK);
    }
    if (a_out)
        *a_out = a;
    else
        df_acts_free(a);
}

/* Forward-only against the normal pass (and the checkpointed one), `extra` flags on all. */
static void check_identical(const char *what, const df_model *m, unsigned extra)
{
    static const int64_t len1[3] = {9, 13, 6}, len2[2] = {17, 11};
    df_test_packed pk[2];
    df_test_pack(&pk[0], len1, 3, m->cfg.vocab_size, 1);
    df_test_pack(&pk[1], len2, 2, m->cfg.vocab_size, 2);
    outputs plain, ckpt, fwd;
    df_acts *a = NULL;
    run_forwards(m, extra, pk, &plain, NULL);
    run_forwards(m, extra | DF_ACTS_CHECKPOINT, pk, &ckpt, NULL);
    run_forwards(m, extra | DF_ACTS_FORWARD_ONLY, pk, &fwd, &a);
    if (memcmp(plain.out, fwd.out, sizeof plain.out))
        fail_msg("%s: the forward-only pass's outputs differ from the normal pass's", what);
    assert_memory_equal(ckpt.out, fwd.out, sizeof fwd.out);
    int64_t nonzero = 0;
    for (int64_t j = 0; j < pk[1].b.n_out; j++)
        nonzero += plain.out[1][0][j] != 0.0f;
    assert_true(nonzero == pk[1].b.n_out);
    /* no backward on them */
    float *grads = calloc((size_t)m->n_params, sizeof(float)), d[64] = {0};
    int rc = m->cfg.num_labels > 0 ? df_model_backward_values(m, a, &pk[1].b, d, grads)
                                   : df_model_backward(m, a, &pk[1].b, 0.7f, d, NULL, grads);
    assert_int_equal(rc, DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "forward-only"));
    free(grads);
    df_acts_free(a);
    print_message("%s: forward-only outputs identical\n", what);
}

static void check_model(const char *what, const df_model_config *c, uint64_t seed)
{
    df_model *m = df_test_signal_model(c, seed);
    check_identical(what, m, 0);
    if (have_bf16()) {
        char name[96];
        snprintf(name, sizeof name, "%s (bf16)", what);
        check_identical(name, m, DF_ACTS_BF16);
    }
    df_model_free(m);
}

static void test_qwen2(void **state)
{
    (void)state;
    df_model_config c = base_config("qwen2");
    check_model("qwen2", &c, 11);
}

static void test_qwen3_window(void **state)
{
    (void)state;
    df_model_config c = qwen3_config();
    check_model("qwen3", &c, 12);
}

static void test_llama_tied_even(void **state)
{
    (void)state;
    df_model_config c = llama_tied_config();
    check_model("llama, tied, 4 layers", &c, 13);
}

static void test_olmo2(void **state)
{
    (void)state;
    df_model_config c = olmo2_config();
    check_model("olmo2", &c, 15);
}

static void test_gemma3(void **state)
{
    (void)state;
    df_model_config c = gemma3_config();
    check_model("gemma3", &c, 17);
}

static void test_value_head(void **state)
{
    (void)state;
    df_model_config c = base_config("qwen2");
    c.num_labels = 1;
    check_model("value model", &c, 14);
}

/* What a forward-only layout does not hold, in floats, written out from acts.h against the
 * checkpointed one (one slot of per-layer buffers): L - 1 rows of the residual stream x, the
 * slot's residual after attention (hmid, H per token), and the backward's scratch: dres and dxn
 * (H), dq and dao (qd), dk and dv (kvd), per token (the MLP's gradients take gate / up's place);
 * dxf and dxnf (H per output row); with q/k norms dqn (qd) and dkn (kvd) per token. */
static int64_t saved_floats(const df_model_config *c, int64_t T, int64_t O)
{
    const int64_t H = c->hidden_size, L = c->num_hidden_layers;
    const int64_t qd = c->num_attention_heads * c->head_dim;
    const int64_t kvd = c->num_key_value_heads * c->head_dim;
    int64_t per_tok = (L - 1) * H + H + 2 * H + 2 * qd + 2 * kvd;
    if (c->qk_norm)
        per_tok += qd + kvd;
    return T * per_tok + 2 * O * H;
}

static void test_layout_bytes(void **state)
{
    (void)state;
    df_backend cpu = df_backend_cpu();
    df_model_config cs[3] = {base_config("qwen2"), qwen3_config(), llama_tied_config()};
    for (int i = 0; i < 3; i++) {
        const df_model_config *c = &cs[i];
        const int64_t T = 40, O = 30;
        int64_t ckpt = 0, fwd = 0, both = 0;
        assert_int_equal(df_acts_bytes(&cpu, c, T, O, DF_ACTS_CHECKPOINT, &ckpt), DF_OK);
        assert_int_equal(df_acts_bytes(&cpu, c, T, O, DF_ACTS_FORWARD_ONLY, &fwd), DF_OK);
        assert_int_equal(df_acts_bytes(&cpu, c, T, O, DF_ACTS_FORWARD_ONLY | DF_ACTS_CHECKPOINT,
                                       &both), DF_OK);
        assert_int_equal(ckpt - fwd, saved_floats(c, T, O) * 4);
        assert_int_equal(both, fwd);
        df_acts *a = NULL;
        assert_int_equal(df_acts_create_ex(&cpu, c, T, O, DF_ACTS_FORWARD_ONLY, &a), DF_OK);
        assert_int_equal(df_acts_size(a), fwd);
        df_acts_free(a);
    }
    /* The Qwen2.5-0.5B shape at 10240 tokens (the GRPO step's reference micro-batch bound):
     * the x rows alone go from L + 1 = 25 to 2, so forward-only must be below the
     * checkpointed size less those 23 rows. */
    df_model_config q = base_config("qwen2");
    q.vocab_size = 151936, q.hidden_size = 896, q.intermediate_size = 4864;
    q.num_hidden_layers = 24, q.num_attention_heads = 14, q.num_key_value_heads = 2;
    q.head_dim = 64, q.max_position_embeddings = 32768, q.tie_word_embeddings = true;
    const int64_t T = 10240, O = 10240;
    int64_t ckpt = 0, fwd = 0;
    assert_int_equal(df_acts_bytes(&cpu, &q, T, O, DF_ACTS_CHECKPOINT, &ckpt), DF_OK);
    assert_int_equal(df_acts_bytes(&cpu, &q, T, O, DF_ACTS_FORWARD_ONLY, &fwd), DF_OK);
    assert_int_equal(ckpt - fwd, saved_floats(&q, T, O) * 4);
    const int64_t x_rows = 23 * T * q.hidden_size * 4;
    assert_true(fwd < ckpt - x_rows);
    print_message("Qwen2.5-0.5B shape, %lld tokens: checkpointed %.1f MiB, forward-only %.1f MiB "
                  "(%.2f)\n", (long long)T, (double)ckpt / 1048576.0, (double)fwd / 1048576.0,
                  (double)fwd / (double)ckpt);
    /* the saving is at least half of the checkpointed layout here */
    assert_true(2 * fwd < ckpt);
}

/* ---- the bf16 embedding ----------------------------------------------------------------------- */

static int64_t up32(int64_t n) { return (n + 31) / 32 * 32; }

static void test_weights16_embed(void **state)
{
    (void)state;
    df_model_config tied = llama_tied_config(), untied = base_config("qwen2"), value = untied;
    value.num_labels = 1;
    const int64_t VH = up32(tied.vocab_size * tied.hidden_size);
    df_weights16 *w = NULL, *e = NULL;
    /* tied: the head's rows, no second copy */
    assert_int_equal(df_weights16_create_ex(&tied, DF_W16_LM_HEAD, &w), DF_OK);
    assert_int_equal(df_weights16_create_ex(&tied, DF_W16_LM_HEAD | DF_W16_EMBED, &e), DF_OK);
    assert_null(df_weights16_embed(w));
    assert_ptr_equal(df_weights16_embed(e), df_weights16_lm_head(e));
    assert_int_equal(df_weights16_bytes(e), df_weights16_bytes(w));
    df_weights16_free(w), df_weights16_free(e);
    /* untied, and a value model (no head): a tensor of its own, the float32 embedding rounded */
    const df_model_config *own[2] = {&untied, &value};
    for (int i = 0; i < 2; i++) {
        df_model *m = df_test_signal_model(own[i], 21);
        assert_int_equal(df_weights16_create_ex(own[i], DF_W16_LM_HEAD, &w), DF_OK);
        assert_int_equal(df_weights16_create_ex(own[i], DF_W16_LM_HEAD | DF_W16_EMBED, &e), DF_OK);
        assert_int_equal(df_weights16_bytes(e) - df_weights16_bytes(w), 2 * VH);
        assert_true(df_weights16_embed(e) != df_weights16_lm_head(e));
        assert_int_equal(df_weights16_refresh(e, &m->w), DF_OK);
        const int64_t n = own[i]->vocab_size * own[i]->hidden_size;
        uint16_t *want = malloc((size_t)n * 2);
        df_bf16_from_f32(want, m->w.embed, n);
        assert_memory_equal(df_weights16_embed(e), want, (size_t)n * 2);
        free(want);
        df_weights16_free(w), df_weights16_free(e);
        df_model_free(m);
    }
    assert_int_equal(df_weights16_create_ex(&tied, 1u << 5, &w), DF_EINVAL);
}

/* A frozen bf16-only model's refresh (df_weights16_refresh_release): the copy is what a plain
 * refresh makes; the float32 pages it gives back are the layers' matmuls, the embedding, and the
 * head when the bf16 head runs (head16); tied rows only when both readers use the copy. */
static void check_release(bool tied, bool head16)
{
    df_model_config c = base_config("qwen2");
    c.vocab_size = 128, c.hidden_size = 32, c.intermediate_size = 256; /* 16 KiB tables */
    c.tie_word_embeddings = tied;
    df_model *m = df_test_signal_model(&c, 41), *k = NULL;
    assert_int_equal(df_model_clone(m, &k), DF_OK);
    const unsigned fl = DF_W16_LM_HEAD | DF_W16_EMBED;
    df_weights16 *w = NULL, *want = NULL;
    assert_int_equal(df_weights16_create_ex(&c, fl, &w), DF_OK);
    assert_int_equal(df_weights16_create_ex(&c, fl, &want), DF_OK);
    assert_int_equal(df_weights16_refresh(want, &k->w), DF_OK);
    int64_t bytes = -1;
    assert_int_equal(df_weights16_refresh_release(w, m, head16, &bytes), DF_OK);
    const int64_t VH = c.vocab_size * c.hidden_size, IH = c.intermediate_size * c.hidden_size;
    for (int64_t l = 0; l < c.num_hidden_layers; l++)
        assert_memory_equal(df_weights16_layer(w, l)->w_gate, df_weights16_layer(want, l)->w_gate,
                            (size_t)IH * 2);
    assert_memory_equal(df_weights16_lm_head(w), df_weights16_lm_head(want), (size_t)VH * 2);
    assert_memory_equal(df_weights16_embed(w), df_weights16_embed(want), (size_t)VH * 2);
    assert_true(bytes > 0);
    assert_true(m->w.layers[1].w_gate[IH / 2] == 0.0f && k->w.layers[1].w_gate[IH / 2] != 0.0f);
    const bool embed_gone = !tied || head16, head_gone = head16;
    assert_int_equal(m->w.embed[VH / 2] == 0.0f, embed_gone);
    assert_int_equal(m->w.lm_head[VH / 2] == 0.0f, head_gone);
    assert_true(m->w.final_norm[0] == k->w.final_norm[0]); /* norms stay */
    df_weights16_free(w), df_weights16_free(want);
    df_model_free(m), df_model_free(k);
}

static void test_refresh_release(void **state)
{
    (void)state;
    for (int tied = 0; tied < 2; tied++)
        for (int head16 = 0; head16 < 2; head16++)
            check_release(tied, head16);
}

/* Mixed precision's lookup reads the bf16 table: the same model with its embedding already
 * rounded to bf16 gives the same bits in mixed precision; in float32 the two differ. */
static void check_lookup(const df_model_config *c)
{
    static const int64_t len[2] = {12, 9};
    df_test_packed pk[2];
    df_test_pack(&pk[0], len, 2, c->vocab_size, 3);
    pk[1] = pk[0];
    pk[1].b.tokens = pk[1].tok, pk[1].b.seq_offsets = pk[1].off;
    pk[1].b.out_rows = pk[1].rows, pk[1].b.out_targets = pk[1].tgt;
    df_model *m = df_test_signal_model(c, 31), *r = NULL;
    assert_int_equal(df_model_clone(m, &r), DF_OK);
    const int64_t n = c->vocab_size * c->hidden_size;
    for (int64_t i = 0; i < n; i++)
        r->w.embed[i] = df_bf16_to_f32(df_f32_to_bf16(r->w.embed[i]));
    outputs om, orr;
    run_forwards(m, 0, pk, &om, NULL);
    run_forwards(r, 0, pk, &orr, NULL);
    assert_true(memcmp(om.out, orr.out, sizeof om.out) != 0);
    run_forwards(m, DF_ACTS_BF16, pk, &om, NULL);
    run_forwards(r, DF_ACTS_BF16, pk, &orr, NULL);
    assert_memory_equal(om.out, orr.out, sizeof om.out);
    df_model_free(m);
    df_model_free(r);
}

static void test_bf16_lookup(void **state)
{
    (void)state;
    if (!have_bf16())
        skip();
    df_model_config untied = base_config("qwen2"), tied = llama_tied_config();
    check_lookup(&untied);
    check_lookup(&tied);
    df_model_config value = untied;
    value.num_labels = 1;
    check_lookup(&value);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen2),           cmocka_unit_test(test_qwen3_window),
        cmocka_unit_test(test_llama_tied_even), cmocka_unit_test(test_value_head),
        cmocka_unit_test(test_olmo2),
        cmocka_unit_test(test_gemma3),
        cmocka_unit_test(test_layout_bytes),    cmocka_unit_test(test_weights16_embed),
        cmocka_unit_test(test_bf16_lookup),     cmocka_unit_test(test_refresh_release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
