/*
 * test_actor_dp.c — the data-parallel actor. Every rank builds the same global
 * batch, takes its shard and trains a DP actor on it; every rank also trains a
 * lone actor (no comm) on the whole batch from the same weights. The weights and
 * metrics must match (up to float summation order), and the parameter checksums
 * must agree across ranks. How far they may differ follows from the rounding
 * model of tests/testtrain.h, step by step along the whole-batch training
 * (ref_step), with Adam's eps = 1 so that a step is Lipschitz in the gradient.
 * Runs as one rank (plain ctest) and under mpiexec:
 * mpi-test: np 2 3
 * Results that differ per rank are reduced (max over ranks) before asserting, so
 * every rank passes or fails together instead of leaving the others waiting.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testmpi.h"

#include "distflow/comm.h"
#include "distflow/rng.h"
#include "engine/actor.h"
#include "testtrain.h"
#include "testutil.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int group_setup(void **state)
{
    omp_set_num_threads(1); /* a tiny model gains nothing from threads on a shared machine */
    return df_test_world_setup(state);
}

/* A world of more than one rank is MPI's (its size is checked by df_test_world_setup). */
static void test_world(void **state)
{
    (void)state;
    if (N > 1)
        assert_int_equal(df_comm_backend_of(W), DF_COMM_MPI);
}

/* Adam's eps = 1, well above the gradient's rounding noise (~1e-7): with 1e-8 a parameter whose
   gradient is that noise moves by up to lr either way, and no bound on the weights would be left. */
static df_actor_params params(const char *agg, int64_t mini, int64_t micro)
{
    df_actor_params p = {.optim.lr = 1e-3,
                         .optim.beta1 = 0.9,
                         .optim.beta2 = 0.999,
                         .optim.adam_eps = 1,
                         .optim.weight_decay = 0.01,
                         .optim.grad_clip = 1.0,
                         .mini_batch_size = mini,
                         .micro_batch_size = micro,
                         .logprob_micro_batch_size = micro,
                         .loss.ppo_epochs = 1,
                         .loss.policy_loss = "vanilla",
                         .loss.loss_agg_mode = agg,
                         .loss.clip_ratio_low = 0.2,
                         .loss.clip_ratio_high = 0.28,
                         .loss.clip_ratio_c = 3.0,
                         .loss.entropy_coeff = 0.01,
                         .use_kl_loss = true,
                         .loss.kl_loss_coef = 0.1,
                         .loss.kl_loss_type = "low_var_kl",
                         .temperature = 0.8f};
    return p;
}

/* old_log_probs = the model's log-probs + 0.5 or 0.05 of either sign, so that some ratios clip and
   none lies near a clip boundary (log 0.8, log 1.28, log 3), where the loss's gradient jumps and a
   rounding difference could flip a token's clip decision (ref_step counts such tokens; the lr keeps
   training from carrying a ratio to a boundary in these few steps), ref, advantages. */
static void add_ppo_columns(df_batch *b, uint64_t seed)
{
    df_actor *a;
    df_actor_params p = params("token-mean", 0, 4);
    assert_int_equal(df_actor_create(df_test_micro_model(11), &p, false, &a), 0);
    assert_int_equal(df_actor_compute_log_prob(a, b, "old_log_probs", NULL), 0);
    df_actor_free(a);
    float *old = df_batch_data_mut(b, "old_log_probs"), *ref, *adv;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "ref_log_prob", "response_ids", &ref), 0);
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "advantages", "response_ids", &adv), 0);
    df_rng rng;
    df_rng_seed(&rng, df_rng_key(seed, 7, 0, 0));
    int64_t T = df_batch_offsets(b, "response_ids")[df_batch_size(b)];
    for (int64_t t = 0; t < T; t++) {
        old[t] += (float)((df_rng_below(&rng, 2) ? 0.5 : 0.05) * (df_rng_below(&rng, 2) ? 1 : -1));
        ref[t] = old[t] + (float)(0.4 * df_rng_uniform(&rng) - 0.2);
        adv[t] = (float)(2 * df_rng_uniform(&rng) - 1);
    }
}


/* Every rank's checksum of m is the same. */
static void assert_same_checksum(const df_model *m)
{
    uint64_t mine, *all = malloc((size_t)N * sizeof *all);
    assert_int_equal(df_model_param_checksum(m, &mine), 0);
    assert_int_equal(df_comm_allgather(W, &mine, sizeof mine, all), 0);
    for (int r = 0; r < N; r++)
        assert_true(all[r] == all[0]);
    free(all);
}

/* ---- the bound, step by step along the whole-batch training ------------------------------------ */

/* The weights must have moved by more than TEETH times their bound: a wrong normaliser, a rank's rows
   counted twice or a missing all-reduce changes the gradient, hence the step, by well over a tenth of
   itself, so the bound can tell such a step from summation order. */
#define TEETH 10

enum { K_PG, K_KL, K_ENT, K_CLIP, K_CLIP_LOWER, K_PPO_KL, K_GRAD_NORM, K_LR, N_KEYS };
static const char *const PPO_KEYS[N_KEYS] = {
    "actor/pg_loss",           "actor/kl_loss", "actor/entropy_loss", "actor/pg_clipfrac",
    "actor/pg_clipfrac_lower", "actor/ppo_kl",  "actor/grad_norm",    "actor/lr"};
static const char *const SFT_KEYS[N_KEYS] = {"train/loss",      NULL,      NULL, NULL, NULL, NULL,
                                             "train/grad_norm", "train/lr"};

/*
 * The whole-batch reference (`alone`, one optimizer step per call), its twin
 * (the same training from weights moved by +-eta: how much the later steps
 * amplify a difference in the weights, tt_perturb), and the running bound on
 * how far the DP training may be from the reference.
 */
typedef struct ref_run {
    df_actor *alone, *twin;
    double eta;           /* the twin's smallest initial weight move */
    double inj;           /* sum over steps of tt_adam_inject: the weight bound before amplification */
    double dg;            /* largest bound on a step's gradient difference so far */
    double amp;           /* max(1, twin weight difference / eta) so far */
    int steps;            /* optimizer steps so far */
    int call_steps;       /* in the current DP call */
    double round[N_KEYS]; /* the call's sums of per-step metric bounds at equal weights */
    double twin_least;    /* smallest twin weight difference during the call */
} ref_run;

static void ref_init(ref_run *r, const df_actor_params *p)
{
    memset(r, 0, sizeof *r);
    df_model *m = df_test_micro_model(11);
    r->eta = tt_perturb(m, 1e-5, 77);
    assert_int_equal(df_actor_create(df_test_micro_model(11), p, true, &r->alone), 0);
    assert_int_equal(df_actor_create(m, p, true, &r->twin), 0);
    r->amp = 1;
}

static void ref_free(ref_run *r)
{
    df_actor_free(r->alone);
    df_actor_free(r->twin);
}

static void ref_call_begin(ref_run *r)
{
    r->call_steps = 0;
    memset(r->round, 0, sizeof r->round);
    r->twin_least = INFINITY;
}

/* Log-probs of the response tokens of b under a (into a copy of b; caller frees out). */
static const float *log_probs(df_actor *a, const df_batch *b, df_batch **out)
{
    assert_int_equal(df_batch_slice(b, 0, df_batch_size(b), out), 0);
    assert_int_equal(df_actor_compute_log_prob(a, *out, "now", NULL), 0);
    return df_batch_column(*out, "now")->data;
}

/*
 * One optimizer step of the reference on mini-batch mb (the DP group's union of
 * the ranks' k-th mini-batches), with the bound on what the DP step may differ
 * by. At the reference's weights (tests/testtrain.h):
 *   F = tt_forward_bound: two forward passes put a log-prob (or entropy) <= F apart;
 *   gn_t = the norm of token t's own term of the gradient (tt_actor_token_norms: PG, KL and
 *   entropy together), w_t its aggregation weight, G = sum_t w_t gn_t;
 *   J_t = ||grad log p_t|| (tt_logp_grad_norms); the PG and KL coefficients of grad log p_t,
 *   -A rho and beta (1 - e^(ref - log p)), move by <= (|A| R + beta e^|ref - log p|) per unit of
 *   log-prob error: S = sum_t w_t (|A_t| R + beta e^|y_t|) J_t, R >= every ratio;
 *   the token's backward (softmax weights, the entropy's z - mean z <= 2Z) moves by <= F (1 + 2Z)
 *   relative to its size (an assumption for the entropy term, weighted 0.01).
 * So the two gradients differ by <= (2 gamma_prob(n) + gamma_{N-1} + F (1 + 2Z)) G + F S (the
 * rounding of each run's forward + backward, probabilistic; the all-reduce over N ranks, worst
 * case), plus the full term w |A| R J_t of every token that a clip decision could flip: its
 * log-ratio lies within dr of a clip boundary, dr = F plus what the weight difference so far moves
 * a log-prob by (the twin's log-prob change per unit of weight change times the weight bound).
 * Metrics at equal weights: pg_loss moves by <= F sum w |A| R, kl_loss by <= F sum w e^|y|,
 * entropy_loss by <= F sum w, ppo_kl by <= F, the clip fractions by the flippable share of tokens,
 * grad_norm by the gradient bound, lr not at all.
 */
static void ref_step(ref_run *r, const df_batch *mb, const df_actor_params *p, bool sft, df_metrics *ma,
                     df_metrics *mt)
{
    df_model *m = df_actor_model(r->alone);
    const int64_t S = df_batch_size(mb), *ro = df_batch_offsets(mb, "response_ids"), T = ro[S];
    const int64_t pos = tt_max_len(mb), packed = df_batch_offsets(mb, "prompt_ids")[S] + T;
    double tw = df_test_max_param_diff(df_actor_model(r->twin), m);
    r->twin_least = fmin(r->twin_least, tw);
    double F = tt_forward_bound(m, pos, p->temperature), Z = tt_head_bound(m, p->temperature);
    double *J = calloc((size_t)T + 1, sizeof *J), *gn = calloc((size_t)T + 1, sizeof *gn);
    float *w = calloc((size_t)T + 1, sizeof *w);
    assert_int_equal(df_loss_agg_weights_ex(sft ? "token-mean" : p->loss.loss_agg_mode, S, ro, T, S, 0, w),
                     0);
    tt_logp_grad_norms(m, mb, p->temperature, J);
    df_batch *xa, *xt;
    const float *lp = log_probs(r->alone, mb, &xa), *lpt = log_probs(r->twin, mb, &xt);
    double s_lp = 0;
    for (int64_t t = 0; t < T; t++)
        s_lp = fmax(s_lp, fabs((double)lpt[t] - lp[t]));
    double dr = F + (tw > 0 ? s_lp / tw : 0) * r->amp * r->inj;
    double G = 0, Sens = 0, flip = 0, b[N_KEYS] = {0};
    if (sft) { /* -log p: coefficient -w, no ratio */
        for (int64_t t = 0; t < T; t++)
            G += w[t] * J[t];
        b[K_PG] = F;
    } else {
        df_actor_params pt = *p;
        pt.optim.lr = 0, pt.mini_batch_size = 0, pt.micro_batch_size = 1, pt.loss.ppo_epochs = 1;
        const char *cols[] = {"old_log_probs", "ref_log_prob", "advantages"};
        tt_actor_token_norms(m, mb, &pt, cols, 3, gn);
        const float *old = df_batch_column(mb, "old_log_probs")->data,
                    *ref = df_batch_column(mb, "ref_log_prob")->data,
                    *adv = df_batch_column(mb, "advantages")->data;
        const double lo = log(1 - p->loss.clip_ratio_low), hi = log(1 + p->loss.clip_ratio_high),
                     dual = log(p->loss.clip_ratio_c), beta = p->loss.kl_loss_coef;
        double rmax = 1 + p->loss.clip_ratio_high, n_flip = 0;
        for (int64_t t = 0; t < T; t++)
            rmax = fmax(rmax, exp(fabs((double)lp[t] - old[t]) + dr));
        for (int64_t t = 0; t < T; t++) {
            double x = (double)lp[t] - old[t], A = fabs(adv[t]), ey = exp(fabs((double)ref[t] - lp[t]) + dr);
            G += w[t] * gn[t];
            Sens += w[t] * (A * rmax + beta * ey) * J[t];
            bool near = fabs(x - lo) <= dr || fabs(x - hi) <= dr || (adv[t] < 0 && fabs(x - dual) <= dr);
            n_flip += near;
            flip += near ? w[t] * A * rmax * J[t] : 0;
            b[K_PG] += F * w[t] * A * rmax;
            b[K_KL] += F * w[t] * ey;
            b[K_ENT] += F * w[t];
        }
        b[K_PPO_KL] = F;
        b[K_CLIP] = b[K_CLIP_LOWER] = n_flip / (double)T;
    }
    double n = tt_grad_chain(m, pos, packed);
    double dg =
        (2 * df_tol_gamma_prob(n, TT_LAMBDA, DF_U32) + df_tol_gamma(N - 1, DF_U32) + F * (1 + 2 * Z)) * G +
        F * Sens + flip;
    b[K_GRAD_NORM] = dg;
    for (int k = 0; k < N_KEYS; k++)
        r->round[k] += b[k];
    r->call_steps++;
    df_batch_free(xa), df_batch_free(xt);
    free(J), free(gn), free(w);

    df_batch *x;
    assert_int_equal(df_batch_slice(mb, 0, S, &x), 0);
    assert_int_equal(sft ? df_actor_sft_step(r->alone, x, ma) : df_actor_update_policy(r->alone, x, ma), 0);
    assert_int_equal(sft ? df_actor_sft_step(r->twin, x, mt) : df_actor_update_policy(r->twin, x, mt), 0);
    df_batch_free(x);
    r->steps++;
    r->dg = fmax(r->dg, dg);
    double gain = df_tol_adam_gain(r->steps, p->optim.beta1, p->optim.beta2);
    r->inj += tt_adam_inject(p->optim.lr, p->optim.adam_eps, gain, r->dg, tt_max_abs(m));
    r->amp = fmax(r->amp, df_test_max_param_diff(df_actor_model(r->twin), m) / r->eta);
    if (getenv("DF_TOL_DEBUG") && R == 0)
        print_message("  step %d: F %.3g G %.3g S %.3g flips %.3g dr %.3g dg %.3g inj %.3g amp %.3g\n",
                      r->steps, F, G, Sens, b[K_CLIP], dr, dg, r->inj, r->amp);
}

/* The weight bound so far. */
static double ref_weight_bound(const ref_run *r)
{
    return r->amp * r->inj;
}

/*
 * Metric `k` of a DP call against the reference's over the same steps (means over the steps): the
 * per-step bounds at equal weights, averaged, plus what the weight difference may move it by (the
 * twin's change of the metric per unit of its weight difference, times the weight bound; not for
 * the clip fractions, whose flips are counted instead), plus double rounding. Global, so the same
 * on every rank. Returns observed / bound.
 */
static double check_metric(const ref_run *r, const df_metrics *dp, const df_metrics *ref,
                           const df_metrics *twin, const char *const *keys, int k)
{
    double x = df_metrics_get(dp, keys[k], NAN), y = df_metrics_get(ref, keys[k], NAN),
           z = df_metrics_get(twin, keys[k], NAN);
    assert_true(isfinite(x) && isfinite(y) && isfinite(z));
    assert_true(df_test_all_max(x) == df_test_all_min(x));
    double bound = r->round[k] / r->call_steps + df_tol_gamma(64, DF_U64) * fabs(y);
    if (k != K_CLIP && k != K_CLIP_LOWER && k != K_LR && r->twin_least > 0)
        bound += fabs(z - y) / r->twin_least * ref_weight_bound(r);
    if (df_test_all_max(fabs(x - y)) > bound)
        fail_msg("%s: DP %.9g vs whole batch %.9g (bound %.3g, rank %d)", keys[k], x, y, bound, R);
    return bound > 0 ? fabs(x - y) / bound : 0;
}

typedef struct scenario {
    const char *agg;
    int count[4]; /* rows per rank, by rank % 4 */
    int64_t mbs;  /* local mini-batch size */
    int epochs, updates;
} scenario;

/* Train DP on the shard and alone on the whole batch; compare after each update. */
static void run_ppo(const scenario *sc)
{
    int count[64] = {0};
    int64_t bounds[64], *mine, n_mine, G = 0;
    int n_mini;
    for (int r = 0; r < N; r++)
        G += count[r] = sc->count[r % 4];
    df_test_dp_layout(count, sc->mbs, &mine, &n_mine, bounds, &n_mini);
    df_batch *global = df_test_synth_batch(42, G), *shard;
    add_ppo_columns(global, 42);
    assert_int_equal(df_batch_select(global, mine, n_mine, &shard), 0);

    df_actor *dp;
    df_actor_params pd = params(sc->agg, sc->mbs, 2), pa = params(sc->agg, 0, 3);
    pd.loss.ppo_epochs = sc->epochs;
    assert_int_equal(df_actor_create(df_test_micro_model(11), &pd, true, &dp), 0);
    ref_run ref;
    ref_init(&ref, &pa);
    df_actor_set_comm(dp, W);

    /* the entropy mean of the shards is the whole batch's: a mean of per-token entropies, each from
       two forward passes (tt_forward_bound) */
    double ent_dp, ent_all;
    assert_int_equal(df_actor_compute_log_prob(dp, shard, "lp", &ent_dp), 0);
    assert_int_equal(df_actor_compute_log_prob(ref.alone, global, "lp", &ent_all), 0);
    double F0 = tt_forward_bound(df_actor_model(dp), tt_max_len(global), pa.temperature);
    assert_true(df_test_all_max(fabs(ent_dp - ent_all)) <= F0 + df_tol_gamma(64, DF_U64) * ent_all &&
                ent_all > 1.0);

    df_model *init = df_test_micro_model(11);
    double worst_w = 0, worst_m = 0;
    for (int u = 0; u < sc->updates; u++) {
        df_metrics *md = df_metrics_new(), *ma = df_metrics_new(), *mt = df_metrics_new();
        assert_int_equal(df_test_all_max(df_actor_update_policy(dp, shard, md)), 0);
        ref_call_begin(&ref);
        for (int ep = 0; ep < sc->epochs; ep++)
            for (int k = 0; k < n_mini; k++) { /* one optimizer step per global mini-batch */
                df_batch *mb;
                assert_int_equal(df_batch_slice(global, bounds[k], bounds[k + 1], &mb), 0);
                ref_step(&ref, mb, &pa, false, ma, mt);
                df_batch_free(mb);
            }
        for (int k = 0; k < N_KEYS; k++)
            worst_m = fmax(worst_m, check_metric(&ref, md, ma, mt, PPO_KEYS, k));
        double d = df_test_all_max(df_test_max_param_diff(df_actor_model(dp), df_actor_model(ref.alone)));
        double bound = ref_weight_bound(&ref);
        worst_w = fmax(worst_w, d / bound);
        if (d > bound)
            fail_msg("update %d: DP weights differ from the whole-batch update by %.3g (bound %.3g)", u, d,
                     bound);
        assert_same_checksum(df_actor_model(dp));
        df_metrics_free(md);
        df_metrics_free(ma);
        df_metrics_free(mt);
    }
    double moved = df_test_all_min(df_test_max_param_diff(df_actor_model(dp), init)),
           bound = ref_weight_bound(&ref);
    if (!(moved > TEETH * bound))
        fail_msg("the weights moved by %.3g only, bound %.3g", moved, bound);
    if (R == 0)
        print_message(
            "[ %s, %d ranks ] max |w_dp - w_whole| / bound %.3g (bound %.3g, moved %.3g), max metric "
            "diff / bound %.3g, amplification %.3g\n",
            sc->agg, N, worst_w, bound, moved, worst_m, ref.amp);
    df_model_free(init);
    df_actor_free(dp);
    ref_free(&ref);
    df_batch_free(shard);
    df_batch_free(global);
    free(mine);
}

static void test_ppo_equal_token_mean(void **state)
{
    (void)state;
    scenario sc = {"token-mean", {6, 6, 6, 6}, 3, 2, 3};
    run_ppo(&sc);
}

static void test_ppo_equal_seq_mean(void **state)
{
    (void)state;
    scenario sc = {"seq-mean-token-mean", {6, 6, 6, 6}, 3, 2, 3};
    run_ppo(&sc);
}

/* Rank 0 has 3 mini-batches, rank 1 one, rank 2 none: later steps run on rank 0's
   rows alone while the others join with zero gradients. */
static void test_ppo_unequal_token_mean(void **state)
{
    (void)state;
    scenario sc = {"token-mean", {5, 1, 0, 3}, 2, 1, 2};
    run_ppo(&sc);
}

static void test_ppo_unequal_seq_mean(void **state)
{
    (void)state;
    scenario sc = {"seq-mean-token-mean", {5, 1, 0, 3}, 2, 1, 2};
    run_ppo(&sc);
}

/* Negative control: each rank updating on its shard alone (no all-reduce) ends far
   outside the bound of one DP step against the whole-batch update, so the bound can tell. */
static void test_without_allreduce_differs(void **state)
{
    (void)state;
    if (N == 1)
        skip();
    int count[64] = {0};
    int64_t bounds[64], *mine, n_mine, G = 0;
    int n_mini;
    for (int r = 0; r < N; r++)
        G += count[r] = 6;
    df_test_dp_layout(count, 6, &mine, &n_mine, bounds, &n_mini);
    df_batch *global = df_test_synth_batch(42, G), *shard;
    add_ppo_columns(global, 42);
    assert_int_equal(df_batch_select(global, mine, n_mine, &shard), 0);
    df_actor *local;
    df_actor_params p = params("token-mean", 0, 3);
    assert_int_equal(df_actor_create(df_test_micro_model(11), &p, true, &local), 0);
    ref_run ref;
    ref_init(&ref, &p);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_actor_update_policy(local, shard, m), 0);
    ref_call_begin(&ref);
    ref_step(&ref, global, &p, false, m, m);
    double d = df_test_all_min(df_test_max_param_diff(df_actor_model(local), df_actor_model(ref.alone)));
    if (R == 0)
        print_message("[ no all-reduce ] max |w_local - w_whole| %.3g, bound of a DP step %.3g\n", d,
                      ref_weight_bound(&ref));
    assert_true(d > TEETH * ref_weight_bound(&ref));
    df_metrics_free(m);
    df_actor_free(local);
    ref_free(&ref);
    df_batch_free(shard);
    df_batch_free(global);
    free(mine);
}

static void test_sft(void **state)
{
    (void)state;
    int count[64] = {0}, per[4] = {4, 2, 0, 3};
    int64_t bounds[64], *mine, n_mine, G = 0;
    int n_mini;
    for (int r = 0; r < N; r++)
        G += count[r] = per[r % 4];
    df_test_dp_layout(count, 100, &mine, &n_mine, bounds, &n_mini);
    df_batch *global = df_test_synth_batch(5, G), *shard;
    assert_int_equal(df_batch_select(global, mine, n_mine, &shard), 0);
    df_actor *dp;
    df_actor_params pd = params("token-mean", 0, 1), pa = params("token-mean", 0, 3);
    pd.optim.lr = pa.optim.lr = 0.1;
    assert_int_equal(df_actor_create(df_test_micro_model(11), &pd, true, &dp), 0);
    ref_run ref;
    ref_init(&ref, &pa);
    df_actor_set_comm(dp, W);
    double worst = 0, first = 0, last = 0;
    for (int it = 0; it < 4; it++) {
        df_metrics *md = df_metrics_new(), *ma = df_metrics_new(), *mt = df_metrics_new();
        assert_int_equal(df_test_all_max(df_actor_sft_step(dp, shard, md)), 0);
        ref_call_begin(&ref);
        ref_step(&ref, global, &pa, true, ma, mt);
        check_metric(&ref, md, ma, mt, SFT_KEYS, K_PG);
        check_metric(&ref, md, ma, mt, SFT_KEYS, K_GRAD_NORM);
        last = df_metrics_get(md, "train/loss", 0);
        first = it == 0 ? last : first;
        double d = df_test_all_max(df_test_max_param_diff(df_actor_model(dp), df_actor_model(ref.alone)));
        worst = fmax(worst, d / ref_weight_bound(&ref));
        if (d > ref_weight_bound(&ref))
            fail_msg("step %d: DP weights differ from the whole-batch step by %.3g (bound %.3g)", it, d,
                     ref_weight_bound(&ref));
        assert_same_checksum(df_actor_model(dp));
        df_metrics_free(md);
        df_metrics_free(ma);
        df_metrics_free(mt);
    }
    assert_true(first > 3.0 && last < first - 0.3); /* log(40) ~ 3.7, and it learns */
    df_model *init = df_test_micro_model(11);
    double moved = df_test_max_param_diff(df_actor_model(dp), init);
    assert_true(moved > TEETH * ref_weight_bound(&ref));
    df_model_free(init);
    if (R == 0)
        print_message(
            "[ sft, %d ranks ] max |w_dp - w_whole| / bound %.3g (bound %.3g, moved %.3g), amplification "
            "%.3g\n",
            N, worst, ref_weight_bound(&ref), moved, ref.amp);
    df_actor_free(dp);
    ref_free(&ref);
    df_batch_free(shard);
    df_batch_free(global);
    free(mine);
}

/* A rank that fails before the collectives makes every rank fail, none hangs. */
static void test_failure_agreement(void **state)
{
    (void)state;
    df_batch *b = df_test_synth_batch(3, 4);
    add_ppo_columns(b, 3);
    df_batch *bad = df_test_synth_batch(3, 4); /* no old_log_probs */
    df_actor *a;
    df_actor_params p = params("token-mean", 0, 2);
    assert_int_equal(df_actor_create(df_test_micro_model(11), &p, true, &a), 0);
    df_actor_set_comm(a, W);
    df_metrics *m = df_metrics_new();
    bool failer = R == N - 1;
    int rc = df_actor_update_policy(a, failer ? bad : b, m);
    if (failer)
        assert_error_mentions(rc, DF_EINVAL, "old_log_probs");
    else
        assert_error_mentions(rc, DF_EINTERNAL, "data-parallel");
    df_batch_drop(bad, "response_ids");
    rc = df_actor_sft_step(a, failer ? bad : b, m);
    if (failer)
        assert_error_mentions(rc, DF_EINVAL, "response_ids");
    else
        assert_error_mentions(rc, DF_EINTERNAL, "data-parallel");
    assert_int_equal(df_actor_update_policy(a, b, m), 0); /* the group still works */
    assert_same_checksum(df_actor_model(a));
    df_metrics_free(m);
    df_actor_free(a);
    df_batch_free(b);
    df_batch_free(bad);
}

/* ---- df_model_param_checksum ---------------------------------------------------- */

/* Golden values from tests/golden/param_checksum.py (the documented definition). */
static void test_checksum_golden(void **state)
{
    (void)state;
    static const struct {
        int64_t n;
        uint64_t want;
    } cases[] = {
        {0, 0x0000000000000000ULL}, {1, 0x5C3D77E4E6A060F9ULL},      {5, 0x936AC9B90872898AULL},
        {8, 0xAE8C219A36CA3C8DULL}, {300001, 0x7EC3EEECE4CC4962ULL}, /* two 1 MiB blocks and a half word */
    };
    int threads0 = omp_get_max_threads();
    float *buf = malloc(300001 * sizeof *buf);
    for (int64_t i = 0; i < 300001; i++)
        buf[i] = (float)((int)(i % 2001) - 1000) / 1024.0f;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        df_model m = {.n_params = cases[c].n, .params = buf};
        for (int threads = 1; threads <= 2; threads++) {
            omp_set_num_threads(threads);
            uint64_t got = 1;
            assert_int_equal(df_model_param_checksum(&m, &got), 0);
            if (got != cases[c].want)
                fail_msg("n %lld: 0x%016llX, want 0x%016llX", (long long)cases[c].n, (unsigned long long)got,
                         (unsigned long long)cases[c].want);
        }
    }
    omp_set_num_threads(threads0);
    free(buf);
    assert_int_equal(df_model_param_checksum(NULL, &(uint64_t){0}), DF_EINVAL);
}

static void test_checksum_sensitive(void **state)
{
    (void)state;
    df_model *m = df_test_micro_model(11), *c;
    assert_int_equal(df_model_clone(m, &c), 0);
    uint64_t h0, h1;
    assert_int_equal(df_model_param_checksum(m, &h0), 0);
    assert_int_equal(df_model_param_checksum(c, &h1), 0);
    assert_true(h0 == h1);
    int64_t at[] = {0, 1, m->n_params / 2, m->n_params - 1};
    for (size_t i = 0; i < 4; i++)
        for (int bit = 0; bit < 32; bit += 31) { /* lowest mantissa bit, sign bit */
            uint32_t u;
            memcpy(&u, &c->params[at[i]], 4);
            u ^= 1u << bit;
            memcpy(&c->params[at[i]], &u, 4);
            assert_int_equal(df_model_param_checksum(c, &h1), 0);
            assert_true(h1 != h0);
            u ^= 1u << bit;
            memcpy(&c->params[at[i]], &u, 4);
        }
    /* swapping two elements changes it too */
    float t = c->params[3];
    c->params[3] = c->params[4];
    c->params[4] = t;
    assert_int_equal(df_model_param_checksum(c, &h1), 0);
    assert_true(h1 != h0);
    df_model_free(m);
    df_model_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_world),
        cmocka_unit_test(test_checksum_golden),
        cmocka_unit_test(test_checksum_sensitive),
        cmocka_unit_test(test_ppo_equal_token_mean),
        cmocka_unit_test(test_ppo_equal_seq_mean),
        cmocka_unit_test(test_ppo_unequal_token_mean),
        cmocka_unit_test(test_ppo_unequal_seq_mean),
        cmocka_unit_test(test_without_allreduce_differs),
        cmocka_unit_test(test_sft),
        cmocka_unit_test(test_failure_agreement),
    };
    return cmocka_run_group_tests(tests, group_setup, df_test_world_teardown);
}
