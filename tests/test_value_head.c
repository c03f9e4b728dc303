/*
 * The value model (model.h "value model"): the PPO critic's decoder with a
 * scalar score head, HF *ForTokenClassification with one label.
 *   - df_model_backward_values against central finite differences;
 *   - values and gradients against PyTorch (tests/golden/gen_golden.py, float64
 *     reference of Qwen2ForTokenClassification);
 *   - df_model_to_value_model / df_model_init_random heads;
 *   - save -> load round trips and malformed configs / checkpoints;
 *   - misuse (wrong head, wrong backward) is DF_EINVAL.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/model.h"
#include "distflow/rng.h"
#include "model/acts.h"
#include "model/safetensors.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------ */

/* A tiny value model with O(1) activations: weights N(0, 0.3), norms 1 + N(0, 0.1) and
 * biases N(0, 0.1) so every path carries signal. */
static df_model *value_model(uint64_t seed)
{
    df_model_config c;
    df_model_config_defaults(&c);
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
    s->b = (df_seq_batch){12, s->tokens, 2, s->offsets, 7, s->rows, NULL};
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
    assert_int_equal(df_model_backward_values(m, a, b, c, g), DF_OK);

    /* Three entries of every tensor (first, middle, last); for the embedding, entries of a
     * row the batch uses (token 5 sits at row 0). */
    const float eps = 1e-2f;
    double worst = 0;
    int checked = 0;
    for (int t = 0; t < m->n_tensors; t++) {
        const df_param_desc *d = &m->tensors[t];
        int64_t idx[3] = {0, d->numel / 2, d->numel - 1};
        if (t == 0)
            for (int k = 0; k < 3; k++)
                idx[k] = 5 * d->shape[1] + k * 7;
        for (int k = 0; k < 3; k++) {
            float *p = m->params + d->offset + idx[k], keep = *p;
            *p = keep + eps;
            double lp = value_loss(m, a, b, c);
            *p = keep - eps;
            double lm = value_loss(m, a, b, c);
            *p = keep;
            double fd = (lp - lm) / (2.0 * (double)eps), an = g[d->offset + idx[k]];
            double err = fabs(fd - an) / fmax(1.0, fabs(fd));
            if (err > 2e-3)
                fail_msg("%s[%lld]: analytic %.7g, finite difference %.7g", d->name,
                         (long long)idx[k], an, fd);
            worst = fmax(worst, err);
            checked++;
        }
    }
    print_message("value head FD: %d entries, worst error %.2e\n", checked, worst);
    assert_int_equal(checked, 3 * m->n_tensors);
    /* The whole gradient along a random direction u: (L(p + eps u) - L(p - eps u)) / 2 eps = g . u. */
    float *p0 = malloc((size_t)m->n_params * sizeof(float)), *u = malloc((size_t)m->n_params * sizeof(float));
    memcpy(p0, m->params, (size_t)m->n_params * sizeof(float));
    double gu = 0;
    for (int64_t i = 0; i < m->n_params; i++) {
        u[i] = (float)df_rng_normal(&r);
        gu += (double)g[i] * u[i];
    }
    double ls[2];
    for (int s = 0; s < 2; s++) {
        for (int64_t i = 0; i < m->n_params; i++)
            m->params[i] = p0[i] + (s ? -1e-3f : 1e-3f) * u[i];
        ls[s] = value_loss(m, a, b, c);
    }
    memcpy(m->params, p0, (size_t)m->n_params * sizeof(float));
    double fdu = (ls[0] - ls[1]) / 2e-3;
    print_message("directional: g.u %.7g, finite difference %.7g\n", gu, fdu);
    assert_near(fdu, gu, 2e-3 * fabs(gu));
    free(p0), free(u);
    /* The head's gradients in closed form: d bias = sum_j c_j. */
    double csum = 0;
    for (int j = 0; j < 7; j++)
        csum += c[j];
    const df_param_desc *bias = df_model_find_tensor(m, "score.bias");
    assert_non_null(bias);
    assert_near(g[bias->offset], csum, 1e-5);
    /* A token the batch never uses gets no embedding gradient. */
    const int64_t H = m->cfg.hidden_size;
    for (int64_t i = 0; i < H; i++)
        assert_true(g[1 * H + i] == 0.0f);

    /* Backward accumulates: a second pass doubles every gradient. */
    float *g2 = malloc((size_t)m->n_params * sizeof(float));
    memcpy(g2, g, (size_t)m->n_params * sizeof(float));
    value_loss(m, a, b, c);
    assert_int_equal(df_model_backward_values(m, a, b, c, g2), DF_OK);
    for (int64_t i = 0; i < m->n_params; i++)
        assert_near(g2[i], 2.0 * g[i], 1e-5 * fmax(1.0, fabs(g[i])));
    free(g), free(g2);
    df_acts_free(a);
    df_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backward_values_fd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
