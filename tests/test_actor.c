/*
 * Packing batch rows into model input, micro-batch planning, and the actor:
 * log-probs equal the model's, micro-batching does not change the PPO update
 * (token-mean over the mini-batch), SFT steps lower the loss.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "engine/actor.h"
#include "engine/packing.h"
#include "engine/train_core.h"
#include "testbounds.h"
#include "tolerance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


static void test_pack(void **state)
{
    (void)state;
    df_batch *b = df_test_small_batch();
    df_packed pk = {0};
    assert_int_equal(df_pack_responses(&pk, b, 1, 4), 0);
    /* sample 1: [4 | 13 14 15], sample 2: [5 6 | ], sample 3: [7 8 9 10 | 16] */
    const int32_t tokens[] = {4, 13, 14, 15, 5, 6, 7, 8, 9, 10, 16};
    const int64_t offs[] = {0, 4, 6, 11}, rows[] = {0, 1, 2, 9};
    const int32_t targets[] = {13, 14, 15, 16};
    assert_int_equal(pk.sb.n_tokens, 11);
    assert_int_equal(pk.sb.n_seqs, 3);
    assert_int_equal(pk.sb.n_out, 4);
    assert_memory_equal(pk.sb.tokens, tokens, sizeof tokens);
    assert_memory_equal(pk.sb.seq_offsets, offs, sizeof offs);
    assert_memory_equal(pk.sb.out_rows, rows, sizeof rows);
    assert_memory_equal(pk.sb.out_targets, targets, sizeof targets);
    df_packed_free(&pk);
    df_batch_free(b);
}

static void test_plan(void **state)
{
    (void)state;
    df_batch *b = df_test_small_batch(); /* sample sizes in tokens: 5, 4, 2, 5 */
    int64_t *bd, n;
    assert_int_equal(df_plan_micro_batches(b, 3, 0, &bd, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(bd[1], 3);
    assert_int_equal(bd[2], 4);
    free(bd);
    assert_int_equal(df_plan_micro_batches(b, 0, 9, &bd, &n), 0); /* 5+4 | 2+5 */
    assert_int_equal(n, 2);
    assert_int_equal(bd[1], 2);
    free(bd);
    /* 11 fits 5+4+2 | 5, but two micro-batches balance as 5+4 | 2+5: the largest is 9 */
    assert_int_equal(df_plan_micro_batches(b, 0, 11, &bd, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(bd[1], 2);
    int64_t mt, mo;
    df_plan_extent(b, bd, n, &mt, &mo);
    assert_int_equal(mt, 9);
    free(bd);
    assert_int_equal(df_plan_micro_batches(b, 0, 3, &bd, &n), 0); /* every sample alone */
    assert_int_equal(n, 4);
    df_plan_extent(b, bd, n, &mt, &mo);
    assert_int_equal(mt, 5);
    assert_int_equal(mo, 3);
    free(bd);
    df_batch_free(b);
}

/* Error bounds: tests/testbounds.h. tb_forward_err bounds one float log-prob or entropy of the
   model (eps (2 Z + log V)); the entropy moves by at most 2 Z times a logit change. */

/* The longest sample of df_test_small_batch (prompt + response): attention's key count. */
#define MAX_LEN 5

static df_actor_params params(int64_t micro)
{
    df_actor_params p = {.optim.lr = 1e-2, .optim.beta1 = 0.9, .optim.beta2 = 0.999, .optim.adam_eps = 1e-8,
                         .optim.grad_clip = 1e9, .mini_batch_size = 0, .micro_batch_size = micro,
                         .logprob_micro_batch_size = micro, .loss.ppo_epochs = 1,
                         .loss.policy_loss = "vanilla", .loss.loss_agg_mode = "token-mean",
                         .loss.clip_ratio_low = 0.2, .loss.clip_ratio_high = 0.2, .loss.clip_ratio_c = 3.0,
                         .loss.entropy_coeff = 0.01, .use_kl_loss = true, .loss.kl_loss_coef = 0.1,
                         .loss.kl_loss_type = "low_var_kl", .temperature = 0.8f};
    return p;
}

/* Batch with the PPO columns: old / ref log-probs near the model's, varied advantages. */
static df_batch *ppo_batch(df_actor *a)
{
    df_batch *b = df_test_small_batch();
    assert_int_equal(df_actor_compute_log_prob(a, b, "old_log_probs", NULL), 0);
    float *ref, *adv;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "ref_log_prob", "response_ids", &ref), 0);
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "advantages", "response_ids", &adv), 0);
    const float *old = df_batch_column(b, "old_log_probs")->data;
    for (int j = 0; j < 6; j++) {
        ref[j] = old[j] + 0.05f * (float)(j - 2);
        adv[j] = (float)(j % 3) - 0.8f;
    }
    return b;
}

static void test_log_prob_matches_model(void **state)
{
    (void)state;
    df_actor *a;
    df_actor_params p = params(2);
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, false, &a), 0);
    df_batch *b = df_test_small_batch();
    double ent;
    assert_int_equal(df_actor_compute_log_prob(a, b, "lp", &ent), 0);
    /* the same numbers straight from the model on the whole batch at once */
    df_packed pk = {0};
    assert_int_equal(df_pack_responses(&pk, b, 0, 4), 0);
    df_acts *acts;
    assert_int_equal(df_acts_create(&df_actor_model(a)->cfg, pk.sb.n_tokens, pk.sb.n_out, &acts), 0);
    float lp[6], e[6];
    assert_int_equal(df_model_forward(df_actor_model(a), acts, &pk.sb, 0.8f, lp, e), 0);
    const float *got = df_batch_column(b, "lp")->data;
    /* two float computations (micro-batches of 2, the whole batch), each within tb_forward_err */
    const double bound = tb_forward_bound(df_actor_model(a), MAX_LEN, 0.8f);
    double emean = 0;
    for (int j = 0; j < 6; j++) {
        assert_true(fabsf(got[j] - lp[j]) <= bound);
        assert_true(lp[j] < 0);
        emean += e[j] / 6;
    }
    /* the mean of six: each entropy within the bound, the double sums' rounding */
    assert_true(fabs(ent - emean) <= bound + df_tol_gamma(8, DF_U64) * log(40.0));
    /* sums of p^2 (micro-batches of 2, each written at its rows) against the whole batch's: a logit is
       within a quarter of the bound in each pass, and |d log S / d z_v| sums to <= 4, so S moves by
       <= 2 bound relative (first order), plus the head's own sums (gamma_V twice, s0 squared) */
    assert_int_equal(df_actor_compute_log_prob_sq(a, b, "lp2", "sq", NULL), 0);
    float sq[6];
    const df_head_out out = {.logp = lp, .sum_pi_sq = sq};
    assert_int_equal(df_model_forward_head(df_actor_model(a), acts, &pk.sb, 0.8f, &out), 0);
    const float *gsq = df_batch_column(b, "sq")->data;
    const double V = (double)df_actor_model(a)->cfg.vocab_size, rel = 2 * bound + 6 * df_tol_gamma(V, DF_U32);
    for (int j = 0; j < 6; j++) {
        assert_true(sq[j] > 0 && sq[j] <= 1);
        assert_true(fabsf(gsq[j] - sq[j]) <= rel * sq[j]);
    }
    assert_memory_equal(df_batch_column(b, "lp2")->data, got, sizeof lp); /* the same pass for the log-probs */
    df_acts_free(acts);
    df_packed_free(&pk);
    df_batch_free(b);
    df_actor_free(a);
}

/* The actor's training core: df_actor begins with it (engine/actor.c), which the model
   pointer confirms; its gradient blob still holds the last step's (unclipped here) gradient. */
static const df_train_core *core_of(df_actor *a)
{
    const df_train_core *c = (const df_train_core *)(const void *)a;
    assert_ptr_equal(c->model, df_actor_model(a));
    return c;
}

typedef struct {
    float *params, *grads;
    double pg_loss;
    int64_t acts_bytes; /* the core's activations */
} update_out;

/* One PPO update with micro-batches of `micro` samples, activations checkpointed or not: the
   new parameters, the gradient the optimizer took, pg_loss. */
static update_out update_ckpt(int64_t micro, bool ckpt)
{
    df_actor *a;
    df_actor_params p = params(micro);
    p.gradient_checkpointing = ckpt;
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, true, &a), 0);
    df_batch *b = ppo_batch(a);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_actor_update_policy(a, b, m), 0);
    update_out o = {0};
    o.pg_loss = df_metrics_get(m, "actor/pg_loss", NAN);
    assert_true(df_metrics_get(m, "actor/grad_norm", 0) > 0);
    assert_true(df_metrics_has(m, "actor/kl_loss"));
    df_model *mod = df_actor_model(a);
    o.params = malloc((size_t)mod->n_params * sizeof(float));
    o.grads = malloc((size_t)mod->n_params * sizeof(float));
    memcpy(o.params, mod->params, (size_t)mod->n_params * sizeof(float));
    memcpy(o.grads, core_of(a)->grads, (size_t)mod->n_params * sizeof(float));
    o.acts_bytes = df_acts_size(core_of(a)->acts);
    df_metrics_free(m);
    df_batch_free(b);
    df_actor_free(a);
    return o;
}

static update_out update_with(int64_t micro) { return update_ckpt(micro, false); }

/* actor.gradient_checkpointing (model.enable_gradient_checkpointing) reaches the activations:
   they shrink, and the update is the same to the bit (the backward recomputes each layer with
   the forward's kernels). */
static void test_checkpointing_same_update(void **state)
{
    (void)state;
    update_out plain = update_ckpt(2, false), ck = update_ckpt(2, true);
    df_model *ref = df_test_micro_model(3);
    const size_t bytes = (size_t)ref->n_params * sizeof(float);
    assert_memory_equal(plain.grads, ck.grads, bytes);
    assert_memory_equal(plain.params, ck.params, bytes);
    assert_true(memcmp(&plain.pg_loss, &ck.pg_loss, sizeof(double)) == 0);
    assert_true(ck.acts_bytes < plain.acts_bytes);
    print_message("actor activations: %lld bytes, %lld checkpointed\n", (long long)plain.acts_bytes,
                  (long long)ck.acts_bytes);
    df_model_free(ref);
    free(plain.params), free(plain.grads), free(ck.params), free(ck.grads);
}

/*
 * Micro-batches of 1 and 4 samples take the same step. Compared where the error
 * analysis bounds it: the gradient (token-mean PPO + KL + entropy over the mini-batch),
 * tensor by tensor, two float computations each within eps_g of the exact one
 * relative to the tensor's norm; the parameters only through AdamW's step, which is
 * scale-invariant (lr g / (|g| + eps) at step 1): an entry whose gradient is near
 * rounding noise can move by up to 2 lr between the runs, so each entry is held to the
 * step's difference at its two gradients (computed here in double) plus both steps'
 * rounding, and the gradient check above bounds those gradients.
 */
static void test_micro_batching_invariant(void **state)
{
    (void)state;
    update_out o1 = update_with(1), o4 = update_with(4);
    df_model *ref = df_test_micro_model(3);
    const df_model_config *c = &ref->cfg;
    /* the forward, the LM head's backward and the decoder's over 16 tokens (tb_grad_chain), plus
       each token's loss (ratio, clip, KL, entropy: 30 more operations) and the mean over 6 tokens */
    const double n = tb_grad_chain(c, MAX_LEN, 16) + 30 + 6;
    const double eps_g = df_tol_gamma_prob(n, DF_TOL_LAMBDA, DF_U32);
    double worst_g = 0;
    for (int t = 0; t < ref->n_tensors; t++) {
        const df_param_desc *d = &ref->tensors[t];
        double e = df_test_dist2(o1.grads + d->offset, 1.0, o4.grads + d->offset, d->numel);
        double bound = 2 * eps_g *
                       fmax(df_test_norm2(o1.grads + d->offset, d->numel),
                            df_test_norm2(o4.grads + d->offset, d->numel));
        if (!(e <= bound))
            fail_msg("%s: gradients of 1- and 4-sample micro-batches differ by %.3g, bound %.3g", d->name, e,
                     bound);
        worst_g = fmax(worst_g, bound > 0 ? e / bound : 0);
    }
    /* The steps: lr m / (sqrt(v) / bc2 + eps) at step 1 is lr phi(g), phi(g) = g / (|g| + eps),
       so p1 - p4 = -lr (phi(g1) - phi(g4)) (computed here in double: up to 2 lr where g is
       near eps) up to each step's rounding: eleven float operations on the update
       (gamma_12 lr |phi|) and the rounded new value (u |p|); no weight decay. */
    const double lr = 1e-2, aeps = 1e-8;
    double moved = 0, worst_p = 0;
    for (int64_t i = 0; i < ref->n_params; i++) {
        double g1 = o1.grads[i], g4 = o4.grads[i];
        double f1 = g1 / (fabs(g1) + aeps), f4 = g4 / (fabs(g4) + aeps);
        double bound = lr * df_tol_gamma(12, DF_U32) * (fabs(f1) + fabs(f4)) +
                       DF_U32 * (fabs(o1.params[i]) + fabs(o4.params[i]));
        double diff = fabs((double)o1.params[i] - o4.params[i] + lr * (f1 - f4));
        if (!(diff <= bound))
            fail_msg("parameter %lld: steps differ by %.3g from AdamW's at their gradients, bound %.3g",
                     (long long)i, diff, bound);
        worst_p = fmax(worst_p, bound > 0 ? diff / bound : 0);
        moved = fmax(moved, fabs((double)o1.params[i] - ref->params[i]));
    }
    print_message("micro-batching: gradient error / bound %.3f, parameter %.3f\n", worst_g, worst_p);
    /* the update did something: a first AdamW step moves an entry with |g| >> eps by ~lr */
    assert_true(moved > 0.1 * lr);
    /* pg_loss: token-weighted means of -A ratio (ratio = exp(logp - old_log_prob), clip
       inactive near 1); each ratio within e^F - 1 of 1 (the training forward and
       the old log-probs are two float computations), the sums of 6 terms in any order */
    const double dl = tb_forward_bound(ref, MAX_LEN, 0.8f);
    const double lb = 2 * (expm1(dl) + df_tol_gamma(8, DF_U32)) * 1.2 * (1 + expm1(dl));
    print_message("pg_loss %.9g vs %.9g (bound %.3g)\n", o1.pg_loss, o4.pg_loss, lb);
    assert_true(fabs(o1.pg_loss - o4.pg_loss) <= lb);
    df_model_free(ref);
    free(o1.params), free(o1.grads), free(o4.params), free(o4.grads);
}

/*
 * verl's actor-side rollout_corr/ metrics (dp_actor.update_policy): per micro-batch, the gap of the
 * policy being trained to the rollout's log-probs, folded over micro-batches by verl's
 * reduce_metrics (names with "max": the largest; "min": the smallest; else the plain mean of the
 * micro-batch values, not a token mean). Rollout log-probs old - d_t, micro-batches of two rows:
 * rows 0-1 (tokens 0-4) and rows 2-3 (token 5, row 2 empty). One mini-batch, one epoch: every
 * micro-batch sees the weights old_log_probs came from, so current = old within two forward
 * bounds per token (each pass within tb_forward_bound of the exact value).
 */
static const float D[6] = {0.1f, 0.2f, 0.3f, 0.1f, 0.3f, -0.4f};

static df_metrics *update_rollout_gap_rs(bool bypass, const char *rollout_col, const char *rs, const char *thr)
{
    df_actor *a;
    df_actor_params p = params(2);
    p.bypass = bypass, p.bypass_is_level = bypass ? DF_ROLLOUT_IS_TOKEN : 0, p.bypass_is_threshold = 2.0;
    if (rs)
        assert_int_equal(df_rollout_rs_parse(rs, thr, &p.bypass_rs), 0);
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, true, &a), 0);
    df_batch *b = ppo_batch(a);
    float *ro;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "rl", "response_ids", &ro), 0);
    float *old = df_batch_column(b, "old_log_probs")->data;
    for (int j = 0; j < 6; j++)
        ro[j] = old[j] - D[j];
    if (bypass) /* old_log_probs are the rollout's */
        memcpy(old, ro, sizeof D);
    else
        assert_int_equal(df_batch_rename(b, "rl", rollout_col), 0);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_actor_update_policy(a, b, m), 0);
    df_batch_free(b);
    df_actor_free(a);
    return m;
}

static df_metrics *update_rollout_gap(bool bypass, const char *rollout_col)
{
    return update_rollout_gap_rs(bypass, rollout_col, NULL, NULL);
}

static void test_rollout_corr_metrics(void **state)
{
    (void)state;
    df_model *ref = df_test_micro_model(3);
    const double fb = 2 * tb_forward_bound(ref, MAX_LEN, 0.8f), tol = fb + 1e-12;
    df_model_free(ref);
    /* by hand from D (the stored floats differ from old - d by rounding only: 1e-6 covers it
       against the values below, which the fold rule moves by >= 0.1) */
    const double kl = 0.5 * (-(0.1 + 0.2 + 0.3 + 0.1 + 0.3) / 5 + 0.4); /* token mean: -0.1 */
    const double diff_max = 0.4, diff_min = -(0.3 + 0.1 + 0.3) / 3;   /* row 3; row 1 */
    for (int by = 0; by < 2; by++) {
        df_metrics *m = update_rollout_gap(by, "rollout_log_probs");
        assert_true(fabs(df_metrics_get(m, "rollout_corr/kl", NAN) - kl) <= tol + 1e-6);
        assert_true(fabs(df_metrics_get(m, "rollout_corr/log_ppl_diff_max", NAN) - diff_max) <= tol + 1e-6);
        assert_true(fabs(df_metrics_get(m, "rollout_corr/log_ppl_diff_min", NAN) - diff_min) <= tol + 1e-6);
        if (by) { /* ppo_clip measures the weights exp(current - rollout) = e^d it does not apply */
            double is = 0.5 * ((exp(0.1) + exp(0.2) + exp(0.3) + exp(0.1) + exp(0.3)) / 5 + exp(-0.4));
            assert_true(fabs(df_metrics_get(m, "rollout_corr/rollout_is_mean", NAN) - is) <= 2 * (tol + 1e-6));
            assert_true(fabs(df_metrics_get(m, "rollout_corr/rollout_is_max", NAN) - exp(0.3)) <= 2 * (tol + 1e-6));
        } else {
            assert_false(df_metrics_has(m, "rollout_corr/rollout_is_mean"));
        }
        df_metrics_free(m);
    }
    /* no rollout log-probs, no rollout_corr/ metrics */
    df_metrics *m = update_rollout_gap(false, "not_the_rollout");
    assert_false(df_metrics_has(m, "rollout_corr/kl"));
    assert_true(df_metrics_has(m, "actor/pg_loss"));
    df_metrics_free(m);
}

/*
 * Bypass mode's rejections leave the policy loss's own statistics, as verl's effective_mask: the
 * ratios exp(d) against the rollout are 1.105, 1.221, 1.350, 1.105, 1.350, 0.670 (each within
 * e^(2F) of it, F the forward bound: far from every edge below) and the advantages -0.8, 0.2, 1.2,
 * -0.8, 0.2, 1.2 (ppo_batch), so PPO's clip (0.2) clips tokens 1, 2 and 4. token_k1 with bounds
 * 0.8_2 keeps k1 = -d in [log 0.8, log 2]: tokens 2 and 4 (d 0.3) are rejected. Micro-batch 1
 * (tokens 0-4) then clips 1 of its 3 kept tokens, micro-batch 2 none; actor/pg_clipfrac weighs
 * each by its share of the mini-batch's model tokens (5 / 6 and 1 / 6): 1/3 x 5/6. Counting the
 * rejected tokens would give 3/5 x 5/6.
 */
static void test_bypass_rejections_leave_stats(void **state)
{
    (void)state;
    df_metrics *m = update_rollout_gap_rs(true, "rollout_log_probs", "token_k1", "0.8_2");
    assert_true(fabs(df_metrics_get(m, "actor/pg_clipfrac", NAN) - 5.0 / 18) <= 1e-12);
    assert_true(fabs(df_metrics_get(m, "rollout_corr/rollout_rs_masked_fraction", NAN) - 0.5 * (2.0 / 5)) <= 1e-9);
    df_metrics_free(m);
}

static void test_sft_lowers_loss(void **state)
{
    (void)state;
    df_actor *a;
    df_actor_params p = params(2);
    p.optim.lr = 3e-2;
    p.temperature = 1.0f;
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, true, &a), 0);
    /* a random model's NLL: lse - z_t with every |z_v| <= Z, so within 2 Z of log V (a sum
       instead of a mean, or another normaliser, lands far outside) */
    const double Z = tb_head_bound(df_actor_model(a), 1.0f), logV = log(40.0);
    const double e0 = tb_forward_err(df_actor_model(a), MAX_LEN, 1.0f);
    df_batch *b = df_test_small_batch();
    df_metrics *m = df_metrics_new();
    double first = 0, last = 0;
    for (int it = 0; it < 30; it++) {
        df_metrics_clear(m);
        assert_int_equal(df_actor_sft_step(a, b, m), 0);
        if (it == 0)
            first = df_metrics_get(m, "train/loss", 0);
        last = df_metrics_get(m, "train/loss", 0);
    }
    print_message("SFT loss %.4f -> %.4f (log V %.4f, Z %.3f)\n", first, last, logV, Z);
    assert_true(fabs(first - logV) <= 2 * Z + e0);
    /* memorising 6 tokens is easy: an optimisation outcome, not a rounding bound (30 AdamW
       steps at lr 3e-2 reach a small fraction of the first loss; half is a wide margin) */
    assert_true(last < 0.5 * first);
    assert_int_equal(df_actor_step_count(a), 30);
    df_metrics_free(m);
    df_batch_free(b);
    df_actor_free(a);
}

static void test_errors(void **state)
{
    (void)state;
    df_actor *a;
    df_actor_params p = params(2);
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, false, &a), 0);
    df_batch *b = df_test_small_batch();
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_actor_update_policy(a, b, m), DF_EINVAL); /* frozen */
    df_actor_free(a);
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, true, &a), 0);
    assert_int_equal(df_actor_update_policy(a, b, m), DF_EINVAL); /* no old_log_probs */
    assert_non_null(strstr(df_last_error(), "old_log_probs"));
    df_metrics_free(m);
    df_batch_free(b);
    df_actor_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_log_prob_matches_model),
        cmocka_unit_test(test_micro_batching_invariant),
        cmocka_unit_test(test_checkpointing_same_update),
        cmocka_unit_test(test_rollout_corr_metrics),
        cmocka_unit_test(test_bypass_rejections_leave_stats),
        cmocka_unit_test(test_sft_lowers_loss),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
