/*
 * The rollout's precision, token budget and backend seam (rollout.h df_rollout_options):
 *   - training-vs-rollout log-prob agreement for every dtype pair (rollout float32 / bf16 x
 *     training float32 / bf16 mixed precision), teacher-forced on the rollout's own tokens,
 *     within bounds derived from the dtypes (u_bf16 = 2^-8, roundings per layer x depth);
 *   - the bf16 KV cache's attention against the float32 cache's within the bound its two
 *     roundings (K and V) give;
 *   - chunked prefill (max_num_batched_tokens below the prompt lengths) against unchunked;
 *   - the seam: the engine runs every decoder operator through the backend it is given (a
 *     counting wrapper of the CPU's) with the same results, and refuses one without a KV cache.
 * The bf16 parts are skipped on a CPU without native bf16 matmuls (df_model_bf16_available).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>

#include <cmocka.h>

#include "distflow/backend.h"
#include "distflow/model.h"
#include "distflow/rollout.h"
#include "engine/rollout_engine.h"
#include "engine/rollout_internal.h"
#include "model/acts.h"
#include "model/ops.h"
#include "model/safetensors.h"
#include "testbounds.h"
#include "testutil.h"
#include "tolerance.h"

static df_model_config small_config(void)
{
    df_model_config c;
    df_model_config_defaults(&c);
    c.vocab_size = 97;
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.max_position_embeddings = 256;
    c.initializer_range = 0.1;
    c.tie_word_embeddings = false;
    c.attention_bias = true;
    c.n_eos = 0;
    return c;
}

static df_model *small_model(void)
{
    df_model_config c = small_config();
    return df_test_biased_model(&c, 4321);
}

/* Prompts of lengths 3, 9, 1, 14, 6. */
#define NP 5
static const int64_t POFF[NP + 1] = {0, 3, 12, 13, 27, 33};
static int32_t PTOK[33];

static df_rollout_request request(int64_t n_samples)
{
    for (int i = 0; i < 33; i++)
        PTOK[i] = (int32_t)((i * 41 + 7) % 97);
    return (df_rollout_request){NP, POFF, PTOK, n_samples, 11, NULL, NULL};
}

static df_sampling_params sampling(int64_t max_new)
{
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = max_new;
    return sp;
}

static bool have_bf16(void)
{
    if (df_model_bf16_available() == DF_OK)
        return true;
    print_message("no native bf16 matmuls here: %s\n", df_last_error());
    return false;
}

/* Generate with options o (weights synced first); the engine's stats into *st. */
static df_rollout_result generate(const df_model *m, const df_rollout_options *o,
                                  const df_rollout_request *q, const df_sampling_params *sp,
                                  df_rollout_stats *st)
{
    df_rollout_engine *e = NULL;
    if (df_rollout_engine_create_ex(&m->cfg, o, &e))
        fail_msg("engine: %s", df_last_error());
    assert_int_equal(df_rollout_engine_load_weights(e, m), 0);
    df_rollout_result r;
    if (df_rollout_generate(e, m, q, sp, &r, NULL, NULL))
        fail_msg("generate: %s", df_last_error());
    if (st)
        df_rollout_engine_stats(e, st);
    df_rollout_engine_free(e);
    return r;
}

/* ---- training vs rollout, every dtype pair ---------------------------------------------- */

/* ||a - b|| / ||b|| in double. */
static double rel_err(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / (sqrt(den) + 1e-30);
}

/*
 * One pair. float32 x float32: every token within twice its float32 bound (two float
 * computations). With bf16 on a side, the relative error of the log-prob vector within
 * df_tol_gamma_prob of the bf16 roundings on the paths (a bf16 rollout: the weight and the
 * activation of each of the 4 GEMM stages per layer, K and V in the cache: 10 per layer;
 * mixed-precision training: 8 per layer; both: the LM head's weight and hidden row and the
 * embedding row, 3) plus
 * the float32 bound, and above the float32 bound (the roundings are really there).
 */
static void check_pair(const df_model *m, df_rollout_dtype rd, bool train_bf16)
{
    df_rollout_request q = request(2);
    df_sampling_params sp = sampling(12);
    df_rollout_options o = {4, 64, 0, rd, NULL, false, false, false};
    df_rollout_result r = generate(m, &o, &q, &sp, NULL);
    const int64_t n = r.offsets[r.n_seqs], L = m->cfg.num_hidden_layers;
    df_acts *a = NULL;
    df_backend cpu = df_backend_cpu();
    assert_int_equal(df_acts_create_ex(&cpu, &m->cfg, 64, 64, train_bf16 ? DF_ACTS_BF16 : 0, &a), 0);
    assert_int_equal(df_acts_load_weights(a, m), 0);
    float *lp = malloc((size_t)n * sizeof *lp);
    double *err = malloc((size_t)n * sizeof *err), f32 = 0, worst = 0;
    tb_rollout_teacher_forced(m, a, &q, &r, lp, err);
    for (int64_t t = 0; t < n; t++) {
        double d = fabs((double)r.log_probs[t] - lp[t]);
        worst = fmax(worst, d / (2 * err[t]));
        f32 = fmax(f32, 2 * err[t] / (fabs((double)lp[t]) + 1e-30));
    }
    const double rel = rel_err(r.log_probs, lp, n);
    const char *rn = rd == DF_ROLLOUT_BF16 ? "bf16" : "f32", *tn = train_bf16 ? "bf16" : "f32";
    if (rd == DF_ROLLOUT_F32 && !train_bf16) {
        print_message("rollout %s x training %s: worst |diff| / bound %.3f\n", rn, tn, worst);
        assert_true(worst <= 1.0);
    } else {
        double rounds = (rd == DF_ROLLOUT_BF16 ? 10.0 * L + 3 : 0) + (train_bf16 ? 8.0 * L + 3 : 0);
        double bound = df_tol_gamma_prob(rounds, DF_TOL_LAMBDA, DF_U_BF16) + f32;
        print_message("rollout %s x training %s: log-prob rel err %.2e (bound %.2e, float32 %.2e)\n",
                      rn, tn, rel, bound, f32);
        assert_true(rel <= bound);
        assert_true(rel > f32);
    }
    free(lp), free(err);
    df_acts_free(a);
    df_rollout_result_free(&r);
}

static void test_logprobs_every_dtype_pair(void **state)
{
    (void)state;
    df_model *m = small_model();
    check_pair(m, DF_ROLLOUT_F32, false);
    if (have_bf16()) {
        check_pair(m, DF_ROLLOUT_BF16, false);
        check_pair(m, DF_ROLLOUT_F32, true);
        check_pair(m, DF_ROLLOUT_BF16, true);
    }
    df_model_free(m);
}

/*
 * The rollout's LM head is bf16 too, in both samplers (fused statistics and draw; a whole row of
 * logits for top-k): with every layer matmul weight zero and K / V biases and the embedding
 * rows exact in bf16, the decoder computes the same bits in either dtype, so a bf16 rollout's
 * log-probs differ from float32 training's only through the head's two roundings (weight,
 * hidden row) - and must differ by more than the float32 bound (a head silently left float32
 * would not).
 */
static void test_bf16_head(void **state)
{
    (void)state;
    if (!have_bf16())
        skip();
    df_model *m = small_model();
    const df_model_config *c = &m->cfg;
    const int64_t H = c->hidden_size, I = c->intermediate_size;
    const int64_t qd = c->num_attention_heads * c->head_dim, kvd = c->num_key_value_heads * c->head_dim;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        df_layer_view *w = &m->w.layers[l];
        float *zero[7] = {w->wq, w->wk, w->wv, w->wo, w->w_gate, w->w_up, w->w_down};
        const int64_t len[7] = {qd * H, kvd * H, kvd * H, H * qd, I * H, I * H, I * H};
        for (int t = 0; t < 7; t++)
            memset(zero[t], 0, sizeof(float) * (size_t)len[t]);
        for (int64_t i = 0; i < kvd; i++) { /* exact in bf16: the cache adds no rounding */
            w->bk[i] = 0.0625f * (float)((i % 5) - 2);
            w->bv[i] = 0.03125f * (float)((i % 3) - 1);
        }
    }
    /* the embedding rows exact in bf16 too (the bf16 rollout reads them rounded) */
    const int64_t VH = c->vocab_size * H;
    uint16_t *e16 = malloc((size_t)VH * sizeof *e16);
    df_bf16_from_f32(e16, m->w.embed, VH);
    for (int64_t i = 0; i < VH; i++) {
        uint32_t bits = (uint32_t)e16[i] << 16;
        memcpy(&m->w.embed[i], &bits, sizeof bits);
    }
    free(e16);
    df_acts *a = NULL;
    df_backend cpu = df_backend_cpu();
    assert_int_equal(df_acts_create_ex(&cpu, c, 64, 64, 0, &a), 0);
    assert_int_equal(df_acts_load_weights(a, m), 0);
    for (int topk = 0; topk < 2; topk++) {
        df_rollout_request q = request(2);
        df_sampling_params sp = sampling(12);
        sp.top_k = topk ? 50 : 0;
        df_rollout_options o = {4, 64, 0, DF_ROLLOUT_BF16, NULL, false, false, false};
        df_rollout_result r = generate(m, &o, &q, &sp, NULL);
        const int64_t n = r.offsets[r.n_seqs];
        float *lp = malloc((size_t)n * sizeof *lp);
        double *err = malloc((size_t)n * sizeof *err), f32 = 0;
        tb_rollout_teacher_forced(m, a, &q, &r, lp, err);
        for (int64_t t = 0; t < n; t++)
            f32 = fmax(f32, 2 * err[t] / (fabs((double)lp[t]) + 1e-30));
        const double rel = rel_err(r.log_probs, lp, n);
        const double bound = df_tol_gamma_prob(2, DF_TOL_LAMBDA, DF_U_BF16) + f32;
        print_message("bf16 head alone (%s): log-prob rel err %.2e (bound %.2e, float32 %.2e)\n",
                      topk ? "top-k row" : "fused", rel, bound, f32);
        assert_true(rel <= bound);
        assert_true(rel > f32);
        free(lp), free(err);
        df_rollout_result_free(&r);
    }
    df_acts_free(a);
    df_model_free(m);
}

/* A bf16 engine reads the copy its last weight sync made, and refuses a model it never synced. */
static void test_bf16_weight_sync(void **state)
{
    (void)state;
    if (!have_bf16())
        skip();
    df_model *m = small_model(), *m2 = NULL;
    assert_int_equal(df_model_clone(m, &m2), 0);
    df_rollout_request q = request(1);
    df_sampling_params sp = sampling(6);
    sp.greedy = true;
    df_rollout_options o = {4, 64, 0, DF_ROLLOUT_BF16, NULL, false, false, false};
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &e), 0);
    df_rollout_result r;
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "df_rollout_engine_load_weights"));
    assert_int_equal(df_rollout_engine_load_weights(e, m), 0);
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL), 0);
    df_rollout_result_free(&r); /* the failing call below zeroes r */
    /* new weights: the old copy is not theirs until the next sync */
    for (int64_t i = 0; i < m2->n_params; i++)
        m2->params[i] *= 0.5f;
    assert_int_equal(df_rollout_generate(e, m2, &q, &sp, &r, NULL, NULL) == 0 ? 1 : 0, 0);
    assert_int_equal(df_rollout_engine_load_weights(e, m2), 0);
    df_rollout_result r2;
    assert_int_equal(df_rollout_generate(e, m2, &q, &sp, &r2, NULL, NULL), 0);
    /* memory: a bf16 cache is half the float32 one */
    int64_t kv16 = 0, kv32 = 0, tot16 = 0;
    df_rollout_engine_memory(e, &kv16, &tot16);
    df_rollout_engine *e32 = NULL;
    o.dtype = DF_ROLLOUT_F32;
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &e32), 0);
    df_rollout_engine_memory(e32, &kv32, NULL);
    assert_int_equal(kv32, 2 * 3 * 4 * 64 * 32 * 4);
    assert_int_equal(kv16 * 2, kv32);
    o.dtype = DF_ROLLOUT_BF16;
    assert_int_equal(tot16, df_rollout_engine_bytes_ex(&m->cfg, &o));
    df_rollout_engine_free(e32);
    df_rollout_result_free(&r);
    df_rollout_result_free(&r2);
    df_rollout_engine_free(e);
    df_model_free(m);
    df_model_free(m2);
}

/*
 * The packed weights (df_rollout_options.plain_weights false, the default): the engine decodes
 * from the layers packed into oneDNN's blocked layout, repacked after every weight sync. The
 * kernels multiply the same bf16 products; only the order of a dot product's float32 sums may
 * differ (bitwise equal on AVX512-BF16, where oneDNN copies a plain weight into this very
 * layout). A reordered sum moves a logit by <= K u32 sum|x w| ~ 1e-6 at these sizes, so 1e-4
 * on the log-probs leaves room for depth; a stale pack (the first weights after a sync) or a
 * wrong layout moves them by O(1).
 */
static void test_bf16_packed_weights(void **state)
{
    (void)state;
    if (!have_bf16())
        skip();
    df_model *m = small_model(), *m2 = NULL;
    assert_int_equal(df_model_clone(m, &m2), 0);
    for (int64_t i = 0; i < m2->n_params; i++)
        m2->params[i] *= (i % 3) ? 0.5f : -0.75f;
    df_rollout_request q = request(1);
    df_sampling_params sp = sampling(10);
    sp.greedy = true;
    df_rollout_options packed = {4, 64, 0, DF_ROLLOUT_BF16, NULL, false, false, false}, plain = packed;
    plain.plain_weights = true;
    df_rollout_engine *ep = NULL, *eq = NULL;
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &packed, &ep), 0);
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &plain, &eq), 0);
    int64_t tp = 0, tq = 0;
    df_rollout_engine_memory(ep, NULL, &tp);
    df_rollout_engine_memory(eq, NULL, &tq);
    /* the layers and the LM head packed (the head's 512-column sampling tiles slice) */
    const df_model_config *c = &m->cfg;
    const df_vocab_tiling tiling = df_rollout_head_tiling(c);
    const int64_t H = c->hidden_size, I = c->intermediate_size, kvd = 2 * 16;
    const int64_t plain16 = 2 * (c->num_hidden_layers * (2 * H * H + 2 * kvd * H + 3 * I * H) +
                                 c->vocab_size * H);
    const int64_t rows = df_rollout_rows_cap(4, 2048); /* max_num_batched_tokens 0: 2048 */
    assert_true(df_packed16_bytes_for(c, &tiling, rows) >= plain16);
    assert_int_equal(tp - tq, df_packed16_bytes_for(c, &tiling, rows));
    const df_model *ms[2] = {m, m2};
    for (int v = 0; v < 2; v++) { /* the second weights after a sync: packed again */
        df_rollout_result a, b;
        assert_int_equal(df_rollout_engine_load_weights(ep, ms[v]), 0);
        assert_int_equal(df_rollout_engine_load_weights(eq, ms[v]), 0);
        assert_int_equal(df_rollout_generate(ep, ms[v], &q, &sp, &a, NULL, NULL), 0);
        assert_int_equal(df_rollout_generate(eq, ms[v], &q, &sp, &b, NULL, NULL), 0);
        const int64_t n = b.offsets[b.n_seqs];
        assert_int_equal(a.offsets[a.n_seqs], n);
        double worst = 0;
        for (int64_t t = 0; t < n; t++) {
            assert_int_equal(a.tokens[t], b.tokens[t]);
            worst = fmax(worst, fabs((double)a.log_probs[t] - b.log_probs[t]));
        }
        print_message("weights %d: packed vs plain, %lld tokens, max |dlogp| %.2e\n", v,
                      (long long)n, worst);
        assert_true(worst <= 1e-4);
        df_rollout_result_free(&a);
        df_rollout_result_free(&b);
    }
    df_rollout_engine_free(ep);
    df_rollout_engine_free(eq);
    df_model_free(m);
    df_model_free(m2);
}

/* ---- the bf16 KV cache ------------------------------------------------------------------- */

/*
 * df_kv_attention over a bf16 cache vs over the float32 one holding the same K / V. K and V
 * are each rounded once (|d| <= u |x|, u = 2^-8): a score moves by at most
 * delta_j = u scale sum_e |q_e k_je|, so a softmax weight by a factor within e^{+-2 delta}
 * (delta = max_j delta_j), and out_e = sum_j p_j v_je by at most
 * ((e^{2 delta} - 1)(1 + u) + u) sum_j p_j |v_je|, plus both float32 computations' own
 * error (gamma of the len + hd + 8 operations of a row, on the same sum).
 */
static void test_bf16_kv_cache_attention(void **state)
{
    (void)state;
    const int64_t nh = 4, nkv = 2, hd = 40, slots = 3, max_len = 48, n = 4, kvd = nkv * hd;
    df_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.num_hidden_layers = 2, cfg.num_key_value_heads = nkv, cfg.head_dim = hd;
    df_backend_kv k32, k16;
    assert_int_equal(df_kv_cache_init(&k32, &cfg, slots, max_len, DF_KV_F32), 0);
    assert_int_equal(df_kv_cache_init(&k16, &cfg, slots, max_len, DF_KV_BF16), 0);
    /* every position of every slot of layer 1, written through df_kv_write */
    const int64_t rows = slots * max_len;
    float *kk = malloc((size_t)(rows * kvd) * 4), *vv = malloc((size_t)(rows * kvd) * 4);
    int32_t *sl = malloc((size_t)rows * 4), *ps = malloc((size_t)rows * 4);
    for (int64_t r = 0; r < rows; r++) {
        sl[r] = (int32_t)(r / max_len), ps[r] = (int32_t)(r % max_len);
        for (int64_t e = 0; e < kvd; e++) {
            kk[r * kvd + e] = (float)sin(0.37 * (double)(r * kvd + e)) * 1.5f;
            vv[r * kvd + e] = (float)cos(0.23 * (double)(r * kvd + e));
        }
    }
    df_kv_write(&k32, 1, kk, vv, sl, ps, rows);
    df_kv_write(&k16, 1, kk, vv, sl, ps, rows);
    /* the bf16 cache holds each value rounded to nearest even (the safetensors writer's) */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = 0; e < kvd; e++) {
            const uint16_t *kh = df_kv_at(&k16, k16.k, 1, sl[r], ps[r]);
            const uint16_t *vh = df_kv_at(&k16, k16.v, 1, sl[r], ps[r]);
            assert_int_equal(kh[e], df_f32_to_bf16(kk[r * kvd + e]));
            assert_int_equal(vh[e], df_f32_to_bf16(vv[r * kvd + e]));
        }
    const int32_t qs[4] = {2, 0, 1, 1}, qp[4] = {0, 47, 20, 33};
    float q[4 * 160], o32[4 * 160], o16[4 * 160];
    for (int64_t i = 0; i < n * nh * hd; i++)
        q[i] = (float)sin(0.11 * (double)i + 1.0);
    float *sc = malloc((size_t)df_kv_scratch_floats(nh, max_len) * 4);
    df_kv_attention(o32, q, &k32, 1, qs, qp, n, nh, nkv, hd, 0, 0.0f, sc);
    df_kv_attention(o16, q, &k16, 1, qs, qp, n, nh, nkv, hd, 0, 0.0f, sc);
    const double u = DF_U_BF16, scale = 1.0 / sqrt((double)hd);
    double worst = 0;
    bool differ = false;
    for (int64_t r = 0; r < n; r++)
        for (int64_t h = 0; h < nh; h++) {
            const int64_t len = qp[r] + 1, g = h / (nh / nkv);
            const float *qh = q + (r * nh + h) * hd;
            double s[48], mx = -INFINITY, W = 0, delta = 0;
            for (int64_t j = 0; j < len; j++) {
                const float *kj = (const float *)df_kv_at(&k32, k32.k, 1, qs[r], j) + g * hd;
                double d = 0, a = 0;
                for (int64_t e = 0; e < hd; e++)
                    d += (double)qh[e] * kj[e], a += fabs((double)qh[e] * kj[e]);
                s[j] = d * scale, mx = fmax(mx, s[j]), delta = fmax(delta, u * a * scale);
            }
            for (int64_t j = 0; j < len; j++)
                W += exp(s[j] - mx);
            for (int64_t e = 0; e < hd; e++) {
                double A = 0;
                for (int64_t j = 0; j < len; j++)
                    A += exp(s[j] - mx) / W *
                         fabs((double)((const float *)df_kv_at(&k32, k32.v, 1, qs[r], j))[g * hd + e]);
                double bound = ((exp(2 * delta) - 1) * (1 + u) + u) * A +
                               2 * df_tol_gamma((double)(len + hd + 8), DF_U32) * A;
                double d = fabs((double)o16[(r * nh + h) * hd + e] - o32[(r * nh + h) * hd + e]);
                worst = fmax(worst, d / bound);
                differ |= d > 0;
            }
        }
    print_message("bf16 KV cache attention: worst |diff| / bound %.3f\n", worst);
    assert_true(worst <= 1.0);
    assert_true(differ); /* the cache really holds bf16 */
    /* kv_copy moves a slot's prefix in its element type */
    df_kv_copy(&k16, 1, 0, 10);
    assert_memory_equal(df_kv_at(&k16, k16.v, 1, 0, 0), df_kv_at(&k16, k16.v, 1, 1, 0),
                        (size_t)(10 * kvd) * 2);
    free(kk), free(vv), free(sl), free(ps), free(sc);
    df_kv_cache_release(&k32);
    df_kv_cache_release(&k16);
}

/* ---- chunked prefill --------------------------------------------------------------------- */

/* max_num_batched_tokens 4 (prompts of up to 14 tokens prefilled in chunks of 4) against the
 * default budget: the same tokens, log-probs within twice their float32 bound (other batch
 * shapes), more prefill calls over the same prompt tokens. */
static void test_chunked_prefill(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_request q = request(3);
    df_sampling_params sp = sampling(10);
    df_rollout_options whole = {4, 64, 0, DF_ROLLOUT_F32, NULL, false, false, false}, chunked = whole;
    chunked.max_num_batched_tokens = 4;
    df_rollout_stats sw, sc;
    df_rollout_result a = generate(m, &whole, &q, &sp, &sw), b = generate(m, &chunked, &q, &sp, &sc);
    assert_int_equal(a.n_seqs, b.n_seqs);
    assert_memory_equal(a.offsets, b.offsets, (size_t)(a.n_seqs + 1) * 8);
    assert_memory_equal(a.tokens, b.tokens, (size_t)a.offsets[a.n_seqs] * 4);
    df_acts *acts = NULL;
    assert_int_equal(df_acts_create(&m->cfg, 64, 64, &acts), 0);
    const int64_t n = a.offsets[a.n_seqs];
    float *lp = malloc((size_t)n * 4);
    double *err = malloc((size_t)n * 8), worst = 0;
    tb_rollout_teacher_forced(m, acts, &q, &a, lp, err);
    bool same = true;
    for (int64_t t = 0; t < n; t++) {
        worst = fmax(worst, fabs((double)a.log_probs[t] - b.log_probs[t]) / (2 * err[t]));
        same &= a.log_probs[t] == b.log_probs[t];
    }
    print_message("chunked prefill: %lld / %lld prefill calls, worst |diff| / bound %.3f (%s)\n",
                  (long long)sc.prefill_batches, (long long)sw.prefill_batches, worst,
                  same ? "bit-identical" : "not bit-identical");
    assert_true(worst <= 1.0);
    assert_int_equal(sc.prefill_tokens, sw.prefill_tokens);
    /* 5 prompts of 3, 9, 1, 14, 6 tokens: 9 and 14 in chunks of 4 (3 + 4 calls), 3 + 1 together */
    assert_true(sc.prefill_batches > sw.prefill_batches);
    assert_true(sc.prefill_batches >= 3 + 4);
    /* a budget below the slots is refused, as vLLM's */
    df_rollout_engine *e = NULL;
    chunked.max_num_batched_tokens = 3;
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &chunked, &e), DF_EINVAL);
    free(lp), free(err);
    df_acts_free(acts);
    df_rollout_result_free(&a);
    df_rollout_result_free(&b);
    df_model_free(m);
}

/* ---- the seam ---------------------------------------------------------------------------- */

enum { C_EMB, C_GEMM, C_NORM, C_ROPE, C_SWIGLU, C_KVW, C_KVA, C_KVC, C_N };
typedef struct {
    df_backend inner;
    int64_t n[C_N];
} counting;

static int w_emb(void *ctx, float *out, const int32_t *ids, const float *table, int64_t T, int64_t H)
{
    counting *c = ctx;
    c->n[C_EMB]++;
    return c->inner.ops->embedding_fwd(c->inner.ctx, out, ids, table, T, H);
}
static int w_gemm(void *ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, const float *B, float beta, float *C)
{
    counting *c = ctx;
    c->n[C_GEMM]++;
    return c->inner.ops->gemm(c->inner.ctx, ta, tb, M, N, K, alpha, A, B, beta, C);
}
static int w_norm(void *ctx, float *out, float *rstd, const float *x, const float *w, int64_t T,
                  int64_t H, float eps)
{
    counting *c = ctx;
    c->n[C_NORM]++;
    return c->inner.ops->rmsnorm_fwd(c->inner.ctx, out, rstd, x, w, T, H, eps);
}
static int w_rope(void *ctx, float *x, const int32_t *pos, int64_t T, int64_t nh, int64_t hd,
                  int64_t rd, const float *cs, const float *sn, bool inverse)
{
    counting *c = ctx;
    c->n[C_ROPE]++;
    return c->inner.ops->rope_apply(c->inner.ctx, x, pos, T, nh, hd, rd, cs, sn, inverse);
}
static int w_swiglu(void *ctx, float *out, const float *gate, const float *up, int64_t n)
{
    counting *c = ctx;
    c->n[C_SWIGLU]++;
    return c->inner.ops->swiglu_fwd(c->inner.ctx, out, gate, up, n);
}
static int w_kvw(void *ctx, const df_backend_kv *kv, int64_t layer, const float *k, const float *v,
                 const int32_t *slot, const int32_t *pos, int64_t n)
{
    counting *c = ctx;
    c->n[C_KVW]++;
    return c->inner.ops->kv_write(c->inner.ctx, kv, layer, k, v, slot, pos, n);
}
static int w_kva(void *ctx, float *out, const float *q, const df_backend_kv *kv, int64_t layer,
                 const int32_t *slot, const int32_t *pos, int64_t n, int64_t nh, int64_t nkv,
                 int64_t hd, int64_t window, float softcap, float *scratch)
{
    counting *c = ctx;
    c->n[C_KVA]++;
    return c->inner.ops->kv_attention(c->inner.ctx, out, q, kv, layer, slot, pos, n, nh, nkv, hd,
                                      window, softcap, scratch);
}
static int w_kvc(void *ctx, const df_backend_kv *kv, int64_t src, int64_t dst, int64_t len)
{
    counting *c = ctx;
    c->n[C_KVC]++;
    return c->inner.ops->kv_copy(c->inner.ctx, kv, src, dst, len);
}

/* The rollout runs on the backend it is given: every forward's embedding, per layer 7 GEMMs
 * (q, k, v, o, gate, up, down), 2 RoPEs, a K / V write and an attention, the KV copies of
 * each prompt's n samples; and a backend without a KV cache is refused. */
static void test_rollout_goes_through_the_backend(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_request q = request(2);
    df_sampling_params sp = sampling(8);
    df_backend cpu = df_backend_cpu();
    df_backend_ops ops = *cpu.ops; /* the CPU's other entries ignore their context */
    ops.name = "counting";
    ops.embedding_fwd = w_emb, ops.gemm = w_gemm, ops.rmsnorm_fwd = w_norm;
    ops.rope_apply = w_rope, ops.swiglu_fwd = w_swiglu, ops.kv_write = w_kvw;
    ops.kv_attention = w_kva, ops.kv_copy = w_kvc;
    counting cnt = {.inner = cpu};
    df_backend be = {&ops, &cnt};
    df_rollout_options plain = {4, 64, 0, DF_ROLLOUT_F32, NULL, false, false, false}, wrapped = plain;
    wrapped.backend = &be;
    df_rollout_stats st;
    df_rollout_result a = generate(m, &plain, &q, &sp, NULL), b = generate(m, &wrapped, &q, &sp, &st);
    /* the same operators on the same inputs: the same bits */
    assert_memory_equal(a.offsets, b.offsets, (size_t)(a.n_seqs + 1) * 8);
    assert_memory_equal(a.tokens, b.tokens, (size_t)a.offsets[a.n_seqs] * 4);
    assert_memory_equal(a.log_probs, b.log_probs, (size_t)a.offsets[a.n_seqs] * 4);
    const int64_t F = st.prefill_batches + st.decode_steps, L = m->cfg.num_hidden_layers;
    print_message("%lld forwards: %lld GEMMs, %lld K/V writes, %lld attentions, %lld copies\n",
                  (long long)F, (long long)cnt.n[C_GEMM], (long long)cnt.n[C_KVW],
                  (long long)cnt.n[C_KVA], (long long)cnt.n[C_KVC]);
    assert_int_equal(cnt.n[C_EMB], F);
    assert_int_equal(cnt.n[C_GEMM], 7 * L * F);
    assert_int_equal(cnt.n[C_ROPE], 2 * L * F);
    assert_int_equal(cnt.n[C_SWIGLU], L * F);
    assert_int_equal(cnt.n[C_NORM], (2 * L + 1) * F);
    assert_int_equal(cnt.n[C_KVW], L * F);
    assert_int_equal(cnt.n[C_KVA], L * F);
    assert_int_equal(cnt.n[C_KVC], NP); /* each prompt's KV into its second sample's slot */
    /* no KV-cache operators: refused, naming the backend */
    ops.kv_attention = NULL;
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &wrapped, &e), DF_EUNSUPPORTED);
    assert_non_null(strstr(df_last_error(), "counting"));
    df_rollout_result_free(&a);
    df_rollout_result_free(&b);
    df_model_free(m);
}

int main(void)
{
    omp_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logprobs_every_dtype_pair),
        cmocka_unit_test(test_bf16_weight_sync),
        cmocka_unit_test(test_bf16_head),
        cmocka_unit_test(test_bf16_packed_weights),
        cmocka_unit_test(test_bf16_kv_cache_attention),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_rollout_goes_through_the_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
