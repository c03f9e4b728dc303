/*
 * The engine on a backend whose memory is not the host's (issue 18's device path), checked
 * on any machine through the emulated device of tests/emu_backend.h: the CPU's operators over
 * memory the host cannot touch between calls, so every read of device memory by host code
 * crashes and every host pointer handed to an operator aborts.
 *
 *   - the rollout (weights, KV cache, activations on the device, tokens drawn there by its
 *     `sample` entry with one uniform of each slot's stream; the batch uploaded, tokens and
 *     log-probs downloaded): the CPU's tokens, with chunked prefill, KV copies between
 *     samples and admission waves, and its log-probs within the LM head's row-blocking bound
 *     (the same bits where the rows are blocked alike); a device without `sample`: the logits
 *     downloaded and sampled on the host, the CPU's bits;
 *   - its weight sync: a new weight version is uploaded once, at the next call; none without;
 *   - free_cache_engine: the device's KV cache released after the call, made again by the next;
 *   - nothing leaks: every device buffer released with the engine;
 *   - training's forward and backward on the device (df_acts_create_on): the CPU's bits;
 *   - the same in mixed precision (DF_ACTS_BF16, the bf16 copy converted in the device's
 *     memory): the CPU's bf16 bits; without a bf16 head (CUDA's) the head moves, the layers not.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "distflow/backend.h"
#include "distflow/model.h"
#include "distflow/rollout.h"
#include "emu_backend.h"
#include "testbounds.h"
#include "model/weights_dev.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static df_model *small_model(void)
{
    df_model_config c = df_test_rollout_config(97);
    return df_test_biased_model(&c, 4321);
}

/* Prompts of lengths 3, 9, 1, 14, 6: 14 > the 12-row budget below, so one is prefilled in
 * chunks; 5 prompts x 3 samples over 4 slots: admission waves and KV copies. */
#define NP 5
static const int64_t POFF[NP + 1] = {0, 3, 12, 13, 27, 33};
static int32_t PTOK[33];

static df_rollout_request request(void)
{
    for (int i = 0; i < 33; i++)
        PTOK[i] = (int32_t)((i * 41 + 7) % 97);
    return (df_rollout_request){NP, POFF, PTOK, 3, 11, NULL, NULL};
}

/* Top-k sampling: the logits path on both backends (the CPU's fused path has no device twin). */
static df_sampling_params sampling(void)
{
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = 10;
    sp.temperature = 0.9f;
    sp.top_k = 20;
    return sp;
}

static df_rollout_options options(const df_backend *be, bool free_cache)
{
    return (df_rollout_options){4, 64, 12, DF_ROLLOUT_F32, be, free_cache, false, false};
}

static df_rollout_result run(df_rollout_engine *e, const df_model *m)
{
    df_rollout_request q = request();
    df_sampling_params sp = sampling();
    df_rollout_result r;
    if (df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL))
        fail_msg("generate: %s", df_last_error());
    return r;
}

/* An engine on be (NULL: the CPU) for m's shapes. */
static df_rollout_engine *engine_on(const df_backend *be, const df_model *m, bool free_cache)
{
    df_rollout_options o = options(be, free_cache);
    df_rollout_engine *e = NULL;
    if (df_rollout_engine_create_ex(&m->cfg, &o, &e))
        fail_msg("engine: %s", df_last_error());
    return e;
}

static df_rollout_result on_cpu(const df_model *m)
{
    df_rollout_engine *e = engine_on(NULL, m, false);
    df_rollout_result r = run(e, m);
    df_rollout_engine_free(e);
    return r;
}

/* The same tokens; log-probs the same bits, or within head_logp_bound where the rows of a
 * sampled batch were blocked differently (bound > 0). */
static void assert_same(const df_rollout_result *a, const df_rollout_result *b, double bound)
{
    assert_int_equal(a->n_seqs, b->n_seqs);
    assert_memory_equal(a->offsets, b->offsets, (size_t)(a->n_seqs + 1) * 8);
    assert_memory_equal(a->tokens, b->tokens, (size_t)a->offsets[a->n_seqs] * 4);
    double worst = 0;
    for (int64_t t = 0; t < a->offsets[a->n_seqs]; t++)
        worst = fmax(worst, fabs((double)a->log_probs[t] - b->log_probs[t]));
    if (!(worst <= bound))
        fail_msg("log-probs differ by %.3g (bound %.3g)", worst, bound);
}

static void test_rollout_on_device_is_the_cpus(void **state)
{
    (void)state;
    df_model *m = small_model();
    emu_dev dev;
    df_backend be = emu_open(&dev);
    df_rollout_engine *e = engine_on(&be, m, false);
    df_rollout_result a = on_cpu(m), b = run(e, m);
    const double bound = emu_head_logp_bound(m, sampling().temperature);
    print_message("log-prob bound of the head's row blocking %.3g\n", bound);
    assert_same(&a, &b, bound);
    assert_true(dev.samples > 0); /* drawn on the device */
    df_rollout_stats st;
    df_rollout_engine_stats(e, &st);
    print_message("%lld forwards (%lld prefill batches), %lld uploads, %lld downloads (%lld "
                  "bytes), %lld device calls\n", (long long)(st.prefill_batches + st.decode_steps),
                  (long long)st.prefill_batches, (long long)dev.uploads,
                  (long long)dev.downloads, (long long)dev.down_bytes, (long long)dev.calls);
    assert_true(st.prefill_batches > NP / 2); /* waves and chunks, not one batch */
    /* only each drawn token and its log-prob came back, no logits */
    assert_int_equal(dev.down_bytes, 8 * b.offsets[b.n_seqs]);
    df_rollout_engine_free(e);
    assert_int_equal(emu_buffers(&dev), 0);
    /* a device without a sampler: the logits come down and the host samples them, the CPU's
     * own computation to the bit */
    emu_dev dev2;
    df_backend be2 = emu_open(&dev2);
    dev2.ops.sample = NULL;
    e = engine_on(&be2, m, false);
    df_rollout_result c = run(e, m);
    assert_same(&a, &c, 0);
    assert_true(dev2.down_bytes >= st.decode_steps * m->cfg.vocab_size * 4);
    df_rollout_engine_free(e);
    assert_int_equal(emu_buffers(&dev2), 0);
    df_rollout_result_free(&c);
    df_rollout_result_free(&a);
    df_rollout_result_free(&b);
    df_model_free(m);
}

/* A new weight version reaches the device once, at the next call, without load_weights. */
static void test_device_weight_sync(void **state)
{
    (void)state;
    df_model *m = small_model();
    emu_dev dev;
    df_backend be = emu_open(&dev);
    df_rollout_engine *e = engine_on(&be, m, false);
    df_rollout_result r0 = run(e, m);
    const int64_t wbytes = m->n_params * 4, up0 = dev.up_bytes;
    df_rollout_result r1 = run(e, m); /* same version: no weight upload */
    assert_true(dev.up_bytes - up0 < wbytes);
    assert_same(&r0, &r1, 0);
    for (int64_t i = 0; i < m->n_params; i += 7)
        m->params[i] *= 1.5f;
    df_model_weights_changed(m);
    const int64_t up1 = dev.up_bytes;
    df_rollout_result r2 = run(e, m), c2 = on_cpu(m);
    assert_true(dev.up_bytes - up1 >= wbytes && dev.up_bytes - up1 < 2 * wbytes);
    assert_same(&c2, &r2, emu_head_logp_bound(m, sampling().temperature));
    assert_memory_not_equal(r0.tokens, r2.tokens, (size_t)r0.offsets[r0.n_seqs] * 4);
    df_rollout_engine_free(e);
    assert_int_equal(emu_buffers(&dev), 0);
    df_rollout_result_free(&r0), df_rollout_result_free(&r1);
    df_rollout_result_free(&r2), df_rollout_result_free(&c2);
    df_model_free(m);
}

/* free_cache_engine on a device: K and V released after the call (2 buffers fewer), made again
 * by the next one, which samples the same. */
static void test_device_free_cache_engine(void **state)
{
    (void)state;
    df_model *m = small_model();
    emu_dev dev;
    df_backend be = emu_open(&dev);
    df_rollout_engine *e = engine_on(&be, m, true);
    const int held = emu_buffers(&dev);
    df_rollout_result a = run(e, m);
    assert_int_equal(emu_buffers(&dev), held - 2 + 1); /* the weights came, K and V went */
    assert_int_equal(df_rollout_engine_kv_resident(e), 0);
    df_rollout_result b = run(e, m);
    assert_int_equal(emu_buffers(&dev), held - 2 + 1);
    assert_same(&a, &b, 0);
    df_rollout_engine_free(e);
    assert_int_equal(emu_buffers(&dev), 0);
    df_rollout_result_free(&a), df_rollout_result_free(&b);
    df_model_free(m);
}

/* Training's forward and backward through df_acts on the device: the CPU's bits. */
static void test_training_on_device_is_the_cpus(void **state)
{
    (void)state;
    df_model *m = small_model();
    const int64_t off[] = {0, 5, 17, 30}, T = 30;
    int32_t tok[30], tgt[30];
    int64_t rows[30], n = 0;
    for (int64_t t = 0; t < T; t++)
        tok[t] = (int32_t)((t * 29 + 3) % 97);
    for (int s = 0; s < 3; s++)
        for (int64_t t = off[s]; t + 1 < off[s + 1]; t++)
            rows[n] = t, tgt[n++] = tok[t + 1];
    df_seq_batch b = {T, tok, 3, off, n, rows, tgt, NULL, NULL};
    float c[30], d[30], lp[2][30], en[2][30];
    for (int64_t j = 0; j < n; j++)
        c[j] = 0.1f * (float)(j % 5) - 0.2f, d[j] = 0.01f * (float)(j % 3);
    const size_t gb = (size_t)m->n_params * sizeof(float);
    float *g[2] = {calloc(1, gb), calloc(1, gb)};
    emu_dev dev;
    df_backend bes[2] = {df_backend_cpu(), emu_open(&dev)};
    for (int k = 0; k < 2; k++) {
        df_acts *a = NULL;
        float *grads = g[k];
        assert_int_equal(df_acts_create_on(&bes[k], &m->cfg, T, n, &a), 0);
        assert_int_equal(df_acts_load_weights(a, m), 0);
        if (k == 1) {
            assert_int_equal(bes[1].ops->alloc(bes[1].ctx, gb, (void **)&grads), 0);
            assert_int_equal(bes[1].ops->zero(bes[1].ctx, grads, m->n_params), 0);
        }
        assert_int_equal(df_model_forward(m, a, &b, 0.8f, lp[k], en[k]), 0);
        assert_int_equal(df_model_backward(m, a, &b, 0.8f, c, d, grads), 0);
        if (k == 1) {
            assert_int_equal(bes[1].ops->download(bes[1].ctx, g[1], grads, gb), 0);
            bes[1].ops->release(bes[1].ctx, grads);
        }
        df_acts_free(a);
    }
    assert_memory_equal(lp[0], lp[1], (size_t)n * 4);
    assert_memory_equal(en[0], en[1], (size_t)n * 4);
    assert_memory_equal(g[0], g[1], gb);
    assert_int_equal(emu_buffers(&dev), 0);
    free(g[0]), free(g[1]);
    df_model_free(m);
}

/* One forward + backward on `be` with `flags` (logp, entropy and the gradient out; host). */
static void fwd_bwd(const df_backend *be, const df_model *m, unsigned flags, const df_seq_batch *b,
                    float *lp, float *en, float *g)
{
    const size_t gb = (size_t)m->n_params * sizeof(float);
    float c[30], d[30];
    for (int64_t j = 0; j < b->n_out; j++)
        c[j] = 0.1f * (float)(j % 5) - 0.2f, d[j] = 0.01f * (float)(j % 3);
    df_acts *a = NULL;
    float *grads = g;
    assert_int_equal(df_acts_create_ex(be, &m->cfg, b->n_tokens, b->n_out, flags, &a), 0);
    assert_int_equal(df_acts_load_weights(a, m), 0);
    if (!be->ops->host_memory) {
        assert_int_equal(be->ops->alloc(be->ctx, gb, (void **)&grads), 0);
        assert_int_equal(be->ops->zero(be->ctx, grads, m->n_params), 0);
    } else {
        memset(g, 0, gb);
    }
    assert_int_equal(df_model_forward(m, a, b, 0.8f, lp, en), 0);
    assert_int_equal(df_model_backward(m, a, b, 0.8f, c, d, grads), 0);
    if (!be->ops->host_memory) {
        assert_int_equal(be->ops->download(be->ctx, g, grads, gb), 0);
        be->ops->release(be->ctx, grads);
    }
    df_acts_free(a);
}

/* The device's bf16 entries (emu_bf16), or a SKIP line for `test` where the CPU has no native
 * bf16 matmuls. */
static bool bf16_device(emu_dev *dev, const char *test)
{
    if (emu_bf16(dev))
        return true;
    printf("SKIP %s: %s\n", test, df_last_error());
    df_clear_error();
    return false;
}

/*
 * Mixed precision (DF_ACTS_BF16) on the device: the bf16 copy in its memory (converted there
 * from its float32 weights by bf16_from_f32), the layers' matmuls through its gemm_w16 /
 * gemm_bf16, the lookup through embedding_fwd_w16, the head through lmhead_*_w16: the CPU's
 * bf16 bits, kept and checkpointed; without the bf16 head (CUDA's table) the head runs float32
 * on the device and the result moves (but stays bf16 elsewhere). Skipped without native bf16.
 */
static void test_bf16_training_on_device_is_the_cpus(void **state)
{
    (void)state;
    emu_dev dev;
    df_backend be = emu_open(&dev);
    if (!bf16_device(&dev, "test_bf16_training_on_device_is_the_cpus"))
        return;
    df_model *m = small_model();
    const int64_t off[] = {0, 5, 17, 30}, T = 30;
    int32_t tok[30], tgt[30];
    int64_t rows[30], n = 0;
    for (int64_t t = 0; t < T; t++)
        tok[t] = (int32_t)((t * 29 + 3) % 97);
    for (int s = 0; s < 3; s++)
        for (int64_t t = off[s]; t + 1 < off[s + 1]; t++)
            rows[n] = t, tgt[n++] = tok[t + 1];
    df_seq_batch b = {T, tok, 3, off, n, rows, tgt, NULL, NULL};
    const size_t gb = (size_t)m->n_params * sizeof(float);
    float *g[3] = {malloc(gb), malloc(gb), malloc(gb)};
    float lp[3][30], en[3][30];
    df_backend cpu = df_backend_cpu();
    fwd_bwd(&cpu, m, 0, &b, lp[2], en[2], g[2]); /* float32, to see bf16 differ */
    const unsigned fl[] = {DF_ACTS_BF16, DF_ACTS_BF16 | DF_ACTS_CHECKPOINT};
    for (int f = 0; f < 2; f++) {
        fwd_bwd(&cpu, m, fl[f], &b, lp[0], en[0], g[0]);
        const int64_t w16 = dev.w16_calls, conv = dev.conversions;
        fwd_bwd(&be, m, fl[f], &b, lp[1], en[1], g[1]);
        assert_true(dev.w16_calls > w16 && dev.conversions > conv);
        assert_memory_equal(lp[0], lp[1], (size_t)n * 4);
        assert_memory_equal(en[0], en[1], (size_t)n * 4);
        assert_memory_equal(g[0], g[1], gb);
        assert_true(memcmp(lp[1], lp[2], (size_t)n * 4) != 0); /* not float32 */
        assert_true(memcmp(g[1], g[2], gb) != 0);
    }
    /* the copy converted on the device is the host's copy, bit for bit */
    df_weights16 *hw = NULL, *dw = NULL;
    df_weights_dev wd = {0};
    assert_int_equal(df_weights16_create_ex(&m->cfg, DF_W16_LM_HEAD | DF_W16_EMBED, &hw), 0);
    assert_int_equal(df_weights16_create_on(&be, &m->cfg, DF_W16_LM_HEAD | DF_W16_EMBED, &dw), 0);
    assert_int_equal(df_weights16_refresh_model(hw, m), 0);
    assert_int_equal(df_weights_dev_sync(&wd, &be, m, true), 0);
    const int64_t up = dev.up_bytes;
    assert_int_equal(df_weights16_refresh_dev(dw, m, &wd.view), 0);
    assert_int_equal(dev.up_bytes, up); /* converted there: nothing uploaded */
    assert_true(df_weights16_is_current(dw, m) && df_weights16_on_device(dw));
    int64_t ne = 0, nd = 0;
    const uint16_t *hb = df_weights16_blob(hw, &ne), *db = df_weights16_blob(dw, &nd);
    assert_int_equal(ne, nd);
    uint16_t *back = malloc((size_t)nd * 2);
    assert_int_equal(be.ops->download(be.ctx, back, db, (size_t)nd * 2), 0);
    assert_memory_equal(hb, back, (size_t)nd * 2);
    free(back);
    df_weights16_free(hw);
    df_weights16_free(dw);
    df_weights_dev_free(&wd);
    /* a device without a bf16 head: the head then reads the device's float32 weights */
    emu_no_head16(&dev);
    fwd_bwd(&be, m, DF_ACTS_BF16, &b, lp[1], en[1], g[1]);
    assert_true(memcmp(lp[0], lp[1], (size_t)n * 4) != 0); /* the head moved ... */
    assert_true(memcmp(lp[1], lp[2], (size_t)n * 4) != 0); /* ... and the layers are still bf16 */
    for (int64_t j = 0; j < n; j++) /* a bf16 head's rounding of h and W: small */
        assert_true(fabs(lp[1][j] - lp[0][j]) < 0.05 * (1.0 + fabs(lp[0][j])));
    /* a weight change without df_acts_load_weights is refused, never read stale */
    df_acts *a = NULL;
    assert_int_equal(df_acts_create_ex(&be, &m->cfg, T, n, DF_ACTS_BF16, &a), 0);
    assert_int_equal(df_acts_load_weights(a, m), 0);
    df_model_weights_changed(m);
    assert_int_equal(df_model_forward(m, a, &b, 0.8f, lp[1], NULL), DF_EINVAL);
    df_acts_free(a);
    assert_int_equal(emu_buffers(&dev), 0);
    emu_close(&dev);
    free(g[0]), free(g[1]), free(g[2]);
    df_model_free(m);
}

/*
 * rollout.dtype=bfloat16 on a device with bf16 matmuls: the engine's own bf16 copy converted
 * there from its float32 weights (no upload of it), the layers' matmuls through the device's
 * gemm_w16, a bf16 KV cache, the LM head float32 (the sampler's). Its log-probs against CPU
 * float32 training teacher-forced on its own responses: within df_tol_gamma_prob of the bf16
 * roundings on the path (the weight and the activation of each of the 4 GEMM stages per layer,
 * K and V in the cache: 10 per layer; the embedding row: 1) plus the float32 bound, and above
 * the float32 bound (bf16 really ran), as test_rollout_dtype's pairs.
 */
static void test_bf16_rollout_on_device(void **state)
{
    (void)state;
    emu_dev dev;
    df_backend be = emu_open(&dev);
    if (!bf16_device(&dev, "test_bf16_rollout_on_device"))
        return;
    df_model *m = small_model();
    df_rollout_options o = {4, 64, 12, DF_ROLLOUT_BF16, &be, false, false, false};
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &e), 0);
    df_rollout_result r = run(e, m);
    const int64_t n = r.offsets[r.n_seqs], L = m->cfg.num_hidden_layers;
    assert_true(dev.w16_calls >= 7 * L && dev.conversions > 0);
    df_acts *a = NULL;
    df_backend cpu = df_backend_cpu();
    assert_int_equal(df_acts_create_ex(&cpu, &m->cfg, 64, 64, 0, &a), 0);
    assert_int_equal(df_acts_load_weights(a, m), 0);
    float *lp = malloc((size_t)n * sizeof *lp);
    double *err = malloc((size_t)n * sizeof *err), f32 = 0, num = 0, den = 0;
    tb_rollout_teacher_forced(m, a, &(df_rollout_request){NP, POFF, PTOK, 3, 11, NULL, NULL}, &r,
                              lp, err);
    for (int64_t t = 0; t < n; t++) {
        f32 = fmax(f32, 2 * err[t] / (fabs((double)lp[t]) + 1e-30));
        num += ((double)r.log_probs[t] - lp[t]) * ((double)r.log_probs[t] - lp[t]);
        den += (double)lp[t] * lp[t];
    }
    const double rel = sqrt(num) / sqrt(den);
    const double bound = df_tol_gamma_prob(10.0 * L + 1, DF_TOL_LAMBDA, DF_U_BF16) + f32;
    print_message("bf16 rollout on the device: log-prob rel err %.2e (bound %.2e, float32 %.2e), "
                  "%lld bf16 GEMMs, %lld conversions\n", rel, bound, f32, (long long)dev.w16_calls,
                  (long long)dev.conversions);
    assert_true(rel <= bound);
    assert_true(rel > f32);
    free(lp), free(err);
    df_acts_free(a);
    df_rollout_result_free(&r);
    df_rollout_engine_free(e);
    assert_int_equal(emu_buffers(&dev), 0);
    emu_close(&dev);
    df_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rollout_on_device_is_the_cpus),
        cmocka_unit_test(test_device_weight_sync),
        cmocka_unit_test(test_device_free_cache_engine),
        cmocka_unit_test(test_training_on_device_is_the_cpus),
        cmocka_unit_test(test_bf16_training_on_device_is_the_cpus),
        cmocka_unit_test(test_bf16_rollout_on_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
