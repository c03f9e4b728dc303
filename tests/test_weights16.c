/*
 * The bf16 weight copy (model.h df_weights16) and the matmul that reads it (ops.h df_mm_w16,
 * backend gemm_w16): the copy holds exactly the bf16 rounding of every matmul weight and
 * follows a refresh; the matmul equals the one that rounds both operands per call (the same
 * oneDNN primitive on the same bf16 operands) bit for bit, and a float64 reference of the
 * rounded operands within gamma_K of float32 (bf16 x bf16 products are exact in float32).
 * Skipped on a CPU without native bf16 kernels (df_model_bf16_available).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "distflow/backend.h"
#include "distflow/common.h"
#include "distflow/model.h"
#include "distflow/rng.h"
#include "model/ops.h"
#include "model/safetensors.h"
#include "tolerance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void skip_without_bf16(void)
{
    if (df_model_bf16_available() == DF_EUNSUPPORTED) {
        print_message("no native bf16 matmuls here: %s\n", df_last_error());
        skip();
    }
}

static float *fvec(int64_t n)
{
    float *p = aligned_alloc(64, ((size_t)n * sizeof(float) + 63) / 64 * 64);
    assert_non_null(p);
    return p;
}

static void fill(float *x, int64_t n, uint64_t seed)
{
    df_rng r;
    df_rng_seed(&r, df_rng_key(seed, 11, 0, 0));
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)df_rng_normal(&r);
}

static df_model_config small_cfg(int tied, int value)
{
    df_model_config c;
    df_model_config_defaults(&c);
    c.vocab_size = 67, c.hidden_size = 24, c.intermediate_size = 40, c.num_hidden_layers = 2;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 6;
    c.tie_word_embeddings = tied;
    c.num_labels = value ? 1 : 0;
    return c;
}

/* Every element of the copy is df_f32_to_bf16 of its float32 weight. */
static void expect_copy(const df_weights16 *w, const df_model *m)
{
    const df_model_config *c = &m->cfg;
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    const int64_t qd = c->num_attention_heads * c->head_dim, kvd = c->num_key_value_heads * c->head_dim;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        const df_layer_view *s = &m->w.layers[l];
        const df_layer16 *d = df_weights16_layer(w, l);
        const struct { const float *f; const uint16_t *h; int64_t n; } t[] = {
            {s->wq, d->wq, qd * H},       {s->wk, d->wk, kvd * H}, {s->wv, d->wv, kvd * H},
            {s->wo, d->wo, H * qd},       {s->w_gate, d->w_gate, I * H},
            {s->w_up, d->w_up, I * H},    {s->w_down, d->w_down, I * H}};
        for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
            for (int64_t i = 0; i < t[k].n; i++)
                assert_int_equal(t[k].h[i], df_f32_to_bf16(t[k].f[i]));
    }
    const uint16_t *head = df_weights16_lm_head(w);
    if (!m->w.lm_head) {
        assert_null(head);
        return;
    }
    for (int64_t i = 0; i < c->vocab_size * H; i++)
        assert_int_equal(head[i], df_f32_to_bf16(m->w.lm_head[i]));
}

static void test_copy_and_refresh(void **state)
{
    (void)state;
    for (int variant = 0; variant < 3; variant++) { /* untied, tied, value model */
        df_model_config c = small_cfg(variant == 1, variant == 2);
        df_model *m = NULL;
        df_weights16 *w = NULL;
        assert_int_equal(df_model_create(&c, &m), DF_OK);
        assert_int_equal(df_model_init_random(m, 5), DF_OK);
        assert_int_equal(df_weights16_create(&c, &w), DF_OK);
        assert_int_equal(df_weights16_version(w), 0);
        /* the seven projections of each layer, padded to 64 bytes, and the head */
        int64_t per_layer = 0, sizes[] = {24 * 24, 12 * 24, 12 * 24, 24 * 24, 40 * 24, 40 * 24, 40 * 24};
        for (int k = 0; k < 7; k++)
            per_layer += (sizes[k] + 31) / 32 * 32;
        int64_t head = variant == 2 ? 0 : (67 * 24 + 31) / 32 * 32;
        assert_int_equal(df_weights16_bytes(w), 2 * (2 * per_layer + head));
        assert_int_equal(df_weights16_refresh(w, &m->w), DF_OK);
        assert_int_equal(df_weights16_version(w), 1);
        expect_copy(w, m);
        /* a changed weight reaches the copy at the next refresh, not before */
        float *wq0 = m->w.layers[1].wq;
        uint16_t before = df_weights16_layer(w, 1)->wq[3];
        wq0[3] = -wq0[3] * 2.0f + 1.0f;
        assert_int_equal(df_weights16_layer(w, 1)->wq[3], before);
        assert_int_equal(df_weights16_refresh(w, &m->w), DF_OK);
        assert_int_equal(df_weights16_version(w), 2);
        expect_copy(w, m);
        df_weights16_free(w);
        df_model_free(m);
    }
}

static void test_refresh_refuses(void **state)
{
    (void)state;
    df_model_config lm = small_cfg(0, 0), value = small_cfg(0, 1);
    df_model *m = NULL;
    df_weights16 *w = NULL;
    assert_int_equal(df_model_create(&value, &m), DF_OK);
    assert_int_equal(df_weights16_create(&lm, &w), DF_OK);
    assert_int_equal(df_weights16_refresh(w, &m->w), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "value model"));
    assert_int_equal(df_weights16_refresh(w, NULL), DF_EINVAL);
    assert_int_equal(df_weights16_version(w), 0);
    df_weights16_free(w);
    df_model_free(m);
    lm.num_key_value_heads = 3; /* does not divide the 4 query heads */
    assert_int_not_equal(df_weights16_create(&lm, &w), DF_OK);
}

/* gemm_w16 through the CPU backend against df_mm_nt / df_mm_nn (both operands rounded per
 * call, the same primitive) and a float64 reference of the rounded operands. */
static void test_gemm_w16(void **state)
{
    (void)state;
    skip_without_bf16();
    const int64_t M = 45, N = 29, K = 41;
    df_mm_ctx *mm = NULL, *small = NULL;
    assert_int_equal(df_mm_ctx_create(M * K, &mm), DF_OK);
    assert_int_equal(df_mm_ctx_create(10 * K, &small), DF_OK); /* A in row blocks of 10 */
    float *A = fvec(M * K), *W = fvec(N * K), *Wt = fvec(K * N), *C0 = fvec(M * N);
    float *C = fvec(M * N), *Cref = fvec(M * N);
    uint16_t *W16 = malloc(sizeof(uint16_t) * N * K), *Wt16 = malloc(sizeof(uint16_t) * N * K);
    uint16_t *A16 = malloc(sizeof(uint16_t) * M * K);
    fill(A, M * K, 1);
    fill(W, N * K, 2);
    fill(C0, M * N, 3);
    for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++)
            Wt[k * N + j] = W[j * K + k];
    df_bf16_from_f32(W16, W, N * K);
    df_bf16_from_f32(Wt16, Wt, N * K);
    df_bf16_from_f32(A16, A, M * K);
    df_backend be = df_backend_cpu_bf16(&mm), bsmall = df_backend_cpu_bf16(&small);
    for (int tb = 0; tb < 2; tb++) {
        const uint16_t *w = tb ? W16 : Wt16;
        /* the same bits as rounding both operands per call */
        memcpy(C, C0, sizeof(float) * M * N);
        memcpy(Cref, C0, sizeof(float) * M * N);
        assert_int_equal(be.ops->gemm_w16(be.ctx, tb, M, N, K, 1.0f, A, w, 1.0f, C), DF_OK);
        if (tb)
            df_mm_nt(mm, M, N, K, 1.0f, A, W, 1.0f, Cref);
        else
            df_mm_nn(mm, M, N, K, 1.0f, A, Wt, 1.0f, Cref);
        assert_memory_equal(C, Cref, sizeof(float) * M * N);
        /* float64 of the rounded operands: K exact products, K adds and the beta add */
        memcpy(C, C0, sizeof(float) * M * N);
        assert_int_equal(bsmall.ops->gemm_w16(bsmall.ctx, tb, M, N, K, 0.5f, A, w, 1.0f, C), DF_OK);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) {
                    double p = (double)df_bf16_to_f32(A16[i * K + k]) * df_bf16_to_f32(W16[j * K + k]);
                    s += p, mag += fabs(p);
                }
                double ref = 0.5 * s + C0[i * N + j];
                double bound = df_tol_gamma((double)K + 2, DF_U32) * (0.5 * mag + fabs(C0[i * N + j])) +
                               df_tol_gamma((double)K + 2, DF_U64) * (mag + fabs(C0[i * N + j]));
                assert_true(fabs(C[i * N + j] - ref) <= bound);
            }
    }
    /* without a context the CPU backend refuses (no float32 weight to fall back to) */
    df_backend none = df_backend_cpu();
    assert_int_equal(none.ops->gemm_w16(none.ctx, true, M, N, K, 1.0f, A, W16, 0.0f, C), DF_EINVAL);
    df_mm_ctx_free(mm);
    df_mm_ctx_free(small);
    free(A), free(W), free(Wt), free(C0), free(C), free(Cref), free(W16), free(Wt16), free(A16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_and_refresh),
        cmocka_unit_test(test_refresh_refuses),
        cmocka_unit_test(test_gemm_w16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
