/*
 * The value model (model.h "value model"): the PPO critic's decoder with a
 * scalar score head, HF *ForTokenClassification with one label.
 *   - df_model_backward_values against central finite differences;
 *   - values and gradients against a float64 PyTorch reference
 *     (tests/golden/gen_golden.py: a plain-torch Qwen2 written after
 *     transformers' modeling_qwen2.py with a score head; transformers itself
 *     is not installed here, so no file was produced or read by it);
 *   - df_model_to_value_model / df_model_init_random heads;
 *   - save -> load round trips and malformed configs / checkpoints;
 *   - misuse (wrong head, wrong backward) is DF_EINVAL.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testgolden.h"
#include "testutil.h"

#include "distflow/model.h"
#include "distflow/rng.h"
#include "distflow/rollout.h"
#include "model/acts.h"
#include "model/safetensors.h"
#include "testbounds.h"
#include "tolerance.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------ */

/* The config of a tiny value model: vocab 40, hidden 16, 2 layers, 2 heads / 1 KV head. */
static df_model_config value_config(const char *type)
{
    df_model_config c;
    df_model_config_defaults(&c);
    snprintf(c.model_type, sizeof c.model_type, "%s", type);
    c.attention_bias = strcmp(type, "llama") != 0;
    c.vocab_size = 40;
    c.hidden_size = 16;
    c.intermediate_size = 32;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 8;
    c.max_position_embeddings = 64;
    c.initializer_range = 0.3;
    c.num_labels = 1;
    return c;
}

/* A tiny value model with O(1) activations: weights N(0, 0.3), norms 1 + N(0, 0.1) and
 * biases N(0, 0.1) so every path carries signal. */
static df_model *value_model_of(const char *type, uint64_t seed)
{
    df_model_config c = value_config(type);
    df_model *m;
    assert_int_equal(df_model_create(&c, &m), DF_OK);
    assert_int_equal(df_model_init_random(m, seed), DF_OK);
    df_rng r;
    df_rng_seed(&r, df_rng_key(seed, 77, 0, 0));
    for (int t = 0; t < m->n_tensors; t++) {
        const df_param_desc *d = &m->tensors[t];
        if (d->ndim == 1)
            for (int64_t i = 0; i < d->numel; i++)
                m->params[d->offset + i] += (float)(0.1 * df_rng_normal(&r));
    }
    return m;
}

static df_model *value_model(uint64_t seed) { return value_model_of("qwen2", seed); }

/* Two packed sequences (7 and 5 tokens); output rows 2..5 and 8..10. */
typedef struct {
    int32_t tokens[12];
    int64_t offsets[3];
    int64_t rows[7];
    df_seq_batch b;
} small_batch;

static void small_batch_init(small_batch *s, int64_t vocab)
{
    for (int i = 0; i < 12; i++)
        s->tokens[i] = (int32_t)((i * 13 + 5) % vocab);
    s->offsets[0] = 0, s->offsets[1] = 7, s->offsets[2] = 12;
    const int64_t rows[7] = {2, 3, 4, 5, 8, 9, 10};
    memcpy(s->rows, rows, sizeof rows);
    s->b = (df_seq_batch){12, s->tokens, 2, s->offsets, 7, s->rows, NULL, NULL, NULL};
}

/*
 * Error bounds (tests/testbounds.h): the probabilistic bound over the roundings on the longest
 * path to each result, relative to its magnitude: values (tb_head_chain: the trunk, then the
 * head's H products and the bias), gradients (tb_grad_chain: that, the head's backward and the
 * decoder's).
 */
static double values_eps(const df_model_config *c, int64_t L)
{
    return df_tol_gamma_prob(tb_head_chain(c, L), DF_TOL_LAMBDA, DF_U32);
}

static double grads_eps(const df_model_config *c, int64_t L, int64_t T)
{
    return df_tol_gamma_prob(tb_grad_chain(c, L, T), DF_TOL_LAMBDA, DF_U32);
}

/* sum_j |c_j| S_j, S_j = sum_e |w_e xnf[j, e]| + |bias|: the magnitude behind sum c v, from
   the final hidden states of the last forward in a. */
static double loss_mag(const df_model *m, const df_acts *a, const df_seq_batch *b, const float *c)
{
    const int64_t H = m->cfg.hidden_size;
    double s = 0;
    for (int64_t j = 0; j < b->n_out; j++) {
        double S = fabs(m->w.score_bias[0]);
        for (int64_t e = 0; e < H; e++)
            S += fabs((double)m->w.score_weight[e] * a->xnf[j * H + e]);
        s += fabs(c[j]) * S;
    }
    return s;
}

/* sum_j c_j values[j] in double. */
static double value_loss(const df_model *m, df_acts *a, const df_seq_batch *b, const float *c)
{
    float v[64];
    assert_int_equal(df_model_forward_values(m, a, b, v), DF_OK);
    double s = 0;
    for (int64_t j = 0; j < b->n_out; j++)
        s += (double)c[j] * v[j];
    return s;
}

/* ---- finite differences --------------------------------------------------------- */

static void test_backward_values_fd(void **state)
{
    (void)state;
    df_model *m = value_model(11);
    small_batch sb;
    small_batch_init(&sb, m->cfg.vocab_size);
    const df_seq_batch *b = &sb.b;
    df_acts *a;
    assert_int_equal(df_acts_create(&m->cfg, 16, 8, &a), DF_OK);
    float c[7];
    df_rng r;
    df_rng_seed(&r, df_rng_key(5, 0, 0, 0));
    for (int j = 0; j < 7; j++)
        c[j] = (float)df_rng_normal(&r);
    float *g = calloc((size_t)m->n_params, sizeof(float));
    value_loss(m, a, b, c);
    /* The float loss is within eps_f of the exact one (values_eps times its magnitude, then
       the double sum's rounding); the analytic gradient within grads_eps of each tensor's
       norm (normwise, so also entry by entry). */
    const int64_t L = 7, T = 12;
    const double eps_f = (values_eps(&m->cfg, L) + df_tol_gamma(b->n_out + 1, DF_U64)) * loss_mag(m, a, b, c);
    const double eg = grads_eps(&m->cfg, L, T);
    assert_int_equal(df_model_backward_values(m, a, b, c, g), DF_OK);

    /* Three entries of every tensor (first, middle, last); for the embedding, entries of a
     * row the batch uses (token 5 sits at row 0). Central differences in float32 at h and
     * 2h: the error of D(h) is its truncation (at most |D(2h) - D(h)| / 3, taken whole),
     * the rounding 2 eps_f / 2h, and the rounded steps keep +- h (u (|keep| + 2h) / h
     * relative). */
    const float h = 1e-2f;
    double worst = 0;
    int checked = 0;
    for (int t = 0; t < m->n_tensors; t++) {
        const df_param_desc *d = &m->tensors[t];
        int64_t idx[3] = {0, d->numel / 2, d->numel - 1};
        if (t == 0)
            for (int k = 0; k < 3; k++)
                idx[k] = 5 * d->shape[1] + k * 7;
        const double gb = eg * df_test_norm2(g + d->offset, d->numel);
        for (int k = 0; k < 3; k++) {
            float *p = m->params + d->offset + idx[k], keep = *p;
            double D[2];
            for (int s = 0; s < 2; s++) {
                float step = s ? 2 * h : h;
                *p = keep + step;
                double lp = value_loss(m, a, b, c);
                *p = keep - step;
                double lm = value_loss(m, a, b, c);
                D[s] = (lp - lm) / (2.0 * (double)step);
            }
            *p = keep;
            double fd = D[0], an = g[d->offset + idx[k]];
            double bound = fabs(D[1] - D[0]) + eps_f / h +
                           2 * DF_U32 * (fabs(keep) + 2 * h) / h * fabs(fd) + gb;
            if (!(fabs(fd - an) <= bound))
                fail_msg("%s[%lld]: analytic %.7g, finite difference %.7g: error %.3g above its "
                         "bound %.3g", d->name, (long long)idx[k], an, fd, fabs(fd - an), bound);
            worst = fmax(worst, fabs(fd - an) / bound);
            checked++;
        }
    }
    print_message("value head FD: %d entries, worst error / bound %.3f\n", checked, worst);
    assert_int_equal(checked, 3 * m->n_tensors);
    /* The whole gradient along a random direction u: (L(p + eps u) - L(p - eps u)) / 2 eps =
     * g . u, with the same error terms: the float steps round by u |p| per entry (a loss
     * change of u sum |g_i| (|p_i| + 2h |u_i|)), and g's error along u is at most
     * ||u|| ||dg|| <= ||u|| grads_eps ||g||. */
    float *p0 = malloc((size_t)m->n_params * sizeof(float)), *u = malloc((size_t)m->n_params * sizeof(float));
    memcpy(p0, m->params, (size_t)m->n_params * sizeof(float));
    double gu = 0, gp = 0, un = 0;
    for (int64_t i = 0; i < m->n_params; i++) {
        u[i] = (float)df_rng_normal(&r);
        gu += (double)g[i] * u[i];
        gp += fabs((double)g[i]) * (fabs(p0[i]) + 2e-3 * fabs(u[i]));
        un += (double)u[i] * u[i];
    }
    double Du[2];
    for (int s = 0; s < 2; s++) {
        const float step = s ? 2e-3f : 1e-3f;
        double ls[2];
        for (int k = 0; k < 2; k++) {
            for (int64_t i = 0; i < m->n_params; i++)
                m->params[i] = p0[i] + (k ? -step : step) * u[i];
            ls[k] = value_loss(m, a, b, c);
        }
        Du[s] = (ls[0] - ls[1]) / (2.0 * (double)step);
    }
    memcpy(m->params, p0, (size_t)m->n_params * sizeof(float));
    double fdu = Du[0];
    const double bu = fabs(Du[1] - Du[0]) + (eps_f + 2 * DF_U32 * gp) / 1e-3 +
                      eg * sqrt(un) * df_test_norm2(g, m->n_params) + df_tol_gamma(m->n_params, DF_U64) * gp;
    print_message("directional: g.u %.7g, finite difference %.7g, error / bound %.3f\n", gu, fdu,
                  fabs(fdu - gu) / bu);
    assert_near(fdu, gu, bu);
    free(p0), free(u);
    /* The head's gradients in closed form: d bias = sum_j c_j, summed in double in the same
       order and rounded to float once. */
    double csum = 0;
    for (int j = 0; j < 7; j++)
        csum += c[j];
    const df_param_desc *bias = df_model_find_tensor(m, "score.bias");
    assert_non_null(bias);
    assert_near(g[bias->offset], csum, DF_U32 * fabs(csum));
    /* A token the batch never uses gets no embedding gradient. */
    const int64_t H = m->cfg.hidden_size;
    for (int64_t i = 0; i < H; i++)
        assert_true(g[1 * H + i] == 0.0f);

    /* Backward accumulates: a second pass doubles every gradient. */
    float *g2 = malloc((size_t)m->n_params * sizeof(float));
    memcpy(g2, g, (size_t)m->n_params * sizeof(float));
    value_loss(m, a, b, c);
    assert_int_equal(df_model_backward_values(m, a, b, c, g2), DF_OK);
    /* The second pass accumulates inside its GEMMs (one more rounding on its chain), so
       per tensor ||g2 - 2 g|| <= ||g2 - 2 g_exact|| + 2 ||g - g_exact|| <= 4 grads_eps ||g||. */
    for (int t = 0; t < m->n_tensors; t++) {
        const df_param_desc *d = &m->tensors[t];
        assert_true(df_test_dist2(g2 + d->offset, 2.0, g + d->offset, d->numel) <=
                    4 * eg * df_test_norm2(g + d->offset, d->numel));
    }
    free(g), free(g2);
    df_acts_free(a);
    df_model_free(m);
}

/* ---- golden values against the PyTorch reference (gen_golden.py) ---------------------- */

#define GOLDEN_DIR DF_SOURCE_DIR "/tests/golden"

typedef df_golden_batch golden_batch;

/* Against the float64 reference (df_golden_tol). */
#define FWD_TOL df_golden_tol(tb_head_chain(&m->cfg, df_golden_max_len(&g)))
#define GRAD_TOL df_golden_tol(tb_grad_chain(&m->cfg, df_golden_max_len(&g), g.T))

static void golden_batch_load(golden_batch *g)
{
    df_golden_batch_load(g, GOLDEN_DIR "/tiny_qwen2_value_expected.safetensors");
}

/* Relative L2 error of the values against the reference's. */
static double values_error(const df_model *m, const golden_batch *gb)
{
    df_acts *a;
    assert_int_equal(df_acts_create(&m->cfg, gb->T, gb->n_out, &a), DF_OK);
    float *v = malloc(sizeof(float) * (size_t)gb->n_out), *want = df_golden_read_vec(gb->exp, "values", NULL);
    assert_int_equal(df_model_forward_values(m, a, &gb->b, v), DF_OK);
    double e = df_golden_rel_err(v, want, gb->n_out);
    free(v), free(want);
    df_acts_free(a);
    return e;
}

static void test_golden_values(void **state)
{
    (void)state;
    golden_batch g;
    golden_batch_load(&g);
    /* gen_golden.py's files, laid out as transformers' Qwen2ForTokenClassification expects
       (config.json architectures / id2label, score.* tensors); written by that script, not by transformers. */
    df_model *m;
    if (df_model_load(GOLDEN_DIR "/tiny_qwen2_value", &m))
        fail_msg("%s", df_last_error());
    assert_int_equal(m->cfg.num_labels, 1);
    assert_null(m->w.lm_head);
    assert_null(df_model_find_tensor(m, "lm_head.weight"));
    double fe = values_error(m, &g);
    print_message("values rel err %.2e, bound %.2e\n", fe, FWD_TOL);
    assert_true(fe <= FWD_TOL);

    /* Gradient of sum(c values) w.r.t. every parameter. */
    df_acts *a;
    assert_int_equal(df_acts_create(&m->cfg, g.T, g.n_out, &a), DF_OK);
    float *v = malloc(sizeof(float) * (size_t)g.n_out), *c = df_golden_read_vec(g.exp, "loss.c", NULL);
    float *grads = calloc((size_t)m->n_params, sizeof(float));
    assert_int_equal(df_model_forward_values(m, a, &g.b, v), DF_OK);
    assert_int_equal(df_model_backward_values(m, a, &g.b, c, grads), DF_OK);
    const char *wn = "";
    double worst = df_golden_worst_grad(m, g.exp, grads, 1.0f, &wn);
    print_message("worst value-model gradient rel err %.2e (%s), bound %.2e\n", worst, wn, GRAD_TOL);
    assert_true(worst <= GRAD_TOL);

    /* The test can fail: one q_proj weight moved by 1e-3 shows in the values (2.3x the
       bound), a 1e-4 shift of the score bias too. */
    m->w.layers[1].wq[5] += 1e-3f;
    fe = values_error(m, &g);
    print_message("perturbed wq: values rel err %.2e\n", fe);
    assert_true(fe > FWD_TOL);
    m->w.layers[1].wq[5] -= 1e-3f;
    m->w.score_bias[0] += 1e-4f;
    print_message("score bias +1e-4: values rel err %.2e\n", values_error(m, &g));
    assert_true(values_error(m, &g) > FWD_TOL);
    m->w.score_bias[0] -= 1e-4f;

    /* The causal fixture converted to a value model has bit-identical trunk tensors. */
    df_model *lm;
    assert_int_equal(df_model_load(GOLDEN_DIR "/tiny_qwen2", &lm), DF_OK);
    assert_int_equal(df_model_to_value_model(&lm, 3), DF_OK);
    assert_int_equal(lm->n_params, m->n_params);
    const df_param_desc *sw = df_model_find_tensor(m, "score.weight");
    assert_memory_equal(lm->params, m->params, (size_t)sw->offset * sizeof(float));
    df_model_free(lm);
    free(v), free(c), free(grads);
    df_acts_free(a);
    df_model_free(m);
    df_golden_batch_free(&g);
}

/* ---- df_model_to_value_model / df_model_init_random ------------------------------------ */

static void test_to_value_model(void **state)
{
    (void)state;
    df_model *m = df_test_micro_model(21), *orig;
    assert_int_equal(df_model_clone(m, &orig), DF_OK);
    df_model *before = m;
    assert_int_equal(df_model_to_value_model(&m, 9), DF_OK);
    assert_ptr_not_equal(m, before); /* reallocated */
    assert_int_equal(m->cfg.num_labels, 1);
    assert_int_equal(m->n_tensors, orig->n_tensors + 1); /* - lm_head + score.weight / bias */
    assert_null(df_model_find_tensor(m, "lm_head.weight"));
    assert_null(m->w.lm_head);
    const int64_t H = m->cfg.hidden_size;
    const df_param_desc *sw = df_model_find_tensor(m, "score.weight"),
                        *sb = df_model_find_tensor(m, "score.bias");
    assert_non_null(sw);
    assert_non_null(sb);
    assert_int_equal(sw->ndim, 2);
    assert_int_equal(sw->shape[0], 1);
    assert_int_equal(sw->shape[1], H);
    assert_int_equal(sb->ndim, 1);
    assert_int_equal(sb->shape[0], 1);
    assert_ptr_equal(m->w.score_weight, m->params + sw->offset);
    assert_ptr_equal(m->w.score_bias, m->params + sb->offset);
    assert_true(m->w.score_bias[0] == 0.0f);
    /* Every trunk tensor bit-identical, found by name. */
    for (int t = 0; t < orig->n_tensors; t++) {
        const df_param_desc *d = &orig->tensors[t];
        const df_param_desc *e = df_model_find_tensor(m, d->name);
        if (!strcmp(d->name, "lm_head.weight")) {
            assert_null(e);
            continue;
        }
        assert_non_null(e);
        assert_memory_equal(m->params + e->offset, orig->params + d->offset,
                            (size_t)d->numel * sizeof(float));
    }
    /* Head deterministic by seed: same seed same head, another seed another head. */
    df_model *m2, *m3;
    assert_int_equal(df_model_clone(orig, &m2), DF_OK);
    assert_int_equal(df_model_clone(orig, &m3), DF_OK);
    assert_int_equal(df_model_to_value_model(&m2, 9), DF_OK);
    assert_int_equal(df_model_to_value_model(&m3, 10), DF_OK);
    assert_memory_equal(m2->w.score_weight, m->w.score_weight, (size_t)H * sizeof(float));
    assert_memory_not_equal(m3->w.score_weight, m->w.score_weight, (size_t)H * sizeof(float));
    for (int64_t i = 0; i < H; i++)
        assert_true(m->w.score_weight[i] != 0.0f && fabsf(m->w.score_weight[i]) < 0.2f); /* 10 sd */
    /* df_model_init_random draws a value model's head the same way. */
    df_model *fresh;
    assert_int_equal(df_model_create(&m->cfg, &fresh), DF_OK);
    assert_int_equal(df_model_init_random(fresh, 9), DF_OK);
    assert_memory_equal(fresh->w.score_weight, m->w.score_weight, (size_t)H * sizeof(float));
    assert_true(fresh->w.score_bias[0] == 0.0f);
    /* A value model is left as it is. */
    df_model *same = m2;
    assert_int_equal(df_model_to_value_model(&m2, 123), DF_OK);
    assert_ptr_equal(m2, same);
    assert_memory_equal(m2->w.score_weight, m->w.score_weight, (size_t)H * sizeof(float));
    assert_int_equal(df_model_to_value_model(NULL, 1), DF_EINVAL);
    df_model *none = NULL;
    assert_int_equal(df_model_to_value_model(&none, 1), DF_EINVAL);
    df_model_free(fresh), df_model_free(m3), df_model_free(m2);

    /* Tied embeddings: nothing to drop; the flag is kept and has no effect. */
    df_model_config tc = orig->cfg;
    tc.tie_word_embeddings = true;
    df_model *tied;
    assert_int_equal(df_model_create(&tc, &tied), DF_OK);
    assert_int_equal(df_model_init_random(tied, 4), DF_OK);
    int n_tied = tied->n_tensors;
    assert_int_equal(df_model_to_value_model(&tied, 4), DF_OK);
    assert_int_equal(tied->n_tensors, n_tied + 2);
    assert_true(tied->cfg.tie_word_embeddings);
    assert_null(tied->w.lm_head);
    assert_ptr_not_equal(tied->w.score_weight, tied->w.embed);
    df_model_free(tied);
    df_model_free(orig);
    df_model_free(m);
}

/* With a wide hidden size the head's spread is initializer_range. */
static void test_head_init_std(void **state)
{
    (void)state;
    df_model_config c;
    df_model_config_defaults(&c);
    c.vocab_size = 8;
    c.hidden_size = 8192;
    c.intermediate_size = 8;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 1;
    c.num_key_value_heads = 1;
    c.head_dim = 8;
    c.max_position_embeddings = 16;
    c.initializer_range = 0.02;
    df_model *m;
    assert_int_equal(df_model_create(&c, &m), DF_OK);
    assert_int_equal(df_model_init_random(m, 1), DF_OK);
    assert_int_equal(df_model_to_value_model(&m, 77), DF_OK);
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < c.hidden_size; i++) {
        s1 += m->w.score_weight[i];
        s2 += (double)m->w.score_weight[i] * m->w.score_weight[i];
    }
    double mean = s1 / (double)c.hidden_size;
    double sd = sqrt(s2 / (double)c.hidden_size - mean * mean);
    print_message("score.weight mean %.2e std %.5f (8192 draws)\n", mean, sd);
    /* Statistical: for n normal draws of std s the sample std has standard error
       s / sqrt(2 n) and the mean s / sqrt(n); 5 standard errors (a correct draw fails
       with probability 6e-7 per check). */
    const double n = (double)c.hidden_size, s = c.initializer_range;
    assert_near(sd, s, 5 * s / sqrt(2 * n));
    assert_near(mean, 0.0, 5 * s / sqrt(n));
    df_model_free(m);
}

/* ---- files ----------------------------------------------------------------------------- */

static json_t *load_json(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j)
        fail_msg("%s: %s", path, e.text);
    return j;
}

static void values_of(const df_model *m, const small_batch *sb, float *v)
{
    df_acts *a;
    assert_int_equal(df_acts_create(&m->cfg, 16, 8, &a), DF_OK);
    assert_int_equal(df_model_forward_values(m, a, &sb->b, v), DF_OK);
    df_acts_free(a);
}

static void roundtrip(const char *dir, const char *type)
{
    df_model *m = value_model_of(type, 31);
    bool llama = !strcmp(type, "llama");
    assert_int_equal(df_model_save(m, dir, DF_DTYPE_F32, 0), DF_OK);

    char *path = df_path_join(dir, "config.json");
    json_t *cj = load_json(path);
    free(path);
    json_t *arch = json_object_get(cj, "architectures");
    assert_int_equal(json_array_size(arch), 1);
    assert_string_equal(json_string_value(json_array_get(arch, 0)),
                        llama ? "LlamaForTokenClassification" : "Qwen2ForTokenClassification");
    json_t *id2 = json_object_get(cj, "id2label");
    assert_int_equal(json_object_size(id2), 1);
    assert_string_equal(json_string_value(json_object_get(id2, "0")), "LABEL_0");
    json_t *l2 = json_object_get(cj, "label2id");
    assert_int_equal(json_object_size(l2), 1);
    assert_int_equal(json_integer_value(json_object_get(l2, "LABEL_0")), 0);
    json_decref(cj);

    path = df_path_join(dir, "model.safetensors");
    df_st_file *f;
    assert_int_equal(df_st_open(path, &f), DF_OK);
    free(path);
    df_st_tensor t;
    assert_int_equal(df_st_find(f, "score.weight", &t), DF_OK);
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.shape[0], 1);
    assert_int_equal(t.shape[1], m->cfg.hidden_size);
    assert_int_equal(df_st_find(f, "score.bias", &t), DF_OK);
    assert_int_equal(t.ndim, 1);
    assert_int_equal(t.shape[0], 1);
    assert_int_not_equal(df_st_find(f, "lm_head.weight", &t), DF_OK);
    assert_int_equal(df_st_count(f), m->n_tensors);
    df_st_close(f);

    df_model *r;
    if (df_model_load(dir, &r))
        fail_msg("%s", df_last_error());
    assert_int_equal(r->cfg.num_labels, 1);
    assert_int_equal(r->n_params, m->n_params);
    assert_memory_equal(r->params, m->params, (size_t)m->n_params * sizeof(float));
    small_batch sb;
    small_batch_init(&sb, m->cfg.vocab_size);
    float v1[7], v2[7];
    values_of(m, &sb, v1);
    values_of(r, &sb, v2);
    assert_memory_equal(v1, v2, sizeof v1);
    df_model_free(r);
    df_model_free(m);
}

static void test_save_load_roundtrip(void **state)
{
    char *q = df_path_join(*state, "qwen2"), *l = df_path_join(*state, "llama");
    roundtrip(q, "qwen2");
    roundtrip(l, "llama");
    free(q), free(l);
}

/* An actor checkpoint converted and saved keeps its unknown config keys. */
static void test_convert_and_save_keeps_keys(void **state)
{
    const char *dir = *state;
    df_model *m;
    assert_int_equal(df_model_load(GOLDEN_DIR "/tiny_qwen2", &m), DF_OK);
    assert_int_equal(df_model_to_value_model(&m, 5), DF_OK);
    assert_non_null(m->config_json);
    assert_int_equal(df_model_save(m, dir, DF_DTYPE_BF16, 0), DF_OK);
    char *path = df_path_join(dir, "config.json");
    json_t *cj = load_json(path);
    assert_string_equal(json_string_value(json_array_get(json_object_get(cj, "architectures"), 0)),
                        "Qwen2ForTokenClassification");
    assert_true(json_is_false(json_object_get(cj, "use_sliding_window")));
    assert_string_equal(json_string_value(json_object_get(cj, "torch_dtype")), "bfloat16");
    json_decref(cj);
    df_model_config c;
    assert_int_equal(df_model_config_load(path, &c), DF_OK);
    assert_int_equal(c.num_labels, 1);
    free(path);
    df_model *r;
    assert_int_equal(df_model_load(dir, &r), DF_OK);
    assert_int_equal(r->cfg.num_labels, 1);
    assert_int_equal(r->n_params, m->n_params);
    df_model_free(r);
    df_model_free(m);
}

/* ---- malformed input --------------------------------------------------------------------- */

#define CFG_HEAD                                                                           \
    "{\"model_type\": \"qwen2\", \"vocab_size\": 40, \"hidden_size\": 16, "               \
    "\"intermediate_size\": 32, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "

static int parse(const char *tail, df_model_config *c)
{
    char text[1024];
    snprintf(text, sizeof text, "%s%s}", CFG_HEAD, tail);
    df_clear_error();
    return df_model_config_parse(text, "cfg/config.json", c);
}

static void test_config_labels(void **state)
{
    (void)state;
    df_model_config c;
    const char *tc = "\"architectures\": [\"Qwen2ForTokenClassification\"]";
    char t[512];
    /* id2label's entry count, else num_labels, else 2 (PretrainedConfig). */
    snprintf(t, sizeof t, "%s, \"id2label\": {\"0\": \"LABEL_0\"}", tc);
    assert_int_equal(parse(t, &c), DF_OK);
    assert_int_equal(c.num_labels, 1);
    snprintf(t, sizeof t, "%s, \"num_labels\": 1", tc);
    assert_int_equal(parse(t, &c), DF_OK);
    assert_int_equal(c.num_labels, 1);
    snprintf(t, sizeof t, "%s, \"id2label\": {\"0\": \"NEG\", \"1\": \"POS\"}", tc);
    assert_error_mentions(parse(t, &c), DF_EUNSUPPORTED, "\"id2label\" gives 2 labels");
    assert_non_null(strstr(df_last_error(), "cfg/config.json"));
    /* id2label wins over num_labels, as in transformers. */
    snprintf(t, sizeof t, "%s, \"id2label\": {\"0\": \"A\", \"1\": \"B\"}, \"num_labels\": 1", tc);
    assert_error_mentions(parse(t, &c), DF_EUNSUPPORTED, "id2label");
    snprintf(t, sizeof t, "%s", tc);
    assert_error_mentions(parse(t, &c), DF_EUNSUPPORTED, "2 labels (the default)");
    snprintf(t, sizeof t, "%s, \"num_labels\": 3", tc);
    assert_error_mentions(parse(t, &c), DF_EUNSUPPORTED, "\"num_labels\" gives 3 labels");
    snprintf(t, sizeof t, "%s, \"id2label\": [\"LABEL_0\"]", tc);
    assert_error_mentions(parse(t, &c), DF_EINVAL, "\"id2label\" must be an object");
    snprintf(t, sizeof t, "%s, \"num_labels\": \"1\"", tc);
    assert_error_mentions(parse(t, &c), DF_EINVAL, "\"num_labels\" must be an integer");
    assert_error_mentions(parse("\"architectures\": [\"Qwen2ForCausalLM\", "
                                "\"Qwen2ForTokenClassification\"], \"num_labels\": 1", &c),
                          DF_EUNSUPPORTED, "mixes");
    /* A sequence classifier (a reward model) has the same head; its own label rule. */
    assert_int_equal(parse("\"architectures\": [\"Qwen2ForSequenceClassification\"], \"num_labels\": 1", &c),
                     DF_OK);
    assert_int_equal(c.num_labels, 1);
    assert_true(c.seq_cls);
    assert_error_mentions(parse("\"architectures\": [\"Qwen2ForSequenceClassification\"]", &c),
                          DF_EUNSUPPORTED, "2 labels (the default)");
    assert_error_mentions(parse("\"architectures\": [\"Qwen2ForSequenceClassification\", "
                                "\"Qwen2ForTokenClassification\"], \"num_labels\": 1", &c),
                          DF_EUNSUPPORTED, "mixes *ForSequenceClassification and *ForTokenClassification");
    assert_error_mentions(parse("\"architectures\": [\"Qwen2ForQuestionAnswering\"]", &c),
                          DF_EUNSUPPORTED, "Qwen2ForQuestionAnswering");
    /* A causal LM has no labels whatever id2label says; so has a config without architectures. */
    assert_int_equal(parse("\"architectures\": [\"Qwen2ForCausalLM\"], "
                           "\"id2label\": {\"0\": \"A\", \"1\": \"B\"}", &c), DF_OK);
    assert_int_equal(c.num_labels, 0);
    assert_int_equal(parse("\"num_labels\": 1", &c), DF_OK);
    assert_int_equal(c.num_labels, 0);
    /* Llama too. */
    assert_int_equal(parse("\"architectures\": [\"LlamaForTokenClassification\"], "
                           "\"id2label\": {\"0\": \"LABEL_0\"}", &c), DF_OK);
    assert_int_equal(c.num_labels, 1);
    assert_false(c.seq_cls);
    /* The config struct itself: 0 or 1; a sequence classifier 1. */
    df_model_config_defaults(&c);
    c.num_labels = 2;
    assert_int_equal(df_model_config_validate(&c), DF_EUNSUPPORTED);
    c.num_labels = -1;
    assert_int_equal(df_model_config_validate(&c), DF_EINVAL);
    c.num_labels = 0;
    c.seq_cls = true;
    assert_int_equal(df_model_config_validate(&c), DF_EINVAL);
}

static void test_checkpoint_missing_bias(void **state)
{
    const char *dir = *state;
    df_model *m = value_model(3);
    assert_int_equal(df_model_save(m, dir, DF_DTYPE_F32, 0), DF_OK);
    char *path = df_path_join(dir, "model.safetensors");
    /* Rewrite the weights without score.bias, then with an extra lm_head. */
    for (int pass = 0; pass < 2; pass++) {
        df_st_writer *w;
        assert_int_equal(df_st_writer_new(&w), DF_OK);
        for (int i = 0; i < m->n_tensors; i++) {
            const df_param_desc *d = &m->tensors[i];
            if (pass == 0 && !strcmp(d->name, "score.bias"))
                continue;
            assert_int_equal(df_st_writer_add_borrowed(w, d->name, DF_DTYPE_F32, d->ndim,
                                                       d->shape, m->params + d->offset), DF_OK);
        }
        int64_t lm[2] = {m->cfg.vocab_size, m->cfg.hidden_size};
        if (pass == 1)
            assert_int_equal(df_st_writer_add_borrowed(w, "lm_head.weight", DF_DTYPE_F32, 2, lm,
                                                       m->w.embed), DF_OK);
        assert_int_equal(df_st_writer_write(w, path), DF_OK);
        df_st_writer_free(w);
        df_model *r = (df_model *)0x1;
        df_clear_error();
        if (pass == 0)
            assert_error_mentions(df_model_load(dir, &r), DF_EINVAL, "missing tensor \"score.bias\"");
        else
            assert_error_mentions(df_model_load(dir, &r), DF_EINVAL,
                                  "unexpected tensor \"lm_head.weight\"");
        assert_null(r);
    }
    free(path);
    df_model_free(m);
}

/* ---- misuse ------------------------------------------------------------------------------- */

static void test_wrong_head_errors(void **state)
{
    (void)state;
    df_model *v = value_model(8), *lm = df_test_micro_model(8);
    small_batch sb;
    small_batch_init(&sb, v->cfg.vocab_size);
    int32_t targets[7] = {1, 2, 3, 4, 5, 6, 7};
    df_seq_batch blm = sb.b;
    blm.out_targets = targets;
    df_acts *a;
    assert_int_equal(df_acts_create(&lm->cfg, 16, 8, &a), DF_OK);
    float out[8], d[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    float *gv = calloc((size_t)v->n_params, sizeof(float));
    float *gl = calloc((size_t)lm->n_params, sizeof(float));
    /* The LM forward on a value model, the value forward on a causal LM. */
    assert_error_mentions(df_model_forward(v, a, &blm, 1.0f, out, NULL), DF_EINVAL,
                          "df_model_forward_values");
    assert_error_mentions(df_model_forward_values(lm, a, &sb.b, out), DF_EINVAL,
                          "not a value model");
    /* No forward yet. */
    assert_error_mentions(df_model_backward_values(v, a, &sb.b, d, gv), DF_EINVAL,
                          "no forward");
    /* backward_values after a log-prob forward, and the reverse. */
    assert_int_equal(df_model_forward(lm, a, &blm, 1.0f, out, NULL), DF_OK);
    assert_error_mentions(df_model_backward_values(v, a, &sb.b, d, gv), DF_EINVAL,
                          "df_model_forward (log-probs)");
    assert_int_equal(df_model_forward_values(v, a, &sb.b, out), DF_OK); /* LM acts serve both */
    assert_error_mentions(df_model_backward(lm, a, &blm, 1.0f, d, NULL, gl), DF_EINVAL,
                          "df_model_forward_values");
    /* A different batch; out_targets are not needed (NULL) nor checked. */
    df_seq_batch shorter = sb.b;
    shorter.n_out = 6;
    assert_error_mentions(df_model_backward_values(v, a, &shorter, d, gv), DF_EINVAL, "differs");
    assert_int_equal(df_model_backward_values(v, a, &sb.b, d, gv), DF_OK);
    assert_error_mentions(df_model_forward_values(v, a, &sb.b, NULL), DF_EINVAL, "NULL");
    df_seq_batch bad = sb.b;
    int64_t rows[7] = {2, 3, 4, 5, 8, 9, 12};
    bad.out_rows = rows;
    assert_error_mentions(df_model_forward_values(v, a, &bad, out), DF_EINVAL, "outside");
    df_acts_free(a);
    /* Activations of a value model have no LM-head scratch. */
    assert_int_equal(df_acts_create(&v->cfg, 16, 8, &a), DF_OK);
    assert_error_mentions(df_model_forward(lm, a, &blm, 1.0f, out, NULL), DF_EINVAL,
                          "value model");
    df_acts_free(a);
    /* The rollout samples from an LM head: a value model is refused. */
    df_rollout_engine *e;
    assert_int_equal(df_rollout_engine_create(&lm->cfg, 2, 16, &e), DF_OK);
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    int64_t po[2] = {0, 3};
    df_rollout_request req = {1, po, sb.tokens, 1, 1, NULL, NULL};
    df_rollout_result res;
    assert_error_mentions(df_rollout_generate(e, v, &req, &sp, &res, NULL, NULL), DF_EINVAL,
                          "value model");
    df_rollout_engine_free(e);
    free(gv), free(gl);
    df_model_free(v);
    df_model_free(lm);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, df_test_mkdtemp, df_test_rmtree)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backward_values_fd),
        cmocka_unit_test(test_golden_values),
        cmocka_unit_test(test_to_value_model),
        cmocka_unit_test(test_head_init_std),
        T(test_save_load_roundtrip),
        T(test_convert_and_save_keeps_keys),
        cmocka_unit_test(test_config_labels),
        T(test_checkpoint_missing_bias),
        cmocka_unit_test(test_wrong_head_errors),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
