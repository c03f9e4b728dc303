/*
 * LoRA adapters (distflow/lora.h): target names, PEFT's initialisation, the merge, and the
 * backward's adapter gradients against the base weight's gradient they are projections of:
 *   dB = s dW A^T,   dA = s B^T dW,   dW = dY^T X
 * (W = W0 + s B A, so dL/dB = s dL/dW A^T and dL/dA = s B^T dL/dW.) The base gradient dW of
 * every projection is the existing, golden-tested backward's; the adapter's comes from the
 * same dY and X in another order of products. The comparison fails on a target wired to the
 * wrong projection, input or output gradient, a transposed factor or a lost scale.
 *
 * Bound: the backend is the CPU's with its GEMM wrapped to also record, per weight-gradient
 * call into the base blob, M = |dY|^T |X| in double (the products' magnitudes). Any order of
 * float32 sums of k terms is within gamma_k = k u / (1 - k u) of the exact sum times the sum of
 * magnitudes (Higham, Accuracy and Stability, 3.1), u = 2^-24. The adapter computes
 * t = X A^T (in terms), dB = s dY^T t (T terms), so
 *   |dB - s dY^T X A^T| <= s (gamma_T + gamma_in (1 + gamma_T) + 2u) (M |A|^T),
 * the reference s fl(dY^T X) A^T (double from the float dW) is within s gamma_T (M |A|^T);
 * likewise dA (u = dY B: out terms) with |B|^T M.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "distflow/backend.h"
#include "distflow/lora.h"
#include "distflow/model.h"
#include "distflow/rng.h"
#include "engine/actor.h"
#include "engine/train_core.h"
#include "model/acts.h"
#include "emu_backend.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define U32 (1.0 / 16777216.0)

static double gam(int64_t k) { return (double)k * U32 / (1.0 - (double)k * U32); }

/* ---- target names ---------------------------------------------------------- */

static void test_parse_targets(void **state)
{
    (void)state;
    unsigned m = 0;
    const char *all[] = {"all-linear"};
    assert_int_equal(df_lora_parse_targets(all, 1, "k", &m), DF_OK);
    assert_int_equal(m, DF_LORA_ALL_LINEAR);
    const char *some[] = {"v_proj", "q_proj", "down_proj"};
    assert_int_equal(df_lora_parse_targets(some, 3, "k", &m), DF_OK);
    assert_int_equal(m, 1u << DF_LORA_Q | 1u << DF_LORA_V | 1u << DF_LORA_DOWN);
    const char *bad[] = {"q_proj", "qkv"};
    assert_int_equal(df_lora_parse_targets(bad, 2, "model.target_modules", &m), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "unknown target module \"qkv\""));
    assert_non_null(strstr(df_last_error(), "model.target_modules"));
    /* phi3's fused modules stand for their parts; a part named again is refused */
    const char *fused[] = {"qkv_proj", "gate_up_proj"};
    assert_int_equal(df_lora_parse_targets(fused, 2, "k", &m), DF_OK);
    assert_int_equal(m, 1u << DF_LORA_Q | 1u << DF_LORA_K | 1u << DF_LORA_V | 1u << DF_LORA_GATE | 1u << DF_LORA_UP);
    const char *overlap[] = {"k_proj", "qkv_proj"};
    assert_int_equal(df_lora_parse_targets(overlap, 2, "k", &m), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "\"qkv_proj\" names a projection twice"));
    const char *twice[] = {"q_proj", "all-linear"};
    assert_int_equal(df_lora_parse_targets(twice, 2, "k", &m), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "twice"));
    assert_int_equal(df_lora_parse_targets(all, 0, "k", &m), DF_EINVAL);
    for (int t = 0; t < DF_LORA_N_TARGETS; t++) { /* every name parses to its own bit */
        const char *n = df_lora_target_name((df_lora_target)t);
        assert_int_equal(df_lora_parse_targets(&n, 1, "k", &m), DF_OK);
        assert_int_equal(m, 1u << t);
    }
}

/* PEFT's exclude_modules pattern (re.fullmatch over "model.layers.<i>.<self_attn|mlp>.<name>"): a
   target matched in every layer goes, one matched nowhere stays, one matched in some layers only
   is refused naming a layer of each; *targets untouched on error. */
static void test_exclude(void **state)
{
    (void)state;
    df_model_config c3 = df_test_micro_model_config(), c2 = c3;
    c3.num_hidden_layers = 3;
    unsigned all = DF_LORA_ALL_LINEAR, m = all;
    assert_int_equal(df_lora_exclude(".*\\.o_proj", &c3, &m, "k"), DF_OK);
    assert_int_equal(m, all & ~(1u << DF_LORA_O));
    m = all; /* attention and MLP names are distinct: self_attn holds q/k/v/o, mlp gate/up/down */
    assert_int_equal(df_lora_exclude("model\\.layers\\.\\d+\\.mlp\\..*", &c3, &m, "k"), DF_OK);
    assert_int_equal(m, 1u << DF_LORA_Q | 1u << DF_LORA_K | 1u << DF_LORA_V | 1u << DF_LORA_O);
    m = all; /* fullmatch: a pattern that only starts a name matches nothing */
    assert_int_equal(df_lora_exclude("model\\.layers", &c3, &m, "k"), DF_OK);
    assert_int_equal(m, all);
    assert_int_equal(df_lora_exclude(".*visual.*", &c3, &m, "k"), DF_OK); /* a vision tower's pattern */
    assert_int_equal(m, all);
    m = 1u << DF_LORA_Q | 1u << DF_LORA_UP; /* only the targets in the mask are looked at */
    assert_int_equal(df_lora_exclude(".*(up|down)_proj", &c2, &m, "k"), DF_OK);
    assert_int_equal(m, 1u << DF_LORA_Q);
    m = all;
    assert_int_equal(df_lora_exclude("model\\.layers\\.[01]\\..*", &c3, &m, "the.key"), DF_EUNSUPPORTED);
    assert_int_equal(m, all);
    assert_non_null(strstr(df_last_error(), "the.key"));
    assert_non_null(strstr(df_last_error(), "excludes model.layers.0.self_attn.q_proj but not model.layers.2.self_attn.q_proj"));
    assert_int_equal(df_lora_exclude(".*_proj", &c3, &m, "k"), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "every target module"));
    assert_int_equal(df_lora_exclude("(q_proj", &c3, &m, "k"), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "not a regular expression"));
    assert_int_equal(m, all);
    /* phi3: the fused modules' names; excluding one removes all its parts, its parts' names match
       no module there */
    df_model_config p3 = c3;
    snprintf(p3.model_type, sizeof p3.model_type, "phi3");
    p3.attention_bias = false;
    assert_int_equal(df_lora_exclude(".*\\.qkv_proj", &p3, &m, "k"), DF_OK);
    assert_int_equal(m, all & ~(1u << DF_LORA_Q | 1u << DF_LORA_K | 1u << DF_LORA_V));
    m = all;
    assert_int_equal(df_lora_exclude(".*\\.(gate|up)_proj", &p3, &m, "k"), DF_OK);
    assert_int_equal(m, all);
    assert_int_equal(df_lora_exclude("model\\.layers\\.0\\.mlp\\.gate_up_proj", &p3, &m, "k"), DF_EUNSUPPORTED);
    assert_non_null(strstr(df_last_error(), "excludes model.layers.0.mlp.gate_up_proj but not model.layers.1.mlp.gate_up_proj"));
}

/* ---- create and merge ------------------------------------------------------ */

static df_model_config lora_model_config(void)
{
    df_model_config c = df_test_micro_model_config();
    c.intermediate_size = 24; /* every target's in / out differ from another's */
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 6; /* qd 24, kvd 12, H 16 */
    c.tie_word_embeddings = true;
    return c;
}

/* lora_model_config as phi3: q/k/v and gate/up fused modules, one adapter each. */
static df_model_config lora_phi3_config(void)
{
    df_model_config c = lora_model_config();
    snprintf(c.model_type, sizeof c.model_type, "phi3");
    c.attention_bias = false;
    return c;
}

/* lora_model_config as olmo2: post-norm layers (the adapters of q/k/v and gate/up read the residual
 * stream itself, not a norm's output), q/k norms over the whole projections, all four biases. */
static df_model_config lora_olmo2_config(void)
{
    df_model_config c = lora_model_config();
    snprintf(c.model_type, sizeof c.model_type, "olmo2");
    c.attention_bias = c.o_proj_bias = true;
    c.qk_norm = c.qk_norm_full = c.post_norm = true;
    return c;
}

/* lora_model_config as gemma3_text: the sandwich layer (the q/k/v and gate/up adapters read the
 * input norms' outputs), (1 + w) norms, GeGLU, the scaled embedding, the q scale, a window on
 * layer 0 with the local RoPE and the last layer full. */
static df_model_config lora_gemma3_config(void)
{
    df_model_config c = lora_model_config();
    snprintf(c.model_type, sizeof c.model_type, "gemma3_text");
    c.attention_bias = c.o_proj_bias = false;
    c.qk_norm = c.post_norm = c.sandwich_norm = c.norm_plus_one = c.embed_scale = c.geglu = true;
    c.query_pre_attn_scalar = 3 * (double)c.head_dim;
    c.rope_local_theta = 1e4;
    c.sliding_window = 3, c.max_window_layers = 0;
    c.full_layers[0] = (uint64_t)1 << (c.num_hidden_layers - 1);
    return c;
}

static void fill(float *x, int64_t n, double scale, uint64_t seed)
{
    df_rng r;
    df_rng_seed(&r, df_rng_key(seed, 77, 0, 0));
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(scale * df_rng_normal(&r));
}

static void test_create_and_merge(void **state)
{
    (void)state;
    df_model_config c = lora_model_config();
    df_model *m = df_test_signal_model(&c, 3), *base = df_test_model_copy(m);
    df_lora_config lc = {.rank = 4, .alpha = 8, .targets = 1u << DF_LORA_Q | 1u << DF_LORA_O |
                                                           1u << DF_LORA_DOWN};
    df_lora *l = NULL;
    assert_int_equal(df_lora_create(m, &lc, 11, &l), DF_OK);
    assert_float_equal(l->scale, 2.0f, 0.0f);
    assert_int_equal(l->n_tensors, 2 * 3 * (int)c.num_hidden_layers);
    /* PEFT names and shapes: A [r, in], B [out, r] */
    const df_param_desc *d = df_lora_find_tensor(l, "base_model.model.model.layers.1.self_attn.o_proj.lora_A.weight");
    assert_non_null(d);
    assert_int_equal(d->shape[0], 4);
    assert_int_equal(d->shape[1], 24); /* o_proj's in: qd */
    d = df_lora_find_tensor(l, "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight");
    assert_non_null(d);
    assert_int_equal(d->shape[0], 16);
    assert_int_equal(d->shape[1], 4);
    assert_null(df_lora_find_tensor(l, "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"));
    /* A uniform within 1 / sqrt(in), not all tiny; B zero */
    for (int i = 0; i < l->n_tensors; i++) {
        const df_param_desc *t = &l->tensors[i];
        const float *p = l->params + t->offset;
        double mx = 0;
        for (int64_t k = 0; k < t->numel; k++)
            mx = fmax(mx, fabs(p[k]));
        if (i % 2 == 0) {
            assert_true(mx <= 1.0 / sqrt((double)t->shape[1]));
            assert_true(mx > 0.5 / sqrt((double)t->shape[1]));
        } else {
            assert_true(mx == 0.0);
        }
    }
    /* B = 0: the merged model is the base, value for value */
    assert_int_equal(df_lora_merge(l, m), DF_OK);
    for (int64_t i = 0; i < m->n_params; i++)
        assert_true(m->params[i] == base->params[i]);
    /* B random: W = W0 + s B A on the targets (r products: gamma_r + u), the rest untouched */
    for (int64_t li = 0; li < c.num_hidden_layers; li++)
        for (int t = 0; t < DF_LORA_N_TARGETS; t++)
            if (l->layers[li].b[t]) {
                int64_t od, id;
                df_lora_target_shape(&c, (df_lora_target)t, &od, &id);
                fill(l->layers[li].b[t], od * 4, 0.3, (uint64_t)(li * 10 + t));
            }
    assert_int_equal(df_lora_merge(l, m), DF_OK);
    df_model_view bv = {0};
    df_layer_view bl[2];
    bv.layers = bl;
    df_model_view_of(base, base->params, &bv);
    const float *w0[] = {bl[1].wq, bl[1].wo, bl[1].w_down};
    const float *w1[] = {m->w.layers[1].wq, m->w.layers[1].wo, m->w.layers[1].w_down};
    const df_lora_target tg[] = {DF_LORA_Q, DF_LORA_O, DF_LORA_DOWN};
    for (int k = 0; k < 3; k++) {
        int64_t od, id;
        df_lora_target_shape(&c, tg[k], &od, &id);
        const float *A = l->layers[1].a[tg[k]], *B = l->layers[1].b[tg[k]];
        double moved = 0;
        for (int64_t o = 0; o < od; o++)
            for (int64_t j = 0; j < id; j++) {
                double ex = 0, mag = 0;
                for (int64_t q = 0; q < 4; q++) {
                    ex += (double)B[o * 4 + q] * A[q * id + j];
                    mag += fabs((double)B[o * 4 + q] * A[q * id + j]);
                }
                const double want = w0[k][o * id + j] + 2.0 * ex;
                const double bound = 2.0 * gam(5) * mag + U32 * fabs(want);
                assert_true(fabs(w1[k][o * id + j] - want) <= bound);
                moved = fmax(moved, fabs(w1[k][o * id + j] - w0[k][o * id + j]));
            }
        assert_true(moved > 1e-3);
    }
    for (int64_t i = 0; i < 16 * 12; i++) /* k_proj is not a target */
        assert_true(m->w.layers[1].wk[i] == bl[1].wk[i]);
    assert_memory_equal(m->w.embed, bv.embed, (size_t)(40 * 16) * sizeof(float));
    assert_non_null(l->base); /* random float32 weights: a float32 base copy */
    assert_null(l->base16);
    df_lora_config bad = lc;
    bad.rank = 0;
    df_lora *l2 = NULL;
    assert_int_equal(df_lora_create(m, &bad, 1, &l2), DF_EINVAL);
    bad = lc;
    bad.targets = 0;
    assert_int_equal(df_lora_create(m, &bad, 1, &l2), DF_EINVAL);
    assert_null(l2);
    df_lora_free(l);
    df_model_free(m);
    df_model_free(base);
}

/* phi3: one adapter per fused module, PEFT's names and shapes (qkv_proj's B [q + 2 kv, r]); the
 * parts' views share A and cut B by rows, so the merge gives each part W0 + s B_part A; part of a
 * fused module is refused. */
static void test_create_fused(void **state)
{
    (void)state;
    df_model_config c = lora_phi3_config();
    df_model *m = df_test_signal_model(&c, 5), *base = df_test_model_copy(m);
    df_lora_config lc = {.rank = 3, .alpha = 3, .targets = DF_LORA_ALL_LINEAR};
    df_lora *l = NULL;
    assert_int_equal(df_lora_create(m, &lc, 12, &l), DF_OK);
    assert_int_equal(l->n_tensors, 2 * 4 * (int)c.num_hidden_layers);
    df_lora_module mods[DF_LORA_N_TARGETS];
    assert_int_equal(df_lora_modules(&c, DF_LORA_ALL_LINEAR, mods), 4);
    assert_string_equal(mods[0].name, "qkv_proj");
    assert_string_equal(mods[2].name, "gate_up_proj");
    const df_param_desc *d = df_lora_find_tensor(l, "base_model.model.model.layers.1.self_attn.qkv_proj.lora_B.weight");
    assert_non_null(d);
    assert_true(d->shape[0] == 24 + 2 * 12 && d->shape[1] == 3);
    d = df_lora_find_tensor(l, "base_model.model.model.layers.0.mlp.gate_up_proj.lora_A.weight");
    assert_true(d && d->shape[0] == 3 && d->shape[1] == 16);
    assert_null(df_lora_find_tensor(l, "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"));
    const df_lora_layer *ly = &l->layers[1];
    assert_true(ly->a[DF_LORA_K] == ly->a[DF_LORA_Q] && ly->a[DF_LORA_V] == ly->a[DF_LORA_Q]);
    assert_true(ly->b[DF_LORA_K] == ly->b[DF_LORA_Q] + 24 * 3 && ly->b[DF_LORA_V] == ly->b[DF_LORA_K] + 12 * 3);
    assert_true(ly->a[DF_LORA_UP] == ly->a[DF_LORA_GATE] && ly->b[DF_LORA_UP] == ly->b[DF_LORA_GATE] + 24 * 3);
    for (int i = 1; i < l->n_tensors; i += 2)
        fill(l->params + l->tensors[i].offset, l->tensors[i].numel, 0.3, 90 + (uint64_t)i);
    assert_int_equal(df_lora_merge(l, m), DF_OK);
    df_model_view bv = {0};
    df_layer_view bl[2];
    bv.layers = bl;
    df_model_view_of(base, base->params, &bv);
    /* v: the last rows of qkv_proj's B times the shared A (r products: gamma_r + u of the sum) */
    const float *A = l->layers[1].a[DF_LORA_Q], *B = d ? l->layers[1].b[DF_LORA_V] : NULL;
    for (int64_t o = 0; o < 12; o++)
        for (int64_t j = 0; j < 16; j++) {
            double ex = 0, mag = 0;
            for (int64_t q = 0; q < 3; q++)
                ex += (double)B[o * 3 + q] * A[q * 16 + j], mag += fabs((double)B[o * 3 + q] * A[q * 16 + j]);
            const double want = bl[1].wv[o * 16 + j] + ex;
            assert_true(fabs(m->w.layers[1].wv[o * 16 + j] - want) <= gam(4) * mag + U32 * fabs(want));
        }
    df_lora_config part = lc;
    part.targets = 1u << DF_LORA_Q | 1u << DF_LORA_O;
    df_lora *l2 = NULL;
    assert_int_equal(df_lora_create(m, &part, 1, &l2), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "phi3 fuses q_proj, k_proj and v_proj into qkv_proj"));
    part.targets = 1u << DF_LORA_UP;
    assert_int_equal(df_lora_create(m, &part, 1, &l2), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "gate_up_proj"));
    assert_null(l2);
    df_lora_free(l);
    df_model_free(m);
    df_model_free(base);
}

/* A model of bf16 values (read from bf16 files) keeps its base copy in bf16, exactly: the merge
 * with B = 0 gives the model back bit for bit, and with B random the float32 copy's result. */
static void test_bf16_base(void **state)
{
    (void)state;
    df_model_config c = lora_model_config();
    df_model *m = df_test_signal_model(&c, 4);
    for (int64_t i = 0; i < m->n_params; i++) { /* round every weight to a bf16 value */
        uint32_t u;
        memcpy(&u, &m->params[i], 4);
        u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
        memcpy(&m->params[i], &u, 4);
    }
    df_model *base = df_test_model_copy(m);
    df_lora_config lc = {.rank = 2, .alpha = 4, .targets = DF_LORA_ALL_LINEAR};
    df_lora *l = NULL, *l32 = NULL;
    assert_int_equal(df_lora_create(m, &lc, 7, &l), DF_OK);
    assert_non_null(l->base16);
    assert_null(l->base);
    assert_int_equal(df_lora_merge(l, m), DF_OK);
    assert_memory_equal(m->params, base->params, (size_t)m->n_params * sizeof(float));
    /* one weight off the bf16 grid: the float32 copy */
    m->params[m->w.layers[0].wq - m->params] += 1e-6f;
    assert_int_equal(df_lora_create(m, &lc, 7, &l32), DF_OK);
    assert_non_null(l32->base);
    m->params[m->w.layers[0].wq - m->params] = base->w.layers[0].wq[0];
    df_lora_free(l32);
    assert_int_equal(df_lora_create(base, &lc, 7, &l32), DF_OK);
    free(l32->base16); /* force the float32 path on the same values */
    l32->base16 = NULL;
    l32->base = malloc((size_t)l32->n_base * sizeof(float));
    int64_t off = 0;
    for (int64_t li = 0; li < c.num_hidden_layers; li++)
        for (int t = 0; t < DF_LORA_N_TARGETS; t++) {
            int64_t od, id;
            df_lora_target_shape(&c, (df_lora_target)t, &od, &id);
            const float *w[] = {base->w.layers[li].wq, base->w.layers[li].wk, base->w.layers[li].wv,
                                base->w.layers[li].wo, base->w.layers[li].w_gate, base->w.layers[li].w_up,
                                base->w.layers[li].w_down};
            memcpy(l32->base + off, w[t], (size_t)(od * id) * sizeof(float));
            off += od * id;
        }
    for (int i = 1; i < l->n_tensors; i += 2) {
        fill(l->params + l->tensors[i].offset, l->tensors[i].numel, 0.3, 50 + (uint64_t)i);
        memcpy(l32->params + l->tensors[i].offset, l->params + l->tensors[i].offset,
               (size_t)l->tensors[i].numel * sizeof(float));
    }
    df_model *m32 = df_test_model_copy(base);
    assert_int_equal(df_lora_merge(l, m), DF_OK);
    assert_int_equal(df_lora_merge(l32, m32), DF_OK);
    assert_memory_equal(m->params, m32->params, (size_t)m->n_params * sizeof(float));
    assert_false(df_test_same_params(m, base));
    df_lora_free(l);
    df_lora_free(l32);
    df_model_free(m);
    df_model_free(m32);
    df_model_free(base);
}

/* ---- the backward ------------------------------------------------------------ */

/* The CPU backend with its GEMM also recording |A|^T |B| of every weight-gradient call
 * (ta, !tb, beta 1) whose C lies in the base gradient blob [g0, g0 + n). */
static struct {
    df_backend cpu;
    df_backend_ops ops;
    const float *g0;
    int64_t n;
    double *mag; /* [n]: |dY|^T |X| per base weight */
} rec;

static int rec_gemm(void *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const float *A, const float *B, float beta, float *C)
{
    if (rec.mag && ta && !tb && beta == 1.0f && C >= rec.g0 && C < rec.g0 + rec.n) {
        double *g = rec.mag + (C - rec.g0);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                for (int64_t k = 0; k < K; k++)
                    g[i * N + j] += fabs((double)A[k * M + i] * B[k * N + j] * alpha);
    }
    return rec.cpu.ops->gemm(ctx, ta, tb, M, N, K, alpha, A, B, beta, C);
}

static df_backend rec_backend(void)
{
    rec.cpu = df_backend_cpu();
    rec.ops = *rec.cpu.ops;
    rec.ops.gemm = rec_gemm;
    return (df_backend){&rec.ops, rec.cpu.ctx};
}

typedef struct {
    df_model *m;
    df_lora *l;
    df_test_packed p;
    float *dlogp;
} bwd_case;

/* A model with adapters of random A and B, merged; a batch and an upstream gradient. */
static void bwd_setup(bwd_case *k, df_model_config c, unsigned targets, uint64_t seed)
{
    k->m = df_test_signal_model(&c, seed);
    df_lora_config lc = {.rank = 3, .alpha = 6, .targets = targets};
    assert_int_equal(df_lora_create(k->m, &lc, seed + 1, &k->l), DF_OK);
    for (int i = 1; i < k->l->n_tensors; i += 2)
        fill(k->l->params + k->l->tensors[i].offset, k->l->tensors[i].numel, 0.2, seed + (uint64_t)i);
    assert_int_equal(df_lora_merge(k->l, k->m), DF_OK);
    const int64_t len[] = {7, 12, 5};
    df_test_pack(&k->p, len, 3, c.vocab_size, seed + 2);
    k->dlogp = malloc((size_t)k->p.b.n_out * sizeof(float));
    fill(k->dlogp, k->p.b.n_out, 1.0, seed + 3);
}

static void bwd_teardown(bwd_case *k)
{
    df_lora_free(k->l);
    df_model_free(k->m);
    free(k->dlogp);
}

/* One forward / backward on activations of backend be (flags): the adapter's gradients into
 * lg ([n_params] of the adapter), the base's into grads (NULL: frozen). */
static void run_backward(bwd_case *k, df_backend be, unsigned flags, float *lg, float *grads)
{
    df_acts *a = NULL;
    assert_int_equal(df_acts_create_ex(&be, &k->m->cfg, 64, 64, flags, &a), DF_OK);
    assert_int_equal(df_acts_set_lora(a, k->l, lg), DF_OK);
    float logp[64];
    assert_int_equal(df_model_forward(k->m, a, &k->p.b, 1.0f, logp, NULL), DF_OK);
    int rc = df_model_backward(k->m, a, &k->p.b, 1.0f, k->dlogp, NULL, grads);
    if (rc)
        fail_msg("backward: %s", df_last_error());
    df_acts_free(a);
}

/* dB and dA of every targeted module against s dW A^T and s B^T dW, where a fused module's dW and
 * B are its parts' stacked by rows (one A: its gradient sums the parts'). Returns the largest
 * |error| / bound. */
static double check_identity(const bwd_case *k, const float *lg, const float *grads)
{
    const df_lora *l = k->l;
    const df_model_config *c = &k->m->cfg;
    /* T: the terms of a sum over rows, for any of the accumulated batches (at most 64 tokens, the
     * activations' size) plus the accumulation onto the earlier batches' sum (beta 1) */
    const int64_t r = l->cfg.rank, T = 64 + 1;
    const double s = l->scale;
    df_lora_layer gl[2];
    df_lora_view_of(l, (float *)lg, gl);
    df_model_view gv = {0};
    df_layer_view gvl[2];
    gv.layers = gvl;
    df_model_view_of(k->m, (float *)grads, &gv);
    df_lora_module mods[DF_LORA_N_TARGETS];
    const int n_mods = df_lora_modules(c, l->cfg.targets, mods);
    double worst = 0;
    int checked = 0;
    for (int64_t li = 0; li < c->num_hidden_layers; li++)
        for (int mi = 0; mi < n_mods; mi++) {
            const int t0 = mods[mi].first, np = mods[mi].n_parts;
            const float *dWs[] = {gvl[li].wq, gvl[li].wk, gvl[li].wv, gvl[li].wo,
                                  gvl[li].w_gate, gvl[li].w_up, gvl[li].w_down};
            int64_t od_all = 0, id = 0, od[3];
            for (int p = 0; p < np; p++) {
                df_lora_target_shape(c, (df_lora_target)(t0 + p), &od[p], &id);
                od_all += od[p];
            }
            const float *A = l->layers[li].a[t0];
            const double cb = s * (gam(T) + gam(id) * (1 + gam(T)) + 2 * U32) + s * gam(T);
            const double ca = s * (gam(T) + gam(od_all) * (1 + gam(T)) + 2 * U32) + s * gam(T);
            for (int p = 0; p < np; p++) {
                const float *dW = dWs[t0 + p];
                const double *M = rec.mag + (dW - grads);
                for (int64_t o = 0; o < od[p]; o++)
                    for (int64_t q = 0; q < r; q++) { /* dB[o][q] = s sum_j dW[o][j] A[q][j] */
                        double ex = 0, mag = 0;
                        for (int64_t j = 0; j < id; j++) {
                            ex += (double)dW[o * id + j] * A[q * id + j];
                            mag += M[o * id + j] * fabs(A[q * id + j]);
                        }
                        const double err = fabs(gl[li].b[t0 + p][o * r + q] - s * ex);
                        worst = fmax(worst, err / (cb * mag + 1e-300));
                    }
            }
            for (int64_t q = 0; q < r; q++)
                for (int64_t j = 0; j < id; j++) { /* dA[q][j] = s sum_parts sum_o B[o][q] dW[o][j] */
                    double ex = 0, mag = 0;
                    for (int p = 0; p < np; p++) {
                        const float *dW = dWs[t0 + p], *B = l->layers[li].b[t0 + p];
                        const double *M = rec.mag + (dW - grads);
                        for (int64_t o = 0; o < od[p]; o++) {
                            ex += (double)B[o * r + q] * dW[o * id + j];
                            mag += fabs(B[o * r + q]) * M[o * id + j];
                        }
                    }
                    const double err = fabs(gl[li].a[t0][q * id + j] - s * ex);
                    worst = fmax(worst, err / (ca * mag + 1e-300));
                }
            checked++;
        }
    assert_true(checked > 0);
    return worst;
}

/* Teeth: the adapter gradients of targets t1 and t2 of layer li (out rows each, rank 3) exchanged
 * after a recorded backward (B's, and A's too when with_a) must break the identity by far. */
static void swapped_case(df_model_config c, unsigned targets, uint64_t seed, int li, df_lora_target t1,
                         df_lora_target t2, bool with_a, int64_t out)
{
    bwd_case k;
    bwd_setup(&k, c, targets, seed);
    float *lg = calloc((size_t)k.l->n_params, sizeof(float));
    float *grads = calloc((size_t)k.m->n_params, sizeof(float));
    rec.g0 = grads;
    rec.n = k.m->n_params;
    rec.mag = calloc((size_t)k.m->n_params, sizeof(double));
    run_backward(&k, rec_backend(), 0, lg, grads);
    assert_true(check_identity(&k, lg, grads) <= 1.0);
    df_lora_layer gl[2];
    df_lora_view_of(k.l, lg, gl);
    int64_t od, id;
    df_lora_target_shape(&c, t1, &od, &id);
    float tmp[256];
    const size_t na = (size_t)(3 * id) * sizeof(float), nb = (size_t)(out * 3) * sizeof(float);
    assert_true(na <= sizeof tmp && nb <= sizeof tmp);
    float *pa[2] = {gl[li].a[t1], gl[li].a[t2]}, *pb[2] = {gl[li].b[t1], gl[li].b[t2]};
    for (int ab = with_a ? 0 : 1; ab < 2; ab++) {
        float **p = ab ? pb : pa;
        const size_t n = ab ? nb : na;
        memcpy(tmp, p[0], n), memcpy(p[0], p[1], n), memcpy(p[1], tmp, n);
    }
    const double worst = check_identity(&k, lg, grads);
    print_message("%s / %s gradients exchanged: max |error| / bound %.3g\n", df_lora_target_name(t1),
                  df_lora_target_name(t2), worst);
    assert_true(worst > 10.0);
    free(rec.mag);
    rec.mag = NULL;
    free(lg);
    free(grads);
    bwd_teardown(&k);
}

static void identity_case(df_model_config c, unsigned targets, unsigned flags)
{
    bwd_case k;
    bwd_setup(&k, c, targets, 21);
    float *lg = calloc((size_t)k.l->n_params, sizeof(float));
    float *grads = calloc((size_t)k.m->n_params, sizeof(float));
    rec.g0 = grads;
    rec.n = k.m->n_params;
    rec.mag = calloc((size_t)k.m->n_params, sizeof(double));
    run_backward(&k, rec_backend(), flags, lg, grads);
    /* a second batch accumulates onto both (as micro-batches do): the identity holds for the sums */
    const int64_t len[] = {9, 4};
    df_test_pack(&k.p, len, 2, k.m->cfg.vocab_size, 31);
    fill(k.dlogp, k.p.b.n_out, 1.0, 32);
    run_backward(&k, rec_backend(), flags, lg, grads);
    const double worst = check_identity(&k, lg, grads);
    print_message("targets %#x flags %#x: max |error| / bound %.3g\n", targets, flags, worst);
    assert_true(worst <= 1.0);
    /* The adapter's gradient does not depend on whether the base's is computed (frozen base:
     * grads NULL), nor on checkpointed activations: the same operations on the same values. */
    float *lg2 = calloc((size_t)k.l->n_params, sizeof(float));
    free(rec.mag);
    rec.mag = NULL;
    const int64_t len0[] = {7, 12, 5};
    df_test_pack(&k.p, len0, 3, k.m->cfg.vocab_size, 21 + 2);
    fill(k.dlogp, k.p.b.n_out, 1.0, 21 + 3);
    run_backward(&k, rec_backend(), flags ^ DF_ACTS_CHECKPOINT, lg2, NULL);
    df_test_pack(&k.p, len, 2, k.m->cfg.vocab_size, 31);
    fill(k.dlogp, k.p.b.n_out, 1.0, 32);
    run_backward(&k, rec_backend(), flags ^ DF_ACTS_CHECKPOINT, lg2, NULL);
    assert_memory_equal(lg, lg2, (size_t)k.l->n_params * sizeof(float));
    free(lg);
    free(lg2);
    free(grads);
    bwd_teardown(&k);
}

static void test_grad_identity_all_linear(void **state)
{
    (void)state;
    identity_case(lora_model_config(), DF_LORA_ALL_LINEAR, 0);
}

/* OLMo 2's post-norm layer and Gemma 3's sandwich layer: every target, with and without
 * checkpointing (their recompute runs the whole layer). */
static void test_grad_identity_olmo2(void **state)
{
    (void)state;
    identity_case(lora_olmo2_config(), DF_LORA_ALL_LINEAR, 0);
    identity_case(lora_olmo2_config(), DF_LORA_ALL_LINEAR, DF_ACTS_CHECKPOINT);
    identity_case(lora_gemma3_config(), DF_LORA_ALL_LINEAR, 0);
    identity_case(lora_gemma3_config(), DF_LORA_ALL_LINEAR, DF_ACTS_CHECKPOINT);
}

/* phi3's fused modules: B's row blocks get their parts' gradients, the shared A the sum of all. */
static void test_grad_identity_fused(void **state)
{
    (void)state;
    identity_case(lora_phi3_config(), DF_LORA_ALL_LINEAR, 0);
    identity_case(lora_phi3_config(), 1u << DF_LORA_GATE | 1u << DF_LORA_UP, DF_ACTS_CHECKPOINT);
    /* teeth: k's and v's row blocks of B's gradient exchanged (same shapes) */
    swapped_case(lora_phi3_config(), DF_LORA_ALL_LINEAR, 24, 1, DF_LORA_K, DF_LORA_V, false, 12);
}

static void test_grad_identity_subset(void **state)
{
    (void)state;
    identity_case(lora_model_config(), 1u << DF_LORA_K | 1u << DF_LORA_UP, DF_ACTS_CHECKPOINT);
}

/* Teeth: the bound is tight enough that the adapter's gradient checked against another
 * target's base gradient (a target wired to the wrong projection) fails it. */
static void test_grad_identity_teeth(void **state)
{
    (void)state;
    swapped_case(lora_model_config(), 1u << DF_LORA_GATE | 1u << DF_LORA_UP, 22, 0, DF_LORA_GATE, DF_LORA_UP,
                 true, 24);
}

/* A value model (the critic): the adapters' gradients through the value head satisfy the same
 * identity, and the score head, trained whole in the adapter's blob, gets exactly the gradient
 * the full backward without an adapter gives it (the same operations into another blob). */
static void test_grad_identity_value(void **state)
{
    (void)state;
    df_model_config c = lora_model_config();
    c.num_labels = 1;
    bwd_case k = {0};
    k.m = df_test_signal_model(&c, 41);
    df_lora_config lc = {.rank = 3, .alpha = 6, .targets = DF_LORA_ALL_LINEAR};
    assert_int_equal(df_lora_create(k.m, &lc, 42, &k.l), DF_OK);
    assert_true(k.l->head >= 0);
    assert_memory_equal(k.l->params + k.l->head, k.m->w.score_weight, 16 * sizeof(float));
    assert_non_null(df_lora_find_tensor(k.l, "base_model.model.score.bias"));
    for (int i = 1; i < k.l->n_tensors - 2; i += 2)
        fill(k.l->params + k.l->tensors[i].offset, k.l->tensors[i].numel, 0.2, 43 + (uint64_t)i);
    k.l->params[k.l->head] += 0.5f; /* a head that moved: the merge writes it back */
    assert_int_equal(df_lora_merge(k.l, k.m), DF_OK);
    assert_true(k.m->w.score_weight[0] == k.l->params[k.l->head]);
    const int64_t len[] = {7, 12, 5};
    df_test_pack(&k.p, len, 3, c.vocab_size, 44);
    k.dlogp = malloc((size_t)k.p.b.n_out * sizeof(float));
    fill(k.dlogp, k.p.b.n_out, 1.0, 45);
    float *lg = calloc((size_t)k.l->n_params, sizeof(float)), *lg2 = calloc((size_t)k.l->n_params, sizeof(float));
    float *grads = calloc((size_t)k.m->n_params, sizeof(float));
    /* the base frozen (NULL grads), then with the base's gradient, its magnitudes recorded */
    for (int pass = 0; pass < 2; pass++) {
        rec.g0 = grads;
        rec.n = k.m->n_params;
        rec.mag = pass ? calloc((size_t)k.m->n_params, sizeof(double)) : NULL;
        df_backend be = rec_backend();
        df_acts *a = NULL;
        assert_int_equal(df_acts_create_ex(&be, &c, 64, 64, 0, &a), DF_OK);
        assert_int_equal(df_acts_set_lora(a, k.l, pass ? lg : lg2), DF_OK);
        float v[64];
        assert_int_equal(df_model_forward_values(k.m, a, &k.p.b, v), DF_OK);
        assert_int_equal(df_model_backward_values(k.m, a, &k.p.b, k.dlogp, pass ? grads : NULL), DF_OK);
        df_acts_free(a);
    }
    const double worst = check_identity(&k, lg, grads);
    print_message("value model: max |error| / bound %.3g\n", worst);
    assert_true(worst <= 1.0);
    assert_memory_equal(lg, lg2, (size_t)k.l->n_params * sizeof(float));
    /* the head's gradient is the full backward's (without an adapter) to the bit */
    memset(grads, 0, (size_t)k.m->n_params * sizeof(float));
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&c, 64, 64, &a), DF_OK);
    float v[64];
    assert_int_equal(df_model_forward_values(k.m, a, &k.p.b, v), DF_OK);
    assert_int_equal(df_model_backward_values(k.m, a, &k.p.b, k.dlogp, grads), DF_OK);
    df_acts_free(a);
    const df_param_desc *sw = df_model_find_tensor(k.m, "score.weight"), *sb = df_model_find_tensor(k.m, "score.bias");
    assert_memory_equal(lg + k.l->head, grads + sw->offset, 16 * sizeof(float));
    assert_true(lg[k.l->head_bias] == grads[sb->offset]);
    double hn = 0;
    for (int i = 0; i < 16; i++)
        hn += fabs(lg[k.l->head + i]);
    assert_true(hn > 0);
    free(rec.mag);
    rec.mag = NULL;
    free(lg);
    free(lg2);
    free(grads);
    bwd_teardown(&k);
}

/* On a device (the emulated one: the CPU's operators over memory the host cannot touch between
 * calls) the adapter's gradients are the CPU's to the bit, through the device's copy of A / B,
 * which df_acts_lora_sync refreshes: after B changes, the gradient of A follows it there. */
static void on_device_case(df_model_config c)
{
    bwd_case k;
    bwd_setup(&k, c, DF_LORA_ALL_LINEAR, 61);
    const size_t nb = (size_t)k.l->n_params * sizeof(float);
    float *cpu = calloc(1, nb), *host = calloc(1, nb);
    run_backward(&k, df_backend_cpu(), 0, cpu, NULL);
    emu_dev dev;
    df_backend be = emu_open(&dev);
    float *dg = NULL;
    assert_int_equal(be.ops->alloc(be.ctx, nb, (void **)&dg), DF_OK);
    assert_int_equal(be.ops->zero(be.ctx, dg, k.l->n_params), DF_OK);
    df_acts *a = NULL;
    assert_int_equal(df_acts_create_on(&be, &k.m->cfg, 64, 64, &a), DF_OK);
    assert_int_equal(df_acts_load_weights(a, k.m), DF_OK);
    assert_int_equal(df_acts_set_lora(a, k.l, dg), DF_OK);
    float logp[64];
    assert_int_equal(df_model_forward(k.m, a, &k.p.b, 1.0f, logp, NULL), DF_OK);
    assert_int_equal(df_model_backward(k.m, a, &k.p.b, 1.0f, k.dlogp, NULL, NULL), DF_OK);
    assert_int_equal(be.ops->download(be.ctx, host, dg, nb), DF_OK);
    assert_memory_equal(host, cpu, nb);
    /* B doubled (the model not re-merged: only the adapter's copy matters to dA = s B^T dW) */
    for (int i = 1; i < k.l->n_tensors; i += 2)
        for (int64_t j = 0; j < k.l->tensors[i].numel; j++)
            k.l->params[k.l->tensors[i].offset + j] *= 2.0f;
    assert_int_equal(df_acts_lora_sync(a), DF_OK);
    assert_int_equal(be.ops->zero(be.ctx, dg, k.l->n_params), DF_OK);
    assert_int_equal(df_model_forward(k.m, a, &k.p.b, 1.0f, logp, NULL), DF_OK);
    assert_int_equal(df_model_backward(k.m, a, &k.p.b, 1.0f, k.dlogp, NULL, NULL), DF_OK);
    assert_int_equal(be.ops->download(be.ctx, host, dg, nb), DF_OK);
    const float *a0 = cpu + k.l->tensors[0].offset, *a1 = host + k.l->tensors[0].offset;
    for (int64_t j = 0; j < k.l->tensors[0].numel; j++) /* scaling by 2 is exact */
        assert_true(a1[j] == 2.0f * a0[j]);
    df_acts_free(a);
    be.ops->release(be.ctx, dg);
    assert_int_equal(emu_buffers(&dev), 0);
    emu_close(&dev);
    free(cpu);
    free(host);
    bwd_teardown(&k);
}

/* ... and with phi3's fused modules, whose parts share A in the device's copy too. */
static void test_on_device(void **state)
{
    (void)state;
    on_device_case(lora_model_config());
    on_device_case(lora_phi3_config());
    on_device_case(lora_olmo2_config());
    on_device_case(lora_gemma3_config());
}

/* The reference from a LoRA actor (verl's ref_in_actor): its log-probs are those of a frozen copy
 * of the base to the bit, and the actor's merged weights are back afterwards, bit for bit. */
static void test_reference_in_actor(void **state)
{
    (void)state;
    df_model_config c = lora_model_config();
    df_model *m = df_test_signal_model(&c, 71), *base = df_test_model_copy(m);
    df_actor_params p = {.temperature = 1.0f};
    p.optim = (df_core_optim){.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .adam_eps = 1e-8,
                              .lora = {.rank = 3, .alpha = 6, .targets = DF_LORA_ALL_LINEAR}, .lora_seed = 5};
    df_actor *a = NULL, *ref = NULL;
    assert_int_equal(df_actor_create(m, &p, true, &a), DF_OK);
    df_train_core *core = df_actor_core(a);
    for (int i = 1; i < core->lora->n_tensors; i += 2)
        fill(core->lora->params + core->lora->tensors[i].offset, core->lora->tensors[i].numel, 0.3, 72 + (uint64_t)i);
    assert_int_equal(df_lora_merge(core->lora, m), DF_OK);
    assert_int_equal(df_train_core_weights_changed(core), DF_OK);
    df_model *merged = df_test_model_copy(m);
    df_actor_params rp = p;
    rp.optim.lora.rank = 0;
    rp.logprob_micro_batch_size = 2; /* the reference's own limits apply */
    assert_int_equal(df_actor_create(base, &rp, false, &ref), DF_OK);
    df_batch *b = df_test_small_batch();
    assert_int_equal(df_actor_compute_base_log_prob(a, b, "ref_in_actor", &rp, NULL), DF_OK);
    assert_int_equal(df_actor_compute_log_prob(ref, b, "ref_copy", NULL), DF_OK);
    assert_int_equal(df_actor_compute_log_prob(a, b, "policy", NULL), DF_OK);
    const df_column *x = df_batch_column(b, "ref_in_actor"), *y = df_batch_column(b, "ref_copy");
    const df_column *z = df_batch_column(b, "policy");
    const int64_t n = x->offsets[df_batch_size(b)];
    assert_true(n > 0);
    assert_memory_equal(x->data, y->data, (size_t)n * sizeof(float));
    {
        bool differ = false;
        for (int64_t i = 0; i < n; i++)
            differ |= ((const float *)x->data)[i] != ((const float *)z->data)[i];
        assert_true(differ); /* the adapters change the policy: the base is not it */
    }
    assert_true(df_test_same_params(m, merged));
    df_batch_free(b);
    df_model_free(merged);
    df_actor_free(a);
    df_actor_free(ref);
}

/* A frozen base computes no base gradient; attaching needs a causal LM and a blob. */
static void test_frozen_base(void **state)
{
    (void)state;
    bwd_case k;
    bwd_setup(&k, lora_model_config(), DF_LORA_ALL_LINEAR, 23);
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&k.m->cfg, 64, 64, &a), DF_OK);
    float logp[64];
    assert_int_equal(df_model_forward(k.m, a, &k.p.b, 1.0f, logp, NULL), DF_OK);
    /* no adapter: NULL grads refused */
    assert_int_equal(df_model_backward(k.m, a, &k.p.b, 1.0f, k.dlogp, NULL, NULL), DF_EINVAL);
    assert_int_equal(df_acts_set_lora(a, k.l, NULL), DF_EINVAL);
    float *lg = calloc((size_t)k.l->n_params, sizeof(float));
    assert_int_equal(df_acts_set_lora(a, k.l, lg), DF_OK);
    assert_int_equal(df_model_forward(k.m, a, &k.p.b, 1.0f, logp, NULL), DF_OK);
    assert_int_equal(df_model_backward(k.m, a, &k.p.b, 1.0f, k.dlogp, NULL, NULL), DF_OK);
    double n2 = 0;
    for (int64_t i = 0; i < k.l->n_params; i++)
        n2 += (double)lg[i] * lg[i];
    assert_true(n2 > 0);
    assert_int_equal(df_acts_set_lora(a, NULL, NULL), DF_OK); /* detached */
    df_acts_free(a);
    free(lg);
    bwd_teardown(&k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_targets),
        cmocka_unit_test(test_exclude),
        cmocka_unit_test(test_create_and_merge),
        cmocka_unit_test(test_bf16_base),
        cmocka_unit_test(test_grad_identity_all_linear),
        cmocka_unit_test(test_grad_identity_subset),
        cmocka_unit_test(test_grad_identity_fused),
        cmocka_unit_test(test_grad_identity_olmo2),
        cmocka_unit_test(test_create_fused),
        cmocka_unit_test(test_grad_identity_teeth),
        cmocka_unit_test(test_grad_identity_value),
        cmocka_unit_test(test_on_device),
        cmocka_unit_test(test_reference_in_actor),
        cmocka_unit_test(test_frozen_base),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
