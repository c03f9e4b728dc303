/*
 * The gradient each trainable role applies, against finite differences of its whole
 * training loss (step 0: the layer that assembles the losses, which the
 * kernels' own tests do not reach). The actor's
 *   L = sum_t w_t tis_t pg_t  -  entropy_coeff sum_t w_t H_t  +  kl_loss_coef sum_t w_t kl_t
 * with every coefficient non-zero (and not 1), policy losses vanilla, gspo, gpg and cpgd,
 * every kl_loss_type, every loss_agg_mode and TIS weights; the critic's clipped value loss
 *   L = 0.5 sum_t w_t max((v_t - R_t)^2, (clamp(v_t, V_t - c, V_t + c) - R_t)^2)
 * in every loss_agg_mode and two clip ranges.
 *
 * Only the roles' entry points are used (engine/actor.h, engine/critic.h), so the test
 * pins their behaviour, not their internals:
 *   - the gradient: one df_actor_update_policy / df_critic_update with AdamW made
 *     invertible (beta1 = beta2 = 0, weight decay 0, no clipping, eps = lr = 2^8): the
 *     step is lr g / (|g| + eps), so g is read back from the weights' move
 *     (recover_grad). That is the gradient the optimizer receives, after the
 *     micro-batch accumulation (micro-batches of 3 rows here) and whatever else the role
 *     does on the way; no accessor into the role is needed;
 *   - the reference: the same loss assembled here in double from algo.h's documented
 *     formulas (pg_token, kl_token, agg_weights, critic_loss), on the log-probs and
 *     entropies of df_actor_compute_log_prob (the values of df_critic_compute_values), at
 *     theta + s p for s = +-1, +-2, +-4, p along N_DIRS random directions, along the
 *     gradient itself, and along the coordinate of largest |g| of every tensor kind;
 *   - the update's loss metrics (actor/pg_loss, entropy_loss, kl_loss; critic/vf_loss,
 *     vpred_mean, vf_clipfrac) against the same terms at theta.
 *
 * Tolerance (tests/tolerance.h, docs/testing.md): |R - g.p| <= B with R the Richardson
 * value (4 D(1) - D(2)) / 3 of the central differences D(s) = (f(s) - f(-s)) / 2s and B
 * the sum of
 *   truncation  |R(1) - R(2)| (R(2) from D(2), D(4)): 15 times R(1)'s h^4 term, taken
 *               whole (the estimate of test_ops.c's fd_slope and test_value_head.c);
 *   rounding    1.5 ferr: each loss value is within ferr of the exact loss, ferr = sum_t
 *               |dL/dlogp_t| e_t (+ the curvature's e_t^2 term) over per-token bounds e_t of
 *               one float forward pass from that row's own magnitudes (tb_teacher_forced;
 *               entropies likewise), plus the double sums; the steps themselves are exact
 *               (below), so there is no midpoint shift;
 *   gradient    |dg . p| <= ||dg|| ||p||: the backward's rounding (probabilistic, Higham &
 *               Mary, over tb_grad_chain), the micro-batches' sum, the float loss
 *               coefficients and the softmax weights recomputed from rounded logits,
 *               relative to the magnitude of the gradient's per-token terms
 *               (|dL/dlogp_t| ||grad logp_t|| + entropy_coeff w_t ||grad H_t||, the norms
 *               measured by one-token updates as tests/testtrain.h does), plus the
 *               coefficients' own sensitivity to the update's rounded log-probs;
 *   read-back   the AdamW arithmetic and the weights' rounding (recover_grad), and the
 *               double dot product g . p.
 * The weights and the steps p sit on a grid of 2^-20 with |theta + s p| < 16, so every
 * theta + s p is an exact float.
 *
 * The loss is smooth only away from the clip kinks: the data put every token well away
 * from them (the log-ratio classes below), and every evaluation checks that no token
 * changed branch (such a failure is a problem of the test's data and says so).
 *
 * Teeth: each test also requires that, on some slope, each part of the loss (pg,
 * entropy, KL; the critic's loss) is more than twice that slope's bound, so that
 * dropping or flipping any one term fails it. Deliberate bugs it was run against (each
 * fails it; the list and the observed errors are in the notes of the change): the
 * entropy bonus's sign in src/engine/actor.c, the KL gradient's sign in src/algo/kl.c,
 * either gradient dropped or its coefficient dropped, TIS weights dropped or applied to
 * the KL term, aggregation weights normalised per micro-batch or without 1/len or 1/S,
 * the policy losses' gradient signs and clips, and the critic's sign, clip, factor 1/2
 * and normaliser.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "testtrain.h"
#include "testbounds.h"
#include "tolerance.h"

#include "distflow/algo_desc.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distflow/metrics.h"
#include "engine/actor.h"
#include "engine/critic.h"

/* Weights and steps are multiples of GRID below 16 in magnitude: exact floats, exact sums. */
#define GRID 0x1p-20
/* AdamW's eps and lr: a power of two (exact step size), far above every |g| (so the step is
   linear in g to within |g| / eps and the read-back well conditioned). */
#define INV_EPS 256.0
/* The FD steps are s p, s = 1, 2, 4; p moves each tensor by H_REL times its RMS along a direction,
   or one coordinate by H_COORD times its tensor's RMS. */
#define H_REL 0.005
#define H_COORD 0.05
/* The micro model's matrices are scaled by this (std 0.02 -> 0.08): logits below ~2.4 in magnitude. */
#define MAT_SCALE 4.0
/* The critic's steps relative to the actor's: its values move faster than the log-probs, and its
   clip range (0.25) leaves less room. */
#define CRITIC_STEP 0.4
/* Random directions per configuration. */
#define N_DIRS 6

static float on_grid(double x)
{
    double q = nearbyint(x / GRID) * GRID;
    assert_true(fabs(q) < 16.0);
    return (float)q;
}

static bool debug(void)
{
    return getenv("DF_TOL_DEBUG") != NULL;
}

/* The micro model (vocab 40, hidden 16, 2 layers) with its matrices scaled by MAT_SCALE (peaked
   next-token distributions, so that the entropy has a real gradient), RMSNorm weights 1 + N(0, 0.2^2) and
   biases N(0, 0.1^2) (so that their gradients are not special), all on the grid. `value`: the
   critic's value model (head drawn from seed + 1). */
static df_model *grid_model(uint64_t seed, bool value)
{
    df_model *m = df_test_micro_model(seed);
    if (value)
        assert_int_equal(df_model_to_value_model(&m, seed + 1), 0);
    df_rng r;
    df_rng_seed(&r, df_rng_key(seed, 0x9d, 0, 0));
    for (int k = 0; k < m->n_tensors; k++) {
        const df_param_desc *d = &m->tensors[k];
        bool bias = strstr(d->name, "bias") != NULL;
        for (int64_t i = d->offset; i < d->offset + d->numel; i++) {
            double x = m->params[i];
            if (d->ndim == 2)
                x *= MAT_SCALE;
            else
                x = bias ? 0.1 * df_rng_normal(&r) : 1 + 0.2 * df_rng_normal(&r);
            m->params[i] = on_grid(x);
        }
    }
    return m;
}

/* RMS of each tensor of m: the scale of the directions. */
static void tensor_rms(const df_model *m, double *rms)
{
    for (int k = 0; k < m->n_tensors; k++) {
        const df_param_desc *d = &m->tensors[k];
        double s = 0;
        for (int64_t i = d->offset; i < d->offset + d->numel; i++)
            s += (double)m->params[i] * m->params[i];
        rms[k] = sqrt(s / (double)d->numel);
    }
}

/*
 * The gradient the optimizer received in the update that took `before` to `after`: AdamW with
 * beta1 = beta2 = 0, weight decay 0, lr = eps = E at its first step computes (optim.h, t = 1)
 *   m = g, v = fl(g^2), p' = fl(p - fl(E fl(g / fl(sqrt(v) + E))))
 * so q = (p - p') / E = g / (|g| + E) up to the roundings, and g = q E / (1 - |q|). Per entry:
 * sqrt(fl(g^2)) = |g| (1 + 1.5u), the sum, the quotient (the product by E is exact) and p' round,
 * so |dq| <= gamma_4 |q| + gamma_1 |p'| / E (p - p' itself is exact in double), carried by
 * dg / dq = E / (1 - |q|)^2 (at its largest over [q - dq, q + dq]); the double arithmetic here adds
 * gamma_4(u64) |g|. err[i] receives that bound.
 */
static void recover_grad(const df_model *before, const df_model *after, double *g, double *err)
{
    for (int64_t i = 0; i < before->n_params; i++) {
        double q = ((double)before->params[i] - after->params[i]) / INV_EPS;
        assert_true(fabs(q) < 0.5);
        double den = 1 - fabs(q);
        g[i] = q * INV_EPS / den;
        double dq = df_tol_gamma(4, DF_U32) * fabs(q) +
                    df_tol_gamma(1, DF_U32) * fabs((double)after->params[i]) / INV_EPS;
        err[i] = dq * INV_EPS / ((den - dq) * (den - dq)) + df_tol_gamma(4, DF_U64) * fabs(g[i]);
    }
}

static df_core_optim invertible_optim(void)
{
    df_core_optim o = {
        .lr = INV_EPS, .weight_decay = 0, .beta1 = 0, .beta2 = 0, .adam_eps = INV_EPS, .grad_clip = 0};
    return o;
}

/* ---- finite differences along a direction ------------------------------------------------- */

/* The loss at the model's current weights, ferr its rounding bound; false when a token changed
   branch (then *what names it). */
typedef bool (*loss_eval)(void *ctx, double *loss, double *ferr, double *parts, const char **what);

enum { N_PARTS = 3 }; /* actor: pg, entropy, kl terms; critic: the loss in parts[0] */

typedef struct fd_result {
    double R;             /* Richardson estimate of dL/ds at s = 0 */
    double trunc, round;  /* its truncation estimate and rounding bound */
    double part[N_PARTS]; /* the same estimate of each part of the loss */
} fd_result;

/* Slope of the loss along p at theta0 (m's weights are theta0 + s p during the evaluations, theta0
   after). */
static fd_result fd_slope(loss_eval f, void *ctx, df_model *m, const float *theta0, const float *p)
{
    double D[3], Dp[3][N_PARTS], ferr_max = 0, fmax_abs = 0;
    for (int k = 0; k < 3; k++) {
        double s = (double)(1 << k), l[2], parts[2][N_PARTS];
        for (int side = 0; side < 2; side++) {
            double sg = side ? -s : s;
            for (int64_t i = 0; i < m->n_params; i++) {
                double x = (double)theta0[i] + sg * p[i];
                m->params[i] = (float)x;
                assert_true((double)m->params[i] == x); /* the grid: exact steps */
            }
            double ferr;
            const char *what = NULL;
            if (!f(ctx, &l[side], &ferr, parts[side], &what))
                fail_msg("at step %+g the finite differences cross a kink of the loss (%s): the test's data "
                         "sit too close to a clip boundary for H_REL",
                         sg, what);
            ferr_max = fmax(ferr_max, ferr);
            fmax_abs = fmax(fmax_abs, fabs(l[side]));
        }
        D[k] = (l[0] - l[1]) / (2 * s);
        for (int j = 0; j < N_PARTS; j++)
            Dp[k][j] = (parts[0][j] - parts[1][j]) / (2 * s);
    }
    memcpy(m->params, theta0, (size_t)m->n_params * sizeof(float));
    fd_result r;
    r.R = (4 * D[0] - D[1]) / 3;
    r.trunc = fabs(r.R - (4 * D[1] - D[2]) / 3);
    /* (4 ferr / 1 + ferr / 2) / 3, D(s) being within ferr / s; and the double arithmetic of D and R */
    r.round = 1.5 * ferr_max + df_tol_gamma(8, DF_U64) * fmax_abs;
    for (int j = 0; j < N_PARTS; j++)
        r.part[j] = (4 * Dp[0][j] - Dp[1][j]) / 3;
    return r;
}

/* ---- the actor's loss, assembled here ----------------------------------------------------- */

typedef struct actor_case {
    const char *policy_loss, *kl_type, *agg;
} actor_case;

typedef struct actor_fd {
    df_actor *ev;    /* a frozen actor: its model's weights are the FD's */
    df_batch **rows; /* one-row batches of prompt_ids, response_ids */
    int64_t n, T;    /* rows, response tokens */
    const int64_t *ro;
    const float *old, *ref, *adv, *rollout;
    const df_actor_loss *l;
    double cap;      /* tis_imp_ratio_cap */
    double *w, *tis; /* aggregation and TIS weights, exact */
    double *wpg;     /* the policy term's aggregation weights: w, or the loss's own mode's (gspo) */
    float temp;
    df_acts *acts;  /* for the error bounds' own forward of each row (tb_teacher_forced) */
    double eps;     /* tb_logp_eps: relative rounding of a log-prob's chain */
    float *lpb;     /* [L] scratch */
    double *errb;   /* [L] scratch */
    double zmax0;   /* at theta0: the largest logit magnitude behind any row (max_v zm_v) */
    double *err0;   /* at theta0: each log-prob's error bound */
    double dlp_max; /* largest |logp - logp at theta0| seen (how near the kinks the steps go) */
    double perr[N_PARTS], pmag[N_PARTS]; /* at theta0: error bound and magnitude of the pg term, the
                                            entropy sum_t w_t H_t and the KL sum_t w_t kl_t */
    bool at_theta0; /* this evaluation records the sg values, signature and coefficients */
    double *lp0;    /* log-probs at theta0 (gspo's stop-gradient values) */
    double *seq0;   /* gspo: each sample's mean log-ratio at theta0 */
    int *sig0;      /* branch of every token at theta0 */
    double *c, *dc; /* at theta0: dL/dlogp_t (pg and kl) and a bound on |d^2 L / dlogp_t^2| */
    double *cent;   /* at theta0: |dL/dH_t| = entropy_coeff w_t */
    char what[160];
} actor_fd;

/* Policy loss of one token (unweighted), its derivative in logp (*c) and a bound on the second
   derivative (*dc), branch id in *br (algo.h's formulas). seq: gspo's stop-gradient mean log-ratio
   of the token's sample, lp0: the token's stop-gradient log-prob. */
static double pg_token(const df_actor_loss *l, double lp, double old, double A, double seq, double lp0,
                       double *c, double *dc, int *br)
{
    const double lo = 1 - l->clip_ratio_low, hi = 1 + l->clip_ratio_high;
    *c = *dc = 0;
    *br = 0;
    if (!strcmp(l->policy_loss, "vanilla")) {
        double d = fmin(fmax(lp - old, -20), 20), r = exp(d);
        double l1 = -A * r, l2 = -A * fmin(fmax(r, lo), hi), lc = fmax(l1, l2);
        if (A < 0 && lc > -A * l->clip_ratio_c) {
            *br = 2;
            return -A * l->clip_ratio_c;
        }
        *br = l2 > l1;
        if (!*br)
            *c = -A * r, *dc = fabs(A) * r;
        return lc;
    }
    if (!strcmp(l->policy_loss, "gspo")) { /* verl's token form: s = exp(lp - sg[lp] + sg[seq]) */
        double s = exp(fmin(lp - lp0 + seq, 10));
        double l1 = -A * s, l2 = -A * fmin(fmax(s, lo), hi);
        *br = l2 > l1;
        if (!*br)
            *c = -A * s, *dc = fabs(A) * s;
        return fmax(l1, l2);
    }
    if (!strcmp(l->policy_loss, "gpg")) {
        *c = -A;
        return -A * lp;
    }
    assert_string_equal(l->policy_loss, "cpgd");
    double d = fmin(fmax(lp - old, -20), 20), pg = 0;
    double up = log(hi), down = l->clip_ratio_low < 1 ? log(lo) : -INFINITY;
    if (A > 0) {
        *br = d > up;
        pg = -A * fmin(d, up);
    } else if (A < 0) {
        *br = d < down;
        pg = -A * fmax(d, down);
    }
    if (!*br)
        *c = -A;
    /* drift e^d - 1 - d, linear (slope cc) past e^d - 1 = cc */
    double cc = l->cpgd_drift_clip, a = l->policy_drift_coeff, drift;
    if (cc > 0 && exp(d) - 1 > cc) {
        double d0 = log(1 + cc);
        drift = (cc - d0) + cc * (d - d0);
        *c += a * cc;
        *br += 10;
    } else {
        drift = exp(d) - 1 - d;
        *c += a * (exp(d) - 1);
        *dc = a * exp(d);
    }
    return pg + a * drift;
}

/* KL term of one token: value, derivative, second-derivative bound, branch (algo.h df_kl_penalty). */
static double kl_token(const char *type, double lp, double ref, double *c, double *dc, int *br)
{
    double x = lp - ref;
    *br = 0;
    if (!strcmp(type, "kl") || !strcmp(type, "k1")) {
        *c = 1, *dc = 0;
        return x;
    }
    if (!strcmp(type, "abs")) {
        *c = x > 0 ? 1 : -1, *dc = 0, *br = x > 0;
        return fabs(x);
    }
    if (!strcmp(type, "mse") || !strcmp(type, "k2")) {
        *c = x, *dc = 1;
        return 0.5 * x * x;
    }
    assert_true(!strcmp(type, "low_var_kl") || !strcmp(type, "k3"));
    double y = -x; /* |x| stays far below the clamps (20, and 10 on the value) */
    assert_true(fabs(y) < 2);
    *c = 1 - exp(y), *dc = exp(y);
    return exp(y) - y - 1;
}

/* max_v zm_v = max_v sum_e |h_e W_ve| / T for output row j of the last forward in a: the magnitude
   behind every logit of the row (tb_row_scale's second term). */
static double row_zmax(const df_model *m, const df_acts *a, int64_t j, float T)
{
    const int64_t H = m->cfg.hidden_size, V = m->cfg.vocab_size;
    const float *h = a->xnf + j * H;
    double zmax = 0;
    for (int64_t v = 0; v < V; v++) {
        double s = 0;
        for (int64_t e = 0; e < H; e++)
            s += fabs((double)h[e] * m->w.lm_head[v * H + e]);
        zmax = fmax(zmax, s / T);
    }
    return zmax;
}

/* The actor's total loss at the current weights of f->ev (see the file's comment). */
static bool actor_loss(void *ctx, double *loss, double *ferr, double *parts, const char **what)
{
    actor_fd *f = ctx;
    const df_actor_loss *l = f->l;
    double pg = 0, ent = 0, kl = 0, mag = 0, err = 0, perr[N_PARTS] = {0}, pmag[N_PARTS] = {0};
    bool ok = true;
    for (int64_t i = 0; i < f->n; i++) {
        int64_t a = f->ro[i], len = f->ro[i + 1] - a;
        if (!len)
            continue;
        double H;
        if (df_actor_compute_log_prob(f->ev, f->rows[i], "lp", &H))
            fail_msg("%s", df_last_error());
        const float *lp = df_batch_column(f->rows[i], "lp")->data;
        /* the same row's forward again, for its magnitudes: each log-prob within errb[j]
           (tb_teacher_forced), each entropy within 2 eps max_v zm_v + 2 u H (lse and E_p z each
           within eps max_v zm_v, as a log-prob's lse is) */
        int64_t np, nr;
        const int32_t *pt = df_batch_tok_i32(f->rows[i], "prompt_ids", 0, &np),
                      *rt = df_batch_tok_i32(f->rows[i], "response_ids", 0, &nr);
        const df_model *m = df_actor_model(f->ev);
        tb_teacher_forced(m, f->acts, pt, np, rt, nr, f->temp, f->eps, f->lpb, f->errb);
        double herr = 2 * DF_U32 * (double)len * fabs(H);
        for (int64_t j = 0; j < len; j++) {
            double zm = row_zmax(m, f->acts, j, f->temp);
            herr += 2 * f->eps * zm;
            if (f->at_theta0)
                f->zmax0 = fmax(f->zmax0, zm);
        }
        if (f->at_theta0) {
            double s = 0;
            for (int64_t j = 0; j < len; j++)
                f->lp0[a + j] = lp[j], s += (double)lp[j] - f->old[a + j];
            f->seq0[i] = s / (double)len;
        }
        /* entropy: sum_t w_t H_t = w_i len_i mean_t H_t, the mean within e of the exact one */
        double we = f->w[a] * (double)len;
        ent += we * H;
        err += l->entropy_coeff * f->w[a] * herr;
        mag += l->entropy_coeff * we * fabs(H);
        perr[1] += f->w[a] * herr, pmag[1] += we * fabs(H);
        for (int64_t j = 0; j < len; j++) {
            int64_t t = a + j;
            double c1, d1, c2, d2;
            int b1, b2;
            double p = pg_token(l, lp[j], f->old[t], f->adv[t], f->seq0[i], f->lp0[t], &c1, &d1, &b1);
            double k = kl_token(l->kl_loss_type, lp[j], f->ref[t], &c2, &d2, &b2);
            double wp = f->wpg[t] * f->tis[t], wk = f->w[t] * l->kl_loss_coef;
            pg += wp * p;
            kl += f->w[t] * k;
            double ct = fabs(wp * c1) + fabs(wk * c2), dct = wp * d1 + wk * d2;
            /* |L(lp + de) - L(lp)| <= |c| e + dc e^2 (dc bounds the curvature within e, the
               exponentials moving by e^e < 2 there) */
            double e = f->errb[j];
            err += (ct + dct * e) * e;
            mag += fabs(wp * p) + fabs(wk * k);
            perr[0] += (fabs(wp * c1) + wp * d1 * e) * e, pmag[0] += fabs(wp * p);
            perr[2] += f->w[t] * (fabs(c2) + d2 * e) * e, pmag[2] += f->w[t] * fabs(k);
            int sig = b1 * 2 + b2;
            f->dlp_max = fmax(f->dlp_max, fabs(lp[j] - f->lp0[t]));
            if (f->at_theta0) {
                f->sig0[t] = sig;
                f->c[t] = wp * c1 + wk * c2;
                f->dc[t] = dct;
                f->cent[t] = l->entropy_coeff * f->w[t];
                f->err0[t] = f->errb[j];
            } else if (sig != f->sig0[t] && ok) {
                snprintf(f->what, sizeof f->what,
                         "token %lld: branch %d, at theta0 %d; its log-prob moved by %.3g", (long long)t, sig,
                         f->sig0[t], lp[j] - f->lp0[t]);
                *what = f->what;
                ok = false;
            }
        }
    }
    parts[0] = pg, parts[1] = -l->entropy_coeff * ent, parts[2] = l->kl_loss_coef * kl;
    if (f->at_theta0)
        for (int j = 0; j < N_PARTS; j++)
            f->perr[j] = perr[j], f->pmag[j] = pmag[j];
    *loss = pg - l->entropy_coeff * ent + l->kl_loss_coef * kl;
    /* the double sums: ~2 T terms, a few roundings each */
    *ferr = err + df_tol_gamma(4 * (double)f->T + 16, DF_U64) * mag;
    return ok;
}

/* ---- the actor's data --------------------------------------------------------------------- */

enum { G_ROWS = 8, MICRO = 3, NORM_LEN = 8 };

/* Per-sample log-ratio classes lp0 - old, with clip ratios 0.3 / 0.4 (kinks at log 0.7 = -0.36,
   log 1.4 = 0.34) and dual clip c = 3 (log 3 = 1.10, also cpgd's drift clip 2): inside the clip
   range, above it (A > 0 clipped, A < 0 unclipped), below it, above it by more (and below log 3),
   above the dual clip. Every class sits >= 0.3 from every kink. */
static const double k_ratio_class[] = {0.0, 0.75, -0.8, 0.75, 1.5, 0.0, -0.8, 1.5};

/* The PPO batch at theta0 of model m: synthetic rows (df_test_synth_batch), old log-probs from
   the classes above (+- 0.02 per token), advantages of either sign with |A| in [0.5, 1.5], ref
   log-probs 0.2 to 0.4 from the log-probs (either side: away from abs's kink at 0), rollout
   log-probs that give TIS weights e^-0.3, e^0.15 and the cap (e^0.9 > 1.5). */
static df_batch *actor_batch(const df_model *m, float temperature)
{
    df_batch *b = df_test_synth_batch(21, G_ROWS);
    df_model *c;
    df_actor *a;
    df_actor_params p = {
        .optim = invertible_optim(), .logprob_micro_batch_size = 1, .temperature = temperature};
    assert_int_equal(df_model_clone(m, &c), 0);
    assert_int_equal(df_actor_create(c, &p, false, &a), 0);
    assert_int_equal(df_actor_compute_log_prob(a, b, "lp0", NULL), 0);
    df_actor_free(a);
    float *old, *ref, *adv, *ro;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "old_log_probs", "response_ids", &old), 0);
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "ref_log_prob", "response_ids", &ref), 0);
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "advantages", "response_ids", &adv), 0);
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "rollout_log_probs", "response_ids", &ro), 0);
    const float *lp = df_batch_column(b, "lp0")->data;
    const int64_t *off = df_batch_offsets(b, "response_ids");
    df_rng r;
    df_rng_seed(&r, df_rng_key(22, 0, 0, 0));
    static const double tis_log[] = {-0.3, 0.15, 0.9};
    for (int64_t i = 0; i < G_ROWS; i++)
        for (int64_t t = off[i]; t < off[i + 1]; t++) {
            old[t] = (float)(lp[t] - k_ratio_class[i] - 0.02 * (2 * df_rng_uniform(&r) - 1));
            adv[t] = (float)((df_rng_below(&r, 2) ? 1 : -1) * (0.5 + df_rng_uniform(&r)));
            ref[t] = (float)(lp[t] - (df_rng_below(&r, 2) ? 1 : -1) * (0.2 + 0.2 * df_rng_uniform(&r)));
            ro[t] = (float)(old[t] - tis_log[t % 3]);
        }
    return b;
}

static df_actor_params actor_params(const actor_case *k, float temperature)
{
    df_actor_params p = {.optim = invertible_optim(),
                         .mini_batch_size = 0,
                         .micro_batch_size = MICRO,
                         .logprob_micro_batch_size = 1,
                         .loss = {.policy_loss = k->policy_loss,
                                  .loss_agg_mode = k->agg,
                                  .clip_ratio_low = 0.3,
                                  .clip_ratio_high = 0.4,
                                  .clip_ratio_c = 3.0,
                                  .entropy_coeff = 1.5,
                                  .kl_loss_coef = 1.5,
                                  .kl_loss_type = k->kl_type,
                                  .ppo_epochs = 1,
                                  .loss_agg_norm_length = NORM_LEN,
                                  .policy_drift_coeff = 0.5,
                                  .cpgd_drift_clip = 2.0},
                         .use_kl_loss = true,
                         .tis_imp_ratio_cap = 1.5,
                         .temperature = temperature};
    return p;
}

/* Exact aggregation weights of the whole batch as one mini-batch (algo.h df_loss_agg_weights_ex; verl
   agg_loss at b178a3cd): S counts the responses that have tokens (verl leaves fully masked rows out,
   and df_test_synth_batch makes some responses empty); seq-mean-token-sum-norm is verl's token sum
   over NORM_LEN, -seqavg that averaged over the S responses. */
static void agg_weights(const char *mode, int64_t n, const int64_t *ro, double *w)
{
    double T = (double)ro[n], S = 0;
    for (int64_t i = 0; i < n; i++)
        S += ro[i + 1] > ro[i];
    for (int64_t i = 0; i < n; i++)
        for (int64_t t = ro[i]; t < ro[i + 1]; t++) {
            double len = (double)(ro[i + 1] - ro[i]);
            if (!strcmp(mode, "token-mean"))
                w[t] = 1 / T;
            else if (!strcmp(mode, "seq-mean-token-mean"))
                w[t] = 1 / (S * len);
            else if (!strcmp(mode, "seq-mean-token-sum-norm"))
                w[t] = 1.0 / NORM_LEN;
            else if (!strcmp(mode, "seq-mean-token-sum-norm-seqavg"))
                w[t] = 1 / (S * NORM_LEN);
            else
                fail_msg("mode %s", mode);
        }
}

/* ---- the comparison ----------------------------------------------------------------------- */

/* What bounds a comparison besides the FD's own error: the gradient's (per unit ||p||_2) and the
   read-back's (per entry). */
typedef struct grad_bound {
    double per_norm; /* ||g - g_exact||_2 */
    const double *rec;
    double *move; /* the loss's largest output move (log-prob, value), reset per slope: debug output */
} grad_bound;

typedef struct check_stats {
    double worst;          /* max observed / bound */
    double teeth[N_PARTS]; /* max over slopes of |part slope| / bound (merged: the least over cases) */
    int n;
} check_stats;

static void merge_stats(check_stats *st, const check_stats *one)
{
    st->worst = fmax(st->worst, one->worst);
    for (int j = 0; j < N_PARTS; j++)
        st->teeth[j] = st->n ? fmin(st->teeth[j], one->teeth[j]) : one->teeth[j];
    st->n += one->n;
}

/* One direction: the FD slope against g . p. */
static void check_dir(loss_eval f, void *ctx, df_model *m, const float *theta0, const float *p,
                      const double *g, const grad_bound *gb, const char *label, check_stats *st)
{
    *gb->move = 0;
    fd_result r = fd_slope(f, ctx, m, theta0, p);
    double gp = 0, pn = 0, rec = 0, gabs = 0;
    for (int64_t i = 0; i < m->n_params; i++) {
        gp += g[i] * p[i];
        pn += (double)p[i] * p[i];
        rec += fabs((double)p[i]) * gb->rec[i];
        gabs += fabs(g[i] * p[i]);
    }
    double bound =
        r.trunc + r.round + gb->per_norm * sqrt(pn) + rec + df_tol_gamma(m->n_params, DF_U64) * gabs;
    double err = fabs(r.R - gp);
    if (debug())
        print_message("  %-40s |p| %.2e move %.3f g.p %+.6e fd %+.6e err %.2e bound %.2e (trunc %.1e round "
                      "%.1e grad %.1e rec "
                      "%.1e) parts %+.2e %+.2e %+.2e\n",
                      label, sqrt(pn), *gb->move, gp, r.R, err, bound, r.trunc, r.round,
                      gb->per_norm * sqrt(pn), rec, r.part[0], r.part[1], r.part[2]);
    if (!(err <= bound))
        fail_msg(
            "%s: gradient . p = %.9g, finite difference %.9g: error %.3g above its bound %.3g (truncation "
            "%.3g, rounding %.3g, gradient %.3g, read-back %.3g)",
            label, gp, r.R, err, bound, r.trunc, r.round, gb->per_norm * sqrt(pn), rec);
    st->worst = fmax(st->worst, err / bound);
    for (int j = 0; j < N_PARTS; j++)
        st->teeth[j] = fmax(st->teeth[j], fabs(r.part[j]) / bound);
    st->n++;
}

/* N_DIRS random directions (each tensor's entries N(0, (H_REL rms)^2)), the gradient's own direction
   (each tensor's part scaled to H_REL rms / 10: all its moves add up) and, for every tensor kind (the first
   layer's tensors and the others), the coordinate of the largest |g| (a step of H_COORD times the tensor's
   RMS). */
static void check_all(loss_eval f, void *ctx, df_model *m, const double *g, const grad_bound *gb, double step,
                      const char *label, uint64_t seed, check_stats *st)
{
    const int64_t n = m->n_params;
    float *theta0 = malloc((size_t)n * sizeof(float)), *p = malloc((size_t)n * sizeof(float));
    double *rms = malloc((size_t)m->n_tensors * sizeof(double));
    memcpy(theta0, m->params, (size_t)n * sizeof(float));
    tensor_rms(m, rms);
    df_rng r;
    char name[256];
    for (int d = 0; d <= N_DIRS; d++) {
        df_rng_seed(&r, df_rng_key(seed, 0xd1, (uint64_t)d, 0));
        memset(p, 0, (size_t)n * sizeof(float)); /* the layout pads between tensors */
        for (int k = 0; k < m->n_tensors; k++) {
            const df_param_desc *t = &m->tensors[k];
            double gr = 0;
            for (int64_t i = t->offset; i < t->offset + t->numel; i++)
                gr += g[i] * g[i];
            gr = sqrt(gr / (double)t->numel);
            for (int64_t i = t->offset; i < t->offset + t->numel; i++)
                p[i] = on_grid(step * H_REL * rms[k] *
                               (d < N_DIRS ? df_rng_normal(&r)
                                : gr > 0   ? 0.1 * g[i] / gr
                                           : 0));
        }
        if (d < N_DIRS)
            snprintf(name, sizeof name, "%s, direction %d", label, d);
        else
            snprintf(name, sizeof name, "%s, along the gradient", label);
        check_dir(f, ctx, m, theta0, p, g, gb, name, st);
    }
    for (int k = 0; k < m->n_tensors; k++) {
        const df_param_desc *t = &m->tensors[k];
        if (!strncmp(t->name, "model.layers.", 13) && strncmp(t->name, "model.layers.0.", 15))
            continue; /* one layer's kinds */
        int64_t best = t->offset;
        for (int64_t i = t->offset; i < t->offset + t->numel; i++)
            if (fabs(g[i]) > fabs(g[best]))
                best = i;
        memset(p, 0, (size_t)n * sizeof(float));
        p[best] = on_grid(step * H_COORD * rms[k]);
        snprintf(name, sizeof name, "%s, %s[%lld]", label, t->name, (long long)(best - t->offset));
        check_dir(f, ctx, m, theta0, p, g, gb, name, st);
    }
    free(theta0), free(p), free(rms);
}

/* ---- the actor ---------------------------------------------------------------------------- */

/* ||grad H_t||_2 for every response token of b: the gradient norm of an update whose only term is
   -1 x the token's entropy (gpg with advantage 0, entropy_coeff 1, one token). */
static void entropy_grad_norms(const df_model *m, const df_batch *b, float temperature, double *K)
{
    df_batch *x = NULL;
    float *adv;
    if (df_batch_slice(b, 0, df_batch_size(b), &x) ||
        df_batch_alloc_tok_f32_like(x, "advantages", "response_ids", &adv))
        fail_msg("%s", df_last_error());
    for (int64_t t = 0; t < df_batch_offsets(x, "response_ids")[df_batch_size(x)]; t++)
        adv[t] = 0;
    df_actor_params p = {
        .optim = {.lr = 0, .beta1 = 0.9, .beta2 = 0.999, .adam_eps = 1, .grad_clip = 0},
        .micro_batch_size = 1,
        .logprob_micro_batch_size = 1,
        .loss = {.ppo_epochs = 1, .policy_loss = "gpg", .loss_agg_mode = "token-mean", .entropy_coeff = 1},
        .temperature = temperature};
    const char *cols[] = {"old_log_probs", "advantages"};
    tt_actor_token_norms(m, x, &p, cols, 2, K);
    df_batch_free(x);
}

typedef struct actor_setup {
    df_model *m; /* theta0 */
    df_batch *b; /* the PPO batch */
    float temp;
    double *J, *K; /* ||grad logp_t||, ||grad H_t|| */
    double rel;    /* relative rounding of the gradient's terms, but for the softmax weights */
    double eps;    /* tb_logp_eps */
    int64_t T, L;
} actor_setup;

static void actor_setup_init(actor_setup *s, float temp)
{
    s->temp = temp;
    s->m = grid_model(3, false);
    s->b = actor_batch(s->m, temp);
    const int64_t *ro = df_batch_offsets(s->b, "response_ids");
    s->T = ro[G_ROWS];
    s->J = malloc((size_t)s->T * sizeof(double));
    s->K = malloc((size_t)s->T * sizeof(double));
    tt_logp_grad_norms(s->m, s->b, temp, s->J);
    entropy_grad_norms(s->m, s->b, temp, s->K);
    /* micro-batches of MICRO rows of <= L packed tokens each */
    s->L = tt_max_len(s->b);
    const int parts = (G_ROWS + MICRO - 1) / MICRO;
    /* the backward's rounding (probabilistic over its chain), the sum of the micro-batches' parts in
       any order, and the float coefficients dL/dlogp_t, dL/dH_t: the aggregation and TIS weights
       (2 roundings each), their product, the loss's own float result and the KL's float add */
    s->rel = df_tol_gamma_prob(tb_grad_chain(&s->m->cfg, s->L, MICRO * s->L), DF_TOL_LAMBDA, DF_U32) +
             df_tol_gamma(parts - 1, DF_U32) + df_tol_gamma(8, DF_U32);
    s->eps = tb_logp_eps(&s->m->cfg, s->L);
    if (debug())
        print_message("actor: %lld params, T %lld, L %lld, rel %.3g, eps %.3g\n", (long long)s->m->n_params,
                      (long long)s->T, (long long)s->L, s->rel, s->eps);
}

static void actor_setup_free(actor_setup *s)
{
    df_model_free(s->m);
    df_batch_free(s->b);
    free(s->J), free(s->K);
}

/*
 * The update's loss metrics against the terms at theta0 (one optimizer step: the metrics are its
 * values): actor/pg_loss = sum_t w_t tis_t pg_t, actor/entropy_loss = sum_t w_t H_t and
 * actor/kl_loss = sum_t w_t kl_t (unscaled). The update's forward and the rows' each put a log-prob or
 * entropy within its bound of the exact one (perr: twice), the code's float weights are off by 2 u
 * relative (w, and tis for pg: 3 u), and both sums are in double.
 */
static void check_actor_metrics(const df_metrics *met, const actor_fd *f, const double *parts0,
                                const actor_case *k)
{
    const char *keys[N_PARTS] = {"actor/pg_loss", "actor/entropy_loss", "actor/kl_loss"};
    const double want[N_PARTS] = {parts0[0], -parts0[1] / f->l->entropy_coeff,
                                  parts0[2] / f->l->kl_loss_coef};
    const int wr[N_PARTS] = {3, 2, 2};
    for (int j = 0; j < N_PARTS; j++) {
        double got = df_metrics_get(met, keys[j], NAN);
        double bound = 2 * f->perr[j] + df_tol_gamma(wr[j], DF_U32) * f->pmag[j] +
                       df_tol_gamma(4 * (double)f->T + 16, DF_U64) * f->pmag[j];
        if (!(fabs(got - want[j]) <= bound))
            fail_msg("%s / %s / %s: %s = %.9g, the terms at theta0 give %.9g (bound %.3g)", k->policy_loss,
                     k->kl_type, k->agg, keys[j], got, want[j], bound);
        if (debug())
            print_message("  %s %.9g vs %.9g: error %.2e bound %.2e\n", keys[j], got, want[j],
                          fabs(got - want[j]), bound);
    }
}

/* The actor's gradient for case k at theta0 against finite differences; stats into st. */
static void actor_check(const actor_setup *s, const actor_case *k, uint64_t seed, check_stats *st)
{
    const int64_t n = s->m->n_params, T = s->T;
    df_actor_params p = actor_params(k, s->temp);
    /* the gradient: one update of a trainable copy */
    df_model *c;
    df_actor *tr;
    assert_int_equal(df_model_clone(s->m, &c), 0);
    assert_int_equal(df_actor_create(c, &p, true, &tr), 0);
    df_metrics *met = df_metrics_new();
    if (df_actor_update_policy(tr, s->b, met))
        fail_msg("update: %s", df_last_error());
    double *g = malloc((size_t)n * sizeof(double)), *rec = malloc((size_t)n * sizeof(double));
    recover_grad(s->m, df_actor_model(tr), g, rec);
    df_actor_free(tr);

    /* the FD side: a frozen copy evaluated on one-row batches */
    actor_fd f = {
        .n = G_ROWS, .T = T, .l = &p.loss, .cap = p.tis_imp_ratio_cap, .temp = s->temp, .eps = s->eps};
    assert_int_equal(df_acts_create(&s->m->cfg, s->L, s->L, &f.acts), 0);
    f.lpb = malloc((size_t)s->L * sizeof(float));
    f.errb = malloc((size_t)s->L * sizeof(double));
    f.err0 = malloc((size_t)T * sizeof(double));
    assert_int_equal(df_model_clone(s->m, &c), 0);
    assert_int_equal(df_actor_create(c, &p, false, &f.ev), 0);
    f.rows = malloc(G_ROWS * sizeof *f.rows);
    for (int64_t i = 0; i < G_ROWS; i++)
        assert_int_equal(df_batch_slice(s->b, i, i + 1, &f.rows[i]), 0);
    f.ro = df_batch_offsets(s->b, "response_ids");
    f.old = df_batch_column(s->b, "old_log_probs")->data;
    f.ref = df_batch_column(s->b, "ref_log_prob")->data;
    f.adv = df_batch_column(s->b, "advantages")->data;
    f.rollout = df_batch_column(s->b, "rollout_log_probs")->data;
    f.w = malloc((size_t)T * sizeof(double));
    f.wpg = malloc((size_t)T * sizeof(double));
    f.tis = malloc((size_t)T * sizeof(double));
    f.lp0 = malloc((size_t)T * sizeof(double));
    f.seq0 = calloc(G_ROWS, sizeof(double));
    f.sig0 = malloc((size_t)T * sizeof(int));
    f.c = malloc((size_t)T * sizeof(double));
    f.dc = malloc((size_t)T * sizeof(double));
    f.cent = malloc((size_t)T * sizeof(double));
    agg_weights(k->agg, G_ROWS, f.ro, f.w);
    /* gspo (sapo, geo_mean) aggregate their policy term with their own mode, as verl */
    const df_policy_loss_desc *pd = df_policy_loss_find(k->policy_loss);
    agg_weights(pd && pd->loss_agg_mode ? pd->loss_agg_mode : k->agg, G_ROWS, f.ro, f.wpg);
    for (int64_t t = 0; t < T; t++)
        f.tis[t] = fmin(exp((double)f.old[t] - f.rollout[t]), f.cap);
    double l0, ferr0, parts0[N_PARTS];
    const char *what = NULL;
    f.at_theta0 = true;
    assert_true(actor_loss(&f, &l0, &ferr0, parts0, &what));
    f.at_theta0 = false;
    check_actor_metrics(met, &f, parts0, k);
    df_metrics_free(met);

    /* the gradient's bound: rel times its per-token terms' magnitude, and the coefficients'
       sensitivity to the update's log-probs: each within e_t of the exact one, which moves c_t by
       <= dc_t e^e e <= dc_t (1 + 2 e) e; e is taken as the largest of the token's sample (gspo's
       coefficient reads the sample's mean log-ratio) */
    double Glp = 0, Gent = 0, sens = 0;
    for (int64_t i = 0; i < G_ROWS; i++) {
        double e = 0;
        for (int64_t t = f.ro[i]; t < f.ro[i + 1]; t++)
            e = fmax(e, f.err0[t]);
        for (int64_t t = f.ro[i]; t < f.ro[i + 1]; t++) {
            Glp += fabs(f.c[t]) * s->J[t];
            Gent += f.cent[t] * s->K[t];
            sens += f.dc[t] * (1 + 2 * e) * e * s->J[t];
        }
    }
    /* the softmax weights p_v the backward recomputes from logits off by dz = eps max zm: relative
       2 dz; for the entropy also its factors z_v - E z (|z| <= max zm), off by 2 dz: relative
       2 dz (1 + 2 max zm), the per-row form of tt_e2e_grad_bound's F (1 + 2 Z) */
    double dz = s->eps * f.zmax0, G = Glp + Gent;
    double per_norm = (s->rel + 2 * dz) * Glp + (s->rel + 2 * dz * (1 + 2 * f.zmax0)) * Gent + sens;
    grad_bound gb = {.per_norm = per_norm, .rec = rec, .move = &f.dlp_max};
    char label[128];
    snprintf(label, sizeof label, "%s / %s / %s", k->policy_loss, k->kl_type, k->agg);
    if (debug())
        print_message(
            "%s: loss %.6g (pg %.4g, -ent %.4g, kl %.4g), G %.3g (entropy %.3g), ||dg|| <= %.3g, zmax %.3g\n",
            label, l0, parts0[0], parts0[1], parts0[2], G, Gent, per_norm, f.zmax0);
    check_stats one = {0};
    check_all(actor_loss, &f, df_actor_model(f.ev), g, &gb, 1.0, label, seed, &one);
    /* the comparison has teeth: each term's slope is more than twice the bound somewhere, so dropping
       it (an error of one slope, less the true error <= the bound) or flipping it (two) fails */
    if (!(one.teeth[0] > 2 && one.teeth[1] > 2 && one.teeth[2] > 2))
        fail_msg("%s: a term's largest slope / bound is only %.2f (pg), %.2f (entropy), %.2f (kl): the check "
                 "could miss it",
                 label, one.teeth[0], one.teeth[1], one.teeth[2]);
    merge_stats(st, &one);

    df_actor_free(f.ev);
    df_acts_free(f.acts);
    free(f.lpb), free(f.errb), free(f.err0);
    for (int64_t i = 0; i < G_ROWS; i++)
        df_batch_free(f.rows[i]);
    free(f.rows), free(f.w), free(f.wpg), free(f.tis), free(f.lp0), free(f.seq0), free(f.sig0), free(f.c), free(f.dc),
        free(f.cent);
    free(g), free(rec);
}

static const char *const k_agg[] = {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm",
                                    "seq-mean-token-sum-norm-seqavg"};
enum { N_AGG = sizeof k_agg / sizeof *k_agg };

static void report(const char *what, const check_stats *st)
{
    print_message(
        "[ %s ] %d slopes, worst error / bound %.3f; per case the largest part / bound is at least: "
        "pg %.1f, entropy %.1f, kl %.1f\n",
        what, st->n, st->worst, st->teeth[0], st->teeth[1], st->teeth[2]);
}

/* Every KL type under vanilla, every aggregation mode. */
static void test_actor_vanilla_kl_types(void **state)
{
    (void)state;
    actor_setup s;
    actor_setup_init(&s, 0.7f);
    static const char *const kls[] = {"kl", "abs", "mse", "low_var_kl"};
    check_stats st = {0};
    for (size_t a = 0; a < N_AGG; a++)
        for (size_t k = 0; k < 4; k++) {
            actor_case c = {"vanilla", kls[k], k_agg[a]};
            actor_check(&s, &c, 100 + 10 * a + k, &st);
        }
    report("actor vanilla", &st);
    actor_setup_free(&s);
}

/* gspo, gpg and cpgd, every aggregation mode. */
static void test_actor_other_losses(void **state)
{
    (void)state;
    actor_setup s;
    actor_setup_init(&s, 0.7f);
    static const char *const losses[] = {"gspo", "gpg", "cpgd"};
    static const char *const kls[] = {"k3", "k2", "k1"}; /* the aliases */
    check_stats st = {0};
    for (size_t a = 0; a < N_AGG; a++)
        for (size_t k = 0; k < 3; k++) {
            actor_case c = {losses[k], kls[(k + a) % 3], k_agg[a]};
            actor_check(&s, &c, 200 + 10 * a + k, &st);
        }
    report("actor gspo / gpg / cpgd", &st);
    actor_setup_free(&s);
}

/* ---- the critic ---------------------------------------------------------------------------- */

typedef struct critic_fd {
    df_critic *ev; /* its model's weights are the FD's */
    df_batch *x;   /* prompt_ids, response_ids: compute_values writes its column "values" */
    int64_t n, T;
    const int64_t *ro;
    const float *old, *ret; /* the update's columns values (the old predictions) and returns */
    double *w;              /* exact aggregation weights */
    double clip;            /* cliprange_value */
    double e;               /* one forward pass's error of a value (tb_forward_err) */
    bool at_theta0;
    int *sig0;
    double *c; /* at theta0: dL/dv_t */
    double *v0;
    double dv_max;
    char what[160];
} critic_fd;

/* The value loss 0.5 sum_t w_t max(l1_t, l2_t) (algo.h df_value_loss) at the weights of f->ev. */
static bool critic_loss(void *ctx, double *loss, double *ferr, double *parts, const char **what)
{
    critic_fd *f = ctx;
    if (df_critic_compute_values(f->ev, f->x))
        fail_msg("%s", df_last_error());
    const float *v = df_batch_column(f->x, "values")->data;
    double L = 0, err = 0, mag = 0;
    bool ok = true;
    for (int64_t t = 0; t < f->T; t++) {
        double vt = v[t], o = f->old[t], R = f->ret[t];
        double vc = fmin(fmax(vt, o - f->clip), o + f->clip);
        double l1 = (vt - R) * (vt - R), l2 = (vc - R) * (vc - R);
        /* branches: the clamp active or not, and which square wins (ties: l1, unclipped) */
        int sig = (vc != vt) * 2 + (l2 > l1);
        double c = sig == 3 ? 0 : f->w[t] * (vt - R);
        L += 0.5 * f->w[t] * fmax(l1, l2);
        /* a value off by e moves the term by |c| e + w e^2 / 2 */
        err += (fabs(c) + 0.5 * f->w[t] * f->e) * f->e;
        mag += 0.5 * f->w[t] * fmax(l1, l2);
        if (f->at_theta0) {
            f->sig0[t] = sig;
            f->c[t] = c;
            f->v0[t] = vt;
        } else {
            f->dv_max = fmax(f->dv_max, fabs(vt - f->v0[t]));
            if (sig != f->sig0[t] && ok) {
                snprintf(f->what, sizeof f->what,
                         "token %lld: branch %d, at theta0 %d; its value moved by %.3g", (long long)t, sig,
                         f->sig0[t], vt - f->v0[t]);
                *what = f->what;
                ok = false;
            }
        }
    }
    parts[0] = L, parts[1] = parts[2] = 0;
    *loss = L;
    *ferr = err + df_tol_gamma(8 * (double)f->T, DF_U64) * mag;
    return ok;
}

/* The critic's batch at theta0 of value model m: synthetic rows, old values v0 + delta with delta
   = +-0.1 c (the clamp inactive, >= 0.9 c from its edges) or +-3 c (active), returns v0 + rho with
   |rho| in [0.5 c, 4 c] of either sign: where the clamp is active either square may win, by at least
   0.5 c in |v - R| against |clamp(v) - R| (rho is drawn again until it does). */
static df_batch *critic_batch(const df_model *m, double clip)
{
    df_batch *b = df_test_synth_batch(31, G_ROWS);
    df_model *c;
    df_critic *k;
    df_critic_params p = {.optim = invertible_optim(),
                          .forward_micro_batch_size = 1,
                          .loss = {.ppo_epochs = 1, .cliprange_value = clip, .loss_agg_mode = "token-mean"}};
    assert_int_equal(df_model_clone(m, &c), 0);
    assert_int_equal(df_critic_create(c, &p, &k), 0);
    assert_int_equal(df_critic_compute_values(k, b), 0);
    df_critic_free(k);
    float *v = df_batch_data_mut(b, "values"), *ret;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "returns", "response_ids", &ret), 0);
    df_rng r;
    df_rng_seed(&r, df_rng_key(32, 0, 0, 0));
    for (int64_t t = 0; t < df_batch_offsets(b, "response_ids")[G_ROWS]; t++) {
        double v0 = v[t], delta = (df_rng_below(&r, 2) ? 1 : -1) * (df_rng_below(&r, 2) ? 0.1 : 3.0) * clip;
        double rho = 0;
        for (int tries = 0;; tries++) {
            assert_true(tries < 100);
            rho = (df_rng_below(&r, 2) ? 1 : -1) * (0.5 + 3.5 * df_rng_uniform(&r)) * clip;
            double vc = fmin(fmax(v0, v0 + delta - clip), v0 + delta + clip);
            if (vc == v0 || fabs(fabs(rho) - fabs(vc - v0 - rho)) > 0.5 * clip)
                break;
        }
        v[t] = (float)(v0 + delta);
        ret[t] = (float)(v0 + rho);
    }
    return b;
}

typedef struct critic_case {
    const char *agg;
    double clip;
} critic_case;

/* The critic's gradient for case k against finite differences. */
static void critic_check(const critic_case *k, uint64_t seed, check_stats *st)
{
    df_model *m = grid_model(5, true);
    df_batch *b = critic_batch(m, k->clip);
    const int64_t n = m->n_params, T = df_batch_offsets(b, "response_ids")[G_ROWS];
    df_critic_params p = {.optim = invertible_optim(),
                          .mini_batch_size = 0,
                          .micro_batch_size = MICRO,
                          .forward_micro_batch_size = 1,
                          .loss = {.ppo_epochs = 1,
                                   .cliprange_value = k->clip,
                                   .loss_agg_mode = k->agg,
                                   .loss_agg_norm_length = NORM_LEN}};
    df_model *c;
    df_critic *tr;
    assert_int_equal(df_model_clone(m, &c), 0);
    assert_int_equal(df_critic_create(c, &p, &tr), 0);
    df_metrics *met = df_metrics_new();
    if (df_critic_update(tr, b, met))
        fail_msg("update: %s", df_last_error());
    double *g = malloc((size_t)n * sizeof(double)), *rec = malloc((size_t)n * sizeof(double));
    recover_grad(m, df_critic_model(tr), g, rec);
    df_critic_free(tr);

    const int64_t L = tt_max_len(b);
    critic_fd f = {.n = G_ROWS, .T = T, .clip = k->clip, .e = tb_forward_err(m, L, 1.0f)};
    assert_int_equal(df_model_clone(m, &c), 0);
    assert_int_equal(df_critic_create(c, &p, &f.ev), 0);
    f.ro = df_batch_offsets(b, "response_ids");
    f.x = df_batch_new(G_ROWS);
    assert_int_equal(df_batch_set_tok_i32(f.x, "prompt_ids", df_batch_offsets(b, "prompt_ids"),
                                          df_batch_column(b, "prompt_ids")->data),
                     0);
    assert_int_equal(
        df_batch_set_tok_i32(f.x, "response_ids", f.ro, df_batch_column(b, "response_ids")->data), 0);
    f.old = df_batch_column(b, "values")->data;
    f.ret = df_batch_column(b, "returns")->data;
    f.w = malloc((size_t)T * sizeof(double));
    f.sig0 = malloc((size_t)T * sizeof(int));
    f.c = malloc((size_t)T * sizeof(double));
    f.v0 = malloc((size_t)T * sizeof(double));
    agg_weights(k->agg, G_ROWS, f.ro, f.w);
    double l0, ferr0, parts0[N_PARTS];
    const char *what = NULL;
    f.at_theta0 = true;
    assert_true(critic_loss(&f, &l0, &ferr0, parts0, &what));
    f.at_theta0 = false;
    /* the update's metrics at theta0 (one optimizer step): critic/vf_loss is the loss (each value of
       the update's forward and of the FD's within e: twice ferr0; the code's float weights, 2 u
       relative, on positive terms), critic/vpred_mean the token mean of the values (2 e) and
       critic/vf_clipfrac the token fraction where the clipped square wins, counted exactly here (the
       data keep every token far from that switch), both as double means */
    double vmean = 0;
    int64_t nclip = 0;
    for (int64_t t = 0; t < T; t++)
        vmean += f.v0[t] / (double)T, nclip += f.sig0[t] == 3;
    const double got[3] = {df_metrics_get(met, "critic/vf_loss", NAN),
                           df_metrics_get(met, "critic/vpred_mean", NAN),
                           df_metrics_get(met, "critic/vf_clipfrac", NAN)};
    const double want[3] = {l0, vmean, (double)nclip / (double)T};
    const double mb[3] = {2 * ferr0 + df_tol_gamma(2, DF_U32) * l0,
                          2 * f.e + df_tol_gamma(2 * (double)T, DF_U64) * fabs(vmean) * 4,
                          df_tol_gamma(2 * (double)T, DF_U64)};
    const char *keys[3] = {"critic/vf_loss", "critic/vpred_mean", "critic/vf_clipfrac"};
    for (int j = 0; j < 3; j++) {
        if (!(fabs(got[j] - want[j]) <= mb[j]))
            fail_msg("critic %s / cliprange %g: %s = %.9g, expected %.9g (bound %.3g)", k->agg, k->clip,
                     keys[j], got[j], want[j], mb[j]);
        if (debug())
            print_message("  %s %.9g vs %.9g: error %.2e bound %.2e\n", keys[j], got[j], want[j],
                          fabs(got[j] - want[j]), mb[j]);
    }
    assert_true(nclip > 0 && nclip < T); /* both branches of the clip are in the data */
    df_metrics_free(met);

    /* the gradient's bound: the value backward's rounding (tb_grad_chain of the value model, micro-
       batches of MICRO rows), the micro-batches' sum, the float weights (one rounding) and their
       product with v - R; plus the coefficients w_t (v_t - R_t) at values off by <= e */
    double *J = malloc((size_t)T * sizeof(double));
    tt_value_grad_norms(m, b, J);
    const int parts = (G_ROWS + MICRO - 1) / MICRO;
    double rel = df_tol_gamma_prob(tb_grad_chain(&m->cfg, L, MICRO * L), DF_TOL_LAMBDA, DF_U32) +
                 df_tol_gamma(parts - 1, DF_U32) + df_tol_gamma(3, DF_U32);
    double G = 0, sens = 0;
    for (int64_t t = 0; t < T; t++) {
        G += fabs(f.c[t]) * J[t];
        sens += (f.sig0[t] == 3 ? 0 : f.w[t]) * f.e * J[t];
    }
    grad_bound gb = {.per_norm = rel * G + sens, .rec = rec, .move = &f.dv_max};
    char label[128];
    snprintf(label, sizeof label, "critic %s / cliprange %g", k->agg, k->clip);
    if (debug())
        print_message("%s: loss %.6g, G %.3g, ||dg|| <= %.3g, e %.3g\n", label, l0, G, gb.per_norm, f.e);
    check_stats one = {0};
    check_all(critic_loss, &f, df_critic_model(f.ev), g, &gb, CRITIC_STEP, label, seed, &one);
    if (!(one.teeth[0] > 2))
        fail_msg("%s: the largest slope / bound is only %.2f: the check could miss a wrong gradient", label,
                 one.teeth[0]);
    merge_stats(st, &one);
    df_critic_free(f.ev);
    df_batch_free(f.x);
    free(f.w), free(f.sig0), free(f.c), free(f.v0), free(J), free(g), free(rec);
    df_batch_free(b);
    df_model_free(m);
}

/* The clipped value loss in every aggregation mode, two clip ranges. */
static void test_critic(void **state)
{
    (void)state;
    check_stats st = {0};
    for (size_t a = 0; a < N_AGG; a++)
        for (int k = 0; k < 2; k++) {
            critic_case c = {k_agg[a], k ? 0.25 : 0.5};
            critic_check(&c, 300 + 10 * a + (uint64_t)k, &st);
        }
    print_message("[ critic ] %d slopes, worst error / bound %.3f; per case the largest slope / bound is at "
                  "least %.1f\n",
                  st.n, st.worst, st.teeth[0]);
}

static int group_setup(void **state)
{
    (void)state;
    omp_set_num_threads(1); /* a micro model gains nothing from threads on a shared machine */
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_actor_vanilla_kl_types),
        cmocka_unit_test(test_actor_other_losses),
        cmocka_unit_test(test_critic),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
