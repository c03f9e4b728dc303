/* Unit tests for the policy losses of include/distflow/algo.h's losses block: gspo,
 * gpg, cpgd, clip_cov, kl_cov, cispo, sapo, geo_mean (hand-computed cases, finite differences, the
 * micro-batch / data-parallel split property for every loss and aggregation mode),
 * TIS weights inside the vanilla loss. KL controllers, the TIS weights themselves
 * and the losses inside the actor: test_losses_train.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "tolerance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distflow/algo.h"
#include "distflow/metrics.h"
#include "distflow/rng.h"

/* An input over caller arrays with verl's default clip ratios. */
static df_policy_loss_input mk_in(int64_t n, const int64_t *off, const float *lp, const float *old,
                                  const float *adv, const float *w)
{
    df_policy_loss_input in = {.n = n,
                               .offsets = off,
                               .log_prob = lp,
                               .old_log_prob = old,
                               .advantages = adv,
                               .weights = w,
                               .clip_ratio_low = 0.2f,
                               .clip_ratio_high = 0.2f,
                               .clip_ratio_c = 3.0f,
                               .tau_pos = 1.0,
                               .tau_neg = 1.05};
    return in;
}

static double run_loss(df_policy_loss_fn fn, const df_policy_loss_input *in, float *grad)
{
    df_policy_loss_output out = {.grad = grad};
    int rc = fn(in, &out);
    if (rc)
        fail_msg("policy loss failed: %s", df_last_error());
    return out.loss;
}

/* The log-ratio of token t as the losses compute it (0 without old log-probs: gpg). */
static double log_ratio(const df_policy_loss_input *in, int64_t t)
{
    return in->old_log_prob ? (double)in->log_prob[t] - (double)in->old_log_prob[t] : 0.0;
}

/* Upper bound on sum_t |w_t l_t| of any of these losses: |l_t| <= |A| max(r, 1 + high, c)
   + alpha (e^|d| + |d|) + kappa |d| (cpgd's drift, kl_cov's penalty), with r <= e^|d|. */
static double abs_loss_bound(const df_policy_loss_input *in)
{
    double s = 0;
    for (int64_t t = 0; t < in->offsets[in->n]; t++) {
        double d = fabs(log_ratio(in, t)), e = exp(d);
        double clip = 1 + in->clip_ratio_high + in->clip_ratio_c;
        s += fabs(in->weights[t]) * (fabs(in->advantages[t]) * (e + clip) + in->policy_drift_coeff * (e + d) +
                                     in->ppo_kl_coef * d);
    }
    return s;
}

/*
 * Central differences of loss(log_prob) against the analytic gradient, token by
 * token. The step is the difference of the two float inputs actually used. Bound
 * (df_tol_fd): in token t's log-prob, every loss is a sum over t's sample of terms
 * -A e^d (gspo: of e^mean(d), each derivative bringing a factor 1/L), terms linear in
 * d and cpgd's drift alpha (e^d - 1 - d), so |f''| and |f'''| are at most the sum over
 * t's sample of |w| (|A| + alpha) e^(max |d| + h); an evaluation is a double sum of T
 * terms of a few operations each, within gamma_{16T} of abs_loss_bound.
 */
static void check_fd(df_policy_loss_fn fn, const df_policy_loss_input *in0)
{
    const int64_t T = in0->offsets[in0->n];
    float *lp = malloc((size_t)T * sizeof *lp), *g = malloc((size_t)T * sizeof *g);
    memcpy(lp, in0->log_prob, (size_t)T * sizeof *lp);
    df_policy_loss_input in = *in0;
    in.log_prob = lp;
    run_loss(fn, &in, g);
    const double ferr = df_tol_gamma(16 * (double)T, DF_U64) * abs_loss_bound(&in);
    for (int64_t i = 0; i < in.n; i++) {
        const int64_t a = in.offsets[i], b = in.offsets[i + 1];
        double wa = 0, dmax = 0;
        for (int64_t t = a; t < b; t++) {
            wa += fabs(in.weights[t]) * (fabs(in.advantages[t]) + in.policy_drift_coeff);
            dmax = fmax(dmax, fabs(log_ratio(&in, t)));
        }
        for (int64_t t = a; t < b; t++) {
            float x = lp[t];
            float xp = x + 1e-3f, xm = x - 1e-3f;
            lp[t] = xp;
            double lpl = run_loss(fn, &in, NULL);
            lp[t] = xm;
            double lmi = run_loss(fn, &in, NULL);
            lp[t] = x;
            double fd = (lpl - lmi) / ((double)xp - (double)xm);
            double h = ((double)xp - (double)xm) / 2, mid = fabs(((double)xp + (double)xm) / 2 - x);
            double m = wa * exp(dmax + h);
            assert_near(g[t], fd, df_tol_fd(h, m, mid, m, ferr, g[t]));
        }
    }
    free(lp), free(g);
}

/* ====================================================================== registry */

static void test_registry_names(void **state)
{
    (void)state;
    const char *names[] = {"vanilla", "gspo",     "gpg",   "cpgd", "clip_cov", "kl_cov",
                           "clip-cov", "kl-cov", "cispo", "sapo", "geo_mean"};
    const df_policy_loss_fn want[] = {df_policy_loss_vanilla,  df_policy_loss_gspo,     df_policy_loss_gpg,
                                      df_policy_loss_cpgd,     df_policy_loss_clip_cov, df_policy_loss_kl_cov,
                                      df_policy_loss_clip_cov, df_policy_loss_kl_cov,   df_policy_loss_cispo,
                                      df_policy_loss_sapo,     df_policy_loss_geo_mean};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        df_policy_loss_fn fn = NULL;
        assert_int_equal(df_policy_loss_lookup(names[i], &fn), 0);
        assert_true(fn == want[i]);
    }
    df_policy_loss_fn fn;
    assert_error_mentions(df_policy_loss_lookup("geomean", &fn), DF_EINVAL, "geo_mean");
}

/* ====================================================================== gspo */

/*
 * Sample 0: 2 tokens, log-ratios 0.1, 0.1, A = 1, w = 0.25
 *   s_0 = exp(0.1) = 1.105170918, inside [0.8, 1.2]: l = -1.105170918 per token
 *   grad = 0.25 * -1.105170918 = -0.276292730
 * Sample 1: 3 tokens, log-ratios 0.5, 0.3, 0.1 (mean 0.3), A = 2, w = 1/6
 *   s_1 = exp(0.3) = 1.349858808 > 1.2: l1 = -2.699717615 < l2 = -2 * 1.2 = -2.4
 *   -> clipped, l = -2.4, grad 0
 * Sample 2: empty.
 * loss = 2 * 0.25 * -1.105170918 + 3 * (1/6) * -2.4 = -0.552585459 - 1.2 = -1.752585459
 * pg_clipfrac = 3 / 5; ppo_kl = mean(old - lp) = -(0.1 + 0.1 + 0.5 + 0.3 + 0.1) / 5 = -0.22
 * Bounds (df_tol_hand): old -1.1f, -2.1f move s_0's log-ratio by (1.1 + 2.1) / 2 DF_U32,
 * the loss by 0.5 e^0.1 times that, the gradient by 0.25 e^0.1 times it; the clipped
 * sample's loss is 3 (1/6.0f) 2 (1 + 0.2f), off by those two float32 numbers (0.2 + 1.2);
 * pg_clipfrac is one double division, as 0.6: exact.
 */
static void test_gspo_hand(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 5, 5};
    const float lp[] = {-1.0f, -2.0f, -0.5f, -0.5f, -0.5f};
    const float old[] = {-1.1f, -2.1f, -1.0f, -0.8f, -0.6f};
    const float adv[] = {1, 1, 2, 2, 2};
    const float w[] = {0.25f, 0.25f, 1 / 6.0f, 1 / 6.0f, 1 / 6.0f};
    df_policy_loss_input in = mk_in(3, off, lp, old, adv, w);
    float g[5];
    df_policy_loss_output out = {.grad = g};
    assert_int_equal(df_policy_loss_gspo(&in, &out), 0);
    const double x_err = (1.1 + 2.1) / 2, e01 = 1.105170918;
    assert_near(out.loss, -1.752585459, df_tol_hand(5e-10, 0, 0.5 * e01 * x_err + 0.2 + 1.2, 2.3));
    assert_near(g[0], -0.276292730, df_tol_hand(5e-10, 0.28, 0.25 * e01 * x_err, 0.28));
    assert_near(g[1], -0.276292730, df_tol_hand(5e-10, 0.28, 0.25 * e01 * x_err, 0.28));
    for (int t = 2; t < 5; t++)
        assert_near(g[t], 0.0, 0);
    assert_near(out.pg_clipfrac, 0.6, 0);
    assert_near(out.pg_clipfrac_lower, 0.0, 0);
    /* a mean of log-ratios: cond = sum |old_t| / 5 over the inexact ones */
    assert_near(out.ppo_kl, -0.22, df_tol_hand(0, 0, (1.1 + 2.1 + 0.8 + 0.6) / 5, 0.22));
}

/*
 * Extreme log-ratio: one sample, log-ratios 12, 12 (mean 12 > 10), A = -1, w = 0.5:
 *   s = exp(10) = 22026.4657948 (the clamp), l1 = 22026.4657948 > l2 = 1.2 -> unclipped
 *   loss = 2 * 0.5 * 22026.4657948; gradient 0 (the clamp stops it)
 */
static void test_gspo_extreme(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2};
    const float lp[] = {-1, -2}, old[] = {-13, -14}, adv[] = {-1, -1}, w[] = {0.5f, 0.5f};
    df_policy_loss_input in = mk_in(1, off, lp, old, adv, w);
    float g[2];
    /* exact inputs, the clamp's e^10 in double: the printed digits and the double arithmetic */
    assert_near(run_loss(df_policy_loss_gspo, &in, g), 22026.4657948, df_tol_hand(5e-8, 0, 0, 22026.5));
    assert_near(g[0], 0.0, 0);
    assert_near(g[1], 0.0, 0);
}

/* Outcome advantages (constant per sample): the stop-gradient form's gradient is
 * the derivative of the loss. Ratios inside and outside the clip range. */
static void test_gspo_fd(void **state)
{
    (void)state;
    const int64_t off[] = {0, 3, 4, 4, 7};
    const float lp[] = {-1.2f, -0.4f, -2.0f, -0.7f, -1.0f, -1.5f, -0.3f};
    const float old[] = {-1.0f, -0.5f, -2.1f, -0.3f, -1.1f, -1.4f, -0.2f};
    const float adv[] = {0.7f, 0.7f, 0.7f, -1.3f, 0.4f, 0.4f, 0.4f};
    const float w[] = {0.1f, 0.1f, 0.1f, 0.25f, 0.05f, 0.05f, 0.05f};
    df_policy_loss_input in = mk_in(4, off, lp, old, adv, w);
    check_fd(df_policy_loss_gspo, &in);
}

/* ====================================================================== gpg */

/*
 * l = -A log_prob: -1 * -0.5 = 0.5, -1 * -1.5 = 1.5, 0.5 * -2 = -1
 * loss = (0.5 + 1.5 - 1) / 3 = 1/3; grad = -w A = -1/3, -1/3, 1/6; stats 0
 * (old_log_prob may be NULL).
 */
static void test_gpg_hand(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 3};
    const float lp[] = {-0.5f, -1.5f, -2.0f}, adv[] = {1, 1, -0.5f};
    const float w[] = {1 / 3.0f, 1 / 3.0f, 1 / 3.0f};
    df_policy_loss_input in = mk_in(2, off, lp, NULL, adv, w);
    float g[3];
    df_policy_loss_output out = {.grad = g, .ppo_kl = 7, .pg_clipfrac = 7};
    assert_int_equal(df_policy_loss_gpg(&in, &out), 0);
    /* the weights 1/3.0f are float32 (cond sum |w A lp| = 1, |w A| for the gradient), the
       gradient is float32 too */
    assert_near(out.loss, 1 / 3.0, df_tol_hand(0, 0, 1, 1));
    assert_near(g[0], -1 / 3.0, df_tol_hand(0, 1 / 3.0, 1 / 3.0, 1 / 3.0));
    assert_near(g[1], -1 / 3.0, df_tol_hand(0, 1 / 3.0, 1 / 3.0, 1 / 3.0));
    assert_near(g[2], 1 / 6.0, df_tol_hand(0, 1 / 6.0, 1 / 6.0, 1 / 6.0));
    assert_near(out.ppo_kl, 0, 0);
    assert_near(out.pg_clipfrac, 0, 0);
    check_fd(df_policy_loss_gpg, &in);
}

/* ====================================================================== cpgd */

/*
 * clip 0.2: up = ln 1.2 = 0.182321557, down = ln 0.8 = -0.223143551; alpha = 0.1;
 * w = 0.25 each; drift D(d) = e^d - 1 - d, D'(d) = e^d - 1.
 *   t0 d =  0.1, A =  1: unclipped, pg = -0.1; D = 0.005170918
 *      l = -0.1 + 0.1 * 0.005170918 = -0.099482908; g = 0.25 (-1 + 0.1 * 0.105170918) = -0.247370727
 *   t1 d =  0.3, A =  1: d > up, clipped, pg = -0.182321557; D = 0.049858808
 *      l = -0.177335676; g = 0.25 (0.1 * 0.349858808) = 0.008746470
 *   t2 d = -0.3, A = -2: d < down, clipped, pg = 2 * -0.223143551 = -0.446287103; D = 0.040818221
 *      l = -0.442205281; g = 0.25 (0.1 * -0.259181779) = -0.006479544
 *   t3 d = -0.1, A = -2: unclipped, pg = 2 * -0.1 = -0.2; D = 0.004837418
 *      l = -0.199516258; g = 0.25 (2 + 0.1 * -0.095162582) = 0.497620935
 * loss = 0.25 (-0.099482908 - 0.177335676 - 0.442205281 - 0.199516258) = -0.229635031
 * pg_clipfrac = 2/4; ppo_kl = -(0.1 + 0.3 - 0.3 - 0.1) / 4 = 0
 * Bounds (df_tol_hand): the float32 log-probs -1.1f, -0.8f, -1.3f, -2.1f move d by |x| DF_U32,
 * the loss by w |dl/dd| |x| (dl/dd = -A + alpha (e^d - 1) unclipped, alpha (e^d - 1) clipped),
 * the clip bounds ln(1 +- 0.2f) by 0.2 / 1.2 and 0.2 / 0.8 (times w |A|); the gradients
 * by w alpha e^d |x| <= 0.05; the printed values carry 9 decimals.
 */
static void test_cpgd_hand(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 4};
    const float lp[] = {-1.0f, -0.5f, -1.3f, -2.1f}, old[] = {-1.1f, -0.8f, -1.0f, -2.0f};
    const float adv[] = {1, 1, -2, -2}, w[] = {0.25f, 0.25f, 0.25f, 0.25f};
    df_policy_loss_input in = mk_in(2, off, lp, old, adv, w);
    in.policy_drift_coeff = 0.1;
    float g[4];
    df_policy_loss_output out = {.grad = g};
    assert_int_equal(df_policy_loss_cpgd(&in, &out), 0);
    const double cond =
        0.25 * (0.99 * 1.1 + 0.035 * 0.8 + 0.026 * 1.3 + 1.99 * 2.1 + 0.2 / 1.2 + 2 * 0.2 / 0.8);
    assert_near(out.loss, -0.229635031, df_tol_hand(5e-10, 0, cond, 1));
    const double want[] = {-0.247370727, 0.008746470, -0.006479544, 0.497620935};
    for (int t = 0; t < 4; t++)
        assert_near(g[t], want[t], df_tol_hand(5e-10, fabs(want[t]), 0.05, fabs(want[t])));
    assert_near(out.pg_clipfrac, 0.5, 0);
    assert_near(out.ppo_kl, 0.0, df_tol_hand(0, 0, (1.1 + 0.8 + 1.3 + 2.1) / 4, 0.2));

    /* drift bound c = 0.2 on t1 (e^0.3 - 1 = 0.349858808 > 0.2): d0 = ln 1.2,
     * D = (0.2 - 0.182321557) + 0.2 (0.3 - 0.182321557) = 0.041214132, D' = 0.2
     * loss moves by 0.25 * 0.1 * (0.041214132 - 0.049858808) = -0.000216117 */
    in.cpgd_drift_clip = 0.2;
    assert_int_equal(df_policy_loss_cpgd(&in, &out), 0);
    assert_near(out.loss, -0.229635031 - 0.000216117, df_tol_hand(1e-9, 0, cond, 1));
    assert_near(g[1], 0.25 * 0.1 * 0.2, df_tol_hand(0, 0.005, 0, 0.005)); /* D' = c: no d in it */
    assert_near(g[0], -0.247370727, df_tol_hand(5e-10, 0.25, 0.05, 0.25)); /* e^0.1 - 1 < 0.2: unchanged */
}

/* No drift: the plain clipped log-ratio policy gradient; extreme ratios clamp. */
static void test_cpgd_edges(void **state)
{
    (void)state;
    const int64_t off[] = {0, 3};
    /* t0: d = 30 -> 20, A = -1: A < 0 and d > down, unclipped: l = -(-1) 20 = 20
     * t1: d = -25 -> -20, A = -1: d < down, clipped: l = 1 * ln 0.8 = -0.223143551
     * t2: A = 0: l = 0.   loss = 19.776856449, pg_clipfrac = 1/3; every gradient
     * is 0 (clamped, clipped, A = 0) */
    const float lp[] = {-1, -26, -1}, old[] = {-31, -1, -2}, adv[] = {-1, -1, 0}, w[] = {1, 1, 1};
    df_policy_loss_input in = mk_in(1, off, lp, old, adv, w);
    float g[3];
    df_policy_loss_output out = {.grad = g};
    assert_int_equal(df_policy_loss_cpgd(&in, &out), 0);
    /* exact inputs but clip_ratio_low 0.2f: ln(1 - 0.2f) moves by 0.2 / 0.8 DF_U32 */
    assert_near(out.loss, 19.776856449, df_tol_hand(5e-10, 0, 0.2 / 0.8, 20.3));
    assert_near(out.pg_clipfrac, 1 / 3.0, 0);
    for (int t = 0; t < 3; t++)
        assert_near(g[t], 0.0, 0);
    /* clip_ratio_low >= 1 removes the lower bound: t1 is unclipped, l = 1 * -20: loss 0 */
    in.clip_ratio_low = 1.0f;
    assert_int_equal(df_policy_loss_cpgd(&in, &out), 0);
    assert_near(out.loss, 0.0, 0); /* 20 - 20 + 0, exact */
    assert_near(out.pg_clipfrac, 0.0, 0);
    in.policy_drift_coeff = -1;
    assert_error_mentions(df_policy_loss_cpgd(&in, &out), DF_EINVAL, "policy_drift_coeff");
    in.policy_drift_coeff = 0, in.clip_ratio_high = -0.1f;
    assert_error_mentions(df_policy_loss_cpgd(&in, &out), DF_EINVAL, "clip ratios");
}

static void test_cpgd_fd(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2, 2, 6};
    const float lp[] = {-1.0f, -0.5f, -1.3f, -2.1f, -0.2f, -0.9f};
    const float old[] = {-1.1f, -0.8f, -1.0f, -2.0f, -1.2f, -0.6f};
    const float adv[] = {1, 0.5f, -2, -2, 0.3f, -0.7f};
    const float w[] = {0.2f, 0.2f, 0.1f, 0.1f, 0.1f, 0.1f};
    df_policy_loss_input in = mk_in(3, off, lp, old, adv, w);
    in.policy_drift_coeff = 0.3;
    check_fd(df_policy_loss_cpgd, &in);
    in.cpgd_drift_clip = 0.5; /* token 4 (d = 1, e - 1 > 0.5) is on the linear part */
    check_fd(df_policy_loss_cpgd, &in);
}

/* ====================================================================== clip_cov / kl_cov */

/*
 * Four tokens, A = [1, 1, -1, -1] (mean 0), log_prob = [-0.2, -3.0, -0.4, -3.4]
 * (mean -1.75): cov = A (lp + 1.75) = [1.55, -1.25, -1.35, 1.65].
 * old = lp except t0 (old -0.3: d = 0.1) and t3 (old -3.0: d = -0.4).
 */
static const int64_t kc_off[] = {0, 2, 4};
static const float kc_lp[] = {-0.2f, -3.0f, -0.4f, -3.4f};
static const float kc_old[] = {-0.3f, -3.0f, -0.4f, -3.0f};
static const float kc_adv[] = {1, 1, -1, -1};
static const float kc_w[] = {0.25f, 0.25f, 0.25f, 0.25f};

/*
 * clip_cov, window (1, 5), ratio 0.25 -> k = max(int(0.25 * 4), 1) = 1.
 * t3: A < 0, r = e^-0.4 = 0.670320 < 0.8 -> PPO-clipped, not a candidate.
 * Candidates: t0 (cov 1.55) only -> t0 selected whatever the seed.
 * t0: r = e^0.1 = 1.105171 inside [0.8, 1.2] but selected: l = 0, g = 0
 * t1: r = 1: l = -1, g = 0.25 * -1;  t2: r = 1, A = -1: l = 1, g = 0.25
 * t3: clipped: l = max(0.670320, 0.8) = 0.8, g = 0
 * loss = 0.25 (0 - 1 + 1 + 0.8) = 0.2; pg_clipfrac = 1/4;
 * ppo_kl = mean(-d) = (-0.1 + 0 + 0 + 0.4) / 4 = 0.075
 * Bounds (df_tol_hand): t1 and t2 have d = 0 exactly; t3's clipped loss -A (1 - 0.2f)
 * carries 0.2f (cond w 0.2), t0's e^d the rounding of -0.2f, -0.3f (|d e^d| <= 0.5 e^0.1);
 * ppo_kl and the mean log-prob are means of float32 inputs (cond sum |x| / 4).
 */
static void test_clip_cov_hand(void **state)
{
    (void)state;
    df_policy_loss_input in = mk_in(2, kc_off, kc_lp, kc_old, kc_adv, kc_w);
    in.clip_cov_ratio = 0.25, in.clip_cov_lb = 1.0, in.clip_cov_ub = 5.0, in.seed = 7;
    float g[4];
    df_policy_loss_output out = {.grad = g};
    assert_int_equal(df_policy_loss_clip_cov(&in, &out), 0);
    assert_near(out.loss, 0.2, df_tol_hand(0, 0, 0.25 * 0.2, 0.7));
    const double want[] = {0, -0.25, 0.25, 0};
    for (int t = 0; t < 4; t++)
        assert_near(g[t], want[t], 0); /* w (-A) r with r = 1 exactly */
    assert_near(out.pg_clipfrac, 0.25, 0);
    assert_near(out.ppo_kl, 0.075, df_tol_hand(0, 0, (0.2 + 0.3 + 3.4) / 4, 0.125));

    df_cov_stats st;
    assert_int_equal(df_cov_stats_compute("clip_cov", &in, &st), 0);
    assert_near(st.adv_mean, 0.0, 0);
    assert_near(st.logp_mean, -1.75, df_tol_hand(0, 0, (0.2 + 0.4 + 3.4) / 4, 1.75));
    assert_int_equal(st.n_tokens, 4);
    assert_int_equal(st.n_select, 1);
    assert_int_equal(st.index_threshold, 0);

    /* narrower window (1.6, 5): no candidate, nothing dropped: loss 0.25 (-1.105171 - 1 + 1 + 0.8) */
    in.clip_cov_lb = 1.6;
    assert_int_equal(df_policy_loss_clip_cov(&in, &out), 0);
    assert_near(out.loss, 0.25 * (-1.105170918 - 1 + 1 + 0.8),
                df_tol_hand(0.25 * 5e-10, 0, 0.25 * (1.2 * 0.5 + 0.2), 1));
    assert_near(out.pg_clipfrac, 0.0, 0);
}

/*
 * kl_cov, ratio 0.5 -> k = 2: the largest covariances t3 (1.65), t0 (1.55); coef 1.
 *   t0: r = 1.105171: l = -1.105171 + |0.1| = -1.005171; g = 0.25 (-1.105171 + 1) = -0.026292730
 *   t1: l = -1, g = -0.25;  t2: l = 1, g = 0.25
 *   t3: r = 0.670320: l = 0.670320 + 0.4 = 1.070320; g = 0.25 (0.670320 - 1) = -0.082419988
 * loss = 0.25 (-1.005171 - 1 + 1 + 1.070320) = 0.016287282; ppo_kl = (0.1 + 0.4) / 4 = 0.125
 * Bounds (df_tol_hand): t0's d is off by (0.2 + 0.3) DF_U32, t3's by 3.4 DF_U32 (-3.4f);
 * times |dl/dd| = |-A e^d + sign d| <= 0.11, 0.33 for the loss, |w A e^d| for the gradient.
 */
static void test_kl_cov_hand(void **state)
{
    (void)state;
    df_policy_loss_input in = mk_in(2, kc_off, kc_lp, kc_old, kc_adv, kc_w);
    in.kl_cov_ratio = 0.5, in.ppo_kl_coef = 1.0;
    float g[4];
    df_policy_loss_output out = {.grad = g};
    assert_int_equal(df_policy_loss_kl_cov(&in, &out), 0);
    assert_near(out.loss, 0.016287282, df_tol_hand(5e-10, 0, 0.25 * (0.11 * 0.5 + 0.33 * 3.4), 1.02));
    const double want[] = {-0.026292730, -0.25, 0.25, -0.082419988};
    const double cond[] = {0.25 * 1.11 * 0.5, 0, 0, 0.25 * 0.68 * 3.4};
    for (int t = 0; t < 4; t++)
        assert_near(g[t], want[t], df_tol_hand(t == 1 || t == 2 ? 0 : 5e-10, fabs(want[t]), cond[t], 0.25));
    assert_near(out.ppo_kl, 0.125, df_tol_hand(0, 0, (0.5 + 3.4) / 4, 0.125));
    assert_near(out.pg_clipfrac, 0.0, 0);
    check_fd(df_policy_loss_kl_cov, &in);
}

/* All-equal advantages: every cov is 0. clip_cov has no candidate in (1, 5);
 * kl_cov still takes k = 1 token, the tie going to the first index. */
static void test_cov_all_equal(void **state)
{
    (void)state;
    const float adv[] = {0.5f, 0.5f, 0.5f, 0.5f};
    df_policy_loss_input in = mk_in(2, kc_off, kc_lp, kc_old, adv, kc_w);
    in.clip_cov_ratio = 0.25, in.clip_cov_lb = 1.0, in.clip_cov_ub = 5.0;
    in.kl_cov_ratio = 0.01, in.ppo_kl_coef = 2.0;
    df_cov_stats st;
    assert_int_equal(df_cov_stats_compute("clip_cov", &in, &st), 0);
    assert_int_equal(st.n_select, 0);
    assert_int_equal(df_cov_stats_compute("kl_cov", &in, &st), 0);
    assert_int_equal(st.n_select, 1);
    assert_int_equal(st.index_threshold, 0);
    /* kl_cov loss: -0.5 (e^0.1 + 1 + 1 + e^-0.4) / 4 + 2 * |0.1| / 4 (t0 selected); t0's d
       is off by 0.5 DF_U32 (|dl/dd| = |-0.5 e^d + 2| <= 1.5), t3's by 3.4 (0.5 e^-0.4) */
    float g[4];
    double want = 0.25 * (-0.5 * (1.105170918 + 1 + 1 + 0.670320046) + 2 * 0.1);
    assert_near(run_loss(df_policy_loss_kl_cov, &in, g), want,
                df_tol_hand(0.25 * 0.5 * 1e-9, 0, 0.25 * (1.5 * 0.5 + 0.34 * 3.4), 0.5));
    assert_near(g[0], 0.25 * (-0.5 * 1.105170918 + 2),
                df_tol_hand(0.25 * 0.5 * 5e-10, 0.37, 0.25 * 0.56 * 0.5, 0.37));
}

/* clip_cov picks exactly k of many candidates, the same ones for the same seed. */
static void test_clip_cov_random_choice(void **state)
{
    (void)state;
    enum { T = 200 };
    int64_t off[] = {0, T};
    float lp[T], adv[T], w[T];
    for (int t = 0; t < T; t++) { /* half A = 1 high lp, half A = -1 low lp: cov = 4 for all */
        adv[t] = t % 2 ? 1.0f : -1.0f;
        lp[t] = t % 2 ? -1.0f : -5.0f;
        w[t] = 1.0f / T;
    }
    df_policy_loss_input in = mk_in(1, off, lp, lp, adv, w);
    in.clip_cov_ratio = 0.05, in.clip_cov_lb = 1.0, in.clip_cov_ub = 5.0, in.seed = 11;
    float g1[T], g2[T], g3[T];
    df_policy_loss_output o = {.grad = g1};
    assert_int_equal(df_policy_loss_clip_cov(&in, &o), 0);
    assert_near(o.pg_clipfrac, 10.0 / T, 0); /* k = int(0.05 * 200) = 10; one division, as here */
    run_loss(df_policy_loss_clip_cov, &in, g2);
    in.seed = 12;
    run_loss(df_policy_loss_clip_cov, &in, g3);
    int zeros = 0, same = 0, diff = 0;
    for (int t = 0; t < T; t++) {
        zeros += g1[t] == 0;
        same += g1[t] == g2[t];
        diff += (g1[t] == 0) != (g3[t] == 0);
    }
    assert_int_equal(zeros, 10);
    assert_int_equal(same, T);
    assert_true(diff > 0); /* another seed, another subset */
}

/*
 * Extreme log-ratio in the covariance losses: t0 d = 30 (clamped to 20), t1 d = 0;
 * A = [1, -1], lp = [-1, -2]: cov = [0.5, 0.5] (a tie), w = 0.5 each.
 * kl_cov (ratio 0.5 -> k = 1, the tie goes to t0, coef 0.1):
 *   l0 = -e^20 + 0.1 * 20 = -485165193.4, l1 = 1: loss = 0.5 (l0 + l1) = -242582596.2
 *   grad = [0 (clamped), 0.5]; ppo_kl = (20 + 0) / 2 = 10
 * clip_cov (window (1, 5)): t0 is PPO-clipped (r = e^20 > 1.2: l = -1.2), t1's cov is
 *   outside the window: nothing dropped; loss = 0.5 (-1.2 + 1) = -0.1, grad = [0, 0.5],
 *   ppo_kl = (-20 + 0) / 2 = -10
 */
static void test_cov_extreme(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2};
    const float lp[] = {-1, -2}, old[] = {-31, -2}, adv[] = {1, -1}, w[] = {0.5f, 0.5f};
    df_policy_loss_input in = mk_in(1, off, lp, old, adv, w);
    in.kl_cov_ratio = 0.5, in.ppo_kl_coef = 0.1;
    in.clip_cov_ratio = 0.5, in.clip_cov_lb = 1, in.clip_cov_ub = 5;
    float g[2];
    df_policy_loss_output out = {.grad = g};
    assert_int_equal(df_policy_loss_kl_cov(&in, &out), 0);
    /* exact inputs (the clamp makes t0 independent of them): the printed decimal and the
       double arithmetic on e^20; t1's gradient and the KL means are exact */
    assert_near(out.loss, -242582596.2, df_tol_hand(0.05, 0, 0, 2.5e8));
    assert_near(g[0], 0.0, 0);
    assert_near(g[1], 0.5, 0);
    assert_near(out.ppo_kl, 10.0, 0);
    assert_int_equal(df_policy_loss_clip_cov(&in, &out), 0);
    assert_near(out.loss, -0.1, df_tol_hand(0, 0, 0.5 * 0.2, 1.1)); /* 1 + 0.2f */
    assert_near(g[0], 0.0, 0);
    assert_near(g[1], 0.5, 0);
    assert_near(out.ppo_kl, -10.0, 0);
    assert_near(out.pg_clipfrac, 0.0, 0);
}

static void test_cov_bad_input(void **state)
{
    (void)state;
    df_policy_loss_input in = mk_in(2, kc_off, kc_lp, kc_old, kc_adv, kc_w);
    df_policy_loss_output out = {0};
    assert_error_mentions(df_policy_loss_clip_cov(&in, &out), DF_EINVAL, "clip_cov_ratio");
    assert_error_mentions(df_policy_loss_kl_cov(&in, &out), DF_EINVAL, "kl_cov_ratio");
    in.kl_cov_ratio = 0.1, in.ppo_kl_coef = -1;
    assert_error_mentions(df_policy_loss_kl_cov(&in, &out), DF_EINVAL, "ppo_kl_coef");
    in.ppo_kl_coef = 1, in.clip_cov_ratio = 0.1;
    df_cov_stats st;
    assert_int_equal(df_cov_stats_compute("kl_cov", &in, &st), 0);
    in.cov = &st; /* kl_cov statistics handed to clip_cov */
    assert_error_mentions(df_policy_loss_clip_cov(&in, &out), DF_EINVAL, "kl_cov");
    assert_error_mentions(df_cov_stats_compute("vanilla", &in, &st), DF_EINVAL, "clip_cov, kl_cov");
    in.cov = NULL;
    in.old_log_prob = NULL;
    assert_error_mentions(df_policy_loss_kl_cov(&in, &out), DF_EINVAL, "old_log_prob");
}

/* ====================================================================== cispo, sapo, geo_mean */

/*
 * Exactly representable inputs (clip ratios 0.25, log-ratios in eighths), so the bounds are the
 * hand values' last digit, the float32 outputs' rounding and double arithmetic (df_tol_hand).
 * Tokens: t0 log-ratio 0.125, A = 1; t1 log-ratio -0.5, A = -2; t2 not the model's (mask 0).
 * cispo: r0 = e^0.125 = 1.1331484531 inside [0.75, 1.25]: c0 = r0; r1 = e^-0.5 = 0.6065 < 0.75:
 *   c1 = 0.75 (clipped). l0 = -c0 * 1 * (-1) = c0; l1 = -0.75 * (-2) * (-2) = -3;
 *   loss = 0.5 c0 - 1.5 = -0.9334257735; grad0 = -0.5 c0 = -0.5665742265, grad1 = -0.5 * 0.75 * -2
 *   = 0.75; pg_clipfrac 1/2; ppo_kl = (-0.125 + 0.5) / 2 = 0.1875.
 */
static const int64_t k3_off[] = {0, 3};
static const float k3_lp[] = {-1.0f, -2.0f, -7.0f}, k3_old[] = {-1.125f, -1.5f, -1.0f}, k3_adv[] = {1, -2, 5};
static const float k3_w[] = {0.5f, 0.5f, 0.5f};
static const int32_t k3_mask[] = {1, 1, 0};

/* The three tokens above as one sample. */
static df_policy_loss_input three_tokens(void)
{
    df_policy_loss_input in = mk_in(1, k3_off, k3_lp, k3_old, k3_adv, k3_w);
    in.response_mask = k3_mask;
    return in;
}

static void test_cispo_hand(void **state)
{
    (void)state;
    df_policy_loss_input in = three_tokens();
    in.clip_ratio_low = in.clip_ratio_high = 0.25f;
    float g[3] = {9, 9, 9};
    df_policy_loss_output out = {.grad = g};
    assert_int_equal(df_policy_loss_cispo(&in, &out), 0);
    assert_near(out.loss, -0.9334257735, df_tol_hand(5e-11, 0, 0, 2.1));
    assert_near(g[0], -0.5665742265, df_tol_hand(5e-11, 0.57, 0, 0.57));
    assert_near(g[1], 0.75, 0);
    assert_near(g[2], 0.0, 0);
    assert_near(out.pg_clipfrac, 0.5, 0);
    assert_near(out.pg_clipfrac_lower, 0.0, 0);
    assert_near(out.ppo_kl, 0.1875, 0);
}

/*
 * sapo on test_cispo_hand's tokens, tau_pos 1, tau_neg 1.05:
 *   t0 (A > 0, tau 1): s0 = sigmoid(r0 - 1), l0 = -4 s0; grad0 = -0.5 * 4 s0 (1 - s0) r0
 *   t1 (A < 0, tau 1.05): s1 = sigmoid(1.05 (r1 - 1)), l1 = 2 * 4 s1 / 1.05;
 *   grad1 = -0.5 * -2 * 4 s1 (1 - s1) r1
 *   loss = 0.5 l0 + 0.5 l1 = 0.4503192874; grad0 = -0.5640704984, grad1 = 0.5813678009;
 *   no clip fractions; ppo_kl 0.1875. A temperature <= 0 is refused.
 */
static void test_sapo_hand(void **state)
{
    (void)state;
    df_policy_loss_input in = three_tokens();
    float g[3] = {9, 9, 9};
    df_policy_loss_output out = {.grad = g};
    assert_int_equal(df_policy_loss_sapo(&in, &out), 0);
    assert_near(out.loss, 0.4503192874, df_tol_hand(5e-11, 0, 0, 3.6));
    assert_near(g[0], -0.5640704984, df_tol_hand(5e-11, 0.57, 0, 0.57));
    assert_near(g[1], 0.5813678009, df_tol_hand(5e-11, 0.59, 0, 0.59));
    assert_near(g[2], 0.0, 0);
    assert_near(out.pg_clipfrac, 0.0, 0);
    assert_near(out.ppo_kl, 0.1875, 0);
    /* the temperatures pick by the advantage's sign: exchanged, the loss moves */
    in.tau_pos = 1.05, in.tau_neg = 1.0;
    assert_true(fabs(run_loss(df_policy_loss_sapo, &in, NULL) - 0.4503192874) > 1e-3);
    in.tau_neg = 0;
    assert_error_mentions(df_policy_loss_sapo(&in, &out), DF_EINVAL, "tau_pos and tau_neg must be > 0");
}

/*
 * geo_mean, clip ratios 0.25, seq-mean-token-mean weights of 2 samples:
 * Sample 0 (A = 1, w = 1/8): log-ratios 0.125, -0.5, 0, 0.5 -> m = 0.125, -0.5 (the unclipped
 *   side is the min for A > 0), 0, min(0.5, 0.25) = 0.25 (clipped: no gradient);
 *   L0 = -(4 / (4 + 1e-8)) exp(-0.125 / (4 + 1e-8)); grad = 0.5 L0 / (4 + 1e-8) = -0.1211541537
 *   on t0..t2, 0 on t3.
 * Sample 1 (A = -1, w = 1/4): log-ratios 0.375, -0.125 -> s = -1: m = 0.375 (min(-0.375, -0.25)
 *   negated: the pessimistic side), -0.125 (a tie); L1 = (2 / (2 + 1e-8)) exp(0.25 / (2 + 1e-8));
 *   grad = 0.5 L1 / (2 + 1e-8) = 0.2832871103 on both.
 * loss = 0.5 L0 + 0.5 L1 = 0.0819576073; pg_clipfrac = 2/6 (t1, t3 of A > 0), pg_clipfrac_lower
 * = 1/6 (sample 1's first); ppo_kl = -(0.125 - 0.5 + 0 + 0.5 + 0.375 - 0.125) / 6 = -0.0625.
 */
static void test_geo_mean_hand(void **state)
{
    (void)state;
    const int64_t off[] = {0, 4, 6};
    const float lp[] = {-1.0f, -2.0f, -0.5f, -0.5f, -1.0f, -1.0f};
    const float old[] = {-1.125f, -1.5f, -0.5f, -1.0f, -1.375f, -0.875f};
    const float adv[] = {1, 1, 1, 1, -1, -1};
    float w[6];
    assert_int_equal(df_loss_agg_weights("seq-mean-token-mean", 2, off, 6, 2, w), 0);
    assert_near(w[0], 0.125, 0);
    df_policy_loss_input in = mk_in(2, off, lp, old, adv, w);
    in.clip_ratio_low = in.clip_ratio_high = 0.25f;
    float g[6];
    df_policy_loss_output out = {.grad = g};
    assert_int_equal(df_policy_loss_geo_mean(&in, &out), 0);
    assert_near(out.loss, 0.0819576073, df_tol_hand(5e-11, 0, 0, 2.2));
    for (int t = 0; t < 3; t++)
        assert_near(g[t], -0.1211541537, df_tol_hand(5e-11, 0.13, 0, 0.13));
    assert_near(g[3], 0.0, 0);
    for (int t = 4; t < 6; t++)
        assert_near(g[t], 0.2832871103, df_tol_hand(5e-11, 0.29, 0, 0.29));
    assert_near(out.pg_clipfrac, 2.0 / 6, 0);
    assert_near(out.pg_clipfrac_lower, 1.0 / 6, 0);
    assert_near(out.ppo_kl, -0.0625, df_tol_hand(0, 0, 0, 0.3));
    /* a zero advantage gives its token neither a term in the ratio nor a gradient */
    const float adv0[] = {1, 0, 1, 1, -1, -1};
    in.advantages = adv0;
    assert_int_equal(df_policy_loss_geo_mean(&in, &out), 0);
    assert_near(g[1], 0.0, 0);
}

/* Every loss: no tokens at all (empty responses only) gives 0 and no error. */
static void test_losses_no_tokens(void **state)
{
    (void)state;
    const int64_t off[] = {0, 0, 0};
    const char *names[] = {"gspo", "gpg", "cpgd", "clip_cov", "kl_cov", "cispo", "sapo", "geo_mean"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        df_policy_loss_fn fn;
        assert_int_equal(df_policy_loss_lookup(names[i], &fn), 0);
        df_policy_loss_input in = mk_in(2, off, NULL, NULL, NULL, NULL);
        in.clip_cov_ratio = in.kl_cov_ratio = 0.1;
        df_policy_loss_output out = {.loss = 9, .ppo_kl = 9, .pg_clipfrac = 9};
        assert_int_equal(fn(&in, &out), 0);
        assert_near(out.loss, 0, 0);
        assert_near(out.ppo_kl, 0, 0);
        assert_near(out.pg_clipfrac, 0, 0);
        assert_int_equal(fn(NULL, &out), DF_EINVAL);
        const int64_t bad[] = {0, 2, 1};
        in.offsets = bad;
        assert_int_equal(fn(&in, &out), DF_EINVAL);
    }
}

/* ====================================================================== split property */

/*
 * Six samples (lengths 3, 0, 5, 1, 4, 2; 15 tokens) of pseudo-random data. For every
 * loss and every aggregation mode, the loss and gradient of the whole mini-batch
 * equal the sum over a 3-way micro-batch split and over a 2-way "data-parallel"
 * split, each part weighted with the mini-batch totals (df_loss_agg_weights_ex) and,
 * for clip_cov / kl_cov, selecting with the mini-batch's df_cov_stats.
 */
enum { PN = 6, PT = 15 };
static const int64_t p_off[PN + 1] = {0, 3, 3, 8, 9, 13, 15};

static void fill_split_data(float *lp, float *old, float *adv)
{
    df_rng r;
    df_rng_seed(&r, df_rng_key(42, 1, 2, 3));
    for (int i = 0; i < PN; i++) {
        float a = (float)(df_rng_uniform(&r) * 2 - 1); /* outcome advantage per sample */
        for (int64_t t = p_off[i]; t < p_off[i + 1]; t++) {
            lp[t] = (float)(-3 * df_rng_uniform(&r));
            old[t] = lp[t] + (float)(0.6 * df_rng_uniform(&r) - 0.3);
            adv[t] = a;
        }
    }
}

/* Loss and gradient of samples [s, e) weighted by the mini-batch totals. */
static double part_loss(df_policy_loss_fn fn, const df_policy_loss_input *full, const char *mode, int64_t s,
                        int64_t e, float *grad, double *kl_tok)
{
    int64_t off[PN + 1];
    for (int64_t i = s; i <= e; i++)
        off[i - s] = p_off[i] - p_off[s];
    int64_t base = p_off[s];
    float w[PT];
    assert_int_equal(df_loss_agg_weights_ex(mode, e - s, off, PT, PN, 7, w), 0);
    df_policy_loss_input in = *full;
    in.n = e - s, in.offsets = off, in.log_prob += base, in.old_log_prob += base;
    in.advantages += base, in.weights = w, in.token_base = base;
    df_policy_loss_output out = {.grad = grad + base};
    assert_int_equal(fn(&in, &out), 0);
    *kl_tok += out.ppo_kl * (double)off[e - s]; /* token means recombine by token counts */
    return out.loss;
}

static void check_split(const char *loss, const char *mode)
{
    float lp[PT], old[PT], adv[PT], w[PT], g_full[PT], g_part[PT];
    fill_split_data(lp, old, adv);
    assert_int_equal(df_loss_agg_weights_ex(mode, PN, p_off, PT, PN, 7, w), 0);
    df_policy_loss_fn fn;
    assert_int_equal(df_policy_loss_lookup(loss, &fn), 0);
    df_policy_loss_input in = mk_in(PN, p_off, lp, old, adv, w);
    in.policy_drift_coeff = 0.2, in.cpgd_drift_clip = 0.1;
    in.clip_cov_ratio = 0.2, in.clip_cov_lb = -0.5, in.clip_cov_ub = 5.0, in.seed = 5;
    in.kl_cov_ratio = 0.2, in.ppo_kl_coef = 0.5;
    df_cov_stats st;
    bool cov = !strcmp(loss, "clip_cov") || !strcmp(loss, "kl_cov");
    if (cov) {
        assert_int_equal(df_cov_stats_compute(loss, &in, &st), 0);
        assert_true(st.n_select >= 3); /* the selection matters in this check */
        in.cov = &st;
    }
    df_policy_loss_output out = {.grad = g_full};
    assert_int_equal(fn(&in, &out), 0);
    static const int64_t splits[2][4] = {{0, 2, 3, 6}, {0, 4, 6, 6}}; /* micro-batches; DP halves */
    for (int k = 0; k < 2; k++) {
        double l = 0, kl = 0;
        memset(g_part, 0, sizeof g_part);
        for (int p = 0; p < 3; p++)
            if (splits[k][p + 1] > splits[k][p])
                l += part_loss(fn, &in, mode, splits[k][p], splits[k][p + 1], g_part, &kl);
        /* the parts compute every token's term as the whole does, from the same float32
           weights: the sums differ only in order (twice gamma_{PT} of sum |w l| in double),
           the gradients not at all; the KL means recombine with a few more roundings */
        double abs_kl = 0;
        for (int t = 0; t < PT; t++)
            abs_kl += fabs(log_ratio(&in, t));
        if (fabs(l - out.loss) > 2 * df_tol_gamma(PT + 3, DF_U64) * abs_loss_bound(&in))
            fail_msg("%s / %s split %d: loss %.17g, whole %.17g", loss, mode, k, l, out.loss);
        for (int t = 0; t < PT; t++)
            if (g_part[t] != g_full[t])
                fail_msg("%s / %s split %d: grad[%d] %.9g, whole %.9g", loss, mode, k, t, (double)g_part[t],
                         (double)g_full[t]);
        assert_near(kl / PT, out.ppo_kl, 2 * df_tol_gamma(PT + 8, DF_U64) * abs_kl / PT);
    }
}

static void test_split_property(void **state)
{
    (void)state;
    const char *losses[] = {"vanilla", "gspo", "gpg", "cpgd", "clip_cov", "kl_cov", "cispo", "sapo", "geo_mean"};
    const char *modes[] = {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                           "seq-mean-token-sum-norm"};
    for (size_t i = 0; i < sizeof losses / sizeof *losses; i++)
        for (size_t j = 0; j < 4; j++)
            check_split(losses[i], modes[j]);
}

/* Finite differences of every loss on the split data, every aggregation mode (cispo's gradient is
 * by definition not its loss's derivative: its clipped weight is data). */
static void test_fd_all_losses(void **state)
{
    (void)state;
    const char *losses[] = {"vanilla", "gspo", "gpg", "cpgd", "clip_cov", "kl_cov", "sapo", "geo_mean"};
    const char *modes[] = {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"};
    float lp[PT], old[PT], adv[PT], w[PT];
    fill_split_data(lp, old, adv);
    for (size_t j = 0; j < 3; j++) {
        assert_int_equal(df_loss_agg_weights_ex(modes[j], PN, p_off, PT, PN, 7, w), 0);
        for (size_t i = 0; i < sizeof losses / sizeof *losses; i++) {
            df_policy_loss_fn fn;
            assert_int_equal(df_policy_loss_lookup(losses[i], &fn), 0);
            df_policy_loss_input in = mk_in(PN, p_off, lp, old, adv, w);
            in.policy_drift_coeff = 0.2;
            in.clip_cov_ratio = 0.2, in.clip_cov_lb = -0.5, in.clip_cov_ub = 5.0, in.seed = 5;
            in.kl_cov_ratio = 0.2, in.ppo_kl_coef = 0.5;
            /* cov = NULL: each evaluation selects again, and no token is near enough
             * to the selection boundary for a 1e-3 step to move it (fixed statistics
             * would not do: the last selected token defines the threshold) */
            check_fd(fn, &in);
        }
    }
}

/* TIS in a loss: the weights enter as aggregation weights, so the vanilla loss and
 * its gradient scale token by token (verl multiplies pg_losses by the weight). */
static void test_tis_in_loss(void **state)
{
    (void)state;
    const int64_t off[] = {0, 2};
    const float lp[] = {-1.0f, -2.0f}, old[] = {-1.05f, -2.0f}, ro[] = {-1.55f, -1.5f};
    const float adv[] = {1, -1}, w[] = {0.5f, 0.5f};
    float wt[2], g0[2], g1[2];
    assert_int_equal(df_tis_weights(2, old, ro, 1.5, w, wt), 0); /* [0.5 * 1.5 (capped), 0.5 e^-0.5] */
    /* float32 weights of exact log-ratios (t0 is capped whatever -1.05f, -1.55f round to) */
    assert_near(wt[0], 0.75, df_tol_hand(0, 0.75, 0, 0.75));
    assert_near(wt[1], 0.5 * 0.606530660, df_tol_hand(0.5 * 5e-10, 0.31, 0, 0.31));
    df_policy_loss_input in = mk_in(1, off, lp, old, adv, w);
    double l0 = run_loss(df_policy_loss_vanilla, &in, g0);
    in.weights = wt;
    double l1 = run_loss(df_policy_loss_vanilla, &in, g1);
    /* per-token losses: -1 e^0.05 = -1.051271096 and 1 * 1 = 1; t0's d = 0.05 is off by
       1.05 DF_U32 (-1.05f), times w e^d; wt[1] enters l1 as a float32 (cond 0.31); the
       ratios of float32 gradients: two roundings, the log-ratio's error cancels */
    assert_near(l0, 0.5 * (-1.051271096 + 1), df_tol_hand(0.5 * 5e-10, 0, 0.5 * 1.06 * 1.05, 1.1));
    assert_near(l1, 0.75 * -1.051271096 + 0.5 * 0.606530660,
                df_tol_hand(1.25 * 5e-10, 0, 0.75 * 1.06 * 1.05 + 0.31, 1.1));
    assert_near(g1[0] / g0[0], 1.5, df_tol_hand(0, 2 * 1.5, 0, 1.5));
    assert_near(g1[1] / g0[1], 0.606530660, df_tol_hand(5e-10, 0.61, 0, 0.61));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_names),   cmocka_unit_test(test_gspo_hand),
        cmocka_unit_test(test_cispo_hand),       cmocka_unit_test(test_sapo_hand),
        cmocka_unit_test(test_geo_mean_hand),
        cmocka_unit_test(test_gspo_extreme),     cmocka_unit_test(test_gspo_fd),
        cmocka_unit_test(test_gpg_hand),         cmocka_unit_test(test_cpgd_hand),
        cmocka_unit_test(test_cpgd_edges),       cmocka_unit_test(test_cpgd_fd),
        cmocka_unit_test(test_clip_cov_hand),    cmocka_unit_test(test_kl_cov_hand),
        cmocka_unit_test(test_cov_all_equal),    cmocka_unit_test(test_clip_cov_random_choice),
        cmocka_unit_test(test_cov_extreme),      cmocka_unit_test(test_cov_bad_input),
        cmocka_unit_test(test_losses_no_tokens), cmocka_unit_test(test_split_property),
        cmocka_unit_test(test_fd_all_losses),    cmocka_unit_test(test_tis_in_loss),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
