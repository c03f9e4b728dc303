/*
 * test_critic.c — the PPO critic engine (engine/critic.h): values of response
 * tokens, the value loss going down over repeated updates, micro-batch
 * invariance, and data parallelism (each rank updates on its shard; every rank
 * also updates a lone critic on the whole batch from the same weights; weights
 * and metrics must match up to float summation order, bounded step by step by
 * the rounding model of tests/testtrain.h, see ref_step). Runs as one rank and
 * under mpiexec:
 * mpi-test: np 2
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testmpi.h"

#include "distflow/algo.h"
#include "distflow/rng.h"
#include "engine/critic.h"
#include "testtrain.h"
#include "testutil.h"

#include <math.h>
#include <omp.h>

/* The weights of a comparison must have moved by more than TEETH times their bound (as in
   test_actor_dp): a wrong normaliser or a missing all-reduce changes the step by well over a tenth. */
#define TEETH 10

static int group_setup(void **state)
{
    omp_set_num_threads(1); /* a tiny model gains nothing from threads on a shared machine */
    return df_test_world_setup(state);
}

/* A value model from the micro causal LM (vocab 40, hidden 16), head seeded by `seed`. */
static df_model *value_model(uint64_t seed)
{
    df_model *m = df_test_micro_model(11);
    assert_int_equal(df_model_to_value_model(&m, seed), 0);
    assert_int_equal((int)m->cfg.num_labels, 1);
    return m;
}

static df_critic_params params(const char *agg, int64_t mini, int64_t micro)
{
    df_critic_params p = {.optim = {.lr = 1e-2,
                                    .weight_decay = 0.01,
                                    .beta1 = 0.9,
                                    .beta2 = 0.999,
                                    .adam_eps = 1e-8,
                                    .grad_clip = 1.0},
                          .mini_batch_size = mini,
                          .micro_batch_size = micro,
                          .forward_micro_batch_size = micro,
                          .loss = {.ppo_epochs = 1, .cliprange_value = 0.2, .loss_agg_mode = agg,
                                   .loss_agg_norm_length = 8}};
    return p;
}

/* returns: a learnable function of the response token, (id mod 5) / 5 - 0.4. */
static void set_returns(df_batch *b)
{
    float *ret;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "returns", "response_ids", &ret), 0);
    const df_column *r = df_batch_column(b, "response_ids");
    const int32_t *ids = r->data;
    for (int64_t t = 0; t < r->offsets[df_batch_size(b)]; t++)
        ret[t] = (float)(ids[t] % 5) / 5.0f - 0.4f;
}

/* values = the initial critic's predictions + 0.5 or 0.05 of either sign (so that some predictions
   clip, and none starts near the clip range's edge, where the loss's gradient jumps), and returns. */
static void add_value_columns(df_batch *b, uint64_t seed)
{
    df_critic *c;
    df_critic_params p = params("token-mean", 0, 4);
    assert_int_equal(df_critic_create(value_model(5), &p, &c), 0);
    assert_int_equal(df_critic_compute_values(c, b), 0);
    df_critic_free(c);
    float *v = df_batch_data_mut(b, "values");
    df_rng rng;
    df_rng_seed(&rng, df_rng_key(seed, 9, 0, 0));
    for (int64_t t = 0; t < df_batch_offsets(b, "response_ids")[df_batch_size(b)]; t++)
        v[t] += (float)((df_rng_below(&rng, 2) ? 0.5 : 0.05) * (df_rng_below(&rng, 2) ? 1 : -1));
    set_returns(b);
}

static void test_refuses_causal_lm(void **state)
{
    (void)state;
    df_model *lm = df_test_micro_model(11);
    df_critic *c = NULL;
    df_critic_params p = params("token-mean", 0, 4);
    assert_error_mentions(df_critic_create(lm, &p, &c), DF_EINVAL, "num_labels");
    p.loss.loss_agg_mode = "token-sum";
    df_model *vm = value_model(5);
    assert_error_mentions(df_critic_create(vm, &p, &c), DF_EINVAL, "critic.loss_agg_mode");
    p = params("token-mean", 0, 4);
    p.loss.cliprange_value = -1;
    assert_error_mentions(df_critic_create(vm, &p, &c), DF_EINVAL, "cliprange_value");
    assert_null(c);
    df_model_free(lm); /* the caller still owns the models after a failed create */
    df_model_free(vm);
}

static void test_missing_columns(void **state)
{
    (void)state;
    df_critic *c;
    df_critic_params p = params("token-mean", 0, 4);
    assert_int_equal(df_critic_create(value_model(5), &p, &c), 0);
    df_batch *b = df_test_synth_batch(1, 6);
    assert_int_equal(df_critic_compute_values(c, b), 0);
    df_metrics *m = df_metrics_new();
    assert_error_mentions(df_critic_update(c, b, m), DF_EINVAL, "'returns'");
    assert_int_equal(df_critic_step_count(c), 0);
    df_batch_drop(b, "prompt_ids");
    assert_error_mentions(df_critic_compute_values(c, b), DF_EINVAL, "'prompt_ids'");
    df_metrics_free(m);
    df_batch_free(b);
    df_critic_free(c);
}

/* compute_values is the model's value forward, whatever the micro-batching: each
   response token's value is read at the row that predicts it. */
static void test_compute_values(void **state)
{
    (void)state;
    df_batch *b = df_test_synth_batch(3, 10);
    df_critic *c1, *c2;
    df_critic_params p1 = params("token-mean", 0, 0), p2 = params("token-mean", 0, 3);
    p2.forward_max_token_len = 9;
    assert_int_equal(df_critic_create(value_model(5), &p1, &c1), 0);
    assert_int_equal(df_critic_create(value_model(5), &p2, &c2), 0);
    assert_int_equal(df_critic_compute_values(c1, b), 0);
    df_batch *b2 = NULL;
    assert_int_equal(df_batch_slice(b, 0, 10, &b2), 0);
    assert_int_equal(df_critic_compute_values(c2, b2), 0);
    const float *v1 = df_batch_data_mut(b, "values"), *v2 = df_batch_data_mut(b2, "values");
    int64_t T = df_batch_offsets(b, "response_ids")[10];
    /* two forward passes of other row blockings */
    const double F = tb_forward_bound(df_critic_model(c1), tt_max_len(b), 1.0f);
    double spread = 0;
    for (int64_t t = 0; t < T; t++) {
        assert_near(v1[t], v2[t], F);
        spread = fmax(spread, fabs(v1[t] - v1[0]));
    }
    assert_true(spread > 100 * F); /* the values depend on the tokens, far beyond rounding */
    /* sample 0 on its own: prompt p ++ response r, value of r[j] at row |p| - 1 + j */
    const df_model *vm = df_critic_model(c1);
    int64_t np, nr;
    const int32_t *pt = df_batch_tok_i32(b, "prompt_ids", 0, &np),
                  *rt = df_batch_tok_i32(b, "response_ids", 0, &nr);
    int32_t toks[16];
    int64_t rows[8], so[2] = {0, np + nr};
    memcpy(toks, pt, (size_t)np * sizeof *toks);
    memcpy(toks + np, rt, (size_t)nr * sizeof *toks);
    for (int64_t j = 0; j < nr; j++)
        rows[j] = np - 1 + j;
    df_seq_batch sb = {
        .n_tokens = np + nr, .tokens = toks, .n_seqs = 1, .seq_offsets = so, .n_out = nr, .out_rows = rows};
    df_acts *acts;
    float vals[8];
    assert_int_equal(df_acts_create(&vm->cfg, np + nr, nr, &acts), 0);
    assert_int_equal(df_model_forward_values(vm, acts, &sb, vals), 0);
    for (int64_t j = 0; j < nr; j++)
        assert_near(v1[j], vals[j], F);
    df_acts_free(acts);
    df_batch_free(b);
    df_batch_free(b2);
    df_critic_free(c1);
    df_critic_free(c2);
}

/* b's rows in the order idx (n of them). */
static df_batch *reordered(const df_batch *b, const int64_t *idx, int64_t n)
{
    df_batch *out;
    assert_int_equal(df_batch_select(b, idx, n, &out), 0);
    return out;
}

/* critic.shuffle, as test_losses_train's test_actor_shuffle for the actor: one update of 2
   epochs x 2 mini-batches of 4 rows with shuffle on leaves the weights bit for bit where two
   unshuffled 1-epoch updates over the batch in orders p1, p2 (df_rng_key(seed, 0, 0, 0)'s
   first two permutations) leave them; both regroup the rows, so an ignored shuffle fails. */
static void test_critic_shuffle(void **state)
{
    (void)state;
    const uint64_t seed = 1;
    int64_t p1[8], p2[8];
    for (int i = 0; i < 8; i++)
        p1[i] = p2[i] = i;
    df_rng r;
    df_rng_seed(&r, df_rng_key(seed, 0, 0, 0));
    df_rng_shuffle_i64(&r, p1, 8);
    df_rng_shuffle_i64(&r, p2, 8);
    int low1 = 0, low2 = 0; /* rows of the first half in each first mini-batch */
    for (int i = 0; i < 4; i++)
        low1 += p1[i] < 4, low2 += p2[i] < 4;
    assert_true(low1 % 4 != 0 && low2 % 4 != 0);
    df_batch *b = df_test_synth_batch(5, 8);
    add_value_columns(b, 2);
    df_batch *o1 = reordered(b, p1, 8), *o2 = reordered(b, p2, 8);
    df_critic_params ps = params("token-mean", 4, 2), pr = ps;
    ps.loss.ppo_epochs = 2, ps.shuffle = true, ps.shuffle_seed = seed;
    df_critic *cs, *cr;
    assert_int_equal(df_critic_create(value_model(5), &ps, &cs), 0);
    assert_int_equal(df_critic_create(value_model(5), &pr, &cr), 0);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_critic_update(cs, b, m), 0);
    assert_int_equal(df_critic_update(cr, o1, m), 0);
    assert_int_equal(df_critic_update(cr, o2, m), 0);
    const df_model *a = df_critic_model(cs), *z = df_critic_model(cr);
    assert_true(memcmp(a->params, z->params, (size_t)a->n_params * sizeof(float)) == 0);
    df_metrics_free(m);
    df_batch_free(b), df_batch_free(o1), df_batch_free(o2);
    df_critic_free(cs), df_critic_free(cr);
}

/* PPO's critic loop on a fixed batch: values from the current critic, then an update.
   The fitted returns pull vf_loss well below its start. */
static void test_loss_decreases(void **state)
{
    (void)state;
    df_batch *b = df_test_synth_batch(7, 16);
    set_returns(b);
    df_critic *c;
    df_critic_params p = params("token-mean", 8, 4);
    p.loss.ppo_epochs = 2;
    assert_int_equal(df_critic_create(value_model(5), &p, &c), 0);
    double first = 0, last = 0, clip_any = 0;
    for (int k = 0; k < 20; k++) {
        df_metrics *m = df_metrics_new();
        assert_int_equal(df_critic_compute_values(c, b), 0);
        assert_int_equal(df_critic_update(c, b, m), 0);
        double vf = df_metrics_get(m, "critic/vf_loss", NAN);
        assert_true(isfinite(vf) && vf >= 0);
        assert_true(df_metrics_has(m, "critic/vpred_mean") && df_metrics_has(m, "critic/grad_norm"));
        assert_near(df_metrics_get(m, "critic/lr", 0), 1e-2, 0); /* exact: a constant schedule, factor 1 */
        clip_any = fmax(clip_any, df_metrics_get(m, "critic/vf_clipfrac", NAN));
        if (k == 0)
            first = vf;
        last = vf;
        df_metrics_free(m);
    }
    print_message("[ critic ] vf_loss step 0 %.4g -> step 19 %.4g, max vf_clipfrac %.3f\n", first, last,
                  clip_any);
    /* not rounding: the fit is far from the start (0.5 E (v - R)^2 with R spread over [-0.4, 0.4])
       and halves it in 20 steps of lr 1e-2 */
    assert_true(first > 0.02);
    assert_true(last < 0.5 * first);
    assert_int_equal(df_critic_step_count(c), 20);
    df_batch_free(b);
    df_critic_free(c);
}

/* df_critic_set_loss: a critic given other loss settings after creation takes the same steps
   as one created with them; bad settings are refused and leave the current ones. */
static void test_set_loss(void **state)
{
    (void)state;
    df_batch *b = df_test_synth_batch(13, 12);
    add_value_columns(b, 13);
    df_critic_params pa = params("token-mean", 6, 3), pb = params("seq-mean-token-sum", 6, 3);
    pb.loss.cliprange_value = 0.05;
    pb.loss.ppo_epochs = 2;
    df_critic *a, *bc, *ref;
    assert_int_equal(df_critic_create(value_model(5), &pa, &a), 0);
    assert_int_equal(df_critic_create(value_model(5), &pb, &bc), 0);
    assert_int_equal(df_critic_create(value_model(5), &pa, &ref), 0);
    df_critic_loss bad = pb.loss;
    bad.loss_agg_mode = "nope";
    assert_error_mentions(df_critic_set_loss(a, &bad), DF_EINVAL, "critic.loss_agg_mode");
    bad = pb.loss;
    bad.cliprange_value = NAN;
    assert_error_mentions(df_critic_set_loss(a, &bad), DF_EINVAL, "critic.cliprange_value");
    assert_int_equal(df_critic_set_loss(a, &pb.loss), 0);
    df_metrics *ma = df_metrics_new(), *mb = df_metrics_new(), *mr = df_metrics_new();
    assert_int_equal(df_critic_update(a, b, ma), 0);
    assert_int_equal(df_critic_update(bc, b, mb), 0);
    assert_int_equal(df_critic_update(ref, b, mr), 0);
    assert_true(df_test_max_param_diff(df_critic_model(a), df_critic_model(bc)) == 0.0);
    assert_true(df_metrics_get(ma, "critic/vf_loss", NAN) == df_metrics_get(mb, "critic/vf_loss", NAN));
    /* not rounding: with the settings ignored a and ref would be the same computation (exactly 0 apart) */
    assert_true(df_test_max_param_diff(df_critic_model(a), df_critic_model(ref)) > 1e-4);
    df_metrics_free(ma);
    df_metrics_free(mb);
    df_metrics_free(mr);
    df_critic_free(a);
    df_critic_free(bc);
    df_critic_free(ref);
    df_batch_free(b);
}

/* ---- the bound, step by step along a reference training ------------------------------------- */

enum { K_VF, K_CLIP, K_VPRED, K_GRAD_NORM, K_LR, N_KEYS };
static const char *const KEYS[N_KEYS] = {"critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean",
                                         "critic/grad_norm", "critic/lr"};

/* The reference critic (one optimizer step per call), its twin and the running bound (tt_track); as
   test_actor_dp's ref_run. */
typedef struct ref_run {
    df_critic *alone, *twin;
    tt_track tr;
} ref_run;

static void ref_init(ref_run *r, const df_critic_params *p)
{
    df_model *m = value_model(5);
    tt_track_init(&r->tr, tt_perturb(m, 1e-5, 77));
    assert_int_equal(df_critic_create(value_model(5), p, &r->alone), 0);
    assert_int_equal(df_critic_create(m, p, &r->twin), 0);
}

static void ref_free(ref_run *r)
{
    df_critic_free(r->alone);
    df_critic_free(r->twin);
}

/* Values of b's response tokens under c (into a copy of b; caller frees out). */
static const float *predict(df_critic *c, const df_batch *b, df_batch **out)
{
    assert_int_equal(df_batch_slice(b, 0, df_batch_size(b), out), 0);
    df_batch_drop(*out, "values");
    assert_int_equal(df_critic_compute_values(c, *out), 0);
    return df_batch_column(*out, "values")->data;
}

/*
 * One optimizer step of the reference on mini-batch mb, with the bound on what the compared step
 * may differ by. The gradient is sum_t c_t grad v_t with c_t = w_t (v_t - R_t), or 0 where the
 * clipped branch of 0.5 max((v - R)^2, (v_clip - R)^2) is taken. At the reference's weights:
 * F = tb_forward_bound for two forward passes of a value, J_t = ||grad v_t|| (tt_value_grad_norms),
 * G = sum_t w_t (|v_t - R_t| + dv) J_t the magnitude of the gradient's terms, and c_t moves by w_t
 * per unit of value error: S = sum_t w_t J_t. The gradients differ by <= tt_grad_rel G + F S (each
 * run's forward + backward, probabilistic; the all-reduce over N ranks, worst case),
 * plus the whole term of every token whose clip decision could flip: its value lies within dv of
 * an edge (old +- cliprange, where the clamp starts, or 2R - (old +- cliprange), where the branches
 * cross), dv = F plus what the weight difference so far moves a value by (the twin's value change
 * per unit of weight change times the weight bound). Metrics at equal weights: vf_loss moves by
 * <= sum w (|v - R| + dv) dv, vpred_mean by <= F, vf_clipfrac by the flippable share of tokens,
 * grad_norm by the gradient bound, lr not at all.
 */
static void ref_step(ref_run *r, const df_batch *mb, const df_critic_params *p, df_metrics *ma,
                     df_metrics *mt)
{
    df_model *m = df_critic_model(r->alone);
    const int64_t S = df_batch_size(mb), *ro = df_batch_offsets(mb, "response_ids"), T = ro[S];
    const int64_t pos = tt_max_len(mb), packed = df_batch_offsets(mb, "prompt_ids")[S] + T;
    double tw = tt_track_twin(&r->tr, m, df_critic_model(r->twin));
    double F = tb_forward_bound(m, pos, 1.0f);
    double *J = calloc((size_t)T + 1, sizeof *J);
    float *w = calloc((size_t)T + 1, sizeof *w);
    assert_int_equal(
        df_loss_agg_weights_ex(p->loss.loss_agg_mode, S, ro, T, S, p->loss.loss_agg_norm_length, w), 0);
    tt_value_grad_norms(m, mb, J);
    df_batch *xa, *xt;
    const float *v = predict(r->alone, mb, &xa), *vt = predict(r->twin, mb, &xt);
    const float *old = df_batch_column(mb, "values")->data, *ret = df_batch_column(mb, "returns")->data;
    double s_v = 0;
    for (int64_t t = 0; t < T; t++)
        s_v = fmax(s_v, fabs((double)vt[t] - v[t]));
    const double dv = F + tt_track_carry(&r->tr, s_v, tw), c = p->loss.cliprange_value;
    double G = 0, Sens = 0, flip = 0, n_flip = 0, b[N_KEYS] = {0};
    for (int64_t t = 0; t < T; t++) {
        double e = fabs((double)v[t] - ret[t]) + dv;
        G += w[t] * e * J[t];
        Sens += w[t] * J[t];
        const double edges[] = {old[t] - c, old[t] + c, 2.0 * ret[t] - (old[t] - c),
                                2.0 * ret[t] - (old[t] + c)};
        bool near = false;
        for (int k = 0; k < 4; k++)
            near |= fabs(v[t] - edges[k]) <= dv;
        n_flip += near;
        flip += near ? w[t] * e * J[t] : 0;
        b[K_VF] += w[t] * e * dv;
    }
    b[K_VPRED] = F;
    b[K_CLIP] = n_flip / (double)T;
    double dg = tt_grad_rel(m, pos, packed, N) * G + F * Sens + flip;
    b[K_GRAD_NORM] = dg;
    df_batch_free(xa), df_batch_free(xt);
    free(J), free(w);

    df_batch *x;
    assert_int_equal(df_batch_slice(mb, 0, S, &x), 0);
    assert_int_equal(df_critic_update(r->alone, x, ma), 0);
    assert_int_equal(df_critic_update(r->twin, x, mt), 0);
    df_batch_free(x);
    tt_track_step(&r->tr, b, N_KEYS, dg, &p->optim, m, df_critic_model(r->twin));
    if (getenv("DF_TOL_DEBUG") && R == 0)
        print_message("  step %d: F %.3g G %.3g S %.3g flips %.3g dv %.3g dg %.3g inj %.3g amp %.3g\n",
                      r->tr.steps, F, G, Sens, b[K_CLIP], dv, dg, r->tr.inj, r->tr.amp);
}

/* Metric k of a compared call against the reference's over the same steps (tt_track_metric_bound), as
   test_actor_dp's check_metric; the same on every rank. Returns observed / bound. */
static double check_metric(const ref_run *r, const df_metrics *got, const df_metrics *ref,
                           const df_metrics *twin, int k)
{
    double x = df_metrics_get(got, KEYS[k], NAN), y = df_metrics_get(ref, KEYS[k], NAN),
           z = df_metrics_get(twin, KEYS[k], NAN);
    assert_true(isfinite(x) && isfinite(y) && isfinite(z));
    assert_true(df_test_all_max(x) == df_test_all_min(x));
    double bound = tt_track_metric_bound(&r->tr, k, y, z, k != K_CLIP && k != K_LR);
    if (df_test_all_max(fabs(x - y)) > bound)
        fail_msg("%s: %.9g vs the reference's %.9g (bound %.3g, rank %d)", KEYS[k], x, y, bound, R);
    return bound > 0 ? fabs(x - y) / bound : 0;
}

/* Weights after a compared call against the reference's; returns observed / bound. */
static double check_weights(const ref_run *r, df_critic *got, const char *what)
{
    double d = df_test_all_max(df_test_max_param_diff(df_critic_model(got), df_critic_model(r->alone)));
    if (d > tt_track_weight_bound(&r->tr))
        fail_msg("%s: weights differ from the reference's by %.3g (bound %.3g)", what, d,
                 tt_track_weight_bound(&r->tr));
    return d / tt_track_weight_bound(&r->tr);
}

/* The reference's calls for one compared update over b (mini-batches [bounds[k], bounds[k+1]) of
   global, `epochs` times), then the metrics and weights compared. */
static double compare_update(ref_run *r, df_critic *got, const df_metrics *mg, const df_batch *global,
                             const int64_t *bounds, int n_mini, int epochs, const df_critic_params *pr,
                             double *worst_m)
{
    df_metrics *ma = df_metrics_new(), *mt = df_metrics_new();
    tt_track_call_begin(&r->tr);
    for (int ep = 0; ep < epochs; ep++)
        for (int k = 0; k < n_mini; k++) { /* one optimizer step per global mini-batch */
            df_batch *mb;
            assert_int_equal(df_batch_slice(global, bounds[k], bounds[k + 1], &mb), 0);
            ref_step(r, mb, pr, ma, mt);
            df_batch_free(mb);
        }
    for (int k = 0; k < N_KEYS; k++)
        *worst_m = fmax(*worst_m, check_metric(r, mg, ma, mt, k));
    df_metrics_free(ma);
    df_metrics_free(mt);
    return check_weights(r, got, "update");
}

/* Adam's eps = 1 in the compared trainings, well above the gradient's rounding noise (~1e-7): with
   1e-8 a parameter whose gradient is that noise moves by up to lr either way. */
static df_critic_params lipschitz(df_critic_params p)
{
    p.optim.adam_eps = 1;
    return p;
}

/* Micro-batches of 3 rows, or a token budget, take the same step as one micro-batch; the reference
   takes the same mini-batches one call each. */
static void test_micro_batch_invariant(void **state)
{
    (void)state;
    const char *modes[] = {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                           "seq-mean-token-sum-norm"};
    for (size_t i = 0; i < 4; i++) {
        df_batch *b = df_test_synth_batch(11, 12);
        add_value_columns(b, 11);
        df_critic *micro;
        df_critic_params pm = lipschitz(params(modes[i], 6, 3)), pr = lipschitz(params(modes[i], 0, 0));
        pm.max_token_len = 12;
        assert_int_equal(df_critic_create(value_model(5), &pm, &micro), 0);
        ref_run ref;
        ref_init(&ref, &pr);
        const int64_t bounds[] = {0, 6, 12};
        double worst_w = 0, worst_m = 0, clip = 0;
        for (int u = 0; u < 2; u++) {
            df_metrics *mm = df_metrics_new();
            assert_int_equal(df_critic_update(micro, b, mm), 0);
            worst_w = fmax(worst_w, compare_update(&ref, micro, mm, b, bounds, 2, 1, &pr, &worst_m));
            clip = fmax(clip, df_metrics_get(mm, "critic/vf_clipfrac", 0));
            df_metrics_free(mm);
        }
        assert_true(clip > 0); /* clipping exercised */
        df_model *init = value_model(5);
        double moved = df_test_max_param_diff(df_critic_model(micro), init);
        assert_true(moved > TEETH * tt_track_weight_bound(&ref.tr));
        print_message(
            "[ critic micro %s ] weights / bound %.3g (bound %.3g, moved %.3g), metrics / bound %.3g\n",
            modes[i], worst_w, tt_track_weight_bound(&ref.tr), moved, worst_m);
        df_model_free(init);
        df_critic_free(micro);
        ref_free(&ref);
        df_batch_free(b);
    }
}

static void run_dp(const char *agg, const int *per_rank, int64_t mbs, int epochs)
{
    int count[64] = {0};
    int64_t bounds[64], *mine, n_mine, G = 0;
    int n_mini;
    for (int r = 0; r < N; r++)
        G += count[r] = per_rank[r % 4];
    df_test_dp_layout(count, mbs, &mine, &n_mine, bounds, &n_mini);
    df_batch *global = df_test_synth_batch(42, G), *shard;
    add_value_columns(global, 42);
    assert_int_equal(df_batch_select(global, mine, n_mine, &shard), 0);
    df_critic *dp;
    df_critic_params pd = lipschitz(params(agg, mbs, 2)), pa = lipschitz(params(agg, 0, 3));
    pd.loss.ppo_epochs = epochs;
    assert_int_equal(df_critic_create(value_model(5), &pd, &dp), 0);
    ref_run ref;
    ref_init(&ref, &pa);
    df_critic_set_comm(dp, W);
    double worst = 0, worst_m = 0;
    for (int u = 0; u < 2; u++) {
        df_metrics *md = df_metrics_new();
        assert_int_equal(df_test_all_max(df_critic_update(dp, shard, md)), 0);
        worst = fmax(worst, compare_update(&ref, dp, md, global, bounds, n_mini, epochs, &pa, &worst_m));
        df_metrics_free(md);
    }
    df_model *init = value_model(5);
    double moved = df_test_all_min(df_test_max_param_diff(df_critic_model(dp), init));
    assert_true(moved > TEETH * tt_track_weight_bound(&ref.tr)); /* it trained, beyond the bound */
    if (R == 0)
        print_message(
            "[ critic %s, %d ranks ] weights / bound %.3g (bound %.3g, moved %.3g), metrics / bound %.3g\n",
            agg, N, worst, tt_track_weight_bound(&ref.tr), moved, worst_m);
    df_model_free(init);
    df_critic_free(dp);
    ref_free(&ref);
    df_batch_free(shard);
    df_batch_free(global);
    free(mine);
}

static void test_dp_equal(void **state)
{
    (void)state;
    const int per_rank[4] = {6, 6, 6, 6};
    run_dp("token-mean", per_rank, 3, 2);
    run_dp("seq-mean-token-mean", per_rank, 3, 1);
}

/* Rank 0 has 3 mini-batches, rank 1 one: later steps run on rank 0's rows while the other joins with zero
 * gradient. */
static void test_dp_unequal(void **state)
{
    (void)state;
    const int per_rank[4] = {5, 1, 0, 3};
    run_dp("token-mean", per_rank, 2, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refuses_causal_lm),
        cmocka_unit_test(test_missing_columns),
        cmocka_unit_test(test_compute_values),
        cmocka_unit_test(test_loss_decreases),
        cmocka_unit_test(test_critic_shuffle),
        cmocka_unit_test(test_micro_batch_invariant),
        cmocka_unit_test(test_set_loss),
        cmocka_unit_test(test_dp_equal),
        cmocka_unit_test(test_dp_unequal),
    };
    return cmocka_run_group_tests(tests, group_setup, df_test_world_teardown);
}
