/*
 * test_golden_step.c — one GRPO step and one PPO (GAE) step through the DAG worker
 * (df_dag_worker_create / _fit on a workflow file), against values computed independently in
 * float64 by tests/golden/gen_rl_step.py (verl's definitions around gen_golden.py's float64 Qwen2;
 * fixtures in tests/golden/rl_step/; the script says how to regenerate them).
 *
 * Sampling cannot differ between CPUs: the workflow's rollout node is this test's
 * golden.fixed_rollout, which checks the prompts the data path encoded and emits fixed responses.
 * Every other node is the worker's own: the reward (golden/digits, registered here), the advantage
 * (grpo; gae with gamma != lam), old log-probs, reference log-probs, the critic's values, the actor's
 * and the critic's updates. golden.shift_and_keep, after the reference, keeps a copy of the batch
 * (the columns checked here) and shifts old_log_probs, ref_log_prob and values by fixed amounts, as
 * a staler policy, an older reference and an older critic would have left them: so the one
 * optimizer step already clips ratios on both sides and by the dual clip, has a KL loss with a
 * non-zero gradient (at step 1 the reference is the actor) and clips values, with every loss
 * coefficient non-zero.
 *
 * One optimizer step per update, because Adam (eps 1e-8) moves a weight whose gradient is within
 * rounding by up to lr either way: a second step would start from weights no rounding analysis
 * holds close, while the first step's update is bounded here against the reference's gradient
 * (check_adam_step).
 *
 * Checked: the batch columns (scores, rewards, advantages, returns, old_log_probs, ref_log_prob,
 * values), the step's metrics (actor/pg_loss, kl_loss, entropy, entropy_loss, pg_clipfrac,
 * pg_clipfrac_lower, ppo_kl, grad_norm; critic/vf_loss, vf_clipfrac, vpred_mean, grad_norm,
 * vf_explained_var, values/mean, returns/mean; critic/score/mean) and the weights after the
 * update. Bounds: one float computation against a float64 reference (docs/testing.md): the
 * forward error of tests/testbounds.h, the gradient's error built as tests/test_actor_dp.c
 * builds it, from the per-token gradient norms the reference computed (bounds_actor,
 * check_critic), and each decision (clip, sign) checked to lie outside rounding.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testtrain.h"
#include "testutil.h"

#include "distflow/dag.h"
#include "distflow/reward.h"
#include "model/safetensors.h"

#include <jansson.h>
#include <math.h>

#define GOLDEN DF_SOURCE_DIR "/tests/golden"

/* The run in progress and its fixture (the node functions read it). */
typedef struct {
    json_t *fx;
    int64_t n, T;          /* responses, response tokens */
    int64_t *po, *ro;      /* prompt / response offsets [n + 1] */
    int32_t *pt, *rt;      /* prompt / response token ids */
    float *d_old, *d_ref, *d_val; /* the shifts (binary fractions: exact in float); d_val NULL for GRPO */
    df_batch *kept;        /* the batch as golden.shift_and_keep received it */
} golden_run;

static golden_run G;

/* ---- the fixture ------------------------------------------------------------------------------ */

static json_t *jget(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        fail_msg("fixture: no '%s'", key);
    return v;
}

/* o[key] as n doubles (malloc'd); fails unless it holds exactly n numbers. */
static double *jvec(json_t *o, const char *key, int64_t n)
{
    json_t *a = jget(o, key);
    if (!json_is_array(a) || (int64_t)json_array_size(a) != n)
        fail_msg("fixture: '%s' is not an array of %lld numbers", key, (long long)n);
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = json_number_value(json_array_get(a, (size_t)i));
    return v;
}

static float *jvec_f(json_t *o, const char *key, int64_t n)
{
    double *d = jvec(o, key, n);
    float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
    for (int64_t i = 0; i < n; i++) {
        f[i] = (float)d[i];
        if ((double)f[i] != d[i])
            fail_msg("fixture: %s[%lld] = %.17g is not exact in float", key, (long long)i, d[i]);
    }
    free(d);
    return f;
}

static double jnum(json_t *o, const char *key)
{
    json_t *v = jget(o, key);
    if (!json_is_number(v))
        fail_msg("fixture: '%s' is not a number", key);
    return json_number_value(v);
}

/* A list of token lists into packed offsets and ids. */
static void jtokens(json_t *a, int64_t n, int64_t **off, int32_t **ids)
{
    assert_int_equal((int64_t)json_array_size(a), n);
    *off = calloc((size_t)n + 1, sizeof **off);
    for (int64_t i = 0; i < n; i++)
        (*off)[i + 1] = (*off)[i] + (int64_t)json_array_size(json_array_get(a, (size_t)i));
    *ids = malloc((size_t)((*off)[n] > 0 ? (*off)[n] : 1) * sizeof **ids);
    for (int64_t i = 0; i < n; i++)
        for (int64_t t = (*off)[i]; t < (*off)[i + 1]; t++)
            (*ids)[t] = (int32_t)json_integer_value(json_array_get(json_array_get(a, (size_t)i), (size_t)(t - (*off)[i])));
}

static void load_fixture(const char *algo)
{
    char p[512];
    snprintf(p, sizeof p, "%s/rl_step/%s.json", GOLDEN, algo);
    json_error_t e;
    memset(&G, 0, sizeof G);
    if (!(G.fx = json_load_file(p, 0, &e)))
        fail_msg("%s:%d: %s", p, e.line, e.text);
    json_t *resp = jget(G.fx, "response_ids");
    G.n = (int64_t)json_array_size(resp);
    jtokens(jget(G.fx, "prompt_ids"), G.n, &G.po, &G.pt);
    jtokens(resp, G.n, &G.ro, &G.rt);
    G.T = G.ro[G.n];
    json_t *pert = jget(G.fx, "perturb");
    G.d_old = jvec_f(pert, "old_log_probs", G.T);
    G.d_ref = jvec_f(pert, "ref_log_prob", G.T);
    G.d_val = json_object_get(pert, "values") ? jvec_f(pert, "values", G.T) : NULL;
}

static void free_fixture(void)
{
    json_decref(G.fx);
    free(G.po), free(G.ro), free(G.pt), free(G.rt);
    free(G.d_old), free(G.d_ref), free(G.d_val);
    df_batch_free(G.kept);
    memset(&G, 0, sizeof G);
}

/* ---- the test's nodes ------------------------------------------------------------------------- */

/* rollout: the fixture's responses for the prompts the worker's data path encoded (which must be
   the fixture's: ChatML with the character tokenizer of tests/golden/rl_step). */
static int fixed_rollout(df_node_ctx *ctx, df_batch *b, df_node_output *out)
{
    (void)ctx;
    int64_t P = b ? df_batch_size(b) : 0;
    if (P <= 0 || G.n % P)
        return df_error(DF_EINVAL, "golden.fixed_rollout: %lld prompts for %lld responses", (long long)P,
                        (long long)G.n);
    const int64_t N = G.n / P;
    for (int64_t i = 0; i < P; i++) {
        int64_t len;
        const int32_t *ids = df_batch_tok_i32(b, "prompt_ids", i, &len), *want = G.pt + G.po[i * N];
        if (!ids || len != G.po[i * N + 1] - G.po[i * N] || memcmp(ids, want, (size_t)len * sizeof *ids))
            return df_error(DF_EINVAL, "golden.fixed_rollout: prompt %lld is not the fixture's", (long long)i);
    }
    df_batch *r = NULL;
    int rc = df_batch_repeat_interleave(b, N, &r);
    if (!rc)
        rc = df_batch_set_tok_i32(r, "response_ids", G.ro, G.rt);
    if (rc) {
        df_batch_free(r);
        return rc;
    }
    out->batch = r;
    return DF_OK;
}

static int shift(df_batch *b, const char *name, const float *d)
{
    const df_column *c = df_batch_column(b, name);
    if (!c || c->kind != DF_COL_TOK_F32 || memcmp(c->offsets, G.ro, (size_t)(G.n + 1) * sizeof *G.ro))
        return df_error(DF_EINVAL, "golden.shift_and_keep: no column '%s' laid out like response_ids", name);
    float *x = df_batch_data_mut(b, name);
    for (int64_t t = 0; t < G.T; t++)
        x[t] += d[t];
    return DF_OK;
}

/* after the reference: keep the batch, then shift the old log-probs, reference log-probs, values */
static int shift_and_keep(df_node_ctx *ctx, df_batch *b, df_node_output *out)
{
    (void)ctx, (void)out;
    if (!b || df_batch_size(b) != G.n)
        return df_error(DF_EINVAL, "golden.shift_and_keep: expected %lld rows", (long long)G.n);
    df_batch_free(G.kept);
    G.kept = NULL;
    int rc = df_batch_slice(b, 0, G.n, &G.kept);
    if (!rc)
        rc = shift(b, "old_log_probs", G.d_old);
    if (!rc)
        rc = shift(b, "ref_log_prob", G.d_ref);
    if (!rc && G.d_val)
        rc = shift(b, "values", G.d_val);
    return rc;
}

/* ---- running the step --------------------------------------------------------------------------- */

static const char WF_GRPO[] =
    "dag_id: golden_grpo\n"
    "nodes:\n"
    "  - {node_id: rollout, node_type: MODEL_INFERENCE, node_role: ROLLOUT, executable_ref: golden.fixed_rollout}\n"
    "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout]}\n"
    "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [reward]}\n"
    "  - {node_id: old, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true, dependencies: [adv]}\n"
    "  - {node_id: ref, node_type: MODEL_TRAIN, node_role: REFERENCE, dependencies: [old]}\n"
    "  - {node_id: keep, node_type: COMPUTE, executable_ref: golden.shift_and_keep, dependencies: [ref]}\n"
    "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [keep]}\n";

static const char WF_PPO[] =
    "dag_id: golden_ppo\n"
    "nodes:\n"
    "  - {node_id: rollout, node_type: MODEL_INFERENCE, node_role: ROLLOUT, executable_ref: golden.fixed_rollout}\n"
    "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout]}\n"
    "  - {node_id: value, node_type: MODEL_TRAIN, node_role: CRITIC, only_forward_compute: true,\n"
    "     dependencies: [reward]}\n"
    "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [value]}\n"
    "  - {node_id: old, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true, dependencies: [adv]}\n"
    "  - {node_id: ref, node_type: MODEL_TRAIN, node_role: REFERENCE, dependencies: [old]}\n"
    "  - {node_id: keep, node_type: COMPUTE, executable_ref: golden.shift_and_keep, dependencies: [ref]}\n"
    "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [keep]}\n"
    "  - {node_id: vf, node_type: MODEL_TRAIN, node_role: CRITIC, dependencies: [train]}\n";

/* One training step of the fixture's algorithm into dir/out (checkpoint global_step_1). */
static void run_step(const char *dir, bool ppo)
{
    char wf[512], yaml[4096];
    snprintf(wf, sizeof wf, "%s/wf.yaml", dir);
    const char *text = ppo ? WF_PPO : WF_GRPO;
    assert_int_equal(df_write_file_atomic(wf, text, strlen(text)), 0);
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/rl_step/train.jsonl], val_files: [], shuffle: false,\n"
             "       tokenizer: %s/rl_step}\n"
             "actor_rollout_ref: {model: {path: %s/tiny_qwen2}}\n"
             "%s"
             "dag: {workflow_path: %s}\n"
             "trainer: {total_training_steps: 1, save_freq: 1, logger: [], seed: 1, default_local_dir: %s/out}\n",
             GOLDEN, GOLDEN, GOLDEN, ppo ? "critic: {model: {path: " GOLDEN "/tiny_qwen2_value}}\n" : "", wf,
             dir);
    json_t *ov = jget(G.fx, "overrides");
    int n = (int)json_array_size(ov);
    const char **o = calloc((size_t)n + 1, sizeof *o);
    for (int i = 0; i < n; i++)
        o[i] = json_string_value(json_array_get(ov, (size_t)i));
    int rc = df_test_run(NULL, df_test_config(yaml, "golden_step.yaml", o, n));
    free(o);
    if (rc)
        fail_msg("%s", df_last_error());
    assert_non_null(G.kept);
}

/* ---- comparisons -------------------------------------------------------------------------------- */

/* The largest observed error / bound of a group of comparisons, printed once. */
typedef struct {
    const char *what;
    double worst;
    int64_t at;
} margin;

static void within(margin *mg, int64_t i, double got, double want, double bound)
{
    double err = fabs(got - want);
    if (!(err <= bound))
        fail_msg("%s[%lld] = %.9g, reference %.9g (error %.3g > bound %.3g)", mg->what, (long long)i, got, want,
                 err, bound);
    if (bound > 0 && err / bound > mg->worst)
        mg->worst = err / bound, mg->at = i;
}

static void report(const margin *mg)
{
    print_message("  %-28s worst error / bound %.3g (at %lld)\n", mg->what, mg->worst, (long long)mg->at);
}

static void check_metric(json_t *line, const char *key, double bound)
{
    margin mg = {key, 0, 0};
    double want = jnum(jget(G.fx, "metrics"), key);
    /* metrics.jsonl prints 10 significant digits (half a unit of the 10th: 5e-10 relative); the
       reference's double rounding */
    bound += (5e-10 + df_tol_gamma(64, DF_U64)) * fabs(want);
    within(&mg, 0, df_test_metric(line, key), want, bound);
    print_message("  %-28s %.9f (reference %.9f, bound %.3g, error / bound %.3g)\n", key, df_test_metric(line, key), want,
                  bound, mg.worst);
}

/* A per-token column of the kept batch, each token within bound[t] of the fixture's. */
static void check_column(const char *name, const double *want, const double *bound)
{
    const df_column *c = df_batch_column(G.kept, name);
    if (!c || c->kind != DF_COL_TOK_F32 || memcmp(c->offsets, G.ro, (size_t)(G.n + 1) * sizeof *G.ro))
        fail_msg("the batch has no per-token column %s laid out like response_ids", name);
    margin mg = {name, 0, 0};
    for (int64_t t = 0; t < G.T; t++)
        within(&mg, t, ((const float *)c->data)[t], want[t], bound[t]);
    report(&mg);
}

/* The reference's gradient of the step's loss (before clipping) for model m, `prefix`<hf name> in the
   fixture, as a blob in m's layout (malloc'd; 0 in the alignment gaps between tensors). */
static float *reference_grad(const df_model *m, const char *prefix)
{
    char p[512], name[160];
    snprintf(p, sizeof p, "%s/rl_step/%s_grad.safetensors", GOLDEN, json_string_value(jget(G.fx, "algorithm")));
    df_st_file *f;
    if (df_st_open(p, &f))
        fail_msg("%s", df_last_error());
    float *g = calloc((size_t)m->n_params, sizeof *g);
    df_param_desc *d;
    int nd;
    int64_t total;
    assert_int_equal(df_model_layout(&m->cfg, &d, &nd, &total), 0);
    assert_int_equal(total, m->n_params);
    for (int i = 0; i < nd; i++) {
        snprintf(name, sizeof name, "%s%s", prefix, d[i].name);
        if (df_st_read_f32(f, name, g + d[i].offset, d[i].numel))
            fail_msg("%s: %s", p, df_last_error());
    }
    free(d);
    df_st_close(f);
    return g;
}

/* torch's clip_grad_norm_ factor for a gradient of norm x */
static double clip_scale(double clip, double x)
{
    return clip > 0 ? fmin(1.0, clip / (fmax(x, 0) + 1e-6)) : 1.0;
}

/* Adam's first step per unit of lr (torch AdamW, bias-corrected, weight decay 0): h / (|h| + eps) */
static double adam_u(double h, double eps)
{
    return h / (fabs(h) + eps);
}

/* its inverse on [-1, 1], +-infinity at the ends */
static double adam_u_inv(double y, double eps)
{
    return fabs(y) >= 1 ? copysign(INFINITY, y) : eps * y / (1 - fabs(y));
}

/*
 * The weights after the update's one AdamW step from init (weight decay 0), against the reference's
 * gradient g (before clipping, norm gn): torch's first step moves parameter i by -lr u(h_i),
 * u(h) = h / (|h| + eps), h = s g, s = min(1, clip / (gn + 1e-6)). The worker's gradient is within dg of
 * g (2-norm), its norm within dg of gn, so its h' = s' g' is within
 *   dh = s'max dg + |s' - s|max gn + 2 u clip (its float clip) + u s gn (g stored as float)
 * of h, as a vector and so per parameter. Its float step is lr u(h') (1 + d), |d| <= gamma_12 (the
 * moments, the square root, the bias corrections and the constants rounded to float), then rounded into
 * the weight (u |w|).
 * (1) Per parameter: u's slope eps / (|h| + eps)^2 is largest at the smallest |h|, so the steps differ by
 *     <= lr min(2, dh eps / (max(0, |h_i| - dh) + eps)^2) plus that rounding: tight wherever the
 *     gradient is well above dh, so a wrong step size fails here.
 * (2) As a vector: the worker's observed step, to within its rounding, gives the interval I_i of the h'_i
 *     that produce it (u's inverse), and sum_i dist(h_i, I_i)^2 <= dh^2. A parameter moved the other
 *     way contributes its whole h_i^2: an update pointing elsewhere fails here even where (1) leaves
 *     single parameters free (their gradient within dh).
 */
static void check_adam_step(const df_model *init, const df_model *got, const float *g, double lr, double clip,
                            double gn, double dg, const char *who)
{
    const double eps = 1e-8, u = DF_U32, s = clip_scale(clip, gn);
    const double s_hi = clip_scale(clip, gn - dg), s_lo = clip_scale(clip, gn + dg);
    const double dh = s_hi * dg + fmax(s_hi - s, s - s_lo) * gn + 2 * u * (clip > 0 ? clip : gn) + u * s * gn;
    double worst = 0, d2 = 0;
    int64_t worst_i = 0, loose = 0, moved_other_way = 0, n = 0;
    df_param_desc *d;
    int nd;
    int64_t total;
    assert_int_equal(df_model_layout(&init->cfg, &d, &nd, &total), 0);
    for (int k = 0; k < nd; k++) /* the tensors, not the alignment gaps between them */
        for (int64_t i = d[k].offset; i < d[k].offset + d[k].numel; i++, n++) {
            const double t0 = init->params[i], a = got->params[i], h = s * g[i];
            const double step = t0 - a, want = lr * adam_u(h, eps);
            const double rnd = u * (fabs(t0) + fabs(a)) + df_tol_gamma(12, u) * lr * fabs(adam_u(h, eps)) +
                               df_tol_gamma(12, u) * fabs(step);
            const double lo = fmax(0, fabs(h) - dh),
                         bound = lr * fmin(2.0, dh * eps / ((lo + eps) * (lo + eps))) + rnd;
            loose += bound >= lr;
            if (!(fabs(step - want) <= bound))
                fail_msg("%s %s[%lld]: moved by %.9g, the reference's step %.9g (bound %.3g)", who, d[k].name,
                         (long long)(i - d[k].offset), -step, -want, bound);
            if (fabs(step - want) / bound > worst)
                worst = fabs(step - want) / bound, worst_i = i;
            /* (2): the h' that give the observed step, to within its rounding */
            const double y = step / lr, rho = (u * fabs(a) + df_tol_gamma(12, u) * fabs(step)) / lr;
            const double lo_h = adam_u_inv(fmax(-1, y - rho), eps), hi_h = adam_u_inv(fmin(1, y + rho), eps);
            const double dist = h < lo_h ? lo_h - h : h > hi_h ? h - hi_h : 0;
            d2 += dist * dist;
            moved_other_way += (y - rho > 0 && h < 0) || (y + rho < 0 && h > 0);
        }
    free(d);
    print_message("  %s weights after AdamW: per parameter worst error / bound %.3g (blob index %lld; %lld of %lld "
                  "left free: gradient within dh = %.3g); as a vector %.3g / %.3g = %.3g (%lld moved against the "
                  "reference's gradient)\n",
                  who, worst, (long long)worst_i, (long long)loose, (long long)n, dh, sqrt(d2), dh,
                  sqrt(d2) / dh, (long long)moved_other_way);
    if (!(sqrt(d2) <= dh))
        fail_msg("%s: the update is not one the reference's gradient gives: distance %.3g > %.3g", who, sqrt(d2), dh);
}

static df_model *load_model(const char *dir, const char *sub)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    df_model *m;
    if (df_model_load(p, &m))
        fail_msg("%s: %s", p, df_last_error());
    return m;
}

/* Longest prompt + response, and the most packed tokens in a micro-batch of `rows` rows. */
static int64_t longest(void)
{
    int64_t L = 0;
    for (int64_t i = 0; i < G.n; i++)
        L = fmax(L, G.po[i + 1] - G.po[i] + G.ro[i + 1] - G.ro[i]);
    return L;
}

static int64_t micro_tokens(int64_t rows, int *parts)
{
    int64_t most = 0;
    *parts = 0;
    for (int64_t s = 0; s < G.n; s += rows, (*parts)++) {
        int64_t e = s + rows < G.n ? s + rows : G.n, k = G.po[e] - G.po[s] + G.ro[e] - G.ro[s];
        most = k > most ? k : most;
    }
    return most;
}

/* Relative rounding of one float computation's gradient (forward + backward, probabilistic, micro-batches
   of <= tokens packed tokens) plus the sum of `parts` micro-batch gradients (worst case); testtrain.h's
   tt_grad_rel is this for each of two computations compared with each other. */
static double grad_rel1(const df_model *m, int64_t L, int64_t tokens, int parts)
{
    return df_tol_gamma_prob(tb_grad_chain(&m->cfg, L, tokens), DF_TOL_LAMBDA, DF_U32) +
           df_tol_gamma(parts > 1 ? parts - 1 : 0, DF_U32);
}

/* The value the fixture's overrides give `key` (the step ran with them). */
static const char *override_str(const char *key)
{
    json_t *ov = jget(G.fx, "overrides");
    size_t n = strlen(key);
    for (size_t i = 0; i < json_array_size(ov); i++) {
        const char *s = json_string_value(json_array_get(ov, i));
        if (!strncmp(s, key, n) && s[n] == '=')
            return s + n + 1;
    }
    fail_msg("fixture: no override %s", key);
    return NULL;
}

static double override_num(const char *key)
{
    return atof(override_str(key));
}

/* ---- the actor ---------------------------------------------------------------------------------- */

/*
 * The actor's half of the step. Reference values per response token t (fixture): log p_t (= old and
 * ref before the shifts), entropy H_t, advantage A_t, the aggregation weight w_t, J_t = ||grad log p_t||
 * and K_t = ||grad H_t|| at the initial weights. E = tb_forward_err: one float forward pass puts a
 * log-prob or an entropy within E of the exact one; so the worker's old_log_probs, ref_log_prob (after
 * the shift, its float add: u |x|) and its training pass's log p each lie within E (+ u |x|).
 * eA[t] bounds the advantage's error (given). With r_t = e^(log p - old), the float r within
 * R_t = r_t e^(dr), dr = E + e_old:
 *   unclipped tokens: the loss -A w r has gradient coefficient c = -A w r, off by <= w (|A| R dr + eA R);
 *   ratio-clipped tokens (A > 0, r > 1 + high; A < 0, r < 1 - low) and dual-clipped ones (A < 0,
 *   r > clip_ratio_c): constant losses -A (1 +- eps) and -A c, coefficient 0, off by eA (1 +- eps) / eA c;
 *   low_var_kl, k = e^y - y - 1 with y = ref - log p: coefficient beta w (1 - e^y), off by
 *   <= beta w e^(y + dy) dy, dy = 2 E (+ u |ref|); k itself by <= (|e^y - 1| + e^y (e^dy - 1)) dy;
 *   the entropy bonus: coefficient -alpha w (rounded once to float), H off by E.
 * These hold when no clip decision can flip: every log-ratio is more than dr from log(1 - low),
 * log(1 + high) and log(clip_ratio_c), every |A| above eA (checked: a fixture that failed this would be
 * rebuilt, not the bound loosened). The gradient: G = sum_t (|c_t| J_t + alpha w_t K_t) is the size of
 * its per-token terms; one float computation of it is within (grad_rel1 + E (1 + 2Z)) G (rounding; the
 * backward's softmax weights from logits within E, as test_actor_dp's bound) plus sum_t dc_t J_t (the
 * coefficients' errors) plus a few roundings of each coefficient. grad_norm is within that of the
 * reference's (triangle inequality).
 */
typedef struct {
    double dg, pg, kl, ent_loss, ent, ppo_kl; /* bounds */
} actor_bounds;

static actor_bounds bounds_actor(const df_model *m, const double *eA)
{
    json_t *cols = jget(G.fx, "columns"), *tok = jget(G.fx, "token");
    double *lp = jvec(cols, "old_log_probs", G.T), *H = jvec(cols, "entropy", G.T), *A = jvec(cols, "advantages", G.T);
    double *w = jvec(tok, "agg_w", G.T), *J = jvec(tok, "J", G.T), *K = jvec(tok, "K", G.T);
    const double temp = override_num("actor_rollout_ref.rollout.temperature"),
                 lo = override_num("actor_rollout_ref.actor.clip_ratio_low"),
                 hi = override_num("actor_rollout_ref.actor.clip_ratio_high"),
                 cc = override_num("actor_rollout_ref.actor.clip_ratio_c"),
                 beta = override_num("actor_rollout_ref.actor.kl_loss_coef"),
                 alpha = override_num("actor_rollout_ref.actor.entropy_coeff");
    assert_true(temp > 0 && lo > 0 && hi > 0 && cc > 1 && beta > 0 && alpha > 0);
    const int64_t L = longest();
    const double E = tb_forward_err(m, L, (float)temp), Z = tb_head_bound(m, (float)temp), u = DF_U32;
    actor_bounds b = {0};
    double G_ = 0, S = 0, sum_pg = 0, sum_kl = 0, sum_h = 0, sum_x = 0, worst_margin = INFINITY;
    for (int64_t t = 0; t < G.T; t++) {
        const double old = lp[t] + G.d_old[t], ref = lp[t] + G.d_ref[t];
        const double e_old = E + u * fabs(old), e_ref = E + u * fabs(ref), dr = E + e_old;
        const double x = lp[t] - old, r = exp(x), R = r * exp(dr), y = ref - lp[t], dy = E + e_ref;
        /* clip decisions and the advantage's sign must not flip */
        double room = fmin(fmin(fabs(x - log(1 - lo)), fabs(x - log(1 + hi))), fabs(x - log(cc))) - dr;
        room = fmin(room, fabs(A[t]) - eA[t]);
        worst_margin = fmin(worst_margin, room);
        if (!(room > 0))
            fail_msg("token %lld: a clip decision or the advantage's sign is within rounding (log-ratio %.6g, "
                     "A %.6g)", (long long)t, x, A[t]);
        double c, dc, pg, dpg;
        if (A[t] > 0 && r > 1 + hi)
            c = 0, dc = 0, pg = -A[t] * (1 + hi), dpg = eA[t] * (1 + hi);
        else if (A[t] < 0 && r > cc)
            c = 0, dc = 0, pg = -A[t] * cc, dpg = eA[t] * cc;
        else if (A[t] < 0 && r < 1 - lo)
            c = 0, dc = 0, pg = -A[t] * (1 - lo), dpg = eA[t] * (1 - lo);
        else
            c = -A[t] * w[t] * r, dc = w[t] * (fabs(A[t]) * R * dr + eA[t] * R), pg = -A[t] * r,
            dpg = fabs(A[t]) * R * dr + eA[t] * R;
        const double ey = exp(y), k = ey - y - 1;
        assert_true(k < 10); /* low_var_kl's clamp is idle */
        c += beta * w[t] * (1 - ey);
        dc += beta * w[t] * ey * exp(dy) * dy + 4 * u * fabs(c);
        G_ += fabs(c) * J[t] + alpha * w[t] * K[t];
        S += dc * J[t] + 2 * u * alpha * w[t] * K[t];
        b.pg += w[t] * dpg;
        b.kl += w[t] * (fabs(ey - 1) + ey * expm1(dy)) * dy;
        b.ent_loss += w[t] * E;
        b.ppo_kl += (e_old + E) / (double)G.T;
        sum_pg += w[t] * fabs(pg), sum_kl += w[t] * k, sum_h += w[t] * H[t], sum_x += fabs(x) / (double)G.T;
    }
    int parts;
    const int64_t mt = micro_tokens(4, &parts);
    b.dg = (grad_rel1(m, L, mt, parts) + E * (1 + 2 * Z)) * G_ + S;
    /* each loss is a weighted sum of T float terms, each a few roundings from its exact value */
    const double sum_rnd = df_tol_gamma((double)G.T + 4, DF_U32);
    b.pg += sum_rnd * sum_pg;
    b.kl += sum_rnd * sum_kl;
    b.ent_loss += sum_rnd * sum_h;
    double mean_h = 0;
    for (int64_t t = 0; t < G.T; t++)
        mean_h += H[t] / (double)G.T;
    b.ent = E + sum_rnd * mean_h;
    b.ppo_kl += sum_rnd * sum_x;
    print_message("  actor: E %.3g Z %.3g G %.3g S %.3g grad bound %.3g; smallest clip / sign margin %.3g\n", E, Z,
                  G_, S, b.dg, worst_margin);
    free(lp), free(H), free(A), free(w), free(J), free(K);
    return b;
}

/* The actor's metrics and its weights after the update; eA bounds the advantages' errors. */
static void check_actor(json_t *line, const char *dir, const double *eA)
{
    df_model *init = load_model(GOLDEN, "tiny_qwen2");
    actor_bounds b = bounds_actor(init, eA);
    check_metric(line, "actor/pg_loss", b.pg);
    check_metric(line, "actor/kl_loss", b.kl);
    check_metric(line, "actor/entropy_loss", b.ent_loss);
    check_metric(line, "actor/entropy", b.ent);
    check_metric(line, "actor/ppo_kl", b.ppo_kl);
    check_metric(line, "actor/pg_clipfrac", 0); /* exact: no decision within rounding (bounds_actor) */
    check_metric(line, "actor/pg_clipfrac_lower", 0);
    const double gn = jnum(jget(G.fx, "metrics"), "actor/grad_norm");
    check_metric(line, "actor/grad_norm", b.dg + DF_U32 * gn);
    df_model *got = load_model(dir, "out/global_step_1/actor");
    float *g = reference_grad(init, "actor.");
    check_adam_step(init, got, g, override_num("actor_rollout_ref.actor.optim.lr"),
                    override_num("actor_rollout_ref.actor.grad_clip"), gn, b.dg, "actor");
    free(g);
    df_model_free(init), df_model_free(got);
}

/* ---- the steps ---------------------------------------------------------------------------------- */

/* Scores and rewards: exact (a digit share in double rounded once to float, both sides). */
static void check_scores(void)
{
    json_t *cols = jget(G.fx, "columns");
    double *s = jvec(cols, "token_level_scores", G.T), *r = jvec(cols, "token_level_rewards", G.T);
    double *zero = calloc((size_t)G.T, sizeof *zero);
    check_column("token_level_scores", s, zero);
    check_column("token_level_rewards", r, zero);
    free(s), free(r), free(zero);
}

/* old_log_probs and ref_log_prob: each one float forward pass, within E (+ its float store). */
static void check_log_probs(const df_model *m)
{
    double *lp = jvec(jget(G.fx, "columns"), "old_log_probs", G.T), *bound = malloc((size_t)G.T * sizeof *bound);
    const double E = tb_forward_err(m, longest(), (float)override_num("actor_rollout_ref.rollout.temperature"));
    for (int64_t t = 0; t < G.T; t++)
        bound[t] = E + DF_U32 * fabs(lp[t]);
    check_column("old_log_probs", lp, bound);
    check_column("ref_log_prob", lp, bound);
    free(lp), free(bound);
}

static void test_grpo_step(void **state)
{
    const char *dir = *state;
    load_fixture("grpo");
    run_step(dir, false);
    json_t *lines = df_test_metrics(dir, "out", true), *line = json_array_get(lines, 0);
    assert_int_equal(json_array_size(lines), 1);
    df_model *init = load_model(GOLDEN, "tiny_qwen2");
    check_scores();
    check_log_probs(init);
    df_model_free(init);
    /* GRPO: A = (s - mean) / (std + 1e-6) per group, in double from the float scores, stored as float
       (u |A|); the epsilon is passed as 1e-6f, which moves A by <= |A| u 1e-6 / std; the double
       arithmetic is within gamma_64 of the magnitudes it works at, (max |s| + |mean|) / std (1 + |A|) */
    json_t *cols = jget(G.fx, "columns");
    double *A = jvec(cols, "advantages", G.T), *eA = malloc((size_t)G.T * sizeof *eA),
           *sc = jvec(G.fx, "scores", G.n);
    const int64_t N = (int64_t)override_num("actor_rollout_ref.rollout.n");
    for (int64_t i = 0; i < G.n; i++) {
        const int64_t g0 = i / N * N;
        double mean = 0, var = 0, smax = 0;
        for (int64_t j = g0; j < g0 + N; j++)
            mean += sc[j] / (double)N, smax = fmax(smax, fabs(sc[j]));
        for (int64_t j = g0; j < g0 + N; j++)
            var += (sc[j] - mean) * (sc[j] - mean) / (double)(N - 1);
        const double sd = sqrt(var);
        assert_true(sd > 0);
        for (int64_t t = G.ro[i]; t < G.ro[i + 1]; t++)
            eA[t] = DF_U32 * fabs(A[t]) * (1 + 1e-6 / sd) +
                    df_tol_gamma(64, DF_U64) * (smax + fabs(mean)) / sd * (1 + fabs(A[t]));
    }
    free(sc);
    check_column("advantages", A, eA);
    check_column("returns", A, eA); /* verl's GRPO: returns = advantages */
    check_metric(line, "critic/score/mean", df_tol_gamma(64, DF_U64));
    check_actor(line, dir, eA);
    free(A), free(eA);
    json_decref(lines);
    free_fixture();
}

/* ---- PPO: values, GAE, the critic ------------------------------------------------------------------ */

/*
 * GAE's error from the values' (tests/golden/gen_rl_step.py: gamma 0.875, lam 0.625, exact in float).
 * Each value V_s of the worker is within eV_s = Ev + u |V_s| of the exact one (one forward pass of the
 * value model, tb_forward_err). A_t = sum_{s>=t} (gamma lam)^(s-t) (r_s + gamma V_{s+1} - V_s) has
 * dA_t / dV_t = -1 and dA_t / dV_s = gamma (1 - lam) (gamma lam)^(s-t-1) for s > t, so
 *   eA_t = eV_t + sum_{s>t} gamma (1 - lam) (gamma lam)^(s-t-1) eV_s,   eR_t = eA_t - eV_t (R = A + V),
 * plus the estimator's double arithmetic and the float store of R. Whitening W = (A - m) / sd,
 * sd = sqrt(var + 1e-8) (unbiased var over all T tokens): m moves by <= mean eA, sd by <= ||eA||_2 /
 * sqrt(T - 1) (centring does not lengthen a vector; sqrt(x^2 + c) is 1-Lipschitz in x), so
 *   eW_t = (eA_t + mean eA + |W_t| dsd) / (sd - dsd) + u |W_t|.
 */
static void gae_bounds(const double *V, const double *rew, const double *A_raw, const double *W, const double *R,
                       double Ev, double gamma, double lam, double *eR, double *eW)
{
    double *eA = malloc((size_t)G.T * sizeof *eA), mA = 0, nA = 0, mean = 0, var = 0;
    for (int64_t i = 0; i < G.n; i++)
        for (int64_t t = G.ro[i]; t < G.ro[i + 1]; t++) {
            double carry = 0, mag = 0, k = gamma * (1 - lam);
            for (int64_t s = t + 1; s < G.ro[i + 1]; s++, k *= gamma * lam)
                carry += k * (Ev + DF_U32 * fabs(V[s]));
            for (int64_t s = t; s < G.ro[i + 1]; s++)
                mag += fabs(rew[s]) + 2 * fabs(V[s]);
            const double dbl = df_tol_gamma(4 * (double)(G.ro[i + 1] - t) + 8, DF_U64) * mag;
            eA[t] = Ev + DF_U32 * fabs(V[t]) + carry + dbl;
            eR[t] = carry + dbl + DF_U32 * fabs(R[t]);
            mA += eA[t] / (double)G.T, nA += eA[t] * eA[t];
        }
    for (int64_t t = 0; t < G.T; t++)
        mean += A_raw[t] / (double)G.T;
    for (int64_t t = 0; t < G.T; t++)
        var += (A_raw[t] - mean) * (A_raw[t] - mean) / (double)(G.T - 1);
    const double sd = sqrt(var + 1e-8), dsd = sqrt(nA) / sqrt((double)G.T - 1);
    assert_true(sd > 2 * dsd);
    for (int64_t t = 0; t < G.T; t++)
        eW[t] = (eA[t] + mA + fabs(W[t]) * dsd) / (sd - dsd) + DF_U32 * fabs(W[t]) +
                df_tol_gamma(4 * (double)G.T + 8, DF_U64) * (1 + fabs(W[t])) * (fabs(mean) + sd) / sd;
    print_message("  GAE: Ev %.3g, largest advantage error bound %.3g (raw), whitened by sd %.3g\n", Ev,
                  sqrt(nA), sd);
    free(eA);
}

/* |change| of the unbiased variance of T values when each moves by <= e_t: centring does not lengthen
   the error vector, so sqrt((T-1) var) moves by <= ||e||_2. */
static double var_move(double var, const double *e)
{
    double n2 = 0;
    for (int64_t t = 0; t < G.T; t++)
        n2 += e[t] * e[t];
    const double T1 = (double)G.T - 1;
    return (2 * sqrt(var * T1) * sqrt(n2) + n2) / T1;
}

/*
 * The critic's update, per response token: vpred (its training pass) and values (the worker's column,
 * then shifted by d_v, a float add) are each within eV = Ev + u |V| of the exact V + 0 / + d_v; returns
 * within eR (gae_bounds). The clamp vc = clamp(vpred, values - c, values + c) is idle when |d_v| < c (then
 * vc = vpred: a tie, the unclipped branch), else vc = values -+ c; then the loss takes
 * max(l1 = (vpred - R)^2, l2 = (vc - R)^2). These decisions hold when |d_v| is more than the two values'
 * errors from c and |l1 - l2| more than their errors 2 |x - R| e + e^2 (checked). The gradient of the
 * unclipped branch, dv = w (vpred - R), is off by <= w (eV + eR) (+ its float rounding); the clipped
 * branch's is 0. One float computation of the critic's gradient is within grad_rel1 G + S, G = sum |dv_t|
 * Jv_t, S = sum_t w (eV + eR) Jv_t (Jv_t = ||grad v_t||, the reference's). vf_loss = 0.5 sum w max(l1, l2)
 * moves by the chosen branch's error; vpred_mean by eV; vf_clipfrac not at all.
 * The data metrics read the batch the last node left: values/mean of the shifted values; explained_var
 * 1 - var(R - values) / (var(R) + 1e-5) through var_move.
 */
static void check_critic(json_t *line, const char *dir, const double *eR)
{
    json_t *cols = jget(G.fx, "columns"), *tok = jget(G.fx, "token");
    double *V = jvec(cols, "values", G.T), *R = jvec(cols, "returns", G.T), *Jv = jvec(tok, "Jv", G.T);
    df_model *init = load_model(GOLDEN, "tiny_qwen2_value");
    const double Ev = tb_forward_err(init, longest(), 1.0f), c = override_num("critic.cliprange_value"),
                 u = DF_U32, w = 1.0 / (double)G.T; /* critic.loss_agg_mode token-mean */
    assert_string_equal(override_str("critic.loss_agg_mode"), "token-mean");
    double Gv = 0, Sv = 0, b_vf = 0, b_vp = 0, b_vals = 0, b_ret = 0, room_min = INFINITY, sum_vf = 0;
    double *e_d = malloc((size_t)G.T * sizeof *e_d), *e_r = malloc((size_t)G.T * sizeof *e_r);
    double md = 0, mr = 0, vd = 0, vr = 0;
    for (int64_t t = 0; t < G.T; t++) {
        const double vs = V[t] + G.d_val[t], eV = Ev + u * fabs(V[t]), eVs = eV + u * fabs(vs);
        const double e1 = eV + eR[t], l1 = (V[t] - R[t]) * (V[t] - R[t]), dl1 = 2 * fabs(V[t] - R[t]) * e1 + e1 * e1;
        double room = fabs(fabs(G.d_val[t]) - c) - (eV + eVs + u * (fabs(vs) + c));
        bool unclipped = true;
        double loss = l1, dloss = dl1;
        if (fabs(G.d_val[t]) > c) {
            const double vc = G.d_val[t] > 0 ? vs - c : vs + c, e2 = eVs + u * fabs(vc) + eR[t];
            const double l2 = (vc - R[t]) * (vc - R[t]), dl2 = 2 * fabs(vc - R[t]) * e2 + e2 * e2;
            room = fmin(room, fabs(l1 - l2) - dl1 - dl2);
            if (l2 > l1)
                unclipped = false, loss = l2, dloss = dl2;
        }
        room_min = fmin(room_min, room);
        if (!(room > 0))
            fail_msg("critic token %lld: a value-clip decision is within rounding", (long long)t);
        const double dv = unclipped ? w * (V[t] - R[t]) : 0;
        Gv += fabs(dv) * Jv[t];
        Sv += (unclipped ? w * e1 : 0) * Jv[t] + 4 * u * fabs(dv) * Jv[t];
        b_vf += 0.5 * w * dloss;
        sum_vf += 0.5 * w * loss;
        b_vp += eV / (double)G.T;
        b_vals += eVs / (double)G.T;
        b_ret += eR[t] / (double)G.T;
        e_d[t] = eR[t] + eVs, e_r[t] = eR[t];
        md += (R[t] - vs) / (double)G.T, mr += R[t] / (double)G.T;
    }
    for (int64_t t = 0; t < G.T; t++) {
        const double d = R[t] - V[t] - G.d_val[t];
        vd += (d - md) * (d - md) / (double)(G.T - 1), vr += (R[t] - mr) * (R[t] - mr) / (double)(G.T - 1);
    }
    int parts;
    const int64_t mt = micro_tokens(6, &parts);
    const double dg = grad_rel1(init, longest(), mt, parts) * Gv + Sv, sum_rnd = df_tol_gamma((double)G.T + 4, u);
    print_message("  critic: Ev %.3g G %.3g S %.3g grad bound %.3g; smallest clip margin %.3g\n", Ev, Gv, Sv, dg,
                  room_min);
    check_metric(line, "critic/vf_loss", b_vf + sum_rnd * sum_vf);
    check_metric(line, "critic/vf_clipfrac", 0);
    check_metric(line, "critic/vpred_mean", b_vp + sum_rnd * fabs(jnum(jget(G.fx, "metrics"), "critic/vpred_mean")));
    check_metric(line, "critic/values/mean", b_vals + sum_rnd * fabs(jnum(jget(G.fx, "metrics"), "critic/values/mean")));
    check_metric(line, "critic/returns/mean", b_ret + sum_rnd * fabs(mr));
    /* explained var: the worker sums in double over floats (gamma_2T of the squares it adds) */
    const double k = 1e-5, rnd_d = df_tol_gamma(2 * (double)G.T + 8, DF_U64);
    const double da = var_move(vd, e_d) + rnd_d * (vd + md * md) * G.T / (G.T - 1.0),
                 db = var_move(vr, e_r) + rnd_d * (vr + mr * mr) * G.T / (G.T - 1.0);
    assert_true(vr + k > db);
    check_metric(line, "critic/vf_explained_var", da / (vr + k - db) + vd * db / ((vr + k) * (vr + k - db)));
    const double gn = jnum(jget(G.fx, "metrics"), "critic/grad_norm");
    check_metric(line, "critic/grad_norm", dg + DF_U32 * gn);
    df_model *got = load_model(dir, "out/global_step_1/critic");
    float *g = reference_grad(init, "critic.");
    check_adam_step(init, got, g, override_num("critic.optim.lr"), override_num("critic.grad_clip"), gn, dg, "critic");
    free(g), free(e_d), free(e_r), free(V), free(R), free(Jv);
    df_model_free(init), df_model_free(got);
}

static void test_ppo_step(void **state)
{
    const char *dir = *state;
    load_fixture("ppo");
    run_step(dir, true);
    json_t *lines = df_test_metrics(dir, "out", true), *line = json_array_get(lines, 0);
    assert_int_equal(json_array_size(lines), 1);
    df_model *init = load_model(GOLDEN, "tiny_qwen2"), *critic = load_model(GOLDEN, "tiny_qwen2_value");
    check_scores();
    check_log_probs(init);
    json_t *cols = jget(G.fx, "columns"), *tok = jget(G.fx, "token");
    double *V = jvec(cols, "values", G.T), *rew = jvec(cols, "token_level_rewards", G.T),
           *A = jvec(cols, "advantages", G.T), *R = jvec(cols, "returns", G.T), *A_raw = jvec(tok, "adv_raw", G.T);
    double *eV = malloc((size_t)G.T * sizeof *eV), *eR = malloc((size_t)G.T * sizeof *eR),
           *eW = malloc((size_t)G.T * sizeof *eW);
    const double Ev = tb_forward_err(critic, longest(), 1.0f);
    for (int64_t t = 0; t < G.T; t++)
        eV[t] = Ev + DF_U32 * fabs(V[t]);
    check_column("values", V, eV);
    gae_bounds(V, rew, A_raw, A, R, Ev, override_num("algorithm.gamma"), override_num("algorithm.lam"), eR, eW);
    check_column("advantages", A, eW);
    check_column("returns", R, eR);
    check_metric(line, "critic/score/mean", df_tol_gamma(64, DF_U64));
    check_actor(line, dir, eW);
    check_critic(line, dir, eR);
    free(V), free(rew), free(A), free(R), free(A_raw), free(eV), free(eR), free(eW);
    df_model_free(init), df_model_free(critic);
    json_decref(lines);
    free_fixture();
}

int main(void)
{
    if (df_reward_register("golden/digits", df_test_digit_share) ||
        df_exec_register("golden.fixed_rollout", fixed_rollout) ||
        df_exec_register("golden.shift_and_keep", shift_and_keep)) {
        print_error("%s\n", df_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_grpo_step, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_ppo_step, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
