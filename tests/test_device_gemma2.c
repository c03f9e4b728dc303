/*
 * Gemma 2 (tanh soft-caps on the attention scores and on the final logits) on a backend whose
 * memory is not the host's, checked on any machine through the emulated device of
 * tests/emu_backend.h (the CPU's operators over memory the host cannot touch between calls; like
 * the CPU and CUDA it has attention_softcap). The model is tests/golden/tiny_gemma2 (caps 2 and 3,
 * small enough to bite; the window of 4 on layers 0 and 2; vocabulary 61), whose CPU path
 * tests/test_model_families.c checks against PyTorch. Since the device runs the CPU's operators:
 *
 *   - training's forward and backward through df_acts on the device: log-probs, entropies and
 *     the gradient the CPU's bits, at two temperatures, float32 and (where the CPU has native
 *     bf16) mixed precision through the device's bf16 LM head;
 *   - the rollout on the device (KV cache and attention there, tokens drawn by its `sample`
 *     entry with the final cap): the CPU's tokens, log-probs within emu_head_logp_bound (the LM
 *     head's row blocking and the cap's evaluation); a device without `sample` (logits
 *     downloaded, capped on the host): the CPU's bits;
 *   - an actor's update (the PPO / GRPO loss with KL, clip active) on the device, with its
 *     optimizer there and on the host (a device with `scale` but not the other optimizer
 *     entries): the CPU's weights and metrics to the bit; a rollout
 *     reading the device's master weights after it draws what the CPU's engine draws;
 *   - a device without attention_softcap refuses the model everywhere it could reach one of its
 *     entries (df_model_check_backend, df_acts_create_on, the actor's backend, the rollout
 *     engine), and accepts a model without caps; one without `scale` (a device without the
 *     optimizer's entries) refuses it too, as Gemma's scalings call it.
 *
 * Can it fail? Each comparison runs again with one device entry dropping its cap (the training
 * attention forward or backward, kv_attention, the LM head forward or backward, its bf16 twins,
 * sample): every such device must miss the CPU's result (by more than the bound where there is
 * one), and the forward must move when the model's caps are dropped on both sides (the caps bite
 * on these inputs).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "emu_backend.h"
#include "testutil.h"

#include "distflow/backend.h"
#include "distflow/model.h"
#include "distflow/rollout.h"
#include "engine/actor.h"
#include "engine/rollout_internal.h"
#include "engine/train_core.h"
#include "model/acts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEMMA2_DIR DF_SOURCE_DIR "/tests/golden/tiny_gemma2"

static df_model *gemma2(void)
{
    df_model *m = NULL;
    if (df_model_load(GEMMA2_DIR, &m))
        fail_msg("tiny_gemma2: %s", df_last_error());
    assert_true(m->cfg.attn_logit_softcap == 2.0 && m->cfg.final_logit_softcap == 3.0);
    return m;
}

/* ---- the device's entries with one cap dropped: the mutations each comparison must catch ---- */

static int nocap_attention_fwd(void *ctx, float *out, float *lse, const float *q, const float *k,
                               const float *v, const df_backend_seqs *s, int64_t nh, int64_t nkv, int64_t hd)
{
    df_backend_seqs t = *s;
    t.softcap = 0;
    return emu_attention_fwd(ctx, out, lse, q, k, v, &t, nh, nkv, hd);
}
static int nocap_attention_bwd(void *ctx, float *dq, float *dk, float *dv, const float *dout,
                               const float *out, const float *lse, const float *q, const float *k,
                               const float *v, const df_backend_seqs *s, int64_t nh, int64_t nkv, int64_t hd)
{
    df_backend_seqs t = *s;
    t.softcap = 0;
    return emu_attention_bwd(ctx, dq, dk, dv, dout, out, lse, q, k, v, &t, nh, nkv, hd);
}
static int nocap_kv_attention(void *ctx, float *out, const float *q, const df_backend_kv *kv, int64_t layer,
                              const int32_t *slot, const int32_t *pos, int64_t n, int64_t nh, int64_t nkv,
                              int64_t hd, int64_t window, float softcap, float *scratch)
{
    (void)softcap;
    return emu_kv_attention(ctx, out, q, kv, layer, slot, pos, n, nh, nkv, hd, window, 0.0f, scratch);
}
static int nocap_lmhead_fwd(void *ctx, float *logp, float *entropy, float *sum_pi_sq, float *lse,
                            const float *h, const float *W, const int32_t *target, int64_t n, int64_t V,
                            int64_t H, float temperature, float softcap, float *scratch)
{
    (void)softcap;
    return emu_lmhead_fwd(ctx, logp, entropy, sum_pi_sq, lse, h, W, target, n, V, H, temperature, 0.0f,
                          scratch);
}
static int nocap_lmhead_bwd(void *ctx, float *dh, float *dW, const float *dlogp, const float *dentropy,
                            const float *h, const float *W, const int32_t *target, const float *lse,
                            const float *entropy, int64_t n, int64_t V, int64_t H, float temperature,
                            float softcap, float *scratch)
{
    (void)softcap;
    return emu_lmhead_bwd(ctx, dh, dW, dlogp, dentropy, h, W, target, lse, entropy, n, V, H, temperature,
                          0.0f, scratch);
}
static int nocap_lmhead_fwd_w16(void *ctx, float *logp, float *entropy, float *sum_pi_sq, float *lse,
                                const float *h, const uint16_t *W16, const int32_t *target, int64_t n,
                                int64_t V, int64_t H, float temperature, float softcap, float *scratch)
{
    (void)softcap;
    return emu_lmhead_fwd_w16(ctx, logp, entropy, sum_pi_sq, lse, h, W16, target, n, V, H, temperature,
                              0.0f, scratch);
}
static int nocap_lmhead_bwd_w16(void *ctx, float *dh, float *dW, const float *dlogp, const float *dentropy,
                                const float *h, const uint16_t *W16, const int32_t *target, const float *lse,
                                const float *entropy, int64_t n, int64_t V, int64_t H, float temperature,
                                float softcap, float *scratch)
{
    (void)softcap;
    return emu_lmhead_bwd_w16(ctx, dh, dW, dlogp, dentropy, h, W16, target, lse, entropy, n, V, H,
                              temperature, 0.0f, scratch);
}
static int nocap_sample(void *ctx, int32_t *tok, float *logp, const float *h, const float *W, int64_t n,
                        int64_t V, int64_t H, float temperature, float softcap, int64_t top_k, float top_p,
                        const double *u, float *scratch)
{
    (void)softcap;
    return emu_sample(ctx, tok, logp, h, W, n, V, H, temperature, 0.0f, top_k, top_p, u, scratch);
}

static void mut_attention_fwd(emu_dev *d) { d->ops.attention_fwd = nocap_attention_fwd; }
static void mut_attention_bwd(emu_dev *d) { d->ops.attention_bwd = nocap_attention_bwd; }
static void mut_kv_attention(emu_dev *d) { d->ops.kv_attention = nocap_kv_attention; }
static void mut_lmhead_fwd(emu_dev *d) { d->ops.lmhead_fwd = nocap_lmhead_fwd; }
static void mut_lmhead_bwd(emu_dev *d) { d->ops.lmhead_bwd = nocap_lmhead_bwd; }
static void mut_lmhead_fwd_w16(emu_dev *d) { d->ops.lmhead_fwd_w16 = nocap_lmhead_fwd_w16; }
static void mut_lmhead_bwd_w16(emu_dev *d) { d->ops.lmhead_bwd_w16 = nocap_lmhead_bwd_w16; }
static void mut_sample(emu_dev *d) { d->ops.sample = nocap_sample; }
static void no_sampler(emu_dev *d) { d->ops.sample = NULL; } /* not a mutation: logits come down */

typedef struct {
    const char *name;
    void (*apply)(emu_dev *);
} mutation;

/* ---- training's forward and backward ------------------------------------------------------ */

/* One forward + backward on `be` with `flags` at temperature T: logp, entropy, gradient (host). */
static void fwd_bwd(const df_backend *be, const df_model *m, unsigned flags, const df_seq_batch *b, float T,
                    float *lp, float *en, float *g)
{
    const size_t gb = (size_t)m->n_params * sizeof(float);
    float c[64], d[64];
    for (int64_t j = 0; j < b->n_out; j++)
        c[j] = 0.1f * (float)(j % 5) - 0.2f, d[j] = 0.05f * (float)(j % 3);
    df_acts *a = NULL;
    float *grads = g;
    if (df_acts_create_ex(be, &m->cfg, b->n_tokens, b->n_out, flags, &a))
        fail_msg("acts on %s: %s", be->ops->name, df_last_error());
    assert_int_equal(df_acts_load_weights(a, m), 0);
    if (!be->ops->host_memory) {
        assert_int_equal(be->ops->alloc(be->ctx, gb, (void **)&grads), 0);
        assert_int_equal(be->ops->zero(be->ctx, grads, m->n_params), 0);
    } else {
        memset(g, 0, gb);
    }
    assert_int_equal(df_model_forward(m, a, b, T, lp, en), 0);
    assert_int_equal(df_model_backward(m, a, b, T, c, d, grads), 0);
    if (!be->ops->host_memory) {
        assert_int_equal(be->ops->download(be->ctx, g, grads, gb), 0);
        be->ops->release(be->ctx, grads);
    }
    df_acts_free(a);
}

/* Sequences of 7, 12, 5 and 9 tokens (all but one longer than the window of 4). */
static void batch(df_test_packed *p, const df_model *m)
{
    static const int64_t len[] = {7, 12, 5, 9};
    df_test_pack(p, len, 4, m->cfg.vocab_size, 2024);
}

typedef struct {
    float lp[64], en[64], *g;
} fb_out;

/* Whether the device's forward (logp, entropy) and gradient are the CPU's bits. */
static void same_bits(const fb_out *a, const fb_out *b, int64_t n, size_t gb, bool *fwd, bool *grad)
{
    *fwd = !memcmp(a->lp, b->lp, (size_t)n * 4) && !memcmp(a->en, b->en, (size_t)n * 4);
    *grad = !memcmp(a->g, b->g, gb);
}

/*
 * float32, and DF_ACTS_BF16 where emu_bf16 gives the device the CPU's bf16 entries (the head then
 * runs through lmhead_*_w16, which must take the cap too): the device's results the CPU's bits
 * at temperatures 1 and 0.7; each mutation of the cap's entries that the pass calls misses them.
 */
static void test_training_on_device_is_the_cpus(void **state)
{
    (void)state;
    df_model *m = gemma2();
    df_test_packed p;
    batch(&p, m);
    const int64_t n = p.b.n_out;
    const size_t gb = (size_t)m->n_params * sizeof(float);
    fb_out cpu_r, dev_r, nocap_r;
    cpu_r.g = malloc(gb), dev_r.g = malloc(gb), nocap_r.g = malloc(gb);
    df_backend cpu = df_backend_cpu();
    /* the caps bite: without them (both sides) the forward and the gradient move */
    df_model_config nc = m->cfg;
    nc.attn_logit_softcap = 0, nc.final_logit_softcap = 0;
    df_model *mn = NULL;
    assert_int_equal(df_model_create(&nc, &mn), 0);
    assert_int_equal(mn->n_params, m->n_params);
    memcpy(mn->params, m->params, gb);
    fwd_bwd(&cpu, m, 0, &p.b, 1.0f, cpu_r.lp, cpu_r.en, cpu_r.g);
    fwd_bwd(&cpu, mn, 0, &p.b, 1.0f, nocap_r.lp, nocap_r.en, nocap_r.g);
    double moved = 0;
    for (int64_t j = 0; j < n; j++)
        moved = fmax(moved, fabs((double)cpu_r.lp[j] - nocap_r.lp[j]));
    print_message("tiny_gemma2: dropping both caps moves a log-prob by up to %.3g\n", moved);
    assert_true(moved > 1e-2);
    df_model_free(mn);

    emu_dev dev;
    df_backend be = emu_open(&dev);
    const bool bf16 = emu_bf16(&dev);
    if (!bf16) {
        print_message("no native bf16 here (%s): the float32 passes only\n", df_last_error());
        df_clear_error();
    }
    const unsigned flags[] = {0, DF_ACTS_CHECKPOINT, DF_ACTS_BF16};
    const float temps[] = {1.0f, 0.7f};
    for (int f = 0; f < (bf16 ? 3 : 2); f++)
        for (int k = 0; k < 2; k++) {
            fwd_bwd(&cpu, m, flags[f], &p.b, temps[k], cpu_r.lp, cpu_r.en, cpu_r.g);
            const int64_t calls = dev.calls;
            fwd_bwd(&be, m, flags[f], &p.b, temps[k], dev_r.lp, dev_r.en, dev_r.g);
            assert_true(dev.calls > calls);
            bool fwd, grad;
            same_bits(&cpu_r, &dev_r, n, gb, &fwd, &grad);
            if (!fwd || !grad)
                fail_msg("flags %u, T %g: the device's %s not the CPU's", flags[f], temps[k],
                         fwd ? "gradient is" : "log-probs / entropies are");
        }
    assert_int_equal(emu_buffers(&dev), 0);
    emu_close(&dev);

    /* each entry dropping its cap: the forward's (attention, head) move the log-probs, the
     * backward's the gradient; the bf16 head's only under DF_ACTS_BF16 */
    const struct {
        mutation mu;
        unsigned flags;
        bool moves_fwd;
    } muts[] = {{{"attention_fwd", mut_attention_fwd}, 0, true},
                {{"attention_bwd", mut_attention_bwd}, 0, false},
                {{"lmhead_fwd", mut_lmhead_fwd}, 0, true},
                {{"lmhead_bwd", mut_lmhead_bwd}, 0, false},
                {{"lmhead_fwd_w16", mut_lmhead_fwd_w16}, DF_ACTS_BF16, true},
                {{"lmhead_bwd_w16", mut_lmhead_bwd_w16}, DF_ACTS_BF16, false}};
    for (size_t i = 0; i < sizeof muts / sizeof muts[0]; i++) {
        if ((muts[i].flags & DF_ACTS_BF16) && !bf16)
            continue;
        emu_dev dm;
        df_backend bm = emu_open(&dm);
        if (muts[i].flags & DF_ACTS_BF16)
            assert_true(emu_bf16(&dm));
        muts[i].mu.apply(&dm);
        fwd_bwd(&cpu, m, muts[i].flags, &p.b, 1.0f, cpu_r.lp, cpu_r.en, cpu_r.g);
        fwd_bwd(&bm, m, muts[i].flags, &p.b, 1.0f, dev_r.lp, dev_r.en, dev_r.g);
        bool fwd, grad;
        same_bits(&cpu_r, &dev_r, n, gb, &fwd, &grad);
        print_message("%s without its cap: forward %s, gradient %s\n", muts[i].mu.name,
                      fwd ? "the CPU's" : "moved", grad ? "the CPU's" : "moved");
        assert_false(grad); /* caught */
        assert_true(fwd != muts[i].moves_fwd);
        assert_int_equal(emu_buffers(&dm), 0);
        emu_close(&dm);
    }
    free(cpu_r.g), free(dev_r.g), free(nocap_r.g);
    df_model_free(m);
}

/* ---- the rollout ---------------------------------------------------------------------------- */

/* Prompts of lengths 3, 9, 1, 14, 6 (14 > the 12-row budget: prefilled in chunks), 3 samples
 * each over 4 slots (admission waves, KV copies), 10 new tokens: positions up to 24, well past
 * the window. */
#define NP 5
static const int64_t POFF[NP + 1] = {0, 3, 12, 13, 27, 33};
static int32_t PTOK[33];

/* Top-k sampling at T 0.9: the logits path on both sides (the CPU's fused sampler has no device
 * twin), its cap C tanhf(z / C) on the host's logits or in the device's `sample`. */
static df_sampling_params sampling(void)
{
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = 10;
    sp.temperature = 0.9f;
    sp.top_k = 20;
    return sp;
}

static df_rollout_engine *engine_on(const df_backend *be, const df_model *m)
{
    df_rollout_options o = {4, 64, 12, DF_ROLLOUT_F32, be, false, false, false};
    df_rollout_engine *e = NULL;
    if (df_rollout_engine_create_ex(&m->cfg, &o, &e))
        fail_msg("engine: %s", df_last_error());
    return e;
}

static df_rollout_result run(df_rollout_engine *e, const df_model *m)
{
    for (int i = 0; i < 33; i++)
        PTOK[i] = (int32_t)((i * 41 + 7) % m->cfg.vocab_size);
    df_rollout_request q = {NP, POFF, PTOK, 3, 11, NULL, NULL};
    df_sampling_params sp = sampling();
    df_rollout_result r;
    if (df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL))
        fail_msg("generate: %s", df_last_error());
    return r;
}

/* Whether b drew a's tokens with log-probs within `bound` (the largest difference in *worst,
 * infinity where the tokens differ). */
static bool same_draws(const df_rollout_result *a, const df_rollout_result *b, double bound, double *worst)
{
    *worst = INFINITY;
    if (a->n_seqs != b->n_seqs || memcmp(a->offsets, b->offsets, (size_t)(a->n_seqs + 1) * 8) ||
        memcmp(a->tokens, b->tokens, (size_t)a->offsets[a->n_seqs] * 4))
        return false;
    *worst = 0;
    for (int64_t t = 0; t < a->offsets[a->n_seqs]; t++)
        *worst = fmax(*worst, fabs((double)a->log_probs[t] - b->log_probs[t]));
    return *worst <= bound;
}

static df_rollout_result on_device(const df_model *m, void (*mutate)(emu_dev *), emu_dev *dev)
{
    df_backend be = emu_open(dev);
    if (mutate)
        mutate(dev);
    df_rollout_engine *e = engine_on(&be, m);
    df_rollout_result r = run(e, m);
    df_rollout_engine_free(e);
    assert_int_equal(emu_buffers(dev), 0);
    return r;
}

/*
 * The rollout on the device: the CPU's tokens, its log-probs within emu_head_logp_bound, drawn
 * by the device's `sample` (only tokens and log-probs downloaded) after its KV attention; without
 * `sample` the CPU's bits. A device whose kv_attention or sample drops its cap misses them.
 */
static void test_rollout_on_device_is_the_cpus(void **state)
{
    (void)state;
    df_model *m = gemma2();
    df_rollout_engine *ce = engine_on(NULL, m);
    df_rollout_result a = run(ce, m);
    df_rollout_engine_free(ce);
    const double bound = emu_head_logp_bound(m, sampling().temperature);
    emu_dev dev;
    df_rollout_result b = on_device(m, NULL, &dev);
    double worst;
    const bool same = same_draws(&a, &b, bound, &worst);
    print_message("tiny_gemma2 rollout on the device: %lld tokens, log-probs within %.3g (bound %.3g); "
                  "%lld samples, %lld KV attentions\n", (long long)a.offsets[a.n_seqs], worst, bound,
                  (long long)dev.samples, (long long)dev.kv_attentions);
    assert_true(same);
    assert_true(a.offsets[a.n_seqs] > 2 * NP * 3); /* not stopped at once by EOS */
    assert_true(dev.samples > 0 && dev.kv_attentions > 0);
    assert_int_equal(dev.down_bytes, 8 * b.offsets[b.n_seqs]); /* no logits came back */
    /* a device without a sampler: logits downloaded and capped on the host, the CPU's bits */
    emu_dev dev2;
    df_rollout_result c = on_device(m, no_sampler, &dev2);
    assert_true(same_draws(&a, &c, 0, &worst));
    assert_true(dev2.samples == 0 && dev2.kv_attentions > 0);
    df_rollout_result_free(&c);
    /* either cap dropped on the device: caught */
    const mutation muts[] = {{"kv_attention", mut_kv_attention}, {"sample", mut_sample}};
    for (size_t i = 0; i < sizeof muts / sizeof muts[0]; i++) {
        emu_dev dm;
        df_rollout_result r = on_device(m, muts[i].apply, &dm);
        const bool caught = !same_draws(&a, &r, bound, &worst);
        print_message("%s without its cap: %s (log-probs within %.3g)\n", muts[i].name,
                      caught ? "caught" : "NOT caught", worst);
        assert_true(caught);
        df_rollout_result_free(&r);
    }
    df_rollout_result_free(&a);
    df_rollout_result_free(&b);
    df_model_free(m);
}

/* ---- an actor's update ----------------------------------------------------------------------- */

enum { ROWS = 8 };

static df_actor_params params(void)
{
    df_actor_params p = {.optim.lr = 1e-2, .optim.beta1 = 0.9, .optim.beta2 = 0.99, .optim.adam_eps = 1e-6,
                         .optim.weight_decay = 0.01, .optim.grad_clip = 0.05, .mini_batch_size = 0,
                         .micro_batch_size = 3, .logprob_micro_batch_size = 3, .loss.ppo_epochs = 1,
                         .loss.policy_loss = "vanilla", .loss.loss_agg_mode = "token-mean",
                         .loss.clip_ratio_low = 0.2, .loss.clip_ratio_high = 0.28, .loss.clip_ratio_c = 3.0,
                         .loss.entropy_coeff = 0.01, .use_kl_loss = true, .loss.kl_loss_coef = 0.1,
                         .loss.kl_loss_type = "low_var_kl", .temperature = 0.8f};
    return p;
}

/* A PPO / GRPO batch (ids < 40 < 61): old log-probs near the model's, a reference beside them,
 * group advantages of both signs. */
static df_batch *ppo_batch(const df_model *m)
{
    df_batch *b = df_test_synth_batch(7, ROWS);
    df_actor *a;
    df_actor_params p = params();
    assert_int_equal(df_actor_create(df_test_model_copy(m), &p, false, &a), 0);
    assert_int_equal(df_actor_compute_log_prob(a, b, "old_log_probs", NULL), 0);
    df_actor_free(a);
    df_test_ppo_columns(b);
    return b;
}

static df_actor *actor_on(const df_model *m, const df_backend *be)
{
    df_actor *a;
    df_actor_params p = params();
    assert_int_equal(df_actor_create(df_test_model_copy(m), &p, true, &a), 0);
    if (be && df_actor_set_backend(a, be))
        fail_msg("actor on %s: %s", be->ops->name, df_last_error());
    return a;
}

static df_metrics *update(df_actor *a, const df_batch *b)
{
    df_batch *x = NULL;
    assert_int_equal(df_batch_slice(b, 0, df_batch_size(b), &x), 0);
    df_metrics *mt = df_metrics_new();
    assert_int_equal(df_actor_update_policy(a, x, mt), 0);
    df_batch_free(x);
    return mt;
}

/* One update of a CPU actor and of device actors (the optimizer there, or on the host) with
 * `mutate` applied to both devices; whether both reached the CPU's weights and metrics. */
static bool update_matches(const df_model *m, const df_batch *b, void (*mutate)(emu_dev *), bool verbose)
{
    emu_dev *dev = calloc(1, sizeof *dev), *host = calloc(1, sizeof *host);
    df_backend be = emu_open(dev), be_host = emu_open(host);
    emu_no_optim(host);
    host->ops.scale = emu_scale; /* the model's (Gemma's scalings); without the other five the
                                    optimizer stays on the host */
    if (mutate)
        mutate(dev), mutate(host);
    df_actor *cpu = actor_on(m, NULL), *d = actor_on(m, &be), *h = actor_on(m, &be_host);
    assert_true(df_actor_core(d)->dev_optim && !df_actor_core(h)->dev_optim);
    df_metrics *mc = update(cpu, b), *md = update(d, b), *mh = update(h, b);
    bool same = df_test_same_params(df_actor_model(cpu), df_actor_model(d)) &&
                df_test_same_params(df_actor_model(cpu), df_actor_model(h));
    const char *keys[] = {"actor/grad_norm", "actor/pg_loss", "actor/kl_loss", "actor/entropy_loss",
                          "actor/ppo_kl"};
    for (int i = 0; i < 5; i++) {
        const bool k_same = df_test_same_metric(mc, md, keys[i]) && df_test_same_metric(mc, mh, keys[i]);
        if (verbose && !k_same)
            print_message("%s: %.9g on the CPU, %.9g / %.9g on the device\n", keys[i],
                          df_metrics_get(mc, keys[i], NAN), df_metrics_get(md, keys[i], NAN),
                          df_metrics_get(mh, keys[i], NAN));
        same &= k_same;
    }
    if (verbose) {
        print_message("actor update: grad_norm %.6g (clip 0.05), %lld AdamW steps on the device\n",
                      df_metrics_get(mc, "actor/grad_norm", NAN), (long long)dev->adamw_steps);
        assert_true(df_metrics_get(mc, "actor/grad_norm", 0) > 0.05); /* the clip took part */
        assert_true(dev->adamw_steps > 0 && host->adamw_steps == 0);
    }
    df_metrics_free(mc), df_metrics_free(md), df_metrics_free(mh);
    df_actor_free(cpu), df_actor_free(d), df_actor_free(h);
    assert_int_equal(emu_buffers(dev), 0);
    assert_int_equal(emu_buffers(host), 0);
    free(dev), free(host);
    return same;
}

/*
 * One actor update (vanilla PPO clip with the low_var_kl loss and an entropy bonus: GRPO's actor
 * step) of tiny_gemma2 on the device, its optimizer there or on the host: the CPU's weights and
 * metrics to the bit; a device whose training attention or LM head drops a cap misses them. Then a
 * rollout reading the device actor's master weights draws what the CPU's engine draws from the CPU
 * actor's weights (tokens, log-probs within emu_head_logp_bound).
 */
static void test_actor_update_on_device_is_the_cpus(void **state)
{
    (void)state;
    df_model *m = gemma2();
    df_batch *b = ppo_batch(m);
    assert_true(update_matches(m, b, NULL, true));
    const mutation muts[] = {{"attention_fwd", mut_attention_fwd},
                             {"attention_bwd", mut_attention_bwd},
                             {"lmhead_fwd", mut_lmhead_fwd},
                             {"lmhead_bwd", mut_lmhead_bwd}};
    for (size_t i = 0; i < sizeof muts / sizeof muts[0]; i++) {
        const bool caught = !update_matches(m, b, muts[i].apply, false);
        print_message("actor update, %s without its cap: %s\n", muts[i].name,
                      caught ? "caught" : "NOT caught");
        assert_true(caught);
    }
    /* the colocated rollout after the step, on the device actor's master weights */
    emu_dev *dev = calloc(1, sizeof *dev);
    df_backend be = emu_open(dev);
    df_actor *cpu = actor_on(m, NULL), *d = actor_on(m, &be);
    df_metrics_free(update(cpu, b)), df_metrics_free(update(d, b));
    assert_true(df_test_same_params(df_actor_model(cpu), df_actor_model(d)));
    df_rollout_engine *de = engine_on(&be, df_actor_model(d)), *ce = engine_on(NULL, df_actor_model(cpu));
    assert_int_equal(df_rollout_engine_share_device_weights(de, df_actor_device_weights(d)), 0);
    const int64_t up0 = dev->up_bytes, samples0 = dev->samples;
    df_rollout_result rd = run(de, df_actor_model(d)), rc = run(ce, df_actor_model(cpu));
    assert_true(dev->up_bytes - up0 < m->n_params * (int64_t)sizeof(float)); /* read where they are */
    assert_true(dev->samples > samples0);
    double worst;
    const double bound = emu_head_logp_bound(df_actor_model(cpu), sampling().temperature);
    const bool same = same_draws(&rc, &rd, bound, &worst);
    print_message("rollout after the update on the device's master weights: log-probs within %.3g "
                  "(bound %.3g)\n", worst, bound);
    assert_true(same);
    df_rollout_result_free(&rd), df_rollout_result_free(&rc);
    df_rollout_engine_free(de), df_rollout_engine_free(ce);
    df_actor_free(cpu), df_actor_free(d);
    assert_int_equal(emu_buffers(dev), 0);
    free(dev);
    df_batch_free(b);
    df_model_free(m);
}

/* ---- a device without the capability ------------------------------------------------------- */

/*
 * The emulated device with attention_softcap cleared (CUDA before it had the caps): the model
 * refused by df_model_check_backend, by df_acts_create_on, by an actor given the device and by a
 * rollout engine on it, each naming the device; a model without caps accepted.
 */
static void test_device_without_softcap_refuses(void **state)
{
    (void)state;
    df_model *m = gemma2();
    emu_dev dev;
    df_backend be = emu_open(&dev);
    dev.ops.attention_softcap = false;
    assert_error_mentions(df_model_check_backend(&be, &m->cfg), DF_EUNSUPPORTED, "tanh soft-capping");
    assert_last_error_mentions("emu");
    df_acts *a = NULL;
    assert_error_mentions(df_acts_create_on(&be, &m->cfg, 16, 8, &a), DF_EUNSUPPORTED, "tanh soft-capping");
    assert_null(a);
    df_actor *ac = NULL;
    df_actor_params p = params();
    assert_int_equal(df_actor_create(df_test_model_copy(m), &p, true, &ac), 0);
    assert_error_mentions(df_actor_set_backend(ac, &be), DF_EUNSUPPORTED, "tanh soft-capping");
    df_actor_free(ac);
    df_rollout_options o = {4, 64, 12, DF_ROLLOUT_F32, &be, false, false, false};
    df_rollout_engine *e = NULL;
    assert_error_mentions(df_rollout_engine_create_ex(&m->cfg, &o, &e), DF_EUNSUPPORTED,
                          "tanh soft-capping");
    assert_last_error_mentions("emu");
    assert_null(e);
    /* either cap alone is refused (the final one by the rollout too: its sampler takes it) */
    df_model_config c = m->cfg;
    c.attn_logit_softcap = 0;
    assert_error_mentions(df_model_check_backend(&be, &c), DF_EUNSUPPORTED, "final_logit_softcapping 3");
    assert_error_mentions(df_rollout_engine_create_ex(&c, &o, &e), DF_EUNSUPPORTED,
                          "final_logit_softcapping 3");
    c = m->cfg;
    c.final_logit_softcap = 0;
    assert_error_mentions(df_rollout_engine_create_ex(&c, &o, &e), DF_EUNSUPPORTED,
                          "attn_logit_softcapping 2");
    /* without caps the same device takes the model */
    c.attn_logit_softcap = 0;
    assert_int_equal(df_model_check_backend(&be, &c), DF_OK);
    assert_int_equal(df_rollout_engine_create_ex(&c, &o, &e), DF_OK);
    df_rollout_engine_free(e);
    assert_int_equal(emu_buffers(&dev), 0);
    /* a device without `scale` (nor the optimizer's other entries) cannot scale Gemma's embedding
     * and queries: refused, not a call through NULL */
    emu_dev d2;
    df_backend b2 = emu_open(&d2);
    emu_no_optim(&d2);
    assert_error_mentions(df_model_check_backend(&b2, &m->cfg), DF_EUNSUPPORTED, "`scale` entry");
    o.backend = &b2;
    assert_error_mentions(df_rollout_engine_create_ex(&m->cfg, &o, &e), DF_EUNSUPPORTED, "`scale` entry");
    d2.ops.scale = emu_scale;
    assert_int_equal(df_model_check_backend(&b2, &m->cfg), DF_OK);
    df_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_training_on_device_is_the_cpus),
        cmocka_unit_test(test_rollout_on_device_is_the_cpus),
        cmocka_unit_test(test_actor_update_on_device_is_the_cpus),
        cmocka_unit_test(test_device_without_softcap_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
