/*
 * test_kl_reward.c — algorithm.use_kl_in_reward: the penalty on a hand-made
 * batch (and split over the data-parallel ranks), the node order it needs
 * (built-in pipelines reordered, a workflow file refused), and GRPO steps with
 * the fixed and adaptive controllers, whose coefficient trajectory must be the
 * same on every rank and equal to the one-rank run's. A rank that fails
 * alone makes every rank return an error, with no hang.
 *
 * mpi-test: np 1 2
 * (as a plain ctest it runs with one rank.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include "tolerance.h"

#include "distflow/comm.h"
#include "distflow/reward.h"
#include "distflow/scheduler.h"
#include "workers/worker_internal.h"

#include <jansson.h>
#include <unistd.h>

static df_comm *world;
static int rank, size;
static char dir[256];

/*
 * Two responses (lengths 2 and 3), k1 penalty kl_t = old_t - ref_t:
 *   old    = [-1.0, -2.0 | -0.5, -1.2, -3.0 ]
 *   ref    = [-1.1, -2.1 | -0.5, -1.5, -3.06]
 *   kl     = [ 0.1,  0.1 |  0.0,  0.3,  0.06]
 *   scores = [ 0,    1   |  0,    0,    0.5 ]
 * beta = 0.1:  rewards = scores - 0.1 kl = [-0.01, 0.99 | 0, -0.03, 0.494]
 * per-sample token means 0.1 and 0.36 / 3 = 0.12 -> current_kl = (0.1 + 0.12) / 2 = 0.11
 * adaptive (target 0.1, horizon 10), n_steps = 2 responses:
 *   e = clip(0.11 / 0.1 - 1, -0.2, 0.2) = 0.1;  beta' = 0.1 (1 + 0.1 * 2 / 10) = 0.102
 * With two ranks, rank r holds response r only: the group mean is the same 0.11.
 */
static const int64_t k_off[] = {0, 2, 5};
static const float k_old[] = {-1.0f, -2.0f, -0.5f, -1.2f, -3.0f};
static const float k_ref[] = {-1.1f, -2.1f, -0.5f, -1.5f, -3.06f};
static const float k_scores[] = {0, 1, 0, 0, 0.5f};
static const float k_rewards[] = {-0.01f, 0.99f, 0, -0.03f, 0.494f};

/*
 * Bounds of the hand-computed values (df_tol_hand): the log-probs -1.1f, -2.1f, -1.2f, -3.06f
 * and beta 0.1f are float32 (cond beta (|old| + |ref|) + beta |kl| for a reward, sum |x| /
 * (n len) for the mean KL, e = kl / 0.1 - 1 carrying it to beta' = 0.1 (1 + e 2 / 10) with
 * a factor 0.2); a reward is float32, and so is the expected k_rewards (two roundings).
 */
static double reward_tol(int t)
{
    double want = fabs(k_rewards[t]), kl = fabs((double)k_old[t] - k_ref[t]);
    return df_tol_hand(0, 2 * want, 0.1 * (fabs(k_old[t]) + fabs(k_ref[t])) + 0.1 * kl, 1);
}

/* cond of the batch's mean KL: every log-prob's |x| / (n_samples len) */
static double mean_kl_cond(void)
{
    double c = 0;
    for (int i = 0; i < 2; i++)
        for (int64_t t = k_off[i]; t < k_off[i + 1]; t++)
            c += (fabs(k_old[t]) + fabs(k_ref[t])) / (2.0 * (double)(k_off[i + 1] - k_off[i]));
    return c;
}

/* Rows [first, first + n) of the hand-made batch (with their own offsets). */
static df_batch *hand_batch(int first, int n, bool with_ref)
{
    int64_t off[3] = {0};
    for (int i = 0; i < n; i++)
        off[i + 1] = off[i] + k_off[first + i + 1] - k_off[first + i];
    int64_t t0 = k_off[first];
    df_batch *b = df_batch_new(n);
    assert_non_null(b);
    assert_int_equal(df_batch_set_tok_f32(b, "token_level_scores", off, k_scores + t0), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "token_level_rewards", off, k_scores + t0), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "old_log_probs", off, k_old + t0), 0);
    if (with_ref)
        assert_int_equal(df_batch_set_tok_f32(b, "ref_log_prob", off, k_ref + t0), 0);
    return b;
}

static void test_penalty_hand_computed(void **state)
{
    (void)state;
    /* one rank: both rows; two ranks: row `rank` each (the DP split of current_kl) */
    int first = size == 2 ? rank : 0, n = size == 2 ? 1 : 2;
    df_batch *b = hand_batch(first, n, true);
    df_kl_ctrl *ad, *fx;
    assert_int_equal(df_kl_ctrl_create("adaptive", 0.1, 0.1, 10, &ad), 0);
    assert_int_equal(df_kl_ctrl_create("fixed", 0.1, 0.1, 10, &fx), 0);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_kl_reward_apply(ad, "kl", b, world, false, m), 0);
    const float *r = df_batch_column(b, "token_level_rewards")->data;
    for (int t = 0; t < k_off[first + n] - k_off[first]; t++)
        assert_near(r[t], k_rewards[k_off[first] + t], reward_tol(k_off[first] + t));
    const double kl_tol = df_tol_hand(0, 0, mean_kl_cond(), 1);
    const double beta_tol = df_tol_hand(0, 0, 0.2 * mean_kl_cond(), 1);
    assert_near(df_metrics_get(m, "actor/reward_kl_penalty", -1), 0.11, kl_tol);
    assert_near(df_metrics_get(m, "actor/reward_kl_penalty_coeff", -1), 0.1, 0); /* the beta used, a copy */
    assert_near(df_kl_ctrl_value(ad), 0.102, beta_tol);
    /* the scores are untouched; a fixed controller keeps beta */
    const float *sc = df_batch_column(b, "token_level_scores")->data;
    assert_near(sc[0], k_scores[k_off[first]], 0);
    assert_int_equal(df_kl_reward_apply(fx, "kl", b, world, false, m), 0);
    assert_near(df_kl_ctrl_value(fx), 0.1, 0);
    assert_near(df_metrics_get(m, "actor/reward_kl_penalty", -1), 0.11, kl_tol);
    df_batch_free(b);
    df_metrics_free(m);
    df_kl_ctrl_free(ad);
    df_kl_ctrl_free(fx);
}

/* A model-parallel replica holds a copy of another rank's rows and must not count them twice. */
static void test_penalty_replica_counted_once(void **state)
{
    (void)state;
    if (size != 2) {
        skip();
        return;
    }
    df_batch *b = hand_batch(0, 2, true); /* both ranks hold both rows; rank 1 is the replica */
    df_kl_ctrl *ad;
    assert_int_equal(df_kl_ctrl_create("adaptive", 0.1, 0.1, 10, &ad), 0);
    assert_int_equal(df_kl_reward_apply(ad, "kl", b, world, rank == 1, NULL), 0);
    /* n_steps 2, not 4: 0.1 (1 + 0.1 * 4 / 10) = 0.104 */
    assert_near(df_kl_ctrl_value(ad), 0.102, df_tol_hand(0, 0, 0.2 * mean_kl_cond(), 1));
    df_batch_free(b);
    df_kl_ctrl_free(ad);
}

static void test_penalty_errors(void **state)
{
    (void)state;
    df_kl_ctrl *c;
    assert_int_equal(df_kl_ctrl_create("fixed", 0.1, 0.1, 10, &c), 0);
    df_batch *b = hand_batch(0, 2, false);
    assert_error_mentions(df_kl_reward_apply(c, "kl", b, NULL, false, NULL), DF_EINVAL, "ref_log_prob");
    int64_t off[3] = {0, 3, 5}; /* lengths 3 and 2 instead of 2 and 3 */
    assert_int_equal(df_batch_set_tok_f32(b, "ref_log_prob", off, k_ref), 0);
    assert_error_mentions(df_kl_reward_apply(c, "kl", b, NULL, false, NULL), DF_EINVAL,
                          "sample 0 has 3 ref_log_prob but 2 token_level_scores");
    assert_int_equal(df_batch_set_tok_f32(b, "ref_log_prob", k_off, k_ref), 0);
    assert_error_mentions(df_kl_reward_apply(c, "kl2", b, NULL, false, NULL), DF_EINVAL, "'kl2'");
    df_batch_free(b);
    df_kl_ctrl_free(c);
}

/* A malformed batch on the last rank only: every rank returns an error, none waits in the gather. */
static void test_penalty_fails_on_one_rank(void **state)
{
    (void)state;
    if (size < 2) {
        skip();
        return;
    }
    bool bad = rank == size - 1;
    df_batch *b = hand_batch(0, 2, !bad); /* the bad rank's has no ref_log_prob */
    df_kl_ctrl *ad;
    assert_int_equal(df_kl_ctrl_create("adaptive", 0.1, 0.1, 10, &ad), 0);
    alarm(60); /* a hang ends the test here rather than at ctest's timeout */
    int rc = df_kl_reward_apply(ad, "kl", b, world, false, NULL);
    alarm(0);
    char want[128];
    snprintf(want, sizeof want, "1 other rank(s) of the data-parallel group (%d ranks) failed", size);
    if (bad)
        assert_error_mentions(rc, DF_EINVAL, "no per-token ref_log_prob column");
    else
        assert_error_mentions(rc, DF_EINTERNAL, want);
    assert_true(df_kl_ctrl_value(ad) == 0.1); /* not stepped anywhere */
    /* the ranks are still in step: the next call works on every rank */
    if (bad)
        assert_int_equal(df_batch_set_tok_f32(b, "ref_log_prob", k_off, k_ref), 0);
    alarm(60);
    rc = df_kl_reward_apply(ad, "kl", b, world, false, NULL);
    alarm(0);
    if (rc)
        fail_msg("rank %d: %s", rank, df_last_error());
    df_batch_free(b);
    df_kl_ctrl_free(ad);
}

/* ---- node order ---------------------------------------------------------------------------- */

static df_config *load(const char *yaml, const char *o1, const char *o2)
{
    const char *ov[2] = {o1, o2};
    return df_test_config(yaml, "kl.yaml", ov, o1 ? (o2 ? 2 : 1) : 0);
}

/* The node ids of the pipeline a config selects, in execution order, joined by spaces. */
static void order_of(const char *o1, const char *o2, char *out, size_t cap)
{
    df_config *cfg = load("actor_rollout_ref: {model: {path: /nonexistent}}\n"
                          "algorithm: {adv_estimator: grpo}\n",
                          o1, o2);
    const char *name;
    df_task_graph *g;
    assert_int_equal(df_pipeline_from_config(cfg, NULL, NULL, &name, &g), 0);
    df_node **order;
    int n;
    assert_int_equal(df_task_graph_topo_order(g, &order, &n), 0);
    out[0] = '\0';
    for (int i = 0; i < n; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? " " : "", order[i]->node_id);
    free(order);
    df_task_graph_free(g);
    df_config_free(cfg);
}

static void test_builtin_order(void **state)
{
    (void)state;
    char s[512];
    order_of(NULL, NULL, s, sizeof s); /* the default graph is siiRL's */
    assert_string_equal(s, "rollout_actor function_reward calculate_advantages actor_old_log_prob "
                           "reference_log_prob actor_train");
    order_of("algorithm.use_kl_in_reward=true", NULL, s, sizeof s);
    assert_string_equal(s, "rollout_actor function_reward actor_old_log_prob reference_log_prob "
                           "calculate_advantages actor_train");
    order_of("algorithm.use_kl_in_reward=true", "algorithm.adv_estimator=gae", s, sizeof s);
    assert_string_equal(s,
                        "rollout_actor function_reward compute_value actor_old_log_prob reference_log_prob "
                        "calculate_advantages actor_train critic_train");
    order_of("algorithm.use_kl_in_reward=true", "algorithm.workflow_type=dapo", s, sizeof s);
    assert_string_equal(s, "rollout_actor function_reward dynamic_sampling actor_old_log_prob "
                           "reference_log_prob calculate_advantages actor_train");
    /* ReMax: the greedy pass is a node right after the reward node, so it re-runs only rollout and reward */
    order_of("algorithm.adv_estimator=remax", NULL, s, sizeof s);
    assert_string_equal(s, "rollout_actor function_reward reward_baseline calculate_advantages actor_old_log_prob "
                           "reference_log_prob actor_train");
    order_of("algorithm.use_kl_in_reward=true", "algorithm.adv_estimator=remax", s, sizeof s);
    assert_string_equal(s, "rollout_actor function_reward reward_baseline actor_old_log_prob reference_log_prob "
                           "calculate_advantages actor_train");
    /* before DAPO's sampler, so each refill gets its baselines from its own greedy pass */
    order_of("algorithm.workflow_type=dapo", "algorithm.adv_estimator=remax", s, sizeof s);
    assert_string_equal(s, "rollout_actor function_reward reward_baseline dynamic_sampling calculate_advantages "
                           "actor_old_log_prob reference_log_prob actor_train");
    /* the optimal token baseline reads old_log_probs and sum_pi_squared: verl's order too */
    order_of("algorithm.adv_estimator=optimal_token_baseline", NULL, s, sizeof s);
    assert_string_equal(s, "rollout_actor function_reward actor_old_log_prob reference_log_prob "
                           "calculate_advantages actor_train");
    /* verl's rollout correction weighs and rejects by old_log_probs before the advantage */
    order_of("algorithm.rollout_correction.rollout_rs=token_k2", "algorithm.rollout_correction.rollout_rs_threshold=1",
             s, sizeof s);
    assert_string_equal(s, "rollout_actor function_reward actor_old_log_prob reference_log_prob "
                           "calculate_advantages actor_train");
    order_of("algorithm.rollout_correction.rollout_is=token", NULL, s, sizeof s);
    assert_string_equal(s, "rollout_actor function_reward actor_old_log_prob reference_log_prob "
                           "calculate_advantages actor_train");
    order_of("algorithm.rollout_correction.bypass_mode=true", NULL, s, sizeof s); /* siiRL's order stays */
    assert_string_equal(s, "rollout_actor function_reward calculate_advantages actor_old_log_prob "
                           "reference_log_prob actor_train");
    order_of("algorithm.adv_estimator=tir_optimal_token_baseline", "algorithm.workflow_type=dapo", s, sizeof s);
    assert_string_equal(s, "rollout_actor function_reward dynamic_sampling actor_old_log_prob "
                           "reference_log_prob calculate_advantages actor_train");
}

static void write_workflow(const char *name, const char *adv_dep, const char *old_dep)
{
    char text[1024], path[512];
    snprintf(text, sizeof text,
             "dag_id: kl_wf\n"
             "nodes:\n"
             "  - {node_id: rollout, node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
             "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout]}\n"
             "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [%s]}\n"
             "  - {node_id: old, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"
             "     dependencies: [%s]}\n"
             "  - {node_id: ref, node_type: MODEL_TRAIN, node_role: REFERENCE, dependencies: [old]}\n"
             "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [%s]}\n",
             adv_dep, old_dep, !strcmp(adv_dep, "ref") ? "adv" : "ref");
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (rank == 0)
        assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
    assert_int_equal(df_comm_barrier(world), 0);
}

/* siiRL's order in a workflow file: setup fails naming the file and the advantage node; verl's works. */
static void test_workflow_order(void **state)
{
    (void)state;
    write_workflow("siirl_order.yaml", "reward", "adv");
    write_workflow("verl_order.yaml", "ref", "reward");
    char yaml[1024], wf[600];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], train_batch_size: 8}\n"
             "actor_rollout_ref: {model: {path: %s/model}, actor: {ppo_mini_batch_size: 8}}\n"
             "algorithm: {use_kl_in_reward: true}\n"
             "trainer: {logger: [], default_local_dir: %s/wf_out}\n",
             dir, dir, dir);
    snprintf(wf, sizeof wf, "dag.workflow_path=%s/siirl_order.yaml", dir);
    df_config *cfg = load(yaml, wf, NULL);
    df_dag_worker *w = NULL;
    int rc = df_dag_worker_create(cfg, world, &w);
    assert_null(w);
    char want[600];
    snprintf(want, sizeof want, "workflow file '%s/siirl_order.yaml': algorithm.use_kl_in_reward=true", dir);
    assert_error_mentions(rc, DF_EINVAL, want);
    assert_non_null(strstr(df_last_error(),
                           "node 'adv' (ADVANTAGE) does not depend on the old-log-prob node "
                           "(role ACTOR, only_forward_compute: true) and the REFERENCE node"));
    assert_non_null(strstr(df_last_error(), "command line: dag.workflow_path"));
    df_config_free(cfg);
    /* the same file without the KL in the reward plans fine; verl's order plans with it */
    const char *name;
    df_task_graph *g;
    cfg = load(yaml, wf, "algorithm.use_kl_in_reward=false");
    assert_int_equal(df_pipeline_from_config(cfg, NULL, NULL, &name, &g), 0);
    df_task_graph_free(g);
    df_config_free(cfg);
    /* the optimal token baseline needs the old log-probs first: refused as well, naming the estimator */
    cfg = load(yaml, wf, "algorithm={use_kl_in_reward: false, adv_estimator: optimal_token_baseline}");
    assert_error_mentions(df_pipeline_from_config(cfg, NULL, NULL, &name, &g), DF_EINVAL,
                          "algorithm.adv_estimator=optimal_token_baseline reads old_log_probs and sum_pi_squared, "
                          "but node 'adv' (ADVANTAGE) does not depend on the old-log-prob node (role ACTOR, "
                          "only_forward_compute: true);");
    df_config_free(cfg);
    snprintf(wf, sizeof wf, "dag.workflow_path=%s/verl_order.yaml", dir);
    cfg = load(yaml, wf, NULL);
    assert_int_equal(df_pipeline_from_config(cfg, NULL, NULL, &name, &g), 0);
    assert_string_equal(df_task_graph_get_node(g, "adv")->dependencies[0], "ref");
    df_task_graph_free(g);
    df_config_free(cfg);
}

/* ---- GRPO steps ---------------------------------------------------------------------------- */

#define STEPS 3
#define GLOBAL_BATCH (4 * 4) /* train_batch_size x rollout.n responses per step */

typedef struct {
    double kl[STEPS], coeff[STEPS], score[STEPS], rewards[STEPS];
    double final_beta;
} trajectory;

/* A check run on the worker after its last step (every rank). */
typedef void (*probe_fn)(df_dag_worker *w);

static void train(df_comm *comm, const char *out, const char *ctrl, trajectory *tr, probe_fn probe);

/* The metrics of one run (rank 0 reads what it wrote). */
static void read_trajectory(const char *out, trajectory *tr)
{
    json_t *lines = df_test_metrics(dir, out, false), *o;
    size_t i;
    assert_int_equal(json_array_size(lines), STEPS);
    json_array_foreach(lines, i, o) {
        const char *keys[] = {"actor/reward_kl_penalty", "actor/reward_kl_penalty_coeff", "critic/score/mean",
                              "critic/rewards/mean", "actor/pg_loss"};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            if (!json_is_number(json_object_get(o, keys[k])))
                fail_msg("%s step %d: %s missing", out, (int)i + 1, keys[k]);
        tr->kl[i] = json_number_value(json_object_get(o, keys[0]));
        tr->coeff[i] = json_number_value(json_object_get(o, keys[1]));
        tr->score[i] = json_number_value(json_object_get(o, keys[2]));
        tr->rewards[i] = json_number_value(json_object_get(o, keys[3]));
    }
    json_decref(lines);
}

/* One more step's batch through the worker's own nodes' pieces, up to the old and reference
   log-probs (the advantage node's input). */
static df_batch *probe_batch(df_dag_worker *w)
{
    df_batch *p = NULL, *b = NULL;
    const df_node *rollout = df_task_graph_get_node(w->graph, "rollout_actor");
    assert_int_equal(df_worker_next_prompts(w, 0, &p), 0);
    assert_int_equal(df_worker_generate(w, rollout, p, w->step, 0, &b), 0);
    assert_int_equal(df_worker_reward(w, NULL, b, NULL), 0);
    assert_int_equal(df_actor_compute_log_prob(w->actor.model, b, "old_log_probs", NULL), 0);
    assert_int_equal(df_actor_compute_log_prob(w->reference.model, b, "ref_log_prob", NULL), 0);
    df_batch_free(p);
    return b;
}

/*
 * After the run: the rewards the advantage node would use are scores - beta * (old - ref)
 * token by token, with the controller's current beta. The code does the same double
 * operations, so the values are equal, up to a compiler contracting s - beta kl into an
 * fma (clang's default), which moves the double by an ulp of the product and the float32
 * result by at most its rounding.
 */
static void probe_penalty(df_dag_worker *w)
{
    df_batch *b = probe_batch(w);
    const df_node *adv = df_task_graph_get_node(w->graph, "calculate_advantages");
    double beta = df_kl_ctrl_value(w->advantage.kl_ctrl);
    assert_int_equal(df_worker_kl_in_reward(w, adv, b, NULL), 0);
    const df_column *sc = df_batch_column(b, "token_level_scores"),
                    *rw = df_batch_column(b, "token_level_rewards");
    const float *s = sc->data, *r = rw->data, *old = df_batch_column(b, "old_log_probs")->data,
                *ref = df_batch_column(b, "ref_log_prob")->data;
    double moved = 0;
    for (int64_t t = 0; t < sc->offsets[df_batch_size(b)]; t++) {
        double pen = (double)(float)beta * ((double)old[t] - (double)ref[t]);
        float want = (float)((double)s[t] - pen);
        assert_near(r[t], want, DF_U32 * (fabs(r[t]) + fabs(want)) + 2 * DF_U64 * fabs(pen));
        moved += fabs((double)r[t] - s[t]);
    }
    assert_true(moved > 0); /* the policy left the reference: the penalty is not zero */
    df_batch_free(b);
}

/*
 * After the run: the advantage node itself (DAGWorker.compute_advantage) on one more step's
 * batch puts the KL penalty into token_level_rewards and computes the advantages from those
 * rewards, not from the scores: its advantages are grpo's of the rewards column it wrote (the
 * same function on the same floats: equal bits) and differ from grpo's of the scores.
 */
static void probe_advantage(df_dag_worker *w)
{
    df_batch *b = probe_batch(w);
    df_node_fn fn = NULL;
    assert_int_equal(df_exec_resolve("DAGWorker.compute_advantage", &fn), 0);
    df_node_ctx ctx = {.worker = w, .node = df_task_graph_get_node(w->graph, "calculate_advantages"),
                       .step = w->step};
    df_node_output out = {0};
    assert_int_equal(fn(&ctx, b, &out), 0);
    assert_null(out.batch);
    const df_column *rw = df_batch_column(b, "token_level_rewards"), *sc = df_batch_column(b, "token_level_scores"),
                    *uid = df_batch_column(b, "uid");
    int64_t n = df_batch_size(b), nt = rw->offsets[n];
    int64_t *group = malloc((size_t)n * sizeof *group);
    float *want = malloc((size_t)(4 * nt + 1) * sizeof *want), *ret = want + nt, *from_scores = ret + nt,
          *ret2 = from_scores + nt;
    assert_true(group && want);
    assert_int_equal(df_group_ids((const char *const *)uid->data, n, group), 0);
    df_adv_input in = {.n = n, .offsets = rw->offsets, .token_level_rewards = rw->data, .group = group,
                       .norm_adv_by_std_in_grpo = true, .epsilon = 1e-6f};
    assert_int_equal(df_adv_grpo(&in, want, ret), 0);
    in.token_level_rewards = sc->data;
    assert_int_equal(df_adv_grpo(&in, from_scores, ret2), 0);
    const float *adv = df_batch_column(b, "advantages")->data;
    double apart = 0;
    for (int64_t t = 0; t < nt; t++) {
        if (adv[t] != want[t])
            fail_msg("token %lld: advantage %.9g, grpo of the rewards %.9g", (long long)t, adv[t], want[t]);
        apart += fabs((double)adv[t] - from_scores[t]);
    }
    assert_true(apart > 0); /* the penalty changed the advantages: reading the scores would show */
    free(group);
    free(want);
    df_batch_free(b);
}

/*
 * A multi-turn batch (response_mask: every third token appended) through the advantage node:
 * appended tokens keep their score (no KL penalty) and get no advantage; the model tokens'
 * advantages are grpo's of the rewards column the node wrote (equal bits).
 */
static void probe_masked(df_dag_worker *w)
{
    df_batch *b = probe_batch(w);
    const df_column *sc = df_batch_column(b, "token_level_scores");
    const int64_t n = df_batch_size(b), nt = sc->offsets[n];
    int32_t *mask = malloc((size_t)(nt + 1) * sizeof *mask);
    int64_t appended = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t t = sc->offsets[i]; t < sc->offsets[i + 1]; t++) {
            mask[t] = (t - sc->offsets[i]) % 3 != 1 || t == sc->offsets[i + 1] - 1;
            appended += !mask[t];
        }
    assert_true(appended > 0);
    assert_int_equal(df_batch_set_tok_i32(b, "response_mask", sc->offsets, mask), 0);
    df_node_fn fn = NULL;
    assert_int_equal(df_exec_resolve("DAGWorker.compute_advantage", &fn), 0);
    df_node_ctx ctx = {.worker = w, .node = df_task_graph_get_node(w->graph, "calculate_advantages"),
                       .step = w->step};
    df_node_output out = {0};
    assert_int_equal(fn(&ctx, b, &out), 0);
    const df_column *rw = df_batch_column(b, "token_level_rewards"), *uid = df_batch_column(b, "uid");
    const float *sv = df_batch_column(b, "token_level_scores")->data, *r = rw->data;
    const float *adv = df_batch_column(b, "advantages")->data;
    int64_t *group = malloc((size_t)n * sizeof *group);
    float *want = malloc((size_t)(2 * nt + 1) * sizeof *want), *ret = want + nt;
    assert_int_equal(df_group_ids((const char *const *)uid->data, n, group), 0);
    df_adv_input in = {.n = n, .offsets = rw->offsets, .token_level_rewards = r, .group = group,
                       .norm_adv_by_std_in_grpo = true, .epsilon = 1e-6f};
    assert_int_equal(df_adv_grpo(&in, want, ret), 0);
    double moved = 0;
    for (int64_t t = 0; t < nt; t++) {
        if (!mask[t]) {
            assert_true(r[t] == sv[t]);
            assert_true(adv[t] == 0.0f);
        } else {
            assert_true(adv[t] == want[t]);
            moved += fabs((double)r[t] - sv[t]);
        }
    }
    assert_true(moved > 0); /* model tokens are penalised */
    free(group);
    free(want);
    free(mask);
    df_batch_free(b);
}

static void probe_penalty_and_advantage(df_dag_worker *w)
{
    probe_penalty(w);
    probe_advantage(w);
    probe_masked(w);
}

/*
 * After the run, on every rank: one more step's batch through the advantage node's KL
 * penalty. The KL the controller steps with must be the mean over the whole data-parallel
 * batch of the per-sample token means of old - ref (computed here from the gathered
 * per-rank sums), and the new beta beta (1 + clip(kl / 0.025 - 1, +-0.2) N / 100) with N
 * the global sample count. Both sides sum the same doubles (per-sample means of float32
 * differences, in the same token order) in other groupings: within twice gamma_{N + 2 size}
 * of sum |mean_i| / N; beta' carries that by beta 0.16 / 0.025 (clip is 1-Lipschitz) plus
 * its own few roundings.
 */
static void probe_reduction(df_dag_worker *w)
{
    df_batch *b = probe_batch(w);
    const df_node *adv = df_task_graph_get_node(w->graph, "calculate_advantages");
    const df_column *old = df_batch_column(b, "old_log_probs"), *ref = df_batch_column(b, "ref_log_prob");
    const float *o = old->data, *f = ref->data;
    double mine[3] = {0, 0, (double)df_batch_size(b)}; /* sum of means, sum of |means|, count */
    for (int64_t i = 0; i < df_batch_size(b); i++) {
        int64_t a = old->offsets[i], e = old->offsets[i + 1];
        double s = 0;
        for (int64_t t = a; t < e; t++)
            s += (double)o[t] - (double)f[t];
        double mean = e > a ? s / (double)(e - a) : 0.0;
        mine[0] += mean, mine[1] += fabs(mean);
    }
    double all[8 * 3], tot[3] = {0};
    assert_true(size <= 8);
    assert_int_equal(df_comm_allgather(world, mine, sizeof mine, all), 0);
    for (int r = 0; r < size; r++)
        for (int k = 0; k < 3; k++)
            tot[k] += all[3 * r + k];
    assert_true(tot[2] == GLOBAL_BATCH); /* a step's batch: the global sample count the controller needs */
    const double kl = tot[0] / tot[2];
    const double kl_tol = 2 * df_tol_gamma(tot[2] + 2 * size + 4, DF_U64) * tot[1] / tot[2];
    df_metrics *m = df_metrics_new();
    const double beta = df_kl_ctrl_value(w->advantage.kl_ctrl);
    assert_int_equal(df_worker_kl_in_reward(w, adv, b, m), 0);
    assert_near(df_metrics_get(m, "actor/reward_kl_penalty", NAN), kl, kl_tol);
    assert_near(df_metrics_get(m, "actor/reward_kl_penalty_coeff", NAN), beta, 0);
    const double e = fmin(fmax(kl / 0.025 - 1.0, -0.2), 0.2);
    assert_near(df_kl_ctrl_value(w->advantage.kl_ctrl), beta * (1.0 + e * GLOBAL_BATCH / 100.0),
                beta * (GLOBAL_BATCH / 100.0 / 0.025 * kl_tol + df_tol_gamma(8, DF_U64)));
    print_message("rank %d: probe KL %.9g over %g samples, beta %.9f -> %.9f\n", rank, kl, tot[2], beta,
                  df_kl_ctrl_value(w->advantage.kl_ctrl));
    df_metrics_free(m);
    df_batch_free(b);
}

static void train(df_comm *comm, const char *out, const char *ctrl, trajectory *tr, probe_fn probe)
{
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
             "       shuffle: false, max_prompt_length: 128, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.02, weight_decay: 0.0}, ppo_mini_batch_size: 4,\n"
             "          ppo_micro_batch_size_per_gpu: 8}\n"
             "  rollout: {n: 4, log_prob_micro_batch_size_per_gpu: 8}\n"
             "  ref: {log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo, use_kl_in_reward: true, kl_penalty: kl,\n"
             "            kl_ctrl: {type: %s, kl_coef: 0.5, target_kl: 0.025, horizon: 100}}\n"
             "trainer: {total_training_steps: %d, save_freq: -1, test_freq: -1, logger: [],\n"
             "          default_local_dir: %s/%s}\n",
             dir, dir, ctrl, STEPS, dir, out);
    df_config *cfg = load(yaml, NULL, NULL);
    df_dag_worker *w = NULL;
    int rc = df_dag_worker_create(cfg, comm, &w);
    if (!rc)
        rc = df_dag_worker_fit(w);
    if (rc)
        fail_msg("rank %d: %s", rank, df_last_error());
    tr->final_beta = df_kl_ctrl_value(w->advantage.kl_ctrl);
    if (probe)
        probe(w);
    df_dag_worker_free(w);
    df_config_free(cfg);
    assert_int_equal(df_comm_barrier(comm), 0);
    if (df_comm_rank(comm) == 0)
        read_trajectory(out, tr);
}

/* The coefficient every rank holds after the run, gathered: all equal. */
static void expect_same_on_every_rank(double beta)
{
    double all[8];
    assert_true(size <= 8);
    assert_int_equal(df_comm_allgather(world, &beta, sizeof beta, all), 0);
    for (int r = 1; r < size; r++)
        if (all[r] != all[0])
            fail_msg("rank %d ends with beta %.17g, rank 0 with %.17g", r, all[r], all[0]);
}

static void test_grpo_fixed(void **state)
{
    (void)state;
    trajectory tr;
    train(world, "fixed", "fixed", &tr, probe_penalty_and_advantage);
    expect_same_on_every_rank(tr.final_beta);
    assert_true(tr.final_beta == 0.5);
    if (rank != 0)
        return;
    for (int i = 0; i < STEPS; i++) {
        assert_near(tr.coeff[i], 0.5, 0);
        print_message("fixed step %d: reward_kl_penalty %.6g score %.6f rewards %.6f\n", i + 1, tr.kl[i],
                      tr.score[i], tr.rewards[i]);
    }
    /* step 1: the actor is the reference: the reference's log-probs are the actor's, computed
       by the same code on the same batch and weights, so the KL is exactly 0 and the rewards
       exactly the scores; afterwards the rewards move off the scores (thresholds far below
       the move of an optimizer step, whose Adam update is up to lr = 0.02 per parameter) */
    assert_near(tr.kl[0], 0, 0);
    assert_near(tr.rewards[0], tr.score[0], 0);
    for (int i = 1; i < STEPS; i++) {
        assert_true(fabs(tr.kl[i]) > 1e-6);
        assert_true(fabs(tr.rewards[i] - tr.score[i]) > 1e-6);
    }
}

/* metrics.jsonl prints %.10g: a logged number is within 5e-10 of the computed one, relatively */
#define LOGGED 5e-10

/* beta_{k+1} = beta_k (1 + clip(kl_k / 0.025 - 1, -0.2, 0.2) * 16 / 100), from the logged kl:
   a logged kl off by LOGGED |kl| moves the factor by 0.16 / 0.025 times that (clip is
   1-Lipschitz), relative to the factor; the logged coefficient is itself rounded by LOGGED */
static void expect_adaptive(const trajectory *tr)
{
    double beta = 0.5, drift = 0; /* drift: relative error of beta recomputed from logged kls */
    for (int i = 0; i < STEPS; i++) {
        assert_near(tr->coeff[i], beta, beta * (LOGGED + drift + df_tol_gamma(8 * (i + 1), DF_U64)));
        double e = fmin(fmax(tr->kl[i] / 0.025 - 1.0, -0.2), 0.2), f = 1.0 + e * GLOBAL_BATCH / 100.0;
        drift += GLOBAL_BATCH / 100.0 / 0.025 * LOGGED * fabs(tr->kl[i]) / f;
        beta *= f;
    }
    assert_near(tr->final_beta, beta, beta * (drift + df_tol_gamma(8 * (STEPS + 1), DF_U64)));
}

static void test_grpo_adaptive(void **state)
{
    (void)state;
    trajectory tr, one;
    /* the probe checks every rank's controller step against the mean of the gathered batch */
    train(world, "adaptive", "adaptive", &tr, probe_reduction);
    expect_same_on_every_rank(tr.final_beta);
    /* rank 0 alone (the reference run) */
    df_comm *self = NULL;
    assert_int_equal(df_comm_split(world, rank, 0, &self), 0);
    if (rank == 0 && size > 1)
        train(self, "adaptive_1rank", "adaptive", &one, NULL);
    df_comm_free(self);
    assert_int_equal(df_comm_barrier(world), 0);
    if (rank != 0)
        return;
    /* step 1 has no KL: the error is clipped to -0.2, beta 0.5 -> 0.5 (1 - 0.2 * 16 / 100) = 0.484,
       a few double roundings off that %.10g prints as 0.484 */
    assert_near(tr.coeff[1], 0.484, 0);
    expect_adaptive(&tr);
    for (int i = 0; i < STEPS; i++)
        print_message("adaptive step %d: reward_kl_penalty %.6g coeff %.9f\n", i + 1, tr.kl[i], tr.coeff[i]);
    if (size == 1)
        return;
    /* Until the first optimizer step the two runs hold the same actor: step 1's KL is 0 in both
       and step 2's coefficient depends on nothing else. After it they need not agree to any
       rounding bound: Adam's first update is lr g / (|g| + eps), +-lr for every gradient above
       eps, so a gradient that is 0 up to rounding (a sum that cancels) moves its parameter by
       +-0.02 in a direction set by the summation order, and the next rollout samples from the
       moved policy. The data-parallel reduction itself is checked by probe_reduction. */
    assert_near(one.kl[0], tr.kl[0], 0);
    for (int i = 0; i < 2; i++)
        assert_near(one.coeff[i], tr.coeff[i], 0);
}

static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || df_reward_register("test/digits", df_test_digit_share))
        return -1;
    rank = df_comm_rank(world);
    size = df_comm_size(world);
    if (!df_test_size_ok(size))
        return -1;
    return df_test_shared_inputs(world, "df_klrew", 64, "test/digits", dir, sizeof dir);
}

static int teardown(void **state)
{
    (void)state;
    df_comm_barrier(world);
    if (rank == 0)
        df_test_remove_tree(dir);
    df_comm_shutdown();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_penalty_hand_computed),
        cmocka_unit_test(test_penalty_replica_counted_once),
        cmocka_unit_test(test_penalty_errors),
        cmocka_unit_test(test_penalty_fails_on_one_rank),
        cmocka_unit_test(test_builtin_order),
        cmocka_unit_test(test_workflow_order),
        cmocka_unit_test(test_grpo_fixed),
        cmocka_unit_test(test_grpo_adaptive),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
