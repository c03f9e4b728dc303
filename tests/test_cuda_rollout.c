/*
 * The rollout engine on the CUDA backend (weights, KV cache, activations, the LM head and the
 * sampler on the GPU: docs/cuda.md), against float32 training on the CPU.
 *
 * A GPU's sums are not the CPU's, so its sampled tokens need not be the CPU rollout's; what
 * must hold is that every log-prob the GPU rollout recorded is the log-prob of the token it
 * drew: the CPU's float32 training forward, teacher-forced on the GPU's own responses,
 * gives each within twice the float32 bound of one such computation (tests/testbounds.h
 * tb_teacher_forced, as test_rollout_dtype's float32 x float32 pair). A wrong KV row, slot,
 * position or window, a stale weight or a mis-gathered output row moves log-probs far
 * outside it. Also: the same request twice gives the same bits (free_cache_engine releasing
 * and re-making the device's cache in between), a new weight version reaches the GPU, and the
 * golden fixtures of the windowed families (Qwen3, Mistral, Gemma 3, Gemma 2 with its
 * soft-capped scores and logits) decode far past their windows.
 *
 * Written on a machine without a GPU: it compiles there and prints a SKIP line (exit 77).
 */
#include "cuda_testutil.h"

#include "distflow/model.h"
#include "distflow/rollout.h"
#include "testbounds.h"
#include "testutil.h"

/* The rollout tests' model at head_dim 64 (the device kernels' common size), GQA 4 / 2. */
static df_model *gqa_model(void)
{
    df_model_config c = df_test_rollout_config(211);
    c.hidden_size = 256;
    c.intermediate_size = 384;
    c.num_hidden_layers = 3;
    c.head_dim = 64;
    c.initializer_range = 0.1;
    return df_test_biased_model(&c, 99);
}

/* Prompts of lengths 3, 9, 1, 20, 6 (20 > the 16-row budget: chunked prefill). */
#define NP 5
static const int64_t POFF[NP + 1] = {0, 3, 12, 13, 33, 39};
static int32_t PTOK[39];

/* The prompts, token ids below m's vocabulary. */
static df_rollout_request request(const df_model *m)
{
    for (int i = 0; i < 39; i++)
        PTOK[i] = (int32_t)((i * 41 + 7) % m->cfg.vocab_size);
    return (df_rollout_request){NP, POFF, PTOK, 3, 5, NULL, NULL};
}

static df_rollout_result generate(df_rollout_engine *e, const df_model *m)
{
    df_rollout_request q = request(m);
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = 24;
    sp.top_k = 40;
    df_rollout_result r;
    DFCT_OK(df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL));
    return r;
}

/* Every recorded log-prob against the CPU's teacher-forced float32 one, within twice its bound. */
static void check_logprobs(const df_model *m, const df_rollout_result *r)
{
    df_rollout_request q = request(m);
    const int64_t n = r->offsets[r->n_seqs];
    df_acts *a = NULL;
    df_backend cpu = df_backend_cpu();
    DFCT_OK(df_acts_create_ex(&cpu, &m->cfg, 64, 64, 0, &a));
    DFCT_OK(df_acts_load_weights(a, m));
    float *lp = malloc((size_t)n * sizeof *lp);
    double *err = malloc((size_t)n * sizeof *err), worst = 0;
    tb_rollout_teacher_forced(m, a, &q, r, lp, err);
    for (int64_t t = 0; t < n; t++)
        worst = fmax(worst, fabs((double)r->log_probs[t] - lp[t]) / (2 * err[t]));
    print_message("%lld tokens: worst |GPU rollout - CPU training| / bound %.3f\n", (long long)n,
                  worst);
    assert_true(worst <= 1.0);
    free(lp), free(err);
    df_acts_free(a);
}

static void test_rollout_on_the_gpu(void **state)
{
    (void)state;
    df_model *m = gqa_model();
    df_backend be = df_backend_cuda(dfct_cu);
    df_rollout_options o = {4, 64, 16, DF_ROLLOUT_F32, &be, true, false, false};
    df_rollout_engine *e = NULL;
    DFCT_OK(df_rollout_engine_create_ex(&m->cfg, &o, &e));
    df_rollout_result a = generate(e, m);
    assert_int_equal(df_rollout_engine_kv_resident(e), 0); /* free_cache_engine: released */
    check_logprobs(m, &a);
    df_rollout_result b = generate(e, m); /* the cache made again: the same bits */
    assert_memory_equal(a.offsets, b.offsets, (size_t)(a.n_seqs + 1) * 8);
    assert_memory_equal(a.tokens, b.tokens, (size_t)a.offsets[a.n_seqs] * 4);
    assert_memory_equal(a.log_probs, b.log_probs, (size_t)a.offsets[a.n_seqs] * 4);
    /* a new weight version: uploaded at the next call, and the log-probs are its */
    for (int64_t i = 0; i < m->n_params; i += 5)
        m->params[i] *= 1.25f;
    df_model_weights_changed(m);
    df_rollout_result c = generate(e, m);
    check_logprobs(m, &c);
    df_rollout_result_free(&a), df_rollout_result_free(&b), df_rollout_result_free(&c);
    df_rollout_engine_free(e);
    df_model_free(m);
}

/* The golden fixtures with sliding windows of 4 positions (Qwen3 from layer 1, Mistral on every
 * layer, Gemma 3's sliding and full layers with their two RoPEs, (1 + w) norms, GeGLU and
 * scaled embedding, Gemma 2's alternating layers with both tanh soft-caps: the decode
 * attention's and the sampler's): prompts of up to 20 tokens and 24 new ones run the KV cache's
 * window far past its edge. */
static void test_rollout_windowed_families(void **state)
{
    (void)state;
    static const char *const names[] = {"tiny_qwen3", "tiny_mistral", "tiny_gemma3", "tiny_gemma2"};
    df_backend be = df_backend_cuda(dfct_cu);
    for (int i = 0; i < 4; i++) {
        char dir[4096];
        dfct_golden_path(dir, sizeof dir, names[i]);
        df_model *m;
        DFCT_OK(df_model_load(dir, &m));
        assert_true(m->cfg.sliding_window == 4);
        print_message("%s:\n", names[i]);
        df_rollout_options o = {4, 64, 16, DF_ROLLOUT_F32, &be, true, false, false};
        df_rollout_engine *e = NULL;
        DFCT_OK(df_rollout_engine_create_ex(&m->cfg, &o, &e));
        df_rollout_result r = generate(e, m);
        check_logprobs(m, &r);
        df_rollout_result_free(&r);
        df_rollout_engine_free(e);
        df_model_free(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rollout_on_the_gpu),
        cmocka_unit_test(test_rollout_windowed_families),
    };
    return dfct_main("test_cuda_rollout", tests, sizeof tests / sizeof tests[0]);
}
