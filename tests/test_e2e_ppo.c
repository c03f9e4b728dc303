/*
 * test_e2e_ppo.c — PPO end to end through the DAG worker: adv_estimator=gae
 * selects the built-in ppo pipeline (rollout -> reward -> compute_value ->
 * GAE -> old log-probs -> reference -> train_actor -> train_critic), the
 * critic starting from the actor's causal-LM checkpoint with a fresh value
 * head. With trainer.critic_warmup=2 the actor stays as it is for steps 1-2
 * and trains from step 3, while the critic trains every step; checkpoints
 * hold global_step_N/critic as an HF *ForTokenClassification directory that
 * reloads as a value model and can seed a new run. With critic lr 0 the saved
 * critic pins the one a run starts from (fresh head from trainer.seed, or a
 * saved critic as it is); a workflow's train_critic node honours its own loss
 * settings. Under mpiexec the same job runs data-parallel: GAE's whitening
 * takes the statistics of the whole step batch over the ranks (verl's
 * semantics, not siiRL's per-rank whitening), so the first step's returns,
 * advantages, critic update and critic/vf_explained_var (one number over the
 * whole batch) must match the one-rank run's within what rounding of the
 * values allows (see step1_matches), every step's rollout must be the same
 * (the actor does not move before step 3), and the ranks' critics must stay
 * identical. Later values are not compared: the worker's Adam (eps 1e-8) moves
 * a critic weight whose gradient is rounding noise by up to lr either way.
 * mpi-test: np 2
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testtrain.h"
#include "testutil.h"

#include "distflow/comm.h"
#include "distflow/reward.h"

#include <jansson.h>
#include <math.h>

static df_comm *world;
static int R;
static char dir[256];

/* The job's YAML: 3 PPO steps, critic from `critic` (a path under dir), into dir/<out>. The actor
   and the critic take one optimizer step per update (their mini-batch is the whole batch), so their
   trajectories do not depend on how the batch is split over ranks. */
static void yaml_of(char *yaml, size_t cap, const char *out, const char *critic)
{
    snprintf(yaml, cap,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 8, shuffle: false,\n"
             "       max_prompt_length: 128, max_response_length: 10}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01, weight_decay: 0.0}, ppo_mini_batch_size: 8,\n"
             "          ppo_micro_batch_size_per_gpu: 4}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "critic:\n"
             "  model: {path: %s/%s}\n"
             "  optim: {lr: 0.005, weight_decay: 0.0}\n"
             "  ppo_mini_batch_size: 8\n"
             "  ppo_micro_batch_size_per_gpu: 4\n"
             "algorithm: {adv_estimator: gae, gamma: 1.0, lam: 0.95}\n"
             "trainer: {total_training_steps: 3, save_freq: 1, critic_warmup: 2, logger: [],\n"
             "          default_local_dir: %s/%s}\n",
             dir, dir, dir, critic, dir, out);
}

/* Create the worker for `yaml` plus overrides on `comm`; returns its status (the worker is fit and freed). */
static int run(df_comm *comm, const char *yaml, const char **ovr, int n_ovr)
{
    return df_test_run(comm, df_test_config(yaml, "ppo.yaml", ovr, n_ovr));
}

static df_model *load(const char *sub)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    df_model *m;
    if (df_model_load(p, &m))
        fail_msg("%s: %s", p, df_last_error());
    return m;
}

/* The metrics of every step of run `out`: the critic's every step, the actor's from step 3. */
static void check_metrics(const char *out)
{
    json_t *lines = df_test_metrics(dir, out, false);
    assert_int_equal(json_array_size(lines), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *o = json_array_get(lines, i);
        const char *keys[] = {"critic/vf_loss",      "critic/vf_clipfrac", "critic/vpred_mean",
                              "critic/grad_norm",    "critic/lr",          "critic/values/mean",
                              "critic/values/max",   "critic/values/min",  "critic/vf_explained_var",
                              "critic/returns/mean", "timing_s/values",    "timing_s/update_critic",
                              "perf/mfu/critic",     "timing_per_token_ms/update_critic"};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            assert_true(isfinite(df_test_metric(o, keys[k])));
        assert_true(df_test_metric(o, "critic/vf_loss") > 0);
        assert_true(df_test_metric(o, "critic/weights_in_sync") == 1.0);
        assert_near(df_test_metric(o, "critic/lr"), 0.005, 0); /* exact: the value configured, a constant schedule */
        bool actor_trains = i == 2;
        if (json_is_number(json_object_get(o, "actor/pg_loss")) != actor_trains ||
            json_is_number(json_object_get(o, "timing_s/update_actor")) != actor_trains)
            fail_msg("%s step %d: actor metrics %s during critic_warmup=2", out, (int)i + 1,
                     actor_trains ? "missing" : "present");
    }
    json_decref(lines);
}

/* Rank 0 alone: metrics, the warmup, the critic checkpoints. */
static void test_ppo_critic_warmup(void **state)
{
    (void)state;
    if (R != 0)
        return;
    check_metrics("ref");
    df_model *init = load("model"), *critic0 = load("model");
    assert_int_equal(df_model_to_value_model(&critic0, 1), 0); /* the head trainer.seed=1 draws */
    df_model *a[3], *c[3];
    for (int s = 0; s < 3; s++) {
        char p[64];
        snprintf(p, sizeof p, "ref/global_step_%d/actor", s + 1);
        a[s] = load(p);
        snprintf(p, sizeof p, "ref/global_step_%d/critic", s + 1);
        c[s] = load(p);
        assert_int_equal((int)c[s]->cfg.num_labels, 1); /* reloads as a value model */
        assert_non_null(df_model_find_tensor(c[s], "score.weight"));
        assert_null(df_model_find_tensor(c[s], "lm_head.weight"));
    }
    /* actor: untouched during the warmup (bit for bit), trained at step 3; critic: changed at every
       step, starting from the actor's trunk and a fresh head. Not rounding: Adam moves every weight
       with a gradient by ~lr (1e-2, 5e-3) per step, and an untouched one by exactly 0. */
    assert_true(df_test_max_param_diff(init, a[0]) == 0.0 && df_test_max_param_diff(init, a[1]) == 0.0);
    assert_true(df_test_max_param_diff(init, a[2]) > 1e-4);
    double d0 = df_test_max_param_diff(critic0, c[0]), d1 = df_test_max_param_diff(c[0], c[1]), d2 = df_test_max_param_diff(c[1], c[2]);
    print_message("critic moved %.3g, %.3g, %.3g per step; actor at step 3 %.3g\n", d0, d1, d2,
                  df_test_max_param_diff(init, a[2]));
    assert_true(d0 > 1e-4 && d1 > 1e-4 && d2 > 1e-4);
    char *cfg_text, p[512];
    snprintf(p, sizeof p, "%s/ref/global_step_3/critic/config.json", dir);
    assert_int_equal(df_read_file(p, &cfg_text, NULL), 0);
    assert_non_null(strstr(cfg_text, "Qwen2ForTokenClassification"));
    free(cfg_text);
    snprintf(p, sizeof p, "%s/ref/global_step_3/critic/tokenizer.json", dir);
    assert_true(df_file_exists(p));
    for (int s = 0; s < 3; s++) {
        df_model_free(a[s]);
        df_model_free(c[s]);
    }
    df_model_free(init);
    df_model_free(critic0);
}

/* A saved critic (*ForTokenClassification) seeds a new run as it is; a critic of
   another vocabulary and critic_warmup without a critic are refused. */
static void test_critic_from_checkpoint_and_errors(void **state)
{
    (void)state;
    df_comm *self = NULL; /* collective: every rank splits, rank 0 runs */
    assert_int_equal(df_comm_split(world, R, 0, &self), 0);
    if (R != 0) {
        df_comm_free(self);
        return;
    }
    char yaml[4096];
    yaml_of(yaml, sizeof yaml, "resumed", "ref/global_step_3/critic");
    /* critic lr 0: an update that moves nothing, so the saved critic is the one it started from */
    const char *lr0[] = {"trainer.total_training_steps=1", "trainer.critic_warmup=0", "critic.optim.lr=0"};
    if (run(self, yaml, lr0, 3))
        fail_msg("%s", df_last_error());
    json_t *lines = df_test_metrics(dir, "resumed", false);
    assert_true(isfinite(df_test_metric(json_array_get(lines, 0), "actor/pg_loss")));
    assert_true(df_test_metric(json_array_get(lines, 0), "critic/vf_loss") > 0);
    assert_true(df_test_metric(json_array_get(lines, 0), "critic/grad_norm") > 0);
    json_decref(lines);
    df_model *loaded = load("ref/global_step_3/critic"), *saved = load("resumed/global_step_1/critic");
    assert_true(df_test_max_param_diff(loaded, saved) == 0.0); /* the checkpoint was taken as it is: no fresh head */
    df_model_free(loaded);
    df_model_free(saved);
    const char *one[] = {"trainer.total_training_steps=1", "trainer.critic_warmup=0", "trainer.save_freq=-1"};

    df_model_config sc = df_test_micro_model_config(); /* vocab 40, the actor's is ~300 */
    sc.max_position_embeddings = 256; /* the job's 138 tokens fit: the vocabulary is what is refused */
    df_model *small;
    assert_int_equal(df_model_create(&sc, &small), 0);
    assert_int_equal(df_model_init_random(small, 3), 0);
    char p[512];
    snprintf(p, sizeof p, "%s/small", dir);
    assert_int_equal(df_model_save(small, p, DF_DTYPE_F32, 0), 0);
    df_model_free(small);
    yaml_of(yaml, sizeof yaml, "bad", "small");
    assert_error_mentions(run(self, yaml, one, 3), DF_EINVAL, "vocab_size 40");
    assert_true(strstr(df_last_error(), "critic.model.path") != NULL);
    /* a workflow may add a critic to any estimator: the deprecated batch keys are still refused */
    char wf[600];
    snprintf(wf, sizeof wf, "dag.workflow_path=%s/examples/workflows/ppo.yaml", DF_SOURCE_DIR);
    const char *dep[] = {wf, "algorithm.adv_estimator=grpo", "critic.forward_micro_batch_size=8",
                         "trainer.critic_warmup=0"};
    assert_error_mentions(run(self, yaml, dep, 4), DF_EINVAL,
                          "critic.forward_micro_batch_size is deprecated and not read by distflow: set "
                          "critic.forward_micro_batch_size_per_gpu");
    yaml_of(yaml, sizeof yaml, "nocritic", "model");
    const char *grpo[] = {"algorithm.adv_estimator=grpo", "trainer.critic_warmup=1"};
    assert_error_mentions(run(self, yaml, grpo, 2), DF_EINVAL, "trainer.critic_warmup=1 needs a critic");
    df_comm_free(self);
}

/* The critic a run starts from is the actor's checkpoint with df_model_to_value_model's head drawn
   from trainer.seed: with critic lr 0 step 1 saves exactly that (bit for bit). */
static void test_initial_critic(void **state)
{
    (void)state;
    df_comm *self = NULL;
    assert_int_equal(df_comm_split(world, R, 0, &self), 0);
    if (R != 0) {
        df_comm_free(self);
        return;
    }
    char yaml[4096];
    yaml_of(yaml, sizeof yaml, "lr0", "model");
    const char *ovr[] = {"trainer.total_training_steps=1", "trainer.critic_warmup=0", "critic.optim.lr=0",
                         "trainer.seed=7"};
    if (run(self, yaml, ovr, 4))
        fail_msg("%s", df_last_error());
    json_t *lines = df_test_metrics(dir, "lr0", false);
    assert_true(df_test_metric(json_array_get(lines, 0), "critic/grad_norm") > 0); /* an update ran, with lr 0 */
    json_decref(lines);
    df_model *want = load("model"), *other = load("model"), *got = load("lr0/global_step_1/critic");
    assert_int_equal(df_model_to_value_model(&want, 7), 0);
    assert_int_equal(df_model_to_value_model(&other, 1), 0);
    assert_true(df_test_max_param_diff(want, got) == 0.0);
    assert_true(df_test_max_param_diff(other, got) > 0); /* another seed draws another head */
    df_model_free(want);
    df_model_free(other);
    df_model_free(got);
    df_comm_free(self);
}

/* A workflow's train_critic node with its own value-loss settings trains exactly as the built-in
   pipeline with those settings global, and unlike the run with the global defaults. */
static void test_critic_node_overrides(void **state)
{
    (void)state;
    df_comm *self = NULL;
    assert_int_equal(df_comm_split(world, R, 0, &self), 0);
    if (R != 0) {
        df_comm_free(self);
        return;
    }
    char p[512], yaml[4096], wf[600];
    snprintf(p, sizeof p, "%s/wf_ppo.yaml", dir);
    const char *text =
        "dag_id: wf_ppo\n"
        "nodes:\n"
        "  - {node_id: rollout, node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
        "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout]}\n"
        "  - {node_id: value, node_type: MODEL_TRAIN, node_role: CRITIC, only_forward_compute: true,\n"
        "     dependencies: [reward]}\n"
        "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [value]}\n"
        "  - {node_id: old, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"
        "     dependencies: [adv]}\n"
        "  - {node_id: ref, node_type: MODEL_TRAIN, node_role: REFERENCE, dependencies: [old]}\n"
        "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [ref]}\n"
        "  - {node_id: vf, node_type: MODEL_TRAIN, node_role: CRITIC, dependencies: [train],\n"
        "     config: {cliprange_value: 0.05, ppo_epochs: 2, loss_agg_mode: seq-mean-token-sum}}\n";
    assert_int_equal(df_write_file_atomic(p, text, strlen(text)), 0);
    snprintf(wf, sizeof wf, "dag.workflow_path=%s", p);
    yaml_of(yaml, sizeof yaml, "wf_node", "model");
    const char *node[] = {wf, "trainer.total_training_steps=1", "trainer.critic_warmup=0"};
    if (run(self, yaml, node, 3))
        fail_msg("%s", df_last_error());
    yaml_of(yaml, sizeof yaml, "wf_global", "model");
    const char *global[] = {"trainer.total_training_steps=1", "trainer.critic_warmup=0",
                            "critic.cliprange_value=0.05", "critic.ppo_epochs=2",
                            "critic.loss_agg_mode=seq-mean-token-sum"};
    if (run(self, yaml, global, 5))
        fail_msg("%s", df_last_error());
    df_model *a = load("wf_node/global_step_1/critic"), *b = load("wf_global/global_step_1/critic"),
             *dflt = load("ref/global_step_1/critic"); /* step 1 of the run with the defaults */
    double d_same = df_test_max_param_diff(a, b), d_dflt = df_test_max_param_diff(a, dflt);
    print_message("node overrides vs global settings %.3g, vs defaults %.3g\n", d_same, d_dflt);
    assert_true(d_same == 0.0);
    assert_true(d_dflt > 1e-4); /* not rounding: other settings, another Adam step (~lr) */
    json_t *la = df_test_metrics(dir, "wf_node", false), *lb = df_test_metrics(dir, "wf_global", false);
    assert_true(df_test_metric(json_array_get(la, 0), "critic/vf_loss") == df_test_metric(json_array_get(lb, 0), "critic/vf_loss"));
    json_decref(la);
    json_decref(lb);
    df_model_free(a);
    df_model_free(b);
    df_model_free(dflt);
    df_comm_free(self);
}

/* |x - y| <= bound (plus double rounding) for metric `key` of step `step`. */
static void expect_within(const char *out, int step, const char *key, double x, double y, double bound)
{
    bound += df_tol_gamma(64, DF_U64) * fabs(y);
    print_message("%s step %d: %s %.9f (one rank %.9f, bound %.3g)\n", out, step, key, x, y, bound);
    if (!(fabs(x - y) <= bound))
        fail_msg("%s step %d: %s %.9g, one rank %.9g (bound %.3g)", out, step, key, x, y, bound);
}

/*
 * Run `out` against the one-rank run. The actor is the initial model for all three rollouts, so
 * their tokens are the same (unless a draw lies within the logits' rounding of a boundary, as in
 * test_dist_train: a chance of <= F per token): every step's scores and lengths agree but for the
 * order of a mean. At step 1 the critic is the initial one too, so its values differ by <= F
 * (tb_forward_bound of the value model) and everything computed from them by what follows:
 *   returns R = A + V of GAE (gamma 1, lambda 0.95, in double) telescope to <= F, plus their
 *   rounding to float; the raw advantages R - V to <= 2F;
 *   with d = R - V over the T response tokens: a = var(d) (unbiased) = T/(T-1) (mean d^2 - (mean d)^2),
 *   where mean d^2 = 2 vf_loss (step 1: the update's own values are <= F from `values`, and the
 *   value clip is idle) and mean d = returns/mean - values/mean; b = var(R) from explained_var =
 *   1 - a / (b + 1e-5). Perturbing T values by <= E moves a variance by <= 2 sqrt(var T/(T-1)) E
 *   + T/(T-1) E^2 and a standard deviation by <= sqrt(T/(T-1)) E, which bounds explained_var and
 *   the whitened advantages (A - mean) / sqrt(a + 1e-8);
 *   the critic's step-1 metrics: vf_loss = 0.5 mean d^2 moves by <= sqrt(2 vf_loss) E + E^2 / 2 with
 *   E = 2F, vpred_mean by <= F, and vf_clipfrac not at all (the predictions are <= F from `values`,
 *   far inside cliprange_value 0.2).
 * (A critic counting a replica's tokens twice moved explained_var by ~6e-5 relative here, below this
 * bound: that slip is not what these comparisons can catch.)
 */
static void same_as_one_rank(const char *out)
{
    json_t *ref = df_test_metrics(dir, "ref", false), *got = df_test_metrics(dir, out, false);
    const char *rollout[] = {"critic/score/mean", "critic/score/max", "response_length/mean",
                             "response_length/max"};
    for (int i = 0; i < 3; i++)
        for (size_t k = 0; k < sizeof rollout / sizeof *rollout; k++)
            expect_within(out, i + 1, rollout[k], df_test_metric(json_array_get(got, i), rollout[k]),
                          df_test_metric(json_array_get(ref, i), rollout[k]), 0);
    json_t *a1 = json_array_get(ref, 0), *b1 = json_array_get(got, 0);
    df_model *critic0 = load("model");
    assert_int_equal(df_model_to_value_model(&critic0, 1), 0); /* the head trainer.seed=1 draws */
    const double F = tb_forward_bound(critic0, 128 + 10, 1.0f);
    df_model_free(critic0);
    const double T = round(df_test_metric(a1, "response_length/mean") * 16), c = T / (T - 1);
    const double vf = df_test_metric(a1, "critic/vf_loss"),
                 md = df_test_metric(a1, "critic/returns/mean") - df_test_metric(a1, "critic/values/mean");
    const double ev = df_test_metric(a1, "critic/vf_explained_var");
    const double Rmax = fmax(fabs(df_test_metric(a1, "critic/returns/max")), fabs(df_test_metric(a1, "critic/returns/min")));
    const double ER = F + 2 * DF_U32 * Rmax, Ed = 2 * F + 2 * DF_U32 * Rmax;
    /* a from 2 vf_loss, whose own values are <= F from `values` */
    double a = c * (2 * vf - (2 * sqrt(2 * vf) * F + F * F) - md * md), b = a / (1 - ev) - 1e-5;
    double da = 2 * sqrt(a * c) * Ed + c * Ed * Ed, db = 2 * sqrt(b * c) * ER + c * ER * ER;
    assert_true(a > da && b > db);
    expect_within(out, 1, "critic/vf_explained_var", df_test_metric(b1, "critic/vf_explained_var"), ev,
                  (da + (1 - ev) * db) / (b - db + 1e-5));
    expect_within(out, 1, "critic/returns/max", df_test_metric(b1, "critic/returns/max"), df_test_metric(a1, "critic/returns/max"),
                  ER);
    expect_within(out, 1, "critic/returns/min", df_test_metric(b1, "critic/returns/min"), df_test_metric(a1, "critic/returns/min"),
                  ER);
    const double sd = sqrt(a) - sqrt(c) * Ed;
    const char *adv[] = {"critic/advantages/max", "critic/advantages/min"};
    for (int k = 0; k < 2; k++) {
        double y = df_test_metric(a1, adv[k]);
        expect_within(out, 1, adv[k], df_test_metric(b1, adv[k]), y,
                      (2 * Ed + fabs(y) * sqrt(c) * Ed) / sd + DF_U32 * fabs(y));
    }
    expect_within(out, 1, "critic/vf_loss", df_test_metric(b1, "critic/vf_loss"), vf, sqrt(2 * vf) * 2 * F + 2 * F * F);
    expect_within(out, 1, "critic/vpred_mean", df_test_metric(b1, "critic/vpred_mean"), df_test_metric(a1, "critic/vpred_mean"), F);
    expect_within(out, 1, "critic/vf_clipfrac", df_test_metric(b1, "critic/vf_clipfrac"), df_test_metric(a1, "critic/vf_clipfrac"),
                  0);
    json_decref(ref);
    json_decref(got);
}

/* Every rank trains the same job together: it runs, the critics stay in sync (the
   worker checks every step), the warmup holds, vf_explained_var is global, and the
   advantages, actor and critic are the one-rank run's. */
static void test_ppo_data_parallel(void **state)
{
    (void)state;
    if (df_comm_size(world) == 1) {
        skip();
        return;
    }
    char yaml[4096];
    yaml_of(yaml, sizeof yaml, "dp", "model");
    int rc = run(world, yaml, NULL, 0);
    if (rc)
        fail_msg("rank %d: %s", R, df_last_error());
    assert_int_equal(df_comm_barrier(world), 0);
    if (R == 0) {
        check_metrics("dp");
        same_as_one_rank("dp");
    }
}

/* Inputs on rank 0, the directory broadcast, then the one-rank run. */
static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || df_reward_register("test/digits", df_test_digit_share))
        return -1;
    R = df_comm_rank(world);
    if (!df_test_size_ok(df_comm_size(world)))
        return -1;
    if (df_test_shared_inputs(world, "df_ppo", 32, "test/digits", dir, sizeof dir))
        return -1;
    df_comm *self = NULL;
    if (df_comm_split(world, R, 0, &self))
        return -1;
    char yaml[4096];
    yaml_of(yaml, sizeof yaml, "ref", "model");
    if (R == 0 && run(self, yaml, NULL, 0)) {
        print_error("one-rank PPO run: %s\n", df_last_error());
        return -1;
    }
    df_comm_free(self);
    return df_comm_barrier(world);
}

static int teardown(void **state)
{
    (void)state;
    df_comm_barrier(world);
    if (R == 0)
        df_test_remove_tree(dir);
    df_comm_shutdown();
    return 0;
}

/* The critic on half as many DP ranks as the rest (ulysses_sequence_parallel_size 2): batches
   are redistributed to its layout and its model-parallel replicas compute the same update. */
static void test_ppo_critic_on_fewer_dp_ranks(void **state)
{
    (void)state;
    if (df_comm_size(world) % 2) {
        skip();
        return;
    }
    char yaml[4096];
    yaml_of(yaml, sizeof yaml, "critic_sp2", "model");
    const char *ovr[] = {"critic.ulysses_sequence_parallel_size=2"};
    int rc = run(world, yaml, ovr, 1);
    if (rc)
        fail_msg("rank %d: %s", R, df_last_error());
    assert_int_equal(df_comm_barrier(world), 0);
    if (R != 0)
        return;
    check_metrics("critic_sp2");
    same_as_one_rank("critic_sp2");
    json_t *lines = df_test_metrics(dir, "critic_sp2", false);
    for (size_t i = 0; i < json_array_size(lines); i++)
        assert_true(df_test_metric(json_array_get(lines, i), "perf/redistributed_bytes") > 0);
    json_decref(lines);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ppo_critic_warmup),
        cmocka_unit_test(test_critic_from_checkpoint_and_errors),
        cmocka_unit_test(test_initial_critic),
        cmocka_unit_test(test_critic_node_overrides),
        cmocka_unit_test(test_ppo_data_parallel),
        cmocka_unit_test(test_ppo_critic_on_fewer_dp_ranks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
