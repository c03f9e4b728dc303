/* Rollout with a real pretrained model: Karpathy's stories260K (llama2.c
 * legacy .bin from the shared data), converted to the HF layout, against
 * greedy continuations computed by an independent float64 PyTorch
 * implementation with llama2.c's own conventions
 * (tests/golden/gen_rollout_stories260k.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>
#include <jansson.h>
#include <omp.h>

#include "distflow/model.h"
#include "distflow/rollout.h"
#include "model/acts.h"
#include "testbounds.h"
#include "tolerance.h"

#define BIN_PATH DF_SHARED_DIR "/data/models/stories260K/stories260K.bin"
#define GOLDEN_PATH DF_SOURCE_DIR "/tests/golden/rollout_stories260k.json"

/* Copy n_layers blocks of [rows, cols] from *src into the tensors `name` of m. */
static void take(df_model *m, const float **src, const char *fmt, int64_t n_layers, bool rope,
                 int64_t hd)
{
    char name[96];
    for (int64_t l = 0; l < n_layers; l++) {
        snprintf(name, sizeof name, fmt, (long long)l);
        const df_param_desc *d = df_model_find_tensor(m, name);
        assert_non_null(d);
        float *dst = m->params + d->offset;
        int64_t rows = d->shape[0], cols = d->ndim == 2 ? d->shape[1] : 1;
        for (int64_t r = 0; r < rows; r++) {
            /* llama2.c rotates interleaved pairs (2i, 2i+1); HF rotate_half pairs
             * (i, i + hd/2): HF row h*hd + j*hd/2 + i is llama2.c row h*hd + 2i + j
             * (transformers' convert_llama_weights_to_hf permute). */
            int64_t s = r;
            if (rope) {
                int64_t h = r / hd, k = r % hd, half = hd / 2;
                s = h * hd + (k < half ? 2 * k : 2 * (k - half) + 1);
            }
            memcpy(dst + r * cols, *src + s * cols, (size_t)cols * sizeof(float));
        }
        *src += rows * cols;
    }
}

/* stories260K as a df_model, or NULL when the shared data is absent. */
static df_model *load_stories260k(void)
{
    FILE *f = fopen(BIN_PATH, "rb");
    if (!f)
        return NULL;
    int32_t h[7];
    assert_int_equal(fread(h, sizeof(int32_t), 7, f), 7);
    assert_true(h[0] == 64 && h[1] == 172 && h[2] == 5 && h[3] == 8 && h[4] == 4 &&
                h[5] == 512);
    size_t n = 264128;
    float *w = malloc(n * sizeof(float));
    assert_non_null(w);
    assert_int_equal(fread(w, sizeof(float), n, f), n);
    fclose(f);
    df_model_config c;
    df_model_config_defaults(&c);
    snprintf(c.model_type, sizeof c.model_type, "llama");
    c.vocab_size = 512;
    c.hidden_size = 64;
    c.intermediate_size = 172;
    c.num_hidden_layers = 5;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 4;
    c.head_dim = 8;
    c.max_position_embeddings = 512;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    c.tie_word_embeddings = true;
    c.attention_bias = false;
    df_model *m = NULL;
    assert_int_equal(df_model_create(&c, &m), 0);
    const float *p = w;
    take(m, &p, "model.embed_tokens.weight", 1, false, 8);
    take(m, &p, "model.layers.%lld.input_layernorm.weight", 5, false, 8);
    take(m, &p, "model.layers.%lld.self_attn.q_proj.weight", 5, true, 8);
    take(m, &p, "model.layers.%lld.self_attn.k_proj.weight", 5, true, 8);
    take(m, &p, "model.layers.%lld.self_attn.v_proj.weight", 5, false, 8);
    take(m, &p, "model.layers.%lld.self_attn.o_proj.weight", 5, false, 8);
    take(m, &p, "model.layers.%lld.post_attention_layernorm.weight", 5, false, 8);
    take(m, &p, "model.layers.%lld.mlp.gate_proj.weight", 5, false, 8);
    take(m, &p, "model.layers.%lld.mlp.down_proj.weight", 5, false, 8);
    take(m, &p, "model.layers.%lld.mlp.up_proj.weight", 5, false, 8);
    take(m, &p, "model.norm.weight", 1, false, 8);
    assert_int_equal(p - w, (ptrdiff_t)(n - 2 * 512 * 4)); /* the unused RoPE tables remain */
    free(w);
    return m;
}

typedef struct {
    int n;
    int64_t off[8], goff[8];
    int32_t prompt[64], gen[256];
    double logp[256];
} golden;

static void load_golden(golden *g)
{
    json_error_t err;
    json_t *root = json_load_file(GOLDEN_PATH, 0, &err);
    if (!root)
        fail_msg("%s:%d: %s", GOLDEN_PATH, err.line, err.text);
    json_t *cases = json_object_get(root, "cases");
    g->n = (int)json_array_size(cases);
    assert_true(g->n >= 1 && g->n < 8);
    g->off[0] = g->goff[0] = 0;
    for (int i = 0; i < g->n; i++) {
        json_t *c = json_array_get(cases, (size_t)i);
        json_t *pr = json_object_get(c, "prompt"), *tk = json_object_get(c, "tokens");
        json_t *lp = json_object_get(c, "log_probs");
        g->off[i + 1] = g->off[i] + (int64_t)json_array_size(pr);
        g->goff[i + 1] = g->goff[i] + (int64_t)json_array_size(tk);
        assert_true(g->off[i + 1] <= 64 && g->goff[i + 1] <= 256);
        for (size_t t = 0; t < json_array_size(pr); t++)
            g->prompt[g->off[i] + (int64_t)t] = (int32_t)json_integer_value(json_array_get(pr, t));
        for (size_t t = 0; t < json_array_size(tk); t++) {
            g->gen[g->goff[i] + (int64_t)t] = (int32_t)json_integer_value(json_array_get(tk, t));
            g->logp[g->goff[i] + (int64_t)t] = json_real_value(json_array_get(lp, t));
        }
    }
    json_decref(root);
}

static void test_greedy_matches_reference(void **state)
{
    (void)state;
    df_model *m = load_stories260k();
    if (!m)
        skip();
    golden g;
    load_golden(&g);
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create(&m->cfg, 4, 128, &e), 0);
    const int32_t stops[2] = {1, 2};
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.greedy = true;
    sp.max_new_tokens = 40;
    sp.stop_ids = stops;
    sp.n_stop = 2;
    df_rollout_request q = {g.n, g.off, g.prompt, 2, 0, NULL, NULL};
    df_rollout_result r;
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL), 0);
    double worst = 0.0;
    int64_t L = 1;
    for (int i = 0; i < g.n; i++)
        L = L > g.off[i + 1] - g.off[i] + g.goff[i + 1] - g.goff[i]
                ? L : g.off[i + 1] - g.off[i] + g.goff[i + 1] - g.goff[i];
    /* One float computation against float64 (printed to full double precision): eps S per
       token, S from a teacher-forced forward over the reference tokens. */
    const double eps = tb_logp_eps(&m->cfg, L);
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&m->cfg, 128, 128, &a), 0);
    double bound[256];
    for (int i = 0; i < g.n; i++) {
        int64_t P = g.off[i + 1] - g.off[i], R = g.goff[i + 1] - g.goff[i];
        float lp[128];
        assert_true(P + R <= 128);
        tb_teacher_forced(m, a, g.prompt + g.off[i], P, g.gen + g.goff[i], R, 1.0f, eps, lp,
                          bound + g.goff[i]);
        for (int64_t t = 0; t < R; t++)
            bound[g.goff[i] + t] += df_tol_gamma(1e4, DF_U64) * fabs(lp[t]);
    }
    df_acts_free(a);
    for (int i = 0; i < g.n; i++)
        for (int j = 0; j < 2; j++) {
            int64_t s = 2 * i + j, len = g.goff[i + 1] - g.goff[i];
            assert_int_equal(r.offsets[s + 1] - r.offsets[s], len);
            assert_memory_equal(r.tokens + r.offsets[s], g.gen + g.goff[i],
                                (size_t)len * sizeof(int32_t));
            int32_t last = g.gen[g.goff[i + 1] - 1];
            assert_int_equal(r.finish_reason[s],
                             last == 1 || last == 2 ? DF_FINISH_STOP : DF_FINISH_LENGTH);
            for (int64_t t = 0; t < len; t++) {
                double d = fabs(r.log_probs[r.offsets[s] + t] - g.logp[g.goff[i] + t]);
                assert_true(d <= bound[g.goff[i] + t]);
                worst = fmax(worst, d / bound[g.goff[i] + t]);
            }
        }
    print_message("greedy log-probs against the reference: worst error / bound %.3f\n", worst);
    df_rollout_result_free(&r);
    df_rollout_engine_free(e);
    df_model_free(m);
}

/* Sampled responses of the trained model: log-probs equal the teacher-forced ones. */
static void test_sampled_logprobs_match_forward(void **state)
{
    (void)state;
    df_model *m = load_stories260k();
    if (!m)
        skip();
    golden g;
    load_golden(&g);
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create(&m->cfg, 8, 96, &e), 0);
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.temperature = 0.7f;
    sp.top_p = 0.9f;
    sp.max_new_tokens = 32;
    df_rollout_request q = {g.n, g.off, g.prompt, 3, 17, NULL, NULL};
    df_rollout_result r;
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL), 0);
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&m->cfg, 96, 96, &a), 0);
    /* decode with a KV cache against one prefill: two float computations of each log-prob */
    const double eps = tb_logp_eps(&m->cfg, 96);
    double worst = 0;
    for (int64_t s = 0; s < r.n_seqs; s++) {
        int64_t i = s / 3, P = g.off[i + 1] - g.off[i], R = r.offsets[s + 1] - r.offsets[s];
        float lp[96];
        double err[96];
        tb_teacher_forced(m, a, g.prompt + g.off[i], P, r.tokens + r.offsets[s], R, 0.7f, eps, lp, err);
        for (int64_t t = 0; t < R; t++) {
            double bound = 2 * err[t];
            double d = fabs(r.log_probs[r.offsets[s] + t] - lp[t]);
            assert_true(d <= bound);
            worst = fmax(worst, d / bound);
        }
    }
    print_message("sampled log-probs against the forward: worst error / bound %.3f\n", worst);
    df_acts_free(a);
    df_rollout_result_free(&r);
    df_rollout_engine_free(e);
    df_model_free(m);
}

int main(void)
{
    /* One thread: the thread count is test_rollout's subject, and on a loaded
     * machine the barriers of this tiny model dominate the run time. */
    omp_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_matches_reference),
        cmocka_unit_test(test_sampled_logprobs_match_forward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
