/*
 * Every algorithm of docs/algorithms.md end to end: each examples/demo/<algo>.yaml
 * is loaded as shipped (so its algorithm keys are the ones tested) with the
 * paths and sizes scaled down to a tiny random model (tests/testutil.h), runs
 * 3 training steps through the DAG worker, and must give finite losses, its
 * algorithm's own metrics, and moved weights. Also: every shipped example
 * config (demo and GSM8K) passes the validator on 1 and 2 ranks without a
 * warning.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testtrain.h"
#include "testutil.h"

#include "distflow/reward.h"

#include <jansson.h>
#include <omp.h>

#define STEPS 3
#define TBS 4 /* prompts per step */
#define N 4   /* responses per prompt */
#define MAX_RESP 10

static char dir[256];

/* A binary reward that varies within groups of a random model: 1 for an even response length in bytes. */
static int parity_score(const char *src, const char *s, const char *gt, const char *extra, double *score)
{
    (void)src, (void)gt, (void)extra;
    *score = strlen(s) % 2 == 0 ? 1.0 : 0.0;
    return 0;
}

static const char *const ALGOS[] = {"grpo",
                                    "dr_grpo",
                                    "dapo",
                                    "gspo",
                                    "gpg",
                                    "cpgd",
                                    "rloo",
                                    "reinforce_plus_plus",
                                    "reinforce_plus_plus_baseline",
                                    "remax",
                                    "clip_cov",
                                    "kl_cov",
                                    "ppo",
                                    "pf_ppo",
                                    "grpo_lora",
                                    "gmpo",
                                    "cispo",
                                    "sapo",
                                    "grpo_passk",
                                    "opo",
                                    "otb"};
#define N_ALGOS (int)(sizeof ALGOS / sizeof *ALGOS)

static char *example(const char *kind, const char *algo)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/examples/%s/%s.yaml", DF_SOURCE_DIR, kind, algo);
    return path;
}

typedef struct {
    int n;
    char first[1024];
} warnings;

static void collect(void *user, const char *msg)
{
    warnings *w = user;
    if (w->n++ == 0)
        snprintf(w->first, sizeof w->first, "%s", msg);
}

/* The shipped configs, demo and GSM8K, load and validate silently on 1 and 2 ranks. */
static void test_examples_validate(void **state)
{
    (void)state;
    const char *kinds[] = {"demo", "gsm8k"};
    for (int k = 0; k < 2; k++)
        for (int a = 0; a < N_ALGOS; a++) {
            const char *path = example(kinds[k], ALGOS[a]);
            df_config *c;
            if (df_config_load(df_config_schema_train(), path, NULL, 0, &c))
                fail_msg("%s: %s", path, df_last_error());
            for (int world = 1; world <= 2; world++) {
                warnings w = {0};
                if (df_config_validate_train_ex(c, world, collect, &w))
                    fail_msg("%s on %d ranks: %s", path, world, df_last_error());
                if (w.n)
                    fail_msg("%s on %d ranks: warning: %s", path, world, w.first);
            }
            df_config_free(c);
        }
}

/* ---- 3 steps of each algorithm ------------------------------------------------ */

static int64_t scaled(int64_t v, int64_t from, int64_t to)
{
    int64_t s = v * to / from;
    return s < 1 ? 1 : s;
}

/*
 * The example's config with the test's paths and sizes: mini-batches keep
 * their share of the train batch (GSPO's four mini-batches stay four), the
 * overlong buffer its share of the response length.
 */
static int load_scaled(const char *algo, const char *const *extra, int n_extra, df_config **out)
{
    char ov[32][512];
    int n = 0;
#define OV(...) snprintf(ov[n++], sizeof ov[0], __VA_ARGS__)
    OV("data.train_files=[%s/train.jsonl]", dir);
    OV("actor_rollout_ref.model.path=%s/model", dir);
    const char *ptrs[32];
    for (int i = 0; i < n; i++)
        ptrs[i] = ov[i];
    df_config *y;
    int rc = df_config_load(df_config_schema_train(), example("demo", algo), ptrs, n, &y);
    if (rc)
        return rc;
    int64_t tbs = df_config_int(y, "data.train_batch_size"),
            maxr = df_config_int(y, "data.max_response_length");
    int64_t mini = scaled(df_config_int(y, "actor_rollout_ref.actor.ppo_mini_batch_size"), tbs, TBS);
    int64_t cmini = scaled(df_config_int(y, "critic.ppo_mini_batch_size"), tbs, TBS);
    int64_t buf = scaled(df_config_int(y, "reward_model.overlong_buffer.len"), maxr, MAX_RESP);
    df_config_free(y);
    OV("data.val_files=[]");
    OV("data.train_batch_size=%d", TBS);
    OV("data.max_response_length=%d", MAX_RESP);
    OV("actor_rollout_ref.rollout.n=%d", N);
    OV("actor_rollout_ref.actor.ppo_mini_batch_size=%lld", (long long)mini);
    OV("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=%lld", (long long)(mini * N));
    OV("critic.ppo_mini_batch_size=%lld", (long long)cmini);
    OV("critic.ppo_micro_batch_size_per_gpu=%lld", (long long)(cmini * N));
    OV("reward_model.overlong_buffer.len=%lld", (long long)buf);
    OV("trainer.total_training_steps=%d", STEPS);
    OV("trainer.save_freq=%d", STEPS);
    OV("trainer.test_freq=-1");
    OV("trainer.val_before_train=false");
    OV("trainer.logger=[]");
    OV("trainer.default_local_dir=%s/out_%s", dir, algo);
#undef OV
    for (int i = 0; i < n; i++)
        ptrs[i] = ov[i];
    for (int i = 0; i < n_extra; i++) /* later overrides win */
        ptrs[n + i] = extra[i];
    return df_config_load(df_config_schema_train(), example("demo", algo), ptrs, n + n_extra, out);
}

static int fit(const char *algo, const char *const *extra, int n_extra)
{
    df_config *cfg = NULL;
    int rc = load_scaled(algo, extra, n_extra, &cfg);
    return rc ? rc : df_test_run(NULL, cfg);
}

/* The STEPS lines of out_<algo>/metrics.jsonl. */
static void read_metrics(const char *algo, json_t *lines[STEPS])
{
    char out[256];
    snprintf(out, sizeof out, "out_%s", algo);
    json_t *all = df_test_metrics(dir, out, true);
    assert_int_equal(json_array_size(all), STEPS);
    for (int s = 0; s < STEPS; s++)
        lines[s] = json_incref(json_array_get(all, s));
    json_decref(all);
}

static double metric(json_t *line, const char *algo, const char *key)
{
    json_t *v = json_object_get(line, key);
    if (!json_is_number(v))
        fail_msg("%s: metric %s missing", algo, key);
    double x = json_number_value(v);
    if (!isfinite(x))
        fail_msg("%s: metric %s = %g", algo, key, x);
    return x;
}

/* Sum of |trained - initial| over all parameters of the step-STEPS checkpoint. */
static double weight_change(const char *algo)
{
    char d0[512], d1[512];
    snprintf(d0, sizeof d0, "%s/model", dir);
    snprintf(d1, sizeof d1, "%s/out_%s/global_step_%d/actor", dir, algo, STEPS);
    df_model *before, *after;
    assert_int_equal(df_model_load(d0, &before), 0);
    assert_int_equal(df_model_load(d1, &after), 0);
    assert_int_equal(before->n_params, after->n_params);
    double diff = 0;
    for (int64_t i = 0; i < before->n_params; i++)
        diff += fabs((double)before->params[i] - after->params[i]);
    df_model_free(before);
    df_model_free(after);
    return diff;
}

/* Train `algo`, check what every algorithm reports, return the metric lines (caller frees). */
static void run_ex(const char *algo, const char *const *extra, int n_extra, json_t *lines[STEPS])
{
    if (fit(algo, extra, n_extra))
        fail_msg("%s: %s", algo, df_last_error());
    read_metrics(algo, lines);
    const char *common[] = {"actor/pg_loss",     "actor/grad_norm",        "actor/entropy",
                            "critic/score/mean", "critic/advantages/mean", "response_length/mean"};
    double grad = 0;
    for (int s = 0; s < STEPS; s++) {
        for (size_t k = 0; k < sizeof common / sizeof *common; k++)
            metric(lines[s], algo, common[k]);
        grad += metric(lines[s], algo, "actor/grad_norm");
    }
    if (!(grad > 0))
        fail_msg("%s: no gradient in %d steps", algo, STEPS);
    /* not rounding: weight decay is 0 in the examples, so a weight moves only with a gradient (Adam
       keeps one without any exactly in place), and then by ~lr = 1e-4 per step; 1e-3 summed over the
       ~36k weights is far below what a real update moves */
    double moved = weight_change(algo);
    if (!(moved > 1e-3))
        fail_msg("%s: weights moved by %g only", algo, moved);
}

static void run(const char *algo, json_t *lines[STEPS])
{
    run_ex(algo, NULL, 0, lines);
}

static void free_lines(json_t *lines[STEPS])
{
    for (int s = 0; s < STEPS; s++)
        json_decref(lines[s]);
}

/* Plain algorithms: the common checks, plus each key of `keys` on every step. */
static void run_with(const char *algo, const char *const *keys, int n_keys)
{
    json_t *lines[STEPS] = {0};
    run(algo, lines);
    for (int s = 0; s < STEPS; s++)
        for (int k = 0; k < n_keys; k++)
            metric(lines[s], algo, keys[k]);
    free_lines(lines);
}

/* Before the first update actor and reference are the same weights, so a token's log-probs under
   them are two forward passes of one model: <= F apart (tb_forward_bound; the examples' prompts are
   <= 128 tokens, temperature 1). Every KL estimator is then <= F per token (k1, abs) or below F^2
   (mse, low_var_kl), and so is a token mean of them. */
static double first_step_kl_bound(void)
{
    char p[512];
    snprintf(p, sizeof p, "%s/model", dir);
    df_model *m;
    assert_int_equal(df_model_load(p, &m), 0);
    double F = tb_forward_bound(m, 128 + MAX_RESP, 1.0f);
    df_model_free(m);
    return F + df_tol_gamma(64, DF_U64) * F;
}

/* With use_kl_loss the KL to the reference is 0 before the first update and positive after it. */
static void check_kl_loss(const char *algo)
{
    json_t *lines[STEPS] = {0};
    run(algo, lines);
    assert_near(metric(lines[0], algo, "actor/kl_loss"), 0.0, first_step_kl_bound());
    if (!(metric(lines[STEPS - 1], algo, "actor/kl_loss") > 0))
        fail_msg("%s: no KL to the reference after %d updates", algo, STEPS - 1);
    free_lines(lines);
}

static void test_grpo(void **state)
{
    (void)state;
    check_kl_loss("grpo");
}

/* GRPO training LoRA adapters (docs/lora.md): the KL to the frozen reference grows from 0 as with
 * every weight trained, and the adapters' PEFT files are in the checkpoint. */
static void test_grpo_lora(void **state)
{
    (void)state;
    check_kl_loss("grpo_lora");
    char p[600];
    snprintf(p, sizeof p, "%s/out_grpo_lora/global_step_%d/actor/lora_adapter/adapter_config.json", dir, STEPS);
    assert_true(df_file_exists(p));
}

/* Dr. GRPO: advantages are centred rewards, not divided by the group std: within [-1, 1] for a 0/1
 * reward, exactly (r - k/4 for a group of 4 is a multiple of 1/4, no rounding). */
static void test_dr_grpo(void **state)
{
    (void)state;
    json_t *lines[STEPS] = {0};
    run("dr_grpo", lines);
    for (int s = 0; s < STEPS; s++) {
        assert_true(metric(lines[s], "dr_grpo", "critic/advantages/max") <= 1.0);
        assert_true(metric(lines[s], "dr_grpo", "critic/advantages/min") >= -1.0);
        assert_near(metric(lines[s], "dr_grpo", "actor/kl_loss"), 0.0, 0); /* no KL term */
    }
    free_lines(lines);
}

/* DAPO: dynamic sampling ran, the overlong penalty (buffer 2 of 10 tokens) was applied and logged,
 * in training and in a validation after the last step. */
static void test_dapo(void **state)
{
    (void)state;
    json_t *lines[STEPS] = {0};
    char val[512];
    snprintf(val, sizeof val, "data.val_files=[%s/train.jsonl]", dir);
    const char *extra[] = {val, "data.val_max_samples=8", "trainer.test_freq=3"};
    run_ex("dapo", extra, 3, lines);
    /* validation reward = score + penalty; the score of this 0/1 reward is acc. Per sample the
       penalty and the reward are rounded to float once each (<= DF_U32 relative; |reward| <= 1 + |pen|,
       |pen| <= 1), the means are in double. */
    json_t *last = lines[STEPS - 1];
    double reward = metric(last, "dapo", "val-aux/test/parity/reward/mean@1");
    double acc = metric(last, "dapo", "val-core/test/parity/acc/mean@1");
    double pen = metric(last, "dapo", "val-aux/test/parity/overlong_reward/mean@1");
    assert_near(reward, acc + pen, 3 * DF_U32 + df_tol_gamma(64, DF_U64) * 2);
    assert_true(pen <= 0);
    double val_share = metric(last, "dapo", "val-aux/test/parity/overlong/mean@1");
    assert_true(val_share >= 0 && val_share <= 1 && (pen < 0) == (val_share > 0));
    /* a sample's score - its penalty is its 0/1 reward up to the float roundings above: <= 3 DF_U32
       each, so the TBS N samples' count is off by <= TBS N 3 DF_U32 */
    const double count_tol = TBS * N * 3 * DF_U32 + df_tol_gamma(64, DF_U64) * TBS * N;
    double overlong = 0;
    for (int s = 0; s < STEPS; s++) {
        double gens = metric(lines[s], "dapo", "train/num_gen_batches");
        assert_true(gens >= 1 && gens <= 10);
        metric(lines[s], "dapo", "timing_s/dynamic_sampling");
        assert_true(metric(lines[s], "dapo", "critic/overlong_reward/mean") <= 0);
        /* exact: exceed / buffer <= 1 for lengths <= max_response_length, times the factor 1.0 */
        assert_true(metric(lines[s], "dapo", "critic/overlong_reward/min") >= -1.0);
        double share = metric(lines[s], "dapo", "critic/overlong/mean");
        assert_true(share >= 0 && share <= 1);
        overlong += share;
        /* each score is the sample's 0/1 reward plus its penalty: score - penalty is a count */
        double rewarded = (metric(lines[s], "dapo", "critic/score/mean") -
                           metric(lines[s], "dapo", "critic/overlong_reward/mean")) * TBS * N;
        assert_true(rewarded > -count_tol && rewarded < TBS * N + count_tol &&
                    fabs(rewarded - round(rewarded)) <= count_tol);
    }
    assert_true(overlong > 0); /* a random model mostly runs to the length limit */
    free_lines(lines);
}

static void test_gspo(void **state)
{
    (void)state;
    json_t *lines[STEPS] = {0};
    run("gspo", lines);
    double clipped = 0;
    for (int s = 0; s < STEPS; s++)
        clipped += metric(lines[s], "gspo", "actor/pg_clipfrac");
    /* four mini-batches per step with a 3e-4 / 4e-4 sequence clip: the later ones are clipped */
    assert_true(clipped > 0);
    free_lines(lines);
}

static void test_gpg(void **state)
{
    (void)state;
    run_with("gpg", NULL, 0);
}

static void test_cpgd(void **state)
{
    (void)state;
    run_with("cpgd", NULL, 0);
}

/* KL in the reward (verl's RLOO and ReMax recipes): a fixed coefficient 0.001 (exactly the parsed
 * value), a KL of 0 before the first update (<= F, first_step_kl_bound) and positive after it. */
static void check_kl_in_reward(const char *algo, json_t *lines[STEPS])
{
    for (int s = 0; s < STEPS; s++)
        assert_near(metric(lines[s], algo, "actor/reward_kl_penalty_coeff"), 0.001, 0);
    assert_near(metric(lines[0], algo, "actor/reward_kl_penalty"), 0.0, first_step_kl_bound());
    if (!(metric(lines[STEPS - 1], algo, "actor/reward_kl_penalty") > 0))
        fail_msg("%s: no KL to the reference in the reward after %d updates", algo, STEPS - 1);
}

static void test_rloo(void **state)
{
    (void)state;
    json_t *lines[STEPS] = {0};
    run("rloo", lines);
    check_kl_in_reward("rloo", lines);
    free_lines(lines);
}

static void test_reinforce_plus_plus(void **state)
{
    (void)state;
    check_kl_loss("reinforce_plus_plus");
}

static void test_reinforce_plus_plus_baseline(void **state)
{
    (void)state;
    check_kl_loss("reinforce_plus_plus_baseline");
}

/* ReMax: the greedy baseline generation ran each step, and the KL is in the reward as verl's recipe. */
static void test_remax(void **state)
{
    (void)state;
    json_t *lines[STEPS] = {0};
    run("remax", lines);
    for (int s = 0; s < STEPS; s++)
        assert_true(metric(lines[s], "remax", "timing_s/gen_max") > 0);
    check_kl_in_reward("remax", lines);
    free_lines(lines);
}

static void test_clip_cov(void **state)
{
    (void)state;
    const char *keys[] = {"actor/pg_clipfrac"};
    run_with("clip_cov", keys, 1);
}

static void test_kl_cov(void **state)
{
    (void)state;
    const char *keys[] = {"actor/pg_clipfrac"};
    run_with("kl_cov", keys, 1);
}

/* GMPO: the geometric-mean ratio's clip fractions on every step, no KL term. */
static void test_gmpo(void **state)
{
    (void)state;
    json_t *lines[STEPS] = {0};
    run("gmpo", lines);
    for (int s = 0; s < STEPS; s++) {
        metric(lines[s], "gmpo", "actor/pg_clipfrac");
        assert_near(metric(lines[s], "gmpo", "actor/kl_loss"), 0.0, 0);
    }
    free_lines(lines);
}

/* CISPO with verl's recipe: its KL loss to the reference grows from 0. */
static void test_cispo(void **state)
{
    (void)state;
    check_kl_loss("cispo");
}

/* SAPO gates instead of clipping: verl reports clip fractions of 0. */
static void test_sapo(void **state)
{
    (void)state;
    json_t *lines[STEPS] = {0};
    run("sapo", lines);
    for (int s = 0; s < STEPS; s++)
        assert_near(metric(lines[s], "sapo", "actor/pg_clipfrac"), 0.0, 0);
    free_lines(lines);
}

/* Pass@k reinforces a group's best response by its margin over the second: no advantage is
 * negative (a sign flipped where the estimator meets the pipeline would make some). */
static void test_grpo_passk(void **state)
{
    (void)state;
    json_t *lines[STEPS] = {0};
    run("grpo_passk", lines);
    for (int s = 0; s < STEPS; s++)
        assert_true(metric(lines[s], "grpo_passk", "critic/advantages/min") >= 0.0);
    free_lines(lines);
}

/* OPO's baseline is each group's length-weighted mean, so the token mean of the advantages is 0
 * for every group, hence for the batch: the exact values sum to 0, their float32 roundings move the
 * mean by at most DF_U32 max |a| (doubled for the double sums). */
static void test_opo(void **state)
{
    (void)state;
    json_t *lines[STEPS] = {0};
    run("opo", lines);
    for (int s = 0; s < STEPS; s++) {
        double amax = fmax(fabs(metric(lines[s], "opo", "critic/advantages/max")),
                           fabs(metric(lines[s], "opo", "critic/advantages/min")));
        assert_near(metric(lines[s], "opo", "critic/advantages/mean"), 0.0, 2 * DF_U32 * amax);
    }
    free_lines(lines);
}

/*
 * The optimal token baseline: the old-log-prob pass runs before the advantage (the built-in chain
 * rewired) and writes sum_pi_squared, which the estimator refuses when missing or misplaced (a
 * log-prob in it is negative). The variance proxies hold what they measure: W = sum_t w_t with
 * w_t = ||e_y - pi||^2 in [0, 2], so 0 <= expected_w <= 2 MAX_RESP; proxy2 = mean(A^2 W) <= 2
 * MAX_RESP E[A^2]; proxy1 = actor/grad_norm^2; proxy3 >= 0.
 */
static void test_otb(void **state)
{
    (void)state;
    json_t *lines[STEPS] = {0};
    run("otb", lines);
    for (int s = 0; s < STEPS; s++) {
        double ew = metric(lines[s], "otb", "variance_proxy/expected_w");
        double a2 = metric(lines[s], "otb", "variance_proxy/expected_a_squared");
        double p2 = metric(lines[s], "otb", "variance_proxy/proxy2_total_power");
        double g = metric(lines[s], "otb", "actor/grad_norm");
        assert_true(ew > 0 && ew <= 2.0 * MAX_RESP);
        assert_true(p2 >= 0 && p2 <= 2.0 * MAX_RESP * a2 * (1 + 1e-9));
        /* metrics.jsonl prints 10 significant digits: each value within 5e-10 relative */
        assert_near(metric(lines[s], "otb", "variance_proxy/proxy1_signal_strength"), g * g, 1.6e-9 * g * g);
        assert_true(metric(lines[s], "otb", "variance_proxy/proxy3_pure_noise") >= 0);
    }
    free_lines(lines);
}

/* ---- verl's rollout correction (algorithm.rollout_correction) on examples/demo/grpo.yaml ---- */

/* Step 1's metrics of grpo with the extra overrides, trained into out_<name>. */
static json_t *first_step(const char *name, const char *const *extra, int n_extra)
{
    char od[512], out[64];
    snprintf(od, sizeof od, "trainer.default_local_dir=%s/out_%s", dir, name);
    const char *ex[8];
    for (int i = 0; i < n_extra; i++)
        ex[i] = extra[i];
    ex[n_extra] = od;
    if (fit("grpo", ex, n_extra + 1))
        fail_msg("%s: %s", name, df_last_error());
    snprintf(out, sizeof out, "out_%s", name);
    json_t *all = df_test_metrics(dir, out, true);
    json_t *line = json_incref(json_array_get(all, 0));
    json_decref(all);
    return line;
}

#define RC "algorithm.rollout_correction."
/* metrics.jsonl's 10 digits: two printed values within 5e-10 relative each */
#define PRINTED(x) (1.1e-9 * fabs(x))

/*
 * The rollout's and the trainer's log-probs of the same weights differ by rounding only (|log
 * ratio| <= F, far below ln 2), so every IS weight exceeds a threshold of 0.5 and is truncated to
 * exactly 0.5. Without the KL loss (and with entropy_coeff 0) the gradient is the policy term's
 * alone, linear in its weights: halved exactly (a power of 2 through a linear backward), so
 * actor/grad_norm is exactly half the uncorrected run's (the policy loss itself is 0 here: every
 * response of the random model runs to the length limit and GRPO's advantages sum to 0 per group).
 * Batch-normalised, the weights are 1 again: the uncorrected gradient. A rejection rule no token
 * passes (k1 bounds [2, 3] on the ratio) masks every token out of the loss: no gradient; one
 * every token passes changes nothing.
 */
static void test_rollout_correction(void **state)
{
    (void)state;
    const char *nokl = "actor_rollout_ref.actor.use_kl_loss=false";
    const char *b0[] = {nokl};
    json_t *base = first_step("rc_base", b0, 1);
    const double g = metric(base, "rc", "actor/grad_norm");
    assert_true(g > 0);
    const char *is[] = {nokl, RC "rollout_is=token", RC "rollout_is_threshold=0.5"};
    json_t *half = first_step("rc_is", is, 3);
    assert_near(metric(half, "rc_is", "actor/grad_norm"), 0.5 * g, PRINTED(g));
    const double isw = metric(half, "rc_is", "rollout_corr/rollout_is_mean"); /* before truncation */
    assert_true(fabs(isw - 1) <= 2 * first_step_kl_bound());
    const char *norm[] = {nokl, RC "rollout_is=token", RC "rollout_is_threshold=0.5",
                          RC "rollout_is_batch_normalize=true"};
    json_t *one = first_step("rc_norm", norm, 4);
    assert_near(metric(one, "rc_norm", "actor/grad_norm"), g, PRINTED(g));
    assert_near(metric(one, "rc_norm", "rollout_corr/rollout_is_batch_norm_factor"), 0.5, 0);
    const char *keep[] = {nokl, RC "rollout_rs=seq_max_k2", RC "rollout_rs_threshold=1e9"};
    json_t *kept = first_step("rc_keep", keep, 3);
    assert_near(metric(kept, "rc_keep", "rollout_corr/rollout_rs_masked_fraction"), 0.0, 0);
    assert_near(metric(kept, "rc_keep", "actor/grad_norm"), g, PRINTED(g));
    const char *reject[] = {nokl, RC "rollout_rs=token_k1", RC "rollout_rs_threshold=2_3"};
    json_t *none = first_step("rc_reject", reject, 3);
    /* verl's masked mean divides by the token count + 1e-8 */
    assert_near(metric(none, "rc_reject", "rollout_corr/rollout_rs_masked_fraction"), 1.0, 1e-8);
    assert_near(metric(none, "rc_reject", "actor/grad_norm"), 0.0, 0);
    json_decref(base), json_decref(half), json_decref(one), json_decref(kept), json_decref(none);
}

/*
 * bypass_mode: old_log_probs are the rollout's, no old-log-prob forward (so no actor/entropy and no
 * training/rollout_probs_diff_*, as verl). The first update's ratio is then trainer over rollout
 * before any step: its ppo_kl is within the forward bound of 0, and so is the actor's
 * rollout_corr/kl (verl's bypass loss measures the same gap per micro-batch).
 */
static void test_rollout_bypass(void **state)
{
    (void)state;
    const char *by[] = {RC "bypass_mode=true"};
    json_t *l = first_step("rc_bypass", by, 1);
    assert_null(json_object_get(l, "actor/entropy"));
    assert_null(json_object_get(l, "training/rollout_probs_diff_mean"));
    assert_true(fabs(metric(l, "rc_bypass", "actor/ppo_kl")) <= first_step_kl_bound());
    assert_true(fabs(metric(l, "rc_bypass", "rollout_corr/kl")) <= first_step_kl_bound());
    assert_true(metric(l, "rc_bypass", "actor/grad_norm") > 0);
    json_decref(l);
}

/*
 * bypass_mode's correction in the loss (verl's bypass presets), without the KL loss so the gradient
 * is the policy term's alone. The trained policy's ratio to the rollout's is within F of 1 before
 * the first step, so a threshold of 0.5 truncates every weight to exactly 0.5: with loss_type
 * reinforce (-A log p times the weights) the gradient is exactly half the unweighted REINFORCE
 * one's; with ppo_clip the weights are left out (verl: the ratio already corrects), the gradient
 * exactly the plain bypass one's. A rejection rule no token passes leaves no gradient.
 */
static void test_rollout_bypass_correction(void **state)
{
    (void)state;
    const char *nokl = "actor_rollout_ref.actor.use_kl_loss=false", *by = RC "bypass_mode=true";
    const char *ppo[] = {nokl, by};
    json_t *clip = first_step("by_clip", ppo, 2);
    const double gc = metric(clip, "by_clip", "actor/grad_norm");
    const char *rf[] = {nokl, by, RC "loss_type=reinforce"};
    json_t *re = first_step("by_reinforce", rf, 3);
    const double gr = metric(re, "by_reinforce", "actor/grad_norm");
    assert_true(gr > 0);
    const char *rfis[] = {nokl, by, RC "loss_type=reinforce", RC "rollout_is=token", RC "rollout_is_threshold=0.5"};
    json_t *rehalf = first_step("by_reinforce_is", rfis, 5);
    assert_near(metric(rehalf, "by_reinforce_is", "actor/grad_norm"), 0.5 * gr, PRINTED(gr));
    const char *clipis[] = {nokl, by, RC "rollout_is=token", RC "rollout_is_threshold=0.5"};
    json_t *clip2 = first_step("by_clip_is", clipis, 4);
    assert_near(metric(clip2, "by_clip_is", "actor/grad_norm"), gc, PRINTED(gc));
    /* ... yet measured, as verl's bypass loss does: the raw ratio, within F of 1 */
    assert_true(fabs(metric(clip2, "by_clip_is", "rollout_corr/rollout_is_mean") - 1) <= 2 * first_step_kl_bound());
    assert_null(json_object_get(clip, "rollout_corr/rollout_is_mean"));
    const char *rej[] = {nokl, by, RC "rollout_rs=token_k1", RC "rollout_rs_threshold=2_3"};
    json_t *none = first_step("by_reject", rej, 4);
    assert_near(metric(none, "by_reject", "actor/grad_norm"), 0.0, 0);
    /* a second epoch sees ratios moved by the first step: REINFORCE's -A log p and the clipped
       ratio then differ (by ~lr relative: far above the 10 printed digits) */
    const char *clip_e2[] = {nokl, by, "actor_rollout_ref.actor.ppo_epochs=2"};
    const char *rf_e2[] = {nokl, by, RC "loss_type=reinforce", "actor_rollout_ref.actor.ppo_epochs=2"};
    json_t *c2 = first_step("by_clip_e2", clip_e2, 3), *r2 = first_step("by_reinforce_e2", rf_e2, 4);
    const double g2 = metric(c2, "by_clip_e2", "actor/grad_norm");
    assert_true(fabs(metric(r2, "by_reinforce_e2", "actor/grad_norm") - g2) > 1e-7 * g2);
    json_decref(clip), json_decref(re), json_decref(rehalf), json_decref(clip2), json_decref(none);
    json_decref(c2), json_decref(r2);
}
#undef RC

/* PPO: GAE from the critic of examples/demo/ppo.yaml. Its critic_warmup would leave the actor
 * untrained for all 3 steps here, so it is off (test_e2e_ppo tests the warmup itself). */
static void test_ppo(void **state)
{
    (void)state;
    const char *extra[] = {"trainer.critic_warmup=0"};
    const char *keys[] = {"critic/vf_loss", "critic/vf_clipfrac", "critic/values/mean", "critic/vf_explained_var"};
    json_t *lines[STEPS] = {0};
    run_ex("ppo", extra, 1, lines);
    for (int s = 0; s < STEPS; s++)
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            metric(lines[s], "ppo", keys[k]);
    free_lines(lines);
}

/* PF-PPO: examples/demo/pf_ppo.yaml (ppo's with use_pf_ppo, pow 2). With the parity reward (0 or
 * 1) a zero score weighs 1e-8 against 1, so the resampled batch the metrics see holds only
 * score-1 responses whenever the step has one (a zero is drawn with probability ~1e-8 per draw). */
static void test_pf_ppo(void **state)
{
    (void)state;
    const char *extra[] = {"trainer.critic_warmup=0"};
    json_t *lines[STEPS] = {0};
    run_ex("pf_ppo", extra, 1, lines);
    int hits = 0;
    for (int s = 0; s < STEPS; s++) {
        metric(lines[s], "pf_ppo", "critic/vf_loss");
        if (metric(lines[s], "pf_ppo", "critic/score/max") == 1.0) {
            hits++;
            if (metric(lines[s], "pf_ppo", "critic/score/mean") != 1.0)
                fail_msg("pf_ppo step %d: a zero-score response survived the resampling", s + 1);
        }
    }
    assert_true(hits > 0); /* the parity reward scores some response 1 in 3 steps of 16 */
    free_lines(lines);
}

/* The decoupled PPO objective (docs/async.md) end to end: GRPO with use_decoupled_loss. The behaviour
 * policy is the rollout's own log-probs, which in the synchronous pipeline differ from the trainer's
 * recompute (the proximal policy) by the two engines' rounding only: the weights are about 1 and
 * none reaches the cap of 5. */
static void test_grpo_decoupled(void **state)
{
    (void)state;
    char out[600];
    snprintf(out, sizeof out, "trainer.default_local_dir=%s/out_grpo_decoupled", dir);
    const char *extra[] = {"actor_rollout_ref.actor.use_decoupled_loss=true", out};
    df_config *cfg = NULL;
    if (load_scaled("grpo", extra, 2, &cfg) || df_test_run(NULL, cfg))
        fail_msg("grpo with use_decoupled_loss: %s", df_last_error());
    json_t *all = df_test_metrics(dir, "out_grpo_decoupled", true);
    assert_int_equal(json_array_size(all), STEPS);
    for (int s = 0; s < STEPS; s++) {
        json_t *line = json_array_get(all, s);
        metric(line, "grpo decoupled", "actor/pg_loss");
        assert_near(metric(line, "grpo decoupled", "actor/behave_imp_weight"), 1.0, 0.1);
        assert_near(metric(line, "grpo decoupled", "actor/behave_filtered_frac"), 0.0, 0);
        metric(line, "grpo decoupled", "actor/behave_approx_kl");
    }
    json_decref(all);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/df_algos_XXXXXX");
    if (!mkdtemp(dir) || df_reward_register("test/parity", parity_score))
        return -1;
    df_test_digits_inputs(dir, "train.jsonl", 64, "test/parity", true);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return df_test_remove_tree(dir);
}

int main(void)
{
    /* The algorithms are under test here, not the threading (other tests run 2 threads): one thread
     * keeps the file at a few seconds even on a busy machine, where OpenMP's spinning threads stall. */
    omp_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_examples_validate),
        cmocka_unit_test(test_grpo),
        cmocka_unit_test(test_dr_grpo),
        cmocka_unit_test(test_dapo),
        cmocka_unit_test(test_gspo),
        cmocka_unit_test(test_gpg),
        cmocka_unit_test(test_cpgd),
        cmocka_unit_test(test_rloo),
        cmocka_unit_test(test_reinforce_plus_plus),
        cmocka_unit_test(test_reinforce_plus_plus_baseline),
        cmocka_unit_test(test_remax),
        cmocka_unit_test(test_clip_cov),
        cmocka_unit_test(test_kl_cov),
        cmocka_unit_test(test_ppo),
        cmocka_unit_test(test_pf_ppo),
        cmocka_unit_test(test_grpo_lora),
        cmocka_unit_test(test_gmpo),
        cmocka_unit_test(test_cispo),
        cmocka_unit_test(test_sapo),
        cmocka_unit_test(test_grpo_passk),
        cmocka_unit_test(test_opo),
        cmocka_unit_test(test_otb),
        cmocka_unit_test(test_rollout_correction),
        cmocka_unit_test(test_rollout_bypass),
        cmocka_unit_test(test_rollout_bypass_correction),
        cmocka_unit_test(test_grpo_decoupled),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
