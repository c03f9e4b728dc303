/*
 * testtrain.h — the rounding model of the actor's and critic's updates, for the
 * tests that compare two trainings of the same model on the same data which
 * differ only in float summation order (micro-batches, data parallelism):
 * tests/test_losses_train.c, test_actor_dp.c, test_critic.c.
 *
 * The two trainings run the forward and backward passes over different row
 * sets (oneDNN blocks each GEMM by its row count, and another CPU picks other
 * kernels) and sum the gradient in another order. The bound of one optimizer
 * step (tolerance.h: df_tol_gamma_prob for the deep computations, Higham &
 * Mary; df_tol_adam_gain for Adam) needs
 *   - F: how far two forward passes of the same weights may put a log-prob
 *     (or a value): tb_forward_bound (tests/testbounds.h);
 *   - the magnitude of the gradient's terms: per-token gradient norms,
 *     measured by one-token updates of the same model (tt_token_batch);
 *   - Adam made Lipschitz in the gradient (eps well above its rounding noise).
 * A difference made at one step is carried by the later ones; their
 * amplification is measured with a twin (tt_perturb): the reference training
 * run again from weights moved by a random +-eta, as rounding errors are
 * modelled.
 */
#ifndef DF_TESTS_TESTTRAIN_H
#define DF_TESTS_TESTTRAIN_H

#include "distflow/algo.h"
#include "distflow/batch.h"
#include "distflow/metrics.h"
#include "distflow/model.h"
#include "distflow/rng.h"
#include "engine/actor.h"
#include "engine/critic.h"
#include "testbounds.h"
#include "testutil.h"
#include "tolerance.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Relative difference of two trainings' gradients at equal weights from rounding alone, times the
   magnitude of the gradient's terms: each run's forward and backward (tb_grad_chain, probabilistic;
   sequences of <= pos tokens, micro-batches of <= tokens packed tokens), and a sum of `parts`
   partial gradients (micro-batches, an all-reduce over ranks) in another order, worst case. */
static inline double tt_grad_rel(const df_model *m, int64_t pos, int64_t tokens, int parts)
{
    return 2 * df_tol_gamma_prob(tb_grad_chain(&m->cfg, pos, tokens), DF_TOL_LAMBDA, DF_U32) +
           df_tol_gamma(parts > 1 ? parts - 1 : 0, DF_U32);
}

/* max_i |theta_i| */
static inline double tt_max_abs(const df_model *m)
{
    double x = 0;
    for (int64_t i = 0; i < m->n_params; i++)
        x = fmax(x, fabs(m->params[i]));
    return x;
}

/*
 * What one AdamW step adds to the difference of two trainings' weights, on top
 * of the difference it inherits: lr gain / eps times the largest gradient
 * difference so far (df_tol_adam_gain), plus each run's rounding of the step
 * (about 6 roundings of lr |u| <= lr (gain - 1)) and of the weight (the decay
 * and the subtraction).
 */
static inline double tt_adam_inject(double lr, double eps, double gain, double grad_diff, double max_weight)
{
    return lr * gain / eps * grad_diff +
           2 * (2 * DF_U32 * max_weight + df_tol_gamma(6, DF_U32) * lr * (gain - 1));
}

/* Longest prompt + response of b. */
static inline int64_t tt_max_len(const df_batch *b)
{
    const int64_t *po = df_batch_offsets(b, "prompt_ids"), *ro = df_batch_offsets(b, "response_ids");
    int64_t n = 0;
    for (int64_t i = 0; i < df_batch_size(b); i++)
        n = (po[i + 1] - po[i]) + (ro[i + 1] - ro[i]) > n ? (po[i + 1] - po[i]) + (ro[i + 1] - ro[i]) : n;
    return n;
}

/*
 * Response token j of row i of b as a one-row batch: prompt = the row's prompt
 * and the first j response tokens, response = token j, and each of the n TOK_F32
 * columns cols (laid out like response_ids) at that token. A causal model gives
 * the token the same log-prob there, so an update on it alone measures the
 * token's own term of a gradient.
 */
static inline df_batch *tt_token_batch(const df_batch *b, int64_t i, int64_t j, const char *const *cols,
                                       int n)
{
    int64_t np, nr;
    const int32_t *pt = df_batch_tok_i32(b, "prompt_ids", i, &np),
                  *rt = df_batch_tok_i32(b, "response_ids", i, &nr);
    int32_t *toks = malloc((size_t)(np + j + 1) * sizeof *toks);
    memcpy(toks, pt, (size_t)np * sizeof *toks);
    memcpy(toks + np, rt, (size_t)j * sizeof *toks);
    const int64_t po[] = {0, np + j}, ro[] = {0, 1};
    df_batch *t = df_batch_new(1);
    int rc = df_batch_set_tok_i32(t, "prompt_ids", po, toks) ||
             df_batch_set_tok_i32(t, "response_ids", ro, rt + j);
    for (int k = 0; !rc && k < n; k++) {
        int64_t len;
        const float *x = df_batch_tok_f32(b, cols[k], i, &len);
        rc = !x || df_batch_set_tok_f32(t, cols[k], ro, x + j);
    }
    free(toks);
    if (rc) {
        df_batch_free(t);
        return NULL;
    }
    return t;
}

/*
 * gn[t] = the gradient norm of an update of the actor of p (a copy of m) on
 * response token t of b alone (tt_token_batch with columns cols[0..n)): the
 * token's own term of a gradient, before the aggregation weight (a one-token
 * sample has weight 1 in every loss_agg_mode). Fails the test on an error.
 */
static inline void tt_actor_token_norms(const df_model *m, const df_batch *b, const df_actor_params *p,
                                        const char *const *cols, int n, double *gn)
{
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    for (int64_t i = 0; i < df_batch_size(b); i++)
        for (int64_t j = 0; j < ro[i + 1] - ro[i]; j++) {
            df_batch *t = tt_token_batch(b, i, j, cols, n);
            df_model *c = NULL;
            df_actor *a = NULL;
            df_metrics *met = df_metrics_new();
            if (!t || df_model_clone(m, &c) || df_actor_create(c, p, true, &a) ||
                df_actor_update_policy(a, t, met))
                fail_msg("one-token update: %s", df_last_error());
            gn[ro[i] + j] = df_metrics_get(met, "actor/grad_norm", NAN);
            df_metrics_free(met);
            df_actor_free(a);
            df_batch_free(t);
        }
}

/* J[t] = ||d log p_t / d theta||_2 for every response token of b under m at `temperature`: the
   gradient norm of a gpg update (loss -A log p with A = 1) on the token alone. */
static inline void tt_logp_grad_norms(const df_model *m, const df_batch *b, float temperature, double *J)
{
    df_batch *x = NULL;
    float *old, *adv;
    if (df_batch_slice(b, 0, df_batch_size(b), &x) ||
        df_batch_alloc_tok_f32_like(x, "old_log_probs", "response_ids", &old) ||
        df_batch_alloc_tok_f32_like(x, "advantages", "response_ids", &adv))
        fail_msg("%s", df_last_error());
    for (int64_t t = 0; t < df_batch_offsets(x, "response_ids")[df_batch_size(x)]; t++)
        old[t] = 0, adv[t] = 1; /* gpg does not read old_log_probs */
    df_actor_params p = {.optim = {.lr = 0, .beta1 = 0.9, .beta2 = 0.999, .adam_eps = 1, .grad_clip = 0},
                         .micro_batch_size = 1,
                         .logprob_micro_batch_size = 1,
                         .loss = {.ppo_epochs = 1, .policy_loss = "gpg", .loss_agg_mode = "token-mean"},
                         .temperature = temperature};
    const char *cols[] = {"old_log_probs", "advantages"};
    tt_actor_token_norms(m, x, &p, cols, 2, J);
    df_batch_free(x);
}

/* J[t] = ||d v_t / d theta||_2 for every response token of b under value model m: the gradient norm
   of a critic update on the token alone with returns = v_t - 1 and values = v_t (so the value loss
   0.5 (v - R)^2 is unclipped with dL/dv = 1). */
static inline void tt_value_grad_norms(const df_model *m, const df_batch *b, double *J)
{
    df_critic_params p = {.optim = {.lr = 0, .beta1 = 0.9, .beta2 = 0.999, .adam_eps = 1, .grad_clip = 0},
                          .micro_batch_size = 1,
                          .forward_micro_batch_size = 1,
                          .loss = {.ppo_epochs = 1, .cliprange_value = 0.2, .loss_agg_mode = "token-mean"}};
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    for (int64_t i = 0; i < df_batch_size(b); i++)
        for (int64_t j = 0; j < ro[i + 1] - ro[i]; j++) {
            df_batch *t = tt_token_batch(b, i, j, NULL, 0);
            df_model *c = NULL;
            df_critic *k = NULL;
            df_metrics *met = df_metrics_new();
            float *ret = NULL;
            if (!t || df_model_clone(m, &c) || df_critic_create(c, &p, &k) ||
                df_critic_compute_values(k, t) ||
                df_batch_alloc_tok_f32_like(t, "returns", "response_ids", &ret))
                fail_msg("one-token critic: %s", df_last_error());
            ret[0] = ((float *)df_batch_data_mut(t, "values"))[0] - 1.0f;
            if (df_critic_update(k, t, met))
                fail_msg("one-token critic update: %s", df_last_error());
            J[ro[i] + j] = df_metrics_get(met, "critic/grad_norm", NAN);
            df_metrics_free(met);
            df_critic_free(k);
            df_batch_free(t);
        }
}

/* Move every weight of m by +-eta (signs from `seed`); returns the smallest move made after rounding. */
static inline double tt_perturb(df_model *m, double eta, uint64_t seed)
{
    df_rng r;
    df_rng_seed(&r, df_rng_key(seed, 0x7e57, 0, 0));
    double least = INFINITY;
    for (int64_t i = 0; i < m->n_params; i++) {
        float x = m->params[i], y = (float)(x + (df_rng_below(&r, 2) ? eta : -eta));
        m->params[i] = y;
        least = fmin(least, fabs((double)y - x));
    }
    return least;
}

/*
 * The running bound of a training compared step by step with a reference training (test_actor_dp,
 * test_critic), and the reference's twin: the same training from weights moved by +-eta
 * (tt_perturb), which measures how much the later steps amplify a weight difference.
 */
enum { TT_MAX_KEYS = 8 };
typedef struct tt_track {
    double eta;                /* the twin's smallest initial weight move */
    double inj;                /* sum over steps of tt_adam_inject: the weight bound before amplification */
    double dg;                 /* largest bound on a step's gradient difference so far */
    double amp;                /* max(1, twin weight difference / eta) so far */
    int steps;                 /* optimizer steps so far */
    int call_steps;            /* in the current compared call */
    double round[TT_MAX_KEYS]; /* the call's sums of per-step metric bounds at equal weights */
    double twin_least;         /* smallest twin weight difference during the call */
} tt_track;

static inline void tt_track_init(tt_track *t, double eta)
{
    memset(t, 0, sizeof *t);
    t->eta = eta;
    t->amp = 1;
}

/* A compared call (one or more reference steps) begins. */
static inline void tt_track_call_begin(tt_track *t)
{
    t->call_steps = 0;
    memset(t->round, 0, sizeof t->round);
    t->twin_least = INFINITY;
}

/* The weight bound so far. */
static inline double tt_track_weight_bound(const tt_track *t)
{
    return t->amp * t->inj;
}

/* The twin's weight difference from the reference's model m, kept for the call's metrics. */
static inline double tt_track_twin(tt_track *t, const df_model *m, const df_model *twin)
{
    double tw = df_test_max_param_diff(twin, m);
    t->twin_least = fmin(t->twin_least, tw);
    return tw;
}

/* What the weight difference so far may move an output by: the twin's change of it (ds) per unit
   of the twin's weight difference (tw), times the weight bound. */
static inline double tt_track_carry(const tt_track *t, double ds, double tw)
{
    return tw > 0 ? ds / tw * tt_track_weight_bound(t) : 0;
}

/* After a reference step (m and twin updated) whose gradient difference is bounded by dg and
   whose metrics by b[0..n): the step's Adam injection (tt_adam_inject) and the amplification. */
static inline void tt_track_step(tt_track *t, const double *b, int n, double dg, const df_core_optim *o,
                                 const df_model *m, const df_model *twin)
{
    for (int k = 0; k < n; k++)
        t->round[k] += b[k];
    t->call_steps++;
    t->steps++;
    t->dg = fmax(t->dg, dg);
    double gain = df_tol_adam_gain(t->steps, o->beta1, o->beta2);
    t->inj += tt_adam_inject(o->lr, o->adam_eps, gain, t->dg, tt_max_abs(m));
    t->amp = fmax(t->amp, df_test_max_param_diff(twin, m) / t->eta);
}

/*
 * Bound on metric k of a compared call against the reference's (y, means over the call's steps;
 * z the twin's): the per-step bounds at equal weights, averaged, plus, for a metric that moves
 * with the weights (not clip fractions, whose flips are counted instead, nor the lr), what the
 * weight difference may move it by (tt_track_carry), plus double rounding.
 */
static inline double tt_track_metric_bound(const tt_track *t, int k, double y, double z, bool moves)
{
    return t->round[k] / t->call_steps + df_tol_gamma(64, DF_U64) * fabs(y) +
           (moves ? tt_track_carry(t, fabs(z - y), t->twin_least) : 0);
}

/*
 * End-to-end runs (the DAG worker): ||g^a - g^b||_2 for the first training
 * step's gradient of two runs of the same job on the same rollout, before
 * clipping, gn its norm: each run's forward + backward (probabilistic,
 * micro-batches of <= micro_tokens packed tokens, sequences of <= pos) and an
 * all-reduce over n_ranks (tt_grad_rel), relative to the magnitude G of the gradient's
 * per-token terms, plus the loss coefficients' sensitivity: -A rho moves by
 * 2F relative (log p and old each <= F), the backward's softmax weights by
 * F (1 + 2Z). The worker's batch is not at hand to measure G (as
 * tt_logp_grad_norms does), so it is modelled: T per-token terms of random
 * directions sum to a norm of ~ sqrt(sum of squares) >= G / sqrt(T), so
 * G <= sqrt(T) gn (the same independence model as the rounding errors').
 */
static inline double tt_e2e_grad_bound(const df_model *m, int64_t pos, int64_t micro_tokens, int64_t T,
                                       int n_ranks, double gn, float temperature)
{
    double F = tb_forward_bound(m, pos, temperature), Z = tb_head_bound(m, temperature);
    double rel = tt_grad_rel(m, pos, micro_tokens, n_ranks) + F * (3 + 2 * Z);
    return rel * sqrt((double)T) * gn;
}

/*
 * Weights a and b after the first AdamW step (weight decay 0, from init) of
 * two trainings whose gradients differ by <= dg (2-norm, before the clip to
 * `clip` of a gradient of norm gn). Per parameter the step is lr h / (|h| +
 * eps) with h = s g, s = min(1, clip / (gn + 1e-6)), so |dh| <= 2 s dg and the
 * steps differ by <= lr min(2, 2 s dg (1 - x + e)^2 / eps): x = |step| / lr of
 * the smaller step gives |h| + eps = eps / (1 - x), e bounds the rounding of x
 * (x = 0 when the two steps have opposite signs). A parameter
 * whose gradient is rounding noise may thus move by up to lr either way (Adam
 * normalises it), while the others are held tight. Fails the test naming the
 * worst parameter; returns the largest observed / bound and, in *free, how
 * many parameters that moved the bound leaves free (bound >= lr).
 */
static inline double tt_adam_first_step_check(const df_model *init, const df_model *a, const df_model *b,
                                              double lr, double eps, double clip, double gn, double dg,
                                              int64_t *free)
{
    double s = clip > 0 ? fmin(1.0, clip / (gn + 1e-6)) : 1.0, worst = 0;
    *free = 0;
    for (int64_t i = 0; i < init->n_params; i++) {
        double t0 = init->params[i], da = a->params[i] - t0, db = b->params[i] - t0;
        double rnd =
            DF_U32 * (2 * fabs(t0) + fabs(a->params[i]) + fabs(b->params[i])) + df_tol_gamma(8, DF_U32) * lr;
        /* the sensitivity eps / (|h| + eps)^2 peaks at the smaller |h|, or at h = 0 when the signs differ */
        double x = fmin(fabs(da), fabs(db)) / lr, e = rnd / lr, q = da * db > 0 ? fmin(1.0, 1 - x + e) : 1.0;
        double bound = lr * fmin(2.0, 2 * s * dg * q * q / eps) + rnd;
        *free += bound >= lr && (da != 0 || db != 0);
        if (!(fabs(da - db) <= bound))
            fail_msg("parameter %lld: the first step moved it by %.9g and %.9g (bound %.3g)", (long long)i,
                     da, db, bound);
        worst = fmax(worst, fabs(da - db) / bound);
    }
    return worst;
}

#endif
